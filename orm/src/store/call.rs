//! [`Call`]: the future an [`AsyncStore`](super::AsyncStore) method returns.
//!
//! A store that answers at once (the embedded engine called inline, for a synchronous caller)
//! returns a call that is already ready: no allocation, and the first poll returns the answer.
//! A store that waits on the network returns a boxed future. One type for both keeps
//! [`AsyncStore`](super::AsyncStore) object-safe without boxing every answer.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A boxed, sendable future borrowing for `'a`.
type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The answer to a store call, ready now or later. Awaiting it twice is a bug: a call already
/// answered panics when polled again, as futures may.
#[must_use = "a store call does nothing unless awaited"]
pub struct Call<'a, T>(State<'a, T>);

enum State<'a, T> {
    Ready(Option<T>),
    Later(Boxed<'a, T>),
}

impl<'a, T> Call<'a, T> {
    /// A call answered already.
    #[inline]
    pub fn ready(value: T) -> Self {
        Call(State::Ready(Some(value)))
    }

    /// A call answered when `future` completes.
    pub fn later(future: impl Future<Output = T> + Send + 'a) -> Self {
        Call(State::Later(Box::pin(future)))
    }
}

// The answer is moved out, never pinned in place; the boxed future is pinned on the heap.
impl<T> Unpin for Call<'_, T> {}

impl<T> Future for Call<'_, T> {
    type Output = T;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match &mut self.get_mut().0 {
            State::Ready(value) => Poll::Ready(value.take().expect("a store call polled after it was answered")),
            State::Later(future) => future.as_mut().poll(cx),
        }
    }
}

impl<T> std::fmt::Debug for Call<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.0 {
            State::Ready(Some(_)) => "ready",
            State::Ready(None) => "answered",
            State::Later(_) => "pending",
        };
        f.debug_tuple("Call").field(&state).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::drive::drive;

    #[test]
    fn a_ready_call_answers_on_the_first_poll() {
        let mut call = Call::ready(7);
        let waker = std::task::Waker::noop();
        assert_eq!(Pin::new(&mut call).poll(&mut Context::from_waker(waker)), Poll::Ready(7));
    }

    #[test]
    fn a_later_call_answers_what_its_future_does() {
        assert_eq!(drive(Call::later(async { 3 + 4 })), 7);
    }
}
