//! Bulk migration of versioned blobs: rewrite every cell of a column that holds an older
//! version (or another codec) at the type's current version, while the application keeps
//! writing.
//!
//! - Each rewrite is a check-and-mutate on the exact bytes read, so a value the application
//!   wrote meanwhile (always at the current version) is never reverted. The rewrites of a
//!   stretch of rows go to the store as one batch
//!   ([`Store::check_and_mutate_many`](crate::Store::check_and_mutate_many)).
//! - Reading and writing overlap: one thread scans and converts the next stretch while the
//!   calling thread writes the last one (decoding and re-encoding cost as much as the writes).
//!   The async form ([`Migration::run_async`]) runs both sides in its future, reading while a
//!   write is awaited.
//! - The job checkpoints the last row it finished in the database (table [`JOBS_TABLE`]), so
//!   a killed or interrupted migration resumes after it instead of starting over; a finished
//!   one removes its checkpoint.
//! - Progress goes to a callback; cells that cannot be read are counted and reported, and the
//!   job goes on (or stops, if asked).
//! - A census counts the cells per codec × version (and the unreadable ones); a dry run only
//!   takes it and checks that every cell reads.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;

use bytes::Bytes;
use futures::channel::{mpsc, oneshot};
use futures::{SinkExt, StreamExt};

use crate::aggregate::Aggregate;
use crate::blob::{versioned, Versioned};
use crate::jobs::Checkpoint;
use crate::repo::printable;
use crate::store::drive::drive;
use crate::store::{AsyncStore, AsyncView, CellMutation, Condition, Inline, RowMutation, ScanSpec, StoredCell};
use crate::{Db, Error, Result};

pub use crate::jobs::JOBS_TABLE;
/// Rows between checkpoints (and progress reports); their rewrites go as one batch. The
/// documentation of `on_progress` gives the number.
const CHECKPOINT_EVERY: u64 = 1000;
/// Unreadable cells reported by name; more are only counted. The documentation of
/// `failures` gives the number.
const MAX_REPORTED: usize = 100;

/// Cells of one format in a census: the codec and the schema version they hold (`None`: a
/// headerless legacy cell).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Format {
    /// The codec's name (`msgpack`, `bincode`, ...), or `unknown codec N`.
    pub codec: &'static str,
    /// The schema version; `None` for a headerless legacy cell.
    pub version: Option<u32>,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.version {
            Some(v) => write!(f, "v{v} {}", self.codec),
            None => write!(f, "legacy {}", self.codec),
        }
    }
}

/// How many cells of a column hold each format, and how many cannot be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    /// Readable cells per format.
    pub formats: BTreeMap<Format, u64>,
    /// Cells that do not read as the type (damaged, newer, undeclared, refused by a step).
    pub unreadable: u64,
}

impl Census {
    /// Readable cells in all.
    pub fn readable(&self) -> u64 {
        self.formats.values().sum()
    }
}

impl fmt::Display for Census {
    /// `v1 bincode: 120, v2 msgpack: 80, unreadable: 1`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self.formats.iter().map(|(k, n)| format!("{k}: {n}")).collect();
        parts.push(format!("unreadable: {}", self.unreadable));
        f.write_str(&parts.join(", "))
    }
}

/// Where a running migration is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Rows read so far in this run (after the checkpoint it resumed from).
    pub rows: u64,
    /// Cells rewritten at the current version.
    pub rewritten: u64,
    /// Cells that could not be read.
    pub failed: u64,
    /// The last row finished.
    pub last_row: Bytes,
}

/// A cell that could not be migrated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The row, printable.
    pub row: String,
    /// Why.
    pub reason: String,
}

/// What a migration (or dry run) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The checkpoint this run resumed after, printable; `None` for a run from the start.
    pub resumed_after: Option<String>,
    /// Rows read.
    pub rows: u64,
    /// Cells already at the current version in the current codec.
    pub current: u64,
    /// Cells rewritten (a dry run: cells that would be).
    pub rewritten: u64,
    /// Cells the application changed between the read and the rewrite: left as written.
    pub raced: u64,
    /// The cells as found (of the rows this run read).
    pub census: Census,
    /// Unreadable cells, the first 100 by name.
    pub failures: Vec<Failure>,
}

/// Where progress reports go: `Send`, so that [`Migration::run_async`]'s future is.
type ProgressFn<'a> = Box<dyn FnMut(&Progress) + Send + 'a>;

/// A migration of one blob column to the current version of `T`; see the module docs.
pub struct Migration<'a, T> {
    db: &'a Db,
    column: Column,
    dry_run: bool,
    stop_on_error: bool,
    progress: Option<ProgressFn<'a>>,
    _type: PhantomData<fn() -> T>,
}

/// The column a migration reads and rewrites.
#[derive(Clone)]
struct Column {
    table: String,
    family: Bytes,
    qualifier: Bytes,
}

impl Db {
    /// A migration of the blobs of aggregate `A` (the `blob` strategy, declared `Versioned`).
    pub fn migrate<A: Aggregate + Versioned>(&self) -> Migration<'_, A> {
        let (family, qualifier) = crate::aggregate::blob_column(&A::SCHEMA);
        Migration::new(self, A::SCHEMA.table, family, qualifier)
    }

    /// A migration of the `Versioned` values of `T` in column `family:qualifier` of `table`
    /// (an entity's `#[cellar(blob)]` field).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a column without a `:`.
    pub fn migrate_column<T: Versioned>(&self, table: &str, column: &str) -> Result<Migration<'_, T>> {
        let (family, qualifier) = column.split_once(':').ok_or_else(|| Error::InvalidArgument {
            arg: "column",
            reason: format!("`{column}` is not `family:qualifier`"),
        })?;
        Ok(Migration::new(self, table, family, qualifier.as_bytes()))
    }
}

impl<'a, T: Versioned> Migration<'a, T> {
    fn new(db: &'a Db, table: &str, family: &str, qualifier: &[u8]) -> Self {
        Migration {
            db,
            column: Column {
                table: table.to_string(),
                family: Bytes::copy_from_slice(family.as_bytes()),
                qualifier: Bytes::copy_from_slice(qualifier),
            },
            dry_run: false,
            stop_on_error: false,
            progress: None,
            _type: PhantomData,
        }
    }

    /// Only counts and checks: writes nothing, keeps no checkpoint.
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// Stops at the first cell that cannot be read, with its error, instead of reporting it
    /// and going on.
    pub fn stop_on_error(mut self) -> Self {
        self.stop_on_error = true;
        self
    }

    /// Calls `f` every 1000 rows and once at the end (not twice when the end
    /// is a checkpoint).
    pub fn on_progress(mut self, f: impl FnMut(&Progress) + Send + 'a) -> Self {
        self.progress = Some(Box::new(f));
        self
    }

    /// The census of the whole column: one scan, nothing written.
    ///
    /// # Errors
    /// Store errors.
    pub fn census(&self) -> Result<Census> {
        let mut census = Census::default();
        for row in self.db.store().scan(&self.column.table, &ScanSpec::default())? {
            let row = row?;
            if let Some(cell) = self.column.cell_of(&row) {
                match versioned::read::<T>(&cell.value) {
                    Ok(read) => *census.formats.entry(format_of(&read)).or_default() += 1,
                    Err(_) => census.unreadable += 1,
                }
            }
        }
        Ok(census)
    }

    /// The job's name: where its checkpoint is kept.
    fn job_key(&self) -> Bytes {
        let mut key = format!("migrate/{}/", self.column.table).into_bytes();
        key.extend_from_slice(&self.column.family);
        key.push(b':');
        key.extend_from_slice(&self.column.qualifier);
        key.into()
    }

    /// Runs the migration (or the dry run) from its checkpoint to the end of the table.
    ///
    /// # Errors
    /// Store errors; with [`Migration::stop_on_error`], [`Error::Blob`] for the first cell
    /// that cannot be read. Rows finished before an error stay finished: running again
    /// resumes after the last checkpoint. A panic of a conversion step reaches the caller.
    pub fn run(self) -> Result<Report> {
        let store = self.db.store().clone();
        let store = &*store;
        std::thread::scope(|s| {
            // The reading side on a thread of its own, so that converting overlaps writing.
            let read_on_thread = |reader: Reader, start: Bytes, tx: mpsc::Sender<Stretch>| {
                let (done, finished) = oneshot::channel();
                s.spawn(move || {
                    let read = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        drive(reader.read::<T>(&Inline(store), start, tx))
                    }));
                    // Fails only if the run is gone already.
                    let _ = done.send(read);
                });
                async move {
                    match finished.await {
                        Ok(Ok(read)) => read,
                        // A conversion step's panic, raised again on the caller's thread.
                        Ok(Err(panic)) => std::panic::resume_unwind(panic),
                        Err(oneshot::Canceled) => Err(Error::Store("the migration's reader stopped".into())),
                    }
                }
            };
            drive(self.run_via(&Inline(store), read_on_thread))
        })
    }

    /// [`Migration::run`] as a future, for async services: the same job, its store calls
    /// awaited (the store's own asynchronous client, or Cellar's blocking pool for the
    /// embedded engine), the next stretch read and converted while the last one's rewrites
    /// are awaited. Dropping the future stops the migration as a kill would: a later run,
    /// either form, resumes after the last checkpoint.
    ///
    /// # Errors
    /// As [`Migration::run`].
    pub fn run_async(self) -> impl Future<Output = Result<Report>> + Send + 'a
    where
        T: 'a,
    {
        let view = AsyncView::new(self.db.store().clone());
        async move {
            let store = view.get();
            self.run_via(store, |reader, start, tx| async move { reader.read::<T>(store, start, tx).await }).await
        }
    }

    /// The run, its reading side started by `read` (given the reader, where to start, and
    /// where to send stretches) as a future that ends when the reading does.
    async fn run_via<R>(
        self,
        store: &dyn AsyncStore,
        read: impl FnOnce(Reader, Bytes, mpsc::Sender<Stretch>) -> R,
    ) -> Result<Report>
    where
        R: Future<Output = Result<()>>,
    {
        let checkpoint = Checkpoint::open(store, self.job_key()).await?;
        let Migration { column, dry_run, stop_on_error, mut progress, .. } = self;
        let resume = if dry_run { None } else { checkpoint.last().await? };
        let mut report = Report { resumed_after: resume.as_deref().map(printable), ..Report::default() };
        let start = Checkpoint::resume_from(resume.as_ref());
        let (tx, rx) = mpsc::channel(0);
        let reading = read(Reader { column: column.clone(), dry_run, stop_on_error }, start, tx);
        let mut found = Tally::default();
        let mut last = Bytes::new();
        let writing = async {
            // Owned by this side: once it ends (an error), the reader's next send fails and
            // it stops.
            let mut rx = rx;
            while let Some(stretch) = rx.next().await {
                column.rewrite(store, stretch.rewrites, &mut report).await?;
                (found, last) = (stretch.found, stretch.last);
                if stretch.checkpoint {
                    if !dry_run {
                        checkpoint.save(&last).await?;
                    }
                    report_progress(&mut progress, &column, dry_run, &last, &found, &report);
                }
            }
            Ok(())
        };
        let (written, read) = futures::future::join(writing, reading).await;
        written.and(read)?;
        if !dry_run {
            checkpoint.clear().await?;
        }
        // The last stretch, unless a checkpoint just reported it.
        if found.rows == 0 || !found.rows.is_multiple_of(CHECKPOINT_EVERY) {
            report_progress(&mut progress, &column, dry_run, &last, &found, &report);
        }
        if dry_run {
            report.rewritten = found.outdated;
        }
        report.rows = found.rows;
        report.current = found.current;
        report.census = found.census;
        report.failures = found.failures;
        Ok(report)
    }
}

/// Reports where a run is: an INFO event always, the callback if asked for.
fn report_progress(
    progress: &mut Option<ProgressFn<'_>>,
    column: &Column,
    dry_run: bool,
    last: &Bytes,
    found: &Tally,
    report: &Report,
) {
    let rewritten = if dry_run { found.outdated } else { report.rewritten };
    let failed = found.census.unreadable;
    tracing::info!(
        table = %column.table,
        rows = found.rows,
        rewritten,
        failed,
        dry_run,
        last_row = %printable(last),
        "migration progress"
    );
    if let Some(f) = progress.as_mut() {
        f(&Progress { rows: found.rows, rewritten, failed, last_row: last.clone() });
    }
}

impl Column {
    /// Writes a stretch's rewrites, each conditional on the bytes it replaces.
    async fn rewrite(
        &self,
        store: &dyn AsyncStore,
        rewrites: Vec<(Condition, RowMutation)>,
        report: &mut Report,
    ) -> Result<()> {
        if rewrites.is_empty() {
            return Ok(());
        }
        let applied = store.check_and_mutate_many(&self.table, rewrites).await?;
        let done = applied.iter().filter(|&&a| a).count() as u64;
        report.rewritten += done;
        report.raced += applied.len() as u64 - done;
        Ok(())
    }

    /// The column's newest cell in `row`.
    fn cell_of<'r>(&self, row: &'r crate::store::Row) -> Option<&'r StoredCell> {
        row.cells.iter().find(|c| c.family == self.family && c.qualifier == self.qualifier)
    }

    fn error(&self, row: &Bytes, source: versioned::VersionError) -> Error {
        Error::Blob {
            table: self.table.clone(),
            row: printable(row),
            column: format!("{}:{}", printable(&self.family), printable(&self.qualifier)),
            source: Box::new(source),
        }
    }
}

/// What the reading side has found so far.
#[derive(Clone, Default)]
struct Tally {
    rows: u64,
    current: u64,
    /// Cells below the current version (or in another codec).
    outdated: u64,
    census: Census,
    failures: Vec<Failure>,
}

/// One stretch of rows, read and converted, for the writing side.
struct Stretch {
    /// The rows' rewrites.
    rewrites: Vec<(Condition, RowMutation)>,
    /// The last row of the stretch.
    last: Bytes,
    /// Everything found up to the stretch's end.
    found: Tally,
    /// The stretch ends on a checkpoint (not at the end of the table or before an error).
    checkpoint: bool,
}

/// The reading side of a run: scans the column and converts what needs it, a stretch at a time.
struct Reader {
    column: Column,
    dry_run: bool,
    stop_on_error: bool,
}

impl Reader {
    /// Sends stretches of the rows from `start` to the end of the table, the last one
    /// partial; stops early, without an error, when the writing side hangs up.
    ///
    /// # Errors
    /// Store errors; with `stop_on_error` the first unreadable cell's, after sending the rows
    /// before it.
    async fn read<T: Versioned>(
        &self,
        store: &dyn AsyncStore,
        start: Bytes,
        mut tx: mpsc::Sender<Stretch>,
    ) -> Result<()> {
        let mut found = Tally::default();
        let mut rewrites = Vec::new();
        let mut last = Bytes::new();
        let scan = ScanSpec { start, ..ScanSpec::default() };
        let mut rows = store.scan_cursor(&self.column.table, &scan).await?;
        while rows.advance().await? {
            let Some(row) = rows.row().map(|r| r.to_row()) else { break };
            found.rows += 1;
            if let Some(cell) = self.column.cell_of(&row) {
                match self.convert::<T>(&row.key, cell, &mut found) {
                    Ok(rewrite) => rewrites.extend(rewrite),
                    Err(e) => {
                        // Stopping: the rows before this one are still worth finishing.
                        found.rows -= 1;
                        send(&mut tx, &mut rewrites, &found, &last, false).await;
                        return Err(e);
                    }
                }
            }
            last = row.key;
            if found.rows.is_multiple_of(CHECKPOINT_EVERY) && !send(&mut tx, &mut rewrites, &found, &last, true).await {
                return Ok(());
            }
        }
        drop(rows);
        send(&mut tx, &mut rewrites, &found, &last, false).await;
        Ok(())
    }

    /// Reads one cell into the tally; returns its rewrite if it needs one.
    fn convert<T: Versioned>(
        &self,
        row: &Bytes,
        cell: &StoredCell,
        found: &mut Tally,
    ) -> Result<Option<(Condition, RowMutation)>> {
        let read = match versioned::read::<T>(&cell.value) {
            Ok(read) => read,
            Err(source) => {
                found.census.unreadable += 1;
                if self.stop_on_error {
                    return Err(self.column.error(row, source));
                }
                if found.failures.len() < MAX_REPORTED {
                    found.failures.push(Failure { row: printable(row), reason: source.to_string() });
                }
                return Ok(None);
            }
        };
        *found.census.formats.entry(format_of(&read)).or_default() += 1;
        if read.is_current() {
            found.current += 1;
            return Ok(None);
        }
        found.outdated += 1;
        if self.dry_run {
            return Ok(None);
        }
        let rewritten = versioned::write(&read.value).map_err(|e| self.column.error(row, e.into()))?;
        let family = self.column.family.clone();
        let qualifier = self.column.qualifier.clone();
        let condition =
            Condition::Equals { family: family.clone(), qualifier: qualifier.clone(), value: cell.value.clone() };
        // At the timestamp of the cell it replaces: a rewrite changes only the encoding, and a
        // write of the application that lands after it, stamped earlier than the rewrite would
        // be, must still be the newest version.
        let put = CellMutation::Put { family, qualifier, value: rewritten.into(), timestamp: Some(cell.timestamp) };
        Ok(Some((condition, RowMutation { row: row.clone(), mutations: vec![put] })))
    }
}

/// Sends the stretch ending at `last` to the writing side; false if it has hung up.
async fn send(
    tx: &mut mpsc::Sender<Stretch>,
    rewrites: &mut Vec<(Condition, RowMutation)>,
    found: &Tally,
    last: &Bytes,
    checkpoint: bool,
) -> bool {
    let stretch = Stretch { rewrites: std::mem::take(rewrites), last: last.clone(), found: found.clone(), checkpoint };
    tx.send(stretch).await.is_ok()
}

fn format_of<T>(read: &versioned::Read<T>) -> Format {
    Format { codec: read.stored_codec.name(), version: read.stored_version }
}
