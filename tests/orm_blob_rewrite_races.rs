//! Rewrites that change only a blob's encoding — a read's write-back, a bulk migration — racing
//! the application's puts of the same rows. Whatever order the writes reach the store in, a
//! put that returned is what later reads see: a rewrite never hides it, whatever timestamps
//! the two requests were built with.
//!
//! `CELLAR_WRITE_BACK_RACES` sets the number of write-back races (default 400) and of rows
//! the migration races over (default 2,000).

mod common;

use std::sync::Barrier;

use common::notes::{load, Note, Sticky};

fn races(default: u64) -> u64 {
    std::env::var("CELLAR_WRITE_BACK_RACES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn fresh(id: u64) -> Sticky {
    Sticky { id, note: Note { text: format!("put {id}"), by: "app".into() } }
}

on_every_backend! {
fn a_write_back_never_hides_a_put_made_meanwhile(db: Db) {
    let races = races(400);
    load(&db, races);
    let stickies = db.repo::<Sticky>().unwrap();
    let reader = stickies.clone().with_write_back();
    for id in 0..races {
        let barrier = Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                barrier.wait();
                // The version-1 note, or the put's if it landed first.
                reader.get(id).unwrap().expect("the row is there");
            });
            barrier.wait();
            stickies.put(&fresh(id)).unwrap();
        });
        assert_eq!(stickies.get(id).unwrap(), Some(fresh(id)), "race {id}: the put stands");
    }
}

fn a_migration_never_hides_a_put_made_meanwhile(db: Db) {
    let rows = races(2_000);
    load(&db, rows);
    let stickies = db.repo::<Sticky>().unwrap();
    let migration = db.migrate_column::<Note>("notes", "d:n").unwrap();
    let put: Vec<u64> = std::thread::scope(|s| {
        // Every seventh row, in the order the migration goes, while it runs.
        let writer = s.spawn(|| {
            let mut put = Vec::new();
            for id in (0..rows).step_by(7) {
                stickies.put(&fresh(id)).unwrap();
                put.push(id);
            }
            put
        });
        migration.run().unwrap();
        writer.join().unwrap()
    });
    for id in put {
        assert_eq!(stickies.get(id).unwrap(), Some(fresh(id)), "row {id}: the put stands");
    }
    // Every other row reads as its migrated version-1 note.
    assert_eq!(db.migrate_column::<Note>("notes", "d:n").unwrap().census().unwrap().unreadable, 0);
}
}
