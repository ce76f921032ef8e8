//! The optional first byte of a row key that spreads writes over `N` key ranges (and regions):
//! a salt derived from a hash of the key, a random salt for write-only logs, or a bucket
//! computed from a field (`timestamp % N`). Scans over such a table fan out over every bucket
//! and merge the results back into key order.

use std::sync::atomic::{AtomicU64, Ordering};

use xxhash_rust::xxh3::xxh3_64;

/// How an entity's row keys start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Salt {
    /// No leading byte.
    #[default]
    None,
    /// `hash(partition parts, or the whole key without partition parts) % buckets`: a Get still
    /// reads one row, and every record of a partition shares a bucket.
    Hash {
        /// Number of buckets, 1 to 255.
        buckets: u8,
    },
    /// A random bucket per write: for write-only logs read by scans. A Get probes every bucket.
    Random {
        /// Number of buckets, 1 to 255.
        buckets: u8,
    },
    /// `field % buckets` for a numeric or timestamp field (timestamp bucketing).
    Bucket {
        /// The field the bucket comes from.
        field: &'static str,
        /// Number of buckets, 1 to 255.
        buckets: u8,
    },
}

impl Salt {
    /// Number of key ranges, 1 without a salt.
    pub const fn buckets(&self) -> u8 {
        match *self {
            Salt::None => 1,
            Salt::Hash { buckets } | Salt::Random { buckets } | Salt::Bucket { buckets, .. } => buckets,
        }
    }

    /// True if row keys start with a salt or bucket byte.
    pub const fn is_some(&self) -> bool {
        !matches!(self, Salt::None)
    }
}

/// The deterministic salt of a key whose salted bytes are `bytes`.
pub fn salt_of(bytes: &[u8], buckets: u8) -> u8 {
    (xxh3_64(bytes) % u64::from(buckets.max(1))) as u8
}

/// The bucket of a numeric value.
pub fn bucket_of(value: u64, buckets: u8) -> u8 {
    (value % u64::from(buckets.max(1))) as u8
}

/// A bucket for a write under a random salt: successive writes are spread evenly.
pub fn random_bucket(buckets: u8) -> u8 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    salt_of(&n.to_le_bytes(), buckets)
}
