//! Workload definitions shared by the criterion benches and the peer harness
//! (`benches/peers`): YCSB core workloads A–F and db_bench's fillrandom, readrandom and
//! seekrandom+scan(100).
//!
//! YCSB records are 10 fields of 100 bytes under keys `user<fnv64(n)>`; request keys follow a
//! scrambled zipfian (theta 0.99) or, for workload D, a "latest" distribution, as YCSB's core
//! workload defines them. A store is driven through [`Store`], so every engine runs the same
//! operation sequence from the same seed.

#![allow(dead_code)]

/// YCSB's field count and field length.
pub const FIELDS: usize = 10;
pub const FIELD_LEN: usize = 100;

/// What a workload needs from a store.
pub trait Store {
    /// Writes a whole record (insert or load); the store takes the field values.
    fn insert(&self, key: &[u8], fields: Vec<Vec<u8>>);
    /// Reads a whole record; returns whether it exists.
    fn read(&self, key: &[u8]) -> bool;
    /// Replaces one field of a record.
    fn update(&self, key: &[u8], field: usize, value: &[u8]);
    /// Reads up to `n` records from `start` in key order; returns how many were read.
    fn scan(&self, start: &[u8], n: usize) -> usize;
    /// [`Store::scan`] with each record handed out as a value of its own, which outlives the
    /// iteration (Cellar's `Table::scan` rows, the key/value stores' owned keys and values).
    fn scan_owned(&self, start: &[u8], n: usize) -> usize {
        self.scan(start, n)
    }
    /// Writes one plain key/value (db_bench workloads).
    fn put(&self, key: &[u8], value: &[u8]);
    /// Reads one plain key/value.
    fn get(&self, key: &[u8]) -> bool;
    /// Makes pending writes visible to a fresh read path (flush memtables), if the store needs it.
    fn settle(&self) {}
    /// Engine internals worth printing next to a result (cache hit rate, files), if any.
    fn stats(&self) -> String {
        String::new()
    }
}

/// xorshift64*: fast, deterministic, good enough for request streams.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[0, n)`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// FNV-1a 64, as YCSB hashes key numbers.
pub fn fnv64(mut n: u64) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for _ in 0..8 {
        h ^= n & 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
        n >>= 8;
    }
    h
}

/// The key of YCSB record number `n`.
pub fn ycsb_key(n: u64) -> Vec<u8> {
    format!("user{}", fnv64(n)).into_bytes()
}

/// A record's 10 fields, derived from its number and a version so values differ.
pub fn ycsb_fields(n: u64, version: u64) -> Vec<Vec<u8>> {
    (0..FIELDS).map(|f| field_value(n, f, version)).collect()
}

pub fn field_value(n: u64, field: usize, version: u64) -> Vec<u8> {
    let mut rng = Rng::new(n.wrapping_mul(31).wrapping_add(field as u64).wrapping_add(version << 32) | 1);
    (0..FIELD_LEN).map(|_| b'a' + (rng.next_u64() % 26) as u8).collect()
}

/// YCSB's zipfian generator (Gray et al.), theta 0.99, over `[0, items)`.
pub struct Zipfian {
    items: u64,
    theta: f64,
    zeta_n: f64,
    alpha: f64,
    eta: f64,
    half_pow_theta: f64,
}

fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

impl Zipfian {
    /// A zipfian over `[0, items)`; computing its zeta takes time linear in `items`.
    pub fn new(items: u64) -> Zipfian {
        Self::with_zeta(items, zeta(items, 0.99))
    }

    /// A zipfian whose zeta(items) is already known.
    pub fn with_zeta(items: u64, zeta_n: f64) -> Zipfian {
        let theta = 0.99;
        let zeta2 = zeta(2, theta);
        Zipfian {
            items,
            theta,
            zeta_n,
            alpha: 1.0 / (1.0 - theta),
            eta: (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zeta_n),
            half_pow_theta: 1.0 + 0.5f64.powf(theta),
        }
    }

    pub fn next(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit();
        let uz = u * self.zeta_n;
        if uz < 1.0 {
            return 0;
        }
        if uz < self.half_pow_theta {
            return 1;
        }
        let v = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        v.min(self.items - 1)
    }
}

/// Scrambled zipfian: popular items spread over the key space, as YCSB's default. Like YCSB, it
/// draws from a zipfian over 10^10 items (whose zeta YCSB precomputes) and hashes the draw onto
/// the record count, so building it costs nothing.
pub struct ScrambledZipfian {
    zipf: Zipfian,
    items: u64,
}

impl ScrambledZipfian {
    pub fn new(items: u64) -> ScrambledZipfian {
        ScrambledZipfian { zipf: Zipfian::with_zeta(10_000_000_000, 26.469_028_201_783_02), items }
    }

    pub fn next(&self, rng: &mut Rng) -> u64 {
        fnv64(self.zipf.next(rng)) % self.items
    }
}

/// The YCSB core workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ycsb {
    A,
    B,
    C,
    D,
    E,
    F,
}

impl Ycsb {
    pub const ALL: [Ycsb; 6] = [Ycsb::A, Ycsb::B, Ycsb::C, Ycsb::D, Ycsb::E, Ycsb::F];

    pub fn name(self) -> &'static str {
        match self {
            Ycsb::A => "ycsb-a (50% read, 50% update, zipfian)",
            Ycsb::B => "ycsb-b (95% read, 5% update, zipfian)",
            Ycsb::C => "ycsb-c (100% read, zipfian)",
            Ycsb::D => "ycsb-d (95% read latest, 5% insert)",
            Ycsb::E => "ycsb-e (95% scan 1-100, 5% insert, zipfian)",
            Ycsb::F => "ycsb-f (50% read, 50% read-modify-write, zipfian)",
        }
    }
}

/// Loads `records` YCSB records.
pub fn ycsb_load(store: &dyn Store, records: u64) {
    for n in 0..records {
        store.insert(&ycsb_key(n), ycsb_fields(n, 0));
    }
    store.settle();
}

/// Issues YCSB operations against a store loaded with YCSB records. Build it once (the
/// "latest" generator's setup is linear in the record count), then call [`YcsbRunner::run`].
pub struct YcsbRunner {
    rng: Rng,
    /// Records in the store (workloads D and E insert more).
    pub count: u64,
    version: u64,
    zipf: ScrambledZipfian,
    latest: Zipfian,
}

impl YcsbRunner {
    pub fn new(records: u64, seed: u64) -> YcsbRunner {
        YcsbRunner {
            rng: Rng::new(seed),
            count: records,
            version: 0,
            zipf: ScrambledZipfian::new(records),
            latest: Zipfian::new(records),
        }
    }

    /// Runs `ops` operations of workload `w`.
    pub fn run(&mut self, store: &dyn Store, w: Ycsb, ops: u64) {
        for _ in 0..ops {
            self.version += 1;
            let roll = self.rng.below(100);
            match w {
                Ycsb::A | Ycsb::B | Ycsb::C => {
                    let update_pct = match w {
                        Ycsb::A => 50,
                        Ycsb::B => 5,
                        _ => 0,
                    };
                    let n = self.zipf.next(&mut self.rng) % self.count;
                    if roll < update_pct {
                        self.update(store, n);
                    } else {
                        store.read(&ycsb_key(n));
                    }
                }
                Ycsb::D => {
                    if roll < 5 {
                        self.insert(store);
                    } else {
                        // Latest: most requests go to the newest records.
                        let back = self.latest.next(&mut self.rng) % self.count;
                        store.read(&ycsb_key(self.count - 1 - back));
                    }
                }
                Ycsb::E => {
                    if roll < 5 {
                        self.insert(store);
                    } else {
                        let n = self.zipf.next(&mut self.rng) % self.count;
                        let len = 1 + self.rng.below(100) as usize;
                        store.scan(&ycsb_key(n), len);
                    }
                }
                Ycsb::F => {
                    let n = self.zipf.next(&mut self.rng) % self.count;
                    store.read(&ycsb_key(n));
                    if roll < 50 {
                        self.update(store, n);
                    }
                }
            }
        }
    }

    fn update(&mut self, store: &dyn Store, n: u64) {
        let field = self.rng.below(FIELDS as u64) as usize;
        store.update(&ycsb_key(n), field, &field_value(n, field, self.version));
    }

    fn insert(&mut self, store: &dyn Store) {
        store.insert(&ycsb_key(self.count), ycsb_fields(self.count, 0));
        self.count += 1;
    }
}

/// db_bench keys: 16 bytes, from a random number.
pub fn bench_key(n: u64) -> Vec<u8> {
    format!("{:016x}", fnv64(n)).into_bytes()
}

/// db_bench's fillrandom: `n` puts of 100-byte values under random keys.
pub fn fill_random(store: &dyn Store, n: u64) {
    let value = vec![b'v'; 100];
    for i in 0..n {
        store.put(&bench_key(i), &value);
    }
    store.settle();
}

/// db_bench's readrandom over keys written by [`fill_random`]; returns hits.
pub fn read_random(store: &dyn Store, n: u64, loaded: u64, seed: u64) -> u64 {
    let mut rng = Rng::new(seed);
    (0..n).filter(|_| store.get(&bench_key(rng.below(loaded)))).count() as u64
}

/// db_bench's seekrandom with 100-row scans; returns rows read.
pub fn seek_scan(store: &dyn Store, n: u64, loaded: u64, seed: u64) -> u64 {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| store.scan(&bench_key(rng.below(loaded)), 100) as u64).sum()
}

/// [`seek_scan`] with owned rows ([`Store::scan_owned`]).
pub fn seek_scan_owned(store: &dyn Store, n: u64, loaded: u64, seed: u64) -> u64 {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| store.scan_owned(&bench_key(rng.below(loaded)), 100) as u64).sum()
}

/// [`Store`] over a Cellar table: a YCSB record is one row with ten columns in family `f`,
/// so an update writes one cell.
pub mod cellar_store {
    use cellar_engine::{Get, Put, Scan, Table};

    pub const FIELD_NAMES: [&str; 10] =
        ["field0", "field1", "field2", "field3", "field4", "field5", "field6", "field7", "field8", "field9"];

    pub struct CellarStore {
        pub engine: cellar_engine::Engine,
        pub table: Table,
    }

    impl super::Store for CellarStore {
        /// One put of the record's ten cells, built with room for all of them and taking the
        /// values as they are.
        fn insert(&self, key: &[u8], fields: Vec<Vec<u8>>) {
            let mut p = Put::with_capacity(key.to_vec(), fields.len());
            for (name, v) in FIELD_NAMES.iter().zip(fields) {
                p = p.add("f", *name, v);
            }
            self.table.put(p).expect("insert");
        }

        /// Reads the row lent in place (`get_with`), as the RocksDB store reads a pinned value.
        fn read(&self, key: &[u8]) -> bool {
            let read = self.table.get_with(Get::new(key.to_vec()), |row| std::hint::black_box(row.len()));
            read.expect("read").is_some()
        }

        fn update(&self, key: &[u8], field: usize, value: &[u8]) {
            self.table.put(Put::new(key.to_vec()).add("f", FIELD_NAMES[field], value.to_vec())).expect("update");
        }

        /// Visits the rows in place (`scan_with`), as the key/value stores' iterators lend
        /// theirs: no engine copies a row out of its read buffer here.
        fn scan(&self, start: &[u8], n: usize) -> usize {
            self.table
                .scan_with(Scan::new().start(start.to_vec()).limit(n), |row| {
                    std::hint::black_box(row.get(0).map(|c| c.value));
                    std::ops::ControlFlow::Continue(())
                })
                .expect("scan")
        }

        /// Rows of the owned-row iterator (`Table::scan`).
        fn scan_owned(&self, start: &[u8], n: usize) -> usize {
            let rows = self.table.scan(Scan::new().start(start.to_vec()).limit(n)).expect("scan");
            rows.fold(0, |n, row| {
                std::hint::black_box(row.expect("scan row"));
                n + 1
            })
        }

        fn put(&self, key: &[u8], value: &[u8]) {
            self.table.put(Put::new(key.to_vec()).add("f", "v", value.to_vec())).expect("put");
        }

        fn get(&self, key: &[u8]) -> bool {
            let read = self
                .table
                .get_with(Get::new(key.to_vec()), |row| std::hint::black_box(row.get(0).map_or(0, |c| c.value.len())));
            read.expect("get").is_some()
        }

        fn settle(&self) {
            self.engine.flush(self.table.name()).expect("flush");
        }

        fn stats(&self) -> String {
            let c = self.engine.cache_stats();
            let regions = self.engine.regions(self.table.name()).unwrap_or_default();
            let files: usize = regions.iter().map(|r| r.files).sum();
            let hit = c.hits as f64 / (c.hits + c.misses).max(1) as f64;
            format!(
                "block cache {:.1} % hits ({} misses, {} MiB of blocks, {} MiB pinned by files); {} regions, {files} files",
                hit * 100.0,
                c.misses,
                c.used_bytes >> 20,
                c.pinned_bytes >> 20,
                regions.len()
            )
        }
    }
}
