//! Conversions between what the kernel speaks and what the client library's
//! [`Namespace`](sluice_client::namespace::Namespace) speaks: names as UTF-8, FUSE's inclusive
//! lock ranges as NFSv4 offset and length and back, `SystemTime` as the neutral [`Time`] and
//! back (times before 1970 included), setattr's times as [`SetTime`], and an [`NsError`] as the
//! Linux errno the kernel gets.

use super::{Errno, FsResult, LockRange, LOCK_TO_END};
use crate::cache::data_changed;
use sluice_client::namespace::{Attr, Error as NsError, SetTime, Status, Time};
use std::time::{Duration, SystemTime};

pub(super) fn utf8(name: &[u8]) -> FsResult<&str> {
    std::str::from_utf8(name).map_err(|_| Errno(libc::EINVAL))
}

/// FUSE's `start..=end` as NFSv4's offset and length (`u64::MAX`: to the end).
pub(super) fn nfs_range(r: LockRange) -> FsResult<(u64, u64)> {
    if r.end < r.start {
        return Err(Errno(libc::EINVAL));
    }
    if r.end >= LOCK_TO_END {
        return Ok((r.start, u64::MAX));
    }
    Ok((r.start, r.end - r.start + 1))
}

/// NFSv4's offset and length as FUSE's inclusive end.
pub(super) fn fuse_end(offset: u64, length: u64) -> u64 {
    if length == 0 || length == u64::MAX {
        return LOCK_TO_END;
    }
    match offset.checked_add(length - 1) {
        Some(end) if end < LOCK_TO_END => end,
        _ => LOCK_TO_END,
    }
}

pub(super) fn set_time(t: Option<Option<SystemTime>>) -> SetTime {
    match t {
        None => SetTime::DontChange,
        Some(None) => SetTime::ServerTime,
        Some(Some(t)) => SetTime::ClientTime(nfstime(t)),
    }
}

/// A `SystemTime` as a neutral [`Time`] (signed seconds since 1970).
pub fn nfstime(t: SystemTime) -> Time {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => Time {
            seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nseconds: d.subsec_nanos(),
        },
        Err(e) => {
            // Before 1970: whole seconds down, nanoseconds up from there.
            let d = e.duration();
            let (s, n) = (d.as_secs() as i64, d.subsec_nanos());
            if n == 0 {
                Time {
                    seconds: -s,
                    nseconds: 0,
                }
            } else {
                Time {
                    seconds: -s - 1,
                    nseconds: 1_000_000_000 - n,
                }
            }
        }
    }
}

/// A neutral [`Time`] as a `SystemTime`.
pub fn system_time(t: Time) -> SystemTime {
    let n = t.nseconds.min(999_999_999);
    if t.seconds >= 0 {
        SystemTime::UNIX_EPOCH + Duration::new(t.seconds as u64, n)
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_secs(t.seconds.unsigned_abs())
            + Duration::from_nanos(u64::from(n))
    }
}

/// The errno for an NFS error (RFC 1813 §2.6; the values below 10000 are Linux errnos except
/// where Linux numbers differ; NFSv4's own statuses as Linux's client maps them).
pub fn errno(e: &NsError) -> Errno {
    let Some(s) = e.status() else {
        let timeout = e.is_timeout();
        return Errno(if timeout { libc::ETIMEDOUT } else { libc::EIO });
    };
    Errno(match s {
        // NFS4ERR_DENIED, NFS4ERR_LOCKED, NFS4ERR_GRACE: try again later.
        Status(10010) | Status(10012) | Status(10013) => libc::EAGAIN,
        Status(10015) => libc::EACCES,  // NFS4ERR_SHARE_DENIED
        Status(10038) => libc::EBADF,   // NFS4ERR_OPENMODE
        Status(10029) => libc::ELOOP,   // NFS4ERR_SYMLINK
        Status(10045) => libc::EDEADLK, // NFS4ERR_DEADLOCK
        Status(10083) => libc::EINVAL,  // NFS4ERR_WRONG_TYPE
        Status(10095) => libc::ENODATA, // NFS4ERR_NOXATTR
        Status(10096) => libc::E2BIG,   // NFS4ERR_XATTR2BIG
        Status::NAMETOOLONG => libc::ENAMETOOLONG,
        Status::NOTEMPTY => libc::ENOTEMPTY,
        Status::DQUOT => libc::EDQUOT,
        Status::STALE | Status::BADHANDLE => libc::ESTALE,
        Status::REMOTE => libc::EREMOTE,
        Status::NOTSUPP => libc::EOPNOTSUPP,
        Status::BADTYPE => libc::EINVAL,
        Status::JUKEBOX => libc::EAGAIN,
        Status::TOOSMALL | Status::SERVERFAULT | Status::NOT_SYNC | Status::BAD_COOKIE => libc::EIO,
        Status(v) if v > 0 && v < 128 => v as i32,
        _ => libc::EIO,
    })
}

/// True if two attribute sets differ in what close-to-open cares about.
pub fn changed(old: &Attr, new: &Attr) -> bool {
    data_changed(old, new)
}
