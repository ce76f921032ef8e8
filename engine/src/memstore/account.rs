//! [`MemAccount`]: the memory every memstore of an engine draws on. It meters the bytes live
//! memstores hold (the global memstore budget's meter), and keeps the full-size arena chunks
//! and skiplist segments of dropped memstores for the next ones to fill (HBase's MSLAB chunk
//! pool).
//!
//! Without the pool, a flushed memstore frees its memory, the background worker hands the
//! freed pages back to the operating system (see `heap`), and the memstore that replaces it
//! faults every page in again, on the writer's thread. Memory from the pool has its pages
//! resident. The pool holds at most a set number of bytes (the engine gives it one
//! memstore's worth, `memstore_flush_bytes`), and only as much as the global memstore budget
//! leaves beside the live memstores when chunks come back. A memstore takes from the pool
//! before it allocates, so the pool shrinks as memstores grow: memstores and pool together
//! stay within the budget, as memstores alone did.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::BytesMut;
use parking_lot::Mutex;

use super::list::Spares;
use super::MemCell;

/// The size of a pooled chunk: the largest the arenas use.
pub(crate) const CHUNK: usize = 512 * 1024;

/// The memstore memory of one engine; memstores hold it shared.
#[derive(Debug, Default)]
pub(crate) struct MemAccount {
    /// Bytes charged by live memstores.
    held: AtomicUsize,
    /// Emptied chunks of dropped memstores.
    spare: Mutex<Vec<BytesMut>>,
    /// Emptied skiplist segments of dropped memstores (lists take them themselves).
    segments: Arc<Mutex<Spares<MemCell>>>,
    /// Bytes the pool keeps at most, chunks and segments together.
    max_bytes: usize,
    /// The global memstore budget: the pool keeps no more than live memstores leave of it.
    budget: usize,
}

impl MemAccount {
    /// An account whose pool keeps up to `pool_bytes` (0: no pool), within what live
    /// memstores leave of `budget`.
    pub fn new(pool_bytes: usize, budget: usize) -> Arc<MemAccount> {
        Arc::new(MemAccount { max_bytes: pool_bytes, budget, ..MemAccount::default() })
    }

    /// The pool's skiplist segments, for a new memstore's list to take from.
    pub(super) fn segments(&self) -> Arc<Mutex<Spares<MemCell>>> {
        self.segments.clone()
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

    /// Takes the chunks and segments of a dropped memstore into the pool, as many as it keeps;
    /// the rest are freed. Each chunk must be the tail of a [`CHUNK`]-byte chunk that cells
    /// were cut from: with less than a chunk free, [`MemAccount::take_chunk`] reuses it only
    /// once nothing else holds its memory.
    pub(super) fn give_back(&self, mut chunks: Vec<BytesMut>, mut segments: Spares<MemCell>) {
        debug_assert!(chunks.iter().all(|c| c.capacity() < CHUNK), "only tails of filled chunks");
        let mut spare = self.spare.lock();
        let mut kept = self.segments.lock();
        let pooled = spare.len() * CHUNK + kept.bytes();
        let room = self.max_bytes.min(self.budget.saturating_sub(self.held())).saturating_sub(pooled);
        let excess = chunks.split_off((room / CHUNK).min(chunks.len()));
        let room = room - chunks.len() * CHUNK;
        spare.append(&mut chunks);
        kept.take_from(&mut segments, room);
        drop((spare, kept));
        // Freed without the locks: writers wait on them for memory.
        drop((excess, segments));
    }

    /// Pairs of skiplist segments in the pool.
    #[cfg(test)]
    pub(super) fn pooled_segments(&self) -> usize {
        self.segments.lock().pairs()
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
        account.give_back(vec![chunk], Spares::default());
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
        account.give_back(vec![free, held], Spares::default());
        let mut chunk = account.take_chunk().expect("the chunk nothing holds");
        chunk.put_bytes(3, CHUNK);
        assert!(account.take_chunk().is_none(), "the held one is dropped, not handed out");
        assert!(cut.iter().all(|&b| b == 1));
    }

    #[test]
    fn the_pool_keeps_what_it_was_sized_for() {
        let account = MemAccount::new(2 * CHUNK, usize::MAX);
        account.give_back((0..5).map(|i| filled_chunk(i).0).collect(), Spares::default());
        assert_eq!(account.pooled(), 2);
        // Live memstores hold all but a chunk and a half of the budget: one chunk comes back.
        let tight = MemAccount::new(8 * CHUNK, 10 * CHUNK);
        tight.charge(8 * CHUNK + CHUNK / 2);
        tight.give_back((0..5).map(|i| filled_chunk(i).0).collect(), Spares::default());
        assert_eq!(tight.pooled(), 1);
        let none = MemAccount::new(0, usize::MAX);
        none.give_back(vec![filled_chunk(1).0], Spares::default());
        assert_eq!(none.pooled(), 0);
    }
}
