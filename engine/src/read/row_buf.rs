//! [`RowBuf`]: the cells a read returns for one row, gathered in one reused buffer, and the two
//! ways they leave it — taken out as an owned row (a [`RowResult`], or any [`FromScannedRow`]
//! type), or lent as a [`RowView`].
//!
//! The row key, qualifiers and values are copied out of the cursors into the buffer's arena as
//! the row is read, so results never pin a cached block or a memstore chunk. An owned row then
//! splits its pieces off the arena (shared slices, no allocation per piece); a view lends them
//! in place and the buffer is reused for the next row.

use std::ops::Range;

use bytes::{Buf, Bytes, BytesMut};

use crate::cell::{Cell, CellRef, CellType};
use crate::filter::Filter;
use crate::query::RowResult;

/// Where one returned cell's bytes sit in the arena.
#[derive(Debug, Clone)]
pub(crate) struct CellSpan {
    /// Index into the read's families.
    family: usize,
    qualifier: Range<usize>,
    value: Range<usize>,
    timestamp: u64,
    kind: CellType,
}

/// Cells a new buffer has room for.
const SPANS: usize = 16;

/// One row's returned cells.
pub(crate) struct RowBuf {
    /// Names of the families the read covers, indexed by [`CellSpan::family`].
    families: Vec<Bytes>,
    /// The row key, then qualifiers and values in the order the row is read.
    arena: BytesMut,
    row_len: usize,
    spans: Vec<CellSpan>,
}

impl RowBuf {
    /// A buffer for a read of `families`, whose arena grows in chunks of `chunk` bytes (small
    /// for a Get, larger for scans).
    pub fn new(families: Vec<Bytes>, chunk: usize) -> Self {
        // Room for a row of a dozen or so cells from the start: a point read of a ten-column
        // row would otherwise grow the list three times.
        let spans = Vec::with_capacity(SPANS);
        RowBuf { families, arena: BytesMut::with_capacity(chunk), row_len: 0, spans }
    }

    /// Starts gathering `row`, dropping whatever the buffer held.
    pub fn start_row(&mut self, row: &[u8]) {
        self.arena.clear();
        self.spans.clear();
        self.arena.extend_from_slice(row);
        self.row_len = row.len();
    }

    /// The row being gathered.
    pub fn row(&self) -> &[u8] {
        &self.arena[..self.row_len]
    }

    /// Appends `bytes` (a qualifier) to the arena, returning where they sit.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> Range<usize> {
        let start = self.arena.len();
        self.arena.extend_from_slice(bytes);
        start..self.arena.len()
    }

    /// Bytes pushed earlier.
    pub fn bytes(&self, at: Range<usize>) -> &[u8] {
        &self.arena[at]
    }

    /// Appends a returned cell of family `family` (an index) whose qualifier was pushed at
    /// `qualifier`.
    pub fn push_cell(&mut self, family: usize, qualifier: Range<usize>, timestamp: u64, kind: CellType, value: &[u8]) {
        let value = self.push_bytes(value);
        self.spans.push(CellSpan { family, qualifier, value, timestamp, kind });
    }

    /// True if the row has no cells to return.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Keeps the cells `filter` passes (and empties their values if it strips them).
    pub fn apply_filter(&mut self, filter: &Filter) {
        let mask = {
            let view = self.view();
            filter.keep_mask(view.row, view.spans.len(), &|i| view.cell(i))
        };
        let mut keep = mask.into_iter();
        self.spans.retain(|_| keep.next().unwrap_or(false));
        if filter.strips_values() {
            for s in &mut self.spans {
                s.value = s.value.start..s.value.start;
            }
        }
    }

    /// The gathered row, lent in place.
    pub fn view(&self) -> RowView<'_> {
        RowView { row: self.row(), families: &self.families, arena: &self.arena, spans: &self.spans }
    }

    /// Hands the gathered row to `build`: its key, and its cells split off the arena in order
    /// (shared slices, no allocation per piece). The buffer is empty afterwards, whatever
    /// `build` left unread.
    pub fn take_with<T>(&mut self, build: impl FnOnce(Bytes, &mut ScannedCells<'_>) -> T) -> T {
        let row = self.arena.split_to(self.row_len).freeze();
        let mut cells = ScannedCells {
            arena: &mut self.arena,
            families: &self.families,
            spans: self.spans.drain(..),
            pos: self.row_len,
            column: None,
        };
        let out = build(row, &mut cells);
        drop(cells);
        self.arena.clear();
        self.row_len = 0;
        out
    }
}

/// Rows copied out of the read buffer one after another, to be lent later: what a
/// [`ScanCursor`](crate::ScanCursor) holds between the fills of its scan. A row costs one copy
/// of its bytes into a buffer reused fill after fill; an owned row costs a reference count per
/// piece, given back when it is dropped.
#[derive(Default)]
pub(crate) struct RowBatch {
    /// The families of the read that filled the batch (one region's).
    families: Vec<Bytes>,
    /// Each row's arena as the read buffer held it: key, then qualifiers and values.
    arena: Vec<u8>,
    spans: Vec<CellSpan>,
    rows: Vec<BatchRow>,
}

/// Where one lent row sits in a [`RowBatch`].
struct BatchRow {
    arena: Range<usize>,
    row_len: usize,
    spans: Range<usize>,
}

impl RowBatch {
    /// Empties the batch, keeping its memory.
    pub fn clear(&mut self) {
        self.arena.clear();
        self.spans.clear();
        self.rows.clear();
    }

    /// Rows in the batch.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Copies the gathered row in: whole, or in parts of at most `batch` cells (a scan's
    /// `batch`), each lent as a row of its own.
    pub fn push(&mut self, buf: &RowBuf, batch: Option<usize>) {
        if self.rows.is_empty() {
            self.families.clone_from(&buf.families);
        }
        debug_assert!(self.families == buf.families, "one batch is filled from one region's read");
        let base = self.arena.len();
        self.arena.extend_from_slice(&buf.arena);
        let arena = base..self.arena.len();
        let first = self.spans.len();
        self.spans.extend_from_slice(&buf.spans);
        let cells = buf.spans.len();
        let part = batch.filter(|&n| n > 0 && cells > n).unwrap_or(cells.max(1));
        for at in (0..cells).step_by(part) {
            let spans = first + at..first + (at + part).min(cells);
            self.rows.push(BatchRow { arena: arena.clone(), row_len: buf.row_len, spans });
        }
    }

    /// The key of row `i`.
    pub fn row(&self, i: usize) -> Option<&[u8]> {
        let r = self.rows.get(i)?;
        Some(&self.arena[r.arena.start..r.arena.start + r.row_len])
    }

    /// Row `i`, lent in place.
    pub fn view(&self, i: usize) -> Option<RowView<'_>> {
        let r = self.rows.get(i)?;
        let arena = &self.arena[r.arena.clone()];
        Some(RowView { row: &arena[..r.row_len], families: &self.families, arena, spans: &self.spans[r.spans.clone()] })
    }
}

/// One cell of a row a read hands out whole: its pieces, split off the read's buffer.
#[derive(Debug, Clone)]
pub struct ScannedCell {
    /// Column family name.
    pub family: Bytes,
    /// Column qualifier.
    pub qualifier: Bytes,
    /// Version timestamp in milliseconds.
    pub timestamp: u64,
    /// Put or one of the delete markers (markers appear only in raw reads).
    pub cell_type: CellType,
    /// The value; empty for delete markers.
    pub value: Bytes,
}

/// The cells of one row as a read hands it out, in order, each split off the read's buffer as
/// it is taken.
pub struct ScannedCells<'a> {
    arena: &'a mut BytesMut,
    families: &'a [Bytes],
    spans: std::vec::Drain<'a, CellSpan>,
    /// Arena offset of the first byte not yet split off.
    pos: usize,
    /// The qualifier split off for the cell before, and where it sat, while the next cell is
    /// of the same column (the versions of one column share it).
    column: Option<(Range<usize>, Bytes)>,
}

impl Iterator for ScannedCells<'_> {
    type Item = ScannedCell;

    fn next(&mut self) -> Option<ScannedCell> {
        let s = self.spans.next()?;
        // Pieces split off in arena order, each on its own (one reference count each, and no
        // handle on the whole row left to drop).
        let qualifier = match self.column.take() {
            Some((at, q)) if at == s.qualifier => q,
            _ => {
                self.arena.advance(s.qualifier.start - self.pos);
                self.pos = s.qualifier.end;
                self.arena.split_to(s.qualifier.len()).freeze()
            }
        };
        // A handle is kept only when the next cell is another version of this column: a
        // clone is one more reference count to take and give back, per cell of every row.
        if self.spans.as_slice().first().is_some_and(|next| next.qualifier == s.qualifier) {
            self.column = Some((s.qualifier.clone(), qualifier.clone()));
        }
        let value = if s.value.is_empty() {
            Bytes::new()
        } else {
            self.arena.advance(s.value.start - self.pos);
            self.pos = s.value.end;
            self.arena.split_to(s.value.len()).freeze()
        };
        Some(ScannedCell {
            family: self.families[s.family].clone(),
            qualifier,
            timestamp: s.timestamp,
            cell_type: s.kind,
            value,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.spans.size_hint()
    }
}

impl ExactSizeIterator for ScannedCells<'_> {}

/// A row type reads can hand out, built straight from the read's buffer: what
/// [`Table::scan_as`](crate::Table::scan_as) returns. [`RowResult`] is one; a layer above can
/// build its own row type without going through it.
pub trait FromScannedRow: Sized {
    /// The row `row` with `cells` (all of them, or, for a scan with a batch size, the next
    /// part of them), in the order the read returns them.
    fn from_scanned(row: Bytes, cells: impl ExactSizeIterator<Item = ScannedCell>) -> Self;
}

impl FromScannedRow for RowResult {
    fn from_scanned(row: Bytes, cells: impl ExactSizeIterator<Item = ScannedCell>) -> Self {
        let cells = cells
            .map(|c| Cell {
                row: row.clone(),
                family: c.family,
                qualifier: c.qualifier,
                timestamp: c.timestamp,
                cell_type: c.cell_type,
                value: c.value,
            })
            .collect();
        RowResult { row, cells }
    }
}

/// One row of a scan, lent to the visitor of [`Table::scan_with`](crate::Table::scan_with):
/// the same cells a [`RowResult`] would hold, in the same order, borrowed from the read's
/// buffer instead of copied out.
#[derive(Clone, Copy)]
pub struct RowView<'a> {
    row: &'a [u8],
    families: &'a [Bytes],
    arena: &'a [u8],
    spans: &'a [CellSpan],
}

impl std::fmt::Debug for RowView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowView").field("row", &self.row).field("cells", &self.cells().collect::<Vec<_>>()).finish()
    }
}

impl<'a> RowView<'a> {
    /// The row key.
    pub fn row(&self) -> &'a [u8] {
        self.row
    }

    /// How many cells the row has.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// True if the row has no cells (a scan never lends such a row).
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The `i`-th cell, in family, qualifier, newest-first order.
    pub fn get(&self, i: usize) -> Option<CellRef<'a>> {
        (i < self.spans.len()).then(|| self.cell(i))
    }

    /// The cells, in family, qualifier, newest-first order.
    pub fn cells(&self) -> impl ExactSizeIterator<Item = CellRef<'a>> + 'a {
        let view = *self;
        (0..self.spans.len()).map(move |i| view.cell(i))
    }

    /// The newest value of `family:qualifier`.
    pub fn value(&self, family: &[u8], qualifier: &[u8]) -> Option<&'a [u8]> {
        self.value_at(family, qualifier, u64::MAX)
    }

    /// The value of `family:qualifier` as of `timestamp`: the newest returned version of the
    /// column written at or before it (delete markers, in a raw read, are passed over).
    pub fn value_at(&self, family: &[u8], qualifier: &[u8], timestamp: u64) -> Option<&'a [u8]> {
        // Spans compared in place: the family by index, no cell built for the ones passed.
        let family = self.families.iter().position(|f| f == family)?;
        self.spans
            .iter()
            .find(|s| {
                s.family == family
                    && s.timestamp <= timestamp
                    && !s.kind.is_delete()
                    && &self.arena[s.qualifier.clone()] == qualifier
            })
            .map(|s| &self.arena[s.value.clone()])
    }

    /// An owned copy of the row.
    pub fn to_row_result(&self) -> RowResult {
        let row = Bytes::copy_from_slice(self.row);
        let cells = self.cells().map(|c| Cell { row: row.clone(), ..c.to_cell() }).collect();
        RowResult { row, cells }
    }

    /// The cells `range` of this row as a row of their own (a scan's `batch`).
    pub(crate) fn slice(&self, range: Range<usize>) -> RowView<'a> {
        RowView { spans: &self.spans[range], ..*self }
    }

    fn cell(&self, i: usize) -> CellRef<'a> {
        let s = &self.spans[i];
        CellRef {
            row: self.row,
            family: &self.families[s.family],
            qualifier: &self.arena[s.qualifier.clone()],
            timestamp: s.timestamp,
            cell_type: s.kind,
            value: &self.arena[s.value.clone()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row of two families: `a:q1` with two versions, `a:q2`, `b:q1`.
    fn gathered() -> RowBuf {
        let mut buf = RowBuf::new(vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")], 64);
        buf.start_row(b"row-1");
        let q1 = buf.push_bytes(b"q1");
        buf.push_cell(0, q1.clone(), 20, CellType::Put, b"new");
        buf.push_cell(0, q1, 10, CellType::Put, b"old");
        let q2 = buf.push_bytes(b"q2");
        buf.push_cell(0, q2, 5, CellType::Put, b"v2");
        let q1 = buf.push_bytes(b"q1");
        buf.push_cell(1, q1, 7, CellType::Put, b"vb");
        buf
    }

    fn describe<'a>(cells: impl Iterator<Item = CellRef<'a>>) -> Vec<String> {
        cells
            .map(|c| {
                let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                format!("{}:{}@{}={}", text(c.family), text(c.qualifier), c.timestamp, text(c.value))
            })
            .collect()
    }

    const EXPECTED: [&str; 4] = ["a:q1@20=new", "a:q1@10=old", "a:q2@5=v2", "b:q1@7=vb"];

    fn take(buf: &mut RowBuf) -> RowResult {
        buf.take_with(|row, cells| RowResult::from_scanned(row, cells))
    }

    #[test]
    fn a_builder_that_stops_early_still_empties_the_buffer() {
        let mut buf = gathered();
        let first_two: Vec<ScannedCell> = buf.take_with(|_, cells| cells.take(2).collect());
        assert_eq!(first_two.len(), 2);
        assert_eq!((&first_two[1].qualifier[..], &first_two[1].value[..]), (&b"q1"[..], &b"old"[..]));
        assert!(buf.is_empty(), "the cells left unread went with the row");
        buf.start_row(b"row-2");
        let q = buf.push_bytes(b"zz");
        buf.push_cell(0, q, 1, CellType::Put, b"v");
        let next = take(&mut buf);
        assert_eq!((next.row.as_ref(), next.cells.len()), (&b"row-2"[..], 1));
        assert_eq!(&next.cells[0].value[..], b"v");
    }

    #[test]
    fn a_view_and_an_owned_row_hold_the_same_cells() {
        let mut buf = gathered();
        let view = buf.view();
        assert_eq!(view.row(), b"row-1");
        assert_eq!(view.len(), 4);
        assert_eq!(view.value(b"a", b"q1"), Some(&b"new"[..]));
        assert_eq!(view.value(b"b", b"q2"), None);
        assert_eq!(view.value_at(b"a", b"q1", 15), Some(&b"old"[..]));
        assert_eq!(view.value_at(b"a", b"q1", 20), Some(&b"new"[..]));
        assert_eq!(view.value_at(b"a", b"q1", 9), None);
        assert_eq!(view.value_at(b"b", b"q1", u64::MAX), Some(&b"vb"[..]));
        assert_eq!(view.value_at(b"c", b"q1", u64::MAX), None);
        assert!(view.get(4).is_none());
        let viewed = describe(view.cells());
        assert_eq!(viewed, EXPECTED);
        let copied = view.to_row_result();

        let owned = take(&mut buf);
        assert_eq!(owned, copied);
        assert_eq!(owned.row.as_ref(), b"row-1");
        assert!(owned.cells.iter().all(|c| c.row == owned.row));
        let taken = describe(owned.cells.iter().map(Cell::view));
        assert_eq!(taken, EXPECTED);
        assert!(buf.is_empty(), "taking empties the buffer");
    }

    #[test]
    fn the_buffer_is_reused_row_after_row_without_disturbing_taken_rows() {
        let mut buf = gathered();
        let first = take(&mut buf);
        buf.start_row(b"row-2");
        let q = buf.push_bytes(b"zz");
        buf.push_cell(1, q, 1, CellType::Put, b"later");
        let second = take(&mut buf);
        assert_eq!(describe(first.cells.iter().map(Cell::view)), EXPECTED);
        assert_eq!(second.row.as_ref(), b"row-2");
        assert_eq!(second.cells.len(), 1);
        assert_eq!(second.cells[0].value.as_ref(), b"later");
    }

    #[test]
    fn filters_drop_cells_and_strip_values_before_anything_is_copied_out() {
        let mut buf = gathered();
        buf.apply_filter(&Filter::And(vec![Filter::Qualifier(crate::CompareOp::Equal, "q1".into()), Filter::KeyOnly]));
        let owned = take(&mut buf);
        let got = describe(owned.cells.iter().map(Cell::view));
        assert_eq!(got, ["a:q1@20=", "a:q1@10=", "b:q1@7="]);

        let mut buf = gathered();
        buf.apply_filter(&Filter::Value(crate::CompareOp::Equal, "v2".into()));
        let view = buf.view();
        assert_eq!(view.len(), 1);
        assert_eq!(view.get(0).map(|c| (c.qualifier, c.value)), Some((&b"q2"[..], &b"v2"[..])));
        let owned = take(&mut buf);
        assert_eq!(owned.cells[0].qualifier.as_ref(), b"q2");
        assert_eq!(owned.cells[0].value.as_ref(), b"v2");
    }

    #[test]
    fn a_slice_is_a_row_of_its_own() {
        let buf = gathered();
        let view = buf.view();
        let tail = view.slice(2..4);
        assert_eq!(tail.row(), b"row-1");
        assert_eq!(tail.cells().map(|c| c.value).collect::<Vec<_>>(), [&b"v2"[..], b"vb"]);
    }
}
