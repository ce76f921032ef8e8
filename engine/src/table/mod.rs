//! Tables: the [`Table`] handle through which callers read and write rows. Writes are here;
//! `conditional` holds the read-modify-writes and conditional writes, `read` the reads.
//!
//! Every write to one row is applied atomically: the row's region write lock is held while the
//! edits are logged, inserted into memstores and published at once under one MVCC sequence
//! range. Read-modify-writes (increment, append, check-and-mutate, latest-version deletes) read
//! under the same lock.

mod conditional;
mod read;

use std::sync::Arc;

use bytes::Bytes;

use crate::background::Lifeline;
use crate::cell::{check_row, check_value, to_printable, Cell, CellType, LATEST_TIMESTAMP};
use crate::descriptor::{Durability, TableDescriptor};
use crate::mutation::{Edit, Mutation, Put, RowMutations};
use crate::query::{Get, RowResult};
use crate::region::Region;
use crate::tables::TableState;
use crate::wal::WalEdit;
use crate::write_path::{Framing, RegionEdits, WritePath};
use crate::{Delete, Error, Result};

/// A handle to one table. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Table {
    // Declared first so it drops first: the workers stop before the engine can close.
    _life: Arc<Lifeline>,
    writes: Arc<WritePath>,
    state: Arc<TableState>,
    name: Arc<str>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("name", &self.name).finish()
    }
}

impl Table {
    pub(crate) fn new(life: Arc<Lifeline>, writes: Arc<WritePath>, state: Arc<TableState>) -> Table {
        let name = state.descriptor().name.into();
        Table { _life: life, writes, state, name }
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True if both handles are of one table.
    pub(crate) fn same_table(&self, other: &Table) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }

    /// True if this handle is one of the tables of the engine whose write path is `writes`.
    pub(crate) fn belongs_to(&self, writes: &Arc<WritePath>) -> bool {
        Arc::ptr_eq(&self.writes, writes)
    }

    /// The table's current descriptor.
    pub fn descriptor(&self) -> TableDescriptor {
        self.state.descriptor()
    }

    pub(crate) fn check_usable(&self) -> Result<Arc<TableDescriptor>> {
        if self.state.is_dropped() {
            return Err(Error::TableNotFound(self.name.to_string()));
        }
        if !self.state.is_enabled() {
            return Err(Error::TableDisabled(self.name.to_string()));
        }
        Ok(self.state.shared_descriptor())
    }

    pub(crate) fn check_family(&self, desc: &TableDescriptor, family: &[u8]) -> Result<()> {
        if desc.get_family(family).is_none() {
            return Err(Error::FamilyNotFound { table: self.name.to_string(), family: to_printable(family) });
        }
        Ok(())
    }

    pub(crate) fn region(&self, row: &[u8]) -> Result<Arc<Region>> {
        self.state.region_for(row).ok_or_else(|| Error::TableNotFound(self.name.to_string()))
    }

    /// Checks a mutation against the schema before anything is written.
    fn validate(&self, desc: &TableDescriptor, m: &Mutation) -> Result<()> {
        check_row(m.row())?;
        let edits = match m {
            Mutation::Put(p) => {
                if p.edits.is_empty() {
                    return Err(Error::invalid("put", "a put needs at least one column"));
                }
                &p.edits
            }
            Mutation::Delete(d) => &d.edits,
        };
        for e in edits {
            self.check_family(desc, &e.family)?;
            check_value(&e.value)?;
        }
        Ok(())
    }

    /// Turns a mutation into logged edits: resolves "now" and latest-version deletes. Runs
    /// under the region's write lock.
    pub(crate) fn resolve<'m>(
        &self,
        region: &Region,
        desc: &'m TableDescriptor,
        m: &'m Mutation,
        offset: u32,
        now: u64,
        out: &mut Vec<WalEdit<'m>>,
    ) -> Result<()> {
        let at = |ts: u64| if ts == LATEST_TIMESTAMP { now } else { ts };
        let edit = |row: &'m [u8], e: &'m Edit, ts: u64, ttl: Option<u64>| WalEdit {
            seq_offset: offset,
            family: &e.family,
            row,
            qualifier: &e.qualifier,
            ts,
            kind: e.kind,
            ttl_ms: ttl,
            value: &e.value,
        };
        match m {
            Mutation::Put(p) => {
                for e in &p.edits {
                    out.push(edit(&p.row, e, at(e.ts), p.ttl_ms));
                }
            }
            Mutation::Delete(d) if d.edits.is_empty() => {
                for f in &desc.families {
                    out.push(WalEdit {
                        seq_offset: offset,
                        family: f.name.as_bytes(),
                        row: &d.row,
                        qualifier: &[],
                        ts: at(d.ts),
                        kind: CellType::DeleteFamily,
                        ttl_ms: None,
                        value: &[],
                    });
                }
            }
            Mutation::Delete(d) => {
                for e in &d.edits {
                    if e.kind == CellType::Delete && e.ts == LATEST_TIMESTAMP {
                        // HBase semantics: deleting "the latest version" marks the newest
                        // visible version's timestamp; with no visible version it is a no-op.
                        let latest = self.read_row_locked(region, &d.row, &e.family, &e.qualifier, now)?;
                        if let Some(c) = latest {
                            out.push(edit(&d.row, e, c.timestamp, None));
                        }
                    } else {
                        out.push(edit(&d.row, e, at(e.ts), None));
                    }
                }
            }
        }
        Ok(())
    }

    /// The latest visible cell of one column, read while holding the region's write lock.
    pub(crate) fn read_row_locked(
        &self,
        region: &Region,
        row: &Bytes,
        family: &Bytes,
        qualifier: &Bytes,
        now: u64,
    ) -> Result<Option<Cell>> {
        let get = Get::new(row.clone()).column(family.clone(), qualifier.clone());
        let r = self.get_locked_as::<RowResult>(region, &get, now)?;
        Ok(r.and_then(|r| r.cells.into_iter().next()))
    }

    /// Runs `f` on the region holding `row` with its write lock held, re-routing when a split
    /// retired the region while we waited for the lock.
    fn locked<T>(&self, row: &[u8], mut f: impl FnMut(&Region) -> Result<T>) -> Result<(Arc<Region>, T)> {
        loop {
            let region = self.region(row)?;
            self.writes.throttle(&self.name, &region)?;
            let out = {
                let _w = region.write_lock.lock();
                if region.is_retired() {
                    continue;
                }
                f(&region)?
            };
            return Ok((region, out));
        }
    }

    /// Resolves, logs and applies groups of mutations (each atomic) while holding `region`'s
    /// write lock. Returns the last sequence number used.
    fn write_locked(
        &self,
        region: &Region,
        desc: &TableDescriptor,
        groups: &[&[Mutation]],
        durability: Durability,
    ) -> Result<u64> {
        let now = self.writes.now_ms();
        let mut edits = Vec::with_capacity(groups.iter().flat_map(|g| g.iter()).map(Mutation::edit_count).sum());
        let mut offset = 0u32;
        for group in groups {
            for m in *group {
                self.resolve(region, desc, m, offset, now, &mut edits)?;
                offset += 1;
            }
        }
        self.commit(region, &mut edits, offset, durability)
    }

    /// Writes groups of mutations that all target `row`'s region.
    fn write_row(
        &self,
        row: &[u8],
        desc: &TableDescriptor,
        groups: &[&[Mutation]],
        durability: Durability,
    ) -> Result<()> {
        let (region, last_seq) = self.locked(row, |region| self.write_locked(region, desc, groups, durability))?;
        self.settle(&region, groups.iter().map(|g| g.len() as u64).sum(), last_seq, durability)
    }

    /// Logs and applies resolved edits as one record of `region`; caller holds the region's
    /// write lock. Returns the last sequence number used.
    fn commit(&self, region: &Region, edits: &mut [WalEdit<'_>], count: u32, durability: Durability) -> Result<u64> {
        let mut writes = [RegionEdits { region, edits }];
        self.writes.commit(&mut writes, count, durability, Framing::OneRegion)
    }

    /// After a write of `mutations` to `region`, its locks released: see [`WritePath::settle`].
    fn settle(&self, region: &Region, mutations: u64, last_seq: u64, durability: Durability) -> Result<()> {
        self.writes.settle(last_seq, durability, &[(&self.name, region, mutations)])
    }

    fn durability(&self, desc: &TableDescriptor, requested: Option<Durability>) -> Durability {
        requested.unwrap_or(desc.durability)
    }

    /// Writes a put.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad row key or an empty put,
    /// [`Error::FamilyNotFound`], [`Error::TableDisabled`], I/O errors from the log.
    pub fn put(&self, put: Put) -> Result<()> {
        self.mutate(Mutation::Put(put))
    }

    /// Places delete markers.
    ///
    /// # Errors
    /// As for [`Table::put`].
    pub fn delete(&self, delete: Delete) -> Result<()> {
        self.mutate(Mutation::Delete(delete))
    }

    fn mutate(&self, m: Mutation) -> Result<()> {
        let desc = self.check_usable()?;
        self.validate(&desc, &m)?;
        let d = self.durability(&desc, m.durability());
        self.write_row(m.row(), &desc, &[std::slice::from_ref(&m)], d)
    }

    /// Applies several mutations of one row atomically, in order.
    ///
    /// # Errors
    /// As for [`Table::put`]; also [`Error::InvalidArgument`] if a mutation names another row.
    pub fn mutate_row(&self, rm: RowMutations) -> Result<()> {
        let desc = self.check_usable()?;
        self.validate_row_mutations(&desc, &rm)?;
        let d = self.durability(&desc, rm.mutations.iter().find_map(Mutation::durability));
        self.write_row(&rm.row, &desc, &[&rm.mutations], d)
    }

    pub(crate) fn validate_row_mutations(&self, desc: &TableDescriptor, rm: &RowMutations) -> Result<()> {
        check_row(&rm.row)?;
        for m in &rm.mutations {
            if m.row() != rm.row.as_ref() {
                return Err(Error::invalid("mutations", "every mutation of a RowMutations must target its row"));
            }
            self.validate(desc, m)?;
        }
        Ok(())
    }

    /// Applies many mutations; each row's mutations are atomic, rows are independent.
    /// Returns one result per mutation, in order.
    ///
    /// # Errors
    /// [`Error::TableDisabled`]/[`Error::TableNotFound`] for the whole batch; otherwise
    /// per-mutation errors in the returned vector.
    pub fn batch(&self, mutations: Vec<Mutation>) -> Result<Vec<Result<()>>> {
        let desc = self.check_usable()?;
        let mut results: Vec<Result<()>> = mutations.iter().map(|m| self.validate(&desc, m)).collect();
        let mut pending: Vec<usize> = (0..mutations.len()).filter(|&i| results[i].is_ok()).collect();
        // Group by region, write each group under its region's lock; rows whose region was
        // split meanwhile are routed again.
        while !pending.is_empty() {
            for (region, idx) in self.by_region(&mut pending, |i| mutations[i].row(), &mut results) {
                let durability = idx
                    .iter()
                    .map(|&i| self.durability(&desc, mutations[i].durability()))
                    .max_by_key(|d| *d as u8)
                    .unwrap_or(desc.durability);
                let groups: Vec<&[Mutation]> = idx.iter().map(|&i| std::slice::from_ref(&mutations[i])).collect();
                if let Err(e) = self.writes.throttle(&self.name, &region) {
                    fail_all(&mut results, &idx, &e);
                    continue;
                }
                let written = {
                    let _w = region.write_lock.lock();
                    if region.is_retired() {
                        pending.extend(&idx);
                        continue;
                    }
                    self.write_locked(&region, &desc, &groups, durability)
                };
                let outcome = written.and_then(|last_seq| self.settle(&region, idx.len() as u64, last_seq, durability));
                if let Err(e) = outcome {
                    fail_all(&mut results, &idx, &e);
                }
            }
        }
        Ok(results)
    }

    /// Routes the entries in `pending` (draining it) to the regions holding their rows, in
    /// order of first appearance; an entry whose row no region holds gets that error.
    fn by_region<'r, T>(
        &self,
        pending: &mut Vec<usize>,
        row: impl Fn(usize) -> &'r [u8],
        results: &mut [Result<T>],
    ) -> Vec<(Arc<Region>, Vec<usize>)> {
        let mut by_region: Vec<(Arc<Region>, Vec<usize>)> = Vec::new();
        for i in pending.drain(..) {
            match self.region(row(i)) {
                Ok(region) => match by_region.iter_mut().find(|(r, _)| r.id == region.id) {
                    Some((_, idx)) => idx.push(i),
                    None => by_region.push((region, vec![i])),
                },
                Err(e) => results[i] = Err(e),
            }
        }
        by_region
    }
}

/// Fails the entries `idx` of a batch with `e`'s reason.
fn fail_all<T>(results: &mut [Result<T>], idx: &[usize], e: &Error) {
    let reason = e.to_string();
    for &i in idx {
        results[i] = Err(Error::BatchFailed(reason.clone()));
    }
}

/// The stronger of two durabilities.
pub(crate) fn stronger(a: Durability, b: Durability) -> Durability {
    if b as u8 > a as u8 {
        b
    } else {
        a
    }
}
