//! Cellar's object mapper: Rust structs as rows of a wide-column table.
//!
//! `#[derive(Entity)]` (from `cellar-derive`) describes how a struct maps onto the HBase /
//! Bigtable data model — a typed, order-preserving row key, families and short qualifiers,
//! value encodings — and implements [`Entity`]. A [`Db`] hands out a [`Repository`] per entity
//! type, which reads and writes through the [`Store`] trait, the only thing this crate asks of
//! a backend. The embedded engine ([`cellar_engine`]) is the default store.
//!
//! Layers: `key`, `value` and `blob` (versioned blob cells) encode; `entity` describes;
//! `store` persists; `repo`, `aggregate` and `db` are the API. Applications use all of it
//! through the `cellar` facade.

pub mod advice;
pub mod aggregate;
pub mod alter;
pub mod blob;
pub mod catalog;
pub mod census;
pub mod copy;
mod db;
pub mod entity;
mod error;
pub mod index;
mod jobs;
pub mod key;
mod layout;
pub mod migrate;
pub mod record;
pub mod rename;
pub mod repo;
pub mod store;
mod trace;
pub mod uid;
pub mod value;
pub mod wide;
mod writer;

/// What the code `cellar-derive` generates calls, and nothing else should: no stable API, it
/// changes with the derive macros.
#[doc(hidden)]
pub mod __private {
    pub use crate::aggregate::{check_aggregate, collection, node_of, versioned_codec};
    pub use crate::blob::versioned::{decode_version, step, unknown_version, write as write_blob};
    pub use crate::entity::{
        decode_blob, decode_blob_opt, decode_column, decode_serde, decode_serde_opt, encode_blob, encode_serde,
        restore_hashed,
    };
    pub use crate::index::{encode_optional, encode_required};
    pub use crate::key::name_of;
    pub use crate::record::{check_members, not_a_member};
    pub use crate::value::to_msgpack;
    pub use crate::wide::{decode_entries, encode_entries};
}

#[cfg(feature = "test-util")]
pub mod testing;

pub use advice::Advice;
pub use aggregate::{Aggregate, AggregateRepository, AsyncAggregateRepository, Part};
pub use alter::AlterReport;
/// Reference-counted bytes, as cell values and blobs are read (re-exported from `bytes`).
pub use bytes::Bytes;
pub use census::{CensusJob, ColumnCensus, EntityCensus};
pub use db::{Db, DbStats};
pub use entity::{Entity, KeyPrefix, Schema};
pub use error::{Error, Result};
pub use index::Index;
pub use key::Timestamp;
pub use layout::Layout;
pub use record::{Member, Record};
pub use rename::{MoveRenamed, MoveReport};
pub use repo::{
    AsyncQuery, AsyncRecords, AsyncRepository, Counter, Cursor, EntityIter, EntityStream, Page, Query, Records,
    Repository, Skipped,
};
pub use store::{Costs, EmbeddedStore, Latencies, Latency, Metered, Store};
