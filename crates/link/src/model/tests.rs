//! Simulation tests of the link model in virtual time.
//!
//! `Instant::now()` is read once per test as an arbitrary origin; after that
//! time only moves when a test advances it.

use super::*;
use proptest::prelude::{any, prop, proptest, ProptestConfig};

const MB: u64 = 1_000_000;

fn origin() -> Instant {
    Instant::now()
}

fn stream(cfg: &LinkConfig, t0: Instant) -> LinkDirection<u64> {
    LinkDirection::new(cfg, Direction::Forward, Mode::Stream, t0)
}

/// A greedy sender pushing a stream through one direction as fast as the
/// queue admits, in virtual time. Returns (delivery time, bytes) per segment.
fn bulk(cfg: &LinkConfig, total_bytes: u64) -> (Instant, Vec<(Instant, u64)>) {
    let t0 = origin();
    let mut link = stream(cfg, t0);
    let mut now = t0;
    let mut sent = 0u64;
    let mut out = Vec::new();
    let mut sizes = std::collections::HashMap::new();
    let mut id = 0u64;
    loop {
        while sent < total_bytes {
            let len = (link.segment_limit_bytes() as u64).min(total_bytes - sent);
            if link.room_bytes(now) < len && link.queue_bytes() > 0 {
                break;
            }
            match link.offer(now, id, len as usize) {
                Offer::Queued => {
                    sizes.insert(id, len);
                    id += 1;
                    sent += len;
                }
                Offer::Full | Offer::Closed => break,
                Offer::Lost => unreachable!("stream mode never loses"),
            }
        }
        while let Some(ev) = link.poll_deliver(now) {
            if let Event::Deliver(id) = ev {
                out.push((now, sizes[&id]));
            }
        }
        if sent >= total_bytes && link.is_idle() {
            return (t0, out);
        }
        let next = [link.poll_timeout(), link.room_timeout()]
            .into_iter()
            .flatten()
            .min()
            .expect("a busy link has a timeout");
        assert!(next >= now, "time never goes backwards");
        now = next;
    }
}

#[test]
fn bulk_throughput_equals_rate_within_1_percent() {
    for rate in [12_500_000u64, 300 * MB, 1_000 * MB] {
        let cfg = LinkConfig {
            rtt: Duration::from_millis(10),
            rate_bytes_per_sec: rate,
            ..LinkConfig::default()
        };
        let total = rate * 3; // three virtual seconds
        let (_, out) = bulk(&cfg, total);
        // Measure after a warm-up: from the first delivery after 10% of the bytes.
        let warm = total / 10;
        let mut acc = 0;
        let mut start = None;
        for &(t, len) in &out {
            acc += len;
            if start.is_none() && acc >= warm {
                start = Some((t, acc));
            }
        }
        let (t_start, acc_start) = start.unwrap();
        let t_end = out.last().unwrap().0;
        let measured = (acc - acc_start) as f64 / (t_end - t_start).as_secs_f64();
        let err = (measured / rate as f64 - 1.0).abs();
        assert!(
            err < 0.01,
            "rate {rate}: measured {measured:.0} B/s, error {err:.4}"
        );
    }
}

#[test]
fn serializer_does_not_drift() {
    // 1 byte at 3 B/s: 333_333_333.33 ns each; 3 million bytes take exactly 1e6 s.
    let cfg = LinkConfig {
        rate_bytes_per_sec: 3,
        queue_bytes_max: Some(u64::MAX),
        ..LinkConfig::default()
    };
    let t0 = origin();
    let mut link = stream(&cfg, t0);
    for i in 0..3_000_000 {
        assert_eq!(link.offer(t0, i, 1), Offer::Queued);
    }
    assert_eq!(
        link.room_timeout().map(|t| t - t0),
        Some(Duration::from_nanos(333_333_333))
    );
    assert_eq!(link.free_at - t0, Duration::from_secs(1_000_000));
}

#[test]
fn ping_pong_latency_equals_rtt() {
    for rtt_us in [0u64, 200, 1_000, 10_000, 40_001] {
        let rtt = Duration::from_micros(rtt_us);
        let cfg = LinkConfig {
            rtt,
            rate_bytes_per_sec: 100 * MB,
            ..LinkConfig::default()
        };
        let t0 = origin();
        let mut fwd = LinkDirection::new(&cfg, Direction::Forward, Mode::Stream, t0);
        let mut rev = LinkDirection::new(&cfg, Direction::Reverse, Mode::Stream, t0);
        let mut now = t0;
        for round in 0..100u64 {
            let sent = now;
            assert_eq!(fwd.offer(now, round, 1), Offer::Queued);
            now = fwd.poll_timeout().unwrap();
            assert_eq!(fwd.poll_deliver(now), Some(Event::Deliver(round)));
            assert_eq!(rev.offer(now, round, 1), Offer::Queued);
            now = rev.poll_timeout().unwrap();
            assert_eq!(rev.poll_deliver(now), Some(Event::Deliver(round)));
            // RTT plus serializing 1 byte twice at 100 MB/s (10 ns each way).
            assert_eq!(now - sent, rtt + Duration::from_nanos(20), "rtt {rtt:?}");
            now += Duration::from_millis(1); // think time
        }
    }
}

#[test]
fn one_way_delays_split_the_rtt() {
    let cfg = LinkConfig {
        rtt: Duration::from_nanos(1_000_001),
        ..LinkConfig::default()
    };
    assert_eq!(
        cfg.delay_one_way(Direction::Forward),
        Duration::from_nanos(500_000)
    );
    assert_eq!(
        cfg.delay_one_way(Direction::Reverse),
        Duration::from_nanos(500_001)
    );
}

#[test]
fn queue_never_exceeds_its_bound() {
    let cfg = LinkConfig {
        rtt: Duration::from_millis(2),
        rate_bytes_per_sec: 10 * MB,
        queue_bytes_max: Some(100_000),
        ..LinkConfig::default()
    };
    let t0 = origin();
    let mut link = stream(&cfg, t0);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut now = t0;
    let mut fulls = 0;
    for i in 0..200_000u64 {
        let len = rng.gen_range(1..=9_000);
        match link.offer(now, i, len) {
            Offer::Queued => {}
            Offer::Full => fulls += 1,
            other => panic!("unexpected {other:?}"),
        }
        assert!(
            link.queue_bytes() <= 100_000,
            "queue {} at offer {i}",
            link.queue_bytes()
        );
        while link.poll_deliver(now).is_some() {}
        now += Duration::from_micros(rng.gen_range(0..500));
    }
    assert!(fulls > 0, "the test must actually fill the queue");
    assert!(link.stats().queue_bytes_peak <= 100_000);
}

#[test]
fn default_queue_is_bdp_with_a_1_mib_floor() {
    let mut cfg = LinkConfig {
        rtt: Duration::from_millis(1),
        rate_bytes_per_sec: 300 * MB,
        ..LinkConfig::default()
    };
    assert_eq!(cfg.bdp_bytes(), 300_000);
    assert_eq!(cfg.queue_bytes(), 1 << 20);
    cfg.rtt = Duration::from_millis(100);
    assert_eq!(cfg.queue_bytes(), 30 * MB);
    assert_eq!(cfg.segment_bytes(), 30_000);
    cfg.rate_bytes_per_sec = 1_000;
    assert_eq!(cfg.segment_bytes(), SEGMENT_BYTES_MIN);
}

#[test]
fn datagram_loss_dup_reorder_statistics() {
    let cfg = LinkConfig {
        rtt: Duration::from_millis(2),
        jitter: Duration::ZERO,
        loss_ratio: 0.1,
        dup_ratio: 0.05,
        reorder_ratio: 0.2,
        seed: 42,
        ..LinkConfig::default()
    };
    let t0 = origin();
    let mut link = LinkDirection::new(&cfg, Direction::Forward, Mode::Datagram, t0);
    let n = 100_000u64;
    let mut now = t0;
    let mut delivered = Vec::new();
    for i in 0..n {
        link.offer(now, i, 100);
        while let Some(Event::Deliver(id)) = link.poll_deliver(now) {
            delivered.push(id);
        }
        now += Duration::from_micros(100);
    }
    now += Duration::from_secs(1);
    while let Some(Event::Deliver(id)) = link.poll_deliver(now) {
        delivered.push(id);
    }
    let s = link.stats();
    let ratio = |k: u64, of: u64| k as f64 / of as f64;
    // Binomial, n = 1e5: one standard deviation of p = 0.1 is 0.00095.
    assert!((ratio(s.lost_segments, n) - 0.1).abs() < 0.005, "{s:?}");
    // Duplication and reordering are drawn for the datagrams that survive.
    let survived = n - s.lost_segments;
    assert!(
        (ratio(s.duplicated_segments, survived) - 0.05).abs() < 0.005,
        "{s:?}"
    );
    assert!(
        (ratio(s.reordered_segments, survived) - 0.2).abs() < 0.005,
        "{s:?}"
    );
    assert_eq!(
        delivered.len() as u64,
        n - s.lost_segments + s.duplicated_segments
    );
    let inversions = delivered.windows(2).filter(|w| w[1] < w[0]).count();
    assert!(inversions > 1000, "reordering must show up: {inversions}");
}

#[test]
fn datagrams_are_dropped_when_the_queue_is_full() {
    let cfg = LinkConfig {
        rate_bytes_per_sec: MB,
        queue_bytes_max: Some(10_000),
        ..LinkConfig::default()
    };
    let t0 = origin();
    let mut link: LinkDirection<()> =
        LinkDirection::new(&cfg, Direction::Forward, Mode::Datagram, t0);
    let outcomes: Vec<_> = (0..20).map(|_| link.offer(t0, (), 1_000)).collect();
    assert_eq!(outcomes.iter().filter(|o| **o == Offer::Queued).count(), 10);
    assert_eq!(outcomes[10..], [Offer::Full; 10]);
}

#[test]
fn reset_triggers_exactly_after_n_bytes() {
    for n in [1u64, 1_499, 100_000, 1_000_003] {
        let cfg = LinkConfig {
            rtt: Duration::from_millis(1),
            rate_bytes_per_sec: 50 * MB,
            reset_after_bytes: Some(n),
            ..LinkConfig::default()
        };
        let t0 = origin();
        let mut link = stream(&cfg, t0);
        let mut now = t0;
        let mut delivered = 0u64;
        let mut sizes = Vec::new();
        loop {
            loop {
                let len = link.segment_limit_bytes();
                if link.room_bytes(now) == 0 {
                    break;
                }
                match link.offer(now, sizes.len() as u64, len) {
                    Offer::Queued => sizes.push(len as u64),
                    Offer::Full | Offer::Closed => break,
                    Offer::Lost => unreachable!(),
                }
            }
            let mut reset = false;
            while let Some(ev) = link.poll_deliver(now) {
                match ev {
                    Event::Deliver(id) => delivered += sizes[id as usize],
                    Event::Reset => reset = true,
                }
            }
            if reset {
                break;
            }
            now = [link.poll_timeout(), link.room_timeout()]
                .into_iter()
                .flatten()
                .min()
                .unwrap();
        }
        assert_eq!(delivered, n);
        assert!(link.is_closed());
        assert_eq!(link.offer(now, 0, 1), Offer::Closed);
        assert_eq!(link.poll_deliver(now + Duration::from_secs(1)), None);
    }
}

#[test]
fn stall_after_bytes_holds_the_next_byte_for_the_duration() {
    let stall = Duration::from_millis(300);
    let n = 123_457u64;
    let cfg = LinkConfig {
        rtt: Duration::from_millis(10),
        rate_bytes_per_sec: 10 * MB,
        stall: Some(Stall {
            trigger: StallTrigger::AfterBytes(n),
            duration: stall,
        }),
        ..LinkConfig::default()
    };
    let (_, out) = bulk(&cfg, 500_000);
    let mut acc = 0;
    let i = out
        .iter()
        .position(|&(_, len)| {
            acc += len;
            acc >= n
        })
        .unwrap();
    assert_eq!(acc, n, "the stall point ends a segment");
    let (before, _) = out[i];
    let (after, len_after) = out[i + 1];
    // The next segment waits the stall, then its own serialization time.
    let ser = Duration::from_nanos(len_after * 1_000_000_000 / (10 * MB));
    let gap = after - before;
    assert!(
        gap >= stall + ser && gap <= stall + ser + Duration::from_nanos(1),
        "gap {gap:?}"
    );
    // No other gap comes close.
    let long_gaps = out
        .windows(2)
        .filter(|w| w[1].0 - w[0].0 > Duration::from_millis(10))
        .count();
    assert_eq!(long_gaps, 1);
}

#[test]
fn stall_at_time_darkens_the_serializer() {
    let cfg = LinkConfig {
        rtt: Duration::from_millis(2),
        stall: Some(Stall {
            trigger: StallTrigger::AfterTime(Duration::from_millis(100)),
            duration: Duration::from_millis(50),
        }),
        ..LinkConfig::default()
    };
    let t0 = origin();
    let mut link = stream(&cfg, t0);
    let ms = Duration::from_millis;
    link.offer(t0 + ms(99), 1, 10);
    link.offer(t0 + ms(100), 2, 10);
    link.offer(t0 + ms(149), 3, 10);
    link.offer(t0 + ms(150), 4, 10);
    let mut times = Vec::new();
    let mut now = t0;
    while let Some(t) = link.poll_timeout() {
        now = now.max(t);
        while let Some(Event::Deliver(id)) = link.poll_deliver(now) {
            times.push((id, now - t0));
        }
    }
    assert_eq!(
        times,
        vec![(1, ms(100)), (2, ms(151)), (3, ms(151)), (4, ms(151))]
    );
}

#[test]
fn stream_jitter_keeps_fifo_and_mean_delay() {
    let cfg = LinkConfig {
        rtt: Duration::from_millis(10),
        jitter: Duration::from_millis(2),
        seed: 3,
        ..LinkConfig::default()
    };
    let t0 = origin();
    let mut link = stream(&cfg, t0);
    let mut now = t0;
    let mut total = Duration::ZERO;
    let n = 10_000u32;
    for i in 0..n {
        link.offer(now, u64::from(i), 1);
        let t = link.poll_timeout().unwrap();
        assert_eq!(link.poll_deliver(t), Some(Event::Deliver(u64::from(i))));
        let d = t - now;
        assert!(
            d >= Duration::from_millis(3) && d <= Duration::from_millis(7),
            "{d:?}"
        );
        total += d;
        now = t + Duration::from_millis(20);
    }
    let mean = total / n;
    assert!(
        mean > Duration::from_micros(4_950) && mean < Duration::from_micros(5_050),
        "{mean:?}"
    );
}

/// Randomised simulation: any configuration, any offer pattern; the model
/// keeps its invariants. Prints the seed; replay with `SLUICE_SEED=<n>`.
#[test]
fn randomized_invariants_replayable_from_seed() {
    let seed = sluice_testkit::seed::seed_or_fresh("link::model randomized_invariants");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for _ in 0..50 {
        let cfg = LinkConfig {
            rtt: Duration::from_micros(rng.gen_range(0..50_000)),
            jitter: Duration::from_micros(rng.gen_range(0..5_000)),
            rate_bytes_per_sec: [0, 1_000_000, 12_500_000, 300_000_000][rng.gen_range(0..4)],
            queue_bytes_max: if rng.gen_bool(0.5) {
                Some(rng.gen_range(1..2_000_000))
            } else {
                None
            },
            segment_bytes: Some(rng.gen_range(1..=65_536)),
            loss_ratio: rng.gen_range(0.0..0.3),
            dup_ratio: rng.gen_range(0.0..0.3),
            reorder_ratio: rng.gen_range(0.0..0.3),
            reset_after_bytes: rng.gen_bool(0.3).then(|| rng.gen_range(1..1_000_000)),
            stall: rng.gen_bool(0.3).then(|| Stall {
                trigger: StallTrigger::AfterBytes(rng.gen_range(1..1_000_000)),
                duration: Duration::from_micros(rng.gen_range(0..100_000)),
            }),
            seed: rng.gen(),
            ..LinkConfig::default()
        };
        let mode = if rng.gen_bool(0.5) {
            Mode::Stream
        } else {
            Mode::Datagram
        };
        check_invariants(&cfg, mode, rng.gen());
    }
}

fn check_invariants(cfg: &LinkConfig, mode: Mode, workload_seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(workload_seed);
    let t0 = origin();
    let mut link = LinkDirection::new(cfg, Direction::Forward, mode, t0);
    let delay_min = link.delay_one_way() - cfg.jitter.min(link.delay_one_way());
    let mut now = t0;
    let mut offered_at = Vec::new();
    let mut last_id = None;
    let mut delivered = 0u64;
    let mut resets = 0;
    for step in 0..2_000u64 {
        let len = link.segment_limit_bytes().min(rng.gen_range(1..=20_000));
        link.room_bytes(now); // advances the queue to `now`
        let queued_before = link.queue_bytes();
        match link.offer(now, step, len) {
            Offer::Queued | Offer::Lost => {
                offered_at.push(Some(now));
                if queued_before > 0 {
                    assert!(
                        link.queue_bytes() <= link.queue_bytes_max() || cfg.rate_bytes_per_sec == 0
                    );
                }
            }
            Offer::Full | Offer::Closed => offered_at.push(None),
        }
        while let Some(ev) = link.poll_deliver(now) {
            match ev {
                Event::Deliver(id) => {
                    let sent =
                        offered_at[id as usize].expect("only accepted segments are delivered");
                    assert!(now - sent >= delay_min, "delivered too early");
                    if mode == Mode::Stream {
                        assert!(last_id.is_none_or(|l| id > l), "stream FIFO");
                    }
                    last_id = Some(id);
                    delivered += 1;
                }
                Event::Reset => resets += 1,
            }
        }
        now += Duration::from_micros(rng.gen_range(0..200));
    }
    now += Duration::from_secs(100);
    while let Some(ev) = link.poll_deliver(now) {
        match ev {
            Event::Deliver(_) => delivered += 1,
            Event::Reset => resets += 1,
        }
    }
    let s = link.stats();
    assert!(link.is_idle());
    assert_eq!(delivered, s.delivered_segments);
    assert_eq!(
        s.delivered_segments,
        s.offered_segments - s.lost_segments + s.duplicated_segments
    );
    if mode == Mode::Stream {
        assert_eq!(s.delivered_bytes, s.offered_bytes);
        let expect_reset = cfg.reset_after_bytes.is_some_and(|n| s.offered_bytes >= n);
        assert_eq!(resets, u32::from(expect_reset));
        if let Some(n) = cfg.reset_after_bytes {
            assert!(s.offered_bytes <= n);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn invariants_hold_for_any_config(
        rtt_us in 0u64..20_000,
        jitter_us in 0u64..5_000,
        rate in prop::sample::select(vec![0u64, 100_000, 12_500_000, 1_000_000_000]),
        queue in prop::option::of(1u64..500_000),
        segment in 1u32..=65_536,
        loss in 0.0f64..0.5,
        reset in prop::option::of(1u64..200_000),
        stream in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let cfg = LinkConfig {
            rtt: Duration::from_micros(rtt_us),
            jitter: Duration::from_micros(jitter_us),
            rate_bytes_per_sec: rate,
            queue_bytes_max: queue,
            segment_bytes: Some(segment),
            loss_ratio: loss,
            dup_ratio: loss / 2.0,
            reorder_ratio: loss,
            reset_after_bytes: reset,
            seed,
            ..LinkConfig::default()
        };
        check_invariants(&cfg, if stream { Mode::Stream } else { Mode::Datagram }, seed);
    }
}
