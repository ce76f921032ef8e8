//! The read points open readers hold, per region, so a writer knows which versions no reader
//! can still see (the memstore drops those; see [`crate::memstore`]).
//!
//! A reader pins a lower bound of its read point *before* taking the read point itself: the
//! region's visible sequence number at that moment. Its read point is at least that, since the
//! visible sequence number only grows. A writer asks for [`ReadPins::oldest`] while holding the
//! region's write lock, so the visible sequence number cannot move under it; a reader that pins
//! later pins at least that number. Either way every reader's read point is at or above what
//! the writer was told. The pins sit behind one small mutex: pinning costs two uncontended
//! lock round trips per read, and the writer takes the lock only when it has versions to drop.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// The pinned read points of one region's open readers.
#[derive(Debug, Default)]
pub(crate) struct ReadPins {
    /// `(read point, readers holding it)`: few entries, as few as readers run at once.
    held: Mutex<Vec<(u64, u32)>>,
}

impl ReadPins {
    /// Pins the current value of `visible_seq` until the returned guard drops.
    pub fn pin(self: &Arc<Self>, visible_seq: &AtomicU64) -> ReadPin {
        let mut held = self.held.lock();
        let point = visible_seq.load(Ordering::SeqCst);
        match held.iter_mut().find(|(p, _)| *p == point) {
            Some((_, n)) => *n += 1,
            None => held.push((point, 1)),
        }
        ReadPin { pins: self.clone(), point }
    }

    /// The oldest read point any open or future reader of the region can hold, given the
    /// region's current visible sequence number. The caller holds the region's write lock.
    pub fn oldest(&self, visible_seq: u64) -> u64 {
        self.held.lock().iter().map(|(p, _)| *p).fold(visible_seq, u64::min)
    }

    fn unpin(&self, point: u64) {
        let mut held = self.held.lock();
        if let Some(i) = held.iter().position(|(p, _)| *p == point) {
            held[i].1 -= 1;
            if held[i].1 == 0 {
                held.swap_remove(i);
            }
        }
    }
}

/// A reader's pin; unpins on drop.
#[derive(Debug)]
pub(crate) struct ReadPin {
    pins: Arc<ReadPins>,
    point: u64,
}

impl Drop for ReadPin {
    fn drop(&mut self) {
        self.pins.unpin(self.point);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_pin_holds_back_writers_until_it_drops() {
        let pins = Arc::new(ReadPins::default());
        let seq = AtomicU64::new(5);
        assert_eq!(pins.oldest(5), 5, "no readers: everything published is seen by all");
        let a = pins.pin(&seq);
        let b = pins.pin(&seq);
        seq.store(9, Ordering::SeqCst);
        let c = pins.pin(&seq);
        assert_eq!(pins.oldest(9), 5);
        drop(a);
        assert_eq!(pins.oldest(9), 5, "a second reader still holds 5");
        drop(b);
        assert_eq!(pins.oldest(9), 9);
        drop(c);
        assert_eq!(pins.oldest(12), 12);
        assert!(pins.held.lock().is_empty());
    }
}
