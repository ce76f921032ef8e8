//! Writers of this process, and whether a write another writer left unfinished is abandoned.
//!
//! Multi-step writes (aggregate intents, index entries) leave state that names its writer: a
//! process instance and a writer serial within it. A later reader decides from that name
//! whether the writer can still act — and only then finishes or undoes its work:
//! - a writer of this process is gone once its [`Owner`] is dropped (also when its thread
//!   unwinds), and never before, however long it stalls; a writer that acts through
//!   [`Owner::acting`] (an aggregate intent's) stays live, besides, until the store calls it
//!   started have ended (index writers need not: readers fence their rows before settling);
//! - on a store only this process writes ([`Guarantees::single_process`]), a writer of another
//!   instance belonged to a process that has exited;
//! - on a shared store the liveness of another process cannot be seen: its writer holds a
//!   lease, and is taken for gone once its deadline has passed.

use std::cell::RefCell;
use std::collections::HashSet;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::pin::pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::store::Guarantees;

/// How far this process's clock is shifted from the system's, in milliseconds: zero, but for
/// tests of a writer whose clock runs ahead or behind (see [`skew_clock`]).
static SKEW_MS: AtomicI64 = AtomicI64::new(0);

/// Milliseconds since the Unix epoch, on this process's clock: leases and client-stamped
/// writes read it.
pub(crate) fn now_ms() -> u64 {
    let wall = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    wall.saturating_add_signed(SKEW_MS.load(Ordering::Relaxed))
}

/// Shifts this process's clock by `offset_ms` (negative: behind), as a machine whose clock is
/// wrong would see it: lease deadlines and client timestamps follow it. For tests of what a
/// skewed clock may change (when another process takes over a write) and may not (whether an
/// answer is right).
#[cfg(feature = "test-util")]
pub fn skew_clock(offset_ms: i64) {
    SKEW_MS.store(offset_ms, Ordering::Relaxed);
}

/// This process among all that write the store: random per process.
pub(crate) fn instance() -> u64 {
    static ID: OnceLock<u64> = OnceLock::new();
    *ID.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
        h.finish()
    })
}

/// A random token, new on every call: no two writes share one. This process's random
/// [`instance`] plus a counter, through a bijective mix (splitmix64's finalizer): tokens of one
/// process never repeat, and two processes' meet only by 64-bit chance.
pub(crate) fn token() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut z = instance().wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Writers of this process at work right now, by serial.
static LIVE: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

thread_local! {
    /// The writer whose future is being polled on this thread, if any (see [`Owner::acting`]).
    static ACTING: RefCell<Option<Arc<Live>>> = const { RefCell::new(None) };
}

/// A writer's registration in [`LIVE`]: removed when the last holder lets go — its [`Owner`],
/// and every store call it started that is still running (see [`keep_alive`]).
pub(crate) struct Live(u64);

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(live) = LIVE.lock().as_mut() {
            live.remove(&self.0);
        }
    }
}

/// A writer of this process, live while the value is — and, once it is dropped, until every
/// store call it started has ended: a call already running on another thread when the
/// writer's future is dropped may still apply, and a reader that took the writer for gone
/// before it did could have its work overwritten.
pub(crate) struct Owner(Arc<Live>);

impl Owner {
    pub(crate) fn new() -> Owner {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let serial = NEXT.fetch_add(1, Ordering::Relaxed);
        LIVE.lock().get_or_insert_with(HashSet::new).insert(serial);
        Owner(Arc::new(Live(serial)))
    }

    /// The name a write's state records: this process and this writer.
    pub(crate) fn name(&self) -> (u64, u64) {
        (instance(), self.0 .0)
    }

    /// `future`, polled as this writer: every store call it starts that runs apart from its
    /// caller (on Cellar's blocking pool, as a task of a client's runtime) keeps the writer
    /// live until it ends, whether or not the future is still there to see the answer.
    pub(crate) async fn acting<F: Future>(&self, future: F) -> F::Output {
        let mut future = pin!(future);
        std::future::poll_fn(|cx| {
            let _scope = Scope(ACTING.with(|acting| acting.replace(Some(self.0.clone()))));
            future.as_mut().poll(cx)
        })
        .await
    }
}

/// Restores the writer acting before a poll, also when the poll unwinds.
struct Scope(Option<Arc<Live>>);

impl Drop for Scope {
    fn drop(&mut self) {
        let before = self.0.take();
        ACTING.with(|acting| *acting.borrow_mut() = before);
    }
}

/// The writer acting on this thread (see [`Owner::acting`]), for a store call to hold while
/// it runs apart from its caller: the writer stays live until the call ends.
pub(crate) fn keep_alive() -> Option<Arc<Live>> {
    ACTING.with(|acting| acting.borrow().clone())
}

/// True if the writer `owner` (instance, serial), whose lease ends at `deadline_ms`, can no
/// longer act on a store with `guarantees` (see the module docs).
pub(crate) fn gone(owner: (u64, u64), deadline_ms: u64, guarantees: Guarantees) -> bool {
    let (owner_instance, serial) = owner;
    if owner_instance == instance() {
        !LIVE.lock().as_ref().is_some_and(|live| live.contains(&serial))
    } else if guarantees.single_process {
        true
    } else {
        now_ms() >= deadline_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_do_not_repeat_and_spread_over_all_bits() {
        let tokens: Vec<u64> = (0..100_000).map(|_| token()).collect();
        let distinct: HashSet<u64> = tokens.iter().copied().collect();
        assert_eq!(distinct.len(), tokens.len());
        // Consecutive counters give unrelated tokens: every bit is set in some and clear in others.
        let (any, all) = tokens.iter().fold((0u64, u64::MAX), |(any, all), t| (any | t, all & t));
        assert_eq!((any, all), (u64::MAX, 0));
    }
}
