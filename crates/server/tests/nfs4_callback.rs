//! The NFSv4.1 back channel end to end: the real server (`sluice_server::run_with`) and the
//! real client transport (`RpcClient` with a callback service registered), on loopback.
//!
//! - CREATE_SESSION with CONN_BACK_CHAN: the server probes the connection with CB_NULL, then
//!   (after the client's first SEQUENCE) sends CB_COMPOUND[CB_SEQUENCE] for the session on
//!   slot 0 with sequence id 1; the client answers and the server marks the path up.
//! - The back connection dropped: the next SEQUENCE, on another connection of the session,
//!   carries SEQ4_STATUS_CB_PATH_DOWN and SEQ4_STATUS_CB_PATH_DOWN_SESSION.
//! - A client with no callback service refuses the probe (PROG_UNAVAIL): SEQUENCE reports
//!   the path down at once.
//! - `/metrics` and `/stats` count the COMPOUNDs' ops by name and show the state gauges.
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
    self as cb, CbArgop4, CbCompound4Args, CbCompound4Res, CbResop4, CbSequenceResOk,
};
use sluice_xdr::nfs4::compound::{Compound4Args, Compound4Res, CompoundLimits};
use sluice_xdr::nfs4::ops::{
    CallbackSecParms4, CallbackSecParmsList, ChannelAttrs4, ClientOwner4, CreateSessionArgs,
    ExchangeIdArgs, ImplIdList, NfsArgop4, NfsResop4, Res4, SequenceArgs, StateProtect4A,
    CREATE_SESSION4_FLAG_CONN_BACK_CHAN, SEQ4_STATUS_CB_PATH_DOWN,
    SEQ4_STATUS_CB_PATH_DOWN_SESSION,
};
use sluice_xdr::nfs4::{self, Nfsstat4, Opaque4, SessionId4, Utf8Str};
use sluice_xdr::procs::TimerClass;
use sluice_xdr::rpc::{AuthSys, OpaqueAuth, ReplyBody};
use sluice_xdr::{Pack, Reader, Writer};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use support::*;
use tokio::sync::mpsc;

const LIMIT: Duration = Duration::from_secs(30);
const CB_PROGRAM: u32 = cb::PROGRAM_DEFAULT;

/// What the client's callback service saw.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Null {
        prog: u32,
    },
    Sequence {
        sessionid: SessionId4,
        sequenceid: u32,
        slotid: u32,
        ops: usize,
    },
}

/// Answers CB_NULL, and CB_COMPOUND with CB_SEQUENCE echoed; reports each call.
struct Service {
    seen: mpsc::UnboundedSender<Seen>,
}

impl CallbackService for Service {
    fn handle(
        self: Arc<Self>,
        call: IncomingCall,
    ) -> Pin<Box<dyn Future<Output = CallbackReply> + Send>> {
        Box::pin(async move {
            let (prog, vers, proc_) = (call.call.prog(), call.call.vers(), call.call.proc_());
            if prog != CB_PROGRAM || vers != cb::VERSION {
                return CallbackReply::ProgUnavail;
            }
            if proc_ == cb::proc_::CB_NULL {
                let _ = self.seen.send(Seen::Null { prog });
                return CallbackReply::Results(Vec::new());
            }
            let mut r = call.args();
            let Ok(args) = CbCompound4Args::decode(&mut r, &CompoundLimits::default()) else {
                return CallbackReply::GarbageArgs;
            };
            let Some(CbArgop4::Sequence(s)) = args.ops.first() else {
                return CallbackReply::GarbageArgs;
            };
            let _ = self.seen.send(Seen::Sequence {
                sessionid: s.sessionid,
                sequenceid: s.sequenceid,
                slotid: s.slotid,
                ops: args.ops.len(),
            });
            let res = CbCompound4Res {
                status: Nfsstat4::OK,
                tag: args.tag.clone(),
                results: vec![CbResop4::Sequence(Res4::Ok(CbSequenceResOk {
                    sessionid: s.sessionid,
                    sequenceid: s.sequenceid,
                    slotid: s.slotid,
                    highest_slotid: 0,
                    target_highest_slotid: 0,
                }))],
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

async fn compound_on(rpc: &RpcClient, ops: Vec<NfsArgop4>) -> Compound4Res {
    let args = Compound4Args {
        tag: Utf8Str(Bytes::from_static(b"cb")),
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
        rpc.call(
            id,
            &OpaqueAuth::none(),
            w.into_segments(),
            TimerClass::Getattr,
        ),
    )
    .await
    .expect("COMPOUND answered in time")
    .expect("COMPOUND answered");
    let mut r = out.reply.results();
    Compound4Res::decode(&mut r, &CompoundLimits::default()).expect("COMPOUND4res")
}

/// The same COMPOUND over the test's own raw RPC connection.
async fn compound_raw(c: &mut Rpc, ops: Vec<NfsArgop4>) -> Compound4Res {
    let args = Compound4Args {
        tag: Utf8Str(Bytes::from_static(b"cb")),
        minorversion: 1,
        ops,
    };
    let mut w = Writer::new();
    args.pack(&mut w);
    let r = c
        .call(nfs4::PROGRAM, 4, nfs4::proc_::COMPOUND, &w.into_bytes())
        .await;
    assert_eq!(r.body, ReplyBody::success(), "COMPOUND accepted");
    let segs = [r.results.clone()];
    Compound4Res::decode(&mut Reader::new(&segs), &CompoundLimits::default()).expect("res")
}

fn chan() -> ChannelAttrs4 {
    sluice_server::testkit::channel_attrs(4)
}

fn sequence(sessionid: SessionId4, sequenceid: u32) -> NfsArgop4 {
    NfsArgop4::Sequence(SequenceArgs {
        sessionid,
        sequenceid,
        slotid: 0,
        highest_slotid: 0,
        cachethis: false,
    })
}

fn status_flags(res: &Compound4Res) -> u32 {
    match res.results.first() {
        Some(NfsResop4::Sequence(Res4::Ok(ok))) => ok.status_flags,
        other => panic!("SEQUENCE failed: {other:?}"),
    }
}

/// EXCHANGE_ID for `owner`, then CREATE_SESSION asking for the back channel on this
/// connection (AUTH_SYS callbacks to [`CB_PROGRAM`]); the session's id.
async fn session_with_back_channel(rpc: &RpcClient, owner: &'static [u8]) -> SessionId4 {
    let res = compound_on(
        rpc,
        vec![NfsArgop4::ExchangeId(ExchangeIdArgs {
            clientowner: ClientOwner4 {
                verifier: [3; 8],
                ownerid: Opaque4(Bytes::from_static(owner)),
            },
            flags: 0,
            state_protect: StateProtect4A::None,
            client_impl_id: ImplIdList(Vec::new()),
        })],
    )
    .await;
    let Some(NfsResop4::ExchangeId(Res4::Ok(e))) = res.results.first() else {
        panic!("EXCHANGE_ID: {res:?}")
    };
    let sys = AuthSys {
        stamp: 1,
        machine_name: Bytes::from_static(b"cbclient"),
        uid: 0,
        gid: 0,
        gids: Vec::new(),
    };
    let res = compound_on(
        rpc,
        vec![NfsArgop4::CreateSession(CreateSessionArgs {
            clientid: e.clientid,
            sequence: e.sequenceid,
            flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
            fore_chan_attrs: chan(),
            back_chan_attrs: chan(),
            cb_program: CB_PROGRAM,
            sec_parms: CallbackSecParmsList(vec![CallbackSecParms4::AuthSys(sys)]),
        })],
    )
    .await;
    let Some(NfsResop4::CreateSession(Res4::Ok(cs))) = res.results.first() else {
        panic!("CREATE_SESSION: {res:?}")
    };
    assert_eq!(
        cs.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
        CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
        "the back channel is granted on this connection"
    );
    cs.sessionid
}

async fn next_seen(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(LIMIT, rx.recv())
        .await
        .expect("a callback in time")
        .expect("the service lives")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_back_channel_is_probed_reported_down_when_dropped_and_ops_are_counted() {
    let dirs = TestDirs::new("nfs4-callback");
    let mut config = dirs.config();
    config.metrics = Some("127.0.0.1:0".parse().unwrap());
    let bound = sluice_server::bind(config).await.unwrap();
    let addr = bound.local_addr().unwrap();
    let metrics = bound.metrics.as_ref().unwrap().local_addr().unwrap();
    let server = bound.server.clone();
    let _run = StopOnDrop(tokio::spawn(sluice_server::run_with(
        bound,
        Connections::default(),
    )));

    let (tx, mut seen) = mpsc::unbounded_channel();
    let rpc = RpcClient::connect(
        addr,
        RpcConfig {
            callbacks: Some(Callbacks(Arc::new(Service { seen: tx }))),
            privileged_port: false,
            ..RpcConfig::default()
        },
    )
    .await
    .unwrap();

    let sid = session_with_back_channel(&rpc, b"nfs4_callback client").await;

    // The probe: CB_NULL, then, once the client's first SEQUENCE shows it knows the session,
    // CB_SEQUENCE alone on slot 0 with sequence id 1.
    assert_eq!(next_seen(&mut seen).await, Seen::Null { prog: CB_PROGRAM });
    let mut seqid = 1;
    let res = compound_on(&rpc, vec![sequence(sid, seqid)]).await;
    assert_eq!(status_flags(&res), 0, "a path being probed is not down");
    assert_eq!(
        next_seen(&mut seen).await,
        Seen::Sequence {
            sessionid: sid,
            sequenceid: 1,
            slotid: 0,
            ops: 1
        }
    );
    // The server took the answer: the path is up.
    tokio::time::timeout(LIMIT, async {
        loop {
            let path = server.nfs4.state.lock().unwrap().callback_path(&sid);
            if path == Some(PathState::Up) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the path comes up");
    seqid += 1;
    let res = compound_on(&rpc, vec![sequence(sid, seqid)]).await;
    assert_eq!(status_flags(&res), 0, "callbacks work: no flag");

    // A second connection joins the session (its SEQUENCE binds it for the fore channel).
    let mut other = Rpc::connect(addr).await;
    seqid += 1;
    let res = compound_raw(&mut other, vec![sequence(sid, seqid)]).await;
    assert_eq!(status_flags(&res), 0);

    // The back connection goes: the next SEQUENCE says no callback can reach the client.
    drop(rpc);
    let flags = tokio::time::timeout(LIMIT, async {
        loop {
            seqid += 1;
            let res = compound_raw(&mut other, vec![sequence(sid, seqid)]).await;
            let f = status_flags(&res);
            if f != 0 {
                return f;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the closed connection is noticed");
    assert_eq!(
        flags,
        SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION
    );
    assert_eq!(
        server.nfs4.state.lock().unwrap().callback_path(&sid),
        Some(PathState::Down)
    );

    // Per-op counts and the gauges, in both renderings.
    let prom = sluice_server::metrics::fetch(metrics, "/metrics")
        .await
        .unwrap();
    for line in [
        "sluice_nfs4_op_calls_total{op=\"EXCHANGE_ID\"} 1\n".to_string(),
        "sluice_nfs4_op_calls_total{op=\"CREATE_SESSION\"} 1\n".to_string(),
        format!("sluice_nfs4_op_calls_total{{op=\"SEQUENCE\"}} {seqid}\n"),
        "sluice_nfs4_op_errors_total{op=\"SEQUENCE\"} 0\n".to_string(),
        "sluice_nfs4_clients 1\n".to_string(),
        "sluice_nfs4_sessions 1\n".to_string(),
        "sluice_nfs4_open_stateids 0\n".to_string(),
        format!("sluice_nfs4_op_latency_seconds_count{{op=\"SEQUENCE\"}} {seqid}\n"),
    ] {
        assert!(prom.contains(&line), "{line} in\n{prom}");
    }
    let text = sluice_server::metrics::fetch(metrics, "/stats")
        .await
        .unwrap();
    assert!(text.contains("Server nfs v4 operations:"), "{text}");
    assert!(text.contains("create_session"), "{text}");
    assert!(
        text.contains("nfs v4 state: 1 clients, 1 sessions, 0 open stateids"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_refuses_the_probe_is_told_its_back_channel_is_down() {
    let dirs = TestDirs::new("nfs4-callback-refused");
    let bound = sluice_server::bind(dirs.config()).await.unwrap();
    let addr = bound.local_addr().unwrap();
    let server = bound.server.clone();
    let _run = StopOnDrop(tokio::spawn(sluice_server::run_with(
        bound,
        Connections::default(),
    )));
    // No callback service: the transport answers the server's calls PROG_UNAVAIL.
    let rpc = RpcClient::connect(
        addr,
        RpcConfig {
            privileged_port: false,
            ..RpcConfig::default()
        },
    )
    .await
    .unwrap();
    let sid = session_with_back_channel(&rpc, b"no callbacks").await;
    tokio::time::timeout(LIMIT, async {
        loop {
            let path = server.nfs4.state.lock().unwrap().callback_path(&sid);
            if path == Some(PathState::Down) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the refused probe takes the path down");
    let res = compound_on(&rpc, vec![sequence(sid, 1)]).await;
    assert_eq!(
        status_flags(&res),
        SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION
    );
    assert_eq!(
        rpc.stats().callbacks_refused,
        1,
        "CB_NULL only: nothing after it"
    );
}
