//! [`Scanner`]: a streaming iterator over a scan's rows; [`ScanCursor`]: the same scan lending
//! its rows one at a time; and the visiting scan behind
//! [`Table::scan_with`](crate::Table::scan_with).
//!
//! The scanner takes a read snapshot of every region its range reaches when it opens, then
//! fills a small buffer of rows at a time, resuming after the last row it returned, so memory
//! stays bounded however large the table is.

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use crate::query::{RowRange, RowResult, Scan};
use crate::read::row_buf::{FromScannedRow, RowBatch, RowBuf, RowView, ScannedCell};
use crate::read::rows::{read_rows, RowRead, Rows};
use crate::region::{ReadSnapshot, Region};
use crate::Result;

/// Rows read per buffer fill.
const FILL_ROWS: usize = 128;

/// Iterates the rows of a scan, as [`RowResult`]s or another [`FromScannedRow`] type. Yields
/// `Err` once and then ends if a read fails.
pub struct Scanner<R = RowResult> {
    walk: Walk,
    buffer: SplitRows,
    _rows: PhantomData<fn() -> R>,
}

/// Where a scan stands: the regions its range reaches, each with the snapshot taken at open,
/// and what remains to read. Rows are read a buffer at a time, resuming after the last row
/// returned, so memory stays bounded however large the table is.
struct Walk {
    /// Regions in scan order, each with the snapshot taken at open.
    regions: Vec<(Arc<Region>, ReadSnapshot)>,
    next_region: usize,
    scan: Scan,
    /// What remains to read of the current region.
    range: Option<RowRange>,
    now: u64,
    rows_left: usize,
    done: bool,
}

/// Where a fill puts the rows it reads.
trait RowSink {
    /// Copies rows out of the read buffer rather than splitting them off it.
    const LENT: bool;
    /// Takes the gathered row (whole, or in parts of `batch` cells); `ends_fill` when the fill
    /// stops after it.
    fn keep(&mut self, buf: &mut RowBuf, batch: Option<usize>, ends_fill: bool);
    /// The key of the row that ended the fill: where a fill that stopped early resumes.
    fn last_row(&mut self) -> Option<Bytes>;
    /// Makes room for a fill of up to `rows` rows.
    fn reserve(&mut self, rows: usize);
    fn is_empty(&self) -> bool;
}

/// Rows split off the read buffer by a fill, each built as the scanner's row type only when it
/// is handed out. Built at once, a fill's rows would allocate a fill's worth of cell lists
/// before the caller dropped the first, too many for the allocator's per-thread cache; built
/// one at a time, each reuses the memory of the row the caller just let go.
#[derive(Default)]
struct SplitRows {
    /// Each kept row (or part of one, for a scan's `batch`): its key, and how many of the
    /// front of `cells` are its.
    rows: VecDeque<(Bytes, usize)>,
    cells: VecDeque<ScannedCell>,
    /// Kept for the row that ends a fill only: a key kept for every row would cost each row
    /// one more count on its shared bytes.
    last: Option<Bytes>,
}

impl SplitRows {
    /// The next row, built as `R`.
    fn pop<R: FromScannedRow>(&mut self) -> Option<R> {
        let (row, n) = self.rows.pop_front()?;
        Some(R::from_scanned(row, self.cells.drain(..n)))
    }

    fn clear(&mut self) {
        self.rows.clear();
        self.cells.clear();
    }
}

impl RowSink for SplitRows {
    const LENT: bool = false;

    fn keep(&mut self, buf: &mut RowBuf, batch: Option<usize>, ends_fill: bool) {
        buf.take_with(|row, cells| {
            if ends_fill {
                self.last = Some(row.clone());
            }
            let total = cells.len();
            self.cells.extend(cells);
            match batch {
                Some(n) if total > n => {
                    let mut left = total;
                    while left > n {
                        self.rows.push_back((row.clone(), n));
                        left -= n;
                    }
                    self.rows.push_back((row, left));
                }
                _ => self.rows.push_back((row, total)),
            }
        });
    }

    fn last_row(&mut self) -> Option<Bytes> {
        self.last.take()
    }

    fn reserve(&mut self, rows: usize) {
        // A cell a row at least; rows of more cells grow the list as they come.
        self.rows.reserve(rows);
        self.cells.reserve(rows);
    }

    fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

impl RowSink for RowBatch {
    const LENT: bool = true;

    fn keep(&mut self, buf: &mut RowBuf, batch: Option<usize>, _ends_fill: bool) {
        self.push(buf, batch);
    }

    fn last_row(&mut self) -> Option<Bytes> {
        self.len().checked_sub(1).and_then(|i| self.row(i)).map(Bytes::copy_from_slice)
    }

    fn reserve(&mut self, _rows: usize) {}

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<R> std::fmt::Debug for Scanner<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scanner").field("rows_left", &self.walk.rows_left).field("done", &self.walk.done).finish()
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

/// The regions a scan's range reaches, in scan order, each with a read snapshot taken now.
/// Only those are snapshotted: a short scan of a table split into many regions costs the same
/// as one of a single region.
fn snapshot_regions(mut regions: Vec<Arc<Region>>, scan: &Scan) -> Vec<(Arc<Region>, ReadSnapshot)> {
    let range = scan.row_range();
    regions.retain(|r| range.overlaps(&r.start, &r.end));
    if scan.reversed {
        regions.reverse();
    }
    // One instant for every region: a write spanning several is in the scan whole or not at all.
    let snapshots = Region::snapshots(&regions.iter().map(|r| &**r).collect::<Vec<_>>());
    regions.into_iter().zip(snapshots).collect()
}

/// The most rows a scan returns: its limit or a `Page` filter's, whichever is smaller.
fn row_limit(scan: &Scan) -> usize {
    [scan.limit, scan.spec.filter.as_ref().and_then(|f| f.page_limit())]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(usize::MAX)
}

/// Runs `scan` over `regions` (in table order), lending each row, or each `batch` of a row's
/// cells, to `visit` until it breaks or the scan ends; returns how many rows it visited. See
/// [`Table::scan_with`](crate::Table::scan_with).
pub(crate) fn visit_rows(
    regions: Vec<Arc<Region>>,
    scan: &Scan,
    now: u64,
    visit: &mut dyn FnMut(RowView<'_>) -> ControlFlow<()>,
) -> Result<usize> {
    let mut rows_left = row_limit(scan);
    let mut visited = 0;
    let full = scan.row_range();
    for (region, snap) in &snapshot_regions(regions, scan) {
        if rows_left == 0 {
            break;
        }
        let range = clamp(&full, &region.start, &region.end);
        let read = RowRead {
            rows: Rows::Range(&range),
            reversed: scan.reversed,
            spec: &scan.spec,
            now,
            for_writer: false,
            lent: true,
        };
        let mut got = 0;
        let mut stopped = false;
        read_rows(snap, &read, |buf| {
            got += 1;
            let row = buf.view();
            let flow = match scan.batch {
                Some(n) if row.len() > n => {
                    (0..row.len()).step_by(n).try_for_each(|at| visit(row.slice(at..(at + n).min(row.len()))))
                }
                _ => visit(row),
            };
            stopped = flow.is_break();
            !stopped && got < rows_left
        })?;
        region.counters.reads.fetch_add(got as u64, Ordering::Relaxed);
        rows_left -= got;
        visited += got;
        if stopped {
            break;
        }
    }
    Ok(visited)
}

impl Walk {
    fn new(regions: Vec<Arc<Region>>, scan: Scan, now: u64) -> Walk {
        Walk {
            regions: snapshot_regions(regions, &scan),
            next_region: 0,
            range: None,
            now,
            rows_left: row_limit(&scan),
            done: false,
            scan,
        }
    }

    /// Reads rows into `sink` until it holds some or the scan ends.
    fn fill<S: RowSink>(&mut self, sink: &mut S) -> Result<()> {
        while sink.is_empty() && !self.done {
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
                rows: Rows::Range(&range),
                reversed: self.scan.reversed,
                spec: &self.scan.spec,
                now: self.now,
                for_writer: false,
                lent: S::LENT,
            };
            let want = FILL_ROWS.min(self.rows_left);
            sink.reserve(want);
            let mut got = 0usize;
            let batch = self.scan.batch;
            read_rows(snap, &read, |buf| {
                got += 1;
                sink.keep(buf, batch, got == want);
                got < want
            })?;
            region.counters.reads.fetch_add(got as u64, Ordering::Relaxed);
            self.rows_left -= got;
            match (got == want).then(|| sink.last_row()).flatten() {
                Some(last) => {
                    // Stopped early: resume after the last row returned.
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

impl<R: FromScannedRow> Scanner<R> {
    pub(crate) fn new(regions: Vec<Arc<Region>>, scan: Scan, now: u64) -> Scanner<R> {
        Scanner { walk: Walk::new(regions, scan, now), buffer: SplitRows::default(), _rows: PhantomData }
    }
}

impl<R: FromScannedRow> Iterator for Scanner<R> {
    type Item = Result<R>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buffer.is_empty() {
            if let Err(e) = self.walk.fill(&mut self.buffer) {
                // Rows the failed fill kept are dropped: the scan ends at its error.
                self.walk.done = true;
                self.buffer.clear();
                return Some(Err(e));
            }
        }
        self.buffer.pop().map(Ok)
    }
}

/// A scan whose rows are lent one at a time, pull-style: [`ScanCursor::advance`] moves to the
/// next row and [`ScanCursor::row`] lends it, borrowed from the cursor's buffer until the next
/// move. The counterpart of [`Table::scan_with`](crate::Table::scan_with) for a caller that
/// holds several scans at once (merging them) or stops between rows. A row costs one more
/// copy of its bytes than with `scan_with` (from the read buffer into the cursor's, reused
/// fill after fill), not a reference-counted piece per cell.
pub struct ScanCursor {
    walk: Walk,
    batch: RowBatch,
    /// The current row's index in `batch`, once the cursor has moved onto one.
    at: Option<usize>,
}

impl std::fmt::Debug for ScanCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanCursor").field("rows_left", &self.walk.rows_left).field("done", &self.walk.done).finish()
    }
}

impl ScanCursor {
    pub(crate) fn new(regions: Vec<Arc<Region>>, scan: Scan, now: u64) -> ScanCursor {
        ScanCursor { walk: Walk::new(regions, scan, now), batch: RowBatch::default(), at: None }
    }

    /// Moves to the next row: `true` if there is one, `false` at the end of the scan.
    ///
    /// # Errors
    /// [`Error::Corrupt`](crate::Error::Corrupt) if a file read is damaged; the cursor then
    /// stays at its end.
    pub fn advance(&mut self) -> Result<bool> {
        if let Some(i) = self.at.map(|i| i + 1).filter(|&i| i < self.batch.len()) {
            self.at = Some(i);
            return Ok(true);
        }
        self.at = None;
        self.batch.clear();
        if let Err(e) = self.walk.fill(&mut self.batch) {
            self.walk.done = true;
            self.batch.clear();
            return Err(e);
        }
        self.at = (self.batch.len() > 0).then_some(0);
        Ok(self.at.is_some())
    }

    /// The row the cursor is on; `None` before the first [`ScanCursor::advance`] and after
    /// the last.
    pub fn row(&self) -> Option<RowView<'_>> {
        self.batch.view(self.at?)
    }
}
