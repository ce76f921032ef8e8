//! Pause and clock nemeses for aggregates on a shared store (the Bigtable emulator), in every
//! strategy.
//!
//! A writer is another process. It is frozen before each store call of one aggregate put or
//! delete in turn — before its intent, after it, between its row writes, before its commit —
//! while this process reads the aggregate (which rolls forward an intent it takes for
//! abandoned) and writes it again; then the writer is let go and finishes. Its clock runs 30 s
//! behind (its lease has passed the moment it starts) or 30 s ahead, and in one round per
//! strategy the clock is right and the pause outlasts the 5 s lease. After every round the
//! aggregate is one whole version that was written, and the one written last: a writer let go
//! after others rolled its intent forward changes nothing.

mod common;

use std::sync::Arc;
use std::time::Duration;

use cellar::orm::store::{BigtableOptions, BigtableStore};
use cellar::orm::Db;
use common::pausing::{Pausing, Writer};
use common::versions::with_strategy;

const TARGET: &str = "CELLAR_AGGREGATE_PAUSE_TARGET";
const STRATEGIES: [&str; 4] = ["normalized", "single_table", "denormalized", "blob"];
/// The root table of each strategy's order (`tests/common/orders.rs`).
const ROOT_TABLES: [&str; 4] = ["orders_n", "orders_s", "orders_d", "orders_b"];

/// The writer: connects through a [`Pausing`] store, skews its clock, then writes order
/// (1, 0) of strategy `CELLAR_AGGREGATE_PAUSE_STRATEGY`: `put:<v>` (version v) or `delete`;
/// or, for `loop:<seed>`, random puts and deletes of orders (1, 0..3) of every strategy
/// forever, printing `ack` after each.
#[test]
fn aggregate_pause_child() {
    let Ok(target) = std::env::var(TARGET) else { return };
    let env = |name: &str| std::env::var(name).unwrap();
    let (host, instance) = target.split_once('/').unwrap();
    let inner = BigtableStore::connect(BigtableOptions::new("cellar", instance).emulator(host)).unwrap();
    let pausing = Arc::new(Pausing::new(Arc::new(inner), env("CELLAR_AGGREGATE_PAUSE_AT").parse().unwrap()));
    cellar::orm::testing::skew_clock(env("CELLAR_AGGREGATE_PAUSE_SKEW").parse().unwrap());
    let db = Db::with_store(pausing.clone());
    let s: u64 = env("CELLAR_AGGREGATE_PAUSE_STRATEGY").parse().unwrap();
    let action = env("CELLAR_AGGREGATE_PAUSE_ACTION");
    if let Some(seed) = action.strip_prefix("loop:") {
        let mut seed: u64 = seed.parse().unwrap();
        for v in 1.. {
            random_write(&db, &mut seed, v);
            println!("ack");
        }
    }
    let result = with_strategy!(db, s, |orders, versions| {
        pausing.arm();
        match action.strip_prefix("put:") {
            Some(v) => orders.put(&versions::version(1, 0, v.parse().unwrap())),
            None => orders.delete((1, 0)),
        }
    });
    match result {
        Ok(()) => println!("done ok"),
        Err(e) => println!("done error {e}"),
    }
}

fn spawn(target: &str, s: u64, action: &str, pause_at: &str, skew_ms: i64) -> Writer {
    let env = [
        (TARGET, target.to_string()),
        ("CELLAR_AGGREGATE_PAUSE_STRATEGY", s.to_string()),
        ("CELLAR_AGGREGATE_PAUSE_ACTION", action.to_string()),
        ("CELLAR_AGGREGATE_PAUSE_AT", pause_at.to_string()),
        ("CELLAR_AGGREGATE_PAUSE_SKEW", skew_ms.to_string()),
    ];
    Writer::spawn("aggregate_pause_child", &env)
}

/// The stored order (1, 0) of strategy `s`: `Some(version)` if it is one whole version,
/// `None` if there is none; panics on a torn or unreadable order.
fn stored_version(db: &Db, s: u64, context: &str) -> Option<u64> {
    stored_version_of(db, s, 0, context)
}

/// As [`stored_version`], for order (1, `k`).
fn stored_version_of(db: &Db, s: u64, k: u64, context: &str) -> Option<u64> {
    with_strategy!(db, s, |orders, versions| {
        let order = orders.get((1, k)).unwrap_or_else(|e| panic!("{context}: order {k} reads: {e}"));
        order.map(|o| versions::version_of(&o).unwrap_or_else(|| panic!("{context}: a torn order {o:?}")))
    })
}

fn xorshift(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Puts version `v` of a random order (1, 0..3) of a random strategy, or deletes one.
fn random_write(db: &Db, seed: &mut u64, v: u64) {
    let r = xorshift(seed);
    let (s, k) = (r % 4, (r >> 8) % 3);
    with_strategy!(db, s, |orders, versions| {
        if (r >> 16).is_multiple_of(6) {
            orders.delete((1, k)).unwrap();
        } else {
            orders.put(&versions::version(1, k, v)).unwrap();
        }
    });
}

fn put_version(db: &Db, s: u64, v: u64) {
    with_strategy!(db, s, |orders, versions| { orders.put(&versions::version(1, 0, v)).unwrap() });
}

/// What this process does while the writer is frozen.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Meanwhile {
    /// Reads the order (rolling forward an intent it takes for abandoned).
    Read,
    /// Reads it, then writes version 3.
    Put,
}

/// One round on strategy `s`: the writer, putting version 2 (or deleting) over version 1,
/// frozen before the call `pause_at`; `false` if its write makes no such call.
fn round(host: &str, s: u64, action: &str, pause_at: &str, skew_ms: i64, wait: Duration, meanwhile: Meanwhile) -> bool {
    let target = format!("{host}/{}", common::backend::instance_name());
    let (h, instance) = target.split_once('/').unwrap();
    let db =
        Db::with_store(Arc::new(BigtableStore::connect(BigtableOptions::new("cellar", instance).emulator(h)).unwrap()));
    put_version(&db, s, 1);
    let context = format!(
        "{}: {action}, paused before call {pause_at}, clock {skew_ms:+} ms, {meanwhile:?}",
        STRATEGIES[s as usize]
    );
    let mut writer = spawn(&target, s, action, pause_at, skew_ms);
    let line = writer.next_line(&["paused", "done"]);
    if line.starts_with("done") {
        assert_eq!(line, "done ok", "{context}");
        writer.wait();
        return false;
    }
    let context = format!("{context} ({line})");
    // Had the writer recorded its intent (its first check-and-mutate of the root table)?
    let start = format!("check_and_mutate:{}", ROOT_TABLES[s as usize]);
    let started = line.split(' ').nth(3).unwrap_or("").split(',').any(|c| c == start);
    writer.freeze();
    std::thread::sleep(wait);
    let ahead = skew_ms > 0 && started;
    if !ahead {
        // A reader takes over an intent whose lease has passed and rolls it forward.
        let seen = stored_version(&db, s, &context);
        assert!(matches!(seen, Some(1) | Some(2) | None), "{context}: read {seen:?}");
        if meanwhile == Meanwhile::Put {
            put_version(&db, s, 3);
            assert_eq!(stored_version(&db, s, &context), Some(3), "{context}");
        }
    }
    writer.thaw(true);
    let done = writer.next_line(&["done"]);
    assert_eq!(done, "done ok", "{context}: the writer's own result");
    assert!(writer.wait(), "{context}");
    // The write that came last stands: the frozen one, unless its intent was recorded before
    // the pause (others then finished it) and this process wrote after it.
    let last = if started && meanwhile == Meanwhile::Put && !ahead {
        Some(3)
    } else {
        action.strip_prefix("put:").map(|v| v.parse().unwrap())
    };
    assert_eq!(stored_version(&db, s, &context), last, "{context}: the last write stands");
    // And it stays writable.
    put_version(&db, s, 4);
    assert_eq!(stored_version(&db, s, &context), Some(4), "{context}");
    true
}

fn every_step(host: &str, skew_ms: i64, meanwhile: &[Meanwhile]) -> u64 {
    let mut rounds = 0;
    for s in 0..4 {
        for action in ["put:2", "delete"] {
            for pause_at in 1.. {
                let mut paused = false;
                for &m in meanwhile {
                    paused = round(host, s, action, &pause_at.to_string(), skew_ms, Duration::ZERO, m);
                    rounds += u64::from(paused);
                }
                if !paused {
                    break;
                }
            }
        }
    }
    rounds
}

/// The writer's clock 30 s behind: its lease has passed before it starts, so a reader rolls
/// its intent forward while it is frozen, at every step, in every strategy.
#[test]
fn a_writer_paused_past_its_lease_at_any_step_tears_no_aggregate() {
    let Some(emulator) = common::backend::emulator() else { return };
    let rounds = every_step(&emulator.host, -30_000, &[Meanwhile::Read, Meanwhile::Put]);
    eprintln!("aggregate pause nemesis, clock 30 s behind: {rounds} rounds");
    assert!(rounds >= 40, "every strategy pauses at each of its calls ({rounds} rounds)");
}

/// The writer's clock 30 s ahead: nobody takes its intent over while it is frozen; others
/// that came first are waited for or written over as usual.
#[test]
fn a_writer_whose_clock_runs_ahead_tears_no_aggregate() {
    let Some(emulator) = common::backend::emulator() else { return };
    let rounds = every_step(&emulator.host, 30_000, &[Meanwhile::Put]);
    eprintln!("aggregate pause nemesis, clock 30 s ahead: {rounds} rounds");
    assert!(rounds >= 20, "{rounds} rounds");
}

/// A right clock and a pause longer than the 5 s lease, after the intent is recorded and
/// before the rows are written: the case first seen.
#[test]
fn a_writer_frozen_longer_than_the_lease_after_its_intent_tears_no_aggregate() {
    let Some(emulator) = common::backend::emulator() else { return };
    let wait = Duration::from_millis(5_500);
    for s in 0..3 {
        // The first write of a non-root table, once the intent is in the root row.
        let table = if s == 0 { "orders_n.ship_to" } else { ROOT_TABLES[s as usize] };
        let at = format!("check_and_mutate_many:{table}");
        assert!(round(&emulator.host, s, "put:2", &at, 0, wait, Meanwhile::Put), "{at}");
    }
}

/// Random writes of every strategy by a writer whose clock runs behind, frozen at random
/// moments while this process reads (rolling its intents forward) and writes the same
/// aggregates; killed at the end. `CELLAR_AGGREGATE_PAUSE_ROUNDS` sets the rounds (default 2,
/// four pauses each).
#[test]
fn random_pauses_of_a_writer_tear_no_aggregate() {
    let Some(emulator) = common::backend::emulator() else { return };
    let rounds: u64 = std::env::var("CELLAR_AGGREGATE_PAUSE_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let mut seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    eprintln!("aggregate pause nemesis seed {seed}");
    let mut pauses = 0;
    let check = |db: &Db, context: &str| {
        for s in 0..4 {
            for k in 0..3 {
                stored_version_of(db, s, k, context);
            }
        }
    };
    for round in 0..rounds {
        let target = format!("{}/{}", emulator.host, common::backend::instance_name());
        let (h, instance) = target.split_once('/').unwrap();
        let db = Db::with_store(Arc::new(
            BigtableStore::connect(BigtableOptions::new("cellar", instance).emulator(h)).unwrap(),
        ));
        let mut writer = spawn(&target, 0, &format!("loop:{}", xorshift(&mut seed)), "0", -30_000);
        // This process's versions never meet the writer's.
        let mut own = 1_000_000 * (round + 1);
        for pause in 0..4 {
            let r = xorshift(&mut seed);
            for _ in 0..1 + r % 30 {
                writer.next_line(&["ack"]);
            }
            std::thread::sleep(Duration::from_micros((r >> 32) % 3_000));
            writer.freeze();
            pauses += 1;
            let context = format!("round {round}, pause {pause}");
            check(&db, &context);
            for _ in 0..4 {
                own += 1;
                random_write(&db, &mut seed, own);
            }
            check(&db, &context);
            writer.thaw(false);
        }
        writer.kill();
        check(&db, &format!("round {round}, after the kill"));
    }
    eprintln!("aggregate pause nemesis: {rounds} rounds, {pauses} pauses, writer clock 30 s behind");
}
