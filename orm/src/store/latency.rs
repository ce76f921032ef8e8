//! How long store calls take: a histogram per kind of call ([`Latencies`]), kept by every
//! [`Metered`](super::Metered) store beside its counts.
//!
//! Why a histogram and not a mean: the calls that matter are the slow few, and a mean hides
//! them. The buckets are log-linear (four per power of two of nanoseconds, as HdrHistogram
//! with two significant bits), so a quantile is known within 12.5 % at any scale, recording
//! is two relaxed additions, and two snapshots subtract bucket by bucket, so a quantile of the
//! calls made between them is exact to the bucket.

use std::fmt;
use std::ops::Sub;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Below this many nanoseconds every value has a bucket of its own.
const EXACT: u64 = 8;
/// Sub-buckets per power of two above `EXACT`.
const SUB_BITS: u32 = 2;
/// The largest power of two bucketed; longer calls (over 18 minutes) count in the last bucket.
const MAX_EXPONENT: u32 = 40;
/// Buckets: the exact ones, then four per power of two from 2^3 to 2^40.
const BUCKETS: usize = EXACT as usize + ((MAX_EXPONENT - 3 + 1) as usize) * (1 << SUB_BITS);

/// The bucket of a duration of `ns` nanoseconds.
fn bucket(ns: u64) -> usize {
    if ns < EXACT {
        return ns as usize;
    }
    let exponent = (63 - ns.leading_zeros()).min(MAX_EXPONENT);
    let ns = ns.min((1u64 << (MAX_EXPONENT + 1)) - 1);
    let sub = (ns >> (exponent - SUB_BITS)) & ((1 << SUB_BITS) - 1);
    EXACT as usize + ((exponent - 3) as usize) * (1 << SUB_BITS) + sub as usize
}

/// The smallest and largest nanoseconds of bucket `index`.
fn bounds(index: usize) -> (u64, u64) {
    if index < EXACT as usize {
        return (index as u64, index as u64);
    }
    let offset = index - EXACT as usize;
    let exponent = (offset >> SUB_BITS) as u32 + 3;
    let sub = (offset & ((1 << SUB_BITS) - 1)) as u64;
    let width = 1u64 << (exponent - SUB_BITS);
    let low = (1u64 << exponent) + sub * width;
    (low, low + width - 1)
}

/// The live histogram of one kind of call.
pub(super) struct Recorder {
    buckets: Box<[AtomicU64]>,
    /// Total nanoseconds, for the mean.
    total_ns: AtomicU64,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder { buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(), total_ns: AtomicU64::new(0) }
    }
}

impl Recorder {
    pub(super) fn record(&self, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.buckets[bucket(ns)].fetch_add(1, Ordering::Relaxed);
        self.total_ns.fetch_add(ns, Ordering::Relaxed);
    }

    fn snapshot(&self) -> Latency {
        Latency {
            buckets: self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect(),
            total_ns: self.total_ns.load(Ordering::Relaxed),
        }
    }
}

/// The latencies of one kind of call: a histogram, summarized by [`Latency::count`],
/// [`Latency::mean`], [`Latency::quantile`] and [`Latency::max`].
#[derive(Clone, PartialEq, Eq)]
pub struct Latency {
    buckets: Box<[u64]>,
    total_ns: u64,
}

impl Default for Latency {
    fn default() -> Self {
        Latency { buckets: vec![0; BUCKETS].into_boxed_slice(), total_ns: 0 }
    }
}

impl Latency {
    /// Calls timed.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Their mean duration; zero without calls.
    pub fn mean(&self) -> Duration {
        match self.count() {
            0 => Duration::ZERO,
            n => Duration::from_nanos(self.total_ns / n),
        }
    }

    /// The duration `q` (0.0 to 1.0) of the calls took at most: `quantile(0.99)` is the 99th
    /// percentile. Within 12.5 % (the middle of the bucket holding it); zero without calls.
    pub fn quantile(&self, q: f64) -> Duration {
        let count = self.count();
        if count == 0 {
            return Duration::ZERO;
        }
        // The rank of the call at q, 1-based: the 50th of 100 calls for the median.
        let rank = ((q.clamp(0.0, 1.0) * count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let (low, high) = bounds(i);
                return Duration::from_nanos(low + (high - low) / 2);
            }
        }
        Duration::ZERO
    }

    /// The longest call, rounded up to the top of its bucket (at most 25 % above it); zero
    /// without calls.
    pub fn max(&self) -> Duration {
        match self.buckets.iter().rposition(|&n| n > 0) {
            Some(i) => Duration::from_nanos(bounds(i).1),
            None => Duration::ZERO,
        }
    }

    /// Calls by duration: `(at most, calls)` for each bucket holding any, shortest first.
    pub fn buckets(&self) -> impl Iterator<Item = (Duration, u64)> + '_ {
        self.buckets.iter().enumerate().filter(|(_, &n)| n > 0).map(|(i, &n)| (Duration::from_nanos(bounds(i).1), n))
    }
}

/// The calls of the later snapshot that the earlier one did not hold, bucket by bucket.
impl Sub for &Latency {
    type Output = Latency;

    fn sub(self, earlier: &Latency) -> Latency {
        Latency {
            buckets: self.buckets.iter().zip(earlier.buckets.iter()).map(|(a, b)| a.saturating_sub(*b)).collect(),
            total_ns: self.total_ns.saturating_sub(earlier.total_ns),
        }
    }
}

/// `12 calls, mean 85µs, p50 70µs, p99 310µs, max 400µs`, or `no calls`.
impl fmt::Display for Latency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.count();
        if n == 0 {
            return f.write_str("no calls");
        }
        write!(
            f,
            "{n} {}, mean {:.1?}, p50 {:.1?}, p99 {:.1?}, max {:.1?}",
            if n == 1 { "call" } else { "calls" },
            self.mean(),
            self.quantile(0.5),
            self.quantile(0.99),
            self.max()
        )
    }
}

impl fmt::Debug for Latency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Latency({self})")
    }
}

/// The kinds of call [`Costs`](super::Costs) counts, as an index into the histograms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Get,
    Scan,
    Mutate,
    CheckAndMutate,
    GroupMutate,
    Increment,
    Admin,
}

#[cfg(feature = "metrics")]
impl Kind {
    pub(super) const ALL: [Kind; 7] =
        [Kind::Get, Kind::Scan, Kind::Mutate, Kind::CheckAndMutate, Kind::GroupMutate, Kind::Increment, Kind::Admin];

    /// The name in metrics.
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Get => "get",
            Kind::Scan => "scan",
            Kind::Mutate => "mutate",
            Kind::CheckAndMutate => "check_and_mutate",
            Kind::GroupMutate => "group_mutate",
            Kind::Increment => "increment",
            Kind::Admin => "admin",
        }
    }
}

/// The live histograms of every kind of call.
#[derive(Default)]
pub(super) struct Recorders([Recorder; 7]);

impl Recorders {
    pub(super) fn record(&self, kind: Kind, took: Duration) {
        self.0[kind as usize].record(took);
    }

    pub(super) fn snapshot(&self) -> Latencies {
        let s = |k: Kind| self.0[k as usize].snapshot();
        Latencies {
            gets: s(Kind::Get),
            scans: s(Kind::Scan),
            mutates: s(Kind::Mutate),
            check_and_mutates: s(Kind::CheckAndMutate),
            group_mutates: s(Kind::GroupMutate),
            increments: s(Kind::Increment),
            admin: s(Kind::Admin),
        }
    }
}

/// How long store calls took, per kind of call as [`Costs`](super::Costs) counts them:
/// [`crate::Db::latencies`] and [`crate::Db::measure_timed`] give it, of the calls made while
/// latencies were tracked ([`crate::Db::track_latencies`]) or measured. A call is timed from
/// its start to its answer, failed calls included; a scan from its start until its stream
/// ends or is dropped (so it includes the time its reader spent between rows, as a
/// Bigtable client's operation latency of a read does).
///
/// Apart from [`Costs`](super::Costs), which are exact and equal from run to run, these are
/// measurements: compare them, do not assert them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Latencies {
    /// `read_rows` calls.
    pub gets: Latency,
    /// Scans, start to end of stream.
    pub scans: Latency,
    /// `mutate` and `mutate_row` calls.
    pub mutates: Latency,
    /// `check_and_mutate` calls.
    pub check_and_mutates: Latency,
    /// `mutate_group`, `commit` and `read_and_commit` calls.
    pub group_mutates: Latency,
    /// `increment` calls.
    pub increments: Latency,
    /// Admin calls (`ensure_table`, `alter_families`, `split_keys`, `describe`).
    pub admin: Latency,
}

impl Latencies {
    /// Each kind with its name, in the order of [`Costs`](super::Costs)'s fields.
    pub fn kinds(&self) -> [(&'static str, &Latency); 7] {
        [
            ("get", &self.gets),
            ("scan", &self.scans),
            ("mutate", &self.mutates),
            ("check-and-mutate", &self.check_and_mutates),
            ("group mutate", &self.group_mutates),
            ("increment", &self.increments),
            ("admin", &self.admin),
        ]
    }
}

/// The calls of the later snapshot that the earlier one did not hold.
impl Sub for &Latencies {
    type Output = Latencies;

    fn sub(self, earlier: &Latencies) -> Latencies {
        Latencies {
            gets: &self.gets - &earlier.gets,
            scans: &self.scans - &earlier.scans,
            mutates: &self.mutates - &earlier.mutates,
            check_and_mutates: &self.check_and_mutates - &earlier.check_and_mutates,
            group_mutates: &self.group_mutates - &earlier.group_mutates,
            increments: &self.increments - &earlier.increments,
            admin: &self.admin - &earlier.admin,
        }
    }
}

/// One line per kind of call made (`get: 12 calls, mean 85µs, …`); `no calls` if none.
impl fmt::Display for Latencies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut any = false;
        for (name, latency) in self.kinds() {
            if latency.count() > 0 {
                if any {
                    f.write_str("\n")?;
                }
                write!(f, "{name}: {latency}")?;
                any = true;
            }
        }
        if !any {
            f.write_str("no calls")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_buckets_cover_every_duration_in_order_and_within_an_eighth() {
        for ns in 1..10_000u64 {
            assert!(bucket(ns) >= bucket(ns - 1), "buckets rise with the duration: {ns}");
        }
        for ns in (0..10_000u64).chain((1..64).map(|e| 1u64 << e)).chain([u64::MAX]) {
            let i = bucket(ns);
            assert!(i < BUCKETS, "{ns}");
            let (low, high) = bounds(i);
            if ns < 1u64 << (MAX_EXPONENT + 1) {
                assert!(low <= ns && ns <= high, "{ns} in {low}..={high}");
                let middle = low + (high - low) / 2;
                assert!(middle.abs_diff(ns) as f64 <= ns as f64 / 8.0 + 0.5, "{ns}: {middle}");
            } else {
                assert_eq!(i, BUCKETS - 1);
            }
        }
    }

    #[test]
    fn latency_quantiles_of_a_known_spread() {
        let r = Recorder::default();
        // 90 calls of 100 µs, 9 of 1 ms, 1 of 50 ms.
        for _ in 0..90 {
            r.record(Duration::from_micros(100));
        }
        for _ in 0..9 {
            r.record(Duration::from_millis(1));
        }
        r.record(Duration::from_millis(50));
        let l = r.snapshot();
        assert_eq!(l.count(), 100);
        let near = |d: Duration, want: Duration| (d.as_secs_f64() / want.as_secs_f64() - 1.0).abs() <= 0.125;
        assert!(near(l.quantile(0.5), Duration::from_micros(100)), "{:?}", l.quantile(0.5));
        assert!(near(l.quantile(0.9), Duration::from_micros(100)), "{:?}", l.quantile(0.9));
        assert!(near(l.quantile(0.99), Duration::from_millis(1)), "{:?}", l.quantile(0.99));
        assert!(near(l.max(), Duration::from_millis(50)), "{:?}", l.max());
        assert_eq!(l.mean(), Duration::from_micros((90 * 100 + 9 * 1000 + 50_000) / 100));
        assert_eq!(l.buckets().map(|(_, n)| n).collect::<Vec<_>>(), [90, 9, 1]);
    }

    #[test]
    fn latency_snapshots_subtract_to_the_calls_between_them() {
        let r = Recorder::default();
        r.record(Duration::from_millis(5));
        let before = r.snapshot();
        r.record(Duration::from_micros(20));
        r.record(Duration::from_micros(20));
        let between = &r.snapshot() - &before;
        assert_eq!(between.count(), 2);
        assert_eq!(between.mean(), Duration::from_micros(20));
        assert!(between.max() < Duration::from_micros(23));
        assert_eq!(&before - &r.snapshot(), Latency::default(), "never negative");
        assert_eq!(Latency::default().to_string(), "no calls");
        assert_eq!(Latency::default().quantile(0.5), Duration::ZERO);
    }

    #[test]
    fn latencies_display_only_the_kinds_called() {
        let r = Recorders::default();
        assert_eq!(r.snapshot().to_string(), "no calls");
        r.record(Kind::Get, Duration::from_micros(100));
        r.record(Kind::Mutate, Duration::from_micros(100));
        let shown = r.snapshot().to_string();
        assert!(shown.starts_with("get: 1 call, mean 100"), "{shown}");
        assert!(shown.contains("\nmutate: 1 call"), "{shown}");
        assert_eq!(shown.lines().count(), 2, "{shown}");
    }
}
