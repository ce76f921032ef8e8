//! Cellar: map Rust structs onto the HBase/Bigtable data model and persist them in an embedded,
//! LSM-based engine with full HBase cell semantics.
//!
//! This facade is what applications depend on. Today it re-exports the engine
//! ([`cellar_engine`]); the object mapper (`#[derive(Entity)]`, repositories) builds on it.
//!
//! ```
//! use cellar::prelude::*;
//! # fn main() -> cellar::Result<()> {
//! let dir = tempfile::tempdir().unwrap();
//! let engine = Engine::open(dir.path(), EngineOptions::default())?;
//! engine.create_table(TableDescriptor::new("events").family(FamilyDescriptor::new("d").max_versions(3)))?;
//! let events = engine.table("events")?;
//! events.put(Put::new("host1#0001").add("d", "msg", "boot"))?;
//! assert!(events.exists(Get::new("host1#0001"))?);
//! # Ok(()) }
//! ```

pub use cellar_engine as engine;
pub use cellar_engine::{Error, Result};

/// Everything an application needs in scope.
pub mod prelude {
    pub use cellar_engine::{
        Append, BloomType, Cell, CellType, CheckAndMutate, CompareOp, Compression, Delete, Durability, Engine,
        EngineOptions, FamilyDescriptor, Filter, Get, Increment, Mutation, Put, RowMutations, RowResult, Scan, Table,
        TableDescriptor, TimeRange,
    };
}
