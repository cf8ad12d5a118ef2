//! Byte-range locks held in Ceph (`ceph_ll_setlk`), so that other Ceph clients see them.
//!
//! # The NFS server's locks, pushed down
//! The NFSv4 server decides a LOCK in its own table first, then asks the backend
//! ([`FileSystem::lock`](sluice_vfs::FileSystem::lock)); here that is a POSIX lock in Ceph, so
//! ceph-fuse, the kernel client or another gateway on the same cluster is refused a conflicting
//! `fcntl` lock, and their locks refuse sluice's LOCK (which the server turns into
//! NFS4ERR_DENIED, its table change undone). Ceph keeps POSIX locks per (Ceph client, owner
//! number), and splits and merges an owner's ranges as the server's table does; the owner
//! number is the server's key for (NFS client, lock owner).
//!
//! libcephfs also ties a lock to the open file it was taken through: closing that file drops
//! the locks taken through it. So each (file, owner) with locks has one open file of its own,
//! kept in [`HeldLocks`] from its first lock to its release:
//! ```text
//!   LOCK (owner k, file f)   no entry: ceph_ll_open f, then setlk; refused ─▶ closed again
//!                            entry:    setlk on its open file
//!   LOCKU                    setlk F_UNLCK on it (no entry: nothing held, nothing to do)
//!   LOCKT                    getlk on it, or on a file opened for the question
//!   release (k, f)           the server's state holds nothing of k on f any more (LOCKU of
//!                            the last range, CLOSE, FREE_STATEID, expiry…): unlock all, close
//!   CephFs dropped           every entry unlocked and closed (and unmounting drops the rest)
//! ```
//! The table's lock is held across each call, so calls for one export reach Ceph in the order
//! the server made them. No call waits for a lock (`sleep` 0): a conflict is EAGAIN at once,
//! then `ceph_ll_getlk` says which lock is in the way for LOCK4denied.
//!
//! # Offsets
//! NFS offsets are 64-bit unsigned, `flock`'s signed: a range that reaches past `i64::MAX` is
//! locked to the end of the file (`l_len` 0) from where it starts, and a start past `i64::MAX`
//! is clamped to it. Ceph cannot hold a lock there anyway; the server's own table keeps the
//! exact ranges for its clients.
//!
//! [`CephFs::set_lock`] is the older, standalone form: one lock on an open file of its own,
//! released when the returned [`CephLock`] is dropped.

use super::handles::err;
use super::CephFs;
use crate::ffi::Fh;
use crate::mount::{CallKind, CephMount};
use bytes::Bytes;
use sluice_vfs::{FileHandle, FsError, LockConflict, LockError, LockType};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The open files that hold the server's locks in Ceph, one per (file's handle bytes, owner).
/// Bounded by the server's lock stateids, which it never lets pass its lock bound.
#[derive(Default)]
pub(super) struct HeldLocks {
    by_owner: Mutex<HashMap<(Bytes, u64), CephLock>>,
}

impl HeldLocks {
    fn table(&self) -> MutexGuard<'_, HashMap<(Bytes, u64), CephLock>> {
        // A panic under the lock is a bug elsewhere; the table stays usable.
        self.by_owner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Entries held (tests, gauges).
    pub(super) fn len(&self) -> usize {
        self.table().len()
    }
}

impl CephFs {
    /// Byte-range lock on `fh` through Ceph (`ceph_ll_setlk`), so other Ceph clients see it:
    /// `lock_type` is `F_RDLCK`, `F_WRLCK` or `F_UNLCK`; `len` 0 is to the end of the file;
    /// `owner` tells lock owners apart. A conflict is [`FsError::Delay`] (EAGAIN). The lock
    /// belongs to the open file returned, and goes with it when it is dropped.
    pub fn set_lock(
        &self,
        fh: &FileHandle,
        lock_type: i16,
        offset: u64,
        len: u64,
        owner: u64,
    ) -> Result<CephLock, FsError> {
        let i = self.resolve(fh)?;
        let flags = if lock_type == libc::F_WRLCK as i16 {
            libc::O_RDWR
        } else {
            libc::O_RDONLY
        };
        let f = self.open(&i, flags)?;
        self.setlk(f.ptr, lock_type, offset, len, owner)?;
        let ptr = f.ptr;
        std::mem::forget(f);
        Ok(CephLock {
            mount: self.mount.clone(),
            fh: ptr,
            owner,
        })
    }

    /// Open files holding the server's locks ([`HeldLocks`]).
    pub fn held_lock_files(&self) -> usize {
        self.locks.len()
    }

    // --- The FileSystem lock calls (module notes) ------------------------------------------

    pub(super) fn push_lock(
        &self,
        fh: &FileHandle,
        owner: u64,
        kind: LockType,
        offset: u64,
        len: u64,
    ) -> Result<(), LockError> {
        let mut t = self.locks.table();
        let key = (fh.to_bytes(), owner);
        let fresh = !t.contains_key(&key);
        if fresh {
            let l = self.open_for_locks(fh, owner)?;
            t.insert(key.clone(), l);
        }
        let f = t.get(&key).expect("inserted above").fh;
        let r = self.setlk_raw(f, flock_type(kind), offset, len, owner);
        if r == 0 {
            return Ok(());
        }
        let conflict = (r == -libc::EAGAIN || r == -libc::EACCES).then(|| {
            // Which lock is in the way; if it went meanwhile, the range asked.
            self.getlk(f, kind, offset, len, owner)
                .ok()
                .flatten()
                .unwrap_or(LockConflict { kind, offset, len })
        });
        if fresh {
            // Nothing was held through it: close it again (the drop unlocks nothing).
            t.remove(&key);
        }
        match conflict {
            Some(c) => Err(LockError::Conflict(c)),
            None => Err(LockError::Fs(err(r))),
        }
    }

    pub(super) fn push_unlock(
        &self,
        fh: &FileHandle,
        owner: u64,
        offset: u64,
        len: u64,
    ) -> Result<(), FsError> {
        let t = self.locks.table();
        let Some(l) = t.get(&(fh.to_bytes(), owner)) else {
            return Ok(());
        };
        let r = self.setlk_raw(l.fh, libc::F_UNLCK as i16, offset, len, owner);
        if r < 0 {
            return Err(err(r));
        }
        Ok(())
    }

    pub(super) fn test_pushed_lock(
        &self,
        fh: &FileHandle,
        owner: u64,
        kind: LockType,
        offset: u64,
        len: u64,
    ) -> Result<Option<LockConflict>, FsError> {
        let t = self.locks.table();
        if let Some(l) = t.get(&(fh.to_bytes(), owner)) {
            return self.getlk(l.fh, kind, offset, len, owner);
        }
        drop(t);
        let i = self.resolve(fh)?;
        let f = self.open(&i, libc::O_RDONLY)?;
        self.getlk(f.ptr, kind, offset, len, owner)
    }

    pub(super) fn release_pushed_locks(&self, file: &[u8], owner: u64) {
        let gone = self
            .locks
            .table()
            .remove(&(Bytes::copy_from_slice(file), owner));
        // Unlocked and closed by its drop, after the table's lock: nothing else of this
        // (file, owner) can be in flight, the server holds its state lock over the call.
        drop(gone);
    }

    pub(super) fn release_pushed_owner(&self, owner: u64) {
        let mut t = self.locks.table();
        let keys: Vec<_> = t.keys().filter(|(_, o)| *o == owner).cloned().collect();
        for k in keys {
            t.remove(&k);
        }
    }

    /// An open file of `fh` to hold `owner`'s locks: read-write when the file allows it (a
    /// WRITE lock may need it), else read-only. Opened as the mount's own user: the NFS
    /// client's access was checked at OPEN.
    fn open_for_locks(&self, fh: &FileHandle, owner: u64) -> Result<CephLock, FsError> {
        let i = self.resolve(fh)?;
        let f = match self.open(&i, libc::O_RDWR) {
            Ok(f) => f,
            Err(_) => self.open(&i, libc::O_RDONLY)?,
        };
        let ptr = f.ptr;
        std::mem::forget(f);
        Ok(CephLock {
            mount: self.mount.clone(),
            fh: ptr,
            owner,
        })
    }

    /// `ceph_ll_getlk`: the lock in the way of `kind` over the range, if any.
    fn getlk(
        &self,
        f: *mut Fh,
        kind: LockType,
        offset: u64,
        len: u64,
        owner: u64,
    ) -> Result<Option<LockConflict>, FsError> {
        let m = &self.mount;
        let mut fl = flock(flock_type(kind), offset, len);
        // SAFETY: an open file, a flock on the stack.
        let r = m.call(CallKind::Lock, || unsafe {
            (m.lib.ceph_ll_getlk)(m.cmount, f, &mut fl, owner)
        });
        if r < 0 {
            return Err(err(r));
        }
        if fl.l_type == libc::F_UNLCK as i16 {
            return Ok(None);
        }
        Ok(Some(LockConflict {
            kind: if fl.l_type == libc::F_WRLCK as i16 {
                LockType::Write
            } else {
                LockType::Read
            },
            offset: fl.l_start.max(0) as u64,
            len: fl.l_len.max(0) as u64,
        }))
    }

    pub(super) fn setlk(
        &self,
        f: *mut Fh,
        lock_type: i16,
        offset: u64,
        len: u64,
        owner: u64,
    ) -> Result<(), FsError> {
        let r = self.setlk_raw(f, lock_type, offset, len, owner);
        if r < 0 {
            return Err(err(r));
        }
        Ok(())
    }

    /// `ceph_ll_setlk`, never waiting: 0 or a negative errno.
    fn setlk_raw(&self, f: *mut Fh, lock_type: i16, offset: u64, len: u64, owner: u64) -> i32 {
        let m = &self.mount;
        let mut fl = flock(lock_type, offset, len);
        // SAFETY: open file, a flock on the stack; sleep = 0 (never blocks).
        m.call(CallKind::Lock, || unsafe {
            (m.lib.ceph_ll_setlk)(m.cmount, f, &mut fl, owner, 0)
        })
    }
}

fn flock_type(kind: LockType) -> i16 {
    match kind {
        LockType::Read => libc::F_RDLCK as i16,
        LockType::Write => libc::F_WRLCK as i16,
    }
}

/// A `flock` of the range (module notes: offsets past `i64::MAX`).
fn flock(lock_type: i16, offset: u64, len: u64) -> libc::flock {
    let start = offset.min(i64::MAX as u64);
    let len = match len {
        0 => 0,
        n if n > i64::MAX as u64 - start => 0,
        n => n as i64,
    };
    // SAFETY: zeroed is a valid flock.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = lock_type;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = start as i64;
    fl.l_len = len;
    fl
}

/// A byte-range lock held in Ceph (see [`CephFs::set_lock`]), or the open file holding one
/// owner's locks on one file ([`HeldLocks`]); unlocked and closed when dropped.
pub struct CephLock {
    mount: Arc<CephMount>,
    fh: *mut Fh,
    owner: u64,
}

// SAFETY: the open file is used only through the mount, whose calls are thread-safe.
unsafe impl Send for CephLock {}
unsafe impl Sync for CephLock {}

impl Drop for CephLock {
    fn drop(&mut self) {
        let m = &self.mount;
        let mut fl = flock(libc::F_UNLCK as i16, 0, 0);
        // SAFETY: an open file we own, unlocked then closed once.
        unsafe {
            m.call(CallKind::Lock, || {
                (m.lib.ceph_ll_setlk)(m.cmount, self.fh, &mut fl, self.owner, 0)
            });
            m.call(CallKind::Open, || (m.lib.ceph_ll_close)(m.cmount, self.fh));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_past_the_signed_offsets_lock_to_the_end() {
        let f = flock(libc::F_WRLCK as i16, 10, 5);
        assert_eq!((f.l_start, f.l_len), (10, 5));
        let f = flock(libc::F_WRLCK as i16, 10, 0);
        assert_eq!((f.l_start, f.l_len), (10, 0));
        let f = flock(libc::F_WRLCK as i16, 10, u64::MAX - 10);
        assert_eq!((f.l_start, f.l_len), (10, 0), "to the end");
        let f = flock(libc::F_WRLCK as i16, u64::MAX - 1, 1);
        assert_eq!((f.l_start, f.l_len), (i64::MAX, 0), "clamped");
        let f = flock(libc::F_RDLCK as i16, 0, i64::MAX as u64);
        assert_eq!((f.l_start, f.l_len), (0, i64::MAX));
    }
}
