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
use crate::store::{AsyncStore, CellMutation, Condition, ReadSpec, RowMutation, Store, TableSpec};
use crate::{Error, Result};

/// Where index statuses are kept.
pub const STATUS_TABLE: &str = "cellar_indexes";
const FAMILY: &str = "i";
const QUALIFIER: &[u8] = b"status";
const SHAPE: &[u8] = b"shape";
const BUILT: &[u8] = b"built";
const PENDING: &[u8] = b"pending";
/// Declared anew with another definition: the entries of the old one must go before the
/// backfill writes the new ones.
const REDEFINED: &[u8] = b"redefined";

fn key(schema: &Schema, position: usize) -> Bytes {
    key_named(schema, schema.indexes[position].name)
}

fn key_named(schema: &Schema, name: &str) -> Bytes {
    let mut key = schema.table.as_bytes().to_vec();
    key.push(0);
    key.extend(schema.record_type);
    key.extend_from_slice(name.as_bytes());
    key.into()
}

/// Deletes the status of index `name` of `schema`'s entity (a dropped index).
pub(crate) fn drop_status(store: &dyn Store, schema: &Schema, name: &str) -> Result<()> {
    store.ensure_table(&TableSpec::internal(STATUS_TABLE, FAMILY))?;
    store.mutate_row(
        STATUS_TABLE,
        RowMutation { row: key_named(schema, name), mutations: vec![CellMutation::DeleteRow] },
    )
}

fn cell(row: &crate::store::Row) -> Option<&[u8]> {
    cell_named(row, QUALIFIER)
}

fn cell_named<'r>(row: &'r crate::store::Row, qualifier: &[u8]) -> Option<&'r [u8]> {
    row.cells.iter().find(|c| c.qualifier == qualifier).map(|c| &c.value[..])
}

/// What an index's entries look like, in words: its parts (field, column, type, framing,
/// modifier), whether it is unique, and the columns it copies. An index declared again under
/// its name with another shape needs its entries rebuilt.
fn shape(schema: &Schema, position: usize) -> Bytes {
    let index = &schema.indexes[position];
    let column = |c: usize| format!("{}:{}", schema.columns[c].family, schema.columns[c].qualifier);
    let parts: Vec<String> = index
        .parts
        .iter()
        .map(|p| format!("{} {} {} {:?} {:?}", p.field, column(p.column), p.type_name, p.spec.form, p.spec.modifier))
        .collect();
    let include: Vec<String> = index.include.iter().map(|&c| column(c)).collect();
    Bytes::from(format!("on({}) unique={} include({})", parts.join(", "), index.unique, include.join(", ")))
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
        store.ensure_table(&TableSpec::internal(STATUS_TABLE, FAMILY))?;
        let table = STATUS_TABLE;
        let keys: Vec<Bytes> = (0..schema.indexes.len()).map(|i| key(schema, i)).collect();
        let rows = store.read_rows(table, &keys, &ReadSpec::default())?;
        // Whether the entity has rows matters only for an index seen for the first time, or
        // declared again with another definition.
        let new_shape = rows.iter().enumerate().any(|(i, r)| {
            r.as_ref().is_none_or(|r| cell(r).is_none() || cell_named(r, SHAPE) != Some(&shape(schema, i)[..]))
        });
        let existing = new_shape && has_rows()?;
        let mut built = Vec::new();
        for (position, (key, row)) in keys.into_iter().zip(rows).enumerate() {
            let shape = shape(schema, position);
            let stored = row.as_ref().and_then(cell).map(<[u8]>::to_vec);
            let same_shape = row.as_ref().and_then(|r| cell_named(r, SHAPE)) == Some(&shape[..]);
            let status = match stored {
                Some(status) if same_shape => status,
                Some(status) if existing => {
                    // Declared again with another definition: not built until its backfill
                    // has cleared the old entries and written new ones.
                    let m = RowMutation {
                        row: key.clone(),
                        mutations: vec![
                            CellMutation::put_now(FAMILY, QUALIFIER, Bytes::from_static(REDEFINED)),
                            CellMutation::put_now(FAMILY, SHAPE, shape),
                        ],
                    };
                    let was = Condition::Equals {
                        family: Bytes::from_static(FAMILY.as_bytes()),
                        qualifier: Bytes::from_static(QUALIFIER),
                        value: status.into(),
                    };
                    store.check_and_mutate(table, was, m)?;
                    REDEFINED.to_vec()
                }
                // A redefinition without rows to index: built as it is.
                Some(_) => {
                    let m = RowMutation {
                        row: key.clone(),
                        mutations: vec![
                            CellMutation::put_now(FAMILY, QUALIFIER, Bytes::from_static(BUILT)),
                            CellMutation::put_now(FAMILY, SHAPE, shape),
                        ],
                    };
                    store.mutate_row(table, m)?;
                    BUILT.to_vec()
                }
                None => {
                    let status = if existing { PENDING } else { BUILT };
                    let m = RowMutation {
                        row: key.clone(),
                        mutations: vec![
                            CellMutation::put_now(FAMILY, QUALIFIER, Bytes::from_static(status)),
                            CellMutation::put_now(FAMILY, SHAPE, shape),
                        ],
                    };
                    let absent = Condition::Absent {
                        family: Bytes::from_static(FAMILY.as_bytes()),
                        qualifier: Bytes::from_static(QUALIFIER),
                    };
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

    /// True if index `position` was declared again with another definition and its old
    /// entries have not been cleared yet.
    pub(crate) async fn redefined(&self, store: &dyn AsyncStore, schema: &Schema, position: usize) -> Result<bool> {
        let (keys, read) = ([key(schema, position)], ReadSpec::default());
        let rows = store.read_rows(STATUS_TABLE, &keys, &read).await?;
        Ok(rows.into_iter().flatten().next().as_ref().and_then(cell) == Some(REDEFINED))
    }

    /// Records that the old entries of a redefined index are gone: the backfill comes next.
    pub(crate) async fn mark_cleared(&self, store: &dyn AsyncStore, schema: &Schema, position: usize) -> Result<()> {
        let m = RowMutation {
            row: key(schema, position),
            mutations: vec![CellMutation::put_now(FAMILY, QUALIFIER, Bytes::from_static(PENDING))],
        };
        store.mutate_row(STATUS_TABLE, m).await
    }

    /// Fails with [`Error::IndexNotReady`] unless index `position` is built.
    pub(crate) async fn check(&self, store: &dyn AsyncStore, schema: &Schema, position: usize) -> Result<()> {
        if self.0.get(position).is_some_and(|b| b.load(Ordering::Acquire)) {
            return Ok(());
        }
        let (keys, read) = ([key(schema, position)], ReadSpec::default());
        let rows = store.read_rows(STATUS_TABLE, &keys, &read).await?;
        let status = rows.into_iter().flatten().next().as_ref().and_then(cell).map(<[u8]>::to_vec);
        if status.as_deref() == Some(BUILT) {
            if let Some(b) = self.0.get(position) {
                b.store(true, Ordering::Release);
            }
            return Ok(());
        }
        let reason = if status.as_deref() == Some(REDEFINED) {
            "it was declared again with another definition: run its backfill, which replaces the old entries"
        } else {
            "the entity had rows when the index was declared: run its backfill"
        };
        Err(Error::IndexNotReady { entity: schema.entity, index: schema.indexes[position].name, reason: reason.into() })
    }

    /// Records that index `position` is built.
    pub(crate) async fn mark_built(&self, store: &dyn AsyncStore, schema: &Schema, position: usize) -> Result<()> {
        let m = RowMutation {
            row: key(schema, position),
            mutations: vec![CellMutation::put_now(FAMILY, QUALIFIER, Bytes::from_static(BUILT))],
        };
        store.mutate_row(STATUS_TABLE, m).await?;
        if let Some(b) = self.0.get(position) {
            b.store(true, Ordering::Release);
        }
        Ok(())
    }
}
