//! Whether an index can answer: built with its table from the start, or declared on a table
//! that already held the entity's rows and waiting for its backfill.
//!
//! The status lives in table [`STATUS_TABLE`], one row per index (`table 00 [record type]
//! name`), written once when a repository first opens the entity with the index: `built` if
//! the entity had no rows yet, else `pending` until a backfill finishes. (Not in the index
//! table, whose writes are deferred: a status must survive a crash as soon as it is written.) Writes keep every index
//! up to date either way, so a backfill only has to cover the rows written before.

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;

use crate::entity::Schema;
use crate::store::{CellMutation, Condition, FamilySpec, ReadSpec, RowMutation, Store, TableSpec};
use crate::{Error, Result};

/// Where index statuses are kept.
pub const STATUS_TABLE: &str = "cellar_indexes";
const FAMILY: &str = "i";
const QUALIFIER: &[u8] = b"status";
const BUILT: &[u8] = b"built";
const PENDING: &[u8] = b"pending";

fn key(schema: &Schema, position: usize) -> Bytes {
    let mut key = schema.table.as_bytes().to_vec();
    key.push(0);
    key.extend(schema.record_type);
    key.extend_from_slice(schema.indexes[position].name.as_bytes());
    key.into()
}

fn cell(row: &crate::store::Row) -> Option<&[u8]> {
    row.cells.iter().find(|c| c.qualifier == QUALIFIER).map(|c| &c.value[..])
}

/// Which indexes of an entity are built, as far as this process knows (a built index stays
/// built; a pending one is looked up again until it is).
#[derive(Debug, Default)]
pub(crate) struct Statuses(Vec<AtomicBool>);

impl Statuses {
    /// Reads (and on first use, records) the status of every index of `schema`.
    /// `has_rows` tells whether the entity already has rows, asked only if needed.
    pub(crate) fn open(store: &dyn Store, schema: &Schema, has_rows: impl FnOnce() -> Result<bool>) -> Result<Self> {
        if schema.indexes.is_empty() {
            return Ok(Statuses(Vec::new()));
        }
        store.ensure_table(&super::entry::table_spec(schema))?;
        store.ensure_table(&TableSpec {
            name: STATUS_TABLE.into(),
            families: vec![FamilySpec { name: FAMILY.into(), max_versions: 1, ttl_secs: None }],
            split_keys: Vec::new(),
            split_policy: Default::default(),
            deferred: false,
        })?;
        let table = STATUS_TABLE;
        let keys: Vec<Bytes> = (0..schema.indexes.len()).map(|i| key(schema, i)).collect();
        let rows = store.read_rows(table, &keys, &ReadSpec::default())?;
        // Whether the entity has rows matters only for an index seen for the first time.
        let first_use = rows.iter().any(|r| r.as_ref().and_then(cell).is_none());
        let existing = first_use && has_rows()?;
        let mut built = Vec::new();
        for (key, row) in keys.into_iter().zip(rows) {
            let status = match row.as_ref().and_then(cell) {
                Some(status) => status.to_vec(),
                None => {
                    let status = if existing { PENDING } else { BUILT };
                    let put = CellMutation::Put {
                        family: Bytes::from_static(FAMILY.as_bytes()),
                        qualifier: Bytes::from_static(QUALIFIER),
                        value: Bytes::from_static(status),
                        timestamp: None,
                    };
                    let absent = Condition::Absent {
                        family: Bytes::from_static(FAMILY.as_bytes()),
                        qualifier: Bytes::from_static(QUALIFIER),
                    };
                    let m = RowMutation { row: key.clone(), mutations: vec![put] };
                    if store.check_and_mutate(table, absent, m)? {
                        status.to_vec()
                    } else {
                        // Another repository recorded it first.
                        let rows = store.read_rows(table, &[key], &ReadSpec::default())?;
                        rows.into_iter()
                            .flatten()
                            .next()
                            .as_ref()
                            .and_then(cell)
                            .map(<[u8]>::to_vec)
                            .unwrap_or_default()
                    }
                }
            };
            built.push(AtomicBool::new(status == BUILT));
        }
        Ok(Statuses(built))
    }

    /// Fails with [`Error::IndexNotReady`] unless index `position` is built.
    pub(crate) fn check(&self, store: &dyn Store, schema: &Schema, position: usize) -> Result<()> {
        if self.0.get(position).is_some_and(|b| b.load(Ordering::Acquire)) {
            return Ok(());
        }
        let rows = store.read_rows(STATUS_TABLE, &[key(schema, position)], &ReadSpec::default())?;
        if rows.into_iter().flatten().next().as_ref().and_then(cell) == Some(BUILT) {
            if let Some(b) = self.0.get(position) {
                b.store(true, Ordering::Release);
            }
            return Ok(());
        }
        Err(Error::IndexNotReady {
            entity: schema.entity,
            index: schema.indexes[position].name,
            reason: "the entity had rows when the index was declared: run its backfill".into(),
        })
    }

    /// Records that index `position` is built.
    pub(crate) fn mark_built(&self, store: &dyn Store, schema: &Schema, position: usize) -> Result<()> {
        let put = CellMutation::Put {
            family: Bytes::from_static(FAMILY.as_bytes()),
            qualifier: Bytes::from_static(QUALIFIER),
            value: Bytes::from_static(BUILT),
            timestamp: None,
        };
        let m = RowMutation { row: key(schema, position), mutations: vec![put] };
        store.mutate(STATUS_TABLE, vec![m])?;
        if let Some(b) = self.0.get(position) {
            b.store(true, Ordering::Release);
        }
        Ok(())
    }
}
