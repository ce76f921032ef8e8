//! A pool of gRPC channels, each one HTTP/2 connection, with calls spread over them round-robin
//! and every channel replaced before the server would close it.
//!
//! Why: one HTTP/2 connection carries at most ~100 concurrent streams on Cloud Bigtable's front
//! end, and the front end closes every connection about once an hour (calls in flight then see
//! transport errors). Google's Go and Java clients keep a pool and refresh each channel every
//! ~45–50 minutes with jitter, connecting the replacement first; so does this one.
//!
//! [`Pool`] is a `tower` service like tonic's `Channel`, so the generated clients take it as
//! their transport (`BigtableClient<Pool>`) and call sites clone a client and call it as before.
//! Each call picks the next channel when the client asks whether it is ready; the channel it
//! picked carries the call. A refresh connects a new channel (eagerly, under the connect
//! timeout) and only then puts it in the slot of the old one; calls already on the old channel
//! finish on it (its connection closes once they have, and once no clone of it is left). A
//! refresh that cannot connect keeps the old channel (tonic reconnects it by itself if the
//! server closed it) and tries again soon. Each slot's refresh is a task on the store's runtime,
//! holding only a weak reference to the pool: it ends when the store is dropped.
//!
//! tonic's `Channel::balance_channel` does not fit: it connects endpoints lazily (a dead
//! endpoint would fail the first call rather than `connect`), and nothing tells when an
//! inserted endpoint is connected, so a refresh could not wait for its replacement.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::RwLock;
use tonic::body::Body;
use tonic::codegen::{http, Service};
use tonic::transport::channel::ResponseFuture;
use tonic::transport::Channel;

use crate::{Error, Result};

/// Bounds of [`BigtableOptions::channels`](super::BigtableOptions::channels).
pub(crate) const MAX_CHANNELS: usize = 64;
/// The shortest refresh period accepted: shorter would spend the channels' lives connecting.
/// Meant for tests; Cloud Bigtable wants minutes.
pub(crate) const MIN_REFRESH: Duration = Duration::from_millis(100);
/// A channel is refreshed after the period, give or take up to this fraction of it.
const JITTER: f64 = 0.1;
/// How soon a refresh that could not connect is tried again (at most the period).
const RETRY_FAILED_REFRESH: Duration = Duration::from_secs(10);

/// Checks the pool's options: `channels` in 1..=64, `refresh` at least 100 ms.
pub(crate) fn check(channels: usize, refresh: Duration) -> Result<()> {
    if !(1..=MAX_CHANNELS).contains(&channels) {
        return Err(Error::InvalidArgument {
            arg: "channels",
            reason: format!("{channels} channels: a Bigtable store keeps 1 to {MAX_CHANNELS}"),
        });
    }
    if refresh < MIN_REFRESH {
        return Err(Error::InvalidArgument {
            arg: "channel_refresh",
            reason: format!("{refresh:?}: channels are refreshed every {MIN_REFRESH:?} at the most often"),
        });
    }
    Ok(())
}

/// The channels, shared by every clone of the pool and (weakly) by the refresh tasks.
struct Shared {
    slots: Vec<RwLock<Channel>>,
    /// The slot the next call takes.
    next: AtomicUsize,
}

impl Shared {
    fn pick(&self) -> Channel {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        self.slots[i].read().clone()
    }
}

/// Channels to one endpoint; cheap to clone (clones share the channels).
pub(crate) struct Pool {
    shared: Arc<Shared>,
    /// The channel the next call goes on, picked (and made ready) by `poll_ready`.
    picked: Option<Channel>,
}

impl Clone for Pool {
    fn clone(&self) -> Self {
        // A clone picks its own channel: readiness belongs to the one that was polled.
        Pool { shared: self.shared.clone(), picked: None }
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("channels", &self.shared.slots.len()).finish_non_exhaustive()
    }
}

impl Pool {
    /// Makes `channels` channels with `connect` (at once; it connects eagerly), and starts
    /// refreshing them every `refresh` (with jitter, staggered) on the current runtime.
    ///
    /// # Errors
    /// The first channel's error that could not connect.
    pub(crate) async fn connect<C, F>(connect: C, channels: usize, refresh: Duration) -> Result<Pool>
    where
        C: Fn() -> F + Clone + Send + Sync + 'static,
        F: Future<Output = Result<Channel>> + Send + 'static,
    {
        let connecting: Vec<_> = (0..channels).map(|_| tokio::spawn(connect())).collect();
        let mut slots = Vec::with_capacity(channels);
        for task in connecting {
            let channel = task.await.map_err(|e| Error::Store(format!("connecting to Bigtable: {e}")))??;
            slots.push(RwLock::new(channel));
        }
        let shared = Arc::new(Shared { slots, next: AtomicUsize::new(0) });
        for slot in 0..channels {
            // Slot i's first refresh falls in the i-th of `channels` equal parts of the jitter
            // window, so the channels, all connected now, are not replaced all at once.
            let first = jittered(refresh, (slot as f64 + random_unit()) / channels as f64);
            tokio::spawn(refresh_slot(Arc::downgrade(&shared), slot, connect.clone(), first, refresh));
        }
        Ok(Pool { shared, picked: None })
    }
}

/// Replaces slot `slot`'s channel after `first`, then about every `period`, until the pool is
/// gone.
async fn refresh_slot<C, F>(shared: Weak<Shared>, slot: usize, connect: C, first: Duration, period: Duration)
where
    C: Fn() -> F,
    F: Future<Output = Result<Channel>>,
{
    let mut wait = first;
    loop {
        tokio::time::sleep(wait).await;
        if shared.strong_count() == 0 {
            return;
        }
        wait = match connect().await {
            Ok(fresh) => {
                let Some(shared) = shared.upgrade() else { return };
                // The old channel drops here; calls on it keep their clones and finish.
                *shared.slots[slot].write() = fresh;
                jittered(period, random_unit())
            }
            Err(_) => RETRY_FAILED_REFRESH.min(period),
        };
    }
}

impl Service<http::Request<Body>> for Pool {
    type Response = http::Response<Body>;
    type Error = tonic::transport::Error;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), Self::Error>> {
        let channel = self.picked.get_or_insert_with(|| self.shared.pick());
        channel.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        // `poll_ready` picked the channel (tonic's clients always ask first).
        let mut channel = self.picked.take().unwrap_or_else(|| self.shared.pick());
        channel.call(request)
    }
}

/// `period` scaled by a factor in [1 − 10 %, 1 + 10 %), `unit` in [0, 1) placing it there.
pub(crate) fn jittered(period: Duration, unit: f64) -> Duration {
    let factor = 1.0 - JITTER + 2.0 * JITTER * unit.clamp(0.0, 1.0);
    Duration::try_from_secs_f64(period.as_secs_f64() * factor).unwrap_or(Duration::MAX)
}

/// A random number in [0, 1).
fn random_unit() -> f64 {
    (super::retry::random() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_and_refresh_period_are_checked() {
        let minute = Duration::from_secs(60);
        assert!(check(1, minute).is_ok());
        assert!(check(4, minute).is_ok());
        assert!(check(MAX_CHANNELS, minute).is_ok());
        assert!(check(4, MIN_REFRESH).is_ok());
        for channels in [0, MAX_CHANNELS + 1, usize::MAX] {
            let err = check(channels, minute).unwrap_err();
            assert!(matches!(&err, Error::InvalidArgument { arg: "channels", .. }), "{err:?}");
            assert!(err.to_string().contains("1 to 64"), "{err}");
        }
        for refresh in [Duration::ZERO, Duration::from_millis(99)] {
            let err = check(4, refresh).unwrap_err();
            assert!(matches!(&err, Error::InvalidArgument { arg: "channel_refresh", .. }), "{err:?}");
        }
    }

    #[test]
    fn a_refresh_comes_within_ten_percent_of_the_period() {
        let period = Duration::from_secs(45 * 60);
        let (low, high) = (period.mul_f64(0.9), period.mul_f64(1.1));
        let close = |a: Duration, b: Duration| a.abs_diff(b) < Duration::from_millis(1);
        assert!(close(jittered(period, 0.0), low));
        assert!(close(jittered(period, 0.5), period));
        assert!(close(jittered(period, 1.0), high));
        // Out-of-range draws stay in bounds; a huge period does not overflow.
        assert!(close(jittered(period, -3.0), low));
        assert!(close(jittered(period, 7.0), high));
        assert_eq!(jittered(Duration::MAX, 0.99), Duration::MAX);
        for _ in 0..10_000 {
            let unit = random_unit();
            assert!((0.0..1.0).contains(&unit));
            let d = jittered(period, unit);
            assert!(low.saturating_sub(Duration::from_millis(1)) <= d && d <= high, "{d:?}");
        }
    }

    #[test]
    fn first_refreshes_are_staggered_across_the_jitter_window() {
        let period = Duration::from_secs(45 * 60);
        let n = 4;
        let mut previous = Duration::ZERO;
        for slot in 0..n {
            let first = jittered(period, (slot as f64 + random_unit()) / n as f64);
            let band_start = jittered(period, slot as f64 / n as f64);
            let band_end = jittered(period, (slot + 1) as f64 / n as f64);
            assert!(band_start <= first && first <= band_end, "slot {slot}: {first:?}");
            assert!(first >= previous);
            previous = first;
        }
    }
}
