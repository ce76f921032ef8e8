//! A store that runs a hook once, right before the first call of a chosen kind: the
//! application writing between a job's read and its write, at the worst moment.

use std::sync::Mutex;

use bytes::Bytes;
use cellar::orm::store::{
    Commit, Condition, Guarantees, ReadSpec, Row, RowCheck, RowMutation, RowStream, ScanSpec, Store, TableSpec,
};
use cellar::orm::Result;

/// Which calls can trigger the hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    CheckAndMutate,
    CheckAndMutateMany,
    Mutate,
}

type Hook = Box<dyn FnOnce() + Send>;
/// Picks the call the hook runs before: its kind and table.
type When = Box<dyn Fn(Call, &str) -> bool + Send + Sync>;

/// A store (the embedded one, or a wrapper of it), with a hook run before the first call
/// `when` accepts.
pub struct Hooked {
    inner: Box<dyn Store>,
    when: When,
    hook: Mutex<Option<Hook>>,
}

impl Hooked {
    /// `hook` runs once, before the first call (kind, table) that `when` accepts.
    pub fn new(
        inner: impl Store + 'static,
        when: impl Fn(Call, &str) -> bool + Send + Sync + 'static,
        hook: impl FnOnce() + Send + 'static,
    ) -> Self {
        Hooked { inner: Box::new(inner), when: Box::new(when), hook: Mutex::new(Some(Box::new(hook))) }
    }

    fn before(&self, call: Call, table: &str) {
        if (self.when)(call, table) {
            if let Some(hook) = self.hook.lock().unwrap().take() {
                hook();
            }
        }
    }
}

impl Store for Hooked {
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
        self.before(Call::Mutate, table);
        self.inner.mutate(table, rows)
    }
    fn read_rows(&self, table: &str, rows: &[Bytes], read: &ReadSpec) -> Result<Vec<Option<Row>>> {
        self.inner.read_rows(table, rows, read)
    }
    fn scan<'a>(&'a self, table: &str, scan: &ScanSpec) -> Result<RowStream<'a>> {
        self.inner.scan(table, scan)
    }
    fn check_and_mutate(&self, table: &str, condition: Condition, mutation: RowMutation) -> Result<bool> {
        self.before(Call::CheckAndMutate, table);
        self.inner.check_and_mutate(table, condition, mutation)
    }
    fn check_and_mutate_many(&self, table: &str, entries: Vec<(Condition, RowMutation)>) -> Result<Vec<bool>> {
        self.before(Call::CheckAndMutateMany, table);
        self.inner.check_and_mutate_many(table, entries)
    }
    fn split_keys(&self, table: &str) -> Result<Option<Vec<Bytes>>> {
        self.inner.split_keys(table)
    }
    fn increment(&self, table: &str, row: Bytes, family: &str, qualifier: &str, delta: i64) -> Result<i64> {
        self.inner.increment(table, row, family, qualifier, delta)
    }
    fn guarantees(&self) -> Guarantees {
        self.inner.guarantees()
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
