//! Writes of indexed entities: the verified/unverified protocol.
//!
//! A write of one data row (put, save or delete)
//! 1. reads the data row and works out which index rows change: additions (entries the new
//!    values imply that are not stored as they are) and removals (entries of the old values
//!    the new ones no longer imply);
//! 2. writes the additions *unverified* by this write, claiming unique values first with a
//!    put-if-absent, and marks the removals unverified by this write;
//! 3. writes the data row with a check-and-mutate on its write token (a cell every indexed
//!    write replaces), so concurrent writers of one row take turns: the loser undoes its
//!    additions and starts over;
//! 4. marks the additions verified and deletes the removals, each with a check-and-mutate on
//!    the state this write left, so a later writer's marks are never overwritten.
//!
//! A crash between any two steps leaves only unverified rows, which readers check against the
//! data row (see `read`): an index read never returns an entity that does not hold the value,
//! and never misses one that does.
//!
//! A writer that only stalled — past its lease, on a shared store — is the same to readers as
//! one that crashed, and they settle its marks. They fence its data row first (see `fence`),
//! so its step 3 fails and it starts over from a fresh read: what they settled stays right.
//! For the fence to hold, a row that existed never becomes absent again: a delete leaves the
//! write token behind (a tombstone, which entity reads skip), and the data write stamps its
//! cells when it applies, so the visible token is always the last one written.

use bytes::Bytes;

use super::entry::{self, Entry, IndexRow, State};
use super::fence;
use crate::entity::{ColumnSpec, Schema};
use crate::repo::printable;
use crate::store::{AsyncStore, CellMutation, Condition, ReadSpec, Row, RowMutation};
use crate::writer::{self, now_ms, Owner};
use crate::{Error, Result};

/// How long another process's unverified marks stand before readers may settle them, on a
/// store several processes share.
pub(crate) const LEASE_MS: u64 = 5_000;
/// Attempts before a write gives up on a row other writers keep changing.
const ATTEMPTS: u32 = 64;

/// What a write does to its data row.
pub(crate) enum Change {
    /// Writes these cells (the entity's mutations, without the write token).
    Put(Vec<CellMutation>),
    /// Deletes the row.
    Delete,
    /// Changes no data: writes the entry of index `.0` the stored row implies (a backfill).
    Rebuild(usize),
}

/// What stands behind another entity's claim on a unique value.
enum Holder {
    /// The claim stands.
    Keeps,
    /// The claim may be taken back.
    Gone,
    /// The holder's data row changed while it was checked.
    Moved,
}

/// Whose row a slow claim took.
enum Claimed {
    /// A new row, or one held for another entity: this write may take it back.
    Other,
    /// A row already naming this entity: it stays, whatever becomes of this write.
    Own,
}

/// One indexed write of the data row `row` of `schema`'s table.
pub(crate) struct IndexedWrite<'a> {
    pub store: &'a dyn AsyncStore,
    pub schema: &'static Schema,
    pub row: Bytes,
    pub change: Change,
    /// What the write does with the entity's version column.
    pub version: Version,
}

/// What an indexed write does with the entity's `#[cellar(version)]` column.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Version {
    /// Nothing: the entity has none, or the change leaves it as it is.
    Untouched,
    /// `save`: the stored version must be `.0` (0: none stored); the change writes the next.
    Expect(u64, &'static ColumnSpec),
    /// `put`: the write stores the stored version + 1, whatever the change holds, read and
    /// written in the same step as the data row.
    Next(&'static ColumnSpec),
}

/// The index changes of one attempt.
pub(super) struct Plan {
    pub additions: Vec<Entry>,
    pub removals: Vec<Entry>,
    /// Additions whose key an old entry already had (only copied columns change): undoing
    /// them must not delete the row the old values still need.
    pub same_key: Vec<Bytes>,
}

impl IndexedWrite<'_> {
    pub(super) fn index_table(&self) -> String {
        super::index_table(self.schema.table)
    }

    /// The condition of the data write: the row still has the write token it had when read as
    /// `old` (a tombstone's included).
    pub(super) fn token_condition(&self, old: Option<&Row>) -> Condition {
        entry::token_condition(self.schema, old)
    }

    /// True if this write has nothing to do on the data row read as `old`: a delete or a
    /// rebuild of an entity that does not exist (no row, or a tombstone).
    pub(super) fn nothing_to_do(&self, old: Option<&Row>) -> bool {
        entry::live(self.schema, old).is_none() && matches!(self.change, Change::Delete | Change::Rebuild(_))
    }

    /// The entries the new values imply, with the version put `version` (see
    /// [`IndexedWrite::version_put`]) after the change's own cells.
    pub(super) fn new_entries(&self, version: Option<&CellMutation>) -> Result<Vec<Option<Entry>>> {
        let Change::Put(mutations) = &self.change else {
            // A delete implies no entries; a rebuild's come from the row it reads.
            return Ok(vec![None; self.schema.indexes.len()]);
        };
        let cell = |c: &ColumnSpec| {
            mutations.iter().chain(version).rev().find_map(|m| match m {
                CellMutation::Put { family, qualifier, value, .. }
                | CellMutation::PutAtApply { family, qualifier, value }
                    if family == c.family.as_bytes() && qualifier == c.qualifier.as_bytes() =>
                {
                    Some(Some(value.clone()))
                }
                CellMutation::DeleteColumn { family, qualifier }
                    if family == c.family.as_bytes() && qualifier == c.qualifier.as_bytes() =>
                {
                    Some(None)
                }
                CellMutation::DeleteFamily { family } if family == c.family.as_bytes() => Some(None),
                _ => None,
            })?
        };
        (0..self.schema.indexes.len())
            .map(|i| {
                entry::entry(self.schema, i, &self.row, &cell).map_err(|reason| Error::Encode {
                    entity: self.schema.entity,
                    field: self.schema.indexes[i].name,
                    reason,
                })
            })
            .collect()
    }

    pub(super) fn plan(&self, old: Option<&Row>, new: &[Option<Entry>]) -> Plan {
        let old: Vec<Option<Entry>> = match entry::live(self.schema, old) {
            Some(row) => entry::entries_of_row(self.schema, row),
            None => vec![None; new.len()],
        };
        let mut plan = Plan { additions: Vec::new(), removals: Vec::new(), same_key: Vec::new() };
        if let Change::Rebuild(position) = self.change {
            // The entry may be stored already: keep it if the write loses a race.
            let entry = old.into_iter().nth(position).flatten();
            plan.same_key.extend(entry.as_ref().map(|e| e.key.clone()));
            plan.additions.extend(entry);
            return plan;
        }
        for (old, new) in old.into_iter().zip(new) {
            if old.as_ref() == new.as_ref() {
                continue;
            }
            match (old, new) {
                (Some(o), Some(n)) if o.key == n.key => {
                    plan.same_key.push(n.key.clone());
                    plan.additions.push(n.clone());
                }
                (o, n) => {
                    plan.additions.extend(n.clone());
                    plan.removals.extend(o);
                }
            }
        }
        plan
    }

    /// Runs the write (see the module docs).
    ///
    /// # Errors
    /// [`Error::UniqueViolation`] (nothing written); [`Error::VersionConflict`] for a save
    /// whose version is not the stored one; [`Error::Contended`] after [`ATTEMPTS`] lost
    /// races; store errors (the write may be partly done: only unverified marks, which
    /// readers settle).
    /// Returns whether the write changed any index row.
    pub(crate) async fn run(self) -> Result<bool> {
        self.run_with(Vec::new()).await
    }

    /// [`IndexedWrite::run`], with marks an earlier try of this write left (`leftovers`: each
    /// entry with the mark it got), settled like those of lost attempts.
    pub(crate) async fn run_with(self, mut leftovers: Vec<(Entry, Bytes)>) -> Result<bool> {
        let mut new = self.new_entries(None)?;
        if leftovers.is_empty() && self.commits() {
            if let Some(changed) = self.try_commit(&new).await? {
                return Ok(changed);
            }
        }
        let owner = Owner::new();
        for _ in 0..ATTEMPTS {
            let old = self
                .store
                .read_rows(self.schema.table, std::slice::from_ref(&self.row), &self.schema.read_spec())
                .await?;
            let old = old.into_iter().flatten().next();
            self.check_version(old.as_ref())?;
            if self.nothing_to_do(old.as_ref()) {
                return Ok(false);
            }
            if let Some(row) = old.as_ref().filter(|r| self.needs_stamp(r)) {
                self.stamp(row).await?;
                continue;
            }
            let version = self.version_put(old.as_ref())?;
            if version.is_some() {
                new = self.new_entries(version.as_ref())?;
            }
            let token = writer::token();
            let mark = entry::unverified(token, owner.name(), now_ms() + LEASE_MS);
            let plan = self.plan(old.as_ref(), &new);
            self.prepare(&plan, &mark).await?;
            let data = self.data_mutation(token, version);
            if !self.store.check_and_mutate(self.schema.table, self.token_condition(old.as_ref()), data).await? {
                // Another writer changed the row since the read: start over from the row as it
                // is now. This attempt's marks are settled against the data the write that
                // wins leaves: deleting its additions now could delete an entry the other
                // writer's data needs (a non-unique addition overwrites the other writer's).
                leftovers.extend(plan.additions.iter().chain(&plan.removals).map(|e| (e.clone(), mark.clone())));
                continue;
            }
            let written = self.written(old.as_ref(), &new);
            self.settle(&plan, &mark, &leftovers, &written).await?;
            return Ok(!plan.additions.is_empty() || !plan.removals.is_empty());
        }
        Err(Error::Contended { entity: self.schema.entity, row: printable(&self.row), attempts: ATTEMPTS })
    }

    /// True for a rebuild of a row without a write token (written before the entity had
    /// indexes). Its data write could not be conditioned on the row still being there — a
    /// token-absent check holds for a deleted row too, and the write would bring the row back —
    /// so the row gets a token first ([`IndexedWrite::stamp`]).
    pub(super) fn needs_stamp(&self, old: &Row) -> bool {
        matches!(self.change, Change::Rebuild(_)) && entry::write_token(self.schema, old).is_none()
    }

    /// Gives a row without a write token one, changing nothing else, on condition that one of
    /// its cells still holds what was read (so a deleted row stays deleted).
    pub(super) async fn stamp(&self, old: &Row) -> Result<()> {
        let Some(cell) = old.cells.first() else { return Ok(()) };
        let still_there = Condition::Equals {
            family: cell.family.clone(),
            qualifier: cell.qualifier.clone(),
            value: cell.value.clone(),
        };
        let shared = !self.store.guarantees().single_process;
        let m =
            RowMutation { row: self.row.clone(), mutations: entry::put_token(self.schema, writer::token(), shared) };
        // Either way the next attempt reads the row again.
        self.store.check_and_mutate(self.schema.table, still_there, m).await?;
        Ok(())
    }

    /// The data row's mutation: the change and a new write token. A delete leaves the token
    /// (a tombstone, see [`entry::is_tombstone`]): a row that existed never reads as absent
    /// again, so a write planned against its absence, long ago, cannot commit over it.
    ///
    /// Cells without a timestamp are stamped when the write applies: the protocol reasons in
    /// the order writes apply, and a writer whose clock runs behind must not write values
    /// that sort below those it replaces. (The data write is a check-and-mutate, never
    /// replayed, so a server timestamp cannot write a version twice.)
    /// `version`: the put of the next version ([`IndexedWrite::version_put`]), after the
    /// change's own cells.
    pub(super) fn data_mutation(&self, token: u64, version: Option<CellMutation>) -> RowMutation {
        let mut mutations = Vec::with_capacity(match &self.change {
            Change::Put(m) => m.len() + 2,
            _ => 2,
        });
        // The next version replaces whatever the change writes in that column.
        let version = match version {
            Some(CellMutation::Put { family, qualifier, value, .. }) => Some((family, qualifier, value)),
            _ => None,
        };
        let replaced =
            |family: &Bytes, qualifier: &Bytes| version.as_ref().is_some_and(|(f, q, _)| f == family && q == qualifier);
        match &self.change {
            Change::Put(m) => mutations.extend(m.iter().filter_map(|m| match m {
                CellMutation::Put { family, qualifier, .. } | CellMutation::DeleteColumn { family, qualifier }
                    if replaced(family, qualifier) =>
                {
                    None
                }
                CellMutation::Put { family, qualifier, value, timestamp: None } => Some(CellMutation::PutAtApply {
                    family: family.clone(),
                    qualifier: qualifier.clone(),
                    value: value.clone(),
                }),
                other => Some(other.clone()),
            })),
            Change::Delete => mutations.push(CellMutation::DeleteRow),
            Change::Rebuild(_) => {}
        }
        if let (Change::Put(_), Some((family, qualifier, value))) = (&self.change, version) {
            mutations.push(CellMutation::PutAtApply { family, qualifier, value });
        }
        mutations.extend(entry::put_token(self.schema, token, !self.store.guarantees().single_process));
        RowMutation { row: self.row.clone(), mutations }
    }

    /// The entries of the data this write leaves (`old`: the row it replaced).
    pub(super) fn written(&self, old: Option<&Row>, new: &[Option<Entry>]) -> Vec<Option<Entry>> {
        match self.change {
            Change::Put(_) => new.to_vec(),
            Change::Delete => Vec::new(),
            Change::Rebuild(_) => old.map(|r| entry::entries_of_row(self.schema, r)).unwrap_or_default(),
        }
    }

    /// The version the data row read as `old` stores in `column` (0 without one, or for a
    /// tombstone).
    fn stored_version(&self, old: Option<&Row>, column: &ColumnSpec) -> Result<u64> {
        Ok(self.schema.stored_version(&self.row, entry::live(self.schema, old), column)?.0)
    }

    /// For [`Version::Next`]: the put of the version after the one stored in `old`.
    ///
    /// # Errors
    /// [`Error::Decode`] for a stored version that is not one; [`Error::InvalidArgument`] once
    /// the counter is exhausted.
    pub(super) fn version_put(&self, old: Option<&Row>) -> Result<Option<CellMutation>> {
        let Version::Next(column) = self.version else { return Ok(None) };
        crate::entity::next_version_put(column, self.stored_version(old, column)?).map(Some)
    }

    pub(super) fn check_version(&self, old: Option<&Row>) -> Result<()> {
        let Version::Expect(expected, column) = self.version else { return Ok(()) };
        let stored = self.stored_version(old, column)?;
        if stored != expected {
            return Err(Error::VersionConflict { entity: self.schema.entity, row: printable(&self.row), expected });
        }
        Ok(())
    }

    /// Step 2: claims unique values, writes the other additions and marks the removals, all
    /// unverified by `mark`: one batch of conditional writes (claims, marks of unique values)
    /// and one of plain ones. A claim that finds the value taken goes the slow way
    /// ([`IndexedWrite::claim`]); if it stays taken, the claims made are taken back.
    pub(super) async fn prepare(&self, plan: &Plan, mark: &Bytes) -> Result<()> {
        let table = self.index_table();
        let (claims, conditional) = self.conditional_marks(plan, mark);
        if !conditional.is_empty() {
            let applied = self.store.check_and_mutate_many(&table, conditional).await?;
            self.finish_claims(plan, mark, &claims, &applied).await?;
        }
        let rows = self.plain_marks(plan, mark);
        if !rows.is_empty() {
            self.store.mutate(&table, rows).await?;
        }
        Ok(())
    }

    /// The conditional writes of step 2: claims of unique values (put-if-absent), then marks
    /// of the old unique values; and the claims, in the same order.
    pub(super) fn conditional_marks<'p>(
        &self,
        plan: &'p Plan,
        mark: &Bytes,
    ) -> (Vec<&'p Entry>, Vec<(Condition, RowMutation)>) {
        let unique = |e: &&Entry| self.schema.indexes[e.index].unique;
        let claims: Vec<&Entry> = plan.additions.iter().filter(unique).collect();
        let mut conditional: Vec<(Condition, RowMutation)> = claims
            .iter()
            .map(|a| {
                let m = RowMutation { row: a.key.clone(), mutations: entry::write_entry(self.schema, a, mark.clone()) };
                (entry::state_is(None), m)
            })
            .collect();
        // A unique value is marked only while it still names this row: it may have been
        // reclaimed for another entity.
        conditional.extend(plan.removals.iter().filter(unique).map(|r| {
            let m = RowMutation { row: r.key.clone(), mutations: vec![entry::write_state(mark.clone())] };
            (entry::primary_is(&r.primary), m)
        }));
        (claims, conditional)
    }

    /// Claims the values whose put-if-absent failed (`applied`, one per claim first) the slow
    /// way; if one stays taken, takes back the claims made and fails.
    pub(super) async fn finish_claims(
        &self,
        plan: &Plan,
        mark: &Bytes,
        claims: &[&Entry],
        applied: &[bool],
    ) -> Result<()> {
        // Claims this write may take back: those it created, and those it took from another
        // entity. A row it took over from this same entity stays (marked): the entity's own
        // committed data may hold that value (another writer of the row got there first).
        let mut claimed: Vec<Entry> = Vec::new();
        for (addition, fresh) in claims.iter().zip(applied) {
            if !*fresh {
                match self.claim(addition, mark).await {
                    Ok(Claimed::Other) => claimed.push((*addition).clone()),
                    Ok(Claimed::Own) => {}
                    Err(e) => {
                        let made: Vec<Entry> =
                            claims.iter().zip(applied).filter(|(_, &a)| a).map(|(c, _)| (*c).clone()).collect();
                        self.release(&[made, claimed].concat(), &plan.same_key, mark).await?;
                        // The marks on the old values stay: the data row may have moved on since
                        // this write read it (another writer's marks were overwritten), so only a
                        // check against the data, by readers once this writer is gone, can settle
                        // them.
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }

    /// The plain writes of step 2: non-unique additions and marks of old non-unique values.
    pub(super) fn plain_marks(&self, plan: &Plan, mark: &Bytes) -> Vec<RowMutation> {
        let plain = |e: &&Entry| !self.schema.indexes[e.index].unique;
        let mut rows: Vec<RowMutation> = plan
            .additions
            .iter()
            .filter(plain)
            .map(|a| RowMutation { row: a.key.clone(), mutations: entry::write_entry(self.schema, a, mark.clone()) })
            .collect();
        rows.extend(
            plan.removals
                .iter()
                .filter(plain)
                .map(|r| RowMutation { row: r.key.clone(), mutations: entry::write_mark(&r.primary, mark.clone()) }),
        );
        rows
    }

    /// Claims a unique value another row's entry holds (or held): takes it over if its holder
    /// does not hold the value and cannot be about to (see `crate::writer`).
    async fn claim(&self, addition: &Entry, mark: &Bytes) -> Result<Claimed> {
        let table = self.index_table();
        let write = |condition: Condition| {
            let m = RowMutation {
                row: addition.key.clone(),
                mutations: entry::write_entry(self.schema, addition, mark.clone()),
            };
            self.store.check_and_mutate(&table, condition, m)
        };
        let read = ReadSpec::default();
        for _ in 0..ATTEMPTS {
            if write(entry::state_is(None)).await? {
                return Ok(Claimed::Other);
            }
            let rows = self.store.read_rows(&table, std::slice::from_ref(&addition.key), &read).await?;
            let Some(row) = rows.into_iter().flatten().next() else { continue };
            let raw_state = row.value(entry::FAMILY, "s").map(Bytes::copy_from_slice);
            let holder = entry::parse_row(&row);
            let reclaimable = match &holder {
                Some(h) if h.primary == addition.primary => true,
                Some(h) => match self.holder(addition, h).await? {
                    Holder::Keeps => false,
                    Holder::Gone => true,
                    // Its data row changed meanwhile: look again.
                    Holder::Moved => continue,
                },
                // Damaged: no entity can be found through it.
                None => true,
            };
            if !reclaimable {
                return Err(Error::UniqueViolation {
                    entity: self.schema.entity,
                    index: self.schema.indexes[addition.index].name,
                    value: entry::values_of(self.schema, addition),
                });
            }
            if write(entry::state_is(raw_state)).await? {
                let own = holder.is_some_and(|h| h.primary == addition.primary);
                return Ok(if own { Claimed::Own } else { Claimed::Other });
            }
        }
        Err(Error::Contended { entity: self.schema.entity, row: printable(&addition.key), attempts: ATTEMPTS })
    }

    /// Whether another row's claim `holder` on `addition`'s value stands: its writer may still
    /// be at work, or its data row holds the value. A claim whose writer is taken for gone is
    /// released only once its data row is fenced (see `fence`): a writer that only stalled
    /// must not commit the value after this write has taken it.
    async fn holder(&self, addition: &Entry, holder: &IndexRow) -> Result<Holder> {
        let unverified = match holder.state {
            State::Unverified { owner, deadline_ms } => {
                if !writer::gone(owner, deadline_ms, self.store.guarantees()) {
                    return Ok(Holder::Keeps);
                }
                true
            }
            State::Verified => false,
        };
        let read = self.schema.read_spec();
        let rows = self.store.read_rows(self.schema.table, std::slice::from_ref(&holder.primary), &read).await?;
        let data = rows.into_iter().flatten().next();
        let holds = data.as_ref().and_then(|row| entry::key_of_row(self.schema, row, addition.index));
        if holds.is_some_and(|k| k == addition.key) {
            return Ok(Holder::Keeps);
        }
        if unverified && !fence::fence_row(self.store, self.schema, &holder.primary, data.as_ref()).await? {
            return Ok(Holder::Moved);
        }
        Ok(Holder::Gone)
    }

    /// Takes back additions this write marked (all but those whose key the old values still
    /// need: they stay unverified, for readers to check against the data).
    async fn release(&self, additions: &[Entry], keep: &[Bytes], mark: &Bytes) -> Result<()> {
        let undo: Vec<(Condition, RowMutation)> = additions
            .iter()
            .filter(|a| !keep.contains(&a.key))
            .map(|a| {
                let m = RowMutation { row: a.key.clone(), mutations: vec![CellMutation::DeleteRow] };
                (entry::state_is(Some(mark.clone())), m)
            })
            .collect();
        if !undo.is_empty() {
            self.store.check_and_mutate_many(&self.index_table(), undo).await?;
        }
        Ok(())
    }

    /// Step 4: verifies the additions and deletes the removals this write marked; settles the
    /// marks of lost attempts against the data this write left (`written`: its entries).
    pub(super) async fn settle(
        &self,
        plan: &Plan,
        mark: &Bytes,
        leftovers: &[(Entry, Bytes)],
        written: &[Option<Entry>],
    ) -> Result<()> {
        let all = self.settlements(plan, mark, leftovers, written);
        if !all.is_empty() {
            self.store.check_and_mutate_many(&self.index_table(), all).await?;
        }
        Ok(())
    }

    /// The conditional writes of step 4 (see [`IndexedWrite::settle`]).
    pub(super) fn settlements(
        &self,
        plan: &Plan,
        mark: &Bytes,
        leftovers: &[(Entry, Bytes)],
        written: &[Option<Entry>],
    ) -> Vec<(Condition, RowMutation)> {
        let verify = plan.additions.iter().map(|a| {
            let m = RowMutation { row: a.key.clone(), mutations: vec![entry::write_state(entry::verified())] };
            (entry::state_is(Some(mark.clone())), m)
        });
        let delete = plan.removals.iter().map(|r| {
            let m = RowMutation { row: r.key.clone(), mutations: vec![CellMutation::DeleteRow] };
            (entry::state_is(Some(mark.clone())), m)
        });
        let planned = |key: &Bytes| plan.additions.iter().chain(&plan.removals).any(|e| e.key == *key);
        let earlier = leftovers.iter().filter(|(e, _)| !planned(&e.key)).map(|(e, old_mark)| {
            let mutations = match written.iter().flatten().find(|w| w.key == e.key) {
                Some(w) => entry::write_entry(self.schema, w, entry::verified()),
                None => vec![CellMutation::DeleteRow],
            };
            (entry::state_is(Some(old_mark.clone())), RowMutation { row: e.key.clone(), mutations })
        });
        verify.chain(delete).chain(earlier).collect()
    }
}
