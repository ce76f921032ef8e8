//! Copying tables from one database to another — the move from the embedded engine to Cloud
//! Bigtable, or back.
//!
//! A copy recreates each table (families, version limits, TTLs, split points) in the
//! destination, then streams every live version of every cell across with its timestamp, in
//! batches. Writing a cell version with its own timestamp is idempotent, so a batch written
//! twice changes nothing: the job checkpoints after each batch (in the destination's jobs
//! table) and a killed copy resumes after the last batch it finished.
//!
//! The copy reads a moving source as it finds it. Stop the writers for the final pass; a
//! second pass over a source written meanwhile brings over new versions, but not deletes.

use std::fmt;

use bytes::Bytes;

use crate::entity::Entity;
use crate::index::{index_table, STATUS_TABLE};
use crate::jobs::Checkpoint;
use crate::repo::printable;
use crate::store::{CellMutation, ReadSpec, RowMutation, ScanSpec, Store};
use crate::{Db, Error, Result};

/// Rows per batch unless set.
pub const DEFAULT_BATCH_ROWS: usize = 1000;
/// A batch also ends once its cells reach this many bytes.
const BATCH_BYTES: u64 = 2 << 20;

/// Where a running copy is: reported after each batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyProgress {
    /// The table being copied.
    pub table: String,
    /// Rows of this table copied in this run.
    pub rows: u64,
    /// Cell versions copied.
    pub cells: u64,
    /// Bytes of keys, qualifiers and values copied.
    pub bytes: u64,
    /// The last row finished.
    pub last_row: Bytes,
}

/// What a copy did to one table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableCopy {
    /// The table.
    pub table: String,
    /// The checkpoint this run resumed after, printable.
    pub resumed_after: Option<String>,
    /// Rows copied in this run.
    pub rows: u64,
    /// Cell versions copied.
    pub cells: u64,
    /// Bytes copied.
    pub bytes: u64,
}

/// What a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyReport {
    /// Per table, in the order copied.
    pub tables: Vec<TableCopy>,
}

impl fmt::Display for CopyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:<24} {:>10} {:>10} {:>12}  resumed after", "table", "rows", "cells", "bytes")?;
        for t in &self.tables {
            writeln!(
                f,
                "{:<24} {:>10} {:>10} {:>12}  {}",
                t.table,
                t.rows,
                t.cells,
                t.bytes,
                t.resumed_after.as_deref().unwrap_or("-")
            )?;
        }
        Ok(())
    }
}

type ProgressFn<'a> = Box<dyn FnMut(&CopyProgress) + 'a>;

/// A copy job; from [`Db::copy_to`].
pub struct Copy<'a> {
    from: &'a Db,
    to: &'a Db,
    tables: Vec<String>,
    batch_rows: usize,
    progress: Option<ProgressFn<'a>>,
}

impl Db {
    /// A job copying tables of this database into `to`; name them with [`Copy::table`] or
    /// [`Copy::entity`], then [`Copy::run`].
    pub fn copy_to<'a>(&'a self, to: &'a Db) -> Copy<'a> {
        Copy { from: self, to, tables: Vec::new(), batch_rows: DEFAULT_BATCH_ROWS, progress: None }
    }
}

impl<'a> Copy<'a> {
    /// Copies `table`.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        let table = table.into();
        if !self.tables.contains(&table) {
            self.tables.push(table);
        }
        self
    }

    /// Copies what entity `E` keeps: its table and, if it declares indexes, its index table
    /// and the index status table (so the indexes answer in the destination without a
    /// backfill).
    pub fn entity<E: Entity>(self) -> Self {
        let schema = &E::SCHEMA;
        let with_table = self.table(schema.table);
        if schema.indexes.is_empty() {
            with_table
        } else {
            with_table.table(index_table(schema.table)).table(STATUS_TABLE)
        }
    }

    /// Rows per batch (and per checkpoint); at least 1.
    pub fn batch_rows(mut self, rows: usize) -> Self {
        self.batch_rows = rows.max(1);
        self
    }

    /// Calls `f` after each batch.
    pub fn on_progress(mut self, f: impl FnMut(&CopyProgress) + 'a) -> Self {
        self.progress = Some(Box::new(f));
        self
    }

    /// Copies the tables, each from its checkpoint; clears the checkpoints once all are done.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a table the source does not have; store errors. Batches
    /// finished before an error stay finished, and a next run resumes after them.
    pub fn run(mut self) -> Result<CopyReport> {
        let (from, to) = (self.from.store().as_ref(), self.to.store().as_ref());
        let mut report = CopyReport::default();
        let mut checkpoints = Vec::new();
        for table in std::mem::take(&mut self.tables) {
            let spec = from.describe(&table)?.ok_or_else(|| Error::InvalidArgument {
                arg: "table",
                reason: format!("the source has no table `{table}`"),
            })?;
            to.ensure_table(&spec)?;
            let checkpoint = Checkpoint::open(to, job(&table))?;
            report.tables.push(self.copy_table(from, to, &table, &checkpoint)?);
            checkpoints.push(checkpoint);
        }
        for checkpoint in checkpoints {
            checkpoint.clear()?;
        }
        Ok(report)
    }

    fn copy_table(
        &mut self,
        from: &dyn Store,
        to: &dyn Store,
        table: &str,
        checkpoint: &Checkpoint<'_>,
    ) -> Result<TableCopy> {
        let last = checkpoint.last()?;
        let mut done = TableCopy {
            table: table.to_string(),
            resumed_after: last.as_ref().map(|l| printable(l)),
            ..TableCopy::default()
        };
        let scan = ScanSpec {
            start: Checkpoint::resume_from(last.as_ref()),
            end: None,
            reverse: false,
            limit: None,
            read: ReadSpec { max_versions: u32::MAX, time_range: None, ..ReadSpec::default() },
        };
        let mut batch: Vec<RowMutation> = Vec::with_capacity(self.batch_rows);
        let mut batch_bytes = 0u64;
        for row in from.scan(table, &scan)? {
            let row = row?;
            let mut bytes = row.key.len() as u64;
            let mutations: Vec<CellMutation> = row
                .cells
                .into_iter()
                .map(|c| {
                    bytes += (c.family.len() + c.qualifier.len() + c.value.len()) as u64 + 8;
                    CellMutation::Put {
                        family: c.family,
                        qualifier: c.qualifier,
                        value: c.value,
                        timestamp: Some(c.timestamp),
                    }
                })
                .collect();
            done.rows += 1;
            done.cells += mutations.len() as u64;
            done.bytes += bytes;
            batch_bytes += bytes;
            batch.push(RowMutation { row: row.key, mutations });
            if batch.len() >= self.batch_rows || batch_bytes >= BATCH_BYTES {
                self.flush(to, checkpoint, &mut batch, &done)?;
                batch_bytes = 0;
            }
        }
        self.flush(to, checkpoint, &mut batch, &done)?;
        Ok(done)
    }

    /// Writes a batch, then records it as finished.
    fn flush(
        &mut self,
        to: &dyn Store,
        checkpoint: &Checkpoint<'_>,
        batch: &mut Vec<RowMutation>,
        done: &TableCopy,
    ) -> Result<()> {
        let Some(last) = batch.last().map(|m| m.row.clone()) else {
            return Ok(());
        };
        to.mutate(&done.table, std::mem::take(batch))?;
        checkpoint.save(&last)?;
        if let Some(progress) = &mut self.progress {
            progress(&CopyProgress {
                table: done.table.clone(),
                rows: done.rows,
                cells: done.cells,
                bytes: done.bytes,
                last_row: last,
            });
        }
        Ok(())
    }
}

/// The checkpoint row of a table's copy.
fn job(table: &str) -> Bytes {
    Bytes::from(format!("copy/{table}"))
}
