//! Cellar: map Rust structs onto the HBase/Bigtable data model and persist them in an embedded,
//! LSM-based engine with full HBase cell semantics.
//!
//! This facade is what applications depend on: the object mapper ([`orm`]: `#[derive(Entity)]`
//! (attributes documented on [`macro@Entity`]), `#[derive(Record)]` for several entity types in
//! one table, [`Db`](orm::Db), repositories, layouts and schema advice) and the engine
//! underneath ([`engine`]). The examples `customer_orders`, `followers` and `timeseries` show
//! complete designs.
//!
//! With the cargo feature `bigtable`, the same repositories run on Cloud Bigtable:
//! `Db::connect("bigtable://projects/P/instances/I")` (the emulator when
//! `BIGTABLE_EMULATOR_HOST` is set), and `Db::copy_to` moves tables across.
//!
//! ```
//! use cellar::prelude::*;
//!
//! #[derive(Entity, Debug, Clone, PartialEq)]
//! #[cellar(table = "crm")]
//! struct Customer {
//!     #[cellar(key)]
//!     id: u64,
//!     #[cellar(column = "n")]
//!     name: String,
//!     #[cellar(counter, column = "oc")]
//!     orders: i64,
//! }
//!
//! # fn main() -> cellar::orm::Result<()> {
//! let db = Db::open_temporary()?;
//! let customers = db.repo::<Customer>()?;
//! customers.put(&Customer { id: 42, name: "Ada".into(), orders: 0 })?;
//! customers.increment(42, Customer::ORDERS, 1)?;
//! assert_eq!(customers.get(42)?.map(|c| c.orders), Some(1));
//! # Ok(()) }
//! ```
//!
//! The engine on its own:
//!
//! ```
//! use cellar::prelude::*;
//! # fn main() -> cellar::engine::Result<()> {
//! let dir = tempfile::tempdir().unwrap();
//! let engine = Engine::open(dir.path(), EngineOptions::default())?;
//! engine.create_table(TableDescriptor::new("events").family(FamilyDescriptor::new("d").max_versions(3)))?;
//! let events = engine.table("events")?;
//! events.put(Put::new("host1#0001").add("d", "msg", "boot"))?;
//! assert!(events.exists(Get::new("host1#0001"))?);
//! # Ok(()) }
//! ```

/// The README's quickstart, compiled and run as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(test)]
mod crate_path_tests;

pub use cellar_derive::{Aggregate, Entity, Part, Record, Versioned};
pub use cellar_engine as engine;
pub use cellar_orm as orm;
/// Test machinery (feature `testing`): the Bigtable emulator started on demand, a macro that
/// runs a test on every backend (`cellar::orm::on_every_backend!`), a clock that runs ahead.
#[cfg(feature = "testing")]
pub use cellar_orm::testing;
/// Reference-counted bytes, as cell values and blobs are read (re-exported from `bytes`).
pub use cellar_orm::Bytes;
/// The object mapper's error and result ([`orm::Error`], [`orm::Result`]); the engine's are
/// [`engine::Error`] and [`engine::Result`], and convert into these with `?`.
pub use cellar_orm::{Error, Result};

/// Everything an application needs in scope.
pub mod prelude {
    pub use cellar_derive::{Aggregate, Entity, Part, Record, Versioned};
    pub use cellar_engine::{
        Append, BloomType, Cell, CellRef, CellType, CheckAndMutate, CompareOp, Compression, Delete, Durability, Engine,
        EngineOptions, FamilyDescriptor, Filter, Get, Increment, Mutation, Put, RowMutations, RowResult, RowView, Scan,
        Table, TableDescriptor, TimeRange,
    };
    pub use cellar_orm::aggregate::{Aggregate as _, Part as _};
    pub use cellar_orm::blob::Versioned as _;
    pub use cellar_orm::{
        AggregateRepository, AsyncAggregateRepository, AsyncRepository, Costs, Cursor, Db, Entity as _, Page,
        Record as _, Records, Repository, Timestamp,
    };
}
