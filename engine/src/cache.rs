//! The shared block cache: decoded data blocks of every SSTable, bounded by a byte budget.
//!
//! Sharded CLOCK: each shard keeps its blocks in a ring with a reference counter that a hit
//! raises and the sweeping hand lowers; the hand evicts blocks whose counter is zero. Blocks of
//! in-memory families get a higher counter, so they survive more sweeps.
//!
//! The budget also covers what open SSTables keep resident (index, bloom filter, meta): files
//! pin those bytes while open, and blocks get what remains. So the block-cache budget bounds
//! all file-derived memory, as RocksDB's does with index and filter blocks charged to its cache.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::sst::block::Block;

const SHARDS: usize = 16;

/// Bytes of bookkeeping per cached block: its map entry (with the table's spare capacity) and
/// its ring slot.
const ENTRY_OVERHEAD: usize =
    2 * (std::mem::size_of::<Key>() + std::mem::size_of::<Entry>()) + std::mem::size_of::<Key>();

/// Cache key: (file id, block offset).
type Key = (u64, u64);

/// Hashes the two integers of a [`Key`] with a multiply-rotate mix: a lookup happens for every
/// block a read touches, and SipHash's resistance to chosen keys buys nothing here.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        // Fold the well-mixed high bits down: block offsets are multiples of the block size,
        // and the table picks buckets by the low bits.
        self.0 ^ (self.0 >> 32)
    }

    fn write(&mut self, bytes: &[u8]) {
        bytes.iter().for_each(|&b| self.write_u64(u64::from(b)));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7C_C1_B7_27_22_0A_95);
    }
}

struct Entry {
    block: Arc<Block>,
    charge: usize,
    refs: u8,
}

/// One shard: its blocks keyed by file and offset, and the CLOCK ring of their keys. A hit
/// touches only the map's entry; the ring is walked only to evict.
#[derive(Default)]
struct Shard {
    map: HashMap<Key, Entry, BuildHasherDefault<KeyHasher>>,
    ring: Vec<Key>,
    hand: usize,
    used: usize,
    hits: u64,
    misses: u64,
}

impl Shard {
    fn evict_until(&mut self, capacity: usize) {
        while self.used > capacity && !self.ring.is_empty() {
            if self.hand >= self.ring.len() {
                self.hand = 0;
            }
            let key = self.ring[self.hand];
            match self.map.get_mut(&key) {
                Some(e) if e.refs > 0 => {
                    e.refs -= 1;
                    self.hand += 1;
                }
                found => {
                    self.used -= found.map_or(0, |e| e.charge);
                    self.map.remove(&key);
                    self.ring.swap_remove(self.hand);
                }
            }
        }
    }

    fn remove_file(&mut self, file_id: u64) {
        let map = &mut self.map;
        let mut freed = 0;
        self.ring.retain(|key| {
            if key.0 != file_id {
                return true;
            }
            freed += map.remove(key).map_or(0, |e| e.charge);
            false
        });
        self.used -= freed;
    }
}

/// Cache hit and miss counts, and how the budget is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Reads' block lookups served from the cache. One-pass reads that do not fill the cache
    /// (compactions, copies) are not counted: they would bury the reads' hit rate under a
    /// pass over every block of their files.
    pub hits: u64,
    /// Reads' block lookups that had to read the file.
    pub misses: u64,
    /// Bytes of cached blocks.
    pub used_bytes: u64,
    /// Bytes open files keep resident (indexes, bloom filters), charged to the same budget.
    pub pinned_bytes: u64,
    /// The budget.
    pub capacity_bytes: u64,
}

impl CacheStats {
    /// The share of block lookups served from the cache, from 0 to 1 (0 before any lookup).
    ///
    /// ```
    /// use cellar_engine::CacheStats;
    /// let stats = CacheStats { hits: 3, misses: 1, ..CacheStats::default() };
    /// assert_eq!(stats.hit_ratio(), 0.75);
    /// assert_eq!(CacheStats::default().hit_ratio(), 0.0);
    /// ```
    pub fn hit_ratio(&self) -> f64 {
        let lookups = self.hits.saturating_add(self.misses);
        if lookups == 0 {
            0.0
        } else {
            self.hits as f64 / lookups as f64
        }
    }
}

/// A byte-budgeted cache of decoded blocks shared by all tables.
pub struct BlockCache {
    shards: Vec<Mutex<Shard>>,
    shard_capacity: usize,
    pinned: AtomicUsize,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache").field("stats", &self.stats()).finish()
    }
}

impl BlockCache {
    /// A cache holding up to `capacity_bytes` of blocks.
    pub fn new(capacity_bytes: usize) -> Self {
        BlockCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            shard_capacity: capacity_bytes / SHARDS,
            pinned: AtomicUsize::new(0),
        }
    }

    fn shard(&self, key: &Key) -> &Mutex<Shard> {
        let h = key.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ key.1.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
        &self.shards[(h >> 59) as usize % SHARDS]
    }

    /// Charges `bytes` of file metadata to the budget until [`BlockCache::unpin`]; blocks are
    /// evicted to make room as shards next take an insert.
    pub(crate) fn pin(&self, bytes: usize) {
        self.pinned.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn unpin(&self, bytes: usize) {
        self.pinned.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// What one shard may hold in blocks: its share of the budget less its share of the pins.
    fn block_capacity(&self) -> usize {
        self.shard_capacity.saturating_sub(self.pinned.load(Ordering::Relaxed) / SHARDS)
    }

    pub(crate) fn get(&self, file_id: u64, offset: u64, in_memory: bool) -> Option<Arc<Block>> {
        let key = (file_id, offset);
        let mut shard = self.shard(&key).lock();
        // Counted inside the shard lock: a global counter would be one more cache line every
        // reader thread writes.
        match shard.map.get_mut(&key) {
            Some(e) => {
                e.refs = if in_memory { 3 } else { 1 };
                let block = e.block.clone();
                shard.hits += 1;
                Some(block)
            }
            None => {
                shard.misses += 1;
                None
            }
        }
    }

    /// The cached block at `offset` of `file_id`, for a one-pass read: neither counted in the
    /// stats nor marked as used, so a compaction passing over a file keeps no block alive.
    pub(crate) fn peek(&self, file_id: u64, offset: u64) -> Option<Arc<Block>> {
        let key = (file_id, offset);
        self.shard(&key).lock().map.get(&key).map(|e| e.block.clone())
    }

    pub(crate) fn insert(&self, file_id: u64, offset: u64, block: Arc<Block>, in_memory: bool) {
        // The map entry and ring slot that track the block are charged too: at 4 KiB blocks
        // they are a few percent of the budget.
        let charge = block.charge() + ENTRY_OVERHEAD;
        let capacity = self.block_capacity();
        if charge > capacity {
            return;
        }
        let key = (file_id, offset);
        let mut shard = self.shard(&key).lock();
        if shard.map.contains_key(&key) {
            return;
        }
        shard.evict_until(capacity - charge);
        shard.used += charge;
        shard.ring.push(key);
        shard.map.insert(key, Entry { block, charge, refs: if in_memory { 2 } else { 0 } });
    }

    /// Drops every block of `file_id` (after the file is deleted).
    pub(crate) fn evict_file(&self, file_id: u64) {
        for s in &self.shards {
            s.lock().remove_file(file_id);
        }
    }

    /// Hit/miss counts and usage.
    pub fn stats(&self) -> CacheStats {
        let mut stats = CacheStats {
            pinned_bytes: self.pinned.load(Ordering::Relaxed) as u64,
            capacity_bytes: (self.shard_capacity * SHARDS) as u64,
            ..CacheStats::default()
        };
        for s in &self.shards {
            let s = s.lock();
            stats.hits += s.hits;
            stats.misses += s.misses;
            stats.used_bytes += s.used as u64;
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sst::block::EntryKeys;
    use std::path::Path;

    fn block(n: usize) -> Arc<Block> {
        let mut raw = vec![0u8; n];
        raw.extend_from_slice(&0u32.to_le_bytes());
        raw.extend_from_slice(&1u32.to_le_bytes());
        Arc::new(Block::parse(raw.into(), EntryKeys::SharedTails, &Arc::from(Path::new("t")), 0).unwrap())
    }

    #[test]
    fn stays_within_budget_and_counts_hits() {
        let cache = BlockCache::new(16 * 10_000);
        for i in 0..1000 {
            cache.insert(1, i, block(1000), false);
        }
        let s = cache.stats();
        assert!(s.used_bytes <= s.capacity_bytes, "{s:?}");
        assert!(s.used_bytes > 0);
        cache.insert(2, 0, block(100), true);
        assert!(cache.get(2, 0, true).is_some());
        assert!(cache.get(3, 0, false).is_none());
        let s = cache.stats();
        assert_eq!((s.hits, s.misses), (1, 1));
        let before = cache.stats().used_bytes;
        cache.evict_file(2);
        assert!(cache.get(2, 0, true).is_none());
        let charge = block(100).charge() + ENTRY_OVERHEAD;
        assert_eq!(cache.stats().used_bytes, before - charge as u64, "the file's block is uncharged");
        cache.evict_file(1);
        assert_eq!(cache.stats().used_bytes, 0);
    }

    /// A one-pass read's lookup (`peek`) is not counted and leaves a block as unused as it
    /// was: a block only it touched goes at the next eviction, one a read touched stays.
    #[test]
    fn peeks_neither_count_nor_keep_blocks() {
        let flood = |cache: &BlockCache| {
            for i in 1..=200 {
                cache.insert(1, i, block(1000), false);
            }
        };
        let (read, peeked) = (BlockCache::new(16 * 10_000), BlockCache::new(16 * 10_000));
        for cache in [&read, &peeked] {
            cache.insert(1, 0, block(1000), false);
        }
        assert!(read.get(1, 0, false).is_some());
        assert!(peeked.peek(1, 0).is_some());
        assert!(peeked.peek(1, 999).is_none());
        assert_eq!((peeked.stats().hits, peeked.stats().misses), (0, 0), "peeks are not counted");
        flood(&read);
        flood(&peeked);
        assert!(read.peek(1, 0).is_some(), "the block a read used survives a sweep");
        assert!(peeked.peek(1, 0).is_none(), "the block only peeked at is evicted first");
    }

    /// Pinned file metadata takes its share of the budget from blocks, and gives it back.
    #[test]
    fn pinned_bytes_shrink_the_room_for_blocks() {
        let cache = BlockCache::new(16 * 10_000);
        cache.pin(16 * 6_000);
        for i in 0..1000 {
            cache.insert(1, i, block(1000), false);
        }
        let s = cache.stats();
        assert_eq!(s.pinned_bytes, 16 * 6_000);
        assert!(s.used_bytes + s.pinned_bytes <= s.capacity_bytes, "{s:?}");
        assert!(s.used_bytes > 0);
        cache.unpin(16 * 6_000);
        for i in 1000..2000 {
            cache.insert(1, i, block(1000), false);
        }
        let after = cache.stats();
        assert_eq!(after.pinned_bytes, 0);
        assert!(after.used_bytes > s.used_bytes, "{after:?} vs {s:?}");
        assert!(after.used_bytes <= after.capacity_bytes);
    }
}
