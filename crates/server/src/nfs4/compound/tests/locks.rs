//! LOCK, LOCKT and LOCKU pushed down to the backend (`locks.rs`): a backend's refusal is
//! NFS4ERR_DENIED with the state rolled back, and what the state releases reaches the backend.

use super::*;
use crate::backend::memfs::LockCall;
use crate::backend::{FileSystem, LockConflict, LockType};
use sluice_xdr::nfs4::ops::{
    ExistLockOwner4, LockArgs, LockRes, Locker4, LocktArgs, LocktRes, LockuArgs, OpenToLockOwner4,
    READ_LT, WRITE_LT,
};
use sluice_xdr::nfs4::LockOwner4;

/// A server over one MemFs export at `/srv/export`, and that MemFs.
fn server_over_memfs() -> (Client, Arc<MemFs>) {
    let fs = Arc::new(MemFs::new(MemFsConfig {
        fsid: EXPORT_FSID,
        ..MemFsConfig::default()
    }));
    let mut e = export("/srv/export", ClientMatch::Any, EXPORT_FSID);
    e.fs = fs.clone();
    let state = State4::new(
        Config4 {
            boot_epoch: 3,
            ..Config4::default()
        },
        Box::new(SplitMix(11)),
    );
    let c = Client {
        nfs: Arc::new(Nfs4::new(Arc::new(vec![e]), state, 1).unwrap()),
        ..Client::new()
    };
    (c, fs)
}

fn lock_owner(name: &'static [u8]) -> LockOwner4 {
    LockOwner4 {
        clientid: 0,
        owner: Opaque4(Bytes::from_static(name)),
    }
}

fn lock_new(
    kind: u32,
    offset: u64,
    length: u64,
    open: Stateid4,
    owner: &'static [u8],
) -> NfsArgop4 {
    NfsArgop4::Lock(LockArgs {
        locktype: kind,
        reclaim: false,
        offset,
        length,
        locker: Locker4::New(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid: open,
            lock_seqid: 0,
            lock_owner: lock_owner(owner),
        }),
    })
}

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

#[test]
fn a_backend_refusal_is_denied_and_the_state_rolls_back() {
    let (c, fs) = server_over_memfs();
    let mut s = Session4::establish(&SessionConfig::new(b"linux client", 4), |ops| c.send(ops));
    let mut ops = into_export();
    ops.push(open(
        b"o",
        b"f",
        Some(Createhow4::Unchecked(mode_attrs(0o644))),
        OPEN4_SHARE_ACCESS_BOTH,
        OPEN4_SHARE_DENY_NONE,
    ));
    ops.push(NfsArgop4::Getfh(()));
    let res = c.send(s.in_session(ops));
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let NfsResop4::Open(Res4::Ok(o)) = &res.results[4] else {
        panic!("{res:?}")
    };
    let open_sid = o.stateid;
    let fh = fh_of(&res.results[5]);
    let file = fs.state_key(&FileHandle::new(fh.0.clone()).unwrap());
    let on = |s: &mut Session4, op: NfsArgop4| -> NfsResop4 {
        let res = c.send(s.in_session(vec![NfsArgop4::Putfh(fh.clone()), op]));
        res.results[2].clone()
    };

    // Granted by the state and the backend: the backend saw the lock.
    let NfsResop4::Lock(LockRes::Ok(la)) = on(&mut s, lock_new(WRITE_LT, 0, 10, open_sid, b"la"))
    else {
        panic!("not granted")
    };
    let calls = fs.lock_calls();
    let [LockCall::Lock {
        owner_key,
        kind: LockType::Write,
        offset: 0,
        len: 10,
    }] = calls[..]
    else {
        panic!("{calls:?}")
    };

    // Another client of the backend holds [5, end) for reading.
    fs.refuse_locks(Some(LockConflict {
        kind: LockType::Read,
        offset: 5,
        len: 0,
    }));
    let denied = |r: NfsResop4| match r {
        NfsResop4::Lock(LockRes::Denied(d)) => d,
        other => panic!("not denied: {other:?}"),
    };
    // The owner's upgrade of a range it holds: DENIED with the backend's lock ...
    let d = denied(on(&mut s, lock_exist(WRITE_LT, 20, 10, la)));
    assert_eq!((d.offset, d.length, d.locktype), (5, u64::MAX, READ_LT));
    assert_eq!(d.owner.clientid, 0);
    assert_eq!(&d.owner.owner.0[..], super::super::locks::BACKEND_OWNER);
    // ... and its stateid and ranges as they were: seqid 1 is still the current one, and
    // another owner may take [20, 30).
    let res = c.send(s.in_session(vec![NfsArgop4::TestStateid(StateidList(vec![la]))]));
    let NfsResop4::TestStateid(Res4::Ok(st)) = &res.results[1] else {
        panic!("{res:?}")
    };
    assert_eq!(st.0, vec![Nfsstat4::OK]);
    let lockt = |kind, offset, length, owner| {
        NfsArgop4::Lockt(LocktArgs {
            locktype: kind,
            offset,
            length,
            owner: lock_owner(owner),
        })
    };
    assert!(matches!(
        on(&mut s, lockt(WRITE_LT, 20, 10, b"lb")),
        NfsResop4::Lockt(LocktRes::Ok(()))
    ));
    assert!(matches!(
        on(&mut s, lockt(WRITE_LT, 9, 1, b"lb")),
        NfsResop4::Lockt(LocktRes::Denied(_))
    ));
    // A new owner refused by the backend leaves no lock stateid.
    denied(on(&mut s, lock_new(READ_LT, 40, 1, open_sid, b"lb")));
    assert_eq!(c.nfs.state().locks().len(), 1);
    assert!(fs.lock_calls().is_empty(), "refused calls changed nothing");

    // LOCKU of the owner's last range: unlocked, then released (its open file goes).
    fs.refuse_locks(None);
    let NfsResop4::Locku(Res4::Ok(la)) = on(
        &mut s,
        NfsArgop4::Locku(LockuArgs {
            locktype: READ_LT,
            seqid: 0,
            lock_stateid: la,
            offset: 0,
            length: 10,
        }),
    ) else {
        panic!("LOCKU failed")
    };
    assert_eq!(
        fs.lock_calls(),
        vec![
            LockCall::Unlock {
                owner_key,
                offset: 0,
                len: 10
            },
            LockCall::Release {
                file: file.clone(),
                owner_key
            },
        ]
    );
    // A lock again, then CLOSE of the open it came from: released.
    let NfsResop4::Lock(LockRes::Ok(_)) = on(&mut s, lock_exist(READ_LT, 0, u64::MAX, la)) else {
        panic!("not granted")
    };
    assert!(
        matches!(
            &fs.lock_calls()[..],
            [LockCall::Lock {
                len: 0,
                kind: LockType::Read,
                ..
            }]
        ),
        "the whole range is to the end of the file"
    );
    let res = c.send(s.in_session(vec![
        NfsArgop4::Putfh(fh.clone()),
        NfsArgop4::Close(CloseArgs {
            seqid: 0,
            open_stateid: open_sid,
        }),
    ]));
    assert_eq!(res.status, Nfsstat4::OK);
    assert_eq!(fs.lock_calls(), vec![LockCall::Release { file, owner_key }]);
}
