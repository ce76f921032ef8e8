//! A store whose asynchronous calls each stop once before they run: a test polls an
//! asynchronous operation one store call at a time and can drop it at any of its await points.
//! Synchronous calls go straight through.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use cellar::orm::store::{
    AsyncCursorBox, AsyncStore, BuildCommit, Call, Commit, Condition, FamilyAlteration, FamilyChange, Guarantees,
    LentRow, ReadSpec, Row, RowCheck, RowCursorBox, RowMutation, RowStream, ScanSpec, Store, TableSpec, Visit,
};
use cellar::orm::Result;

/// `inner`, its asynchronous calls stopping once each; without atomic commits if `commits`
/// is false (indexed writes then take the protocol of several writes, as on Bigtable).
pub struct Stepped {
    inner: Arc<dyn Store>,
    commits: bool,
    /// Claims what Bigtable does: no atomic row groups, and other processes may write.
    shared: bool,
}

impl Stepped {
    pub fn new(inner: Arc<dyn Store>, commits: bool) -> Self {
        Stepped { inner, commits, shared: false }
    }

    /// `inner` with Bigtable's guarantees: every aggregate write goes through the intent
    /// protocol, with fences.
    #[allow(dead_code)]
    pub fn shared(inner: Arc<dyn Store>) -> Self {
        Stepped { inner, commits: false, shared: true }
    }
}

/// Pending once (waking its task at once), then ready.
struct Stop(bool);

impl Future for Stop {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// `call` after one stop.
fn stepped<'a, T: Send + 'a>(call: impl FnOnce() -> Call<'a, T> + Send + 'a) -> Call<'a, T> {
    Call::later(async move {
        Stop(false).await;
        call().await
    })
}

impl AsyncStore for Stepped {
    fn ensure_table<'a>(&'a self, spec: &'a TableSpec) -> Call<'a, Result<()>> {
        Call::ready(self.inner.ensure_table(spec))
    }
    fn alter_families<'a>(
        &'a self,
        table: &'a str,
        changes: &'a [FamilyChange],
    ) -> Call<'a, Result<Vec<FamilyAlteration>>> {
        Call::ready(self.inner.alter_families(table, changes))
    }
    fn mutate<'a>(&'a self, table: &'a str, rows: Vec<RowMutation>) -> Call<'a, Result<()>> {
        stepped(move || Call::ready(self.inner.mutate(table, rows)))
    }
    fn mutate_row<'a>(&'a self, table: &'a str, row: RowMutation) -> Call<'a, Result<()>> {
        stepped(move || Call::ready(self.inner.mutate_row(table, row)))
    }
    fn read_rows<'a>(
        &'a self,
        table: &'a str,
        rows: &'a [Bytes],
        read: &'a ReadSpec,
    ) -> Call<'a, Result<Vec<Option<Row>>>> {
        stepped(move || Call::ready(self.inner.read_rows(table, rows, read)))
    }
    fn read_rows_with<'a>(
        &'a self,
        table: &'a str,
        rows: &'a [Bytes],
        read: &'a ReadSpec,
        visit: &'a mut Visit<'_>,
    ) -> Call<'a, Result<()>> {
        stepped(move || Call::ready(self.inner.read_rows_with(table, rows, read, visit)))
    }
    fn scan_cursor<'a>(&'a self, table: &'a str, scan: &'a ScanSpec) -> Call<'a, Result<AsyncCursorBox<'a>>> {
        stepped(move || {
            let cursor = self.inner.scan_cursor(table, scan);
            Call::ready(cursor.map(|c| Box::new(SteppedCursor(c)) as AsyncCursorBox<'a>))
        })
    }
    fn check_and_mutate<'a>(
        &'a self,
        table: &'a str,
        condition: Condition,
        mutation: RowMutation,
    ) -> Call<'a, Result<bool>> {
        stepped(move || Call::ready(self.inner.check_and_mutate(table, condition, mutation)))
    }
    fn check_and_mutate_many<'a>(
        &'a self,
        table: &'a str,
        entries: Vec<(Condition, RowMutation)>,
    ) -> Call<'a, Result<Vec<bool>>> {
        stepped(move || Call::ready(self.inner.check_and_mutate_many(table, entries)))
    }
    fn describe<'a>(&'a self, table: &'a str) -> Call<'a, Result<Option<TableSpec>>> {
        Call::ready(self.inner.describe(table))
    }
    fn split_keys<'a>(&'a self, table: &'a str) -> Call<'a, Result<Option<Vec<Bytes>>>> {
        Call::ready(self.inner.split_keys(table))
    }
    fn increment<'a>(
        &'a self,
        table: &'a str,
        row: Bytes,
        family: &'a str,
        qualifier: &'a str,
        delta: i64,
    ) -> Call<'a, Result<i64>> {
        stepped(move || Call::ready(self.inner.increment(table, row, family, qualifier, delta)))
    }
    fn guarantees(&self) -> Guarantees {
        Store::guarantees(self)
    }
    fn mutate_group<'a>(
        &'a self,
        table: &'a str,
        checks: Vec<RowCheck>,
        rows: Vec<RowMutation>,
    ) -> Call<'a, Result<bool>> {
        stepped(move || Call::ready(self.inner.mutate_group(table, checks, rows)))
    }
    fn commit(&self, commit: Commit) -> Call<'_, Result<bool>> {
        stepped(move || Call::ready(self.inner.commit(commit)))
    }
    fn read_and_commit<'a>(
        &'a self,
        table: &'a str,
        row: &'a Bytes,
        read: &'a ReadSpec,
        build: &'a mut BuildCommit<'_>,
    ) -> Call<'a, Result<Option<bool>>> {
        stepped(move || Call::ready(self.inner.read_and_commit(table, row, read, &mut |r| build(r))))
    }
}

/// A scan cursor whose every move stops once.
struct SteppedCursor<'a>(RowCursorBox<'a>);

impl cellar::orm::store::AsyncRowCursor for SteppedCursor<'_> {
    fn advance(&mut self) -> Call<'_, Result<bool>> {
        stepped(move || Call::ready(self.0.advance()))
    }
    fn row(&self) -> Option<LentRow<'_>> {
        self.0.row()
    }
}

impl Store for Stepped {
    fn ensure_table(&self, spec: &TableSpec) -> Result<()> {
        self.inner.ensure_table(spec)
    }
    fn alter_families(&self, table: &str, changes: &[FamilyChange]) -> Result<Vec<FamilyAlteration>> {
        self.inner.alter_families(table, changes)
    }
    fn mutate(&self, table: &str, rows: Vec<RowMutation>) -> Result<()> {
        self.inner.mutate(table, rows)
    }
    fn read_rows(&self, table: &str, rows: &[Bytes], read: &ReadSpec) -> Result<Vec<Option<Row>>> {
        self.inner.read_rows(table, rows, read)
    }
    fn scan<'a>(&'a self, table: &str, scan: &ScanSpec) -> Result<RowStream<'a>> {
        self.inner.scan(table, scan)
    }
    fn scan_cursor<'a>(&'a self, table: &str, scan: &ScanSpec) -> Result<RowCursorBox<'a>> {
        self.inner.scan_cursor(table, scan)
    }
    fn check_and_mutate(&self, table: &str, condition: Condition, mutation: RowMutation) -> Result<bool> {
        self.inner.check_and_mutate(table, condition, mutation)
    }
    fn check_and_mutate_many(&self, table: &str, entries: Vec<(Condition, RowMutation)>) -> Result<Vec<bool>> {
        self.inner.check_and_mutate_many(table, entries)
    }
    fn describe(&self, table: &str) -> Result<Option<TableSpec>> {
        self.inner.describe(table)
    }
    fn split_keys(&self, table: &str) -> Result<Option<Vec<Bytes>>> {
        self.inner.split_keys(table)
    }
    fn increment(&self, table: &str, row: Bytes, family: &str, qualifier: &str, delta: i64) -> Result<i64> {
        self.inner.increment(table, row, family, qualifier, delta)
    }
    fn guarantees(&self) -> Guarantees {
        let g = self.inner.guarantees();
        if self.shared {
            Guarantees::new(false, false)
        } else if self.commits {
            g
        } else {
            Guarantees::new(g.atomic_row_groups, g.single_process)
        }
    }
    fn as_async(&self) -> Option<&dyn AsyncStore> {
        Some(self)
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

/// Polls `future` `polls` times with a waker that does nothing (over a [`Stepped`] store, each
/// store call takes one poll more); true if it finished.
#[allow(dead_code)]
pub fn poll_times<F: Future>(future: F, polls: usize) -> bool {
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    (0..polls).any(|_| future.as_mut().poll(&mut cx).is_ready())
}
