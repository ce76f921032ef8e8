//! Tables: the shared per-table state, and the [`Table`] handle through which callers read and
//! write rows.
//!
//! Every write to one row is applied atomically: the row's region write lock is held while the
//! edits are logged, inserted into memstores and published at once under one MVCC sequence
//! range. Read-modify-writes (increment, append, check-and-mutate, latest-version deletes) read
//! under the same lock.

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use crate::background::Lifeline;
use crate::cell::{check_row, check_value, to_printable, Cell, CellType, LATEST_TIMESTAMP};
use crate::descriptor::{Durability, TableDescriptor};
use crate::mutation::{Append, CheckAndMutate, Edit, Increment, MultiRowMutation, Mutation, Put, RowMutations};
use crate::query::{Get, ReadSpec, RowResult, Scan};
use crate::read::row_buf::{FromScannedRow, RowBuf, RowView};
use crate::read::rows::{read_rows, row_absent, RowRead, Rows};
use crate::region::Region;
use crate::scanner::{visit_rows, ScanCursor, Scanner};
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

/// A read's row taken out of its buffer as `R`.
fn build_row<R: FromScannedRow>(buf: &mut RowBuf) -> R {
    buf.take_with(|row, cells| R::from_scanned(row, cells))
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

    /// Adds to 8-byte counters atomically and returns the new values.
    ///
    /// # Errors
    /// [`Error::NotACounter`] if a cell holds something other than 8 bytes,
    /// [`Error::CounterOverflow`]; nothing is written when any column fails.
    pub fn increment(&self, inc: Increment) -> Result<RowResult> {
        let desc = self.check_usable()?;
        self.check_columns(&desc, &inc.row, &inc.columns, "increment")?;
        let ttl = inc.ttl_ms;
        let row = inc.row.clone();
        let durability = self.durability(&desc, inc.durability);
        self.read_modify_write(&row, durability, &inc.columns, |current, f, q, delta: &i64| {
            let old = match current {
                None => 0,
                Some(c) => {
                    let bytes: [u8; 8] = c.value.as_ref().try_into().map_err(|_| Error::NotACounter {
                        row: to_printable(&row),
                        family: to_printable(f),
                        qualifier: to_printable(q),
                        len: c.value.len(),
                    })?;
                    i64::from_be_bytes(bytes)
                }
            };
            let new = old.checked_add(*delta).ok_or_else(|| Error::CounterOverflow {
                row: to_printable(&row),
                family: to_printable(f),
                qualifier: to_printable(q),
            })?;
            Ok((Bytes::copy_from_slice(&new.to_be_bytes()), ttl))
        })
    }

    /// Appends bytes to cells atomically and returns the new values.
    ///
    /// # Errors
    /// As for [`Table::put`].
    pub fn append(&self, app: Append) -> Result<RowResult> {
        let desc = self.check_usable()?;
        self.check_columns(&desc, &app.row, &app.columns, "append")?;
        let row = app.row.clone();
        let durability = self.durability(&desc, app.durability);
        self.read_modify_write(&row, durability, &app.columns, |current, _, _, suffix: &Bytes| {
            let mut v = current.map(|c| c.value.to_vec()).unwrap_or_default();
            v.extend_from_slice(suffix);
            Ok((Bytes::from(v), None))
        })
    }

    /// Checks the row and the columns of an increment or append (`what`).
    fn check_columns<X>(
        &self,
        desc: &TableDescriptor,
        row: &[u8],
        columns: &[(Bytes, Bytes, X)],
        what: &'static str,
    ) -> Result<()> {
        check_row(row)?;
        if columns.is_empty() {
            return Err(Error::invalid(what, format!("an {what} needs at least one column")));
        }
        columns.iter().try_for_each(|(f, _, _)| self.check_family(desc, f))
    }

    /// Shared body of increment and append: read each column's latest value under the write
    /// lock, compute the new value, write all of them as one atomic mutation.
    fn read_modify_write<X>(
        &self,
        row: &Bytes,
        durability: Durability,
        columns: &[(Bytes, Bytes, X)],
        compute: impl Fn(Option<&Cell>, &Bytes, &Bytes, &X) -> Result<(Bytes, Option<u64>)>,
    ) -> Result<RowResult> {
        let (region, (cells, last_seq)) = self.locked(row, |region| {
            let now = self.writes.now_ms();
            let mut cells = Vec::with_capacity(columns.len());
            let mut ttls = Vec::with_capacity(columns.len());
            for (f, q, arg) in columns {
                let current = self.read_row_locked(region, row, f, q, now)?;
                let (value, ttl) = compute(current.as_ref(), f, q, arg)?;
                check_value(&value)?;
                // Never write below the current version, or the new value would be hidden.
                let ts = current.as_ref().map_or(now, |c| c.timestamp.max(now));
                cells.push(Cell {
                    row: row.clone(),
                    family: f.clone(),
                    qualifier: q.clone(),
                    timestamp: ts,
                    cell_type: CellType::Put,
                    value,
                });
                ttls.push(ttl);
            }
            let mut edits: Vec<WalEdit<'_>> = cells
                .iter()
                .zip(&ttls)
                .map(|(c, &ttl_ms)| WalEdit {
                    seq_offset: 0,
                    family: &c.family,
                    row: &c.row,
                    qualifier: &c.qualifier,
                    ts: c.timestamp,
                    kind: CellType::Put,
                    ttl_ms,
                    value: &c.value,
                })
                .collect();
            let last = self.commit(region, &mut edits, 1, durability)?;
            Ok((cells, last))
        })?;
        self.settle(&region, 1, last_seq, durability)?;
        Ok(RowResult { row: row.clone(), cells })
    }

    /// Applies the mutations if the check passes; returns whether it passed.
    ///
    /// # Errors
    /// As for [`Table::mutate_row`].
    pub fn check_and_mutate(&self, cam: CheckAndMutate) -> Result<bool> {
        let desc = self.check_usable()?;
        self.validate_check_and_mutate(&desc, &cam)?;
        let row = cam.mutations.row.clone();
        let durability = self.durability(&desc, cam.mutations.mutations.iter().find_map(Mutation::durability));
        let (region, last_seq) = self.locked(&row, |region| {
            if !self.check_holds(region, &cam, self.writes.now_ms())? {
                return Ok(None);
            }
            let groups = [cam.mutations.mutations.as_slice()];
            self.write_locked(region, &desc, &groups, durability).map(Some)
        })?;
        let Some(last_seq) = last_seq else {
            return Ok(false);
        };
        self.settle(&region, 1, last_seq, durability)?;
        Ok(true)
    }

    fn validate_check_and_mutate(&self, desc: &TableDescriptor, cam: &CheckAndMutate) -> Result<()> {
        self.validate_row_mutations(desc, &cam.mutations)?;
        self.check_family(desc, &cam.family)
    }

    /// Whether `cam`'s check holds now; caller holds the region's write lock.
    fn check_holds(&self, region: &Region, cam: &CheckAndMutate, now: u64) -> Result<bool> {
        let current = self.read_row_locked(region, &cam.mutations.row, &cam.family, &cam.qualifier, now)?;
        Ok(match (&cam.expected, &current) {
            (None, None) => true,
            (None, Some(_)) | (Some(_), None) => false,
            (Some(expected), Some(cell)) => cam.op.matches(&cell.value, expected),
        })
    }

    /// Runs many check-and-mutates, each atomic on its own row and independent of the others
    /// (HBase's batched `checkAndMutate`): one check failing holds back no other row. The
    /// entries of one region are checked and written under one hold of its lock and logged as
    /// one record, which is what makes this faster than one call per row. An entry sees the
    /// writes of earlier entries of the batch on the same row. Returns, in order, whether each
    /// entry applied, or its error.
    ///
    /// # Errors
    /// [`Error::TableDisabled`]/[`Error::TableNotFound`] for the whole batch; otherwise
    /// per-entry errors in the returned vector (a failed write fails every entry of its region
    /// not yet written, as [`Error::BatchFailed`]).
    pub fn check_and_mutate_batch(&self, cams: Vec<CheckAndMutate>) -> Result<Vec<Result<bool>>> {
        let desc = self.check_usable()?;
        let mut results: Vec<Result<bool>> =
            cams.iter().map(|c| self.validate_check_and_mutate(&desc, c).map(|()| false)).collect();
        let mut pending: Vec<usize> = (0..cams.len()).filter(|&i| results[i].is_ok()).collect();
        while !pending.is_empty() {
            for (region, idx) in self.by_region(&mut pending, |i| &cams[i].mutations.row[..], &mut results) {
                if let Err(e) = self.writes.throttle(&self.name, &region) {
                    fail_all(&mut results, &idx, &e);
                    continue;
                }
                let mut applied = Vec::new();
                let written = {
                    let _w = region.write_lock.lock();
                    if region.is_retired() {
                        pending.extend(&idx);
                        continue;
                    }
                    self.check_and_write_locked(&region, &desc, &cams, &idx, &mut applied)
                };
                let outcome = written.and_then(|(last_seq, durability)| {
                    self.settle(&region, applied.len() as u64, last_seq, durability)
                });
                match outcome {
                    Ok(()) => applied.iter().for_each(|&i| results[i] = Ok(true)),
                    // Entries whose check failed wrote nothing and keep `Ok(false)`.
                    Err(e) => fail_all(&mut results, &applied, &e),
                }
            }
        }
        Ok(results)
    }

    /// Checks the entries `idx` of one region in order and writes those that pass, pushing
    /// them to `applied`; caller holds the region's write lock. A row checked a second time is
    /// written out first, so its check sees the earlier entry. Returns the last sequence
    /// number written and the strongest durability asked for.
    fn check_and_write_locked(
        &self,
        region: &Region,
        desc: &TableDescriptor,
        cams: &[CheckAndMutate],
        idx: &[usize],
        applied: &mut Vec<usize>,
    ) -> Result<(u64, Durability)> {
        let now = self.writes.now_ms();
        let mut last_seq = 0;
        let mut durability = Durability::SkipWal;
        let mut unwritten = 0;
        let mut rows = std::collections::HashSet::new();
        let mut write_out = |applied: &[usize], from: usize| -> Result<u64> {
            let groups: Vec<&[Mutation]> = applied[from..].iter().map(|&i| &cams[i].mutations.mutations[..]).collect();
            if groups.is_empty() {
                return Ok(0);
            }
            let d = applied[from..]
                .iter()
                .map(|&i| self.durability(desc, cams[i].mutations.mutations.iter().find_map(Mutation::durability)))
                .fold(Durability::SkipWal, stronger);
            durability = stronger(durability, d);
            self.write_locked(region, desc, &groups, d)
        };
        for &i in idx {
            let row = &cams[i].mutations.row;
            if !rows.insert(row) {
                last_seq = last_seq.max(write_out(applied, unwritten)?);
                unwritten = applied.len();
                rows.clear();
                rows.insert(row);
            }
            if self.check_holds(region, &cams[i], now)? {
                applied.push(i);
            }
        }
        last_seq = last_seq.max(write_out(applied, unwritten)?);
        Ok((last_seq, durability))
    }

    /// Applies the mutations of several rows of one region atomically, if every condition
    /// holds (HBase's MultiRowMutation, with conditions); returns whether it applied. A reader
    /// sees all the rows' changes or none; recovery replays all or none.
    ///
    /// # Errors
    /// [`Error::RowsSpanRegions`] if the rows (conditions' rows included) lie in more than one
    /// region; [`Error::InvalidArgument`] for no rows at all or a bad row; otherwise as for
    /// [`Table::mutate_row`]. Nothing is written on error.
    pub fn mutate_rows(&self, m: MultiRowMutation) -> Result<bool> {
        let desc = self.check_usable()?;
        let rows = || m.rows.iter().map(|r| &r.row).chain(m.conditions.iter().map(|c| &c.row));
        let Some(first) = rows().next().cloned() else {
            return Err(Error::invalid("rows", "a multi-row mutation needs at least one row"));
        };
        for rm in &m.rows {
            self.validate_row_mutations(&desc, rm)?;
        }
        for c in &m.conditions {
            check_row(&c.row)?;
            self.check_family(&desc, &c.family)?;
        }
        let durability =
            self.durability(&desc, m.rows.iter().flat_map(|r| &r.mutations).find_map(Mutation::durability));
        let (region, last_seq) = self.locked(&first, |region| {
            if let Some(other) = rows().find(|r| !region.contains(r)) {
                return Err(Error::RowsSpanRegions {
                    table: self.name.to_string(),
                    first: to_printable(&first),
                    other: to_printable(other),
                });
            }
            let now = self.writes.now_ms();
            for c in &m.conditions {
                let current = self.read_row_locked(region, &c.row, &c.family, &c.qualifier, now)?;
                if !c.holds(current.as_ref().map(|cell| cell.value.as_ref())) {
                    return Ok(None);
                }
            }
            let groups: Vec<&[Mutation]> = m.rows.iter().map(|r| r.mutations.as_slice()).collect();
            self.write_locked(region, &desc, &groups, durability).map(Some)
        })?;
        let Some(last_seq) = last_seq else {
            return Ok(false);
        };
        self.settle(&region, m.rows.len() as u64, last_seq, durability)?;
        Ok(true)
    }

    pub(crate) fn check_spec(&self, desc: &TableDescriptor, spec: &ReadSpec) -> Result<()> {
        for (f, _) in &spec.columns.entries {
            self.check_family(desc, f)?;
        }
        Ok(())
    }

    /// The row `get` reads in `region`, built as `R`, by the writer holding the region's write
    /// lock, about to write the row: the inserts that follow start from where the read found
    /// it. `None` if the read returns no row.
    pub(crate) fn get_locked_as<R: FromScannedRow>(&self, region: &Region, get: &Get, now: u64) -> Result<Option<R>> {
        self.read_row_in(region, get, now, true, false, build_row::<R>)
    }

    /// A point read through the public API: checks, routing, the region's read count.
    fn point_read<T>(&self, get: &Get, lent: bool, take: impl FnOnce(&mut RowBuf) -> T) -> Result<Option<T>> {
        let desc = self.check_usable()?;
        check_row(&get.row)?;
        self.check_spec(&desc, &get.spec)?;
        let region = self.region(&get.row)?;
        let out = self.read_row_in(&region, get, self.writes.now_ms(), false, lent, take)?;
        region.counters.reads.fetch_add(1, Ordering::Relaxed);
        Ok(out)
    }

    /// Reads `get`'s row in `region` and hands its buffer to `take`, if the row has cells the
    /// get returns.
    fn read_row_in<T>(
        &self,
        region: &Region,
        get: &Get,
        now: u64,
        for_writer: bool,
        lent: bool,
        take: impl FnOnce(&mut RowBuf) -> T,
    ) -> Result<Option<T>> {
        let snap = region.snapshot();
        // The writer's reads are mostly of rows about to be written, often new (inserts, unique
        // claims): a check for the row first spares those the cursors, and costs a present
        // row little, as the search left the writer at the row. Other reads skip it.
        if for_writer && row_absent(&snap, &get.row, true) {
            return Ok(None);
        }
        // The row borrowed, not a range of it: a clone of the Get's row would be an allocation.
        let read = RowRead { rows: Rows::One(&get.row), reversed: false, spec: &get.spec, now, for_writer, lent };
        let mut take = Some(take);
        let mut out = None;
        read_rows(&snap, &read, |buf| {
            out = take.take().map(|take| take(buf));
            false
        })?;
        Ok(out)
    }

    /// Reads one row. A missing row gives an empty result.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad row key, [`Error::FamilyNotFound`],
    /// [`Error::TableDisabled`], [`Error::Corrupt`] if a file read is damaged.
    pub fn get(&self, get: Get) -> Result<RowResult> {
        let row = get.row.clone();
        Ok(self.get_as(get)?.unwrap_or(RowResult { row, cells: Vec::new() }))
    }

    /// Reads one row like [`Table::get`], built as `R` straight from the read's buffer (see
    /// [`Table::scan_as`]); `None` if the row has no cells the get returns.
    ///
    /// # Errors
    /// As for [`Table::get`].
    pub fn get_as<R: FromScannedRow>(&self, get: Get) -> Result<Option<R>> {
        self.point_read(&get, false, build_row::<R>)
    }

    /// Reads one row like [`Table::get`], but lends it to `read` instead of returning it: its
    /// cells are borrowed from the read's buffer, so the read builds no row (the point-read
    /// counterpart of [`Table::scan_with`]). `None`, without calling `read`, if the row has no
    /// cells the get returns.
    ///
    /// ```
    /// # use cellar_engine::*;
    /// # fn main() -> Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # engine.create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f")))?;
    /// # let t = engine.table("t")?;
    /// t.put(Put::new("user1").add("f", "name", "Ada"))?;
    /// let len = t.get_with(Get::new("user1"), |row| row.value(b"f", b"name").map(<[u8]>::len))?;
    /// assert_eq!(len, Some(Some(3)));
    /// assert_eq!(t.get_with(Get::new("user2"), |row| row.len())?, None);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As for [`Table::get`].
    pub fn get_with<T>(&self, get: Get, read: impl FnOnce(RowView<'_>) -> T) -> Result<Option<T>> {
        self.point_read(&get, true, |buf| read(buf.view()))
    }

    /// Reads several rows.
    ///
    /// # Errors
    /// The first error of any get.
    pub fn get_many(&self, gets: Vec<Get>) -> Result<Vec<RowResult>> {
        gets.into_iter().map(|g| self.get(g)).collect()
    }

    /// Reads several rows like [`Table::get_many`], each built as `R` (see [`Table::get_as`]).
    ///
    /// # Errors
    /// The first error of any get.
    pub fn get_many_as<R: FromScannedRow>(&self, gets: Vec<Get>) -> Result<Vec<Option<R>>> {
        gets.into_iter().map(|g| self.get_as(g)).collect()
    }

    /// True if the get finds at least one cell.
    ///
    /// # Errors
    /// As for [`Table::get`].
    pub fn exists(&self, get: Get) -> Result<bool> {
        Ok(!self.get(get)?.is_empty())
    }

    /// Opens a scanner. It reads a snapshot taken now: later writes are not seen.
    ///
    /// # Errors
    /// [`Error::FamilyNotFound`], [`Error::TableDisabled`].
    pub fn scan(&self, scan: Scan) -> Result<Scanner> {
        self.scan_as(scan)
    }

    /// Scans like [`Table::scan`], handing out rows as `R`: a layer above that keeps rows in
    /// its own type builds them straight from the read's buffer, without a [`RowResult`] in
    /// between.
    ///
    /// # Errors
    /// As for [`Table::scan`].
    pub fn scan_as<R: FromScannedRow>(&self, scan: Scan) -> Result<Scanner<R>> {
        let desc = self.check_usable()?;
        self.check_spec(&desc, &scan.spec)?;
        Ok(Scanner::new(self.state.regions(), scan, self.writes.now_ms()))
    }

    /// Scans like [`Table::scan`], lending rows one at a time through a [`ScanCursor`]: each
    /// row is borrowed from the cursor's buffer until it moves on, as [`Table::scan_with`]
    /// lends them, but the caller pulls. For callers that merge several scans, or decode rows
    /// into their own types without keeping the cells.
    ///
    /// ```
    /// # use cellar_engine::*;
    /// # fn main() -> Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # engine.create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f")))?;
    /// # let t = engine.table("t")?;
    /// for (row, amount) in [("a", "3"), ("b", "4"), ("c", "5")] {
    ///     t.put(Put::new(row).add("f", "amount", amount))?;
    /// }
    /// let mut rows = t.scan_cursor(Scan::new().start("b"))?;
    /// let mut seen = Vec::new();
    /// while rows.advance()? {
    ///     let row = rows.row().expect("the cursor is on a row");
    ///     seen.push((row.row().to_vec(), row.value(b"f", b"amount").map(<[u8]>::to_vec)));
    /// }
    /// assert_eq!(seen, [(b"b".to_vec(), Some(b"4".to_vec())), (b"c".to_vec(), Some(b"5".to_vec()))]);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As for [`Table::scan`]; [`ScanCursor::advance`] fails as a [`Scanner`] does.
    pub fn scan_cursor(&self, scan: Scan) -> Result<ScanCursor> {
        let desc = self.check_usable()?;
        self.check_spec(&desc, &scan.spec)?;
        Ok(ScanCursor::new(self.state.regions(), scan, self.writes.now_ms()))
    }

    /// Scans like [`Table::scan`], but lends each row to `visit` instead of returning it: the
    /// row's cells are borrowed from the read's buffer, which is reused for the next row, so a
    /// row costs no allocation. `visit` returns [`ControlFlow::Break`] to end the scan early.
    /// Returns how many rows were visited (with a `batch`, a row lent in several parts counts
    /// once).
    ///
    /// The scan sees one snapshot per region, taken when it starts, and holds it until it
    /// ends: files compacted away meanwhile stay on disk until then. Use [`Table::scan`] to
    /// keep rows, or to read at your own pace; [`RowView::to_row_result`] copies one out.
    ///
    /// ```
    /// # use cellar_engine::*;
    /// # use std::ops::ControlFlow;
    /// # fn main() -> Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # engine.create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f")))?;
    /// # let t = engine.table("t")?;
    /// for (row, amount) in [("a", "3"), ("b", "4"), ("c", "5")] {
    ///     t.put(Put::new(row).add("f", "amount", amount))?;
    /// }
    /// let mut total = 0;
    /// t.scan_with(Scan::new(), |row| {
    ///     let amount = row.value(b"f", b"amount").unwrap_or(b"0");
    ///     total += std::str::from_utf8(amount).unwrap().parse::<u64>().unwrap();
    ///     ControlFlow::Continue(())
    /// })?;
    /// assert_eq!(total, 12);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::FamilyNotFound`], [`Error::TableDisabled`], [`Error::Corrupt`] if a file read
    /// is damaged (rows visited before it stay visited).
    pub fn scan_with(&self, scan: Scan, mut visit: impl FnMut(RowView<'_>) -> ControlFlow<()>) -> Result<usize> {
        let desc = self.check_usable()?;
        self.check_spec(&desc, &scan.spec)?;
        visit_rows(self.state.regions(), &scan, self.writes.now_ms(), &mut visit)
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
