//! The engine's tuning knobs.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::fs::{FileSystem, OsFs};

/// Tuning knobs of an engine.
#[derive(Debug, Clone)]
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
