//! The intent protocol: atomic aggregate writes across rows a store cannot mutate together —
//! the `normalized` strategy's several tables, or any strategy on a store without atomic row
//! groups.
//!
//! The root row's generation cell is the commit point. It holds either a committed token (8
//! bytes) or a *pending* state: the next token, a lease deadline and the write's intent — every
//! row mutation it will make. A write
//! 1. reads the aggregate and turns the change into row mutations (as every strategy does);
//! 2. swaps the root's committed token for the pending state (check-and-mutate: fails if
//!    another writer got there first, and the write starts over);
//! 3. rolls the intent forward: applies the mutations of the other rows, one batch per table,
//!    then swaps the pending state for the root row's own mutation and the new committed
//!    token (check-and-mutate again).
//!
//! Readers read the root, then the other rows, then the root's generation again; if it moved,
//! they read again. A reader that meets a pending state waits for the writer, and once the
//! writer is known to be gone takes the intent over (a new owner, by check-and-mutate) and
//! rolls it forward itself — so a writer killed at any step leaves the aggregate as the
//! version before its write (killed before step 2) or the version it wrote (after): never a
//! mix. Rolling forward is idempotent (puts and deletes of the same cells).
//!
//! When is a writer gone? The pending state names its owner: a process instance and a writer
//! within it. An intent of this process is taken over once its writer is no longer running,
//! and never while it runs, however long it stalls. On a store only this process writes
//! ([`Guarantees::single_process`], the embedded engine), an intent of another instance was
//! left by a process that has exited, and is taken over at once. On a store shared by several
//! processes, the liveness of another process's writer cannot be seen, and it holds a lease
//! instead ([`LEASE`] by default): readers take over once it has passed.
//!
//! There a lease decides only *when* others take over, never whether the result is right: a
//! writer that only stalled (a pause, a slow network, a clock that runs behind) may wake up
//! and send its row writes after others rolled its intent forward and later writes followed.
//! So on a shared store every row but the root carries a *fence*: a cell holding the token of
//! the write that last changed it. An intent records each row's fence as its write read it,
//! and rolling it forward writes each row (and its new fence) only while the fence is still
//! that one. Whoever applies a row first — the writer, or a reader that took over — moves its
//! fence, so a late copy of the same write, and any write planned before it, finds the fence
//! moved and changes nothing. For the fences to hold, a row that existed never reads as
//! absent again: a deleted row keeps its fence alone (a tombstone), and a deleted aggregate
//! keeps its root row with a *deleted* generation, so a write planned against an absent
//! aggregate cannot start over a deleted one. Readers skip tombstones ([`rows::live`]).
//! Every cell these writes put is stamped when it applies, so a clock that runs behind cannot
//! hide a write under the one it replaces.
//!
//! [`Guarantees::single_process`]: crate::store::Guarantees::single_process

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::blob::{get_bytes, get_len, get_varint, put_bytes, put_varint};
use super::repo::{diff, generation_of};
use super::rows::{self, RowSet, DELETED_LEN, FENCE, GENERATION};
use super::shape::default_family;
use super::{Aggregate, AggregateRepository, Strategy};
use crate::key::prefix_end;
use crate::repo::printable;
use crate::store::{AsyncStore, CellMutation, Condition, ReadSpec, RowMutation, ScanSpec, StoredCell};
use crate::writer::{self, now_ms, Owner};
use crate::{Error, Result};

/// On a store several processes write: how long a writer owns its intent before readers may
/// roll it forward for it, by default ([`AggregateRepository::with_lease`] changes it).
pub const LEASE: Duration = Duration::from_secs(5);
/// Longest a reader keeps trying to get a consistent read before giving up.
const READ_PATIENCE: Duration = Duration::from_secs(30);
/// Length of a committed generation: the token alone.
pub(super) const TOKEN_LEN: usize = 8;

/// A pending write, decoded from the root's generation cell.
#[derive(Clone)]
struct Intent {
    deadline_ms: u64,
    /// The process instance and writer rolling it forward.
    owner: (u64, u64),
    /// The root row's own mutation, applied at commit.
    root: Vec<CellMutation>,
    /// Every other row's mutation, by table slot.
    rows: Vec<(usize, RowMutation)>,
    /// Written on a shared store: each other row is written only while its fence is still
    /// the one the write read (see the module docs).
    fenced: bool,
    /// Fenced: each other row's fence as the write read it (`None`: none), in the order of
    /// `rows`.
    priors: Vec<Option<Bytes>>,
}

/// The deadline's top bit, set in a fenced intent: its rows carry their fences as read.
const FENCED: u64 = 1 << 63;

fn put_mutations(out: &mut Vec<u8>, mutations: &[CellMutation]) {
    put_varint(out, mutations.len() as u64);
    for m in mutations {
        match m {
            CellMutation::Put { family, qualifier, value, timestamp } => {
                out.push(0);
                put_bytes(out, family);
                put_bytes(out, qualifier);
                put_bytes(out, value);
                put_varint(out, timestamp.map_or(0, |t| t.saturating_add(1)));
            }
            CellMutation::DeleteColumn { family, qualifier } => {
                out.push(1);
                put_bytes(out, family);
                put_bytes(out, qualifier);
            }
            CellMutation::DeleteRow => out.push(2),
            CellMutation::DeleteFamily { family } => {
                out.push(3);
                put_bytes(out, family);
            }
            CellMutation::PutAtApply { family, qualifier, value } => {
                out.push(4);
                put_bytes(out, family);
                put_bytes(out, qualifier);
                put_bytes(out, value);
            }
        }
    }
}

fn get_mutations(input: &mut &[u8]) -> std::result::Result<Vec<CellMutation>, String> {
    let n = get_len(input)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let (&tag, rest) = input.split_first().ok_or("intent ends inside a mutation")?;
        *input = rest;
        out.push(match tag {
            0 => {
                let (family, qualifier, value) = (get_bytes(input)?, get_bytes(input)?, get_bytes(input)?);
                let timestamp = get_varint(input)?.checked_sub(1);
                CellMutation::Put { family, qualifier, value, timestamp }
            }
            1 => CellMutation::DeleteColumn { family: get_bytes(input)?, qualifier: get_bytes(input)? },
            2 => CellMutation::DeleteRow,
            3 => CellMutation::DeleteFamily { family: get_bytes(input)? },
            4 => CellMutation::PutAtApply {
                family: get_bytes(input)?,
                qualifier: get_bytes(input)?,
                value: get_bytes(input)?,
            },
            t => return Err(format!("intent holds an unknown mutation kind {t}")),
        });
    }
    Ok(out)
}

/// The pending state: new token, deadline (its top bit set when fenced), owner, then the
/// intent: the root's mutations, and every other row's slot, key, mutations and — fenced —
/// fence as read (empty for none).
fn encode_pending(token: &[u8], intent: &Intent) -> Bytes {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(token);
    let fenced = intent.fenced;
    out.extend_from_slice(&(intent.deadline_ms | if fenced { FENCED } else { 0 }).to_be_bytes());
    out.extend_from_slice(&intent.owner.0.to_be_bytes());
    out.extend_from_slice(&intent.owner.1.to_be_bytes());
    put_mutations(&mut out, &intent.root);
    put_varint(&mut out, intent.rows.len() as u64);
    for (i, (slot, m)) in intent.rows.iter().enumerate() {
        put_varint(&mut out, *slot as u64);
        put_bytes(&mut out, &m.row);
        put_mutations(&mut out, &m.mutations);
        if fenced {
            put_bytes(&mut out, intent.priors.get(i).cloned().flatten().as_deref().unwrap_or_default());
        }
    }
    out.into()
}

fn decode_pending(value: &[u8]) -> std::result::Result<Intent, String> {
    let word = |at: usize| -> std::result::Result<u64, String> {
        let bytes = value.get(at..at + 8).ok_or("pending generation is truncated")?;
        Ok(u64::from_be_bytes(bytes.try_into().map_err(|_| "pending generation is truncated")?))
    };
    let (deadline, owner) = (word(TOKEN_LEN)?, (word(TOKEN_LEN + 8)?, word(TOKEN_LEN + 16)?));
    let fenced = deadline & FENCED != 0;
    let mut input = &value[TOKEN_LEN + 24..];
    let root = get_mutations(&mut input)?;
    let n = get_len(&mut input)?;
    let mut rows = Vec::with_capacity(n);
    let mut priors = Vec::new();
    for _ in 0..n {
        let slot = get_varint(&mut input)? as usize;
        let row = get_bytes(&mut input)?;
        rows.push((slot, RowMutation { row, mutations: get_mutations(&mut input)? }));
        if fenced {
            priors.push(Some(get_bytes(&mut input)?).filter(|p| !p.is_empty()));
        }
    }
    if !input.is_empty() {
        return Err("bytes after the intent".into());
    }
    Ok(Intent { deadline_ms: deadline & !FENCED, owner, root, rows, fenced, priors })
}

fn generation_condition<A>(repo: &AggregateRepository<A>, value: Option<Bytes>) -> Condition {
    Condition::holds(repo.shape.family().as_bytes(), GENERATION, value)
}

/// Writes `old` → `new` through an intent; false if another writer changed the aggregate
/// since it was read (the caller reads again and retries).
///
/// `stored` holds the rows as read, fences and tombstones included; `old` the aggregate they
/// hold (see [`rows::live`]).
pub(super) async fn write<A: Aggregate>(
    repo: &AggregateRepository<A>,
    store: &dyn AsyncStore,
    root: &Bytes,
    generation: Option<Bytes>,
    stored: &RowSet,
    old: &RowSet,
    new: &RowSet,
) -> Result<bool> {
    let fenced = !repo.store.guarantees().single_process;
    let (mut root_changes, rows): (Vec<_>, Vec<_>) =
        diff(old, new).into_iter().partition(|(slot, m)| *slot == 0 && m.row == *root);
    let mut root_mutations = root_changes.pop().map(|(_, m)| m.mutations).unwrap_or_default();
    // The new token is the generation the root's own mutation puts; a delete draws one.
    let token = root_mutations
        .iter()
        .find_map(|m| match m {
            CellMutation::PutAtApply { qualifier, value, .. } if qualifier.as_ref() == GENERATION => {
                Some(value.clone())
            }
            _ => None,
        })
        .unwrap_or_else(|| Bytes::copy_from_slice(&writer::token().to_be_bytes()));
    if fenced {
        let generation = |m: &CellMutation| matches!(m, CellMutation::PutAtApply { qualifier, .. } if qualifier.as_ref() == GENERATION);
        root_mutations = root_mutations
            .into_iter()
            .flat_map(|m| if generation(&m) { replacing(true, m) } else { vec![m] })
            .collect();
    }
    if fenced && !new.contains_key(&(0, root.clone())) {
        // A deleted aggregate keeps its root row as a tombstone: its generation never reads
        // as absent again, so a write planned before the delete cannot start over it.
        root_mutations.extend(generation_puts(repo, [&token[..], &[0]].concat().into()));
    }
    let table = repo.table(0).to_string();
    let condition = generation_condition(repo, generation);
    if rows.is_empty() {
        let m = RowMutation { row: root.clone(), mutations: root_mutations };
        return store.check_and_mutate(&table, condition, m).await;
    }
    let priors = if fenced {
        rows.iter().map(|(slot, m)| stored.get(&(*slot, m.row.clone())).and_then(|c| rows::fence_of(c))).collect()
    } else {
        Vec::new()
    };
    let owner = Owner::new();
    let deadline_ms = now_ms() + repo.lease.as_millis() as u64;
    let intent = Intent { deadline_ms, owner: owner.name(), root: root_mutations, rows, fenced, priors };
    let pending = encode_pending(&token, &intent);
    let start = RowMutation { row: root.clone(), mutations: generation_puts(repo, pending.clone()) };
    // As the owner: a step still running when the caller stops keeps the intent its own.
    owner
        .acting(async {
            if !store.check_and_mutate(&table, condition, start).await? {
                return Ok(false);
            }
            roll_forward(repo, store, root, &pending, intent).await?;
            Ok(true)
        })
        .await
}

/// A put of the root's generation, stamped when it applies: a writer whose clock runs behind
/// must not write a generation that sorts below the one it replaces. On a shared store its
/// earlier versions go first (see [`replacing`]).
fn generation_puts<A>(repo: &AggregateRepository<A>, value: Bytes) -> Vec<CellMutation> {
    let family = Bytes::from_static(repo.shape.family().as_bytes());
    let put = CellMutation::PutAtApply { family, qualifier: Bytes::from_static(GENERATION), value };
    replacing(!repo.store.guarantees().single_process, put)
}

/// `put` (stamped when it applies), after a delete of its column's earlier versions when
/// `shared`: on a store several processes share, a version an earlier build stamped with a
/// client clock that ran ahead would sort above it, and the generation or fence a condition
/// reads would stay the old one.
fn replacing(shared: bool, put: CellMutation) -> Vec<CellMutation> {
    match (&put, shared) {
        (CellMutation::PutAtApply { family, qualifier, .. }, true) => {
            vec![CellMutation::DeleteColumn { family: family.clone(), qualifier: qualifier.clone() }, put]
        }
        _ => vec![put],
    }
}

/// Applies an intent's row mutations and commits it; true if this call committed it. On a
/// store shared by several processes, stops once its lease has passed: whoever takes the
/// intent over finishes it.
async fn roll_forward<A: Aggregate>(
    repo: &AggregateRepository<A>,
    store: &dyn AsyncStore,
    root: &Bytes,
    pending: &Bytes,
    intent: Intent,
) -> Result<bool> {
    let mut slots: Vec<usize> = intent.rows.iter().map(|(s, _)| *s).collect();
    slots.sort_unstable();
    slots.dedup();
    let leased = !repo.store.guarantees().single_process;
    let lapsed = || leased && now_ms() >= intent.deadline_ms;
    let token = Bytes::copy_from_slice(&pending[..TOKEN_LEN]);
    let mut priors = intent.priors.into_iter();
    let mut rows: Vec<(usize, RowMutation, Option<Bytes>)> =
        intent.rows.into_iter().map(|(slot, m)| (slot, m, priors.next().flatten())).collect();
    for slot in slots {
        if lapsed() {
            lease_passed::<A>(root);
            return Ok(false);
        }
        let batch: Vec<(RowMutation, Option<Bytes>)> = {
            let (this, rest): (Vec<_>, Vec<_>) = rows.into_iter().partition(|(s, ..)| *s == slot);
            rows = rest;
            this.into_iter().map(|(_, m, prior)| (m, prior)).collect()
        };
        let level = repo.shape.levels.get(slot).ok_or_else(|| Error::Decode {
            table: A::SCHEMA.table,
            row: printable(root),
            column: None,
            reason: format!("intent names table slot {slot}, which {} does not have", A::SCHEMA.entity),
        })?;
        if intent.fenced {
            // Each row only while its fence is the one the write read. A row that fails was
            // written already — by this intent, rolled forward by another, or by a later write
            // once this one committed — and the commit below settles which.
            let family = fence_family(repo, slot);
            let fenced: Vec<_> = batch.into_iter().map(|(m, prior)| fenced_write(family, &token, m, prior)).collect();
            let rows = fenced.len();
            let held = store.check_and_mutate_many(&level.table, fenced).await?.into_iter().filter(|&h| h).count();
            if held < rows {
                tracing::debug!(
                    entity = A::SCHEMA.entity,
                    table = %level.table,
                    row = %printable(root),
                    fenced_out = rows - held,
                    "aggregate rows already written past this intent's fences"
                );
            }
        } else {
            store.mutate(&level.table, batch.into_iter().map(|(m, _)| m).collect()).await?;
        }
    }
    if lapsed() {
        lease_passed::<A>(root);
        return Ok(false);
    }
    let commit = RowMutation { row: root.clone(), mutations: intent.root };
    // False: another reader took the intent over, and commits it.
    store.check_and_mutate(repo.table(0), generation_condition(repo, Some(pending.clone())), commit).await
}

/// A writer that outlived its lease stops: whoever takes the write over finishes it, and its
/// fences keep this writer's late rows out.
fn lease_passed<A: Aggregate>(root: &Bytes) {
    tracing::warn!(
        entity = A::SCHEMA.entity,
        row = %printable(root),
        "aggregate write's lease passed: left to the reader that takes it over"
    );
}

/// The family of the fences of the rows of table slot `slot`: its level's default family
/// (under `normalized`, each level has a table of its own), else the root's.
fn fence_family<A>(repo: &AggregateRepository<A>, slot: usize) -> &'static str {
    match repo.shape.strategy {
        Strategy::Normalized => repo.shape.levels.get(slot).map_or(repo.shape.family(), |l| default_family(l.schema)),
        _ => repo.shape.family(),
    }
}

/// A fenced row write: `m` and the new fence `token`, on condition that the fence is still
/// `prior`. A deleted row keeps its fence alone, as a tombstone, so that it never reads as
/// absent again to a write planned before the delete.
fn fenced_write(
    family: &'static str,
    token: &Bytes,
    mut m: RowMutation,
    prior: Option<Bytes>,
) -> (Condition, RowMutation) {
    let (family, qualifier) = (Bytes::from_static(family.as_bytes()), Bytes::from_static(FENCE));
    let condition = Condition::holds(family.clone(), qualifier.clone(), prior);
    m.mutations.extend(replacing(true, CellMutation::PutAtApply { family, qualifier, value: token.clone() }));
    (condition, m)
}

fn pending_error<A: Aggregate>(repo: &AggregateRepository<A>, root: &Bytes, reason: String) -> Error {
    Error::Decode {
        table: A::SCHEMA.table,
        row: printable(root),
        column: Some(format!("{}:\\x00g", repo.shape.family())),
        reason,
    }
}

/// True if the writer of `intent` is gone (see the module docs): readers finish its write.
fn abandoned<A: Aggregate>(repo: &AggregateRepository<A>, intent: &Intent) -> bool {
    writer::gone(intent.owner, intent.deadline_ms, repo.store.guarantees())
}

/// Takes over an abandoned intent (a new owner and deadline) and rolls it forward.
async fn take_over<A: Aggregate>(
    repo: &AggregateRepository<A>,
    store: &dyn AsyncStore,
    root: &Bytes,
    pending: &Bytes,
    mut intent: Intent,
) -> Result<()> {
    let owner = Owner::new();
    let previous = intent.owner;
    intent.owner = owner.name();
    intent.deadline_ms = now_ms() + repo.lease.as_millis() as u64;
    let renewed = encode_pending(&pending[..TOKEN_LEN], &intent);
    let m = RowMutation { row: root.clone(), mutations: generation_puts(repo, renewed.clone()) };
    owner
        .acting(async {
            if store.check_and_mutate(repo.table(0), generation_condition(repo, Some(pending.clone())), m).await? {
                tracing::warn!(
                    entity = A::SCHEMA.entity,
                    row = %printable(root),
                    writer = ?previous,
                    fenced = intent.fenced,
                    "abandoned aggregate write taken over"
                );
                if roll_forward(repo, store, root, &renewed, intent).await? {
                    tracing::info!(
                        entity = A::SCHEMA.entity,
                        row = %printable(root),
                        "abandoned aggregate write rolled forward"
                    );
                }
            }
            Ok(())
        })
        .await
}

/// The root row's generation cell: `None` without a root row.
async fn root_generation<A: Aggregate>(
    repo: &AggregateRepository<A>,
    store: &dyn AsyncStore,
    root: &Bytes,
) -> Result<(Option<RowSet>, Option<Bytes>)> {
    let found = store.read_rows(repo.table(0), std::slice::from_ref(root), &ReadSpec::default()).await?;
    match found.into_iter().next().flatten() {
        Some(row) => {
            let generation = generation_of(&row.cells);
            let mut set = RowSet::new();
            set.insert((0, row.key), row.cells);
            Ok((Some(set), generation))
        }
        None => Ok((None, None)),
    }
}

/// A consistent read of the aggregate's rows in the table slots `keep` selects (the root's
/// row always): root, other rows, root again until they agree; pending writes are waited for
/// or rolled forward.
pub(super) async fn read<A: Aggregate>(
    repo: &AggregateRepository<A>,
    store: &dyn AsyncStore,
    root: &Bytes,
    prefix: &Bytes,
    keep: &(dyn Fn(usize) -> bool + Sync),
) -> Result<RowSet> {
    read_with(repo, store, root, prefix, keep, false).await
}

/// [`read`] for a write that replaces the aggregate whole (a put, a delete): an intent that
/// does not decode — damaged, so nobody can finish it — is no error there. The rows come back
/// as stored, the damaged generation with them, and the write, conditioned on that
/// generation, replaces them.
pub(super) async fn read_to_replace<A: Aggregate>(
    repo: &AggregateRepository<A>,
    store: &dyn AsyncStore,
    root: &Bytes,
    prefix: &Bytes,
) -> Result<RowSet> {
    read_with(repo, store, root, prefix, &|_| true, true).await
}

async fn read_with<A: Aggregate>(
    repo: &AggregateRepository<A>,
    store: &dyn AsyncStore,
    root: &Bytes,
    prefix: &Bytes,
    keep: &(dyn Fn(usize) -> bool + Sync),
    replacing: bool,
) -> Result<RowSet> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let (first, generation) = root_generation(repo, store, root).await?;
        let Some(mut set) = first else { return Ok(RowSet::new()) };
        if let Some(pending) = generation.as_ref().filter(|g| g.len() > DELETED_LEN) {
            let intent = match decode_pending(pending) {
                Ok(intent) => intent,
                Err(_) if replacing => {
                    read_slots(repo, store, root, prefix, keep, &mut set).await?;
                    return Ok(set);
                }
                Err(reason) => return Err(pending_error(repo, root, reason)),
            };
            if abandoned(repo, &intent) {
                let view = intent.clone();
                if take_over(repo, store, root, pending, intent).await.is_err() {
                    // The store takes no writes now (an engine gone read-only after a disk
                    // fault, say): answer with what rolling forward will make of the rows.
                    read_slots(repo, store, root, prefix, keep, &mut set).await?;
                    view.apply(root, &mut set, keep);
                    return Ok(set);
                }
            } else {
                store.pause(pause).await;
                pause = (pause * 2).min(Duration::from_millis(50));
            }
        } else {
            read_slots(repo, store, root, prefix, keep, &mut set).await?;
            if slots_are_trivial(repo) || root_generation(repo, store, root).await?.1 == generation {
                return Ok(set);
            }
        }
        if started.elapsed() > READ_PATIENCE {
            return Err(Error::Contended { entity: A::SCHEMA.entity, row: printable(root), attempts });
        }
    }
}

/// Reads the aggregate's rows other than the root's (already in `set`) in the slots `keep`
/// selects.
async fn read_slots<A: Aggregate>(
    repo: &AggregateRepository<A>,
    store: &dyn AsyncStore,
    root: &Bytes,
    prefix: &Bytes,
    keep: &(dyn Fn(usize) -> bool + Sync),
    set: &mut RowSet,
) -> Result<()> {
    let end = prefix_end(prefix).map(Bytes::from);
    let slots: Vec<usize> = match repo.shape.strategy {
        Strategy::Normalized => (1..repo.shape.levels.len()).filter(|&slot| keep(slot)).collect(),
        Strategy::Blob => Vec::new(),
        _ => vec![0],
    };
    for slot in slots {
        let spec = ScanSpec { start: prefix.clone(), end: end.clone(), ..ScanSpec::default() };
        let mut rows = store.scan_cursor(repo.table(slot), &spec).await?;
        while rows.advance().await? {
            let Some(row) = rows.row() else { break };
            // The root row as read first is the one validated.
            if slot == 0 && row.key() == &root[..] {
                continue;
            }
            let row = row.to_row();
            set.insert((slot, row.key), row.cells);
        }
    }
    Ok(())
}

impl Intent {
    /// Applies the intent to rows read before it was rolled forward (latest versions only),
    /// in memory: the rows it leaves, for a reader that cannot roll it forward.
    fn apply(self, root: &Bytes, set: &mut RowSet, keep: &(dyn Fn(usize) -> bool + Sync)) {
        let root_change = RowMutation { row: root.clone(), mutations: self.root };
        let changes = self.rows.into_iter().filter(|(slot, _)| keep(*slot)).chain([(0, root_change)]);
        for (slot, change) in changes {
            let key = (slot, change.row);
            let mut cells = set.remove(&key).unwrap_or_default();
            for m in change.mutations {
                match m {
                    CellMutation::Put { family, qualifier, value, timestamp } => {
                        cells.retain(|c| c.family != family || c.qualifier != qualifier);
                        let timestamp = timestamp.unwrap_or_else(now_ms);
                        cells.push(StoredCell { family, qualifier, timestamp, value });
                    }
                    CellMutation::PutAtApply { family, qualifier, value } => {
                        cells.retain(|c| c.family != family || c.qualifier != qualifier);
                        cells.push(StoredCell { family, qualifier, timestamp: now_ms(), value });
                    }
                    CellMutation::DeleteColumn { family, qualifier } => {
                        cells.retain(|c| c.family != family || c.qualifier != qualifier);
                    }
                    CellMutation::DeleteFamily { family } => cells.retain(|c| c.family != family),
                    CellMutation::DeleteRow => cells.clear(),
                }
            }
            cells.sort_by(|a, b| (&a.family, &a.qualifier).cmp(&(&b.family, &b.qualifier)));
            if !cells.is_empty() {
                set.insert(key, cells);
            }
        }
    }
}

/// A blob aggregate is one row: the first read is consistent on its own.
fn slots_are_trivial<A>(repo: &AggregateRepository<A>) -> bool {
    repo.shape.strategy == Strategy::Blob
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intents_round_trip() {
        let put = CellMutation::Put {
            family: Bytes::from_static(b"d"),
            qualifier: Bytes::from_static(b"q"),
            value: Bytes::from_static(b"v"),
            timestamp: Some(7),
        };
        let del = CellMutation::DeleteColumn { family: Bytes::from_static(b"d"), qualifier: Bytes::from_static(b"x") };
        let intent = Intent {
            deadline_ms: 123,
            owner: (5, 6),
            root: vec![put.clone()],
            rows: vec![
                (1, RowMutation { row: Bytes::from_static(b"r1"), mutations: vec![put, del] }),
                (2, RowMutation { row: Bytes::from_static(b"r2"), mutations: vec![CellMutation::DeleteRow] }),
                (
                    3,
                    RowMutation {
                        row: Bytes::from_static(b"r3"),
                        mutations: vec![CellMutation::DeleteFamily { family: Bytes::from_static(b"w") }],
                    },
                ),
                (
                    4,
                    RowMutation {
                        row: Bytes::from_static(b"r4"),
                        mutations: vec![CellMutation::PutAtApply {
                            family: Bytes::from_static(b"i"),
                            qualifier: Bytes::from_static(b"s"),
                            value: Bytes::from_static(b"m"),
                        }],
                    },
                ),
            ],
            fenced: false,
            priors: Vec::new(),
        };
        let pending = encode_pending(&[9; 8], &intent);
        let back = decode_pending(&pending).unwrap();
        assert_eq!((back.deadline_ms, back.owner, back.fenced), (123, (5, 6), false));
        assert_eq!(back.root, intent.root);
        assert_eq!(back.rows, intent.rows);
        assert!(back.priors.is_empty());
        assert!(decode_pending(&pending[..pending.len() - 1]).is_err());

        // Fenced: the rows' fences as read travel with them, and the deadline is unchanged.
        let priors = vec![Some(Bytes::from_static(b"fence-01")), None, Some(Bytes::from_static(b"fence-03")), None];
        let fenced = Intent { fenced: true, priors: priors.clone(), ..intent.clone() };
        let back = decode_pending(&encode_pending(&[9; 8], &fenced)).unwrap();
        assert_eq!((back.deadline_ms, back.fenced), (123, true));
        assert_eq!((back.rows, back.priors), (intent.rows, priors));
    }
}
