//! Dual-write secondary indexes: declared on an entity, kept in step with its rows on every
//! write, and safe across crashes.
//!
//! An index row lives in the entity table's index table ([`index_table`]) under
//! `[record type][index name] 0x00 [encoded values][primary row key]` (a unique index leaves
//! the primary key out: one row per value). The values are encoded like row-key parts, so
//! index rows sort as the values do and prefix and range scans work as they do on row keys.
//! Each index row holds a state cell (verified, or unverified by a named writer), the primary
//! row key, and a copy of the indexed and included columns (a covered read needs no data row).
//!
//! Writes follow the verified/unverified protocol (see `write`), or, on a store with atomic
//! commits, change the data row and its index rows in one commit (see `commit`); reads trust
//! verified rows and check unverified ones against the data row (see `read`).

mod backfill;
mod batch;
mod commit;
mod entry;
mod fence;
mod read;
mod status;
mod verify;
mod write;

use std::marker::PhantomData;

use crate::key::{encode_part, KeyError, KeyPart, PartSpec, Timestamp};
use crate::value::Column;

pub use backfill::{Backfill, BackfillProgress, BackfillReport, Violation, CHECKPOINT_EVERY};
pub(crate) use batch::write_many;
pub(crate) use entry::is_tombstone;
pub use read::{AsyncIndexQuery, AsyncIndexReader, IndexEntry, IndexQuery, IndexReader};
pub use status::STATUS_TABLE;
pub(crate) use status::{drop_status, Statuses};
pub use verify::{AsyncVerify, Verify, VerifyReport};
pub(crate) use write::{Change, IndexedWrite, Version};

/// One part of an index's value: a stored column, encoded like a row-key part.
#[derive(Debug, Clone, Copy)]
pub struct IndexPart {
    /// The field.
    pub field: &'static str,
    /// Position of the field's column in [`crate::Schema::columns`].
    pub column: usize,
    /// Framing and modifier (never `Last`: the primary key follows the values).
    pub spec: PartSpec,
    /// The field's Rust type, as written.
    pub type_name: &'static str,
    /// Encodes the column's stored cell (`None`: absent) as this part; `Ok(false)` for an
    /// absent optional field, which is not indexed.
    pub encode: EncodeCell,
}

/// Encodes a stored cell as an index part: see [`IndexPart::encode`].
pub type EncodeCell = fn(Option<&[u8]>, &PartSpec, &mut Vec<u8>) -> Result<bool, String>;

impl PartialEq for IndexPart {
    fn eq(&self, other: &Self) -> bool {
        // The encoders follow from the type, which `type_name` names.
        (self.field, self.column, self.spec, self.type_name) == (other.field, other.column, other.spec, other.type_name)
    }
}
impl Eq for IndexPart {}

/// A secondary index of an entity, as `#[derive(Entity)]` declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexSpec {
    /// The index's name, unique within the entity.
    pub name: &'static str,
    /// The indexed fields, in order.
    pub parts: &'static [IndexPart],
    /// At most one entity per value.
    pub unique: bool,
    /// Columns copied into each index row besides the parts' (positions in
    /// [`crate::Schema::columns`]).
    pub include: &'static [usize],
}

/// Encodes a required field's cell as an index part (generated code's [`IndexPart::encode`]).
///
/// # Errors
/// A missing or malformed cell, or a value that does not fit the part.
#[doc(hidden)]
pub fn encode_required<T: Column + KeyPart>(
    cell: Option<&[u8]>,
    spec: &PartSpec,
    out: &mut Vec<u8>,
) -> Result<bool, String> {
    // Indexed fields are plain values: a cell written before the field was widened reads as
    // the wider type, so its entry is the one a write of the value today makes.
    let value = T::decode_widened(cell).map_err(|e| e.to_string())?;
    encode_part(&value, spec, out).map_err(|e| e.to_string())?;
    Ok(true)
}

/// Encodes an optional field's cell (`T` is the type inside the `Option`): an absent cell is
/// not indexed.
///
/// # Errors
/// As [`encode_required`].
#[doc(hidden)]
pub fn encode_optional<T: Column + KeyPart>(
    cell: Option<&[u8]>,
    spec: &PartSpec,
    out: &mut Vec<u8>,
) -> Result<bool, String> {
    match cell {
        None => Ok(false),
        Some(_) => encode_required::<T>(cell, spec, out),
    }
}

/// True if `row` of the entity's table belongs to another record type (a single-table design).
pub(crate) fn is_other_record_type<E: crate::Entity>(row: &crate::store::Row) -> bool {
    E::key_from_row(row).is_err_and(|e| e.other_record_type)
}

/// The table that holds the index rows of `table`.
pub fn index_table(table: &str) -> String {
    format!("{table}_idx")
}

/// A typed handle on an index of entity `E` whose values are `V` (the field's type, or a
/// tuple of the fields' types in index order). Generated as an associated constant
/// (`Customer::BY_EMAIL`); pass it to [`crate::Repository::index`].
#[derive(Debug)]
pub struct Index<E, V> {
    position: usize,
    _types: PhantomData<fn() -> (E, V)>,
}

impl<E, V> Clone for Index<E, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<E, V> Copy for Index<E, V> {}

impl<E: crate::Entity, V> Index<E, V> {
    /// The index at `position` in the entity's schema (generated code only).
    pub const fn new(position: usize) -> Self {
        Index { position, _types: PhantomData }
    }

    /// The index's declaration.
    pub fn spec(&self) -> &'static IndexSpec {
        &E::SCHEMA.indexes[self.position]
    }

    pub(crate) fn position(&self) -> usize {
        self.position
    }
}

/// Values of an index, or of a leading run of its parts: encoded part by part with the index's
/// framing and modifiers.
pub trait IndexValue {
    /// How many parts the value covers.
    const PARTS: usize;

    /// Appends the encoding of the value as the first [`IndexValue::PARTS`] parts of `parts`.
    ///
    /// # Errors
    /// A value that does not fit its part.
    fn encode_value(&self, parts: &[IndexPart], out: &mut Vec<u8>) -> Result<(), KeyError>;
}

/// `Self` is a leading run of the parts of an index whose values are `V`: what a prefix scan
/// takes (`(city,)` of a `(city, name)` index, or the whole value).
pub trait PrefixOf<V>: IndexValue {}

macro_rules! single_values {
    ($($t:ty),*) => {$(
        impl IndexValue for $t {
            const PARTS: usize = 1;
            fn encode_value(&self, parts: &[IndexPart], out: &mut Vec<u8>) -> Result<(), KeyError> {
                encode_part(self, &parts[0].spec, out)
            }
        }
        impl PrefixOf<$t> for $t {}
    )*};
}
single_values!(u8, u16, u32, u64, u128, i8, i16, i32, i64, i128, f32, f64, bool, String, Vec<u8>, Timestamp);

macro_rules! tuple_values {
    ($n:expr; $($t:ident . $i:tt),*) => {
        impl<$($t: KeyPart),*> IndexValue for ($($t,)*) {
            const PARTS: usize = $n;
            fn encode_value(&self, parts: &[IndexPart], out: &mut Vec<u8>) -> Result<(), KeyError> {
                $(encode_part(&self.$i, &parts[$i].spec, out)?;)*
                Ok(())
            }
        }
    };
}
tuple_values!(1; A.0);
tuple_values!(2; A.0, B.1);
tuple_values!(3; A.0, B.1, C.2);
tuple_values!(4; A.0, B.1, C.2, D.3);

macro_rules! prefixes {
    ([$($have:ident),*] of [$($all:ident),*]) => {
        impl<$($all: KeyPart),*> PrefixOf<($($all,)*)> for ($($have,)*) {}
    };
}
prefixes!([A] of [A]);
prefixes!([A] of [A, B]);
prefixes!([A, B] of [A, B]);
prefixes!([A] of [A, B, C]);
prefixes!([A, B] of [A, B, C]);
prefixes!([A, B, C] of [A, B, C]);
prefixes!([A] of [A, B, C, D]);
prefixes!([A, B] of [A, B, C, D]);
prefixes!([A, B, C] of [A, B, C, D]);
prefixes!([A, B, C, D] of [A, B, C, D]);
