//! The memstore's row index: where each row starts in the skiplist, by a hash of the row key.
//!
//! A point read (and a scan starting at a row) would otherwise search down the list, and in a
//! memstore larger than the caches every hop of that search is a cache miss. The index keeps,
//! per row, the handle of the row's first item (a cell or a run). It stores no key: the row's
//! bytes are in the item the handle leads to, so a lookup checks them there (a different row
//! that hashes alike is then told apart), and two rows that hash alike share a slot marked [`SHARED`], whose
//! lookups fall back to the search. No allocation per row, nothing for a dropped memstore to
//! leave scattered over the heap.

use std::collections::hash_map::{Entry, HashMap};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};

use parking_lot::RwLock;

/// A slot that more than one row hashes to.
const SHARED: u32 = u32::MAX;

/// Bytes per bucket of the table: the key, the handle and a control byte.
const BUCKET_BYTES: usize = std::mem::size_of::<(u64, u32)>() + 1;

/// Where a lookup says a row starts.
pub(crate) enum Start {
    /// At the item with this handle, if that item is of the row; if not, the memstore does not
    /// hold the row.
    At(u32),
    /// The memstore does not hold the row.
    Absent,
    /// Unknown here (rows sharing a slot): search the list.
    Unknown,
}

/// Row hash -> the handle of the row's first item.
#[derive(Default)]
pub(crate) struct RowIndex {
    /// Keyed per index, so which rows share a slot cannot be chosen from outside.
    hasher: RandomState,
    slots: RwLock<HashMap<u64, u32, BuildHasherDefault<Prehashed>>>,
}

impl std::fmt::Debug for RowIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowIndex").field("slots", &self.slots.read().len()).finish()
    }
}

impl RowIndex {
    /// Records that the item `handle` now leads `row`; `row_of(h)` reads the row the item
    /// with handle `h` belongs to. Returns the bytes the table grew by (it grows by doubling,
    /// and readers wait while it does: a copy of its buckets, no key hashed again). Called by
    /// the one writer.
    pub fn lead<'a>(&self, row: &[u8], handle: u32, row_of: impl Fn(u32) -> Option<&'a [u8]>) -> usize {
        let hash = self.hasher.hash_one(row);
        let mut slots = self.slots.write();
        let before = table_bytes(slots.capacity());
        match slots.entry(hash) {
            Entry::Vacant(slot) => {
                slot.insert(handle);
            }
            Entry::Occupied(mut slot) => {
                let led = *slot.get();
                if led != SHARED {
                    *slot.get_mut() = if row_of(led) == Some(row) { handle } else { SHARED };
                }
            }
        }
        table_bytes(slots.capacity()) - before
    }

    /// Where `row` starts.
    pub fn find(&self, row: &[u8]) -> Start {
        match self.slots.read().get(&self.hasher.hash_one(row)) {
            None => Start::Absent,
            Some(&SHARED) => Start::Unknown,
            Some(&handle) => Start::At(handle),
        }
    }
}

/// Bytes of a table that holds `capacity` slots (at most seven eighths of its buckets).
fn table_bytes(capacity: usize) -> usize {
    capacity.div_ceil(7) * 8 * BUCKET_BYTES
}

/// The table's hasher: its keys are hashes already.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is called (the keys are `u64`); fold anything else in all the same.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_that_share_a_slot_fall_back_to_the_search() {
        let index = RowIndex::default();
        let rows: [&[u8]; 2] = [b"a", b"b"];
        let row_of = |h: u32| rows.get(h as usize).copied();
        assert!(matches!(index.find(b"a"), Start::Absent));
        assert!(index.lead(b"a", 0, row_of) > 0, "the table is charged as it grows");
        assert!(matches!(index.find(b"a"), Start::At(0)));
        // A new first cell of the same row moves the slot, and costs nothing more.
        assert_eq!(index.lead(b"a", 0, row_of), 0);
        assert!(matches!(index.find(b"a"), Start::At(0)));

        // Force two rows into one slot, as a hash collision would.
        let shared = RowIndex::default();
        let hash = shared.hasher.hash_one(&b"a"[..]);
        shared.slots.write().insert(hash, 1);
        assert_eq!(shared.lead(b"a", 0, row_of), 0, "slot 1 leads row b, not a");
        assert!(matches!(shared.find(b"a"), Start::Unknown));
        shared.lead(b"a", 0, row_of);
        assert!(matches!(shared.find(b"a"), Start::Unknown), "a shared slot stays shared");
    }
}
