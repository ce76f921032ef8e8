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
//! left by a process that has exited, and is taken over at once — so there no call of a
//! deposed writer can land after a later write. On a store shared by several processes, the
//! liveness of another process's writer cannot be seen, and it holds a lease instead ([`LEASE`]
//! by default): readers take over once it has passed, and a writer whose lease has passed stops
//! before its next store call. There the protocol assumes no single store call stalls longer
//! than the lease.
//!
//! [`Guarantees::single_process`]: crate::store::Guarantees::single_process

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::blob::{get_bytes, get_len, get_varint, put_bytes, put_varint};
use super::repo::{diff, generation_of};
use super::rows::{RowSet, GENERATION};
use super::{Aggregate, AggregateRepository, Strategy};
use crate::key::prefix_end;
use crate::repo::printable;
use crate::store::{CellMutation, Condition, ReadSpec, RowMutation, ScanSpec, StoredCell};
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
}

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

/// The pending state: new token, deadline, owner, then the intent.
fn encode_pending(token: &[u8], intent: &Intent) -> Bytes {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(token);
    out.extend_from_slice(&intent.deadline_ms.to_be_bytes());
    out.extend_from_slice(&intent.owner.0.to_be_bytes());
    out.extend_from_slice(&intent.owner.1.to_be_bytes());
    put_mutations(&mut out, &intent.root);
    put_varint(&mut out, intent.rows.len() as u64);
    for (slot, m) in &intent.rows {
        put_varint(&mut out, *slot as u64);
        put_bytes(&mut out, &m.row);
        put_mutations(&mut out, &m.mutations);
    }
    out.into()
}

fn decode_pending(value: &[u8]) -> std::result::Result<Intent, String> {
    let word = |at: usize| -> std::result::Result<u64, String> {
        let bytes = value.get(at..at + 8).ok_or("pending generation is truncated")?;
        Ok(u64::from_be_bytes(bytes.try_into().map_err(|_| "pending generation is truncated")?))
    };
    let (deadline_ms, owner) = (word(TOKEN_LEN)?, (word(TOKEN_LEN + 8)?, word(TOKEN_LEN + 16)?));
    let mut input = &value[TOKEN_LEN + 24..];
    let root = get_mutations(&mut input)?;
    let n = get_len(&mut input)?;
    let mut rows = Vec::with_capacity(n);
    for _ in 0..n {
        let slot = get_varint(&mut input)? as usize;
        let row = get_bytes(&mut input)?;
        rows.push((slot, RowMutation { row, mutations: get_mutations(&mut input)? }));
    }
    if !input.is_empty() {
        return Err("bytes after the intent".into());
    }
    Ok(Intent { deadline_ms, owner, root, rows })
}

fn generation_condition<A>(repo: &AggregateRepository<A>, value: Option<Bytes>) -> Condition {
    let family = Bytes::from_static(repo.shape.family().as_bytes());
    let qualifier = Bytes::from_static(GENERATION);
    match value {
        Some(value) => Condition::Equals { family, qualifier, value },
        None => Condition::Absent { family, qualifier },
    }
}

/// Writes `old` → `new` through an intent; false if another writer changed the aggregate
/// since it was read (the caller reads again and retries).
pub(super) fn write<A: Aggregate>(
    repo: &AggregateRepository<A>,
    root: &Bytes,
    generation: Option<Bytes>,
    old: &RowSet,
    new: &RowSet,
) -> Result<bool> {
    let (mut root_changes, rows): (Vec<_>, Vec<_>) =
        diff(old, new).into_iter().partition(|(slot, m)| *slot == 0 && m.row == *root);
    let root_mutations = root_changes.pop().map(|(_, m)| m.mutations).unwrap_or_default();
    let table = repo.table(0).to_string();
    let condition = generation_condition(repo, generation);
    if rows.is_empty() {
        let m = RowMutation { row: root.clone(), mutations: root_mutations };
        return repo.store.check_and_mutate(&table, condition, m);
    }
    // The new token is the generation the root's own mutation puts (none when deleting).
    let token = root_mutations
        .iter()
        .find_map(|m| match m {
            CellMutation::Put { qualifier, value, .. } if qualifier.as_ref() == GENERATION => Some(value.clone()),
            _ => None,
        })
        .unwrap_or_else(|| Bytes::from_static(&[0; TOKEN_LEN]));
    let owner = Owner::new();
    let deadline_ms = now_ms() + repo.lease.as_millis() as u64;
    let intent = Intent { deadline_ms, owner: owner.name(), root: root_mutations, rows };
    let pending = encode_pending(&token, &intent);
    let start = RowMutation { row: root.clone(), mutations: vec![generation_put(repo, pending.clone())] };
    if !repo.store.check_and_mutate(&table, condition, start)? {
        return Ok(false);
    }
    roll_forward(repo, root, &pending, intent)?;
    drop(owner);
    Ok(true)
}

fn generation_put<A>(repo: &AggregateRepository<A>, value: Bytes) -> CellMutation {
    CellMutation::Put {
        family: Bytes::from_static(repo.shape.family().as_bytes()),
        qualifier: Bytes::from_static(GENERATION),
        value,
        timestamp: None,
    }
}

/// Applies an intent's row mutations and commits it. On a store shared by several processes,
/// stops quietly once its lease has passed: whoever takes the intent over finishes it.
fn roll_forward<A: Aggregate>(
    repo: &AggregateRepository<A>,
    root: &Bytes,
    pending: &Bytes,
    intent: Intent,
) -> Result<()> {
    let mut slots: Vec<usize> = intent.rows.iter().map(|(s, _)| *s).collect();
    slots.sort_unstable();
    slots.dedup();
    let leased = !repo.store.guarantees().single_process;
    let lapsed = || leased && now_ms() >= intent.deadline_ms;
    let mut rows = intent.rows;
    for slot in slots {
        if lapsed() {
            return Ok(());
        }
        let batch: Vec<RowMutation> = {
            let (this, rest): (Vec<_>, Vec<_>) = rows.into_iter().partition(|(s, _)| *s == slot);
            rows = rest;
            this.into_iter().map(|(_, m)| m).collect()
        };
        let table = repo.shape.levels.get(slot).map(|l| l.table.clone()).ok_or_else(|| Error::Decode {
            table: A::SCHEMA.table,
            row: printable(root),
            column: None,
            reason: format!("intent names table slot {slot}, which {} does not have", A::SCHEMA.entity),
        })?;
        repo.store.mutate(&table, batch)?;
    }
    if lapsed() {
        return Ok(());
    }
    let commit = RowMutation { row: root.clone(), mutations: intent.root };
    // False: another reader took the intent over, and commits it.
    repo.store.check_and_mutate(repo.table(0), generation_condition(repo, Some(pending.clone())), commit)?;
    Ok(())
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
fn take_over<A: Aggregate>(
    repo: &AggregateRepository<A>,
    root: &Bytes,
    pending: &Bytes,
    mut intent: Intent,
) -> Result<()> {
    let owner = Owner::new();
    intent.owner = owner.name();
    intent.deadline_ms = now_ms() + repo.lease.as_millis() as u64;
    let renewed = encode_pending(&pending[..TOKEN_LEN], &intent);
    let m = RowMutation { row: root.clone(), mutations: vec![generation_put(repo, renewed.clone())] };
    if repo.store.check_and_mutate(repo.table(0), generation_condition(repo, Some(pending.clone())), m)? {
        roll_forward(repo, root, &renewed, intent)?;
    }
    Ok(())
}

/// The root row's generation cell: `None` without a root row.
fn root_generation<A: Aggregate>(
    repo: &AggregateRepository<A>,
    root: &Bytes,
) -> Result<(Option<RowSet>, Option<Bytes>)> {
    let found = repo.store.read_rows(repo.table(0), std::slice::from_ref(root), &ReadSpec::default())?;
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
pub(super) fn read<A: Aggregate>(
    repo: &AggregateRepository<A>,
    root: &Bytes,
    prefix: &Bytes,
    keep: &dyn Fn(usize) -> bool,
) -> Result<RowSet> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let (first, generation) = root_generation(repo, root)?;
        let Some(mut set) = first else { return Ok(RowSet::new()) };
        if let Some(pending) = generation.as_ref().filter(|g| g.len() > TOKEN_LEN) {
            let intent = decode_pending(pending).map_err(|reason| pending_error(repo, root, reason))?;
            if abandoned(repo, &intent) {
                let view = intent.clone();
                if take_over(repo, root, pending, intent).is_err() {
                    // The store takes no writes now (an engine gone read-only after a disk
                    // fault, say): answer with what rolling forward will make of the rows.
                    read_slots(repo, root, prefix, keep, &mut set)?;
                    view.apply(root, &mut set, keep);
                    return Ok(set);
                }
            } else {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
        } else {
            read_slots(repo, root, prefix, keep, &mut set)?;
            if slots_are_trivial(repo) || root_generation(repo, root)?.1 == generation {
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
fn read_slots<A: Aggregate>(
    repo: &AggregateRepository<A>,
    root: &Bytes,
    prefix: &Bytes,
    keep: &dyn Fn(usize) -> bool,
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
        for row in repo.store.scan(repo.table(slot), &spec)? {
            let row = row?;
            // The root row as read first is the one validated.
            if slot == 0 && row.key == *root {
                continue;
            }
            set.insert((slot, row.key), row.cells);
        }
    }
    Ok(())
}

impl Intent {
    /// Applies the intent to rows read before it was rolled forward (latest versions only),
    /// in memory: the rows it leaves, for a reader that cannot roll it forward.
    fn apply(self, root: &Bytes, set: &mut RowSet, keep: &dyn Fn(usize) -> bool) {
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
        };
        let pending = encode_pending(&[9; 8], &intent);
        let back = decode_pending(&pending).unwrap();
        assert_eq!((back.deadline_ms, back.owner), (123, (5, 6)));
        assert_eq!(back.root, intent.root);
        assert_eq!(back.rows, intent.rows);
        assert!(decode_pending(&pending[..pending.len() - 1]).is_err());
    }
}
