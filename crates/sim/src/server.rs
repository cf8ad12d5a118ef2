//! The simulated NFSv3 server: real call parsing and codecs over an in-memory file.
//!
//! ```text
//!  segments ─► RecordDecoder (TCP) ─► parse_call ─► decode_args ─► waiting ─► in service
//!                                       │ not a call: reply_for          (≤ concurrency,
//!                                       ▼                                 service_time each)
//!                               reply builders ◄──────── encode READ/GETATTR results ◄┘
//!                                       │
//!                                       └─► frame + StreamTx (TCP) / one datagram (UDP) ─► link
//! ```
//!
//! READ data are zero-copy slices of [`Content`]. Calls are executed as often as they arrive
//! (no duplicate request cache: READ and GETATTR are idempotent, and counting re-executions is
//! part of what the simulator measures).

use crate::content::Content;
use crate::pipe::{send_datagram, Segment, StreamTx};
use bytes::Bytes;
use sluice_link::model::LinkDirection;
use sluice_rpc::client::Transport;
use sluice_rpc::record::{self, RecordDecoder};
use sluice_rpc::server::{self as rpcs, CallParse};
use sluice_xdr::nfs3::{
    self, Args3, Fattr3, GetattrRes, GetattrResOk, NfsFh3, NfsResult, Nfsstat3, ReadRes,
    ReadResFail, ReadResOk,
};
use sluice_xdr::{Pack, Payload};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

/// Largest READ the server answers in full (its FSINFO rtmax): 1 MiB, Linux nfsd's default.
pub const RTMAX_BYTES: u32 = 1024 * 1024;

/// The one file's handle.
pub fn file_handle() -> NfsFh3 {
    NfsFh3(Bytes::from_static(b"sluice-sim-file-0001"))
}

/// Counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerStats {
    pub calls: u64,
    pub not_calls: u64,
    pub read_bytes: u64,
    pub waiting_peak: usize,
}

#[derive(Debug)]
struct Job {
    conn: u64,
    xid: u32,
    args: Args3,
}

pub struct Server {
    transport: Transport,
    content: Content,
    attr: Fattr3,
    service_time: Duration,
    concurrency: usize,
    /// Current TCP connection and its decoder / send buffer.
    conn: u64,
    rx: RecordDecoder,
    pub tx: StreamTx,
    waiting: VecDeque<Job>,
    /// Jobs in service, by completion time then arrival.
    in_service: BinaryHeap<Reverse<(Instant, u64)>>,
    jobs: BTreeMap<u64, Job>,
    next_job: u64,
    /// Replies that need no service (answers to records that were not calls).
    ready: VecDeque<(u64, Vec<Bytes>)>,
    /// UDP replies that could not be sent: counted here (lost in the client's eyes).
    pub dropped_replies: u64,
    pub stats: ServerStats,
}

impl Server {
    pub fn new(
        transport: Transport,
        content: Content,
        file_bytes: u64,
        service_time: Duration,
        concurrency: Option<usize>,
    ) -> Self {
        let attr = Fattr3 {
            mode: 0o644,
            nlink: 1,
            size: file_bytes,
            used: file_bytes,
            fileid: 1,
            ..Fattr3::default()
        };
        Server {
            transport,
            content,
            attr,
            service_time,
            concurrency: concurrency.unwrap_or(usize::MAX).max(1),
            conn: 0,
            rx: RecordDecoder::default(),
            tx: StreamTx::default(),
            waiting: VecDeque::new(),
            in_service: BinaryHeap::new(),
            jobs: BTreeMap::new(),
            next_job: 0,
            ready: VecDeque::new(),
            dropped_replies: 0,
            stats: ServerStats::default(),
        }
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
            let job = self.jobs.remove(&id).expect("job in service");
            progress = true;
            if job.conn == self.conn {
                let reply = self.execute(&job);
                self.send(now, link, reply);
            }
        }
        while self.in_service.len() < self.concurrency {
            let Some(job) = self.waiting.pop_front() else {
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
        service.into_iter().chain(room).min()
    }

    /// Calls received and not yet answered.
    pub fn outstanding(&self) -> usize {
        self.waiting.len() + self.jobs.len()
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
            args,
        });
        self.stats.waiting_peak = self.stats.waiting_peak.max(self.waiting.len());
    }

    /// The reply message for a job.
    fn execute(&mut self, job: &Job) -> Vec<Bytes> {
        let mut w = rpcs::success_header(job.xid);
        match &job.args {
            Args3::Read(a) => {
                let res: ReadRes = if a.file != file_handle() {
                    NfsResult::Err(
                        Nfsstat3::STALE,
                        ReadResFail {
                            file_attributes: None,
                        },
                    )
                } else {
                    let size = self.attr.size;
                    let count = a.count.min(RTMAX_BYTES);
                    let n = u64::from(count).min(size.saturating_sub(a.offset));
                    self.stats.read_bytes += n;
                    NfsResult::Ok(ReadResOk {
                        file_attributes: Some(self.attr),
                        count: n as u32,
                        eof: a.offset + n >= size,
                        data: Payload::from_chunks(self.content.slices(a.offset, n)),
                    })
                };
                res.pack(&mut w);
            }
            Args3::Getattr(_) => {
                let res: GetattrRes = NfsResult::Ok(GetattrResOk {
                    obj_attributes: self.attr,
                });
                res.pack(&mut w);
            }
            Args3::Null(()) => {}
            _ => return rpcs::proc_unavail(job.xid),
        }
        w.into_segments()
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
