//! Crash test of secondary indexes: a child process runs two writer threads that put, change
//! and delete indexed entities — flushing the tables along the way — and is killed with
//! SIGKILL at random moments (batches through `put_many` among them). After every kill, without any repair, every index query answers
//! exactly what the data rows imply; verification finds nothing but unverified entries (left
//! by the writes the kill cut short, which repair settles); and after repair the index holds
//! exactly the data.
//!
//! The same on the Bigtable emulator, where the child is another process sharing the store.
//!
//! `CELLAR_INDEX_CRASH_ROUNDS` sets the number of kills (default 8 embedded, 3 on Bigtable);
//! `CELLAR_INDEX_CRASH_THREADS` the writer threads (default 2).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::people::{
    assert_indexes_clean, check_index_queries, person, repair_indexes, verify_only_leftovers, Person,
};

/// Where the child writes: `dir:<path>` (the embedded engine) or `bigtable:<host:port>/<instance>`.
const CHILD_ENV: &str = "CELLAR_INDEX_CRASH_TARGET";

fn xorshift(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// The child: two threads write forever, printing `ack` after each write.
#[test]
fn index_crash_child() {
    let Ok(target) = std::env::var(CHILD_ENV) else {
        return;
    };
    let seed: u64 = std::env::var("CELLAR_INDEX_CRASH_SEED").unwrap().parse().unwrap();
    let (engine, db) = common::backend::open_target(&target);
    let people = db.repo::<Person>().unwrap();
    let threads: u64 = std::env::var("CELLAR_INDEX_CRASH_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    std::thread::scope(|s| {
        for t in 0..threads {
            let people = people.clone();
            let engine = engine.clone();
            s.spawn(move || {
                let mut seed = seed ^ (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                for i in 0u64.. {
                    let r = xorshift(&mut seed);
                    let id = (r % 12) as u32;
                    let (email, city, age) = ((r >> 8) % 20, (r >> 16) % 3, 20 + (r >> 24) % 5);
                    let tag = (!(r >> 32).is_multiple_of(3)).then_some(((r >> 40) % 2) as u8);
                    match (r >> 48) % 8 {
                        0 => people.delete(id).unwrap(),
                        1 => {
                            let batch: Vec<Person> = (0..3)
                                .map(|j| {
                                    let r = xorshift(&mut seed);
                                    person(((id as u64 + j) % 12) as u32, (r % 20) as u8, (r >> 8) as u8 % 3, 20, None)
                                })
                                .collect();
                            match people.put_many(&batch) {
                                Ok(()) | Err(cellar::orm::Error::UniqueViolation { .. }) => {}
                                Err(e) => panic!("{e}"),
                            }
                        }
                        _ => match people.put(&person(id, email as u8, city as u8, age as u8, tag)) {
                            Ok(()) | Err(cellar::orm::Error::UniqueViolation { .. }) => {}
                            Err(e) => panic!("{e}"),
                        },
                    }
                    println!("ack");
                    if let Some(engine) = engine.as_ref().filter(|_| i % 200 == 199) {
                        engine.flush("people").unwrap();
                        engine.flush("people_idx").unwrap();
                    }
                }
            });
        }
    });
}

#[test]
fn killed_writers_leave_every_index_query_right() {
    let rounds: u64 = std::env::var("CELLAR_INDEX_CRASH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(8);
    let dir = tempfile::tempdir().unwrap();
    kill_rounds(&format!("dir:{}", dir.path().to_str().unwrap()), rounds);
}

/// On Bigtable the killed writer is another process: what it left unfinished is taken over
/// once its lease has passed, and until then readers check its entries against the data.
#[test]
fn killed_writers_leave_every_index_query_right_on_bigtable() {
    let Some(emulator) = common::backend::emulator() else { return };
    let rounds: u64 = std::env::var("CELLAR_INDEX_CRASH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    kill_rounds(&format!("bigtable:{}/{}", emulator.host, common::backend::instance_name()), rounds);
}

fn kill_rounds(target: &str, rounds: u64) {
    let mut seed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    eprintln!("index crash test seed {seed}");
    let mut leftovers = 0;
    for round in 0..rounds {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "index_crash_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, target)
            .env("CELLAR_INDEX_CRASH_SEED", xorshift(&mut seed).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Kill 0-3 ms after the 1st to 600th acknowledged write.
        let r = xorshift(&mut seed);
        let (kill_after, delay) = (1 + r % 600, Duration::from_micros((r >> 32) % 3000));
        let mut acks = 0;
        for line in BufReader::new(child.stdout.take().unwrap()).lines() {
            if line.unwrap() == "ack" {
                acks += 1;
                if acks == kill_after {
                    std::thread::sleep(delay);
                    child.kill().unwrap();
                    break;
                }
            }
        }
        let status = child.wait().unwrap();
        assert!(acks >= kill_after, "round {round}: the child stopped before it was killed: {status}");

        let (_engine, db) = common::backend::open_target(target);
        let people = db.repo::<Person>().unwrap();
        let context = format!("round {round}");
        // Verification first: reads settle what they meet.
        leftovers += verify_only_leftovers(&people, &context);
        check_index_queries(&people, &context);
        let repair = || repair_indexes(&people);
        repair();
        if target.starts_with("bigtable:") {
            // Another process's unverified entries are its own until its lease (5 s) has
            // passed: a stalled writer may still finish them. Then repair takes them over.
            check_index_queries(&people, &context);
            std::thread::sleep(Duration::from_millis(5_500));
            repair();
        }
        assert_indexes_clean(&people, &context);
        check_index_queries(&people, &context);
    }
    eprintln!("index crash test on {target}: {rounds} kills, {leftovers} unverified leftovers found and settled");
}
