//! A store that fails its k-th mutating call, either before the call takes effect or after
//! (a lost acknowledgement): the caller sees an error both ways.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use cellar::orm::store::{
    Commit, Condition, Guarantees, ReadSpec, Row, RowCheck, RowMutation, RowStream, ScanSpec, Store, TableSpec,
};
use cellar::orm::{Error, Result};

/// A store failing its k-th mutating call.
pub struct Faulty {
    pub inner: Arc<dyn Store>,
    /// Mutating calls so far.
    pub calls: AtomicU64,
    /// The call to fail (1-based); 0 fails none.
    pub fail_at: AtomicU64,
    /// Fail after the call took effect (a lost acknowledgement) instead of before.
    pub after: AtomicBool,
    /// Offers the inner store's atomic commits; without them, index writes take the protocol
    /// of several writes that stores without commits need.
    pub commits: bool,
}

impl Faulty {
    /// `inner`, failing mutating call `fail_at` (0: none), `after` it applies or before.
    pub fn new(inner: Arc<dyn Store>, fail_at: u64, after: bool) -> Self {
        Faulty {
            inner,
            calls: AtomicU64::new(0),
            fail_at: AtomicU64::new(fail_at),
            after: AtomicBool::new(after),
            commits: true,
        }
    }

    /// This store, hiding the inner store's atomic commits.
    pub fn without_commits(self) -> Self {
        Faulty { commits: false, ..self }
    }

    /// Runs `apply` unless this is the call to fail.
    fn call<T>(&self, apply: impl FnOnce() -> Result<T>) -> Result<T> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if n != self.fail_at.load(Ordering::SeqCst) {
            return apply();
        }
        if self.after.load(Ordering::SeqCst) {
            apply()?;
        }
        Err(Error::Store(format!("injected failure of mutating call {n}")))
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
        self.call(|| self.inner.mutate(table, rows))
    }
    fn read_rows(&self, table: &str, rows: &[Bytes], read: &ReadSpec) -> Result<Vec<Option<Row>>> {
        self.inner.read_rows(table, rows, read)
    }
    fn scan<'a>(&'a self, table: &str, scan: &ScanSpec) -> Result<RowStream<'a>> {
        self.inner.scan(table, scan)
    }
    fn check_and_mutate(&self, table: &str, condition: Condition, mutation: RowMutation) -> Result<bool> {
        self.call(|| self.inner.check_and_mutate(table, condition, mutation))
    }
    fn check_and_mutate_many(&self, table: &str, entries: Vec<(Condition, RowMutation)>) -> Result<Vec<bool>> {
        self.call(|| self.inner.check_and_mutate_many(table, entries))
    }
    fn describe(&self, table: &str) -> Result<Option<TableSpec>> {
        self.inner.describe(table)
    }
    fn split_keys(&self, table: &str) -> Result<Option<Vec<Bytes>>> {
        self.inner.split_keys(table)
    }
    fn increment(&self, table: &str, row: Bytes, family: &str, qualifier: &str, delta: i64) -> Result<i64> {
        self.call(|| self.inner.increment(table, row, family, qualifier, delta))
    }
    fn guarantees(&self) -> Guarantees {
        let mut g = self.inner.guarantees();
        g.atomic_commits &= self.commits;
        g
    }
    fn mutate_group(&self, table: &str, checks: Vec<RowCheck>, rows: Vec<RowMutation>) -> Result<bool> {
        self.call(|| self.inner.mutate_group(table, checks, rows))
    }
    fn commit(&self, commit: Commit) -> Result<bool> {
        self.call(|| self.inner.commit(commit))
    }
    fn read_and_commit(
        &self,
        table: &str,
        row: &Bytes,
        read: &ReadSpec,
        build: &mut dyn FnMut(Option<&Row>) -> Option<Commit>,
    ) -> Result<Option<bool>> {
        self.call(|| self.inner.read_and_commit(table, row, read, build))
    }
}
