//! Secondary indexes through the repository: unique gets, prefix and range scans in both
//! directions with limits and pages, keys and covered entries, sparse optional fields, unique
//! values claimed and freed, races between writers, and the backfill of an index declared on
//! a table that already had rows.
//!
//! Each test runs on every backend: the embedded engine and the Bigtable emulator.

mod common;

use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};

use cellar::orm::index::BackfillProgress;
use cellar::orm::store::{CellMutation, RowMutation};
use cellar::orm::Error;
use cellar::prelude::*;
use common::hooked::{Call, Hooked};
use common::people::{person, Person, PersonKey};

fn ids(people: &[Person]) -> Vec<u32> {
    people.iter().map(|p| p.id).collect()
}

fn populated(db: Db) -> (Db, Repository<Person>) {
    let people = db.repo::<Person>().unwrap();
    // ids 0..12: emails unique, cities cycling, ages 20..24, tags on even ids.
    for id in 0..12u32 {
        let tag = (id % 2 == 0).then_some((id % 4) as u8);
        people.put(&person(id, id as u8, (id % 3) as u8, 20 + (id % 4) as u8, tag)).unwrap();
    }
    (db, people)
}

on_every_backend! {
fn unique_gets_and_scans_answer_from_the_index(db: Db) {
    let (_db, people) = populated(db);
    let by_email = people.index(Person::BY_EMAIL);
    assert_eq!(by_email.get("p7@example.com".to_string()).unwrap().map(|p| p.id), Some(7));
    assert_eq!(by_email.get("nobody@example.com".to_string()).unwrap(), None);

    let by_city = people.index(Person::BY_CITY_AGE);
    // Oslo: ids 0, 3, 6, 9 with ages 20, 23, 22, 21: in (age, id) order.
    assert_eq!(ids(&by_city.scan().prefix(("Oslo".to_string(),)).to_vec().unwrap()), [0, 9, 6, 3]);
    assert_eq!(ids(&by_city.scan().prefix(("Oslo".to_string(), 22u8)).to_vec().unwrap()), [6]);
    assert_eq!(ids(&by_city.scan().prefix(("Oslo".to_string(),)).reverse().limit(2).to_vec().unwrap()), [3, 6]);
    // Ranges over leading values: from inclusive, to exclusive.
    let range = by_city.scan().from(("Oslo".to_string(), 21u8)).to(("Oslo".to_string(), 23u8)).to_vec().unwrap();
    assert_eq!(ids(&range), [9, 6]);
    // Every city, Lima < Oslo < Pune.
    assert_eq!(by_city.scan().to_vec().unwrap().len(), 12);
    assert_eq!(by_city.scan().limit(1).to_vec().unwrap()[0].city, "Lima");

    // Keys and covered entries, without data rows.
    let keys: Vec<u32> =
        by_city.scan().prefix(("Pune".to_string(),)).keys().unwrap().into_iter().map(|k| k.id).collect();
    assert_eq!(keys, [8, 5, 2, 11]);
    let entries = by_city.scan().prefix(("Pune".to_string(),)).entries().unwrap();
    assert_eq!(entries[0].key.id, 8);
    assert_eq!(entries[0].get::<String>("name").unwrap(), "person 8.20");
    assert_eq!(entries[0].get::<u8>("age").unwrap(), 20);
    let err = entries[0].entity().unwrap_err().to_string();
    assert!(err.contains("email"), "the index does not copy the email: {err}");

    // Pages resume where the last one ended.
    let mut seen = Vec::new();
    let mut page = by_city.scan().page(5).unwrap();
    loop {
        seen.extend(ids(&page.items));
        let Some(next) = page.next else { break };
        page = by_city.scan().after(&next).page(5).unwrap();
    }
    assert_eq!(seen, ids(&by_city.scan().to_vec().unwrap()));

    // Non-unique indexes are scanned, not got.
    let err = people.index(Person::BY_TAG).get("t0".to_string()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
}
}

on_every_backend! {
fn absent_optional_fields_are_not_indexed(db: Db) {
    let (_db, people) = populated(db);
    let by_tag = people.index(Person::BY_TAG);
    assert_eq!(ids(&by_tag.scan().prefix("t0".to_string()).to_vec().unwrap()), [0, 4, 8]);
    assert_eq!(ids(&by_tag.scan().prefix("t2".to_string()).to_vec().unwrap()), [2, 6, 10]);
    assert_eq!(by_tag.scan().to_vec().unwrap().len(), 6, "odd ids have no tag and no entry");
    // Dropping a tag removes the entry; setting one adds it.
    let mut p = people.get(4).unwrap().unwrap();
    p.tag = None;
    people.put(&p).unwrap();
    p = people.get(5).unwrap().unwrap();
    p.tag = Some("t0".into());
    people.put(&p).unwrap();
    assert_eq!(ids(&by_tag.scan().prefix("t0".to_string()).to_vec().unwrap()), [0, 5, 8]);
}
}

on_every_backend! {
fn unique_values_are_claimed_once_and_freed_by_changes_and_deletes(db: Db) {
    let (_db, people) = populated(db);
    let by_email = people.index(Person::BY_EMAIL);
    let err = people.put(&person(20, 3, 0, 30, None)).unwrap_err();
    match &err {
        Error::UniqueViolation { index, value, .. } => {
            assert_eq!(*index, "by_email");
            assert!(value.contains("p3@example.com"), "{value}");
        }
        other => panic!("{other}"),
    }
    assert_eq!(people.get(20).unwrap(), None, "the loser wrote nothing");
    assert_eq!(by_email.get("p3@example.com".to_string()).unwrap().map(|p| p.id), Some(3));

    // Changing a unique value frees the old one.
    let mut three = people.get(3).unwrap().unwrap();
    three.email = "new3@example.com".into();
    people.put(&three).unwrap();
    assert_eq!(by_email.get("p3@example.com".to_string()).unwrap(), None);
    people.put(&person(20, 3, 0, 30, None)).unwrap();
    assert_eq!(by_email.get("p3@example.com".to_string()).unwrap().map(|p| p.id), Some(20));
    // So does a delete; a re-put of the same entity keeps its own value.
    people.put(&people.get(20).unwrap().unwrap()).unwrap();
    people.delete(20).unwrap();
    assert_eq!(by_email.get("p3@example.com".to_string()).unwrap(), None);
    people.put(&person(21, 3, 0, 30, None)).unwrap();
    // Saves keep indexes right too, and still refuse stale versions.
    let mut p = people.get(21).unwrap().unwrap();
    p.age = 31;
    people.save(&mut p).unwrap();
    let mut stale = p.clone();
    stale.version -= 1;
    assert!(matches!(people.save(&mut stale), Err(Error::VersionConflict { .. })));
    let by_city = people.index(Person::BY_CITY_AGE);
    assert_eq!(ids(&by_city.scan().prefix(("Oslo".to_string(), 31u8)).to_vec().unwrap()), [21]);
    for index in [people.verify_index(Person::BY_EMAIL), people.verify_index(Person::BY_CITY_AGE)] {
        let report = index.run().unwrap();
        assert!(report.is_clean(), "{report}");
    }
}
}

on_every_backend! {
fn a_put_of_an_indexed_entity_moves_the_version_on(db: Db) {
    let people = db.repo::<Person>().unwrap();
    let stored = |id: u32| people.get(id).unwrap().map(|p| (p.age, p.version));
    people.put(&person(1, 1, 0, 20, None)).unwrap();
    let mut read = people.get(1).unwrap().unwrap();
    assert_eq!(read.version, 1, "a first put stores version 1");
    // A put from a copy of the same read moves the version on: the earlier read's save fails.
    let mut other = read.clone();
    other.age = 21;
    people.put(&other).unwrap();
    read.age = 40;
    assert!(matches!(people.save(&mut read), Err(Error::VersionConflict { expected: 1, .. })));
    assert_eq!(stored(1), Some((21, 2)));
    // A put of a copy holding version 0 does not take the version back.
    people.put(&person(1, 1, 0, 22, None)).unwrap();
    assert_eq!(stored(1), Some((22, 3)));
    assert!(matches!(people.save(&mut person(1, 1, 0, 50, None)), Err(Error::VersionConflict { expected: 0, .. })));
    // put_many too; the index follows every write.
    people.put_many(&[person(1, 1, 0, 23, None), person(2, 2, 0, 30, None)]).unwrap();
    assert_eq!((stored(1), stored(2)), (Some((23, 4)), Some((30, 1))));
    let oslo = people.index(Person::BY_CITY_AGE).scan().prefix(("Oslo".to_string(),)).to_vec().unwrap();
    assert_eq!(oslo.iter().map(|p| (p.id, p.age, p.version)).collect::<Vec<_>>(), [(1, 23, 4), (2, 30, 1)]);
    for index in [people.verify_index(Person::BY_EMAIL), people.verify_index(Person::BY_CITY_AGE)] {
        let report = index.run().unwrap();
        assert!(report.is_clean(), "{report}");
    }
    // The version is read with the row the index write reads anyway: a put of a versioned
    // entity costs no round trip more than one without a version (one read-and-commit on the
    // embedded engine; a read and three conditional writes in the protocol).
    let ((), costs) = db.measure(|| people.put(&person(1, 1, 1, 24, None)).unwrap());
    let protocol = !db.store().guarantees().atomic_commits;
    assert_eq!(costs.round_trips(), if protocol { 4 } else { 1 }, "{costs:?}");
    assert_eq!(stored(1), Some((24, 5)));
}
}

on_every_backend! {
fn put_many_claims_each_unique_value_once_even_within_one_batch(db: Db) {
    let people = db.repo::<Person>().unwrap();
    // More entities than one commit takes on the embedded engine.
    let batch: Vec<Person> = (0..200u32).map(|id| person(id, id as u8, (id % 3) as u8, 20, None)).collect();
    people.put_many(&batch).unwrap();
    let by_email = people.index(Person::BY_EMAIL);
    for id in [0u32, 127, 128, 199] {
        assert_eq!(by_email.get(format!("p{id}@example.com")).unwrap().map(|p| p.id), Some(id));
    }
    // Two entities of one batch with one unique value: one gets it, the other is refused and
    // writes nothing, and the rest of the batch is written.
    let clash = [person(300, 250, 0, 30, None), person(301, 250, 1, 31, None), person(302, 251, 2, 32, None)];
    assert!(matches!(people.put_many(&clash), Err(Error::UniqueViolation { .. })));
    let holder = by_email.get("p250@example.com".to_string()).unwrap().expect("one of them holds the value").id;
    assert!(holder == 300 || holder == 301, "{holder}");
    assert_eq!(people.get(601 - holder).unwrap(), None, "the loser wrote nothing");
    assert_eq!(by_email.get("p251@example.com".to_string()).unwrap().map(|p| p.id), Some(302));
    for index in [people.verify_index(Person::BY_EMAIL), people.verify_index(Person::BY_CITY_AGE)] {
        let report = index.run().unwrap();
        assert!(report.is_clean(), "{report}");
    }
}
}

on_every_backend! {
fn racing_claims_of_one_value_have_exactly_one_winner(db: Db) {
    let people = db.repo::<Person>().unwrap();
    for round in 0..5u8 {
        let winners: Vec<u32> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8u32)
                .map(|t| {
                    let people = people.clone();
                    s.spawn(move || {
                        let id = u32::from(round) * 100 + t;
                        match people.put(&person(id, round, 0, 20, None)) {
                            Ok(()) => Some(id),
                            Err(Error::UniqueViolation { .. }) => None,
                            Err(e) => panic!("{e}"),
                        }
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let email = person(0, round, 0, 0, None).email;
        assert_eq!(people.index(Person::BY_EMAIL).get(email).unwrap().map(|p| p.id), Some(winners[0]));
        let stored: Vec<u32> = people.scan().to_vec().unwrap().into_iter().map(|p| p.id).collect();
        assert!(stored.contains(&winners[0]) && stored.iter().filter(|&&id| id / 100 == u32::from(round)).count() == 1);
    }
}
}

on_every_backend! {
fn writers_racing_on_the_same_rows_leave_the_index_exact(db: Db) {
    let people = db.repo::<Person>().unwrap();
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let people = people.clone();
            s.spawn(move || {
                for i in 0..150u32 {
                    let id = i % 5;
                    let (city, age) = (((i + u32::from(t)) % 3) as u8, 20 + ((i * 7 + u32::from(t)) % 5) as u8);
                    let tag = (i % 3 == 0).then_some(t % 2);
                    // Emails stay per row, so only the non-unique indexes race.
                    people.put(&person(id, id as u8, city, age, tag)).unwrap();
                    if i % 17 == 0 {
                        people.delete(id).unwrap();
                    }
                }
            });
        }
    });
    let stored = people.scan().to_vec().unwrap();
    for city in ["Oslo", "Lima", "Pune"] {
        let mut want: Vec<&Person> = stored.iter().filter(|p| p.city == city).collect();
        want.sort_by_key(|p| (p.age, p.id));
        let got = people.index(Person::BY_CITY_AGE).scan().prefix((city.to_string(),)).keys().unwrap();
        assert_eq!(got.into_iter().map(|k| k.id).collect::<Vec<_>>(), want.iter().map(|p| p.id).collect::<Vec<_>>());
    }
    for index in [people.verify_index(Person::BY_CITY_AGE), people.verify_index(Person::BY_TAG)] {
        let report = index.run().unwrap();
        assert!(report.is_clean(), "{report}");
        assert_eq!(report.data_rows, stored.len() as u64);
    }
}
}

/// On the embedded engine, writers whose index writes are atomic commits race writers of the
/// same store that take the protocol of unverified and verified rows (as if the commits were
/// unavailable to them), on the same rows and the same unique values. Whatever the
/// interleaving, every index query answers what the data holds, and verification finds
/// nothing but the unverified rows of protocol writes cut short by a lost race.
#[test]
fn commit_writers_and_protocol_writers_racing_leave_every_index_right() {
    let dir = tempfile::tempdir().unwrap();
    let engine = cellar::engine::Engine::open(dir.path(), cellar::engine::EngineOptions::default()).unwrap();
    let store: std::sync::Arc<dyn cellar::orm::store::Store> =
        std::sync::Arc::new(cellar::orm::store::EmbeddedStore::new(engine));
    let committing = Db::with_store(store.clone()).repo::<Person>().unwrap();
    let protocol = Db::with_store(std::sync::Arc::new(common::faulty::Faulty::new(store, 0, false).without_commits()))
        .repo::<Person>()
        .unwrap();
    let (mut written, mut refused) = (0u32, 0u32);
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..4u32)
            .map(|t| {
                let people = if t % 2 == 0 { committing.clone() } else { protocol.clone() };
                s.spawn(move || {
                    let (mut written, mut refused) = (0u32, 0u32);
                    for i in 0..200u32 {
                        let id = (i + t) % 6;
                        // Eight emails for six rows: values move between rows and collide.
                        let email = ((i * 5 + t * 3) % 8) as u8;
                        let (city, age) = (((i + t) % 3) as u8, 20 + ((i * 7 + t) % 4) as u8);
                        let tag = (i % 3 == 0).then_some((t % 2) as u8);
                        match people.put(&person(id, email, city, age, tag)) {
                            Ok(()) => written += 1,
                            Err(Error::UniqueViolation { .. }) => refused += 1,
                            Err(e) => panic!("{e}"),
                        }
                        if i % 13 == 0 {
                            people.delete(id).unwrap();
                        }
                    }
                    (written, refused)
                })
            })
            .collect();
        for w in writers {
            let (w, r) = w.join().unwrap();
            written += w;
            refused += r;
        }
    });
    assert!(written > 0 && refused > 0, "the race must both write and collide: {written} written, {refused} refused");
    for people in [&committing, &protocol] {
        common::people::check_index_queries(people, "after the race");
    }
    common::people::verify_only_leftovers(&committing, "after the race");
    common::people::repair_indexes(&committing);
    common::people::assert_indexes_clean(&committing, "after the race");
}

mod without_a_version {
    use cellar::prelude::*;

    /// `Person` without its version field: same table, columns and indexes.
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "people", index(name = "by_city_age", on(city, age), include(name)))]
    pub struct Person {
        #[cellar(key)]
        pub id: u32,
        #[cellar(column = "n")]
        pub name: String,
        #[cellar(column = "e", index = "by_email", unique)]
        pub email: String,
        #[cellar(column = "c")]
        pub city: String,
        #[cellar(column = "a")]
        pub age: u8,
        #[cellar(column = "t", index = "by_tag")]
        pub tag: Option<String>,
    }
}

/// An indexed `put_many` of large entities goes as several commits, each within the bytes one
/// commit may carry, and reads back whole. (Of an entity without a version field: a put of a
/// versioned one reads its stored version first, one entity at a time.)
#[test]
fn large_entities_are_committed_in_chunks_that_stay_small() {
    let db = Db::open_temporary().unwrap();
    let people = db.repo::<Person>().unwrap();
    let unversioned = db.repo::<without_a_version::Person>().unwrap();
    let big = |id: u32| {
        let p = person(id, id as u8, 0, 20, None);
        let name = format!("{id}").repeat(1 << 20);
        without_a_version::Person { id, name, email: p.email, city: p.city, age: p.age, tag: p.tag }
    };
    let batch: Vec<without_a_version::Person> = (0..6).map(big).collect();
    let ((), costs) = db.measure(|| unversioned.put_many(&batch).unwrap());
    // Each entity may carry about 7 MiB in a commit (its cells, and index rows that may copy
    // them): two fit in one, so three reads and three commits.
    assert_eq!((costs.gets, costs.group_mutates, costs.check_and_mutates), (3, 3, 0), "{costs}");
    for p in &batch {
        assert_eq!(unversioned.get(p.id).unwrap().as_ref(), Some(p));
    }
    common::people::assert_indexes_clean(&people, "after a put_many of large entities");
}

mod before_the_index {
    use cellar::prelude::*;

    /// `Person` as it was before its indexes: same table and columns.
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "people")]
    pub struct Person {
        #[cellar(key)]
        pub id: u32,
        #[cellar(column = "n")]
        pub name: String,
        #[cellar(column = "e")]
        pub email: String,
        #[cellar(column = "c")]
        pub city: String,
        #[cellar(column = "a")]
        pub age: u8,
        #[cellar(column = "t")]
        pub tag: Option<String>,
        #[cellar(version)]
        pub version: u64,
    }
}

on_every_backend! {
fn an_index_added_to_existing_rows_answers_once_backfilled(db: Db) {
    let old = db.repo::<before_the_index::Person>().unwrap();
    for id in 0..2500u32 {
        let p = person(id, (id % 250) as u8, (id % 3) as u8, 20, None);
        let p = before_the_index::Person {
            id,
            name: p.name,
            email: format!("{id}@example.com"),
            city: p.city,
            age: p.age,
            tag: p.tag,
            version: 0,
        };
        old.put(&p).unwrap();
    }
    let people = db.repo::<Person>().unwrap();
    let err = people.index(Person::BY_EMAIL).get("7@example.com".to_string()).unwrap_err();
    assert!(matches!(err, Error::IndexNotReady { index: "by_email", .. }), "{err}");
    // Writes keep the index up to date before the backfill, too.
    people.put(&Person { email: "new@example.com".into(), ..people.get(7).unwrap().unwrap() }).unwrap();

    // The backfill dies after its first checkpoint, then resumes after it.
    let died = catch_unwind(AssertUnwindSafe(|| {
        people.build_index(Person::BY_EMAIL).on_progress(|_| panic!("killed")).run().unwrap();
    }));
    assert!(died.is_err());
    assert!(people.index(Person::BY_EMAIL).get("7@example.com".to_string()).is_err(), "not built yet");
    let mut progress: Vec<BackfillProgress> = Vec::new();
    let report = people.build_index(Person::BY_EMAIL).on_progress(|p| progress.push(p.clone())).run().unwrap();
    assert!(report.resumed_after.is_some() && report.built, "{report:?}");
    assert_eq!((report.rows, report.indexed), (1500, 1500), "the first 1000 rows not redone");
    assert_eq!(progress.iter().map(|p| p.rows).collect::<Vec<_>>(), [1000, 1500]);
    let by_email = people.index(Person::BY_EMAIL);
    assert_eq!(by_email.get("2400@example.com".to_string()).unwrap().map(|p| p.id), Some(2400));
    assert_eq!(by_email.get("new@example.com".to_string()).unwrap().map(|p| p.id), Some(7));
    assert_eq!(by_email.get("7@example.com".to_string()).unwrap(), None);
    let report = people.verify_index(Person::BY_EMAIL).run().unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.index_rows, 2500);
    // A second repository sees the index built.
    let again = db.repo::<Person>().unwrap();
    assert_eq!(again.index(Person::BY_EMAIL).get("1@example.com".to_string()).unwrap().map(|p| p.id), Some(1));
    // Other indexes of the entity were pending too, and build the same way.
    assert!(people.index(Person::BY_TAG).scan().to_vec().is_err());
    let report = people.build_index(Person::BY_TAG).run().unwrap();
    assert_eq!((report.rows, report.indexed, report.built), (2500, 0, true), "no tags: nothing to index");
    let emails: BTreeSet<String> = people.scan().to_vec().unwrap().into_iter().map(|p| p.email).collect();
    assert_eq!(emails.len(), 2500);
}
}

on_every_backend! {
fn a_backfill_reports_unique_violations_and_leaves_the_index_unbuilt(db: Db) {
    let old = db.repo::<before_the_index::Person>().unwrap();
    for id in 0..10u32 {
        let email = if id == 4 { "3@example.com".to_string() } else { format!("{id}@example.com") };
        let p = before_the_index::Person {
            id,
            name: format!("n{id}"),
            email,
            city: "Oslo".into(),
            age: 20,
            tag: None,
            version: 0,
        };
        old.put(&p).unwrap();
    }
    let people = db.repo::<Person>().unwrap();
    let report = people.build_index(Person::BY_EMAIL).run().unwrap();
    assert!(!report.built);
    assert_eq!(report.violations.len(), 1, "{report:?}");
    // Named by the entity's key, as the application knows it, not by row bytes.
    let violation = &report.violations[0];
    assert_eq!(violation.row, format!("{:?}", PersonKey { id: 4 }), "{report:?}");
    assert_eq!(violation.row, "PersonKey { id: 4 }");
    assert!(violation.reason.contains("by_email") && violation.reason.contains("3@example.com"), "{violation}");
    assert_eq!(violation.to_string(), format!("PersonKey {{ id: 4 }}: {}", violation.reason));
    assert!(matches!(
        people.index(Person::BY_EMAIL).get("3@example.com".to_string()),
        Err(Error::IndexNotReady { .. })
    ));
    // Fixing the data and running again builds it.
    let mut four = people.get(4).unwrap().unwrap();
    four.email = "4@example.com".into();
    people.put(&four).unwrap();
    assert!(people.build_index(Person::BY_EMAIL).run().unwrap().built);
    assert_eq!(people.index(Person::BY_EMAIL).get("4@example.com".to_string()).unwrap().map(|p| p.id), Some(4));
}
}

mod hashed {
    use cellar::prelude::*;

    /// Hashed key parts keep their values in columns: an index can take them, and a covered
    /// read restores the key from its copies.
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "follows", index(name = "by_followed", on(followed), include(follower)))]
    pub struct Follows {
        #[cellar(key, hash = "md5", column = "a")]
        pub follower: String,
        #[cellar(key, hash = "md5", column = "b")]
        pub followed: String,
    }

    /// The same table before the index.
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "follows")]
    pub struct Unindexed {
        #[cellar(key, hash = "md5", column = "a")]
        pub follower: String,
        #[cellar(key, hash = "md5", column = "b")]
        pub followed: String,
    }
}

on_every_backend! {
fn entities_with_hashed_key_parts_are_indexed_backfilled_and_verified(db: Db) {
    use hashed::{Follows, FollowsKey, Unindexed};
    let old = db.repo::<Unindexed>().unwrap();
    for (a, b) in [("alice", "bob"), ("carol", "bob"), ("bob", "alice")] {
        old.put(&Unindexed { follower: a.into(), followed: b.into() }).unwrap();
    }
    let follows = db.repo::<Follows>().unwrap();
    let report = follows.build_index(Follows::BY_FOLLOWED).run().unwrap();
    assert_eq!((report.rows, report.indexed, report.built), (3, 3, true), "{report:?}");
    follows.put(&Follows { follower: "dave".into(), followed: "bob".into() }).unwrap();
    let by_followed = follows.index(Follows::BY_FOLLOWED);
    let entries = by_followed.scan().prefix("bob".to_string()).entries().unwrap();
    let mut followers: Vec<String> = entries.iter().map(|e| e.get::<String>("follower").unwrap()).collect();
    followers.sort();
    assert_eq!(followers, ["alice", "carol", "dave"]);
    let mut keys = by_followed.scan().prefix("bob".to_string()).keys().unwrap();
    keys.sort_by(|a, b| a.follower.cmp(&b.follower));
    assert_eq!(keys[0], FollowsKey { follower: "alice".into(), followed: "bob".into() });
    let report = follows.verify_index(Follows::BY_FOLLOWED).run().unwrap();
    assert!(report.is_clean() && report.data_rows == 4 && report.index_rows == 4, "{report}");
}
}

mod redefined {
    use cellar::prelude::*;

    /// An index as first shipped...
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "places", index(name = "by_city", on(city)))]
    pub struct First {
        #[cellar(key)]
        pub id: u32,
        #[cellar(column = "c")]
        pub city: String,
        #[cellar(column = "a")]
        pub age: u8,
    }

    /// ...and declared again under its name with another definition.
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "places", index(name = "by_city", on(city, age(desc))))]
    pub struct Second {
        #[cellar(key)]
        pub id: u32,
        #[cellar(column = "c")]
        pub city: String,
        #[cellar(column = "a")]
        pub age: u8,
    }
}

on_every_backend! {
fn an_index_declared_again_with_another_definition_is_rebuilt_before_it_answers(db: Db) {
    use redefined::{First, Second};
    let first = db.repo::<First>().unwrap();
    for id in 0..30u32 {
        first.put(&First { id, city: ["Oslo", "Lima"][id as usize % 2].into(), age: (id % 7) as u8 }).unwrap();
    }
    assert_eq!(first.index(First::BY_CITY).scan().prefix("Oslo".to_string()).keys().unwrap().len(), 15);

    let second = db.repo::<Second>().unwrap();
    let err = second.index(Second::BY_CITY).scan().to_vec().unwrap_err();
    assert!(
        matches!(&err, Error::IndexNotReady { reason, .. } if reason.contains("another definition")),
        "the old entries would answer wrongly: {err}"
    );
    let report = second.build_index(Second::BY_CITY).run().unwrap();
    assert_eq!((report.rows, report.indexed, report.built), (30, 30, true));
    let oslo = second.index(Second::BY_CITY).scan().prefix(("Oslo".to_string(),)).keys().unwrap();
    let ages: Vec<u8> = oslo.iter().map(|k| second.get(k.id).unwrap().unwrap().age).collect();
    assert!(ages.windows(2).all(|w| w[0] >= w[1]), "oldest first under the new definition: {ages:?}");
    let report = second.verify_index(Second::BY_CITY).run().unwrap();
    assert!(report.is_clean() && report.index_rows == 30, "no entry of the old definition left:\n{report}");

    // On a table without rows a new definition is built at once.
    let db = Db::open_temporary().unwrap();
    db.repo::<First>().unwrap();
    let second = db.repo::<Second>().unwrap();
    assert_eq!(second.index(Second::BY_CITY).scan().to_vec().unwrap(), []);
}
}

#[test]
fn a_backfill_never_brings_back_a_row_deleted_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let engine = cellar::engine::Engine::open(dir.path(), cellar::engine::EngineOptions::default()).unwrap();
    let inner = cellar::orm::EmbeddedStore::new(engine);
    let app = Db::with_store(std::sync::Arc::new(inner.clone()));
    let old = app.repo::<before_the_index::Person>().unwrap();
    let p = person(5, 5, 0, 20, None);
    old.put(&before_the_index::Person {
        id: 5,
        name: p.name,
        email: p.email,
        city: p.city,
        age: p.age,
        tag: p.tag,
        version: 0,
    })
    .unwrap();
    // The backfill reads row 5 (written before the index: no write token); before it writes,
    // the application deletes the row through the indexed entity.
    let app_people = app.repo::<Person>().unwrap();
    let when = |call, table: &str| call == Call::CheckAndMutate && table == "people";
    let db = Db::with_store(std::sync::Arc::new(Hooked::new(inner, when, move || app_people.delete(5).unwrap())));
    let people = db.repo::<Person>().unwrap();
    let report = people.build_index(Person::BY_EMAIL).run().unwrap();
    assert!(report.built, "{report:?}");
    assert!(!people.exists(5).unwrap(), "the deleted row stays deleted");
    assert_eq!(people.index(Person::BY_EMAIL).scan().keys().unwrap(), []);
    let report = people.verify_index(Person::BY_EMAIL).run().unwrap();
    assert!(report.is_clean() && report.index_rows == 0, "{report}");
    assert!(people.index(Person::BY_EMAIL).scan().limit(0).to_vec().unwrap().is_empty());
}

on_every_backend! {
/// On a shared store a write token an earlier build stamped with a client clock that ran
/// ahead must not stay the visible one: a fence moves the token, and a stalled writer's data
/// write, conditioned on the old one, must then fail. (The embedded engine stamps every token
/// when it applies: nothing there was ever stamped ahead.)
fn a_write_token_stamped_ahead_by_an_earlier_build_is_replaced(db: Db) {
    if db.store().guarantees().single_process {
        return;
    }
    let people = db.repo::<Person>().unwrap();
    people.put(&person(1, 1, 0, 20, None)).unwrap();
    let row = bytes::Bytes::from_static(&[0, 0, 0, 1]);
    let ahead = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64 + 60_000;
    let stale = CellMutation::Put {
        family: bytes::Bytes::from_static(b"d"),
        qualifier: bytes::Bytes::from_static(b"\x00i"),
        value: bytes::Bytes::from_static(&[7; 8]),
        timestamp: Some(ahead),
    };
    db.store().mutate("people", vec![RowMutation { row: row.clone(), mutations: vec![stale] }]).unwrap();
    people.put(&person(1, 1, 0, 21, None)).unwrap();
    let stored = db.store().read_rows("people", &[row], &Default::default()).unwrap();
    let token = stored[0].as_ref().unwrap().value("d", "\x00i").unwrap().to_vec();
    assert_ne!(token, [7; 8], "the put's token is the visible one");
    assert_eq!(people.get(1u32).unwrap().map(|p| p.age), Some(21));
}
}
