//! Schema evolution: three releases of an application on one database.
//!
//! Release 1 stores 1,000 customers and 3,000 orders. Release 2 changes both types:
//! - orders gain a `currency` with a default and an optional `coupon`, and keep three versions of
//!   their status, a family change applied with `Db::alter_to` before release 2 opens them;
//! - customers move `name` to column `full_name` (`rename_from = "n"`), widen `visits` from
//!   `i32` to `i64`, drop `fax`, gain a `tier` with a default, and gain an index on it, which a
//!   backfill builds with progress.
//!
//! The schema catalog records each change as a version. Both releases then write and read the
//! orders in turn, each reading what the other wrote. Release 1 can no longer open the
//! customers: it would write rows the new index never sees. A census of the customers shows
//! the old qualifier, the narrow cells and the dropped field's cells. Once release 1 is gone, a
//! job moves the renamed column's cells. A third release that changes the key and a column's
//! type is refused, with every difference and the way forward in the error. The key change is
//! made the right way: a re-keying copy into a new table.
//!
//! Everything printed is asserted. Run with `cargo run --release --example schema_evolution`.

use cellar::orm::{Db, Error, Result};
use cellar::prelude::*;

const CUSTOMERS: u64 = 1_000;
const ORDERS_EACH: u64 = 3;

/// Release 1's types.
mod release_1 {
    use cellar::prelude::*;

    /// A customer as release 1 stores it.
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "evo_customers")]
    pub struct Customer {
        #[cellar(key)]
        pub id: u64,
        #[cellar(column = "n")]
        pub name: String,
        pub visits: i32,
        pub fax: String,
        pub email: String,
    }

    /// An order as release 1 stores it.
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "evo_orders")]
    pub struct Order {
        #[cellar(partition)]
        pub customer: u64,
        #[cellar(key)]
        pub order_no: u64,
        pub total_cents: u64,
        pub status: String,
    }
}

/// The currency of orders written before release 2 had one.
fn euro() -> String {
    "EUR".to_string()
}

/// The tier of customers written before release 2 had one.
fn bronze() -> String {
    "bronze".to_string()
}

/// Release 2's types.
mod release_2 {
    use cellar::prelude::*;

    /// A customer of release 2: `name` in a column of its own name, `visits` widened, `fax`
    /// dropped, a `tier` with a default and an index on it.
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "evo_customers", index(name = "by_tier", on(tier)))]
    pub struct Customer {
        #[cellar(key)]
        pub id: u64,
        #[cellar(column = "full_name", rename_from = "n")]
        pub name: String,
        pub visits: i64,
        pub email: String,
        #[cellar(default = "super::bronze")]
        pub tier: String,
    }

    /// An order of release 2: a currency with a default, an optional coupon, and three versions
    /// of every column kept.
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "evo_orders", max_versions = 3)]
    pub struct Order {
        #[cellar(partition)]
        pub customer: u64,
        #[cellar(key)]
        pub order_no: u64,
        pub total_cents: u64,
        pub status: String,
        #[cellar(default = "super::euro")]
        pub currency: String,
        pub coupon: Option<String>,
    }
}

/// Release 3: customers keyed by region, `visits` as text. The rows on disk fit neither.
mod release_3 {
    use cellar::prelude::*;

    /// A customer of release 3.
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "evo_customers", index(name = "by_tier", on(tier)))]
    pub struct Customer {
        #[cellar(key)]
        pub region: String,
        #[cellar(key)]
        pub id: u64,
        #[cellar(column = "full_name")]
        pub name: String,
        pub visits: String,
        pub email: String,
        pub tier: String,
    }
}

/// The key change done right: a new table keyed by region.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "evo_customers_by_region")]
struct RegionalCustomer {
    #[cellar(partition)]
    region: String,
    #[cellar(key)]
    id: u64,
    #[cellar(column = "full_name")]
    name: String,
    visits: i64,
    email: String,
    tier: String,
}

fn region_of(id: u64) -> String {
    ["north", "south", "east", "west"][(id % 4) as usize].to_string()
}

fn first_customer(id: u64) -> release_1::Customer {
    release_1::Customer {
        id,
        name: format!("Customer {id}"),
        visits: (id % 50) as i32,
        fax: format!("+1 555 {id:04}"),
        email: format!("c{id}@example.com"),
    }
}

fn first_order(customer: u64, order_no: u64) -> release_1::Order {
    release_1::Order { customer, order_no, total_cents: 100 * order_no + customer, status: "placed".into() }
}

/// A fresh `Db` over the same store: another process of some release.
fn process(db: &Db) -> Db {
    Db::with_store(db.store().clone())
}

/// The example on the embedded engine.
pub(crate) fn main() -> Result<()> {
    run(&Db::open_temporary()?)
}

/// The example on any database (the tests also run it on the Bigtable emulator).
pub(crate) fn run(db: &Db) -> Result<()> {
    release_one_writes(db)?;
    orders_evolve(db)?;
    customers_evolve(db)?;
    moved_and_refused(db)?;
    println!("schema_evolution: ok");
    Ok(())
}

fn release_one_writes(db: &Db) -> Result<()> {
    let customers = db.repo::<release_1::Customer>()?;
    let orders = db.repo::<release_1::Order>()?;
    customers.put_many(&(0..CUSTOMERS).map(first_customer).collect::<Vec<_>>())?;
    let all: Vec<release_1::Order> =
        (0..CUSTOMERS).flat_map(|c| (1..=ORDERS_EACH).map(move |n| first_order(c, n))).collect();
    orders.put_many(&all)?;
    println!("release 1 wrote {CUSTOMERS} customers and {} orders", all.len());
    for (table, name) in [("evo_customers", "Customer"), ("evo_orders", "Order")] {
        let history = db.schema_history_of(table, name)?;
        assert_eq!(history.len(), 1);
        println!("  catalog: {name} on `{table}` at version {}", history[0].version);
    }
    Ok(())
}

fn orders_evolve(db: &Db) -> Result<()> {
    println!("\nrelease 2, orders:");
    // Keeping three versions is a family change: the table must be altered first.
    let err = db.repo::<release_2::Order>().unwrap_err();
    assert!(matches!(err, Error::SchemaMismatch { .. }), "{err}");
    assert!(err.to_string().contains("Db::alter_to"), "{err}");
    println!("  repo() before the alter: {err}");
    let report = db.alter_to::<release_2::Order>()?;
    println!("  {report}");
    assert_eq!(report.families.len(), 1);
    let orders = db.repo::<release_2::Order>()?;
    let history = db.schema_history::<release_2::Order>()?;
    assert_eq!(history.len(), 2);
    println!("  catalog: version {}, changes:", history[1].version);
    for change in &history[1].changes {
        println!("    - {change}");
    }
    assert_eq!(history[1].changes.len(), 3, "{:?}", history[1].changes);

    // Release 2 reads release 1's orders with the default currency and no coupon.
    let old = orders.get((7, 2))?.expect("order 7/2");
    assert_eq!((old.total_cents, old.currency.as_str(), old.coupon.as_deref()), (207, "EUR", None));

    // The releases take turns on the same orders; each reads what the other wrote.
    let release_1_orders = process(db).repo::<release_1::Order>()?;
    for round in 0..3u64 {
        let customer = 100 + round;
        release_1_orders.put(&release_1::Order { status: format!("paid {round}"), ..first_order(customer, 1) })?;
        let seen = orders.get((customer, 1))?.expect("written by release 1");
        assert_eq!((seen.status.as_str(), seen.currency.as_str()), (format!("paid {round}").as_str(), "EUR"));
        orders.put(&release_2::Order {
            status: format!("shipped {round}"),
            currency: "CHF".into(),
            coupon: Some("WELCOME".into()),
            ..seen
        })?;
        let back = release_1_orders.get((customer, 1))?.expect("written by release 2");
        assert_eq!(back.status, format!("shipped {round}"));
    }
    let mixed = orders.get((100, 1))?.expect("order 100/1");
    assert_eq!((mixed.currency.as_str(), mixed.coupon.as_deref()), ("CHF", Some("WELCOME")));
    println!("  releases 1 and 2 wrote and read orders in turn: 6 writes, every read right");
    Ok(())
}

fn customers_evolve(db: &Db) -> Result<()> {
    println!("\nrelease 2, customers:");
    let customers = db.repo::<release_2::Customer>()?;
    let history = db.schema_history::<release_2::Customer>()?;
    println!("  catalog: version {}, changes:", history[1].version);
    for change in &history[1].changes {
        println!("    - {change}");
    }
    let changes = history[1].changes.join("\n");
    for expected in [
        "renamed column d:n -> d:full_name",
        "widened field `visits` from i32 to i64",
        "dropped field `fax`",
        "added field `tier`",
        "added index `by_tier`",
    ] {
        assert!(changes.contains(expected), "{expected}");
    }

    // The index is pending: the table held rows when it was declared.
    let by_tier = customers.index(release_2::Customer::BY_TIER);
    assert!(matches!(by_tier.scan().to_vec(), Err(Error::IndexNotReady { .. })));
    let mut steps = Vec::new();
    let built = customers
        .build_index(release_2::Customer::BY_TIER)
        .on_progress(|p| {
            steps.push(p.rows);
            println!("  backfill of by_tier: {} rows", p.rows);
        })
        .run()?;
    assert_eq!(built.rows, CUSTOMERS);
    assert_eq!(steps.last(), Some(&CUSTOMERS));

    // Release 2 reads release 1's customers: the old qualifier, the narrow cell, the default.
    let c = customers.get(42)?.expect("customer 42");
    assert_eq!((c.name.as_str(), c.visits, c.tier.as_str()), ("Customer 42", 42, "bronze"));
    // And writes 200 of them: gold, with more visits than an `i32` holds.
    let gold: Vec<release_2::Customer> = (0..200)
        .map(|id| release_2::Customer {
            tier: "gold".into(),
            visits: i64::from(i32::MAX) + id as i64,
            ..customers.get(id).ok().flatten().expect("stored")
        })
        .collect();
    customers.put_many(&gold)?;
    let golden = by_tier.scan().prefix("gold".to_string()).keys()?;
    let bronze = by_tier.scan().prefix("bronze".to_string()).keys()?;
    assert_eq!((golden.len(), bronze.len()), (200, 800));
    println!("  by_tier: 200 gold, 800 bronze");

    // Release 1 would write customers the index never sees: refused.
    let err = process(db).repo::<release_1::Customer>().unwrap_err();
    assert!(matches!(err, Error::SchemaIncompatible { .. }) && err.to_string().contains("lacks index `by_tier`"));
    println!("  release 1 opening customers now: {err}");
    Ok(())
}

fn moved_and_refused(db: &Db) -> Result<()> {
    let customers = db.repo::<release_2::Customer>()?;
    println!();
    let census = db.census::<release_2::Customer>().run()?;
    print!("{census}");
    let name = census.column("name").expect("name");
    assert_eq!((name.current, name.alias_only), (200, 800));
    let visits = census.column("visits").expect("visits");
    assert_eq!(visits.widths.counts.iter().map(|(w, n)| (*w, *n)).collect::<Vec<_>>(), [(4, 800), (8, 200)]);
    assert_eq!(census.column("tier").expect("tier").defaulted, 800);
    assert_eq!(census.unmapped_rows("d", "fax"), CUSTOMERS);

    // Release 1 is gone: the renamed column's cells move to the new qualifier.
    let moved =
        customers.move_renamed().on_progress(|p| println!("  moving renamed columns: {} rows", p.rows)).run()?;
    print!("{moved}");
    assert_eq!((moved.moved(), moved.superseded(), moved.raced()), (800, 200, 0));
    let after = db.census::<release_2::Customer>().run()?;
    assert_eq!(after.alias_cells(), 0);
    assert_eq!(customers.get(42)?.expect("customer 42").name, "Customer 42");
    println!("  after the move: no cell left under d:n; the entities read the same");

    // Release 3 changes the key and a column's type: refused, nothing written.
    let err = process(db).repo::<release_3::Customer>().unwrap_err();
    let Error::SchemaIncompatible { differences, .. } = &err else { panic!("{err}") };
    assert_eq!(differences.len(), 3, "{differences:?}");
    assert!(err.to_string().contains("copy_to(..).rekey(..)") && err.to_string().contains("versioned blob"));
    println!("\nrelease 3: {err}");
    assert_eq!(db.schema_history::<release_2::Customer>()?.len(), 2);

    // The key change done right: every customer copied into a table keyed by region.
    let report = db
        .copy_to(db)
        .rekey(|c: release_2::Customer| RegionalCustomer {
            region: region_of(c.id),
            id: c.id,
            name: c.name,
            visits: c.visits,
            email: c.email,
            tier: c.tier,
        })
        .batch_rows(250)
        .on_progress(|p| println!("  re-keying: {} of {} read", p.read, p.from_table))
        .run()?;
    assert_eq!((report.read, report.written, report.failed), (CUSTOMERS, CUSTOMERS, 0));
    let regional = db.repo::<RegionalCustomer>()?;
    let north = regional.scan().prefix(RegionalCustomerKey::region("north".to_string())).to_vec()?;
    assert_eq!(north.len(), (CUSTOMERS / 4) as usize);
    assert!(north.iter().all(|c| c.id % 4 == 0));
    println!("  evo_customers_by_region: {} customers, {} in the north", CUSTOMERS, north.len());
    Ok(())
}
