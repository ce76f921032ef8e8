//! `cargo bench --bench orm`: what the object mapper costs over the engine it runs on. An
//! entity with an 8-byte key and three columns is put, got, got ten at a time and scanned a
//! hundred rows at a time through a `Repository`, and the same cells through hand-written
//! `Table` calls that encode and decode them the same way — both sides in one run, on one
//! table, so the difference is the mapper's: key encoding, schema walks, the store trait, the
//! cost meter and the decoding into the struct.
//!
//! On a shared VM the time of one call drifts by tens of percent between runs, more than the
//! difference measured. So after criterion's groups a paired run settles the ratio: raw and
//! mapped calls take turns in short blocks (the order alternating) and the total times of the
//! two sides are compared; a calibration row compares raw puts with raw puts. `-- --quick` (or
//! a `cargo test --benches` smoke run) does fewer calls.

#[path = "workloads/mod.rs"]
mod workloads;

use std::hint::black_box;
use std::sync::Arc;

use cellar::engine::{Engine, EngineOptions, Get, Put, Scan, Table};
use cellar::orm::store::EmbeddedStore;
use cellar::prelude::*;
use criterion::{criterion_group, BatchSize, Criterion, Throughput};
use workloads::Rng;

const ROWS: u64 = 100_000;

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "people")]
struct Person {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "n")]
    name: String,
    #[cellar(column = "e")]
    email: String,
    #[cellar(column = "a")]
    age: u32,
}

fn person(id: u64) -> Person {
    Person { id, name: format!("name {id:08}"), email: format!("user{id:08}@example.com"), age: (id % 90) as u32 }
}

/// The raw side: the cells the mapper writes, by hand.
fn raw_put(table: &Table, p: &Person) -> cellar::engine::Result<()> {
    table.put(
        Put::new(p.id.to_be_bytes().to_vec())
            .add("d", "n", p.name.clone().into_bytes())
            .add("d", "e", p.email.clone().into_bytes())
            .add("d", "a", p.age.to_be_bytes().to_vec()),
    )
}

/// The raw side's decoding: a row's cells back into the struct.
fn raw_decode(row: &[u8], cells: &[cellar::engine::Cell]) -> Option<Person> {
    let value = |q: &[u8]| cells.iter().find(|c| c.family == "d" && c.qualifier == q).map(|c| &c.value[..]);
    Some(Person {
        id: u64::from_be_bytes(row.try_into().ok()?),
        name: String::from_utf8(value(b"n")?.to_vec()).ok()?,
        email: String::from_utf8(value(b"e")?.to_vec()).ok()?,
        age: u32::from_be_bytes(value(b"a")?.try_into().ok()?),
    })
}

/// The raw side of a 100-row scan from `start`, collected as `to_vec` collects (a count would
/// drop each entity at once, and the allocator would hand the next row the same memory).
fn raw_scan(table: &Table, start: u64) -> Vec<Person> {
    let scan = Scan::new().start(start.to_be_bytes().to_vec()).limit(100);
    let rows: Vec<Person> =
        table.scan(scan).unwrap().map(|r| r.unwrap()).map(|r| raw_decode(&r.row, &r.cells).unwrap()).collect();
    assert_eq!(rows.len(), 100);
    rows
}

struct Fixture {
    _dir: tempfile::TempDir,
    table: Table,
    people: Repository<Person>,
}

fn loaded() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    let db = Db::with_store(Arc::new(EmbeddedStore::new(engine.clone())));
    let people = db.repo::<Person>().unwrap();
    let batch: Vec<Person> = (0..ROWS).map(person).collect();
    for chunk in batch.chunks(10_000) {
        people.put_many(chunk).unwrap();
    }
    engine.major_compact("people").unwrap();
    let table = engine.table("people").unwrap();
    let check = table.get(Get::new(7u64.to_be_bytes().to_vec())).unwrap();
    assert_eq!(raw_decode(&check.row, &check.cells), Some(person(7)), "both sides read the same cells");
    Fixture { _dir: dir, table, people }
}

fn puts(c: &mut Criterion) {
    // Built by the first benchmark that runs (none under a filter that skips the group), so a
    // profile of one benchmark holds its own work.
    let fixture = std::cell::OnceCell::new();
    let mut g = c.benchmark_group("orm_put");
    g.throughput(Throughput::Elements(1));
    let mut rng = Rng::new(3);
    g.bench_function("raw", |b| {
        let f = fixture.get_or_init(loaded);
        b.iter(|| raw_put(&f.table, &person(rng.next_u64() % ROWS)).unwrap())
    });
    g.bench_function("orm", |b| {
        let f = fixture.get_or_init(loaded);
        b.iter(|| f.people.put(&person(rng.next_u64() % ROWS)).unwrap())
    });
    g.finish();
}

fn gets(c: &mut Criterion) {
    let fixture = std::cell::OnceCell::new();
    let mut g = c.benchmark_group("orm_get");
    g.throughput(Throughput::Elements(1));
    let mut rng = Rng::new(5);
    g.bench_function("raw", |b| {
        let f = fixture.get_or_init(loaded);
        b.iter(|| {
            let r = f.table.get(Get::new((rng.next_u64() % ROWS).to_be_bytes().to_vec())).unwrap();
            black_box(raw_decode(&r.row, &r.cells).unwrap())
        })
    });
    g.bench_function("orm", |b| {
        let f = fixture.get_or_init(loaded);
        b.iter(|| black_box(f.people.get(rng.next_u64() % ROWS).unwrap().unwrap()))
    });
    g.finish();
}

fn get_many(c: &mut Criterion) {
    let fixture = std::cell::OnceCell::new();
    let mut g = c.benchmark_group("orm_get_many_10");
    g.throughput(Throughput::Elements(10));
    let mut rng = Rng::new(7);
    g.bench_function("raw", |b| {
        let f = fixture.get_or_init(loaded);
        b.iter(|| {
            let gets = (0..10).map(|_| Get::new((rng.next_u64() % ROWS).to_be_bytes().to_vec())).collect();
            let rows = f.table.get_many(gets).unwrap();
            black_box(rows.iter().map(|r| raw_decode(&r.row, &r.cells).unwrap()).collect::<Vec<_>>())
        })
    });
    g.bench_function("orm", |b| {
        let f = fixture.get_or_init(loaded);
        b.iter(|| {
            let keys: Vec<u64> = (0..10).map(|_| rng.next_u64() % ROWS).collect();
            black_box(f.people.get_many(keys).unwrap())
        })
    });
    g.finish();
}

fn scans(c: &mut Criterion) {
    let fixture = std::cell::OnceCell::new();
    let mut g = c.benchmark_group("orm_scan_100");
    g.throughput(Throughput::Elements(100));
    let mut rng = Rng::new(11);
    g.bench_function("raw", |b| {
        let f = fixture.get_or_init(loaded);
        b.iter_batched(|| rng.next_u64() % (ROWS - 100), |start| raw_scan(&f.table, start), BatchSize::SmallInput)
    });
    g.bench_function("orm", |b| {
        let f = fixture.get_or_init(loaded);
        b.iter_batched(
            || rng.next_u64() % (ROWS - 100),
            |start| {
                let rows = f.people.scan().range(PersonKey::from(start)..).limit(100).to_vec().unwrap();
                assert_eq!(rows.len(), 100);
                rows
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// (Time of the mapped calls) / (time of the raw calls). The two sides take turns in blocks of
/// `block` calls (a millisecond or less), the order alternating, and the ratio is of their
/// total times. Background flushes and compactions share the machine with the caller and
/// slow it by several times while they run; taking turns this often bills both sides alike
/// for them, which rounds of thousands of calls did not (a side compared with itself came
/// out 13 % slower).
fn paired(calls: u64, block: u64, mut raw: impl FnMut(u64), mut orm: impl FnMut(u64)) -> f64 {
    let mut spent = [std::time::Duration::ZERO; 2];
    let mut run = |side: usize, f: &mut dyn FnMut(u64), from: u64| {
        let started = std::time::Instant::now();
        for i in from..from + block {
            f(i);
        }
        spent[side] += started.elapsed();
    };
    for (turn, from) in (0..calls).step_by(block as usize).enumerate() {
        if turn % 2 == 0 {
            run(0, &mut raw, from);
            run(1, &mut orm, from);
        } else {
            run(1, &mut orm, from);
            run(0, &mut raw, from);
        }
    }
    spent[1].as_secs_f64() / spent[0].as_secs_f64()
}

/// The paired ratios of every operation, printed as a table, after a calibration: raw puts
/// against raw puts, which a fair comparison puts at 1.00.
fn ratios(quick: bool) {
    let f = loaded();
    let calls = if quick { 800 } else { 400_000 };
    let key = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % ROWS;
    // The two sides put disjoint rows (even and odd) drawn from different draws of the key
    // sequence: a put leaves its row in a state the next put of the row pays for (a row the
    // memstore does not hold goes in as one run of cells, and the next write into it splits
    // the run), so sharing rows would bill one side for the other's puts, and neighbouring
    // rows written back to back would find each other's path through the memstore in cache.
    let even = |i: u64| 2 * (key(2 * i) % (ROWS / 2));
    let odd = |i: u64| 2 * (key(2 * i + 1) % (ROWS / 2)) + 1;
    let calibration = paired(
        calls / 2,
        50,
        |i| raw_put(&f.table, &person(even(i))).unwrap(),
        |i| raw_put(&f.table, &person(odd(i))).unwrap(),
    );
    let put =
        paired(calls, 50, |i| raw_put(&f.table, &person(even(i))).unwrap(), |i| f.people.put(&person(odd(i))).unwrap());
    let get = paired(
        calls,
        50,
        |i| {
            let r = f.table.get(Get::new(key(i).to_be_bytes().to_vec())).unwrap();
            black_box(raw_decode(&r.row, &r.cells).unwrap());
        },
        |i| {
            black_box(f.people.get(key(i)).unwrap().unwrap());
        },
    );
    let many = paired(
        calls / 10,
        5,
        |i| {
            let gets = (0..10).map(|j| Get::new(key(i * 10 + j).to_be_bytes().to_vec())).collect();
            let rows = f.table.get_many(gets).unwrap();
            black_box(rows.iter().map(|r| raw_decode(&r.row, &r.cells).unwrap()).collect::<Vec<_>>());
        },
        |i| {
            black_box(f.people.get_many((0..10).map(|j| key(i * 10 + j))).unwrap());
        },
    );
    let scan = paired(
        calls / 100,
        1,
        |i| {
            black_box(raw_scan(&f.table, key(i) % (ROWS - 100)));
        },
        |i| {
            let rows = f.people.scan().range(PersonKey::from(key(i) % (ROWS - 100))..).limit(100).to_vec().unwrap();
            assert_eq!(black_box(rows).len(), 100);
        },
    );
    println!(
        "\nmapped / raw, total time of each side over {calls} calls taken in turns \
         (get_many: {} of 10, scan: {} of 100 rows; calibration: {} raw puts a side):",
        calls / 10,
        calls / 100,
        calls / 2
    );
    println!("| operation | mapped / raw |\n|---|---:|");
    for (op, r) in [
        ("put (calibration: raw / raw)", calibration),
        ("put", put),
        ("get", get),
        ("get_many(10)", many),
        ("scan(100)", scan),
    ] {
        println!("| {op} | {r:.3} |");
    }
}

criterion_group!(benches, puts, gets, get_many, scans);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick") || !args.iter().any(|a| a == "--bench");
    if !quick {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
    // A profile (`--profile-time`) is of the benchmarks it names only.
    if !args.iter().any(|a| a == "--profile-time") {
        ratios(quick);
    }
}
