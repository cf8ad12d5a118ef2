//! What a run is asked to do ([`Scenario`]) and what it measured ([`Report`]).

use sluice_engine::readahead::{ReadaheadMode, ReadaheadStats, TraceKind};
use sluice_link::model::DirectionStats;
use sluice_rpc::client::{CallStats, Transport};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// One KiB.
pub const KIB: u64 = 1024;
/// One MiB.
pub const MIB: u64 = 1024 * KIB;

/// Largest rsize accepted over UDP: a READ reply must fit one datagram (65 507 bytes of UDP
/// payload). 32 KiB is what Linux allows NFS over UDP.
pub const UDP_RSIZE_BYTES_MAX: u64 = 32 * KIB;

/// What the application does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// One reader, front to back, `read_bytes` per read.
    Sequential,
    /// `reads` reads of 4 KiB at uniformly random 4 KiB-aligned offsets.
    Random4k { reads: u64 },
    /// Two sequential readers of one file at once: one reads the first half, the other the
    /// second half, `read_bytes` per read. Their reads interleave in time.
    TwoInterleaved,
    /// `reads` reads of `read_bytes` at random, *unaligned* offsets (the long-run mix).
    RandomUnaligned { reads: u64 },
    /// A reader that keeps every slot of the call table busy with READs of `rsize`, front to
    /// back, and takes the data in whatever order it arrives (an application with a deep queue
    /// of O_DIRECT reads, or a parallel copy). Readahead is bypassed: this measures the
    /// transport, not the readahead policy.
    Pipelined,
    /// `calls` GETATTRs, every slot of the call table kept busy: the RPC timing workload.
    Getattr { calls: u64 },
}

/// In what order the server takes up calls that wait for a free slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ServerOrder {
    /// Arrival order: one queue, first come first served.
    #[default]
    Arrival,
    /// A waiting call picked at random (from the scenario's seed): a server with several
    /// connections or worker threads and no order across them, where a call's wait grows with
    /// the number of calls waiting with it but not in step with its arrival. What sluice's and
    /// ganesha's per-connection tasks look like to a client on loopback.
    Random,
}

/// A simulated client, server and link. Every field has a unit; see [`Scenario::default`].
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Seeds the link's randomness, the readers' offsets, the XIDs and the file content.
    pub seed: u64,
    pub transport: Transport,
    /// Mean round-trip propagation delay. Default 1 ms.
    pub rtt: Duration,
    /// The round trip varies uniformly in `[rtt - rtt_jitter, rtt + rtt_jitter]` (clamped to
    /// `rtt`): the client→server direction gets the whole jitter on a one-way delay of
    /// `(rtt + rtt_jitter) / 2`, the server→client direction a fixed `(rtt - rtt_jitter) / 2`.
    /// Default 0.
    pub rtt_jitter: Duration,
    /// Bottleneck rate of each direction, bytes per second. Default 300 MB/s.
    pub rate_bytes_per_sec: u64,
    /// Bottleneck queue per direction. `None`: the link model's `max(BDP, 1 MiB)`.
    pub queue_bytes: Option<u64>,
    /// UDP only: datagram loss, duplication and reordering probabilities. Default 0.
    pub loss_ratio: f64,
    pub dup_ratio: f64,
    pub reorder_ratio: f64,
    /// Client readahead policy. Default [`ReadaheadMode::Auto`].
    pub readahead: ReadaheadMode,
    /// Global readahead budget. Default 1 GiB.
    pub budget_bytes: u64,
    /// Size of the one file. Default 64 MiB.
    pub file_bytes: u64,
    /// Size of each application read. Default 128 KiB.
    pub read_bytes: u64,
    /// Largest READ. Default 1 MiB (at most [`UDP_RSIZE_BYTES_MAX`] over UDP). A multiple of
    /// 4 KiB.
    pub rsize_bytes: u64,
    pub pattern: Pattern,
    /// The achieved rate is measured after each reader has consumed this many bytes. `None`:
    /// 8 × BDP.
    pub warmup_bytes: Option<u64>,
    /// Time the server spends on each call before replying. Default 0.
    pub server_service_time: Duration,
    /// Calls the server works on at once; the rest wait. `None`: unlimited.
    pub server_concurrency: Option<usize>,
    /// Which waiting call the server takes up next. Default [`ServerOrder::Arrival`].
    pub server_order: ServerOrder,
    /// A run that has not finished after this much virtual time is reported as stuck.
    /// Default 1 hour.
    pub time_limit: Duration,
    /// Readahead trace events kept in the report. Default 4096.
    pub trace_events_max: usize,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            seed: 0,
            transport: Transport::Tcp,
            rtt: Duration::from_millis(1),
            rtt_jitter: Duration::ZERO,
            rate_bytes_per_sec: 300_000_000,
            queue_bytes: None,
            loss_ratio: 0.0,
            dup_ratio: 0.0,
            reorder_ratio: 0.0,
            readahead: ReadaheadMode::Auto,
            budget_bytes: 1024 * MIB,
            file_bytes: 64 * MIB,
            read_bytes: 128 * KIB,
            rsize_bytes: MIB,
            pattern: Pattern::Sequential,
            warmup_bytes: None,
            server_service_time: Duration::ZERO,
            server_concurrency: None,
            server_order: ServerOrder::Arrival,
            time_limit: Duration::from_secs(3600),
            trace_events_max: 4096,
        }
    }
}

impl Scenario {
    /// Bandwidth-delay product of the link at its mean RTT.
    pub fn bdp_bytes(&self) -> u64 {
        (u128::from(self.rate_bytes_per_sec) * self.rtt.as_nanos() / 1_000_000_000) as u64
    }

    /// Bytes each reader consumes before the rate is measured.
    pub fn warmup(&self) -> u64 {
        self.warmup_bytes.unwrap_or(8 * self.bdp_bytes())
    }

    /// Panics on settings no run can honour (a bug in the test, not in the system).
    pub fn validate(&self) {
        assert!(
            self.rate_bytes_per_sec > 0,
            "the simulator needs a finite link rate"
        );
        assert!(
            self.rsize_bytes > 0 && self.rsize_bytes & (4 * KIB - 1) == 0,
            "rsize {}",
            self.rsize_bytes
        );
        assert!(self.read_bytes > 0, "empty reads");
        assert!(self.file_bytes > 0, "empty file");
        assert!(self.rtt_jitter <= self.rtt, "jitter above the RTT");
        if self.transport == Transport::Udp {
            assert!(
                self.rsize_bytes <= UDP_RSIZE_BYTES_MAX,
                "rsize {} does not fit a UDP datagram",
                self.rsize_bytes
            );
        }
        if let ReadaheadMode::Fixed(b) = self.readahead {
            assert!(b > 0, "Fixed(0)");
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} rtt {:.1} ms ±{:.1} ms, {:.1} MB/s, loss {:.3}, dup {:.3}, reorder {:.3}, {:?}, \
             file {} KiB, reads {} KiB, rsize {} KiB, {:?}, service {:?}, concurrency {:?} {:?}",
            self.transport,
            self.rtt.as_secs_f64() * 1e3,
            self.rtt_jitter.as_secs_f64() * 1e3,
            self.rate_bytes_per_sec as f64 / 1e6,
            self.loss_ratio,
            self.dup_ratio,
            self.reorder_ratio,
            self.readahead,
            self.file_bytes / KIB,
            self.read_bytes / KIB,
            self.rsize_bytes / KIB,
            self.pattern,
            self.server_service_time,
            self.server_concurrency,
            self.server_order,
        )
    }
}

/// A readahead trace event, timed from the start of the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowEvent {
    pub at: Duration,
    pub stream: u64,
    pub kind: TraceKind,
}

/// What one run measured.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub seed: u64,
    /// Every reader finished and every call completed before the time limit.
    pub completed: bool,
    /// Virtual time until the application finished (or the run stopped).
    pub elapsed: Duration,
    /// Bytes the application received (every one of them checked against the file).
    pub bytes_read_by_app: u64,
    /// Bytes the application asked for (reads past EOF are cut at EOF).
    pub bytes_asked_by_app: u64,
    /// Data bytes of the READ replies the client accepted (one per call, whatever the number
    /// of transmissions).
    pub bytes_fetched_from_server: u64,
    /// Sum over the readers of each one's rate after its first [`Scenario::warmup`] bytes, in
    /// bytes per second: the bytes it consumed after that mark, minus those already in the cache
    /// at the mark (they crossed the link before it), over the time to its last read; `None` if some reader never got past its warm-up (or the pattern has no
    /// sequential reader). For [`Pattern::Pipelined`]: file bytes over the whole run.
    pub achieved_rate_after_warmup: Option<f64>,
    /// The same, per reader.
    pub reader_rates_after_warmup: Vec<Option<f64>>,
    /// The link's rate, bytes per second.
    pub link_rate: u64,
    pub bdp_bytes: u64,
    /// Calls transmitted again (UDP timeouts, TCP reconnects).
    pub retransmits: u64,
    /// Datagrams lost on the wire or tail-dropped at a full queue, both directions.
    pub lost_datagrams: u64,
    /// READs by size in bytes: size -> count.
    pub read_sizes: BTreeMap<u64, u64>,
    /// Readahead trace, oldest first (at most `trace_events_max`; the rest are counted).
    pub window_trace: Vec<WindowEvent>,
    pub window_trace_dropped: u64,
    /// Sum of the readahead windows at the end of the run.
    pub final_window_bytes: u64,
    /// Calls completed (all procedures).
    pub calls_completed: u64,
    pub call_stats: CallStats,
    pub readahead_stats: ReadaheadStats,
    /// The client read core's counters (READs sent and their depth, bytes in flight at most,
    /// bytes dropped, invalidations, the safety net).
    pub read_core: sluice_engine::readcore::ReadCoreStats,
    pub link_c2s: DirectionStats,
    pub link_s2c: DirectionStats,
    /// Calls the server executed (retransmissions included).
    pub server_calls: u64,
    /// Readahead the real server's sequential table asked of its backend, bytes (MemFs takes the
    /// hint and ignores it; the count shows the table saw the reader).
    pub server_readahead_bytes: u64,
    /// Bytes the client fetched for a waiting reader that the readahead engine had not asked
    /// for (0 unless the engine breaks its contract).
    pub gap_fetch_bytes: u64,
    /// Most bytes held in the client's cache at once.
    pub cache_bytes_peak: u64,
    /// Application bytes that differed from the file (must be 0), and the first such event.
    pub data_errors: u64,
    /// Invariant violations: calls lost or completed twice, RPC errors, stuck runs.
    pub errors: Vec<String>,
}

impl Report {
    /// Achieved rate after warm-up as a fraction of the link rate.
    pub fn ratio(&self) -> Option<f64> {
        self.achieved_rate_after_warmup
            .map(|r| r / self.link_rate as f64)
    }

    /// Fetched bytes per byte the application asked for.
    pub fn fetch_amplification(&self) -> f64 {
        self.bytes_fetched_from_server as f64 / self.bytes_asked_by_app.max(1) as f64
    }

    /// Panics with the seed and the first errors if an invariant was violated.
    pub fn assert_invariants(&self) {
        assert!(
            self.completed && self.data_errors == 0 && self.errors.is_empty(),
            "seed {}: completed {}, {} bad bytes, errors {:?} (replay with SLUICE_SEED={})",
            self.seed,
            self.completed,
            self.data_errors,
            &self.errors[..self.errors.len().min(8)],
            self.seed
        );
    }
}
