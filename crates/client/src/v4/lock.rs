//! Byte-range locks: LOCK, LOCKT and LOCKU (RFC 8881 §9, §18.10-§18.12), what `fcntl` and
//! `flock` on the FUSE mount become.
//!
//! ```text
//!   first lock of a lock owner on an open:  LOCK, locker = open_to_lock_owner4
//!        (the open stateid, the new lock owner)          ──▶ lock stateid
//!   every later lock and unlock of that owner:  LOCK exist_lock_owner4 / LOCKU
//!        (the lock stateid)                              ──▶ the same stateid, seqid + 1
//!   test:  LOCKT (no stateid: the owner's own locks never conflict)
//!   CLOSE of the open: the server drops its lock stateids and their ranges (knfsd and sluice
//!        do; the mount unlocks before it closes anyway, as the kernel unlocks on close)
//! ```
//!
//! A lock owner is `(client id, opaque bytes)`; the caller names it (the mount uses FUSE's
//! `lock_owner`, one per process for `fcntl` and one per open file description for
//! `flock`). Stateids are presented with seqid 0, "the current one" (§8.2.2), and the
//! `open_seqid` / `lock_seqid` fields are zero: minor version 1 ignores them, the session's
//! slots order the requests (§8.13).
//!
//! The lock stateid and the ranges granted are kept in the open's record of the
//! [`super::reopen::OpenTable`], so that the reopen pass after a server restart knows what
//! was held: in the server's grace period it reclaims each range (LOCK with `reclaim` after
//! the open's CLAIM_PREVIOUS, before RECLAIM_COMPLETE) and LOCK / LOCKU built with the old
//! lock stateid go out with the new one; without grace the locks are reported lost and their
//! records dropped, not taken again (see [`super::reopen`]).
//!
//! Blocking waits are the caller's: a conflict is an answer ([`LockConflict`]), not an error,
//! and the mount polls with back-off as Linux does for NFS4ERR_DENIED (§9.6).

use super::{Client, Error, Fh};
use bytes::Bytes;
use sluice_xdr::nfs4::ops::{
    ExistLockOwner4, Lock4Denied, LockArgs, LockRes, Locker4, LocktArgs, LocktRes, LockuArgs,
    NfsArgop4, NfsResop4, OpenToLockOwner4, READ_LT, WRITE_LT,
};
use sluice_xdr::nfs4::{Nfsstat4, Opaque4, StateOwner4, Stateid4};

pub use crate::neutral::LockConflict;

impl From<&Lock4Denied> for LockConflict {
    fn from(d: &Lock4Denied) -> Self {
        LockConflict {
            offset: d.offset,
            length: d.length,
            write: d.locktype != READ_LT && d.locktype != sluice_xdr::nfs4::ops::READW_LT,
            owner: d.owner.owner.0.clone(),
        }
    }
}

fn locktype(write: bool) -> u32 {
    if write {
        WRITE_LT
    } else {
        READ_LT
    }
}

/// Statuses saying a lock stateid is no longer the server's (a restart, an expiry): the lock
/// is asked again with open_to_lock_owner4.
fn stale_lock_stateid(s: Nfsstat4) -> bool {
    matches!(
        s,
        Nfsstat4::BAD_STATEID | Nfsstat4::STALE_STATEID | Nfsstat4::OLD_STATEID
    ) || s == Nfsstat4::EXPIRED
}

impl Client {
    /// LOCK `[offset, offset + length)` (length `u64::MAX`: to the end) for `owner` under the
    /// open `fh`: `Ok(None)` when granted, `Ok(Some(conflict))` when another owner holds a
    /// conflicting lock (NFS4ERR_DENIED). A lock over one the owner holds changes its type
    /// (upgrade or downgrade), as POSIX locks do.
    pub async fn lock(
        &self,
        fh: &Fh,
        owner: &[u8],
        write: bool,
        offset: u64,
        length: u64,
    ) -> Result<Option<LockConflict>, Error> {
        let existing = self.lock_stateid(fh, owner);
        if let Some(sid) = existing {
            match self
                .send_lock(fh, owner, write, offset, length, Some(sid))
                .await
            {
                Err(Error::Status { status, .. }) if stale_lock_stateid(status) => {
                    self.forget_lock_stateid(fh, owner);
                }
                r => return r,
            }
        }
        self.send_lock(fh, owner, write, offset, length, None).await
    }

    /// LOCKT: the lock that would keep `owner` from taking this one, if any.
    pub async fn test_lock(
        &self,
        fh: &Fh,
        owner: &[u8],
        write: bool,
        offset: u64,
        length: u64,
    ) -> Result<Option<LockConflict>, Error> {
        let reply = self
            .compound(vec![
                NfsArgop4::Putfh(fh.fh.clone()),
                NfsArgop4::Lockt(LocktArgs {
                    locktype: locktype(write),
                    offset,
                    length,
                    owner: self.lock_owner(owner),
                }),
            ])
            .await?;
        if let Some(NfsResop4::Lockt(LocktRes::Denied(d))) = reply.results.last() {
            return Ok(Some(LockConflict::from(d)));
        }
        reply.ok()?;
        Ok(None)
    }

    /// LOCKU `[offset, offset + length)` of `owner`. Nothing to send when the owner never
    /// locked under this open (the kernel unlocks on every close of a file it saw locked).
    pub async fn unlock(
        &self,
        fh: &Fh,
        owner: &[u8],
        offset: u64,
        length: u64,
    ) -> Result<(), Error> {
        let Some(sid) = self.lock_stateid(fh, owner) else {
            return Ok(());
        };
        let r = self
            .compound(vec![
                NfsArgop4::Putfh(fh.fh.clone()),
                NfsArgop4::Locku(LockuArgs {
                    locktype: WRITE_LT,
                    seqid: 0,
                    lock_stateid: sid,
                    offset,
                    length,
                }),
            ])
            .await?
            .ok();
        match r {
            Ok(_) => {}
            // The server no longer knows the lock (a restart, an expiry): nothing is held.
            Err(Error::Status { status, .. }) if stale_lock_stateid(status) => {
                self.forget_lock_stateid(fh, owner);
            }
            Err(e) => return Err(e),
        }
        self.inner
            .open_files
            .lock()
            .expect("opens lock")
            .unlocked(fh.stateid, owner, offset, length);
        Ok(())
    }

    async fn send_lock(
        &self,
        fh: &Fh,
        owner: &[u8],
        write: bool,
        offset: u64,
        length: u64,
        existing: Option<Stateid4>,
    ) -> Result<Option<LockConflict>, Error> {
        let locker = match existing {
            Some(lock_stateid) => Locker4::Exist(ExistLockOwner4 {
                lock_stateid,
                lock_seqid: 0,
            }),
            None => Locker4::New(OpenToLockOwner4 {
                open_seqid: 0,
                // Rewritten to the current open stateid as it goes out (reopen::translate).
                open_stateid: fh.stateid,
                lock_seqid: 0,
                lock_owner: self.lock_owner(owner),
            }),
        };
        let reply = self
            .compound(vec![
                NfsArgop4::Putfh(fh.fh.clone()),
                NfsArgop4::Lock(LockArgs {
                    locktype: locktype(write),
                    reclaim: false,
                    offset,
                    length,
                    locker,
                }),
            ])
            .await?;
        match reply.results.last() {
            Some(NfsResop4::Lock(LockRes::Denied(d))) => return Ok(Some(LockConflict::from(d))),
            Some(NfsResop4::Lock(LockRes::Ok(sid))) => {
                let current = Stateid4 {
                    seqid: 0,
                    other: sid.other,
                };
                self.inner
                    .open_files
                    .lock()
                    .expect("opens lock")
                    .locked(fh.stateid, owner, current, write, offset, length);
                return Ok(None);
            }
            _ => {}
        }
        reply.ok()?;
        Err(Error::Other("LOCK returned no result".into()))
    }

    fn lock_owner(&self, owner: &[u8]) -> StateOwner4 {
        let clientid = self.inner.session.lock().expect("session lock").clientid;
        StateOwner4 {
            clientid,
            owner: Opaque4(Bytes::copy_from_slice(owner)),
        }
    }

    fn lock_stateid(&self, fh: &Fh, owner: &[u8]) -> Option<Stateid4> {
        self.inner
            .open_files
            .lock()
            .expect("opens lock")
            .lock_stateid(fh.stateid, owner)
    }

    fn forget_lock_stateid(&self, fh: &Fh, owner: &[u8]) {
        self.inner
            .open_files
            .lock()
            .expect("opens lock")
            .forget_lock_stateid(fh.stateid, owner);
    }
}
