//! The memstore: recent writes of one region's family, in a skiplist ordered by the engine's
//! key order ([`list`]: one writer, lock-free readers). Readers filter by MVCC read point;
//! flush turns a frozen memstore into an SSTable.
//!
//! Cells live in an arena: each is encoded once, contiguously, into chunks of a few hundred KiB
//! that are freed together when the memstore is dropped (full-size ones, and the skiplist's
//! full segments, go to the engine's pool, [`account`], for the next memstore to fill). The skiplist holds a small handle per
//! cell (a slice of its chunk), and each skiplist node carries the row's first 24 bytes, which
//! settle most comparisons without touching the chunk. Compared with owning each row, qualifier and value separately,
//! this saves allocations on the write path and keeps freed memstores from fragmenting the heap.
//!
//! A row index ([`row_index`]) maps each row to its first cell, so a point read lands on its
//! row (or learns the memstore does not hold it) without a search down the list.
//!
//! A write over a column drops the column's versions that no reader can see any more: those
//! behind `max_versions` newer versions that every open and future reader sees (HBase's
//! in-memory compaction does the same). A flush would drop them anyway; dropping them at once
//! keeps a hot row from dragging thousands of dead versions through every read of it until
//! then. Non-raw reads cannot tell; a raw read no longer sees such a version, as after a flush.

mod account;
mod list;
mod row_index;

use std::cmp::Ordering;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use parking_lot::Mutex;

use list::{Entry, Inserted, SkipList, Tag, Tagged};
use row_index::{RowIndex, Start};

use crate::cell::{same_bytes, CellType, KeyView};
use crate::read::cursor::CellCursor;
use crate::Result;

pub(crate) use account::MemAccount;

/// Encoded cell header: row length (u16), qualifier length (u32), timestamp (u64), sequence
/// number (u64), TTL flag (u8) and TTL in ms (u64), little-endian; then row, qualifier, value.
const HEADER_LEN: usize = 31;

/// Arena chunks start small (a memstore that sees a handful of writes stays small) and double
/// up to this size, the size the chunk pool keeps.
const MAX_CHUNK: usize = account::CHUNK;
const FIRST_CHUNK: usize = 4 * 1024;

fn le_u16(b: &[u8]) -> u16 {
    u16::from_le_bytes([b[0], b[1]])
}

fn le_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

/// The first 24 bytes of a row, zero-padded, as three big-endian numbers compared in order:
/// when two rows' prefixes differ, they order the rows exactly as a byte-wise comparison would.
/// A comparison settled here never leaves the list's nodes (it is the cells' [`Tag`]), and rows
/// of one table often share a long start: an index row begins with a record type and the
/// index's name, and the values after it must still differ within the prefix (with sixteen
/// bytes, emails under `by_email` tied on `user123` and every tie read the arena).
fn row_prefix(row: &[u8]) -> Tag {
    let word = |from: usize| {
        let mut a = [0u8; 8];
        let bytes = row.get(from..).unwrap_or_default();
        let n = bytes.len().min(8);
        a[..n].copy_from_slice(&bytes[..n]);
        u64::from_be_bytes(a)
    };
    [word(0), word(8), word(16)]
}

/// What lets an insert drop versions no reader can see.
pub(crate) struct Pruning<'a> {
    /// The family's `max_versions`.
    pub max_versions: u32,
    /// The oldest read point an open or future reader holds (asked only when there is
    /// something to drop: it takes a lock).
    pub oldest_reader: &'a dyn Fn() -> u64,
}

/// A cell in the arena: the skiplist's key.
#[derive(Debug)]
pub(crate) struct MemCell {
    kind: CellType,
    /// Header, row, qualifier and value, in one slice of an arena chunk.
    bytes: Bytes,
}

impl MemCell {
    fn row_len(&self) -> usize {
        usize::from(le_u16(&self.bytes))
    }

    fn qualifier_end(&self) -> usize {
        HEADER_LEN + self.row_len() + le_u32(&self.bytes[2..]) as usize
    }

    pub fn view(&self) -> KeyView<'_> {
        let row_end = HEADER_LEN + self.row_len();
        KeyView {
            row: &self.bytes[HEADER_LEN..row_end],
            qualifier: &self.bytes[row_end..self.qualifier_end()],
            ts: le_u64(&self.bytes[6..]),
            kind: self.kind,
            seq: le_u64(&self.bytes[14..]),
        }
    }

    fn value(&self) -> &[u8] {
        &self.bytes[self.qualifier_end()..]
    }

    fn ttl_ms(&self) -> Option<u64> {
        (self.bytes[22] != 0).then(|| le_u64(&self.bytes[23..]))
    }
}

/// A seek target, with its row prefix worked out once.
struct Probe<'a> {
    prefix: Tag,
    key: KeyView<'a>,
}

impl<'a> Probe<'a> {
    fn new(key: KeyView<'a>) -> Self {
        Probe { prefix: row_prefix(key.row), key }
    }

    /// `cell.cmp(target)` for a cell whose row prefix ties the target's: what the list's
    /// searches take with the prefix.
    fn order(&self, cell: &MemCell) -> Ordering {
        cell.view().cmp_internal(&self.key)
    }
}

impl PartialEq for MemCell {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for MemCell {}
impl PartialOrd for MemCell {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for MemCell {
    fn cmp(&self, other: &Self) -> Ordering {
        self.view().cmp_internal(&other.view())
    }
}

/// A cell's tag is its row's prefix: comparisons between rows that differ in their first
/// 24 bytes never leave the list's nodes.
impl Tagged for MemCell {
    fn tag(&self) -> Tag {
        row_prefix(self.view().row)
    }
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
    /// new cell at the front of its row moves the row's entry (a cell replacing an equal one
    /// there takes its place at the front); nothing else removes a row's first cell, as
    /// pruning drops only versions behind newer ones.
    rows: RowIndex,
    arena: Mutex<Arena>,
    bytes: AtomicUsize,
    account: Arc<MemAccount>,
    /// Set once the bytes were given back to the account (after a flush).
    released: AtomicBool,
    /// Set once a delete marker was inserted: only then can a marker change which versions
    /// a write makes invisible.
    has_markers: AtomicBool,
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

    /// Inserts a cell, and with `pruning` drops the versions of its column that it leaves no
    /// reader able to see. Callers hold the region's write lock (or replay the log alone), so
    /// sizes stay exact and no other write moves the column. The row fits in a u16 length: the
    /// engine caps rows at 32767 bytes.
    pub fn insert(&self, key: &KeyView<'_>, value: &[u8], ttl_ms: Option<u64>, pruning: Option<&Pruning<'_>>) {
        let len = HEADER_LEN + key.row.len() + key.qualifier.len() + value.len();
        let bytes = {
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
            arena.put_u16_le(key.row.len() as u16);
            arena.put_u32_le(key.qualifier.len() as u32);
            arena.put_u64_le(key.ts);
            arena.put_u64_le(key.seq);
            arena.put_u8(u8::from(ttl_ms.is_some()));
            arena.put_u64_le(ttl_ms.unwrap_or(0));
            arena.put_slice(key.row);
            arena.put_slice(key.qualifier);
            arena.put_slice(value);
            arena.split().freeze()
        };
        let Inserted { entry, tied_before, allocated } = self.map.insert(MemCell { kind: key.kind, bytes });
        self.charge(allocated);
        // If the cell now leads its row, the row index points at it. A cell before it with
        // another tag is of another row.
        if tied_before.is_none_or(|b| b.item().view().row != key.row) {
            let grown = self.rows.lead(key.row, entry.handle(), |h| self.map.at(h).map(|e| e.item().view().row));
            self.charge(grown);
        }
        if key.kind.is_delete() {
            self.has_markers.store(true, AtomicOrdering::Relaxed);
        } else if let Some(pruning) = pruning {
            self.prune_behind(&entry, pruning);
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
        MemCursor { memstore: self, cur: None, read_point, splicing: false, point: false }
    }

    /// [`Memstore::cursor`] for a read of one row: a seek to the row's start finds it by the
    /// row index, or nothing.
    pub fn point_cursor(&self, read_point: u64) -> MemCursor<'_> {
        MemCursor { memstore: self, cur: None, read_point, splicing: false, point: true }
    }

    /// The first cell of `row` by the row index: `Ok(None)` if the memstore does not hold
    /// the row, `Err(())` if the index cannot tell.
    fn first_of(&self, row: &[u8]) -> Result<Option<Entry<'_, MemCell>>, ()> {
        match self.rows.find(row) {
            Start::At(handle) => Ok(self.map.at(handle).filter(|e| e.item().view().row == row)),
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
            return match self.first_of(row) {
                Ok(first) => first.is_some(),
                Err(()) => self.search(&KeyView::first_of_row(row)).is_some_and(|e| e.item().view().row == row),
            };
        }
        let probe = Probe::new(KeyView::first_of_row(row));
        let found = self.map.lower_bound_splicing(probe.prefix, |c| probe.order(c));
        found.is_some_and(|e| e.item().view().row == row)
    }

    /// [`Memstore::cursor`] for the writer, reading a row it is about to write (a condition,
    /// an increment): its seeks leave the list's splice where they land, so the inserts that
    /// follow start there.
    pub fn writer_cursor(&self, read_point: u64) -> MemCursor<'_> {
        MemCursor { memstore: self, cur: None, read_point, splicing: true, point: false }
    }
}

/// Cursor over a memstore at a read point.
pub(crate) struct MemCursor<'a> {
    memstore: &'a Memstore,
    cur: Option<Entry<'a, MemCell>>,
    read_point: u64,
    /// Seeks leave the writer's splice (see [`Memstore::writer_cursor`]).
    splicing: bool,
    /// Reads one row (see [`Memstore::point_cursor`]).
    point: bool,
}

impl MemCursor<'_> {
    fn skip_invisible(&mut self) {
        while let Some(e) = &self.cur {
            if e.item().view().seq <= self.read_point {
                return;
            }
            self.cur = e.next();
        }
    }
}

impl CellCursor for MemCursor<'_> {
    fn key(&self) -> Option<KeyView<'_>> {
        self.cur.as_ref().map(|e| e.item().view())
    }

    fn value(&self) -> &[u8] {
        self.cur.as_ref().map_or(&[], |e| e.item().value())
    }

    fn ttl_ms(&self) -> Option<u64> {
        self.cur.as_ref().and_then(|e| e.item().ttl_ms())
    }

    fn next(&mut self) -> Result<()> {
        if let Some(e) = &self.cur {
            self.cur = e.next();
            self.skip_invisible();
        }
        Ok(())
    }

    fn seek(&mut self, target: &KeyView<'_>) -> Result<()> {
        let memstore = self.memstore;
        self.cur = if self.splicing {
            let probe = Probe::new(*target);
            memstore.map.lower_bound_splicing(probe.prefix, |c| probe.order(c))
        } else if target.is_first_of_row() {
            // The row's first cell, by the index; a row the memstore does not hold has no
            // cells for a point read, and a scan goes on at the next row there is.
            match memstore.first_of(target.row) {
                Ok(Some(first)) => Some(first),
                Ok(None) if self.point => None,
                Ok(None) | Err(()) => memstore.search(target),
            }
        } else {
            memstore.search(target)
        };
        self.skip_invisible();
        Ok(())
    }

    fn prev_row(&mut self, bound: Option<&[u8]>) -> Result<Option<Bytes>> {
        let mut entry = match bound {
            None => self.memstore.map.last(),
            Some(row) => {
                let probe = Probe::new(KeyView::first_of_row(row));
                self.memstore.map.before(probe.prefix, |c| probe.order(c))
            }
        };
        // Skip rows whose every cell is newer than the read point. The row is copied out so a
        // caller holding it does not pin an arena chunk.
        while let Some(e) = entry {
            let key = e.item().view();
            if key.seq <= self.read_point {
                return Ok(Some(Bytes::copy_from_slice(key.row)));
            }
            entry = e.prev();
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        c.skip_invisible();
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
