//! Power loss and I/O faults against an oracle of acknowledged writes, the db_stress way.
//!
//! Each cycle opens the engine on a [`FaultFs`] (after a power loss, sometimes with errors
//! switched on during the open itself), checks what it recovered, then runs a random sequence
//! of puts and deletes with flushes, compactions and splits in between (background ones too,
//! from small memstores and log segments), with injected EIO/ENOSPC errors or a full disk in
//! some cycles, and ends in a power loss or a clean close. The oracle is the history of writes:
//! - while the engine runs, a read returns what the acknowledged writes left (plus the one
//!   write that failed, if its fsync failed after it reached the memstore);
//! - after a restart the state is the one some prefix of the history left, and that prefix
//!   holds every write known to be durable: with `FsyncWal` every acknowledged write, with
//!   `SyncWal`/`AsyncWal` every write acknowledged before the last flush that returned (and
//!   after a clean close, every write `SyncWal` acknowledged);
//! - a failed log write or fsync makes the engine refuse writes until reopened, with reads
//!   working; rows stay atomic (both cells of a put, or neither);
//! - writes across tables stay atomic: some keys are only ever written by a multi-table
//!   mutation that puts (or deletes) the row in table `t` and its mirror in table `u`, which
//!   must agree at every read and after every restart.
//!
//! `CELLAR_FAULT_ROUNDS` sets the number of cycles (default 40), `CELLAR_FAULT_SEED` the seed;
//! with `CELLAR_FAULT_TRACE` a failure prints the file system calls that led to it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use cellar_engine::fault::{FaultCounts, FaultFs, FaultRates};
use cellar_engine::*;

/// Keys written one table at a time, `0..KEYS`; keys `KEYS..KEYS + MIRRORED` are only written
/// together with their mirror row in table `u`.
const KEYS: u64 = 48;
const MIRRORED: u64 = 16;
const ROOT: &str = "/db";

fn options(fs: &FaultFs) -> EngineOptions {
    EngineOptions::default()
        .memstore_flush_bytes(6 * 1024)
        // Several 4 KiB blocks per preallocated segment: a power loss can lose one in the
        // middle of the last segment and keep the ones after it.
        .wal_segment_bytes(16 * 1024)
        .max_wal_segments(4)
        .compaction_threshold(3)
        .background_threads(1)
        .block_cache_bytes(1 << 20)
        .flush_on_close(false)
        .write_stall_timeout(std::time::Duration::from_millis(100))
        .fs(Arc::new(fs.clone()))
}

fn key(k: u64) -> Vec<u8> {
    format!("k{k:03}").into_bytes()
}

/// Rows as the oracle sees them: key to value.
type State = BTreeMap<u64, Vec<u8>>;

/// One write of the history.
struct Write {
    key: u64,
    value: Option<Vec<u8>>,
}

/// What the engine holds now, read back: both cells of every row must agree, and (where there
/// is a table `u`) every mirrored row must have its mirror there, with the same value.
fn read_all(engine: &Engine) -> State {
    let t = engine.table("t").unwrap();
    let mut state = State::new();
    for row in t.scan(Scan::new()).unwrap() {
        let row = row.unwrap();
        let a = row.value(b"f", b"a").map(|v| v.to_vec());
        let b = row.value(b"f", b"b").map(|v| v.to_vec());
        assert_eq!(a, b, "row {:?} was half written", row.row);
        let k: u64 = std::str::from_utf8(&row.row[1..]).unwrap().parse().unwrap();
        state.insert(k, a.expect("a row without its cells"));
    }
    if !engine.table_exists("u") {
        return state;
    }
    let mut mirrors = State::new();
    for row in engine.table("u").unwrap().scan(Scan::new()).unwrap() {
        let row = row.unwrap();
        let k: u64 = std::str::from_utf8(&row.row[1..]).unwrap().parse().unwrap();
        mirrors.insert(k, row.value(b"f", b"a").expect("a mirror without its cell").to_vec());
    }
    let mirrored: State = state.iter().filter(|(&k, _)| k >= KEYS).map(|(&k, v)| (k, v.clone())).collect();
    assert_eq!(mirrored, mirrors, "a multi-table mutation was half applied");
    state
}

/// A put (or, with `None`, a delete) of mirrored row `k` in both tables, as one mutation.
fn mirrored(t: &Table, u: &Table, k: u64, value: Option<&[u8]>) -> MultiTableMutation {
    let (row_t, row_u) = match value {
        Some(v) => (
            RowMutations::new(key(k)).with(Put::new(key(k)).add("f", "a", v.to_vec()).add("f", "b", v.to_vec())),
            RowMutations::new(key(k)).with(Put::new(key(k)).add("f", "a", v.to_vec())),
        ),
        None => {
            (RowMutations::new(key(k)).with(Delete::new(key(k))), RowMutations::new(key(k)).with(Delete::new(key(k))))
        }
    };
    MultiTableMutation::new().row(t, row_t).row(u, row_u)
}

fn apply(state: &mut State, w: &Write) {
    match &w.value {
        Some(v) => state.insert(w.key, v.clone()),
        None => state.remove(&w.key),
    };
}

/// The length of the shortest history prefix at least `floor` long that leaves `found`.
fn matching_prefix(base: &State, history: &[Write], floor: usize, found: &State) -> Option<usize> {
    let mut state = base.clone();
    history[..floor].iter().for_each(|w| apply(&mut state, w));
    for p in floor..=history.len() {
        if p > floor {
            apply(&mut state, &history[p - 1]);
        }
        if &state == found {
            return Some(p);
        }
    }
    None
}

/// For a failure message: the prefix that comes closest, and how the state differs from it.
fn closest(base: &State, history: &[Write], found: &State) -> String {
    let mut state = base.clone();
    let mut best = (usize::MAX, 0, String::new());
    for p in 0..=history.len() {
        if p > 0 {
            apply(&mut state, &history[p - 1]);
        }
        let keys: std::collections::BTreeSet<&u64> = state.keys().chain(found.keys()).collect();
        let diff: Vec<String> = keys
            .into_iter()
            .filter(|k| state.get(k) != found.get(k))
            .map(|k| {
                let show = |v: Option<&Vec<u8>>| v.map(|v| String::from_utf8_lossy(&v[..v.len().min(12)]).into_owned());
                format!("k{k}: expected {:?}, found {:?}", show(state.get(k)), show(found.get(k)))
            })
            .collect();
        if diff.len() < best.0 {
            best = (diff.len(), p, diff.join("; "));
        }
    }
    let mut full = base.clone();
    history.iter().for_each(|w| apply(&mut full, w));
    let keys: std::collections::BTreeSet<&u64> = full.keys().chain(found.keys()).collect();
    let missing: Vec<String> = keys
        .into_iter()
        .filter(|k| full.get(k) != found.get(k))
        .map(|k| {
            let writes: Vec<usize> = (0..history.len()).filter(|&i| history[i].key == *k).collect();
            let show = |v: Option<&Vec<u8>>| v.map(|v| String::from_utf8_lossy(&v[..v.len().min(8)]).into_owned());
            format!("k{k} written at {writes:?}, found {:?}", show(found.get(k)))
        })
        .collect();
    format!(
        "closest prefix {} differs in {} rows: {}; against the whole history: {}",
        best.1,
        best.0,
        best.2,
        missing.join("; ")
    )
}

struct Totals {
    cycles: u64,
    acknowledged: u64,
    lost_unsynced: u64,
    read_only: u64,
    failed_opens: u64,
}

#[test]
fn acknowledged_writes_survive_power_loss_and_io_errors() {
    let cycles: u64 = std::env::var("CELLAR_FAULT_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    let seed: u64 = std::env::var("CELLAR_FAULT_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5EED);
    let mut fs = FaultFs::new(seed);
    if std::env::var("CELLAR_FAULT_TRACE").is_ok() {
        fs.start_trace();
    }
    let rng = fs.clone();
    let roll = move |n: u64| rng.random() % n;
    let mut totals = Totals { cycles: 0, acknowledged: 0, lost_unsynced: 0, read_only: 0, failed_opens: 0 };
    let mut base = State::new();
    let mut history: Vec<Write> = Vec::new();
    let mut floor = 0;
    // The part of `floor` known durable on disk, not only handed to the OS.
    let mut synced_floor = 0;

    {
        let engine = Engine::open(ROOT, options(&fs)).unwrap();
        engine.create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f"))).unwrap();
        // The mirrors' own durability is the weakest: a mutation of both logs as `t` asks.
        let u = TableDescriptor::new("u").family(FamilyDescriptor::new("f")).durability(Durability::AsyncWal);
        engine.create_table(u).unwrap();
    }

    for cycle in 0..cycles {
        // Opening: under injected errors sometimes; it may fail cleanly, then opens without.
        if roll(4) == 0 {
            fs.set_rates(
                FaultRates::default().write(0.05).sync(0.05).create(0.1).rename(0.1).remove(0.1).sync_dir(0.1),
            );
            if let Ok(engine) = Engine::open(ROOT, options(&fs)) {
                // An open makes the log it replayed durable.
                drop(engine);
            } else {
                totals.failed_opens += 1;
                // What a clean close left unsynced may not survive this power loss.
                floor = synced_floor;
            }
            fs = fs.power_loss();
        }
        let engine = Engine::open(ROOT, options(&fs)).unwrap_or_else(|e| panic!("cycle {cycle}: open failed: {e}"));
        let found = read_all(&engine);
        let p = matching_prefix(&base, &history, floor, &found).unwrap_or_else(|| {
            for line in fs.trace() {
                eprintln!("{line}");
            }
            panic!(
                "cycle {cycle}: recovered state is no prefix of the history of at least {floor} of {} writes: {}",
                history.len(),
                closest(&base, &history, &found)
            )
        });
        totals.lost_unsynced += (history.len() - p) as u64;
        base = found;
        history.clear();
        floor = 0;
        synced_floor = 0;

        let durability = [Durability::FsyncWal, Durability::SyncWal, Durability::AsyncWal][roll(3) as usize];
        if std::env::var("CELLAR_FAULT_TRACE").is_ok() {
            eprintln!("cycle {cycle}: {durability:?}, {:?}", fs.counts());
        }
        let trace = std::env::var("CELLAR_FAULT_TRACE").is_ok();
        engine
            .alter_table("t", |d| {
                d.durability = durability;
                Ok(())
            })
            .unwrap();
        match roll(4) {
            0 => fs.set_rates(FaultRates::default()),
            1 => fs.set_capacity(Some(fs.used() + 2_000 + roll(20_000))),
            _ => {
                let r = [0.002, 0.01, 0.03][roll(3) as usize];
                fs.set_rates(
                    FaultRates::default().write(r).sync(r).create(r * 3.0).rename(r * 3.0).remove(r).sync_dir(r),
                );
            }
        }

        let (t, u) = (engine.table("t").unwrap(), engine.table("u").unwrap());
        // The write that failed, if one did: it may or may not have been logged.
        let mut maybe: Option<usize> = None;
        let mut read_only = false;
        for i in 0..(60 + roll(200)) {
            let k = roll(KEYS);
            let op = roll(100);
            let (result, write) = if op < 60 {
                let value = format!("{cycle}:{i}:{}", "v".repeat(roll(120) as usize)).into_bytes();
                let put = Put::new(key(k)).add("f", "a", value.clone()).add("f", "b", value.clone());
                (t.put(put), Write { key: k, value: Some(value) })
            } else if op < 75 {
                (t.delete(Delete::new(key(k))), Write { key: k, value: None })
            } else if op < 85 {
                // A row and its mirror, put or deleted together.
                let k = KEYS + roll(MIRRORED);
                let value = (op < 82).then(|| format!("{cycle}:{i}:m{}", "v".repeat(roll(120) as usize)).into_bytes());
                let applied = engine.mutate_tables(mirrored(&t, &u, k, value.as_deref()));
                (
                    applied.map(|applied| assert!(applied, "a mutation without conditions applies")),
                    Write { key: k, value },
                )
            } else {
                let flushed = match op {
                    85..=89 => engine.flush("t").is_ok(),
                    90..=93 => engine.compact("t").map(|_| false).unwrap_or(false),
                    94..=96 => engine.major_compact("t").map(|_| false).unwrap_or(false),
                    _ => engine.split("t", None).map(|_| false).unwrap_or(false),
                };
                // A flush that returned made the log durable up to here.
                if flushed && !read_only {
                    floor = history.len();
                    synced_floor = floor;
                }
                continue;
            };
            if trace {
                eprintln!("OP {} k{} {:?}", history.len(), write.key, result.as_ref().map_err(|e| e.to_string()));
            }
            match result {
                Ok(()) => {
                    assert!(!read_only, "cycle {cycle}: a write was acknowledged after the log failed");
                    totals.acknowledged += 1;
                    history.push(write);
                    if durability == Durability::FsyncWal {
                        floor = history.len();
                        synced_floor = floor;
                    }
                }
                Err(Error::ReadOnly(reason)) => {
                    assert!(engine.read_only_reason().as_deref() == Some(reason.as_str()), "cycle {cycle}: {reason}");
                    read_only = true;
                }
                // Back-pressure while failing flushes cannot relieve it: nothing was written.
                Err(Error::RegionTooBusy { .. }) => {}
                Err(e) => {
                    assert!(!read_only && maybe.is_none(), "cycle {cycle}: after the log failed, a write got {e}");
                    assert!(
                        engine.read_only_reason().is_some(),
                        "cycle {cycle}: a write failed ({e}) but the engine still accepts writes"
                    );
                    maybe = Some(history.len());
                    history.push(write);
                    read_only = true;
                }
            }
            // Reads keep working and see every acknowledged write.
            if roll(8) == 0 {
                let now = read_all(&engine);
                let mut expected = base.clone();
                history.iter().for_each(|w| apply(&mut expected, w));
                let mut without = base.clone();
                history[..maybe.unwrap_or(history.len())].iter().for_each(|w| apply(&mut without, w));
                assert!(
                    now == expected || now == without,
                    "cycle {cycle}: a read missed an acknowledged write: {}",
                    closest(&base, &history, &now)
                );
            }
        }
        totals.read_only += u64::from(read_only);
        drop((t, u));
        if roll(4) == 0 {
            // A clean close keeps what reached the OS: every SyncWal and FsyncWal write.
            fs.set_rates(FaultRates::default());
            if durability != Durability::AsyncWal {
                floor = maybe.unwrap_or(history.len());
            }
            drop(engine);
        } else {
            let after = fs.power_loss();
            drop(engine);
            fs = after;
        }
        fs.set_capacity(None);
        totals.cycles += 1;
    }
    let counts: FaultCounts = fs.counts();
    eprintln!(
        "{} cycles, {} writes acknowledged, 0 acknowledged writes lost; {} unsynced writes rolled back \
         (SyncWal/AsyncWal tails); {} cycles ended read-only; {} opens failed under errors; faults: {counts:?}",
        totals.cycles, totals.acknowledged, totals.lost_unsynced, totals.read_only, totals.failed_opens
    );
    assert!(counts.power_losses > 0 && counts.errors() > 0, "{counts:?}");
    assert!(!Path::new(ROOT).exists(), "the test wrote to the real disk");
}

/// A flush that failed leaves its frozen memstore for the next flush, which must not count the
/// writes made in between as flushed: recovery would skip their log records.
#[test]
fn a_retried_flush_claims_only_what_it_wrote() {
    let fs = FaultFs::new(3);
    // Memstores far from full: no background flush steps in.
    let engine = Engine::open(ROOT, options(&fs).memstore_flush_bytes(1 << 20)).unwrap();
    engine
        .create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f")).durability(Durability::FsyncWal))
        .unwrap();
    let t = engine.table("t").unwrap();
    let put = |k: u64| t.put(Put::new(key(k)).add("f", "a", "v").add("f", "b", "v")).unwrap();
    (0..10).for_each(put);
    fs.set_rates(FaultRates::default().create(1.0));
    assert!(engine.flush("t").is_err(), "the flush cannot create its file");
    fs.set_rates(FaultRates::default());
    (10..20).for_each(put);
    // The retry writes the frozen memstore only; rows 10..20 stay in the log.
    engine.flush("t").unwrap();
    let fs = fs.power_loss();
    drop(t);
    drop(engine);
    let engine = Engine::open(ROOT, options(&fs)).unwrap();
    let found: Vec<u64> = read_all(&engine).into_keys().collect();
    assert_eq!(found, (0..20).collect::<Vec<_>>());
}

/// A write that waits in vain for flushes a full disk keeps failing says why, and writes go
/// through again once there is room.
#[test]
fn a_write_stalled_by_failing_flushes_names_their_failure() {
    let fs = FaultFs::new(5);
    let opts = options(&fs)
        .memstore_flush_bytes(16 * 1024)
        .global_memstore_bytes(64 * 1024)
        .write_stall_timeout(std::time::Duration::from_millis(300));
    let engine = Engine::open(ROOT, opts).unwrap();
    // No log: only the flushes need the disk.
    engine
        .create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f")).durability(Durability::SkipWal))
        .unwrap();
    let t = engine.table("t").unwrap();
    let put = |k: u64| t.put(Put::new(key(k)).add("f", "a", vec![7u8; 200]));
    fs.set_capacity(Some(fs.used()));
    let stalled = (0..10_000).map(put).find_map(Result::err).expect("writes stall once the memstores are full");
    match &stalled {
        Error::RegionTooBusy { cause: Some(cause), .. } => {
            assert!(cause.contains("flush") && cause.contains("No space left"), "{cause}");
        }
        other => panic!("expected a stall naming the flush's failure, got {other}"),
    }
    assert!(stalled.to_string().contains("No space left"), "{stalled}");
    fs.set_capacity(None);
    put(10_000).unwrap();
    assert!(engine.regions("t").unwrap()[0].files > 0, "the retried flush wrote its file");
}

/// Many `FsyncWal` writers at once share fsyncs (one writer leads each, the others wait for it
/// and find their records covered): every write acknowledged to any of them survives a power
/// loss, with fsyncs failing now and then or not at all. After a failed fsync no writer is
/// acknowledged again.
#[test]
fn concurrent_fsync_writers_lose_no_acknowledged_write() {
    const THREADS: u64 = 8;
    const PUTS: u64 = 150;
    for (seed, sync_errors) in [(11, 0.0), (12, 0.01), (13, 0.05)] {
        let fs = FaultFs::new(seed);
        let engine = Engine::open(ROOT, options(&fs).memstore_flush_bytes(1 << 20)).unwrap();
        let desc = TableDescriptor::new("t").family(FamilyDescriptor::new("f")).durability(Durability::FsyncWal);
        engine.create_table(desc).unwrap();
        fs.set_rates(FaultRates::default().sync(sync_errors));
        let t = engine.table("t").unwrap();
        let failed = std::sync::atomic::AtomicBool::new(false);
        let acknowledged: Vec<u64> = std::thread::scope(|s| {
            let writers: Vec<_> = (0..THREADS)
                .map(|w| {
                    let (t, failed) = (&t, &failed);
                    s.spawn(move || {
                        let mut acked = Vec::new();
                        for i in 0..PUTS {
                            let k = w * PUTS + i;
                            let v = format!("w{w}:{i}");
                            match t.put(Put::new(key(k)).add("f", "a", v.clone()).add("f", "b", v)) {
                                Ok(()) => acked.push(k),
                                Err(_) => failed.store(true, std::sync::atomic::Ordering::SeqCst),
                            }
                        }
                        acked
                    })
                })
                .collect();
            writers.into_iter().flat_map(|w| w.join().unwrap()).collect()
        });
        if failed.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(engine.read_only_reason().is_some(), "seed {seed}: a write failed, yet writes are accepted");
        } else {
            assert_eq!(acknowledged.len() as u64, THREADS * PUTS, "seed {seed}");
        }
        drop(t);
        let after = fs.power_loss();
        drop(engine);
        let engine = Engine::open(ROOT, options(&after)).unwrap();
        let found = read_all(&engine);
        let lost: Vec<&u64> = acknowledged.iter().filter(|k| !found.contains_key(k)).collect();
        assert!(lost.is_empty(), "seed {seed}: {} acknowledged writes lost, first {:?}", lost.len(), lost.first());
        drop(engine);
    }
}

/// A flush of every region at one sequence number (here `Engine::flush` of the only table)
/// lists its files without syncing the log: the segment it closed is removed without ever
/// reaching the disk. A power loss right after keeps every flushed row and a prefix of the
/// writes after the flush.
#[test]
fn a_flush_of_every_region_lists_its_files_without_syncing_the_log() {
    let fs = FaultFs::new(21);
    fs.start_trace();
    let engine = Engine::open(ROOT, options(&fs).memstore_flush_bytes(1 << 20)).unwrap();
    let desc = TableDescriptor::new("t").family(FamilyDescriptor::new("f"));
    engine.create_table_with_splits(desc, vec![key(KEYS / 2).into()]).unwrap();
    let t = engine.table("t").unwrap();
    for k in 0..KEYS {
        t.put(Put::new(key(k)).add("f", "q", format!("before-{k}"))).unwrap();
    }
    let from = fs.trace().len();
    engine.flush("t").unwrap();
    let trace = fs.trace();
    let segments: Vec<String> = trace
        .iter()
        .filter_map(|l| l.strip_prefix("create /db/wal/").and_then(|l| l.split(" = inode ").nth(1)))
        .map(str::to_string)
        .collect();
    assert!(!segments.is_empty());
    let log_syncs: Vec<&String> = trace[from..]
        .iter()
        .filter(|l| segments.iter().any(|inode| l.starts_with(&format!("sync inode {inode}:"))))
        .collect();
    assert!(log_syncs.is_empty(), "the flush synced the log: {log_syncs:?}");
    assert_eq!(engine.wal_segments(), 1, "the segment the flush closed is gone");
    for k in 0..KEYS {
        t.put(Put::new(key(k)).add("f", "q", format!("after-{k}"))).unwrap();
    }
    let fs = fs.power_loss();
    drop((t, engine));
    let engine = Engine::open(ROOT, options(&fs)).unwrap();
    let t = engine.table("t").unwrap();
    let values: Vec<String> = (0..KEYS)
        .map(|k| {
            let got = t.get(Get::new(key(k))).unwrap();
            String::from_utf8(got.value(b"f", b"q").expect("a flushed row survives").to_vec()).unwrap()
        })
        .collect();
    let kept = values.iter().take_while(|v| v.starts_with("after-")).count();
    assert!(values[kept..].iter().all(|v| v.starts_with("before-")), "no prefix of the writes: {values:?}");
}
