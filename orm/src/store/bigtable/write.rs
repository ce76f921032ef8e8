//! Writes: Cellar's cell mutations as Bigtable's, batched into MutateRows calls within
//! Bigtable's limits and retried entry by entry.

use super::*;

pub(super) fn family_name(table: &str, family: &Bytes) -> Result<String> {
    String::from_utf8(family.to_vec()).map_err(|_| Error::InvalidArgument {
        arg: "family",
        reason: format!("table `{table}`: Bigtable family names are text, not {family:?}"),
    })
}

/// The timestamp that asks Bigtable for the server's clock when a write applies.
pub(super) const SERVER_TIME: i64 = -1;

/// Bigtable mutations for one row's changes; puts without a timestamp get `now_ms`.
pub(super) fn mutations(table: &str, changes: Vec<CellMutation>, now_ms: u64) -> Result<Vec<pb::Mutation>> {
    use pb::mutation::{DeleteFromColumn, DeleteFromFamily, DeleteFromRow, Mutation, SetCell};
    changes
        .into_iter()
        .map(|m| {
            let mutation = match m {
                CellMutation::Put { family, qualifier, value, timestamp } => Mutation::SetCell(SetCell {
                    family_name: family_name(table, &family)?,
                    column_qualifier: qualifier,
                    timestamp_micros: micros(timestamp.unwrap_or(now_ms))?,
                    value,
                }),
                CellMutation::PutAtApply { family, qualifier, value } => Mutation::SetCell(SetCell {
                    family_name: family_name(table, &family)?,
                    column_qualifier: qualifier,
                    timestamp_micros: SERVER_TIME,
                    value,
                }),
                CellMutation::DeleteColumn { family, qualifier } => Mutation::DeleteFromColumn(DeleteFromColumn {
                    family_name: family_name(table, &family)?,
                    column_qualifier: qualifier,
                    time_range: None,
                }),
                CellMutation::DeleteFamily { family } => {
                    Mutation::DeleteFromFamily(DeleteFromFamily { family_name: family_name(table, &family)? })
                }
                CellMutation::DeleteRow => Mutation::DeleteFromRow(DeleteFromRow {}),
            };
            Ok(pb::Mutation { mutation: Some(mutation) })
        })
        .collect()
}

/// MutateRows entries for `rows`, puts without a timestamp stamped `now_ms`; rows without
/// changes left out.
pub(super) fn entries(table: &str, rows: Vec<RowMutation>, now_ms: u64) -> Result<Vec<pb::mutate_rows_request::Entry>> {
    let mut entries = Vec::with_capacity(rows.len());
    for m in rows {
        let changes = mutations(table, m.mutations, now_ms)?;
        if !changes.is_empty() {
            entries.push(pb::mutate_rows_request::Entry { row_key: m.row, mutations: changes, ..Default::default() });
        }
    }
    Ok(entries)
}

pub(super) fn entry_size(e: &pb::mutate_rows_request::Entry) -> usize {
    use pb::mutation::Mutation;
    e.row_key.len()
        + e.mutations
            .iter()
            .map(|m| match &m.mutation {
                Some(Mutation::SetCell(c)) => 24 + c.family_name.len() + c.column_qualifier.len() + c.value.len(),
                Some(Mutation::DeleteFromColumn(c)) => 16 + c.family_name.len() + c.column_qualifier.len(),
                _ => 8,
            })
            .sum::<usize>()
}

/// Splits entries into calls within Bigtable's limits.
pub(super) fn calls(entries: Vec<pb::mutate_rows_request::Entry>) -> Vec<Vec<pb::mutate_rows_request::Entry>> {
    let mut out: Vec<Vec<pb::mutate_rows_request::Entry>> = Vec::new();
    let (mut mutations, mut bytes) = (0, 0);
    for e in entries {
        let (m, b) = (e.mutations.len(), entry_size(&e));
        if out.is_empty() || mutations + m > MUTATIONS_PER_CALL || bytes + b > BYTES_PER_CALL {
            out.push(Vec::new());
            (mutations, bytes) = (0, 0);
        }
        mutations += m;
        bytes += b;
        if let Some(call) = out.last_mut() {
            call.push(e);
        }
    }
    out
}

/// Whether sending `entry` again changes nothing that already applied: it sets no cell at the
/// server's time (every other mutation Cellar sends is idempotent, as Google's clients count
/// them).
pub(super) fn repeatable(entry: &pb::mutate_rows_request::Entry) -> bool {
    use pb::mutation::Mutation;
    !entry
        .mutations
        .iter()
        .any(|m| matches!(&m.mutation, Some(Mutation::SetCell(c)) if c.timestamp_micros == SERVER_TIME))
}

/// Bounds on the writes of one store in flight at once, shared by all its callers, as
/// Google's bulk writers bound theirs: a caller writing more waits for earlier calls to end
/// instead of queueing unbounded requests in memory. The call bound is for bulk calls (more
/// than one row): a write of one row (an entity put, an index or intent step) is bounded by
/// bytes only, so that thousands of callers each writing a row are not queued behind a few
/// calls — their number is already bounded by the callers.
#[derive(Debug)]
pub(super) struct FlowControl {
    calls: Arc<tokio::sync::Semaphore>,
    bytes: Arc<tokio::sync::Semaphore>,
    max_bytes: usize,
}

/// Bulk MutateRows calls of one store in flight at once, and the bytes of all its writes.
pub(super) const CALLS_IN_FLIGHT: usize = 8;
pub(super) const BYTES_IN_FLIGHT: usize = 32 << 20;

/// A call's place in the flow control: in flight while it lives.
pub(super) type Admission = (Option<tokio::sync::OwnedSemaphorePermit>, tokio::sync::OwnedSemaphorePermit);

impl FlowControl {
    pub(super) fn new(calls: usize, bytes: usize) -> FlowControl {
        FlowControl {
            calls: Arc::new(tokio::sync::Semaphore::new(calls)),
            bytes: Arc::new(tokio::sync::Semaphore::new(bytes)),
            max_bytes: bytes,
        }
    }

    /// Waits until a call of `size` bytes, writing `rows` rows, may start. A call larger than
    /// the whole byte budget waits for every other to end.
    pub(super) async fn admit(&self, size: usize, rows: usize) -> Result<Admission> {
        let closed = |_| Error::Store("the Bigtable client is closed".into());
        let call = if rows > 1 { Some(self.calls.clone().acquire_owned().await.map_err(closed)?) } else { None };
        let n = u32::try_from(size.clamp(1, self.max_bytes)).unwrap_or(u32::MAX);
        let bytes = self.bytes.clone().acquire_many_owned(n).await.map_err(closed)?;
        Ok((call, bytes))
    }

    /// Calls and bytes free now.
    #[cfg(test)]
    pub(super) fn available(&self) -> (usize, usize) {
        (self.calls.available_permits(), self.bytes.available_permits())
    }
}

/// Writes `entries` in MutateRows calls within Bigtable's limits, several at once within the
/// store's flow control. When a row has entries in more than one call, the calls go one after
/// another instead, so the row's changes apply in order. After a failure no further call
/// starts; the first failure is returned once every call started has ended.
pub(super) async fn mutate_all(
    ctx: Ctx,
    flow: Arc<FlowControl>,
    table: String,
    entries: Vec<pb::mutate_rows_request::Entry>,
) -> Result<()> {
    let mut seen = std::collections::HashSet::with_capacity(entries.len());
    let in_order = !entries.iter().all(|e| seen.insert(e.row_key.clone()));
    let calls = calls(entries);
    if in_order || calls.len() == 1 {
        for call in calls {
            let _admission = flow.admit(call.iter().map(entry_size).sum(), call.len()).await?;
            mutate_rows(ctx.clone(), table.clone(), call).await?;
        }
        return Ok(());
    }
    let failed = |done: Result<Result<()>, tokio::task::JoinError>| match done {
        Ok(result) => result.err(),
        Err(e) => Some(Error::Store(format!("a MutateRows call failed to complete: {e}"))),
    };
    let mut running = tokio::task::JoinSet::new();
    let mut first_error = None;
    for call in calls {
        // Admitted before it is spawned: a caller with many calls waits here, not as tasks.
        let admission = match flow.admit(call.iter().map(entry_size).sum(), call.len()).await {
            Ok(admission) => admission,
            Err(e) => {
                first_error = Some(e);
                break;
            }
        };
        let (ctx, table) = (ctx.clone(), table.clone());
        let batch = async move {
            let _admission = admission;
            mutate_rows(ctx, table, call).await
        };
        running.spawn(tracing::Instrument::in_current_span(batch));
        while let Some(done) = running.try_join_next() {
            if let Some(e) = failed(done) {
                first_error.get_or_insert(e);
            }
        }
        if first_error.is_some() {
            break;
        }
    }
    while let Some(done) = running.join_next().await {
        if let Some(e) = failed(done) {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// One MutateRows call with its retries: entries that fail transiently (or that the stream
/// never reported on) are sent again, with their explicit timestamps, so a repeat changes
/// nothing that already applied.
pub(super) async fn mutate_rows(
    ctx: Ctx,
    table: String,
    mut pending: Vec<pb::mutate_rows_request::Entry>,
) -> Result<()> {
    let name = ctx.table_name(&table);
    let mut retry = ctx.retry.start();
    loop {
        let message = pb::MutateRowsRequest {
            table_name: name.clone(),
            app_profile_id: ctx.app_profile.clone(),
            entries: pending.clone(),
            ..Default::default()
        };
        let request = ctx.request(Rpc::MutateRows, message, ("table_name", &name)).await?;
        let mut reported = vec![false; pending.len()];
        let mut again = Vec::new();
        let mut failure: Option<Status> = None;
        match retry.bound(ctx.deadline(ctx.data.clone().mutate_rows(request))).await {
            Err(s) => failure = Some(s),
            Ok(response) => {
                let mut stream = response.into_inner();
                loop {
                    match retry.bound(ctx.deadline(stream.message())).await {
                        Ok(Some(batch)) => {
                            for e in batch.entries {
                                let Some(i) = usize::try_from(e.index).ok().filter(|i| *i < pending.len()) else {
                                    continue;
                                };
                                reported[i] = true;
                                let status = e.status.unwrap_or_default();
                                let code = Code::from_i32(status.code);
                                if code == Code::Ok {
                                    continue;
                                }
                                let s = Status::new(code, status.message);
                                if !transient(&s) {
                                    return Err(rpc_error("MutateRows", &table, Some(&pending[i].row_key), &s));
                                }
                                again.push(i);
                                failure = Some(s);
                            }
                        }
                        Ok(None) => break,
                        Err(s) => {
                            failure = Some(s);
                            break;
                        }
                    }
                }
            }
        }
        again.extend(reported.iter().enumerate().filter(|(_, r)| !**r).map(|(i, _)| i));
        if again.is_empty() {
            return Ok(());
        }
        let status = failure.unwrap_or_else(|| Status::unavailable("the stream ended without reporting every row"));
        // An entry with a cell the server timestamps would write another version if sent
        // again: never repeated, whether it applied is left open.
        if let Some(&i) = again.iter().find(|&&i| !repeatable(&pending[i])) {
            return Err(unrepeatable_error("MutateRows", &table, &pending[i].row_key, &status));
        }
        let Some(wait) = retry.after(&status) else {
            let row = (again.len() == 1).then(|| pending[again[0]].row_key.clone());
            return Err(rpc_error("MutateRows", &table, row.as_deref(), &status));
        };
        again.sort_unstable();
        again.dedup();
        pending = again.into_iter().map(|i| pending[i].clone()).collect();
        ctx.rpcs.count(Rpc::Retry);
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn set_cell(timestamp_micros: i64) -> pb::Mutation {
        pb::Mutation {
            mutation: Some(pb::mutation::Mutation::SetCell(pb::mutation::SetCell {
                family_name: "d".into(),
                column_qualifier: Bytes::from_static(b"q"),
                timestamp_micros,
                value: Bytes::from_static(b"v"),
            })),
        }
    }

    #[test]
    fn only_entries_without_server_timestamps_are_repeated() {
        let entry = |mutations| pb::mutate_rows_request::Entry {
            row_key: Bytes::from_static(b"r"),
            mutations,
            ..Default::default()
        };
        assert!(repeatable(&entry(vec![set_cell(1_000)])));
        let delete = pb::Mutation { mutation: Some(pb::mutation::Mutation::DeleteFromRow(Default::default())) };
        assert!(repeatable(&entry(vec![delete.clone(), set_cell(5)])));
        assert!(!repeatable(&entry(vec![set_cell(5), set_cell(SERVER_TIME)])));
    }

    #[test]
    fn flow_control_holds_calls_past_its_bounds_until_others_end() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        runtime.block_on(async {
            let flow = FlowControl::new(2, 1000);
            let a = flow.admit(600, 10).await.unwrap();
            assert_eq!(flow.available(), (1, 400));
            // Over the byte budget left: waits.
            let blocked = tokio::time::timeout(Duration::from_millis(20), flow.admit(500, 10)).await;
            assert!(blocked.is_err(), "admitted past the byte budget");
            let b = flow.admit(300, 10).await.unwrap();
            // Over the call budget: a bulk call waits, whatever its size; a one-row write does
            // not, within the bytes.
            assert!(tokio::time::timeout(Duration::from_millis(20), flow.admit(1, 2)).await.is_err());
            let single = flow.admit(100, 1).await.unwrap();
            assert_eq!(flow.available(), (0, 0));
            assert!(
                tokio::time::timeout(Duration::from_millis(20), flow.admit(1, 1)).await.is_err(),
                "bytes bound one-row writes"
            );
            drop(single);
            drop(a);
            // Larger than the whole budget: admitted alone, once the rest ended.
            assert!(tokio::time::timeout(Duration::from_millis(20), flow.admit(5000, 10)).await.is_err());
            drop(b);
            let huge = flow.admit(5000, 10).await.unwrap();
            assert_eq!(flow.available(), (1, 0));
            drop(huge);
            assert_eq!(flow.available(), (2, 1000));
        });
    }
}
