//! Server-side filters for Get and Scan.
//!
//! A filter sees the visible cells of one row (after delete masking, versions, TTL and time
//! range) and decides which of them are returned; a row whose cells are all filtered out is
//! not returned at all. `KeyOnly` strips values and `Page` bounds the number of rows.
//!
//! Filters on qualifiers also tell a read where in a row it may seek (a `ColumnWindow`): a
//! column range or page of a row with a million columns reads the blocks that hold the slice,
//! not the row.

use bytes::Bytes;

use crate::cell::CellRef;
use crate::mutation::CompareOp;

/// A filter over the cells of a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// Rows whose key starts with the prefix.
    Prefix(Bytes),
    /// Cells whose qualifier starts with the prefix.
    ColumnPrefix(Bytes),
    /// Cells whose qualifier compares to the operand (`qualifier OP operand`).
    Qualifier(CompareOp, Bytes),
    /// Cells whose value compares to the operand (`value OP operand`).
    Value(CompareOp, Bytes),
    /// Whole rows, by the latest value of one column.
    SingleColumnValue {
        /// Family of the tested column.
        family: Bytes,
        /// Qualifier of the tested column.
        qualifier: Bytes,
        /// Comparison `value OP operand`.
        op: CompareOp,
        /// The operand.
        value: Bytes,
        /// Drop rows that lack the column (otherwise they pass).
        filter_if_missing: bool,
    },
    /// At most this many rows.
    Page(usize),
    /// Return keys with empty values.
    KeyOnly,
    /// Only the first cell of each row (counting rows cheaply).
    FirstKeyOnly,
    /// Rows inside any of the `[start, stop)` ranges; an empty stop means "to the end".
    MultiRowRange(Vec<(Bytes, Bytes)>),
    /// Cells whose qualifier lies between two bounds (HBase's ColumnRangeFilter); `None` leaves
    /// that side open.
    ColumnRange {
        /// Lower bound.
        min: Option<Bytes>,
        /// Whether the lower bound itself is in the range.
        min_inclusive: bool,
        /// Upper bound.
        max: Option<Bytes>,
        /// Whether the upper bound itself is in the range.
        max_inclusive: bool,
    },
    /// At most `limit` columns of each row, from an offset (HBase's ColumnPaginationFilter).
    /// Columns count in the order a row is read (family, then qualifier), each once whatever
    /// its versions.
    ColumnPagination {
        /// Columns returned per row.
        limit: usize,
        /// Where the page starts.
        offset: ColumnOffset,
    },
    /// Cells every sub-filter keeps, each sub-filter seeing the cells the ones before it kept
    /// (so a page counts only the columns the filters before it let through).
    And(Vec<Filter>),
    /// Cells any sub-filter keeps.
    Or(Vec<Filter>),
}

/// Where a [`Filter::ColumnPagination`] page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnOffset {
    /// After this many columns.
    Count(usize),
    /// At the first column whose qualifier is at or after this one (in every family).
    Qualifier(Bytes),
}

/// The part of each row (of each family) a read must look at for a filter to see every cell
/// it could keep: qualifiers from `start` on, before `stop`, and no more than `columns` of
/// them. A superset: the filter's own mask still decides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ColumnWindow {
    /// The smallest qualifier worth reading.
    pub start: Option<Bytes>,
    /// The first qualifier past the window, and whether it is itself inside.
    pub stop: Option<(Bytes, bool)>,
    /// Columns worth gathering per family.
    pub columns: Option<usize>,
}

impl ColumnWindow {
    /// True if `qualifier` is past the window's end.
    pub(crate) fn past_stop(&self, qualifier: &[u8]) -> bool {
        match &self.stop {
            Some((stop, inclusive)) => qualifier > stop.as_ref() || (!inclusive && qualifier == stop.as_ref()),
            None => false,
        }
    }

    /// True if the window narrows nothing.
    pub(crate) fn is_whole(&self) -> bool {
        self.start.is_none() && self.stop.is_none() && self.columns.is_none()
    }

    /// The window both `self` and `other` allow (for filters that all must keep a cell).
    fn intersect(self, other: ColumnWindow) -> ColumnWindow {
        let start = match (self.start, other.start) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let stop = match (self.stop, other.stop) {
            (Some(a), Some(b)) => Some(if (&a.0, a.1) <= (&b.0, b.1) { a } else { b }),
            (a, b) => a.or(b),
        };
        let columns = match (self.columns, other.columns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        ColumnWindow { start, stop, columns }
    }
}

impl Filter {
    /// The part of a row this filter can keep cells from (see [`ColumnWindow`]).
    pub(crate) fn column_window(&self) -> ColumnWindow {
        match self {
            Filter::ColumnRange { min, min_inclusive, max, max_inclusive } => ColumnWindow {
                // An exclusive bound starts at the next possible qualifier: the bound plus a zero.
                start: min.as_ref().map(|m| {
                    if *min_inclusive {
                        m.clone()
                    } else {
                        Bytes::from([m.as_ref(), &[0]].concat())
                    }
                }),
                stop: max.clone().map(|m| (m, *max_inclusive)),
                columns: None,
            },
            Filter::ColumnPrefix(p) if !p.is_empty() => ColumnWindow {
                start: Some(p.clone()),
                stop: crate::cell::prefix_successor(p).map(|s| (Bytes::from(s), false)),
                columns: None,
            },
            Filter::ColumnPagination { limit, offset: ColumnOffset::Count(n) } => {
                ColumnWindow { columns: Some(n.saturating_add(*limit)), ..ColumnWindow::default() }
            }
            Filter::ColumnPagination { limit, offset: ColumnOffset::Qualifier(q) } => {
                ColumnWindow { start: Some(q.clone()), stop: None, columns: Some(*limit) }
            }
            Filter::And(fs) => {
                // A column cap holds only if no filter before the page drops columns inside the
                // window; the range-like ones only move the window's ends.
                let mut window = ColumnWindow::default();
                let mut capped = true;
                for f in fs {
                    let mut w = f.column_window();
                    if !capped {
                        w.columns = None;
                    }
                    capped &= f.keeps_whole_columns_in_window();
                    window = window.intersect(w);
                }
                window
            }
            _ => ColumnWindow::default(),
        }
    }

    /// True if, within its own window, the filter keeps or drops whole rows only (so a page
    /// after it counts the same columns).
    fn keeps_whole_columns_in_window(&self) -> bool {
        match self {
            Filter::Prefix(_)
            | Filter::MultiRowRange(_)
            | Filter::ColumnRange { .. }
            | Filter::ColumnPrefix(_)
            | Filter::Page(_)
            | Filter::KeyOnly
            | Filter::SingleColumnValue { .. } => true,
            Filter::And(fs) => fs.iter().all(Filter::keeps_whole_columns_in_window),
            _ => false,
        }
    }

    /// Which of a row's `n` cells pass the filter; `cell(i)` lends the i-th. Reads apply the
    /// mask to the cells they have gathered, before any is copied out.
    pub(crate) fn keep_mask<'a>(&self, row: &[u8], n: usize, cell: &dyn Fn(usize) -> CellRef<'a>) -> Vec<bool> {
        let all = |keep: bool| vec![keep; n];
        let each = |test: &dyn Fn(CellRef<'a>) -> bool| (0..n).map(|i| test(cell(i))).collect();
        match self {
            Filter::Prefix(p) => all(row.starts_with(p)),
            Filter::MultiRowRange(ranges) => all(ranges
                .iter()
                .any(|(start, stop)| row >= start.as_ref() && (stop.is_empty() || row < stop.as_ref()))),
            Filter::ColumnPrefix(p) => each(&|c| c.qualifier.starts_with(p)),
            Filter::Qualifier(op, v) => each(&|c| op.matches(c.qualifier, v)),
            Filter::Value(op, v) => each(&|c| op.matches(c.value, v)),
            Filter::SingleColumnValue { family, qualifier, op, value, filter_if_missing } => {
                let latest = (0..n).map(cell).find(|c| c.is_value_of(family, qualifier));
                all(match latest {
                    Some(c) => op.matches(c.value, value),
                    None => !filter_if_missing,
                })
            }
            Filter::Page(_) | Filter::KeyOnly => all(true),
            Filter::FirstKeyOnly => (0..n).map(|i| i == 0).collect(),
            Filter::ColumnRange { min, min_inclusive, max, max_inclusive } => each(&|c| {
                let above = min
                    .as_ref()
                    .is_none_or(|m| c.qualifier > m.as_ref() || (*min_inclusive && c.qualifier == m.as_ref()));
                let below = max
                    .as_ref()
                    .is_none_or(|m| c.qualifier < m.as_ref() || (*max_inclusive && c.qualifier == m.as_ref()));
                above && below
            }),
            Filter::ColumnPagination { limit, offset } => {
                let mut mask = Vec::with_capacity(n);
                // Columns of the page seen so far, and the column the last cell belonged to.
                let mut counted = 0usize;
                let mut last: Option<(&[u8], &[u8])> = None;
                let mut keep_column = false;
                for i in 0..n {
                    let c = cell(i);
                    if last != Some((c.family, c.qualifier)) {
                        last = Some((c.family, c.qualifier));
                        let in_page = match offset {
                            ColumnOffset::Count(_) => true,
                            ColumnOffset::Qualifier(q) => c.qualifier >= q.as_ref(),
                        };
                        keep_column = false;
                        if in_page {
                            let skip = match offset {
                                ColumnOffset::Count(skip) => *skip,
                                ColumnOffset::Qualifier(_) => 0,
                            };
                            keep_column = counted >= skip && counted < skip.saturating_add(*limit);
                            counted += 1;
                        }
                    }
                    mask.push(keep_column);
                }
                mask
            }
            Filter::And(fs) => {
                // Each filter sees the cells the ones before it kept.
                let mut kept: Vec<usize> = (0..n).collect();
                for f in fs {
                    let inner = f.keep_mask(row, kept.len(), &|j| cell(kept[j]));
                    let mut keep = inner.into_iter();
                    kept.retain(|_| keep.next().unwrap_or(false));
                }
                let mut mask = all(false);
                for i in kept {
                    mask[i] = true;
                }
                mask
            }
            Filter::Or(fs) => {
                let mut mask = all(fs.is_empty());
                for f in fs {
                    for (m, k) in mask.iter_mut().zip(f.keep_mask(row, n, cell)) {
                        *m |= k;
                    }
                }
                mask
            }
        }
    }

    /// True if the filter returns keys with empty values (`KeyOnly`, alone or in a list).
    pub(crate) fn strips_values(&self) -> bool {
        match self {
            Filter::KeyOnly => true,
            Filter::And(fs) | Filter::Or(fs) => fs.iter().any(Filter::strips_values),
            _ => false,
        }
    }

    /// The smallest `Page` limit in the filter, if any.
    pub(crate) fn page_limit(&self) -> Option<usize> {
        match self {
            Filter::Page(n) => Some(*n),
            Filter::And(fs) | Filter::Or(fs) => fs.iter().filter_map(Filter::page_limit).min(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{Cell, CellType};

    fn cell(q: &'static str, v: &'static str) -> Cell {
        Cell {
            row: Bytes::from_static(b"r"),
            family: Bytes::from_static(b"f"),
            qualifier: Bytes::from_static(q.as_bytes()),
            timestamp: 1,
            cell_type: CellType::Put,
            value: Bytes::from_static(v.as_bytes()),
        }
    }

    fn run(f: &Filter, row: &[u8]) -> Vec<String> {
        let cells = [cell("a1", "x"), cell("a2", "y"), cell("b", "z")];
        let mask = f.keep_mask(row, cells.len(), &|i| cells[i].view());
        cells
            .iter()
            .zip(mask)
            .filter(|(_, keep)| *keep)
            .map(|(c, _)| {
                let value = if f.strips_values() { "" } else { std::str::from_utf8(&c.value).unwrap() };
                format!("{}={value}", String::from_utf8_lossy(&c.qualifier))
            })
            .collect()
    }

    #[test]
    fn cell_filters() {
        assert_eq!(run(&Filter::ColumnPrefix("a".into()), b"r"), ["a1=x", "a2=y"]);
        assert_eq!(run(&Filter::Value(CompareOp::Greater, "x".into()), b"r"), ["a2=y", "b=z"]);
        assert_eq!(run(&Filter::Qualifier(CompareOp::Equal, "b".into()), b"r"), ["b=z"]);
        assert_eq!(run(&Filter::FirstKeyOnly, b"r"), ["a1=x"]);
        assert_eq!(run(&Filter::KeyOnly, b"r"), ["a1=", "a2=", "b="]);
    }

    #[test]
    fn row_filters() {
        assert!(run(&Filter::Prefix("q".into()), b"r").is_empty());
        assert_eq!(run(&Filter::Prefix("r".into()), b"r").len(), 3);
        let ranges = Filter::MultiRowRange(vec![("a".into(), "c".into()), ("q".into(), "".into())]);
        assert_eq!(run(&ranges, b"r").len(), 3);
        assert!(run(&ranges, b"d").is_empty());
        let scv = |v: &'static str, missing| Filter::SingleColumnValue {
            family: "f".into(),
            qualifier: v.into(),
            op: CompareOp::Equal,
            value: "y".into(),
            filter_if_missing: missing,
        };
        assert_eq!(run(&scv("a2", true), b"r").len(), 3);
        assert!(run(&scv("a1", false), b"r").is_empty());
        assert!(run(&scv("zz", true), b"r").is_empty());
        assert_eq!(run(&scv("zz", false), b"r").len(), 3);
    }

    fn range(min: Option<&'static str>, min_inclusive: bool, max: Option<&'static str>, max_inclusive: bool) -> Filter {
        Filter::ColumnRange {
            min: min.map(|m| Bytes::from_static(m.as_bytes())),
            min_inclusive,
            max: max.map(|m| Bytes::from_static(m.as_bytes())),
            max_inclusive,
        }
    }

    #[test]
    fn column_ranges_and_pages() {
        assert_eq!(run(&range(Some("a1"), true, Some("a2"), true), b"r"), ["a1=x", "a2=y"]);
        assert_eq!(run(&range(Some("a1"), false, Some("b"), false), b"r"), ["a2=y"]);
        assert_eq!(run(&range(None, false, Some("a2"), false), b"r"), ["a1=x"]);
        assert_eq!(run(&range(Some("a2"), true, None, false), b"r"), ["a2=y", "b=z"]);
        let page = |limit, offset| Filter::ColumnPagination { limit, offset };
        assert_eq!(run(&page(2, ColumnOffset::Count(0)), b"r"), ["a1=x", "a2=y"]);
        assert_eq!(run(&page(2, ColumnOffset::Count(1)), b"r"), ["a2=y", "b=z"]);
        assert!(run(&page(2, ColumnOffset::Count(3)), b"r").is_empty());
        assert_eq!(run(&page(1, ColumnOffset::Qualifier("a2".into())), b"r"), ["a2=y"]);
        assert_eq!(run(&page(5, ColumnOffset::Qualifier("a15".into())), b"r"), ["a2=y", "b=z"]);
        // A page after another filter counts only the columns that filter kept.
        let after_value =
            Filter::And(vec![Filter::Value(CompareOp::Greater, "x".into()), page(1, ColumnOffset::Count(0))]);
        assert_eq!(run(&after_value, b"r"), ["a2=y"]);
    }

    #[test]
    fn windows_bound_what_a_read_must_look_at() {
        let w = range(Some("a1"), false, Some("b"), true).column_window();
        assert_eq!(w.start.as_deref(), Some(&b"a1\0"[..]));
        assert!(!w.past_stop(b"b") && w.past_stop(b"b0"));
        let page = Filter::ColumnPagination { limit: 30, offset: ColumnOffset::Count(10) };
        assert_eq!(page.column_window().columns, Some(40));
        // A range narrows a page that follows it; a value filter before a page lifts the cap.
        let both = Filter::And(vec![range(Some("m"), true, None, false), page.clone()]);
        assert_eq!((both.column_window().start.as_deref(), both.column_window().columns), (Some(&b"m"[..]), Some(40)));
        let uncapped = Filter::And(vec![Filter::Value(CompareOp::Equal, "v".into()), page]);
        assert_eq!(uncapped.column_window().columns, None);
        assert!(Filter::Or(vec![range(Some("m"), true, None, false)]).column_window().is_whole());
        assert_eq!(Filter::ColumnPrefix("ab".into()).column_window().stop, Some((Bytes::from_static(b"ac"), false)));
    }

    #[test]
    fn lists() {
        let and = Filter::And(vec![Filter::ColumnPrefix("a".into()), Filter::Value(CompareOp::Equal, "y".into())]);
        assert_eq!(run(&and, b"r"), ["a2=y"]);
        let or = Filter::Or(vec![
            Filter::Qualifier(CompareOp::Equal, "b".into()),
            Filter::Value(CompareOp::Equal, "x".into()),
        ]);
        assert_eq!(run(&or, b"r"), ["a1=x", "b=z"]);
        let paged = Filter::And(vec![Filter::Page(5), Filter::Or(vec![Filter::Page(2)])]);
        assert_eq!(paged.page_limit(), Some(2));
    }
}
