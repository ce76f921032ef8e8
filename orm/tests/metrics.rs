//! What the `metrics` feature publishes, read through a debugging recorder installed as the
//! process's recorder: the store calls' latency histograms and counters per table, and the
//! engine's gauges.

use std::sync::OnceLock;

use bytes::Bytes;
use cellar_orm::store::{CellMutation, FamilySpec, ReadSpec, RowMutation, ScanSpec, SplitPolicy, TableSpec};
use cellar_orm::Db;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// The process's recorder, installed before any `Db` registers its handles.
fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("no other recorder");
        snapshotter
    })
}

type Metrics = Vec<(String, Vec<(String, String)>, DebugValue)>;

/// Every metric now: name, labels, value. A snapshot takes the counters' and gauges' values
/// (and histograms' samples) out of the recorder: take one, and read everything from it.
fn metrics() -> Metrics {
    snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let labels = key.labels().map(|l| (l.key().to_string(), l.value().to_string())).collect();
            (key.name().to_string(), labels, value)
        })
        .collect()
}

/// The metric `name` with exactly these labels.
fn find<'a>(metrics: &'a Metrics, name: &str, labels: &[(&str, &str)]) -> Option<&'a DebugValue> {
    let mut want: Vec<(String, String)> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    want.sort();
    metrics.iter().find_map(|(n, l, v)| {
        let mut l = l.clone();
        l.sort();
        (n == name && l == want).then_some(v)
    })
}

fn counter(metrics: &Metrics, name: &str, labels: &[(&str, &str)]) -> u64 {
    match find(metrics, name, labels) {
        Some(DebugValue::Counter(n)) => *n,
        other => panic!("{name} {labels:?}: {other:?}"),
    }
}

fn gauge(metrics: &Metrics, name: &str, labels: &[(&str, &str)]) -> f64 {
    match find(metrics, name, labels) {
        Some(DebugValue::Gauge(v)) => v.into_inner(),
        other => panic!("{name} {labels:?}: {other:?}"),
    }
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

#[test]
fn store_calls_and_the_engine_are_published_through_the_metrics_facade() {
    snapshotter();
    let db = Db::open_temporary().unwrap();
    let store = db.store();
    let spec = TableSpec {
        name: "m_items".into(),
        families: vec![FamilySpec { name: "d".into(), max_versions: 1, ttl_secs: None }],
        split_keys: Vec::new(),
        split_policy: SplitPolicy::MidKey,
        deferred: false,
    };
    store.ensure_table(&spec).unwrap();
    let put = |k: &str| RowMutation {
        row: b(k),
        mutations: vec![CellMutation::Put { family: b("d"), qualifier: b("q"), value: b("value"), timestamp: None }],
    };
    store.mutate("m_items", vec![put("a"), put("b"), put("c")]).unwrap();
    for _ in 0..4 {
        assert_eq!(store.read_rows("m_items", &[b("a"), b("zz")], &ReadSpec::default()).unwrap().len(), 2);
    }
    assert_eq!(store.scan("m_items", &ScanSpec::default()).unwrap().count(), 3);
    assert!(store.read_rows("m_missing", &[b("a")], &ReadSpec::default()).is_err());

    // The engine's gauges are published by `stats` (and by the engine's background).
    let stats = db.stats();
    let m = metrics();
    let table = ("table", "m_items");
    match find(&m, "cellar_store_operation_seconds", &[("op", "get"), table]) {
        Some(DebugValue::Histogram(values)) => {
            assert_eq!(values.len(), 4, "one sample per get");
            assert!(values.iter().all(|v| v.into_inner() > 0.0 && v.into_inner() < 60.0), "{values:?}");
        }
        other => panic!("no get latency histogram: {other:?}"),
    }
    assert_eq!(counter(&m, "cellar_store_operations_total", &[("op", "get"), table, ("outcome", "ok")]), 4);
    assert_eq!(counter(&m, "cellar_store_operations_total", &[("op", "mutate"), table, ("outcome", "ok")]), 1);
    assert_eq!(counter(&m, "cellar_store_operations_total", &[("op", "scan"), table, ("outcome", "ok")]), 1);
    assert_eq!(
        counter(&m, "cellar_store_operations_total", &[("op", "get"), ("table", "m_missing"), ("outcome", "error")]),
        1
    );
    let costs = db.costs();
    assert_eq!(counter(&m, "cellar_store_rows_written_total", &[table]), 3);
    assert_eq!(counter(&m, "cellar_store_rows_read_total", &[table]), 4 + 3);
    assert_eq!(counter(&m, "cellar_store_bytes_written_total", &[table]), costs.bytes_written);
    assert_eq!(counter(&m, "cellar_store_bytes_read_total", &[table]), costs.bytes_read);

    let engine = stats.engine.expect("embedded");
    let memstore = engine.tables.iter().find(|t| t.name == "m_items").unwrap().memstore_bytes();
    assert!(memstore > 0);
    assert_eq!(gauge(&m, "cellar_engine_memstore_bytes", &[table]), memstore as f64);
    assert_eq!(gauge(&m, "cellar_engine_regions", &[table]), 1.0);
    assert_eq!(gauge(&m, "cellar_engine_store_files", &[table]), 0.0);
    assert!(gauge(&m, "cellar_engine_wal_bytes", &[]) > 0.0);
    assert_eq!(gauge(&m, "cellar_engine_read_only", &[]), 0.0);
    let ratio = gauge(&m, "cellar_engine_block_cache_hit_ratio", &[]);
    assert!((0.0..=1.0).contains(&ratio), "{ratio}");
}
