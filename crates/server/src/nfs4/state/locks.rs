//! LOCK, LOCKT and LOCKU (RFC 8881 §18.10-§18.12) as [`State4`] entry points: the argument
//! checks, the open or lock stateid presented, courtesy clients in the way, then the change in
//! [`super::super::lockstate`] and [`super::super::lock`] (the design notes are there).
//!
//! The processor resolves the special "current" stateid in the arguments before calling, and
//! passes the current file handle's bytes as `file`.

use super::super::lock::{Lock, LockError, LockKind, Owner, Range};
use super::super::lockstate::LockStates;
use super::super::open::{IoState, Other};
use super::super::Nfsstat4;
use super::State4;
use sluice_xdr::nfs4::ops::{
    Lock4Denied, LockArgs, Locker4, LocktArgs, LockuArgs, OPEN4_SHARE_ACCESS_READ,
    OPEN4_SHARE_ACCESS_WRITE,
};
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

impl State4 {
    /// LOCK (§18.10.4). Returns the new or bumped lock stateid.
    pub fn lock(
        &mut self,
        now: Instant,
        clientid: ClientId4,
        file: &[u8],
        a: &LockArgs,
    ) -> Result<Stateid4, LockRefused> {
        let kind = LockKind::from_wire(a.locktype)?;
        let range = Range::from_wire(a.offset, a.length)?;
        self.clients.get(clientid)?;
        if a.reclaim {
            // No restart recovery yet, so never a grace period to reclaim in.
            return Err(Nfsstat4::NO_GRACE.into());
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
        loop {
            match self.locks.ranges.lock(file, &owner, kind, range) {
                Ok(()) => break,
                Err(LockError::Full) if self.expire_oldest_courtesy(clientid) => {}
                Err(LockError::Full) => return Err(Nfsstat4::DELAY.into()),
                Err(LockError::Denied(l)) => return Err(LockRefused::Denied(denied(&l))),
            }
        }
        Ok(match existing {
            Some(other) => self.locks.bump(&other),
            None => {
                let opens = &self.opens;
                self.locks.create(
                    clientid,
                    owner.owner,
                    bytes::Bytes::copy_from_slice(file),
                    open,
                    self.entropy.as_mut(),
                    &|o| opens.get(o).is_some(),
                )
            }
        })
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
    pub(super) fn check_lock_io(
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
