//! Fencing: how a reader, a repair or a claim settles the marks of a writer it takes for gone
//! without ever racing that writer.
//!
//! Whether another process's writer is gone is a guess on a shared store: its lease may have
//! passed while it is only stalled (a pause, a slow network, a clock that runs behind). So the
//! guess decides only *when* to settle, never whether the result is right. Before settling
//! marks against a data row as read, the settler moves that row's write token with a
//! check-and-mutate on the token it read. From then on:
//! - the row holds exactly what was read, so the settlement matches the data;
//! - a stalled writer's data write, conditioned on the token *it* read, cannot apply: it fails,
//!   and the writer starts over from a fresh read (tokens never repeat, and a row that existed
//!   keeps a token for good — see [`entry::is_tombstone`]).
//!
//! If the fence fails, the row changed since it was read, and the settlement is skipped: a
//! later reader settles against the new state.

use bytes::Bytes;

use super::entry;
use crate::entity::Schema;
use crate::store::{AsyncStore, Condition, Row, RowMutation};
use crate::writer;
use crate::Result;

/// A settlement waiting for its fence: the index row's conditional change, to make once the
/// data row `primary` is fenced at the write token it had when read.
pub(super) struct Fenced {
    pub primary: Bytes,
    /// The data row's token as read.
    pub token: Condition,
    /// The index row's change.
    pub settle: (Condition, RowMutation),
}

impl Fenced {
    /// A settlement of the data row `primary`, read as `data`.
    pub fn new(schema: &Schema, primary: Bytes, data: Option<&Row>, settle: (Condition, RowMutation)) -> Fenced {
        Fenced { primary, token: entry::token_condition(schema, data), settle }
    }
}

/// Fences the data rows of `pending` (each once), then makes the settlements whose fence held;
/// returns how many applied.
///
/// # Errors
/// Store errors (a fence may have moved a token without its settlement: harmless, as a
/// token moves with every write).
pub(super) async fn settle(store: &dyn AsyncStore, schema: &'static Schema, pending: Vec<Fenced>) -> Result<usize> {
    if pending.is_empty() {
        return Ok(0);
    }
    // One fence per data row: its settlements share it.
    let mut rows: Vec<(Bytes, Condition)> = Vec::new();
    for p in &pending {
        if !rows.iter().any(|(r, _)| *r == p.primary) {
            rows.push((p.primary.clone(), p.token.clone()));
        }
    }
    let shared = !store.guarantees().single_process;
    let fences = rows
        .iter()
        .map(|(row, token)| {
            let m = RowMutation { row: row.clone(), mutations: entry::put_token(schema, writer::token(), shared) };
            (token.clone(), m)
        })
        .collect();
    let held = store.check_and_mutate_many(schema.table, fences).await?;
    let fenced: Vec<&Bytes> = rows.iter().zip(held).filter(|(_, held)| *held).map(|((row, _), _)| row).collect();
    let settlements: Vec<(Condition, RowMutation)> =
        pending.into_iter().filter(|p| fenced.contains(&&p.primary)).map(|p| p.settle).collect();
    if settlements.is_empty() {
        return Ok(0);
    }
    let tried = settlements.len();
    let applied = store.check_and_mutate_many(&super::index_table(schema.table), settlements).await?;
    let settled = applied.into_iter().filter(|&a| a).count();
    tracing::info!(entity = schema.entity, table = schema.table, settled, tried, "abandoned index entries settled");
    Ok(settled)
}

/// Fences the data row `primary`, read as `data`: true if its token is moved, so no write
/// planned before the read can apply to it.
///
/// # Errors
/// Store errors.
pub(super) async fn fence_row(
    store: &dyn AsyncStore,
    schema: &'static Schema,
    primary: &Bytes,
    data: Option<&Row>,
) -> Result<bool> {
    let shared = !store.guarantees().single_process;
    let m = RowMutation { row: primary.clone(), mutations: entry::put_token(schema, writer::token(), shared) };
    store.check_and_mutate(schema.table, entry::token_condition(schema, data), m).await
}
