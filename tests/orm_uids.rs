//! Uids of names (`Db::uids`): ids handed out in order and looked up both ways, cached after
//! the first read, one id per name and one name per id however many writers race to name the
//! same new values, and a clear error when a width runs out; and `#[cellar(key, uid =
//! "...")]`: entities whose keys hold the uids of their names, which reads restore.
//!
//! Each test runs on every backend: the embedded engine and the Bigtable emulator.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use cellar::orm::store::{ReadSpec, ScanSpec};
use cellar::orm::uid::UIDS_TABLE;
use cellar::orm::Error;
use cellar::prelude::*;

on_every_backend! {
fn ids_are_handed_out_in_order_and_read_both_ways_from_the_cache(db: Db) {
    let hosts = db.uids("hosts", 3).unwrap();
    assert_eq!(hosts.id("web-1").unwrap(), Bytes::from_static(&[0, 0, 1]));
    assert_eq!(hosts.id("web-2").unwrap(), Bytes::from_static(&[0, 0, 2]));
    assert_eq!(hosts.id("web-1").unwrap(), Bytes::from_static(&[0, 0, 1]), "an assigned name keeps its id");
    // Kinds count apart; a wider kind writes wider ids.
    let metrics = db.uids("metrics", 8).unwrap();
    assert_eq!(metrics.id("cpu.load").unwrap(), Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 1]));

    // Known both ways, from the cache: no round trip.
    let (known, costs) = db.measure(|| (hosts.id("web-2").unwrap(), hosts.name(&[0, 0, 2]).unwrap()));
    assert_eq!(known, (Bytes::from_static(&[0, 0, 2]), Some("web-2".to_string())));
    assert_eq!(costs.round_trips(), 0, "{costs}");

    // A new handle (another process) reads them from the table, then from its own cache.
    let other = db.uids("hosts", 3).unwrap();
    let (name, costs) = db.measure(|| other.name(&[0, 0, 1]).unwrap());
    assert_eq!((name.as_deref(), costs.round_trips()), (Some("web-1"), 1));
    assert_eq!(other.lookup("web-1").unwrap(), Some(Bytes::from_static(&[0, 0, 1])));
    assert_eq!(other.lookup("nobody").unwrap(), None, "a lookup assigns nothing");
    assert_eq!(other.name(&[0, 0, 9]).unwrap(), None);

    // Bad arguments are errors that say so.
    for width in [0, 2, 9] {
        assert!(matches!(db.uids("hosts", width), Err(Error::InvalidArgument { arg: "width", .. })));
    }
    assert!(matches!(db.uids("", 3), Err(Error::InvalidArgument { arg: "kind", .. })));
    assert!(matches!(other.name(&[1, 2]), Err(Error::InvalidArgument { arg: "id", .. })));
    let wider = db.uids("hosts", 4).unwrap();
    let err = wider.lookup("web-1").unwrap_err();
    assert!(err.to_string().contains("stores 3-byte ids"), "{err}");
}
}

on_every_backend! {
fn writers_racing_to_name_the_same_values_agree_on_every_id(db: Db) {
    let names: Vec<String> = (0..60).map(|i| format!("host-{i}")).collect();
    // Each thread has its own handle (its own cache), as separate processes would.
    let seen: Vec<BTreeMap<String, Bytes>> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..6usize)
            .map(|t| {
                let (db, names) = (db.clone(), &names);
                s.spawn(move || {
                    let uids = db.uids("hosts", 3).unwrap();
                    // Every thread walks the names from a different place.
                    (0..names.len())
                        .map(|i| {
                            let name = &names[(i * 7 + t * 11) % names.len()];
                            (name.clone(), uids.id(name).unwrap())
                        })
                        .collect()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    // One id per name, whoever asked.
    for map in &seen[1..] {
        assert_eq!(map, &seen[0]);
    }
    let ids: BTreeSet<&Bytes> = seen[0].values().collect();
    assert_eq!(ids.len(), names.len(), "never one id for two names");
    // Every id row left names the name whose id it is: losers removed theirs.
    let uids = db.uids("hosts", 3).unwrap();
    let scan = ScanSpec { start: Bytes::from_static(b"i\0hosts\0"), end: Some(Bytes::from_static(b"i\0hosts\x01")), ..ScanSpec::default() };
    let rows: Vec<_> = db.store().scan(UIDS_TABLE, &scan).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(rows.len(), names.len());
    for row in rows {
        let id = row.key.slice(b"i\0hosts\0".len()..);
        let name = uids.name(&id).unwrap().unwrap();
        assert_eq!(seen[0][&name], id);
    }
    let read = ReadSpec::default();
    let counter = db.store().read_rows(UIDS_TABLE, &[uids.counter_row()], &read).unwrap();
    assert!(counter[0].is_some());
}
}

on_every_backend! {
fn a_width_that_runs_out_is_a_clear_error(db: Db) {
    let tiny = db.uids("tags", 3).unwrap();
    // Hand out all but the last id.
    db.store().increment(UIDS_TABLE, tiny.counter_row(), "u", "next", (1 << 24) - 2).unwrap();
    assert_eq!(tiny.id("last").unwrap(), Bytes::from_static(&[0xff, 0xff, 0xff]));
    let err = tiny.id("one too many").unwrap_err();
    assert!(matches!(&err, Error::UidsExhausted { kind, width: 3 } if kind == "tags"), "{err}");
    assert!(err.to_string().contains("every id of 3 bytes is taken"), "{err}");
    assert_eq!(tiny.lookup("one too many").unwrap(), None, "nothing was half-assigned");
    assert_eq!(tiny.id("last").unwrap(), Bytes::from_static(&[0xff, 0xff, 0xff]), "names already assigned still resolve");
}
}

/// A data point keyed OpenTSDB's way: metric and host stored as uids.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "tsdb")]
struct Point {
    #[cellar(partition, uid = "metrics")]
    metric: String,
    #[cellar(key, reverse_ts)]
    at: u64,
    #[cellar(key, uid(kind = "hosts", width = 4))]
    host: String,
    #[cellar(column = "v")]
    value: f64,
}

fn point(metric: &str, at: u64, host: &str, value: f64) -> Point {
    Point { metric: metric.into(), at, host: host.into(), value }
}

on_every_backend! {
fn uid_key_parts_hold_ids_and_read_back_as_names(db: Db) {
    let points = db.repo::<Point>().unwrap();
    let long_metric = "datacenter.rack.server.cpu.load.one_minute_average";
    points.put(&point(long_metric, 1_000, "web-1.example.com", 0.5)).unwrap();
    points.put_many(&[point(long_metric, 2_000, "web-2.example.com", 0.7), point("mem.free", 2_000, "web-1.example.com", 3.0)]).unwrap();

    // The row key holds a 3-byte metric id, the timestamp and a 4-byte host id: 15 bytes,
    // however long the names.
    let rows: Vec<_> = db.store().scan("tsdb", &ScanSpec::default()).unwrap().map(Result::unwrap).collect();
    assert_eq!(rows.iter().map(|r| r.key.len()).collect::<Vec<_>>(), vec![15, 15, 15]);
    assert_eq!(&rows[0].key[..3], &[0, 0, 1], "the first metric named gets id 1");
    assert_eq!(Point::layout().to_string().lines().nth(1), Some("row key (15 bytes):"));

    // Reads restore the names; prefix scans and gets take names.
    let key = PointKey::metric(long_metric.to_string()).at(2_000).host("web-2.example.com".to_string());
    assert_eq!(points.get(key).unwrap(), Some(point(long_metric, 2_000, "web-2.example.com", 0.7)));
    let series = points.scan().prefix(PointKey::metric(long_metric.to_string())).to_vec().unwrap();
    assert_eq!(series.iter().map(|p| (p.at, p.host.as_str())).collect::<Vec<_>>(), vec![(2_000, "web-2.example.com"), (1_000, "web-1.example.com")]);

    // A name that has no id is in no row: reads find nothing and assign nothing.
    assert!(points.scan().prefix(PointKey::metric("disk.used".to_string())).to_vec().unwrap().is_empty());
    assert_eq!(points.get(PointKey::from(("disk.used".to_string(), 1, "web-1.example.com".to_string()))).unwrap(), None);
    points.delete(PointKey::from(("disk.used".to_string(), 1, "web-9".to_string()))).unwrap();
    assert_eq!(db.uids("metrics", 3).unwrap().lookup("disk.used").unwrap(), None);
    assert_eq!(db.uids("hosts", 4).unwrap().lookup("web-9").unwrap(), None);

    // Without a repository a key with parts stored as uids does not encode: the error says why.
    let err = Point::row_key(&PointKey::from(("mem.free".to_string(), 1, "h".to_string()))).unwrap_err();
    assert!(err.to_string().contains("key part `metric` is stored as a uid"), "{err}");

    // Another kind's width for the same kind of names is refused, not misread.
    let narrow = db.uids("hosts", 3).unwrap();
    assert!(matches!(narrow.lookup("web-1.example.com"), Err(Error::InvalidArgument { .. })));
}
}

on_every_backend! {
fn writers_assigning_uids_to_the_same_new_names_share_them(db: Db) {
    // Eight writers put points of the same new hosts at once: each host gets one id, and
    // every point reads back under its own name.
    std::thread::scope(|s| {
        for w in 0..8u64 {
            let points = db.repo::<Point>().unwrap();
            s.spawn(move || {
                for h in 0..20u64 {
                    points.put(&point("load", w * 100 + h, &format!("host-{h}"), w as f64)).unwrap();
                }
            });
        }
    });
    let hosts = db.uids("hosts", 4).unwrap();
    let ids: BTreeSet<Bytes> = (0..20).map(|h| hosts.lookup(&format!("host-{h}")).unwrap().unwrap()).collect();
    assert_eq!(ids.len(), 20, "one id per name, never two names per id");
    let all = db.repo::<Point>().unwrap().scan().to_vec().unwrap();
    assert_eq!(all.len(), 160);
    assert!(all.iter().all(|p| p.host == format!("host-{}", p.at % 100) && p.value == (p.at / 100) as f64));
}
}

on_every_backend! {
fn async_ids_agree_with_the_synchronous_ones_and_racing_tasks_share_one(db: Db) {
    let hosts = db.uids("hosts", 3).unwrap();
    let nonblocking = hosts.to_async();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let web1 = nonblocking.id("web-1").await.unwrap();
        assert_eq!(hosts.lookup("web-1").unwrap(), Some(web1.clone()));
        assert_eq!(nonblocking.name(&web1).await.unwrap().as_deref(), Some("web-1"));
        assert_eq!(nonblocking.lookup("web-2").await.unwrap(), None);
        // Tasks naming the same new values at once, through separate handles (no shared cache),
        // agree on every id.
        let tasks: Vec<_> = (0..40)
            .map(|i| {
                let uids = db.uids("hosts", 3).unwrap().to_async();
                tokio::spawn(async move { (i % 4, uids.id(&format!("db-{}", i % 4)).await.unwrap()) })
            })
            .collect();
        let mut ids = std::collections::BTreeMap::new();
        for task in tasks {
            let (name, id) = task.await.unwrap();
            assert_eq!(ids.entry(name).or_insert_with(|| id.clone()), &id, "db-{name}");
        }
        assert_eq!(ids.len(), 4);
        for (name, id) in ids {
            assert_eq!(hosts.name(&id).unwrap(), Some(format!("db-{name}")));
        }
    });
}
}
