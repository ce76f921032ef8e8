//! The Bigtable backend's connections: a pool of channels, each one TCP connection, that calls
//! are spread over and that are replaced before the server would close them. Seen through a
//! proxy that counts the connections clients open and close and what each carries.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cellar::orm::store::{BigtableOptions, BigtableStore};
use cellar::orm::Error;
use cellar::prelude::*;
use common::backend::instance_name;
use common::proxy::Proxy;

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "events")]
struct Event {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "p")]
    payload: Vec<u8>,
}

fn event(id: u64) -> Event {
    Event { id, payload: vec![(id % 251) as u8; 100] }
}

/// A proxy in front of the binary's emulator, or `None` when the emulator is skipped.
fn proxy() -> Option<Proxy> {
    Some(Proxy::start(&common::backend::emulator()?.host))
}

/// The connections opened through `proxy`, once the proxy has accepted what the client
/// connected (it counts a moment after the client sees the connection).
fn settled_connections(proxy: &Proxy) -> u64 {
    let mut last = proxy.connections();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = proxy.connections();
        if now == last && now > 0 {
            return now;
        }
        last = now;
    }
}

fn options(proxy: &Proxy) -> BigtableOptions {
    BigtableOptions::new("p", instance_name()).emulator(proxy.addr.clone())
}

#[test]
fn the_pool_options_are_checked_when_connecting() {
    // Checked before anything connects: nothing listens on port 1.
    let unreachable = || BigtableOptions::new("p", "i").emulator("127.0.0.1:1");
    for channels in [0, 65] {
        let err = BigtableStore::connect(unreachable().channels(channels)).unwrap_err();
        assert!(matches!(&err, Error::InvalidArgument { arg: "channels", .. }), "{err:?}");
    }
    let err = BigtableStore::connect(unreachable().channel_refresh(Duration::from_millis(50))).unwrap_err();
    assert!(matches!(&err, Error::InvalidArgument { arg: "channel_refresh", .. }), "{err:?}");
    let defaults = BigtableOptions::new("p", "i");
    assert_eq!((defaults.channels, defaults.channel_refresh), (4, Duration::from_secs(45 * 60)));
    // Valid options reach the connect, which fails as it always has.
    let err = BigtableStore::connect(unreachable().channels(64).connect_timeout(Duration::from_secs(2))).unwrap_err();
    assert!(matches!(&err, Error::Remote { rpc: "connect", code, .. } if code == "Unavailable"), "{err:?}");
    assert!(err.to_string().contains("cannot reach http://127.0.0.1:1"), "{err}");
}

#[test]
fn four_channels_are_four_connections_that_share_the_calls() {
    let Some(proxy) = proxy() else { return };
    let store = BigtableStore::connect(options(&proxy).channels(4)).unwrap();
    // Connected eagerly, before any call.
    assert_eq!(settled_connections(&proxy), 4);
    let db = Db::with_store(Arc::new(store));
    let events = db.repo::<Event>().unwrap();
    events.put_many(&(0..100).map(event).collect::<Vec<_>>()).unwrap();
    let before = proxy.sent_per_connection();
    std::thread::scope(|s| {
        for t in 0..16 {
            let events = &events;
            s.spawn(move || {
                for i in 0..50 {
                    let id = (t * 50 + i) % 100;
                    assert_eq!(events.get(id).unwrap(), Some(event(id)));
                }
            });
        }
    });
    let after = proxy.sent_per_connection();
    // 800 concurrent reads opened no connection more, and each connection carried its share
    // (round-robin: a quarter each; at least an eighth here).
    assert_eq!(settled_connections(&proxy), 4, "{after:?}");
    let carried: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let total: u64 = carried.iter().sum();
    eprintln!("bytes sent on each of the 4 connections by 800 reads: {carried:?}");
    assert!(carried.iter().all(|&n| n >= total / 8), "{carried:?}");

    // One channel: one connection.
    let proxy = proxy_again();
    let _store = BigtableStore::connect(options(&proxy).channels(1)).unwrap();
    assert_eq!(settled_connections(&proxy), 1);
}

fn proxy_again() -> Proxy {
    proxy().expect("the emulator ran a moment ago")
}

#[test]
fn calls_keep_succeeding_while_the_channels_are_replaced() {
    let Some(proxy) = proxy() else { return };
    let period = Duration::from_millis(200);
    let store = BigtableStore::connect(options(&proxy).channels(4).channel_refresh(period)).unwrap();
    let db = Db::with_store(Arc::new(store.clone()));
    let events = db.repo::<Event>().unwrap();
    events.put_many(&(0..2_000).map(event).collect::<Vec<_>>()).unwrap();
    let retries = store.rpcs().retries;

    // About ten refreshes of each channel while writers, readers and a slow scan run.
    let run = Duration::from_millis(2_000);
    let start = Instant::now();
    let calls = std::thread::scope(|s| {
        let workers: Vec<_> = (0..6u64)
            .map(|t| {
                let events = &events;
                s.spawn(move || {
                    let mut calls = 0u64;
                    let mut id = 10_000 * (t + 1);
                    while start.elapsed() < run {
                        events.put(&event(id)).unwrap();
                        assert_eq!(events.get(id).unwrap(), Some(event(id)));
                        assert_eq!(events.get(id % 2_000).unwrap(), Some(event(id % 2_000)));
                        id += 1;
                        calls += 3;
                    }
                    calls
                })
            })
            .collect();
        let scanning = s.spawn(|| {
            // One scan that spans several refreshes: every row once, in order.
            let mut ids = Vec::new();
            for e in events.scan().iter().unwrap() {
                let e = e.unwrap();
                if e.id < 2_000 {
                    ids.push(e.id);
                    if e.id % 100 == 0 {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            }
            assert_eq!(ids, (0..2_000).collect::<Vec<_>>());
        });
        scanning.join().unwrap();
        workers.into_iter().map(|w| w.join().unwrap()).sum::<u64>()
    });
    let opened = proxy.connections();
    eprintln!(
        "{calls} calls in {:?}, refresh every {period:?}: {opened} connections opened, {} closed",
        start.elapsed(),
        proxy.closed()
    );
    assert_eq!(store.rpcs().retries, retries, "no call failed and had to be repeated");
    // Each of the 4 channels was replaced several times.
    assert!(opened >= 4 + 4 * 4, "{opened} connections opened");
    // The replaced connections were let go: besides the 4 in use, at most one replacement per
    // channel is open.
    std::thread::sleep(Duration::from_millis(300));
    let open = proxy.connections() - proxy.closed();
    assert!(open <= 8, "{open} connections open");

    // Dropping the store stops the refreshes.
    drop(events);
    drop(db);
    drop(store);
    std::thread::sleep(Duration::from_millis(300));
    let after_drop = settled_connections(&proxy);
    std::thread::sleep(period * 3);
    assert_eq!(proxy.connections(), after_drop, "connections opened after the store was dropped");
}

/// Connections cut again and again under a load of puts, gets and scans from many threads:
/// every call is safe to repeat, so no caller sees an error, and every write is there once.
/// The cutter: every 50 ms until `done`, every open connection goes once the server has sent
/// 2 KiB more, whatever is in flight on it.
fn cut_until(proxy: &Proxy, done: &std::sync::atomic::AtomicBool) {
    while !done.load(std::sync::atomic::Ordering::Relaxed) {
        proxy.cut_after(2_048);
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn connections_cut_under_load_give_idempotent_callers_no_error() {
    let Some(proxy) = proxy() else { return };
    let store = BigtableStore::connect(options(&proxy)).unwrap();
    let db = Db::with_store(Arc::new(store.clone()));
    let events = db.repo::<Event>().unwrap();
    let before = store.rpcs();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| cut_until(&proxy, &done));
        let workers: Vec<_> = (0..8u64)
            .map(|worker| {
                let events = &events;
                s.spawn(move || {
                    for round in 0..25u64 {
                        let ids: Vec<u64> = (0..8).map(|i| worker * 10_000 + round * 8 + i).collect();
                        events.put_many(&ids.iter().map(|&id| event(id)).collect::<Vec<_>>()).unwrap();
                        for &id in &ids {
                            assert_eq!(events.get(id).unwrap(), Some(event(id)));
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert!(proxy.cuts() >= 3, "only {} cuts: the load ran through too few", proxy.cuts());
    assert!(store.rpcs().retries > before.retries, "no call had to be repeated");
    // Each write is there, once, and a scan across the cuts' aftermath reads all of them.
    let scanned: Vec<Event> = events.scan().to_vec().unwrap();
    assert_eq!(scanned.len(), 8 * 25 * 8);
    assert!(scanned.iter().all(|e| *e == event(e.id)));
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "transport_tallies")]
struct Tally {
    #[cellar(key)]
    name: String,
    #[cellar(counter, column = "n")]
    hits: i64,
}

/// The same cuts under a load of async callers — tasks on a runtime of two workers, through
/// the async API — give them no error either; a call not safe to repeat (an increment) whose
/// answer a cut loses says that it may or may not have applied.
#[test]
fn connections_cut_under_an_async_load_give_idempotent_callers_no_error() {
    let Some(proxy) = proxy() else { return };
    let store = BigtableStore::connect(options(&proxy)).unwrap();
    let db = Db::with_store(Arc::new(store.clone()));
    let events = db.repo::<Event>().unwrap().to_async();
    let tallies = db.repo::<Tally>().unwrap().to_async();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let before = store.rpcs();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| cut_until(&proxy, &done));
        runtime.block_on(async {
            let tasks: Vec<_> = (0..64u64)
                .map(|caller| {
                    let events = events.clone();
                    tokio::spawn(async move {
                        for round in 0..4u64 {
                            let ids: Vec<u64> = (0..8).map(|i| 1_000_000 + caller * 10_000 + round * 8 + i).collect();
                            events.put_many(&ids.iter().map(|&id| event(id)).collect::<Vec<_>>()).await.unwrap();
                            let found = events.get_many(ids.clone()).await.unwrap();
                            assert_eq!(found, ids.iter().map(|&id| Some(event(id))).collect::<Vec<_>>());
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
        });
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert!(proxy.cuts() >= 3, "only {} cuts: the load ran through too few", proxy.cuts());
    assert!(store.rpcs().retries > before.retries, "no call had to be repeated");
    let stored = runtime.block_on(events.scan().range(EventKey::from(1_000_000u64)..).to_vec()).unwrap();
    assert_eq!(stored.len(), 64 * 4 * 8);
    assert!(stored.iter().all(|e| *e == event(e.id)));

    // An increment is sent once: its answer lost, the caller is told it may have applied.
    runtime.block_on(tallies.increment("visits".to_string(), Tally::HITS, 1)).unwrap();
    let sent = store.rpcs();
    proxy.cut_after(0);
    let err = runtime.block_on(tallies.increment("visits".to_string(), Tally::HITS, 1)).unwrap_err();
    assert!(matches!(err, Error::Indeterminate { rpc: "ReadModifyWriteRow", .. }), "{err}");
    assert!(err.to_string().contains("may or may not have applied"), "{err}");
    assert_eq!(store.rpcs().retries, sent.retries, "not repeated");
}
