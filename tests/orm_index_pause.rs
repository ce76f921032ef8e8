//! Pause and clock nemeses for secondary indexes on a shared store (the Bigtable emulator).
//!
//! A writer is another process. It is frozen (SIGSTOP) before each store call of one indexed
//! put or delete in turn — after its marks, before its data write, before its settle — while
//! this process reads the indexes (which settle what they take for abandoned), repairs them
//! and writes the same row; then it is let go (SIGCONT) and finishes. The writer's clock runs
//! 30 s behind (its lease has passed the moment it starts: every read takes its marks over) or
//! 30 s ahead (nobody takes over), and in two rounds the clock is right and the pause outlasts
//! the lease. After every round every index query answers what the data implies,
//! verification finds no stale, outdated or missing entry, and the row holds the write that
//! came last: no write is lost.
//!
//! A random nemesis runs a writer of random puts and deletes with its clock behind, freezes
//! it at random moments while this process reads, repairs and writes the same rows, and kills
//! it at the end. `CELLAR_INDEX_PAUSE_ROUNDS` sets its rounds (default 2, four pauses each).

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cellar::orm::store::{BigtableOptions, BigtableStore};
use cellar::orm::{Db, Repository};
use common::pausing::{Pausing, Writer};
use common::people::{
    assert_indexes_clean, check_index_queries, person, repair_indexes, verify_only_leftovers, Person,
};

const TARGET: &str = "CELLAR_INDEX_PAUSE_TARGET";

/// The writer: connects through a [`Pausing`] store, skews its clock, then runs
/// `CELLAR_INDEX_PAUSE_ACTION`: `put` (person 1 with new values), `delete` (person 1), or
/// `loop:<seed>` (random writes forever, `ack` after each).
#[test]
fn index_pause_child() {
    let Ok(target) = std::env::var(TARGET) else { return };
    let env = |name: &str| std::env::var(name).unwrap();
    let (host, instance) = target.split_once('/').unwrap();
    let inner = BigtableStore::connect(BigtableOptions::new("cellar", instance).emulator(host)).unwrap();
    let pausing = Arc::new(Pausing::new(Arc::new(inner), env("CELLAR_INDEX_PAUSE_AT").parse().unwrap()));
    cellar::orm::testing::skew_clock(env("CELLAR_INDEX_PAUSE_SKEW").parse().unwrap());
    let db = Db::with_store(pausing.clone());
    let people = db.repo::<Person>().unwrap();
    pausing.arm();
    let action = env("CELLAR_INDEX_PAUSE_ACTION");
    let result = match action.as_str() {
        "put" => people.put(&writer_value()),
        "delete" => people.delete(1u32),
        _ => {
            let mut seed: u64 = action.strip_prefix("loop:").unwrap().parse().unwrap();
            loop {
                random_write(&people, &mut seed);
                println!("ack");
            }
        }
    };
    match result {
        Ok(()) => println!("done ok"),
        Err(e) => println!("done error {e}"),
    }
}

fn xorshift(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

fn random_write(people: &Repository<Person>, seed: &mut u64) {
    let r = xorshift(seed);
    let id = (r % 6) as u32;
    let tag = (!(r >> 32).is_multiple_of(3)).then_some(((r >> 40) % 2) as u8);
    let result = if (r >> 48).is_multiple_of(5) {
        people.delete(id)
    } else {
        people.put(&person(id, ((r >> 8) % 10) as u8, ((r >> 16) % 3) as u8, 20 + ((r >> 24) % 4) as u8, tag))
    };
    match result {
        Ok(()) | Err(cellar::orm::Error::UniqueViolation { .. }) => {}
        Err(e) => panic!("{e}"),
    }
}

/// Person 1 as first stored, as the paused writer writes it, and as this process writes it
/// meanwhile: every indexed value differs between the three.
fn initial() -> Person {
    person(1, 1, 0, 20, Some(0))
}
fn writer_value() -> Person {
    person(1, 2, 1, 21, Some(1))
}
fn other_value() -> Person {
    person(1, 3, 2, 22, None)
}

fn spawn(target: &str, action: &str, pause_at: &str, skew_ms: i64) -> Writer {
    let env = [
        (TARGET, target.to_string()),
        ("CELLAR_INDEX_PAUSE_ACTION", action.to_string()),
        ("CELLAR_INDEX_PAUSE_AT", pause_at.to_string()),
        ("CELLAR_INDEX_PAUSE_SKEW", skew_ms.to_string()),
    ];
    Writer::spawn("index_pause_child", &env)
}

fn fresh_people(host: &str) -> (String, Repository<Person>) {
    let target = format!("{host}/{}", common::backend::instance_name());
    let (host, instance) = target.split_once('/').unwrap();
    let store = BigtableStore::connect(BigtableOptions::new("cellar", instance).emulator(host)).unwrap();
    let people = Db::with_store(Arc::new(store)).repo::<Person>().unwrap();
    (target, people)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Meanwhile {
    /// Read, verify and repair only.
    Read,
    /// Also put person 1 with other values.
    Put,
}

/// One round: the writer frozen before the call `pause_at` (a number, or `call:table`);
/// `false` if its write makes no such call (it finished without pausing).
fn round(host: &str, action: &str, pause_at: &str, skew_ms: i64, wait: Duration, meanwhile: Meanwhile) -> bool {
    let (target, people) = fresh_people(host);
    for id in 0..4 {
        people.put(&person(id, 10 + id as u8, 0, 20, Some(0))).unwrap();
    }
    people.put(&initial()).unwrap();
    let context = format!("{action}, paused before call {pause_at}, clock {skew_ms:+} ms, {meanwhile:?}");
    let mut writer = spawn(&target, action, pause_at, skew_ms);
    let line = writer.next_line(&["paused", "done"]);
    if line.starts_with("done") {
        writer.wait();
        return false;
    }
    // `paused <n> <call> <earlier calls>`: had the writer's data write gone through?
    let committed = line.split(' ').nth(3).unwrap_or("").split(',').any(|c| c == "check_and_mutate:people");
    let context = format!("{context} ({line})");
    // Frozen whole, background threads too, not only blocked on its stdin.
    writer.freeze();
    std::thread::sleep(wait);
    // Readers settle what they take for abandoned; repair takes over the rest.
    check_index_queries(&people, &context);
    verify_only_leftovers(&people, &context);
    repair_indexes(&people);
    check_index_queries(&people, &context);
    if meanwhile == Meanwhile::Put {
        people.put(&other_value()).unwrap();
        check_index_queries(&people, &context);
    }
    writer.thaw(true);
    let done = writer.next_line(&["done"]);
    assert_eq!(done, "done ok", "{context}: the writer's own result");
    assert!(writer.wait(), "{context}");

    check_index_queries(&people, &context);
    verify_only_leftovers(&people, &context);
    // The write that came last stands: the paused one, unless its data write went through
    // before the pause and this process wrote after it.
    let last = if committed && meanwhile == Meanwhile::Put {
        Some(other_value())
    } else if action == "put" {
        Some(writer_value())
    } else {
        None
    };
    let stored = people.get(1u32).unwrap().map(|p| Person { version: 0, ..p });
    assert_eq!(stored, last, "{context}: the last write stands");
    if skew_ms < 0 || wait > Duration::ZERO {
        // Whatever the writer left is another process's, past its lease: repair settles it.
        repair_indexes(&people);
        assert_indexes_clean(&people, &context);
    }
    true
}

fn steps(host: &str, action: &str, skew_ms: i64, meanwhile: &[Meanwhile]) -> u64 {
    let mut rounds = 0;
    for pause_at in 1.. {
        let mut paused = false;
        for &m in meanwhile {
            paused = round(host, action, &pause_at.to_string(), skew_ms, Duration::ZERO, m);
            rounds += u64::from(paused);
        }
        if !paused {
            break;
        }
    }
    rounds
}

/// The writer's clock 30 s behind: its lease has passed before it starts, so every read
/// settles its marks while it is frozen — the case of a pause longer than the lease, at every
/// step, without waiting for the lease.
#[test]
fn a_writer_paused_past_its_lease_at_any_step_changes_no_answer() {
    let Some(emulator) = common::backend::emulator() else { return };
    let mut rounds = 0;
    for action in ["put", "delete"] {
        rounds += steps(&emulator.host, action, -30_000, &[Meanwhile::Read, Meanwhile::Put]);
    }
    eprintln!("index pause nemesis, clock 30 s behind: {rounds} rounds");
    assert!(rounds >= 16, "a put and a delete pause at every one of their store calls ({rounds} rounds)");
}

/// The writer's clock 30 s ahead: nobody takes its marks over; another writer of the same row
/// goes first, and the paused one starts over.
#[test]
fn a_writer_whose_clock_runs_ahead_changes_no_answer() {
    let Some(emulator) = common::backend::emulator() else { return };
    let mut rounds = 0;
    for action in ["put", "delete"] {
        rounds += steps(&emulator.host, action, 30_000, &[Meanwhile::Put]);
    }
    eprintln!("index pause nemesis, clock 30 s ahead: {rounds} rounds");
    assert!(rounds >= 8, "{rounds} rounds");
}

/// The case first seen: a writer frozen after writing its marks and before its data write, on
/// a right clock, for longer than the 5 s lease.
#[test]
fn a_writer_frozen_longer_than_the_lease_before_its_data_write_loses_nothing() {
    let Some(emulator) = common::backend::emulator() else { return };
    for action in ["put", "delete"] {
        for meanwhile in [Meanwhile::Read, Meanwhile::Put] {
            let wait = Duration::from_millis(5_500);
            assert!(round(&emulator.host, action, "check_and_mutate:people", 0, wait, meanwhile));
        }
    }
}

/// Random writes of a writer whose clock runs behind, frozen at random moments while this
/// process reads, repairs and writes the same rows.
#[test]
fn random_pauses_of_a_writer_change_no_answer() {
    let Some(emulator) = common::backend::emulator() else { return };
    let rounds: u64 = std::env::var("CELLAR_INDEX_PAUSE_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let mut seed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    eprintln!("index pause nemesis seed {seed}");
    let mut pauses = 0;
    for round in 0..rounds {
        let (target, people) = fresh_people(&emulator.host);
        let mut writer = spawn(&target, &format!("loop:{}", xorshift(&mut seed)), "0", -30_000);
        for pause in 0..4 {
            let r = xorshift(&mut seed);
            for _ in 0..1 + r % 40 {
                writer.next_line(&["ack"]);
            }
            std::thread::sleep(Duration::from_micros((r >> 32) % 3_000));
            writer.freeze();
            pauses += 1;
            let context = format!("round {round}, pause {pause}");
            check_index_queries(&people, &context);
            verify_only_leftovers(&people, &context);
            repair_indexes(&people);
            for _ in 0..3 {
                random_write(&people, &mut seed);
            }
            check_index_queries(&people, &context);
            writer.thaw(false);
        }
        writer.kill();
        let context = format!("round {round}, after the kill");
        check_index_queries(&people, &context);
        verify_only_leftovers(&people, &context);
        repair_indexes(&people);
        assert_indexes_clean(&people, &context);
        check_index_queries(&people, &context);
    }
    eprintln!("index pause nemesis: {rounds} rounds, {pauses} pauses, writer clock 30 s behind");
}
