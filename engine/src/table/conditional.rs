//! Read-modify-writes and conditional writes of a [`Table`]: increment, append,
//! check-and-mutate (one and batched) and multi-row mutations of one region. Each reads under
//! the region's write lock and writes through the table's commit.

use bytes::Bytes;

use super::{fail_all, stronger, Table};
use crate::cell::{check_row, check_value, to_printable, Cell, CellType};
use crate::descriptor::{Durability, TableDescriptor};
use crate::mutation::{Append, CheckAndMutate, Increment, MultiRowMutation, Mutation};
use crate::query::RowResult;
use crate::region::Region;
use crate::wal::WalEdit;
use crate::{Error, Result};

impl Table {
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
}
