//! The Bigtable backend through its own [`AsyncStore`], polled from an application's tokio
//! runtime of two workers: every call answers what the synchronous API answers, and a scan
//! dropped part-way stops without holding up its caller.

mod common;

use std::future::Future;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cellar::orm::store::{
    BigtableStore, CellMutation, Condition, FamilySpec, ReadSpec, Row, RowMutation, ScanSpec, Store, TableSpec,
};
use common::backend::bigtable_store;

const TABLE: &str = "pairs";

/// Neither time nor I/O enabled: the store's futures need no driver of their caller's.
fn application_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().expect("a runtime")
}

/// Runs `body` as a task of `runtime`, on its workers, with the store as an `AsyncStore`.
fn on<T: Send + 'static, F: Future<Output = T> + Send + 'static>(
    runtime: &tokio::runtime::Runtime,
    store: &BigtableStore,
    body: impl FnOnce(BigtableStore) -> F,
) -> T {
    runtime.block_on(runtime.spawn(body(store.clone()))).expect("the task completes")
}

/// The synchronous API (`BigtableStore` has both, with methods of the same names).
fn sync(store: &BigtableStore) -> &dyn Store {
    store
}

fn spec(max_versions: u32) -> TableSpec {
    TableSpec {
        name: TABLE.into(),
        families: vec![FamilySpec { name: "d".into(), max_versions, ttl_secs: None }],
        split_keys: vec![b"r0500".to_vec()],
        split_policy: Default::default(),
        deferred: false,
    }
}

fn key(i: u32) -> Bytes {
    Bytes::from(format!("r{i:04}"))
}

fn put(qualifier: &'static str, value: impl Into<Bytes>) -> CellMutation {
    CellMutation::Put {
        family: Bytes::from_static(b"d"),
        qualifier: Bytes::from_static(qualifier.as_bytes()),
        value: value.into(),
        timestamp: None,
    }
}

fn row(key: Bytes, mutations: Vec<CellMutation>) -> RowMutation {
    RowMutation { row: key, mutations }
}

/// The newest value of `d:v` in each row.
fn values(rows: &[Option<Row>]) -> Vec<Option<Vec<u8>>> {
    rows.iter().map(|r| r.as_ref().and_then(|r| r.value("d", "v")).map(<[u8]>::to_vec)).collect()
}

fn key_of(row: &Row) -> String {
    String::from_utf8_lossy(&row.key).into_owned()
}

#[test]
fn an_application_runtime_gets_the_answers_of_the_synchronous_api() {
    let Some(store) = bigtable_store() else { return };
    let runtime = application_runtime();
    let as_async = store.as_async().expect("Bigtable answers asynchronous callers itself");
    assert_eq!(as_async.guarantees(), sync(&store).guarantees());

    // Tables: created, checked, described, refused when they do not fit.
    on(&runtime, &store, |s| async move { s.as_async().unwrap().ensure_table(&spec(2)).await }).unwrap();
    sync(&store).ensure_table(&spec(2)).unwrap();
    let refused = on(&runtime, &store, |s| async move { s.as_async().unwrap().ensure_table(&spec(3)).await });
    assert_eq!(refused.unwrap_err().to_string(), sync(&store).ensure_table(&spec(3)).unwrap_err().to_string());
    let described = on(&runtime, &store, |s| async move {
        let s = s.as_async().unwrap();
        (s.describe(TABLE).await.unwrap(), s.split_keys(TABLE).await.unwrap(), s.describe("nowhere").await.unwrap())
    });
    assert_eq!(described, (sync(&store).describe(TABLE).unwrap(), sync(&store).split_keys(TABLE).unwrap(), None));

    // 1 000 rows, written asynchronously, read both ways.
    on(&runtime, &store, |s| async move {
        let rows = (0..1_000).map(|i| row(key(i), vec![put("v", format!("value {i}"))])).collect();
        s.as_async().unwrap().mutate(TABLE, rows).await
    })
    .unwrap();
    let wanted = vec![key(0), key(500), Bytes::from_static(b"missing"), key(999), key(0)];
    let read = ReadSpec::default();
    let expected = sync(&store).read_rows(TABLE, &wanted, &read).unwrap();
    assert_eq!(values(&expected)[..3], [Some(b"value 0".to_vec()), Some(b"value 500".to_vec()), None]);
    let (rows, lent) = {
        let (wanted, read) = (wanted.clone(), read.clone());
        on(&runtime, &store, |s| async move {
            let s = s.as_async().unwrap();
            let rows = s.read_rows(TABLE, &wanted, &read).await.unwrap();
            let mut lent = vec![None; wanted.len()];
            s.read_rows_with(TABLE, &wanted, &read, &mut |i, row| lent[i] = row.map(|r| r.to_row())).await.unwrap();
            (rows, lent)
        })
    };
    assert_eq!(rows, expected);
    assert_eq!(lent, expected);

    // A range, both ways.
    let range = ScanSpec { start: key(100), end: Some(key(200)), limit: Some(50), ..ScanSpec::default() };
    let expected: Vec<Row> = sync(&store).scan(TABLE, &range).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!((expected.len(), key_of(&expected[0])), (50, "r0100".to_string()));
    let scanned = on(&runtime, &store, move |s| async move {
        let mut cursor = s.as_async().unwrap().scan_cursor(TABLE, &range).await.unwrap();
        let mut rows = Vec::new();
        while cursor.advance().await.unwrap() {
            rows.push(cursor.row().unwrap().to_row());
        }
        rows
    });
    assert_eq!(scanned, expected);

    // Conditional writes and counters, on twin rows: one written each way.
    sync(&store).mutate(TABLE, seed("sync")).unwrap();
    let mut expected = vec![];
    for (condition, mutation) in writes("sync").into_iter().take(2) {
        expected.push(sync(&store).check_and_mutate(TABLE, condition, mutation).unwrap());
    }
    expected.extend(sync(&store).check_and_mutate_many(TABLE, writes("sync").split_off(2)).unwrap());
    let counted =
        [sync(&store).increment(TABLE, key(1), "d", "n", 5), sync(&store).increment(TABLE, key(1), "d", "n", 7)];
    let not_a_counter = sync(&store).increment(TABLE, key(1), "d", "v", 1).unwrap_err().to_string();
    let (applied, counters, error) = on(&runtime, &store, move |s| async move {
        let s = s.as_async().unwrap();
        s.mutate_row(TABLE, seed("async").remove(0)).await.unwrap();
        s.mutate(TABLE, seed("async").split_off(1)).await.unwrap();
        let mut applied = vec![];
        for (condition, mutation) in writes("async").into_iter().take(2) {
            applied.push(s.check_and_mutate(TABLE, condition, mutation).await.unwrap());
        }
        applied.extend(s.check_and_mutate_many(TABLE, writes("async").split_off(2)).await.unwrap());
        let counters = [s.increment(TABLE, key(2), "d", "n", 5).await, s.increment(TABLE, key(2), "d", "n", 7).await];
        let error = s.increment(TABLE, key(2), "d", "v", 1).await.unwrap_err().to_string();
        (applied, counters, error)
    });
    assert_eq!(applied, expected);
    assert_eq!(applied, [true, false, true, true], "the last entry sees what the first wrote");
    assert_eq!(counters.map(Result::unwrap), counted.map(Result::unwrap));
    assert_eq!(counters_of(&store, key(2)), counters_of(&store, key(1)));
    assert_eq!(error.replace("r0002", "r0001"), not_a_counter);
    let read_back = |twin| values(&sync(&store).read_rows(TABLE, &keys(twin), &ReadSpec::default()).unwrap());
    assert_eq!(read_back("async"), read_back("sync"));

    // What Bigtable cannot do, it refuses the same way.
    let refusals = on(&runtime, &store, |s| async move {
        let s = s.as_async().unwrap();
        let group = s.mutate_group(TABLE, Vec::new(), Vec::new()).await.unwrap_err().to_string();
        let read = ReadSpec::default();
        let commit = s.read_and_commit(TABLE, &key(1), &read, &mut |_| None).await.unwrap_err().to_string();
        (group, commit)
    });
    let build = &mut |_: Option<&Row>| None;
    assert_eq!(
        refusals,
        (
            sync(&store).mutate_group(TABLE, Vec::new(), Vec::new()).unwrap_err().to_string(),
            sync(&store).read_and_commit(TABLE, &key(1), &ReadSpec::default(), build).unwrap_err().to_string()
        )
    );
}

/// Rows of one twin (`sync` or `async`) and the conditions written to them, in order.
fn twins(twin: &str) -> [(Bytes, Condition); 4] {
    let r = |name: &str| Bytes::from(format!("{twin}-{name}"));
    [
        (r("a"), Condition::holds("d", "v", Some(Bytes::from_static(b"old")))),
        (r("b"), Condition::holds("d", "v", Some(Bytes::from_static(b"other")))),
        (r("c"), Condition::holds("d", "v", None)),
        (r("a"), Condition::holds("d", "v", Some(Bytes::from_static(b"new")))),
    ]
}

/// The twin's rows as the conditional writes find them.
fn seed(twin: &str) -> Vec<RowMutation> {
    twins(twin)[..2].iter().map(|(k, _)| row(k.clone(), vec![put("v", "old")])).collect()
}

/// The twin's conditional writes.
fn writes(twin: &str) -> Vec<(Condition, RowMutation)> {
    twins(twin).into_iter().map(|(k, c)| (c, row(k, vec![put("v", "new")]))).collect()
}

fn keys(twin: &str) -> Vec<Bytes> {
    twins(twin).into_iter().map(|(k, _)| k).collect()
}

/// The counter's cell as read.
fn counters_of(store: &BigtableStore, key: Bytes) -> Option<Vec<u8>> {
    let rows = sync(store).read_rows(TABLE, &[key], &ReadSpec::default()).unwrap();
    rows[0].as_ref().and_then(|r| r.value("d", "n")).map(<[u8]>::to_vec)
}

#[test]
fn a_scan_dropped_after_ten_rows_stops_and_the_store_goes_on() {
    let Some(store) = bigtable_store() else { return };
    let runtime = application_runtime();
    sync(&store).ensure_table(&spec(1)).unwrap();
    let payload = Bytes::from(vec![7u8; 2_000]);
    let rows = (0..1_000).map(|i| row(key(i), vec![put("v", payload.clone())])).collect();
    sync(&store).mutate(TABLE, rows).unwrap();

    let before = store.rpcs();
    let (first, dropped_in) = on(&runtime, &store, |s| async move {
        let whole = ScanSpec::default();
        let mut cursor = s.as_async().unwrap().scan_cursor(TABLE, &whole).await.unwrap();
        let mut first = Vec::new();
        for _ in 0..10 {
            assert!(cursor.advance().await.unwrap());
            first.push(String::from_utf8_lossy(cursor.row().unwrap().key()).into_owned());
        }
        let started = Instant::now();
        drop(cursor);
        (first, started.elapsed())
    });
    assert_eq!(first, (0..10).map(|i| format!("r{i:04}")).collect::<Vec<_>>());
    assert!(dropped_in < Duration::from_millis(100), "dropping the cursor took {dropped_in:?}");
    let after = store.rpcs();
    assert_eq!((after.read_rows - before.read_rows, after.retries - before.retries), (1, 0), "{before:?} -> {after:?}");

    // The store goes on, both ways; a scan read to its end reads every row.
    let last = on(&runtime, &store, |s| async move {
        let whole = ScanSpec::default();
        let mut cursor = s.as_async().unwrap().scan_cursor(TABLE, &whole).await.unwrap();
        let (mut n, mut last) = (0, String::new());
        while cursor.advance().await.unwrap() {
            n += 1;
            last = String::from_utf8_lossy(cursor.row().unwrap().key()).into_owned();
        }
        (n, last)
    });
    assert_eq!(last, (1_000, "r0999".to_string()));
    let rows = sync(&store).read_rows(TABLE, &[key(999)], &ReadSpec::default()).unwrap();
    assert_eq!(rows[0].as_ref().and_then(|r| r.value("d", "v")), Some(&payload[..]));
}

#[test]
fn a_read_dropped_before_it_answers_leaves_the_store_working() {
    let Some(store) = bigtable_store() else { return };
    let runtime = application_runtime();
    sync(&store).ensure_table(&spec(1)).unwrap();
    sync(&store).mutate(TABLE, vec![row(key(1), vec![put("v", "one")])]).unwrap();
    let answered = on(&runtime, &store, |s| async move {
        let s = s.as_async().unwrap();
        let keys = [key(1)];
        let read = ReadSpec::default();
        // Polled once, so that its task starts, then dropped (most likely before it answers).
        let mut call = s.read_rows(TABLE, &keys, &read);
        std::future::poll_fn(|cx| {
            let _ = std::pin::Pin::new(&mut call).poll(cx);
            std::task::Poll::Ready(())
        })
        .await;
        drop(call);
        let again = s.read_rows(TABLE, &keys, &read).await.unwrap();
        values(&again)
    });
    assert_eq!(answered, [Some(b"one".to_vec())]);
}
