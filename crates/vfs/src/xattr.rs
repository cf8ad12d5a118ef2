//! Extended attributes in the user namespace: the vocabulary of the [`FileSystem`] xattr
//! methods (`xattr_support`, `getxattr`, `setxattr`, `listxattrs`, `removexattr`), which serve
//! NFSv4.2's GETXATTR, SETXATTR, LISTXATTRS and REMOVEXATTR (RFC 8276) and `sluice mount`'s
//! `user.*` attributes.
//!
//! # One namespace, names without its prefix
//! RFC 8276 §5 gives the protocol one namespace, the user's: the wire names carry no prefix,
//! and a server on Linux stores them as `user.NAME` (knfsd does; so does the Linux client,
//! which sends only `user.*` names and strips the prefix). The trait speaks the wire's form:
//! a name here is what follows `user.`; a backend adds the prefix where it stores one
//! ([`user_name`]) and lists only its `user.*` names, without the prefix ([`user_names`]).
//! `trusted.*`, `security.*` and `system.*` attributes are never reached.
//!
//! # Limits, and why
//! ```text
//!   name   1 ..= XATTR_NAME_BYTES_MAX (250)  XATTR_NAME_MAX 255 less "user."
//!   value  0 ..= XATTR_VALUE_BYTES_MAX (64 KiB)  Linux's XATTR_SIZE_MAX
//!   list   at most XATTR_LIST_BYTES_MAX (64 KiB) of "user.NAME\0" entries  XATTR_LIST_MAX
//! ```
//! The name and value limits are Linux's own, so nothing a Linux client can set is refused
//! here and nothing set here is unreadable by a local program. An empty name or one with a NUL
//! (which no C string can carry) is [`FsError::Inval`], a longer one [`FsError::NameTooLong`]
//! (as knfsd answers NFS4ERR_NAMETOOLONG for it). A backend may hold less: ext4 keeps values
//! within one block unless the file system has `ea_inode` (a larger value is ENOSPC there).
//!
//! # Errors
//! [`XattrError`] adds the two answers only attributes have to [`FsError`]: no attribute of
//! that name (`ENODATA`, NFS4ERR_NOXATTR) and a value or list too large for the backend or for
//! the room the caller gave (`E2BIG`, `ERANGE`, NFS4ERR_XATTR2BIG). A file system without user
//! attributes answers [`FsError::NotSupp`] (EOPNOTSUPP; NFS4ERR_NOTSUPP) and reports
//! `xattr_support` false.

use crate::types::FsError;

/// The namespace every name of the trait lives in, as stored by a Linux backend.
pub const USER_PREFIX: &[u8] = b"user.";
/// Longest name, bytes (without [`USER_PREFIX`]): Linux's XATTR_NAME_MAX (255) less the prefix.
pub const XATTR_NAME_BYTES_MAX: usize = 255 - USER_PREFIX.len();
/// Largest value, bytes: Linux's XATTR_SIZE_MAX.
pub const XATTR_VALUE_BYTES_MAX: usize = 64 * 1024;
/// Largest list of names one object answers, bytes of `user.NAME\0` entries: Linux's
/// XATTR_LIST_MAX, so a list `listxattr(2)` can return is one we can.
pub const XATTR_LIST_BYTES_MAX: usize = 64 * 1024;

/// How [`FileSystem::setxattr`](crate::FileSystem::setxattr) treats an existing attribute
/// (RFC 8276 `setxattr_option4`; `XATTR_CREATE` / `XATTR_REPLACE` of `setxattr(2)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrSet {
    /// Create or replace.
    Either,
    /// Only create: an existing attribute is [`FsError::Exist`].
    Create,
    /// Only replace: a missing one is [`XattrError::NoXattr`].
    Replace,
}

/// The failure of an xattr method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrError {
    /// No attribute of that name (ENODATA).
    NoXattr,
    /// A value or list larger than the backend holds or the caller has room for (E2BIG, ERANGE).
    TooBig,
    /// Anything else, as every other method fails.
    Fs(FsError),
}

impl From<FsError> for XattrError {
    fn from(e: FsError) -> Self {
        XattrError::Fs(e)
    }
}

impl XattrError {
    /// The error for an errno of the `*xattr(2)` family.
    pub fn from_errno(errno: i32) -> XattrError {
        match errno {
            libc::ENODATA => XattrError::NoXattr,
            libc::E2BIG | libc::ERANGE => XattrError::TooBig,
            e => XattrError::Fs(FsError::from_errno(e)),
        }
    }

    /// The error of an I/O failure (EIO when it carries no errno).
    pub fn from_io(e: &std::io::Error) -> XattrError {
        XattrError::from_errno(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

impl std::fmt::Display for XattrError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// A name the trait accepts (see the module notes): not empty, no NUL, at most
/// [`XATTR_NAME_BYTES_MAX`] bytes.
pub fn check_name(name: &[u8]) -> Result<(), XattrError> {
    if name.is_empty() || name.contains(&0) {
        return Err(FsError::Inval.into());
    }
    if name.len() > XATTR_NAME_BYTES_MAX {
        return Err(FsError::NameTooLong.into());
    }
    Ok(())
}

/// The stored name of `name`: `user.NAME`, checked.
pub fn user_name(name: &[u8]) -> Result<Vec<u8>, XattrError> {
    check_name(name)?;
    let mut v = Vec::with_capacity(USER_PREFIX.len() + name.len());
    v.extend_from_slice(USER_PREFIX);
    v.extend_from_slice(name);
    Ok(v)
}

/// The user names in a `listxattr(2)` buffer (`NAME\0` entries), without their prefix, in the
/// order given; names of other namespaces are left out.
pub fn user_names(list: &[u8]) -> Vec<Vec<u8>> {
    list.split(|&b| b == 0)
        .filter_map(|n| n.strip_prefix(USER_PREFIX))
        .filter(|n| !n.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_prefixed() {
        assert_eq!(user_name(b"a.b").unwrap(), b"user.a.b");
        assert_eq!(user_name(b""), Err(XattrError::Fs(FsError::Inval)));
        assert_eq!(user_name(b"a\0b"), Err(XattrError::Fs(FsError::Inval)));
        assert!(user_name(&[b'x'; XATTR_NAME_BYTES_MAX]).is_ok());
        assert_eq!(
            user_name(&[b'x'; XATTR_NAME_BYTES_MAX + 1]),
            Err(XattrError::Fs(FsError::NameTooLong))
        );
    }

    #[test]
    fn listing_keeps_user_names_only() {
        let list = b"security.selinux\0user.a\0trusted.x\0user.b.c\0user.\0";
        assert_eq!(user_names(list), vec![b"a".to_vec(), b"b.c".to_vec()]);
        assert!(user_names(b"").is_empty());
    }

    #[test]
    fn errnos_map_to_the_attribute_answers() {
        assert_eq!(XattrError::from_errno(libc::ENODATA), XattrError::NoXattr);
        assert_eq!(XattrError::from_errno(libc::E2BIG), XattrError::TooBig);
        assert_eq!(XattrError::from_errno(libc::ERANGE), XattrError::TooBig);
        assert_eq!(
            XattrError::from_errno(libc::EOPNOTSUPP),
            XattrError::Fs(FsError::NotSupp)
        );
        assert_eq!(
            XattrError::from_errno(libc::EEXIST),
            XattrError::Fs(FsError::Exist)
        );
    }
}
