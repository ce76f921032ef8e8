//! Bloom filters over rows (and row+qualifier pairs) of one SSTable.
//!
//! Ten bits per key and seven probes give about 1% false positives. Probes use double hashing
//! of one 64-bit xxh3 hash. Encoded as `probes u8 | bits...`.

use xxhash_rust::xxh3::xxh3_64;

const BITS_PER_KEY: usize = 10;
const PROBES: u8 = 7;

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
}

impl Bloom {
    /// Bytes of the filter in memory.
    pub fn size_bytes(&self) -> usize {
        self.bits.len()
    }

    /// Builds a filter holding `hashes`.
    pub fn build(hashes: &[u64]) -> Bloom {
        let nbits = (hashes.len() * BITS_PER_KEY).max(64);
        let mut bits = vec![0u8; nbits.div_ceil(8)];
        let nbits = bits.len() * 8;
        for &h in hashes {
            for bit in probe_bits(h, PROBES, nbits) {
                bits[bit / 8] |= 1 << (bit % 8);
            }
        }
        Bloom { bits, probes: PROBES }
    }

    /// False means "certainly absent"; true means "possibly present".
    pub fn may_contain(&self, hash: u64) -> bool {
        let nbits = self.bits.len() * 8;
        probe_bits(hash, self.probes, nbits).all(|bit| self.bits[bit / 8] & (1 << (bit % 8)) != 0)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + self.bits.len());
        out.push(self.probes);
        out.extend_from_slice(&self.bits);
        out
    }

    /// Decodes a filter; `None` if malformed.
    pub fn decode(buf: &[u8]) -> Option<Bloom> {
        let (&probes, bits) = buf.split_first()?;
        if probes == 0 || probes > 30 || bits.is_empty() {
            return None;
        }
        Some(Bloom { bits: bits.to_vec(), probes })
    }
}

fn probe_bits(hash: u64, probes: u8, nbits: usize) -> impl Iterator<Item = usize> {
    let h1 = hash as u32;
    let h2 = ((hash >> 32) as u32) | 1;
    (0..u32::from(probes)).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2)) as usize) % nbits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let keys: Vec<u64> = (0..10_000u32).map(|i| row_hash(format!("row{i}").as_bytes())).collect();
        let bloom = Bloom::decode(&Bloom::build(&keys).encode()).unwrap();
        assert!(keys.iter().all(|&h| bloom.may_contain(h)));
        let fp = (0..10_000u32).filter(|i| bloom.may_contain(row_hash(format!("other{i}").as_bytes()))).count();
        assert!(fp < 300, "false positive rate too high: {fp} / 10000");
    }

    #[test]
    fn row_col_pairs_do_not_alias() {
        assert_ne!(row_col_hash(b"ab", b"c"), row_col_hash(b"a", b"bc"));
    }
}
