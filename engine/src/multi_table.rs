//! Atomic writes across rows of several tables and regions: [`MultiTableMutation`], applied
//! by [`Engine::mutate_tables`].
//!
//! HBase makes one row atomic, and several rows only inside one region. An embedded engine can
//! do more at little cost: every region involved is write-locked (in region-id order, so two
//! such writes cannot deadlock), the conditions are read under the locks, and the edits of all
//! regions go to the log as one record, which recovery replays whole or not at all (unless every
//! table written skips the log: then nothing is logged, and a crash keeps whatever parts were
//! flushed). The edits are published in every region at once ([`Region::publish_together`]): a
//! scan, which takes its regions' read points together, sees them in all regions or in none,
//! and once one read has seen them every read that starts later does.
//!
//! This is what lets a write keep a secondary index in another table in step with its data row
//! in one operation on the embedded engine. A store that cannot do it (Cloud Bigtable) needs a
//! protocol of several writes instead.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::cell::{check_row, MAX_WRITE_LEN};
use crate::descriptor::{Durability, TableDescriptor};
use crate::engine::Engine;
use crate::mutation::{Mutation, RowCondition, RowMutations};
use crate::region::Region;
use crate::table::{stronger, Table};
use crate::wal::{encode_regions, WalEdit};
use crate::{Error, Result};

/// Mutations of rows of any tables of one engine, applied atomically if every condition holds:
/// a scan sees all of them or none, a read that starts after another read saw them sees them
/// too, and recovery replays all of them or none (with the log: see the module docs for
/// `SkipWal`).
#[derive(Debug, Clone, Default)]
pub struct MultiTableMutation {
    tables: Vec<Table>,
    /// Each with the position of its table in `tables`.
    rows: Vec<(usize, RowMutations)>,
    conditions: Vec<(usize, RowCondition)>,
}

impl MultiTableMutation {
    /// No rows and no conditions yet.
    pub fn new() -> Self {
        MultiTableMutation::default()
    }

    /// Adds one row's mutations in `table`; they apply after those of the rows added before.
    pub fn row(mut self, table: &Table, mutations: RowMutations) -> Self {
        let t = self.table(table);
        self.rows.push((t, mutations));
        self
    }

    /// Adds a condition on a row of `table`: the mutation applies only if every condition
    /// holds.
    pub fn condition(mut self, table: &Table, condition: RowCondition) -> Self {
        let t = self.table(table);
        self.conditions.push((t, condition));
        self
    }

    /// `table`'s position in `tables`, added if new.
    fn table(&mut self, table: &Table) -> usize {
        match self.tables.iter().position(|t| t.same_table(table)) {
            Some(i) => i,
            None => {
                self.tables.push(table.clone());
                self.tables.len() - 1
            }
        }
    }

    /// True if no rows were added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// One region the write locks, and the edits it gets.
struct Target<'a> {
    region: Arc<Region>,
    table: &'a Table,
    edits: Vec<WalEdit<'a>>,
    mutations: u64,
}

/// The regions a write changed, and the last sequence number it used (`None`: a condition
/// failed and nothing was written).
type Written<'a> = (Vec<Target<'a>>, Option<u64>);

impl Engine {
    /// Applies `m` atomically if every condition holds; returns whether it did. Conditions see
    /// the rows as they are before any of `m`'s mutations.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no rows, a bad row, a table of another engine, or more
    /// than one write may carry; [`Error::FamilyNotFound`], [`Error::TableDisabled`],
    /// [`Error::TableNotFound`]; [`Error::RegionTooBusy`]; [`Error::Corrupt`] if reading a
    /// condition's row (or the latest version a delete names) meets a damaged file;
    /// [`Error::ReadOnly`] and I/O errors from the log. Nothing is written on error, except that
    /// an `FsyncWal` write whose fsync fails may be applied (as for every write).
    pub fn mutate_tables(&self, m: MultiTableMutation) -> Result<bool> {
        if m.rows.is_empty() {
            return Err(Error::invalid("rows", "a multi-table mutation needs at least one row"));
        }
        let mut descs: Vec<Arc<TableDescriptor>> = Vec::with_capacity(m.tables.len());
        for table in &m.tables {
            if !table.belongs_to(&self.inner) {
                return Err(Error::invalid("table", format!("table `{}` belongs to another engine", table.name())));
            }
            descs.push(table.check_usable()?);
        }
        let mut durability = Durability::SkipWal;
        for (t, rm) in &m.rows {
            m.tables[*t].validate_row_mutations(&descs[*t], rm)?;
            let asked = rm.mutations.iter().find_map(Mutation::durability);
            durability = stronger(durability, asked.unwrap_or(descs[*t].durability));
        }
        for (t, c) in &m.conditions {
            check_row(&c.row)?;
            m.tables[*t].check_family(&descs[*t], &c.family)?;
        }
        let (targets, last_seq) = loop {
            if let Some(done) = self.try_mutate_tables(&m, &descs, durability)? {
                break done;
            }
        };
        let Some(last_seq) = last_seq else {
            return Ok(false);
        };
        if durability == Durability::FsyncWal && last_seq > 0 {
            self.inner.wal.sync_to(last_seq)?;
        }
        for t in &targets {
            t.region.counters.writes.fetch_add(t.mutations, Ordering::Relaxed);
            self.inner.after_write(t.table.name(), &t.region);
        }
        Ok(true)
    }

    /// One try: locks the regions the rows route to, checks, logs, applies and publishes.
    /// `None` if a split retired a region meanwhile (route again); otherwise the regions written
    /// and the last sequence number (`None`: a condition failed, nothing written).
    fn try_mutate_tables<'m>(
        &self,
        m: &'m MultiTableMutation,
        descs: &'m [Arc<TableDescriptor>],
        durability: Durability,
    ) -> Result<Option<Written<'m>>> {
        let mut targets: Vec<Target<'m>> = Vec::new();
        let mut route = |table: &'m Table, row: &[u8]| -> Result<usize> {
            let region = table.region(row)?;
            if let Some(i) = targets.iter().position(|t| t.region.id == region.id) {
                return Ok(i);
            }
            targets.push(Target { region, table, edits: Vec::new(), mutations: 0 });
            Ok(targets.len() - 1)
        };
        let row_targets: Vec<usize> =
            m.rows.iter().map(|(t, rm)| route(&m.tables[*t], &rm.row)).collect::<Result<_>>()?;
        let condition_targets: Vec<usize> =
            m.conditions.iter().map(|(t, c)| route(&m.tables[*t], &c.row)).collect::<Result<_>>()?;
        for t in &targets {
            self.inner.throttle(t.table.name(), &t.region)?;
        }
        // Region-id order: two writes locking overlapping sets cannot wait on each other.
        let mut order: Vec<usize> = (0..targets.len()).collect();
        order.sort_by_key(|&i| targets[i].region.id);
        let regions: Vec<Arc<Region>> = order.iter().map(|&i| targets[i].region.clone()).collect();
        let _locks: Vec<_> = regions.iter().map(|r| r.write_lock.lock()).collect();
        if regions.iter().any(|r| r.is_retired()) {
            return Ok(None);
        }
        let now = self.inner.opts.clock.now_ms();
        for ((t, c), &i) in m.conditions.iter().zip(&condition_targets) {
            let current = m.tables[*t].read_row_locked(&targets[i].region, &c.row, &c.family, &c.qualifier, now)?;
            if !c.holds(current.as_ref().map(|cell| cell.value.as_ref())) {
                return Ok(Some((Vec::new(), None)));
            }
        }
        let mut offset = 0u32;
        for ((t, rm), &i) in m.rows.iter().zip(&row_targets) {
            let target = &mut targets[i];
            for mutation in &rm.mutations {
                target.table.resolve(&target.region, &descs[*t], mutation, offset, now, &mut target.edits)?;
                offset += 1;
            }
            target.mutations += 1;
        }
        targets.retain(|t| !t.edits.is_empty());
        if targets.is_empty() {
            return Ok(Some((targets, Some(0))));
        }
        let payload = if durability == Durability::SkipWal {
            Vec::new()
        } else {
            let batches: Vec<(u64, &[WalEdit<'_>])> = targets.iter().map(|t| (t.region.id, &t.edits[..])).collect();
            encode_regions(&batches)
        };
        if payload.len() > MAX_WRITE_LEN {
            let reason = format!("one write may carry at most {MAX_WRITE_LEN} bytes");
            return Err(Error::invalid("mutations", reason));
        }
        let _gate = self.inner.apply_gate.read();
        let first = self.inner.wal.append(offset, &payload, durability)?;
        for t in &targets {
            t.region.apply(first, &t.edits);
        }
        let last = first + u64::from(offset.max(1)) - 1;
        let written: Vec<&Region> = targets.iter().map(|t| &*t.region).collect();
        Region::publish_together(&written, last);
        Ok(Some((targets, Some(last))))
    }
}
