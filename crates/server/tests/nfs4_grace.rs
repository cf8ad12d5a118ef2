//! NFSv4.1 restart recovery over a real socket (RFC 8881 §8.4.2): a server stopped and started
//! again on the same state directory, with clients reclaiming what they held. The design is in
//! `sluice_nfs4state::recovery::grace` (the grace period), `sluice_nfs4state::recovery::records`
//! (the client records) and `sluice_nfs4state::recovery` (what each op answers in grace).
//!
//! | RFC 8881 | behaviour | test |
//! |---|---|---|
//! | §8.4.2.1, §18.16.3 | OPEN CLAIM_PREVIOUS reclaims an open, with its share reservation | `an_open_and_a_lock_are_reclaimed_and_grace_ends_early` |
//! | §18.10.4 | LOCK with reclaim brings a lock back; LOCK without it is NFS4ERR_GRACE | same |
//! | §8.4.2 | non-reclaim OPEN, anonymous READ and WRITE, SETATTR(size) are NFS4ERR_GRACE | same |
//! | §8.4.2.1 | a client not in the records: NFS4ERR_RECLAIM_BAD | same |
//! | §18.51.3 | RECLAIM_COMPLETE ends grace once every recorded client sent it; a later reclaim is NO_GRACE | same |
//! | §8.4.2 | no records: no grace at all, reclaims are NO_GRACE | `no_client_held_state_so_grace_is_skipped` |
//! | §8.4.2 | a client that does not come back holds grace to its deadline, then loses its record | `grace_ends_at_its_deadline_without_the_absent_client` |
//! | §18.50 | DESTROY_CLIENTID removes the record: the next start skips grace | `destroy_clientid_removes_the_record` |
//! | §18.51.3 | before its RECLAIM_COMPLETE a client's OPEN (but CLAIM_PREVIOUS) is NFS4ERR_GRACE, grace or not; a second RECLAIM_COMPLETE is COMPLETE_ALREADY | `no_new_open_before_reclaim_complete_even_without_grace` |
//! | §18.51.3 | the same for LOCK without reclaim, after a reclaim in a grace period that then ended at its deadline | `no_new_open_or_lock_before_reclaim_complete_after_grace` |

#[macro_use]
mod support;

use bytes::Bytes;
use sluice_nfs4state::recovery::records;
use sluice_server::ServerConfig;
use sluice_xdr::nfs4::ops::{
    LockArgs, LockRes, Locker4, LocktArgs, LocktRes, NfsArgop4, NfsResop4, OpenArgs, OpenClaim4,
    OpenDelegation4, OpenToLockOwner4, Openflag4, ReadArgs, Res4, SetattrArgs, WriteArgs,
    OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_ACCESS_WRITE,
    OPEN4_SHARE_DENY_NONE, OPEN4_SHARE_DENY_WRITE, OPEN_DELEGATE_NONE, OPEN_DELEGATE_READ,
    OPEN_DELEGATE_WRITE, WRITE_LT,
};
use sluice_xdr::nfs4::{LockOwner4, NfsFh4, Nfsstat4, Opaque4, StableHow4, StateOwner4, Stateid4};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use support::nfs4::*;
use support::{TestDirs, TestServer};

/// Grace in the tests that expect it to end early: long enough that an early end cannot be
/// mistaken for the deadline.
const LONG_GRACE: Duration = Duration::from_secs(60);

/// A server on `dirs` with `grace`, its metrics endpoint on a port of its own.
async fn start(dirs: TestDirs, grace: Duration) -> (TestServer, SocketAddr) {
    let mut config = dirs.config();
    config.grace = Some(grace);
    config.metrics = Some("127.0.0.1:0".parse().unwrap());
    let export = dirs.export();
    let (addr, metrics, task) = bind(config.clone()).await;
    let s = TestServer {
        addr,
        export,
        config,
        task,
        dirs,
    };
    (s, metrics)
}

async fn bind(
    config: ServerConfig,
) -> (
    SocketAddr,
    SocketAddr,
    tokio::task::JoinHandle<Result<(), String>>,
) {
    let bound = sluice_server::bind(config).await.expect("server binds");
    let addr = bound.local_addr().unwrap();
    let metrics = bound.metrics.as_ref().unwrap().local_addr().unwrap();
    (addr, metrics, tokio::spawn(sluice_server::run(bound)))
}

/// Stops the server as a crash would (its task dropped: nothing is flushed or closed in
/// order; only what is on disk survives) and starts it again on the same directories.
async fn crash_and_restart(s: &mut TestServer) -> SocketAddr {
    s.task.abort();
    let _ = (&mut s.task).await;
    let (addr, metrics, task) = bind(s.config.clone()).await;
    s.addr = addr;
    s.task = task;
    metrics
}

async fn metrics(addr: SocketAddr) -> String {
    sluice_server::metrics::fetch(addr, "/metrics")
        .await
        .unwrap()
}

async fn stats(addr: SocketAddr) -> String {
    sluice_server::metrics::fetch(addr, "/stats").await.unwrap()
}

/// The owners the state directory's client records name.
fn records(s: &TestServer) -> Vec<Vec<u8>> {
    let dir = s.config.state_dir.clone();
    let store = std::sync::Arc::new(sluice_server::nfs4::store::DirStore::new(dir));
    records::StableClients::open(store).unwrap().owners()
}

fn owner_bytes(name: &str) -> Vec<u8> {
    name.as_bytes().to_vec()
}

fn open_claim(owner: &str, access: u32, deny: u32, claim: OpenClaim4) -> NfsArgop4 {
    NfsArgop4::Open(OpenArgs {
        seqid: 0,
        share_access: access,
        share_deny: deny,
        owner: StateOwner4 {
            clientid: 0,
            owner: Opaque4(Bytes::copy_from_slice(owner.as_bytes())),
        },
        openhow: Openflag4::NoCreate,
        claim,
    })
}

fn lock_op(reclaim: bool, open: Stateid4, lock_owner: &str) -> NfsArgop4 {
    NfsArgop4::Lock(LockArgs {
        locktype: WRITE_LT,
        reclaim,
        offset: 0,
        length: 100,
        locker: Locker4::New(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid: open,
            lock_seqid: 0,
            lock_owner: LockOwner4 {
                clientid: 0,
                owner: Opaque4(Bytes::copy_from_slice(lock_owner.as_bytes())),
            },
        }),
    })
}

/// PUTFH `fh` and `ops`; the status of the last op that ran.
async fn on(v: &mut V4, fh: &NfsFh4, ops: Vec<NfsArgop4>) -> (Nfsstat4, Vec<NfsResop4>) {
    let mut all = vec![NfsArgop4::Putfh(fh.clone())];
    all.extend(ops);
    let res = v.send(all).await;
    (res.status, res.results)
}

async fn reclaim_complete(v: &mut V4) -> Nfsstat4 {
    v.send(vec![NfsArgop4::ReclaimComplete(false)]).await.status
}

/// A client "host-a" that opened `f` (read and write, denying writes to others) and holds a
/// write lock on its first 100 bytes, as a client does: RECLAIM_COMPLETE first.
async fn client_with_state(s: &TestServer) -> (V4, NfsFh4) {
    std::fs::write(s.export.join("f"), b"held across the restart").unwrap();
    let mut a = V4::mount_reclaiming(s, "host-a").await;
    assert_eq!(reclaim_complete(&mut a).await, Nfsstat4::OK);
    let (o, fh) = a
        .open(
            &s.export,
            "oa",
            "f",
            false,
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_WRITE,
        )
        .await
        .unwrap();
    let (st, _) = on(&mut a, &fh, vec![lock_op(false, o.stateid, "pid-1")]).await;
    assert_eq!(st, Nfsstat4::OK, "the lock before the restart");
    (a, fh)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_and_a_lock_are_reclaimed_and_grace_ends_early() {
    let (mut s, _) = start(TestDirs::new("nfs4-grace"), LONG_GRACE).await;
    let (a, fh) = client_with_state(&s).await;
    assert_eq!(records(&s), vec![owner_bytes("host-a")], "written at once");
    let old_clientid = a.clientid;
    drop(a);

    let m = crash_and_restart(&mut s).await;
    let restarted = Instant::now();
    // A new instance (its boot epoch, kept in the state directory, grew even if the restart
    // came within the same second): the old client id is stale.
    let mut rpc = s.connect().await;
    let res = create_session(&mut rpc, old_clientid, 1).await;
    assert_eq!(res.status, Nfsstat4::STALE_CLIENTID, "{res:?}");
    let prom = metrics(m).await;
    assert!(prom.contains("sluice_nfs4_grace_active 1\n"), "{prom}");
    assert!(
        prom.contains("sluice_nfs4_grace_clients_waiting 1\n"),
        "{prom}"
    );
    assert!(stats(m)
        .await
        .contains("nfs v4 grace: in progress (1 of 1 clients"));

    // A client that held nothing: every new state waits, and it has nothing to reclaim.
    let mut b = V4::mount_reclaiming(&s, "host-b").await;
    let res = b
        .send({
            let mut ops = walk_to(&s.export);
            ops.push(open_op("ob", "g", true, OPEN4_SHARE_ACCESS_READ, 0));
            ops
        })
        .await;
    assert_eq!(res.status, Nfsstat4::GRACE, "new OPEN in grace");
    assert!(!s.export.join("g").exists(), "nothing created in grace");
    let claim = OpenClaim4::Previous(OPEN_DELEGATE_NONE);
    let reclaim_b = open_claim("ob", OPEN4_SHARE_ACCESS_READ, 0, claim.clone());
    let (st, _) = on(&mut b, &fh, vec![reclaim_b]).await;
    assert_eq!(st, Nfsstat4::RECLAIM_BAD, "not in the records");
    let read = NfsArgop4::Read(ReadArgs {
        stateid: Stateid4::ANONYMOUS,
        offset: 0,
        count: 10,
    });
    assert_eq!(on(&mut b, &fh, vec![read]).await.0, Nfsstat4::GRACE);
    let write = NfsArgop4::Write(WriteArgs {
        stateid: Stateid4::ANONYMOUS,
        offset: 0,
        stable: StableHow4::FILE_SYNC,
        data: sluice_xdr::Payload::from_chunks(vec![Bytes::from_static(b"x")]),
    });
    assert_eq!(on(&mut b, &fh, vec![write]).await.0, Nfsstat4::GRACE);
    let truncate = NfsArgop4::Setattr(SetattrArgs {
        stateid: Stateid4::ANONYMOUS,
        obj_attributes: sluice_xdr::nfs4::attrs::AttrValues {
            size: Some(0),
            ..Default::default()
        }
        .encode(),
    });
    assert_eq!(on(&mut b, &fh, vec![truncate]).await.0, Nfsstat4::GRACE);
    assert_eq!(
        std::fs::read(s.export.join("f")).unwrap(),
        b"held across the restart"
    );

    // host-a comes back (a new client id) and reclaims its open and its lock.
    let mut a = V4::mount_reclaiming(&s, "host-a").await;
    let reclaim_a = open_claim(
        "oa",
        OPEN4_SHARE_ACCESS_BOTH,
        OPEN4_SHARE_DENY_WRITE,
        claim.clone(),
    );
    let (st, res) = on(&mut a, &fh, vec![reclaim_a.clone()]).await;
    assert_eq!(st, Nfsstat4::OK, "CLAIM_PREVIOUS in grace: {res:?}");
    let NfsResop4::Open(Res4::Ok(o)) = &res[2] else {
        panic!("{res:?}")
    };
    let open = o.stateid;
    let (st, _) = on(&mut a, &fh, vec![lock_op(false, open, "pid-1")]).await;
    assert_eq!(st, Nfsstat4::GRACE, "a new LOCK in grace");
    let (st, res) = on(&mut a, &fh, vec![lock_op(true, open, "pid-1")]).await;
    assert_eq!(st, Nfsstat4::OK, "LOCK reclaim: {res:?}");
    assert!(matches!(res[2], NfsResop4::Lock(LockRes::Ok(_))));

    // Its RECLAIM_COMPLETE was the last one grace waited for.
    assert_eq!(reclaim_complete(&mut a).await, Nfsstat4::OK);
    let (st, _) = on(&mut a, &fh, vec![reclaim_a]).await;
    assert_eq!(st, Nfsstat4::NO_GRACE, "a reclaim after RECLAIM_COMPLETE");
    assert!(restarted.elapsed() < LONG_GRACE / 2);

    // Grace is over: new state is granted (once host-b too said it reclaims nothing: RFC 8881
    // §18.51.3), and what was reclaimed is in force.
    assert_eq!(reclaim_complete(&mut b).await, Nfsstat4::OK);
    let (st, _) = on(
        &mut b,
        &fh,
        vec![open_claim(
            "ob",
            OPEN4_SHARE_ACCESS_WRITE,
            OPEN4_SHARE_DENY_NONE,
            OpenClaim4::Fh,
        )],
    )
    .await;
    assert_eq!(st, Nfsstat4::SHARE_DENIED, "the reclaimed deny-write holds");
    let (st, res) = on(
        &mut b,
        &fh,
        vec![open_claim(
            "ob",
            OPEN4_SHARE_ACCESS_READ,
            OPEN4_SHARE_DENY_NONE,
            OpenClaim4::Fh,
        )],
    )
    .await;
    assert_eq!(st, Nfsstat4::OK, "a new OPEN after grace: {res:?}");
    let lockt = NfsArgop4::Lockt(LocktArgs {
        locktype: WRITE_LT,
        offset: 50,
        length: 1,
        owner: LockOwner4 {
            clientid: 0,
            owner: Opaque4(Bytes::from_static(b"pid-9")),
        },
    });
    let (_, res) = on(&mut b, &fh, vec![lockt]).await;
    let NfsResop4::Lockt(LocktRes::Denied(d)) = &res[2] else {
        panic!("the reclaimed lock is not held: {res:?}")
    };
    assert_eq!((d.offset, d.length), (0, 100));

    // The stats say why and when grace ended (the lease task reports within a second).
    let prom = metrics_when(m, "sluice_nfs4_grace_ended{reason=\"AllReclaimed\"} 1\n").await;
    assert!(prom.contains("sluice_nfs4_grace_active 0\n"), "{prom}");
    assert!(
        prom.contains("sluice_nfs4_grace_length_seconds 60\n"),
        "{prom}"
    );
    let text = stats(m).await;
    assert!(
        text.contains("nfs v4 grace: ended early, every client reclaimed (AllReclaimed)"),
        "{text}"
    );
    // Both clients now hold state: both are recorded.
    assert_eq!(
        records(&s),
        vec![owner_bytes("host-a"), owner_bytes("host-b")]
    );
}

/// A server restart: the client's CLAIM_PREVIOUS names the read delegation it held, and gets
/// one back (RFC 8881 §10.2.1; the Linux client keeps byte-range locks local under a
/// delegation and skips their reclaim for an open it counts as delegated, so a refusal would
/// lose them): with `recall` set, since this client has no back channel, and DELEGRETURN
/// takes it. A write delegation named so is granted back the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegation_named_at_claim_previous_is_granted_back() {
    let (mut s, _) = start(TestDirs::new("nfs4-grace-deleg"), LONG_GRACE).await;
    std::fs::write(s.export.join("r"), b"read under a delegation").unwrap();
    std::fs::write(s.export.join("w"), b"written under one").unwrap();
    let mut a = V4::mount_reclaiming(&s, "host-d").await;
    assert_eq!(reclaim_complete(&mut a).await, Nfsstat4::OK);
    let (_, fr) = a
        .open(&s.export, "or", "r", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .unwrap();
    let (_, fw) = a
        .open(&s.export, "ow", "w", false, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    drop(a);
    crash_and_restart(&mut s).await;
    let mut a = V4::mount_reclaiming(&s, "host-d").await;
    let claim = |t| OpenClaim4::Previous(t);
    let (st, res) = on(
        &mut a,
        &fr,
        vec![open_claim(
            "or",
            OPEN4_SHARE_ACCESS_READ,
            0,
            claim(OPEN_DELEGATE_READ),
        )],
    )
    .await;
    assert_eq!(st, Nfsstat4::OK, "{res:?}");
    let NfsResop4::Open(Res4::Ok(o)) = &res[2] else {
        panic!("{res:?}")
    };
    let OpenDelegation4::Read(d) = &o.delegation else {
        panic!("no read delegation back: {:?}", o.delegation)
    };
    assert!(d.recall, "no back channel: granted with recall set");
    let deleg = d.stateid;
    let (st, res) = on(
        &mut a,
        &fw,
        vec![open_claim(
            "ow",
            OPEN4_SHARE_ACCESS_BOTH,
            0,
            claim(OPEN_DELEGATE_WRITE),
        )],
    )
    .await;
    assert_eq!(st, Nfsstat4::OK, "{res:?}");
    let NfsResop4::Open(Res4::Ok(o)) = &res[2] else {
        panic!("{res:?}")
    };
    let OpenDelegation4::Write(w) = &o.delegation else {
        panic!("no write delegation back: {:?}", o.delegation)
    };
    assert!(w.recall, "no back channel: granted with recall set");
    let wdeleg = w.stateid;
    let (st, res) = on(&mut a, &fw, vec![NfsArgop4::Delegreturn(wdeleg)]).await;
    assert_eq!(
        st,
        Nfsstat4::OK,
        "DELEGRETURN of the reclaimed write one: {res:?}"
    );
    let (st, res) = on(&mut a, &fr, vec![NfsArgop4::Delegreturn(deleg)]).await;
    assert_eq!(
        st,
        Nfsstat4::OK,
        "DELEGRETURN of the reclaimed one: {res:?}"
    );
    assert_eq!(reclaim_complete(&mut a).await, Nfsstat4::OK);
}

/// The metrics once they hold `line` (the lease task reports grace's end within its tick of
/// at most a second); fails after 5 s.
async fn metrics_when(addr: SocketAddr, line: &str) -> String {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let prom = metrics(addr).await;
        if prom.contains(line) {
            return prom;
        }
        assert!(Instant::now() < until, "no {line} in\n{prom}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A new OPEN (creating `g`) by `b`: its status.
async fn open_new(b: &mut V4, export: &std::path::Path) -> Nfsstat4 {
    let mut ops = walk_to(export);
    ops.push(open_op("ob", "g", true, OPEN4_SHARE_ACCESS_READ, 0));
    b.send(ops).await.status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_client_held_state_so_grace_is_skipped() {
    let (mut s, _) = start(TestDirs::new("nfs4-grace-skip"), LONG_GRACE).await;
    std::fs::write(s.export.join("f"), b"data").unwrap();
    // A client that mounts and looks around takes no state and leaves no record.
    let mut a = V4::mount_reclaiming(&s, "host-a").await;
    let res = a.send(walk_to(&s.export)).await;
    assert_eq!(res.status, Nfsstat4::OK);
    assert!(records(&s).is_empty());
    drop(a);

    let m = crash_and_restart(&mut s).await;
    let mut a = V4::mount_reclaiming(&s, "host-a").await;
    let mut ops = walk_to(&s.export);
    ops.extend([lookup("f"), NfsArgop4::Getfh(())]);
    let res = a.send(ops).await;
    let Some(NfsResop4::Getfh(Res4::Ok(fh))) = res.results.last() else {
        panic!("{res:?}")
    };
    let fh = fh.clone();
    let (st, _) = on(
        &mut a,
        &fh,
        vec![open_claim(
            "oa",
            OPEN4_SHARE_ACCESS_READ,
            0,
            OpenClaim4::Previous(OPEN_DELEGATE_NONE),
        )],
    )
    .await;
    assert_eq!(st, Nfsstat4::NO_GRACE, "nothing to reclaim in");
    assert_eq!(reclaim_complete(&mut a).await, Nfsstat4::OK);
    let (o, _) = a
        .open(&s.export, "oa", "f", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .expect("no grace: a new OPEN at once");
    let (st, _) = on(&mut a, &fh, vec![lock_op(true, o.stateid, "p")]).await;
    assert_eq!(st, Nfsstat4::NO_GRACE);
    let prom = metrics(m).await;
    assert!(
        prom.contains("sluice_nfs4_grace_ended{reason=\"Skipped\"} 1\n"),
        "{prom}"
    );
    assert!(
        stats(m).await.contains("nfs v4 grace: skipped"),
        "no records, no grace"
    );
    assert_eq!(
        records(&s),
        vec![owner_bytes("host-a")],
        "its RECLAIM_COMPLETE recorded it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grace_ends_at_its_deadline_without_the_absent_client() {
    let grace = Duration::from_secs(2);
    let (mut s, _) = start(TestDirs::new("nfs4-grace-deadline"), grace).await;
    let (a, _) = client_with_state(&s).await;
    drop(a);
    let m = crash_and_restart(&mut s).await;
    let restarted = Instant::now();
    let mut b = V4::mount_reclaiming(&s, "host-b").await;
    assert_eq!(reclaim_complete(&mut b).await, Nfsstat4::OK);
    assert_eq!(open_new(&mut b, &s.export).await, Nfsstat4::GRACE);
    // host-a never comes back: grace lasts its whole length, then ends.
    let mut status = Nfsstat4::GRACE;
    while status == Nfsstat4::GRACE && restarted.elapsed() < grace * 5 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        status = open_new(&mut b, &s.export).await;
    }
    assert_eq!(status, Nfsstat4::OK);
    assert!(restarted.elapsed() >= grace, "not before the deadline");
    metrics_when(m, "sluice_nfs4_grace_ended{reason=\"Deadline\"} 1\n").await;
    // host-a's record is gone with its right to reclaim; host-b's own is there.
    assert_eq!(records(&s), vec![owner_bytes("host-b")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroy_clientid_removes_the_record() {
    let (mut s, _) = start(TestDirs::new("nfs4-grace-destroy"), LONG_GRACE).await;
    let mut a = V4::mount_reclaiming(&s, "host-a").await;
    assert_eq!(reclaim_complete(&mut a).await, Nfsstat4::OK);
    assert_eq!(records(&s), vec![owner_bytes("host-a")]);
    let sid = a.sessionid;
    let res = compound(&mut a.rpc, 1, vec![NfsArgop4::DestroySession(sid)]).await;
    assert_eq!(res.status, Nfsstat4::OK);
    let id = a.clientid;
    let res = compound(&mut a.rpc, 1, vec![NfsArgop4::DestroyClientid(id)]).await;
    assert_eq!(res.status, Nfsstat4::OK);
    // Removed before the reply, not at the lease task's next tick: a server stopped right
    // after a client's exit must not wait a grace period for it at its next start.
    assert!(records(&s).is_empty(), "still recorded: {:?}", records(&s));
    crash_and_restart(&mut s).await;
    std::fs::write(s.export.join("f"), b"data").unwrap();
    let mut a = V4::mount(&s, "host-a").await;
    a.open(&s.export, "oa", "f", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .expect("no record, no grace");
}

/// RFC 8881 §18.51.3: a client sends RECLAIM_COMPLETE before its first non-reclaim OPEN; one
/// that does not gets NFS4ERR_GRACE (as from knfsd), here on a server that has no grace period
/// at all; afterwards the OPEN is granted and a second RECLAIM_COMPLETE is COMPLETE_ALREADY.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_new_open_before_reclaim_complete_even_without_grace() {
    let (s, m) = start(TestDirs::new("nfs4-grace-rc-none"), LONG_GRACE).await;
    metrics_when(m, "sluice_nfs4_grace_ended{reason=\"Skipped\"} 1\n").await;
    std::fs::write(s.export.join("f"), b"data").unwrap();
    let mut a = V4::mount_reclaiming(&s, "host-a").await;
    assert_eq!(open_new(&mut a, &s.export).await, Nfsstat4::GRACE);
    assert!(!s.export.join("g").exists(), "nothing created");
    let opened = a
        .open(&s.export, "oa", "f", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await;
    assert_eq!(
        opened.err(),
        Some(Nfsstat4::GRACE),
        "an OPEN of an existing file"
    );
    assert_eq!(reclaim_complete(&mut a).await, Nfsstat4::OK);
    assert_eq!(open_new(&mut a, &s.export).await, Nfsstat4::OK);
    a.open(&s.export, "oa", "f", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .expect("an OPEN after RECLAIM_COMPLETE");
    assert_eq!(reclaim_complete(&mut a).await, Nfsstat4::COMPLETE_ALREADY);
}

/// RFC 8881 §18.51.3 after a restart: the client reclaims its open (CLAIM_PREVIOUS before
/// RECLAIM_COMPLETE, in grace: granted), grace then ends at its deadline without its
/// RECLAIM_COMPLETE, and its new OPENs and a LOCK without reclaim are still NFS4ERR_GRACE
/// until it sends it (knfsd refuses the OPENs so, and grants the LOCK: the RFC's "non-reclaim
/// locking operations" decide, `sluice_nfs4state::recovery`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_new_open_or_lock_before_reclaim_complete_after_grace() {
    let grace = Duration::from_secs(1);
    let (mut s, _) = start(TestDirs::new("nfs4-grace-rc-after"), grace).await;
    let (a, fh) = client_with_state(&s).await;
    drop(a);
    let m = crash_and_restart(&mut s).await;
    let mut a = V4::mount_reclaiming(&s, "host-a").await;
    let reclaim = open_claim(
        "oa",
        OPEN4_SHARE_ACCESS_BOTH,
        OPEN4_SHARE_DENY_WRITE,
        OpenClaim4::Previous(OPEN_DELEGATE_NONE),
    );
    let (st, res) = on(&mut a, &fh, vec![reclaim]).await;
    assert_eq!(
        st,
        Nfsstat4::OK,
        "CLAIM_PREVIOUS before RECLAIM_COMPLETE: {res:?}"
    );
    let NfsResop4::Open(Res4::Ok(o)) = &res[2] else {
        panic!("{res:?}")
    };
    let open = o.stateid;
    metrics_when(m, "sluice_nfs4_grace_ended{reason=\"Deadline\"} 1\n").await;

    assert_eq!(open_new(&mut a, &s.export).await, Nfsstat4::GRACE);
    assert!(!s.export.join("g").exists(), "nothing created");
    let by_fh = open_claim("ob", OPEN4_SHARE_ACCESS_READ, 0, OpenClaim4::Fh);
    assert_eq!(
        on(&mut a, &fh, vec![by_fh.clone()]).await.0,
        Nfsstat4::GRACE
    );
    let (st, _) = on(&mut a, &fh, vec![lock_op(false, open, "pid-1")]).await;
    assert_eq!(st, Nfsstat4::GRACE, "a new LOCK before RECLAIM_COMPLETE");
    // What it reclaimed it uses meanwhile.
    let read = NfsArgop4::Read(ReadArgs {
        stateid: open,
        offset: 0,
        count: 4,
    });
    assert_eq!(on(&mut a, &fh, vec![read]).await.0, Nfsstat4::OK);

    assert_eq!(reclaim_complete(&mut a).await, Nfsstat4::OK);
    let (st, res) = on(&mut a, &fh, vec![lock_op(false, open, "pid-1")]).await;
    assert_eq!(st, Nfsstat4::OK, "{res:?}");
    assert_eq!(on(&mut a, &fh, vec![by_fh]).await.0, Nfsstat4::OK);
    assert_eq!(open_new(&mut a, &s.export).await, Nfsstat4::OK);
    assert_eq!(reclaim_complete(&mut a).await, Nfsstat4::COMPLETE_ALREADY);
}
