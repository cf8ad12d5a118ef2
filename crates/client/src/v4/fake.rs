//! The v4 driver against a scripted in-process server: what it sends after DELAY, BADSLOT,
//! SEQ_MISORDERED, BADSESSION, CONN_NOT_BOUND_TO_SESSION and STALE_CLIENTID (reopening its
//! files, with and without a grace period), and with `nconnect` (binds, or a refusal), seen on
//! the wire; and the back channel: a CB_RECALL sent down the client's connection, with the
//! reply and the COMMIT and DELEGRETURN that follow; a reset of the back channel's connection
//! ([`reset`]) and the bind that follows it, and the SEQUENCE flags that ask for one.

use super::*;
use sluice_rpc::record::{RecordDecoder, RecordDecoderConfig};
use sluice_rpc::server::{parse_call, success_header, CallParse};
use sluice_xdr::nfs4::callback::{CbArgop4, CbRecallArgs, CbSequenceArgs};
use sluice_xdr::nfs4::ops::{
    BindConnToSessionResOk, CreateSessionResOk, ExchangeIdResOk, SequenceResOk,
};
use sluice_xdr::nfs4::ops::{
    OpenReadDelegation4, OpenWriteDelegation4, WriteResOk, OPEN4_SHARE_WANT_NO_DELEG,
};
use sluice_xdr::nfs4::ops::{
    CDFC4_BACK, CDFS4_BOTH, SEQ4_STATUS_BACKCHANNEL_FAULT, SEQ4_STATUS_CB_PATH_DOWN,
    SEQ4_STATUS_CB_PATH_DOWN_SESSION,
};
use sluice_xdr::rpc::{CallHeader, MsgHeader};
use sluice_xdr::{Reader, Unpack};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the fake server saw: every SEQUENCE (session byte 0, slot, seqid) and op name.
#[derive(Default)]
struct Seen {
    log: Vec<String>,
    sessions: u8,
    /// Statuses to answer the next SEQUENCEs with, in order (then OK).
    faults: Vec<Nfsstat4>,
    /// Answer BIND_CONN_TO_SESSION with NFS4ERR_NOTSUPP (a server without trunking).
    refuse_binds: bool,
    /// In a grace period: OPEN CLAIM_PREVIOUS succeeds (else NFS4ERR_NO_GRACE).
    grace: bool,
    /// Open stateids handed out (the next one's `other` is all this byte + 1).
    stateids: u8,
    /// Take the back channel CREATE_SESSION offers.
    back_chan: bool,
    /// Grant a write delegation on OPEN (its stateid's `other` is all 0xd0 + the open's
    /// number), unless the OPEN says OPEN4_SHARE_WANT_NO_DELEG and `ignore_want` is false.
    delegate: bool,
    ignore_want: bool,
    /// OPENs that said OPEN4_SHARE_WANT_NO_DELEG.
    want_no_deleg: usize,
    /// The delegation granted and not yet returned.
    last_deleg: Option<Stateid4>,
    /// After answering the next GETATTR, recall `last_deleg` with a CB_COMPOUND.
    recall: bool,
    /// CB_SEQUENCE ids sent on back slot 0.
    cb_seq: u32,
    /// Answer the next OPENs with NFS4ERR_DELAY (as a server recalling a delegation does).
    open_delays: u32,
    /// Two clients: delegations only for OPENs that only read, and an OPEN for writing by
    /// another session recalls the one held (answered NFS4ERR_DELAY until it is returned).
    two_clients: bool,
    /// The session holding `last_deleg`.
    holder: u8,
    /// A recall of `last_deleg` was sent (two clients).
    recalling: bool,
    /// A recall to send to this session's connection, after the current reply.
    conflict: Option<u8>,
    /// The writers of each session's back channel connection: the one CREATE_SESSION came
    /// on, or the last one bound for the back channel (for callbacks from another connection,
    /// or from the test).
    back: std::collections::HashMap<u8, tokio::sync::mpsc::UnboundedSender<Vec<Bytes>>>,
    /// What closes each session's back channel connection (see [`reset`]).
    kill: std::collections::HashMap<u8, tokio::sync::watch::Sender<bool>>,
    /// Status flags for the next SEQUENCE replies, in order (then 0).
    seq_flags: Vec<u32>,
    /// The `lease_time` GETATTR answers, in seconds (unset: none, the client's default).
    lease_secs: Option<u32>,
    /// The file's contents, when READ, WRITE and GETATTR's size should follow them (else
    /// READ is empty and the size 42).
    data: Option<Vec<u8>>,
    /// Answer the next DESTROY_SESSIONs with NFS4ERR_CONN_NOT_BOUND_TO_SESSION (as for one
    /// resent on a new connection after a reset), and log DESTROY_SESSION and
    /// DESTROY_CLIENTID (unset: the other tests' logs stay as they were, without them).
    destroy_unbound: Option<u32>,
}

/// Serves every connection made to `listener`, each on its own task.
async fn serve(listener: TcpListener, seen: Arc<Mutex<Seen>>) {
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            return;
        };
        tokio::spawn(serve_conn(sock, seen.clone()));
    }
}

async fn serve_conn(sock: tokio::net::TcpStream, seen: Arc<Mutex<Seen>>) {
    let mut dec = RecordDecoder::new(RecordDecoderConfig::default());
    let mut buf = vec![0u8; 1 << 16];
    // Replies and callbacks go through a writer task, so that another connection's call can
    // put a callback on this one (see `Seen::back`).
    let (mut sock, mut wr) = sock.into_split();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<Bytes>>();
    // Both halves end on a reset, which closes the connection (see [`reset`]).
    let (kill, mut killed) = tokio::sync::watch::channel(false);
    let mut writer_killed = killed.clone();
    tokio::spawn(async move {
        loop {
            let out = tokio::select! {
                out = rx.recv() => out,
                _ = writer_killed.changed() => None,
            };
            let Some(out) = out else { return };
            for b in out {
                if wr.write_all(&b).await.is_err() {
                    return;
                }
            }
        }
    });
    loop {
        let read = tokio::select! {
            r = sock.read(&mut buf) => r,
            _ = killed.changed() => return,
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        dec.push(Bytes::copy_from_slice(&buf[..n]));
        while let Some(rec) = dec.next_record().unwrap() {
            if is_reply(&rec) {
                let line = cb_reply(&rec);
                seen.lock().unwrap().log.push(line);
                continue;
            }
            let CallParse::Call(call) = parse_call(&rec) else {
                panic!("not a call")
            };
            let mut w = success_header(call.xid);
            let mut recall = None;
            if call.proc_() == nfs4::proc_::COMPOUND {
                let args = Compound4Args::unpack(&mut call.args(&rec)).unwrap();
                let mut seen = seen.lock().unwrap();
                answer(&args, &mut seen).pack(&mut w);
                let getattr = args.ops.iter().any(|o| o.opnum() == Opnum4::GETATTR);
                if getattr && std::mem::take(&mut seen.recall) {
                    seen.cb_seq += 1;
                    let stateid = seen.last_deleg.expect("a delegation to recall");
                    recall = Some(cb_recall(seen.sessions, seen.cb_seq, stateid));
                }
                if args.ops.iter().any(|o| o.opnum() == Opnum4::CREATE_SESSION) {
                    let session = seen.sessions;
                    seen.back.insert(session, tx.clone());
                    seen.kill.insert(session, kill.clone());
                }
                for op in &args.ops {
                    if let NfsArgop4::BindConnToSession(b) = op {
                        if b.dir & CDFC4_BACK != 0 && seen.back_chan && !seen.refuse_binds {
                            seen.back.insert(b.sessid[0], tx.clone());
                            seen.kill.insert(b.sessid[0], kill.clone());
                        }
                    }
                }
                if let Some(holder) = seen.conflict.take() {
                    seen.cb_seq += 1;
                    let stateid = seen.last_deleg.expect("a delegation to recall");
                    let cb = cb_recall(holder, seen.cb_seq, stateid);
                    let _ = seen.back[&holder].send(sluice_rpc::record::frame(cb, 1 << 20));
                }
            }
            let mut out = sluice_rpc::record::frame(w.into_segments(), 1 << 20);
            if let Some(cb) = recall {
                out.extend(sluice_rpc::record::frame(cb, 1 << 20));
            }
            let _ = tx.send(out);
        }
    }
}

fn flat(rec: &[Bytes]) -> Bytes {
    Bytes::from(
        rec.iter()
            .flat_map(|b| b.iter().copied())
            .collect::<Vec<u8>>(),
    )
}

/// An RPC REPLY (msg_type 1): the client answering one of our callbacks.
fn is_reply(rec: &[Bytes]) -> bool {
    flat(rec).get(4..8) == Some(&[0, 0, 0, 1][..])
}

/// A callback reply as a log line: `CB_COMPOUND status [op statuses]`.
fn cb_reply(rec: &[Bytes]) -> String {
    let b = flat(rec);
    let mut r = Reader::from_bytes(&b);
    MsgHeader::unpack(&mut r).unwrap();
    let res = CbCompound4Res::unpack(&mut r).unwrap();
    let ops: Vec<&str> = res.results.iter().map(|o| o.status().name()).collect();
    format!("CB_COMPOUND {} [{}]", res.status.name(), ops.join(", "))
}

/// CB_COMPOUND [CB_SEQUENCE, CB_RECALL of `stateid` on the handle "fh"] on session `session`.
fn cb_recall(session: u8, seqid: u32, stateid: Stateid4) -> Vec<Bytes> {
    let mut w = Writer::new();
    MsgHeader::Call {
        xid: 0x7000_0000 + seqid,
        call: CallHeader {
            rpcvers: 2,
            prog: cb::PROGRAM_DEFAULT,
            vers: cb::VERSION,
            proc_: cb::proc_::CB_COMPOUND,
            cred: OpaqueAuth::none(),
            verf: OpaqueAuth::none(),
        },
    }
    .pack(&mut w);
    CbCompound4Args {
        tag: Utf8Str::default(),
        minorversion: 1,
        callback_ident: 0,
        ops: vec![
            CbArgop4::Sequence(CbSequenceArgs {
                sessionid: [session; 16],
                sequenceid: seqid,
                slotid: 0,
                highest_slotid: 0,
                cachethis: false,
                referring_call_lists: Default::default(),
            }),
            CbArgop4::Recall(CbRecallArgs {
                stateid,
                truncate: false,
                fh: NfsFh4::from(&b"fh"[..]),
            }),
        ],
    }
    .pack(&mut w);
    w.into_segments()
}

fn answer(args: &Compound4Args, seen: &mut Seen) -> Compound4Res {
    let mut results = Vec::new();
    let mut status = Nfsstat4::OK;
    let mut session = 0;
    for op in &args.ops {
        let r = match op {
            NfsArgop4::ExchangeId(_) => {
                seen.log.push("EXCHANGE_ID".into());
                NfsResop4::ExchangeId(Res4::Ok(ExchangeIdResOk {
                    clientid: 7,
                    sequenceid: 1,
                    ..Default::default()
                }))
            }
            NfsArgop4::CreateSession(a) => {
                seen.sessions += 1;
                seen.log.push(format!("CREATE_SESSION {}", seen.sessions));
                NfsResop4::CreateSession(Res4::Ok(CreateSessionResOk {
                    sessionid: [seen.sessions; 16],
                    sequence: a.sequence,
                    flags: if seen.back_chan {
                        a.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN
                    } else {
                        0
                    },
                    fore_chan_attrs: ChannelAttrs4 {
                        maxrequestsize: 1 << 21,
                        maxresponsesize: 1 << 21,
                        maxoperations: 16,
                        maxrequests: 4,
                        ..Default::default()
                    },
                    back_chan_attrs: ChannelAttrs4::default(),
                }))
            }
            NfsArgop4::Sequence(a) => {
                session = a.sessionid[0];
                seen.log.push(format!(
                    "SEQUENCE s{} slot {} seq {}",
                    a.sessionid[0], a.slotid, a.sequenceid
                ));
                if !seen.faults.is_empty() {
                    let s = seen.faults.remove(0);
                    results.push(NfsResop4::Sequence(Res4::Err(s)));
                    status = s;
                    break;
                }
                let status_flags = if seen.seq_flags.is_empty() {
                    0
                } else {
                    seen.seq_flags.remove(0)
                };
                NfsResop4::Sequence(Res4::Ok(SequenceResOk {
                    sessionid: a.sessionid,
                    sequenceid: a.sequenceid,
                    slotid: a.slotid,
                    highest_slotid: 3,
                    target_highest_slotid: 3,
                    status_flags,
                }))
            }
            NfsArgop4::ReclaimComplete(_) => {
                seen.log.push("RECLAIM_COMPLETE".into());
                NfsResop4::ReclaimComplete(Nfsstat4::OK)
            }
            NfsArgop4::Lookup(_) => NfsResop4::Lookup(Nfsstat4::OK),
            NfsArgop4::Getfh(()) => NfsResop4::Getfh(Res4::Ok(NfsFh4::from(&b"fh"[..]))),
            NfsArgop4::Open(a) => {
                let claim = match a.claim {
                    OpenClaim4::Null(_) => "null",
                    OpenClaim4::Previous(_) => "previous",
                    OpenClaim4::Fh => "fh",
                    _ => "other",
                };
                seen.log.push(format!("OPEN {claim}"));
                if seen.open_delays > 0 {
                    seen.open_delays -= 1;
                    status = Nfsstat4::DELAY;
                    results.push(NfsResop4::error(op.opnum(), status));
                    break;
                }
                if claim == "previous" && !seen.grace {
                    status = Nfsstat4::NO_GRACE;
                    results.push(NfsResop4::error(op.opnum(), status));
                    break;
                }
                let writes = a.share_access & OPEN4_SHARE_ACCESS_BOTH != OPEN4_SHARE_ACCESS_READ;
                if seen.two_clients && writes && seen.last_deleg.is_some() && seen.holder != session
                {
                    // Recall it once; DELAY this OPEN (and its resends) until it is back.
                    if !std::mem::replace(&mut seen.recalling, true) {
                        seen.conflict = Some(seen.holder);
                    }
                    status = Nfsstat4::DELAY;
                    results.push(NfsResop4::error(op.opnum(), status));
                    break;
                }
                seen.stateids += 1;
                let unwanted = a.share_access & OPEN4_SHARE_WANT_NO_DELEG != 0;
                seen.want_no_deleg += usize::from(unwanted);
                let wanted = !unwanted || seen.ignore_want;
                let delegation = if seen.delegate && wanted && !(seen.two_clients && writes) {
                    seen.holder = session;
                    // Every file has the handle "fh": one delegation until it is returned,
                    // as a server gives every open of a file the same one.
                    let stateid = seen.last_deleg.unwrap_or(Stateid4 {
                        seqid: 1,
                        other: [0xd0 + seen.stateids; 12],
                    });
                    seen.last_deleg = Some(stateid);
                    // A reader gets a read delegation, a writer a write delegation.
                    match writes {
                        true => OpenDelegation4::Write(OpenWriteDelegation4 {
                            stateid,
                            ..Default::default()
                        }),
                        false => OpenDelegation4::Read(OpenReadDelegation4 {
                            stateid,
                            ..Default::default()
                        }),
                    }
                } else {
                    OpenDelegation4::None
                };
                NfsResop4::Open(Res4::Ok(sluice_xdr::nfs4::ops::OpenResOk {
                    stateid: Stateid4 {
                        seqid: 1,
                        other: [seen.stateids; 12],
                    },
                    delegation,
                    ..Default::default()
                }))
            }
            NfsArgop4::Read(a) => {
                seen.log.push(format!("READ {}", a.stateid.other[0]));
                let data = seen.data.clone().unwrap_or_default();
                let from = (a.offset as usize).min(data.len());
                let to = (from + a.count as usize).min(data.len());
                NfsResop4::Read(Res4::Ok(sluice_xdr::nfs4::ops::ReadResOk {
                    eof: to == data.len(),
                    data: Payload::from(Bytes::copy_from_slice(&data[from..to])),
                }))
            }
            NfsArgop4::Write(a) => {
                seen.log.push("WRITE".into());
                if let Some(d) = &mut seen.data {
                    let bytes = a.data.to_vec();
                    let end = a.offset as usize + bytes.len();
                    if d.len() < end {
                        d.resize(end, 0);
                    }
                    d[a.offset as usize..end].copy_from_slice(&bytes);
                }
                NfsResop4::Write(Res4::Ok(WriteResOk {
                    count: a.data.len() as u32,
                    committed: StableHow4::UNSTABLE,
                    writeverf: [0; 8],
                }))
            }
            NfsArgop4::Commit(_) => {
                seen.log.push("COMMIT".into());
                NfsResop4::Commit(Res4::Ok([0; 8]))
            }
            NfsArgop4::Delegreturn(d) => {
                seen.log.push(format!("DELEGRETURN {:x}", d.other[0]));
                if seen.last_deleg == Some(*d) {
                    seen.last_deleg = None;
                    seen.recalling = false;
                }
                NfsResop4::Delegreturn(Nfsstat4::OK)
            }
            NfsArgop4::Close(a) => {
                seen.log.push(format!("CLOSE {}", a.open_stateid.other[0]));
                NfsResop4::Close(Res4::Ok(a.open_stateid))
            }
            NfsArgop4::Putrootfh(()) => NfsResop4::Putrootfh(Nfsstat4::OK),
            NfsArgop4::Putfh(_) => NfsResop4::Putfh(Nfsstat4::OK),
            NfsArgop4::Getattr(_) => {
                seen.log.push("GETATTR".into());
                let a = AttrValues {
                    size: Some(seen.data.as_ref().map_or(42, |d| d.len() as u64)),
                    lease_time: seen.lease_secs,
                    ..AttrValues::default()
                };
                NfsResop4::Getattr(Res4::Ok(a.encode()))
            }
            NfsArgop4::BindConnToSession(a) => {
                seen.log.push(format!(
                    "BIND_CONN_TO_SESSION s{} dir {}",
                    a.sessid[0], a.dir
                ));
                if seen.refuse_binds {
                    status = Nfsstat4::NOTSUPP;
                    results.push(NfsResop4::error(op.opnum(), status));
                    break;
                }
                NfsResop4::BindConnToSession(Res4::Ok(BindConnToSessionResOk {
                    sessid: a.sessid,
                    dir: if a.dir & CDFC4_BACK != 0 && seen.back_chan {
                        CDFS4_BOTH
                    } else {
                        CDFS4_FORE
                    },
                    use_conn_in_rdma_mode: false,
                }))
            }
            NfsArgop4::DestroySession(_) => match seen.destroy_unbound.as_mut() {
                None => NfsResop4::DestroySession(Nfsstat4::OK),
                Some(n) => {
                    seen.log.push("DESTROY_SESSION".into());
                    if *n > 0 {
                        *n -= 1;
                        status = Nfsstat4::CONN_NOT_BOUND_TO_SESSION;
                        results.push(NfsResop4::error(op.opnum(), status));
                        break;
                    }
                    NfsResop4::DestroySession(Nfsstat4::OK)
                }
            },
            NfsArgop4::DestroyClientid(_) => {
                if seen.destroy_unbound.is_some() {
                    seen.log.push("DESTROY_CLIENTID".into());
                }
                NfsResop4::DestroyClientid(Nfsstat4::OK)
            }
            other => panic!("unexpected op {:?}", other.opnum()),
        };
        results.push(r);
    }
    Compound4Res {
        status,
        tag: Utf8Str::default(),
        results,
    }
}

async fn client(seen: &Arc<Mutex<Seen>>) -> Client {
    client_with(seen, 1).await
}

async fn client_with(seen: &Arc<Mutex<Seen>>, nconnect: usize) -> Client {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(serve(listener, seen.clone()));
    let url = NfsUrl::parse(&format!(
        "nfs://127.0.0.1/x?version=4.1&nfsport={port}&nconnect={nconnect}"
    ))
    .unwrap();
    let mut options = ClientOptions::default();
    options.rpc.privileged_port = false;
    Client::connect(&url, &options, Minor::V1, V4Options::default())
        .await
        .unwrap()
}

/// A port that accepts and reads but never answers: with a probe timeout, connecting fails
/// with an error that lets a caller fall back to v3, instead of waiting for the RPC layer.
#[tokio::test]
async fn a_silent_server_fails_the_probe_with_an_error_that_falls_back() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                while matches!(sock.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    let url = NfsUrl::parse(&format!("nfs://127.0.0.1/x?nfsport={port}")).unwrap();
    let mut options = ClientOptions::default();
    options.rpc.privileged_port = false;
    let v4 = V4Options {
        probe_timeout: Some(Duration::from_millis(200)),
        ..V4Options::default()
    };
    let e = match Client::connect(&url, &options, Minor::Highest, v4).await {
        Ok(_) => panic!("a silent server cannot give a session"),
        Err(e) => e,
    };
    assert!(
        matches!(&e, Error::Connect(m) if m.contains("no answer")),
        "{e}"
    );
    assert!(crate::connect::falls_back(&e));
}

/// What the server saw from log line `from` on.
fn after_connect(seen: &Arc<Mutex<Seen>>, from: usize) -> Vec<String> {
    seen.lock().unwrap().log[from..].to_vec()
}

/// Connecting costs as few round trips as the protocol allows: RECLAIM_COMPLETE and the
/// root's GETATTR go out together, so the GETATTR takes the second slot while
/// RECLAIM_COMPLETE holds the first (one after the other, both would use slot 0).
#[tokio::test]
async fn connect_sends_reclaim_complete_and_the_root_getattr_together() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let c = client(&seen).await;
    assert_eq!(
        after_connect(&seen, 0),
        [
            "EXCHANGE_ID",
            "CREATE_SESSION 1",
            "SEQUENCE s1 slot 0 seq 1",
            "RECLAIM_COMPLETE",
            "SEQUENCE s1 slot 1 seq 1",
            "GETATTR",
        ]
    );
    c.shutdown().await;
}

#[tokio::test]
async fn delay_resends_on_the_same_slot_and_seqid_and_badsession_makes_a_new_session() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let c = client(&seen).await;
    let from = {
        let mut s = seen.lock().unwrap();
        s.faults = vec![Nfsstat4::DELAY, Nfsstat4::BADSESSION];
        s.log.len()
    };
    let a = c.getattr_fh(&NfsFh4::from(&b"fh"[..])).await.unwrap();
    assert_eq!(a.size, 42);
    assert_eq!(
        after_connect(&seen, from),
        [
            "SEQUENCE s1 slot 0 seq 2",
            "SEQUENCE s1 slot 0 seq 2",
            "CREATE_SESSION 2",
            "SEQUENCE s2 slot 0 seq 1",
            "GETATTR",
        ]
    );
    c.shutdown().await;
}

#[tokio::test]
async fn seq_misordered_moves_to_another_slot_and_stale_clientid_makes_a_new_client() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let c = client(&seen).await;
    let from = {
        let mut s = seen.lock().unwrap();
        s.faults = vec![Nfsstat4::SEQ_MISORDERED, Nfsstat4::STALE_CLIENTID];
        s.log.len()
    };
    c.getattr_fh(&NfsFh4::from(&b"fh"[..])).await.unwrap();
    assert_eq!(
        after_connect(&seen, from),
        [
            "SEQUENCE s1 slot 0 seq 2",
            "SEQUENCE s1 slot 1 seq 2",
            "EXCHANGE_ID",
            "CREATE_SESSION 2",
            // RECLAIM_COMPLETE of the new client (no opens to reclaim), then the GETATTR again.
            "SEQUENCE s2 slot 0 seq 1",
            "RECLAIM_COMPLETE",
            "SEQUENCE s2 slot 0 seq 2",
            "GETATTR",
        ]
    );
    c.shutdown().await;
}

#[tokio::test]
async fn conn_not_bound_rebinds_the_connection_and_resends_on_the_same_slot_and_seqid() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let c = client(&seen).await;
    let from = {
        let mut s = seen.lock().unwrap();
        s.faults = vec![Nfsstat4::CONN_NOT_BOUND_TO_SESSION];
        s.log.len()
    };
    c.getattr_fh(&NfsFh4::from(&b"fh"[..])).await.unwrap();
    assert_eq!(
        after_connect(&seen, from),
        [
            "SEQUENCE s1 slot 0 seq 2",
            // The fore channel only (CDFC4_FORE = 1); the session is kept, no CREATE_SESSION.
            "BIND_CONN_TO_SESSION s1 dir 1",
            "SEQUENCE s1 slot 0 seq 2",
            "GETATTR",
        ]
    );
    c.shutdown().await;
}

/// A DESTROY_SESSION answered CONN_NOT_BOUND_TO_SESSION (its connection was reset after the
/// bind, or the call itself cut and resent on a new one) is sent again after a new bind,
/// then DESTROY_CLIENTID: else the client id would stay on the server, busy with the session,
/// for a lease (found by the 32-client NFSv4.1 load test through a resetting link).
#[tokio::test]
async fn shutdown_binds_again_and_destroys_the_session_when_the_connection_is_not_bound() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let c = client(&seen).await;
    let from = {
        let mut s = seen.lock().unwrap();
        s.destroy_unbound = Some(1);
        s.log.len()
    };
    c.shutdown().await;
    assert_eq!(
        after_connect(&seen, from),
        [
            "DESTROY_SESSION",
            "BIND_CONN_TO_SESSION s1 dir 1",
            "DESTROY_SESSION",
            "DESTROY_CLIENTID",
        ]
    );
}

#[tokio::test]
async fn extra_connections_are_bound_and_used_in_turn() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let c = client_with(&seen, 3).await;
    assert_eq!(c.trunking_note(), None);
    assert_eq!(c.connection_stats().len(), 3);
    for _ in 0..6 {
        c.getattr_fh(&NfsFh4::from(&b"fh"[..])).await.unwrap();
    }
    let log = seen.lock().unwrap().log.clone();
    let binds = log.iter().filter(|l| l.starts_with("BIND_CONN")).count();
    assert_eq!(binds, 2, "one per extra connection: {log:?}");
    for (i, t) in c.connection_stats().iter().enumerate() {
        assert!(
            t.table.calls_completed >= 2,
            "connection {i}: {}",
            t.table.calls_completed
        );
    }
    c.shutdown().await;
}

#[tokio::test]
async fn a_server_refusing_trunking_leaves_one_connection_and_says_why() {
    let seen = Arc::new(Mutex::new(Seen {
        refuse_binds: true,
        ..Seen::default()
    }));
    let c = client_with(&seen, 4).await;
    assert_eq!(c.connection_stats().len(), 1);
    let note = c.trunking_note().expect("a note");
    assert!(
        note.contains("nconnect=4")
            && note.contains("NFS4ERR_NOTSUPP")
            && note.contains("one connection"),
        "{note}"
    );
    let a = c.getattr_fh(&NfsFh4::from(&b"fh"[..])).await.unwrap();
    assert_eq!(a.size, 42, "the session works on the first connection");
    c.shutdown().await;
}

/// An open made before a new client id (STALE_CLIENTID): the driver opens it again before the
/// caller's READ is resent, reclaiming (CLAIM_PREVIOUS) before RECLAIM_COMPLETE when the server
/// is in grace, else opening it by handle (CLAIM_FH) after RECLAIM_COMPLETE; the READ and the
/// CLOSE carry the new stateid although the caller still holds the old one.
async fn reopen_after_new_client(grace: bool) -> Vec<String> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let c = client(&seen).await;
    let (fh, _) = c.open("/x/f").await.unwrap();
    assert_eq!(fh.stateid.other, [1; 12]);
    let from = {
        let mut s = seen.lock().unwrap();
        s.faults = vec![Nfsstat4::STALE_CLIENTID];
        s.grace = grace;
        s.log.len()
    };
    let read = NfsArgop4::Read(ReadArgs {
        stateid: fh.stateid,
        offset: 0,
        count: 10,
    });
    c.compound(vec![NfsArgop4::Putfh(fh.fh.clone()), read])
        .await
        .unwrap()
        .ok()
        .unwrap();
    c.close(&fh).await.unwrap();
    c.shutdown().await;
    after_connect(&seen, from)
        .into_iter()
        .filter(|l| !l.starts_with("SEQUENCE"))
        .collect()
}

#[tokio::test]
async fn opens_are_reclaimed_in_grace_before_reclaim_complete() {
    assert_eq!(
        reopen_after_new_client(true).await,
        [
            "EXCHANGE_ID",
            "CREATE_SESSION 2",
            "OPEN previous",
            "RECLAIM_COMPLETE",
            "READ 2",
            "CLOSE 2",
        ]
    );
}

#[tokio::test]
async fn opens_are_made_again_by_handle_after_reclaim_complete_when_there_is_no_grace() {
    assert_eq!(
        reopen_after_new_client(false).await,
        [
            "EXCHANGE_ID",
            "CREATE_SESSION 2",
            "OPEN previous",
            "RECLAIM_COMPLETE",
            "OPEN fh",
            "READ 2",
            "CLOSE 2",
        ]
    );
}

/// The log without SEQUENCE lines, from line `from` on.
fn ops_after(seen: &Arc<Mutex<Seen>>, from: usize) -> Vec<String> {
    after_connect(seen, from)
        .into_iter()
        .filter(|l| !l.starts_with("SEQUENCE"))
        .collect()
}

/// Waits (up to 10 s) until the log has a line starting with `prefix` after line `from`.
async fn wait_for(seen: &Arc<Mutex<Seen>>, from: usize, prefix: &str) {
    for _ in 0..1000 {
        if after_connect(seen, from)
            .iter()
            .any(|l| l.starts_with(prefix))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no {prefix} in {:?}", after_connect(seen, from));
}

#[tokio::test]
async fn a_recall_is_answered_at_once_then_the_dirty_file_is_committed_and_returned() {
    let seen = Arc::new(Mutex::new(Seen {
        back_chan: true,
        delegate: true,
        ..Seen::default()
    }));
    let c = client(&seen).await;
    assert!(c.back_channel_up());
    // A read delegation from a read open; the same client's write open (which wants no
    // delegation) makes the file dirty under it.
    let (r, _) = c.open("/d/f").await.unwrap();
    assert_eq!(c.delegations_held(), 1);
    let (fh, _) = c.create("/d/f", 0o644, CreateMode::Truncate).await.unwrap();
    assert_eq!(
        seen.lock().unwrap().want_no_deleg,
        1,
        "the writer wants none"
    );
    assert_eq!(c.delegations_held(), 1);
    let (w, _) = c
        .start_write(&fh, 0, Bytes::from_static(b"data"), Stability::Unstable)
        .await
        .await;
    assert_eq!(w.unwrap().committed, Stability::Unstable);
    let from = {
        let mut s = seen.lock().unwrap();
        s.recall = true;
        s.log.len()
    };
    c.getattr_fh(&fh.fh).await.unwrap();
    wait_for(&seen, from, "DELEGRETURN").await;
    let ops = ops_after(&seen, from);
    let at = |l: &str| ops.iter().position(|x| x == l).unwrap_or(usize::MAX);
    assert_eq!(ops[0], "GETATTR");
    assert!(
        at("CB_COMPOUND NFS4_OK [NFS4_OK, NFS4_OK]") < ops.len(),
        "{ops:?}"
    );
    assert!(at("COMMIT") < at("DELEGRETURN d1"), "{ops:?}");
    assert_eq!(c.delegations_held(), 0);
    // Returned already: the closes send no second DELEGRETURN.
    let from = seen.lock().unwrap().log.len();
    c.close(&fh).await.unwrap();
    c.close(&r).await.unwrap();
    assert_eq!(ops_after(&seen, from), ["CLOSE 2", "CLOSE 1"]);
    c.shutdown().await;
}

/// A write open asks for no delegation; a write delegation granted anyway is returned at once,
/// and a CB_GETATTR before its return is answered (see `deleg`: write delegations).
#[tokio::test]
async fn a_writer_wants_no_delegation_and_returns_a_write_delegation_at_once() {
    let seen = Arc::new(Mutex::new(Seen {
        back_chan: true,
        delegate: true,
        ignore_want: true,
        ..Seen::default()
    }));
    let c = client(&seen).await;
    let from = seen.lock().unwrap().log.len();
    let (fh, _) = c.create("/d/f", 0o644, CreateMode::Truncate).await.unwrap();
    assert_eq!(seen.lock().unwrap().want_no_deleg, 1);
    let ops = ops_after(&seen, from);
    assert!(ops.contains(&"DELEGRETURN d1".to_string()), "{ops:?}");
    assert_eq!(c.delegations_held(), 0);
    c.close(&fh).await.unwrap();
    c.shutdown().await;
}

#[tokio::test]
async fn a_recall_of_a_clean_file_returns_it_without_a_commit_and_close_returns_the_rest() {
    let seen = Arc::new(Mutex::new(Seen {
        back_chan: true,
        delegate: true,
        ..Seen::default()
    }));
    let c = client(&seen).await;
    let (a, _) = c.open("/d/a").await.unwrap();
    let (b, _) = c.open("/d/b").await.unwrap();
    // The fake hands out handle "fh" for every file: the second open joins the delegation.
    assert_eq!(c.delegations_held(), 1);
    let from = seen.lock().unwrap().log.len();
    c.close(&a).await.unwrap();
    assert_eq!(ops_after(&seen, from), ["CLOSE 1"]);
    c.close(&b).await.unwrap();
    assert_eq!(
        ops_after(&seen, from),
        ["CLOSE 1", "CLOSE 2", "DELEGRETURN d1"]
    );
    assert_eq!(c.delegations_held(), 0);

    let (f, _) = c.open("/d/f").await.unwrap();
    let from = {
        let mut s = seen.lock().unwrap();
        s.recall = true;
        s.log.len()
    };
    c.getattr_fh(&f.fh).await.unwrap();
    wait_for(&seen, from, "DELEGRETURN").await;
    let ops = ops_after(&seen, from);
    assert!(!ops.contains(&"COMMIT".to_string()), "{ops:?}");
    assert!(ops.contains(&"DELEGRETURN d3".to_string()), "{ops:?}");
    assert_eq!(c.delegations_held(), 0);
    c.shutdown().await;
}

#[tokio::test]
async fn without_a_back_channel_no_delegation_is_wanted_and_one_granted_is_returned_at_once() {
    let seen = Arc::new(Mutex::new(Seen {
        back_chan: false,
        delegate: true,
        ignore_want: true,
        ..Seen::default()
    }));
    let c = client(&seen).await;
    assert!(!c.back_channel_up());
    let from = seen.lock().unwrap().log.len();
    let (f, _) = c.open("/d/f").await.unwrap();
    assert_eq!(seen.lock().unwrap().want_no_deleg, 1);
    assert_eq!(
        ops_after(&seen, from),
        ["GETATTR", "OPEN null", "GETATTR", "DELEGRETURN d1"]
    );
    assert_eq!(c.delegations_held(), 0);
    let (w, _) = c
        .start_write(&f, 0, Bytes::from_static(b"x"), Stability::Unstable)
        .await
        .await;
    w.unwrap();
    let from = seen.lock().unwrap().log.len();
    c.close(&f).await.unwrap();
    assert_eq!(ops_after(&seen, from), ["CLOSE 1"]);
    c.shutdown().await;
}

#[tokio::test]
async fn an_open_answered_delay_is_sent_again_until_it_is_done() {
    let seen = Arc::new(Mutex::new(Seen {
        open_delays: 3,
        ..Seen::default()
    }));
    let c = client(&seen).await;
    let from = seen.lock().unwrap().log.len();
    let (f, _) = c.open("/d/f").await.unwrap();
    assert_eq!(
        ops_after(&seen, from),
        [
            "GETATTR",
            "OPEN null",
            "OPEN null",
            "OPEN null",
            "OPEN null",
            "GETATTR"
        ]
    );
    c.close(&f).await.unwrap();
    c.shutdown().await;
}

/// Two clients of one server: A opens a file for reading and holds a read delegation; B opens
/// it for writing, the server recalls A's delegation (answering B's OPEN with DELAY until it is
/// back); A answers the recall, returns the delegation, and then reads what B wrote.
#[tokio::test]
async fn a_writer_on_another_client_recalls_the_readers_delegation_and_the_reader_sees_its_data() {
    let seen = Arc::new(Mutex::new(Seen {
        back_chan: true,
        delegate: true,
        two_clients: true,
        data: Some(b"before".to_vec()),
        ..Seen::default()
    }));
    let a = client(&seen).await;
    let b = client(&seen).await;
    let (afh, attr) = a.open("/d/f").await.unwrap();
    assert_eq!(a.delegations_held(), 1);
    let got = crate::File::new(a.clone(), afh.clone(), attr)
        .read_all()
        .await;
    assert_eq!(got.unwrap(), b"before");

    let from = seen.lock().unwrap().log.len();
    let (bfh, battr) = b.create("/d/f", 0o644, CreateMode::Truncate).await.unwrap();
    let ops = ops_after(&seen, from);
    let at = |l: &str| ops.iter().position(|x| x == l).unwrap_or(usize::MAX);
    assert!(
        at("CB_COMPOUND NFS4_OK [NFS4_OK, NFS4_OK]") < ops.len(),
        "{ops:?}"
    );
    // B's OPEN got through only after A's delegation came back.
    assert!(at("DELEGRETURN d1") < ops.len(), "{ops:?}");
    assert_eq!(ops.last().map(String::as_str), Some("GETATTR"), "{ops:?}");
    assert!(
        ops.iter().filter(|l| *l == "OPEN null").count() >= 2,
        "{ops:?}"
    );
    assert_eq!(a.delegations_held(), 0);
    assert_eq!(b.delegations_held(), 0, "no delegation for a writer here");

    let mut w = crate::File::new(b.clone(), bfh.clone(), battr).writer();
    w.write(b"after, from B").await.unwrap();
    w.finish().await.unwrap();
    b.close(&bfh).await.unwrap();

    let attr = a.getattr_fh(&afh.fh).await.unwrap();
    let got = crate::File::new(a.clone(), afh.clone(), attr)
        .read_all()
        .await;
    assert_eq!(got.unwrap(), b"after, from B");
    a.close(&afh).await.unwrap();
    a.shutdown().await;
    b.shutdown().await;
}

/// The version-neutral open (OPEN CLAIM_FH, what the commands and the mount use) records the
/// delegation too, and its close returns it.
#[tokio::test]
async fn a_namespace_open_records_its_delegation_and_its_close_returns_it() {
    use crate::namespace::{Handle, Namespace};
    let seen = Arc::new(Mutex::new(Seen {
        back_chan: true,
        delegate: true,
        ..Seen::default()
    }));
    let c = client(&seen).await;
    let fh = Handle::v4(NfsFh4::from(&b"fh"[..]).0);
    let attr = crate::namespace::Attr {
        ftype: crate::namespace::FileType::REG,
        ..Default::default()
    };
    let f = Namespace::open(&c, &fh, attr, false).await.unwrap();
    assert_eq!(c.delegations_held(), 1);
    let from = seen.lock().unwrap().log.len();
    f.close().await.unwrap();
    assert_eq!(ops_after(&seen, from), ["CLOSE 1", "DELEGRETURN d1"]);
    assert_eq!(c.delegations_held(), 0);
    c.shutdown().await;
}

/// Closes the connection that carries session `session`'s back channel, as a link reset does
/// (the client's transport connects again); until a bind for the back channel, the server has
/// no way to call the session back.
fn reset(seen: &Arc<Mutex<Seen>>, session: u8) {
    let mut s = seen.lock().unwrap();
    s.back.remove(&session);
    let kill = s.kill.remove(&session).expect("a back channel connection");
    let _ = kill.send(true);
}

/// Recalls the delegation held (`last_deleg`) on session `session`'s back channel now, with no
/// call of the client to answer first.
fn recall_now(seen: &Arc<Mutex<Seen>>, session: u8) {
    let mut s = seen.lock().unwrap();
    s.cb_seq += 1;
    let stateid = s.last_deleg.expect("a delegation to recall");
    let cb = cb_recall(session, s.cb_seq, stateid);
    let back = s.back.get(&session).expect("a back channel bound");
    let _ = back.send(sluice_rpc::record::frame(cb, 1 << 20));
}

/// An idle client holding a delegation whose connection is reset binds the new connection to
/// the session for both directions as soon as it is up, with no call from the application
/// (the lease here is an hour, so no renewal can be what binds it); a recall sent on it then
/// is answered and the delegation returned.
#[tokio::test]
async fn a_reset_connection_is_bound_again_at_once_and_a_recall_after_it_is_answered() {
    let seen = Arc::new(Mutex::new(Seen {
        back_chan: true,
        delegate: true,
        lease_secs: Some(3600),
        ..Seen::default()
    }));
    let c = client(&seen).await;
    let (f, _) = c.open("/d/f").await.unwrap();
    assert_eq!(c.delegations_held(), 1);
    let from = seen.lock().unwrap().log.len();
    reset(&seen, 1);
    wait_for(&seen, from, "BIND_CONN_TO_SESSION").await;
    assert_eq!(
        after_connect(&seen, from),
        // CDFC4_FORE_OR_BOTH = 3, and nothing before it: no request had to come first.
        ["BIND_CONN_TO_SESSION s1 dir 3"]
    );
    recall_now(&seen, 1);
    wait_for(&seen, from, "DELEGRETURN").await;
    wait_for(&seen, from, "CB_COMPOUND").await;
    let mut ops = ops_after(&seen, from);
    // The recall's reply and the DELEGRETURN go out from different tasks, in either order.
    ops[1..].sort();
    assert_eq!(
        ops,
        [
            "BIND_CONN_TO_SESSION s1 dir 3",
            "CB_COMPOUND NFS4_OK [NFS4_OK, NFS4_OK]",
            "DELEGRETURN d1",
        ]
    );
    assert_eq!(c.delegations_held(), 0);
    c.close(&f).await.unwrap();
    c.shutdown().await;
}

/// A SEQUENCE reply saying the server has no callback path binds the first connection again
/// for both directions (in the background, after the reply); the flags of a session without
/// a back channel change nothing.
#[tokio::test]
async fn a_callback_path_down_flag_binds_the_back_channel_again() {
    for (back_chan, flag) in [
        (true, SEQ4_STATUS_CB_PATH_DOWN),
        (true, SEQ4_STATUS_CB_PATH_DOWN_SESSION),
        (true, SEQ4_STATUS_BACKCHANNEL_FAULT),
        (false, SEQ4_STATUS_CB_PATH_DOWN),
    ] {
        let seen = Arc::new(Mutex::new(Seen {
            back_chan,
            ..Seen::default()
        }));
        let c = client(&seen).await;
        let from = {
            let mut s = seen.lock().unwrap();
            s.seq_flags = vec![flag];
            s.log.len()
        };
        c.getattr_fh(&NfsFh4::from(&b"fh"[..])).await.unwrap();
        if back_chan {
            wait_for(&seen, from, "BIND_CONN_TO_SESSION").await;
        }
        // A call after the bind: it follows it on the wire (same connection, sent later).
        c.getattr_fh(&NfsFh4::from(&b"fh"[..])).await.unwrap();
        let want: &[&str] = if back_chan {
            &["GETATTR", "BIND_CONN_TO_SESSION s1 dir 3", "GETATTR"]
        } else {
            &["GETATTR", "GETATTR"]
        };
        assert_eq!(ops_after(&seen, from), want, "flag {flag:#x}");
        c.shutdown().await;
    }
}
