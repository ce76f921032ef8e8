//! Pre-split keys: explicit lists and the split algorithms `create` offers.
//!
//! The HBase guide warns that splitting a hex-string key space with a byte-level algorithm
//! leaves most regions empty (bytes 58–96 never occur in `[0-9a-f]`). [`SplitAlgorithm::HexString`]
//! splits the *numeric* space of 8 hex digits instead, so every region receives an even share
//! of uniformly random hex keys.

use bytes::Bytes;

use crate::cell::check_row;
use crate::{Error, Result};

/// How to compute split keys for a table created with N regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitAlgorithm {
    /// Even split of the raw byte space (for keys that are uniformly random bytes, such as
    /// hashes). Split keys are big-endian fractions of 2^64 with trailing zero bytes dropped.
    UniformBytes,
    /// Even split of 8-digit lowercase hex strings `00000000`–`ffffffff` (for keys that start
    /// with a printed hash or hex id).
    HexString,
}

impl SplitAlgorithm {
    /// The algorithm HBase's shell calls `name` (`UniformSplit`, `HexStringSplit`).
    pub fn from_name(name: &str) -> Option<SplitAlgorithm> {
        match name.rsplit('.').next()? {
            "UniformSplit" | "UniformBytes" => Some(SplitAlgorithm::UniformBytes),
            "HexStringSplit" | "HexString" => Some(SplitAlgorithm::HexString),
            _ => None,
        }
    }

    /// The `regions - 1` split keys that cut the key space into `regions` even parts.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `regions` is 0 or more than 65536.
    pub fn split_keys(self, regions: usize) -> Result<Vec<Bytes>> {
        if !(1..=65536).contains(&regions) {
            return Err(Error::invalid("NUMREGIONS", "must be between 1 and 65536"));
        }
        let n = regions as u128;
        Ok((1..n)
            .map(|i| match self {
                SplitAlgorithm::UniformBytes => {
                    let point = ((i << 64) / n) as u64;
                    let bytes = point.to_be_bytes();
                    let len = 8 - bytes.iter().rev().take_while(|&&b| b == 0).count();
                    Bytes::copy_from_slice(&bytes[..len.max(1)])
                }
                SplitAlgorithm::HexString => {
                    let point = (i << 32) / n;
                    Bytes::from(format!("{point:08x}"))
                }
            })
            .collect())
    }
}

/// Checks explicit split keys: valid row keys, strictly increasing.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the problem.
pub(crate) fn check_split_keys(keys: &[Bytes]) -> Result<()> {
    for (i, k) in keys.iter().enumerate() {
        check_row(k).map_err(|_| Error::invalid("SPLITS", format!("split key {i} is empty or too long")))?;
        if i > 0 && keys[i - 1] >= *k {
            return Err(Error::invalid("SPLITS", "split keys must be strictly increasing"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_split_gives_every_region_a_fair_share() {
        let keys = SplitAlgorithm::HexString.split_keys(10).unwrap();
        assert_eq!(keys.len(), 9);
        assert_eq!(keys[0], Bytes::from("19999999"));
        let mut counts = [0usize; 10];
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = format!("{:016x}", x);
            let region = keys.partition_point(|k| k.as_ref() <= key.as_bytes());
            counts[region] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "uneven: {counts:?}");
        }
    }

    #[test]
    fn uniform_split_is_increasing_and_even() {
        let keys = SplitAlgorithm::UniformBytes.split_keys(4).unwrap();
        assert_eq!(keys, vec![Bytes::from_static(&[0x40]), Bytes::from_static(&[0x80]), Bytes::from_static(&[0xc0])]);
        check_split_keys(&SplitAlgorithm::UniformBytes.split_keys(1000).unwrap()).unwrap();
        assert!(SplitAlgorithm::UniformBytes.split_keys(0).is_err());
        assert!(SplitAlgorithm::UniformBytes.split_keys(1).unwrap().is_empty());
    }

    #[test]
    fn explicit_keys_are_checked() {
        assert!(check_split_keys(&[Bytes::from("a"), Bytes::from("b")]).is_ok());
        assert!(check_split_keys(&[Bytes::from("b"), Bytes::from("a")]).is_err());
        assert!(check_split_keys(&[Bytes::from("a"), Bytes::from("a")]).is_err());
        assert!(check_split_keys(&[Bytes::new()]).is_err());
    }
}
