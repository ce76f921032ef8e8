//! Crash test: a child process writes with SyncWal (flushing, splitting regions and compacting
//! along the way) and is killed with SIGKILL at random moments. After every restart, each acknowledged write is
//! readable with its value, and no row appears that was never written.
//!
//! `CELLAR_CRASH_ROUNDS` sets the number of kills (default 12).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod common;

use cellar_engine::*;
use common::Rng;

const CHILD_ENV: &str = "CELLAR_CRASH_CHILD_DIR";

fn options() -> EngineOptions {
    EngineOptions::default().memstore_flush_bytes(32 * 1024).wal_segment_bytes(64 * 1024)
}

fn key(round: u32, i: u32) -> String {
    format!("r{round:03}-{i:06}")
}

fn value(round: u32, i: u32) -> String {
    format!("value-{round}-{i}-{}", "x".repeat((i % 7) as usize * 20))
}

/// The child: writes forever, printing `ack N` after each acknowledged put.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let round: u32 = std::env::var("CELLAR_CRASH_ROUND").unwrap().parse().unwrap();
    let engine = Engine::open(&dir, options()).unwrap();
    if !engine.table_exists("t") {
        engine
            .create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f").compression(Compression::Lz4)))
            .unwrap();
    }
    let t = engine.table("t").unwrap();
    for i in 0.. {
        t.put(Put::new(key(round, i)).add("f", "v", value(round, i)).add("f", "n", i.to_be_bytes().to_vec())).unwrap();
        println!("ack {i}");
        if i % 150 == 149 {
            engine.flush("t").unwrap();
        }
        if i % 400 == 399 {
            // Split the region taking the writes, at the latest row.
            engine.split("t", Some(key(round, i).as_bytes())).unwrap();
        }
        if i % 600 == 599 {
            engine.major_compact("t").unwrap();
        }
    }
}

#[test]
fn killed_writer_loses_no_acknowledged_write() {
    let rounds: u32 = std::env::var("CELLAR_CRASH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(12);
    let dir = tempfile::tempdir().unwrap();
    let seed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    eprintln!("crash test seed {seed}");
    let mut rng = Rng(seed);
    let mut acked: Vec<u32> = Vec::new();
    for round in 0..rounds {
        let kill_after = 1 + rng.below(1500) as u32;
        let delay = if rng.below(2) == 0 { Duration::from_micros(rng.below(3000)) } else { Duration::ZERO };
        let env = [(CHILD_ENV, dir.path().display().to_string()), ("CELLAR_CRASH_ROUND", round.to_string())];
        acked.push(common::kill_child("crash_child", &env, kill_after, delay, false).acknowledged);

        let engine = Engine::open(dir.path(), options()).unwrap();
        let t = engine.table("t").unwrap();
        for (r, &n) in acked.iter().enumerate() {
            let r = r as u32;
            for i in 0..n {
                let row = t.get(Get::new(key(r, i))).unwrap();
                assert_eq!(
                    row.value(b"f", b"v").map(|v| v.to_vec()),
                    Some(value(r, i).into_bytes()),
                    "round {r} row {i} lost (acked {n})"
                );
                assert_eq!(row.value(b"f", b"n").map(|v| v.to_vec()), Some(i.to_be_bytes().to_vec()));
            }
        }
        // Nothing beyond the in-flight write of each round may appear.
        let mut per_round = vec![0u32; acked.len()];
        for row in t.scan(Scan::new()).unwrap() {
            let row = row.unwrap();
            let k = String::from_utf8(row.row.to_vec()).unwrap();
            let (r, i) = k[1..].split_once('-').unwrap();
            let (r, i): (usize, u32) = (r.parse().unwrap(), i.parse().unwrap());
            assert!(i <= acked[r], "row {k} appeared but only {} writes were acknowledged", acked[r]);
            assert_eq!(
                row.value(b"f", b"v").unwrap().as_ref(),
                value(r as u32, i).as_bytes(),
                "row {k} has a wrong value"
            );
            per_round[r] += 1;
        }
        for (r, &n) in per_round.iter().enumerate() {
            assert!(n == acked[r] || n == acked[r] + 1, "round {r}: {n} rows for {} acks", acked[r]);
        }
    }
}
