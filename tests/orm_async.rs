//! The asynchronous API: every operation answers as its synchronous form does, on every
//! backend; on the embedded engine calls run on Cellar's blocking pool, never on the runtime's
//! workers; and a future dropped at any await point of an indexed write leaves what a crash
//! there would — queries answer what the data says, and verification finds only leftovers a
//! repair clears.

mod common;

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Waker};

use cellar::engine::{Engine, EngineOptions};
use cellar::orm::store::{EmbeddedStore, Store};
use cellar::prelude::*;
use common::people::{
    assert_indexes_clean, check_index_queries, person, repair_indexes, verify_only_leftovers, Person, PersonKey,
};
use common::stepped::{poll_times, Stepped};
use futures::StreamExt;

/// A runtime of two workers, as a small service has.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "async_counts", max_versions = 3)]
struct Tally {
    #[cellar(key)]
    name: String,
    #[cellar(counter, column = "n")]
    hits: i64,
    #[cellar(column = "l")]
    label: Option<String>,
}

on_every_backend! {
fn async_operations_answer_as_the_synchronous_ones(db: Db) {
    let people = db.repo::<Person>().unwrap();
    let tallies = db.repo::<Tally>().unwrap();
    let (people_async, tallies_async) = (people.to_async(), tallies.to_async());
    runtime().block_on(async {
        people_async.put(&person(1, 1, 0, 30, Some(0))).await.unwrap();
        let more: Vec<Person> = (2..40).map(|i| person(i, i as u8, i as u8, 20 + i as u8, Some(i as u8 % 2))).collect();
        people_async.put_many(&more).await.unwrap();

        // Reads: the async answer is the sync one.
        for id in [1, 2, 39, 40] {
            assert_eq!(people_async.get(id).await.unwrap(), people.get(id).unwrap(), "get {id}");
            assert_eq!(people_async.exists(id).await.unwrap(), people.exists(id).unwrap(), "exists {id}");
        }
        let many = people_async.get_many([3, 40, 1]).await.unwrap();
        assert_eq!(many, people.get_many([3, 40, 1]).unwrap());
        assert_eq!(many.iter().map(|p| p.as_ref().map(|p| p.id)).collect::<Vec<_>>(), [Some(3), None, Some(1)]);

        // A put moves the version on; a save of a stale copy is refused, as in the sync API.
        let mut one = people_async.get(1).await.unwrap().unwrap();
        assert_eq!(one.version, 1);
        people_async.save(&mut one).await.unwrap();
        assert_eq!(one.version, 2);
        let mut stale = one.clone();
        stale.version = 1;
        assert!(matches!(people_async.save(&mut stale).await, Err(cellar::Error::VersionConflict { .. })));
        // A unique value another entity holds is refused.
        let mut taken = person(1, 2, 0, 30, None);
        taken.version = 2;
        assert!(matches!(people_async.save(&mut taken).await, Err(cellar::Error::UniqueViolation { .. })));

        // Scans: stream, page and to_vec agree with the sync scan, in both directions.
        let all: Vec<u32> = people.scan().to_vec().unwrap().iter().map(|p| p.id).collect();
        assert_eq!(all.len(), 39);
        let streamed: Vec<u32> = people_async.scan().stream().map(|p| p.unwrap().id).collect().await;
        assert_eq!(streamed, all);
        let reversed: Vec<u32> =
            people_async.scan().reverse().limit(5).to_vec().await.unwrap().iter().map(|p| p.id).collect();
        assert_eq!(reversed, all.iter().rev().take(5).copied().collect::<Vec<_>>());
        let ranged: Vec<u32> =
            people_async.scan().range(PersonKey { id: 10 }..=PersonKey { id: 20 }).to_vec().await.unwrap().iter().map(|p| p.id).collect();
        assert_eq!(ranged, (10..=20).collect::<Vec<_>>());
        let mut paged = Vec::new();
        let mut cursor = None;
        loop {
            let mut query = people_async.scan();
            if let Some(c) = &cursor {
                query = query.after(c);
            }
            let page = query.page(7).await.unwrap();
            paged.extend(page.items.iter().map(|p| p.id));
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(paged, all);

        // Index reads: unique gets, scans of keys, covered entries and entities, pages.
        let email = |n: u8| person(0, n, 0, 0, None).email;
        let (by_email, by_email_sync) = (people_async.index(Person::BY_EMAIL), people.index(Person::BY_EMAIL));
        for n in [1, 2, 7, 200] {
            let (got, want) = (by_email.get(email(n)).await.unwrap(), by_email_sync.get(email(n)).unwrap());
            assert_eq!(got.map(|p| p.id), want.map(|p| p.id), "by_email {n}");
        }
        let (by_city, by_city_sync) = (people_async.index(Person::BY_CITY_AGE), people.index(Person::BY_CITY_AGE));
        for city in ["Oslo", "Lima", "Pune"] {
            let prefix = (city.to_string(),);
            let keys = by_city.scan().prefix(prefix.clone()).keys().await.unwrap();
            assert_eq!(keys, by_city_sync.scan().prefix(prefix.clone()).keys().unwrap(), "keys {city}");
            assert!(!keys.is_empty());
            let entities = by_city.scan().prefix(prefix.clone()).reverse().to_vec().await.unwrap();
            assert_eq!(entities, by_city_sync.scan().prefix(prefix.clone()).reverse().to_vec().unwrap(), "{city}");
            let names: Vec<String> = by_city
                .scan()
                .prefix(prefix.clone())
                .entries()
                .await
                .unwrap()
                .iter()
                .map(|e| e.get::<String>("name").unwrap())
                .collect();
            let mut want: Vec<&Person> = entities.iter().collect();
            want.reverse();
            assert_eq!(names, want.iter().map(|p| p.name.clone()).collect::<Vec<_>>(), "covered {city}");
            let page = by_city.scan().prefix(prefix.clone()).page(2).await.unwrap();
            let next = by_city.scan().prefix(prefix.clone()).after(page.next.as_ref().unwrap()).page(100).await.unwrap();
            let paged: Vec<u32> = page.items.iter().chain(&next.items).map(|p| p.id).collect();
            assert_eq!(paged, keys.iter().map(|k| k.id).collect::<Vec<_>>(), "pages {city}");
        }

        // Deletes, counters, history.
        people_async.delete(2).await.unwrap();
        assert_eq!(people.get(2).unwrap(), None);
        assert_eq!(tallies_async.increment("a".to_string(), Tally::HITS, 2).await.unwrap(), 2);
        assert_eq!(tallies_async.increment("a".to_string(), Tally::HITS, 3).await.unwrap(), 5);
        tallies_async.put(&Tally { name: "b".into(), hits: 0, label: Some("first".into()) }).await.unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        tallies_async.put(&Tally { name: "b".into(), hits: 0, label: Some("second".into()) }).await.unwrap();
        let history = tallies_async.history("b".to_string(), 5).await.unwrap();
        assert_eq!(history, tallies.history("b".to_string(), 5).unwrap());
        assert_eq!(history.iter().map(|(_, t)| t.label.clone().unwrap()).collect::<Vec<_>>(), ["second", "first"]);
        let (first_at, _) = history[1];
        let then = tallies_async.get_as_of("b".to_string(), first_at).await.unwrap().unwrap();
        assert_eq!(then.label.as_deref(), Some("first"));
    });
    check_index_queries(&people, "after the async writes");
    assert_indexes_clean(&people, "after the async writes");
}
}

on_every_backend! {
fn a_stream_dropped_early_and_futures_run_as_spawned_tasks(db: Db) {
    let people = db.repo::<Person>().unwrap();
    let everyone: Vec<Person> = (0..600).map(|i| person(i, (i % 250) as u8, i as u8, 30, None)).collect();
    // Unique emails: only the first 250 may be written.
    people.put_many(&everyone[..250]).unwrap();
    let people_async = people.to_async();
    let rt = runtime();
    // Two pages at most are read for the first ten entities.
    let (first, costs) = db.measure(|| {
        rt.block_on(async { people_async.scan().stream().take(10).map(|p| p.unwrap().id).collect::<Vec<_>>().await })
    });
    assert_eq!(first, (0..10).collect::<Vec<_>>());
    assert!(costs.rows_read <= 2 * (cellar::orm::repo::STREAM_PAGE as u64 + 1), "{costs:?}");
    // Futures are Send: tasks of the runtime run them.
    let tasks: Vec<_> = (0..50u32)
        .map(|i| {
            let people = people_async.clone();
            rt.spawn(async move { people.get(i * 5).await.unwrap().map(|p| p.id) })
        })
        .collect();
    let found: Vec<Option<u32>> = rt.block_on(async {
        let mut found = Vec::new();
        for task in tasks {
            found.push(task.await.unwrap());
        }
        found
    });
    assert_eq!(found, (0..50).map(|i| Some(i * 5)).collect::<Vec<_>>());
}
}

/// A data point with key parts stored as uids: new names are resolved (and assigned) by the
/// async API with awaited calls too.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "async_points")]
struct Point {
    #[cellar(partition, uid = "async_metrics")]
    metric: String,
    #[cellar(key, uid(kind = "async_hosts", width = 4))]
    host: String,
    #[cellar(column = "v")]
    value: f64,
}

/// A store that notes the thread each call of a kind runs on.
struct ThreadNotes {
    inner: EmbeddedStore,
    threads: Mutex<Vec<String>>,
}

impl ThreadNotes {
    fn note(&self) {
        let name = std::thread::current().name().unwrap_or("unnamed").to_string();
        self.threads.lock().unwrap().push(name);
    }
}

macro_rules! delegate {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $out:ty;)*) => {$(
        fn $name(&self, $($arg: $ty),*) -> cellar::Result<$out> {
            self.note();
            self.inner.$name($($arg),*)
        }
    )*};
}

impl Store for ThreadNotes {
    delegate! {
        ensure_table(spec: &cellar::orm::store::TableSpec) -> ();
        alter_families(table: &str, changes: &[cellar::orm::store::FamilyChange]) -> Vec<cellar::orm::store::FamilyAlteration>;
        mutate(table: &str, rows: Vec<cellar::orm::store::RowMutation>) -> ();
        read_rows(table: &str, rows: &[bytes::Bytes], read: &cellar::orm::store::ReadSpec) -> Vec<Option<cellar::orm::store::Row>>;
        check_and_mutate(table: &str, condition: cellar::orm::store::Condition, mutation: cellar::orm::store::RowMutation) -> bool;
        split_keys(table: &str) -> Option<Vec<bytes::Bytes>>;
        increment(table: &str, row: bytes::Bytes, family: &str, qualifier: &str, delta: i64) -> i64;
        mutate_group(table: &str, checks: Vec<cellar::orm::store::RowCheck>, rows: Vec<cellar::orm::store::RowMutation>) -> bool;
        commit(commit: cellar::orm::store::Commit) -> bool;
    }
    fn scan<'a>(
        &'a self,
        table: &str,
        scan: &cellar::orm::store::ScanSpec,
    ) -> cellar::Result<cellar::orm::store::RowStream<'a>> {
        self.note();
        self.inner.scan(table, scan)
    }
    fn guarantees(&self) -> cellar::orm::store::Guarantees {
        self.inner.guarantees()
    }
    fn read_and_commit(
        &self,
        table: &str,
        row: &bytes::Bytes,
        read: &cellar::orm::store::ReadSpec,
        build: &mut dyn FnMut(Option<&cellar::orm::store::Row>) -> Option<cellar::orm::store::Commit>,
    ) -> cellar::Result<Option<bool>> {
        self.note();
        self.inner.read_and_commit(table, row, read, build)
    }
}

#[test]
fn embedded_calls_run_on_the_blocking_pool_never_on_a_runtime_worker() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    let store = Arc::new(ThreadNotes { inner: EmbeddedStore::new(engine), threads: Mutex::default() });
    let db = Db::with_store(store.clone());
    let people = db.repo::<Person>().unwrap();
    store.threads.lock().unwrap().clear();
    people.put(&person(1, 1, 0, 30, None)).unwrap();
    let sync_threads = std::mem::take(&mut *store.threads.lock().unwrap());
    let here = std::thread::current().name().unwrap_or("unnamed").to_string();
    assert!(!sync_threads.is_empty() && sync_threads.iter().all(|t| *t == here), "{sync_threads:?}");

    let people_async = people.to_async();
    let points = db.repo::<Point>().unwrap().to_async();
    let fresh = Db::with_store(store.clone()).repo::<Point>().unwrap().to_async();
    store.threads.lock().unwrap().clear();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).thread_name("app-worker").build().unwrap();
    rt.block_on(async {
        people_async.put(&person(2, 2, 1, 31, Some(1))).await.unwrap();
        assert_eq!(people_async.get(2).await.unwrap().map(|p| p.id), Some(2));
        assert_eq!(people_async.scan().to_vec().await.unwrap().len(), 2);
        // Names never seen: their uids are assigned, then found, by calls on the pool.
        let point = Point { metric: "cpu".into(), host: "web-1".into(), value: 0.5 };
        points.put(&point).await.unwrap();
        points.put_many(&[Point { host: "web-2".into(), ..point.clone() }]).await.unwrap();
        assert_eq!(points.get(("cpu".to_string(), "web-1".to_string())).await.unwrap(), Some(point));
        assert_eq!(points.get(("mem".to_string(), "web-1".to_string())).await.unwrap(), None);
    });
    // A repository of another Db knows none of the names: its scan resolves every id it meets
    // on the pool too.
    let scanned = rt.block_on(fresh.scan().to_vec()).unwrap();
    assert_eq!(scanned.iter().map(|p| p.host.as_str()).collect::<Vec<_>>(), ["web-1", "web-2"]);
    let async_threads = std::mem::take(&mut *store.threads.lock().unwrap());
    assert!(!async_threads.is_empty());
    assert!(async_threads.iter().all(|t| t == "cellar-offload"), "{async_threads:?}");
}

#[test]
fn a_call_dropped_before_its_turn_never_runs_and_one_dropped_while_running_is_never_torn() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    let db = Db::with_store(Arc::new(EmbeddedStore::new(engine)));
    let people = db.repo::<Person>().unwrap();
    let people_async = people.to_async();
    // Never polled: the write is not made.
    let one = person(1, 1, 0, 30, None);
    drop(people_async.put(&one));
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(people.get(1).unwrap(), None);
    // Polled once (its call queued or running), then dropped: the write lands whole or not at
    // all, and the indexes answer what the data holds either way.
    for id in 10..40 {
        let p = person(id, id as u8, 0, 30, None);
        {
            let mut put = pin!(people_async.put(&p));
            let _ = put.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
        if let Some(stored) = people.get(id).unwrap() {
            assert_eq!((stored.email, stored.city), (p.email, p.city));
        }
    }
    check_index_queries(&people, "after dropped puts");
    verify_only_leftovers(&people, "after dropped puts");
}

/// Writes that change indexed values of existing people — new unique emails, taken ones, moved
/// cities, a delete and a batch — then index reads.
async fn indexed_writes(people: &cellar::orm::AsyncRepository<Person>) {
    let _ = people.put(&person(1, 11, 2, 40, Some(1))).await;
    let _ = people.put(&person(2, 3, 1, 41, None)).await; // email 3 is taken
    let _ = people.delete(3).await;
    let _ =
        people.put_many(&[person(4, 14, 0, 42, Some(0)), person(5, 15, 1, 43, None), person(6, 1, 2, 44, None)]).await;
    // Reads settle what earlier writes left: dropped midway, they leave what a crash would.
    let _ = people.index(Person::BY_EMAIL).get(person(0, 11, 0, 0, None).email).await;
    let _ = people.index(Person::BY_CITY_AGE).scan().prefix(("Lima".to_string(),)).to_vec().await;
}

/// Drops the writes above at each of their await points in turn, on a store without (or
/// with) atomic commits, and checks what is left each time.
fn drop_at_every_await_point(commits: bool) {
    let mut points = 0;
    for stop in 1.. {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
        let inner: Arc<dyn Store> = Arc::new(EmbeddedStore::new(engine));
        let db = Db::with_store(Arc::new(Stepped::new(inner, commits)));
        let people = db.repo::<Person>().unwrap();
        people.put_many(&(1..=5).map(|i| person(i, i as u8, i as u8, 30, None)).collect::<Vec<_>>()).unwrap();
        let people_async = people.to_async();
        let finished = poll_times(indexed_writes(&people_async), stop);
        let context = format!("commits {commits}, dropped at await point {stop}");
        check_index_queries(&people, &context);
        verify_only_leftovers(&people, &context);
        let runtime = runtime();
        // The async verification reports what the synchronous one does.
        let reports = runtime.block_on(async {
            let email = people_async.verify_index(Person::BY_EMAIL).run().await.unwrap();
            let city = people_async.verify_index(Person::BY_CITY_AGE).run().await.unwrap();
            (email, city)
        });
        assert_eq!(reports.0, people.verify_index(Person::BY_EMAIL).run().unwrap(), "{context}");
        assert_eq!(reports.1, people.verify_index(Person::BY_CITY_AGE).run().unwrap(), "{context}");
        // Whatever was left, the next writer goes through, and repair (async or not) leaves
        // nothing.
        runtime.block_on(indexed_writes(&people_async));
        check_index_queries(&people, &context);
        if stop % 2 == 0 {
            repair_indexes(&people);
        } else {
            runtime.block_on(async {
                for index in [
                    people_async.verify_index(Person::BY_EMAIL),
                    people_async.verify_index(Person::BY_CITY_AGE),
                    people_async.verify_index(Person::BY_TAG),
                ] {
                    index.repair().run().await.unwrap();
                }
            });
        }
        assert_indexes_clean(&people, &context);
        if finished {
            points = stop;
            break;
        }
    }
    assert!(points > 10, "the writes have await points to drop at: {points}");
    eprintln!("commits {commits}: dropped at each of {points} await points");
}

#[test]
fn a_write_dropped_at_any_await_point_is_a_crash_there_with_the_protocol_of_several_writes() {
    drop_at_every_await_point(false);
}

#[test]
fn a_write_dropped_at_any_await_point_is_a_crash_there_with_atomic_commits() {
    drop_at_every_await_point(true);
}

/// A stream hands out every entity before an unreadable row, as the synchronous iterator
/// does, though the row lies in a page fetched ahead; then the row's error, and the end.
#[test]
fn a_stream_hands_out_every_entity_before_an_error_as_the_iterator_does() {
    let db = Db::open_temporary().unwrap();
    let tallies = db.repo::<Tally>().unwrap();
    let all: Vec<Tally> = (0..400).map(|i| Tally { name: format!("t{i:04}"), hits: 0, label: None }).collect();
    tallies.put_many(&all).unwrap();
    // Row 300, in the second page, no longer reads: its label is not UTF-8.
    let rows: Vec<_> = db
        .store()
        .scan("async_counts", &cellar::orm::store::ScanSpec::default())
        .unwrap()
        .map(Result::unwrap)
        .collect();
    common::raw::put_cells(&db, "async_counts", rows[300].key.to_vec(), &[(b"l", vec![0xff, 0xfe])]);
    let read = tallies.scan().iter().unwrap().take_while(Result::is_ok).count();
    assert_eq!(read, 300, "the iterator: 300 entities, then the error");

    let (streamed, error, end) = runtime().block_on(async {
        let mut stream = tallies.to_async().scan().stream();
        let mut streamed = 0;
        let error = loop {
            match stream.next().await {
                Some(Ok(_)) => {
                    streamed += 1;
                    // A slow reader: the next page is fetched, and fails, meanwhile.
                    tokio::time::sleep(std::time::Duration::from_micros(200)).await;
                }
                Some(Err(e)) => break e,
                None => panic!("the stream ended without the error after {streamed} entities"),
            }
        };
        (streamed, error, stream.next().await.is_none())
    });
    assert_eq!(streamed, 300);
    assert!(error.to_string().contains("async_counts"), "{error}");
    assert!(end, "the stream ends after its error");
}

#[test]
fn futures_are_send_and_static_where_a_service_needs_them() {
    fn send<T: Send>(_: &T) {}
    let db = Db::open_temporary().unwrap();
    let people = db.repo::<Person>().unwrap().to_async();
    let p = person(1, 1, 1, 1, None);
    send(&people.put(&p));
    send(&people.get(1));
    send(&people.get_many([1, 2]));
    send(&people.delete(1));
    send(&people.scan().page(3));
    send(&people.scan().to_vec());
    let stream = people.scan().stream();
    send(&stream);
    fn owned<T: 'static>(_: T) {}
    owned(stream);
}

on_every_backend! {
fn async_calls_cost_what_synchronous_ones_do(db: Db) {
    let people = db.repo::<Person>().unwrap();
    let people_async = people.to_async();
    let rt = runtime();
    let everyone: Vec<Person> = (0..30).map(|i| person(i, i as u8, i as u8, 30, None)).collect();
    people.put_many(&everyone[..15]).unwrap();
    let ((), sync_put) = db.measure(|| people.put_many(&everyone[15..20]).unwrap());
    let ((), async_put) = db.measure(|| rt.block_on(people_async.put_many(&everyone[20..25])).unwrap());
    assert_eq!(async_put, sync_put, "put_many of five");
    let (a, sync_get) = db.measure(|| people.get_many([1, 2, 40]).unwrap());
    let (b, async_get) = db.measure(|| rt.block_on(people_async.get_many([1, 2, 40])).unwrap());
    assert_eq!((a, sync_get), (b, async_get), "get_many");
    let (a, sync_scan) = db.measure(|| people.scan().page(10).unwrap().items);
    let (b, async_scan) = db.measure(|| rt.block_on(people_async.scan().page(10)).unwrap().items);
    assert_eq!((a, sync_scan), (b, async_scan), "a page of ten");
    assert_eq!(async_scan.scans, 1);
}
}

/// On Bigtable a dropped future cannot be stepped call by call: the writes are dropped after
/// a range of delays instead, so that they stop at different steps (a call in flight at the
/// drop may still land, as a request sent by a process that then died).
#[test]
fn a_write_dropped_midway_on_bigtable_leaves_what_a_crash_there_would() {
    let Some(_) = common::backend::emulator() else { return };
    let runtime = runtime();
    let mut finished = 0;
    for delay_us in [0, 100, 300, 600, 1_000, 1_500, 2_000, 3_000, 4_000, 6_000, 8_000, 12_000, 20_000, 40_000] {
        let store = common::backend::bigtable_store().expect("the emulator");
        let db = Db::with_store(Arc::new(store));
        let people = db.repo::<Person>().unwrap();
        people.put_many(&(1..=5).map(|i| person(i, i as u8, i as u8, 30, None)).collect::<Vec<_>>()).unwrap();
        let people_async = people.to_async();
        let delay = std::time::Duration::from_micros(delay_us);
        let done = runtime.block_on(async { tokio::time::timeout(delay, indexed_writes(&people_async)).await.is_ok() });
        finished += usize::from(done);
        let context = format!("dropped after {delay_us} µs");
        // A call sent before the drop has landed by now (checked before it would race the
        // queries' own reads of data and index).
        std::thread::sleep(std::time::Duration::from_millis(100));
        check_index_queries(&people, &context);
        verify_only_leftovers(&people, &context);
        runtime.block_on(indexed_writes(&people_async));
        check_index_queries(&people, &context);
        repair_indexes(&people);
        assert_indexes_clean(&people, &context);
    }
    assert!(finished < 14, "some delays stop the writes midway");
}
