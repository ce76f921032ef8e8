//! What only the Bigtable backend has to show: how many RPCs batch writes and salted reads
//! take, how failures read (a dead endpoint, a missing table, a family that does not fit), and
//! what the backend tells the layers above about itself.

mod common;

use std::sync::Arc;
use std::time::Duration;

use cellar::orm::store::{
    BigtableOptions, BigtableStore, CellMutation, Condition, FamilySpec, RowMutation, Store, TableSpec,
};
use cellar::orm::Error;
use cellar::prelude::*;
use common::backend::{bigtable_store, instance_name};

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "events")]
struct Event {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "k")]
    kind: String,
    #[cellar(column = "p")]
    payload: Vec<u8>,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "hits", salt(buckets = 8))]
struct Hit {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "u")]
    url: String,
}

#[test]
fn ten_thousand_puts_take_a_handful_of_mutate_rows_calls() {
    let Some(store) = bigtable_store() else { return };
    let db = Db::with_store(Arc::new(store.clone()));
    let events = db.repo::<Event>().unwrap();
    let batch: Vec<Event> =
        (0..10_000).map(|id| Event { id, kind: format!("kind-{}", id % 7), payload: vec![7; 64] }).collect();
    let before = store.rpcs();
    events.put_many(&batch).unwrap();
    let calls = store.rpcs().mutate_rows - before.mutate_rows;
    assert!((1..=4).contains(&calls), "{calls} MutateRows calls for 10 000 puts");
    // Every row arrived, with its values.
    let ids: Vec<u64> = vec![0, 4_999, 9_999];
    let got = events.get_many(ids.clone()).unwrap();
    assert_eq!(
        got.into_iter().map(|e| e.map(|e| e.id)).collect::<Vec<_>>(),
        ids.into_iter().map(Some).collect::<Vec<_>>()
    );
    assert_eq!(events.scan().to_vec().unwrap().len(), 10_000);
}

#[test]
fn a_salted_scan_reads_every_bucket_and_merges_them_in_key_order() {
    let Some(store) = bigtable_store() else { return };
    let db = Db::with_store(Arc::new(store.clone()));
    let hits = db.repo::<Hit>().unwrap();
    hits.put_many(&(0..200).map(|id| Hit { id, url: format!("/p/{id}") }).collect::<Vec<_>>()).unwrap();
    let before = store.rpcs();
    let all = hits.scan().to_vec().unwrap();
    assert_eq!(all.iter().map(|h| h.id).collect::<Vec<_>>(), (0..200).collect::<Vec<_>>());
    // One ReadRows per bucket; each starts when the scan opens, before the merge pulls a row.
    assert_eq!(store.rpcs().read_rows - before.read_rows, 8);
}

#[test]
fn an_unreachable_endpoint_is_a_clear_error_not_a_hang() {
    // Nothing listens on port 1.
    let options = BigtableOptions::new("p", "i").emulator("127.0.0.1:1").connect_timeout(Duration::from_secs(2));
    let err = BigtableStore::connect(options).unwrap_err();
    assert!(matches!(&err, Error::Remote { rpc: "connect", code, .. } if code == "Unavailable"), "{err:?}");
    assert!(err.to_string().contains("cannot reach http://127.0.0.1:1"), "{err}");
}

#[test]
fn a_server_that_goes_away_fails_calls_within_the_timeout() {
    let Ok(emulator) = common::backend::start() else {
        assert!(common::backend::emulator().is_none());
        return;
    };
    let options =
        BigtableOptions::new("p", instance_name()).emulator(emulator.host.clone()).timeout(Duration::from_secs(2));
    let db = Db::with_store(Arc::new(BigtableStore::connect(options).unwrap()));
    let events = db.repo::<Event>().unwrap();
    events.put(&Event { id: 1, kind: "boot".into(), payload: vec![] }).unwrap();
    drop(emulator);
    let err = events.get(1).unwrap_err();
    assert!(matches!(&err, Error::Remote { rpc: "ReadRows", table, .. } if table == "events"), "{err:?}");
}

#[test]
fn errors_name_the_call_the_table_and_what_is_wrong() {
    let Some(store) = bigtable_store() else { return };
    let err = store.read_rows("nowhere", &[bytes::Bytes::from_static(b"r")], &Default::default()).unwrap_err();
    assert!(matches!(&err, Error::Remote { code, table, .. } if code == "NotFound" && table == "nowhere"), "{err:?}");

    let spec = |versions| TableSpec {
        name: "t".into(),
        families: vec![FamilySpec { name: "d".into(), max_versions: versions, ttl_secs: Some(60) }],
        split_keys: Vec::new(),
        split_policy: Default::default(),
        deferred: false,
    };
    store.ensure_table(&spec(2)).unwrap();
    store.ensure_table(&spec(2)).unwrap();
    let err = store.ensure_table(&spec(3)).unwrap_err();
    assert!(
        matches!(&err, Error::SchemaMismatch { reason, .. } if reason.contains("keeps 2 versions, TTL 60 s")
            && reason.contains("Db::alter(\"t\")")),
        "{err}"
    );
}

#[test]
fn bigtable_offers_single_row_atomicity_to_writers_of_many_processes() {
    let Some(store) = bigtable_store() else { return };
    let g = store.guarantees();
    assert!(!g.atomic_row_groups && !g.single_process);
    let err = store.mutate_group("t", Vec::new(), Vec::new()).unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
}

/// Two stores on one instance of the binary's emulator: one direct, one through a proxy that
/// can break its connections.
fn direct_and_proxied() -> Option<(BigtableStore, BigtableStore, common::proxy::Proxy)> {
    let emulator = common::backend::emulator()?;
    let proxy = common::proxy::Proxy::start(&emulator.host);
    let instance = instance_name();
    let connect = |host: &str| {
        BigtableStore::connect(BigtableOptions::new("p", instance.clone()).emulator(host.to_string())).unwrap()
    };
    Some((connect(&emulator.host), connect(&proxy.addr), proxy))
}

/// Creates `name` with one family `i` keeping one version, through each of `stores`.
fn one_family_table(name: &str, stores: &[&BigtableStore]) {
    let spec = TableSpec {
        name: name.into(),
        families: vec![FamilySpec { name: "i".into(), max_versions: 1, ttl_secs: None }],
        split_keys: Vec::new(),
        split_policy: Default::default(),
        deferred: true,
    };
    for store in stores {
        store.ensure_table(&spec).unwrap();
    }
}

fn events(n: u64) -> Vec<Event> {
    (0..n).map(|id| Event { id, kind: "tick".into(), payload: vec![1; 200] }).collect()
}

#[test]
fn a_scan_broken_mid_stream_resumes_after_the_last_row_it_delivered() {
    let Some((direct, proxied, proxy)) = direct_and_proxied() else { return };
    Db::with_store(Arc::new(direct)).repo::<Event>().unwrap().put_many(&events(2_000)).unwrap();
    let via = Db::with_store(Arc::new(proxied.clone())).repo::<Event>().unwrap();
    let before = proxied.rpcs();
    // About a fifth of the scan's responses, then the connection drops.
    proxy.cut_after(100_000);
    let ids: Vec<u64> = via.scan().to_vec().unwrap().into_iter().map(|e| e.id).collect();
    assert_eq!(proxy.cuts(), 1);
    assert_eq!(ids, (0..2_000).collect::<Vec<_>>(), "every row once, in order");
    let after = proxied.rpcs();
    assert!(after.retries > before.retries && after.read_rows >= before.read_rows + 2, "{before:?} -> {after:?}");
}

#[test]
fn a_batch_whose_answer_is_lost_is_sent_again_and_applies_once() {
    let Some((direct, proxied, proxy)) = direct_and_proxied() else { return };
    let via = Db::with_store(Arc::new(proxied.clone())).repo::<Event>().unwrap();
    let before = proxied.rpcs();
    // The server applies the batch; its answer never arrives.
    proxy.cut_after(0);
    via.put_many(&events(500)).unwrap();
    assert_eq!(proxy.cuts(), 1);
    let after = proxied.rpcs();
    assert!(after.retries > before.retries && after.mutate_rows >= before.mutate_rows + 2, "{before:?} -> {after:?}");
    // Written once: one version per cell, although the batch went out twice.
    let read = cellar::orm::store::ReadSpec { max_versions: 10, ..Default::default() };
    let rows = direct.read_rows("events", &[Event::row_key(&7u64.into()).unwrap().for_write()], &read).unwrap();
    let row = rows[0].as_ref().expect("written");
    assert_eq!(row.cells.len(), 2, "{row:?}");
    assert_eq!(Db::with_store(Arc::new(direct)).repo::<Event>().unwrap().scan().to_vec().unwrap().len(), 500);
}

/// Index rows' cells are written stamped when the write applies (`PutAtApply`: the server's
/// clock on Bigtable), because the index protocol reasons in the order its writes apply. Here
/// a writer's mark is built, then held on its way; another writer's verification is built and
/// applied meanwhile; then the mark arrives. The mark must be the state readers and
/// check-and-mutates see. A put stamped with the client's clock when the request was built
/// (a `Put` without a timestamp) sorts below the verification instead.
#[test]
fn a_put_stamped_when_it_applies_sorts_above_what_was_applied_before_it() {
    let Some((direct, proxied, proxy)) = direct_and_proxied() else { return };
    one_family_table("states", &[&direct, &proxied]);
    let row = bytes::Bytes::from_static(b"r");
    let cell = |value: &'static str| {
        (bytes::Bytes::from_static(b"i"), bytes::Bytes::from_static(b"s"), bytes::Bytes::from_static(value.as_bytes()))
    };
    let at_apply = |value| {
        let (family, qualifier, value) = cell(value);
        CellMutation::PutAtApply { family, qualifier, value }
    };
    let client_clock = |value| {
        let (family, qualifier, value) = cell(value);
        CellMutation::Put { family, qualifier, value, timestamp: None }
    };
    let write = |store: &BigtableStore, m: CellMutation| {
        store.mutate("states", vec![RowMutation { row: row.clone(), mutations: vec![m] }])
    };
    let state = || {
        let rows = direct.read_rows("states", std::slice::from_ref(&row), &Default::default()).unwrap();
        rows[0].as_ref().and_then(|r| r.value("i", "s")).map(|v| String::from_utf8_lossy(v).into_owned())
    };
    // The mark is built and sent, and held; the verification is built later and applied
    // first; then the mark arrives.
    let late_mark = |mark: CellMutation| {
        std::thread::scope(|s| {
            proxy.hold();
            let marking = s.spawn(|| write(&proxied, mark));
            let waited = std::time::Instant::now();
            while proxy.held() == 0 {
                assert!(waited.elapsed() < Duration::from_secs(10), "the mark never reached the proxy");
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(5));
            write(&direct, client_clock("verified")).unwrap();
            proxy.release();
            marking.join().unwrap().unwrap();
        });
    };
    late_mark(client_clock("client-clock mark"));
    assert_eq!(state().as_deref(), Some("verified"), "a late put stamped by the client's clock sorts below");
    late_mark(at_apply("mark"));
    assert_eq!(state().as_deref(), Some("mark"));
    // A check-and-mutate on that state sees it, and its own put stamped when it applies lands
    // above it.
    let condition = Condition::Equals {
        family: bytes::Bytes::from_static(b"i"),
        qualifier: bytes::Bytes::from_static(b"s"),
        value: bytes::Bytes::from_static(b"mark"),
    };
    let settle = RowMutation { row: row.clone(), mutations: vec![at_apply("settled")] };
    assert!(direct.check_and_mutate("states", condition, settle).unwrap());
    assert_eq!(state().as_deref(), Some("settled"));
}

/// Calls that are not safe to repeat — a check-and-mutate, a batch with a cell the server
/// stamps when it applies — are sent once. When the answer is lost the caller learns that the
/// call may or may not have applied, instead of a blind repeat (which could apply a
/// conditional write against a state it was not meant for, or stamp a mark later than a
/// write that came after it).
#[test]
fn calls_not_safe_to_repeat_whose_answer_is_lost_are_indeterminate_not_repeated() {
    let Some((direct, proxied, proxy)) = direct_and_proxied() else { return };
    one_family_table("unrepeatable", &[&direct, &proxied]);
    let b = bytes::Bytes::from_static;
    let put = |value: &'static str| RowMutation {
        row: b(b"r"),
        mutations: vec![CellMutation::Put {
            family: b(b"i"),
            qualifier: b(b"s"),
            value: b(value.as_bytes()),
            timestamp: None,
        }],
    };

    let before = proxied.rpcs();
    proxy.cut_after(0);
    let condition = Condition::Absent { family: b(b"i"), qualifier: b(b"s") };
    let err = proxied.check_and_mutate("unrepeatable", condition, put("claimed")).unwrap_err();
    assert_eq!(proxy.cuts(), 1);
    assert!(matches!(err, Error::Indeterminate { rpc: "CheckAndMutateRow", .. }), "{err}");
    assert!(err.to_string().contains("may or may not have applied"), "{err}");
    let after = proxied.rpcs();
    assert_eq!(after.check_and_mutate_row, before.check_and_mutate_row + 1, "sent once");
    assert_eq!(after.retries, before.retries);

    let before = proxied.rpcs();
    proxy.cut_after(0);
    let mark = RowMutation {
        row: b(b"m"),
        mutations: vec![CellMutation::PutAtApply { family: b(b"i"), qualifier: b(b"s"), value: b(b"mark") }],
    };
    let err = proxied.mutate("unrepeatable", vec![mark]).unwrap_err();
    assert!(matches!(err, Error::Indeterminate { rpc: "MutateRows", .. }), "{err}");
    assert_eq!(proxied.rpcs().mutate_rows, before.mutate_rows + 1, "sent once");

    // A batch of client-stamped cells in the same situation is repeated and succeeds.
    proxy.cut_after(0);
    proxied.mutate("unrepeatable", vec![put("again")]).unwrap();
    let rows = direct.read_rows("unrepeatable", &[b(b"r")], &Default::default()).unwrap();
    assert_eq!(rows[0].as_ref().and_then(|r| r.value("i", "s")), Some(&b"again"[..]));
}
