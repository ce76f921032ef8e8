//! The engine: opens a data directory, recovers it, owns the tables, the write-ahead log and
//! the block cache, and runs flushes and compactions.
//!
//! Directory layout: `MANIFEST` (the catalog), `LOCK` (held while open), `wal/` (log
//! segments), `sst/` (every SSTable, named by a unique id).
//!
//! Where things live: this module holds the [`Engine`] handle and table administration;
//! `options` the tuning knobs; `recovery` the open (manifest load, orphan removal, log
//! replay); `manifest` the catalog on disk, log trimming and file deletion; `maintenance`
//! the background's tasks, compaction policy, flushes of every region and splits. Writes go
//! through [`crate::write_path`] (admission, back-pressure and the one commit sequence); the
//! background threads ([`crate::background`]) reach the engine through the
//! [`Maintainer`](crate::background::Maintainer) trait only.
//!
//! # Lock order
//!
//! Locks are taken in this order (a thread holding one takes only locks below it), and
//! released in any order:
//!
//! 1. **`ddl`** (a mutex in [`manifest::Manifest`]): schema changes, catalog writes, splits,
//!    log trimming, file deletion and the start of a flush of every region. Held as a
//!    [`DdlGuard`]; every operation that needs it takes `&DdlGuard<'_>`, so calling one without
//!    the lock does not compile. Taken without a time bound only by a thread holding no other
//!    lock of this list; a thread holding region maintenance locks (the end of a flush of
//!    every region) takes it only with [`Manifest::try_lock_for`](manifest::Manifest::try_lock_for).
//! 2. **Region maintenance locks** (`Region::compacting`, then `Region::flushing`;
//!    `Region::maintenance` takes both in that order). Several regions' `flushing` locks are
//!    taken only under `ddl` and in region-id order (the flush of every region).
//! 3. **Region write locks** (`Region::write_lock`): one writer per region. Several regions'
//!    write locks are taken in region-id order ([`crate::MultiTableMutation`]); a write that
//!    needs one more region below the highest it holds only tries it
//!    (`Engine::read_then_mutate`). A split takes the parent's, then the daughters'.
//! 4. **The apply gate** (in [`crate::write_path::WritePath`]): shared by a writer from log
//!    append to memstore insert (under its region write locks); exclusive
//!    ([`WritePath::quiesce`](crate::write_path::WritePath::quiesce)) for log trimming and
//!    the freeze of a flush of every region (under `ddl`, never under a region write lock).
//! 5. **`durable`** (in the manifest): what the manifest on disk lists; taken under `ddl`,
//!    after the apply gate when trimming.
//! 6. **The table map** ([`crate::tables::Tables`], read briefly anywhere, written under `ddl`)
//!    and a table's region list (`TableState`).
//! 7. Leaves, held for a moment and never while taking a lock above: a region's stores
//!    (`RegionStores` swap), memstore internals, the write-ahead log's own locks, the block
//!    cache, the background queue and catalog-request mutexes.
//!
//! The metrics publisher's mutex (feature `metrics`) is taken with no lock of this list held,
//! and held only while the figures are read (table map, region stores and leaves).
//!
//! The guard types enforcing it: [`DdlGuard`] (only [`manifest::Manifest::lock`] makes one),
//! `parking_lot` guards of the region locks, and the apply gate's guards, which only
//! `write_path` takes.

mod maintenance;
mod manifest;
mod options;
mod recovery;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::background::{Background, Lifeline, TaskKind};
use crate::cache::{BlockCache, CacheStats};
use crate::descriptor::{FamilyDescriptor, TableDescriptor};
use crate::observe::{EngineStats, RegionInfo, TableStats};
use crate::region::{CompactionScope, FileContext, Region};
use crate::split::check_split_keys;
use crate::sst::SstReader;
use crate::table::Table;
use crate::tables::{TableState, Tables};
use crate::write_path::WritePath;
use crate::{Error, Result};

use maintenance::{EveryRegion, FlushAsk};
pub(crate) use manifest::DdlGuard;
use manifest::Manifest;
pub use options::EngineOptions;

/// The engine's state; private to this module and its submodules. Others reach it through
/// narrower handles: tables through [`WritePath`] ([`Engine::writes`]), the background through
/// [`crate::background::Maintainer`].
pub(crate) struct EngineInner {
    dir: PathBuf,
    sst_dir: PathBuf,
    opts: EngineOptions,
    cache: Arc<BlockCache>,
    tables: Arc<Tables>,
    /// The catalog on disk, and the `ddl` lock.
    manifest: Manifest,
    /// Admission and commit of writes; holds the log.
    writes: Arc<WritePath>,
    next_file_id: AtomicU64,
    next_region_id: AtomicU64,
    background: Arc<Background>,
    /// Publishes the gauges, one publication at a time.
    #[cfg(feature = "metrics")]
    publisher: crate::observe::Publisher,
    _lock: Box<dyn std::any::Any + Send + Sync>,
}

impl Drop for EngineInner {
    fn drop(&mut self) {
        // Best effort: buffered AsyncWal records reach the OS on a clean close.
        let _ = self.writes.wal().flush_buffer();
    }
}

/// An open engine. Cheap to clone; `Send + Sync`; closed when the last clone is dropped.
///
/// # Examples
/// ```
/// use cellar_engine::{Engine, EngineOptions, FamilyDescriptor, Get, Put, TableDescriptor};
/// # fn main() -> cellar_engine::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let engine = Engine::open(dir.path(), EngineOptions::default())?;
/// engine.create_table(TableDescriptor::new("users").family(FamilyDescriptor::new("d")))?;
/// let users = engine.table("users")?;
/// users.put(Put::new("alice").add("d", "email", "a@example.com"))?;
/// let row = users.get(Get::new("alice"))?;
/// assert_eq!(row.value(b"d", b"email").unwrap().as_ref(), b"a@example.com");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Engine {
    // Declared first so it drops first: the workers stop before the engine can close.
    life: Arc<Lifeline>,
    inner: Arc<EngineInner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("dir", &self.inner.dir).finish()
    }
}

impl Engine {
    /// The write path this engine's tables write through (identifies the engine too).
    pub(crate) fn writes(&self) -> &Arc<WritePath> {
        &self.inner.writes
    }

    /// The data directory.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// Creates a table with one region.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad descriptor, [`Error::TableExists`].
    pub fn create_table(&self, desc: TableDescriptor) -> Result<()> {
        self.create_table_with_splits(desc, Vec::new())
    }

    /// Creates a table pre-split into `split_keys.len() + 1` regions, so writes spread from the
    /// start. Keys come from the application or from [`SplitAlgorithm::split_keys`](crate::SplitAlgorithm::split_keys).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad descriptor or split keys that are empty, too long or
    /// not strictly increasing; [`Error::TableExists`].
    pub fn create_table_with_splits(&self, desc: TableDescriptor, split_keys: Vec<Bytes>) -> Result<()> {
        desc.validate()?;
        check_split_keys(&split_keys)?;
        let ddl = self.inner.manifest.lock();
        if self.inner.tables.read().contains_key(&desc.name) {
            return Err(Error::TableExists(desc.name));
        }
        let mut bounds = Vec::with_capacity(split_keys.len() + 2);
        bounds.push(Bytes::new());
        bounds.extend(split_keys);
        bounds.push(Bytes::new());
        let regions = bounds.windows(2).map(|w| self.inner.new_region(&desc, w[0].clone(), w[1].clone())).collect();
        let state = Arc::new(TableState::new(desc.clone(), true, regions));
        self.inner.tables.write().insert(desc.name.clone(), state);
        self.inner.persist(&ddl).inspect_err(|_| {
            self.inner.tables.write().remove(&desc.name);
        })
    }

    /// Adds a family, or changes an existing family's settings.
    ///
    /// # Errors
    /// [`Error::TableNotFound`], [`Error::InvalidArgument`] for bad settings.
    pub fn modify_family(&self, table: &str, family: FamilyDescriptor) -> Result<()> {
        family.validate()?;
        self.alter_table(table, |desc| {
            desc.families.retain(|f| f.name != family.name);
            desc.families.push(family.clone());
            desc.families.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(())
        })
    }

    /// Removes a family and its data.
    ///
    /// # Errors
    /// [`Error::TableNotFound`], [`Error::FamilyNotFound`], or [`Error::InvalidArgument`] when
    /// it is the last family.
    pub fn delete_family(&self, table: &str, family: &str) -> Result<()> {
        self.alter_table(table, |desc| {
            if desc.get_family(family.as_bytes()).is_none() {
                return Err(Error::FamilyNotFound { table: desc.name.clone(), family: family.to_string() });
            }
            desc.families.retain(|f| f.name != family);
            if desc.families.is_empty() {
                return Err(Error::invalid("family", "cannot delete a table's last family"));
            }
            Ok(())
        })
    }

    /// Changes a table's schema: `change` edits a copy of the descriptor (families, durability,
    /// region size), which is validated and applied at once. The name cannot change.
    ///
    /// # Errors
    /// [`Error::TableNotFound`], [`Error::InvalidArgument`] if the result is invalid or renames
    /// the table; whatever `change` returns.
    pub fn alter_table(&self, table: &str, change: impl FnOnce(&mut TableDescriptor) -> Result<()>) -> Result<()> {
        let ddl = self.inner.manifest.lock();
        let state = self.inner.table_state(table)?;
        let mut desc = state.descriptor();
        change(&mut desc)?;
        if desc.name != table {
            return Err(Error::invalid("table", "alter cannot rename a table"));
        }
        desc.families.sort_by(|a, b| a.name.cmp(&b.name));
        desc.validate()?;
        state.set_descriptor(desc.clone());
        for r in state.regions() {
            r.set_families(&desc.families);
        }
        self.inner.persist(&ddl)
    }

    /// The table's current descriptor.
    ///
    /// # Errors
    /// [`Error::TableNotFound`].
    pub fn describe(&self, table: &str) -> Result<TableDescriptor> {
        Ok(self.inner.table_state(table)?.descriptor())
    }

    /// Names of all tables, sorted.
    pub fn list_tables(&self) -> Vec<String> {
        self.inner.tables.read().keys().cloned().collect()
    }

    /// True if the table exists.
    pub fn table_exists(&self, table: &str) -> bool {
        self.inner.tables.read().contains_key(table)
    }

    /// True if the table is enabled.
    ///
    /// # Errors
    /// [`Error::TableNotFound`].
    pub fn is_enabled(&self, table: &str) -> Result<bool> {
        Ok(self.inner.table_state(table)?.is_enabled())
    }

    /// Refuses reads and writes to the table until it is enabled again.
    ///
    /// # Errors
    /// [`Error::TableNotFound`].
    pub fn disable_table(&self, table: &str) -> Result<()> {
        self.set_enabled(table, false)
    }

    /// Re-enables a disabled table.
    ///
    /// # Errors
    /// [`Error::TableNotFound`].
    pub fn enable_table(&self, table: &str) -> Result<()> {
        self.set_enabled(table, true)
    }

    fn set_enabled(&self, table: &str, enabled: bool) -> Result<()> {
        let ddl = self.inner.manifest.lock();
        let state = self.inner.table_state(table)?;
        state.set_enabled(enabled);
        // Disabling flushes, as HBase does, so a disabled table holds no unflushed data.
        let to_flush = if enabled { Vec::new() } else { state.regions() };
        self.inner.flush_regions(&ddl, table, to_flush)
    }

    /// Deletes a disabled table and its files. [`Table`] handles still held for it fail every
    /// operation, and keep the open files' memory (indexes, blooms) until they are dropped.
    ///
    /// # Errors
    /// [`Error::TableNotFound`], [`Error::TableEnabled`] if it was not disabled first.
    pub fn drop_table(&self, table: &str) -> Result<()> {
        let ddl = self.inner.manifest.lock();
        let state = self.inner.table_state(table)?;
        if state.is_enabled() {
            return Err(Error::TableEnabled(table.to_string()));
        }
        self.inner.tables.write().remove(table);
        state.mark_dropped();
        self.inner.persist(&ddl)?;
        for r in state.regions() {
            self.inner.delete_files(&ddl, r.stores().families.iter().flat_map(|s| s.files.iter().cloned()));
        }
        Ok(())
    }

    /// Removes every row of a table, keeping its schema.
    ///
    /// # Errors
    /// [`Error::TableNotFound`].
    pub fn truncate_table(&self, table: &str) -> Result<()> {
        let ddl = self.inner.manifest.lock();
        let state = self.inner.table_state(table)?;
        let desc = state.descriptor();
        let fresh = self.inner.new_region(&desc, Bytes::new(), Bytes::new());
        let old = state.replace_regions(vec![fresh]);
        self.inner.persist(&ddl)?;
        for r in old {
            self.inner.delete_files(&ddl, r.stores().families.iter().flat_map(|s| s.files.iter().cloned()));
        }
        self.inner.trim_wal(&ddl)
    }

    /// A handle for reading and writing `table`.
    ///
    /// # Errors
    /// [`Error::TableNotFound`].
    pub fn table(&self, table: &str) -> Result<Table> {
        let state = self.inner.table_state(table)?;
        Ok(Table::new(self.life.clone(), self.inner.writes.clone(), state))
    }

    /// Writes every memstore of the table to SSTables; the background then compacts or splits
    /// the regions the new files make due (with `auto_compact`).
    ///
    /// # Errors
    /// [`Error::TableNotFound`], I/O errors.
    pub fn flush(&self, table: &str) -> Result<()> {
        let state = self.inner.table_state(table)?;
        // The table's regions at one sequence number when no other table holds data: its
        // catalog write then syncs no log.
        if let EveryRegion::Flushed(_) = self.inner.flush_every_region(FlushAsk::Table(table))? {
            let ddl = self.inner.manifest.lock();
            self.inner.persist(&ddl)?;
            self.inner.trim_wal(&ddl)?;
        } else {
            let ddl = self.inner.manifest.lock();
            self.inner.flush_regions(&ddl, table, state.regions())?;
        }
        // As after a background flush: the new files may make a compaction or a split due.
        for r in state.regions() {
            self.inner.request_follow_ups(table, &state, &r);
        }
        Ok(())
    }

    /// Merges each family's files into one (all of them, where the background merges the runs
    /// its policy selects); keeps delete markers.
    ///
    /// # Errors
    /// [`Error::TableNotFound`], I/O errors, corruption found while reading files.
    pub fn compact(&self, table: &str) -> Result<()> {
        self.compact_table(table, false)
    }

    /// Flushes, then rewrites each family into one file, dropping deleted, excess and expired
    /// cells and delete markers per the family's settings.
    ///
    /// # Errors
    /// [`Error::TableNotFound`], I/O errors, corruption found while reading files.
    pub fn major_compact(&self, table: &str) -> Result<()> {
        self.compact_table(table, true)
    }

    fn compact_table(&self, table: &str, major: bool) -> Result<()> {
        let state = self.inner.table_state(table)?;
        let ddl = self.inner.manifest.lock();
        let now = self.inner.opts.clock.now_ms();
        let mut replaced = Vec::new();
        for r in state.regions() {
            if major {
                self.inner.flush_region(table, &r)?;
            }
            let scope = if major { CompactionScope::Major } else { CompactionScope::All };
            replaced.extend(self.inner.compact_region(table, &r, scope, now)?);
        }
        self.inner.persist(&ddl)?;
        self.inner.delete_files(&ddl, replaced.into_iter());
        self.inner.trim_wal(&ddl)
    }

    /// Splits regions: with `at`, the region holding that row, at that row; without, every
    /// region at its data's middle (regions too small to cut are left alone). Daughters share
    /// the parent's files until compaction rewrites them, so a split writes no data. Returns
    /// the number of regions split.
    ///
    /// The table's [`SplitPolicy`](crate::SplitPolicy) applies to every split, explicit ones
    /// included (as HBase applies its split restriction to user split points): under a
    /// key-prefix policy the cut moves to the first key of the group holding the cut row
    /// (`at`, or the middle row), or to the first key after that group when the group starts
    /// at or before the region's start. A region the group fills from end to end is not split;
    /// nor, without `at`, one whose data is a single group.
    ///
    /// # Errors
    /// [`Error::TableNotFound`]; [`Error::InvalidArgument`] if `at` is a region's start key.
    pub fn split(&self, table: &str, at: Option<&[u8]>) -> Result<usize> {
        let state = self.inner.table_state(table)?;
        let ddl = self.inner.manifest.lock();
        let targets = match at {
            Some(row) => state.region_for(row).into_iter().collect(),
            None => state.regions(),
        };
        let mut splits = 0;
        for region in targets {
            let at = at.map(Bytes::copy_from_slice);
            splits += usize::from(self.inner.split_region(&ddl, &state, &region, at)?);
        }
        self.inner.trim_wal(&ddl)?;
        Ok(splits)
    }

    /// Per-region sizes and request counts, in key order.
    ///
    /// # Errors
    /// [`Error::TableNotFound`].
    pub fn regions(&self, table: &str) -> Result<Vec<RegionInfo>> {
        Ok(region_infos(&*self.inner.table_state(table)?))
    }

    /// A snapshot of the engine for an application to print or serve: every table's regions,
    /// memory, log and block cache, the background work waiting, the flushes, compactions,
    /// splits and write stalls since open, and what is failing. Takes no lock a write waits
    /// on for long; reads each region's figures on its own, so they are not of one instant.
    pub fn stats(&self) -> EngineStats {
        self.inner.stats()
    }

    /// Publishes the engine's gauges through the `metrics` facade now (feature `metrics`):
    /// sizes by table, memory, log, block cache, queues and whether the engine is read-only.
    /// The background publishes them too, after each task and about once a second when idle;
    /// call this before a scrape or a report that must be current. Counters and histograms
    /// (flushes, compactions, splits, write stalls, failures) are recorded as they happen.
    /// Without a recorder installed, the facade drops them.
    ///
    /// Gauges by `table`: `cellar_engine_regions`, `cellar_engine_memstore_bytes`,
    /// `cellar_engine_store_files`, `cellar_engine_store_file_bytes` (a dropped table's fall to
    /// 0). Gauges of the engine: `cellar_engine_global_memstore_bytes` (all memstores),
    /// `cellar_engine_wal_bytes`, `cellar_engine_wal_segments`,
    /// `cellar_engine_{flush,compaction,split}_queue_length`,
    /// `cellar_engine_block_cache_{hit_ratio,bytes,pinned_bytes,capacity_bytes}`,
    /// `cellar_engine_background_failing` (kinds of work failing now) and
    /// `cellar_engine_read_only` (0 or 1); counters `cellar_engine_block_cache_hits_total` and
    /// `cellar_engine_block_cache_misses_total`.
    #[cfg(feature = "metrics")]
    pub fn publish_metrics(&self) {
        self.inner.publisher.publish(crate::observe::Cadence::Now, || self.inner.stats());
    }

    /// Waits until no background flush, compaction or split is queued or running; false if
    /// `timeout` passed first.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let started = Instant::now();
        while !self.inner.background.idle() {
            if started.elapsed() > timeout {
                return false;
            }
            self.inner.background.wait_for_progress(Duration::from_millis(20));
        }
        true
    }

    /// Block cache counters.
    pub fn cache_stats(&self) -> CacheStats {
        self.inner.cache.stats()
    }

    /// Why the engine refuses writes until it is reopened, if it does: a write or fsync of the
    /// write-ahead log failed (see [`Error::ReadOnly`]). Reads keep working.
    pub fn read_only_reason(&self) -> Option<String> {
        self.inner.writes.wal().failure()
    }

    /// Number of write-ahead log segment files.
    pub fn wal_segments(&self) -> usize {
        self.inner.writes.wal().segment_count()
    }
}

/// Sizes and request counts of a table's regions, in key order.
fn region_infos(state: &TableState) -> Vec<RegionInfo> {
    state
        .regions()
        .iter()
        .map(|r| RegionInfo {
            id: r.id,
            start_key: r.start.clone(),
            end_key: r.end.clone(),
            file_bytes: r.file_size(),
            memstore_bytes: r.memstore_size() as u64,
            files: r.file_count(),
            reads: r.counters.reads.load(Ordering::Relaxed),
            writes: r.counters.writes.load(Ordering::Relaxed),
        })
        .collect()
}

impl EngineInner {
    /// See [`Engine::stats`].
    fn stats(&self) -> EngineStats {
        let tables: Vec<(String, Arc<TableState>)> =
            self.tables.read().iter().map(|(name, t)| (name.clone(), t.clone())).collect();
        let tables = tables
            .into_iter()
            .map(|(name, t)| TableStats { name, enabled: t.is_enabled(), regions: region_infos(&t) })
            .collect();
        let bg = &self.background;
        let (pending_flushes, pending_compactions, pending_splits) = bg.pending();
        let (write_stalls, write_stall_ms) = bg.counters.write_stalls();
        let kinds = [TaskKind::Flush, TaskKind::Compact, TaskKind::Split];
        let mut background_failures: Vec<String> = kinds.into_iter().filter_map(|k| bg.failure(k)).collect();
        background_failures.extend(bg.catalog_failure());
        let wal = self.writes.wal();
        EngineStats {
            tables,
            memstore_bytes: self.writes.memory().held() as u64,
            wal_bytes: wal.bytes(),
            wal_segments: wal.segment_count(),
            block_cache: self.cache.stats(),
            pending_flushes,
            pending_compactions,
            pending_splits,
            flushes: bg.counters.flushes(),
            compactions: bg.counters.compactions(),
            splits: bg.counters.splits(),
            write_stalls,
            write_stall_ms,
            background_failures,
            read_only: wal.failure(),
        }
    }

    pub fn table_state(&self, name: &str) -> Result<Arc<TableState>> {
        self.tables.read().get(name).cloned().ok_or_else(|| Error::TableNotFound(name.to_string()))
    }

    fn new_region(&self, desc: &TableDescriptor, start: Bytes, end: Bytes) -> Arc<Region> {
        let id = self.next_region_id.fetch_add(1, Ordering::Relaxed);
        let wal = self.writes.wal();
        let region = Region::new(id, (start, end), &desc.families, Vec::new(), wal.last_seq(), self.writes.memory());
        region.publish(wal.last_seq());
        Arc::new(region)
    }

    pub fn file_context(&self) -> FileContext<'_> {
        FileContext { fs: &*self.opts.fs, sst_dir: &self.sst_dir, cache: &self.cache, next_file_id: &self.next_file_id }
    }

    /// Writes the catalog.
    fn persist(&self, ddl: &DdlGuard<'_>) -> Result<()> {
        let next_region_id = self.next_region_id.load(Ordering::Relaxed);
        self.manifest.persist(ddl, &self.tables, next_region_id, self.writes.wal(), &*self.opts.fs)
    }

    /// Deletes log segments whose edits are all in SSTables the manifest lists.
    fn trim_wal(&self, ddl: &DdlGuard<'_>) -> Result<()> {
        self.manifest.trim_wal(ddl, &self.tables, &self.writes)
    }

    /// Deletes replaced files that neither a region nor the manifest on disk lists any more;
    /// the caller has written the catalog.
    fn delete_files(&self, ddl: &DdlGuard<'_>, files: impl Iterator<Item = Arc<SstReader>>) {
        self.manifest.delete_files(ddl, &self.tables, files, &self.cache, &*self.opts.fs, &self.sst_dir);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::compaction::CompactionPolicy;
    use crate::{Get, Put};

    fn options() -> EngineOptions {
        EngineOptions::default().auto_compact(false).flush_on_close(false)
    }

    /// What a process killed at this moment leaves for the next open: a copy of the files.
    fn crash_copy(from: &Path) -> tempfile::TempDir {
        let to = tempfile::tempdir().unwrap();
        for sub in ["", "sst", "wal"] {
            let (src, dst) = (from.join(sub), to.path().join(sub));
            std::fs::create_dir_all(&dst).unwrap();
            for entry in std::fs::read_dir(&src).unwrap() {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_file() {
                    std::fs::copy(entry.path(), dst.join(entry.file_name())).unwrap();
                }
            }
        }
        to
    }

    fn row(i: u32) -> String {
        format!("row-{i:04}")
    }

    fn assert_rows(engine: &Engine, table: &str, rows: std::ops::Range<u32>) {
        let t = engine.table(table).unwrap();
        for i in rows {
            let found = t.get(Get::new(row(i))).unwrap();
            assert_eq!(
                found.value(b"f", b"v").map(|v| v.to_vec()),
                Some(format!("value-{i}").into_bytes()),
                "{table}: {} lost",
                row(i)
            );
        }
    }

    fn create(engine: &Engine, table: &str, rows: std::ops::Range<u32>) -> Arc<Region> {
        engine.create_table(TableDescriptor::new(table).family(FamilyDescriptor::new("f"))).unwrap();
        let t = engine.table(table).unwrap();
        for i in rows {
            t.put(Put::new(row(i)).add("f", "v", format!("value-{i}"))).unwrap();
        }
        engine.inner.table_state(table).unwrap().regions()[0].clone()
    }

    /// A table `t` of one family `f` built by `family`, under a manual clock at 1 000 000 ms,
    /// background compactions off and runs of three files for the policy.
    fn policy_engine(dir: &Path, family: FamilyDescriptor) -> (Engine, Arc<crate::clock::ManualClock>) {
        let clock = Arc::new(crate::clock::ManualClock::new(1_000_000));
        let opts = options().compaction_threshold(3).clock(clock.clone());
        let engine = Engine::open(dir, opts).unwrap();
        engine.create_table(TableDescriptor::new("t").family(family)).unwrap();
        (engine, clock)
    }

    /// What the background's compaction of `t`'s region does now.
    fn compact_as_background(engine: &Engine) {
        let inner = &engine.inner;
        let region = inner.table_state("t").unwrap().regions()[0].clone();
        let policy = CompactionPolicy { major_when_every_file: true, ..inner.compaction_policy() };
        let now = inner.opts.clock.now_ms();
        assert!(!region
            .compact(&inner.file_context(), CompactionScope::Selected(&policy), now)
            .unwrap()
            .replaced
            .is_empty());
    }

    /// A run that leaves a newer file out keeps every version: a marker in that file hides
    /// the newest version, so reads return the one behind it, and still do after the run.
    #[test]
    fn a_run_that_leaves_newer_files_out_keeps_the_versions_reads_return() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, _clock) = policy_engine(dir.path(), FamilyDescriptor::new("f").max_versions(1));
        let t = engine.table("t").unwrap();
        for (ts, value) in [(1, "v1"), (2, "v2"), (3, "other")] {
            let row = if ts == 3 { "s" } else { "r" };
            t.put(Put::new(row).add_at("f", "q", ts, value)).unwrap();
            engine.flush("t").unwrap();
        }
        // A large newer file holding a marker for the newest version of r.
        t.delete(crate::Delete::new("r").add_column_at("f", "q", 2)).unwrap();
        for i in 0..2_000u32 {
            t.put(Put::new(row(i)).add("f", "v", format!("value-{i}"))).unwrap();
        }
        engine.flush("t").unwrap();
        let value = || t.get(Get::new("r")).unwrap().value(b"f", b"q").map(|v| v.to_vec());
        assert_eq!(value().as_deref(), Some(&b"v1"[..]));
        compact_as_background(&engine);
        assert_eq!(engine.regions("t").unwrap()[0].files, 2, "the three small files merged, the large one left");
        assert_eq!(value().as_deref(), Some(&b"v1"[..]));
    }

    /// A run of every file does not apply the full rules while the memstore holds a marker:
    /// the marker may hide a version that the rules would count, and drop the one reads return.
    #[test]
    fn a_run_of_every_file_stays_minor_while_the_memstore_holds_markers() {
        let dir = tempfile::tempdir().unwrap();
        let family = FamilyDescriptor::new("f").max_versions(3).min_versions(1).ttl_secs(1);
        let (engine, clock) = policy_engine(dir.path(), family);
        let t = engine.table("t").unwrap();
        for (ts, value) in [(1_000_100, "v100"), (1_000_200, "v200")] {
            t.put(Put::new("r").add_at("f", "q", ts, value)).unwrap();
            engine.flush("t").unwrap();
        }
        t.put(Put::new("s").add("f", "q", "other")).unwrap();
        engine.flush("t").unwrap();
        t.delete(crate::Delete::new("r").add_column_at("f", "q", 1_000_200)).unwrap();
        clock.set(1_010_000);
        // Both versions expired; min_versions keeps the newest one reads can see.
        let value = || t.get(Get::new("r")).unwrap().value(b"f", b"q").map(|v| v.to_vec());
        assert_eq!(value().as_deref(), Some(&b"v100"[..]));
        compact_as_background(&engine);
        assert_eq!(engine.regions("t").unwrap()[0].files, 1);
        assert_eq!(value().as_deref(), Some(&b"v100"[..]));
    }

    /// Split daughters compacting their shared file on two workers: the upper one writes the
    /// catalog, the lower one swaps its output in (in memory only: its catalog write waits for
    /// `ddl`), then the upper one deletes its inputs. The manifest on disk still lists the
    /// shared file for the lower daughter, so the file must stay until the lower daughter's
    /// catalog write.
    #[test]
    fn a_compaction_deletes_no_file_the_manifest_on_disk_lists() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), options()).unwrap();
        create(&engine, "t", 0..200);
        engine.flush("t").unwrap();
        assert_eq!(engine.split("t", Some(row(100).as_bytes())).unwrap(), 1);
        let inner = &engine.inner;
        let regions = inner.table_state("t").unwrap().regions();
        let (lower, upper) = (&regions[0], &regions[1]);
        assert!(lower.has_shared_files() && upper.has_shared_files());

        // The steps of `run_task`'s compaction, interleaved as two workers can run them.
        let now = inner.opts.clock.now_ms();
        let upper_inputs = upper.compact(&inner.file_context(), CompactionScope::All, now).unwrap().replaced;
        let ddl = inner.manifest.lock();
        inner.persist(&ddl).unwrap();
        let lower_inputs = lower.compact(&inner.file_context(), CompactionScope::All, now).unwrap().replaced;
        inner.delete_files(&ddl, upper_inputs.into_iter());
        drop(ddl);
        {
            let copy = crash_copy(dir.path());
            let recovered = Engine::open(copy.path(), options()).unwrap();
            assert_rows(&recovered, "t", 0..200);
        }
        assert!(lower_inputs.iter().all(|f| f.path().exists()), "a file the manifest lists was deleted");

        // The lower daughter's catalog write; now nothing lists the shared file.
        let ddl = inner.manifest.lock();
        inner.persist(&ddl).unwrap();
        inner.delete_files(&ddl, lower_inputs.iter().cloned());
        drop(ddl);
        assert!(lower_inputs.iter().all(|f| !f.path().exists()), "a replaced file was left behind");
        let copy = crash_copy(dir.path());
        let recovered = Engine::open(copy.path(), options()).unwrap();
        assert_rows(&recovered, "t", 0..200);
    }

    /// `Engine::flush` of one table (flush, catalog write, log trim) while a background flush
    /// of another table swaps its file in between the catalog write and the trim, its own
    /// catalog write waiting for `ddl`: the log must keep that table's rows, which neither a
    /// memstore nor the manifest on disk holds any more.
    #[test]
    fn the_log_keeps_rows_whose_flush_the_manifest_does_not_list_yet() {
        let dir = tempfile::tempdir().unwrap();
        let opts = options().wal_segment_bytes(4096);
        let engine = Engine::open(dir.path(), opts.clone()).unwrap();
        let x = create(&engine, "x", 0..200);
        let y = create(&engine, "y", 0..10);
        assert!(engine.wal_segments() > 2);

        let inner = &engine.inner;
        let ddl = inner.manifest.lock();
        inner.flush_region("y", &y).unwrap();
        inner.persist(&ddl).unwrap();
        inner.flush_region("x", &x).unwrap();
        inner.trim_wal(&ddl).unwrap();
        drop(ddl);
        {
            let copy = crash_copy(dir.path());
            let recovered = Engine::open(copy.path(), opts.clone()).unwrap();
            assert_rows(&recovered, "x", 0..200);
            assert_rows(&recovered, "y", 0..10);
        }

        // The background flush's catalog write and trim: now the log can go.
        let ddl = inner.manifest.lock();
        inner.persist(&ddl).unwrap();
        inner.trim_wal(&ddl).unwrap();
        drop(ddl);
        assert_eq!(engine.wal_segments(), 1);
        let copy = crash_copy(dir.path());
        let recovered = Engine::open(copy.path(), opts).unwrap();
        assert_rows(&recovered, "x", 0..200);
        assert_rows(&recovered, "y", 0..10);
    }

    /// A flush of a region goes ahead while a compaction of the same region runs: writes
    /// waiting on memory wait for the flush, not for the compaction.
    #[test]
    fn a_flush_does_not_wait_for_a_compaction_of_its_region() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), options()).unwrap();
        let region = create(&engine, "t", 0..100);
        engine.flush("t").unwrap();
        let t = engine.table("t").unwrap();
        for i in 100..200 {
            t.put(Put::new(row(i)).add("f", "v", format!("value-{i}"))).unwrap();
        }
        // As a running compaction does.
        let compacting = region.compacting.lock();
        let (done, flushed) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| done.send(engine.flush("t")).unwrap());
            let result = flushed.recv_timeout(Duration::from_secs(30)).expect("the flush waited for the compaction");
            result.unwrap();
        });
        assert_eq!(engine.regions("t").unwrap()[0].files, 2);
        drop(compacting);
        engine.compact("t").unwrap();
        assert_eq!(engine.regions("t").unwrap()[0].files, 1);
        assert_rows(&engine, "t", 0..200);
    }

    /// Flushes and compactions of one region running at once, as two background workers run
    /// them, lose no row and keep the region's files in age order (the newest value wins).
    #[test]
    fn flushes_and_compactions_of_one_region_interleave_safely() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), options()).unwrap();
        let region = create(&engine, "t", 0..0);
        let t = engine.table("t").unwrap();
        let inner = &engine.inner;
        let stop = AtomicBool::new(false);
        let compactions = AtomicU64::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let now = inner.opts.clock.now_ms();
                    if !region.compact(&inner.file_context(), CompactionScope::All, now).unwrap().replaced.is_empty() {
                        compactions.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
            for round in 0..30u32 {
                // Every round rewrites the rows before it, so a file out of age order shows.
                for i in 0..(round + 1) * 20 {
                    t.put(Put::new(row(i)).add("f", "v", format!("value-{i}-{round}"))).unwrap();
                }
                inner.flush_region("t", &region).unwrap();
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert!(compactions.load(Ordering::Relaxed) > 0, "some compaction ran beside the flushes");
        for i in 0..600u32 {
            let value = t.get(Get::new(row(i))).unwrap().value(b"f", b"v").map(|v| v.to_vec());
            assert_eq!(value, Some(format!("value-{i}-29").into_bytes()), "{}", row(i));
        }
    }

    /// Writes to two regions until all memstores together pass 5/8 of a 4 MiB budget (no
    /// region near its own flush size), `every` of them to the upper one, and returns the file
    /// count of each region once the background is idle, after checking every row.
    fn files_after_the_lower_global_limit(every: u32) -> Vec<usize> {
        let dir = tempfile::tempdir().unwrap();
        let opts = EngineOptions::default()
            .memstore_flush_bytes(64 << 20)
            .global_memstore_bytes(4 << 20)
            .auto_compact(false)
            .flush_on_close(false);
        let engine = Engine::open(dir.path(), opts).unwrap();
        let desc = TableDescriptor::new("t").family(FamilyDescriptor::new("f"));
        engine.create_table_with_splits(desc, vec![Bytes::from_static(b"m")]).unwrap();
        let t = engine.table("t").unwrap();
        let inner = &engine.inner;
        assert_eq!(inner.writes.lower_global_limit(), (4 << 20) / 8 * 5);
        let value = vec![7u8; 1000];
        let prefix = |i: u32| if i % every == every - 1 { "x" } else { "b" };
        let mut i = 0u32;
        while inner.writes.memory().held() <= inner.writes.lower_global_limit() {
            t.put(Put::new(format!("{}{i:06}", prefix(i))).add("f", "v", value.clone())).unwrap();
            i += 1;
        }
        assert!(inner.writes.memory().held() <= inner.opts.global_memstore_bytes, "no write reached the limit");
        assert!(engine.wait_idle(Duration::from_secs(30)));
        for j in 0..i {
            assert!(!t.get(Get::new(format!("{}{j:06}", prefix(j)))).unwrap().is_empty());
        }
        engine.regions("t").unwrap().iter().map(|r| r.files).collect()
    }

    /// Past 5/8 of the global budget, a write has a flush run, though no region reached its
    /// own flush size: of every region at once while their memstores are of a size.
    #[test]
    fn writes_past_the_lower_global_limit_flush_every_region() {
        assert_eq!(files_after_the_lower_global_limit(4), vec![1, 1]);
    }

    /// A region holding a sliver of the memstores would write a tiny file: the largest region
    /// is flushed alone.
    #[test]
    fn a_sliver_of_a_memstore_is_left_out_and_the_largest_region_flushed_alone() {
        assert_eq!(files_after_the_lower_global_limit(40), vec![1, 0]);
    }
}
