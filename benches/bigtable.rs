//! Entity puts and gets on the Bigtable backend (the emulator, started here) at several
//! numbers of concurrent callers: operations per second, p50 and p99 latency, and the most
//! threads the process ran while the load ran. Two kinds of caller:
//!
//! * `sync`: each caller a thread of the synchronous API (`Repository`);
//! * `async`: each caller a task of the asynchronous API (`AsyncRepository`) on a tokio runtime
//!   of exactly 2 worker threads, every caller's call outstanding at once.
//!
//! Each caller does its operation in a loop until the run's time is up. Run with
//! `cargo bench --bench bigtable`; `CELLAR_BENCH_SECONDS` sets each run's length (default 3),
//! `CELLAR_BENCH_CALLERS` the caller counts (default `1,16,256,2000`), `CELLAR_BENCH_API`
//! which callers run (`sync`, `async`, or both by default), `CELLAR_BENCH_OPS` which operations
//! (`put`, `get`, or both by default).
//!
//! Operations per second count the calls that ended within the run's time (calls still in
//! flight when it is up are timed, but not counted); the thread count is read from
//! `/proc/self/status` every few milliseconds while the callers run.

use std::sync::atomic::{AtomicBool, Ordering};
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

/// The two operations measured.
const OPS: [&str; 2] = ["put", "get"];

/// The worker threads of the async callers' runtime.
const ASYNC_WORKERS: usize = 2;

fn main() {
    let Some(emulator) = emulator() else {
        eprintln!("bigtable bench: no emulator, nothing measured");
        return;
    };
    let seconds: u64 = std::env::var("CELLAR_BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let length = Duration::from_secs(seconds);
    let callers: Vec<usize> = std::env::var("CELLAR_BENCH_CALLERS")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 16, 256, 2_000]);
    let api = std::env::var("CELLAR_BENCH_API").unwrap_or_default();
    let (sync, asynchronous) = match api.as_str() {
        "sync" => (true, false),
        "async" => (false, true),
        _ => (true, true),
    };
    let ops: Vec<&'static str> = match std::env::var("CELLAR_BENCH_OPS") {
        Ok(wanted) => OPS.into_iter().filter(|op| wanted.split(',').any(|w| w.trim() == *op)).collect(),
        Err(_) => OPS.to_vec(),
    };
    let options = BigtableOptions::new("cellar", instance_name()).emulator(emulator.host.clone());
    let store = BigtableStore::connect(options).expect("connecting to the emulator");
    let db = Db::with_store(Arc::new(store));
    let items = db.repo::<Item>().expect("the table");
    let rows: Vec<Item> = (0..ROWS).map(|id| Item { id, value: vec![7; 100] }).collect();
    for chunk in rows.chunks(1_000) {
        items.put_many(chunk).expect("loading");
    }
    println!(
        "{:<6} {:<6} {:>8} {:>10} {:>10} {:>10} {:>8}",
        "api", "op", "callers", "ops/s", "p50 µs", "p99 µs", "threads"
    );
    if sync {
        println!("(sync: {} threads before the callers start)", threads());
        for &n in &callers {
            for &op in &ops {
                match run_sync(&items, op, n, length) {
                    Ok(report) => report.print("sync", op, n),
                    Err(why) => {
                        println!("{:<6} {op:<6} {n:>8} skipped: {why}", "sync");
                        break;
                    }
                }
            }
        }
    }
    if asynchronous {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(ASYNC_WORKERS)
            .thread_name("bench-async")
            .build()
            .expect("the callers' runtime");
        let items = items.to_async();
        println!(
            "(async: {} threads before the callers start, the runtime of {ASYNC_WORKERS} workers included)",
            threads()
        );
        for &n in &callers {
            for &op in &ops {
                run_async(&runtime, &items, op, n, length).print("async", op, n);
            }
        }
    }
}

struct Report {
    ops_per_sec: f64,
    p50_us: u128,
    p99_us: u128,
    max_threads: usize,
}

impl Report {
    /// The report of a run: each caller's call times, the calls that ended in time, the run's
    /// length and the most threads seen.
    fn new(latencies: Vec<Vec<Duration>>, in_time: usize, length: Duration, max_threads: usize) -> Report {
        let mut all: Vec<Duration> = latencies.into_iter().flatten().collect();
        all.sort_unstable();
        let at = |q: f64| {
            all.get(((all.len() as f64 * q) as usize).min(all.len().saturating_sub(1))).map_or(0, |d| d.as_micros())
        };
        Report { ops_per_sec: in_time as f64 / length.as_secs_f64(), p50_us: at(0.50), p99_us: at(0.99), max_threads }
    }

    fn print(&self, api: &str, op: &str, callers: usize) {
        println!(
            "{api:<6} {op:<6} {callers:>8} {:>10.0} {:>10} {:>10} {:>8}",
            self.ops_per_sec, self.p50_us, self.p99_us, self.max_threads
        );
    }
}

/// The `n`th caller's sequence of pseudo-random ids.
fn ids(caller: usize) -> impl FnMut() -> u64 {
    let mut id = (caller as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    move || {
        id = id.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        id
    }
}

/// A put's entity for the id `id`: a row of its own beyond the rows the gets read.
fn fresh(id: u64) -> Item {
    Item { id: ROWS + id % 1_000_000, value: vec![1; 100] }
}

/// Samples the process's threads until `until`, returning the most seen.
fn watch_threads(until: Instant) -> usize {
    let mut max = threads();
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
        max = max.max(threads());
    }
    max
}

/// `callers` threads of the synchronous API doing `op` for `length`, each timing every call.
/// An error if the threads cannot all be started.
fn run_sync(items: &Repository<Item>, op: &str, callers: usize, length: Duration) -> Result<Report, String> {
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let (done, max_threads, spawned) = std::thread::scope(|s| {
        let mut workers = Vec::with_capacity(callers);
        let mut failed = None;
        for caller in 0..callers {
            let stop = &stop;
            let worker = std::thread::Builder::new().spawn_scoped(s, move || {
                let (mut taken, mut in_time) = (Vec::new(), 0);
                let mut next = ids(caller);
                while !stop.load(Ordering::Relaxed) {
                    let id = next();
                    let at = Instant::now();
                    match op {
                        "put" => items.put(&fresh(id)).unwrap(),
                        _ => assert!(items.get(id % ROWS).unwrap().is_some()),
                    }
                    taken.push(at.elapsed());
                    in_time += usize::from(!stop.load(Ordering::Relaxed));
                }
                (taken, in_time)
            });
            match worker {
                Ok(worker) => workers.push(worker),
                Err(e) => {
                    failed = Some(format!("thread {} of {callers} could not start: {e}", caller + 1));
                    break;
                }
            }
        }
        let max_threads = if failed.is_none() { watch_threads(started + length) } else { threads() };
        stop.store(true, Ordering::Relaxed);
        let spawned = started.elapsed();
        let done: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        match failed {
            Some(why) => Err(why),
            None => Ok((done, max_threads, spawned)),
        }
    })?;
    let in_time = done.iter().map(|(_, n)| n).sum();
    Ok(Report::new(done.into_iter().map(|(t, _)| t).collect(), in_time, spawned, max_threads))
}

/// `callers` tasks of the asynchronous API on `runtime` doing `op` for `length`, each timing
/// every call.
fn run_async(
    runtime: &tokio::runtime::Runtime,
    items: &AsyncRepository<Item>,
    op: &'static str,
    callers: usize,
    length: Duration,
) -> Report {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|caller| {
            let (items, stop) = (items.clone(), stop.clone());
            runtime.spawn(async move {
                let (mut taken, mut in_time) = (Vec::new(), 0);
                let mut next = ids(caller);
                while !stop.load(Ordering::Relaxed) {
                    let id = next();
                    let at = Instant::now();
                    match op {
                        "put" => items.put(&fresh(id)).await.unwrap(),
                        _ => assert!(items.get(id % ROWS).await.unwrap().is_some()),
                    }
                    taken.push(at.elapsed());
                    in_time += usize::from(!stop.load(Ordering::Relaxed));
                }
                (taken, in_time)
            })
        })
        .collect();
    let max_threads = watch_threads(started + length);
    stop.store(true, Ordering::Relaxed);
    let spawned = started.elapsed();
    let done: Vec<(Vec<Duration>, usize)> = runtime.block_on(async {
        let mut done = Vec::with_capacity(tasks.len());
        for task in tasks {
            done.push(task.await.expect("a caller failed"));
        }
        done
    });
    let in_time = done.iter().map(|(_, n)| n).sum();
    Report::new(done.into_iter().map(|(t, _)| t).collect(), in_time, spawned, max_threads)
}

/// The process's threads now, from `/proc/self/status` (0 where there is none).
fn threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Threads:").and_then(|n| n.trim().parse().ok())))
        .unwrap_or(0)
}
