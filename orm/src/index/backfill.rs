//! The backfill of an index declared on an entity that already had rows: writes the entry of
//! every stored row through the index protocol, so it runs safely while the application keeps
//! writing; checkpoints every [`CHECKPOINT_EVERY`] rows and resumes after a kill; marks the
//! index built when it reaches the end without a unique violation. [`Backfill::run_async`]
//! runs the same job as a future.

use std::future::Future;

use bytes::Bytes;

use super::{write_many, Change, Index};
use crate::entity::Entity;
use crate::jobs::Checkpoint;
use crate::repo::{printable, Repository};
use crate::store::drive::drive;
use crate::store::{AsyncStore, CellMutation, Inline, RowMutation, ScanSpec};
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

/// Where progress reports go: `Send`, so that [`Backfill::run_async`]'s future is.
type ProgressFn<'a> = Box<dyn FnMut(&BackfillProgress) + Send + 'a>;

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
    pub fn on_progress(mut self, f: impl FnMut(&BackfillProgress) + Send + 'a) -> Self {
        self.progress = Some(Box::new(f));
        self
    }

    /// Runs the backfill from its checkpoint to the end of the table.
    ///
    /// # Errors
    /// Store errors; rows finished before stay finished, and a next run resumes after the last
    /// checkpoint.
    pub fn run(self) -> Result<BackfillReport> {
        let store = self.repo.store();
        drive(self.run_via(&Inline(store)))
    }

    /// [`Backfill::run`] as a future, for async services: the same job, its store calls
    /// awaited (see [`crate::repo::AsyncRepository`] for which store answers). Dropping the
    /// future stops the job as a kill would: a later run, either form, resumes after the last
    /// checkpoint.
    ///
    /// # Errors
    /// As [`Backfill::run`].
    pub fn run_async(self) -> impl Future<Output = Result<BackfillReport>> + Send + 'a {
        let view = self.repo.to_async();
        async move { self.run_via(view.parts().1.get()).await }
    }

    async fn run_via(self, store: &dyn AsyncStore) -> Result<BackfillReport> {
        // The callback is owned here, never borrowed across an await: the future is `Send`
        // with a callback that is only `Send`.
        let Backfill { repo, position, mut progress } = self;
        let job = Job { repo, position };
        let schema = &E::SCHEMA;
        let name = schema.indexes[position].name;
        let key = Bytes::from(format!("index/{}/{}/{name}", schema.table, schema.entity));
        let checkpoint = Checkpoint::open(store, key).await?;
        if job.repo.index_statuses().redefined(store, schema, position).await? {
            // The entries of the old definition go first; the new ones are written from the
            // start of the table.
            job.clear_old_entries(store).await?;
            checkpoint.clear().await?;
            job.repo.index_statuses().mark_cleared(store, schema, position).await?;
        }
        let resume = checkpoint.last().await?;
        let mut report =
            BackfillReport { resumed_after: resume.as_deref().map(printable), ..BackfillReport::default() };
        let scan = ScanSpec { start: Checkpoint::resume_from(resume.as_ref()), ..ScanSpec::default() };
        let mut last = Bytes::new();
        let mut read = 0u64;
        let mut stretch = Vec::new();
        let mut rows = store.scan_cursor(schema.table, &scan).await?;
        while rows.advance().await? {
            let Some(row) = rows.row() else { break };
            read += 1;
            last = Bytes::copy_from_slice(row.key());
            match E::key_from_row(row) {
                // Rows of the table's other record types are not this entity's.
                Err(e) if e.other_record_type => {}
                // The key names the row in a violation (a hashed part needs the row's columns).
                key => stretch.push((last.clone(), key.ok())),
            }
            if read.is_multiple_of(CHECKPOINT_EVERY) {
                job.rebuild(store, std::mem::take(&mut stretch), &mut report).await?;
                checkpoint.save(&last).await?;
                report_progress(&mut progress, schema, name, &report, &last);
            }
        }
        drop(rows);
        job.rebuild(store, stretch, &mut report).await?;
        if report.violations.is_empty() {
            job.repo.index_statuses().mark_built(store, schema, position).await?;
            report.built = true;
        }
        checkpoint.clear().await?;
        if read == 0 || !read.is_multiple_of(CHECKPOINT_EVERY) {
            report_progress(&mut progress, schema, name, &report, &last);
        }
        Ok(report)
    }
}

/// What a run works on, without its callback.
#[derive(Clone, Copy)]
struct Job<'a, E> {
    repo: &'a Repository<E>,
    position: usize,
}

impl<E: Entity> Job<'_, E> {
    /// Deletes every row of the index (a redefined one), a batch at a time.
    async fn clear_old_entries(&self, store: &dyn AsyncStore) -> Result<()> {
        let schema = &E::SCHEMA;
        let table = super::index_table(schema.table);
        let spec = super::entry::index_range(schema, &schema.indexes[self.position]);
        let mut batch = Vec::new();
        let mut rows = store.scan_cursor(&table, &spec).await?;
        while rows.advance().await? {
            let Some(row) = rows.row() else { break };
            let row = Bytes::copy_from_slice(row.key());
            batch.push(RowMutation { row, mutations: vec![CellMutation::DeleteRow] });
            if batch.len() == CHECKPOINT_EVERY as usize {
                store.mutate(&table, std::mem::take(&mut batch)).await?;
            }
        }
        drop(rows);
        if !batch.is_empty() {
            store.mutate(&table, batch).await?;
        }
        Ok(())
    }

    /// Writes the entries of a stretch of rows (each with its entity's key, if it decodes), all
    /// at once.
    async fn rebuild(
        &self,
        store: &dyn AsyncStore,
        rows: Vec<(Bytes, Option<E::Key>)>,
        report: &mut BackfillReport,
    ) -> Result<()> {
        report.rows += rows.len() as u64;
        let writes = rows.iter().map(|(row, _)| (row.clone(), Change::Rebuild(self.position))).collect();
        let written = Box::pin(write_many(store, &E::SCHEMA, writes)).await?;
        for ((row, key), result) in rows.iter().zip(written) {
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
}

/// Reports where the run is: an INFO event always, the callback if asked for.
fn report_progress(
    progress: &mut Option<ProgressFn<'_>>,
    schema: &crate::Schema,
    index: &str,
    report: &BackfillReport,
    last: &Bytes,
) {
    tracing::info!(
        entity = schema.entity,
        table = schema.table,
        index,
        rows = report.rows,
        indexed = report.indexed,
        last_row = %printable(last),
        "index backfill progress"
    );
    if let Some(f) = progress.as_mut() {
        f(&BackfillProgress { rows: report.rows, indexed: report.indexed, last_row: last.clone() });
    }
}
