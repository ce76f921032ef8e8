//! Observability: the log events of background work, write stalls and failures (through
//! `tracing`, target `cellar_engine::observe`), the counters behind them, [`EngineStats`], and
//! with the feature `metrics` their publication through the `metrics` facade.
//!
//! Events are emitted only on background paths, on stalled writes and on failures: a write
//! or read that does not wait pays nothing here.

use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tracing::{debug, error, info, warn};

use crate::cache::CacheStats;
use crate::cell::to_printable;
use crate::Error;

/// A failing kind of work logs at ERROR at most this often while it keeps failing (its first
/// failure always does); the failures between go at DEBUG. A full disk fails a flush on every
/// retry, and writers waiting for memory retry about every 50 ms.
const REPEAT_ERROR_EVERY: Duration = Duration::from_secs(10);

/// Stalled writes log at WARN at most this often; the ones between go at DEBUG (they are all
/// counted). Under steady back-pressure every writer stalls, many times a second.
const STALL_WARN_EVERY: Duration = Duration::from_secs(1);

/// Milliseconds since the first call in this process: a clock an atomic can hold.
fn process_ms() -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    ms(EPOCH.get_or_init(Instant::now).elapsed())
}

/// Split keys longer than this are cut in events.
const KEY_CHARS: usize = 64;

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Activity counters since the engine opened, bumped where the events are emitted.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    flushes: AtomicU64,
    compactions: AtomicU64,
    splits: AtomicU64,
    write_stalls: AtomicU64,
    write_stall_ms: AtomicU64,
    /// When a stall last logged at WARN ([`process_ms`]), plus one; 0: never.
    stall_warned_ms: AtomicU64,
}

/// What a flush wrote, for [`Counters::flushed`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct FlushEvent<'a> {
    pub table: &'a str,
    pub region: u64,
    /// Bytes the flushed memstores held.
    pub memstore_bytes: u64,
    /// Bytes of the files written.
    pub bytes: u64,
    /// The region's files after the flush.
    pub files: usize,
    pub took: Duration,
}

/// What a compaction did, for [`Counters::compacted`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct CompactionEvent<'a> {
    pub table: &'a str,
    pub region: u64,
    /// Files merged.
    pub inputs: usize,
    pub output_bytes: u64,
    /// The full retention rules applied (to some family).
    pub major: bool,
    /// The region's files after it.
    pub files: usize,
    pub took: Duration,
}

impl Counters {
    /// A region flushed: logged at INFO.
    pub fn flushed(&self, e: FlushEvent<'_>) {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        let FlushEvent { table, region, memstore_bytes, bytes, files, took } = e;
        info!(table, region, memstore_bytes, bytes, files, duration_ms = ms(took), "flushed");
        #[cfg(feature = "metrics")]
        {
            metrics::counter!("cellar_engine_flushes_total", "table" => table.to_owned()).increment(1);
            metrics::histogram!("cellar_engine_flush_seconds", "table" => table.to_owned()).record(took.as_secs_f64());
        }
    }

    /// A region compacted: logged at INFO.
    pub fn compacted(&self, e: CompactionEvent<'_>) {
        self.compactions.fetch_add(1, Ordering::Relaxed);
        let CompactionEvent { table, region, inputs, output_bytes, major, files, took } = e;
        info!(table, region, inputs, output_bytes, major, files, duration_ms = ms(took), "compacted");
        #[cfg(feature = "metrics")]
        {
            let major = if major { "true" } else { "false" };
            metrics::counter!("cellar_engine_compactions_total", "table" => table.to_owned(), "major" => major)
                .increment(1);
            metrics::histogram!("cellar_engine_compaction_seconds", "table" => table.to_owned())
                .record(took.as_secs_f64());
        }
    }

    /// Region `region` split at `key` into `lower` and `upper`: logged at INFO.
    pub fn split(&self, table: &str, region: u64, (lower, upper): (u64, u64), key: &[u8], took: Duration) {
        self.splits.fetch_add(1, Ordering::Relaxed);
        let key = short_key(key);
        info!(table, region, lower, upper, key = %key, duration_ms = ms(took), "split");
        #[cfg(feature = "metrics")]
        metrics::counter!("cellar_engine_splits_total", "table" => table.to_owned()).increment(1);
    }

    /// A write waited `waited` for `reasons` before it went through (WARN), or before it gave up
    /// with `failed` (ERROR).
    pub fn write_stalled(
        &self,
        table: &str,
        region: u64,
        reasons: StallReasons,
        waited: Duration,
        failed: Option<&Error>,
    ) {
        self.write_stalls.fetch_add(1, Ordering::Relaxed);
        self.write_stall_ms.fetch_add(ms(waited), Ordering::Relaxed);
        match failed {
            None if self.stall_warning_due() => {
                warn!(table, region, reason = %reasons, waited_ms = ms(waited), "write stalled")
            }
            None => debug!(table, region, reason = %reasons, waited_ms = ms(waited), "write stalled"),
            Some(e) => {
                error!(table, region, reason = %reasons, waited_ms = ms(waited), error = %e, "write stall timed out")
            }
        }
        #[cfg(feature = "metrics")]
        {
            metrics::counter!("cellar_engine_write_stalls_total", "table" => table.to_owned()).increment(1);
            metrics::histogram!("cellar_engine_write_stall_seconds", "table" => table.to_owned())
                .record(waited.as_secs_f64());
        }
    }

    /// True for the first stall, then at most once per [`STALL_WARN_EVERY`] across threads.
    fn stall_warning_due(&self) -> bool {
        let now = process_ms() + 1;
        let last = self.stall_warned_ms.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= ms(STALL_WARN_EVERY);
        due && self.stall_warned_ms.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }

    /// Flushes since open.
    pub fn flushes(&self) -> u64 {
        self.flushes.load(Ordering::Relaxed)
    }

    /// Compactions since open.
    pub fn compactions(&self) -> u64 {
        self.compactions.load(Ordering::Relaxed)
    }

    /// Splits since open.
    pub fn splits(&self) -> u64 {
        self.splits.load(Ordering::Relaxed)
    }

    /// Stalled writes since open, and the milliseconds they waited.
    pub fn write_stalls(&self) -> (u64, u64) {
        (self.write_stalls.load(Ordering::Relaxed), self.write_stall_ms.load(Ordering::Relaxed))
    }
}

/// A split key for an event: printable, and cut after [`KEY_CHARS`] characters.
fn short_key(key: &[u8]) -> String {
    let printable = to_printable(key);
    match printable.char_indices().nth(KEY_CHARS) {
        Some((at, _)) => format!("{}...", &printable[..at]),
        None => printable,
    }
}

/// Size and request counts of one region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionInfo {
    /// Region id (unique in the engine).
    pub id: u64,
    /// First row (inclusive); empty = start of table.
    pub start_key: Bytes,
    /// End row (exclusive); empty = end of table.
    pub end_key: Bytes,
    /// Bytes in SSTables.
    pub file_bytes: u64,
    /// Bytes in memstores.
    pub memstore_bytes: u64,
    /// Number of SSTables.
    pub files: usize,
    /// Rows read since open.
    pub reads: u64,
    /// Mutations applied since open.
    pub writes: u64,
}

/// Why a write waited: every reason seen while it waited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StallReasons {
    memstore_full: bool,
    too_many_files: bool,
    global_memstore_full: bool,
}

impl StallReasons {
    /// Adds the reasons a write waits now: its region's memstore is full, the region has too
    /// many files, all memstores together are full.
    pub fn note(&mut self, memstore_full: bool, too_many_files: bool, global_memstore_full: bool) {
        self.memstore_full |= memstore_full;
        self.too_many_files |= too_many_files;
        self.global_memstore_full |= global_memstore_full;
    }
}

impl fmt::Display for StallReasons {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reasons = [
            (self.memstore_full, "memstore full"),
            (self.too_many_files, "too many files"),
            (self.global_memstore_full, "global memstore full"),
        ];
        let mut first = true;
        for (_, reason) in reasons.iter().filter(|(on, _)| *on) {
            if !first {
                f.write_str(", ")?;
            }
            f.write_str(reason)?;
            first = false;
        }
        Ok(())
    }
}

/// A kind of background work that keeps failing: its latest failure, and when it last logged at
/// ERROR.
#[derive(Debug, Default)]
pub(crate) struct Failing {
    /// What a write that waited in vain reports.
    pub message: String,
    /// Failures in a row.
    pub failures: u64,
    logged_at: Option<Instant>,
}

impl Failing {
    /// Counts a failure; true if it is to be logged at ERROR.
    fn count(&mut self, message: String) -> bool {
        self.message = message;
        self.failures += 1;
        let loud = self.logged_at.is_none_or(|at| at.elapsed() >= REPEAT_ERROR_EVERY);
        if loud {
            self.logged_at = Some(Instant::now());
        }
        loud
    }
}

/// A background task of `kind` ("flush", "compaction", "split") failed; `failing` is the
/// kind's state since its last success.
pub(crate) fn task_failed(failing: &mut Failing, kind: &'static str, table: &str, region: u64, e: &Error) {
    if failing.count(format!("the last {kind} of region {region} failed: {e}")) {
        error!(kind, table, region, error = %e, failures = failing.failures, "background task failed");
    } else {
        debug!(kind, table, region, error = %e, failures = failing.failures, "background task failed");
    }
    #[cfg(feature = "metrics")]
    metrics::counter!("cellar_engine_background_failures_total", "kind" => kind).increment(1);
}

/// A background task of `kind` succeeded after `failing`: logged at INFO.
pub(crate) fn task_recovered(failing: &Failing, kind: &'static str, table: &str, region: u64) {
    info!(kind, table, region, failures = failing.failures, "background task recovered");
}

/// A catalog write failed; `failing` is the state since the last one that succeeded.
pub(crate) fn catalog_failed(failing: &mut Failing, e: &Error) {
    if failing.count(format!("the last catalog write failed: {e}")) {
        error!(kind = "catalog", error = %e, failures = failing.failures, "catalog write failed");
    } else {
        debug!(kind = "catalog", error = %e, failures = failing.failures, "catalog write failed");
    }
    #[cfg(feature = "metrics")]
    metrics::counter!("cellar_engine_background_failures_total", "kind" => "catalog").increment(1);
}

/// A catalog write succeeded after `failing`: logged at INFO.
pub(crate) fn catalog_recovered(failing: &Failing) {
    info!(kind = "catalog", failures = failing.failures, "catalog write recovered");
}

/// The write-ahead log in `wal_dir` failed: the engine refuses writes until reopened. Called
/// once, when the log first fails.
pub(crate) fn read_only(wal_dir: &Path, reason: &str) {
    error!(reason, wal = %wal_dir.display(), "engine is read-only");
    #[cfg(feature = "metrics")]
    metrics::gauge!("cellar_engine_read_only").set(1.0);
}

/// One table in [`EngineStats`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableStats {
    /// The table's name.
    pub name: String,
    /// False while the table is disabled.
    pub enabled: bool,
    /// Its regions, in key order (as [`Engine::regions`](crate::Engine::regions) lists them).
    pub regions: Vec<RegionInfo>,
}

impl TableStats {
    /// Bytes in the regions' memstores.
    pub fn memstore_bytes(&self) -> u64 {
        self.regions.iter().map(|r| r.memstore_bytes).sum()
    }

    /// Bytes of the regions' SSTables (a file split daughters share counts in each for the
    /// part of it in its range).
    pub fn file_bytes(&self) -> u64 {
        self.regions.iter().map(|r| r.file_bytes).sum()
    }

    /// The regions' SSTables (a file split daughters share counts once in each).
    pub fn files(&self) -> usize {
        self.regions.iter().map(|r| r.files).sum()
    }

    /// Rows read since open (of the current regions: a split starts its daughters at zero).
    pub fn reads(&self) -> u64 {
        self.regions.iter().map(|r| r.reads).sum()
    }

    /// Mutations applied since open (of the current regions: a split starts its daughters at
    /// zero).
    pub fn writes(&self) -> u64 {
        self.regions.iter().map(|r| r.writes).sum()
    }
}

/// A snapshot of an engine: its tables' sizes, memory, log and cache, the background work
/// waiting, what it has done since it opened, and what is failing. From
/// [`Engine::stats`](crate::Engine::stats); `Display` prints a short summary of it, one
/// line per item.
///
/// ```
/// use cellar_engine::*;
/// # fn main() -> Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let engine = Engine::open(dir.path(), EngineOptions::default())?;
/// engine.create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f")))?;
/// engine.table("t")?.put(Put::new("r").add("f", "q", "v"))?;
/// engine.flush("t")?;
/// let stats = engine.stats();
/// assert_eq!(stats.flushes, 1);
/// assert_eq!(stats.tables[0].files(), 1);
/// assert!(stats.to_string().contains("flushes: 1 done"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineStats {
    /// Every table, by name.
    pub tables: Vec<TableStats>,
    /// Bytes all memstores hold, frozen ones being flushed included: what
    /// [`EngineOptions::global_memstore_bytes`](crate::EngineOptions::global_memstore_bytes)
    /// limits.
    pub memstore_bytes: u64,
    /// Bytes of the write-ahead log's segment files (the open one's preallocated length
    /// included).
    pub wal_bytes: u64,
    /// Write-ahead log segment files, the open one included.
    pub wal_segments: usize,
    /// The block cache's counters and usage.
    pub block_cache: CacheStats,
    /// Background flushes queued or running.
    pub pending_flushes: usize,
    /// Background compactions queued or running.
    pub pending_compactions: usize,
    /// Background splits queued or running.
    pub pending_splits: usize,
    /// Region flushes since open, background and explicit (a flush of every region counts
    /// each region it wrote).
    pub flushes: u64,
    /// Region compactions since open, background and explicit.
    pub compactions: u64,
    /// Region splits since open.
    pub splits: u64,
    /// Writes that had to wait for background work since open (the ones that then failed
    /// with [`Error::RegionTooBusy`](crate::Error::RegionTooBusy) included).
    pub write_stalls: u64,
    /// Milliseconds those writes waited, together.
    pub write_stall_ms: u64,
    /// Why kinds of background work (flushes, compactions, splits, catalog writes) fail, each
    /// until one of its kind succeeds.
    pub background_failures: Vec<String>,
    /// Why the engine refuses writes until reopened, if it does
    /// ([`Engine::read_only_reason`](crate::Engine::read_only_reason)).
    pub read_only: Option<String>,
}

impl EngineStats {
    /// Regions of every table.
    pub fn regions(&self) -> usize {
        self.tables.iter().map(|t| t.regions.len()).sum()
    }

    /// SSTables of every table.
    pub fn files(&self) -> usize {
        self.tables.iter().map(TableStats::files).sum()
    }

    /// Bytes of every table's SSTables.
    pub fn file_bytes(&self) -> u64 {
        self.tables.iter().map(TableStats::file_bytes).sum()
    }
}

/// `bytes` in binary units, one decimal.
struct Size(u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
        if self.0 < 1024 {
            return write!(f, "{} B", self.0);
        }
        let mut value = self.0 as f64 / 1024.0;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        write!(f, "{value:.1} {}", UNITS[unit])
    }
}

/// One line per item:
///
/// ```text
/// tables: 1, regions: 2, files: 3 (1.2 MiB), memstores: 64.0 KiB
/// wal: 1.0 MiB in 1 segment
/// block cache: 12.0 KiB of 256.0 MiB (4.0 KiB pinned), hit ratio 50.0% (1 hits, 1 misses)
/// flushes: 3 done, 0 pending
/// compactions: 0 done, 0 pending
/// splits: 1 done, 0 pending
/// write stalls: 0 (0 ms)
/// table t: 2 regions, 3 files (1.2 MiB), memstores 64.0 KiB, 10 reads, 20 writes
/// ```
///
/// then a `background failure: ` line per failure, `read-only: ` when the engine is, and
/// ` (disabled)` after a disabled table's name.
impl fmt::Display for EngineStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "tables: {}, regions: {}, files: {} ({}), memstores: {}",
            self.tables.len(),
            self.regions(),
            self.files(),
            Size(self.file_bytes()),
            Size(self.memstore_bytes)
        )?;
        let plural = if self.wal_segments == 1 { "" } else { "s" };
        writeln!(f, "wal: {} in {} segment{plural}", Size(self.wal_bytes), self.wal_segments)?;
        let c = &self.block_cache;
        writeln!(
            f,
            "block cache: {} of {} ({} pinned), hit ratio {:.1}% ({} hits, {} misses)",
            Size(c.used_bytes),
            Size(c.capacity_bytes),
            Size(c.pinned_bytes),
            c.hit_ratio() * 100.0,
            c.hits,
            c.misses
        )?;
        writeln!(f, "flushes: {} done, {} pending", self.flushes, self.pending_flushes)?;
        writeln!(f, "compactions: {} done, {} pending", self.compactions, self.pending_compactions)?;
        writeln!(f, "splits: {} done, {} pending", self.splits, self.pending_splits)?;
        writeln!(f, "write stalls: {} ({} ms)", self.write_stalls, self.write_stall_ms)?;
        for t in &self.tables {
            writeln!(
                f,
                "table {}{}: {} regions, {} files ({}), memstores {}, {} reads, {} writes",
                t.name,
                if t.enabled { "" } else { " (disabled)" },
                t.regions.len(),
                t.files(),
                Size(t.file_bytes()),
                Size(t.memstore_bytes()),
                t.reads(),
                t.writes()
            )?;
        }
        for failure in &self.background_failures {
            writeln!(f, "background failure: {failure}")?;
        }
        if let Some(why) = &self.read_only {
            writeln!(f, "read-only: {why}")?;
        }
        Ok(())
    }
}

/// How often the background publishes the gauges at most: after tasks, and when idle. A
/// publication builds the whole [`EngineStats`] (every region's keys), too much for every
/// task when small flushes come fast.
#[cfg(feature = "metrics")]
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cadence {
    /// An application asked: at once.
    Now,
    /// After a background task: at most every 100 ms.
    AfterTask,
    /// The background's idle tick: at most every second.
    Idle,
}

#[cfg(feature = "metrics")]
impl Cadence {
    fn gap(self) -> Duration {
        match self {
            Cadence::Now => Duration::ZERO,
            Cadence::AfterTask => Duration::from_millis(100),
            Cadence::Idle => Duration::from_secs(1),
        }
    }
}

/// The gauges labelled by table.
#[cfg(feature = "metrics")]
const TABLE_GAUGES: [&str; 4] = [
    "cellar_engine_regions",
    "cellar_engine_memstore_bytes",
    "cellar_engine_store_files",
    "cellar_engine_store_file_bytes",
];

/// Publishes an engine's gauges through the `metrics` facade, one publication at a time.
#[cfg(feature = "metrics")]
#[derive(Debug, Default)]
pub(crate) struct Publisher {
    state: parking_lot::Mutex<Published>,
}

/// What the last publication was.
#[cfg(feature = "metrics")]
#[derive(Debug, Default)]
struct Published {
    at: Option<Instant>,
    /// The tables it published gauges of.
    tables: std::collections::BTreeSet<String>,
}

#[cfg(feature = "metrics")]
impl Publisher {
    /// Publishes `stats()`: at once when asked ([`Cadence::Now`]), otherwise unless another
    /// publication runs or one ran within the cadence's gap. The stats are taken under the
    /// lock, so the last publication is always of the latest figures.
    pub fn publish(&self, cadence: Cadence, stats: impl FnOnce() -> EngineStats) {
        let mut state = match cadence {
            Cadence::Now => self.state.lock(),
            _ => match self.state.try_lock() {
                Some(state) if state.at.is_none_or(|at| at.elapsed() >= cadence.gap()) => state,
                _ => return,
            },
        };
        let stats = stats();
        state.publish(&stats);
        state.at = Some(Instant::now());
    }
}

#[cfg(feature = "metrics")]
impl Published {
    fn publish(&mut self, s: &EngineStats) {
        use metrics::{counter, gauge};
        let mut tables = std::collections::BTreeSet::new();
        for t in &s.tables {
            let values = [t.regions.len() as f64, t.memstore_bytes() as f64, t.files() as f64, t.file_bytes() as f64];
            for (name, value) in TABLE_GAUGES.into_iter().zip(values) {
                gauge!(name, "table" => t.name.clone()).set(value);
            }
            tables.insert(t.name.clone());
        }
        // A dropped table's gauges fall to zero rather than keep their last values.
        for gone in self.tables.difference(&tables) {
            for name in TABLE_GAUGES {
                gauge!(name, "table" => gone.clone()).set(0.0);
            }
        }
        self.tables = tables;
        gauge!("cellar_engine_global_memstore_bytes").set(s.memstore_bytes as f64);
        gauge!("cellar_engine_wal_bytes").set(s.wal_bytes as f64);
        gauge!("cellar_engine_wal_segments").set(s.wal_segments as f64);
        gauge!("cellar_engine_flush_queue_length").set(s.pending_flushes as f64);
        gauge!("cellar_engine_compaction_queue_length").set(s.pending_compactions as f64);
        gauge!("cellar_engine_split_queue_length").set(s.pending_splits as f64);
        let c = &s.block_cache;
        gauge!("cellar_engine_block_cache_hit_ratio").set(c.hit_ratio());
        gauge!("cellar_engine_block_cache_bytes").set(c.used_bytes as f64);
        gauge!("cellar_engine_block_cache_pinned_bytes").set(c.pinned_bytes as f64);
        gauge!("cellar_engine_block_cache_capacity_bytes").set(c.capacity_bytes as f64);
        counter!("cellar_engine_block_cache_hits_total").absolute(c.hits);
        counter!("cellar_engine_block_cache_misses_total").absolute(c.misses);
        gauge!("cellar_engine_background_failing").set(s.background_failures.len() as f64);
        gauge!("cellar_engine_read_only").set(if s.read_only.is_some() { 1.0 } else { 0.0 });
    }
}
