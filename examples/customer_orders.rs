//! Customers and their orders in one table (the single-table CUSTOMER++ design): a customer row
//! is `[md5(customer)][1]`, an order row `[md5(customer)][2][reverse timestamp][order id]`, so
//! one short scan of a customer's partition returns the customer and every order, newest first.
//!
//! A customer's email is optional and unique: a unique secondary index `by_email` finds the
//! customer by email, refuses a second customer the same address, lets an address go when its
//! customer changes it, and leaves customers without one out (it is sparse). The order counter
//! is not indexed, so an increment stays one round trip.
//!
//! Run with `cargo run --release --example customer_orders`. Every printed result is also
//! asserted.

use cellar::orm::{Entity as _, Error, Result};
use cellar::prelude::*;
use serde::{Deserialize, Serialize};

/// One line of an order, stored inside the order row as MessagePack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Line {
    sku: String,
    quantity: u32,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "shop", record_type = 1)]
struct Customer {
    /// Hashed: customer ids are handed out in sequence, the digest spreads them evenly.
    #[cellar(partition, hash = "md5", column = "id")]
    customer_id: String,
    #[cellar(column = "n")]
    name: String,
    /// At most one customer per address; customers without one are not indexed.
    #[cellar(column = "e", index = "by_email", unique)]
    email: Option<String>,
    #[cellar(counter, column = "oc")]
    order_count: i64,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "shop", record_type = 2)]
struct Order {
    #[cellar(partition, hash = "md5", column = "c")]
    customer_id: String,
    #[cellar(key, reverse_ts)]
    placed: Timestamp,
    #[cellar(key)]
    order_id: u64,
    #[cellar(column = "t")]
    total_cents: i64,
    #[cellar(column = "s")]
    status: String,
    #[cellar(serde, column = "l")]
    lines: Vec<Line>,
}

/// Every record type of the `shop` table.
#[derive(Record, Debug, Clone, PartialEq)]
enum ShopRecord {
    Customer(Customer),
    Order(Order),
}

/// 2026-11-22 09:00:00 UTC, in milliseconds.
const NINE_AM: u64 = 1_795_856_400_000;

fn minutes(m: u64) -> Timestamp {
    Timestamp(NINE_AM + m * 60_000)
}

fn order(customer: &str, at: u64, order_id: u64, total_cents: i64, skus: &[&str]) -> Order {
    Order {
        customer_id: customer.into(),
        placed: minutes(at),
        order_id,
        total_cents,
        status: "placed".into(),
        lines: skus.iter().map(|s| Line { sku: (*s).into(), quantity: 1 }).collect(),
    }
}

pub(crate) fn main() -> Result<()> {
    let db = Db::open_temporary()?;
    let customers = db.repo::<Customer>()?;
    let orders = db.repo::<Order>()?;
    let shop = db.records::<ShopRecord>()?;

    println!("{}", Order::layout());
    assert!(Order::layout().to_string().contains("record type  1 byte    0x02"));
    assert_eq!(Order::advice(), [], "the order layout follows every rule of thumb");

    let people = [
        ("c-1001", "Ada Lovelace", Some("ada@example.com")),
        ("c-1002", "Grace Hopper", Some("grace@example.com")),
        ("c-1003", "Edsger Dijkstra", None),
    ];
    for (id, name, email) in people {
        let email = email.map(String::from);
        customers.put(&Customer { customer_id: id.into(), name: name.into(), email, order_count: 0 })?;
    }
    let placed = [
        order("c-1001", 5, 1, 4_200, &["tea"]),
        order("c-1002", 10, 2, 12_50, &["compiler", "manual"]),
        order("c-1002", 25, 3, 99_00, &["nanosecond wire"]),
        order("c-1003", 30, 4, 7_00, &["semaphore"]),
        order("c-1002", 45, 5, 3_10, &["moth"]),
    ];
    orders.put_many(&placed)?;
    // Counters are not indexed: each increment is one round trip, the index untouched.
    let (counted, costs) = db.measure(|| {
        placed.iter().try_for_each(|o| customers.increment(o.customer_id.clone(), Customer::ORDER_COUNT, 1).map(drop))
    });
    counted?;
    println!("order counts: {costs}");
    assert_eq!((costs.increments, costs.round_trips()), (5, 5));

    // One scan of Grace's partition: her customer row, then her orders, newest first.
    let mut printed = Vec::new();
    for record in shop.scan().partition(CustomerKey::customer_id("c-1002".into())).iter()? {
        printed.push(match record? {
            ShopRecord::Customer(c) => format!("customer {} {} ({} orders)", c.customer_id, c.name, c.order_count),
            ShopRecord::Order(o) => format!(
                "  order {} at +{} min: {} lines, {}.{:02}",
                o.order_id,
                (o.placed.as_millis() - NINE_AM) / 60_000,
                o.lines.len(),
                o.total_cents / 100,
                o.total_cents % 100
            ),
        });
    }
    printed.iter().for_each(|l| println!("{l}"));
    assert_eq!(
        printed,
        [
            "customer c-1002 Grace Hopper (3 orders)",
            "  order 5 at +45 min: 1 lines, 3.10",
            "  order 3 at +25 min: 1 lines, 99.00",
            "  order 2 at +10 min: 2 lines, 12.50",
        ]
    );

    // Orders only: the newest two, then the next page from the cursor.
    let first = orders.scan().prefix(OrderKey::customer_id("c-1002".into())).page(2)?;
    let cursor = first.next.clone().expect("a third order follows");
    let second = orders.scan().prefix(OrderKey::customer_id("c-1002".into())).after(&cursor).page(2)?;
    let ids = |p: &Page<Order>| p.items.iter().map(|o| o.order_id).collect::<Vec<_>>();
    println!("pages of Grace's orders: {:?} then {:?} (cursor {cursor})", ids(&first), ids(&second));
    assert_eq!((ids(&first), ids(&second), second.next), (vec![5, 3], vec![2], None));

    // An order changes status; reading it back by its full key.
    let key = OrderKey::customer_id("c-1002".into()).placed(minutes(25)).order_id(3);
    let mut shipped = orders.get(key.clone())?.expect("order 3 exists");
    shipped.status = "shipped".into();
    orders.put(&shipped)?;
    assert_eq!(orders.get(key)?.map(|o| o.status), Some("shipped".into()));

    // Customers by email, through the unique index.
    let by_email = customers.index(Customer::BY_EMAIL);
    let email = |e: &str| e.to_string();
    let grace = by_email.get(email("grace@example.com"))?.expect("grace@example.com is indexed");
    println!("grace@example.com: customer {} {}", grace.customer_id, grace.name);
    assert_eq!((grace.customer_id.as_str(), grace.order_count), ("c-1002", 3));
    let indexed = |ids: &[&str]| -> Result<()> {
        let mut found: Vec<String> = by_email.scan().to_vec()?.into_iter().map(|c| c.customer_id).collect();
        found.sort();
        println!("customers with an email: {found:?}");
        assert_eq!(found, ids);
        Ok(())
    };
    // Edsger has no email: he is not in the index.
    indexed(&["c-1001", "c-1002"])?;

    // A second customer cannot take an address another one holds; nothing is written.
    let mut edsger = customers.get(CustomerKey::customer_id("c-1003".into()))?.expect("customer c-1003");
    edsger.email = Some(email("grace@example.com"));
    let err = customers.put(&edsger).expect_err("the address is taken");
    println!("c-1003 cannot take grace@example.com: {err}");
    assert!(matches!(err, Error::UniqueViolation { index: "by_email", .. }));
    assert_eq!(customers.get(CustomerKey::customer_id("c-1003".into()))?.and_then(|c| c.email), None);

    // Changing an address frees the old one, which another customer can then take.
    let mut ada = customers.get(CustomerKey::customer_id("c-1001".into()))?.expect("customer c-1001");
    ada.email = Some(email("countess@example.com"));
    customers.put(&ada)?;
    assert_eq!(by_email.get(email("ada@example.com"))?, None);
    edsger.email = Some(email("ada@example.com"));
    customers.put(&edsger)?;
    let owners = [by_email.get(email("countess@example.com"))?, by_email.get(email("ada@example.com"))?];
    let owners: Vec<String> = owners.into_iter().flatten().map(|c| c.customer_id).collect();
    println!("Ada moves to countess@example.com ({}); ada@example.com is free: {} takes it", owners[0], owners[1]);
    assert_eq!(owners, ["c-1001", "c-1003"]);
    indexed(&["c-1001", "c-1002", "c-1003"])?;
    // The counters were kept through the puts (a put does not write counters).
    let counts: Vec<i64> = customers.scan().to_vec()?.into_iter().map(|c| c.order_count).collect();
    assert_eq!(counts.iter().sum::<i64>(), 5);

    // Every customer with a whole-table scan of customers only (orders are skipped).
    let names: Vec<String> = customers.scan().to_vec()?.into_iter().map(|c| c.name).collect();
    println!("customers: {}", names.len());
    assert_eq!(names.len(), 3);
    println!("customer_orders: ok");
    Ok(())
}
