//! The embedded engine and Cloud Bigtable (its emulator) give the same answers: random
//! sequences of puts (of one column or several of a row), deletes (of columns, families and
//! rows), increments, check-and-mutates, version reads and scans (with limits, reversed, of
//! every column, of some families, or of a slice of one family's columns) run on both stores
//! through the `Store` trait, and every result must match. Each store must also lend
//! (`read_rows_with`, `scan_cursor`) exactly the rows it returns.
//!
//! Writes carry explicit timestamps (a store's own clock would differ between the two), all in
//! the recent past; increments stamp their cells with the store's clock, so counter cells are
//! compared without timestamps.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use cellar::orm::store::{
    CellMutation, ColumnSlice, Columns, Condition, FamilySpec, Metered, ReadSpec, Row, RowMutation, ScanSpec,
    SplitPolicy, Store, TableSpec,
};
use cellar::orm::EmbeddedStore;
use cellar::prelude::*;
use proptest::prelude::*;

const TABLE: &str = "diff";
const ROWS: &[&str] = &["a", "b", "ba", "c", "d"];
/// With the empty qualifier (where the embedded engine also keeps family delete markers) and
/// qualifiers that start with a zero byte, which sort right after it.
const QUALIFIERS: &[&str] = &["", "\0", "\0q", "q1", "q2", "q3", "q4"];
/// `d` keeps 3 versions, `e` one, `t` two for an hour, `c` holds counters.
const FAMILIES: &[(&str, u32, Option<u64>)] = &[("c", 1, None), ("d", 3, None), ("e", 1, None), ("t", 2, Some(3600))];

#[derive(Debug, Clone)]
enum Op {
    Put { row: usize, family: usize, qualifier: usize, value: Vec<u8>, ts: u64 },
    PutColumns { row: usize, family: usize, qualifiers: Vec<usize>, value: Vec<u8>, ts: u64 },
    DeleteColumn { row: usize, family: usize, qualifier: usize },
    DeleteRow { row: usize },
    DeleteFamily { row: usize, family: usize },
    Increment { row: usize, qualifier: usize, delta: i64 },
    CheckEquals { row: usize, family: usize, qualifier: usize, value: Vec<u8>, put: Vec<u8>, ts: u64 },
    CheckAbsent { row: usize, family: usize, qualifier: usize, put: Vec<u8>, ts: u64 },
    Read { rows: Vec<usize>, versions: u32, range: Option<(u64, u64)>, columns: Cols },
    Scan { start: usize, end: Option<usize>, reverse: bool, limit: Option<usize>, versions: u32, columns: Cols },
}

/// Which columns a read selects.
#[derive(Debug, Clone)]
enum Cols {
    All,
    /// Families `d` and `t`.
    Families,
    Slice {
        family: usize,
        from: Option<usize>,
        to: Option<usize>,
        offset: usize,
        limit: Option<usize>,
        keys_only: bool,
    },
}

fn cols() -> impl Strategy<Value = Cols> {
    let q = prop::option::of(0..QUALIFIERS.len() + 1);
    prop_oneof![
        2 => Just(Cols::All),
        1 => Just(Cols::Families),
        3 => (1..FAMILIES.len(), q.clone(), q, prop_oneof![Just(0usize), 1usize..4], prop::option::of(0usize..4), any::<bool>())
            .prop_map(|(family, from, to, offset, limit, keys_only)| Cols::Slice { family, from, to, offset, limit, keys_only }),
    ]
}

fn columns(c: &Cols) -> Columns {
    // Past the last qualifier: a bound beyond every column.
    let q = |i: usize| Bytes::from_static(QUALIFIERS.get(i).copied().unwrap_or("z").as_bytes());
    match c {
        Cols::All => Columns::All,
        Cols::Families => Columns::Families(&["d", "t"]),
        Cols::Slice { family, from, to, offset, limit, keys_only } => Columns::Slice(ColumnSlice {
            family: Bytes::from_static(FAMILIES[*family].0.as_bytes()),
            from: from.map(q),
            to: to.map(q),
            offset: *offset,
            limit: *limit,
            keys_only: *keys_only,
        }),
    }
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..4),
        any::<i64>().prop_map(|v| v.to_be_bytes().to_vec()),
        Just(b"same".to_vec()),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let row = 0..ROWS.len();
    let family = 1..FAMILIES.len();
    // Often the empty qualifier, so rows hold it next to the columns a slice reads.
    let qualifier = prop_oneof![1 => Just(0usize), 3 => 0..QUALIFIERS.len()];
    let ts = 0u64..20;
    prop_oneof![
        6 => (row.clone(), 0..FAMILIES.len(), qualifier.clone(), value(), ts.clone())
            .prop_map(|(row, family, qualifier, value, ts)| Op::Put { row, family, qualifier, value, ts }),
        // Several columns of one family in one row mutation: rows wide enough for slices.
        2 => (row.clone(), family.clone(), prop::collection::vec(qualifier.clone(), 1..5), value(), ts.clone())
            .prop_map(|(row, family, qualifiers, value, ts)| Op::PutColumns { row, family, qualifiers, value, ts }),
        1 => (row.clone(), family.clone(), qualifier.clone())
            .prop_map(|(row, family, qualifier)| Op::DeleteColumn { row, family, qualifier }),
        1 => row.clone().prop_map(|row| Op::DeleteRow { row }),
        1 => (row.clone(), family.clone()).prop_map(|(row, family)| Op::DeleteFamily { row, family }),
        2 => (row.clone(), qualifier.clone(), -5i64..5).prop_map(|(row, qualifier, delta)| Op::Increment { row, qualifier, delta }),
        2 => (row.clone(), family.clone(), qualifier.clone(), value(), value(), ts.clone())
            .prop_map(|(row, family, qualifier, value, put, ts)| Op::CheckEquals { row, family, qualifier, value, put, ts }),
        2 => (row.clone(), family.clone(), qualifier.clone(), value(), ts.clone())
            .prop_map(|(row, family, qualifier, put, ts)| Op::CheckAbsent { row, family, qualifier, put, ts }),
        2 => (prop::collection::vec(row.clone(), 1..4), 1u32..5, prop::option::of((0u64..20, 0u64..21)), cols())
            .prop_map(|(rows, versions, range, columns)| Op::Read { rows, versions, range, columns }),
        3 => (row.clone(), prop::option::of(0..ROWS.len() + 1), any::<bool>(), prop::option::of(0usize..4), 1u32..4, cols())
            .prop_map(|(start, end, reverse, limit, versions, columns)| Op::Scan { start, end, reverse, limit, versions, columns }),
    ]
}

fn spec() -> TableSpec {
    TableSpec {
        name: TABLE.into(),
        families: FAMILIES
            .iter()
            .map(|(name, max_versions, ttl_secs)| FamilySpec {
                name: (*name).into(),
                max_versions: *max_versions,
                ttl_secs: *ttl_secs,
            })
            .collect(),
        split_keys: vec![b"b".to_vec()],
        split_policy: SplitPolicy::MidKey,
        deferred: false,
    }
}

fn put(family: usize, qualifier: usize, value: &[u8], ts: u64) -> CellMutation {
    CellMutation::Put {
        family: Bytes::from_static(FAMILIES[family].0.as_bytes()),
        qualifier: Bytes::from_static(QUALIFIERS[qualifier].as_bytes()),
        value: Bytes::copy_from_slice(value),
        timestamp: Some(ts),
    }
}

fn key(row: usize) -> Bytes {
    Bytes::from_static(ROWS[row].as_bytes())
}

/// A row as compared: counter cells without their store-assigned timestamps.
fn comparable(row: Row) -> Row {
    let cells = row
        .cells
        .into_iter()
        .map(|mut c| {
            if c.family == "c" {
                c.timestamp = 0;
            }
            c
        })
        .collect();
    Row { key: row.key, cells }
}

/// What an operation answered, in a form both stores must agree on.
#[derive(Debug, PartialEq)]
enum Answer {
    Done,
    Failed,
    Applied(bool),
    Counter(i64),
    Rows(Vec<Option<Row>>),
}

fn run(store: &dyn Store, op: &Op, base: u64) -> Answer {
    let answer = |r: cellar::orm::Result<Answer>| r.unwrap_or(Answer::Failed);
    match op {
        Op::Put { row, family, qualifier, value, ts } => answer(
            store
                .mutate(
                    TABLE,
                    vec![RowMutation { row: key(*row), mutations: vec![put(*family, *qualifier, value, base + ts)] }],
                )
                .map(|()| Answer::Done),
        ),
        Op::PutColumns { row, family, qualifiers, value, ts } => {
            let mutations = qualifiers.iter().map(|q| put(*family, *q, value, base + ts)).collect();
            answer(store.mutate(TABLE, vec![RowMutation { row: key(*row), mutations }]).map(|()| Answer::Done))
        }
        Op::DeleteColumn { row, family, qualifier } => {
            let m = CellMutation::DeleteColumn {
                family: Bytes::from_static(FAMILIES[*family].0.as_bytes()),
                qualifier: Bytes::from_static(QUALIFIERS[*qualifier].as_bytes()),
            };
            answer(store.mutate(TABLE, vec![RowMutation { row: key(*row), mutations: vec![m] }]).map(|()| Answer::Done))
        }
        Op::DeleteRow { row } => answer(
            store
                .mutate(TABLE, vec![RowMutation { row: key(*row), mutations: vec![CellMutation::DeleteRow] }])
                .map(|()| Answer::Done),
        ),
        Op::DeleteFamily { row, family } => {
            let m = CellMutation::DeleteFamily { family: Bytes::from_static(FAMILIES[*family].0.as_bytes()) };
            answer(store.mutate(TABLE, vec![RowMutation { row: key(*row), mutations: vec![m] }]).map(|()| Answer::Done))
        }
        Op::Increment { row, qualifier, delta } => {
            answer(store.increment(TABLE, key(*row), "c", QUALIFIERS[*qualifier], *delta).map(Answer::Counter))
        }
        Op::CheckEquals { row, family, qualifier, value, put: new, ts } => {
            let condition = Condition::Equals {
                family: Bytes::from_static(FAMILIES[*family].0.as_bytes()),
                qualifier: Bytes::from_static(QUALIFIERS[*qualifier].as_bytes()),
                value: Bytes::copy_from_slice(value),
            };
            let m = RowMutation { row: key(*row), mutations: vec![put(*family, *qualifier, new, base + ts)] };
            answer(store.check_and_mutate(TABLE, condition, m).map(Answer::Applied))
        }
        Op::CheckAbsent { row, family, qualifier, put: new, ts } => {
            let condition = Condition::Absent {
                family: Bytes::from_static(FAMILIES[*family].0.as_bytes()),
                qualifier: Bytes::from_static(QUALIFIERS[*qualifier].as_bytes()),
            };
            let m = RowMutation { row: key(*row), mutations: vec![put(*family, *qualifier, new, base + ts)] };
            answer(store.check_and_mutate(TABLE, condition, m).map(Answer::Applied))
        }
        Op::Read { rows, versions, range, columns: c } => {
            let keys: Vec<Bytes> = rows.iter().map(|r| key(*r)).collect();
            let read = ReadSpec {
                max_versions: *versions,
                time_range: range.map(|(a, b)| (base + a, base + b)),
                columns: columns(c),
            };
            let returned = store.read_rows(TABLE, &keys, &read);
            if let Ok(rows) = &returned {
                let mut lent = vec![None; keys.len()];
                store.read_rows_with(TABLE, &keys, &read, &mut |i, row| lent[i] = row.map(|r| r.to_row())).unwrap();
                assert_eq!(&lent, rows, "read_rows_with lends what read_rows returns");
            }
            answer(returned.map(|rows| Answer::Rows(rows.into_iter().map(|r| r.map(comparable)).collect())))
        }
        Op::Scan { start, end, reverse, limit, versions, columns: c } => {
            let spec = ScanSpec {
                start: key(*start),
                end: end.map(|e| if e == ROWS.len() { Bytes::from_static(b"z") } else { key(e) }),
                reverse: *reverse,
                limit: *limit,
                read: ReadSpec { max_versions: *versions, time_range: None, columns: columns(c) },
            };
            let returned = store.scan(TABLE, &spec).and_then(|rows| rows.collect::<cellar::orm::Result<Vec<Row>>>());
            if let Ok(rows) = &returned {
                let mut cursor = store.scan_cursor(TABLE, &spec).unwrap();
                let mut lent = Vec::new();
                while cursor.advance().unwrap() {
                    lent.push(cursor.row().expect("a cursor on a row lends it").to_row());
                }
                assert!(cursor.row().is_none() && !cursor.advance().unwrap(), "a cursor at its end stays there");
                assert_eq!(&lent, rows, "scan_cursor lends what scan returns");
            }
            answer(returned.map(|rows| Answer::Rows(rows.into_iter().map(|r| Some(comparable(r))).collect())))
        }
    }
}

proptest! {
    // `CELLAR_DIFF_CASES` for a longer run.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("CELLAR_DIFF_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(24),
        ..ProptestConfig::default()
    })]

    /// Without the emulator too: the embedded store, metered, lends what it returns (checked
    /// in `run`).
    #[test]
    fn the_embedded_store_lends_what_it_returns(ops in prop::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let embedded = EmbeddedStore::new(Engine::open(dir.path(), EngineOptions::default()).unwrap());
        let store = Metered::new(std::sync::Arc::new(embedded));
        store.ensure_table(&spec()).unwrap();
        let base = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64 - 60_000;
        for op in &ops {
            run(&store, op, base);
        }
    }

    #[test]
    fn embedded_and_bigtable_answer_alike(ops in prop::collection::vec(op(), 1..40)) {
        let Some(bigtable) = common::backend::bigtable_store() else { return Ok(()) };
        let dir = tempfile::tempdir().unwrap();
        let embedded = EmbeddedStore::new(Engine::open(dir.path(), EngineOptions::default()).unwrap());
        embedded.ensure_table(&spec()).unwrap();
        bigtable.ensure_table(&spec()).unwrap();
        // Recent enough that the one-hour TTL keeps every cell for the whole run.
        let base = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64 - 60_000;
        for (i, op) in ops.iter().enumerate() {
            let want = run(&embedded, op, base);
            let got = run(&bigtable, op, base);
            prop_assert_eq!(&got, &want, "op {} of {:?}", i, ops);
        }
    }
}

/// Runs `ops` on a fresh embedded store and a fresh Bigtable instance, asserts they answer
/// alike, and returns the answers; `None` when the emulator is skipped.
fn on_both_stores(ops: &[Op]) -> Option<Vec<Answer>> {
    let bigtable = common::backend::bigtable_store()?;
    let dir = tempfile::tempdir().unwrap();
    let embedded = EmbeddedStore::new(Engine::open(dir.path(), EngineOptions::default()).unwrap());
    embedded.ensure_table(&spec()).unwrap();
    bigtable.ensure_table(&spec()).unwrap();
    let base = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64 - 60_000;
    let answers: Vec<Answer> = ops.iter().map(|op| run(&embedded, op, base)).collect();
    for (i, (op, want)) in ops.iter().zip(&answers).enumerate() {
        assert_eq!(&run(&bigtable, op, base), want, "op {i} of {ops:?}");
    }
    Some(answers)
}

/// The keys and qualifiers of a scan's rows.
fn scanned(answer: &Answer) -> Vec<(String, Vec<String>)> {
    let Answer::Rows(rows) = answer else { panic!("not rows: {answer:?}") };
    rows.iter()
        .flatten()
        .map(|r| {
            let qualifiers = r.cells.iter().map(|c| String::from_utf8_lossy(&c.qualifier).into_owned()).collect();
            (String::from_utf8_lossy(&r.key).into_owned(), qualifiers)
        })
        .collect()
}

/// A scan with a row limit, of a slice with an offset that Bigtable cannot apply itself (three
/// versions per column), returns its limit's worth of rows when a row the offset empties comes
/// first: in either direction, the emptied row does not count against the limit.
#[test]
fn a_scan_limit_counts_rows_a_column_offset_leaves_cells_in() {
    const D: usize = 1;
    const NUL_Q: usize = 2;
    let slice = Cols::Slice { family: D, from: Some(NUL_Q), to: None, offset: 1, limit: None, keys_only: false };
    for (reverse, one_column, three_columns) in [(true, 1, 0), (false, 0, 1)] {
        let ops = [
            Op::Put { row: one_column, family: D, qualifier: NUL_Q, value: b"v".to_vec(), ts: 1 },
            Op::PutColumns { row: three_columns, family: D, qualifiers: vec![3, 4, 5], value: b"v".to_vec(), ts: 1 },
            // From `a`: reversed, `b` comes first; forward, `a` does.
            Op::Scan { start: 0, end: None, reverse, limit: Some(1), versions: 3, columns: slice.clone() },
        ];
        let Some(answers) = on_both_stores(&ops) else { return };
        let want = vec![(ROWS[three_columns].to_string(), vec!["q2".to_string(), "q3".to_string()])];
        assert_eq!(scanned(&answers[2]), want, "reverse: {reverse}");
    }
}
