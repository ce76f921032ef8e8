//! The memstore drops versions no reader can see as writes land: an open reader keeps every
//! version it can see, and readers racing a writer over a hot row see whole rows.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use cellar_engine::*;
use common::*;

const COLUMNS: usize = 10;

fn hot_table(te: &TestEngine) -> Table {
    te.engine().create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f"))).unwrap();
    te.table("t")
}

/// Puts `value` in every column of `row`, in one atomic row write.
fn put_all(t: &Table, row: &str, value: u64) {
    let put = (0..COLUMNS).fold(Put::new(row.to_string()), |p, c| p.add("f", format!("c{c}"), value.to_string()));
    t.put(put).unwrap();
}

/// The raw versions of `row` still stored, all columns together.
fn raw_versions(t: &Table, row: &str) -> usize {
    let scan = Scan::new().start(row.to_string()).stop(format!("{row}\0")).raw(true).all_versions();
    t.scan(scan).unwrap().map(|r| r.unwrap().cells.len()).sum()
}

/// The values of `r`'s columns, which a whole row write keeps equal.
fn whole_value(r: &RowResult) -> u64 {
    assert_eq!(r.cells.len(), COLUMNS, "a row read sees every column, one version each: {r:?}");
    let values: Vec<&[u8]> = r.cells.iter().map(|c| c.value.as_ref()).collect();
    assert!(values.windows(2).all(|w| w[0] == w[1]), "a row read saw two writes at once: {r:?}");
    std::str::from_utf8(values[0]).unwrap().parse().unwrap()
}

#[test]
fn an_open_scanner_keeps_the_versions_it_has_yet_to_read() {
    let te = TestEngine::new(1_000);
    let t = hot_table(&te);
    for i in 0..300 {
        put_all(&t, &format!("r{i:03}"), 0);
    }
    let mut scanner = t.scan(Scan::new()).unwrap();
    // The scanner reads a buffer of rows at a time: r250 comes in a later fill.
    assert_eq!(scanner.next().unwrap().unwrap().row.as_ref(), b"r000");
    for v in 1..=1_000 {
        put_all(&t, "r250", v);
    }
    assert_eq!(
        raw_versions(&t, "r250"),
        1_001 * COLUMNS,
        "while the scanner is open, the versions it can see stay, and so do the ones behind them"
    );
    let r250 = scanner.find(|r| r.as_ref().unwrap().row.as_ref() == b"r250").unwrap().unwrap();
    assert_eq!(whole_value(&r250), 0, "the scanner reads its snapshot");
    assert_eq!(whole_value(&t.get(Get::new("r250")).unwrap()), 1_000);
    drop(scanner);
    put_all(&t, "r250", 1_001);
    assert_eq!(raw_versions(&t, "r250"), 2 * COLUMNS, "the next write drops what no reader can see");
    assert_eq!(whole_value(&t.get(Get::new("r250").all_versions()).unwrap()), 1_001);
    // What is left survives a flush.
    te.engine().flush("t").unwrap();
    assert_eq!(whole_value(&t.get(Get::new("r250")).unwrap()), 1_001);
}

#[test]
fn readers_racing_writes_to_a_hot_row_see_whole_rows_in_order() {
    let te = TestEngine::new(1_000);
    let t = hot_table(&te);
    put_all(&t, "hot", 0);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..2)
            .map(|n| {
                let (t, done) = (&t, &done);
                s.spawn(move || {
                    let (mut last, mut reads) = (0, 0u64);
                    while !done.load(Ordering::Acquire) {
                        let r = if n == 0 {
                            t.get(Get::new("hot").all_versions()).unwrap()
                        } else {
                            t.scan(Scan::new().prefix("hot")).unwrap().next().unwrap().unwrap()
                        };
                        let v = whole_value(&r);
                        assert!(v >= last, "a later read saw an older row: {v} after {last}");
                        last = v;
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        for v in 1..=3_000 {
            put_all(&t, "hot", v);
        }
        done.store(true, Ordering::Release);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
    });
    put_all(&t, "hot", 3_001);
    assert_eq!(raw_versions(&t, "hot"), 2 * COLUMNS, "the last write and the version every reader saw");
}

/// Flushed memstores leave their arena chunks to the ones after them: a scanner still reading
/// a flushed memstore keeps every cell of it intact while later memstores fill reused chunks.
#[test]
fn a_scanner_keeps_its_memstore_intact_while_later_ones_reuse_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let clock = std::sync::Arc::new(ManualClock::new(1_000));
    let opts = TestEngine::options(&clock).memstore_flush_bytes(2 << 20);
    let engine = Engine::open(dir.path(), opts).unwrap();
    engine.create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f"))).unwrap();
    let t = engine.table("t").unwrap();
    const ROWS: u32 = 3000;
    let value = |round: u32, n: u32| format!("{round}:{n:06}:").repeat(40);
    let write = |round: u32| {
        for n in 0..ROWS {
            t.put(Put::new(format!("r{n:06}")).add("f", "v", value(round, n))).unwrap();
        }
    };
    let check = |r: RowResult, round: u32, n: u32| {
        assert_eq!(r.row, format!("r{n:06}").as_bytes());
        assert_eq!(r.cells.len(), 1);
        assert!(r.cells[0].value == value(round, n).as_bytes(), "row {n} of round {round}");
    };
    write(1);
    let mut scanner = t.scan(Scan::new()).unwrap();
    check(scanner.next().unwrap().unwrap(), 1, 0);
    engine.flush("t").unwrap();
    // About 4 MiB more: memstores flush, and each next one fills the chunks they left.
    for round in 2..5 {
        write(round);
    }
    for n in 1..ROWS {
        check(scanner.next().unwrap().unwrap(), 1, n);
    }
    assert!(scanner.next().is_none());
    let latest: Vec<RowResult> = t.scan(Scan::new()).unwrap().map(Result::unwrap).collect();
    assert_eq!(latest.len(), ROWS as usize);
    for (n, r) in (0..ROWS).zip(latest) {
        check(r, 4, n);
    }
}
