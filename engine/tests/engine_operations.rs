//! Client operations end to end: filters, scans, TTL, counters, check-and-mutate, batches,
//! schema changes that persist, and bad input that changes nothing.

mod common;

use cellar_engine::*;
use common::*;

fn simple(te: &TestEngine, fam: FamilyDescriptor) -> Table {
    te.engine().create_table(TableDescriptor::new("t").family(fam)).unwrap();
    te.table("t")
}

#[test]
fn filters_select_rows_and_cells() {
    let te = TestEngine::new(1000);
    let t = simple(&te, FamilyDescriptor::new("f"));
    for (row, city, age) in [("u1", "paris", "30"), ("u2", "rome", "41"), ("u3", "paris", "25"), ("v1", "oslo", "50")] {
        t.put(Put::new(row).add("f", "city", city).add("f", "age", age).add("f", "x_note", "n")).unwrap();
    }
    let scv = Filter::SingleColumnValue {
        family: "f".into(),
        qualifier: "city".into(),
        op: CompareOp::Equal,
        value: "paris".into(),
        filter_if_missing: true,
    };
    assert_eq!(rows(&t, Scan::new().filter(scv)), ["u1", "u3"]);
    assert_eq!(rows(&t, Scan::new().filter(Filter::Prefix("u".into()))), ["u1", "u2", "u3"]);
    assert_eq!(rows(&t, Scan::new().filter(Filter::Page(2))), ["u1", "u2"]);
    let ranges = Filter::MultiRowRange(vec![("u2".into(), "u3".into()), ("v".into(), "".into())]);
    assert_eq!(rows(&t, Scan::new().filter(ranges)), ["u2", "v1"]);
    let older = t.scan(Scan::new().filter(Filter::Value(CompareOp::Greater, "40".into())).column("f", "age")).unwrap();
    assert_eq!(older.map(|r| r.unwrap().row).collect::<Vec<_>>(), ["u2", "v1"]);
    let r = t.get(Get::new("u1").filter(Filter::ColumnPrefix("x_".into()))).unwrap();
    assert_eq!(cells(&r), [("f:x_note".to_string(), 1000, "n".to_string())]);
    let r = t.get(Get::new("u1").filter(Filter::KeyOnly)).unwrap();
    assert!(r.cells.iter().all(|c| c.value.is_empty()) && r.cells.len() == 3);
    let r = t.get(Get::new("u1").filter(Filter::FirstKeyOnly)).unwrap();
    assert_eq!(r.cells.len(), 1);
    let either = Filter::Or(vec![
        Filter::Qualifier(CompareOp::Equal, "age".into()),
        Filter::Qualifier(CompareOp::Equal, "city".into()),
    ]);
    assert_eq!(t.get(Get::new("u1").filter(either)).unwrap().cells.len(), 2);
}

#[test]
fn scans_bound_reverse_limit_and_batch() {
    let te = TestEngine::new(1000);
    let t = simple(&te, FamilyDescriptor::new("f"));
    for i in 0..20 {
        let mut p = Put::new(format!("k{i:02}"));
        for q in 0..5 {
            p = p.add("f", format!("q{q}"), "v");
        }
        t.put(p).unwrap();
        if i == 9 {
            te.engine().flush("t").unwrap();
        }
    }
    assert_eq!(rows(&t, Scan::new().start("k05").stop("k08")), ["k05", "k06", "k07"]);
    assert_eq!(rows(&t, Scan::new().reversed(true).start("k07").stop("k04")), ["k07", "k06", "k05"]);
    assert_eq!(rows(&t, Scan::new().prefix("k1").reversed(true).limit(3)), ["k19", "k18", "k17"]);
    assert_eq!(rows(&t, Scan::new().prefix("k0").limit(2)), ["k00", "k01"]);
    assert_eq!(t.scan(Scan::new()).unwrap().count(), 20);
    assert_eq!(t.scan(Scan::new().reversed(true)).unwrap().count(), 20);
    let batched: Vec<usize> =
        t.scan(Scan::new().prefix("k03").batch(2)).unwrap().map(|r| r.unwrap().cells.len()).collect();
    assert_eq!(batched, [2, 2, 1]);
    // More rows than one internal fill, forward and backward.
    for i in 0..300 {
        t.put(Put::new(format!("m{i:04}")).add("f", "q", "v")).unwrap();
    }
    assert_eq!(t.scan(Scan::new().prefix("m")).unwrap().count(), 300);
    let back: Vec<_> = rows(&t, Scan::new().prefix("m").reversed(true));
    assert_eq!(back.len(), 300);
    assert_eq!((back[0].as_str(), back[299].as_str()), ("m0299", "m0000"));
}

#[test]
fn scan_with_lends_rows_until_the_visitor_stops() {
    let te = TestEngine::new(1000);
    let t = simple(&te, FamilyDescriptor::new("f").max_versions(3));
    for i in 0..40 {
        t.put(Put::new(format!("k{i:02}")).add("f", "a", format!("a{i}")).add("f", "b", format!("b{i}"))).unwrap();
        if i == 19 {
            te.engine().flush("t").unwrap();
        }
    }
    t.put(Put::new("k05").add_at("f", "a", 500, "older")).unwrap();

    // Stopping early: the visitor sees rows in order and the count includes the row it broke on.
    let mut seen = Vec::new();
    let visited = t
        .scan_with(Scan::new().start("k10"), |row| {
            seen.push(String::from_utf8_lossy(row.row()).into_owned());
            if row.row() == b"k12" {
                std::ops::ControlFlow::Break(())
            } else {
                std::ops::ControlFlow::Continue(())
            }
        })
        .unwrap();
    assert_eq!((visited, seen), (3, vec!["k10".to_string(), "k11".into(), "k12".into()]));

    // Cells and values in place, every version asked for, newest first.
    let mut versions = Vec::new();
    t.scan_with(Scan::new().prefix("k05").all_versions(), |row| {
        assert_eq!(row.value(b"f", b"a"), Some(&b"a5"[..]));
        assert_eq!(row.value(b"g", b"a"), None);
        versions.extend(row.cells().map(|c| (c.qualifier.to_vec(), c.timestamp, c.value.to_vec())));
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    let want: Vec<(Vec<u8>, u64, Vec<u8>)> = vec![
        (b"a".to_vec(), 1000, b"a5".to_vec()),
        (b"a".to_vec(), 500, b"older".to_vec()),
        (b"b".to_vec(), 1000, b"b5".to_vec()),
    ];
    assert_eq!(versions, want);

    // Limits, batches, reversal and filters agree with the owned scan (checked by `rows`).
    assert_eq!(rows(&t, Scan::new().limit(4).batch(1)), ["k00", "k00", "k01", "k01", "k02", "k02", "k03", "k03"]);
    assert_eq!(rows(&t, Scan::new().reversed(true).limit(2)), ["k39", "k38"]);
    assert_eq!(rows(&t, Scan::new().filter(Filter::Value(CompareOp::Equal, "b7".into()))), ["k07"]);
    assert_eq!(rows(&t, Scan::new().filter(Filter::And(vec![Filter::Page(3), Filter::KeyOnly]))).len(), 3);

    // Errors come before any row is lent.
    let err = t.scan_with(Scan::new().column("nope", "q"), |_| std::ops::ControlFlow::Continue(()));
    assert!(matches!(err, Err(Error::FamilyNotFound { .. })), "{err:?}");
}

#[test]
fn scanner_reads_a_snapshot() {
    let te = TestEngine::new(1000);
    let t = simple(&te, FamilyDescriptor::new("f"));
    t.put(Put::new("a").add("f", "q", "1")).unwrap();
    let scanner = t.scan(Scan::new()).unwrap();
    t.put(Put::new("b").add("f", "q", "2")).unwrap();
    te.engine().flush("t").unwrap();
    assert_eq!(scanner.count(), 1, "a write after the scanner opened stays invisible");
}

#[test]
fn ttl_hides_expired_cells_but_keeps_min_versions() {
    let te = TestEngine::new(10_000);
    let fam = FamilyDescriptor::new("f").ttl_secs(10).max_versions(5).min_versions(1);
    te.engine().create_table(TableDescriptor::new("t").family(fam).family(FamilyDescriptor::new("g"))).unwrap();
    let t = te.table("t");
    for ts in [1_000, 2_000, 9_000] {
        t.put(Put::new("r").add_at("f", "q", ts, format!("v{ts}"))).unwrap();
    }
    t.put(Put::new("r").add("g", "short", "s").ttl_ms(500)).unwrap();
    let versions = |t: &Table| cells(&t.get(Get::new("r").all_versions()).unwrap());
    assert_eq!(versions(&t).len(), 4);
    te.clock.set(12_500);
    // Family TTL 10 s: 1000 and 2000 expired; cell TTL 500 ms: `short` expired.
    assert_eq!(versions(&t), [("f:q".to_string(), 9_000, "v9000".to_string())]);
    te.clock.set(100_000);
    assert_eq!(versions(&t), [("f:q".to_string(), 9_000, "v9000".to_string())], "min_versions keeps the newest");
    te.engine().major_compact("t").unwrap();
    let raw: Vec<_> = t.scan(Scan::new().raw(true).all_versions()).unwrap().flat_map(|r| cells(&r.unwrap())).collect();
    assert_eq!(raw, [("f:q".to_string(), 9_000, "v9000".to_string())], "major compaction removed expired cells");
}

#[test]
fn delete_then_put_in_the_same_millisecond_keeps_the_put() {
    let te = TestEngine::new(5_000);
    let t = simple(&te, FamilyDescriptor::new("f"));
    t.put(Put::new("r").add("f", "q", "old")).unwrap();
    t.delete(Delete::new("r")).unwrap();
    t.put(Put::new("r").add("f", "q", "new")).unwrap();
    assert_eq!(t.get(Get::new("r")).unwrap().value(b"f", b"q").unwrap().as_ref(), b"new");
    te.engine().major_compact("t").unwrap();
    assert_eq!(t.get(Get::new("r")).unwrap().value(b"f", b"q").unwrap().as_ref(), b"new");
}

/// Cells go into the memstore sorted, whatever order a mutation lists them in: the outcome
/// is the one the mutation describes, before and after recovery.
#[test]
fn a_mutation_means_what_it_lists_whatever_the_order_of_its_cells() {
    let mut te = TestEngine::replaying(5_000);
    let t = simple(&te, FamilyDescriptor::new("f"));
    // Out of column order, and one column twice at one timestamp: the later value wins.
    t.put(Put::new("r").add("f", "z", "1").add("f", "a", "2").add("f", "m", "3").add("f", "a", "4")).unwrap();
    // A put, a delete of the row, then a put of another column: the delete hides only the
    // first put.
    let group = RowMutations::new("s")
        .with(Put::new("s").add("f", "b", "x"))
        .with(Delete::new("s"))
        .with(Put::new("s").add("f", "a", "y"));
    t.mutate_row(group).unwrap();
    // An increment of columns out of order, one of them twice.
    let counted = t.increment(Increment::new("c").add("f", "y", 5).add("f", "b", 1).add("f", "y", 2)).unwrap();
    let amounts: Vec<(&[u8], i64)> =
        counted.cells.iter().map(|c| (&c.qualifier[..], i64::from_be_bytes(c.value[..].try_into().unwrap()))).collect();
    assert_eq!(amounts, [(&b"y"[..], 5), (b"b", 1), (b"y", 2)], "one cell per column named, in the order named");
    let check = |t: &Table, when: &str| {
        let r = t.get(Get::new("r")).unwrap();
        let want =
            |v: &[(&str, &str)]| v.iter().map(|(q, v)| (format!("f:{q}"), 5_000, v.to_string())).collect::<Vec<_>>();
        assert_eq!(cells(&r), want(&[("a", "4"), ("m", "3"), ("z", "1")]), "{when}");
        assert_eq!(cells(&t.get(Get::new("s")).unwrap()), want(&[("a", "y")]), "{when}");
        // Of the two cells of `y`, the one named last stands.
        let c = t.get(Get::new("c")).unwrap();
        let amount = |q: &[u8]| i64::from_be_bytes(c.value(b"f", q).unwrap()[..].try_into().unwrap());
        assert_eq!((amount(b"b"), amount(b"y")), (1, 2), "{when}");
    };
    check(&t, "as written");
    drop(t);
    te.reopen();
    check(&te.table("t"), "after replaying the log");
}

/// Gets, and the reads of checks and increments (which settle a missing row from the
/// memstore and the files' bloom filters), find rows wherever they are — in a file only, in
/// the memstore only, deleted, revived over a file's marker — and nothing for a missing row.
#[test]
fn gets_find_rows_wherever_they_are_and_nothing_where_none_is() {
    let te = TestEngine::new(5_000);
    let t = simple(&te, FamilyDescriptor::new("f"));
    t.put(Put::new("in_file").add("f", "q", "1")).unwrap();
    te.engine().flush("t").unwrap();
    t.put(Put::new("in_memstore").add("f", "q", "2")).unwrap();
    t.put(Put::new("deleted").add("f", "q", "3")).unwrap();
    t.delete(Delete::new("deleted")).unwrap();
    let value = |row: &str| {
        let got = t.get(Get::new(row.to_string())).unwrap();
        // The row lent in place is the row a get returns, and nothing where that is empty.
        let lent = t.get_with(Get::new(row.to_string()), |view| view.to_row_result()).unwrap();
        assert_eq!(lent, (!got.is_empty()).then(|| got.clone()), "{row}");
        got.value(b"f", b"q").cloned()
    };
    assert_eq!(value("in_file").as_deref(), Some(&b"1"[..]));
    assert_eq!(value("in_memstore").as_deref(), Some(&b"2"[..]));
    assert_eq!(value("deleted"), None);
    assert_eq!(value("missing"), None);
    // A file holding the row only as a marker, and a put after it in the memstore.
    t.delete(Delete::new("revived")).unwrap();
    te.engine().flush("t").unwrap();
    te.clock.set(6_000);
    t.put(Put::new("revived").add("f", "q", "4")).unwrap();
    assert_eq!(value("revived").as_deref(), Some(&b"4"[..]));
    // The writer's reads (a check, an increment) see the same rows, and nothing in the rest.
    let claim = |row: &str| {
        let rm = RowMutations::new(row.to_string()).with(Put::new(row.to_string()).add("f", "q", "claimed"));
        t.check_and_mutate(CheckAndMutate::if_absent("f", "q", rm)).unwrap()
    };
    let claimed: Vec<bool> = ["in_file", "in_memstore", "deleted", "revived", "missing"].map(claim).to_vec();
    assert_eq!(claimed, [false, false, true, false, true]);
    let count = |row: &str| t.increment(Increment::new(row.to_string()).add("f", "n", 1)).unwrap();
    count("in_file");
    assert_eq!(count("in_file").value(b"f", b"n").unwrap().as_ref(), 2i64.to_be_bytes());
    assert_eq!(count("counted").value(b"f", b"n").unwrap().as_ref(), 1i64.to_be_bytes());
}

/// A lent row holds what the get asks for: its columns, its versions, its time range.
#[test]
fn a_lent_row_holds_what_the_get_asks_for() {
    let te = TestEngine::new(5_000);
    let t = simple(&te, FamilyDescriptor::new("f").max_versions(3));
    for ts in [10, 20, 30] {
        t.put(Put::new("r").add_at("f", "a", ts, format!("a{ts}")).add_at("f", "b", ts, format!("b{ts}"))).unwrap();
    }
    te.engine().flush("t").unwrap();
    t.put(Put::new("r").add_at("f", "a", 40, "a40")).unwrap();
    for get in [
        Get::new("r"),
        Get::new("r").all_versions(),
        Get::new("r").column("f", "b").all_versions(),
        Get::new("r").all_versions().time_range(15, 35),
    ] {
        let lent = t.get_with(get.clone(), |view| {
            view.cells().map(|c| (c.qualifier.to_vec(), c.timestamp, c.value.to_vec())).collect::<Vec<_>>()
        });
        let got = t.get(get).unwrap();
        let want: Vec<_> = got.cells.iter().map(|c| (c.qualifier.to_vec(), c.timestamp, c.value.to_vec())).collect();
        assert_eq!(lent.unwrap(), Some(want));
    }
    assert_eq!(t.get_with(Get::new("r").column("f", "none"), |view| view.len()).unwrap(), None);
}

#[test]
fn counters_append_and_check_and_mutate() {
    let te = TestEngine::new(5_000);
    let t = simple(&te, FamilyDescriptor::new("f"));
    for _ in 0..3 {
        t.increment(Increment::new("c").add("f", "n", 5)).unwrap();
    }
    let r = t.increment(Increment::new("c").add("f", "n", -1).add("f", "m", 7)).unwrap();
    assert_eq!(r.value(b"f", b"n").unwrap().as_ref(), 14i64.to_be_bytes());
    assert_eq!(r.value(b"f", b"m").unwrap().as_ref(), 7i64.to_be_bytes());
    t.put(Put::new("c").add("f", "text", "abc")).unwrap();
    let err = t.increment(Increment::new("c").add("f", "n", 1).add("f", "text", 1)).unwrap_err();
    assert!(matches!(err, Error::NotACounter { len: 3, .. }), "{err}");
    assert_eq!(
        t.get(Get::new("c")).unwrap().value(b"f", b"n").unwrap().as_ref(),
        14i64.to_be_bytes(),
        "failed increment wrote nothing"
    );
    t.put(Put::new("c").add("f", "big", i64::MAX.to_be_bytes().to_vec())).unwrap();
    assert!(matches!(t.increment(Increment::new("c").add("f", "big", 1)), Err(Error::CounterOverflow { .. })));

    t.append(Append::new("c").add("f", "text", "def")).unwrap();
    assert_eq!(t.get(Get::new("c")).unwrap().value(b"f", b"text").unwrap().as_ref(), b"abcdef");

    let put = |v: &'static str| RowMutations::new("k").with(Put::new("k").add("f", "q", v));
    assert!(t.check_and_mutate(CheckAndMutate::if_absent("f", "q", put("1"))).unwrap());
    assert!(!t.check_and_mutate(CheckAndMutate::if_absent("f", "q", put("2"))).unwrap());
    assert!(!t.check_and_mutate(CheckAndMutate::if_value("f", "q", CompareOp::Equal, "9", put("3"))).unwrap());
    assert!(t.check_and_mutate(CheckAndMutate::if_value("f", "q", CompareOp::Equal, "1", put("4"))).unwrap());
    let swap =
        RowMutations::new("k").with(Delete::new("k").add_columns("f", "q")).with(Put::new("k").add("f", "other", "x"));
    assert!(t.check_and_mutate(CheckAndMutate::if_value("f", "q", CompareOp::Greater, "3", swap)).unwrap());
    let r = t.get(Get::new("k")).unwrap();
    assert_eq!(cells(&r), [("f:other".to_string(), 5_000, "x".to_string())]);
}

#[test]
fn batches_report_per_row_results() {
    let te = TestEngine::new(5_000);
    let t = simple(&te, FamilyDescriptor::new("f"));
    let results = t
        .batch(vec![
            Put::new("a").add("f", "q", "1").into(),
            Put::new("").add("f", "q", "1").into(),
            Put::new("b").add("nope", "q", "1").into(),
            Put::new("c").add("f", "q", "3").into(),
            Delete::new("a").into(),
        ])
        .unwrap();
    assert!(results[0].is_ok() && results[3].is_ok() && results[4].is_ok());
    assert!(matches!(results[1], Err(Error::InvalidArgument { arg: "row", .. })));
    assert!(matches!(results[2], Err(Error::FamilyNotFound { .. })));
    assert_eq!(rows(&t, Scan::new()), ["c"], "the delete after the put of `a` masks it");
}

#[test]
fn bad_input_is_rejected_and_changes_nothing() {
    let te = TestEngine::new(5_000);
    let t = simple(&te, FamilyDescriptor::new("f"));
    assert!(matches!(t.put(Put::new("").add("f", "q", "v")), Err(Error::InvalidArgument { arg: "row", .. })));
    let long = vec![b'x'; MAX_ROW_KEY_LEN + 1];
    assert!(matches!(t.put(Put::new(long.clone()).add("f", "q", "v")), Err(Error::InvalidArgument { arg: "row", .. })));
    assert!(matches!(t.get(Get::new(long)), Err(Error::InvalidArgument { .. })));
    assert!(matches!(t.put(Put::new("r")), Err(Error::InvalidArgument { arg: "put", .. })));
    assert!(matches!(t.put(Put::new("r").add("g", "q", "v")), Err(Error::FamilyNotFound { .. })));
    assert!(matches!(t.get(Get::new("r").family("g")), Err(Error::FamilyNotFound { .. })));
    let mixed = RowMutations::new("r").with(Put::new("other").add("f", "q", "v"));
    assert!(matches!(t.mutate_row(mixed), Err(Error::InvalidArgument { .. })));
    assert!(matches!(te.engine().table("missing"), Err(Error::TableNotFound(_))));
    let bad = TableDescriptor::new("bad name").family(FamilyDescriptor::new("f"));
    assert!(matches!(te.engine().create_table(bad), Err(Error::InvalidArgument { arg: "table", .. })));
    assert!(matches!(
        te.engine().create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f"))),
        Err(Error::TableExists(_))
    ));
    assert_eq!(t.scan(Scan::new().raw(true)).unwrap().count(), 0, "nothing was written");
}

#[test]
fn schema_changes_persist_and_tables_move_through_their_lifecycle() {
    let mut te = TestEngine::new(5_000);
    let t = simple(&te, FamilyDescriptor::new("f"));
    t.put(Put::new("r").add("f", "q", "v")).unwrap();
    te.engine()
        .modify_family("t", FamilyDescriptor::new("g").compression(Compression::Zstd).bloom(BloomType::RowCol))
        .unwrap();
    te.engine().modify_family("t", FamilyDescriptor::new("f").max_versions(4)).unwrap();
    t.put(Put::new("r").add("g", "q", "w")).unwrap();
    te.engine().flush("t").unwrap();
    drop(t);
    te.reopen();
    let e = te.engine();
    let desc = e.describe("t").unwrap();
    assert_eq!(desc.families.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["f", "g"]);
    assert_eq!(desc.get_family(b"f").unwrap().max_versions, 4);
    assert_eq!(desc.get_family(b"g").unwrap().compression, Compression::Zstd);
    let t = te.table("t");
    assert_eq!(t.get(Get::new("r").column("g", "q")).unwrap().value(b"g", b"q").unwrap().as_ref(), b"w");
    assert!(matches!(e.drop_table("t"), Err(Error::TableEnabled(_))));
    e.disable_table("t").unwrap();
    assert!(matches!(t.get(Get::new("r")), Err(Error::TableDisabled(_))));
    e.enable_table("t").unwrap();
    e.truncate_table("t").unwrap();
    assert!(t.get(Get::new("r")).unwrap().is_empty(), "handles stay valid across truncate");
    assert_eq!(e.describe("t").unwrap().families.len(), 2);
    e.delete_family("t", "g").unwrap();
    e.disable_table("t").unwrap();
    e.drop_table("t").unwrap();
    assert!(matches!(t.get(Get::new("r")), Err(Error::TableNotFound(_))));
    assert!(e.list_tables().is_empty());
    drop(t);
    te.reopen();
    assert!(te.engine().list_tables().is_empty());
    assert_eq!(std::fs::read_dir(te.dir.path().join("sst")).unwrap().count(), 0, "dropped files are gone");
}

#[test]
fn flushed_wal_segments_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let opts = EngineOptions::default().wal_segment_bytes(16 * 1024).max_wal_segments(4);
    let e = Engine::open(dir.path(), opts.clone()).unwrap();
    e.create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f"))).unwrap();
    let t = e.table("t").unwrap();
    for i in 0..3000 {
        t.put(Put::new(format!("r{i:05}")).add("f", "q", vec![7u8; 64])).unwrap();
    }
    // Flushes triggered by log growth run in the background; once they finish, old segments
    // are gone.
    assert!(e.wait_idle(std::time::Duration::from_secs(30)));
    assert!(e.wal_segments() <= 5, "{} segments", e.wal_segments());
    drop(t);
    drop(e);
    let e = Engine::open(dir.path(), opts).unwrap();
    assert_eq!(e.table("t").unwrap().scan(Scan::new()).unwrap().count(), 3000);
}

#[test]
fn concurrent_writers_and_scanners_lose_nothing() {
    let te = TestEngine::new(5_000);
    let opts = TestEngine::options(&te.clock).memstore_flush_bytes(64 * 1024);
    drop(te.engine);
    let e = Engine::open(te.dir.path(), opts).unwrap();
    e.create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f"))).unwrap();
    let t = e.table("t").unwrap();
    let threads = 4;
    let per_thread = 1500;
    std::thread::scope(|s| {
        for w in 0..threads {
            let t = t.clone();
            s.spawn(move || {
                for i in 0..per_thread {
                    t.put(Put::new(format!("w{w}-{i:05}")).add("f", "q", format!("{w}:{i}"))).unwrap();
                    if i % 100 == 0 {
                        t.increment(Increment::new("counter").add("f", "n", 1)).unwrap();
                    }
                }
            });
        }
        let t2 = t.clone();
        s.spawn(move || {
            for _ in 0..20 {
                // Every scan sees each writer's rows as a gap-free prefix: rows of one writer are
                // written in key order, so a snapshot can't hold row i without row i-1.
                let mut seen = vec![0usize; threads];
                for r in t2.scan(Scan::new().prefix("w")).unwrap() {
                    let r = r.unwrap();
                    let k = String::from_utf8(r.row.to_vec()).unwrap();
                    let (w, i) = k[1..].split_once('-').unwrap();
                    let (w, i): (usize, usize) = (w.parse().unwrap(), i.parse().unwrap());
                    assert_eq!(i, seen[w], "gap in writer {w}'s rows");
                    seen[w] += 1;
                }
            }
        });
    });
    assert_eq!(t.scan(Scan::new().prefix("w")).unwrap().count(), threads * per_thread);
    let n = t.get(Get::new("counter")).unwrap();
    assert_eq!(n.value(b"f", b"n").unwrap().as_ref(), ((threads * per_thread / 100) as i64).to_be_bytes());
}

#[test]
fn oversized_values_are_rejected_before_anything_is_logged() {
    let te = TestEngine::new(5_000);
    let t = simple(&te, FamilyDescriptor::new("f"));
    let big = vec![0u8; MAX_VALUE_LEN + 1];
    assert!(matches!(
        t.put(Put::new("r").add("f", "q", big.clone())),
        Err(Error::InvalidArgument { arg: "value", .. })
    ));
    t.put(Put::new("r").add("f", "q", vec![1u8; MAX_VALUE_LEN - 1])).unwrap();
    assert!(matches!(
        t.append(Append::new("r").add("f", "q", vec![2u8; 10])),
        Err(Error::InvalidArgument { arg: "value", .. })
    ));
    assert_eq!(t.get(Get::new("r")).unwrap().value(b"f", b"q").unwrap().len(), MAX_VALUE_LEN - 1);
}

#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Engine>();
    send_sync::<Table>();
    send::<Scanner>();
}

#[test]
fn an_open_scanner_does_not_stall_writers_on_the_memory_budget() {
    let dir = tempfile::tempdir().unwrap();
    let opts = EngineOptions::default()
        .memstore_flush_bytes(1024 * 1024)
        // Room for one round's memstore below the early-flush limit (5/8), not for three.
        .global_memstore_bytes(2 * 1024 * 1024)
        .write_stall_timeout(std::time::Duration::from_secs(1))
        .auto_compact(false);
    let e = Engine::open(dir.path(), opts).unwrap();
    e.create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f"))).unwrap();
    let t = e.table("t").unwrap();
    // Each scanner pins the ~0.85 MiB memstore it saw (as metered). Together they hold more than the budget;
    // once flushed, that memory must stop counting, or every writer would wait for them.
    let mut scanners = Vec::new();
    for round in 0..3 {
        for i in 0..1500 {
            t.put(Put::new(format!("{round}-{i:05}")).add("f", "q", vec![1u8; 300])).unwrap();
        }
        let mut scanner = t.scan(Scan::new()).unwrap();
        assert!(scanner.next().is_some());
        scanners.push(scanner);
        e.flush("t").unwrap();
    }
    for i in 0..1500 {
        t.put(Put::new(format!("b{i:05}")).add("f", "q", vec![2u8; 300])).unwrap();
    }
    // Pinned memory still counted against the budget would make nearly every write wait for
    // a flush of a few kilobytes: a storm of tiny files.
    let files = e.regions("t").unwrap()[0].files;
    assert!(files <= 4, "{files} files: writers were forced into tiny flushes");
    let counts: Vec<usize> = scanners.into_iter().map(Iterator::count).collect();
    assert_eq!(counts, [1499, 2999, 4499], "each scanner still reads its snapshot");
    assert_eq!(t.scan(Scan::new()).unwrap().count(), 6000);
}

#[test]
fn compactions_leave_the_block_cache_to_readers() {
    let te = TestEngine::new(1000);
    let t = simple(&te, FamilyDescriptor::new("f"));
    for round in 0..3 {
        for n in 0..200 {
            t.put(Put::new(format!("r{n:04}")).add("f", "q", format!("v{round}"))).unwrap();
        }
        te.engine().flush("t").unwrap();
    }
    te.engine().major_compact("t").unwrap();
    let stats = te.engine().cache_stats();
    assert_eq!(stats.used_bytes, 0, "a compaction does not fill the cache: {stats:?}");
    assert_eq!(t.get(Get::new("r0100")).unwrap().value(b"f", b"q").map(|v| &v[..]), Some(&b"v2"[..]));
    assert!(te.engine().cache_stats().used_bytes > 0, "reads do");
}

/// A point read of a row that ends its block reads that block alone: the index says the row
/// ends there, so the next block is not read to find where the row ends. A row cut between
/// blocks still reads whole.
#[test]
fn point_reads_of_rows_that_end_their_blocks_read_one_block() {
    let te = TestEngine::new(1000);
    let t = simple(&te, FamilyDescriptor::new("f").block_size(1024));
    let rows = 400;
    for n in 0..rows {
        let put = (0..3).fold(Put::new(format!("r{n:04}")), |p, q| p.add("f", format!("q{q}"), format!("{n:0>40}")));
        t.put(put).unwrap();
    }
    // Forty columns of 100 bytes: this row spans several blocks.
    let wide = (0..40).fold(Put::new("r0200x"), |p, q| p.add("f", format!("w{q:02}"), vec![b'w'; 100]));
    t.put(wide).unwrap();
    te.engine().flush("t").unwrap();
    for n in 0..rows {
        assert_eq!(t.get(Get::new(format!("r{n:04}"))).unwrap().cells.len(), 3);
    }
    let s = te.engine().cache_stats();
    assert_eq!(s.hits + s.misses, rows as u64, "one block per point read: {s:?}");
    assert_eq!(t.get(Get::new("r0200x")).unwrap().cells.len(), 40);
}

/// Open files charge their indexes and blooms to the block-cache budget and give them back
/// when they are compacted away or their table is dropped.
#[test]
fn open_files_charge_their_metadata_to_the_block_cache() {
    let te = TestEngine::new(1000);
    let t = simple(&te, FamilyDescriptor::new("f").block_size(1024));
    assert_eq!(te.engine().cache_stats().pinned_bytes, 0);
    let mut per_flush = Vec::new();
    for round in 0..3 {
        for n in 0..500 {
            t.put(Put::new(format!("r{n:04}")).add("f", "q", format!("value {round} of row {n}"))).unwrap();
        }
        te.engine().flush("t").unwrap();
        per_flush.push(te.engine().cache_stats().pinned_bytes);
    }
    assert!(per_flush[0] > 0 && per_flush[0] < per_flush[1] && per_flush[1] < per_flush[2], "{per_flush:?}");
    te.engine().major_compact("t").unwrap();
    let compacted = te.engine().cache_stats().pinned_bytes;
    assert!(compacted > 0 && compacted < per_flush[2], "one file replaces three: {compacted} vs {per_flush:?}");
    drop(t);
    te.engine().disable_table("t").unwrap();
    te.engine().drop_table("t").unwrap();
    assert_eq!(te.engine().cache_stats().pinned_bytes, 0, "a dropped table's files are closed");
}

/// A batch of check-and-mutates gives, entry by entry, what the same calls made one at a time
/// give (later entries on a row see earlier ones), across regions, and keeps it after a
/// reopen replays the log.
#[test]
fn check_and_mutate_batches_match_one_call_at_a_time() {
    let mut te = TestEngine::new(5_000);
    for name in ["batched", "single"] {
        let desc = TableDescriptor::new(name).family(FamilyDescriptor::new("f"));
        te.engine().create_table_with_splits(desc, vec!["k3".into(), "k6".into()]).unwrap();
    }
    let (batched, single) = (te.table("batched"), te.table("single"));
    for t in [&batched, &single] {
        for k in 0..9 {
            t.put(Put::new(format!("k{k}")).add("f", "q", "0")).unwrap();
        }
    }
    let mut rng = Rng(7);
    for round in 0..20 {
        let cams: Vec<CheckAndMutate> = (0..30)
            .map(|i| {
                let row = format!("k{}", rng.below(10)); // k9 starts absent
                let put = RowMutations::new(row.clone()).with(Put::new(row).add("f", "q", format!("{round}.{i}")));
                match rng.below(3) {
                    0 => CheckAndMutate::if_absent("f", "q", put),
                    1 => CheckAndMutate::if_value("f", "q", CompareOp::Equal, "0", put),
                    _ => CheckAndMutate::if_value("f", "q", CompareOp::Greater, "1", put),
                }
            })
            .collect();
        let expected: Vec<bool> = cams.iter().map(|c| single.check_and_mutate(c.clone()).unwrap()).collect();
        let got: Vec<bool> = batched.check_and_mutate_batch(cams).unwrap().into_iter().map(Result::unwrap).collect();
        assert_eq!(got, expected, "round {round}");
        assert!(expected.iter().any(|&b| b) && expected.iter().any(|&b| !b), "both outcomes exercised");
    }
    let contents = |t: &Table| scan_both(t, Scan::new()).iter().map(cells).collect::<Vec<_>>();
    assert_eq!(contents(&batched), contents(&single));
    let before = contents(&batched);
    drop((batched, single));
    te.reopen();
    assert_eq!(contents(&te.table("batched")), before, "the batch's writes were logged");
}

#[test]
fn check_and_mutate_batches_report_bad_entries_alone() {
    let te = TestEngine::new(5_000);
    let t = simple(&te, FamilyDescriptor::new("f"));
    let put = |row: &'static str| RowMutations::new(row).with(Put::new(row).add("f", "q", "v"));
    let results = t
        .check_and_mutate_batch(vec![
            CheckAndMutate::if_absent("f", "q", put("a")),
            CheckAndMutate::if_absent("nope", "q", put("b")),
            CheckAndMutate::if_absent("f", "q", RowMutations::new("c").with(Put::new("d").add("f", "q", "v"))),
            CheckAndMutate::if_absent("f", "q", put("a")),
        ])
        .unwrap();
    assert!(matches!(results[0], Ok(true)));
    assert!(matches!(results[1], Err(Error::FamilyNotFound { .. })), "{:?}", results[1]);
    assert!(matches!(results[2], Err(Error::InvalidArgument { .. })), "{:?}", results[2]);
    assert!(matches!(results[3], Ok(false)), "the second claim of `a` sees the first");
    assert_eq!(rows(&t, Scan::new()), ["a"]);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, ..Default::default() })]

    /// A point read of any row returns what a scan of that row returns: rows smaller than a
    /// block and rows cut between blocks, rows that end their block, rows spread over several
    /// files by later writes, before and after a major compaction.
    #[test]
    fn point_reads_match_scans_of_the_row(
        rows in proptest::collection::vec((1usize..24, 1usize..160), 1..50),
        rewrites in proptest::collection::vec((0usize..50, 1usize..24), 0..20),
        flush_every in 3usize..30,
    ) {
        let te = TestEngine::new(1000);
        let t = simple(&te, FamilyDescriptor::new("f").block_size(1024).max_versions(2));
        let key = |i: usize| format!("row{i:03}");
        let put = |i: usize, columns: usize, len: usize, tag: u8| {
            let p = (0..columns).fold(Put::new(key(i)), |p, c| p.add("f", format!("c{c:02}"), vec![tag; len]));
            t.put(p).unwrap();
        };
        for (i, &(columns, len)) in rows.iter().enumerate() {
            put(i, columns, len, b'a');
            if i % flush_every == flush_every - 1 {
                te.engine().flush("t").unwrap();
            }
        }
        te.engine().flush("t").unwrap();
        for &(i, columns) in &rewrites {
            put(i % rows.len(), columns, 40, b'b');
        }
        te.engine().flush("t").unwrap();
        let check = || {
            for i in 0..rows.len() {
                let got = cells(&t.get(Get::new(key(i))).unwrap());
                let scanned: Vec<_> = t.scan(Scan::new().start(key(i)).limit(1)).unwrap().map(|r| r.unwrap()).collect();
                proptest::prop_assert_eq!(scanned.len(), 1);
                proptest::prop_assert_eq!(&got, &cells(&scanned[0]), "row {}", i);
                proptest::prop_assert!(!got.is_empty());
            }
            Ok(())
        };
        check()?;
        te.engine().major_compact("t").unwrap();
        check()?;
    }
}
