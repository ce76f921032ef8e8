//! Bulk migration of versioned blobs: rewrite every cell of a column that holds an older
//! version (or another codec) at the type's current version, while the application keeps
//! writing.
//!
//! - Each rewrite is a check-and-mutate on the exact bytes read, so a value the application
//!   wrote meanwhile (always at the current version) is never reverted. The rewrites of a
//!   stretch of rows go to the store as one batch ([`Store::check_and_mutate_many`]).
//! - Reading and writing overlap: one thread scans and converts the next stretch while the
//!   calling thread writes the last one (decoding and re-encoding cost as much as the writes).
//! - The job checkpoints the last row it finished in the database (table [`JOBS_TABLE`]), so
//!   a killed or interrupted migration resumes after it instead of starting over; a finished
//!   one removes its checkpoint.
//! - Progress goes to a callback; cells that cannot be read are counted and reported, and the
//!   job goes on (or stops, if asked).
//! - A census counts the cells per codec × version (and the unreadable ones); a dry run only
//!   takes it and checks that every cell reads.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::mpsc::{sync_channel, SyncSender};

use bytes::Bytes;

use crate::aggregate::Aggregate;
use crate::blob::{versioned, Versioned};
use crate::jobs::Checkpoint;
use crate::repo::printable;
use crate::store::{CellMutation, Condition, RowMutation, ScanSpec, Store, StoredCell};
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

/// Where progress reports go.
type ProgressFn<'a> = Box<dyn FnMut(&Progress) + 'a>;

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
    pub fn on_progress(mut self, f: impl FnMut(&Progress) + 'a) -> Self {
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
    pub fn run(mut self) -> Result<Report> {
        let checkpoint = Checkpoint::open(&**self.db.store(), self.job_key())?;
        let resume = if self.dry_run { None } else { checkpoint.last()? };
        let mut report = Report { resumed_after: resume.as_deref().map(printable), ..Report::default() };
        let start = Checkpoint::resume_from(resume.as_ref());
        let store = self.db.store().clone();
        let reader = Reader { column: self.column.clone(), dry_run: self.dry_run, stop_on_error: self.stop_on_error };
        let mut found = Tally::default();
        let mut last = Bytes::new();
        std::thread::scope(|s| {
            // The channel lives in this closure: if the writing side stops early, dropping the
            // receiver stops the reader before the scope waits for it.
            let (tx, rx) = sync_channel(1);
            let reading = s.spawn(|| reader.read::<T>(&*store, start, tx));
            for stretch in rx.iter() {
                self.rewrite(stretch.rewrites, &mut report)?;
                (found, last) = (stretch.found, stretch.last);
                if stretch.checkpoint {
                    if !self.dry_run {
                        checkpoint.save(&last)?;
                    }
                    self.report_progress(&last, &found, &report);
                }
            }
            match reading.join() {
                Ok(read) => read,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })?;
        if !self.dry_run {
            checkpoint.clear()?;
        }
        // The last stretch, unless a checkpoint just reported it.
        if found.rows == 0 || !found.rows.is_multiple_of(CHECKPOINT_EVERY) {
            self.report_progress(&last, &found, &report);
        }
        if self.dry_run {
            report.rewritten = found.outdated;
        }
        report.rows = found.rows;
        report.current = found.current;
        report.census = found.census;
        report.failures = found.failures;
        Ok(report)
    }

    fn report_progress(&mut self, last: &Bytes, found: &Tally, report: &Report) {
        if let Some(f) = self.progress.as_mut() {
            let rewritten = if self.dry_run { found.outdated } else { report.rewritten };
            let failed = found.census.unreadable;
            f(&Progress { rows: found.rows, rewritten, failed, last_row: last.clone() });
        }
    }

    /// Writes a stretch's rewrites, each conditional on the bytes it replaces.
    fn rewrite(&self, rewrites: Vec<(Condition, RowMutation)>, report: &mut Report) -> Result<()> {
        if rewrites.is_empty() {
            return Ok(());
        }
        let applied = self.db.store().check_and_mutate_many(&self.column.table, rewrites)?;
        let done = applied.iter().filter(|&&a| a).count() as u64;
        report.rewritten += done;
        report.raced += applied.len() as u64 - done;
        Ok(())
    }
}

impl Column {
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
    fn read<T: Versioned>(&self, store: &dyn Store, start: Bytes, tx: SyncSender<Stretch>) -> Result<()> {
        let mut found = Tally::default();
        let mut rewrites = Vec::new();
        let mut last = Bytes::new();
        let send = |rewrites: &mut Vec<_>, found: &Tally, last: &Bytes, checkpoint: bool| {
            let stretch =
                Stretch { rewrites: std::mem::take(rewrites), last: last.clone(), found: found.clone(), checkpoint };
            tx.send(stretch).is_ok()
        };
        for row in store.scan(&self.column.table, &ScanSpec { start, ..ScanSpec::default() })? {
            let row = row?;
            found.rows += 1;
            if let Some(cell) = self.column.cell_of(&row) {
                match self.convert::<T>(&row.key, cell, &mut found) {
                    Ok(rewrite) => rewrites.extend(rewrite),
                    Err(e) => {
                        // Stopping: the rows before this one are still worth finishing.
                        found.rows -= 1;
                        send(&mut rewrites, &found, &last, false);
                        return Err(e);
                    }
                }
            }
            last = row.key;
            if found.rows.is_multiple_of(CHECKPOINT_EVERY) && !send(&mut rewrites, &found, &last, true) {
                return Ok(());
            }
        }
        send(&mut rewrites, &found, &last, false);
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

fn format_of<T>(read: &versioned::Read<T>) -> Format {
    Format { codec: read.stored_codec.name(), version: read.stored_version }
}
