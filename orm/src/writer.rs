//! Writers of this process, and whether a write another writer left unfinished is abandoned.
//!
//! Multi-step writes (aggregate intents, index entries) leave state that names its writer: a
//! process instance and a writer serial within it. A later reader decides from that name
//! whether the writer can still act — and only then finishes or undoes its work:
//! - a writer of this process is gone once its [`Owner`] is dropped (also when its thread
//!   unwinds), and never before, however long it stalls;
//! - on a store only this process writes ([`Guarantees::single_process`]), a writer of another
//!   instance belonged to a process that has exited;
//! - on a shared store the liveness of another process cannot be seen: its writer holds a
//!   lease, and is taken for gone once its deadline has passed.

use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::store::Guarantees;

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
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

/// A random token, new on every call: no two writes share one.
pub(crate) fn token() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u64(instance());
    if let Ok(t) = SystemTime::now().duration_since(UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.finish()
}

/// Writers of this process at work right now, by serial.
static LIVE: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

/// A writer of this process, live while the value is: registered on creation, gone on drop.
pub(crate) struct Owner(pub(crate) u64);

impl Owner {
    pub(crate) fn new() -> Owner {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let serial = NEXT.fetch_add(1, Ordering::Relaxed);
        LIVE.lock().get_or_insert_with(HashSet::new).insert(serial);
        Owner(serial)
    }

    /// The name a write's state records: this process and this writer.
    pub(crate) fn name(&self) -> (u64, u64) {
        (instance(), self.0)
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        if let Some(live) = LIVE.lock().as_mut() {
            live.remove(&self.0);
        }
    }
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
