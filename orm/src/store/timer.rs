//! [`sleep`]: a pause for protocols run as futures (a reader waiting for another writer to
//! finish), on any executor or none. One thread of Cellar's, started when a future first
//! waits, wakes each sleeping future at its deadline; no thread is held while a future sleeps.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// A future that is ready once `pause` has passed.
pub(crate) fn sleep(pause: Duration) -> Sleep {
    Sleep { deadline: Instant::now() + pause, entry: None }
}

/// See [`sleep`].
pub(crate) struct Sleep {
    deadline: Instant,
    /// Its place among the timer's sleepers, once it has waited.
    entry: Option<(Instant, u64)>,
}

struct Timer {
    state: Mutex<State>,
    /// Signalled when a sleeper with an earlier deadline than all others arrives.
    earlier: Condvar,
}

#[derive(Default)]
struct State {
    sleepers: BTreeMap<(Instant, u64), Waker>,
    next: u64,
    running: bool,
}

fn timer() -> &'static Timer {
    static TIMER: OnceLock<Timer> = OnceLock::new();
    TIMER.get_or_init(|| Timer { state: Mutex::new(State::default()), earlier: Condvar::new() })
}

impl Timer {
    fn serve(&self) {
        let mut state = self.state.lock();
        loop {
            let now = Instant::now();
            let mut due = Vec::new();
            while let Some(entry) = state.sleepers.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                due.push(entry.remove());
            }
            if !due.is_empty() {
                drop(state);
                // A waker that panics must not stop the thread every sleeper depends on.
                for waker in due {
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| waker.wake()));
                }
                state = self.state.lock();
                continue;
            }
            match state.sleepers.keys().next().map(|(at, _)| *at) {
                Some(at) => {
                    self.earlier.wait_until(&mut state, at);
                }
                None => self.earlier.wait(&mut state),
            }
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            self.forget();
            return Poll::Ready(());
        }
        let shared = timer();
        let mut state = shared.state.lock();
        if !state.running {
            let started = std::thread::Builder::new().name("cellar-timer".into()).spawn(|| timer().serve());
            if started.is_err() {
                // No thread to wake it: wait here rather than never.
                drop(state);
                std::thread::sleep(self.deadline.saturating_duration_since(Instant::now()));
                return Poll::Ready(());
            }
            state.running = true;
        }
        let entry = match self.entry {
            Some(entry) => entry,
            None => {
                state.next += 1;
                (self.deadline, state.next)
            }
        };
        self.entry = Some(entry);
        let first = state.sleepers.keys().next().is_none_or(|first| entry <= *first);
        let replaced = state.sleepers.insert(entry, cx.waker().clone());
        if first {
            shared.earlier.notify_one();
        }
        // Dropped unlocked: dropping a waker may drop a task, and a sleep of that task takes
        // the lock.
        drop(state);
        drop(replaced);
        Poll::Pending
    }
}

impl Sleep {
    /// Leaves the timer's sleepers, if it is among them.
    fn forget(&mut self) {
        if let Some(entry) = self.entry.take() {
            // Dropped unlocked, as in `poll`.
            let waker = timer().state.lock().sleepers.remove(&entry);
            drop(waker);
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.forget();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::drive::drive;

    #[test]
    fn sleepers_wake_after_their_deadlines_and_a_dropped_one_is_forgotten() {
        let threads: Vec<_> = [30u64, 10, 20]
            .into_iter()
            .map(|ms| {
                std::thread::spawn(move || {
                    let started = Instant::now();
                    drive(sleep(Duration::from_millis(ms)));
                    (started.elapsed(), ms)
                })
            })
            .collect();
        let mut dropped = Box::pin(sleep(Duration::from_secs(3600)));
        assert!(dropped.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_pending());
        let entry = dropped.entry.expect("a pending sleep is among the sleepers");
        assert!(timer().state.lock().sleepers.contains_key(&entry));
        drop(dropped);
        assert!(!timer().state.lock().sleepers.contains_key(&entry));
        for t in threads {
            let (slept, ms) = t.join().unwrap();
            assert!(slept >= Duration::from_millis(ms), "{ms} ms asked, {slept:?} slept");
        }
    }
}
