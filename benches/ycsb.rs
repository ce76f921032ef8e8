//! YCSB core workloads A–F and db_bench's fillrandom, readrandom and seekrandom+scan(100) on
//! the Cellar engine. Records: `CELLAR_YCSB_RECORDS` (default 1 000 000, 10 fields × 100 B).
//! Run with `cargo bench --bench ycsb`; the peer comparison lives in `benches/peers`.

#[path = "workloads/mod.rs"]
mod workloads;

use std::time::Instant;

use cellar::prelude::*;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use workloads::cellar_store::CellarStore;
use workloads::Ycsb;

fn records() -> u64 {
    std::env::var("CELLAR_YCSB_RECORDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000)
}

fn open(dir: &std::path::Path) -> CellarStore {
    let engine = Engine::open(dir, EngineOptions::default()).unwrap();
    engine.create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f"))).unwrap();
    let table = engine.table("t").unwrap();
    CellarStore { engine, table }
}

fn db_bench(c: &mut Criterion) {
    let n = records();
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let t = Instant::now();
    workloads::fill_random(&store, n);
    eprintln!("fillrandom: {n} puts in {:.1?} ({:.0} ops/s)", t.elapsed(), n as f64 / t.elapsed().as_secs_f64());
    let mut g = c.benchmark_group("db_bench");
    g.throughput(Throughput::Elements(1));
    let mut seed = 1;
    g.bench_function("readrandom", |b| {
        b.iter_custom(|iters| {
            seed += 1;
            let t = Instant::now();
            workloads::read_random(&store, iters, n, seed);
            t.elapsed()
        })
    });
    g.throughput(Throughput::Elements(100));
    g.bench_function("seekrandom+scan100", |b| {
        b.iter_custom(|iters| {
            seed += 1;
            let t = Instant::now();
            workloads::seek_scan(&store, iters, n, seed);
            t.elapsed()
        })
    });
    g.finish();
}

fn ycsb(c: &mut Criterion) {
    let n = records();
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let t = Instant::now();
    workloads::ycsb_load(&store, n);
    eprintln!("ycsb load: {n} records in {:.1?}", t.elapsed());
    let mut g = c.benchmark_group("ycsb");
    g.throughput(Throughput::Elements(1));
    let mut runner = workloads::YcsbRunner::new(n, 1);
    for w in Ycsb::ALL {
        g.bench_function(format!("{w:?}"), |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                runner.run(&store, w, iters);
                t.elapsed()
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = db_bench, ycsb
}
criterion_main!(benches);
