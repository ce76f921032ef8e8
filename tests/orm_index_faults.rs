//! Model-based test of secondary indexes with injected faults: random sequences of puts,
//! saves, changes of indexed fields and deletes run against a store that fails the k-th
//! mutating call — for every k the sequence reaches, the failure either before the call takes
//! effect or after (the caller sees an error either way). After every step, every index query
//! must answer exactly what the committed data implies, without any repair; at the end,
//! verification after a repair must find the index holding exactly the data. On the embedded
//! engine and on the Bigtable emulator.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use cellar::engine::{Engine, EngineOptions};
use cellar::orm::store::{EmbeddedStore, Store};
use cellar::orm::Error;
use cellar::prelude::*;
use common::faulty::Faulty;
use common::people::{person, Person};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Put(Person),
    /// Several people in one batch (a row may come twice: the later one wins).
    PutMany(Vec<Person>),
    /// Reads the stored person, changes its city and age, saves it.
    Save(u32, u8, u8),
    Delete(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u32..6, 0u8..5, 0u8..3, 20u8..24, prop::option::of(0u8..2))
            .prop_map(|(id, email, city, age, tag)| Op::Put(person(id, email, city, age, tag))),
        2 => prop::collection::vec((0u32..6, 0u8..5, 0u8..3, 20u8..24, prop::option::of(0u8..2)), 1..4)
            .prop_map(|people| Op::PutMany(people.into_iter().map(|(id, e, c, a, t)| person(id, e, c, a, t)).collect())),
        2 => (0u32..6, 0u8..3, 20u8..24).prop_map(|(id, city, age)| Op::Save(id, city, age)),
        1 => (0u32..6).prop_map(Op::Delete),
    ]
}

type Model = BTreeMap<u32, Person>;

/// Applies `op` to the repository and to the model; a failed call leaves the model at
/// whichever state the data row shows (before or after), and checks it is one of the two.
fn apply(people: &Repository<Person>, model: &mut Model, op: &Op) {
    if let Op::PutMany(batch) = op {
        return apply_many(people, model, batch);
    }
    let id = match op {
        Op::Put(p) => p.id,
        Op::Save(id, ..) | Op::Delete(id) => *id,
        Op::PutMany(_) => unreachable!("handled above"),
    };
    let before = model.get(&id).cloned();
    let (outcome, after) = match op {
        Op::Put(p) => {
            let taken = model.values().any(|o| o.id != p.id && o.email == p.email);
            let outcome = people.put(p);
            if taken {
                assert!(matches!(outcome, Err(Error::UniqueViolation { .. }) | Err(Error::Store(_))), "{outcome:?}");
            }
            (outcome, (!taken).then(|| p.clone()).or(before.clone()))
        }
        Op::Save(id, city, age) => {
            let Some(mut p) = people.get(*id).unwrap() else { return };
            p.city = person(0, 0, *city, 0, None).city;
            p.age = *age;
            let outcome = people.save(&mut p);
            (outcome, Some(p))
        }
        Op::Delete(_) => (people.delete(id), None),
        Op::PutMany(_) => unreachable!("handled above"),
    };
    let stored = people.get(id).unwrap();
    match outcome {
        Ok(()) => assert_eq!(stored.as_ref().map(strip), after.as_ref().map(strip), "{op:?}"),
        Err(e) => {
            let allowed = [before.as_ref().map(strip), after.as_ref().map(strip)];
            assert!(allowed.contains(&stored.as_ref().map(strip)), "{op:?} failed with {e}: row is {stored:?}");
        }
    }
    match stored {
        Some(p) => model.insert(id, p),
        None => model.remove(&id),
    };
}

/// A batch put: every row ends as one of the states it could have (before, or any person of
/// the batch for it); the model follows what the data rows show, and no two rows share an
/// email.
fn apply_many(people: &Repository<Person>, model: &mut Model, batch: &[Person]) {
    let outcome = people.put_many(batch);
    for id in batch.iter().map(|p| p.id).collect::<std::collections::BTreeSet<_>>() {
        let stored = people.get(id).unwrap();
        let mut allowed: Vec<Option<Person>> = vec![model.get(&id).map(strip)];
        allowed.extend(batch.iter().filter(|p| p.id == id).map(|p| Some(strip(p))));
        assert!(
            allowed.contains(&stored.as_ref().map(strip)),
            "put_many {batch:?} ({outcome:?}): row {id} is {stored:?}"
        );
        match stored {
            Some(p) => model.insert(id, p),
            None => model.remove(&id),
        };
    }
    let emails: std::collections::BTreeSet<&String> = model.values().map(|p| &p.email).collect();
    assert_eq!(emails.len(), model.len(), "a unique email held twice after put_many {batch:?}");
}

/// A person without its version (a failed save leaves the in-memory version unknown).
fn strip(p: &Person) -> Person {
    Person { version: 0, ..p.clone() }
}

/// Every index query answers what the model implies.
fn check_queries(people: &Repository<Person>, model: &Model) {
    for email in 0..5 {
        let email = person(0, email, 0, 0, None).email;
        let want = model.values().find(|p| p.email == email).cloned();
        assert_eq!(people.index(Person::BY_EMAIL).get(email.clone()).unwrap(), want, "by_email {email}");
    }
    for city in 0..3 {
        let city = person(0, 0, city, 0, None).city;
        let mut want: Vec<&Person> = model.values().filter(|p| p.city == city).collect();
        want.sort_by_key(|p| (p.age, p.id));
        let by_city = people.index(Person::BY_CITY_AGE);
        let got = by_city.scan().prefix((city.clone(),)).to_vec().unwrap();
        assert_eq!(got.iter().collect::<Vec<_>>(), want, "by_city_age {city}");
        let keys: Vec<u32> = by_city.scan().prefix((city.clone(),)).keys().unwrap().into_iter().map(|k| k.id).collect();
        assert_eq!(keys, want.iter().map(|p| p.id).collect::<Vec<_>>(), "keys of {city}");
        let covered = by_city.scan().prefix((city.clone(),)).entries().unwrap();
        let names: Vec<String> = covered.iter().map(|e| e.get::<String>("name").unwrap()).collect();
        assert_eq!(names, want.iter().map(|p| p.name.clone()).collect::<Vec<_>>(), "covered names of {city}");
    }
    for tag in 0..2 {
        let tag = format!("t{tag}");
        let want: Vec<u32> = model.values().filter(|p| p.tag.as_deref() == Some(&tag)).map(|p| p.id).collect();
        let got: Vec<u32> = people
            .index(Person::BY_TAG)
            .scan()
            .prefix(tag.clone())
            .to_vec()
            .unwrap()
            .into_iter()
            .map(|p| p.id)
            .collect();
        assert_eq!(got, want, "by_tag {tag}");
    }
}

/// Which store the faults are injected into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    /// The embedded engine: index writes are atomic commits.
    Embedded,
    /// The embedded engine with its commits hidden: index writes take the protocol of several
    /// writes, as on Bigtable.
    EmbeddedProtocol,
    Bigtable,
}

/// Runs `ops` on a fresh store of `backend`, failing mutating call `fail_at` (0: none); returns
/// the mutating calls made.
fn run(backend: Backend, ops: &[Op], fail_at: u64, after: bool) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn Store> = match backend {
        Backend::Embedded | Backend::EmbeddedProtocol => {
            Arc::new(EmbeddedStore::new(Engine::open(dir.path(), EngineOptions::default()).unwrap()))
        }
        Backend::Bigtable => Arc::new(common::backend::bigtable_store().expect("checked by the caller")),
    };
    let store = Faulty::new(inner, 0, after);
    let store = Arc::new(if backend == Backend::EmbeddedProtocol { store.without_commits() } else { store });
    let db = Db::with_store(store.clone());
    let people = db.repo::<Person>().unwrap();
    // Faults start with the sequence, after the repository's set-up.
    store.calls.store(0, Ordering::SeqCst);
    store.fail_at.store(fail_at, Ordering::SeqCst);
    let mut model = Model::new();
    for op in ops {
        apply(&people, &mut model, op);
        check_queries(&people, &model);
    }
    let calls = store.calls.load(Ordering::SeqCst);
    store.fail_at.store(0, Ordering::SeqCst);
    for report in [
        people.verify_index(Person::BY_EMAIL).repair().run().unwrap(),
        people.verify_index(Person::BY_CITY_AGE).repair().run().unwrap(),
        people.verify_index(Person::BY_TAG).repair().run().unwrap(),
    ] {
        assert_eq!(report.violations, 0, "{report}");
    }
    for report in [
        people.verify_index(Person::BY_EMAIL).run().unwrap(),
        people.verify_index(Person::BY_CITY_AGE).run().unwrap(),
        people.verify_index(Person::BY_TAG).run().unwrap(),
    ] {
        assert!(report.is_clean(), "after repair:\n{report}");
    }
    check_queries(&people, &model);
    calls
}

fn every_fault_point(backend: Backend, ops: &[Op]) {
    let calls = run(backend, ops, 0, false);
    eprintln!("{backend:?}: fault points: {calls}");
    for k in 1..=calls {
        run(backend, ops, k, false);
        run(backend, ops, k, true);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn every_fault_point_leaves_index_queries_right(ops in prop::collection::vec(op(), 1..16)) {
        every_fault_point(Backend::Embedded, &ops);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4, ..ProptestConfig::default() })]

    /// The same with the engine's commits hidden: the protocol of several writes that
    /// Bigtable needs, on the embedded engine.
    #[test]
    fn every_fault_point_leaves_index_queries_right_without_commits(ops in prop::collection::vec(op(), 1..16)) {
        every_fault_point(Backend::EmbeddedProtocol, &ops);
    }
}

proptest! {
    // Each fault point is a fresh Bigtable instance: fewer, shorter sequences.
    #![proptest_config(ProptestConfig { cases: 4, ..ProptestConfig::default() })]

    /// The same on Bigtable, where the protocol cannot lean on atomic row groups or on being
    /// the only process.
    #[test]
    fn every_fault_point_leaves_index_queries_right_on_bigtable(ops in prop::collection::vec(op(), 1..10)) {
        if common::backend::emulator().is_some() {
            every_fault_point(Backend::Bigtable, &ops);
        }
    }
}
