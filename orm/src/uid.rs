//! Uids of names (OpenTSDB's UIDs): a fixed-width numeric id stands for a string in row keys,
//! so a metric name or host of any length takes 3 to 8 bytes of every key that holds it. A key
//! part declared `#[cellar(key, uid = "kind")]` is stored this way.
//!
//! Each kind of name (`"metrics"`, `"hosts"`, ...) has its own ids, kept in [`UIDS_TABLE`]
//! (family `u`):
//!
//! | row                        | qualifier | value                                  |
//! |----------------------------|-----------|----------------------------------------|
//! | `c` 00 `kind`              | `next`    | the last id handed out (8-byte counter) |
//! | `n` 00 `kind` 00 `name`    | `id`      | the name's id (`width` bytes)           |
//! | `i` 00 `kind` 00 `id`      | `name`    | the id's name                           |
//!
//! Assigning a new name draws the next id from the counter, writes the id's row (id → name),
//! then claims the name's row (name → id) with a put-if-absent. Two writers assigning the same
//! new name race on that claim: the loser adopts the winner's id and removes the id row it
//! wrote, so a name has one id and an id names one name. A crash between the two writes
//! leaves an id row nothing points to, which costs an id and nothing else; the reverse row is
//! always written first, so every id a key holds has a name. Both directions are cached:
//! mappings never change once made.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::RwLock;

use crate::store::drive::drive;
use crate::store::{AsyncStore, AsyncView, CellMutation, Condition, Inline, ReadSpec, RowMutation, Store, TableSpec};
use crate::{Db, Error, Result};

/// The table holding every kind's ids.
pub const UIDS_TABLE: &str = "cellar_uids";
const FAMILY: &str = "u";
const NEXT: &str = "next";
const ID: &[u8] = b"id";
const NAME: &[u8] = b"name";

/// The ids of one kind of name; from [`Db::uids`]. Cheap to clone; clones share the cache.
#[derive(Clone)]
pub struct Uids {
    store: Arc<dyn Store>,
    kind: Arc<str>,
    width: u8,
    cache: Arc<RwLock<Cache>>,
}

#[derive(Default)]
struct Cache {
    ids: HashMap<String, Bytes>,
    names: HashMap<Bytes, String>,
}

impl std::fmt::Debug for Uids {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uids").field("kind", &self.kind).field("width", &self.width).finish_non_exhaustive()
    }
}

impl Db {
    /// The ids of names of `kind`, `width` bytes each (3 to 8: 2^24 − 1 to 2^64 − 1 names).
    /// Creates [`UIDS_TABLE`] if missing. Use one width per kind: ids already handed out keep
    /// the width they were written with.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a width outside 3..=8 or a kind that is empty or holds a
    /// zero byte; store errors.
    pub fn uids(&self, kind: &str, width: u8) -> Result<Uids> {
        Uids::open(self.store().clone(), kind, width)
    }
}

impl Uids {
    /// As [`Db::uids`], on `store`.
    pub(crate) fn open(store: Arc<dyn Store>, kind: &str, width: u8) -> Result<Uids> {
        if !(3..=8).contains(&width) {
            return Err(Error::InvalidArgument { arg: "width", reason: format!("{width} bytes; ids take 3 to 8") });
        }
        if kind.is_empty() || kind.contains('\0') {
            return Err(Error::InvalidArgument { arg: "kind", reason: format!("{kind:?}: empty or with a zero byte") });
        }
        store.ensure_table(&TableSpec::internal(UIDS_TABLE, FAMILY))?;
        Ok(Uids { store, kind: kind.into(), width, cache: Arc::default() })
    }
}

fn row(tag: u8, kind: &str, rest: &[u8]) -> Bytes {
    let mut key = Vec::with_capacity(3 + kind.len() + rest.len());
    key.push(tag);
    key.push(0);
    key.extend_from_slice(kind.as_bytes());
    if tag != b'c' {
        key.push(0);
        key.extend_from_slice(rest);
    }
    key.into()
}

impl Uids {
    /// The kind of name.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// Bytes per id.
    pub fn width(&self) -> u8 {
        self.width
    }

    /// The row of this kind's id counter in [`UIDS_TABLE`] (family `u`, qualifier `next`).
    pub fn counter_row(&self) -> Bytes {
        row(b'c', &self.kind, &[])
    }

    /// The largest id the width allows.
    fn max_id(&self) -> u64 {
        if self.width >= 8 {
            u64::MAX
        } else {
            (1u64 << (8 * u32::from(self.width))) - 1
        }
    }

    fn encode(&self, id: u64) -> Bytes {
        Bytes::copy_from_slice(&id.to_be_bytes()[8 - usize::from(self.width)..])
    }

    fn remember(&self, name: &str, id: &Bytes) {
        let mut cache = self.cache.write();
        cache.ids.insert(name.to_string(), id.clone());
        cache.names.insert(id.clone(), name.to_string());
    }

    /// The id of `name`, if it has one.
    ///
    /// # Errors
    /// A stored id of the wrong width (the kind was used with another width); store errors.
    pub fn lookup(&self, name: &str) -> Result<Option<Bytes>> {
        drive(self.lookup_via(&Inline(&*self.store), name))
    }

    /// The id of `name` if the cache holds it: no store call.
    pub(crate) fn cached_id(&self, name: &str) -> Option<Bytes> {
        self.cache.read().ids.get(name).cloned()
    }

    /// The name of `id` if the cache holds it: no store call.
    pub(crate) fn cached_name(&self, id: &[u8]) -> Option<String> {
        self.cache.read().names.get(id).cloned()
    }

    pub(crate) async fn lookup_via(&self, store: &dyn AsyncStore, name: &str) -> Result<Option<Bytes>> {
        if let Some(id) = self.cache.read().ids.get(name) {
            return Ok(Some(id.clone()));
        }
        let (key, read) = (row(b'n', &self.kind, name.as_bytes()), ReadSpec::default());
        let found = store.read_rows(UIDS_TABLE, std::slice::from_ref(&key), &read).await?;
        let Some(id) =
            found.into_iter().flatten().next().and_then(|r| r.value(FAMILY, "id").map(Bytes::copy_from_slice))
        else {
            return Ok(None);
        };
        if id.len() != usize::from(self.width) {
            return Err(Error::InvalidArgument {
                arg: "width",
                reason: format!("kind `{}` stores {}-byte ids; this handle uses {}", self.kind, id.len(), self.width),
            });
        }
        self.remember(name, &id);
        Ok(Some(id))
    }

    /// The id of `name`, assigning the next free one if it has none. Writers assigning the
    /// same new name at once, in this process or others, all get the same id.
    ///
    /// # Errors
    /// [`Error::UidsExhausted`] when every id of the width is taken; store errors.
    pub fn id(&self, name: &str) -> Result<Bytes> {
        drive(self.id_via(&Inline(&*self.store), name))
    }

    pub(crate) async fn id_via(&self, store: &dyn AsyncStore, name: &str) -> Result<Bytes> {
        if let Some(id) = self.lookup_via(store, name).await? {
            return Ok(id);
        }
        let next = store.increment(UIDS_TABLE, self.counter_row(), FAMILY, NEXT, 1).await?;
        let next = u64::try_from(next).unwrap_or(u64::MAX);
        if next == 0 || next > self.max_id() {
            return Err(Error::UidsExhausted { kind: self.kind.to_string(), width: self.width });
        }
        let id = self.encode(next);
        // The reverse row first: an id a key can hold always has its name.
        let reverse = row(b'i', &self.kind, &id);
        let name_cell = CellMutation::put_now(FAMILY, NAME, Bytes::copy_from_slice(name.as_bytes()));
        store.mutate_row(UIDS_TABLE, RowMutation { row: reverse.clone(), mutations: vec![name_cell] }).await?;
        let forward = row(b'n', &self.kind, name.as_bytes());
        let unclaimed =
            Condition::Absent { family: Bytes::from_static(FAMILY.as_bytes()), qualifier: Bytes::from_static(ID) };
        let claim = RowMutation { row: forward, mutations: vec![CellMutation::put_now(FAMILY, ID, id.clone())] };
        let claimed = store.check_and_mutate(UIDS_TABLE, unclaimed, claim).await?;
        if claimed {
            self.remember(name, &id);
            return Ok(id);
        }
        // Another writer named it first: its id stands, ours goes unused.
        store.mutate_row(UIDS_TABLE, RowMutation { row: reverse, mutations: vec![CellMutation::DeleteRow] }).await?;
        self.lookup_via(store, name)
            .await?
            .ok_or_else(|| Error::Store(format!("uid of `{name}` vanished after another writer claimed it")))
    }

    /// The name `id` stands for.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an id of another width; store errors.
    pub fn name(&self, id: &[u8]) -> Result<Option<String>> {
        drive(self.name_via(&Inline(&*self.store), id))
    }

    pub(crate) async fn name_via(&self, store: &dyn AsyncStore, id: &[u8]) -> Result<Option<String>> {
        if id.len() != usize::from(self.width) {
            return Err(Error::InvalidArgument {
                arg: "id",
                reason: format!("{} bytes; kind `{}` uses {}", id.len(), self.kind, self.width),
            });
        }
        if let Some(name) = self.cache.read().names.get(id) {
            return Ok(Some(name.clone()));
        }
        let (key, read) = (row(b'i', &self.kind, id), ReadSpec::default());
        let found = store.read_rows(UIDS_TABLE, std::slice::from_ref(&key), &read).await?;
        let Some(name) = found.into_iter().flatten().next().and_then(|r| r.value(FAMILY, "name").map(<[u8]>::to_vec))
        else {
            return Ok(None);
        };
        let name = String::from_utf8(name).map_err(|_| Error::Decode {
            table: UIDS_TABLE,
            row: crate::repo::printable(&key),
            column: Some("u:name".into()),
            reason: "the name is not UTF-8".into(),
        })?;
        let id = Bytes::copy_from_slice(id);
        self.remember(&name, &id);
        Ok(Some(name))
    }
}

impl Uids {
    /// These ids' lookups and assignments as futures (see [`AsyncUids`]).
    pub fn to_async(&self) -> AsyncUids {
        AsyncUids { store: AsyncView::new(self.store.clone()), uids: self.clone() }
    }
}

/// The ids of one kind of name, looked up and assigned through futures: what [`Uids`] does
/// (the same code, sharing its cache), for async services. Made with [`Uids::to_async`].
#[derive(Clone)]
pub struct AsyncUids {
    uids: Uids,
    store: AsyncView,
}

impl std::fmt::Debug for AsyncUids {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AsyncUids").field(&self.uids).finish()
    }
}

impl AsyncUids {
    /// As [`Uids::lookup`].
    ///
    /// # Errors
    /// As [`Uids::lookup`].
    pub async fn lookup(&self, name: &str) -> Result<Option<Bytes>> {
        self.uids.lookup_via(self.store.get(), name).await
    }

    /// As [`Uids::id`].
    ///
    /// # Errors
    /// As [`Uids::id`].
    pub async fn id(&self, name: &str) -> Result<Bytes> {
        self.uids.id_via(self.store.get(), name).await
    }

    /// As [`Uids::name`].
    ///
    /// # Errors
    /// As [`Uids::name`].
    pub async fn name(&self, id: &[u8]) -> Result<Option<String>> {
        self.uids.name_via(self.store.get(), id).await
    }
}
