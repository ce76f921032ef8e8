//! Copying tables from one database to another — the move from the embedded engine to Cloud
//! Bigtable, or back — and re-keying an entity into a new table.
//!
//! A copy recreates each table (families, version limits, TTLs, split points) in the
//! destination, then streams every live version of every cell across with its timestamp, in
//! batches. Writing a cell version with its own timestamp is idempotent, so a batch written
//! twice changes nothing: the job checkpoints after each batch (in the destination's jobs
//! table) and a killed copy resumes after the last batch it finished.
//!
//! The copy reads a moving source as it finds it. Stop the writers for the final pass; a
//! second pass over a source written meanwhile brings over new versions, but not deletes.
//!
//! Both jobs run as futures too ([`Copy::run_async`], [`Rekey::run_async`]): the same code,
//! for async services; a dropped future is a killed job, which the next run resumes.
//!
//! # Re-keying
//!
//! A change of an entity's row key (its key parts, their order or encoding, its salt, its
//! record type) makes a new table: rows written under the old key cannot be read under the
//! new one. [`Copy::rekey`] moves every entity across: it reads the old entities through the
//! source's typed repository, maps each with a function, and writes the new ones through the
//! destination's ([`Repository::put_many`], a batch at a time), so the new entity's indexes
//! are maintained by the normal write path and answer as soon as the job is done.
//!
//! ```no_run
//! # use cellar_orm::{Db, Entity, Result};
//! # fn demo<OldCustomer: Entity, Customer: Entity>(
//! #     db: &Db,
//! #     convert: impl Fn(OldCustomer) -> Customer + Sync,
//! # ) -> Result<()> {
//! // Into a new table of the same database (or any other `Db`: embedded → Bigtable).
//! let report = db
//!     .copy_to(db)
//!     .rekey(|old: OldCustomer| convert(old))
//!     .batch_rows(1000)
//!     .on_progress(|p| println!("{} of {} read", p.read, p.from_table))
//!     .run()?;
//! print!("{report}");
//! # Ok(())
//! # }
//! ```
//!
//! - **The mapping.** [`Copy::rekey`] takes `FnMut(Old) -> New`. [`Copy::try_rekey`] takes
//!   `FnMut(Old) -> Result<Option<New>, E>`: `Ok(None)` leaves an entity out (counted as
//!   skipped), `Err(message)` refuses it, as a row that does not decode is refused. Both are
//!   `Send`, as are the progress callbacks, so that [`Rekey::run_async`]'s future is.
//! - **Rows it cannot carry over.** A source row that does not decode, or an entity the
//!   mapping refuses, is counted and reported with its key ([`RekeyReport::failures`]) and the
//!   job goes on; with [`Rekey::stop_on_error`] the job stops at the first one, with its error,
//!   once the entities before it are written. Either way no row is dropped unreported.
//! - **Checkpoints.** After each batch the job saves the source key of the last entity it
//!   finished in the destination's jobs table, at row `rekey/<source table>/<destination
//!   table>`, and reports a [`RekeyProgress`]. A killed or failed run resumes after the last
//!   finished batch; a finished one clears the checkpoint, so the next run starts over.
//! - **Writing twice.** The unfinished batch of a killed run is written again when it resumes
//!   (as is every entity by a second pass). A put replaces the entity's row with the same
//!   cells, so the data and its index entries come out the same. The exception is a
//!   `#[cellar(version)]` field: the destination counts its own writes. A put stores the
//!   stored version + 1, whatever the mapping set, so a re-keyed entity starts at version 1
//!   and one written twice is at version 2. Versions read from the source mean nothing at the
//!   destination: read an entity again from the new table before a `save`.
//! - **One table into itself.** The job refuses a source and a destination entity that share
//!   a table of one database: it would read the rows it writes. Re-key into a new table, or
//!   into another database.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use crate::entity::Entity;
use crate::index::{index_table, STATUS_TABLE};
use crate::jobs::{Checkpoint, JOBS_TABLE};
use crate::migrate::Failure;
use crate::repo::{printable, Cursor, Repository};
use crate::store::drive::drive;
use crate::store::{AsyncStore, AsyncView, CellMutation, Inline, ReadSpec, RowMutation, ScanSpec};
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

/// Where progress reports go: `Send`, so that [`Copy::run_async`]'s future is.
type ProgressFn<'a> = Box<dyn FnMut(&CopyProgress) + Send + 'a>;

/// A copy job; from [`Db::copy_to`].
pub struct Copy<'a> {
    from: &'a Db,
    to: &'a Db,
    tables: Vec<String>,
    /// Types whose schema history comes along: (table, type name).
    types: Vec<(&'static str, &'static str)>,
    batch_rows: usize,
    progress: Option<ProgressFn<'a>>,
}

impl Db {
    /// A job copying tables of this database into `to`; name them with [`Copy::table`] or
    /// [`Copy::entity`], then [`Copy::run`].
    pub fn copy_to<'a>(&'a self, to: &'a Db) -> Copy<'a> {
        Copy { from: self, to, tables: Vec::new(), types: Vec::new(), batch_rows: DEFAULT_BATCH_ROWS, progress: None }
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

    /// Copies what entity `E` keeps: its table; if it declares indexes, its index table and
    /// the index status table (so the indexes answer in the destination without a backfill);
    /// and its schema history from the catalog, if the source holds one and the destination
    /// does not (a destination's own history is never merged with another).
    pub fn entity<E: Entity>(mut self) -> Self {
        let schema = &E::SCHEMA;
        if !self.types.contains(&(schema.table, schema.entity)) {
            self.types.push((schema.table, schema.entity));
        }
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
    pub fn on_progress(mut self, f: impl FnMut(&CopyProgress) + Send + 'a) -> Self {
        self.progress = Some(Box::new(f));
        self
    }

    /// Turns this copy into a re-key of entity `Old` of the source into entity `New` of the
    /// destination, each new entity `map(old)`; see the [module docs](self#re-keying). The
    /// batch size set so far carries over; set the progress callback on the [`Rekey`] (it
    /// reports a [`RekeyProgress`]). The destination may be the source's own `Db`, if `New`
    /// lives in another table.
    ///
    /// A copy that already names tables ([`Copy::table`], [`Copy::entity`]) or has a
    /// [`Copy::on_progress`] callback makes [`Rekey::run`] fail with
    /// [`Error::InvalidArgument`]: copy those tables in a job of their own.
    pub fn rekey<Old: Entity, New: Entity>(self, mut map: impl FnMut(Old) -> New + Send + 'a) -> Rekey<'a, Old, New> {
        self.into_rekey(Box::new(move |old| Ok(Some(map(old)))))
    }

    /// As [`Copy::rekey`], with a mapping that may leave an entity out (`Ok(None)`, counted
    /// in [`RekeyReport::skipped`]) or refuse it (`Err(message)`). A refused entity is
    /// reported with its source key in [`RekeyReport::failures`] and the job goes on, or, with
    /// [`Rekey::stop_on_error`], the job stops with [`Error::Rekey`].
    pub fn try_rekey<Old: Entity, New: Entity, E: fmt::Display>(
        self,
        mut map: impl FnMut(Old) -> std::result::Result<Option<New>, E> + Send + 'a,
    ) -> Rekey<'a, Old, New> {
        self.into_rekey(Box::new(move |old| map(old).map_err(|e| e.to_string())))
    }

    fn into_rekey<Old: Entity, New: Entity>(self, map: MapFn<'a, Old, New>) -> Rekey<'a, Old, New> {
        // Reported by `run`, which is where a job's errors go.
        let misuse = if !self.tables.is_empty() {
            Some(Error::InvalidArgument {
                arg: "rekey",
                reason: format!(
                    "a re-key copies one entity; copy the tables named before it ({}) in a job of their own",
                    self.tables.join(", ")
                ),
            })
        } else if self.progress.is_some() {
            Some(Error::InvalidArgument {
                arg: "on_progress",
                reason: "a re-key reports a `RekeyProgress`: set its callback after `rekey`".into(),
            })
        } else {
            None
        };
        Rekey {
            from: self.from,
            to: self.to,
            map,
            batch_rows: self.batch_rows,
            stop_on_error: false,
            progress: None,
            misuse,
        }
    }

    /// Copies the tables, each from its checkpoint; clears the checkpoints once all are done.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a table the source does not have; store errors. Batches
    /// finished before an error stay finished, and a next run resumes after them.
    pub fn run(self) -> Result<CopyReport> {
        let (from, to) = (Inline(self.from.store().as_ref()), Inline(self.to.store().as_ref()));
        drive(self.run_via(&from, &to))
    }

    /// [`Copy::run`] as a future, for async services: the same job, its store calls awaited
    /// (each database's own asynchronous client, or Cellar's blocking pool for the embedded
    /// engine). Dropping the future stops the copy as a kill would: a later run, either form,
    /// resumes after the last batch finished.
    ///
    /// # Errors
    /// As [`Copy::run`].
    pub fn run_async(self) -> impl Future<Output = Result<CopyReport>> + Send + 'a {
        let (from, to) = (AsyncView::new(self.from.store().clone()), AsyncView::new(self.to.store().clone()));
        async move { self.run_via(from.get(), to.get()).await }
    }

    async fn run_via(self, from: &dyn AsyncStore, to: &dyn AsyncStore) -> Result<CopyReport> {
        let Copy { tables, types, batch_rows, mut progress, .. } = self;
        let mut report = CopyReport::default();
        let mut checkpoints = Vec::new();
        for table in tables {
            let spec = from.describe(&table).await?.ok_or_else(|| Error::InvalidArgument {
                arg: "table",
                reason: format!("the source has no table `{table}`"),
            })?;
            to.ensure_table(&spec).await?;
            let checkpoint = Checkpoint::open(to, job(&table)).await?;
            let mut batches = Batches { to, checkpoint: &checkpoint, rows: batch_rows, progress: &mut progress };
            report.tables.push(batches.copy_table(from, &table).await?);
            checkpoints.push(checkpoint);
        }
        for (table, name) in types {
            crate::catalog::copy_history(from, to, table, name).await?;
        }
        for checkpoint in checkpoints {
            checkpoint.clear().await?;
        }
        Ok(report)
    }
}

/// Where a table's batches go: written to the destination, checkpointed, reported.
struct Batches<'r, 'a> {
    to: &'r dyn AsyncStore,
    checkpoint: &'r Checkpoint<'r>,
    /// Rows per batch.
    rows: usize,
    progress: &'r mut Option<ProgressFn<'a>>,
}

impl Batches<'_, '_> {
    async fn copy_table(&mut self, from: &dyn AsyncStore, table: &str) -> Result<TableCopy> {
        let last = self.checkpoint.last().await?;
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
        let mut batch: Vec<RowMutation> = Vec::with_capacity(self.rows);
        let mut batch_bytes = 0u64;
        let mut rows = from.scan_cursor(table, &scan).await?;
        while rows.advance().await? {
            let Some(row) = rows.row() else { break };
            let row = row.to_row();
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
            if batch.len() >= self.rows || batch_bytes >= BATCH_BYTES {
                self.flush(&mut batch, &done).await?;
                batch_bytes = 0;
            }
        }
        drop(rows);
        self.flush(&mut batch, &done).await?;
        Ok(done)
    }

    /// Writes a batch, then records it as finished.
    async fn flush(&mut self, batch: &mut Vec<RowMutation>, done: &TableCopy) -> Result<()> {
        let Some(last) = batch.last().map(|m| m.row.clone()) else {
            return Ok(());
        };
        self.to.mutate(&done.table, std::mem::take(batch)).await?;
        self.checkpoint.save(&last).await?;
        tracing::info!(
            table = %done.table,
            rows = done.rows,
            cells = done.cells,
            bytes = done.bytes,
            last_row = %crate::repo::printable(&last),
            "copy progress"
        );
        if let Some(progress) = self.progress.as_mut() {
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

/// Rows that cannot be carried over reported by name; more are only counted.
const MAX_REPORTED: usize = 100;

/// A re-key's mapping: the new entity, none (left out), or why not.
type MapFn<'a, Old, New> = Box<dyn FnMut(Old) -> std::result::Result<Option<New>, String> + Send + 'a>;

type RekeyProgressFn<'a> = Box<dyn FnMut(&RekeyProgress) + Send + 'a>;

/// Where a running re-key is: reported after each batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RekeyProgress {
    /// The source entity's table.
    pub from_table: &'static str,
    /// The destination entity's table.
    pub to_table: &'static str,
    /// Source entities read in this run (after the checkpoint it resumed from).
    pub read: u64,
    /// New entities written.
    pub written: u64,
    /// Entities the mapping left out.
    pub skipped: u64,
    /// Source rows that do not decode, and entities the mapping refused.
    pub failed: u64,
    /// The source key of the last entity finished, without its salt byte: where a resumed
    /// run starts after. Empty until this run has finished one.
    pub last_key: Bytes,
}

/// What a re-key did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RekeyReport {
    /// The source entity's table.
    pub from_table: &'static str,
    /// The destination entity's table.
    pub to_table: &'static str,
    /// The checkpoint this run resumed after (a source key without its salt byte), printable;
    /// `None` for a run from the start.
    pub resumed_after: Option<String>,
    /// Source entities read in this run: each was written, skipped or refused.
    pub read: u64,
    /// New entities written.
    pub written: u64,
    /// Entities the mapping left out (`Ok(None)`).
    pub skipped: u64,
    /// Source rows that do not decode, and entities the mapping refused.
    pub failed: u64,
    /// The first 100 of those, by source row (with a salt byte, if the table has one).
    pub failures: Vec<Failure>,
}

impl RekeyReport {
    fn progress(&self, last_key: Bytes) -> RekeyProgress {
        RekeyProgress {
            from_table: self.from_table,
            to_table: self.to_table,
            read: self.read,
            written: self.written,
            skipped: self.skipped,
            failed: self.failed,
            last_key,
        }
    }

    /// Counts a row that cannot be carried over; names the first ones.
    fn fail(&mut self, row: String, reason: String) {
        self.failed += 1;
        if self.failures.len() < MAX_REPORTED {
            self.failures.push(Failure { row, reason });
        }
    }
}

impl fmt::Display for RekeyReport {
    /// `customers → customers_v2: 2500 read, 2500 written, 0 skipped, 0 failed, resumed after -`,
    /// then one line per failure named.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} → {}: {} read, {} written, {} skipped, {} failed, resumed after {}",
            self.from_table,
            self.to_table,
            self.read,
            self.written,
            self.skipped,
            self.failed,
            self.resumed_after.as_deref().unwrap_or("-")
        )?;
        for failure in &self.failures {
            writeln!(f, "  row {}: {}", failure.row, failure.reason)?;
        }
        if self.failed > self.failures.len() as u64 {
            writeln!(f, "  and {} more", self.failed - self.failures.len() as u64)?;
        }
        Ok(())
    }
}

/// A re-key of entity `Old` of one database into entity `New` of another (or of the same,
/// in another table); from [`Copy::rekey`] or [`Copy::try_rekey`]. See the
/// [module docs](self#re-keying).
pub struct Rekey<'a, Old, New> {
    from: &'a Db,
    to: &'a Db,
    map: MapFn<'a, Old, New>,
    batch_rows: usize,
    stop_on_error: bool,
    progress: Option<RekeyProgressFn<'a>>,
    /// A misuse of the copy this job was made from, for `run` to report.
    misuse: Option<Error>,
}

/// The new entities of a batch not yet written, and where the batch ends.
struct Batch<New> {
    entities: Vec<New>,
    /// Source rows handled since the last checkpoint: entities read, rows that do not decode.
    rows: usize,
    /// The source key (without salt) of the last entity handled, if any since the start.
    last: Option<Bytes>,
}

impl<'a, Old: Entity, New: Entity> Rekey<'a, Old, New> {
    /// Source entities per batch (and per checkpoint); at least 1. Default
    /// [`DEFAULT_BATCH_ROWS`].
    pub fn batch_rows(mut self, rows: usize) -> Self {
        self.batch_rows = rows.max(1);
        self
    }

    /// Calls `f` after each batch, once it is written and checkpointed.
    pub fn on_progress(mut self, f: impl FnMut(&RekeyProgress) + Send + 'a) -> Self {
        self.progress = Some(Box::new(f));
        self
    }

    /// Stops at the first source row that does not decode, or entity the mapping refuses,
    /// with its error, instead of reporting it and going on. The entities before it are
    /// written and checkpointed, so a run after the row is mended resumes there.
    pub fn stop_on_error(mut self) -> Self {
        self.stop_on_error = true;
        self
    }

    /// Runs the re-key from its checkpoint to the end of the source table; clears the
    /// checkpoint once done.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `Old` and `New` share a table of one database, if the
    /// source has no table of `Old`, or for a misuse of the copy it was made from (see
    /// [`Copy::rekey`]); [`Error::SchemaMismatch`] for a table that does not fit its entity;
    /// errors of the new entities' writes ([`Error::UniqueViolation`] if two take one value
    /// of a unique index); store errors. With [`Rekey::stop_on_error`], the first row's
    /// [`Error::Decode`] (or another error of a row that does not decode) or [`Error::Rekey`].
    /// Batches finished before an error stay finished, and a next run resumes after them. A
    /// panic of the mapping reaches the caller; its batch is not written.
    pub fn run(self) -> Result<RekeyReport> {
        let (from, to) = (Inline(self.from.store().as_ref()), Inline(self.to.store().as_ref()));
        drive(self.run_via(&from, &to))
    }

    /// [`Rekey::run`] as a future, for async services: the same job, its store calls awaited
    /// (each database's own asynchronous client, or Cellar's blocking pool for the embedded
    /// engine). Opening the two repositories ([`Db::repo`]) stays a synchronous call, made
    /// when the future is first polled. Dropping the future stops the job as a kill would: a
    /// later run, either form, resumes after the last batch finished.
    ///
    /// # Errors
    /// As [`Rekey::run`].
    pub fn run_async(self) -> impl Future<Output = Result<RekeyReport>> + Send + 'a {
        let (from, to) = (AsyncView::new(self.from.store().clone()), AsyncView::new(self.to.store().clone()));
        async move { self.run_via(from.get(), to.get()).await }
    }

    async fn run_via(self, from_store: &dyn AsyncStore, to_store: &dyn AsyncStore) -> Result<RekeyReport> {
        let Rekey { from, to, mut map, batch_rows, stop_on_error, mut progress, misuse } = self;
        if let Some(misuse) = misuse {
            return Err(misuse);
        }
        let (old, new) = (&Old::SCHEMA, &New::SCHEMA);
        if old.table == new.table && same_database(from, to, from_store, to_store).await? {
            return Err(Error::InvalidArgument {
                arg: "rekey",
                reason: format!(
                    "{} and {} share table `{}` of one database: re-key into a new table, or into another database",
                    old.entity, new.entity, old.table
                ),
            });
        }
        // Checked first: opening the repository would create a missing table, and copy none.
        if from_store.describe(old.table).await?.is_none() {
            return Err(Error::InvalidArgument {
                arg: "rekey",
                reason: format!("the source has no table `{}` (of {})", old.table, old.entity),
            });
        }
        let source = from.repo::<Old>()?;
        // Opened before anything is written: on a new table its indexes count as built, and
        // the puts below maintain them.
        let dest = to.repo::<New>()?;
        let checkpoint = Checkpoint::open(to_store, rekey_job(old.table, new.table)).await?;
        let resume = checkpoint.last().await?;
        let mut report = RekeyReport {
            from_table: old.table,
            to_table: new.table,
            resumed_after: resume.as_deref().map(printable),
            ..RekeyReport::default()
        };
        let mut plan = source.plan();
        if !stop_on_error {
            plan = plan.skip_unreadable();
        }
        if let Some(after) = &resume {
            plan = plan.after(&Cursor { reverse: false, after: after.to_vec(), group: false });
        }
        let (scans, mut rows) = plan.prepare()?;
        rows.open(from_store, &scans).await?;
        let mut writer = Writer { dest: &dest, store: to_store, checkpoint: &checkpoint, progress: &mut progress };
        let mut batch = Batch { entities: Vec::with_capacity(batch_rows), rows: 0, last: None };
        let mut key = Vec::new();
        loop {
            let next = rows.next_keyed(from_store, &mut key).await;
            for skipped in rows.take_skipped() {
                report.fail(skipped.row, skipped.error.to_string());
                batch.rows += 1;
            }
            let old_entity = match next {
                None => break,
                Some(Ok(entity)) => entity,
                Some(Err(e)) => {
                    // Stopping: the entities before this row are still worth finishing.
                    writer.flush(&mut batch, &mut report).await?;
                    return Err(e);
                }
            };
            match map(old_entity) {
                Ok(Some(entity)) => batch.entities.push(entity),
                Ok(None) => report.skipped += 1,
                Err(reason) if stop_on_error => {
                    writer.flush(&mut batch, &mut report).await?;
                    return Err(Error::Rekey { table: old.table, row: printable(&key), reason });
                }
                Err(reason) => report.fail(printable(&key), reason),
            }
            report.read += 1;
            batch.rows += 1;
            // Without the salt byte: a resumed scan merges the buckets in that order.
            batch.last = Some(Bytes::copy_from_slice(rows.body(&key)));
            if batch.rows >= batch_rows {
                writer.flush(&mut batch, &mut report).await?;
            }
        }
        drop(rows);
        writer.flush(&mut batch, &mut report).await?;
        checkpoint.clear().await?;
        Ok(report)
    }
}

/// Where a re-key's batches go: written to the destination, checkpointed, reported.
struct Writer<'r, 'a, New> {
    dest: &'r Repository<New>,
    store: &'r dyn AsyncStore,
    checkpoint: &'r Checkpoint<'r>,
    progress: &'r mut Option<RekeyProgressFn<'a>>,
}

impl<New: Entity> Writer<'_, '_, New> {
    /// Writes a batch's new entities, records the batch as finished, and reports progress.
    async fn flush(&mut self, batch: &mut Batch<New>, report: &mut RekeyReport) -> Result<()> {
        if batch.rows == 0 {
            return Ok(());
        }
        // As `Repository::put_many` writes them, names stored as uids resolved first.
        for entity in &batch.entities {
            self.dest.warm_entity(self.store, entity).await?;
        }
        let rows = self.dest.mutations(&batch.entities)?;
        self.dest.put_rows(self.store, rows).await?;
        report.written += batch.entities.len() as u64;
        if let Some(last) = &batch.last {
            self.checkpoint.save(last).await?;
        }
        batch.entities.clear();
        batch.rows = 0;
        let at = report.progress(batch.last.clone().unwrap_or_default());
        tracing::info!(
            from_table = at.from_table,
            to_table = at.to_table,
            read = at.read,
            written = at.written,
            skipped = at.skipped,
            failed = at.failed,
            last_key = %crate::repo::printable(&at.last_key),
            "re-key progress"
        );
        if let Some(progress) = self.progress.as_mut() {
            progress(&at);
        }
        Ok(())
    }
}

/// The checkpoint row of a re-key.
fn rekey_job(from_table: &str, to_table: &str) -> Bytes {
    Bytes::from(format!("rekey/{from_table}/{to_table}"))
}

/// True if `a` and `b` (called through `a_store` and `b_store`) are one database: one store,
/// or two handles on one (a row written through `b` reads back through `a`). The probe row
/// goes to `b`'s jobs table and is removed.
async fn same_database(a: &Db, b: &Db, a_store: &dyn AsyncStore, b_store: &dyn AsyncStore) -> Result<bool> {
    if Arc::ptr_eq(a.store(), b.store()) {
        return Ok(true);
    }
    static PROBES: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let row = format!("rekey-probe/{}-{nanos}-{}", std::process::id(), PROBES.fetch_add(1, Ordering::Relaxed));
    let row = Bytes::from(row);
    let probe = Checkpoint::open(b_store, row.clone()).await?;
    probe.save(&row).await?;
    let read = ReadSpec::default();
    let seen = match a_store.describe(JOBS_TABLE).await {
        Ok(Some(_)) => a_store.read_rows(JOBS_TABLE, std::slice::from_ref(&row), &read).await,
        Ok(None) => Ok(vec![None]),
        Err(e) => Err(e),
    };
    // Removed whatever the read found.
    probe.clear().await?;
    Ok(seen?.into_iter().flatten().next().is_some())
}
