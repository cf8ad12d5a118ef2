//! Faults: link resets, stalls, server restarts and backend errors, against a write + read
//! workload whose every byte is checked against a reference model.
//!
//! # Why a second world
//! [`crate::run`] measures the read path (readahead, rates) over the link model, which carries
//! one reset and one stall per direction at most. The promise tested here is different:
//! *nothing is lost* (RFC 1813 §3.3.7, §3.3.21) however often the connection drops and the
//! server reboots. So this world is smaller and nastier: a client whose transport is the real
//! [`CallTable`] (XIDs, reconnect on major timeout, resend with the same XID after
//! [`CallTable::handle_connected`]) and real record marking and NFSv3 codecs, the real server
//! (handlers, data path, write-behind, hosted in virtual time by the `host` module) over a MemFs
//! that loses what was not committed when it crashes, and a FIFO link that can stall or reset
//! at any moment.
//!
//! ```text
//!   app (phases)                   link (FIFO per direction, one-way delay,
//!    │ write phase: UNSTABLE WRITEs      stalls, resets that drop both directions)
//!    │   then COMMIT until the            │
//!    │   UnstableLog has nothing          ▼
//!    │   to resend                  server: sluice_server's NFSv3 handlers
//!    │ read phase: READs checked      ─► write-behind holds UNSTABLE data, flushes clusters
//!    ▼   against the model            ─► MemFs: data (what READs see), durable (what COMMIT
//!   CallTable ── record marking ──►      made stable); a crash reverts data to durable and
//!                                        changes the verifier; a restart is a fresh engine
//! ```
//!
//! # The client's rule (sluice-client's, reused)
//! Every WRITE reply is recorded with its verifier in [`sluice_client::plan::UnstableLog`], the
//! very type the real client drives. A COMMIT reply's verifier settles the chunks written under
//! it; [`UnstableLog::on_commit`] returns the others (written before a restart), which are
//! resent and committed again, until a COMMIT settles everything. Then the server's durable
//! image must equal the model: that is the invariant of a write phase.
//!
//! # Faults, all drawn from the seed ([`FaultScenario::draw`])
//! * link resets: each transmitted call resets the connection with some probability, at a
//!   random moment within the next RTT; both directions lose what they carry;
//! * stalls: the link stops delivering for up to a few seconds (longer than the call table's
//!   major timeout sometimes, so the table asks for a reconnect itself);
//! * server restarts: at random times, and sometimes just as a COMMIT arrives: the MemFs
//!   crashes (files revert to what was committed, the verifier changes), the engine is new
//!   (held writes are gone with it), calls in service are dropped, the connection is reset, and
//!   the server is unreachable for a while;
//! * backend errors: MemFs's EIO, injected for one call: a READ or WRITE answers NFS3ERR_IO
//!   without touching anything; a COMMIT fails either in its fdatasync or in the flush of the
//!   data it lands (write-behind then remembers the error, reports it at this COMMIT and changes
//!   the verifier, so the client resends everything it has not committed). The application
//!   sees the error (counted) and retries the operation as a new call.
//!
//! Faults start only during the first [`FaultScenario::chaos`] of virtual time; then the
//! liveness phase requires the run to finish.
//!
//! A run is a pure function of its [`FaultScenario`]: it prints the seed first, and the tests
//! replay one with `SLUICE_SEED=<n>`.

use crate::host::Host;
use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_engine::plan::UnstableLog;
use sluice_rpc::client::{CallTable, CallTableConfig, Event, ProcId};
use sluice_rpc::record::{self, RecordDecoder};
use sluice_rpc::rtt::TimerClass;
use sluice_rpc::server::{self as rpcs, CallParse, Credentials};
use sluice_server::backend::memfs::{self, Fault, FaultEffect};
use sluice_server::backend::FsError;
use sluice_server::io::IoConfig;
use sluice_server::Transport as ServerTransport;
use sluice_xdr::nfs3::{
    self, Args3, CommitArgs, NfsFh3, NfsResult, Nfsstat3, ReadArgs, Res3, StableHow, WriteArgs,
};
use sluice_xdr::rpc::OpaqueAuth;
use sluice_xdr::Payload;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// A fault run: the workload, the link and the fault rates. See [`FaultScenario::draw`].
#[derive(Debug, Clone, PartialEq)]
pub struct FaultScenario {
    pub seed: u64,
    /// Round-trip propagation delay.
    pub rtt: Duration,
    /// Size of the one file (its initial content is a pattern of the seed).
    pub file_bytes: usize,
    /// Workload: this many phases, each a write phase (WRITEs then COMMITs) or a read phase.
    pub phases: usize,
    /// Operations per phase, at most.
    pub ops_per_phase_max: usize,
    /// Largest WRITE or READ, bytes.
    pub io_bytes_max: usize,
    /// Probability that a transmitted call resets the connection.
    pub reset_ratio: f64,
    /// Probability that a transmitted call starts a link stall, and the longest stall.
    pub stall_ratio: f64,
    pub stall_max: Duration,
    /// Mean time between server restarts (`None`: never), and how long the server is down.
    pub restart_every: Option<Duration>,
    pub restart_downtime: Duration,
    /// Probability that the server crashes (restarts) as a COMMIT reaches it, before executing
    /// it: the moment when the most UNSTABLE data is at stake.
    pub crash_at_commit_ratio: f64,
    /// Probability that a READ, WRITE or COMMIT fails with NFS3ERR_IO.
    pub io_error_ratio: f64,
    /// Time the server spends on a call: uniform in `0..=service_time_max`.
    pub service_time_max: Duration,
    /// The call table's major timeout: a stall longer than this makes it reconnect.
    pub major_timeout: Duration,
    /// Faults are drawn only during this much virtual time from the start; after it comes
    /// the liveness phase, in which the run must finish. (Restarts faster than a WRITE + COMMIT
    /// round trip make any NFSv3 client resend forever without losing anything: safety holds,
    /// progress needs the chaos to end, as in tigerbeetle's simulator.)
    pub chaos: Duration,
    /// A run that has not finished by then is reported as stuck.
    pub time_limit: Duration,
}

impl FaultScenario {
    /// Everything drawn from the seed: a failure replays from it alone.
    pub fn draw(seed: u64) -> FaultScenario {
        let mut g = ChaCha8Rng::seed_from_u64(seed ^ 0xfa17_5eed);
        let faulty = |g: &mut ChaCha8Rng, p: f64, max: f64| {
            if g.gen_bool(p) {
                g.gen_range(0.0..max)
            } else {
                0.0
            }
        };
        FaultScenario {
            seed,
            rtt: Duration::from_micros(g.gen_range(50..=20_000)),
            file_bytes: g.gen_range(4 * 1024..=2 << 20),
            phases: g.gen_range(2..=12),
            ops_per_phase_max: g.gen_range(1..=24),
            io_bytes_max: [512, 4096, 32 * 1024, 64 * 1024][g.gen_range(0..4)],
            reset_ratio: faulty(&mut g, 0.6, 0.08),
            stall_ratio: faulty(&mut g, 0.5, 0.03),
            stall_max: Duration::from_millis(g.gen_range(1..=5_000)),
            restart_every: g
                .gen_bool(0.6)
                .then(|| Duration::from_millis(g.gen_range(2..=500))),
            restart_downtime: Duration::from_millis(g.gen_range(0..=500)),
            crash_at_commit_ratio: faulty(&mut g, 0.5, 0.5),
            io_error_ratio: faulty(&mut g, 0.5, 0.1),
            service_time_max: Duration::from_micros(g.gen_range(0..=3_000)),
            major_timeout: Duration::from_millis(g.gen_range(100..=1_500)),
            chaos: Duration::from_millis(g.gen_range(100..=30_000)),
            time_limit: Duration::from_secs(3600),
        }
    }
}

impl fmt::Display for FaultScenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rtt {:?}, file {} B, {} phases of <= {} ops of <= {} B, resets {:.3}, stalls {:.3} \
             (<= {:?}), restarts every {:?} (down {:?}), crash at COMMIT {:.2}, EIO {:.3}, service <= {:?}, major {:?}, chaos {:?}",
            self.rtt,
            self.file_bytes,
            self.phases,
            self.ops_per_phase_max,
            self.io_bytes_max,
            self.reset_ratio,
            self.stall_ratio,
            self.stall_max,
            self.restart_every,
            self.restart_downtime,
            self.crash_at_commit_ratio,
            self.io_error_ratio,
            self.service_time_max,
            self.major_timeout,
            self.chaos,
        )
    }
}

/// What a fault run did; `errors` must be empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultReport {
    pub seed: u64,
    pub completed: bool,
    pub elapsed: Duration,
    pub writes_acked: u64,
    pub reads_checked_bytes: u64,
    pub commits_ok: u64,
    /// Chunks the UnstableLog returned for resending after a verifier change.
    pub chunks_resent: u64,
    /// NFS3ERR_IO answers the application saw (and retried).
    pub app_io_errors: u64,
    pub link_resets: u64,
    pub stalls: u64,
    pub server_restarts: u64,
    /// Reconnects the call table asked for (major timeouts).
    pub table_reconnects: u64,
    pub retransmissions: u64,
    /// WRITE payloads the server received, and the backend writes write-behind made of them
    /// (flushes, in pieces): the proof that the data went through write-behind.
    pub server_wire_writes: u64,
    pub server_backend_writes: u64,
    pub calls_started: u64,
    pub calls_completed: u64,
    /// Invariant violations: wrong bytes, durable image differing from the model, lost or
    /// duplicated calls, a stuck run.
    pub errors: Vec<String>,
}

impl FaultReport {
    /// Panics with the seed and the first errors if an invariant was violated.
    pub fn assert_invariants(&self) {
        assert!(
            self.completed && self.errors.is_empty(),
            "seed {}: completed {}, errors {:?} (replay with SLUICE_SEED={})",
            self.seed,
            self.completed,
            &self.errors[..self.errors.len().min(8)],
            self.seed
        );
    }
}

/// Runs a fault scenario in virtual time starting at `epoch`.
pub fn run_faults(sc: &FaultScenario, epoch: Instant) -> FaultReport {
    println!("sluice-sim faults: seed {} ({sc})", sc.seed);
    let mut w = FaultWorld::new(sc, epoch);
    w.run();
    w.report()
}

// =============================================================================================
// The world
// =============================================================================================

/// Upper bound on rounds at one instant (each does something); more is a livelock.
const ROUNDS_PER_INSTANT_MAX: u32 = 100_000;

struct FaultWorld {
    sc: FaultScenario,
    epoch: Instant,
    now: Instant,
    rng: ChaCha8Rng,
    /// Client to server and back. Messages are record-marked byte pieces of a connection.
    c2s: Wire,
    s2c: Wire,
    client: FaultClient,
    server: FaultServer,
    /// The link is frozen until then (both directions).
    stalled_until: Option<Instant>,
    /// A reset drawn at a transmit, due at this time.
    reset_at: Option<Instant>,
    next_restart: Option<Instant>,
    report: FaultReport,
}

impl FaultWorld {
    fn new(sc: &FaultScenario, epoch: Instant) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(sc.seed);
        let initial: Vec<u8> = (0..sc.file_bytes)
            .map(|i| ((i as u64 ^ sc.seed).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 57) as u8)
            .collect();
        let next_restart = sc
            .restart_every
            .map(|m| epoch + m.mul_f64(rng.gen_range(0.0..2.0)));
        let mut cfg = CallTableConfig::tcp();
        cfg.major_timeout = sc.major_timeout;
        let host = Host::new(
            &[Bytes::from(initial.clone())],
            true,
            epoch,
            ServerTransport::Tcp,
            IoConfig::default(),
        );
        let client = FaultClient {
            fh: host.file_handle(),
            table: CallTable::new(cfg, rng.gen()),
            rx: RecordDecoder::default(),
            conn: 0,
            connect_at: None,
            model: initial.clone(),
            log: UnstableLog::new(),
            pending: HashMap::new(),
            phase: 0,
            phase_state: PhaseState::Start,
            cred: OpaqueAuth::none(),
        };
        FaultWorld {
            sc: sc.clone(),
            epoch,
            now: epoch,
            rng,
            c2s: Wire::default(),
            s2c: Wire::default(),
            client,
            server: FaultServer {
                host,
                flush_at: None,
                conn: 0,
                rx: RecordDecoder::default(),
                jobs: BinaryHeap::new(),
                job_args: BTreeMap::new(),
                next_job: 0,
                down_until: None,
            },
            stalled_until: None,
            reset_at: None,
            next_restart,
            report: FaultReport {
                seed: sc.seed,
                ..FaultReport::default()
            },
        }
    }

    fn run(&mut self) {
        let deadline = self.epoch + self.sc.time_limit;
        self.client.table.handle_connected(self.now);
        loop {
            if let Err(e) = self.settle() {
                self.report.errors.push(e);
                return;
            }
            if self.client.phase_state == PhaseState::Done && self.client.pending.is_empty() {
                self.report.completed = true;
                return;
            }
            let Some(next) = self.next_wake() else {
                let e = self.diagnose("nothing scheduled");
                self.report.errors.push(e);
                return;
            };
            if next > deadline {
                let e = self.diagnose("time limit");
                self.report.errors.push(e);
                return;
            }
            assert!(next > self.now, "wake-up {next:?} not after now");
            self.now = next;
        }
    }

    /// Everything due now, until nothing changes.
    fn settle(&mut self) -> Result<(), String> {
        for _ in 0..ROUNDS_PER_INSTANT_MAX {
            let mut progress = false;
            progress |= self.faults_due();
            progress |= self.deliver();
            progress |= self.server_step();
            progress |= self.client_step()?;
            if !progress {
                return Ok(());
            }
        }
        Err(self.diagnose("livelock"))
    }

    /// Past the chaos period: no new fault starts (ones under way run their course).
    fn chaos_over(&self) -> bool {
        self.now >= self.epoch + self.sc.chaos
    }

    fn next_wake(&self) -> Option<Instant> {
        let link_free = self.stalled_until.filter(|&t| t > self.now);
        let delivery = [self.c2s.next(), self.s2c.next()]
            .into_iter()
            .flatten()
            .min()
            .map(|t| link_free.map_or(t, |f| t.max(f)));
        [
            delivery,
            self.server.jobs.peek().map(|r| r.0 .0),
            self.server.flush_at,
            self.server.down_until,
            self.reset_at,
            self.next_restart.filter(|_| !self.chaos_over()),
            self.client.connect_at,
            self.client.table.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .filter(|&t| t > self.now)
        .min()
    }

    // --- faults ------------------------------------------------------------------------------

    fn faults_due(&mut self) -> bool {
        let now = self.now;
        let mut progress = false;
        if self.reset_at.is_some_and(|t| t <= now) {
            self.reset_at = None;
            self.report.link_resets += 1;
            self.drop_connection();
            progress = true;
        }
        if self.next_restart.is_some_and(|t| t <= now) && !self.chaos_over() {
            self.report.server_restarts += 1;
            self.server.restart(now + self.sc.restart_downtime);
            self.drop_connection();
            let every = self.sc.restart_every.expect("restarts are scheduled");
            // The next crash comes after the server is back up (else it might never be).
            self.next_restart =
                Some(now + self.sc.restart_downtime + every.mul_f64(self.rng.gen_range(0.01..2.0)));
            progress = true;
        }
        if self.server.down_until.is_some_and(|t| t <= now) {
            self.server.down_until = None;
            progress = true;
        }
        if self.stalled_until.is_some_and(|t| t <= now) {
            self.stalled_until = None;
            progress = true;
        }
        progress
    }

    /// The TCP connection is gone: both directions lose their bytes, both ends their decoder
    /// state; the client notices after one RTT (a RST) and reconnects.
    fn drop_connection(&mut self) {
        self.c2s.clear();
        self.s2c.clear();
        self.server.conn_lost();
        let c = &mut self.client;
        c.table.handle_disconnect(self.now);
        c.rx = RecordDecoder::default();
        c.conn += 1;
        c.connect_at = Some(self.now + self.sc.rtt);
    }

    // --- link --------------------------------------------------------------------------------

    fn deliver(&mut self) -> bool {
        if self.stalled_until.is_some_and(|t| t > self.now) {
            return false;
        }
        let mut progress = false;
        while let Some(seg) = self.c2s.pop_due(self.now) {
            progress = true;
            if self.server.down_until.is_none() {
                self.server
                    .on_segment(seg, self.now, &self.sc, &mut self.rng);
            }
        }
        while let Some(seg) = self.s2c.pop_due(self.now) {
            progress = true;
            if seg.conn == self.client.conn {
                for p in seg.pieces {
                    self.client.rx.push(p);
                }
            }
        }
        progress
    }

    /// Puts a record on the wire, cut into up to three pieces (so decoders see partial
    /// records), after the one-way delay, behind everything already queued (FIFO, like TCP).
    fn send(
        wire: &mut Wire,
        rng: &mut ChaCha8Rng,
        now: Instant,
        rtt: Duration,
        conn: u64,
        msg: Vec<Bytes>,
    ) {
        let framed: Bytes = record::frame(msg, record::MAX_FRAGMENT_BYTES)
            .iter()
            .flat_map(|b| b.iter().copied())
            .collect::<Vec<u8>>()
            .into();
        let at = (now + rtt / 2).max(wire.last_at.unwrap_or(now));
        let mut cuts: Vec<usize> = (0..rng.gen_range(0..3))
            .map(|_| rng.gen_range(0..=framed.len()))
            .collect();
        cuts.sort_unstable();
        let mut from = 0;
        let mut pieces = Vec::new();
        for c in cuts.into_iter().chain([framed.len()]) {
            if c > from {
                pieces.push(framed.slice(from..c));
                from = c;
            }
        }
        wire.push(at, WireSeg { conn, pieces });
    }

    // --- server ------------------------------------------------------------------------------

    fn server_step(&mut self) -> bool {
        let mut progress = false;
        while let Some(&Reverse((at, id))) = self.server.jobs.peek() {
            if at > self.now {
                break;
            }
            self.server.jobs.pop();
            progress = true;
            let job = &self.server.job_args[&id];
            if job.conn != self.server.conn || self.server.down_until.is_some() {
                // Its connection is gone. The call is dropped unexecuted, as a server without
                // a reply cache must: executed late, an old WRITE could land after a newer one
                // to the same range (the client resent it on the new connection and moved on).
                self.server.job_args.remove(&id);
                continue;
            }
            if matches!(job.args, Args3::Commit(_))
                && !self.chaos_over()
                && self.rng.gen_bool(self.sc.crash_at_commit_ratio)
            {
                self.report.server_restarts += 1;
                self.server.restart(self.now + self.sc.restart_downtime);
                self.drop_connection();
                break;
            }
            let chaos = !self.chaos_over();
            if let Some(reply) = self
                .server
                .execute(id, self.now, &self.sc, chaos, &mut self.rng)
            {
                self.reply(id, reply);
            }
        }
        // Handlers that were waiting (for write-behind) and can go on.
        for (id, reply) in self.server.host.poll(self.now) {
            progress = true;
            self.reply(id, reply);
        }
        // The write-behind flusher, at the deadline it asked for.
        if self.server.flush_at.is_none_or(|t| t <= self.now) {
            let next = self.server.host.flush_due(self.now);
            // A deadline already due means a flush is blocked behind one in flight; in flight
            // here completes inline, so there is nothing to wait for until the next event.
            self.server.flush_at = next.filter(|&t| t > self.now);
        }
        progress
    }

    /// Sends the reply of job `id` if its connection is still the server's.
    fn reply(&mut self, id: u64, reply: Vec<Bytes>) {
        let job = self.server.job_args.remove(&id).expect("job exists");
        if job.conn != self.server.conn || self.server.down_until.is_some() {
            return;
        }
        Self::send(
            &mut self.s2c,
            &mut self.rng,
            self.now,
            self.sc.rtt,
            job.conn,
            reply,
        );
    }

    // --- client ------------------------------------------------------------------------------

    fn client_step(&mut self) -> Result<bool, String> {
        let now = self.now;
        let mut progress = false;
        if self.client.connect_at.is_some_and(|t| t <= now) {
            // The server accepts only when it is up; until then the client keeps trying.
            match self.server.down_until {
                Some(up) => self.client.connect_at = Some(up.max(now + self.sc.rtt)),
                None => {
                    self.client.connect_at = None;
                    self.server.accept(self.client.conn);
                    self.client.table.handle_connected(now);
                }
            }
            progress = true;
        }
        self.client.table.handle_timeout(now);
        while let Some(ev) = self.client.table.poll_event() {
            progress = true;
            match ev {
                Event::Reconnect => {
                    self.report.table_reconnects += 1;
                    self.drop_connection();
                }
                Event::Failed { xid, error } => {
                    return Err(format!("call {xid:#x} failed in hard mode: {error}"))
                }
                Event::NotResponding | Event::Ok => {}
            }
        }
        loop {
            match self.client.rx.next_record() {
                Ok(Some(rec)) => {
                    progress = true;
                    if let Some(done) = self.client.table.handle_reply(now, rec) {
                        self.on_completed(done)?;
                    }
                }
                Ok(None) => break,
                Err(e) => return Err(format!("client record decoder: {e}")),
            }
        }
        progress |= self.app_step()?;
        while let Some(tx) = self.client.table.poll_transmit(now) {
            progress = true;
            let chaos = !self.chaos_over();
            if chaos && self.rng.gen_bool(self.sc.reset_ratio) && self.reset_at.is_none() {
                self.reset_at = Some(now + self.sc.rtt.mul_f64(self.rng.gen_range(0.0..1.0)));
            }
            if chaos && self.rng.gen_bool(self.sc.stall_ratio) && self.stalled_until.is_none() {
                self.report.stalls += 1;
                let d = self.sc.stall_max.mul_f64(self.rng.gen_range(0.0..1.0));
                self.stalled_until = Some(now + d);
            }
            let conn = self.client.conn;
            Self::send(
                &mut self.c2s,
                &mut self.rng,
                now,
                self.sc.rtt,
                conn,
                tx.segments,
            );
        }
        Ok(progress)
    }

    fn on_completed(&mut self, done: sluice_rpc::client::Completed) -> Result<(), String> {
        let Some(op) = self.client.pending.remove(&done.xid) else {
            return Err(format!("reply to a call nobody made: {:#x}", done.xid));
        };
        let reply = done
            .result
            .map_err(|e| format!("RPC error on {op:?}: {e}"))?;
        let res = nfs3::decode_res(op.proc_(), &mut reply.results())
            .map_err(|e| format!("undecodable results of {op:?}: {e}"))?;
        match (op, res) {
            (Op::Write { offset, data }, Res3::Write(r)) => match r {
                NfsResult::Ok(ok) => {
                    if ok.count as usize != data.len() {
                        return Err(format!("short WRITE: {} of {}", ok.count, data.len()));
                    }
                    self.report.writes_acked += 1;
                    self.client.log.record(offset, data, ok.verf);
                }
                NfsResult::Err(Nfsstat3::IO, _) => {
                    // The application sees EIO and writes again (a new call).
                    self.report.app_io_errors += 1;
                    self.client.start(self.now, Op::Write { offset, data })?;
                }
                NfsResult::Err(s, _) => return Err(format!("WRITE: {}", s.name())),
            },
            (Op::Commit, Res3::Commit(r)) => match r {
                NfsResult::Ok(ok) => {
                    self.report.commits_ok += 1;
                    let lost = self.client.log.on_commit(ok.verf);
                    self.report.chunks_resent += lost.len() as u64;
                    if lost.is_empty() {
                        if self.client.phase_state == PhaseState::Committing {
                            self.client.phase_state = PhaseState::Committed;
                        }
                    } else {
                        self.client.phase_state = PhaseState::Writing;
                        for c in lost {
                            self.client.start(
                                self.now,
                                Op::Write {
                                    offset: c.offset,
                                    data: c.data,
                                },
                            )?;
                        }
                    }
                }
                NfsResult::Err(Nfsstat3::IO, _) => {
                    self.report.app_io_errors += 1;
                    self.client.start(self.now, Op::Commit)?;
                }
                NfsResult::Err(s, _) => return Err(format!("COMMIT: {}", s.name())),
            },
            (Op::Read { offset, len }, Res3::Read(r)) => match r {
                NfsResult::Ok(ok) => {
                    let got = ok.data.to_vec();
                    let want_len = len.min(self.client.model.len() - offset as usize);
                    let want = &self.client.model[offset as usize..offset as usize + want_len];
                    if got != want {
                        return Err(format!(
                            "READ {offset}+{len}: {} bytes differ from the model (got {} bytes)",
                            got.iter().zip(want).filter(|(a, b)| a != b).count(),
                            got.len()
                        ));
                    }
                    self.report.reads_checked_bytes += got.len() as u64;
                }
                NfsResult::Err(Nfsstat3::IO, _) => {
                    self.report.app_io_errors += 1;
                    self.client.start(self.now, Op::Read { offset, len })?;
                }
                NfsResult::Err(s, _) => return Err(format!("READ: {}", s.name())),
            },
            (op, res) => return Err(format!("{op:?} answered with {res:?}")),
        }
        Ok(())
    }

    /// The application: phases of WRITEs + COMMIT or of READs, each waiting for the last.
    fn app_step(&mut self) -> Result<bool, String> {
        let now = self.now;
        let c = &mut self.client;
        if !c.pending.is_empty() {
            return Ok(false);
        }
        match c.phase_state {
            PhaseState::Done => Ok(false),
            PhaseState::Writing => {
                // Every WRITE of the phase (and any resend) is answered: commit.
                c.phase_state = PhaseState::Committing;
                c.start(now, Op::Commit)?;
                Ok(true)
            }
            PhaseState::Committing => Ok(false), // a COMMIT is answered before this
            PhaseState::Committed => {
                // Invariant: after a COMMIT that left nothing to resend, the durable image is
                // the model.
                let durable = self.server.host.mem.durable_data(&self.server.host.file);
                let durable = durable.unwrap_or_default();
                if durable != c.model {
                    let diff = durable.iter().zip(&c.model).position(|(a, b)| a != b);
                    return Err(format!(
                        "phase {}: durable image differs from the model (first at {diff:?})",
                        c.phase
                    ));
                }
                c.phase += 1;
                c.phase_state = PhaseState::Start;
                Ok(true)
            }
            PhaseState::Reading => {
                c.phase += 1;
                c.phase_state = PhaseState::Start;
                Ok(true)
            }
            PhaseState::Start => {
                if c.phase >= self.sc.phases {
                    c.phase_state = PhaseState::Done;
                    return Ok(true);
                }
                let n = self.rng.gen_range(1..=self.sc.ops_per_phase_max);
                let writing = self.rng.gen_bool(0.5);
                let file = self.sc.file_bytes;
                // Writes of one phase do not overlap (they may complete in any order); reads
                // may.
                let slot = file.div_ceil(n).max(1);
                for i in 0..n {
                    let len = self.rng.gen_range(1..=self.sc.io_bytes_max);
                    if writing {
                        let start = i * slot;
                        if start >= file {
                            break;
                        }
                        let len = len.min(slot).min(file - start);
                        let offset = start + self.rng.gen_range(0..=slot.min(file - start) - len);
                        let data: Vec<u8> = (0..len).map(|_| self.rng.gen()).collect();
                        c.model[offset..offset + len].copy_from_slice(&data);
                        c.start(
                            now,
                            Op::Write {
                                offset: offset as u64,
                                data: data.into(),
                            },
                        )?;
                    } else {
                        let offset = self.rng.gen_range(0..file);
                        c.start(
                            now,
                            Op::Read {
                                offset: offset as u64,
                                len,
                            },
                        )?;
                    }
                }
                c.phase_state = if writing {
                    PhaseState::Writing
                } else {
                    PhaseState::Reading
                };
                Ok(true)
            }
        }
    }

    fn diagnose(&self, what: &str) -> String {
        format!(
            "{what} at {:?}: phase {} {:?}, {} calls pending ({} in slots), connected {}, \
             server down {}, {} handlers waiting, stalled {}",
            self.now - self.epoch,
            self.client.phase,
            self.client.phase_state,
            self.client.pending.len(),
            self.client.table.in_flight(),
            self.client.table.is_connected(),
            self.server.down_until.is_some(),
            self.server.host.waiting(),
            self.stalled_until.is_some(),
        )
    }

    fn report(mut self) -> FaultReport {
        let st = *self.client.table.stats();
        self.report.elapsed = self.now - self.epoch;
        self.report.retransmissions = st.retransmissions;
        self.report.calls_started = st.calls_started;
        self.report.calls_completed = st.calls_completed;
        let server = self.server.host.stats();
        self.report.server_wire_writes = server.wire_write_bytes.count.load(Relaxed);
        self.report.server_backend_writes = server.backend_write_bytes.count.load(Relaxed);
        if self.report.completed && st.calls_started != st.calls_completed {
            self.report.errors.push(format!(
                "{} calls started, {} completed",
                st.calls_started, st.calls_completed
            ));
        }
        self.report
    }
}

// =============================================================================================
// The application's operations and the client
// =============================================================================================

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PhaseState {
    Start,
    Writing,
    Committing,
    Committed,
    Reading,
    Done,
}

#[derive(Debug, Clone)]
enum Op {
    Write { offset: u64, data: Bytes },
    Commit,
    Read { offset: u64, len: usize },
}

impl Op {
    fn proc_(&self) -> u32 {
        match self {
            Op::Write { .. } => nfs3::proc_::WRITE,
            Op::Commit => nfs3::proc_::COMMIT,
            Op::Read { .. } => nfs3::proc_::READ,
        }
    }
}

struct FaultClient {
    /// The file's handle, as the server gave it.
    fh: NfsFh3,
    table: CallTable,
    rx: RecordDecoder,
    /// Connection number; bytes of older connections are ignored.
    conn: u64,
    /// When to (re)connect.
    connect_at: Option<Instant>,
    /// What the file must contain.
    model: Vec<u8>,
    log: UnstableLog,
    pending: HashMap<u32, Op>,
    phase: usize,
    phase_state: PhaseState,
    cred: OpaqueAuth,
}

impl FaultClient {
    fn start(&mut self, now: Instant, op: Op) -> Result<(), String> {
        let (args, class) = match &op {
            Op::Write { offset, data } => (
                Args3::Write(WriteArgs {
                    file: self.fh.clone(),
                    offset: *offset,
                    count: data.len() as u32,
                    stable: StableHow::UNSTABLE,
                    data: Payload::from_chunks(vec![data.clone()]),
                }),
                TimerClass::Write,
            ),
            Op::Commit => (
                Args3::Commit(CommitArgs {
                    file: self.fh.clone(),
                    offset: 0,
                    count: 0,
                }),
                TimerClass::Write,
            ),
            Op::Read { offset, len } => (
                Args3::Read(ReadArgs {
                    file: self.fh.clone(),
                    offset: *offset,
                    count: *len as u32,
                }),
                TimerClass::Read,
            ),
        };
        let proc_id = ProcId {
            prog: nfs3::PROGRAM,
            vers: nfs3::VERSION,
            proc_: op.proc_(),
        };
        let xid = self
            .table
            .start_call(
                now,
                proc_id,
                &self.cred,
                vec![sluice_xdr::to_bytes(&args)],
                class,
            )
            .map_err(|e| format!("{e}"))?;
        self.pending.insert(xid, op);
        Ok(())
    }
}

// =============================================================================================
// The server
// =============================================================================================

struct Job {
    conn: u64,
    xid: u32,
    cred: Credentials,
    args: Args3,
}

struct FaultServer {
    /// The real NFSv3 server over a MemFs holding the one file: what READs see, what
    /// write-behind holds, what COMMIT made durable; its verifier changes at every crash.
    host: Host,
    /// When the write-behind flusher wants its next step.
    flush_at: Option<Instant>,
    /// The connection it serves (the client's number), and its decoder.
    conn: u64,
    rx: RecordDecoder,
    /// Jobs waiting for their service time to pass, by then.
    jobs: BinaryHeap<Reverse<(Instant, u64)>>,
    /// Every job received and not answered (waiting, or its handler in progress).
    job_args: BTreeMap<u64, Job>,
    next_job: u64,
    down_until: Option<Instant>,
}

impl FaultServer {
    /// A crash: what was not committed is lost and the verifier changes (MemFs), the process
    /// starts afresh (a new engine: held writes and calls in progress are gone).
    fn restart(&mut self, up_at: Instant) {
        self.host.mem.crash();
        self.host.restart();
        self.flush_at = None;
        self.jobs.clear();
        self.job_args.clear();
        self.down_until = Some(up_at);
    }

    fn conn_lost(&mut self) {
        self.conn = u64::MAX; // nothing is served until the next accept
        self.rx = RecordDecoder::default();
    }

    fn accept(&mut self, conn: u64) {
        self.conn = conn;
        self.rx = RecordDecoder::default();
    }

    fn on_segment(&mut self, seg: WireSeg, now: Instant, sc: &FaultScenario, rng: &mut ChaCha8Rng) {
        if seg.conn != self.conn {
            return;
        }
        for p in seg.pieces {
            self.rx.push(p);
        }
        while let Ok(Some(rec)) = self.rx.next_record() {
            let CallParse::Call(call) = rpcs::parse_call(&rec) else {
                panic!("the simulated client sent something that is not a call");
            };
            let args = nfs3::decode_args(call.proc_(), &mut call.args(&rec))
                .expect("our own client's arguments decode");
            let id = self.next_job;
            self.next_job += 1;
            let at = now + sc.service_time_max.mul_f64(rng.gen_range(0.0..=1.0));
            self.jobs.push(Reverse((at, id)));
            self.job_args.insert(
                id,
                Job {
                    conn: self.conn,
                    xid: call.xid,
                    cred: call.cred.clone(),
                    args,
                },
            );
        }
    }

    /// Runs job `id` through the real handler: its reply if it finished at once (else it
    /// comes from [`Host::poll`]). A backend error drawn for it is injected into the MemFs for
    /// this call only: EIO on the READ, on the WRITE (its permission check, before anything is
    /// held), or on a COMMIT's fdatasync or, half the time, on the flush of the data it lands
    /// (then write-behind remembers the error, reports it at this COMMIT and changes the
    /// verifier).
    fn execute(
        &mut self,
        id: u64,
        now: Instant,
        sc: &FaultScenario,
        chaos: bool,
        rng: &mut ChaCha8Rng,
    ) -> Option<Vec<Bytes>> {
        let io_error = chaos && rng.gen_bool(sc.io_error_ratio);
        let job = &self.job_args[&id];
        if io_error {
            let op = match &job.args {
                Args3::Read(_) => memfs::Op::Read,
                Args3::Write(_) => memfs::Op::Write,
                Args3::Commit(_) if rng.gen_bool(0.5) => memfs::Op::Write,
                Args3::Commit(_) => memfs::Op::Commit,
                other => panic!("the simulated client sent {other:?}"),
            };
            let fault = Fault::new(op, FaultEffect::Fail(FsError::Io)).on(&self.host.file);
            self.host.mem.inject(fault.times(1));
        }
        let (xid, cred, args) = (job.xid, job.cred.clone(), job.args.clone());
        let reply = self.host.start(now, id, xid, cred, args);
        // A fault the call did not reach (nothing held to flush) must not hit a later one.
        self.host.mem.clear_faults();
        reply
    }
}

// =============================================================================================
// The wire
// =============================================================================================

struct WireSeg {
    conn: u64,
    pieces: Vec<Bytes>,
}

/// One direction: FIFO, each segment due at its time.
#[derive(Default)]
struct Wire {
    queue: VecDeque<(Instant, WireSeg)>,
    last_at: Option<Instant>,
}

impl Wire {
    fn push(&mut self, at: Instant, seg: WireSeg) {
        self.last_at = Some(at);
        self.queue.push_back((at, seg));
    }

    fn pop_due(&mut self, now: Instant) -> Option<WireSeg> {
        if self.queue.front().is_some_and(|(t, _)| *t <= now) {
            self.queue.pop_front().map(|(_, s)| s)
        } else {
            None
        }
    }

    fn next(&self) -> Option<Instant> {
        self.queue.front().map(|(t, _)| *t)
    }

    fn clear(&mut self) {
        self.queue.clear();
    }
}
