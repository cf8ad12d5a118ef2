//! Acceptance criterion 6: randomized runs. Each seed draws a link, a transport, faults, a
//! server, a readahead mode and an application pattern; the invariants are that every byte the
//! application receives equals the file's content (checked in the client against the
//! position-dependent pattern), every application read completes exactly once, every call
//! started completes exactly once (no call lost, none delivered twice), and the run finishes:
//! after the application is done, every outstanding call must complete (the liveness phase).
//!
//! Default suite: seeds 0..20 (`SLUICE_SIM_SEEDS=a..b` changes the range; `SLUICE_SEED=n`
//! replays one seed). The long run is ignored by default because it takes minutes:
//! `SLUICE_SIM_SEEDS=0..2000 cargo test -p sluice-sim --release -- --ignored long_run`

// The one clock read: the epoch that virtual time starts from.
#![allow(clippy::disallowed_methods)]

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_sim::{run, Pattern, ReadaheadMode, Scenario, Transport, KIB, MIB};
use std::ops::Range;
use std::time::{Duration, Instant};

/// The scenario of one seed. Everything is drawn from the seed, so a failure replays from it.
fn draw(seed: u64) -> Scenario {
    let mut g = ChaCha8Rng::seed_from_u64(seed);
    let transport = if g.gen_bool(0.5) {
        Transport::Tcp
    } else {
        Transport::Udp
    };
    let rtt = Duration::from_micros(g.gen_range(100..=60_000));
    let rtt_jitter = if g.gen_bool(0.5) {
        rtt.mul_f64(g.gen_range(0.0..=1.0))
    } else {
        Duration::ZERO
    };
    let rate = [
        1_000_000u64,
        12_500_000,
        100_000_000,
        300_000_000,
        1_000_000_000,
    ][g.gen_range(0..5)];
    let udp = transport == Transport::Udp;
    let rsize = if udp {
        4 * KIB * g.gen_range(1..=8)
    } else {
        4 * KIB * g.gen_range(1..=256)
    };
    let readahead = match g.gen_range(0..4) {
        0 => ReadaheadMode::Off,
        1 => ReadaheadMode::Fixed(4 * KIB * g.gen_range(1..=512)),
        _ => ReadaheadMode::Auto,
    };
    let file_bytes = g.gen_range(1..=24 * MIB);
    let read_bytes = match g.gen_range(0..3) {
        0 => 4 * KIB,
        1 => 128 * KIB,
        _ => g.gen_range(1..=512 * KIB),
    };
    let pattern = match g.gen_range(0..6) {
        0 | 1 => Pattern::Sequential,
        2 => Pattern::TwoInterleaved,
        3 => Pattern::Random4k {
            reads: g.gen_range(1..=2_000),
        },
        4 => Pattern::RandomUnaligned {
            reads: g.gen_range(1..=500),
        },
        _ => Pattern::Pipelined,
    };
    let faulty = udp && g.gen_bool(0.7);
    Scenario {
        seed,
        transport,
        rtt,
        rtt_jitter,
        rate_bytes_per_sec: rate,
        // Sometimes a queue far below the BDP: tail drops (UDP) and backpressure (TCP).
        queue_bytes: g.gen_bool(0.3).then(|| g.gen_range(16 * KIB..=4 * MIB)),
        loss_ratio: if faulty { g.gen_range(0.0..0.05) } else { 0.0 },
        dup_ratio: if faulty { g.gen_range(0.0..0.05) } else { 0.0 },
        reorder_ratio: if faulty { g.gen_range(0.0..0.1) } else { 0.0 },
        readahead,
        budget_bytes: [4 * MIB, 64 * MIB, 1024 * MIB][g.gen_range(0..3)],
        file_bytes,
        read_bytes,
        rsize_bytes: rsize,
        pattern,
        warmup_bytes: Some(0),
        server_service_time: Duration::from_micros(g.gen_range(0..=2_000)),
        server_concurrency: g.gen_bool(0.5).then(|| g.gen_range(1..=16)),
        // Generous: a slow, lossy UDP run may spend minutes of virtual time in backoff.
        time_limit: Duration::from_secs(24 * 3600),
        ..Scenario::default()
    }
}

fn check(seed: u64) {
    let sc = draw(seed);
    let r = run(&sc, Instant::now());
    r.assert_invariants();
    let asked = r.bytes_asked_by_app;
    assert_eq!(
        r.bytes_read_by_app, asked,
        "seed {seed}: every read completed once"
    );
    match sc.pattern {
        Pattern::Sequential | Pattern::TwoInterleaved | Pattern::Pipelined => {
            assert_eq!(asked, sc.file_bytes, "seed {seed}: the whole file was read")
        }
        _ => {}
    }
    assert_eq!(
        r.calls_completed, r.call_stats.calls_started,
        "seed {seed}: every call completed exactly once"
    );
    if sc.transport == Transport::Tcp {
        assert_eq!(
            r.retransmits, 0,
            "seed {seed}: TCP retransmitted on a live connection"
        );
    }
    println!(
        "seed {seed}: ok, {:.1} s virtual, {} calls, {} retransmissions, {} lost datagrams, \
         fetched {:.2}× asked",
        r.elapsed.as_secs_f64(),
        r.calls_completed,
        r.retransmits,
        r.lost_datagrams,
        r.fetch_amplification()
    );
}

/// `SLUICE_SEED=n` (one seed), else `SLUICE_SIM_SEEDS=a..b`, else `default`; printed first.
fn seeds(default: Range<u64>) -> Range<u64> {
    sluice_testkit::seed::seeds("long_run", default)
}

#[test]
fn randomized_runs_deliver_the_file_exactly() {
    for seed in seeds(0..20) {
        check(seed);
    }
}

/// Ignored by default: thousands of seeds take minutes even in release. Run with
/// `SLUICE_SIM_SEEDS=0..2000 cargo test -p sluice-sim --release -- --ignored long_run`.
#[test]
#[ignore = "minutes of runtime: SLUICE_SIM_SEEDS=0..2000 cargo test -p sluice-sim --release -- --ignored long_run"]
fn long_run() {
    for seed in seeds(0..2000) {
        check(seed);
    }
}

/// A run is a pure function of its scenario: the same seed gives the same report.
#[test]
fn a_seed_replays_exactly() {
    let seed = seeds(7..8).start;
    let a = run(&draw(seed), Instant::now());
    let b = run(&draw(seed), Instant::now());
    assert_eq!(format!("{:?}", a), format!("{:?}", b));
}
