//! The client's write window: how many UNSTABLE WRITEs one writer keeps in flight.
//!
//! A writer with a fixed number of WRITEs in flight moves at most `writes × wsize / RTT`. Four
//! 1 MiB WRITEs (the old fixed depth, the Linux client's habit for one file) are enough on
//! loopback but not over a link with tens of milliseconds of RTT, and not for a server whose
//! disk wants more queued to stay busy. So, like the read window ([`crate::readahead`]), the
//! write window follows the measured bandwidth-delay product:
//!
//! ```text
//!   rate      = bytes acknowledged per interval of at least rtt_min (the best recent one)
//!   window    = 2 × rate × rtt_min, in whole WRITEs, within [writes_min, writes_max]
//!               and at most bytes_max of data in flight
//! ```
//!
//! * `rtt_min` is the smallest WRITE round trip seen: the path's latency plus the server's
//!   shortest service time, without the queueing our own window adds (a window sized from the
//!   smoothed RTT would grow with its own queue).
//! * The rate is the best of the last [`RATE_SAMPLES`] intervals: one slow interval (a server
//!   flush, a COMMIT) does not shrink the window at once, and a window that is too large only
//!   costs queueing in the server, which rtt_min ignores.
//! * The factor 2 is headroom, as for readahead: a window exactly one BDP is just full when
//!   every reply arrives on time, and the first late one leaves the link idle.
//! * `writes_min` (4) is where it starts and never goes below: near-zero latency then costs
//!   nothing compared to the old fixed depth. `writes_max` (64) is the call table's slot count;
//!   `bytes_max` bounds the memory in flight per writer.
//!
//! Time is an argument; the driver (`sluice_client::file`) reads the clock.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Intervals whose best rate is the estimate. 8: a few round trips of history, short enough
/// that a link that got slower is noticed within a fraction of a second at any RTT here.
pub const RATE_SAMPLES: usize = 8;

/// Bounds of a [`WriteWindow`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteWindowConfig {
    /// WRITEs in flight to start with and at least. Default 4.
    pub writes_min: usize,
    /// WRITEs in flight at most. Default 64, the client call table's slots.
    pub writes_max: usize,
    /// Bytes in flight at most. Default 64 MiB (64 × 1 MiB).
    pub bytes_max: u64,
}

impl Default for WriteWindowConfig {
    fn default() -> Self {
        WriteWindowConfig {
            writes_min: 4,
            writes_max: 64,
            bytes_max: 64 << 20,
        }
    }
}

/// The window of one writer. See the module docs.
#[derive(Debug, Clone)]
pub struct WriteWindow {
    config: WriteWindowConfig,
    wsize_bytes: u64,
    rtt_min: Option<Duration>,
    interval_start: Option<Instant>,
    interval_bytes: u64,
    /// Bytes per second of the last intervals, newest last.
    rates: VecDeque<f64>,
    writes: usize,
}

impl WriteWindow {
    /// A window for WRITEs of `wsize_bytes`.
    pub fn new(config: WriteWindowConfig, wsize_bytes: u64) -> WriteWindow {
        let writes_min = config.writes_min.max(1);
        let config = WriteWindowConfig {
            writes_min,
            writes_max: config.writes_max.max(writes_min),
            ..config
        };
        WriteWindow {
            config,
            wsize_bytes: wsize_bytes.max(1),
            rtt_min: None,
            interval_start: None,
            interval_bytes: 0,
            rates: VecDeque::new(),
            writes: writes_min,
        }
    }

    /// WRITEs the writer may have in flight now.
    pub fn writes(&self) -> usize {
        self.writes
    }

    /// The smallest round trip seen.
    pub fn rtt_min(&self) -> Option<Duration> {
        self.rtt_min
    }

    /// The writer is about to start sending (again) at `now`: the rate interval starts here,
    /// so time spent idle before (the application not writing) does not count as slowness.
    pub fn on_send(&mut self, now: Instant) {
        if self.interval_start.is_none() {
            self.interval_start = Some(now);
            self.interval_bytes = 0;
        }
    }

    /// A WRITE of `bytes` was acknowledged at `now`, `rtt` after it was sent (`None`: no
    /// sample, e.g. it was retransmitted).
    pub fn on_write_complete(&mut self, now: Instant, bytes: u64, rtt: Option<Duration>) {
        if let Some(rtt) = rtt {
            self.rtt_min = Some(self.rtt_min.map_or(rtt, |m| m.min(rtt)));
        }
        let start = *self.interval_start.get_or_insert(now);
        self.interval_bytes += bytes;
        let Some(rtt_min) = self.rtt_min else {
            return;
        };
        let elapsed = now.saturating_duration_since(start);
        // An interval of at least one rtt_min (and 1 ms, so that loopback's microsecond round
        // trips still average over several replies) measures delivery, not one burst.
        if elapsed < rtt_min.max(Duration::from_millis(1)) {
            return;
        }
        let rate = self.interval_bytes as f64 / elapsed.as_secs_f64();
        if self.rates.len() == RATE_SAMPLES {
            self.rates.pop_front();
        }
        self.rates.push_back(rate);
        self.interval_start = Some(now);
        self.interval_bytes = 0;
        self.resize(rtt_min);
    }

    /// The writer went idle (nothing in flight, e.g. waiting for the application): the next
    /// interval starts at the next [`WriteWindow::on_send`].
    pub fn on_idle(&mut self) {
        self.interval_start = None;
        self.interval_bytes = 0;
    }

    fn resize(&mut self, rtt_min: Duration) {
        let best = self.rates.iter().copied().fold(0.0, f64::max);
        let bdp_bytes = best * rtt_min.as_secs_f64();
        let want = (2.0 * bdp_bytes / self.wsize_bytes as f64).ceil() as usize;
        let by_bytes = (self.config.bytes_max / self.wsize_bytes).max(1) as usize;
        self.writes = want
            .clamp(self.config.writes_min, self.config.writes_max)
            .min(by_bytes.max(self.config.writes_min));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Drives a window against a link of `rtt` and `rate_bytes_s` (a pipe that delivers one
    /// WRITE per wsize/rate once full, each `rtt` after it was sent) for `secs` of virtual time.
    fn run(rtt: Duration, rate_bytes_s: f64, secs: f64) -> WriteWindow {
        let t0 = Instant::now();
        let mut w = WriteWindow::new(WriteWindowConfig::default(), MIB);
        let per_write = Duration::from_secs_f64(MIB as f64 / rate_bytes_s);
        let mut now = t0;
        // in flight: completion times
        let mut in_flight: VecDeque<(Instant, Instant)> = VecDeque::new();
        let mut link_free = t0;
        w.on_send(now);
        while now.duration_since(t0).as_secs_f64() < secs {
            while in_flight.len() < w.writes() {
                // serialised on the link, then rtt of latency
                let start = link_free.max(now);
                link_free = start + per_write;
                in_flight.push_back((now, link_free + rtt));
            }
            let (sent, done) = in_flight.pop_front().unwrap();
            now = now.max(done);
            w.on_write_complete(now, MIB, Some(done - sent));
        }
        w
    }

    #[test]
    fn starts_at_the_minimum_and_stays_there_at_near_zero_latency() {
        let w = WriteWindow::new(WriteWindowConfig::default(), MIB);
        assert_eq!(w.writes(), 4);
        // loopback-like: 100 µs, 2 GB/s: BDP 0.2 MB, so the minimum is plenty
        let w = run(Duration::from_micros(100), 2e9, 0.5);
        assert_eq!(w.writes(), 4);
    }

    #[test]
    fn grows_to_twice_the_bandwidth_delay_product() {
        // 20 ms × 300 MB/s = 6 MB ≈ 5.7 WRITEs of 1 MiB: the window ends near 2 × that
        let w = run(Duration::from_millis(20), 300e6, 3.0);
        let bdp_writes = 0.020 * 300e6 / MIB as f64;
        assert!(
            w.writes() as f64 >= 1.5 * bdp_writes && w.writes() as f64 <= 2.5 * bdp_writes + 1.0,
            "window {} WRITEs for a BDP of {bdp_writes:.1}",
            w.writes()
        );
    }

    #[test]
    fn is_bounded_by_writes_max_and_bytes_max() {
        // 200 ms × 1 GB/s = 200 MB: far beyond both bounds
        let w = run(Duration::from_millis(200), 1e9, 5.0);
        assert_eq!(w.writes(), 64);
        let mut small = WriteWindow::new(
            WriteWindowConfig {
                bytes_max: 8 * MIB,
                ..WriteWindowConfig::default()
            },
            MIB,
        );
        let t0 = Instant::now();
        small.on_send(t0);
        for i in 1..=400u32 {
            small.on_write_complete(
                t0 + Duration::from_millis(u64::from(i)),
                10 * MIB,
                Some(Duration::from_millis(200)),
            );
        }
        assert_eq!(small.writes(), 8);
    }

    #[test]
    fn idle_time_is_not_counted_as_a_slow_link() {
        let t0 = Instant::now();
        let mut w = WriteWindow::new(WriteWindowConfig::default(), MIB);
        let rtt = Some(Duration::from_millis(10));
        // The writer starts, goes idle for 10 s (the application reads its input), resumes.
        w.on_send(t0);
        w.on_idle();
        let t1 = t0 + Duration::from_secs(10);
        w.on_send(t1);
        // 4 MiB acknowledged in the first 10 ms (~420 MB/s) at 10 ms: BDP ~4 MB, window 8.
        // Had the interval started at t0, the rate would be 4 MiB over 10 s and the window
        // would stay at 4.
        for i in 1..=4u64 {
            w.on_write_complete(t1 + Duration::from_micros(2500 * i), MIB, rtt);
        }
        assert_eq!(w.writes(), 8);
    }
}
