//! Thin, safe wrappers around the Linux system calls the backend needs.
//!
//! Nearly every `unsafe` block of the crate lives here, each one a single libc call whose pointer
//! arguments come from live Rust references (so they are valid for the duration of the call) and
//! whose returned descriptors are wrapped in [`OwnedFd`] at once (so none can leak). The three
//! elsewhere: `sync_file_range` in `openfiles` (`OpenFile::start_writeback`, integer arguments
//! on a descriptor it owns), and two in `iomode` that view a bounce buffer's page-aligned pages
//! as one byte slice (no system call).
//!
//! Names are passed as [`CStr`]; the callers build them from names already validated to contain no
//! `/` and no NUL, so a single path component is all the kernel ever sees from a client, except
//! for the `/proc/self/fd/N` paths built here by [`proc_fd_path`].

use std::ffi::{CStr, CString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `AT_EACCESS` for `faccessat2`: check with the effective (for us: the file-system) ids rather than
/// the real ids. Without it the kernel would check against the real uid, i.e. root.
const AT_EACCESS: libc::c_int = 0x200;
/// glibc's `_PC_LINK_MAX`.
const PC_LINK_MAX: libc::c_int = 0;

/// The largest kernel file handle the backend accepts, in bytes. The wire handle is 64 bytes and
/// the sluice envelope around the kernel bytes takes 20 of them (see `handle.rs`); ext4 and tmpfs
/// need 8-12 bytes, xfs up to 16, btrfs 20.
pub(crate) const KERNEL_HANDLE_MAX: usize = 44;

/// A kernel file handle as produced by `name_to_handle_at(2)`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct KernelHandle {
    pub ty: i32,
    pub len: u8,
    pub bytes: [u8; KERNEL_HANDLE_MAX],
}

impl KernelHandle {
    pub fn new(ty: i32, bytes: &[u8]) -> Option<Self> {
        if bytes.len() > KERNEL_HANDLE_MAX {
            return None;
        }
        let mut h = KernelHandle {
            ty,
            len: bytes.len() as u8,
            bytes: [0; KERNEL_HANDLE_MAX],
        };
        h.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(h)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl std::fmt::Debug for KernelHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KernelHandle(type {:#x}, ", self.ty)?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// `struct file_handle` with room for [`KERNEL_HANDLE_MAX`] bytes.
#[repr(C)]
struct RawFileHandle {
    handle_bytes: libc::c_uint,
    handle_type: libc::c_int,
    f_handle: [u8; KERNEL_HANDLE_MAX],
}

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_long(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// Retries a call interrupted by a signal.
fn retry<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            r => return r,
        }
    }
}

/// Wraps a descriptor returned by a successful system call.
fn owned(fd: libc::c_int) -> OwnedFd {
    debug_assert!(fd >= 0);
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

pub(crate) const EMPTY: &CStr = c"";

/// `/proc/self/fd/N`: the magic link the kernel resolves to exactly the object behind `fd`.
pub(crate) fn proc_fd_path(fd: BorrowedFd<'_>) -> CString {
    CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("no NUL in a number")
}

pub(crate) fn openat(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: libc::c_int,
    mode: u32,
) -> io::Result<OwnedFd> {
    retry(|| {
        // SAFETY: `name` is a valid NUL-terminated string for the duration of the call.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                flags | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        cvt(fd).map(owned)
    })
}

/// Opens an absolute path (only used for the export root at start-up).
pub(crate) fn open_path(path: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: `path` is a valid NUL-terminated string.
    let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
    cvt(fd).map(owned)
}

pub(crate) fn dup(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    fd.try_clone_to_owned()
}

/// `name_to_handle_at(2)`: the kernel handle and mount id of `dir/name` (or of `dir` itself with
/// an empty name and `AT_EMPTY_PATH`). Symlinks are not followed.
pub(crate) fn name_to_handle_at(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: libc::c_int,
) -> io::Result<(KernelHandle, i32)> {
    let mut raw = RawFileHandle {
        handle_bytes: KERNEL_HANDLE_MAX as libc::c_uint,
        handle_type: 0,
        f_handle: [0; KERNEL_HANDLE_MAX],
    };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `raw` is a `struct file_handle` whose `handle_bytes` states the room that follows
    // it; `mount_id` and `name` are valid for the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut raw as *mut RawFileHandle,
            &mut mount_id as *mut libc::c_int,
            flags,
        )
    };
    cvt_long(ret)?;
    let len = (raw.handle_bytes as usize).min(KERNEL_HANDLE_MAX);
    let h = KernelHandle::new(raw.handle_type, &raw.f_handle[..len]).expect("bounded above");
    Ok((h, mount_id))
}

/// `open_by_handle_at(2)`; needs CAP_DAC_READ_SEARCH, so it runs before credentials are switched.
pub(crate) fn open_by_handle_at(
    mount_fd: BorrowedFd<'_>,
    h: &KernelHandle,
    flags: libc::c_int,
) -> io::Result<OwnedFd> {
    let mut raw = RawFileHandle {
        handle_bytes: h.len as libc::c_uint,
        handle_type: h.ty,
        f_handle: h.bytes,
    };
    retry(|| {
        // SAFETY: `raw` is a valid `struct file_handle` of `handle_bytes` bytes.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_open_by_handle_at,
                mount_fd.as_raw_fd(),
                &mut raw as *mut RawFileHandle,
                flags | libc::O_CLOEXEC,
            )
        };
        cvt_long(ret).map(|fd| owned(fd as libc::c_int))
    })
}

/// The attributes the backend asks `statx` for.
pub(crate) const STATX_MASK: u32 = libc::STATX_BASIC_STATS | libc::STATX_MNT_ID;

/// `statx(2)` of `dir/name` without following a final symlink (or of `dir` itself with an empty
/// name).
pub(crate) fn statx(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<libc::statx> {
    let mut st = MaybeUninit::<libc::statx>::zeroed();
    let flags = libc::AT_SYMLINK_NOFOLLOW | libc::AT_STATX_SYNC_AS_STAT | libc::AT_EMPTY_PATH;
    // SAFETY: `st` has room for a `struct statx`; `name` is NUL-terminated.
    let ret = unsafe {
        libc::statx(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags,
            STATX_MASK,
            st.as_mut_ptr(),
        )
    };
    cvt(ret)?;
    // SAFETY: the kernel filled the structure (it was zeroed before, so any field it did not
    // fill is a valid zero).
    Ok(unsafe { st.assume_init() })
}

/// Direct-I/O alignment of a regular file from `statx(STATX_DIOALIGN)` (Linux 6.1):
/// `(stx_dio_mem_align, stx_dio_offset_align)` in bytes, or `None` when the file system does not
/// report it or reports zero (no O_DIRECT for this file).
pub(crate) fn statx_dio_align(fd: BorrowedFd<'_>) -> io::Result<Option<(u32, u32)>> {
    let mut st = MaybeUninit::<libc::statx>::zeroed();
    let flags = libc::AT_STATX_SYNC_AS_STAT | libc::AT_EMPTY_PATH;
    // SAFETY: `st` has room for a `struct statx`; static empty string.
    let ret = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            flags,
            libc::STATX_DIOALIGN,
            st.as_mut_ptr(),
        )
    };
    cvt(ret)?;
    // SAFETY: filled by the kernel over a zeroed value.
    let st = unsafe { st.assume_init() };
    let reported = st.stx_mask & libc::STATX_DIOALIGN != 0;
    let (mem, off) = (st.stx_dio_mem_align, st.stx_dio_offset_align);
    Ok((reported && mem != 0 && off != 0).then_some((mem, off)))
}

pub(crate) fn fstatfs(fd: BorrowedFd<'_>) -> io::Result<libc::statfs> {
    let mut st = MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: `st` has room for a `struct statfs`. fstatfs works on O_PATH descriptors.
    cvt(unsafe { libc::fstatfs(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: filled by the kernel.
    Ok(unsafe { st.assume_init() })
}

pub(crate) fn fpathconf_link_max(fd: BorrowedFd<'_>) -> Option<u32> {
    // SAFETY: plain integer arguments.
    let v = unsafe { libc::fpathconf(fd.as_raw_fd(), PC_LINK_MAX) };
    (v > 0).then(|| v.min(u32::MAX as libc::c_long) as u32)
}

/// `readlinkat(2)`: the target of the symlink `dir/name` (or of the O_PATH symlink `dir` itself).
pub(crate) fn readlinkat(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: `buf` is valid for `buf.len()` bytes.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = cvt_size(n)?;
    buf.truncate(n);
    Ok(buf)
}

/// The path the kernel reports for `fd` (`readlink /proc/self/fd/N`).
pub(crate) fn fd_path(fd: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
    let link = proc_fd_path(fd);
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: `buf` is valid for `buf.len()` bytes; `link` is NUL-terminated.
    let n = unsafe { libc::readlink(link.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    let n = cvt_size(n)?;
    buf.truncate(n);
    Ok(buf)
}

/// `lstat` of an absolute path given as bytes: `(dev, ino)`.
pub(crate) fn lstat_dev_ino(path: &[u8]) -> io::Result<(u64, u64)> {
    let path = CString::new(path).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut st = MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `st` has room for a `struct stat`; `path` is NUL-terminated.
    cvt(unsafe { libc::lstat(path.as_ptr(), st.as_mut_ptr()) })?;
    // SAFETY: filled by the kernel.
    let st = unsafe { st.assume_init() };
    Ok((st.st_dev, st.st_ino))
}

/// `faccessat2(fd, "", mode, AT_EMPTY_PATH | AT_EACCESS)`: may the *current file-system
/// credentials* access the object behind `fd` with `mode` (`R_OK`, `W_OK`, `X_OK`)?
///
/// The check is the kernel's own (`inode_permission`: mode bits, POSIX ACLs, capabilities, LSMs),
/// which is why the caller's credentials must already be switched in.
pub(crate) fn access(fd: BorrowedFd<'_>, mode: libc::c_int) -> io::Result<()> {
    // SAFETY: plain arguments and a static empty string.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_faccessat2,
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            mode,
            libc::AT_EMPTY_PATH | AT_EACCESS,
        )
    };
    cvt_long(ret).map(drop)
}

/// `setfsuid(2)`, returning the previous file-system uid. Per thread: the raw system call only
/// changes the calling thread's credentials.
pub(crate) fn setfsuid(uid: u32) -> u32 {
    // SAFETY: plain integer argument.
    unsafe { libc::syscall(libc::SYS_setfsuid, uid) as u32 }
}

/// `setfsgid(2)`, returning the previous file-system gid. Per thread.
pub(crate) fn setfsgid(gid: u32) -> u32 {
    // SAFETY: plain integer argument.
    unsafe { libc::syscall(libc::SYS_setfsgid, gid) as u32 }
}

/// The *raw* `setgroups` system call: changes only the calling thread's supplementary groups.
/// glibc's `setgroups()` would broadcast the change to every thread of the process.
pub(crate) fn setgroups_thread(groups: &[u32]) -> io::Result<()> {
    // SAFETY: `groups` is valid for `groups.len()` gid_t values.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_setgroups,
            groups.len() as libc::size_t,
            groups.as_ptr(),
        )
    };
    cvt_long(ret).map(drop)
}

/// The calling thread's supplementary groups (the raw system call reads the thread's own
/// credentials).
pub(crate) fn getgroups_thread() -> io::Result<Vec<u32>> {
    let mut groups = vec![0u32; 64];
    loop {
        // SAFETY: `groups` has room for `groups.len()` gid_t values.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_getgroups,
                groups.len() as libc::c_int,
                groups.as_mut_ptr(),
            )
        };
        match cvt_long(ret) {
            Ok(n) => {
                groups.truncate(n as usize);
                return Ok(groups);
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && groups.len() < 65536 => {
                groups.resize(groups.len() * 4, 0);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Gives the calling thread its own umask, cwd and root (`unshare(CLONE_FS)`), so that
/// [`set_umask`] affects only this thread.
pub(crate) fn unshare_fs() -> io::Result<()> {
    // SAFETY: plain integer argument.
    cvt(unsafe { libc::unshare(libc::CLONE_FS) }).map(drop)
}

/// `umask(2)`, returning the previous mask. Per thread after [`unshare_fs`].
pub(crate) fn set_umask(mask: u32) -> u32 {
    // SAFETY: plain integer argument.
    unsafe { libc::umask(mask as libc::mode_t) as u32 }
}

pub(crate) fn mknodat(dir: BorrowedFd<'_>, name: &CStr, mode: u32, dev: u64) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    cvt(unsafe { libc::mknodat(dir.as_raw_fd(), name.as_ptr(), mode, dev) }).map(drop)
}

pub(crate) fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    cvt(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) }).map(drop)
}

pub(crate) fn symlinkat(target: &CStr, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    // SAFETY: both strings are NUL-terminated.
    cvt(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) }).map(drop)
}

pub(crate) fn unlinkat(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
}

pub(crate) fn renameat(
    from_dir: BorrowedFd<'_>,
    from: &CStr,
    to_dir: BorrowedFd<'_>,
    to: &CStr,
) -> io::Result<()> {
    // SAFETY: both names are NUL-terminated.
    let ret = unsafe {
        libc::renameat(
            from_dir.as_raw_fd(),
            from.as_ptr(),
            to_dir.as_raw_fd(),
            to.as_ptr(),
        )
    };
    cvt(ret).map(drop)
}

/// `linkat(AT_FDCWD, "/proc/self/fd/N", dir, name, AT_SYMLINK_FOLLOW)`: links the object behind
/// `fd` under a new name. The magic-link form works without CAP_DAC_READ_SEARCH, i.e. with the
/// client's credentials switched in (`AT_EMPTY_PATH` would need the capability).
pub(crate) fn link_fd(fd: BorrowedFd<'_>, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    let from = proc_fd_path(fd);
    // SAFETY: both paths are NUL-terminated.
    let ret = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    cvt(ret).map(drop)
}

/// `fchownat(fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)`; `u32::MAX` leaves an id.
pub(crate) fn fchown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: static empty string, integer arguments.
    let ret = unsafe {
        libc::fchownat(
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            uid,
            gid,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    cvt(ret).map(drop)
}

/// `chmod("/proc/self/fd/N")`: O_PATH descriptors cannot be `fchmod`ed, the magic link reaches the
/// same object. Never called for symlinks (their mode is meaningless on Linux).
pub(crate) fn chmod_fd(fd: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    let path = proc_fd_path(fd);
    // SAFETY: `path` is NUL-terminated.
    cvt(unsafe { libc::chmod(path.as_ptr(), mode) }).map(drop)
}

// Extended attributes through `/proc/self/fd/N` (O_PATH descriptors cannot be `f*xattr`ed; the
// magic link reaches the object itself, a symlink included).

/// Whether the file system of `root` takes user extended attributes: asking for the size of a
/// name nobody sets answers ENODATA where they exist and EOPNOTSUPP where they do not.
pub(crate) fn user_xattrs_supported(root: BorrowedFd<'_>) -> bool {
    match getxattr_fd(root, c"user.sluice-probe", &mut []) {
        Ok(_) => true,
        Err(e) => e.raw_os_error() != Some(libc::EOPNOTSUPP),
    }
}

/// `getxattr("/proc/self/fd/N", name, buf)`: the value's length; with an empty `buf`, the size
/// of the value without reading it.
pub(crate) fn getxattr_fd(fd: BorrowedFd<'_>, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    let path = proc_fd_path(fd);
    // SAFETY: NUL-terminated strings; `buf` is valid for `buf.len()` bytes.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    cvt_size(n)
}

/// `setxattr("/proc/self/fd/N", name, value, flags)` (`XATTR_CREATE`, `XATTR_REPLACE` or 0).
pub(crate) fn setxattr_fd(
    fd: BorrowedFd<'_>,
    name: &CStr,
    value: &[u8],
    flags: libc::c_int,
) -> io::Result<()> {
    let path = proc_fd_path(fd);
    // SAFETY: NUL-terminated strings; `value` is valid for `value.len()` bytes.
    let r = unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    };
    cvt(r).map(drop)
}

/// `listxattr("/proc/self/fd/N", buf)`: the bytes of `NAME\0` entries written.
pub(crate) fn listxattr_fd(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    let path = proc_fd_path(fd);
    // SAFETY: NUL-terminated path; `buf` is valid for `buf.len()` bytes.
    let n = unsafe { libc::listxattr(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    cvt_size(n)
}

/// `removexattr("/proc/self/fd/N", name)`.
pub(crate) fn removexattr_fd(fd: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    let path = proc_fd_path(fd);
    // SAFETY: NUL-terminated strings.
    cvt(unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) }).map(drop)
}

/// A time for [`set_times`]: `None` leaves it, `Some(None)` is "now", `Some(Some((s, ns)))` is a
/// given time.
pub(crate) type TimeSpec = Option<Option<(i64, u32)>>;

fn timespec(t: TimeSpec) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(None) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(Some((s, ns))) => libc::timespec {
            tv_sec: s,
            tv_nsec: ns as libc::c_long,
        },
    }
}

/// `utimensat(fd, "", times, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)`.
pub(crate) fn set_times(fd: BorrowedFd<'_>, atime: TimeSpec, mtime: TimeSpec) -> io::Result<()> {
    let times = [timespec(atime), timespec(mtime)];
    // SAFETY: `times` holds two timespecs; static empty string. The raw system call is used
    // because glibc treats an empty path specially on some versions.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_utimensat,
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            times.as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    cvt_long(ret).map(drop)
}

pub(crate) fn ftruncate(fd: BorrowedFd<'_>, size: u64) -> io::Result<()> {
    let size = i64::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: integer arguments.
    retry(|| cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), size) }).map(drop))
}

/// One `preadv2(2)` of at most `IOV_MAX` buffers with `RWF_*` flags; returns the bytes read
/// (0 at end of file).
pub(crate) fn preadv2(
    fd: BorrowedFd<'_>,
    bufs: &mut [std::io::IoSliceMut<'_>],
    offset: u64,
    flags: libc::c_int,
) -> io::Result<usize> {
    let n = bufs.len().min(libc::UIO_MAXIOV as usize);
    let offset = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    retry(|| {
        // SAFETY: `IoSliceMut` is ABI-compatible with `struct iovec` and each one describes a
        // live, exclusively borrowed buffer.
        let ret = unsafe {
            libc::preadv2(
                fd.as_raw_fd(),
                bufs.as_mut_ptr().cast::<libc::iovec>(),
                n as libc::c_int,
                offset,
                flags,
            )
        };
        cvt_size(ret)
    })
}

/// One `pwritev2(2)` of at most `IOV_MAX` buffers with `RWF_*` flags; returns the bytes written.
pub(crate) fn pwritev2(
    fd: BorrowedFd<'_>,
    bufs: &[std::io::IoSlice<'_>],
    offset: u64,
    flags: libc::c_int,
) -> io::Result<usize> {
    let n = bufs.len().min(libc::UIO_MAXIOV as usize);
    let offset = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    retry(|| {
        // SAFETY: `IoSlice` is ABI-compatible with `struct iovec`; each describes a live buffer.
        let ret = unsafe {
            libc::pwritev2(
                fd.as_raw_fd(),
                bufs.as_ptr().cast::<libc::iovec>(),
                n as libc::c_int,
                offset,
                flags,
            )
        };
        cvt_size(ret)
    })
}

pub(crate) fn fsync(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: integer argument.
    retry(|| cvt(unsafe { libc::fsync(fd.as_raw_fd()) }).map(drop))
}

pub(crate) fn fdatasync(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: integer argument.
    retry(|| cvt(unsafe { libc::fdatasync(fd.as_raw_fd()) }).map(drop))
}

/// `sync_file_range(fd, offset, len, WAIT_BEFORE | WRITE | WAIT_AFTER)`: writes the range's dirty
/// pages and waits for them. Does not flush metadata or the disk cache; callers follow it with
/// [`fdatasync`]. `len == 0` means "to the end of the file".
pub(crate) fn sync_range(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    let offset = i64::try_from(offset).unwrap_or(i64::MAX);
    let len = i64::try_from(len).unwrap_or(0);
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: integer arguments.
    retry(|| cvt(unsafe { libc::sync_file_range(fd.as_raw_fd(), offset, len, flags) }).map(drop))
}

/// `posix_fadvise(fd, offset, len, POSIX_FADV_WILLNEED)`: starts readahead of the range into
/// the page cache and returns without waiting for the data.
pub(crate) fn fadvise_willneed(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    let offset = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    // SAFETY: integer arguments.
    let ret =
        unsafe { libc::posix_fadvise(fd.as_raw_fd(), offset, len, libc::POSIX_FADV_WILLNEED) };
    // posix_fadvise returns the error number instead of setting errno.
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(ret))
    }
}

pub(crate) fn lseek_set(fd: BorrowedFd<'_>, offset: u64) -> io::Result<()> {
    // Directory offsets are opaque 64-bit cookies (ext4 hashes use all 63 bits), passed through.
    // SAFETY: integer arguments.
    let ret = unsafe { libc::lseek(fd.as_raw_fd(), offset as i64, libc::SEEK_SET) };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// One `getdents64(2)` into `buf`; returns the bytes filled (0 at the end of the directory).
pub(crate) fn getdents64(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    retry(|| {
        // SAFETY: `buf` is valid for `buf.len()` bytes.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                fd.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        cvt_long(ret).map(|n| n as usize)
    })
}

/// One `linux_dirent64`.
pub(crate) struct Dirent<'a> {
    pub(crate) ino: u64,
    pub(crate) off: u64,
    pub(crate) name: &'a [u8],
}

/// Parses the records `getdents64` wrote: `d_ino` u64, `d_off` i64, `d_reclen` u16, `d_type`
/// u8, then the NUL-terminated name, padded to `d_reclen`.
pub(crate) struct Dirents<'a> {
    buf: &'a [u8],
}

impl<'a> Dirents<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Dirents { buf }
    }
}

impl<'a> Iterator for Dirents<'a> {
    type Item = Dirent<'a>;

    fn next(&mut self) -> Option<Dirent<'a>> {
        const NAME_AT: usize = 19;
        let b = self.buf;
        if b.len() < NAME_AT {
            return None;
        }
        let ino = u64::from_ne_bytes(b[0..8].try_into().ok()?);
        let off = u64::from_ne_bytes(b[8..16].try_into().ok()?);
        let reclen = u16::from_ne_bytes(b[16..18].try_into().ok()?) as usize;
        if reclen < NAME_AT || reclen > b.len() {
            debug_assert!(false, "malformed dirent record");
            return None;
        }
        let raw = &b[NAME_AT..reclen];
        let name = &raw[..raw.iter().position(|&c| c == 0).unwrap_or(raw.len())];
        self.buf = &b[reclen..];
        Some(Dirent { ino, off, name })
    }
}

/// Fills `buf` from the kernel's random number generator.
pub(crate) fn getrandom(buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is valid for `rest.len()` bytes.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        match cvt_size(n) {
            Ok(n) => done += n,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// An all-zero `struct statx`, for tests of attribute logic.
#[cfg(test)]
pub(crate) fn zeroed_statx() -> libc::statx {
    // SAFETY: `statx` is plain integers; all-zero is a valid value.
    unsafe { MaybeUninit::<libc::statx>::zeroed().assume_init() }
}

/// The page size in bytes (4 KiB on x86-64; 16 or 64 KiB on some arm64 kernels).
pub(crate) fn page_size() -> u64 {
    // SAFETY: integer argument.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(v).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// Linux `makedev()` for a 64-bit `dev_t`.
pub(crate) fn makedev(major: u32, minor: u32) -> u64 {
    let (major, minor) = (major as u64, minor as u64);
    ((major & 0xffff_f000) << 32)
        | ((major & 0x0000_0fff) << 8)
        | ((minor & 0xffff_ff00) << 12)
        | (minor & 0x0000_00ff)
}

/// `lseek(2)` with `SEEK_DATA` (`data`) or `SEEK_HOLE`: the first offset at or after `offset`
/// where data (or a hole) starts. ENXIO when `offset` is at or past the end, or (`SEEK_DATA`)
/// only a hole follows it.
pub(crate) fn lseek_data_or_hole(fd: BorrowedFd<'_>, offset: u64, data: bool) -> io::Result<u64> {
    let whence = if data {
        libc::SEEK_DATA
    } else {
        libc::SEEK_HOLE
    };
    let offset = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::ENXIO))?;
    // SAFETY: integer arguments.
    let ret = unsafe { libc::lseek(fd.as_raw_fd(), offset, whence) };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as u64)
    }
}

/// `fallocate(2)`: `punch` deallocates (`FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`, the size
/// never changes), otherwise allocates (mode 0, which extends the size past the end).
pub(crate) fn fallocate(fd: BorrowedFd<'_>, punch: bool, offset: u64, len: u64) -> io::Result<()> {
    let mode = if punch {
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE
    } else {
        0
    };
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return Err(io::Error::from_raw_os_error(libc::EFBIG));
    };
    retry(|| {
        // SAFETY: integer arguments.
        let ret = unsafe { libc::fallocate(fd.as_raw_fd(), mode, offset, len) };
        if ret < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    })
}

/// One `copy_file_range(2)` of up to `len` bytes; returns the bytes copied (0 at the source's
/// end). The kernel may copy less than asked: callers loop.
pub(crate) fn copy_file_range(
    src: BorrowedFd<'_>,
    src_offset: u64,
    dst: BorrowedFd<'_>,
    dst_offset: u64,
    len: usize,
) -> io::Result<usize> {
    let (Ok(mut off_in), Ok(mut off_out)) = (i64::try_from(src_offset), i64::try_from(dst_offset))
    else {
        return Err(io::Error::from_raw_os_error(libc::EFBIG));
    };
    retry(|| {
        // SAFETY: the offsets are live locals for the duration of the call; the descriptors are
        // borrowed from live owners.
        let ret = unsafe {
            libc::copy_file_range(
                src.as_raw_fd(),
                &mut off_in,
                dst.as_raw_fd(),
                &mut off_out,
                len,
                0,
            )
        };
        if ret < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(ret as usize)
        }
    })
}

/// `struct file_clone_range` of `<linux/fs.h>`.
#[repr(C)]
struct FileCloneRange {
    src_fd: i64,
    src_offset: u64,
    src_length: u64,
    dest_offset: u64,
}

/// `FICLONERANGE` = `_IOW(0x94, 13, struct file_clone_range)`: direction write (1 << 30), the
/// 32-byte argument size (<< 16), type 0x94 (<< 8), number 13.
const FICLONERANGE: libc::c_ulong = (1 << 30) | (32 << 16) | (0x94 << 8) | 13;

/// `ioctl(dst, FICLONERANGE)`: shares `len` bytes of `src` from `src_offset` into `dst` at
/// `dst_offset` (`len == 0`: to the source's end). EOPNOTSUPP (or ENOTTY, EXDEV) where the file
/// system has no reflinks; EINVAL for ranges not aligned to its block size.
pub(crate) fn clone_range(
    src: BorrowedFd<'_>,
    src_offset: u64,
    dst: BorrowedFd<'_>,
    dst_offset: u64,
    len: u64,
) -> io::Result<()> {
    let arg = FileCloneRange {
        src_fd: i64::from(src.as_raw_fd()),
        src_offset,
        src_length: len,
        dest_offset: dst_offset,
    };
    retry(|| {
        // SAFETY: `arg` is a live, correctly laid out `file_clone_range` the kernel only reads.
        let ret = unsafe { libc::ioctl(dst.as_raw_fd(), FICLONERANGE as _, &arg) };
        if ret < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    })
}
const _: () = assert!(std::mem::size_of::<FileCloneRange>() == 32);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn makedev_matches_glibc_layout() {
        assert_eq!(makedev(8, 1), 0x801);
        assert_eq!(makedev(0x1234, 0x56789), 0x0000_1000_5672_3489);
    }
}
