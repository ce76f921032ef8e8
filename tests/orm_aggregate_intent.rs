//! The intent protocol (normalized aggregates, and every strategy on stores without atomic row
//! groups) when a writer stalls or fails between its steps.
//!
//! - On a store only this process writes, a stalled writer is never taken over, however long
//!   it stalls: a later write waits for it, so the stalled call cannot land on top of the later
//!   write. A writer that failed mid-way is finished by the next reader at once.
//! - On a store shared by several processes, another process's writer holds a lease: readers
//!   wait for it to pass, then finish the write. A writer of this process is known to be gone.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cellar::orm::store::{
    CellMutation, Commit, Condition, Guarantees, ReadSpec, Row, RowCheck, RowMutation, RowStream, ScanSpec, Store,
    TableSpec,
};
use cellar::orm::{EmbeddedStore, Error, Result};
use cellar::prelude::*;
use common::orders::normalized::Order;
use common::versions::normalized::{version, version_of};

/// The embedded store, with the guarantees a test chooses, and batches that can be made to
/// stall or fail: `mutate`, and `check_and_mutate_many` (a shared store's fenced row writes).
struct Faulty {
    inner: EmbeddedStore,
    guarantees: Guarantees,
    /// The next batch sleeps this long first.
    stall_next: AtomicU32,
    /// The next batch fails without being applied.
    fail_next: AtomicBool,
    /// Every write fails, as on an engine gone read-only after a disk fault.
    refuse_writes: AtomicBool,
    /// The next batch is applied, then every write fails: a writer cut off after its row
    /// writes, before the root's.
    refuse_after_batch: AtomicBool,
}

impl Faulty {
    fn new(single_process: bool) -> (Arc<Faulty>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
        let store = Faulty {
            inner: EmbeddedStore::new(engine),
            // A store several processes share has no atomic row groups either (like Bigtable).
            guarantees: Guarantees::new(single_process, single_process),
            stall_next: AtomicU32::new(0),
            fail_next: AtomicBool::new(false),
            refuse_writes: AtomicBool::new(false),
            refuse_after_batch: AtomicBool::new(false),
        };
        (Arc::new(store), dir)
    }
}

impl Faulty {
    /// Stalls or fails a batch as the test asked.
    fn before_batch(&self) -> Result<()> {
        let stall = self.stall_next.swap(0, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(stall.into()));
        if self.fail_next.swap(false, Ordering::SeqCst) || self.refuse_writes.load(Ordering::SeqCst) {
            return Err(Error::InvalidArgument { arg: "test", reason: "injected failure".into() });
        }
        Ok(())
    }
}

impl Store for Faulty {
    fn ensure_table(&self, spec: &TableSpec) -> Result<()> {
        self.inner.ensure_table(spec)
    }
    fn alter_families(
        &self,
        table: &str,
        changes: &[cellar::orm::store::FamilyChange],
    ) -> Result<Vec<cellar::orm::store::FamilyAlteration>> {
        self.inner.alter_families(table, changes)
    }
    fn mutate(&self, table: &str, rows: Vec<RowMutation>) -> Result<()> {
        self.before_batch()?;
        self.inner.mutate(table, rows)
    }
    fn check_and_mutate_many(&self, table: &str, entries: Vec<(Condition, RowMutation)>) -> Result<Vec<bool>> {
        self.before_batch()?;
        let applied = self.inner.check_and_mutate_many(table, entries);
        if self.refuse_after_batch.swap(false, Ordering::SeqCst) {
            self.refuse_writes.store(true, Ordering::SeqCst);
        }
        applied
    }
    fn read_rows(&self, table: &str, rows: &[Bytes], read: &ReadSpec) -> Result<Vec<Option<Row>>> {
        self.inner.read_rows(table, rows, read)
    }
    fn scan<'a>(&'a self, table: &str, scan: &ScanSpec) -> Result<RowStream<'a>> {
        self.inner.scan(table, scan)
    }
    fn check_and_mutate(&self, table: &str, condition: Condition, mutation: RowMutation) -> Result<bool> {
        if self.refuse_writes.load(Ordering::SeqCst) {
            return Err(Error::InvalidArgument { arg: "test", reason: "writes refused".into() });
        }
        self.inner.check_and_mutate(table, condition, mutation)
    }
    fn split_keys(&self, table: &str) -> Result<Option<Vec<Bytes>>> {
        self.inner.split_keys(table)
    }
    fn increment(&self, table: &str, row: Bytes, family: &str, qualifier: &str, delta: i64) -> Result<i64> {
        self.inner.increment(table, row, family, qualifier, delta)
    }
    fn guarantees(&self) -> Guarantees {
        self.guarantees
    }
    fn mutate_group(&self, table: &str, checks: Vec<RowCheck>, rows: Vec<RowMutation>) -> Result<bool> {
        self.inner.mutate_group(table, checks, rows)
    }
    fn commit(&self, commit: Commit) -> Result<bool> {
        self.inner.commit(commit)
    }
    fn read_and_commit(
        &self,
        table: &str,
        row: &Bytes,
        read: &ReadSpec,
        build: &mut dyn FnMut(Option<&Row>) -> Option<Commit>,
    ) -> Result<Option<bool>> {
        self.inner.read_and_commit(table, row, read, build)
    }
}

const LEASE: Duration = Duration::from_millis(50);

#[test]
fn a_stalled_writer_is_waited_for_not_overwritten() {
    let (store, _dir) = Faulty::new(true);
    let db = Db::with_store(store.clone());
    let orders = db.aggregates::<Order>().unwrap().with_lease(LEASE);
    orders.put(&version(1, 1, 1)).unwrap();
    std::thread::scope(|s| {
        // Version 2's first child batch stalls six leases long.
        store.stall_next.store(6 * LEASE.as_millis() as u32, Ordering::SeqCst);
        s.spawn(|| orders.put(&version(1, 1, 2)).unwrap());
        std::thread::sleep(2 * LEASE);
        // Past the lease, with version 2 still in flight: version 3 waits for it instead of
        // taking its intent over, so version 2's stalled batch lands before, not on top.
        let started = Instant::now();
        orders.put(&version(1, 1, 3)).unwrap();
        assert!(started.elapsed() >= 2 * LEASE, "version 3 did not wait for version 2");
    });
    assert_eq!(orders.get((1, 1)).unwrap(), Some(version(1, 1, 3)));
}

#[test]
fn a_failed_writer_is_finished_by_the_next_reader_at_once() {
    let (store, _dir) = Faulty::new(true);
    let db = Db::with_store(store.clone());
    // A lease far longer than the test: only the writer's absence lets readers finish its write.
    let orders = db.aggregates::<Order>().unwrap().with_lease(Duration::from_secs(3600));
    orders.put(&version(1, 1, 1)).unwrap();
    store.fail_next.store(true, Ordering::SeqCst);
    assert!(orders.put(&version(1, 1, 2)).is_err(), "the injected failure reaches the caller");
    // The intent was recorded before the failure: the write is finished, whole, by the reader.
    let read = orders.get((1, 1)).unwrap().unwrap();
    assert_eq!(version_of(&read), Some(2));
}

#[test]
fn a_reader_that_cannot_finish_a_failed_write_still_reads_its_version() {
    let (store, _dir) = Faulty::new(true);
    let db = Db::with_store(store.clone());
    let orders = db.aggregates::<Order>().unwrap();
    orders.put(&version(1, 1, 1)).unwrap();
    orders.put(&version(1, 2, 5)).unwrap();
    store.fail_next.store(true, Ordering::SeqCst);
    assert!(orders.put(&version(1, 1, 2)).is_err());
    // The store now takes no writes: the reader rolls the intent forward in memory only.
    store.refuse_writes.store(true, Ordering::SeqCst);
    assert_eq!(orders.get((1, 1)).unwrap(), Some(version(1, 1, 2)));
    let all = orders.scan().to_vec().unwrap();
    assert_eq!(all, vec![version(1, 1, 2), version(1, 2, 5)]);
    // Once writes work again, the next reader finishes the write for good.
    store.refuse_writes.store(false, Ordering::SeqCst);
    assert_eq!(orders.get((1, 1)).unwrap(), Some(version(1, 1, 2)));
    store.refuse_writes.store(true, Ordering::SeqCst);
    assert_eq!(orders.get((1, 1)).unwrap(), Some(version(1, 1, 2)));
}

/// Makes the intent pending on the order's root row look like another process's: the owner's
/// process instance is bytes 16..24 of the pending state (token, deadline, instance, serial, …).
fn hand_intent_to_another_process(store: &Faulty) {
    let root = store.scan("orders_n", &ScanSpec::default()).unwrap().next().unwrap().unwrap();
    let cell = root.cells.iter().find(|c| c.qualifier.as_ref() == b"\x00g").unwrap();
    assert!(cell.value.len() > 24, "a pending state, not a committed token");
    let mut pending = cell.value.to_vec();
    pending[16..24].iter_mut().for_each(|b| *b = !*b);
    let put = CellMutation::Put {
        family: cell.family.clone(),
        qualifier: cell.qualifier.clone(),
        value: pending.into(),
        timestamp: None,
    };
    store.inner.mutate("orders_n", vec![RowMutation { row: root.key, mutations: vec![put] }]).unwrap();
}

#[test]
fn on_a_shared_store_readers_wait_out_another_processs_lease_then_finish_its_write() {
    let (store, _dir) = Faulty::new(false);
    let db = Db::with_store(store.clone());
    let orders = db.aggregates::<Order>().unwrap().with_lease(LEASE);
    orders.put(&version(1, 1, 1)).unwrap();
    store.fail_next.store(true, Ordering::SeqCst);
    let failed_at = Instant::now();
    assert!(orders.put(&version(1, 1, 2)).is_err());
    hand_intent_to_another_process(&store);
    // The writer's process cannot be seen to be gone: the reader waits for its lease.
    let read = orders.get((1, 1)).unwrap().unwrap();
    assert!(failed_at.elapsed() >= LEASE, "read {:?} after the failure", failed_at.elapsed());
    assert_eq!(version_of(&read), Some(2));
    // A failed writer of this process is known to be gone, on any store: with a lease longer
    // than a reader's patience, only that knowledge lets the read finish its write.
    let orders = orders.with_lease(Duration::from_secs(3600));
    store.fail_next.store(true, Ordering::SeqCst);
    assert!(orders.put(&version(1, 1, 3)).is_err());
    assert_eq!(version_of(&orders.get((1, 1)).unwrap().unwrap()), Some(3));
    // Every strategy works through the intent protocol on such a store.
    let single = db.aggregates::<common::orders::single_table::Order>().unwrap();
    let order = common::versions::single_table::version(4, 4, 5);
    single.put(&order).unwrap();
    assert_eq!(single.get((4, 4)).unwrap(), Some(order));
}

#[test]
fn an_intent_copied_onto_a_store_that_writes_atomically_is_finished_not_read_around() {
    use common::versions::single_table::{version, version_of};
    // Rows written as on Bigtable (a shared store without atomic row groups): the writer of
    // version 2 applied its child rows, then was cut off before the root's.
    let (store, _dir) = Faulty::new(false);
    let db = Db::with_store(store.clone());
    let orders = db.aggregates::<common::orders::single_table::Order>().unwrap();
    orders.put(&version(1, 1, 1)).unwrap();
    store.refuse_after_batch.store(true, Ordering::SeqCst);
    assert!(orders.put(&version(1, 1, 2)).is_err());
    store.refuse_writes.store(false, Ordering::SeqCst);
    // The same rows on the embedded engine's own store, which writes aggregates atomically
    // (as after a copy from Bigtable): the reader finishes the write instead of mixing the
    // root of version 1 with the rows of version 2.
    let embedded = Db::with_store(Arc::new(store.inner.clone()));
    let there = embedded.aggregates::<common::orders::single_table::Order>().unwrap();
    assert_eq!(there.get((1, 1)).unwrap().as_ref().and_then(version_of), Some(2));
    assert_eq!(there.scan().to_vec().unwrap(), [version(1, 1, 2)]);
    assert_eq!(there.get_to_depth((1, 1), 1).unwrap().map(|o| o.status), Some("v2".to_string()));
    there.put(&version(1, 1, 3)).unwrap();
    assert_eq!(there.get((1, 1)).unwrap(), Some(version(1, 1, 3)));
}
