//! The simulated NFS client: application readers over the client's real read core
//! ([`sluice_engine::readcore`], the code sluice-client's `read.rs` drives with tokio), the real
//! call table, speaking real NFSv3 READ/GETATTR messages.
//!
//! ```text
//!  reader ─read(off,len)─► ReadCore::begin_read ─► FileReadahead ─► plan: fetch, discard
//!    ▲                         │ cache, READs in flight, waiters, generations (pure)
//!    │ poll_read: Ready(bytes) │ next_reads(): READ tickets within the in-flight cap
//!    │ checked against the file▼
//!  ReadCore::on_reply ◄── READ3resok ◄── handle_reply ◄─ CallTable ◄─ start_call(READ3args) ◄─ backlog
//!    (data, eof, attributes        │ poll_transmit
//!     as a DataVersion, rtt)       ▼
//!                       frame + StreamTx (TCP) / datagram (UDP) ─► link
//! ```
//!
//! The driver does what the tokio one does: `begin_read` per application read, the core's
//! READs sent as slots allow, every reply (or failure) handed back with its RTT sample (none
//! for a retransmitted call), the same in-flight cap (a fixed window's size) and the same
//! attributes-to-version mapping (NFSv3: ctime as the change counter). If a waiting reader
//! needs bytes that are neither cached nor requested (which the engine's contract says cannot
//! happen) the core's safety net fetches them and counts them (`safety_net_bytes`, reported as
//! `gap_fetch_bytes`), so that an engine bug shows up as a number rather than a hang.
//!
//! The pipelined and GETATTR workloads (no readahead) bypass the core: they keep the slot table
//! full by themselves.

use crate::content::Content;
use crate::pipe::{send_datagram, Segment, StreamTx};
use crate::scenario::{Pattern, Scenario, WindowEvent};
use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_engine::readahead::{Budget, ByteRange, FileReadahead, ReadaheadConfig, ReadaheadMode};
use sluice_engine::readcore::{DataVersion, ReadCore, ReadData, ReadPoll, ReadTicket};
use sluice_link::model::LinkDirection;
use sluice_rpc::client::{CallTable, CallTableConfig, Completed, Event, ProcId, Transport};
use sluice_rpc::record::{self, RecordDecoder};
use sluice_rpc::rtt::TimerClass;
use sluice_xdr::nfs3::{self, Fattr3, GetattrArgs, NfsFh3, NfsResult, Nfstime3, ReadArgs, Res3};
use sluice_xdr::rpc::{AuthSys, OpaqueAuth};
use sluice_xdr::{Pack, Writer};
use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

#[derive(Debug, Clone, Copy)]
enum Request {
    /// A READ of the read core.
    Read(ReadTicket),
    /// A READ of the pipelined workload (no readahead, no core).
    Pipelined {
        offset: u64,
        len: u64,
    },
    Getattr,
}

/// Where a reader's next read comes from.
enum Source {
    Sequential {
        pos: u64,
        end: u64,
    },
    Random {
        left: u64,
        rng: Box<ChaCha8Rng>,
        aligned: bool,
    },
}

struct Reader {
    source: Source,
    read_bytes: u64,
    /// The core's waiter id and the offset of the read it waits for.
    waiting: Option<(u64, u64)>,
    consumed: u64,
    warmup: u64,
    mark: Option<(Instant, u64)>,
    done_at: Option<Instant>,
}

impl Reader {
    fn next_read(&mut self, file_bytes: u64) -> Option<(u64, u64)> {
        match &mut self.source {
            Source::Sequential { pos, end } => {
                if *pos >= *end {
                    return None;
                }
                let len = self.read_bytes.min(*end - *pos);
                let off = *pos;
                *pos += len;
                Some((off, len))
            }
            Source::Random { left, rng, aligned } => {
                if *left == 0 {
                    return None;
                }
                *left -= 1;
                let off = if *aligned {
                    let blocks = file_bytes.div_ceil(self.read_bytes);
                    rng.gen_range(0..blocks) * self.read_bytes
                } else {
                    rng.gen_range(0..file_bytes)
                };
                Some((off, self.read_bytes.min(file_bytes - off)))
            }
        }
    }

    /// End of the range this reader reads from.
    fn source_end(&self, file_bytes: u64) -> u64 {
        match self.source {
            Source::Sequential { end, .. } => end,
            Source::Random { .. } => file_bytes,
        }
    }

    /// Bytes per second after the warm-up mark.
    fn rate_after_warmup(&self) -> Option<f64> {
        let (t, b) = self.mark?;
        let done = self.done_at?;
        let secs = done.saturating_duration_since(t).as_secs_f64();
        (secs > 0.0).then(|| self.consumed.saturating_sub(b) as f64 / secs)
    }
}

enum Workload {
    Readers,
    Pipelined { next_offset: u64, consumed: u64 },
    Getattr { left: u64, done: u64, total: u64 },
}

/// Counters and findings of the client.
#[derive(Debug, Default)]
pub struct ClientStats {
    pub bytes_read_by_app: u64,
    pub bytes_asked_by_app: u64,
    pub bytes_fetched: u64,
    pub read_sizes: BTreeMap<u64, u64>,
    pub gap_fetch_bytes: u64,
    pub cache_bytes_peak: u64,
    pub data_errors: u64,
    pub reconnects: u64,
    pub trace: Vec<WindowEvent>,
    pub trace_dropped: u64,
    pub errors: Vec<String>,
}

pub struct Client {
    transport: Transport,
    epoch: Instant,
    rsize: u64,
    file_bytes: u64,
    fh: NfsFh3,
    cred: OpaqueAuth,
    pub table: CallTable,
    conn: u64,
    rx: RecordDecoder,
    pub tx: StreamTx,
    core: ReadCore<String>,
    budget: Budget,
    workload: Workload,
    readers: Vec<Reader>,
    flights: BTreeMap<u32, Request>,
    backlog: VecDeque<Request>,
    content: Content,
    trace_events_max: usize,
    pub stats: ClientStats,
}

const NFS_READ: ProcId = ProcId {
    prog: nfs3::PROGRAM,
    vers: nfs3::VERSION,
    proc_: nfs3::proc_::READ,
};
const NFS_GETATTR: ProcId = ProcId {
    proc_: nfs3::proc_::GETATTR,
    ..NFS_READ
};

impl Client {
    /// A client that opened the file `fh` and saw it at `version`.
    pub fn new(
        sc: &Scenario,
        epoch: Instant,
        content: Content,
        fh: NfsFh3,
        version: DataVersion,
    ) -> Self {
        let config = match sc.transport {
            Transport::Tcp => CallTableConfig::tcp(),
            Transport::Udp => CallTableConfig::udp(),
        };
        let xid_seed = (sc.seed as u32) ^ 0x51ce_0000;
        let ra = ReadaheadConfig {
            mode: sc.readahead,
            rsize_bytes: sc.rsize_bytes,
            trace_events_max: 1 << 16,
            ..ReadaheadConfig::default()
        };
        // As sluice-client's read driver: a fixed window caps the bytes on the wire.
        let wire_bytes_cap = match sc.readahead {
            ReadaheadMode::Fixed(b) => b,
            _ => u64::MAX,
        };
        let (workload, readers) = Self::workload(sc);
        Client {
            transport: sc.transport,
            epoch,
            rsize: sc.rsize_bytes,
            file_bytes: sc.file_bytes,
            fh,
            cred: AuthSys {
                stamp: 1,
                machine_name: Bytes::from_static(b"sim-client"),
                uid: 1000,
                gid: 1000,
                gids: vec![],
            }
            .to_opaque_auth(),
            table: CallTable::new(config, xid_seed),
            conn: 0,
            rx: RecordDecoder::default(),
            tx: StreamTx::default(),
            core: ReadCore::new(ra, wire_bytes_cap, version, epoch),
            budget: Budget::new(sc.budget_bytes),
            workload,
            readers,
            flights: BTreeMap::new(),
            backlog: VecDeque::new(),
            content,
            trace_events_max: sc.trace_events_max,
            stats: ClientStats::default(),
        }
    }

    fn workload(sc: &Scenario) -> (Workload, Vec<Reader>) {
        let reader = |source, read_bytes| Reader {
            source,
            read_bytes,
            waiting: None,
            consumed: 0,
            warmup: sc.warmup(),
            mark: None,
            done_at: None,
        };
        let rng = |salt: u64| Box::new(ChaCha8Rng::seed_from_u64(sc.seed ^ salt));
        let size = sc.file_bytes;
        match sc.pattern {
            Pattern::Sequential => (
                Workload::Readers,
                vec![reader(
                    Source::Sequential { pos: 0, end: size },
                    sc.read_bytes,
                )],
            ),
            Pattern::TwoInterleaved => {
                let half = size / 2;
                (
                    Workload::Readers,
                    vec![
                        reader(Source::Sequential { pos: 0, end: half }, sc.read_bytes),
                        reader(
                            Source::Sequential {
                                pos: half,
                                end: size,
                            },
                            sc.read_bytes,
                        ),
                    ],
                )
            }
            Pattern::Random4k { reads } => (
                Workload::Readers,
                vec![reader(
                    Source::Random {
                        left: reads,
                        rng: rng(0x4b),
                        aligned: true,
                    },
                    4096,
                )],
            ),
            Pattern::RandomUnaligned { reads } => (
                Workload::Readers,
                vec![reader(
                    Source::Random {
                        left: reads,
                        rng: rng(0x0a),
                        aligned: false,
                    },
                    sc.read_bytes,
                )],
            ),
            Pattern::Pipelined => (
                Workload::Pipelined {
                    next_offset: 0,
                    consumed: 0,
                },
                vec![],
            ),
            Pattern::Getattr { calls } => (
                Workload::Getattr {
                    left: calls,
                    done: 0,
                    total: calls,
                },
                vec![],
            ),
        }
    }

    // ---- inputs ------------------------------------------------------------------------------

    /// A segment from the server arrived.
    pub fn on_segment(&mut self, now: Instant, seg: Segment) {
        match self.transport {
            Transport::Udp => self.on_reply(now, seg.pieces),
            Transport::Tcp => {
                if seg.conn != self.conn {
                    return; // a reply on a connection we have closed
                }
                for p in seg.pieces {
                    self.rx.push(p);
                }
                loop {
                    match self.rx.next_record() {
                        Ok(Some(rec)) => self.on_reply(now, rec),
                        Ok(None) => break,
                        Err(e) => panic!("client record decoder failed: {e}"),
                    }
                }
            }
        }
    }

    /// Runs the timers, the application and the transmit path at `now`. Returns whether
    /// anything happened.
    pub fn step(&mut self, now: Instant, link: &mut LinkDirection<Segment>) -> bool {
        let mut progress = false;
        if self.table.poll_timeout().is_some_and(|t| t <= now) {
            self.table.handle_timeout(now);
            progress = true;
        }
        progress |= self.handle_events(now);
        progress |= self.run_readers(now);
        progress |= self.generate();
        progress |= self.start_calls(now);
        while let Some(t) = self.table.poll_transmit(now) {
            progress = true;
            match self.transport {
                Transport::Tcp => self
                    .tx
                    .push(record::frame(t.segments, record::MAX_FRAGMENT_BYTES)),
                // A lost datagram is counted by the link; the call table's timer recovers it.
                Transport::Udp => {
                    send_datagram(now, link, t.segments);
                }
            }
        }
        progress |= self.handle_events(now);
        if self.transport == Transport::Tcp {
            progress |= self.tx.pump(now, link, self.conn);
        }
        progress
    }

    /// When the client next has something to do on its own.
    pub fn next_wake(&self, link: &LinkDirection<Segment>) -> Option<Instant> {
        let room = if self.tx.is_blocked() {
            link.room_timeout()
        } else {
            None
        };
        self.table.poll_timeout().into_iter().chain(room).min()
    }

    /// The application is done.
    pub fn finished(&self) -> bool {
        match &self.workload {
            Workload::Readers => self.readers.iter().all(|r| r.done_at.is_some()),
            Workload::Pipelined { consumed, .. } => *consumed >= self.file_bytes,
            Workload::Getattr { done, total, .. } => done >= total,
        }
    }

    /// No call is outstanding.
    pub fn drained(&self) -> bool {
        self.flights.is_empty() && self.backlog.is_empty() && self.table.in_flight() == 0
    }

    /// Calls started and not completed.
    pub fn outstanding_calls(&self) -> usize {
        self.flights.len()
    }

    /// The read core's readahead engine (window, stats).
    pub fn readahead(&self) -> &FileReadahead {
        self.core.readahead()
    }

    /// The read core's counters.
    pub fn read_core_stats(&self) -> &sluice_engine::readcore::ReadCoreStats {
        self.core.stats()
    }

    /// Per-reader rates after warm-up.
    pub fn reader_rates(&self) -> Vec<Option<f64>> {
        self.readers.iter().map(Reader::rate_after_warmup).collect()
    }

    // ---- the application -----------------------------------------------------------------------

    fn run_readers(&mut self, now: Instant) -> bool {
        let mut progress = false;
        loop {
            let mut changed = false;
            for i in 0..self.readers.len() {
                if let Some((waiter, offset)) = self.readers[i].waiting {
                    match self.core.poll_read(waiter) {
                        ReadPoll::Wait => {}
                        ReadPoll::Ready(data) => {
                            self.core.end_read(waiter);
                            self.consume(i, offset, data);
                            changed = true;
                        }
                        ReadPoll::Failed(e) => {
                            // What the application would see as EIO: recorded, and this
                            // reader stops (the run then fails on its errors).
                            self.core.end_read(waiter);
                            self.stats.errors.push(format!("read at {offset}: {e}"));
                            let r = &mut self.readers[i];
                            r.waiting = None;
                            r.done_at = Some(now);
                            changed = true;
                        }
                    }
                }
                let r = &mut self.readers[i];
                if r.waiting.is_none() && r.done_at.is_none() {
                    match r.next_read(self.file_bytes) {
                        None => r.done_at = Some(now),
                        Some((off, len)) => self.app_read(now, i, off, len),
                    }
                    changed = true;
                }
            }
            if !changed {
                break;
            }
            progress = true;
        }
        self.stats.gap_fetch_bytes = self.core.stats().safety_net_bytes;
        progress | self.queue_reads()
    }

    fn app_read(&mut self, now: Instant, i: usize, off: u64, len: u64) {
        let end = (off + len).min(self.file_bytes);
        let r = &self.readers[i];
        if r.mark.is_none() && r.consumed >= r.warmup {
            // Bytes already cached ahead of the reader arrived before the mark: count them as
            // consumed already, so that the rate measures what crosses the link afterwards.
            let ahead = self
                .core
                .cached_bytes_in(off, r.source_end(self.file_bytes));
            let r = &mut self.readers[i];
            r.mark = Some((now, r.consumed + ahead));
        }
        self.stats.bytes_asked_by_app += end.saturating_sub(off);
        // None: nothing to read (past the end); the reader moves on.
        self.readers[i].waiting = self
            .core
            .begin_read(now, off, len, &mut self.budget)
            .map(|(waiter, _)| (waiter, off));
        self.collect_trace();
    }

    fn consume(&mut self, i: usize, offset: u64, data: Vec<Bytes>) {
        let mut at = offset;
        for piece in data {
            self.check(at, &piece);
            at += piece.len() as u64;
        }
        let n = at - offset;
        self.stats.bytes_read_by_app += n;
        let r = &mut self.readers[i];
        r.consumed += n;
        r.waiting = None;
    }

    fn check(&mut self, off: u64, data: &[u8]) {
        if let Some(k) = self.content.first_mismatch(off, data) {
            self.stats.data_errors += 1;
            if self.stats.errors.len() < 32 {
                self.stats
                    .errors
                    .push(format!("wrong byte at file offset {}", off + k as u64));
            }
        }
    }

    /// The core's READs that its in-flight cap allows now, onto the backlog.
    fn queue_reads(&mut self) -> bool {
        let tickets = self.core.next_reads();
        let any = !tickets.is_empty();
        self.backlog.extend(tickets.into_iter().map(Request::Read));
        any
    }

    /// The pipelined and GETATTR workloads keep the slot table full.
    fn generate(&mut self) -> bool {
        let slots = self.table.config().max_in_flight;
        let busy = self.table.in_flight() + self.table.queued() + self.backlog.len();
        let mut room = slots.saturating_sub(busy);
        let mut progress = false;
        match &mut self.workload {
            Workload::Readers => {}
            Workload::Pipelined { next_offset, .. } => {
                while room > 0 && *next_offset < self.file_bytes {
                    let len = (self.file_bytes - *next_offset).min(self.rsize);
                    self.backlog.push_back(Request::Pipelined {
                        offset: *next_offset,
                        len,
                    });
                    *next_offset += len;
                    room -= 1;
                    progress = true;
                }
            }
            Workload::Getattr { left, .. } => {
                while room > 0 && *left > 0 {
                    self.backlog.push_back(Request::Getattr);
                    *left -= 1;
                    room -= 1;
                    progress = true;
                }
            }
        }
        progress
    }

    // ---- the transport -----------------------------------------------------------------------

    fn start_calls(&mut self, now: Instant) -> bool {
        let mut progress = false;
        while let Some(&req) = self.backlog.front() {
            let (proc_id, class, args) = match req {
                Request::Read(ReadTicket {
                    range: ByteRange { offset, len },
                    ..
                })
                | Request::Pipelined { offset, len } => {
                    let a = ReadArgs {
                        file: self.fh.clone(),
                        offset,
                        count: len as u32,
                    };
                    (NFS_READ, TimerClass::Read, encode(&a))
                }
                Request::Getattr => {
                    let a = GetattrArgs {
                        object: self.fh.clone(),
                    };
                    (NFS_GETATTR, TimerClass::Getattr, encode(&a))
                }
            };
            match self.table.start_call(now, proc_id, &self.cred, args, class) {
                Ok(xid) => {
                    let clash = self.flights.insert(xid, req);
                    assert!(clash.is_none(), "xid {xid} reused while outstanding");
                    self.backlog.pop_front();
                    progress = true;
                }
                Err(_busy) => break,
            }
        }
        progress
    }

    fn handle_events(&mut self, now: Instant) -> bool {
        let mut progress = false;
        while let Some(ev) = self.table.poll_event() {
            progress = true;
            match ev {
                Event::Reconnect => {
                    // A new connection: what the old one held is gone on both sides.
                    self.stats.reconnects += 1;
                    self.conn += 1;
                    self.rx = RecordDecoder::default();
                    self.tx.clear();
                    self.table.handle_connected(now);
                }
                Event::NotResponding | Event::Ok => {}
                Event::Failed { xid, error } => {
                    self.stats
                        .errors
                        .push(format!("call {xid} failed: {error}"));
                }
            }
        }
        progress
    }

    fn on_reply(&mut self, now: Instant, rec: Vec<Bytes>) {
        if let Some(c) = self.table.handle_reply(now, rec) {
            self.complete(now, c);
        }
    }

    fn complete(&mut self, now: Instant, c: Completed) {
        let Some(req) = self.flights.remove(&c.xid) else {
            self.stats.errors.push(format!(
                "completion of xid {} that was not outstanding",
                c.xid
            ));
            return;
        };
        let reply = match c.result {
            Ok(r) => r,
            Err(e) => {
                self.stats.errors.push(format!("xid {}: {e}", c.xid));
                if let Request::Read(ticket) = req {
                    let e = format!("{e}");
                    self.core_reply(now, ticket, Err(e), None);
                }
                return;
            }
        };
        match req {
            Request::Read(ticket) => {
                let ByteRange { offset, len } = ticket.range;
                let res = match self.decode_read(offset, len, &reply) {
                    Ok(ok) => {
                        self.stats.bytes_fetched += len;
                        *self.stats.read_sizes.entry(len).or_default() += 1;
                        Ok(ReadData {
                            data: ok.data.into_chunks(),
                            eof: ok.eof,
                            version: ok.file_attributes.as_ref().map(version_of),
                        })
                    }
                    Err(e) => Err(e),
                };
                self.core_reply(now, ticket, res, c.rtt_sample);
            }
            Request::Pipelined { offset, len } => {
                let Ok(ok) = self.decode_read(offset, len, &reply) else {
                    return;
                };
                self.stats.bytes_fetched += len;
                *self.stats.read_sizes.entry(len).or_default() += 1;
                let mut at = offset;
                for chunk in ok.data.into_chunks() {
                    let n = chunk.len() as u64;
                    self.check(at, &chunk);
                    self.stats.bytes_read_by_app += n;
                    self.stats.bytes_asked_by_app += n;
                    if let Workload::Pipelined { consumed, .. } = &mut self.workload {
                        *consumed += n;
                    }
                    at += n;
                }
            }
            Request::Getattr => {
                match nfs3::decode_res(nfs3::proc_::GETATTR, &mut reply.results()) {
                    Ok(Res3::Getattr(NfsResult::Ok(ok)))
                        if ok.obj_attributes.size == self.file_bytes => {}
                    other => self
                        .stats
                        .errors
                        .push(format!("GETATTR: bad result {other:?}")),
                }
                if let Workload::Getattr { done, .. } = &mut self.workload {
                    *done += 1;
                }
            }
        }
    }

    /// A READ3 result, or the error recorded in the stats (and returned for the core).
    fn decode_read(
        &mut self,
        offset: u64,
        len: u64,
        reply: &sluice_rpc::client::Reply,
    ) -> Result<nfs3::ReadResOk, String> {
        let ok = match nfs3::decode_res(nfs3::proc_::READ, &mut reply.results()) {
            Ok(Res3::Read(NfsResult::Ok(ok))) => ok,
            other => {
                let e = format!("READ {offset}+{len}: bad result {other:?}");
                self.stats.errors.push(e.clone());
                return Err(e);
            }
        };
        if u64::from(ok.count) != len || ok.data.len() as u64 != len {
            self.stats.errors.push(format!(
                "READ {offset}+{len}: got count {} with {} bytes",
                ok.count,
                ok.data.len()
            ));
        }
        Ok(ok)
    }

    /// Hands a READ's outcome to the core, as sluice-client's driver does.
    fn core_reply(
        &mut self,
        now: Instant,
        ticket: ReadTicket,
        res: Result<ReadData, String>,
        rtt: Option<std::time::Duration>,
    ) {
        self.core
            .on_reply(now, ticket, res, rtt, &mut self.budget, |offset| {
                format!("server returned an empty READ at offset {offset} without EOF")
            });
        self.collect_trace();
        let cached = self.core.cached_bytes_in(0, u64::MAX);
        self.stats.cache_bytes_peak = self.stats.cache_bytes_peak.max(cached);
    }

    fn collect_trace(&mut self) {
        for ev in self.core.readahead_mut().take_trace() {
            if self.stats.trace.len() < self.trace_events_max {
                self.stats.trace.push(WindowEvent {
                    at: ev.at.saturating_duration_since(self.epoch),
                    stream: ev.stream,
                    kind: ev.kind,
                });
            } else {
                self.stats.trace_dropped += 1;
            }
        }
    }
}

/// A file's data version from its NFSv3 attributes, as sluice-client maps them (ctime as the
/// change counter).
fn version_of(a: &Fattr3) -> DataVersion {
    let ns = |t: Nfstime3| u64::from(t.seconds) * 1_000_000_000 + u64::from(t.nseconds);
    DataVersion {
        size: a.size,
        mtime_ns: ns(a.mtime),
        change: ns(a.ctime),
    }
}

fn encode<T: Pack>(v: &T) -> Vec<Bytes> {
    let mut w = Writer::new();
    v.pack(&mut w);
    w.into_segments()
}
