//! What only the Bigtable backend has to show: how many RPCs batch writes and salted reads
//! take, how failures read (a dead endpoint, a missing table, a family that does not fit), and
//! what the backend tells the layers above about itself.

mod common;

use std::sync::Arc;
use std::time::Duration;

use cellar::orm::store::{BigtableOptions, BigtableStore, FamilySpec, Store, TableSpec};
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
        matches!(&err, Error::SchemaMismatch { reason, .. } if reason.contains("keeps 2 versions with TTL Some(60)")),
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
