//! The engine's tuning knobs.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::fs::{FileSystem, OsFs};

/// Tuning knobs of an engine.
///
/// Built from [`EngineOptions::default`] with one setter per field, so that a minor release
/// can add knobs without breaking callers (the struct is `#[non_exhaustive]`: outside this
/// crate it cannot be written as a struct literal). The fields stay public to read.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use cellar_engine::{Clock, EngineOptions, ManualClock};
///
/// let clock = Arc::new(ManualClock::new(1_000));
/// let options = EngineOptions::default()
///     .memstore_flush_bytes(1 << 20)
///     .write_stall_timeout(Duration::from_secs(5))
///     .auto_compact(false)
///     .clock(clock.clone());
/// assert_eq!(options.memstore_flush_bytes, 1 << 20);
/// assert_eq!(options.write_stall_timeout, Duration::from_secs(5));
/// assert!(!options.auto_compact);
/// assert_eq!(options.clock.now_ms(), 1_000);
/// assert_eq!(options.block_cache_bytes, EngineOptions::default().block_cache_bytes);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EngineOptions {
    /// Block cache budget in bytes (default 256 MiB).
    pub block_cache_bytes: usize,
    /// A region's memstores are flushed when those taking writes exceed this many bytes
    /// (default 64 MiB); writes go on into new ones meanwhile.
    /// Flushed memstores leave up to this much of their memory in a pool for the next ones to
    /// fill (resident meanwhile; memstores and pool together stay within
    /// `global_memstore_bytes`).
    pub memstore_flush_bytes: usize,
    /// WAL segments roll at this size (default 64 MiB). A flush of every region rolls the log
    /// too, and a segment it started rolls by size only at four times this (the next such
    /// flush closes it first, and the segment is then deleted without being synced).
    pub wal_segment_bytes: u64,
    /// When more WAL segments than this exist, every region is flushed so old ones can go.
    pub max_wal_segments: usize,
    /// Writes wait while all memstores together hold more than this (default 512 MiB). Past
    /// 5/8 of it, writes have the region with the largest memstore flushed early, so they
    /// seldom reach it.
    pub global_memstore_bytes: usize,
    /// Writes to a region wait while its memstores exceed this multiple of
    /// `memstore_flush_bytes` (default 4).
    pub memstore_block_multiplier: usize,
    /// A region is compacted in the background when a family has this many files, and a
    /// background compaction merges at least this many (default 4).
    pub compaction_threshold: usize,
    /// Most files one background compaction merges (default 10).
    pub compaction_max_files: usize,
    /// A background compaction merges a run of files adjacent in age in which no file is
    /// larger than this times the others together (default 1.2, as in HBase): a large file
    /// waits until newer ones add up to about its size, so data is rewritten a few times
    /// rather than at every compaction. A store that no run fits is merged anyway once it
    /// holds `blocking_files` files. A run that is every file of a family applies the full
    /// retention rules, as a major compaction does (markers and expired cells go), unless its
    /// memstores hold a delete marker or `auto_compact` is off.
    pub compaction_ratio: f64,
    /// Writes to a region wait while a family has more files than this (default 16).
    pub blocking_files: usize,
    /// Longest a write waits for background work before failing with
    /// [`Error::RegionTooBusy`](crate::Error::RegionTooBusy) (default 60 s).
    pub write_stall_timeout: Duration,
    /// Background worker threads for flushes, compactions and splits (default 2). One more
    /// thread writes the catalog after background flushes and compactions.
    pub background_threads: usize,
    /// Niceness the background threads add to their own on Linux (default 5; at most 19).
    /// When flushes and compactions compete with the application's threads for a core, they
    /// give way, as RocksDB's option to lower its compaction threads' priority has them do;
    /// back-pressure still stops writers that outrun them. 0 leaves them at the
    /// application's priority.
    pub background_nice: u8,
    /// Compact and split regions automatically (default true). Turn off for bulk loads, or
    /// to run compactions only on demand; flushes still happen in the background.
    pub auto_compact: bool,
    /// Flush every memstore when the last handle is dropped (default true), as HBase does when
    /// it closes a region: SkipWal and AsyncWal data survive a clean close, and the next open
    /// has no log to replay.
    pub flush_on_close: bool,
    /// Time source for default timestamps and TTL.
    pub clock: Arc<dyn Clock>,
    /// The file layer every file goes through (default: the operating system's). Tests pass a
    /// `cellar_engine::fault::FaultFs` (feature `test-util`) to simulate power loss and I/O errors.
    pub fs: Arc<dyn FileSystem>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            block_cache_bytes: 256 * 1024 * 1024,
            memstore_flush_bytes: 64 * 1024 * 1024,
            wal_segment_bytes: 64 * 1024 * 1024,
            max_wal_segments: 8,
            global_memstore_bytes: 512 * 1024 * 1024,
            memstore_block_multiplier: 4,
            compaction_threshold: 4,
            compaction_max_files: 10,
            compaction_ratio: 1.2,
            blocking_files: 16,
            write_stall_timeout: Duration::from_secs(60),
            background_threads: 2,
            background_nice: 5,
            auto_compact: true,
            flush_on_close: true,
            clock: Arc::new(SystemClock),
            fs: Arc::new(OsFs),
        }
    }
}

/// One setter per field, each named as the field it sets.
impl EngineOptions {
    /// Sets [`block_cache_bytes`](field@Self::block_cache_bytes).
    pub fn block_cache_bytes(mut self, block_cache_bytes: usize) -> Self {
        self.block_cache_bytes = block_cache_bytes;
        self
    }

    /// Sets [`memstore_flush_bytes`](field@Self::memstore_flush_bytes).
    pub fn memstore_flush_bytes(mut self, memstore_flush_bytes: usize) -> Self {
        self.memstore_flush_bytes = memstore_flush_bytes;
        self
    }

    /// Sets [`wal_segment_bytes`](field@Self::wal_segment_bytes).
    pub fn wal_segment_bytes(mut self, wal_segment_bytes: u64) -> Self {
        self.wal_segment_bytes = wal_segment_bytes;
        self
    }

    /// Sets [`max_wal_segments`](field@Self::max_wal_segments).
    pub fn max_wal_segments(mut self, max_wal_segments: usize) -> Self {
        self.max_wal_segments = max_wal_segments;
        self
    }

    /// Sets [`global_memstore_bytes`](field@Self::global_memstore_bytes).
    pub fn global_memstore_bytes(mut self, global_memstore_bytes: usize) -> Self {
        self.global_memstore_bytes = global_memstore_bytes;
        self
    }

    /// Sets [`memstore_block_multiplier`](field@Self::memstore_block_multiplier).
    pub fn memstore_block_multiplier(mut self, memstore_block_multiplier: usize) -> Self {
        self.memstore_block_multiplier = memstore_block_multiplier;
        self
    }

    /// Sets [`compaction_threshold`](field@Self::compaction_threshold).
    pub fn compaction_threshold(mut self, compaction_threshold: usize) -> Self {
        self.compaction_threshold = compaction_threshold;
        self
    }

    /// Sets [`compaction_max_files`](field@Self::compaction_max_files).
    pub fn compaction_max_files(mut self, compaction_max_files: usize) -> Self {
        self.compaction_max_files = compaction_max_files;
        self
    }

    /// Sets [`compaction_ratio`](field@Self::compaction_ratio).
    pub fn compaction_ratio(mut self, compaction_ratio: f64) -> Self {
        self.compaction_ratio = compaction_ratio;
        self
    }

    /// Sets [`blocking_files`](field@Self::blocking_files).
    pub fn blocking_files(mut self, blocking_files: usize) -> Self {
        self.blocking_files = blocking_files;
        self
    }

    /// Sets [`write_stall_timeout`](field@Self::write_stall_timeout).
    pub fn write_stall_timeout(mut self, write_stall_timeout: Duration) -> Self {
        self.write_stall_timeout = write_stall_timeout;
        self
    }

    /// Sets [`background_threads`](field@Self::background_threads).
    pub fn background_threads(mut self, background_threads: usize) -> Self {
        self.background_threads = background_threads;
        self
    }

    /// Sets [`background_nice`](field@Self::background_nice).
    pub fn background_nice(mut self, background_nice: u8) -> Self {
        self.background_nice = background_nice;
        self
    }

    /// Sets [`auto_compact`](field@Self::auto_compact).
    pub fn auto_compact(mut self, auto_compact: bool) -> Self {
        self.auto_compact = auto_compact;
        self
    }

    /// Sets [`flush_on_close`](field@Self::flush_on_close).
    pub fn flush_on_close(mut self, flush_on_close: bool) -> Self {
        self.flush_on_close = flush_on_close;
        self
    }

    /// Sets [`clock`](field@Self::clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sets [`fs`](field@Self::fs).
    pub fn fs(mut self, fs: Arc<dyn FileSystem>) -> Self {
        self.fs = fs;
        self
    }
}
