//! The evidence and the clean-up of schema evolution: `Db::census` counts what the rows of an
//! entity's table hold after two releases wrote it (a renamed column under its earlier and its
//! current qualifier, a widened number by cell width, blob versions, a dropped field's cells,
//! a defaulted field's absent ones), and `Repository::move_renamed` moves the renamed column's
//! cells to its current qualifier — leaving a newer cell there alone, keeping timestamps,
//! never overwriting a concurrent write, resuming after an interruption — after which release
//! 2 reads the same entities and the census finds no earlier-qualifier cell.
//!
//! Every test runs on every backend.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use cellar::orm::census::{CensusProgress, QualifierCount};
use cellar::orm::migrate::Format;
use cellar::orm::rename::MoveProgress;
use cellar::orm::store::{ReadSpec, Row};
use cellar::orm::{blob, Repository};
use cellar::prelude::*;
use common::blob_orders::document::{Order, OrderV1};
use common::faulty::Faulty;
use common::hooked::{Call, Hooked};

mod common;

const TABLE: &str = "census_customers";

/// Release 1 of a customer.
mod v1 {
    use cellar::prelude::*;

    use super::common::blob_orders::document::Order;

    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "census_customers")]
    pub struct Customer {
        #[cellar(key)]
        pub id: u64,
        #[cellar(column = "n")]
        pub name: String,
        pub visits: i32,
        pub fax: String,
        #[cellar(blob, column = "m")]
        pub memo: Order,
    }
}

fn tier_default() -> String {
    "bronze".into()
}

/// Release 2: `name` moved to `full_name`, `visits` widened to `i64`, `fax` dropped, `tier`
/// added with a default.
mod v2 {
    use cellar::prelude::*;

    use super::common::blob_orders::document::Order;

    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "census_customers")]
    pub struct Customer {
        #[cellar(key)]
        pub id: u64,
        #[cellar(column = "full_name", rename_from = "n")]
        pub name: String,
        pub visits: i64,
        #[cellar(blob, column = "m")]
        pub memo: Order,
        #[cellar(default = "super::tier_default")]
        pub tier: String,
    }
}

fn memo(id: u64) -> Order {
    Order { id, customer: format!("c{id}"), currency: "EUR".into(), lines: vec![("total".into(), 1, 100)] }
}

fn first(id: u64) -> v1::Customer {
    v1::Customer { id, name: format!("name {id}"), visits: 3, fax: "555".into(), memo: memo(id) }
}

fn second(id: u64) -> v2::Customer {
    v2::Customer {
        id,
        name: format!("name {id}"),
        visits: i64::from(i32::MAX) + 1,
        memo: memo(id),
        tier: "gold".into(),
    }
}

fn row_key(id: u64) -> Vec<u8> {
    v1::Customer::row_key(&first(id).key()).unwrap().for_write().to_vec()
}

/// Release 1 writes customers 0 to 29 — the memos of the first 20 as an earlier build of the
/// memo type wrote them (version 1, bincode) — then release 2 writes customers 30 to 39.
fn two_releases(db: &Db) -> (Repository<v1::Customer>, Repository<v2::Customer>) {
    let old = db.repo::<v1::Customer>().unwrap();
    for id in 0..30 {
        old.put(&first(id)).unwrap();
    }
    for id in 0..20 {
        let v1 = OrderV1 { id, customer: format!("c{id}"), total_cents: 100 };
        let cell = blob::encode(&v1, &blob::BlobFormat::new(1, blob::Codec::Bincode), blob::type_tag("Order")).unwrap();
        common::raw::put_cells(db, TABLE, row_key(id), &[(b"m", cell)]);
    }
    let new = db.repo::<v2::Customer>().unwrap();
    for id in 30..40 {
        new.put(&second(id)).unwrap();
    }
    (old, new)
}

/// The stored row of customer `id`, newest versions.
fn stored(db: &Db, id: u64) -> Row {
    let rows = db.store().read_rows(TABLE, &[row_key(id).into()], &ReadSpec::default()).unwrap();
    rows.into_iter().flatten().next().unwrap()
}

/// The timestamp of `d:qualifier` in `row`.
fn timestamp(row: &Row, qualifier: &str) -> Option<u64> {
    row.cells.iter().find(|c| &c.family[..] == b"d" && &c.qualifier[..] == qualifier.as_bytes()).map(|c| c.timestamp)
}

on_every_backend! {
fn the_census_counts_what_each_release_wrote(db: Db) {
    two_releases(&db);
    let mut progress: Vec<CensusProgress> = Vec::new();
    let census = db.census::<v2::Customer>().progress_every(16).on_progress(|p| progress.push(p.clone())).run().unwrap();
    println!("{census}");
    assert_eq!((census.entity, census.table, census.rows), ("Customer", TABLE, 40));
    assert_eq!((census.other_records, census.tombstones), (0, 0));

    // The renamed column: release 1's rows hold it only under `n`, release 2's only under
    // `full_name`.
    let name = census.column("name").unwrap();
    assert_eq!((name.current, name.aliases.clone(), name.alias_only, name.absent), (10, vec![("n", 30)], 30, 0));
    assert_eq!(name.widths.counts, BTreeMap::from([(6, 10), (7, 30)]), "`name 0` to `name 39`");
    // The widened number, by cell width.
    let visits = census.column("visits").unwrap();
    assert_eq!((visits.current, visits.absent), (40, 0));
    assert_eq!(visits.widths.counts, BTreeMap::from([(4, 30), (8, 10)]));
    assert_eq!(visits.widths.to_string(), "4 B: 30, 8 B: 10");
    // The defaulted field: absent from release 1's rows, which read as the default.
    let tier = census.column("tier").unwrap();
    assert_eq!((tier.current, tier.absent, tier.defaulted), (10, 30, 30));
    // The blob column, by stored version.
    let memo = census.column("memo").unwrap();
    let v1 = Format { codec: "bincode", version: Some(1) };
    let v3 = Format { codec: "msgpack", version: Some(3) };
    assert_eq!(memo.blob_formats, BTreeMap::from([(v1, 20), (v3, 20)]));
    assert_eq!((memo.blob_headerless, memo.blob_current), (0, Some(v3)));
    // The dropped field's cells, which no field maps.
    assert_eq!(census.unmapped, [QualifierCount { family: "d".into(), qualifier: "fax".into(), rows: 30 }]);
    assert_eq!(census.unmapped_rows("d", "fax"), 30);
    assert!(census.internal.is_empty());
    assert_eq!(census.alias_cells(), 30);

    let text = census.to_string();
    assert!(text.contains("census of Customer (table `census_customers`): 40 rows"), "{text}");
    assert!(text.contains("d:n 30 (30 only there)"), "{text}");
    assert!(text.contains("v1 bincode: 20, v3 msgpack (current): 20"), "{text}");
    assert!(text.contains("d:fax  30 rows"), "{text}");

    // Progress every 16 rows, and at the end.
    let seen: Vec<(u64, u64)> = progress.iter().map(|p| (p.scanned, p.rows)).collect();
    assert_eq!(seen, [(16, 16), (32, 32), (40, 40)]);
    assert_eq!(progress.last().unwrap().last_row, row_key(39));

    // Release 1's view of the same rows: release 2's new columns are the unmapped ones.
    let old = db.census::<v1::Customer>().run().unwrap();
    let name = old.column("name").unwrap();
    assert_eq!((name.current, name.absent), (30, 10));
    assert_eq!((old.unmapped_rows("d", "full_name"), old.unmapped_rows("d", "tier")), (10, 10));
    assert_eq!(old.column("fax").unwrap().absent, 10);
}

fn the_census_counts_only_the_rows_the_repository_returns(db: Db) {
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "census_shared", record_type = 1, index(name = "by_email", on(email)))]
    struct Member {
        #[cellar(key)]
        id: u32,
        email: String,
    }
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "census_shared", record_type = 2)]
    struct Visit {
        #[cellar(key)]
        id: u32,
        page: String,
    }
    let members = db.repo::<Member>().unwrap();
    for id in 0..4 {
        members.put(&Member { id, email: format!("m{id}@x") }).unwrap();
    }
    members.delete(2u32).unwrap();
    let visits = db.repo::<Visit>().unwrap();
    for id in 0..5 {
        visits.put(&Visit { id, page: "/".into() }).unwrap();
    }
    // An empty database: no table yet, no rows.
    assert_eq!(Db::open_temporary().unwrap().census::<Member>().run().unwrap().rows, 0);

    let census = db.census::<Member>().run().unwrap();
    assert_eq!(census.rows, members.scan().to_vec().unwrap().len() as u64);
    assert_eq!((census.rows, census.other_records), (3, 5));
    assert!(census.tombstones <= 1, "a delete leaves at most the write token: {census}");
    // The write token is Cellar's own cell, neither a field nor a dropped one.
    assert!(census.unmapped.is_empty(), "{census}");
    assert_eq!(census.internal, [QualifierCount { family: "d".into(), qualifier: "\\x00i".into(), rows: 3 }]);
    assert_eq!(census.column("email").unwrap().current, 3);
    let visits = db.census::<Visit>().run().unwrap();
    assert_eq!((visits.rows, visits.other_records + visits.tombstones), (5, 4));
}

fn the_move_puts_every_earlier_cell_under_the_current_qualifier(db: Db) {
    let (old, new) = two_releases(&db);
    // Customer 3: release 2 writes it after release 1 did; its cell under `full_name` is the
    // newest, and the move must not overwrite it.
    let mut c = new.get(3u64).unwrap().unwrap();
    c.name = "written by release 2".into();
    new.put(&c).unwrap();
    // Customer 4: release 1 writes it again after release 2 did; its cell under `n` is the
    // newest, and moves.
    new.put(&second(4)).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2));
    old.put(&v1::Customer { name: "written by release 1 again".into(), ..first(4) }).unwrap();
    let moved_at = timestamp(&stored(&db, 4), "n").unwrap();
    let before = new.scan().to_vec().unwrap();
    assert_eq!(before.len(), 40);

    let dry = new.move_renamed().dry_run().run().unwrap();
    assert_eq!((dry.rows, dry.rows_with_earlier, dry.moved(), dry.superseded()), (40, 30, 29, 1));
    assert_eq!(db.census::<v2::Customer>().run().unwrap().alias_cells(), 30, "a dry run writes nothing");

    let mut progress: Vec<MoveProgress> = Vec::new();
    let report = new.move_renamed().batch_rows(16).on_progress(|p| progress.push(p.clone())).run().unwrap();
    println!("{report}");
    assert_eq!((report.rows, report.rows_with_earlier, report.resumed_after.clone()), (40, 30, None));
    assert_eq!((report.moved(), report.superseded(), report.raced()), (29, 1, 0));
    assert_eq!(report.columns[0].versions, 29);
    assert!(report.to_string().contains("name (d:n -> d:full_name): moved 29, 1 already newer"), "{report}");
    let seen: Vec<(u64, u64)> = progress.iter().map(|p| (p.scanned, p.moved)).collect();
    assert_eq!(seen, [(16, 15), (32, 29), (40, 29)], "customer 3's value was already under `full_name`");

    // Release 2 reads what it read before.
    assert_eq!(new.scan().to_vec().unwrap(), before);
    assert_eq!(new.get(3u64).unwrap().unwrap().name, "written by release 2");
    assert_eq!(new.get(4u64).unwrap().unwrap().name, "written by release 1 again");
    // The moved cell kept its timestamp; the earlier qualifier is empty.
    let row = stored(&db, 4);
    assert_eq!(timestamp(&row, "full_name"), Some(moved_at));
    assert_eq!((timestamp(&row, "n"), timestamp(&stored(&db, 3), "n")), (None, None));
    let census = db.census::<v2::Customer>().run().unwrap();
    assert_eq!(census.alias_cells(), 0, "{census}");
    let name = census.column("name").unwrap();
    assert_eq!((name.current, name.alias_only, name.absent), (40, 0, 0));
    // Release 1 no longer finds the value: the move is for after its last reader is gone.
    let err = old.get(0u64).unwrap_err().to_string();
    assert!(err.contains("d:n") && err.contains("missing required column"), "{err}");

    // A write after the move stays the newest; nothing is left to move.
    new.put(&v2::Customer { name: "after the move".into(), ..second(4) }).unwrap();
    assert_eq!(new.get(4u64).unwrap().unwrap().name, "after the move");
    let again = new.move_renamed().run().unwrap();
    assert_eq!((again.rows, again.rows_with_earlier, again.moved()), (40, 0, 0));
}

fn an_interrupted_move_resumes_after_its_last_batch(db: Db) {
    let (_, new) = two_releases(&db);
    let before = new.scan().to_vec().unwrap();
    // The move's store fails the first mutating call after the first batch's checkpoint.
    let faulty = Arc::new(Faulty::new(db.store().clone(), 0, false));
    let failing = Db::with_store(faulty.clone());
    let interrupted = failing.repo::<v2::Customer>().unwrap();
    let arm = |_: &MoveProgress| faulty.fail_at.store(faulty.calls.load(Ordering::SeqCst) + 1, Ordering::SeqCst);
    let err = interrupted.move_renamed().batch_rows(10).on_progress(arm).run().unwrap_err();
    assert!(err.to_string().contains("injected failure"), "{err}");
    assert_eq!(db.census::<v2::Customer>().run().unwrap().alias_cells(), 20, "the first batch of 10 moved");

    let report = new.move_renamed().batch_rows(10).run().unwrap();
    assert!(report.resumed_after.is_some(), "{report}");
    assert_eq!((report.rows, report.moved(), report.raced()), (30, 20, 0), "the first batch is not read again");
    assert_eq!(db.census::<v2::Customer>().run().unwrap().alias_cells(), 0);
    assert_eq!(new.scan().to_vec().unwrap(), before);
    // Finished: the checkpoint is gone, and a next run reads the whole table.
    let again = new.move_renamed().run().unwrap();
    assert_eq!((again.resumed_after.clone(), again.rows, again.moved()), (None, 40, 0));
}

fn writes_between_the_read_and_the_move_are_kept(db: Db) {
    let (old, new) = two_releases(&db);
    let (app_old, app_new) = (old.clone(), new.clone());
    // Right before the move's first batch: release 2 writes customer 1 (a newer cell under
    // `full_name`) and release 1 writes customer 2 (a newer cell under `n`, which the move read
    // before it changed).
    let hook = move || {
        app_new.put(&v2::Customer { name: "release 2 meanwhile".into(), ..second(1) }).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
        app_old.put(&v1::Customer { name: "release 1 meanwhile".into(), ..first(2) }).unwrap();
    };
    let hooked = Hooked::new(
        Faulty::new(db.store().clone(), 0, false),
        |call, table| call == Call::CheckAndMutateMany && table == TABLE,
        hook,
    );
    let racing = Db::with_store(Arc::new(hooked));
    let report = racing.repo::<v2::Customer>().unwrap().move_renamed().run().unwrap();
    // Customer 2's move found its cell changed, read the row again and moved the new value.
    assert_eq!((report.moved(), report.superseded(), report.raced()), (30, 0, 0), "{report}");
    assert_eq!(new.get(1u64).unwrap().unwrap().name, "release 2 meanwhile");
    assert_eq!(new.get(2u64).unwrap().unwrap().name, "release 1 meanwhile");
    assert_eq!(new.get(5u64).unwrap().unwrap().name, "name 5");
    assert_eq!(db.census::<v2::Customer>().run().unwrap().alias_cells(), 0);
}

fn older_versions_move_with_their_timestamps(db: Db) {
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "census_prices", max_versions = 3)]
    struct Before {
        #[cellar(key)]
        sku: u32,
        #[cellar(column = "c")]
        cents: i64,
    }
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "census_prices", max_versions = 3)]
    struct After {
        #[cellar(key)]
        sku: u32,
        #[cellar(column = "cents", aliases = ["c"])]
        cents: i64,
    }
    let before = db.repo::<Before>().unwrap();
    for cents in [100, 120, 90] {
        before.put(&Before { sku: 7, cents }).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let after = db.repo::<After>().unwrap();
    let history = after.history(7u32, 3).unwrap();
    assert_eq!(history.iter().map(|(_, p)| p.cents).collect::<Vec<_>>(), [90, 120, 100]);
    let report = after.move_renamed().run().unwrap();
    assert_eq!((report.moved(), report.columns[0].versions), (1, 3));
    assert_eq!(after.history(7u32, 3).unwrap(), history, "every version, at its timestamp");
    assert_eq!(db.census::<After>().run().unwrap().alias_cells(), 0);
}
}
