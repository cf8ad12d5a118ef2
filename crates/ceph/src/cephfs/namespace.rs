//! Namespace operations below the [`FileSystem`](sluice_vfs::FileSystem) methods: looking up a
//! child, changing a directory with its before and after attributes, making an object with the
//! caller's credentials, applying SETATTR's changes, removing a name, whether a directory is
//! empty, the READDIR cookie verifier, and the times an EXCLUSIVE create keeps its verifier in.

use super::handles::{err, ftype, lookup_name, new_name, InodeRef, Perm};
use super::open_files::{DirStream, Pending};
use super::CephFs;
use crate::ffi::{self, Inode, Statx, Vino};
use crate::mount::CallKind;
use hmac::Mac;
use sluice_vfs::{
    Caller, CreateOk, FileHandle, FileType, FsError, Res, SetAttr, SetTime, Time, Wcc, WccAttr,
};
use std::ffi::CString;

impl CephFs {
    pub(super) fn lookup_child(
        &self,
        dir: &InodeRef<'_>,
        name: &CString,
        perm: &Perm<'_>,
    ) -> Result<InodeRef<'_>, FsError> {
        let m = &self.mount;
        let mut out = std::ptr::null_mut();
        let mut st = Statx::default();
        // SAFETY: live inode and perm, NUL-terminated name, out-pointers to locals.
        let r = m.call(CallKind::Lookup, || unsafe {
            (m.lib.ceph_ll_lookup)(
                m.cmount,
                dir.ptr,
                name.as_ptr(),
                &mut out,
                &mut st,
                ffi::STATX_WANT,
                ffi::AT_SYMLINK_NOFOLLOW,
                perm.ptr,
            )
        });
        if r < 0 {
            return Err(err(r));
        }
        Ok(self.adopt(out, st, dir.vino.snapid))
    }

    /// A directory about to change: resolved, checked, with its before attributes.
    pub(super) fn modify_dir(
        &self,
        caller: &Caller,
        dir: &FileHandle,
    ) -> Result<(InodeRef<'_>, WccAttr), (FsError, Wcc)> {
        let d = self.resolve(dir).map_err(|e| (e, Wcc::default()))?;
        let pre = WccAttr::of(&self.attr(&d.st));
        let fail = |e| (e, Wcc::new(Some(pre), Some(self.attr(&d.st))));
        if caller.read_only {
            return Err(fail(FsError::RoFs));
        }
        if ftype(u32::from(d.st.stx_mode)) != FileType::Directory {
            return Err(fail(FsError::NotDir));
        }
        Ok((d, pre))
    }

    /// The common part of MKDIR, SYMLINK and MKNOD: `make` creates `name` in the directory
    /// and returns the new inode's reference and attributes.
    pub(super) fn make(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        sattr: &SetAttr,
        make: impl FnOnce(&InodeRef<'_>, &CString, &Perm<'_>) -> Result<(*mut Inode, Statx), FsError>,
    ) -> Res<CreateOk, Wcc> {
        let (d, pre) = self.modify_dir(caller, dir)?;
        let fail = |e| (e, self.wcc_after(pre, &d));
        let name = new_name(name).map_err(fail)?;
        let perm = self.perm(caller);
        let (ptr, st) = make(&d, &name, &perm).map_err(fail)?;
        let obj = self.adopt(ptr, st, d.vino.snapid);
        let rest = SetAttr {
            mode: None,
            ..*sattr
        };
        self.apply_sattr(&obj, &rest, &perm).map_err(fail)?;
        let attr = self.post(&obj).unwrap_or_else(|| self.attr(&obj.st));
        Ok(CreateOk {
            fh: self.handle(obj.vino),
            attr,
            dir_wcc: self.wcc_after(pre, &d),
        })
    }

    /// SETATTR's changes in LocalFs's order: size, owner, mode, times.
    pub(super) fn apply_sattr(
        &self,
        i: &InodeRef<'_>,
        s: &SetAttr,
        perm: &Perm<'_>,
    ) -> Result<(), FsError> {
        let mut steps: Vec<(i32, Statx)> = Vec::new();
        if let Some(size) = s.size {
            steps.push((
                ffi::SETATTR_SIZE,
                Statx {
                    stx_size: size,
                    ..Statx::default()
                },
            ));
        }
        let mut own = (0, Statx::default());
        if let Some(uid) = s.uid {
            own.0 |= ffi::SETATTR_UID;
            own.1.stx_uid = uid;
        }
        if let Some(gid) = s.gid {
            own.0 |= ffi::SETATTR_GID;
            own.1.stx_gid = gid;
        }
        if own.0 != 0 {
            steps.push(own);
        }
        if let Some(mode) = s.mode {
            steps.push((
                ffi::SETATTR_MODE,
                Statx {
                    stx_mode: (mode & 0o7777) as u16,
                    ..Statx::default()
                },
            ));
        }
        let mut times = (0, Statx::default());
        let ts = |t: Time| ffi::Timespec {
            tv_sec: t.seconds,
            tv_nsec: i64::from(t.nseconds),
        };
        match s.atime {
            SetTime::DontChange => {}
            SetTime::ServerTime => times.0 |= ffi::SETATTR_ATIME | ffi::SETATTR_ATIME_NOW,
            SetTime::ClientTime(t) => {
                times.0 |= ffi::SETATTR_ATIME;
                times.1.stx_atime = ts(t);
            }
        }
        match s.mtime {
            SetTime::DontChange => {}
            SetTime::ServerTime => times.0 |= ffi::SETATTR_MTIME | ffi::SETATTR_MTIME_NOW,
            SetTime::ClientTime(t) => {
                times.0 |= ffi::SETATTR_MTIME;
                times.1.stx_mtime = ts(t);
            }
        }
        if times.0 != 0 {
            steps.push(times);
        }
        let m = &self.mount;
        for (mask, mut st) in steps {
            // SAFETY: live inode and perm, a statx carrying the masked fields.
            let r = m.call(CallKind::Setattr, || unsafe {
                (m.lib.ceph_ll_setattr)(m.cmount, i.ptr, &mut st, mask, perm.ptr)
            });
            if r < 0 {
                return Err(err(r));
            }
        }
        Ok(())
    }

    pub(super) fn unlink(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        rmdir: bool,
    ) -> Res<Wcc, Wcc> {
        let (d, pre) = self.modify_dir(caller, dir)?;
        let fail = |e| (e, self.wcc_after(pre, &d));
        // knfsd's answer to REMOVE and RMDIR of "." and "..", and LocalFs's.
        if name == b"." || name == b".." {
            return Err(fail(FsError::Acces));
        }
        let name = lookup_name(name).map_err(fail)?;
        let perm = self.perm(caller);
        let m = &self.mount;
        // Linux's unlink(2) of a directory is EISDIR; libcephfs answers EISDIR too, but check
        // first so the error does not depend on the MDS's order of checks. The inode number
        // is what the open-file cache closes once the name is gone.
        let child = self.lookup_child(&d, &name, &perm).ok().map(|c| {
            let dir = ftype(u32::from(c.st.stx_mode)) == FileType::Directory;
            (c.vino.ino, dir)
        });
        if !rmdir && child.is_some_and(|(_, dir)| dir) {
            return Err(fail(FsError::IsDir));
        }
        // SAFETY: live inode and perm, NUL-terminated name.
        let r = m.call(CallKind::Remove, || unsafe {
            if rmdir {
                (m.lib.ceph_ll_rmdir)(m.cmount, d.ptr, name.as_ptr(), perm.ptr)
            } else {
                (m.lib.ceph_ll_unlink)(m.cmount, d.ptr, name.as_ptr(), perm.ptr)
            }
        });
        if r < 0 {
            return Err(fail(err(r)));
        }
        if let Some((ino, _)) = child {
            // Not pinned open here any more: the last link gone, Ceph can purge it.
            self.caches.forget(ino);
        }
        Ok(self.wcc_after(pre, &d))
    }
}

impl CephFs {
    /// Whether a directory has entries besides `.` and `..`.
    pub(super) fn has_entries(&self, d: &InodeRef<'_>, perm: &Perm<'_>) -> Result<bool, FsError> {
        let m = &self.mount;
        let mut dirp = std::ptr::null_mut();
        // SAFETY: live inode and perm, out-pointer to a local.
        let r = m.call(CallKind::Readdir, || unsafe {
            (m.lib.ceph_ll_opendir)(m.cmount, d.ptr, &mut dirp, perm.ptr)
        });
        if r < 0 {
            return Err(err(r));
        }
        let mut found = false;
        loop {
            // SAFETY: zeroed is a valid dirent and statx.
            let mut de: libc::dirent = unsafe { std::mem::zeroed() };
            let mut st = Statx::default();
            // SAFETY: an open directory stream, out-pointers to locals, no inode wanted.
            let r = m.call(CallKind::Readdir, || unsafe {
                (m.lib.ceph_readdirplus_r)(
                    m.cmount,
                    dirp,
                    &mut de,
                    &mut st,
                    0,
                    ffi::AT_SYMLINK_NOFOLLOW,
                    std::ptr::null_mut(),
                )
            });
            if r <= 0 {
                break;
            }
            // SAFETY: d_name is NUL-terminated by libcephfs.
            let name = unsafe { std::ffi::CStr::from_ptr(de.d_name.as_ptr()) }.to_bytes();
            if name != b"." && name != b".." {
                found = true;
                break;
            }
        }
        // SAFETY: opened above, released once.
        unsafe { (m.lib.ceph_ll_releasedir)(m.cmount, dirp) };
        Ok(found)
    }

    /// The next entry of a directory stream, with its attributes and an inode reference when
    /// `plus`; `None` at the end.
    pub(super) fn next_entry(
        &self,
        stream: &DirStream,
        plus: bool,
    ) -> Result<Option<Pending>, FsError> {
        let m = &self.mount;
        // SAFETY: zeroed is a valid dirent.
        let mut de: libc::dirent = unsafe { std::mem::zeroed() };
        let mut st = Statx::default();
        let mut out: *mut Inode = std::ptr::null_mut();
        let want = if plus { ffi::STATX_WANT } else { 0 };
        // SAFETY: an open directory stream, out-pointers to locals.
        let r = m.call(CallKind::Readdir, || unsafe {
            (m.lib.ceph_readdirplus_r)(
                m.cmount,
                stream.dirp,
                &mut de,
                &mut st,
                want,
                ffi::AT_SYMLINK_NOFOLLOW,
                if plus { &mut out } else { std::ptr::null_mut() },
            )
        });
        if r < 0 {
            return Err(err(r));
        }
        if r == 0 {
            return Ok(None);
        }
        // SAFETY: d_name is NUL-terminated by libcephfs.
        let name = unsafe { std::ffi::CStr::from_ptr(de.d_name.as_ptr()) }.to_bytes();
        Ok(Some(Pending {
            name: name.to_vec(),
            fileid: de.d_ino,
            cookie: de.d_off as u64,
            st,
            inode: out,
        }))
    }

    pub(super) fn cookie_verifier(&self, vino: Vino) -> [u8; 8] {
        let mut m = self.mac.clone();
        m.update(b"cookie verifier");
        m.update(&vino.ino.to_be_bytes());
        m.update(&vino.snapid.to_be_bytes());
        m.finalize().into_bytes()[..8].try_into().expect("8 bytes")
    }
}

/// The times an EXCLUSIVE create stores its verifier in, as LocalFs and knfsd: mtime seconds
/// from the first 4 bytes, atime seconds from the last 4, high bits cleared.
pub(super) fn exclusive_times(verf: [u8; 8]) -> (Time, Time) {
    let a = i64::from(u32::from_be_bytes(verf[..4].try_into().expect("4")) & 0x7fff_ffff);
    let b = i64::from(u32::from_be_bytes(verf[4..].try_into().expect("4")) & 0x7fff_ffff);
    (
        Time {
            seconds: a,
            nseconds: 0,
        },
        Time {
            seconds: b,
            nseconds: 0,
        },
    )
}
