//! NLM v4 and NSM v1 over real sockets: an NFSv3 client's locks (`sluice_server::nlm`, the core
//! in `sluice_nfs4state::nlm`). The client's lock manager and status monitor are faked by one
//! UDP socket on loopback that also answers the portmapper's GETPORT with its own port; the
//! server is pointed at it with `ServerConfig::nlm.client_portmap_port`.
//!
//! | behaviour | test |
//! |---|---|
//! | TEST names the holder; LOCK, UNLOCK; another host and another svid conflict | `test_lock_unlock_between_two_hosts` |
//! | a blocked LOCK is queued, CANCEL withdraws it; granted by NLM_GRANTED_MSG to the client's lockd | `a_blocked_lock_is_granted_by_a_callback_and_cancel_withdraws_one` |
//! | a v3 lock denies a v4 LOCK and the reverse | `nfsv3_and_nfsv4_locks_conflict_both_ways` |
//! | after a restart: SM_NOTIFY to the monitored client with a new odd state; grace takes reclaims only | `a_restart_notifies_the_client_and_grace_admits_reclaims` |
//! | a client's SM_NOTIFY frees its locks; FREE_ALL too | `a_clients_reboot_notice_frees_its_locks` |
//! | waiters per host are bounded | `waiters_are_bounded` |
//! | _MSG calls are answered by _RES calls | `msg_calls_are_answered_by_res_calls` |
//! | NLM and NSM are registered with sluice's portmapper | `the_portmapper_lists_nlm_and_nsm` |

#[macro_use]
mod support;

use bytes::Bytes;
use sluice_server::ServerConfig;
use sluice_xdr::nfs3::NfsFh3;
use sluice_xdr::nfs4::ops::{LockArgs, LockRes, Locker4, NfsArgop4, NfsResop4, OpenToLockOwner4};
use sluice_xdr::nfs4::ops::{OPEN4_SHARE_ACCESS_BOTH, WRITE_LT};
use sluice_xdr::nfs4::{LockOwner4, Opaque4};
use sluice_xdr::nlm::{
    self, CallerName, Netobj, Nlm4CancArgs, Nlm4Lock, Nlm4LockArgs, Nlm4Notify, Nlm4Res, Nlm4Stats,
    Nlm4TestArgs, Nlm4TestRes, Nlm4TestRply, Nlm4UnlockArgs, NlmFh, NotifyName,
};
use sluice_xdr::nsm::{self, SmString, StatChge};
use sluice_xdr::{portmap, Pack, Reader, Unpack, Writer};
use std::net::SocketAddr;
use std::time::Duration;
use support::nfs4::V4;
use support::{create, rw, Rpc, TestDirs, TestServer};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

/// How long a test waits for a call from the server to the fake client.
const CALLBACK_WAIT: Duration = Duration::from_secs(10);

/// A call the fake client received: program, procedure and arguments.
#[derive(Debug)]
struct Received {
    prog: u32,
    proc_: u32,
    args: Bytes,
}

/// The fake client host: one UDP socket that is its portmapper (GETPORT answers this socket's
/// port for any program) and its NLM and NSM programs (every call answered with a void
/// success and handed to the test).
struct FakeClient {
    port: u16,
    calls: mpsc::Receiver<Received>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeClient {
    async fn start() -> FakeClient {
        let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let port = sock.local_addr().unwrap().port();
        let (tx, rx) = mpsc::channel(64);
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 65536];
            loop {
                let Ok((n, from)) = sock.recv_from(&mut buf).await else {
                    return;
                };
                let segs = [Bytes::copy_from_slice(&buf[..n])];
                let mut r = Reader::new(&segs);
                let head: Vec<u32> = (0..6).map(|_| r.get_u32().unwrap()).collect();
                let (xid, prog, proc_) = (head[0], head[3], head[5]);
                // Credential and verifier.
                for _ in 0..2 {
                    r.get_u32().unwrap();
                    r.get_opaque("auth", 400).unwrap();
                }
                let args = Bytes::copy_from_slice(&buf[n - r.remaining()..n]);
                let mut w = Writer::new();
                for v in [xid, 1, 0, 0, 0, 0] {
                    w.put_u32(v);
                }
                if prog == portmap::PROGRAM {
                    w.put_u32(u32::from(port));
                } else {
                    let _ = tx.send(Received { prog, proc_, args }).await;
                }
                let _ = sock.send_to(&w.into_bytes(), from).await;
            }
        });
        FakeClient {
            port,
            calls: rx,
            task,
        }
    }

    /// The next call the server made to this client.
    async fn next(&mut self) -> Received {
        tokio::time::timeout(CALLBACK_WAIT, self.calls.recv())
            .await
            .expect("the server calls the client in time")
            .expect("the fake client runs")
    }
}

impl Drop for FakeClient {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A server whose calls to clients go to `fake`.
fn config_for(fake: &FakeClient) -> ServerConfig {
    let mut c = rw();
    c.nlm.client_portmap_port = fake.port;
    c
}

/// A v3 connection and the handle of a new file `name` in the export.
async fn v3_file(s: &TestServer, name: &str) -> (Rpc, NfsFh3) {
    let mut c = s.connect().await;
    let root = c.mnt_root(s).await;
    let fh = create(&mut c, &root, name).await;
    (c, fh)
}

fn alock(host: &str, fh: &NfsFh3, svid: u32, offset: u64, len: u64) -> Nlm4Lock {
    Nlm4Lock {
        caller_name: CallerName(Bytes::copy_from_slice(host.as_bytes())),
        fh: NlmFh(fh.0.clone()),
        oh: Netobj(Bytes::copy_from_slice(format!("{svid}@{host}").as_bytes())),
        svid,
        l_offset: offset,
        l_len: len,
    }
}

fn lock_args(l: Nlm4Lock, exclusive: bool, block: bool, reclaim: bool) -> Nlm4LockArgs {
    Nlm4LockArgs {
        cookie: Netobj(Bytes::from_static(b"cookie")),
        block,
        exclusive,
        alock: l,
        reclaim,
        state: 1,
    }
}

async fn nlm_call<T: Unpack>(c: &mut Rpc, proc_: u32, args: &impl Pack) -> T {
    let r = c
        .call(
            nlm::PROGRAM,
            nlm::VERSION,
            proc_,
            &sluice_xdr::to_bytes(args),
        )
        .await;
    sluice_xdr::from_bytes(&r.results).expect("NLM results decode")
}

async fn lock(c: &mut Rpc, a: Nlm4LockArgs) -> Nlm4Stats {
    let r: Nlm4Res = nlm_call(c, nlm::proc_::LOCK, &a).await;
    assert_eq!(r.cookie, a.cookie, "the cookie comes back");
    r.stat
}

async fn test(c: &mut Rpc, l: Nlm4Lock, exclusive: bool) -> Nlm4TestRply {
    let a = Nlm4TestArgs {
        cookie: Netobj::default(),
        exclusive,
        alock: l,
    };
    let r: Nlm4TestRes = nlm_call(c, nlm::proc_::TEST, &a).await;
    r.stat
}

async fn unlock(c: &mut Rpc, l: Nlm4Lock) -> Nlm4Stats {
    let a = Nlm4UnlockArgs {
        cookie: Netobj::default(),
        alock: l,
    };
    let r: Nlm4Res = nlm_call(c, nlm::proc_::UNLOCK, &a).await;
    r.stat
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_lock_unlock_between_two_hosts() {
    let s = TestServer::start(rw()).await;
    let (mut c, fh) = v3_file(&s, "f").await;
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("a", &fh, 1, 0, 100), true, false, false)
        )
        .await,
        Nlm4Stats::GRANTED
    );
    match test(&mut c, alock("b", &fh, 1, 50, 1), false).await {
        Nlm4TestRply::Denied(h) => {
            assert_eq!(
                (h.exclusive, h.svid, h.l_offset, h.l_len),
                (true, 1, 0, 100)
            );
            assert_eq!(&h.oh.0[..], b"1@a");
        }
        other => panic!("{other:?}"),
    }
    // Another process of host a conflicts too; a's own process does not.
    assert_eq!(
        test(&mut c, alock("a", &fh, 2, 0, 0), false).await.stat(),
        Nlm4Stats::DENIED
    );
    assert_eq!(
        test(&mut c, alock("a", &fh, 1, 0, 0), true).await.stat(),
        Nlm4Stats::GRANTED
    );
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("b", &fh, 1, 99, 0), false, false, false)
        )
        .await,
        Nlm4Stats::DENIED
    );
    // Past a's range: free.
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("b", &fh, 1, 100, 0), false, false, false)
        )
        .await,
        Nlm4Stats::GRANTED
    );
    assert_eq!(
        unlock(&mut c, alock("a", &fh, 1, 0, 0)).await,
        Nlm4Stats::GRANTED
    );
    // Unlocking what is not held is no error.
    assert_eq!(
        unlock(&mut c, alock("a", &fh, 1, 0, 0)).await,
        Nlm4Stats::GRANTED
    );
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("b", &fh, 1, 0, 100), true, false, false)
        )
        .await,
        Nlm4Stats::GRANTED
    );
    // A handle of no export.
    let bad = NfsFh3(Bytes::from_static(&[7; 20]));
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("a", &bad, 1, 0, 0), true, false, false)
        )
        .await,
        Nlm4Stats::STALE_FH
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_lock_is_granted_by_a_callback_and_cancel_withdraws_one() {
    let mut fake = FakeClient::start().await;
    let s = TestServer::start(config_for(&fake)).await;
    let (mut c, fh) = v3_file(&s, "f").await;
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("a", &fh, 1, 0, 0), true, false, false)
        )
        .await,
        Nlm4Stats::GRANTED
    );
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("b", &fh, 7, 10, 5), true, true, false)
        )
        .await,
        Nlm4Stats::BLOCKED
    );
    // Another waiter, cancelled: it is never granted.
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("b", &fh, 8, 40, 5), true, true, false)
        )
        .await,
        Nlm4Stats::BLOCKED
    );
    let cancel = Nlm4CancArgs {
        cookie: Netobj::default(),
        block: true,
        exclusive: true,
        alock: alock("b", &fh, 8, 40, 5),
    };
    let r: Nlm4Res = nlm_call(&mut c, nlm::proc_::CANCEL, &cancel).await;
    assert_eq!(r.stat, Nlm4Stats::GRANTED);
    let r: Nlm4Res = nlm_call(&mut c, nlm::proc_::CANCEL, &cancel).await;
    assert_eq!(r.stat, Nlm4Stats::DENIED, "nothing left to cancel");

    assert_eq!(
        unlock(&mut c, alock("a", &fh, 1, 0, 0)).await,
        Nlm4Stats::GRANTED
    );
    let got = fake.next().await;
    assert_eq!(
        (got.prog, got.proc_),
        (nlm::PROGRAM, nlm::proc_::GRANTED_MSG)
    );
    let g: Nlm4TestArgs = sluice_xdr::from_bytes(&got.args).unwrap();
    assert!(g.exclusive);
    assert_eq!((g.alock.svid, g.alock.l_offset, g.alock.l_len), (7, 10, 5));
    assert_eq!(g.alock.fh.0, fh.0);
    // b holds it now.
    assert_eq!(
        test(&mut c, alock("a", &fh, 1, 12, 1), false).await.stat(),
        Nlm4Stats::DENIED
    );
    assert_eq!(
        test(&mut c, alock("a", &fh, 1, 40, 5), true).await.stat(),
        Nlm4Stats::GRANTED,
        "the cancelled waiter was not granted"
    );
    // The client answers GRANTED_RES with DENIED (its process went away): released.
    let res = Nlm4Res {
        cookie: g.cookie.clone(),
        stat: Nlm4Stats::DENIED,
    };
    let _: () = nlm_call(&mut c, nlm::proc_::GRANTED_RES, &res).await;
    assert_eq!(
        test(&mut c, alock("a", &fh, 1, 12, 1), true).await.stat(),
        Nlm4Stats::GRANTED
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nfsv3_and_nfsv4_locks_conflict_both_ways() {
    let s = TestServer::start(rw()).await;
    let (mut c, fh3) = v3_file(&s, "f").await;
    let mut v4 = V4::mount(&s, "v4 locker").await;
    let (open, fh4) = v4
        .open(&s.export, "o", "f", false, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    let v4_lock = |offset, length| {
        NfsArgop4::Lock(LockArgs {
            locktype: WRITE_LT,
            reclaim: false,
            offset,
            length,
            locker: Locker4::New(OpenToLockOwner4 {
                open_seqid: 0,
                open_stateid: open.stateid,
                lock_seqid: 0,
                lock_owner: LockOwner4 {
                    clientid: 0,
                    owner: Opaque4(Bytes::from_static(b"v4 owner")),
                },
            }),
        })
    };
    // v3 first.
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("a", &fh3, 1, 0, 10), true, false, false)
        )
        .await,
        Nlm4Stats::GRANTED
    );
    let res = v4
        .send(vec![NfsArgop4::Putfh(fh4.clone()), v4_lock(5, 1)])
        .await;
    match &res.results[2] {
        NfsResop4::Lock(LockRes::Denied(d)) => assert_eq!((d.offset, d.length), (0, 10)),
        other => panic!("v4 LOCK over a v3 lock: {other:?}"),
    }
    assert_eq!(
        unlock(&mut c, alock("a", &fh3, 1, 0, 0)).await,
        Nlm4Stats::GRANTED
    );
    // v4 first.
    let res = v4.send(vec![NfsArgop4::Putfh(fh4), v4_lock(5, 1)]).await;
    assert!(
        matches!(&res.results[2], NfsResop4::Lock(LockRes::Ok(_))),
        "{res:?}"
    );
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("a", &fh3, 1, 0, 0), false, false, false)
        )
        .await,
        Nlm4Stats::DENIED
    );
    match test(&mut c, alock("a", &fh3, 1, 0, 0), false).await {
        Nlm4TestRply::Denied(h) => {
            assert_eq!((h.svid, h.l_offset, h.l_len), (0, 5, 1));
            assert_eq!(&h.oh.0[..], b"v4 owner");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("a", &fh3, 1, 6, 0), true, false, false)
        )
        .await,
        Nlm4Stats::GRANTED,
        "past the v4 lock"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_notifies_the_client_and_grace_admits_reclaims() {
    let mut fake = FakeClient::start().await;
    let dirs = TestDirs::new("nlm-restart");
    let mut config = config_for(&fake);
    config.grace = Some(Duration::from_secs(3));
    let mut s = TestServer::start_in(config, dirs).await;
    let (mut c, fh) = v3_file(&s, "f").await;
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("a", &fh, 1, 0, 0), true, false, false)
        )
        .await,
        Nlm4Stats::GRANTED
    );
    // Host z locks too, and will not come back.
    let (_, other) = v3_file(&s, "g").await;
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("z", &other, 1, 0, 0), true, false, false)
        )
        .await,
        Nlm4Stats::GRANTED
    );
    let hosts_record = s.dirs.state().join("nsm-hosts");
    let recorded = std::fs::read_to_string(&hosts_record).unwrap();
    assert!(recorded.contains("61 127.0.0.1") && recorded.contains("7a 127.0.0.1"));
    drop(c);
    s.restart().await;
    // The monitored host hears of the restart from the server's NSM, with a new odd state.
    // Both hosts were recorded from 127.0.0.1: a notice for each.
    for _ in 0..2 {
        let got = fake.next().await;
        assert_eq!((got.prog, got.proc_), (nsm::PROGRAM, nsm::proc_::NOTIFY));
        let n: StatChge = sluice_xdr::from_bytes(&got.args).unwrap();
        assert_eq!(n.state, 3, "the second start's state number");
        assert_eq!(&n.mon_name.0[..], b"127.0.0.1");
    }

    let mut c = s.connect().await;
    // In grace: only reclaims.
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("b", &fh, 1, 0, 0), true, false, false)
        )
        .await,
        Nlm4Stats::DENIED_GRACE_PERIOD
    );
    assert_eq!(
        test(&mut c, alock("b", &fh, 1, 0, 0), true).await.stat(),
        Nlm4Stats::DENIED_GRACE_PERIOD
    );
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("a", &fh, 1, 0, 0), true, false, true)
        )
        .await,
        Nlm4Stats::GRANTED
    );
    // After grace (its full length: an NLM host never says it is done): a's reclaimed lock
    // holds, new locks are answered, reclaims are refused.
    // Polled: grace ends at its deadline, seen by the server's next lease tick.
    let deadline = std::time::Instant::now() + CALLBACK_WAIT;
    let after = loop {
        let stat = lock(
            &mut c,
            lock_args(alock("b", &fh, 1, 0, 0), true, false, false),
        )
        .await;
        if stat != Nlm4Stats::DENIED_GRACE_PERIOD || std::time::Instant::now() > deadline {
            break stat;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        after,
        Nlm4Stats::DENIED,
        "a's reclaimed lock holds after grace"
    );
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("a", &fh, 1, 0, 0), true, false, true)
        )
        .await,
        Nlm4Stats::DENIED_GRACE_PERIOD
    );
    // z reclaimed nothing: no longer monitored once the timer has seen grace over (it looks
    // every second); a still is.
    let deadline = std::time::Instant::now() + CALLBACK_WAIT;
    let recorded = loop {
        let r = std::fs::read_to_string(&hosts_record).unwrap();
        if !r.contains("7a ") || std::time::Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(recorded.contains("61 127.0.0.1"), "{recorded:?}");
    assert!(!recorded.contains("7a "), "{recorded:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_reboot_notice_frees_its_locks() {
    let s = TestServer::start(rw()).await;
    let (mut c, fh) = v3_file(&s, "f").await;
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("a", &fh, 1, 0, 0), true, false, false)
        )
        .await,
        Nlm4Stats::GRANTED
    );
    let notify = StatChge {
        mon_name: SmString(Bytes::from_static(b"a")),
        state: 5,
    };
    c.call(
        nsm::PROGRAM,
        nsm::VERSION,
        nsm::proc_::NOTIFY,
        &sluice_xdr::to_bytes(&notify),
    )
    .await;
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("b", &fh, 1, 0, 0), true, false, false)
        )
        .await,
        Nlm4Stats::GRANTED,
        "a's lock went with a's reboot"
    );
    // FREE_ALL does the same for b.
    let free = Nlm4Notify {
        name: NotifyName(Bytes::from_static(b"b")),
        state: 2,
    };
    let _: () = nlm_call(&mut c, nlm::proc_::FREE_ALL, &free).await;
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("a", &fh, 1, 0, 0), true, false, false)
        )
        .await,
        Nlm4Stats::GRANTED
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_bounded() {
    let mut config = rw();
    config.nlm.core.blocked_per_host_max = 1;
    let s = TestServer::start(config).await;
    let (mut c, fh) = v3_file(&s, "f").await;
    lock(
        &mut c,
        lock_args(alock("a", &fh, 1, 0, 0), true, false, false),
    )
    .await;
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("b", &fh, 1, 0, 1), true, true, false)
        )
        .await,
        Nlm4Stats::BLOCKED
    );
    assert_eq!(
        lock(
            &mut c,
            lock_args(alock("b", &fh, 2, 0, 1), true, true, false)
        )
        .await,
        Nlm4Stats::DENIED_NOLOCKS
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_calls_are_answered_by_res_calls() {
    let mut fake = FakeClient::start().await;
    let s = TestServer::start(config_for(&fake)).await;
    let (mut c, fh) = v3_file(&s, "f").await;
    let a = lock_args(alock("a", &fh, 1, 0, 0), true, false, false);
    let _: () = nlm_call(&mut c, nlm::proc_::LOCK_MSG, &a).await;
    let got = fake.next().await;
    assert_eq!((got.prog, got.proc_), (nlm::PROGRAM, nlm::proc_::LOCK_RES));
    let r: Nlm4Res = sluice_xdr::from_bytes(&got.args).unwrap();
    assert_eq!((r.stat, r.cookie), (Nlm4Stats::GRANTED, a.cookie));
    let t = Nlm4TestArgs {
        cookie: Netobj(Bytes::from_static(b"t")),
        exclusive: false,
        alock: alock("b", &fh, 1, 0, 0),
    };
    let _: () = nlm_call(&mut c, nlm::proc_::TEST_MSG, &t).await;
    let got = fake.next().await;
    assert_eq!(got.proc_, nlm::proc_::TEST_RES);
    let r: Nlm4TestRes = sluice_xdr::from_bytes(&got.args).unwrap();
    assert_eq!(r.stat.stat(), Nlm4Stats::DENIED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_portmapper_lists_nlm_and_nsm() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    for (prog, vers) in [(nlm::PROGRAM, nlm::VERSION), (nsm::PROGRAM, nsm::VERSION)] {
        let m = portmap::Mapping {
            prog,
            vers,
            prot: portmap::IPPROTO_TCP,
            port: 0,
        };
        let r = c
            .call(
                portmap::PROGRAM,
                portmap::VERSION,
                portmap::proc_::GETPORT,
                &sluice_xdr::to_bytes(&m),
            )
            .await;
        let port: u32 = sluice_xdr::from_bytes(&r.results).unwrap();
        assert_eq!(port, u32::from(s.addr.port()));
    }
    let _: SocketAddr = s.addr;
}
