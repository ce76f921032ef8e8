//! A tour of the object mapper on the embedded engine: the single-table customer/order design,
//! the follower graph, time-series events, one order aggregate in all four storage strategies
//! with what each operation costs, the bulk migration of an order store's versioned blobs from
//! two old versions to the current one, and secondary indexes added to a table with data:
//! backfilled, verified and repaired; time series the OpenTSDB way (names stored as uids, an
//! hour per row, a column per second); and per-user lists tall, wide and in between, with what
//! each read costs; what survives a power loss, a full disk and a failed fsync; and three
//! releases of an application evolving their entities on one database; and an async service
//! with 2,000 requests in flight on two runtime workers; and what an operator sees: the trace
//! of an aggregate write and an indexed read, a slow call, the database's stats — each example
//! in turn, every result asserted.
//!
//! Run with `cargo run --release --example tour`; each part also runs on its own
//! (`--example customer_orders`, `--example followers`, `--example timeseries`,
//! `--example order_strategies`, `--example blob_migration`, `--example index_backfill`,
//! `--example opentsdb`, `--example list_data`, `--example power_loss`,
//! `--example schema_evolution`, `--example async_service`, `--example observability`).

#[path = "async_service.rs"]
mod async_service;
#[path = "blob_migration.rs"]
mod blob_migration;
#[path = "customer_orders.rs"]
mod customer_orders;
#[path = "followers.rs"]
mod followers;
#[path = "index_backfill.rs"]
mod index_backfill;
#[path = "list_data.rs"]
mod list_data;
#[path = "observability.rs"]
mod observability;
#[path = "opentsdb.rs"]
mod opentsdb;
#[path = "order_strategies.rs"]
mod order_strategies;
#[path = "power_loss.rs"]
mod power_loss;
#[path = "schema_evolution.rs"]
mod schema_evolution;
#[path = "timeseries.rs"]
mod timeseries;

fn main() -> cellar::orm::Result<()> {
    println!("== customer_orders ==");
    customer_orders::main()?;
    println!("\n== followers ==");
    followers::main()?;
    println!("\n== timeseries ==");
    timeseries::main()?;
    println!("\n== order_strategies ==");
    order_strategies::main()?;
    println!("\n== blob_migration ==");
    blob_migration::main()?;
    println!("\n== index_backfill ==");
    index_backfill::main()?;
    println!("\n== opentsdb ==");
    opentsdb::main()?;
    println!("\n== list_data ==");
    list_data::main()?;
    println!("\n== power_loss ==");
    power_loss::main()?;
    println!("\n== schema_evolution ==");
    schema_evolution::main()?;
    println!("\n== async_service ==");
    async_service::main()?;
    println!("\n== observability ==");
    observability::main()?;
    println!("\ntour: ok");
    Ok(())
}
