//! The store's calls as futures: [`AsyncStore`] for [`BigtableStore`].
//!
//! Each call's work runs as a task on the store's own runtime, and the call's future awaits
//! the task: it can be polled from any executor or thread (an application's runtime, or
//! `drive` for the synchronous `Store`), needs no tokio context of its caller's, and holds no
//! thread while it waits. A task starts when its call is first polled: a call never awaited
//! does nothing.
//!
//! A call's future dropped before it answers: a read's task is aborted, so nothing more is
//! fetched; a write's task runs to its end, so a write that started is not torn — its caller
//! just does not learn how it ended, as if its process had stopped there.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::task::JoinHandle;

use super::*;
use crate::store::{AsyncCursorBox, BuildCommit, Call, Visit};

/// What becomes of a call's task when its future is dropped.
#[derive(Debug, Clone, Copy)]
pub(super) enum OnDrop {
    /// Stopped at its next await: reads.
    Abort,
    /// Run to its end: writes.
    Finish,
}

/// A task of the store's runtime, as a call's future awaits it.
pub(super) struct Task<T> {
    handle: JoinHandle<Result<T>>,
    on_drop: OnDrop,
}

impl<T: Send + 'static> Task<T> {
    /// Starts `work` on `runtime`.
    pub(super) fn spawn(
        runtime: &Runtime,
        on_drop: OnDrop,
        work: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Task<T> {
        // The call's span (the metered store's) goes with the work: what it reports, retries,
        // nests under the call that started it.
        let work = tracing::Instrument::instrument(work, tracing::Span::current());
        let handle = match on_drop {
            OnDrop::Abort => runtime.spawn(work),
            OnDrop::Finish => {
                // The writer making the call stays live until it has ended (see
                // `writer::Owner`): it may apply after its caller is gone.
                let writer = crate::writer::keep_alive();
                runtime.spawn(async move {
                    let answer = work.await;
                    drop(writer);
                    answer
                })
            }
        };
        Task { handle, on_drop }
    }
}

impl<T> Future for Task<T> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        Pin::new(&mut self.handle).poll(cx).map(|joined| {
            joined.unwrap_or_else(|e| Err(Error::Store(format!("a Bigtable call failed to complete: {e}"))))
        })
    }
}

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        // Aborting a task that has ended does nothing.
        if matches!(self.on_drop, OnDrop::Abort) {
            self.handle.abort();
        }
    }
}

impl BigtableStore {
    /// Starts `work` on the store's runtime now.
    pub(super) fn spawn<T: Send + 'static>(
        &self,
        on_drop: OnDrop,
        work: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Result<Task<T>> {
        Ok(Task::spawn(self.runtime()?, on_drop, work))
    }

    /// A call whose work runs as a task of the store's runtime, started when the call is
    /// first polled.
    pub(super) fn call<'a, T: Send + 'static>(
        &'a self,
        on_drop: OnDrop,
        work: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Call<'a, Result<T>> {
        Call::later(async move { self.spawn(on_drop, work)?.await })
    }
}

/// The error of [`AsyncStore::read_and_commit`] and [`Store::read_and_commit`].
pub(super) fn no_read_and_commit() -> Error {
    Error::Unsupported(
        "read a row and apply changes to rows of several tables atomically: Cloud Bigtable has no multi-row \
         transactions"
            .into(),
    )
}

impl AsyncStore for BigtableStore {
    fn ensure_table<'a>(&'a self, spec: &'a TableSpec) -> Call<'a, Result<()>> {
        let conn = self.inner.conn.clone();
        let spec = spec.clone();
        self.call(OnDrop::Finish, async move {
            let ctx = &conn.ctx;
            let mut existing = get_table(ctx, &spec.name).await?;
            if existing.is_none() {
                create_table(ctx, &spec).await?;
                existing = get_table(ctx, &spec.name).await?;
            }
            let mut existing = existing.ok_or_else(|| Error::Remote {
                rpc: "CreateTable",
                table: spec.name.clone(),
                row: None,
                code: "NotFound".into(),
                message: "the table vanished right after it was created".into(),
            })?;
            let missing: Vec<&FamilySpec> =
                spec.families.iter().filter(|f| !existing.iter().any(|e| e.name == f.name)).collect();
            if !missing.is_empty() {
                add_families(ctx, &spec.name, &missing).await?;
                existing = get_table(ctx, &spec.name).await?.unwrap_or_default();
            }
            for f in &spec.families {
                match existing.iter().find(|e| e.name == f.name) {
                    Some(e) if e.max_versions == f.max_versions && e.ttl_secs == f.ttl_secs => {}
                    Some(e) => return Err(e.mismatch(&spec.name, f)),
                    None => {
                        return Err(Error::SchemaMismatch {
                            table: spec.name.clone(),
                            reason: format!("family `{}` could not be added", f.name),
                        })
                    }
                }
            }
            conn.remember(&spec.name, existing);
            Ok(())
        })
    }

    /// As [`Store::alter_families`] (see there for what Bigtable keeps of a change).
    fn alter_families<'a>(
        &'a self,
        table: &'a str,
        changes: &'a [FamilyChange],
    ) -> Call<'a, Result<Vec<FamilyAlteration>>> {
        if let Err(e) = crate::store::check_changes(table, changes) {
            return Call::ready(Err(e));
        }
        let conn = self.inner.conn.clone();
        let (table, changes) = (table.to_string(), changes.to_vec());
        self.call(OnDrop::Finish, async move {
            let ctx = &conn.ctx;
            let existing = get_table(ctx, &table).await?.ok_or_else(|| crate::store::no_table_to_alter(&table))?;
            let (modifications, alterations, expected) = family_modifications(&existing, &changes);
            if modifications.is_empty() {
                conn.remember(&table, existing);
                return Ok(alterations);
            }
            modify_families(ctx, &table, modifications).await?;
            // The families as Bigtable now keeps them, for read filters; as sent if the table
            // vanished meanwhile.
            let families = get_table(ctx, &table).await?.unwrap_or(expected);
            conn.remember(&table, families);
            Ok(alterations)
        })
    }

    fn mutate<'a>(&'a self, table: &'a str, rows: Vec<RowMutation>) -> Call<'a, Result<()>> {
        let entries = match entries(table, rows, now_ms()) {
            Ok(entries) if entries.is_empty() => return Call::ready(Ok(())),
            Ok(entries) => entries,
            Err(e) => return Call::ready(Err(e)),
        };
        let Conn { ctx, flow, .. } = self.inner.conn.clone();
        self.call(OnDrop::Finish, mutate_all(ctx, flow, table.to_string(), entries))
    }

    fn mutate_row<'a>(&'a self, table: &'a str, row: RowMutation) -> Call<'a, Result<()>> {
        AsyncStore::mutate(self, table, vec![row])
    }

    fn read_rows<'a>(
        &'a self,
        table: &'a str,
        rows: &'a [Bytes],
        read: &'a ReadSpec,
    ) -> Call<'a, Result<Vec<Option<Row>>>> {
        if rows.is_empty() {
            return Call::ready(Ok(Vec::new()));
        }
        let conn = self.inner.conn.clone();
        let (table, wanted, read) = (table.to_string(), rows.to_vec(), read.clone());
        self.call(OnDrop::Abort, async move {
            let mut keys = wanted.clone();
            keys.sort();
            keys.dedup();
            let rows = pb::RowSet { row_keys: keys, row_ranges: Vec::new() };
            let (request, window) = conn.read_request(&table, rows, &read, 0, false).await?;
            let found = read_all(conn.ctx, table, request, window).await?;
            Ok(wanted.iter().map(|k| found.get(k).cloned()).collect())
        })
    }

    fn read_rows_with<'a>(
        &'a self,
        table: &'a str,
        rows: &'a [Bytes],
        read: &'a ReadSpec,
        visit: &'a mut Visit<'_>,
    ) -> Call<'a, Result<()>> {
        let read = AsyncStore::read_rows(self, table, rows, read);
        Call::later(async move {
            for (i, row) in read.await?.iter().enumerate() {
                visit(i, row.as_ref().map(Row::lend));
            }
            Ok(())
        })
    }

    fn scan_cursor<'a>(&'a self, table: &'a str, scan: &'a ScanSpec) -> Call<'a, Result<AsyncCursorBox<'a>>> {
        let open = self.open_scan(table, scan);
        Call::later(async move { Ok(Box::new(open.await?) as AsyncCursorBox<'a>) })
    }

    fn check_and_mutate<'a>(
        &'a self,
        table: &'a str,
        condition: Condition,
        mutation: RowMutation,
    ) -> Call<'a, Result<bool>> {
        let conn = self.inner.conn.clone();
        let table = table.to_string();
        self.call(OnDrop::Finish, async move {
            let call = conn.conditional(&table, condition, mutation).await?;
            call.apply(conn.ctx, table).await
        })
    }

    fn check_and_mutate_many<'a>(
        &'a self,
        table: &'a str,
        entries: Vec<(Condition, RowMutation)>,
    ) -> Call<'a, Result<Vec<bool>>> {
        let conn = self.inner.conn.clone();
        let table = table.to_string();
        self.call(OnDrop::Finish, async move {
            // Entries on different rows run at once; those on one row in order, each seeing
            // the ones before. Every entry is built before any is sent: an entry that cannot
            // be built (an unknown family) fails the call with nothing applied.
            let n = entries.len();
            let mut by_row: Vec<Vec<usize>> = Vec::new();
            let mut index: HashMap<Bytes, usize> = HashMap::new();
            let mut calls = Vec::with_capacity(n);
            for (i, (condition, mutation)) in entries.into_iter().enumerate() {
                let slot = *index.entry(mutation.row.clone()).or_insert_with(|| {
                    by_row.push(Vec::new());
                    by_row.len() - 1
                });
                by_row[slot].push(i);
                calls.push(Some(conn.conditional(&table, condition, mutation).await?));
            }
            let limit = Arc::new(tokio::sync::Semaphore::new(CONCURRENT_CHECKS));
            let mut groups = Vec::with_capacity(by_row.len());
            for indexes in by_row {
                let group: Vec<_> = indexes.iter().filter_map(|&i| calls[i].take().map(|c| (i, c))).collect();
                let (limit, ctx, table) = (limit.clone(), conn.ctx.clone(), table.clone());
                let group = async move {
                    let _permit = limit.acquire_owned().await;
                    let mut out = Vec::with_capacity(group.len());
                    for (i, call) in group {
                        out.push((i, call.apply(ctx.clone(), table.clone()).await?));
                    }
                    Ok::<_, Error>(out)
                };
                groups.push(tokio::spawn(tracing::Instrument::in_current_span(group)));
            }
            let mut results = vec![false; n];
            let mut first_error = None;
            for group in groups {
                match group.await {
                    Ok(Ok(done)) => done.into_iter().for_each(|(i, applied)| results[i] = applied),
                    Ok(Err(e)) => {
                        first_error.get_or_insert(e);
                    }
                    Err(e) => {
                        first_error.get_or_insert(Error::Store(format!("a Bigtable call failed to complete: {e}")));
                    }
                }
            }
            first_error.map_or(Ok(results), Err)
        })
    }

    fn describe<'a>(&'a self, table: &'a str) -> Call<'a, Result<Option<TableSpec>>> {
        let ctx = self.inner.conn.ctx.clone();
        let name = table.to_string();
        self.call(OnDrop::Abort, async move {
            let Some(families) = get_table(&ctx, &name).await? else { return Ok(None) };
            let split_keys = sample_row_keys(&ctx, &name).await?.into_iter().map(|k| k.to_vec()).collect();
            Ok(Some(TableSpec {
                name,
                families,
                split_keys,
                split_policy: crate::store::SplitPolicy::MidKey,
                deferred: false,
            }))
        })
    }

    fn split_keys<'a>(&'a self, table: &'a str) -> Call<'a, Result<Option<Vec<Bytes>>>> {
        let ctx = self.inner.conn.ctx.clone();
        let table = table.to_string();
        self.call(OnDrop::Abort, async move {
            if get_table(&ctx, &table).await?.is_none() {
                return Ok(None);
            }
            sample_row_keys(&ctx, &table).await.map(Some)
        })
    }

    fn increment<'a>(
        &'a self,
        table: &'a str,
        row: Bytes,
        family: &'a str,
        qualifier: &'a str,
        delta: i64,
    ) -> Call<'a, Result<i64>> {
        use pb::read_modify_write_rule::Rule;
        let ctx = self.inner.conn.ctx.clone();
        let table = table.to_string();
        let (family, qualifier) = (family.to_string(), Bytes::copy_from_slice(qualifier.as_bytes()));
        self.call(OnDrop::Finish, async move {
            let name = ctx.table_name(&table);
            let message = pb::ReadModifyWriteRowRequest {
                table_name: name.clone(),
                app_profile_id: ctx.app_profile.clone(),
                row_key: row.clone(),
                rules: vec![pb::ReadModifyWriteRule {
                    family_name: family,
                    column_qualifier: qualifier,
                    rule: Some(Rule::IncrementAmount(delta)),
                }],
                ..Default::default()
            };
            let request = ctx.request(Rpc::ReadModifyWriteRow, message, ("table_name", &name)).await?;
            // Not retried: an increment is not idempotent.
            let response = ctx
                .deadline(ctx.data.clone().read_modify_write_row(request))
                .await
                .map_err(|s| unrepeatable_error("ReadModifyWriteRow", &table, &row, &s))?;
            let cell = response
                .into_inner()
                .row
                .and_then(|r| r.families.into_iter().next())
                .and_then(|f| f.columns.into_iter().next())
                .and_then(|c| c.cells.into_iter().next())
                .ok_or_else(|| Error::Store("ReadModifyWriteRow returned no cell".into()))?;
            crate::store::counter_value(&cell.value)
        })
    }

    fn guarantees(&self) -> Guarantees {
        Guarantees::new(false, false)
    }

    fn mutate_group<'a>(
        &'a self,
        _table: &'a str,
        _checks: Vec<RowCheck>,
        _rows: Vec<RowMutation>,
    ) -> Call<'a, Result<bool>> {
        Call::ready(Err(Error::Unsupported(
            "apply changes to several rows atomically: Cloud Bigtable has no multi-row transactions".into(),
        )))
    }

    fn commit(&self, _commit: Commit) -> Call<'_, Result<bool>> {
        Call::ready(Err(Error::Unsupported(
            "apply changes to rows of several tables atomically: Cloud Bigtable has no multi-row transactions".into(),
        )))
    }

    fn read_and_commit<'a>(
        &'a self,
        _table: &'a str,
        _row: &'a Bytes,
        _read: &'a ReadSpec,
        _build: &'a mut BuildCommit<'_>,
    ) -> Call<'a, Result<Option<bool>>> {
        Call::ready(Err(no_read_and_commit()))
    }
}
