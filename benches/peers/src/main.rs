//! `cellar-peers`: runs the workloads of `benches/workloads` on Cellar, RocksDB and fjall with
//! equivalent settings, one child process per engine (so peak memory is measured per engine),
//! and prints ops/s per engine and the ratios Cellar/peer.
//!
//! Usage: `cargo run --release -- [--records N] [--ops N] [--dir DIR] [--engines a,b,c] [--runs N]`;
//! with `--runs N` the engines take turns N times and the table shows each figure's median
//! (peak RSS: the largest);
//! with `PEERS_TRACE_RSS=1` each engine reports its resident memory after every workload;
//! `PEERS_ONLY=<name prefix>` runs only the matching workloads (and the loads they need).
//!
//! Equivalent settings: every write reaches the OS before it is acknowledged (Cellar SyncWal;
//! RocksDB WAL without sync; fjall journal persisted with `PersistMode::Buffer` per write), no
//! fsync; 256 MiB block cache; 64 MiB memtables and 128 MiB of them in all; no compression;
//! 10-bit bloom filters.
//!
//! Write and space amplification are measured on a store of their own: YCSB load and workload
//! A, then a flush. Write amplification is the bytes the process dirtied for storage
//! (`write_bytes` of `/proc/self/io`: logs, tables, compactions) over the bytes of keys and
//! values the workloads handed the store; space amplification is the size of the store's
//! directory over the bytes of live keys and values.
//!
//! The synced-write workloads are the exception: every write is on disk before it is
//! acknowledged (Cellar `FsyncWal`, whose writers waiting together share one fsync; RocksDB
//! `sync = true`; fjall `PersistMode::SyncAll` after each write), by 1, 4 and 16 threads.

#[path = "../../workloads/mod.rs"]
mod workloads;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use workloads::{Store, Ycsb, FIELDS, FIELD_LEN};

const CACHE: usize = 256 * 1024 * 1024;
const MEMTABLE: usize = 64 * 1024 * 1024;
/// Data block size for every engine: the RocksDB and fjall default.
const BLOCK: u32 = 4096;

/// A YCSB record in a key/value store: the ten fields concatenated, as YCSB's RocksDB binding
/// serializes them; an update rewrites the whole record.
fn record_value(fields: &[Vec<u8>]) -> Vec<u8> {
    fields.concat()
}

fn patch(mut record: Vec<u8>, field: usize, value: &[u8]) -> Vec<u8> {
    let at = field * workloads::FIELD_LEN;
    if record.len() >= at + value.len() {
        record[at..at + value.len()].copy_from_slice(value);
    }
    record
}

struct Rocks(rocksdb::DB);

impl Rocks {
    fn open(dir: &Path) -> Rocks {
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(true);
        opts.set_write_buffer_size(MEMTABLE);
        opts.set_max_background_jobs(2);
        opts.set_compression_type(rocksdb::DBCompressionType::None);
        let mut table = rocksdb::BlockBasedOptions::default();
        table.set_block_cache(&rocksdb::Cache::new_lru_cache(CACHE));
        table.set_bloom_filter(10.0, false);
        table.set_block_size(BLOCK as usize);
        opts.set_block_based_table_factory(&table);
        Rocks(rocksdb::DB::open(&opts, dir).expect("open rocksdb"))
    }
}

impl Store for Rocks {
    fn insert(&self, key: &[u8], fields: Vec<Vec<u8>>) {
        self.0.put(key, record_value(&fields)).expect("put");
    }
    fn read(&self, key: &[u8]) -> bool {
        self.0.get_pinned(key).expect("get").is_some()
    }
    fn update(&self, key: &[u8], field: usize, value: &[u8]) {
        let current = self.0.get(key).expect("get").unwrap_or_default();
        self.0.put(key, patch(current, field, value)).expect("put");
    }
    fn scan(&self, start: &[u8], n: usize) -> usize {
        let mut it = self.0.raw_iterator();
        it.seek(start);
        let mut read = 0;
        while it.valid() && read < n {
            std::hint::black_box(it.value());
            read += 1;
            it.next();
        }
        read
    }
    /// The iterator that copies each key and value out (`Box<[u8]>`).
    fn scan_owned(&self, start: &[u8], n: usize) -> usize {
        let from = rocksdb::IteratorMode::From(start, rocksdb::Direction::Forward);
        self.0.iterator(from).take(n).fold(0, |read, kv| {
            std::hint::black_box(kv.expect("scan"));
            read + 1
        })
    }
    fn put(&self, key: &[u8], value: &[u8]) {
        self.0.put(key, value).expect("put");
    }
    fn get(&self, key: &[u8]) -> bool {
        self.0.get_pinned(key).expect("get").is_some()
    }
    fn settle(&self) {
        self.0.flush().expect("flush");
    }
}

struct Fjall {
    db: fjall::Database,
    ks: fjall::Keyspace,
}

impl Fjall {
    fn open(dir: &Path) -> Fjall {
        let db = fjall::Database::builder(dir).cache_size(CACHE as u64).open().expect("open fjall");
        let ks = db
            .keyspace("t", || {
                fjall::KeyspaceCreateOptions::default()
                    .max_memtable_size(MEMTABLE as u64)
                    .data_block_compression_policy(fjall::config::CompressionPolicy::disabled())
            })
            .expect("keyspace");
        Fjall { db, ks }
    }

    fn write(&self, key: &[u8], value: Vec<u8>) {
        self.ks.insert(key, value).expect("insert");
        self.db.persist(fjall::PersistMode::Buffer).expect("persist");
    }
}

impl Store for Fjall {
    fn insert(&self, key: &[u8], fields: Vec<Vec<u8>>) {
        self.write(key, record_value(&fields));
    }
    fn read(&self, key: &[u8]) -> bool {
        self.ks.get(key).expect("get").is_some()
    }
    fn update(&self, key: &[u8], field: usize, value: &[u8]) {
        let current = self.ks.get(key).expect("get").map(|v| v.to_vec()).unwrap_or_default();
        self.write(key, patch(current, field, value));
    }
    fn scan(&self, start: &[u8], n: usize) -> usize {
        self.ks.range(start.to_vec()..).take(n).map(|g| std::hint::black_box(g.value().expect("value").len())).count()
    }
    /// Keys and values as the shared slices a guard hands out.
    fn scan_owned(&self, start: &[u8], n: usize) -> usize {
        self.ks.range(start.to_vec()..).take(n).fold(0, |read, g| {
            std::hint::black_box(g.into_inner().expect("scan"));
            read + 1
        })
    }
    fn put(&self, key: &[u8], value: &[u8]) {
        self.write(key, value.to_vec());
    }
    fn get(&self, key: &[u8]) -> bool {
        self.ks.get(key).expect("get").is_some()
    }
}

/// A store for the synced-write workloads: every put is durable once it returns.
trait SyncedPut: Send + Sync {
    fn put(&self, key: &[u8], value: &[u8]);
}

struct SyncedCellar {
    table: cellar_engine::Table,
    /// Kept open for as long as the table is written.
    _engine: cellar_engine::Engine,
}

impl SyncedPut for SyncedCellar {
    fn put(&self, key: &[u8], value: &[u8]) {
        self.table.put(cellar_engine::Put::new(key.to_vec()).add("f", "v", value.to_vec())).expect("put");
    }
}

struct SyncedRocks(rocksdb::DB);

impl SyncedPut for SyncedRocks {
    fn put(&self, key: &[u8], value: &[u8]) {
        let mut w = rocksdb::WriteOptions::default();
        w.set_sync(true);
        self.0.put_opt(key, value, &w).expect("put");
    }
}

struct SyncedFjall(Fjall);

impl SyncedPut for SyncedFjall {
    fn put(&self, key: &[u8], value: &[u8]) {
        self.0.ks.insert(key, value).expect("insert");
        self.0.db.persist(fjall::PersistMode::SyncAll).expect("persist");
    }
}

fn open_synced(engine: &str, dir: &Path) -> Box<dyn SyncedPut> {
    match engine {
        "cellar" => {
            use cellar_engine::*;
            let opts = EngineOptions::default().block_cache_bytes(CACHE).memstore_flush_bytes(MEMTABLE);
            let e = Engine::open(dir, opts).expect("open cellar");
            let desc = TableDescriptor::new("t").family(FamilyDescriptor::new("f")).durability(Durability::FsyncWal);
            e.create_table(desc).expect("create");
            Box::new(SyncedCellar { table: e.table("t").expect("table"), _engine: e })
        }
        "rocksdb" => Box::new(SyncedRocks(Rocks::open(dir).0)),
        "fjall" => Box::new(SyncedFjall(Fjall::open(dir))),
        other => panic!("unknown engine {other}"),
    }
}

/// `n` synced puts of 100-byte values split over `threads` threads; returns when all are done.
fn synced_writes(store: &dyn SyncedPut, threads: u64, n: u64) {
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let value = [b'v'; 100];
                for i in 0..n / threads {
                    store.put(&workloads::bench_key(t * n + i), &value);
                }
            });
        }
    });
}

fn open_cellar(dir: &Path) -> workloads::cellar_store::CellarStore {
    use cellar_engine::*;
    // RocksDB holds at most two 64 MiB write buffers by default: give Cellar the same memstore
    // budget instead of its 512 MiB default.
    let opts = EngineOptions::default()
        .block_cache_bytes(CACHE)
        .memstore_flush_bytes(MEMTABLE)
        .global_memstore_bytes(2 * MEMTABLE);
    let engine = Engine::open(dir, opts).expect("open cellar");
    // RocksDB's 4 KiB data blocks rather than HBase's 64 KiB default: with the data several
    // times the block cache, every miss reads, checksums and searches one block.
    engine
        .create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f").block_size(BLOCK)))
        .expect("create");
    let table = engine.table("t").expect("table");
    workloads::cellar_store::CellarStore { engine, table }
}

/// A store that tallies the bytes of keys and values written through it.
struct Counted<'a> {
    inner: &'a dyn Store,
    bytes: std::cell::Cell<u64>,
}

impl Counted<'_> {
    fn add(&self, n: usize) {
        self.bytes.set(self.bytes.get() + n as u64);
    }
}

impl Store for Counted<'_> {
    fn insert(&self, key: &[u8], fields: Vec<Vec<u8>>) {
        self.add(key.len() + fields.iter().map(Vec::len).sum::<usize>());
        self.inner.insert(key, fields);
    }
    fn read(&self, key: &[u8]) -> bool {
        self.inner.read(key)
    }
    fn update(&self, key: &[u8], field: usize, value: &[u8]) {
        self.add(key.len() + value.len());
        self.inner.update(key, field, value);
    }
    fn scan(&self, start: &[u8], n: usize) -> usize {
        self.inner.scan(start, n)
    }
    fn scan_owned(&self, start: &[u8], n: usize) -> usize {
        self.inner.scan_owned(start, n)
    }
    fn put(&self, key: &[u8], value: &[u8]) {
        self.add(key.len() + value.len());
        self.inner.put(key, value);
    }
    fn get(&self, key: &[u8]) -> bool {
        self.inner.get(key)
    }
    fn settle(&self) {
        self.inner.settle();
    }
}

/// Bytes this process has dirtied for storage so far (`write_bytes` of `/proc/self/io`).
fn storage_bytes_written() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    io.lines().find_map(|l| l.strip_prefix("write_bytes:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// Total size of the files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// CPU seconds from `/proc`: the whole process's (every thread, user and system), and the
/// calling thread's time on a CPU and time runnable but waiting for one. Set beside a
/// workload's wall time, they split it into the workload thread's own work, its waits, and
/// what the engine's background threads spend meanwhile.
#[derive(Debug, Clone, Copy, Default)]
struct CpuTimes {
    process: f64,
    thread: f64,
    thread_runnable: f64,
}

impl CpuTimes {
    /// Zeros where `/proc` cannot be read.
    fn now() -> CpuTimes {
        // SAFETY: sysconf only reads a system constant.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        // utime and stime are the 14th and 15th fields; the command name before them may hold
        // spaces, so count from the `)` that ends it.
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let after_name: Vec<&str> = stat.rsplit(')').next().unwrap_or_default().split_whitespace().collect();
        let field = |i: usize| after_name.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        // schedstat: nanoseconds on a CPU, nanoseconds waiting on a run queue, time slices.
        let sched = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
        let ns: Vec<f64> = sched.split_whitespace().filter_map(|v| v.parse().ok()).collect();
        CpuTimes {
            process: (field(11) + field(12)) / ticks,
            thread: ns.first().copied().unwrap_or(0.0) / 1e9,
            thread_runnable: ns.get(1).copied().unwrap_or(0.0) / 1e9,
        }
    }

    fn since(&self, earlier: &CpuTimes) -> CpuTimes {
        CpuTimes {
            process: self.process - earlier.process,
            thread: self.thread - earlier.thread,
            thread_runnable: self.thread_runnable - earlier.thread_runnable,
        }
    }
}

fn peak_rss_kib() -> u64 {
    rss_kib("VmHWM:")
}

/// A memory figure of this process from `/proc/self/status`, in KiB.
fn rss_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// What the C heap holds (glibc's `mallinfo2`): bytes in use, bytes free but kept, and bytes
/// in mmapped chunks, so resident memory can be split into live data and allocator slack.
fn heap_summary() -> String {
    // SAFETY: mallinfo2 only reads the allocator's counters.
    let m = unsafe { libc::mallinfo2() };
    let mib = |b: usize| b >> 20;
    format!(
        "heap {} MiB in use, {} MiB free in arenas, {} MiB mmapped",
        mib(m.uordblks),
        mib(m.fordblks),
        mib(m.hblkhd)
    )
}

/// Runs every workload on one engine, printing `RESULT name ops_per_sec` lines.
fn child(engine: &str, dir: &Path, records: u64, ops: u64) {
    let run = |name: &str, n: u64, s: &dyn Store, f: &mut dyn FnMut()| {
        let before = CpuTimes::now();
        let t = Instant::now();
        f();
        let secs = t.elapsed().as_secs_f64();
        println!("RESULT {name}\t{:.0}", n as f64 / secs);
        if std::env::var_os("PEERS_TRACE_CPU").is_some() {
            let spent = CpuTimes::now().since(&before);
            eprintln!(
                "{engine} {name}: {secs:.2} s wall; process CPU {:.2} s; workload thread CPU {:.2} s, \
                 {:.2} s waiting for a CPU",
                spent.process, spent.thread, spent.thread_runnable
            );
        }
        if std::env::var_os("PEERS_TRACE_RSS").is_some() {
            eprintln!(
                "{engine} after {name}: {} MiB resident, {} MiB peak; {}; {}",
                rss_kib("VmRSS:") / 1024,
                peak_rss_kib() / 1024,
                heap_summary(),
                s.stats()
            );
        }
    };
    let open = |sub: &str| -> Box<dyn Store> {
        let d = dir.join(sub);
        std::fs::create_dir_all(&d).expect("dir");
        match engine {
            "cellar" => Box::new(open_cellar(&d)),
            "rocksdb" => Box::new(Rocks::open(&d)),
            "fjall" => Box::new(Fjall::open(&d)),
            other => panic!("unknown engine {other}"),
        }
    };
    // `PEERS_ONLY=ycsb-c` (a name prefix; several, comma-separated) runs just the matching
    // workloads, after what they need, for profiling one of them.
    let only = std::env::var("PEERS_ONLY").ok();
    let wanted = |name: &str| only.as_deref().is_none_or(|o| o.split(',').any(|o| name.starts_with(o)));
    if ["fillrandom", "readrandom", "seekrandom"].iter().any(|n| wanted(n)) {
        let s = open("bench");
        run("fillrandom", records, &*s, &mut || workloads::fill_random(&*s, records));
        run("readrandom", ops, &*s, &mut || {
            workloads::read_random(&*s, ops, records, 7);
        });
        let seeks = ops / 10;
        run("seekrandom+scan100 (rows/s)", seeks * 100, &*s, &mut || {
            workloads::seek_scan(&*s, seeks, records, 11);
        });
        run("seekrandom+scan100, owned rows (rows/s)", seeks * 100, &*s, &mut || {
            workloads::seek_scan_owned(&*s, seeks, records, 11);
        });
    }
    if wanted("synced") {
        // Fsyncs are slow on any disk: a twentieth of the operations, at most 20 000.
        let n = (ops / 20).clamp(16, 20_000);
        for threads in [1, 4, 16] {
            let d = dir.join(format!("synced-{threads}"));
            std::fs::create_dir_all(&d).expect("dir");
            let store = open_synced(engine, &d);
            let t = Instant::now();
            synced_writes(&*store, threads, n);
            let n = n / threads * threads;
            println!("RESULT synced put, {threads} thread(s)\t{:.0}", n as f64 / t.elapsed().as_secs_f64());
        }
    }
    if wanted("amplification") {
        let s = open("amp");
        let counted = Counted { inner: &*s, bytes: std::cell::Cell::new(0) };
        let before = storage_bytes_written();
        workloads::ycsb_load(&counted, records);
        workloads::YcsbRunner::new(records, 17).run(&counted, Ycsb::A, ops);
        counted.settle();
        let written = storage_bytes_written() - before;
        let live: u64 = (0..records).map(|n| (workloads::ycsb_key(n).len() + FIELDS * FIELD_LEN) as u64).sum();
        let on_disk = dir_bytes(&dir.join("amp"));
        println!("AMP write amplification (load + A)\t{:.2}", written as f64 / counted.bytes.get().max(1) as f64);
        println!("AMP space amplification (after load + A, flushed)\t{:.2}", on_disk as f64 / live.max(1) as f64);
    }
    if wanted("ycsb-load") || Ycsb::ALL.iter().any(|w| wanted(w.name())) {
        let s = open("ycsb");
        run("ycsb-load", records, &*s, &mut || workloads::ycsb_load(&*s, records));
        let mut runner = workloads::YcsbRunner::new(records, 13);
        for w in Ycsb::ALL.into_iter().filter(|w| wanted(w.name())) {
            run(w.name(), ops, &*s, &mut || runner.run(&*s, w, ops));
        }
    }
    println!("RSS {}", peak_rss_kib());
}

/// The middle figure of several runs (the mean of the middle two for an even count); 0 if none.
fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 0 {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    }
}

fn main() {
    let mut records = 1_000_000u64;
    let mut ops = 200_000u64;
    let mut dir = std::env::temp_dir().join("cellar-peers");
    let mut engines = vec!["cellar".to_string(), "rocksdb".to_string(), "fjall".to_string()];
    let mut runs = 1usize;
    let mut child_engine: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().expect("option needs a value");
        match a.as_str() {
            "--records" => records = val().parse().expect("number"),
            "--ops" => ops = val().parse().expect("number"),
            "--dir" => dir = PathBuf::from(val()),
            "--engines" => engines = val().split(',').map(str::to_string).collect(),
            "--runs" => runs = val().parse().expect("number"),
            "--child" => child_engine = Some(val()),
            other => panic!("unknown argument {other}"),
        }
    }
    if let Some(e) = child_engine {
        child(&e, &dir, records, ops);
        return;
    }
    println!("records {records}, ops per workload {ops}, {runs} run(s) per engine");
    // results[workload] = (name, per engine: one figure per run); peak RSS per engine and run.
    let mut table: Vec<(String, Vec<Vec<f64>>)> = Vec::new();
    let mut amp: Vec<(String, Vec<Vec<f64>>)> = Vec::new();
    let mut rss: Vec<Vec<u64>> = vec![Vec::new(); engines.len()];
    // Engines take turns run by run, so a slow spell of the host spreads over all of them.
    for run in 0..runs {
        for (ei, e) in engines.iter().enumerate() {
            let edir = dir.join(e);
            let _ = std::fs::remove_dir_all(&edir);
            let out = Command::new(std::env::current_exe().expect("exe"))
                .args(["--child", e, "--dir", edir.to_str().expect("utf-8 dir")])
                .args(["--records", &records.to_string(), "--ops", &ops.to_string()])
                .stderr(std::process::Stdio::inherit())
                .output()
                .expect("run child");
            let text = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() {
                eprintln!("{e} failed: {}", out.status);
            }
            for line in text.lines() {
                if let Some(r) = line.strip_prefix("RESULT ") {
                    let (name, v) = r.rsplit_once('\t').expect("result line");
                    let v: f64 = v.parse().expect("number");
                    eprintln!("run {} {e}: {name} {v:.0}", run + 1);
                    let at = match table.iter().position(|(n, _)| n == name) {
                        Some(i) => i,
                        None => {
                            table.push((name.to_string(), vec![Vec::new(); engines.len()]));
                            table.len() - 1
                        }
                    };
                    table[at].1[ei].push(v);
                } else if let Some(r) = line.strip_prefix("AMP ") {
                    let (name, v) = r.rsplit_once('\t').expect("amplification line");
                    let at = match amp.iter().position(|(n, _)| n == name) {
                        Some(i) => i,
                        None => {
                            amp.push((name.to_string(), vec![Vec::new(); engines.len()]));
                            amp.len() - 1
                        }
                    };
                    amp[at].1[ei].push(v.parse().expect("number"));
                } else if let Some(k) = line.strip_prefix("RSS ") {
                    rss[ei].push(k.parse::<u64>().unwrap_or(0));
                }
            }
            let _ = std::fs::remove_dir_all(&edir);
        }
    }
    let table: Vec<(String, Vec<f64>)> =
        table.into_iter().map(|(name, per_engine)| (name, per_engine.into_iter().map(median).collect())).collect();
    let rss: Vec<u64> = rss.into_iter().map(|r| r.into_iter().max().unwrap_or(0)).collect();
    print!("{:<52}", "workload (ops/s)");
    for e in &engines {
        print!("{e:>12}");
    }
    for e in engines.iter().skip(1) {
        print!("{:>16}", format!("{}/{e}", engines[0]));
    }
    println!();
    for (name, vals) in &table {
        print!("{name:<52}");
        for v in vals {
            print!("{v:>12.0}");
        }
        for v in vals.iter().skip(1) {
            print!("{:>16.2}", vals[0] / v);
        }
        println!();
    }
    print!("{:<52}", "peak RSS (MiB)");
    for r in &rss {
        print!("{:>12}", r / 1024);
    }
    println!();
    for (name, per_engine) in amp {
        print!("{name:<52}");
        for v in per_engine {
            print!("{:>12.2}", median(v));
        }
        println!();
    }
}
