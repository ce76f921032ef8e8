//! What a repair of an index reports about a problem it could not fix: the row, and what stood
//! in the way. A missing unique entry whose value another entity took between the repair's
//! check and its rebuild stays missing; the report says which row holds the value, and whether
//! that is a write still in flight (run the repair again once it is done) or a committed entity
//! (a unique violation, the application's to resolve).

mod common;

use std::sync::{mpsc, Arc};
use std::time::Duration;

use bytes::Bytes;
use cellar::engine::{Engine, EngineOptions};
use cellar::orm::store::{CellMutation, EmbeddedStore, RowMutation, ScanSpec, Store};
use cellar::prelude::*;
use common::faulty::Faulty;
use common::hooked::{Call, Hooked};
use common::people::{person, Person};

fn embedded() -> (tempfile::TempDir, EmbeddedStore) {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    (dir, EmbeddedStore::new(engine))
}

/// Stores person 1 with p1@example.com, then deletes its `by_email` entry (as a lost index
/// write would leave it): a verification finds it missing.
fn person_one_without_its_email_entry(inner: &EmbeddedStore) {
    let db = Db::with_store(Arc::new(inner.clone()));
    let people = db.repo::<Person>().unwrap();
    people.put(&person(1, 1, 0, 20, None)).unwrap();
    let spec = ScanSpec {
        start: Bytes::from_static(b"by_email\x00"),
        end: Some(Bytes::from_static(b"by_email\x01")),
        ..ScanSpec::default()
    };
    let rows: Vec<Bytes> = inner.scan("people_idx", &spec).unwrap().map(|r| r.unwrap().key).collect();
    assert_eq!(rows.len(), 1);
    let deletes = rows.into_iter().map(|row| RowMutation { row, mutations: vec![CellMutation::DeleteRow] });
    inner.mutate("people_idx", deletes.collect()).unwrap();
    let report = people.verify_index(Person::BY_EMAIL).run().unwrap();
    assert_eq!((report.missing, report.repaired, report.unfixed), (1, 0, 0), "{report}");
}

/// The repair's first claim of a unique value: the moment to let another writer in.
fn before_the_repairs_claim(call: Call, table: &str) -> bool {
    call == Call::CheckAndMutateMany && table == "people_idx"
}

#[test]
fn a_repair_blocked_by_a_write_in_flight_says_which_row_holds_the_value_and_why() {
    let (_dir, inner) = embedded();
    person_one_without_its_email_entry(&inner);
    // Person 2 takes p1@example.com through the protocol of several writes (a store without
    // commits) and stops before its data write: its claim on the value is unverified, and its
    // writer is at work.
    let (claimed_tx, claimed_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let stalls = Hooked::new(
        Faulty::new(Arc::new(inner.clone()), 0, false).without_commits(),
        |call, table| call == Call::CheckAndMutate && table == "people",
        move || {
            claimed_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        },
    );
    let app_db = Db::with_store(Arc::new(stalls));
    let app = app_db.repo::<Person>().unwrap();
    // It starts after the repair has found person 1's entry missing, right before the repair
    // claims the value back.
    let (writer_tx, writer_rx) = mpsc::channel();
    let hook = move || {
        let writer = std::thread::spawn(move || app.put(&person(2, 1, 1, 30, None)));
        claimed_rx.recv_timeout(Duration::from_secs(60)).expect("the writer claims the value");
        writer_tx.send(writer).unwrap();
    };
    let db = Db::with_store(Arc::new(Hooked::new(inner, before_the_repairs_claim, hook)));
    let people = db.repo::<Person>().unwrap();
    let report = people.verify_index(Person::BY_EMAIL).repair().run();
    release_tx.send(()).unwrap();
    let writer = writer_rx.recv_timeout(Duration::from_secs(60)).expect("the hook ran");
    writer.join().unwrap().unwrap();
    let report = report.unwrap();

    assert_eq!((report.missing, report.repaired, report.unfixed), (1, 0, 1), "{report}");
    assert_eq!(
        report.unfixed_reasons,
        [
            r"missing: entry of row \x00\x00\x00\x01 not rebuilt: value p1@example.com of index `by_email` is held by row \x00\x00\x00\x02 (a write in flight: repair again once it is done)"
        ],
        "{report}"
    );
    let shown = report.to_string();
    assert!(shown.contains(&format!("  ! {}", report.unfixed_reasons[0])), "{shown}");
    assert!(shown.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["not", "repaired", "1"]), "{shown}");

    // The write went through: two people now hold the value, which verification reports as a
    // unique violation for the application to resolve.
    let report = people.verify_index(Person::BY_EMAIL).run().unwrap();
    assert_eq!((report.missing, report.violations), (0, 1), "{report}");
}

#[test]
fn a_repair_blocked_by_another_entity_holding_the_value_names_it() {
    let (_dir, inner) = embedded();
    person_one_without_its_email_entry(&inner);
    // Person 2 is written with the same email, in one commit, before the repair claims it.
    let app_db = Db::with_store(Arc::new(inner.clone()));
    let app = app_db.repo::<Person>().unwrap();
    let hook = move || app.put(&person(2, 1, 1, 30, None)).unwrap();
    let db = Db::with_store(Arc::new(Hooked::new(inner, before_the_repairs_claim, hook)));
    let report = db.repo::<Person>().unwrap().verify_index(Person::BY_EMAIL).repair().run().unwrap();

    assert_eq!((report.missing, report.repaired, report.unfixed), (1, 0, 1), "{report}");
    assert_eq!(
        report.unfixed_reasons,
        [
            r"missing: entry of row \x00\x00\x00\x01 not rebuilt: value p1@example.com of index `by_email` is held by row \x00\x00\x00\x02 (its entity holds the value: a unique violation)"
        ],
        "{report}"
    );
    assert!(!report.is_clean());
}
