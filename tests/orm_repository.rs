//! Repositories end to end on every backend: writes and reads, typed prefix and range
//! scans in both directions with pagination, counters, optimistic versions, history, salted
//! and hashed keys, record types sharing a table, and rows that do not decode.
//!
//! Each test runs on every backend: the embedded engine and the Bigtable emulator.

use cellar::orm::store::{CellMutation, RowMutation};
use cellar::orm::{Entity as _, Error};
use cellar::prelude::*;

mod common;

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "crm", record_type = 1)]
struct Customer {
    #[cellar(partition)]
    id: u64,
    #[cellar(column = "n")]
    name: String,
    #[cellar(family = "a", column = "c")]
    city: Option<String>,
    #[cellar(counter, column = "oc")]
    orders: i64,
    #[cellar(version)]
    version: u64,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "crm", record_type = 2)]
struct Order {
    #[cellar(partition)]
    customer: u64,
    #[cellar(key, desc)]
    number: u32,
    #[cellar(column = "t")]
    total_cents: i64,
    #[cellar(serde, column = "l")]
    lines: Vec<(String, u32)>,
}

/// A put writes the mutations the derive builds directly, and they are the entity's cells:
/// puts of the stored fields (counters left out), a column delete for a `None` field.
#[test]
fn derived_put_mutations_are_the_entity_cells() {
    let as_mutations = |e: &dyn Fn(&mut Vec<CellMutation>) -> cellar::orm::Result<()>| {
        let mut out = Vec::new();
        e(&mut out).unwrap();
        out
    };
    let mut c = customer(7, "Ada");
    for city in [Some("Oslo".to_string()), None] {
        c.city = city;
        let direct = as_mutations(&|out| c.push_cell_mutations(out));
        let via_cells: Vec<CellMutation> = c.cells().unwrap().into_iter().map(|cell| cell.into_mutation()).collect();
        assert_eq!(direct, via_cells);
        let city_mutation = direct.iter().find(|m| matches!(m, CellMutation::Put { family, .. } | CellMutation::DeleteColumn { family, .. } if family == "a"));
        match (&c.city, city_mutation) {
            (Some(_), Some(CellMutation::Put { qualifier, value, .. })) => {
                assert_eq!((&qualifier[..], &value[..]), (&b"c"[..], &b"Oslo"[..]))
            }
            (None, Some(CellMutation::DeleteColumn { qualifier, .. })) => assert_eq!(&qualifier[..], b"c"),
            other => panic!("city {:?} written as {:?}", c.city, other.1),
        }
        assert!(
            !direct.iter().any(|m| matches!(m, CellMutation::Put { qualifier, .. } if qualifier == "oc")),
            "a put never writes a counter"
        );
    }
    let o = order(7, 3);
    let direct = as_mutations(&|out| o.push_cell_mutations(out));
    let via_cells: Vec<CellMutation> = o.cells().unwrap().into_iter().map(|cell| cell.into_mutation()).collect();
    assert_eq!(direct, via_cells, "serde fields too");
    assert_eq!(direct.len(), 2);
}

fn customer(id: u64, name: &str) -> Customer {
    Customer { id, name: name.into(), city: Some("Oslo".into()), orders: 0, version: 0 }
}

fn order(customer: u64, number: u32) -> Order {
    Order { customer, number, total_cents: i64::from(number) * 100, lines: vec![("tea".into(), number)] }
}

on_every_backend! {
fn put_get_delete_and_optional_fields(db: Db) {
    let customers = db.repo::<Customer>().unwrap();
    let mut ada = customer(1, "Ada");
    customers.put(&ada).unwrap();
    // Stored as given, but for the version: a first write stores version 1.
    assert_eq!(customers.get(1).unwrap(), Some(Customer { version: 1, ..ada.clone() }));
    assert!(customers.exists(1).unwrap());
    assert!(!customers.exists(2).unwrap());
    // None removes the stored cell rather than leaving the old city behind.
    ada.city = None;
    customers.put(&ada).unwrap();
    assert_eq!(customers.get(1).unwrap().unwrap().city, None);
    customers.put_many(&[customer(2, "Bob"), customer(3, "Cy")]).unwrap();
    let many = customers.get_many([3u64, 9, 2]).unwrap();
    assert_eq!(
        many.iter().map(|c| c.as_ref().map(|c| c.name.as_str())).collect::<Vec<_>>(),
        [Some("Cy"), None, Some("Bob")]
    );
    customers.delete(2).unwrap();
    assert_eq!(customers.get(2).unwrap(), None);
}
}

on_every_backend! {
fn record_types_share_a_table_and_scans_skip_the_others(db: Db) {
    let customers = db.repo::<Customer>().unwrap();
    let orders = db.repo::<Order>().unwrap();
    for id in 1..=3 {
        customers.put(&customer(id, "c")).unwrap();
        for n in 1..=4 {
            orders.put(&order(id, n)).unwrap();
        }
    }
    assert_eq!(customers.scan().to_vec().unwrap().len(), 3);
    // One customer's orders with one prefix scan; `desc` lists the newest number first.
    let of_two = orders.scan().prefix(OrderKey::customer(2)).to_vec().unwrap();
    assert_eq!(of_two.iter().map(|o| (o.customer, o.number)).collect::<Vec<_>>(), [(2, 4), (2, 3), (2, 2), (2, 1)]);
    let reversed = orders.scan().prefix(OrderKey::customer(2)).reverse().limit(2).to_vec().unwrap();
    assert_eq!(reversed.iter().map(|o| o.number).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(orders.scan().to_vec().unwrap().len(), 12, "a scan of orders skips customers");
    assert_eq!(orders.get((2, 3)).unwrap(), Some(order(2, 3)));
}
}

on_every_backend! {
fn ranges_and_pages_walk_every_entity_once_in_both_directions(db: Db) {
    let customers = db.repo::<Customer>().unwrap();
    for id in 0..25 {
        customers.put(&customer(id, &format!("c{id}"))).unwrap();
    }
    let range = customers.scan().range(CustomerKey::from(5)..CustomerKey::from(9)).to_vec().unwrap();
    assert_eq!(range.iter().map(|c| c.id).collect::<Vec<_>>(), [5, 6, 7, 8]);
    let inclusive = customers.scan().range(CustomerKey::from(5)..=CustomerKey::from(6)).reverse().to_vec().unwrap();
    assert_eq!(inclusive.iter().map(|c| c.id).collect::<Vec<_>>(), [6, 5]);
    for reverse in [false, true] {
        let mut seen = Vec::new();
        let mut cursor: Option<Cursor> = None;
        loop {
            let mut q = customers.scan();
            if reverse {
                q = q.reverse();
            }
            if let Some(c) = &cursor {
                // Cursors survive a round trip through text.
                q = q.after(&c.to_string().parse().unwrap());
            }
            let page = q.page(7).unwrap();
            assert!(page.items.len() <= 7);
            seen.extend(page.items.iter().map(|c| c.id));
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let mut expected: Vec<u64> = (0..25).collect();
        if reverse {
            expected.reverse();
        }
        assert_eq!(seen, expected);
    }
    assert!(matches!("x12".parse::<Cursor>(), Err(Error::InvalidArgument { arg: "cursor", .. })));
    assert!(matches!(customers.scan().page(0), Err(Error::InvalidArgument { arg: "size", .. })));
}
}

on_every_backend! {
fn counters_and_optimistic_versions(db: Db) {
    let customers = db.repo::<Customer>().unwrap();
    let mut ada = customer(1, "Ada");
    customers.save(&mut ada).unwrap();
    assert_eq!(ada.version, 1);
    assert_eq!(customers.increment(1, Customer::ORDERS, 2).unwrap(), 2);
    assert_eq!(customers.increment(1, Customer::ORDERS, 3).unwrap(), 5);
    // A put leaves the counter alone, and moves the version on.
    customers.put(&ada).unwrap();
    let mut stale = customers.get(1).unwrap().unwrap();
    assert_eq!((stale.orders, stale.version), (5, 2));
    let mut fresh = stale.clone();
    fresh.name = "Ada L.".into();
    customers.save(&mut fresh).unwrap();
    stale.name = "lost update".into();
    assert!(matches!(customers.save(&mut stale), Err(Error::VersionConflict { expected: 2, .. })));
    assert_eq!(customers.get(1).unwrap().unwrap().name, "Ada L.");
    let mut new = customer(7, "New");
    new.version = 3;
    assert!(matches!(customers.save(&mut new), Err(Error::VersionConflict { .. })), "version 3 of a missing row");
}
}

on_every_backend! {
fn a_put_moves_the_version_on_so_a_save_of_an_earlier_read_fails(db: Db) {
    let customers = db.repo::<Customer>().unwrap();
    let version = |id: u64| customers.get(id).unwrap().unwrap().version;
    let mut ada = customer(1, "Ada");
    customers.save(&mut ada).unwrap();
    let mut read = customers.get(1).unwrap().unwrap();
    assert_eq!(read.version, 1);
    // Another writer puts the customer from a copy of the same read: the version still moves
    // on, so the save of the earlier read cannot overwrite the put.
    let mut other = read.clone();
    other.name = "Ada, put".into();
    customers.put(&other).unwrap();
    assert_eq!(version(1), 2);
    read.name = "lost update".into();
    assert!(matches!(customers.save(&mut read), Err(Error::VersionConflict { expected: 1, .. })));
    assert_eq!(customers.get(1).unwrap().unwrap().name, "Ada, put");
    // A put of a copy that holds version 0 (built, not read) never takes the version back:
    // a save holding 0, which means "no such customer yet", still fails over the stored one.
    customers.put(&customer(1, "Ada, rebuilt")).unwrap();
    assert_eq!(version(1), 3);
    let mut fresh = customer(1, "Ada, created twice");
    assert!(matches!(customers.save(&mut fresh), Err(Error::VersionConflict { expected: 0, .. })));
    // Nor does one holding a version ahead of the stored one set it.
    let mut ahead = customer(1, "Ada, ahead");
    ahead.version = 100;
    customers.put(&ahead).unwrap();
    assert_eq!(version(1), 4);
    assert!(matches!(customers.save(&mut ahead), Err(Error::VersionConflict { expected: 100, .. })));
    // The first put of a customer stores version 1, as a first save does.
    customers.put(&customer(2, "Bea")).unwrap();
    assert_eq!(version(2), 1);
    assert!(matches!(customers.save(&mut customer(2, "Bea again")), Err(Error::VersionConflict { .. })));
    // put_many follows the same rule, row by row.
    customers.put_many(&[customer(1, "Ada, batch"), customer(2, "Bea, batch"), customer(3, "Cy")]).unwrap();
    assert_eq!((version(1), version(2), version(3)), (5, 2, 1));
    // A save of a read made after the puts goes through, and moves on by one.
    let mut latest = customers.get(1).unwrap().unwrap();
    latest.name = "Ada, saved".into();
    customers.save(&mut latest).unwrap();
    assert_eq!((latest.version, version(1)), (6, 6));
}
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "profiles", max_versions = 5, salt(buckets = 4))]
struct Profile {
    #[cellar(key, hash = "md5")]
    email: String,
    #[cellar(column = "s")]
    status: String,
}

on_every_backend! {
fn history_and_as_of_reads(db: Db) {
    let profiles = db.repo::<Profile>().unwrap();
    let email = "ada@example.com".to_string();
    for status in ["new", "active", "away"] {
        profiles.put(&Profile { email: email.clone(), status: status.into() }).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(3));
    }
    let history = profiles.history(email.clone(), 10).unwrap();
    assert_eq!(history.iter().map(|(_, p)| p.status.as_str()).collect::<Vec<_>>(), ["away", "active", "new"]);
    let (active_at, _) = history[1];
    assert_eq!(profiles.get_as_of(email.clone(), active_at).unwrap().unwrap().status, "active");
    assert_eq!(profiles.get_as_of(email, history[2].0 - 1).unwrap(), None);
}
}

on_every_backend! {
fn salted_hashed_keys_restore_their_values_and_scans_merge_buckets_in_key_order(db: Db) {
    let profiles = db.repo::<Profile>().unwrap();
    let emails: Vec<String> = (0..40).map(|i| format!("user{i}@example.com")).collect();
    for e in &emails {
        profiles.put(&Profile { email: e.clone(), status: "ok".into() }).unwrap();
    }
    assert_eq!(profiles.get(emails[7].clone()).unwrap().unwrap().email, emails[7]);
    let scanned = profiles.scan().to_vec().unwrap();
    assert_eq!(scanned.len(), 40);
    // Key order is MD5 order across the four buckets.
    let digests: Vec<_> = scanned.iter().map(|p| cellar::orm::key::md5_of(&p.email, "email").unwrap()).collect();
    assert!(digests.windows(2).all(|w| w[0] < w[1]));
    let spec = Profile::SCHEMA;
    assert_eq!(spec.salt.buckets(), 4);
}
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "tickets", salt(buckets = 4))]
struct Ticket {
    #[cellar(key)]
    id: u32,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "readings", bucket(field = "at", buckets = 4))]
struct Reading {
    #[cellar(key)]
    at: u64,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "visits", salt(buckets = 4))]
struct Visit {
    #[cellar(partition)]
    site: u32,
    #[cellar(key)]
    n: u32,
}

on_every_backend! {
fn ranges_over_salted_keys_return_every_key_in_range_whatever_bucket_the_ends_fall_in(db: Db) {
    let (tickets, readings, visits) =
        (db.repo::<Ticket>().unwrap(), db.repo::<Reading>().unwrap(), db.repo::<Visit>().unwrap());
    for i in 0..12 {
        tickets.put(&Ticket { id: i }).unwrap();
        readings.put(&Reading { at: u64::from(i) }).unwrap();
        for n in 0..3 {
            visits.put(&Visit { site: i, n }).unwrap();
        }
    }
    for a in 0..12u32 {
        for b in a..13 {
            let got: Vec<u32> = tickets
                .scan()
                .range(TicketKey::from(a)..TicketKey::from(b))
                .iter()
                .unwrap()
                .map(|t| t.unwrap().id)
                .collect();
            assert_eq!(got, (a..b).collect::<Vec<_>>(), "tickets {a}..{b}");
            let (a64, b64) = (u64::from(a), u64::from(b));
            let got: Vec<u64> = readings
                .scan()
                .range(ReadingKey::from(a64)..ReadingKey::from(b64))
                .iter()
                .unwrap()
                .map(|r| r.unwrap().at)
                .collect();
            assert_eq!(got, (a64..b64).collect::<Vec<_>>(), "readings {a}..{b}");
            // Across partitions, and inside one (where the range lies in the partition's bucket).
            let across = visits.scan().range(VisitKey::from((a, 1))..=VisitKey::from((b, 1))).to_vec().unwrap();
            let expected: Vec<(u32, u32)> = (a..=b.min(11))
                .flat_map(|s| (0..3).map(move |n| (s, n)))
                .filter(|&k| k >= (a, 1) && k <= (b, 1))
                .collect();
            assert_eq!(across.iter().map(|v| (v.site, v.n)).collect::<Vec<_>>(), expected, "visits {a}..={b}");
        }
        let inside = visits.scan().range(VisitKey::from((a, 1))..VisitKey::from((a, 3))).to_vec().unwrap();
        assert_eq!(inside.iter().map(|v| v.n).collect::<Vec<_>>(), [1, 2]);
    }
}
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "notes")]
struct Note {
    #[cellar(key)]
    id: u32,
    #[cellar(column = "t")]
    text: Option<String>,
}

on_every_backend! {
fn entities_with_nothing_to_store_but_their_key_still_exist(db: Db) {
    let visits = db.repo::<Visit>().unwrap();
    visits.put(&Visit { site: 7, n: 1 }).unwrap();
    assert!(visits.exists((7, 1)).unwrap());
    assert_eq!(visits.scan().to_vec().unwrap(), [Visit { site: 7, n: 1 }]);
    visits.delete((7, 1)).unwrap();
    assert!(!visits.exists((7, 1)).unwrap());

    let notes = db.repo::<Note>().unwrap();
    notes.put(&Note { id: 1, text: Some("draft".into()) }).unwrap();
    // Clearing the only field keeps the note, without its text.
    notes.put(&Note { id: 1, text: None }).unwrap();
    assert_eq!(notes.get(1).unwrap(), Some(Note { id: 1, text: None }));
    notes.put(&Note { id: 2, text: None }).unwrap();
    assert_eq!(notes.scan().to_vec().unwrap().len(), 2);
}
}

on_every_backend! {
fn rows_that_do_not_decode_are_errors_naming_row_and_column(db: Db) {
    let customers = db.repo::<Customer>().unwrap();
    customers.put(&customer(5, "Eve")).unwrap();
    let row = <Customer as cellar::orm::Entity>::row_key(&CustomerKey::from(5)).unwrap().for_write();
    let bad = RowMutation {
        row,
        mutations: vec![CellMutation::Put {
            family: "d".into(),
            qualifier: "version".into(),
            value: vec![1, 2].into(),
            timestamp: None,
        }],
    };
    db.store().mutate("crm", vec![bad]).unwrap();
    match customers.get(5) {
        Err(Error::Decode { table: "crm", row, column: Some(column), reason }) => {
            assert_eq!(column, "d:version");
            assert!(row.contains("\\x00"), "{row}");
            assert!(reason.contains("version"), "{reason}");
        }
        other => panic!("expected a decode error, got {other:?}"),
    }
}
}

on_every_backend! {
fn an_existing_table_must_fit_the_entity(db: Db) {
    db.repo::<Customer>().unwrap();
    #[derive(Entity, Debug)]
    #[cellar(table = "crm", max_versions = 3)]
    struct Conflicting {
        #[cellar(key)]
        id: u64,
    }
    assert!(matches!(db.repo::<Conflicting>(), Err(Error::SchemaMismatch { .. })));
}
}
