//! Aggregates: an object graph — a root with child collections, nested — persisted in one of
//! four storage strategies chosen by one attribute, the Rust types and the API unchanged.
//!
//! `#[derive(Aggregate)]` on the root and `#[derive(Part)]` on every child type implement
//! [`Aggregate`] and [`Part`]. Each object also implements [`Entity`] for the row it maps to on
//! its own (its key parts and columns; the child collections are not part of that row), so
//! keys, values and record-type bytes are encoded by the same code as plain entities: the
//! typed rows of `single_table` and `denormalized` carry their record-type byte exactly where
//! a `#[derive(Record)]` member's rows do, after the partition (the root's key).
//!
//! The strategies ([`Strategy`]) differ only in how a tree of [`Node`]s becomes rows
//! (`rows.rs`); the repository ([`AggregateRepository`]) reads, diffs and writes those rows
//! with the atomicity the store offers (`repo.rs`, and `intent.rs` where the store cannot
//! mutate the rows together), `shape.rs` numbers the record types and checks at compile time
//! that a strategy can hold the nesting, and `advice.rs` says what the strategy costs.

mod advice;
mod blob;
mod children;
mod intent;
mod nonblocking;
mod repo;
mod rows;
mod scan;
mod shape;

use std::marker::PhantomData;

pub use crate::blob::{read_header, BlobHeader, BLOB_MAGIC};
pub use advice::ADVICE_SAMPLE;
pub use children::Children;
pub use intent::LEASE;
pub use nonblocking::{AsyncAggregateRepository, AsyncChildren};
pub use repo::AggregateRepository;
pub use scan::{AggregateIter, AggregateQuery, AsyncAggregateQuery};
pub use shape::{check_aggregate, AggregateLayout};

use crate::entity::{Entity, FieldError, Schema};
use crate::store::Row;

/// The column a `blob` aggregate's cell is stored in: the root's default family, qualifier `b`.
pub(crate) fn blob_column(root: &Schema) -> (&'static str, &'static [u8]) {
    (shape::default_family(root), rows::BLOB)
}

/// How an aggregate's objects are laid out in rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// A table per object type; a child's key is its parent's key followed by its own:
    /// `[order]`, `[order][loc]`, `[order][loc][line]`.
    Normalized,
    /// One table, a record-type byte after the root's key: `[order][T_ORDER]`,
    /// `[order][T_SHIP][loc]`, `[order][T_LINE][loc][line]`. One prefix scan reads it all.
    SingleTable,
    /// One table; the middle level is collapsed onto its children: each line item row
    /// `[order][T_LINE][line]` carries a copy of its location's columns, kept in step on every
    /// write. Line keys are unique across the aggregate.
    Denormalized,
    /// The whole graph in one cell of one row, behind a versioned header.
    Blob,
}

impl Strategy {
    /// The name used in `#[cellar(strategy = "...")]`.
    pub const fn name(self) -> &'static str {
        match self {
            Strategy::Normalized => "normalized",
            Strategy::SingleTable => "single_table",
            Strategy::Denormalized => "denormalized",
            Strategy::Blob => "blob",
        }
    }

    /// True if the root row carries a record-type byte after its key.
    pub const fn typed_rows(self) -> bool {
        matches!(self, Strategy::SingleTable | Strategy::Denormalized)
    }
}

/// A child collection of a part, as the derive declares it.
#[derive(Debug, Clone, Copy)]
pub struct ChildSchema {
    /// The field holding the collection.
    pub field: &'static str,
    /// A record type declared with `#[cellar(children, record_type = N)]`.
    pub record_type: Option<u8>,
    /// The child type's own row: key parts and columns.
    pub schema: &'static Schema,
    /// The child type's own collections.
    pub children: &'static [ChildSchema],
}

/// An aggregate as the derive declares it.
#[derive(Debug, Clone, Copy)]
pub struct AggregateSchema {
    /// How it is laid out.
    pub strategy: Strategy,
    /// The root's own row (table, key parts, columns; its record type under typed strategies).
    pub root: &'static Schema,
    /// The root's collections.
    pub children: &'static [ChildSchema],
    /// A `blob` aggregate that is [`crate::blob::Versioned`]: its cell is the versioned value
    /// rather than Cellar's node tree.
    pub blob: Option<BlobCodec>,
}

/// How a `blob` aggregate declared `blob(...)` writes and reads its cell (generated code).
#[derive(Debug, Clone, Copy)]
pub struct BlobCodec {
    /// The format the current version is written in.
    pub format: crate::blob::BlobFormat,
    /// The aggregate's tree as a blob cell of the current version.
    pub encode: fn(&Node) -> Result<Vec<u8>, String>,
    /// A blob cell of any version the type reads, as the tree.
    pub decode: fn(&[u8]) -> Result<DecodedBlob, String>,
}

/// A versioned blob cell, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedBlob {
    /// The aggregate's tree.
    pub node: Node,
    /// True if the cell held the current version in the current codec.
    pub current: bool,
}

/// The [`BlobCodec`] of a versioned aggregate.
#[doc(hidden)]
pub const fn versioned_codec<A: Aggregate + crate::blob::Versioned>() -> BlobCodec {
    BlobCodec { format: A::FORMAT, encode: encode_versioned::<A>, decode: decode_versioned::<A> }
}

fn encode_versioned<A: Aggregate + crate::blob::Versioned>(node: &Node) -> Result<Vec<u8>, String> {
    let value = A::from_node(node.clone()).map_err(|e| e.reason)?;
    crate::blob::versioned::write(&value).map_err(|e| e.to_string())
}

fn decode_versioned<A: Aggregate + crate::blob::Versioned>(cell: &[u8]) -> Result<DecodedBlob, String> {
    let read = crate::blob::versioned::read::<A>(cell).map_err(|e| e.to_string())?;
    let current = read.is_current();
    Ok(DecodedBlob { node: read.value.to_node().map_err(|e| e.to_string())?, current })
}

/// One object of an aggregate in storage terms: its own row (the root's full row key, or a
/// part's own encoded key; its cells) and its child collections, each in key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Own key and cells (timestamps are not meaningful here).
    pub row: Row,
    /// One list per child collection, in declaration order.
    pub children: Vec<Vec<Node>>,
}

/// A type stored as one object of an aggregate: its key parts, columns and child
/// collections. Implemented by `#[derive(Part)]` (and by `#[derive(Aggregate)]` for roots).
pub trait Part: Entity {
    /// The child collections, in field order.
    const CHILDREN: &'static [ChildSchema];

    /// This object and its descendants as nodes.
    ///
    /// # Errors
    /// Key or value encoding errors.
    fn to_node(&self) -> crate::Result<Node>;

    /// Rebuilds the object and its descendants from nodes; collections a node lacks are empty.
    ///
    /// # Errors
    /// A [`FieldError`] naming what does not decode.
    fn from_node(node: Node) -> Result<Self, FieldError>;
}

/// The root of an aggregate. Implemented by `#[derive(Aggregate)]`.
pub trait Aggregate: Part {
    /// The strategy and the tree of parts.
    const AGGREGATE: AggregateSchema;
}

/// A child collection of `P` holding `C`s, generated as an associated constant named after the
/// field (`Order::SHIP_TO`): it addresses children in [`AggregateRepository::children`].
#[derive(Debug)]
pub struct ChildField<P, C> {
    index: usize,
    _types: PhantomData<fn() -> (P, C)>,
}

impl<P, C> Clone for ChildField<P, C> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P, C> Copy for ChildField<P, C> {}

impl<P: Part, C: Part> ChildField<P, C> {
    /// The collection at `index` among `P`'s collections (generated code only).
    pub const fn new(index: usize) -> Self {
        ChildField { index, _types: PhantomData }
    }

    /// Position among the parent's collections.
    pub const fn index(self) -> usize {
        self.index
    }
}

/// Rebuilds a child collection (helper for generated code).
///
/// # Errors
/// The first child that does not decode.
#[doc(hidden)]
pub fn collection<C: Part>(nodes: Option<Vec<Node>>) -> Result<Vec<C>, FieldError> {
    nodes.unwrap_or_default().into_iter().map(C::from_node).collect()
}

/// The node of `part` with its own row and the given collections (helper for generated code).
///
/// # Errors
/// Key or value encoding errors.
#[doc(hidden)]
pub fn node_of<E: Entity>(part: &E, root: bool, children: Vec<Vec<Node>>) -> crate::Result<Node> {
    let key = E::row_key(&part.key()).map_err(|source| crate::Error::Key { entity: E::SCHEMA.entity, source })?;
    let key = if root { key.for_write() } else { bytes::Bytes::copy_from_slice(key.body()) };
    let cells = part
        .cells()?
        .into_iter()
        .filter_map(|c| {
            c.value.map(|v| crate::store::StoredCell {
                family: bytes::Bytes::from_static(c.family.as_bytes()),
                qualifier: bytes::Bytes::from_static(c.qualifier.as_bytes()),
                timestamp: 0,
                value: v.into(),
            })
        })
        .collect();
    Ok(Node { row: Row { key, cells }, children })
}
