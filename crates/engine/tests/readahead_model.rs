//! The readahead policy's own proof, in virtual time.
//!
//! A tiny model, not the full client/server simulation: readers that consume at a rate, a data
//! cache, and a link with a round-trip time and a bandwidth that serves READs first-in first-out
//! with at most `in_flight_max` outstanding (the transport's slot table; more wait at the client).
//!
//! ```text
//!   reader ──on_read──► FileReadahead ──FetchRequest──► client queue ──► link (RTT/2)
//!     ▲                       ▲                                            │
//!     │ data in cache         └──on_fetch_complete(rtt)── cache ◄── server FIFO at B, RTT/2
//! ```
//! Run with `--nocapture` to see the measured grid.

#![allow(clippy::disallowed_methods)] // one real `Instant` as the virtual clock's base

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_engine::readahead::{Budget, FileReadahead, ReadaheadConfig, ReadaheadMode};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;
const NS: u64 = 1_000_000_000;

// ---- the model -----------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct LinkSpec {
    rtt_ns: u64,
    bw_bytes_per_sec: u64,
    in_flight_max: usize,
}

impl LinkSpec {
    fn bdp_bytes(&self) -> u64 {
        (u128::from(self.bw_bytes_per_sec) * u128::from(self.rtt_ns) / u128::from(NS)) as u64
    }
}

#[derive(Debug, Clone, Copy)]
struct Fetch {
    file: usize,
    offset: u64,
    len: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A READ's reply reached the client.
    Done {
        file: usize,
        offset: u64,
        len: u64,
        sent_ns: u64,
    },
    /// A reader is ready for its next read.
    Wake { reader: usize },
}

enum Pattern {
    /// `read_len` reads from `pos` up to `end`.
    Sequential { pos: u64, end: u64 },
    /// `left` reads at random aligned offsets.
    Random { left: u64, rng: Box<ChaCha8Rng> },
}

struct Reader {
    file: usize,
    pattern: Pattern,
    read_len: u64,
    /// Consumption rate once data is there; 0 = instantly.
    rate_bytes_per_sec: u64,
    waiting: Option<(u64, u64)>,
    consumed_bytes: u64,
    /// Throughput is measured from the moment `consumed_bytes` passes this.
    measure_from_bytes: u64,
    mark: Option<(u64, u64)>,
    done_ns: Option<u64>,
}

impl Reader {
    fn sequential(file: usize, pos: u64, end: u64, read_len: u64) -> Self {
        Reader {
            file,
            pattern: Pattern::Sequential { pos, end },
            read_len,
            rate_bytes_per_sec: 0,
            waiting: None,
            consumed_bytes: 0,
            measure_from_bytes: 0,
            mark: None,
            done_ns: None,
        }
    }

    /// Bytes per second consumed after the measurement mark.
    fn measured_rate(&self) -> f64 {
        let (t1, b1) = self.mark.expect("mark reached");
        let t2 = self.done_ns.expect("reader finished");
        (self.consumed_bytes - b1) as f64 * NS as f64 / (t2 - t1).max(1) as f64
    }
}

struct File {
    ra: FileReadahead,
    size: u64,
    cache: RangeSet,
    in_flight: RangeSet,
}

struct Sim {
    base: Instant,
    now_ns: u64,
    seq: u64,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    link: LinkSpec,
    outstanding: usize,
    queue: VecDeque<Fetch>,
    server_free_ns: u64,
    files: Vec<File>,
    readers: Vec<Reader>,
    budget: Budget,
    fetched_bytes: u64,
    asked_bytes: u64,
}

impl Sim {
    fn new(link: LinkSpec, budget_bytes: u64) -> Self {
        Sim {
            base: Instant::now(),
            now_ns: 0,
            seq: 0,
            events: BinaryHeap::new(),
            link,
            outstanding: 0,
            queue: VecDeque::new(),
            server_free_ns: 0,
            files: Vec::new(),
            readers: Vec::new(),
            budget: Budget::new(budget_bytes),
            fetched_bytes: 0,
            asked_bytes: 0,
        }
    }

    fn add_file(&mut self, config: ReadaheadConfig, size: u64) -> usize {
        self.files.push(File {
            ra: FileReadahead::new(config),
            size,
            cache: RangeSet::default(),
            in_flight: RangeSet::default(),
        });
        self.files.len() - 1
    }

    fn add_reader(&mut self, r: Reader) {
        self.readers.push(r);
        let reader = self.readers.len() - 1;
        self.schedule(0, Event::Wake { reader });
    }

    fn at(&self, ns: u64) -> Instant {
        self.base + Duration::from_nanos(ns)
    }

    fn schedule(&mut self, at_ns: u64, e: Event) {
        self.seq += 1;
        self.events.push(Reverse((at_ns, self.seq, e)));
    }

    /// Runs until every reader is done.
    fn run(&mut self) {
        while let Some(Reverse((t, _, e))) = self.events.pop() {
            assert!(t >= self.now_ns);
            self.now_ns = t;
            match e {
                Event::Wake { reader } => self.read(reader),
                Event::Done {
                    file,
                    offset,
                    len,
                    sent_ns,
                } => self.complete(file, offset, len, sent_ns),
            }
        }
        for (i, r) in self.readers.iter().enumerate() {
            assert!(
                r.done_ns.is_some(),
                "reader {i} stuck waiting for {:?}",
                r.waiting
            );
        }
    }

    fn read(&mut self, reader: usize) {
        let now = self.at(self.now_ns);
        let r = &mut self.readers[reader];
        let (offset, len) = match &mut r.pattern {
            Pattern::Sequential { pos, end } => {
                if *pos >= *end {
                    r.done_ns = Some(self.now_ns);
                    return;
                }
                let len = r.read_len.min(*end - *pos);
                let off = *pos;
                *pos += len;
                (off, len)
            }
            Pattern::Random { left, rng } => {
                if *left == 0 {
                    r.done_ns = Some(self.now_ns);
                    return;
                }
                *left -= 1;
                let blocks = self.files[r.file].size / r.read_len;
                (rng.gen_range(1..blocks) * r.read_len, r.read_len)
            }
        };
        let fi = r.file;
        self.asked_bytes += len;
        let f = &mut self.files[fi];
        let plan = f.ra.on_read(now, offset, len, f.size, &mut self.budget);
        for d in &plan.discard {
            f.cache.remove(d.offset, d.end());
        }
        for req in &plan.fetch {
            let f = &mut self.files[fi];
            assert!(req.offset + req.len <= f.size, "fetch past EOF: {req:?}");
            let (lo, hi) = (req.offset, req.offset + req.len);
            if f.cache.covers(lo, hi) || f.in_flight.covers(lo, hi) {
                continue;
            }
            f.in_flight.insert(lo, hi);
            self.fetched_bytes += req.len;
            self.send(Fetch {
                file: fi,
                offset: req.offset,
                len: req.len,
            });
        }
        self.readers[reader].waiting = Some((offset, offset + len));
        self.try_consume(reader);
    }

    fn send(&mut self, f: Fetch) {
        if self.outstanding >= self.link.in_flight_max {
            self.queue.push_back(f);
            return;
        }
        self.outstanding += 1;
        let half = self.link.rtt_ns / 2;
        let arrive = self.now_ns + half;
        let start = arrive.max(self.server_free_ns);
        let service =
            (u128::from(f.len) * u128::from(NS) / u128::from(self.link.bw_bytes_per_sec)) as u64;
        self.server_free_ns = start + service;
        let e = Event::Done {
            file: f.file,
            offset: f.offset,
            len: f.len,
            sent_ns: self.now_ns,
        };
        self.schedule(self.server_free_ns + half, e);
    }

    fn complete(&mut self, file: usize, offset: u64, len: u64, sent_ns: u64) {
        self.outstanding -= 1;
        let now = self.at(self.now_ns);
        let f = &mut self.files[file];
        f.in_flight.remove(offset, offset + len);
        f.cache.insert(offset, offset + len);
        let rtt = Duration::from_nanos(self.now_ns - sent_ns);
        f.ra.on_fetch_complete(now, offset, len, rtt);
        if let Some(next) = self.queue.pop_front() {
            self.send(next);
        }
        for reader in 0..self.readers.len() {
            if self.readers[reader].file == file {
                self.try_consume(reader);
            }
        }
    }

    fn try_consume(&mut self, reader: usize) {
        let r = &self.readers[reader];
        // A reader with no read outstanding has nothing to consume (the model's own state, not
        // a missing environment).
        let Some((lo, hi)) = r.waiting else { return };
        if !self.files[r.file].cache.covers(lo, hi) {
            return;
        }
        let r = &mut self.readers[reader];
        r.waiting = None;
        r.consumed_bytes += hi - lo;
        if r.mark.is_none() && r.consumed_bytes >= r.measure_from_bytes {
            r.mark = Some((self.now_ns, r.consumed_bytes));
        }
        let delay = if r.rate_bytes_per_sec == 0 {
            0
        } else {
            (u128::from(hi - lo) * u128::from(NS) / u128::from(r.rate_bytes_per_sec)) as u64
        };
        self.schedule(self.now_ns + delay, Event::Wake { reader });
    }
}

/// Disjoint half-open ranges, start → end.
#[derive(Default)]
struct RangeSet(BTreeMap<u64, u64>);

impl RangeSet {
    fn insert(&mut self, mut lo: u64, mut hi: u64) {
        let overlapping: Vec<(u64, u64)> = self
            .0
            .range(..=hi)
            .rev()
            .take_while(|(_, &e)| e >= lo)
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
            .rev()
            .take_while(|(_, &e)| e > lo)
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

// ---- scenarios -----------------------------------------------------------------------------

fn link(rtt_us: u64, bw_bytes_per_sec: u64) -> LinkSpec {
    LinkSpec {
        rtt_ns: rtt_us * 1_000,
        bw_bytes_per_sec,
        in_flight_max: 128,
    }
}

fn mode_config(mode: ReadaheadMode) -> ReadaheadConfig {
    ReadaheadConfig {
        mode,
        ..ReadaheadConfig::default()
    }
}

/// One sequential reader of 128 KiB reads over a file of max(32 × BDP, 256 MiB); returns the
/// rate after the first 8 × BDP bytes as a fraction of the link rate, and the final window.
fn one_sequential_reader(l: LinkSpec, mode: ReadaheadMode) -> (f64, u64) {
    let bdp = l.bdp_bytes();
    let size = (32 * bdp).max(256 * MIB).div_ceil(MIB) * MIB;
    let mut sim = Sim::new(l, GIB);
    let f = sim.add_file(mode_config(mode), size);
    let mut r = Reader::sequential(f, 0, size, 128 * KIB);
    r.measure_from_bytes = 8 * bdp;
    sim.add_reader(r);
    sim.run();
    let rate = sim.readers[0].measured_rate();
    let window = sim.files[f].ra.window_bytes();
    (rate / l.bw_bytes_per_sec as f64, window)
}

const RTTS_US: [u64; 4] = [200, 1_000, 10_000, 40_000];
const BWS: [u64; 3] = [12_500_000, 300_000_000, 1_000_000_000];

#[test]
fn auto_reaches_90_percent_of_the_link_on_every_cell() {
    let mut failures = vec![];
    eprintln!("mode    rtt_ms  bw_MB/s  BDP_KiB  rate/link  window_KiB");
    for rtt in RTTS_US {
        for bw in BWS {
            let l = link(rtt, bw);
            let (frac, window) = one_sequential_reader(l, ReadaheadMode::Auto);
            eprintln!(
                "auto   {:>7.1} {:>8.1} {:>8} {:>9.3} {:>11}",
                rtt as f64 / 1000.0,
                bw as f64 / 1e6,
                l.bdp_bytes() / KIB,
                frac,
                window / KIB
            );
            if frac < 0.9 {
                failures.push((rtt, bw, frac));
            }
        }
    }
    assert!(failures.is_empty(), "cells below 90%: {failures:?}");
}

#[test]
fn fixed_128k_falls_short_on_long_fat_links() {
    eprintln!("mode        rtt_ms  bw_MB/s  rate/link  rate_MB/s");
    let mut grid = BTreeMap::new();
    for rtt in RTTS_US {
        for bw in BWS {
            let (frac, window) =
                one_sequential_reader(link(rtt, bw), ReadaheadMode::Fixed(128 * KIB));
            assert_eq!(window, 128 * KIB);
            eprintln!(
                "fixed:128k {:>7.1} {:>8.1} {:>9.3} {:>10.1}",
                rtt as f64 / 1000.0,
                bw as f64 / 1e6,
                frac,
                frac * bw as f64 / 1e6
            );
            grid.insert((rtt, bw), frac);
        }
    }
    // 128 KiB per 40 ms round trip: ~3 MB/s of a 1 GB/s link.
    assert!(grid[&(40_000, 1_000_000_000)] < 0.01);
    // The Linux 5.4 regression: a 1 ms, 300 MB/s link is no longer filled. (The model gives
    // ~180 MB/s, a demand READ plus one 128 KiB READ ahead per round trip; the ~70 MB/s measured
    // on real kernels also pays page-cache and RPC overheads the model leaves out.)
    assert!(grid[&(1_000, 300_000_000)] < 0.7);
    assert!(grid[&(10_000, 300_000_000)] < 0.1);
    // Where 128 KiB covers the BDP, fixed is fine.
    assert!(grid[&(200, 12_500_000)] > 0.9);
}

#[test]
fn random_4k_reads_fetch_at_most_1_1_times_what_was_asked() {
    for mode in [ReadaheadMode::Auto, ReadaheadMode::Fixed(128 * KIB)] {
        let mut sim = Sim::new(link(1_000, 300_000_000), GIB);
        let f = sim.add_file(mode_config(mode), 4 * GIB);
        let seed = sluice_testkit::seed::seed("random_4k_reads_fetch_at_most_1_1", 0x5eed_4c1b);
        sim.add_reader(Reader {
            pattern: Pattern::Random {
                left: 20_000,
                rng: Box::new(ChaCha8Rng::seed_from_u64(seed)),
            },
            ..Reader::sequential(f, 0, 0, 4 * KIB)
        });
        sim.run();
        let ratio = sim.fetched_bytes as f64 / sim.asked_bytes as f64;
        eprintln!("{mode:?}: random 4 KiB reads fetched {ratio:.4}× the bytes asked");
        assert!(ratio <= 1.1, "{mode:?}: {ratio}");
    }
}

#[test]
fn two_interleaved_sequential_readers_of_one_file_both_reach_the_rate() {
    for (rtt, bw) in [
        (1_000, 300_000_000),
        (10_000, 1_000_000_000),
        (40_000, 1_000_000_000),
    ] {
        let l = link(rtt, bw);
        let bdp = l.bdp_bytes();
        let half = (32 * bdp).max(256 * MIB).div_ceil(MIB) * MIB;
        let mut sim = Sim::new(l, GIB);
        let f = sim.add_file(mode_config(ReadaheadMode::Auto), 2 * half);
        for start in [0, half] {
            let mut r = Reader::sequential(f, start, start + half, 128 * KIB);
            r.measure_from_bytes = 8 * bdp;
            sim.add_reader(r);
        }
        sim.run();
        let a = sim.readers[0].measured_rate() / bw as f64;
        let b = sim.readers[1].measured_rate() / bw as f64;
        let streams = sim.files[f].ra.stats().streams_started;
        eprintln!(
            "two readers, rtt {} ms, {} MB/s: {a:.3} + {b:.3} of the link; {streams} streams",
            rtt as f64 / 1000.0,
            bw as f64 / 1e6
        );
        assert!(a + b >= 0.9, "aggregate {a} + {b}");
        assert!(a >= 0.4 && b >= 0.4, "unfair: {a} vs {b}");
        assert_eq!(streams, 2);
    }
}

#[test]
fn a_slow_reader_gets_its_rate_without_a_bloated_window() {
    let l = link(10_000, 300_000_000);
    let rate = 50_000_000;
    let size = 512 * MIB;
    let mut sim = Sim::new(l, GIB);
    let f = sim.add_file(mode_config(ReadaheadMode::Auto), size);
    let mut r = Reader::sequential(f, 0, size, 128 * KIB);
    r.rate_bytes_per_sec = rate;
    r.measure_from_bytes = 64 * MIB;
    sim.add_reader(r);
    sim.run();
    let got = sim.readers[0].measured_rate();
    let window = sim.files[f].ra.window_bytes();
    eprintln!(
        "slow reader: {:.1} MB/s of {:.1}; window {} KiB",
        got / 1e6,
        rate as f64 / 1e6,
        window / KIB
    );
    assert!(got >= 0.9 * rate as f64, "{got}");
    // The reader needs rate × RTT = 0.5 MB in flight; allow the 2× gain and chunking, no more.
    assert!(window <= 8 * MIB, "window {window}");
}

#[test]
fn many_files_share_the_budget() {
    let l = link(10_000, 1_000_000_000);
    let budget = 64 * MIB;
    let mut sim = Sim::new(l, budget);
    for _ in 0..4 {
        let f = sim.add_file(mode_config(ReadaheadMode::Auto), 256 * MIB);
        sim.add_reader(Reader::sequential(f, 0, 256 * MIB, MIB));
    }
    sim.run();
    // Demand chunks may overdraw by one chunk per stream, never more.
    assert!(
        sim.budget.high_water_bytes() <= budget + 4 * MIB,
        "{}",
        sim.budget.high_water_bytes()
    );
    assert_eq!(sim.budget.used_bytes(), 0);
    let total: f64 = sim.readers.iter().map(|r| r.measured_rate()).sum();
    eprintln!("four files, 64 MiB budget: {:.3} of the link", total / 1e9);
    // 64 MiB covers 6 × the 10 MB BDP: the link stays full.
    assert!(total >= 0.9e9, "{total}");
}
