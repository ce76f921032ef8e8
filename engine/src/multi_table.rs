//! Atomic writes across rows of several tables and regions: [`MultiTableMutation`], applied
//! by [`Engine::mutate_tables`], or by [`Engine::read_then_mutate`] as built from a row read
//! under its region's write lock.
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

use crate::cell::check_row;
use crate::descriptor::{Durability, TableDescriptor};
use crate::engine::Engine;
use crate::mutation::{Mutation, RowCondition, RowMutations};
use crate::query::Get;
use crate::read::row_buf::FromScannedRow;
use crate::region::Region;
use crate::table::{stronger, Table};
use crate::wal::WalEdit;
use crate::write_path::{Framing, RegionEdits};
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

/// A mutation checked against its tables: their descriptors (by position) and the durability
/// its strongest table asks for.
struct Checked {
    descs: Vec<Arc<TableDescriptor>>,
    durability: Durability,
}

/// A mutation's rows and conditions routed to the regions holding them.
struct Routed<'m> {
    targets: Vec<Target<'m>>,
    /// The target of each row, in the mutation's order.
    rows: Vec<usize>,
    /// The target of each condition, in the mutation's order.
    conditions: Vec<usize>,
}

/// How one try of [`Engine::read_then_mutate`] ended.
enum Try {
    /// `build` declined (`None`), or the mutation was applied or its conditions failed.
    Done(Option<bool>),
    /// The mutation needed regions the try could not lock in order, or one was retired: the
    /// next try locks these (with their tables' names) before it reads.
    Again(Vec<(String, Arc<Region>)>),
}

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
        let checked = self.check_mutation(&m)?;
        loop {
            let mut routed = self.route(&m, None)?;
            for t in &routed.targets {
                self.writes().throttle(t.table.name(), &t.region)?;
            }
            // Region-id order: two writes locking overlapping sets cannot wait on each other.
            let mut regions: Vec<Arc<Region>> = routed.targets.iter().map(|t| Arc::clone(&t.region)).collect();
            regions.sort_by_key(|r| r.id);
            let locks: Vec<_> = regions.iter().map(|r| r.write_lock.lock()).collect();
            if regions.iter().any(|r| r.is_retired()) {
                continue;
            }
            let now = self.writes().now_ms();
            let last_seq = self.apply_locked(&m, &checked, &mut routed, now)?;
            drop(locks);
            return self.finish(&checked, &routed.targets, last_seq);
        }
    }

    /// Reads `get`'s row and applies the mutation `build` makes of it, with the row's region
    /// write-locked from the read to the write: no other write to the row comes between, so
    /// the mutation needs no condition on what was read (a read-modify-write in one step, as
    /// an HBase coprocessor does it under the row lock). The mutation is applied as
    /// [`Engine::mutate_tables`] applies one, conditions included.
    ///
    /// `build` gets the row as the read returns it (`None`: no cells) and returns `None` to
    /// write nothing. It runs with region locks held, so it must not call the engine; and it may
    /// run more than once: when its mutation needs a region another writer holds out of lock
    /// order, or one that must first wait for a flush, the locks are released and the read
    /// taken again with every region locked in order.
    ///
    /// Returns `None` if `build` declined, otherwise whether the mutation's conditions held
    /// and it was applied.
    ///
    /// # Errors
    /// As [`Table::get`] for the read and [`Engine::mutate_tables`] for the mutation; nothing
    /// is written on error (but as there, after an `FsyncWal` fsync failure).
    pub fn read_then_mutate<R: FromScannedRow>(
        &self,
        table: &Table,
        get: &Get,
        mut build: impl FnMut(Option<R>) -> Option<MultiTableMutation>,
    ) -> Result<Option<bool>> {
        if !table.belongs_to(self.writes()) {
            return Err(Error::invalid("table", format!("table `{}` belongs to another engine", table.name())));
        }
        let desc = table.check_usable()?;
        check_row(&get.row)?;
        table.check_spec(&desc, &get.spec)?;
        let mut first = Vec::new();
        loop {
            match self.try_read_then_mutate(table, get, &first, &mut build)? {
                Try::Done(outcome) => return Ok(outcome),
                Try::Again(regions) => first = regions,
            }
        }
    }

    /// One try of [`Engine::read_then_mutate`], locking `first` (and the row's region) before
    /// it reads.
    fn try_read_then_mutate<R: FromScannedRow>(
        &self,
        table: &Table,
        get: &Get,
        first: &[(String, Arc<Region>)],
        build: &mut impl FnMut(Option<R>) -> Option<MultiTableMutation>,
    ) -> Result<Try> {
        let home = table.region(&get.row)?;
        let mut held: Vec<(&str, &Arc<Region>)> = first.iter().map(|(name, r)| (name.as_str(), r)).collect();
        if !held.iter().any(|(_, r)| r.id == home.id) {
            held.push((table.name(), &home));
        }
        held.sort_by_key(|(_, r)| r.id);
        for (name, region) in &held {
            self.writes().throttle(name, region)?;
        }
        let locks: Vec<_> = held.iter().map(|(_, r)| r.write_lock.lock()).collect();
        if held.iter().any(|(_, r)| r.is_retired()) {
            return Ok(Try::Again(Vec::new()));
        }
        let now = self.writes().now_ms();
        let row = table.get_locked_as::<R>(&home, get, now)?;
        home.counters.reads.fetch_add(1, Ordering::Relaxed);
        let Some(m) = build(row) else {
            return Ok(Try::Done(None));
        };
        let checked = self.check_mutation(&m)?;
        let mut routed = self.route(&m, Some((table, &home)))?;
        // The regions the mutation needs beyond those held, locked in id order above the
        // highest held; below it only if free. A region another writer holds there, or one
        // that would make the write wait, sends the write back to wait and lock in order.
        let mut more: Vec<(&str, Arc<Region>)> = routed
            .targets
            .iter()
            .filter(|t| !held.iter().any(|(_, r)| r.id == t.region.id))
            .map(|t| (t.table.name(), Arc::clone(&t.region)))
            .collect();
        more.sort_by_key(|(_, r)| r.id);
        let mut top = held.iter().map(|(_, r)| r.id).max().unwrap_or(0);
        let mut more_locks = Vec::with_capacity(more.len());
        for (_, region) in &more {
            let lock = if self.writes().pressed(region).is_some() {
                None
            } else if region.id > top {
                Some(region.write_lock.lock())
            } else {
                region.write_lock.try_lock()
            };
            match lock {
                Some(lock) if !region.is_retired() => {
                    more_locks.push(lock);
                    top = top.max(region.id);
                }
                _ => {
                    let held = held.iter().map(|(name, r)| (name.to_string(), Arc::clone(r)));
                    let more = more.iter().map(|(name, r)| (name.to_string(), Arc::clone(r)));
                    return Ok(Try::Again(held.chain(more).collect()));
                }
            }
        }
        // The edits' time is read once every region is locked: a write waiting for a lock
        // must not land a timestamp older than what other writers put there meanwhile (a
        // delete marker from before a put it follows would leave the put's newer cells).
        let now = self.writes().now_ms().max(now);
        let last_seq = self.apply_locked(&m, &checked, &mut routed, now)?;
        drop((more_locks, locks));
        Ok(Try::Done(Some(self.finish(&checked, &routed.targets, last_seq)?)))
    }

    /// Checks `m` against its tables before anything is locked or written.
    fn check_mutation(&self, m: &MultiTableMutation) -> Result<Checked> {
        if m.rows.is_empty() {
            return Err(Error::invalid("rows", "a multi-table mutation needs at least one row"));
        }
        let mut descs: Vec<Arc<TableDescriptor>> = Vec::with_capacity(m.tables.len());
        for table in &m.tables {
            if !table.belongs_to(self.writes()) {
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
        Ok(Checked { descs, durability })
    }

    /// The regions `m`'s rows and conditions lie in; `known`, a region of a table found
    /// already, spares a look-up for the rows it holds.
    fn route<'m>(&self, m: &'m MultiTableMutation, known: Option<(&Table, &Arc<Region>)>) -> Result<Routed<'m>> {
        let mut targets: Vec<Target<'m>> = Vec::new();
        let mut route = |table: &'m Table, row: &[u8]| -> Result<usize> {
            // A mutation's rows and conditions share regions (a data row and the check on it):
            // the regions found so far answer most of them without the table's region map.
            let found = |t: &Target<'_>| t.table.same_table(table) && t.region.contains(row);
            if let Some(i) = targets.iter().position(found) {
                return Ok(i);
            }
            let region = match known {
                Some((t, region)) if t.same_table(table) && region.contains(row) => Arc::clone(region),
                _ => table.region(row)?,
            };
            if let Some(i) = targets.iter().position(|t| t.region.id == region.id) {
                return Ok(i);
            }
            targets.push(Target { region, table, edits: Vec::new(), mutations: 0 });
            Ok(targets.len() - 1)
        };
        let rows = m.rows.iter().map(|(t, rm)| route(&m.tables[*t], &rm.row)).collect::<Result<_>>()?;
        let conditions = m.conditions.iter().map(|(t, c)| route(&m.tables[*t], &c.row)).collect::<Result<_>>()?;
        Ok(Routed { targets, rows, conditions })
    }

    /// Checks `m`'s conditions, then logs, applies and publishes its edits, with every routed
    /// region's write lock held; `now` is the time the conditions and edits are resolved at.
    /// The last sequence number used (0: nothing to write), or `None` if a condition failed and
    /// nothing was written.
    fn apply_locked<'m>(
        &self,
        m: &'m MultiTableMutation,
        checked: &'m Checked,
        routed: &mut Routed<'m>,
        now: u64,
    ) -> Result<Option<u64>> {
        let targets = &mut routed.targets;
        for ((t, c), &i) in m.conditions.iter().zip(&routed.conditions) {
            let current = m.tables[*t].read_row_locked(&targets[i].region, &c.row, &c.family, &c.qualifier, now)?;
            if !c.holds(current.as_ref().map(|cell| cell.value.as_ref())) {
                return Ok(None);
            }
        }
        let mut offset = 0u32;
        for ((t, rm), &i) in m.rows.iter().zip(&routed.rows) {
            let target = &mut targets[i];
            for mutation in &rm.mutations {
                target.table.resolve(&target.region, &checked.descs[*t], mutation, offset, now, &mut target.edits)?;
                offset += 1;
            }
            target.mutations += 1;
        }
        targets.retain(|t| !t.edits.is_empty());
        let mut writes: Vec<RegionEdits<'_, '_>> =
            targets.iter_mut().map(|t| RegionEdits { region: &t.region, edits: &mut t.edits[..] }).collect();
        self.writes().commit(&mut writes, offset, checked.durability, Framing::Regions).map(Some)
    }

    /// After the locks are released: syncs the log if the write asked for it, counts the
    /// write and lets the regions written flush or split. Whether the write was applied.
    fn finish(&self, checked: &Checked, targets: &[Target<'_>], last_seq: Option<u64>) -> Result<bool> {
        let Some(last_seq) = last_seq else {
            return Ok(false);
        };
        let written: Vec<(&str, &Region, u64)> =
            targets.iter().map(|t| (t.table.name(), &*t.region, t.mutations)).collect();
        self.writes().settle(last_seq, checked.durability, &written)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::mpsc;

    use super::*;
    use crate::{EngineOptions, FamilyDescriptor, Put, RowResult};

    fn put(row: &str, value: &str) -> RowMutations {
        RowMutations::new(row.to_string()).with(Put::new(row.to_string()).add("f", "q", value.to_string()))
    }

    /// The write waits for the index region another writer holds, and the clock moves on
    /// meanwhile: its edits take the time all locks were held at, so a delete it carries
    /// hides what the other writer put there before it (a stale timestamp would leave those
    /// cells half deleted).
    #[test]
    fn edits_take_the_time_at_which_every_region_is_locked() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(crate::ManualClock::new(100));
        let engine = Engine::open(dir.path(), EngineOptions::default().clock(clock.clone())).unwrap();
        for name in ["data", "index"] {
            engine.create_table(TableDescriptor::new(name).family(FamilyDescriptor::new("f"))).unwrap();
        }
        let (data, index) = (engine.table("data").unwrap(), engine.table("index").unwrap());
        let index_region = index.region(b"i").unwrap();
        assert!(index_region.id > data.region(b"a").unwrap().id, "the write waits for the lock");
        let built = AtomicU32::new(0);
        std::thread::scope(|s| {
            let lock = index_region.write_lock.lock();
            let writer = s.spawn(|| {
                engine.read_then_mutate::<RowResult>(&data, &Get::new("a"), |_| {
                    built.fetch_add(1, Ordering::SeqCst);
                    let delete = RowMutations::new("i").with(crate::Delete::new("i"));
                    Some(MultiTableMutation::new().row(&data, put("a", "1")).row(&index, delete))
                })
            });
            // Built: the row was read at 100, and the index region is still held.
            while built.load(Ordering::SeqCst) == 0 {
                std::thread::yield_now();
            }
            clock.set(200);
            drop(lock);
            assert_eq!(writer.join().unwrap().unwrap(), Some(true));
        });
        let cell = data.get(Get::new("a")).unwrap().cells.into_iter().next().unwrap();
        assert_eq!(cell.timestamp, 200, "the time the locks were all held at");
    }

    /// The index table's region has a lower id than the data row's, and another writer holds
    /// it: the write cannot wait for it while holding the data row's region (that order could
    /// deadlock), so it lets go, locks both in order once the other writer is done, reads the
    /// row again and builds again.
    #[test]
    fn a_region_held_out_of_order_sends_the_write_back_to_lock_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
        for name in ["index", "data"] {
            engine.create_table(TableDescriptor::new(name).family(FamilyDescriptor::new("f"))).unwrap();
        }
        let (index, data) = (engine.table("index").unwrap(), engine.table("data").unwrap());
        let index_region = index.region(b"i").unwrap();
        assert!(index_region.id < data.region(b"a").unwrap().id);
        let builds = AtomicU32::new(0);
        let (holding, held) = mpsc::channel();
        std::thread::scope(|s| {
            let other = s.spawn(|| {
                let _lock = index_region.write_lock.lock();
                holding.send(()).unwrap();
                // Until the write has built once and met the held lock.
                while builds.load(Ordering::SeqCst) == 0 {
                    std::thread::yield_now();
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            });
            held.recv().unwrap();
            let written = engine
                .read_then_mutate::<RowResult>(&data, &Get::new("a"), |row| {
                    builds.fetch_add(1, Ordering::SeqCst);
                    assert!(row.is_none());
                    Some(MultiTableMutation::new().row(&data, put("a", "1")).row(&index, put("i", "a")))
                })
                .unwrap();
            assert_eq!(written, Some(true));
            other.join().unwrap();
        });
        assert_eq!(builds.load(Ordering::SeqCst), 2, "built, sent back, built again with both locked");
        let read = |t: &Table, row: &str| t.get(Get::new(row.to_string())).unwrap().value(b"f", b"q").cloned();
        assert_eq!(read(&data, "a").as_deref(), Some(&b"1"[..]));
        assert_eq!(read(&index, "i").as_deref(), Some(&b"a"[..]));
    }
}
