//! `cargo bench --bench wide`: a wide row against the tall layout. One row holding 10⁶
//! entries as qualifiers, against 10⁶ rows of one cell each; both flushed and compacted into
//! files. Reads of 30 entries — the first 30, and 30 after a random entry — go through the
//! column filters (ColumnPaginationFilter), which seek inside the row; the tall layout reads 30
//! rows with a scan. Appends add one entry to the wide row, or one row to the tall table.
//! Reports calls per second and blocks looked up per call (block-cache hits plus misses: every
//! block a read touches), median of three interleaved rounds.
//!
//! Writes its table into `benches/README.md` between the `wide` markers. `-- --quick` runs a
//! tenth of the entries and only prints; without `--bench` (as `cargo test --benches` runs it)
//! it is a short smoke run that writes nothing.

mod common;

use std::time::Instant;

use bytes::Bytes;
use cellar::engine::ColumnOffset;
use cellar::prelude::*;

fn id(i: u32) -> Bytes {
    Bytes::copy_from_slice(&i.to_be_bytes())
}

fn tall_key(i: u32) -> Bytes {
    Bytes::from([&b"u"[..], &i.to_be_bytes()].concat())
}

/// A well-mixed number (splitmix64): the same sequence on every run.
fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

struct Layouts {
    engine: Engine,
    wide: Table,
    tall: Table,
    _dir: tempfile::TempDir,
}

fn build(n: u32) -> Layouts {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let engine = Engine::open(dir.path(), EngineOptions::default()).expect("an engine");
    for name in ["wide", "tall"] {
        engine.create_table(TableDescriptor::new(name).family(FamilyDescriptor::new("p"))).expect("a table");
    }
    let (wide, tall) = (engine.table("wide").unwrap(), engine.table("tall").unwrap());
    let value = |i: u32| Bytes::copy_from_slice(&u64::from(i).to_be_bytes());
    for chunk in (0..n).collect::<Vec<_>>().chunks(10_000) {
        wide.put(chunk.iter().fold(Put::new("w"), |p, i| p.add("p", id(*i), value(*i)))).unwrap();
        tall.batch(chunk.iter().map(|i| Mutation::Put(Put::new(tall_key(*i)).add("p", "v", value(*i)))).collect())
            .unwrap();
    }
    for name in ["wide", "tall"] {
        engine.flush(name).unwrap();
        engine.major_compact(name).unwrap();
    }
    Layouts { engine, wide, tall, _dir: dir }
}

/// Calls per second and blocks looked up per call of `f` run `calls` times.
fn rate(engine: &Engine, calls: u64, mut f: impl FnMut(u64)) -> (f64, f64) {
    let before = engine.cache_stats();
    let started = Instant::now();
    (0..calls).for_each(&mut f);
    let secs = started.elapsed().as_secs_f64();
    let after = engine.cache_stats();
    let blocks = (after.hits + after.misses) - (before.hits + before.misses);
    (calls as f64 / secs, blocks as f64 / calls as f64)
}

fn round(l: &Layouts, n: u32, calls: u64, appended: &mut u32) -> Vec<(&'static str, f64, f64)> {
    let start = |i: u64| (mix(i) % u64::from(n - 30)) as u32;
    let wide_page = |offset: ColumnOffset| {
        let r = l.wide.get(Get::new("w").filter(Filter::ColumnPagination { limit: 30, offset })).unwrap();
        assert_eq!(r.cells.len(), 30);
    };
    let mut out = Vec::new();
    let (r, b) = rate(&l.engine, calls, |_| wide_page(ColumnOffset::Count(0)));
    out.push(("wide: first 30 entries (ColumnPaginationFilter(30, 0))", r, b));
    let (r, b) = rate(&l.engine, calls, |i| wide_page(ColumnOffset::Qualifier(id(start(i)))));
    out.push(("wide: 30 entries after a random one (ColumnPaginationFilter(30, id))", r, b));
    let (r, b) = rate(&l.engine, calls, |i| {
        let rows = l.tall.scan(Scan::new().start(tall_key(start(i))).limit(30)).unwrap().count();
        assert_eq!(rows, 30);
    });
    out.push(("tall: 30 rows after a random one (scan, limit 30)", r, b));
    let (r, b) = rate(&l.engine, calls, |_| {
        *appended += 1;
        l.wide.put(Put::new("w").add("p", id(n + *appended), "x")).unwrap();
    });
    out.push(("wide: append one entry (put of one qualifier)", r, b));
    let (r, b) = rate(&l.engine, calls, |_| {
        *appended += 1;
        l.tall.put(Put::new(tall_key(n + *appended)).add("p", "v", "x")).unwrap();
    });
    out.push(("tall: append one row (put of one row)", r, b));
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let benching = args.iter().any(|a| a == "--bench");
    let quick = args.iter().any(|a| a == "--quick");
    let (n, calls, rounds) = match (benching, quick) {
        (false, _) => (10_000, 200, 1),
        (true, true) => (100_000, 2_000, 1),
        (true, false) => (1_000_000, 20_000, 3),
    };
    let built = Instant::now();
    let layouts = build(n);
    let build_secs = built.elapsed().as_secs_f64();
    let mut appended = 0;
    let all: Vec<_> = (0..rounds).map(|_| round(&layouts, n, calls, &mut appended)).collect();
    let median = |i: usize| {
        let mut rates: Vec<f64> = all.iter().map(|r| r[i].1).collect();
        rates.sort_by(f64::total_cmp);
        rates[rates.len() / 2]
    };
    let rows: Vec<(&str, f64, f64)> = (0..all[0].len()).map(|i| (all[0][i].0, median(i), all[0][i].2)).collect();
    let mut table = String::from("| operation | calls/s | blocks per call |\n|---|---:|---:|\n");
    for (name, r, b) in &rows {
        table.push_str(&format!("| {name} | {r:.0} | {b:.1} |\n"));
    }
    let (wide, tall) = (rows[1].1, rows[2].1);
    let (append, put) = (rows[3].1, rows[4].1);
    let section = format!(
        "## Wide rows\n\n`cargo bench --bench wide` (`benches/wide.rs`): one row of {n} entries (a 4-byte \
         qualifier and an 8-byte value each) against {n} rows of one such cell, both flushed and major-compacted \
         (built in {build_secs:.1} s). {calls} calls per measurement; embedded engine, release build, {} cores \
         ({}); median of {rounds} rounds. Blocks per call counts block-cache lookups, hits and misses: every \
         block a call touches.\n\n{table}\n\
         A 30-entry slice from the middle of the wide row reads {:.1} blocks, while the tall layout's 30-row scan \
         reads {:.1}: the filters seek to the slice rather than reading the row. The slice runs at {:.2}× the \
         scan's rate; an append to the wide row at {:.2}× a single-row put's.",
        std::thread::available_parallelism().map_or(0, |p| p.get()),
        common::cpu_model(),
        rows[1].2,
        rows[2].2,
        wide / tall,
        append / put,
    );
    println!("{section}");
    if benching && !quick {
        common::write_section("wide", &section);
    }
}
