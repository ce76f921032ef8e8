//! Re-keying copies: every entity of an old table read through its repository, mapped to an
//! entity with a new row key, and written through the new entity's repository, into a new
//! table of the same database or into another database. A job cut short resumes after its
//! last finished batch and every entity arrives exactly once; the new entity's indexes answer;
//! rows that do not decode, or that the mapping refuses, are reported by key.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use cellar::orm::copy::{RekeyProgress, RekeyReport};
use cellar::orm::store::{CellMutation, RowMutation};
use cellar::orm::{Entity as _, Error};
use cellar::prelude::*;
use common::faulty::Faulty;

const CUSTOMERS: u32 = 2500;
const REGIONS: [&str; 4] = ["eu-north", "eu-west", "us-east", "ap-south"];

/// The old layout: keyed by id alone, hash-salted over four buckets.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "customers", salt(buckets = 4))]
struct OldCustomer {
    #[cellar(key)]
    id: u32,
    #[cellar(column = "n")]
    name: String,
    #[cellar(column = "e")]
    email: String,
    #[cellar(column = "r")]
    region: String,
    #[cellar(column = "t")]
    tier: u8,
}

/// The new layout: keyed by (region, id), with a unique index and a plain one.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "customers_v2")]
struct Customer {
    #[cellar(key)]
    region: String,
    #[cellar(key)]
    id: u32,
    #[cellar(column = "n")]
    name: String,
    #[cellar(column = "e", index = "by_email", unique)]
    email: String,
    #[cellar(column = "t", index = "by_tier")]
    tier: u8,
}

/// The new layout again, in the old table's name: only another database can take it.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "customers")]
struct SameTable {
    #[cellar(key)]
    region: String,
    #[cellar(key)]
    id: u32,
}

/// The new layout with an optimistic version.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "customers_versioned")]
struct Versioned {
    #[cellar(key)]
    region: String,
    #[cellar(key)]
    id: u32,
    #[cellar(column = "n")]
    name: String,
    #[cellar(version)]
    version: u64,
}

fn old_customer(id: u32) -> OldCustomer {
    OldCustomer {
        id,
        name: format!("customer {id}"),
        email: format!("c{id}@example.com"),
        region: REGIONS[id as usize % REGIONS.len()].to_string(),
        tier: (id % 3) as u8,
    }
}

fn convert(old: OldCustomer) -> Customer {
    Customer { region: old.region, id: old.id, name: old.name, email: old.email, tier: old.tier }
}

/// `db` with `n` old customers.
fn seed(db: &Db, n: u32) {
    let old = db.repo::<OldCustomer>().unwrap();
    let all: Vec<OldCustomer> = (0..n).map(old_customer).collect();
    for chunk in all.chunks(500) {
        old.put_many(chunk).unwrap();
    }
}

/// A job's progress hook for a destination behind `faulty`: after batch `after` it arms
/// `faulty` to fail a call of the next batch, assuming each batch makes as many mutating
/// calls as the one before (the new entities' writes, then the checkpoint's save, last).
struct Interrupt {
    faulty: Arc<Faulty>,
    after: usize,
    /// Fail the next batch's checkpoint save (its entities written, the batch not recorded);
    /// otherwise its first write, after it applies (a lost acknowledgement).
    at_checkpoint: bool,
    /// Mutating calls made when each batch was reported.
    marks: Vec<u64>,
    reported: Vec<RekeyProgress>,
}

impl Interrupt {
    fn new(faulty: &Arc<Faulty>, after: usize, at_checkpoint: bool) -> Self {
        assert!(after >= 2, "two batches give the calls a batch makes");
        Interrupt { faulty: faulty.clone(), after, at_checkpoint, marks: Vec::new(), reported: Vec::new() }
    }

    fn batch_done(&mut self, progress: &RekeyProgress) {
        self.reported.push(progress.clone());
        self.marks.push(self.faulty.calls.load(Ordering::SeqCst));
        if self.marks.len() == self.after {
            let last = self.marks[self.after - 1];
            let per_batch = last - self.marks[self.after - 2];
            let (fail_at, apply) = if self.at_checkpoint { (last + per_batch, false) } else { (last + 1, true) };
            self.faulty.after.store(apply, Ordering::SeqCst);
            self.faulty.fail_at.store(fail_at, Ordering::SeqCst);
        }
    }
}

/// Progress reports of one run: counts that grow batch by batch, ending at the report's.
fn check_progress(reported: &[RekeyProgress], report: Option<&RekeyReport>, batch: u64) {
    assert!(!reported.is_empty());
    for (i, p) in reported.iter().enumerate() {
        assert_eq!((p.from_table, p.to_table), ("customers", "customers_v2"));
        // Full batches, the last one perhaps partial.
        let full = batch * (i as u64 + 1);
        if i + 1 < reported.len() {
            assert_eq!(p.read, full, "{reported:?}");
        } else {
            assert!(p.read <= full && p.read > full - batch, "{reported:?}");
        }
        assert_eq!(p.written, p.read);
        assert!(!p.last_key.is_empty());
    }
    for pair in reported.windows(2) {
        assert!(pair[1].read > pair[0].read && pair[1].written > pair[0].written, "{reported:?}");
        assert_ne!(pair[1].last_key, pair[0].last_key);
    }
    if let Some(report) = report {
        let last = reported.last().unwrap();
        assert_eq!((last.read, last.written, last.failed), (report.read, report.written, report.failed));
    }
}

/// The new table holds each old customer exactly once, under its new key, and the indexes
/// answer from it.
fn check_destination(db: &Db, context: &str) {
    let customers = db.repo::<Customer>().unwrap();
    let stored = customers.scan().to_vec().unwrap();
    assert_eq!(stored.len(), CUSTOMERS as usize, "{context}: one entity per old customer");
    let ids: BTreeSet<u32> = stored.iter().map(|c| c.id).collect();
    assert_eq!(ids.len(), CUSTOMERS as usize, "{context}: no customer twice");
    for c in &stored {
        assert_eq!(*c, convert(old_customer(c.id)), "{context}");
    }
    // In the new key order: by region, then id.
    let mut order: Vec<(String, u32)> = stored.iter().map(|c| (c.region.clone(), c.id)).collect();
    let keys = order.clone();
    order.sort();
    assert_eq!(keys, order, "{context}: scanned in (region, id) order");
    let in_region = customers.scan().prefix(CustomerKey::region("us-east".to_string())).to_vec().unwrap();
    assert_eq!(in_region.len(), CUSTOMERS as usize / 4, "{context}");
    assert_eq!(customers.get(("us-east".to_string(), 2u32)).unwrap(), Some(convert(old_customer(2))), "{context}");

    let by_email = customers.index(Customer::BY_EMAIL);
    for id in [0, 1, 777, CUSTOMERS - 1] {
        let found = by_email.get(format!("c{id}@example.com")).unwrap();
        assert_eq!(found, Some(convert(old_customer(id))), "{context}: by_email {id}");
    }
    let tier_two = customers.index(Customer::BY_TIER).scan().prefix(2u8).keys().unwrap();
    assert_eq!(tier_two.len(), (0..CUSTOMERS).filter(|id| id % 3 == 2).count(), "{context}: by_tier");
    for index in [customers.verify_index(Customer::BY_EMAIL), customers.verify_index(Customer::BY_TIER)] {
        let report = index.run().unwrap();
        // An interrupted index write may leave unverified entries, which readers settle.
        assert_eq!(
            (report.missing, report.outdated, report.stale, report.violations),
            (0, 0, 0, 0),
            "{context}\n{report}"
        );
    }
}

on_every_backend! {
fn a_rekey_into_the_same_db_resumes_after_its_last_batch(db: Db) {
    seed(&db, CUSTOMERS);
    // The same database behind a store that fails the checkpoint save of the third batch:
    // its entities are written, the batch is not recorded.
    let faulty = Arc::new(Faulty::new(db.store().clone(), 0, false));
    let failing = Db::with_store(faulty.clone());
    let mut interrupt = Interrupt::new(&faulty, 2, true);
    let err = db
        .copy_to(&failing)
        .rekey(convert)
        .batch_rows(500)
        .on_progress(|p| interrupt.batch_done(p))
        .run()
        .unwrap_err();
    assert!(err.to_string().contains("injected failure"), "{err}");
    check_progress(&interrupt.reported, None, 500);
    assert_eq!(interrupt.reported.len(), 2);
    let written = db.repo::<Customer>().unwrap().scan().to_vec().unwrap().len();
    assert_eq!(written, 1500, "the third batch was written before its checkpoint failed");

    let mut reported = Vec::new();
    let report =
        db.copy_to(&db).rekey(convert).batch_rows(500).on_progress(|p| reported.push(p.clone())).run().unwrap();
    println!("{report}");
    assert!(report.resumed_after.is_some(), "{report}");
    assert_eq!((report.read, report.written, report.skipped, report.failed), (1500, 1500, 0, 0));
    check_progress(&reported, Some(&report), 500);
    assert_eq!(reported.len(), 3);
    check_destination(&db, "resumed");
    // The source is as it was.
    assert_eq!(db.repo::<OldCustomer>().unwrap().scan().to_vec().unwrap().len(), CUSTOMERS as usize);

    // Finished: the checkpoint is gone, and a second pass writes everything again, harmlessly.
    let again = db.copy_to(&db).rekey(convert).run().unwrap();
    assert_eq!((again.resumed_after.as_deref(), again.read, again.written), (None, 2500, 2500), "{again}");
    check_destination(&db, "second pass");
}
}

on_every_backend! {
fn a_rekey_into_another_db_resumes_after_a_lost_write(db: Db) {
    let local = Db::open_temporary().unwrap();
    seed(&local, CUSTOMERS);
    // The fourth batch's first write applies, then fails.
    let faulty = Arc::new(Faulty::new(db.store().clone(), 0, false));
    let failing = Db::with_store(faulty.clone());
    let mut interrupt = Interrupt::new(&faulty, 3, false);
    let err = local
        .copy_to(&failing)
        .rekey(convert)
        .batch_rows(600)
        .on_progress(|p| interrupt.batch_done(p))
        .run()
        .unwrap_err();
    assert!(err.to_string().contains("injected failure"), "{err}");
    check_progress(&interrupt.reported, None, 600);

    let mut reported = Vec::new();
    let report =
        local.copy_to(&db).rekey(convert).batch_rows(600).on_progress(|p| reported.push(p.clone())).run().unwrap();
    println!("{report}");
    assert!(report.resumed_after.is_some());
    assert_eq!((report.read, report.written), (CUSTOMERS as u64 - 1800, CUSTOMERS as u64 - 1800), "{report}");
    check_progress(&reported, Some(&report), 600);
    check_destination(&db, "another db");
    // Nothing of the new layout in the source.
    assert_eq!(local.store().describe("customers_v2").unwrap(), None);
}
}

on_every_backend! {
fn a_rekey_into_the_table_it_reads_is_refused(db: Db) {
    seed(&db, 40);
    let into_itself = |to: &Db| db.copy_to(to).rekey(|o: OldCustomer| SameTable { region: o.region, id: o.id }).run();
    for to in [db.clone(), Db::with_store(db.store().clone())] {
        match into_itself(&to) {
            Err(Error::InvalidArgument { reason, .. }) => {
                assert!(reason.contains("share table `customers`"), "{reason}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    // The probe that told the second handle for the same database left nothing behind.
    let jobs = db.store().scan("cellar_jobs", &Default::default()).unwrap().count();
    assert_eq!(jobs, 0);
    assert_eq!(db.repo::<OldCustomer>().unwrap().scan().to_vec().unwrap().len(), 40);

    // Another database may take the old table's name.
    let other = Db::open_temporary().unwrap();
    let report = into_itself(&other).unwrap();
    assert_eq!(report.written, 40);
    assert_eq!(other.repo::<SameTable>().unwrap().scan().to_vec().unwrap().len(), 40);

    // A copy that names tables, or a source without the table, is refused too.
    let err = db.copy_to(&other).table("customers").rekey(convert).run().unwrap_err();
    assert!(matches!(&err, Error::InvalidArgument { reason, .. } if reason.contains("customers")), "{err}");
    let empty = Db::open_temporary().unwrap();
    let err = empty.copy_to(&db).rekey(convert).run().unwrap_err();
    assert!(matches!(&err, Error::InvalidArgument { reason, .. } if reason.contains("no table")), "{err}");
}
}

on_every_backend! {
fn rows_that_do_not_decode_are_reported_by_key(db: Db) {
    seed(&db, 60);
    // Customer 17's name is not UTF-8: the row does not decode.
    let row = OldCustomer::row_key(&OldCustomerKey::from(17)).unwrap().for_write();
    let printable = cellar::engine::to_printable(&row);
    let not_utf8 = vec![0xFF, 0xFE].into();
    let put = CellMutation::Put { family: "d".into(), qualifier: "n".into(), value: not_utf8, timestamp: None };
    db.store().mutate("customers", vec![RowMutation { row, mutations: vec![put] }]).unwrap();

    let report = db.copy_to(&db).rekey(convert).batch_rows(10).run().unwrap();
    println!("{report}");
    assert_eq!((report.read, report.written, report.failed), (59, 59, 1));
    assert_eq!(report.failures[0].row, printable);
    assert!(report.failures[0].reason.contains("d:n"), "{}", report.failures[0].reason);
    assert!(report.to_string().contains(&printable));
    assert_eq!(db.repo::<Customer>().unwrap().scan().to_vec().unwrap().len(), 59);

    // Stopping at it instead: the entities before it are finished and a next run resumes
    // after them.
    let to = Db::open_temporary().unwrap();
    let err = db.copy_to(&to).rekey(convert).batch_rows(10).stop_on_error().run().unwrap_err();
    assert!(matches!(&err, Error::Decode { row, .. } if *row == printable), "{err}");
    let before = to.repo::<Customer>().unwrap().scan().to_vec().unwrap().len() as u64;
    let rest = db.copy_to(&to).rekey(convert).batch_rows(10).run().unwrap();
    assert!(rest.resumed_after.is_some() || before == 0, "{rest}");
    assert_eq!((rest.read + before, rest.failed), (59, 1), "{rest}");
}
}

on_every_backend! {
fn a_mapping_may_skip_or_refuse_entities(db: Db) {
    seed(&db, 60);
    let map = |old: OldCustomer| match old.id {
        // Left out: an obsolete customer.
        id if id % 10 == 0 => Ok(None),
        13 => Err(format!("no region for {}", old.name)),
        _ => Ok(Some(convert(old))),
    };
    let report = db.copy_to(&db).try_rekey(map).batch_rows(7).run().unwrap();
    assert_eq!((report.read, report.written, report.skipped, report.failed), (60, 53, 6, 1), "{report}");
    assert!(report.failures[0].reason.contains("no region for customer 13"), "{report}");
    let row = OldCustomer::row_key(&OldCustomerKey::from(13)).unwrap().for_write();
    // Named by its row, as a row that does not decode is.
    assert_eq!(report.failures[0].row, cellar::engine::to_printable(&row));
    let ids: BTreeSet<u32> = db.repo::<Customer>().unwrap().scan().to_vec().unwrap().iter().map(|c| c.id).collect();
    assert_eq!(ids, (0..60).filter(|id| id % 10 != 0 && *id != 13).collect());

    let to = Db::open_temporary().unwrap();
    let err = db.copy_to(&to).try_rekey(map).stop_on_error().run().unwrap_err();
    match err {
        Error::Rekey { table: "customers", reason, .. } => assert_eq!(reason, "no region for customer 13"),
        other => panic!("expected the mapping's refusal, got {other:?}"),
    }
}
}

on_every_backend! {
fn a_versioned_entity_counts_the_writes_of_its_new_table(db: Db) {
    seed(&db, 30);
    let map = |old: OldCustomer| Versioned { region: old.region, id: old.id, name: old.name, version: 99 };
    // The third batch is written, and its checkpoint save fails: a resumed run writes it again.
    let faulty = Arc::new(Faulty::new(db.store().clone(), 0, false));
    let failing = Db::with_store(faulty.clone());
    let mut interrupt = Interrupt::new(&faulty, 2, true);
    db.copy_to(&failing).rekey(map).batch_rows(10).on_progress(|p| interrupt.batch_done(p)).run().unwrap_err();
    let report = db.copy_to(&db).rekey(map).batch_rows(10).run().unwrap();
    assert_eq!(report.written, 10, "{report}");

    let repo = db.repo::<Versioned>().unwrap();
    let stored = repo.scan().to_vec().unwrap();
    assert_eq!(stored.len(), 30);
    // The mapping's version is not written: a put stores the stored version + 1.
    let twice = stored.iter().filter(|v| v.version == 2).count();
    let once = stored.iter().filter(|v| v.version == 1).count();
    assert_eq!((once, twice), (20, 10), "the third batch was written twice");
    for v in &stored {
        assert_eq!(v.name, format!("customer {}", v.id));
    }
    // A save of an entity read from the new table works as ever.
    let mut first = stored[0].clone();
    first.name = "renamed".into();
    repo.save(&mut first).unwrap();
    let read = repo.get((first.region.clone(), first.id)).unwrap().map(|v| (v.name, v.version));
    assert_eq!(read, Some(("renamed".into(), first.version)));
}
}

/// The job resumes where a page cursor of the old (salted) table would: the keys it keeps are
/// the cursor's, without the salt byte, and pages still follow key order across buckets.
#[test]
fn pages_of_the_salted_old_table_follow_key_order() {
    let db = Db::open_temporary().unwrap();
    seed(&db, 50);
    let old = db.repo::<OldCustomer>().unwrap();
    let mut ids = Vec::new();
    let mut cursor = None;
    loop {
        let mut scan = old.scan();
        if let Some(c) = &cursor {
            scan = scan.after(c);
        }
        let page = scan.page(7).unwrap();
        ids.extend(page.items.iter().map(|c| c.id));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(ids, (0..50).collect::<Vec<_>>());
}
