//! Rows lent for reading: what entities decode from. A store hands out owned [`Row`]s; a store
//! that can also lend a row in place (the embedded engine, from its read buffer) saves building
//! and dropping a reference-counted piece per cell, which is most of what a scan of small rows
//! costs. Decoding reads a [`LentRow`] either way, so it cannot tell the two apart.

use cellar_engine::RowView;

use super::{Row, RowStream, StoredCell};
use crate::Result;

/// A row lent for reading: a [`Row`] the caller holds, or one a store lends from its own
/// buffer. Cells are in family, qualifier, newest-first order, as in a [`Row`].
#[derive(Clone, Copy)]
pub struct LentRow<'a> {
    key: &'a [u8],
    cells: Cells<'a>,
}

/// Where a lent row's cells live.
#[derive(Clone, Copy)]
enum Cells<'a> {
    Owned(&'a [StoredCell]),
    /// The embedded engine's read buffer (an enum, not a trait object: a decode looks cells up
    /// several times per row, and a match costs less than a call through a vtable).
    Engine(RowView<'a>),
}

/// One cell version of a [`LentRow`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LentCell<'a> {
    /// Family.
    pub family: &'a [u8],
    /// Qualifier.
    pub qualifier: &'a [u8],
    /// Version timestamp in milliseconds.
    pub timestamp: u64,
    /// Value.
    pub value: &'a [u8],
}

impl std::fmt::Debug for LentRow<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LentRow").field("key", &self.key).field("cells", &self.cells().collect::<Vec<_>>()).finish()
    }
}

impl<'a> LentRow<'a> {
    /// A row the embedded engine lends from its read buffer.
    pub(crate) fn engine(view: RowView<'a>) -> Self {
        LentRow { key: view.row(), cells: Cells::Engine(view) }
    }

    /// The row key.
    pub fn key(&self) -> &'a [u8] {
        self.key
    }

    /// How many cells the row has.
    pub fn len(&self) -> usize {
        match self.cells {
            Cells::Owned(cells) => cells.len(),
            Cells::Engine(view) => view.len(),
        }
    }

    /// True if the row has no cells.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`-th cell.
    pub fn cell(&self, i: usize) -> Option<LentCell<'a>> {
        match self.cells {
            Cells::Owned(cells) => cells.get(i).map(owned_cell),
            Cells::Engine(view) => view.get(i).map(engine_cell),
        }
    }

    /// The cells, in family, qualifier, newest-first order.
    pub fn cells(&self) -> LentCells<'a> {
        match self.cells {
            Cells::Owned(cells) => LentCells(CellsLeft::Owned(cells.iter())),
            Cells::Engine(view) => LentCells(CellsLeft::Engine(view, 0..view.len())),
        }
    }

    /// The newest value of `family:qualifier`.
    pub fn value(&self, family: &str, qualifier: &str) -> Option<&'a [u8]> {
        self.value_at(family, qualifier, u64::MAX)
    }

    /// The value of `family:qualifier` as of `timestamp`: the newest version at or before it.
    pub fn value_at(&self, family: &str, qualifier: &str, timestamp: u64) -> Option<&'a [u8]> {
        let (family, qualifier) = (family.as_bytes(), qualifier.as_bytes());
        match self.cells {
            Cells::Owned(cells) => cells
                .iter()
                .find(|c| c.family == family && c.qualifier == qualifier && c.timestamp <= timestamp)
                .map(|c| &c.value[..]),
            Cells::Engine(view) => view.value_at(family, qualifier, timestamp),
        }
    }

    /// The newest version of `family:qualifier` at or before `timestamp`, with its timestamp.
    pub fn cell_at(&self, family: &str, qualifier: &str, timestamp: u64) -> Option<LentCell<'a>> {
        let (family, qualifier) = (family.as_bytes(), qualifier.as_bytes());
        self.cells().find(|c| c.family == family && c.qualifier == qualifier && c.timestamp <= timestamp)
    }

    /// An owned copy, in one allocation for the key and every cell's bytes (its pieces share
    /// it).
    pub fn to_row(&self) -> Row {
        let mut buf = bytes::BytesMut::with_capacity(
            self.key.len() + self.cells().map(|c| c.family.len() + c.qualifier.len() + c.value.len()).sum::<usize>(),
        );
        let mut piece = |bytes: &[u8]| {
            buf.extend_from_slice(bytes);
            buf.split().freeze()
        };
        let key = piece(self.key);
        let cells = self
            .cells()
            .map(|c| StoredCell {
                family: piece(c.family),
                qualifier: piece(c.qualifier),
                timestamp: c.timestamp,
                value: piece(c.value),
            })
            .collect();
        Row { key, cells }
    }
}

impl Row {
    /// The row, lent.
    pub fn lend(&self) -> LentRow<'_> {
        LentRow { key: &self.key, cells: Cells::Owned(&self.cells) }
    }
}

impl<'a> From<&'a Row> for LentRow<'a> {
    fn from(row: &'a Row) -> Self {
        row.lend()
    }
}

/// The rows of a scan, lent one at a time: [`RowCursor::advance`] moves to the next row and
/// [`RowCursor::row`] lends it until the next move. What [`Store::scan_cursor`](super::Store::scan_cursor)
/// returns.
pub trait RowCursor {
    /// Moves to the next row: `true` if there is one, `false` at the end.
    ///
    /// # Errors
    /// Store failures; the cursor then stays at its end.
    fn advance(&mut self) -> Result<bool>;

    /// The row the cursor is on; `None` before the first move and at the end.
    fn row(&self) -> Option<LentRow<'_>>;
}

/// The cells of a [`LentRow`], in order.
pub struct LentCells<'a>(CellsLeft<'a>);

enum CellsLeft<'a> {
    Owned(std::slice::Iter<'a, StoredCell>),
    Engine(RowView<'a>, std::ops::Range<usize>),
}

impl<'a> Iterator for LentCells<'a> {
    type Item = LentCell<'a>;

    fn next(&mut self) -> Option<LentCell<'a>> {
        match &mut self.0 {
            CellsLeft::Owned(cells) => cells.next().map(owned_cell),
            CellsLeft::Engine(view, at) => view.get(at.next()?).map(engine_cell),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = match &self.0 {
            CellsLeft::Owned(cells) => cells.len(),
            CellsLeft::Engine(_, at) => at.len(),
        };
        (n, Some(n))
    }
}

impl ExactSizeIterator for LentCells<'_> {}

fn owned_cell(c: &StoredCell) -> LentCell<'_> {
    LentCell { family: &c.family, qualifier: &c.qualifier, timestamp: c.timestamp, value: &c.value }
}

fn engine_cell(c: cellar_engine::CellRef<'_>) -> LentCell<'_> {
    LentCell { family: c.family, qualifier: c.qualifier, timestamp: c.timestamp, value: c.value }
}

/// A boxed [`RowCursor`], as stores return them.
pub type RowCursorBox<'a> = Box<dyn RowCursor + Send + 'a>;

/// A cursor over a stream of owned rows: the default [`Store::scan_cursor`](super::Store::scan_cursor).
pub(crate) struct StreamCursor<'a> {
    stream: RowStream<'a>,
    current: Option<Row>,
    /// The stream ended or failed.
    done: bool,
}

impl<'a> StreamCursor<'a> {
    pub(crate) fn new(stream: RowStream<'a>) -> Self {
        StreamCursor { stream, current: None, done: false }
    }
}

impl RowCursor for StreamCursor<'_> {
    fn advance(&mut self) -> Result<bool> {
        self.current = None;
        if self.done {
            return Ok(false);
        }
        match self.stream.next() {
            Some(Ok(row)) => self.current = Some(row),
            Some(Err(e)) => {
                self.done = true;
                return Err(e);
            }
            None => self.done = true,
        }
        Ok(self.current.is_some())
    }

    fn row(&self) -> Option<LentRow<'_>> {
        self.current.as_ref().map(Row::lend)
    }
}

/// The rows of a cursor, copied out: a stream of owned rows over a [`RowCursor`].
pub(crate) struct CursorRows<'a> {
    rows: RowCursorBox<'a>,
    done: bool,
}

impl<'a> CursorRows<'a> {
    pub(crate) fn new(rows: RowCursorBox<'a>) -> Self {
        CursorRows { rows, done: false }
    }
}

impl Iterator for CursorRows<'_> {
    type Item = Result<Row>;

    fn next(&mut self) -> Option<Result<Row>> {
        if self.done {
            return None;
        }
        match self.rows.advance() {
            Ok(true) => self.rows.row().map(|r| Ok(r.to_row())),
            Ok(false) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn cell(family: &'static str, qualifier: &'static str, timestamp: u64, value: &'static str) -> StoredCell {
        StoredCell {
            family: Bytes::from_static(family.as_bytes()),
            qualifier: Bytes::from_static(qualifier.as_bytes()),
            timestamp,
            value: Bytes::from_static(value.as_bytes()),
        }
    }

    fn row() -> Row {
        Row {
            key: Bytes::from_static(b"k1"),
            cells: vec![
                cell("d", "a", 20, "new"),
                cell("d", "a", 10, "old"),
                cell("d", "b", 5, "b"),
                cell("e", "a", 7, "e"),
            ],
        }
    }

    #[test]
    fn a_lent_row_reads_as_the_row_it_lends() {
        let owned = row();
        let lent = owned.lend();
        assert_eq!((lent.key(), lent.len()), (&b"k1"[..], 4));
        assert_eq!(lent.value("d", "a"), Some(&b"new"[..]));
        assert_eq!(lent.value_at("d", "a", 15), Some(&b"old"[..]));
        assert_eq!(lent.value_at("d", "a", 9), None);
        assert_eq!(lent.value("e", "a"), Some(&b"e"[..]));
        assert_eq!(lent.value("e", "b"), None);
        assert_eq!(lent.cell(4), None);
        assert_eq!(lent.to_row(), owned, "a copy holds the same cells");
    }

    #[test]
    fn a_stream_cursor_lends_each_row_then_stays_at_its_end() {
        let rows = vec![Ok(row()), Err(crate::Error::Unsupported("boom".into())), Ok(row())];
        let mut cursor = StreamCursor::new(Box::new(rows.into_iter()));
        assert!(cursor.row().is_none());
        assert!(cursor.advance().unwrap());
        assert_eq!(cursor.row().map(|r| r.to_row()), Some(row()));
        assert!(cursor.advance().is_err());
        assert!(cursor.row().is_none());
        assert!(!cursor.advance().unwrap(), "a failed cursor stays at its end");

        let mut empty = StreamCursor::new(Box::new(std::iter::empty()));
        assert!(!empty.advance().unwrap() && empty.row().is_none());
    }

    #[test]
    fn a_cursor_read_as_a_stream_copies_each_row_and_ends_at_an_error() {
        let rows = vec![Ok(row()), Err(crate::Error::Unsupported("boom".into())), Ok(row())];
        let cursor = StreamCursor::new(Box::new(rows.into_iter()));
        let read: Vec<_> = CursorRows::new(Box::new(cursor)).collect();
        assert_eq!(read.len(), 2, "the stream ends at the error");
        assert_eq!(read[0].as_ref().ok(), Some(&row()));
        assert!(read[1].is_err());
    }
}
