//! The write path: admission of writes (back-pressure before a write, the background work a
//! write makes due after it) and the one commit sequence every write goes through, whether
//! of one region ([`crate::Table`]) or of several ([`crate::MultiTableMutation`]):
//!
//! 1. size check of the log record;
//! 2. the apply gate, shared (log trimming and the flush of every region take it exclusively);
//! 3. log append;
//! 4. memstore apply;
//! 5. publish (MVCC read point);
//!
//! then, after the caller released the regions' write locks ([`WritePath::settle`]):
//!
//! 6. fsync of the log, for `FsyncWal`;
//! 7. the background work the write makes due.
//!
//! The apply gate and log appends live here and nowhere else.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{RwLock, RwLockWriteGuard};

use crate::background::{Background, Task, TaskKind};
use crate::cell::MAX_WRITE_LEN;
use crate::clock::Clock;
use crate::descriptor::Durability;
use crate::memstore::MemAccount;
use crate::observe::StallReasons;
use crate::region::Region;
use crate::tables::Tables;
use crate::wal::{encode_batch, encode_regions, Wal, WalEdit};
use crate::{Error, Result};

/// The limits writes are admitted under (from the engine's options).
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    pub memstore_flush_bytes: usize,
    pub memstore_block_multiplier: usize,
    pub blocking_files: usize,
    pub global_memstore_bytes: usize,
    pub max_wal_segments: usize,
    pub write_stall_timeout: Duration,
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

/// How a commit's edits are framed in the log (the two framings are distinct on disk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// One region's record, published in that region alone.
    OneRegion,
    /// A record of several regions (even of one), published in all of them at once
    /// ([`Region::publish_together`]).
    Regions,
}

/// One region's edits of a commit.
pub(crate) struct RegionEdits<'r, 'e> {
    pub region: &'r Region,
    pub edits: &'r mut [WalEdit<'e>],
}

/// Admission and commit of writes; shared by the engine and every [`crate::Table`] handle.
pub(crate) struct WritePath {
    limits: Limits,
    clock: Arc<dyn Clock>,
    wal: Arc<Wal>,
    /// Writers hold it shared from log append to memstore insert; log trimming and the flush
    /// of every region hold it exclusively ([`WritePath::quiesce`]).
    gate: RwLock<()>,
    /// The memstores' memory: the bytes they hold (the global memstore budget's meter) and
    /// the pool of chunks flushed ones left.
    memory: Arc<MemAccount>,
    /// A flush was asked for because memstores passed the lower global limit, and none has
    /// finished since.
    early_flush_requested: AtomicBool,
    background: Arc<Background>,
    tables: Arc<Tables>,
}

impl WritePath {
    pub fn new(
        limits: Limits,
        clock: Arc<dyn Clock>,
        wal: Arc<Wal>,
        memory: Arc<MemAccount>,
        background: Arc<Background>,
        tables: Arc<Tables>,
    ) -> WritePath {
        WritePath {
            limits,
            clock,
            wal,
            gate: RwLock::new(()),
            memory,
            early_flush_requested: AtomicBool::new(false),
            background,
            tables,
        }
    }

    /// The time writes and reads resolve "now" at.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    pub fn wal(&self) -> &Arc<Wal> {
        &self.wal
    }

    pub fn memory(&self) -> &Arc<MemAccount> {
        &self.memory
    }

    /// Holds every write between its log append and its memstore insert off: what the log
    /// holds up to [`Wal::last_seq`] is then in the memstores too. Lock order: after `ddl` and
    /// the regions' maintenance locks; never while holding a region's write lock.
    pub fn quiesce(&self) -> RwLockWriteGuard<'_, ()> {
        self.gate.write()
    }

    /// Logs, applies and publishes resolved edits of one or more regions as one record, each
    /// region's edits put in memstore order first ([`Region::order_for_apply`]); the caller
    /// holds every region's write lock. `count` is the number of mutations (sequence
    /// numbers) the edits use. Returns the last sequence number used (0: nothing to write).
    pub fn commit(
        &self,
        writes: &mut [RegionEdits<'_, '_>],
        count: u32,
        durability: Durability,
        framing: Framing,
    ) -> Result<u64> {
        if writes.iter().all(|w| w.edits.is_empty()) {
            return Ok(0);
        }
        for w in writes.iter_mut() {
            Region::order_for_apply(w.edits);
        }
        let payload = match (durability, framing) {
            (Durability::SkipWal, _) => Vec::new(),
            (_, Framing::OneRegion) => {
                let [w] = &*writes else {
                    return Err(Error::invalid("mutations", "a one-region record names one region"));
                };
                encode_batch(w.region.id, w.edits)
            }
            (_, Framing::Regions) => {
                let batches: Vec<(u64, &[WalEdit<'_>])> =
                    writes.iter().filter(|w| !w.edits.is_empty()).map(|w| (w.region.id, &w.edits[..])).collect();
                encode_regions(&batches)
            }
        };
        if payload.len() > MAX_WRITE_LEN {
            let reason = format!("one write may carry at most {MAX_WRITE_LEN} bytes");
            return Err(Error::invalid("mutations", reason));
        }
        let _gate = self.gate.read();
        let first = self.wal.append(count, &payload, durability)?;
        for w in writes.iter().filter(|w| !w.edits.is_empty()) {
            w.region.apply(first, w.edits);
        }
        let last = first + u64::from(count.max(1)) - 1;
        match framing {
            Framing::OneRegion => writes.iter().for_each(|w| w.region.publish(last)),
            Framing::Regions => {
                let written: Vec<&Region> = writes.iter().filter(|w| !w.edits.is_empty()).map(|w| w.region).collect();
                Region::publish_together(&written, last);
            }
        }
        Ok(last)
    }

    /// After a commit, with the regions' write locks released: counts each region's
    /// mutations, syncs the log if the write asked for it, and requests the background work
    /// the write makes due. `written` holds (table, region, mutations) of each region written.
    pub fn settle(&self, last_seq: u64, durability: Durability, written: &[(&str, &Region, u64)]) -> Result<()> {
        for (_, region, mutations) in written {
            region.counters.writes.fetch_add(*mutations, Ordering::Relaxed);
        }
        if durability == Durability::FsyncWal && last_seq > 0 {
            self.wal.sync_to(last_seq)?;
        }
        for (table, region, _) in written {
            self.after_write(table, region);
        }
        Ok(())
    }

    /// Requests the background work a write makes due: a flush of a region past its memstore
    /// threshold; once all memstores together pass the lower global limit, a flush of the
    /// region with the most to flush (so writes seldom reach the global limit and wait); and
    /// flushes of every region holding data when the log has too many segments.
    fn after_write(&self, table: &str, region: &Region) {
        // Once per memstore, and not while the region flushes: the memstore that flush writes
        // out counts no more.
        if region.flushable_memstore_size().is_some_and(|size| size > self.limits.memstore_flush_bytes)
            && region.ask_flush()
        {
            self.request(table, region, TaskKind::Flush);
        }
        if self.memory.held() > self.lower_global_limit()
            && !self.early_flush_requested.load(Ordering::Acquire)
            && !self.early_flush_requested.swap(true, Ordering::AcqRel)
        {
            // One region at a time, until a flush finishes: every write past the limit would
            // otherwise look through every region. Not a small one: past the limit mostly by
            // flushes under way, memory comes back when they end.
            self.flush_largest_regions(1, self.limits.global_memstore_bytes / 16);
        }
        if self.wal.segment_count() > self.limits.max_wal_segments {
            for (name, t) in self.tables.read().iter() {
                for r in t.regions().iter().filter(|r| r.has_unflushed()) {
                    self.request(name, r, TaskKind::Flush);
                }
            }
        }
    }

    /// A flush finished: the next write past the lower global limit may ask for another.
    pub fn flush_finished(&self) {
        self.early_flush_requested.store(false, Ordering::Release);
    }

    /// Back-pressure before a write: waits while the region's memstores or file counts, or
    /// all memstores together, exceed their limits, asking the workers for the relief. A write
    /// that waited is logged and counted once it goes through or gives up.
    ///
    /// # Errors
    /// [`Error::RegionTooBusy`] after `write_stall_timeout`; nothing was written.
    pub fn throttle(&self, table: &str, region: &Region) -> Result<()> {
        // Read the clock only once a write has to wait: this runs on every write.
        let mut stalled_since: Option<Instant> = None;
        let mut reasons = StallReasons::default();
        loop {
            let Some(pressure) = self.pressed(region) else {
                if let Some(started) = stalled_since {
                    self.background.counters.write_stalled(table, region.id, reasons, started.elapsed(), None);
                }
                return Ok(());
            };
            reasons.note(pressure.region_full, pressure.too_many_files, pressure.global_full);
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
            if started.elapsed() > self.limits.write_stall_timeout {
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
                let busy = Error::RegionTooBusy { region: region.id, waited_ms, cause };
                self.background.counters.write_stalled(table, region.id, reasons, started.elapsed(), Some(&busy));
                return Err(busy);
            }
            self.background.wait_for_progress(Duration::from_millis(50));
        }
    }

    /// What would make a write to `region` wait; `None` if nothing would.
    pub fn pressed(&self, region: &Region) -> Option<Pressure> {
        let o = &self.limits;
        let (memstore, files) = region.pressure();
        let pressure = Pressure {
            region_full: memstore > o.memstore_flush_bytes.saturating_mul(o.memstore_block_multiplier),
            too_many_files: files > o.blocking_files,
            global_full: self.memory.held() > o.global_memstore_bytes,
        };
        let pressed = pressure.region_full || pressure.too_many_files || pressure.global_full;
        (pressed && !region.is_retired()).then_some(pressure)
    }

    /// All memstores together past this many bytes have the largest flushed early, before
    /// writes reach `global_memstore_bytes` and wait (HBase's lower limit). The frozen
    /// memstore counts until its flush ends, so the writes arriving meanwhile get the rest:
    /// at 5/8, 3/8 of the budget. At 7/8 a steady writer outran the flush on a disk slower
    /// than the encoder and waited about a second per million YCSB records.
    pub fn lower_global_limit(&self) -> usize {
        self.limits.global_memstore_bytes / 8 * 5
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
}
