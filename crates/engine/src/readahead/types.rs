//! The readahead engine's vocabulary: its configuration ([`ReadaheadConfig`], [`ReadaheadMode`]),
//! the memory [`Budget`] all files of a client share, and what the engine tells its caller: the
//! [`ReadPlan`] of [`FetchRequest`]s a read produces, the [`TraceEvent`]s of window changes, the
//! counters of [`ReadaheadStats`] and the per-stream [`StreamInfo`]. The state machine that
//! produces them is [`FileReadahead`](super::FileReadahead) in the parent module, whose essay
//! describes the design.

use std::time::{Duration, Instant};

/// How a file reads ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadaheadMode {
    /// Autotuned window (the default). See the readahead essay.
    #[default]
    Auto,
    /// A fixed window of this many bytes; READs of `min(rsize, bytes)`.
    Fixed(u64),
    /// No readahead: fetch what is read, rounded out to the alignment.
    Off,
}

/// Configuration of a [`FileReadahead`](super::FileReadahead).
#[derive(Debug, Clone, PartialEq)]
pub struct ReadaheadConfig {
    /// Policy. Default [`ReadaheadMode::Auto`].
    pub mode: ReadaheadMode,
    /// Largest READ the server accepts (FSINFO `rtmax`, or the mount option). Readahead READs are
    /// this size once the window allows. Default 1 MiB.
    pub rsize_bytes: u64,
    /// Demand fetches are rounded out to multiples of this (the cache's page). Default 4 KiB.
    pub align_bytes: u64,
    /// Cap on the sum of a file's stream windows. Default 128 MiB (2 × the 40 ms × 1 GB/s BDP,
    /// with room).
    pub window_bytes_max: u64,
    /// Streams tracked per file; the least recently used is evicted. Default 8.
    pub streams_max: usize,
    /// Window target as a percentage of the measured BDP (`bw_max × rtt_late`). Default 200: a
    /// window of twice the BDP keeps the pipe full through the chunk granularity and rate noise.
    pub bdp_gain_percent: u64,
    /// Multiples of the RTT jitter (RFC 3550 §6.4.1, over consecutive RTT samples) added to the
    /// minimum RTT to get `rtt_late`, the RTT of a late READ (see the readahead essay). Default 2:
    /// the mean absolute difference of samples uniform over a width `w` is `w / 3`, so with the
    /// `bdp_gain_percent` of 200 the window covers the latest READ. 0 gives back the pure
    /// minimum-RTT estimate.
    pub rtt_jitter_multiplier: u64,
    /// How long an RTT sample stays a candidate for the minimum. Default 10 s (as BBR's min_rtt).
    pub rtt_min_window: Duration,
    /// How long a delivery-rate sample stays a candidate for the maximum. Default 2 s.
    pub bw_max_window: Duration,
    /// The full-pipe test (BBR's exit from startup, see the readahead essay): a round whose
    /// reader rate is not at least this percentage above the best round so far counts as flat.
    /// Default 125.
    pub full_pipe_growth_percent: u64,
    /// Flat rounds in a row after which the pipe counts as full and the window stops growing.
    /// Default 3 (as BBR). 0 turns the test off: the window then follows `need` alone.
    pub full_pipe_rounds: u32,
    /// Once the pipe is full, the window is the smallest one whose round delivered at least this
    /// percentage of the best round's rate (never below the minimum-RTT need). Default 90.
    pub full_pipe_rate_percent: u64,
    /// Once the pipe is full, every this many rounds one round runs at twice the window, to
    /// find out whether the path now carries more (BBR's bandwidth probe). Default 8; 0: never.
    pub probe_rounds: u32,
    /// Outstanding READs remembered for delivery-rate sampling; the oldest is forgotten beyond
    /// this (it only loses its sample). Default 1024.
    pub fetches_tracked_max: usize,
    /// Trace events kept until taken; the oldest is dropped beyond this. Default 1024.
    pub trace_events_max: usize,
    /// How many reads of a sequential reader may arrive out of order (see "Reordered reads" in
    /// the readahead essay). Default 16: the FUSE kernel module has up to 8 MiB of readahead (8
    /// reads of 1 MiB) at the daemon at once, which run concurrently and finish in any order.
    pub reorder_reads: u64,
}

impl Default for ReadaheadConfig {
    fn default() -> Self {
        ReadaheadConfig {
            mode: ReadaheadMode::Auto,
            rsize_bytes: 1024 * 1024,
            align_bytes: 4096,
            window_bytes_max: 128 * 1024 * 1024,
            streams_max: 8,
            bdp_gain_percent: 200,
            rtt_jitter_multiplier: 2,
            rtt_min_window: Duration::from_secs(10),
            bw_max_window: Duration::from_secs(2),
            full_pipe_growth_percent: 125,
            full_pipe_rounds: 3,
            full_pipe_rate_percent: 90,
            probe_rounds: 8,
            fetches_tracked_max: 1024,
            trace_events_max: 1024,
            reorder_reads: 16,
        }
    }
}

/// The global readahead memory budget, shared by all files of a client (the caller wraps it in
/// whatever lock it uses). Counts bytes requested ahead of readers and not yet consumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    limit_bytes: u64,
    used_bytes: u64,
    high_water_bytes: u64,
}

impl Budget {
    /// A budget of `limit_bytes` (for example 1 GiB on a client with memory to spare).
    pub fn new(limit_bytes: u64) -> Self {
        Budget {
            limit_bytes,
            used_bytes: 0,
            high_water_bytes: 0,
        }
    }

    /// Bytes still available for readahead.
    pub fn available_bytes(&self) -> u64 {
        self.limit_bytes.saturating_sub(self.used_bytes)
    }

    /// Bytes in use. May exceed the limit by demand fetches, which are never refused.
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    /// The limit.
    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    /// The most ever in use.
    pub fn high_water_bytes(&self) -> u64 {
        self.high_water_bytes
    }

    pub(super) fn charge(&mut self, bytes: u64) {
        self.used_bytes += bytes;
        self.high_water_bytes = self.high_water_bytes.max(self.used_bytes);
    }

    pub(super) fn release(&mut self, bytes: u64) {
        assert!(
            bytes <= self.used_bytes,
            "budget released more than charged"
        );
        self.used_bytes -= bytes;
    }
}

/// A half-open byte range `[offset, offset + len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteRange {
    pub offset: u64,
    pub len: u64,
}

impl ByteRange {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// Why a fetch is issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchKind {
    /// A reader is waiting for (part of) it.
    Demand,
    /// Ahead of the reader.
    Readahead,
}

/// One READ to issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchRequest {
    pub offset: u64,
    pub len: u64,
    pub kind: FetchKind,
}

/// What [`FileReadahead::on_read`](super::FileReadahead::on_read) decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadPlan {
    /// READs to issue now, in order (demand first).
    pub fetch: Vec<FetchRequest>,
    /// Ranges fetched ahead that are now useless: drop them from the cache, cancel or ignore
    /// READs in flight for them.
    pub discard: Vec<ByteRange>,
}

/// A state change worth tracing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    pub at: Instant,
    /// Stream id, unique within the file.
    pub stream: u64,
    pub kind: TraceKind,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceKind {
    /// A random read started a stream at `offset`.
    StreamStarted { offset: u64 },
    /// The stream became sequential with this window.
    Sequential { window_bytes: u64 },
    /// The window grew at a trigger. `need_bytes` is the BDP target (`None` without samples).
    WindowGrew {
        from_bytes: u64,
        to_bytes: u64,
        need_bytes: Option<u64>,
    },
    /// The window shrank.
    WindowShrank {
        from_bytes: u64,
        to_bytes: u64,
        reason: ShrinkReason,
    },
    /// The stream was dropped; `discarded_bytes` of readahead went unused.
    StreamDropped { discarded_bytes: u64 },
    /// The file changed (or was closed); all streams were dropped.
    Invalidated,
}

/// Why a window shrank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShrinkReason {
    /// A read matched no stream.
    RandomAccess,
    /// The window was more than twice the measured need.
    AboveNeed,
    /// The full-pipe test found that growth added no rate: the window went back to the
    /// smallest one that reached the rate (or a bandwidth probe round ended).
    PipeFull,
}

/// Counters since creation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadaheadStats {
    /// Reads seen and bytes they asked for.
    pub reads: u64,
    pub read_bytes: u64,
    /// Reads continuing a stream, reads matching none, reads wholly behind a stream's position.
    pub sequential_reads: u64,
    pub random_reads: u64,
    pub rereads: u64,
    /// Bytes fetched for waiting readers, and ahead of them.
    pub demand_bytes: u64,
    pub readahead_bytes: u64,
    /// Bytes fetched ahead and never read, as far as the engine can tell: discarded (seek,
    /// eviction, invalidation) or jumped over by a reader skipping forward.
    pub unused_bytes: u64,
    pub window_grows: u64,
    pub window_shrinks: u64,
    /// Times a stream's full-pipe test found the pipe full, and bandwidth probes run after.
    pub pipe_full: u64,
    pub bandwidth_probes: u64,
    pub streams_started: u64,
    pub streams_evicted: u64,
    /// Readahead chunks not issued because the budget was exhausted.
    pub budget_limited: u64,
    /// Trace events dropped because nobody took them.
    pub trace_dropped: u64,
}

/// Public view of one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamInfo {
    pub id: u64,
    /// The reader's frontier.
    pub position: u64,
    /// Data from here to `position` may still be asked for by reordered reads: a cache keeps
    /// it (`position` minus `reorder_reads` of this stream's reads).
    pub keep_from: u64,
    /// End of what has been requested.
    pub fetched_end: u64,
    /// 0 while the stream is not (yet) sequential.
    pub window_bytes: u64,
    /// The full-pipe test found that more window adds no rate (see the readahead essay).
    pub pipe_full: bool,
}
