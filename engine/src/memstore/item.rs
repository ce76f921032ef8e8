//! The skiplist's items ([`MemCell`]): one cell, or a run of cells, encoded once into a slice
//! of the memstore's arena, and how items order (by their row's [`Tag`] first).

use std::cmp::Ordering;

use bytes::Bytes;

use super::list::{self, Tag, Tagged};
use crate::cell::{same_bytes, CellType, KeyView};
use crate::sst::format::get_varint;
#[cfg(doc)]
use crate::sst::format::put_varint;

/// Encoded item header: row length (u16), timestamp (u64), sequence number (u64), TTL flag
/// (u8) and TTL in ms (u64), little-endian, at these offsets. The row follows, then each cell
/// of the item: qualifier length and value length (LEB128 varints), qualifier, value. The
/// cells of a run share everything but their qualifiers and values, which is all they store:
/// a ten-column YCSB record takes about 1 130 bytes instead of the 1 640 it took with a
/// header and the row in every cell.
const TS_AT: usize = 2;
const SEQ_AT: usize = 10;
const TTL_FLAG_AT: usize = 18;
const TTL_AT: usize = 19;
pub(super) const HEADER_LEN: usize = 27;

/// The most cells a run holds ([`MemCell`]); a put with more goes in a cell at a time (a seek
/// into a run reads its cells from the first).
pub(super) const MAX_RUN: usize = 64;

fn le_u16(b: &[u8]) -> u16 {
    u16::from_le_bytes([b[0], b[1]])
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

/// The first 24 bytes of a row, zero-padded, as three big-endian numbers compared in order:
/// when two rows' prefixes differ, they order the rows exactly as a byte-wise comparison would.
/// A comparison settled here never leaves the list's nodes (it is the cells' [`Tag`]), and rows
/// of one table often share a long start: an index row begins with a record type and the
/// index's name, and the values after it must still differ within the prefix (with sixteen
/// bytes, emails under `by_email` tied on `user123` and every tie read the arena).
fn row_prefix(row: &[u8]) -> Tag {
    let word = |from: usize| {
        let mut a = [0u8; 8];
        let bytes = row.get(from..).unwrap_or_default();
        let n = bytes.len().min(8);
        a[..n].copy_from_slice(&bytes[..n]);
        u64::from_be_bytes(a)
    };
    [word(0), word(8), word(16)]
}

/// Bytes [`put_varint`] takes for `v`.
pub(super) fn varint_len(v: usize) -> usize {
    (usize::BITS - (v | 1).leading_zeros()).div_ceil(7) as usize
}

/// One cell of an encoded item: its qualifier, its value, and where the next cell starts.
pub(super) struct EncodedCell<'a> {
    pub(super) qualifier: &'a [u8],
    pub(super) value: &'a [u8],
    pub(super) end: usize,
}

/// An encoded item, a slice of the arena: header, row, cells.
#[derive(Clone, Copy)]
pub(super) struct Encoded<'a>(&'a [u8]);

impl<'a> Encoded<'a> {
    pub(super) fn row_end(self) -> usize {
        HEADER_LEN + usize::from(le_u16(self.0))
    }

    pub(super) fn row(self) -> &'a [u8] {
        &self.0[HEADER_LEN..self.row_end()]
    }

    /// The cells' bytes, after the header and the row.
    pub(super) fn cells(self) -> &'a [u8] {
        &self.0[self.row_end()..]
    }

    /// The cell starting `at` bytes into [`Encoded::cells`].
    pub(super) fn cell(self, at: usize) -> EncodedCell<'a> {
        let cells = self.cells();
        let mut pos = at;
        // The arena holds what `encode` wrote: the lengths are there.
        let mut length = || get_varint(cells, &mut pos).unwrap_or(0) as usize;
        let (qualifier_len, value_len) = (length(), length());
        let value_at = pos + qualifier_len;
        let end = value_at + value_len;
        EncodedCell { qualifier: &cells[pos..value_at], value: &cells[value_at..end], end }
    }

    pub(super) fn view(self, at: usize, kind: CellType) -> KeyView<'a> {
        KeyView {
            row: self.row(),
            qualifier: self.cell(at).qualifier,
            ts: le_u64(&self.0[TS_AT..]),
            kind,
            seq: le_u64(&self.0[SEQ_AT..]),
        }
    }

    pub(super) fn ttl_ms(self) -> Option<u64> {
        (self.0[TTL_FLAG_AT] != 0).then(|| le_u64(&self.0[TTL_AT..]))
    }
}

/// The skiplist's item: one cell in the arena, or a *run*: the cells one put wrote into a row
/// the memstore did not hold (all puts, one row, one sequence number, one timestamp and TTL,
/// in key order), after their shared header and row in one slice. A run orders as its first
/// cell. A load's rows then cost one node each instead of one a column, and their cells sit
/// together; the first later write to such a row splits the run into items of one cell each
/// that share the run's bytes ([`Memstore::split_run`](super::Memstore::split_run)).
#[derive(Debug)]
pub(crate) struct MemCell {
    /// The cell's type; a run's cells are puts.
    pub(super) kind: CellType,
    /// [`WHOLE`]: every cell `bytes` holds. Otherwise the item is the one cell starting this
    /// many bytes into the cells of the run `bytes` holds.
    pub(super) part: u32,
    /// The encoded cell, or a run, in one slice of an arena chunk.
    pub(super) bytes: Bytes,
}

/// [`MemCell::part`] of an item that is all of its bytes.
pub(super) const WHOLE: u32 = u32::MAX;

impl MemCell {
    pub(super) fn whole(kind: CellType, bytes: Bytes) -> Self {
        MemCell { kind, part: WHOLE, bytes }
    }

    pub(super) fn encoded(&self) -> Encoded<'_> {
        Encoded(&self.bytes)
    }

    /// Where the item's first cell starts in its bytes' cells.
    pub(super) fn first_at(&self) -> usize {
        if self.part == WHOLE {
            0
        } else {
            self.part as usize
        }
    }

    /// Where the item's last cell ends in its bytes' cells.
    pub(super) fn end(&self) -> usize {
        if self.part == WHOLE {
            self.encoded().cells().len()
        } else {
            self.next_at(self.part as usize)
        }
    }

    /// The key of the cell starting `at` bytes into the cells of the item's bytes.
    pub(super) fn view_at(&self, at: usize) -> KeyView<'_> {
        self.encoded().view(at, self.kind)
    }

    /// The first cell's key: a run's place in the list.
    pub fn view(&self) -> KeyView<'_> {
        self.view_at(self.first_at())
    }

    /// The row, without decoding a cell.
    pub(super) fn row(&self) -> &[u8] {
        self.encoded().row()
    }

    pub(super) fn value_at(&self, at: usize) -> &[u8] {
        self.encoded().cell(at).value
    }

    /// Where the cell after the one at `at` starts; at [`MemCell::end`] after the item's last.
    pub(super) fn next_at(&self, at: usize) -> usize {
        self.encoded().cell(at).end
    }

    /// True for an item of several cells.
    pub(super) fn is_run(&self) -> bool {
        self.part == WHOLE && self.next_at(0) < self.end()
    }

    /// Offsets of the item's cells.
    pub(super) fn offsets(&self) -> impl Iterator<Item = usize> + '_ {
        let end = self.end();
        std::iter::successors(Some(self.first_at()), move |&at| Some(self.next_at(at)).filter(|&next| next < end))
    }
}

/// True if cells can go in as a run: puts into one row by one mutation (one sequence number)
/// at one timestamp and TTL, in strictly increasing key order. A batch of mutations of one
/// row, a put naming a column twice, or one of several timestamps, goes in a cell at a time
/// instead (where a column named twice at one timestamp keeps the later value).
pub(super) fn is_run<'k>(mut cells: impl Iterator<Item = (KeyView<'k>, &'k [u8], Option<u64>)>) -> bool {
    let Some((mut last, _, ttl)) = cells.next() else { return false };
    if last.kind != CellType::Put {
        return false;
    }
    cells.all(|(k, _, cell_ttl)| {
        let fits = k.kind == CellType::Put
            && k.seq == last.seq
            && k.ts == last.ts
            && cell_ttl == ttl
            && same_bytes(k.row, last.row)
            && last.cmp_internal(&k) == Ordering::Less;
        last = k;
        fits
    })
}

/// A seek target, with its row prefix worked out once.
pub(super) struct Probe<'a> {
    pub(super) prefix: Tag,
    pub(super) key: KeyView<'a>,
}

impl<'a> Probe<'a> {
    pub(super) fn new(key: KeyView<'a>) -> Self {
        Probe { prefix: row_prefix(key.row), key }
    }

    /// `cell.cmp(target)` for a cell whose row prefix ties the target's: what the list's
    /// searches take with the prefix.
    pub(super) fn order(&self, cell: &MemCell) -> Ordering {
        cell.view().cmp_internal(&self.key)
    }
}

impl PartialEq for MemCell {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for MemCell {}
impl PartialOrd for MemCell {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for MemCell {
    fn cmp(&self, other: &Self) -> Ordering {
        self.view().cmp_internal(&other.view())
    }
}

/// A cell's tag is its row's prefix: comparisons between rows that differ in their first
/// 24 bytes never leave the list's nodes.
impl Tagged for MemCell {
    fn tag(&self) -> Tag {
        row_prefix(self.row())
    }

    /// The header, the row and the first cell: the first two cache lines of the bytes (a
    /// run's later cells follow in order, which the CPU's own prefetcher picks up).
    fn prefetch(&self) {
        let at = self.bytes.as_ptr();
        list::prefetch(at);
        list::prefetch(at.wrapping_add(64));
    }
}
