//! The examples run as tests, so what they print and assert stays true. `scale_out` runs
//! against the Bigtable emulator the test binary starts, and `schema_evolution` and
//! `async_service` on both backends.

mod common;

#[path = "../examples/async_service.rs"]
mod async_service;
#[path = "../examples/blob_migration.rs"]
mod blob_migration;
#[path = "../examples/customer_orders.rs"]
mod customer_orders;
#[path = "../examples/followers.rs"]
mod followers;
#[path = "../examples/index_backfill.rs"]
mod index_backfill;
#[path = "../examples/list_data.rs"]
mod list_data;
#[path = "../examples/observability.rs"]
mod observability;
#[path = "../examples/opentsdb.rs"]
mod opentsdb;
#[path = "../examples/order_strategies.rs"]
mod order_strategies;
#[path = "../examples/power_loss.rs"]
mod power_loss;
#[path = "../examples/quickstart.rs"]
mod quickstart;
#[path = "../examples/scale_out.rs"]
mod scale_out;
#[path = "../examples/schema_evolution.rs"]
mod schema_evolution;
#[path = "../examples/timeseries.rs"]
mod timeseries;

#[test]
fn customer_orders_example() {
    customer_orders::main().unwrap();
}

#[test]
fn followers_example() {
    followers::main().unwrap();
}

#[test]
fn timeseries_example() {
    timeseries::main().unwrap();
}

#[test]
fn order_strategies_example() {
    order_strategies::main().unwrap();
}

#[test]
fn blob_migration_example() {
    blob_migration::main().unwrap();
}

#[test]
fn index_backfill_example() {
    index_backfill::main().unwrap();
}

#[test]
fn quickstart_example() {
    let dir = tempfile::tempdir().unwrap();
    quickstart::run(dir.path()).unwrap();
}

#[test]
fn power_loss_example() {
    power_loss::main().unwrap();
}

#[test]
fn schema_evolution_example() {
    schema_evolution::main().unwrap();
}

#[test]
fn schema_evolution_example_on_bigtable() {
    let Some(store) = common::backend::bigtable_store() else { return };
    schema_evolution::run(&cellar::orm::Db::with_store(std::sync::Arc::new(store))).unwrap();
}

#[test]
fn async_service_example() {
    async_service::main().unwrap();
}

#[test]
fn async_service_example_on_bigtable() {
    let Some(store) = common::backend::bigtable_store() else { return };
    async_service::run(&cellar::orm::Db::with_store(std::sync::Arc::new(store))).unwrap();
}

#[test]
fn observability_example() {
    observability::main().unwrap();
}

#[test]
fn scale_out_example() {
    let Some(store) = common::backend::bigtable_store() else { return };
    scale_out::run(store).unwrap();
}

#[test]
fn list_data_example() {
    // The biggest user holds 20,000 values here (10^6 when run as an example).
    list_data::run(20_000).unwrap();
}

#[test]
fn opentsdb_example() {
    opentsdb::main().unwrap();
}
