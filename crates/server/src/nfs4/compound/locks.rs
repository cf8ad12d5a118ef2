//! LOCK, LOCKT and LOCKU in the COMPOUND processor (RFC 8881 §18.10-§18.12): the current
//! handle and the current stateid resolved here, the rest in the state core
//! (`state/locks.rs`). RELEASE_LOCKOWNER is a 4.0 op: the op table answers it NFS4ERR_NOTSUPP
//! in minor version 1 (§18.39 is absent from 4.1's list of allowed ops).
//!
//! # Locks pushed down to the backend
//! A backend other clients reach (CephFS) takes the locks too
//! ([`FileSystem::lock`](crate::backend::FileSystem::lock); LocalFs and MemFs do nothing, the
//! state's table is the whole truth there). The state decides first, then the backend, with
//! the state's lock held across both so no other call sees the table between them:
//! ```text
//!   LOCK    state.lock_undoable ─ refused ─▶ DENIED / error (the backend is not asked)
//!              │ granted
//!              ▼
//!           fs.lock(fh, owner key, type, range) ─ conflict ─▶ state.undo_lock, DENIED with
//!              │ ok                                           the backend's conflicting lock
//!              ▼                                 ─ error ───▶ state.undo_lock, its status
//!           the lock stateid
//!   LOCKT   the state's table, then fs.test_lock (a conflict there is DENIED too)
//!   LOCKU   the state's table, then fs.unlock
//! ```
//! Everything that drops lock state (LOCKU of an owner's last range, FREE_STATEID, CLOSE,
//! lease and courtesy expiry, a client record replaced by a new EXCHANGE_ID) leaves the state a
//! list of (file, owner key) to release ([`sluice_nfs4state::locks::stateids::LockRelease`]);
//! [`StateGuard`], the only way the processor and its drivers take the state's lock, hands
//! that list to every export's backend before it lets the lock go, so a release reaches the
//! backend before any later LOCK of the same owner. A server shut down drops its file systems,
//! and CephFS's drop unlocks what it held ([`Nfs4`]'s drop releases every lock stateid's
//! backend locks first, for a backend that outlives the server).
//!
//! A conflict the backend reports names no NFS owner (it is another Ceph client's): the
//! LOCK4denied carries client id 0 and the owner bytes [`BACKEND_OWNER`].

use super::{Call, Ctx, Fh, Nfs4};
use crate::backend::{FileHandle, FileSystem, LockConflict, LockError, LockType};
use crate::exports::ExportEntry;
use crate::nfs4::map;
use sluice_nfs4state::locks::ranges::{LockKind, Range};
use sluice_nfs4state::locks::LockRefused;
use sluice_nfs4state::State4;
use sluice_xdr::nfs4::ops::{
    Lock4Denied, LockArgs, LockRes, Locker4, LocktArgs, LocktRes, LockuArgs, READ_LT, WRITE_LT,
};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{LockOwner4, Opaque4, Stateid4};
use std::sync::MutexGuard;

/// The owner bytes of a LOCK4denied for a lock the backend reports (module notes).
pub const BACKEND_OWNER: &[u8] = b"another client of the backend";

impl Nfs4 {
    /// LOCK (§18.10): sets the current stateid to the lock stateid.
    pub(super) fn lock(&self, call: &Call<'_>, ctx: &mut Ctx, a: &LockArgs) -> LockRes {
        let run = || -> Result<Stateid4, LockRefused> {
            let clientid = ctx.clientid.ok_or(Nfsstat4::OP_NOT_IN_SESSION)?;
            let file = self.open_file(ctx)?;
            let mut a = a.clone();
            match &mut a.locker {
                Locker4::New(n) => n.open_stateid = ctx.resolve_stateid(&n.open_stateid)?,
                Locker4::Exist(e) => e.lock_stateid = ctx.resolve_stateid(&e.lock_stateid)?,
            }
            let (fs, fh) = self.lock_target(ctx)?;
            let mut st = self.state();
            let u = st.lock_undoable(call.now, clientid, &file, &a)?;
            // Courtesy clients this LOCK broke: their backend locks go first, or they would
            // stand in its way there.
            st.release_now();
            let (offset, len) = backend_range(u.range);
            match fs.lock(fh, u.owner_key, backend_type(u.kind), offset, len) {
                Ok(()) => Ok(u.stateid),
                Err(e) => {
                    st.undo_lock(u);
                    Err(refused(e))
                }
            }
        };
        match run() {
            Ok(sid) => {
                ctx.stateid = Some(sid);
                LockRes::Ok(sid)
            }
            Err(LockRefused::Denied(d)) => LockRes::Denied(d),
            Err(LockRefused::Status(s)) => LockRes::Err(s),
        }
    }

    /// LOCKT (§18.11): the current handle must be a regular file (ISDIR, SYMLINK, INVAL
    /// otherwise, as for READ).
    pub(super) fn lockt(&self, call: &Call<'_>, ctx: &Ctx, a: &LocktArgs) -> LocktRes {
        let run = || -> Result<(), LockRefused> {
            let clientid = ctx.clientid.ok_or(Nfsstat4::OP_NOT_IN_SESSION)?;
            let (fs, _, fh) = self.data_target(call, ctx)?;
            let st = self.state();
            st.lockt(call.now, clientid, &fs.state_key(&fh), a)?;
            // Valid arguments: the state checked them.
            let kind = LockKind::from_wire(a.locktype)?;
            let range = Range::from_wire(a.offset, a.length)?;
            // An owner with no lock stateid holds nothing in the backend: 0, a key never
            // drawn, sees every lock there.
            let key = st
                .locks()
                .owner_key(clientid, &a.owner.owner.0)
                .unwrap_or(0);
            let (offset, len) = backend_range(range);
            match fs.test_lock(&fh, key, backend_type(kind), offset, len) {
                Ok(None) => Ok(()),
                Ok(Some(c)) => Err(LockRefused::Denied(denied(c))),
                Err(e) => Err(map::status(e).into()),
            }
        };
        match run() {
            Ok(()) => LocktRes::Ok(()),
            Err(LockRefused::Denied(d)) => LocktRes::Denied(d),
            Err(LockRefused::Status(s)) => LocktRes::Err(s),
        }
    }

    /// LOCKU (§18.12): sets the current stateid to the bumped lock stateid.
    pub(super) fn locku(&self, ctx: &mut Ctx, a: &LockuArgs) -> Result<Stateid4, Nfsstat4> {
        let clientid = ctx.clientid.ok_or(Nfsstat4::OP_NOT_IN_SESSION)?;
        let file = self.open_file(ctx)?;
        let mut a = a.clone();
        a.lock_stateid = ctx.resolve_stateid(&a.lock_stateid)?;
        let (fs, fh) = self.lock_target(ctx)?;
        let mut st = self.state();
        let out = st.locku(clientid, &file, &a)?;
        let key = st.locks().get(&out.other).map(|s| s.owner_key);
        // Valid: LOCKU checked it.
        let range = Range::from_wire(a.offset, a.length)?;
        if let Some(key) = key {
            let (offset, len) = backend_range(range);
            fs.unlock(fh, key, offset, len).map_err(map::status)?;
        }
        ctx.stateid = Some(out);
        Ok(out)
    }

    /// The current handle's file system and handle (after [`Nfs4::open_file`] found it an
    /// export's).
    fn lock_target<'a>(
        &'a self,
        ctx: &'a Ctx,
    ) -> Result<(&'a dyn FileSystem, &'a FileHandle), Nfsstat4> {
        match ctx.current.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)? {
            Fh::Export { idx, fh } => {
                let e = self.exports.get(*idx).ok_or(Nfsstat4::STALE)?;
                Ok((e.fs.as_ref(), fh))
            }
            Fh::Pseudo(_) => Err(Nfsstat4::BAD_STATEID),
        }
    }

    /// The state's lock, as [`StateGuard`] (module notes).
    pub(crate) fn state(&self) -> StateGuard<'_> {
        StateGuard {
            // A panic under the lock is a bug elsewhere; the tables stay usable.
            st: self.state.lock().unwrap_or_else(|p| p.into_inner()),
            exports: &self.exports,
        }
    }
}

/// The state's lock; when dropped, it first hands the backend locks the state released to
/// every export's file system, still under the lock (module notes).
pub struct StateGuard<'a> {
    st: MutexGuard<'a, State4>,
    exports: &'a [ExportEntry],
}

impl StateGuard<'_> {
    /// Hands what the state released so far to the backends now, not at the drop.
    fn release_now(&mut self) {
        release(self.st.take_released_locks(), self.exports);
    }
}

impl std::ops::Deref for StateGuard<'_> {
    type Target = State4;
    fn deref(&self) -> &State4 {
        &self.st
    }
}

impl std::ops::DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut State4 {
        &mut self.st
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        self.release_now();
    }
}

impl Drop for Nfs4 {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        let mut all = st.take_released_locks();
        all.extend(st.locks().iter().map(|(_, s)| {
            sluice_nfs4state::locks::stateids::LockRelease {
                file: s.file.clone(),
                owner_key: s.owner_key,
            }
        }));
        release(all, &self.exports);
    }
}

/// Each release to every export's backend: a backend ignores files and owners it holds
/// nothing for, and a file's key is only ever one export's.
fn release(all: Vec<sluice_nfs4state::locks::stateids::LockRelease>, exports: &[ExportEntry]) {
    for r in all {
        for e in exports {
            e.fs.release_locks(&r.file, r.owner_key);
        }
    }
}

/// A backend's refusal as LOCK's answer.
fn refused(e: LockError) -> LockRefused {
    match e {
        LockError::Conflict(c) => LockRefused::Denied(denied(c)),
        LockError::Fs(e) => LockRefused::Status(map::status(e)),
    }
}

/// LOCK4denied for a lock the backend reports (module notes).
fn denied(c: LockConflict) -> Lock4Denied {
    Lock4Denied {
        offset: c.offset,
        // `len` 0 is to the end of the file: the wire's all ones.
        length: if c.len == 0 { u64::MAX } else { c.len },
        locktype: match c.kind {
            LockType::Read => READ_LT,
            LockType::Write => WRITE_LT,
        },
        owner: LockOwner4 {
            clientid: 0,
            owner: Opaque4(bytes::Bytes::from_static(BACKEND_OWNER)),
        },
    }
}

fn backend_type(k: LockKind) -> LockType {
    match k {
        LockKind::Read => LockType::Read,
        LockKind::Write => LockType::Write,
    }
}

/// An inclusive range as the backend's (offset, len), len 0 to the end.
fn backend_range(r: Range) -> (u64, u64) {
    if r.last == u64::MAX {
        (r.first, 0)
    } else {
        (r.first, r.last - r.first + 1)
    }
}
