//! Reads of a [`Table`]: point reads (owned, built as any row type, or lent) and scans.

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;

use super::Table;
use crate::cell::check_row;
use crate::descriptor::TableDescriptor;
use crate::query::{Get, ReadSpec, RowResult, Scan};
use crate::read::row_buf::{FromScannedRow, RowBuf, RowView};
use crate::read::rows::{read_rows, row_absent, RowRead, Rows};
use crate::region::Region;
use crate::scanner::{visit_rows, ScanCursor, Scanner};
use crate::Result;

/// A read's row taken out of its buffer as `R`.
fn build_row<R: FromScannedRow>(buf: &mut RowBuf) -> R {
    buf.take_with(|row, cells| R::from_scanned(row, cells))
}

impl Table {
    pub(crate) fn check_spec(&self, desc: &TableDescriptor, spec: &ReadSpec) -> Result<()> {
        for (f, _) in &spec.columns.entries {
            self.check_family(desc, f)?;
        }
        Ok(())
    }

    /// The row `get` reads in `region`, built as `R`, by the writer holding the region's write
    /// lock, about to write the row: the inserts that follow start from where the read found
    /// it. `None` if the read returns no row.
    pub(crate) fn get_locked_as<R: FromScannedRow>(&self, region: &Region, get: &Get, now: u64) -> Result<Option<R>> {
        self.read_row_in(region, get, now, true, false, build_row::<R>)
    }

    /// A point read through the public API: checks, routing, the region's read count.
    fn point_read<T>(&self, get: &Get, lent: bool, take: impl FnOnce(&mut RowBuf) -> T) -> Result<Option<T>> {
        let desc = self.check_usable()?;
        check_row(&get.row)?;
        self.check_spec(&desc, &get.spec)?;
        let region = self.region(&get.row)?;
        let out = self.read_row_in(&region, get, self.writes.now_ms(), false, lent, take)?;
        region.counters.reads.fetch_add(1, Ordering::Relaxed);
        Ok(out)
    }

    /// Reads `get`'s row in `region` and hands its buffer to `take`, if the row has cells the
    /// get returns.
    fn read_row_in<T>(
        &self,
        region: &Region,
        get: &Get,
        now: u64,
        for_writer: bool,
        lent: bool,
        take: impl FnOnce(&mut RowBuf) -> T,
    ) -> Result<Option<T>> {
        let snap = region.snapshot();
        // The writer's reads are mostly of rows about to be written, often new (inserts, unique
        // claims): a check for the row first spares those the cursors, and costs a present
        // row little, as the search left the writer at the row. Other reads skip it.
        if for_writer && row_absent(&snap, &get.row, true) {
            return Ok(None);
        }
        // The row borrowed, not a range of it: a clone of the Get's row would be an allocation.
        let read = RowRead { rows: Rows::One(&get.row), reversed: false, spec: &get.spec, now, for_writer, lent };
        let mut take = Some(take);
        let mut out = None;
        read_rows(&snap, &read, |buf| {
            out = take.take().map(|take| take(buf));
            false
        })?;
        Ok(out)
    }

    /// Reads one row. A missing row gives an empty result.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad row key, [`Error::FamilyNotFound`](crate::Error::FamilyNotFound),
    /// [`Error::TableDisabled`](crate::Error::TableDisabled), [`Error::Corrupt`](crate::Error::Corrupt) if a file read is damaged.
    pub fn get(&self, get: Get) -> Result<RowResult> {
        let row = get.row.clone();
        Ok(self.get_as(get)?.unwrap_or(RowResult { row, cells: Vec::new() }))
    }

    /// Reads one row like [`Table::get`], built as `R` straight from the read's buffer (see
    /// [`Table::scan_as`]); `None` if the row has no cells the get returns.
    ///
    /// # Errors
    /// As for [`Table::get`].
    pub fn get_as<R: FromScannedRow>(&self, get: Get) -> Result<Option<R>> {
        self.point_read(&get, false, build_row::<R>)
    }

    /// Reads one row like [`Table::get`], but lends it to `read` instead of returning it: its
    /// cells are borrowed from the read's buffer, so the read builds no row (the point-read
    /// counterpart of [`Table::scan_with`]). `None`, without calling `read`, if the row has no
    /// cells the get returns.
    ///
    /// ```
    /// # use cellar_engine::*;
    /// # fn main() -> Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # engine.create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f")))?;
    /// # let t = engine.table("t")?;
    /// t.put(Put::new("user1").add("f", "name", "Ada"))?;
    /// let len = t.get_with(Get::new("user1"), |row| row.value(b"f", b"name").map(<[u8]>::len))?;
    /// assert_eq!(len, Some(Some(3)));
    /// assert_eq!(t.get_with(Get::new("user2"), |row| row.len())?, None);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As for [`Table::get`].
    pub fn get_with<T>(&self, get: Get, read: impl FnOnce(RowView<'_>) -> T) -> Result<Option<T>> {
        self.point_read(&get, true, |buf| read(buf.view()))
    }

    /// Reads several rows.
    ///
    /// # Errors
    /// The first error of any get.
    pub fn get_many(&self, gets: Vec<Get>) -> Result<Vec<RowResult>> {
        gets.into_iter().map(|g| self.get(g)).collect()
    }

    /// Reads several rows like [`Table::get_many`], each built as `R` (see [`Table::get_as`]).
    ///
    /// # Errors
    /// The first error of any get.
    pub fn get_many_as<R: FromScannedRow>(&self, gets: Vec<Get>) -> Result<Vec<Option<R>>> {
        gets.into_iter().map(|g| self.get_as(g)).collect()
    }

    /// True if the get finds at least one cell.
    ///
    /// # Errors
    /// As for [`Table::get`].
    pub fn exists(&self, get: Get) -> Result<bool> {
        Ok(!self.get(get)?.is_empty())
    }

    /// Opens a scanner. It reads a snapshot taken now: later writes are not seen.
    ///
    /// # Errors
    /// [`Error::FamilyNotFound`](crate::Error::FamilyNotFound), [`Error::TableDisabled`](crate::Error::TableDisabled).
    pub fn scan(&self, scan: Scan) -> Result<Scanner> {
        self.scan_as(scan)
    }

    /// Scans like [`Table::scan`], handing out rows as `R`: a layer above that keeps rows in
    /// its own type builds them straight from the read's buffer, without a [`RowResult`] in
    /// between.
    ///
    /// # Errors
    /// As for [`Table::scan`].
    pub fn scan_as<R: FromScannedRow>(&self, scan: Scan) -> Result<Scanner<R>> {
        let desc = self.check_usable()?;
        self.check_spec(&desc, &scan.spec)?;
        Ok(Scanner::new(self.state.regions(), scan, self.writes.now_ms()))
    }

    /// Scans like [`Table::scan`], lending rows one at a time through a [`ScanCursor`]: each
    /// row is borrowed from the cursor's buffer until it moves on, as [`Table::scan_with`]
    /// lends them, but the caller pulls. For callers that merge several scans, or decode rows
    /// into their own types without keeping the cells.
    ///
    /// ```
    /// # use cellar_engine::*;
    /// # fn main() -> Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # engine.create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f")))?;
    /// # let t = engine.table("t")?;
    /// for (row, amount) in [("a", "3"), ("b", "4"), ("c", "5")] {
    ///     t.put(Put::new(row).add("f", "amount", amount))?;
    /// }
    /// let mut rows = t.scan_cursor(Scan::new().start("b"))?;
    /// let mut seen = Vec::new();
    /// while rows.advance()? {
    ///     let row = rows.row().expect("the cursor is on a row");
    ///     seen.push((row.row().to_vec(), row.value(b"f", b"amount").map(<[u8]>::to_vec)));
    /// }
    /// assert_eq!(seen, [(b"b".to_vec(), Some(b"4".to_vec())), (b"c".to_vec(), Some(b"5".to_vec()))]);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As for [`Table::scan`]; [`ScanCursor::advance`] fails as a [`Scanner`] does.
    pub fn scan_cursor(&self, scan: Scan) -> Result<ScanCursor> {
        let desc = self.check_usable()?;
        self.check_spec(&desc, &scan.spec)?;
        Ok(ScanCursor::new(self.state.regions(), scan, self.writes.now_ms()))
    }

    /// Scans like [`Table::scan`], but lends each row to `visit` instead of returning it: the
    /// row's cells are borrowed from the read's buffer, which is reused for the next row, so a
    /// row costs no allocation. `visit` returns [`ControlFlow::Break`] to end the scan early.
    /// Returns how many rows were visited (with a `batch`, a row lent in several parts counts
    /// once).
    ///
    /// The scan sees one snapshot per region, taken when it starts, and holds it until it
    /// ends: files compacted away meanwhile stay on disk until then. Use [`Table::scan`] to
    /// keep rows, or to read at your own pace; [`RowView::to_row_result`] copies one out.
    ///
    /// ```
    /// # use cellar_engine::*;
    /// # use std::ops::ControlFlow;
    /// # fn main() -> Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # engine.create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f")))?;
    /// # let t = engine.table("t")?;
    /// for (row, amount) in [("a", "3"), ("b", "4"), ("c", "5")] {
    ///     t.put(Put::new(row).add("f", "amount", amount))?;
    /// }
    /// let mut total = 0;
    /// t.scan_with(Scan::new(), |row| {
    ///     let amount = row.value(b"f", b"amount").unwrap_or(b"0");
    ///     total += std::str::from_utf8(amount).unwrap().parse::<u64>().unwrap();
    ///     ControlFlow::Continue(())
    /// })?;
    /// assert_eq!(total, 12);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::FamilyNotFound`](crate::Error::FamilyNotFound), [`Error::TableDisabled`](crate::Error::TableDisabled), [`Error::Corrupt`](crate::Error::Corrupt) if a file read
    /// is damaged (rows visited before it stay visited).
    pub fn scan_with(&self, scan: Scan, mut visit: impl FnMut(RowView<'_>) -> ControlFlow<()>) -> Result<usize> {
        let desc = self.check_usable()?;
        self.check_spec(&desc, &scan.spec)?;
        visit_rows(self.state.regions(), &scan, self.writes.now_ms(), &mut visit)
    }
}
