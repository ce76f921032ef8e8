//! Waiting for asynchronous work from synchronous code.
//!
//! The `Store` API is synchronous; the gRPC client is not. Calls run as tasks on the
//! backend's own runtime and the calling thread parks until they finish. Unlike tokio's
//! `block_on`, parking works on any thread, an application's async worker included (it blocks
//! that worker, as any synchronous call does, but never panics).

use std::future::Future;
use std::pin::pin;
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

/// Runs `future` to completion on this thread, parking between polls. For futures whose work
/// happens elsewhere (a task's join handle, a channel's receiver).
pub(crate) fn wait<F: Future>(future: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut cx) {
            return value;
        }
        // A spurious wake-up only costs another poll.
        thread::park();
    }
}
