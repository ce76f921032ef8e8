//! [`MemAccount`]: the memory every memstore of an engine draws on. It meters the bytes live
//! memstores hold (the global memstore budget's meter), and keeps the full-size arena chunks of
//! dropped memstores for the next ones to fill (HBase's MSLAB chunk pool).
//!
//! Without the pool, a flushed memstore frees its chunks, the background worker hands the freed
//! pages back to the operating system (see `heap`), and the memstore that replaces it faults
//! every page of its chunks in again, on the writer's thread. A chunk from the pool has its
//! pages resident. The pool holds at most a set number of bytes (the engine gives it one
//! memstore's worth, `memstore_flush_bytes`), and only as much as the global memstore budget
//! leaves beside the live memstores when chunks come back. A memstore takes from the pool
//! before it allocates, so the pool shrinks as memstores grow: memstores and pool together
//! stay within the budget, as memstores alone did.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::BytesMut;
use parking_lot::Mutex;

/// The size of a pooled chunk: the largest the arenas use.
pub(crate) const CHUNK: usize = 512 * 1024;

/// The memstore memory of one engine; memstores hold it shared.
#[derive(Debug, Default)]
pub(crate) struct MemAccount {
    /// Bytes charged by live memstores.
    held: AtomicUsize,
    /// Emptied chunks of dropped memstores.
    spare: Mutex<Vec<BytesMut>>,
    /// Chunks the pool keeps at most.
    max_chunks: usize,
    /// The global memstore budget: the pool keeps no more than live memstores leave of it.
    budget: usize,
}

impl MemAccount {
    /// An account whose pool keeps up to `pool_bytes` of chunks (0: no pool), within what
    /// live memstores leave of `budget`.
    pub fn new(pool_bytes: usize, budget: usize) -> Arc<MemAccount> {
        Arc::new(MemAccount { max_chunks: pool_bytes / CHUNK, budget, ..MemAccount::default() })
    }

    /// Bytes held by live memstores.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    pub(super) fn charge(&self, bytes: usize) {
        self.held.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(super) fn discharge(&self, bytes: usize) {
        self.held.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// An empty chunk of [`CHUNK`] bytes from the pool, if it has one nobody else holds.
    pub(super) fn take_chunk(&self) -> Option<BytesMut> {
        let mut spare = self.spare.lock();
        while let Some(mut chunk) = spare.pop() {
            chunk.clear();
            if chunk.try_reclaim(CHUNK) {
                return Some(chunk);
            }
            // A slice of it is still held somewhere: it is freed when that goes.
        }
        None
    }

    /// Takes the chunks of a dropped memstore into the pool, as many as it keeps; the rest are
    /// freed. Each must be the tail of a [`CHUNK`]-byte chunk that cells were cut from: with
    /// less than a chunk free, [`MemAccount::take_chunk`] reuses it only once nothing else
    /// holds its memory.
    pub(super) fn give_back(&self, mut chunks: Vec<BytesMut>) {
        debug_assert!(chunks.iter().all(|c| c.capacity() < CHUNK), "only tails of filled chunks");
        let mut spare = self.spare.lock();
        let free = self.budget.saturating_sub(self.held() + spare.len() * CHUNK) / CHUNK;
        let room = self.max_chunks.saturating_sub(spare.len()).min(free);
        let excess = chunks.split_off(room.min(chunks.len()));
        spare.append(&mut chunks);
        drop(spare);
        // Freed without the lock: writers wait on it for chunks.
        drop(excess);
    }

    /// Chunks in the pool.
    #[cfg(test)]
    pub(super) fn pooled(&self) -> usize {
        self.spare.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use bytes::BufMut;

    use super::*;

    fn filled_chunk(byte: u8) -> (BytesMut, bytes::Bytes) {
        let mut chunk = BytesMut::with_capacity(CHUNK);
        chunk.put_bytes(byte, 1000);
        let cut = chunk.split().freeze();
        (chunk, cut)
    }

    #[test]
    fn a_chunk_comes_back_whole_once_nothing_cut_from_it_is_held() {
        let account = MemAccount::new(4 * CHUNK, usize::MAX);
        let (chunk, cut) = filled_chunk(1);
        let base = cut.as_ptr();
        account.give_back(vec![chunk]);
        drop(cut);
        let mut again = account.take_chunk().expect("a pooled chunk");
        assert_eq!((again.len(), again.capacity()), (0, CHUNK));
        again.put_u8(9);
        assert_eq!(again.as_ptr(), base, "the same memory, from its start");
        assert!(account.take_chunk().is_none());
    }

    #[test]
    fn a_chunk_still_cut_from_is_not_reused_and_its_cells_stay_intact() {
        let account = MemAccount::new(4 * CHUNK, usize::MAX);
        let (held, cut) = filled_chunk(1);
        let (free, cut_free) = filled_chunk(2);
        drop(cut_free);
        account.give_back(vec![free, held]);
        let mut chunk = account.take_chunk().expect("the chunk nothing holds");
        chunk.put_bytes(3, CHUNK);
        assert!(account.take_chunk().is_none(), "the held one is dropped, not handed out");
        assert!(cut.iter().all(|&b| b == 1));
    }

    #[test]
    fn the_pool_keeps_what_it_was_sized_for() {
        let account = MemAccount::new(2 * CHUNK, usize::MAX);
        account.give_back((0..5).map(|i| filled_chunk(i).0).collect());
        assert_eq!(account.pooled(), 2);
        // Live memstores hold all but a chunk and a half of the budget: one chunk comes back.
        let tight = MemAccount::new(8 * CHUNK, 10 * CHUNK);
        tight.charge(8 * CHUNK + CHUNK / 2);
        tight.give_back((0..5).map(|i| filled_chunk(i).0).collect());
        assert_eq!(tight.pooled(), 1);
        let none = MemAccount::new(0, usize::MAX);
        none.give_back(vec![filled_chunk(1).0]);
        assert_eq!(none.pooled(), 0);
    }
}
