//! NFS version 3 (RFC 1813) wire types.
//!
//! Naming follows the RFC in Rust case (`fattr3` is [`Fattr3`], `LOOKUP3res` is [`LookupRes`]).
//! Enums whose values come from the wire are newtypes with named constants, so an unknown value
//! survives decoding and the handler decides what it means.
//!
//! Results use [`NfsResult`]: `Ok(resok)` encodes status NFS3_OK then the resok body,
//! `Err(status, resfail)` encodes the error status then the resfail body.

use crate::{DecodeError, Pack, Reader, Result, Unpack, Writer};
use bytes::Bytes;

pub const PROGRAM: u32 = 100003;
pub const VERSION: u32 = 3;

/// RFC 1813 §2.4: NFS3_FHSIZE, the largest file handle.
pub const FHSIZE: usize = 64;
/// RFC 1813 §2.4: NFS3_COOKIEVERFSIZE, NFS3_CREATEVERFSIZE, NFS3_WRITEVERFSIZE.
pub const VERIFIER_SIZE: usize = 8;
/// Largest file name accepted *on the wire*. RFC 1813 leaves `filename3` unbounded; names up to
/// this size decode so that the handler can answer NFS3ERR_NAMETOOLONG (names over 255 bytes) as a
/// kernel server would, and larger ones are GARBAGE_ARGS.
pub const MAX_NAME_WIRE: usize = 4096;
/// Largest symlink target / path accepted on the wire (PATH_MAX).
pub const MAX_PATH_WIRE: usize = 4096;

/// Procedure numbers (RFC 1813 §3.3).
pub mod proc_ {
    pub const NULL: u32 = 0;
    pub const GETATTR: u32 = 1;
    pub const SETATTR: u32 = 2;
    pub const LOOKUP: u32 = 3;
    pub const ACCESS: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const READ: u32 = 6;
    pub const WRITE: u32 = 7;
    pub const CREATE: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const SYMLINK: u32 = 10;
    pub const MKNOD: u32 = 11;
    pub const REMOVE: u32 = 12;
    pub const RMDIR: u32 = 13;
    pub const RENAME: u32 = 14;
    pub const LINK: u32 = 15;
    pub const READDIR: u32 = 16;
    pub const READDIRPLUS: u32 = 17;
    pub const FSSTAT: u32 = 18;
    pub const FSINFO: u32 = 19;
    pub const PATHCONF: u32 = 20;
    pub const COMMIT: u32 = 21;
    /// Names indexed by procedure number.
    pub const NAMES: [&str; 22] = [
        "NULL",
        "GETATTR",
        "SETATTR",
        "LOOKUP",
        "ACCESS",
        "READLINK",
        "READ",
        "WRITE",
        "CREATE",
        "MKDIR",
        "SYMLINK",
        "MKNOD",
        "REMOVE",
        "RMDIR",
        "RENAME",
        "LINK",
        "READDIR",
        "READDIRPLUS",
        "FSSTAT",
        "FSINFO",
        "PATHCONF",
        "COMMIT",
    ];
}

/// `nfsstat3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Nfsstat3(pub u32);

impl Nfsstat3 {
    pub const OK: Self = Self(0);
    pub const PERM: Self = Self(1);
    pub const NOENT: Self = Self(2);
    pub const IO: Self = Self(5);
    pub const NXIO: Self = Self(6);
    pub const ACCES: Self = Self(13);
    pub const EXIST: Self = Self(17);
    pub const XDEV: Self = Self(18);
    pub const NODEV: Self = Self(19);
    pub const NOTDIR: Self = Self(20);
    pub const ISDIR: Self = Self(21);
    pub const INVAL: Self = Self(22);
    pub const FBIG: Self = Self(27);
    pub const NOSPC: Self = Self(28);
    pub const ROFS: Self = Self(30);
    pub const MLINK: Self = Self(31);
    pub const NAMETOOLONG: Self = Self(63);
    pub const NOTEMPTY: Self = Self(66);
    pub const DQUOT: Self = Self(69);
    pub const STALE: Self = Self(70);
    pub const REMOTE: Self = Self(71);
    pub const BADHANDLE: Self = Self(10001);
    pub const NOT_SYNC: Self = Self(10002);
    pub const BAD_COOKIE: Self = Self(10003);
    pub const NOTSUPP: Self = Self(10004);
    pub const TOOSMALL: Self = Self(10005);
    pub const SERVERFAULT: Self = Self(10006);
    pub const BADTYPE: Self = Self(10007);
    pub const JUKEBOX: Self = Self(10008);

    /// The RFC name, e.g. "NFS3ERR_ACCES".
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "NFS3_OK",
            1 => "NFS3ERR_PERM",
            2 => "NFS3ERR_NOENT",
            5 => "NFS3ERR_IO",
            6 => "NFS3ERR_NXIO",
            13 => "NFS3ERR_ACCES",
            17 => "NFS3ERR_EXIST",
            18 => "NFS3ERR_XDEV",
            19 => "NFS3ERR_NODEV",
            20 => "NFS3ERR_NOTDIR",
            21 => "NFS3ERR_ISDIR",
            22 => "NFS3ERR_INVAL",
            27 => "NFS3ERR_FBIG",
            28 => "NFS3ERR_NOSPC",
            30 => "NFS3ERR_ROFS",
            31 => "NFS3ERR_MLINK",
            63 => "NFS3ERR_NAMETOOLONG",
            66 => "NFS3ERR_NOTEMPTY",
            69 => "NFS3ERR_DQUOT",
            70 => "NFS3ERR_STALE",
            71 => "NFS3ERR_REMOTE",
            10001 => "NFS3ERR_BADHANDLE",
            10002 => "NFS3ERR_NOT_SYNC",
            10003 => "NFS3ERR_BAD_COOKIE",
            10004 => "NFS3ERR_NOTSUPP",
            10005 => "NFS3ERR_TOOSMALL",
            10006 => "NFS3ERR_SERVERFAULT",
            10007 => "NFS3ERR_BADTYPE",
            10008 => "NFS3ERR_JUKEBOX",
            _ => "NFS3ERR_UNKNOWN",
        }
    }

    /// A short description for users, e.g. "permission denied".
    pub fn describe(self) -> &'static str {
        match self.0 {
            0 => "ok",
            1 => "operation not permitted",
            2 => "no such file or directory",
            5 => "I/O error",
            6 => "no such device or address",
            13 => "permission denied",
            17 => "file exists",
            18 => "cross-device link",
            19 => "no such device",
            20 => "not a directory",
            21 => "is a directory",
            22 => "invalid argument",
            27 => "file too large",
            28 => "no space left on device",
            30 => "read-only file system",
            31 => "too many links",
            63 => "file name too long",
            66 => "directory not empty",
            69 => "disk quota exceeded",
            70 => "stale file handle",
            71 => "too many levels of remote in path",
            10001 => "illegal file handle",
            10002 => "update synchronization mismatch",
            10003 => "READDIR cookie is stale",
            10004 => "operation not supported",
            10005 => "buffer or request too small",
            10006 => "server fault",
            10007 => "type not supported by the server",
            10008 => "server busy, try again",
            _ => "unknown error",
        }
    }

    /// Maps a Linux errno from the backing filesystem to the status a kernel server would send.
    pub fn from_errno(errno: i32) -> Self {
        match errno {
            0 => Self::OK,
            1 => Self::PERM,          // EPERM
            2 => Self::NOENT,         // ENOENT
            6 => Self::NXIO,          // ENXIO
            13 => Self::ACCES,        // EACCES
            17 => Self::EXIST,        // EEXIST
            18 => Self::XDEV,         // EXDEV
            19 => Self::NODEV,        // ENODEV
            20 => Self::NOTDIR,       // ENOTDIR
            21 => Self::ISDIR,        // EISDIR
            22 => Self::INVAL,        // EINVAL
            27 => Self::FBIG,         // EFBIG
            28 => Self::NOSPC,        // ENOSPC
            30 => Self::ROFS,         // EROFS
            31 => Self::MLINK,        // EMLINK
            36 => Self::NAMETOOLONG,  // ENAMETOOLONG
            39 => Self::NOTEMPTY,     // ENOTEMPTY
            122 => Self::DQUOT,       // EDQUOT
            116 => Self::STALE,       // ESTALE
            95 => Self::NOTSUPP,      // EOPNOTSUPP
            11 | 16 => Self::JUKEBOX, // EAGAIN, EBUSY: ask the client to retry later
            40 => Self::INVAL,        // ELOOP: knfsd maps it like this for v3
            _ => Self::IO,
        }
    }
}

impl Pack for Nfsstat3 {
    fn pack(&self, w: &mut Writer) {
        w.put_u32(self.0)
    }
}
impl Unpack for Nfsstat3 {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self(r.get_u32()?))
    }
}

/// A result: `Ok(resok)` or `Err(status, resfail)`. `status` in `Err` is never NFS3_OK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NfsResult<T, F> {
    Ok(T),
    Err(Nfsstat3, F),
}

impl<T, F> NfsResult<T, F> {
    pub fn status(&self) -> Nfsstat3 {
        match self {
            NfsResult::Ok(_) => Nfsstat3::OK,
            NfsResult::Err(s, _) => *s,
        }
    }
}

impl<T: Pack, F: Pack> Pack for NfsResult<T, F> {
    fn pack(&self, w: &mut Writer) {
        match self {
            NfsResult::Ok(v) => {
                w.put_u32(0);
                v.pack(w);
            }
            NfsResult::Err(s, f) => {
                debug_assert_ne!(*s, Nfsstat3::OK);
                s.pack(w);
                f.pack(w);
            }
        }
    }
}
impl<T: Unpack, F: Unpack> Unpack for NfsResult<T, F> {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        let s = Nfsstat3::unpack(r)?;
        if s == Nfsstat3::OK {
            Ok(NfsResult::Ok(T::unpack(r)?))
        } else {
            Ok(NfsResult::Err(s, F::unpack(r)?))
        }
    }
}

/// `ftype3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ftype3(pub u32);
impl Ftype3 {
    pub const REG: Self = Self(1);
    pub const DIR: Self = Self(2);
    pub const BLK: Self = Self(3);
    pub const CHR: Self = Self(4);
    pub const LNK: Self = Self(5);
    pub const SOCK: Self = Self(6);
    pub const FIFO: Self = Self(7);
}
impl Pack for Ftype3 {
    fn pack(&self, w: &mut Writer) {
        w.put_u32(self.0)
    }
}
impl Unpack for Ftype3 {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self(r.get_u32()?))
    }
}

/// `specdata3`: major and minor device numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Specdata3 {
    pub major: u32,
    pub minor: u32,
}
impl Pack for Specdata3 {
    fn pack(&self, w: &mut Writer) {
        w.put_u32(self.major);
        w.put_u32(self.minor);
    }
}
impl Unpack for Specdata3 {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            major: r.get_u32()?,
            minor: r.get_u32()?,
        })
    }
}

/// `nfstime3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, PartialOrd, Ord, Hash)]
pub struct Nfstime3 {
    pub seconds: u32,
    pub nseconds: u32,
}
impl Pack for Nfstime3 {
    fn pack(&self, w: &mut Writer) {
        w.put_u32(self.seconds);
        w.put_u32(self.nseconds);
    }
}
impl Unpack for Nfstime3 {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            seconds: r.get_u32()?,
            nseconds: r.get_u32()?,
        })
    }
}

/// `fattr3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fattr3 {
    pub ftype: Ftype3,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub used: u64,
    pub rdev: Specdata3,
    pub fsid: u64,
    pub fileid: u64,
    pub atime: Nfstime3,
    pub mtime: Nfstime3,
    pub ctime: Nfstime3,
}
impl Default for Ftype3 {
    fn default() -> Self {
        Ftype3::REG
    }
}
impl Pack for Fattr3 {
    fn pack(&self, w: &mut Writer) {
        self.ftype.pack(w);
        w.put_u32(self.mode);
        w.put_u32(self.nlink);
        w.put_u32(self.uid);
        w.put_u32(self.gid);
        w.put_u64(self.size);
        w.put_u64(self.used);
        self.rdev.pack(w);
        w.put_u64(self.fsid);
        w.put_u64(self.fileid);
        self.atime.pack(w);
        self.mtime.pack(w);
        self.ctime.pack(w);
    }
}
impl Unpack for Fattr3 {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            ftype: Ftype3::unpack(r)?,
            mode: r.get_u32()?,
            nlink: r.get_u32()?,
            uid: r.get_u32()?,
            gid: r.get_u32()?,
            size: r.get_u64()?,
            used: r.get_u64()?,
            rdev: Specdata3::unpack(r)?,
            fsid: r.get_u64()?,
            fileid: r.get_u64()?,
            atime: Nfstime3::unpack(r)?,
            mtime: Nfstime3::unpack(r)?,
            ctime: Nfstime3::unpack(r)?,
        })
    }
}

/// `wcc_attr`: the attributes a client uses to check its cache before an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WccAttr {
    pub size: u64,
    pub mtime: Nfstime3,
    pub ctime: Nfstime3,
}
impl Pack for WccAttr {
    fn pack(&self, w: &mut Writer) {
        w.put_u64(self.size);
        self.mtime.pack(w);
        self.ctime.pack(w);
    }
}
impl Unpack for WccAttr {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            size: r.get_u64()?,
            mtime: Nfstime3::unpack(r)?,
            ctime: Nfstime3::unpack(r)?,
        })
    }
}
impl From<&Fattr3> for WccAttr {
    fn from(a: &Fattr3) -> Self {
        WccAttr {
            size: a.size,
            mtime: a.mtime,
            ctime: a.ctime,
        }
    }
}

/// `pre_op_attr`.
pub type PreOpAttr = Option<WccAttr>;
/// `post_op_attr`.
pub type PostOpAttr = Option<Fattr3>;

/// `wcc_data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WccData {
    pub before: PreOpAttr,
    pub after: PostOpAttr,
}
impl Pack for WccData {
    fn pack(&self, w: &mut Writer) {
        self.before.pack(w);
        self.after.pack(w);
    }
}
impl Unpack for WccData {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            before: PreOpAttr::unpack(r)?,
            after: PostOpAttr::unpack(r)?,
        })
    }
}

/// `nfs_fh3`: an opaque handle of at most 64 bytes. Decoding refuses longer ones.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct NfsFh3(pub Bytes);
impl Pack for NfsFh3 {
    fn pack(&self, w: &mut Writer) {
        debug_assert!(self.0.len() <= FHSIZE);
        w.put_opaque(&self.0);
    }
}
impl Unpack for NfsFh3 {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self(r.get_opaque("nfs_fh3", FHSIZE)?))
    }
}

/// `post_op_fh3`.
pub type PostOpFh3 = Option<NfsFh3>;

/// `time_how` + value: how SETATTR/CREATE set a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetTime {
    #[default]
    DontChange,
    ServerTime,
    ClientTime(Nfstime3),
}
impl Pack for SetTime {
    fn pack(&self, w: &mut Writer) {
        match self {
            SetTime::DontChange => w.put_u32(0),
            SetTime::ServerTime => w.put_u32(1),
            SetTime::ClientTime(t) => {
                w.put_u32(2);
                t.pack(w);
            }
        }
    }
}
impl Unpack for SetTime {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        match r.get_u32()? {
            0 => Ok(SetTime::DontChange),
            1 => Ok(SetTime::ServerTime),
            2 => Ok(SetTime::ClientTime(Nfstime3::unpack(r)?)),
            v => Err(DecodeError::BadDiscriminant {
                what: "time_how",
                value: v,
            }),
        }
    }
}

/// `sattr3`: attributes to set; `None` leaves a field unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sattr3 {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: SetTime,
    pub mtime: SetTime,
}
impl Pack for Sattr3 {
    fn pack(&self, w: &mut Writer) {
        self.mode.pack(w);
        self.uid.pack(w);
        self.gid.pack(w);
        self.size.pack(w);
        self.atime.pack(w);
        self.mtime.pack(w);
    }
}
impl Unpack for Sattr3 {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            mode: Option::unpack(r)?,
            uid: Option::unpack(r)?,
            gid: Option::unpack(r)?,
            size: Option::unpack(r)?,
            atime: SetTime::unpack(r)?,
            mtime: SetTime::unpack(r)?,
        })
    }
}

// --- The procedure arguments and results follow below (RFC 1813 §3.3.0 - §3.3.21). ---
