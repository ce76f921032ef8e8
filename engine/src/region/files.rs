//! How a region's files change: the points a split may cut at, flushes (freeze the active
//! memstores, write them out, install the files) and compactions.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::MutexGuard;

use super::{Compacted, CompactionScope, FileContext, Flushed, FrozenFiles, Region, RegionStores, Store};
use crate::cell::KeyView;
use crate::compaction;
use crate::memstore::Memstore;
use crate::read::cursor::{BoundedCursor, CellCursor, MergeCursor, Source};
use crate::retention::Retention;
use crate::split_policy::SplitPolicy;
use crate::sst::SstReader;
use crate::Result;

impl Region {
    /// Where a split should cut: near the middle of the region's data, strictly inside its
    /// range, moved by `policy` to a group boundary with data on both sides (see
    /// [`SplitPolicy::group_prefix`]). `None` if there is nothing to cut — too little data, or
    /// under a key-prefix policy a region holding a single group.
    pub fn split_point(&self, policy: &SplitPolicy) -> Result<Option<Bytes>> {
        let Some((row, cut)) = self.middle()? else {
            return Ok(None);
        };
        if *policy == SplitPolicy::MidKey {
            return Ok(Some(cut));
        }
        // Snap the middle row itself, not a block-boundary cut `row + [0]` just after it: under
        // a delimiter policy `row` may be a group's first row without the delimiter, and
        // `row\0` would separate it from the group's other rows (`row#…`).
        self.snap(policy, &row, true)
    }

    /// `row` moved to a group boundary by `policy`: its group's first key, or the first key
    /// after its group, whichever first lies strictly inside the region (and, with
    /// `keep_both_halves`, leaves data on both sides). `None` if neither does.
    pub fn snap(&self, policy: &SplitPolicy, row: &[u8], keep_both_halves: bool) -> Result<Option<Bytes>> {
        policy.snap(row, (&self.start, &self.end), |cut| {
            Ok(!keep_both_halves
                || (self.files_hold_rows(&self.start, cut)? && self.files_hold_rows(cut, &self.end)?))
        })
    }

    /// True if some SSTable holds a cell of a row in `[from, to)` (empty `to` = unbounded).
    fn files_hold_rows(&self, from: &[u8], to: &[u8]) -> Result<bool> {
        let stores = self.stores();
        for f in stores.families.iter().flat_map(|s| &s.files) {
            let mut cursor = f.one_pass_cursor();
            cursor.seek(&KeyView::first_of_row(from))?;
            if cursor.key().is_some_and(|k| to.is_empty() || k.row < to) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The region's middle row and the cut the mid-key policy makes there, strictly inside the
    /// range with data on both sides: large regions are cut just after the last row of the
    /// block that halves their bytes (`row + [0]`); regions of a few blocks at their middle row
    /// itself. `None` for fewer than two rows.
    fn middle(&self) -> Result<Option<(Bytes, Bytes)>> {
        let inside = |cut: &Bytes| cut > &self.start && (self.end.is_empty() || cut < &self.end);
        let stores = self.stores();
        let files: Vec<&Arc<SstReader>> = stores.families.iter().flat_map(|s| &s.files).collect();
        let mut blocks: Vec<(Bytes, u64)> =
            files.iter().flat_map(|f| f.blocks_overlapping(&self.start, &self.end)).collect();
        blocks.sort();
        let total: u64 = blocks.iter().map(|(_, n)| n).sum();
        let mut acc = 0;
        for (row, n) in &blocks {
            acc += n;
            if acc * 2 >= total {
                // The block's last row ends the lower half; the cut is just after it.
                let cut = Bytes::from([row.as_ref(), &[0u8]].concat());
                // (A huge last block can hold the middle: then no data lies after the cut.)
                if inside(&cut) && blocks.len() >= 4 && self.files_hold_rows(&cut, &self.end)? {
                    return Ok(Some((row.clone(), cut)));
                }
                break;
            }
        }
        // Few blocks: find the middle row itself (the data is small, so this read is cheap).
        let cursors: Vec<Source<'_>> = files.iter().map(|f| Source::Sst(f.one_pass_cursor())).collect();
        let mut merged = BoundedCursor::new(MergeCursor::new(cursors), self.end.clone());
        merged.seek(&KeyView::first_of_row(&self.start))?;
        let mut rows: Vec<Bytes> = Vec::new();
        while let Some(k) = merged.key() {
            if rows.last().is_none_or(|r| r.as_ref() != k.row) {
                rows.push(Bytes::copy_from_slice(k.row));
            }
            merged.next()?;
        }
        // A single row cannot be cut: one daughter would be empty.
        if rows.len() < 2 {
            return Ok(None);
        }
        Ok(Some(rows.swap_remove(rows.len() / 2)).filter(inside).map(|row| (row.clone(), row)))
    }

    /// Moves non-empty active memstores to `frozen`; the caller holds the write lock, so the
    /// frozen memstores hold exactly the writes up to the returned sequence number. `None` if
    /// there is nothing to flush.
    pub(super) fn freeze_locked(&self) -> Option<u64> {
        let mut guard = self.stores.write();
        self.flush_asked.store(false, Ordering::Release);
        if guard.families.iter().any(|s| s.frozen.is_some()) {
            // A flush that failed left them: retry them alone, at the sequence number they were
            // frozen at. Freezing more now, or claiming today's sequence number, would mark as
            // flushed the writes still only in the active memstores.
            return Some(self.frozen_seq.load(Ordering::Acquire));
        }
        let mut next = (**guard).clone();
        if !self.freeze_active(&mut next) {
            return None;
        }
        *guard = Arc::new(next);
        let seq = self.visible_seq.load(Ordering::Acquire);
        self.frozen_seq.store(seq, Ordering::Release);
        Some(seq)
    }

    /// Moves the non-empty active memstores of `next` (which holds none frozen) to `frozen`;
    /// true if it moved any.
    fn freeze_active(&self, next: &mut RegionStores) -> bool {
        let mut any = false;
        for s in next.families.iter_mut().filter(|s| !s.active.is_empty()) {
            s.frozen = Some(std::mem::replace(&mut s.active, Arc::new(Memstore::new(&self.account))));
            any = true;
        }
        any
    }

    /// True if memstores are frozen: a flush is writing them, or one that failed left them.
    pub fn has_frozen(&self) -> bool {
        self.stores().families.iter().any(|s| s.frozen.is_some())
    }

    /// Freezes the region for a flush of every region at `seq`. The caller holds this
    /// region's `flushing`, no memstore of it is frozen, and every writer is held off with
    /// every write up to `seq` applied, so the active memstores hold exactly this region's
    /// writes after its files. Moves them to `frozen` and returns true (the caller writes them
    /// with [`Region::write_frozen_files`] and [`Region::install_frozen`]); if they are empty,
    /// records that the files hold every write up to `seq` and returns false.
    pub fn freeze_at(&self, seq: u64) -> bool {
        let mut guard = self.stores.write();
        self.flush_asked.store(false, Ordering::Release);
        let mut next = (**guard).clone();
        let any = self.freeze_active(&mut next);
        if any {
            self.frozen_seq.store(seq, Ordering::Release);
        } else {
            next.flushed_seq = next.flushed_seq.max(seq);
        }
        *guard = Arc::new(next);
        any
    }

    /// Writes the frozen memstores to SSTables and swaps them in, the files then holding every
    /// write up to `frozen_seq`; the caller holds `flushing`.
    fn write_frozen(&self, ctx: &FileContext<'_>, frozen_seq: u64) -> Result<Flushed> {
        let files = self.write_frozen_files(ctx)?;
        Ok(self.install_frozen(files, frozen_seq))
    }

    /// Writes the frozen memstores to SSTables, for [`Region::install_frozen`]; the caller
    /// holds `flushing` until it has installed them.
    pub fn write_frozen_files(&self, ctx: &FileContext<'_>) -> Result<FrozenFiles> {
        let frozen = self.stores();
        let mut new_files = Vec::new();
        let mut memstore_bytes = 0;
        for s in &frozen.families {
            if let Some(mem) = &s.frozen {
                memstore_bytes += mem.size() as u64;
                let mut cursor = mem.cursor(u64::MAX);
                cursor.seek(&KeyView::first_of_row(&[]))?;
                let file = ctx.write_file(&mut cursor, &s.desc, Retention::KeepMarkers)?;
                new_files.push((s.name.clone(), file));
            }
        }
        Ok(FrozenFiles(new_files, memstore_bytes))
    }

    /// Swaps in the files written from the frozen memstores, which go; the files then hold
    /// every write up to `frozen_seq`. Returns what the flush wrote.
    pub fn install_frozen(&self, FrozenFiles(new_files, memstore_bytes): FrozenFiles, frozen_seq: u64) -> Flushed {
        let file_bytes = new_files.iter().filter_map(|(_, f)| f.as_ref()).map(|f| f.size()).sum();
        let mut guard = self.stores.write();
        let mut next = (**guard).clone();
        for s in &mut next.families {
            if let Some((_, file)) = new_files.iter().find(|(n, _)| *n == s.name) {
                if let Some(frozen) = s.frozen.take() {
                    frozen.release();
                }
                if let Some(f) = file {
                    s.files.insert(0, f.clone());
                }
            }
        }
        next.flushed_seq = next.flushed_seq.max(frozen_seq);
        *guard = Arc::new(next);
        Flushed { memstore_bytes, file_bytes }
    }

    /// Writes every memstore to a new SSTable and swaps it in. Returns what it wrote, `None`
    /// if there was nothing to flush; the caller persists the catalog and then trims the log.
    pub fn flush(&self, ctx: &FileContext<'_>) -> Result<Option<Flushed>> {
        let _f = self.flushing.lock();
        self.flush_maintained(ctx)
    }

    /// Both maintenance locks, for work that must exclude flushes and compactions alike
    /// (splits, schema changes); always taken in this order.
    pub fn maintenance(&self) -> (MutexGuard<'_, ()>, MutexGuard<'_, ()>) {
        let compacting = self.compacting.lock();
        (compacting, self.flushing.lock())
    }

    /// [`Region::flush`] for a caller already holding `flushing`.
    pub fn flush_maintained(&self, ctx: &FileContext<'_>) -> Result<Option<Flushed>> {
        let frozen_seq = {
            let _w = self.write_lock.lock();
            self.freeze_locked()
        };
        match frozen_seq {
            Some(seq) => self.write_frozen(ctx, seq).map(Some),
            None => Ok(None),
        }
    }

    /// Flushes while the caller holds both maintenance locks and the write lock: the last,
    /// short flush before a split, which must not let writes in.
    pub fn flush_write_locked(&self, ctx: &FileContext<'_>) -> Result<Option<Flushed>> {
        let mut flushed: Option<Flushed> = None;
        // Twice when memstores frozen by a failed flush are written first.
        while let Some(seq) = self.freeze_locked() {
            let this = self.write_frozen(ctx, seq)?;
            flushed = Some(flushed.unwrap_or_default().add(this));
        }
        Ok(flushed)
    }

    /// Merges files of each family into one, keeping only rows inside the region: every file
    /// for [`CompactionScope::Major`] and [`CompactionScope::All`], the run the policy selects
    /// for [`CompactionScope::Selected`] (and every file when some are shared after a split,
    /// which are rewritten even when alone). Major compaction applies the full retention rules
    /// at time `now`; minor keeps delete markers. Returns the replaced files, which the caller
    /// deletes once neither a region nor the manifest on disk lists them, and what it wrote.
    pub fn compact(&self, ctx: &FileContext<'_>, scope: CompactionScope<'_>, now: u64) -> Result<Compacted> {
        let _c = self.compacting.lock();
        let current = self.stores();
        let mut replaced = Vec::new();
        let mut major = false;
        let mut outputs: Vec<(Bytes, Vec<u64>, Option<Arc<SstReader>>)> = Vec::new();
        for s in &current.families {
            let Some(run) = self.compaction_run(&s.files, scope) else { continue };
            let mode = Self::compaction_retention(s, &run, scope, now);
            major |= matches!(mode, Retention::Major { .. });
            let inputs = &s.files[run];
            let cursors: Vec<Source<'_>> = inputs.iter().map(|f| Source::Sst(f.one_pass_cursor())).collect();
            let mut merged = BoundedCursor::new(MergeCursor::new(cursors), self.end.clone());
            merged.seek(&KeyView::first_of_row(&self.start))?;
            let out = ctx.write_file(&mut merged, &s.desc, mode)?;
            replaced.extend(inputs.iter().cloned());
            outputs.push((s.name.clone(), inputs.iter().map(|f| f.id()).collect(), out));
        }
        if outputs.is_empty() {
            return Ok(Compacted { replaced, output_bytes: 0, major: false });
        }
        let output_bytes = outputs.iter().filter_map(|(_, _, out)| out.as_ref()).map(|o| o.size()).sum();
        let mut guard = self.stores.write();
        let mut next = (**guard).clone();
        for s in &mut next.families {
            if let Some((_, inputs, out)) = outputs.iter().find(|(n, _, _)| *n == s.name) {
                // Only this method removes files, under `compacting`; flushes (which may have
                // run meanwhile) only prepend, so the inputs are still adjacent and the output
                // takes their place in age order.
                let at = s.files.iter().position(|f| inputs.contains(&f.id())).unwrap_or(s.files.len());
                s.files.retain(|f| !inputs.contains(&f.id()));
                if let Some(o) = out {
                    s.files.insert(at, o.clone());
                }
            }
        }
        *guard = Arc::new(next);
        Ok(Compacted { replaced, output_bytes, major })
    }

    /// The rules a compaction of `store`'s files `run` (newest first) writes by.
    fn compaction_retention(store: &Store, run: &Range<usize>, scope: CompactionScope<'_>, now: u64) -> Retention {
        let policy = match scope {
            CompactionScope::Major => return Retention::Major { now },
            CompactionScope::All => return Retention::KeepMarkers,
            CompactionScope::Selected(policy) => policy,
        };
        let newer_files = run.start > 0;
        let every_file = !newer_files && run.end == store.files.len();
        let memstore_markers = store.active.has_markers() || store.frozen.as_ref().is_some_and(|f| f.has_markers());
        if every_file && policy.major_when_every_file && !memstore_markers {
            // The run sees everything that could mask what it holds (the memstores hold no
            // marker): the full rules apply, as HBase upgrades such a minor compaction, so
            // delete markers and expired cells do not outlive every rewrite of the store.
            Retention::Major { now }
        } else if newer_files {
            Retention::KeepVersions
        } else {
            Retention::KeepMarkers
        }
    }

    /// The files of one family (newest first) that a compaction of `scope` merges, if any.
    pub(super) fn compaction_run(&self, files: &[Arc<SstReader>], scope: CompactionScope<'_>) -> Option<Range<usize>> {
        let all = 0..files.len();
        let shared = files.iter().any(|f| !f.within(&self.start, &self.end));
        match scope {
            _ if files.is_empty() => None,
            CompactionScope::Major => Some(all),
            _ if shared => Some(all),
            CompactionScope::All => (files.len() >= 2).then_some(all),
            CompactionScope::Selected(policy) => {
                let sizes: Vec<u64> = files.iter().map(|f| f.size()).collect();
                compaction::select(&sizes, policy)
            }
        }
    }
}
