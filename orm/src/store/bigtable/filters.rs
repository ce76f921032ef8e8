//! Read filters and check predicates that make Bigtable answer as the embedded engine does.
//!
//! Bigtable removes versions past a family's limit and cells past its TTL by garbage
//! collection, lazily (the emulator: never during a read). The embedded engine hides them at
//! once. So every read carries the family rules as a filter, in the engine's order: a
//! family's `max_versions` newest versions exist; of those, the expired vanish; then the
//! read's time range and version count choose.

use googleapis_tonic_google_bigtable_v2::google::bigtable::v2 as pb;
use pb::row_filter::{Chain, Filter, Interleave};

use bytes::Bytes;

use crate::store::{Columns, FamilySpec, ReadSpec};

fn filter(f: Filter) -> pb::RowFilter {
    pb::RowFilter { filter: Some(f) }
}

fn chain(mut filters: Vec<pb::RowFilter>) -> pb::RowFilter {
    match filters.len() {
        0 => filter(Filter::PassAllFilter(true)),
        1 => filters.remove(0),
        _ => filter(Filter::Chain(Chain { filters })),
    }
}

fn micros(ms: u64) -> i64 {
    i64::try_from(ms.saturating_mul(1000)).unwrap_or(i64::MAX)
}

fn versions(n: u32) -> pb::RowFilter {
    filter(Filter::CellsPerColumnLimitFilter(i32::try_from(n).unwrap_or(i32::MAX)))
}

/// A family name as an exact-match RE2 pattern (Bigtable anchors it).
fn family_pattern(name: &str) -> String {
    let mut out = String::with_capacity(name.len() * 2);
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The timestamps a read of `family` may see: `[from, until)` in milliseconds, `until`
/// `None` for no upper bound; `None` if no timestamp qualifies.
fn visible_range(family: &FamilySpec, read: &ReadSpec, now_ms: u64) -> Option<(u64, Option<u64>)> {
    // A cell is expired once `timestamp + ttl <= now`.
    let alive_from = family.ttl_secs.map_or(0, |ttl| now_ms.saturating_sub(ttl.saturating_mul(1000)).saturating_add(1));
    let (from, until) = match read.time_range {
        Some((min, max)) => (min.max(alive_from), Some(max)),
        None => (alive_from, None),
    };
    match until {
        Some(until) if until <= from => None,
        _ => Some((from, until)),
    }
}

/// What one family's cells go through, without the family selection.
fn family_rules(family: &FamilySpec, read: &ReadSpec, now_ms: u64) -> Vec<pb::RowFilter> {
    let wanted = read.max_versions.max(1);
    let mut out = Vec::new();
    let Some((from, until)) = visible_range(family, read, now_ms) else {
        return vec![filter(Filter::BlockAllFilter(true))];
    };
    let narrowed = from > 0 || until.is_some();
    // The family limit matters before a time range; without one, the read's own count covers it.
    if narrowed && family.max_versions < u32::MAX {
        out.push(versions(family.max_versions));
    }
    if narrowed {
        out.push(filter(Filter::TimestampRangeFilter(pb::TimestampRange {
            start_timestamp_micros: micros(from),
            end_timestamp_micros: until.map_or(0, micros),
        })));
    }
    let limit = if narrowed { wanted } else { wanted.min(family.max_versions) };
    if limit < u32::MAX {
        out.push(versions(limit));
    }
    out
}

/// The filter a read of a table with `families` applies. `None` passes every cell (only for a
/// table whose families keep every version forever, read without limits).
pub(crate) fn read_filter(families: &[FamilySpec], read: &ReadSpec, now_ms: u64) -> Option<pb::RowFilter> {
    let same_rules =
        families.windows(2).all(|w| w[0].max_versions == w[1].max_versions && w[0].ttl_secs == w[1].ttl_secs);
    if same_rules {
        let rules = families.first().map(|f| family_rules(f, read, now_ms)).unwrap_or_else(|| {
            let keep_all = FamilySpec { name: String::new(), max_versions: u32::MAX, ttl_secs: None };
            family_rules(&keep_all, read, now_ms)
        });
        return (!rules.is_empty()).then(|| chain(rules));
    }
    let filters = families
        .iter()
        .map(|f| {
            let mut rules = vec![filter(Filter::FamilyNameRegexFilter(family_pattern(&f.name)))];
            rules.extend(family_rules(f, read, now_ms));
            chain(rules)
        })
        .collect();
    Some(filter(Filter::Interleave(Interleave { filters })))
}

/// Columns of each row a slice keeps — the first `skip` left out, then at most `limit` —
/// when Bigtable cannot select them itself and the rows are trimmed as they arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ColumnWindow {
    pub skip: usize,
    pub limit: Option<usize>,
}

impl ColumnWindow {
    /// Whether trimming can leave a row the server sent without cells (it then is no row):
    /// only an offset can, a limit keeps at least one column (a limit of 0 reads nothing).
    pub(crate) fn can_empty_rows(self) -> bool {
        self.skip > 0
    }
}

/// The whole filter of a read: the columns it selects, then [`read_filter`] over their
/// families, then (for a slice) the per-row offset and limit and the values stripped. A
/// slice's offset and limit are sent as cell offset and limit only when each column yields one
/// cell; otherwise the window is returned, to trim the rows as they arrive
/// ([`trim_columns`]).
pub(crate) fn columns_filter(
    families: &[FamilySpec],
    read: &ReadSpec,
    now_ms: u64,
) -> (Option<pb::RowFilter>, Option<ColumnWindow>) {
    use pb::column_range::{EndQualifier, StartQualifier};
    match &read.columns {
        Columns::All => (read_filter(families, read, now_ms), None),
        Columns::Families(names) => {
            let chosen: Vec<FamilySpec> =
                families.iter().filter(|f| names.contains(&f.name.as_str())).cloned().collect();
            let pattern = names.iter().map(|n| family_pattern(n)).collect::<Vec<_>>().join("|");
            let mut filters = vec![filter(Filter::FamilyNameRegexFilter(pattern))];
            filters.extend(read_filter(&chosen, read, now_ms));
            (Some(chain(filters)), None)
        }
        Columns::Slice(slice) => {
            let name = String::from_utf8_lossy(&slice.family).into_owned();
            let chosen: Vec<FamilySpec> = families.iter().filter(|f| f.name == name).cloned().collect();
            let mut filters = vec![filter(Filter::ColumnRangeFilter(pb::ColumnRange {
                family_name: name,
                start_qualifier: slice.from.clone().map(StartQualifier::StartQualifierClosed),
                end_qualifier: slice.to.clone().map(EndQualifier::EndQualifierOpen),
            }))];
            filters.extend(read_filter(&chosen, read, now_ms));
            let one_cell_per_column = read.max_versions <= 1 || chosen.iter().all(|f| f.max_versions <= 1);
            let cells = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
            let mut window = None;
            if slice.limit == Some(0) {
                filters.push(filter(Filter::BlockAllFilter(true)));
            } else if one_cell_per_column {
                if slice.offset > 0 {
                    filters.push(filter(Filter::CellsPerRowOffsetFilter(cells(slice.offset))));
                }
                if let Some(limit) = slice.limit {
                    filters.push(filter(Filter::CellsPerRowLimitFilter(cells(limit))));
                }
            } else if slice.offset > 0 || slice.limit.is_some() {
                window = Some(ColumnWindow { skip: slice.offset, limit: slice.limit });
            }
            if slice.keys_only {
                filters.push(filter(Filter::StripValueTransformer(true)));
            }
            (Some(chain(filters)), window)
        }
    }
}

/// Keeps the cells of the columns of `row` inside `window` (cells are in column order).
pub(crate) fn trim_columns(row: &mut crate::store::Row, window: ColumnWindow) {
    let mut columns = 0;
    let mut last: Option<(Bytes, Bytes)> = None;
    row.cells.retain(|c| {
        if last.as_ref().is_none_or(|(f, q)| *f != c.family || *q != c.qualifier) {
            last = Some((c.family.clone(), c.qualifier.clone()));
            columns += 1;
        }
        columns > window.skip && window.limit.is_none_or(|limit| columns <= window.skip + limit)
    });
}

/// Matches the newest live version of `family:qualifier`, if its value is `value` (any value
/// for `None`): the predicate of a check-and-mutate. Values compare as bytes with a value
/// range, not a regular expression, so binary values need no escaping.
pub(crate) fn column_predicate(
    family: &FamilySpec,
    qualifier: &Bytes,
    value: Option<&Bytes>,
    now_ms: u64,
) -> pb::RowFilter {
    use pb::column_range::{EndQualifier, StartQualifier};
    use pb::value_range::{EndValue, StartValue};
    let mut filters = vec![filter(Filter::ColumnRangeFilter(pb::ColumnRange {
        family_name: family.name.clone(),
        start_qualifier: Some(StartQualifier::StartQualifierClosed(qualifier.clone())),
        end_qualifier: Some(EndQualifier::EndQualifierClosed(qualifier.clone())),
    }))];
    // The newest version is the newest live one unless it expired, and then all older did too.
    let read = ReadSpec { max_versions: 1, time_range: None, ..ReadSpec::default() };
    if let Some((from, _)) = visible_range(family, &read, now_ms).filter(|(from, _)| *from > 0) {
        filters.push(filter(Filter::TimestampRangeFilter(pb::TimestampRange {
            start_timestamp_micros: micros(from),
            end_timestamp_micros: 0,
        })));
    }
    filters.push(versions(1));
    if let Some(value) = value {
        filters.push(filter(Filter::ValueRangeFilter(pb::ValueRange {
            start_value: Some(StartValue::StartValueClosed(value.clone())),
            end_value: Some(EndValue::EndValueClosed(value.clone())),
        })));
    }
    chain(filters)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn family(name: &str, max_versions: u32, ttl_secs: Option<u64>) -> FamilySpec {
        FamilySpec { name: name.into(), max_versions, ttl_secs }
    }

    #[test]
    fn one_version_families_read_with_one_limit() {
        let f = read_filter(&[family("d", 1, None), family("e", 1, None)], &ReadSpec::default(), 0);
        assert_eq!(f, Some(versions(1)));
    }

    #[test]
    fn the_family_limit_applies_before_a_time_range() {
        let read = ReadSpec { max_versions: 5, time_range: Some((10, 20)), ..ReadSpec::default() };
        let f = read_filter(&[family("d", 3, None)], &read, 0).unwrap();
        let Some(Filter::Chain(c)) = f.filter else { panic!("{f:?}") };
        assert_eq!(c.filters[0], versions(3));
        assert_eq!(
            c.filters[1].filter,
            Some(Filter::TimestampRangeFilter(pb::TimestampRange {
                start_timestamp_micros: 10_000,
                end_timestamp_micros: 20_000
            }))
        );
        assert_eq!(c.filters[2], versions(5));
    }

    #[test]
    fn families_with_different_rules_interleave_and_ttl_hides_expired_cells() {
        let f =
            read_filter(&[family("d", 1, None), family("t.x", 1, Some(10))], &ReadSpec::default(), 100_000).unwrap();
        let Some(Filter::Interleave(i)) = f.filter else { panic!("{f:?}") };
        let Some(Filter::Chain(ttl)) = &i.filters[1].filter else { panic!() };
        assert_eq!(ttl.filters[0].filter, Some(Filter::FamilyNameRegexFilter("t\\.x".into())));
        // Alive: timestamp + 10 000 > 100 000.
        assert!(ttl.filters.iter().any(|f| f.filter
            == Some(Filter::TimestampRangeFilter(pb::TimestampRange {
                start_timestamp_micros: 90_001_000,
                end_timestamp_micros: 0
            }))));
    }

    #[test]
    fn only_a_column_offset_trims_a_row_to_nothing() {
        use crate::store::{Row, StoredCell};
        let cell = |q: &'static str, timestamp| StoredCell {
            family: Bytes::from_static(b"d"),
            qualifier: Bytes::from_static(q.as_bytes()),
            timestamp,
            value: Bytes::new(),
        };
        // Two versions of one column.
        let row = Row { key: Bytes::from_static(b"r"), cells: vec![cell("q", 2), cell("q", 1)] };
        for (skip, limit, kept) in [(0, Some(1), 2), (0, None, 2), (1, None, 0), (1, Some(1), 0)] {
            let window = ColumnWindow { skip, limit };
            let mut trimmed = row.clone();
            trim_columns(&mut trimmed, window);
            assert_eq!(trimmed.cells.len(), kept, "{window:?}");
            assert_eq!(window.can_empty_rows(), kept == 0, "{window:?}");
        }
    }

    #[test]
    fn an_empty_time_range_reads_nothing() {
        let read = ReadSpec { max_versions: 1, time_range: Some((5, 5)), ..ReadSpec::default() };
        assert_eq!(read_filter(&[family("d", 1, None)], &read, 0), Some(filter(Filter::BlockAllFilter(true))));
    }
}
