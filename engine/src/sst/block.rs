//! Data blocks: cells with prefix-compressed keys and restart points, plus the on-disk framing
//! (codec byte, optional compression, CRC32C) every block uses.
//!
//! Entry: `prefix varint | unshared varint | value_len varint | ttl varint (0 = none, else
//! ttl+1) | key bytes | value`. Every [`RESTART_INTERVAL`]th entry stores its whole key; the
//! block ends with the restart offsets (u32 LE each) and their count (u32 LE), so a seek
//! binary-searches restarts and then walks at most a few entries.
//!
//! What `prefix` holds depends on the file's format version ([`EntryKeys`]). Before version 3
//! it is the length of the prefix the key shares with the previous entry's, and the key bytes
//! are the rest of the key. From version 3 it is that length shifted left by one, and its low
//! bit says the entry's key tail (timestamp, type, sequence; [`KEY_TAIL`] bytes) equals the
//! previous entry's and is left out: the key bytes then stop before the tail. The cells of one
//! put share their tail, so a ten-column row stores it once rather than ten times, as HBase's
//! FAST_DIFF encoding does with timestamps and types. Restart entries, a block's first among
//! them, always store the whole key.

use std::cmp::Ordering;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use crate::cell::{CellType, KeyView};
use crate::descriptor::Compression;
use crate::sst::format::{decode_key, get_varint, put_varint, shared_prefix_len, KEY_TAIL};
use crate::{Error, Result};

/// Entries between full keys.
pub(crate) const RESTART_INTERVAL: usize = 16;

/// Largest uncompressed block the reader accepts; guards allocations against corrupt lengths.
const MAX_BLOCK_LEN: usize = 64 * 1024 * 1024;

/// How a block's entries store their keys, which the file's format version decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryKeys {
    /// Every entry stores its key's tail (format versions 1 and 2).
    WholeTails,
    /// An entry whose key tail equals the previous entry's leaves it out (version 3 on).
    SharedTails,
}

impl EntryKeys {
    /// The layout files of format `version` use.
    pub fn of_version(version: u32) -> EntryKeys {
        if version >= 3 {
            EntryKeys::SharedTails
        } else {
            EntryKeys::WholeTails
        }
    }
}

/// Builds one data block.
pub(crate) struct BlockBuilder {
    keys: EntryKeys,
    buf: Vec<u8>,
    restarts: Vec<u32>,
    last_key: Vec<u8>,
    count: usize,
}

impl BlockBuilder {
    pub fn new(keys: EntryKeys) -> Self {
        BlockBuilder { keys, buf: Vec::new(), restarts: Vec::new(), last_key: Vec::new(), count: 0 }
    }

    /// Appends an entry; `key` is an encoded key greater than the previous one.
    pub fn add(&mut self, key: &[u8], value: &[u8], ttl_ms: Option<u64>) {
        let restart = self.count.is_multiple_of(RESTART_INTERVAL);
        if restart {
            self.restarts.push(self.buf.len() as u32);
        }
        let common = if restart { 0 } else { shared_prefix_len(key, &self.last_key) };
        // The key bytes stored are `key[shared..end]`.
        let (prefix, shared, end) = match self.keys {
            EntryKeys::WholeTails => (common, common, key.len()),
            EntryKeys::SharedTails => {
                let head = key.len().saturating_sub(KEY_TAIL);
                let last_head = self.last_key.len().saturating_sub(KEY_TAIL);
                let same_tail = !restart
                    && key.len() >= KEY_TAIL
                    && self.last_key.len() >= KEY_TAIL
                    && key[head..] == self.last_key[last_head..];
                if same_tail {
                    let shared = common.min(head);
                    ((shared << 1) | 1, shared, head)
                } else {
                    (common << 1, common, key.len())
                }
            }
        };
        put_varint(&mut self.buf, prefix as u64);
        put_varint(&mut self.buf, (end - shared) as u64);
        put_varint(&mut self.buf, value.len() as u64);
        put_varint(&mut self.buf, ttl_ms.map_or(0, |t| t.saturating_add(1)));
        self.buf.extend_from_slice(&key[shared..end]);
        self.buf.extend_from_slice(value);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.count += 1;
    }

    /// Uncompressed size so far.
    pub fn size(&self) -> usize {
        self.buf.len() + 4 * self.restarts.len() + 4
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The last key added.
    pub fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    /// Hands back the buffer [`BlockBuilder::finish`] returned, so the next block is built in
    /// it without growing a new one from empty.
    pub fn reuse(&mut self, mut buf: Vec<u8>) {
        if self.buf.is_empty() {
            buf.clear();
            self.buf = buf;
        }
    }

    /// Finishes the block, returning its uncompressed bytes, and resets the builder.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        for r in &self.restarts {
            out.extend_from_slice(&r.to_le_bytes());
        }
        out.extend_from_slice(&(self.restarts.len() as u32).to_le_bytes());
        self.restarts.clear();
        self.last_key.clear();
        self.count = 0;
        out
    }
}

/// The CRC32C that ends an uncompressed block's frame: of its codec byte and its bytes. With
/// it, an uncompressed block is written as codec byte, bytes, CRC, without being copied into
/// a frame first; [`frame`] gives the same bytes.
pub(crate) fn uncompressed_frame_crc(raw: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&[0]), raw)
}

/// Frames a block for disk: codec byte, payload (compressed if asked), CRC32C of both.
pub(crate) fn frame(raw: &[u8], compression: Compression) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() + 5);
    match compression {
        Compression::None => {
            out.push(0);
            out.extend_from_slice(raw);
        }
        Compression::Lz4 => {
            out.push(1);
            out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
            out.extend_from_slice(&lz4_flex::block::compress(raw));
        }
        Compression::Zstd => {
            out.push(2);
            out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
            // Compressing an in-memory slice at a valid level cannot fail; fall back to storing
            // the block uncompressed if the library ever reports otherwise.
            match zstd::bulk::compress(raw, 3) {
                Ok(c) => out.extend_from_slice(&c),
                Err(_) => return frame(raw, Compression::None),
            }
        }
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Checks a framed block's checksum and returns its uncompressed payload; an uncompressed
/// block keeps the buffer it was read into (no copy), which may hold other blocks too.
pub(crate) fn unframe_shared(framed: Bytes, path: &Path, offset: u64) -> Result<Bytes> {
    if framed.len() >= 5 && framed[0] == 0 {
        check_frame(&framed, path, offset)?;
        let end = framed.len() - 4;
        return Ok(framed.slice(1..end));
    }
    unframe(&framed, path, offset).map(Bytes::from)
}

/// Fails unless the framed block's stored checksum matches its body.
fn check_frame(framed: &[u8], path: &Path, offset: u64) -> Result<()> {
    let (body, crc) = framed.split_at(framed.len() - 4);
    let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    if crc32c::crc32c(body) != stored {
        return Err(Error::corrupt(path, offset, "block checksum mismatch"));
    }
    Ok(())
}

/// Checks a framed block's checksum and returns its uncompressed payload.
pub(crate) fn unframe(framed: &[u8], path: &Path, offset: u64) -> Result<Vec<u8>> {
    let corrupt = |reason: &str| Error::corrupt(path, offset, reason);
    if framed.len() < 5 {
        return Err(corrupt("block shorter than its frame"));
    }
    check_frame(framed, path, offset)?;
    let body = &framed[..framed.len() - 4];
    let payload = &body[1..];
    let sized = |p: &[u8]| -> Result<(usize, Vec<u8>)> {
        if p.len() < 4 {
            return Err(corrupt("compressed block without length"));
        }
        let n = u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize;
        if n > MAX_BLOCK_LEN {
            return Err(corrupt("block length exceeds limit"));
        }
        Ok((n, p[4..].to_vec()))
    };
    match body[0] {
        0 => Ok(payload.to_vec()),
        1 => {
            let (n, data) = sized(payload)?;
            lz4_flex::block::decompress(&data, n).map_err(|e| corrupt(&format!("lz4: {e}")))
        }
        2 => {
            let (n, data) = sized(payload)?;
            let out = zstd::bulk::decompress(&data, n).map_err(|e| corrupt(&format!("zstd: {e}")))?;
            if out.len() != n {
                return Err(corrupt("zstd block length mismatch"));
            }
            Ok(out)
        }
        c => Err(corrupt(&format!("unknown block codec {c}"))),
    }
}

/// A decoded, immutable data block, with where it was read from (for the errors its entries
/// may raise: a cursor moving onto a cached block then takes no other handle).
#[derive(Debug)]
pub(crate) struct Block {
    data: Bytes,
    keys: EntryKeys,
    restarts_at: usize,
    num_restarts: usize,
    path: Arc<Path>,
    offset: u64,
}

impl Block {
    /// Parses a block's trailer; entries are validated as they are read.
    pub fn parse(raw: Bytes, keys: EntryKeys, path: &Arc<Path>, offset: u64) -> Result<Block> {
        let corrupt = |reason: &str| Error::corrupt(&**path, offset, reason);
        if raw.len() < 4 {
            return Err(corrupt("data block too short"));
        }
        let n = u32::from_le_bytes(raw[raw.len() - 4..].try_into().map_err(|_| corrupt("trailer"))?) as usize;
        let restarts_at = raw
            .len()
            .checked_sub(4 + n.checked_mul(4).ok_or_else(|| corrupt("restart count"))?)
            .ok_or_else(|| corrupt("restart array exceeds block"))?;
        if n == 0 {
            return Err(corrupt("data block without restarts"));
        }
        Ok(Block { data: raw, keys, restarts_at, num_restarts: n, path: path.clone(), offset })
    }

    /// Bytes the block occupies in memory: its data and the shared `Block` it lives in, each
    /// with the allocator's per-allocation header.
    pub fn charge(&self) -> usize {
        const ALLOC_HEADER: usize = 16;
        // The `Arc` around the block adds two counters.
        let shell = std::mem::size_of::<Block>() + 2 * std::mem::size_of::<usize>();
        self.data.len() + shell + 2 * ALLOC_HEADER
    }

    fn restart(&self, i: usize) -> usize {
        let at = self.restarts_at + 4 * i;
        u32::from_le_bytes([self.data[at], self.data[at + 1], self.data[at + 2], self.data[at + 3]]) as usize
    }
}

/// Position inside a block.
pub(crate) struct BlockIter {
    block: Arc<Block>,
    /// Offset of the next entry to decode.
    next_at: usize,
    key: Vec<u8>,
    /// The current key's parts, decoded once per entry: cursors ask for the key several times
    /// per cell.
    row_end: usize,
    ts: u64,
    kind: CellType,
    seq: u64,
    value_at: usize,
    value_len: usize,
    ttl_ms: Option<u64>,
    valid: bool,
    /// The current entry shares its whole row with the entry before it, as its key's shared
    /// prefix shows: a merge can then skip comparing the row.
    same_row: bool,
}

impl BlockIter {
    pub fn new(block: Arc<Block>) -> Self {
        BlockIter {
            block,
            next_at: 0,
            key: Vec::new(),
            row_end: 0,
            ts: 0,
            kind: CellType::Put,
            seq: 0,
            value_at: 0,
            value_len: 0,
            ttl_ms: None,
            valid: false,
            same_row: false,
        }
    }

    #[inline]
    pub fn valid(&self) -> bool {
        self.valid
    }

    pub fn key_bytes(&self) -> &[u8] {
        &self.key
    }

    /// The current key (meaningful while [`BlockIter::valid`]; empty parts otherwise).
    #[inline]
    pub fn key_view(&self) -> KeyView<'_> {
        let tail = self.key.len().saturating_sub(KEY_TAIL);
        KeyView {
            row: self.key.get(2..self.row_end).unwrap_or_default(),
            qualifier: self.key.get(self.row_end..tail).unwrap_or_default(),
            ts: self.ts,
            kind: self.kind,
            seq: self.seq,
        }
    }

    #[inline]
    pub fn value(&self) -> &[u8] {
        &self.block.data[self.value_at..self.value_at + self.value_len]
    }

    #[inline]
    pub fn ttl_ms(&self) -> Option<u64> {
        self.ttl_ms
    }

    /// True if the last [`BlockIter::advance`] moved within one row (always false after a
    /// seek, which may land anywhere).
    #[inline]
    pub fn same_row(&self) -> bool {
        self.same_row
    }

    fn corrupt(&self, reason: &str) -> Error {
        Error::corrupt(&*self.block.path, self.block.offset, format!("data block: {reason}"))
    }

    /// Decodes the entry at `next_at`, or marks the iterator exhausted at the restart array.
    pub fn advance(&mut self) -> Result<()> {
        let data = &self.block.data[..self.block.restarts_at];
        if self.next_at >= data.len() {
            self.valid = false;
            return Ok(());
        }
        let mut pos = self.next_at;
        let mut field = || get_varint(data, &mut pos).ok_or_else(|| self.corrupt("truncated entry header"));
        let prefix = field()? as usize;
        let unshared = field()? as usize;
        let value_len = field()? as usize;
        let ttl = field()?;
        let (shared, tail_left_out) = match self.block.keys {
            EntryKeys::WholeTails => (prefix, false),
            EntryKeys::SharedTails => (prefix >> 1, prefix & 1 == 1),
        };
        if shared > self.key.len()
            || (tail_left_out && self.key.len() < KEY_TAIL)
            || pos.checked_add(unshared).and_then(|p| p.checked_add(value_len)).is_none_or(|end| end > data.len())
        {
            return Err(self.corrupt("entry exceeds block"));
        }
        // The previous key's row, with its length in front, lies within the shared prefix
        // (`row_end` is still the previous key's; a cleared key shares nothing).
        self.same_row = shared >= 2 && shared >= self.row_end;
        // The tail to repeat is copied out first: the shared prefix may end inside it.
        let repeated = tail_left_out.then(|| {
            let mut tail = [0u8; KEY_TAIL];
            tail.copy_from_slice(&self.key[self.key.len() - KEY_TAIL..]);
            tail
        });
        self.key.truncate(shared);
        self.key.extend_from_slice(&data[pos..pos + unshared]);
        if let Some(tail) = repeated {
            self.key.extend_from_slice(&tail);
        }
        // Another column of the same put (the row within the shared prefix, the tail repeated)
        // leaves the row, timestamp, type and sequence as they were: only the qualifier moved.
        let same_put = repeated.is_some() && self.same_row;
        if !same_put {
            let Some(k) = decode_key(&self.key) else {
                return Err(self.corrupt("malformed key"));
            };
            (self.row_end, self.ts, self.kind, self.seq) = (2 + k.row.len(), k.ts, k.kind, k.seq);
        }
        self.value_at = pos + unshared;
        self.value_len = value_len;
        self.ttl_ms = if ttl == 0 { None } else { Some(ttl - 1) };
        self.next_at = self.value_at + value_len;
        self.valid = true;
        Ok(())
    }

    pub fn seek_to_first(&mut self) -> Result<()> {
        self.next_at = 0;
        self.key.clear();
        self.advance()
    }

    /// Positions at the first entry `>= target`, or exhausts the iterator.
    /// The full key stored at restart point `i` (restart entries share no prefix), read in
    /// place without copying.
    fn restart_key(&self, i: usize) -> Result<KeyView<'_>> {
        let data = &self.block.data[..self.block.restarts_at];
        let mut pos = self.block.restart(i);
        let mut field = || get_varint(data, &mut pos).ok_or_else(|| self.corrupt("truncated restart entry"));
        // A zero prefix means the whole key, tail included, in either layout.
        let (prefix, unshared) = (field()?, field()? as usize);
        let (_value_len, _ttl) = (field()?, field()?);
        let key = pos.checked_add(unshared).and_then(|end| data.get(pos..end));
        match key {
            Some(key) if prefix == 0 => decode_key(key).ok_or_else(|| self.corrupt("malformed restart key")),
            _ => Err(self.corrupt("bad restart entry")),
        }
    }

    pub fn seek(&mut self, target: &KeyView<'_>) -> Result<()> {
        // Binary search for the last restart whose key is < target.
        let (mut lo, mut hi) = (0usize, self.block.num_restarts);
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if self.restart_key(mid)?.cmp_internal(target) == Ordering::Less {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        self.next_at = self.block.restart(lo);
        if self.next_at > self.block.restarts_at {
            return Err(self.corrupt("restart offset beyond entries"));
        }
        self.key.clear();
        self.advance()?;
        while self.valid && self.key_view().cmp_internal(target) == Ordering::Less {
            self.advance()?;
        }
        self.same_row = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sst::format::encode_key;

    fn k(row: &str, ts: u64) -> Vec<u8> {
        let mut out = Vec::new();
        encode_key(&mut out, &KeyView { row: row.as_bytes(), qualifier: b"q", ts, kind: CellType::Put, seq: 1 });
        out
    }

    const LAYOUTS: [EntryKeys; 2] = [EntryKeys::WholeTails, EntryKeys::SharedTails];

    fn parse(raw: Vec<u8>, keys: EntryKeys) -> Arc<Block> {
        Arc::new(Block::parse(raw.into(), keys, &Arc::from(Path::new("t")), 0).unwrap())
    }

    fn build(n: usize, keys: EntryKeys) -> Arc<Block> {
        let mut b = BlockBuilder::new(keys);
        for i in 0..n {
            b.add(
                &k(&format!("row{i:04}"), 5),
                format!("v{i}").as_bytes(),
                if i % 3 == 0 { Some(i as u64) } else { None },
            );
        }
        let raw = b.finish();
        let framed = frame(&raw, Compression::Lz4);
        parse(unframe(&framed, Path::new("t"), 0).unwrap(), keys)
    }

    #[test]
    fn iterate_and_seek() {
        for keys in LAYOUTS {
            let block = build(100, keys);
            let mut it = BlockIter::new(block.clone());
            it.seek_to_first().unwrap();
            let mut n = 0;
            while it.valid() {
                assert_eq!(it.value(), format!("v{n}").as_bytes());
                assert_eq!(it.ttl_ms(), if n % 3 == 0 { Some(n as u64) } else { None });
                n += 1;
                it.advance().unwrap();
            }
            assert_eq!(n, 100);
            for target in [0, 15, 16, 17, 50, 99] {
                let key = k(&format!("row{target:04}"), 5);
                it.seek(&decode_key(&key).unwrap()).unwrap();
                assert_eq!(it.value(), format!("v{target}").as_bytes());
            }
            let past = k("row9999", 5);
            it.seek(&decode_key(&past).unwrap()).unwrap();
            assert!(!it.valid());
        }
    }

    /// Key of column `q` of `row`, written at `ts` by the write with sequence `seq`.
    fn cell_key(row: usize, q: u8, ts: u64, seq: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let row = format!("row{row:02}");
        encode_key(&mut out, &KeyView { row: row.as_bytes(), qualifier: &[b'q', q], ts, kind: CellType::Put, seq });
        out
    }

    #[test]
    fn the_same_row_flag_follows_the_shared_prefix() {
        // Rows of three columns, across restart points (every 16th entry stores its whole key).
        for keys in LAYOUTS {
            let mut b = BlockBuilder::new(keys);
            for row in 0..20 {
                for q in 0..3 {
                    b.add(&cell_key(row, q, 5, 1), b"v", None);
                }
            }
            let mut it = BlockIter::new(parse(b.finish(), keys));
            it.seek_to_first().unwrap();
            let mut at = 0;
            while it.valid() {
                let restart = at % RESTART_INTERVAL == 0;
                assert_eq!(it.same_row(), at % 3 != 0 && !restart, "entry {at}");
                at += 1;
                it.advance().unwrap();
            }
            assert_eq!(at, 60);
            // A seek may land anywhere: the flag says nothing after one.
            it.seek(&decode_key(&cell_key(4, 2, 5, 1)).unwrap()).unwrap();
            assert_eq!(it.key_view().qualifier, b"q\x02");
            assert!(!it.same_row());
        }
    }

    /// Rows of ten columns, each row one put (one timestamp and sequence); every third row has
    /// a newer version of two columns from a later put, so tails change inside rows too.
    fn put_rows() -> Vec<Vec<u8>> {
        let mut keys = Vec::new();
        for row in 0..30 {
            for q in 0..10u8 {
                if row % 3 == 0 && q >= 8 {
                    keys.push(cell_key(row, q, 900 + row as u64, 500 + row as u64));
                }
                keys.push(cell_key(row, q, 100 + row as u64, 1 + row as u64));
            }
        }
        keys
    }

    #[test]
    fn a_puts_cells_store_their_tail_once() {
        let keys = put_rows();
        let mut sizes = Vec::new();
        for layout in LAYOUTS {
            let mut b = BlockBuilder::new(layout);
            for (i, key) in keys.iter().enumerate() {
                b.add(key, format!("v{i}").as_bytes(), (i % 7 == 0).then_some(i as u64));
            }
            sizes.push(b.size());
            let block = parse(b.finish(), layout);
            let mut it = BlockIter::new(block.clone());
            it.seek_to_first().unwrap();
            for (i, key) in keys.iter().enumerate() {
                assert!(it.valid(), "{layout:?}: entry {i}");
                assert_eq!(it.key_bytes(), &key[..], "{layout:?}: entry {i}");
                assert_eq!(it.key_view(), decode_key(key).unwrap());
                assert_eq!(it.value(), format!("v{i}").as_bytes());
                assert_eq!(it.ttl_ms(), (i % 7 == 0).then_some(i as u64));
                it.advance().unwrap();
            }
            assert!(!it.valid());
            // Every key is found by a seek, those stored without their tail too.
            for (i, key) in keys.iter().enumerate() {
                it.seek(&decode_key(key).unwrap()).unwrap();
                assert_eq!(it.key_bytes(), &key[..], "{layout:?}: seek to entry {i}");
            }
        }
        // Every entry but a restart's or one whose tail differs from the entry before leaves
        // its tail out.
        let tail = |key: &[u8]| key[key.len() - KEY_TAIL..].to_vec();
        let kept =
            (0..keys.len()).filter(|&i| i % RESTART_INTERVAL == 0 || tail(&keys[i]) != tail(&keys[i - 1])).count();
        assert!(sizes[0] - sizes[1] >= KEY_TAIL * (keys.len() - kept), "{sizes:?}");
    }

    /// Cells of different rows may share a tail (one timestamp, type and sequence: a bulk
    /// write, or sequences a compaction no longer needs). Each entry still reads as its own
    /// row, though its tail is left out.
    #[test]
    fn rows_sharing_a_tail_keep_their_own_rows() {
        // Rows of growing length ("k", "kz", "kzz", ...), three columns each, one tail.
        let keys: Vec<Vec<u8>> = (0..40)
            .flat_map(|len| {
                let row = [&b"k"[..], &vec![b'z'; len]].concat();
                (0..3u8).map(move |q| {
                    let mut out = Vec::new();
                    encode_key(
                        &mut out,
                        &KeyView { row: &row, qualifier: &[b'q', q], ts: 7, kind: CellType::Put, seq: 9 },
                    );
                    out
                })
            })
            .collect();
        let mut b = BlockBuilder::new(EntryKeys::SharedTails);
        for (i, key) in keys.iter().enumerate() {
            b.add(key, &[i as u8], None);
        }
        let mut it = BlockIter::new(parse(b.finish(), EntryKeys::SharedTails));
        it.seek_to_first().unwrap();
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(it.key_view(), decode_key(key).unwrap(), "entry {i}");
            assert_eq!(it.same_row(), i % 3 != 0 && i % RESTART_INTERVAL != 0, "entry {i}");
            it.advance().unwrap();
        }
        assert!(!it.valid());
    }

    /// Keys whose common prefix runs past the end of one key's row and qualifier into the
    /// tail: an empty qualifier, then qualifiers of zero bytes, at a timestamp whose high
    /// bytes are zeros too. The shared prefix stored stops where the shorter head ends.
    #[test]
    fn prefixes_that_reach_into_the_tail_round_trip() {
        let keys: Vec<Vec<u8>> = [&b""[..], b"\0", b"\0\0", b"\0\0\0", b"\x01"]
            .iter()
            .map(|q| {
                let mut out = Vec::new();
                encode_key(&mut out, &KeyView { row: b"r", qualifier: q, ts: 7, kind: CellType::Put, seq: 3 });
                out
            })
            .collect();
        for layout in LAYOUTS {
            let mut b = BlockBuilder::new(layout);
            for (i, key) in keys.iter().enumerate() {
                b.add(key, &[i as u8], None);
            }
            let block = parse(b.finish(), layout);
            let mut it = BlockIter::new(block);
            it.seek_to_first().unwrap();
            for key in &keys {
                assert_eq!(it.key_bytes(), &key[..], "{layout:?}");
                it.advance().unwrap();
            }
            assert!(!it.valid());
            for (i, key) in keys.iter().enumerate() {
                it.seek(&decode_key(key).unwrap()).unwrap();
                assert_eq!((it.key_bytes(), it.value()), (&key[..], &[i as u8][..]), "{layout:?}");
            }
        }
    }

    #[test]
    fn an_entry_without_a_tail_to_repeat_is_corrupt() {
        // Entry 0 claims to repeat the previous entry's tail, but nothing came before it.
        let mut raw = Vec::new();
        for field in [1u64, 3, 1, 0] {
            put_varint(&mut raw, field);
        }
        raw.extend_from_slice(b"\0\x01r");
        raw.extend_from_slice(b"v");
        raw.extend_from_slice(&0u32.to_le_bytes());
        raw.extend_from_slice(&1u32.to_le_bytes());
        let mut it = BlockIter::new(parse(raw.clone(), EntryKeys::SharedTails));
        assert!(matches!(it.seek_to_first(), Err(Error::Corrupt { .. })));
        // The same bytes in the older layout: a prefix of 1 with nothing before it.
        let mut it = BlockIter::new(parse(raw, EntryKeys::WholeTails));
        assert!(matches!(it.seek_to_first(), Err(Error::Corrupt { .. })));
    }

    #[test]
    fn an_uncompressed_block_written_in_pieces_matches_its_frame() {
        let raw: Vec<u8> = (0..3000u32).flat_map(|i| (i % 13).to_le_bytes()).collect();
        let mut pieces = vec![0];
        pieces.extend_from_slice(&raw);
        pieces.extend_from_slice(&uncompressed_frame_crc(&raw).to_le_bytes());
        assert_eq!(pieces, frame(&raw, Compression::None));
    }

    #[test]
    fn a_reused_buffer_builds_the_same_block() {
        let mut builder = BlockBuilder::new(EntryKeys::SharedTails);
        let mut blocks = Vec::new();
        for round in 0..3u8 {
            for i in 0..40u8 {
                builder.add(&[round, i, 7], &[i; 20], None);
            }
            let raw = builder.finish();
            blocks.push(raw.clone());
            builder.reuse(raw);
        }
        let mut fresh = BlockBuilder::new(EntryKeys::SharedTails);
        for i in 0..40u8 {
            fresh.add(&[2, i, 7], &[i; 20], None);
        }
        assert_eq!(blocks[2], fresh.finish());
    }

    #[test]
    fn every_codec_round_trips_and_detects_damage() {
        let raw: Vec<u8> = (0..5000u32).flat_map(|i| (i % 7).to_le_bytes()).collect();
        for c in [Compression::None, Compression::Lz4, Compression::Zstd] {
            let mut framed = frame(&raw, c);
            assert_eq!(unframe(&framed, Path::new("f"), 9).unwrap(), raw);
            assert_eq!(
                unframe_shared(Bytes::from(framed.clone()), Path::new("f"), 9).unwrap(),
                raw,
                "kept or decoded, the same"
            );
            let mid = framed.len() / 2;
            framed[mid] ^= 0x40;
            let err = unframe(&framed, Path::new("f"), 9).unwrap_err();
            assert!(matches!(err, Error::Corrupt { offset: 9, .. }), "{err}");
            let err = unframe_shared(Bytes::from(framed), Path::new("f"), 9).unwrap_err();
            assert!(matches!(err, Error::Corrupt { offset: 9, .. }), "{err}");
        }
    }
}
