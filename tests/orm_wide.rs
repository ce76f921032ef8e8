//! Collections stored as columns (`cellar::orm::wide`): entries written and deleted one by one
//! without reading the row, and slices — first N, pages after a key, key ranges, single
//! entries, counts — equal to the same slices of an in-memory model, in ascending and
//! descending key order, next to other columns of the row.
//!
//! Each test runs on every backend: the embedded engine and the Bigtable emulator.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use cellar::orm::key::{Form, Modifier, PartSpec};
use cellar::orm::store::{CellMutation, FamilySpec, RowMutation, SplitPolicy, TableSpec};
use cellar::orm::wide::{WideColumns, WideSpec};
use cellar::prelude::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const POINTS: WideSpec = WideSpec {
    field: "points",
    family: "p",
    prefix: b"pt",
    key: PartSpec::new("points", Form::Last),
    lazy: false,
    key_type: "u16",
    key_width: Some(2),
    value_type: "f64",
};
const NEWEST: WideSpec = WideSpec {
    field: "newest",
    family: "n",
    prefix: b"",
    key: PartSpec::new("newest", Form::Last).with(Modifier::Desc),
    lazy: false,
    key_type: "u16",
    key_width: Some(2),
    value_type: "f64",
};

fn table(db: &Db) {
    let family = |name: &str| FamilySpec { name: name.into(), max_versions: 1, ttl_secs: None };
    db.store()
        .ensure_table(&TableSpec {
            name: "series".into(),
            families: vec![family("d"), family("p"), family("n")],
            split_keys: Vec::new(),
            split_policy: SplitPolicy::MidKey,
            deferred: false,
        })
        .unwrap();
}

#[derive(Debug, Clone)]
enum Op {
    Put(u16, i64),
    PutMany(Vec<(u16, i64)>),
    Delete(u16),
}

#[derive(Debug, Clone)]
enum Read {
    First(usize),
    After(u16, usize),
    Between(u16, u16, Option<usize>),
    Get(u16),
    Count,
    All,
    Last(usize),
    Page(usize, usize),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => (0u16..500, any::<i64>()).prop_map(|(k, v)| Op::Put(k, v)),
        1 => prop::collection::vec((0u16..500, any::<i64>()), 0..20).prop_map(Op::PutMany),
        2 => (0u16..500).prop_map(Op::Delete),
    ];
    prop::collection::vec(op, 1..60)
}

fn reads() -> impl Strategy<Value = Vec<Read>> {
    let read = prop_oneof![
        (0usize..40).prop_map(Read::First),
        (0u16..500, 0usize..40).prop_map(|(k, n)| Read::After(k, n)),
        (0u16..500, 0u16..500, prop::option::of(0usize..40)).prop_map(|(a, b, n)| Read::Between(a, b, n)),
        (0u16..500).prop_map(Read::Get),
        Just(Read::Count),
        Just(Read::All),
        (0usize..40).prop_map(Read::Last),
        (0usize..60, 0usize..20).prop_map(|(o, n)| Read::Page(o, n)),
    ];
    prop::collection::vec(read, 1..12)
}

/// What `read` answers on the model, in the field's order (`desc`: largest key first).
fn expected(model: &BTreeMap<u16, i64>, read: &Read, desc: bool) -> Vec<(u16, i64)> {
    let mut ordered: Vec<(u16, i64)> = model.iter().map(|(k, v)| (*k, *v)).collect();
    if desc {
        ordered.reverse();
    }
    let before = |a: u16, b: u16| if desc { a > b } else { a < b };
    match read {
        Read::First(n) => ordered.into_iter().take(*n).collect(),
        Read::After(k, n) => ordered.into_iter().filter(|(x, _)| before(*k, *x)).take(*n).collect(),
        Read::Between(a, b, n) => ordered
            .into_iter()
            .filter(|(x, _)| !before(*x, *a) && before(*x, *b))
            .take(n.unwrap_or(usize::MAX))
            .collect(),
        Read::Get(k) => model.get(k).map(|v| vec![(*k, *v)]).unwrap_or_default(),
        Read::Count => vec![(model.len() as u16, 0)],
        Read::Last(n) => ordered.split_off(ordered.len().saturating_sub(*n)),
        Read::Page(offset, n) => ordered.into_iter().skip(*offset).take(*n).collect(),
        Read::All => ordered,
    }
}

fn answer(w: &WideColumns<u16, i64>, read: &Read) -> Vec<(u16, i64)> {
    match read {
        Read::First(n) => w.first(*n).unwrap(),
        Read::After(k, n) => w.after(k, *n).unwrap(),
        Read::Between(a, b, n) => w.between(a, b, *n).unwrap(),
        Read::Get(k) => w.get(k).unwrap().map(|v| vec![(*k, v)]).unwrap_or_default(),
        Read::Count => vec![(w.count().unwrap() as u16, 0)],
        Read::All => w.all().unwrap(),
        Read::Last(n) => w.last(*n).unwrap(),
        Read::Page(offset, n) => w.page(*offset, *n).unwrap(),
    }
}

on_every_backend! {
fn slices_match_a_model_in_both_orders(db: Db) {
    table(&db);
    // Other columns of the row stay out of every slice.
    let other = |row: &str| RowMutation {
        row: Bytes::copy_from_slice(row.as_bytes()),
        mutations: vec![CellMutation::Put {
            family: Bytes::from_static(b"p"),
            qualifier: Bytes::from_static(b"other"),
            value: Bytes::from_static(b"x"),
            timestamp: None,
        }],
    };
    let case = std::sync::atomic::AtomicU32::new(0);
    let mut runner = TestRunner::new(Config { cases: 16, ..Config::default() });
    runner
        .run(&(ops(), reads(), any::<bool>()), |(ops, reads, desc)| {
            let row = format!("series-{}", case.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
            db.store().mutate("series", vec![other(&row)]).unwrap();
            let spec = if desc { NEWEST } else { POINTS };
            let w: WideColumns<u16, i64> =
                WideColumns::new(db.store().clone(), "series", Bytes::from(row.clone()), spec);
            let mut model = BTreeMap::new();
            for op in &ops {
                match op {
                    Op::Put(k, v) => {
                        w.put(k, v).unwrap();
                        model.insert(*k, *v);
                    }
                    Op::PutMany(entries) => {
                        w.put_many(entries.iter().map(|(k, v)| (k, v))).unwrap();
                        model.extend(entries.iter().copied());
                    }
                    Op::Delete(k) => {
                        w.delete(k).unwrap();
                        model.remove(k);
                    }
                }
            }
            for read in &reads {
                prop_assert_eq!(answer(&w, read), expected(&model, read, desc), "{:?}", read);
            }
            Ok(())
        })
        .unwrap();
}
}

on_every_backend! {
fn a_first_page_reads_only_its_entries(db: Db) {
    table(&db);
    let w: WideColumns<u16, i64> = WideColumns::new(db.store().clone(), "series", Bytes::from_static(b"big"), POINTS);
    let entries: Vec<(u16, i64)> = (0..2_000).map(|k| (k, i64::from(k) * 10)).collect();
    w.put_many(entries.iter().map(|(k, v)| (k, v))).unwrap();
    let (page, costs) = db.measure(|| w.after(&999, 30).unwrap());
    assert_eq!(page.first(), Some(&(1000, 10_000)));
    assert_eq!(page.len(), 30);
    assert_eq!((costs.round_trips(), costs.cells_read), (1, 30), "{costs}");
    let (n, costs) = db.measure(|| w.count().unwrap());
    assert_eq!(n, 2_000);
    assert_eq!(costs.bytes_read, 2_000 * (3 + 1 + 4 + 8), "keys only: row key, family, qualifier, timestamp");
    // A key that does not decode is an error naming the column.
    let arc: Arc<dyn cellar::orm::Store> = db.store().clone();
    arc.mutate(
        "series",
        vec![RowMutation {
            row: Bytes::from_static(b"big"),
            mutations: vec![CellMutation::Put {
                family: Bytes::from_static(b"p"),
                qualifier: Bytes::from_static(b"pt\x01"),
                value: Bytes::from_static(b"12345678"),
                timestamp: None,
            }],
        }],
    )
    .unwrap();
    let err = w.all().unwrap_err();
    assert!(err.to_string().contains("points"), "{err}");
}
}

/// A sensor with an eager map (read with the entity, replaced whole by a put) and a lazy one
/// (left out of entity reads, reached through `Repository::wide`).
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "sensors")]
struct Sensor {
    #[cellar(key)]
    id: u32,
    #[cellar(column = "n")]
    name: String,
    #[cellar(columns(family = "r", prefix = "t"))]
    readings: BTreeMap<u32, f64>,
    #[cellar(columns(family = "l", desc, lazy))]
    log: BTreeMap<u64, String>,
}

fn sensor(id: u32, readings: &[(u32, f64)], log: &[(u64, &str)]) -> Sensor {
    Sensor {
        id,
        name: format!("sensor {id}"),
        readings: readings.iter().copied().collect(),
        log: log.iter().map(|(k, v)| (*k, v.to_string())).collect(),
    }
}

on_every_backend! {
fn entity_maps_are_eager_or_lazy(db: Db) {
    let sensors = db.repo::<Sensor>().unwrap();
    sensors.put(&sensor(7, &[(1, 0.5), (2, 1.5), (3, 2.5)], &[(100, "boot"), (200, "calibrated")])).unwrap();

    // An entity read returns the eager map and leaves the lazy one out, cells and all.
    let (got, costs) = db.measure(|| sensors.get(7).unwrap().unwrap());
    assert_eq!(got, sensor(7, &[(1, 0.5), (2, 1.5), (3, 2.5)], &[]));
    assert_eq!(costs.cells_read, 4, "name and three readings: {costs}");

    // The lazy map on demand, largest key first (`desc`), and counted without values.
    let log = sensors.wide(7, Sensor::LOG).unwrap();
    assert_eq!(log.all().unwrap(), vec![(200, "calibrated".to_string()), (100, "boot".to_string())]);
    log.put(&300, &"rebooted".to_string()).unwrap();
    assert_eq!(log.first(1).unwrap(), vec![(300, "rebooted".to_string())]);
    assert_eq!(log.count().unwrap(), 3);

    // A put replaces the eager map whole and only adds to the lazy one.
    sensors.put(&sensor(7, &[(9, 9.0)], &[(400, "moved")])).unwrap();
    assert_eq!(sensors.get(7).unwrap().unwrap().readings, [(9, 9.0)].into_iter().collect());
    assert_eq!(log.count().unwrap(), 4, "the lazy entries the put did not hold are kept");

    // Single entries of the eager map, without reading or rewriting the row.
    let readings = sensors.wide(7, Sensor::READINGS).unwrap();
    readings.put(&10, &10.0).unwrap();
    readings.delete(&9).unwrap();
    assert_eq!(sensors.get(7).unwrap().unwrap().readings, [(10, 10.0)].into_iter().collect());
    assert_eq!(readings.qualifier(&10).unwrap(), Bytes::from_static(b"t\x00\x00\x00\x0a"));

    // Scans read entities like gets; a delete takes the maps with the row.
    sensors.put(&sensor(8, &[], &[(1, "new")])).unwrap();
    let all = sensors.scan().to_vec().unwrap();
    assert_eq!(all.iter().map(|s| (s.id, s.readings.len(), s.log.len())).collect::<Vec<_>>(), vec![(7, 1, 0), (8, 0, 0)]);
    sensors.delete(7).unwrap();
    assert_eq!(sensors.get(7).unwrap(), None);
    assert_eq!(log.count().unwrap(), 0);
    assert_eq!(sensors.wide(8, Sensor::LOG).unwrap().all().unwrap(), vec![(1, "new".to_string())]);
}
}

#[test]
fn a_replaced_map_stays_replaced_through_flush_and_compaction() {
    use cellar::engine::{Engine, EngineOptions};
    use cellar::orm::store::EmbeddedStore;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    let db = Db::with_store(Arc::new(EmbeddedStore::new(engine.clone())));
    let sensors = db.repo::<Sensor>().unwrap();
    sensors.put(&sensor(1, &[(1, 1.0), (2, 2.0)], &[])).unwrap();
    engine.flush("sensors").unwrap();
    // The family delete and the new entries share a timestamp: the entries written after the
    // delete in the same row mutation survive it, in the memstore and in every file after.
    sensors.put(&sensor(1, &[(3, 3.0)], &[])).unwrap();
    let expected: BTreeMap<u32, f64> = [(3, 3.0)].into_iter().collect();
    assert_eq!(sensors.get(1).unwrap().unwrap().readings, expected);
    engine.flush("sensors").unwrap();
    assert_eq!(sensors.get(1).unwrap().unwrap().readings, expected);
    engine.major_compact("sensors").unwrap();
    assert_eq!(sensors.get(1).unwrap().unwrap().readings, expected);
    drop((sensors, db));
    drop(engine);
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    let db = Db::with_store(Arc::new(EmbeddedStore::new(engine)));
    assert_eq!(db.repo::<Sensor>().unwrap().get(1).unwrap().unwrap().readings, expected);
}

#[test]
fn the_layout_shows_where_each_map_lives() {
    let layout = Sensor::layout().to_string();
    assert!(layout.contains("  readings  r:\"t\" + key, smallest first, read with the entity"), "{layout}");
    assert!(layout.contains("  log       l:key, largest first, lazy: read on demand"), "{layout}");
    assert!(layout.contains("  r  max versions 1"), "{layout}");
}

/// An hour of readings per row, keyed by the second within the hour: bounded.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "hours")]
struct Hour {
    #[cellar(key)]
    sensor: u32,
    #[cellar(key)]
    hour: u32,
    #[cellar(columns(family = "s"))]
    seconds: BTreeMap<u16, f64>,
}

#[test]
fn advice_warns_of_maps_that_can_grow_without_bound() {
    use cellar::orm::advice::Rule;
    let advice = Sensor::advice();
    let unbounded: Vec<&str> =
        advice.iter().filter(|a| a.rule == Rule::UnboundedRow).map(|a| a.subject.as_str()).collect();
    assert_eq!(unbounded, ["map `readings`", "map `log`"], "{advice:?}");
    assert!(advice[0].reason.contains("`u32` keys allow more than 65536 entries"), "{}", advice[0]);
    assert!(advice[0].reason.contains("one row per entry"), "the tall alternative: {}", advice[0]);
    assert_eq!(Hour::advice(), [], "a u16 key bounds a row to 65,536 entries");
}

/// A map of `K` keys after `prefix`, ascending or descending.
fn spec_of(prefix: &'static [u8], desc: bool) -> WideSpec {
    let key = PartSpec::new("k", Form::Last).with(if desc { Modifier::Desc } else { Modifier::None });
    WideSpec { field: "k", family: "m", prefix, key, lazy: false, key_type: "K", key_width: None, value_type: "V" }
}

/// Qualifiers of `a` and `b` order as the keys do (reversed for `desc`), and decode back.
fn check_encoding<K: cellar::orm::key::KeyPart + PartialEq + Clone + std::fmt::Debug>(
    a: &K,
    b: &K,
    order: std::cmp::Ordering,
    prefix: &'static [u8],
    desc: bool,
) -> Result<(), TestCaseError> {
    let spec = spec_of(prefix, desc);
    let (qa, qb) = (spec.qualifier(a).unwrap(), spec.qualifier(b).unwrap());
    prop_assert!(qa.starts_with(prefix));
    prop_assert_eq!(qa.cmp(&qb), if desc { order.reverse() } else { order }, "{:?} vs {:?}", a, b);
    prop_assert_eq!(spec.key_of::<K>(&qa).unwrap(), Some(a.clone()));
    prop_assert_eq!(spec.key_of::<K>(&qb).unwrap(), Some(b.clone()));
    Ok(())
}

proptest! {
    #[test]
    fn qualifiers_order_as_their_keys_and_decode_back(
        prefix in prop::sample::select(vec![&b""[..], &b"p"[..], &b"\x00\xff"[..]]),
        desc in any::<bool>(),
        (a16, b16) in (any::<u16>(), any::<u16>()),
        (a64, b64) in (any::<i64>(), any::<i64>()),
        (af, bf) in (any::<f64>().prop_filter("not NaN", |f| !f.is_nan()), any::<f64>().prop_filter("not NaN", |f| !f.is_nan())),
        (astr, bstr) in (".{0,12}", ".{0,12}"),
        (abytes, bbytes) in (prop::collection::vec(any::<u8>(), 0..10), prop::collection::vec(any::<u8>(), 0..10)),
    ) {
        check_encoding(&a16, &b16, a16.cmp(&b16), prefix, desc)?;
        check_encoding(&a64, &b64, a64.cmp(&b64), prefix, desc)?;
        check_encoding(&af, &bf, af.total_cmp(&bf), prefix, desc)?;
        check_encoding(&astr, &bstr, astr.cmp(&bstr), prefix, desc)?;
        check_encoding(&abytes, &bbytes, abytes.cmp(&bbytes), prefix, desc)?;
        // Floats come back bit for bit (-0.0 stays -0.0).
        let spec = spec_of(prefix, desc);
        prop_assert_eq!(spec.key_of::<f64>(&spec.qualifier(&af).unwrap()).unwrap().map(f64::to_bits), Some(af.to_bits()));
    }
}

/// Maps keyed by strings: the empty key encodes as the empty qualifier, `"\0…"` keys as
/// qualifiers of zero bytes.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "tagged")]
struct Tagged {
    #[cellar(key)]
    id: u32,
    #[cellar(columns(family = "e"))]
    labels: BTreeMap<String, i64>,
    #[cellar(columns(family = "g", lazy))]
    tags: BTreeMap<String, i64>,
}

on_every_backend! {
fn the_empty_key_is_an_entry_like_any_other(db: Db) {
    let repo = db.repo::<Tagged>().unwrap();
    let map = |entries: &[(&str, i64)]| entries.iter().map(|(k, v)| (k.to_string(), *v)).collect::<BTreeMap<_, _>>();
    let entries = [("", 0), ("\0", 1), ("\0z", 2), ("a", 3), ("b", 4), ("c", 5)];
    repo.put(&Tagged { id: 1, labels: map(&[("", 1), ("a", 2)]), tags: map(&entries) }).unwrap();
    let tags = repo.wide(1, Tagged::TAGS).unwrap();
    let s = |k: &str| k.to_string();
    let list = |entries: &[(&str, i64)]| entries.iter().map(|(k, v)| (k.to_string(), *v)).collect::<Vec<_>>();

    assert_eq!(tags.get(&s("b")).unwrap(), Some(4));
    assert_eq!(tags.get(&s("")).unwrap(), Some(0));
    assert_eq!(tags.get(&s("\0")).unwrap(), Some(1));
    assert_eq!(tags.get(&s("bb")).unwrap(), None);
    assert_eq!(tags.after(&s("a"), 1).unwrap(), list(&[("b", 4)]));
    assert_eq!(tags.after(&s(""), 2).unwrap(), list(&[("\0", 1), ("\0z", 2)]));
    assert_eq!(tags.after(&s("\0z"), 10).unwrap(), list(&[("a", 3), ("b", 4), ("c", 5)]));
    assert_eq!(tags.between(&s("a"), &s("c"), None).unwrap(), list(&[("a", 3), ("b", 4)]));
    assert_eq!(tags.between(&s("a"), &s("c"), Some(1)).unwrap(), list(&[("a", 3)]));
    assert_eq!(tags.between(&s(""), &s("a"), Some(2)).unwrap(), list(&[("", 0), ("\0", 1)]));
    assert_eq!(tags.range(s("b").., Some(1)).unwrap(), list(&[("b", 4)]));
    assert_eq!(tags.range(s("\0")..=s("a"), Some(2)).unwrap(), list(&[("\0", 1), ("\0z", 2)]));
    assert_eq!(tags.range(..s("\0z"), None).unwrap(), list(&[("", 0), ("\0", 1)]));
    assert_eq!(tags.range(..s(""), None).unwrap(), list(&[]), "nothing sorts before the empty key");
    assert_eq!(tags.first(2).unwrap(), list(&[("", 0), ("\0", 1)]));
    assert_eq!(tags.last(2).unwrap(), list(&[("b", 4), ("c", 5)]));
    assert_eq!(tags.page(2, 2).unwrap(), list(&[("\0z", 2), ("a", 3)]));
    assert_eq!(tags.count().unwrap(), 6);
    assert_eq!(tags.all().unwrap(), list(&entries));

    // Deleting the empty key removes that entry only.
    tags.delete(&s("")).unwrap();
    assert_eq!(tags.get(&s("")).unwrap(), None);
    assert_eq!(tags.first(1).unwrap(), list(&[("\0", 1)]));
    assert_eq!(tags.after(&s("a"), 1).unwrap(), list(&[("b", 4)]));
    assert_eq!(tags.count().unwrap(), 5);

    // An eager map holding the empty key is replaced whole, and read with the entity.
    assert_eq!(repo.get(1).unwrap().unwrap().labels, map(&[("", 1), ("a", 2)]));
    repo.put(&Tagged { id: 1, labels: map(&[("", 3), ("b", 4)]), tags: BTreeMap::new() }).unwrap();
    assert_eq!(repo.get(1).unwrap().unwrap(), Tagged { id: 1, labels: map(&[("", 3), ("b", 4)]), tags: BTreeMap::new() });
    let labels = repo.wide(1, Tagged::LABELS).unwrap();
    assert_eq!(labels.after(&s(""), 1).unwrap(), list(&[("b", 4)]));
    assert_eq!(labels.get(&s("b")).unwrap(), Some(4));
    assert_eq!(tags.count().unwrap(), 5, "a put leaves a lazy map's entries");
}
}

on_every_backend! {
fn async_entries_answer_as_the_synchronous_ones(db: Db) {
    let sensors = db.repo::<Sensor>().unwrap();
    sensors.put(&sensor(7, &[(1, 0.5), (2, 1.5), (3, 2.5)], &[(100, "boot"), (200, "calibrated")])).unwrap();
    let log = sensors.wide(7, Sensor::LOG).unwrap();
    let nonblocking = sensors.to_async().wide(7, Sensor::LOG).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        nonblocking.put(&300, &"rebooted".to_string()).await.unwrap();
        let more = [(400, "moved".to_string()), (500, "parked".to_string())];
        nonblocking.put_many(more.iter().map(|(k, v)| (k, v))).await.unwrap();
        nonblocking.delete(&100).await.unwrap();
        assert_eq!(nonblocking.all().await.unwrap(), log.all().unwrap());
        assert_eq!(nonblocking.count().await.unwrap(), 4);
        assert_eq!(nonblocking.first(2).await.unwrap(), log.first(2).unwrap());
        assert_eq!(nonblocking.last(2).await.unwrap(), log.last(2).unwrap());
        assert_eq!(nonblocking.page(1, 2).await.unwrap(), log.page(1, 2).unwrap());
        assert_eq!(nonblocking.after(&400, 2).await.unwrap(), log.after(&400, 2).unwrap());
        assert_eq!(nonblocking.between(&500, &200, None).await.unwrap(), log.between(&500, &200, None).unwrap());
        assert_eq!(nonblocking.get(&300).await.unwrap(), Some("rebooted".to_string()));
        assert_eq!(nonblocking.get(&100).await.unwrap(), None);
    });
    assert_eq!(log.all().unwrap().iter().map(|(k, _)| *k).collect::<Vec<_>>(), [500, 400, 300, 200]);
}
}
