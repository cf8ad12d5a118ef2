//! Delegations over TCP (RFC 8881 §10.2, §10.4, §18.6, §20.2): the real server and two
//! clients. The holder is the real client transport (`RpcClient`) with a callback service, so
//! the server has a back channel to recall over; the other client is a raw [`V4`] with none.
//!
//! - A sole reader with a working back channel gets a read delegation; one without a back
//!   channel gets none (OPEN_DELEGATE_NONE_EXT with a why, when it asked by want bits).
//! - A second client's OPEN for writing gets NFS4ERR_DELAY while the server sends CB_RECALL
//!   (the delegation stateid and the file handle); after DELEGRETURN it succeeds. REMOVE and
//!   SETATTR of a delegated file recall it the same way. The gauges and counters show it.
//! - A holder that never answers the CB_RECALL has its delegation revoked a lease after the
//!   recall went out; the conflicting OPEN then succeeds; the holder's SEQUENCE shows
//!   RECALLABLE_STATE_REVOKED, its stateid gets NFS4ERR_DELEG_REVOKED, FREE_STATEID clears it.
//!
//! - NFSv3 changes recall them too (`crate::recall`): a v3 WRITE, SETATTR, REMOVE, RENAME
//!   (either name), LINK or truncating CREATE of a delegated file answers NFS3ERR_JUKEBOX while
//!   the holder is sent CB_RECALL, and goes through after DELEGRETURN; v3 READ, GETATTR and
//!   COMMIT do not recall. With a holder that never answers, the v3 WRITE goes through once the
//!   delegation is revoked, a lease after the recall; a holder past its lease (a courtesy
//!   client) is expired at once. With no delegation the v3 path does not take the v4 state's
//!   lock at all.
//!
//! - One file with hard links in two directories has two handles (each names the directory it
//!   was found in) but is one file for delegations: a v4 OPEN for writing and a v3 SETATTR
//!   through the other name recall a read delegation, another client's GETATTR through the
//!   other name asks the write delegation's holder by CB_GETATTR; CB_RECALL and CB_GETATTR
//!   carry the handle the holder used.
//!
//! - NLM (NFSv3 locks, `sluice_server::nlm`: Delegations): an NLM LOCK or TEST that conflicts
//!   with a delegation (any, for an exclusive request; a write delegation, for a shared one) is
//!   dropped with no reply, counted, and CB_RECALL goes to the holder; after the holder's LOCK
//!   and DELEGRETURN the retry is answered and meets the holder's lock. No delegation is
//!   granted on a file an NFSv3 host holds an NLM lock on.
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
use sluice_xdr::nfs4::attrs::{num, AttrValues};
use sluice_xdr::nfs4::callback::{
    self as cb, CbArgop4, CbCompound4Args, CbCompound4Res, CbGetattrArgs, CbRecallArgs, CbResop4,
    CbSequenceResOk,
};
use sluice_xdr::nfs4::compound::{Compound4Args, Compound4Res, CompoundLimits};
use sluice_xdr::nfs4::ops::{
    CallbackSecParms4, CallbackSecParmsList, CommitArgs, CreateSessionArgs, Createhow4, NfsArgop4,
    NfsResop4, NfsSpaceLimit4, OpenDelegation4, OpenNoneDelegation4, Openflag4, ReadArgs, Res4,
    SetattrArgs, StateidList, WriteArgs, CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
    OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_ACCESS_WRITE,
    OPEN4_SHARE_WANT_READ_DELEG, OPEN4_SHARE_WANT_WRITE_DELEG,
    SEQ4_STATUS_RECALLABLE_STATE_REVOKED, WND4_NOT_SUPP_UPGRADE,
};
use sluice_xdr::nfs4::{self, NfsFh4, Nfsstat4, SessionId4, Stateid4, Utf8Str};
use sluice_xdr::procs::TimerClass;
use sluice_xdr::rpc::{AuthSys, OpaqueAuth};
use sluice_xdr::{Pack, Writer};
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::nfs4::*;
use support::*;
use tokio::sync::mpsc;

const LIMIT: Duration = Duration::from_secs(30);
const CB_PROGRAM: u32 = cb::PROGRAM_DEFAULT;

/// The holder's callback service: answers CB_NULL, CB_SEQUENCE, and CB_RECALL (reported on
/// `recalls`) unless `silent`, when a CB_COMPOUND with a CB_RECALL is never answered; and
/// CB_GETATTR (reported on `getattrs`) with `getattr`'s (size, change), or with the error
/// it holds.
struct Service {
    recalls: mpsc::UnboundedSender<CbRecallArgs>,
    silent: bool,
    getattrs: mpsc::UnboundedSender<CbGetattrArgs>,
    getattr: Arc<std::sync::Mutex<Result<(u64, u64), Nfsstat4>>>,
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
                        let _ = self.recalls.send(a.clone());
                        if self.silent {
                            std::future::pending::<()>().await;
                        }
                        results.push(CbResop4::Recall(Nfsstat4::OK));
                    }
                    CbArgop4::Getattr(a) => {
                        let _ = self.getattrs.send(a.clone());
                        let answer = *self.getattr.lock().unwrap();
                        results.push(CbResop4::Getattr(match answer {
                            Ok((size, change)) => Res4::Ok(
                                AttrValues {
                                    size: Some(size),
                                    change: Some(change),
                                    ..AttrValues::default()
                                }
                                .encode_masked(Some(&a.attr_request)),
                            ),
                            Err(e) => Res4::Err(e),
                        }));
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

/// A server on `dirs` with a lease of `lease`; its address and handle.
async fn start(
    dirs: &TestDirs,
    lease: Duration,
) -> (
    std::net::SocketAddr,
    Arc<sluice_server::service::Server>,
    std::net::SocketAddr,
    StopOnDrop,
) {
    let mut config = dirs.config();
    config.lease = lease;
    config.write_delegations = true;
    config.metrics = Some("127.0.0.1:0".parse().unwrap());
    let bound = sluice_server::bind(config).await.unwrap();
    let addr = bound.local_addr().unwrap();
    let metrics = bound.metrics.as_ref().unwrap().local_addr().unwrap();
    let server = bound.server.clone();
    let run = StopOnDrop(tokio::spawn(sluice_server::run_with(
        bound,
        Connections::default(),
    )));
    (addr, server, metrics, run)
}

/// The client that holds delegations: the real transport with a back channel.
struct Holder {
    rpc: RpcClient,
    /// Who its COMPOUNDs run as (AUTH_SYS root, unless made by [`Holder::connect_as`]).
    cred: OpaqueAuth,
    sid: SessionId4,
    seq: u32,
    recalls: mpsc::UnboundedReceiver<CbRecallArgs>,
    getattrs: mpsc::UnboundedReceiver<CbGetattrArgs>,
    /// What the holder answers CB_GETATTR with.
    getattr: Arc<std::sync::Mutex<Result<(u64, u64), Nfsstat4>>>,
}

impl Holder {
    /// Connects, sets up a session with a back channel, and waits until the server's probe
    /// has found the path up.
    async fn connect(
        addr: std::net::SocketAddr,
        server: &sluice_server::service::Server,
        silent: bool,
    ) -> Holder {
        Self::connect_as(addr, server, silent, root()).await
    }

    /// As [`Holder::connect`], its COMPOUNDs sent as `cred`.
    async fn connect_as(
        addr: std::net::SocketAddr,
        server: &sluice_server::service::Server,
        silent: bool,
        cred: OpaqueAuth,
    ) -> Holder {
        let (tx, recalls) = mpsc::unbounded_channel();
        let (gtx, getattrs) = mpsc::unbounded_channel();
        let getattr = Arc::new(std::sync::Mutex::new(Err(Nfsstat4::BADHANDLE)));
        let rpc = RpcClient::connect(
            addr,
            RpcConfig {
                callbacks: Some(Callbacks(Arc::new(Service {
                    recalls: tx,
                    silent,
                    getattrs: gtx,
                    getattr: getattr.clone(),
                }))),
                privileged_port: false,
                ..RpcConfig::default()
            },
        )
        .await
        .unwrap();
        let res = call(&rpc, vec![exchange_id_op(b"deleg holder")]).await;
        let Some(NfsResop4::ExchangeId(Res4::Ok(e))) = res.results.first() else {
            panic!("EXCHANGE_ID: {res:?}")
        };
        let sys = AuthSys {
            stamp: 1,
            machine_name: Bytes::from_static(b"holder"),
            uid: 0,
            gid: 0,
            gids: Vec::new(),
        };
        let res = call(
            &rpc,
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
        let mut h = Holder {
            rpc,
            cred,
            sid: cs.sessionid,
            seq: 1,
            recalls,
            getattrs,
            getattr,
        };
        // The probe's CB_SEQUENCE waits for our first SEQUENCE, which carries the
        // RECLAIM_COMPLETE a client sends before it opens (RFC 8881 §18.51.3).
        let res = h.send(vec![NfsArgop4::ReclaimComplete(false)]).await;
        assert_eq!(res.status, Nfsstat4::OK, "RECLAIM_COMPLETE: {res:?}");
        within("the back channel comes up", async {
            while server.nfs4.state.lock().unwrap().callback_path(&h.sid) != Some(PathState::Up) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        h
    }

    async fn send(&mut self, ops: Vec<NfsArgop4>) -> Compound4Res {
        let mut all = vec![sequence(self.sid, self.seq)];
        all.extend(ops);
        self.seq += 1;
        call_as(&self.rpc, &self.cred, all).await
    }

    /// OPEN of `name` in `export` for writing only, created with `mode` (how `tar`, `cp` and
    /// compilers create their outputs): the open stateid, the delegation and the handle.
    async fn create_write_only(
        &mut self,
        export: &Path,
        name: &str,
        mode: u32,
        want: u32,
    ) -> (Stateid4, OpenDelegation4, NfsFh4) {
        let mut open = open_op("holder", name, true, OPEN4_SHARE_ACCESS_WRITE | want, 0);
        if let NfsArgop4::Open(o) = &mut open {
            o.openhow = Openflag4::Create(Createhow4::Unchecked(mode_attrs(mode)));
        }
        let mut ops = walk_to(export);
        ops.extend([open, NfsArgop4::Getfh(())]);
        let res = self.send(ops).await;
        assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
        let n = res.results.len();
        let (NfsResop4::Open(Res4::Ok(o)), NfsResop4::Getfh(Res4::Ok(fh))) =
            (&res.results[n - 2], &res.results[n - 1])
        else {
            panic!("{res:?}")
        };
        (o.stateid, o.delegation.clone(), fh.clone())
    }

    /// OPEN of `name` in `export` for reading: the OPEN result's delegation and the handle.
    async fn open_read(
        &mut self,
        export: &Path,
        name: &str,
    ) -> (Stateid4, OpenDelegation4, NfsFh4) {
        let mut ops = walk_to(export);
        ops.push(open_op("holder", name, false, OPEN4_SHARE_ACCESS_READ, 0));
        ops.push(NfsArgop4::Getfh(()));
        let res = self.send(ops).await;
        assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
        let n = res.results.len();
        let (NfsResop4::Open(Res4::Ok(o)), NfsResop4::Getfh(Res4::Ok(fh))) =
            (&res.results[n - 2], &res.results[n - 1])
        else {
            panic!("{res:?}")
        };
        (o.stateid, o.delegation.clone(), fh.clone())
    }

    /// OPEN of `name` in `export` for reading and writing (`create`: created first).
    async fn open_both(
        &mut self,
        export: &Path,
        name: &str,
        create: bool,
    ) -> (Stateid4, OpenDelegation4, NfsFh4) {
        let mut ops = walk_to(export);
        ops.push(open_op("holder", name, create, OPEN4_SHARE_ACCESS_BOTH, 0));
        ops.push(NfsArgop4::Getfh(()));
        let res = self.send(ops).await;
        assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
        let n = res.results.len();
        let (NfsResop4::Open(Res4::Ok(o)), NfsResop4::Getfh(Res4::Ok(fh))) =
            (&res.results[n - 2], &res.results[n - 1])
        else {
            panic!("{res:?}")
        };
        (o.stateid, o.delegation.clone(), fh.clone())
    }

    async fn next_getattr(&mut self) -> CbGetattrArgs {
        tokio::time::timeout(LIMIT, self.getattrs.recv())
            .await
            .expect("a CB_GETATTR in time")
            .expect("the service lives")
    }

    async fn next_recall(&mut self) -> CbRecallArgs {
        tokio::time::timeout(LIMIT, self.recalls.recv())
            .await
            .expect("a CB_RECALL in time")
            .expect("the service lives")
    }
}

async fn call(rpc: &RpcClient, ops: Vec<NfsArgop4>) -> Compound4Res {
    call_as(rpc, &root(), ops).await
}

async fn call_as(rpc: &RpcClient, cred: &OpaqueAuth, ops: Vec<NfsArgop4>) -> Compound4Res {
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
        rpc.call(id, cred, w.into_segments(), TimerClass::Getattr),
    )
    .await
    .expect("COMPOUND answered in time")
    .expect("COMPOUND answered");
    let mut r = out.reply.results();
    Compound4Res::decode(&mut r, &CompoundLimits::default()).expect("COMPOUND4res")
}

/// AUTH_SYS as root (the export does not squash it): the holder may change the files.
fn root() -> OpaqueAuth {
    AuthSys {
        stamp: 1,
        machine_name: Bytes::from_static(b"holder"),
        uid: 0,
        gid: 0,
        gids: Vec::new(),
    }
    .to_opaque_auth()
}

async fn within<F: Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(LIMIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {LIMIT:?}"))
}

fn read_deleg(d: &OpenDelegation4) -> Stateid4 {
    match d {
        OpenDelegation4::Read(r) => r.stateid,
        other => panic!("no read delegation: {other:?}"),
    }
}

/// A second client (no back channel) connected through the test's raw RPC.
async fn other_client(addr: std::net::SocketAddr, owner: &str) -> V4 {
    V4::establish(Rpc::connect(addr).await, owner, chan()).await
}

fn gauges(server: &sluice_server::service::Server) -> sluice_server::stats::Gauges4 {
    sluice_server::stats::Gauges4::of(&server.nfs4)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sole_reader_is_recalled_by_a_writer_which_waits_with_delay_until_delegreturn() {
    let dirs = TestDirs::new("nfs4-deleg");
    std::fs::write(dirs.export().join("f"), b"old").unwrap();
    std::fs::write(dirs.export().join("g"), b"gone soon").unwrap();
    std::fs::write(dirs.export().join("h"), b"mode").unwrap();
    let (addr, server, metrics, _run) = start(&dirs, Duration::from_secs(90)).await;
    let export = dirs.export();
    let mut holder = Holder::connect(addr, &server, false).await;
    let (_open, d, fh) = holder.open_read(&export, "f").await;
    let deleg = read_deleg(&d);
    assert_eq!(gauges(&server).delegations_read, 1);
    // READ under the delegation stateid.
    let res = holder
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Read(ReadArgs {
                stateid: deleg,
                offset: 0,
                count: 16,
            }),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");

    // The writer's OPEN: DELAY, and the holder is sent CB_RECALL(stateid, fh).
    let mut writer = other_client(addr, "deleg writer").await;
    let r = writer
        .open(&export, "w", "f", false, OPEN4_SHARE_ACCESS_WRITE, 0)
        .await;
    assert_eq!(r.err(), Some(Nfsstat4::DELAY));
    let recall = holder.next_recall().await;
    assert_eq!((recall.stateid, &recall.fh), (deleg, &fh));
    // Retried before the return: still DELAY, and no second recall is sent.
    let r = writer
        .open(&export, "w", "f", false, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await;
    assert_eq!(r.err(), Some(Nfsstat4::DELAY));
    // The holder returns it; the writer's OPEN goes through and it writes.
    let res = holder
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Delegreturn(deleg),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let (o, _) = writer
        .open(&export, "w", "f", false, OPEN4_SHARE_ACCESS_WRITE, 0)
        .await
        .expect("the OPEN goes through after DELEGRETURN");
    assert!(
        matches!(o.delegation, OpenDelegation4::None),
        "no delegation to a writer"
    );
    assert!(holder.recalls.try_recv().is_err(), "one CB_RECALL only");
    // The stateid is gone.
    let res = holder
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Delegreturn(deleg),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::BAD_STATEID);

    // REMOVE by another client recalls too.
    let (_, d, gfh) = holder.open_read(&export, "g").await;
    let g = read_deleg(&d);
    let mut ops = walk_to(&export);
    ops.push(NfsArgop4::Remove(component("g")));
    assert_eq!(writer.send(ops.clone()).await.status, Nfsstat4::DELAY);
    assert_eq!(holder.next_recall().await.stateid, g);
    holder
        .send(vec![NfsArgop4::Putfh(gfh), NfsArgop4::Delegreturn(g)])
        .await;
    assert_eq!(writer.send(ops).await.status, Nfsstat4::OK);
    // And SETATTR (the mode) by another client.
    let (_, d, hfh) = holder.open_read(&export, "h").await;
    let h = read_deleg(&d);
    let setattr = vec![
        NfsArgop4::Putfh(hfh.clone()),
        NfsArgop4::Setattr(SetattrArgs {
            stateid: Stateid4::ANONYMOUS,
            obj_attributes: mode_attrs(0o600),
        }),
    ];
    assert_eq!(writer.send(setattr.clone()).await.status, Nfsstat4::DELAY);
    assert_eq!(holder.next_recall().await.stateid, h);
    // The holder's own SETATTR is no conflict.
    let own = vec![
        NfsArgop4::Putfh(hfh.clone()),
        NfsArgop4::Setattr(SetattrArgs {
            stateid: Stateid4::ANONYMOUS,
            obj_attributes: mode_attrs(0o640),
        }),
    ];
    assert_eq!(holder.send(own).await.status, Nfsstat4::OK);
    holder
        .send(vec![NfsArgop4::Putfh(hfh), NfsArgop4::Delegreturn(h)])
        .await;
    assert_eq!(writer.send(setattr).await.status, Nfsstat4::OK);

    // Counters and gauges, in both renderings. The holder's answer to the last CB_RECALL
    // travels apart from its DELEGRETURN, so the server may count it a moment later: wait for
    // it (bounded) rather than race it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while gauges(&server).recalls_answered < 3 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let g = gauges(&server);
    assert_eq!((g.delegations_read, g.recalls_sent), (0, 3));
    let prom = sluice_server::metrics::fetch(metrics, "/metrics")
        .await
        .unwrap();
    for line in [
        "sluice_nfs4_delegations{type=\"read\"} 0\n",
        "sluice_nfs4_recalls_sent_total 3\n",
        "sluice_nfs4_recalls_answered_total 3\n",
        "sluice_nfs4_delegations_revoked_total 0\n",
        "sluice_nfs4_op_calls_total{op=\"DELEGRETURN\"} 4\n",
    ] {
        assert!(prom.contains(line), "{line} in\n{prom}");
    }
    let text = sluice_server::metrics::fetch(metrics, "/stats")
        .await
        .unwrap();
    assert!(
        text.contains("nfs v4 delegations: 0 read, 0 write; recalls: 3 sent, 3 answered"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_delegation_without_a_back_channel() {
    let dirs = TestDirs::new("nfs4-deleg-noback");
    std::fs::write(dirs.export().join("f"), b"x").unwrap();
    let (addr, _server, _metrics, _run) = start(&dirs, Duration::from_secs(90)).await;
    let export = dirs.export();
    let mut c = other_client(addr, "no back channel").await;
    let (o, _) = c
        .open(&export, "r", "f", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .unwrap();
    assert_eq!(o.delegation, OpenDelegation4::None);
    // Asked for by want bits: NONE_EXT with the reason.
    let (o, _) = c
        .open(
            &export,
            "r2",
            "f",
            false,
            OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_WANT_READ_DELEG,
            0,
        )
        .await
        .unwrap();
    assert_eq!(
        o.delegation,
        OpenDelegation4::NoneExt(OpenNoneDelegation4::Resource(false))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_never_answers_is_revoked_a_lease_after_the_recall() {
    let lease = Duration::from_secs(3);
    let dirs = TestDirs::new("nfs4-deleg-revoke");
    std::fs::write(dirs.export().join("f"), b"x").unwrap();
    let (addr, server, _metrics, _run) = start(&dirs, lease).await;
    let export = dirs.export();
    let mut holder = Holder::connect(addr, &server, true).await;
    let (_open, d, fh) = holder.open_read(&export, "f").await;
    let deleg = read_deleg(&d);
    let mut writer = other_client(addr, "deleg writer").await;
    let r = writer
        .open(&export, "w", "f", false, OPEN4_SHARE_ACCESS_WRITE, 0)
        .await;
    assert_eq!(r.err(), Some(Nfsstat4::DELAY));
    holder.next_recall().await; // sent, and never answered
    let sent = Instant::now();
    // Both clients keep their leases; the writer retries until the OPEN goes through.
    let mut holder_flags = 0;
    within("the OPEN goes through after revocation", async {
        loop {
            let res = holder.send(vec![]).await;
            if let Some(NfsResop4::Sequence(Res4::Ok(ok))) = res.results.first() {
                holder_flags |= ok.status_flags;
            }
            match writer
                .open(&export, "w", "f", false, OPEN4_SHARE_ACCESS_WRITE, 0)
                .await
            {
                Ok(_) => return,
                Err(Nfsstat4::DELAY) => {}
                Err(e) => panic!("{e:?}"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    let waited = sent.elapsed();
    assert!(
        waited >= lease - Duration::from_millis(300),
        "revoked after the lease, not before: {waited:?}"
    );
    assert_eq!(gauges(&server).delegations_revoked, 1);
    // The holder hears of it.
    let res = holder.send(vec![]).await;
    let Some(NfsResop4::Sequence(Res4::Ok(ok))) = res.results.first() else {
        panic!("{res:?}")
    };
    assert_ne!(ok.status_flags & SEQ4_STATUS_RECALLABLE_STATE_REVOKED, 0);
    let _ = holder_flags;
    let res = holder
        .send(vec![NfsArgop4::TestStateid(StateidList(vec![deleg]))])
        .await;
    let Some(NfsResop4::TestStateid(Res4::Ok(list))) = res.results.get(1) else {
        panic!("{res:?}")
    };
    assert_eq!(list.0, vec![Nfsstat4::DELEG_REVOKED]);
    let res = holder
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Read(ReadArgs {
                stateid: deleg,
                offset: 0,
                count: 1,
            }),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::DELEG_REVOKED);
    let res = holder.send(vec![NfsArgop4::FreeStateid(deleg)]).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let res = holder.send(vec![]).await;
    let Some(NfsResop4::Sequence(Res4::Ok(ok))) = res.results.first() else {
        panic!("{res:?}")
    };
    assert_eq!(
        ok.status_flags & SEQ4_STATUS_RECALLABLE_STATE_REVOKED,
        0,
        "freed"
    );
}

// ----- NFSv3 callers ----------------------------------------------------------------------

mod v3 {
    pub use sluice_xdr::nfs3::*;
}
use v3::{Args3, Res3};

/// The status of any v3 procedure's results (the first word of all but NULL's).
fn status3(res: &Res3) -> v3::Nfsstat3 {
    let b = sluice_xdr::to_bytes(res);
    v3::Nfsstat3(u32::from_be_bytes(b[..4].try_into().unwrap()))
}

/// A v3 client of `export`: its connection and the export's root handle.
async fn v3_client(addr: std::net::SocketAddr, export: &Path) -> (Rpc, v3::NfsFh3) {
    let mut c = Rpc::connect(addr).await;
    let root = c.mnt_path(export).await;
    (c, root)
}

async fn v3_lookup(c: &mut Rpc, dir: &v3::NfsFh3, name: &str) -> v3::NfsFh3 {
    ok(support::lookup(c, dir, name).await).object
}

fn v3_setattr_mode(fh: &v3::NfsFh3, mode: u32) -> Args3 {
    Args3::Setattr(v3::SetattrArgs {
        object: fh.clone(),
        new_attributes: v3::Sattr3 {
            mode: Some(mode),
            ..Default::default()
        },
        guard: None,
    })
}

/// Each v3 change of a delegated file: JUKEBOX and one CB_RECALL; JUKEBOX again while the
/// recall is under way (no second CB_RECALL); after DELEGRETURN the same call goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nfsv3_changes_recall_delegations_with_jukebox_until_delegreturn() {
    let dirs = TestDirs::new("nfs4-deleg-v3");
    let export = dirs.export();
    for name in ["w", "s", "r", "m", "t", "l", "c", "keep"] {
        std::fs::write(export.join(name), format!("old {name}")).unwrap();
    }
    let (addr, server, _metrics, _run) = start(&dirs, Duration::from_secs(90)).await;
    let mut holder = Holder::connect(addr, &server, false).await;
    let (mut c, root) = v3_client(addr, &export).await;
    let wfh = v3_lookup(&mut c, &root, "w").await;
    let sfh = v3_lookup(&mut c, &root, "s").await;
    let lfh = v3_lookup(&mut c, &root, "l").await;
    let calls: Vec<(&str, Args3)> = vec![
        (
            "w",
            Args3::Write(v3::WriteArgs {
                file: wfh.clone(),
                offset: 0,
                count: 3,
                stable: v3::StableHow::FILE_SYNC,
                data: sluice_xdr::Payload::from(b"new".to_vec()),
            }),
        ),
        ("s", v3_setattr_mode(&sfh, 0o600)),
        (
            "r",
            Args3::Remove(v3::RemoveArgs {
                object: dirop(&root, "r"),
            }),
        ),
        (
            "m",
            Args3::Rename(v3::RenameArgs {
                from: dirop(&root, "m"),
                to: dirop(&root, "m2"),
            }),
        ),
        // The file a RENAME replaces.
        (
            "t",
            Args3::Rename(v3::RenameArgs {
                from: dirop(&root, "keep"),
                to: dirop(&root, "t"),
            }),
        ),
        (
            "l",
            Args3::Link(v3::LinkArgs {
                file: lfh.clone(),
                link: dirop(&root, "l2"),
            }),
        ),
        // CREATE UNCHECKED with a size over an existing file truncates it.
        (
            "c",
            Args3::Create(v3::CreateArgs {
                where_: dirop(&root, "c"),
                how: v3::CreateHow::Unchecked(v3::Sattr3 {
                    size: Some(0),
                    ..Default::default()
                }),
            }),
        ),
    ];
    for (name, args) in calls {
        let (_open, d, fh) = holder.open_read(&export, name).await;
        let deleg = read_deleg(&d);
        assert_eq!(
            status3(&c.nfs(args.clone()).await),
            v3::Nfsstat3::JUKEBOX,
            "v3 {name} while delegated"
        );
        let recall = holder.next_recall().await;
        assert_eq!(
            (recall.stateid, &recall.fh),
            (deleg, &fh),
            "recall for {name}"
        );
        assert_eq!(
            status3(&c.nfs(args.clone()).await),
            v3::Nfsstat3::JUKEBOX,
            "v3 {name} retried during the recall"
        );
        let res = holder
            .send(vec![NfsArgop4::Putfh(fh), NfsArgop4::Delegreturn(deleg)])
            .await;
        assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
        assert_eq!(
            status3(&c.nfs(args).await),
            v3::Nfsstat3::OK,
            "v3 {name} after DELEGRETURN"
        );
        assert!(
            holder.recalls.try_recv().is_err(),
            "one CB_RECALL for {name}"
        );
    }
    // The changes landed.
    assert_eq!(std::fs::read(export.join("w")).unwrap(), b"new w");
    assert!(!export.join("r").exists() && !export.join("m").exists());
    assert_eq!(std::fs::read(export.join("m2")).unwrap(), b"old m");
    assert_eq!(std::fs::read(export.join("t")).unwrap(), b"old keep");
    assert_eq!(std::fs::read(export.join("l2")).unwrap(), b"old l");
    assert_eq!(std::fs::read(export.join("c")).unwrap(), b"");
    let g = gauges(&server);
    assert_eq!(
        (g.delegations_read, g.recalls_sent, g.delegations_revoked),
        (0, 7, 0)
    );

    // READ, GETATTR and COMMIT of a delegated file are no conflict: no recall, no JUKEBOX.
    std::fs::write(export.join("ro"), b"read me").unwrap();
    let (_open, d, fh) = holder.open_read(&export, "ro").await;
    let deleg = read_deleg(&d);
    let rofh = v3_lookup(&mut c, &root, "ro").await;
    assert_eq!(
        &ok(read(&mut c, &rofh, 0, 64).await).data.to_vec()[..],
        b"read me"
    );
    ok(getattr(&mut c, &rofh).await);
    let commit = Args3::Commit(v3::CommitArgs {
        file: rofh.clone(),
        offset: 0,
        count: 0,
    });
    assert_eq!(status3(&c.nfs(commit).await), v3::Nfsstat3::OK);
    // A name that does not exist conflicts with nothing.
    assert_eq!(
        remove(&mut c, &root, "absent").await.status(),
        v3::Nfsstat3::NOENT
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(holder.recalls.try_recv().is_err(), "no CB_RECALL for reads");
    assert_eq!(gauges(&server).delegations_read, 1);
    // The holder still reads under its delegation.
    let res = holder
        .send(vec![
            NfsArgop4::Putfh(fh),
            NfsArgop4::Read(ReadArgs {
                stateid: deleg,
                offset: 0,
                count: 16,
            }),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
}

/// A holder that never answers: the v3 WRITE keeps getting JUKEBOX until the delegation is
/// revoked, a lease after the CB_RECALL went out; then it goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nfsv3_write_goes_through_once_an_unreturned_delegation_is_revoked() {
    let lease = Duration::from_secs(3);
    let dirs = TestDirs::new("nfs4-deleg-v3-revoke");
    let export = dirs.export();
    std::fs::write(export.join("f"), b"old").unwrap();
    let (addr, server, _metrics, _run) = start(&dirs, lease).await;
    let mut holder = Holder::connect(addr, &server, true).await;
    let (_open, d, _fh) = holder.open_read(&export, "f").await;
    read_deleg(&d);
    let (mut c, root) = v3_client(addr, &export).await;
    let fh = v3_lookup(&mut c, &root, "f").await;
    async fn w(c: &mut Rpc, fh: &v3::NfsFh3) -> v3::Nfsstat3 {
        write(c, fh, 0, b"new", v3::StableHow::FILE_SYNC)
            .await
            .status()
    }
    assert_eq!(w(&mut c, &fh).await, v3::Nfsstat3::JUKEBOX);
    holder.next_recall().await; // sent, and never answered
    let sent = Instant::now();
    within("the v3 WRITE goes through after revocation", async {
        loop {
            holder.send(vec![]).await; // the holder keeps its lease
            match w(&mut c, &fh).await {
                v3::Nfsstat3::OK => return,
                v3::Nfsstat3::JUKEBOX => {}
                other => panic!("{other:?}"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    let waited = sent.elapsed();
    assert!(
        waited >= lease - Duration::from_millis(300),
        "revoked after the lease, not before: {waited:?}"
    );
    assert_eq!(gauges(&server).delegations_revoked, 1);
    assert_eq!(std::fs::read(export.join("f")).unwrap(), b"new");
}

/// With no delegation anywhere the v3 gate is one atomic load: a v3 WRITE stream, a RENAME
/// and a REMOVE are answered while another thread holds the v4 state's lock (were the lock
/// taken, they would wait for its release, 30 s later). Once a delegation exists, the same
/// WRITE does wait for the lock (the check can fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_nfsv3_path_takes_no_v4_lock_when_nothing_is_delegated() {
    let dirs = TestDirs::new("nfs4-deleg-v3-nolock");
    let export = dirs.export();
    std::fs::write(export.join("f"), b"old").unwrap();
    std::fs::write(export.join("g"), b"g").unwrap();
    let (addr, server, _metrics, _run) = start(&dirs, Duration::from_secs(90)).await;
    let (mut c, root) = v3_client(addr, &export).await;
    let fh = v3_lookup(&mut c, &root, "f").await;

    let (release, held) = hold_state_lock(&server, LIMIT);
    let t = Instant::now();
    for i in 0..64u64 {
        let s = write(&mut c, &fh, i * 4096, &[7u8; 4096], v3::StableHow::UNSTABLE)
            .await
            .status();
        assert_eq!(s, v3::Nfsstat3::OK);
    }
    let rename = Args3::Rename(v3::RenameArgs {
        from: dirop(&root, "g"),
        to: dirop(&root, "g2"),
    });
    assert_eq!(status3(&c.nfs(rename).await), v3::Nfsstat3::OK);
    assert_eq!(remove(&mut c, &root, "g2").await.status(), v3::Nfsstat3::OK);
    let took = t.elapsed();
    release.send(()).unwrap();
    held.join().unwrap();
    assert!(
        took < Duration::from_secs(10),
        "v3 calls waited for the v4 lock: {took:?}"
    );

    // With a delegation the gate looks under the lock: the same WRITE now waits for it.
    let mut holder = Holder::connect(addr, &server, false).await;
    let (_open, d, _) = holder.open_read(&export, "f").await;
    read_deleg(&d);
    let hold = Duration::from_millis(500);
    let (_release, held) = hold_state_lock(&server, hold);
    let t = Instant::now();
    let s = write(&mut c, &fh, 0, &[1u8], v3::StableHow::UNSTABLE)
        .await
        .status();
    let took = t.elapsed();
    held.join().unwrap();
    assert_eq!(s, v3::Nfsstat3::JUKEBOX);
    assert!(
        took >= hold - Duration::from_millis(100),
        "the gate took the lock: {took:?}"
    );
}

/// Holds the v4 state's lock on another thread until told to (or `max` passes); returns once
/// it is held.
fn hold_state_lock(
    server: &Arc<sluice_server::service::Server>,
    max: Duration,
) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (locked_tx, locked_rx) = std::sync::mpsc::channel::<()>();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let server = server.clone();
    let held = std::thread::spawn(move || {
        let _guard = server.nfs4.state.lock().unwrap();
        locked_tx.send(()).unwrap();
        let _ = release_rx.recv_timeout(max);
    });
    locked_rx.recv().unwrap();
    (release_tx, held)
}

/// A holder whose lease ran out (a courtesy client) is expired at once by a conflicting v3
/// change, as by a v4 one: no CB_RECALL, no JUKEBOX.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nfsv3_write_expires_a_courtesy_holder_at_once() {
    let lease = Duration::from_secs(2);
    let dirs = TestDirs::new("nfs4-deleg-v3-courtesy");
    let export = dirs.export();
    std::fs::write(export.join("f"), b"old").unwrap();
    let (addr, server, _metrics, _run) = start(&dirs, lease).await;
    let mut holder = Holder::connect(addr, &server, false).await;
    let (_open, d, _fh) = holder.open_read(&export, "f").await;
    read_deleg(&d);
    let (mut c, root) = v3_client(addr, &export).await;
    let fh = v3_lookup(&mut c, &root, "f").await;
    // The holder stops renewing; past its lease it is a courtesy client.
    tokio::time::sleep(lease + Duration::from_millis(700)).await;
    assert_eq!(
        gauges(&server).delegations_read,
        1,
        "kept while no one conflicts"
    );
    let s = write(&mut c, &fh, 0, b"new", v3::StableHow::FILE_SYNC)
        .await
        .status();
    assert_eq!(s, v3::Nfsstat3::OK);
    let g = gauges(&server);
    assert_eq!((g.delegations_read, g.recalls_sent), (0, 0));
    assert!(holder.recalls.try_recv().is_err(), "no CB_RECALL");
    assert_eq!(std::fs::read(export.join("f")).unwrap(), b"new");
}

/// GETATTR of size and change on `fh` by `c`: the status, and the values when OK.
async fn size_change(c: &mut V4, fh: &NfsFh4) -> Result<(u64, u64), Nfsstat4> {
    let res = c
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Getattr(nfs4::Bitmap4::from_bits(&[num::CHANGE, num::SIZE])),
        ])
        .await;
    match res.results.get(2) {
        Some(r @ NfsResop4::Getattr(Res4::Ok(_))) => {
            let v = attrs(r);
            Ok((v.size.unwrap(), v.change.unwrap()))
        }
        _ => Err(res.status),
    }
}

fn write_deleg(d: &OpenDelegation4) -> Stateid4 {
    match d {
        OpenDelegation4::Write(w) => {
            assert_eq!(
                w.space_limit,
                NfsSpaceLimit4::Size(u64::MAX),
                "no space limit"
            );
            w.stateid
        }
        other => panic!("no write delegation: {other:?}"),
    }
}

/// Write delegations (RFC 8881 §10.4, §10.4.3, §20.1): granted to a sole opener for reading
/// and writing; the holder writes under it; another client's GETATTR of size/change gets
/// NFS4ERR_DELAY while a CB_GETATTR asks the holder, then the holder's size and a change that
/// moved on, without a recall; another client's OPEN for reading recalls it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_delegation_answers_getattrs_by_cb_getattr_and_a_reader_recalls_it() {
    let dirs = TestDirs::new("nfs4-wdeleg");
    std::fs::write(dirs.export().join("f"), b"0123456789").unwrap();
    let (addr, server, metrics, _run) = start(&dirs, Duration::from_secs(90)).await;
    let export = dirs.export();
    let mut holder = Holder::connect(addr, &server, false).await;
    // A read-only open gets a read delegation, not a write one (write-only opens:
    // `a_write_only_create_gets_a_write_delegation_and_a_recall_loses_nothing`).
    let (_, d, fh) = holder.open_read(&export, "f").await;
    let r = read_deleg(&d);
    holder
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Delegreturn(r),
        ])
        .await;
    let (_, d, fh) = holder.open_both(&export, "f", false).await;
    let w = write_deleg(&d);
    let g = gauges(&server);
    assert_eq!((g.delegations_read, g.delegations_write), (0, 1));
    // The holder writes and reads under its delegation stateid.
    let res = holder
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Write(sluice_xdr::nfs4::ops::WriteArgs {
                stateid: w,
                offset: 10,
                stable: sluice_xdr::nfs4::StableHow4::FILE_SYNC,
                data: Bytes::from_static(b"ab").into(),
            }),
            NfsArgop4::Read(ReadArgs {
                stateid: w,
                offset: 0,
                count: 64,
            }),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    // Its own GETATTR: no callback.
    let (server_size, server_change) = {
        let res = holder
            .send(vec![
                NfsArgop4::Putfh(fh.clone()),
                NfsArgop4::Getattr(nfs4::Bitmap4::from_bits(&[num::CHANGE, num::SIZE])),
            ])
            .await;
        let v = attrs(&res.results[2]);
        (v.size.unwrap(), v.change.unwrap())
    };
    assert_eq!(server_size, 12);
    assert!(holder.getattrs.try_recv().is_err());

    // Another client stats it: DELAY, CB_GETATTR(fh, {change, size}); the retry gets the
    // holder's answer: it has 4096 bytes cached, so the change moves on. No recall.
    let mut other = other_client(addr, "stat-er").await;
    *holder.getattr.lock().unwrap() = Ok((4096, server_change + 1));
    assert_eq!(size_change(&mut other, &fh).await, Err(Nfsstat4::DELAY));
    let asked = holder.next_getattr().await;
    assert_eq!(asked.fh, fh);
    assert!(asked.attr_request.contains(num::SIZE) && asked.attr_request.contains(num::CHANGE));
    let seen = within("the retried GETATTR is answered", async {
        loop {
            match size_change(&mut other, &fh).await {
                Ok(v) => return v,
                Err(Nfsstat4::DELAY) => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(e) => panic!("{e:?}"),
            }
        }
    })
    .await;
    assert_eq!(seen.0, 4096, "the holder's size");
    assert!(seen.1 > server_change, "the change moved on: {seen:?}");
    assert!(
        holder.recalls.try_recv().is_err(),
        "no recall for a GETATTR"
    );
    // Other attributes need no callback.
    let res = other
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Getattr(nfs4::Bitmap4::from_bits(&[num::MODE])),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OK);

    // Another client's OPEN for reading: DELAY and CB_RECALL; after DELEGRETURN it opens and
    // the server's own attributes are back.
    let r = other
        .open(&export, "r", "f", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await;
    assert_eq!(r.err(), Some(Nfsstat4::DELAY));
    assert_eq!(holder.next_recall().await.stateid, w);
    assert_eq!(
        size_change(&mut other, &fh).await,
        Err(Nfsstat4::DELAY),
        "recalling"
    );
    let res = holder
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Delegreturn(w),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    other
        .open(&export, "r", "f", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .expect("the OPEN goes through after DELEGRETURN");
    assert_eq!(size_change(&mut other, &fh).await.unwrap().0, 12);
    // Recently recalled, and now opened by another: no new write delegation.
    let (_, d, _) = holder.open_both(&export, "f", false).await;
    assert!(matches!(d, OpenDelegation4::None), "{d:?}");

    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while gauges(&server).recalls_answered < 1 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let g = gauges(&server);
    assert_eq!((g.cb_getattr_sent, g.cb_getattr_answered), (1, 1));
    assert_eq!((g.delegations_write, g.recalls_sent), (0, 1));
    let prom = sluice_server::metrics::fetch(metrics, "/metrics")
        .await
        .unwrap();
    for line in [
        "sluice_nfs4_cb_getattr_sent_total 1\n",
        "sluice_nfs4_cb_getattr_answered_total 1\n",
        "sluice_nfs4_delegations{type=\"write\"} 0\n",
    ] {
        assert!(prom.contains(line), "{line} in\n{prom}");
    }
    let text = sluice_server::metrics::fetch(metrics, "/stats")
        .await
        .unwrap();
    assert!(text.contains("CB_GETATTR: 1 sent, 1 answered"), "{text}");
}

/// A holder that answers CB_GETATTR with an error loses the delegation to a recall; a writer
/// from another client recalls it too; a server with write delegations off grants none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_cb_getattr_recalls_and_write_delegations_can_be_turned_off() {
    let dirs = TestDirs::new("nfs4-wdeleg-fail");
    std::fs::write(dirs.export().join("f"), b"x").unwrap();
    std::fs::write(dirs.export().join("g"), b"y").unwrap();
    let (addr, server, _metrics, _run) = start(&dirs, Duration::from_secs(90)).await;
    let export = dirs.export();
    let mut holder = Holder::connect(addr, &server, false).await;
    let (_, d, fh) = holder.open_both(&export, "f", false).await;
    let w = write_deleg(&d);
    let mut other = other_client(addr, "stat-er").await;
    *holder.getattr.lock().unwrap() = Err(Nfsstat4::SERVERFAULT);
    assert_eq!(size_change(&mut other, &fh).await, Err(Nfsstat4::DELAY));
    holder.next_getattr().await;
    assert_eq!(holder.next_recall().await.stateid, w, "recalled instead");
    assert_eq!(size_change(&mut other, &fh).await, Err(Nfsstat4::DELAY));
    holder
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Delegreturn(w),
        ])
        .await;
    assert_eq!(size_change(&mut other, &fh).await.unwrap().0, 1);

    // A WRITE of another client (anonymous stateid) recalls a write delegation.
    let (_, d, gfh) = holder.open_both(&export, "g", false).await;
    let wg = write_deleg(&d);
    let write = vec![
        NfsArgop4::Putfh(gfh.clone()),
        NfsArgop4::Write(sluice_xdr::nfs4::ops::WriteArgs {
            stateid: Stateid4::ANONYMOUS,
            offset: 0,
            stable: sluice_xdr::nfs4::StableHow4::FILE_SYNC,
            data: Bytes::from_static(b"z").into(),
        }),
    ];
    assert_eq!(other.send(write.clone()).await.status, Nfsstat4::DELAY);
    assert_eq!(holder.next_recall().await.stateid, wg);
    holder
        .send(vec![NfsArgop4::Putfh(gfh), NfsArgop4::Delegreturn(wg)])
        .await;
    assert_eq!(other.send(write).await.status, Nfsstat4::OK);
    drop(holder);

    // With --no-write-delegations (they are on by default).
    let dirs = TestDirs::new("nfs4-wdeleg-off");
    std::fs::write(dirs.export().join("f"), b"x").unwrap();
    let mut config = dirs.config();
    assert!(config.write_delegations, "on by default");
    config.write_delegations = false;
    let bound = sluice_server::bind(config).await.unwrap();
    let addr = bound.local_addr().unwrap();
    let server = bound.server.clone();
    let _run = StopOnDrop(tokio::spawn(sluice_server::run_with(
        bound,
        Connections::default(),
    )));
    let mut holder = Holder::connect(addr, &server, false).await;
    let (_, d, _) = holder.open_both(&dirs.export(), "f", false).await;
    assert!(matches!(d, OpenDelegation4::None), "{d:?}");
}

/// Hard links `a/f` and `b/f` are one file for delegations (module notes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegation_is_recalled_by_a_conflict_through_another_hard_link() {
    let dirs = TestDirs::new("nfs4-deleg-links");
    let export = dirs.export();
    for d in ["a", "b"] {
        std::fs::create_dir(export.join(d)).unwrap();
    }
    for name in ["f", "g", "h"] {
        std::fs::write(export.join("a").join(name), b"0123456789").unwrap();
        std::fs::hard_link(export.join("a").join(name), export.join("b").join(name)).unwrap();
    }
    let (addr, server, _metrics, _run) = start(&dirs, Duration::from_secs(90)).await;
    let (dir_a, dir_b) = (export.join("a"), export.join("b"));
    let mut holder = Holder::connect(addr, &server, false).await;
    let mut writer = other_client(addr, "link writer").await;

    // A v4 OPEN for writing through b/f: DELAY, CB_RECALL of the holder's handle (a/f).
    let (_, d, fa) = holder.open_read(&dir_a, "f").await;
    let deleg = read_deleg(&d);
    let r = writer
        .open(&dir_b, "w", "f", false, OPEN4_SHARE_ACCESS_WRITE, 0)
        .await;
    assert_eq!(r.err(), Some(Nfsstat4::DELAY));
    let recall = holder.next_recall().await;
    assert_eq!((recall.stateid, &recall.fh), (deleg, &fa));
    let res = holder
        .send(vec![NfsArgop4::Putfh(fa), NfsArgop4::Delegreturn(deleg)])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let (_, fb) = writer
        .open(&dir_b, "w", "f", false, OPEN4_SHARE_ACCESS_WRITE, 0)
        .await
        .expect("the OPEN goes through after DELEGRETURN");

    // A v3 SETATTR through b/g: JUKEBOX and a CB_RECALL of a/g.
    let (_, d, ga) = holder.open_read(&dir_a, "g").await;
    let deleg = read_deleg(&d);
    let (mut c, root) = v3_client(addr, &export).await;
    let b3 = v3_lookup(&mut c, &root, "b").await;
    let gb3 = v3_lookup(&mut c, &b3, "g").await;
    assert_eq!(
        status3(&c.nfs(v3_setattr_mode(&gb3, 0o600)).await),
        v3::Nfsstat3::JUKEBOX
    );
    let recall = holder.next_recall().await;
    assert_eq!((recall.stateid, &recall.fh), (deleg, &ga));
    holder
        .send(vec![NfsArgop4::Putfh(ga), NfsArgop4::Delegreturn(deleg)])
        .await;
    assert_eq!(
        status3(&c.nfs(v3_setattr_mode(&gb3, 0o600)).await),
        v3::Nfsstat3::OK
    );

    // A write delegation of a/h: another client's GETATTR of b/h asks the holder about a/h.
    let (_, d, ha) = holder.open_both(&dir_a, "h", false).await;
    let w = write_deleg(&d);
    let mut hb = walk_to(&dir_b);
    hb.extend([support::nfs4::lookup("h"), NfsArgop4::Getfh(())]);
    let res = writer.send(hb).await;
    let Some(NfsResop4::Getfh(Res4::Ok(hb))) = res.results.last() else {
        panic!("{res:?}")
    };
    assert_ne!(hb, &ha, "two names, two handles");
    assert_ne!(fb, hb.clone());
    assert_eq!(size_change(&mut writer, hb).await, Err(Nfsstat4::DELAY));
    assert_eq!(holder.next_getattr().await.fh, ha);
    holder
        .send(vec![NfsArgop4::Putfh(ha), NfsArgop4::Delegreturn(w)])
        .await;
}

/// A write-only OPEN that creates a file (what `tar`, `cp` and compilers send) gets a write
/// delegation when the client may read the file too (`delegations::table`, what is granted).
/// The holder writes under it; another client's OPEN for reading gets NFS4ERR_DELAY and the
/// holder CB_RECALL; the holder flushes (WRITE and COMMIT under the recalled delegation)
/// before its DELEGRETURN, and the reader then sees every byte. A v3 WRITE recalls such a
/// delegation as it does any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_only_create_gets_a_write_delegation_and_a_recall_loses_nothing() {
    let dirs = TestDirs::new("nfs4-wdeleg-creat");
    let export = dirs.export();
    let (addr, server, _metrics, _run) = start(&dirs, Duration::from_secs(90)).await;
    let mut holder = Holder::connect(addr, &server, false).await;
    let (open, d, fh) = holder.create_write_only(&export, "out.o", 0o644, 0).await;
    let w = write_deleg(&d);
    let g = gauges(&server);
    assert_eq!((g.delegations_read, g.delegations_write), (0, 1));
    // Cached writes: the holder sends some now, the rest when recalled.
    let write = |offset, data: &'static [u8]| {
        vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Write(WriteArgs {
                stateid: w,
                offset,
                stable: sluice_xdr::nfs4::StableHow4::UNSTABLE,
                data: Bytes::from_static(data).into(),
            }),
        ]
    };
    assert_eq!(holder.send(write(0, b"hello")).await.status, Nfsstat4::OK);
    // It may read under it too, though it opened for writing only.
    let res = holder
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Read(ReadArgs {
                stateid: w,
                offset: 0,
                count: 64,
            }),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");

    // Another client opens it for reading: DELAY, CB_RECALL.
    let mut reader = other_client(addr, "reader").await;
    let r = reader
        .open(&export, "r", "out.o", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await;
    assert_eq!(r.err(), Some(Nfsstat4::DELAY));
    let recall = holder.next_recall().await;
    assert_eq!((recall.stateid, &recall.fh), (w, &fh));
    // The holder answers as a client must: its dirty data, a COMMIT, then DELEGRETURN and
    // CLOSE. The recalled delegation still covers the flush.
    assert_eq!(holder.send(write(5, b" world")).await.status, Nfsstat4::OK);
    let res = holder
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Commit(CommitArgs {
                offset: 0,
                count: 0,
            }),
            NfsArgop4::Delegreturn(w),
            close_op(open),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let (o, rfh) = reader
        .open(&export, "r", "out.o", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .expect("the OPEN goes through after DELEGRETURN");
    let res = reader
        .send(vec![
            NfsArgop4::Putfh(rfh),
            NfsArgop4::Read(ReadArgs {
                stateid: o.stateid,
                offset: 0,
                count: 64,
            }),
        ])
        .await;
    let Some(NfsResop4::Read(Res4::Ok(data))) = res.results.get(2) else {
        panic!("{res:?}")
    };
    assert_eq!(&data.data.to_vec()[..], b"hello world", "nothing lost");
    assert_eq!(std::fs::read(export.join("out.o")).unwrap(), b"hello world");

    // A v3 WRITE recalls one the same way: JUKEBOX until the DELEGRETURN.
    let (_, d, fh2) = holder.create_write_only(&export, "out2.o", 0o644, 0).await;
    let w2 = write_deleg(&d);
    let (mut c, root3) = v3_client(addr, &export).await;
    let fh3 = v3_lookup(&mut c, &root3, "out2.o").await;
    let write3 = Args3::Write(v3::WriteArgs {
        file: fh3,
        offset: 0,
        count: 2,
        stable: v3::StableHow::FILE_SYNC,
        data: sluice_xdr::Payload::from(b"v3".to_vec()),
    });
    assert_eq!(status3(&c.nfs(write3.clone()).await), v3::Nfsstat3::JUKEBOX);
    assert_eq!(holder.next_recall().await.stateid, w2);
    let res = holder
        .send(vec![NfsArgop4::Putfh(fh2), NfsArgop4::Delegreturn(w2)])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    assert_eq!(status3(&c.nfs(write3).await), v3::Nfsstat3::OK);
}

/// A write-only OPEN of a client that may not read the file (created with mode 0200, by a
/// caller that is not root: the server switches to its credentials) gets no delegation,
/// WND4_NOT_SUPP_UPGRADE when asked by want bits; the OPEN itself goes through (its creator
/// may write it). The same client gets one for a file it may read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_write_delegation_to_a_write_only_open_that_may_not_read() {
    use std::os::unix::fs::PermissionsExt;
    let dirs = TestDirs::new("nfs4-wdeleg-noread");
    let export = dirs.export();
    std::fs::set_permissions(&export, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (addr, server, _metrics, _run) = start(&dirs, Duration::from_secs(90)).await;
    let mut holder = Holder::connect_as(addr, &server, false, auth_sys(1000, 1000)).await;
    let (_, d, _) = holder.create_write_only(&export, "wo", 0o200, 0).await;
    assert_eq!(d, OpenDelegation4::None);
    let (_, d, _) = holder
        .create_write_only(&export, "wo", 0o200, OPEN4_SHARE_WANT_WRITE_DELEG)
        .await;
    assert_eq!(
        d,
        OpenDelegation4::NoneExt(OpenNoneDelegation4::Why(WND4_NOT_SUPP_UPGRADE))
    );
    let g = gauges(&server);
    assert_eq!((g.delegations_read, g.delegations_write), (0, 0));
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(export.join("wo")).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (1000, 0o200));
    // Mode 0600: it may read its file, so it gets the delegation.
    let (_, d, _) = holder.create_write_only(&export, "rw", 0o600, 0).await;
    write_deleg(&d);
}

// ----- NLM (NFSv3 locks) and delegations (`sluice_server::nlm`: Delegations) -----

use sluice_xdr::nfs4::ops::{LockArgs, LockRes, Locker4, OpenToLockOwner4, WRITE_LT};
use sluice_xdr::nfs4::{LockOwner4, Opaque4};
use sluice_xdr::nlm::{
    self as nlm4, CallerName, Netobj, Nlm4Lock, Nlm4LockArgs, Nlm4Res, Nlm4Stats, Nlm4TestArgs,
    Nlm4TestRes, Nlm4TestRply, Nlm4UnlockArgs, NlmFh,
};

/// How long the connection is watched for a reply to a call the server has already counted
/// as dropped: a reply would have been written right after that.
const NO_REPLY_WAIT: Duration = Duration::from_millis(300);

fn nlm_lock(fh: &v3::NfsFh3, svid: u32) -> Nlm4Lock {
    Nlm4Lock {
        caller_name: CallerName(Bytes::from_static(b"v3host")),
        fh: NlmFh(fh.0.clone()),
        oh: Netobj(Bytes::from(format!("{svid}@v3host"))),
        svid,
        l_offset: 0,
        l_len: 0,
    }
}

fn nlm_lock_args(fh: &v3::NfsFh3, svid: u32, exclusive: bool) -> Nlm4LockArgs {
    Nlm4LockArgs {
        cookie: Netobj(Bytes::from_static(b"cookie")),
        block: false,
        exclusive,
        alock: nlm_lock(fh, svid),
        reclaim: false,
        state: 1,
    }
}

fn nlm_test_args(fh: &v3::NfsFh3, svid: u32, exclusive: bool) -> Nlm4TestArgs {
    Nlm4TestArgs {
        cookie: Netobj::default(),
        exclusive,
        alock: nlm_lock(fh, svid),
    }
}

/// One NLM call answered: its results.
async fn nlm_call(c: &mut Rpc, proc_: u32, args: &impl Pack) -> Bytes {
    let r = c
        .call(
            nlm4::PROGRAM,
            nlm4::VERSION,
            proc_,
            &sluice_xdr::to_bytes(args),
        )
        .await;
    r.results
}

/// One NLM call that the server drops: it counts the drop, and no reply comes (the
/// connection stays up).
async fn nlm_dropped(
    c: &mut Rpc,
    server: &sluice_server::service::Server,
    proc_: u32,
    args: &impl Pack,
) {
    let before = recall_drops(server);
    let msg = call_message(
        c.next_xid(),
        nlm4::PROGRAM,
        nlm4::VERSION,
        proc_,
        &c.cred.clone(),
        &sluice_xdr::to_bytes(args),
    );
    c.send_message(&msg).await;
    within("the server drops the call", async {
        while recall_drops(server) == before {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(recall_drops(server), before + 1);
    assert!(
        c.recv_within(NO_REPLY_WAIT).await.is_none(),
        "no reply to a dropped NLM call, and the connection stays up"
    );
}

/// NLM LOCK answered: its status.
async fn nlm_lock_stat(c: &mut Rpc, a: &Nlm4LockArgs) -> Nlm4Stats {
    let r = nlm_call(c, nlm4::proc_::LOCK, a).await;
    let r: Nlm4Res = sluice_xdr::from_bytes(&r).expect("nlm4_res");
    r.stat
}

/// NLM TEST answered: its result.
async fn nlm_test_stat(c: &mut Rpc, a: &Nlm4TestArgs) -> Nlm4TestRply {
    let r = nlm_call(c, nlm4::proc_::TEST, a).await;
    let r: Nlm4TestRes = sluice_xdr::from_bytes(&r).expect("nlm4_testres");
    r.stat
}

fn recall_drops(server: &sluice_server::service::Server) -> u64 {
    server
        .nlm
        .recall_drops
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// A v4 LOCK (write, whole file) of the holder's open `open` of `fh`.
fn v4_write_lock(fh: &NfsFh4, open: Stateid4) -> Vec<NfsArgop4> {
    vec![
        NfsArgop4::Putfh(fh.clone()),
        NfsArgop4::Lock(LockArgs {
            locktype: WRITE_LT,
            reclaim: false,
            offset: 0,
            length: u64::MAX,
            locker: Locker4::New(OpenToLockOwner4 {
                open_seqid: 0,
                open_stateid: open,
                lock_seqid: 0,
                lock_owner: LockOwner4 {
                    clientid: 0,
                    owner: Opaque4(Bytes::from_static(b"holder's process")),
                },
            }),
        }),
    ]
}

/// An NLM LOCK or TEST of a file another client holds a write delegation of is dropped (no
/// reply) while CB_RECALL goes to the holder, and counted; the holder sends its lock (as the
/// Linux client does before DELEGRETURN) and returns the delegation; the retry is answered
/// and meets the holder's lock. A read delegation lets a shared NLM lock and TEST through
/// and recalls for an exclusive one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nlm_request_on_a_delegated_file_is_dropped_until_delegreturn() {
    let dirs = TestDirs::new("nfs4-deleg-nlm");
    let export = dirs.export();
    std::fs::write(export.join("w"), b"w").unwrap();
    std::fs::write(export.join("r"), b"r").unwrap();
    let (addr, server, _metrics, _run) = start(&dirs, Duration::from_secs(90)).await;
    let mut holder = Holder::connect(addr, &server, false).await;
    let (mut c, root) = v3_client(addr, &export).await;
    let wfh3 = v3_lookup(&mut c, &root, "w").await;

    // A write delegation: LOCK (shared, too) and TEST are dropped; one CB_RECALL.
    let (open, d, wfh4) = holder.open_both(&export, "w", false).await;
    let deleg = write_deleg(&d);
    nlm_dropped(
        &mut c,
        &server,
        nlm4::proc_::LOCK,
        &nlm_lock_args(&wfh3, 1, true),
    )
    .await;
    let recall = holder.next_recall().await;
    assert_eq!((recall.stateid, &recall.fh), (deleg, &wfh4));
    nlm_dropped(
        &mut c,
        &server,
        nlm4::proc_::LOCK,
        &nlm_lock_args(&wfh3, 1, false),
    )
    .await;
    nlm_dropped(
        &mut c,
        &server,
        nlm4::proc_::TEST,
        &nlm_test_args(&wfh3, 1, false),
    )
    .await;
    assert_eq!(recall_drops(&server), 3);
    // What the Linux client does on the recall: its local lock to the server, then back.
    let res = holder.send(v4_write_lock(&wfh4, open)).await;
    assert!(
        matches!(&res.results[2], NfsResop4::Lock(LockRes::Ok(_))),
        "{res:?}"
    );
    let res = holder
        .send(vec![
            NfsArgop4::Putfh(wfh4.clone()),
            NfsArgop4::Delegreturn(deleg),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    // The retries are answered, and meet the holder's lock.
    assert_eq!(
        nlm_lock_stat(&mut c, &nlm_lock_args(&wfh3, 1, true)).await,
        Nlm4Stats::DENIED
    );
    match nlm_test_stat(&mut c, &nlm_test_args(&wfh3, 1, false)).await {
        Nlm4TestRply::Denied(h) => {
            assert_eq!(&h.oh.0[..], b"holder's process");
            assert!(h.exclusive);
        }
        other => panic!("TEST after DELEGRETURN: {other:?}"),
    }
    assert_eq!(
        recall_drops(&server),
        3,
        "nothing dropped after DELEGRETURN"
    );
    assert!(holder.recalls.try_recv().is_err(), "one CB_RECALL");

    // A read delegation: shared LOCK and TEST go through; an exclusive LOCK recalls.
    let rfh3 = v3_lookup(&mut c, &root, "r").await;
    let (_open, d, rfh4) = holder.open_read(&export, "r").await;
    let rdeleg = read_deleg(&d);
    assert_eq!(
        nlm_test_stat(&mut c, &nlm_test_args(&rfh3, 2, false))
            .await
            .stat(),
        Nlm4Stats::GRANTED
    );
    assert_eq!(
        nlm_lock_stat(&mut c, &nlm_lock_args(&rfh3, 2, false)).await,
        Nlm4Stats::GRANTED
    );
    nlm_dropped(
        &mut c,
        &server,
        nlm4::proc_::LOCK,
        &nlm_lock_args(&rfh3, 3, true),
    )
    .await;
    let recall = holder.next_recall().await;
    assert_eq!((recall.stateid, &recall.fh), (rdeleg, &rfh4));
    assert_eq!(recall_drops(&server), 4);
    let res = holder
        .send(vec![NfsArgop4::Putfh(rfh4), NfsArgop4::Delegreturn(rdeleg)])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    // The retry meets the host's own shared lock of another process (svid 2).
    assert_eq!(
        nlm_lock_stat(&mut c, &nlm_lock_args(&rfh3, 3, true)).await,
        Nlm4Stats::DENIED
    );
    assert_eq!(
        nlm_lock_stat(&mut c, &nlm_lock_args(&rfh3, 2, true)).await,
        Nlm4Stats::GRANTED,
        "svid 2 upgrades its own lock"
    );
}

/// No delegation is granted on a file an NFSv3 host holds an NLM lock on; once unlocked, the
/// same OPEN gets one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_delegation_on_a_file_with_an_nlm_lock() {
    let dirs = TestDirs::new("nfs4-deleg-nlm-grant");
    let export = dirs.export();
    std::fs::write(export.join("f"), b"f").unwrap();
    let (addr, server, _metrics, _run) = start(&dirs, Duration::from_secs(90)).await;
    let mut holder = Holder::connect(addr, &server, false).await;
    let (mut c, root) = v3_client(addr, &export).await;
    let fh3 = v3_lookup(&mut c, &root, "f").await;
    assert_eq!(
        nlm_lock_stat(&mut c, &nlm_lock_args(&fh3, 1, false)).await,
        Nlm4Stats::GRANTED
    );
    let (_open, d, _fh) = holder.open_read(&export, "f").await;
    assert!(
        matches!(d, OpenDelegation4::None | OpenDelegation4::NoneExt(_)),
        "a read open beside a shared NLM lock: {d:?}"
    );
    let (_open, d, _fh) = holder.open_both(&export, "f", false).await;
    assert!(
        matches!(d, OpenDelegation4::None | OpenDelegation4::NoneExt(_)),
        "a read-write open beside a shared NLM lock: {d:?}"
    );
    let unlock = Nlm4UnlockArgs {
        cookie: Netobj::default(),
        alock: nlm_lock(&fh3, 1),
    };
    let r = nlm_call(&mut c, nlm4::proc_::UNLOCK, &unlock).await;
    let r: Nlm4Res = sluice_xdr::from_bytes(&r).expect("nlm4_res");
    assert_eq!(r.stat, Nlm4Stats::GRANTED);
    let (_open, d, _fh) = holder.open_both(&export, "f", false).await;
    write_deleg(&d);
    assert_eq!(recall_drops(&server), 0);
}
