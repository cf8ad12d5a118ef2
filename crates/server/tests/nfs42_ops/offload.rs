//! Asynchronous COPY over a client with a back channel: a copy stateid at once,
//! OFFLOAD_STATUS, then CB_OFFLOAD.

use super::*;

use sluice_client::transport::{
    CallbackReply, CallbackService, Callbacks, IncomingCall, RpcClient, RpcConfig,
};
use sluice_nfs4state::callback::PathState;
use sluice_rpc::client::ProcId;
use sluice_server::net::Connections;
use sluice_xdr::nfs4::callback::{
    self as cb, CbArgop4, CbCompound4Args, CbCompound4Res, CbOffloadArgs, CbResop4,
    CbSequenceResOk, OffloadInfo4,
};
use sluice_xdr::nfs4::compound::{Compound4Args, Compound4Res, CompoundLimits};
use sluice_xdr::nfs4::ops::{
    CallbackSecParms4, CallbackSecParmsList, ClientOwner4, CreateSessionArgs, ExchangeIdArgs,
    ImplIdList, StateProtect4A, CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
};
use sluice_xdr::nfs4::{self, Opaque4, SessionId4};
use sluice_xdr::procs::TimerClass;
use sluice_xdr::rpc::AuthSys;
use sluice_xdr::{Pack, Writer};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use support::TestDirs;
use tokio::sync::mpsc;

const LIMIT: Duration = Duration::from_secs(60);

/// Answers CB_NULL, CB_SEQUENCE and CB_OFFLOAD (OK) in minor version 2 (a 4.1
/// CB_COMPOUND gets NFS4ERR_BADSESSION, as from Linux), and hands each CB_OFFLOAD over.
struct Service {
    offloads: mpsc::UnboundedSender<CbOffloadArgs>,
}

impl CallbackService for Service {
    fn handle(
        self: Arc<Self>,
        call: IncomingCall,
    ) -> Pin<Box<dyn Future<Output = CallbackReply> + Send>> {
        Box::pin(async move {
            if call.call.proc_() == cb::proc_::CB_NULL {
                return CallbackReply::Results(Vec::new());
            }
            let mut r = call.args();
            let Ok(args) = CbCompound4Args::decode(&mut r, &CompoundLimits::default()) else {
                return CallbackReply::GarbageArgs;
            };
            let mut results = Vec::new();
            // As Linux: the session is looked up among the clients of the CB_COMPOUND's
            // minor version; this client is a 4.2 one.
            if args.minorversion != 2 {
                let res = CbCompound4Res {
                    status: Nfsstat4::BADSESSION,
                    tag: args.tag.clone(),
                    results: vec![CbResop4::Sequence(Res4::Err(Nfsstat4::BADSESSION))],
                };
                let mut w = Writer::new();
                res.pack(&mut w);
                return CallbackReply::Results(w.into_segments());
            }
            for op in &args.ops {
                results.push(match op {
                    CbArgop4::Sequence(s) => CbResop4::Sequence(Res4::Ok(CbSequenceResOk {
                        sessionid: s.sessionid,
                        sequenceid: s.sequenceid,
                        slotid: s.slotid,
                        highest_slotid: 0,
                        target_highest_slotid: 0,
                    })),
                    CbArgop4::Offload(o) => {
                        let _ = self.offloads.send(o.clone());
                        CbResop4::Offload(Nfsstat4::OK)
                    }
                    _ => return CallbackReply::GarbageArgs,
                });
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

struct StopOnDrop(tokio::task::JoinHandle<Result<(), String>>);
impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A 4.2 client over `RpcClient` whose connection carries the session's back channel.
struct CbClient {
    rpc: RpcClient,
    sessionid: SessionId4,
    seq: u32,
}

async fn compound_on(rpc: &RpcClient, ops: Vec<NfsArgop4>) -> Compound4Res {
    let args = Compound4Args {
        tag: Utf8Str(Bytes::from_static(b"offload")),
        minorversion: 2,
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
            &support::auth_sys(0, 0),
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

impl CbClient {
    async fn send(&mut self, ops: Vec<NfsArgop4>) -> Compound4Res {
        let mut all = vec![sequence(self.sessionid, self.seq)];
        self.seq += 1;
        all.extend(ops);
        compound_on(&self.rpc, all).await
    }

    /// EXCHANGE_ID, CREATE_SESSION with the back channel on this connection, and a
    /// SEQUENCE; returns once the server has the path up.
    async fn connect(
        addr: std::net::SocketAddr,
        server: &sluice_server::service::Server,
        offloads: mpsc::UnboundedSender<CbOffloadArgs>,
    ) -> CbClient {
        let rpc = RpcClient::connect(
            addr,
            RpcConfig {
                callbacks: Some(Callbacks(Arc::new(Service { offloads }))),
                privileged_port: false,
                ..RpcConfig::default()
            },
        )
        .await
        .unwrap();
        let res = compound_on(
            &rpc,
            vec![NfsArgop4::ExchangeId(ExchangeIdArgs {
                clientowner: ClientOwner4 {
                    verifier: [4; 8],
                    ownerid: Opaque4(Bytes::from_static(b"offload client")),
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
            machine_name: Bytes::from_static(b"offload"),
            uid: 0,
            gid: 0,
            gids: Vec::new(),
        };
        let res = compound_on(
            &rpc,
            vec![NfsArgop4::CreateSession(CreateSessionArgs {
                clientid: e.clientid,
                sequence: e.sequenceid,
                flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
                fore_chan_attrs: chan(),
                back_chan_attrs: chan(),
                cb_program: cb::PROGRAM_DEFAULT,
                sec_parms: CallbackSecParmsList(vec![CallbackSecParms4::AuthSys(sys)]),
            })],
        )
        .await;
        let Some(NfsResop4::CreateSession(Res4::Ok(cs))) = res.results.first() else {
            panic!("CREATE_SESSION: {res:?}")
        };
        let mut c = CbClient {
            rpc,
            sessionid: cs.sessionid,
            seq: 1,
        };
        let res = c.send(vec![]).await;
        assert_eq!(res.status, Nfsstat4::OK);
        tokio::time::timeout(LIMIT, async {
            while server
                .nfs4
                .state
                .lock()
                .unwrap()
                .callback_path(&c.sessionid)
                != Some(PathState::Up)
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the back channel comes up");
        c
    }
}

/// `len` bytes no two 8-byte words of which are alike.
fn pattern(len: usize) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// The COPY of `src` to `dst` (both in the export at `export`), with the destination's
/// handle fetched before it.
fn copy_ops(export: &std::path::Path, count: u64, synchronous: bool) -> Vec<NfsArgop4> {
    let mut ops = walk_to(export);
    ops.push(lookup("src"));
    ops.push(NfsArgop4::Savefh(()));
    ops.extend(walk_to(export));
    ops.push(lookup("dst"));
    ops.push(NfsArgop4::Getfh(()));
    ops.push(NfsArgop4::Copy(CopyArgs {
        synchronous,
        ..copy_op(Stateid4::ANONYMOUS, Stateid4::ANONYMOUS, 0, 0, count)
    }));
    ops
}

fn offload_status(res: &Compound4Res) -> Res4<sluice_xdr::nfs4::ops::OffloadStatusResOk> {
    match res.results.last() {
        Some(NfsResop4::OffloadStatus(r)) => r.clone(),
        other => panic!("{other:?} in {res:?}"),
    }
}

/// RFC 7862 §15.2, §15.9, §16.1, §4.8: an 80 MiB COPY with `ca_synchronous` false from a
/// client whose back channel is up is answered at once with a copy stateid; OFFLOAD_STATUS
/// follows it; CB_OFFLOAD brings the count, UNSTABLE and the write verifier; the answered
/// CB_OFFLOAD ends the stateid; the copy is byte for byte the source. A client without a
/// back channel gets the same COPY synchronously (short, one 32 MiB chunk), and a
/// synchronous request of the same size stays synchronous.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_copy_is_asynchronous_and_ends_in_cb_offload() {
    const LEN: usize = 80 << 20;
    let dirs = TestDirs::new("nfs42-offload");
    let export = dirs.export();
    let data = pattern(LEN);
    std::fs::write(export.join("src"), &data).unwrap();
    std::fs::write(export.join("dst"), b"").unwrap();
    let bound = sluice_server::bind(dirs.config()).await.unwrap();
    let addr = bound.local_addr().unwrap();
    let server = bound.server.clone();
    let _run = StopOnDrop(tokio::spawn(sluice_server::run_with(
        bound,
        Connections::default(),
    )));
    let (tx, mut offloads) = mpsc::unbounded_channel();
    let mut c = CbClient::connect(addr, &server, tx).await;

    let res = c.send(copy_ops(&export, 0, false)).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let n = res.results.len();
    let (NfsResop4::Getfh(Res4::Ok(dst_fh)), NfsResop4::Copy(CopyRes::Ok(copy))) =
        (&res.results[n - 2], &res.results[n - 1])
    else {
        panic!("{res:?}")
    };
    assert!(!copy.requirements.synchronous, "{copy:?}");
    assert_eq!(
        copy.response.callback_id.0.len(),
        1,
        "a copy stateid: {copy:?}"
    );
    let sid = copy.response.callback_id.0[0];
    assert_eq!(sid.other[4] & 0xC0, 0x40, "a copy stateid's mark");

    // OFFLOAD_STATUS while it runs or once done: never more than the file, and the
    // completion status only with the whole count.
    let res = c
        .send(vec![
            NfsArgop4::Putfh(dst_fh.clone()),
            NfsArgop4::OffloadStatus(sid),
        ])
        .await;
    match offload_status(&res) {
        Res4::Ok(s) if s.complete.0.is_empty() => assert!(s.count <= LEN as u64),
        Res4::Ok(s) => {
            assert_eq!(s.complete.0, vec![Nfsstat4::OK]);
            assert_eq!(s.count, LEN as u64);
        }
        // Already answered CB_OFFLOAD: the stateid is gone.
        Res4::Err(e) => assert_eq!(e, Nfsstat4::BAD_STATEID),
    }

    let cb = tokio::time::timeout(LIMIT, offloads.recv())
        .await
        .expect("CB_OFFLOAD in time")
        .unwrap();
    assert_eq!(cb.stateid, sid);
    assert_eq!(&cb.fh, dst_fh);
    let OffloadInfo4::Ok(w) = &cb.offload_info else {
        panic!("{cb:?}")
    };
    assert_eq!(w.count, LEN as u64);
    assert_eq!(w.committed, StableHow4::UNSTABLE);
    assert_eq!(w.writeverf, copy.response.writeverf);
    assert!(
        std::fs::read(export.join("dst")).unwrap() == data,
        "dst == src"
    );
    assert_eq!(
        sluice_server::stats::Gauges4::of(&server.nfs4).cb_offloads,
        1,
        "counted for the stats"
    );

    // The answered CB_OFFLOAD ends the copy stateid (§4.8): OFFLOAD_STATUS and
    // OFFLOAD_CANCEL no longer know it, nor a stateid that never was a copy's.
    tokio::time::timeout(LIMIT, async {
        while server.nfs4.state.lock().unwrap().copies_len() != 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the answer is taken");
    let mut unknown = sid;
    unknown.other[11] ^= 0xff;
    for s in [sid, unknown] {
        let res = c
            .send(vec![
                NfsArgop4::Putfh(dst_fh.clone()),
                NfsArgop4::OffloadStatus(s),
            ])
            .await;
        assert_eq!(res.status, Nfsstat4::BAD_STATEID, "{res:?}");
        let res = c
            .send(vec![
                NfsArgop4::Putfh(dst_fh.clone()),
                NfsArgop4::OffloadCancel(s),
            ])
            .await;
        assert_eq!(res.status, Nfsstat4::BAD_STATEID, "{res:?}");
    }

    // The same COPY asked synchronously: done synchronously, one chunk.
    let res = c.send(copy_ops(&export, 0, true)).await;
    let Some(NfsResop4::Copy(CopyRes::Ok(sync))) = res.results.last() else {
        panic!("{res:?}")
    };
    assert!(sync.requirements.synchronous && sync.response.callback_id.0.is_empty());
    assert_eq!(sync.response.count, sluice_server::backend::COPY_BYTES_MAX);

    // A client without a back channel: synchronous, whatever it allowed.
    let ts = support::TestServer::exporting(&[&export]).await;
    let mut v = V4::mount(&ts, "no back channel").await;
    let res = send42(&mut v, copy_ops(&export, 0, false)).await;
    let Some(NfsResop4::Copy(CopyRes::Ok(sync))) = res.results.last() else {
        panic!("{res:?}")
    };
    assert!(sync.requirements.synchronous && sync.response.callback_id.0.is_empty());
    assert_eq!(sync.response.count, sluice_server::backend::COPY_BYTES_MAX);
    assert!(offloads.try_recv().is_err(), "no other CB_OFFLOAD");
}
