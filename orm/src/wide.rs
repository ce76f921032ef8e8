//! Collections stored as columns: the entries of a map become qualifiers of one family of a
//! row ("wide" rows, or the paginated "middle" of the tall/wide trade-off).
//!
//! An entry's key is encoded into its qualifier order-preservingly, with the encodings of row
//! key parts (after an optional fixed prefix), and its value like any column. So a family's
//! qualifiers sort as the keys do, and a slice of the map — a key range, the first N, a page
//! after a given key — is a slice of the row's columns, which the stores read without reading
//! the row: the embedded engine seeks to it with its column filters, Bigtable applies a
//! column-range filter and a per-row cell limit. Single entries are written and deleted
//! without reading or rewriting the row. A `desc` key makes the first N the largest keys.
//!
//! An entity declares such a field with `#[cellar(columns(family = "p"))]` on a
//! `BTreeMap<K, V>`: an eager field is read with the entity and written whole by a put (the
//! family is cleared, then every entry written, in one atomic row mutation); a `lazy` one is
//! left out of entity reads (its map reads empty) and a put only adds the entries its map
//! holds. Either is reached entry by entry through [`crate::Repository::wide`].
//!
//! A row never splits across regions (or tablets): a map that can grow without bound makes a
//! row that can outgrow a region. Bound it, or store the entries as rows of their own.

use std::collections::BTreeMap;
use std::future::Future;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use bytes::Bytes;

use crate::entity::FieldError;
use crate::key::{decode_part, encode_part, KeyPart, PartSpec};
use crate::repo::printable;
use crate::store::drive::drive;
use crate::store::{
    AsyncStore, AsyncView, CellMutation, ColumnSlice, Columns, Inline, LentCell, LentRow, ReadSpec, Row, RowMutation,
    Store,
};
use crate::value::{ColumnValue, ValueError};
use crate::{Error, Result};

/// Where a map's entries live: the family (which holds nothing else), the qualifier prefix
/// and the key's encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WideSpec {
    /// The field, for errors and layouts.
    pub field: &'static str,
    /// The family holding the entries.
    pub family: &'static str,
    /// Bytes every qualifier of the map starts with (empty for none).
    pub prefix: &'static [u8],
    /// How an entry's key is encoded after the prefix (the last part of the qualifier: raw
    /// strings, big-endian numbers; `desc` inverts the order).
    pub key: PartSpec,
    /// Left out of entity reads; reached through [`crate::Repository::wide`] only.
    pub lazy: bool,
    /// The key's Rust type, as written (for layouts and advice).
    pub key_type: &'static str,
    /// The key's encoded width, if fixed: a width of 1 or 2 bytes bounds the map's entries.
    pub key_width: Option<usize>,
    /// The value's Rust type, as written (for the schema catalog).
    pub value_type: &'static str,
}

impl WideSpec {
    /// The qualifier of `key`.
    ///
    /// # Errors
    /// A key that does not fit its encoding.
    pub fn qualifier<K: KeyPart>(&self, key: &K) -> Result<Bytes> {
        let mut q = self.prefix.to_vec();
        encode_part(key, &self.key, &mut q)
            .map_err(|e| Error::InvalidArgument { arg: "key", reason: format!("{}: {e}", self.field) })?;
        Ok(q.into())
    }

    /// The key a qualifier of this field holds; `None` for a qualifier without the prefix.
    ///
    /// # Errors
    /// What does not decode, in words.
    pub fn key_of<K: KeyPart>(&self, qualifier: &[u8]) -> std::result::Result<Option<K>, String> {
        let Some(mut rest) = qualifier.strip_prefix(self.prefix) else { return Ok(None) };
        let key = decode_part::<K>(&mut rest, &self.key)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "a hashed key cannot be read back".to_string())?;
        if !rest.is_empty() {
            return Err(format!("{} bytes after the key", rest.len()));
        }
        Ok(Some(key))
    }
}

/// A map field of entity `E` stored as columns, generated as an associated constant
/// (`UserList::VALUES`): pass it to [`crate::Repository::wide`].
pub struct Wide<E, K, V> {
    position: usize,
    _types: PhantomData<Types<E, K, V>>,
}

/// Entity, key and value types a [`Wide`] is typed by (it holds none of them).
type Types<E, K, V> = fn() -> (E, K, V);

impl<E, K, V> Clone for Wide<E, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<E, K, V> Copy for Wide<E, K, V> {}

impl<E, K, V> std::fmt::Debug for Wide<E, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wide").field("position", &self.position).finish()
    }
}

impl<E: crate::Entity, K, V> Wide<E, K, V> {
    /// The `position`-th wide field of `E`'s schema (generated code only).
    pub const fn new(position: usize) -> Self {
        Wide { position, _types: PhantomData }
    }

    /// Where the field's entries live.
    pub fn spec(&self) -> &'static WideSpec {
        &E::SCHEMA.wide[self.position]
    }
}

/// The entries of an entity's wide field, encoded for a put.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WideCells {
    /// The field.
    pub spec: &'static WideSpec,
    /// Qualifier and value of every entry.
    pub entries: Vec<(Bytes, Bytes)>,
}

/// Encodes a map field's entries (helper for generated code).
///
/// # Errors
/// [`Error::InvalidArgument`] for a key that does not fit its encoding.
#[doc(hidden)]
pub fn encode_entries<K: KeyPart, V: ColumnValue>(spec: &'static WideSpec, map: &BTreeMap<K, V>) -> Result<WideCells> {
    let entries =
        map.iter().map(|(k, v)| Ok((spec.qualifier(k)?, Bytes::from(v.to_bytes())))).collect::<Result<Vec<_>>>()?;
    Ok(WideCells { spec, entries })
}

/// The entry a cell of `spec`'s family holds; `None` for a qualifier without the prefix.
fn decode_cell<K: KeyPart, V: ColumnValue>(
    spec: &WideSpec,
    cell: LentCell<'_>,
) -> std::result::Result<Option<(K, V)>, FieldError> {
    let bad = |reason: String| FieldError {
        column: Some(format!("{}:{}", spec.family, printable(cell.qualifier))),
        reason: format!("field `{}`: {reason}", spec.field),
        other_record_type: false,
    };
    let Some(key) = spec.key_of::<K>(cell.qualifier).map_err(bad)? else { return Ok(None) };
    let value = V::from_bytes(cell.value).map_err(|e: ValueError| bad(e.to_string()))?;
    Ok(Some((key, value)))
}

/// Decodes a map field from the cells of its family in `row` (helper for generated code).
///
/// # Errors
/// A [`FieldError`] naming the entry that does not decode.
#[doc(hidden)]
pub fn decode_entries<K: KeyPart + Ord, V: ColumnValue>(
    row: LentRow<'_>,
    spec: &WideSpec,
    as_of: u64,
) -> std::result::Result<BTreeMap<K, V>, FieldError> {
    let mut map = BTreeMap::new();
    // Cells come newest version first: the first one at or before `as_of` is the value.
    let mut last: Option<&[u8]> = None;
    for cell in row.cells().filter(|c| c.family == spec.family.as_bytes() && c.timestamp <= as_of) {
        if last == Some(cell.qualifier) {
            continue;
        }
        last = Some(cell.qualifier);
        map.extend(decode_cell::<K, V>(spec, cell)?);
    }
    Ok(map)
}

/// The entries of one map field of one row; reads and writes go straight to the row's
/// columns. Cheap to clone.
pub struct WideColumns<K, V> {
    store: Arc<dyn Store>,
    table: &'static str,
    row: Bytes,
    spec: WideSpec,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for WideColumns<K, V> {
    fn clone(&self) -> Self {
        WideColumns {
            store: self.store.clone(),
            table: self.table,
            row: self.row.clone(),
            spec: self.spec,
            _types: PhantomData,
        }
    }
}

impl<K, V> std::fmt::Debug for WideColumns<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WideColumns")
            .field("table", &self.table)
            .field("row", &printable(&self.row))
            .field("field", &self.spec.field)
            .finish_non_exhaustive()
    }
}

impl<K: KeyPart, V: ColumnValue> WideColumns<K, V> {
    /// The entries of `spec`'s field in `row` of `table`.
    pub fn new(store: Arc<dyn Store>, table: &'static str, row: Bytes, spec: WideSpec) -> Self {
        WideColumns { store, table, row, spec, _types: PhantomData }
    }

    /// The qualifier of `key`.
    ///
    /// # Errors
    /// A key that does not fit its encoding.
    pub fn qualifier(&self, key: &K) -> Result<Bytes> {
        self.spec.qualifier(key)
    }

    fn family(&self) -> Bytes {
        Bytes::from_static(self.spec.family.as_bytes())
    }

    fn decode(&self, row: &Row) -> Result<Vec<(K, V)>> {
        let cells = row.lend().cells().filter(|c| c.family == self.spec.family.as_bytes());
        cells
            .filter_map(|cell| decode_cell::<K, V>(&self.spec, cell).transpose())
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| crate::repo::decode_error(self.table, &row.key, e))
    }

    /// The store, called on the spot: what the synchronous methods run over.
    fn inline(&self) -> Inline<'_> {
        Inline(&*self.store)
    }

    async fn slice(
        &self,
        store: &dyn AsyncStore,
        from: Option<Bytes>,
        to: Option<Bytes>,
        offset: usize,
        limit: Option<usize>,
    ) -> Result<Vec<(K, V)>> {
        match self.read(store, from, to, offset, limit, false).await? {
            Some(row) => self.decode(&row),
            None => Ok(Vec::new()),
        }
    }

    /// The row's columns of this map from `from` to `to` (the whole map where open), past
    /// `offset`, at most `limit`.
    async fn read(
        &self,
        store: &dyn AsyncStore,
        from: Option<Bytes>,
        to: Option<Bytes>,
        offset: usize,
        limit: Option<usize>,
        keys_only: bool,
    ) -> Result<Option<Row>> {
        let prefix = Bytes::from_static(self.spec.prefix);
        // The map's qualifiers all start with the prefix: bound the slice to them.
        let from = from.or_else(|| (!prefix.is_empty()).then(|| prefix.clone()));
        let to = to.or_else(|| crate::key::prefix_end(&prefix).map(Bytes::from));
        let slice = ColumnSlice { family: self.family(), from, to, offset, limit, keys_only };
        let read = ReadSpec { columns: Columns::Slice(slice), ..ReadSpec::default() };
        let rows = store.read_rows(self.table, std::slice::from_ref(&self.row), &read).await?;
        Ok(rows.into_iter().next().flatten())
    }

    /// The mutation that writes `entries`; `None` for no entries.
    fn put_mutation<'a>(&self, entries: impl IntoIterator<Item = (&'a K, &'a V)>) -> Result<Option<RowMutation>>
    where
        K: 'a,
        V: 'a,
    {
        let mutations = entries
            .into_iter()
            .map(|(k, v)| {
                Ok(CellMutation::Put {
                    family: self.family(),
                    qualifier: self.qualifier(k)?,
                    value: v.to_bytes().into(),
                    timestamp: None,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((!mutations.is_empty()).then(|| RowMutation { row: self.row.clone(), mutations }))
    }

    async fn put_many_via(&self, store: &dyn AsyncStore, mutation: Result<Option<RowMutation>>) -> Result<()> {
        match mutation? {
            Some(m) => store.mutate_row(self.table, m).await,
            None => Ok(()),
        }
    }

    async fn delete_via(&self, store: &dyn AsyncStore, key: &K) -> Result<()> {
        let m = CellMutation::DeleteColumn { family: self.family(), qualifier: self.qualifier(key)? };
        store.mutate_row(self.table, RowMutation { row: self.row.clone(), mutations: vec![m] }).await
    }

    async fn get_via(&self, store: &dyn AsyncStore, key: &K) -> Result<Option<V>> {
        let found = self.bounded(store, Bound::Included(key), Bound::Included(key), Some(1)).await?;
        Ok(found.into_iter().next().map(|(_, v)| v))
    }

    async fn last_via(&self, store: &dyn AsyncStore, n: usize) -> Result<Vec<(K, V)>> {
        let total = self.count_via(store).await?;
        self.slice(store, None, None, total.saturating_sub(n), Some(n)).await
    }

    async fn bounded(
        &self,
        store: &dyn AsyncStore,
        start: Bound<&K>,
        end: Bound<&K>,
        limit: Option<usize>,
    ) -> Result<Vec<(K, V)>> {
        let successor = |q: Bytes| Bytes::from([&q[..], &[0]].concat());
        let from = match start {
            Bound::Included(k) => Some(self.qualifier(k)?),
            Bound::Excluded(k) => Some(successor(self.qualifier(k)?)),
            Bound::Unbounded => None,
        };
        let to = match end {
            Bound::Included(k) => Some(successor(self.qualifier(k)?)),
            Bound::Excluded(k) => Some(self.qualifier(k)?),
            Bound::Unbounded => None,
        };
        self.slice(store, from, to, 0, limit).await
    }

    async fn count_via(&self, store: &dyn AsyncStore) -> Result<usize> {
        Ok(self.read(store, None, None, 0, None, true).await?.map_or(0, |r| r.cells.len()))
    }

    /// Writes one entry, without reading the row.
    ///
    /// # Errors
    /// Store errors; a key that does not fit its encoding.
    pub fn put(&self, key: &K, value: &V) -> Result<()> {
        self.put_many([(key, value)])
    }

    /// Writes several entries in one call.
    ///
    /// # Errors
    /// As [`WideColumns::put`].
    pub fn put_many<'a>(&self, entries: impl IntoIterator<Item = (&'a K, &'a V)>) -> Result<()>
    where
        K: 'a,
        V: 'a,
    {
        drive(self.put_many_via(&self.inline(), self.put_mutation(entries)))
    }

    /// Deletes one entry.
    ///
    /// # Errors
    /// As [`WideColumns::put`].
    pub fn delete(&self, key: &K) -> Result<()> {
        drive(self.delete_via(&self.inline(), key))
    }

    /// The value of one entry.
    ///
    /// # Errors
    /// Store errors; a stored entry that does not decode.
    pub fn get(&self, key: &K) -> Result<Option<V>> {
        drive(self.get_via(&self.inline(), key))
    }

    /// The first `n` entries in the key's order (the largest keys for a `desc` key).
    ///
    /// # Errors
    /// As [`WideColumns::get`].
    pub fn first(&self, n: usize) -> Result<Vec<(K, V)>> {
        drive(self.slice(&self.inline(), None, None, 0, Some(n)))
    }

    /// The `n` entries after the first `offset` (a page by position, as HBase's
    /// ColumnPaginationFilter with an offset: the store still walks the skipped columns, so
    /// [`WideColumns::after`] is cheaper for deep pages).
    ///
    /// # Errors
    /// As [`WideColumns::get`].
    pub fn page(&self, offset: usize, n: usize) -> Result<Vec<(K, V)>> {
        drive(self.slice(&self.inline(), None, None, offset, Some(n)))
    }

    /// The last `n` entries in the key's order: a count of the entries (qualifiers only), then
    /// a page at its end — two reads. Declare the key `desc` if the largest are read most.
    ///
    /// # Errors
    /// As [`WideColumns::get`].
    pub fn last(&self, n: usize) -> Result<Vec<(K, V)>> {
        drive(self.last_via(&self.inline(), n))
    }

    /// The `n` entries after `key` (a page that starts where the last one ended).
    ///
    /// # Errors
    /// As [`WideColumns::get`].
    pub fn after(&self, key: &K, n: usize) -> Result<Vec<(K, V)>> {
        drive(self.bounded(&self.inline(), Bound::Excluded(key), Bound::Unbounded, Some(n)))
    }

    /// Entries from `from` (inclusive) to `to` (exclusive) in the key's order, at most `limit`.
    ///
    /// # Errors
    /// As [`WideColumns::get`].
    pub fn between(&self, from: &K, to: &K, limit: Option<usize>) -> Result<Vec<(K, V)>> {
        drive(self.bounded(&self.inline(), Bound::Included(from), Bound::Excluded(to), limit))
    }

    /// Entries with keys in `range` (in the key's order: for a `desc` key, `a..b` runs from
    /// the larger `a` down to `b`), at most `limit`.
    ///
    /// # Errors
    /// As [`WideColumns::get`].
    pub fn range(&self, range: impl RangeBounds<K>, limit: Option<usize>) -> Result<Vec<(K, V)>> {
        drive(self.bounded(&self.inline(), range.start_bound(), range.end_bound(), limit))
    }

    /// Every entry.
    ///
    /// # Errors
    /// As [`WideColumns::get`].
    pub fn all(&self) -> Result<Vec<(K, V)>> {
        drive(self.slice(&self.inline(), None, None, 0, None))
    }

    /// How many entries there are, reading qualifiers only.
    ///
    /// # Errors
    /// Store errors.
    pub fn count(&self) -> Result<usize> {
        drive(self.count_via(&self.inline()))
    }

    /// These entries' reads and writes as futures (see [`AsyncWideColumns`]).
    pub fn to_async(&self) -> AsyncWideColumns<K, V> {
        AsyncWideColumns { store: AsyncView::new(self.store.clone()), wide: self.clone() }
    }
}

/// The entries of a wide field of one row, read and written through futures: what
/// [`WideColumns`] does, for async services (each method runs the same code). Made with
/// [`WideColumns::to_async`]. Cheap to clone.
pub struct AsyncWideColumns<K, V> {
    wide: WideColumns<K, V>,
    store: AsyncView,
}

impl<K, V> Clone for AsyncWideColumns<K, V> {
    fn clone(&self) -> Self {
        AsyncWideColumns { wide: self.wide.clone(), store: self.store.clone() }
    }
}

impl<K, V> std::fmt::Debug for AsyncWideColumns<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AsyncWideColumns").field(&self.wide).finish()
    }
}

impl<K: KeyPart + Send + Sync, V: ColumnValue + Send + Sync> AsyncWideColumns<K, V> {
    /// As [`WideColumns::put`].
    ///
    /// # Errors
    /// As [`WideColumns::put`].
    pub async fn put(&self, key: &K, value: &V) -> Result<()> {
        let mutation = self.wide.put_mutation([(key, value)]);
        self.wide.put_many_via(self.store.get(), mutation).await
    }

    /// As [`WideColumns::put_many`].
    ///
    /// # Errors
    /// As [`WideColumns::put`].
    pub fn put_many<'a>(
        &self,
        entries: impl IntoIterator<Item = (&'a K, &'a V)>,
    ) -> impl Future<Output = Result<()>> + Send + '_
    where
        K: 'a,
        V: 'a,
    {
        let mutation = self.wide.put_mutation(entries);
        async move { self.wide.put_many_via(self.store.get(), mutation).await }
    }

    /// As [`WideColumns::delete`].
    ///
    /// # Errors
    /// As [`WideColumns::put`].
    pub async fn delete(&self, key: &K) -> Result<()> {
        self.wide.delete_via(self.store.get(), key).await
    }

    /// As [`WideColumns::get`].
    ///
    /// # Errors
    /// As [`WideColumns::get`].
    pub async fn get(&self, key: &K) -> Result<Option<V>> {
        self.wide.get_via(self.store.get(), key).await
    }

    /// As [`WideColumns::first`].
    ///
    /// # Errors
    /// As [`WideColumns::get`].
    pub async fn first(&self, n: usize) -> Result<Vec<(K, V)>> {
        self.wide.slice(self.store.get(), None, None, 0, Some(n)).await
    }

    /// As [`WideColumns::page`].
    ///
    /// # Errors
    /// As [`WideColumns::get`].
    pub async fn page(&self, offset: usize, n: usize) -> Result<Vec<(K, V)>> {
        self.wide.slice(self.store.get(), None, None, offset, Some(n)).await
    }

    /// As [`WideColumns::last`].
    ///
    /// # Errors
    /// As [`WideColumns::get`].
    pub async fn last(&self, n: usize) -> Result<Vec<(K, V)>> {
        self.wide.last_via(self.store.get(), n).await
    }

    /// As [`WideColumns::after`].
    ///
    /// # Errors
    /// As [`WideColumns::get`].
    pub async fn after(&self, key: &K, n: usize) -> Result<Vec<(K, V)>> {
        self.wide.bounded(self.store.get(), Bound::Excluded(key), Bound::Unbounded, Some(n)).await
    }

    /// As [`WideColumns::between`].
    ///
    /// # Errors
    /// As [`WideColumns::get`].
    pub async fn between(&self, from: &K, to: &K, limit: Option<usize>) -> Result<Vec<(K, V)>> {
        self.wide.bounded(self.store.get(), Bound::Included(from), Bound::Excluded(to), limit).await
    }

    /// As [`WideColumns::all`].
    ///
    /// # Errors
    /// As [`WideColumns::get`].
    pub async fn all(&self) -> Result<Vec<(K, V)>> {
        self.wide.slice(self.store.get(), None, None, 0, None).await
    }

    /// As [`WideColumns::count`].
    ///
    /// # Errors
    /// As [`WideColumns::count`].
    pub async fn count(&self) -> Result<usize> {
        self.wide.count_via(self.store.get()).await
    }
}
