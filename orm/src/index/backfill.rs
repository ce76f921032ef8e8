//! The backfill of an index declared on an entity that already had rows: writes the entry of
//! every stored row through the index protocol, so it runs safely while the application keeps
//! writing; checkpoints every [`CHECKPOINT_EVERY`] rows and resumes after a kill; marks the
//! index built when it reaches the end without a unique violation.

use bytes::Bytes;

use super::{write_many, Change, Index};
use crate::entity::Entity;
use crate::jobs::Checkpoint;
use crate::repo::{printable, Repository};
use crate::store::drive::drive;
use crate::store::Inline;
use crate::store::{CellMutation, RowMutation, ScanSpec};
use crate::{Error, Result};

/// Rows between checkpoints and progress reports.
pub const CHECKPOINT_EVERY: u64 = 1000;

/// Where a running backfill is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackfillProgress {
    /// Rows read in this run.
    pub rows: u64,
    /// Entries written.
    pub indexed: u64,
    /// The last row finished.
    pub last_row: Bytes,
}

/// Two entities with one value of a unique index: the second was left out of the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The entity left out: its key as `Debug` prints it (`PersonKey { id: 4 }`), or its row
    /// key, printable, if the row's key does not decode.
    pub row: String,
    /// Why.
    pub reason: String,
}

impl std::fmt::Display for Violation {
    /// `<key>: <reason>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.row, self.reason)
    }
}

/// What a backfill did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackfillReport {
    /// The checkpoint this run resumed after, printable.
    pub resumed_after: Option<String>,
    /// Rows of the entity read.
    pub rows: u64,
    /// Entries written (rows without one: an absent optional field).
    pub indexed: u64,
    /// Rows a unique index could not take; the index stays unbuilt while there are any.
    pub violations: Vec<Violation>,
    /// True if the index is now built and answers queries.
    pub built: bool,
}

type ProgressFn<'a> = Box<dyn FnMut(&BackfillProgress) + 'a>;

/// A backfill of one index; from [`Repository::build_index`].
pub struct Backfill<'a, E> {
    repo: &'a Repository<E>,
    position: usize,
    progress: Option<ProgressFn<'a>>,
}

impl<E: Entity> Repository<E> {
    /// A job that writes `index`'s entries for the rows stored before it was declared (see
    /// [`crate::index`]); run it once after adding an index to an entity with data.
    pub fn build_index<V>(&self, index: Index<E, V>) -> Backfill<'_, E> {
        Backfill { repo: self, position: index.position(), progress: None }
    }
}

impl<'a, E: Entity> Backfill<'a, E> {
    /// Calls `f` every [`CHECKPOINT_EVERY`] rows and at the end.
    pub fn on_progress(mut self, f: impl FnMut(&BackfillProgress) + 'a) -> Self {
        self.progress = Some(Box::new(f));
        self
    }

    /// Runs the backfill from its checkpoint to the end of the table.
    ///
    /// # Errors
    /// Store errors; rows finished before stay finished, and a next run resumes after the last
    /// checkpoint.
    pub fn run(mut self) -> Result<BackfillReport> {
        let schema = &E::SCHEMA;
        let store = self.repo.store();
        let name = schema.indexes[self.position].name;
        let checkpoint =
            Checkpoint::open(store, Bytes::from(format!("index/{}/{}/{name}", schema.table, schema.entity)))?;
        if self.repo.index_statuses().redefined(store, schema, self.position)? {
            // The entries of the old definition go first; the new ones are written from the
            // start of the table.
            self.clear_old_entries()?;
            checkpoint.clear()?;
            self.repo.index_statuses().mark_cleared(store, schema, self.position)?;
        }
        let resume = checkpoint.last()?;
        let mut report =
            BackfillReport { resumed_after: resume.as_deref().map(printable), ..BackfillReport::default() };
        let start = Checkpoint::resume_from(resume.as_ref());
        let mut last = Bytes::new();
        let mut read = 0u64;
        let mut stretch = Vec::new();
        for row in store.scan(schema.table, &ScanSpec { start, ..ScanSpec::default() })? {
            let row = row?;
            read += 1;
            match E::key_from_row(&row) {
                // Rows of the table's other record types are not this entity's.
                Err(e) if e.other_record_type => {}
                // The key names the row in a violation (a hashed part needs the row's columns).
                key => stretch.push((row.key.clone(), key.ok())),
            }
            last = row.key;
            if read.is_multiple_of(CHECKPOINT_EVERY) {
                self.rebuild(std::mem::take(&mut stretch), &mut report)?;
                checkpoint.save(&last)?;
                self.report(&report, &last);
            }
        }
        self.rebuild(stretch, &mut report)?;
        if report.violations.is_empty() {
            self.repo.index_statuses().mark_built(store, schema, self.position)?;
            report.built = true;
        }
        checkpoint.clear()?;
        if read == 0 || !read.is_multiple_of(CHECKPOINT_EVERY) {
            self.report(&report, &last);
        }
        Ok(report)
    }

    /// Deletes every row of the index (a redefined one), a batch at a time.
    fn clear_old_entries(&self) -> Result<()> {
        let schema = &E::SCHEMA;
        let store = self.repo.store();
        let table = super::index_table(schema.table);
        let spec = super::entry::index_range(schema, &schema.indexes[self.position]);
        let mut batch = Vec::new();
        for row in store.scan(&table, &spec)? {
            batch.push(RowMutation { row: row?.key, mutations: vec![CellMutation::DeleteRow] });
            if batch.len() == CHECKPOINT_EVERY as usize {
                store.mutate(&table, std::mem::take(&mut batch))?;
            }
        }
        if !batch.is_empty() {
            store.mutate(&table, batch)?;
        }
        Ok(())
    }

    /// Writes the entries of a stretch of rows (each with its entity's key, if it decodes), all
    /// at once.
    fn rebuild(&self, rows: Vec<(Bytes, Option<E::Key>)>, report: &mut BackfillReport) -> Result<()> {
        report.rows += rows.len() as u64;
        let writes = rows.iter().map(|(row, _)| (row.clone(), Change::Rebuild(self.position))).collect();
        for ((row, key), result) in rows.iter().zip(drive(write_many(&Inline(self.repo.store()), &E::SCHEMA, writes))?)
        {
            match result {
                Ok(true) => report.indexed += 1,
                Ok(false) => {}
                Err(e @ Error::UniqueViolation { .. }) => {
                    let row = key.as_ref().map_or_else(|| printable(row), |k| format!("{k:?}"));
                    report.violations.push(Violation { row, reason: e.to_string() })
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn report(&mut self, report: &BackfillReport, last: &Bytes) {
        if let Some(f) = self.progress.as_mut() {
            f(&BackfillProgress { rows: report.rows, indexed: report.indexed, last_row: last.clone() });
        }
    }
}
