//! When a failed call is tried again, and how long it waits first.
//!
//! * **What may be repeated.** A call is repeated only if repeating it cannot change what it
//!   did: reads, and MutateRows entries (Cellar gives every cell an explicit timestamp, so a
//!   repeated entry writes the same cells again). Check-and-mutate and read-modify-write are
//!   never repeated: a transient failure of one (the connection broke after it was sent) is an
//!   [`Error::Indeterminate`], which says the call may or may not have applied.
//! * **Which failures.** Those that say nothing was wrong with the request: `Unavailable`,
//!   `DeadlineExceeded`, `Aborted`, a stream the server's front end reset (`Internal` with
//!   RST_STREAM), and `Unknown` or `Cancelled` made by the transport rather than sent by the
//!   server (a connection reset or closed, as Bigtable's front ends do about once an hour).
//! * **How long to wait.** Exponential backoff with full jitter (a uniformly random wait up to
//!   10 ms doubling per attempt to at most 1 s), so clients that failed together do not come
//!   back together; when the server says how long to wait (`google.rpc.RetryInfo` in the
//!   status details), that long instead.
//! * **Until when.** Up to [`MAX_ATTEMPTS`] attempts, and never past the operation deadline
//!   ([`BigtableOptions::operation_timeout`](super::BigtableOptions)): no wait that would end
//!   after it starts, and no attempt runs past it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use googleapis_tonic_google_rpc::google::rpc;
use prost::Message;
use tonic::{Code, Status};

use super::client::{Ctx, Rpc};
use crate::repo::printable;
use crate::Error;

/// Attempts of one call at most, the first included.
pub(crate) const MAX_ATTEMPTS: u32 = 10;
/// The backoff's first cap and its ceiling.
const INITIAL_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// How long a call may keep trying.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    /// All attempts and waits of one call together.
    pub operation_timeout: Duration,
}

impl RetryPolicy {
    pub(crate) fn new(operation_timeout: Duration) -> RetryPolicy {
        RetryPolicy { operation_timeout }
    }

    /// The retry state of a call starting now.
    pub(crate) fn start(&self) -> Retry {
        Retry { deadline: Instant::now() + self.operation_timeout, attempts: 1 }
    }
}

/// The retry state of one call: its deadline and the attempts made.
#[derive(Debug)]
pub(crate) struct Retry {
    deadline: Instant,
    attempts: u32,
}

impl Retry {
    /// How long the call has left.
    pub(crate) fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// After a failed attempt: how long to wait before the next, or `None` if the call must
    /// fail with `status` (a failure that is not transient, the attempts used up, or a wait
    /// that would end past the deadline).
    ///
    /// Reports each retry as an INFO event (`retrying`) and a call that gives up after
    /// retrying as a WARN (`giving up`), in the span of the call (the metered store's, whose
    /// `attempts` field it sets).
    pub(crate) fn after(&mut self, status: &Status) -> Option<Duration> {
        if !transient(status) {
            return None;
        }
        let wait = server_delay(status).unwrap_or_else(|| full_jitter(self.attempts));
        if self.attempts >= MAX_ATTEMPTS || wait >= self.remaining() {
            if self.attempts > 1 {
                tracing::warn!(
                    attempts = self.attempts,
                    code = ?status.code(),
                    error = status.message(),
                    "giving up"
                );
            }
            return None;
        }
        self.attempts += 1;
        tracing::Span::current().record("attempts", self.attempts);
        tracing::info!(
            attempt = self.attempts,
            wait_ms = wait.as_millis() as u64,
            code = ?status.code(),
            error = status.message(),
            "retrying"
        );
        #[cfg(feature = "metrics")]
        metrics::counter!("cellar_store_retries_total", "code" => format!("{:?}", status.code())).increment(1);
        Some(wait)
    }

    /// The call made progress (a stream delivered rows): its attempts and deadline start
    /// over, so a long scan is bounded by how long it goes without progress, not in all.
    pub(crate) fn progressed(&mut self, policy: &RetryPolicy) {
        *self = policy.start();
    }

    /// Runs one attempt, failing it with `DeadlineExceeded` if the call's deadline passes
    /// first.
    pub(crate) async fn bound<T>(&self, attempt: impl Future<Output = Result<T, Status>>) -> Result<T, Status> {
        match tokio::time::timeout(self.remaining(), attempt).await {
            Ok(result) => result,
            Err(_) => Err(Status::deadline_exceeded("the operation deadline passed")),
        }
    }
}

/// Runs a call that is safe to repeat, again after each transient failure as the policy
/// allows; `attempt` builds and makes one call. A request that cannot be built (credentials)
/// fails as `Unauthenticated`.
pub(crate) async fn repeated<T, Fut>(ctx: &Ctx, mut attempt: impl FnMut() -> Fut) -> Result<T, Status>
where
    Fut: Future<Output = Result<T, Status>>,
{
    let mut retry = ctx.retry.start();
    loop {
        let outcome = retry.bound(attempt()).await;
        match outcome.as_ref().err().and_then(|s| retry.after(s)) {
            Some(wait) => {
                ctx.rpcs.count(Rpc::Retry);
                tokio::time::sleep(wait).await;
            }
            None => return outcome,
        }
    }
}

/// A request-building failure as the status a call returns.
pub(crate) fn unbuilt(e: Error) -> Status {
    Status::unauthenticated(e.to_string())
}

/// Whether a failed call may be repeated: the server said to try again, or the connection
/// broke. A status the server sent never carries a source error; one tonic made from a
/// transport failure (reset, closed or unreadable connection) does.
pub(crate) fn transient(status: &Status) -> bool {
    match status.code() {
        Code::Unavailable | Code::DeadlineExceeded | Code::Aborted => true,
        Code::Unknown | Code::Cancelled => std::error::Error::source(status).is_some(),
        // A stream the server's front end reset.
        Code::Internal => {
            let message = status.message().to_ascii_lowercase();
            message.contains("rst_stream") || message.contains("rst stream")
        }
        _ => false,
    }
}

/// The wait the server asked for in the status details (`google.rpc.RetryInfo`), if any.
fn server_delay(status: &Status) -> Option<Duration> {
    if status.details().is_empty() {
        return None;
    }
    let details = rpc::Status::decode(status.details()).ok()?;
    details.details.iter().find(|any| any.type_url.ends_with("/google.rpc.RetryInfo")).and_then(|any| {
        let delay = rpc::RetryInfo::decode(any.value.as_slice()).ok()?.retry_delay?;
        let secs = u64::try_from(delay.seconds).ok()?;
        let nanos = u32::try_from(delay.nanos).ok().filter(|n| *n < 1_000_000_000)?;
        Some(Duration::new(secs, nanos))
    })
}

/// A uniformly random wait up to the backoff cap of `attempt` (1-based): 10 ms doubling to
/// 1 s ("full jitter").
fn full_jitter(attempt: u32) -> Duration {
    let cap = INITIAL_BACKOFF.saturating_mul(1 << attempt.saturating_sub(1).min(16)).min(MAX_BACKOFF);
    let cap_us = u64::try_from(cap.as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(random() % (cap_us + 1))
}

/// A random number from the standard library's randomly seeded hasher: enough to spread
/// clients' waits and refreshes (the channel pool draws from it too).
pub(crate) fn random() -> u64 {
    use std::hash::BuildHasher;
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    std::collections::hash_map::RandomState::new().hash_one(COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// A non-idempotent call that failed in a way that leaves open whether it applied (it was
/// sent, and the answer was lost), or any other failure as [`Error::Remote`].
pub(crate) fn unrepeatable_error(rpc: &'static str, table: &str, row: &[u8], status: &Status) -> Error {
    if transient(status) {
        Error::Indeterminate {
            rpc,
            table: table.to_string(),
            row: Some(printable(row)),
            code: format!("{:?}", status.code()),
            message: status.message().to_string(),
        }
    } else {
        super::client::rpc_error(rpc, table, Some(row), status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_retry_info(code: Code, delay: Duration) -> Status {
        let info = rpc::RetryInfo {
            retry_delay: Some(prost_types::Duration {
                seconds: delay.as_secs() as i64,
                nanos: delay.subsec_nanos() as i32,
            }),
        };
        let details = rpc::Status {
            code: code as i32,
            message: "slow down".into(),
            details: vec![prost_types::Any {
                type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
                value: info.encode_to_vec(),
            }],
        };
        Status::with_details(code, "slow down", details.encode_to_vec().into())
    }

    #[test]
    fn waits_are_random_and_within_the_doubling_cap() {
        for attempt in 1..=12u32 {
            let cap = INITIAL_BACKOFF.saturating_mul(1 << (attempt - 1).min(16)).min(MAX_BACKOFF);
            let waits: Vec<Duration> = (0..200).map(|_| full_jitter(attempt)).collect();
            assert!(waits.iter().all(|w| *w <= cap), "attempt {attempt}: a wait above {cap:?}");
            let distinct: std::collections::HashSet<_> = waits.iter().collect();
            assert!(distinct.len() > 50, "attempt {attempt}: {} distinct waits of 200", distinct.len());
        }
        // Jittered down from the cap: on average about half of it.
        let mean = (0..2000).map(|_| full_jitter(8).as_micros()).sum::<u128>() / 2000;
        assert!((300_000..700_000).contains(&mean), "{mean} µs");
    }

    #[test]
    fn the_server_s_retry_delay_is_honoured() {
        let status = with_retry_info(Code::Unavailable, Duration::from_millis(1500));
        assert_eq!(server_delay(&status), Some(Duration::from_millis(1500)));
        let mut retry = RetryPolicy::new(Duration::from_secs(60)).start();
        assert_eq!(retry.after(&status), Some(Duration::from_millis(1500)));
        // Past the deadline, the call fails instead of waiting.
        let mut short = RetryPolicy::new(Duration::from_secs(1)).start();
        assert_eq!(short.after(&status), None);
        // Other details, garbage details: the backoff of its own.
        assert_eq!(server_delay(&Status::with_details(Code::Unavailable, "x", vec![1, 2, 3].into())), None);
        assert_eq!(server_delay(&Status::unavailable("x")), None);
    }

    #[test]
    fn only_transient_failures_are_retried_and_only_so_often() {
        let mut retry = RetryPolicy::new(Duration::from_secs(600)).start();
        assert_eq!(retry.after(&Status::not_found("x")), None);
        assert_eq!(retry.after(&Status::invalid_argument("x")), None);
        // Sent by a server (no source): not a transport failure.
        assert_eq!(retry.after(&Status::cancelled("x")), None);
        assert_eq!(retry.after(&Status::unknown("x")), None);
        assert!(retry.after(&Status::internal("Received RST_STREAM with error code 2")).is_some());
        let mut n = 1;
        while retry.after(&Status::unavailable("x")).is_some() {
            n += 1;
        }
        assert_eq!(n, MAX_ATTEMPTS - 1, "the RST_STREAM retry and these make every attempt");
        retry.progressed(&RetryPolicy::new(Duration::from_secs(600)));
        assert!(retry.after(&Status::aborted("x")).is_some(), "progress starts the count over");
    }

    #[test]
    fn transport_failures_are_transient_whatever_their_code() {
        for code in [Code::Unknown, Code::Cancelled] {
            let mut status = Status::new(code, "transport error");
            status.set_source(std::sync::Arc::new(std::io::Error::from(std::io::ErrorKind::ConnectionReset)));
            assert!(transient(&status), "{code:?}");
        }
        let gone = Status::unavailable("x");
        let e = unrepeatable_error("CheckAndMutateRow", "t", b"r1", &gone);
        assert!(e.to_string().contains("may or may not have applied"), "{e}");
        let refused = unrepeatable_error("CheckAndMutateRow", "t", b"r1", &Status::not_found("no table"));
        assert!(matches!(refused, Error::Remote { .. }), "{refused}");
    }

    #[test]
    fn an_attempt_ends_at_the_operation_deadline() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let retry = RetryPolicy::new(Duration::from_millis(50)).start();
        let never = std::future::pending::<Result<(), Status>>();
        let status = runtime.block_on(retry.bound(never)).unwrap_err();
        assert_eq!(status.code(), Code::DeadlineExceeded);
        assert_eq!(retry.remaining(), Duration::ZERO);
    }
}
