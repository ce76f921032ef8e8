//! Single-table designs: customers and their orders in one table under one partition prefix,
//! read back typed through a `#[derive(Record)]` enum with one scan per partition.
//!
//! Each test runs on every backend: the embedded engine and the Bigtable emulator.

use cellar::orm::store::{CellMutation, RowMutation};
use cellar::orm::Error;
use cellar::prelude::*;

mod common;

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "shop", record_type = 1, salt(buckets = 4))]
struct Customer {
    #[cellar(partition)]
    customer: String,
    #[cellar(column = "n")]
    name: String,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "shop", record_type = 2, salt(buckets = 4))]
struct Order {
    #[cellar(partition)]
    customer: String,
    #[cellar(key, desc)]
    placed: Timestamp,
    #[cellar(key)]
    number: u32,
    #[cellar(column = "t")]
    total_cents: i64,
}

/// Shares the table but is not a member of `ShopRecord`: partition scans skip it.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "shop", record_type = 3, salt(buckets = 4))]
struct Note {
    #[cellar(partition)]
    customer: String,
    #[cellar(key)]
    seq: u32,
    #[cellar(column = "x")]
    text: String,
}

#[derive(Record, Debug, Clone, PartialEq)]
enum ShopRecord {
    Customer(Customer),
    Order(Order),
}

fn order(customer: &str, placed: u64, number: u32) -> Order {
    Order { customer: customer.into(), placed: Timestamp(placed), number, total_cents: i64::from(number) * 250 }
}

/// Three customers whose names share prefixes (a raw string partition would mix them up),
/// three orders each, and a note each.
fn shop(db: Db) -> Db {
    let customers = db.repo::<Customer>().unwrap();
    let orders = db.repo::<Order>().unwrap();
    let notes = db.repo::<Note>().unwrap();
    for (i, c) in ["ann", "anna", "bob"].into_iter().enumerate() {
        customers.put(&Customer { customer: c.into(), name: c.to_uppercase() }).unwrap();
        for n in 0..3u32 {
            orders.put(&order(c, 1_000 + u64::from(n) * 10, (i as u32) * 10 + n)).unwrap();
        }
        notes.put(&Note { customer: c.into(), seq: 1, text: "call back".into() }).unwrap();
    }
    db
}

fn describe(r: &ShopRecord) -> String {
    match r {
        ShopRecord::Customer(c) => format!("customer {}", c.customer),
        ShopRecord::Order(o) => format!("order {}/{}@{}", o.customer, o.number, o.placed.as_millis()),
    }
}

on_every_backend! {
fn one_partition_scan_returns_the_customer_then_its_orders_newest_first(db: Db) {
    let db = shop(db);
    let records = db.records::<ShopRecord>().unwrap();
    let anna: Vec<String> = records
        .scan()
        .partition(CustomerKey::customer("anna".into()))
        .iter()
        .unwrap()
        .map(|r| describe(&r.unwrap()))
        .collect();
    assert_eq!(anna, ["customer anna", "order anna/12@1020", "order anna/11@1010", "order anna/10@1000"]);
    // The same partition from an order key prefix, and backwards.
    let back: Vec<String> = records
        .scan()
        .partition(OrderKey::customer("anna".into()))
        .reverse()
        .to_vec()
        .unwrap()
        .iter()
        .map(describe)
        .collect();
    assert_eq!(back, ["order anna/10@1000", "order anna/11@1010", "order anna/12@1020", "customer anna"]);
    // A prefix reaching into the order key covers orders only.
    let newest = records.scan().partition(OrderKey::customer("bob".into()).placed(Timestamp(1_020))).to_vec().unwrap();
    assert_eq!(newest.iter().map(describe).collect::<Vec<_>>(), ["order bob/22@1020"]);
}
}

on_every_backend! {
fn a_whole_table_scan_merges_buckets_and_each_repository_sees_its_own_type(db: Db) {
    let db = shop(db);
    let records = db.records::<ShopRecord>().unwrap();
    let all = records.scan().to_vec().unwrap();
    assert_eq!(all.len(), 12, "three customers and nine orders; notes are not members");
    assert_eq!(all.iter().filter(|r| matches!(r, ShopRecord::Customer(_))).count(), 3);
    // Every customer is directly followed by its own orders.
    for (i, r) in all.iter().enumerate() {
        if let ShopRecord::Customer(c) = r {
            for next in &all[i + 1..i + 4] {
                assert!(matches!(next, ShopRecord::Order(o) if o.customer == c.customer), "{all:?}");
            }
        }
    }
    assert_eq!(db.repo::<Customer>().unwrap().scan().to_vec().unwrap().len(), 3);
    assert_eq!(db.repo::<Order>().unwrap().scan().to_vec().unwrap().len(), 9);
    assert_eq!(db.repo::<Note>().unwrap().scan().to_vec().unwrap().len(), 3);
    let converted: ShopRecord = order("x", 1, 1).into();
    assert!(matches!(converted, ShopRecord::Order(_)));
}
}

on_every_backend! {
fn partition_scans_page_with_cursors(db: Db) {
    let db = shop(db);
    let records = db.records::<ShopRecord>().unwrap();
    let first = records.scan().partition(CustomerKey::customer("ann".into())).page(3).unwrap();
    assert_eq!(first.items.len(), 3);
    let cursor = first.next.expect("a fourth record follows");
    let rest = records.scan().partition(CustomerKey::customer("ann".into())).after(&cursor).page(3).unwrap();
    assert_eq!(rest.items.iter().map(describe).collect::<Vec<_>>(), ["order ann/0@1000"]);
    assert!(rest.next.is_none());
}
}

on_every_backend! {
fn a_member_row_that_does_not_decode_names_row_and_column(db: Db) {
    let db = shop(db);
    let orders = db.repo::<Order>().unwrap();
    let row = Order::row_key(&OrderKey::from(("bob".to_string(), Timestamp(1_010), 21))).unwrap().for_write();
    db.store()
        .mutate(
            "shop",
            vec![RowMutation {
                row,
                mutations: vec![CellMutation::Put {
                    family: "d".into(),
                    qualifier: "t".into(),
                    value: vec![1, 2, 3].into(),
                    timestamp: None,
                }],
            }],
        )
        .unwrap();
    assert!(matches!(orders.get(("bob".to_string(), Timestamp(1_010), 21)), Err(Error::Decode { .. })));
    let records = db.records::<ShopRecord>().unwrap();
    let err = records.scan().partition(CustomerKey::customer("bob".into())).to_vec().unwrap_err();
    match err {
        Error::Decode { table, row, column, .. } => {
            assert_eq!(table, "shop");
            assert!(row.contains("bob"), "{row}");
            assert_eq!(column.as_deref(), Some("d:t"));
        }
        other => panic!("expected a decode error, got {other}"),
    }
}
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "accounts", record_type = 1)]
struct Account {
    #[cellar(partition, hash = "md5", column = "a")]
    owner: String,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "accounts", record_type = 2)]
struct Payment {
    #[cellar(partition, hash = "md5", column = "a")]
    owner: String,
    #[cellar(key)]
    n: u32,
}

#[derive(Record, Debug, Clone, PartialEq)]
enum AccountRecord {
    Account(Account),
    Payment(Payment),
}

on_every_backend! {
fn hashed_partitions_tell_record_types_apart_before_restoring_values(db: Db) {
    let (accounts, payments) = (db.repo::<Account>().unwrap(), db.repo::<Payment>().unwrap());
    accounts.put(&Account { owner: "ada".into() }).unwrap();
    payments.put_many(&[Payment { owner: "ada".into(), n: 1 }, Payment { owner: "ada".into(), n: 2 }]).unwrap();
    let records = db.records::<AccountRecord>().unwrap();
    let got = records.scan().partition(AccountKey::owner("ada".into())).to_vec().unwrap();
    assert_eq!(
        got,
        [
            AccountRecord::Account(Account { owner: "ada".into() }),
            AccountRecord::Payment(Payment { owner: "ada".into(), n: 1 }),
            AccountRecord::Payment(Payment { owner: "ada".into(), n: 2 }),
        ]
    );
    assert_eq!(accounts.scan().to_vec().unwrap().len(), 1);
    assert_eq!(payments.scan().to_vec().unwrap().len(), 2);
}
}

on_every_backend! {
fn async_record_scans_answer_as_the_synchronous_ones(db: Db) {
    use futures::StreamExt;
    let db = shop(db);
    let records = db.records::<ShopRecord>().unwrap();
    let nonblocking = records.to_async();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let partition = nonblocking.scan().partition(CustomerKey::customer("anna".into())).to_vec().await.unwrap();
        assert_eq!(partition, records.scan().partition(CustomerKey::customer("anna".into())).to_vec().unwrap());
        assert_eq!(partition.len(), 4);
        let back = nonblocking.scan().partition(OrderKey::customer("anna".into())).reverse().to_vec().await.unwrap();
        assert_eq!(back, records.scan().partition(OrderKey::customer("anna".into())).reverse().to_vec().unwrap());
        // The whole table: four salt buckets merged in key order, streamed a page at a time.
        let all: Vec<String> = nonblocking.scan().stream().map(|r| describe(&r.unwrap())).collect().await;
        let want: Vec<String> = records.scan().to_vec().unwrap().iter().map(describe).collect();
        assert_eq!(all, want);
        assert_eq!(all.len(), 12, "three customers and nine orders; the notes are not members");
        let page = nonblocking.scan().page(5).await.unwrap();
        let rest = nonblocking.scan().after(page.next.as_ref().unwrap()).to_vec().await.unwrap();
        let paged: Vec<String> = page.items.iter().chain(&rest).map(describe).collect();
        assert_eq!(paged, want);
    });
}
}
