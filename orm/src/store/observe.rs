//! What a store call reports beyond its counts ([`super::metered`]): a `tracing` span with its
//! table, operation and volume, its latency in the `Db`'s histograms ([`super::latency`]), one
//! WARN when it took longer than the slow-call threshold, and, with the `metrics` feature, the
//! same figures through the `metrics` facade.
//!
//! Why it costs nothing measurable without a subscriber or recorder: a disabled span is a
//! check of the level the installed subscribers want (a static, then an atomic), no field is
//! recorded into it, and a slow-call row key is kept only while a threshold is set. A call is
//! timed only when something wants its time: a subscriber recording its span, a slow-call
//! threshold, latency tracking ([`crate::Db::track_latencies`]) or the `metrics` feature. Two
//! clock reads are about 60 ns here, 1.5–2 % of an embedded put: measurable, so not paid for
//! nothing.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tracing::field::Empty;
use tracing::Span;

use super::latency::{Kind, Latencies, Recorders};
use super::metered::Volume;
use crate::Error;

/// How a call ended.
#[derive(Clone, Copy)]
pub(super) enum Outcome<'e> {
    /// Answered (a scan: its stream ended or was dropped).
    Ok,
    /// A conditional write whose condition failed: nothing written.
    NotApplied,
    /// Failed with this error.
    Failed(&'e Error),
    /// Dropped before it answered: an async call whose future was dropped (a timeout, a
    /// `select!`), or a call unwound by a panic.
    Cancelled,
}

impl Outcome<'_> {
    fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::NotApplied => "not_applied",
            Outcome::Failed(_) => "error",
            Outcome::Cancelled => "cancelled",
        }
    }

    /// A conditional write's outcome.
    pub(super) fn applied(applied: bool) -> Outcome<'static> {
        if applied {
            Outcome::Ok
        } else {
            Outcome::NotApplied
        }
    }
}

/// The outcome of a call's result.
pub(super) fn outcome<T>(result: &crate::Result<T>) -> Outcome<'_> {
    match result {
        Ok(_) => Outcome::Ok,
        Err(e) => Outcome::Failed(e),
    }
}

/// A row key in a warning: printable, and at most this many bytes of it.
const ROW_SHOWN: usize = 64;

/// What every call through one metered store reports to.
#[derive(Default)]
pub(super) struct Observer {
    latencies: Recorders,
    /// The slow-call threshold in nanoseconds; zero when none is set.
    slow_ns: AtomicU64,
    /// Latency tracking asked for by the application ([`Observer::track`]).
    tracking: AtomicBool,
    /// Measurements under way that want latencies ([`Observer::measuring`]).
    measuring: AtomicUsize,
    #[cfg(feature = "metrics")]
    tables: metrics_out::Tables,
}

impl Observer {
    pub(super) fn latencies(&self) -> Latencies {
        self.latencies.snapshot()
    }

    pub(super) fn set_slow_threshold(&self, threshold: Option<Duration>) {
        let ns = threshold.map_or(0, |t| u64::try_from(t.as_nanos()).unwrap_or(u64::MAX).max(1));
        self.slow_ns.store(ns, Ordering::Relaxed);
    }

    /// Turns latency tracking on or off: whether calls record into [`Observer::latencies`].
    pub(super) fn track(&self, on: bool) {
        self.tracking.store(on, Ordering::Relaxed);
    }

    pub(super) fn tracking(&self) -> bool {
        self.tracking.load(Ordering::Relaxed)
    }

    /// Latencies are recorded while the guard lives, whatever the tracking setting.
    pub(super) fn measuring(&self) -> Measuring<'_> {
        self.measuring.fetch_add(1, Ordering::Relaxed);
        Measuring(self)
    }

    /// Whether calls record their latency now.
    fn recording(&self) -> bool {
        self.tracking.load(Ordering::Relaxed) || self.measuring.load(Ordering::Relaxed) != 0
    }

    pub(super) fn slow_threshold(&self) -> Option<Duration> {
        match self.slow_ns.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// A call of `kind` (`op` names the store method) on `table` starts; `row` is the first
    /// row it touches, for the slow-call warning.
    pub(super) fn start(&self, kind: Kind, op: &'static str, table: &str, row: Option<&Bytes>) -> Observed<'_> {
        let span = tracing::debug_span!(
            "store",
            op,
            table,
            rows = Empty,
            cells = Empty,
            bytes = Empty,
            attempts = Empty,
            outcome = Empty,
            error = Empty,
            duration_us = Empty,
        );
        let slow = (self.slow_ns.load(Ordering::Relaxed) != 0).then(|| Slow { table: table.into(), row: row.cloned() });
        let record = self.recording();
        let timed = record || slow.is_some() || !span.is_disabled() || cfg!(feature = "metrics");
        Observed {
            observer: self,
            kind,
            op,
            span,
            slow,
            #[cfg(feature = "metrics")]
            metrics: self.tables.of(table),
            started: timed.then(Instant::now),
            record,
            done: false,
        }
    }
}

/// What the slow-call warning names, kept only while a threshold is set.
struct Slow {
    table: Box<str>,
    row: Option<Bytes>,
}

/// A call under way. Finished with its outcome, or, dropped unfinished, as `cancelled`: a
/// call cut off by a timeout is timed and reported too (those are the slow ones).
pub(super) struct Observed<'o> {
    observer: &'o Observer,
    kind: Kind,
    op: &'static str,
    span: Span,
    slow: Option<Slow>,
    #[cfg(feature = "metrics")]
    metrics: std::sync::Arc<metrics_out::TableMetrics>,
    /// When it started, if anything wants its time.
    started: Option<Instant>,
    /// Its latency goes into the histograms.
    record: bool,
    done: bool,
}

/// Latencies recorded meanwhile ([`Observer::measuring`]).
pub(super) struct Measuring<'o>(&'o Observer);

impl Drop for Measuring<'_> {
    fn drop(&mut self) {
        self.0.measuring.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for Observed<'_> {
    fn drop(&mut self) {
        self.complete(Outcome::Cancelled, Volume::default());
    }
}

impl Observed<'_> {
    /// The call's span: entered while the call runs, so what the backend reports (retries)
    /// nests under it.
    pub(super) fn span(&self) -> &Span {
        &self.span
    }

    /// The call ended: `moved` is what it read or wrote by the rules of [`super::Costs`].
    pub(super) fn finish(mut self, outcome: Outcome<'_>, moved: Volume) {
        self.complete(outcome, moved);
    }

    /// Reports the call, once.
    fn complete(&mut self, outcome: Outcome<'_>, moved: Volume) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let observer = self.observer;
        let Some(started) = self.started else { return };
        let took = started.elapsed();
        if self.record {
            observer.latencies.record(self.kind, took);
        }
        if !self.span.is_disabled() {
            self.span.record("rows", moved.rows);
            self.span.record("cells", moved.cells);
            self.span.record("bytes", moved.bytes);
            self.span.record("outcome", outcome.name());
            if let Outcome::Failed(e) = outcome {
                self.span.record("error", tracing::field::display(e));
            }
            self.span.record("duration_us", took.as_micros() as u64);
        }
        #[cfg(feature = "metrics")]
        self.metrics.record(self.kind, outcome.name(), took, moved);
        if let Some(slow) = self.slow.take() {
            let threshold = observer.slow_ns.load(Ordering::Relaxed);
            if threshold != 0 && took.as_nanos() >= u128::from(threshold) {
                let row = slow.row.as_deref().map(|r| crate::repo::printable(&r[..r.len().min(ROW_SHOWN)]));
                let _in_call = self.span.enter();
                tracing::warn!(
                    op = self.op,
                    table = &*slow.table,
                    row = row.as_deref().unwrap_or(""),
                    duration_ms = took.as_millis() as u64,
                    rows = moved.rows,
                    cells = moved.cells,
                    bytes = moved.bytes,
                    outcome = outcome.name(),
                    "slow store call"
                );
                #[cfg(feature = "metrics")]
                self.metrics.slow(self.kind);
            }
        }
    }
}

/// The `metrics` facade's handles, registered once per table and kept: a call records into
/// them without building a key. A recorder installed after a table's first call is not seen
/// by that table's handles: install it before opening the `Db`.
#[cfg(feature = "metrics")]
mod metrics_out {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::time::Duration;

    use metrics::{counter, histogram, Counter, Histogram};
    use parking_lot::RwLock;

    use super::super::latency::Kind;
    use super::Volume;

    const OUTCOMES: [&str; 4] = ["ok", "not_applied", "error", "cancelled"];

    #[derive(Default)]
    pub(super) struct Tables(RwLock<HashMap<Box<str>, Arc<TableMetrics>>>);

    impl Tables {
        pub(super) fn of(&self, table: &str) -> Arc<TableMetrics> {
            if let Some(m) = self.0.read().get(table) {
                return m.clone();
            }
            self.0.write().entry(table.into()).or_insert_with(|| Arc::new(TableMetrics::new(table))).clone()
        }
    }

    pub(super) struct TableMetrics {
        seconds: Vec<Histogram>,
        /// Per kind, per outcome.
        calls: Vec<[Counter; 4]>,
        slow: Vec<Counter>,
        read: [Counter; 3],
        written: [Counter; 3],
    }

    impl TableMetrics {
        fn new(table: &str) -> TableMetrics {
            let table = table.to_string();
            let per_kind = |f: &dyn Fn(&'static str) -> Histogram| Kind::ALL.iter().map(|k| f(k.name())).collect();
            let seconds =
                per_kind(&|op| histogram!("cellar_store_operation_seconds", "op" => op, "table" => table.clone()));
            let calls = Kind::ALL
                .iter()
                .map(|k| {
                    OUTCOMES.map(|outcome| {
                        counter!("cellar_store_operations_total", "op" => k.name(), "table" => table.clone(), "outcome" => outcome)
                    })
                })
                .collect();
            let slow = Kind::ALL
                .iter()
                .map(|k| counter!("cellar_store_slow_operations_total", "op" => k.name(), "table" => table.clone()))
                .collect();
            let read = [
                counter!("cellar_store_rows_read_total", "table" => table.clone()),
                counter!("cellar_store_cells_read_total", "table" => table.clone()),
                counter!("cellar_store_bytes_read_total", "table" => table.clone()),
            ];
            let written = [
                counter!("cellar_store_rows_written_total", "table" => table.clone()),
                counter!("cellar_store_cells_written_total", "table" => table.clone()),
                counter!("cellar_store_bytes_written_total", "table" => table.clone()),
            ];
            TableMetrics { seconds, calls, slow, read, written }
        }

        pub(super) fn record(&self, kind: Kind, outcome: &str, took: Duration, moved: Volume) {
            let k = kind as usize;
            self.seconds[k].record(took.as_secs_f64());
            let o = OUTCOMES.iter().position(|&x| x == outcome).unwrap_or(2);
            self.calls[k][o].increment(1);
            let to = match kind {
                Kind::Get | Kind::Scan => &self.read,
                _ => &self.written,
            };
            for (counter, n) in to.iter().zip([moved.rows, moved.cells, moved.bytes]) {
                if n > 0 {
                    counter.increment(n);
                }
            }
        }

        pub(super) fn slow(&self, kind: Kind) {
            self.slow[kind as usize].increment(1);
        }
    }
}
