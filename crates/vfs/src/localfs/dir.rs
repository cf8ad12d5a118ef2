//! Directory machinery: validated names ([`Name`]: one component, never `/` or NUL), the start
//! every directory change shares ([`LocalFs::modify_dir`]), making and unlinking objects as the
//! caller, setting attributes, and READDIR's entries.

use super::base::{errno, LocalFs, Obj};
use super::perms::may_write;
use crate::attr::{self, dev_ino, is_dir, is_lnk};
use crate::creds::Cred;
use crate::openfiles::OpenFile;
use crate::sys::{self, Dirent};
use crate::types::{
    Caller, CreateOk, DirEntry, FileHandle, FsError, Res, SetAttr, SetTime, Wcc, WccAttr, NAME_MAX,
};
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// An object just found by name (no handle yet): an `O_PATH` descriptor and its attributes.
pub(super) struct Found {
    pub(super) fd: OwnedFd,
    pub(super) st: libc::statx,
}

impl LocalFs {
    /// Resolves a directory about to be modified: its object and pre-op attributes.
    pub(super) fn modify_dir(&self, caller: &Caller, dir: &FileHandle) -> Res<(Obj, WccAttr), Wcc> {
        let d = self.resolve(dir).map_err(|s| (s, Wcc::default()))?;
        let pre = attr::wcc(&d.st);
        if !is_dir(&d.st) {
            return Err((FsError::NotDir, self.wcc_after(Some(pre), d.fd.as_fd())));
        }
        if caller.read_only {
            return Err((FsError::RoFs, self.wcc_after(Some(pre), d.fd.as_fd())));
        }
        Ok((d, pre))
    }

    /// Opens `dir/name` `O_PATH` without following a symlink (call with credentials switched).
    pub(super) fn child(&self, dir: &Obj, name: &Name) -> Result<Found, FsError> {
        let flags = libc::O_PATH | libc::O_NOFOLLOW;
        let fd = sys::openat(dir.fd.as_fd(), name.c(), flags, 0).map_err(|e| errno(&e))?;
        let st = sys::statx(fd.as_fd(), sys::EMPTY).map_err(|e| errno(&e))?;
        Ok(Found { fd, st })
    }

    /// MKDIR, SYMLINK, MKNOD: `make(dirfd, name)` creates the object as the caller, then the
    /// remaining attributes are applied.
    pub(super) fn make(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        sattr: &SetAttr,
        make: impl FnOnce(BorrowedFd<'_>, &CStr) -> io::Result<()>,
    ) -> Res<CreateOk, Wcc> {
        let (d, pre) = self.modify_dir(caller, dir)?;
        let fail = |s| (s, self.wcc_after(Some(pre), d.fd.as_fd()));
        let name = Name::parse(name).map_err(fail)?;
        if name.is_dot_or_dotdot() {
            return Err(fail(FsError::Exist));
        }
        let obj = {
            let _as = self.act_as(caller).map_err(fail)?;
            make(d.fd.as_fd(), name.c()).map_err(|e| fail(errno(&e)))?;
            let obj = self.child(&d, &name).map_err(fail)?;
            let rest = SetAttr {
                mode: None,
                size: None,
                ..*sattr
            };
            self.apply_sattr(obj.fd.as_fd(), &obj.st, None, &rest, &caller.cred)
                .map_err(fail)?;
            obj
        };
        let fh = self
            .handle_for(obj.fd.as_fd(), &obj.st, Some(&d.kh))
            .map_err(fail)?;
        let st = sys::statx(obj.fd.as_fd(), sys::EMPTY).map_err(|e| fail(errno(&e)))?;
        Ok(CreateOk {
            fh,
            attr: self.fattr(&st),
            dir_wcc: self.wcc_after(Some(pre), d.fd.as_fd()),
        })
    }

    /// REMOVE and RMDIR.
    pub(super) fn unlink(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        flags: libc::c_int,
    ) -> Res<Wcc, Wcc> {
        let (d, pre) = self.modify_dir(caller, dir)?;
        let fail = |s| (s, self.wcc_after(Some(pre), d.fd.as_fd()));
        let name = Name::parse(name).map_err(fail)?;
        if name.is_dot_or_dotdot() {
            return Err(fail(FsError::Acces));
        }
        {
            let _as = self.act_as(caller).map_err(fail)?;
            let victim = sys::statx(d.fd.as_fd(), name.c()).ok().map(|s| dev_ino(&s));
            sys::unlinkat(d.fd.as_fd(), name.c(), flags)
                .map_err(|e| fail(errno_busy_is_acces(&e)))?;
            if let Some((dev, ino)) = victim {
                self.files.remove_inode(dev, ino);
                self.syncs.forget(&(dev, ino));
            }
        }
        Ok(self.wcc_after(Some(pre), d.fd.as_fd()))
    }

    /// Applies size, owner, mode and times (call with credentials switched). `file` is the
    /// writable descriptor for a size change.
    pub(super) fn apply_sattr(
        &self,
        fd: BorrowedFd<'_>,
        st: &libc::statx,
        file: Option<&OpenFile>,
        s: &SetAttr,
        cred: &Cred,
    ) -> Result<(), FsError> {
        if let Some(size) = s.size {
            let file = file.ok_or(FsError::Inval)?;
            may_write(file.as_fd(), st, cred)?;
            sys::ftruncate(file.as_fd(), size).map_err(|e| errno(&e))?;
        }
        // Unchanged ids are skipped: a chown to the same ids would still clear set-id bits.
        let uid = s.uid.filter(|&u| u != st.stx_uid);
        let gid = s.gid.filter(|&g| g != st.stx_gid);
        if uid.is_some() || gid.is_some() {
            sys::fchown(fd, uid.unwrap_or(u32::MAX), gid.unwrap_or(u32::MAX))
                .map_err(|e| errno(&e))?;
        }
        if let Some(mode) = s.mode {
            if !is_lnk(st) {
                sys::chmod_fd(fd, mode & 0o7777).map_err(|e| errno(&e))?;
            }
        }
        if s.atime != SetTime::DontChange || s.mtime != SetTime::DontChange {
            sys::set_times(fd, timespec(s.atime), timespec(s.mtime)).map_err(|e| errno(&e))?;
        }
        Ok(())
    }

    /// One READDIR entry, with attributes and handle for READDIRPLUS.
    pub(super) fn dir_entry<'a>(
        &self,
        d: &Obj,
        dir_fh: &FileHandle,
        at_root: bool,
        ent: &Dirent<'a>,
        plus: bool,
    ) -> DirEntry<'a> {
        let dot = ent.name == b".";
        let dotdot = ent.name == b"..";
        let mut e = DirEntry {
            fileid: ent.ino,
            name: ent.name,
            cookie: ent.off,
            attr: None,
            fh: None,
        };
        if dot || (dotdot && at_root) {
            e.fileid = d.st.stx_ino;
            if plus {
                e.attr = Some(self.fattr(&d.st));
                e.fh = Some(if dot {
                    dir_fh.clone()
                } else {
                    self.root_fh.clone()
                });
            }
            return e;
        }
        if plus {
            let Ok(name) = CString::new(ent.name) else {
                return e;
            };
            let flags = libc::O_PATH | libc::O_NOFOLLOW;
            if let Ok(fd) = sys::openat(d.fd.as_fd(), &name, flags, 0) {
                if let Ok(st) = sys::statx(fd.as_fd(), sys::EMPTY) {
                    if let Ok(fh) = self.handle_for(fd.as_fd(), &st, Some(&d.kh)) {
                        e.attr = Some(self.fattr(&st));
                        e.fh = Some(fh);
                    }
                }
            }
        }
        e
    }
}

/// A validated file name: one path component, NUL-terminated in place.
pub(super) struct Name {
    buf: [u8; NAME_MAX + 1],
    len: usize,
}

impl Name {
    pub(super) fn parse(raw: &[u8]) -> Result<Name, FsError> {
        if raw.is_empty() || raw.contains(&b'/') || raw.contains(&0) {
            return Err(FsError::Acces);
        }
        if raw.len() > NAME_MAX {
            return Err(FsError::NameTooLong);
        }
        let mut buf = [0u8; NAME_MAX + 1];
        buf[..raw.len()].copy_from_slice(raw);
        Ok(Name {
            buf,
            len: raw.len(),
        })
    }

    pub(super) fn c(&self) -> &CStr {
        CStr::from_bytes_with_nul(&self.buf[..=self.len]).expect("no interior NUL, checked")
    }

    pub(super) fn is_dot(&self) -> bool {
        &self.buf[..self.len] == b"."
    }

    pub(super) fn is_dotdot(&self) -> bool {
        &self.buf[..self.len] == b".."
    }

    pub(super) fn is_dot_or_dotdot(&self) -> bool {
        self.is_dot() || self.is_dotdot()
    }
}

/// The times knfsd stores an exclusive-create verifier in: (mtime, atime) seconds.
pub(super) fn exclusive_times(verf: [u8; 8]) -> (i64, i64) {
    let m = u32::from_be_bytes(verf[0..4].try_into().expect("4 bytes")) & 0x7fff_ffff;
    let a = u32::from_be_bytes(verf[4..8].try_into().expect("4 bytes")) & 0x7fff_ffff;
    (i64::from(m), i64::from(a))
}

fn timespec(t: SetTime) -> sys::TimeSpec {
    match t {
        SetTime::DontChange => None,
        SetTime::ServerTime => Some(None),
        SetTime::ClientTime(t) => Some(Some((t.seconds, t.nseconds))),
    }
}

/// EBUSY from unlink/rmdir/rename means a mount point or the like: not worth a retry
/// (JUKEBOX), refused.
pub(super) fn errno_busy_is_acces(e: &io::Error) -> FsError {
    match e.raw_os_error() {
        Some(libc::EBUSY) => FsError::Acces,
        _ => errno(e),
    }
}

/// Carries an NFS status through an `io::Result` closure.
pub(super) fn status_error(s: FsError) -> io::Error {
    let errno = match s {
        FsError::NameTooLong => libc::ENAMETOOLONG,
        _ => libc::EINVAL,
    };
    io::Error::from_raw_os_error(errno)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(Name::parse(b"").err(), Some(FsError::Acces));
        assert_eq!(Name::parse(b"a/b").err(), Some(FsError::Acces));
        assert_eq!(Name::parse(b"a\0b").err(), Some(FsError::Acces));
        assert_eq!(Name::parse(&[b'x'; 256]).err(), Some(FsError::NameTooLong));
        let n = Name::parse(&[b'x'; 255]).unwrap();
        assert_eq!(n.c().to_bytes().len(), 255);
        assert!(Name::parse(b"..").unwrap().is_dotdot());
        assert!(Name::parse(b".").unwrap().is_dot());
        assert!(!Name::parse(b"...").unwrap().is_dot_or_dotdot());
    }

    #[test]
    fn exclusive_verifier_times_clear_the_high_bit() {
        let (m, a) = exclusive_times([0xff, 0, 0, 1, 0x12, 0x34, 0x56, 0x78]);
        assert_eq!(m, 0x7f00_0001);
        assert_eq!(a, 0x1234_5678);
    }
}
