//! The engine: opens a data directory, recovers it, owns the tables, the write-ahead log and
//! the block cache, and runs flushes and compactions.
//!
//! Directory layout: `MANIFEST` (the catalog), `LOCK` (held while open), `wal/` (log
//! segments), `sst/` (every SSTable, named by a unique id).

mod options;
mod recovery;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use crate::background::{Background, Lifeline, Task, TaskKind};
use crate::cache::{BlockCache, CacheStats};
use crate::catalog::{CatalogState, FileEntry, RegionEntry, TableEntry};
use crate::compaction::CompactionPolicy;
use crate::descriptor::{FamilyDescriptor, TableDescriptor};
use crate::fs::sync_dir;
use crate::memstore::MemAccount;
use crate::region::{CompactionScope, FileContext, FrozenFiles, Region};
use crate::split::check_split_keys;
use crate::split_policy::SplitPolicy;
use crate::sst::SstReader;
use crate::table::{Table, TableState};
use crate::wal::Wal;
use crate::{Error, Result};

pub use options::EngineOptions;

/// A split flushes a region again before it stops the region's writes while the region holds
/// more than this.
const SMALL_FLUSH_BYTES: usize = 4 * 1024 * 1024;

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

/// Why a write to a region would have to wait.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pressure {
    /// Its memstores hold more than their blocking size.
    pub region_full: bool,
    /// A family holds more files than `blocking_files`.
    pub too_many_files: bool,
    /// All memstores together are over the global budget.
    pub global_full: bool,
}

pub(crate) struct EngineInner {
    pub dir: PathBuf,
    pub sst_dir: PathBuf,
    pub opts: EngineOptions,
    pub wal: Arc<Wal>,
    pub cache: Arc<BlockCache>,
    pub tables: RwLock<BTreeMap<String, Arc<TableState>>>,
    /// Serializes schema changes and catalog writes.
    ddl: Mutex<()>,
    /// Writers hold it shared from log append to memstore insert; log trimming holds it
    /// exclusively while deciding which segments are flushed.
    pub apply_gate: RwLock<()>,
    pub next_file_id: AtomicU64,
    next_region_id: AtomicU64,
    /// What the manifest on disk lists; see [`Durable`].
    durable: Mutex<Durable>,
    /// The memstores' memory: the bytes they hold (the global memstore budget's meter) and
    /// the pool of chunks flushed ones left.
    pub memstore_memory: Arc<MemAccount>,
    /// A flush was asked for because memstores passed the lower global limit, and none has
    /// finished since.
    early_flush_requested: AtomicBool,
    pub background: Arc<Background>,
    _lock: Box<dyn std::any::Any + Send + Sync>,
}

/// A flush of every region is declined when a region holding data holds less than this
/// fraction of the largest memstore: it would write a tiny file. Regions are then flushed one
/// at a time, and their catalog writes sync the log.
const ATOMIC_FLUSH_SPREAD: usize = 16;

/// Longest a flush of every region waits for a catalog write or a split to finish before it
/// flushes one region instead.
const ATOMIC_FLUSH_DDL_WAIT: Duration = Duration::from_millis(250);

/// Who asks for [`EngineInner::flush_every_region`].
#[derive(Clone, Copy)]
enum FlushAsk<'a> {
    /// The background, for memory or the log: only while a flush is due, and only when the
    /// memstores holding data are of a size.
    Background,
    /// [`Engine::flush`] of this table: only when no other table's region holds data.
    Table(&'a str),
}

/// What [`EngineInner::flush_every_region`] did.
enum EveryRegion {
    /// Every region was frozen at one sequence number and written; these are the regions.
    Flushed(Vec<(String, Arc<Region>)>),
    /// No flush is due any more.
    NotDue,
    /// Flush one region instead.
    Declined,
}

/// What the manifest on disk lists: its files and each region's flushed sequence number.
///
/// Flushes and compactions change a region's files in memory before they take `ddl` to write
/// the catalog, so the in-memory state runs ahead of the manifest: it may already have
/// dropped a compaction's inputs, or moved a flush's rows from the memstore to a file the
/// manifest does not name yet. Whatever a crash would recover from must stay until a manifest
/// that no longer needs it is durable: a file is deleted only when neither a region nor the
/// manifest lists it, and a log segment only when the manifest's flushed sequence numbers
/// cover its edits. Updated by every catalog write; read under `ddl`.
#[derive(Default)]
struct Durable {
    /// Files a manifest that may be on disk lists: none of them may be deleted.
    files: HashSet<u64>,
    /// Files every manifest that may be on disk lists: the log may go once rows are in them.
    listed: HashSet<u64>,
    /// Region id to the flushed sequence number the manifest records for it.
    flushed: HashMap<u64, u64>,
}

impl Durable {
    fn of(catalog: &CatalogState) -> Durable {
        let regions = || catalog.tables.iter().flat_map(|t| &t.regions);
        let files: HashSet<u64> = regions().flat_map(|r| r.files.iter().map(|f| f.id)).collect();
        Durable { listed: files.clone(), files, flushed: regions().map(|r| (r.id, r.flushed_seq)).collect() }
    }

    /// After a failed catalog write, either manifest may be the one on disk: keep the files
    /// of both, count as listed only those both list, and keep the older flushed sequence
    /// numbers.
    fn merge(&mut self, other: Durable) {
        self.files.extend(other.files);
        self.listed.retain(|f| other.listed.contains(f));
        for (region, seq) in other.flushed {
            self.flushed.entry(region).and_modify(|s| *s = (*s).min(seq)).or_insert(seq);
        }
    }
}

impl Drop for EngineInner {
    fn drop(&mut self) {
        // Best effort: buffered AsyncWal records reach the OS on a clean close.
        let _ = self.wal.flush_buffer();
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
    pub(crate) life: Arc<Lifeline>,
    pub(crate) inner: Arc<EngineInner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("dir", &self.inner.dir).finish()
    }
}

impl Engine {
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
        let _ddl = self.inner.ddl.lock();
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
        self.inner.persist_locked().inspect_err(|_| {
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
        let _ddl = self.inner.ddl.lock();
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
        self.inner.persist_locked()
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
        let _ddl = self.inner.ddl.lock();
        let state = self.inner.table_state(table)?;
        state.set_enabled(enabled);
        // Disabling flushes, as HBase does, so a disabled table holds no unflushed data.
        let to_flush = if enabled { Vec::new() } else { state.regions() };
        self.inner.flush_regions_locked(to_flush)
    }

    /// Deletes a disabled table and its files. [`Table`] handles still held for it fail every
    /// operation, and keep the open files' memory (indexes, blooms) until they are dropped.
    ///
    /// # Errors
    /// [`Error::TableNotFound`], [`Error::TableEnabled`] if it was not disabled first.
    pub fn drop_table(&self, table: &str) -> Result<()> {
        let _ddl = self.inner.ddl.lock();
        let state = self.inner.table_state(table)?;
        if state.is_enabled() {
            return Err(Error::TableEnabled(table.to_string()));
        }
        self.inner.tables.write().remove(table);
        state.mark_dropped();
        self.inner.persist_locked()?;
        for r in state.regions() {
            self.inner.delete_files(r.stores().families.iter().flat_map(|s| s.files.iter().cloned()));
        }
        Ok(())
    }

    /// Removes every row of a table, keeping its schema.
    ///
    /// # Errors
    /// [`Error::TableNotFound`].
    pub fn truncate_table(&self, table: &str) -> Result<()> {
        let _ddl = self.inner.ddl.lock();
        let state = self.inner.table_state(table)?;
        let desc = state.descriptor();
        let fresh = self.inner.new_region(&desc, Bytes::new(), Bytes::new());
        let old = state.replace_regions(vec![fresh]);
        self.inner.persist_locked()?;
        for r in old {
            self.inner.delete_files(r.stores().families.iter().flat_map(|s| s.files.iter().cloned()));
        }
        self.inner.trim_wal()
    }

    /// A handle for reading and writing `table`.
    ///
    /// # Errors
    /// [`Error::TableNotFound`].
    pub fn table(&self, table: &str) -> Result<Table> {
        let state = self.inner.table_state(table)?;
        Ok(Table::new(self.life.clone(), self.inner.clone(), state))
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
            let _ddl = self.inner.ddl.lock();
            self.inner.persist_locked()?;
            self.inner.trim_wal()?;
        } else {
            let _ddl = self.inner.ddl.lock();
            self.inner.flush_regions_locked(state.regions())?;
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
        let _ddl = self.inner.ddl.lock();
        let now = self.inner.opts.clock.now_ms();
        let mut replaced = Vec::new();
        for r in state.regions() {
            if major {
                self.inner.flush_region(&r)?;
            }
            let scope = if major { CompactionScope::Major } else { CompactionScope::All };
            replaced.extend(r.compact(&self.inner.file_context(), scope, now)?);
        }
        self.inner.persist_locked()?;
        self.inner.delete_files(replaced.into_iter());
        self.inner.trim_wal()
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
        let _ddl = self.inner.ddl.lock();
        let targets = match at {
            Some(row) => state.region_for(row).into_iter().collect(),
            None => state.regions(),
        };
        let mut splits = 0;
        for region in targets {
            let at = at.map(Bytes::copy_from_slice);
            splits += usize::from(self.inner.split_region(&state, &region, at)?);
        }
        self.inner.trim_wal()?;
        Ok(splits)
    }

    /// Per-region sizes and request counts, in key order.
    ///
    /// # Errors
    /// [`Error::TableNotFound`].
    pub fn regions(&self, table: &str) -> Result<Vec<RegionInfo>> {
        let state = self.inner.table_state(table)?;
        Ok(state
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
            .collect())
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
        self.inner.wal.failure()
    }

    /// Number of write-ahead log segment files.
    pub fn wal_segments(&self) -> usize {
        self.inner.wal.segment_count()
    }
}

impl EngineInner {
    pub fn table_state(&self, name: &str) -> Result<Arc<TableState>> {
        self.tables.read().get(name).cloned().ok_or_else(|| Error::TableNotFound(name.to_string()))
    }

    fn new_region(&self, desc: &TableDescriptor, start: Bytes, end: Bytes) -> Arc<Region> {
        let id = self.next_region_id.fetch_add(1, Ordering::Relaxed);
        let region =
            Region::new(id, (start, end), &desc.families, Vec::new(), self.wal.last_seq(), &self.memstore_memory);
        region.publish(self.wal.last_seq());
        Arc::new(region)
    }

    pub fn file_context(&self) -> FileContext<'_> {
        FileContext { fs: &*self.opts.fs, sst_dir: &self.sst_dir, cache: &self.cache, next_file_id: &self.next_file_id }
    }

    /// Flushes one region (catalog not persisted).
    pub fn flush_region(&self, region: &Region) -> Result<bool> {
        let flushed = self.wal.flush_buffer().and_then(|()| region.flush(&self.file_context()));
        if flushed.is_err() {
            // Whatever it froze stays frozen, and counts toward the next write's ask.
            region.forget_flush_ask();
        }
        flushed
    }

    /// Flushes every region and persists the catalog (the clean-close path).
    pub fn flush_all(&self) -> Result<()> {
        let _ddl = self.ddl.lock();
        let regions: Vec<Arc<Region>> = self.tables.read().values().flat_map(|t| t.regions()).collect();
        self.flush_regions_locked(regions)
    }

    /// Flushes `regions`, persists the catalog and trims the log; the caller holds `ddl`.
    fn flush_regions_locked(&self, regions: impl IntoIterator<Item = Arc<Region>>) -> Result<()> {
        for r in regions {
            self.flush_region(&r)?;
        }
        self.persist_locked()?;
        self.trim_wal()
    }

    /// Requests the background work a write makes due: a flush of a region past its memstore
    /// threshold; once all memstores together pass the lower global limit, a flush of the
    /// region with the most to flush (so writes seldom reach the global limit and wait); and
    /// flushes of every region holding data when the log has too many segments.
    pub fn after_write(&self, table: &str, region: &Region) {
        // Once per memstore, and not while the region flushes: the memstore that flush writes
        // out counts no more.
        if region.flushable_memstore_size().is_some_and(|size| size > self.opts.memstore_flush_bytes)
            && region.ask_flush()
        {
            self.request(table, region, TaskKind::Flush);
        }
        if self.memstore_memory.held() > self.lower_global_limit()
            && !self.early_flush_requested.load(Ordering::Acquire)
            && !self.early_flush_requested.swap(true, Ordering::AcqRel)
        {
            // One region at a time, until a flush finishes: every write past the limit would
            // otherwise look through every region. Not a small one: past the limit mostly by
            // flushes under way, memory comes back when they end.
            self.flush_largest_regions(1, self.opts.global_memstore_bytes / 16);
        }
        if self.wal.segment_count() > self.opts.max_wal_segments {
            for (name, t) in self.tables.read().iter() {
                for r in t.regions().iter().filter(|r| r.has_unflushed()) {
                    self.request(name, r, TaskKind::Flush);
                }
            }
        }
    }

    /// Back-pressure before a write: waits while the region's memstores or file counts, or
    /// all memstores together, exceed their limits, asking the workers for the relief.
    ///
    /// # Errors
    /// [`Error::RegionTooBusy`] after `write_stall_timeout`; nothing was written.
    pub fn throttle(&self, table: &str, region: &Region) -> Result<()> {
        let o = &self.opts;
        // Read the clock only once a write has to wait: this runs on every write.
        let mut stalled_since: Option<Instant> = None;
        loop {
            let Some(pressure) = self.pressed(region) else {
                return Ok(());
            };
            if pressure.region_full {
                self.request(table, region, TaskKind::Flush);
            }
            if pressure.too_many_files {
                self.request(table, region, TaskKind::Compact);
            }
            if pressure.global_full {
                self.flush_largest_regions(4, 0);
            }
            let started = *stalled_since.get_or_insert_with(Instant::now);
            if started.elapsed() > o.write_stall_timeout {
                let waited_ms = started.elapsed().as_millis() as u64;
                // What the wait was for, if it keeps failing: a full disk, an I/O error.
                let flush_failure = || self.background.failure(TaskKind::Flush);
                let compaction_failure = || self.background.failure(TaskKind::Compact);
                let cause = if pressure.too_many_files {
                    compaction_failure().or_else(flush_failure)
                } else {
                    flush_failure().or_else(compaction_failure)
                };
                let cause = cause.or_else(|| self.background.catalog_failure());
                return Err(Error::RegionTooBusy { region: region.id, waited_ms, cause });
            }
            self.background.wait_for_progress(Duration::from_millis(50));
        }
    }

    /// What would make a write to `region` wait; `None` if nothing would.
    pub fn pressed(&self, region: &Region) -> Option<Pressure> {
        let o = &self.opts;
        let (memstore, files) = region.pressure();
        let pressure = Pressure {
            region_full: memstore > o.memstore_flush_bytes.saturating_mul(o.memstore_block_multiplier),
            too_many_files: files > o.blocking_files,
            global_full: self.memstore_memory.held() > o.global_memstore_bytes,
        };
        let pressed = pressure.region_full || pressure.too_many_files || pressure.global_full;
        (pressed && !region.is_retired()).then_some(pressure)
    }

    /// All memstores together past this many bytes have the largest flushed early, before
    /// writes reach `global_memstore_bytes` and wait (HBase's lower limit). The frozen
    /// memstore counts until its flush ends, so the writes arriving meanwhile get the rest:
    /// at 5/8, 3/8 of the budget. At 7/8 a steady writer outran the flush on a disk slower
    /// than the encoder and waited about a second per million YCSB records.
    fn lower_global_limit(&self) -> usize {
        self.opts.global_memstore_bytes / 8 * 5
    }

    /// Asks for flushes of the `n` regions with the most to flush, each holding something and
    /// at least `min` bytes.
    /// Regions with a flush under way are passed over: theirs frees memory when it ends, and
    /// another would write out only the little that arrived since.
    fn flush_largest_regions(&self, n: usize, min: usize) {
        let mut sizes: Vec<(usize, String, Arc<Region>)> = Vec::new();
        for (name, t) in self.tables.read().iter() {
            for r in t.regions() {
                if let Some(size) = r.flushable_memstore_size().filter(|&size| size > 0 && size >= min) {
                    sizes.push((size, name.clone(), r));
                }
            }
        }
        sizes.sort_by_key(|s| std::cmp::Reverse(s.0));
        for (_, name, r) in sizes.into_iter().take(n) {
            self.request(&name, &r, TaskKind::Flush);
        }
    }

    fn request(&self, table: &str, region: &Region, kind: TaskKind) {
        self.background.request(Task { table: table.to_string(), region: region.id, kind });
    }

    /// The size at which a table's regions split: early while the table has one region (so
    /// load spreads soon), then the table's `max_region_size` — HBase's stepping policy.
    fn split_threshold(&self, state: &TableState) -> u64 {
        let max = state.descriptor().max_region_size;
        if state.regions().len() == 1 {
            max.min(2 * self.opts.memstore_flush_bytes as u64)
        } else {
            max
        }
    }

    /// Requests what a region needs after a flush, compaction or open: compaction when a
    /// family has files shared after a split or a run of files the policy would merge, a split
    /// when it is too big.
    pub fn request_follow_ups(&self, table: &str, state: &TableState, region: &Region) {
        if !self.opts.auto_compact {
            return;
        }
        let shared = region.has_shared_files();
        if shared || region.wants_compaction(&self.compaction_policy()) {
            self.request(table, region, TaskKind::Compact);
        }
        if !shared && region.file_size() > self.split_threshold(state) {
            self.request(table, region, TaskKind::Split);
        }
    }

    /// How background compactions pick their files.
    fn compaction_policy(&self) -> CompactionPolicy {
        let o = &self.opts;
        CompactionPolicy {
            min_files: o.compaction_threshold,
            max_files: o.compaction_max_files,
            ratio: o.compaction_ratio,
            stuck_files: o.blocking_files,
            // With `auto_compact` off the background compacts only stores that writes wait
            // for, and such a compaction stays minor.
            major_when_every_file: o.auto_compact,
        }
    }

    /// Runs one background task. Regions split or dropped meanwhile are skipped.
    pub fn run_task(&self, task: &Task) -> Result<()> {
        let done = self.run_task_once(task);
        if task.kind == TaskKind::Flush {
            // Memory may be back below the lower limit; if not, the next write asks again.
            self.early_flush_requested.store(false, Ordering::Release);
        }
        done
    }

    fn run_task_once(&self, task: &Task) -> Result<()> {
        let Ok(state) = self.table_state(&task.table) else { return Ok(()) };
        let Some(region) = state.regions().into_iter().find(|r| r.id == task.region) else { return Ok(()) };
        match task.kind {
            // The catalog write follows on the catalog thread (see `background`).
            TaskKind::Flush => {
                match self.flush_every_region(FlushAsk::Background)? {
                    EveryRegion::Flushed(flushed) => {
                        self.background.request_catalog(self, Vec::new())?;
                        for (table, r) in flushed {
                            if let Ok(state) = self.table_state(&table) {
                                self.request_follow_ups(&table, &state, &r);
                            }
                        }
                        return Ok(());
                    }
                    EveryRegion::NotDue => return Ok(()),
                    EveryRegion::Declined => {}
                }
                if self.flush_region(&region)? {
                    self.background.request_catalog(self, Vec::new())?;
                }
            }
            TaskKind::Compact => {
                let now = self.opts.clock.now_ms();
                let replaced =
                    region.compact(&self.file_context(), CompactionScope::Selected(&self.compaction_policy()), now)?;
                if !replaced.is_empty() {
                    self.background.request_catalog(self, replaced)?;
                }
            }
            TaskKind::Split => {
                let _ddl = self.ddl.lock();
                if region.has_shared_files() || !self.split_region(&state, &region, None)? {
                    return Ok(());
                }
                self.trim_wal()?;
                // The daughters share the parent's files: have them rewrite their halves.
                for r in state.regions().iter().filter(|r| self.opts.auto_compact && r.has_shared_files()) {
                    self.request(&task.table, r, TaskKind::Compact);
                }
                return Ok(());
            }
        }
        self.request_follow_ups(&task.table, &state, &region);
        Ok(())
    }

    /// A flush of every region at one sequence number, as RocksDB's atomic flush does across
    /// column families, for the background: every region's files then hold exactly the
    /// writes up to that number, so the catalog write after it syncs no log (see
    /// [`EngineInner::persist_locked`]). The log rolls at that number too, and once the
    /// catalog names the flush's files, the segment the roll closed is deleted without ever
    /// being synced: rows that never wait in a memstore for long are not written to the disk
    /// twice.
    ///
    /// Declined, for a flush of one region instead, when a catalog write or a split holds
    /// `ddl` for long (for the background), when another table holds data (for
    /// [`Engine::flush`]), when a failed flush left memstores frozen
    /// (their writes are older) or when a region holds less than 1/[`ATOMIC_FLUSH_SPREAD`] of
    /// the largest memstore (it would write a tiny file). Not due when no memstore and no log
    /// limit asks for a flush any more: another flush ran since this one was asked for.
    fn flush_every_region(&self, asked: FlushAsk<'_>) -> Result<EveryRegion> {
        // A catalog write holds `ddl`: one that hangs on a sick disk must not hold up the
        // flushes writers wait for.
        let ddl = match asked {
            FlushAsk::Background => self.ddl.try_lock_for(ATOMIC_FLUSH_DDL_WAIT),
            FlushAsk::Table(_) => Some(self.ddl.lock()),
        };
        let Some(ddl) = ddl else {
            return Ok(EveryRegion::Declined);
        };
        let mut regions: Vec<(String, Arc<Region>)> = Vec::new();
        for (name, t) in self.tables.read().iter() {
            regions.extend(t.regions().into_iter().map(|r| (name.clone(), r)));
        }
        // Taken in one order by the only code that holds more than one; `ddl` keeps splits
        // and schema changes (which take a region's maintenance locks after `ddl`) out.
        regions.sort_by_key(|(_, r)| r.id);
        let flushing: Vec<_> = regions.iter().map(|(_, r)| r.flushing.lock()).collect();
        if regions.iter().any(|(_, r)| r.has_frozen()) {
            return Ok(EveryRegion::Declined);
        }
        let sizes: Vec<usize> = regions.iter().map(|(_, r)| r.memstore_size()).collect();
        match asked {
            FlushAsk::Background => {
                let due = sizes.iter().any(|&size| size > self.opts.memstore_flush_bytes)
                    || self.memstore_memory.held() > self.lower_global_limit()
                    || self.wal.segment_count() > self.opts.max_wal_segments;
                if !due {
                    return Ok(EveryRegion::NotDue);
                }
                let largest = sizes.iter().copied().max().unwrap_or(0);
                if sizes.iter().any(|&size| size > 0 && size < largest / ATOMIC_FLUSH_SPREAD) {
                    return Ok(EveryRegion::Declined);
                }
            }
            FlushAsk::Table(table) => {
                if regions.iter().zip(&sizes).any(|((name, _), &size)| name != table && size > 0) {
                    return Ok(EveryRegion::Declined);
                }
            }
        }
        // The roll below must not wait for the previous one's fsync while writers wait.
        self.wal.settle_closed()?;
        let (seq, frozen, rolled) = {
            let _gate = self.apply_gate.write();
            let seq = self.wal.last_seq();
            let frozen: Vec<bool> = regions.iter().map(|(_, r)| r.freeze_at(seq)).collect();
            (seq, frozen, self.wal.roll_for_flush())
        };
        drop(ddl);
        let to_write: Vec<&Arc<Region>> =
            regions.iter().zip(&frozen).filter(|(_, &froze)| froze).map(|((_, r), _)| r).collect();
        let mut written = Ok(());
        let mut files = Vec::new();
        for (r, file) in self.write_frozen_in_lanes(&to_write) {
            match file {
                Ok(f) => files.push((r, f)),
                Err(e) => {
                    // What it froze stays frozen: the next flush of the region retries it.
                    r.forget_flush_ask();
                    written = written.and(Err(e));
                }
            }
        }
        {
            // Installed together under `ddl` (where it can be had soon): a catalog write then
            // finds every region's new files or none, and needs no log sync either way. Never
            // waited for without a bound: this holds `flushing` locks, which come after `ddl`,
            // and the next flush of every region may hold `ddl` waiting for them.
            let _ddl = self.ddl.try_lock_for(ATOMIC_FLUSH_DDL_WAIT);
            for (r, f) in files {
                r.install_frozen(f, seq);
            }
        }
        drop(flushing);
        rolled?;
        written?;
        Ok(EveryRegion::Flushed(regions))
    }

    /// Writes the frozen memstores of `regions` on as many threads as there are background
    /// workers: the writes that arrive meanwhile wait once they fill what the frozen memstores
    /// left of the global budget, so the flush of every region takes about as long as a
    /// flush of one.
    fn write_frozen_in_lanes<'r>(&self, regions: &[&'r Arc<Region>]) -> Vec<(&'r Arc<Region>, Result<FrozenFiles>)> {
        let ctx = self.file_context();
        let lanes = self.opts.background_threads.clamp(1, regions.len().max(1));
        let lane = |i: usize| -> Vec<(&'r Arc<Region>, Result<FrozenFiles>)> {
            regions.iter().skip(i).step_by(lanes).map(|&r| (r, r.write_frozen_files(&ctx))).collect()
        };
        std::thread::scope(|s| {
            // Threads started here inherit the worker's lowered priority.
            let others: Vec<_> = (1..lanes)
                .map(|i| std::thread::Builder::new().name("cellar-flush".into()).spawn_scoped(s, move || lane(i)))
                .collect();
            let mut written = lane(0);
            for (i, other) in others.into_iter().enumerate() {
                match other {
                    Ok(thread) => written.extend(thread.join().unwrap_or_else(|_| {
                        // Their memstores stay frozen, for the next flush to retry.
                        let panicked = || Error::io(&self.sst_dir, std::io::Error::other("a flush thread panicked"));
                        regions.iter().skip(i + 1).step_by(lanes).map(|&r| (r, Err(panicked()))).collect()
                    })),
                    Err(_) => written.extend(lane(i + 1)),
                }
            }
            written
        })
    }

    /// The catalog write background flushes and compactions ask for: persists the catalog,
    /// deletes `replaced` files no manifest on disk lists any more and trims the log.
    pub fn write_catalog(&self, replaced: &[Arc<SstReader>]) -> Result<()> {
        let _ddl = self.ddl.lock();
        self.persist_locked()?;
        self.delete_files(replaced.iter().cloned());
        self.trim_wal()
    }

    /// Writes the catalog; the caller holds `ddl`.
    pub fn persist_locked(&self) -> Result<()> {
        let tables = self.tables.read();
        let mut state = CatalogState {
            tables: Vec::with_capacity(tables.len()),
            next_region_id: self.next_region_id.load(Ordering::Relaxed),
            last_seq: 0,
        };
        for t in tables.values() {
            let regions = t
                .regions()
                .iter()
                .map(|r| {
                    // Files and flushed sequence number from one snapshot.
                    let stores = r.stores();
                    let files = stores
                        .families
                        .iter()
                        .flat_map(|s| s.files.iter().map(|f| FileEntry { family: s.desc.name.clone(), id: f.id() }))
                        .collect();
                    RegionEntry {
                        id: r.id,
                        start: r.start.to_vec(),
                        end: r.end.to_vec(),
                        flushed_seq: stores.flushed_seq,
                        files,
                    }
                })
                .collect();
            state.tables.push(TableEntry { descriptor: t.descriptor(), enabled: t.is_enabled(), regions });
        }
        drop(tables);
        // Recovery must stay a prefix of the writes: a power loss must not keep a listed file's
        // writes while losing earlier writes of another region still only in the log's
        // unsynced tail. When every region's files hold exactly the writes up to one sequence
        // number (after a flush of every region), no region's file runs ahead of another's
        // log, whatever part of the log survives. Otherwise the log is synced first, up to the
        // sequence number read here, after the regions.
        let mut flushed = state.tables.iter().flat_map(|t| &t.regions).map(|r| r.flushed_seq);
        let uniform = flushed.next().is_none_or(|first| flushed.all(|seq| seq == first));
        state.last_seq = self.wal.last_seq();
        if !uniform {
            self.wal.sync_to(state.last_seq)?;
        }
        let listed = Durable::of(&state);
        let stored = state.store(&*self.opts.fs, &self.dir.join("MANIFEST"));
        let mut durable = self.durable.lock();
        match stored {
            Ok(()) => *durable = listed,
            Err(_) => durable.merge(listed),
        }
        stored
    }

    /// Splits one region (the caller holds `ddl`). Returns false if there was no point to
    /// split at.
    pub fn split_region(&self, state: &TableState, region: &Arc<Region>, at: Option<Bytes>) -> Result<bool> {
        let ctx = self.file_context();
        let _m = region.maintenance();
        if region.is_retired() {
            return Ok(false);
        }
        let inside = |at: &Bytes| at > &region.start && (region.end.is_empty() || at < &region.end);
        if at.as_ref().is_some_and(|at| !inside(at)) {
            return Err(Error::invalid("split key", "must lie strictly inside the region"));
        }
        // Flush while writes continue, so the flush under the write lock below is short: again
        // while the writes that arrived during a flush are more than a small flush (HBase
        // flushes before closing a region for the same reason), twice more at most.
        self.wal.flush_buffer()?;
        let mut flushed = region.flush_maintained(&ctx)?;
        for _ in 0..2 {
            if region.memstore_size() <= SMALL_FLUSH_BYTES {
                break;
            }
            flushed |= region.flush_maintained(&ctx)?;
        }
        let policy = state.descriptor().split_policy;
        let at = match at {
            Some(at) if policy == SplitPolicy::MidKey => Some(at),
            // The policy applies to explicit split points too: snapped to a group boundary.
            Some(at) => region.snap(&policy, &at, false)?,
            None => region.split_point(&policy)?,
        };
        let Some(at) = at else {
            // No split, but the flush stands: the catalog must name its file before anyone
            // trims the log that held its rows.
            if flushed {
                self.persist_locked()?;
            }
            return Ok(false);
        };
        // The catalog write under the lock syncs the log too: only what arrives from here on is
        // left for it.
        self.wal.sync_to(self.wal.last_seq())?;
        let _w = region.write_lock.lock();
        region.flush_write_locked(&ctx)?;
        let ids =
            (self.next_region_id.fetch_add(1, Ordering::Relaxed), self.next_region_id.fetch_add(1, Ordering::Relaxed));
        let (lower, upper) = region.daughters(&at, ids);
        let (lower, upper) = (Arc::new(lower), Arc::new(upper));
        // Writers that find a daughter wait until the manifest naming it is durable: their log
        // records carry the daughter's id, which a recovery from an older manifest would skip.
        let _lower_writes = lower.write_lock.lock();
        let _upper_writes = upper.write_lock.lock();
        state.replace_region(region.id, vec![lower.clone(), upper.clone()]);
        region.set_retired(true);
        // One atomic catalog write makes the split happen. If it fails, the parent stays in
        // memory; but the manifest on disk may be either one (a rename or a directory fsync
        // can fail after the fact), and a recovery skips log records of regions its manifest
        // does not name: writes stop until a reopen settles which regions exist.
        if let Err(e) = self.persist_locked() {
            state.replace_region(ids.0, vec![region.clone()]);
            state.remove_region(ids.1);
            lower.set_retired(true);
            upper.set_retired(true);
            region.set_retired(false);
            self.wal.fail(format!("the catalog write of a split of region {} failed: {e}", region.id));
            return Err(e);
        }
        Ok(true)
    }

    /// Deletes log segments whose edits are all in SSTables the manifest lists; the caller
    /// holds `ddl`.
    pub fn trim_wal(&self) -> Result<()> {
        let keep_from = {
            let _gate = self.apply_gate.write();
            let durable = self.durable.lock();
            let mut oldest_unflushed = self.wal.last_seq();
            for t in self.tables.read().values() {
                for r in t.regions() {
                    // One snapshot: a flush swaps its file in and empties its memstore at once.
                    let stores = r.stores();
                    let in_memstore = stores.families.iter().any(|s| !s.active.is_empty() || s.frozen.is_some());
                    let in_unlisted_file =
                        stores.families.iter().flat_map(|s| &s.files).any(|f| !durable.listed.contains(&f.id()));
                    match durable.flushed.get(&r.id) {
                        // A recovery replays this region's log from the manifest's sequence
                        // number: keep it while rows past it are in a memstore, or only in a
                        // file that a flush has not yet written to the catalog.
                        Some(&seq) if in_memstore || in_unlisted_file => {
                            oldest_unflushed = oldest_unflushed.min(seq);
                        }
                        Some(_) => {}
                        None if in_memstore => oldest_unflushed = oldest_unflushed.min(r.flushed_seq()),
                        None => {}
                    }
                }
            }
            oldest_unflushed + 1
        };
        self.wal.remove_segments_below(keep_from)
    }

    /// Deletes replaced files that neither a region (split siblings share files) nor the
    /// manifest on disk lists any more; the caller holds `ddl` and has written the catalog.
    ///
    /// A file kept only because the manifest still lists it was dropped from memory by a
    /// compaction whose catalog write is pending: that compaction deletes it afterwards.
    fn delete_files(&self, files: impl Iterator<Item = Arc<SstReader>>) {
        let mut live: HashSet<u64> = self
            .tables
            .read()
            .values()
            .flat_map(|t| t.regions())
            .flat_map(|r| r.stores().families.iter().flat_map(|s| s.files.iter().map(|f| f.id())).collect::<Vec<_>>())
            .collect();
        live.extend(self.durable.lock().files.iter().copied());
        let mut seen = HashSet::new();
        for f in files.filter(|f| !live.contains(&f.id()) && seen.insert(f.id())) {
            self.cache.evict_file(f.id());
            // A failed removal leaves an orphan that the next open deletes.
            let _ = self.opts.fs.remove(f.path());
        }
        let _ = sync_dir(&*self.opts.fs, &self.sst_dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Get, Put};

    fn options() -> EngineOptions {
        EngineOptions { auto_compact: false, flush_on_close: false, ..EngineOptions::default() }
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
        let opts = EngineOptions { compaction_threshold: 3, clock: clock.clone(), ..options() };
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
        assert!(!region.compact(&inner.file_context(), CompactionScope::Selected(&policy), now).unwrap().is_empty());
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
        let upper_inputs = upper.compact(&inner.file_context(), CompactionScope::All, now).unwrap();
        let ddl = inner.ddl.lock();
        inner.persist_locked().unwrap();
        let lower_inputs = lower.compact(&inner.file_context(), CompactionScope::All, now).unwrap();
        inner.delete_files(upper_inputs.into_iter());
        drop(ddl);
        {
            let copy = crash_copy(dir.path());
            let recovered = Engine::open(copy.path(), options()).unwrap();
            assert_rows(&recovered, "t", 0..200);
        }
        assert!(lower_inputs.iter().all(|f| f.path().exists()), "a file the manifest lists was deleted");

        // The lower daughter's catalog write; now nothing lists the shared file.
        let ddl = inner.ddl.lock();
        inner.persist_locked().unwrap();
        inner.delete_files(lower_inputs.iter().cloned());
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
        let opts = EngineOptions { wal_segment_bytes: 4096, ..options() };
        let engine = Engine::open(dir.path(), opts.clone()).unwrap();
        let x = create(&engine, "x", 0..200);
        let y = create(&engine, "y", 0..10);
        assert!(engine.wal_segments() > 2);

        let inner = &engine.inner;
        let ddl = inner.ddl.lock();
        inner.flush_region(&y).unwrap();
        inner.persist_locked().unwrap();
        inner.flush_region(&x).unwrap();
        inner.trim_wal().unwrap();
        drop(ddl);
        {
            let copy = crash_copy(dir.path());
            let recovered = Engine::open(copy.path(), opts.clone()).unwrap();
            assert_rows(&recovered, "x", 0..200);
            assert_rows(&recovered, "y", 0..10);
        }

        // The background flush's catalog write and trim: now the log can go.
        let ddl = inner.ddl.lock();
        inner.persist_locked().unwrap();
        inner.trim_wal().unwrap();
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
                    if !region.compact(&inner.file_context(), CompactionScope::All, now).unwrap().is_empty() {
                        compactions.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
            for round in 0..30u32 {
                // Every round rewrites the rows before it, so a file out of age order shows.
                for i in 0..(round + 1) * 20 {
                    t.put(Put::new(row(i)).add("f", "v", format!("value-{i}-{round}"))).unwrap();
                }
                inner.flush_region(&region).unwrap();
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
        let opts = EngineOptions {
            memstore_flush_bytes: 64 << 20,
            global_memstore_bytes: 4 << 20,
            auto_compact: false,
            flush_on_close: false,
            ..EngineOptions::default()
        };
        let engine = Engine::open(dir.path(), opts).unwrap();
        let desc = TableDescriptor::new("t").family(FamilyDescriptor::new("f"));
        engine.create_table_with_splits(desc, vec![Bytes::from_static(b"m")]).unwrap();
        let t = engine.table("t").unwrap();
        let inner = &engine.inner;
        assert_eq!(inner.lower_global_limit(), (4 << 20) / 8 * 5);
        let value = vec![7u8; 1000];
        let prefix = |i: u32| if i % every == every - 1 { "x" } else { "b" };
        let mut i = 0u32;
        while inner.memstore_memory.held() <= inner.lower_global_limit() {
            t.put(Put::new(format!("{}{i:06}", prefix(i))).add("f", "v", value.clone())).unwrap();
            i += 1;
        }
        assert!(inner.memstore_memory.held() <= inner.opts.global_memstore_bytes, "no write reached the limit");
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
