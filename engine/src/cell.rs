//! Cells, cell types and the engine's key order.
//!
//! A cell is one timestamped version of one column of one row. Inside a family the engine keeps
//! cells in HBase's order: row ascending, qualifier ascending, timestamp descending, delete
//! markers before puts at the same timestamp, then sequence number descending (newest write
//! first). Memstores and SSTables both sort by [`KeyView::cmp_internal`].

use std::cmp::Ordering;

use bytes::Bytes;

/// Longest row key the engine accepts, as in HBase (`Short.MAX_VALUE`).
pub const MAX_ROW_KEY_LEN: usize = 32767;

/// Largest value the engine accepts in one cell (32 MiB); larger objects belong in a blob
/// store with a reference in the row.
pub const MAX_VALUE_LEN: usize = 32 * 1024 * 1024;

/// Largest total size of the cells of one write (just under the log's 256 MiB record limit).
pub const MAX_WRITE_LEN: usize = 256 * 1024 * 1024 - 1024;

/// Timestamp meaning "latest", resolved to the engine clock when a mutation is applied.
pub const LATEST_TIMESTAMP: u64 = u64::MAX;

/// The five HBase cell types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CellType {
    /// A value.
    Put,
    /// Masks one version of a column: the cells at exactly this timestamp.
    Delete,
    /// Masks every version of a column at or before this timestamp.
    DeleteColumn,
    /// Masks every column of the family at exactly this timestamp.
    DeleteFamilyVersion,
    /// Masks every column of the family at or before this timestamp.
    DeleteFamily,
}

impl CellType {
    /// The HBase type code; stored on disk, and larger codes sort first.
    pub const fn code(self) -> u8 {
        match self {
            CellType::Put => 4,
            CellType::Delete => 8,
            CellType::DeleteFamilyVersion => 10,
            CellType::DeleteColumn => 12,
            CellType::DeleteFamily => 14,
        }
    }

    /// Inverse of [`CellType::code`].
    pub const fn from_code(code: u8) -> Option<CellType> {
        Some(match code {
            4 => CellType::Put,
            8 => CellType::Delete,
            10 => CellType::DeleteFamilyVersion,
            12 => CellType::DeleteColumn,
            14 => CellType::DeleteFamily,
            _ => return None,
        })
    }

    /// True for the four delete-marker types.
    pub const fn is_delete(self) -> bool {
        !matches!(self, CellType::Put)
    }

    /// True for markers that apply to every column of a family.
    pub const fn is_family_delete(self) -> bool {
        matches!(self, CellType::DeleteFamily | CellType::DeleteFamilyVersion)
    }

    /// The name HBase's shell prints for this type.
    pub const fn name(self) -> &'static str {
        match self {
            CellType::Put => "Put",
            CellType::Delete => "Delete",
            CellType::DeleteColumn => "DeleteColumn",
            CellType::DeleteFamilyVersion => "DeleteFamilyVersion",
            CellType::DeleteFamily => "DeleteFamily",
        }
    }
}

/// One cell as returned to callers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    /// Row key.
    pub row: Bytes,
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

impl Cell {
    /// This cell as a [`CellRef`] borrowing its bytes.
    pub fn view(&self) -> CellRef<'_> {
        CellRef {
            row: &self.row,
            family: &self.family,
            qualifier: &self.qualifier,
            timestamp: self.timestamp,
            cell_type: self.cell_type,
            value: &self.value,
        }
    }
}

/// One cell as lent to a visitor by [`Table::scan_with`](crate::Table::scan_with): the same
/// fields as [`Cell`], borrowed from the read's buffer for the duration of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellRef<'a> {
    /// Row key.
    pub row: &'a [u8],
    /// Column family name.
    pub family: &'a [u8],
    /// Column qualifier.
    pub qualifier: &'a [u8],
    /// Version timestamp in milliseconds.
    pub timestamp: u64,
    /// Put or one of the delete markers (markers appear only in raw reads).
    pub cell_type: CellType,
    /// The value; empty for delete markers.
    pub value: &'a [u8],
}

impl CellRef<'_> {
    /// True if this is a value (not a delete marker) of column `family:qualifier`.
    pub fn is_value_of(&self, family: &[u8], qualifier: &[u8]) -> bool {
        self.family == family && self.qualifier == qualifier && !self.cell_type.is_delete()
    }

    /// An owned copy of the cell.
    pub fn to_cell(&self) -> Cell {
        Cell {
            row: Bytes::copy_from_slice(self.row),
            family: Bytes::copy_from_slice(self.family),
            qualifier: Bytes::copy_from_slice(self.qualifier),
            timestamp: self.timestamp,
            cell_type: self.cell_type,
            value: Bytes::copy_from_slice(self.value),
        }
    }
}

/// A borrowed view of a cell's key inside one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyView<'a> {
    /// Row key.
    pub row: &'a [u8],
    /// Qualifier.
    pub qualifier: &'a [u8],
    /// Timestamp (ms).
    pub ts: u64,
    /// Cell type.
    pub kind: CellType,
    /// Write sequence number.
    pub seq: u64,
}

impl KeyView<'_> {
    /// The engine's cell order (see the module docs).
    pub fn cmp_internal(&self, other: &KeyView<'_>) -> Ordering {
        cmp_bytes(self.row, other.row).then_with(|| self.cmp_within_row(other))
    }

    /// [`KeyView::cmp_internal`] of two keys of one row.
    pub fn cmp_within_row(&self, other: &KeyView<'_>) -> Ordering {
        cmp_bytes(self.qualifier, other.qualifier)
            .then_with(|| other.ts.cmp(&self.ts))
            .then_with(|| other.kind.code().cmp(&self.kind.code()))
            .then_with(|| other.seq.cmp(&self.seq))
    }

    /// The first possible key of `row`: every cell of the row sorts at or after it.
    pub fn first_of_row(row: &[u8]) -> KeyView<'_> {
        KeyView { row, qualifier: &[], ts: u64::MAX, kind: CellType::DeleteFamily, seq: u64::MAX }
    }

    /// True if this is [`KeyView::first_of_row`] of its row.
    pub fn is_first_of_row(&self) -> bool {
        self.qualifier.is_empty() && self.ts == u64::MAX && self.kind == CellType::DeleteFamily && self.seq == u64::MAX
    }

    /// The first possible key of column `qualifier` in `row`.
    pub fn first_of_column<'a>(row: &'a [u8], qualifier: &'a [u8]) -> KeyView<'a> {
        KeyView { row, qualifier, ts: u64::MAX, kind: CellType::DeleteFamily, seq: u64::MAX }
    }
}

/// Byte-wise order of two byte strings. An empty side is settled by the lengths: comparing
/// with an empty slice still calls `memcmp` (for zero bytes), and glibc's AVX-512 `memcmp`
/// then makes a masked load at the empty slice's address — often a dangling one, such as the
/// empty qualifier of [`KeyView::first_of_row`] that every row seek compares with — which some
/// CPUs (the AMD EPYC bench VM) handle with a slow fault-suppression assist, about 100 ns.
#[inline]
pub(crate) fn cmp_bytes(a: &[u8], b: &[u8]) -> Ordering {
    if a.is_empty() || b.is_empty() {
        a.len().cmp(&b.len())
    } else {
        a.cmp(b)
    }
}

/// Byte-string equality for the short rows and qualifiers a read compares several times per
/// cell: loads the bytes as a few overlapping words instead of calling `memcmp`, whose call
/// costs more than such a comparison.
#[inline]
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0..4 => a.iter().zip(b).all(|(x, y)| x == y),
        4..8 => a.first_chunk::<4>() == b.first_chunk::<4>() && a.last_chunk::<4>() == b.last_chunk::<4>(),
        8..16 => a.first_chunk::<8>() == b.first_chunk::<8>() && a.last_chunk::<8>() == b.last_chunk::<8>(),
        16..=32 => a.first_chunk::<16>() == b.first_chunk::<16>() && a.last_chunk::<16>() == b.last_chunk::<16>(),
        _ => a == b,
    }
}

/// Renders bytes the way HBase's `Bytes.toStringBinary` does: printable ASCII as is,
/// everything else as `\xNN`.
pub fn to_printable(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if (0x20..0x7f).contains(&b) && b != b'\\' {
            out.push(b as char);
        } else {
            out.push_str(&format!("\\x{b:02X}"));
        }
    }
    out
}

/// The smallest key greater than every key starting with `prefix`, or `None` if there is none
/// (the prefix is empty or all `0xFF`).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Checks a row key against the engine's limits.
pub(crate) fn check_row(row: &[u8]) -> crate::Result<()> {
    if row.is_empty() {
        return Err(crate::Error::invalid("row", "row key must not be empty"));
    }
    if row.len() > MAX_ROW_KEY_LEN {
        return Err(crate::Error::invalid(
            "row",
            format!("row key is {} bytes; the limit is {MAX_ROW_KEY_LEN}", row.len()),
        ));
    }
    Ok(())
}

/// Checks a value against [`MAX_VALUE_LEN`].
pub(crate) fn check_value(value: &[u8]) -> crate::Result<()> {
    if value.len() > MAX_VALUE_LEN {
        return Err(crate::Error::invalid(
            "value",
            format!("value is {} bytes; the limit is {MAX_VALUE_LEN}", value.len()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length the word-wise comparison splits on, with a difference at every position.
    #[test]
    fn cmp_bytes_agrees_with_slice_order() {
        let strings: [&[u8]; 7] = [&[], b"", b"\x00", b"a", b"ab", b"b", b"\xff\x00"];
        for a in strings {
            for b in strings {
                assert_eq!(cmp_bytes(a, b), a.cmp(b), "{a:?} against {b:?}");
            }
        }
    }

    #[test]
    fn same_bytes_agrees_with_slice_equality() {
        for n in 0..48usize {
            let a: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(37)).collect();
            assert!(same_bytes(&a, &a.clone()), "len {n}");
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x01;
                assert!(!same_bytes(&a, &b), "len {n}, differs at {at}");
            }
            assert!(!same_bytes(&a, &[a.as_slice(), &[0]].concat()), "len {n} vs {}", n + 1);
        }
    }

    fn key(row: &'static [u8], q: &'static [u8], ts: u64, kind: CellType, seq: u64) -> KeyView<'static> {
        KeyView { row, qualifier: q, ts, kind, seq }
    }

    #[test]
    fn order_is_row_qualifier_then_newest_first() {
        let mut keys = [
            key(b"r2", b"a", 5, CellType::Put, 1),
            key(b"r1", b"b", 5, CellType::Put, 1),
            key(b"r1", b"a", 3, CellType::Put, 1),
            key(b"r1", b"a", 5, CellType::Put, 1),
            key(b"r1", b"a", 5, CellType::DeleteColumn, 2),
            key(b"r1", b"a", 5, CellType::Put, 7),
            key(b"r1", b"", 9, CellType::DeleteFamily, 3),
        ];
        keys.sort_by(|a, b| a.cmp_internal(b));
        let got: Vec<_> = keys.iter().map(|k| (k.row, k.qualifier, k.ts, k.kind, k.seq)).collect();
        assert_eq!(
            got,
            vec![
                (&b"r1"[..], &b""[..], 9, CellType::DeleteFamily, 3),
                (b"r1", b"a", 5, CellType::DeleteColumn, 2),
                (b"r1", b"a", 5, CellType::Put, 7),
                (b"r1", b"a", 5, CellType::Put, 1),
                (b"r1", b"a", 3, CellType::Put, 1),
                (b"r1", b"b", 5, CellType::Put, 1),
                (b"r2", b"a", 5, CellType::Put, 1),
            ]
        );
    }

    #[test]
    fn first_of_row_precedes_every_cell_of_the_row() {
        let first = KeyView::first_of_row(b"r");
        for kind in [CellType::Put, CellType::DeleteFamily, CellType::Delete] {
            let k = key(b"r", b"", u64::MAX, kind, u64::MAX);
            assert_ne!(first.cmp_internal(&k), Ordering::Greater);
        }
    }

    #[test]
    fn type_codes_round_trip() {
        for t in [
            CellType::Put,
            CellType::Delete,
            CellType::DeleteColumn,
            CellType::DeleteFamily,
            CellType::DeleteFamilyVersion,
        ] {
            assert_eq!(CellType::from_code(t.code()), Some(t));
        }
        assert_eq!(CellType::from_code(0), None);
    }

    #[test]
    fn printable_escapes_binary() {
        assert_eq!(to_printable(b"ab\x00\x01z"), "ab\\x00\\x01z");
        assert_eq!(to_printable(&1u64.to_be_bytes()), "\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x01");
    }

    #[test]
    fn row_limits() {
        assert!(check_row(b"").is_err());
        assert!(check_row(&vec![b'a'; MAX_ROW_KEY_LEN]).is_ok());
        assert!(check_row(&vec![b'a'; MAX_ROW_KEY_LEN + 1]).is_err());
    }
}
