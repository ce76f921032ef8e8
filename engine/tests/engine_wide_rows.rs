//! Wide rows: one row holding a great many columns, read in slices with the column filters
//! (ColumnRangeFilter, ColumnPaginationFilter) — which seek inside the row and touch only the
//! blocks that hold the slice — and kept whole through flushes, compactions and splits of the
//! regions around it (a row never splits).
//!
//! `CELLAR_WIDE_ENTRIES` sets the row's width (default 100,000; the 10⁶ for a soak).

mod common;

use std::collections::BTreeMap;

use bytes::Bytes;
use cellar_engine::*;
use common::*;
use proptest::prelude::*;

const WIDE: &[u8] = b"m-wide";

fn qualifier(i: u32) -> Bytes {
    Bytes::copy_from_slice(&i.to_be_bytes())
}

fn entries() -> u32 {
    std::env::var("CELLAR_WIDE_ENTRIES").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000)
}

/// Writes the wide row (entry i holds `v{i}`) in batches, and neighbours on both sides.
fn fill(te: &TestEngine, n: u32) -> Table {
    te.engine().create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("p"))).unwrap();
    let t = te.table("t");
    for chunk in (0..n).collect::<Vec<_>>().chunks(10_000) {
        let put = chunk.iter().fold(Put::new(WIDE), |p, i| p.add("p", qualifier(*i), format!("v{i}")));
        t.put(put).unwrap();
    }
    for side in ["a", "z"] {
        let rows = (0..500).map(|i| Mutation::Put(Put::new(format!("{side}-{i:04}")).add("p", "q", "x"))).collect();
        t.batch(rows).unwrap();
    }
    t
}

fn slice(t: &Table, filter: Filter) -> Vec<u32> {
    let r = t.get(Get::new(WIDE).filter(filter)).unwrap();
    r.cells.iter().map(|c| u32::from_be_bytes(c.qualifier[..].try_into().unwrap())).collect()
}

fn page(limit: usize, offset: ColumnOffset) -> Filter {
    Filter::ColumnPagination { limit, offset }
}

fn range(min: u32, max: u32) -> Filter {
    Filter::ColumnRange {
        min: Some(qualifier(min)),
        min_inclusive: true,
        max: Some(qualifier(max)),
        max_inclusive: false,
    }
}

/// Blocks looked up in the cache (hits and misses) while `f` runs.
fn blocks(te: &TestEngine, f: impl FnOnce()) -> u64 {
    let before = te.engine().cache_stats();
    f();
    let after = te.engine().cache_stats();
    (after.hits + after.misses) - (before.hits + before.misses)
}

#[test]
fn a_wide_row_survives_flush_compaction_and_splits_around_it_and_reads_in_slices() {
    let n = entries();
    let te = TestEngine::new(1000);
    let t = fill(&te, n);
    let check = |when: &str| {
        assert_eq!(slice(&t, page(30, ColumnOffset::Count(0))), (0..30).collect::<Vec<_>>(), "{when}: first 30");
        let after = n / 2;
        assert_eq!(
            slice(&t, page(30, ColumnOffset::Qualifier(qualifier(after + 1)))),
            (after + 1..after + 31).collect::<Vec<_>>(),
            "{when}: 30 after {after}"
        );
        assert_eq!(slice(&t, range(n - 5, n + 10)), (n - 5..n).collect::<Vec<_>>(), "{when}: the tail");
        let all = t.get(Get::new(WIDE).filter(Filter::FirstKeyOnly)).unwrap();
        assert_eq!(all.cells.len(), 1, "{when}");
        let count = t.get(Get::new(WIDE).filter(Filter::KeyOnly)).unwrap().cells.len();
        assert_eq!(count, n as usize, "{when}: every entry");
    };
    check("in the memstore");
    te.engine().flush("t").unwrap();
    check("flushed");
    // Another generation of files, then one compacted file.
    t.put(Put::new(WIDE).add("p", qualifier(n + 1), "late")).unwrap();
    t.delete(Delete::new(WIDE).add_columns("p", qualifier(n + 1))).unwrap();
    te.engine().flush("t").unwrap();
    te.engine().major_compact("t").unwrap();
    check("compacted");
    // Splits at the neighbours: the wide row stays whole in one region.
    te.engine().split("t", Some(b"b")).unwrap();
    te.engine().split("t", Some(b"y")).unwrap();
    let regions = te.engine().regions("t").unwrap();
    assert_eq!(regions.len(), 3);
    check("split around");
    // A split asked for inside the region of the wide row falls on a row boundary.
    te.engine().split("t", None).unwrap();
    check("split again");

    // 30 entries from the middle touch a couple of blocks, not the row.
    let total = blocks(&te, || {
        t.get(Get::new(WIDE).filter(Filter::KeyOnly)).unwrap();
    });
    let sliced = blocks(&te, || {
        slice(&t, page(30, ColumnOffset::Qualifier(qualifier(n / 3))));
    });
    // The row spans about 20 blocks of 64 KiB.
    assert!(sliced <= 4 && total >= 4 * sliced, "a 30-entry slice read {sliced} blocks; the whole row {total}");
}

#[test]
fn scans_page_every_row_alike() {
    let te = TestEngine::new(1000);
    te.engine().create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("p"))).unwrap();
    let t = te.table("t");
    for r in 0..20u32 {
        let put = (0..r * 3).fold(Put::new(format!("row{r:02}")), |p, i| p.add("p", qualifier(i), "v"));
        if r > 0 {
            t.put(put).unwrap();
        }
    }
    te.engine().flush("t").unwrap();
    let rows: Vec<(String, usize)> = t
        .scan(Scan::new().filter(page(4, ColumnOffset::Count(2))))
        .unwrap()
        .map(|r| r.unwrap())
        .map(|r| (String::from_utf8(r.row.to_vec()).unwrap(), r.cells.len()))
        .collect();
    // Rows with 3 columns give 1, with 6 or more give 4.
    assert_eq!(rows[0], ("row01".to_string(), 1));
    assert!(rows[1..].iter().all(|(_, n)| *n == 4), "{rows:?}");
    let reversed: Vec<String> = t
        .scan(Scan::new().reversed(true).filter(range(5, 6)))
        .unwrap()
        .map(|r| String::from_utf8(r.unwrap().row.to_vec()).unwrap())
        .collect();
    assert_eq!(reversed.first().map(String::as_str), Some("row19"));
    assert_eq!(reversed.last().map(String::as_str), Some("row02"), "rows of fewer than 6 columns have no entry 5");
}

#[derive(Debug, Clone)]
enum Slice {
    Range { min: Option<u16>, min_inclusive: bool, max: Option<u16>, max_inclusive: bool },
    Page { limit: usize, skip: usize },
    PageAt { limit: usize, at: u16 },
    RangeThenPage { min: u16, limit: usize, skip: usize },
}

fn to_filter(s: &Slice) -> Filter {
    let q = |v: u16| Bytes::copy_from_slice(&v.to_be_bytes());
    match s {
        Slice::Range { min, min_inclusive, max, max_inclusive } => Filter::ColumnRange {
            min: min.map(q),
            min_inclusive: *min_inclusive,
            max: max.map(q),
            max_inclusive: *max_inclusive,
        },
        Slice::Page { limit, skip } => page(*limit, ColumnOffset::Count(*skip)),
        Slice::PageAt { limit, at } => page(*limit, ColumnOffset::Qualifier(q(*at))),
        Slice::RangeThenPage { min, limit, skip } => Filter::And(vec![
            Filter::ColumnRange { min: Some(q(*min)), min_inclusive: false, max: None, max_inclusive: false },
            page(*limit, ColumnOffset::Count(*skip)),
        ]),
    }
}

fn in_model(s: &Slice, model: &BTreeMap<u16, u64>) -> Vec<u16> {
    let keys = model.keys().copied();
    match s {
        Slice::Range { min, min_inclusive, max, max_inclusive } => keys
            .filter(|k| min.is_none_or(|m| *k > m || (*min_inclusive && *k == m)))
            .filter(|k| max.is_none_or(|m| *k < m || (*max_inclusive && *k == m)))
            .collect(),
        Slice::Page { limit, skip } => keys.skip(*skip).take(*limit).collect(),
        Slice::PageAt { limit, at } => keys.filter(|k| k >= at).take(*limit).collect(),
        Slice::RangeThenPage { min, limit, skip } => keys.filter(|k| k > min).skip(*skip).take(*limit).collect(),
    }
}

fn arb_slice() -> impl Strategy<Value = Slice> {
    let bound = prop::option::of(0u16..300);
    prop_oneof![
        (bound.clone(), any::<bool>(), bound, any::<bool>()).prop_map(|(min, min_inclusive, max, max_inclusive)| {
            Slice::Range { min, min_inclusive, max, max_inclusive }
        }),
        (0usize..40, 0usize..250).prop_map(|(limit, skip)| Slice::Page { limit, skip }),
        (0usize..40, 0u16..300).prop_map(|(limit, at)| Slice::PageAt { limit, at }),
        (0u16..300, 0usize..40, 0usize..40).prop_map(|(min, limit, skip)| Slice::RangeThenPage { min, limit, skip }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Slices of a row written, overwritten and deleted in several generations of files and the
    /// memstore equal the same slices of an in-memory model.
    #[test]
    fn slices_match_a_model(
        writes in prop::collection::vec((0u16..300, any::<bool>()), 1..400),
        flush_every in 20usize..200,
        slices in prop::collection::vec(arb_slice(), 1..8),
    ) {
        let te = TestEngine::new(1000);
        te.engine().create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("p").max_versions(2))).unwrap();
        let t = te.table("t");
        let mut model = BTreeMap::new();
        for (i, (k, delete)) in writes.iter().enumerate() {
            let q = Bytes::copy_from_slice(&k.to_be_bytes());
            if *delete {
                t.delete(Delete::new(WIDE).add_columns("p", q)).unwrap();
                model.remove(k);
            } else {
                t.put(Put::new(WIDE).add("p", q, i.to_string())).unwrap();
                model.insert(*k, i as u64);
            }
            if i % flush_every == flush_every - 1 {
                te.engine().flush("t").unwrap();
            }
        }
        for s in &slices {
            let got: Vec<u16> = t
                .get(Get::new(WIDE).max_versions(2).filter(to_filter(s)))
                .unwrap()
                .cells
                .iter()
                .map(|c| u16::from_be_bytes(c.qualifier[..].try_into().unwrap()))
                .collect::<Vec<_>>();
            let mut got = got;
            got.dedup();
            prop_assert_eq!(got, in_model(s, &model), "{:?}", s);
        }
    }
}
