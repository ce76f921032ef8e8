//! The long-running jobs as futures: a migration, an index backfill, a copy and a re-keying
//! copy run with `run_async` report what their synchronous runs report and leave the same
//! data, on every backend; their futures are `Send` (a runtime spawns them); and a
//! future dropped after its first checkpoint is a kill at that point: a later run, async or
//! sync, resumes after the checkpoint and leaves the data complete.

mod common;

use std::future::Future;
use std::pin::pin;

use cellar::orm::copy::{CopyProgress, RekeyProgress};
use cellar::orm::index::BackfillProgress;
use cellar::orm::migrate::Progress;
use cellar::orm::store::{CellMutation, ReadSpec, RowMutation, ScanSpec};
use cellar::orm::testing::{bigtable_store, emulator, Backend};
use cellar::prelude::*;
use cellar::Bytes;
use common::blob_orders::aggregate::{Order, OrderV1};
use common::people::{person, Person};
use futures::channel::oneshot;
use futures::future::{select, Either};

/// Declares tests that each get a maker of fresh, empty databases of one backend (the job's
/// two forms run on databases of their own, filled alike): `name::embedded` and
/// `name::bigtable` (skipped without the emulator).
macro_rules! on_both_backends {
    ($(fn $name:ident($fresh:ident) $body:block)*) => {$(
        mod $name {
            use super::*;

            #[test]
            fn embedded() {
                let $fresh = || Db::open_temporary().unwrap();
                $body
            }

            #[test]
            fn bigtable() {
                if emulator().is_none() {
                    return;
                }
                let $fresh = || Backend::Bigtable(bigtable_store().unwrap()).db();
                $body
            }
        }
    )*};
}

/// A runtime of two workers, as a small service has.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn assert_send<T: Send>(_: &T) {}

/// Runs `job` until `stop` fires (from the job's progress callback), then drops it where it
/// is, as a kill of the process there would stop it; `None` if it was dropped.
async fn run_until<F: Future>(job: F, stop: oneshot::Receiver<()>) -> Option<F::Output> {
    match select(pin!(job), stop).await {
        Either::Left((done, _)) => Some(done),
        Either::Right(_) => None,
    }
}

/// A progress callback that fires `stop` at its first call.
fn stop_at_first<P>(stop: oneshot::Sender<()>) -> impl FnMut(&P) + Send {
    let mut stop = Some(stop);
    move |_| {
        if let Some(stop) = stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Every blob cell (`d:b`) of `table`, every version, as (row, value), in order: what two
/// databases filled alike must agree on after a migration (timestamps differ where the store
/// stamped the writes, and generation tokens are each database's own).
fn blobs(db: &Db, table: &str) -> Vec<(Bytes, Bytes)> {
    let scan = ScanSpec { read: ReadSpec { max_versions: u32::MAX, ..ReadSpec::default() }, ..ScanSpec::default() };
    let mut out = Vec::new();
    for row in db.store().scan(table, &scan).unwrap() {
        let row = row.unwrap();
        let blob = row.cells.into_iter().filter(|c| &c.family[..] == b"d" && &c.qualifier[..] == b"b");
        out.extend(blob.map(|c| (row.key.clone(), c.value)));
    }
    out
}

/// As [`cells`], with each cell's timestamp: what a copy keeps.
fn versions(db: &Db, table: &str) -> Vec<(Bytes, Bytes, Bytes, u64, Bytes)> {
    let scan = ScanSpec { read: ReadSpec { max_versions: u32::MAX, ..ReadSpec::default() }, ..ScanSpec::default() };
    let mut out = Vec::new();
    for row in db.store().scan(table, &scan).unwrap() {
        let row = row.unwrap();
        out.extend(row.cells.into_iter().map(|c| (row.key.clone(), c.family, c.qualifier, c.timestamp, c.value)));
    }
    out
}

// --- Migration ---------------------------------------------------------------------------

const OLD_ORDERS: u64 = 2300;
const CURRENT_ORDERS: u64 = 200;

fn v1(order_no: u64) -> OrderV1 {
    OrderV1 { customer: 1, order_no, skus: vec![format!("sku-{order_no}"), "tea".into()] }
}

/// Orders 1..=2300 at version 1, 2301..=2500 at version 2, and order 0 damaged.
fn orders(db: &Db) {
    use cellar::orm::blob::{self, BlobFormat, Codec};
    let repo = db.aggregates::<Order>().unwrap();
    let key = |n: u64| [1u64.to_be_bytes(), n.to_be_bytes()].concat();
    let v1_cell = |n: u64| blob::encode(&v1(n), &BlobFormat::new(1, Codec::Bincode), blob::type_tag("Order")).unwrap();
    for n in 1..=OLD_ORDERS {
        common::raw::put_blob_row(db, "vorders", key(n), v1_cell(n));
    }
    for n in OLD_ORDERS + 1..=OLD_ORDERS + CURRENT_ORDERS {
        repo.put(&Order::from(v1(n))).unwrap();
    }
    let mut damaged = v1_cell(0);
    *damaged.last_mut().unwrap() ^= 0xFF;
    common::raw::put_blob_row(db, "vorders", key(0), damaged);
}

on_both_backends! {
fn a_migration_run_async_does_what_run_does(fresh) {
    let (sync_db, async_db) = (fresh(), fresh());
    orders(&sync_db);
    orders(&async_db);
    let mut sync_progress: Vec<Progress> = Vec::new();
    let sync = sync_db.migrate::<Order>().on_progress(|p| sync_progress.push(p.clone())).run().unwrap();
    assert_eq!((sync.rows, sync.rewritten, sync.current, sync.failures.len()), (2501, 2300, 200, 1));

    let rt = runtime();
    let dry = rt.block_on(async_db.migrate::<Order>().dry_run().run_async()).unwrap();
    assert_eq!(dry, async_db.migrate::<Order>().dry_run().run().unwrap(), "a dry run, either form");
    let job = {
        let db = async_db.clone();
        async move {
            let mut progress: Vec<Progress> = Vec::new();
            let migration = db.migrate::<Order>().on_progress(|p| progress.push(p.clone()));
            let report = migration.run_async().await;
            (report, progress)
        }
    };
    assert_send(&async_db.migrate::<Order>().on_progress(|_| {}).run_async());
    let (report, async_progress) = rt.block_on(rt.spawn(job)).unwrap();
    assert_eq!(report.unwrap(), sync);
    assert_eq!(async_progress, sync_progress);
    assert_eq!(async_progress.iter().map(|p| p.rows).collect::<Vec<_>>(), [1000, 2000, 2501]);
    assert_eq!(blobs(&async_db, "vorders"), blobs(&sync_db, "vorders"));
    assert_eq!(async_db.migrate::<Order>().census().unwrap(), sync_db.migrate::<Order>().census().unwrap());
}

fn a_dropped_migration_resumes_from_its_checkpoint(fresh) {
    let db = fresh();
    orders(&db);
    let rt = runtime();
    let (stop, stopped) = oneshot::channel();
    let job = db.migrate::<Order>().on_progress(stop_at_first(stop)).run_async();
    assert!(rt.block_on(run_until(job, stopped)).is_none(), "dropped after its first checkpoint");

    // Resumed after the first 1000 rows, whatever the dropped future had in flight.
    let report = rt.block_on(db.migrate::<Order>().run_async()).unwrap();
    assert!(report.resumed_after.is_some(), "{report:?}");
    assert_eq!(report.rows, 1501);
    assert_eq!(report.rewritten + report.current + report.raced + report.census.unreadable, 1501, "{report:?}");
    let census = db.migrate::<Order>().census().unwrap();
    assert_eq!((census.readable(), census.formats.len(), census.unreadable), (2500, 1, 1), "{census}");
    // Finished: the next run starts over and finds nothing to do.
    let again = db.migrate::<Order>().run().unwrap();
    assert_eq!((again.resumed_after, again.rewritten, again.current), (None, 0, 2500));
}
}

// --- Index backfill ------------------------------------------------------------------------

/// `Person` as it was before its indexes were declared.
mod before_the_index {
    use cellar::prelude::*;

    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "people")]
    pub struct Person {
        #[cellar(key)]
        pub id: u32,
        #[cellar(column = "n")]
        pub name: String,
        #[cellar(column = "e")]
        pub email: String,
        #[cellar(column = "c")]
        pub city: String,
        #[cellar(column = "a")]
        pub age: u8,
        #[cellar(column = "t")]
        pub tag: Option<String>,
        #[cellar(version)]
        pub version: u64,
    }
}

const PEOPLE: u32 = 1200;

/// 1200 people stored before the indexes were declared (two of them share an email), and the
/// repository that declares them.
fn unindexed_people(db: &Db) -> Repository<Person> {
    let old = db.repo::<before_the_index::Person>().unwrap();
    let stored: Vec<before_the_index::Person> = (0..PEOPLE)
        .map(|id| {
            let p = person(id, 0, (id % 3) as u8, 20 + (id % 7) as u8, None);
            let email = if id == 1111 { "7@example.com".into() } else { format!("{id}@example.com") };
            before_the_index::Person { id, name: p.name, email, city: p.city, age: p.age, tag: p.tag, version: 0 }
        })
        .collect();
    old.put_many(&stored).unwrap();
    db.repo::<Person>().unwrap()
}

on_both_backends! {
fn a_backfill_run_async_does_what_run_does(fresh) {
    let (sync_db, async_db) = (fresh(), fresh());
    let sync_people = unindexed_people(&sync_db);
    let async_people = unindexed_people(&async_db);
    let mut sync_progress: Vec<BackfillProgress> = Vec::new();
    let sync =
        sync_people.build_index(Person::BY_CITY_AGE).on_progress(|p| sync_progress.push(p.clone())).run().unwrap();
    assert_eq!((sync.rows, sync.indexed, sync.built), (1200, 1200, true));
    let sync_unique = sync_people.build_index(Person::BY_EMAIL).run().unwrap();
    assert_eq!((sync_unique.violations.len(), sync_unique.built), (1, false), "{sync_unique:?}");

    let rt = runtime();
    let job = {
        let people = async_people.clone();
        async move {
            let mut progress: Vec<BackfillProgress> = Vec::new();
            let backfill = people.build_index(Person::BY_CITY_AGE).on_progress(|p| progress.push(p.clone()));
            let report = backfill.run_async().await;
            (report, progress)
        }
    };
    assert_send(&async_people.build_index(Person::BY_CITY_AGE).on_progress(|_| {}).run_async());
    let (report, async_progress) = rt.block_on(rt.spawn(job)).unwrap();
    assert_eq!(report.unwrap(), sync);
    assert_eq!(async_progress, sync_progress);
    assert_eq!(async_progress.iter().map(|p| p.rows).collect::<Vec<_>>(), [1000, 1200]);
    let async_unique = rt.block_on(async_people.build_index(Person::BY_EMAIL).run_async()).unwrap();
    assert_eq!(async_unique, sync_unique, "the same violation reported");

    for people in [&sync_people, &async_people] {
        let report = people.verify_index(Person::BY_CITY_AGE).run().unwrap();
        assert!(report.is_clean() && report.index_rows == 1200, "{report}");
        assert!(people.index(Person::BY_EMAIL).get("8@example.com".to_string()).is_err(), "left unbuilt");
    }
    let in_index_order = |people: &Repository<Person>| people.index(Person::BY_CITY_AGE).scan().to_vec().unwrap();
    assert_eq!(in_index_order(&async_people), in_index_order(&sync_people));
}

fn a_dropped_backfill_resumes_from_its_checkpoint(fresh) {
    let db = fresh();
    let people = unindexed_people(&db);
    let rt = runtime();
    let (stop, stopped) = oneshot::channel();
    let job = people.build_index(Person::BY_CITY_AGE).on_progress(stop_at_first(stop)).run_async();
    assert!(rt.block_on(run_until(job, stopped)).is_none(), "dropped after its first checkpoint");
    assert!(people.index(Person::BY_CITY_AGE).scan().to_vec().is_err(), "not built yet");

    // The synchronous form picks up where the async one stopped.
    let report = people.build_index(Person::BY_CITY_AGE).run().unwrap();
    assert!(report.resumed_after.is_some() && report.built, "{report:?}");
    assert_eq!((report.rows, report.indexed), (200, 200), "the first 1000 rows not redone");
    let verified = people.verify_index(Person::BY_CITY_AGE).run().unwrap();
    assert_eq!((verified.data_rows, verified.missing, verified.stale, verified.outdated), (1200, 0, 0, 0));
}
}

// --- Copy ----------------------------------------------------------------------------------

/// 240 people (with their indexes) to copy.
fn people_to_copy(db: &Db) {
    let people = db.repo::<Person>().unwrap();
    let all: Vec<Person> =
        (0..240u32).map(|id| person(id, id as u8, (id % 3) as u8, 20, (id % 2 == 0).then_some(1))).collect();
    for chunk in all.chunks(100) {
        people.put_many(chunk).unwrap();
    }
}

const COPIED: [&str; 3] = ["people", "people_idx", "cellar_indexes"];

on_both_backends! {
fn a_copy_run_async_does_what_run_does(fresh) {
    let (from, sync_to, async_to) = (fresh(), fresh(), fresh());
    people_to_copy(&from);
    let mut sync_progress: Vec<CopyProgress> = Vec::new();
    let sync = from
        .copy_to(&sync_to)
        .entity::<Person>()
        .batch_rows(50)
        .on_progress(|p| sync_progress.push(p.clone()))
        .run()
        .unwrap();
    assert_eq!(sync.tables.iter().map(|t| t.table.as_str()).collect::<Vec<_>>(), COPIED);

    let rt = runtime();
    let job = {
        let (from, to) = (from.clone(), async_to.clone());
        async move {
            let mut progress: Vec<CopyProgress> = Vec::new();
            let copy = from.copy_to(&to).entity::<Person>().batch_rows(50).on_progress(|p| progress.push(p.clone()));
            let report = copy.run_async().await;
            (report, progress)
        }
    };
    assert_send(&from.copy_to(&async_to).entity::<Person>().on_progress(|_| {}).run_async());
    let (report, async_progress) = rt.block_on(rt.spawn(job)).unwrap();
    assert_eq!(report.unwrap(), sync);
    assert_eq!(async_progress, sync_progress);
    for table in COPIED {
        assert_eq!(versions(&async_to, table), versions(&sync_to, table), "{table}");
    }
    assert_eq!(async_to.schema_history::<Person>().unwrap(), from.schema_history::<Person>().unwrap());
}

fn a_dropped_copy_resumes_after_its_last_batch(fresh) {
    let (from, to) = (fresh(), fresh());
    people_to_copy(&from);
    let rt = runtime();
    let (stop, stopped) = oneshot::channel();
    let job = from.copy_to(&to).entity::<Person>().batch_rows(50).on_progress(stop_at_first(stop)).run_async();
    assert!(rt.block_on(run_until(job, stopped)).is_none(), "dropped after its first batch");

    let report = rt.block_on(from.copy_to(&to).entity::<Person>().batch_rows(50).run_async()).unwrap();
    assert!(report.tables[0].resumed_after.is_some(), "{report}");
    assert_eq!(report.tables[0].rows, 190, "the first batch not copied again");
    for table in COPIED {
        assert_eq!(versions(&to, table), versions(&from, table), "{table}");
    }
    let people = to.repo::<Person>().unwrap();
    assert_eq!(people.index(Person::BY_EMAIL).get("p7@example.com".to_string()).unwrap().map(|p| p.id), Some(7));
}
}

// --- Re-keying copy ------------------------------------------------------------------------

/// The old layout: keyed by id alone, hash-salted over four buckets.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "accounts", salt(buckets = 4))]
struct OldAccount {
    #[cellar(key)]
    id: u32,
    #[cellar(column = "n")]
    name: String,
    #[cellar(column = "r")]
    region: String,
}

/// The new layout: keyed by (region, id), with a unique index.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "accounts_v2")]
struct Account {
    #[cellar(key)]
    region: String,
    #[cellar(key)]
    id: u32,
    #[cellar(column = "n", index = "by_name", unique)]
    name: String,
}

const ACCOUNTS: u32 = 700;

/// 700 old accounts, and one whose row does not decode.
fn old_accounts(db: &Db) {
    let old = db.repo::<OldAccount>().unwrap();
    let all: Vec<OldAccount> = (0..ACCOUNTS)
        .map(|id| OldAccount { id, name: format!("account {id}"), region: ["eu", "us"][id as usize % 2].into() })
        .collect();
    old.put_many(&all).unwrap();
    // The last one's region is not UTF-8: its row does not decode.
    old.put(&OldAccount { id: ACCOUNTS, name: "damaged".into(), region: "eu".into() }).unwrap();
    let row = OldAccount::row_key(&OldAccountKey::from(ACCOUNTS)).unwrap().for_write();
    let not_utf8 = vec![0xFF, 0xFE].into();
    let put = CellMutation::Put { family: "d".into(), qualifier: "r".into(), value: not_utf8, timestamp: None };
    db.store().mutate("accounts", vec![RowMutation { row, mutations: vec![put] }]).unwrap();
}

/// Every account moves but those of `eu` with an id that is a multiple of 100: left out.
fn convert(old: OldAccount) -> Result<Option<Account>, String> {
    if old.region == "eu" && old.id.is_multiple_of(100) {
        return Ok(None);
    }
    Ok(Some(Account { region: old.region, id: old.id, name: old.name }))
}

on_both_backends! {
fn a_rekey_run_async_does_what_run_does(fresh) {
    let (from, sync_to, async_to) = (fresh(), fresh(), fresh());
    old_accounts(&from);
    let mut sync_progress: Vec<RekeyProgress> = Vec::new();
    let sync = from
        .copy_to(&sync_to)
        .try_rekey(convert)
        .batch_rows(100)
        .on_progress(|p| sync_progress.push(p.clone()))
        .run()
        .unwrap();
    assert_eq!((sync.read, sync.written, sync.skipped, sync.failed), (700, 693, 7, 1), "{sync}");

    let rt = runtime();
    let job = {
        let (from, to) = (from.clone(), async_to.clone());
        async move {
            let mut progress: Vec<RekeyProgress> = Vec::new();
            let rekey = from.copy_to(&to).try_rekey(convert).batch_rows(100).on_progress(|p| progress.push(p.clone()));
            let report = rekey.run_async().await;
            (report, progress)
        }
    };
    assert_send(&from.copy_to(&async_to).try_rekey(convert).on_progress(|_| {}).run_async());
    let (report, async_progress) = rt.block_on(rt.spawn(job)).unwrap();
    assert_eq!(report.unwrap(), sync);
    assert_eq!(async_progress, sync_progress);
    let accounts = |db: &Db| db.repo::<Account>().unwrap().scan().to_vec().unwrap();
    assert_eq!(accounts(&async_to), accounts(&sync_to));
    assert_eq!(accounts(&async_to).len(), 693);
    let by_name = async_to.repo::<Account>().unwrap();
    let found = by_name.index(Account::BY_NAME).get("account 7".to_string()).unwrap();
    assert_eq!(found.map(|a| (a.region, a.id)), Some(("us".to_string(), 7)));

    // Errors are the synchronous form's too.
    let err = rt.block_on(from.copy_to(&from).table("accounts").try_rekey(convert).run_async()).unwrap_err();
    let sync_err = from.copy_to(&from).table("accounts").try_rekey(convert).run().unwrap_err();
    assert_eq!(err.to_string(), sync_err.to_string());
}

fn a_dropped_rekey_resumes_after_its_last_batch(fresh) {
    let (from, to) = (fresh(), fresh());
    old_accounts(&from);
    let rt = runtime();
    let (stop, stopped) = oneshot::channel();
    let job = from.copy_to(&to).try_rekey(convert).batch_rows(100).on_progress(stop_at_first(stop)).run_async();
    assert!(rt.block_on(run_until(job, stopped)).is_none(), "dropped after its first batch");

    // The synchronous form picks up where the async one stopped.
    let report = from.copy_to(&to).try_rekey(convert).batch_rows(100).run().unwrap();
    assert!(report.resumed_after.is_some(), "{report}");
    assert_eq!(report.read, 600, "the first batch not read again");
    let accounts = to.repo::<Account>().unwrap().scan().to_vec().unwrap();
    assert_eq!(accounts.len(), 693);
    let ids: std::collections::BTreeSet<u32> = accounts.iter().map(|a| a.id).collect();
    assert!(ids.contains(&1) && ids.contains(&699) && !ids.contains(&100), "every account arrives once");
}
}

// --- A conversion step that panics ---------------------------------------------------------

mod memo {
    use cellar::prelude::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct MemoV1 {
        pub text: String,
    }

    /// A memo whose step from version 1 panics on the text `boom`.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Versioned)]
    #[cellar(blob(version = 2, codec = "msgpack", history(1 = MemoV1 via "bincode")))]
    pub struct Memo {
        pub text: String,
        pub read: bool,
    }

    impl From<MemoV1> for Memo {
        fn from(v: MemoV1) -> Self {
            assert_ne!(v.text, "boom", "the step refuses boom");
            Memo { text: v.text, read: false }
        }
    }

    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "memos")]
    pub struct Memos {
        #[cellar(key)]
        pub id: u64,
        #[cellar(blob, column = "m")]
        pub memo: Memo,
    }
}

/// The text of a panic's payload.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload.downcast_ref::<String>().cloned();
    text.or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

#[test]
fn a_panicking_conversion_step_reaches_the_caller_in_both_forms() {
    use cellar::orm::blob::{self, BlobFormat, Codec};
    use memo::{Memo, MemoV1, Memos};
    let db = Db::open_temporary().unwrap();
    db.repo::<Memos>().unwrap();
    for id in 1..=5u64 {
        let text = if id == 3 { "boom".to_string() } else { format!("memo {id}") };
        let cell = blob::encode(&MemoV1 { text }, &BlobFormat::new(1, Codec::Bincode), blob::type_tag("Memo")).unwrap();
        common::raw::put_cells(&db, "memos", id.to_be_bytes().to_vec(), &[(b"m", cell)]);
    }
    let sync = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        db.migrate_column::<Memo>("memos", "d:m").unwrap().run()
    }));
    let sync = panic_text(&*sync.unwrap_err());
    assert!(sync.contains("the step refuses boom"), "{sync}");

    let rt = runtime();
    let job = {
        let db = db.clone();
        async move { db.migrate_column::<Memo>("memos", "d:m").unwrap().run_async().await }
    };
    let failed = rt.block_on(rt.spawn(job)).unwrap_err();
    assert_eq!(panic_text(&*failed.into_panic()), sync, "the same panic");
}
