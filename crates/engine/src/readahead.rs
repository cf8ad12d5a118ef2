//! The client's readahead: what to fetch now, and how far ahead of the reader.
//!
//! # The problem this module exists for
//! A sequential reader over NFS is only as fast as the amount of data in flight allows:
//! `throughput <= bytes_in_flight / RTT`. Linux 5.4 pinned NFS readahead to 128 KiB
//! (`read_ahead_kb`); on a 1 ms, 300 MB/s link that caps a single reader near
//! 128 KiB / (1 ms + 0.4 ms) ≈ 90 MB/s, and measured sequential reads fell from ~300 MB/s to
//! ~70 MB/s. On a 40 ms, 1 GB/s path the same cap gives 3 MB/s. No fixed number fits both links,
//! so the window has to be *measured*, the way TCP receive-window autotuning sizes a socket
//! buffer.
//!
//! # Streams
//! A file may have several readers at once (two `cat`s, a parallel `cp`, a database scanning two
//! ranges). Each gets its own *stream*; a file holds at most [`ReadaheadConfig::streams_max`] (8)
//! streams and evicts the least recently used one. A stream is:
//! ```text
//!                  pos                              fetched_end
//!   ... consumed ...│◄──── requested (in flight or cached) ───►│
//!   ────────────────┼────────────────────────────────────────────┼───────────► offset
//!                   │◄──────────────── window_bytes ────────────────►│
//!                             trigger ▲ (when pos passes it, the window is reconsidered)
//! ```
//! A read belongs to a stream if it touches `[pos - tolerance, fetched_end]` (tolerance =
//! max(window, last read length, 16 read lengths), so reordered reads still belong; see
//! "Reordered reads" below). A read that belongs
//! to no stream is *random*: it starts a new stream with window 0, which fetches exactly the
//! bytes asked for, rounded out to [`ReadaheadConfig::align_bytes`] (4 KiB). Only a read that
//! continues such a stream makes it sequential. A read at offset 0 is taken as sequential at once
//! (most files are read from the start). This is what keeps random 4 KiB reads at ~1.0× bytes
//! fetched per byte asked, instead of one rsize per read.
//!
//! # The window
//! A sequential stream keeps `fetched_end` at most `window_bytes` ahead of `pos`, issuing READs
//! of `chunk = min(rsize, window / 2)` bytes whenever a whole chunk fits. Every chunk fully above
//! `pos` is charged to the shared [`Budget`]; consumption and discards give it back.
//!
//! * **Start**: `min(2 × rsize, 4 × the read length)`. Two rsize READs are the smallest pipeline
//!   that overlaps one READ's transfer with the next one's request, so that the link never idles
//!   between READs; the `4 × read length` bound keeps two accidentally adjacent small random reads
//!   from fetching a whole megabyte.
//! * **Growth** (multiplicative, like Linux's async readahead marker or TCP slow start): when
//!   `pos` passes `trigger`, the reader has consumed a whole window since the last decision; the
//!   window doubles and `trigger` moves a full new window ahead. A window-limited reader consumes
//!   a window per RTT, so the window doubles per RTT.
//! * **What is needed**: growth stops at `need = bdp_gain × bw_max × rtt_late` (a BBR-style
//!   bandwidth-delay product). `bw_max` is the windowed maximum of delivery-rate samples: for
//!   each completed READ, the bytes this file received while that READ was outstanding, divided
//!   by how long it was outstanding. While the window limits us `bw ≈ window / RTT`, so
//!   `need ≈ 2 × window` and growth continues; once the link (or the server, or a slow reader)
//!   limits us, `bw` stops rising and the window settles at `bdp_gain` (2) × the true BDP. A
//!   window more than twice `need` halves at the next trigger.
//! * **Which RTT** (`rtt_late = rtt_min + 2 × rtt_jitter`). The reader consumes in order, so
//!   the READ issued when the window's far edge passed an offset must be back by the time the
//!   reader gets there: the window has to cover the rate times the RTT of the *late* READs, not
//!   of the typical or the fastest one. Two things make READs late, and they need opposite
//!   treatment:
//!   - *our own queueing*: a window above the BDP parks its excess in the bottleneck queue, and
//!     every READ's RTT grows by the same standing delay. Counting that delay as "needed" is a
//!     positive feedback (a bigger window, a longer RTT, a bigger need): sized from the smoothed
//!     RTT, a high percentile, or even `rtt_min + 4 × rttvar` (tried: the queue's ramp while the
//!     window doubles keeps the deviation from the lagging mean high, and the windows of the
//!     acceptance grid ran to 53 MiB on a 2 KiB BDP), the window grows until the cap. It must be
//!     left out.
//!   - *the path's own jitter* (other traffic's queues, wireless retries, a server whose service
//!     time varies): no window size changes it, and a window sized from the minimum RTT leaves
//!     the reader waiting for every READ that drew a long one (seed 5 of the simulator: 10 ms ±
//!     5 ms at 300 MB/s reached 0.863 of the link; RTT uniform in [0.2, 40] ms at 12.5 MB/s,
//!     0.41). It must be counted.
//!
//!   A standing queue *shifts* every sample; jitter *spreads* them. So the estimate is a floor
//!   plus a spread, each blind to a shift. `rtt_min` is the windowed minimum (10 s, as BBR's
//!   min_rtt) of the RTT samples the caller reports. `rtt_jitter` is RTP's interarrival jitter
//!   (RFC 3550 §6.4.1) applied to consecutive RTT samples: `J += (|R_i - R_{i-1}| - J) / 16`
//!   (the plain mean of the differences until there are 16, so that the few rounds before the
//!   full-pipe test below keeps it do not see it still rising from 0). Both filters are
//!   `sluice_rpc::rtt`'s (`WindowedExtreme`, `RttJitter::new`), shared with the RPC client's
//!   UDP congestion window, which asks the same question of its replies.
//!   A difference of consecutive samples does not see a standing queue at all, and sees a
//!   growing one only by its slope per sample, about one chunk's serialization time whatever the
//!   window (each completed READ adds at most one more behind the others), so `need` stays at
//!   about `2 × BDP + 4 chunks` while the window grows and decays back to `2 × BDP` plus the real
//!   jitter once it stops; the `2 × need` halving rule trims what the ramp left. The price is on
//!   slow links with large READs, where one chunk's serialization dwarfs the BDP: in the
//!   readahead model, 12.5 MB/s with 1 MiB READs settles at 7 MiB where the BDP is a few KiB
//!   (the per-file cap and the global budget still bound it). Why two
//!   jitters: for RTTs uniform over a width `w` the mean absolute difference of two samples is
//!   `w / 3`, so `rtt_late ≈ rtt_min + 2w/3` and `need = 2 × bw × rtt_late` covers
//!   `bw × (rtt_min + w)`, the latest READ, with room to spare; three would reach the top of the
//!   range before the gain and pay the ramp's contamination once more (measured: two interleaved
//!   readers at 10 ms × 1 GB/s grew 24 MiB windows instead of 20 and fell to 0.884 of the
//!   link, as the first reader's overrun into the second one's half got longer). On a steady
//!   path `rtt_late` is `rtt_min`, the old estimate. Linux's TCP receive-buffer autotuning (`tcp_rcv_space_adjust`) sizes a buffer
//!   from what one RTT delivers for the same reason: what the path holds, not what our own
//!   buffer adds; `bw_max × rtt_late` is the readahead form of it.
//! * **When the pipe is full** (BBR's full-pipe test, over the reader's rounds). The jitter
//!   estimate is blind to a queue that *shifts* every RTT, not to one that *reorders* them. A
//!   server-bound reader on loopback (issue 17) has almost no path: every microsecond above
//!   `rtt_min` is the window's own READs waiting at the server, and a server with several
//!   connections or worker threads does not answer them in order, so consecutive RTTs differ by
//!   a fraction of the whole queue. The jitter then grows with the window, `need` with the
//!   jitter, and the window with `need`: measured with `sluice cat --nconnect 2` on loopback,
//!   67-128 MiB windows (58-129 READs in flight) for a server that 8 MiB keeps busy. In the
//!   simulator (a server that picks a waiting READ at random, 1 MiB per 400 µs, 20 µs RTT) the
//!   rule without the test grew to 61 MiB (43 READs in flight). No RTT statistic separates this
//!   queue from a path's own jitter (seed 5 of the simulator needs the jitter term), but the
//!   *rate* does: more window raises the rate only while the pipe is not full. So:
//!   - A **round** ends each time the reader passes the trigger (it consumed one window); its
//!     rate is the bytes consumed over its duration. Rounds of no measurable length (every read
//!     at one instant) are not counted.
//!   - While **filling**, a round whose rate is at least 125% of the best so far is growth
//!     (the best moves up, and the jitter of that moment is kept); otherwise it is flat. After
//!     three flat rounds in a row (BBR's numbers) the pipe is **full**. A window-limited reader
//!     consumes a window per RTT, so its rate doubles with the window and it never counts a
//!     flat round; growth toward `need` is unchanged on long links.
//!   - Once full, the window is the **smallest window of the filling rounds whose rate came
//!     within 90% of the best**, never below the minimum-RTT need (`bdp_gain × bw_max ×
//!     rtt_min`) and never above `need` sized with the jitter kept at the last round of growth
//!     (the queue was smallest then; a live jitter would feed on the queue again). The three
//!     flat rounds of doubling overshoot up to 8× (the price of not mistaking noise for a full
//!     pipe, as in BBR's startup); the drop comes right after.
//!   - Every 8 rounds a **probe** round runs at twice the window (BBR's bandwidth probe). If its
//!     rate reaches 125% of the best, the path got faster: filling starts again from there.
//!     Otherwise the window goes back.
//!
//!   The reader's rate, not the delivery rate, is what a round measures: a slow reader is a
//!   full pipe too, and its window stays small. What the numbers were (virtual time, seed 1):
//!   the server-bound scenario above ends at 3 MiB (9 MiB at most, 0.977 of the server's rate;
//!   61 MiB without the test), and 4 MiB with a server that answers in order (6 MiB without);
//!   the acceptance grid keeps every cell at 0.98 or more of the link with windows of 1-79 MiB
//!   where they were 2-80 MiB (40 ms × 1 GB/s: 79 MiB for a 38 MiB BDP; 0.2 ms × 1 GB/s:
//!   2 MiB, 0.982), and the jittery path of seed 5 (10 ± 5 ms × 300 MB/s) reaches 0.983 with
//!   5 MiB where it had 7 MiB and 1.000.
//! * **Caps**: the sum of a file's stream windows is at most
//!   [`ReadaheadConfig::window_bytes_max`], and growth never exceeds what the global [`Budget`]
//!   has left. A readahead chunk the budget cannot cover is simply not issued yet.
//! * **Shrink on random access**: a read that matches no stream halves the most recently used
//!   stream's window (to 0 below two alignment units) and discards what lies beyond its new
//!   window: the reader that seeked away will likely not come back for it.
//! * **Reordered reads**: a reader whose reads run concurrently asks for them out of order. The
//!   FUSE mount is one: the kernel hands it up to 8 MiB of readahead at once, 1 MiB per read,
//!   and the reads finish in any order, so offset 9 MiB may come before 5-8 MiB. Up to
//!   [`ReadaheadConfig::reorder_reads`] (16) of a stream's reads may be out of order. A stream
//!   takes a read that far behind `pos` (even while its window is still small), a sequential
//!   one also a read that starts that far beyond `fetched_end` (the skipped bytes become
//!   demand, as for any read past `pos`), instead of taking it for random access; and
//!   [`StreamInfo::keep_from`] tells the caller to keep that much data behind `pos`, which the
//!   late reads will want. The price: a random read that lands within 16 read lengths of a
//!   stream counts as part of it (it is still served, as demand), and up to 16 reads' worth of
//!   data the reader skipped stays cached until the reader moves on. Measured at 40 ms × 300 MB/s through `sluice link` (2026-11-26):
//!   without either, `dd` through the mount read 0.62-0.74 of the link in about half the runs.
//!   A reply that landed just after the frontier passed its offset was evicted before its read
//!   came, the read sent a new READ, and it waited 200 ms behind the 27 MiB window's queue;
//!   a read just past `fetched_end` halved the window as random access. About 100 of 572 READs
//!   went twice.
//!
//! ```text
//!   window
//!     │                 ┌────────────── need = 2 × bw_max × (rtt_min + 2 × rtt_jitter)
//!     │            ┌────┘                (a window-limited reader: its rate doubles per round)
//!     │       ┌────┘     ×2 each time the reader consumes a whole window (a round)
//!     │  ┌────┘         ┌──┐ three flat rounds: full   ┌┐ probe every 8 rounds
//!     │──┘ start     ┌──┘  └──────────────────────────┘└──── smallest window that had the rate
//!     └──────────────────────────────────► bytes consumed      (a server- or reader-bound one)
//! ```
//!
//! # Modes
//! * [`ReadaheadMode::Auto`]: all of the above (the default).
//! * [`ReadaheadMode::Fixed`]`(bytes)`: the window is fixed at `bytes` from the first sequential
//!   read and READs are `min(rsize, bytes)`. `Fixed(128 KiB)` reproduces Linux ≥ 5.4's NFS
//!   default, for comparison.
//! * [`ReadaheadMode::Off`]: fetch exactly what is read (aligned), nothing else.
//!
//! # Contract with the caller
//! The caller (the client crate) owns the data cache and the transport. It calls
//! [`FileReadahead::on_read`] for *every* application read, cache hit or not (the policy needs to
//! see the access pattern), issues the returned [`FetchRequest`]s after dropping any part it
//! already holds, drops the returned discard ranges from its cache (and may cancel READs in
//! flight for them), reports every completed READ with [`FileReadahead::on_fetch_complete`], and
//! calls [`FileReadahead::invalidate`] when the file's change attribute changes and when the file
//! is closed (which returns its budget). The engine never returns a range twice while it
//! believes the range is requested and unconsumed; it does not know what the caller evicted.
//! EOF comes from the caller (`file_size` on every read); no fetch ever extends past it.

use sluice_rpc::rtt::{Extreme, RttJitter, WindowedExtreme};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

mod types;

pub use types::{
    Budget, ByteRange, FetchKind, FetchRequest, ReadPlan, ReadaheadConfig, ReadaheadMode,
    ReadaheadStats, ShrinkReason, StreamInfo, TraceEvent, TraceKind,
};

/// The readahead state of one open file. See the module essay.
#[derive(Debug, Clone)]
pub struct FileReadahead {
    config: ReadaheadConfig,
    streams: Vec<Stream>,
    next_stream_id: u64,
    tick: u64,
    fetches: VecDeque<TrackedFetch>,
    delivered_bytes: u64,
    rtt_min: WindowedExtreme,
    rtt_jitter: RttJitter,
    bw_max: WindowedExtreme,
    stats: ReadaheadStats,
    trace: VecDeque<TraceEvent>,
}

impl FileReadahead {
    /// Fresh state for a newly opened file.
    ///
    /// # Panics
    /// On a zero `rsize_bytes`, `align_bytes` or `streams_max`, or an rsize that is not a multiple
    /// of the alignment.
    pub fn new(config: ReadaheadConfig) -> Self {
        assert!(config.align_bytes > 0 && config.rsize_bytes > 0);
        assert_eq!(
            config.rsize_bytes % config.align_bytes,
            0,
            "rsize not aligned"
        );
        assert!(config.streams_max > 0);
        if let ReadaheadMode::Fixed(b) = config.mode {
            assert!(b > 0, "a fixed window must be positive");
        }
        FileReadahead {
            config,
            streams: Vec::new(),
            next_stream_id: 0,
            tick: 0,
            fetches: VecDeque::new(),
            delivered_bytes: 0,
            rtt_min: WindowedExtreme::new(Extreme::Min),
            rtt_jitter: RttJitter::default(),
            bw_max: WindowedExtreme::new(Extreme::Max),
            stats: ReadaheadStats::default(),
            trace: VecDeque::new(),
        }
    }

    /// An application read of `len` bytes at `offset`, on a file of `file_size` bytes. Returns
    /// what to fetch (including any part of this read not already requested) and what to drop.
    pub fn on_read(
        &mut self,
        now: Instant,
        offset: u64,
        len: u64,
        file_size: u64,
        budget: &mut Budget,
    ) -> ReadPlan {
        self.tick += 1;
        self.stats.reads += 1;
        self.stats.read_bytes += len;
        let mut plan = ReadPlan::default();
        if len == 0 || offset >= file_size {
            return plan;
        }
        let end = offset.saturating_add(len).min(file_size);
        if self.config.mode == ReadaheadMode::Off {
            self.stats.random_reads += 1;
            let range = self.aligned(offset, end, file_size);
            self.push_demand(now, range, &mut plan);
            return plan;
        }
        match self.find_stream(offset, end) {
            Some(i) => self.continue_stream(now, i, offset, end, file_size, budget, &mut plan),
            None => self.start_stream(now, offset, end, file_size, budget, &mut plan),
        }
        plan
    }

    /// A READ issued by this engine completed: `len` bytes at `offset`, `rtt` as measured by the
    /// transport (request sent to reply received).
    pub fn on_fetch_complete(&mut self, now: Instant, offset: u64, len: u64, rtt: Duration) {
        self.delivered_bytes += len;
        let rtt_ns = u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.rtt_min.update(now, rtt_ns, self.config.rtt_min_window);
        self.rtt_jitter.update(rtt_ns);
        let Some(i) = self.fetches.iter().position(|f| f.offset == offset) else {
            return;
        };
        let f = self.fetches.remove(i).expect("index from position");
        let elapsed = now.saturating_duration_since(f.issued_at).max(rtt);
        let elapsed_ns = elapsed.as_nanos().max(1);
        let delivered = u128::from(self.delivered_bytes - f.delivered_at_issue);
        let bw = delivered * 1_000_000_000 / elapsed_ns;
        let bw = u64::try_from(bw).unwrap_or(u64::MAX);
        self.bw_max.update(now, bw, self.config.bw_max_window);
    }

    /// The file changed (its change attribute moved) or is being closed: drops every stream and
    /// returns what was fetched ahead, to discard. The link estimates are kept.
    pub fn invalidate(&mut self, now: Instant, budget: &mut Budget) -> Vec<ByteRange> {
        let mut discard = Vec::new();
        while let Some(s) = self.streams.pop() {
            budget.release(s.charged);
            if let Some(r) = s.ahead() {
                self.stats.unused_bytes += r.len;
                discard.push(r);
            }
        }
        self.fetches.clear();
        self.push_trace(now, u64::MAX, TraceKind::Invalidated);
        discard
    }

    /// The streams, most recently used first.
    pub fn streams(&self) -> Vec<StreamInfo> {
        let mut v: Vec<&Stream> = self.streams.iter().collect();
        v.sort_by_key(|s| std::cmp::Reverse(s.last_used));
        v.into_iter()
            .map(|s| StreamInfo {
                id: s.id,
                position: s.pos,
                keep_from: s.pos.saturating_sub(self.reorder_bytes(s)),
                fetched_end: s.fetched_end,
                window_bytes: s.window_bytes,
                pipe_full: s.pipe.full,
            })
            .collect()
    }

    /// Sum of the streams' windows.
    pub fn window_bytes(&self) -> u64 {
        self.streams.iter().map(|s| s.window_bytes).sum()
    }

    /// The BDP-based window target, if RTT and rate samples exist.
    pub fn need_bytes(&self) -> Option<u64> {
        self.need_with_jitter_ns(self.rtt_jitter.get_ns().unwrap_or(0))
    }

    /// `bdp_gain × bw_max × (rtt_min + multiplier × jitter)`.
    fn need_with_jitter_ns(&self, jitter_ns: u64) -> Option<u64> {
        let bw = self.bw_max.get()?;
        let min_ns = self.rtt_min.get()?;
        let spread_ns = jitter_ns.saturating_mul(self.config.rtt_jitter_multiplier);
        let rtt_ns = min_ns.saturating_add(spread_ns);
        let bdp = u128::from(bw) * u128::from(rtt_ns) / 1_000_000_000;
        let need = bdp * u128::from(self.config.bdp_gain_percent) / 100;
        Some(u64::try_from(need).unwrap_or(u64::MAX))
    }

    /// Windowed minimum RTT.
    pub fn rtt_min(&self) -> Option<Duration> {
        self.rtt_min.get().map(Duration::from_nanos)
    }

    /// Smoothed absolute difference of consecutive RTT samples (RFC 3550 §6.4.1).
    pub fn rtt_jitter(&self) -> Option<Duration> {
        self.rtt_jitter.get_ns().map(Duration::from_nanos)
    }

    /// The RTT of a late READ that the window sizes for: `rtt_min + 2 × rtt_jitter`.
    pub fn rtt_late(&self) -> Option<Duration> {
        self.rtt_late_ns().map(Duration::from_nanos)
    }

    /// Windowed maximum delivery rate, bytes per second.
    pub fn bw_max_bytes_per_sec(&self) -> Option<u64> {
        self.bw_max.get()
    }

    /// Counters.
    pub fn stats(&self) -> &ReadaheadStats {
        &self.stats
    }

    /// The configuration.
    pub fn config(&self) -> &ReadaheadConfig {
        &self.config
    }

    /// Takes the trace events recorded since the last call.
    pub fn take_trace(&mut self) -> Vec<TraceEvent> {
        self.trace.drain(..).collect()
    }

    fn rtt_late_ns(&self) -> Option<u64> {
        let min_ns = self.rtt_min.get()?;
        let jitter_ns = self.rtt_jitter.get_ns().unwrap_or(0);
        let spread_ns = jitter_ns.saturating_mul(self.config.rtt_jitter_multiplier);
        Some(min_ns.saturating_add(spread_ns))
    }

    // ---- the decisions -------------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn continue_stream(
        &mut self,
        now: Instant,
        i: usize,
        offset: u64,
        end: u64,
        file_size: u64,
        budget: &mut Budget,
        plan: &mut ReadPlan,
    ) {
        let tick = self.tick;
        let s = &mut self.streams[i];
        s.last_used = tick;
        s.last_len = end - offset;
        let pos = s.pos;
        if offset < pos {
            // The part behind the frontier was requested before (a re-read or a reordered read);
            // the caller's cache most likely holds it and drops this request.
            let range = self.aligned(offset, end.min(pos), file_size);
            self.push_demand(now, range, plan);
        }
        if end <= pos {
            self.stats.rereads += 1;
            return;
        }
        self.stats.sequential_reads += 1;
        // Bytes jumped over count as unused, unless the jump is within the reorder allowance:
        // the reads in between are likely on their way.
        let allowance = self.reorder_bytes(&self.streams[i]);
        let s = &self.streams[i];
        if offset > s.pos.saturating_add(allowance) {
            self.stats.unused_bytes += offset.min(s.fetched_end) - s.pos;
        }
        let s = &mut self.streams[i];
        s.pos = end;
        if s.window_bytes == 0 {
            let w = self.initial_window(end - offset);
            let s = &mut self.streams[i];
            s.window_bytes = w;
            s.trigger = s.pos + w;
            s.pipe = PipeState::new(now, s.pos);
            let id = s.id;
            self.push_trace(now, id, TraceKind::Sequential { window_bytes: w });
        } else if s.pos >= s.trigger {
            self.retune(now, i, budget);
        }
        self.settle(i, budget);
        self.fill(now, i, file_size, budget, plan);
    }

    fn start_stream(
        &mut self,
        now: Instant,
        offset: u64,
        end: u64,
        file_size: u64,
        budget: &mut Budget,
        plan: &mut ReadPlan,
    ) {
        let sequential = offset == 0;
        if sequential {
            self.stats.sequential_reads += 1;
        } else {
            self.stats.random_reads += 1;
        }
        if self.config.mode == ReadaheadMode::Auto {
            self.halve_most_recent(now, budget, plan);
        }
        if self.streams.len() >= self.config.streams_max {
            self.evict_least_recent(now, budget, plan);
        }
        let range = self.aligned(offset, end, file_size);
        let id = self.next_stream_id;
        self.next_stream_id += 1;
        self.stats.streams_started += 1;
        self.push_trace(now, id, TraceKind::StreamStarted { offset });
        let window_bytes = if sequential {
            self.initial_window(end - offset)
        } else {
            0
        };
        self.streams.push(Stream {
            id,
            pos: end,
            fetched_end: range.offset,
            window_bytes,
            trigger: end + window_bytes,
            last_len: end - offset,
            last_used: self.tick,
            charged: 0,
            pipe: PipeState::new(now, end),
        });
        let i = self.streams.len() - 1;
        if sequential {
            self.push_trace(now, id, TraceKind::Sequential { window_bytes });
            self.fill(now, i, file_size, budget, plan);
        } else {
            self.push_demand(now, range, plan);
            self.streams[i].fetched_end = range.end();
            self.settle(i, budget);
        }
    }

    /// Issues chunks from `fetched_end`: first whatever the reader is waiting for, then whole
    /// chunks while they fit in the window and the budget.
    fn fill(
        &mut self,
        now: Instant,
        i: usize,
        file_size: u64,
        budget: &mut Budget,
        plan: &mut ReadPlan,
    ) {
        let mut i = i;
        loop {
            let s = &self.streams[i];
            let from = s.fetched_end;
            if from >= file_size {
                break;
            }
            // Another stream already covering `from`: the two readers met; merge them.
            if let Some(j) = self.stream_covering(i, from) {
                i = self.absorb(i, j, budget);
                continue;
            }
            let s = &self.streams[i];
            let chunk = self.chunk_bytes(s.window_bytes);
            let demand = from < s.pos;
            let target = s.pos.saturating_add(s.window_bytes).min(file_size);
            if !demand
                && (from >= target || (from.saturating_add(chunk) > target && target < file_size))
            {
                break;
            }
            let mut to = from.saturating_add(chunk).min(file_size);
            if let Some(p) = self.next_stream_start(i, from) {
                to = to.min(p);
            }
            let len = to - from;
            if !demand && budget.available_bytes() < len {
                self.stats.budget_limited += 1;
                break;
            }
            let kind = if demand {
                FetchKind::Demand
            } else {
                FetchKind::Readahead
            };
            self.push_fetch(now, from, len, kind, plan);
            self.streams[i].fetched_end = to;
            self.settle(i, budget);
        }
    }

    /// At a trigger: end the stream's round (the full-pipe test), then grow toward the need,
    /// or shrink if far above it or if the pipe was just found full.
    fn retune(&mut self, now: Instant, i: usize, budget: &Budget) {
        let s = &self.streams[i];
        let w = s.window_bytes;
        let (id, pos) = (s.id, s.pos);
        if let ReadaheadMode::Fixed(_) = self.config.mode {
            self.streams[i].trigger = pos + w;
            return;
        }
        let live_jitter_ns = self.rtt_jitter.get_ns().unwrap_or(0);
        let round = self.streams[i]
            .pipe
            .end_round(now, pos, w, live_jitter_ns, &self.config);
        match round {
            RoundEnd::Filled => self.stats.pipe_full += 1,
            RoundEnd::Probe => self.stats.bandwidth_probes += 1,
            RoundEnd::Growing | RoundEnd::Steady => {}
        }
        let pipe = &self.streams[i].pipe;
        let jitter_ns = if pipe.full {
            pipe.jitter_ns
        } else {
            live_jitter_ns
        };
        let rsize = self.config.rsize_bytes;
        let need = self
            .need_with_jitter_ns(jitter_ns)
            .map(|n| n.div_ceil(rsize) * rsize);
        let others: u64 = self
            .streams
            .iter()
            .filter(|o| o.id != id)
            .map(|o| o.window_bytes)
            .sum();
        let cap = self.config.window_bytes_max.saturating_sub(others);
        let need_min = self
            .need_with_jitter_ns(0)
            .map(|n| n.div_ceil(rsize) * rsize);
        let pipe = &self.streams[i].pipe;
        let mut w2 = if pipe.full {
            // The window that filled the pipe, never below the minimum-RTT need nor above the
            // need sized with the frozen jitter; twice that for a probe round.
            let mut t = pipe.target;
            if let Some(n) = need {
                t = t.min(n);
            }
            if let Some(m) = need_min {
                t = t.max(m);
            }
            if round == RoundEnd::Probe {
                t = t.saturating_mul(2);
            }
            t
        } else {
            match need {
                None => w.saturating_mul(2),
                Some(n) if w < n => w.saturating_mul(2).min(n),
                Some(n) if w > n.saturating_mul(2) => (w / 2).max(n),
                Some(_) => w,
            }
        };
        if w2 > w {
            w2 = w2.min(cap).min(w + budget.available_bytes()).max(w);
        }
        w2 = self.round_window(w2);
        let s = &mut self.streams[i];
        s.window_bytes = w2;
        s.trigger = pos + w2;
        if w2 > w {
            self.stats.window_grows += 1;
            let kind = TraceKind::WindowGrew {
                from_bytes: w,
                to_bytes: w2,
                need_bytes: need,
            };
            self.push_trace(now, id, kind);
        } else if w2 < w {
            self.stats.window_shrinks += 1;
            let reason = if self.streams[i].pipe.full {
                ShrinkReason::PipeFull
            } else {
                ShrinkReason::AboveNeed
            };
            let kind = TraceKind::WindowShrank {
                from_bytes: w,
                to_bytes: w2,
                reason,
            };
            self.push_trace(now, id, kind);
        }
    }

    /// Random access: halve the most recently used stream and drop what lies beyond its new
    /// window.
    fn halve_most_recent(&mut self, now: Instant, budget: &mut Budget, plan: &mut ReadPlan) {
        let Some(i) = (0..self.streams.len()).max_by_key(|&i| self.streams[i].last_used) else {
            return;
        };
        let w = self.streams[i].window_bytes;
        if w == 0 {
            return;
        }
        let mut w2 = self.round_window(w / 2);
        if w2 < 2 * self.config.align_bytes {
            w2 = 0;
        }
        let s = &mut self.streams[i];
        s.window_bytes = w2;
        s.trigger = s.pos + w2;
        let keep_end = s.fetched_end.min(s.pos + w2).max(s.pos);
        let id = s.id;
        if keep_end < s.fetched_end {
            let r = ByteRange {
                offset: keep_end,
                len: s.fetched_end - keep_end,
            };
            s.fetched_end = keep_end;
            self.stats.unused_bytes += r.len;
            plan.discard.push(r);
        }
        self.settle(i, budget);
        self.stats.window_shrinks += 1;
        let kind = TraceKind::WindowShrank {
            from_bytes: w,
            to_bytes: w2,
            reason: ShrinkReason::RandomAccess,
        };
        self.push_trace(now, id, kind);
    }

    fn evict_least_recent(&mut self, now: Instant, budget: &mut Budget, plan: &mut ReadPlan) {
        let Some(i) = (0..self.streams.len()).min_by_key(|&i| self.streams[i].last_used) else {
            return;
        };
        let s = self.streams.swap_remove(i);
        budget.release(s.charged);
        self.stats.streams_evicted += 1;
        let discarded = s.ahead().map_or(0, |r| r.len);
        if let Some(r) = s.ahead() {
            self.stats.unused_bytes += r.len;
            plan.discard.push(r);
        }
        let kind = TraceKind::StreamDropped {
            discarded_bytes: discarded,
        };
        self.push_trace(now, s.id, kind);
    }

    // ---- helpers -------------------------------------------------------------------------

    /// The stream this read belongs to: the read `[offset, end)` touches
    /// `[pos - tolerance, fetched_end]` (see [`FileReadahead::tolerance`]). Among several, the
    /// one whose frontier is nearest the read's start.
    /// A sequential stream (window > 0) also takes a read that starts up to
    /// [`FileReadahead::reorder_bytes`] beyond `fetched_end`: the reads in between were sent
    /// before it and arrive later.
    fn find_stream(&self, offset: u64, end: u64) -> Option<usize> {
        (0..self.streams.len())
            .filter(|&i| {
                let s = &self.streams[i];
                let ahead = if s.window_bytes > 0 {
                    self.reorder_bytes(s)
                } else {
                    0
                };
                end >= s.pos.saturating_sub(self.tolerance(s))
                    && offset <= s.fetched_end.saturating_add(ahead)
            })
            .min_by_key(|&i| offset.abs_diff(self.streams[i].pos))
    }

    /// How far behind its frontier a read still belongs to a stream: max(window, last read,
    /// the reorder allowance, alignment).
    fn tolerance(&self, s: &Stream) -> u64 {
        s.window_bytes
            .max(s.last_len)
            .max(self.reorder_bytes(s))
            .max(self.config.align_bytes)
    }

    /// What `reorder_reads` of the stream's reads span.
    fn reorder_bytes(&self, s: &Stream) -> u64 {
        let one = s.last_len.max(self.config.align_bytes);
        one.saturating_mul(self.config.reorder_reads)
    }

    /// Another stream whose requested range `[pos, fetched_end)` contains `offset`.
    fn stream_covering(&self, i: usize, offset: u64) -> Option<usize> {
        (0..self.streams.len()).find(|&j| {
            j != i && self.streams[j].pos <= offset && offset < self.streams[j].fetched_end
        })
    }

    /// The nearest frontier strictly after `offset` of another stream with requests ahead of its
    /// reader: a chunk stops there rather than request those bytes twice.
    fn next_stream_start(&self, i: usize, offset: u64) -> Option<u64> {
        (0..self.streams.len())
            .filter(|&j| {
                let t = &self.streams[j];
                j != i && t.pos > offset && t.fetched_end > t.pos
            })
            .map(|j| self.streams[j].pos)
            .min()
    }

    /// Merges stream `j` into stream `i` (a reader ran into another's requested range). Returns
    /// `i`'s index after the removal.
    fn absorb(&mut self, i: usize, j: usize, budget: &mut Budget) -> usize {
        let t = self.streams.swap_remove(j);
        let i = if i == self.streams.len() { j } else { i };
        budget.release(t.charged);
        let s = &mut self.streams[i];
        s.fetched_end = s.fetched_end.max(t.fetched_end);
        s.window_bytes = s.window_bytes.max(t.window_bytes);
        s.last_used = s.last_used.max(t.last_used);
        self.settle(i, budget);
        i
    }

    /// Charges or releases the budget so that stream `i` holds exactly `fetched_end - pos`.
    fn settle(&mut self, i: usize, budget: &mut Budget) {
        let s = &mut self.streams[i];
        let want = s.fetched_end.saturating_sub(s.pos);
        if want > s.charged {
            budget.charge(want - s.charged);
        } else {
            budget.release(s.charged - want);
        }
        s.charged = want;
    }

    /// The first window of a stream that just proved sequential: `min(2 × rsize, 4 × read)`,
    /// within what the file's cap leaves (but at least two alignment units, so that a stream
    /// always makes progress).
    fn initial_window(&self, read_len: u64) -> u64 {
        let w = match self.config.mode {
            ReadaheadMode::Fixed(b) => b,
            _ => {
                let a = self.config.align_bytes;
                let read = read_len.div_ceil(a) * a;
                let others = self.window_bytes();
                let left = self.config.window_bytes_max.saturating_sub(others);
                (4 * read)
                    .max(4 * a)
                    .min(2 * self.config.rsize_bytes)
                    .min(left)
                    .max(2 * a)
            }
        };
        self.round_window(w)
    }

    fn chunk_bytes(&self, window_bytes: u64) -> u64 {
        let a = self.config.align_bytes;
        match self.config.mode {
            ReadaheadMode::Fixed(b) => b.min(self.config.rsize_bytes),
            _ => (window_bytes / 2 / a * a).clamp(a, self.config.rsize_bytes),
        }
    }

    fn round_window(&self, w: u64) -> u64 {
        match self.config.mode {
            ReadaheadMode::Fixed(_) => w,
            _ => w / self.config.align_bytes * self.config.align_bytes,
        }
    }

    fn aligned(&self, offset: u64, end: u64, file_size: u64) -> ByteRange {
        let a = self.config.align_bytes;
        let start = offset / a * a;
        let stop = end.div_ceil(a).saturating_mul(a).min(file_size);
        ByteRange {
            offset: start,
            len: stop - start,
        }
    }

    /// Demand fetches for `range`, in READs of at most rsize.
    fn push_demand(&mut self, now: Instant, range: ByteRange, plan: &mut ReadPlan) {
        let mut off = range.offset;
        while off < range.end() {
            let len = (range.end() - off).min(self.config.rsize_bytes);
            self.push_fetch(now, off, len, FetchKind::Demand, plan);
            off += len;
        }
    }

    fn push_fetch(
        &mut self,
        now: Instant,
        offset: u64,
        len: u64,
        kind: FetchKind,
        plan: &mut ReadPlan,
    ) {
        match kind {
            FetchKind::Demand => self.stats.demand_bytes += len,
            FetchKind::Readahead => self.stats.readahead_bytes += len,
        }
        if self.fetches.len() >= self.config.fetches_tracked_max {
            self.fetches.pop_front();
        }
        self.fetches.push_back(TrackedFetch {
            offset,
            issued_at: now,
            delivered_at_issue: self.delivered_bytes,
        });
        plan.fetch.push(FetchRequest { offset, len, kind });
    }

    fn push_trace(&mut self, at: Instant, stream: u64, kind: TraceKind) {
        if self.config.trace_events_max == 0 {
            return;
        }
        if self.trace.len() >= self.config.trace_events_max {
            self.trace.pop_front();
            self.stats.trace_dropped += 1;
        }
        self.trace.push_back(TraceEvent { at, stream, kind });
    }
}

#[derive(Debug, Clone)]
struct Stream {
    id: u64,
    /// The reader's frontier: end of the furthest read.
    pos: u64,
    /// Everything in `[pos, fetched_end)` has been requested.
    fetched_end: u64,
    /// 0 until the stream proves sequential.
    window_bytes: u64,
    /// When `pos` reaches this, the window is reconsidered.
    trigger: u64,
    last_len: u64,
    last_used: u64,
    /// Bytes charged to the budget; always `fetched_end - pos` (or 0) between calls.
    charged: u64,
    /// The full-pipe test over this stream's rounds.
    pipe: PipeState,
}

impl Stream {
    fn ahead(&self) -> Option<ByteRange> {
        (self.fetched_end > self.pos).then(|| ByteRange {
            offset: self.pos,
            len: self.fetched_end - self.pos,
        })
    }
}

#[derive(Debug, Clone)]
struct TrackedFetch {
    offset: u64,
    issued_at: Instant,
    delivered_at_issue: u64,
}

/// How a round ended (see [`PipeState::end_round`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RoundEnd {
    /// Not full: the rate rose, or has not been flat for long enough yet.
    Growing,
    /// The pipe was just found full.
    Filled,
    /// Full, and time for a bandwidth probe: the next round runs at twice the window.
    Probe,
    /// Full.
    Steady,
}

/// The full-pipe test of one stream (BBR's exit from startup, over the reader's rounds; see the
/// module essay). A round ends each time the reader passes the trigger, that is when it has
/// consumed one window; its rate is the bytes consumed over the time it took.
#[derive(Debug, Clone)]
struct PipeState {
    round_at: Instant,
    round_pos: u64,
    /// Best round rate that counted as growth, bytes per second (0 before the first round).
    best_rate: u64,
    /// Rounds since the rate last grew by the growth percentage.
    flat_rounds: u32,
    /// More window adds no rate: the need is sized with `jitter_ns`, frozen.
    full: bool,
    /// The RTT jitter at the end of the last round that raised `best_rate`, while the
    /// window's own queue was at its smallest since the rate stopped rising.
    jitter_ns: u64,
    /// Rounds since the pipe was found full or last probed.
    rounds_since_probe: u32,
    /// The current round runs at twice the window: its rate decides.
    probing: bool,
    /// While filling: the rounds' (window, rate), oldest first, at most [`Self::ROUNDS_MAX`].
    rounds: VecDeque<(u64, u64)>,
    /// Once full: the smallest window whose round reached `full_pipe_rate_percent` of the
    /// best rate.
    target: u64,
}

impl PipeState {
    fn new(now: Instant, pos: u64) -> Self {
        PipeState {
            round_at: now,
            round_pos: pos,
            best_rate: 0,
            flat_rounds: 0,
            full: false,
            jitter_ns: 0,
            rounds_since_probe: 0,
            probing: false,
            rounds: VecDeque::new(),
            target: 0,
        }
    }

    /// Rounds remembered while filling: a doubling window from 4 KiB passes 128 MiB in 16.
    const ROUNDS_MAX: usize = 16;

    /// Ends the round at `now` with the reader at `pos`, the window `window` and the live RTT
    /// jitter `jitter_ns`; starts the next one. A round of no measurable length (every read at
    /// one instant) leaves the test where it was.
    fn end_round(
        &mut self,
        now: Instant,
        pos: u64,
        window: u64,
        jitter_ns: u64,
        config: &ReadaheadConfig,
    ) -> RoundEnd {
        let bytes = pos.saturating_sub(self.round_pos);
        let elapsed_ns = now.saturating_duration_since(self.round_at).as_nanos();
        self.round_at = now;
        self.round_pos = pos;
        let was_probe = std::mem::take(&mut self.probing);
        let steady = if self.full {
            RoundEnd::Steady
        } else {
            RoundEnd::Growing
        };
        if config.full_pipe_rounds == 0 || elapsed_ns == 0 || bytes == 0 || window == 0 {
            return steady;
        }
        let rate = u128::from(bytes) * 1_000_000_000 / elapsed_ns;
        let rate = u64::try_from(rate).unwrap_or(u64::MAX);
        let grew = u128::from(rate) * 100
            >= u128::from(self.best_rate) * u128::from(config.full_pipe_growth_percent);
        if self.full {
            if was_probe && grew {
                // A faster path: fill it again from here.
                self.full = false;
                self.flat_rounds = 0;
                self.best_rate = rate;
                self.jitter_ns = jitter_ns;
                self.rounds.clear();
                self.rounds.push_back((window, rate));
                return RoundEnd::Growing;
            }
            self.rounds_since_probe += 1;
            if config.probe_rounds > 0 && self.rounds_since_probe >= config.probe_rounds {
                self.rounds_since_probe = 0;
                self.probing = true;
                return RoundEnd::Probe;
            }
            return RoundEnd::Steady;
        }
        if self.rounds.len() >= Self::ROUNDS_MAX {
            self.rounds.pop_front();
        }
        self.rounds.push_back((window, rate));
        if grew {
            self.best_rate = rate;
            self.flat_rounds = 0;
            self.jitter_ns = jitter_ns;
            return RoundEnd::Growing;
        }
        self.flat_rounds += 1;
        if self.flat_rounds < config.full_pipe_rounds {
            return RoundEnd::Growing;
        }
        // Full: the smallest window that came within `full_pipe_rate_percent` of the best.
        let best = self.rounds.iter().map(|&(_, r)| r).max().unwrap_or(rate);
        let enough = |r: u64| {
            u128::from(r) * 100 >= u128::from(best) * u128::from(config.full_pipe_rate_percent)
        };
        self.target = self
            .rounds
            .iter()
            .filter(|&&(_, r)| enough(r))
            .map(|&(w, _)| w)
            .min()
            .unwrap_or(window);
        self.full = true;
        self.rounds_since_probe = 0;
        RoundEnd::Filled
    }
}

#[cfg(test)]
mod tests;
