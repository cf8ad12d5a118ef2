//! The protocol-free vocabulary of the file-system layer: handles, attributes, before/after
//! pairs, an errno-like error, and the arguments and results of every
//! [`FileSystem`](crate::FileSystem) operation (the [`Caller`], [`CreateHow`], [`ReadOk`],
//! [`DirEntry`], ...). Every backend (`localfs`, `memfs`, a backend in another crate) and the
//! cache modes behind READ and WRITE (`iomode`) take these from here, so none of them imports
//! another backend.
//!
//! Each type carries what *every* NFS version needs and nothing shaped by one wire format:
//!
//! | here                 | NFSv3 (RFC 1813)           | NFSv4.1 (RFC 8881)                   |
//! |----------------------|----------------------------|--------------------------------------|
//! | [`FileHandle`]       | `nfs_fh3` (≤ 64 bytes)     | `nfs_fh4` (≤ 128; we issue ≤ 64)     |
//! | [`Attr`]             | `fattr3`                   | the `fattr4` attributes we support   |
//! | [`Attr::change`]     | —                          | `change` (§5.8.1.4)                  |
//! | [`WccAttr`]          | `wcc_attr`                 | `change_info4.before`                |
//! | [`Wcc`]              | `wcc_data`                 | [`ChangeInfo`] → `change_info4`      |
//! | [`SetAttr`]          | `sattr3`                   | the settable `fattr4` attributes     |
//! | [`FsError`]          | `nfsstat3`                 | `nfsstat4`                           |
//!
//! The v3 handlers map these to wire types in exactly one place; a v4 layer maps the same
//! values to its own.
//!
//! # The change attribute
//! NFSv4 clients decide whether their cache is valid from `change`, which must differ after
//! every modification. Linux keeps such a counter (`i_version`, STATX_CHANGE_COOKIE inside the
//! kernel), but `statx(2)` does not return it to user space (the mask bit is kernel-internal as
//! of Linux 6.x), so [`Attr::change`] is the ctime in nanoseconds: every modification updates
//! ctime, and the file systems we serve (ext4, xfs, btrfs, tmpfs) keep nanosecond ctimes. Two
//! changes within one timer tick (coarse ctime granularity, usually 1-4 ms) may share a value;
//! that is the same weakness knfsd has on file systems without i_version.
//!
//! # Atomic change_info
//! knfsd claims `change_info4.atomic` only when it held the directory's lock across the pre- and
//! post-op attributes. A user-space server cannot hold that lock, so [`Wcc::atomic`] is false for
//! `LocalFs` (another process may change the directory between the two `statx` calls); an
//! in-memory backend that does the whole operation under its own lock may claim it.

use crate::creds::Cred;
use crate::exports::{squash, ExportOptions};
use bytes::Bytes;

/// Longest handle this layer issues or accepts, bytes. RFC 1813's NFS3_FHSIZE; NFSv4 allows 128
/// (NFS4_FHSIZE), but a handle that fits v3 serves both, so we never issue more.
pub const FILE_HANDLE_BYTES_MAX: usize = 64;

/// A file handle: opaque bytes, at most [`FILE_HANDLE_BYTES_MAX`] (parse, don't validate: no
/// longer value can exist).
/// The default is the empty handle, which no backend accepts ([`FsError::BadHandle`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct FileHandle(Bytes);

impl FileHandle {
    /// The handle with these bytes; [`FsError::BadHandle`] when longer than the limit.
    pub fn new(bytes: Bytes) -> Result<FileHandle, FsError> {
        if bytes.len() > FILE_HANDLE_BYTES_MAX {
            return Err(FsError::BadHandle);
        }
        Ok(FileHandle(bytes))
    }

    /// A copy of `bytes` as a handle; [`FsError::BadHandle`] when longer than the limit.
    pub fn from_slice(bytes: &[u8]) -> Result<FileHandle, FsError> {
        FileHandle::new(Bytes::copy_from_slice(bytes))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The bytes, shared (no copy).
    pub fn to_bytes(&self) -> Bytes {
        self.0.clone()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The kind of a file-system object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    Regular,
    Directory,
    BlockDevice,
    CharDevice,
    Symlink,
    Socket,
    Fifo,
}

/// A point in time: seconds since the epoch (negative before 1970) and nanoseconds. Wire formats
/// narrower than this (v3's unsigned 32-bit seconds) clamp when they encode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time {
    pub seconds: i64,
    /// Always below 1_000_000_000.
    pub nseconds: u32,
}

impl Time {
    /// The time as nanoseconds since the epoch, saturating (for the change attribute).
    pub fn as_nanos(self) -> u64 {
        let ns = i128::from(self.seconds) * 1_000_000_000 + i128::from(self.nseconds);
        ns.clamp(0, i128::from(u64::MAX)) as u64
    }
}

/// Major and minor number of a device node (0/0 for every other object).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DeviceId {
    pub major: u32,
    pub minor: u32,
}

/// How a file system makes [`Attr::change`]: what NFSv4.2's `change_attr_type` tells clients
/// (RFC 7862 §12.2.3), so that they know whether a larger value is a later one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// The ctime in nanoseconds (`NFS4_CHANGE_TYPE_IS_TIME_METADATA`): later changes have
    /// larger values unless the clock is set back.
    Ctime,
    /// A counter bumped by every change (`NFS4_CHANGE_TYPE_IS_VERSION_COUNTER_NOPNFS`: no
    /// pNFS here).
    Counter,
}

/// How long a backend's metadata calls (GETATTR, LOOKUP, ACCESS, READLINK) take, in kinds,
/// for a server deciding whether to make them on its own task or hand them to a blocking pool
/// (the hand-off costs two thread wake-ups, more than such a call itself when it hits a cache).
/// Ordered fastest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MetadataSpeed {
    /// Memory only: never waits (the in-memory backend).
    Memory,
    /// A few system calls answered from the kernel's inode and dentry caches: microseconds,
    /// waiting on a disk only when the object's inode is not in memory (the local-directory
    /// backend). Changes (create, remove, rename, set attributes) may wait on a journal.
    KernelCache,
    /// May wait on another machine or an unknown amount of work (a network file system, any
    /// backend that does not say otherwise).
    Remote,
}

/// The attributes of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Attr {
    pub ftype: FileType,
    /// Permission bits and set-id/sticky bits (`& 0o7777`), without the type.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// Bytes of storage used.
    pub used: u64,
    pub rdev: DeviceId,
    /// The file system id (the export's id for `LocalFs`).
    pub fsid: u64,
    /// The object's number within its file system (the inode number).
    pub fileid: u64,
    pub atime: Time,
    pub mtime: Time,
    pub ctime: Time,
    /// Differs after every change of data or metadata; see the module essay for its source.
    pub change: u64,
}

/// The attributes taken before an operation, enough to tell whether anything else changed the
/// object meanwhile (v3 `wcc_attr`, and the `before` of v4 `change_info4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WccAttr {
    pub size: u64,
    pub mtime: Time,
    pub ctime: Time,
    pub change: u64,
}

impl WccAttr {
    /// The pre-op part of `attr`.
    pub fn of(attr: &Attr) -> WccAttr {
        WccAttr {
            size: attr.size,
            mtime: attr.mtime,
            ctime: attr.ctime,
            change: attr.change,
        }
    }
}

/// Attributes before and after an operation on one object (a modified directory, a written
/// file). Either side may be missing when it could not be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wcc {
    pub before: Option<WccAttr>,
    pub after: Option<Attr>,
    /// Whether nothing else could have changed the object between `before` and `after` (see the
    /// module essay: false for `LocalFs`).
    pub atomic: bool,
}

impl Wcc {
    /// A pair taken without a guarantee of atomicity.
    pub fn new(before: Option<WccAttr>, after: Option<Attr>) -> Wcc {
        Wcc {
            before,
            after,
            atomic: false,
        }
    }

    /// Only the after side (the before side could not be taken).
    pub fn after(after: Option<Attr>) -> Wcc {
        Wcc::new(None, after)
    }

    /// The v4 `change_info4` of a directory operation, when both sides were taken.
    pub fn change_info(&self) -> Option<ChangeInfo> {
        Some(ChangeInfo {
            before: self.before?.change,
            after: self.after?.change,
            atomic: self.atomic,
        })
    }
}

/// `change_info4` (RFC 8881 §3.3.6): the directory's change attribute before and after, and
/// whether the two were taken atomically with the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeInfo {
    pub before: u64,
    pub after: u64,
    pub atomic: bool,
}

/// How SETATTR (or a create) sets a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetTime {
    #[default]
    DontChange,
    ServerTime,
    ClientTime(Time),
}

/// The attributes a client may set; `None` leaves one unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: SetTime,
    pub mtime: SetTime,
}

/// A byte-range lock's type, for a backend that holds locks too ([`FileSystem::lock`]).
///
/// [`FileSystem::lock`]: crate::FileSystem::lock
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockType {
    Read,
    Write,
}

/// A lock that conflicts with one asked of a backend, as the backend reports it: its type and
/// range (`len` 0: to the end of the file, as `fcntl`'s). Its owner is the backend's business
/// (another Ceph client, say) and is not reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LockConflict {
    pub kind: LockType,
    pub offset: u64,
    pub len: u64,
}

/// Why a backend did not take a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockError {
    /// Someone else holds a conflicting lock (NFS4ERR_DENIED).
    Conflict(LockConflict),
    /// Any other failure, mapped as every backend failure is.
    Fs(FsError),
}

impl From<FsError> for LockError {
    fn from(e: FsError) -> Self {
        LockError::Fs(e)
    }
}

/// Why an operation failed: an errno-like vocabulary, mapped once to each protocol's status
/// (`nfsstat3` in the v3 handlers; `nfsstat4` will map in the v4 layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FsError {
    /// EPERM: not the owner, or not allowed even for the owner.
    Perm,
    NoEnt,
    Io,
    Nxio,
    Acces,
    Exist,
    Xdev,
    NoDev,
    NotDir,
    IsDir,
    Inval,
    FBig,
    NoSpc,
    RoFs,
    MLink,
    NameTooLong,
    NotEmpty,
    DQuot,
    /// The handle was valid once but its object is gone (or moved out of the export).
    Stale,
    /// The handle is not one this server issued (malformed, or its MAC does not verify).
    BadHandle,
    /// A SETATTR guard (the ctime the client expected) did not match.
    NotSync,
    /// A directory cookie (or its verifier) is no longer valid.
    BadCookie,
    NotSupp,
    TooSmall,
    /// Our own failure (a credential switch, an oversized kernel handle).
    ServerFault,
    /// An object type the operation cannot create.
    BadType,
    /// Temporarily unable (EAGAIN, a resource shortage): retry later (v3 JUKEBOX, v4 DELAY).
    Delay,
    /// Too many symlinks (ELOOP). NFSv3 has no such status (knfsd answers INVAL); v4 has SYMLINK.
    Loop,
}

impl FsError {
    /// The error for an errno value; anything without a meaning here is [`FsError::Io`].
    pub fn from_errno(errno: i32) -> FsError {
        match errno {
            libc::EPERM => FsError::Perm,
            libc::ENOENT => FsError::NoEnt,
            libc::ENXIO => FsError::Nxio,
            libc::EACCES => FsError::Acces,
            libc::EEXIST => FsError::Exist,
            libc::EXDEV => FsError::Xdev,
            libc::ENODEV => FsError::NoDev,
            libc::ENOTDIR => FsError::NotDir,
            libc::EISDIR => FsError::IsDir,
            libc::EINVAL => FsError::Inval,
            libc::EFBIG => FsError::FBig,
            libc::ENOSPC => FsError::NoSpc,
            libc::EROFS => FsError::RoFs,
            libc::EMLINK => FsError::MLink,
            libc::ENAMETOOLONG => FsError::NameTooLong,
            libc::ENOTEMPTY => FsError::NotEmpty,
            libc::EDQUOT => FsError::DQuot,
            libc::ESTALE => FsError::Stale,
            libc::EOPNOTSUPP => FsError::NotSupp,
            // Ask the client to retry later.
            libc::EAGAIN | libc::EBUSY => FsError::Delay,
            libc::ELOOP => FsError::Loop,
            _ => FsError::Io,
        }
    }

    /// The error of an I/O failure (EIO when it carries no errno).
    pub fn from_io(e: &std::io::Error) -> FsError {
        FsError::from_errno(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

impl std::fmt::Display for FsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

impl std::error::Error for FsError {}

/// A result whose failure carries what the failure reply needs besides the error (attributes,
/// before/after pairs), in this layer's types.
pub type Res<T, F> = Result<T, (FsError, F)>;

// --- The arguments and results of the trait's operations ---------------------------------------

/// Longest file name (bytes), as Linux `NAME_MAX`.
pub const NAME_MAX: usize = 255;

/// Longest symlink target (bytes): Linux `PATH_MAX` minus the terminating NUL.
pub const SYMLINK_TARGET_MAX: usize = 4095;

/// A symlink target checked the one way every backend checks it: over
/// [`SYMLINK_TARGET_MAX`] bytes is [`FsError::NameTooLong`], a NUL inside is [`FsError::Inval`]
/// (no system call can take it). Otherwise the target as a C string, stored as given: it is
/// the client's to interpret.
pub fn symlink_target(target: &[u8]) -> Result<std::ffi::CString, FsError> {
    if target.len() > SYMLINK_TARGET_MAX {
        return Err(FsError::NameTooLong);
    }
    std::ffi::CString::new(target).map_err(|_| FsError::Inval)
}

/// Default for READ and WRITE sizes offered in FSINFO: 1 MiB, the Linux client's maximum.
pub const IO_BYTES_MAX_DEFAULT: u32 = 1 << 20;
/// Default preferred READDIR size in FSINFO: 64 KiB. The Linux client uses it as the request size
/// for READDIR(PLUS); larger pages mean fewer round trips for big directories.
pub const READDIR_BYTES_PREF_DEFAULT: u32 = 64 << 10;

/// The permission bits ACCESS asks about and grants. NFSv3's ACCESS3 (RFC 1813 §3.3.4) and
/// NFSv4's ACCESS4 (RFC 8881 §18.1) use these same values, so both map them unchanged.
pub mod access {
    pub const READ: u32 = 0x0001;
    pub const LOOKUP: u32 = 0x0002;
    pub const MODIFY: u32 = 0x0004;
    pub const EXTEND: u32 = 0x0008;
    pub const DELETE: u32 = 0x0010;
    pub const EXECUTE: u32 = 0x0020;
}

/// What the file system supports, as [`FsInfo::properties`] bits. The values are those of
/// FSINFO3 (RFC 1813 §3.3.19), so v3 sends them unchanged; v4 answers the same facts as separate
/// attributes (`link_support`, `symlink_support`, `homogeneous`, `cansettime`).
pub mod fsprops {
    pub const LINK: u32 = 0x0001;
    pub const SYMLINK: u32 = 0x0002;
    pub const HOMOGENEOUS: u32 = 0x0008;
    pub const CANSETTIME: u32 = 0x0010;
}

/// Who is asking, after the export's squashing, and whether the export is read-only for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub cred: Cred,
    pub read_only: bool,
}

impl Caller {
    /// The caller as the export's options for its client make it: squashed credentials and the
    /// client's `ro`/`rw`.
    pub fn new(cred: &Cred, opts: &ExportOptions) -> Caller {
        Caller {
            cred: squash(cred, opts),
            read_only: opts.read_only,
        }
    }

    /// A caller with these exact credentials on a writable export.
    pub fn with_cred(cred: Cred) -> Caller {
        Caller {
            cred,
            read_only: false,
        }
    }
}

/// `stable_how` (RFC 1813 §3.3.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StableHow {
    Unstable = 0,
    DataSync = 1,
    FileSync = 2,
}

/// `createhow3` (RFC 1813 §3.3.8), and NFSv4.1's EXCLUSIVE4_1 (RFC 8881 §18.16.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateHow {
    Unchecked(SetAttr),
    Guarded(SetAttr),
    Exclusive([u8; 8]),
    /// EXCLUSIVE with attributes set in the same step as the creation: the mode at the
    /// `mknod`, the rest before the file is handed back; a retransmission that finds its
    /// own file sets nothing again. The times are the verifier's, so `atime`/`mtime` and
    /// `size` must not be set (the v4 layer refuses them: `suppattr_exclcreat`).
    Exclusive41([u8; 8], SetAttr),
}

impl CreateHow {
    /// The verifier of an exclusive create.
    pub fn verifier(&self) -> Option<[u8; 8]> {
        match self {
            CreateHow::Exclusive(v) | CreateHow::Exclusive41(v, _) => Some(*v),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupOk {
    pub fh: FileHandle,
    pub attr: Attr,
    pub dir_attr: Option<Attr>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOk {
    /// Bytes placed in the caller's buffers, in order.
    pub count: usize,
    pub eof: bool,
    pub attr: Attr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOk {
    pub count: usize,
    /// How stable the data is now (as asked: the backend never does less, nor more).
    pub committed: StableHow,
    pub wcc: Wcc,
}

/// What SEEK looks for: `lseek`'s `SEEK_DATA` or `SEEK_HOLE` (RFC 7862 §15.11, `data_content4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekWhat {
    Data,
    Hole,
}

/// Where SEEK landed. `eof`: the offset is the end of the file (SEEK_HOLE found only the
/// implicit hole at the end, or SEEK_DATA found no data after the offset and answers the size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeekOk {
    pub offset: u64,
    pub eof: bool,
}

/// A server-side copy: how many bytes were copied (maybe fewer than asked: at most
/// [`COPY_BYTES_MAX`], and never past the source's end), and the destination's attributes.
/// The data is as stable as an UNSTABLE WRITE's: in the page cache until a COMMIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyOk {
    pub count: u64,
    pub wcc: Wcc,
}

/// The most bytes one server-side copy moves, 32 MiB. A copy runs on a blocking-pool thread
/// and holds it until done: at page-cache speed (about 1-4 GB/s here) 32 MiB takes 10-30 ms,
/// short enough that a COPY never starves READs and WRITEs of threads, and long enough that a
/// large copy costs one round trip per 32 MiB. A shorter copy is allowed by RFC 7862 §15.2.3
/// (`wr_count` < `ca_count`); the Linux client, like `copy_file_range(2)` callers, asks again
/// for the rest.
pub const COPY_BYTES_MAX: u64 = 32 << 20;

/// CREATE, MKDIR, SYMLINK, MKNOD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateOk {
    pub fh: FileHandle,
    pub attr: Attr,
    pub dir_wcc: Wcc,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RenameWcc {
    pub from_dir: Wcc,
    pub to_dir: Wcc,
}

/// LINK's reply body (the same on success and failure).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkRes {
    pub attr: Option<Attr>,
    pub dir_wcc: Wcc,
}

/// One directory entry offered to the READDIR(PLUS) callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry<'a> {
    pub fileid: u64,
    pub name: &'a [u8],
    /// Resume after this entry by passing it as the next call's cookie.
    pub cookie: u64,
    /// READDIRPLUS only, and only when the entry can be looked up by the caller.
    pub attr: Option<Attr>,
    /// READDIRPLUS only, as `attr`.
    pub fh: Option<FileHandle>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReaddirOk {
    pub dir_attr: Option<Attr>,
    pub cookieverf: [u8; 8],
    /// True when the callback took every entry up to the end of the directory.
    pub eof: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsStat {
    pub tbytes: u64,
    pub fbytes: u64,
    pub abytes: u64,
    pub tfiles: u64,
    pub ffiles: u64,
    pub afiles: u64,
    pub invarsec: u32,
    pub attr: Option<Attr>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsInfo {
    pub rtmax: u32,
    pub rtpref: u32,
    pub rtmult: u32,
    pub wtmax: u32,
    pub wtpref: u32,
    pub wtmult: u32,
    pub dtpref: u32,
    pub maxfilesize: u64,
    pub time_delta: Time,
    pub properties: u32,
    pub attr: Option<Attr>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathConf {
    pub linkmax: u32,
    pub name_max: u32,
    pub no_trunc: bool,
    pub chown_restricted: bool,
    pub case_insensitive: bool,
    pub case_preserving: bool,
    pub attr: Option<Attr>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_longer_than_the_limit_do_not_exist() {
        assert!(FileHandle::new(Bytes::from(vec![0; FILE_HANDLE_BYTES_MAX])).is_ok());
        assert_eq!(
            FileHandle::new(Bytes::from(vec![0; FILE_HANDLE_BYTES_MAX + 1])),
            Err(FsError::BadHandle)
        );
    }

    #[test]
    fn change_info_needs_both_sides() {
        let t = Time::default();
        let attr = Attr {
            ftype: FileType::Directory,
            mode: 0o755,
            nlink: 2,
            uid: 0,
            gid: 0,
            size: 0,
            used: 0,
            rdev: DeviceId::default(),
            fsid: 1,
            fileid: 2,
            atime: t,
            mtime: t,
            ctime: t,
            change: 9,
        };
        let mut before = WccAttr::of(&attr);
        before.change = 7;
        assert_eq!(Wcc::after(Some(attr)).change_info(), None);
        assert_eq!(
            Wcc::new(Some(before), Some(attr)).change_info(),
            Some(ChangeInfo {
                before: 7,
                after: 9,
                atomic: false
            })
        );
    }

    #[test]
    fn times_before_1970_have_no_negative_nanos() {
        let t = Time {
            seconds: -1,
            nseconds: 0,
        };
        assert_eq!(t.as_nanos(), 0);
        assert_eq!(
            Time {
                seconds: 2,
                nseconds: 5
            }
            .as_nanos(),
            2_000_000_005
        );
    }

    #[test]
    fn unknown_errnos_are_io_errors() {
        assert_eq!(FsError::from_errno(libc::ENOSPC), FsError::NoSpc);
        assert_eq!(FsError::from_errno(libc::EBUSY), FsError::Delay);
        assert_eq!(FsError::from_errno(12345), FsError::Io);
    }
}
