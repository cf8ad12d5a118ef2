//! Between the file-system layer's neutral types and NFSv3's wire types: the one place each is
//! mapped (RFC 1813 §2.5-2.6). A v4 layer maps the same neutral values to `nfsstat4`/`fattr4`.

use crate::backend::{
    Attr, DeviceId, FileHandle, FileType, FsError, SetAttr, SetTime, Time, Wcc, WccAttr,
    FILE_HANDLE_BYTES_MAX,
};
use sluice_xdr::nfs3::{
    self, Fattr3, Ftype3, NfsFh3, Nfsstat3, Nfstime3, Sattr3, Specdata3, WccData,
};

// Every v3 handle is a valid file-system handle and back: same limit.
const _: () = assert!(nfs3::FHSIZE == FILE_HANDLE_BYTES_MAX);

/// The file-system handle of a wire handle. The decoder bounds wire handles to 64 bytes, so
/// this never fails; a longer one (impossible) becomes the empty handle, which no backend
/// accepts (BADHANDLE), rather than a panic.
pub fn handle(fh: &NfsFh3) -> FileHandle {
    FileHandle::new(fh.0.clone()).unwrap_or_default()
}

pub fn fh3(fh: &FileHandle) -> NfsFh3 {
    NfsFh3(fh.to_bytes())
}

/// The one mapping of [`FsError`] to `nfsstat3`.
pub fn status(e: FsError) -> Nfsstat3 {
    match e {
        FsError::Perm => Nfsstat3::PERM,
        FsError::NoEnt => Nfsstat3::NOENT,
        FsError::Io => Nfsstat3::IO,
        FsError::Nxio => Nfsstat3::NXIO,
        FsError::Acces => Nfsstat3::ACCES,
        FsError::Exist => Nfsstat3::EXIST,
        FsError::Xdev => Nfsstat3::XDEV,
        FsError::NoDev => Nfsstat3::NODEV,
        FsError::NotDir => Nfsstat3::NOTDIR,
        FsError::IsDir => Nfsstat3::ISDIR,
        FsError::Inval => Nfsstat3::INVAL,
        FsError::FBig => Nfsstat3::FBIG,
        FsError::NoSpc => Nfsstat3::NOSPC,
        FsError::RoFs => Nfsstat3::ROFS,
        FsError::MLink => Nfsstat3::MLINK,
        FsError::NameTooLong => Nfsstat3::NAMETOOLONG,
        FsError::NotEmpty => Nfsstat3::NOTEMPTY,
        FsError::DQuot => Nfsstat3::DQUOT,
        FsError::Stale => Nfsstat3::STALE,
        FsError::BadHandle => Nfsstat3::BADHANDLE,
        FsError::NotSync => Nfsstat3::NOT_SYNC,
        FsError::BadCookie => Nfsstat3::BAD_COOKIE,
        FsError::NotSupp => Nfsstat3::NOTSUPP,
        FsError::TooSmall => Nfsstat3::TOOSMALL,
        FsError::ServerFault => Nfsstat3::SERVERFAULT,
        FsError::BadType => Nfsstat3::BADTYPE,
        FsError::Delay => Nfsstat3::JUKEBOX,
        // v3 has no "too many symlinks"; knfsd answers INVAL.
        FsError::Loop => Nfsstat3::INVAL,
    }
}

pub fn ftype3(t: FileType) -> Ftype3 {
    match t {
        FileType::Regular => Ftype3::REG,
        FileType::Directory => Ftype3::DIR,
        FileType::BlockDevice => Ftype3::BLK,
        FileType::CharDevice => Ftype3::CHR,
        FileType::Symlink => Ftype3::LNK,
        FileType::Socket => Ftype3::SOCK,
        FileType::Fifo => Ftype3::FIFO,
    }
}

/// `nfstime3` has unsigned 32-bit seconds: times before 1970 or after 2106 are clamped.
pub fn time3(t: Time) -> Nfstime3 {
    Nfstime3 {
        seconds: t.seconds.clamp(0, i64::from(u32::MAX)) as u32,
        nseconds: t.nseconds.min(999_999_999),
    }
}

pub fn time(t: Nfstime3) -> Time {
    Time {
        seconds: i64::from(t.seconds),
        nseconds: t.nseconds,
    }
}

pub fn fattr3(a: &Attr) -> Fattr3 {
    Fattr3 {
        ftype: ftype3(a.ftype),
        mode: a.mode,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        used: a.used,
        rdev: Specdata3 {
            major: a.rdev.major,
            minor: a.rdev.minor,
        },
        fsid: a.fsid,
        fileid: a.fileid,
        atime: time3(a.atime),
        mtime: time3(a.mtime),
        ctime: time3(a.ctime),
    }
}

pub fn post_op(a: Option<Attr>) -> Option<Fattr3> {
    a.as_ref().map(fattr3)
}

fn wcc_attr(b: &WccAttr) -> nfs3::WccAttr {
    nfs3::WccAttr {
        size: b.size,
        mtime: time3(b.mtime),
        ctime: time3(b.ctime),
    }
}

pub fn wcc(w: &Wcc) -> WccData {
    WccData {
        before: w.before.as_ref().map(wcc_attr),
        after: post_op(w.after),
    }
}

pub fn set_time(t: nfs3::SetTime) -> SetTime {
    match t {
        nfs3::SetTime::DontChange => SetTime::DontChange,
        nfs3::SetTime::ServerTime => SetTime::ServerTime,
        nfs3::SetTime::ClientTime(t) => SetTime::ClientTime(time(t)),
    }
}

pub fn sattr(s: &Sattr3) -> SetAttr {
    SetAttr {
        mode: s.mode,
        uid: s.uid,
        gid: s.gid,
        size: s.size,
        atime: set_time(s.atime),
        mtime: set_time(s.mtime),
    }
}

pub fn device(d: Specdata3) -> DeviceId {
    DeviceId {
        major: d.major,
        minor: d.minor,
    }
}

impl crate::io::writebehind::FileSize for Fattr3 {
    fn is_regular_file(&self) -> bool {
        self.ftype == Ftype3::REG
    }
    fn size_mut(&mut self) -> &mut u64 {
        &mut self.size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_outside_nfstime3_are_clamped() {
        let t = |seconds, nseconds| Time { seconds, nseconds };
        assert_eq!(time3(t(-5, 1)).seconds, 0);
        assert_eq!(
            time3(t(1 << 40, 7)),
            Nfstime3 {
                seconds: u32::MAX,
                nseconds: 7
            }
        );
        assert_eq!(time(time3(t(12, 34))), t(12, 34));
    }

    #[test]
    fn errno_mapping_matches_the_v3_table() {
        // The neutral errno mapping followed by the v3 mapping gives what the v3 table gives
        // directly for every errno it names.
        for errno in 0..200 {
            let direct = Nfsstat3::from_errno(errno);
            if direct == Nfsstat3::OK {
                continue;
            }
            assert_eq!(status(FsError::from_errno(errno)), direct, "errno {errno}");
        }
    }
}
