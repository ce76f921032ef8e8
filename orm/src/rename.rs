//! Moving the cells of renamed columns to their current qualifier: the last step of a rename
//! (`#[cellar(column = "new", rename_from = "old")]`), once no release reads the old
//! qualifier any more.
//!
//! A renamed column reads the newest cell of its qualifier and its earlier ones, so rows
//! written before the rename read without a move. The move makes the earlier qualifiers
//! empty — the census ([`crate::Db::census`]) then shows none left, and the aliases can be
//! dropped from the entity — without changing what any read returns:
//! - each cell moves at its own timestamp, so a value written after it stays the newest, and
//!   reads as of a past time find what they found before (every version the family keeps);
//! - a cell the current qualifier holds at a newer timestamp (or the same one) is left as it
//!   is: the earlier qualifier's cells are only deleted;
//! - each column's move in a row is one check-and-mutate conditioned on the newest
//!   earlier-qualifier cell as read, so a row that changed since the read is read again and
//!   moved as it is then, never overwritten with what it held before (a write of this release
//!   only ever adds a newer cell under the current qualifier, or deletes the column under
//!   every qualifier; a release still writing the earlier qualifier could write the very bytes
//!   it held, which no condition tells from no write — one more reason to move only once such
//!   releases are gone);
//! - index entries are computed from the value reads take, which a move leaves as it was.
//!
//! The job checkpoints the last row of each batch in the database (table
//! [`crate::migrate::JOBS_TABLE`]), so a killed or interrupted run resumes after it; a finished
//! run removes the checkpoint.

use std::fmt;

use bytes::Bytes;

use crate::entity::{ColumnSpec, Entity, Schema};
use crate::jobs::Checkpoint;
use crate::repo::{printable, Repository};
use crate::store::drive::drive;
use crate::store::{CellMutation, Columns, Condition, Inline, LentRow, ReadSpec, RowMutation, ScanSpec, Store};
use crate::{Error, Result};

/// Rows per batch, unless [`MoveRenamed::batch_rows`] says otherwise: the moves of a batch go
/// to the store together, then the checkpoint and the progress report.
pub const DEFAULT_BATCH_ROWS: usize = 1000;
/// Tries of a row's move: a row that changed between the read and the move is read again and
/// its move planned anew, this many times in all before it is reported as raced.
const ATTEMPTS: u32 = 3;

/// Where a running move is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveProgress {
    /// Rows read in this run, of any record type.
    pub scanned: u64,
    /// Rows of the entity read in this run.
    pub rows: u64,
    /// Values moved to the current qualifier (a dry run: that would be).
    pub moved: u64,
    /// Earlier-qualifier cells deleted under a newer current cell (a dry run: that would be).
    pub superseded: u64,
    /// Moves given up on: the row kept changing (see [`ColumnMoves::raced`]).
    pub raced: u64,
    /// The last row finished.
    pub last_row: Bytes,
}

/// What a move did to one renamed column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnMoves {
    /// The field.
    pub field: &'static str,
    /// Its family.
    pub family: &'static str,
    /// Its current qualifier.
    pub qualifier: &'static str,
    /// Its earlier qualifiers.
    pub aliases: &'static [&'static str],
    /// Rows whose value (the newest cell, under an earlier qualifier) moved to the current
    /// qualifier, and their earlier cells were deleted.
    pub moved: u64,
    /// Rows whose current qualifier already held the newest cell: their earlier-qualifier
    /// cells were only deleted.
    pub superseded: u64,
    /// Cell versions written under the current qualifier (older versions of a value move
    /// too, as far as the family keeps them).
    pub versions: u64,
    /// Rows whose cells changed between every read and the move that followed it: left as
    /// they were; a next run moves them.
    pub raced: u64,
}

impl ColumnMoves {
    fn new(spec: &'static ColumnSpec) -> Self {
        ColumnMoves {
            field: spec.field,
            family: spec.family,
            qualifier: spec.qualifier,
            aliases: spec.aliases,
            moved: 0,
            superseded: 0,
            versions: 0,
            raced: 0,
        }
    }
}

/// What a move (or dry run) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MoveReport {
    /// The entity.
    pub entity: &'static str,
    /// Its table.
    pub table: &'static str,
    /// A dry run: counts of what a run would do, nothing written.
    pub dry_run: bool,
    /// The checkpoint this run resumed after, printable; `None` for a run from the start.
    pub resumed_after: Option<String>,
    /// Rows of the entity read (tombstones and other record types left out).
    pub rows: u64,
    /// Of those, rows holding a cell under an earlier qualifier.
    pub rows_with_earlier: u64,
    /// Per renamed column, in declaration order.
    pub columns: Vec<ColumnMoves>,
}

impl MoveReport {
    /// Values moved, all columns together.
    pub fn moved(&self) -> u64 {
        self.columns.iter().map(|c| c.moved).sum()
    }

    /// Earlier cells deleted under a newer current cell, all columns together.
    pub fn superseded(&self) -> u64 {
        self.columns.iter().map(|c| c.superseded).sum()
    }

    /// Moves given up on, all columns together: 0 when the run left no earlier-qualifier
    /// cell behind in the rows it read.
    pub fn raced(&self) -> u64 {
        self.columns.iter().map(|c| c.raced).sum()
    }
}

impl fmt::Display for MoveReport {
    /// A header line, then one line per renamed column.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.dry_run { "dry run of moving" } else { "moved" };
        write!(f, "{what} renamed columns of {} (table `{}`): {} rows read", self.entity, self.table, self.rows)?;
        if let Some(after) = &self.resumed_after {
            write!(f, " after {after}")?;
        }
        writeln!(f, ", {} held earlier qualifiers", self.rows_with_earlier)?;
        let verb = if self.dry_run { "would move" } else { "moved" };
        for c in &self.columns {
            let from: Vec<String> = c.aliases.iter().map(|a| format!("{}:{a}", c.family)).collect();
            writeln!(
                f,
                "  {} ({} -> {}:{}): {verb} {}, {} already newer under {}:{}, {} raced; {} versions",
                c.field,
                from.join(", "),
                c.family,
                c.qualifier,
                c.moved,
                c.superseded,
                c.family,
                c.qualifier,
                c.raced,
                c.versions
            )?;
        }
        Ok(())
    }
}

/// Where progress reports go.
type ProgressFn<'a> = Box<dyn FnMut(&MoveProgress) + 'a>;

/// A move of renamed columns' cells, being set up; from [`Repository::move_renamed`].
pub struct MoveRenamed<'a, E> {
    repo: &'a Repository<E>,
    dry_run: bool,
    batch_rows: usize,
    progress: Option<ProgressFn<'a>>,
}

impl<E: Entity> Repository<E> {
    /// A job that moves every cell of a renamed column (`rename_from`, `aliases`) from its
    /// earlier qualifiers to its current one, in every row, and deletes the earlier
    /// qualifiers' cells — without changing what any read of this release returns (see
    /// [`crate::rename`]): each cell keeps its timestamp, a newer cell under the current
    /// qualifier is left alone, and each row's move is conditioned on the cells read, so a
    /// concurrent write is never overwritten. Checkpoints after every batch and resumes after
    /// a kill; [`MoveRenamed::dry_run`] only counts.
    ///
    /// Releases that read the earlier qualifier stop seeing the value once it moves: an older
    /// release reads a moved row as missing the field. Run the move after the last release
    /// that reads the earlier qualifier is gone; until then, reads of this release need no
    /// move. Afterwards, [`crate::Db::census`] shows no earlier-qualifier cells left, and the
    /// aliases can be dropped from the entity.
    pub fn move_renamed(&self) -> MoveRenamed<'_, E> {
        MoveRenamed { repo: self, dry_run: false, batch_rows: DEFAULT_BATCH_ROWS, progress: None }
    }
}

/// One column's move in one row, ready to apply.
struct Planned {
    /// The row.
    row: Bytes,
    /// The column's position among the renamed ones.
    column: usize,
    /// The value moves (the newest cell is under an earlier qualifier).
    moves_value: bool,
    /// Versions written under the current qualifier.
    versions: u64,
    /// The move, conditioned on the newest earlier-qualifier cell as read.
    entry: (Condition, RowMutation),
}

impl<'a, E: Entity> MoveRenamed<'a, E> {
    /// Only counts what a run would move: writes nothing, keeps no checkpoint.
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// Rows per batch (at least 1) instead of [`DEFAULT_BATCH_ROWS`]: the moves of a batch go
    /// to the store together; the checkpoint and the progress report follow each batch.
    pub fn batch_rows(mut self, rows: usize) -> Self {
        self.batch_rows = rows.max(1);
        self
    }

    /// Calls `f` after every batch and once at the end (not twice when the end is a batch's).
    pub fn on_progress(mut self, f: impl FnMut(&MoveProgress) + 'a) -> Self {
        self.progress = Some(Box::new(f));
        self
    }

    /// The job's name: where its checkpoint is kept.
    fn job_key() -> Bytes {
        Bytes::from(format!("rename/{}/{}", E::SCHEMA.table, E::SCHEMA.entity))
    }

    /// Runs the move (or the dry run) from its checkpoint to the end of the table. An entity
    /// without renamed columns has nothing to move: the table is not read.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for the objects of an aggregate (written only through its
    /// repository); store errors. Batches finished before an error stay finished: running
    /// again resumes after the last checkpoint.
    pub fn run(mut self) -> Result<MoveReport> {
        let schema = &E::SCHEMA;
        if !E::STANDALONE {
            return Err(Error::InvalidArgument {
                arg: "entity",
                reason: format!(
                    "{} is an aggregate's object: its rows change only through the aggregate",
                    schema.entity
                ),
            });
        }
        let renamed: Vec<&'static ColumnSpec> = schema.columns.iter().filter(|c| !c.aliases.is_empty()).collect();
        let mut report = MoveReport {
            entity: schema.entity,
            table: schema.table,
            dry_run: self.dry_run,
            columns: renamed.iter().map(|c| ColumnMoves::new(c)).collect(),
            ..MoveReport::default()
        };
        if renamed.is_empty() {
            self.report_progress(&report, 0, &Bytes::new());
            return Ok(report);
        }
        let store = self.repo.store();
        let inline = Inline(store);
        let checkpoint = if self.dry_run { None } else { Some(drive(Checkpoint::open(&inline, Self::job_key()))?) };
        let resume = match &checkpoint {
            Some(c) => drive(c.last())?,
            None => None,
        };
        report.resumed_after = resume.as_deref().map(printable);
        let read = read_spec(schema, &renamed);
        let scan =
            ScanSpec { start: Checkpoint::resume_from(resume.as_ref()), read: read.clone(), ..ScanSpec::default() };
        let mut cursor = store.scan_cursor(schema.table, &scan)?;
        let (mut scanned, mut last, mut batch) = (0u64, Bytes::new(), Vec::new());
        while cursor.advance()? {
            let Some(row) = cursor.row() else { break };
            scanned += 1;
            last = Bytes::copy_from_slice(row.key());
            let other = E::key_from_row(row).is_err_and(|e| e.other_record_type);
            if !other && !crate::index::is_tombstone(schema, row) {
                report.rows += 1;
                let before = batch.len();
                batch.extend(renamed.iter().enumerate().filter_map(|(i, spec)| plan(schema, spec, i, row)));
                report.rows_with_earlier += u64::from(batch.len() > before);
            }
            if scanned.is_multiple_of(self.batch_rows as u64) {
                self.apply(std::mem::take(&mut batch), &renamed, &read, &mut report)?;
                if let Some(c) = &checkpoint {
                    drive(c.save(&last))?;
                }
                self.report_progress(&report, scanned, &last);
            }
        }
        drop(cursor);
        self.apply(batch, &renamed, &read, &mut report)?;
        if let Some(c) = &checkpoint {
            drive(c.clear())?;
        }
        // The last batch, unless a full one just reported it.
        if scanned == 0 || !scanned.is_multiple_of(self.batch_rows as u64) {
            self.report_progress(&report, scanned, &last);
        }
        Ok(report)
    }

    /// Applies a batch's moves; those whose row changed since it was read are read again and
    /// planned anew, up to [`ATTEMPTS`] tries in all.
    fn apply(
        &self,
        mut pending: Vec<Planned>,
        renamed: &[&'static ColumnSpec],
        read: &ReadSpec,
        report: &mut MoveReport,
    ) -> Result<()> {
        let store = self.repo.store();
        let table = E::SCHEMA.table;
        for attempt in 1..=ATTEMPTS {
            if pending.is_empty() {
                return Ok(());
            }
            let mut failed = Vec::new();
            if self.dry_run {
                pending.into_iter().for_each(|p| count(report, &p));
            } else {
                let entries = pending.iter().map(|p| p.entry.clone()).collect();
                let applied = store.check_and_mutate_many(table, entries)?;
                for (p, applied) in pending.into_iter().zip(applied) {
                    if applied {
                        count(report, &p);
                    } else {
                        failed.push(p);
                    }
                }
            }
            if failed.is_empty() {
                return Ok(());
            }
            if attempt == ATTEMPTS {
                for p in &failed {
                    if let Some(c) = report.columns.get_mut(p.column) {
                        c.raced += 1;
                    }
                }
                return Ok(());
            }
            pending = replan(store, &E::SCHEMA, renamed, read, &failed)?;
        }
        Ok(())
    }

    fn report_progress(&mut self, report: &MoveReport, scanned: u64, last: &Bytes) {
        if let Some(f) = self.progress.as_mut() {
            f(&MoveProgress {
                scanned,
                rows: report.rows,
                moved: report.moved(),
                superseded: report.superseded(),
                raced: report.raced(),
                last_row: last.clone(),
            });
        }
    }
}

/// Counts an applied move (a dry run's planned one).
fn count(report: &mut MoveReport, p: &Planned) {
    if let Some(c) = report.columns.get_mut(p.column) {
        if p.moves_value {
            c.moved += 1;
        } else {
            c.superseded += 1;
        }
        c.versions += p.versions;
    }
}

/// The moves of `failed` planned again from their rows as they are now; a row whose earlier
/// cells are gone meanwhile (a write of this release deleted them) needs none.
fn replan(
    store: &dyn Store,
    schema: &Schema,
    renamed: &[&'static ColumnSpec],
    read: &ReadSpec,
    failed: &[Planned],
) -> Result<Vec<Planned>> {
    let mut keys: Vec<Bytes> = failed.iter().map(|p| p.row.clone()).collect();
    keys.dedup();
    let rows = store.read_rows(schema.table, &keys, read)?;
    let mut pending = Vec::new();
    for p in failed {
        let row = keys.iter().position(|k| *k == p.row).and_then(|i| rows.get(i)).and_then(Option::as_ref);
        let (Some(row), Some(spec)) = (row, renamed.get(p.column)) else { continue };
        pending.extend(plan(schema, spec, p.column, row.lend()));
    }
    Ok(pending)
}

/// Reads every version the renamed columns' families keep: older versions move too.
fn read_spec(schema: &Schema, renamed: &[&'static ColumnSpec]) -> ReadSpec {
    let versions = renamed.iter().map(|c| family_versions(schema, c)).max().unwrap_or(1);
    ReadSpec { max_versions: versions, time_range: None, columns: Columns::All }
}

/// Versions the family of `spec` keeps (1, the default, for a family the schema does not
/// list).
fn family_versions(schema: &Schema, spec: &ColumnSpec) -> u32 {
    schema.families.iter().find(|f| f.name == spec.family).map_or(1, |f| f.max_versions).max(1)
}

/// The move of column `spec` (position `column` among the renamed ones) in `row`, if the row
/// holds a cell under one of its earlier qualifiers.
fn plan(schema: &Schema, spec: &'static ColumnSpec, column: usize, row: LentRow<'_>) -> Option<Planned> {
    let family = spec.family.as_bytes();
    let in_family = row.cells().filter(|c| c.family == family);
    // Versions of the current qualifier, newest first, and of the earlier ones with the rank
    // of their qualifier (the first declared wins a tie, as reads take it).
    let mut current: Vec<u64> = Vec::new();
    let mut earlier = Vec::new();
    for cell in in_family {
        if cell.qualifier == spec.qualifier.as_bytes() {
            current.push(cell.timestamp);
        } else if let Some(rank) = spec.aliases.iter().position(|a| a.as_bytes() == cell.qualifier) {
            earlier.push((cell.timestamp, rank, cell));
        }
    }
    // The newest earlier cell: the highest timestamp, then the first declared qualifier.
    let &(newest_ts, _, newest) = earlier.iter().min_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)))?;
    let moves_value = current.first().is_none_or(|&ts| newest_ts > ts);
    // The current qualifier after the move: its own versions, and an earlier one's at every
    // other timestamp (the first declared at a tie); the family keeps the newest
    // `max_versions` of them, so older ones are not written.
    let mut versions: std::collections::BTreeMap<u64, Option<&[u8]>> = current.iter().map(|&ts| (ts, None)).collect();
    earlier.sort_by_key(|&(ts, rank, _)| (rank, std::cmp::Reverse(ts)));
    for &(ts, _, cell) in &earlier {
        versions.entry(ts).or_insert(Some(cell.value));
    }
    let keep = family_versions(schema, spec) as usize;
    let qualifier = Bytes::from_static(spec.qualifier.as_bytes());
    let family_bytes = Bytes::from_static(family);
    let mut mutations: Vec<CellMutation> = versions
        .iter()
        .rev()
        .take(keep)
        .filter_map(|(&ts, value)| Some((ts, (*value)?)))
        .map(|(ts, value)| CellMutation::Put {
            family: family_bytes.clone(),
            qualifier: qualifier.clone(),
            value: Bytes::copy_from_slice(value),
            // At the cell's own timestamp: a write that lands after the move stays the newest.
            timestamp: Some(ts),
        })
        .collect();
    let written = mutations.len() as u64;
    let mut deleted: Vec<&[u8]> = earlier.iter().map(|(_, _, c)| c.qualifier).collect();
    deleted.dedup();
    mutations.extend(
        deleted
            .into_iter()
            .map(|q| CellMutation::DeleteColumn { family: family_bytes.clone(), qualifier: Bytes::copy_from_slice(q) }),
    );
    let condition = Condition::Equals {
        family: family_bytes,
        qualifier: Bytes::copy_from_slice(newest.qualifier),
        value: Bytes::copy_from_slice(newest.value),
    };
    let row_key = Bytes::copy_from_slice(row.key());
    Some(Planned {
        row: row_key.clone(),
        column,
        moves_value,
        versions: written,
        entry: (condition, RowMutation { row: row_key, mutations }),
    })
}
