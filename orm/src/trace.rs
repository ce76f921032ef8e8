//! The `tracing` span of a repository call: `repository`, at DEBUG, with the operation, the
//! type and its table, and how the call ended. The store calls it makes (the `store` spans of
//! [`crate::store::Metered`]) nest under it, and it nests under the caller's span.
//!
//! Without a subscriber that wants it the span is never built: one check of the level the
//! installed subscribers want, and no clock read.

use std::future::Future;
use std::time::Instant;

use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::Result;

/// A repository call under way.
pub(crate) struct RepoCall {
    span: Span,
    /// When it started, only when the span is recorded.
    started: Option<Instant>,
    done: bool,
}

/// A call dropped before it ended (an async call's future dropped by a timeout or a
/// `select!`) says so.
impl Drop for RepoCall {
    fn drop(&mut self) {
        if !self.done {
            if let Some(started) = self.started {
                self.span.record("outcome", "cancelled");
                self.span.record("duration_us", started.elapsed().as_micros() as u64);
            }
        }
    }
}

/// A call `op` of the repository of `entity` (an entity, record or aggregate type) on `table`.
pub(crate) fn repo_call(op: &'static str, entity: &'static str, table: &str) -> RepoCall {
    let span = tracing::debug_span!(
        "repository",
        op,
        entity,
        table,
        index = Empty,
        keys = Empty,
        outcome = Empty,
        error = Empty,
        duration_us = Empty
    );
    let started = (!span.is_disabled()).then(Instant::now);
    RepoCall { span, started, done: false }
}

impl RepoCall {
    /// Notes how many keys or entities the call carries (`get_many`, `put_many`).
    pub(crate) fn keys(self, n: usize) -> Self {
        self.span.record("keys", n);
        self
    }

    /// Notes the index the call reads through.
    pub(crate) fn index(self, name: &'static str) -> Self {
        self.span.record("index", name);
        self
    }

    /// Runs `call` inside the span.
    pub(crate) fn run<T>(self, call: impl FnOnce() -> Result<T>) -> Result<T> {
        let result = self.span.in_scope(call);
        self.finish(&result);
        result
    }

    /// Runs `call` inside the span, entered at every poll.
    pub(crate) async fn run_async<T>(self, call: impl Future<Output = Result<T>>) -> Result<T> {
        let result = call.instrument(self.span.clone()).await;
        self.finish(&result);
        result
    }

    fn finish<T>(mut self, result: &Result<T>) {
        self.done = true;
        let Some(started) = self.started else { return };
        match result {
            Ok(_) => self.span.record("outcome", "ok"),
            Err(e) => self.span.record("outcome", "error").record("error", tracing::field::display(e)),
        };
        self.span.record("duration_us", started.elapsed().as_micros() as u64);
    }
}
