//! The memstore's cursor: walks the list at a read point, cell by cell through runs.

use std::cmp::Ordering;

use bytes::Bytes;

use super::item::{MemCell, Probe};
use super::list::Entry;
use super::Memstore;
use crate::cell::KeyView;
use crate::read::cursor::CellCursor;
use crate::Result;

/// Cursor over a memstore at a read point.
pub(crate) struct MemCursor<'a> {
    pub(super) memstore: &'a Memstore,
    pub(super) cur: Option<Entry<'a, MemCell>>,
    /// Where the current cell starts in the cells of `cur`'s bytes.
    pub(super) at: usize,
    /// The last cell of the run the cursor just left: cells up to it that follow are the
    /// run's own, being split into items of their own ([`Memstore::split_run`]), and are
    /// skipped.
    pub(super) shadow: Option<KeyView<'a>>,
    pub(super) read_point: u64,
    /// Seeks leave the writer's splice (see [`Memstore::writer_cursor`]).
    pub(super) splicing: bool,
    /// Reads one row (see [`Memstore::point_cursor`]).
    pub(super) point: bool,
}

impl<'a> MemCursor<'a> {
    fn current(&self) -> Option<&'a MemCell> {
        self.cur.map(|e| e.item())
    }

    /// Moves to the next cell, of the run or of the next item.
    fn step(&mut self) {
        let Some(e) = self.cur else { return };
        let item = e.item();
        let next = item.next_at(self.at);
        if next < item.end() {
            self.at = next;
            return;
        }
        // Leaving a run (the last of several cells): remember where it ended.
        if self.at > item.first_at() {
            self.shadow = Some(item.view_at(self.at));
        }
        self.cur = e.next();
        if let Some(next) = self.cur {
            next.prefetch_ahead();
        }
        self.at = self.cur.map_or(0, |e| e.item().first_at());
    }

    /// Moves past cells this read does not see: newer than its read point, or a split run's
    /// cells met a second time.
    pub(super) fn settle(&mut self) {
        while let Some(item) = self.current() {
            let key = item.view_at(self.at);
            if let Some(shadow) = &self.shadow {
                if key.cmp_internal(shadow) != Ordering::Greater {
                    self.step();
                    continue;
                }
                self.shadow = None;
            }
            if key.seq <= self.read_point {
                return;
            }
            self.step();
        }
    }

    /// Positions at the first cell at or after `target`, given the last item before it and
    /// the first item not before it: a run before the target may reach past it.
    fn land(&mut self, floor: Option<Entry<'a, MemCell>>, ceiling: Option<Entry<'a, MemCell>>, target: &KeyView<'_>) {
        self.shadow = None;
        if let Some(run) = floor.filter(|e| e.item().is_run() && e.item().row() == target.row) {
            let item = run.item();
            if let Some(at) = item.offsets().find(|&at| item.view_at(at).cmp_internal(target).is_ge()) {
                (self.cur, self.at) = (Some(run), at);
                return;
            }
        }
        (self.cur, self.at) = (ceiling, ceiling.map_or(0, |e| e.item().first_at()));
    }
}

impl CellCursor for MemCursor<'_> {
    #[inline]
    fn key(&self) -> Option<KeyView<'_>> {
        self.current().map(|item| item.view_at(self.at))
    }

    #[inline]
    fn value(&self) -> &[u8] {
        self.current().map_or(&[], |item| item.value_at(self.at))
    }

    #[inline]
    fn ttl_ms(&self) -> Option<u64> {
        self.current().and_then(|item| item.encoded().ttl_ms())
    }

    fn next(&mut self) -> Result<()> {
        self.step();
        self.settle();
        Ok(())
    }

    fn seek(&mut self, target: &KeyView<'_>) -> Result<()> {
        let memstore = self.memstore;
        let probe = Probe::new(*target);
        let (floor, ceiling) = if self.splicing {
            memstore.map.around_splicing(probe.prefix, |c| probe.order(c))
        } else {
            // A row's start comes from the index; a row the memstore does not hold has no
            // cells for a point read, and a scan goes on at the next row there is.
            match target.is_first_of_row().then(|| memstore.first_of(target.row)) {
                Some(Ok(Some(first))) => (None, Some(first)),
                Some(Ok(None)) if self.point => (None, None),
                _ => memstore.map.around(probe.prefix, |c| probe.order(c)),
            }
        };
        self.land(floor, ceiling, target);
        self.settle();
        Ok(())
    }

    fn prev_row(&mut self, bound: Option<&[u8]>) -> Result<Option<Bytes>> {
        let mut entry = match bound {
            None => self.memstore.map.last(),
            Some(row) => {
                let probe = Probe::new(KeyView::first_of_row(row));
                self.memstore.map.before(probe.prefix, |c| probe.order(c))
            }
        };
        // Skip rows whose every cell is newer than the read point (a run's cells share one
        // sequence number). The row is copied out so a caller holding it does not pin an
        // arena chunk.
        while let Some(e) = entry {
            let key = e.item().view();
            if key.seq <= self.read_point {
                return Ok(Some(Bytes::copy_from_slice(key.row)));
            }
            entry = e.prev();
        }
        Ok(None)
    }
}
