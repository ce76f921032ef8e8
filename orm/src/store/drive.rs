//! Running a future to completion on the calling thread: how the synchronous API runs the
//! protocols it shares with the asynchronous one.
//!
//! Over a store that answers inline every call is ready, so [`drive`] finishes in one poll
//! with a no-op waker: no allocation, no thread handle. A future that is not ready (a call
//! waiting on the network) parks the thread until it is woken. Unlike tokio's `block_on`,
//! parking works on any thread, an application's async worker included (it blocks that
//! worker, as any synchronous call does, but never panics).

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `future` to completion on this thread: one poll if it is ready at once, otherwise
/// parking between polls until it is. The first poll is inlined, so that a synchronous call
/// builds its state machine where it is polled instead of copying it around.
#[inline]
pub(crate) fn drive<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(value) => value,
        Poll::Pending => park_until_ready(future),
    }
}

/// Polls `future` with a waker that unparks this thread, parking between polls.
#[inline(never)]
fn park_until_ready<F: Future>(mut future: Pin<&mut F>) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut cx) {
            return value;
        }
        // A spurious wake-up only costs another poll.
        thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_future_woken_from_another_thread_completes() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = done.clone();
        let waiting = std::future::poll_fn(move |cx| {
            if flag.load(std::sync::atomic::Ordering::SeqCst) {
                return Poll::Ready(42);
            }
            let (waker, tx) = (cx.waker().clone(), tx.clone());
            let flag = flag.clone();
            thread::spawn(move || {
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                waker.wake();
                let _ = tx.send(());
            });
            Poll::Pending
        });
        assert_eq!(drive(waiting), 42);
        assert!(done.load(std::sync::atomic::Ordering::SeqCst));
        drop(rx);
    }
}
