//! NFSv4.1 byte-range locks over a real socket (RFC 8881 §9, §18.10-§18.12): LOCK, LOCKT
//! and LOCKU built by hand, two clients on two connections. The design is in
//! `sluice_nfs4state::locks::ranges` (ranges) and `sluice_nfs4state::locks::stateids` (lock
//! stateids).
//!
//! | RFC 8881 | behaviour | test |
//! |---|---|---|
//! | §9.1, §18.10.4 | READ locks share, WRITE locks conflict; NFS4ERR_DENIED names the lock, its owner and range | `locks_conflict_between_clients_and_denied_names_the_holder` |
//! | §18.10.4 | a denied LOCK of a new lock owner leaves no state | same |
//! | §9.3 | upgrade, downgrade, a range split by LOCKU; a conflicting upgrade changes nothing | `upgrade_downgrade_and_split` |
//! | §18.10.4 | the whole 64-bit range; zero length and overflow are NFS4ERR_INVAL; blocking types answered at once; reclaim NO_GRACE | `the_whole_range_and_invalid_arguments` |
//! | §8.2.2, §18.10.4 | BAD / OLD / STALE lock stateids, OPENMODE, LOCKU's errors | `lock_stateid_errors` |
//! | §8.2.4, §18.38, §18.48 | TEST_STATEID and FREE_STATEID on lock stateids; LOCKS_HELD; valid with no locks | same |
//! | §16.2.3.1.2 | LOCK and LOCKU with the current stateid in one COMPOUND | `the_current_stateid_runs_open_lock_locku` |
//! | §18.2.4 | CLOSE with locks held frees them | `close_with_locks_held_frees_them` |
//! | §18.39 | RELEASE_LOCKOWNER is NFS4ERR_NOTSUPP in minor version 1 | `lock_stateid_errors` |
//! | §8.3 | a courtesy client keeps its lock until a conflicting LOCK expires it | `a_courtesy_clients_lock_is_broken_by_a_conflicting_lock` |
//! | §9.1, §9.7 | one file with hard links in two directories (two handles) is one file for locks and share reservations | `hard_links_in_two_directories_are_one_file_for_locks_and_shares` |

#[macro_use]
mod support;

use bytes::Bytes;
use sluice_xdr::nfs4::ops::{
    ExistLockOwner4, Lock4Denied, LockArgs, LockRes, Locker4, LocktArgs, LocktRes, LockuArgs,
    NfsArgop4, NfsResop4, OpenToLockOwner4, ReadArgs, Res4, StateidList, WriteArgs,
    OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_ACCESS_WRITE,
    OPEN4_SHARE_DENY_WRITE, READW_LT, READ_LT, WRITEW_LT, WRITE_LT,
};
use sluice_xdr::nfs4::{LockOwner4, NfsFh4, Nfsstat4, Opaque4, StableHow4, Stateid4};
use std::time::Duration;
use support::nfs4::*;
use support::{rw, TestServer};

const ALL: u64 = u64::MAX;

fn owner(name: &str) -> LockOwner4 {
    LockOwner4 {
        // Ignored in minor version 1: the session's client id counts (§18.10.3).
        clientid: 0,
        owner: Opaque4(Bytes::copy_from_slice(name.as_bytes())),
    }
}

/// LOCK by a new lock owner, from open stateid `open`.
fn lock_new(kind: u32, offset: u64, length: u64, open: Stateid4, lock_owner: &str) -> NfsArgop4 {
    NfsArgop4::Lock(LockArgs {
        locktype: kind,
        reclaim: false,
        offset,
        length,
        locker: Locker4::New(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid: open,
            lock_seqid: 0,
            lock_owner: owner(lock_owner),
        }),
    })
}

/// LOCK by the owner of lock stateid `sid`.
fn lock_exist(kind: u32, offset: u64, length: u64, sid: Stateid4) -> NfsArgop4 {
    NfsArgop4::Lock(LockArgs {
        locktype: kind,
        reclaim: false,
        offset,
        length,
        locker: Locker4::Exist(ExistLockOwner4 {
            lock_stateid: sid,
            lock_seqid: 0,
        }),
    })
}

fn lockt(kind: u32, offset: u64, length: u64, lock_owner: &str) -> NfsArgop4 {
    NfsArgop4::Lockt(LocktArgs {
        locktype: kind,
        offset,
        length,
        owner: owner(lock_owner),
    })
}

fn locku(offset: u64, length: u64, sid: Stateid4) -> NfsArgop4 {
    NfsArgop4::Locku(LockuArgs {
        locktype: READ_LT,
        seqid: 0,
        lock_stateid: sid,
        offset,
        length,
    })
}

/// PUTFH `fh` and `op`: the op's result.
async fn on(v: &mut V4, fh: &NfsFh4, op: NfsArgop4) -> NfsResop4 {
    let res = v.send(vec![NfsArgop4::Putfh(fh.clone()), op]).await;
    assert_eq!(res.results.len(), 3, "{res:?}");
    res.results[2].clone()
}

/// LOCK on `fh`: the lock stateid, or the denial, or the error.
async fn lock(v: &mut V4, fh: &NfsFh4, op: NfsArgop4) -> LockRes {
    match on(v, fh, op).await {
        NfsResop4::Lock(r) => r,
        other => panic!("{other:?}"),
    }
}

async fn test_lock(v: &mut V4, fh: &NfsFh4, op: NfsArgop4) -> LocktRes {
    match on(v, fh, op).await {
        NfsResop4::Lockt(r) => r,
        other => panic!("{other:?}"),
    }
}

async fn unlock(v: &mut V4, fh: &NfsFh4, op: NfsArgop4) -> Res4<Stateid4> {
    match on(v, fh, op).await {
        NfsResop4::Locku(r) => r,
        other => panic!("{other:?}"),
    }
}

fn granted(r: LockRes) -> Stateid4 {
    match r {
        LockRes::Ok(s) => s,
        other => panic!("not granted: {other:?}"),
    }
}

fn denied_lock(r: LockRes) -> Lock4Denied {
    match r {
        LockRes::Denied(d) => d,
        other => panic!("not denied: {other:?}"),
    }
}

fn denied_test(r: LocktRes) -> Lock4Denied {
    match r {
        LocktRes::Denied(d) => d,
        other => panic!("not denied: {other:?}"),
    }
}

fn denial(offset: u64, length: u64, kind: u32, clientid: u64, lock_owner: &str) -> Lock4Denied {
    Lock4Denied {
        offset,
        length,
        locktype: kind,
        owner: LockOwner4 {
            clientid,
            ..owner(lock_owner)
        },
    }
}

/// Two clients with `f` open for reading and writing: (a, a's open, b, b's open, the handle).
async fn two_openers(s: &TestServer) -> (V4, Stateid4, V4, Stateid4, NfsFh4) {
    let mut a = V4::mount(s, "lock client a").await;
    let (oa, fh) = a
        .open(&s.export, "oa", "f", true, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    let mut b = V4::mount(s, "lock client b").await;
    let (ob, _) = b
        .open(&s.export, "ob", "f", false, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    (a, oa.stateid, b, ob.stateid, fh)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_conflict_between_clients_and_denied_names_the_holder() {
    let s = TestServer::start(rw()).await;
    let (mut a, oa, mut b, ob, fh) = two_openers(&s).await;
    let la = granted(lock(&mut a, &fh, lock_new(WRITE_LT, 100, 50, oa, "la")).await);
    assert_eq!(la.seqid, 1, "a new lock stateid starts at 1");
    assert_ne!(la.other, oa.other, "a lock stateid of its own");

    // B's READ lock over A's WRITE lock: DENIED with A's lock, owner and range.
    let d = denied_lock(lock(&mut b, &fh, lock_new(READ_LT, 120, 10, ob, "lb")).await);
    assert_eq!(d, denial(100, 50, WRITE_LT, a.clientid, "la"));
    // That denial left no lock stateid: the same new owner starts at seqid 1 again.
    let lb = granted(lock(&mut b, &fh, lock_new(READ_LT, 0, 100, ob, "lb")).await);
    assert_eq!(lb.seqid, 1, "adjacent, not overlapping: granted");

    // LOCKT: the same answers, no state.
    let d = denied_test(test_lock(&mut b, &fh, lockt(WRITE_LT, 149, 1, "lb")).await);
    assert_eq!(d, denial(100, 50, WRITE_LT, a.clientid, "la"));
    assert_eq!(
        test_lock(&mut b, &fh, lockt(WRITE_LT, 150, ALL, "lb")).await,
        LocktRes::Ok(())
    );
    // An owner never conflicts with itself; another owner of the same client does.
    assert_eq!(
        test_lock(&mut a, &fh, lockt(WRITE_LT, 100, 1, "la")).await,
        LocktRes::Ok(())
    );
    let d = denied_test(test_lock(&mut a, &fh, lockt(READ_LT, 149, 10, "other")).await);
    assert_eq!((d.offset, d.length), (100, 50));
    // READ locks share: A reads under B's READ range.
    let d = denied_test(test_lock(&mut a, &fh, lockt(WRITE_LT, 0, 1, "la")).await);
    assert_eq!(d, denial(0, 100, READ_LT, b.clientid, "lb"));
    assert_eq!(
        test_lock(&mut a, &fh, lockt(READ_LT, 0, 1, "la")).await,
        LocktRes::Ok(())
    );

    // A's LOCKU lets B in.
    let u = unlock(&mut a, &fh, locku(100, 50, la)).await;
    assert_eq!(u, Res4::Ok(Stateid4 { seqid: 2, ..la }));
    let lb2 = granted(lock(&mut b, &fh, lock_exist(WRITE_LT, 120, 10, lb)).await);
    assert_eq!(lb2, Stateid4 { seqid: 2, ..lb });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_downgrade_and_split() {
    let s = TestServer::start(rw()).await;
    let (mut a, oa, mut b, ob, fh) = two_openers(&s).await;
    let la = granted(lock(&mut a, &fh, lock_new(READ_LT, 0, 100, oa, "la")).await);
    // Upgrade the middle: [0 R 39][40 W 59][60 R 99].
    let la = granted(lock(&mut a, &fh, lock_exist(WRITE_LT, 40, 20, la)).await);
    assert_eq!(la.seqid, 2);
    let d = denied_test(test_lock(&mut b, &fh, lockt(READ_LT, 45, 1, "lb")).await);
    assert_eq!(d, denial(40, 20, WRITE_LT, a.clientid, "la"));
    let d = denied_test(test_lock(&mut b, &fh, lockt(WRITE_LT, 60, 1, "lb")).await);
    assert_eq!(d, denial(60, 40, READ_LT, a.clientid, "la"));
    // Downgrade it back: one READ range again.
    let la = granted(lock(&mut a, &fh, lock_exist(READ_LT, 40, 20, la)).await);
    assert_eq!(la.seqid, 3);
    let d = denied_test(test_lock(&mut b, &fh, lockt(WRITE_LT, 99, 1, "lb")).await);
    assert_eq!(d, denial(0, 100, READ_LT, a.clientid, "la"), "merged");
    // LOCKU of the middle splits it: [0 R 39] [60 R 99].
    let la = match unlock(&mut a, &fh, locku(40, 20, la)).await {
        Res4::Ok(s) => s,
        other => panic!("{other:?}"),
    };
    assert_eq!(la.seqid, 4);
    assert_eq!(
        test_lock(&mut b, &fh, lockt(WRITE_LT, 40, 20, "lb")).await,
        LocktRes::Ok(())
    );
    let d = denied_test(test_lock(&mut b, &fh, lockt(WRITE_LT, 30, 20, "lb")).await);
    assert_eq!(d, denial(0, 40, READ_LT, a.clientid, "la"));
    // B reads a byte of A's range; A's upgrade of everything is then denied whole.
    let lb = granted(lock(&mut b, &fh, lock_new(READ_LT, 70, 1, ob, "lb")).await);
    let d = denied_lock(lock(&mut a, &fh, lock_exist(WRITE_LT, 0, ALL, la)).await);
    assert_eq!(d, denial(70, 1, READ_LT, b.clientid, "lb"));
    // Nothing of A changed: its ranges are still READ (B's READ test passes) and its
    // stateid did not move.
    assert_eq!(
        test_lock(&mut b, &fh, lockt(READ_LT, 0, ALL, "lb")).await,
        LocktRes::Ok(())
    );
    let res = a
        .send(vec![NfsArgop4::TestStateid(StateidList(vec![la]))])
        .await;
    assert_eq!(statuses(&res), vec![Nfsstat4::OK, Nfsstat4::OK]);
    let _ = lb;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_range_and_invalid_arguments() {
    let s = TestServer::start(rw()).await;
    let (mut a, oa, mut b, ob, fh) = two_openers(&s).await;
    for (off, len, kind) in [
        (0, 0, WRITE_LT),
        (u64::MAX, 2, WRITE_LT),
        (3, u64::MAX - 1, WRITE_LT),
        (0, 1, 0),
        (0, 1, 5),
    ] {
        let r = lock(&mut a, &fh, lock_new(kind, off, len, oa, "la")).await;
        assert_eq!(r, LockRes::Err(Nfsstat4::INVAL), "({off}, {len}, {kind})");
        let r = test_lock(&mut a, &fh, lockt(kind, off, len, "la")).await;
        assert_eq!(r, LocktRes::Err(Nfsstat4::INVAL), "({off}, {len}, {kind})");
    }
    let mut reclaim = lock_new(WRITE_LT, 0, 1, oa, "la");
    if let NfsArgop4::Lock(l) = &mut reclaim {
        l.reclaim = true;
    }
    assert_eq!(
        lock(&mut a, &fh, reclaim).await,
        LockRes::Err(Nfsstat4::NO_GRACE),
        "no grace period to reclaim in"
    );

    // offset + length == 2^64 ends at the last offset; all ones runs to the end.
    let la = granted(lock(&mut a, &fh, lock_new(WRITE_LT, 2, u64::MAX - 1, oa, "la")).await);
    let d = denied_test(test_lock(&mut b, &fh, lockt(READ_LT, u64::MAX, 1, "lb")).await);
    assert_eq!(d, denial(2, ALL, WRITE_LT, a.clientid, "la"));
    let la = granted(lock(&mut a, &fh, lock_exist(WRITE_LT, 0, ALL, la)).await);
    let d = denied_test(test_lock(&mut b, &fh, lockt(READ_LT, 0, 1, "lb")).await);
    assert_eq!(d, denial(0, ALL, WRITE_LT, a.clientid, "la"));

    // Blocking types get their answer at once (the client polls).
    for kind in [READW_LT, WRITEW_LT] {
        let d = denied_lock(lock(&mut b, &fh, lock_new(kind, 10, 1, ob, "lb")).await);
        assert_eq!(d, denial(0, ALL, WRITE_LT, a.clientid, "la"));
    }
    granted(unlock(&mut a, &fh, locku(0, ALL, la)).await.into_lock());
    let lb = granted(lock(&mut b, &fh, lock_new(WRITEW_LT, 10, 1, ob, "lb")).await);
    let d = denied_test(test_lock(&mut a, &fh, lockt(READW_LT, 0, ALL, "la")).await);
    assert_eq!(
        d,
        denial(10, 1, WRITE_LT, b.clientid, "lb"),
        "reported as WRITE_LT"
    );
    let _ = lb;
}

trait IntoLock {
    fn into_lock(self) -> LockRes;
}

impl IntoLock for Res4<Stateid4> {
    fn into_lock(self) -> LockRes {
        match self {
            Res4::Ok(s) => LockRes::Ok(s),
            Res4::Err(e) => LockRes::Err(e),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_stateid_errors() {
    let s = TestServer::start(rw()).await;
    let (mut a, oa, mut b, ob, fh) = two_openers(&s).await;
    let (_, other_fh) = a
        .open(&s.export, "oa", "g", true, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    let l1 = granted(lock(&mut a, &fh, lock_new(WRITE_LT, 0, 10, oa, "la")).await);
    let l2 = granted(lock(&mut a, &fh, lock_exist(WRITE_LT, 20, 10, l1)).await);
    assert_eq!(l2, Stateid4 { seqid: 2, ..l1 });

    let mut unknown = l2;
    unknown.other[11] ^= 0xff;
    let mut stale = l2;
    stale.other[0] ^= 0xff;
    for (sid, want, why) in [
        (l1, Nfsstat4::OLD_STATEID, "an old seqid"),
        (
            Stateid4 { seqid: 3, ..l2 },
            Nfsstat4::BAD_STATEID,
            "a seqid from the future",
        ),
        (unknown, Nfsstat4::BAD_STATEID, "unknown"),
        (stale, Nfsstat4::STALE_STATEID, "another server instance"),
        (
            oa,
            Nfsstat4::BAD_STATEID,
            "an open stateid is no lock stateid",
        ),
    ] {
        let r = lock(&mut a, &fh, lock_exist(WRITE_LT, 40, 1, sid)).await;
        assert_eq!(r, LockRes::Err(want), "LOCK: {why}");
        let r = unlock(&mut a, &fh, locku(0, 1, sid)).await;
        assert_eq!(r, Res4::Err(want), "LOCKU: {why}");
    }
    // Another client's lock stateid, and a lock stateid on another file.
    let r = lock(&mut b, &fh, lock_exist(WRITE_LT, 40, 1, l2)).await;
    assert_eq!(r, LockRes::Err(Nfsstat4::BAD_STATEID));
    let r = lock(&mut a, &other_fh, lock_exist(WRITE_LT, 40, 1, l2)).await;
    assert_eq!(r, LockRes::Err(Nfsstat4::BAD_STATEID));
    // A new lock owner needs an open stateid of this client and file.
    let r = lock(&mut b, &fh, lock_new(WRITE_LT, 40, 1, oa, "lb")).await;
    assert_eq!(r, LockRes::Err(Nfsstat4::BAD_STATEID));
    let r = lock(
        &mut a,
        &fh,
        lock_new(WRITE_LT, 40, 1, Stateid4 { seqid: 9, ..oa }, "x"),
    )
    .await;
    assert_eq!(r, LockRes::Err(Nfsstat4::BAD_STATEID));
    // A WRITE lock needs an open for writing.
    let (ro, _) = b
        .open(&s.export, "reader", "f", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .unwrap();
    let r = lock(&mut b, &fh, lock_new(WRITE_LT, 40, 1, ro.stateid, "lr")).await;
    assert_eq!(r, LockRes::Err(Nfsstat4::OPENMODE));
    let lr = granted(lock(&mut b, &fh, lock_new(READ_LT, 40, 1, ro.stateid, "lr")).await);

    // I/O under a lock stateid goes by its open's access.
    let write = |sid| {
        NfsArgop4::Write(WriteArgs {
            stateid: sid,
            offset: 0,
            stable: StableHow4::FILE_SYNC,
            data: sluice_xdr::Payload::from_chunks(vec![Bytes::from_static(b"x")]),
        })
    };
    let read = |sid| {
        NfsArgop4::Read(ReadArgs {
            stateid: sid,
            offset: 0,
            count: 16,
        })
    };
    assert_eq!(on(&mut a, &fh, write(l2)).await.status(), Nfsstat4::OK);
    assert_eq!(on(&mut b, &fh, read(lr)).await.status(), Nfsstat4::OK);
    assert_eq!(
        on(&mut b, &fh, write(lr)).await.status(),
        Nfsstat4::OPENMODE
    );
    let _ = ob;

    // TEST_STATEID and FREE_STATEID (§8.2.4: valid with no locks until freed).
    let res = a
        .send(vec![NfsArgop4::TestStateid(StateidList(vec![
            l2, l1, unknown, stale,
        ]))])
        .await;
    let NfsResop4::TestStateid(Res4::Ok(list)) = &res.results[1] else {
        panic!("{res:?}")
    };
    use Nfsstat4 as S;
    assert_eq!(
        list.0,
        vec![S::OK, S::OLD_STATEID, S::BAD_STATEID, S::BAD_STATEID]
    );
    let res = a.send(vec![NfsArgop4::FreeStateid(l2)]).await;
    assert_eq!(statuses(&res), vec![S::OK, S::LOCKS_HELD]);
    let l3 = match unlock(&mut a, &fh, locku(0, ALL, l2)).await {
        Res4::Ok(s) => s,
        other => panic!("{other:?}"),
    };
    assert_eq!(l3.seqid, 3);
    let res = a
        .send(vec![NfsArgop4::TestStateid(StateidList(vec![l3]))])
        .await;
    let NfsResop4::TestStateid(Res4::Ok(list)) = &res.results[1] else {
        panic!("{res:?}")
    };
    assert_eq!(list.0, vec![S::OK], "no locks, still valid");
    let res = a.send(vec![NfsArgop4::FreeStateid(l3)]).await;
    assert_eq!(statuses(&res), vec![S::OK, S::OK]);
    let r = lock(&mut a, &fh, lock_exist(WRITE_LT, 0, 1, l3)).await;
    assert_eq!(r, LockRes::Err(S::BAD_STATEID), "freed");

    // RELEASE_LOCKOWNER is a 4.0 op.
    let res = a.send(vec![NfsArgop4::ReleaseLockowner(owner("la"))]).await;
    assert_eq!(statuses(&res), vec![S::OK, S::NOTSUPP]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_current_stateid_runs_open_lock_locku() {
    let s = TestServer::start(rw()).await;
    let mut a = V4::mount(&s, "current stateid client").await;
    let mut ops = walk_to(&s.export);
    ops.push(open_op("oa", "f", true, OPEN4_SHARE_ACCESS_BOTH, 0));
    ops.push(lock_new(WRITE_LT, 0, 10, Stateid4::CURRENT, "la"));
    ops.push(locku(0, 5, Stateid4::CURRENT));
    ops.push(lock_exist(READ_LT, 0, 1, Stateid4::CURRENT));
    let res = a.send(ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let n = res.results.len();
    let NfsResop4::Lock(LockRes::Ok(first)) = &res.results[n - 3] else {
        panic!("{res:?}")
    };
    let NfsResop4::Lock(LockRes::Ok(last)) = &res.results[n - 1] else {
        panic!("{res:?}")
    };
    assert_eq!((first.seqid, last.seqid), (1, 3));
    assert_eq!(first.other, last.other);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_with_locks_held_frees_them() {
    let s = TestServer::start(rw()).await;
    let (mut a, oa, mut b, ob, fh) = two_openers(&s).await;
    let la = granted(lock(&mut a, &fh, lock_new(WRITE_LT, 0, ALL, oa, "la")).await);
    let r = lock(&mut b, &fh, lock_new(WRITE_LT, 0, 1, ob, "lb")).await;
    assert!(matches!(r, LockRes::Denied(_)), "{r:?}");
    // §18.2.4 lets the server free the locks on CLOSE (knfsd does): no LOCKS_HELD.
    let res = a
        .send(vec![NfsArgop4::Putfh(fh.clone()), close_op(oa)])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let res = a
        .send(vec![NfsArgop4::TestStateid(StateidList(vec![la]))])
        .await;
    let NfsResop4::TestStateid(Res4::Ok(list)) = &res.results[1] else {
        panic!("{res:?}")
    };
    assert_eq!(list.0, vec![Nfsstat4::BAD_STATEID], "gone with its open");
    granted(lock(&mut b, &fh, lock_new(WRITE_LT, 0, ALL, ob, "lb")).await);
}

/// Courtesy clients (§8.3, `sluice_nfs4state::state`): a client whose lease ran out keeps its lock
/// while nobody conflicts, and comes back to it; once it ran out again, another client's
/// conflicting LOCK expires it and is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_courtesy_clients_lock_is_broken_by_a_conflicting_lock() {
    let mut cfg = rw();
    cfg.lease = Duration::from_secs(1);
    let s = TestServer::start(cfg).await;
    // The lease (1 s), plus the lease driver's longest sleep (1 s), plus slack.
    let past_the_lease = Duration::from_millis(3500);
    let (mut a, oa, mut b, ob, fh) = two_openers(&s).await;
    granted(lock(&mut a, &fh, lock_new(WRITE_LT, 0, 10, oa, "la")).await);
    tokio::time::sleep(past_the_lease).await;
    // A's lease ran out. B's LOCK that does not conflict leaves A alone...
    let lb = granted(lock(&mut b, &fh, lock_new(WRITE_LT, 10, 10, ob, "lb")).await);
    // ...and A comes back to its session and its lock, which conflicts again.
    let res = a.send(vec![]).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let d = denied_test(test_lock(&mut b, &fh, lockt(WRITE_LT, 0, 1, "lb")).await);
    assert_eq!(d, denial(0, 10, WRITE_LT, a.clientid, "la"));

    tokio::time::sleep(past_the_lease).await;
    // Both ran out; B's LOCK over A's range expires A and is granted.
    let lb = granted(lock(&mut b, &fh, lock_exist(WRITE_LT, 0, 10, lb)).await);
    assert_eq!(lb.seqid, 2);
    let res = a.send(vec![]).await;
    assert_eq!(res.status, Nfsstat4::BADSESSION, "A's session went with it");
}

/// A file with hard links `a/<name>` and `b/<name>` in the export.
fn linked(s: &TestServer, name: &str) {
    for d in ["a", "b"] {
        let _ = std::fs::create_dir(s.export.join(d));
    }
    std::fs::write(s.export.join("a").join(name), b"one file, two names").unwrap();
    std::fs::hard_link(s.export.join("a").join(name), s.export.join("b").join(name)).unwrap();
}

/// A handle of a file names the directory it was found in too (`sluice_vfs::handle`), so the
/// two links of one file have two handles; state is the file's, as knfsd keys it by inode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hard_links_in_two_directories_are_one_file_for_locks_and_shares() {
    let s = TestServer::start(rw()).await;
    linked(&s, "f");
    linked(&s, "g");
    let (dir_a, dir_b) = (s.export.join("a"), s.export.join("b"));
    let mut a = V4::mount(&s, "link client a").await;
    let (oa, fa) = a
        .open(&dir_a, "oa", "f", false, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    let mut b = V4::mount(&s, "link client b").await;
    let (ob, fb) = b
        .open(&dir_b, "ob", "f", false, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    assert_ne!(fa, fb, "two names, two handles");

    // A's WRITE lock through a/f denies B's locks and tests through b/f, and back.
    let la = granted(lock(&mut a, &fa, lock_new(WRITE_LT, 0, 100, oa.stateid, "la")).await);
    let d = denied_lock(lock(&mut b, &fb, lock_new(WRITE_LT, 50, 10, ob.stateid, "lb")).await);
    assert_eq!(d, denial(0, 100, WRITE_LT, a.clientid, "la"));
    let d = denied_test(test_lock(&mut b, &fb, lockt(READ_LT, 99, 1, "lb")).await);
    assert_eq!(d, denial(0, 100, WRITE_LT, a.clientid, "la"));
    assert_eq!(
        test_lock(&mut b, &fb, lockt(WRITE_LT, 100, ALL, "lb")).await,
        LocktRes::Ok(())
    );
    let lb = granted(lock(&mut b, &fb, lock_new(READ_LT, 200, 10, ob.stateid, "lb")).await);
    let d = denied_test(test_lock(&mut a, &fa, lockt(WRITE_LT, 205, 1, "la")).await);
    assert_eq!(d, denial(200, 10, READ_LT, b.clientid, "lb"));
    // A's LOCKU through a/f lets B's LOCK through b/f in.
    assert!(matches!(
        unlock(&mut a, &fa, locku(0, 100, la)).await,
        Res4::Ok(_)
    ));
    granted(lock(&mut b, &fb, lock_exist(WRITE_LT, 50, 10, lb)).await);

    // Share reservations: A's OPEN of a/g denying writes refuses B's write OPEN of b/g; a
    // read OPEN of b/g is fine.
    a.open(
        &dir_a,
        "sa",
        "g",
        false,
        OPEN4_SHARE_ACCESS_READ,
        OPEN4_SHARE_DENY_WRITE,
    )
    .await
    .unwrap();
    let r = b
        .open(&dir_b, "sb", "g", false, OPEN4_SHARE_ACCESS_WRITE, 0)
        .await;
    assert_eq!(r.err(), Some(Nfsstat4::SHARE_DENIED));
    b.open(&dir_b, "sb", "g", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .unwrap();
}
