//! Indexed writes on a store with atomic commits ([`Guarantees::atomic_commits`], the embedded
//! engine): the data row and its index rows change in one commit, so index rows are written
//! verified and no reader ever meets a mark of this write. A put is one store call, a read of
//! the data row and a commit made from it with the row held in between
//! ([`Store::read_and_commit`], which on the embedded engine reads under the region's write
//! lock, as an HBase coprocessor maintains an index under the row lock), where the general
//! protocol (`write`) needs a read and three conditional writes.
//!
//! The commit holds only if each new unique value's row is free (or, when only copied columns
//! change, still names this entity) and each old unique value's row still names this entity.
//! A batch (`batch`) reads its rows first and commits them later, so its commits also check
//! that each data row still has the write token that was read (as step 3 of the general
//! protocol does). When a condition fails — another writer changed the row, or a unique value
//! is taken, perhaps by a claim a crashed writer left — the write goes the general way, which
//! tells those cases apart and reclaims what can be reclaimed.
//!
//! [`Store::read_and_commit`]: crate::store::Store::read_and_commit
//! [`Guarantees::atomic_commits`]: crate::store::Guarantees::atomic_commits

use std::collections::HashSet;

use bytes::Bytes;

use super::entry::{self, Entry};
use super::write::{Change, IndexedWrite};
use crate::store::{CellMutation, Commit, Row, RowCheck, RowMutation};
use crate::writer;
use crate::Result;

/// How a write's commit stands to the read of the data row it is made from.
#[derive(Debug)]
pub(super) enum Staging<'k> {
    /// Alone, in [`crate::store::Store::read_and_commit`]: the store holds the row from the
    /// read to the commit, so nothing can change it meanwhile.
    Held,
    /// With other writes of a batch, read before and committed later: another writer may
    /// change the row in between. `keys` holds the index rows the commit already writes.
    Batch { keys: &'k mut HashSet<Bytes> },
}

/// The most a commit may carry, as [`IndexedWrite::commit_bytes`] estimates it: far below what
/// one engine write may carry, so a very large write takes the protocol instead of failing.
pub(super) const COMMIT_BYTES: usize = 16 << 20;

impl IndexedWrite<'_> {
    /// True if this write may go as a commit: the store has them, the change is a put or a
    /// delete (a rebuild may have to stamp its row first: it goes the general way), and it is
    /// not too large for one.
    pub(super) fn commits(&self) -> bool {
        self.store.guarantees().atomic_commits
            && matches!(self.change, Change::Put(_) | Change::Delete)
            && self.commit_bytes() <= COMMIT_BYTES
    }

    /// An upper bound on the bytes this write's commit carries: the data row's cells, and per
    /// index a row whose key and copies hold at most twice the data (the indexed values are in
    /// both), with room for keys, states and names.
    pub(super) fn commit_bytes(&self) -> usize {
        // The log carries the row key, names and a header with every cell.
        let per_cell = 64 + self.row.len();
        let data = match &self.change {
            Change::Put(mutations) => mutations
                .iter()
                .map(|m| match m {
                    CellMutation::Put { value, .. } | CellMutation::PutAtApply { value, .. } => per_cell + value.len(),
                    _ => per_cell,
                })
                .sum::<usize>(),
            Change::Delete | Change::Rebuild(_) => 0,
        } + per_cell;
        data.saturating_mul(1 + 2 * self.schema.indexes.len())
    }

    /// Runs the write as one commit (`new`: the entries the new values imply), made from the
    /// data row as the store reads it with nothing written to it meanwhile
    /// ([`Store::read_and_commit`]). `Some(changed)` if it is done — applied, or a delete of a
    /// missing row — and `None` if a condition failed.
    ///
    /// # Errors
    /// [`crate::Error::VersionConflict`] for a save whose version is not the stored one; store
    /// errors (nothing written).
    ///
    /// [`Store::read_and_commit`]: crate::store::Store::read_and_commit
    pub(super) async fn try_commit(&self, new: &[Option<Entry>]) -> Result<Option<bool>> {
        // What `build` found, for after the store call: it runs under the store's locks.
        let mut settled: Result<Option<bool>> = Ok(None);
        let mut changed = false;
        let spec = self.schema.read_spec();
        let mut build = |old: Option<&Row>| {
            settled = Ok(None);
            if let Err(e) = self.check_version(old) {
                settled = Err(e);
                return None;
            }
            if self.nothing_to_do(old) {
                settled = Ok(Some(false));
                return None;
            }
            // A put's next version follows from the row read, and the entries with it.
            let prepared = self.version_put(old).and_then(|version| {
                let renewed = version.as_ref().map(|v| self.new_entries(Some(v))).transpose()?;
                Ok((version, renewed))
            });
            let (version, renewed) = match prepared {
                Ok(prepared) => prepared,
                Err(e) => {
                    settled = Err(e);
                    return None;
                }
            };
            let mut commit = Commit::default();
            changed = self.stage(old, renewed.as_deref().unwrap_or(new), &mut commit, Staging::Held, version)?;
            Some(commit)
        };
        let applied = self.store.read_and_commit(self.schema.table, &self.row, &spec, &mut build).await?;
        match applied {
            Some(applied) => Ok(applied.then_some(changed)),
            None => settled,
        }
    }

    /// Adds this write's checks and rows to `commit`, from the data row as read (`old`), and
    /// returns whether it changes an index row. In a batch: `None` (and `commit` unchanged) if
    /// this write would write an index row another write of the commit writes, as its checks
    /// would not see the other write's change; and the commit checks that the data row still
    /// has the write token that was read.
    pub(super) fn stage(
        &self,
        old: Option<&Row>,
        new: &[Option<Entry>],
        commit: &mut Commit,
        staging: Staging<'_>,
        version: Option<CellMutation>,
    ) -> Option<bool> {
        let plan = self.plan(old, new);
        let (table, index_table) = (self.schema.table, self.index_table());
        if let Staging::Batch { keys } = staging {
            let mine: HashSet<&Bytes> = plan.additions.iter().chain(&plan.removals).map(|e| &e.key).collect();
            if mine.iter().any(|k| keys.contains(*k)) {
                return None;
            }
            keys.extend(mine.into_iter().cloned());
            commit.check(table, RowCheck { row: self.row.clone(), condition: self.token_condition(old) });
        }
        let unique = |e: &Entry| self.schema.indexes[e.index].unique;
        for a in plan.additions.iter().filter(|a| unique(a)) {
            let condition =
                if plan.same_key.contains(&a.key) { entry::primary_is(&a.primary) } else { entry::state_is(None) };
            commit.check(&index_table, RowCheck { row: a.key.clone(), condition });
        }
        for r in plan.removals.iter().filter(|r| unique(r)) {
            let condition = entry::primary_is(&r.primary);
            commit.check(&index_table, RowCheck { row: r.key.clone(), condition });
        }
        commit.row(table, self.data_mutation(writer::token(), version));
        for a in &plan.additions {
            let mutations = entry::write_entry(self.schema, a, entry::verified());
            commit.row(&index_table, RowMutation { row: a.key.clone(), mutations });
        }
        for r in &plan.removals {
            commit.row(&index_table, RowMutation { row: r.key.clone(), mutations: vec![CellMutation::DeleteRow] });
        }
        Some(!plan.additions.is_empty() || !plan.removals.is_empty())
    }
}
