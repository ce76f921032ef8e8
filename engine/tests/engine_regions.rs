//! Regions: pre-split tables route rows to the right region, scans cross region boundaries in
//! both directions, and splits — manual, concurrent with writers and scanners, across
//! restarts — never lose or duplicate a cell.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use cellar_engine::*;
use common::*;

fn table_with_splits(te: &TestEngine, splits: &[&str]) -> Table {
    let desc = TableDescriptor::new("t").family(FamilyDescriptor::new("f"));
    te.engine()
        .create_table_with_splits(desc, splits.iter().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect())
        .unwrap();
    te.table("t")
}

#[test]
fn hex_presplit_spreads_random_hex_keys_evenly() {
    let te = TestEngine::new(1000);
    let desc = TableDescriptor::new("t").family(FamilyDescriptor::new("f"));
    te.engine().create_table_with_splits(desc, SplitAlgorithm::HexString.split_keys(8).unwrap()).unwrap();
    let t = te.table("t");
    let mut rng = Rng(99);
    for _ in 0..8000 {
        t.put(Put::new(format!("{:016x}", rng.next())).add("f", "q", "v")).unwrap();
    }
    let regions = te.engine().regions("t").unwrap();
    assert_eq!(regions.len(), 8);
    for r in &regions {
        assert!((800..1200).contains(&r.writes), "region {:?} got {} of 8000 writes", r.start_key, r.writes);
    }
}

#[test]
fn bad_split_keys_are_rejected() {
    let te = TestEngine::new(1000);
    let desc = || TableDescriptor::new("t").family(FamilyDescriptor::new("f"));
    let keys = |k: &[&'static str]| k.iter().map(|s| Bytes::from_static(s.as_bytes())).collect();
    assert!(te.engine().create_table_with_splits(desc(), keys(&["b", "a"])).is_err());
    assert!(te.engine().create_table_with_splits(desc(), keys(&["a", ""])).is_err());
    assert!(!te.engine().table_exists("t"));
    let t = table_with_splits(&te, &["m"]);
    t.put(Put::new("a").add("f", "q", "v")).unwrap();
    assert!(matches!(te.engine().split("t", Some(b"m")), Err(Error::InvalidArgument { .. })), "a region's own start");
    assert_eq!(te.engine().split("t", Some(b"c")).unwrap(), 1);
    assert_eq!(te.engine().regions("t").unwrap().len(), 3);
}

/// A reversed scan from `start` (inclusive) down to `stop` (exclusive) returns the model's rows.
fn check_reversed(t: &Table, model: &BTreeMap<String, String>, start: &'static str, stop: &'static str) {
    let want: Vec<String> =
        model.range(..=start.to_string()).rev().filter(|(k, _)| k.as_str() > stop).map(|(k, _)| k.clone()).collect();
    assert_eq!(rows(t, Scan::new().reversed(true).start(start).stop(stop)), want, "reversed {start} down to {stop}");
}

fn check_scans(t: &Table, model: &BTreeMap<String, String>) {
    let all: Vec<String> = model.keys().cloned().collect();
    assert_eq!(rows(t, Scan::new()), all);
    let mut rev = all.clone();
    rev.reverse();
    assert_eq!(rows(t, Scan::new().reversed(true)), rev);
    // Ranges that start or end exactly on region boundaries (c, k3, m, t) as well as inside.
    for (start, stop) in
        [("b", "x"), ("k1", "k5"), ("m", "n"), ("", "zz"), ("c", "k3"), ("k3", "t"), ("m", "m0"), ("t", "z")]
    {
        let want: Vec<String> = model.range(start.to_string()..stop.to_string()).map(|(k, _)| k.clone()).collect();
        let scan = if start.is_empty() { Scan::new().stop(stop) } else { Scan::new().start(start).stop(stop) };
        assert_eq!(rows(t, scan), want, "[{start}, {stop})");
        if !start.is_empty() {
            check_reversed(t, model, start, stop);
        }
    }
    // Reversed scans whose ends sit on region boundaries.
    for (start, stop) in [("k3", "c"), ("t", "k3"), ("m", "c"), ("z", "m"), ("k5", "k1")] {
        check_reversed(t, model, start, stop);
    }
    assert_eq!(
        rows(t, Scan::new().prefix("k").limit(7)),
        model.keys().filter(|k| k.starts_with('k')).take(7).cloned().collect::<Vec<_>>()
    );
    for (k, v) in model {
        assert_eq!(t.get(Get::new(k.clone())).unwrap().value(b"f", b"q").unwrap().as_ref(), v.as_bytes());
    }
}

#[test]
fn scans_cross_region_boundaries_forward_and_reverse() {
    let te = TestEngine::new(1000);
    let t = table_with_splits(&te, &["c", "k3", "m", "t"]);
    let mut model = BTreeMap::new();
    let mut rng = Rng(5);
    for _ in 0..400 {
        let k = format!("{}{}", (b'a' + (rng.next() % 26) as u8) as char, rng.next() % 10);
        let v = format!("v{}", rng.next() % 1000);
        t.put(Put::new(k.clone()).add("f", "q", v.clone())).unwrap();
        model.insert(k, v);
    }
    check_scans(&t, &model);
    te.engine().flush("t").unwrap();
    check_scans(&t, &model);
    let batch: Vec<Mutation> = model.keys().take(50).map(|k| Delete::new(k.clone()).into()).collect();
    let removed: Vec<String> = model.keys().take(50).cloned().collect();
    assert!(t.batch(batch).unwrap().iter().all(|r| r.is_ok()), "a batch spanning regions");
    for k in removed {
        model.remove(&k);
    }
    check_scans(&t, &model);
}

#[test]
fn splits_share_files_until_compaction_and_survive_restart() {
    let mut te = TestEngine::new(1000);
    te.options_override = Some(TestEngine::options(&te.clock).auto_compact(false));
    te.reopen();
    let t = table_with_splits(&te, &[]);
    let mut model = BTreeMap::new();
    for i in 0..2000 {
        let k = format!("k{i:05}");
        t.put(Put::new(k.clone()).add("f", "q", format!("v{i}"))).unwrap();
        model.insert(k, format!("v{i}"));
    }
    te.engine().flush("t").unwrap();
    let files_before = std::fs::read_dir(te.dir.path().join("sst")).unwrap().count();
    assert_eq!(te.engine().split("t", None).unwrap(), 1);
    assert_eq!(te.engine().split("t", None).unwrap(), 2);
    let regions = te.engine().regions("t").unwrap();
    assert_eq!(regions.len(), 4);
    let sizes: Vec<u64> = regions.iter().map(|r| r.file_bytes).collect();
    assert!(sizes.iter().all(|&s| s > 0), "each quarter holds data: {sizes:?}");
    assert_eq!(std::fs::read_dir(te.dir.path().join("sst")).unwrap().count(), files_before, "a split writes no data");
    check_scans(&t, &model);
    drop(t);
    te.reopen();
    let t = te.table("t");
    assert_eq!(te.engine().regions("t").unwrap().len(), 4);
    check_scans(&t, &model);
    te.engine().major_compact("t").unwrap();
    let files: Vec<_> = std::fs::read_dir(te.dir.path().join("sst")).unwrap().collect();
    assert_eq!(files.len(), 4, "each region rewrote its own file and the shared one is gone");
    check_scans(&t, &model);
}

#[test]
fn splits_concurrent_with_writers_and_scanners_lose_nothing() {
    let te = TestEngine::new(1000);
    let t = table_with_splits(&te, &[]);
    let done = AtomicBool::new(false);
    let writers = 3;
    let per_writer = 1500;
    std::thread::scope(|s| {
        for w in 0..writers {
            let t = t.clone();
            s.spawn(move || {
                for i in 0..per_writer {
                    // Interleave writers across the key space so splits cut between them.
                    let k = format!("{:04}-{w}", i);
                    t.put(Put::new(k).add("f", "q", format!("{w}:{i}"))).unwrap();
                }
            });
        }
        let engine = te.engine().clone();
        let done_ref = &done;
        s.spawn(move || {
            while !done_ref.load(Ordering::Relaxed) {
                engine.split("t", None).unwrap();
                engine.compact("t").unwrap();
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        });
        let t2 = t.clone();
        s.spawn(move || {
            while !done_ref.load(Ordering::Relaxed) {
                // Each writer's rows are written in key order: a snapshot holds a gap-free
                // prefix of them, forward and backward, without duplicates.
                for reversed in [false, true] {
                    let mut seen = vec![Vec::new(); writers];
                    for r in t2.scan(Scan::new().reversed(reversed)).unwrap() {
                        let k = String::from_utf8(r.unwrap().row.to_vec()).unwrap();
                        let (i, w) = k.split_once('-').unwrap();
                        seen[w.parse::<usize>().unwrap()].push(i.parse::<usize>().unwrap());
                    }
                    for mut s in seen {
                        if reversed {
                            s.reverse();
                        }
                        assert!(s.iter().enumerate().all(|(n, &i)| n == i), "gap or duplicate: {s:?}");
                    }
                }
            }
        });
        // Stop the background loops once the writers are finished.
        let t3 = t.clone();
        s.spawn(move || loop {
            let n = t3.scan(Scan::new()).unwrap().count();
            if n == writers * per_writer {
                done_ref.store(true, Ordering::Relaxed);
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        });
    });
    assert!(te.engine().regions("t").unwrap().len() > 1, "splits happened");
    let mut expected = BTreeMap::new();
    for w in 0..writers {
        for i in 0..per_writer {
            expected.insert(format!("{:04}-{w}", i), format!("{w}:{i}"));
        }
    }
    check_scans(&t, &expected);
}

#[test]
fn background_work_flushes_compacts_and_splits_a_growing_table() {
    let dir = tempfile::tempdir().unwrap();
    let opts = EngineOptions::default()
        .memstore_flush_bytes(64 * 1024)
        .compaction_threshold(3)
        .global_memstore_bytes(1024 * 1024);
    let engine = Engine::open(dir.path(), opts.clone()).unwrap();
    let desc =
        TableDescriptor::new("t").family(FamilyDescriptor::new("f").block_size(4096)).max_region_size(1024 * 1024);
    engine.create_table(desc).unwrap();
    let t = engine.table("t").unwrap();
    let mut rng = Rng(3);
    let mut peak_memstore = 0u64;
    let n = 30_000;
    for i in 0..n {
        let k = format!("{:016x}", rng.next());
        t.put(Put::new(k).add("f", "q", vec![b'v'; 100]).durability(Durability::SkipWal)).unwrap();
        if i % 1000 == 0 {
            let m: u64 = engine.regions("t").unwrap().iter().map(|r| r.memstore_bytes).sum();
            peak_memstore = peak_memstore.max(m);
        }
    }
    assert!(engine.wait_idle(Duration::from_secs(60)), "background work finishes");
    let regions = engine.regions("t").unwrap();
    assert!(regions.len() >= 3, "the table split on its own: {} regions", regions.len());
    // Tens of flushes went into these regions; compactions merge them as they add up.
    let files: usize = regions.iter().map(|r| r.files).sum();
    assert!(
        files <= 2 * opts.compaction_threshold * regions.len() && regions.iter().all(|r| r.files < opts.blocking_files),
        "compactions keep file counts down: {regions:?}"
    );
    assert!(
        peak_memstore <= 4 * 64 * 1024 * regions.len() as u64 + 1024 * 1024,
        "memstores stay bounded: {peak_memstore}"
    );
    assert_eq!(t.scan(Scan::new()).unwrap().count(), n);
    drop(t);
    drop(engine);
    let engine = Engine::open(dir.path(), opts).unwrap();
    assert_eq!(engine.table("t").unwrap().scan(Scan::new().reversed(true)).unwrap().count(), n);
}

/// An engine whose background compactions merge runs of three files, with one table `t`.
fn compacting_table() -> (tempfile::TempDir, Engine, Table) {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), EngineOptions::default().compaction_threshold(3)).unwrap();
    engine.create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f"))).unwrap();
    let t = engine.table("t").unwrap();
    (dir, engine, t)
}

/// Puts `row<i>` with one 100-byte cell for every `i` of `rows`.
fn put_rows(t: &Table, rows: std::ops::Range<u32>) {
    for i in rows {
        t.put(Put::new(format!("row{i:06}")).add("f", "q", vec![b'v'; 100])).unwrap();
    }
}

/// A background compaction merges files of similar size: a store's large old file is not
/// rewritten every few flushes, only once the newer files add up to about its size. An
/// explicit compaction still merges everything.
#[test]
fn background_compactions_leave_a_large_old_file_until_newer_ones_add_up() {
    let (_dir, engine, t) = compacting_table();
    let put_rows = |rows| put_rows(&t, rows);
    let files = || {
        assert!(engine.wait_idle(Duration::from_secs(30)), "background work finishes");
        engine.regions("t").unwrap()[0].files
    };
    put_rows(0..6000);
    engine.flush("t").unwrap();
    // Small flushes of a fiftieth of its size each: the third makes a run of three to merge,
    // which leaves the large file alone.
    let mut next = 6000;
    for expected in [2, 3, 2] {
        put_rows(next..next + 120);
        next += 120;
        engine.flush("t").unwrap();
        assert_eq!(files(), expected);
    }
    // Once the newer files together come near its size, the large file is merged too.
    let mut flushes = 0;
    while files() > 1 {
        put_rows(next..next + 120);
        next += 120;
        engine.flush("t").unwrap();
        flushes += 1;
        assert!(flushes < 100, "the store never merged its large file: {} files", files());
    }
    assert!(flushes > 20, "the large file was merged after {flushes} small flushes");
    put_rows(next..next + 120);
    engine.flush("t").unwrap();
    engine.compact("t").unwrap();
    assert_eq!(files(), 1);
    assert_eq!(t.scan(Scan::new()).unwrap().count(), next as usize + 120);
}

/// A background compaction that takes in every file of a family drops the delete markers and
/// the cells they mask, as a major compaction does; one that leaves a file out keeps them, since
/// they may mask cells in that file.
#[test]
fn background_compactions_of_every_file_drop_markers_and_of_some_keep_them() {
    let (_dir, engine, t) = compacting_table();
    let put_rows = |rows| put_rows(&t, rows);
    let markers = || {
        let raw = t.scan(Scan::new().raw(true).all_versions()).unwrap();
        raw.map(|r| r.unwrap().cells.iter().filter(|c| c.cell_type != CellType::Put).count()).sum::<usize>()
    };
    let settle = || {
        assert!(engine.wait_idle(Duration::from_secs(30)), "background work finishes");
        engine.regions("t").unwrap()[0].files
    };
    // Three files of about one size, deletes in the middle one: one run of all three.
    put_rows(0..40);
    engine.flush("t").unwrap();
    put_rows(40..80);
    for i in 0..10 {
        t.delete(Delete::new(format!("row{i:06}"))).unwrap();
    }
    engine.flush("t").unwrap();
    put_rows(80..120);
    engine.flush("t").unwrap();
    assert_eq!(settle(), 1);
    assert_eq!(markers(), 0, "the markers went with the cells they masked");
    assert_eq!(t.scan(Scan::new().raw(true).all_versions()).unwrap().count(), 110);

    // A large file, then three small ones with deletes of its rows: the run leaves it out.
    put_rows(1000..5000);
    engine.flush("t").unwrap();
    engine.compact("t").unwrap();
    for round in 0..3u32 {
        t.delete(Delete::new(format!("row{:06}", 1000 + round))).unwrap();
        put_rows(6000 + 10 * round..6010 + 10 * round);
        engine.flush("t").unwrap();
    }
    assert_eq!(settle(), 2);
    assert_eq!(markers(), 3, "markers masking cells of a file left out stay");
    assert!(t.get(Get::new("row001000")).unwrap().is_empty());
    assert_eq!(t.scan(Scan::new()).unwrap().count(), 110 + 4000 - 3 + 30);
}

#[test]
fn many_writers_across_regions_with_concurrent_scans_lose_and_duplicate_nothing() {
    let te = TestEngine::new(1000);
    let desc = TableDescriptor::new("t").family(FamilyDescriptor::new("f")).family(FamilyDescriptor::new("g"));
    te.engine().create_table_with_splits(desc, SplitAlgorithm::HexString.split_keys(8).unwrap()).unwrap();
    let t = te.table("t");
    let writers = 4u64;
    let per_writer = 2000u64;
    let finished = AtomicBool::new(false);
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for w in 0..writers {
            let t = t.clone();
            handles.push(s.spawn(move || {
                let mut rng = Rng(w + 1);
                for i in 0..per_writer {
                    // Spread over every region; two families per row, written atomically.
                    let k = format!("{:08x}-{w}-{i}", rng.next() as u32);
                    t.put(Put::new(k).add("f", "q", format!("{w}")).add("g", "q", format!("{i}"))).unwrap();
                }
            }));
        }
        for reversed in [false, true] {
            let t = t.clone();
            let finished = &finished;
            s.spawn(move || {
                while !finished.load(Ordering::Relaxed) {
                    let mut prev: Option<Bytes> = None;
                    for r in t.scan(Scan::new().reversed(reversed)).unwrap() {
                        let r = r.unwrap();
                        assert_eq!(r.cells.len(), 2, "a row is seen whole or not at all");
                        if let Some(p) = &prev {
                            assert!(if reversed { r.row < *p } else { r.row > *p }, "order broken or row repeated");
                        }
                        prev = Some(r.row);
                    }
                }
            });
        }
        for h in handles {
            h.join().unwrap();
        }
        finished.store(true, Ordering::Relaxed);
    });
    let regions = te.engine().regions("t").unwrap();
    assert_eq!(regions.iter().map(|r| r.writes).sum::<u64>(), writers * per_writer);
    assert!(regions.iter().all(|r| r.writes > 0), "every region took writes: {regions:?}");
    assert_eq!(t.scan(Scan::new()).unwrap().count() as u64, writers * per_writer);
}
