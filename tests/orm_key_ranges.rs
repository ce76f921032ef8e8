//! Typed key ranges against a model: whatever the key layout (plain, descending, hash-salted,
//! bucketed, hashed), whatever the range form (`..`, `a..`, `..b`, `..=b`, `a..b`, `a..=b`, an
//! excluded start) and whatever the values (0, 255, 256, `u64::MAX`: encodings that end in or
//! consist of `0xFF` bytes), a scan returns exactly the written keys the range holds, in key
//! order, for entities, record enums and aggregates.
//!
//! The regression test runs on every backend; the property tests on the embedded engine, with
//! `CELLAR_PROPTEST_CASES` cases (default 64).

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};

use cellar::orm::aggregate::Aggregate;
use cellar::orm::key::md5_of;
use cellar::orm::repo::Query;
use cellar::orm::Entity;
use cellar::prelude::*;
use proptest::prelude::*;

mod common;

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "kr_plain")]
struct Plain {
    #[cellar(key)]
    id: u64,
}

/// `b` descending: 0 encodes as eight `0xFF` bytes.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "kr_desc")]
struct Desc {
    #[cellar(partition)]
    a: u64,
    #[cellar(key, desc)]
    b: u64,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "kr_salted", salt(buckets = 4))]
struct Salted {
    #[cellar(partition)]
    a: u64,
    #[cellar(key)]
    b: u64,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "kr_bucketed", bucket(field = "at", buckets = 4))]
struct Bucketed {
    #[cellar(key)]
    at: u64,
}

/// Keys in MD5 order: a range is a range of digests.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "kr_hashed", salt(buckets = 4))]
struct Hashed {
    #[cellar(key, hash = "md5")]
    id: u64,
}

/// Two record types in one salted table, the second with record type `0xFF`.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "kr_ledger", record_type = 1, salt(buckets = 4))]
struct Account {
    #[cellar(partition)]
    a: u64,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "kr_ledger", record_type = 255, salt(buckets = 4))]
struct Entry {
    #[cellar(partition)]
    a: u64,
    #[cellar(key)]
    b: u64,
}

#[derive(Record, Debug, Clone, PartialEq)]
enum Ledger {
    Account(Account),
    Entry(Entry),
}

#[derive(Aggregate, Debug, Clone, PartialEq)]
#[cellar(table = "kr_salted_orders", salt(buckets = 4))]
struct SaltedOrder {
    #[cellar(partition)]
    customer: u64,
    #[cellar(key)]
    order_no: u64,
    #[cellar(column = "s")]
    status: String,
    #[cellar(children)]
    lines: Vec<Line>,
}

/// Descending order numbers: order 0 of customer `u64::MAX` is a key of sixteen `0xFF` bytes.
#[derive(Aggregate, Debug, Clone, PartialEq)]
#[cellar(table = "kr_desc_orders")]
struct DescOrder {
    #[cellar(partition)]
    customer: u64,
    #[cellar(key, desc)]
    order_no: u64,
    #[cellar(column = "s")]
    status: String,
    #[cellar(children)]
    lines: Vec<Line>,
}

#[derive(Aggregate, Debug, Clone, PartialEq)]
#[cellar(table = "kr_bucketed_orders", bucket(field = "order_no", buckets = 4))]
struct BucketedOrder {
    #[cellar(partition)]
    customer: u64,
    #[cellar(key)]
    order_no: u64,
    #[cellar(column = "s")]
    status: String,
    #[cellar(children)]
    lines: Vec<Line>,
}

#[derive(Part, Debug, Clone, PartialEq)]
struct Line {
    #[cellar(key)]
    line: u16,
    #[cellar(column = "q")]
    qty: u32,
}

fn lines(n: u64) -> Vec<Line> {
    // Zero to two child rows after the root: an aggregate's rows are a group a bound must not cut.
    (0..(n % 3) as u16).map(|line| Line { line, qty: u32::from(line) + 1 }).collect()
}

on_every_backend! {
fn a_salted_aggregates_inclusive_range_over_an_order_ending_in_0xff_returns_that_order(db: Db) {
    let orders = db.aggregates::<SaltedOrder>().unwrap();
    let order = |customer: u64, order_no: u64| SaltedOrder {
        customer,
        order_no,
        status: format!("{customer}/{order_no}"),
        lines: lines(order_no),
    };
    for customer in [7, 8] {
        for n in [0, 1, 254, 255, 256, u64::MAX - 1, u64::MAX] {
            orders.put(&order(customer, n)).unwrap();
        }
    }
    for n in [255, u64::MAX] {
        let k = SaltedOrderKey::from((7, n));
        let got = orders.scan().range(k.clone()..=k.clone()).to_vec().unwrap();
        assert_eq!(got, [order(7, n)], "7/{n}..=7/{n}");
        let got = orders.scan().range(k.clone()..=k).reverse().to_vec().unwrap();
        assert_eq!(got, [order(7, n)], "7/{n}..=7/{n} reversed");
    }
    // The end of customer 7's orders is the start of customer 8's.
    let last = SaltedOrderKey::from((7, u64::MAX));
    let after = orders.scan().range((Bound::Excluded(last), Bound::Unbounded)).to_vec().unwrap();
    let after: Vec<(u64, u64)> = after.iter().map(|o| (o.customer, o.order_no)).collect();
    assert_eq!(after, [0, 1, 254, 255, 256, u64::MAX - 1, u64::MAX].map(|n| (8, n)));
}
}

on_every_backend! {
fn a_key_of_nothing_but_0xff_bytes_is_the_last_key_of_every_range(db: Db) {
    // Customer `u64::MAX`, order 0 descending: sixteen 0xFF bytes, after which nothing sorts.
    let orders = db.aggregates::<DescOrder>().unwrap();
    let order = |customer: u64, order_no: u64| DescOrder { customer, order_no, status: "d".into(), lines: lines(2) };
    let (first, last) = (order(u64::MAX, 1), order(u64::MAX, 0));
    orders.put(&first).unwrap();
    orders.put(&last).unwrap();
    let k = DescOrderKey::from((u64::MAX, 0));
    assert_eq!(orders.scan().range(k.clone()..=k.clone()).to_vec().unwrap(), std::slice::from_ref(&last));
    assert_eq!(orders.scan().range(..=k.clone()).to_vec().unwrap(), [first.clone(), last.clone()]);
    assert_eq!(orders.scan().range(k.clone()..).reverse().to_vec().unwrap(), std::slice::from_ref(&last));
    assert_eq!(orders.scan().range((Bound::Excluded(k.clone()), Bound::Unbounded)).to_vec().unwrap(), []);
    assert_eq!(orders.scan().range((Bound::Excluded(k), Bound::Unbounded)).reverse().to_vec().unwrap(), []);
    let entities = db.repo::<Desc>().unwrap();
    entities.put(&Desc { a: u64::MAX, b: 0 }).unwrap();
    let k = DescKey::from((u64::MAX, 0));
    assert_eq!(entities.scan().range(k.clone()..=k.clone()).to_vec().unwrap(), [Desc { a: u64::MAX, b: 0 }]);
    assert_eq!(entities.scan().range((Bound::Excluded(k), Bound::Unbounded)).to_vec().unwrap(), []);
}
}

/// A range over keys `K`, in each form a caller writes one.
#[derive(Debug, Clone)]
enum Span<K> {
    Full,
    From(K),
    To(K),
    ToInclusive(K),
    Between(K, K),
    Inclusive(K, K),
    /// An excluded start (only a `(Bound, Bound)` pair has one).
    After(K, Bound<K>),
}

impl<K: Clone> Span<K> {
    /// The start and end bounds the range form gives.
    fn bounds(&self) -> (Bound<K>, Bound<K>) {
        use Bound::*;
        match self.clone() {
            Span::Full => (Unbounded, Unbounded),
            Span::From(a) => (Included(a), Unbounded),
            Span::To(b) => (Unbounded, Excluded(b)),
            Span::ToInclusive(b) => (Unbounded, Included(b)),
            Span::Between(a, b) => (Included(a), Excluded(b)),
            Span::Inclusive(a, b) => (Included(a), Included(b)),
            Span::After(a, end) => (Excluded(a), end),
        }
    }

    /// The written keys inside the range, compared by `order` (the order the layout gives
    /// typed keys), in that order: what a scan must return.
    fn select<M: Ord>(&self, written: &[K], order: impl Fn(&K) -> M) -> Vec<K> {
        let (lo, hi) = self.bounds();
        let range = (lo.as_ref().map(&order), hi.as_ref().map(&order));
        let model: BTreeMap<M, K> = written.iter().map(|k| (order(k), k.clone())).collect();
        // Filtered rather than `BTreeMap::range`, which rejects a start past the end: such a
        // range is simply empty.
        model.into_iter().filter(|(m, _)| range.contains(m)).map(|(_, k)| k).collect()
    }
}

/// Applies `span` to a query through the range form it stands for, keys converted by `key`.
macro_rules! ranged {
    ($query:expr, $span:expr, $key:expr) => {{
        let (q, key) = ($query, $key);
        match $span.clone() {
            Span::Full => q.range(..),
            Span::From(a) => q.range(key(a)..),
            Span::To(b) => q.range(..key(b)),
            Span::ToInclusive(b) => q.range(..=key(b)),
            Span::Between(a, b) => q.range(key(a)..key(b)),
            Span::Inclusive(a, b) => q.range(key(a)..=key(b)),
            Span::After(a, end) => q.range((Bound::Excluded(key(a)), end.map(key))),
        }
    }};
}

/// Values whose encodings sit at byte edges: all zero, ending in or made of `0xFF`, carrying
/// into the next byte.
const EDGES: [u64; 12] =
    [0, 1, 254, 255, 256, 0xFFFF, 0x1_0000, 0xFF00_0000_0000_0000, u64::MAX - 255, u64::MAX - 1, u64::MAX, 7];

fn value() -> impl Strategy<Value = u64> + Clone {
    prop_oneof![4 => proptest::sample::select(EDGES.to_vec()), 1 => any::<u64>()]
}

fn pair() -> impl Strategy<Value = (u64, u64)> + Clone {
    (value(), value())
}

/// Written keys, and ranges (in scan direction) whose bounds are mostly written keys.
fn case<K: Clone + Debug + 'static>(
    key: impl Strategy<Value = K> + Clone + 'static,
) -> impl Strategy<Value = (Vec<K>, Vec<(Span<K>, bool)>)> {
    proptest::collection::vec(key.clone(), 1..10).prop_flat_map(move |written| {
        let bound = prop_oneof![proptest::sample::select(written.clone()), key.clone()];
        let end = prop_oneof![
            Just(Bound::Unbounded),
            bound.clone().prop_map(Bound::Included),
            bound.clone().prop_map(Bound::Excluded)
        ];
        let span = prop_oneof![
            Just(Span::Full),
            bound.clone().prop_map(Span::From),
            bound.clone().prop_map(Span::To),
            bound.clone().prop_map(Span::ToInclusive),
            (bound.clone(), bound.clone()).prop_map(|(a, b)| Span::Between(a, b)),
            (bound.clone(), bound.clone()).prop_map(|(a, b)| Span::Inclusive(a, b)),
            (bound.clone(), end).prop_map(|(a, e)| Span::After(a, e)),
        ];
        (Just(written), proptest::collection::vec((span, any::<bool>()), 1..8))
    })
}

/// Written keys, and keys to look up (mostly written ones) each in a scan direction.
fn probes<K: Clone + Debug + 'static>(
    key: impl Strategy<Value = K> + Clone + 'static,
) -> impl Strategy<Value = (Vec<K>, Vec<(K, bool)>)> {
    proptest::collection::vec(key.clone(), 1..10).prop_flat_map(move |written| {
        let probe = prop_oneof![proptest::sample::select(written.clone()), key.clone()];
        (Just(written), proptest::collection::vec((probe, any::<bool>()), 1..6))
    })
}

fn cases() -> u32 {
    std::env::var("CELLAR_PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(64)
}

/// Writes `written` as entities, then checks every range scan against the model.
fn check_entities<E: Entity, K: Clone + Debug + PartialEq, M: Ord>(
    written: &[K],
    spans: &[(Span<K>, bool)],
    entity: impl Fn(&K) -> E,
    key_of: impl Fn(&E) -> K,
    typed: impl Fn(K) -> E::Key,
    order: impl Fn(&K) -> M,
) -> Result<(), TestCaseError> {
    let db = Db::open_temporary().unwrap();
    let repo = db.repo::<E>().unwrap();
    for k in written {
        repo.put(&entity(k)).unwrap();
    }
    for (span, reverse) in spans {
        let q = ranged!(repo.scan(), span, &typed);
        let q = if *reverse { q.reverse() } else { q };
        let got: Vec<K> = q.to_vec().unwrap().iter().map(&key_of).collect();
        let mut expected = span.select(written, &order);
        if *reverse {
            expected.reverse();
        }
        prop_assert_eq!(got, expected, "{} {:?} reverse {}", E::SCHEMA.entity, span, reverse);
    }
    Ok(())
}

/// Writes `written` as aggregates (with child rows), then checks every range scan.
fn check_aggregates<A: Aggregate + Debug + PartialEq, M: Ord>(
    written: &[(u64, u64)],
    spans: &[(Span<(u64, u64)>, bool)],
    aggregate: impl Fn(&(u64, u64)) -> A,
    typed: impl Fn((u64, u64)) -> A::Key,
    order: impl Fn(&(u64, u64)) -> M,
) -> Result<(), TestCaseError> {
    let db = Db::open_temporary().unwrap();
    let repo = db.aggregates::<A>().unwrap();
    for k in written {
        repo.put(&aggregate(k)).unwrap();
    }
    for (span, reverse) in spans {
        let q = ranged!(repo.scan(), span, &typed);
        let q = if *reverse { q.reverse() } else { q };
        let got = q.to_vec().unwrap();
        let mut expected: Vec<A> = span.select(written, &order).iter().map(&aggregate).collect();
        if *reverse {
            expected.reverse();
        }
        prop_assert_eq!(got, expected, "{} {:?} reverse {}", A::SCHEMA.entity, span, reverse);
    }
    Ok(())
}

/// The order of a key whose second part is descending.
fn descending(k: &(u64, u64)) -> (u64, Reverse<u64>) {
    (k.0, Reverse(k.1))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn plain_key_ranges_match_the_model((written, spans) in case(value())) {
        check_entities(&written, &spans, |&id| Plain { id }, |e| e.id, PlainKey::from, |&k| k)?;
    }

    #[test]
    fn descending_key_ranges_match_the_model((written, spans) in case(pair())) {
        check_entities(&written, &spans, |&(a, b)| Desc { a, b }, |e| (e.a, e.b), DescKey::from, descending)?;
    }

    #[test]
    fn salted_key_ranges_match_the_model((written, spans) in case(pair())) {
        check_entities(&written, &spans, |&(a, b)| Salted { a, b }, |e| (e.a, e.b), SaltedKey::from, |&k| k)?;
    }

    #[test]
    fn bucketed_key_ranges_match_the_model((written, spans) in case(value())) {
        check_entities(&written, &spans, |&at| Bucketed { at }, |e| e.at, BucketedKey::from, |&k| k)?;
    }

    #[test]
    fn hashed_key_ranges_match_the_model_in_digest_order((written, spans) in case(value())) {
        let digest = |k: &u64| md5_of(k, "id").unwrap();
        check_entities(&written, &spans, |&id| Hashed { id }, |e| e.id, HashedKey::from, digest)?;
    }

    #[test]
    fn record_type_key_ranges_match_the_model((written, spans) in case(pair())) {
        check_entities(&written, &spans, |&(a, b)| Entry { a, b }, |e| (e.a, e.b), EntryKey::from, |&k| k)?;
        let accounts: Vec<u64> = written.iter().map(|k| k.0).collect();
        let spans: Vec<(Span<u64>, bool)> = spans.iter().map(|(s, r)| (first(s), *r)).collect();
        check_entities(&accounts, &spans, |&a| Account { a }, |e| e.a, AccountKey::from, |&k| k)?;
    }

    #[test]
    fn record_partition_scans_match_the_model((written, probes) in probes(pair())) {
        let db = Db::open_temporary().unwrap();
        let (accounts, entries) = (db.repo::<Account>().unwrap(), db.repo::<Entry>().unwrap());
        // Records in key order: the account (record type 1) before its entries (255).
        let mut model = BTreeMap::new();
        for &(a, b) in &written {
            accounts.put(&Account { a }).unwrap();
            entries.put(&Entry { a, b }).unwrap();
            model.insert((a, 1u8, 0), Ledger::Account(Account { a }));
            model.insert((a, 255, b), Ledger::Entry(Entry { a, b }));
        }
        let records = db.records::<Ledger>().unwrap();
        prop_assert_eq!(records.scan().to_vec().unwrap(), model.values().cloned().collect::<Vec<_>>());
        for &((a, b), reverse) in &probes {
            let scan = |q: Query<'_, Ledger>| if reverse { q.reverse() } else { q }.to_vec().unwrap();
            let in_order = |mut v: Vec<Ledger>| {
                if reverse {
                    v.reverse();
                }
                v
            };
            let partition = in_order(model.range((a, 0, 0)..=(a, 255, u64::MAX)).map(|(_, r)| r.clone()).collect());
            let entry: Vec<Ledger> = model.get(&(a, 255, b)).cloned().into_iter().collect();
            let from_account = scan(records.scan().partition(AccountKey::a(a)));
            prop_assert_eq!(from_account, partition.clone(), "partition {} from an account", a);
            let from_entry = scan(records.scan().partition(EntryKey::a(a)));
            prop_assert_eq!(from_entry, partition, "partition {} from an entry", a);
            let one = scan(records.scan().partition(EntryKey::from((a, b))));
            prop_assert_eq!(one, entry, "entry {}/{}", a, b);
        }
    }

    #[test]
    fn salted_aggregate_ranges_match_the_model((written, spans) in case(pair())) {
        let order = |&(customer, order_no): &(u64, u64)| {
            SaltedOrder { customer, order_no, status: "s".into(), lines: lines(order_no) }
        };
        check_aggregates(&written, &spans, order, SaltedOrderKey::from, |&k| k)?;
    }

    #[test]
    fn descending_aggregate_ranges_match_the_model((written, spans) in case(pair())) {
        let order = |&(customer, order_no): &(u64, u64)| {
            DescOrder { customer, order_no, status: "d".into(), lines: lines(order_no) }
        };
        check_aggregates(&written, &spans, order, DescOrderKey::from, descending)?;
    }

    #[test]
    fn bucketed_aggregate_ranges_match_the_model((written, spans) in case(pair())) {
        let order = |&(customer, order_no): &(u64, u64)| {
            BucketedOrder { customer, order_no, status: "b".into(), lines: lines(order_no) }
        };
        check_aggregates(&written, &spans, order, BucketedOrderKey::from, |&k| k)?;
    }
}

/// The same range form over the first key part.
fn first(span: &Span<(u64, u64)>) -> Span<u64> {
    match span.clone() {
        Span::Full => Span::Full,
        Span::From(a) => Span::From(a.0),
        Span::To(b) => Span::To(b.0),
        Span::ToInclusive(b) => Span::ToInclusive(b.0),
        Span::Between(a, b) => Span::Between(a.0, b.0),
        Span::Inclusive(a, b) => Span::Inclusive(a.0, b.0),
        Span::After(a, end) => Span::After(a.0, end.map(|k| k.0)),
    }
}
