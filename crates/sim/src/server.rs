//! The read world's NFSv3 server: the real handlers ([`Host`]) behind the simulated link, with
//! a modelled service time and bounded concurrency around them.
//!
//! ```text
//!  segments ─► RecordDecoder (TCP) ─► parse_call ─► decode_args ─► waiting ─► in service
//!                                       │ not a call: reply_for          (≤ concurrency,
//!                                       ▼                                 service_time each)
//!                               reply builders ◄── Host: Nfs3::handle over MemFs ◄───────┘
//!                                       │            (a handler that must wait keeps its slot)
//!                                       └─► frame + StreamTx (TCP) / one datagram (UDP) ─► link
//! ```
//!
//! The service time is the cost model of a server (a disk, a CPU); the handlers add none, as
//! virtual time does not pass while they run. The file is the scenario's pattern
//! ([`Content`]) written into the MemFs, so every byte the application receives is still
//! checked; READs copy it into pooled chunks as production's chunk path does. Calls are
//! executed as often as they arrive (no duplicate request cache: READ and GETATTR are
//! idempotent, and counting re-executions is part of what the simulator measures).

use crate::content::Content;
use crate::host::Host;
use crate::pipe::{send_datagram, Segment, StreamTx};
use crate::scenario::{Scenario, ServerOrder};
use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_engine::pool::CHUNK_BYTES;
use sluice_link::model::LinkDirection;
use sluice_rpc::client::Transport;
use sluice_rpc::record::{self, RecordDecoder};
use sluice_rpc::server::{self as rpcs, CallParse, Credentials};
use sluice_server::io::IoConfig;
use sluice_server::Transport as ServerTransport;
use sluice_xdr::nfs3::{self, Args3, NfsFh3};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

/// Counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerStats {
    pub calls: u64,
    pub not_calls: u64,
    pub waiting_peak: usize,
}

#[derive(Debug)]
struct Job {
    conn: u64,
    xid: u32,
    cred: Credentials,
    args: Args3,
}

pub struct Server {
    transport: Transport,
    host: Host,
    service_time: Duration,
    concurrency: usize,
    order: ServerOrder,
    /// Picks among waiting calls for [`ServerOrder::Random`].
    rng: ChaCha8Rng,
    /// Current TCP connection and its decoder / send buffer.
    conn: u64,
    rx: RecordDecoder,
    pub tx: StreamTx,
    waiting: VecDeque<Job>,
    /// Jobs in service, by completion time then arrival.
    in_service: BinaryHeap<Reverse<(Instant, u64)>>,
    /// Jobs in service or whose handler is waiting (they keep their slot).
    jobs: BTreeMap<u64, Job>,
    /// Handlers in progress after their service time: job id → connection.
    running: BTreeMap<u64, u64>,
    next_job: u64,
    /// When the write-behind flusher wants its next step.
    flush_at: Option<Instant>,
    /// Replies that need no service (answers to records that were not calls).
    ready: VecDeque<(u64, Vec<Bytes>)>,
    /// UDP replies that could not be sent: counted here (lost in the client's eyes).
    pub dropped_replies: u64,
    pub stats: ServerStats,
}

impl Server {
    /// The scenario's server (its transport, file, service time, concurrency and order).
    pub fn new(sc: &Scenario, content: &Content, epoch: Instant) -> Self {
        let (transport, file_bytes) = (sc.transport, sc.file_bytes);
        let server_transport = match transport {
            Transport::Tcp => ServerTransport::Tcp,
            Transport::Udp => ServerTransport::Udp,
        };
        // READ replies are slices of pooled chunks and the client's cache keeps them: room for
        // the whole file several times over (a chunk is allocated only when first used), so a
        // READ never waits for the pool, which would block the thread in real time.
        let chunks = usize::try_from(file_bytes.div_ceil(CHUNK_BYTES as u64)).expect("fits");
        let mut io = IoConfig::default();
        io.pool.chunks_max = io.pool.chunks_max.max(4 * chunks);
        let host = Host::new(
            &content.slices(0, file_bytes),
            false,
            epoch,
            server_transport,
            io,
        );
        Server {
            transport,
            host,
            service_time: sc.server_service_time,
            concurrency: sc.server_concurrency.unwrap_or(usize::MAX).max(1),
            order: sc.server_order,
            rng: ChaCha8Rng::seed_from_u64(sc.seed ^ 0x5e7e_0bde),
            conn: 0,
            rx: RecordDecoder::default(),
            tx: StreamTx::default(),
            waiting: VecDeque::new(),
            in_service: BinaryHeap::new(),
            jobs: BTreeMap::new(),
            running: BTreeMap::new(),
            next_job: 0,
            flush_at: None,
            ready: VecDeque::new(),
            dropped_replies: 0,
            stats: ServerStats::default(),
        }
    }

    /// The file's handle, as the server hands it out.
    pub fn file_handle(&self) -> NfsFh3 {
        self.host.file_handle()
    }

    /// The file's data version, as a client sees it at open.
    pub fn file_version(&self) -> sluice_engine::readcore::DataVersion {
        self.host.file_version()
    }

    /// The real server's counters.
    pub fn server_stats(&self) -> &sluice_server::stats::Stats {
        self.host.stats()
    }

    /// A segment from the client arrived.
    pub fn on_segment(&mut self, seg: Segment) {
        match self.transport {
            Transport::Udp => self.on_record(0, seg.pieces),
            Transport::Tcp => {
                if seg.conn < self.conn {
                    return; // bytes of a connection the client has abandoned
                }
                if seg.conn > self.conn {
                    // The client reconnected: the old connection's state is gone.
                    self.conn = seg.conn;
                    self.rx = RecordDecoder::default();
                    self.tx.clear();
                }
                for p in seg.pieces {
                    self.rx.push(p);
                }
                loop {
                    match self.rx.next_record() {
                        Ok(Some(rec)) => self.on_record(self.conn, rec),
                        Ok(None) => break,
                        Err(e) => panic!("server record decoder failed: {e}"),
                    }
                }
            }
        }
    }

    /// Starts and completes service; sends replies. Returns whether anything happened.
    pub fn step(&mut self, now: Instant, link: &mut LinkDirection<Segment>) -> bool {
        let mut progress = false;
        while let Some((conn, reply)) = self.ready.pop_front() {
            progress = true;
            if conn == self.conn {
                self.send(now, link, reply);
            }
        }
        while let Some(&Reverse((at, id))) = self.in_service.peek() {
            if at > now {
                break;
            }
            self.in_service.pop();
            progress = true;
            let job = self.jobs.remove(&id).expect("job in service");
            if job.conn != self.conn {
                continue;
            }
            match self.host.start(now, id, job.xid, job.cred, job.args) {
                Some(reply) => self.send(now, link, reply),
                None => {
                    self.running.insert(id, job.conn);
                }
            }
        }
        for (id, reply) in self.host.poll(now) {
            progress = true;
            let conn = self.running.remove(&id).expect("a running handler");
            if conn == self.conn {
                self.send(now, link, reply);
            }
        }
        if self.flush_at.is_none_or(|t| t <= now) {
            self.flush_at = self.host.flush_due(now).filter(|&t| t > now);
        }
        while self.in_service.len() + self.running.len() < self.concurrency {
            let next = match self.order {
                ServerOrder::Arrival => 0,
                ServerOrder::Random => self.rng.gen_range(0..self.waiting.len().max(1)),
            };
            let Some(job) = self.waiting.remove(next) else {
                break;
            };
            let id = self.next_job;
            self.next_job += 1;
            self.jobs.insert(id, job);
            self.in_service.push(Reverse((now + self.service_time, id)));
            progress = true;
        }
        if self.transport == Transport::Tcp {
            progress |= self.tx.pump(now, link, self.conn);
        }
        progress
    }

    /// When the server next has something to do on its own.
    pub fn next_wake(&self, link: &LinkDirection<Segment>) -> Option<Instant> {
        let service = self.in_service.peek().map(|r| r.0 .0);
        let room = if self.tx.is_blocked() {
            link.room_timeout()
        } else {
            None
        };
        [service, room, self.flush_at].into_iter().flatten().min()
    }

    /// Calls received and not yet answered.
    pub fn outstanding(&self) -> usize {
        self.waiting.len() + self.jobs.len() + self.running.len()
    }

    fn on_record(&mut self, conn: u64, rec: Vec<Bytes>) {
        let parse = rpcs::parse_call(&rec);
        let CallParse::Call(call) = &parse else {
            // Not expected from our own client; answered as a real server would.
            self.stats.not_calls += 1;
            if let Some(reply) = rpcs::reply_for(&parse) {
                self.ready.push_back((conn, reply));
            }
            return;
        };
        self.stats.calls += 1;
        if call.prog() != nfs3::PROGRAM || call.vers() != nfs3::VERSION {
            panic!(
                "simulated client called prog {} vers {}",
                call.prog(),
                call.vers()
            );
        }
        let mut r = call.args(&rec);
        let args = nfs3::decode_args(call.proc_(), &mut r)
            .unwrap_or_else(|e| panic!("undecodable arguments from our own client: {e}"));
        self.waiting.push_back(Job {
            conn,
            xid: call.xid,
            cred: call.cred.clone(),
            args,
        });
        self.stats.waiting_peak = self.stats.waiting_peak.max(self.waiting.len());
    }

    fn send(&mut self, now: Instant, link: &mut LinkDirection<Segment>, reply: Vec<Bytes>) {
        match self.transport {
            Transport::Tcp => self
                .tx
                .push(record::frame(reply, record::MAX_FRAGMENT_BYTES)),
            Transport::Udp => {
                if !send_datagram(now, link, reply) {
                    self.dropped_replies += 1;
                }
            }
        }
    }
}
