//! A connection that goes away while its COMPOUND is half evaluated, on the production driver
//! loop ([`drive`], the loop the service runs) in virtual time.
//!
//! Between SEQUENCE and its reply a COMPOUND holds its session slot; a retry on that slot is
//! answered NFS4ERR_DELAY while it does. When the connection closes mid-evaluation the service
//! drops the driver's future, and the driver's guard must free the slot, or the client's
//! retry (on a new connection) is refused for good. Here the executor stops where the service
//! would wait: at the data op ([`CutAt::DataOp`], a COMMIT whose data path never answers), or
//! at the metadata step after it ([`CutAt::MetadataStep`], a blocking-pool job that never
//! ran, holding the evaluation). The
//! driver is polled once with a no-op waker (it must then be pending), and dropped:
//!
//! ```text
//!   SEQUENCE(slot 0, seqid n) … COMMIT GETATTR ──▶ drive … pending ──▶ dropped (connection gone)
//!   retry  SEQUENCE(slot 0, seqid n)      ──▶ served: SEQUENCE OK, RETRY_UNCACHED_REP after it
//!   next   SEQUENCE(slot 0, seqid n + 1)  ──▶ runs
//! ```
//!
//! [`CutOff::leaked`] is the contrast: the same, with the future leaked instead of dropped
//! (the guard never runs), so the retry must be refused with NFS4ERR_DELAY. It shows the check
//! can fail.

use bytes::Bytes;
use core::future::Future;
use sluice_nfs4state::{Config4, SplitMix, State4};
use sluice_rpc::server::Credentials;
use sluice_server::backend::exports::{ClientMatch, ClientRule, Squash};
use sluice_server::backend::memfs::MemFsConfig;
use sluice_server::backend::{
    Caller, CreateHow, Cred, Export, ExportOptions, FileSystem, MemFs, SetAttr,
};
use sluice_server::datapath::CommitDone;
use sluice_server::exports::ExportEntry;
use sluice_server::nfs4::compound::{drive, drive_ready, Executor, Inline, Nfs4, Outcome, Sender};
use sluice_server::nfs4::data::{DataDone, DataReq, Settle};
use sluice_server::testkit::{Session4, SessionConfig};
use sluice_xdr::nfs4::compound::{Compound4Args, Compound4Res, CompoundLimits};
use sluice_xdr::nfs4::ops::{CommitArgs, NfsArgop4, NfsResop4, SequenceArgs};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{Bitmap4, Component4, SessionId4, Utf8Str};
use sluice_xdr::rpc::AuthSys;
use sluice_xdr::{Pack, Reader, Writer};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

/// Where the connection goes away (the COMPOUND is SEQUENCE, PUTROOTFH, LOOKUP, LOOKUP,
/// COMMIT, GETATTR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutAt {
    /// While the data path runs the COMMIT.
    DataOp,
    /// While the metadata step after the COMMIT (GETATTR) waits for the blocking pool.
    MetadataStep,
}

/// What the client saw after the cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutOff {
    /// The driver was pending when the connection went away (the cut was mid-evaluation).
    pub pending_at_cut: bool,
    /// The retry of the cut-off request (same slot, same sequence id): its statuses.
    pub retry: Vec<Nfsstat4>,
    /// The next request on the slot (sequence id + 1): its COMPOUND status.
    pub next: Nfsstat4,
}

/// Runs the scenario of the module notes at virtual time `epoch` (+ a second per request):
/// `leak` keeps the cut-off driver alive forever instead of dropping it (the contrast).
pub fn cut_off(at: CutAt, cachethis: bool, leak: bool, epoch: Instant) -> CutOff {
    let nfs = Arc::new(server());
    let from = Sender {
        addr: "127.0.0.1:700".parse().expect("an address"),
        conn: 1,
        xprtsec: sluice_server::backend::exports::Xprtsec::None,
        cred: Credentials::Sys(AuthSys {
            stamp: 1,
            machine_name: Bytes::from_static(b"sim"),
            uid: 0,
            gid: 0,
            gids: Vec::new(),
        }),
    };
    let mut now = epoch;
    let mut send = |ops: Vec<NfsArgop4>, conn: u64| {
        now += Duration::from_secs(1);
        let exec = Inline { now, data: None };
        let from = Sender {
            conn,
            ..from.clone()
        };
        match drive_ready(&nfs, &exec, &from, &encode(ops)) {
            Outcome::Reply(b) => decode(&b),
            Outcome::GarbageArgs => panic!("the simulator sent a malformed COMPOUND"),
        }
    };
    let sid = session(&mut send);
    let ops = |seqid| {
        vec![
            sequence(sid, seqid, cachethis),
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Lookup(Component4(Bytes::from_static(b"sim"))),
            NfsArgop4::Lookup(Component4(Bytes::from_static(b"f"))),
            NfsArgop4::Commit(CommitArgs {
                offset: 0,
                count: 0,
            }),
            NfsArgop4::Getattr(Bitmap4::new()),
        ]
    };
    // The request the connection takes down with it.
    let record = [encode(ops(1))];
    let stall = Stall {
        now: epoch,
        at,
        metadata_steps: AtomicU32::new(0),
    };
    let mut fut = Box::pin(drive(&nfs, &stall, &from, &record, 0, false));
    let pending_at_cut = fut
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_pending();
    if leak {
        std::mem::forget(fut);
    } else {
        drop(fut);
    }
    // The client comes back on another connection.
    let retry = send(ops(1), 2);
    let next = send(
        vec![sequence(sid, 2, cachethis), NfsArgop4::Putrootfh(())],
        2,
    );
    CutOff {
        pending_at_cut,
        retry: retry.results.iter().map(NfsResop4::status).collect(),
        next: next.status,
    }
}

/// An executor that never finishes what [`CutAt`] names (as a service whose connection is
/// about to close), and runs the rest at once.
struct Stall {
    now: Instant,
    at: CutAt,
    /// Metadata steps begun: with [`CutAt::MetadataStep`] the second one (GETATTR, after the
    /// COMMIT) never runs.
    metadata_steps: AtomicU32,
}

impl Executor for Stall {
    fn now(&self) -> Instant {
        self.now
    }

    fn metadata<T: Send + 'static>(
        &self,
        step: impl FnOnce() -> T + Send + 'static,
    ) -> impl Future<Output = Option<T>> + Send {
        let stalled = self.at == CutAt::MetadataStep
            && self.metadata_steps.fetch_add(1, Ordering::Relaxed) == 1;
        async move {
            if stalled {
                // The job is queued, holding the evaluation's guard, and never runs.
                let _queued = step;
                core::future::pending::<()>().await;
                None
            } else {
                Some(step())
            }
        }
    }

    fn data(&self, _req: DataReq) -> impl Future<Output = Result<DataDone, Nfsstat4>> + Send {
        let stalled = self.at == CutAt::DataOp;
        async move {
            if stalled {
                // The COMMIT of `f`: its data path never answers.
                core::future::pending::<()>().await;
            }
            Ok(DataDone::Commit(CommitDone {
                wcc: Default::default(),
                verifier: [0; 8],
            }))
        }
    }

    fn settle(&self, _s: Settle, _wait_max: Duration) -> impl Future<Output = bool> + Send {
        core::future::ready(false)
    }
}

/// One export, `/sim`, of a `MemFs` holding one empty file, `f`.
fn server() -> Nfs4 {
    let fs = Arc::new(MemFs::new(MemFsConfig::default()));
    let root = fs.root_handle();
    fs.create(
        &Caller::with_cred(Cred::root()),
        &root,
        b"f",
        CreateHow::Unchecked(SetAttr::default()),
    )
    .expect("f is created");
    let exports = vec![ExportEntry {
        fs,
        export: Export {
            path: PathBuf::from("/sim"),
            clients: vec![ClientRule {
                client: ClientMatch::Any,
                options: ExportOptions {
                    read_only: false,
                    squash: Squash::None,
                    secure: false,
                    ..ExportOptions::default()
                },
            }],
        },
    }];
    let state = State4::new(Config4::default(), Box::new(SplitMix(1)));
    Nfs4::new(Arc::new(exports), state, 1).expect("one export")
}

/// EXCHANGE_ID and CREATE_SESSION (one slot) on connection 1, by the shared test client. No
/// RECLAIM_COMPLETE: the client takes no locking state (COMMIT needs none), and its first
/// SEQUENCE is the scenario's sequence id 1.
fn session(send: &mut impl FnMut(Vec<NfsArgop4>, u64) -> Compound4Res) -> SessionId4 {
    let cfg = SessionConfig {
        reclaim_complete: false,
        ..SessionConfig::new(b"sim cut-off client", 1)
    };
    Session4::establish(&cfg, |ops| send(ops, 1)).sessionid
}

fn sequence(sessionid: SessionId4, sequenceid: u32, cachethis: bool) -> NfsArgop4 {
    NfsArgop4::Sequence(SequenceArgs {
        sessionid,
        sequenceid,
        slotid: 0,
        highest_slotid: 0,
        cachethis,
    })
}

fn encode(ops: Vec<NfsArgop4>) -> Bytes {
    let mut w = Writer::new();
    Compound4Args {
        tag: Utf8Str(Bytes::from_static(b"sim")),
        minorversion: 1,
        ops,
    }
    .pack(&mut w);
    w.into_bytes()
}

fn decode(b: &Bytes) -> Compound4Res {
    let segs = [b.clone()];
    Compound4Res::decode(&mut Reader::new(&segs), &CompoundLimits::default())
        .expect("the server's reply decodes")
}
