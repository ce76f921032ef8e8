//! Byte layouts of SSTable keys, index, meta block and footer.
//!
//! Key: `row_len u16 BE | row | qualifier | ts u64 BE | type u8 | seq u64 BE` (the qualifier's
//! length is what remains). Index entry: `key_len varint | last key of block | offset varint |
//! length varint`; from format version 4 the last varint is `length << 1 | row_ends`, where
//! `row_ends` is 1 if the block's last row has no cells in the next block. Footer (fixed
//! [`FOOTER_LEN`] bytes, little-endian): index, bloom and meta block handles (offset u64,
//! length u32 each), format version u32, CRC32C of the preceding footer bytes u32, magic u64.

use bytes::{BufMut, Bytes};

use crate::cell::{CellType, KeyView};

/// `b"CELLARSS"` read as a little-endian u64.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"CELLARSS");
/// Current SSTable format version. Version 4 marks in the index the blocks whose last row ends
/// in them, so a point read of that row does not read the next block to find the row's end;
/// version 3 leaves out a key's tail where it repeats the previous entry's (see `block`);
/// version 2 writes bloom filters in the cache-local layout (see `bloom`). Files of versions
/// 1 to 3 still read.
pub(crate) const FORMAT_VERSION: u32 = 4;
/// The first version whose index entries carry the row-end flag.
const ROW_END_VERSION: u32 = 4;
/// The oldest version this build reads.
const OLDEST_FORMAT_VERSION: u32 = 1;
/// Size of the footer.
pub(crate) const FOOTER_LEN: usize = 52;
/// Bytes after the row and qualifier: timestamp, type, sequence.
pub(crate) const KEY_TAIL: usize = 17;

/// Appends a LEB128 varint.
pub(crate) fn put_varint(out: &mut impl BufMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// Reads a LEB128 varint at `*pos`, advancing it; `None` if truncated or over-long.
pub(crate) fn get_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

/// How many leading bytes `a` and `b` share. Compares eight bytes at a time: every cell a
/// block takes is measured against the key before it, and byte by byte that was a twentieth
/// of a flush's work.
pub(crate) fn shared_prefix_len(a: &[u8], b: &[u8]) -> usize {
    let (words_a, _) = a.as_chunks::<8>();
    let (words_b, _) = b.as_chunks::<8>();
    let mut n = 0;
    for (x, y) in words_a.iter().zip(words_b) {
        let differ = u64::from_le_bytes(*x) ^ u64::from_le_bytes(*y);
        if differ != 0 {
            // Little-endian: the first differing byte holds the lowest set bit.
            return n + (differ.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    n + a[n..].iter().zip(&b[n..]).take_while(|(x, y)| x == y).count()
}

/// Appends the encoded form of `k`.
pub(crate) fn encode_key(out: &mut Vec<u8>, k: &KeyView<'_>) {
    out.extend_from_slice(&(k.row.len() as u16).to_be_bytes());
    out.extend_from_slice(k.row);
    out.extend_from_slice(k.qualifier);
    out.extend_from_slice(&k.ts.to_be_bytes());
    out.push(k.kind.code());
    out.extend_from_slice(&k.seq.to_be_bytes());
}

/// Decodes an encoded key; `None` if malformed.
pub(crate) fn decode_key(buf: &[u8]) -> Option<KeyView<'_>> {
    let row_len = u16::from_be_bytes([*buf.first()?, *buf.get(1)?]) as usize;
    let row_end = 2 + row_len;
    let tail = buf.len().checked_sub(KEY_TAIL)?;
    if tail < row_end {
        return None;
    }
    let ts = u64::from_be_bytes(buf[tail..tail + 8].try_into().ok()?);
    let kind = CellType::from_code(buf[tail + 8])?;
    let seq = u64::from_be_bytes(buf[tail + 9..tail + 17].try_into().ok()?);
    Some(KeyView { row: &buf[2..row_end], qualifier: &buf[row_end..tail], ts, kind, seq })
}

/// Location of a block in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Handle {
    pub offset: u64,
    pub len: u32,
}

impl Handle {
    /// Where the block ends in the file. For the handles of an open file, which
    /// `SstReader::open` checked to end inside it (a handle read from disk is checked with
    /// `checked_add` there, before it is trusted).
    pub fn end(self) -> u64 {
        self.offset + u64::from(self.len)
    }
}

/// The footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Footer {
    pub index: Handle,
    pub bloom: Handle,
    pub meta: Handle,
    pub version: u32,
}

impl Footer {
    pub fn encode(&self) -> [u8; FOOTER_LEN] {
        let mut out = Vec::with_capacity(FOOTER_LEN);
        for h in [self.index, self.bloom, self.meta] {
            out.extend_from_slice(&h.offset.to_le_bytes());
            out.extend_from_slice(&h.len.to_le_bytes());
        }
        out.extend_from_slice(&self.version.to_le_bytes());
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&MAGIC.to_le_bytes());
        let mut fixed = [0u8; FOOTER_LEN];
        fixed.copy_from_slice(&out);
        fixed
    }

    /// Decodes a footer, checking magic, checksum and version.
    pub fn decode(buf: &[u8; FOOTER_LEN]) -> Result<Footer, String> {
        let u64_at = |i: usize| u64::from_le_bytes(buf[i..i + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |i: usize| u32::from_le_bytes(buf[i..i + 4].try_into().unwrap_or([0; 4]));
        if u64_at(44) != MAGIC {
            return Err("bad magic: not a Cellar SSTable".into());
        }
        if crc32c::crc32c(&buf[..40]) != u32_at(40) {
            return Err("footer checksum mismatch".into());
        }
        let version = u32_at(36);
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(format!("unsupported SSTable format version {version}"));
        }
        let handle = |i: usize| Handle { offset: u64_at(i), len: u32_at(i + 8) };
        Ok(Footer { index: handle(0), bloom: handle(12), meta: handle(24), version })
    }
}

/// Summary of a file, stored in its meta block.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SstMeta {
    pub first_key: Bytes,
    pub last_key: Bytes,
    /// Row of the first key of the middle data block: a cheap split point.
    pub mid_row: Bytes,
    pub min_ts: u64,
    pub max_ts: u64,
    pub max_seq: u64,
    pub cell_count: u64,
    pub delete_count: u64,
}

impl SstMeta {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for b in [&self.first_key, &self.last_key, &self.mid_row] {
            put_varint(&mut out, b.len() as u64);
            out.extend_from_slice(b);
        }
        for v in [self.min_ts, self.max_ts, self.max_seq, self.cell_count, self.delete_count] {
            put_varint(&mut out, v);
        }
        out
    }

    pub fn decode(buf: &[u8]) -> Option<SstMeta> {
        let mut pos = 0;
        let mut bytes = || -> Option<Bytes> {
            let n = get_varint(buf, &mut pos)? as usize;
            let b = buf.get(pos..pos.checked_add(n)?)?;
            pos += n;
            Some(Bytes::copy_from_slice(b))
        };
        let (first_key, last_key, mid_row) = (bytes()?, bytes()?, bytes()?);
        let mut num = || get_varint(buf, &mut pos);
        Some(SstMeta {
            first_key,
            last_key,
            mid_row,
            min_ts: num()?,
            max_ts: num()?,
            max_seq: num()?,
            cell_count: num()?,
            delete_count: num()?,
        })
    }
}

/// One index entry: the last key of a data block and where the block is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub last_key: Bytes,
    pub handle: Handle,
    /// The block's last row has no cells in the next block. False where unknown (files
    /// older than format version 4), which only costs a point read a look at the next block.
    pub row_ends: bool,
}

/// Accumulates the index block as blocks are written: entries go straight into the encoded
/// buffer, so a writer holds no allocation per block.
#[derive(Debug)]
pub(crate) struct IndexBuilder {
    count: u64,
    entries: Vec<u8>,
    /// Whether entries carry the row-end flag (format version 4 on).
    row_end_flags: bool,
}

impl IndexBuilder {
    /// An index in format `version`.
    pub fn new(version: u32) -> IndexBuilder {
        IndexBuilder { count: 0, entries: Vec::new(), row_end_flags: version >= ROW_END_VERSION }
    }

    pub fn add(&mut self, last_key: &[u8], handle: Handle, row_ends: bool) {
        put_varint(&mut self.entries, last_key.len() as u64);
        self.entries.extend_from_slice(last_key);
        put_varint(&mut self.entries, handle.offset);
        let len = u64::from(handle.len);
        put_varint(&mut self.entries, if self.row_end_flags { len << 1 | u64::from(row_ends) } else { len });
        self.count += 1;
    }

    /// The encoded block: entry count, then the entries.
    pub fn finish(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() + 10);
        put_varint(&mut out, self.count);
        out.extend_from_slice(&self.entries);
        out
    }
}

/// Decodes an index block of a file in format `version`. Entries' keys are slices of `buf`,
/// so an open file holds its index in one allocation.
pub(crate) fn decode_index(buf: &Bytes, version: u32) -> Option<Vec<IndexEntry>> {
    let mut pos = 0;
    let n = get_varint(buf, &mut pos)? as usize;
    let mut out = Vec::with_capacity(n.min(1 << 20));
    for _ in 0..n {
        let klen = get_varint(buf, &mut pos)? as usize;
        let end = pos.checked_add(klen)?;
        decode_key(buf.get(pos..end)?)?;
        let last_key = buf.slice(pos..end);
        pos = end;
        let offset = get_varint(buf, &mut pos)?;
        let field = get_varint(buf, &mut pos)?;
        let (len, row_ends) = if version >= ROW_END_VERSION { (field >> 1, field & 1 == 1) } else { (field, false) };
        let len = u32::try_from(len).ok()?;
        out.push(IndexEntry { last_key, handle: Handle { offset, len }, row_ends });
    }
    (pos == buf.len()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn shared_prefix_len_counts_the_leading_bytes_two_keys_share() {
        let key = b"user0001234567890:field3\x00\x01".to_vec();
        for cut in 0..=key.len() {
            assert_eq!(shared_prefix_len(&key, &key[..cut]), cut);
            assert_eq!(shared_prefix_len(&key[..cut], &key), cut);
            for at in 0..cut {
                let mut other = key[..cut].to_vec();
                other[at] ^= 0x10;
                assert_eq!(shared_prefix_len(&key, &other), at, "first difference at {at} of {cut}");
            }
        }
        assert_eq!(shared_prefix_len(b"", b"abc"), 0);
    }

    proptest! {
        #[test]
        fn key_round_trips(row in proptest::collection::vec(any::<u8>(), 1..40),
                           q in proptest::collection::vec(any::<u8>(), 0..20),
                           ts: u64, seq: u64) {
            let k = KeyView { row: &row, qualifier: &q, ts, kind: CellType::DeleteColumn, seq };
            let mut buf = Vec::new();
            encode_key(&mut buf, &k);
            prop_assert_eq!(decode_key(&buf), Some(k));
        }

        #[test]
        fn varint_round_trips(v: u64) {
            let mut buf = Vec::new();
            put_varint(&mut buf, v);
            let mut pos = 0;
            prop_assert_eq!(get_varint(&buf, &mut pos), Some(v));
            prop_assert_eq!(pos, buf.len());
        }
    }

    #[test]
    fn footer_checks() {
        let f = Footer {
            index: Handle { offset: 10, len: 20 },
            bloom: Handle { offset: 30, len: 0 },
            meta: Handle { offset: 40, len: 5 },
            version: FORMAT_VERSION,
        };
        let mut buf = f.encode();
        assert_eq!(Footer::decode(&buf), Ok(f));
        buf[3] ^= 1;
        assert!(Footer::decode(&buf).unwrap_err().contains("checksum"));
        let mut bad = f.encode();
        bad[50] ^= 1;
        assert!(Footer::decode(&bad).unwrap_err().contains("magic"));
    }

    #[test]
    fn meta_and_index_round_trip() {
        let m = SstMeta {
            first_key: "a".into(),
            last_key: "z".into(),
            mid_row: "m".into(),
            min_ts: 1,
            max_ts: 9,
            max_seq: 7,
            cell_count: 3,
            delete_count: 1,
        };
        assert_eq!(SstMeta::decode(&m.encode()), Some(m));
        let mut key = Vec::new();
        encode_key(&mut key, &KeyView { row: b"r", qualifier: b"q", ts: 1, kind: CellType::Put, seq: 1 });
        for version in [3, FORMAT_VERSION] {
            let mut idx = IndexBuilder::new(version);
            idx.add(&key, Handle { offset: 0, len: 77 }, true);
            idx.add(&key, Handle { offset: 77, len: 5 }, false);
            let enc = Bytes::from(idx.finish());
            let entry = |offset, len, row_ends| IndexEntry {
                last_key: key.clone().into(),
                handle: Handle { offset, len },
                row_ends: row_ends && version >= ROW_END_VERSION,
            };
            assert_eq!(decode_index(&enc, version), Some(vec![entry(0, 77, true), entry(77, 5, false)]));
            assert_eq!(decode_index(&enc.slice(..enc.len() - 1), version), None);
        }
    }
}
