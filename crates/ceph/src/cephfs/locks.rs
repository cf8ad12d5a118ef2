//! Byte-range locks held in Ceph (`ceph_ll_setlk`), so that other Ceph clients see them:
//! [`CephFs::set_lock`] takes one on an open file of its own, and the [`CephLock`] it returns
//! unlocks and closes that file when dropped.

use super::handles::err;
use super::CephFs;
use crate::ffi::Fh;
use crate::mount::{CallKind, CephMount};
use sluice_vfs::{FileHandle, FsError};
use std::sync::Arc;

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

    pub(super) fn setlk(
        &self,
        f: *mut Fh,
        lock_type: i16,
        offset: u64,
        len: u64,
        owner: u64,
    ) -> Result<(), FsError> {
        let m = &self.mount;
        // SAFETY: zeroed is a valid flock.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = lock_type;
        fl.l_whence = libc::SEEK_SET as i16;
        fl.l_start = offset as i64;
        fl.l_len = len as i64;
        // SAFETY: open file, a flock on the stack; sleep = 0 (never blocks).
        let r = m.call(CallKind::Lock, || unsafe {
            (m.lib.ceph_ll_setlk)(m.cmount, f, &mut fl, owner, 0)
        });
        if r < 0 {
            return Err(err(r));
        }
        Ok(())
    }
}

/// A byte-range lock held in Ceph (see [`CephFs::set_lock`]); released when dropped.
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
        // SAFETY: zeroed is a valid flock; an open file we own, unlocked then closed once.
        unsafe {
            let mut fl: libc::flock = std::mem::zeroed();
            fl.l_type = libc::F_UNLCK as i16;
            fl.l_whence = libc::SEEK_SET as i16;
            m.call(CallKind::Lock, || {
                (m.lib.ceph_ll_setlk)(m.cmount, self.fh, &mut fl, self.owner, 0)
            });
            m.call(CallKind::Open, || (m.lib.ceph_ll_close)(m.cmount, self.fh));
        }
    }
}
