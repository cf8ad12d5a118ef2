//! User extended attributes of a local directory (see [`crate::xattr`]): `getxattr(2)` and its
//! family on the resolved object through `/proc/self/fd/N`, as the caller, so the kernel
//! checks read permission for reading and write permission for changing, and refuses `user.*`
//! attributes on symlinks and devices itself (EPERM). Listing needs read permission, checked
//! here (the kernel checks none; knfsd asks for read). Whether the file system takes user
//! attributes at all is probed once, on the export root, when the export opens
//! ([`crate::sys::user_xattrs_supported`]): tmpfs before Linux 6.6, for one, does not.

use super::base::{errno, LocalFs};
use super::perms::permitted;
use crate::attr;
use crate::sys;
use crate::types::{Caller, FileHandle, FsError, Wcc};
use crate::xattr::{
    user_name, user_names, XattrError, XattrSet, XATTR_LIST_BYTES_MAX, XATTR_VALUE_BYTES_MAX,
};
use std::ffi::CString;
use std::os::fd::AsFd;

/// `user.NAME` as a C string.
fn c_name(name: &[u8]) -> Result<CString, XattrError> {
    // `user_name` refused NULs.
    CString::new(user_name(name)?).map_err(|_| FsError::Inval.into())
}

fn fail(e: &std::io::Error) -> XattrError {
    XattrError::from_io(e)
}

impl LocalFs {
    pub(super) fn xattr_get(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        name: &[u8],
        size_max: usize,
    ) -> Result<Vec<u8>, XattrError> {
        let name = c_name(name)?;
        self.xattr_supported()?;
        let obj = self.resolve(fh)?;
        let _as = self.act_as(caller)?;
        let mut buf = vec![0u8; size_max.min(XATTR_VALUE_BYTES_MAX)];
        let n = sys::getxattr_fd(obj.fd.as_fd(), &name, &mut buf).map_err(|e| fail(&e))?;
        if buf.is_empty() && n > 0 {
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
        self.xattr_supported()?;
        let obj = self.resolve(fh)?;
        if caller.read_only {
            return Err(FsError::RoFs.into());
        }
        if value.len() > XATTR_VALUE_BYTES_MAX {
            return Err(XattrError::TooBig);
        }
        let flags = match how {
            XattrSet::Either => 0,
            XattrSet::Create => libc::XATTR_CREATE,
            XattrSet::Replace => libc::XATTR_REPLACE,
        };
        let pre = attr::wcc(&obj.st);
        {
            let _as = self.act_as(caller)?;
            sys::setxattr_fd(obj.fd.as_fd(), &name, value, flags).map_err(|e| fail(&e))?;
        }
        Ok(self.wcc_after(Some(pre), obj.fd.as_fd()))
    }

    pub(super) fn xattr_list(
        &self,
        caller: &Caller,
        fh: &FileHandle,
    ) -> Result<Vec<Vec<u8>>, XattrError> {
        self.xattr_supported()?;
        let obj = self.resolve(fh)?;
        let _as = self.act_as(caller)?;
        permitted(obj.fd.as_fd(), &obj.st, &caller.cred, libc::R_OK).map_err(|e| errno(&e))?;
        let mut buf = vec![0u8; XATTR_LIST_BYTES_MAX];
        let n = sys::listxattr_fd(obj.fd.as_fd(), &mut buf).map_err(|e| fail(&e))?;
        let mut names = user_names(&buf[..n]);
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
        self.xattr_supported()?;
        let obj = self.resolve(fh)?;
        if caller.read_only {
            return Err(FsError::RoFs.into());
        }
        let pre = attr::wcc(&obj.st);
        {
            let _as = self.act_as(caller)?;
            sys::removexattr_fd(obj.fd.as_fd(), &name).map_err(|e| fail(&e))?;
        }
        Ok(self.wcc_after(Some(pre), obj.fd.as_fd()))
    }

    fn xattr_supported(&self) -> Result<(), XattrError> {
        if self.xattr_support {
            Ok(())
        } else {
            Err(FsError::NotSupp.into())
        }
    }
}
