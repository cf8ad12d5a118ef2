//! Issue #30, item 7 over TCP: a CB_RECALL the holder did not answer is sent again on the
//! holder's next usable back channel. The holder (the real client transport with a callback
//! service) leaves its first CB_RECALL unanswered, then resets its session (DESTROY_SESSION,
//! CREATE_SESSION with a new back channel on the same connection, as the Linux client does
//! after a callback failure); the server must ask it again on the new session, long before
//! the lease would revoke the delegation, and the conflicting OPEN goes through once the
//! holder returns it. The state rules are tested in virtual time in
//! `sluice_nfs4state::state` (`an_unanswered_recall_is_sent_again_on_the_holders_new_session`).
//!
//! Every wait is bounded by [`LIMIT`], so a hang fails the test instead of the suite.

#[macro_use]
mod support;

use bytes::Bytes;
use sluice_client::transport::{
    CallbackReply, CallbackService, Callbacks, IncomingCall, RpcClient, RpcConfig,
};
use sluice_nfs4state::callback::PathState;
use sluice_rpc::client::ProcId;
use sluice_server::net::Connections;
use sluice_xdr::nfs4::callback::{
    self as cb, CbArgop4, CbCompound4Args, CbCompound4Res, CbRecallArgs, CbResop4, CbSequenceResOk,
};
use sluice_xdr::nfs4::compound::{Compound4Args, Compound4Res, CompoundLimits};
use sluice_xdr::nfs4::ops::{
    CallbackSecParms4, CallbackSecParmsList, CreateSessionArgs, NfsArgop4, NfsResop4,
    OpenDelegation4, Res4, CREATE_SESSION4_FLAG_CONN_BACK_CHAN, OPEN4_SHARE_ACCESS_READ,
    OPEN4_SHARE_ACCESS_WRITE,
};
use sluice_xdr::nfs4::{self, Nfsstat4, SessionId4, Stateid4, Utf8Str};
use sluice_xdr::procs::TimerClass;
use sluice_xdr::rpc::{AuthSys, OpaqueAuth};
use sluice_xdr::{Pack, Writer};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::nfs4::*;
use support::{Rpc, TestDirs};
use tokio::sync::mpsc;

const LIMIT: Duration = Duration::from_secs(30);
const CB_PROGRAM: u32 = cb::PROGRAM_DEFAULT;

/// The holder's callback service: answers CB_NULL and CB_SEQUENCE; reports every CB_RECALL on
/// `recalls`, never answering the first `silent` of them.
struct Service {
    recalls: mpsc::UnboundedSender<(SessionId4, CbRecallArgs)>,
    silent: AtomicUsize,
}

impl CallbackService for Service {
    fn handle(
        self: Arc<Self>,
        call: IncomingCall,
    ) -> Pin<Box<dyn Future<Output = CallbackReply> + Send>> {
        Box::pin(async move {
            if call.call.prog() != CB_PROGRAM || call.call.vers() != cb::VERSION {
                return CallbackReply::ProgUnavail;
            }
            if call.call.proc_() == cb::proc_::CB_NULL {
                return CallbackReply::Results(Vec::new());
            }
            let mut r = call.args();
            let Ok(args) = CbCompound4Args::decode(&mut r, &CompoundLimits::default()) else {
                return CallbackReply::GarbageArgs;
            };
            let Some(CbArgop4::Sequence(s)) = args.ops.first() else {
                return CallbackReply::GarbageArgs;
            };
            let mut results = vec![CbResop4::Sequence(Res4::Ok(CbSequenceResOk {
                sessionid: s.sessionid,
                sequenceid: s.sequenceid,
                slotid: s.slotid,
                highest_slotid: 0,
                target_highest_slotid: 0,
            }))];
            for op in &args.ops[1..] {
                match op {
                    CbArgop4::Recall(a) => {
                        let _ = self.recalls.send((s.sessionid, a.clone()));
                        let silent = self
                            .silent
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                            .is_ok();
                        if silent {
                            std::future::pending::<()>().await;
                        }
                        results.push(CbResop4::Recall(Nfsstat4::OK));
                    }
                    _ => return CallbackReply::GarbageArgs,
                }
            }
            let res = CbCompound4Res {
                status: Nfsstat4::OK,
                tag: args.tag.clone(),
                results,
            };
            let mut w = Writer::new();
            res.pack(&mut w);
            CallbackReply::Results(w.into_segments())
        })
    }
}

/// Stops the server task when the test ends.
struct StopOnDrop(tokio::task::JoinHandle<Result<(), String>>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn call(rpc: &RpcClient, ops: Vec<NfsArgop4>) -> Compound4Res {
    let args = Compound4Args {
        tag: Utf8Str(Bytes::from_static(TAG)),
        minorversion: 1,
        ops,
    };
    let mut w = Writer::new();
    args.pack(&mut w);
    let id = ProcId {
        prog: nfs4::PROGRAM,
        vers: 4,
        proc_: nfs4::proc_::COMPOUND,
    };
    let out = tokio::time::timeout(
        LIMIT,
        rpc.call(id, &root(), w.into_segments(), TimerClass::Getattr),
    )
    .await
    .expect("COMPOUND answered in time")
    .expect("COMPOUND answered");
    let mut r = out.reply.results();
    Compound4Res::decode(&mut r, &CompoundLimits::default()).expect("COMPOUND4res")
}

fn sys() -> AuthSys {
    AuthSys {
        stamp: 1,
        machine_name: Bytes::from_static(b"holder"),
        uid: 0,
        gid: 0,
        gids: Vec::new(),
    }
}

/// AUTH_SYS as root (the export does not squash it).
fn root() -> OpaqueAuth {
    sys().to_opaque_auth()
}

async fn within<F: Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(LIMIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {LIMIT:?}"))
}

/// CREATE_SESSION with a back channel on the calling connection: the new session id.
async fn create_session(rpc: &RpcClient, clientid: u64, sequence: u32) -> SessionId4 {
    let res = call(
        rpc,
        vec![NfsArgop4::CreateSession(CreateSessionArgs {
            clientid,
            sequence,
            flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
            fore_chan_attrs: chan(),
            back_chan_attrs: chan(),
            cb_program: CB_PROGRAM,
            sec_parms: CallbackSecParmsList(vec![CallbackSecParms4::AuthSys(sys())]),
        })],
    )
    .await;
    let Some(NfsResop4::CreateSession(Res4::Ok(cs))) = res.results.first() else {
        panic!("CREATE_SESSION: {res:?}")
    };
    cs.sessionid
}

/// The client's first SEQUENCE on `sid` (which lets the probe finish), then the wait for the
/// back channel to be up.
async fn bring_up(rpc: &RpcClient, server: &sluice_server::service::Server, sid: SessionId4) {
    let res = call(rpc, vec![sequence(sid, 1)]).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    within("the back channel comes up", async {
        while server.nfs4.state.lock().unwrap().callback_path(&sid) != Some(PathState::Up) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_recall_is_sent_again_on_the_holders_new_session() {
    // A long lease: the conflicting OPEN must go through long before a revocation could.
    let lease = Duration::from_secs(60);
    let dirs = TestDirs::new("nfs4-errors-recall");
    std::fs::write(dirs.export().join("f"), b"x").unwrap();
    let mut config = dirs.config();
    config.lease = lease;
    let bound = sluice_server::bind(config).await.unwrap();
    let addr = bound.local_addr().unwrap();
    let server = bound.server.clone();
    let _run = StopOnDrop(tokio::spawn(sluice_server::run_with(
        bound,
        Connections::default(),
    )));
    let export = dirs.export();

    let (tx, mut recalls) = mpsc::unbounded_channel();
    let rpc = RpcClient::connect(
        addr,
        RpcConfig {
            callbacks: Some(Callbacks(Arc::new(Service {
                recalls: tx,
                silent: AtomicUsize::new(1),
            }))),
            privileged_port: false,
            ..RpcConfig::default()
        },
    )
    .await
    .unwrap();
    let res = call(&rpc, vec![exchange_id_op(b"recall holder")]).await;
    let Some(NfsResop4::ExchangeId(Res4::Ok(e))) = res.results.first() else {
        panic!("EXCHANGE_ID: {res:?}")
    };
    let first = create_session(&rpc, e.clientid, e.sequenceid).await;
    bring_up(&rpc, &server, first).await;
    // RECLAIM_COMPLETE before the first OPEN (RFC 8881 §18.51.3).
    let mut ops = vec![sequence(first, 2), NfsArgop4::ReclaimComplete(false)];
    ops.extend(walk_to(&export));
    ops.push(open_op("holder", "f", false, OPEN4_SHARE_ACCESS_READ, 0));
    let res = call(&rpc, ops).await;
    let Some(NfsResop4::Open(Res4::Ok(o))) = res.results.last() else {
        panic!("{res:?}")
    };
    let OpenDelegation4::Read(d) = &o.delegation else {
        panic!("a sole reader with a back channel gets a read delegation: {o:?}")
    };
    let deleg: Stateid4 = d.stateid;

    let mut writer = V4::establish(Rpc::connect(addr).await, "recall writer", chan()).await;
    let r = writer
        .open(&export, "w", "f", false, OPEN4_SHARE_ACCESS_WRITE, 0)
        .await;
    assert_eq!(r.err(), Some(Nfsstat4::DELAY));
    let (on, _) = within("the first CB_RECALL", recalls.recv())
        .await
        .expect("the service lives");
    assert_eq!(on, first);
    let started = Instant::now();

    // The holder resets its session without answering; its new session gets the recall.
    let res = call(&rpc, vec![NfsArgop4::DestroySession(first)]).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let second = create_session(&rpc, e.clientid, e.sequenceid + 1).await;
    bring_up(&rpc, &server, second).await;
    let (on, r) = within("the CB_RECALL again, on the new session", recalls.recv())
        .await
        .expect("the service lives");
    assert_eq!(on, second);
    assert_eq!(r.stateid, deleg);
    let res = call(
        &rpc,
        vec![
            sequence(second, 2),
            NfsArgop4::Putfh(o_fh(&mut writer, &export).await),
            NfsArgop4::Delegreturn(deleg),
        ],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let r = writer
        .open(&export, "w", "f", false, OPEN4_SHARE_ACCESS_WRITE, 0)
        .await;
    assert!(r.is_ok(), "{r:?}");
    assert!(
        started.elapsed() < lease / 2,
        "asked again at once, not revoked after the lease: {:?}",
        started.elapsed()
    );
}

/// The handle of `f` in `export`, looked up by `v`.
async fn o_fh(v: &mut V4, export: &std::path::Path) -> sluice_xdr::nfs4::NfsFh4 {
    let mut ops = walk_to(export);
    ops.push(lookup("f"));
    ops.push(NfsArgop4::Getfh(()));
    let res = v.send(ops).await;
    let Some(NfsResop4::Getfh(Res4::Ok(fh))) = res.results.last() else {
        panic!("{res:?}")
    };
    fh.clone()
}
