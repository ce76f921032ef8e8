//! Crash test: a child process rewrites aggregates of every strategy — flushing and splitting
//! the tables along the way — and is killed with SIGKILL at random moments. After every kill,
//! each aggregate is exactly one version that was written: the last acknowledged one, or the
//! one in flight when the writer died. Never a mix, never half of one, never an older one.
//!
//! A normalized write killed mid-way leaves its intent in the root row; the next reader sees
//! that the intent's process is gone and finishes the write, without waiting for a lease.
//!
//! The same on the Bigtable emulator, where the writer is another process sharing the store
//! and a reader meeting its intent waits out the intent's lease first.
//!
//! `CELLAR_AGGREGATE_CRASH_ROUNDS` sets the number of kills (default 6 embedded, 3 on Bigtable).

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::versions::with_strategy;

/// Where the child writes: `dir:<path>` (the embedded engine) or `bigtable:<host:port>/<instance>`.
const CHILD_ENV: &str = "CELLAR_AGGREGATE_CRASH_TARGET";
/// Aggregates per strategy.
const ORDERS: u64 = 4;
const STRATEGIES: [&str; 4] = ["normalized", "single_table", "denormalized", "blob"];

/// The child: rewrites aggregates forever, printing `try S K V` before and `ack S K V` after
/// each put of version V of aggregate K of strategy S.
#[test]
fn aggregate_crash_child() {
    let Ok(target) = std::env::var(CHILD_ENV) else {
        return;
    };
    let first: u64 = std::env::var("CELLAR_AGGREGATE_CRASH_FIRST").unwrap().parse().unwrap();
    let (engine, db) = common::backend::open_target(&target);
    for i in 0u64.. {
        let (s, k, v) = (i % 4, (i / 4) % ORDERS, first + i);
        with_strategy!(db, s, |orders, versions| {
            println!("try {s} {k} {v}");
            orders.put(&versions::version(1, k, v)).unwrap();
            println!("ack {s} {k} {v}");
        });
        let Some(engine) = &engine else { continue };
        for table in engine.list_tables() {
            if i % 97 == 96 {
                engine.flush(&table).unwrap();
            }
            if i % 331 == 330 {
                engine.split(&table, None).unwrap();
            }
        }
    }
}

/// What the parent knows of one aggregate: its last acknowledged version and the version in
/// flight when the child died.
#[derive(Default, Clone, Copy)]
struct Known {
    acked: Option<u64>,
    in_flight: Option<u64>,
}

#[test]
fn killed_writer_leaves_every_aggregate_one_version_written() {
    let rounds: u64 = std::env::var("CELLAR_AGGREGATE_CRASH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(6);
    let dir = tempfile::tempdir().unwrap();
    kill_rounds(&format!("dir:{}", dir.path().to_str().unwrap()), rounds);
}

/// On Bigtable the writer is another process sharing the store: a reader meeting its intent
/// waits out the intent's lease, then finishes or rolls back the write.
#[test]
fn killed_writer_leaves_every_aggregate_one_version_written_on_bigtable() {
    let Some(emulator) = common::backend::emulator() else { return };
    let rounds: u64 = std::env::var("CELLAR_AGGREGATE_CRASH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    kill_rounds(&format!("bigtable:{}/{}", emulator.host, common::backend::instance_name()), rounds);
}

fn kill_rounds(target: &str, rounds: u64) {
    let mut seed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    eprintln!("aggregate crash test seed {seed}");
    let mut known: HashMap<(u64, u64), Known> = HashMap::new();
    let mut next_version = 1u64;
    // Kills that caught a write in flight, and how many of those writes were found done.
    let (mut in_flight_kills, mut completed) = (0, 0);
    for round in 0..rounds {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "aggregate_crash_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, target)
            .env("CELLAR_AGGREGATE_CRASH_FIRST", next_version.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // xorshift: kill 0-3 ms after the 1st to 400th acknowledged write, mostly in the middle
        // of the next one.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let (kill_after, delay) = (1 + seed % 400, Duration::from_micros((seed >> 32) % 3000));
        // Read until the kill point, kill, then drain what the child printed before it died:
        // every write it started is known.
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut acks = 0;
        let mut killed = false;
        for line in lines {
            let line = line.unwrap();
            let mut words = line.split(' ');
            let (Some(kind), Some(s), Some(k), Some(v)) = (words.next(), words.next(), words.next(), words.next())
            else {
                continue;
            };
            let (Ok(s), Ok(k), Ok(v)) = (s.parse::<u64>(), k.parse::<u64>(), v.parse::<u64>()) else { continue };
            let entry = known.entry((s, k)).or_default();
            next_version = next_version.max(v + 1);
            match kind {
                "try" => entry.in_flight = Some(v),
                "ack" => {
                    *entry = Known { acked: Some(v), in_flight: None };
                    acks += 1;
                    if acks == kill_after && !killed {
                        std::thread::sleep(delay);
                        child.kill().unwrap();
                        killed = true;
                    }
                }
                _ => {}
            }
        }
        let status = child.wait().unwrap();
        assert!(killed, "round {round}: the child stopped before it was killed: {status}");

        let (_engine, db) = common::backend::open_target(target);
        for s in 0..4 {
            for k in 0..ORDERS {
                let entry = known.get(&(s, k)).copied().unwrap_or_default();
                with_strategy!(db, s, |orders, versions| {
                    let stored = orders.get((1, k)).unwrap();
                    let found = stored.as_ref().map(|o| {
                        versions::version_of(o).unwrap_or_else(|| {
                            panic!("round {round}: {} order {k} is no version written: {o:?}", STRATEGIES[s as usize])
                        })
                    });
                    let allowed = [entry.acked, entry.in_flight];
                    assert!(
                        allowed.contains(&found),
                        "round {round}: {} order {k} is version {found:?}; acknowledged {:?}, in flight {:?}",
                        STRATEGIES[s as usize],
                        entry.acked,
                        entry.in_flight
                    );
                    if entry.in_flight.is_some() {
                        in_flight_kills += 1;
                        completed += usize::from(found == entry.in_flight);
                    }
                    // Whatever the crash left is the version from now on.
                    known.insert((s, k), Known { acked: found, in_flight: None });
                    // A scan agrees with the get.
                    let scanned: Vec<_> = orders.scan().to_vec().unwrap();
                    assert!(scanned.iter().all(|o| versions::version_of(o).is_some()));
                });
            }
        }
    }
    eprintln!("{rounds} kills: {in_flight_kills} caught a write in flight, {completed} of those were found done");
    assert!(known.values().any(|k| k.acked.is_some()), "the children acknowledged writes");
}
