//! Bloom filters over rows (and row+qualifier pairs) of one SSTable.
//!
//! Cache-local: the filter is an array of 64-byte blocks, and all of a key's probes fall in
//! the one block its hash picks, so a lookup reads one cache line. (A filter whose probes
//! spread over the whole array costs a cache miss per probe, and a read checks the filter of
//! every file that may hold its row.) Ten bits per key and six probes give about 1% false
//! positives. Encoded as `layout u8 | bits...`: the high bit of the first byte marks the
//! blocked layout and the low bits give the probes. Filters written without that bit spread
//! their probes over the whole array by double hashing; they still read.

use xxhash_rust::xxh3::xxh3_64;

const BITS_PER_KEY: usize = 10;
const PROBES: u8 = 6;
/// Bits in a block: one cache line.
const BLOCK_BITS: usize = 512;
const BLOCK_BYTES: usize = BLOCK_BITS / 8;
/// Marks the blocked layout in the first byte.
const BLOCKED: u8 = 0x80;

/// Hash of a row, as the bloom filter keys it.
pub(crate) fn row_hash(row: &[u8]) -> u64 {
    xxh3_64(row)
}

/// Hash of a row+qualifier pair (length-prefixed so pairs cannot collide by concatenation).
pub(crate) fn row_col_hash(row: &[u8], qualifier: &[u8]) -> u64 {
    let mut buf = Vec::with_capacity(2 + row.len() + qualifier.len());
    buf.extend_from_slice(&(row.len() as u16).to_be_bytes());
    buf.extend_from_slice(row);
    buf.extend_from_slice(qualifier);
    xxh3_64(&buf)
}

/// An immutable bloom filter.
#[derive(Debug, Clone)]
pub(crate) struct Bloom {
    bits: Vec<u8>,
    probes: u8,
    /// Probes confined to one block (the layout written now), or spread over the array.
    blocked: bool,
}

impl Bloom {
    /// Bytes of the filter in memory.
    pub fn size_bytes(&self) -> usize {
        self.bits.len()
    }

    /// Builds a filter holding `hashes`.
    pub fn build(hashes: &[u64]) -> Bloom {
        let blocks = (hashes.len() * BITS_PER_KEY).div_ceil(BLOCK_BITS).max(1);
        let mut bits = vec![0u8; blocks * BLOCK_BYTES];
        for &h in hashes {
            let block = &mut bits[block_of(h, blocks)..][..BLOCK_BYTES];
            for bit in block_probes(h, PROBES) {
                block[bit / 8] |= 1 << (bit % 8);
            }
        }
        Bloom { bits, probes: PROBES, blocked: true }
    }

    /// False means "certainly absent"; true means "possibly present".
    pub fn may_contain(&self, hash: u64) -> bool {
        if self.blocked {
            let block = &self.bits[block_of(hash, self.bits.len() / BLOCK_BYTES)..][..BLOCK_BYTES];
            return block_probes(hash, self.probes).all(|bit| block[bit / 8] & (1 << (bit % 8)) != 0);
        }
        let nbits = self.bits.len() * 8;
        spread_probes(hash, self.probes, nbits).all(|bit| self.bits[bit / 8] & (1 << (bit % 8)) != 0)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + self.bits.len());
        out.push(if self.blocked { BLOCKED | self.probes } else { self.probes });
        out.extend_from_slice(&self.bits);
        out
    }

    /// Decodes a filter; `None` if malformed.
    pub fn decode(buf: &[u8]) -> Option<Bloom> {
        let (&layout, bits) = buf.split_first()?;
        let (blocked, probes) = (layout & BLOCKED != 0, layout & !BLOCKED);
        if probes == 0 || probes > 30 || bits.is_empty() || (blocked && !bits.len().is_multiple_of(BLOCK_BYTES)) {
            return None;
        }
        Some(Bloom { bits: bits.to_vec(), probes, blocked })
    }
}

/// Byte offset of the block `hash` picks among `blocks`, from its low half (a multiply and a
/// shift map it onto the range evenly, without a division).
fn block_of(hash: u64, blocks: usize) -> usize {
    ((u64::from(hash as u32) * blocks as u64) >> 32) as usize * BLOCK_BYTES
}

/// The bits a key sets in its block, from the hash's high half: each probe takes the top
/// nine bits of the half, then mixes it by a multiply.
fn block_probes(hash: u64, probes: u8) -> impl Iterator<Item = usize> {
    let mut h = (hash >> 32) as u32;
    (0..probes).map(move |_| {
        let bit = (h >> (32 - 9)) as usize;
        h = h.wrapping_mul(0x9E37_79B9);
        bit
    })
}

/// The earlier layout's probes: double hashing over the whole array.
fn spread_probes(hash: u64, probes: u8, nbits: usize) -> impl Iterator<Item = usize> {
    let h1 = hash as u32;
    let h2 = ((hash >> 32) as u32) | 1;
    (0..u32::from(probes)).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2)) as usize) % nbits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(prefix: &str, n: u32) -> Vec<u64> {
        (0..n).map(|i| row_hash(format!("{prefix}{i}").as_bytes())).collect()
    }

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let keys = hashes("row", 100_000);
        let encoded = Bloom::build(&keys).encode();
        assert_eq!(encoded[0], BLOCKED | PROBES, "written in the blocked layout");
        let bloom = Bloom::decode(&encoded).unwrap();
        assert!(keys.iter().all(|&h| bloom.may_contain(h)));
        let fp = hashes("other", 100_000).into_iter().filter(|&h| bloom.may_contain(h)).count();
        assert!(fp < 1_500, "false positive rate too high: {fp} / 100000");
    }

    #[test]
    fn tiny_filters_take_one_block() {
        let keys = hashes("row", 3);
        let bloom = Bloom::build(&keys);
        assert_eq!(bloom.size_bytes(), BLOCK_BYTES);
        assert!(keys.iter().all(|&h| bloom.may_contain(h)));
    }

    /// A filter in the earlier layout (probes spread over the array, no layout bit), as files
    /// written before the blocked one hold it.
    #[test]
    fn filters_in_the_spread_layout_still_read() {
        let keys = hashes("row", 10_000);
        let mut bits = vec![0u8; 10_000 * BITS_PER_KEY / 8];
        let nbits = bits.len() * 8;
        for &h in &keys {
            for bit in spread_probes(h, 7, nbits) {
                bits[bit / 8] |= 1 << (bit % 8);
            }
        }
        let encoded: Vec<u8> = [&[7u8][..], &bits].concat();
        let bloom = Bloom::decode(&encoded).unwrap();
        assert!(!bloom.blocked);
        assert!(keys.iter().all(|&h| bloom.may_contain(h)));
        let fp = hashes("other", 10_000).into_iter().filter(|&h| bloom.may_contain(h)).count();
        assert!(fp < 300, "false positive rate too high: {fp} / 10000");
        assert_eq!(bloom.encode(), encoded, "re-encoded as it was");
    }

    #[test]
    fn malformed_filters_are_refused() {
        assert!(Bloom::decode(&[]).is_none());
        assert!(Bloom::decode(&[BLOCKED | 6]).is_none(), "no bits");
        assert!(Bloom::decode(&[BLOCKED | 6, 0, 0, 0]).is_none(), "not whole blocks");
        assert!(Bloom::decode(&[BLOCKED, 0xff]).is_none(), "no probes");
        assert!(Bloom::decode(&[31, 0xff]).is_none(), "too many probes");
    }

    #[test]
    fn row_col_pairs_do_not_alias() {
        assert_ne!(row_col_hash(b"ab", b"c"), row_col_hash(b"a", b"bc"));
    }
}
