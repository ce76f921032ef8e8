//! [`AggregateRepository`]: whole aggregates read, written and scanned through one API whatever
//! the strategy.
//!
//! Every write is a read-modify-write of the aggregate's rows: read what is stored, build the
//! new tree, lay both out as rows, and write only the difference — rows that went are deleted,
//! cells that changed are put, cells that went are deleted — in one atomic multi-row mutation
//! conditioned on the root's generation cell being what was read. A write that loses a race
//! re-reads and tries again. The generation is a random token, new on every write, so a
//! condition can never pass on a stale read (no ABA after a delete and re-create).
//!
//! This needs [`crate::store::Guarantees::atomic_row_groups`] and one table; the `normalized`
//! strategy, and any strategy on a store without that guarantee, go through the intent
//! protocol instead (`intent.rs`).

use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;

use super::rows::{self, RowSet, GENERATION};
use super::shape::Shape;
use super::{intent, Aggregate, AggregateLayout, Node, Strategy};
use crate::key::{prefix_end, KeyError, Modifier};
use crate::repo::printable;
use crate::store::drive::drive;
use crate::store::{
    AsyncStore, CellMutation, Condition, FamilySpec, Inline, PrefixField, ReadSpec, RowCheck, RowMutation, ScanSpec,
    SplitPolicy, Store, StoredCell, TableSpec,
};
use crate::{Db, Error, Result};

/// Attempts a write makes before giving up with [`Error::Contended`].
const MAX_ATTEMPTS: u32 = 64;

/// Reads and writes aggregates of type `A`. Cheap to clone.
pub struct AggregateRepository<A> {
    pub(super) store: Arc<dyn Store>,
    pub(super) shape: Arc<Shape>,
    /// Writes go out as one atomic multi-row mutation (else through the intent protocol).
    pub(super) atomic: bool,
    /// How long a write through the intent protocol owns its intent.
    pub(super) lease: std::time::Duration,
    /// Reads rewrite a versioned blob of an older version at the current one.
    pub(super) write_back: bool,
    _aggregate: PhantomData<fn() -> A>,
}

impl<A> Clone for AggregateRepository<A> {
    fn clone(&self) -> Self {
        AggregateRepository {
            store: self.store.clone(),
            shape: self.shape.clone(),
            atomic: self.atomic,
            lease: self.lease,
            write_back: self.write_back,
            _aggregate: PhantomData,
        }
    }
}

impl<A> std::fmt::Debug for AggregateRepository<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AggregateRepository")
            .field("aggregate", &std::any::type_name::<A>())
            .field("strategy", &self.shape.strategy)
            .finish_non_exhaustive()
    }
}

impl Db {
    /// The repository of aggregate `A`: creates its tables and families if missing (one table,
    /// or one per level under `normalized`), keeps each aggregate's rows in one region where
    /// the strategy writes them together, and checks that existing tables fit.
    ///
    /// # Errors
    /// [`Error::SchemaMismatch`]; store errors.
    pub fn aggregates<A: Aggregate>(&self) -> Result<AggregateRepository<A>> {
        let shape = Shape::new(&A::AGGREGATE);
        // A blob is one row, atomic on every store.
        let atomic = match shape.strategy {
            Strategy::Normalized => false,
            Strategy::Blob => true,
            _ => self.store().guarantees().atomic_row_groups,
        };
        let declared = crate::catalog::describe::aggregate(&A::AGGREGATE);
        for spec in table_specs(&shape) {
            self.ensure_table_for(&spec, &declared)?;
        }
        self.register(&declared)?;
        Ok(AggregateRepository {
            store: self.store().clone(),
            shape: Arc::new(shape),
            atomic,
            lease: super::LEASE,
            write_back: false,
            _aggregate: PhantomData,
        })
    }
}

/// The tables an aggregate needs, with the families of every level stored in each.
fn table_specs(shape: &Shape) -> Vec<TableSpec> {
    let mut specs: Vec<TableSpec> = Vec::new();
    for level in &shape.levels {
        let spec = match specs.iter_mut().position(|s| s.name == level.table) {
            Some(i) => &mut specs[i],
            None => {
                let root_table = level.parent.is_none();
                let split_keys =
                    if root_table || shape.strategy == Strategy::Normalized { salt_splits(shape) } else { Vec::new() };
                let split_policy = if shape.strategy == Strategy::Normalized {
                    SplitPolicy::MidKey
                } else {
                    SplitPolicy::Fields(prefix_fields(shape))
                };
                specs.push(TableSpec {
                    name: level.table.clone(),
                    families: Vec::new(),
                    split_keys,
                    split_policy,
                    deferred: false,
                });
                specs.last_mut().expect("just pushed")
            }
        };
        // The blob row holds only the blob and the generation, in the root's default family.
        let families = if shape.strategy == Strategy::Blob { &shape.root.families[..1] } else { level.schema.families };
        for f in families {
            if !spec.families.iter().any(|s| s.name == f.name) {
                spec.families.push(FamilySpec {
                    name: f.name.to_string(),
                    max_versions: f.max_versions,
                    ttl_secs: f.ttl_secs,
                });
            }
        }
    }
    specs
}

fn salt_splits(shape: &Shape) -> Vec<Vec<u8>> {
    (1..shape.root.salt.buckets()).map(|b| vec![b]).collect()
}

/// The aggregate prefix as split-policy fields: the salt byte and every root key part.
fn prefix_fields(shape: &Shape) -> Vec<PrefixField> {
    let salt = shape.root.salt.is_some().then_some(PrefixField::Fixed(1));
    let parts = shape.root.partition.iter().chain(shape.root.key).map(|p| match p.width {
        Some(w) => PrefixField::Fixed(w as u32),
        None if p.spec.modifier == Modifier::Desc => PrefixField::Terminated(vec![0xFF, 0xFE]),
        None => PrefixField::Terminated(vec![0x00, 0x01]),
    });
    salt.into_iter().chain(parts).collect()
}

/// A new generation token: random, so no two writes share one.
fn new_generation() -> Bytes {
    Bytes::copy_from_slice(&crate::writer::token().to_be_bytes())
}

/// The generation stored in a root row's cells.
pub(super) fn generation_of(cells: &[StoredCell]) -> Option<Bytes> {
    cells.iter().find(|c| c.qualifier == GENERATION).map(|c| c.value.clone())
}

/// True if the root row in `set` holds a pending generation: a write through the intent
/// protocol left unfinished. On a store that writes aggregates atomically there are none of its
/// own, but rows copied from one that does not (Bigtable) may hold one, and reading around it
/// would mix two versions: such reads go through the intent protocol, which finishes it.
pub(super) fn holds_intent(set: &RowSet, root: &Bytes) -> bool {
    set.get(&(0, root.clone())).and_then(|cells| generation_of(cells)).is_some_and(|g| g.len() > rows::DELETED_LEN)
}

/// `rows` without the root row's generation cell: what a change is compared against.
fn without_generation(rows: &RowSet, root: &Bytes) -> RowSet {
    let mut rows = rows.clone();
    if let Some(cells) = rows.get_mut(&(0, root.clone())) {
        cells.retain(|c| c.qualifier != GENERATION);
        if cells.is_empty() {
            rows.remove(&(0, root.clone()));
        }
    }
    rows
}

/// `set` without the root row's blob cell, the row itself kept: a difference taken from it
/// always puts the blob, and still deletes the row.
fn without_blob(mut set: RowSet, root: &Bytes) -> RowSet {
    if let Some(cells) = set.get_mut(&(0, root.clone())) {
        cells.retain(|c| c.qualifier != rows::BLOB);
    }
    set
}

/// Mutations turning the stored rows `old` into `new`, per table slot: rows that went are
/// deleted, changed and new cells put, cells that went deleted; untouched rows are left alone.
pub(super) fn diff(old: &RowSet, new: &RowSet) -> Vec<(usize, RowMutation)> {
    let mut out = Vec::new();
    for (slot, key) in old.keys() {
        if !new.contains_key(&(*slot, key.clone())) {
            out.push((*slot, RowMutation { row: key.clone(), mutations: vec![CellMutation::DeleteRow] }));
        }
    }
    for ((slot, key), cells) in new {
        let before = old.get(&(*slot, key.clone())).map(Vec::as_slice).unwrap_or_default();
        let same = |a: &StoredCell, b: &StoredCell| a.family == b.family && a.qualifier == b.qualifier;
        let mut mutations: Vec<CellMutation> = cells
            .iter()
            .filter(|c| !before.iter().any(|b| same(b, c) && b.value == c.value))
            // Stamped when the write applies: aggregate writes are conditional (never replayed),
            // and a writer whose clock runs behind must not write values that sort below
            // those they replace.
            .map(|c| CellMutation::PutAtApply {
                family: c.family.clone(),
                qualifier: c.qualifier.clone(),
                value: c.value.clone(),
            })
            .collect();
        mutations.extend(
            before
                .iter()
                .filter(|b| !cells.iter().any(|c| same(b, c)))
                .map(|b| CellMutation::DeleteColumn { family: b.family.clone(), qualifier: b.qualifier.clone() }),
        );
        if !mutations.is_empty() {
            out.push((*slot, RowMutation { row: key.clone(), mutations }));
        }
    }
    out
}

impl<A: Aggregate> AggregateRepository<A> {
    fn key_error(source: KeyError) -> Error {
        Error::Key { entity: A::SCHEMA.entity, source }
    }

    /// The root's row key and the aggregate prefix of `key`.
    pub(super) fn locate(&self, key: &A::Key) -> Result<(Bytes, Bytes)> {
        let root = A::row_key(key).map_err(Self::key_error)?.for_write();
        let prefix = rows::prefix_of(&self.shape, &root);
        Ok((root, prefix))
    }

    /// The span of a call `op` of this repository.
    pub(super) fn call(&self, op: &'static str) -> crate::trace::RepoCall {
        crate::trace::repo_call(op, A::SCHEMA.entity, A::SCHEMA.table)
    }

    pub(super) fn table(&self, slot: usize) -> &str {
        &self.shape.levels[slot].table
    }

    /// The store, called on the spot: how the synchronous API runs the protocols.
    pub(super) fn inline(&self) -> Inline<'_> {
        Inline(&*self.store)
    }

    /// Every stored row of the aggregate at `prefix` (one scan; one get for a blob).
    async fn read_atomic(&self, store: &dyn AsyncStore, root: &Bytes, prefix: &Bytes) -> Result<RowSet> {
        let mut set = RowSet::new();
        if self.shape.strategy == Strategy::Blob {
            let row = store.read_rows(self.table(0), std::slice::from_ref(root), &ReadSpec::default()).await?;
            if let Some(Some(row)) = row.into_iter().next() {
                set.insert((0, row.key), row.cells);
            }
            return Ok(set);
        }
        let spec = ScanSpec { start: prefix.clone(), end: prefix_end(prefix).map(Bytes::from), ..ScanSpec::default() };
        scan_into(store, self.table(0), &spec, &mut set).await?;
        Ok(set)
    }

    /// The stored rows of the aggregate: consistent, whatever the protocol.
    pub(super) async fn read(&self, store: &dyn AsyncStore, root: &Bytes, prefix: &Bytes) -> Result<RowSet> {
        if self.atomic {
            let set = self.read_atomic(store, root, prefix).await?;
            if !holds_intent(&set, root) {
                return Ok(set);
            }
        }
        intent::read(self, store, root, prefix, &|_| true).await
    }

    /// The aggregate at `prefix` as a node tree.
    pub(super) async fn load(&self, store: &dyn AsyncStore, root: &Bytes, prefix: &Bytes) -> Result<Option<Node>> {
        rows::from_rows(&self.shape, prefix, &self.read(store, root, prefix).await?)
    }

    pub(super) fn decode(node: Node) -> Result<A> {
        let row = node.row.key.clone();
        A::from_node(node).map_err(|e| crate::repo::decode_error(A::SCHEMA.table, &row, e))
    }

    /// Read-modify-write of one aggregate: `change` gets what is stored and returns what
    /// should be (`None`: no aggregate). Retried while other writers win the race.
    pub(super) async fn modify(
        &self,
        store: &dyn AsyncStore,
        key: &A::Key,
        mut change: impl FnMut(Option<Node>) -> Result<Option<Node>> + Send,
    ) -> Result<()> {
        self.rewrite(store, key, false, |prefix, old| change(rows::from_rows(&self.shape, prefix, old)?)).await
    }

    /// Read-modify-write of one aggregate's rows: `change` gets the aggregate's prefix and
    /// stored rows and returns what should be. A change that does not look at what is stored
    /// (`whole`: a `put`, a `delete`) never decodes it, so stored rows that do not form an
    /// aggregate (a child whose parent row is missing, an intent that does not decode) can
    /// still be replaced or deleted: the difference is taken from the rows, whatever they hold.
    async fn rewrite(
        &self,
        store: &dyn AsyncStore,
        key: &A::Key,
        whole: bool,
        mut change: impl FnMut(&Bytes, &RowSet) -> Result<Option<Node>> + Send,
    ) -> Result<()> {
        let (root, prefix) = self.locate(key)?;
        for _ in 0..MAX_ATTEMPTS {
            // As stored (fences and tombstones included: the write is conditioned on them),
            // and as the aggregate they hold.
            let stored = match whole && !self.atomic {
                true => intent::read_to_replace(self, store, &root, &prefix).await?,
                false => self.read(store, &root, &prefix).await?,
            };
            // Borrowed unless there are fences or tombstones (never on the embedded engine).
            let old = rows::live(&stored);
            let mut next = change(&prefix, &old)?;
            if let Some(n) = &mut next {
                rows::sort_children(&self.shape, 0, n)?;
            }
            if let Some(n) = &next {
                if n.row.key != root {
                    return Err(Error::InvalidArgument {
                        arg: "aggregate",
                        reason: "a change may not move the aggregate to another key".into(),
                    });
                }
            }
            let mut new = match &next {
                Some(n) => rows::to_rows(&self.shape, n)?,
                None => RowSet::new(),
            };
            let root_row = (0, root.clone());
            let generation = stored.get(&root_row).and_then(|cells| generation_of(cells));
            // A root row with no cell but its generation is compared without any: whether it
            // exists is a change of its own (a bare aggregate created or deleted; a root row
            // missing under its children).
            // A generation that is not settled (an intent that does not decode, which only a
            // whole replacement reads past) is a change too.
            let settled =
                generation.as_ref().is_none_or(|g| g.len() == intent::TOKEN_LEN || rows::is_deleted_generation(g));
            let unchanged = settled
                && old.contains_key(&root_row) == new.contains_key(&root_row)
                && diff(&without_generation(&old, &root), &new).is_empty();
            if unchanged {
                // Nothing changes: no write, no new generation.
                return Ok(());
            }
            if let Some(cells) = new.get_mut(&(0, root.clone())) {
                cells.push(StoredCell {
                    family: Bytes::from_static(self.shape.family().as_bytes()),
                    qualifier: Bytes::from_static(GENERATION),
                    timestamp: 0,
                    value: new_generation(),
                });
            }
            // A blob write puts the blob again with the new generation even when only other
            // cells of its row change: under a TTL the two then expire together, never leaving
            // a generation without its blob.
            let old = match self.shape.strategy {
                Strategy::Blob => std::borrow::Cow::Owned(without_blob(old.into_owned(), &root)),
                _ => old,
            };
            let done = if self.atomic {
                self.write_atomic(store, &root, generation, &old, &new).await?
            } else {
                intent::write(self, store, &root, generation, &stored, &old, &new).await?
            };
            if done {
                return Ok(());
            }
        }
        Err(Error::Contended { entity: A::SCHEMA.entity, row: printable(&root), attempts: MAX_ATTEMPTS })
    }

    async fn write_atomic(
        &self,
        store: &dyn AsyncStore,
        root: &Bytes,
        generation: Option<Bytes>,
        old: &RowSet,
        new: &RowSet,
    ) -> Result<bool> {
        let condition = Condition::holds(self.shape.family().as_bytes(), GENERATION, generation);
        let mut rows: Vec<RowMutation> = diff(old, new).into_iter().map(|(_, m)| m).collect();
        if rows.len() == 1 && rows[0].row == *root {
            // Only the root row changes: a single-row check-and-mutate does.
            return store.check_and_mutate(self.table(0), condition, rows.remove(0)).await;
        }
        store.mutate_group(self.table(0), vec![RowCheck { row: root.clone(), condition }], rows).await
    }

    /// Writes an aggregate, replacing whatever was stored under its key: children that are
    /// no longer there are removed, unchanged rows are not rewritten. What is stored is not
    /// decoded, so a put also replaces rows that do not form a valid aggregate.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for two children with one key in a collection;
    /// [`Error::Contended`] if other writers keep winning; encoding and store errors.
    pub fn put(&self, aggregate: &A) -> Result<()> {
        self.call("put").run(|| drive(self.put_via(&self.inline(), aggregate)))
    }

    pub(super) async fn put_via(&self, store: &dyn AsyncStore, aggregate: &A) -> Result<()> {
        let node = aggregate.to_node()?;
        self.rewrite(store, &aggregate.key(), true, |_, _| Ok(Some(node.clone()))).await
    }

    /// Reads a whole aggregate; children come back in key order.
    ///
    /// # Errors
    /// [`Error::Decode`] for rows that do not form a valid `A`; store errors.
    pub fn get(&self, key: impl Into<A::Key>) -> Result<Option<A>> {
        self.call("get").run(|| drive(self.get_via(&self.inline(), key.into())))
    }

    pub(super) async fn get_via(&self, store: &dyn AsyncStore, key: A::Key) -> Result<Option<A>> {
        let (root, prefix) = self.locate(&key)?;
        let stored = self.read(store, &root, &prefix).await?;
        let node = rows::from_rows(&self.shape, &prefix, &stored)?;
        if let Some(node) = &node {
            self.write_back_blob(store, &root, &stored, node).await?;
        }
        node.map(Self::decode).transpose()
    }

    /// Makes [`AggregateRepository::get`] rewrite a versioned blob (a `blob` aggregate that
    /// derives `Versioned`) found at an older version or in another codec at the current one,
    /// with a check-and-mutate on the bytes read, so a write made meanwhile is kept.
    pub fn with_write_back(mut self) -> Self {
        self.write_back = true;
        self
    }

    /// With write-back on: rewrites the root's blob cell if it is not current.
    async fn write_back_blob(&self, store: &dyn AsyncStore, root: &Bytes, stored: &RowSet, node: &Node) -> Result<()> {
        let Some(codec) = self.shape.blob.filter(|_| self.write_back) else { return Ok(()) };
        let cells = stored.get(&(0, root.clone())).map(Vec::as_slice).unwrap_or_default();
        let Some(old) = cells.iter().find(|c| c.qualifier == rows::BLOB) else { return Ok(()) };
        if crate::blob::is_current(&old.value, &codec.format) {
            return Ok(());
        }
        let fresh = (codec.encode)(node).map_err(|reason| Error::InvalidArgument { arg: "aggregate", reason })?;
        let condition = Condition::Equals {
            family: old.family.clone(),
            qualifier: old.qualifier.clone(),
            value: old.value.clone(),
        };
        // At the timestamp of the blob it replaces: only the encoding changes, so a write of
        // the application that lands after this one stays the newest version (and the blob
        // still expires with its generation).
        let put = CellMutation::Put {
            family: old.family.clone(),
            qualifier: old.qualifier.clone(),
            value: fresh.into(),
            timestamp: Some(old.timestamp),
        };
        // False: a write came in since the read; it is at the current version already.
        store
            .check_and_mutate(self.table(0), condition, RowMutation { row: root.clone(), mutations: vec![put] })
            .await?;
        Ok(())
    }

    /// Reads the aggregate down to `depth` levels (1: the root alone, 2: with its
    /// collections, …); deeper collections come back empty. Under `single_table` only the rows
    /// of those levels are read, under `normalized` only their tables; `denormalized` and
    /// `blob` read everything and drop the rest.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for depth 0; as [`AggregateRepository::get`].
    pub fn get_to_depth(&self, key: impl Into<A::Key>, depth: usize) -> Result<Option<A>> {
        self.call("get_to_depth").run(|| drive(self.get_to_depth_via(&self.inline(), key.into(), depth)))
    }

    pub(super) async fn get_to_depth_via(
        &self,
        store: &dyn AsyncStore,
        key: A::Key,
        depth: usize,
    ) -> Result<Option<A>> {
        if depth == 0 {
            return Err(Error::InvalidArgument { arg: "depth", reason: "the root is depth 1".into() });
        }
        let (root, prefix) = self.locate(&key)?;
        let shallow = |l: &super::shape::Level| l.path.len() < depth;
        let mut node = match self.type_range(&shallow).filter(|_| self.atomic) {
            Some((lo, hi)) => {
                let start = Bytes::from([&prefix[..], &[lo]].concat());
                let end = match hi.checked_add(1) {
                    Some(next) => Some(Bytes::from([&prefix[..], &[next]].concat())),
                    None => prefix_end(&prefix).map(Bytes::from),
                };
                let mut set = RowSet::new();
                scan_into(store, self.table(0), &ScanSpec { start, end, ..ScanSpec::default() }, &mut set).await?;
                // The root's type is the lowest kept: its row is in `set`.
                if holds_intent(&set, &root) {
                    self.load(store, &root, &prefix).await?
                } else {
                    rows::from_rows(&self.shape, &prefix, &set)?
                }
            }
            None if self.shape.strategy == Strategy::Normalized => {
                let set = intent::read(self, store, &root, &prefix, &|slot| shallow(&self.shape.levels[slot])).await?;
                rows::from_rows(&self.shape, &prefix, &set)?
            }
            None => self.load(store, &root, &prefix).await?,
        };
        if let Some(n) = &mut node {
            prune(n, depth - 1);
        }
        node.map(Self::decode).transpose()
    }

    /// Under `single_table`: the record types of the levels `keep` selects, if they form a
    /// contiguous run no other level's type falls in.
    fn type_range(&self, keep: &dyn Fn(&super::shape::Level) -> bool) -> Option<(u8, u8)> {
        if self.shape.strategy != Strategy::SingleTable {
            return None;
        }
        let kept: Vec<u8> = self.shape.levels.iter().filter(|l| keep(l)).map(|l| l.record_type).collect();
        let (lo, hi) = (*kept.iter().min()?, *kept.iter().max()?);
        let others_inside = self.shape.levels.iter().any(|l| !keep(l) && (lo..=hi).contains(&l.record_type));
        (!others_inside).then_some((lo, hi))
    }

    /// Reads many aggregates. A blob store reads them in one round trip; the others read each
    /// aggregate as [`AggregateRepository::get`] does.
    ///
    /// # Errors
    /// As [`AggregateRepository::get`].
    pub fn get_many<K: Into<A::Key>>(&self, keys: impl IntoIterator<Item = K>) -> Result<Vec<Option<A>>> {
        let keys: Vec<A::Key> = keys.into_iter().map(Into::into).collect();
        self.call("get_many").keys(keys.len()).run(|| drive(self.get_many_via(&self.inline(), keys)))
    }

    pub(super) async fn get_many_via(&self, store: &dyn AsyncStore, keys: Vec<A::Key>) -> Result<Vec<Option<A>>> {
        let located = keys.iter().map(|k| self.locate(k)).collect::<Result<Vec<_>>>()?;
        if self.shape.strategy == Strategy::Blob && self.atomic {
            let roots: Vec<Bytes> = located.iter().map(|(r, _)| r.clone()).collect();
            let found = store.read_rows(self.table(0), &roots, &ReadSpec::default()).await?;
            return found
                .into_iter()
                .zip(&located)
                .map(|(row, (_, prefix))| {
                    let set: RowSet = row.into_iter().map(|r| ((0, r.key), r.cells)).collect();
                    rows::from_rows(&self.shape, prefix, &set)?.map(Self::decode).transpose()
                })
                .collect();
        }
        let mut out = Vec::with_capacity(located.len());
        for (root, prefix) in &located {
            out.push(self.load(store, root, prefix).await?.map(Self::decode).transpose()?);
        }
        Ok(out)
    }

    /// True if an aggregate with this key is stored (one read of its root row).
    ///
    /// # Errors
    /// Key encoding and store errors.
    pub fn exists(&self, key: impl Into<A::Key>) -> Result<bool> {
        self.call("exists").run(|| drive(self.exists_via(&self.inline(), key.into())))
    }

    pub(super) async fn exists_via(&self, store: &dyn AsyncStore, key: A::Key) -> Result<bool> {
        let (root, _) = self.locate(&key)?;
        let rows = store.read_rows(self.table(0), &[root], &ReadSpec::default()).await?;
        // A deleted aggregate's root may stay as a tombstone (see `intent`).
        Ok(rows.into_iter().flatten().next().is_some_and(|row| !rows::is_tombstone(&row.cells)))
    }

    /// Deletes an aggregate: every row of it, at once, whether or not they form a valid
    /// aggregate.
    ///
    /// # Errors
    /// [`Error::Contended`]; key encoding and store errors.
    pub fn delete(&self, key: impl Into<A::Key>) -> Result<()> {
        self.call("delete").run(|| drive(self.delete_via(&self.inline(), key.into())))
    }

    pub(super) async fn delete_via(&self, store: &dyn AsyncStore, key: A::Key) -> Result<()> {
        self.rewrite(store, &key, true, |_, _| Ok(None)).await
    }

    /// On a store several processes write (no [`Guarantees::single_process`]), sets how long
    /// a write through the intent protocol (the `normalized` strategy, or any strategy without
    /// atomic row groups) owns its intent before another process's readers finish it for the
    /// writer: the longest they wait for a crashed writer, and the longest a single store call
    /// may stall without risk. Default [`super::LEASE`]. On the embedded engine readers can
    /// tell a live writer from a gone one, and the lease plays no part. The protocol is
    /// described in the `docs/aggregates.md` guide.
    ///
    /// [`Guarantees::single_process`]: crate::store::Guarantees::single_process
    pub fn with_lease(mut self, lease: std::time::Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The physical layout: every table and row shape under the strategy.
    pub fn layout(&self) -> AggregateLayout {
        AggregateLayout { shape: (*self.shape).clone(), name: A::SCHEMA.entity }
    }
}

/// Reads the rows `spec` covers into `set` (table slot 0).
async fn scan_into(store: &dyn AsyncStore, table: &str, spec: &ScanSpec, set: &mut RowSet) -> Result<()> {
    let mut rows = store.scan_cursor(table, spec).await?;
    while rows.advance().await? {
        let Some(row) = rows.row() else { break };
        let row = row.to_row();
        set.insert((0, row.key), row.cells);
    }
    Ok(())
}

/// Empties the collections below `levels` more levels.
fn prune(node: &mut Node, levels: usize) {
    for collection in &mut node.children {
        if levels == 0 {
            collection.clear();
        } else {
            collection.iter_mut().for_each(|c| prune(c, levels - 1));
        }
    }
}
