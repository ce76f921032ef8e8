//! Reads through an index: gets by unique value, prefix and range scans (forward or reverse,
//! with a limit and page cursors), as entities, keys or covered entries.
//!
//! A verified index row is trusted; an unverified one (a write in flight, or left by a crash)
//! is checked against its data row: it counts only if the data row's values imply it. When the
//! writer that left it is gone, the reader settles it for good — verifies it, or deletes it —
//! with a check-and-mutate on the state it read, after fencing the data row (see `fence`).
//! Entity reads read the data rows anyway, and check verified rows too.

use bytes::Bytes;

use super::entry::{self, Entry, IndexRow, State};
use super::fence::{self, Fenced};
use super::{Index, IndexValue, PrefixOf};
use crate::entity::Entity;
use crate::key::prefix_end;
use crate::repo::{AsyncRepository, Cursor, Page, Repository};
use crate::store::drive::drive;
use crate::store::{AsyncStore, AsyncView, Inline, ReadSpec, Row, ScanSpec, StoredCell};
use crate::value::Column;
use crate::{Error, Result};

/// Index rows read per round trip of data rows.
const CHUNK: usize = 256;

/// Reads of entities `E` through one index whose values are `V`; from
/// [`Repository::index`].
pub struct IndexReader<E, V> {
    repo: Repository<E>,
    index: Index<E, V>,
}

impl<E: Entity> Repository<E> {
    /// Reads through `index` (a generated constant such as `Customer::BY_EMAIL`).
    pub fn index<V>(&self, index: Index<E, V>) -> IndexReader<E, V> {
        IndexReader { repo: self.clone(), index }
    }
}

/// An index row read without its data row: the entity's key and the indexed and included
/// columns (a covered read).
#[derive(Debug, Clone)]
pub struct IndexEntry<E: Entity> {
    /// The entity's key.
    pub key: E::Key,
    /// The copied columns, as a row of the data table.
    row: Row,
    /// Position of the index in the schema.
    index: usize,
}

impl<E: Entity> IndexEntry<E> {
    /// A copied column's value: `field` must be indexed or included by the index.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a field the entity does not store; [`Error::Decode`] for a
    /// value that does not decode as `T` (or is missing, for a non-`Option` `T`).
    pub fn get<T: Column>(&self, field: &str) -> Result<T> {
        let spec = E::SCHEMA.column(field).ok_or_else(|| Error::InvalidArgument {
            arg: "field",
            reason: format!("{} has no stored field `{field}`", E::SCHEMA.entity),
        })?;
        crate::entity::decode_column::<T>(self.row.lend(), spec, u64::MAX)
            .map_err(|e| crate::repo::decode_error(E::SCHEMA.table, &self.row.key, e))
    }

    /// The whole entity, if the index copies every field it stores.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the index does not copy every stored field: an optional
    /// or defaulted field left out would read as `None` or its default, not as what the row
    /// holds; [`Error::Decode`] for a copy that does not decode.
    pub fn entity(&self) -> Result<E> {
        let schema = &E::SCHEMA;
        let index = &schema.indexes[self.index];
        let copied = |c: usize| index.parts.iter().any(|p| p.column == c) || index.include.contains(&c);
        if let Some(missing) = (0..schema.columns.len()).find(|&c| !copied(c)) {
            return Err(Error::InvalidArgument {
                arg: "index",
                reason: format!(
                    "index `{}` of {} does not copy field `{}`: include it to read whole entities from the index",
                    index.name, schema.entity, schema.columns[missing].field
                ),
            });
        }
        E::from_row(&self.row, u64::MAX).map_err(|e| crate::repo::decode_error(schema.table, &self.row.key, e))
    }
}

impl<E: Entity, V: IndexValue> IndexReader<E, V> {
    fn spec(&self) -> &'static super::IndexSpec {
        self.index.spec()
    }

    /// The entity holding `value` in a unique index.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] on an index that is not unique (scan it instead);
    /// [`Error::IndexNotReady`]; key encoding, decoding and store errors.
    pub fn get(&self, value: V) -> Result<Option<E>> {
        self.call("index_get").run(|| drive(self.get_via(&Inline(self.repo.store()), value)))
    }

    /// The span of a call `op` through this index.
    fn call(&self, op: &'static str) -> crate::trace::RepoCall {
        self.repo.call(op).index(self.spec().name)
    }

    async fn get_via(&self, store: &dyn AsyncStore, value: V) -> Result<Option<E>> {
        if !self.spec().unique {
            return Err(Error::InvalidArgument {
                arg: "index",
                reason: format!("index `{}` is not unique: scan it with a prefix", self.spec().name),
            });
        }
        let schema = &E::SCHEMA;
        let mut key = entry::index_prefix(schema, self.spec());
        value
            .encode_value(self.spec().parts, &mut key)
            .map_err(|source| Error::Key { entity: schema.entity, source })?;
        self.repo.index_statuses().check(store, schema, self.index.position()).await?;
        // A unique index has one row per value: a point read, not a scan.
        let (table, keys, read) = (super::index_table(schema.table), [key.into()], ReadSpec::default());
        let rows = store.read_rows(&table, &keys, &read).await?;
        let Some(index_row) = rows.into_iter().flatten().next().as_ref().and_then(entry::parse_row) else {
            return Ok(None);
        };
        match self.check(store, vec![index_row], &Mode::Entities).await?.pop().and_then(|hit| hit.data) {
            Some(row) => self.repo.decode(row.lend(), u64::MAX).map(Some),
            None => Ok(None),
        }
    }

    /// Keeps the rows of `chunk` that hold (see the module docs), settling abandoned
    /// unverified ones. Reads data rows for unverified index rows, and for all of them when
    /// entities are wanted.
    async fn check(&self, store: &dyn AsyncStore, chunk: Vec<IndexRow>, mode: &Mode) -> Result<Vec<Hit>> {
        let schema = &E::SCHEMA;
        let position = self.index.position();
        let needs_data = |r: &IndexRow| matches!(mode, Mode::Entities) || r.state != State::Verified;
        let wanted: Vec<Bytes> = chunk.iter().filter(|r| needs_data(r)).map(|r| r.primary.clone()).collect();
        let read = schema.read_spec();
        let mut data =
            if wanted.is_empty() { Vec::new() } else { store.read_rows(schema.table, &wanted, &read).await? }
                .into_iter();
        let mut hits = Vec::new();
        let mut settle = Vec::new();
        for index_row in chunk {
            if !needs_data(&index_row) {
                hits.push(Hit { index_row, data: None, entry: None });
                continue;
            }
            let row = data.next().flatten();
            if index_row.state == State::Verified {
                // Checked by key only: the copies of a verified row are trusted.
                let holds = row.as_ref().and_then(|r| entry::key_of_row(schema, r, position));
                if holds.is_some_and(|k| k == index_row.key) {
                    hits.push(Hit { index_row, data: row, entry: None });
                }
                continue;
            }
            let implied = row.as_ref().and_then(|r| entry::entry_of_row(schema, r, position));
            let holds = implied.as_ref().is_some_and(|e| e.key == index_row.key);
            if let Some(s) = entry::settle_abandoned(schema, &index_row, implied.as_ref(), store.guarantees()) {
                settle.push(Fenced::new(schema, index_row.primary.clone(), row.as_ref(), s));
            }
            if holds {
                hits.push(Hit { index_row, data: row, entry: implied });
            }
        }
        // Best effort: the answer stands either way, and a later reader settles what this one
        // could not. A failed write must not fail a read.
        let _ = fence::settle(store, schema, settle).await;
        Ok(hits)
    }

    /// A scan of the index, in value order unless reversed.
    pub fn scan(&self) -> IndexQuery<'_, E, V> {
        IndexQuery { reader: self, from: None, to: None, reverse: false, limit: None, after: None, error: None }
    }
}

/// An index scan being set up; from [`IndexReader::scan`].
pub struct IndexQuery<'r, E, V> {
    reader: &'r IndexReader<E, V>,
    /// Encoded values (after the index's prefix): inclusive start, exclusive end.
    from: Option<Vec<u8>>,
    to: Option<Vec<u8>>,
    reverse: bool,
    limit: Option<usize>,
    after: Option<Cursor>,
    error: Option<Error>,
}

/// What a scan yields per index row.
enum Mode {
    Entities,
    Keys,
    Covered,
}

/// Valid index rows in scan order, each with its entity when entities were read.
type Found<E> = Vec<(Hit, Option<E>)>;

/// One index row found valid, with its data row when it was read.
struct Hit {
    index_row: IndexRow,
    data: Option<Row>,
    /// The entry the data row implies (read for unverified rows, and for entities).
    entry: Option<Entry>,
}

impl<'r, E: Entity, V: IndexValue> IndexQuery<'r, E, V> {
    fn encode(&mut self, value: &impl IndexValue) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        match value.encode_value(self.reader.spec().parts, &mut out) {
            Ok(()) => Some(out),
            Err(source) => {
                self.error.get_or_insert(Error::Key { entity: E::SCHEMA.entity, source });
                None
            }
        }
    }

    /// Only entities whose leading indexed values are `prefix` (the whole value, or a tuple of
    /// the first fields of a composite index).
    pub fn prefix<P: PrefixOf<V>>(mut self, prefix: P) -> Self {
        if let Some(p) = self.encode(&prefix) {
            self.to = prefix_end(&p).map(|e| e.to_vec());
            self.from = Some(p);
        }
        self
    }

    /// Only entities whose indexed values are at or after `from` (a value or leading tuple).
    pub fn from<P: PrefixOf<V>>(mut self, from: P) -> Self {
        self.from = self.encode(&from);
        self
    }

    /// Only entities whose indexed values are before `to` (a value or leading tuple).
    pub fn to<P: PrefixOf<V>>(mut self, to: P) -> Self {
        self.to = self.encode(&to);
        self
    }

    /// Largest values first.
    pub fn reverse(mut self) -> Self {
        self.reverse = true;
        self
    }

    /// At most `n` entities.
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    /// Resumes after the last entity of an earlier page (same index, same direction).
    pub fn after(mut self, cursor: &Cursor) -> Self {
        self.after = Some(cursor.clone());
        self
    }

    /// The matching entities.
    ///
    /// # Errors
    /// [`Error::IndexNotReady`]; key encoding, decoding and store errors.
    pub fn to_vec(self) -> Result<Vec<E>> {
        let store = self.reader.repo.store();
        self.reader.call("index_scan").run(|| drive(self.entities_via(&Inline(store))))
    }

    async fn entities_via(self, store: &dyn AsyncStore) -> Result<Vec<E>> {
        Ok(self.run(store, Mode::Entities).await?.0.into_iter().filter_map(|(_, e)| e).collect())
    }

    /// The keys of the matching entities, from the index alone (unverified rows excepted).
    ///
    /// # Errors
    /// As [`IndexQuery::to_vec`]; [`Error::Decode`] for an entity with a hashed key part.
    pub fn keys(self) -> Result<Vec<E::Key>> {
        let store = self.reader.repo.store();
        self.reader.call("index_keys").run(|| drive(self.keys_via(&Inline(store))))
    }

    async fn keys_via(self, store: &dyn AsyncStore) -> Result<Vec<E::Key>> {
        let position = self.reader.index.position();
        let (hits, _) = self.run(store, Mode::Keys).await?;
        hits.into_iter().map(|(h, _)| covered::<E>(&h, position).map(|e| e.key)).collect()
    }

    /// The matching index entries, read without their data rows (unverified rows excepted): a
    /// covered read.
    ///
    /// # Errors
    /// As [`IndexQuery::keys`].
    pub fn entries(self) -> Result<Vec<IndexEntry<E>>> {
        let store = self.reader.repo.store();
        self.reader.call("index_entries").run(|| drive(self.entries_via(&Inline(store))))
    }

    async fn entries_via(self, store: &dyn AsyncStore) -> Result<Vec<IndexEntry<E>>> {
        let position = self.reader.index.position();
        let (hits, _) = self.run(store, Mode::Covered).await?;
        hits.into_iter().map(|(h, _)| covered::<E>(&h, position)).collect()
    }

    /// One page of at most `size` entities, and the cursor of the next one.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero size; as [`IndexQuery::to_vec`].
    pub fn page(self, size: usize) -> Result<Page<E>> {
        let store = self.reader.repo.store();
        self.reader.call("index_page").run(|| drive(self.page_via(&Inline(store), size)))
    }

    async fn page_via(mut self, store: &dyn AsyncStore, size: usize) -> Result<Page<E>> {
        if size == 0 {
            return Err(Error::InvalidArgument { arg: "size", reason: "a page holds at least one entity".into() });
        }
        self.limit = Some(size);
        let reverse = self.reverse;
        let (found, more) = self.run(store, Mode::Entities).await?;
        let next = match found.last() {
            Some((last, _)) if more => Some(Cursor { reverse, after: last.index_row.key.to_vec(), group: false }),
            _ => None,
        };
        Ok(Page { items: found.into_iter().filter_map(|(_, e)| e).collect(), next })
    }

    /// The index rows of the range, checked; with the entity for [`Mode::Entities`]. Also
    /// returns whether rows may remain past the limit.
    async fn run(mut self, store: &dyn AsyncStore, mode: Mode) -> Result<(Found<E>, bool)> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let repo = &self.reader.repo;
        let schema = &E::SCHEMA;
        let position = self.reader.index.position();
        repo.index_statuses().check(store, schema, position).await?;
        let prefix = entry::index_prefix(schema, self.reader.spec());
        let with_prefix = |v: &[u8]| Bytes::from([&prefix[..], v].concat());
        let mut start = self.from.as_deref().map_or_else(|| Bytes::from(prefix.clone()), with_prefix);
        let mut end = match self.to.as_deref() {
            Some(to) => Some(with_prefix(to)),
            None => prefix_end(&prefix).map(Bytes::from),
        };
        if let Some(cursor) = &self.after {
            if cursor.reverse != self.reverse || cursor.group {
                return Err(Error::InvalidArgument {
                    arg: "cursor",
                    reason: "from a scan in the other direction".into(),
                });
            }
            if self.reverse {
                end = Some(Bytes::from(cursor.after.clone()));
            } else {
                start = Bytes::from([&cursor.after[..], &[0]].concat());
            }
        }
        let limit = self.limit.unwrap_or(usize::MAX);
        if limit == 0 {
            return Ok((Vec::new(), false));
        }
        let table = super::index_table(schema.table);
        let spec = ScanSpec { start, end, reverse: self.reverse, limit: None, read: ReadSpec::default() };
        let mut rows = store.scan_cursor(&table, &spec).await?;
        let mut found = Vec::new();
        loop {
            let want = (limit - found.len()).min(CHUNK);
            let mut chunk = Vec::with_capacity(want);
            while chunk.len() < want && rows.advance().await? {
                // Rows that do not parse are left to verification.
                if let Some(r) = rows.row().and_then(|row| entry::parse_row(&row.to_row())) {
                    chunk.push(r);
                }
            }
            let exhausted = chunk.len() < want;
            for hit in self.reader.check(store, chunk, &mode).await? {
                let entity = match (&mode, &hit.data) {
                    (Mode::Entities, Some(row)) => Some(self.reader.repo.decode(row.lend(), u64::MAX)?),
                    _ => None,
                };
                found.push((hit, entity));
            }
            if found.len() >= limit {
                found.truncate(limit);
                return Ok((found, true));
            }
            if exhausted {
                return Ok((found, false));
            }
        }
    }
}

/// Reads of entities `E` through one index, as futures; from [`AsyncRepository::index`].
/// Each read runs what the synchronous [`IndexReader`] runs.
pub struct AsyncIndexReader<E, V> {
    reader: IndexReader<E, V>,
    store: AsyncView,
}

impl<E: Entity> AsyncRepository<E> {
    /// Reads through `index`, as [`Repository::index`] does.
    pub fn index<V>(&self, index: Index<E, V>) -> AsyncIndexReader<E, V> {
        let (repo, store) = self.parts();
        AsyncIndexReader { reader: repo.index(index), store: store.clone() }
    }
}

impl<E: Entity, V: IndexValue + Send> AsyncIndexReader<E, V> {
    /// As [`IndexReader::get`].
    ///
    /// # Errors
    /// As [`IndexReader::get`].
    pub async fn get(&self, value: V) -> Result<Option<E>> {
        self.reader.call("index_get").run_async(self.reader.get_via(self.store.get(), value)).await
    }

    /// A scan of the index, as [`IndexReader::scan`].
    pub fn scan(&self) -> AsyncIndexQuery<'_, E, V> {
        AsyncIndexQuery { query: self.reader.scan(), store: &self.store }
    }
}

/// An asynchronous index scan being set up; from [`AsyncIndexReader::scan`].
pub struct AsyncIndexQuery<'r, E, V> {
    query: IndexQuery<'r, E, V>,
    store: &'r AsyncView,
}

impl<E: Entity, V: IndexValue + Send + Sync> AsyncIndexQuery<'_, E, V> {
    /// As [`IndexQuery::prefix`].
    pub fn prefix<P: PrefixOf<V>>(mut self, prefix: P) -> Self {
        self.query = self.query.prefix(prefix);
        self
    }

    /// As [`IndexQuery::from`].
    pub fn from<P: PrefixOf<V>>(mut self, from: P) -> Self {
        self.query = self.query.from(from);
        self
    }

    /// As [`IndexQuery::to`].
    pub fn to<P: PrefixOf<V>>(mut self, to: P) -> Self {
        self.query = self.query.to(to);
        self
    }

    /// Largest values first.
    pub fn reverse(mut self) -> Self {
        self.query = self.query.reverse();
        self
    }

    /// At most `n` entities.
    pub fn limit(mut self, n: usize) -> Self {
        self.query = self.query.limit(n);
        self
    }

    /// Resumes after the last entity of an earlier page (from either API).
    pub fn after(mut self, cursor: &Cursor) -> Self {
        self.query = self.query.after(cursor);
        self
    }

    /// As [`IndexQuery::to_vec`].
    ///
    /// # Errors
    /// As [`IndexQuery::to_vec`].
    pub async fn to_vec(self) -> Result<Vec<E>> {
        let call = self.query.reader.call("index_scan");
        call.run_async(self.query.entities_via(self.store.get())).await
    }

    /// As [`IndexQuery::keys`].
    ///
    /// # Errors
    /// As [`IndexQuery::keys`].
    pub async fn keys(self) -> Result<Vec<E::Key>> {
        let call = self.query.reader.call("index_keys");
        call.run_async(self.query.keys_via(self.store.get())).await
    }

    /// As [`IndexQuery::entries`].
    ///
    /// # Errors
    /// As [`IndexQuery::entries`].
    pub async fn entries(self) -> Result<Vec<IndexEntry<E>>> {
        let call = self.query.reader.call("index_entries");
        call.run_async(self.query.entries_via(self.store.get())).await
    }

    /// As [`IndexQuery::page`].
    ///
    /// # Errors
    /// As [`IndexQuery::page`].
    pub async fn page(self, size: usize) -> Result<Page<E>> {
        let call = self.query.reader.call("index_page");
        call.run_async(self.query.page_via(self.store.get(), size)).await
    }
}

/// A covered entry: from the data row's implied entry when one was read (unverified rows),
/// else from the index row's copies. Hashed key parts come from the copies, so keys of an
/// entity with hashed key parts need the index to copy them (index or include them).
fn covered<E: Entity>(hit: &Hit, index: usize) -> Result<IndexEntry<E>> {
    let cells = hit.entry.as_ref().map_or(&hit.index_row.cells, |e| &e.cells);
    let mut stored = Vec::new();
    for (qualifier, value) in cells {
        let Some((family, qualifier)) = split_copy(qualifier) else { continue };
        stored.push(StoredCell { family, qualifier, timestamp: 0, value: value.clone() });
    }
    let row = Row { key: hit.index_row.primary.clone(), cells: stored };
    let key = E::key_from_row(&row).map_err(|e| crate::repo::decode_error(E::SCHEMA.table, &row.key, e))?;
    Ok(IndexEntry { key, row, index })
}

/// `family:qualifier` of an index copy.
fn split_copy(qualifier: &[u8]) -> Option<(Bytes, Bytes)> {
    let at = qualifier.iter().position(|&b| b == b':')?;
    Some((Bytes::copy_from_slice(&qualifier[..at]), Bytes::copy_from_slice(&qualifier[at + 1..])))
}
