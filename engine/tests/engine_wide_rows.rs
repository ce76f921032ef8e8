//! Wide rows: one row holding a great many columns, read in slices with the column filters
//! (ColumnRangeFilter, ColumnPaginationFilter) — which seek inside the row and touch only the
//! blocks that hold the slice — and kept whole through flushes, compactions and splits of the
//! regions around it (a row never splits).
//!
//! `CELLAR_WIDE_ENTRIES` sets the row's width (default 100,000; the issue's 10⁶ for a soak).

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

/// The qualifier of model key `k`, in the keys' order: the empty qualifier, then qualifiers of
/// zero bytes only, then two big-endian bytes (`\x00`-prefixed below 256).
fn model_qualifier(k: u16) -> Bytes {
    match k {
        0..4 => Bytes::from(vec![0u8; usize::from(k)]),
        _ => Bytes::copy_from_slice(&k.to_be_bytes()),
    }
}

/// Inverse of [`model_qualifier`].
fn model_key(q: &[u8]) -> u16 {
    match q {
        [0, 0] => 2,
        [a, b] => u16::from_be_bytes([*a, *b]),
        _ => q.len() as u16,
    }
}

fn to_filter(s: &Slice) -> Filter {
    let q = model_qualifier;
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

/// A model key, often one of the first few: the empty qualifier and zero-byte ones.
fn arb_key() -> impl Strategy<Value = u16> + Clone {
    prop_oneof![3 => 0u16..300, 1 => 0u16..6]
}

fn arb_slice() -> impl Strategy<Value = Slice> {
    let bound = prop::option::of(arb_key());
    prop_oneof![
        (bound.clone(), any::<bool>(), bound, any::<bool>()).prop_map(|(min, min_inclusive, max, max_inclusive)| {
            Slice::Range { min, min_inclusive, max, max_inclusive }
        }),
        (0usize..40, prop_oneof![0usize..250, 0usize..3]).prop_map(|(limit, skip)| Slice::Page { limit, skip }),
        (0usize..40, arb_key()).prop_map(|(limit, at)| Slice::PageAt { limit, at }),
        (arb_key(), 0usize..40, 0usize..40).prop_map(|(min, limit, skip)| Slice::RangeThenPage { min, limit, skip }),
    ]
}

#[derive(Debug, Clone)]
enum Write {
    Put(u16),
    DeleteColumn(u16),
    /// Every column; its marker sits at the empty qualifier, among that column's versions.
    DeleteFamily,
}

fn arb_write() -> impl Strategy<Value = Write> {
    prop_oneof![
        8 => arb_key().prop_map(Write::Put),
        6 => arb_key().prop_map(Write::DeleteColumn),
        1 => Just(Write::DeleteFamily),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Slices of a row written, overwritten and deleted (by column and by family) in several
    /// generations of files and the memstore equal the same slices of an in-memory model. Each
    /// write has a newer timestamp than the last, so family markers sort among the empty
    /// qualifier's versions rather than before them.
    #[test]
    fn slices_match_a_model(
        writes in prop::collection::vec(arb_write(), 1..400),
        flush_every in 20usize..200,
        slices in prop::collection::vec(arb_slice(), 1..8),
    ) {
        let te = TestEngine::new(1000);
        te.engine().create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("p").max_versions(2))).unwrap();
        let t = te.table("t");
        let mut model = BTreeMap::new();
        for (i, write) in writes.iter().enumerate() {
            let ts = i as u64 + 1;
            match write {
                Write::Put(k) => {
                    t.put(Put::new(WIDE).add_at("p", model_qualifier(*k), ts, i.to_string())).unwrap();
                    model.insert(*k, i as u64);
                }
                Write::DeleteColumn(k) => {
                    t.delete(Delete::new(WIDE).add_columns_at("p", model_qualifier(*k), ts)).unwrap();
                    model.remove(k);
                }
                Write::DeleteFamily => {
                    t.delete(Delete::new(WIDE).add_family_at("p", ts)).unwrap();
                    model.clear();
                }
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
                .map(|c| model_key(&c.qualifier))
                .collect::<Vec<_>>();
            let mut got = got;
            got.dedup();
            prop_assert_eq!(got, in_model(s, &model), "{:?}", s);
        }
    }
}

/// Qualifiers of every cell `scan` returns, per row, checked alike by scan, cursor and visitor.
fn scanned(t: &Table, scan: Scan) -> Vec<(String, Vec<Vec<u8>>)> {
    scan_both(t, scan)
        .iter()
        .map(|r| (String::from_utf8_lossy(&r.row).into_owned(), r.cells.iter().map(|c| c.qualifier.to_vec()).collect()))
        .collect()
}

fn qualifiers_of(r: &RowResult) -> Vec<Vec<u8>> {
    r.cells.iter().map(|c| c.qualifier.to_vec()).collect()
}

fn from_exclusive(min: &'static [u8]) -> Filter {
    Filter::ColumnRange { min: Some(Bytes::from_static(min)), min_inclusive: false, max: None, max_inclusive: false }
}

fn from_inclusive(min: &'static [u8]) -> Filter {
    Filter::ColumnRange { min: Some(Bytes::from_static(min)), min_inclusive: true, max: None, max_inclusive: false }
}

/// The empty qualifier is a column like any other: family delete markers sit there too, but a
/// put there neither escapes a slice's window nor counts against its column limit.
#[test]
fn an_empty_qualifier_is_a_column_like_any_other_in_slices() {
    let te = TestEngine::new(1000);
    te.engine().create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f").max_versions(3))).unwrap();
    let t = te.table("t");
    for row in ["r1", "r2"] {
        // Two versions of the empty column, so a page counts columns, not cells.
        for (q, ts) in [(&b""[..], 10), (b"", 11), (b"a", 10), (b"b", 10)] {
            t.put(Put::new(row).add_at("f", Bytes::from_static(q), ts, "v")).unwrap();
        }
    }
    let q = |qs: &[&[u8]]| qs.iter().map(|q| q.to_vec()).collect::<Vec<_>>();
    let cases: Vec<(&str, Filter, Vec<Vec<u8>>)> = vec![
        (
            "range from a, one column",
            Filter::And(vec![from_inclusive(b"a"), page(1, ColumnOffset::Count(0))]),
            q(&[b"a"]),
        ),
        ("page at a", page(1, ColumnOffset::Qualifier(Bytes::from_static(b"a"))), q(&[b"a"])),
        ("page at a, two columns", page(2, ColumnOffset::Qualifier(Bytes::from_static(b"a"))), q(&[b"a", b"b"])),
        (
            "range after the empty qualifier",
            Filter::And(vec![from_exclusive(b""), page(1, ColumnOffset::Count(0))]),
            q(&[b"a"]),
        ),
        (
            "range from a, skip one",
            Filter::And(vec![from_inclusive(b"a"), page(1, ColumnOffset::Count(1))]),
            q(&[b"b"]),
        ),
        ("range from a", from_inclusive(b"a"), q(&[b"a", b"b"])),
        ("first column", page(1, ColumnOffset::Count(0)), q(&[b"", b""])),
        ("second column", page(1, ColumnOffset::Count(1)), q(&[b"a"])),
        ("page at the empty qualifier", page(2, ColumnOffset::Qualifier(Bytes::new())), q(&[b"", b"", b"a"])),
        (
            "range up to a",
            Filter::ColumnRange {
                min: None,
                min_inclusive: false,
                max: Some(Bytes::from_static(b"a")),
                max_inclusive: false,
            },
            q(&[b"", b""]),
        ),
    ];
    for when in ["in the memstore", "flushed"] {
        for (name, filter, want) in &cases {
            let got = t.get(Get::new("r1").max_versions(3).filter(filter.clone())).unwrap();
            assert_eq!(qualifiers_of(&got), *want, "{when}: get, {name}");
            for reversed in [false, true] {
                let rows = scanned(&t, Scan::new().reversed(reversed).max_versions(3).filter(filter.clone()));
                let rows_want = if reversed { ["r2", "r1"] } else { ["r1", "r2"] };
                let want_rows: Vec<(String, Vec<Vec<u8>>)> =
                    rows_want.iter().map(|r| (r.to_string(), want.clone())).collect();
                assert_eq!(rows, want_rows, "{when}: scan (reversed {reversed}), {name}");
            }
        }
        te.engine().flush("t").unwrap();
    }
}

/// Qualifiers of zero bytes and the empty qualifier sort first; slices around them count them
/// as columns.
#[test]
fn zero_byte_qualifiers_and_the_empty_one_slice_in_order() {
    let te = TestEngine::new(1000);
    te.engine().create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f"))).unwrap();
    let t = te.table("t");
    let all: [&[u8]; 6] = [b"", b"\x00", b"\x00\x00", b"\x00a", b"a", b"b"];
    t.put(all.iter().fold(Put::new("r"), |p, q| p.add("f", Bytes::from_static(q), "v"))).unwrap();
    let q = |qs: &[&[u8]]| qs.iter().map(|q| q.to_vec()).collect::<Vec<_>>();
    let cases: Vec<(Filter, Vec<Vec<u8>>)> = vec![
        (Filter::And(vec![from_exclusive(b"\x00"), page(2, ColumnOffset::Count(0))]), q(&[b"\x00\x00", b"\x00a"])),
        (Filter::And(vec![from_inclusive(b"\x00"), page(1, ColumnOffset::Count(2))]), q(&[b"\x00a"])),
        (page(2, ColumnOffset::Qualifier(Bytes::from_static(b"\x00\x00"))), q(&[b"\x00\x00", b"\x00a"])),
        (page(3, ColumnOffset::Count(1)), q(&[b"\x00", b"\x00\x00", b"\x00a"])),
        (Filter::ColumnPrefix(Bytes::from_static(b"\x00")), q(&[b"\x00", b"\x00\x00", b"\x00a"])),
        (
            Filter::ColumnRange {
                min: Some(Bytes::from_static(b"")),
                min_inclusive: true,
                max: Some(Bytes::from_static(b"\x00\x00")),
                max_inclusive: true,
            },
            q(&[b"", b"\x00", b"\x00\x00"]),
        ),
    ];
    for when in ["in the memstore", "flushed"] {
        for (filter, want) in &cases {
            assert_eq!(
                qualifiers_of(&t.get(Get::new("r").filter(filter.clone())).unwrap()),
                *want,
                "{when}: {filter:?}"
            );
        }
        te.engine().flush("t").unwrap();
    }
}

/// A family delete marker shares the empty qualifier with the puts there, older ones sorting
/// after newer puts: a read that has all it wants of the empty column still reads on to the
/// markers, which mask the other columns.
#[test]
fn family_markers_behind_newer_empty_qualifier_puts_still_mask() {
    let te = TestEngine::new(1000);
    te.engine().create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f"))).unwrap();
    let t = te.table("t");
    t.put(Put::new("r").add_at("f", "a", 3, "old").add_at("f", "b", 20, "new")).unwrap();
    t.delete(Delete::new("r").add_family_at("f", 5)).unwrap();
    t.put(Put::new("r").add_at("f", "", 10, "empty")).unwrap();
    // A flush drops the masked put; raw reads see it until then.
    for (when, masked) in [("in the memstore", vec![b"a".to_vec()]), ("flushed", vec![])] {
        let got = t.get(Get::new("r")).unwrap();
        assert_eq!(cells(&got), [("f:".into(), 10, "empty".into()), ("f:b".into(), 20, "new".into())], "{when}");
        let sliced = t.get(Get::new("r").filter(from_inclusive(b"a"))).unwrap();
        assert_eq!(cells(&sliced), [("f:b".into(), 20, "new".into())], "{when}: a slice past the empty column");
        // A raw read shows the marker with the empty column, and leaves both out of a slice.
        let raw = scanned(&t, Scan::new().raw(true));
        let want = [vec![vec![], vec![]], masked.clone(), vec![b"b".to_vec()]].concat();
        assert_eq!(raw, [("r".to_string(), want)], "{when}: raw");
        let first_from_a = Filter::And(vec![from_inclusive(b"a"), page(1, ColumnOffset::Count(0))]);
        let raw_sliced = scanned(&t, Scan::new().raw(true).filter(first_from_a));
        let want = masked.first().cloned().unwrap_or_else(|| b"b".to_vec());
        assert_eq!(raw_sliced, [("r".to_string(), vec![want])], "{when}: raw slice");
        te.engine().flush("t").unwrap();
    }
    te.engine().major_compact("t").unwrap();
    let got = t.get(Get::new("r")).unwrap();
    assert_eq!(cells(&got), [("f:".into(), 10, "empty".into()), ("f:b".into(), 20, "new".into())], "compacted");
}
