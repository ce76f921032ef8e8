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
//! `CELLAR_ORM_FAULT_ROUNDS` sets the number of cycles (default 12).

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cellar::engine::fault::{FaultFs, FaultRates};
use cellar::engine::{Engine, EngineOptions};
use cellar::orm::store::EmbeddedStore;
use cellar::prelude::*;
use common::people::{check_index_queries, person, Person};

const ROOT: &str = "/orm";
const ORDERS: u64 = 3;

fn open(fs: &FaultFs) -> cellar::engine::Result<(Engine, Db)> {
    let options = EngineOptions {
        memstore_flush_bytes: 16 * 1024,
        wal_segment_bytes: 16 * 1024,
        background_threads: 1,
        block_cache_bytes: 1 << 20,
        flush_on_close: false,
        write_stall_timeout: Duration::from_millis(100),
        fs: Arc::new(fs.clone()),
        ..EngineOptions::default()
    };
    let engine = Engine::open(ROOT, options)?;
    Ok((engine.clone(), Db::with_store(Arc::new(EmbeddedStore::new(engine)))))
}

/// Runs `$body` with `$repo` the aggregates of strategy `$s` and `$v` its versions.
macro_rules! with_strategy {
    ($db:expr, $s:expr, |$repo:ident, $v:ident| $body:block) => {
        match $s {
            0 => {
                use common::versions::normalized as $v;
                let $repo = $db.aggregates::<common::orders::normalized::Order>().unwrap();
                $body
            }
            1 => {
                use common::versions::single_table as $v;
                let $repo = $db.aggregates::<common::orders::single_table::Order>().unwrap();
                $body
            }
            2 => {
                use common::versions::denormalized as $v;
                let $repo = $db.aggregates::<common::orders::denormalized::Order>().unwrap();
                $body
            }
            _ => {
                use common::versions::blob as $v;
                let $repo = $db.aggregates::<common::orders::blob::Order>().unwrap();
                $body
            }
        }
    };
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
fn verify_check_repair(db: &Db, written: &Written, context: &str) -> usize {
    let people = db.repo::<Person>().unwrap();
    let mut leftovers = 0;
    for index in [
        people.verify_index(Person::BY_EMAIL),
        people.verify_index(Person::BY_CITY_AGE),
        people.verify_index(Person::BY_TAG),
    ] {
        let report = index.run().unwrap();
        assert_eq!(
            (report.missing, report.outdated, report.stale, report.violations),
            (0, 0, 0, 0),
            "{context}: only unverified leftovers may remain\n{report}"
        );
        leftovers += report.unverified;
    }
    check(db, written, context);
    for index in [
        people.verify_index(Person::BY_EMAIL).repair(),
        people.verify_index(Person::BY_CITY_AGE).repair(),
        people.verify_index(Person::BY_TAG).repair(),
    ] {
        index.run().unwrap();
    }
    for index in [
        people.verify_index(Person::BY_EMAIL),
        people.verify_index(Person::BY_CITY_AGE),
        people.verify_index(Person::BY_TAG),
    ] {
        let report = index.run().unwrap();
        assert!(report.is_clean(), "{context}: after repair\n{report}");
    }
    leftovers as usize
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
            fs.set_rates(FaultRates { write: r, sync: r, create: r * 3.0, rename: r * 3.0, remove: r, sync_dir: r });
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
