//! From `statx(2)` to [`Attr`].
//!
//! * `fsid` is the export id: stable across restarts, and distinct per export, so a client sees
//!   each export as its own file system even when two share a disk.
//! * `fileid` is the inode number, as knfsd sends it.
//! * `used` is `st_blocks * 512` (statx counts 512-byte units whatever the block size).
//! * times keep their full range and nanoseconds; a wire format with narrower times clamps.
//! * `rdev` carries the major/minor of device nodes, 0/0 otherwise.
//! * `change` is the ctime in nanoseconds (see the `types` essay for why not i_version).

use crate::types::{Attr, DeviceId, FileType, Time, WccAttr};

pub(crate) fn ftype(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFBLK => FileType::BlockDevice,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFIFO => FileType::Fifo,
        _ => FileType::Regular,
    }
}

pub(crate) fn time(t: &libc::statx_timestamp) -> Time {
    time_parts(t.tv_sec, t.tv_nsec)
}

fn time_parts(seconds: i64, nseconds: u32) -> Time {
    Time {
        seconds,
        nseconds: nseconds.min(999_999_999),
    }
}

pub(crate) fn fattr(st: &libc::statx, fsid: u64) -> Attr {
    let mode = u32::from(st.stx_mode);
    let ft = ftype(mode);
    let rdev = if ft == FileType::CharDevice || ft == FileType::BlockDevice {
        DeviceId {
            major: st.stx_rdev_major,
            minor: st.stx_rdev_minor,
        }
    } else {
        DeviceId::default()
    };
    Attr {
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
        atime: time(&st.stx_atime),
        mtime: time(&st.stx_mtime),
        ctime: time(&st.stx_ctime),
        change: change(st),
    }
}

pub(crate) fn wcc(st: &libc::statx) -> WccAttr {
    WccAttr {
        size: st.stx_size,
        mtime: time(&st.stx_mtime),
        ctime: time(&st.stx_ctime),
        change: change(st),
    }
}

/// The change attribute: ctime in nanoseconds (statx does not give user space i_version).
fn change(st: &libc::statx) -> u64 {
    time(&st.stx_ctime).as_nanos()
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
    fn nanoseconds_are_bounded() {
        assert_eq!(
            time_parts(-5, 2_000_000_000),
            Time {
                seconds: -5,
                nseconds: 999_999_999
            }
        );
    }
}
