//! Entity puts and gets on the Bigtable backend (the emulator, started here) at several
//! numbers of concurrent callers, each caller a thread of the synchronous API: operations per
//! second, p50 and p99 latency, and the most threads the process ran. Run with
//! `cargo bench --bench bigtable`; `CELLAR_BENCH_SECONDS` sets each run's length (default 3),
//! `CELLAR_BENCH_CALLERS` the caller counts (default `1,16,256`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cellar::prelude::*;
use cellar_orm::store::{BigtableOptions, BigtableStore};
use cellar_orm::testing::{emulator, instance_name};

#[derive(Entity, Debug, Clone)]
#[cellar(table = "bench_items", family = "d")]
struct Item {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "v")]
    value: Vec<u8>,
}

/// Rows the gets read (written first).
const ROWS: u64 = 10_000;

fn main() {
    let Some(emulator) = emulator() else {
        eprintln!("bigtable bench: no emulator, nothing measured");
        return;
    };
    let seconds: u64 = std::env::var("CELLAR_BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let callers: Vec<usize> = std::env::var("CELLAR_BENCH_CALLERS")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 16, 256]);
    let options = BigtableOptions::new("cellar", instance_name()).emulator(emulator.host.clone());
    let store = BigtableStore::connect(options).expect("connecting to the emulator");
    let db = Db::with_store(Arc::new(store));
    let items = db.repo::<Item>().expect("the table");
    let rows: Vec<Item> = (0..ROWS).map(|id| Item { id, value: vec![7; 100] }).collect();
    for chunk in rows.chunks(1_000) {
        items.put_many(chunk).expect("loading");
    }
    println!("{:<6} {:>8} {:>10} {:>10} {:>10} {:>8}", "op", "callers", "ops/s", "p50 µs", "p99 µs", "threads");
    for &n in &callers {
        for op in ["put", "get"] {
            let report = run(&items, op, n, Duration::from_secs(seconds));
            println!(
                "{op:<6} {n:>8} {:>10.0} {:>10} {:>10} {:>8}",
                report.ops_per_sec, report.p50_us, report.p99_us, report.max_threads
            );
        }
    }
}

struct Report {
    ops_per_sec: f64,
    p50_us: u128,
    p99_us: u128,
    max_threads: usize,
}

/// `callers` threads doing `op` for `length`, each timing every call.
fn run(items: &Repository<Item>, op: &str, callers: usize, length: Duration) -> Report {
    let stop = Arc::new(AtomicBool::new(false));
    let max_threads = Arc::new(AtomicUsize::new(threads()));
    let started = Instant::now();
    let latencies: Vec<Vec<Duration>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..callers)
            .map(|caller| {
                let (stop, max_threads) = (stop.clone(), max_threads.clone());
                s.spawn(move || {
                    let mut taken = Vec::new();
                    let mut id = (caller as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    while !stop.load(Ordering::Relaxed) {
                        id = id.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        let at = Instant::now();
                        match op {
                            "put" => items.put(&Item { id: ROWS + id % 1_000_000, value: vec![1; 100] }).unwrap(),
                            _ => assert!(items.get(id % ROWS).unwrap().is_some()),
                        }
                        taken.push(at.elapsed());
                        if taken.len() % 64 == 1 {
                            max_threads.fetch_max(threads(), Ordering::Relaxed);
                        }
                    }
                    taken
                })
            })
            .collect();
        std::thread::sleep(length);
        stop.store(true, Ordering::Relaxed);
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let elapsed = started.elapsed();
    let mut all: Vec<Duration> = latencies.into_iter().flatten().collect();
    all.sort_unstable();
    let at = |q: f64| {
        all.get(((all.len() as f64 * q) as usize).min(all.len().saturating_sub(1))).map_or(0, |d| d.as_micros())
    };
    Report {
        ops_per_sec: all.len() as f64 / elapsed.as_secs_f64(),
        p50_us: at(0.50),
        p99_us: at(0.99),
        max_threads: max_threads.load(Ordering::Relaxed),
    }
}

/// The process's threads now, from `/proc/self/status` (0 where there is none).
fn threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Threads:").and_then(|n| n.trim().parse().ok())))
        .unwrap_or(0)
}
