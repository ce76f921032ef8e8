//! Power loss and I/O errors under the object mapper's multi-step writes, on the embedded engine
//! over a [`FaultFs`].
//!
//! Each cycle opens the database, checks what it recovered, and lets a writer thread put,
//! change and delete indexed entities and rewrite aggregates of all four storage strategies
//! while errors are injected into the file system (EIO/ENOSPC on writes, fsyncs, creates,
//! renames; none in some cycles). The cycle ends in a power loss at a random moment — the
//! writer mid-write, most often — or in a clean close once the writer stops. Whatever the
//! faults left, without any repair:
//! - every index query answers exactly what the data rows imply, and verification finds only
//!   unverified entries (which repair settles, leaving the index exactly the data);
//! - every aggregate is exactly one version that was written, never a mix of two;
//! - reads keep answering right on an engine that failed and went read-only.
//!
//! A blob migration run the same way — an application writing while it runs, power lost or
//! errors met on the way — resumes from its checkpoint on every open: no cell is ever
//! unreadable, none reverts to a value nobody wrote, and the last run leaves every cell at the
//! current version.
//!
//! `CELLAR_ORM_FAULT_ROUNDS` sets the number of cycles (default 12, and 6 runs of the migration).

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cellar::engine::fault::{FaultFs, FaultRates};
use cellar::engine::{Engine, EngineOptions};
use cellar::orm::store::EmbeddedStore;
use cellar::prelude::*;
use common::notes::{load, original, Note, Sticky};
use common::people::{
    assert_indexes_clean, check_index_queries, person, repair_indexes, verify_only_leftovers, Person,
};
use common::versions::with_strategy;

const ROOT: &str = "/orm";
const ORDERS: u64 = 3;

fn open(fs: &FaultFs) -> cellar::engine::Result<(Engine, Db)> {
    let options = EngineOptions::default()
        .memstore_flush_bytes(16 * 1024)
        .wal_segment_bytes(16 * 1024)
        .background_threads(1)
        .block_cache_bytes(1 << 20)
        .flush_on_close(false)
        .write_stall_timeout(Duration::from_millis(100))
        .fs(Arc::new(fs.clone()));
    let engine = Engine::open(ROOT, options)?;
    Ok((engine.clone(), Db::with_store(Arc::new(EmbeddedStore::new(engine)))))
}

/// Versions written (tried) of each aggregate, by (strategy, order number).
type Written = Arc<Mutex<HashMap<(u64, u64), HashSet<u64>>>>;

/// What recovery must give: index queries right, aggregates whole versions that were written.
fn check(db: &Db, written: &Written, context: &str) {
    let people = db.repo::<Person>().unwrap();
    check_index_queries(&people, context);
    for s in 0..4u64 {
        for k in 0..ORDERS {
            with_strategy!(db, s, |orders, versions| {
                if let Some(order) = orders.get((1, k)).unwrap() {
                    let v = versions::version_of(&order)
                        .unwrap_or_else(|| panic!("{context}: strategy {s} order {k} is no whole version: {order:?}"));
                    let ever = written.lock().unwrap().get(&(s, k)).is_some_and(|w| w.contains(&v));
                    assert!(ever, "{context}: strategy {s} order {k} is version {v}, never written");
                }
            });
        }
    }
}

/// Verification finds nothing but unverified leftovers (it runs before any read, which would
/// settle them); then `check`; then repair leaves the index exactly the data. Returns the
/// leftovers found.
fn verify_check_repair(db: &Db, written: &Written, context: &str) -> u64 {
    let people = db.repo::<Person>().unwrap();
    let leftovers = verify_only_leftovers(&people, context);
    check(db, written, context);
    repair_indexes(&people);
    assert_indexes_clean(&people, context);
    leftovers
}

/// Writes until `ops` are done or a write fails (a fault, or the power gone); returns the
/// writes acknowledged.
fn write(db: &Db, fs: &FaultFs, written: &Written, ops: u64) -> u64 {
    let people = db.repo::<Person>().unwrap();
    for i in 0..ops {
        let r = fs.random();
        let id = (r % 12) as u32;
        let (email, city, age) = ((r >> 8) % 20, (r >> 16) % 3, 20 + (r >> 24) % 5);
        let tag = (!(r >> 32).is_multiple_of(3)).then_some(((r >> 40) % 2) as u8);
        let result = match (r >> 48) % 10 {
            0 => people.delete(id),
            1 => {
                let batch: Vec<Person> =
                    (0..3).map(|j| person((id + j) % 12, ((r >> (j * 5)) % 20) as u8, city as u8, 20, None)).collect();
                people.put_many(&batch)
            }
            2..=5 => people.put(&person(id, email as u8, city as u8, age as u8, tag)),
            _ => {
                let (s, k) = ((r >> 52) % 4, (r >> 56) % ORDERS);
                let v = fs.random() % 1_000_000 + 1;
                written.lock().unwrap().entry((s, k)).or_default().insert(v);
                with_strategy!(db, s, |orders, versions| { orders.put(&versions::version(1, k, v)) })
            }
        };
        match result {
            Ok(()) | Err(cellar::orm::Error::UniqueViolation { .. }) => {}
            Err(_) => return i,
        }
    }
    ops
}

#[test]
fn multi_step_writes_survive_power_loss_and_io_errors() {
    let cycles: u64 = std::env::var("CELLAR_ORM_FAULT_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(12);
    let mut fs = FaultFs::new(0x0A11_FA17);
    let written: Written = Arc::default();
    let (mut acknowledged, mut leftovers, mut read_only, mut power_losses) = (0, 0, 0, 0);
    for cycle in 0..cycles {
        let (engine, db) = open(&fs).unwrap_or_else(|e| panic!("cycle {cycle}: open failed: {e}"));
        let context = format!("cycle {cycle}");
        leftovers += verify_check_repair(&db, &written, &context);

        if !fs.random().is_multiple_of(3) {
            let r = [0.002, 0.01, 0.03][(fs.random() % 3) as usize];
            fs.set_rates(FaultRates::default().write(r).sync(r).create(r * 3.0).rename(r * 3.0).remove(r).sync_dir(r));
        }
        let cut_power = !fs.random().is_multiple_of(4);
        let delay = Duration::from_micros(fs.random() % 40_000);
        let (acked, after) = std::thread::scope(|s| {
            let writer = s.spawn(|| write(&db, &fs, &written, 400));
            let after = cut_power.then(|| {
                std::thread::sleep(delay);
                fs.power_loss()
            });
            (writer.join().unwrap(), after)
        });
        acknowledged += acked;
        if let Some(after) = after {
            fs = after;
            power_losses += 1;
        }
        if !cut_power {
            fs.set_rates(FaultRates::default());
            // The writer stopped at a fault or at the end: reads still answer right, from an
            // engine gone read-only too.
            read_only += u64::from(engine.read_only_reason().is_some());
            check(&db, &written, &format!("{context}, before closing"));
        }
        drop(db);
        drop(engine);
    }
    eprintln!(
        "{cycles} cycles ({power_losses} power losses), {acknowledged} writes acknowledged, {leftovers} unverified \
         index entries settled by repair, {read_only} cycles ended read-only; faults: {:?}",
        fs.counts()
    );
    assert!(fs.counts().errors() > 0 && power_losses > 0);
}

const NOTES: u64 = 5000;

#[test]
fn a_blob_migration_resumes_through_power_loss_and_reverts_nothing() {
    let cycles: u64 = std::env::var("CELLAR_ORM_FAULT_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(6);
    let mut fs = FaultFs::new(0xB10B);
    {
        let (engine, db) = open(&fs).unwrap();
        load(&db, NOTES);
        // The load is durable before the first power loss.
        engine.flush("notes").unwrap();
    }
    // Every text the application tried to write, by row.
    let mut tried: HashMap<u64, HashSet<String>> = HashMap::new();
    let (mut resumed, mut finished, mut progress) = (0, false, 0);
    for cycle in 0..=cycles {
        let last = cycle == cycles;
        let (_engine, db) = open(&fs).unwrap_or_else(|e| panic!("cycle {cycle}: open failed: {e}"));
        let notes = db.repo::<Sticky>().unwrap();
        let census = db.migrate_column::<Note>("notes", "d:n").unwrap().census().unwrap();
        assert_eq!(census.unreadable, 0, "cycle {cycle}: {census}");
        for id in 0..NOTES {
            let note = notes.get(id).unwrap().unwrap_or_else(|| panic!("cycle {cycle}: note {id} is gone")).note;
            let written = match note.by.as_str() {
                "migration" => note == Note::from(original(id)),
                _ => tried.get(&id).is_some_and(|t| t.contains(&note.text)),
            };
            assert!(written, "cycle {cycle}: note {id} holds {note:?}, which nobody wrote");
        }
        if !last && !fs.random().is_multiple_of(3) {
            fs.set_rates(
                FaultRates::default().write(0.005).sync(0.005).create(0.02).rename(0.02).remove(0.005).sync_dir(0.005),
            );
        }
        let delay = Duration::from_micros(2_000 + fs.random() % 150_000);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let checkpoints = std::sync::atomic::AtomicU64::new(0);
        let after = std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0u64.. {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let id = (i * 7919 + cycle * 104_729) % NOTES;
                    let text = format!("app-{cycle}-{i}");
                    tried.entry(id).or_default().insert(text.clone());
                    let note = Note { text: text.clone(), by: "app".into() };
                    if notes.put(&Sticky { id, note }).is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
            });
            let migration = s.spawn(|| {
                let migration = db.migrate_column::<Note>("notes", "d:n").unwrap();
                migration.on_progress(|_| _ = checkpoints.fetch_add(1, std::sync::atomic::Ordering::Relaxed)).run()
            });
            let after = (!last).then(|| {
                std::thread::sleep(delay);
                fs.power_loss()
            });
            let report = migration.join().unwrap();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            (report, after)
        });
        let (report, after) = after;
        progress += checkpoints.into_inner();
        match report {
            Ok(report) => {
                resumed += usize::from(report.resumed_after.is_some());
                finished |= last;
            }
            Err(e) => assert!(!last, "the last run, without faults, failed: {e}"),
        }
        if let Some(after) = after {
            fs = after;
        }
        fs.set_rates(FaultRates::default());
    }
    assert!(finished);
    let (_engine, db) = open(&fs).unwrap();
    let census = db.migrate_column::<Note>("notes", "d:n").unwrap().census().unwrap();
    assert_eq!(census.to_string(), format!("v2 msgpack: {NOTES}, unreadable: 0"));
    eprintln!(
        "blob migration: {cycles} runs cut short with {progress} progress reports among them; \
         {resumed} finishing runs resumed from a checkpoint"
    );
}
