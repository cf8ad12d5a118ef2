//! Server statistics: per-procedure call counts, errors and latency histograms, plus the sizes of
//! READ and WRITE payloads on the wire. Lock-free counters; a snapshot renders like `nfsstat -s`.
//!
//! NFSv4 is counted twice over: once per RPC procedure (a COMPOUND is one call, an error when
//! its overall status is), and once per operation inside the COMPOUNDs ([`OpStats4`], fed by
//! the processor's [`crate::nfs4::compound::OpObserver`] hook), which is where the time goes
//! and where the errors are. The state gauges (clients, sessions, open and lock stateids, locks) are read from
//! the state core when rendered, through [`Stats::set_nfs4_gauges`].
//!
//! NLM v4, the lock manager of NFSv3 clients, is counted per procedure like NFSv3 and MOUNT
//! (`sluice_nlm_calls_total`): whether a v3 client's `fcntl` locks reach the server at all
//! (or stay local, as with a `nolock` mount) shows there.
//!
//! Backends that make calls of their own (a Ceph export's libcephfs calls) count them
//! themselves; their counters are read when rendered, per export, through
//! [`Stats::set_backends`], and shown only when some export has any: in `/metrics` as
//! `sluice_backend_calls_total`, `sluice_backend_errors_total`,
//! `sluice_backend_latency_seconds` (labels `export`, `backend`, `call`) and
//! `sluice_backend_events_total` (`event`), in the text as a table per export.

use crate::backend::stats::BackendStats;
/// The call counters and their histogram live in the version-neutral layer, where backends
/// count their own calls in the same shape; named here too, where the server's code finds them.
pub use crate::backend::stats::{CallStats, ProcStats, LATENCY_BUCKETS_MICROS};
use sluice_xdr::nfs4::ops::{op_info, Opnum4, OP_INFO};
use sluice_xdr::{mount3, nfs3, nfs4, nlm};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Size histogram bucket upper bounds in bytes: powers of two from 4 KiB to 16 MiB.
pub const SIZE_BUCKETS_BYTES: [u64; 13] = [
    4 << 10,
    8 << 10,
    16 << 10,
    32 << 10,
    64 << 10,
    128 << 10,
    256 << 10,
    512 << 10,
    1 << 20,
    2 << 20,
    4 << 20,
    8 << 20,
    16 << 20,
];

/// A histogram of sizes.
#[derive(Default)]
pub struct SizeHistogram {
    pub count: AtomicU64,
    pub bytes: AtomicU64,
    pub buckets: [AtomicU64; SIZE_BUCKETS_BYTES.len() + 1],
}

/// NFSv4 operations, one [`ProcStats`] per row of the op table (`OP_INFO`, whose names label
/// them): 3..=75 by number, then OP_ILLEGAL.
pub struct OpStats4(Vec<ProcStats>);

impl Default for OpStats4 {
    fn default() -> Self {
        Self(OP_INFO.iter().map(|_| ProcStats::default()).collect())
    }
}

impl OpStats4 {
    /// The counters of `op`; `None` for a number no row has (an undefined op is counted as
    /// OP_ILLEGAL by the processor, which answers it so).
    pub fn get(&self, op: Opnum4) -> Option<&ProcStats> {
        let info = op_info(op)?;
        let i = OP_INFO.iter().position(|r| r.num == info.num)?;
        self.0.get(i)
    }

    /// Rows with at least one call, with their op names.
    pub fn used(&self) -> impl Iterator<Item = (&'static str, &ProcStats)> {
        OP_INFO
            .iter()
            .zip(self.0.iter())
            .filter(|(_, p)| p.calls.load(Relaxed) > 0)
            .map(|(i, p)| (i.name, p))
    }
}

/// The NFSv4 state gauges at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gauges4 {
    /// Client records (confirmed, unconfirmed and courtesy).
    pub clients: u64,
    pub sessions: u64,
    pub open_stateids: u64,
    pub lock_stateids: u64,
    /// Byte ranges locked (after merging an owner's touching ranges).
    pub locks: u64,
    /// The grace period after the last restart (`None`: no restart recovery).
    pub grace: Option<sluice_nfs4state::recovery::grace::GraceStats>,
    /// Delegations held (or being recalled), by type.
    pub delegations_read: u64,
    pub delegations_write: u64,
    /// Delegations granted since the start, by type (counters).
    pub delegations_granted_read: u64,
    pub delegations_granted_write: u64,
    /// CB_GETATTRs sent to write delegations' holders, and answered with attributes (counters).
    pub cb_getattr_sent: u64,
    pub cb_getattr_answered: u64,
    /// Counters since the start: CB_RECALLs put on the wire, answered by the client,
    /// unanswered (timed out, connection gone), and delegations revoked for not being
    /// returned within a lease of their recall.
    pub recalls_sent: u64,
    pub recalls_answered: u64,
    pub recalls_timed_out: u64,
    pub delegations_revoked: u64,
    /// Asynchronous COPYs known: running, or waiting for their CB_OFFLOAD's answer.
    pub async_copies: u64,
    /// CB_OFFLOADs queued for finished asynchronous COPYs since the start (a counter).
    pub cb_offloads: u64,
}

/// Reads the gauges from wherever the NFSv4 state lives.
pub type Gauges4Source = Box<dyn Fn() -> Gauges4 + Send + Sync>;

/// One export's backend counters: the export's path and what its file system reported.
pub type ExportBackendStats = (String, BackendStats);

/// Reads the backend counters of the exports whose file systems keep any.
pub type BackendsSource = Box<dyn Fn() -> Vec<ExportBackendStats> + Send + Sync>;

impl SizeHistogram {
    pub fn record(&self, bytes: u64) {
        self.count.fetch_add(1, Relaxed);
        self.bytes.fetch_add(bytes, Relaxed);
        let i = SIZE_BUCKETS_BYTES
            .iter()
            .position(|&b| bytes <= b)
            .unwrap_or(SIZE_BUCKETS_BYTES.len());
        self.buckets[i].fetch_add(1, Relaxed);
    }

    /// The median, as the upper bound of the bucket holding it (0 when empty).
    pub fn median_bucket_bytes(&self) -> u64 {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0;
        }
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen * 2 >= total {
                return SIZE_BUCKETS_BYTES.get(i).copied().unwrap_or(u64::MAX);
            }
        }
        u64::MAX
    }
}

/// Gauges and counters the I/O engine maintains (sequential table, write-behind, chunk pool).
#[derive(Default)]
pub struct EngineStats {
    pub seq_hits: AtomicU64,
    pub seq_misses: AtomicU64,
    pub seq_evictions: AtomicU64,
    pub dirty_bytes: AtomicU64,
    pub dirty_bytes_high_water: AtomicU64,
    pub pool_chunks_in_use: AtomicU64,
    pub pool_chunks_high_water: AtomicU64,
    pub readahead_bytes: AtomicU64,
    pub drc_hits: AtomicU64,
    /// READ data answered by splice from page-cache pages, never copied by the server.
    pub spliced_bytes: AtomicU64,
    /// Pipes for spliced READs in existence.
    pub pipes: AtomicU64,
    /// Small READs that missed the page cache and were read through io_uring.
    pub uring_reads: AtomicU64,
}

#[derive(Default)]
pub struct Stats {
    pub engine: EngineStats,
    /// NFSv3, indexed like `nfs3::PROCS` (whose names label them).
    pub nfs: [ProcStats; nfs3::proc_::NAMES.len()],
    /// NFSv4, indexed like `nfs4::PROCS`: one count per COMPOUND, an error when its overall
    /// status is (per-op counts are in `nfs4_ops`).
    pub nfs4: [ProcStats; nfs4::proc_::NAMES.len()],
    /// NFSv4 operations inside the COMPOUNDs.
    pub nfs4_ops: OpStats4,
    /// Where the NFSv4 state gauges come from (set once by the server; unset: not shown).
    nfs4_gauges: OnceLock<Gauges4Source>,
    /// Where the exports' backend counters come from (set once by the server; unset or empty:
    /// not shown).
    backends: OnceLock<BackendsSource>,
    /// The RPC-with-TLS side's counters (set once by the server when TLS is configured;
    /// unset: no TLS line).
    tls: OnceLock<Arc<sluice_tcp::tls::ServerTls>>,
    /// MOUNT v3, indexed like `mount3::PROCS`.
    pub mount: [ProcStats; mount3::proc_::NAMES.len()],
    /// NLM v4 (NFSv3 clients' locks), indexed like `nlm::PROCS`: a lock the client keeps to
    /// itself never shows here, one it asks the server about does.
    pub nlm: [ProcStats; nlm::proc_::NAMES.len()],
    /// Calls to any other program or version, and calls no procedure table holds.
    pub other_calls: AtomicU64,
    pub wire_read_bytes: SizeHistogram,
    pub wire_write_bytes: SizeHistogram,
    pub backend_read_bytes: SizeHistogram,
    pub backend_write_bytes: SizeHistogram,
}

impl Stats {
    /// Counts one call; `ok` is false for an error status or an RPC-level refusal.
    pub fn record(&self, prog: u32, vers: u32, proc_: u32, elapsed: Duration, ok: bool) {
        let slot = match (prog, vers) {
            (nfs3::PROGRAM, nfs3::VERSION) => self.nfs.get(proc_ as usize),
            (mount3::PROGRAM, mount3::VERSION) => self.mount.get(proc_ as usize),
            (nlm::PROGRAM, nlm::VERSION) => self.nlm.get(proc_ as usize),
            (nfs4::PROGRAM, nfs4::VERSION) => self.nfs4.get(proc_ as usize),
            _ => None,
        };
        let Some(p) = slot else {
            self.other_calls.fetch_add(1, Relaxed);
            return;
        };
        p.record(elapsed, ok);
    }

    /// Names where the NFSv4 state gauges are read from; the first call wins.
    pub fn set_nfs4_gauges(&self, source: Gauges4Source) {
        let _ = self.nfs4_gauges.set(source);
    }

    /// Names the TLS configuration whose counters are shown; the first call wins.
    pub fn set_tls(&self, tls: Arc<sluice_tcp::tls::ServerTls>) {
        let _ = self.tls.set(tls);
    }

    /// Connections upgraded to TLS (rustls), of those with a verified client certificate, and
    /// handshakes that failed; `None` when the server has no TLS.
    pub fn tls_counts(&self) -> Option<(u64, u64, u64)> {
        self.tls.get().map(|t| {
            (
                t.stats.handshakes.load(Relaxed),
                t.stats.peers_verified.load(Relaxed),
                t.stats.handshakes_failed.load(Relaxed),
            )
        })
    }

    /// Of the connections upgraded to TLS, those whose record layer went to the kernel
    /// (kernel TLS; the rest use rustls); `None` when the server has no TLS.
    pub fn tls_kernel_count(&self) -> Option<u64> {
        self.tls
            .get()
            .map(|t| t.stats.kernel.connections.load(Relaxed))
    }

    /// The NFSv4 state gauges now, if a source was set.
    pub fn nfs4_gauges(&self) -> Option<Gauges4> {
        self.nfs4_gauges.get().map(|f| f())
    }

    /// Names where the exports' backend counters are read from; the first call wins.
    pub fn set_backends(&self, source: BackendsSource) {
        let _ = self.backends.set(source);
    }

    /// The backend counters of the exports that keep any, now (empty without a source).
    pub fn backends(&self) -> Vec<ExportBackendStats> {
        self.backends.get().map(|f| f()).unwrap_or_default()
    }

    /// Renders every counter in the Prometheus text exposition format (version 0.0.4).
    pub fn render_prometheus(&self) -> String {
        let mut s = String::new();
        if let Some((up, verified, failed)) = self.tls_counts() {
            for (name, help, v) in [
                (
                    "sluice_tls_connections_total",
                    "Connections upgraded to RPC-with-TLS (kernel TLS or rustls).",
                    up,
                ),
                (
                    "sluice_tls_ktls_connections_total",
                    "TLS connections whose record layer went to the kernel (kTLS; READ by splice).",
                    self.tls_kernel_count().unwrap_or(0),
                ),
                (
                    "sluice_tls_client_verified_total",
                    "TLS connections whose client certificate was verified.",
                    verified,
                ),
                (
                    "sluice_tls_handshake_failures_total",
                    "RPC-with-TLS handshakes that failed or timed out.",
                    failed,
                ),
            ] {
                let _ = writeln!(s, "# HELP {name} {help}");
                let _ = writeln!(s, "# TYPE {name} counter");
                let _ = writeln!(s, "{name} {v}");
            }
        }
        let _ = writeln!(s, "# HELP sluice_nfs_calls_total NFSv3 calls by procedure.");
        let _ = writeln!(s, "# TYPE sluice_nfs_calls_total counter");
        for (i, p) in self.nfs.iter().enumerate() {
            let _ = writeln!(
                s,
                "sluice_nfs_calls_total{{proc=\"{}\"}} {}",
                nfs3::PROCS[i].name,
                p.calls.load(Relaxed)
            );
        }
        let _ = writeln!(
            s,
            "# HELP sluice_nfs_errors_total NFSv3 calls answered with an error."
        );
        let _ = writeln!(s, "# TYPE sluice_nfs_errors_total counter");
        for (i, p) in self.nfs.iter().enumerate() {
            let _ = writeln!(
                s,
                "sluice_nfs_errors_total{{proc=\"{}\"}} {}",
                nfs3::PROCS[i].name,
                p.errors.load(Relaxed)
            );
        }
        let _ = writeln!(
            s,
            "# HELP sluice_nlm_calls_total NLM v4 calls (NFSv3 clients' locks) by procedure."
        );
        let _ = writeln!(s, "# TYPE sluice_nlm_calls_total counter");
        for (i, p) in self.nlm.iter().enumerate() {
            let _ = writeln!(
                s,
                "sluice_nlm_calls_total{{proc=\"{}\"}} {}",
                nlm::PROCS[i].name,
                p.calls.load(Relaxed)
            );
        }
        for (metric, help, counter) in [
            (
                "sluice_nfs4_calls_total",
                "NFSv4 calls by procedure (a COMPOUND counts once).",
                (|p: &ProcStats| p.calls.load(Relaxed)) as fn(&ProcStats) -> u64,
            ),
            (
                "sluice_nfs4_errors_total",
                "NFSv4 calls answered with an error (a COMPOUND by its overall status).",
                |p: &ProcStats| p.errors.load(Relaxed),
            ),
        ] {
            let _ = writeln!(s, "# HELP {metric} {help}");
            let _ = writeln!(s, "# TYPE {metric} counter");
            for (i, p) in self.nfs4.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "{metric}{{proc=\"{}\"}} {}",
                    nfs4::PROCS[i].name,
                    counter(p)
                );
            }
        }
        // Per-op rows only for ops seen: 74 rows of zeros would drown the ones that matter.
        for (metric, help, counter) in [
            (
                "sluice_nfs4_op_calls_total",
                "NFSv4 operations by op (inside COMPOUNDs).",
                (|p: &ProcStats| p.calls.load(Relaxed)) as fn(&ProcStats) -> u64,
            ),
            (
                "sluice_nfs4_op_errors_total",
                "NFSv4 operations answered with an error status.",
                |p: &ProcStats| p.errors.load(Relaxed),
            ),
        ] {
            let _ = writeln!(s, "# HELP {metric} {help}");
            let _ = writeln!(s, "# TYPE {metric} counter");
            for (name, p) in self.nfs4_ops.used() {
                let _ = writeln!(s, "{metric}{{op=\"{name}\"}} {}", counter(p));
            }
        }
        let _ = writeln!(s, "# HELP sluice_nfs_latency_seconds NFSv3 call latency.");
        let _ = writeln!(s, "# TYPE sluice_nfs_latency_seconds histogram");
        for (i, p) in self.nfs.iter().enumerate() {
            let labels = format!("proc=\"{}\"", nfs3::PROCS[i].name);
            latency_histogram(&mut s, "sluice_nfs_latency_seconds", &labels, &p.snapshot());
        }
        let _ = writeln!(
            s,
            "# HELP sluice_nfs4_op_latency_seconds NFSv4 operation latency (inside COMPOUNDs)."
        );
        let _ = writeln!(s, "# TYPE sluice_nfs4_op_latency_seconds histogram");
        for (name, p) in self.nfs4_ops.used() {
            let labels = format!("op=\"{name}\"");
            latency_histogram(
                &mut s,
                "sluice_nfs4_op_latency_seconds",
                &labels,
                &p.snapshot(),
            );
        }
        render_backends_prometheus(&mut s, &self.backends());
        if let Some(g) = self.nfs4_gauges() {
            for (metric, help, v) in [
                (
                    "sluice_nfs4_clients",
                    "NFSv4 client records (courtesy clients included).",
                    g.clients,
                ),
                ("sluice_nfs4_sessions", "NFSv4.1 sessions.", g.sessions),
                (
                    "sluice_nfs4_open_stateids",
                    "NFSv4 open stateids.",
                    g.open_stateids,
                ),
                (
                    "sluice_nfs4_lock_stateids",
                    "NFSv4 lock stateids.",
                    g.lock_stateids,
                ),
                (
                    "sluice_nfs4_locks",
                    "NFSv4 byte-range locks (an owner's touching ranges of one type count once).",
                    g.locks,
                ),
            ] {
                let _ = writeln!(s, "# HELP {metric} {help}");
                let _ = writeln!(s, "# TYPE {metric} gauge");
                let _ = writeln!(s, "{metric} {v}");
            }
            if let Some(gr) = g.grace {
                render_grace_prometheus(&mut s, &gr);
            }
            let _ = writeln!(
                s,
                "# HELP sluice_nfs4_delegations NFSv4 delegations held (being recalled included)."
            );
            let _ = writeln!(s, "# TYPE sluice_nfs4_delegations gauge");
            let _ = writeln!(
                s,
                "sluice_nfs4_delegations{{type=\"read\"}} {}",
                g.delegations_read
            );
            let _ = writeln!(
                s,
                "sluice_nfs4_delegations{{type=\"write\"}} {}",
                g.delegations_write
            );
            let _ = writeln!(
                s,
                "# HELP sluice_nfs4_delegations_granted_total NFSv4 delegations granted."
            );
            let _ = writeln!(s, "# TYPE sluice_nfs4_delegations_granted_total counter");
            let _ = writeln!(
                s,
                "sluice_nfs4_delegations_granted_total{{type=\"read\"}} {}",
                g.delegations_granted_read
            );
            let _ = writeln!(
                s,
                "sluice_nfs4_delegations_granted_total{{type=\"write\"}} {}",
                g.delegations_granted_write
            );
            for (metric, help, v) in [
                (
                    "sluice_nfs4_recalls_sent_total",
                    "CB_RECALLs sent.",
                    g.recalls_sent,
                ),
                (
                    "sluice_nfs4_recalls_answered_total",
                    "CB_RECALLs the client answered.",
                    g.recalls_answered,
                ),
                (
                    "sluice_nfs4_recalls_timed_out_total",
                    "CB_RECALLs that got no answer.",
                    g.recalls_timed_out,
                ),
                (
                    "sluice_nfs4_delegations_revoked_total",
                    "Delegations revoked: not returned within a lease of their recall.",
                    g.delegations_revoked,
                ),
                (
                    "sluice_nfs4_cb_getattr_sent_total",
                    "CB_GETATTRs sent to write delegations' holders.",
                    g.cb_getattr_sent,
                ),
                (
                    "sluice_nfs4_cb_getattr_answered_total",
                    "CB_GETATTRs answered with the holder's size and change.",
                    g.cb_getattr_answered,
                ),
            ] {
                let _ = writeln!(s, "# HELP {metric} {help}");
                let _ = writeln!(s, "# TYPE {metric} counter");
                let _ = writeln!(s, "{metric} {v}");
            }
            let _ = writeln!(
                s,
                "# HELP sluice_nfs4_async_copies NFSv4.2 asynchronous COPYs running or awaiting their CB_OFFLOAD's answer."
            );
            let _ = writeln!(s, "# TYPE sluice_nfs4_async_copies gauge");
            let _ = writeln!(s, "sluice_nfs4_async_copies {}", g.async_copies);
            let _ = writeln!(
                s,
                "# HELP sluice_nfs4_cb_offload_total CB_OFFLOADs queued for finished asynchronous COPYs."
            );
            let _ = writeln!(s, "# TYPE sluice_nfs4_cb_offload_total counter");
            let _ = writeln!(s, "sluice_nfs4_cb_offload_total {}", g.cb_offloads);
        }
        for (metric, help, h) in [
            (
                "sluice_wire_read_bytes",
                "Payload sizes of READ replies.",
                &self.wire_read_bytes,
            ),
            (
                "sluice_wire_write_bytes",
                "Payload sizes of WRITE calls.",
                &self.wire_write_bytes,
            ),
            (
                "sluice_backend_read_bytes",
                "Sizes of reads from the backing file system.",
                &self.backend_read_bytes,
            ),
            (
                "sluice_backend_write_bytes",
                "Sizes of writes to the backing file system.",
                &self.backend_write_bytes,
            ),
        ] {
            let _ = writeln!(s, "# HELP {metric} {help}");
            let _ = writeln!(s, "# TYPE {metric} histogram");
            let mut cum = 0;
            for (b, bound) in SIZE_BUCKETS_BYTES.iter().enumerate() {
                cum += h.buckets[b].load(Relaxed);
                let _ = writeln!(s, "{metric}_bucket{{le=\"{bound}\"}} {cum}");
            }
            let _ = writeln!(
                s,
                "{metric}_bucket{{le=\"+Inf\"}} {}",
                h.count.load(Relaxed)
            );
            let _ = writeln!(s, "{metric}_sum {}", h.bytes.load(Relaxed));
            let _ = writeln!(s, "{metric}_count {}", h.count.load(Relaxed));
        }
        let e = &self.engine;
        for (metric, kind, help, v) in [
            (
                "sluice_seqtable_hits_total",
                "counter",
                "Sequential-table lookups that found the file.",
                &e.seq_hits,
            ),
            (
                "sluice_seqtable_misses_total",
                "counter",
                "Sequential-table lookups that did not.",
                &e.seq_misses,
            ),
            (
                "sluice_seqtable_evictions_total",
                "counter",
                "Sequential-table entries evicted.",
                &e.seq_evictions,
            ),
            (
                "sluice_dirty_bytes",
                "gauge",
                "UNSTABLE data held in memory, not yet written.",
                &e.dirty_bytes,
            ),
            (
                "sluice_dirty_bytes_high_water",
                "gauge",
                "Most dirty bytes held at once.",
                &e.dirty_bytes_high_water,
            ),
            (
                "sluice_pool_chunks_in_use",
                "gauge",
                "Data chunks lent out by the pool.",
                &e.pool_chunks_in_use,
            ),
            (
                "sluice_pool_chunks_high_water",
                "gauge",
                "Most chunks lent out at once.",
                &e.pool_chunks_high_water,
            ),
            (
                "sluice_readahead_bytes_total",
                "counter",
                "Bytes the server read ahead.",
                &e.readahead_bytes,
            ),
            (
                "sluice_spliced_read_bytes_total",
                "counter",
                "READ data spliced from the page cache to the socket without a copy.",
                &e.spliced_bytes,
            ),
            (
                "sluice_splice_pipes",
                "gauge",
                "Pipes for spliced READs in existence.",
                &e.pipes,
            ),
            (
                "sluice_uring_reads_total",
                "counter",
                "Small READs that missed the page cache, read through io_uring.",
                &e.uring_reads,
            ),
            (
                "sluice_drc_hits_total",
                "counter",
                "Retransmissions answered from the reply cache.",
                &e.drc_hits,
            ),
        ] {
            let _ = writeln!(s, "# HELP {metric} {help}");
            let _ = writeln!(s, "# TYPE {metric} {kind}");
            let _ = writeln!(s, "{metric} {}", v.load(Relaxed));
        }
        s
    }

    /// Renders the counters like `nfsstat -s`.
    pub fn render(&self) -> String {
        let mut s = String::new();
        if let Some((up, verified, failed)) = self.tls_counts() {
            let kernel = self.tls_kernel_count().unwrap_or(0);
            let rustls = up.saturating_sub(kernel);
            let _ = writeln!(
                s,
                "tls: {up} connections upgraded ({kernel} kernel TLS with READ by splice, {rustls} rustls), {verified} with a verified client certificate, {failed} handshakes failed"
            );
        }
        let _ = writeln!(s, "Server nfs v3:");
        let _ = writeln!(
            s,
            "{:<12} {:>10} {:>8} {:>12}",
            "proc", "calls", "errors", "avg_us"
        );
        for (i, p) in self.nfs.iter().enumerate() {
            let calls = p.calls.load(Relaxed);
            if calls == 0 {
                continue;
            }
            let avg = p.latency_micros_total.load(Relaxed) / calls;
            let _ = writeln!(
                s,
                "{:<12} {:>10} {:>8} {:>12}",
                nfs3::PROCS[i].name.to_ascii_lowercase(),
                calls,
                p.errors.load(Relaxed),
                avg
            );
        }
        for (i, p) in self.nfs4.iter().enumerate() {
            let calls = p.calls.load(Relaxed);
            if calls == 0 {
                continue;
            }
            let avg = p.latency_micros_total.load(Relaxed) / calls;
            let _ = writeln!(
                s,
                "{:<12} {:>10} {:>8} {:>12}",
                format!("v4 {}", nfs4::PROCS[i].name.to_ascii_lowercase()),
                calls,
                p.errors.load(Relaxed),
                avg
            );
        }
        if self.nlm.iter().any(|p| p.calls.load(Relaxed) > 0) {
            let _ = writeln!(s, "Server nlm v4:");
            let _ = writeln!(
                s,
                "{:<12} {:>10} {:>8} {:>12}",
                "proc", "calls", "errors", "avg_us"
            );
            for (i, p) in self.nlm.iter().enumerate() {
                let calls = p.calls.load(Relaxed);
                if calls == 0 {
                    continue;
                }
                let _ = writeln!(
                    s,
                    "{:<12} {:>10} {:>8} {:>12}",
                    nlm::PROCS[i].name.to_ascii_lowercase(),
                    calls,
                    p.errors.load(Relaxed),
                    p.latency_micros_total.load(Relaxed) / calls
                );
            }
        }
        if self.nfs4_ops.used().next().is_some() {
            let _ = writeln!(s, "Server nfs v4 operations:");
            let _ = writeln!(
                s,
                "{:<20} {:>10} {:>8} {:>12}",
                "op", "calls", "errors", "avg_us"
            );
            for (name, p) in self.nfs4_ops.used() {
                let calls = p.calls.load(Relaxed);
                let _ = writeln!(
                    s,
                    "{:<20} {:>10} {:>8} {:>12}",
                    name.to_ascii_lowercase(),
                    calls,
                    p.errors.load(Relaxed),
                    p.latency_micros_total.load(Relaxed) / calls.max(1)
                );
            }
        }
        if let Some(g) = self.nfs4_gauges() {
            let _ = writeln!(
                s,
                "nfs v4 state: {} clients, {} sessions, {} open stateids, {} lock stateids, {} locks",
                g.clients, g.sessions, g.open_stateids, g.lock_stateids, g.locks
            );
            if let Some(gr) = g.grace {
                let _ = writeln!(s, "{}", grace_line(&gr));
            }
            let _ = writeln!(
                s,
                "nfs v4 delegations: {} read, {} write; recalls: {} sent, {} answered, {} timed out; {} revoked; granted: {} read, {} write; CB_GETATTR: {} sent, {} answered",
                g.delegations_read,
                g.delegations_write,
                g.recalls_sent,
                g.recalls_answered,
                g.recalls_timed_out,
                g.delegations_revoked,
                g.delegations_granted_read,
                g.delegations_granted_write,
                g.cb_getattr_sent,
                g.cb_getattr_answered
            );
            let _ = writeln!(
                s,
                "nfs v4.2 copies: {} asynchronous, {} CB_OFFLOAD sent",
                g.async_copies, g.cb_offloads
            );
        }
        render_backends_text(&mut s, &self.backends());
        let e = &self.engine;
        let _ = writeln!(
            s,
            "seqtable: {} hits, {} misses, {} evictions; dirty {} bytes (high water {}); pool {} chunks in use (high water {}); spliced {} bytes ({} pipes); {} READs through io_uring; read ahead {} bytes; reply cache hits {}",
            e.seq_hits.load(Relaxed),
            e.seq_misses.load(Relaxed),
            e.seq_evictions.load(Relaxed),
            e.dirty_bytes.load(Relaxed),
            e.dirty_bytes_high_water.load(Relaxed),
            e.pool_chunks_in_use.load(Relaxed),
            e.pool_chunks_high_water.load(Relaxed),
            e.spliced_bytes.load(Relaxed),
            e.pipes.load(Relaxed),
            e.uring_reads.load(Relaxed),
            e.readahead_bytes.load(Relaxed),
            e.drc_hits.load(Relaxed),
        );
        for (name, h) in [
            ("wire READ", &self.wire_read_bytes),
            ("wire WRITE", &self.wire_write_bytes),
            ("backend read", &self.backend_read_bytes),
            ("backend write", &self.backend_write_bytes),
        ] {
            let n = h.count.load(Relaxed);
            let bytes = h.bytes.load(Relaxed);
            if let Some(avg) = bytes.checked_div(n) {
                let _ = writeln!(
                    s,
                    "{name}: {n} ops, {bytes} bytes, avg {avg} bytes, median <= {} bytes",
                    h.median_bucket_bytes()
                );
            }
        }
        s
    }
}

/// One Prometheus histogram series of `p`'s latencies, labelled `labels` (`k="v",...`, already
/// escaped); nothing for a row with no calls.
fn latency_histogram(s: &mut String, metric: &str, labels: &str, p: &CallStats) {
    let calls = p.calls;
    if calls == 0 {
        return;
    }
    let mut cum = 0;
    for (b, bound) in LATENCY_BUCKETS_MICROS.iter().enumerate() {
        cum += p.latency_buckets[b];
        let _ = writeln!(
            s,
            "{metric}_bucket{{{labels},le=\"{}\"}} {cum}",
            *bound as f64 / 1e6
        );
    }
    let _ = writeln!(s, "{metric}_bucket{{{labels},le=\"+Inf\"}} {calls}");
    let _ = writeln!(
        s,
        "{metric}_sum{{{labels}}} {}",
        p.latency_micros_total as f64 / 1e6
    );
    let _ = writeln!(s, "{metric}_count{{{labels}}} {calls}");
}

/// The backends' counters in `/metrics`: calls, errors and a latency histogram per export,
/// backend and call, then their events. Nothing when no export has a backend that counts.
fn render_backends_prometheus(s: &mut String, backends: &[ExportBackendStats]) {
    if backends.is_empty() {
        return;
    }
    let labels = |export: &str, b: &BackendStats, call: &str| {
        format!(
            "export=\"{}\",backend=\"{}\",call=\"{}\"",
            label_value(export),
            label_value(b.backend),
            label_value(call)
        )
    };
    for (metric, help, counter) in [
        (
            "sluice_backend_calls_total",
            "Calls a backend made to the storage beneath it (a Ceph export: libcephfs calls), by call.",
            (|c: &CallStats| c.calls) as fn(&CallStats) -> u64,
        ),
        (
            "sluice_backend_errors_total",
            "Backend calls that failed (not found included).",
            |c: &CallStats| c.errors,
        ),
    ] {
        let _ = writeln!(s, "# HELP {metric} {help}");
        let _ = writeln!(s, "# TYPE {metric} counter");
        for (export, b) in backends {
            for (call, c) in &b.calls {
                let _ = writeln!(s, "{metric}{{{}}} {}", labels(export, b, call), counter(c));
            }
        }
    }
    let metric = "sluice_backend_latency_seconds";
    let _ = writeln!(s, "# HELP {metric} Latency of a backend's calls.");
    let _ = writeln!(s, "# TYPE {metric} histogram");
    for (export, b) in backends {
        for (call, c) in &b.calls {
            latency_histogram(s, metric, &labels(export, b, call), c);
        }
    }
    let metric = "sluice_backend_events_total";
    let _ = writeln!(
        s,
        "# HELP {metric} Events a backend counts (a Ceph export: the MDS's cache invalidations and requests to release inodes)."
    );
    let _ = writeln!(s, "# TYPE {metric} counter");
    for (export, b) in backends {
        for (event, n) in &b.events {
            let _ = writeln!(
                s,
                "{metric}{{export=\"{}\",backend=\"{}\",event=\"{}\"}} {n}",
                label_value(export),
                label_value(b.backend),
                label_value(event)
            );
        }
    }
}

/// The backends' counters in `sluice stats`: per export, the calls made (those with at least
/// one), with errors, mean latency and the bound of the 99th percentile's bucket; then the
/// events.
fn render_backends_text(s: &mut String, backends: &[ExportBackendStats]) {
    for (export, b) in backends {
        let _ = writeln!(s, "Backend {} of export {export}:", b.backend);
        let _ = writeln!(
            s,
            "{:<12} {:>10} {:>8} {:>12} {:>12}",
            "call", "calls", "errors", "avg_us", "p99_us"
        );
        for (call, c) in b.calls.iter().filter(|(_, c)| c.calls > 0) {
            let p99 = match c.latency_micros_quantile_bound(990) {
                Some(u64::MAX) => format!(
                    ">{}",
                    LATENCY_BUCKETS_MICROS[LATENCY_BUCKETS_MICROS.len() - 1]
                ),
                Some(us) => format!("<={us}"),
                None => "-".to_string(),
            };
            let _ = writeln!(
                s,
                "{:<12} {:>10} {:>8} {:>12} {:>12}",
                call,
                c.calls,
                c.errors,
                c.latency_micros_mean(),
                p99
            );
        }
        if !b.events.is_empty() {
            let events: Vec<String> = b.events.iter().map(|(e, n)| format!("{n} {e}")).collect();
            let _ = writeln!(s, "{} events: {}", b.backend, events.join(", "));
        }
    }
}

/// A Prometheus label value: backslash, double quote and newline escaped (text format 0.0.4).
fn label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// The grace period in `sluice stats`: where it stands, how long it lasted, why it ended.
fn grace_line(g: &sluice_nfs4state::recovery::grace::GraceStats) -> String {
    use sluice_nfs4state::recovery::grace::EndReason;
    let len = g.length.as_secs_f64();
    match (g.ended, g.lasted) {
        (None, _) => format!(
            "nfs v4 grace: in progress ({} of {} clients still to reclaim, at most {len:.0} s)",
            g.clients_waiting, g.clients_recorded
        ),
        (Some(EndReason::Skipped), _) => {
            "nfs v4 grace: skipped (no client held state in the last run)".to_string()
        }
        (Some(reason), lasted) => format!(
            "nfs v4 grace: ended {} after {:.1} s of {len:.0} s ({} clients recorded)",
            match reason {
                EndReason::AllReclaimed => "early, every client reclaimed (AllReclaimed),",
                _ => "at its deadline (Deadline),",
            },
            lasted.unwrap_or_default().as_secs_f64(),
            g.clients_recorded
        ),
    }
}

/// The grace period's gauges in `/metrics`.
fn render_grace_prometheus(s: &mut String, g: &sluice_nfs4state::recovery::grace::GraceStats) {
    for (metric, help, v) in [
        (
            "sluice_nfs4_grace_active",
            "1 while the NFSv4 grace period after a restart lasts.",
            f64::from(u8::from(g.ended.is_none())),
        ),
        (
            "sluice_nfs4_grace_length_seconds",
            "The longest the NFSv4 grace period may last.",
            g.length.as_secs_f64(),
        ),
        (
            "sluice_nfs4_grace_lasted_seconds",
            "How long the NFSv4 grace period lasted (0 while it lasts or when skipped).",
            g.lasted.unwrap_or_default().as_secs_f64(),
        ),
        (
            "sluice_nfs4_grace_clients_recorded",
            "Clients the stable records named at start (those that may reclaim).",
            g.clients_recorded as f64,
        ),
        (
            "sluice_nfs4_grace_clients_waiting",
            "Clients of the records grace still waits for.",
            g.clients_waiting as f64,
        ),
    ] {
        let _ = writeln!(s, "# HELP {metric} {help}");
        let _ = writeln!(s, "# TYPE {metric} gauge");
        let _ = writeln!(s, "{metric} {v}");
    }
    if let Some(reason) = g.ended {
        let m = "sluice_nfs4_grace_ended";
        let _ = writeln!(
            s,
            "# HELP {m} Why the NFSv4 grace period ended: Skipped, AllReclaimed or Deadline."
        );
        let _ = writeln!(s, "# TYPE {m} gauge");
        let _ = writeln!(s, "{m}{{reason=\"{reason:?}\"}} 1");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NLM v4 calls are counted by procedure, not among the calls no table holds, and show in
    /// both renderings; NLM version 1 (not served) is "other".
    #[test]
    fn nlm_calls_are_counted_by_procedure() {
        let st = Stats::default();
        let ms = Duration::from_millis(1);
        st.record(nlm::PROGRAM, nlm::VERSION, nlm::proc_::LOCK, ms, true);
        st.record(nlm::PROGRAM, nlm::VERSION, nlm::proc_::LOCK, ms, true);
        st.record(nlm::PROGRAM, nlm::VERSION, nlm::proc_::UNLOCK, ms, true);
        st.record(nlm::PROGRAM, 1, nlm::proc_::LOCK, ms, false);
        assert_eq!(st.other_calls.load(Relaxed), 1, "only version 1");
        let prom = st.render_prometheus();
        assert!(
            prom.contains("sluice_nlm_calls_total{proc=\"LOCK\"} 2\n"),
            "{prom}"
        );
        assert!(
            prom.contains("sluice_nlm_calls_total{proc=\"UNLOCK\"} 1\n"),
            "{prom}"
        );
        assert!(
            prom.contains("sluice_nlm_calls_total{proc=\"TEST\"} 0\n"),
            "{prom}"
        );
        let text = st.render();
        assert!(text.contains("Server nlm v4:"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().take(3).eq(["lock", "2", "0"])),
            "{text}"
        );
        assert!(!text.lines().any(|l| l.starts_with("test ")), "{text}");
    }

    /// A COMPOUND is counted under NFSv4's COMPOUND, not among the calls no table holds, and
    /// shows in both renderings.
    #[test]
    fn nfs4_calls_are_counted_by_procedure() {
        let st = Stats::default();
        let ms = Duration::from_millis(1);
        st.record(nfs4::PROGRAM, 4, nfs4::proc_::COMPOUND, ms, true);
        st.record(nfs4::PROGRAM, 4, nfs4::proc_::COMPOUND, ms, false);
        st.record(nfs4::PROGRAM, 4, nfs4::proc_::NULL, ms, true);
        st.record(nfs4::PROGRAM, 5, 0, ms, false);
        assert_eq!(st.other_calls.load(Relaxed), 1, "only version 5");
        let prom = st.render_prometheus();
        assert!(
            prom.contains("sluice_nfs4_calls_total{proc=\"COMPOUND\"} 2\n"),
            "{prom}"
        );
        assert!(
            prom.contains("sluice_nfs4_errors_total{proc=\"COMPOUND\"} 1\n"),
            "{prom}"
        );
        assert!(
            prom.contains("sluice_nfs4_calls_total{proc=\"NULL\"} 1\n"),
            "{prom}"
        );
        let text = st.render();
        assert!(text.contains("v4 compound"), "{text}");
    }

    /// Each op is counted under its own name, errors by the op's status; ops never seen are
    /// left out; the gauges show once a source is set.
    #[test]
    fn nfs4_ops_are_counted_by_op_and_gauges_come_from_the_source() {
        use crate::nfs4::compound::OpObserver;
        let st = Stats::default();
        let t = st.op_start();
        st.op_done(Opnum4::SEQUENCE, nfs4::Nfsstat4::OK, t);
        st.op_done(Opnum4::PUTFH, nfs4::Nfsstat4::OK, t);
        st.op_done(Opnum4::PUTFH, nfs4::Nfsstat4::STALE, t);
        st.op_done(Opnum4::ILLEGAL, nfs4::Nfsstat4::OP_ILLEGAL, t);
        let prom = st.render_prometheus();
        for line in [
            "sluice_nfs4_op_calls_total{op=\"PUTFH\"} 2\n",
            "sluice_nfs4_op_errors_total{op=\"PUTFH\"} 1\n",
            "sluice_nfs4_op_calls_total{op=\"SEQUENCE\"} 1\n",
            "sluice_nfs4_op_errors_total{op=\"SEQUENCE\"} 0\n",
            "sluice_nfs4_op_calls_total{op=\"ILLEGAL\"} 1\n",
            "sluice_nfs4_op_latency_seconds_count{op=\"PUTFH\"} 2\n",
        ] {
            assert!(prom.contains(line), "{line} in {prom}");
        }
        assert!(!prom.contains("op=\"READ\""), "unused ops are left out");
        assert!(
            !prom.contains("sluice_nfs4_sessions"),
            "no source, no gauges"
        );
        st.set_nfs4_gauges(Box::new(|| Gauges4 {
            clients: 3,
            sessions: 2,
            open_stateids: 5,
            lock_stateids: 4,
            locks: 7,
            grace: Some(sluice_nfs4state::recovery::grace::GraceStats {
                clients_recorded: 2,
                clients_waiting: 0,
                length: Duration::from_secs(90),
                ended: Some(sluice_nfs4state::recovery::grace::EndReason::AllReclaimed),
                lasted: Some(Duration::from_millis(1500)),
            }),
            delegations_read: 6,
            recalls_sent: 2,
            delegations_revoked: 1,
            async_copies: 1,
            cb_offloads: 6,
            ..Gauges4::default()
        }));
        let prom = st.render_prometheus();
        assert!(prom.contains("sluice_nfs4_clients 3\n"), "{prom}");
        assert!(prom.contains("sluice_nfs4_sessions 2\n"), "{prom}");
        assert!(prom.contains("sluice_nfs4_open_stateids 5\n"), "{prom}");
        assert!(prom.contains("sluice_nfs4_lock_stateids 4\n"), "{prom}");
        assert!(prom.contains("sluice_nfs4_locks 7\n"), "{prom}");
        assert!(prom.contains("sluice_nfs4_grace_active 0\n"), "{prom}");
        assert!(
            prom.contains("sluice_nfs4_grace_lasted_seconds 1.5\n"),
            "{prom}"
        );
        assert!(
            prom.contains("sluice_nfs4_grace_length_seconds 90\n"),
            "{prom}"
        );
        assert!(
            prom.contains("sluice_nfs4_grace_ended{reason=\"AllReclaimed\"} 1\n"),
            "{prom}"
        );
        assert!(
            prom.contains("sluice_nfs4_delegations{type=\"read\"} 6\n"),
            "{prom}"
        );
        assert!(
            prom.contains("sluice_nfs4_recalls_sent_total 2\n"),
            "{prom}"
        );
        assert!(
            prom.contains("sluice_nfs4_delegations_revoked_total 1\n"),
            "{prom}"
        );
        assert!(prom.contains("sluice_nfs4_async_copies 1\n"), "{prom}");
        assert!(prom.contains("sluice_nfs4_cb_offload_total 6\n"), "{prom}");
        let text = st.render();
        assert!(text.contains("putfh"), "{text}");
        assert!(
            text.contains("nfs v4 state: 3 clients, 2 sessions, 5 open stateids"),
            "{text}"
        );
        assert!(
            text.contains("nfs v4 grace: ended early, every client reclaimed (AllReclaimed), after 1.5 s of 90 s"),
            "{text}"
        );
        assert!(
            text.contains("nfs v4 delegations: 6 read, 0 write; recalls: 2 sent"),
            "{text}"
        );
    }

    /// A backend's calls show per export in both renderings, labelled by export, backend and
    /// call, with a latency histogram in the server's own buckets; a server whose exports count
    /// nothing shows no backend section at all.
    #[test]
    fn backend_calls_render_per_export_only_when_there_are_some() {
        let none = Stats::default();
        none.set_backends(Box::new(Vec::new));
        assert!(!none
            .render_prometheus()
            .contains("sluice_backend_calls_total"));
        assert!(!none.render().contains("Backend"));

        let read = ProcStats::default();
        read.record(Duration::from_micros(20), true);
        read.record(Duration::from_micros(30), true);
        read.record(Duration::from_millis(2), false);
        let lookup = ProcStats::default();
        lookup.record(Duration::from_micros(5), false);
        let ceph = BackendStats {
            backend: "ceph",
            calls: vec![
                ("lookup", lookup.snapshot()),
                ("getattr", CallStats::default()),
                ("read", read.snapshot()),
            ],
            events: vec![("inode_invalidations", 4), ("release_requests", 0)],
        };
        let st = Stats::default();
        let backends = vec![
            ("/vol".to_string(), ceph.clone()),
            ("/a\"b".to_string(), ceph),
        ];
        st.set_backends(Box::new(move || backends.clone()));
        let prom = st.render_prometheus();
        for line in [
            "sluice_backend_calls_total{export=\"/vol\",backend=\"ceph\",call=\"read\"} 3\n",
            "sluice_backend_calls_total{export=\"/vol\",backend=\"ceph\",call=\"getattr\"} 0\n",
            "sluice_backend_errors_total{export=\"/vol\",backend=\"ceph\",call=\"read\"} 1\n",
            "sluice_backend_errors_total{export=\"/vol\",backend=\"ceph\",call=\"lookup\"} 1\n",
            "sluice_backend_latency_seconds_bucket{export=\"/vol\",backend=\"ceph\",call=\"read\",le=\"0.00001\"} 0\n",
            "sluice_backend_latency_seconds_bucket{export=\"/vol\",backend=\"ceph\",call=\"read\",le=\"0.00005\"} 2\n",
            "sluice_backend_latency_seconds_bucket{export=\"/vol\",backend=\"ceph\",call=\"read\",le=\"0.0025\"} 3\n",
            "sluice_backend_latency_seconds_bucket{export=\"/vol\",backend=\"ceph\",call=\"read\",le=\"+Inf\"} 3\n",
            "sluice_backend_latency_seconds_sum{export=\"/vol\",backend=\"ceph\",call=\"read\"} 0.00205\n",
            "sluice_backend_latency_seconds_count{export=\"/vol\",backend=\"ceph\",call=\"read\"} 3\n",
            "sluice_backend_events_total{export=\"/vol\",backend=\"ceph\",event=\"inode_invalidations\"} 4\n",
            "sluice_backend_calls_total{export=\"/a\\\"b\",backend=\"ceph\",call=\"read\"} 3\n",
        ] {
            assert!(prom.contains(line), "{line} in {prom}");
        }
        assert!(
            !prom.contains("sluice_backend_latency_seconds_count{export=\"/vol\",backend=\"ceph\",call=\"getattr\"}"),
            "no histogram for a call never made: {prom}"
        );
        for family in [
            "sluice_backend_calls_total counter",
            "sluice_backend_errors_total counter",
            "sluice_backend_latency_seconds histogram",
            "sluice_backend_events_total counter",
        ] {
            assert_eq!(
                prom.matches(&format!("# TYPE {family}\n")).count(),
                1,
                "{family} declared once for both exports"
            );
        }
        let text = st.render();
        assert!(text.contains("Backend ceph of export /vol:\n"), "{text}");
        let row = |call: &str| -> Vec<String> {
            let mut rows = text
                .lines()
                .filter(|l| l.split_whitespace().next() == Some(call));
            rows.next()
                .map(|l| l.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default()
        };
        assert_eq!(row("read"), ["read", "3", "1", "683", "<=2500"], "{text}");
        assert_eq!(row("lookup"), ["lookup", "1", "1", "5", "<=10"], "{text}");
        assert!(
            row("getattr").is_empty(),
            "calls never made are left out: {text}"
        );
        assert!(
            text.contains("ceph events: 4 inode_invalidations, 0 release_requests\n"),
            "{text}"
        );
    }
}
