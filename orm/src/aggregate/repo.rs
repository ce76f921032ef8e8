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
use super::shape::{key_len, Shape};
use super::{intent, Aggregate, AggregateLayout, Node, Strategy};
use crate::entity::KeyPrefix;
use crate::key::{prefix_end, KeyError, Modifier};
use crate::repo::{printable, Cursor, EntityIter, Page, Query};
use crate::store::{
    CellMutation, Condition, FamilySpec, PrefixField, ReadSpec, Row, RowCheck, RowMutation, ScanSpec, SplitPolicy,
    Store, StoredCell, TableSpec,
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
fn holds_intent(set: &RowSet, root: &Bytes) -> bool {
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

    pub(super) fn table(&self, slot: usize) -> &str {
        &self.shape.levels[slot].table
    }

    /// Every stored row of the aggregate at `prefix` (one scan; one get for a blob).
    fn read_atomic(&self, root: &Bytes, prefix: &Bytes) -> Result<RowSet> {
        let mut set = RowSet::new();
        if self.shape.strategy == Strategy::Blob {
            let row = self.store.read_rows(self.table(0), std::slice::from_ref(root), &ReadSpec::default())?;
            if let Some(Some(row)) = row.into_iter().next() {
                set.insert((0, row.key), row.cells);
            }
            return Ok(set);
        }
        let spec = ScanSpec { start: prefix.clone(), end: prefix_end(prefix).map(Bytes::from), ..ScanSpec::default() };
        for row in self.store.scan(self.table(0), &spec)? {
            let row = row?;
            set.insert((0, row.key), row.cells);
        }
        Ok(set)
    }

    /// The stored rows of the aggregate: consistent, whatever the protocol.
    pub(super) fn read(&self, root: &Bytes, prefix: &Bytes) -> Result<RowSet> {
        if self.atomic {
            let set = self.read_atomic(root, prefix)?;
            if !holds_intent(&set, root) {
                return Ok(set);
            }
        }
        intent::read(self, root, prefix, &|_| true)
    }

    /// The aggregate at `prefix` as a node tree.
    pub(super) fn load(&self, root: &Bytes, prefix: &Bytes) -> Result<Option<Node>> {
        rows::from_rows(&self.shape, prefix, &self.read(root, prefix)?)
    }

    fn decode(node: Node) -> Result<A> {
        let row = node.row.key.clone();
        A::from_node(node).map_err(|e| crate::repo::decode_error(A::SCHEMA.table, &row, e))
    }

    /// Read-modify-write of one aggregate: `change` gets what is stored and returns what
    /// should be (`None`: no aggregate). Retried while other writers win the race.
    pub(super) fn modify(
        &self,
        key: &A::Key,
        mut change: impl FnMut(Option<Node>) -> Result<Option<Node>>,
    ) -> Result<()> {
        self.rewrite(key, false, |prefix, old| change(rows::from_rows(&self.shape, prefix, old)?))
    }

    /// Read-modify-write of one aggregate's rows: `change` gets the aggregate's prefix and
    /// stored rows and returns what should be. A change that does not look at what is stored
    /// (`whole`: a `put`, a `delete`) never decodes it, so stored rows that do not form an
    /// aggregate (a child whose parent row is missing, an intent that does not decode) can
    /// still be replaced or deleted: the difference is taken from the rows, whatever they hold.
    fn rewrite(
        &self,
        key: &A::Key,
        whole: bool,
        mut change: impl FnMut(&Bytes, &RowSet) -> Result<Option<Node>>,
    ) -> Result<()> {
        let (root, prefix) = self.locate(key)?;
        for _ in 0..MAX_ATTEMPTS {
            // As stored (fences and tombstones included: the write is conditioned on them),
            // and as the aggregate they hold.
            let stored = match whole && !self.atomic {
                true => intent::read_to_replace(self, &root, &prefix)?,
                false => self.read(&root, &prefix)?,
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
                self.write_atomic(&root, generation, &old, &new)?
            } else {
                intent::write(self, &root, generation, &stored, &old, &new)?
            };
            if done {
                return Ok(());
            }
        }
        Err(Error::Contended { entity: A::SCHEMA.entity, row: printable(&root), attempts: MAX_ATTEMPTS })
    }

    fn write_atomic(&self, root: &Bytes, generation: Option<Bytes>, old: &RowSet, new: &RowSet) -> Result<bool> {
        let condition = Condition::holds(self.shape.family().as_bytes(), GENERATION, generation);
        let mut rows: Vec<RowMutation> = diff(old, new).into_iter().map(|(_, m)| m).collect();
        if rows.len() == 1 && rows[0].row == *root {
            // Only the root row changes: a single-row check-and-mutate does.
            return self.store.check_and_mutate(self.table(0), condition, rows.remove(0));
        }
        self.store.mutate_group(self.table(0), vec![RowCheck { row: root.clone(), condition }], rows)
    }

    /// Writes an aggregate, replacing whatever was stored under its key: children that are
    /// no longer there are removed, unchanged rows are not rewritten. What is stored is not
    /// decoded, so a put also replaces rows that do not form a valid aggregate.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for two children with one key in a collection;
    /// [`Error::Contended`] if other writers keep winning; encoding and store errors.
    pub fn put(&self, aggregate: &A) -> Result<()> {
        let node = aggregate.to_node()?;
        self.rewrite(&aggregate.key(), true, |_, _| Ok(Some(node.clone())))
    }

    /// Reads a whole aggregate; children come back in key order.
    ///
    /// # Errors
    /// [`Error::Decode`] for rows that do not form a valid `A`; store errors.
    pub fn get(&self, key: impl Into<A::Key>) -> Result<Option<A>> {
        let (root, prefix) = self.locate(&key.into())?;
        let stored = self.read(&root, &prefix)?;
        let node = rows::from_rows(&self.shape, &prefix, &stored)?;
        if let Some(node) = &node {
            self.write_back_blob(&root, &stored, node)?;
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
    fn write_back_blob(&self, root: &Bytes, stored: &RowSet, node: &Node) -> Result<()> {
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
        self.store.check_and_mutate(
            self.table(0),
            condition,
            RowMutation { row: root.clone(), mutations: vec![put] },
        )?;
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
        if depth == 0 {
            return Err(Error::InvalidArgument { arg: "depth", reason: "the root is depth 1".into() });
        }
        let (root, prefix) = self.locate(&key.into())?;
        let shallow = |l: &super::shape::Level| l.path.len() < depth;
        let mut node = match self.type_range(&shallow).filter(|_| self.atomic) {
            Some((lo, hi)) => {
                let start = Bytes::from([&prefix[..], &[lo]].concat());
                let end = match hi.checked_add(1) {
                    Some(next) => Some(Bytes::from([&prefix[..], &[next]].concat())),
                    None => prefix_end(&prefix).map(Bytes::from),
                };
                let mut set = RowSet::new();
                for row in self.store.scan(self.table(0), &ScanSpec { start, end, ..ScanSpec::default() })? {
                    let row = row?;
                    set.insert((0, row.key), row.cells);
                }
                // The root's type is the lowest kept: its row is in `set`.
                if holds_intent(&set, &root) {
                    self.load(&root, &prefix)?
                } else {
                    rows::from_rows(&self.shape, &prefix, &set)?
                }
            }
            None if self.shape.strategy == Strategy::Normalized => {
                let set = intent::read(self, &root, &prefix, &|slot| shallow(&self.shape.levels[slot]))?;
                rows::from_rows(&self.shape, &prefix, &set)?
            }
            None => self.load(&root, &prefix)?,
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
        let located = keys.into_iter().map(|k| self.locate(&k.into())).collect::<Result<Vec<_>>>()?;
        if self.shape.strategy == Strategy::Blob && self.atomic {
            let roots: Vec<Bytes> = located.iter().map(|(r, _)| r.clone()).collect();
            let found = self.store.read_rows(self.table(0), &roots, &ReadSpec::default())?;
            return found
                .into_iter()
                .zip(&located)
                .map(|(row, (_, prefix))| {
                    let set: RowSet = row.into_iter().map(|r| ((0, r.key), r.cells)).collect();
                    rows::from_rows(&self.shape, prefix, &set)?.map(Self::decode).transpose()
                })
                .collect();
        }
        located.iter().map(|(root, prefix)| self.load(root, prefix)?.map(Self::decode).transpose()).collect()
    }

    /// True if an aggregate with this key is stored (one read of its root row).
    ///
    /// # Errors
    /// Key encoding and store errors.
    pub fn exists(&self, key: impl Into<A::Key>) -> Result<bool> {
        let (root, _) = self.locate(&key.into())?;
        let rows = self.store.read_rows(self.table(0), &[root], &ReadSpec::default())?;
        // A deleted aggregate's root may stay as a tombstone (see `intent`).
        Ok(rows.into_iter().flatten().next().is_some_and(|row| !rows::is_tombstone(&row.cells)))
    }

    /// Deletes an aggregate: every row of it, at once, whether or not they form a valid
    /// aggregate.
    ///
    /// # Errors
    /// [`Error::Contended`]; key encoding and store errors.
    pub fn delete(&self, key: impl Into<A::Key>) -> Result<()> {
        self.rewrite(&key.into(), true, |_, _| Ok(None))
    }

    /// A scan over aggregates in root-key order, each read whole.
    pub fn scan(&self) -> AggregateQuery<'_, A> {
        let one_row_each = !self.shape.strategy.typed_rows();
        // Rows that are not aggregates may lie in range (child rows, tombstones on shared
        // stores): the store cannot apply the limit then.
        let mixed = !one_row_each || !self.store.guarantees().single_process;
        AggregateQuery { repo: self, rows: Query::<()>::rows(&*self.store, &A::SCHEMA, mixed), limit: None }
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

/// A scan of aggregates being set up; see [`AggregateRepository::scan`].
pub struct AggregateQuery<'a, A> {
    repo: &'a AggregateRepository<A>,
    rows: Query<'a, ()>,
    limit: Option<usize>,
}

impl<'a, A: Aggregate> AggregateQuery<'a, A> {
    /// Only aggregates whose root key starts with `prefix` (`<Root>Key::<first part>(..)`).
    pub fn prefix(mut self, prefix: impl KeyPrefix<A>) -> Self {
        // A full key names one aggregate: its prefix without the record type covers its rows.
        let encoded = prefix.encode_prefix().map(|k| k.without_record_type(&A::SCHEMA));
        self.rows = self.rows.with_prefix(encoded);
        self
    }

    /// Only aggregates with `from <= root key < to`; either end may be left open with `..`.
    pub fn range(mut self, range: impl std::ops::RangeBounds<A::Key>) -> Self {
        use std::ops::Bound;
        // Bounds fall on whole aggregates: from the start of one aggregate's rows, or from past
        // the last of them.
        let group = |k: &A::Key| A::row_key(k).map(|k| k.without_record_type(&A::SCHEMA));
        let mut empty = false;
        let from = match range.start_bound() {
            Bound::Included(k) => Some(group(k)),
            Bound::Excluded(k) => Some(group(k).map(|g| match g.group_end() {
                Some(end) => end,
                // Nothing follows a key of 0xFF bytes.
                None => {
                    empty = true;
                    g
                }
            })),
            Bound::Unbounded => None,
        };
        let to = match range.end_bound() {
            _ if empty => from.clone(),
            Bound::Excluded(k) => Some(group(k)),
            Bound::Included(k) => group(k).map(|g| g.group_end()).transpose(),
            Bound::Unbounded => None,
        };
        self.rows = self.rows.with_bounds(from, to);
        self
    }

    /// Largest root key first.
    pub fn reverse(mut self) -> Self {
        self.rows = self.rows.reverse();
        self
    }

    /// Sets aggregates that do not decode aside instead of ending the scan with their error;
    /// [`AggregateIter::skipped`] reports them.
    pub fn skip_unreadable(mut self) -> Self {
        self.rows = self.rows.skip_unreadable();
        self
    }

    /// At most `n` aggregates.
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    /// Continues after the page that returned `cursor`.
    pub fn after(mut self, cursor: &Cursor) -> Self {
        self.rows = self.rows.after(cursor);
        self
    }

    /// Streams the aggregates.
    ///
    /// # Errors
    /// As [`Query::iter`]; decoding errors come from the iterator.
    pub fn iter(self) -> Result<AggregateIter<'a, A>> {
        let one_row_each = !self.repo.shape.strategy.typed_rows();
        let mut rows = self.rows;
        if let (true, Some(n)) = (one_row_each, self.limit) {
            rows = rows.limit(n);
        }
        let reverse = rows.is_reverse();
        debug_assert!(rows.limit_set().is_none() || one_row_each);
        Ok(AggregateIter {
            repo: self.repo,
            rows: rows.iter()?,
            pending: None,
            left: self.limit.unwrap_or(usize::MAX),
            reverse,
        })
    }

    /// Collects the aggregates.
    ///
    /// # Errors
    /// As [`AggregateQuery::iter`].
    pub fn to_vec(self) -> Result<Vec<A>> {
        self.iter()?.collect()
    }

    /// One page of at most `size` aggregates and the cursor of the next.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero size; as [`AggregateQuery::iter`].
    pub fn page(self, size: usize) -> Result<Page<A>> {
        if size == 0 {
            return Err(Error::InvalidArgument { arg: "size", reason: "a page holds at least one aggregate".into() });
        }
        let mut iter = self.limit(size.saturating_add(1)).iter()?;
        let mut items = Vec::new();
        let mut last = None;
        while items.len() < size {
            match iter.next_with_prefix() {
                Some(Ok((prefix, a))) => {
                    last = Some(prefix);
                    items.push(a);
                }
                Some(Err(e)) => return Err(e),
                None => return Ok(Page { items, next: None }),
            }
        }
        let more = iter.next_with_prefix().transpose()?.is_some();
        let reverse = iter.reverse;
        Ok(Page { items, next: last.filter(|_| more).map(|after| Cursor { reverse, after, group: true }) })
    }
}

/// Aggregates streamed from a scan.
pub struct AggregateIter<'a, A> {
    repo: &'a AggregateRepository<A>,
    rows: EntityIter<'a, ()>,
    /// The first row of the next aggregate, read while finishing the previous one.
    pending: Option<Row>,
    left: usize,
    reverse: bool,
}

impl<A: Aggregate> AggregateIter<'_, A> {
    fn next_row(&mut self) -> Option<Result<Row>> {
        self.pending.take().map(Ok).or_else(|| self.rows.next_row())
    }

    /// Length of the aggregate prefix at the front of a row key (salt included).
    fn prefix_len(&self, key: &[u8]) -> Result<usize> {
        let salt = usize::from(A::SCHEMA.salt.is_some());
        let body = key.get(salt..).unwrap_or_default();
        key_len(&A::SCHEMA, body)
            .map(|n| n + salt)
            .map_err(|e| crate::repo::decode_error(A::SCHEMA.table, key, crate::entity::FieldError::from(e)))
    }

    /// The next aggregate and its prefix without salt (for cursors).
    fn next_with_prefix(&mut self) -> Option<Result<(Vec<u8>, A)>> {
        if self.left == 0 {
            return None;
        }
        let first = match self.next_row()? {
            Ok(row) => row,
            Err(e) => return Some(Err(e)),
        };
        let first_key = first.key.clone();
        let result = (|| {
            let prefix = Bytes::copy_from_slice(&first.key[..self.prefix_len(&first.key)?]);
            let shape = &self.repo.shape;
            let node = if shape.strategy == Strategy::Normalized {
                // The root table's rows are the aggregates; the rest is read per aggregate.
                self.repo.load(&first.key, &prefix)?
            } else {
                let mut set = RowSet::new();
                set.insert((0, first.key.clone()), first.cells.clone());
                while shape.strategy.typed_rows() {
                    match self.rows.next_row() {
                        Some(Ok(row)) if row.key.starts_with(&prefix) => {
                            set.insert((0, row.key), row.cells);
                        }
                        Some(Ok(row)) => {
                            self.pending = Some(row);
                            break;
                        }
                        Some(Err(e)) => return Err(e),
                        None => break,
                    }
                }
                let (root, _) = self.root_of(&prefix);
                if !self.repo.atomic || holds_intent(&set, &root) {
                    // Rows read by a plain scan may be mid-write; read this one consistently.
                    rows::from_rows(shape, &prefix, &self.repo.read(&root, &prefix)?)?
                } else {
                    rows::from_rows(shape, &prefix, &set)?
                }
            };
            let body = self.rows.body(&prefix).to_vec();
            Ok(node.map(|n| (body, n)))
        })();
        let decoded = match result {
            Ok(Some((body, node))) => AggregateRepository::<A>::decode(node).map(|a| Some((body, a))),
            // Rows of an aggregate deleted between reads: go on with the next.
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        };
        match decoded {
            Ok(Some(found)) => {
                self.left -= 1;
                Some(Ok(found))
            }
            Ok(None) => self.next_with_prefix(),
            Err(e) => match self.rows.set_aside(&first_key, e) {
                Some(e) => Some(Err(e)),
                None => self.next_with_prefix(),
            },
        }
    }

    /// The aggregates set aside so far, with [`AggregateQuery::skip_unreadable`].
    pub fn skipped(&self) -> &[crate::repo::Skipped] {
        self.rows.skipped()
    }

    fn root_of(&self, prefix: &Bytes) -> (Bytes, Bytes) {
        let root = match self.repo.shape.strategy {
            Strategy::SingleTable | Strategy::Denormalized => {
                Bytes::from([&prefix[..], &[self.repo.shape.levels[0].record_type]].concat())
            }
            _ => prefix.clone(),
        };
        (root, prefix.clone())
    }
}

impl<A: Aggregate> Iterator for AggregateIter<'_, A> {
    type Item = Result<A>;

    fn next(&mut self) -> Option<Result<A>> {
        self.next_with_prefix().map(|r| r.map(|(_, a)| a))
    }
}
