//! Crash test: a child process migrates a table of old blobs while an application thread keeps
//! writing, and is killed with SIGKILL at random moments; each restart resumes the migration
//! from its checkpoint. When a run finishes, every cell is at the current version with the
//! right content, and no value the application wrote was reverted.
//!
//! `CELLAR_MIGRATION_CRASH_ROUNDS` caps the number of kills (default 5).

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cellar::prelude::*;
use common::notes::{load, original, Note, Sticky};

const CHILD_ENV: &str = "CELLAR_MIGRATION_CRASH_DIR";
const ROWS: u64 = 4000;

fn migrated(id: u64) -> Note {
    Note::from(original(id))
}

/// The child: an application thread writes notes (`try ID TEXT` / `ack ID TEXT`) while the
/// migration runs; `done` once it has finished.
#[test]
fn migration_crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let round: u64 = std::env::var("CELLAR_MIGRATION_CRASH_ROUND").unwrap().parse().unwrap();
    let options = EngineOptions::default().memstore_flush_bytes(256 * 1024);
    let db = Db::open_with(&dir, options).unwrap();
    let notes = db.repo::<Sticky>().unwrap();
    let finished = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0u64.. {
                if finished.load(Ordering::Relaxed) {
                    break;
                }
                let id = (i * 7919 + round * 104_729) % ROWS;
                let text = format!("app-{round}-{i}");
                println!("try {id} {text}");
                notes.put(&Sticky { id, note: Note { text: text.clone(), by: "app".into() } }).unwrap();
                println!("ack {id} {text}");
                std::thread::sleep(Duration::from_micros(300));
            }
        });
        let migration = db.migrate_column::<Note>("notes", "d:n").unwrap();
        let report = migration.on_progress(|p| println!("progress {}", p.rows)).run().unwrap();
        finished.store(true, Ordering::Relaxed);
        if report.resumed_after.is_some() {
            println!("resumed");
        }
    });
    println!("done");
}

#[test]
fn a_killed_migration_resumes_and_reverts_nothing() {
    let rounds: u64 = std::env::var("CELLAR_MIGRATION_CRASH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let dir = tempfile::tempdir().unwrap();
    load(&Db::open(dir.path()).unwrap(), ROWS);
    let mut seed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    eprintln!("migration crash test seed {seed}");
    // Per row: the last acknowledged application text, and one in flight at a kill.
    let mut acked: HashMap<u64, String> = HashMap::new();
    let mut in_flight: HashMap<u64, Vec<String>> = HashMap::new();
    let mut finished = false;
    // Checkpoints passed by killed runs, and whether the finishing run resumed from one.
    let (mut checkpoints, mut resumed) = (0, false);
    for round in 0..=rounds {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "migration_crash_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir.path())
            .env("CELLAR_MIGRATION_CRASH_ROUND", round.to_string())
            .stdout(Stdio::piped())
            // The run that is not killed shows why, if it fails.
            .stderr(if round < rounds { Stdio::null() } else { Stdio::inherit() })
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader =
            std::thread::spawn(move || BufReader::new(stdout).lines().map_while(Result::ok).collect::<Vec<_>>());
        // The last round runs to the end; the others die 5-80 ms in (the migration takes longer).
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        if round < rounds {
            std::thread::sleep(Duration::from_millis(5 + seed % 75));
            let _ = child.kill();
        }
        child.wait().unwrap();
        for line in reader.join().unwrap() {
            let mut words = line.splitn(3, ' ');
            match (words.next(), words.next().and_then(|w| w.parse::<u64>().ok()), words.next()) {
                (Some("try"), Some(id), Some(text)) => in_flight.entry(id).or_default().push(text.to_string()),
                (Some("ack"), Some(id), Some(text)) => {
                    acked.insert(id, text.to_string());
                    in_flight.remove(&id);
                }
                (Some("done"), ..) => finished = true,
                (Some("progress"), ..) => checkpoints += 1,
                (Some("resumed"), ..) => resumed = true,
                _ => {}
            }
        }
        if finished {
            break;
        }
    }
    assert!(finished, "the last run finishes the migration");
    eprintln!("{checkpoints} progress reports before the end; the finishing run resumed: {resumed}");

    let db = Db::open(dir.path()).unwrap();
    let census = db.migrate_column::<Note>("notes", "d:n").unwrap().census().unwrap();
    assert_eq!(census.to_string(), format!("v2 msgpack: {ROWS}, unreadable: 0"));
    let notes = db.repo::<Sticky>().unwrap();
    for id in 0..ROWS {
        let note = notes.get(id).unwrap().unwrap().note;
        let mut allowed: Vec<Note> =
            in_flight.get(&id).into_iter().flatten().map(|t| Note { text: t.clone(), by: "app".into() }).collect();
        match acked.get(&id) {
            Some(text) => allowed.push(Note { text: text.clone(), by: "app".into() }),
            None => allowed.push(migrated(id)),
        }
        assert!(allowed.contains(&note), "row {id} holds {note:?}; allowed {allowed:?}");
    }
    assert!(!acked.is_empty(), "the application wrote during the migration");
}
