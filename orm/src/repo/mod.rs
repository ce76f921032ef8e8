//! [`Repository`]: typed reads and writes of one entity type over a [`Store`].

mod key_uids;
mod nonblocking;
mod query;

use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;

pub(crate) use nonblocking::Pager;
pub use nonblocking::{AsyncQuery, AsyncRecords, AsyncRepository, EntityStream, STREAM_PAGE};
pub use query::{Cursor, EntityIter, Page, Query, Skipped};
pub(crate) use query::{Merge, OnError, Plan};

use crate::entity::{ColumnKind, ColumnSpec, Entity, FieldError};
use crate::index::{write_many, Change, IndexedWrite, Statuses, Version};
use crate::key::{KeyError, RowKey};
use crate::store::drive::drive;
use crate::store::{
    AsyncStore, CellMutation, ColumnSlice, Columns, Commit, Condition, Inline, LentRow, ReadSpec, Row, RowMutation,
    Store,
};
use crate::value::ColumnValue;
use crate::{Error, Result};
use key_uids::KeyUids;

/// A blob column read at an older version or codec, and the bytes read.
type StaleBlob = (&'static ColumnSpec, Bytes, u64);

/// An entity read by key: the position of its row among those read, the entity, and its stale
/// blob columns.
type Decoded<E> = (usize, E, Vec<StaleBlob>);

/// A counter column of entity `E`, generated as an associated constant (`Customer::ORDERS`).
#[derive(Debug)]
pub struct Counter<E> {
    field: &'static str,
    _entity: PhantomData<fn() -> E>,
}

impl<E> Clone for Counter<E> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<E> Copy for Counter<E> {}

impl<E: Entity> Counter<E> {
    /// The counter stored for `field` (generated code only).
    pub const fn new(field: &'static str) -> Self {
        Counter { field, _entity: PhantomData }
    }

    fn column(&self) -> Result<&'static ColumnSpec> {
        E::SCHEMA.column(self.field).filter(|c| c.kind == ColumnKind::Counter).ok_or(Error::InvalidArgument {
            arg: "counter",
            reason: format!("{} has no counter field `{}`", E::SCHEMA.entity, self.field),
        })
    }
}

/// Reads and writes entities of type `E`. Cheap to clone.
pub struct Repository<E> {
    store: Arc<dyn Store>,
    /// Reads rewrite blob columns of older versions at the current one.
    write_back: bool,
    /// Which of the entity's indexes can answer.
    indexes: Arc<Statuses>,
    /// The uids of key parts stored as uids.
    uids: Arc<KeyUids>,
    _entity: PhantomData<fn() -> E>,
}

impl<E> Clone for Repository<E> {
    fn clone(&self) -> Self {
        Repository {
            store: self.store.clone(),
            write_back: self.write_back,
            indexes: self.indexes.clone(),
            uids: self.uids.clone(),
            _entity: PhantomData,
        }
    }
}

impl<E> std::fmt::Debug for Repository<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repository").field("entity", &std::any::type_name::<E>()).finish_non_exhaustive()
    }
}

/// Reads the records of a single-table design: rows of every member entity of the enum `R`,
/// typed. Write and read single entities through each member's [`Repository`]. Cheap to clone.
pub struct Records<R> {
    store: Arc<dyn Store>,
    /// The first member: table and salt of every member.
    first: &'static crate::Schema,
    _record: PhantomData<fn() -> R>,
}

impl<R> Clone for Records<R> {
    fn clone(&self) -> Self {
        Records { store: self.store.clone(), first: self.first, _record: PhantomData }
    }
}

impl<R> std::fmt::Debug for Records<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Records").field("record", &std::any::type_name::<R>()).finish_non_exhaustive()
    }
}

impl<R> Records<R> {
    pub(crate) fn new(store: Arc<dyn Store>, first: &'static crate::Schema) -> Self {
        Records { store, first, _record: PhantomData }
    }
}

/// A row key for messages: printable ASCII as is, other bytes as `\xNN`.
pub(crate) fn printable(row: &[u8]) -> String {
    cellar_engine::to_printable(row)
}

impl<E: Entity> Repository<E> {
    /// A repository of `E` on `store`: records the status of new indexes (see
    /// [`crate::index`]).
    pub(crate) fn open(store: Arc<dyn Store>) -> Result<Self> {
        let uids = Arc::new(KeyUids::open(&store, &E::SCHEMA)?);
        let mut repo = Repository { store, write_back: false, indexes: Arc::default(), uids, _entity: PhantomData };
        if !E::SCHEMA.indexes.is_empty() {
            if matches!(E::SCHEMA.salt, crate::key::Salt::Random { .. }) {
                return Err(Error::SchemaMismatch {
                    table: E::SCHEMA.table.to_string(),
                    reason: format!(
                        "{} has indexes: its rows need keys that do not change (no random salt)",
                        E::SCHEMA.entity
                    ),
                });
            }
            let has_rows = || {
                let mut rows = repo.scan().skip_unreadable().limit(1).iter()?;
                Ok(rows.next().transpose()?.is_some() || !rows.skipped().is_empty())
            };
            let statuses = Statuses::open(&*repo.store, &E::SCHEMA, has_rows)?;
            repo.indexes = Arc::new(statuses);
        }
        Ok(repo)
    }

    pub(crate) fn store(&self) -> &dyn Store {
        &*self.store
    }

    pub(crate) fn index_statuses(&self) -> &Statuses {
        &self.indexes
    }

    fn indexed(&self) -> bool {
        !E::SCHEMA.indexes.is_empty()
    }

    /// The store, called on the spot: what the synchronous API runs its protocols over.
    fn inline(&self) -> Inline<'_> {
        Inline(&*self.store)
    }

    /// Writes one data row through the index protocol.
    async fn write_indexed(&self, store: &dyn AsyncStore, row: Bytes, change: Change, version: Version) -> Result<()> {
        IndexedWrite { store, schema: &E::SCHEMA, row, change, version }.run().await.map(|_| ())
    }

    /// The span of a call `op` of this repository.
    pub(crate) fn call(&self, op: &'static str) -> crate::trace::RepoCall {
        crate::trace::repo_call(op, E::SCHEMA.entity, self.table())
    }

    fn table(&self) -> &'static str {
        E::SCHEMA.table
    }

    /// Resolves the names of `key` stored as uids through `store` (see [`KeyUids::warm`]):
    /// what an asynchronous caller does first, so that the protocol's encoding of the key
    /// makes no synchronous call. False if a name has no id (reads only): no row holds the key.
    pub(crate) async fn warm_key(&self, store: &dyn AsyncStore, key: &E::Key, assign: bool) -> Result<bool> {
        self.uids.warm(store, assign, |uids| E::row_key_in(key, uids).map(|_| ())).await
    }

    /// [`Repository::warm_key`] for the key of `entity`, which is written (new names get ids);
    /// the key is not even built when no part of it is stored as a uid.
    pub(crate) async fn warm_entity(&self, store: &dyn AsyncStore, entity: &E) -> Result<()> {
        if !self.uids.is_empty() {
            self.warm_key(store, &entity.key(), true).await?;
        }
        Ok(())
    }

    /// Encodes `key` for a write: names stored as uids that have none get one.
    fn write_key(&self, key: &E::Key) -> Result<RowKey> {
        let uids = self.uids.writing();
        E::row_key_in(key, &uids).map_err(|e| uids.error(E::SCHEMA.entity, e))
    }

    /// Encodes `key` for a read: `None` if a name stored as a uid has none yet, so no row
    /// holds it.
    fn read_key(&self, key: &E::Key) -> Result<Option<RowKey>> {
        let uids = self.uids.reading();
        match E::row_key_in(key, &uids) {
            Ok(key) => Ok(Some(key)),
            Err(KeyError::Unassigned { .. }) => Ok(None),
            Err(e) => Err(uids.error(E::SCHEMA.entity, e)),
        }
    }

    /// The row of an entity and the mutation that writes it: every cell, and a column delete
    /// for every `None` field so an earlier value does not linger.
    fn mutation(&self, entity: &E, version: Option<u64>) -> Result<RowMutation> {
        let key = self.write_key(&entity.key())?;
        // Room for the version cell or the marker cell too.
        let mut mutations = Vec::with_capacity(E::SCHEMA.columns.len() + 1);
        entity.push_cell_mutations(&mut mutations)?;
        // An eager wide field is replaced whole: its family cleared, then every entry written
        // (a later mutation of a row masks an earlier one, never the reverse); a lazy one only
        // gains the entries its map holds.
        for wide in entity.wide_cells()? {
            let family = Bytes::from_static(wide.spec.family.as_bytes());
            if !wide.spec.lazy {
                mutations.push(CellMutation::DeleteFamily { family: family.clone() });
            }
            mutations.extend(wide.entries.into_iter().map(|(qualifier, value)| CellMutation::Put {
                family: family.clone(),
                qualifier,
                value,
                timestamp: None,
            }));
        }
        if let (Some(v), Some(col)) = (version, E::SCHEMA.version_column()) {
            mutations.push(CellMutation::Put {
                family: Bytes::from_static(col.family.as_bytes()),
                qualifier: Bytes::from_static(col.qualifier.as_bytes()),
                value: v.to_bytes().into(),
                timestamp: None,
            });
        }
        // A row exists only through its cells: an entity with nothing else to store that an
        // entity read returns (only key parts, every field `None`, only lazy maps) gets an
        // empty marker cell under the empty qualifier, which no field can map to.
        let lazy = |family: &Bytes| E::SCHEMA.wide.iter().any(|w| w.lazy && w.family.as_bytes() == family);
        if !mutations.iter().any(|m| matches!(m, CellMutation::Put { family, .. } | CellMutation::PutAtApply { family, .. } if !lazy(family))) {
            let family = E::SCHEMA.families.first().map_or("d", |f| f.name);
            mutations.push(CellMutation::Put {
                family: Bytes::from_static(family.as_bytes()),
                qualifier: Bytes::new(),
                value: Bytes::new(),
                timestamp: None,
            });
        }
        Ok(RowMutation { row: key.into_write(), mutations })
    }

    /// The stored row of `key` (probing every bucket under a random salt).
    async fn read_one(&self, store: &dyn AsyncStore, key: E::Key, read: &ReadSpec) -> Result<Option<Row>> {
        let Some(key) = self.read_key(&key)? else { return Ok(None) };
        let rows = store.read_rows(self.table(), &key.into_candidates(), read).await?;
        Ok(rows.into_iter().flatten().find(|r| !crate::index::is_tombstone(&E::SCHEMA, r.lend())))
    }

    pub(crate) fn decode(&self, row: LentRow<'_>, as_of: u64) -> Result<E> {
        let uids = self.uids.reading();
        E::from_row_in(row, as_of, &uids)
            .map_err(|e| uids.take_failure().unwrap_or_else(|| decode_error(E::SCHEMA.table, row.key(), e)))
    }

    /// An entity read by key, and the blob columns to write back (see
    /// [`Repository::with_write_back`]).
    fn decode_read(&self, row: LentRow<'_>) -> Result<(E, Vec<StaleBlob>)> {
        Ok((self.decode(row, u64::MAX)?, self.stale_blobs(row)))
    }

    /// Writes an entity, replacing every field of a stored one (counters excepted: they change
    /// only through [`Repository::increment`], so a put cannot undo a concurrent increment).
    /// An entity with no field to store (only key parts, every field `None`, or only lazy maps)
    /// is written as an empty marker cell with the empty qualifier, so that it exists.
    ///
    /// The `#[cellar(version)]` field, if the entity has one, is not written as given: a put
    /// stores the stored version + 1 (1 for a new entity), as a [`Repository::save`] does, so
    /// a version never goes back and a save of a read made before the put fails with
    /// [`Error::VersionConflict`]. `entity` is not changed: read it again for its new version.
    /// That takes a read of the stored version: within the same call on the embedded engine;
    /// with indexes, in the read the index protocol makes anyway; one round trip more only
    /// for an entity without indexes on a store without atomic commits. A put of an entity
    /// without a version field is one write, as before.
    ///
    /// # Errors
    /// Key or value encoding errors; [`Error::Decode`] for a stored version that is not one;
    /// [`Error::Contended`] if other writers keep moving the version; store errors.
    pub fn put(&self, entity: &E) -> Result<()> {
        self.call("put").run(|| drive(self.put_via(&self.inline(), entity)))
    }

    pub(crate) async fn put_via<S: AsyncStore + ?Sized>(&self, store: &S, entity: &E) -> Result<()> {
        let m = self.mutation(entity, None)?;
        if let Some(col) = E::SCHEMA.version_column() {
            return Box::pin(self.put_versioned(store.as_dyn(), vec![m], col)).await;
        }
        if self.indexed() {
            return Box::pin(self.write_indexed(store.as_dyn(), m.row, Change::Put(m.mutations), Version::Untouched))
                .await;
        }
        store.mutate_row(self.table(), m).await
    }

    /// Writes many entities in one batch (each row atomic on its own). With indexes, each step
    /// of the index protocol goes to the store once for all of them; an entity a unique index
    /// refuses is left out, the others are written.
    ///
    /// Each entity's version moves on as with [`Repository::put`]: without indexes, one read
    /// of the stored versions and one batch of conditional writes; with indexes, the entities
    /// are written one at a time.
    ///
    /// # Errors
    /// As [`Repository::put`]; nothing is written if an entity does not encode; the first
    /// entity's error (a [`Error::UniqueViolation`]) once the others are written.
    pub fn put_many<'a>(&self, entities: impl IntoIterator<Item = &'a E>) -> Result<()> {
        let entities: Vec<&E> = entities.into_iter().collect();
        self.call("put_many").keys(entities.len()).run(|| {
            let rows = self.mutations(entities)?;
            drive(self.put_rows(&self.inline(), rows))
        })
    }

    /// The mutations that write `entities`; nothing if one does not encode.
    pub(crate) fn mutations<'a>(&self, entities: impl IntoIterator<Item = &'a E>) -> Result<Vec<RowMutation>> {
        entities.into_iter().map(|e| self.mutation(e, None)).collect()
    }

    /// Writes the entity rows `rows` (from [`Repository::mutations`]) as
    /// [`Repository::put_many`] does.
    pub(crate) async fn put_rows(&self, store: &dyn AsyncStore, rows: Vec<RowMutation>) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        if let Some(col) = E::SCHEMA.version_column() {
            return Box::pin(self.put_versioned(store, rows, col)).await;
        }
        if self.indexed() {
            // Each step of the index protocol for all rows at once.
            let writes = rows.into_iter().map(|m| (m.row, Change::Put(m.mutations))).collect();
            let written = Box::pin(write_many(store, &E::SCHEMA, writes)).await?;
            return written.into_iter().try_for_each(|r| r.map(|_| ()));
        }
        store.mutate(self.table(), rows).await
    }

    /// Writes entity rows `rows` (each entity's cells, its version field as given among them)
    /// each with a put of its stored version + 1 after them, on condition that the stored
    /// version is still the one read: a put moves the version on as a save does, and never
    /// takes it back.
    async fn put_versioned(
        &self,
        store: &dyn AsyncStore,
        rows: Vec<RowMutation>,
        col: &'static ColumnSpec,
    ) -> Result<()> {
        if self.indexed() {
            // The batched index protocol checks no versions: one write at a time, each failure
            // of an entity kept for after the others, as a batch would.
            let mut first = None;
            for m in rows {
                match self.put_indexed_versioned(store, m, col).await {
                    Err(e @ (Error::UniqueViolation { .. } | Error::Contended { .. })) => {
                        first.get_or_insert(e);
                    }
                    other => other?,
                }
            }
            return first.map_or(Ok(()), Err);
        }
        if let ([m], true) = (&rows[..], store.guarantees().atomic_commits) {
            return self.put_versioned_held(store, m, col).await;
        }
        let mut pending = rows;
        let read = version_read(col);
        for _ in 0..PUT_ATTEMPTS {
            let keys: Vec<Bytes> = pending.iter().map(|m| m.row.clone()).collect();
            let found = store.read_rows(self.table(), &keys, &read).await?;
            let writes = pending
                .iter()
                .zip(&found)
                .map(|(m, row)| {
                    let (stored, raw) = stored_version::<E>(row.as_ref(), col, &m.row)?;
                    let write = RowMutation { row: m.row.clone(), mutations: next_version(&m.mutations, col, stored)? };
                    Ok((version_is(col, raw), write))
                })
                .collect::<Result<Vec<_>>>()?;
            let applied = store.check_and_mutate_many(self.table(), writes).await?;
            // Another write moved a version since the read: those rows go again.
            pending = pending.into_iter().zip(applied).filter(|(_, applied)| !applied).map(|(m, _)| m).collect();
            if pending.is_empty() {
                return Ok(());
            }
        }
        Err(Error::Contended { entity: E::SCHEMA.entity, row: printable(&pending[0].row), attempts: PUT_ATTEMPTS })
    }

    /// [`Repository::put_versioned`] of one row on a store with atomic commits: the version
    /// read and the write in one call, the row held in between.
    async fn put_versioned_held(
        &self,
        store: &dyn AsyncStore,
        m: &RowMutation,
        col: &'static ColumnSpec,
    ) -> Result<()> {
        let read = version_read(col);
        for _ in 0..PUT_ATTEMPTS {
            let mut failed = None;
            let mut build = |row: Option<&Row>| {
                let mutations = stored_version::<E>(row, col, &m.row)
                    .and_then(|(stored, _)| next_version(&m.mutations, col, stored))
                    .map_err(|e| failed = Some(e))
                    .ok()?;
                let mut commit = Commit::default();
                commit.row(E::SCHEMA.table, RowMutation { row: m.row.clone(), mutations });
                Some(commit)
            };
            let applied = store.read_and_commit(self.table(), &m.row, &read, &mut build).await?;
            if let Some(e) = failed {
                return Err(e);
            }
            if applied == Some(true) {
                return Ok(());
            }
        }
        Err(Error::Contended { entity: E::SCHEMA.entity, row: printable(&m.row), attempts: PUT_ATTEMPTS })
    }

    /// [`Repository::put_versioned`] of one row of an entity with indexes: the index write
    /// reads the stored version with the rest of the row and writes the next one
    /// ([`Version::Next`]), so it costs what a put without a version does.
    async fn put_indexed_versioned(
        &self,
        store: &dyn AsyncStore,
        m: RowMutation,
        col: &'static ColumnSpec,
    ) -> Result<()> {
        self.write_indexed(store, m.row, Change::Put(m.mutations), Version::Next(col)).await
    }

    /// Writes `entity` only if the stored version is the one it was read at (absent for
    /// version 0), and moves it to the next version. Every write of the entity moves the
    /// version on — a put too (see [`Repository::put`]) — so a save fails if anything wrote the
    /// entity since it was read.
    ///
    /// # Errors
    /// [`Error::VersionConflict`] if another writer got there first; [`Error::InvalidArgument`]
    /// for an entity without a version field; as [`Repository::put`].
    pub fn save(&self, entity: &mut E) -> Result<()> {
        self.call("save").run(|| drive(self.save_via(&self.inline(), entity)))
    }

    pub(crate) async fn save_via(&self, store: &dyn AsyncStore, entity: &mut E) -> Result<()> {
        let (Some(expected), Some(col)) = (entity.version(), E::SCHEMA.version_column()) else {
            return Err(Error::InvalidArgument {
                arg: "entity",
                reason: format!("{} has no #[cellar(version)] field", E::SCHEMA.entity),
            });
        };
        let next = expected
            .checked_add(1)
            .ok_or(Error::InvalidArgument { arg: "entity", reason: "version counter is exhausted".into() })?;
        let mutation = self.mutation(entity, Some(next))?;
        if self.indexed() {
            self.write_indexed(store, mutation.row, Change::Put(mutation.mutations), Version::Expect(expected, col))
                .await?;
            entity.set_version(next);
            return Ok(());
        }
        let family = Bytes::from_static(col.family.as_bytes());
        let qualifier = Bytes::from_static(col.qualifier.as_bytes());
        let condition = if expected == 0 {
            Condition::Absent { family, qualifier }
        } else {
            Condition::Equals { family, qualifier, value: expected.to_bytes().into() }
        };
        let row = mutation.row.clone();
        if !store.check_and_mutate(self.table(), condition, mutation).await? {
            return Err(Error::VersionConflict { entity: E::SCHEMA.entity, row: printable(&row), expected });
        }
        entity.set_version(next);
        Ok(())
    }

    /// Reads one entity.
    ///
    /// # Errors
    /// [`Error::Decode`] for a stored row that is not a valid `E`; store errors.
    pub fn get(&self, key: impl Into<E::Key>) -> Result<Option<E>> {
        let key = key.into();
        self.call("get").run(|| self.get_now(&key))
    }

    /// [`Repository::get`]: the read and its decoding as `get_via`, called on the spot (the
    /// hottest call of the synchronous API pays for no state machine). The write-back is the
    /// shared protocol.
    fn get_now(&self, key: &E::Key) -> Result<Option<E>> {
        let Some(key) = self.read_key(key)? else { return Ok(None) };
        let rows = key.into_candidates();
        let mut found = None;
        let spec = E::SCHEMA.read_spec();
        self.store.read_rows_with(self.table(), &rows, &spec, &mut |i, row| self.decode_first(&mut found, i, row))?;
        let Some((entity, stale)) = self.found(&rows, found)? else { return Ok(None) };
        if let Some((row, stale)) = stale {
            drive(self.write_back_blobs(&self.inline(), row, &entity, stale))?;
        }
        Ok(Some(entity))
    }

    pub(crate) async fn get_via(&self, store: &dyn AsyncStore, key: E::Key) -> Result<Option<E>> {
        let Some(key) = self.read_key(&key)? else { return Ok(None) };
        // Under a random salt, one candidate row per bucket.
        let rows = key.into_candidates();
        let mut found = None;
        let spec = E::SCHEMA.read_spec();
        store.read_rows_with(self.table(), &rows, &spec, &mut |i, row| self.decode_first(&mut found, i, row)).await?;
        let Some((entity, stale)) = self.found(&rows, found)? else { return Ok(None) };
        if let Some((row, stale)) = stale {
            Box::pin(self.write_back_blobs(store, row, &entity, stale)).await?;
        }
        Ok(Some(entity))
    }

    /// Decodes `row`, the `i`-th row read, into `slot` unless an earlier row of the entity
    /// filled it.
    fn decode_first(&self, slot: &mut Option<Result<Decoded<E>>>, i: usize, row: Option<LentRow<'_>>) {
        let row = row.filter(|r| !crate::index::is_tombstone(&E::SCHEMA, *r));
        if let (None, Some(row)) = (&slot, row) {
            *slot = Some(self.decode_read(row).map(|(entity, stale)| (i, entity, stale)));
        }
    }

    /// The entity an entity read found in `rows` (or why it does not decode), and the row
    /// and stale blob columns to write back as [`Repository::with_write_back`] asks, if any.
    #[allow(clippy::type_complexity)]
    fn found<'r>(
        &self,
        rows: &'r [Bytes],
        found: Option<Result<Decoded<E>>>,
    ) -> Result<Option<(E, Option<(&'r Bytes, Vec<StaleBlob>)>)>> {
        let Some(found) = found else { return Ok(None) };
        let (i, entity, stale) = found?;
        let row = rows.get(i).ok_or_else(|| Error::Store(format!("the store lent row {i} of {}", rows.len())))?;
        Ok(Some((entity, (!stale.is_empty()).then_some((row, stale)))))
    }

    /// Makes [`Repository::get`] and [`Repository::get_many`] rewrite `#[cellar(blob)]`
    /// columns they find at an older version (or in another codec) at the current one: each
    /// with a check-and-mutate on the bytes read, so a value written meanwhile is kept.
    pub fn with_write_back(mut self) -> Self {
        self.write_back = true;
        self
    }

    /// With write-back on, the blob columns of `row` stored at an older version or codec, with
    /// the bytes read (the check of their rewrite) and their timestamp; none otherwise.
    fn stale_blobs(&self, row: LentRow<'_>) -> Vec<StaleBlob> {
        if !self.write_back {
            return Vec::new();
        }
        let newest = |c: &ColumnSpec| {
            let (family, qualifier) = (c.family.as_bytes(), c.qualifier.as_bytes());
            row.cells().find(|cell| cell.family == family && cell.qualifier == qualifier)
        };
        E::SCHEMA
            .columns
            .iter()
            .filter_map(|c| Some((c, c.current_blob?, newest(c)?)))
            .filter(|(_, format, cell)| !crate::blob::is_current(cell.value, format))
            .map(|(c, _, cell)| (c, Bytes::copy_from_slice(cell.value), cell.timestamp))
            .collect()
    }

    /// Rewrites the `stale` blob columns of `row`, which decoded as `entity`.
    async fn write_back_blobs(
        &self,
        store: &dyn AsyncStore,
        row: &Bytes,
        entity: &E,
        stale: Vec<StaleBlob>,
    ) -> Result<()> {
        if stale.is_empty() {
            return Ok(());
        }
        let cells = entity.cells()?;
        for (spec, old, timestamp) in stale {
            let fresh = cells.iter().find(|c| c.family == spec.family && c.qualifier == spec.qualifier);
            let Some(value) = fresh.and_then(|c| c.value.clone()) else { continue };
            let (family, qualifier) =
                (Bytes::from_static(spec.family.as_bytes()), Bytes::from_static(spec.qualifier.as_bytes()));
            let condition = Condition::Equals { family: family.clone(), qualifier: qualifier.clone(), value: old };
            // At the timestamp of the cell it replaces: only the encoding changes, and a write
            // of the application that lands after this one must stay the newest version even
            // if its request was stamped first.
            let put = CellMutation::Put { family, qualifier, value: value.into(), timestamp: Some(timestamp) };
            // False: the cell changed since the read; the newer value stays.
            let rewrite = RowMutation { row: row.clone(), mutations: vec![put] };
            store.check_and_mutate(self.table(), condition, rewrite).await?;
        }
        Ok(())
    }

    /// Reads many entities in one round trip; `None` where there is none.
    ///
    /// # Errors
    /// As [`Repository::get`].
    pub fn get_many<K: Into<E::Key>>(&self, keys: impl IntoIterator<Item = K>) -> Result<Vec<Option<E>>> {
        let keys: Vec<E::Key> = keys.into_iter().map(Into::into).collect();
        self.call("get_many").keys(keys.len()).run(|| {
            let (flat, owners) = self.candidates_of(keys)?;
            self.get_many_now(flat, owners)
        })
    }

    /// [`Repository::get_many`] of the keys' candidate rows: as `get`, the read on the spot,
    /// the write-back the shared protocol.
    fn get_many_now(&self, flat: Vec<Bytes>, owners: Owners) -> Result<Vec<Option<E>>> {
        let mut found = Self::slots(&owners);
        let spec = E::SCHEMA.read_spec();
        self.store
            .read_rows_with(self.table(), &flat, &spec, &mut |i, row| self.decode_owned(&owners, &mut found, i, row))?;
        let mut entities = Vec::with_capacity(found.len());
        for f in found {
            let entity = match self.found(&flat, f)? {
                Some((entity, Some((row, stale)))) => {
                    drive(self.write_back_blobs(&self.inline(), row, &entity, stale))?;
                    Some(entity)
                }
                found => found.map(|(entity, _)| entity),
            };
            entities.push(entity);
        }
        Ok(entities)
    }

    pub(crate) async fn get_many_via(&self, store: &dyn AsyncStore, keys: Vec<E::Key>) -> Result<Vec<Option<E>>> {
        let (flat, owners) = self.candidates_of(keys)?;
        let mut found = Self::slots(&owners);
        let spec = E::SCHEMA.read_spec();
        let mut visit = |i: usize, row: Option<LentRow<'_>>| self.decode_owned(&owners, &mut found, i, row);
        store.read_rows_with(self.table(), &flat, &spec, &mut visit).await?;
        let mut entities = Vec::with_capacity(found.len());
        for f in found {
            let entity = match self.found(&flat, f)? {
                Some((entity, Some((row, stale)))) => {
                    Box::pin(self.write_back_blobs(store, row, &entity, stale)).await?;
                    Some(entity)
                }
                found => found.map(|(entity, _)| entity),
            };
            entities.push(entity);
        }
        Ok(entities)
    }

    /// Every key's candidate rows, in one list, and the key each belongs to (by position; one
    /// past the last key's position is the number of keys). A key whose name stored as a uid
    /// has no uid yet has none.
    fn candidates_of<K: Into<E::Key>>(&self, keys: impl IntoIterator<Item = K>) -> Result<(Vec<Bytes>, Owners)> {
        let mut owners = Owners { of: Vec::new(), keys: 0 };
        let mut flat: Vec<Bytes> = Vec::new();
        for key in keys {
            let candidates = self.read_key(&key.into())?.map(RowKey::into_candidates).unwrap_or_default();
            owners.of.extend(std::iter::repeat_n(owners.keys, candidates.len()));
            flat.extend(candidates);
            owners.keys += 1;
        }
        Ok((flat, owners))
    }

    /// Per key, the slot of its first row found, decoded.
    fn slots(owners: &Owners) -> Vec<Option<Result<Decoded<E>>>> {
        std::iter::repeat_with(|| None).take(owners.keys).collect()
    }

    /// Decodes `row`, the `i`-th row read, into the slot of the key it belongs to.
    fn decode_owned(
        &self,
        owners: &Owners,
        found: &mut [Option<Result<Decoded<E>>>],
        i: usize,
        row: Option<LentRow<'_>>,
    ) {
        if let Some(slot) = owners.of.get(i).and_then(|&e| found.get_mut(e)) {
            self.decode_first(slot, i, row);
        }
    }

    /// True if an entity with this key is stored.
    ///
    /// # Errors
    /// Key encoding and store errors.
    pub fn exists(&self, key: impl Into<E::Key>) -> Result<bool> {
        self.call("exists").run(|| drive(self.exists_via(&self.inline(), key.into())))
    }

    pub(crate) async fn exists_via(&self, store: &dyn AsyncStore, key: E::Key) -> Result<bool> {
        Ok(self.read_one(store, key, &E::SCHEMA.read_spec()).await?.is_some())
    }

    /// Deletes an entity (its whole row, counters included).
    ///
    /// # Errors
    /// Key encoding and store errors.
    pub fn delete(&self, key: impl Into<E::Key>) -> Result<()> {
        self.call("delete").run(|| drive(self.delete_via(&self.inline(), key.into())))
    }

    pub(crate) async fn delete_via(&self, store: &dyn AsyncStore, key: E::Key) -> Result<()> {
        let Some(key) = self.read_key(&key)? else { return Ok(()) };
        if self.indexed() {
            return Box::pin(self.write_indexed(store, key.for_write(), Change::Delete, Version::Untouched)).await;
        }
        let rows = key
            .candidates()
            .into_iter()
            .map(|row| RowMutation { row, mutations: vec![CellMutation::DeleteRow] })
            .collect();
        store.mutate(self.table(), rows).await
    }

    /// Adds `delta` to a counter of the entity at `key` and returns the new value. The row
    /// need not exist (its counter starts at 0); increments are atomic.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] under a random salt (the row is not known); store errors.
    pub fn increment(&self, key: impl Into<E::Key>, counter: Counter<E>, delta: i64) -> Result<i64> {
        self.call("increment").run(|| drive(self.increment_via(&self.inline(), key.into(), counter, delta)))
    }

    pub(crate) async fn increment_via(
        &self,
        store: &dyn AsyncStore,
        key: E::Key,
        counter: Counter<E>,
        delta: i64,
    ) -> Result<i64> {
        let col = counter.column()?;
        let key = self.write_key(&key)?;
        let [row] = key.candidates().try_into().map_err(|_| Error::InvalidArgument {
            arg: "key",
            reason: "counters of randomly salted entities cannot be addressed".into(),
        })?;
        store.increment(self.table(), row, col.family, col.qualifier, delta).await
    }

    /// The entries of the wide field `field` of the entity at `key`, read and written one by
    /// one (see [`crate::wide`]). The row need not exist: writing an entry creates it.
    ///
    /// # Errors
    /// Key encoding errors; [`Error::InvalidArgument`] under a random salt (the row is not
    /// known).
    pub fn wide<K: crate::key::KeyPart, V: ColumnValue>(
        &self,
        key: impl Into<E::Key>,
        field: crate::wide::Wide<E, K, V>,
    ) -> Result<crate::wide::WideColumns<K, V>> {
        let key = self.write_key(&key.into())?;
        let [row] = key.candidates().try_into().map_err(|_| Error::InvalidArgument {
            arg: "key",
            reason: "wide fields of randomly salted entities cannot be addressed".into(),
        })?;
        Ok(crate::wide::WideColumns::new(self.store.clone(), self.table(), row, *field.spec()))
    }

    /// The entity as it was at `timestamp` (milliseconds): each column's newest version at or
    /// before it, within the versions the family keeps.
    ///
    /// # Errors
    /// As [`Repository::get`].
    pub fn get_as_of(&self, key: impl Into<E::Key>, timestamp: u64) -> Result<Option<E>> {
        self.call("get_as_of").run(|| drive(self.get_as_of_via(&self.inline(), key.into(), timestamp)))
    }

    pub(crate) async fn get_as_of_via(&self, store: &dyn AsyncStore, key: E::Key, timestamp: u64) -> Result<Option<E>> {
        let read =
            ReadSpec { max_versions: 1, time_range: Some((0, timestamp.saturating_add(1))), ..E::SCHEMA.read_spec() };
        self.read_one(store, key, &read).await?.map(|row| self.decode(row.lend(), u64::MAX)).transpose()
    }

    /// Up to `max` past states of an entity, newest first, each with the timestamp it took
    /// effect: one per distinct write time among the versions the families keep.
    ///
    /// # Errors
    /// As [`Repository::get`].
    pub fn history(&self, key: impl Into<E::Key>, max: u32) -> Result<Vec<(u64, E)>> {
        self.call("history").run(|| drive(self.history_via(&self.inline(), key.into(), max)))
    }

    pub(crate) async fn history_via(&self, store: &dyn AsyncStore, key: E::Key, max: u32) -> Result<Vec<(u64, E)>> {
        let read = ReadSpec { max_versions: max.max(1), time_range: None, ..E::SCHEMA.read_spec() };
        let Some(row) = self.read_one(store, key, &read).await? else {
            return Ok(Vec::new());
        };
        let mut times: Vec<u64> = row.cells.iter().map(|c| c.timestamp).collect();
        times.sort_unstable_by(|a, b| b.cmp(a));
        times.dedup();
        let mut states = Vec::new();
        for ts in times.into_iter().take(max as usize) {
            match E::from_row_in(row.lend(), ts, &self.uids.reading()) {
                Ok(e) => states.push((ts, e)),
                // Before its first complete write the entity did not exist yet.
                Err(e) if e.column.is_some() && !states.is_empty() => break,
                Err(e) => return Err(decode_error(E::SCHEMA.table, &row.key, e)),
            }
        }
        Ok(states)
    }
}

pub(crate) fn decode_error(table: &'static str, row: &[u8], e: FieldError) -> Error {
    Error::Decode { table, row: printable(row), column: e.column, reason: e.reason }
}

/// Which key of a `get_many` each row read belongs to.
struct Owners {
    /// Per row read, its key's position.
    of: Vec<usize>,
    /// How many keys.
    keys: usize,
}

/// Attempts of a put before it gives up on a version other writers keep moving.
const PUT_ATTEMPTS: u32 = 64;

/// A read of the version column `col` alone.
fn version_read(col: &'static ColumnSpec) -> ReadSpec {
    let mut to = col.qualifier.as_bytes().to_vec();
    to.push(0);
    let slice = ColumnSlice {
        family: Bytes::from_static(col.family.as_bytes()),
        from: Some(Bytes::from_static(col.qualifier.as_bytes())),
        to: Some(to.into()),
        offset: 0,
        limit: Some(1),
        keys_only: false,
    };
    ReadSpec { columns: Columns::Slice(slice), ..ReadSpec::default() }
}

/// The version `row` (of entity `E`, row key `key`) stores — 0 without one — and the cell's
/// bytes, for a condition that it is still there.
fn stored_version<E: Entity>(row: Option<&Row>, col: &'static ColumnSpec, key: &[u8]) -> Result<(u64, Option<Bytes>)> {
    let (version, raw) = E::SCHEMA.stored_version(key, row, col)?;
    Ok((version, raw.map(Bytes::copy_from_slice)))
}

/// `mutations` and a put of the version after `stored` (the last put of the column wins).
fn next_version(mutations: &[CellMutation], col: &'static ColumnSpec, stored: u64) -> Result<Vec<CellMutation>> {
    let mut out = Vec::with_capacity(mutations.len() + 1);
    out.extend_from_slice(mutations);
    out.push(crate::entity::next_version_put(col, stored)?);
    Ok(out)
}

/// A condition that the version cell still holds `raw` (absent: still absent).
fn version_is(col: &'static ColumnSpec, raw: Option<Bytes>) -> Condition {
    Condition::holds(col.family.as_bytes(), col.qualifier.as_bytes(), raw)
}
