//! LOCK, LOCKT and LOCKU (RFC 8881 §18.10-§18.12) as [`State4`] entry points: the argument
//! checks, the open or lock stateid presented, courtesy clients in the way, then the change in
//! [`crate::locks::stateids`] and [`crate::locks::ranges`] (the design notes are there).
//!
//! The processor resolves the special "current" stateid in the arguments before calling, and
//! passes the current file's key as `file` (its handle's `FileSystem::state_key`: locks taken
//! through two hard links of one file conflict, as knfsd's, which are the inode's).
//!
//! # Backends that hold the locks too
//! On a backend that also takes the locks (CephFS, so other Ceph clients see them), the table
//! here decides first and the backend second: [`State4::lock_undoable`] makes the change and
//! returns a [`LockUndo`], the driver asks the backend, and if the backend refuses (another
//! Ceph client holds a conflicting lock) [`State4::undo_lock`] puts the owner's ranges and its
//! stateid back as they were, so the client sees NFS4ERR_DENIED and nothing else changed. The
//! driver holds the state's lock across both, so nobody sees the change in between. What is
//! released goes the other way, as data (`stateids`' module notes).

pub mod ranges;
pub mod stateids;

use crate::locks::ranges::{Lock, LockError, LockKind, Owner, Range};
use crate::locks::stateids::LockStates;
use crate::opens::{IoState, Other};
use crate::state::State4;
use sluice_xdr::nfs4::ops::{
    Lock4Denied, LockArgs, Locker4, LocktArgs, LockuArgs, OPEN4_SHARE_ACCESS_READ,
    OPEN4_SHARE_ACCESS_WRITE,
};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{ClientId4, LockOwner4, Opaque4, Stateid4};
use std::time::Instant;

/// Why a LOCK or LOCKT did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockRefused {
    /// NFS4ERR_DENIED, with the conflicting lock.
    Denied(Lock4Denied),
    /// Any other error.
    Status(Nfsstat4),
}

impl From<Nfsstat4> for LockRefused {
    fn from(s: Nfsstat4) -> Self {
        Self::Status(s)
    }
}

/// How to take back a LOCK the state granted ([`State4::undo_lock`]), and what the backend
/// is to lock for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockUndo {
    /// The lock stateid granted.
    pub stateid: Stateid4,
    /// The lock owner's backend number ([`stateids::LockState::owner_key`]).
    pub owner_key: u64,
    pub kind: LockKind,
    pub range: Range,
    /// The stateid was created by this LOCK.
    created: bool,
    seqid_before: u32,
    file: bytes::Bytes,
    owner: Owner,
    ranges_before: Vec<Lock>,
}

impl State4 {
    /// LOCK (§18.10.4). Returns the new or bumped lock stateid.
    pub fn lock(
        &mut self,
        now: Instant,
        clientid: ClientId4,
        file: &[u8],
        a: &LockArgs,
    ) -> Result<Stateid4, LockRefused> {
        self.lock_undoable(now, clientid, file, a)
            .map(|u| u.stateid)
    }

    /// Takes back a LOCK granted by [`State4::lock_undoable`] with no state call in between:
    /// the owner's ranges on the file and its stateid's seqid as they were before, or the
    /// stateid gone if that LOCK created it. Courtesy clients it expired stay expired.
    pub fn undo_lock(&mut self, u: LockUndo) {
        if u.created {
            self.locks.uncreate(&u.stateid.other);
            return;
        }
        self.locks
            .ranges
            .restore(&u.file, &u.owner, u.ranges_before);
        self.locks.set_seqid(&u.stateid.other, u.seqid_before);
    }

    /// LOCK (§18.10.4), with what [`State4::undo_lock`] needs to take it back.
    pub fn lock_undoable(
        &mut self,
        now: Instant,
        clientid: ClientId4,
        file: &[u8],
        a: &LockArgs,
    ) -> Result<LockUndo, LockRefused> {
        let kind = LockKind::from_wire(a.locktype)?;
        let range = Range::from_wire(a.offset, a.length)?;
        self.clients.get(clientid)?;
        // Grace ([`crate::recovery`]): reclaims only in grace, new locks only after it and
        // after the client's RECLAIM_COMPLETE.
        if a.reclaim {
            self.check_reclaim(clientid)?;
            self.note_reclaimed();
        } else {
            self.check_new_state(clientid)?;
        }
        let (owner, open, existing) = match &a.locker {
            Locker4::New(n) => {
                self.opens.check(clientid, &n.open_stateid, Some(file))?;
                let owner = n.lock_owner.owner.0.clone();
                let existing = self.locks.find(clientid, &owner, file);
                (owner, n.open_stateid.other, existing)
            }
            Locker4::Exist(e) => {
                let s = self.locks.check(clientid, &e.lock_stateid, Some(file))?;
                (s.owner.clone(), s.open, Some(e.lock_stateid.other))
            }
        };
        self.open_allows(&open, kind)?;
        let owner = Owner { clientid, owner };
        let courtesy = self.break_courtesy_conflicts(now, clientid, file, &owner, kind, range);
        if let Err(l) = courtesy {
            return Err(LockRefused::Denied(denied(&l)));
        }
        if existing.is_none() {
            while !self.locks.has_room(clientid) {
                if !self.expire_oldest_courtesy(clientid) {
                    return Err(Nfsstat4::DELAY.into());
                }
            }
        }
        let ranges_before = self.locks.ranges.owner_locks(file, &owner);
        loop {
            match self.locks.ranges.lock(file, &owner, kind, range) {
                Ok(()) => break,
                Err(LockError::Full) if self.expire_oldest_courtesy(clientid) => {}
                Err(LockError::Full) => return Err(Nfsstat4::DELAY.into()),
                Err(LockError::Denied(l)) => return Err(LockRefused::Denied(denied(&l))),
            }
        }
        let (stateid, seqid_before) = match existing {
            Some(other) => {
                let before = self.locks.get(&other).map_or(0, |s| s.seqid);
                (self.locks.bump(&other), before)
            }
            None => {
                let opens = &self.opens;
                let sid = self.locks.create(
                    clientid,
                    owner.owner.clone(),
                    bytes::Bytes::copy_from_slice(file),
                    open,
                    self.entropy.as_mut(),
                    &|o| opens.get(o).is_some(),
                );
                (sid, 0)
            }
        };
        let owner_key = self.locks.get(&stateid.other).map_or(0, |s| s.owner_key);
        Ok(LockUndo {
            stateid,
            owner_key,
            kind,
            range,
            created: existing.is_none(),
            seqid_before,
            file: bytes::Bytes::copy_from_slice(file),
            owner,
            ranges_before,
        })
    }

    /// The backend locks to drop since the last call (`stateids`' module notes): the driver
    /// takes them after every call into the state and hands them to the backends.
    pub fn take_released_locks(&mut self) -> Vec<stateids::LockRelease> {
        self.locks.take_released()
    }

    /// LOCKT (§18.11.4): creates no state. Locks of courtesy clients are not reported (a LOCK
    /// would break them); the first other conflicting lock is.
    pub fn lockt(
        &self,
        now: Instant,
        clientid: ClientId4,
        file: &[u8],
        a: &LocktArgs,
    ) -> Result<(), LockRefused> {
        let kind = LockKind::from_wire(a.locktype)?;
        let range = Range::from_wire(a.offset, a.length)?;
        self.clients.get(clientid)?;
        let owner = Owner {
            clientid,
            owner: a.owner.owner.0.clone(),
        };
        let conflicts = self.locks.ranges.conflicts(file, &owner, kind, range);
        match conflicts
            .into_iter()
            .find(|l| !self.is_courtesy(now, clientid, l.owner.clientid))
        {
            Some(l) => Err(LockRefused::Denied(denied(l))),
            None => Ok(()),
        }
    }

    /// LOCKU (§18.12.4): the bumped lock stateid. The stateid stays valid with no ranges.
    pub fn locku(
        &mut self,
        clientid: ClientId4,
        file: &[u8],
        a: &LockuArgs,
    ) -> Result<Stateid4, Nfsstat4> {
        LockKind::from_wire(a.locktype)?;
        let range = Range::from_wire(a.offset, a.length)?;
        self.locks.check(clientid, &a.lock_stateid, Some(file))?;
        loop {
            match self.locks.unlock(&a.lock_stateid.other, range) {
                Ok(()) => break,
                Err(LockError::Full) if self.expire_oldest_courtesy(clientid) => {}
                Err(_) => return Err(Nfsstat4::DELAY),
            }
        }
        Ok(self.locks.bump(&a.lock_stateid.other))
    }

    /// The lock state (gauges).
    pub fn locks(&self) -> &LockStates {
        &self.locks
    }

    /// READ / WRITE under a lock stateid: checked as one, then its open's access decides
    /// (the Linux client does I/O under the lock stateid while it holds locks).
    pub(crate) fn check_lock_io(
        &self,
        clientid: ClientId4,
        stateid: &Stateid4,
        file: &[u8],
        write: bool,
    ) -> Result<IoState, Nfsstat4> {
        let s = self.locks.check(clientid, stateid, Some(file))?;
        let open = self.opens.get(&s.open).ok_or(Nfsstat4::BAD_STATEID)?;
        if write && open.access & OPEN4_SHARE_ACCESS_WRITE == 0 {
            return Err(Nfsstat4::OPENMODE);
        }
        Ok(IoState::Open(s.open))
    }

    /// A READ lock needs an open for reading, a WRITE lock one for writing (NFS4ERR_OPENMODE,
    /// as knfsd answers).
    fn open_allows(&self, open: &Other, kind: LockKind) -> Result<(), Nfsstat4> {
        let o = self.opens.get(open).ok_or(Nfsstat4::BAD_STATEID)?;
        let need = match kind {
            LockKind::Read => OPEN4_SHARE_ACCESS_READ,
            LockKind::Write => OPEN4_SHARE_ACCESS_WRITE,
        };
        if o.access & need == 0 {
            return Err(Nfsstat4::OPENMODE);
        }
        Ok(())
    }

    /// Expires the courtesy clients whose locks conflict, unless some conflicting lock is of
    /// a live client: then nothing changes and that lock is returned.
    fn break_courtesy_conflicts(
        &mut self,
        now: Instant,
        clientid: ClientId4,
        file: &[u8],
        owner: &Owner,
        kind: LockKind,
        range: Range,
    ) -> Result<(), Lock> {
        let conflicts = self.locks.ranges.conflicts(file, owner, kind, range);
        if let Some(l) = conflicts
            .iter()
            .find(|l| !self.is_courtesy(now, clientid, l.owner.clientid))
        {
            return Err((*l).clone());
        }
        let mut gone: Vec<ClientId4> = conflicts.iter().map(|l| l.owner.clientid).collect();
        gone.sort_unstable();
        gone.dedup();
        for c in gone {
            self.expire(c);
        }
        Ok(())
    }

    /// Whether `other`'s state may be broken for `me`: another client, a courtesy client or
    /// one whose lease ran out (the same test as OPEN's).
    fn is_courtesy(&self, now: Instant, me: ClientId4, other: ClientId4) -> bool {
        other != me
            && self
                .clients
                .get(other)
                .is_ok_and(|r| r.courtesy_since.is_some() || r.lease_expired(now, self.cfg.lease))
    }
}

/// LOCK4denied for a conflicting lock.
fn denied(l: &Lock) -> Lock4Denied {
    let (offset, length) = l.range.to_wire();
    Lock4Denied {
        offset,
        length,
        locktype: l.kind.to_wire(),
        owner: LockOwner4 {
            clientid: l.owner.clientid,
            owner: Opaque4(l.owner.owner.clone()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config4;
    use crate::ids::{Principal, SplitMix};
    use bytes::Bytes;
    use sluice_xdr::nfs4::ops::{
        CallbackSecParmsList, ChannelAttrs4, ClientOwner4, CreateSessionArgs, ExchangeIdArgs,
        ExistLockOwner4, ImplIdList, OpenToLockOwner4, StateProtect4A, READ_LT, WRITE_LT,
    };
    use std::time::Duration;

    fn state() -> State4 {
        let cfg = Config4 {
            boot_epoch: 5,
            lease: Duration::from_secs(10),
            ..Config4::default()
        };
        State4::new(cfg, Box::new(SplitMix(9)))
    }

    fn chan() -> ChannelAttrs4 {
        crate::testkit::channel_attrs(4)
    }

    /// A confirmed client with one session that sent RECLAIM_COMPLETE (nothing to reclaim).
    fn mount(st: &mut State4, now: Instant, owner: &'static [u8]) -> ClientId4 {
        let p = Principal(Bytes::from_static(b"u"));
        let e = st
            .exchange_id(
                now,
                &ExchangeIdArgs {
                    clientowner: ClientOwner4 {
                        verifier: [1; 8],
                        ownerid: Opaque4(Bytes::from_static(owner)),
                    },
                    flags: 0,
                    state_protect: StateProtect4A::None,
                    client_impl_id: ImplIdList(Vec::new()),
                },
                &p,
            )
            .unwrap();
        let args = CreateSessionArgs {
            clientid: e.clientid,
            sequence: e.sequenceid,
            flags: 0,
            fore_chan_attrs: chan(),
            back_chan_attrs: chan(),
            cb_program: 0x4000_0000,
            sec_parms: CallbackSecParmsList(Vec::new()),
        };
        st.create_session(now, &args, &p, 1).unwrap();
        st.reclaim_complete(now, e.clientid, false).unwrap();
        e.clientid
    }

    fn new_owner(open: Stateid4, owner: &'static [u8], kind: u32, off: u64, len: u64) -> LockArgs {
        LockArgs {
            locktype: kind,
            reclaim: false,
            offset: off,
            length: len,
            locker: Locker4::New(OpenToLockOwner4 {
                open_seqid: 0,
                open_stateid: open,
                lock_seqid: 0,
                lock_owner: LockOwner4 {
                    clientid: 0,
                    owner: Opaque4(Bytes::from_static(owner)),
                },
            }),
        }
    }

    fn exist(sid: Stateid4, kind: u32, off: u64, len: u64) -> LockArgs {
        LockArgs {
            locktype: kind,
            reclaim: false,
            offset: off,
            length: len,
            locker: Locker4::Exist(ExistLockOwner4 {
                lock_stateid: sid,
                lock_seqid: 0,
            }),
        }
    }

    fn lockt(owner: &'static [u8], kind: u32, off: u64, len: u64) -> LocktArgs {
        LocktArgs {
            locktype: kind,
            offset: off,
            length: len,
            owner: LockOwner4 {
                clientid: 0,
                owner: Opaque4(Bytes::from_static(owner)),
            },
        }
    }

    #[test]
    fn lockt_and_a_denied_new_owner_create_no_state() {
        let mut st = state();
        let t0 = Instant::now();
        let a = mount(&mut st, t0, b"a");
        let b = mount(&mut st, t0, b"b");
        let oa = st.open(t0, a, b"o", b"f", 3, 0).unwrap();
        let ob = st.open(t0, b, b"o", b"f", 3, 0).unwrap();
        let la = st.lock(t0, a, b"f", &new_owner(oa, b"la", WRITE_LT, 0, 10));
        assert_eq!(la.map(|s| s.seqid), Ok(1));
        let denied = st.lock(t0, b, b"f", &new_owner(ob, b"lb", READ_LT, 5, 1));
        assert!(matches!(denied, Err(LockRefused::Denied(d)) if d.owner.clientid == a));
        assert!(st.lockt(t0, b, b"f", &lockt(b"lb", READ_LT, 5, 1)).is_err());
        assert!(st.lockt(t0, a, b"f", &lockt(b"la", WRITE_LT, 5, 1)).is_ok());
        assert_eq!(st.locks().len(), 1, "only a's lock stateid exists");
        assert_eq!(st.locks().count_for(b), 0);
        assert_eq!(st.locks().ranges.len(), 1);
    }

    #[test]
    fn close_destroy_and_courtesy_expiry_free_locks() {
        let mut st = state();
        let t0 = Instant::now();
        let a = mount(&mut st, t0, b"a");
        let b = mount(&mut st, t0, b"b");
        let oa = st.open(t0, a, b"o", b"f", 3, 0).unwrap();
        let ob = st.open(t0, b, b"o", b"f", 3, 0).unwrap();
        let la = st
            .lock(t0, a, b"f", &new_owner(oa, b"la", WRITE_LT, 0, u64::MAX))
            .unwrap();
        // CLOSE of the open the lock came from: the lock stateid and its lock go too.
        st.close(a, &oa, b"f").unwrap();
        assert_eq!(st.test_stateids(a, &[la]), vec![Nfsstat4::BAD_STATEID]);
        assert!(st.locks().is_empty() && st.locks().ranges.is_empty());
        let lb = st
            .lock(t0, b, b"f", &new_owner(ob, b"lb", WRITE_LT, 0, 1))
            .unwrap();
        // b's lease runs out: a courtesy client whose lock is broken by a's LOCK.
        let oa = st.open(t0, a, b"o", b"f", 3, 0).unwrap();
        let t1 = t0 + Duration::from_secs(11);
        st.clients.renew(a, t1);
        let la = st.lock(t1, a, b"f", &new_owner(oa, b"la", WRITE_LT, 0, 1));
        assert_eq!(la.map(|s| s.seqid), Ok(1), "b's lock gave way");
        assert!(st.clients().get(b).is_err(), "b expired whole");
        assert_eq!(st.test_stateids(b, &[lb]), vec![Nfsstat4::BAD_STATEID]);
        assert_eq!(st.locks().count_for(b), 0);
        // An existing lock owner's stateid moves on; DESTROY_CLIENTID is busy while a holds
        // state, and expiry takes the locks along.
        let la = st
            .locks()
            .find(a, &Bytes::from_static(b"la"), b"f")
            .unwrap();
        let s2 = st.lock(
            t1,
            a,
            b"f",
            &exist(
                Stateid4 {
                    seqid: 1,
                    other: la,
                },
                READ_LT,
                0,
                1,
            ),
        );
        assert_eq!(s2.map(|s| s.seqid), Ok(2));
        assert_eq!(st.destroy_clientid(a), Err(Nfsstat4::CLIENTID_BUSY));
        st.expire(a);
        assert!(st.locks().is_empty() && st.locks().ranges.is_empty());
    }

    fn rel(file: &'static [u8], owner_key: u64) -> stateids::LockRelease {
        stateids::LockRelease {
            file: Bytes::from_static(file),
            owner_key,
        }
    }

    #[test]
    fn owner_keys_are_one_per_lock_owner_and_never_reused() {
        let mut st = state();
        let t0 = Instant::now();
        let a = mount(&mut st, t0, b"a");
        let b = mount(&mut st, t0, b"b");
        let of = st.open(t0, a, b"o", b"f", 3, 0).unwrap();
        let og = st.open(t0, a, b"o", b"g", 3, 0).unwrap();
        let ob = st.open(t0, b, b"o", b"g", 3, 0).unwrap();
        let kf = st.lock_undoable(t0, a, b"f", &new_owner(of, b"l", WRITE_LT, 0, 1));
        let kg = st.lock_undoable(t0, a, b"g", &new_owner(og, b"l", WRITE_LT, 0, 1));
        let kb = st.lock_undoable(t0, b, b"g", &new_owner(ob, b"l", WRITE_LT, 5, 1));
        let (kf, kg, kb) = (
            kf.unwrap().owner_key,
            kg.unwrap().owner_key,
            kb.unwrap().owner_key,
        );
        assert_eq!(kf, kg, "one owner, two files: one key");
        assert_ne!(
            kf, kb,
            "the same owner bytes of another client: another key"
        );
        assert_ne!(kf, 0, "0 is never drawn");
        assert_eq!(st.locks().owner_key(a, &Bytes::from_static(b"l")), Some(kf));
        st.expire(a);
        assert_eq!(st.locks().owner_key(a, &Bytes::from_static(b"l")), None);
        let of = st.open(t0, b, b"o", b"f", 3, 0).unwrap();
        let k2 = st
            .lock_undoable(t0, b, b"f", &new_owner(of, b"m", WRITE_LT, 0, 1))
            .unwrap()
            .owner_key;
        assert!(k2 != kf && k2 != kb, "a key is not drawn twice");
    }

    #[test]
    fn every_path_that_drops_lock_state_says_what_to_release() {
        let mut st = state();
        let t0 = Instant::now();
        let a = mount(&mut st, t0, b"a");
        let oa = st.open(t0, a, b"o", b"f", 3, 0).unwrap();
        let u = st
            .lock_undoable(t0, a, b"f", &new_owner(oa, b"la", WRITE_LT, 0, 10))
            .unwrap();
        let key = u.owner_key;
        assert!(
            st.take_released_locks().is_empty(),
            "a LOCK releases nothing"
        );
        // LOCKU of part: still held, nothing released; of the rest: released.
        let unlock = |sid: Stateid4, off, len| LockuArgs {
            locktype: READ_LT,
            seqid: 0,
            lock_stateid: sid,
            offset: off,
            length: len,
        };
        let sid = st.locku(a, b"f", &unlock(u.stateid, 0, 5)).unwrap();
        assert!(st.take_released_locks().is_empty());
        let sid = st.locku(a, b"f", &unlock(sid, 5, 5)).unwrap();
        assert_eq!(st.take_released_locks(), vec![rel(b"f", key)]);
        assert!(st.take_released_locks().is_empty(), "taken once");
        // FREE_STATEID of the emptied stateid: released (again: the backend may hold more
        // than the table knows, and a release of nothing is nothing).
        assert_eq!(st.free_stateid(a, &sid), Nfsstat4::OK);
        assert_eq!(st.take_released_locks(), vec![rel(b"f", key)]);
        // CLOSE of the open the lock came from.
        let u = st
            .lock_undoable(t0, a, b"f", &new_owner(oa, b"la", WRITE_LT, 0, 1))
            .unwrap();
        st.close(a, &oa, b"f").unwrap();
        assert_eq!(st.take_released_locks(), vec![rel(b"f", u.owner_key)]);
        // Expiry (lease, courtesy, DESTROY_CLIENTID and a replaced record all go through it):
        // each of the client's lock stateids.
        let of = st.open(t0, a, b"o", b"f", 3, 0).unwrap();
        let og = st.open(t0, a, b"o", b"g", 3, 0).unwrap();
        let kf = st
            .lock_undoable(t0, a, b"f", &new_owner(of, b"x", READ_LT, 0, 1))
            .unwrap()
            .owner_key;
        let kg = st
            .lock_undoable(t0, a, b"g", &new_owner(og, b"y", READ_LT, 0, 1))
            .unwrap()
            .owner_key;
        st.expire(a);
        let mut got = st.take_released_locks();
        got.sort_by_key(|r| r.file.clone());
        assert_eq!(got, vec![rel(b"f", kf), rel(b"g", kg)]);
    }

    #[test]
    fn an_undone_lock_leaves_the_state_as_it_was() {
        let mut st = state();
        let t0 = Instant::now();
        let a = mount(&mut st, t0, b"a");
        let b = mount(&mut st, t0, b"b");
        let oa = st.open(t0, a, b"o", b"f", 3, 0).unwrap();
        let ob = st.open(t0, b, b"o", b"f", 3, 0).unwrap();
        // A new owner's LOCK undone: no stateid, no range, nothing to release.
        let u = st
            .lock_undoable(t0, a, b"f", &new_owner(oa, b"la", WRITE_LT, 0, 10))
            .unwrap();
        st.undo_lock(u.clone());
        assert!(st.locks().is_empty() && st.locks().ranges.is_empty());
        assert_eq!(
            st.test_stateids(a, &[u.stateid]),
            vec![Nfsstat4::BAD_STATEID]
        );
        assert!(st.take_released_locks().is_empty());
        assert_eq!(st.locks().owner_key(a, &Bytes::from_static(b"la")), None);
        // An existing owner's upgrade undone: its READ range and its seqid are back.
        let u1 = st
            .lock_undoable(t0, a, b"f", &new_owner(oa, b"la", READ_LT, 0, 10))
            .unwrap();
        let u2 = st
            .lock_undoable(t0, a, b"f", &exist(u1.stateid, WRITE_LT, 5, 20))
            .unwrap();
        assert_eq!(u2.stateid.seqid, 2);
        st.undo_lock(u2);
        assert_eq!(st.test_stateids(a, &[u1.stateid]), vec![Nfsstat4::OK]);
        assert!(st.lockt(t0, b, b"f", &lockt(b"lb", READ_LT, 0, 10)).is_ok());
        assert!(st
            .lockt(t0, b, b"f", &lockt(b"lb", READ_LT, 10, 20))
            .is_ok());
        assert!(st
            .lockt(t0, b, b"f", &lockt(b"lb", WRITE_LT, 9, 1))
            .is_err());
        assert_eq!(st.locks().ranges.len(), 1);
        assert_eq!(st.locks().ranges.count_for(a), 1);
        // And b can lock where the undone upgrade reached.
        assert!(st
            .lock(t0, b, b"f", &new_owner(ob, b"lb", WRITE_LT, 10, 20))
            .is_ok());
        assert!(st.take_released_locks().is_empty());
    }

    // ----- random op sequences -------------------------------------------------------------

    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Open {
            c: usize,
            f: usize,
            o: usize,
        },
        Close {
            pick: usize,
        },
        /// From a picked open, on its file unless `wrong_file`.
        LockNew {
            wrong_file: bool,
            pick: usize,
            lo: usize,
            kind: u32,
            off: u64,
            len: u64,
        },
        LockExist {
            pick: usize,
            kind: u32,
            off: u64,
            len: u64,
            seq: u32,
        },
        Locku {
            pick: usize,
            off: u64,
            len: u64,
        },
        Lockt {
            c: usize,
            f: usize,
            lo: usize,
            kind: u32,
            off: u64,
            len: u64,
        },
        Free {
            pick: usize,
        },
        Expire {
            c: usize,
        },
    }

    /// Mostly valid ranges near 0, some to the end, some at the top, a few of length 0.
    fn range() -> impl Strategy<Value = (u64, u64)> {
        prop_oneof![
            8 => (0..64u64, 1..16u64),
            1 => (0..64u64, Just(0u64)),
            2 => (0..64u64, Just(u64::MAX)),
            1 => (Just(u64::MAX - 2), 0..5u64),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        // Mostly the four lock types, now and then an invalid one.
        let kind = || prop_oneof![8 => 1..5u32, 1 => Just(0u32), 1 => Just(5u32)];
        prop_oneof![
            4 => (0..2usize, 0..2usize, 0..2usize).prop_map(|(c, f, o)| Op::Open { c, f, o }),
            1 => any::<usize>().prop_map(|pick| Op::Close { pick }),
            6 => (proptest::bool::weighted(0.1), any::<usize>(), 0..2usize, kind(), range())
                .prop_map(|(wrong_file, pick, lo, kind, (off, len))| Op::LockNew {
                    wrong_file, pick, lo, kind, off, len
                }),
            6 => (any::<usize>(), kind(), range(), 0..4u32).prop_map(
                |(pick, kind, (off, len), seq)| Op::LockExist { pick, kind, off, len, seq }
            ),
            3 => (any::<usize>(), range()).prop_map(|(pick, (off, len))| Op::Locku { pick, off, len }),
            2 => (0..2usize, 0..2usize, 0..2usize, kind(), range()).prop_map(
                |(c, f, lo, kind, (off, len))| Op::Lockt { c, f, lo, kind, off, len }
            ),
            1 => any::<usize>().prop_map(|pick| Op::Free { pick }),
            // Rare: it ends a client's part of the run.
            1 => (0..2usize).prop_map(|c| Op::Expire { c }),
        ]
    }

    const FILES: [&[u8]; 2] = [b"f", b"g"];
    const OWNERS: [&[u8]; 2] = [b"l0", b"l1"];

    /// Every lock stateid hangs off a live open of its client and file; every range belongs
    /// to a lock stateid's owner; the counts agree.
    fn invariants(st: &State4) {
        for (_, s) in st.locks.iter() {
            let o = st
                .opens
                .get(&s.open)
                .expect("a lock stateid's open is alive");
            assert_eq!((o.clientid, &o.file), (s.clientid, &s.file));
        }
        let mut ranges = 0;
        for f in FILES {
            for l in st.locks.ranges.locks_of(f) {
                ranges += 1;
                assert!(
                    st.locks.find(l.owner.clientid, &l.owner.owner, f).is_some(),
                    "a range without a lock stateid: {l:?}"
                );
            }
        }
        assert_eq!(ranges, st.locks.ranges.len());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn random_lock_traffic_keeps_the_tables_consistent(
            ops in proptest::collection::vec(op(), 1..60)
        ) {
            let mut st = state();
            let t0 = Instant::now();
            let clients = [mount(&mut st, t0, b"a"), mount(&mut st, t0, b"b")];
            // Stateids seen, good and bad alike, for later ops to pick from.
            let mut opens: Vec<(ClientId4, usize, Stateid4)> = Vec::new();
            let mut locks: Vec<(ClientId4, usize, Stateid4)> = Vec::new();
            for op in ops {
                match op {
                    Op::Open { c, f, o } => {
                        let owner: &[u8] = if o == 0 { b"o0" } else { b"o1" };
                        if let Ok(s) = st.open(t0, clients[c], owner, FILES[f], 3, 0) {
                            opens.push((clients[c], f, s));
                        }
                    }
                    Op::Close { pick } if !opens.is_empty() => {
                        let (c, f, s) = opens[pick % opens.len()];
                        let _ = st.close(c, &s, FILES[f]);
                    }
                    Op::LockNew { wrong_file, pick, lo, kind, off, len } if !opens.is_empty() => {
                        let (c, f, s) = opens[pick % opens.len()];
                        let f = if wrong_file { 1 - f } else { f };
                        let a = new_owner(s, OWNERS[lo], kind, off, len);
                        match st.lock(t0, c, FILES[f], &a) {
                            Ok(l) => locks.push((c, f, l)),
                            Err(LockRefused::Denied(d)) => {
                                let mine = d.owner.clientid == c && d.owner.owner.0 == OWNERS[lo];
                                prop_assert!(!mine, "an owner never conflicts with itself");
                            }
                            Err(_) => {}
                        }
                    }
                    Op::LockExist { pick, kind, off, len, seq } if !locks.is_empty() => {
                        let (c, f, s) = locks[pick % locks.len()];
                        let sid = Stateid4 { seqid: seq, ..s };
                        if let Ok(l) = st.lock(t0, c, FILES[f], &exist(sid, kind, off, len)) {
                            prop_assert_eq!(l.other, s.other);
                            locks.push((c, f, l));
                        }
                    }
                    Op::Locku { pick, off, len } if !locks.is_empty() => {
                        let (c, f, s) = locks[pick % locks.len()];
                        let a = LockuArgs {
                            locktype: READ_LT,
                            seqid: 0,
                            lock_stateid: s,
                            offset: off,
                            length: len,
                        };
                        if let Ok(l) = st.locku(c, FILES[f], &a) {
                            locks.push((c, f, l));
                        }
                    }
                    Op::Lockt { c, f, lo, kind, off, len } => {
                        let owner: &'static [u8] = OWNERS[lo];
                        let before = (st.locks.len(), st.locks.ranges.len());
                        let _ = st.lockt(t0, clients[c], FILES[f], &lockt(owner, kind, off, len));
                        prop_assert_eq!(before, (st.locks.len(), st.locks.ranges.len()));
                    }
                    Op::Free { pick } if !locks.is_empty() => {
                        let (c, _, s) = locks[pick % locks.len()];
                        let _ = st.free_stateid(c, &s);
                    }
                    Op::Expire { c } => st.expire(clients[c]),
                    _ => {}
                }
                invariants(&st);
            }
        }
    }
}
