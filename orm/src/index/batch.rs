//! Many indexed writes at once: each step of the write protocol (see `write`) for every row in
//! one store call — the reads of the data rows, the claims and marks, the plain index writes,
//! the data writes, the settlements — instead of one call per row and step. A write that
//! needs more than that (a unique value found taken, a lost race on its data row) finishes on
//! its own through [`IndexedWrite::run_with`], which settles the marks the batch gave it; a row
//! named twice is written in order, after the batch.
//!
//! On a store with atomic commits the batch goes as one read of the data rows and one commit
//! per chunk of up to [`COMMIT_ROWS`] writes and [`COMMIT_BYTES`] (see `commit`); a chunk whose
//! commit does not hold, and a write too large for one, take the steps above.

use bytes::Bytes;

use super::commit::{Staging, COMMIT_BYTES};
use super::entry::{self, Entry};
use super::write::{Change, IndexedWrite, Version};
use crate::entity::Schema;
use crate::store::{AsyncStore, Commit, Condition, RowMutation};
use crate::writer::{self, now_ms, Owner};
use crate::Result;

/// Writes per commit, at most: enough that a batch costs few commits (their bytes are bounded
/// apart, by [`COMMIT_BYTES`]).
const COMMIT_ROWS: usize = 128;

/// One write of the batch, as it goes.
struct Pending<'a> {
    write: IndexedWrite<'a>,
    new: Vec<Option<Entry>>,
    plan: Option<super::write::Plan>,
    mark: Bytes,
    token: u64,
    old: Option<crate::store::Row>,
    /// Marks this write left that its own finish must settle.
    leftovers: Vec<(Entry, Bytes)>,
    /// Finishes alone (after the batch), with `leftovers`.
    alone: bool,
}

/// Writes `rows` (data row and change) of `schema`'s table; returns, in order, whether each
/// changed an index row, or its error (a unique violation fails that write only).
///
/// # Errors
/// Store errors of the batch's own calls (writes may be partly done: only unverified marks,
/// which readers settle).
pub(crate) async fn write_many(
    store: &dyn AsyncStore,
    schema: &'static Schema,
    rows: Vec<(Bytes, Change)>,
) -> Result<Vec<Result<bool>>> {
    let owner = Owner::new();
    let n = rows.len();
    let mut results: Vec<Option<Result<bool>>> = (0..n).map(|_| None).collect();
    // The first write of each row goes in the batch; later ones run after it, in order.
    let mut seen = std::collections::HashSet::new();
    let mut later = Vec::new();
    let mut batch: Vec<(usize, Pending<'_>)> = Vec::new();
    for (i, (row, change)) in rows.into_iter().enumerate() {
        let write = IndexedWrite { store, schema, row: row.clone(), change, version: Version::Untouched };
        if !seen.insert(row) {
            later.push((i, write));
            continue;
        }
        match write.new_entries(None) {
            Ok(new) => {
                let token = writer::token();
                let mark = entry::unverified(token, owner.name(), now_ms() + super::write::LEASE_MS);
                batch.push((
                    i,
                    Pending { write, new, plan: None, mark, token, old: None, leftovers: Vec::new(), alone: false },
                ));
            }
            Err(e) => results[i] = Some(Err(e)),
        }
    }
    if store.guarantees().atomic_commits {
        batch = commit_chunks(store, schema, batch, &mut results).await?;
    }
    if !batch.is_empty() {
        run_batch(store, schema, &mut batch).await?;
    }
    for (i, p) in batch {
        if p.alone {
            results[i] = Some(p.write.run_with(p.leftovers).await);
        } else if results[i].is_none() {
            let plan = p.plan.as_ref();
            results[i] = Some(Ok(plan.is_some_and(|p| !p.additions.is_empty() || !p.removals.is_empty())));
        }
    }
    for (i, write) in later {
        results[i] = Some(write.run().await);
    }
    Ok(results.into_iter().map(|r| r.unwrap_or(Ok(false))).collect())
}

/// Writes the batch as commits of up to [`COMMIT_ROWS`] writes and [`COMMIT_BYTES`], setting
/// their results; returns the writes that cannot go as a commit and those of the chunks whose
/// commit did not hold, for the steps of the protocol.
async fn commit_chunks<'a>(
    store: &dyn AsyncStore,
    schema: &'static Schema,
    batch: Vec<(usize, Pending<'a>)>,
    results: &mut [Option<Result<bool>>],
) -> Result<Vec<(usize, Pending<'a>)>> {
    let mut rest = Vec::new();
    // Each chunk with the bytes its writes may carry.
    let mut chunks: Vec<(Vec<(usize, Pending<'a>)>, usize)> = Vec::new();
    for (i, p) in batch {
        if !p.write.commits() {
            rest.push((i, p));
            continue;
        }
        let size = p.write.commit_bytes();
        match chunks.last_mut() {
            Some((chunk, bytes)) if chunk.len() < COMMIT_ROWS && *bytes + size <= COMMIT_BYTES => {
                chunk.push((i, p));
                *bytes += size;
            }
            _ => chunks.push((vec![(i, p)], size)),
        }
    }
    for (chunk, _) in chunks {
        let keys: Vec<Bytes> = chunk.iter().map(|(_, p)| p.write.row.clone()).collect();
        let spec = schema.read_spec();
        let olds = store.read_rows(schema.table, &keys, &spec).await?;
        let mut commit = Commit::default();
        let mut index_rows = std::collections::HashSet::new();
        let mut changed = Vec::with_capacity(chunk.len());
        for ((_, p), old) in chunk.iter().zip(&olds) {
            if p.write.nothing_to_do(old.as_ref()) {
                changed.push(Some(false)); // Nothing to delete: no part in the commit.
                continue;
            }
            let staging = Staging::Batch { keys: &mut index_rows };
            changed.push(p.write.stage(old.as_ref(), &p.new, &mut commit, staging, None));
        }
        // A write that would touch an index row another one of the chunk touches cannot share
        // its commit: the protocol sorts them out.
        if changed.iter().any(Option::is_none) || (!commit.rows.is_empty() && !store.commit(commit).await?) {
            rest.extend(chunk);
            continue;
        }
        for ((i, _), changed) in chunk.iter().zip(changed) {
            results[*i] = Some(Ok(changed.unwrap_or(false)));
        }
    }
    Ok(rest)
}

async fn run_batch(store: &dyn AsyncStore, schema: &'static Schema, batch: &mut [(usize, Pending<'_>)]) -> Result<()> {
    let index_table = super::index_table(schema.table);
    // Step 1: the data rows.
    let keys: Vec<Bytes> = batch.iter().map(|(_, p)| p.write.row.clone()).collect();
    let spec = schema.read_spec();
    let olds = store.read_rows(schema.table, &keys, &spec).await?;
    for ((_, p), old) in batch.iter_mut().zip(olds) {
        if p.write.nothing_to_do(old.as_ref()) {
            continue; // Nothing to write: no plan.
        }
        if old.as_ref().is_some_and(|r| p.write.needs_stamp(r)) {
            // A row without a write token: finishes alone, which gives it one first.
            p.alone = true;
            continue;
        }
        p.plan = Some(p.write.plan(old.as_ref(), &p.new));
        p.old = old;
    }
    // Step 2: claims and marks of unique values in one conditional batch, then the plain
    // index writes of the writes whose claims all held.
    let mut conditional = Vec::new();
    let mut owners = Vec::new();
    for (k, (_, p)) in batch.iter().enumerate() {
        let Some(plan) = &p.plan else { continue };
        let (claims, marks) = p.write.conditional_marks(plan, &p.mark);
        owners.extend(std::iter::repeat_n((k, claims.len()), marks.len()));
        conditional.extend(marks);
    }
    if !conditional.is_empty() {
        let applied = store.check_and_mutate_many(&index_table, conditional).await?;
        let mut release = Vec::new();
        let mut at = 0;
        while at < applied.len() {
            let (k, claims) = owners[at];
            let count = owners[at..].iter().take_while(|(o, _)| *o == k).count();
            let p = &mut batch[k].1;
            let Some(plan) = p.plan.as_ref() else {
                at += count;
                continue;
            };
            let made: Vec<(Entry, Bytes)> = applied[at..at + claims]
                .iter()
                .zip(plan.additions.iter().filter(|a| schema.indexes[a.index].unique))
                .filter(|(&a, _)| a)
                .map(|(_, e)| (e.clone(), p.mark.clone()))
                .collect();
            if made.len() < claims {
                // A value found taken: this write finishes alone. The claims it created go
                // (nobody else can have needed a row this write created); its marks on old
                // values are settled when it finishes.
                release.extend(made.into_iter().map(|(e, mark)| {
                    let m = RowMutation { row: e.key, mutations: vec![crate::store::CellMutation::DeleteRow] };
                    (entry::state_is(Some(mark)), m)
                }));
                let removals = plan.removals.iter().filter(|r| schema.indexes[r.index].unique);
                p.leftovers.extend(removals.map(|r| (r.clone(), p.mark.clone())));
                p.alone = true;
            }
            at += count;
        }
        if !release.is_empty() {
            store.check_and_mutate_many(&index_table, release).await?;
        }
    }
    let plain: Vec<RowMutation> = batch
        .iter()
        .filter(|(_, p)| !p.alone)
        .filter_map(|(_, p)| p.plan.as_ref().map(|plan| p.write.plain_marks(plan, &p.mark)))
        .flatten()
        .collect();
    if !plain.is_empty() {
        store.mutate(&index_table, plain).await?;
    }
    // Step 3: the data rows, each on its write token.
    let writing: Vec<usize> = (0..batch.len()).filter(|&k| !batch[k].1.alone && batch[k].1.plan.is_some()).collect();
    let data: Vec<(Condition, RowMutation)> = writing
        .iter()
        .map(|&k| {
            let p = &batch[k].1;
            (p.write.token_condition(p.old.as_ref()), p.write.data_mutation(p.token, None))
        })
        .collect();
    let applied = if data.is_empty() { Vec::new() } else { store.check_and_mutate_many(schema.table, data).await? };
    // Step 4: settle the writes that landed; the others start over alone.
    let mut settle = Vec::new();
    for (&k, landed) in writing.iter().zip(applied) {
        let p = &mut batch[k].1;
        let Some(plan) = &p.plan else { continue };
        if landed {
            let written = p.write.written(p.old.as_ref(), &p.new);
            settle.extend(p.write.settlements(plan, &p.mark, &[], &written));
        } else {
            p.leftovers.extend(plan.additions.iter().chain(&plan.removals).map(|e| (e.clone(), p.mark.clone())));
            p.alone = true;
        }
    }
    if !settle.is_empty() {
        store.check_and_mutate_many(&index_table, settle).await?;
    }
    Ok(())
}
