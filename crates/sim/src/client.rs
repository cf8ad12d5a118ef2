//! The simulated NFS client: application readers, the readahead engine, a page cache and the
//! real call table, speaking real NFSv3 READ/GETATTR messages.
//!
//! ```text
//!  reader ─read(off,len)─► FileReadahead::on_read ─► ReadPlan{fetch, discard}
//!    ▲                                                 │ minus what is cached or in flight
//!    │ bytes checked against the file                  ▼
//!  DataCache ◄── READ3resok data ◄── handle_reply ◄─ CallTable ◄─ start_call(READ3args) ◄─ backlog
//!                     │ on_fetch_complete(rtt)            │ poll_transmit
//!                     ▼                                   ▼
//!               FileReadahead                  frame + StreamTx (TCP) / datagram (UDP) ─► link
//! ```
//!
//! The client honours the readahead contract of `sluice_engine::readahead`: it calls `on_read`
//! for every application read, issues the returned fetches minus what it already holds or has
//! requested, drops discarded ranges, and reports every completed READ. If a waiting reader
//! still needs bytes that are neither cached nor requested after that (which the engine's
//! contract says cannot happen) the client fetches them itself and counts them in
//! `gap_fetch_bytes`, so that an engine bug shows up as a number rather than a hang.

use crate::cache::{DataCache, RangeSet};
use crate::content::Content;
use crate::pipe::{send_datagram, Segment, StreamTx};
use crate::scenario::{Pattern, Scenario, WindowEvent};
use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_engine::readahead::{Budget, FileReadahead, ReadaheadConfig};
use sluice_link::model::LinkDirection;
use sluice_rpc::client::{CallTable, CallTableConfig, Completed, Event, ProcId, Transport};
use sluice_rpc::record::{self, RecordDecoder};
use sluice_rpc::rtt::TimerClass;
use sluice_xdr::nfs3::{self, GetattrArgs, NfsFh3, NfsResult, ReadArgs, Res3};
use sluice_xdr::rpc::{AuthSys, OpaqueAuth};
use sluice_xdr::{Pack, Writer};
use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

/// Who asked for a READ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// The readahead engine's plan.
    Engine,
    /// The client's safety net (see the module docs).
    Gap,
    /// The pipelined workload, without readahead.
    Pipelined,
}

#[derive(Debug, Clone, Copy)]
enum Request {
    Read {
        offset: u64,
        len: u64,
        origin: Origin,
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
    pub ra: FileReadahead,
    budget: Budget,
    workload: Workload,
    readers: Vec<Reader>,
    cache: DataCache,
    in_flight: RangeSet,
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
    pub fn new(sc: &Scenario, epoch: Instant, content: Content, fh: NfsFh3) -> Self {
        let config = match sc.transport {
            Transport::Tcp => CallTableConfig::tcp(),
            Transport::Udp => CallTableConfig::udp(),
        };
        let xid_seed = (sc.seed as u32) ^ 0x51ce_0000;
        let ra = FileReadahead::new(ReadaheadConfig {
            mode: sc.readahead,
            rsize_bytes: sc.rsize_bytes,
            trace_events_max: 1 << 16,
            ..ReadaheadConfig::default()
        });
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
            ra,
            budget: Budget::new(sc.budget_bytes),
            workload,
            readers,
            cache: DataCache::default(),
            in_flight: RangeSet::default(),
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
                if let Some((lo, hi)) = self.readers[i].waiting {
                    if self.cache.covers(lo, hi) {
                        self.consume(i, lo, hi);
                        changed = true;
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
                return progress;
            }
            progress = true;
        }
    }

    fn app_read(&mut self, now: Instant, i: usize, off: u64, len: u64) {
        let end = (off + len).min(self.file_bytes);
        let r = &self.readers[i];
        if r.mark.is_none() && r.consumed >= r.warmup {
            // Bytes already cached ahead of the reader arrived before the mark: count them as
            // consumed already, so that the rate measures what crosses the link afterwards.
            let ahead = self.cache.bytes_in(off, r.source_end(self.file_bytes));
            let r = &mut self.readers[i];
            r.mark = Some((now, r.consumed + ahead));
        }
        let r = &mut self.readers[i];
        r.waiting = Some((off, end));
        self.stats.bytes_asked_by_app += end - off;
        let plan = self
            .ra
            .on_read(now, off, len, self.file_bytes, &mut self.budget);
        for d in &plan.discard {
            self.cache.take(d.offset, d.end());
        }
        for f in &plan.fetch {
            self.fetch_missing(f.offset, f.offset + f.len, Origin::Engine);
        }
        // The safety net, for every waiting reader (a discard may concern another one).
        for j in 0..self.readers.len() {
            if let Some((lo, hi)) = self.readers[j].waiting {
                let n = self.fetch_missing(lo, hi, Origin::Gap);
                self.stats.gap_fetch_bytes += n;
            }
        }
        self.collect_trace();
    }

    fn consume(&mut self, i: usize, lo: u64, hi: u64) {
        let pieces = self.cache.take(lo, hi);
        let mut at = lo;
        for (off, data) in pieces {
            debug_assert_eq!(off, at, "cache covered the range");
            self.check(off, &data);
            at = off + data.len() as u64;
        }
        debug_assert_eq!(at, hi);
        self.stats.bytes_read_by_app += hi - lo;
        let r = &mut self.readers[i];
        r.consumed += hi - lo;
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

    /// Queues READs for the parts of `[lo, hi)` neither cached nor requested; returns the bytes.
    fn fetch_missing(&mut self, lo: u64, hi: u64, origin: Origin) -> u64 {
        let hi = hi.min(self.file_bytes);
        let mut queued = 0;
        for (a, b) in self.cache.gaps(lo, hi) {
            for (c, d) in self.in_flight.gaps(a, b) {
                let mut off = c;
                while off < d {
                    let len = (d - off).min(self.rsize);
                    self.backlog.push_back(Request::Read {
                        offset: off,
                        len,
                        origin,
                    });
                    off += len;
                }
                self.in_flight.insert(c, d);
                queued += d - c;
            }
        }
        queued
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
                    self.backlog.push_back(Request::Read {
                        offset: *next_offset,
                        len,
                        origin: Origin::Pipelined,
                    });
                    self.in_flight.insert(*next_offset, *next_offset + len);
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
                Request::Read { offset, len, .. } => {
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
                return;
            }
        };
        match req {
            Request::Read {
                offset,
                len,
                origin,
            } => {
                let res = nfs3::decode_res(nfs3::proc_::READ, &mut reply.results());
                let ok = match res {
                    Ok(Res3::Read(NfsResult::Ok(ok))) => ok,
                    other => {
                        self.stats
                            .errors
                            .push(format!("READ {offset}+{len}: bad result {other:?}"));
                        return;
                    }
                };
                if u64::from(ok.count) != len || ok.data.len() as u64 != len {
                    self.stats.errors.push(format!(
                        "READ {offset}+{len}: got count {} with {} bytes",
                        ok.count,
                        ok.data.len()
                    ));
                }
                self.in_flight.remove(offset, offset + len);
                self.stats.bytes_fetched += len;
                *self.stats.read_sizes.entry(len).or_default() += 1;
                let rtt = c.rtt_sample.unwrap_or(c.elapsed);
                if origin != Origin::Pipelined {
                    self.ra.on_fetch_complete(now, offset, len, rtt);
                    self.collect_trace();
                }
                let mut at = offset;
                for chunk in ok.data.into_chunks() {
                    let n = chunk.len() as u64;
                    if origin == Origin::Pipelined {
                        self.check(at, &chunk);
                        self.stats.bytes_read_by_app += n;
                        self.stats.bytes_asked_by_app += n;
                        if let Workload::Pipelined { consumed, .. } = &mut self.workload {
                            *consumed += n;
                        }
                    } else {
                        self.cache.insert(at, chunk);
                    }
                    at += n;
                }
                self.stats.cache_bytes_peak = self.stats.cache_bytes_peak.max(self.cache.bytes());
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

    fn collect_trace(&mut self) {
        for ev in self.ra.take_trace() {
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

fn encode<T: Pack>(v: &T) -> Vec<Bytes> {
    let mut w = Writer::new();
    v.pack(&mut w);
    w.into_segments()
}
