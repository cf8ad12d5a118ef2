use super::*;
use crate::testutil::seeded_rng;
use rand::Rng;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

fn ra(mode: ReadaheadMode) -> FileReadahead {
    FileReadahead::new(ReadaheadConfig {
        mode,
        ..ReadaheadConfig::default()
    })
}

fn total(plan: &ReadPlan) -> u64 {
    plan.fetch.iter().map(|f| f.len).sum()
}

#[test]
fn a_random_read_fetches_only_what_was_asked_rounded_to_4k() {
    let t = Instant::now();
    let mut b = Budget::new(GIB);
    let mut r = ra(ReadaheadMode::Auto);
    let p = r.on_read(t, 10 * MIB + 100, 4000, GIB, &mut b);
    assert_eq!(
        p.fetch,
        vec![FetchRequest {
            offset: 10 * MIB,
            len: 8 * KIB,
            kind: FetchKind::Demand
        }]
    );
    let p = r.on_read(t, 500 * MIB, 4 * KIB, GIB, &mut b);
    assert_eq!(total(&p), 4 * KIB);
    assert_eq!(r.window_bytes(), 0);
}

#[test]
fn a_read_at_offset_zero_starts_a_sequential_stream() {
    let t = Instant::now();
    let mut b = Budget::new(GIB);
    let mut r = ra(ReadaheadMode::Auto);
    let p = r.on_read(t, 0, MIB, GIB, &mut b);
    // Window 2 MiB ahead of the reader's frontier (1 MiB): the demand MiB, then two more.
    assert_eq!(
        p.fetch,
        vec![
            FetchRequest {
                offset: 0,
                len: MIB,
                kind: FetchKind::Demand
            },
            FetchRequest {
                offset: MIB,
                len: MIB,
                kind: FetchKind::Readahead
            },
            FetchRequest {
                offset: 2 * MIB,
                len: MIB,
                kind: FetchKind::Readahead
            },
        ]
    );
    assert_eq!(r.window_bytes(), 2 * MIB);
    assert_eq!(b.used_bytes(), 2 * MIB);
}

#[test]
fn the_second_adjacent_read_makes_a_stream_sequential_with_a_small_start() {
    let t = Instant::now();
    let mut b = Budget::new(GIB);
    let mut r = ra(ReadaheadMode::Auto);
    r.on_read(t, 40 * MIB, 4 * KIB, GIB, &mut b);
    let p = r.on_read(t, 40 * MIB + 4 * KIB, 4 * KIB, GIB, &mut b);
    // 4 × 4 KiB window, 8 KiB chunks, starting where the first read's fetch ended.
    assert_eq!(r.window_bytes(), 16 * KIB);
    assert!(total(&p) <= 16 * KIB, "{p:?}");
    assert_eq!(p.fetch[0].offset, 40 * MIB + 4 * KIB);
}

#[test]
fn the_window_doubles_each_time_a_window_is_consumed() {
    let t0 = Instant::now();
    let mut b = Budget::new(GIB);
    let mut r = ra(ReadaheadMode::Auto);
    let mut windows = vec![];
    for i in 0..64 {
        r.on_read(t0, i * MIB, MIB, 10 * GIB, &mut b);
        windows.push(r.window_bytes());
    }
    windows.dedup();
    // No samples yet: unbounded by need, capped at 128 MiB.
    assert_eq!(
        windows,
        vec![2 * MIB, 4 * MIB, 8 * MIB, 16 * MIB, 32 * MIB, 64 * MIB]
    );
    let ev = r.take_trace();
    assert!(ev
        .iter()
        .any(|e| matches!(e.kind, TraceKind::WindowGrew { .. })));
}

#[test]
fn growth_stops_at_the_measured_need() {
    let t0 = Instant::now();
    let mut b = Budget::new(GIB);
    let mut r = ra(ReadaheadMode::Auto);
    // A READ outstanding 10 ms during which 10 MiB arrived: 1 GB/s-ish, RTT 10 ms.
    let p = r.on_read(t0, 0, MIB, 10 * GIB, &mut b);
    let first = p.fetch[0];
    r.on_fetch_complete(
        t0 + Duration::from_millis(10),
        MIB,
        9 * MIB,
        Duration::from_millis(10),
    );
    r.on_fetch_complete(
        t0 + Duration::from_millis(10),
        first.offset,
        first.len,
        Duration::from_millis(10),
    );
    let need = r.need_bytes().unwrap();
    assert!((20 * MIB..22 * MIB).contains(&need), "{need}");
    for i in 1..200 {
        r.on_read(t0, i * MIB, MIB, 10 * GIB, &mut b);
    }
    assert_eq!(r.window_bytes(), need.div_ceil(MIB) * MIB);
}

/// Regression (simulator seed 5, `auto_readahead_fills_a_jittery_link`): jitter that the
/// window did not cause raises the need; a standing queue that it did cause does not.
#[test]
fn jitter_raises_the_need_and_a_standing_queue_does_not() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let feed = |rtts: &[u64]| {
        let mut r = ra(ReadaheadMode::Auto);
        let mut b = Budget::new(GIB);
        r.on_read(t0, 0, MIB, 10 * GIB, &mut b);
        for (i, &rtt) in rtts.iter().enumerate() {
            r.on_fetch_complete(t0 + ms(i as u64), 0, MIB, ms(rtt));
        }
        r.rtt_late().unwrap()
    };
    // Steady at 10 ms: the late RTT is the minimum.
    assert_eq!(feed(&[10; 200]), ms(10));
    // A standing queue of 30 ms after 100 samples: a step, then steady again.
    let mut shifted = vec![10; 100];
    shifted.extend([40; 100]);
    assert!(feed(&shifted) < ms(11), "{:?}", feed(&shifted));
    // RTTs alternating between 10 and 40 ms: the late RTT covers the long ones.
    let jittery: Vec<u64> = (0..200).map(|i| if i % 2 == 0 { 10 } else { 40 }).collect();
    assert!(feed(&jittery) >= ms(60), "{:?}", feed(&jittery));
}

/// Reads `MIB` at a time from `from` to `to` (in MiB): before read `i`, `gap(i)` passes and
/// the READ at `i` MiB completes with RTT `rtt(i, window)` (a server-bound reader, whose
/// RTT may depend on the window it has itself queued at the server).
fn drive(
    r: &mut FileReadahead,
    b: &mut Budget,
    t: &mut Instant,
    range: std::ops::Range<u64>,
    gap: impl Fn(u64) -> Duration,
    rtt: impl Fn(u64, u64) -> Duration,
) -> u64 {
    let mut peak = 0;
    for i in range {
        *t += gap(i);
        let w = r.window_bytes();
        r.on_fetch_complete(*t, i * MIB, MIB, rtt(i, w));
        r.on_read(*t, i * MIB, MIB, 10 * GIB, b);
        peak = peak.max(r.window_bytes());
    }
    peak
}

/// Every other READ waits behind the whole window (0.5 ms per MiB queued): RTTs whose
/// spread grows with the window, at a reader rate that does not (1 MiB per ms).
fn self_queued(i: u64, window: u64) -> Duration {
    let queued = if i % 2 == 1 { window / MIB } else { 0 };
    Duration::from_micros(200 + 500 * queued)
}

/// The regression of the loopback measurement (issue 17): without the full-pipe test the
/// jitter of a queue the window builds itself feeds the window up to its cap; with it, the
/// window stops after three flat rounds and falls back to the need sized with the jitter of
/// the last round that added rate.
#[test]
fn a_full_pipe_stops_growth_fed_by_the_windows_own_queue() {
    let ms = Duration::from_millis;
    let run = |full_pipe_rounds| {
        let mut r = FileReadahead::new(ReadaheadConfig {
            full_pipe_rounds,
            ..ReadaheadConfig::default()
        });
        let mut b = Budget::new(GIB);
        let mut t = Instant::now();
        let peak = drive(&mut r, &mut b, &mut t, 0..600, |_| ms(1), self_queued);
        (r, peak)
    };
    let (old, old_peak) = run(0);
    assert!(old_peak >= 64 * MIB, "without the test: {old_peak}");
    assert!(old.window_bytes() >= 64 * MIB, "{}", old.window_bytes());
    assert_eq!(old.stats().pipe_full, 0);

    let (mut r, peak) = run(3);
    println!(
        "window {} at most, {} at the end; {old_peak} at most without the test",
        peak,
        r.window_bytes()
    );
    assert!(peak <= 32 * MIB, "peak {peak}");
    assert!(r.window_bytes() <= 12 * MIB, "{}", r.window_bytes());
    assert!(r.window_bytes() >= 2 * MIB, "{}", r.window_bytes());
    assert!(r.streams()[0].pipe_full);
    assert_eq!(r.stats().pipe_full, 1);
    assert!(r.stats().bandwidth_probes > 0);
    assert!(r.take_trace().iter().any(|e| matches!(
        e.kind,
        TraceKind::WindowShrank {
            reason: ShrinkReason::PipeFull,
            ..
        }
    )));
}

/// A window-limited reader (it consumes a window per RTT, so each round's rate doubles
/// with the window) never counts a flat round: the window grows to the need as before.
#[test]
fn a_window_limited_reader_keeps_growing_to_the_need() {
    let mut r = ra(ReadaheadMode::Auto);
    let mut b = Budget::new(GIB);
    let mut t = Instant::now();
    // 10 ms RTT, and a reader that waits one RTT each time it has consumed its window.
    let rtt = Duration::from_millis(10);
    for i in 0..2_000u64 {
        let w = r.window_bytes().max(MIB);
        if i % (w / MIB) == 0 {
            t += rtt;
        }
        r.on_fetch_complete(t, i * MIB, MIB, rtt);
        r.on_read(t, i * MIB, MIB, 10 * GIB, &mut b);
        if r.window_bytes() >= 64 * MIB {
            break;
        }
    }
    assert!(r.window_bytes() >= 64 * MIB, "{}", r.window_bytes());
    assert_eq!(r.stats().pipe_full, 0);
}

/// Once full, a bandwidth probe that finds a faster path (the reader's rate rose by the
/// growth percentage in the probe round) lets the window grow again.
#[test]
fn a_probe_that_finds_more_rate_resumes_growth() {
    let mut r = ra(ReadaheadMode::Auto);
    let mut b = Budget::new(GIB);
    let mut t = Instant::now();
    let us = Duration::from_micros;
    drive(&mut r, &mut b, &mut t, 0..300, |_| us(1000), self_queued);
    assert!(r.streams()[0].pipe_full);
    let probes = r.stats().bandwidth_probes;
    let before = r.window_bytes();
    // The reader (and the path behind it) now runs four times as fast, no queue.
    let mut resumed = false;
    for i in 300..1_500 {
        drive(
            &mut r,
            &mut b,
            &mut t,
            i..i + 1,
            |_| us(250),
            |_, _| us(200),
        );
        resumed |= !r.streams()[0].pipe_full;
    }
    assert!(r.stats().bandwidth_probes > probes);
    assert!(resumed, "no probe ended the full state");
    assert!(
        r.window_bytes() > before,
        "{} <= {before}",
        r.window_bytes()
    );
}

#[test]
fn a_window_far_above_need_halves() {
    let t0 = Instant::now();
    let mut b = Budget::new(GIB);
    let mut r = ra(ReadaheadMode::Auto);
    for i in 0..64 {
        r.on_read(t0, i * MIB, MIB, 10 * GIB, &mut b);
    }
    assert_eq!(r.window_bytes(), 64 * MIB);
    // Now the link turns out tiny: the first READ (1 MiB) took 10 ms alone.
    r.on_fetch_complete(
        t0 + Duration::from_millis(10),
        0,
        MIB,
        Duration::from_millis(10),
    );
    for i in 64..400 {
        r.on_read(t0, i * MIB, MIB, 10 * GIB, &mut b);
    }
    assert!(r.window_bytes() <= 4 * MIB, "{}", r.window_bytes());
}

#[test]
fn the_per_file_cap_and_the_shared_budget_bound_the_window() {
    let t0 = Instant::now();
    let mut b = Budget::new(10 * MIB);
    let config = ReadaheadConfig {
        window_bytes_max: 16 * MIB,
        ..ReadaheadConfig::default()
    };
    let mut r1 = FileReadahead::new(config.clone());
    let mut r2 = FileReadahead::new(config);
    for i in 0..100 {
        r1.on_read(t0, i * MIB, MIB, 10 * GIB, &mut b);
        assert!(r1.window_bytes() <= 16 * MIB);
        assert!(b.used_bytes() <= 10 * MIB, "{}", b.used_bytes());
    }
    // The second file finds the budget spent: only its demand is fetched (an overdraft of at
    // most one chunk beyond its reader), and it records why.
    for i in 0..10 {
        let p = r2.on_read(t0, i * MIB, MIB, 10 * GIB, &mut b);
        assert!(p.fetch.iter().all(|f| f.kind == FetchKind::Demand), "{p:?}");
        assert!(b.used_bytes() <= 11 * MIB, "{}", b.used_bytes());
    }
    assert!(r2.stats().budget_limited > 0);
    r1.invalidate(t0, &mut b);
    r2.invalidate(t0, &mut b);
    assert_eq!(b.used_bytes(), 0);
    assert!(b.high_water_bytes() >= 10 * MIB);
}

#[test]
fn nothing_is_fetched_past_eof() {
    let t0 = Instant::now();
    let mut b = Budget::new(GIB);
    let mut r = ra(ReadaheadMode::Auto);
    let size = 3 * MIB + 123;
    let mut off = 0;
    while off < size {
        let p = r.on_read(t0, off, 128 * KIB, size, &mut b);
        for f in &p.fetch {
            assert!(f.offset + f.len <= size, "{f:?}");
        }
        off += 128 * KIB;
    }
    assert_eq!(r.stats().demand_bytes + r.stats().readahead_bytes, size);
    assert!(r.on_read(t0, size, 10, size, &mut b).fetch.is_empty());
}

#[test]
fn off_fetches_exactly_the_reads() {
    let t0 = Instant::now();
    let mut b = Budget::new(GIB);
    let mut r = ra(ReadaheadMode::Off);
    for i in 0..10 {
        let p = r.on_read(t0, i * 3 * MIB, 3 * MIB, GIB, &mut b);
        assert_eq!(p.fetch.len(), 3);
        assert_eq!(total(&p), 3 * MIB);
    }
    assert_eq!(r.stats().readahead_bytes, 0);
    assert_eq!(b.used_bytes(), 0);
}

#[test]
fn fixed_keeps_its_window_and_read_size() {
    let t0 = Instant::now();
    let mut b = Budget::new(GIB);
    let mut r = ra(ReadaheadMode::Fixed(128 * KIB));
    for i in 0..100 {
        let p = r.on_read(t0, i * 128 * KIB, 128 * KIB, GIB, &mut b);
        for f in &p.fetch {
            assert!(f.len <= 128 * KIB);
        }
        assert_eq!(r.window_bytes(), 128 * KIB);
        assert!(b.used_bytes() <= 128 * KIB);
    }
}

#[test]
fn interleaved_readers_get_their_own_streams() {
    let t0 = Instant::now();
    let mut b = Budget::new(GIB);
    let mut r = ra(ReadaheadMode::Auto);
    for i in 0..32 {
        r.on_read(t0, i * MIB, MIB, 10 * GIB, &mut b);
        r.on_read(t0, 5 * GIB + i * MIB, MIB, 10 * GIB, &mut b);
    }
    let s = r.streams();
    assert_eq!(s.len(), 2);
    assert!(s.iter().all(|s| s.window_bytes >= 8 * MIB), "{s:?}");
    assert_eq!(r.stats().random_reads, 1);
}

#[test]
fn a_seek_halves_the_window_and_discards_beyond_it() {
    let t0 = Instant::now();
    let mut b = Budget::new(GIB);
    let mut r = ra(ReadaheadMode::Auto);
    for i in 0..16 {
        r.on_read(t0, i * MIB, MIB, 10 * GIB, &mut b);
    }
    let before = r.streams()[0];
    let p = r.on_read(t0, 5 * GIB, 4 * KIB, 10 * GIB, &mut b);
    assert_eq!(total(&p), 4 * KIB);
    let old = r.streams().into_iter().find(|s| s.id == before.id).unwrap();
    assert_eq!(old.window_bytes, before.window_bytes / 2);
    assert_eq!(
        p.discard,
        vec![ByteRange {
            offset: before.position + old.window_bytes,
            len: before.fetched_end - before.position - old.window_bytes
        }]
    );
    assert!(r.take_trace().iter().any(|e| matches!(
        e.kind,
        TraceKind::WindowShrank {
            reason: ShrinkReason::RandomAccess,
            ..
        }
    )));
}

/// Reads out of order by up to `reorder_reads` (16) of their length stay with their
/// stream, ahead of what it requested and behind its frontier, and the frontier's last 16
/// reads are marked for keeping; a read further away is random access.
#[test]
fn reads_out_of_order_within_the_allowance_stay_sequential() {
    let t0 = Instant::now();
    let mut b = Budget::new(GIB);
    let mut r = ra(ReadaheadMode::Auto);
    r.on_read(t0, 0, MIB, 10 * GIB, &mut b);
    let s = r.streams()[0];
    assert_eq!(s.keep_from, 0);
    // 13 reads beyond what was requested (15 beyond the frontier): sequential, the gap
    // becomes demand.
    let ahead = s.fetched_end + 13 * MIB;
    let p = r.on_read(t0, ahead, MIB, 10 * GIB, &mut b);
    assert!(p
        .fetch
        .iter()
        .any(|f| f.offset == s.fetched_end && f.kind == FetchKind::Demand));
    assert!(p.discard.is_empty());
    let t = r.streams()[0];
    assert_eq!((r.streams().len(), t.position), (1, ahead + MIB));
    assert_eq!(t.keep_from, t.position - 16 * MIB);
    // The late reads it jumped over belong to it too, the oldest last (its window is still
    // only a few MiB).
    let requested = s.fetched_end;
    for late in (requested / MIB..ahead / MIB).rev() {
        r.on_read(t0, late * MIB, MIB, 10 * GIB, &mut b);
    }
    assert_eq!(r.streams().len(), 1);
    assert_eq!(r.stats().random_reads, 0);
    assert_eq!(r.stats().unused_bytes, 0);
    // 17 reads beyond: random access.
    let s = r.streams()[0];
    r.on_read(t0, s.fetched_end + 17 * MIB, MIB, 10 * GIB, &mut b);
    assert_eq!(r.stats().random_reads, 1);
    assert_eq!(r.streams().len(), 2);
}

#[test]
fn streams_are_bounded_and_evicted_least_recent_first() {
    let t0 = Instant::now();
    let mut b = Budget::new(GIB);
    let mut r = ra(ReadaheadMode::Auto);
    r.on_read(t0, 0, MIB, 10 * GIB, &mut b);
    let seq = r.streams()[0].id;
    for i in 1..20u64 {
        r.on_read(t0, i * 100 * MIB, 4 * KIB, 10 * GIB, &mut b);
        assert!(r.streams().len() <= 8);
    }
    assert!(r.streams().iter().all(|s| s.id != seq));
    assert_eq!(r.stats().streams_evicted, 12);
}

#[test]
fn invalidate_discards_everything_ahead() {
    let t0 = Instant::now();
    let mut b = Budget::new(GIB);
    let mut r = ra(ReadaheadMode::Auto);
    r.on_read(t0, 0, MIB, 10 * GIB, &mut b);
    let d = r.invalidate(t0, &mut b);
    assert_eq!(
        d,
        vec![ByteRange {
            offset: MIB,
            len: 2 * MIB
        }]
    );
    assert_eq!(b.used_bytes(), 0);
    assert!(r.streams().is_empty());
    // The same read starts over (re-fetches the demand).
    let p = r.on_read(t0, 0, MIB, 10 * GIB, &mut b);
    assert_eq!(p.fetch[0].offset, 0);
}

#[test]
fn a_reader_running_into_another_stream_merges_with_it() {
    let t0 = Instant::now();
    let mut b = Budget::new(GIB);
    let mut r = ra(ReadaheadMode::Auto);
    // A small sequential stream at 8 MiB with a little readahead.
    let mut fetched = Vec::new();
    fetched.extend(r.on_read(t0, 8 * MIB, 4 * KIB, GIB, &mut b).fetch);
    fetched.extend(r.on_read(t0, 8 * MIB + 4 * KIB, 4 * KIB, GIB, &mut b).fetch);
    for i in 0..12 {
        fetched.extend(r.on_read(t0, i * MIB, MIB, GIB, &mut b).fetch);
    }
    assert_eq!(r.streams().len(), 1, "{:?}", r.streams());
    // The only bytes fetched twice: the 8 KiB the small stream had already consumed, and
    // the 4 KiB of its readahead discarded when the big reader's first read halved it.
    fetched.sort_by_key(|f| f.offset);
    let mut twice = 0;
    for (i, f) in fetched.iter().enumerate() {
        for g in &fetched[i + 1..] {
            let lo = f.offset.max(g.offset);
            let hi = (f.offset + f.len).min(g.offset + g.len);
            twice += hi.saturating_sub(lo);
        }
    }
    assert!(
        twice <= 12 * KIB,
        "{twice} bytes fetched twice: {fetched:?}"
    );
    assert_eq!(
        b.used_bytes(),
        r.streams()[0].fetched_end - r.streams()[0].position
    );
}

/// Random reads of every shape, interleaved sequential readers, completions, seeks and
/// invalidations. Checks: every read's bytes are requested (now or before), no fetch passes
/// EOF, no two unconsumed requests overlap, the budget balances, windows respect the cap.
#[test]
fn randomized_reads_keep_the_invariants() {
    let (_, mut rng) = seeded_rng("readahead::randomized_reads_keep_the_invariants");
    for round in 0..60 {
        let mode = match round % 4 {
            0 | 1 => ReadaheadMode::Auto,
            2 => ReadaheadMode::Fixed(rng.gen_range(1..64) * 16 * KIB),
            _ => ReadaheadMode::Off,
        };
        let config = ReadaheadConfig {
            mode,
            rsize_bytes: (64 * KIB) << rng.gen_range(0..5),
            window_bytes_max: MIB << rng.gen_range(0..6),
            streams_max: rng.gen_range(1..10),
            ..ReadaheadConfig::default()
        };
        let mut r = FileReadahead::new(config.clone());
        let mut b = Budget::new(MIB << rng.gen_range(0..8));
        let size: u64 = rng.gen_range(1..512 * MIB);
        let mut t = Instant::now();
        let mut readers: Vec<u64> = (0..rng.gen_range(1..4))
            .map(|_| rng.gen_range(0..size))
            .collect();
        // Everything requested and not discarded since the last invalidation.
        let mut known = RangeSet::default();
        let mut outstanding: Vec<FetchRequest> = Vec::new();
        for _ in 0..5_000 {
            t += Duration::from_micros(rng.gen_range(0..2_000));
            let choice = rng.gen_range(0..100);
            if choice < 5 {
                let d = r.invalidate(t, &mut b);
                assert_eq!(b.used_bytes(), 0);
                drop(d);
                known = RangeSet::default();
                continue;
            }
            if choice < 30 && !outstanding.is_empty() {
                let i = rng.gen_range(0..outstanding.len());
                let f = outstanding.swap_remove(i);
                r.on_fetch_complete(
                    t,
                    f.offset,
                    f.len,
                    Duration::from_micros(rng.gen_range(100..50_000)),
                );
                continue;
            }
            let (off, len) = if choice < 45 {
                (rng.gen_range(0..size + 10), rng.gen_range(1..2 * MIB))
            } else {
                let k = rng.gen_range(0..readers.len());
                let len = [4 * KIB, 128 * KIB, MIB, 1000][rng.gen_range(0..4)];
                let off = readers[k];
                readers[k] = if off + len >= size { 0 } else { off + len };
                (off, len)
            };
            let p = r.on_read(t, off, len, size, &mut b);
            for d in &p.discard {
                known.remove(d.offset, d.end());
            }
            for f in &p.fetch {
                assert!(f.len > 0 && f.offset + f.len <= size, "{f:?} size {size}");
                outstanding.push(*f);
                known.insert(f.offset, f.offset + f.len);
            }
            if off < size {
                let end = (off + len).min(size);
                assert!(
                    known.covers(off, end),
                    "read {off}+{len} not requested; plan {p:?}"
                );
            }
            // Unconsumed requests of the engine never overlap each other.
            let mut ahead: Vec<(u64, u64)> = r
                .streams()
                .iter()
                .filter(|s| s.fetched_end > s.position)
                .map(|s| (s.position, s.fetched_end))
                .collect();
            ahead.sort();
            for w in ahead.windows(2) {
                assert!(w[0].1 <= w[1].0, "streams overlap: {ahead:?}");
            }
            let charged: u64 = ahead.iter().map(|(a, e)| e - a).sum();
            assert_eq!(b.used_bytes(), charged);
            assert!(r.streams().len() <= config.streams_max);
            if mode == ReadaheadMode::Auto {
                let slack = config.streams_max as u64 * 2 * config.align_bytes;
                assert!(r.window_bytes() <= config.window_bytes_max + slack);
            }
        }
        r.invalidate(t, &mut b);
        assert_eq!(b.used_bytes(), 0);
    }
}

/// Disjoint half-open ranges, start → end.
#[derive(Default)]
struct RangeSet(std::collections::BTreeMap<u64, u64>);

impl RangeSet {
    fn insert(&mut self, mut lo: u64, mut hi: u64) {
        let overlapping: Vec<(u64, u64)> = self
            .0
            .range(..=hi)
            .filter(|(_, &e)| e >= lo)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in overlapping {
            self.0.remove(&s);
            lo = lo.min(s);
            hi = hi.max(e);
        }
        self.0.insert(lo, hi);
    }

    fn remove(&mut self, lo: u64, hi: u64) {
        let overlapping: Vec<(u64, u64)> = self
            .0
            .range(..hi)
            .filter(|(_, &e)| e > lo)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in overlapping {
            self.0.remove(&s);
            if s < lo {
                self.0.insert(s, lo);
            }
            if e > hi {
                self.0.insert(hi, e);
            }
        }
    }

    fn covers(&self, lo: u64, hi: u64) -> bool {
        self.0
            .range(..=lo)
            .next_back()
            .is_some_and(|(_, &e)| e >= hi)
    }
}
