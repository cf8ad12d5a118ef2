//! From `statx(2)` to NFSv3 attributes (RFC 1813 §2.6 `fattr3`).
//!
//! * `fsid` is the export id: stable across restarts, and distinct per export, so a client sees
//!   each export as its own file system even when two share a disk.
//! * `fileid` is the inode number, as knfsd sends it.
//! * `used` is `st_blocks * 512` (statx counts 512-byte units whatever the block size).
//! * times keep their nanoseconds; seconds outside `0..=u32::MAX` (before 1970, after 2106) are
//!   clamped, since `nfstime3` is unsigned 32-bit.
//! * `rdev` carries the major/minor of device nodes, 0/0 otherwise.

use sluice_xdr::nfs3::{Fattr3, Ftype3, Nfstime3, Specdata3, WccAttr};

pub(crate) fn ftype(mode: u32) -> Ftype3 {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => Ftype3::DIR,
        libc::S_IFLNK => Ftype3::LNK,
        libc::S_IFBLK => Ftype3::BLK,
        libc::S_IFCHR => Ftype3::CHR,
        libc::S_IFSOCK => Ftype3::SOCK,
        libc::S_IFIFO => Ftype3::FIFO,
        _ => Ftype3::REG,
    }
}

pub(crate) fn nfstime(t: &libc::statx_timestamp) -> Nfstime3 {
    nfstime_parts(t.tv_sec, t.tv_nsec)
}

fn nfstime_parts(seconds: i64, nseconds: u32) -> Nfstime3 {
    Nfstime3 {
        seconds: seconds.clamp(0, u32::MAX as i64) as u32,
        nseconds: nseconds.min(999_999_999),
    }
}

pub(crate) fn fattr(st: &libc::statx, fsid: u64) -> Fattr3 {
    let mode = u32::from(st.stx_mode);
    let ft = ftype(mode);
    let rdev = if ft == Ftype3::CHR || ft == Ftype3::BLK {
        Specdata3 {
            major: st.stx_rdev_major,
            minor: st.stx_rdev_minor,
        }
    } else {
        Specdata3::default()
    };
    Fattr3 {
        ftype: ft,
        mode: mode & 0o7777,
        nlink: st.stx_nlink,
        uid: st.stx_uid,
        gid: st.stx_gid,
        size: st.stx_size,
        used: st.stx_blocks.saturating_mul(512),
        rdev,
        fsid,
        fileid: st.stx_ino,
        atime: nfstime(&st.stx_atime),
        mtime: nfstime(&st.stx_mtime),
        ctime: nfstime(&st.stx_ctime),
    }
}

pub(crate) fn wcc(st: &libc::statx) -> WccAttr {
    WccAttr {
        size: st.stx_size,
        mtime: nfstime(&st.stx_mtime),
        ctime: nfstime(&st.stx_ctime),
    }
}

pub(crate) fn is_dir(st: &libc::statx) -> bool {
    u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFDIR
}

pub(crate) fn is_reg(st: &libc::statx) -> bool {
    u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFREG
}

pub(crate) fn is_lnk(st: &libc::statx) -> bool {
    u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFLNK
}

/// `(st_dev, st_ino)` as one comparable value.
pub(crate) fn dev_ino(st: &libc::statx) -> (u64, u64) {
    (sys_makedev(st.stx_dev_major, st.stx_dev_minor), st.stx_ino)
}

fn sys_makedev(major: u32, minor: u32) -> u64 {
    super::sys::makedev(major, minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_clamped() {
        assert_eq!(nfstime_parts(-5, 1).seconds, 0);
        assert_eq!(
            nfstime_parts(1 << 40, 7),
            Nfstime3 {
                seconds: u32::MAX,
                nseconds: 7
            }
        );
        assert_eq!(nfstime_parts(1, 2_000_000_000).nseconds, 999_999_999);
    }
}
