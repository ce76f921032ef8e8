//! [`Metered`] as an [`AsyncStore`]: every call counted by the rules on
//! [`Costs`](super::Costs), exactly as the synchronous calls are, over the metered store's own
//! `AsyncStore` (Bigtable) or its calls on the blocking pool.

use bytes::Bytes;

use super::metered::{add, Counters, Volume};
use super::nonblocking::{AsyncCursorBox, AsyncRowCursor, AsyncStore, BuildCommit, Visit};
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
    counters: &'a Counters,
    pending: Volume,
}

impl AsyncRowCursor for MeteredCursor<'_> {
    fn advance(&mut self) -> Call<'_, Result<bool>> {
        Call::later(async move {
            let moved = self.rows.advance().await;
            self.counters.moved(&moved, self.rows.row(), &mut self.pending);
            moved
        })
    }

    fn row(&self) -> Option<LentRow<'_>> {
        self.rows.row()
    }
}

impl Drop for MeteredCursor<'_> {
    fn drop(&mut self) {
        self.counters.read(std::mem::take(&mut self.pending));
    }
}

impl AsyncStore for Metered {
    fn ensure_table<'a>(&'a self, spec: &'a TableSpec) -> Call<'a, Result<()>> {
        add(&self.counters.admin, 1);
        self.nonblocking().ensure_table(spec)
    }

    fn alter_families<'a>(
        &'a self,
        table: &'a str,
        changes: &'a [FamilyChange],
    ) -> Call<'a, Result<Vec<FamilyAlteration>>> {
        add(&self.counters.admin, 1);
        self.nonblocking().alter_families(table, changes)
    }

    fn mutate<'a>(&'a self, table: &'a str, rows: Vec<RowMutation>) -> Call<'a, Result<()>> {
        add(&self.counters.mutates, 1);
        let volume = Volume::sum(&rows);
        Call::later(async move {
            self.nonblocking().mutate(table, rows).await?;
            self.counters.written(volume);
            Ok(())
        })
    }

    fn mutate_row<'a>(&'a self, table: &'a str, row: RowMutation) -> Call<'a, Result<()>> {
        add(&self.counters.mutates, 1);
        let volume = Volume::written(&row);
        Call::later(async move {
            self.nonblocking().mutate_row(table, row).await?;
            self.counters.written(volume);
            Ok(())
        })
    }

    fn read_rows<'a>(
        &'a self,
        table: &'a str,
        rows: &'a [Bytes],
        read: &'a ReadSpec,
    ) -> Call<'a, Result<Vec<Option<Row>>>> {
        add(&self.counters.gets, 1);
        Call::later(async move {
            let found = self.nonblocking().read_rows(table, rows, read).await?;
            let mut volume = Volume::default();
            for row in found.iter().flatten() {
                volume += Volume::read(row.lend());
            }
            self.counters.read(volume);
            Ok(found)
        })
    }

    fn read_rows_with<'a>(
        &'a self,
        table: &'a str,
        rows: &'a [Bytes],
        read: &'a ReadSpec,
        visit: &'a mut Visit<'_>,
    ) -> Call<'a, Result<()>> {
        add(&self.counters.gets, 1);
        Call::later(async move {
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
            read
        })
    }

    fn scan_cursor<'a>(&'a self, table: &'a str, scan: &'a ScanSpec) -> Call<'a, Result<AsyncCursorBox<'a>>> {
        add(&self.counters.scans, 1);
        Call::later(async move {
            let rows = self.nonblocking().scan_cursor(table, scan).await?;
            Ok(Box::new(MeteredCursor { rows, counters: &self.counters, pending: Volume::default() })
                as AsyncCursorBox<'a>)
        })
    }

    fn check_and_mutate<'a>(
        &'a self,
        table: &'a str,
        condition: Condition,
        mutation: RowMutation,
    ) -> Call<'a, Result<bool>> {
        add(&self.counters.check_and_mutates, 1);
        let volume = Volume::written(&mutation);
        Call::later(async move {
            let applied = self.nonblocking().check_and_mutate(table, condition, mutation).await?;
            if applied {
                self.counters.written(volume);
            }
            Ok(applied)
        })
    }

    fn check_and_mutate_many<'a>(
        &'a self,
        table: &'a str,
        entries: Vec<(Condition, RowMutation)>,
    ) -> Call<'a, Result<Vec<bool>>> {
        add(&self.counters.check_and_mutates, 1);
        let volumes: Vec<Volume> = entries.iter().map(|(_, m)| Volume::written(m)).collect();
        Call::later(async move {
            let applied = self.nonblocking().check_and_mutate_many(table, entries).await?;
            for (volume, _) in volumes.into_iter().zip(&applied).filter(|(_, &a)| a) {
                self.counters.written(volume);
            }
            Ok(applied)
        })
    }

    fn describe<'a>(&'a self, table: &'a str) -> Call<'a, Result<Option<TableSpec>>> {
        add(&self.counters.admin, 1);
        self.nonblocking().describe(table)
    }

    fn split_keys<'a>(&'a self, table: &'a str) -> Call<'a, Result<Option<Vec<Bytes>>>> {
        add(&self.counters.admin, 1);
        self.nonblocking().split_keys(table)
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
        Call::later(async move {
            let value = self.nonblocking().increment(table, row, family, qualifier, delta).await?;
            self.counters.read(volume);
            self.counters.written(volume);
            Ok(value)
        })
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
        Call::later(async move {
            let applied = self.nonblocking().mutate_group(table, checks, rows).await?;
            if applied {
                self.counters.written(volume);
            }
            Ok(applied)
        })
    }

    fn commit(&self, commit: Commit) -> Call<'_, Result<bool>> {
        add(&self.counters.group_mutates, 1);
        let volume = Volume::sum(commit.rows.iter().map(|(_, r)| r));
        Call::later(async move {
            let applied = self.nonblocking().commit(commit).await?;
            if applied {
                self.counters.written(volume);
            }
            Ok(applied)
        })
    }

    fn read_and_commit<'a>(
        &'a self,
        table: &'a str,
        row: &'a Bytes,
        read: &'a ReadSpec,
        build: &'a mut BuildCommit<'_>,
    ) -> Call<'a, Result<Option<bool>>> {
        add(&self.counters.group_mutates, 1);
        Call::later(async move {
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
            let applied = self.nonblocking().read_and_commit(table, row, read, &mut counted).await?;
            if let (Some(true), Some(volume)) = (applied, volume) {
                self.counters.written(volume);
            }
            Ok(applied)
        })
    }
}
