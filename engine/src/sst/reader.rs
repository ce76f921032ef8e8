//! Opens an SSTable, keeps its index, bloom filter and meta block in memory, and reads data
//! blocks through the shared block cache.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::cache::BlockCache;
use crate::cell::KeyView;
use crate::descriptor::BloomType;
use crate::fs::{FileSystem, ReadFile};
use crate::read::cursor::CellCursor;
use crate::sst::block::{unframe, unframe_shared, Block, BlockIter, EntryKeys};
use crate::sst::bloom::{row_col_hash, row_hash, Bloom};
use crate::sst::format::{
    decode_index, decode_key, shared_prefix_len, Footer, Handle, IndexEntry, SstMeta, FOOTER_LEN,
};
use crate::{Error, Result};

/// The first and last rows of a file.
type RowSpan = (Box<[u8]>, Box<[u8]>);

/// An open SSTable.
pub(crate) struct SstReader {
    path: Arc<Path>,
    file: Arc<dyn ReadFile>,
    id: u64,
    size: u64,
    index: Vec<IndexEntry>,
    /// How the data blocks store their keys (the file's format version decides).
    keys: EntryKeys,
    /// The bytes every row of the file starts with (the common prefix of its first and last
    /// rows): a table prefix, a record type or a constant like YCSB's `user`. Prefix numbers
    /// start after it, or they would all be equal.
    shared_prefix: Box<[u8]>,
    /// The 8 bytes after `shared_prefix` of each index entry's row, big-endian and zero-padded:
    /// a compact, cache-friendly array that narrows a block search before any key is decoded.
    row_prefixes: Vec<u64>,
    /// Every [`SAMPLE`]th entry of `row_prefixes`: small enough to stay in cache, so a search
    /// touches the large array only within one window.
    prefix_samples: Vec<u64>,
    bloom: Option<(BloomType, Bloom)>,
    meta: SstMeta,
    /// The first and last rows (from `meta`), decoded once: every point read checks them.
    span: Option<RowSpan>,
    cache: Arc<BlockCache>,
    in_memory: bool,
    /// Bytes of the above charged to the block cache's budget while the file is open.
    pinned: usize,
}

impl Drop for SstReader {
    fn drop(&mut self) {
        self.cache.unpin(self.pinned);
    }
}

impl std::fmt::Debug for SstReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SstReader").field("path", &self.path).field("id", &self.id).finish()
    }
}

/// Encodes the bloom block payload: kind byte, then the filter.
pub(crate) fn encode_bloom_block(kind: BloomType, bloom: &Bloom) -> Vec<u8> {
    let mut out = vec![match kind {
        BloomType::RowCol => 2,
        _ => 1,
    }];
    out.extend_from_slice(&bloom.encode());
    out
}

impl SstReader {
    /// Opens and validates the file's footer, index, bloom and meta blocks.
    pub fn open(
        fs: &dyn FileSystem,
        path: &Path,
        id: u64,
        cache: Arc<BlockCache>,
        in_memory: bool,
    ) -> Result<SstReader> {
        let file = fs.open(path).map_err(|e| Error::io(path, e))?;
        let size = file.size().map_err(|e| Error::io(path, e))?;
        if size < FOOTER_LEN as u64 {
            return Err(Error::corrupt(path, 0, "file shorter than an SSTable footer"));
        }
        let mut fbuf = [0u8; FOOTER_LEN];
        let footer_at = size - FOOTER_LEN as u64;
        file.read_exact_at(&mut fbuf, footer_at).map_err(|e| Error::io(path, e))?;
        let footer = Footer::decode(&fbuf).map_err(|r| Error::corrupt(path, footer_at, r))?;
        let mut reader = SstReader {
            path: Arc::from(path),
            file,
            id,
            size,
            index: Vec::new(),
            keys: EntryKeys::of_version(footer.version),
            shared_prefix: Box::default(),
            row_prefixes: Vec::new(),
            prefix_samples: Vec::new(),
            bloom: None,
            meta: SstMeta::default(),
            span: None,
            cache,
            in_memory,
            pinned: 0,
        };
        for h in [footer.index, footer.meta, footer.bloom] {
            if h.offset.checked_add(u64::from(h.len)).is_none_or(|end| end > footer_at) {
                return Err(Error::corrupt(path, footer_at, "block handle points outside the file"));
            }
        }
        let index_raw = reader.read_block_bytes(footer.index)?;
        reader.index = decode_index(&index_raw, footer.version)
            .ok_or_else(|| Error::corrupt(path, footer.index.offset, "malformed index block"))?;
        let outside = |e: &IndexEntry| {
            let end = e.handle.offset.checked_add(u64::from(e.handle.len));
            end.is_none_or(|end| end > footer_at)
        };
        if reader.index.iter().any(outside) {
            return Err(Error::corrupt(path, footer.index.offset, "index points outside the file"));
        }
        let meta_raw = reader.read_block_bytes(footer.meta)?;
        reader.meta = SstMeta::decode(&meta_raw)
            .ok_or_else(|| Error::corrupt(path, footer.meta.offset, "malformed meta block"))?;
        reader.span = decode_key(&reader.meta.first_key)
            .zip(decode_key(&reader.meta.last_key))
            .map(|(f, l)| (f.row.into(), l.row.into()));
        reader.shared_prefix = reader.row_span().map_or(Box::default(), |(first, last)| {
            let n = shared_prefix_len(first, last);
            first[..n].into()
        });
        let shared = &reader.shared_prefix;
        reader.row_prefixes = reader
            .index
            .iter()
            .map(|e| decode_key(&e.last_key).and_then(|k| k.row.strip_prefix(&shared[..]).map(row_prefix)))
            .collect::<Option<_>>()
            .ok_or_else(|| Error::corrupt(path, footer.index.offset, "malformed key in the index block"))?;
        reader.prefix_samples = reader.row_prefixes.iter().step_by(SAMPLE).copied().collect();
        if footer.bloom.len > 0 {
            let raw = reader.read_block_bytes(footer.bloom)?;
            let bad = || Error::corrupt(path, footer.bloom.offset, "malformed bloom block");
            let (&kind, rest) = raw.split_first().ok_or_else(bad)?;
            let kind = match kind {
                1 => BloomType::Row,
                2 => BloomType::RowCol,
                _ => return Err(bad()),
            };
            reader.bloom = Some((kind, Bloom::decode(rest).ok_or_else(bad)?));
        }
        reader.pinned = reader.resident_bytes(index_raw.len());
        reader.cache.pin(reader.pinned);
        Ok(reader)
    }

    /// Heap bytes the open file keeps: index (its block and the entries' handles), prefix
    /// arrays, bloom filter, meta keys.
    fn resident_bytes(&self, index_block: usize) -> usize {
        let words = |n: usize| n * std::mem::size_of::<u64>();
        let meta = &self.meta;
        std::mem::size_of::<Self>()
            + index_block
            + self.index.capacity() * std::mem::size_of::<IndexEntry>()
            + words(self.row_prefixes.capacity() + self.prefix_samples.capacity())
            + self.bloom.as_ref().map_or(0, |(_, b)| b.size_bytes())
            + meta.first_key.len()
            + meta.last_key.len()
            + meta.mid_row.len()
            + self.span.as_ref().map_or(0, |(f, l)| f.len() + l.len())
            + self.shared_prefix.len()
    }

    fn read_block_bytes(&self, h: Handle) -> Result<Bytes> {
        let mut buf = vec![0u8; h.len as usize];
        self.file.read_exact_at(&mut buf, h.offset).map_err(|e| Error::io(&*self.path, e))?;
        unframe_shared(Bytes::from(buf), &self.path, h.offset)
    }

    /// Data block `i`, read from the file.
    fn read_block(&self, i: usize) -> Result<Arc<Block>> {
        let h = self.index[i].handle;
        let raw = self.read_block_bytes(h)?;
        Ok(Arc::new(Block::parse(raw, self.keys, &self.path, h.offset)?))
    }

    /// Data blocks from `i` on, read with one call: the adjacent blocks that start within
    /// `limit` bytes of block `i`'s start. Read into `spare` when given (the buffer of the
    /// stretch read before, which nothing else holds any more): a fresh buffer would be zeroed
    /// before the read overwrites it, a twentieth of a compaction's time.
    fn read_ahead(&self, i: usize, limit: u64, spare: Option<BytesMut>) -> Result<ReadAhead> {
        let first = self.index[i].handle;
        let mut end = i + 1;
        let mut until = first.end();
        while let Some(next) = self.index.get(end).map(|e| e.handle) {
            if next.offset != until || next.offset - first.offset >= limit {
                break;
            }
            until = next.end();
            end += 1;
        }
        let len = (until - first.offset) as usize;
        // A spare too small (a scan's stretches grow) would be copied as it grew: a new
        // buffer then, zeroed by the allocator.
        let mut buf = match spare {
            Some(spare) if spare.capacity() >= len => spare,
            _ => BytesMut::zeroed(len),
        };
        buf.resize(len, 0);
        self.file.read_exact_at(&mut buf, first.offset).map_err(|e| Error::io(&*self.path, e))?;
        Ok(ReadAhead { blocks: i..end, offset: first.offset, bytes: buf.freeze() })
    }

    /// Data block `i`, which `ahead` holds, its checksum checked. With `own`, the block gets
    /// bytes of its own, as a block entering the cache must: sharing the stretch's would keep
    /// all of it alive for as long as the block stays cached.
    fn block_read_ahead(&self, ahead: &ReadAhead, i: usize, own: bool) -> Result<Arc<Block>> {
        let h = self.index[i].handle;
        let start = (h.offset - ahead.offset) as usize;
        let framed = ahead.bytes.slice(start..start + h.len as usize);
        let raw = if own {
            Bytes::from(unframe(&framed, &self.path, h.offset)?)
        } else {
            unframe_shared(framed, &self.path, h.offset)?
        };
        Ok(Arc::new(Block::parse(raw, self.keys, &self.path, h.offset)?))
    }

    /// Data block `i` if the cache holds it (the lookup counts in the stats).
    fn cached(&self, i: usize) -> Option<Arc<Block>> {
        self.cache.get(self.id, self.index[i].handle.offset, self.in_memory)
    }

    /// Adds data block `i` to the cache.
    fn keep(&self, i: usize, block: &Arc<Block>) {
        self.cache.insert(self.id, self.index[i].handle.offset, block.clone(), self.in_memory);
    }

    /// Data block `i`, from the cache or the file; a block read from the file enters the cache
    /// if `fill_cache`. A read that does not fill the cache only peeks into it: its lookups
    /// neither count in the stats nor keep blocks alive.
    fn block(&self, i: usize, fill_cache: bool) -> Result<Arc<Block>> {
        let h = self.index[i].handle;
        let cached = if fill_cache { self.cached(i) } else { self.cache.peek(self.id, h.offset) };
        if let Some(b) = cached {
            return Ok(b);
        }
        let block = self.read_block(i)?;
        if fill_cache {
            self.keep(i, &block);
        }
        Ok(block)
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// The first and last rows in the file.
    fn row_span(&self) -> Option<(&[u8], &[u8])> {
        self.span.as_ref().map(|(f, l)| (&f[..], &l[..]))
    }

    /// True if every row of the file lies in `[start, end)` (empty end = unbounded): the file
    /// belongs to that region alone rather than being shared after a split.
    pub fn within(&self, start: &[u8], end: &[u8]) -> bool {
        self.row_span().is_none_or(|(first, last)| first >= start && (end.is_empty() || last < end))
    }

    /// The data blocks that may hold rows of `[start, end)` (empty end = unbounded), as (last
    /// row of the block, block bytes): where the file's data lies, for size estimates and split
    /// points. A block counts when its row span overlaps the range.
    pub fn blocks_overlapping(&self, start: &[u8], end: &[u8]) -> Vec<(Bytes, u64)> {
        let Some((mut prev_last, _)) = self.row_span().map(|(f, l)| (f.to_vec(), l)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in &self.index {
            let Some(k) = decode_key(&e.last_key) else {
                continue;
            };
            if k.row >= start && (end.is_empty() || prev_last.as_slice() < end) {
                out.push((Bytes::copy_from_slice(k.row), u64::from(e.handle.len)));
            }
            prev_last = k.row.to_vec();
        }
        out
    }

    /// False if the file certainly holds no cell of `row`.
    pub fn may_contain_row(&self, row: &[u8]) -> bool {
        let Some((first, last)) = self.row_span() else {
            return false;
        };
        if row < first || row > last {
            return false;
        }
        self.bloom.as_ref().is_none_or(|(_, b)| b.may_contain(row_hash(row)))
    }

    /// False if the file certainly holds no cell of `row` in any of `qualifiers` (nor a
    /// family-wide delete marker of the row).
    pub fn may_contain_columns(&self, row: &[u8], qualifiers: &[Bytes]) -> bool {
        if !self.may_contain_row(row) {
            return false;
        }
        match &self.bloom {
            Some((BloomType::RowCol, b)) => {
                b.may_contain(row_col_hash(row, b"")) || qualifiers.iter().any(|q| b.may_contain(row_col_hash(row, q)))
            }
            _ => true,
        }
    }

    /// An unpositioned cursor: it reads nothing until the first `seek`.
    pub fn cursor(self: &Arc<Self>) -> SstCursor {
        SstCursor {
            reader: self.clone(),
            block_idx: 0,
            iter: None,
            fill_cache: true,
            point: false,
            ahead: None,
            file_reads: 0,
        }
    }

    /// A cursor for a point read, which needs the cells of one row only: leaving a block whose
    /// index entry says its last row ends there, it stops rather than read the next block to
    /// find a cell of another row.
    pub fn point_cursor(self: &Arc<Self>) -> SstCursor {
        SstCursor { point: true, ..self.cursor() }
    }

    /// A cursor for compactions and other one-pass reads: it uses cached blocks but does not add
    /// the blocks it reads, so rewriting files neither evicts what readers use nor grows the heap
    /// by a second cache's worth of blocks.
    pub fn one_pass_cursor(self: &Arc<Self>) -> SstCursor {
        SstCursor { fill_cache: false, ..self.cursor() }
    }

    /// Index of the first block whose last key is `>= target`. Blocks whose row prefix is
    /// below the target's end before it and those above start after it, so only blocks sharing
    /// the target's prefix need their keys decoded.
    fn find_block(&self, target: &KeyView<'_>) -> usize {
        // A row outside the shared prefix sorts before or after every row of the file.
        let shared = &self.shared_prefix[..];
        let head = &target.row[..target.row.len().min(shared.len())];
        match head.cmp(shared) {
            std::cmp::Ordering::Less => return 0,
            std::cmp::Ordering::Greater => return self.index.len(),
            std::cmp::Ordering::Equal => {}
        }
        let p = row_prefix(&target.row[shared.len()..]);
        let prefixes = &self.row_prefixes;
        // The first entry `>= p` lies after the last sample below `p`, within one window.
        let s = self.prefix_samples.partition_point(|&x| x < p);
        let start = s.saturating_sub(1) * SAMPLE;
        let end = (s * SAMPLE + 1).min(prefixes.len());
        let lo = start + prefixes[start..end].partition_point(|&x| x < p);
        // Runs of equal prefixes are short: gallop to the end of this one.
        let mut step = 1;
        let mut hi = lo;
        while hi < prefixes.len() && prefixes[hi] == p {
            hi = (hi + step).min(prefixes.len());
            step *= 2;
        }
        let from = hi.saturating_sub(step / 2).max(lo);
        let hi = from + prefixes[from..hi].partition_point(|&x| x == p);
        lo + self.index[lo..hi]
            .partition_point(|e| decode_key(&e.last_key).is_some_and(|k| k.cmp_internal(target).is_lt()))
    }
}

/// Spacing of [`SstReader`]'s prefix samples.
const SAMPLE: usize = 64;

/// Bytes a one-pass cursor reads at once as it moves on from block to block (a compaction's
/// inputs, read front to back): one read of many blocks instead of one for each, as RocksDB's
/// compaction readahead does. With 4 KiB blocks a read call costs about as much again as
/// copying the block, so the call per block was half of what reading an input cost.
const READ_AHEAD: u64 = 512 * 1024;

/// A scan's read-ahead, as RocksDB's automatic readahead for iterators: once a scan moving on
/// from block to block has read [`SCAN_AHEAD_AFTER`] blocks from a file, it reads adjacent blocks
/// with one call, [`SCAN_AHEAD_FIRST`] bytes at first and twice as many each time after, up to
/// [`SCAN_AHEAD_MAX`]. A short scan reads little it does not use; a long one makes a call per
/// 64 blocks rather than one per block.
const SCAN_AHEAD_AFTER: u32 = 2;
const SCAN_AHEAD_FIRST: u64 = 8 * 1024;
const SCAN_AHEAD_MAX: u64 = 256 * 1024;

/// How many bytes a scan reads at once for its `reads`th read from the file in a row (counted
/// from 1): one block up to [`SCAN_AHEAD_AFTER`], then a stretch that doubles.
fn scan_ahead_bytes(reads: u32) -> Option<u64> {
    let doublings = reads.checked_sub(SCAN_AHEAD_AFTER + 1)?;
    // Sixteen doublings pass the maximum by far; a larger shift would push the bits out.
    Some((SCAN_AHEAD_FIRST << doublings.min(16)).min(SCAN_AHEAD_MAX))
}

/// Adjacent data blocks read with one call, for a cursor passing through them.
struct ReadAhead {
    /// The blocks' numbers.
    blocks: std::ops::Range<usize>,
    /// Where in the file the first begins.
    offset: u64,
    bytes: Bytes,
}

/// A row's first 8 bytes as a big-endian number, zero-padded: `row_prefix(a) < row_prefix(b)`
/// implies `a < b`, and `a < b` implies `row_prefix(a) <= row_prefix(b)`.
fn row_prefix(row: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = row.len().min(8);
    b[..n].copy_from_slice(&row[..n]);
    u64::from_be_bytes(b)
}

/// Path of the SSTable with id `id` inside a family directory.
pub(crate) fn sst_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:016}.sst"))
}

/// Cursor over one SSTable.
pub(crate) struct SstCursor {
    reader: Arc<SstReader>,
    block_idx: usize,
    iter: Option<BlockIter>,
    fill_cache: bool,
    /// Reads one row (see [`SstReader::point_cursor`]).
    point: bool,
    /// The blocks read ahead: by a one-pass cursor (see [`READ_AHEAD`]) or a scan (see
    /// [`SCAN_AHEAD_AFTER`]).
    ahead: Option<ReadAhead>,
    /// A scan's reads from the file in a row while moving on (see [`SCAN_AHEAD_AFTER`]).
    file_reads: u32,
}

impl SstCursor {
    /// Opens block `i` (or goes past the end) without positioning inside it. `onward`: the
    /// cursor moves on from the block before, so a one-pass cursor takes the block from the
    /// stretch it read ahead (reading the next stretch once it has passed that one), and a
    /// scan may read ahead (see [`SCAN_AHEAD_AFTER`]); a seek reads one block (a one-pass
    /// cursor may seek only to look at one key).
    fn open_block(&mut self, i: usize, onward: bool) -> Result<()> {
        let before = std::mem::replace(&mut self.block_idx, i);
        self.iter = None;
        if i >= self.reader.index.len() {
            return Ok(());
        }
        let block = if !self.fill_cache && onward {
            self.block_in_stretch(i, READ_AHEAD, false)?
        } else if self.fill_cache && !self.point {
            // A seek to the block after the current one, or to one read ahead, continues the
            // scan's run of reads; any other seek starts a new one.
            let continues = onward || i == before + 1 || self.holds_ahead(i);
            self.scan_block(i, continues)?
        } else {
            self.reader.block(i, self.fill_cache)?
        };
        self.iter = Some(BlockIter::new(block));
        Ok(())
    }

    /// Block `i` for a scan: from the cache, else from the stretch read ahead, else from the
    /// file, as one block or as a stretch from it (see [`scan_ahead_bytes`]). A block read
    /// from the file enters the cache.
    fn scan_block(&mut self, i: usize, continues: bool) -> Result<Arc<Block>> {
        if !continues {
            self.file_reads = 0;
            self.ahead = None;
        }
        if let Some(block) = self.reader.cached(i) {
            return Ok(block);
        }
        if !self.holds_ahead(i) {
            self.file_reads = self.file_reads.saturating_add(1);
        }
        // A stretch is held only after enough reads in a row to have read it.
        let block = match scan_ahead_bytes(self.file_reads) {
            Some(limit) => self.block_in_stretch(i, limit, true)?,
            None => self.reader.read_block(i)?,
        };
        self.reader.keep(i, &block);
        Ok(block)
    }

    /// Block `i` from the stretch read ahead, reading a new stretch of up to `limit` bytes
    /// from it on if the one held does not hold it (into the buffer of the stretch passed,
    /// when nothing holds that any more); `own` as for [`SstReader::block_read_ahead`].
    fn block_in_stretch(&mut self, i: usize, limit: u64, own: bool) -> Result<Arc<Block>> {
        let ahead = match self.ahead.take() {
            Some(ahead) if ahead.blocks.contains(&i) => ahead,
            // The blocks of the stretch passed are dropped by now (or own their bytes), so its
            // buffer is usually free to take the next one.
            passed => self.reader.read_ahead(i, limit, passed.and_then(|a| a.bytes.try_into_mut().ok()))?,
        };
        let block = self.reader.block_read_ahead(&ahead, i, own);
        self.ahead = Some(ahead);
        block
    }

    /// True if the stretch read ahead holds block `i`.
    fn holds_ahead(&self, i: usize) -> bool {
        self.ahead.as_ref().is_some_and(|a| a.blocks.contains(&i))
    }

    /// Moves to the first entry of block `i` (or past the end); `onward` as for
    /// [`SstCursor::open_block`].
    fn load(&mut self, i: usize, onward: bool) -> Result<()> {
        self.open_block(i, onward)?;
        if let Some(it) = self.iter.as_mut() {
            it.seek_to_first()?;
        }
        Ok(())
    }
}

impl CellCursor for SstCursor {
    #[inline]
    fn key(&self) -> Option<KeyView<'_>> {
        self.iter.as_ref().filter(|it| it.valid()).map(BlockIter::key_view)
    }

    #[inline]
    fn value(&self) -> &[u8] {
        self.iter.as_ref().map_or(&[], BlockIter::value)
    }

    #[inline]
    fn ttl_ms(&self) -> Option<u64> {
        self.iter.as_ref().and_then(BlockIter::ttl_ms)
    }

    fn next(&mut self) -> Result<()> {
        let Some(it) = self.iter.as_mut() else {
            return Ok(());
        };
        it.advance()?;
        if !it.valid() {
            // The cursor was on a cell of the row read (or of a later one): when that row
            // ends with the block, what follows is of no use to a point read.
            if self.point && self.reader.index[self.block_idx].row_ends {
                self.iter = None;
                return Ok(());
            }
            self.load(self.block_idx + 1, true)?;
        }
        Ok(())
    }

    #[inline]
    fn same_row(&self) -> bool {
        self.iter.as_ref().is_some_and(|it| it.valid() && it.same_row())
    }

    fn seek(&mut self, target: &KeyView<'_>) -> Result<()> {
        let i = self.reader.find_block(target);
        self.open_block(i, false)?;
        if let Some(it) = self.iter.as_mut() {
            it.seek(target)?;
            if !it.valid() {
                self.load(i + 1, false)?;
            }
        }
        Ok(())
    }

    fn prev_row(&mut self, bound: Option<&[u8]>) -> Result<Option<Bytes>> {
        let index = &self.reader.index;
        let row_of = |k: &Bytes| decode_key(k).map(|k| Bytes::copy_from_slice(k.row));
        let Some(bound) = bound else {
            return Ok(index.last().and_then(|e| row_of(&e.last_key)));
        };
        let target = KeyView::first_of_row(bound);
        let i = self.reader.find_block(&target);
        if i < index.len() {
            let block = self.reader.block(i, self.fill_cache)?;
            let mut it = BlockIter::new(block);
            it.seek_to_first()?;
            let mut best: Option<Bytes> = None;
            while it.valid() {
                match decode_key(it.key_bytes()) {
                    Some(k) if k.cmp_internal(&target).is_lt() => {
                        if best.as_deref() != Some(k.row) {
                            best = Some(Bytes::copy_from_slice(k.row));
                        }
                    }
                    _ => break,
                }
                it.advance()?;
            }
            if best.is_some() {
                return Ok(best);
            }
        }
        Ok(if i == 0 { None } else { row_of(&index[i - 1].last_key) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::CellType;
    use crate::descriptor::FamilyDescriptor;
    use crate::sst::format::FORMAT_VERSION;
    use crate::sst::writer::SstWriter;

    /// Writes `rows` (sorted, one cell each) in 1 KiB blocks and checks that a seek to each
    /// row, just past each row and to every probe lands on the first row at or after it.
    fn assert_seeks_land(rows: &[Vec<u8>], probes: &[&[u8]]) -> Arc<SstReader> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.sst");
        let family = FamilyDescriptor::new("f").block_size(1024);
        let mut w = SstWriter::create(&crate::fs::OsFs, &path, &family).unwrap();
        for (i, row) in rows.iter().enumerate() {
            let key = KeyView { row, qualifier: b"q", ts: 1, kind: CellType::Put, seq: i as u64 + 1 };
            w.add(&key, &[7u8; 100], None).unwrap();
        }
        w.finish().unwrap();
        let reader =
            Arc::new(SstReader::open(&crate::fs::OsFs, &path, 1, Arc::new(BlockCache::new(1 << 20)), false).unwrap());
        assert!(reader.index.len() > 4 * SAMPLE, "{} blocks", reader.index.len());
        let mut cur = reader.cursor();
        let mut targets: Vec<Vec<u8>> = probes.iter().map(|p| p.to_vec()).collect();
        for row in rows {
            targets.push(row.clone());
            // Just past the row: the next row, or the end.
            targets.push([row.as_slice(), &[0u8]].concat());
        }
        for target in &targets {
            cur.seek(&KeyView::first_of_row(target)).unwrap();
            let expected = rows.iter().find(|r| r.as_slice() >= target.as_slice());
            assert_eq!(
                cur.key().map(|k| k.row.to_vec()).as_ref(),
                expected,
                "seek to {:?}",
                String::from_utf8_lossy(target)
            );
        }
        reader
    }

    /// Writes `rows` of (row, cells of 100-byte values) in 4 KiB blocks; returns each block's
    /// rows (first, last) and size in bytes.
    fn block_rows(rows: &[(String, usize)]) -> Vec<(Vec<u8>, Vec<u8>, usize)> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.sst");
        let family = FamilyDescriptor::new("f").block_size(4096);
        let mut w = SstWriter::create(&crate::fs::OsFs, &path, &family).unwrap();
        let mut seq = 0;
        for (row, cells) in rows {
            for c in 0..*cells {
                seq += 1;
                let qualifier = format!("q{c:05}");
                let key =
                    KeyView { row: row.as_bytes(), qualifier: qualifier.as_bytes(), ts: 1, kind: CellType::Put, seq };
                w.add(&key, &[7u8; 100], None).unwrap();
            }
        }
        w.finish().unwrap();
        let reader = SstReader::open(&crate::fs::OsFs, &path, 1, Arc::new(BlockCache::new(1 << 20)), false).unwrap();
        (0..reader.index.len())
            .map(|i| {
                let block = reader.block(i, false).unwrap();
                let mut it = BlockIter::new(block);
                it.seek_to_first().unwrap();
                let first = it.key_view().row.to_vec();
                let last = decode_key(&reader.index[i].last_key).unwrap().row.to_vec();
                (first, last, reader.index[i].handle.len as usize)
            })
            .collect()
    }

    /// Rows under half a block never straddle two blocks (a Get reads one); a wide row is cut
    /// between its cells, and no block grows past one and a half times the block size.
    #[test]
    fn blocks_end_between_small_rows_and_inside_wide_ones() {
        let mut rows: Vec<(String, usize)> = (0..300).map(|n| (format!("row{n:04}"), 10)).collect();
        rows.insert(150, ("row0149~wide".into(), 200));
        let blocks = block_rows(&rows);
        assert!(blocks.len() > 80, "{} blocks", blocks.len());
        let mut wide_blocks = 0;
        for pair in blocks.windows(2) {
            let (before, after) = (&pair[0], &pair[1]);
            if before.1 == after.0 {
                assert_eq!(before.1, b"row0149~wide", "a small row straddles two blocks");
                wide_blocks += 1;
            }
        }
        assert!(wide_blocks >= 4, "the 22 KiB row spans several blocks");
        for (first, _, size) in &blocks {
            assert!(*size < 4096 * 3 / 2 + 200, "a block of {size} bytes starting at {first:?}");
        }
    }

    /// Seeks land on the right row across hundreds of small blocks, with long runs of rows
    /// sharing their first 8 bytes and rows shorter than 8 bytes.
    #[test]
    fn seeks_find_every_row_through_the_prefix_index() {
        let mut rows: Vec<Vec<u8>> = vec![b"a".to_vec(), b"ab".to_vec(), b"user".to_vec(), b"user\0".to_vec()];
        rows.extend((0..3000).map(|n| format!("user0000{n:06}").into_bytes()));
        rows.extend((0..500).map(|n| format!("user{n:04}x").into_bytes()));
        rows.extend((0..300).map(|n| format!("z{n:03}").into_bytes()));
        rows.sort();
        rows.dedup();
        let reader = assert_seeks_land(&rows, &[b"", b"0", b"user0", b"zz"]);
        assert!(reader.shared_prefix.is_empty());
    }

    /// When every row starts with the same bytes, block search reads the bytes after them; rows
    /// that do not start with them sort before or after the whole file.
    #[test]
    fn seeks_look_past_the_prefix_every_row_shares() {
        let mut rows: Vec<Vec<u8>> = vec![b"user:7".to_vec()];
        rows.extend((0..4000u64).map(|n| format!("user:7{:012}", n * 7919 % 100_003).into_bytes()));
        rows.extend((0..200).map(|n| format!("user:7{n:03}").into_bytes()));
        rows.sort();
        rows.dedup();
        let reader = assert_seeks_land(
            &rows,
            &[b"", b"user", b"user:", b"user:6zzz", b"user:7", b"user:70", b"user:8", b"user;", b"v"],
        );
        assert_eq!(&*reader.shared_prefix, b"user:7");
    }

    /// A file of the current format and one of version 2 (every key stored with its tail)
    /// hold the same cells; the current one is smaller, since the cells of one put share
    /// their tail, and both read back cell for cell and find every row by seek.
    #[test]
    fn files_of_the_current_and_older_versions_read_alike() {
        let dir = tempfile::tempdir().unwrap();
        let family = FamilyDescriptor::new("f").block_size(4096);
        // Rows of ten columns, one put each; every fifth row also has a newer value of one
        // column from a later put, and a delete marker.
        // Row, qualifier, timestamp, type, sequence.
        type Cell = (Vec<u8>, Vec<u8>, u64, CellType, u64);
        let mut cells: Vec<Cell> = Vec::new();
        for n in 0..2000u64 {
            let row = format!("user{n:08}").into_bytes();
            for q in 0..10u8 {
                let qualifier = format!("field{q}").into_bytes();
                if n % 5 == 0 && q == 3 {
                    cells.push((row.clone(), qualifier.clone(), 9_000 + n, CellType::Put, 50_000 + n));
                    cells.push((row.clone(), qualifier.clone(), 8_000 + n, CellType::Delete, 40_000 + n));
                }
                cells.push((row.clone(), qualifier, 1_000 + n, CellType::Put, 1 + n));
            }
        }
        let mut sizes = Vec::new();
        let mut readers = Vec::new();
        for (id, version) in [(1u64, 2u32), (2, FORMAT_VERSION)] {
            let path = dir.path().join(format!("{id}.sst"));
            let mut w = SstWriter::create(&crate::fs::OsFs, &path, &family).unwrap().in_version(version);
            for (i, (row, qualifier, ts, kind, seq)) in cells.iter().enumerate() {
                let key = KeyView { row, qualifier, ts: *ts, kind: *kind, seq: *seq };
                w.add(&key, format!("value {i:>90}").as_bytes(), None).unwrap();
            }
            let (_, size) = w.finish().unwrap();
            sizes.push(size);
            let cache = Arc::new(BlockCache::new(1 << 20));
            readers.push(Arc::new(SstReader::open(&crate::fs::OsFs, &path, id, cache, false).unwrap()));
        }
        assert!(sizes[1] * 100 < sizes[0] * 90, "sizes by version {sizes:?}");
        for reader in &readers {
            let mut cur = reader.cursor();
            cur.seek(&KeyView::first_of_row(b"")).unwrap();
            for (i, (row, qualifier, ts, kind, seq)) in cells.iter().enumerate() {
                let key = cur.key().unwrap_or_else(|| panic!("cell {i} missing"));
                assert_eq!(key, KeyView { row, qualifier, ts: *ts, kind: *kind, seq: *seq }, "cell {i}");
                assert_eq!(cur.value(), format!("value {i:>90}").as_bytes());
                cur.next().unwrap();
            }
            assert!(cur.key().is_none());
            for n in (0..2000u64).step_by(7) {
                let row = format!("user{n:08}").into_bytes();
                cur.seek(&KeyView::first_of_row(&row)).unwrap();
                assert_eq!(cur.key().map(|k| (k.row.to_vec(), k.qualifier.to_vec())), Some((row, b"field0".to_vec())));
            }
        }
    }

    /// A file read through it counts its read calls.
    struct CountedReads {
        file: Arc<dyn ReadFile>,
        calls: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl ReadFile for CountedReads {
        fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.file.read_exact_at(buf, offset)
        }
        fn size(&self) -> std::io::Result<u64> {
            self.file.size()
        }
    }

    /// Opens `path` with its data-block reads counted.
    fn open_counted(path: &Path, cache_bytes: usize) -> (Arc<SstReader>, Arc<std::sync::atomic::AtomicUsize>) {
        let cache = Arc::new(BlockCache::new(cache_bytes));
        let mut reader = SstReader::open(&crate::fs::OsFs, path, 1, cache, false).unwrap();
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        reader.file = Arc::new(CountedReads { file: reader.file.clone(), calls: calls.clone() });
        (Arc::new(reader), calls)
    }

    /// Every cell from a seek to the start on, as (row, value).
    fn read_all(mut cur: SstCursor) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        cur.seek(&KeyView::first_of_row(b""))?;
        let mut cells = Vec::new();
        while let Some(k) = cur.key() {
            cells.push((k.row.to_vec(), cur.value().to_vec()));
            cur.next()?;
        }
        Ok(cells)
    }

    /// A file of 24 000 cells of about 100 bytes in 4 KiB blocks (600 blocks and more).
    fn four_kib_blocks(dir: &Path) -> PathBuf {
        let path = dir.join("1.sst");
        let family = FamilyDescriptor::new("f").block_size(4096);
        let mut w = SstWriter::create(&crate::fs::OsFs, &path, &family).unwrap();
        for n in 0..24_000u64 {
            let row = format!("user{n:08}");
            let key = KeyView { row: row.as_bytes(), qualifier: b"q", ts: 1, kind: CellType::Put, seq: n + 1 };
            w.add(&key, format!("value {n:>90}").as_bytes(), None).unwrap();
        }
        w.finish().unwrap();
        path
    }

    /// Flips a bit in the middle of block `i` of the file at `path`; returns the block's offset.
    fn damage_block(path: &Path, reader: &SstReader, i: usize) -> u64 {
        let victim = reader.index[i].handle;
        let mut bytes = std::fs::read(path).unwrap();
        bytes[(victim.offset + u64::from(victim.len) / 2) as usize] ^= 0x40;
        std::fs::write(path, &bytes).unwrap();
        victim.offset
    }

    /// Fails unless `read` failed on the damaged block at `offset`.
    fn assert_fails_at(read: Result<Vec<(Vec<u8>, Vec<u8>)>>, offset: u64) {
        match read {
            Err(Error::Corrupt { offset: at, .. }) => assert_eq!(at, offset),
            other => panic!("expected the damaged block to fail the read, got {:?}", other.map(|c| c.len())),
        }
    }

    /// The stretch a long scan reads grows to its maximum and stays there, however long the scan.
    #[test]
    fn a_scans_stretch_doubles_to_its_maximum_and_stays_there() {
        assert_eq!(scan_ahead_bytes(SCAN_AHEAD_AFTER), None);
        assert_eq!(scan_ahead_bytes(SCAN_AHEAD_AFTER + 1), Some(SCAN_AHEAD_FIRST));
        assert_eq!(scan_ahead_bytes(SCAN_AHEAD_AFTER + 2), Some(2 * SCAN_AHEAD_FIRST));
        for reads in SCAN_AHEAD_AFTER + 6..10_000 {
            assert_eq!(scan_ahead_bytes(reads), Some(SCAN_AHEAD_MAX), "read {reads}");
        }
        assert_eq!(scan_ahead_bytes(u32::MAX), Some(SCAN_AHEAD_MAX));
    }

    /// A compaction's pass over a file of 4 KiB blocks reads them a stretch at a time, and
    /// still checks each block: it returns what a cached read returns, and a damaged block
    /// in the middle of a stretch fails the pass with the block's offset.
    #[test]
    fn a_one_pass_read_takes_blocks_a_stretch_at_a_time_and_checks_each() {
        let dir = tempfile::tempdir().unwrap();
        let path = four_kib_blocks(dir.path());
        let (reader, calls) = open_counted(&path, 1 << 20);
        let blocks = reader.index.len();
        assert!(blocks > 3 * (READ_AHEAD / 4096) as usize, "{blocks} blocks span several stretches");
        assert!(reader.index[blocks / 2].handle.offset > READ_AHEAD, "the damaged block lies past the first stretch");
        let cached = read_all(reader.cursor()).unwrap();
        assert_eq!(cached.len(), 24_000);
        calls.store(0, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(read_all(reader.one_pass_cursor()).unwrap(), cached);
        let stretches = calls.load(std::sync::atomic::Ordering::Relaxed);
        // The seek reads the first block (here from the cache); the rest come in stretches.
        let expected = (reader.index.last().unwrap().handle.offset as usize).div_ceil(READ_AHEAD as usize);
        assert!(stretches <= expected + 1, "{stretches} reads for {blocks} blocks, about {expected} expected");

        let offset = damage_block(&path, &reader, blocks / 2);
        let (damaged, _) = open_counted(&path, 1 << 20);
        assert_fails_at(read_all(damaged.one_pass_cursor()), offset);
    }

    /// A scan reads its first two blocks from a file one at a time, then stretches that double
    /// up to [`SCAN_AHEAD_MAX`]; every block it reads enters the cache with bytes of its own,
    /// a seek elsewhere starts over, and a damaged block inside a stretch fails the scan.
    #[test]
    fn a_scan_reads_ahead_once_it_has_read_two_blocks_in_a_row() {
        use std::sync::atomic::Ordering::Relaxed;
        let dir = tempfile::tempdir().unwrap();
        let path = four_kib_blocks(dir.path());
        let (reader, calls) = open_counted(&path, 64 << 20);
        let blocks = reader.index.len();
        let expected = read_all(reader.one_pass_cursor()).unwrap();
        calls.store(0, Relaxed);

        // The cell under the cursor, then on to the next.
        let step = |cur: &mut SstCursor, cells: &mut Vec<(Vec<u8>, Vec<u8>)>| {
            let k = cur.key().expect("a cell");
            cells.push((k.row.to_vec(), cur.value().to_vec()));
            cur.next().unwrap();
        };
        let mut scanned = Vec::new();
        let mut cur = reader.cursor();
        cur.seek(&KeyView::first_of_row(b"")).unwrap();
        // A short scan reads only the blocks it passes through, one call each.
        while cur.block_idx < 1 {
            step(&mut cur, &mut scanned);
        }
        assert_eq!(calls.load(Relaxed), 2);
        assert!(cur.ahead.is_none());
        // The third read takes up to 8 KiB, the next twice as much, and so on.
        while cur.block_idx < 2 {
            step(&mut cur, &mut scanned);
        }
        assert_eq!(calls.load(Relaxed), 3);
        let stretch = cur.ahead.as_ref().expect("a stretch read ahead");
        assert_eq!(stretch.blocks.start, 2);
        assert_eq!(stretch.blocks.len(), 2, "two 4 KiB blocks start within 8 KiB");
        assert!(reader.index[stretch.blocks.end - 1].handle.offset - stretch.offset < SCAN_AHEAD_FIRST);
        // The block entered the cache with bytes of its own, not a slice of the stretch.
        let mut it = BlockIter::new(reader.cached(2).expect("the block read ahead is cached"));
        it.seek_to_first().unwrap();
        assert!(!stretch.bytes.as_ptr_range().contains(&it.value().as_ptr()));
        while cur.key().is_some() {
            step(&mut cur, &mut scanned);
        }
        assert_eq!(scanned, expected, "the scan returns what a one-pass read does");
        let reads = calls.swap(0, Relaxed);
        let file_bytes = reader.index.last().unwrap().handle.end();
        let at_most = 2 + 6 + file_bytes.div_ceil(SCAN_AHEAD_MAX) as usize;
        assert!(reads <= at_most, "{reads} reads for {blocks} blocks, at most {at_most} expected");
        // Every block entered the cache: a second scan reads nothing from the file.
        assert_eq!(read_all(reader.cursor()).unwrap(), expected);
        assert_eq!(calls.load(Relaxed), 0);

        // A seek elsewhere starts over with one block at a time.
        let (fresh, calls) = open_counted(&path, 64 << 20);
        let mut cur = fresh.cursor();
        cur.seek(&KeyView::first_of_row(b"user00012000")).unwrap();
        let start = cur.block_idx;
        while cur.block_idx < start + 1 {
            cur.next().unwrap();
        }
        assert_eq!(calls.load(Relaxed), 2);
        assert!(cur.ahead.is_none());

        let offset = damage_block(&path, &reader, blocks / 2);
        let (damaged, _) = open_counted(&path, 64 << 20);
        assert_fails_at(read_all(damaged.cursor()), offset);
    }
}
