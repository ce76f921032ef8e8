//! Server-side filters for Get and Scan.
//!
//! A filter sees the visible cells of one row (after delete masking, versions, TTL and time
//! range) and decides which of them are returned; a row whose cells are all filtered out is
//! not returned at all. `KeyOnly` strips values and `Page` bounds the number of rows.

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
    /// Cells every sub-filter keeps.
    And(Vec<Filter>),
    /// Cells any sub-filter keeps.
    Or(Vec<Filter>),
}

impl Filter {
    /// Which of a row's `n` cells pass the filter; `cell(i)` lends the i-th. Reads apply the
    /// mask to the cells they have gathered, before any is copied out.
    pub(crate) fn keep_mask<'a>(&self, row: &[u8], n: usize, cell: &impl Fn(usize) -> CellRef<'a>) -> Vec<bool> {
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
            Filter::And(fs) => {
                let mut mask = all(true);
                for f in fs {
                    for (m, k) in mask.iter_mut().zip(f.keep_mask(row, n, cell)) {
                        *m &= k;
                    }
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
