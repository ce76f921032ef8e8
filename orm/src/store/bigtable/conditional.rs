//! Conditional writes: CheckAndMutateRow with the predicate a condition needs.

use super::*;

pub(super) async fn check_and_mutate_row(
    ctx: Ctx,
    table: String,
    predicate: pb::RowFilter,
    on_match: bool,
    row: Bytes,
    changes: Vec<pb::Mutation>,
) -> Result<bool> {
    let name = ctx.table_name(&table);
    let (true_mutations, false_mutations) = if on_match { (changes, Vec::new()) } else { (Vec::new(), changes) };
    let message = pb::CheckAndMutateRowRequest {
        table_name: name.clone(),
        app_profile_id: ctx.app_profile.clone(),
        row_key: row.clone(),
        predicate_filter: Some(predicate),
        true_mutations,
        false_mutations,
        ..Default::default()
    };
    let request = ctx.request(Rpc::CheckAndMutateRow, message, ("table_name", &name)).await?;
    // Not retried: whether a failed call applied is unknown, and repeating a conditional write
    // could apply it against a state it was not meant for.
    let response = ctx
        .deadline(ctx.data.clone().check_and_mutate_row(request))
        .await
        .map_err(|s| unrepeatable_error("CheckAndMutateRow", &table, &row, &s))?;
    Ok(response.into_inner().predicate_matched == on_match)
}

/// A check-and-mutate ready to send: the predicate, which branch applies, and the changes.
pub(super) struct Conditional {
    predicate: pb::RowFilter,
    on_match: bool,
    row: Bytes,
    changes: Vec<pb::Mutation>,
}

impl Conn {
    /// `mutation` if `condition` holds, as a check-and-mutate of `table` (whose families the
    /// predicate needs).
    pub(super) async fn conditional(
        &self,
        table: &str,
        condition: Condition,
        mutation: RowMutation,
    ) -> Result<Conditional> {
        let now = now_ms();
        let (predicate, on_match) = match &condition {
            Condition::Equals { family, qualifier, value } => {
                let f = self.family(table, family).await?;
                (filters::column_predicate(&f, qualifier, Some(value), now), true)
            }
            Condition::Absent { family, qualifier } => {
                let f = self.family(table, family).await?;
                (filters::column_predicate(&f, qualifier, None, now), false)
            }
        };
        let changes = mutations(table, mutation.mutations, now)?;
        Ok(Conditional { predicate, on_match, row: mutation.row, changes })
    }
}

impl Conditional {
    /// Sends it; whether the mutation applied.
    pub(super) async fn apply(self, ctx: Ctx, table: String) -> Result<bool> {
        let Conditional { predicate, on_match, row, changes } = self;
        if changes.is_empty() {
            // Bigtable refuses a check-and-mutate without mutations: read the condition.
            return Ok(row_matches(ctx, table, predicate, row).await? == on_match);
        }
        check_and_mutate_row(ctx, table, predicate, on_match, row, changes).await
    }
}

/// Whether `row` has a cell `predicate` passes.
pub(super) async fn row_matches(ctx: Ctx, table: String, predicate: pb::RowFilter, row: Bytes) -> Result<bool> {
    let message = pb::ReadRowsRequest {
        table_name: ctx.table_name(&table),
        app_profile_id: ctx.app_profile.clone(),
        rows: Some(pb::RowSet { row_keys: vec![row], row_ranges: Vec::new() }),
        filter: Some(predicate),
        ..Default::default()
    };
    let (tx, mut rx) = mpsc::channel(1);
    read_rows(ctx, table, message, tx).await;
    match rx.recv().await {
        Some(Ok(_)) => Ok(true),
        Some(Err(e)) => Err(e),
        None => Ok(false),
    }
}
