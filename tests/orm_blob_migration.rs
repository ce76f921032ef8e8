//! Bulk migration of versioned blobs: a census of what is stored, a dry run that changes
//! nothing, a run that moves every old cell to the current version and reports the ones it
//! cannot read, resumption after an interruption from the checkpoint kept in the database, and
//! values written by the application meanwhile never reverted.
//!
//! Each test runs on every backend: the embedded engine and the Bigtable emulator.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cellar::engine::{Engine, EngineOptions};
use cellar::orm::blob::{self, BlobFormat, Codec};
use cellar::orm::migrate::{Census, Format};
use cellar::orm::store::EmbeddedStore;
use cellar::prelude::*;
use common::blob_orders::aggregate::{Order, OrderV1};
use common::hooked::{Call, Hooked};

fn v1(order_no: u64) -> OrderV1 {
    OrderV1 { customer: 1, order_no, skus: vec![format!("sku-{order_no}"), "tea".into()] }
}

fn key(order_no: u64) -> Vec<u8> {
    [1u64.to_be_bytes(), order_no.to_be_bytes()].concat()
}

/// Stores a blob cell (and a generation token) as an earlier build would have.
fn store_raw(db: &Db, order_no: u64, cell: Vec<u8>) {
    common::raw::put_blob_row(db, "vorders", key(order_no), cell);
}

fn v1_cell(order_no: u64) -> Vec<u8> {
    blob::encode(&v1(order_no), &BlobFormat::new(1, Codec::Bincode), blob::type_tag("Order")).unwrap()
}

/// `old` orders at version 1, then `current` at version 2 (written by the repository), and
/// order 0 damaged.
fn mixed(db: Db, old: u64, current: u64) -> (Db, AggregateRepository<Order>) {
    let orders = db.aggregates::<Order>().unwrap();
    for n in 1..=old {
        store_raw(&db, n, v1_cell(n));
    }
    for n in old + 1..=old + current {
        orders.put(&Order::from(v1(n))).unwrap();
    }
    let mut damaged = v1_cell(0);
    *damaged.last_mut().unwrap() ^= 0xFF;
    store_raw(&db, 0, damaged);
    (db, orders)
}

fn census(v1: u64, v2: u64, unreadable: u64) -> Census {
    let mut c = Census { unreadable, ..Census::default() };
    if v1 > 0 {
        c.formats.insert(Format { codec: "bincode", version: Some(1) }, v1);
    }
    if v2 > 0 {
        c.formats.insert(Format { codec: "msgpack", version: Some(2) }, v2);
    }
    c
}

on_every_backend! {
fn a_migration_moves_every_readable_cell_to_the_current_version(db: Db) {
    let (db, orders) = mixed(db, 120, 30);
    let before = db.migrate::<Order>().census().unwrap();
    assert_eq!(before, census(120, 30, 1));
    assert_eq!(before.to_string(), "v1 bincode: 120, v2 msgpack: 30, unreadable: 1");

    let dry = db.migrate::<Order>().dry_run().run().unwrap();
    assert_eq!((dry.rows, dry.rewritten, dry.current, dry.raced), (151, 120, 30, 0));
    assert_eq!(db.migrate::<Order>().census().unwrap(), before, "a dry run writes nothing");

    let mut reports = Vec::new();
    let report = db.migrate::<Order>().on_progress(|p| reports.push(p.clone())).run().unwrap();
    assert_eq!((report.rows, report.rewritten, report.current, report.raced), (151, 120, 30, 0));
    assert_eq!(report.census, before, "the census of what the run found");
    assert_eq!(report.failures.len(), 1);
    assert_eq!(
        report.failures[0].row,
        "\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00"
    );
    assert!(report.failures[0].reason.contains("checksum"), "{}", report.failures[0].reason);
    assert_eq!(reports.last().map(|p| (p.rows, p.rewritten, p.failed)), Some((151, 120, 1)));

    assert_eq!(db.migrate::<Order>().census().unwrap(), census(0, 150, 1));
    for n in 1..=150 {
        assert_eq!(orders.get((1, n)).unwrap(), Some(Order::from(v1(n))), "order {n}");
    }
    let again = db.migrate::<Order>().run().unwrap();
    assert_eq!((again.rewritten, again.current, again.resumed_after), (0, 150, None));
    // Asked to, a run stops at the damaged cell with an error naming it.
    let err = db.migrate::<Order>().stop_on_error().run().unwrap_err().to_string();
    assert!(
        err.starts_with("table `vorders`, row \\x00") && err.contains("column d:b: blob payload checksum"),
        "{err}"
    );
}
}

on_every_backend! {
fn a_run_stopped_by_a_damaged_cell_finishes_the_rows_before_it(db: Db) {
    db.aggregates::<Order>().unwrap();
    for n in 1..=200 {
        let mut cell = v1_cell(n);
        if n == 100 {
            *cell.last_mut().unwrap() ^= 0xFF;
        }
        store_raw(&db, n, cell);
    }
    let err = db.migrate::<Order>().stop_on_error().run().unwrap_err().to_string();
    assert!(err.contains("checksum"), "{err}");
    assert_eq!(db.migrate::<Order>().census().unwrap(), census(100, 99, 1), "orders 1 to 99 migrated");
}
}

on_every_backend! {
fn an_interrupted_migration_resumes_after_its_checkpoint(db: Db) {
    let (db, orders) = mixed(db, 2500, 0);
    // The run dies (here: its progress callback panics) right after its first checkpoint.
    let died = catch_unwind(AssertUnwindSafe(|| {
        db.migrate::<Order>().on_progress(|_| panic!("killed")).run().unwrap();
    }));
    assert!(died.is_err());
    // The first 1000 rows: the damaged order 0 and orders 1 to 999.
    assert_eq!(db.migrate::<Order>().census().unwrap(), census(1501, 999, 1));
    let report = db.migrate::<Order>().run().unwrap();
    assert!(report.resumed_after.is_some(), "resumed from the checkpoint");
    assert_eq!((report.rows, report.rewritten, report.current), (1501, 1501, 0), "the first 1000 rows not redone");
    assert_eq!(db.migrate::<Order>().census().unwrap(), census(0, 2500, 1));
    assert_eq!(orders.get((1, 2500)).unwrap(), Some(Order::from(v1(2500))));
}
}

on_every_backend! {
fn values_the_application_writes_meanwhile_are_never_reverted(db: Db) {
    let (db, orders) = mixed(db, 3000, 0);
    let written: Vec<u64> = (1..=3000).step_by(7).collect();
    std::thread::scope(|s| {
        s.spawn(|| {
            for &n in &written {
                let mut order = Order::from(v1(n));
                order.status = "changed by the application".into();
                orders.put(&order).unwrap();
            }
        });
        db.migrate::<Order>().run().unwrap();
    });
    for n in 1..=3000 {
        let got = orders.get((1, n)).unwrap().unwrap();
        let expected = if written.contains(&n) { "changed by the application" } else { "migrated" };
        assert_eq!(got.status, expected, "order {n}");
    }
    assert_eq!(db.migrate::<Order>().census().unwrap(), census(0, 3000, 1));
}
}

#[test]
fn a_rewrite_that_loses_the_race_leaves_the_application_value() {
    let dir = tempfile::tempdir().unwrap();
    let inner = EmbeddedStore::new(Engine::open(dir.path(), EngineOptions::default()).unwrap());
    let app = Db::with_store(Arc::new(inner.clone()));
    let app_orders = app.aggregates::<Order>().unwrap();
    for n in 1..=1500 {
        store_raw(&app, n, v1_cell(n));
    }
    let changed = [3, 500, 999];
    let hook = move || {
        for n in changed {
            let mut order = Order::from(v1(n));
            order.status = "changed by the application".into();
            app_orders.put(&order).unwrap();
        }
    };
    // The migration's first batch of rewrites waits for the application's writes.
    let store = Hooked::new(inner, |call, _| call == Call::CheckAndMutateMany, hook);
    let racing = Db::with_store(Arc::new(store));
    let report = racing.migrate::<Order>().run().unwrap();
    // The application changed three rows of the first batch after the migration read them.
    assert_eq!((report.rows, report.rewritten, report.raced), (1500, 1497, 3));
    let orders = racing.aggregates::<Order>().unwrap();
    for n in 1..=1500 {
        let expected = if changed.contains(&n) { "changed by the application" } else { "migrated" };
        assert_eq!(orders.get((1, n)).unwrap().unwrap().status, expected, "order {n}");
    }
}
