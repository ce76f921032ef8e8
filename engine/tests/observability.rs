//! The engine's log events, [`Engine::stats`] and (feature `metrics`) its metrics.
//!
//! Background threads do not see a thread's default subscriber, so one global subscriber
//! captures every event of this binary, and one global recorder every metric. Tests take
//! turns ([`serial`]) and each drops its engine before it ends, so the events and engine-wide
//! metrics a test reads are its own; they still pick events by table name or directory.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use cellar_engine::fault::{FaultFs, FaultRates};
use cellar_engine::*;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// One captured event.
#[derive(Debug, Clone)]
struct Record {
    level: Level,
    message: String,
    fields: BTreeMap<String, String>,
    thread: String,
}

impl Record {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_string(), format!("{value:?}"));
    }
}

/// Records every event into a shared list.
struct Capture(Arc<Mutex<Vec<Record>>>);

impl<S: Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let message = fields.0.remove("message").unwrap_or_default();
        let thread = std::thread::current().name().unwrap_or_default().to_string();
        let record = Record { level: *event.metadata().level(), message, fields: fields.0, thread };
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(record);
    }
}

struct Observed {
    events: Arc<Mutex<Vec<Record>>>,
    #[cfg(feature = "metrics")]
    metrics: metrics_util::debugging::Snapshotter,
}

/// The binary's subscriber and recorder, installed by the first test to ask.
fn observed() -> &'static Observed {
    static OBSERVED: OnceLock<Observed> = OnceLock::new();
    OBSERVED.get_or_init(|| {
        let events = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(Capture(events.clone()));
        tracing::subscriber::set_global_default(subscriber).expect("no other global subscriber");
        #[cfg(feature = "metrics")]
        let metrics = {
            let recorder = metrics_util::debugging::DebuggingRecorder::new();
            let metrics = recorder.snapshotter();
            recorder.install().expect("no other global recorder");
            metrics
        };
        Observed {
            events,
            #[cfg(feature = "metrics")]
            metrics,
        }
    })
}

/// One test at a time: see the module docs.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    observed();
    guard
}

/// The events captured so far that `keep` accepts.
fn events(keep: impl Fn(&Record) -> bool) -> Vec<Record> {
    observed().events.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|r| keep(r)).cloned().collect()
}

/// Events with this message about `table`.
fn table_events(table: &str, message: &str) -> Vec<Record> {
    events(|r| r.message == message && r.field("table") == Some(table))
}

/// Waits (many seconds at most: the machine may be loaded) until `found` returns something.
fn wait_for<T>(what: &str, mut found: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(t) = found() {
            return t;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn table(name: &str) -> TableDescriptor {
    TableDescriptor::new(name).family(FamilyDescriptor::new("f"))
}

fn put_rows(t: &Table, prefix: &str, rows: std::ops::Range<u32>, value_len: usize) {
    for i in rows {
        t.put(Put::new(format!("{prefix}{i:06}")).add("f", "v", vec![b'x'; value_len])).unwrap();
    }
}

fn on_fault_fs(fs: &FaultFs) -> EngineOptions {
    EngineOptions::default().block_cache_bytes(1 << 20).flush_on_close(false).fs(Arc::new(fs.clone()))
}

/// An explicit flush and a background one each log "flushed" with the table, the region and
/// what they wrote.
#[test]
fn explicit_and_background_flushes_are_logged() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let opts = EngineOptions::default().memstore_flush_bytes(64 << 10).block_cache_bytes(1 << 20);
    let engine = Engine::open(dir.path(), opts).unwrap();
    engine.create_table(table("flush_events")).unwrap();
    let t = engine.table("flush_events").unwrap();
    let region = engine.regions("flush_events").unwrap()[0].id.to_string();

    put_rows(&t, "a", 0..10, 100);
    engine.flush("flush_events").unwrap();
    let explicit = table_events("flush_events", "flushed");
    assert_eq!(explicit.len(), 1, "{explicit:?}");
    let e = &explicit[0];
    assert_eq!(e.level, Level::INFO);
    assert_eq!(e.field("region"), Some(region.as_str()));
    assert_eq!(e.field("files"), Some("1"));
    assert!(e.field("bytes").is_some_and(|b| b != "0"), "{e:?}");
    assert!(e.field("memstore_bytes").is_some_and(|b| b != "0"), "{e:?}");
    assert!(e.field("duration_ms").is_some(), "{e:?}");

    // Past the memstore's flush size: the background flushes it.
    put_rows(&t, "b", 0..200, 1000);
    let background = wait_for("a background flush", || {
        table_events("flush_events", "flushed").into_iter().find(|e| e.thread.starts_with("cellar-bg"))
    });
    assert_eq!(background.level, Level::INFO);
    assert_eq!(background.field("region"), Some(region.as_str()));
    assert!(engine.wait_idle(Duration::from_secs(60)));
    let flushes = table_events("flush_events", "flushed").len() as u64;
    assert_eq!(engine.stats().flushes, flushes, "one flush counted per event");
}

/// A background flush that fails logs an ERROR naming the task, the region and the error.
#[test]
fn a_failed_background_flush_is_logged_with_its_region_and_error() {
    let _serial = serial();
    let fs = FaultFs::new(7);
    let opts = on_fault_fs(&fs).memstore_flush_bytes(32 << 10).background_threads(1);
    let engine = Engine::open("/observe-flush-failure", opts).unwrap();
    engine.create_table(table("failing_flush")).unwrap();
    let t = engine.table("failing_flush").unwrap();
    let region = engine.regions("failing_flush").unwrap()[0].id.to_string();
    put_rows(&t, "a", 0..5, 100);

    // No new file can be made: the flush the next writes ask for fails.
    fs.set_rates(FaultRates::default().create(1.0));
    put_rows(&t, "b", 0..40, 1000);
    let failure =
        wait_for("the flush failure", || table_events("failing_flush", "background task failed").into_iter().next());
    assert_eq!(failure.level, Level::ERROR);
    assert_eq!(failure.field("kind"), Some("flush"));
    assert_eq!(failure.field("region"), Some(region.as_str()));
    let error = failure.field("error").unwrap_or_default();
    assert!(error.contains("I/O error") && error.contains("os error"), "{error}");
    let stats = wait_for("the failure in the stats", || {
        let stats = engine.stats();
        (!stats.background_failures.is_empty()).then_some(stats)
    });
    assert!(stats.background_failures[0].contains("flush"), "{stats}");
    assert!(stats.to_string().contains("background failure: "), "{stats}");

    // Once flushes work again, the failure clears.
    fs.set_rates(FaultRates::default());
    engine.flush("failing_flush").unwrap();
    put_rows(&t, "c", 0..40, 1000);
    wait_for("the recovery", || table_events("failing_flush", "background task recovered").into_iter().next());
    assert!(engine.stats().background_failures.is_empty());
}

/// Options under which a fourth file makes writes wait until the background compacts.
fn blocking_options() -> EngineOptions {
    EngineOptions::default().blocking_files(2).auto_compact(false).block_cache_bytes(1 << 20)
}

/// Three flushes: the region holds more files than writes allow.
fn three_files(engine: &Engine, t: &Table, name: &str) {
    for i in 0..3 {
        put_rows(t, &format!("{i}-"), 0..5, 10);
        engine.flush(name).unwrap();
    }
    assert_eq!(engine.regions(name).unwrap()[0].files, 3);
}

/// A write that waited for a compaction logs one WARN once it goes through, with the reason
/// and the time it waited, and is counted.
#[test]
fn a_stalled_write_is_logged_once() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), blocking_options()).unwrap();
    engine.create_table(table("stalled")).unwrap();
    let t = engine.table("stalled").unwrap();
    let region = engine.regions("stalled").unwrap()[0].id.to_string();
    three_files(&engine, &t, "stalled");

    t.put(Put::new("waits").add("f", "v", "x")).unwrap();
    // The compaction logs after the swap that lets the write in.
    assert!(engine.wait_idle(Duration::from_secs(60)));
    let stalls = table_events("stalled", "write stalled");
    assert_eq!(stalls.len(), 1, "{stalls:?}");
    let stall = &stalls[0];
    assert_eq!(stall.level, Level::WARN);
    assert_eq!(stall.field("region"), Some(region.as_str()));
    assert_eq!(stall.field("reason"), Some("too many files"));
    assert!(stall.field("waited_ms").is_some_and(|ms| ms.parse::<u64>().is_ok()), "{stall:?}");
    let compacted = table_events("stalled", "compacted");
    assert_eq!(compacted.len(), 1, "{compacted:?}");
    assert_eq!(compacted[0].field("inputs"), Some("3"));
    assert_eq!(compacted[0].field("major"), Some("false"));

    // The next write does not wait.
    t.put(Put::new("goes").add("f", "v", "x")).unwrap();
    assert_eq!(table_events("stalled", "write stalled").len(), 1);
    let stats = engine.stats();
    assert_eq!((stats.write_stalls, stats.compactions), (1, 1), "{stats}");
    assert!(stats.to_string().contains("write stalls: 1 ("), "{stats}");
}

/// A write that waits in vain (the compaction it waits for fails) logs an ERROR with the
/// error it returns, besides the compaction's own failure.
#[test]
fn a_write_that_waits_in_vain_is_logged_as_an_error() {
    let _serial = serial();
    let fs = FaultFs::new(11);
    let opts = on_fault_fs(&fs).blocking_files(2).auto_compact(false).write_stall_timeout(Duration::from_millis(300));
    let engine = Engine::open("/observe-stall-timeout", opts).unwrap();
    engine.create_table(table("too_busy")).unwrap();
    let t = engine.table("too_busy").unwrap();
    three_files(&engine, &t, "too_busy");

    fs.set_rates(FaultRates::default().create(1.0));
    let err = t.put(Put::new("waits").add("f", "v", "x")).unwrap_err();
    assert!(matches!(err, Error::RegionTooBusy { .. }), "{err}");
    let timed_out = table_events("too_busy", "write stall timed out");
    assert_eq!(timed_out.len(), 1, "{timed_out:?}");
    assert_eq!(timed_out[0].level, Level::ERROR);
    assert_eq!(timed_out[0].field("error"), Some(err.to_string().as_str()));
    assert_eq!(timed_out[0].field("reason"), Some("too many files"));
    assert!(table_events("too_busy", "write stalled").is_empty(), "a failed write logs once");
    // The worker runs at a lower priority: on a loaded machine it may fail after the wait.
    wait_for("the compaction's failure", || {
        let failed = table_events("too_busy", "background task failed");
        failed.iter().any(|e| e.field("kind") == Some("compaction")).then_some(())
    });
    assert_eq!(engine.stats().write_stalls, 1);
    fs.set_rates(FaultRates::default());
}

/// A failed log fsync turns the engine read-only: one ERROR, however many writes it refuses.
#[test]
fn the_engine_turning_read_only_is_logged_once() {
    let _serial = serial();
    let fs = FaultFs::new(13);
    let root = "/observe-read-only";
    let engine = Engine::open(root, on_fault_fs(&fs)).unwrap();
    engine.create_table(table("read_only").durability(Durability::FsyncWal)).unwrap();
    let t = engine.table("read_only").unwrap();
    put_rows(&t, "a", 0..3, 10);
    let ours = |r: &Record| {
        r.message == "engine is read-only" && r.field("wal").is_some_and(|w| Path::new(w).starts_with(root))
    };
    assert!(events(ours).is_empty());

    fs.set_rates(FaultRates::default().sync(1.0));
    assert!(t.put(Put::new("b").add("f", "v", "x")).is_err());
    fs.set_rates(FaultRates::default());
    for i in 0..5 {
        let refused = t.put(Put::new(format!("c{i}")).add("f", "v", "x")).unwrap_err();
        assert!(matches!(refused, Error::ReadOnly(_)), "{refused}");
    }
    let logged = events(ours);
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(logged[0].level, Level::ERROR);
    let reason = engine.read_only_reason().expect("read-only");
    assert_eq!(logged[0].field("reason"), Some(reason.as_str()));
    let stats = engine.stats();
    assert_eq!(stats.read_only.as_deref(), Some(reason.as_str()));
    assert!(stats.to_string().contains(&format!("read-only: {reason}")), "{stats}");
}

/// `Engine::stats` agrees with `Engine::regions`, `Engine::cache_stats` and the events.
#[test]
fn stats_agree_with_regions_cache_and_counters() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let opts = EngineOptions::default().auto_compact(false).block_cache_bytes(1 << 20);
    let engine = Engine::open(dir.path(), opts).unwrap();
    engine.create_table_with_splits(table("stats"), vec![bytes::Bytes::from_static(b"m")]).unwrap();
    let t = engine.table("stats").unwrap();
    for round in 0..3 {
        put_rows(&t, &format!("a{round}-"), 0..20, 50);
        put_rows(&t, &format!("x{round}-"), 0..20, 50);
        engine.flush("stats").unwrap();
    }
    put_rows(&t, "b", 0..20, 50);
    put_rows(&t, "y", 0..20, 50);

    let stats = engine.stats();
    let regions = engine.regions("stats").unwrap();
    assert_eq!(stats.tables.len(), 1);
    assert_eq!(stats.tables[0].name, "stats");
    assert!(stats.tables[0].enabled);
    assert_eq!(stats.tables[0].regions, regions);
    assert_eq!(stats.memstore_bytes, regions.iter().map(|r| r.memstore_bytes).sum::<u64>());
    assert!(stats.memstore_bytes > 0);
    assert_eq!(stats.flushes, 6, "three flushes of two regions: {stats}");
    assert_eq!(stats.files(), 6);
    assert_eq!(stats.wal_segments, engine.wal_segments());
    assert!(stats.wal_bytes > 0);

    engine.compact("stats").unwrap();
    assert_eq!(engine.split("stats", Some(b"c")).unwrap(), 1);
    for i in 0..20 {
        assert!(!t.get(Get::new(format!("a0-{i:06}"))).unwrap().is_empty());
    }
    assert!(engine.wait_idle(Duration::from_secs(60)));
    let stats = engine.stats();
    assert_eq!(stats.tables[0].regions, engine.regions("stats").unwrap());
    assert_eq!(stats.block_cache, engine.cache_stats());
    assert!(stats.block_cache.hits + stats.block_cache.misses > 0);
    // The split flushed the lower region's memstore first.
    assert_eq!((stats.flushes, stats.compactions, stats.splits), (7, 2, 1), "{stats}");
    assert_eq!(stats.flushes as usize, table_events("stats", "flushed").len());
    assert_eq!(stats.compactions as usize, table_events("stats", "compacted").len());
    assert_eq!((stats.pending_flushes, stats.pending_compactions, stats.pending_splits), (0, 0, 0));
    assert!(stats.background_failures.is_empty() && stats.read_only.is_none());

    let split = table_events("stats", "split");
    assert_eq!(split.len(), 1, "{split:?}");
    assert_eq!(split[0].field("key"), Some("c"));
    let ids: Vec<String> = stats.tables[0].regions.iter().map(|r| r.id.to_string()).collect();
    assert_eq!([split[0].field("lower"), split[0].field("upper")], [Some(ids[0].as_str()), Some(ids[1].as_str())]);

    let shown = stats.to_string();
    for line in ["tables: 1, regions: 3, ", "flushes: 7 done, 0 pending", "compactions: 2 done, 0 pending"] {
        assert!(shown.contains(line), "{line:?} missing from:\n{shown}");
    }
    assert!(shown.contains("splits: 1 done, 0 pending") && shown.contains("table stats: 3 regions, "), "{shown}");
    assert!(shown.contains("write stalls: 0 (0 ms)") && shown.contains("block cache: "), "{shown}");
}

/// Metric values by name and labels.
#[cfg(feature = "metrics")]
type Metrics = BTreeMap<(String, Vec<(String, String)>), metrics_util::debugging::DebugValue>;

/// The metrics as the debugging recorder saw them since the last snapshot.
#[cfg(feature = "metrics")]
fn metrics_snapshot() -> Metrics {
    observed()
        .metrics
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let labels = key.labels().map(|l| (l.key().to_string(), l.value().to_string())).collect();
            ((key.name().to_string(), labels), value)
        })
        .collect()
}

/// The value of gauge `name` of `table` (of the engine: `None`).
#[cfg(feature = "metrics")]
fn gauge(snapshot: &Metrics, name: &str, table: Option<&str>) -> f64 {
    let labels = table.map(|t| vec![("table".to_string(), t.to_string())]).unwrap_or_default();
    match snapshot.get(&(name.to_string(), labels)) {
        Some(metrics_util::debugging::DebugValue::Gauge(v)) => v.into_inner(),
        other => panic!("{name} ({table:?}) is not a gauge: {other:?}"),
    }
}

/// `publish_metrics` publishes the gauges; a flush counts and times itself.
#[cfg(feature = "metrics")]
#[test]
fn metrics_follow_writes_and_flushes() {
    use metrics_util::debugging::DebugValue;
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let opts = EngineOptions::default().block_cache_bytes(4 << 20).auto_compact(false);
    let engine = Engine::open(dir.path(), opts).unwrap();
    engine.create_table(table("metered")).unwrap();
    let t = engine.table("metered").unwrap();
    put_rows(&t, "a", 0..50, 100);

    engine.publish_metrics();
    let m = metrics_snapshot();
    assert!(gauge(&m, "cellar_engine_memstore_bytes", Some("metered")) > 0.0);
    assert_eq!(gauge(&m, "cellar_engine_regions", Some("metered")), 1.0);
    assert_eq!(gauge(&m, "cellar_engine_store_files", Some("metered")), 0.0);
    assert!(gauge(&m, "cellar_engine_global_memstore_bytes", None) > 0.0);
    assert!(gauge(&m, "cellar_engine_wal_bytes", None) > 0.0);
    assert_eq!(gauge(&m, "cellar_engine_wal_segments", None), 1.0);
    assert_eq!(gauge(&m, "cellar_engine_read_only", None), 0.0);
    assert_eq!(gauge(&m, "cellar_engine_flush_queue_length", None), 0.0);
    assert_eq!(gauge(&m, "cellar_engine_compaction_queue_length", None), 0.0);
    assert_eq!(gauge(&m, "cellar_engine_block_cache_capacity_bytes", None), (4u64 << 20) as f64);
    for name in ["cellar_engine_block_cache_hit_ratio", "cellar_engine_block_cache_bytes"] {
        gauge(&m, name, None);
    }

    engine.flush("metered").unwrap();
    engine.publish_metrics();
    let m = metrics_snapshot();
    assert_eq!(gauge(&m, "cellar_engine_memstore_bytes", Some("metered")), 0.0);
    assert_eq!(gauge(&m, "cellar_engine_store_files", Some("metered")), 1.0);
    assert!(gauge(&m, "cellar_engine_store_file_bytes", Some("metered")) > 0.0);
    let labels = vec![("table".to_string(), "metered".to_string())];
    assert_eq!(m.get(&("cellar_engine_flushes_total".to_string(), labels.clone())), Some(&DebugValue::Counter(1)));
    match m.get(&("cellar_engine_flush_seconds".to_string(), labels)) {
        Some(DebugValue::Histogram(seconds)) => assert_eq!(seconds.len(), 1, "{seconds:?}"),
        other => panic!("no flush histogram: {other:?}"),
    }
}
