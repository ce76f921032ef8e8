//! Cost accounting: [`Metered`] wraps any [`Store`] and counts every call made through it, and
//! [`Costs`] is a snapshot of those counts.
//!
//! Why: how many round trips a design costs, and how many rows, cells and bytes it moves, is
//! what decides between storage strategies (one wide row or many narrow ones, normalized or
//! denormalized aggregates, a read-modify-write or a counter). Tests, examples and benches
//! compare strategies on these numbers, so they are exact, and their rules are documented
//! once, on [`Costs`].
//!
//! The counters are relaxed atomics: a call costs a handful of uncontended additions and one
//! pass over the lengths of what it already holds; no row or cell is copied, and only `scan`
//! allocates (the small box of the stream that counts its rows).

use std::fmt;
use std::ops::Sub;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::latency::{Kind, Latencies};
use super::observe::{outcome, Observed, Observer, Outcome};
use super::{
    CellMutation, Commit, Condition, FamilyAlteration, FamilyChange, Guarantees, LentRow, ReadSpec, Row, RowCheck,
    RowCursor, RowCursorBox, RowMutation, RowStream, ScanSpec, Store, TableSpec,
};
use crate::Result;

/// Bytes a cell's timestamp adds to a read or a written put.
pub const TIMESTAMP_BYTES: u64 = 8;

/// What store calls cost: round trips by kind, and rows, cells and bytes read and written.
/// Compare two snapshots with `-`; [`crate::Db::costs`] and [`crate::Db::measure`] give them.
///
/// **Round trips** — one per call to the backend, whatever it carries:
/// - `read_rows` with N keys is one *get*, reading up to N rows;
/// - `scan` is one *scan*, however many rows it streams (counted when the scan starts, even if
///   it fails or is never read);
/// - `mutate` with N rows is one *mutate*, writing N rows;
/// - `check_and_mutate` is one *check-and-mutate*;
/// - `mutate_group` is one *group mutate*;
/// - `increment` is one *increment*;
/// - `ensure_table`, `alter_families`, `split_keys` and `describe` are *admin* calls, counted
///   apart and never in reads or writes; [`Costs::round_trips`] leaves them out. `guarantees`
///   asks the backend nothing and is not counted.
///
/// A call that fails still counts its round trip, and nothing read or written — even a failed
/// `mutate` that applied some of its rows before the failure.
///
/// **Reads** — what the backend returned:
/// - rows read: rows returned (`Some` entries of `read_rows`; scan rows as the stream yields
///   them, so rows a caller never pulls are not counted);
/// - cells read: [`StoredCell`](super::StoredCell)s in those rows;
/// - bytes read: per cell returned, `row key + family + qualifier + value + 8` (the 8-byte
///   timestamp), all lengths in bytes — the cell as HBase would put it on the wire, framing
///   left out.
///
/// **Writes** — what the call carried, counted only when it took effect (`mutate` succeeded,
/// `check_and_mutate` or `mutate_group` applied):
/// - rows written: [`RowMutation`]s in the call (a `mutate_group`'s checks are not rows
///   written);
/// - cells written: one per [`CellMutation`] — a `Put` is one cell, a `DeleteColumn` one cell
///   and a `DeleteRow` one;
/// - bytes written: per `Put`, `row key + family + qualifier + value + 8` (the timestamp, given
///   or assigned by the store); per `DeleteColumn`, `row key + family + qualifier`; per
///   `DeleteRow`, `row key`.
///
/// **Increments** — a successful `increment` reads and writes one row and one cell, of
/// `row key + family + qualifier + 8 (the counter) + 8 (the timestamp)` bytes each way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Costs {
    /// `read_rows` calls (one per call, however many keys).
    pub gets: u64,
    /// `scan` calls (one per call, however many rows it streams).
    pub scans: u64,
    /// `mutate` and `mutate_row` calls (one per call, however many rows).
    pub mutates: u64,
    /// `check_and_mutate` calls, applied or not; a `check_and_mutate_many` batch counts once.
    pub check_and_mutates: u64,
    /// `mutate_group` and `commit` calls (atomic multi-row mutations), applied or not.
    pub group_mutates: u64,
    /// `increment` calls.
    pub increments: u64,
    /// `ensure_table` and `split_keys` calls; not in [`Costs::round_trips`].
    pub admin: u64,
    /// Rows returned by gets and scans, and rows of successful increments.
    pub rows_read: u64,
    /// Cells returned.
    pub cells_read: u64,
    /// Per cell returned: row key + family + qualifier + value + 8 (timestamp).
    pub bytes_read: u64,
    /// Rows of mutations that took effect.
    pub rows_written: u64,
    /// Cell mutations that took effect: each put, each column delete, each row delete.
    pub cells_written: u64,
    /// Per put: row key + family + qualifier + value + 8 (timestamp); per column delete: row
    /// key + family + qualifier; per row delete: row key.
    pub bytes_written: u64,
}

impl Costs {
    /// Data round trips: gets, scans, mutates, check-and-mutates, group mutates and increments
    /// (admin calls left out).
    pub fn round_trips(&self) -> u64 {
        self.gets + self.scans + self.mutates + self.check_and_mutates + self.group_mutates + self.increments
    }
}

/// The difference of two snapshots, field by field (saturating at zero, so a snapshot taken
/// before another never makes a negative count).
impl Sub for Costs {
    type Output = Costs;

    fn sub(self, earlier: Costs) -> Costs {
        Costs {
            gets: self.gets.saturating_sub(earlier.gets),
            scans: self.scans.saturating_sub(earlier.scans),
            mutates: self.mutates.saturating_sub(earlier.mutates),
            check_and_mutates: self.check_and_mutates.saturating_sub(earlier.check_and_mutates),
            group_mutates: self.group_mutates.saturating_sub(earlier.group_mutates),
            increments: self.increments.saturating_sub(earlier.increments),
            admin: self.admin.saturating_sub(earlier.admin),
            rows_read: self.rows_read.saturating_sub(earlier.rows_read),
            cells_read: self.cells_read.saturating_sub(earlier.cells_read),
            bytes_read: self.bytes_read.saturating_sub(earlier.bytes_read),
            rows_written: self.rows_written.saturating_sub(earlier.rows_written),
            cells_written: self.cells_written.saturating_sub(earlier.cells_written),
            bytes_written: self.bytes_written.saturating_sub(earlier.bytes_written),
        }
    }
}

/// `n` and the singular or plural noun.
fn count(f: &mut fmt::Formatter<'_>, n: u64, one: &str, many: &str) -> fmt::Result {
    write!(f, "{n} {}", if n == 1 { one } else { many })
}

/// Bytes in binary units: `512 B`, `1.2 KiB`, `3.0 MiB`, `1.5 GiB` (one decimal above bytes).
pub(crate) struct ByteSize(pub(crate) u64);

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
        if self.0 < 1024 {
            return write!(f, "{} B", self.0);
        }
        let mut size = self.0 as f64 / 1024.0;
        let mut unit = 0;
        while size >= 1024.0 && unit + 1 < UNITS.len() {
            size /= 1024.0;
            unit += 1;
        }
        write!(f, "{size:.1} {}", UNITS[unit])
    }
}

/// One line, every part always present and in this order:
/// `3 round trips (1 get, 1 scan, 1 mutate), 12 rows / 40 cells / 1.2 KiB read, 4 rows / 9 cells / 300 B written`.
/// The parenthesis lists the kinds with a nonzero count (gets, scans, mutates,
/// check-and-mutates, group mutates, increments) and is left out with no round trip; admin
/// calls, if any, follow it as ` + 1 admin call`. Byte sizes are in bytes below 1 KiB, else in
/// KiB, MiB, GiB or TiB with one decimal.
impl fmt::Display for Costs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        count(f, self.round_trips(), "round trip", "round trips")?;
        let kinds = [
            (self.gets, "get", "gets"),
            (self.scans, "scan", "scans"),
            (self.mutates, "mutate", "mutates"),
            (self.check_and_mutates, "check-and-mutate", "check-and-mutates"),
            (self.group_mutates, "group mutate", "group mutates"),
            (self.increments, "increment", "increments"),
        ];
        let mut first = true;
        for (n, one, many) in kinds {
            if n == 0 {
                continue;
            }
            f.write_str(if first { " (" } else { ", " })?;
            first = false;
            count(f, n, one, many)?;
        }
        if !first {
            f.write_str(")")?;
        }
        if self.admin > 0 {
            f.write_str(" + ")?;
            count(f, self.admin, "admin call", "admin calls")?;
        }
        f.write_str(", ")?;
        count(f, self.rows_read, "row", "rows")?;
        f.write_str(" / ")?;
        count(f, self.cells_read, "cell", "cells")?;
        write!(f, " / {} read, ", ByteSize(self.bytes_read))?;
        count(f, self.rows_written, "row", "rows")?;
        f.write_str(" / ")?;
        count(f, self.cells_written, "cell", "cells")?;
        write!(f, " / {} written", ByteSize(self.bytes_written))
    }
}

/// The live counters behind [`Costs`].
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) gets: AtomicU64,
    pub(super) scans: AtomicU64,
    pub(super) mutates: AtomicU64,
    pub(super) check_and_mutates: AtomicU64,
    pub(super) group_mutates: AtomicU64,
    pub(super) increments: AtomicU64,
    pub(super) admin: AtomicU64,
    pub(super) rows_read: AtomicU64,
    pub(super) cells_read: AtomicU64,
    pub(super) bytes_read: AtomicU64,
    pub(super) rows_written: AtomicU64,
    pub(super) cells_written: AtomicU64,
    pub(super) bytes_written: AtomicU64,
}

/// Adds `n` to a counter; relaxed, as the counts order nothing else.
pub(super) fn add(counter: &AtomicU64, n: u64) {
    if n != 0 {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// A length as a count.
fn len(b: &[u8]) -> u64 {
    b.len() as u64
}

/// Rows, cells and bytes of a read or a write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Volume {
    pub(super) rows: u64,
    pub(super) cells: u64,
    pub(super) bytes: u64,
}

impl Volume {
    /// A row as returned: one row, its cells, and per cell row key + family + qualifier +
    /// value + timestamp bytes.
    pub(super) fn read(row: LentRow<'_>) -> Volume {
        let key = len(row.key());
        let bytes = row.cells().map(|c| key + len(c.family) + len(c.qualifier) + len(c.value) + TIMESTAMP_BYTES).sum();
        Volume { rows: 1, cells: row.len() as u64, bytes }
    }

    /// A row mutation as carried: one row, one cell per cell mutation, and per put row key +
    /// family + qualifier + value + timestamp bytes, per column delete row key + family +
    /// qualifier, per row delete the row key.
    pub(super) fn written(m: &RowMutation) -> Volume {
        let key = len(&m.row);
        let bytes = m
            .mutations
            .iter()
            .map(|c| match c {
                CellMutation::Put { family, qualifier, value, .. }
                | CellMutation::PutAtApply { family, qualifier, value } => {
                    key + len(family) + len(qualifier) + len(value) + TIMESTAMP_BYTES
                }
                CellMutation::DeleteColumn { family, qualifier } => key + len(family) + len(qualifier),
                CellMutation::DeleteFamily { family } => key + len(family),
                CellMutation::DeleteRow => key,
            })
            .sum();
        Volume { rows: 1, cells: m.mutations.len() as u64, bytes }
    }

    /// An increment's cell: the row key, family, qualifier, the 8-byte counter and the
    /// timestamp.
    pub(super) fn counter(row: &Bytes, family: &str, qualifier: &str) -> Volume {
        let bytes = len(row) + family.len() as u64 + qualifier.len() as u64 + 8 + TIMESTAMP_BYTES;
        Volume { rows: 1, cells: 1, bytes }
    }

    pub(super) fn sum<'a>(rows: impl IntoIterator<Item = &'a RowMutation>) -> Volume {
        rows.into_iter().map(Volume::written).fold(Volume::default(), |mut a, b| {
            a += b;
            a
        })
    }
}

impl std::ops::AddAssign for Volume {
    fn add_assign(&mut self, other: Volume) {
        self.rows += other.rows;
        self.cells += other.cells;
        self.bytes += other.bytes;
    }
}

impl Counters {
    pub(super) fn read(&self, v: Volume) {
        add(&self.rows_read, v.rows);
        add(&self.cells_read, v.cells);
        add(&self.bytes_read, v.bytes);
    }

    pub(super) fn written(&self, v: Volume) {
        add(&self.rows_written, v.rows);
        add(&self.cells_written, v.cells);
        add(&self.bytes_written, v.bytes);
    }

    fn snapshot(&self) -> Costs {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Costs {
            gets: get(&self.gets),
            scans: get(&self.scans),
            mutates: get(&self.mutates),
            check_and_mutates: get(&self.check_and_mutates),
            group_mutates: get(&self.group_mutates),
            increments: get(&self.increments),
            admin: get(&self.admin),
            rows_read: get(&self.rows_read),
            cells_read: get(&self.cells_read),
            bytes_read: get(&self.bytes_read),
            rows_written: get(&self.rows_written),
            cells_written: get(&self.cells_written),
            bytes_written: get(&self.bytes_written),
        }
    }
}

/// A [`Store`] that delegates every call to another and counts it (rules on [`Costs`]).
/// [`crate::Db`] puts one around every store it opens.
pub struct Metered {
    pub(super) inner: Arc<dyn Store>,
    pub(super) counters: Counters,
    /// Spans, latencies, slow calls and metrics of the calls.
    pub(super) observer: Observer,
    /// The metered store for asynchronous callers when it has no `AsyncStore` of its own:
    /// its calls on the blocking pool, counted here as they come back (a scan's rows as the
    /// caller takes them, not as the pool reads ahead).
    pub(super) offload: super::Offload,
}

impl fmt::Debug for Metered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metered").field("costs", &self.costs()).finish_non_exhaustive()
    }
}

impl Metered {
    /// Counts the calls made to `inner`, starting from zero.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Metered {
            offload: super::Offload::new(inner.clone()),
            inner,
            counters: Counters::default(),
            observer: Observer::default(),
        }
    }

    /// The store being metered; calls made directly to it are not counted.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    /// The counts so far. Each counter is read on its own: while other threads are calling
    /// the store, a snapshot may hold part of a call (its round trip but not yet its rows). A
    /// scan's rows count once its stream has ended or been dropped.
    pub fn costs(&self) -> Costs {
        self.counters.snapshot()
    }

    /// How long the calls made while latencies were tracked took, per kind (see
    /// [`Latencies`] and [`Metered::track_latencies`]).
    pub fn latencies(&self) -> Latencies {
        self.observer.latencies()
    }

    /// Records every call's latency into [`Metered::latencies`] (`true`), or stops (`false`,
    /// the default). Off, calls are timed only when something else wants their time (a
    /// subscriber recording their spans, a slow-call threshold, the `metrics` feature): two
    /// clock reads are a measurable share of an embedded call.
    pub fn track_latencies(&self, on: bool) {
        self.observer.track(on);
    }

    /// Whether latencies are tracked ([`Metered::track_latencies`]).
    pub fn tracks_latencies(&self) -> bool {
        self.observer.tracking()
    }

    /// Runs `f` with latencies recorded meanwhile, tracked or not (other threads' calls
    /// included, as for the counts).
    pub fn timing<T>(&self, f: impl FnOnce() -> T) -> T {
        let _measuring = self.observer.measuring();
        f()
    }

    /// Calls that take at least `threshold` log one WARN (`slow store call`, target
    /// `cellar_orm::store::observe`) naming the call, table, first row and what it moved;
    /// `None` turns it off (the default).
    pub fn set_slow_call_threshold(&self, threshold: Option<Duration>) {
        self.observer.set_slow_threshold(threshold);
    }

    /// The slow-call threshold, if one is set.
    pub fn slow_call_threshold(&self) -> Option<Duration> {
        self.observer.slow_threshold()
    }
}

/// A scan under way: its rows counted as they are yielded and added to the counters when
/// the scan ends or is dropped (not three shared atomic additions per row, which threads
/// scanning through one `Db` would contend on), and its call finished then.
pub(super) struct ScanCall<'a> {
    metered: &'a Metered,
    /// Yielded and not yet added to the counters.
    pending: Volume,
    /// Yielded in all, for the call's span.
    total: Volume,
    call: Option<Observed<'a>>,
}

impl<'a> ScanCall<'a> {
    pub(super) fn new(metered: &'a Metered, call: Observed<'a>) -> Self {
        ScanCall { metered, pending: Volume::default(), total: Volume::default(), call: Some(call) }
    }

    pub(super) fn row(&mut self, row: LentRow<'_>) {
        self.pending += Volume::read(row);
    }

    /// Counts a cursor's move that returned `moved`, now on `row`: a row lent adds to what is
    /// pending; the end of the scan (or a failure) settles.
    pub(super) fn moved(&mut self, moved: &Result<bool>, row: Option<LentRow<'_>>) {
        match (moved, row) {
            (Ok(true), Some(row)) => self.row(row),
            (Err(e), _) => self.settle(Outcome::Failed(e)),
            _ => self.settle(Outcome::Ok),
        }
    }

    /// The scan ended, failed or was dropped: adds what is pending to the counters, and
    /// finishes the call the first time.
    pub(super) fn settle(&mut self, outcome: Outcome<'_>) {
        let pending = std::mem::take(&mut self.pending);
        self.metered.counters.read(pending);
        self.total += pending;
        if let Some(call) = self.call.take() {
            call.finish(outcome, self.total);
        }
    }
}

impl Drop for ScanCall<'_> {
    fn drop(&mut self) {
        self.settle(Outcome::Ok);
    }
}

/// A scan's rows, counted by its [`ScanCall`].
struct MeteredStream<'a> {
    rows: RowStream<'a>,
    call: ScanCall<'a>,
}

impl Iterator for MeteredStream<'_> {
    type Item = Result<Row>;

    fn next(&mut self) -> Option<Result<Row>> {
        let item = self.rows.next();
        match &item {
            Some(Ok(row)) => self.call.row(row.lend()),
            Some(Err(e)) => self.call.settle(Outcome::Failed(e)),
            None => self.call.settle(Outcome::Ok),
        }
        item
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.rows.size_hint()
    }
}

/// A scan's lent rows, counted as [`MeteredStream`] counts owned ones.
struct MeteredCursor<'a> {
    rows: RowCursorBox<'a>,
    call: ScanCall<'a>,
}

impl RowCursor for MeteredCursor<'_> {
    fn advance(&mut self) -> Result<bool> {
        let moved = self.rows.advance();
        self.call.moved(&moved, self.rows.row());
        moved
    }

    fn row(&self) -> Option<LentRow<'_>> {
        self.rows.row()
    }
}

/// The first row of a batch, for the slow-call warning.
pub(super) fn first_row(rows: &[RowMutation]) -> Option<&Bytes> {
    rows.first().map(|m| &m.row)
}

/// The table and first row that name a commit in its span: those of the first row written
/// (an index write's commit writes the entity's table first).
pub(super) fn commit_names(commit: &Commit) -> (&str, Option<&Bytes>) {
    match commit.rows.first() {
        Some((t, row)) => (commit.tables.get(*t).map_or("", String::as_str), Some(&row.row)),
        None => (commit.tables.first().map_or("", String::as_str), None),
    }
}

impl Metered {
    /// Runs a synchronous call inside the span of `observed` and finishes it: `moved` is
    /// what the answer read or wrote, and the outcome.
    fn observed<T>(
        &self,
        observed: Observed<'_>,
        call: impl FnOnce() -> Result<T>,
        moved: impl FnOnce(&T) -> (Outcome<'static>, Volume),
    ) -> Result<T> {
        let result = {
            let _in_call = observed.span().enter();
            call()
        };
        let (outcome, volume) = match &result {
            Ok(answer) => moved(answer),
            Err(e) => (Outcome::Failed(e), Volume::default()),
        };
        observed.finish(outcome, volume);
        result
    }

    /// An admin call: counted apart, observed like the others.
    fn admin<T>(&self, op: &'static str, table: &str, call: impl FnOnce() -> Result<T>) -> Result<T> {
        add(&self.counters.admin, 1);
        let observed = self.observer.start(Kind::Admin, op, table, None);
        self.observed(observed, call, |_| (Outcome::Ok, Volume::default()))
    }

    /// A conditional write's counts and outcome.
    pub(super) fn applied(&self, applied: bool, volume: Volume) -> (Outcome<'static>, Volume) {
        if applied {
            self.counters.written(volume);
            (Outcome::Ok, volume)
        } else {
            (Outcome::NotApplied, Volume::default())
        }
    }

    /// A scan opened (or not): its stream counted and observed by a [`ScanCall`].
    fn opened<'a, S>(
        &'a self,
        observed: Observed<'a>,
        opened: Result<S>,
        wrap: impl FnOnce(S, ScanCall<'a>) -> S,
    ) -> Result<S> {
        match opened {
            Ok(rows) => Ok(wrap(rows, ScanCall::new(self, observed))),
            Err(e) => {
                observed.finish(Outcome::Failed(&e), Volume::default());
                Err(e)
            }
        }
    }
}

impl Store for Metered {
    fn ensure_table(&self, spec: &TableSpec) -> Result<()> {
        self.admin("ensure_table", &spec.name, || self.inner.ensure_table(spec))
    }

    fn alter_families(&self, table: &str, changes: &[FamilyChange]) -> Result<Vec<FamilyAlteration>> {
        self.admin("alter_families", table, || self.inner.alter_families(table, changes))
    }

    fn mutate(&self, table: &str, rows: Vec<RowMutation>) -> Result<()> {
        add(&self.counters.mutates, 1);
        let volume = Volume::sum(&rows);
        let observed = self.observer.start(Kind::Mutate, "mutate", table, first_row(&rows));
        self.observed(
            observed,
            || self.inner.mutate(table, rows),
            |_| {
                self.counters.written(volume);
                (Outcome::Ok, volume)
            },
        )
    }

    fn mutate_row(&self, table: &str, row: RowMutation) -> Result<()> {
        add(&self.counters.mutates, 1);
        let volume = Volume::written(&row);
        let observed = self.observer.start(Kind::Mutate, "mutate_row", table, Some(&row.row));
        self.observed(
            observed,
            || self.inner.mutate_row(table, row),
            |_| {
                self.counters.written(volume);
                (Outcome::Ok, volume)
            },
        )
    }

    fn read_rows(&self, table: &str, rows: &[Bytes], read: &ReadSpec) -> Result<Vec<Option<Row>>> {
        add(&self.counters.gets, 1);
        let observed = self.observer.start(Kind::Get, "read_rows", table, rows.first());
        self.observed(
            observed,
            || self.inner.read_rows(table, rows, read),
            |found| {
                let mut volume = Volume::default();
                for row in found.iter().flatten() {
                    volume += Volume::read(row.lend());
                }
                self.counters.read(volume);
                (Outcome::Ok, volume)
            },
        )
    }

    fn scan<'a>(&'a self, table: &str, scan: &ScanSpec) -> Result<RowStream<'a>> {
        add(&self.counters.scans, 1);
        let observed = self.observer.start(Kind::Scan, "scan", table, Some(&scan.start));
        let opened = {
            let _in_call = observed.span().enter();
            self.inner.scan(table, scan)
        };
        self.opened(observed, opened, |rows, call| Box::new(MeteredStream { rows, call }))
    }

    fn scan_cursor<'a>(&'a self, table: &str, scan: &ScanSpec) -> Result<RowCursorBox<'a>> {
        add(&self.counters.scans, 1);
        let observed = self.observer.start(Kind::Scan, "scan", table, Some(&scan.start));
        let opened = {
            let _in_call = observed.span().enter();
            self.inner.scan_cursor(table, scan)
        };
        self.opened(observed, opened, |rows, call| Box::new(MeteredCursor { rows, call }))
    }

    fn read_rows_with(
        &self,
        table: &str,
        rows: &[Bytes],
        read: &ReadSpec,
        visit: &mut dyn FnMut(usize, Option<LentRow<'_>>),
    ) -> Result<()> {
        add(&self.counters.gets, 1);
        let observed = self.observer.start(Kind::Get, "read_rows", table, rows.first());
        let mut volume = Volume::default();
        let result = {
            let _in_call = observed.span().enter();
            self.inner.read_rows_with(table, rows, read, &mut |i, found| {
                if let Some(row) = found {
                    volume += Volume::read(row);
                }
                visit(i, found);
            })
        };
        // Rows lent before a failure were read all the same.
        self.counters.read(volume);
        observed.finish(outcome(&result), volume);
        result
    }

    fn check_and_mutate(&self, table: &str, condition: Condition, mutation: RowMutation) -> Result<bool> {
        add(&self.counters.check_and_mutates, 1);
        let volume = Volume::written(&mutation);
        let observed = self.observer.start(Kind::CheckAndMutate, "check_and_mutate", table, Some(&mutation.row));
        let call = || self.inner.check_and_mutate(table, condition, mutation);
        self.observed(observed, call, |&applied| self.applied(applied, volume))
    }

    fn check_and_mutate_many(&self, table: &str, entries: Vec<(Condition, RowMutation)>) -> Result<Vec<bool>> {
        add(&self.counters.check_and_mutates, 1);
        let volumes: Vec<Volume> = entries.iter().map(|(_, m)| Volume::written(m)).collect();
        let first = entries.first().map(|(_, m)| &m.row);
        let observed = self.observer.start(Kind::CheckAndMutate, "check_and_mutate_many", table, first);
        let call = || self.inner.check_and_mutate_many(table, entries);
        self.observed(observed, call, |applied| self.applied_many(&volumes, applied))
    }

    fn split_keys(&self, table: &str) -> Result<Option<Vec<Bytes>>> {
        self.admin("split_keys", table, || self.inner.split_keys(table))
    }

    fn describe(&self, table: &str) -> Result<Option<TableSpec>> {
        self.admin("describe", table, || self.inner.describe(table))
    }

    fn increment(&self, table: &str, row: Bytes, family: &str, qualifier: &str, delta: i64) -> Result<i64> {
        add(&self.counters.increments, 1);
        let volume = Volume::counter(&row, family, qualifier);
        let observed = self.observer.start(Kind::Increment, "increment", table, Some(&row));
        let call = || self.inner.increment(table, row, family, qualifier, delta);
        self.observed(observed, call, |_| self.incremented(volume))
    }

    fn guarantees(&self) -> Guarantees {
        self.inner.guarantees()
    }

    /// Itself, counting as it does for synchronous calls: over the metered store's own
    /// `AsyncStore`, or its calls on the blocking pool.
    fn as_async(&self) -> Option<&dyn super::AsyncStore> {
        Some(self)
    }

    fn mutate_group(&self, table: &str, checks: Vec<RowCheck>, rows: Vec<RowMutation>) -> Result<bool> {
        add(&self.counters.group_mutates, 1);
        let volume = Volume::sum(&rows);
        let observed = self.observer.start(Kind::GroupMutate, "mutate_group", table, first_row(&rows));
        let call = || self.inner.mutate_group(table, checks, rows);
        self.observed(observed, call, |&applied| self.applied(applied, volume))
    }

    fn commit(&self, commit: Commit) -> Result<bool> {
        add(&self.counters.group_mutates, 1);
        let volume = Volume::sum(commit.rows.iter().map(|(_, r)| r));
        let (table, first) = commit_names(&commit);
        let observed = self.observer.start(Kind::GroupMutate, "commit", table, first);
        self.observed(observed, || self.inner.commit(commit), |&applied| self.applied(applied, volume))
    }

    /// One round trip, counted as a group mutate; the row read counts as read (each time
    /// `build` gets it), and the last commit built as written if it was applied.
    fn read_and_commit(
        &self,
        table: &str,
        row: &Bytes,
        read: &ReadSpec,
        build: &mut dyn FnMut(Option<&Row>) -> Option<Commit>,
    ) -> Result<Option<bool>> {
        add(&self.counters.group_mutates, 1);
        let observed = self.observer.start(Kind::GroupMutate, "read_and_commit", table, Some(row));
        let mut volume = None;
        let applied = {
            let _in_call = observed.span().enter();
            self.inner.read_and_commit(table, row, read, &mut |found| {
                if let Some(found) = found {
                    self.counters.read(Volume::read(found.lend()));
                }
                let commit = build(found);
                volume = commit.as_ref().map(|c| Volume::sum(c.rows.iter().map(|(_, r)| r)));
                commit
            })
        };
        let (outcome, moved) = self.committed(&applied, volume);
        observed.finish(outcome, moved);
        applied
    }
}

impl Metered {
    /// A batch of conditional writes' counts and outcome: applied if any was.
    pub(super) fn applied_many(&self, volumes: &[Volume], applied: &[bool]) -> (Outcome<'static>, Volume) {
        let mut written = Volume::default();
        for (volume, _) in volumes.iter().zip(applied).filter(|(_, &a)| a) {
            written += *volume;
        }
        self.counters.written(written);
        (Outcome::applied(applied.iter().any(|&a| a) || applied.is_empty()), written)
    }

    /// An increment's counts: one cell read and written.
    pub(super) fn incremented(&self, volume: Volume) -> (Outcome<'static>, Volume) {
        self.counters.read(volume);
        self.counters.written(volume);
        (Outcome::Ok, volume)
    }

    /// A read-and-commit's outcome and what its commit wrote, counted if it applied.
    pub(super) fn committed<'e>(
        &self,
        applied: &'e Result<Option<bool>>,
        volume: Option<Volume>,
    ) -> (Outcome<'e>, Volume) {
        match (applied, volume) {
            (Ok(Some(applied)), Some(volume)) => self.applied(*applied, volume),
            (Ok(Some(false)), None) => (Outcome::NotApplied, Volume::default()),
            (Ok(_), _) => (Outcome::Ok, Volume::default()),
            (Err(e), _) => (Outcome::Failed(e), Volume::default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoredCell;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn put(family: &str, qualifier: &str, value: &str) -> CellMutation {
        CellMutation::Put { family: b(family), qualifier: b(qualifier), value: b(value), timestamp: None }
    }

    #[test]
    fn metered_bytes_read_per_cell_are_key_family_qualifier_value_and_timestamp() {
        let cell = |q: &str, v: &str| StoredCell { family: b("d"), qualifier: b(q), timestamp: 7, value: b(v) };
        let row = Row { key: b("row1"), cells: vec![cell("n", "Ada"), cell("city", ""), cell("", "xy")] };
        // (4 + 1 + 1 + 3 + 8) + (4 + 1 + 4 + 0 + 8) + (4 + 1 + 0 + 2 + 8)
        assert_eq!(Volume::read(row.lend()), Volume { rows: 1, cells: 3, bytes: 17 + 17 + 15 });
    }

    #[test]
    fn metered_bytes_written_count_puts_with_timestamp_and_deletes_without_value() {
        let m = RowMutation {
            row: b("k1"),
            mutations: vec![
                put("d", "n", "Ada"),
                CellMutation::Put { family: b("d"), qualifier: b("q"), value: b("12345678"), timestamp: Some(9) },
                CellMutation::DeleteColumn { family: b("a"), qualifier: b("city") },
                CellMutation::DeleteRow,
            ],
        };
        // put: 2 + 1 + 1 + 3 + 8; put: 2 + 1 + 1 + 8 + 8; column delete: 2 + 1 + 4; row delete: 2
        assert_eq!(Volume::written(&m), Volume { rows: 1, cells: 4, bytes: 15 + 20 + 7 + 2 });
        let other = RowMutation { row: b("k22"), mutations: vec![put("d", "", "")] };
        assert_eq!(Volume::sum([&m, &other]), Volume { rows: 2, cells: 5, bytes: 44 + 12 });
    }

    #[test]
    fn metered_increment_moves_one_eight_byte_cell_each_way() {
        // row key 3 + family 1 + qualifier 2 + counter 8 + timestamp 8
        assert_eq!(Volume::counter(&b("abc"), "d", "oc"), Volume { rows: 1, cells: 1, bytes: 22 });
    }

    #[test]
    fn metered_costs_subtract_field_by_field_and_sum_round_trips_without_admin() {
        let later =
            Costs { gets: 3, scans: 2, mutates: 4, increments: 1, admin: 5, bytes_read: 100, ..Costs::default() };
        let earlier = Costs { gets: 1, mutates: 4, admin: 2, bytes_read: 40, ..Costs::default() };
        let diff = later - earlier;
        assert_eq!(diff, Costs { gets: 2, scans: 2, increments: 1, admin: 3, bytes_read: 60, ..Costs::default() });
        assert_eq!(diff.round_trips(), 5);
        assert_eq!(earlier - later, Costs { ..Costs::default() });
    }

    #[test]
    fn metered_display_is_one_stable_line() {
        assert_eq!(
            Costs::default().to_string(),
            "0 round trips, 0 rows / 0 cells / 0 B read, 0 rows / 0 cells / 0 B written"
        );
        let c = Costs {
            gets: 1,
            scans: 2,
            mutates: 1,
            check_and_mutates: 1,
            group_mutates: 3,
            increments: 1,
            admin: 1,
            rows_read: 12,
            cells_read: 40,
            bytes_read: 1229,
            rows_written: 1,
            cells_written: 1,
            bytes_written: 1023,
        };
        assert_eq!(
            c.to_string(),
            "9 round trips (1 get, 2 scans, 1 mutate, 1 check-and-mutate, 3 group mutates, 1 increment) \
             + 1 admin call, 12 rows / 40 cells / 1.2 KiB read, 1 row / 1 cell / 1023 B written"
        );
        let big = Costs { mutates: 2, admin: 2, bytes_written: 3 * 1024 * 1024 + 512 * 1024, ..Costs::default() };
        assert_eq!(
            big.to_string(),
            "2 round trips (2 mutates) + 2 admin calls, 0 rows / 0 cells / 0 B read, 0 rows / 0 cells / 3.5 MiB written"
        );
    }

    /// A store that returns fixed rows and applies nothing, for the call-level rules.
    struct Fixed;

    impl Store for Fixed {
        fn ensure_table(&self, _: &TableSpec) -> Result<()> {
            Ok(())
        }
        fn alter_families(&self, _: &str, _: &[FamilyChange]) -> Result<Vec<FamilyAlteration>> {
            Ok(Vec::new())
        }
        fn mutate(&self, _: &str, _: Vec<RowMutation>) -> Result<()> {
            Ok(())
        }
        fn read_rows(&self, _: &str, rows: &[Bytes], _: &ReadSpec) -> Result<Vec<Option<Row>>> {
            let cell = StoredCell { family: b("d"), qualifier: b("n"), timestamp: 1, value: b("v") };
            Ok(rows.iter().map(|k| (k.len() > 1).then(|| Row { key: k.clone(), cells: vec![cell.clone()] })).collect())
        }
        fn scan<'a>(&'a self, _: &str, _: &ScanSpec) -> Result<RowStream<'a>> {
            let rows = self.read_rows("", &[b("aa"), b("bb"), b("cc")], &ReadSpec::default())?;
            Ok(Box::new(rows.into_iter().flatten().map(Ok)))
        }
        fn check_and_mutate(&self, _: &str, condition: Condition, _: RowMutation) -> Result<bool> {
            Ok(matches!(condition, Condition::Absent { .. }))
        }
        fn split_keys(&self, _: &str) -> Result<Option<Vec<Bytes>>> {
            Ok(None)
        }
        fn increment(&self, _: &str, _: Bytes, _: &str, _: &str, delta: i64) -> Result<i64> {
            Ok(delta)
        }
        fn guarantees(&self) -> Guarantees {
            Guarantees::new(true, true)
        }
        fn mutate_group(&self, _: &str, checks: Vec<RowCheck>, _: Vec<RowMutation>) -> Result<bool> {
            Ok(checks.is_empty())
        }
        fn commit(&self, commit: Commit) -> Result<bool> {
            Ok(commit.checks.is_empty())
        }
        // A read, then a commit: not atomic, which is fine here (this store reports no
        // atomic commits, and these tests only count calls).
        fn read_and_commit(
            &self,
            table: &str,
            row: &Bytes,
            read: &ReadSpec,
            build: &mut dyn FnMut(Option<&Row>) -> Option<Commit>,
        ) -> Result<Option<bool>> {
            let found = self.read_rows(table, std::slice::from_ref(row), read)?;
            build(found[0].as_ref()).map(|c| self.commit(c)).transpose()
        }
    }

    #[test]
    fn metered_counts_round_trips_and_only_what_was_returned_or_applied() {
        let store = Metered::new(Arc::new(Fixed));
        let row = || RowMutation { row: b("k"), mutations: vec![put("d", "n", "v")] }; // 1 + 1 + 1 + 1 + 8
        let absent = Condition::Absent { family: b("d"), qualifier: b("n") };
        let equals = Condition::Equals { family: b("d"), qualifier: b("n"), value: b("x") };

        // Three keys, two found: one get, two rows of one 13-byte cell each (2 + 1 + 1 + 1 + 8).
        let found = store.read_rows("t", &[b("aa"), b("x"), b("bb")], &ReadSpec::default()).unwrap();
        assert_eq!(found.iter().flatten().count(), 2);
        let c = store.costs();
        assert_eq!((c.gets, c.rows_read, c.cells_read, c.bytes_read), (1, 2, 2, 26));

        // A scan counts the rows pulled from it once it ends or is dropped.
        let mut stream = store.scan("t", &ScanSpec::default()).unwrap();
        assert_eq!(store.costs().scans, 1);
        assert_eq!(store.costs().rows_read, 2);
        assert!(stream.next().is_some());
        drop(stream);
        assert_eq!(store.costs().rows_read, 3, "the one row pulled");
        let mut stream = store.scan("t", &ScanSpec::default()).unwrap();
        assert_eq!(stream.by_ref().count(), 3);
        assert_eq!(store.costs().rows_read, 6, "all three, as the scan ended");
        drop(stream);
        assert_eq!(store.costs().rows_read, 6, "counted once");

        let before = store.costs();
        store.mutate("t", vec![row(), row()]).unwrap();
        store.mutate_row("t", row()).unwrap();
        assert!(!store.check_and_mutate("t", equals.clone(), row()).unwrap());
        assert!(store.check_and_mutate("t", absent, row()).unwrap());
        assert!(!store.mutate_group("t", vec![RowCheck { row: b("k"), condition: equals }], vec![row()]).unwrap());
        assert!(store.mutate_group("t", Vec::new(), vec![row(), row()]).unwrap());
        store.increment("t", b("k"), "d", "c", 1).unwrap(); // 1 + 1 + 1 + 8 + 8
        store
            .ensure_table(&TableSpec {
                name: "t".into(),
                families: Vec::new(),
                split_keys: Vec::new(),
                split_policy: Default::default(),
                deferred: false,
            })
            .unwrap();
        store.split_keys("t").unwrap();
        let _ = store.guarantees();
        assert_eq!(
            store.costs() - before,
            Costs {
                mutates: 2,
                check_and_mutates: 2,
                group_mutates: 2,
                increments: 1,
                admin: 2,
                rows_read: 1,
                cells_read: 1,
                bytes_read: 19,
                // 2 (mutate) + 1 (mutate_row) + 1 (applied check-and-mutate) + 2 (applied
                // group) rows of 12 bytes, and the increment's 19.
                rows_written: 7,
                cells_written: 7,
                bytes_written: 6 * 12 + 19,
                ..Costs::default()
            }
        );
        assert_eq!((store.costs() - before).round_trips(), 7);
    }
}
