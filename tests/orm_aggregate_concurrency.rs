//! Readers running while writers rewrite aggregates never see a torn aggregate — a mix of two
//! versions, or half of one — in any strategy: every read is exactly one version written.
//!
//! Each test runs on every backend: the embedded engine and the Bigtable emulator.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

macro_rules! race {
    ($db:ident, $m:ident) => {{
        use common::orders::$m::Order;
        use common::versions::$m::{version, version_of};
        let orders = $db.aggregates::<Order>().unwrap();
        orders.put(&version(1, 1, 0)).unwrap();
        let next = AtomicU64::new(1);
        let stop = AtomicBool::new(false);
        let reads = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        let v = next.fetch_add(1, Ordering::Relaxed);
                        orders.put(&version(1, 1, v)).unwrap();
                    }
                });
            }
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        while !stop.load(Ordering::Relaxed) {
                            let read = orders.get((1, 1)).unwrap().expect("the order exists throughout");
                            assert!(version_of(&read).is_some(), "{}: torn read {read:?}", stringify!($m));
                            let scanned = orders.scan().to_vec().unwrap();
                            assert_eq!(scanned.len(), 1);
                            assert!(
                                version_of(&scanned[0]).is_some(),
                                "{}: torn scan {:?}",
                                stringify!($m),
                                scanned[0]
                            );
                            reads.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            // Until enough reads were checked, or a reader failed (its panic fails the test).
            let start = Instant::now();
            while (start.elapsed() < Duration::from_millis(300) || reads.load(Ordering::Relaxed) < 20)
                && !readers.iter().any(|r| r.is_finished())
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            stop.store(true, Ordering::Relaxed);
        });
        let last = orders.get((1, 1)).unwrap().unwrap();
        assert!(version_of(&last).is_some());
        assert!(next.load(Ordering::Relaxed) > 2, "writers made progress");
    }};
}

on_every_backend! {
fn single_table_reads_are_never_torn(db: Db) {
    race!(db, single_table);
}
}

on_every_backend! {
fn denormalized_reads_are_never_torn(db: Db) {
    race!(db, denormalized);
}
}

on_every_backend! {
fn blob_reads_are_never_torn(db: Db) {
    race!(db, blob);
}
}

on_every_backend! {
fn normalized_reads_are_never_torn(db: Db) {
    race!(db, normalized);
}
}
