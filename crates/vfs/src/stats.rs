//! Call counters with a latency histogram: the one shape in which sluice reports calls, whether
//! the server's own (NFS procedures, NFSv4 operations) or a backend's calls to the storage
//! beneath it (the CephFS backend's `ceph_ll_*`).
//!
//! [`ProcStats`] is the live form: lock-free counters that many threads bump at once.
//! [`CallStats`] is its value at one instant, the form that crosses a crate boundary and that
//! renderers read. A backend that makes calls of its own reports them through
//! [`FileSystem::backend_stats`](crate::FileSystem::backend_stats) as a [`BackendStats`]: per
//! kind of call its count, errors and latency in the same buckets as the server's own, so that
//! `sluice stats` and `/metrics` show both alike, and a slow answer can be put on the NFS side
//! or the storage side by comparing the two. A backend with nothing beneath it to time
//! ([`LocalFs`](crate::LocalFs)'s system calls are the server's own time, [`MemFs`](crate::MemFs)
//! has none) reports nothing.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Latency histogram bucket upper bounds in microseconds (the last bucket is open-ended). From
/// 10 µs, a call answered from a cache, to 250 ms, a disk or a cluster in trouble; the steps are
/// Prometheus's usual 1-2.5-5 so a quantile read off them is within a factor of 2.5.
pub const LATENCY_BUCKETS_MICROS: [u64; 12] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 50_000, 250_000,
];

/// Buckets of a latency histogram: one per bound of [`LATENCY_BUCKETS_MICROS`], and the open one.
pub const LATENCY_BUCKETS: usize = LATENCY_BUCKETS_MICROS.len() + 1;

/// Calls of one kind: count, errors and a latency histogram, bumped concurrently.
#[derive(Default)]
pub struct ProcStats {
    pub calls: AtomicU64,
    /// Calls answered with something other than success (an NFS error or an RPC-level error;
    /// for a backend, a failed call).
    pub errors: AtomicU64,
    pub latency_micros_total: AtomicU64,
    /// Calls per bucket (not cumulative): bucket `i` holds the calls of at most
    /// `LATENCY_BUCKETS_MICROS[i]` µs that no lower bucket holds; the last the longer ones.
    pub latency_buckets: [AtomicU64; LATENCY_BUCKETS],
}

impl ProcStats {
    /// Counts one call that took `elapsed`; `ok` is false for an error.
    pub fn record(&self, elapsed: Duration, ok: bool) {
        self.calls.fetch_add(1, Relaxed);
        if !ok {
            self.errors.fetch_add(1, Relaxed);
        }
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.latency_micros_total.fetch_add(us, Relaxed);
        let i = LATENCY_BUCKETS_MICROS
            .iter()
            .position(|&b| us <= b)
            .unwrap_or(LATENCY_BUCKETS_MICROS.len());
        self.latency_buckets[i].fetch_add(1, Relaxed);
    }

    /// The counters now. Each is read on its own, so a snapshot taken while calls are counted
    /// may be off by the calls in flight between two reads.
    pub fn snapshot(&self) -> CallStats {
        CallStats {
            calls: self.calls.load(Relaxed),
            errors: self.errors.load(Relaxed),
            latency_micros_total: self.latency_micros_total.load(Relaxed),
            latency_buckets: std::array::from_fn(|i| self.latency_buckets[i].load(Relaxed)),
        }
    }
}

/// A [`ProcStats`] at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallStats {
    pub calls: u64,
    pub errors: u64,
    pub latency_micros_total: u64,
    /// As [`ProcStats::latency_buckets`].
    pub latency_buckets: [u64; LATENCY_BUCKETS],
}

impl CallStats {
    /// The mean latency in microseconds (0 without calls).
    pub fn latency_micros_mean(&self) -> u64 {
        self.latency_micros_total
            .checked_div(self.calls)
            .unwrap_or(0)
    }

    /// The upper bound in microseconds of the bucket that holds the `permille`/1000 quantile
    /// of the latencies: at least that share of the calls took at most this long. `None`
    /// without calls; `Some(u64::MAX)` when the quantile is in the open bucket.
    pub fn latency_micros_quantile_bound(&self, permille: u64) -> Option<u64> {
        let total: u64 = self.latency_buckets.iter().sum();
        if total == 0 {
            return None;
        }
        let mut seen = 0u64;
        for (i, n) in self.latency_buckets.iter().enumerate() {
            seen += n;
            if seen * 1000 >= total * permille.min(1000) {
                return Some(LATENCY_BUCKETS_MICROS.get(i).copied().unwrap_or(u64::MAX));
            }
        }
        Some(u64::MAX)
    }
}

/// What a backend counts of its own work, at one instant: see the module notes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackendStats {
    /// The backend's name, the `backend` label of its metrics: `"ceph"`.
    pub backend: &'static str,
    /// Calls to the storage beneath, by kind (the `call` label, lower case), in the backend's
    /// own order; kinds not called yet are listed too, with zeros.
    pub calls: Vec<(&'static str, CallStats)>,
    /// Other events the backend counts since it started, by name (the `event` label, lower
    /// case with underscores), e.g. the Ceph MDS's cache invalidations.
    pub events: Vec<(&'static str, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_fall_in_the_first_bucket_that_holds_them() {
        let p = ProcStats::default();
        p.record(Duration::from_micros(10), true);
        p.record(Duration::from_micros(11), false);
        p.record(Duration::from_secs(1), true);
        let s = p.snapshot();
        assert_eq!((s.calls, s.errors), (3, 1));
        assert_eq!(s.latency_micros_total, 1_000_021);
        assert_eq!(s.latency_buckets[0], 1, "10 µs is within the 10 µs bound");
        assert_eq!(s.latency_buckets[1], 1, "11 µs is in the 25 µs bucket");
        assert_eq!(
            s.latency_buckets[LATENCY_BUCKETS - 1],
            1,
            "1 s is beyond the last bound"
        );
        assert_eq!(s.latency_micros_mean(), 333_340);
    }

    #[test]
    fn quantile_bounds_are_bucket_bounds() {
        let p = ProcStats::default();
        assert_eq!(p.snapshot().latency_micros_quantile_bound(500), None);
        for _ in 0..99 {
            p.record(Duration::from_micros(40), true);
        }
        p.record(Duration::from_millis(3), true);
        let s = p.snapshot();
        assert_eq!(s.latency_micros_quantile_bound(500), Some(50));
        assert_eq!(s.latency_micros_quantile_bound(990), Some(50));
        assert_eq!(s.latency_micros_quantile_bound(1000), Some(5_000));
        p.record(Duration::from_secs(2), true);
        p.record(Duration::from_secs(2), true);
        let s = p.snapshot();
        assert_eq!(s.latency_micros_quantile_bound(999), Some(u64::MAX));
    }
}
