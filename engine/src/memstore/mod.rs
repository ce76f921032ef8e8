//! The memstore: recent writes of one region's family, in a skiplist ordered by the engine's
//! key order ([`list`]: one writer, lock-free readers). Readers filter by MVCC read point;
//! flush turns a frozen memstore into an SSTable.
//!
//! Cells live in an arena: each is encoded once, contiguously, into chunks of a few hundred KiB
//! that are freed together when the memstore is dropped (full-size ones, and the skiplist's
//! full segments, go to the engine's pool, [`account`], for the next memstore to fill). The skiplist holds a small handle per
//! item (a slice of its chunk), and each skiplist node carries the row's first 24 bytes, which
//! settle most comparisons without touching the chunk. Compared with owning each row, qualifier and value separately,
//! this saves allocations on the write path and keeps freed memstores from fragmenting the heap.
//!
//! A put of several columns into a row the memstore does not hold yet (every row of a load)
//! goes in as one *run*: the row and the cells' shared header once, then the cells back to
//! back in the arena, one skiplist node for them all.
//! Such a row costs one node and one search instead of one of each a column, and a read or a
//! flush finds its cells side by side. The first later write into the row splits the run into
//! cells ([`Memstore::split_run`]), so updates, deletes and the pruning below work on cells.
//!
//! A row index ([`row_index`]) maps each row to its first item, so a point read lands on its
//! row (or learns the memstore does not hold it) without a search down the list.
//!
//! The items, their encoding in the arena and their order are in [`item`]; the cursor that
//! reads them at a read point, cell by cell through runs, is in [`cursor`].
//!
//! A write over a column drops the column's versions that no reader can see any more: those
//! behind `max_versions` newer versions that every open and future reader sees (HBase's
//! in-memory compaction does the same). A flush would drop them anyway; dropping them at once
//! keeps a hot row from dragging thousands of dead versions through every read of it until
//! then. Non-raw reads cannot tell; a raw read no longer sees such a version, as after a flush.

mod account;
mod cursor;
mod item;
mod list;
mod row_index;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use parking_lot::Mutex;

use item::{is_run, varint_len, MemCell, Probe, HEADER_LEN, MAX_RUN, WHOLE};
use list::{Entry, Inserted, SkipList};
use row_index::{RowIndex, Start};

use crate::cell::{same_bytes, CellType, KeyView};
use crate::sst::format::put_varint;
use crate::Result;

pub(crate) use account::MemAccount;
pub(crate) use cursor::MemCursor;

/// Arena chunks start small (a memstore that sees a handful of writes stays small) and double
/// up to this size, the size the chunk pool keeps.
const MAX_CHUNK: usize = account::CHUNK;
const FIRST_CHUNK: usize = 4 * 1024;

/// What lets an insert drop versions no reader can see.
pub(crate) struct Pruning<'a> {
    /// The family's `max_versions`.
    pub max_versions: u32,
    /// The oldest read point an open or future reader holds (asked only when there is
    /// something to drop: it takes a lock).
    pub oldest_reader: &'a dyn Fn() -> u64,
}

/// Where new cells are written: the unused tail of the current chunk.
#[derive(Debug, Default)]
struct Arena {
    tail: BytesMut,
    chunk_size: usize,
    /// True if `tail` is in a full-size chunk.
    tail_full_size: bool,
    /// The tails of the full-size chunks filled before the current one: each the last handle
    /// of its chunk once the cells cut from it are dropped, so the chunk pool can reuse it.
    filled: Vec<BytesMut>,
}

/// One family's in-memory writes.
#[derive(Debug)]
pub(crate) struct Memstore {
    map: SkipList<MemCell>,
    /// Where each row starts ([`row_index`]): a point read (and a scan starting at a row the
    /// memstore holds) lands on its row without a search down the list. A write that puts a
    /// new item at the front of its row moves the row's entry (a cell replacing an equal one
    /// there, or the first cell of a split run, takes its place at the front); nothing else
    /// removes a row's first item, as pruning drops only versions behind newer ones.
    rows: RowIndex,
    arena: Mutex<Arena>,
    bytes: AtomicUsize,
    account: Arc<MemAccount>,
    /// Set once the bytes were given back to the account (after a flush).
    released: AtomicBool,
    /// Set once a delete marker was inserted: only then can a marker change which versions
    /// a write makes invisible.
    has_markers: AtomicBool,
    /// Set once a run was inserted: until then a write into a row it holds has no run to split.
    has_runs: AtomicBool,
}

impl Drop for Memstore {
    fn drop(&mut self) {
        self.release();
        // The cells go first: a chunk can be reused once nothing cut from it is held.
        let segments = std::mem::take(&mut self.map).into_spares();
        let arena = std::mem::take(self.arena.get_mut());
        let mut chunks = arena.filled;
        if arena.tail_full_size {
            chunks.push(arena.tail);
        }
        self.account.give_back(chunks, segments);
    }
}

impl Memstore {
    pub fn new(account: &Arc<MemAccount>) -> Self {
        Memstore {
            map: SkipList::with_spares(account.segments()),
            rows: RowIndex::default(),
            arena: Mutex::new(Arena::default()),
            bytes: AtomicUsize::new(0),
            account: account.clone(),
            released: AtomicBool::new(false),
            has_markers: AtomicBool::new(false),
            has_runs: AtomicBool::new(false),
        }
    }

    /// Gives this memstore's bytes back to the global budget. Called when its flush is
    /// installed: readers may still hold it, but a slow scanner must not stall every writer.
    pub fn release(&self) {
        if !self.released.swap(true, AtomicOrdering::AcqRel) {
            self.account.discharge(self.bytes.load(AtomicOrdering::Relaxed));
        }
    }

    fn charge(&self, size: usize) {
        // Most cells allocate nothing beyond their arena bytes: skip two atomic adds, one of
        // them on the account every memstore shares.
        if size == 0 {
            return;
        }
        self.bytes.fetch_add(size, AtomicOrdering::Relaxed);
        self.account.charge(size);
    }

    /// Inserts cells of one row (a write's edits of the row, as the region applies them:
    /// ordered by column), and with `pruning` drops the versions of their columns that they
    /// leave no reader able to see. A put of several cells into a row this memstore does not
    /// hold goes in as one run ([`is_run`]); otherwise the cells go in one at a time, after
    /// splitting the row's run if it is one. Callers hold the region's write lock (or replay the log alone), so sizes stay
    /// exact and no other write moves the row. The row fits in a u16 length: the engine caps
    /// rows at 32767 bytes.
    pub fn insert_row<'k, I>(&self, cells: I, pruning: Option<&Pruning<'_>>)
    where
        I: ExactSizeIterator<Item = (KeyView<'k>, &'k [u8], Option<u64>)> + Clone,
    {
        let Some((first, ..)) = cells.clone().next() else { return };
        let row = first.row;
        debug_assert!(cells.clone().all(|(k, ..)| k.row == row), "insert_row takes the cells of one row");
        let runs = (2..=MAX_RUN).contains(&cells.len()) && is_run(cells.clone());
        // Whether the memstore holds the row matters only to a put that could be a run, or
        // once there are runs to split.
        let held = if runs || self.has_runs.load(AtomicOrdering::Relaxed) { self.find_row(row) } else { None };
        match held {
            None if runs => {
                let bytes = self.encode(cells.clone());
                self.link(MemCell::whole(CellType::Put, bytes), None);
                self.has_runs.store(true, AtomicOrdering::Relaxed);
                return;
            }
            Some(first) if first.item().is_run() => self.split_run(&first),
            _ => {}
        }
        for cell in cells {
            self.insert_cell(&cell.0, cell.1, cell.2, pruning);
        }
    }

    /// Inserts one cell, as [`Memstore::insert_row`] does.
    #[cfg(test)]
    pub fn insert(&self, key: &KeyView<'_>, value: &[u8], ttl_ms: Option<u64>, pruning: Option<&Pruning<'_>>) {
        self.insert_row(std::iter::once((*key, value, ttl_ms)), pruning);
    }

    /// Inserts one cell into a row that is not a run (the caller split it).
    fn insert_cell(&self, key: &KeyView<'_>, value: &[u8], ttl_ms: Option<u64>, pruning: Option<&Pruning<'_>>) {
        let bytes = self.encode(std::iter::once((*key, value, ttl_ms)));
        self.link(MemCell::whole(key.kind, bytes), pruning);
    }

    /// Encodes an item into the arena: one cell, or a run's cells (which share their row,
    /// timestamp, sequence number and TTL: [`is_run`]) after the first's header and row.
    fn encode<'k>(&self, cells: impl Iterator<Item = (KeyView<'k>, &'k [u8], Option<u64>)> + Clone) -> Bytes {
        let Some((first, _, ttl_ms)) = cells.clone().next() else { return Bytes::new() };
        let cell_len = |(k, v, _): (KeyView<'_>, &[u8], _)| {
            varint_len(k.qualifier.len()) + varint_len(v.len()) + k.qualifier.len() + v.len()
        };
        let len = HEADER_LEN + first.row.len() + cells.clone().map(cell_len).sum::<usize>();
        let mut guard = self.arena.lock();
        let arena = &mut *guard;
        if arena.tail.capacity() < len {
            arena.chunk_size = (arena.chunk_size * 2).clamp(FIRST_CHUNK, MAX_CHUNK);
            let chunk = arena.chunk_size.max(len);
            let full_size = chunk == MAX_CHUNK;
            let fresh = if full_size {
                self.account.take_chunk().unwrap_or_else(|| BytesMut::with_capacity(chunk))
            } else {
                BytesMut::with_capacity(chunk)
            };
            let old = std::mem::replace(&mut arena.tail, fresh);
            if std::mem::replace(&mut arena.tail_full_size, full_size) {
                arena.filled.push(old);
            }
            self.charge(chunk);
        }
        let arena = &mut arena.tail;
        arena.put_u16_le(first.row.len() as u16);
        arena.put_u64_le(first.ts);
        arena.put_u64_le(first.seq);
        arena.put_u8(u8::from(ttl_ms.is_some()));
        arena.put_u64_le(ttl_ms.unwrap_or(0));
        arena.put_slice(first.row);
        for (key, value, _) in cells {
            put_varint(arena, key.qualifier.len() as u64);
            put_varint(arena, value.len() as u64);
            arena.put_slice(key.qualifier);
            arena.put_slice(value);
        }
        arena.split().freeze()
    }

    /// Puts an encoded item in the list, points the row index at it if it now leads its row,
    /// and with `pruning` (a single cell) drops the versions behind it no reader can see.
    fn link(&self, item: MemCell, pruning: Option<&Pruning<'_>>) {
        let Inserted { entry, tied_before, allocated } = self.map.insert(item);
        self.charge(allocated);
        let key = entry.item().view();
        // If the item now leads its row, the row index points at it. An item before it with
        // another tag is of another row.
        if tied_before.is_none_or(|b| b.item().row() != key.row) {
            let grown = self.rows.lead(key.row, entry.handle(), |h| self.map.at(h).map(|e| e.item().row()));
            self.charge(grown);
        }
        if key.kind.is_delete() {
            self.has_markers.store(true, AtomicOrdering::Relaxed);
        } else if let Some(pruning) = pruning {
            self.prune_behind(&entry, pruning);
        }
    }

    /// Replaces a run by its cells, one item each, so a write can go in between them. The
    /// cells go in last to first, each right after the run, and the first replaces the run
    /// (it orders equal to it). Last to first, every cell after one already in the list is in
    /// it too: a seek that lands on a split cell finds the rest of the row behind it, and one
    /// that lands on the run finds every cell inside it. A reader that meets the run and then
    /// some of its cells again skips those ([`MemCursor`] remembers the run's last cell). No
    /// arena bytes are copied: each cell's item points into the run's bytes.
    fn split_run(&self, run: &Entry<'_, MemCell>) {
        let item = run.item();
        let offsets: Vec<usize> = item.offsets().collect();
        for &at in offsets.iter().rev() {
            self.split_off(item, at);
        }
    }

    /// Puts the cell of `run` at `at` in the list as an item of its own.
    fn split_off(&self, run: &MemCell, at: usize) {
        let item = match u32::try_from(at) {
            Ok(part) if part != WHOLE => MemCell { kind: CellType::Put, part, bytes: run.bytes.clone() },
            // A run of more than 4 GiB: the cell is copied out.
            _ => {
                let cell = (run.view_at(at), run.value_at(at), run.encoded().ttl_ms());
                MemCell::whole(CellType::Put, self.encode(std::iter::once(cell)))
            }
        };
        self.link(item, None);
    }

    /// The first item of `row`, if this memstore holds the row (of any sequence number).
    fn find_row(&self, row: &[u8]) -> Option<Entry<'_, MemCell>> {
        match self.first_of(row) {
            Ok(first) => first,
            Err(()) => self.search(&KeyView::first_of_row(row)).filter(|e| e.item().row() == row),
        }
    }

    /// Drops the versions of `inserted`'s column, older in key order, that sit behind
    /// `max_versions` versions every reader sees: for any reader they are beyond the family's
    /// version limit or shadowed at their timestamp, so no read can return them. (Only versions
    /// behind the inserted cell are looked at: a write usually carries the newest timestamp, and
    /// a step back costs a search in a skiplist.)
    ///
    /// A marker could hide one of the versions counted from some reader and bring an older one
    /// back, so counting stops at a marker, and nothing is dropped where a marker of the column
    /// sits before the inserted cell or the row has a family marker. Markers in older memstores
    /// and files mask only older writes (lower sequence numbers), never cells of this memstore.
    fn prune_behind(&self, inserted: &Entry<'_, MemCell>, pruning: &Pruning<'_>) {
        // An older version shares the row, so the tag: a new column of a new row (every cell
        // of a load) is settled by one node, its item and cell bytes left untouched.
        if inserted.next_tag() != Some(inserted.tag()) {
            return;
        }
        let new = inserted.item().view();
        let same_column = |e: &Entry<'_, MemCell>| {
            let k = e.item().view();
            same_bytes(k.row, new.row) && same_bytes(k.qualifier, new.qualifier)
        };
        let limit = pruning.max_versions as usize;
        let older = || std::iter::successors(inserted.next(), |e| e.next()).take_while(same_column);
        // Only published cells count, and the inserted one is not yet published: there is
        // something to drop only behind `limit` older versions. Most writes create a column or
        // follow one older version, and are settled here in a step.
        if older().take(limit + 1).count() <= limit {
            return;
        }
        if self.has_markers.load(AtomicOrdering::Relaxed) {
            let mut newer = std::iter::successors(inserted.prev(), |e| e.prev()).take_while(same_column);
            if newer.any(|e| e.item().kind.is_delete()) || self.row_has_family_marker(new.row) {
                return;
            }
        }
        let oldest_reader = (pruning.oldest_reader)();
        let mut counted = 0usize;
        let mut last_ts = None;
        for e in older() {
            let k = e.item().view();
            if k.kind.is_delete() {
                return;
            }
            if counted >= limit || last_ts == Some(k.ts) {
                // The slot stays (the arena bytes do too) until the memstore is dropped.
                self.map.remove(&e);
            } else if k.seq <= oldest_reader {
                counted += 1;
                last_ts = Some(k.ts);
            }
        }
    }

    /// True if this memstore holds a family delete marker of `row`: they sit at the empty
    /// qualifier, before the row's columns.
    fn row_has_family_marker(&self, row: &[u8]) -> bool {
        let probe = Probe::new(KeyView::first_of_row(row));
        let first = self.map.lower_bound(probe.prefix, |c| probe.order(c));
        std::iter::successors(first, |e| e.next())
            .map_while(|e| {
                let k = e.item().view();
                (same_bytes(k.row, row) && k.qualifier.is_empty()).then_some(k.kind.is_family_delete())
            })
            .any(|family_marker| family_marker)
    }

    /// Full-size chunks the arena has filled or is filling.
    #[cfg(test)]
    fn full_size_chunks(&self) -> usize {
        let arena = self.arena.lock();
        arena.filled.len() + usize::from(arena.tail_full_size)
    }

    /// True if a delete marker was ever inserted.
    pub fn has_markers(&self) -> bool {
        self.has_markers.load(AtomicOrdering::Relaxed)
    }

    /// Approximate heap size of the contents in bytes.
    pub fn size(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// A cursor that shows only cells with `seq <= read_point`. Like an SSTable cursor it
    /// starts unpositioned: `seek` (or `prev_row`) first. Positioning at the front eagerly
    /// would walk every newer cell there, and a scan reopens its cursors every few rows: a
    /// scan running behind a writer (a migration rewriting the rows it just read) went
    /// quadratic in the memstore's size.
    pub fn cursor(&self, read_point: u64) -> MemCursor<'_> {
        MemCursor { memstore: self, cur: None, at: 0, shadow: None, read_point, splicing: false, point: false }
    }

    /// [`Memstore::cursor`] for a read of one row: a seek to the row's start finds it by the
    /// row index, or nothing.
    pub fn point_cursor(&self, read_point: u64) -> MemCursor<'_> {
        MemCursor { memstore: self, cur: None, at: 0, shadow: None, read_point, splicing: false, point: true }
    }

    /// The first item of `row` by the row index: `Ok(None)` if the memstore does not hold
    /// the row, `Err(())` if the index cannot tell.
    fn first_of(&self, row: &[u8]) -> Result<Option<Entry<'_, MemCell>>, ()> {
        match self.rows.find(row) {
            Start::At(handle) => Ok(self.map.at(handle).filter(|e| e.item().row() == row)),
            Start::Absent => Ok(None),
            Start::Unknown => Err(()),
        }
    }

    /// The first entry at or after `target`, by a search down the list.
    fn search(&self, target: &KeyView<'_>) -> Option<Entry<'_, MemCell>> {
        let probe = Probe::new(*target);
        self.map.lower_bound(probe.prefix, |c| probe.order(c))
    }

    /// True if the memstore holds a cell of `row` (of any sequence number: visible to a read
    /// or not). `for_writer`: the search leaves the writer's splice at the row, as
    /// [`Memstore::writer_cursor`] does.
    pub fn holds_row(&self, row: &[u8], for_writer: bool) -> bool {
        if !for_writer {
            return self.find_row(row).is_some();
        }
        let probe = Probe::new(KeyView::first_of_row(row));
        let (_, found) = self.map.around_splicing(probe.prefix, |c| probe.order(c));
        found.is_some_and(|e| e.item().row() == row)
    }

    /// [`Memstore::cursor`] for the writer, reading a row it is about to write (a condition,
    /// an increment): its seeks leave the list's splice where they land, so the inserts that
    /// follow start there.
    pub fn writer_cursor(&self, read_point: u64) -> MemCursor<'_> {
        MemCursor { memstore: self, cur: None, at: 0, shadow: None, read_point, splicing: true, point: false }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::cursor::CellCursor;

    fn put(m: &Memstore, row: &'static str, q: &'static str, ts: u64, seq: u64) {
        let key = KeyView { row: row.as_bytes(), qualifier: q.as_bytes(), ts, kind: CellType::Put, seq };
        m.insert(&key, format!("{row}{q}{ts}").as_bytes(), None, None);
    }

    #[test]
    fn cursor_respects_read_point_and_order() {
        let account = MemAccount::new(0, usize::MAX);
        let m = Memstore::new(&account);
        put(&m, "b", "q", 1, 1);
        put(&m, "a", "q", 1, 2);
        put(&m, "a", "q", 2, 3);
        put(&m, "c", "q", 1, 9);
        let mut c = m.cursor(3);
        assert_eq!(c.key(), None, "unpositioned until a seek");
        c.seek(&KeyView::first_of_row(b"")).unwrap();
        let mut seen = Vec::new();
        while let Some(k) = c.key() {
            seen.push((String::from_utf8(k.row.to_vec()).unwrap(), k.ts));
            c.next().unwrap();
        }
        assert_eq!(seen, vec![("a".into(), 2), ("a".into(), 1), ("b".into(), 1)]);
        assert_eq!(c.prev_row(None).unwrap().as_deref(), Some(&b"b"[..]));
        assert_eq!(c.prev_row(Some(b"b")).unwrap().as_deref(), Some(&b"a"[..]));
        assert_eq!(c.prev_row(Some(b"a")).unwrap(), None);
        c.seek(&KeyView::first_of_row(b"b")).unwrap();
        assert_eq!(c.key().unwrap().row, b"b");
        assert!(m.size() > 0);
        assert_eq!(account.held(), m.size());
        drop(m);
        assert_eq!(account.held(), 0, "dropping releases the budget");
    }

    /// Every cell of a row at or below a read point, as a cursor seeking the row's start
    /// finds them.
    fn row_cells(mut c: MemCursor<'_>, row: &[u8]) -> Vec<(Vec<u8>, u64, u64)> {
        c.seek(&KeyView::first_of_row(row)).unwrap();
        let mut cells = Vec::new();
        while let Some(k) = c.key().filter(|k| k.row == row) {
            cells.push((k.qualifier.to_vec(), k.ts, k.seq));
            c.next().unwrap();
        }
        cells
    }

    /// The cells of `row` at `read_point` as a search down the list (no row index) finds them.
    fn searched_cells(m: &Memstore, read_point: u64, row: &[u8]) -> Vec<(Vec<u8>, u64, u64)> {
        let mut c = m.cursor(read_point);
        c.cur = m.search(&KeyView::first_of_row(row));
        c.settle();
        let mut cells = Vec::new();
        while let Some(k) = c.key().filter(|k| k.row == row) {
            cells.push((k.qualifier.to_vec(), k.ts, k.seq));
            c.next().unwrap();
        }
        cells
    }

    /// The row index follows the front of every row: new columns before the first, newer
    /// versions of the first column, and replacements of an equal cell. Seeks to a row's
    /// start through it (point reads, and scans starting at a held row) find what a search
    /// down the list finds; a point read of a row the memstore does not hold finds nothing,
    /// and a scan goes on at the next row.
    #[test]
    fn a_row_start_found_by_the_index_is_the_one_a_search_finds() {
        let m = Memstore::new(&MemAccount::new(0, usize::MAX));
        let rows = ["r1", "r2", "r3", "r5"];
        let qualifiers = ["m", "c", "x", "a", "", "c"];
        let mut seq = 0;
        for (i, q) in qualifiers.iter().enumerate() {
            for (j, row) in rows.iter().enumerate() {
                seq += 1;
                // Timestamps that rise and fall, so some writes lead their column and some
                // land behind it; the last round rewrites `c` at a timestamp it already holds.
                let ts = [5, 9, 2, 7, 7, 9][i] + j as u64;
                put(&m, row, q, ts, seq);
            }
        }
        for read_point in [3, 9, 14, seq] {
            for row in rows {
                let searched = searched_cells(&m, read_point, row.as_bytes());
                assert_eq!(row_cells(m.point_cursor(read_point), row.as_bytes()), searched, "{row}@{read_point}");
                assert_eq!(row_cells(m.cursor(read_point), row.as_bytes()), searched, "{row}@{read_point}");
            }
        }
        // A cell equal to a row's first (same key, same sequence number) takes its place.
        let (qualifier, ts, first_seq) = row_cells(m.point_cursor(seq), b"r1").remove(0);
        let key = KeyView { row: b"r1", qualifier: &qualifier, ts, kind: CellType::Put, seq: first_seq };
        m.insert(&key, b"replaced", None, None);
        let mut c = m.point_cursor(seq);
        c.seek(&KeyView::first_of_row(b"r1")).unwrap();
        assert_eq!(c.key().map(|k| (k.qualifier.to_vec(), k.ts, k.seq)), Some((qualifier, ts, first_seq)));
        assert_eq!(c.value(), b"replaced");
        assert!(m.holds_row(b"r2", false) && !m.holds_row(b"r4", false));
        let mut point = m.point_cursor(seq);
        point.seek(&KeyView::first_of_row(b"r4")).unwrap();
        assert!(point.key().is_none(), "a point read of a row not held finds nothing");
        let mut scan = m.cursor(seq);
        scan.seek(&KeyView::first_of_row(b"r4")).unwrap();
        assert_eq!(scan.key().map(|k| k.row.to_vec()), Some(b"r5".to_vec()), "a scan goes on at the next row");
    }

    /// Readers point-reading rows while the writer puts new cells at their fronts see, at their
    /// read point, what a search down the list shows.
    #[test]
    fn point_reads_racing_the_writer_see_what_a_search_sees() {
        let m = Arc::new(Memstore::new(&MemAccount::new(0, usize::MAX)));
        let published = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let rows: Vec<String> = (0..64).map(|i| format!("row{i:03}")).collect();
        let readers: Vec<_> = (0..2)
            .map(|r| {
                let (m, published, done, rows) = (m.clone(), published.clone(), done.clone(), rows.clone());
                std::thread::spawn(move || {
                    let mut i = r;
                    while !done.load(AtomicOrdering::Acquire) {
                        let read_point = published.load(AtomicOrdering::Acquire);
                        let row = rows[i % rows.len()].as_bytes();
                        let indexed = row_cells(m.point_cursor(read_point), row);
                        assert_eq!(indexed, searched_cells(&m, read_point, row));
                        i += 7;
                    }
                })
            })
            .collect();
        for seq in 1..=20_000u64 {
            let row = &rows[(seq * 13 % 64) as usize];
            // Qualifiers that fall over time: each write leads its row.
            let q = format!("q{:05}", 20_000 - seq);
            let key = KeyView { row: row.as_bytes(), qualifier: q.as_bytes(), ts: seq, kind: CellType::Put, seq };
            m.insert(&key, b"v", None, None);
            published.store(seq, AtomicOrdering::Release);
        }
        done.store(true, AtomicOrdering::Release);
        for r in readers {
            r.join().expect("reader");
        }
    }

    /// Writes by sequence number `seq`: an odd one puts five columns into a new row (a run), an
    /// even one a newer version of one column of an older row (splitting its run).
    fn run_or_update(seq: u64) -> Vec<(String, String, u64)> {
        let k = (seq - 1) / 2;
        if seq % 2 == 1 {
            (0..5).map(|c| (format!("row{k:05}"), format!("c{c}"), seq)).collect()
        } else {
            vec![(format!("row{:05}", k / 2), "c2".to_string(), seq)]
        }
    }

    #[test]
    fn scans_racing_runs_and_their_splits_see_each_cell_once() {
        let m = Arc::new(Memstore::new(&MemAccount::new(0, usize::MAX)));
        let published = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (m, published, done) = (m.clone(), published.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut scans = 0;
                    while !done.load(AtomicOrdering::Acquire) || scans == 0 {
                        let read_point = published.load(AtomicOrdering::Acquire);
                        let seen: Vec<(String, String, u64)> = cells_from(&m, read_point, KeyView::first_of_row(b""))
                            .into_iter()
                            .map(|(r, q, ts, _)| (r, q, ts))
                            .collect();
                        let mut expected: Vec<(String, String, u64)> =
                            (1..=read_point).flat_map(run_or_update).collect();
                        // Key order: row, column, newest timestamp first.
                        expected.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)).then(b.2.cmp(&a.2)));
                        assert_eq!(seen, expected, "at read point {read_point}");
                        scans += 1;
                    }
                })
            })
            .collect();
        for seq in 1..=3_000u64 {
            let cells = run_or_update(seq);
            let keyed = cells.iter().map(|(r, q, ts)| {
                (
                    KeyView { row: r.as_bytes(), qualifier: q.as_bytes(), ts: *ts, kind: CellType::Put, seq },
                    &b"v"[..],
                    None,
                )
            });
            m.insert_row(keyed, None);
            published.store(seq, AtomicOrdering::Release);
            std::thread::yield_now();
        }
        done.store(true, AtomicOrdering::Release);
        for r in readers {
            r.join().expect("reader");
        }
        assert!(m.map.len() < 3 * 3_000, "rows not written since their put stay runs");
    }

    /// Rows that share their first 8, 16 or 24 bytes, rows shorter than the prefix, and
    /// rows that differ only by trailing zero bytes (equal zero-padded prefixes) still come out
    /// in byte order.
    #[test]
    fn rows_sort_bytewise_whatever_prefix_they_share() {
        let m = Memstore::new(&MemAccount::new(0, usize::MAX));
        let mut rows: Vec<&'static str> = vec![
            "idx:by_email\0user10@x",
            "idx:by_email\0user1@x",
            "idx:by_email\0user2@x",
            "idx:by_e",
            "idx:by_email\0",
            "idx:by_email",
            "idx:by_email\0\0",
            "idx:by_email\0user1",
            "idx:by_email\0user12345.0@example.com",
            "idx:by_email\0user12345.0@example.org",
            "idx:by_email\0user12345.0@exa",
            "idx:by_emaik\u{ff}",
            "",
            "\0",
            "a",
        ];
        for (seq, row) in rows.iter().enumerate() {
            put(&m, row, "q", 1, seq as u64 + 1);
        }
        let mut c = m.cursor(u64::MAX);
        c.seek(&KeyView::first_of_row(b"")).unwrap();
        let mut seen = Vec::new();
        while let Some(k) = c.key() {
            seen.push(k.row.to_vec());
            c.next().unwrap();
        }
        rows.sort_unstable();
        assert_eq!(seen, rows.iter().map(|r| r.as_bytes().to_vec()).collect::<Vec<_>>());
        // A seek lands on the first row at or after its target.
        c.seek(&KeyView::first_of_row(b"idx:by_email\0user1@")).unwrap();
        assert_eq!(c.key().unwrap().row, b"idx:by_email\0user1@x");
    }

    /// Inserts a put of `row`/`q` at `ts` with sequence number `seq`, pruning as a region
    /// would with readers no older than `oldest`.
    fn put_pruning(m: &Memstore, (row, q): (&str, &str), ts: u64, seq: u64, max_versions: u32, oldest: u64) {
        let key = KeyView { row: row.as_bytes(), qualifier: q.as_bytes(), ts, kind: CellType::Put, seq };
        m.insert(&key, b"v", None, Some(&Pruning { max_versions, oldest_reader: &|| oldest }));
    }

    /// Every cell of the memstore, as `(row, qualifier, ts, seq)`.
    fn all_cells(m: &Memstore) -> Vec<(String, String, u64, u64)> {
        let mut c = m.cursor(u64::MAX);
        c.seek(&KeyView::first_of_row(b"")).unwrap();
        let mut out = Vec::new();
        while let Some(k) = c.key() {
            let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
            out.push((text(k.row), text(k.qualifier), k.ts, k.seq));
            c.next().unwrap();
        }
        out
    }

    /// A put of `columns` into `row` at timestamp `ts` and sequence number `seq`, applied as
    /// the region applies a mutation's cells for one row.
    fn put_row(m: &Memstore, row: &str, columns: &[&str], ts: u64, seq: u64) {
        let values: Vec<Vec<u8>> = columns.iter().map(|q| format!("{row}{q}{ts}").into_bytes()).collect();
        let cells = columns.iter().zip(&values).map(|(q, v)| {
            let key = KeyView { row: row.as_bytes(), qualifier: q.as_bytes(), ts, kind: CellType::Put, seq };
            (key, v.as_slice(), None)
        });
        m.insert_row(cells, None);
    }

    /// A load's record, ten 100-byte columns of a 23-byte row, goes in as one run that stores
    /// the row and the header once and two bytes of lengths per column.
    #[test]
    fn a_run_stores_its_row_and_header_once() {
        let m = Memstore::new(&MemAccount::new(0, usize::MAX));
        let row = b"user1234567890123456789";
        let qualifiers: Vec<String> = (0..10).map(|i| format!("field{i}")).collect();
        let value = [7u8; 100];
        let cells = qualifiers.iter().map(|q| {
            let key = KeyView { row, qualifier: q.as_bytes(), ts: 5, kind: CellType::Put, seq: 1 };
            (key, &value[..], None)
        });
        m.insert_row(cells, None);
        let run = m.find_row(row).unwrap();
        assert!(run.item().is_run());
        assert_eq!(run.item().bytes.len(), HEADER_LEN + row.len() + 10 * (2 + 6 + 100));
        assert_eq!(m.map.len(), 1, "one item for the record");
    }

    /// The first later write into a run splits it into items of one cell each that point into
    /// the run's bytes: none is copied, and each reads back as it was.
    #[test]
    fn a_split_run_shares_its_bytes() {
        let m = Memstore::new(&MemAccount::new(0, usize::MAX));
        put_row(&m, "r", &["a", "b", "c"], 5, 1);
        let run = m.find_row(b"r").unwrap().item().bytes.clone();
        put_row(&m, "r", &["b"], 6, 2);
        let items: Vec<&MemCell> = std::iter::successors(m.find_row(b"r"), |e| e.next()).map(|e| e.item()).collect();
        let shared = items.iter().filter(|i| i.bytes.as_ptr() == run.as_ptr()).count();
        assert_eq!((items.len(), shared), (4, 3), "three cells of the run and the new one");
        let cells = cells_from(&m, 2, KeyView::first_of_row(b"r"));
        let names: Vec<(String, u64)> = cells.into_iter().map(|(_, q, ts, _)| (q, ts)).collect();
        let want = [("a", 5), ("b", 6), ("b", 5), ("c", 5)].map(|(q, ts)| (q.to_string(), ts));
        assert_eq!(names, want);
    }

    /// Cells whose lengths take several varint bytes, and a put whose cells differ in
    /// timestamp or TTL (not a run: it goes in a cell at a time), read back as written.
    #[test]
    fn long_cells_and_mixed_timestamps_and_ttls_read_back_as_written() {
        let m = Memstore::new(&MemAccount::new(0, usize::MAX));
        let (long_q, long_v) = (vec![b'q'; 200], vec![9u8; 70_000]);
        let key = |q: &'static [u8], ts| KeyView { row: b"r", qualifier: q, ts, kind: CellType::Put, seq: 3 };
        let long = KeyView { qualifier: &long_q, ..key(b"", 4) };
        m.insert_row([(key(b"a", 4), &b"x"[..], Some(60_000)), (long, &long_v[..], Some(60_000))].into_iter(), None);
        m.insert_row([(key(b"b", 8), &b"y"[..], None), (key(b"c", 7), &b"z"[..], None)].into_iter(), None);
        m.insert_row([(key(b"d", 9), &b"u"[..], None), (key(b"e", 9), &b"v"[..], Some(1_000))].into_iter(), None);
        let mut c = m.cursor(3);
        c.seek(&KeyView::first_of_row(b"r")).unwrap();
        let mut got = Vec::new();
        while let Some(k) = c.key() {
            got.push((k.qualifier.to_vec(), k.ts, c.value().len(), c.ttl_ms()));
            c.next().unwrap();
        }
        let want = vec![
            (b"a".to_vec(), 4, 1, Some(60_000)),
            (b"b".to_vec(), 8, 1, None),
            (b"c".to_vec(), 7, 1, None),
            (b"d".to_vec(), 9, 1, None),
            (b"e".to_vec(), 9, 1, Some(1_000)),
            (long_q.clone(), 4, 70_000, Some(60_000)),
        ];
        assert_eq!(got, want);
    }

    /// Every cell a cursor at `read_point` returns from `target` to the end.
    fn cells_from(m: &Memstore, read_point: u64, target: KeyView<'_>) -> Vec<(String, String, u64, Vec<u8>)> {
        let mut c = m.cursor(read_point);
        c.seek(&target).unwrap();
        let mut out = Vec::new();
        while let Some(k) = c.key() {
            let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
            out.push((text(k.row), text(k.qualifier), k.ts, c.value().to_vec()));
            c.next().unwrap();
        }
        out
    }

    #[test]
    fn a_put_into_a_row_not_held_is_one_run_read_back_cell_by_cell() {
        let account = MemAccount::new(0, usize::MAX);
        let m = Memstore::new(&account);
        put_row(&m, "b", &["c1", "c2", "c3"], 5, 1);
        put_row(&m, "a", &["c1", "c2"], 5, 2);
        put_row(&m, "c", &["c1", "c2"], 5, 3);
        assert_eq!(m.map.len(), 3, "one node a row");
        let all = cells_from(&m, u64::MAX, KeyView::first_of_row(b""));
        let names: Vec<String> = all.iter().map(|(r, q, ..)| format!("{r}/{q}")).collect();
        assert_eq!(names, ["a/c1", "a/c2", "b/c1", "b/c2", "b/c3", "c/c1", "c/c2"]);
        assert!(all.iter().all(|(r, q, ts, v)| *v == format!("{r}{q}{ts}").into_bytes()), "values follow their cells");
        // A seek inside a run lands on its first cell at or after the target.
        let inside = KeyView { row: b"b", qualifier: b"c2", ts: u64::MAX, kind: CellType::Put, seq: u64::MAX };
        let from_inside = cells_from(&m, u64::MAX, inside);
        assert_eq!(from_inside.first().map(|(r, q, ..)| (r.as_str(), q.as_str())), Some(("b", "c2")));
        assert_eq!(from_inside.len(), 4);
        // Past a run's last cell: the next row.
        let past = KeyView { row: b"b", qualifier: b"c9", ts: u64::MAX, kind: CellType::Put, seq: u64::MAX };
        assert_eq!(cells_from(&m, u64::MAX, past).first().map(|(r, ..)| r.as_str()), Some("c"));
        // Point reads through the row index, and read points, see runs whole or not at all.
        assert_eq!(row_cells(m.point_cursor(u64::MAX), b"b").len(), 3);
        assert_eq!(row_cells(m.point_cursor(1), b"a").len(), 0, "written after the read point");
        assert_eq!(searched_cells(&m, 2, b"b"), row_cells(m.point_cursor(2), b"b"));
        let mut c = m.cursor(2);
        assert_eq!(c.prev_row(None).unwrap().as_deref(), Some(&b"b"[..]), "row c is newer than the read point");
        assert_eq!(c.prev_row(Some(b"b")).unwrap().as_deref(), Some(&b"a"[..]));
    }

    #[test]
    fn cells_that_cannot_be_one_run_go_in_one_by_one() {
        let account = MemAccount::new(0, usize::MAX);
        let m = Memstore::new(&account);
        // One column twice at one timestamp: the later value stays, as for single inserts.
        let key = |q: &'static str| KeyView { row: b"r", qualifier: q.as_bytes(), ts: 1, kind: CellType::Put, seq: 1 };
        m.insert_row([(key("a"), &b"old"[..], None), (key("a"), &b"new"[..], None)].into_iter(), None);
        assert_eq!(cells_from(&m, u64::MAX, KeyView::first_of_row(b"r")).len(), 1);
        assert_eq!(cells_from(&m, u64::MAX, KeyView::first_of_row(b"r"))[0].3, b"new");
        // A delete marker among the cells.
        let marker = KeyView { kind: CellType::DeleteColumn, ..key("b") };
        m.insert_row([(key("c"), &b"v"[..], None), (marker, &b""[..], None)].into_iter(), None);
        // A row the memstore holds already.
        put_row(&m, "r", &["d", "e"], 1, 1);
        assert_eq!(m.map.len(), 5, "every cell its own node");
        assert!(!m.has_runs.load(AtomicOrdering::Relaxed));
    }

    /// Rows and columns a cursor returns from `target` on, as "row/column" strings.
    fn names_from(mut c: MemCursor<'_>, target: KeyView<'_>) -> Vec<String> {
        c.seek(&target).unwrap();
        let mut out = Vec::new();
        while let Some(k) = c.key() {
            out.push(format!("{}/{}", String::from_utf8_lossy(k.row), String::from_utf8_lossy(k.qualifier)));
            c.next().unwrap();
        }
        out
    }

    /// Every state a split passes through: after each cell it has put in (last to first), the
    /// readers of every kind see the row's cells once each, in order.
    #[test]
    fn each_step_of_a_split_leaves_every_cell_findable_once() {
        let column =
            |row: &'static [u8], q: &'static [u8]| KeyView { row, qualifier: q, ts: 5, kind: CellType::Put, seq: 9 };
        let whole = ["q/a", "q/b", "r/a", "r/b", "r/c", "r/d", "s/a", "s/b"];
        for linked in 0..=4 {
            let m = Memstore::new(&MemAccount::new(0, usize::MAX));
            put_row(&m, "q", &["a", "b"], 5, 1);
            put_row(&m, "r", &["a", "b", "c", "d"], 5, 1);
            put_row(&m, "s", &["a", "b"], 5, 1);
            let mut inside = m.cursor(1);
            inside.seek(&column(b"r", b"b")).unwrap();
            let run = m.find_row(b"r").unwrap();
            let offsets: Vec<usize> = run.item().offsets().collect();
            for &at in offsets.iter().rev().take(linked) {
                m.split_off(run.item(), at);
            }
            let state = format!("after {linked} of 4 cells");
            assert_eq!(names_from(m.cursor(1), KeyView::first_of_row(b"")), whole, "{state}");
            assert_eq!(names_from(m.cursor(1), column(b"r", b"c")), whole[4..], "{state}");
            assert_eq!(names_from(m.cursor(1), column(b"r", b"e")), whole[6..], "{state}");
            assert_eq!(names_from(m.writer_cursor(1), column(b"r", b"b")), whole[3..], "{state}");
            assert_eq!(row_cells(m.point_cursor(1), b"r").len(), 4, "{state}");
            assert_eq!(m.cursor(1).prev_row(Some(b"s")).unwrap().as_deref(), Some(&b"r"[..]), "{state}");
            assert_eq!(m.cursor(1).prev_row(Some(b"r")).unwrap().as_deref(), Some(&b"q"[..]), "{state}");
            let mut rest = Vec::new();
            while let Some(k) = inside.key() {
                rest.push(format!("{}/{}", String::from_utf8_lossy(k.row), String::from_utf8_lossy(k.qualifier)));
                inside.next().unwrap();
            }
            assert_eq!(rest, whole[3..], "a cursor that stood inside the run, {state}");
        }
    }

    #[test]
    fn writes_into_a_run_row_of_every_kind_split_it_first() {
        let account = MemAccount::new(0, usize::MAX);
        let m = Memstore::new(&account);
        // A put of more columns.
        put_row(&m, "r", &["a", "c"], 5, 1);
        put_row(&m, "r", &["b", "d"], 5, 2);
        assert_eq!(m.map.len(), 4);
        assert_eq!(names_from(m.cursor(2), KeyView::first_of_row(b"")), ["r/a", "r/b", "r/c", "r/d"]);
        // A family delete marker: it sorts first in the row, and pruning sees it.
        put_row(&m, "s", &["a", "b"], 5, 3);
        let marker = KeyView { row: b"s", qualifier: b"", ts: 6, kind: CellType::DeleteFamily, seq: 4 };
        m.insert(&marker, b"", None, None);
        assert!(m.has_markers() && m.row_has_family_marker(b"s"));
        assert_eq!(names_from(m.cursor(4), KeyView::first_of_row(b"s")), ["s/", "s/a", "s/b"]);
        // A run takes at most MAX_RUN cells; a larger put goes in a cell at a time.
        let names: Vec<String> = (0..=MAX_RUN).map(|i| format!("c{i:03}")).collect();
        let columns: Vec<&str> = names.iter().map(String::as_str).collect();
        put_row(&m, "t", &columns[..MAX_RUN], 5, 5);
        put_row(&m, "u", &columns, 5, 6);
        assert_eq!(m.map.len(), 4 + 3 + 1 + MAX_RUN + 1);
        // Cells of a run keep their own time to live.
        let ttl = |q: &'static [u8]| {
            (KeyView { row: b"v", qualifier: q, ts: 5, kind: CellType::Put, seq: 7 }, &b"x"[..], Some(60_000))
        };
        m.insert_row([ttl(b"a"), ttl(b"b")].into_iter(), None);
        let mut c = m.cursor(7);
        c.seek(&KeyView::first_of_row(b"v")).unwrap();
        assert_eq!((c.ttl_ms(), c.value()), (Some(60_000), &b"x"[..]));
        c.next().unwrap();
        assert_eq!((c.key().map(|k| k.qualifier), c.ttl_ms()), (Some(&b"b"[..]), Some(60_000)));
    }

    #[test]
    fn a_later_write_splits_the_run_and_keeps_every_version_a_reader_sees() {
        let account = MemAccount::new(0, usize::MAX);
        let m = Memstore::new(&account);
        put_row(&m, "r", &["a", "b", "c"], 5, 1);
        put_row(&m, "s", &["a", "b"], 5, 2);
        // A reader that already stands inside the run (read point 2).
        let mut reader = m.cursor(2);
        reader.seek(&KeyView::first_of_row(b"r")).unwrap();
        reader.next().unwrap();
        assert_eq!(reader.key().map(|k| k.qualifier.to_vec()), Some(b"b".to_vec()));
        // A newer version of column b: the run becomes cells, the old b stays for older reads.
        let newer = KeyView { row: b"r", qualifier: b"b", ts: 6, kind: CellType::Put, seq: 3 };
        let oldest = || 2;
        m.insert(&newer, b"r-b-6", None, Some(&Pruning { max_versions: 1, oldest_reader: &oldest }));
        assert_eq!(m.map.len(), 5, "three cells of r, its new version, and the run of s");
        let mut rest = Vec::new();
        while let Some(k) = reader.key() {
            rest.push((String::from_utf8(k.row.to_vec()).unwrap(), String::from_utf8(k.qualifier.to_vec()).unwrap()));
            reader.next().unwrap();
        }
        let expected: Vec<(String, String)> = [("r", "b"), ("r", "c"), ("s", "a"), ("s", "b")]
            .iter()
            .map(|(r, q)| (r.to_string(), q.to_string()))
            .collect();
        assert_eq!(rest, expected, "each cell once, none of the newer write");
        let now: Vec<(String, u64)> =
            cells_from(&m, 3, KeyView::first_of_row(b"r")).into_iter().take(4).map(|(_, q, ts, _)| (q, ts)).collect();
        assert_eq!(now, [("a".to_string(), 5), ("b".to_string(), 6), ("b".to_string(), 5), ("c".to_string(), 5)]);
        assert_eq!(row_cells(m.point_cursor(3), b"r"), searched_cells(&m, 3, b"r"), "the index leads to the new front");
        // Once no reader holds read point 2, the next write over b drops the version split out
        // of the run (it keeps one published version behind itself).
        let newest = KeyView { ts: 7, seq: 4, ..newer };
        let none_older = || 3;
        m.insert(&newest, b"r-b-7", None, Some(&Pruning { max_versions: 1, oldest_reader: &none_older }));
        let bs: Vec<u64> = cells_from(&m, u64::MAX, KeyView::first_of_row(b"r"))
            .into_iter()
            .filter(|(r, q, ..)| r == "r" && q == "b")
            .map(|(.., ts, _)| ts)
            .collect();
        assert_eq!(bs, [7, 6]);
    }

    #[test]
    fn a_write_drops_the_versions_no_reader_can_see() {
        for max_versions in [1u32, 3] {
            let account = MemAccount::new(0, usize::MAX);
            let m = Memstore::new(&account);
            for seq in 1..=200u64 {
                // Each write follows the last one's publication: every reader sees seq - 1.
                put_pruning(&m, ("hot", "q"), seq, seq, max_versions, seq - 1);
                put_pruning(&m, (&format!("cold{seq}"), "q"), 1, seq, max_versions, seq - 1);
            }
            let hot: Vec<u64> = all_cells(&m).into_iter().filter(|c| c.0 == "hot").map(|c| c.3).collect();
            // The newest (not yet published) write, and the versions every reader still sees.
            let kept: Vec<u64> = (200 - u64::from(max_versions)..=200).rev().collect();
            assert_eq!(hot, kept, "max_versions {max_versions}");
            assert_eq!(all_cells(&m).len(), kept.len() + 200, "other rows are untouched");
            assert_eq!(account.held(), m.size(), "the budget follows the drops");
        }
    }

    #[test]
    fn a_pinned_reader_keeps_every_version_it_can_see() {
        let m = Memstore::new(&MemAccount::new(0, usize::MAX));
        for seq in 1..=50u64 {
            put_pruning(&m, ("r", "q"), seq, seq, 1, 10);
        }
        let seqs: Vec<u64> = all_cells(&m).into_iter().map(|c| c.3).collect();
        assert_eq!(seqs, (10..=50).rev().collect::<Vec<_>>(), "the reader at 10 still sees seq 10");
        // Versions at one timestamp shadow each other: the one every reader sees counts once.
        let m = Memstore::new(&MemAccount::new(0, usize::MAX));
        for seq in 1..=5u64 {
            put_pruning(&m, ("r", "q"), 7, seq, 2, seq - 1);
        }
        // Left: the unpublished write, the version every reader sees, and one it shadows that
        // the next write drops (with fewer cells than `max_versions + 1`, none is looked at).
        assert_eq!(all_cells(&m).iter().map(|c| c.3).collect::<Vec<_>>(), vec![5, 4, 3]);
        // Writes with older timestamps drop nothing in front of them; the next newest write
        // drops everything behind the version every reader sees.
        put_pruning(&m, ("r", "q"), 3, 6, 2, 5);
        put_pruning(&m, ("r", "q"), 3, 7, 1, 6);
        assert_eq!(all_cells(&m).iter().map(|c| c.3).collect::<Vec<_>>(), vec![5, 4, 3, 7, 6]);
        put_pruning(&m, ("r", "q"), 8, 8, 1, 7);
        assert_eq!(all_cells(&m).iter().map(|c| c.3).collect::<Vec<_>>(), vec![8, 5]);
    }

    #[test]
    fn markers_keep_every_version_they_could_bring_back() {
        let marker = |m: &Memstore, q: &str, ts: u64, kind: CellType, seq: u64| {
            let key = KeyView { row: b"r", qualifier: q.as_bytes(), ts, kind, seq };
            m.insert(&key, b"", None, None);
        };
        // A version marker at the newest timestamp brings the version behind it back.
        let m = Memstore::new(&MemAccount::new(0, usize::MAX));
        marker(&m, "q", 100, CellType::Delete, 1);
        for seq in 2..=20u64 {
            put_pruning(&m, ("r", "q"), seq, seq, 1, seq - 1);
        }
        assert_eq!(all_cells(&m).len(), 20, "nothing dropped where a column marker reaches");
        // So does a family version marker, from the row's start.
        let m = Memstore::new(&MemAccount::new(0, usize::MAX));
        marker(&m, "", 5, CellType::DeleteFamilyVersion, 1);
        for seq in 2..=20u64 {
            put_pruning(&m, ("r", "q"), seq, seq, 1, seq - 1);
        }
        assert_eq!(all_cells(&m).len(), 20, "nothing dropped where a family marker reaches");
        // A marker older than the versions counted hides none of them: the rest still go.
        let m = Memstore::new(&MemAccount::new(0, usize::MAX));
        marker(&m, "q", 1, CellType::DeleteColumn, 1);
        for seq in 2..=20u64 {
            put_pruning(&m, ("r", "q"), 10 + seq, seq, 1, seq - 1);
        }
        let kept: Vec<u64> = all_cells(&m).into_iter().map(|c| c.3).collect();
        assert_eq!(kept, vec![20, 19, 1], "the newest two and the marker");
    }

    /// Inserts `cells` cells of `len` bytes of `tag`, in rows `r{tag}{n}`.
    fn fill(m: &Memstore, tag: u8, cells: u32, len: usize) {
        for n in 0..cells {
            let row = format!("r{tag}{n:06}");
            let key = KeyView { row: row.as_bytes(), qualifier: b"q", ts: 1, kind: CellType::Put, seq: u64::from(n) };
            m.insert(&key, &vec![tag; len], None, None);
        }
    }

    /// Checks that `m` holds just what `fill(m, tag, cells, len)` put there.
    fn assert_filled(m: &Memstore, tag: u8, cells: u32, len: usize) {
        let mut c = m.cursor(u64::MAX);
        c.seek(&KeyView::first_of_row(b"")).unwrap();
        let mut seen = 0;
        while let Some(k) = c.key() {
            assert_eq!(k.row, format!("r{tag}{seen:06}").as_bytes());
            assert_eq!(c.value(), vec![tag; len]);
            seen += 1;
            c.next().unwrap();
        }
        assert_eq!(seen, cells);
    }

    #[test]
    fn a_dropped_memstores_full_chunks_are_filled_again_by_the_next() {
        let account = MemAccount::new(64 * MAX_CHUNK, usize::MAX);
        let first = Memstore::new(&account);
        fill(&first, 1, 3000, 1000);
        let chunks = first.full_size_chunks();
        assert!(chunks >= 4, "about 3 MB of cells fill {chunks} full-size chunks");
        drop(first);
        let pooled = account.pooled();
        assert_eq!(pooled, chunks, "every full-size chunk, the one being filled too");
        assert_eq!(account.held(), 0);
        let second = Memstore::new(&account);
        fill(&second, 2, 1500, 1000);
        assert!(account.pooled() < pooled, "the next memstore took chunks from the pool");
        assert_eq!(account.held(), second.size(), "pooled chunks are charged again when taken");
        assert_filled(&second, 2, 1500, 1000);
    }

    #[test]
    fn a_dropped_memstores_skiplist_segments_serve_the_next() {
        let account = MemAccount::new(64 * MAX_CHUNK, usize::MAX);
        let first = Memstore::new(&account);
        fill(&first, 1, 20_000, 8);
        drop(first);
        let pooled = account.pooled_segments();
        assert!(pooled >= 2, "20 000 cells fill full skiplist segments: {pooled}");
        let second = Memstore::new(&account);
        fill(&second, 2, 20_000, 8);
        assert_eq!(account.pooled_segments(), 0, "the next memstore took them");
        assert_filled(&second, 2, 20_000, 8);
    }

    #[test]
    fn an_oversized_cells_chunk_stays_out_of_the_pool() {
        let account = MemAccount::new(64 * MAX_CHUNK, usize::MAX);
        let m = Memstore::new(&account);
        fill(&m, 1, 1000, 1000);
        let big = vec![7u8; MAX_CHUNK * 2];
        let key = KeyView { row: b"zz", qualifier: b"big", ts: 5, kind: CellType::Put, seq: 9 };
        m.insert(&key, &big, None, None);
        fill(&m, 2, 1000, 1000);
        let chunks = m.full_size_chunks();
        drop(m);
        assert_eq!(account.pooled(), chunks, "the full-size chunks, not the oversized one");
        while let Some(chunk) = account.take_chunk() {
            assert_eq!((chunk.len(), chunk.capacity()), (0, MAX_CHUNK));
        }
    }

    #[test]
    fn a_memstore_a_reader_still_holds_keeps_its_chunks() {
        let account = MemAccount::new(64 * MAX_CHUNK, usize::MAX);
        let first = Arc::new(Memstore::new(&account));
        fill(&first, 1, 3000, 1000);
        let reader = first.clone();
        first.release();
        drop(first);
        assert_eq!(account.pooled(), 0, "not dropped while read");
        let second = Memstore::new(&account);
        fill(&second, 2, 3000, 1000);
        let mut c = reader.cursor(u64::MAX);
        c.seek(&KeyView::first_of_row(b"")).unwrap();
        assert_eq!(c.key().map(|k| k.row), Some(&b"r1000000"[..]));
        assert!(c.value().iter().all(|&b| b == 1));
        drop(reader);
        assert!(account.pooled() > 0, "pooled once the reader is done");
    }

    #[test]
    fn cells_round_trip_through_the_arena_and_chunks_are_charged() {
        let account = MemAccount::new(0, usize::MAX);
        let m = Memstore::new(&account);
        let big = vec![7u8; MAX_CHUNK * 2];
        let row = vec![b'r'; 300];
        let key = KeyView { row: &row, qualifier: b"big", ts: 5, kind: CellType::Put, seq: 1 };
        m.insert(&key, &big, Some(60_000), None);
        let marker = KeyView { row: b"a", qualifier: b"", ts: 9, kind: CellType::DeleteFamily, seq: 2 };
        m.insert(&marker, b"", None, None);
        assert!(m.size() >= big.len() + 2 * list::slot_bytes::<MemCell>(), "the oversized chunk is charged");
        let mut c = m.cursor(u64::MAX);
        c.seek(&KeyView::first_of_row(b"")).unwrap();
        assert_eq!(c.key(), Some(marker));
        assert_eq!((c.value(), c.ttl_ms()), (&b""[..], None));
        c.next().unwrap();
        assert_eq!(c.key(), Some(key));
        assert_eq!((c.value(), c.ttl_ms()), (&big[..], Some(60_000)));
        c.next().unwrap();
        assert_eq!(c.key(), None);
        // Rows sharing their first eight bytes fall back to the full comparison.
        c.seek(&KeyView::first_of_row(&row[..8])).unwrap();
        assert_eq!(c.key().map(|k| k.row.len()), Some(300));
    }
}
