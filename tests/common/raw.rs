//! Cells written straight into the store, as an earlier build (or another program) left them,
//! for tests of what Cellar reads back.

use bytes::Bytes;
use cellar::orm::store::{CellMutation, RowMutation};
use cellar::prelude::*;

/// Writes `cells` (qualifier, value; family `d`) to `row` of `table`, in one row mutation.
pub fn put_cells(db: &Db, table: &str, row: Vec<u8>, cells: &[(&'static [u8], Vec<u8>)]) {
    let mutations = cells
        .iter()
        .map(|(qualifier, value)| CellMutation::Put {
            family: Bytes::from_static(b"d"),
            qualifier: Bytes::from_static(qualifier),
            value: value.clone().into(),
            timestamp: None,
        })
        .collect();
    db.store().mutate(table, vec![RowMutation { row: row.into(), mutations }]).unwrap();
}

/// A `blob` aggregate's row as a build before this one wrote it: the blob cell `d:b` and a
/// generation token.
pub fn put_blob_row(db: &Db, table: &str, row: Vec<u8>, blob: Vec<u8>) {
    put_cells(db, table, row, &[(b"b", blob), (b"\x00g", vec![1; 8])]);
}

/// True if `row`, a row of an aggregate's table, holds aggregate data: not a tombstone, which
/// a delete leaves on a shared store (a row with only its fence `\x00w`, or a root with only
/// a deleted generation: `\x00g` of 9 bytes).
pub fn holds_aggregate_data(row: &cellar::orm::store::Row) -> bool {
    !row.cells.iter().all(|c| &c.qualifier[..] == b"\x00w" || (&c.qualifier[..] == b"\x00g" && c.value.len() == 9))
}
