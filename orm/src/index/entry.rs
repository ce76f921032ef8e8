//! Index rows as data rows imply them, and the cells index rows hold.
//!
//! An index row's cells (family [`FAMILY`]):
//! - `s`, its state: verified (`01` and a token of the verification — 9 bytes), or unverified
//!   by a writer (`00`, the writer's token, process instance and serial, and lease deadline —
//!   33 bytes);
//! - `k`, the primary row key;
//! - one cell per indexed or included column, named `family:qualifier`, holding its value.

use bytes::{BufMut, Bytes};

use crate::entity::{ColumnSpec, Schema};
use crate::index::IndexSpec;
use crate::store::{CellMutation, Condition, FamilySpec, LentRow, Row, RowMutation, TableSpec};

/// The family of index rows.
pub(crate) const FAMILY: &str = "i";
const STATE: &[u8] = b"s";
const PRIMARY: &[u8] = b"k";
/// The data row's cell (default family) naming the write that last changed it, on entities
/// with indexes: writers check-and-mutate on it, so one index update at a time runs per row.
pub(crate) const TOKEN: &[u8] = b"\x00i";
const TOKEN_STR: &str = "\x00i";

/// The write token of a data row of `schema`, if it has one.
pub(crate) fn write_token<'r>(schema: &Schema, row: &'r Row) -> Option<&'r [u8]> {
    row.value(default_family(schema), TOKEN_STR)
}

fn default_family(schema: &Schema) -> &'static str {
    schema.families.first().map_or("d", |f| f.name)
}

/// A condition that holds while the data row still has the write token it had when read as
/// `row` (no token, when read without one or not at all).
pub(crate) fn token_condition(schema: &Schema, row: Option<&Row>) -> Condition {
    let token = row.and_then(|r| write_token(schema, r)).map(Bytes::copy_from_slice);
    Condition::holds(default_family(schema).as_bytes(), TOKEN, token)
}

/// The mutations that give a data row the new write token `token`, stamped when they apply:
/// the token is the row's fence, and its visible value must be the last one written whatever
/// the writers' clocks say. On a store several processes share (`shared`) earlier versions go
/// first: a token an earlier build stamped with a client clock that ran ahead would sort above
/// the new one.
pub(crate) fn put_token(schema: &Schema, token: u64, shared: bool) -> Vec<CellMutation> {
    let family = Bytes::from_static(default_family(schema).as_bytes());
    let qualifier = Bytes::from_static(TOKEN);
    let put = CellMutation::PutAtApply {
        family: family.clone(),
        qualifier: qualifier.clone(),
        value: Bytes::copy_from_slice(&token.to_be_bytes()),
    };
    match shared {
        true => vec![CellMutation::DeleteColumn { family, qualifier }, put],
        false => vec![put],
    }
}

/// True if `row`, a data row of an entity with indexes, holds nothing but its write token: a
/// *tombstone*, which a delete of the entity (or a reader fencing an abandoned write, see
/// `fence`) leaves so that a write planned against an earlier state of the row can never
/// commit. The entity does not exist.
pub(crate) fn is_tombstone(schema: &Schema, row: LentRow<'_>) -> bool {
    if schema.indexes.is_empty() {
        return false;
    }
    let family = default_family(schema).as_bytes();
    row.cells().all(|c| c.qualifier == TOKEN && c.family == family)
}

/// `row` as an entity's row: `None` for a tombstone (see [`is_tombstone`]).
pub(crate) fn live<'r>(schema: &Schema, row: Option<&'r Row>) -> Option<&'r Row> {
    row.filter(|r| !is_tombstone(schema, r.lend()))
}

/// Every row of `index`, in key order.
pub(crate) fn index_range(schema: &Schema, index: &IndexSpec) -> crate::store::ScanSpec {
    let prefix = index_prefix(schema, index);
    let end = crate::key::prefix_end(&prefix).map(Bytes::from);
    crate::store::ScanSpec { start: prefix.into(), end, ..Default::default() }
}

/// The index table of an entity's table.
pub(crate) fn table_spec(schema: &Schema) -> TableSpec {
    TableSpec {
        name: super::index_table(schema.table),
        families: vec![FamilySpec { name: FAMILY.into(), max_versions: 1, ttl_secs: None }],
        split_keys: Vec::new(),
        split_policy: Default::default(),
        // Every index write is followed by the data write it prepares (which makes it
        // durable) or is one a crash may undo: a verification or a settled leftover, which
        // readers redo.
        deferred: true,
    }
}

/// An index row as a data row implies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Position of the index in the schema.
    pub index: usize,
    /// The index row's key.
    pub key: Bytes,
    /// The primary row key.
    pub primary: Bytes,
    /// Copies of the indexed and included columns (absent ones left out), by index qualifier.
    pub cells: Vec<(Bytes, Bytes)>,
}

/// The start of every row of `index`: `[record type] name 00`.
pub(crate) fn index_prefix(schema: &Schema, index: &IndexSpec) -> Vec<u8> {
    // Room for the values and a primary key after the prefix, so the key is allocated once.
    let mut key = Vec::with_capacity(usize::from(schema.record_type.is_some()) + index.name.len() + 1 + 64);
    key.extend(schema.record_type);
    key.extend_from_slice(index.name.as_bytes());
    key.push(0);
    key
}

/// The index qualifier of a data column: `family:qualifier`.
fn copy_qualifier(column: &ColumnSpec) -> Bytes {
    let mut q = Vec::with_capacity(column.family.len() + 1 + column.qualifier.len());
    q.extend_from_slice(column.family.as_bytes());
    q.push(b':');
    q.extend_from_slice(column.qualifier.as_bytes());
    q.into()
}

/// The columns an index row copies: the parts', then the included ones, each once.
fn copied(schema: &'static Schema, index: &'static IndexSpec) -> impl Iterator<Item = &'static ColumnSpec> {
    let parts = index.parts.iter().map(|p| p.column);
    let first_of_part = |i: usize, c: usize| !index.parts[..i].iter().any(|p| p.column == c);
    let included = |i: usize, c: usize| !index.parts.iter().any(|p| p.column == c) && !index.include[..i].contains(&c);
    let parts = parts.enumerate().filter(move |&(i, c)| first_of_part(i, c)).map(|(_, c)| c);
    let include = index.include.iter().copied().enumerate().filter(move |&(i, c)| included(i, c)).map(|(_, c)| c);
    parts.chain(include).map(move |c| &schema.columns[c])
}

/// The key of the entry of index `position` for the data row `primary` whose columns `cell`
/// returns: `Ok(None)` if an optional indexed field is absent (not indexed).
///
/// # Errors
/// A column that does not encode as its part, with the reason.
pub(crate) fn entry_key(
    schema: &'static Schema,
    position: usize,
    primary: &[u8],
    cell: &dyn Fn(&ColumnSpec) -> Option<Bytes>,
) -> Result<Option<Vec<u8>>, String> {
    let index = &schema.indexes[position];
    let mut key = index_prefix(schema, index);
    for part in index.parts {
        let value = cell(&schema.columns[part.column]);
        match (part.encode)(value.as_deref(), &part.spec, &mut key) {
            Ok(true) => {}
            Ok(false) => return Ok(None),
            Err(e) => return Err(format!("index `{}`, field `{}`: {e}", index.name, part.field)),
        }
    }
    if !index.unique {
        key.extend_from_slice(primary);
    }
    Ok(Some(key))
}

/// The entry of index `position` for the data row `primary` whose columns `cell` returns:
/// `Ok(None)` if an optional indexed field is absent (not indexed).
///
/// # Errors
/// As [`entry_key`].
pub(crate) fn entry(
    schema: &'static Schema,
    position: usize,
    primary: &Bytes,
    cell: &dyn Fn(&ColumnSpec) -> Option<Bytes>,
) -> Result<Option<Entry>, String> {
    let Some(key) = entry_key(schema, position, primary, cell)? else { return Ok(None) };
    let index = &schema.indexes[position];
    let cells = copied(schema, index).filter_map(|c| Some((copy_qualifier(c), cell(c)?))).collect();
    Ok(Some(Entry { index: position, key: key.into(), primary: primary.clone(), cells }))
}

/// The indexed values of `entry` as stored, printable, for messages.
pub(crate) fn values_of(schema: &'static Schema, entry: &Entry) -> String {
    let index = &schema.indexes[entry.index];
    let values: Vec<String> = index
        .parts
        .iter()
        .map(|p| {
            let q = copy_qualifier(&schema.columns[p.column]);
            entry.cells.iter().find(|(c, _)| *c == q).map(|(_, v)| crate::repo::printable(v)).unwrap_or_default()
        })
        .collect();
    values.join(", ")
}

/// The entry of index `position` a data row implies (see [`entries_of_row`]).
pub(crate) fn entry_of_row(schema: &'static Schema, row: &Row, position: usize) -> Option<Entry> {
    let cell = |c: &ColumnSpec| c.resolved_cell(row.lend());
    entry(schema, position, &row.key, &cell).ok().flatten()
}

/// The key of the entry of index `position` a data row implies.
pub(crate) fn key_of_row(schema: &'static Schema, row: &Row, position: usize) -> Option<Vec<u8>> {
    let cell = |c: &ColumnSpec| c.resolved_cell(row.lend());
    entry_key(schema, position, &row.key, &cell).ok().flatten()
}

/// The entries of every index for a data row: `None` for an index the row has no entry in,
/// or whose entry cannot be computed (a malformed indexed column: no verified entry can
/// exist for it either).
pub(crate) fn entries_of_row(schema: &'static Schema, row: &Row) -> Vec<Option<Entry>> {
    let cell = |c: &ColumnSpec| c.resolved_cell(row.lend());
    (0..schema.indexes.len()).map(|i| entry(schema, i, &row.key, &cell).ok().flatten()).collect()
}

/// What a state cell says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    Verified,
    /// Written by a writer that may still be at work.
    Unverified {
        owner: (u64, u64),
        deadline_ms: u64,
    },
}

/// An index row as read.
#[derive(Debug, Clone)]
pub(crate) struct IndexRow {
    pub key: Bytes,
    pub state: State,
    /// The state cell's bytes, for check-and-mutates.
    pub state_bytes: Bytes,
    pub primary: Bytes,
    pub cells: Vec<(Bytes, Bytes)>,
}

/// A verified state: `01` and a token new on every verification, so a check-and-mutate on a
/// verified state read earlier fails once the row has been through another write — even one
/// that left it verified again (the bare `01` of a row verified twice would match).
pub(crate) fn verified() -> Bytes {
    let mut b = Vec::with_capacity(9);
    b.put_u8(1);
    b.put_u64(crate::writer::token());
    b.into()
}

/// An unverified state naming the write `token` of writer `owner`.
pub(crate) fn unverified(token: u64, owner: (u64, u64), deadline_ms: u64) -> Bytes {
    let mut b = Vec::with_capacity(33);
    b.put_u8(0);
    b.put_u64(token);
    b.put_u64(owner.0);
    b.put_u64(owner.1);
    b.put_u64(deadline_ms);
    b.into()
}

fn parse_state(value: &[u8]) -> Option<State> {
    match value {
        [1] => Some(State::Verified),
        [1, rest @ ..] if rest.len() == 8 => Some(State::Verified),
        [0, rest @ ..] if rest.len() == 32 => {
            let word = |i: usize| u64::from_be_bytes(rest[i * 8..i * 8 + 8].try_into().unwrap_or_default());
            Some(State::Unverified { owner: (word(1), word(2)), deadline_ms: word(3) })
        }
        _ => None,
    }
}

/// Reads an index row; `None` for a row without a readable state and primary key (not an
/// index row, or damaged: verification reports it).
pub(crate) fn parse_row(row: &Row) -> Option<IndexRow> {
    let mut state = None;
    let mut primary = None;
    let mut cells = Vec::new();
    for c in row.cells.iter().filter(|c| c.family == FAMILY.as_bytes()) {
        match &c.qualifier[..] {
            STATE => state = Some(c.value.clone()),
            PRIMARY => primary = Some(c.value.clone()),
            _ => cells.push((c.qualifier.clone(), c.value.clone())),
        }
    }
    let state_bytes = state?;
    Some(IndexRow { key: row.key.clone(), state: parse_state(&state_bytes)?, state_bytes, primary: primary?, cells })
}

/// A put of an index cell, stamped when it applies: the protocol reasons in the order its
/// writes apply, and a mark built before another writer's verification but applied after it
/// must not sort below it (as it could under the client's clock on Bigtable).
fn put(qualifier: Bytes, value: Bytes) -> CellMutation {
    CellMutation::PutAtApply { family: Bytes::from_static(FAMILY.as_bytes()), qualifier, value }
}

/// The mutations that write `entry` with `state`: state, primary key, copies, and deletes of
/// copies the entry no longer has (an included column that became absent).
pub(crate) fn write_entry(schema: &'static Schema, entry: &Entry, state: Bytes) -> Vec<CellMutation> {
    let index = &schema.indexes[entry.index];
    let mut m = Vec::with_capacity(2 + index.parts.len() + index.include.len());
    m.push(put(Bytes::from_static(STATE), state));
    m.push(put(Bytes::from_static(PRIMARY), entry.primary.clone()));
    for column in copied(schema, index) {
        let qualifier = copy_qualifier(column);
        match entry.cells.iter().find(|(q, _)| *q == qualifier) {
            Some((_, value)) => m.push(put(qualifier, value.clone())),
            None => m.push(CellMutation::DeleteColumn { family: Bytes::from_static(FAMILY.as_bytes()), qualifier }),
        }
    }
    m
}

/// Only the state cell.
pub(crate) fn write_state(state: Bytes) -> CellMutation {
    put(Bytes::from_static(STATE), state)
}

/// The state and primary key: a mark on a row that may have been deleted meanwhile still
/// leaves a row readers can settle.
pub(crate) fn write_mark(primary: &Bytes, state: Bytes) -> Vec<CellMutation> {
    vec![put(Bytes::from_static(STATE), state), put(Bytes::from_static(PRIMARY), primary.clone())]
}

/// A condition on an index row's state cell: `Some(bytes)` equal, `None` absent.
pub(crate) fn state_is(value: Option<Bytes>) -> Condition {
    Condition::holds(FAMILY.as_bytes(), STATE, value)
}

/// A condition on an index row's primary key.
pub(crate) fn primary_is(primary: &Bytes) -> crate::store::Condition {
    crate::store::Condition::Equals {
        family: Bytes::from_static(FAMILY.as_bytes()),
        qualifier: Bytes::from_static(PRIMARY),
        value: primary.clone(),
    }
}

/// True if `row` (an index row as read) says what `entry` says: same key, primary and copies.
pub(crate) fn matches(row: &IndexRow, entry: &Entry) -> bool {
    let mut have = row.cells.clone();
    let mut want = entry.cells.clone();
    have.sort();
    want.sort();
    row.key == entry.key && row.primary == entry.primary && have == want
}

/// How a reader (or a repair) settles `row` once it has checked it against its data row
/// (`implied`: the entry the data row implies): if the row is unverified and its writer is
/// gone, verified with the data's copies when the data holds it, else deleted — on condition
/// that its state is still the one read. `None` while its writer may still act.
pub(crate) fn settle_abandoned(
    schema: &'static Schema,
    row: &IndexRow,
    implied: Option<&Entry>,
    guarantees: crate::store::Guarantees,
) -> Option<(crate::store::Condition, RowMutation)> {
    let State::Unverified { owner, deadline_ms } = row.state else { return None };
    if !crate::writer::gone(owner, deadline_ms, guarantees) {
        return None;
    }
    let mutations = match implied.filter(|e| e.key == row.key && e.primary == row.primary) {
        Some(e) => write_entry(schema, e, verified()),
        None => vec![CellMutation::DeleteRow],
    };
    Some((state_is(Some(row.state_bytes.clone())), RowMutation { row: row.key.clone(), mutations }))
}
