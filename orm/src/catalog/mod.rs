//! The schema catalog: what each type's rows look like, stored with the data, with the history
//! of how that changed.
//!
//! # Why
//! Two releases of an application write the same tables during a rolling deploy, and tools read
//! the tables without the application's types. The catalog is where both learn what a table
//! holds: at [`crate::Db::repo`], [`crate::Db::records`] and [`crate::Db::aggregates`] the
//! schema a release declares is compared with the one stored. A compatible change is recorded
//! as a new version; an incompatible one (the rules are in [`compare`]) is an
//! [`Error::SchemaIncompatible`] listing every difference, and the release writes nothing.
//!
//! # Format
//! Table [`CATALOG_TABLE`], family `c`, one row per type and table: `table 00 type`.
//! - `current`: the latest schema version, 8 bytes big-endian;
//! - `v` + version (8 bytes big-endian): that version as JSON ([`SchemaVersion`]): the
//!   type's [`TypeSchema`] (key layout, families, every field's qualifier, type, encoding and
//!   default, indexes, maps, an aggregate's strategy and parts), when it was first recorded, and
//!   what changed from the version before.
//!
//! A new version is written with a check-and-mutate on `current`, so two processes recording at
//! once cannot both win: the loser reads again and compares with what the winner wrote.
//!
//! # Older releases
//! A release whose schema is an earlier version of the history keeps working (it reads what it
//! can, as the rules of [`compare`] say for each change) unless a later version added or
//! redefined an index — its writes would not maintain it — or moved a column it reads without
//! it reading the new qualifier — it would read values as they were before the newer release's
//! writes. Such a release is refused until the index is dropped ([`crate::Db::drop_index`]) or
//! the release is replaced.

pub mod compare;
pub mod describe;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

pub use compare::Difference;
pub use describe::TypeSchema;

use crate::store::{AsyncStore, CellMutation, Condition, ReadSpec, Row, RowMutation, Store, TableSpec};
use crate::{Error, Result};

/// Where the schema catalog is kept.
pub const CATALOG_TABLE: &str = "cellar_schemas";
const FAMILY: &str = "c";
const CURRENT: &[u8] = b"current";
const VERSION_PREFIX: u8 = b'v';
/// Attempts at recording a version against concurrent recorders before giving up.
const RECORD_ATTEMPTS: usize = 8;

/// One version of a type's schema in the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaVersion {
    /// 1 for the first schema a table held for the type, then one more per recorded change.
    pub version: u64,
    /// When a release first opened the type with this schema (milliseconds since the epoch).
    pub first_written_ms: u64,
    /// What changed from the version before (empty for the first).
    pub changes: Vec<String>,
    /// The schema.
    pub schema: TypeSchema,
}

/// What opening a type against the catalog found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// The declared schema is the catalog's current version.
    Current(u64),
    /// The declared schema was recorded as a new version, after these changes.
    Recorded {
        /// The new version.
        version: u64,
        /// What changed.
        changes: Vec<String>,
    },
    /// The declared schema is an earlier version: an older release still running.
    Older {
        /// Its version.
        version: u64,
        /// The catalog's current version.
        current: u64,
    },
}

fn row_key(table: &str, name: &str) -> Bytes {
    let mut key = table.as_bytes().to_vec();
    key.push(0);
    key.extend_from_slice(name.as_bytes());
    key.into()
}

fn version_qualifier(version: u64) -> Bytes {
    let mut q = vec![VERSION_PREFIX];
    q.extend_from_slice(&version.to_be_bytes());
    q.into()
}

fn corrupt(key: &[u8], reason: String) -> Error {
    Error::Decode {
        table: CATALOG_TABLE,
        row: crate::repo::printable(key),
        column: None,
        reason: format!("schema catalog: {reason}"),
    }
}

/// A type's catalog row, read.
struct Stored {
    /// The `current` cell's bytes, for the check-and-mutate of the next version.
    current_cell: Option<Bytes>,
    /// Every version, oldest first.
    versions: Vec<SchemaVersion>,
}

impl Stored {
    fn current(&self) -> Option<&SchemaVersion> {
        self.versions.last()
    }
}

/// A type's catalog row as stored, if there is one.
fn read_row(store: &dyn Store, key: &Bytes) -> Result<Option<Row>> {
    let rows = store.read_rows(CATALOG_TABLE, std::slice::from_ref(key), &ReadSpec::default())?;
    Ok(rows.into_iter().flatten().next())
}

fn read(store: &dyn Store, key: &Bytes) -> Result<Stored> {
    parse(key, read_row(store, key)?.as_ref())
}

/// A catalog row (`None`: none) as its versions, checked against `current`.
fn parse(key: &[u8], row: Option<&Row>) -> Result<Stored> {
    let mut stored = Stored { current_cell: None, versions: Vec::new() };
    let Some(row) = row else { return Ok(stored) };
    for cell in &row.cells {
        if cell.qualifier == CURRENT {
            stored.current_cell = Some(cell.value.clone());
        } else if cell.qualifier.first() == Some(&VERSION_PREFIX) {
            let version: SchemaVersion = serde_json::from_slice(&cell.value)
                .map_err(|e| corrupt(key, format!("version cell does not parse: {e}")))?;
            stored.versions.push(version);
        }
    }
    stored.versions.sort_by_key(|v| v.version);
    let current = stored.current_cell.as_deref().map(|c| {
        <[u8; 8]>::try_from(c).map(u64::from_be_bytes).map_err(|_| corrupt(key, "`current` is not 8 bytes".into()))
    });
    match (current.transpose()?, stored.current()) {
        (Some(c), Some(v)) if c == v.version => Ok(stored),
        (None, None) => Ok(stored),
        (c, v) => Err(corrupt(key, format!("`current` is {c:?} but the newest version is {:?}", v.map(|v| v.version)))),
    }
}

/// Writes `version` as the type's newest, if the catalog still holds `expected` as `current`.
fn record(store: &dyn Store, key: &Bytes, expected: Option<Bytes>, version: &SchemaVersion) -> Result<bool> {
    let json = serde_json::to_vec(version).map_err(|e| Error::Store(format!("encoding a schema version: {e}")))?;
    let m = RowMutation {
        row: key.clone(),
        mutations: vec![
            CellMutation::put_now(FAMILY, CURRENT, Bytes::copy_from_slice(&version.version.to_be_bytes())),
            CellMutation::Put {
                family: Bytes::from_static(FAMILY.as_bytes()),
                qualifier: version_qualifier(version.version),
                value: json.into(),
                timestamp: None,
            },
        ],
    };
    store.check_and_mutate(CATALOG_TABLE, Condition::holds(FAMILY, CURRENT, expected), m)
}

fn ensure(store: &dyn Store) -> Result<()> {
    store.ensure_table(&TableSpec::internal(CATALOG_TABLE, FAMILY))
}

/// Compares the schema a release declares with the catalog's and records it if it is new and
/// compatible.
///
/// # Errors
/// [`Error::SchemaIncompatible`] listing every incompatible difference; a catalog row that does
/// not parse; store errors.
pub(crate) fn register(store: &dyn Store, declared: &TypeSchema) -> Result<Registration> {
    ensure(store)?;
    let key = row_key(&declared.table, &declared.name);
    for _ in 0..RECORD_ATTEMPTS {
        let stored = read(store, &key)?;
        let Some(current) = stored.current() else {
            let first = SchemaVersion {
                version: 1,
                first_written_ms: crate::writer::now_ms(),
                changes: Vec::new(),
                schema: declared.clone(),
            };
            if record(store, &key, None, &first)? {
                return Ok(Registration::Recorded { version: 1, changes: Vec::new() });
            }
            continue;
        };
        if current.schema == *declared {
            return Ok(Registration::Current(current.version));
        }
        if let Some(older) = stored.versions.iter().find(|v| v.schema == *declared) {
            let refused = compare::older_release(&current.schema, declared);
            if !refused.is_empty() {
                return Err(incompatible(declared, current.version, refused));
            }
            return Ok(Registration::Older { version: older.version, current: current.version });
        }
        let mut differences = compare::differences(&current.schema, declared);
        let history: Vec<&TypeSchema> = stored.versions.iter().map(|v| &v.schema).collect();
        differences.extend(compare::reused_qualifiers(&history, &current.schema, declared));
        let refused: Vec<String> = differences.iter().filter(|d| !d.compatible).map(|d| d.what.clone()).collect();
        if !refused.is_empty() {
            return Err(incompatible(declared, current.version, refused));
        }
        let next = SchemaVersion {
            version: current.version + 1,
            first_written_ms: crate::writer::now_ms(),
            changes: differences.into_iter().map(|d| d.what).collect(),
            schema: declared.clone(),
        };
        if record(store, &key, stored.current_cell.clone(), &next)? {
            return Ok(Registration::Recorded { version: next.version, changes: next.changes });
        }
    }
    Err(Error::Store(format!(
        "schema catalog: could not record {} on table `{}`: the catalog row kept changing",
        declared.name, declared.table
    )))
}

/// True if `declared` is an earlier version of its type's schema than the catalog's current:
/// an older release, which takes the table's families as a newer release altered them.
///
/// # Errors
/// A catalog row that does not parse; store errors.
pub(crate) fn is_older(store: &dyn Store, declared: &TypeSchema) -> Result<bool> {
    ensure(store)?;
    let stored = read(store, &row_key(&declared.table, &declared.name))?;
    let current = stored.current().map(|c| &c.schema);
    Ok(current != Some(declared) && stored.versions.iter().any(|v| v.schema == *declared))
}

fn incompatible(declared: &TypeSchema, version: u64, differences: Vec<String>) -> Error {
    Error::SchemaIncompatible { entity: declared.name.clone(), table: declared.table.clone(), version, differences }
}

/// Copies the catalog row of type `name` on `table` from one store to another, cell versions
/// with their timestamps, unless the destination already holds one: its own history stays, and
/// the destination's next `repo()` compares the type with it.
///
/// # Errors
/// A catalog row that does not parse; store errors.
pub(crate) async fn copy_history(from: &dyn AsyncStore, to: &dyn AsyncStore, table: &str, name: &str) -> Result<()> {
    if from.describe(CATALOG_TABLE).await?.is_none() {
        return Ok(());
    }
    let (key, read) = (row_key(table, name), ReadSpec::default());
    let found = from.read_rows(CATALOG_TABLE, std::slice::from_ref(&key), &read).await?;
    let Some(row) = found.into_iter().flatten().next() else { return Ok(()) };
    // A source row that does not parse is not copied over a destination's.
    if parse(&key, Some(&row))?.versions.is_empty() {
        return Ok(());
    }
    to.ensure_table(&TableSpec::internal(CATALOG_TABLE, FAMILY)).await?;
    let theirs = to.read_rows(CATALOG_TABLE, std::slice::from_ref(&key), &read).await?;
    if parse(&key, theirs.into_iter().flatten().next().as_ref())?.current().is_some() {
        return Ok(());
    }
    let mutations = row
        .cells
        .into_iter()
        .map(|c| CellMutation::Put {
            family: c.family,
            qualifier: c.qualifier,
            value: c.value,
            timestamp: Some(c.timestamp),
        })
        .collect();
    to.mutate_row(CATALOG_TABLE, RowMutation { row: key, mutations }).await
}

/// The versions the catalog holds for type `name` on `table`, oldest first (empty if none).
///
/// # Errors
/// A catalog row that does not parse; store errors.
pub(crate) fn history(store: &dyn Store, table: &str, name: &str) -> Result<Vec<SchemaVersion>> {
    ensure(store)?;
    Ok(read(store, &row_key(table, name))?.versions)
}

/// The current version of every type the catalog holds, in table and type order.
///
/// # Errors
/// A catalog row that does not parse; store errors.
pub(crate) fn entries(store: &dyn Store) -> Result<Vec<SchemaVersion>> {
    ensure(store)?;
    let mut out = Vec::new();
    for row in store.scan(CATALOG_TABLE, &Default::default())? {
        let row = row?;
        if let Some(current) = parse(&row.key, Some(&row))?.versions.pop() {
            out.push(current);
        }
    }
    Ok(out)
}

/// Records a version of `name`'s schema on `table` without index `index`.
///
/// # Errors
/// [`Error::InvalidArgument`] if the catalog holds no such type; store errors.
pub(crate) fn forget_index(store: &dyn Store, table: &str, name: &str, index: &str) -> Result<bool> {
    ensure(store)?;
    let key = row_key(table, name);
    for _ in 0..RECORD_ATTEMPTS {
        let stored = read(store, &key)?;
        let Some(current) = stored.current() else {
            return Err(Error::InvalidArgument {
                arg: "index",
                reason: format!("the schema catalog holds no type {name} on table `{table}`"),
            });
        };
        if !current.schema.indexes.iter().any(|i| i.name == index) {
            return Ok(false);
        }
        let mut schema = current.schema.clone();
        schema.indexes.retain(|i| i.name != index);
        let next = SchemaVersion {
            version: current.version + 1,
            first_written_ms: crate::writer::now_ms(),
            changes: vec![format!("dropped index `{index}`")],
            schema,
        };
        if record(store, &key, stored.current_cell.clone(), &next)? {
            return Ok(true);
        }
    }
    Err(Error::Store(format!(
        "schema catalog: could not drop index `{index}` of {name}: the catalog row kept changing"
    )))
}

impl crate::Db {
    /// The versions of entity `E`'s schema the catalog holds, oldest first: what each release
    /// changed and when it first opened the table.
    ///
    /// # Errors
    /// A catalog row that does not parse; store errors.
    pub fn schema_history<E: crate::Entity>(&self) -> Result<Vec<SchemaVersion>> {
        self.schema_history_of(E::SCHEMA.table, E::SCHEMA.entity)
    }

    /// The versions of type `name`'s schema on `table` the catalog holds, oldest first (empty
    /// if it holds none): also for aggregates (by their root's type name) and for tools without
    /// the application's types.
    ///
    /// # Errors
    /// As [`crate::Db::schema_history`].
    pub fn schema_history_of(&self, table: &str, name: &str) -> Result<Vec<SchemaVersion>> {
        history(self.store().as_ref(), table, name)
    }

    /// The current schema of every type the catalog holds, in table and type order.
    ///
    /// # Errors
    /// As [`crate::Db::schema_history`].
    pub fn catalog(&self) -> Result<Vec<SchemaVersion>> {
        entries(self.store().as_ref())
    }

    /// Drops index `name` of entity `E`: records a schema version without it, so releases that
    /// do not declare it may write again, then deletes its status and its entries. Returns the
    /// number of entries deleted.
    ///
    /// Stop the writers that still declare the index first: their writes would add entries
    /// again (run the drop again once they are gone; it is idempotent). A release that
    /// declares it anew gets it back as a new index, built by its backfill.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the catalog holds no schema of `E`; store errors.
    pub fn drop_index<E: crate::Entity>(&self, name: &str) -> Result<u64> {
        let schema = &E::SCHEMA;
        let store = self.store().as_ref();
        forget_index(store, schema.table, schema.entity, name)?;
        self.forget_registrations();
        crate::index::drop_status(store, schema, name)?;
        let table = crate::index::index_table(schema.table);
        if store.describe(&table)?.is_none() {
            return Ok(0);
        }
        let mut start = Vec::from_iter(schema.record_type);
        start.extend_from_slice(name.as_bytes());
        let mut end = start.clone();
        start.push(0);
        end.push(1);
        let scan = crate::store::ScanSpec { start: start.into(), end: Some(end.into()), ..Default::default() };
        let (mut deleted, mut batch) = (0u64, Vec::new());
        for row in store.scan(&table, &scan)? {
            batch.push(RowMutation { row: row?.key, mutations: vec![CellMutation::DeleteRow] });
            if batch.len() == 1000 {
                deleted += batch.len() as u64;
                store.mutate(&table, std::mem::take(&mut batch))?;
            }
        }
        deleted += batch.len() as u64;
        if !batch.is_empty() {
            store.mutate(&table, batch)?;
        }
        Ok(deleted)
    }
}
