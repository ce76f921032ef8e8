//! `cellar-engine`: Cellar's embedded storage engine.
//!
//! It keeps the HBase data model — tables of byte-ordered rows, column families declared up
//! front, dynamic qualifiers, timestamped versions, delete markers — in a log-structured merge
//! tree: writes go to a write-ahead log and a per-region, per-family memstore; memstores flush to
//! immutable SSTables; compactions merge them and apply the families' retention rules. The ORM
//! layer (`cellar-orm`) sits on top and only calls this crate's public API.
//!
//! Layers, bottom up: [`cell`] and [`descriptor`] (the data model); [`fs`] (the file layer, with
//! `fault` for tests, with the feature `test-util`), `wal`, `memstore`, `sst`,
//! `cache`, `catalog` (storage); `masking`, `retention`, `read` (semantics); `region`,
//! [`Table`], [`Engine`] (operations).
//!
//! Observability: background work, write stalls and failures are logged through `tracing`
//! (target `cellar_engine::observe`; nothing on the path of a write or read that does not
//! wait), [`Engine::stats`] returns an [`EngineStats`] snapshot, and with the feature
//! `metrics` the engine publishes gauges, counters and histograms through the `metrics`
//! facade (`Engine::publish_metrics`).
//!
//! ```
//! use cellar_engine::*;
//! # fn main() -> Result<()> {
//! let dir = tempfile::tempdir().unwrap();
//! let engine = Engine::open(dir.path(), EngineOptions::default())?;
//! engine.create_table(TableDescriptor::new("test").family(FamilyDescriptor::new("e").max_versions(3)))?;
//! let t = engine.table("test")?;
//! t.put(Put::new("r1").add_at("e", "c1", 10, "old"))?;
//! t.put(Put::new("r1").add_at("e", "c1", 12, "new"))?;
//! let row = t.get(Get::new("r1").all_versions())?;
//! let versions: Vec<u64> = row.versions(b"e", b"c1").map(|c| c.timestamp).collect();
//! assert_eq!(versions, [12, 10]);
//! for row in t.scan(Scan::new().prefix("r"))? {
//!     println!("{:?}", row?.row);
//! }
//! # Ok(()) }
//! ```

mod background;
pub mod cache;
mod catalog;
pub mod cell;
pub mod clock;
mod compaction;
pub mod descriptor;
mod engine;
mod error;
#[cfg(any(test, feature = "test-util"))]
pub mod fault;
pub mod filter;
mod filter_lang;
pub mod fs;
mod heap;
mod masking;
mod memstore;
mod multi_table;
pub mod mutation;
mod observe;
pub mod query;
mod read;
mod region;
mod retention;
mod scanner;
mod split;
mod split_policy;
mod sst;
mod table;
mod tables;
mod wal;
mod write_path;

pub use cache::CacheStats;
pub use cell::{
    to_printable, Cell, CellRef, CellType, LATEST_TIMESTAMP, MAX_ROW_KEY_LEN, MAX_VALUE_LEN, MAX_WRITE_LEN,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use descriptor::{BloomType, Compression, Durability, FamilyDescriptor, TableDescriptor};
pub use engine::{Engine, EngineOptions};
pub use error::{Error, Result};
pub use filter::{ColumnOffset, Filter};
pub use multi_table::MultiTableMutation;
pub use mutation::{
    Append, CheckAndMutate, CompareOp, Delete, Increment, MultiRowMutation, Mutation, Put, RowCondition, RowMutations,
};
pub use observe::{EngineStats, RegionInfo, TableStats};
pub use query::{prefix_successor, Get, RowResult, Scan, TimeRange};
pub use read::row_buf::{FromScannedRow, RowView, ScannedCell, ScannedCells};
pub use scanner::{ScanCursor, Scanner};
pub use split::SplitAlgorithm;
pub use split_policy::{PrefixField, SplitPolicy};
pub use table::Table;
