//! Engine micro-benchmarks with 100-byte values: random puts, random gets served from the block
//! cache, short (10-row) scans, owned and visited in place, the merge of four files by a
//! compaction (in 64 KiB and in 4 KiB blocks) and by a scan, and ten-cell rows inserted, read
//! back from the memstore and flushed. Run with `cargo bench --bench engine`.

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

/// A table of four files holding 5 000 rows of ten 100-byte cells each in blocks of
/// `block_size` bytes, the rows of all four interleaved in key order (as flushes of random
/// writes leave them); background compactions off.
fn four_files(rng: &mut Rng, block_size: u32) -> (tempfile::TempDir, Engine) {
    const FILE_ROWS: u64 = 5_000;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), EngineOptions::default().auto_compact(false)).unwrap();
    let family = FamilyDescriptor::new("f").block_size(block_size);
    engine.create_table(TableDescriptor::new("bench").family(family)).unwrap();
    let table = engine.table("bench").unwrap();
    let value = vec![b'v'; 100];
    for _ in 0..4 {
        for _ in 0..FILE_ROWS {
            let mut put = Put::new(key(rng.next_u64())).durability(Durability::SkipWal);
            for c in 0..10 {
                put = put.add("f", format!("field{c}"), value.clone());
            }
            table.put(put).unwrap();
        }
        engine.flush("bench").unwrap();
    }
    (dir, engine)
}

fn merges(c: &mut Criterion) {
    let mut rng = Rng::new(17);
    let mut g = c.benchmark_group("merge_four_files_of_ten_cell_rows");
    g.sample_size(10);
    g.throughput(Throughput::Elements(4 * 5_000 * 10));
    g.bench_function("compact", |b| {
        b.iter_batched(
            || four_files(&mut rng, FamilyDescriptor::new("f").block_size),
            |(_dir, engine)| engine.compact("bench").unwrap(),
            BatchSize::PerIteration,
        )
    });
    // The block size the peer harness gives every engine: a compaction then reads ten times
    // as many blocks.
    g.bench_function("compact_4k_blocks", |b| {
        b.iter_batched(
            || four_files(&mut rng, 4096),
            |(_dir, engine)| engine.compact("bench").unwrap(),
            BatchSize::PerIteration,
        )
    });
    let (_dir, engine) = four_files(&mut rng, FamilyDescriptor::new("f").block_size);
    let table = engine.table("bench").unwrap();
    g.bench_function("scan", |b| {
        b.iter(|| {
            let mut cells = 0;
            table
                .scan_with(Scan::new(), |row| {
                    cells += row.len();
                    std::ops::ControlFlow::Continue(())
                })
                .unwrap();
            assert_eq!(cells, 4 * 5_000 * 10);
        })
    });
    g.finish();
}

/// Ten 100-byte cells per row, as a YCSB record is stored: inserting rows with random keys,
/// and point reads of rows the memstore holds (each found through the memstore's row index).
fn ten_cell_rows(c: &mut Criterion) {
    let value = vec![b'v'; 100];
    let record = |i: u64| (0..10).fold(Put::new(key(i)), |p, f| p.add("f", format!("field{f}"), value.clone()));
    let mut g = c.benchmark_group("ten_cell_rows");
    g.throughput(Throughput::Elements(1));
    let (_dir, _engine, table) = open(Durability::SkipWal);
    let mut rng = Rng::new(23);
    g.bench_function("insert", |b| b.iter(|| table.put(record(rng.next_u64())).unwrap()));
    // About 40 MB of rows: all of them stay in the memstore.
    const HELD: u64 = 15_000;
    let (_held_dir, _held_engine, held) = open(Durability::SkipWal);
    for i in 0..HELD {
        held.put(record(i)).unwrap();
    }
    g.bench_function("get_from_memstore", |b| {
        b.iter(|| {
            let cells = held.get_with(Get::new(key(rng.next_u64() % HELD)), |row| row.len()).unwrap();
            assert_eq!(cells, Some(10));
        })
    });
    g.finish();

    // A flush of 20 000 such rows (about 23 MB of cells) to a file of 4 KiB blocks: the
    // memstore walked in key order, its items in the order they were inserted.
    const FLUSHED: u64 = 20_000;
    let mut g = c.benchmark_group("flush_ten_cell_rows");
    g.sample_size(10);
    g.throughput(Throughput::Elements(FLUSHED));
    g.bench_function("flush", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().unwrap();
                let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
                let family = FamilyDescriptor::new("f").block_size(4096);
                let table = TableDescriptor::new("bench").family(family).durability(Durability::SkipWal);
                engine.create_table(table).unwrap();
                let table = engine.table("bench").unwrap();
                for _ in 0..FLUSHED {
                    table.put(record(rng.next_u64())).unwrap();
                }
                (dir, engine)
            },
            |(_dir, engine)| engine.flush("bench").unwrap(),
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, puts, gets, scans, merges, ten_cell_rows);
criterion_main!(benches);
