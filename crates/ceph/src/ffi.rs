//! The libcephfs calls sluice uses, loaded at run time.
//!
//! # Why loaded, not linked
//! A `sluice` binary must start on a machine without Ceph, and serve local directories there;
//! only a Ceph export needs libcephfs. So nothing links against it: [`Lib::load`] opens
//! `libcephfs.so.2` with `dlopen` the first time a Ceph export is configured and looks up each
//! symbol below once. A missing library is an error that names the Debian package to install.
//!
//! # Layouts
//! Only what crosses the boundary is declared, as libcephfs.h (Ceph 16) declares it when
//! compiled with `_FILE_OFFSET_BITS=64`, as the header requires: `struct ceph_statx`, the
//! `vinodeno_t` pair, the callback table, and libc's own `struct dirent`, `struct flock` and
//! `struct statvfs` (64-bit layouts on the 64-bit targets we build for). Every Ceph object is an
//! opaque pointer (`ceph_mount_info*`, `Inode*`, `Fh*`, `UserPerm*`, `ceph_dir_result*`).
//!
//! The calls are the low-level `ceph_ll_*` API that NFS gateways use: inode pointers instead of
//! paths, credentials per call, an inode lookup by number for handles whose inode is not cached
//! (`ceph_ll_lookup_inode`), byte-range locks on an open file (`ceph_ll_setlk`), and extended
//! attributes by inode (`ceph_ll_getxattr` and its family).
//! Debian 12's libcephfs does not export the newer non-blocking `ceph_ll_nonblocking_readv_writev`;
//! nothing here needs it.

use libc::{c_char, c_int, c_uint, c_void, dev_t, gid_t, mode_t, off_t, size_t, uid_t};
use std::ffi::CStr;

/// The library's file name (its soname): the ABI these declarations describe.
pub const LIBRARY: &str = "libcephfs.so.2";
/// The Debian package that ships [`LIBRARY`].
pub const PACKAGE: &str = "libcephfs2";

/// `CEPH_NOSNAP`: the snapshot id of the live ("head") version of an inode.
pub const NOSNAP: u64 = u64::MAX - 1;

pub const STATX_MODE: c_uint = 0x1;
pub const STATX_NLINK: c_uint = 0x2;
pub const STATX_UID: c_uint = 0x4;
pub const STATX_GID: c_uint = 0x8;
pub const STATX_RDEV: c_uint = 0x10;
pub const STATX_ATIME: c_uint = 0x20;
pub const STATX_MTIME: c_uint = 0x40;
pub const STATX_CTIME: c_uint = 0x80;
pub const STATX_INO: c_uint = 0x100;
pub const STATX_SIZE: c_uint = 0x200;
pub const STATX_BLOCKS: c_uint = 0x400;
pub const STATX_BASIC_STATS: c_uint = 0x7ff;
pub const STATX_VERSION: c_uint = 0x1000;
/// Everything an [`Attr`](sluice_vfs::Attr) is made of: the basic stats and the change counter.
pub const STATX_WANT: c_uint = STATX_BASIC_STATS | STATX_VERSION;

pub const SETATTR_MODE: c_int = 1 << 0;
pub const SETATTR_UID: c_int = 1 << 1;
pub const SETATTR_GID: c_int = 1 << 2;
pub const SETATTR_MTIME: c_int = 1 << 3;
pub const SETATTR_ATIME: c_int = 1 << 4;
pub const SETATTR_SIZE: c_int = 1 << 5;
pub const SETATTR_MTIME_NOW: c_int = 1 << 7;
pub const SETATTR_ATIME_NOW: c_int = 1 << 8;

/// `CEPH_RECLAIM_RESET`: `ceph_start_reclaim`'s only flag, drop the old session's state.
pub const RECLAIM_RESET: c_uint = 1;

/// `AT_SYMLINK_NOFOLLOW`, the flag the `ceph_ll_*` lookups take so a symlink is not followed.
pub const AT_SYMLINK_NOFOLLOW: c_uint = 0x100;

pub enum MountInfo {}
pub enum Inode {}
pub enum Fh {}
pub enum UserPerm {}
pub enum DirResult {}

/// `struct ceph_statx`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Statx {
    pub stx_mask: u32,
    pub stx_blksize: u32,
    pub stx_nlink: u32,
    pub stx_uid: u32,
    pub stx_gid: u32,
    pub stx_mode: u16,
    pub stx_ino: u64,
    pub stx_size: u64,
    pub stx_blocks: u64,
    pub stx_dev: dev_t,
    pub stx_rdev: dev_t,
    pub stx_atime: Timespec,
    pub stx_ctime: Timespec,
    pub stx_mtime: Timespec,
    pub stx_btime: Timespec,
    pub stx_version: u64,
}

/// `struct timespec` (64-bit `time_t`), with a `Default`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timespec {
    pub tv_sec: i64,
    pub tv_nsec: i64,
}

/// `vinodeno_t`: an inode number and a snapshot id ([`NOSNAP`] for the live inode).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Vino {
    pub ino: u64,
    pub snapid: u64,
}

/// `struct ceph_client_callback_args`.
#[repr(C)]
pub struct CallbackArgs {
    pub handle: *mut c_void,
    pub ino_cb: Option<unsafe extern "C" fn(*mut c_void, Vino, i64, i64)>,
    pub dentry_cb: Option<unsafe extern "C" fn(*mut c_void, Vino, Vino, *const c_char, size_t)>,
    pub switch_intr_cb: Option<unsafe extern "C" fn(*mut c_void, *mut c_void)>,
    pub remount_cb: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    pub umask_cb: Option<unsafe extern "C" fn(*mut c_void) -> mode_t>,
    pub ino_release_cb: Option<unsafe extern "C" fn(*mut c_void, Vino)>,
}

macro_rules! table {
    ($( $name:ident : fn($($arg:ty),*) $(-> $ret:ty)? ;)*) => {
        /// The loaded library: one function pointer per call used.
        #[allow(non_snake_case)]
        pub struct Lib {
            _handle: *mut c_void,
            $( pub $name: unsafe extern "C" fn($($arg),*) $(-> $ret)?, )*
        }

        impl Lib {
            fn resolve(handle: *mut c_void) -> Result<Lib, String> {
                Ok(Lib {
                    _handle: handle,
                    $( $name: {
                        let name = concat!(stringify!($name), "\0");
                        // SAFETY: dlsym with a NUL-terminated name on a live handle.
                        let p = unsafe { libc::dlsym(handle, name.as_ptr().cast()) };
                        if p.is_null() {
                            return Err(format!(
                                "{LIBRARY} has no symbol {} (Ceph 16 or later is needed)",
                                stringify!($name)
                            ));
                        }
                        // SAFETY: the symbol is the C function declared in libcephfs.h with
                        // this signature.
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(p) }
                    }, )*
                })
            }
        }
    };
}

table! {
    ceph_version: fn(*mut c_int, *mut c_int, *mut c_int) -> *const c_char;
    ceph_create: fn(*mut *mut MountInfo, *const c_char) -> c_int;
    ceph_conf_read_file: fn(*mut MountInfo, *const c_char) -> c_int;
    ceph_conf_set: fn(*mut MountInfo, *const c_char, *const c_char) -> c_int;
    ceph_conf_get: fn(*mut MountInfo, *const c_char, *mut c_char, size_t) -> c_int;
    ceph_init: fn(*mut MountInfo) -> c_int;
    ceph_select_filesystem: fn(*mut MountInfo, *const c_char) -> c_int;
    ceph_mount: fn(*mut MountInfo, *const c_char) -> c_int;
    ceph_unmount: fn(*mut MountInfo) -> c_int;
    ceph_release: fn(*mut MountInfo) -> c_int;
    ceph_set_uuid: fn(*mut MountInfo, *const c_char);
    ceph_set_session_timeout: fn(*mut MountInfo, c_uint);
    ceph_start_reclaim: fn(*mut MountInfo, *const c_char, c_uint) -> c_int;
    ceph_finish_reclaim: fn(*mut MountInfo);
    ceph_ll_register_callbacks: fn(*mut MountInfo, *mut CallbackArgs);
    ceph_userperm_new: fn(uid_t, gid_t, c_int, *mut gid_t) -> *mut UserPerm;
    ceph_userperm_destroy: fn(*mut UserPerm);
    ceph_ll_lookup_root: fn(*mut MountInfo, *mut *mut Inode) -> c_int;
    ceph_ll_lookup_inode: fn(*mut MountInfo, u64, *mut *mut Inode) -> c_int;
    ceph_ll_lookup_vino: fn(*mut MountInfo, Vino, *mut *mut Inode) -> c_int;
    ceph_ll_lookup: fn(*mut MountInfo, *mut Inode, *const c_char, *mut *mut Inode, *mut Statx, c_uint, c_uint, *const UserPerm) -> c_int;
    ceph_ll_walk: fn(*mut MountInfo, *const c_char, *mut *mut Inode, *mut Statx, c_uint, c_uint, *const UserPerm) -> c_int;
    ceph_ll_put: fn(*mut MountInfo, *mut Inode) -> c_int;
    ceph_ll_getattr: fn(*mut MountInfo, *mut Inode, *mut Statx, c_uint, c_uint, *const UserPerm) -> c_int;
    ceph_ll_setattr: fn(*mut MountInfo, *mut Inode, *mut Statx, c_int, *const UserPerm) -> c_int;
    ceph_ll_open: fn(*mut MountInfo, *mut Inode, c_int, *mut *mut Fh, *const UserPerm) -> c_int;
    ceph_ll_close: fn(*mut MountInfo, *mut Fh) -> c_int;
    ceph_ll_read: fn(*mut MountInfo, *mut Fh, i64, u64, *mut c_char) -> c_int;
    ceph_ll_write: fn(*mut MountInfo, *mut Fh, i64, u64, *const c_char) -> c_int;
    ceph_ll_readv: fn(*mut MountInfo, *mut Fh, *const libc::iovec, c_int, i64) -> i64;
    ceph_ll_writev: fn(*mut MountInfo, *mut Fh, *const libc::iovec, c_int, i64) -> i64;
    ceph_ll_fsync: fn(*mut MountInfo, *mut Fh, c_int) -> c_int;
    ceph_ll_fallocate: fn(*mut MountInfo, *mut Fh, c_int, i64, i64) -> c_int;
    ceph_ll_lseek: fn(*mut MountInfo, *mut Fh, off_t, c_int) -> off_t;
    ceph_ll_create: fn(*mut MountInfo, *mut Inode, *const c_char, mode_t, c_int, *mut *mut Inode, *mut *mut Fh, *mut Statx, c_uint, c_uint, *const UserPerm) -> c_int;
    ceph_ll_mknod: fn(*mut MountInfo, *mut Inode, *const c_char, mode_t, dev_t, *mut *mut Inode, *mut Statx, c_uint, c_uint, *const UserPerm) -> c_int;
    ceph_ll_mkdir: fn(*mut MountInfo, *mut Inode, *const c_char, mode_t, *mut *mut Inode, *mut Statx, c_uint, c_uint, *const UserPerm) -> c_int;
    ceph_ll_symlink: fn(*mut MountInfo, *mut Inode, *const c_char, *const c_char, *mut *mut Inode, *mut Statx, c_uint, c_uint, *const UserPerm) -> c_int;
    ceph_ll_readlink: fn(*mut MountInfo, *mut Inode, *mut c_char, size_t, *const UserPerm) -> c_int;
    ceph_ll_link: fn(*mut MountInfo, *mut Inode, *mut Inode, *const c_char, *const UserPerm) -> c_int;
    ceph_ll_unlink: fn(*mut MountInfo, *mut Inode, *const c_char, *const UserPerm) -> c_int;
    ceph_ll_rmdir: fn(*mut MountInfo, *mut Inode, *const c_char, *const UserPerm) -> c_int;
    ceph_ll_rename: fn(*mut MountInfo, *mut Inode, *const c_char, *mut Inode, *const c_char, *const UserPerm) -> c_int;
    ceph_ll_opendir: fn(*mut MountInfo, *mut Inode, *mut *mut DirResult, *const UserPerm) -> c_int;
    ceph_ll_releasedir: fn(*mut MountInfo, *mut DirResult) -> c_int;
    ceph_readdirplus_r: fn(*mut MountInfo, *mut DirResult, *mut libc::dirent, *mut Statx, c_uint, c_uint, *mut *mut Inode) -> c_int;
    ceph_seekdir: fn(*mut MountInfo, *mut DirResult, i64);
    ceph_ll_statfs: fn(*mut MountInfo, *mut Inode, *mut libc::statvfs) -> c_int;
    ceph_ll_getlk: fn(*mut MountInfo, *mut Fh, *mut libc::flock, u64) -> c_int;
    ceph_ll_setlk: fn(*mut MountInfo, *mut Fh, *mut libc::flock, u64, c_int) -> c_int;
    ceph_ll_getxattr: fn(*mut MountInfo, *mut Inode, *const c_char, *mut c_void, size_t, *const UserPerm) -> c_int;
    ceph_ll_setxattr: fn(*mut MountInfo, *mut Inode, *const c_char, *const c_void, size_t, c_int, *const UserPerm) -> c_int;
    ceph_ll_listxattr: fn(*mut MountInfo, *mut Inode, *mut c_char, size_t, *mut size_t, *const UserPerm) -> c_int;
    ceph_ll_removexattr: fn(*mut MountInfo, *mut Inode, *const c_char, *const UserPerm) -> c_int;
}

// SAFETY: the table holds a dlopen handle (never closed) and function pointers; libcephfs's
// calls are thread-safe on one mount (the client takes its own lock).
unsafe impl Send for Lib {}
unsafe impl Sync for Lib {}

impl Lib {
    /// Opens [`LIBRARY`] and resolves every call, once per process (later calls share it).
    pub fn load() -> Result<&'static Lib, String> {
        static LIB: std::sync::OnceLock<Result<Lib, String>> = std::sync::OnceLock::new();
        LIB.get_or_init(|| Lib::open(LIBRARY))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Opens the library file `name` and resolves every call (the handle is never closed).
    fn open(name: &str) -> Result<Lib, String> {
        let cname = format!("{name}\0");
        // SAFETY: a NUL-terminated name; RTLD_NOW fails here rather than at a later call.
        let handle = unsafe { libc::dlopen(cname.as_ptr().cast(), libc::RTLD_NOW) };
        if handle.is_null() {
            // SAFETY: dlerror returns a thread-local message or NULL.
            let why = unsafe { libc::dlerror() };
            let why = if why.is_null() {
                String::new()
            } else {
                // SAFETY: non-null, NUL-terminated by dlerror.
                unsafe { CStr::from_ptr(why) }
                    .to_string_lossy()
                    .into_owned()
            };
            return Err(format!(
                "cannot load {name} ({why}): install the Debian package {PACKAGE} \
                 (or run scripts/install-deps.sh)"
            ));
        }
        Lib::resolve(handle)
    }

    /// The library's version string ("16.2.15").
    pub fn version(&self) -> String {
        let (mut a, mut b, mut c) = (0, 0, 0);
        // SAFETY: out-pointers to locals; returns a static string.
        let s = unsafe { (self.ceph_version)(&mut a, &mut b, &mut c) };
        if s.is_null() {
            return format!("{a}.{b}.{c}");
        }
        // SAFETY: non-null, static, NUL-terminated.
        unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_names_the_package_to_install() {
        let err = match Lib::open("libcephfs-not-here.so.9") {
            Ok(_) => panic!("loaded a library that does not exist"),
            Err(e) => e,
        };
        assert!(err.contains("libcephfs-not-here.so.9"), "{err}");
        assert!(err.contains(PACKAGE), "{err}");
    }

    #[test]
    fn statx_has_the_c_layout() {
        // offsetof values of struct ceph_statx on x86_64 and aarch64 (LP64, 64-bit dev_t).
        assert_eq!(std::mem::offset_of!(Statx, stx_mode), 20);
        assert_eq!(std::mem::offset_of!(Statx, stx_ino), 24);
        assert_eq!(std::mem::offset_of!(Statx, stx_dev), 48);
        assert_eq!(std::mem::offset_of!(Statx, stx_atime), 64);
        assert_eq!(std::mem::offset_of!(Statx, stx_version), 128);
        assert_eq!(std::mem::size_of::<Statx>(), 136);
    }
}
