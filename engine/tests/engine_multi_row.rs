//! Multi-row mutations: several rows of one region written atomically — all or none, under
//! conditions on any row of the region, visible to readers all at once, replayed from the log
//! all at once — and refused when the rows lie in more than one region.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use cellar_engine::*;
use common::*;

fn table(te: &TestEngine, splits: &[&str]) -> Table {
    let desc = TableDescriptor::new("t").family(FamilyDescriptor::new("f"));
    te.engine()
        .create_table_with_splits(desc, splits.iter().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect())
        .unwrap();
    te.table("t")
}

#[test]
fn all_rows_are_written_or_none() {
    let te = TestEngine::new(1000);
    let t = table(&te, &[]);
    let m = MultiRowMutation::new().row(put_row("a1", "x")).row(put_row("a2", "y")).row(put_row("a3", "z"));
    assert!(t.mutate_rows(m).unwrap());
    assert_eq!(rows(&t, Scan::new()), ["a1", "a2", "a3"]);
    // Deletes and puts of different rows in one step: a move from a1 to b1.
    let mv = MultiRowMutation::new()
        .row(RowMutations::new("a1").with(Delete::new("a1")))
        .row(put_row("b1", "x"))
        .row(RowMutations::new("a2").with(Delete::new("a2")).with(Put::new("a2").add("f", "q", "y2")));
    assert!(t.mutate_rows(mv).unwrap());
    assert_eq!(rows(&t, Scan::new()), ["a2", "a3", "b1"]);
    assert_eq!(value(&t, "a2").as_deref(), Some("y2"));
    // A bad mutation in any row fails the whole, before anything is written.
    let bad = MultiRowMutation::new()
        .row(put_row("c1", "x"))
        .row(RowMutations::new("c2").with(Put::new("c2").add("nofamily", "q", "x")));
    assert!(matches!(t.mutate_rows(bad), Err(Error::FamilyNotFound { .. })));
    let wrong_row = MultiRowMutation::new()
        .row(put_row("c1", "x"))
        .row(RowMutations::new("c2").with(Put::new("c3").add("f", "q", "x")));
    assert!(matches!(t.mutate_rows(wrong_row), Err(Error::InvalidArgument { .. })));
    assert!(matches!(t.mutate_rows(MultiRowMutation::new()), Err(Error::InvalidArgument { .. })));
    assert_eq!(rows(&t, Scan::new()), ["a2", "a3", "b1"], "nothing of the failed mutations was written");
}

#[test]
fn a_failing_condition_writes_nothing() {
    let te = TestEngine::new(1000);
    let t = table(&te, &[]);
    t.put(Put::new("lock").add("f", "q", "v1")).unwrap();
    let write = |expected: &str| {
        MultiRowMutation::new()
            .row(put_row("r1", expected))
            .row(put_row("r2", expected))
            .condition(RowCondition::if_value("lock", "f", "q", CompareOp::Equal, expected.to_string()))
    };
    assert!(!t.mutate_rows(write("v0")).unwrap(), "the lock row holds v1");
    assert_eq!(rows(&t, Scan::new()), ["lock"], "nothing was written");
    assert!(t.mutate_rows(write("v1")).unwrap());
    assert_eq!((value(&t, "r1"), value(&t, "r2")), (Some("v1".into()), Some("v1".into())));
    // Every condition must hold: one failing among several fails the whole.
    let two =
        write("v1").row(put_row("r3", "x")).condition(RowCondition::if_value("r1", "f", "q", CompareOp::Greater, "v1"));
    assert!(!t.mutate_rows(two).unwrap());
    assert_eq!(value(&t, "r3"), None);
}

#[test]
fn conditions_read_rows_other_than_the_mutated_ones() {
    let te = TestEngine::new(1000);
    let t = table(&te, &[]);
    // Create-if-absent: a marker row that no write touches guards the group.
    let create = || {
        MultiRowMutation::new()
            .row(put_row("order:1:head", "new"))
            .row(put_row("order:1:line:1", "apple"))
            .condition(RowCondition::if_absent("order:1:tombstone", "f", "q"))
    };
    assert!(t.mutate_rows(create()).unwrap());
    t.put(Put::new("order:1:tombstone").add("f", "q", "deleted")).unwrap();
    t.delete(Delete::new("order:1:line:1")).unwrap();
    assert!(!t.mutate_rows(create()).unwrap(), "the tombstone exists");
    assert_eq!(value(&t, "order:1:line:1"), None);
    // A value condition on one row and an absence condition on another, both holding.
    let m = MultiRowMutation::new()
        .row(put_row("order:1:head", "paid"))
        .condition(RowCondition::if_value("order:1:tombstone", "f", "q", CompareOp::Equal, "deleted"))
        .condition(RowCondition::if_absent("order:1:line:1", "f", "q"));
    assert!(t.mutate_rows(m).unwrap());
    assert_eq!(value(&t, "order:1:head").as_deref(), Some("paid"));
    // A condition alone on a row, with the mutations elsewhere: `NotEqual` on a missing cell fails.
    let m = MultiRowMutation::new().row(put_row("order:1:head", "shipped")).condition(RowCondition::if_value(
        "order:1:line:9",
        "f",
        "q",
        CompareOp::NotEqual,
        "x",
    ));
    assert!(!t.mutate_rows(m).unwrap());
    assert_eq!(value(&t, "order:1:head").as_deref(), Some("paid"));
}

#[test]
fn rows_of_two_regions_are_refused() {
    let te = TestEngine::new(1000);
    let t = table(&te, &["m"]);
    let m = MultiRowMutation::new().row(put_row("a", "x")).row(put_row("z", "x"));
    assert!(matches!(t.mutate_rows(m), Err(Error::RowsSpanRegions { .. })));
    // A condition's row counts too.
    let m = MultiRowMutation::new()
        .row(put_row("a", "x"))
        .row(put_row("b", "x"))
        .condition(RowCondition::if_absent("y", "f", "q"));
    assert!(matches!(t.mutate_rows(m), Err(Error::RowsSpanRegions { .. })));
    assert!(rows(&t, Scan::new()).is_empty(), "nothing was written");
    // After a split, rows that shared a region may not any more.
    let m = || MultiRowMutation::new().row(put_row("n1", "x")).row(put_row("p1", "x"));
    assert!(t.mutate_rows(m()).unwrap());
    te.engine().split("t", Some(b"p")).unwrap();
    assert!(matches!(t.mutate_rows(m()), Err(Error::RowsSpanRegions { .. })));
}

#[test]
fn a_multi_row_mutation_replays_from_the_log_whole() {
    let mut te = TestEngine::replaying(1000);
    let t = table(&te, &[]);
    let rows_of = |g: usize| (0..20).map(move |i| format!("g{g}:{i:02}"));
    for g in 0..5 {
        let m = rows_of(g).fold(MultiRowMutation::new(), |m, r| m.row(put_row(&r, &format!("gen{g}"))));
        assert!(t.mutate_rows(m).unwrap());
    }
    let refused = MultiRowMutation::new().row(put_row("g9:00", "x")).condition(RowCondition::if_value(
        "g0:00",
        "f",
        "q",
        CompareOp::Equal,
        "other",
    ));
    assert!(!t.mutate_rows(refused).unwrap());
    drop(t);
    te.reopen();
    let t = te.table("t");
    let want: Vec<String> = (0..5).flat_map(rows_of).collect();
    assert_eq!(rows(&t, Scan::new()), want);
    for g in 0..5 {
        for r in rows_of(g) {
            assert_eq!(value(&t, &r), Some(format!("gen{g}")), "{r}");
        }
    }
}

/// Writers rewrite a group of rows, each time with one conditional mutation that moves every
/// row to the next generation; readers scan the group and get its rows while they do, and
/// flushes move data to files meanwhile. A scan sees one generation in every row, and no
/// reader ever sees a generation go back.
#[test]
fn readers_see_a_multi_row_mutation_whole() {
    const ROWS: usize = 8;
    let te = TestEngine::new(1000);
    let t = table(&te, &["grp:", "grq"]);
    let row = |i: usize| format!("grp:{i}");
    let gen_of = |r: &RowResult| -> u64 {
        let v = r.value(b"f", b"q").expect("every row of the group has a value");
        std::str::from_utf8(v).unwrap().parse().unwrap()
    };
    let write = |from: Option<u64>, to: u64| {
        let mut m = (0..ROWS).fold(MultiRowMutation::new(), |m, i| m.row(put_row(&row(i), &to.to_string())));
        m = m.condition(match from {
            None => RowCondition::if_absent(row(0), "f", "q"),
            Some(g) => RowCondition::if_value(row(0), "f", "q", CompareOp::Equal, g.to_string()),
        });
        t.mutate_rows(m).unwrap()
    };
    let done = AtomicBool::new(false);
    let commits = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    for _ in 0..150 {
                        let current = t.get(Get::new(row(0))).unwrap();
                        let from = (!current.is_empty()).then(|| gen_of(&current));
                        if write(from, from.map_or(0, |g| g + 1)) {
                            commits.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for reader in 0..2 {
            let (t, done) = (&t, &done);
            s.spawn(move || {
                let mut last = 0;
                let mut scans = 0;
                while !done.load(Ordering::Relaxed) || scans < 10 {
                    let got: Vec<RowResult> = t.scan(Scan::new().prefix("grp:")).unwrap().map(|r| r.unwrap()).collect();
                    scans += 1;
                    if got.is_empty() {
                        assert_eq!(last, 0, "the group vanished");
                        continue;
                    }
                    assert_eq!(got.len(), ROWS, "a scan saw part of a write");
                    let gens: Vec<u64> = got.iter().map(gen_of).collect();
                    assert!(gens.iter().all(|&g| g == gens[0]), "one scan saw generations {gens:?}");
                    assert!(gens[0] >= last, "generation went back from {last} to {}", gens[0]);
                    last = gens[0];
                    // Single-row gets never go back either.
                    let r = t.get(Get::new(row((reader + scans) % ROWS))).unwrap();
                    let g = gen_of(&r);
                    assert!(g >= last, "get saw {g} after a scan saw {last}");
                    last = g;
                }
            });
        }
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                te.engine().flush("t").unwrap();
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        });
        // Stop the readers and the flusher once the writers are done.
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    let n = commits.load(Ordering::Relaxed);
    let gens: Vec<u64> = t.scan(Scan::new().prefix("grp:")).unwrap().map(|r| gen_of(&r.unwrap())).collect();
    assert_eq!(gens, vec![n as u64 - 1; ROWS], "each commit moved the group one generation on");
}
