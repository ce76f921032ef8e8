//! [`Scanner`]: a streaming iterator over a scan's rows.
//!
//! The scanner takes a read snapshot of every region its range reaches when it opens, then
//! fills a small buffer of rows at a time, resuming after the last row it returned, so memory
//! stays bounded however large the table is.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use crate::query::{RowRange, RowResult, Scan};
use crate::read::rows::{read_rows, ReadSnapshot, RowRead};
use crate::region::Region;
use crate::Result;

/// Rows read per buffer fill.
const FILL_ROWS: usize = 128;

/// Iterates the rows of a scan. Yields `Err` once and then ends if a read fails.
pub struct Scanner {
    /// Regions in scan order, each with the snapshot taken at open.
    regions: Vec<(Arc<Region>, ReadSnapshot)>,
    next_region: usize,
    scan: Scan,
    /// What remains to read of the current region.
    range: Option<RowRange>,
    now: u64,
    buffer: VecDeque<RowResult>,
    rows_left: usize,
    done: bool,
}

impl std::fmt::Debug for Scanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scanner").field("rows_left", &self.rows_left).field("done", &self.done).finish()
    }
}

/// Clamps `range` to a region's `[start, end)`.
fn clamp(range: &RowRange, start: &Bytes, end: &Bytes) -> RowRange {
    let mut r = range.clone();
    if !start.is_empty() && r.above_lo(start) {
        r.lo = Bound::Included(start.clone());
    }
    if !end.is_empty() && (r.below_hi(end) || matches!(&r.hi, Bound::Included(h) if h == end)) {
        r.hi = Bound::Excluded(end.clone());
    }
    r
}

impl Scanner {
    pub(crate) fn new(mut regions: Vec<Arc<Region>>, scan: Scan, now: u64) -> Scanner {
        // Only regions the scan's range reaches are snapshotted: a short scan of a table split
        // into many regions costs the same as one of a single region.
        let range = scan.row_range();
        regions.retain(|r| range.overlaps(&r.start, &r.end));
        if scan.reversed {
            regions.reverse();
        }
        let regions = regions.into_iter().map(|r| {
            let snap = r.snapshot();
            (r, snap)
        });
        let limit = [scan.limit, scan.spec.filter.as_ref().and_then(|f| f.page_limit())].into_iter().flatten().min();
        Scanner {
            regions: regions.collect(),
            next_region: 0,
            range: None,
            now,
            buffer: VecDeque::new(),
            rows_left: limit.unwrap_or(usize::MAX),
            done: false,
            scan,
        }
    }

    fn fill(&mut self) -> Result<()> {
        while self.buffer.is_empty() && !self.done {
            if self.rows_left == 0 {
                self.done = true;
                break;
            }
            let range = match self.range.take() {
                Some(r) => r,
                None => {
                    let Some((region, _)) = self.regions.get(self.next_region) else {
                        self.done = true;
                        break;
                    };
                    clamp(&self.scan.row_range(), &region.start, &region.end)
                }
            };
            let (region, snap) = &self.regions[self.next_region];
            let read = RowRead {
                range: &range,
                reversed: self.scan.reversed,
                spec: &self.scan.spec,
                now: self.now,
                point_row: None,
            };
            let want = FILL_ROWS.min(self.rows_left);
            let mut got = 0usize;
            let batch = self.scan.batch;
            let buffer = &mut self.buffer;
            read_rows(snap, &read, |row| {
                got += 1;
                match batch {
                    Some(n) if row.cells.len() > n => {
                        for chunk in row.cells.chunks(n) {
                            buffer.push_back(RowResult { row: row.row.clone(), cells: chunk.to_vec() });
                        }
                    }
                    _ => buffer.push_back(row),
                }
                got < want
            })?;
            region.counters.reads.fetch_add(got as u64, Ordering::Relaxed);
            self.rows_left -= got;
            match self.buffer.back() {
                Some(last) if got == want => {
                    // Stopped early: resume after the last row returned.
                    let last = last.row.clone();
                    let mut rest = range;
                    if self.scan.reversed {
                        rest.hi = Bound::Excluded(last);
                    } else {
                        rest.lo = Bound::Excluded(last);
                    }
                    self.range = Some(rest);
                }
                _ => self.next_region += 1,
            }
        }
        Ok(())
    }
}

impl Iterator for Scanner {
    type Item = Result<RowResult>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buffer.is_empty() {
            if let Err(e) = self.fill() {
                self.done = true;
                return Some(Err(e));
            }
        }
        self.buffer.pop_front().map(Ok)
    }
}
