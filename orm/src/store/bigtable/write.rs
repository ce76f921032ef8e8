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

/// One MutateRows call with its retries: entries that fail transiently (or that the stream
/// never reported on) are sent again, with their explicit timestamps, so a repeat changes
/// nothing that already applied.
pub(super) async fn mutate_rows(
    ctx: Ctx,
    table: String,
    mut pending: Vec<pb::mutate_rows_request::Entry>,
) -> Result<()> {
    let name = ctx.table_name(&table);
    let mut attempt = 0;
    loop {
        let message = pb::MutateRowsRequest {
            table_name: name.clone(),
            app_profile_id: ctx.app_profile.clone(),
            entries: pending.clone(),
            ..Default::default()
        };
        let request = ctx.request(Rpc::MutateRows, message, ("table_name", &name)).await?;
        let mut reported = vec![false; pending.len()];
        let mut retry = Vec::new();
        let mut failure: Option<Status> = None;
        match ctx.deadline(ctx.data.clone().mutate_rows(request)).await {
            Err(s) => failure = Some(s),
            Ok(response) => {
                let mut stream = response.into_inner();
                loop {
                    match ctx.deadline(stream.message()).await {
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
                                retry.push(i);
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
        retry.extend(reported.iter().enumerate().filter(|(_, r)| !**r).map(|(i, _)| i));
        if retry.is_empty() {
            return Ok(());
        }
        let status = failure.unwrap_or_else(|| Status::unavailable("the stream ended without reporting every row"));
        attempt += 1;
        if !transient(&status) || attempt >= MAX_ATTEMPTS {
            let row = (retry.len() == 1).then(|| pending[retry[0]].row_key.clone());
            return Err(rpc_error("MutateRows", &table, row.as_deref(), &status));
        }
        retry.sort_unstable();
        retry.dedup();
        pending = retry.into_iter().map(|i| pending[i].clone()).collect();
        ctx.rpcs.count(Rpc::Retry);
        tokio::time::sleep(backoff(attempt)).await;
    }
}
