//! Acceptance criterion 5: RPC timing. The real call table, over the link model, never
//! retransmits on a lossless link whose RTT jitters between 0.2 and 40 ms, and over UDP with
//! 1 % datagram loss it resends at most twice per lost datagram and keeps its throughput.
//!
//! The jittery link: mean RTT 20.1 ms ± 19.9 ms, so every round trip lies in [0.2, 40] ms. The
//! client→server direction carries the whole jitter (its one-way delay is uniform in
//! [0.1, 39.9] ms), the way back is a fixed 0.1 ms, so the round trip itself is uniform in
//! [0.2, 40] ms. Over UDP that also reorders datagrams; over TCP the stream stays in order and
//! the jitter stretches the gaps instead.

// The one clock read: the epoch that virtual time starts from.
#![allow(clippy::disallowed_methods)]

use sluice_sim::{run, seed_from_env, Pattern, Report, Scenario, Transport, KIB, MIB};
use std::time::{Duration, Instant};

const CALLS: u64 = 10_000;

fn jittery_link(seed: u64, transport: Transport, loss_ratio: f64) -> Scenario {
    Scenario {
        seed,
        transport,
        rtt: Duration::from_micros(20_100),
        rtt_jitter: Duration::from_micros(19_900),
        rate_bytes_per_sec: 12_500_000,
        loss_ratio,
        rsize_bytes: 32 * KIB,
        pattern: Pattern::Getattr { calls: CALLS },
        ..Scenario::default()
    }
}

fn summary(r: &Report) -> String {
    format!(
        "{} calls in {:.2} s virtual, {} transmissions, {} retransmissions, {} lost datagrams, \
         {} UDP timer expiries",
        r.calls_completed,
        r.elapsed.as_secs_f64(),
        r.call_stats.transmissions,
        r.retransmits,
        r.lost_datagrams,
        r.call_stats.minor_timeouts
    )
}

/// 10 000 GETATTRs, 64 in flight, over TCP and UDP: not one retransmission.
#[test]
fn a_lossless_jittery_link_causes_no_retransmissions() {
    let seed = seed_from_env(5);
    for transport in [Transport::Tcp, Transport::Udp] {
        let r = run(&jittery_link(seed, transport, 0.0), Instant::now());
        println!(
            "{transport:?}, lossless, RTT in [0.2, 40] ms: {}",
            summary(&r)
        );
        r.assert_invariants();
        assert_eq!(r.calls_completed, CALLS);
        assert_eq!(r.retransmits, 0, "{transport:?}");
        assert_eq!(r.call_stats.minor_timeouts + r.call_stats.major_timeouts, 0);
        assert_eq!(r.call_stats.unknown_xid_replies, 0);
        assert_eq!(r.lost_datagrams, 0);
    }
}

/// The same 10 000 GETATTRs over UDP with 1 % loss each way: at most two retransmissions per
/// lost datagram (one for the loss, at most one more when the RTO backoff overlaps a second
/// loss or a late reply).
#[test]
fn udp_loss_costs_at_most_two_retransmissions_per_lost_datagram() {
    let base = seed_from_env(5);
    for seed in base..base + 3 {
        let r = run(&jittery_link(seed, Transport::Udp, 0.01), Instant::now());
        println!("UDP, 1 % loss, seed {seed}: {}", summary(&r));
        r.assert_invariants();
        assert_eq!(r.calls_completed, CALLS);
        assert!(r.lost_datagrams > 0);
        assert!(r.retransmits <= 2 * r.lost_datagrams, "{}", summary(&r));
    }
}

/// Throughput under loss, defined as a bulk read over UDP with rsize 32 KiB: a 64 MiB file read
/// by [`Pattern::Pipelined`] (every one of the 64 slots kept busy with a READ, data taken in
/// whatever order it arrives), file bytes over the time to the last byte. This measures the
/// call table's loss recovery: a lost READ holds one slot for an RTO (≥ 200 ms) while the
/// other slots keep the link busy.
///
/// The bottleneck queue is 4 MiB, enough for the slot table's worth of replies (64 × 32 KiB);
/// with the default 1 MiB the client's own bursts overflow it, see
/// `udp_bulk_reads_do_not_overflow_a_default_queue` below.
///
/// For information it also prints what a single sequential reader behind the readahead engine
/// gets on the same link: there a lost READ stalls the reader for a whole RTO, because the
/// engine issues new READs only as the reader advances, so loss costs far more than 20 %.
#[test]
fn udp_bulk_read_keeps_80_percent_of_its_throughput_at_1_percent_loss() {
    let seed = seed_from_env(5);
    let bulk = |loss| Scenario {
        pattern: Pattern::Pipelined,
        file_bytes: 64 * MIB,
        queue_bytes: Some(4 * MIB),
        ..jittery_link(seed, Transport::Udp, loss)
    };
    let clean = run(&bulk(0.0), Instant::now());
    let lossy = run(&bulk(0.01), Instant::now());
    clean.assert_invariants();
    lossy.assert_invariants();
    let rate = |r: &Report| r.achieved_rate_after_warmup.expect("rate");
    let kept = rate(&lossy) / rate(&clean);
    println!(
        "UDP bulk read, rsize 32 KiB: lossless {:.2} MB/s ({:.3} of the link, {} retransmissions); \
         1 % loss {:.2} MB/s ({} retransmissions for {} lost datagrams): kept {kept:.3}",
        rate(&clean) / 1e6,
        rate(&clean) / clean.link_rate as f64,
        clean.retransmits,
        rate(&lossy) / 1e6,
        lossy.retransmits,
        lossy.lost_datagrams
    );
    assert_eq!(clean.retransmits, 0);
    assert!(lossy.lost_datagrams > 0);
    assert!(lossy.retransmits <= 2 * lossy.lost_datagrams);
    assert!(kept >= 0.8, "kept {kept}");

    let sequential = |loss| Scenario {
        pattern: Pattern::Sequential,
        warmup_bytes: Some(0),
        ..bulk(loss)
    };
    let (a, b) = (
        run(&sequential(0.0), Instant::now()),
        run(&sequential(0.01), Instant::now()),
    );
    a.assert_invariants();
    b.assert_invariants();
    println!(
        "for information, one sequential reader with Auto readahead on the same link: lossless \
         {:.2} MB/s, 1 % loss {:.2} MB/s ({:.3} kept)",
        rate(&a) / 1e6,
        rate(&b) / 1e6,
        rate(&b) / rate(&a)
    );
}

/// Regression test for a finding of this simulator in sluice-rpc: over UDP the call table had
/// no congestion window, so a bulk reader that keeps all 64 slots busy with 32 KiB READs made
/// the server answer with ~2 MiB at once. A bottleneck queue of the link model's default size
/// (max(BDP, 1 MiB)) tail-dropped the excess, and every drop was a retransmission on a link that
/// loses nothing; the synchronized RTO expiries then burst again, and throughput collapsed (seed
/// 5: 359 retransmissions and 2.5 MB/s of a 12.5 MB/s link; 35 and 2.5 MB/s of a 1 ms, 100 MB/s
/// link). The call table now has a UDP congestion window in requests (AIMD as Linux's
/// `xprt_adjust_cwnd`, held while the RTT shows a standing queue of our own; see
/// `sluice_rpc::client`), and this is the "healthy link" it must never retransmit on.
///
/// `cargo test -p sluice-sim --test rpc_timing -- --nocapture` prints the numbers.
#[test]
fn udp_bulk_reads_do_not_overflow_a_default_queue() {
    let seed = seed_from_env(5);
    for (rtt, jitter, rate) in [(20_100, 19_900, 12_500_000), (1_000, 0, 100_000_000)] {
        let sc = Scenario {
            seed,
            transport: Transport::Udp,
            rtt: Duration::from_micros(rtt),
            rtt_jitter: Duration::from_micros(jitter),
            rate_bytes_per_sec: rate,
            rsize_bytes: 32 * KIB,
            file_bytes: 64 * MIB,
            pattern: Pattern::Pipelined,
            ..Scenario::default()
        };
        let r = run(&sc, Instant::now());
        r.assert_invariants();
        let ratio = r.achieved_rate_after_warmup.expect("rate") / rate as f64;
        println!(
            "UDP bulk read, default queue, rtt {rtt} µs ± {jitter} µs, {} MB/s: {} retransmissions, \
             {} tail drops, {ratio:.3} of the link; cwnd +{} ÷{} held {}",
            rate / 1_000_000,
            r.retransmits,
            r.link_s2c.full_segments + r.link_c2s.full_segments,
            r.call_stats.cwnd_increases,
            r.call_stats.cwnd_reductions,
            r.call_stats.cwnd_holds
        );
        assert_eq!(
            r.retransmits, 0,
            "retransmissions on a link that loses nothing"
        );
        assert!(ratio >= 0.8, "{ratio}");
    }
}
