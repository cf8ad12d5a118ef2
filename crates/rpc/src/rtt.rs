//! Round-trip time estimation: the retransmit timeout (RTO) per timer class, and the pieces of
//! the path estimate (windowed minimum, jitter) that the congestion and readahead windows use.
//! Pure: time and samples are parameters, as in Linux's `net/sunrpc/timer.c`.
//!
//! # Two estimates, one module
//! Three places in the tree measured RTTs, and they ask two different questions:
//!
//! | question                                   | estimate                     | used by                  |
//! |--------------------------------------------|------------------------------|--------------------------|
//! | how long before a call is presumed lost?   | [`RttEstimator`]: srtt +     | the client call table's  |
//! | (an upper bound, queueing included)        | margin, per class, backoff   | UDP retransmit timers    |
//! | what is the path's RTT without our queue,  | [`WindowedExtreme`] minimum  | the UDP congestion       |
//! | and how far do samples spread around it?   | + [`RttJitter`]              | window's standing-queue  |
//! | (a floor and a spread, blind to a shift)   |                              | hold; the readahead      |
//! |                                            |                              | window's BDP (`rtt_late`)|
//!
//! An RTO must stay above every ordinary sample, so it follows the mean and the mean deviation
//! (Jacobson/Karels); a queue we build ourselves raises it, as it should. A window that must
//! not build a queue needs the opposite: the minimum says what the path costs unqueued, and
//! the RTP jitter of consecutive samples says how wide its ordinary spread is, which a standing
//! queue (a shift of every sample) does not change. So the two stay two estimators; what they
//! share is here once: the windowed extreme (also the readahead's windowed maximum of delivery
//! rate) and the jitter, each with the options its users need.
//!
//! # The RTO, per class
//!
//! # Why per class
//! An NFS server answers a GETATTR from memory in microseconds and a cold 1 MiB READ after a disk
//! seek and a megabyte of serialisation. One estimator for both would either retransmit READs
//! spuriously or wait needlessly long for a lost GETATTR. Like Linux's `rpc_rtt` (net/sunrpc,
//! timer.c) the estimator keeps one state per [`TimerClass`]; the procedure tables in
//! `sluice_xdr::procs` pick the class.
//!
//! # The estimator (Jacobson/Karels, RFC 6298 §2)
//! ```text
//!   first sample R:   srtt = R            rttvar = R/2
//!   later samples R:  rttvar = 3/4 rttvar + 1/4 |srtt - R|
//!                     srtt   = 7/8 srtt   + 1/8 R
//!   base RTO = srtt + margin,   margin = max(4 * rttvar, margin_min, srtt / margin_srtt_divisor)
//!   RTO      = clamp(base RTO << backoff, rto_min, rto_max)
//! ```
//!
//! # The floor on the variance term, and the bug it prevents
//! On an idle, fast LAN every sample is ~200 µs, `rttvar` decays towards zero and plain
//! `srtt + 4*rttvar` converges on a few hundred microseconds. Then the first reply that is slow
//! for an ordinary reason (the server flushed its journal, a 1 MiB READ queued behind another,
//! the client was descheduled) arrives after the RTO: the call is retransmitted although nothing
//! was lost. Linux 2.4.21 shipped exactly this: its RTO ratcheted down to 40 ms on LANs, and the
//! spurious retransmits (each one a duplicate request the server must execute or look up in its
//! reply cache) halved NFS-over-UDP throughput. The later kernels put a floor under the variance
//! term. Here the margin above `srtt` has two floors:
//! - `margin_min` (default 100 ms, the floor Linux settled on): an absolute allowance for
//!   scheduling and disk delay that the RTT history of an idle link says nothing about.
//! - `srtt / margin_srtt_divisor` (default srtt/2): on a long path whose RTT is stable (a WAN
//!   with 300 ms RTT and no jitter) `rttvar` decays too, and a queue building up by 50% would
//!   look like loss. A proportional floor keeps the RTO at or above 1.5 × srtt.
//!
//! And the RTO itself is clamped to `rto_min` (default 200 ms, Linux TCP's RTO_min): below that
//! a retransmission buys almost nothing, because loss on the links that have such short RTTs is
//! rare, while every spurious one costs a duplicated request.
//!
//! # Backoff and Karn's rule
//! A timeout doubles the class's RTO ([`RttEstimator::on_timeout`], up to
//! `backoff_shift_max` doublings and `rto_max`). The doubling is only undone by a *valid* sample.
//! Per Karn's rule, the reply to a call that was transmitted more than once is not a valid
//! sample: it cannot be known which transmission it answers, and counting it against the first
//! would inflate srtt while counting it against the last could shrink it to nothing.
//! [`RttEstimator::observe`] applies the rule; [`RttEstimator::update`] takes a sample the caller
//! already knows is valid.
//!
//! Time is a parameter: samples are `Duration`s computed by the caller from its `now`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Which RTT estimate a call uses. Defined beside the procedure tables that choose it
/// (`sluice_xdr::procs`, each row's `timer`), re-exported here where the estimator uses it.
pub use sluice_xdr::procs::TimerClass;

/// Settings of an [`RttEstimator`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RttConfig {
    /// RTO of a class before its first valid sample. Default 1.1 s: the `timeo=11` (tenths of a
    /// second) that Linux mounts use over UDP, long enough for a first call that finds a cold
    /// server cache.
    pub rto_initial: Duration,
    /// Smallest RTO ever used. Default 200 ms (see the module docs).
    pub rto_min: Duration,
    /// Largest RTO ever used, backoff included. Default 60 s, Linux's RPC_RTO_MAX.
    pub rto_max: Duration,
    /// Absolute floor of the margin above srtt. Default 100 ms (see the module docs).
    pub margin_min: Duration,
    /// Proportional floor of the margin: srtt / this. Default 2. Must be at least 1.
    pub margin_srtt_divisor: u32,
    /// Most doublings of a class RTO by timeouts. Default 7 (×128); `rto_max` caps it sooner
    /// for any RTO above 470 ms.
    pub backoff_shift_max: u32,
}

impl Default for RttConfig {
    fn default() -> Self {
        RttConfig {
            rto_initial: Duration::from_millis(1100),
            rto_min: Duration::from_millis(200),
            rto_max: Duration::from_secs(60),
            margin_min: Duration::from_millis(100),
            margin_srtt_divisor: 2,
            backoff_shift_max: 7,
        }
    }
}

/// Per-class RTT state and RTO computation. See the module docs.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    config: RttConfig,
    classes: [ClassState; 5],
}

#[derive(Debug, Clone, Copy, Default)]
struct ClassState {
    /// `None` until the first valid sample.
    smoothed: Option<Smoothed>,
    backoff_shift: u32,
    samples: u64,
}

#[derive(Debug, Clone, Copy)]
struct Smoothed {
    srtt: Duration,
    rttvar: Duration,
}

impl RttEstimator {
    pub fn new(config: RttConfig) -> Self {
        assert!(config.rto_min <= config.rto_max, "rto_min above rto_max");
        assert!(config.margin_srtt_divisor >= 1, "margin_srtt_divisor is 0");
        RttEstimator {
            config,
            classes: [ClassState::default(); 5],
        }
    }

    pub fn config(&self) -> &RttConfig {
        &self.config
    }

    /// Feeds a valid RTT sample (from a call transmitted once) and clears the class backoff.
    pub fn update(&mut self, class: TimerClass, sample: Duration) {
        let st = &mut self.classes[class.index()];
        st.smoothed = Some(match st.smoothed {
            None => Smoothed {
                srtt: sample,
                rttvar: sample / 2,
            },
            Some(Smoothed { srtt, rttvar }) => {
                let deviation = srtt.abs_diff(sample);
                Smoothed {
                    rttvar: rttvar * 3 / 4 + deviation / 4,
                    srtt: srtt * 7 / 8 + sample / 8,
                }
            }
        });
        st.backoff_shift = 0;
        st.samples += 1;
    }

    /// Applies Karn's rule to the reply of a call last sent at `sent` and transmitted
    /// `transmissions` times: feeds the sample and returns it if the call was sent once,
    /// otherwise ignores it (the backoff stays) and returns `None`.
    pub fn observe(
        &mut self,
        class: TimerClass,
        sent: Instant,
        now: Instant,
        transmissions: u32,
    ) -> Option<Duration> {
        if transmissions != 1 {
            return None;
        }
        let sample = now.saturating_duration_since(sent);
        self.update(class, sample);
        Some(sample)
    }

    /// Records a retransmit timeout of the class: its RTO doubles until a valid sample.
    pub fn on_timeout(&mut self, class: TimerClass) {
        let st = &mut self.classes[class.index()];
        st.backoff_shift = (st.backoff_shift + 1).min(self.config.backoff_shift_max);
    }

    /// The class's current retransmit timeout, backoff included.
    pub fn rto(&self, class: TimerClass) -> Duration {
        self.rto_with_backoff(class, 0)
    }

    /// The timeout for a call that has itself timed out `call_timeouts` times: the base RTO
    /// shifted by the larger of the class backoff and the call's own. (The larger, not the sum:
    /// one lost call should double its own wait, not quadruple it.)
    pub fn rto_with_backoff(&self, class: TimerClass, call_timeouts: u32) -> Duration {
        let st = &self.classes[class.index()];
        let shift = st
            .backoff_shift
            .max(call_timeouts)
            .min(self.config.backoff_shift_max);
        let rto = self
            .base_rto(class)
            .checked_mul(1 << shift)
            .unwrap_or(self.config.rto_max);
        rto.clamp(self.config.rto_min, self.config.rto_max)
    }

    /// The RTO without backoff: `srtt + margin` clamped, or `rto_initial` before any sample.
    pub fn base_rto(&self, class: TimerClass) -> Duration {
        let c = &self.config;
        let rto = match self.classes[class.index()].smoothed {
            None => c.rto_initial,
            Some(Smoothed { srtt, rttvar }) => {
                let margin = (rttvar * 4)
                    .max(c.margin_min)
                    .max(srtt / c.margin_srtt_divisor);
                srtt + margin
            }
        };
        rto.clamp(c.rto_min, c.rto_max)
    }

    /// Smoothed RTT of the class, once it has a sample.
    pub fn srtt(&self, class: TimerClass) -> Option<Duration> {
        self.classes[class.index()].smoothed.map(|s| s.srtt)
    }

    /// Smoothed mean deviation of the class, once it has a sample.
    pub fn rttvar(&self, class: TimerClass) -> Option<Duration> {
        self.classes[class.index()].smoothed.map(|s| s.rttvar)
    }

    /// Current number of doublings applied to the class RTO.
    pub fn backoff_shift(&self, class: TimerClass) -> u32 {
        self.classes[class.index()].backoff_shift
    }

    /// Valid samples taken for the class.
    pub fn samples(&self, class: TimerClass) -> u64 {
        self.classes[class.index()].samples
    }
}

impl Default for RttEstimator {
    fn default() -> Self {
        Self::new(RttConfig::default())
    }
}

/// Which extreme a [`WindowedExtreme`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extreme {
    Min,
    Max,
}

/// A windowed minimum or maximum (BBR's min_rtt and max_bw filters): a monotonic queue of
/// (time, value) in which every sample is better than all later ones; the front is the answer,
/// expired samples leave from the front. O(1) amortised per sample.
#[derive(Debug, Clone)]
pub struct WindowedExtreme {
    which: Extreme,
    samples: VecDeque<(Instant, u64)>,
}

impl WindowedExtreme {
    /// Bound on the queue (a limit on everything); a monotonic queue rarely holds more than a
    /// handful. Past it the oldest sample leaves early.
    pub const SAMPLES_MAX: usize = 64;

    pub fn new(which: Extreme) -> Self {
        WindowedExtreme {
            which,
            samples: VecDeque::new(),
        }
    }

    /// Adds `value` seen at `now`; samples older than `window` before `now` expire.
    pub fn update(&mut self, now: Instant, value: u64, window: Duration) {
        while self
            .samples
            .front()
            .is_some_and(|&(t, _)| now.saturating_duration_since(t) > window)
        {
            self.samples.pop_front();
        }
        while self.samples.back().is_some_and(|&(_, v)| match self.which {
            Extreme::Min => v >= value,
            Extreme::Max => v <= value,
        }) {
            self.samples.pop_back();
        }
        if self.samples.len() >= Self::SAMPLES_MAX {
            self.samples.pop_front();
        }
        self.samples.push_back((now, value));
    }

    /// The extreme of the samples in the window; `None` before the first.
    pub fn get(&self) -> Option<u64> {
        self.samples.front().map(|&(_, v)| v)
    }
}

/// The RTP interarrival jitter estimator (RFC 3550 §6.4.1) applied to RTT samples: the
/// smoothed absolute difference between consecutive samples, `J += (|R_i - R_{i-1}| - J) / 16`,
/// in nanoseconds. A shift of every sample (a standing queue) does not change a difference, and
/// a queue that ramps while a window grows only adds its slope per sample.
///
/// Two starts, one per user:
/// * [`RttJitter::new`] (the readahead window): until 16 differences are seen the estimate is
///   their plain mean, so that it is not biased toward its start at 0 while the first rounds
///   are measured (the readahead's full-pipe test freezes it after a few rounds).
/// * [`RttJitter::from_zero`] (the UDP congestion window): RFC 3550's own start, `J = 0` and
///   the gain 1/16 from the first difference; the window's hold test then starts strict (a
///   small jitter makes a standing queue easier to see) and loosens as spread is measured.
#[derive(Debug, Clone, Copy)]
pub struct RttJitter {
    /// `None` before the first sample.
    last_ns: Option<u64>,
    jitter_ns: u64,
    /// Differences seen, up to 16 (the gain's denominator): the weight of the next one is
    /// 1/differences.
    differences: u64,
}

impl RttJitter {
    /// The gain's denominator, RFC 3550's 16.
    const GAIN_DENOMINATOR: u64 = 16;

    /// Plain mean of the first 16 differences, then gain 1/16 (see the type docs).
    pub fn new() -> Self {
        RttJitter {
            last_ns: None,
            jitter_ns: 0,
            differences: 0,
        }
    }

    /// Gain 1/16 from the first difference, starting at 0 (see the type docs).
    pub fn from_zero() -> Self {
        RttJitter {
            differences: Self::GAIN_DENOMINATOR - 1,
            ..Self::new()
        }
    }

    pub fn update(&mut self, sample_ns: u64) {
        if let Some(last) = self.last_ns {
            let d = u128::from(sample_ns.abs_diff(last));
            self.differences = (self.differences + 1).min(Self::GAIN_DENOMINATOR);
            let n = u128::from(self.differences);
            self.jitter_ns = (((n - 1) * u128::from(self.jitter_ns) + d) / n) as u64;
        }
        self.last_ns = Some(sample_ns);
    }

    /// The jitter in nanoseconds: `None` before the first sample, 0 after only one.
    pub fn get_ns(&self) -> Option<u64> {
        self.last_ns.map(|_| self.jitter_ns)
    }
}

impl Default for RttJitter {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn initial_rto_before_samples() {
        let e = RttEstimator::default();
        for c in TimerClass::ALL {
            assert_eq!(e.rto(c), Duration::from_millis(1100));
            assert_eq!(e.srtt(c), None);
        }
    }

    #[test]
    fn first_sample_and_smoothing() {
        let mut e = RttEstimator::default();
        e.update(TimerClass::Read, 80 * MS);
        assert_eq!(e.srtt(TimerClass::Read), Some(80 * MS));
        assert_eq!(e.rttvar(TimerClass::Read), Some(40 * MS));
        // srtt + max(4*40, 100, 40) = 240 ms.
        assert_eq!(e.rto(TimerClass::Read), 240 * MS);
        e.update(TimerClass::Read, 160 * MS);
        assert_eq!(e.srtt(TimerClass::Read), Some(90 * MS)); // 70 + 20
        assert_eq!(e.rttvar(TimerClass::Read), Some(50 * MS)); // 30 + 20
        assert_eq!(e.rto(TimerClass::Read), 290 * MS);
        // Classes are independent.
        assert_eq!(e.srtt(TimerClass::Getattr), None);
    }

    /// Regression test for the Linux 2.4.21 behaviour: an idle fast LAN must not ratchet the
    /// RTO below the spikes that ordinary service-time variation produces.
    #[test]
    fn idle_fast_lan_does_not_ratchet_rto_down() {
        // Even with the absolute rto_min out of the way, the margin floor holds.
        let mut e = RttEstimator::new(RttConfig {
            rto_min: Duration::from_micros(1),
            ..RttConfig::default()
        });
        for _ in 0..100_000 {
            e.update(TimerClass::Getattr, Duration::from_micros(150));
        }
        assert!(e.rttvar(TimerClass::Getattr).unwrap() < Duration::from_micros(1));
        let rto = e.rto(TimerClass::Getattr);
        assert!(rto >= 100 * MS, "rto ratcheted to {rto:?}");
        // With the defaults, rto_min holds it at 200 ms.
        let mut e = RttEstimator::default();
        for _ in 0..100_000 {
            e.update(TimerClass::Getattr, Duration::from_micros(150));
        }
        assert_eq!(e.rto(TimerClass::Getattr), 200 * MS);
    }

    #[test]
    fn stable_long_path_keeps_proportional_margin() {
        let mut e = RttEstimator::default();
        for _ in 0..10_000 {
            e.update(TimerClass::Read, 400 * MS);
        }
        assert!(e.rto(TimerClass::Read) >= 600 * MS);
    }

    #[test]
    fn jittery_samples_never_exceed_the_rto() {
        let seed =
            sluice_testkit::seed::seed("rtt::jittery_samples_never_exceed_the_rto", 0x5eed_0001);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut e = RttEstimator::new(RttConfig {
            rto_min: Duration::ZERO,
            ..RttConfig::default()
        });
        for i in 0..100_000 {
            let s = Duration::from_micros(rng.gen_range(200..=40_000));
            if i > 0 {
                assert!(s < e.rto(TimerClass::Read), "sample {i} {s:?} >= rto");
            }
            e.update(TimerClass::Read, s);
        }
    }

    #[test]
    fn backoff_doubles_until_a_valid_sample() {
        let mut e = RttEstimator::default();
        let t0 = crate::test_util::base_instant();
        e.update(TimerClass::Write, 100 * MS); // rto = 100 + max(200,100,50) = 300 ms
        assert_eq!(e.rto(TimerClass::Write), 300 * MS);
        e.on_timeout(TimerClass::Write);
        assert_eq!(e.rto(TimerClass::Write), 600 * MS);
        e.on_timeout(TimerClass::Write);
        assert_eq!(e.rto(TimerClass::Write), 1200 * MS);
        // Karn: the reply to a retransmitted call is no sample and keeps the backoff.
        assert_eq!(e.observe(TimerClass::Write, t0, t0 + 5 * MS, 2), None);
        assert_eq!(e.rto(TimerClass::Write), 1200 * MS);
        assert_eq!(e.samples(TimerClass::Write), 1);
        // A call sent once gives a sample and resets the backoff.
        assert_eq!(
            e.observe(TimerClass::Write, t0, t0 + 100 * MS, 1),
            Some(100 * MS)
        );
        assert_eq!(e.backoff_shift(TimerClass::Write), 0);
        assert_eq!(e.rto(TimerClass::Write), 250 * MS); // 100 + max(4*37.5, 100, 50)
    }

    #[test]
    fn backoff_is_capped() {
        let mut e = RttEstimator::default();
        for _ in 0..100 {
            e.on_timeout(TimerClass::Other);
        }
        assert_eq!(e.backoff_shift(TimerClass::Other), 7);
        assert_eq!(e.rto(TimerClass::Other), Duration::from_secs(60));
        assert_eq!(
            e.rto_with_backoff(TimerClass::Read, 1000),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn call_backoff_takes_the_larger_shift() {
        let mut e = RttEstimator::default();
        e.update(TimerClass::Read, 100 * MS); // 300 ms
        e.on_timeout(TimerClass::Read);
        assert_eq!(e.rto_with_backoff(TimerClass::Read, 1), 600 * MS);
        assert_eq!(e.rto_with_backoff(TimerClass::Read, 3), 2400 * MS);
        assert_eq!(e.rto_with_backoff(TimerClass::Read, 0), 600 * MS);
    }

    #[test]
    fn windowed_extremes_keep_the_best_sample_of_the_window() {
        let t0 = crate::test_util::base_instant();
        let w = Duration::from_secs(10);
        let mut min = WindowedExtreme::new(Extreme::Min);
        let mut max = WindowedExtreme::new(Extreme::Max);
        assert_eq!(min.get(), None);
        for (s, v) in [(0, 5u64), (1, 9), (2, 3), (3, 7)] {
            min.update(t0 + Duration::from_secs(s), v, w);
            max.update(t0 + Duration::from_secs(s), v, w);
        }
        assert_eq!((min.get(), max.get()), (Some(3), Some(9)));
        // 3 (at 2 s) expires at 12 s; 7 (at 3 s) is then the best left.
        min.update(t0 + Duration::from_secs(13) - MS, 8, w);
        assert_eq!(min.get(), Some(7));
        max.update(t0 + Duration::from_secs(12), 1, w);
        assert_eq!(max.get(), Some(7), "9 (at 1 s) expired");
    }

    #[test]
    fn jitter_ignores_a_shift_and_starts_as_its_users_need() {
        let mut warm = RttJitter::new();
        let mut cold = RttJitter::from_zero();
        assert_eq!(warm.get_ns(), None);
        for r in [100, 200] {
            warm.update(r);
            cold.update(r);
        }
        // One difference of 100: its mean, or 1/16 of it from 0.
        assert_eq!(warm.get_ns(), Some(100));
        assert_eq!(cold.get_ns(), Some(6));
        // Every sample shifted by a standing queue: the same differences, the same jitter.
        let (mut a, mut b) = (RttJitter::new(), RttJitter::new());
        for r in [100u64, 130, 90, 160, 120] {
            a.update(r);
            b.update(r + 1_000_000);
        }
        assert_eq!(a.get_ns(), b.get_ns());
    }
}
