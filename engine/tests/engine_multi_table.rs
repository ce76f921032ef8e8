//! Multi-table mutations: rows of several tables and regions written atomically — all or
//! none, under conditions on rows of any of them, visible to readers in every region at once,
//! replayed from the log whole even when one table was flushed since.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use cellar_engine::*;
use common::*;

fn create(te: &TestEngine, name: &str, splits: &[&str]) -> Table {
    let desc = TableDescriptor::new(name).family(FamilyDescriptor::new("f"));
    let splits = splits.iter().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect();
    te.engine().create_table_with_splits(desc, splits).unwrap();
    te.table(name)
}

#[test]
fn rows_of_several_tables_and_regions_are_written_all_or_none() {
    let te = TestEngine::new(1000);
    let (data, index) = (create(&te, "data", &["m"]), create(&te, "index", &[]));
    let m = MultiTableMutation::new()
        .row(&data, put_row("a", "1"))
        .row(&data, put_row("z", "2"))
        .row(&index, put_row("by-value:1", "a"))
        .condition(&index, RowCondition::if_absent("by-value:1", "f", "q"));
    assert!(te.engine().mutate_tables(m.clone()).unwrap());
    assert_eq!((value(&data, "a"), value(&data, "z")), (Some("1".into()), Some("2".into())));
    assert_eq!(value(&index, "by-value:1").as_deref(), Some("a"));
    // The same again: its condition no longer holds, and nothing is written.
    let again = m.row(&data, put_row("b", "3"));
    assert!(!te.engine().mutate_tables(again).unwrap());
    assert_eq!(value(&data, "b"), None);

    // A move between tables: a delete in one and a put in the other, conditioned on a third row.
    let mv = MultiTableMutation::new()
        .row(&index, RowMutations::new("by-value:1").with(Delete::new("by-value:1")))
        .row(&index, put_row("by-value:9", "a"))
        .row(&data, put_row("a", "9"))
        .condition(&data, RowCondition::if_value("a", "f", "q", CompareOp::Equal, "1"));
    assert!(te.engine().mutate_tables(mv).unwrap());
    assert_eq!(rows(&index, Scan::new()), ["by-value:9"]);
    assert_eq!(value(&data, "a").as_deref(), Some("9"));
}

/// Cells listed out of key order, a column twice, and a delete between puts of one row, over
/// two tables: read as listed, and the same after the log is replayed.
#[test]
fn a_multi_table_mutation_means_what_it_lists_whatever_the_order_of_its_cells() {
    let mut te = TestEngine::replaying(1000);
    let (data, index) = (create(&te, "data", &[]), create(&te, "index", &[]));
    let m = MultiTableMutation::new()
        .row(
            &index,
            RowMutations::new("k").with(Put::new("k").add("f", "z", "1").add("f", "a", "2").add("f", "a", "3")),
        )
        .row(&data, RowMutations::new("r").with(Put::new("r").add("f", "b", "old")))
        .row(&data, RowMutations::new("r").with(Delete::new("r")))
        .row(&data, RowMutations::new("r").with(Put::new("r").add("f", "a", "new")));
    assert!(te.engine().mutate_tables(m).unwrap());
    let check = |te: &TestEngine, when: &str| {
        let got = |t: &str, row: &str| cells(&te.table(t).get(Get::new(row.to_string())).unwrap());
        let want =
            |v: &[(&str, &str)]| v.iter().map(|(q, v)| (format!("f:{q}"), 1000, v.to_string())).collect::<Vec<_>>();
        assert_eq!(got("index", "k"), want(&[("a", "3"), ("z", "1")]), "{when}");
        assert_eq!(got("data", "r"), want(&[("a", "new")]), "{when}");
    };
    check(&te, "as written");
    drop((data, index));
    te.reopen();
    check(&te, "after replaying the log");
}

#[test]
fn a_bad_row_anywhere_fails_the_whole_before_anything_is_written() {
    let te = TestEngine::new(1000);
    let (data, index) = (create(&te, "data", &[]), create(&te, "index", &[]));
    let engine = te.engine();
    let bad_family = MultiTableMutation::new()
        .row(&data, put_row("a", "1"))
        .row(&index, RowMutations::new("i").with(Put::new("i").add("nofamily", "q", "x")));
    assert!(matches!(engine.mutate_tables(bad_family), Err(Error::FamilyNotFound { .. })));
    let bad_condition = MultiTableMutation::new()
        .row(&data, put_row("a", "1"))
        .condition(&index, RowCondition::if_absent("i", "g", "q"));
    assert!(matches!(engine.mutate_tables(bad_condition), Err(Error::FamilyNotFound { .. })));
    assert!(matches!(engine.mutate_tables(MultiTableMutation::new()), Err(Error::InvalidArgument { .. })));
    let other = TestEngine::new(1000);
    let foreign = create(&other, "data", &[]);
    let mixed = MultiTableMutation::new().row(&data, put_row("a", "1")).row(&foreign, put_row("b", "2"));
    assert!(matches!(engine.mutate_tables(mixed), Err(Error::InvalidArgument { .. })));
    engine.disable_table("index").unwrap();
    let disabled = MultiTableMutation::new().row(&data, put_row("a", "1")).row(&index, put_row("i", "a"));
    assert!(matches!(engine.mutate_tables(disabled), Err(Error::TableDisabled(_))));
    assert_eq!(rows(&data, Scan::new()), Vec::<String>::new(), "nothing of the failed mutations was written");
    assert_eq!(rows(&foreign, Scan::new()), Vec::<String>::new());
}

#[test]
fn a_multi_table_mutation_replays_from_the_log_whole() {
    let mut te = TestEngine::replaying(1000);
    let (data, index) = (create(&te, "data", &[]), create(&te, "index", &[]));
    let write = |g: u32| {
        let m = MultiTableMutation::new()
            .row(&data, put_row(&format!("d{g:02}"), &g.to_string()))
            .row(&index, put_row(&format!("i{g:02}"), &g.to_string()));
        assert!(te.engine().mutate_tables(m).unwrap());
    };
    (0..10).for_each(write);
    // One table's region flushes; the log keeps the records for the other's.
    te.engine().flush("data").unwrap();
    (10..20).for_each(write);
    drop((data, index));
    te.reopen();
    let (data, index) = (te.table("data"), te.table("index"));
    for g in 0..20 {
        assert_eq!(value(&data, &format!("d{g:02}")), Some(g.to_string()), "data row {g}");
        assert_eq!(value(&index, &format!("i{g:02}")), Some(g.to_string()), "index row {g}");
    }
    assert_eq!(rows(&data, Scan::new()).len(), 20);
    assert_eq!(rows(&index, Scan::new()).len(), 20);
}

/// A writer moves a counter forward in two tables (one split in many regions, so publishing
/// takes a while) with one multi-table mutation each time; readers read a row of each table one
/// after the other, in both orders, while flushes run. A reader that saw a value in one table
/// never then sees an older one in the other.
#[test]
fn readers_see_a_multi_table_mutation_in_every_region_at_once() {
    const WRITES: u64 = 3_000;
    let te = TestEngine::new(1000);
    const REGIONS: usize = 32;
    let row = |i: usize| format!("{i:02}");
    let splits: Vec<String> = (1..REGIONS).map(row).collect();
    let (left, right) =
        (create(&te, "left", &splits.iter().map(String::as_str).collect::<Vec<_>>()), create(&te, "right", &[]));
    let read = |t: &Table, row: &str| value(t, row).map_or(0, |v| v.parse::<u64>().unwrap());
    let done = AtomicBool::new(false);
    let checks = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            for n in 1..=WRITES {
                let v = n.to_string();
                let m = (0..REGIONS)
                    .fold(MultiTableMutation::new(), |m, i| m.row(&left, put_row(&row(i), &v)))
                    .row(&right, put_row("r", &v));
                assert!(te.engine().mutate_tables(m).unwrap());
            }
            done.store(true, Ordering::Release);
        });
        for order in 0..2 {
            let (left, right, done, checks) = (&left, &right, &done, &checks);
            s.spawn(move || {
                while !done.load(Ordering::Acquire) {
                    let (first, second) = if order == 0 {
                        (read(left, "00"), read(right, "r"))
                    } else {
                        (read(right, "r"), read(left, &format!("{:02}", REGIONS - 1)))
                    };
                    assert!(second >= first, "saw {first}, then the older {second} in another region");
                    checks.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                te.engine().flush("left").unwrap();
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        });
    });
    assert!(checks.load(Ordering::Relaxed) > 0);
    assert_eq!(read(&left, "00"), WRITES);
    assert_eq!(read(&right, "r"), WRITES);
}

/// The `f:q` value of a row as read, as text.
fn text(row: &RowResult) -> Option<String> {
    row.value(b"f", b"q").map(|v| String::from_utf8_lossy(v).into_owned())
}

#[test]
fn read_then_mutate_hands_the_row_to_build_and_applies_what_it_returns() {
    let te = TestEngine::new(1000);
    let (data, index) = (create(&te, "data", &["m"]), create(&te, "index", &["5"]));
    let engine = te.engine();
    let get = Get::new("a");
    // A missing row reaches `build` as `None`.
    let written = engine
        .read_then_mutate::<RowResult>(&data, &get, |row| {
            assert!(row.is_none());
            Some(MultiTableMutation::new().row(&data, put_row("a", "1")).row(&index, put_row("1", "a")))
        })
        .unwrap();
    assert_eq!(written, Some(true));
    // The stored row reaches it next: move the index entry from the old value to the new one.
    let written = engine
        .read_then_mutate::<RowResult>(&data, &get, |row| {
            let old = text(&row?)?;
            assert_eq!(old, "1");
            let m = MultiTableMutation::new()
                .row(&data, put_row("a", "7"))
                .row(&index, RowMutations::new(old.clone()).with(Delete::new(old)))
                .row(&index, put_row("7", "a"));
            Some(m)
        })
        .unwrap();
    assert_eq!(written, Some(true));
    assert_eq!(value(&data, "a").as_deref(), Some("7"));
    assert_eq!(rows(&index, Scan::new()), ["7"]);
    // `build` declining writes nothing; a condition of its mutation that fails writes nothing.
    assert_eq!(engine.read_then_mutate::<RowResult>(&data, &get, |_| None).unwrap(), None);
    let refused = engine
        .read_then_mutate::<RowResult>(&data, &get, |_| {
            let m = MultiTableMutation::new()
                .row(&data, put_row("a", "8"))
                .condition(&index, RowCondition::if_absent("7", "f", "q"));
            Some(m)
        })
        .unwrap();
    assert_eq!(refused, Some(false));
    assert_eq!(value(&data, "a").as_deref(), Some("7"));
}

#[test]
fn read_then_mutate_refuses_bad_input_and_writes_nothing() {
    let te = TestEngine::new(1000);
    let (data, index) = (create(&te, "data", &[]), create(&te, "index", &[]));
    let engine = te.engine();
    let no_family = Get::new("a").family("nofamily");
    let unused = engine.read_then_mutate::<RowResult>(&data, &no_family, |_| unreachable!("no read happens"));
    assert!(matches!(unused, Err(Error::FamilyNotFound { .. })));
    let other = TestEngine::new(1000);
    let foreign = create(&other, "data", &[]);
    let unused = engine.read_then_mutate::<RowResult>(&foreign, &Get::new("a"), |_| unreachable!("no read happens"));
    assert!(matches!(unused, Err(Error::InvalidArgument { .. })));
    let bad_row = engine.read_then_mutate::<RowResult>(&data, &Get::new("a"), |_| {
        let bad = RowMutations::new("i").with(Put::new("i").add("nofamily", "q", "x"));
        Some(MultiTableMutation::new().row(&data, put_row("a", "1")).row(&index, bad))
    });
    assert!(matches!(bad_row, Err(Error::FamilyNotFound { .. })));
    assert_eq!(rows(&data, Scan::new()), Vec::<String>::new(), "nothing of the failed mutation was written");
}

/// Threads increment counters in rows of a table split in three regions, each increment a
/// read of the row and a write of the next value plus an index row, through
/// `read_then_mutate`. The index table was created first, so its regions have lower ids than
/// the data's: a write must lock them out of id order (or start over). No increment is lost,
/// nothing deadlocks, and every index row is there.
#[test]
fn read_then_mutate_loses_no_update_among_racing_writers() {
    const THREADS: usize = 4;
    const EACH: u64 = 250;
    let te = TestEngine::new(1000);
    let index = create(&te, "index", &["3", "6"]);
    let data = create(&te, "data", &["c", "f"]);
    let counters = ["a", "d", "g"];
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (te, data, index) = (&te, &data, &index);
            s.spawn(move || {
                for i in 0..EACH {
                    let row = counters[(t + i as usize) % counters.len()];
                    let written = te
                        .engine()
                        .read_then_mutate::<RowResult>(data, &Get::new(row), |current| {
                            let n = current.as_ref().and_then(text).map_or(0, |v| v.parse::<u64>().unwrap()) + 1;
                            let entry = format!("{}:{row}:{n:05}", n % 10);
                            let m = MultiTableMutation::new()
                                .row(data, put_row(row, &n.to_string()))
                                .row(index, put_row(&entry, row));
                            Some(m)
                        })
                        .unwrap();
                    assert_eq!(written, Some(true));
                }
            });
        }
    });
    let total: u64 = counters.iter().map(|r| value(&data, r).unwrap().parse::<u64>().unwrap()).sum();
    assert_eq!(total, THREADS as u64 * EACH, "every increment counted");
    let entries = rows(&index, Scan::new());
    assert_eq!(entries.len() as u64, THREADS as u64 * EACH, "one index row per increment");
    for row in counters {
        let n: u64 = value(&data, row).unwrap().parse().unwrap();
        let mine = entries.iter().filter(|e| e.split(':').nth(1) == Some(row)).count() as u64;
        assert_eq!(mine, n, "row {row}: an index row for each of its values");
    }
}

/// Writers increment counters through `read_then_mutate` while both tables split under them:
/// a write whose region is retired while it waits routes again, and none is lost or doubled.
#[test]
fn read_then_mutate_survives_splits_of_the_regions_it_locks() {
    const THREADS: usize = 2;
    const EACH: u64 = 300;
    let te = TestEngine::new(1000);
    let index = create(&te, "index", &[]);
    let data = create(&te, "data", &[]);
    let counters: Vec<String> = (b'a'..=b'z').map(|c| (c as char).to_string()).collect();
    // Writers go on until every split is done (at least EACH increments each), so the splits
    // happen under them however the threads are scheduled.
    let splits_done = AtomicBool::new(false);
    let mut increments = 0u64;
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (te, data, index, counters, splits_done) = (&te, &data, &index, &counters, &splits_done);
                s.spawn(move || {
                    let mut i = 0u64;
                    while i < EACH || !splits_done.load(Ordering::Acquire) {
                        let row = &counters[(t * 7 + i as usize * 3) % counters.len()];
                        let written = te
                            .engine()
                            .read_then_mutate::<RowResult>(data, &Get::new(row.clone()), |current| {
                                let n = current.as_ref().and_then(text).map_or(0, |v| v.parse::<u64>().unwrap()) + 1;
                                let m = MultiTableMutation::new()
                                    .row(data, put_row(row, &n.to_string()))
                                    .row(index, put_row(&format!("{}:{row}:{n:05}", n % 10), row));
                                Some(m)
                            })
                            .unwrap();
                        assert_eq!(written, Some(true));
                        i += 1;
                    }
                    i
                })
            })
            .collect();
        s.spawn(|| {
            // Each key once: a split at an existing boundary is refused.
            let data_keys = counters.iter().skip(1).step_by(3).map(|r| format!("{r}m"));
            let index_keys = (1..10).map(|d| d.to_string());
            for (table, key) in
                data_keys.map(|k| ("data", k)).zip(index_keys.map(|k| ("index", k))).flat_map(|(a, b)| [a, b])
            {
                te.engine().split(table, Some(key.as_bytes())).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(3));
            }
            splits_done.store(true, Ordering::Release);
        });
        increments = writers.into_iter().map(|w| w.join().unwrap()).sum();
    });
    assert!(te.engine().regions("data").unwrap().len() > 1, "the data table split");
    let total: u64 = counters.iter().filter_map(|r| value(&data, r)).map(|v| v.parse::<u64>().unwrap()).sum();
    assert_eq!(total, increments, "every increment counted once");
    assert_eq!(rows(&index, Scan::new()).len() as u64, increments, "one index row per increment");
}
