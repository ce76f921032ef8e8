//! Engine micro-benchmarks with 100-byte values: random puts, random gets served from the block
//! cache, and short (10-row) scans, owned and visited in place. Run with
//! `cargo bench --bench engine`.

#[path = "workloads/mod.rs"]
mod workloads;

use std::hint::black_box;

use cellar::prelude::*;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use workloads::Rng;

const ROWS: u64 = 100_000;

fn key(i: u64) -> Vec<u8> {
    format!("user{:012}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % 1_000_000_000_000).into_bytes()
}

fn open(durability: Durability) -> (tempfile::TempDir, Engine, Table) {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    engine
        .create_table(TableDescriptor::new("bench").family(FamilyDescriptor::new("f")).durability(durability))
        .unwrap();
    let table = engine.table("bench").unwrap();
    (dir, engine, table)
}

fn loaded() -> (tempfile::TempDir, Engine, Table) {
    let (dir, engine, table) = open(Durability::SkipWal);
    let value = vec![b'v'; 100];
    for i in 0..ROWS {
        table.put(Put::new(key(i)).add("f", "q", value.clone())).unwrap();
    }
    engine.major_compact("bench").unwrap();
    (dir, engine, table)
}

fn puts(c: &mut Criterion) {
    let mut g = c.benchmark_group("put_random_100B");
    g.throughput(Throughput::Elements(1));
    for durability in [Durability::SyncWal, Durability::SkipWal] {
        let (_dir, _engine, table) = open(durability);
        let mut rng = Rng::new(7);
        let value = vec![b'v'; 100];
        g.bench_function(format!("{durability:?}"), |b| {
            b.iter(|| table.put(Put::new(key(rng.next_u64())).add("f", "q", value.clone())).unwrap())
        });
    }
    g.finish();
}

fn gets(c: &mut Criterion) {
    let (_dir, _engine, table) = loaded();
    let mut rng = Rng::new(11);
    for i in 0..ROWS {
        black_box(table.get(Get::new(key(i))).unwrap());
    }
    let mut g = c.benchmark_group("get_random_cached");
    g.throughput(Throughput::Elements(1));
    g.bench_function("hit", |b| {
        b.iter(|| {
            let r = table.get(Get::new(key(rng.next_u64() % ROWS))).unwrap();
            assert!(!r.is_empty());
            r
        })
    });
    g.bench_function("miss", |b| b.iter(|| table.get(Get::new(format!("absent{}", rng.next_u64()))).unwrap()));
    g.finish();
}

fn scans(c: &mut Criterion) {
    let (_dir, _engine, table) = loaded();
    let mut rng = Rng::new(13);
    let mut g = c.benchmark_group("scan_10_rows");
    g.throughput(Throughput::Elements(10));
    g.bench_function("forward", |b| {
        b.iter_batched(
            || key(rng.next_u64() % ROWS),
            |start| {
                table.scan(Scan::new().start(start).limit(10)).unwrap().map(|r| r.unwrap().cells.len()).sum::<usize>()
            },
            BatchSize::SmallInput,
        )
    });
    // The same rows lent in place (`scan_with`) instead of returned as owned rows.
    g.bench_function("forward_visit", |b| {
        b.iter_batched(
            || key(rng.next_u64() % ROWS),
            |start| {
                let mut cells = 0;
                table
                    .scan_with(Scan::new().start(start).limit(10), |row| {
                        cells += row.len();
                        std::ops::ControlFlow::Continue(())
                    })
                    .unwrap();
                cells
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, puts, gets, scans);
criterion_main!(benches);
