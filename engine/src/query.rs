//! Read operations, named after the HBase client API: [`Get`] and [`Scan`], their shared
//! [`ReadSpec`], and the [`RowResult`] they return.

use std::ops::Bound;

use bytes::Bytes;

use crate::cell::Cell;
use crate::filter::Filter;

/// A half-open range of timestamps `[min, max)` in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    /// Inclusive lower bound.
    pub min: u64,
    /// Exclusive upper bound.
    pub max: u64,
}

impl TimeRange {
    /// Every timestamp.
    pub const ALL: TimeRange = TimeRange { min: 0, max: u64::MAX };

    /// `[min, max)`.
    pub fn new(min: u64, max: u64) -> Self {
        TimeRange { min, max }
    }

    /// True if `ts` lies in the range.
    pub fn contains(&self, ts: u64) -> bool {
        ts >= self.min && ts < self.max
    }
}

/// Which columns a read returns: whole families, or single columns of a family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ColumnSelection {
    /// (family, qualifier); `None` qualifier selects the whole family.
    pub entries: Vec<(Bytes, Option<Bytes>)>,
}

impl ColumnSelection {
    /// True when nothing was selected, meaning "every family".
    pub fn is_all(&self) -> bool {
        self.entries.is_empty()
    }

    /// The qualifiers selected in `family`: `None` = every qualifier; `Some(empty)` = family
    /// not selected.
    pub fn qualifiers(&self, family: &[u8]) -> Option<Vec<&Bytes>> {
        if self.is_all() {
            return None;
        }
        let mut out = Vec::new();
        for (f, q) in &self.entries {
            if f.as_ref() == family {
                match q {
                    None => return None,
                    Some(q) => out.push(q),
                }
            }
        }
        out.sort();
        out.dedup();
        Some(out)
    }
}

/// The read options Get and Scan share.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadSpec {
    pub(crate) columns: ColumnSelection,
    pub(crate) time_range: TimeRange,
    pub(crate) max_versions: u32,
    pub(crate) raw: bool,
    pub(crate) filter: Option<Filter>,
}

impl Default for ReadSpec {
    fn default() -> Self {
        ReadSpec {
            columns: ColumnSelection { entries: Vec::new() },
            time_range: TimeRange::ALL,
            max_versions: 1,
            raw: false,
            filter: None,
        }
    }
}

macro_rules! read_spec_builders {
    ($ty:ident) => {
        impl $ty {
            /// Restricts the read to a whole family (repeatable).
            pub fn family(mut self, family: impl Into<Bytes>) -> Self {
                self.spec.columns.entries.push((family.into(), None));
                self
            }

            /// Restricts the read to one column (repeatable).
            pub fn column(mut self, family: impl Into<Bytes>, qualifier: impl Into<Bytes>) -> Self {
                self.spec.columns.entries.push((family.into(), Some(qualifier.into())));
                self
            }

            /// Returns only versions with timestamps in `[min, max)`.
            pub fn time_range(mut self, min: u64, max: u64) -> Self {
                self.spec.time_range = TimeRange::new(min, max);
                self
            }

            /// Returns only the version at exactly `ts`.
            pub fn timestamp(mut self, ts: u64) -> Self {
                self.spec.time_range = TimeRange::new(ts, ts.saturating_add(1));
                self
            }

            /// Returns up to `n` versions per column (default 1; capped by the family's
            /// max versions).
            pub fn max_versions(mut self, n: u32) -> Self {
                self.spec.max_versions = n.max(1);
                self
            }

            /// Returns all versions the family keeps.
            pub fn all_versions(self) -> Self {
                self.max_versions(u32::MAX)
            }

            /// Applies a filter.
            pub fn filter(mut self, filter: Filter) -> Self {
                self.spec.filter = Some(filter);
                self
            }
        }
    };
}

/// Reads one row.
#[derive(Debug, Clone, PartialEq)]
pub struct Get {
    pub(crate) row: Bytes,
    pub(crate) spec: ReadSpec,
}

impl Get {
    /// A get of `row`: the latest version of every column.
    pub fn new(row: impl Into<Bytes>) -> Self {
        Get { row: row.into(), spec: ReadSpec::default() }
    }

    /// The row key.
    pub fn row(&self) -> &[u8] {
        &self.row
    }
}

read_spec_builders!(Get);

/// Reads a range of rows in key order (or reverse key order).
#[derive(Debug, Clone, PartialEq)]
pub struct Scan {
    pub(crate) start: Option<Bytes>,
    pub(crate) stop: Option<Bytes>,
    pub(crate) prefix: Option<Bytes>,
    pub(crate) reversed: bool,
    pub(crate) limit: Option<usize>,
    pub(crate) batch: Option<usize>,
    pub(crate) spec: ReadSpec,
}

impl Default for Scan {
    fn default() -> Self {
        Self::new()
    }
}

impl Scan {
    /// A scan of the whole table.
    pub fn new() -> Self {
        Scan {
            start: None,
            stop: None,
            prefix: None,
            reversed: false,
            limit: None,
            batch: None,
            spec: ReadSpec::default(),
        }
    }

    /// First row to return (inclusive). For a reversed scan, the largest row returned.
    pub fn start(mut self, row: impl Into<Bytes>) -> Self {
        self.start = Some(row.into());
        self
    }

    /// Row to stop before (exclusive). For a reversed scan, the smallest bound, exclusive.
    pub fn stop(mut self, row: impl Into<Bytes>) -> Self {
        self.stop = Some(row.into());
        self
    }

    /// Returns only rows starting with `prefix` (combined with start and stop, if set).
    pub fn prefix(mut self, prefix: impl Into<Bytes>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Scans from the largest row down to the smallest.
    pub fn reversed(mut self, reversed: bool) -> Self {
        self.reversed = reversed;
        self
    }

    /// Returns at most `n` rows.
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    /// Splits wide rows into results of at most `n` cells.
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = Some(n.max(1));
        self
    }

    /// Returns delete markers and every cell not yet removed by compaction.
    pub fn raw(mut self, raw: bool) -> Self {
        self.spec.raw = raw;
        self
    }
}

read_spec_builders!(Scan);

impl Scan {
    /// The rows this scan covers, as `(lower, upper)` bounds in key order whatever the
    /// direction: HBase's reversed scans start at the larger key.
    pub(crate) fn row_range(&self) -> RowRange {
        let (mut lo, mut hi) = if self.reversed {
            (
                self.stop.clone().map_or(Bound::Unbounded, Bound::Excluded),
                self.start.clone().map_or(Bound::Unbounded, Bound::Included),
            )
        } else {
            (
                self.start.clone().map_or(Bound::Unbounded, Bound::Included),
                self.stop.clone().map_or(Bound::Unbounded, Bound::Excluded),
            )
        };
        if let Some(prefix) = &self.prefix {
            if lower_is_below(&lo, prefix) {
                lo = Bound::Included(prefix.clone());
            }
            if let Some(succ) = prefix_successor(prefix) {
                let succ = Bytes::from(succ);
                let tighter = match &hi {
                    Bound::Unbounded => true,
                    Bound::Included(h) | Bound::Excluded(h) => succ <= *h,
                };
                if tighter {
                    hi = Bound::Excluded(succ);
                }
            }
        }
        RowRange { lo, hi }
    }
}

fn lower_is_below(lo: &Bound<Bytes>, key: &[u8]) -> bool {
    match lo {
        Bound::Unbounded => true,
        Bound::Included(l) => l.as_ref() < key,
        Bound::Excluded(l) => l.as_ref() < key,
    }
}

/// A range of row keys in key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RowRange {
    pub lo: Bound<Bytes>,
    pub hi: Bound<Bytes>,
}

impl RowRange {
    /// True if `row` is above the lower bound.
    pub fn above_lo(&self, row: &[u8]) -> bool {
        match &self.lo {
            Bound::Unbounded => true,
            Bound::Included(l) => row >= l.as_ref(),
            Bound::Excluded(l) => row > l.as_ref(),
        }
    }

    /// True if `row` is below the upper bound.
    pub fn below_hi(&self, row: &[u8]) -> bool {
        match &self.hi {
            Bound::Unbounded => true,
            Bound::Included(h) => row <= h.as_ref(),
            Bound::Excluded(h) => row < h.as_ref(),
        }
    }

    /// True if the range may hold rows of the region `[start, end)` (empty = unbounded).
    /// With an excluded lower bound it may answer true for a region holding none of the range.
    pub fn overlaps(&self, start: &[u8], end: &[u8]) -> bool {
        let starts_before_hi = start.is_empty() || self.below_hi(start);
        let ends_after_lo = end.is_empty()
            || match &self.lo {
                Bound::Unbounded => true,
                Bound::Included(l) | Bound::Excluded(l) => l.as_ref() < end,
            };
        starts_before_hi && ends_after_lo
    }

    /// True if `row` lies in the range.
    #[cfg(test)]
    pub fn contains(&self, row: &[u8]) -> bool {
        self.above_lo(row) && self.below_hi(row)
    }
}

/// Kept under `query` for the public path `cellar_engine::query::prefix_successor`; defined
/// with the key helpers in [`crate::cell`], where filters use it too.
pub use crate::cell::prefix_successor;

/// The cells of one row returned by a read, in family, qualifier, newest-first order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RowResult {
    /// Row key.
    pub row: Bytes,
    /// Cells of the row.
    pub cells: Vec<Cell>,
}

impl RowResult {
    /// True if the row has no cells (a Get of a missing row).
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// The newest value of `family:qualifier`.
    pub fn value(&self, family: &[u8], qualifier: &[u8]) -> Option<&Bytes> {
        self.cells.iter().find(|c| c.view().is_value_of(family, qualifier)).map(|c| &c.value)
    }

    /// Every returned version of `family:qualifier`, newest first.
    pub fn versions<'a>(&'a self, family: &'a [u8], qualifier: &'a [u8]) -> impl Iterator<Item = &'a Cell> + 'a {
        self.cells.iter().filter(move |c| c.family.as_ref() == family && c.qualifier.as_ref() == qualifier)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_overlap_the_regions_that_can_hold_their_rows() {
        let range = |lo: Bound<&str>, hi: Bound<&str>| RowRange {
            lo: lo.map(|l| Bytes::copy_from_slice(l.as_bytes())),
            hi: hi.map(|h| Bytes::copy_from_slice(h.as_bytes())),
        };
        let r = range(Bound::Included("c"), Bound::Excluded("m"));
        assert!(r.overlaps(b"", b""), "the only region");
        assert!(r.overlaps(b"", b"d") && r.overlaps(b"f", b"g") && r.overlaps(b"l", b""));
        assert!(!r.overlaps(b"", b"c"), "ends where the range starts");
        assert!(!r.overlaps(b"m", b""), "starts where the range ends");
        assert!(range(Bound::Included("c"), Bound::Included("m")).overlaps(b"m", b""), "inclusive end");
        let open = range(Bound::Unbounded, Bound::Unbounded);
        assert!(open.overlaps(b"a", b"b"));
    }

    #[test]
    fn successor_of_prefix() {
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_successor(b"\xff\xff"), None);
        assert_eq!(prefix_successor(b""), None);
    }

    #[test]
    fn reversed_range_and_prefix() {
        let s = Scan::new().reversed(true).start("m").stop("c").prefix("d");
        let r = s.row_range();
        assert!(r.contains(b"d") && r.contains(b"dz"));
        assert!(!r.contains(b"c") && !r.contains(b"e"));
        let f = Scan::new().start("b").stop("x");
        let r = f.row_range();
        assert!(r.contains(b"b") && !r.contains(b"x") && !r.contains(b"a"));
    }

    #[test]
    fn column_selection_by_family() {
        let s = ColumnSelection {
            entries: vec![
                (Bytes::from_static(b"f"), Some(Bytes::from_static(b"b"))),
                (Bytes::from_static(b"f"), Some(Bytes::from_static(b"a"))),
                (Bytes::from_static(b"g"), None),
            ],
        };
        assert_eq!(s.qualifiers(b"f").unwrap(), vec![&Bytes::from_static(b"a"), &Bytes::from_static(b"b")]);
        assert!(s.qualifiers(b"g").is_none());
        assert!(s.qualifiers(b"h").unwrap().is_empty());
    }
}
