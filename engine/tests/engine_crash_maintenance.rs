//! Crash test for maintenance racing writes: a child process writes to several tables at
//! once — batches, check-and-mutates, multi-row mutations — while it flushes every table,
//! splits the regions and lets background compactions rewrite the daughters' shared files,
//! and is killed with SIGKILL at random moments. After every kill the directory opens (the
//! catalog names only files that exist), every acknowledged write is readable with its value,
//! and no row appears that was never written.
//!
//! Every few rounds the child moves to a new generation of tables and drops the old ones, so
//! the data and the number of regions stay small however many rounds run.
//!
//! `CELLAR_MAINTENANCE_CRASH_ROUNDS` sets the number of kills (default 8).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod common;

use cellar_engine::*;
use common::Rng;

const CHILD_ENV: &str = "CELLAR_MAINTENANCE_CRASH_DIR";
const TABLES: u32 = 4;
/// Rounds writing to the same generation of tables.
const GENERATION: u32 = 10;
/// The child splits a table's regions only while it has fewer than this.
const MAX_REGIONS: usize = 24;

fn options() -> EngineOptions {
    EngineOptions::default().memstore_flush_bytes(32 * 1024).wal_segment_bytes(64 * 1024).compaction_threshold(3)
}

/// The table that write `i` of `round` goes to.
fn table_name(round: u32, i: u32) -> String {
    format!("g{}-t{}", round / GENERATION, i % TABLES)
}

/// Rows are spread over the key space, so every region takes writes and every split leaves
/// two daughters compacting their shared files at the same time.
fn key(round: u32, i: u32) -> String {
    let spread = (u64::from(i) * 0x9e37_79b9 + u64::from(round) * 7919) % 997;
    format!("{spread:03}-{round:03}-{i:06}")
}

/// The rows write `i` creates, with their values: its own and a second one, `key/2`.
fn rows(round: u32, i: u32) -> [(String, String); 2] {
    let k = key(round, i);
    let value = |part: &str| format!("{part}-{round}-{i}-{}", "x".repeat((i % 5) as usize * 60));
    [(k.clone(), value("a")), (format!("{k}/2"), value("b"))]
}

/// Write `i`: two rows, in one of three ways.
fn write(engine: &Engine, round: u32, i: u32) {
    let t = engine.table(&table_name(round, i)).unwrap();
    let [(k1, v1), (k2, v2)] = rows(round, i);
    let put =
        |k: &str, v: &str| Put::new(k.to_string()).add("a", "v", v.to_string()).add("b", "n", i.to_be_bytes().to_vec());
    match i % 3 {
        0 => {
            for r in t.batch(vec![Mutation::Put(put(&k1, &v1)), Mutation::Put(put(&k2, &v2))]).unwrap() {
                r.unwrap();
            }
        }
        1 => {
            let first = CheckAndMutate::if_absent("a", "v", RowMutations::new(k1.clone()).with(put(&k1, &v1)));
            assert!(t.check_and_mutate(first).unwrap(), "row {k1} existed before its write");
            t.put(put(&k2, &v2)).unwrap();
        }
        _ => {
            let m = MultiRowMutation::new()
                .row(RowMutations::new(k1.clone()).with(put(&k1, &v1)))
                .row(RowMutations::new(k2.clone()).with(put(&k2, &v2)))
                .condition(RowCondition::if_absent(k1.clone(), "a", "v"));
            match t.mutate_rows(m) {
                Ok(applied) => assert!(applied, "row {k1} existed before its write"),
                // A split fell between the two rows: write them one by one.
                Err(Error::RowsSpanRegions { .. }) => {
                    t.put(put(&k1, &v1)).unwrap();
                    t.put(put(&k2, &v2)).unwrap();
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
}

/// The child: drops the tables of past generations, then writes forever, printing `ack N`
/// after each acknowledged write.
#[test]
fn maintenance_crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let round: u32 = std::env::var("CELLAR_MAINTENANCE_CRASH_ROUND").unwrap().parse().unwrap();
    let engine = Engine::open(&dir, options()).unwrap();
    let tables: Vec<String> = (0..TABLES).map(|n| table_name(round, n)).collect();
    for old in engine.list_tables().into_iter().filter(|t| !tables.contains(t)) {
        if engine.is_enabled(&old).unwrap() {
            engine.disable_table(&old).unwrap();
        }
        engine.drop_table(&old).unwrap();
    }
    for name in &tables {
        if !engine.table_exists(name) {
            let desc = TableDescriptor::new(name).family(FamilyDescriptor::new("a")).family(FamilyDescriptor::new("b"));
            engine.create_table(desc).unwrap();
        }
    }
    for i in 0.. {
        write(&engine, round, i);
        println!("ack {i}");
        if i % 97 == 96 {
            for t in &tables {
                engine.flush(t).unwrap();
            }
        }
        if i % 331 == 330 {
            for t in tables.iter().filter(|t| engine.regions(t).unwrap().len() < MAX_REGIONS) {
                engine.split(t, None).unwrap();
            }
        }
    }
}

#[test]
fn killed_maintenance_leaves_a_consistent_directory() {
    let rounds: u32 = std::env::var("CELLAR_MAINTENANCE_CRASH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(8);
    let dir = tempfile::tempdir().unwrap();
    let seed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    eprintln!("maintenance crash test seed {seed}");
    let mut rng = Rng(seed);
    let mut acked: Vec<u32> = Vec::new();
    for round in 0..rounds {
        // Half the kills come in the child's first 100 ms, while it compacts the daughters of
        // past splits (an open requests that), the others anywhere in its first few splits.
        let early = rng.below(2) == 0;
        let kill_after = if early { 1 } else { 1 + rng.below(700) as u32 };
        let delay = Duration::from_micros(rng.below(if early { 100_000 } else { 4000 }));
        let env =
            [(CHILD_ENV, dir.path().display().to_string()), ("CELLAR_MAINTENANCE_CRASH_ROUND", round.to_string())];
        let killed = common::kill_child("maintenance_crash_child", &env, kill_after, delay, true);
        // The child writes forever: if it stopped, it failed (its stderr says why).
        assert!(killed.was_running, "round {round}: the child stopped before it was killed");
        acked.push(killed.acknowledged);

        // Every other round, this side compacts nothing, and leaves it all to the next child.
        let auto_compact = round % 2 == 0;
        let engine = Engine::open(dir.path(), options().auto_compact(auto_compact))
            .unwrap_or_else(|e| panic!("round {round}: the directory does not open after the kill: {e}"));
        // The rounds of this generation, with what each acknowledged.
        let first = round / GENERATION * GENERATION;
        let generation = || acked.iter().enumerate().skip(first as usize).map(|(r, &n)| (r as u32, n));
        let mut expected = [0u32; TABLES as usize];
        for (r, n) in generation() {
            for i in 0..n {
                let t = engine.table(&table_name(r, i)).unwrap();
                for (k, v) in rows(r, i) {
                    let row = t.get(Get::new(k.clone())).unwrap();
                    assert_eq!(
                        row.value(b"a", b"v").map(|v| v.to_vec()),
                        Some(v.into_bytes()),
                        "round {r} write {i}: row {k} lost ({n} acknowledged)"
                    );
                    assert_eq!(row.value(b"b", b"n").map(|v| v.to_vec()), Some(i.to_be_bytes().to_vec()));
                }
                expected[(i % TABLES) as usize] += 2;
            }
        }
        // Nothing beyond each round's write in flight may appear.
        for (n, &expected) in expected.iter().enumerate() {
            let t = engine.table(&table_name(round, n as u32)).unwrap();
            let mut found = 0;
            for row in t.scan(Scan::new()).unwrap() {
                let row = row.unwrap();
                let k = String::from_utf8(row.row.to_vec()).unwrap();
                let mut parts = k.split(['-', '/']);
                let (r, i): (u32, u32) =
                    (parts.nth(1).unwrap().parse().unwrap(), parts.next().unwrap().parse().unwrap());
                let n = acked[r as usize];
                assert!(r >= first && i <= n, "row {k} appeared but round {r} acknowledged {n} writes");
                assert_eq!(row.value(b"b", b"n").unwrap().as_ref(), i.to_be_bytes(), "row {k} has a wrong value");
                found += 1;
            }
            let in_flight = 2 * (round - first + 1);
            assert!(
                (expected..=expected + in_flight).contains(&found),
                "table {n}: {found} rows for {expected} acknowledged"
            );
        }
        // Closing flushes, and finishes the compactions the open requested.
        drop(engine);
    }
    eprintln!("{rounds} kills, {} writes acknowledged", acked.iter().map(|&n| u64::from(n)).sum::<u64>());
}
