//! Between the file-system layer's neutral types and NFSv4.1's wire types: the one place each
//! is mapped (RFC 8881 §5, §15.1), as `nfs/map.rs` is for v3.
//!
//! # Attributes
//! GETATTR builds every attribute sluice supports from one neutral [`Attr`] plus what only the
//! server knows ([`AttrCtx`]: the handle, the fsid of the file system it is on, the lease), then
//! encodes the ones asked for with xdr's own codec. What is advertised in `supported_attrs` is
//! exactly [`SUPPORTED`]: every bit in it is encoded when asked (a test holds us to it), and
//! nothing is advertised that could not be. The write-only `time_access_set` and
//! `time_modify_set` are advertised (SETATTR takes them) but are NFS4ERR_INVAL in GETATTR
//! (RFC 8881 §18.7.3).
//!
//! # Per minor version
//! `supported_attrs` depends on the COMPOUND's minor version ([`supported_mask`]): 4.2 adds
//! [`SUPPORTED_42`] (RFC 7862 §12.2), which a 4.1 COMPOUND never sees, neither advertised nor
//! answered (a 4.1 GETATTR asking for them gets a mask without them, VERIFY gets
//! NFS4ERR_ATTRNOTSUPP). What the Linux client asks of a 4.2 server:
//! - `clone_blksize` (it checks CLONE ranges against it, and refuses misaligned ones itself):
//!   the file system's ([`crate::backend::FileSystem::clone_blksize`]). LocalFs's FICLONERANGE
//!   needs block alignment on file systems with reflinks (XFS, btrfs: their block size), and
//!   elsewhere clones nothing (0, none stated; CLONE is NOTSUPP). MemFs clones any range (0).
//! - `change_attr_type`: how `change` is made ([`ChangeKind`]): LocalFs's is the ctime in
//!   nanoseconds (TIME_METADATA), MemFs's and the pseudo tree's are counters
//!   (VERSION_COUNTER_NOPNFS: no pNFS here).
//! - `space_freed`: what removing the file would free: its `space_used` when this is its
//!   only link, 0 when other links keep the data.
//!
//! - `xattr_support` (RFC 8276 §8.2): whether the object's file system takes user extended
//!   attributes ([`crate::backend::FileSystem::xattr_support`]; false on the pseudo tree), so
//!   the Linux client sends GETXATTR and the rest there (`compound/xattr.rs`).
//!
//! `mode_umask` (RFC 8275) is not advertised: it would make OPEN and CREATE apply the umask.
//!
//! Owners travel as numeric strings ("1000") by default, as knfsd does with no idmapping: the
//! Linux client maps them back to ids without a domain. With a domain configured they travel as
//! `name@domain`; the mapping both ways, and NFS4ERR_BADOWNER for names it cannot map (never a
//! silent "nobody"), is [`super::idmap`]'s, reached through [`AttrCtx::idmap`] and
//! [`set_attr`]'s argument.
//!
//! Pseudo-tree directories get attributes too: read-only directories (mode 0555) owned by root
//! on [`PSEUDO_FSID`], see [`pseudo_attr`].

use super::idmap::IdMap;
use crate::backend::{
    Attr, ChangeKind, DeviceId, FileType, FsError, FsStat, SetAttr, SetTime, Time,
};
use sluice_nfs4state::pseudo::{NodeId, PSEUDO_FSID};
use sluice_xdr::nfs4::attrs::{
    num, AttrValues, NFS4_CHANGE_TYPE_IS_TIME_METADATA, NFS4_CHANGE_TYPE_IS_VERSION_COUNTER_NOPNFS,
};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{Bitmap4, Fattr4, Fsid4, Ftype4, NfsFh4, Nfstime4, Settime4, Specdata4};

/// `maxread` / `maxwrite` advertised: 1 MiB, what the Linux client uses at most and what
/// the data path's chunks are sized for.
pub const IO_BYTES_MAX: u64 = 1 << 20;
/// `maxname`: NAME_MAX of the local file systems sluice serves.
pub const NAME_BYTES_MAX: u32 = 255;
/// `maxfilesize`: the largest offset a local file can have (`off_t` is signed 64-bit).
pub const FILE_BYTES_MAX: u64 = i64::MAX as u64;

/// The attributes GETATTR answers (and SETATTR accepts, where settable) in every minor
/// version, in bit order.
pub const SUPPORTED: &[u32] = &[
    num::SUPPORTED_ATTRS,
    num::TYPE,
    num::FH_EXPIRE_TYPE,
    num::CHANGE,
    num::SIZE,
    num::LINK_SUPPORT,
    num::SYMLINK_SUPPORT,
    num::NAMED_ATTR,
    num::FSID,
    num::UNIQUE_HANDLES,
    num::LEASE_TIME,
    num::RDATTR_ERROR,
    num::CANSETTIME,
    num::CASE_INSENSITIVE,
    num::CASE_PRESERVING,
    num::CHOWN_RESTRICTED,
    num::FILEHANDLE,
    num::FILEID,
    num::FILES_AVAIL,
    num::FILES_FREE,
    num::FILES_TOTAL,
    num::HOMOGENEOUS,
    num::MAXFILESIZE,
    num::MAXNAME,
    num::MAXREAD,
    num::MAXWRITE,
    num::MODE,
    num::NO_TRUNC,
    num::NUMLINKS,
    num::OWNER,
    num::OWNER_GROUP,
    num::RAWDEV,
    num::SPACE_AVAIL,
    num::SPACE_FREE,
    num::SPACE_TOTAL,
    num::SPACE_USED,
    num::TIME_ACCESS,
    num::TIME_ACCESS_SET,
    num::TIME_DELTA,
    num::TIME_METADATA,
    num::TIME_MODIFY,
    num::TIME_MODIFY_SET,
    num::MOUNTED_ON_FILEID,
    num::SUPPATTR_EXCLCREAT,
];

/// The attributes of minor version 2 only (RFC 7862 §12.2), in bit order; all read-only.
pub const SUPPORTED_42: &[u32] = &[
    num::CLONE_BLKSIZE,
    num::SPACE_FREED,
    num::CHANGE_ATTR_TYPE,
    num::XATTR_SUPPORT,
];

/// `clone_blksize`: no alignment stated (see the module notes).
pub const CLONE_BLKSIZE: u32 = 0;

/// Attributes SETATTR changes.
pub const SETTABLE: &[u32] = &[
    num::SIZE,
    num::MODE,
    num::OWNER,
    num::OWNER_GROUP,
    num::TIME_ACCESS_SET,
    num::TIME_MODIFY_SET,
];

/// Attributes an EXCLUSIVE4_1 OPEN may set with the creation (`suppattr_exclcreat`,
/// RFC 8881 §5.8.1.14): the settable ones but the times, which hold the verifier (as knfsd
/// leaves them out), and the size, which must stay 0 for a retransmission to know its file.
/// Others in `createattrs` are NFS4ERR_INVAL (§18.16.3); the client sets them with a SETATTR.
pub const EXCLCREAT: &[u32] = &[num::MODE, num::OWNER, num::OWNER_GROUP];

/// Write-only attributes: in a GETATTR request they are NFS4ERR_INVAL.
pub const WRITE_ONLY: &[u32] = &[num::TIME_ACCESS_SET, num::TIME_MODIFY_SET];

/// Attributes whose values need the file system's statistics (FSSTAT), fetched only when asked.
pub const NEEDS_FSSTAT: &[u32] = &[
    num::FILES_AVAIL,
    num::FILES_FREE,
    num::FILES_TOTAL,
    num::SPACE_AVAIL,
    num::SPACE_FREE,
    num::SPACE_TOTAL,
];

/// `supported_attrs` in minor version `minor`.
pub fn supported_mask(minor: u32) -> Bitmap4 {
    let mut m = Bitmap4::from_bits(SUPPORTED);
    if minor >= 2 {
        for &b in SUPPORTED_42 {
            m.set(b);
        }
    }
    m
}

/// Whether attribute `bit` exists in minor version `minor`.
pub fn is_supported(minor: u32, bit: u32) -> bool {
    SUPPORTED.contains(&bit) || (minor >= 2 && SUPPORTED_42.contains(&bit))
}

/// Whether a request asks for any of `bits`.
pub fn asks_any(request: &Bitmap4, bits: &[u32]) -> bool {
    bits.iter().any(|&b| request.contains(b))
}

/// The one mapping of [`FsError`] to `nfsstat4`.
pub fn status(e: FsError) -> Nfsstat4 {
    match e {
        FsError::Perm => Nfsstat4::PERM,
        FsError::NoEnt => Nfsstat4::NOENT,
        FsError::Io => Nfsstat4::IO,
        FsError::Nxio => Nfsstat4::NXIO,
        FsError::Acces => Nfsstat4::ACCESS,
        FsError::Exist => Nfsstat4::EXIST,
        FsError::Xdev => Nfsstat4::XDEV,
        // v4 dropped NODEV (19); a missing device is "no such device or address".
        FsError::NoDev => Nfsstat4::NXIO,
        FsError::NotDir => Nfsstat4::NOTDIR,
        FsError::IsDir => Nfsstat4::ISDIR,
        FsError::Inval => Nfsstat4::INVAL,
        FsError::FBig => Nfsstat4::FBIG,
        FsError::NoSpc => Nfsstat4::NOSPC,
        FsError::RoFs => Nfsstat4::ROFS,
        FsError::MLink => Nfsstat4::MLINK,
        FsError::NameTooLong => Nfsstat4::NAMETOOLONG,
        FsError::NotEmpty => Nfsstat4::NOTEMPTY,
        FsError::DQuot => Nfsstat4::DQUOT,
        FsError::Stale => Nfsstat4::STALE,
        FsError::BadHandle => Nfsstat4::BADHANDLE,
        // v4 has no NOT_SYNC: a SETATTR guard mismatch (sa_guard is v3's) cannot happen in
        // v4; anything else reporting it is an invalid request.
        FsError::NotSync => Nfsstat4::INVAL,
        FsError::BadCookie => Nfsstat4::BAD_COOKIE,
        FsError::NotSupp => Nfsstat4::NOTSUPP,
        FsError::TooSmall => Nfsstat4::TOOSMALL,
        FsError::ServerFault => Nfsstat4::SERVERFAULT,
        FsError::BadType => Nfsstat4::BADTYPE,
        FsError::Delay => Nfsstat4::DELAY,
        // v4 names the case v3 lacked: a symlink where the op cannot follow one.
        FsError::Loop => Nfsstat4::SYMLINK,
    }
}

pub fn ftype4(t: FileType) -> Ftype4 {
    match t {
        FileType::Regular => Ftype4::REG,
        FileType::Directory => Ftype4::DIR,
        FileType::BlockDevice => Ftype4::BLK,
        FileType::CharDevice => Ftype4::CHR,
        FileType::Symlink => Ftype4::LNK,
        FileType::Socket => Ftype4::SOCK,
        FileType::Fifo => Ftype4::FIFO,
    }
}

pub fn time4(t: Time) -> Nfstime4 {
    Nfstime4 {
        seconds: t.seconds,
        nseconds: t.nseconds.min(999_999_999),
    }
}

/// A wire time as a neutral one; nanoseconds past a second are NFS4ERR_INVAL.
pub fn time(t: &Nfstime4) -> Result<Time, Nfsstat4> {
    if t.nseconds > 999_999_999 {
        return Err(Nfsstat4::INVAL);
    }
    Ok(Time {
        seconds: t.seconds,
        nseconds: t.nseconds,
    })
}

/// The fsid of objects of the export whose id is `export_id` (see [`PSEUDO_FSID`] for why
/// this can never be the pseudo tree's).
pub fn export_fsid(export_id: u32) -> Fsid4 {
    Fsid4 {
        major: u64::from(export_id),
        minor: 0,
    }
}

/// What GETATTR needs besides the object's neutral attributes.
#[derive(Debug, Clone)]
pub struct AttrCtx<'a> {
    pub fh: NfsFh4,
    pub fsid: Fsid4,
    /// Seconds.
    pub lease_time: u32,
    /// `mounted_on_fileid`: for an export root, the fileid of the pseudo directory it sits on;
    /// `None` means the object's own fileid.
    pub mounted_on_fileid: Option<u64>,
    /// The file system's statistics, when the request asked for space or file counts.
    pub fsstat: Option<FsStat>,
    /// How `owner` and `owner_group` are written.
    pub idmap: &'a IdMap,
    /// The COMPOUND's minor version: which attributes exist.
    pub minor: u32,
    /// How the object's file system makes `change`.
    pub change_kind: ChangeKind,
    /// The object's file system's CLONE alignment (`FileSystem::clone_blksize`), for
    /// `clone_blksize`.
    pub clone_blksize: u32,
    /// The object's file system takes user extended attributes
    /// (`FileSystem::xattr_support`), for `xattr_support`.
    pub xattr_support: bool,
}

/// The neutral attributes of pseudo directory `node`: read-only (0555), owned by root, one
/// link per child plus two, fileid `node + 1` (fileid 0 is avoided: some clients treat it as
/// "no inode"), change 1 (the tree never changes while it lives: a rebuilt tree has new
/// handles).
pub fn pseudo_attr(node: NodeId, subdirs: usize, generation: u32) -> Attr {
    Attr {
        ftype: FileType::Directory,
        mode: 0o555,
        nlink: 2u32.saturating_add(u32::try_from(subdirs).unwrap_or(u32::MAX)),
        uid: 0,
        gid: 0,
        size: 0,
        used: 0,
        rdev: DeviceId::default(),
        fsid: PSEUDO_FSID.major,
        fileid: u64::from(node) + 1,
        atime: Time::default(),
        mtime: Time::default(),
        ctime: Time::default(),
        // Changes with the export list (see `pseudo.rs`): cached listings of `/` go with it.
        change: u64::from(generation),
    }
}

/// Every supported attribute of an object (the fsstat ones only when `ctx.fsstat` is given).
pub fn values(a: &Attr, ctx: &AttrCtx) -> AttrValues {
    let mut v = AttrValues {
        supported_attrs: Some(supported_mask(ctx.minor)),
        ftype: Some(ftype4(a.ftype)),
        // Handles are persistent: they carry the inode and generation, not a path.
        fh_expire_type: Some(sluice_xdr::nfs4::attrs::FH4_PERSISTENT),
        change: Some(a.change),
        size: Some(a.size),
        link_support: Some(true),
        symlink_support: Some(true),
        named_attr: Some(false),
        fsid: Some(ctx.fsid.clone()),
        unique_handles: Some(true),
        lease_time: Some(ctx.lease_time),
        rdattr_error: Some(Nfsstat4::OK),
        cansettime: Some(true),
        case_insensitive: Some(false),
        case_preserving: Some(true),
        chown_restricted: Some(true),
        filehandle: Some(ctx.fh.clone()),
        fileid: Some(a.fileid),
        homogeneous: Some(true),
        maxfilesize: Some(FILE_BYTES_MAX),
        maxname: Some(NAME_BYTES_MAX),
        maxread: Some(IO_BYTES_MAX),
        maxwrite: Some(IO_BYTES_MAX),
        mode: Some(a.mode & 0o7777),
        no_trunc: Some(true),
        numlinks: Some(a.nlink),
        owner: Some(ctx.idmap.owner(a.uid)),
        owner_group: Some(ctx.idmap.owner_group(a.gid)),
        rawdev: Some(Specdata4 {
            specdata1: a.rdev.major,
            specdata2: a.rdev.minor,
        }),
        space_used: Some(a.used),
        time_access: Some(time4(a.atime)),
        // Nanosecond timestamps are kept as given.
        time_delta: Some(Nfstime4 {
            seconds: 0,
            nseconds: 1,
        }),
        time_metadata: Some(time4(a.ctime)),
        time_modify: Some(time4(a.mtime)),
        mounted_on_fileid: Some(ctx.mounted_on_fileid.unwrap_or(a.fileid)),
        suppattr_exclcreat: Some(Bitmap4::from_bits(EXCLCREAT)),
        ..Default::default()
    };
    if ctx.minor >= 2 {
        v.clone_blksize = Some(ctx.clone_blksize);
        v.space_freed = Some(if a.nlink > 1 && a.ftype != FileType::Directory {
            0
        } else {
            a.used
        });
        v.change_attr_type = Some(match ctx.change_kind {
            ChangeKind::Ctime => NFS4_CHANGE_TYPE_IS_TIME_METADATA,
            ChangeKind::Counter => NFS4_CHANGE_TYPE_IS_VERSION_COUNTER_NOPNFS,
        });
        v.xattr_support = Some(ctx.xattr_support);
    }
    if let Some(s) = &ctx.fsstat {
        v.files_avail = Some(s.afiles);
        v.files_free = Some(s.ffiles);
        v.files_total = Some(s.tfiles);
        v.space_avail = Some(s.abytes);
        v.space_free = Some(s.fbytes);
        v.space_total = Some(s.tbytes);
    }
    v
}

/// GETATTR's `fattr4` for `request`: NFS4ERR_INVAL if it asks for a write-only attribute;
/// bits sluice does not support are left out of the answer's mask (RFC 8881 §18.7.3).
pub fn fattr4(a: &Attr, ctx: &AttrCtx, request: &Bitmap4) -> Result<Fattr4, Nfsstat4> {
    if asks_any(request, WRITE_ONLY) {
        return Err(Nfsstat4::INVAL);
    }
    Ok(values(a, ctx).encode_masked(Some(request)))
}

fn set_time(t: &Settime4) -> Result<SetTime, Nfsstat4> {
    Ok(match t {
        Settime4::ServerTime => SetTime::ServerTime,
        Settime4::ClientTime(t) => SetTime::ClientTime(time(t)?),
    })
}

/// SETATTR's (and later CREATE's and OPEN's) `fattr4` as neutral set-attributes, with the mask
/// of what will be set. An attribute sluice does not know is NFS4ERR_ATTRNOTSUPP; a known but
/// read-only one is NFS4ERR_INVAL (RFC 8881 §18.30.4); values that do not decode are
/// NFS4ERR_BADXDR; an owner or group `idmap` cannot map is NFS4ERR_BADOWNER.
pub fn set_attr(f: &Fattr4, idmap: &IdMap, minor: u32) -> Result<(SetAttr, Bitmap4), Nfsstat4> {
    let d = AttrValues::decode(f).map_err(|_| Nfsstat4::BADXDR)?;
    if !d.undecoded.is_empty() {
        return Err(Nfsstat4::ATTRNOTSUPP);
    }
    let v = d.values;
    let mask = v.mask();
    for bit in mask.iter() {
        if !SETTABLE.contains(&bit) {
            return Err(if is_supported(minor, bit) {
                Nfsstat4::INVAL
            } else {
                Nfsstat4::ATTRNOTSUPP
            });
        }
    }
    let s = SetAttr {
        mode: v.mode.map(|m| m & 0o7777),
        uid: v.owner.as_ref().map(|o| idmap.uid(o)).transpose()?,
        gid: v.owner_group.as_ref().map(|g| idmap.gid(g)).transpose()?,
        size: v.size,
        atime: v
            .time_access_set
            .as_ref()
            .map(set_time)
            .transpose()?
            .unwrap_or_default(),
        mtime: v
            .time_modify_set
            .as_ref()
            .map(set_time)
            .transpose()?
            .unwrap_or_default(),
    };
    Ok((s, mask))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use sluice_xdr::nfs4::Utf8Str;
    use sluice_xdr::Writer;

    fn attr() -> Attr {
        Attr {
            ftype: FileType::Regular,
            mode: 0o100644,
            nlink: 3,
            uid: 1000,
            gid: 100,
            size: 12345,
            used: 16384,
            rdev: DeviceId { major: 0, minor: 0 },
            fsid: 7,
            fileid: 42,
            atime: Time {
                seconds: 10,
                nseconds: 1,
            },
            mtime: Time {
                seconds: 20,
                nseconds: 2,
            },
            ctime: Time {
                seconds: 30,
                nseconds: 3,
            },
            change: 99,
        }
    }

    static NUMERIC: std::sync::LazyLock<IdMap> = std::sync::LazyLock::new(IdMap::numeric);

    fn ctx() -> AttrCtx<'static> {
        AttrCtx {
            idmap: &NUMERIC,
            fh: NfsFh4(Bytes::from_static(b"\x01handle")),
            fsid: export_fsid(7),
            lease_time: 90,
            mounted_on_fileid: None,
            fsstat: Some(FsStat {
                tbytes: 1000,
                fbytes: 600,
                abytes: 500,
                tfiles: 50,
                ffiles: 40,
                afiles: 30,
                invarsec: 0,
                attr: None,
            }),
            minor: 2,
            change_kind: ChangeKind::Ctime,
            clone_blksize: CLONE_BLKSIZE,
            xattr_support: true,
        }
    }

    #[test]
    fn errno_mapping_matches_the_v3_table_where_v4_has_the_code() {
        // v3 and v4 share the numbers of the errors both have; the neutral mapping must agree
        // with v3's wherever v4 has the same code, and say why where it does not.
        for errno in 0..200 {
            let e = FsError::from_errno(errno);
            let v3 = crate::nfs::map::status(e);
            let v4 = status(e);
            let shared = Nfsstat4::ALL.contains(&Nfsstat4(v3.0));
            match e {
                FsError::Loop => assert_eq!(v4, Nfsstat4::SYMLINK),
                FsError::NoDev => assert_eq!(v4, Nfsstat4::NXIO),
                _ if shared => assert_eq!(v4.0, v3.0, "errno {errno} ({e:?})"),
                _ => {}
            }
        }
        assert_eq!(status(FsError::from_errno(libc::EACCES)), Nfsstat4::ACCESS);
        assert_eq!(status(FsError::from_errno(libc::EAGAIN)), Nfsstat4::DELAY);
        assert_eq!(status(FsError::from_errno(libc::ESTALE)), Nfsstat4::STALE);
        assert_eq!(
            status(FsError::from_errno(libc::ENAMETOOLONG)),
            Nfsstat4::NAMETOOLONG
        );
        assert_eq!(status(FsError::NotSync), Nfsstat4::INVAL);
    }

    #[test]
    fn every_advertised_attribute_is_encoded_and_decodes() {
        for minor in [1, 2] {
            let mut c = ctx();
            c.minor = minor;
            let all = supported_mask(minor);
            let mut readable = all.clone();
            for &b in WRITE_ONLY {
                readable.clear(b);
            }
            let f = fattr4(&attr(), &c, &readable).unwrap();
            assert!(f.mask.same_bits(&readable), "{minor}: {:?}", f.mask);
            let d = AttrValues::decode(&f).unwrap();
            assert!(d.undecoded.is_empty());
            assert!(d.values.supported_attrs.unwrap().same_bits(&all));
        }
        let all = supported_mask(2);
        let mut readable = all.clone();
        for &b in WRITE_ONLY {
            readable.clear(b);
        }
        let f = fattr4(&attr(), &ctx(), &readable).unwrap();
        assert!(
            f.mask.same_bits(&readable),
            "{:?} vs {:?}",
            f.mask,
            readable
        );
        let d = AttrValues::decode(&f).unwrap();
        assert!(d.undecoded.is_empty());
        let v = d.values;
        assert!(v.supported_attrs.unwrap().same_bits(&all));
        assert_eq!(v.ftype, Some(Ftype4::REG));
        assert_eq!(v.mode, Some(0o644));
        assert_eq!(v.owner, Some(Utf8Str(Bytes::from_static(b"1000"))));
        assert_eq!(v.owner_group, Some(Utf8Str(Bytes::from_static(b"100"))));
        assert_eq!(v.numlinks, Some(3));
        assert_eq!(v.fileid, Some(42));
        assert_eq!(v.mounted_on_fileid, Some(42));
        assert_eq!(v.space_used, Some(16384));
        assert_eq!(v.maxread, Some(1 << 20));
        assert_eq!(v.maxwrite, Some(1 << 20));
        assert_eq!(v.fsid, Some(Fsid4 { major: 7, minor: 0 }));
        assert_eq!(v.lease_time, Some(90));
        assert_eq!(v.space_avail, Some(500));
        assert_eq!(
            v.time_modify,
            Some(Nfstime4 {
                seconds: 20,
                nseconds: 2
            })
        );
        // The 14 REQUIRED attributes (RFC 8881 §5.6) are all advertised.
        for n in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 19, 75] {
            assert!(all.contains(n), "REQUIRED attribute {n}");
        }
    }

    #[test]
    fn only_requested_and_supported_bits_come_back() {
        // acl (12) and hidden (25) are not supported: left out, not an error.
        let req = Bitmap4::from_bits(&[num::TYPE, num::ACL, num::HIDDEN, num::FILEID]);
        let f = fattr4(&attr(), &ctx(), &req).unwrap();
        assert!(f
            .mask
            .same_bits(&Bitmap4::from_bits(&[num::TYPE, num::FILEID])));
        let req = Bitmap4::from_bits(&[num::TIME_MODIFY_SET]);
        assert_eq!(fattr4(&attr(), &ctx(), &req), Err(Nfsstat4::INVAL));
    }

    #[test]
    fn pseudo_directories_are_read_only_on_the_pseudo_fsid() {
        let a = pseudo_attr(0, 2, 1);
        let mut c = ctx();
        c.fsid = PSEUDO_FSID;
        let req = Bitmap4::from_bits(&[num::TYPE, num::FSID, num::MODE, num::FILEID]);
        let v = AttrValues::decode(&fattr4(&a, &c, &req).unwrap())
            .unwrap()
            .values;
        assert_eq!(v.ftype, Some(Ftype4::DIR));
        assert_eq!(v.mode, Some(0o555));
        assert_eq!(v.fsid, Some(PSEUDO_FSID));
        assert_ne!(v.fileid, Some(0));
        assert_ne!(Some(PSEUDO_FSID), Some(export_fsid(u32::MAX)));
    }

    #[test]
    fn setattr_values_become_neutral_set_attributes() {
        let v = AttrValues {
            size: Some(5),
            mode: Some(0o640),
            owner: Some(Utf8Str(Bytes::from_static(b"1001"))),
            time_modify_set: Some(Settime4::ServerTime),
            time_access_set: Some(Settime4::ClientTime(Nfstime4 {
                seconds: 3,
                nseconds: 4,
            })),
            ..Default::default()
        };
        let (s, mask) = set_attr(&v.encode(), &NUMERIC, 2).unwrap();
        assert_eq!(s.size, Some(5));
        assert_eq!(s.mode, Some(0o640));
        assert_eq!(s.uid, Some(1001));
        assert_eq!(s.gid, None);
        assert_eq!(s.mtime, SetTime::ServerTime);
        assert_eq!(
            s.atime,
            SetTime::ClientTime(Time {
                seconds: 3,
                nseconds: 4
            })
        );
        assert!(mask.same_bits(&v.mask()));
    }

    #[test]
    fn setattr_refusals_name_the_rfc_errors() {
        let owner = |s: &'static [u8]| AttrValues {
            owner: Some(Utf8Str(Bytes::from_static(s))),
            ..Default::default()
        };
        assert_eq!(
            set_attr(&owner(b"alice@example.org").encode(), &NUMERIC, 2),
            Err(Nfsstat4::BADOWNER)
        );
        assert_eq!(
            set_attr(&owner(b"").encode(), &NUMERIC, 2),
            Err(Nfsstat4::BADOWNER)
        );
        // A read-only attribute is INVAL.
        let ro = AttrValues {
            fileid: Some(1),
            ..Default::default()
        };
        assert_eq!(set_attr(&ro.encode(), &NUMERIC, 2), Err(Nfsstat4::INVAL));
        // An attribute without a codec (archive, 14) is ATTRNOTSUPP.
        let mut w = Writer::new();
        w.put_bool(true);
        let f = Fattr4 {
            mask: Bitmap4::from_bits(&[num::ARCHIVE]),
            vals: w.into_bytes(),
        };
        assert_eq!(set_attr(&f, &NUMERIC, 2), Err(Nfsstat4::ATTRNOTSUPP));
        // Truncated values are BADXDR.
        let f = Fattr4 {
            mask: Bitmap4::from_bits(&[num::SIZE]),
            vals: Bytes::from_static(&[0, 0]),
        };
        assert_eq!(set_attr(&f, &NUMERIC, 2), Err(Nfsstat4::BADXDR));
        // A 4.2 attribute: read-only in 4.2, unknown in 4.1.
        let v42 = AttrValues {
            clone_blksize: Some(4096),
            ..Default::default()
        };
        assert_eq!(set_attr(&v42.encode(), &NUMERIC, 2), Err(Nfsstat4::INVAL));
        assert_eq!(
            set_attr(&v42.encode(), &NUMERIC, 1),
            Err(Nfsstat4::ATTRNOTSUPP)
        );
    }

    /// RFC 7862 §12.2: the 4.2 attributes exist in minor version 2 only; in 4.1 they are
    /// neither advertised nor answered.
    #[test]
    fn the_42_attributes_are_answered_in_minor_version_2_only() {
        let mut req = Bitmap4::from_bits(&[num::SIZE]);
        for &b in SUPPORTED_42 {
            req.set(b);
        }
        let mut c = ctx();
        c.minor = 1;
        let v41 = AttrValues::decode(&fattr4(&attr(), &c, &req).unwrap())
            .unwrap()
            .values;
        assert_eq!(v41.mask(), Bitmap4::from_bits(&[num::SIZE]));
        for &b in SUPPORTED_42 {
            assert!(!supported_mask(1).contains(b) && supported_mask(2).contains(b));
            assert!(!is_supported(1, b) && is_supported(2, b));
        }
        // In 4.2: the values, by the file system's kind of change attribute.
        let v = AttrValues::decode(&fattr4(&attr(), &ctx(), &req).unwrap())
            .unwrap()
            .values;
        assert_eq!(v.clone_blksize, Some(CLONE_BLKSIZE));
        // nlink 3: the other links keep the data.
        assert_eq!(v.space_freed, Some(0));
        assert_eq!(v.change_attr_type, Some(NFS4_CHANGE_TYPE_IS_TIME_METADATA));
        let mut c = ctx();
        c.change_kind = ChangeKind::Counter;
        let mut one_link = attr();
        one_link.nlink = 1;
        let v = AttrValues::decode(&fattr4(&one_link, &c, &req).unwrap())
            .unwrap()
            .values;
        assert_eq!(v.space_freed, Some(16384));
        assert_eq!(
            v.change_attr_type,
            Some(NFS4_CHANGE_TYPE_IS_VERSION_COUNTER_NOPNFS)
        );
        // `xattr_support` is the file system's (RFC 8276 §8.2).
        assert_eq!(v.xattr_support, Some(true));
        c.xattr_support = false;
        let v = AttrValues::decode(&fattr4(&one_link, &c, &req).unwrap())
            .unwrap()
            .values;
        assert_eq!(v.xattr_support, Some(false));
    }
}
