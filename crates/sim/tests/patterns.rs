//! Acceptance criteria 3 and 4: random reads do not amplify; two interleaved readers share.

// The one clock read: the epoch that virtual time starts from.
#![allow(clippy::disallowed_methods)]

use sluice_sim::{run, seed_from_env, Pattern, ReadaheadMode, Scenario, KIB, MIB};
use std::time::{Duration, Instant};

/// Criterion 3: Random 4 KiB reads fetch at most 1.1 × the bytes the application asked for.
#[test]
fn random_4k_reads_fetch_at_most_1_1_times_what_was_asked() {
    let seed = seed_from_env(3);
    for mode in [ReadaheadMode::Auto, ReadaheadMode::Fixed(128 * KIB)] {
        let sc = Scenario {
            seed,
            readahead: mode,
            // 512 MiB, not more: the real server holds the file in memory (MemFs). 20,000 reads
            // of 131,072 blocks seldom repeat one (~7 %), and readahead that misfires on random
            // reads fetches many times what was asked, far above the bound.
            file_bytes: 512 * MIB,
            pattern: Pattern::Random4k { reads: 20_000 },
            ..Scenario::default()
        };
        let r = run(&sc, Instant::now());
        r.assert_invariants();
        println!(
            "{mode:?}: random 4 KiB reads fetched {:.4}× the {} bytes asked ({} READs by size {:?})",
            r.fetch_amplification(),
            r.bytes_asked_by_app,
            r.calls_completed,
            r.read_sizes
        );
        assert_eq!(r.bytes_read_by_app, 20_000 * 4 * KIB);
        assert!(
            r.fetch_amplification() <= 1.1,
            "{mode:?}: {}",
            r.fetch_amplification()
        );
    }
}

/// Criterion 4: Two interleaved sequential readers of one file both reach the rate: together at least
/// 90 % of the link, each at least 40 %.
#[test]
fn two_interleaved_sequential_readers_both_reach_the_rate() {
    let seed = seed_from_env(4);
    for (rtt, rate) in [
        (Duration::from_millis(1), 300_000_000),
        (Duration::from_millis(10), 1_000_000_000),
        (Duration::from_millis(40), 1_000_000_000),
    ] {
        let mut sc = Scenario {
            seed,
            rtt,
            rate_bytes_per_sec: rate,
            pattern: Pattern::TwoInterleaved,
            ..Scenario::default()
        };
        let half = (16 * sc.bdp_bytes()).max(64 * MIB).div_ceil(MIB) * MIB;
        sc.file_bytes = 2 * half;
        let r = run(&sc, Instant::now());
        r.assert_invariants();
        let link = rate as f64;
        let each: Vec<f64> = r
            .reader_rates_after_warmup
            .iter()
            .map(|x| x.expect("reader passed warm-up") / link)
            .collect();
        let sum: f64 = each.iter().sum();
        println!(
            "two readers, {rtt:?} × {} MB/s: {:.3} + {:.3} = {sum:.3} of the link; {} streams",
            rate / 1_000_000,
            each[0],
            each[1],
            r.readahead_stats.streams_started
        );
        assert!(sum >= 0.9, "aggregate {each:?}");
        assert!(each.iter().all(|&x| x >= 0.4), "unfair: {each:?}");
    }
}

/// The read world's server is the real one: a sequential reader is seen by its sequential
/// table, which asks the backend for readahead.
#[test]
fn a_sequential_reader_reaches_the_real_servers_sequential_table() {
    let sc = Scenario {
        seed: seed_from_env(5),
        pattern: Pattern::Sequential,
        ..Scenario::default()
    };
    let r = run(&sc, Instant::now());
    r.assert_invariants();
    assert!(r.server_readahead_bytes > 0, "{}", r.server_readahead_bytes);
}

/// The simulated client runs the real client's read core, with the real driver's cap: a fixed
/// 128 KiB window keeps at most 128 KiB of READs on the wire (Linux >= 5.4's NFS default), and
/// the engine's plans cover every read, so the safety net never fires.
#[test]
fn a_fixed_window_keeps_its_bytes_in_flight_through_the_real_read_core() {
    let sc = Scenario {
        seed: seed_from_env(6),
        readahead: ReadaheadMode::Fixed(128 * KIB),
        rsize_bytes: 64 * KIB,
        file_bytes: 16 * MIB,
        pattern: Pattern::Sequential,
        ..Scenario::default()
    };
    let r = run(&sc, Instant::now());
    r.assert_invariants();
    let c = &r.read_core;
    assert_eq!(r.bytes_read_by_app, 16 * MIB);
    assert!(c.reads >= 256, "{c:?}");
    assert_eq!(c.in_flight_bytes_max, 128 * KIB, "{c:?}");
    assert_eq!(c.safety_net_bytes, 0, "{c:?}");
    assert_eq!(
        c.invalidations, 0,
        "the server's attributes stay as at open: {c:?}"
    );
}
