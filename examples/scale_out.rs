//! Scaling out: an application outgrows its embedded database and moves to Cloud Bigtable
//! without changing its entities or its repository code.
//!
//! The embedded database holds 3,000 customers with a unique index on the email and an index
//! on the city that copies the name. A copy job moves them — the customers' table, the index
//! table and the index status — to Bigtable, batch by batch, with a progress bar on a terminal
//! (plain lines elsewhere); it checkpoints after each batch and a re-run after a kill resumes
//! after the last one. Then the same calls run on both databases and must answer alike: a
//! get, a unique get by email, a covered scan of a city, a counter increment and a batch of
//! 1,000 new customers, with what each cost in round trips on Bigtable and the RPCs behind
//! them.
//!
//! What is asserted: the copy report (every row of each table), the progress after each batch,
//! that both databases answer every query identically, and the RPCs on Bigtable: the unverified
//! entries of the 1,000-customer batch go out in one MutateRows call; each customer then costs
//! four check-and-mutates (the email claimed, the data row written on its token, both entries
//! verified), which Bigtable cannot batch and Cellar runs 64 at a time.
//!
//! Run against the emulator:
//! `BIGTABLE_EMULATOR_HOST=127.0.0.1:8086 cargo run --release --features bigtable --example scale_out`
//! (start it with `cbtemulator -host 127.0.0.1 -port 8086`); or against an instance with
//! `CELLAR_BIGTABLE_URL=bigtable://projects/P/instances/I` and application-default credentials.

use std::io::IsTerminal;
use std::sync::Arc;

use cellar::orm::copy::CopyProgress;
use cellar::orm::store::BigtableStore;
use cellar::orm::Result;
use cellar::prelude::*;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A customer, as the application declares it.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "shop_customers", index(name = "by_city", on(city), include(name)))]
struct Customer {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "n")]
    name: String,
    /// At most one customer per address.
    #[cellar(column = "e", index = "by_email", unique)]
    email: String,
    #[cellar(column = "c")]
    city: String,
    #[cellar(counter, column = "o")]
    orders: i64,
}

const CUSTOMERS: u64 = 3_000;
const CITIES: [&str; 6] = ["Bergen", "Ghent", "Lyon", "Porto", "Tartu", "Turku"];
const NAMES: [&str; 8] = ["Ada", "Alan", "Barbara", "Edsger", "Grace", "Leslie", "Radia", "Tony"];

fn customer(id: u64) -> Customer {
    let name = NAMES[(id * 7 % 8) as usize];
    Customer {
        id,
        name: format!("{name} {id}"),
        email: format!("{}.{id}@example.com", name.to_lowercase()),
        city: CITIES[(id * 5 % 6) as usize].into(),
        orders: 0,
    }
}

/// Copies the customers into `to` with a progress bar on a terminal and a line per batch
/// elsewhere (under the test harness stdout is captured: no bar there).
fn copy(from: &Db, to: &Db) -> Result<Vec<CopyProgress>> {
    let interactive = !cfg!(test) && std::io::stdout().is_terminal();
    let bar = if interactive {
        let style = ProgressStyle::with_template("  {prefix:<16} {pos} rows {msg}").expect("a valid template");
        ProgressBar::with_draw_target(None, ProgressDrawTarget::stdout()).with_style(style)
    } else {
        ProgressBar::hidden()
    };
    let mut progress = Vec::new();
    let report = from
        .copy_to(to)
        .entity::<Customer>()
        .batch_rows(1000)
        .on_progress(|p| {
            if bar.is_hidden() {
                println!("  {:<18} {:>5} rows, {:>6} cells", p.table, p.rows, p.cells);
            }
            bar.set_prefix(p.table.clone());
            bar.set_position(p.rows);
            bar.set_message(format!("{} cells", p.cells));
            progress.push(p.clone());
        })
        .run()?;
    bar.finish_and_clear();
    print!("{report}");
    let rows: Vec<(&str, u64)> = report.tables.iter().map(|t| (t.table.as_str(), t.rows)).collect();
    // Each customer has one row per index (`by_city`, `by_email`) in the index table; the
    // status table has one row per index.
    assert_eq!(rows, [("shop_customers", CUSTOMERS), ("shop_customers_idx", 2 * CUSTOMERS), ("cellar_indexes", 2)]);
    assert!(report.tables.iter().all(|t| t.resumed_after.is_none()));
    Ok(progress)
}

/// The answers the application reads, on one database.
#[derive(Debug, PartialEq)]
struct Answers {
    get: Option<Customer>,
    by_email: Option<u64>,
    porto: Vec<(u64, String)>,
    orders: i64,
    newcomers_in_ghent: usize,
}

fn use_it(db: &Db, label: &str) -> Result<Answers> {
    let customers = db.repo::<Customer>()?;
    let (get, cost) = db.measure(|| customers.get(42));
    println!("  {label:<8} get(42)                   {cost}");
    let (by_email, cost) = db.measure(|| customers.index(Customer::BY_EMAIL).get(customer(1234).email));
    println!("  {label:<8} by_email get              {cost}");
    let (porto, cost) = db.measure(|| -> Result<Vec<(u64, String)>> {
        let entries = customers.index(Customer::BY_CITY).scan().prefix("Porto".to_string()).limit(5).entries()?;
        entries.iter().map(|e| Ok((e.key.id, e.get::<String>("name")?))).collect()
    });
    println!("  {label:<8} by_city scan, 5 covered   {cost}");
    let (orders, cost) = db.measure(|| customers.increment(42, Customer::ORDERS, 3));
    println!("  {label:<8} increment                 {cost}");
    let newcomers: Vec<Customer> = (CUSTOMERS + 1..=CUSTOMERS + 1000).map(customer).collect();
    let (put, cost) = db.measure(|| customers.put_many(&newcomers));
    put?;
    println!("  {label:<8} put_many of 1,000         {cost}");
    let ghent = customers.index(Customer::BY_CITY).scan().prefix("Ghent".to_string()).keys()?;
    Ok(Answers {
        get: get?,
        by_email: by_email?.map(|c| c.id),
        porto: porto?,
        orders: orders?,
        newcomers_in_ghent: ghent.iter().filter(|k| k.id > CUSTOMERS).count(),
    })
}

/// The example on a Bigtable store (the emulator's, in the tests).
pub(crate) fn run(store: BigtableStore) -> Result<()> {
    let bigtable = Db::with_store(Arc::new(store.clone()));
    let embedded = Db::open_temporary()?;
    let customers = embedded.repo::<Customer>()?;
    customers.put_many(&(1..=CUSTOMERS).map(customer).collect::<Vec<_>>())?;

    println!("copying {CUSTOMERS} customers to Bigtable:");
    let progress = copy(&embedded, &bigtable)?;
    let batches: Vec<(&str, u64)> = progress.iter().map(|p| (p.table.as_str(), p.rows)).collect();
    assert_eq!(
        batches,
        [
            ("shop_customers", 1000),
            ("shop_customers", 2000),
            ("shop_customers", 3000),
            ("shop_customers_idx", 1000),
            ("shop_customers_idx", 2000),
            ("shop_customers_idx", 3000),
            ("shop_customers_idx", 4000),
            ("shop_customers_idx", 5000),
            ("shop_customers_idx", 6000),
            ("cellar_indexes", 2),
        ]
    );

    println!("the same calls on both:");
    let here = use_it(&embedded, "embedded")?;
    // The first open records the schema in Bigtable's catalog: control-plane calls, left out of
    // the counts below.
    bigtable.repo::<Customer>()?;
    let before = store.rpcs();
    let there = use_it(&bigtable, "bigtable")?;
    let rpcs = store.rpcs();
    println!(
        "  bigtable RPCs: {} ReadRows, {} MutateRows, {} CheckAndMutateRow, {} ReadModifyWriteRow",
        rpcs.read_rows - before.read_rows,
        rpcs.mutate_rows - before.mutate_rows,
        rpcs.check_and_mutate_row - before.check_and_mutate_row,
        rpcs.read_modify_write_row - before.read_modify_write_row,
    );
    assert_eq!(here, there, "both databases answer alike");
    assert_eq!(there.get, Some(customer(42)));
    assert_eq!(there.by_email, Some(1234));
    assert_eq!(there.porto.len(), 5);
    assert!(there.porto.iter().all(|(id, name)| customer(*id).city == "Porto" && *name == customer(*id).name));
    assert_eq!(there.orders, 3);
    assert_eq!(there.newcomers_in_ghent, (CUSTOMERS + 1..=CUSTOMERS + 1000).filter(|id| id * 5 % 6 == 1).count());
    assert_eq!(rpcs.read_modify_write_row - before.read_modify_write_row, 1, "one increment");
    assert_eq!(rpcs.mutate_rows - before.mutate_rows, 1, "the new index entries, all in one call");
    // Per new customer: the email claimed, the data row written on its token, both entries
    // verified. Bigtable has no batched check-and-mutate; they run 64 at a time.
    assert_eq!(rpcs.check_and_mutate_row - before.check_and_mutate_row, 4 * 1000);
    println!("scale_out: ok");
    Ok(())
}

// The tests call `run` with their own emulator's store.
#[cfg_attr(test, allow(dead_code))]
pub(crate) fn main() -> Result<()> {
    let url = std::env::var("CELLAR_BIGTABLE_URL")
        .unwrap_or_else(|_| "bigtable://projects/cellar-demo/instances/scale-out".to_string());
    let store = BigtableStore::connect_url(&url)?;
    // A rerun starts from empty tables.
    for table in ["shop_customers", "shop_customers_idx", "cellar_indexes", "cellar_jobs"] {
        store.drop_table(table)?;
    }
    run(store)
}
