//! What `#[derive(Entity)]` generates against: the [`Entity`] trait and the static [`Schema`]
//! that describes an entity's physical layout (table, key parts, record type, salt, families,
//! columns).

use bytes::Bytes;

use crate::key::{Digest, KeyError, PartSpec, RowKey, Salt, Timestamp, UidResolver, Unresolved};
use crate::store::{CellMutation, LentRow};
use crate::value::{ColumnValue, ValueError};

/// A row-key part of an entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyField {
    /// Name, framing and modifier.
    pub spec: PartSpec,
    /// The field's Rust type, as written.
    pub type_name: &'static str,
    /// Encoded width in bytes, if fixed.
    pub width: Option<usize>,
    /// The type's encoding, in words (framing and modifier are in `spec`).
    pub encoding: &'static str,
    /// Stored as the uid of its name ([`crate::uid`]), if declared `uid`.
    pub uid: Option<crate::key::UidSpec>,
}

/// How a field is stored in its cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    /// Encoded like HBase `Bytes.toBytes`.
    Value,
    /// Serialized with serde as MessagePack.
    Serde,
    /// A versioned blob ([`crate::blob::Versioned`]): header, codec, schema version.
    Blob,
    /// An 8-byte counter, changed only by increments.
    Counter,
    /// The optimistic-concurrency version.
    Version,
    /// The original value of an MD5-hashed key part.
    HashedKey,
}

/// A field stored in a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnSpec {
    /// Field name.
    pub field: &'static str,
    /// Family.
    pub family: &'static str,
    /// Qualifier.
    pub qualifier: &'static str,
    /// The field's Rust type, as written.
    pub type_name: &'static str,
    /// What the cell holds.
    pub kind: ColumnKind,
    /// The value's encoding, in words.
    pub encoding: &'static str,
    /// A `#[cellar(blob)]` column: the current format of its `Versioned` type.
    pub current_blob: Option<crate::blob::BlobFormat>,
    /// Earlier qualifiers of the column in its family (`rename_from`, `aliases`): a read takes
    /// the newest cell of the qualifier and these; a write puts only the qualifier.
    pub aliases: &'static [&'static str],
    /// `#[cellar(default)]`: what a row without the cell reads as.
    pub default: Option<FieldDefault>,
}

/// The default of a `#[cellar(default)]` field: what a row without its cell reads as.
#[derive(Clone, Copy)]
pub struct FieldDefault {
    /// The expression, as written: `Default::default()` or the function's path.
    pub expr: &'static str,
    /// The default's cell, encoded as the field's cells are (`None` if it does not encode).
    pub cell: fn() -> Option<Vec<u8>>,
}

impl std::fmt::Debug for FieldDefault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FieldDefault").field("expr", &self.expr).finish_non_exhaustive()
    }
}

impl PartialEq for FieldDefault {
    fn eq(&self, other: &Self) -> bool {
        // The function follows from the expression.
        self.expr == other.expr
    }
}
impl Eq for FieldDefault {}

impl ColumnSpec {
    /// The cell of this column in `row` as of `as_of`: the newest version at or before it of
    /// the qualifier or, for a renamed column, of any earlier qualifier (the current one wins
    /// a tie). Absent cells are absent: see [`ColumnSpec::resolved_cell`] for defaults.
    pub fn cell_in<'r>(&self, row: LentRow<'r>, as_of: u64) -> Option<&'r [u8]> {
        if self.aliases.is_empty() {
            return row.value_at(self.family, self.qualifier, as_of);
        }
        let mut newest: Option<crate::store::LentCell<'r>> = None;
        for qualifier in std::iter::once(self.qualifier).chain(self.aliases.iter().copied()) {
            if let Some(cell) = row.cell_at(self.family, qualifier, as_of) {
                if newest.is_none_or(|n| cell.timestamp > n.timestamp) {
                    newest = Some(cell);
                }
            }
        }
        newest.map(|c| c.value)
    }

    /// The newest cell of this column in `row` as [`ColumnSpec::cell_in`] finds it, or the
    /// default's cell for a `#[cellar(default)]` field without one: what the field reads as,
    /// encoded. Index entries are computed from it.
    pub fn resolved_cell(&self, row: LentRow<'_>) -> Option<Bytes> {
        match self.cell_in(row, u64::MAX) {
            Some(cell) => Some(Bytes::copy_from_slice(cell)),
            None => self.default.and_then(|d| (d.cell)()).map(Bytes::from),
        }
    }
}

/// A family an entity uses, with the settings it declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FamilySchema {
    /// Name.
    pub name: &'static str,
    /// Versions kept per column.
    pub max_versions: u32,
    /// Time to live in seconds.
    pub ttl_secs: Option<u64>,
}

/// An entity's physical layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schema {
    /// The Rust type name.
    pub entity: &'static str,
    /// Table.
    pub table: &'static str,
    /// Families, the default first.
    pub families: &'static [FamilySchema],
    /// The record-type byte after the partition parts (single-table designs).
    pub record_type: Option<u8>,
    /// Leading salt or bucket byte.
    pub salt: Salt,
    /// Key parts before the record type.
    pub partition: &'static [KeyField],
    /// Key parts after the record type.
    pub key: &'static [KeyField],
    /// Fields stored in cells.
    pub columns: &'static [ColumnSpec],
    /// Secondary indexes.
    pub indexes: &'static [crate::index::IndexSpec],
    /// Map fields stored as columns of a family of their own ([`crate::wide`]).
    pub wide: &'static [crate::wide::WideSpec],
    /// The families an entity read returns: all but those of lazy wide fields.
    pub eager_families: &'static [&'static str],
}

impl Schema {
    /// The column that stores `field`.
    pub fn column(&self, field: &str) -> Option<&'static ColumnSpec> {
        self.columns.iter().find(|c| c.field == field)
    }

    /// The columns an entity read asks for: every family but those of lazy wide fields.
    pub fn read_columns(&self) -> crate::store::Columns {
        if self.wide.iter().any(|w| w.lazy) {
            crate::store::Columns::Families(self.eager_families)
        } else {
            crate::store::Columns::All
        }
    }

    /// How an entity read reads its row: the newest version of [`Schema::read_columns`].
    pub fn read_spec(&self) -> crate::store::ReadSpec {
        crate::store::ReadSpec { columns: self.read_columns(), ..crate::store::ReadSpec::default() }
    }

    /// The version column, if the entity has one.
    pub fn version_column(&self) -> Option<&'static ColumnSpec> {
        self.columns.iter().find(|c| c.kind == ColumnKind::Version)
    }

    /// The version the data row `row` (at row key `key`) stores in `column`, 0 without one,
    /// and the cell's bytes.
    ///
    /// # Errors
    /// [`crate::Error::Decode`] for a cell that is not a version.
    pub(crate) fn stored_version<'r>(
        &self,
        key: &[u8],
        row: Option<&'r crate::store::Row>,
        column: &ColumnSpec,
    ) -> crate::Result<(u64, Option<&'r [u8]>)> {
        let Some(raw) = row.and_then(|r| r.value(column.family, column.qualifier)) else { return Ok((0, None)) };
        let version = u64::from_bytes(raw).map_err(|e| crate::Error::Decode {
            table: self.table,
            row: crate::repo::printable(key),
            column: Some(format!("{}:{}", column.family, column.qualifier)),
            reason: e.to_string(),
        })?;
        Ok((version, Some(raw)))
    }
}

/// The put of the version after `stored` in `column`.
///
/// # Errors
/// [`crate::Error::InvalidArgument`] once the counter is exhausted.
pub(crate) fn next_version_put(column: &'static ColumnSpec, stored: u64) -> crate::Result<CellMutation> {
    let next = stored
        .checked_add(1)
        .ok_or(crate::Error::InvalidArgument { arg: "entity", reason: "version counter is exhausted".into() })?;
    Ok(CellMutation::Put {
        family: Bytes::from_static(column.family.as_bytes()),
        qualifier: Bytes::from_static(column.qualifier.as_bytes()),
        value: next.to_bytes().into(),
        timestamp: None,
    })
}

/// A cell an entity writes: `None` deletes the column (an `Option` field set to `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellValue {
    /// Family.
    pub family: &'static str,
    /// Qualifier.
    pub qualifier: &'static str,
    /// Value.
    pub value: Option<Vec<u8>>,
}

impl CellValue {
    /// The mutation that writes this cell: a put, or a column delete for `None`.
    pub fn into_mutation(self) -> CellMutation {
        let family = Bytes::from_static(self.family.as_bytes());
        let qualifier = Bytes::from_static(self.qualifier.as_bytes());
        match self.value {
            Some(value) => CellMutation::Put { family, qualifier, value: value.into(), timestamp: None },
            None => CellMutation::DeleteColumn { family, qualifier },
        }
    }
}

/// Why a row does not decode as an entity; the repository adds table and row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// `family:qualifier` at fault, if a column is.
    pub column: Option<String>,
    /// What is wrong.
    pub reason: String,
    /// True if the row belongs to another record type of the table (scans skip those).
    pub other_record_type: bool,
}

impl From<KeyError> for FieldError {
    fn from(e: KeyError) -> Self {
        let other_record_type = matches!(e, KeyError::RecordType { .. });
        FieldError { column: None, reason: format!("row key: {e}"), other_record_type }
    }
}

impl FieldError {
    /// A column's value is missing or malformed.
    pub fn column(spec: &ColumnSpec, e: ValueError) -> Self {
        FieldError {
            column: Some(format!("{}:{}", spec.family, spec.qualifier)),
            reason: format!("field `{}` ({}): {e}", spec.field, spec.type_name),
            other_record_type: false,
        }
    }
}

/// A Rust type stored as rows of a table. Implemented by `#[derive(Entity)]`.
///
/// Entities are plain data, shared with the threads and tasks that read and write them:
/// `Send + Sync`.
pub trait Entity: Sized + Send + Sync + 'static {
    /// The typed row key (`<Entity>Key`).
    type Key: Clone + std::fmt::Debug + Send + Sync;

    /// The physical layout.
    const SCHEMA: Schema;

    /// False for the rows of an aggregate's objects, which are written only through its
    /// repository ([`crate::Db::aggregates`]).
    const STANDALONE: bool = true;

    /// This entity's key.
    fn key(&self) -> Self::Key;

    /// Encodes a key.
    ///
    /// # Errors
    /// A key part whose value does not fit its declared form; a part stored as a uid
    /// (resolved only by [`Entity::row_key_in`]).
    fn row_key(key: &Self::Key) -> Result<RowKey, KeyError> {
        Self::row_key_in(key, &Unresolved)
    }

    /// Encodes a key, parts stored as uids resolved by `uids`.
    ///
    /// # Errors
    /// As [`Entity::row_key`]; as [`UidResolver::id`].
    fn row_key_in(key: &Self::Key, uids: &dyn UidResolver) -> Result<RowKey, KeyError>;

    /// The cells a put writes (counters excluded).
    ///
    /// # Errors
    /// [`crate::Error::Encode`] for a value serde cannot encode.
    fn cells(&self) -> crate::Result<Vec<CellValue>>;

    /// Appends [`Entity::cells`] to `out` as the mutations a put writes
    /// ([`CellValue::into_mutation`]), without a list in between. The derive writes it.
    ///
    /// # Errors
    /// As [`Entity::cells`].
    fn push_cell_mutations(&self, out: &mut Vec<CellMutation>) -> crate::Result<()> {
        out.extend(self.cells()?.into_iter().map(CellValue::into_mutation));
        Ok(())
    }

    /// The entries of the entity's wide fields (see [`crate::wide`]), one set per field.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] for an entry key that does not fit its encoding.
    fn wide_cells(&self) -> crate::Result<Vec<crate::wide::WideCells>> {
        Ok(Vec::new())
    }

    /// Decodes the key of a stored row: the key parts from the row key, hashed ones from their
    /// columns (which `row` must hold: a row of copies, such as an index entry, may not).
    ///
    /// # Errors
    /// A [`FieldError`] for a malformed key, another record type (flagged
    /// [`FieldError::other_record_type`]), or a hashed part's missing or mismatching column.
    fn key_from_row<'r>(row: impl Into<LentRow<'r>>) -> Result<Self::Key, FieldError> {
        Self::key_from_row_in(row.into(), &Unresolved)
    }

    /// Decodes the key of a stored row, parts stored as uids resolved by `uids`.
    ///
    /// # Errors
    /// As [`Entity::key_from_row`]; as [`UidResolver::name`].
    fn key_from_row_in(row: LentRow<'_>, uids: &dyn UidResolver) -> Result<Self::Key, FieldError>;

    /// Rebuilds an entity from a row (a [`Row`](crate::store::Row) or a [`LentRow`]), taking
    /// each column's newest version at or before `as_of`.
    ///
    /// # Errors
    /// A [`FieldError`] naming what does not decode.
    fn from_row<'r>(row: impl Into<LentRow<'r>>, as_of: u64) -> Result<Self, FieldError> {
        Self::from_row_in(row.into(), as_of, &Unresolved)
    }

    /// Rebuilds an entity from a row, parts stored as uids resolved by `uids`.
    ///
    /// # Errors
    /// As [`Entity::from_row`]; as [`UidResolver::name`].
    fn from_row_in(row: LentRow<'_>, as_of: u64, uids: &dyn UidResolver) -> Result<Self, FieldError>;

    /// The physical layout, printable: table, key parts with encodings and widths, record
    /// type, families and columns.
    fn layout() -> crate::Layout {
        Self::SCHEMA.layout()
    }

    /// The entity checked against the rules of thumb of schema design (see [`crate::advice`]).
    /// [`crate::Db::advise`] also checks the regions of its stored table.
    fn advice() -> Vec<crate::Advice> {
        Self::SCHEMA.advice()
    }

    /// The optimistic-concurrency version, for entities with a version field.
    fn version(&self) -> Option<u64> {
        None
    }

    /// Sets the version after a successful optimistic write.
    fn set_version(&mut self, _version: u64) {}
}

/// A leading run of an entity's key parts: scans by prefix return every entity whose key
/// starts with it. Generated as `<Entity>Key::<first part>(value)` and chained methods.
pub trait KeyPrefix<E: Entity> {
    /// The encoded prefix.
    ///
    /// # Errors
    /// A part value that does not fit its declared form; a part stored as a uid.
    fn encode_prefix(&self) -> Result<RowKey, KeyError> {
        self.encode_prefix_in(&Unresolved)
    }

    /// The encoded prefix, parts stored as uids resolved by `uids`.
    ///
    /// # Errors
    /// As [`KeyPrefix::encode_prefix`]; as [`UidResolver::id`].
    fn encode_prefix_in(&self, uids: &dyn UidResolver) -> Result<RowKey, KeyError>;
}

/// Decodes a column of `row` as `T` (helper for generated code).
///
/// # Errors
/// A [`FieldError`] naming the column.
#[doc(hidden)]
pub fn decode_column<T: crate::value::Column>(
    row: LentRow<'_>,
    spec: &ColumnSpec,
    as_of: u64,
) -> Result<T, FieldError> {
    let cell = spec.cell_in(row, as_of);
    // Only plain values widen: a version, counter or key copy has one width.
    let value = if spec.kind == ColumnKind::Value { T::decode_widened(cell) } else { T::decode_cell(cell) };
    value.map_err(|e| FieldError::column(spec, e))
}

/// Decodes a MessagePack column of `row` (helper for generated code); `optional` fields take
/// an absent cell as `None`.
///
/// # Errors
/// A [`FieldError`] naming the column.
#[doc(hidden)]
pub fn decode_serde<T: serde::de::DeserializeOwned>(
    row: LentRow<'_>,
    spec: &ColumnSpec,
    as_of: u64,
) -> Result<T, FieldError> {
    let cell = spec.cell_in(row, as_of).ok_or_else(|| FieldError::column(spec, ValueError::Missing))?;
    crate::value::from_msgpack(cell).map_err(|e| FieldError::column(spec, e))
}

/// Decodes an optional MessagePack column (helper for generated code).
///
/// # Errors
/// A [`FieldError`] naming the column.
#[doc(hidden)]
pub fn decode_serde_opt<T: serde::de::DeserializeOwned>(
    row: LentRow<'_>,
    spec: &ColumnSpec,
    as_of: u64,
) -> Result<Option<T>, FieldError> {
    spec.cell_in(row, as_of)
        .map(|cell| crate::value::from_msgpack(cell).map_err(|e| FieldError::column(spec, e)))
        .transpose()
}

/// Decodes a versioned-blob column written at any version its type reads (helper for
/// generated code).
///
/// # Errors
/// A [`FieldError`] naming the column, with what is wrong and the versions involved.
#[doc(hidden)]
pub fn decode_blob<T: crate::blob::Versioned>(
    row: LentRow<'_>,
    spec: &ColumnSpec,
    as_of: u64,
) -> Result<T, FieldError> {
    let cell = spec.cell_in(row, as_of).ok_or_else(|| FieldError::column(spec, ValueError::Missing))?;
    read_blob(spec, cell)
}

/// Decodes an optional versioned-blob column (helper for generated code).
///
/// # Errors
/// As [`decode_blob`].
#[doc(hidden)]
pub fn decode_blob_opt<T: crate::blob::Versioned>(
    row: LentRow<'_>,
    spec: &ColumnSpec,
    as_of: u64,
) -> Result<Option<T>, FieldError> {
    spec.cell_in(row, as_of).map(|cell| read_blob(spec, cell)).transpose()
}

fn read_blob<T: crate::blob::Versioned>(spec: &ColumnSpec, cell: &[u8]) -> Result<T, FieldError> {
    crate::blob::versioned::read::<T>(cell)
        .map(|read| read.value)
        .map_err(|e| FieldError::column(spec, ValueError::Malformed(e.to_string())))
}

/// Encodes a versioned-blob column at the type's current version (helper for generated code).
///
/// # Errors
/// [`crate::Error::Encode`] naming the field.
#[doc(hidden)]
pub fn encode_blob<T: crate::blob::Versioned>(
    entity: &'static str,
    field: &'static str,
    v: &T,
) -> crate::Result<Vec<u8>> {
    crate::blob::versioned::write(v).map_err(|e| crate::Error::Encode { entity, field, reason: e.to_string() })
}

/// Encodes a MessagePack column (helper for generated code).
///
/// # Errors
/// [`crate::Error::Encode`].
#[doc(hidden)]
pub fn encode_serde<T: serde::Serialize + ?Sized>(
    entity: &'static str,
    field: &'static str,
    v: &T,
) -> crate::Result<Vec<u8>> {
    crate::value::to_msgpack(v).map_err(|e| crate::Error::Encode { entity, field, reason: e.to_string() })
}

/// Restores a hashed key part from its column and checks it against the key's digest.
///
/// # Errors
/// A [`FieldError`] for a missing, malformed or mismatching value.
#[doc(hidden)]
pub fn restore_hashed<T: crate::value::ColumnValue + crate::key::KeyPart>(
    digest: &Digest,
    row: LentRow<'_>,
    field: &KeyField,
    spec: &ColumnSpec,
) -> Result<T, FieldError> {
    let value: T = decode_column(row, spec, u64::MAX)?;
    digest.check(&value, field)?;
    Ok(value)
}

/// A value a bucketed entity's bucket is computed from (`bucket(field = ..., buckets = N)`).
pub trait BucketValue {
    /// The number the bucket is `value % buckets` of.
    fn bucket_value(&self) -> u64;
}

impl BucketValue for Timestamp {
    fn bucket_value(&self) -> u64 {
        self.0
    }
}

macro_rules! bucket_numbers {
    ($($t:ty),*) => {$(
        impl BucketValue for $t {
            fn bucket_value(&self) -> u64 {
                *self as u64
            }
        }
    )*};
}
bucket_numbers!(u8, u16, u32, u64, i8, i16, i32, i64);
