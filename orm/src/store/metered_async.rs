//! [`Metered`] as an [`AsyncStore`]: every call counted by the rules on
//! [`Costs`](super::Costs), exactly as the synchronous calls are, over the metered store's own
//! `AsyncStore` (Bigtable) or its calls on the blocking pool.

use bytes::Bytes;

use tracing::Instrument;

use super::latency::Kind;
use super::metered::{add, commit_names, first_row, ScanCall, Volume};
use super::nonblocking::{AsyncCursorBox, AsyncRowCursor, AsyncStore, BuildCommit, Visit};
use super::observe::{outcome, Observed, Outcome};
use super::{
    Call, Commit, Condition, FamilyAlteration, FamilyChange, Guarantees, LentRow, Metered, ReadSpec, Row, RowCheck,
    RowMutation, ScanSpec, TableSpec,
};
use crate::Result;

impl Metered {
    /// The metered store as asynchronous calls reach it.
    fn nonblocking(&self) -> &dyn AsyncStore {
        self.inner.as_async().unwrap_or(&self.offload)
    }
}

/// A scan's lent rows, counted as the synchronous cursor counts them.
struct MeteredCursor<'a> {
    rows: AsyncCursorBox<'a>,
    call: ScanCall<'a>,
}

impl AsyncRowCursor for MeteredCursor<'_> {
    fn advance(&mut self) -> Call<'_, Result<bool>> {
        Call::later(async move {
            let moved = self.rows.advance().await;
            self.call.moved(&moved, self.rows.row());
            moved
        })
    }

    fn row(&self) -> Option<LentRow<'_>> {
        self.rows.row()
    }
}

impl Metered {
    /// An asynchronous call observed by `observed`: `call` makes the store's call when the
    /// future is first polled, inside the span (entered at every poll), and `moved` says what
    /// the answer read or wrote, and the outcome. Dropped before its answer, the call is
    /// reported as cancelled.
    fn observed_async<'a, T: Send + 'a>(
        &'a self,
        observed: Observed<'a>,
        call: impl FnOnce(&'a dyn AsyncStore) -> Call<'a, Result<T>> + Send + 'a,
        moved: impl FnOnce(&T) -> (Outcome<'static>, Volume) + Send + 'a,
    ) -> Call<'a, Result<T>> {
        let span = observed.span().clone();
        Call::later(
            async move {
                let result = call(self.nonblocking()).await;
                let (outcome, volume) = match &result {
                    Ok(answer) => moved(answer),
                    Err(e) => (Outcome::Failed(e), Volume::default()),
                };
                observed.finish(outcome, volume);
                result
            }
            .instrument(span),
        )
    }

    fn admin_async<'a, T: Send + 'a>(
        &'a self,
        op: &'static str,
        table: &str,
        call: impl FnOnce(&'a dyn AsyncStore) -> Call<'a, Result<T>> + Send + 'a,
    ) -> Call<'a, Result<T>> {
        add(&self.counters.admin, 1);
        let observed = self.observer.start(Kind::Admin, op, table, None);
        self.observed_async(observed, call, |_| (Outcome::Ok, Volume::default()))
    }
}

impl AsyncStore for Metered {
    fn ensure_table<'a>(&'a self, spec: &'a TableSpec) -> Call<'a, Result<()>> {
        self.admin_async("ensure_table", &spec.name, |s| s.ensure_table(spec))
    }

    fn alter_families<'a>(
        &'a self,
        table: &'a str,
        changes: &'a [FamilyChange],
    ) -> Call<'a, Result<Vec<FamilyAlteration>>> {
        self.admin_async("alter_families", table, |s| s.alter_families(table, changes))
    }

    fn mutate<'a>(&'a self, table: &'a str, rows: Vec<RowMutation>) -> Call<'a, Result<()>> {
        add(&self.counters.mutates, 1);
        let volume = Volume::sum(&rows);
        let observed = self.observer.start(Kind::Mutate, "mutate", table, first_row(&rows));
        self.observed_async(
            observed,
            |s| s.mutate(table, rows),
            move |_| {
                self.counters.written(volume);
                (Outcome::Ok, volume)
            },
        )
    }

    fn mutate_row<'a>(&'a self, table: &'a str, row: RowMutation) -> Call<'a, Result<()>> {
        add(&self.counters.mutates, 1);
        let volume = Volume::written(&row);
        let observed = self.observer.start(Kind::Mutate, "mutate_row", table, Some(&row.row));
        self.observed_async(
            observed,
            |s| s.mutate_row(table, row),
            move |_| {
                self.counters.written(volume);
                (Outcome::Ok, volume)
            },
        )
    }

    fn read_rows<'a>(
        &'a self,
        table: &'a str,
        rows: &'a [Bytes],
        read: &'a ReadSpec,
    ) -> Call<'a, Result<Vec<Option<Row>>>> {
        add(&self.counters.gets, 1);
        let observed = self.observer.start(Kind::Get, "read_rows", table, rows.first());
        self.observed_async(
            observed,
            |s| s.read_rows(table, rows, read),
            move |found| {
                let mut volume = Volume::default();
                for row in found.iter().flatten() {
                    volume += Volume::read(row.lend());
                }
                self.counters.read(volume);
                (Outcome::Ok, volume)
            },
        )
    }

    fn read_rows_with<'a>(
        &'a self,
        table: &'a str,
        rows: &'a [Bytes],
        read: &'a ReadSpec,
        visit: &'a mut Visit<'_>,
    ) -> Call<'a, Result<()>> {
        add(&self.counters.gets, 1);
        let observed = self.observer.start(Kind::Get, "read_rows", table, rows.first());
        let span = observed.span().clone();
        Call::later(
            async move {
                let mut volume = Volume::default();
                let mut counted = |i: usize, found: Option<LentRow<'_>>| {
                    if let Some(row) = found {
                        volume += Volume::read(row);
                    }
                    visit(i, found);
                };
                let read = self.nonblocking().read_rows_with(table, rows, read, &mut counted).await;
                // Rows lent before a failure were read all the same.
                self.counters.read(volume);
                observed.finish(outcome(&read), volume);
                read
            }
            .instrument(span),
        )
    }

    fn scan_cursor<'a>(&'a self, table: &'a str, scan: &'a ScanSpec) -> Call<'a, Result<AsyncCursorBox<'a>>> {
        add(&self.counters.scans, 1);
        let observed = self.observer.start(Kind::Scan, "scan", table, Some(&scan.start));
        let span = observed.span().clone();
        Call::later(
            async move {
                match self.nonblocking().scan_cursor(table, scan).await {
                    Ok(rows) => {
                        Ok(Box::new(MeteredCursor { rows, call: ScanCall::new(self, observed) }) as AsyncCursorBox<'a>)
                    }
                    Err(e) => {
                        observed.finish(Outcome::Failed(&e), Volume::default());
                        Err(e)
                    }
                }
            }
            .instrument(span),
        )
    }

    fn check_and_mutate<'a>(
        &'a self,
        table: &'a str,
        condition: Condition,
        mutation: RowMutation,
    ) -> Call<'a, Result<bool>> {
        add(&self.counters.check_and_mutates, 1);
        let volume = Volume::written(&mutation);
        let observed = self.observer.start(Kind::CheckAndMutate, "check_and_mutate", table, Some(&mutation.row));
        let call = |s: &'a dyn AsyncStore| s.check_and_mutate(table, condition, mutation);
        self.observed_async(observed, call, move |&applied| self.applied(applied, volume))
    }

    fn check_and_mutate_many<'a>(
        &'a self,
        table: &'a str,
        entries: Vec<(Condition, RowMutation)>,
    ) -> Call<'a, Result<Vec<bool>>> {
        add(&self.counters.check_and_mutates, 1);
        let volumes: Vec<Volume> = entries.iter().map(|(_, m)| Volume::written(m)).collect();
        let first = entries.first().map(|(_, m)| &m.row);
        let observed = self.observer.start(Kind::CheckAndMutate, "check_and_mutate_many", table, first);
        let call = |s: &'a dyn AsyncStore| s.check_and_mutate_many(table, entries);
        self.observed_async(observed, call, move |applied| self.applied_many(&volumes, applied))
    }

    fn describe<'a>(&'a self, table: &'a str) -> Call<'a, Result<Option<TableSpec>>> {
        self.admin_async("describe", table, |s| s.describe(table))
    }

    fn split_keys<'a>(&'a self, table: &'a str) -> Call<'a, Result<Option<Vec<Bytes>>>> {
        self.admin_async("split_keys", table, |s| s.split_keys(table))
    }

    fn increment<'a>(
        &'a self,
        table: &'a str,
        row: Bytes,
        family: &'a str,
        qualifier: &'a str,
        delta: i64,
    ) -> Call<'a, Result<i64>> {
        add(&self.counters.increments, 1);
        let volume = Volume::counter(&row, family, qualifier);
        let observed = self.observer.start(Kind::Increment, "increment", table, Some(&row));
        let call = move |s: &'a dyn AsyncStore| s.increment(table, row, family, qualifier, delta);
        self.observed_async(observed, call, move |_| self.incremented(volume))
    }

    fn guarantees(&self) -> Guarantees {
        self.inner.guarantees()
    }

    fn mutate_group<'a>(
        &'a self,
        table: &'a str,
        checks: Vec<RowCheck>,
        rows: Vec<RowMutation>,
    ) -> Call<'a, Result<bool>> {
        add(&self.counters.group_mutates, 1);
        let volume = Volume::sum(&rows);
        let observed = self.observer.start(Kind::GroupMutate, "mutate_group", table, first_row(&rows));
        let call = |s: &'a dyn AsyncStore| s.mutate_group(table, checks, rows);
        self.observed_async(observed, call, move |&applied| self.applied(applied, volume))
    }

    fn commit(&self, commit: Commit) -> Call<'_, Result<bool>> {
        add(&self.counters.group_mutates, 1);
        let volume = Volume::sum(commit.rows.iter().map(|(_, r)| r));
        let (table, first) = commit_names(&commit);
        let observed = self.observer.start(Kind::GroupMutate, "commit", table, first);
        self.observed_async(observed, |s| s.commit(commit), move |&applied| self.applied(applied, volume))
    }

    fn read_and_commit<'a>(
        &'a self,
        table: &'a str,
        row: &'a Bytes,
        read: &'a ReadSpec,
        build: &'a mut BuildCommit<'_>,
    ) -> Call<'a, Result<Option<bool>>> {
        add(&self.counters.group_mutates, 1);
        let observed = self.observer.start(Kind::GroupMutate, "read_and_commit", table, Some(row));
        let span = observed.span().clone();
        Call::later(
            async move {
                let mut volume = None;
                let counters = &self.counters;
                let mut counted = |found: Option<&Row>| {
                    if let Some(found) = found {
                        counters.read(Volume::read(found.lend()));
                    }
                    let commit = build(found);
                    volume = commit.as_ref().map(|c| Volume::sum(c.rows.iter().map(|(_, r)| r)));
                    commit
                };
                let applied = self.nonblocking().read_and_commit(table, row, read, &mut counted).await;
                let (outcome, moved) = self.committed(&applied, volume);
                observed.finish(outcome, moved);
                applied
            }
            .instrument(span),
        )
    }
}
