//! Maintenance: the background's tasks (flushes, compactions, splits) and the compaction
//! policy they follow, the flush of every region at one sequence number, and splits. The
//! background reaches it through [`Maintainer`], which the engine implements here.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::manifest::DdlGuard;
use super::EngineInner;
use crate::background::{Maintainer, Task, TaskKind};
use crate::compaction::CompactionPolicy;
use crate::observe::{CompactionEvent, FlushEvent};
use crate::region::{CompactionScope, Flushed, FrozenFiles, Region};
use crate::split_policy::SplitPolicy;
use crate::sst::SstReader;
use crate::tables::TableState;
use crate::{Error, Result};

/// A split flushes a region again before it stops the region's writes while the region holds
/// more than this.
const SMALL_FLUSH_BYTES: usize = 4 * 1024 * 1024;

/// A flush of every region is declined when a region holding data holds less than this
/// fraction of the largest memstore: it would write a tiny file. Regions are then flushed one
/// at a time, and their catalog writes sync the log.
const ATOMIC_FLUSH_SPREAD: usize = 16;

/// Longest a flush of every region waits for a catalog write or a split to finish before it
/// flushes one region instead.
const ATOMIC_FLUSH_DDL_WAIT: Duration = Duration::from_millis(250);

/// Who asks for [`EngineInner::flush_every_region`].
#[derive(Clone, Copy)]
pub(crate) enum FlushAsk<'a> {
    /// The background, for memory or the log: only while a flush is due, and only when the
    /// memstores holding data are of a size.
    Background,
    /// [`Engine::flush`] of this table: only when no other table's region holds data.
    Table(&'a str),
}

/// What [`EngineInner::flush_every_region`] did.
pub(crate) enum EveryRegion {
    /// Every region was frozen at one sequence number and written; these are the regions.
    Flushed(Vec<(String, Arc<Region>)>),
    /// No flush is due any more.
    NotDue,
    /// Flush one region instead.
    Declined,
}

impl EngineInner {
    /// Flushes one region of `table` (catalog not persisted).
    pub(crate) fn flush_region(&self, table: &str, region: &Region) -> Result<bool> {
        let started = Instant::now();
        let flushed = self.writes.wal().flush_buffer().and_then(|()| region.flush(&self.file_context()));
        match flushed {
            Ok(Some(flushed)) => {
                self.note_flush(table, region, flushed, started.elapsed());
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => {
                // Whatever it froze stays frozen, and counts toward the next write's ask.
                region.forget_flush_ask();
                Err(e)
            }
        }
    }

    /// Logs and counts a flush of `region` of `table` that began at `started`.
    fn note_flush(&self, table: &str, region: &Region, flushed: Flushed, took: Duration) {
        self.background.counters.flushed(FlushEvent {
            table,
            region: region.id,
            memstore_bytes: flushed.memstore_bytes,
            bytes: flushed.file_bytes,
            files: region.file_count(),
            took,
        });
    }

    /// Compacts one region of `table` (catalog not persisted); returns the files replaced.
    pub(crate) fn compact_region(
        &self,
        table: &str,
        region: &Region,
        scope: CompactionScope<'_>,
        now: u64,
    ) -> Result<Vec<Arc<SstReader>>> {
        let started = Instant::now();
        let compacted = region.compact(&self.file_context(), scope, now)?;
        if !compacted.replaced.is_empty() {
            self.background.counters.compacted(CompactionEvent {
                table,
                region: region.id,
                inputs: compacted.replaced.len(),
                output_bytes: compacted.output_bytes,
                major: compacted.major,
                files: region.file_count(),
                took: started.elapsed(),
            });
        }
        Ok(compacted.replaced)
    }

    /// Flushes every region and persists the catalog (the clean-close path).
    pub(crate) fn flush_all(&self) -> Result<()> {
        let ddl = self.manifest.lock();
        let tables: Vec<(String, Vec<Arc<Region>>)> =
            self.tables.read().iter().map(|(name, t)| (name.clone(), t.regions())).collect();
        for (table, regions) in tables {
            for r in regions {
                self.flush_region(&table, &r)?;
            }
        }
        self.persist(&ddl)?;
        self.trim_wal(&ddl)
    }

    /// Flushes `regions` of `table`, persists the catalog and trims the log.
    pub(crate) fn flush_regions(
        &self,
        ddl: &DdlGuard<'_>,
        table: &str,
        regions: impl IntoIterator<Item = Arc<Region>>,
    ) -> Result<()> {
        for r in regions {
            self.flush_region(table, &r)?;
        }
        self.persist(ddl)?;
        self.trim_wal(ddl)
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
    pub(crate) fn request_follow_ups(&self, table: &str, state: &TableState, region: &Region) {
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
    pub(crate) fn compaction_policy(&self) -> CompactionPolicy {
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
                if self.flush_region(&task.table, &region)? {
                    self.background.request_catalog(self, Vec::new())?;
                }
            }
            TaskKind::Compact => {
                let now = self.opts.clock.now_ms();
                let policy = self.compaction_policy();
                let replaced = self.compact_region(&task.table, &region, CompactionScope::Selected(&policy), now)?;
                if !replaced.is_empty() {
                    self.background.request_catalog(self, replaced)?;
                }
            }
            TaskKind::Split => {
                let ddl = self.manifest.lock();
                if region.has_shared_files() || !self.split_region(&ddl, &state, &region, None)? {
                    return Ok(());
                }
                self.trim_wal(&ddl)?;
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
    /// [`EngineInner::persist`]). The log rolls at that number too, and once the
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
    pub(crate) fn flush_every_region(&self, asked: FlushAsk<'_>) -> Result<EveryRegion> {
        // A catalog write holds `ddl`: one that hangs on a sick disk must not hold up the
        // flushes writers wait for.
        let ddl = match asked {
            FlushAsk::Background => self.manifest.try_lock_for(ATOMIC_FLUSH_DDL_WAIT),
            FlushAsk::Table(_) => Some(self.manifest.lock()),
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
                    || self.writes.memory().held() > self.writes.lower_global_limit()
                    || self.writes.wal().segment_count() > self.opts.max_wal_segments;
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
        let started = Instant::now();
        // The roll below must not wait for the previous one's fsync while writers wait.
        self.writes.wal().settle_closed()?;
        let (seq, frozen, rolled) = {
            let _gate = self.writes.quiesce();
            let seq = self.writes.wal().last_seq();
            let frozen: Vec<bool> = regions.iter().map(|(_, r)| r.freeze_at(seq)).collect();
            (seq, frozen, self.writes.wal().roll_for_flush())
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
        let mut installed = Vec::with_capacity(files.len());
        {
            // Installed together under `ddl` (where it can be had soon): a catalog write then
            // finds every region's new files or none, and needs no log sync either way. Never
            // waited for without a bound: this holds `flushing` locks, which come after `ddl`,
            // and the next flush of every region may hold `ddl` waiting for them.
            let _ddl = self.manifest.try_lock_for(ATOMIC_FLUSH_DDL_WAIT);
            for (r, f) in files {
                installed.push((r, r.install_frozen(f, seq)));
            }
        }
        drop(flushing);
        for (r, flushed) in installed {
            if let Some((table, _)) = regions.iter().find(|(_, other)| other.id == r.id) {
                self.note_flush(table, r, flushed, started.elapsed());
            }
        }
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

    /// Splits one region. Returns false if there was no point to split at.
    pub(crate) fn split_region(
        &self,
        ddl: &DdlGuard<'_>,
        state: &TableState,
        region: &Arc<Region>,
        at: Option<Bytes>,
    ) -> Result<bool> {
        let started = Instant::now();
        let desc = state.shared_descriptor();
        let table = desc.name.as_str();
        let ctx = self.file_context();
        let wal = self.writes.wal();
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
        wal.flush_buffer()?;
        let mut flushed = false;
        for i in 0..3 {
            if i > 0 && region.memstore_size() <= SMALL_FLUSH_BYTES {
                break;
            }
            let flush_started = Instant::now();
            if let Some(f) = region.flush_maintained(&ctx)? {
                self.note_flush(table, region, f, flush_started.elapsed());
                flushed = true;
            }
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
                self.persist(ddl)?;
            }
            return Ok(false);
        };
        // The catalog write under the lock syncs the log too: only what arrives from here on is
        // left for it.
        wal.sync_to(wal.last_seq())?;
        let w = region.write_lock.lock();
        let flush_started = Instant::now();
        // Logged once the locks are released: writers to the region wait meanwhile.
        let last_flush = region.flush_write_locked(&ctx)?.map(|f| (f, flush_started.elapsed()));
        let ids =
            (self.next_region_id.fetch_add(1, Ordering::Relaxed), self.next_region_id.fetch_add(1, Ordering::Relaxed));
        let (lower, upper) = region.daughters(&at, ids);
        let (lower, upper) = (Arc::new(lower), Arc::new(upper));
        // Writers that find a daughter wait until the manifest naming it is durable: their log
        // records carry the daughter's id, which a recovery from an older manifest would skip.
        let lower_writes = lower.write_lock.lock();
        let upper_writes = upper.write_lock.lock();
        state.replace_region(region.id, vec![lower.clone(), upper.clone()]);
        region.set_retired(true);
        // One atomic catalog write makes the split happen. If it fails, the parent stays in
        // memory; but the manifest on disk may be either one (a rename or a directory fsync
        // can fail after the fact), and a recovery skips log records of regions its manifest
        // does not name: writes stop until a reopen settles which regions exist.
        if let Err(e) = self.persist(ddl) {
            state.replace_region(ids.0, vec![region.clone()]);
            state.remove_region(ids.1);
            lower.set_retired(true);
            upper.set_retired(true);
            region.set_retired(false);
            wal.fail(format!("the catalog write of a split of region {} failed: {e}", region.id));
            drop((upper_writes, lower_writes, w));
            if let Some((f, took)) = last_flush {
                self.note_flush(table, region, f, took);
            }
            return Err(e);
        }
        // Writes go on before the events are logged.
        drop((upper_writes, lower_writes, w));
        if let Some((f, took)) = last_flush {
            self.note_flush(table, region, f, took);
        }
        self.background.counters.split(table, region.id, ids, &at, started.elapsed());
        Ok(true)
    }
}

impl Maintainer for EngineInner {
    fn run_task(&self, task: &Task) -> Result<()> {
        let done = self.run_task_once(task);
        if task.kind == TaskKind::Flush {
            // Memory may be back below the lower limit; if not, the next write asks again.
            self.writes.flush_finished();
        }
        done
    }

    fn write_catalog(&self, replaced: &[Arc<SstReader>]) -> Result<()> {
        let ddl = self.manifest.lock();
        self.persist(&ddl)?;
        self.delete_files(&ddl, replaced.iter().cloned());
        self.trim_wal(&ddl)
    }

    fn flush_log_buffer(&self) {
        let _ = self.writes.wal().flush_buffer();
    }

    fn close(&self) {
        if self.opts.flush_on_close {
            // Best effort: whatever is not flushed is still in the log (unless SkipWal).
            let _ = self.flush_all();
        }
    }

    #[cfg(feature = "metrics")]
    fn publish_metrics(&self, after_task: bool) {
        let cadence = if after_task { crate::observe::Cadence::AfterTask } else { crate::observe::Cadence::Idle };
        self.publisher.publish(cadence, || self.stats());
    }
}
