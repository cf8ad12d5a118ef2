//! User extended attributes of a Ceph file system (see `sluice_vfs::xattr`): the
//! `ceph_ll_*xattr` calls on the resolved inode with the caller's credentials, stored as
//! `user.NAME` like the kernel client and ceph-fuse store them, so what one sets the others
//! read. CephFS always takes user attributes. The mode bits are checked here first, as for
//! READ and WRITE (read to read or list, write to change), so the answer does not depend on
//! the client's `client_permissions` setting; the MDS checks again. The calls are counted with
//! GETATTR's and SETATTR's in the backend statistics (an xattr lives in the inode's metadata,
//! fetched and changed with the same capabilities).

use super::data::may;
use super::handles::err;
use super::CephFs;
use crate::mount::CallKind;
use sluice_vfs::xattr::{
    user_name, user_names, XattrError, XattrSet, XATTR_LIST_BYTES_MAX, XATTR_VALUE_BYTES_MAX,
};
use sluice_vfs::{Caller, FileHandle, FsError, Wcc, WccAttr};
use std::ffi::CString;

/// `setxattr(2)`'s flags, which libcephfs takes as they are.
const XATTR_CREATE: i32 = 1;
const XATTR_REPLACE: i32 = 2;

fn c_name(name: &[u8]) -> Result<CString, XattrError> {
    CString::new(user_name(name)?).map_err(|_| FsError::Inval.into())
}

/// A negative errno of an xattr call, as the xattr error it is.
fn xerr(r: i32) -> XattrError {
    match -r {
        libc::ENODATA | libc::E2BIG | libc::ERANGE => XattrError::from_errno(-r),
        _ => XattrError::Fs(err(r)),
    }
}

impl CephFs {
    pub(super) fn xattr_get(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        name: &[u8],
        size_max: usize,
    ) -> Result<Vec<u8>, XattrError> {
        let name = c_name(name)?;
        let i = self.resolve(fh)?;
        if !may(&i.st, caller, 0o4) {
            return Err(FsError::Acces.into());
        }
        let perm = self.perm(caller);
        let m = &self.mount;
        let mut buf = vec![0u8; size_max.min(XATTR_VALUE_BYTES_MAX)];
        // SAFETY: a live inode, a NUL-terminated name, `buf` valid for its length.
        let r = m.call(CallKind::Getattr, || unsafe {
            (m.lib.ceph_ll_getxattr)(
                m.cmount,
                i.ptr,
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                perm.ptr,
            )
        });
        let n = usize::try_from(r).map_err(|_| xerr(r))?;
        if n > buf.len() {
            // Asked with no room: the call answered the size, which does not fit.
            return Err(XattrError::TooBig);
        }
        buf.truncate(n);
        Ok(buf)
    }

    pub(super) fn xattr_set(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> Result<Wcc, XattrError> {
        let name = c_name(name)?;
        let i = self.resolve(fh)?;
        if caller.read_only {
            return Err(FsError::RoFs.into());
        }
        if value.len() > XATTR_VALUE_BYTES_MAX {
            return Err(XattrError::TooBig);
        }
        if !may(&i.st, caller, 0o2) {
            return Err(FsError::Acces.into());
        }
        let flags = match how {
            XattrSet::Either => 0,
            XattrSet::Create => XATTR_CREATE,
            XattrSet::Replace => XATTR_REPLACE,
        };
        let pre = WccAttr::of(&self.attr(&i.st));
        let perm = self.perm(caller);
        let m = &self.mount;
        // SAFETY: a live inode, a NUL-terminated name, `value` valid for its length.
        let r = m.call(CallKind::Setattr, || unsafe {
            (m.lib.ceph_ll_setxattr)(
                m.cmount,
                i.ptr,
                name.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                flags,
                perm.ptr,
            )
        });
        if r < 0 {
            return Err(xerr(r));
        }
        Ok(self.wcc_after(pre, &i))
    }

    pub(super) fn xattr_list(
        &self,
        caller: &Caller,
        fh: &FileHandle,
    ) -> Result<Vec<Vec<u8>>, XattrError> {
        let i = self.resolve(fh)?;
        if !may(&i.st, caller, 0o4) {
            return Err(FsError::Acces.into());
        }
        let perm = self.perm(caller);
        let m = &self.mount;
        let mut buf = vec![0u8; XATTR_LIST_BYTES_MAX];
        let mut len: libc::size_t = 0;
        // SAFETY: a live inode, `buf` valid for its length, out-pointer to a local.
        let r = m.call(CallKind::Getattr, || unsafe {
            (m.lib.ceph_ll_listxattr)(
                m.cmount,
                i.ptr,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut len,
                perm.ptr,
            )
        });
        if r < 0 {
            return Err(xerr(r));
        }
        let mut names = user_names(&buf[..len.min(buf.len())]);
        names.sort_unstable();
        Ok(names)
    }

    pub(super) fn xattr_remove(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        name: &[u8],
    ) -> Result<Wcc, XattrError> {
        let name = c_name(name)?;
        let i = self.resolve(fh)?;
        if caller.read_only {
            return Err(FsError::RoFs.into());
        }
        if !may(&i.st, caller, 0o2) {
            return Err(FsError::Acces.into());
        }
        let pre = WccAttr::of(&self.attr(&i.st));
        let perm = self.perm(caller);
        let m = &self.mount;
        // SAFETY: a live inode, a NUL-terminated name.
        let r = m.call(CallKind::Setattr, || unsafe {
            (m.lib.ceph_ll_removexattr)(m.cmount, i.ptr, name.as_ptr(), perm.ptr)
        });
        if r < 0 {
            return Err(xerr(r));
        }
        Ok(self.wcc_after(pre, &i))
    }
}
