//! The vocabulary of [`crate::Namespace`] and [`crate::OpenFile`]: handles, attributes,
//! statuses and errors that both NFS versions can say, in types that belong to neither (as
//! [`crate::proto`] is for the data path).
//!
//! ```text
//!   v3: fattr3 ──(v3/namespace.rs)──┐                  ┌──▶ cli: ls, stat, cp -p
//!                                   ├──▶ Attr ─────────┤
//!   v4: fattr4 ──(v4/namespace.rs)──┘   change: Some   └──▶ fuse: attribute cache,
//!                                        only from v4          page-cache invalidation
//! ```
//!
//! Linux's client does the same with `struct nfs_fattr`, which both versions' decoders fill.
//!
//! * Types are [`FileType`], numbered as `ftype3` and `nfs_ftype4` both number the common
//!   ones (RFC 1813 §2.5, RFC 8881 §3.3.13: REG 1 ... FIFO 7).
//! * Times are [`Time`]: signed 64-bit seconds, as `nfstime4` carries them (RFC 8881 §3.3.7),
//!   so a v4 time before 1970 or after 2106 is not clamped; a v3 time (`nfstime3`, unsigned
//!   32-bit) always fits.
//! * [`Attr::change`] is the NFSv4 change attribute (RFC 8881 §5.8.1.4), `None` over v3, which
//!   has none. [`Attr::data_version`] is what a reader's cache is kept under: the change
//!   attribute where there is one, else the ctime; [`Attr::changed_since`] is the test a cache
//!   of attributes makes: the change attribute where both sides have one, else size and mtime
//!   (what Linux's `nfs_update_inode` invalidates a v3 file's data on; a ctime that moved
//!   alone is a change of attributes, not of data).
//! * Owners are numbers: NFSv4's owner strings become numbers when they are numbers
//!   (`"1000"` or `"1000@domain"`), else [`NOBODY_ID`], as the Linux client shows an owner it
//!   cannot map.
//! * Handles are [`Handle`]: the bytes of an NFSv3 or NFSv4 file handle, tagged with their
//!   version so that one cannot be sent to the other's server.
//! * Errors are [`Error`]: the server's status as a [`Status`] when there is one, and the
//!   version's own words ("no such file or directory (NFS4ERR_NOENT)"). The two status lists
//!   give the same number to every status a caller tests for (NOENT 2, EXIST 17, NOTDIR 20,
//!   ISDIR 21, NOTEMPTY 66, NOTSUPP 10004; RFC 1813 §2.6, RFC 8881 §15.1), so [`Status`] is
//!   that number, with the v4-only ones beside.
//! * Setting attributes takes [`SetAttr`] (mode, owner, size, times), which the v3 side turns
//!   into `sattr3` and the v4 side into `fattr4` with `time_access_set` / `time_modify_set`.

use crate::proto::{FileError, Version};
use bytes::Bytes;
use std::fmt;

/// The owner shown for an NFSv4 owner string that is not a number (the usual "nobody").
pub const NOBODY_ID: u32 = 65534;

/// A file's type (see the module docs for the numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FileType(pub u32);

impl FileType {
    pub const REG: FileType = FileType(1);
    pub const DIR: FileType = FileType(2);
    pub const BLK: FileType = FileType(3);
    pub const CHR: FileType = FileType(4);
    pub const LNK: FileType = FileType(5);
    pub const SOCK: FileType = FileType(6);
    pub const FIFO: FileType = FileType(7);
}

/// A point in time: seconds since 1970 (negative before) and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time {
    pub seconds: i64,
    pub nseconds: u32,
}

impl Time {
    /// Nanoseconds since 1970, 0 for times before it (what the read cache compares).
    pub fn as_nanos_since_epoch(&self) -> u64 {
        (self.seconds.max(0) as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(self.nseconds))
    }
}

/// A device's numbers (character and block special files).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Device {
    pub major: u32,
    pub minor: u32,
}

/// A file's attributes, whichever version brought them (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Attr {
    pub ftype: FileType,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// Bytes of storage the file takes.
    pub used: u64,
    pub rdev: Device,
    pub fsid: u64,
    pub fileid: u64,
    pub atime: Time,
    pub mtime: Time,
    pub ctime: Time,
    /// The NFSv4 change attribute; `None` where the server has none (NFSv3).
    pub change: Option<u64>,
}

impl Attr {
    /// The version of the file's data this describes, for the read cache: its `change` is the
    /// change attribute where there is one, else the ctime in nanoseconds (both grow with
    /// every change, so an overtaken reply is told from a newer one).
    pub fn data_version(&self) -> Version {
        Version {
            size: self.size,
            mtime_ns: self.mtime.as_nanos_since_epoch(),
            change: self
                .change
                .unwrap_or_else(|| self.ctime.as_nanos_since_epoch()),
        }
    }

    /// True if `self`, fetched later, shows a change of the file since `old` was fetched: the
    /// change attribute where both have one (a write that kept size and mtime still shows),
    /// else size and mtime.
    pub fn changed_since(&self, old: &Attr) -> bool {
        match (old.change, self.change) {
            (Some(a), Some(b)) => a != b,
            _ => old.size != self.size || old.mtime != self.mtime,
        }
    }
}

/// How [`SetAttr`] sets a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetTime {
    #[default]
    DontChange,
    /// The server's clock.
    ServerTime,
    ClientTime(Time),
}

/// The attributes a SETATTR (or a CREATE) sets; `None` / [`SetTime::DontChange`] leave one be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: SetTime,
    pub mtime: SetTime,
}

/// A file handle of either version (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Handle {
    v4: bool,
    bytes: Bytes,
}

impl Handle {
    /// An NFSv3 handle's bytes.
    pub fn v3(bytes: Bytes) -> Handle {
        Handle { v4: false, bytes }
    }
    /// An NFSv4 handle's bytes.
    pub fn v4(bytes: Bytes) -> Handle {
        Handle { v4: true, bytes }
    }
    pub fn is_v4(&self) -> bool {
        self.v4
    }
    /// The handle's bytes as the server made them.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
    /// The bytes, for the version module that turns them back into its wire type.
    pub(crate) fn bytes(&self) -> &Bytes {
        &self.bytes
    }
}

/// An NFS status, numbered as both versions number the ones they share (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status(pub u32);

impl Status {
    pub const PERM: Status = Status(1);
    pub const NOENT: Status = Status(2);
    pub const IO: Status = Status(5);
    pub const NXIO: Status = Status(6);
    pub const ACCES: Status = Status(13);
    pub const EXIST: Status = Status(17);
    pub const XDEV: Status = Status(18);
    pub const NODEV: Status = Status(19);
    pub const NOTDIR: Status = Status(20);
    pub const ISDIR: Status = Status(21);
    pub const INVAL: Status = Status(22);
    pub const FBIG: Status = Status(27);
    pub const NOSPC: Status = Status(28);
    pub const ROFS: Status = Status(30);
    pub const MLINK: Status = Status(31);
    pub const NAMETOOLONG: Status = Status(63);
    pub const NOTEMPTY: Status = Status(66);
    pub const DQUOT: Status = Status(69);
    pub const STALE: Status = Status(70);
    pub const REMOTE: Status = Status(71);
    pub const BADHANDLE: Status = Status(10001);
    pub const NOT_SYNC: Status = Status(10002);
    pub const BAD_COOKIE: Status = Status(10003);
    pub const NOTSUPP: Status = Status(10004);
    pub const TOOSMALL: Status = Status(10005);
    pub const SERVERFAULT: Status = Status(10006);
    pub const BADTYPE: Status = Status(10007);
    /// NFS3ERR_JUKEBOX, NFS4ERR_DELAY: try again later.
    pub const JUKEBOX: Status = Status(10008);
    // NFSv4 only (RFC 8881 §15.1).
    pub const DENIED: Status = Status(10010);
    pub const LOCKED: Status = Status(10012);
    pub const GRACE: Status = Status(10013);
    pub const SHARE_DENIED: Status = Status(10015);
    pub const SYMLINK: Status = Status(10029);
    pub const OPENMODE: Status = Status(10038);
    pub const DEADLOCK: Status = Status(10045);
    pub const WRONG_TYPE: Status = Status(10083);
}

/// Why a namespace or open-file call failed (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    status: Option<Status>,
    timeout: bool,
    message: String,
}

impl Error {
    /// A failure in the version's words, with its status if the server (or the client) gave
    /// one, and whether it was a soft-mount timeout.
    pub(crate) fn new(status: Option<Status>, timeout: bool, message: String) -> Error {
        Error {
            status,
            timeout,
            message,
        }
    }

    /// The NFS status the server (or the client, for a condition it found itself) gave.
    pub fn status(&self) -> Option<Status> {
        self.status
    }

    /// True for a call that got no answer within a soft mount's timeout.
    pub fn is_timeout(&self) -> bool {
        self.timeout
    }

    /// A status the client found itself (a path component that is not a directory, say),
    /// worded as the v3 client words a status.
    pub fn local(status: Status) -> Error {
        let s = sluice_xdr::nfs3::Nfsstat3(status.0);
        Error::new(
            Some(status),
            false,
            format!("{} ({})", s.describe(), s.name()),
        )
    }

    /// Anything else, in words.
    pub fn other(message: impl Into<String>) -> Error {
        Error::new(None, false, message.into())
    }

    pub(crate) fn wrong_handle() -> Error {
        Error::other("a file handle of another NFS version")
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<FileError> for Error {
    fn from(e: FileError) -> Self {
        Error::other(e.0)
    }
}

/// A lock another owner holds that conflicts with the one asked for (NFSv4 LOCK4denied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockConflict {
    pub offset: u64,
    /// `u64::MAX`: to the end of the file and beyond.
    pub length: u64,
    pub write: bool,
    /// The holder's owner bytes, as the server reports them.
    pub owner: Bytes,
}

/// An owner string as a number (see the module docs).
pub fn owner_id(s: &str) -> u32 {
    let name = s.split('@').next().unwrap_or("");
    name.parse().unwrap_or(NOBODY_ID)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(size: u64, mtime: i64, change: Option<u64>) -> Attr {
        Attr {
            size,
            mtime: Time {
                seconds: mtime,
                nseconds: 0,
            },
            change,
            ..Attr::default()
        }
    }

    #[test]
    fn the_change_attribute_decides_where_both_sides_have_one() {
        // Same size and mtime, new change attribute: a change (what v3 cannot see).
        assert!(attr(10, 5, Some(2)).changed_since(&attr(10, 5, Some(1))));
        // Same change attribute: no change, whatever else moved (atime, say).
        assert!(!attr(10, 5, Some(1)).changed_since(&attr(10, 5, Some(1))));
    }

    #[test]
    fn without_a_change_attribute_size_and_mtime_decide() {
        assert!(!attr(10, 5, None).changed_since(&attr(10, 5, None)));
        let mut touched = attr(10, 5, None);
        touched.ctime.seconds = 9;
        assert!(
            !touched.changed_since(&attr(10, 5, None)),
            "ctime alone: attributes"
        );
        assert!(attr(11, 5, None).changed_since(&attr(10, 5, None)));
        assert!(attr(10, 6, None).changed_since(&attr(10, 5, None)));
        assert!(attr(10, 6, Some(1)).changed_since(&attr(10, 5, None)));
    }

    #[test]
    fn the_data_version_is_the_change_attribute_else_the_ctime() {
        let mut a = attr(10, 5, Some(42));
        a.ctime.seconds = 7;
        assert_eq!(a.data_version().change, 42);
        a.change = None;
        assert_eq!(a.data_version().change, 7_000_000_000);
        assert_eq!(a.data_version().mtime_ns, 5_000_000_000);
        a.mtime.seconds = -3;
        assert_eq!(a.data_version().mtime_ns, 0, "before 1970 reads as 0");
    }

    #[test]
    fn owner_strings_that_are_numbers_are_numbers() {
        assert_eq!(owner_id("1000"), 1000);
        assert_eq!(owner_id("1000@example.org"), 1000);
        assert_eq!(owner_id("alice@example.org"), NOBODY_ID);
        assert_eq!(owner_id(""), NOBODY_ID);
    }
}
