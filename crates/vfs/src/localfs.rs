//! [`LocalFs`]: one exported directory of the local file system.
//!
//! # Rules every procedure follows
//! * **Handles are resolved as root, operations run as the client.** `open_by_handle_at` needs
//!   CAP_DAC_READ_SEARCH, so the handle becomes an `O_PATH` descriptor first; then a
//!   [`CredGuard`] switches the thread to the caller's fsuid/fsgid/groups and the operation is a
//!   `*at()` call relative to that descriptor, checked by the kernel. Where the kernel cannot
//!   check (I/O on a descriptor the server opened), the check is explicit: `faccessat2` with
//!   `AT_EACCESS` under the caller's credentials, plus knfsd's *owner override* (the owner may
//!   read and write their file whatever its mode, so that "create 0444, then write" works, as it
//!   does locally with an open descriptor).
//! * **Names are one component.** Empty names, `/` and NUL are `FsError::Acces`, names over 255 bytes
//!   `FsError::NameTooLong`. Final symlinks are never followed (`O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW`).
//!   `..` of the export root is the root (as knfsd), so no name leads out of the export.
//! * **Weak cache consistency** (RFC 1813 §2.6): `before` is taken before the change, `after` once
//!   it is done, with nothing cached in between. Concurrent changes by others may fall between
//!   them, as with any server.
//! * **Read-only exports** answer `FsError::RoFs` to every modifying procedure (after the handle is
//!   found valid, so a stale handle is still `FsError::Stale`).
//! * **Nested mounts are not exported**: objects on another mount than the export root are not
//!   given handles; LOOKUP of a mount point answers `FsError::Acces` and READDIRPLUS omits its
//!   attributes and handle (as knfsd without `crossmnt`, except that knfsd shows the covered
//!   directory, which user space cannot reach).
//! * **Mode when the client sends none** is 0 (as knfsd); objects are created with exactly the
//!   mode the client sent (the thread's umask is 0, see `creds`).
//!
//! # READ and WRITE
//! Both go through the open-file cache and then the export's cache mode (`iomode`: buffered,
//! `RWF_DONTCACHE`, or `O_DIRECT` on an aligned middle with buffered head and tail, each falling
//! back to buffered with one warning when the file system refuses). The mode changes what stays
//! in the page cache, never the bytes, the `eof` flag or the stability a WRITE or COMMIT promises.
//!
//! # READDIR cookies
//! A cookie is the file system's own directory offset (`d_off` from `getdents64`, resumed with
//! `lseek`), which is what knfsd sends: ext4 hashes and tmpfs offsets stay valid when other
//! entries are added or removed, so a long listing is neither restarted nor duplicated by
//! concurrent changes. The cookie verifier is a keyed digest of the directory's kernel handle:
//! constant for the life of the directory, so a client is never told `FsError::BadCookie` merely
//! because the directory changed (a verifier built from the mtime would do that on every change,
//! and Linux clients then restart or truncate their listing). A verifier of zero is accepted, as
//! RFC 1813 §3.3.16 allows for the first request.

// The failure side of every procedure carries the failure reply's body (attributes, wcc data),
// which is as large as the success side; boxing it would add an allocation to every error reply.
#![allow(clippy::result_large_err)]

use super::attr::{self, dev_ino, is_dir, is_lnk, is_reg};
use super::creds::{Cred, CredGuard};
use super::exports::{squash, ExportOptions, IoMode, IoModes};
use super::handle::{self, Decoded, ExportId, HandleKey, Kind};
use super::iomode::ModeIo;
use super::openfiles::{DirectFd, OpenFile, OpenFiles, OPEN_FILES_DEFAULT};
use super::sys::{self, KernelHandle};
use crate::types::{
    Attr, DeviceId, FileHandle, FileType, FsError, Res, SetAttr, SetTime, Time, Wcc, WccAttr,
};
use bytes::Bytes;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the server keeps its state (the handle secret) unless configured otherwise. The server
/// runs as root, so the FHS location for variable state is used rather than `$XDG_STATE_HOME`.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/sluice";
/// Longest file name (bytes), as Linux `NAME_MAX`.
pub const NAME_MAX: usize = 255;
/// Longest symlink target (bytes): Linux `PATH_MAX` minus the terminating NUL.
pub const SYMLINK_TARGET_MAX: usize = 4095;

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

/// Configuration of one export.
#[derive(Debug, Clone)]
pub struct LocalFsConfig {
    /// The exported directory.
    pub path: PathBuf,
    /// The server's state directory; the handle secret is `<state_dir>/secret`. Default
    /// [`DEFAULT_STATE_DIR`].
    pub state_dir: PathBuf,
    /// The export id written into handles and used as `fsid`. Default: derived from the
    /// canonical path ([`ExportId::from_path`]); `fsid=N` in exports sets it.
    pub export_id: Option<ExportId>,
    /// FSINFO `rtmax`/`rtpref`, bytes. Default [`IO_BYTES_MAX_DEFAULT`].
    pub read_bytes_max: u32,
    /// FSINFO `wtmax`/`wtpref`, bytes. Default [`IO_BYTES_MAX_DEFAULT`].
    pub write_bytes_max: u32,
    /// FSINFO `dtpref`, bytes. Default [`READDIR_BYTES_PREF_DEFAULT`].
    pub readdir_bytes_pref: u32,
    /// Open descriptors cached for READ/WRITE/COMMIT. Default [`OPEN_FILES_DEFAULT`]. A file
    /// with an O_DIRECT twin holds two (every file with O_DIRECT in either direction, and files
    /// opened for a WRITE on a buffered-write export, whose streaming writes go direct), so
    /// then half as many files are cached.
    pub open_files_max: usize,
    /// How READ and WRITE reach the disk (`io=`, `io_read=`, `io_write=` in exports, `--io`,
    /// `--io-read`, `--io-write`). Default buffered both ways; see the `iomode` module for the
    /// others and their fallbacks.
    pub io: IoModes,
}

impl LocalFsConfig {
    pub fn new(path: impl Into<PathBuf>) -> LocalFsConfig {
        LocalFsConfig {
            path: path.into(),
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            export_id: None,
            read_bytes_max: IO_BYTES_MAX_DEFAULT,
            write_bytes_max: IO_BYTES_MAX_DEFAULT,
            readdir_bytes_pref: READDIR_BYTES_PREF_DEFAULT,
            open_files_max: OPEN_FILES_DEFAULT,
            io: IoModes::both(IoMode::Buffered),
        }
    }

    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = dir.into();
        self
    }

    pub fn export_id(mut self, id: ExportId) -> Self {
        self.export_id = Some(id);
        self
    }

    pub fn open_files_max(mut self, n: usize) -> Self {
        self.open_files_max = n;
        self
    }

    /// The same mode for READ and WRITE.
    pub fn io_mode(mut self, mode: IoMode) -> Self {
        self.io = IoModes::both(mode);
        self
    }

    pub fn io_modes(mut self, modes: IoModes) -> Self {
        self.io = modes;
        self
    }
}

/// Why an export cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{0}: not a directory")]
    NotADirectory(PathBuf),
    #[error("{path}: the file system does not support file handles: {source}")]
    NoHandles { path: PathBuf, source: io::Error },
    #[error("state directory {path}: {source}")]
    State { path: PathBuf, source: io::Error },
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

/// What [`LocalFs::read_nowait`] did.
pub enum NowaitRead {
    /// Answered from the page cache (or refused).
    Done(Res<ReadOk, Option<Attr>>),
    /// Not all cached: the file, checked for this caller, to read asynchronously.
    NeedsDisk(CheckedRead),
}

/// A file checked for one READ by [`LocalFs::read_nowait`], with its attributes as checked.
pub struct CheckedRead {
    pub file: Arc<OpenFile>,
    pre: libc::statx,
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

/// One exported directory.
pub struct LocalFs {
    /// The export root, `O_RDONLY`: the mount descriptor for `open_by_handle_at`. Never read
    /// from (its directory offset is shared by every dup).
    root: OwnedFd,
    root_id: (u64, u64),
    root_mnt_id: u64,
    root_kh: KernelHandle,
    root_fh: FileHandle,
    /// The export root is the root of its file system, so every object of the mount is inside
    /// and confinement needs no check.
    whole_fs: bool,
    /// [`LocalFs::clone_blksize`], from `fstatfs` of the root at start.
    clone_blksize: u32,
    key: HandleKey,
    fsid: u64,
    files: OpenFiles,
    /// The cache mode and its fallbacks; does every READ and WRITE.
    modes: ModeIo,
    /// The WRITE/COMMIT verifier, as a big-endian u64 so it can change without a lock.
    write_verifier: std::sync::atomic::AtomicU64,
    config: LocalFsConfig,
}

/// A resolved handle: a descriptor (usually `O_PATH`), its attributes, its kernel handle.
struct Obj {
    fd: OwnedFd,
    st: libc::statx,
    kh: KernelHandle,
}

/// An object just found by name (no handle yet): an `O_PATH` descriptor and its attributes.
struct Found {
    fd: OwnedFd,
    st: libc::statx,
}

impl LocalFs {
    /// Opens an export: the directory, the handle secret (created on first start) and the
    /// checks that the file system can serve persistent handles.
    pub fn new(config: LocalFsConfig) -> Result<LocalFs, SetupError> {
        let io_err = |source| SetupError::Io {
            path: config.path.clone(),
            source,
        };
        let path = std::fs::canonicalize(&config.path).map_err(io_err)?;
        let cpath = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io_err(io::Error::from_raw_os_error(libc::EINVAL)))?;
        // Not O_PATH: open_by_handle_at refuses an O_PATH descriptor as its mount descriptor.
        let root = sys::open_path(&cpath, libc::O_RDONLY | libc::O_DIRECTORY).map_err(|e| {
            if e.raw_os_error() == Some(libc::ENOTDIR) {
                SetupError::NotADirectory(path.clone())
            } else {
                io_err(e)
            }
        })?;
        let st = sys::statx(root.as_fd(), sys::EMPTY).map_err(io_err)?;
        let (root_kh, _) = sys::name_to_handle_at(root.as_fd(), sys::EMPTY, libc::AT_EMPTY_PATH)
            .map_err(|source| SetupError::NoHandles {
                path: path.clone(),
                source,
            })?;
        let secret = handle::load_or_create_secret(&config.state_dir).map_err(|source| {
            SetupError::State {
                path: config.state_dir.clone(),
                source,
            }
        })?;
        let export = config
            .export_id
            .unwrap_or_else(|| ExportId::from_path(&path));
        let key = HandleKey::new(&secret, export);
        let root_fh = key
            .encode(true, &root_kh, None)
            .ok_or_else(|| SetupError::NoHandles {
                path: path.clone(),
                source: io::Error::other(format!("unsupported handle type {:#x}", root_kh.ty)),
            })?;
        let mut write_verifier = [0u8; 8];
        sys::getrandom(&mut write_verifier).map_err(io_err)?;
        let whole_fs = mount_is_fs_root_at(st.stx_mnt_id, &path);
        // `__fsword_t` is i64 on 64-bit Linux and i32 elsewhere.
        #[allow(clippy::unnecessary_cast)]
        let clone_blksize = sys::fstatfs(root.as_fd())
            .map(|s| reflink_block_bytes(s.f_type as i64, s.f_bsize as i64))
            .unwrap_or(0);
        tracing::info!(
            path = %path.display(),
            export = export.0,
            whole_fs,
            clone_blksize,
            io_read = ?config.io.read,
            io_write = ?config.io.write,
            "export ready"
        );
        // A file holding an O_DIRECT twin costs two descriptors: every file on a direct export,
        // and on a buffered-write export every file opened for a WRITE (its streaming flushes
        // go direct, see iomode). Halving keeps the descriptors within the configured bound.
        let twins = config.io.uses_direct() || config.io.write == IoMode::Buffered;
        let open_files_max = if twins {
            (config.open_files_max / 2).max(1)
        } else {
            config.open_files_max
        };
        Ok(LocalFs {
            root,
            root_id: dev_ino(&st),
            root_mnt_id: st.stx_mnt_id,
            root_kh,
            root_fh,
            whole_fs,
            clone_blksize,
            key,
            fsid: u64::from(export.0),
            files: OpenFiles::new(open_files_max),
            modes: ModeIo::new(config.io, path.clone()),
            write_verifier: std::sync::atomic::AtomicU64::new(u64::from_be_bytes(write_verifier)),
            config: LocalFsConfig { path, ..config },
        })
    }

    /// The alignment CLONE (`FICLONERANGE`) needs on this export's file system: its block size
    /// where it has reflinks (see [`reflink_block_bytes`]), else 0.
    pub fn clone_blksize(&self) -> u32 {
        self.clone_blksize
    }

    /// The handle of the export root (for MOUNT).
    pub fn root_handle(&self) -> FileHandle {
        self.root_fh.clone()
    }

    pub fn export_id(&self) -> ExportId {
        self.key.export()
    }

    /// [`FileSystem::state_key`](crate::FileSystem::state_key): the export id and the kernel
    /// handle, without the parent hint (see [`handle::HandleKey::identity`]). The MAC is
    /// checked (no I/O), so forged bytes never name another file's state.
    pub fn state_key(&self, fh: &FileHandle) -> Bytes {
        handle::state_key(&self.key, fh.as_bytes())
    }

    /// The canonical path of the export.
    pub fn path(&self) -> &Path {
        &self.config.path
    }

    pub fn config(&self) -> &LocalFsConfig {
        &self.config
    }

    /// WRITE/COMMIT verifier: random per instance, so a restarted server tells clients to
    /// resend unstable data.
    pub fn write_verifier(&self) -> [u8; 8] {
        self.write_verifier
            .load(std::sync::atomic::Ordering::SeqCst)
            .to_be_bytes()
    }

    /// Draws a new write verifier. Called when data acknowledged as UNSTABLE could not be
    /// written (a failed write-behind flush): every client holding uncommitted data then sees a
    /// new verifier at its next COMMIT and resends, instead of being told that lost data is
    /// stable (knfsd resets its verifier on writeback errors for the same reason).
    pub fn reset_write_verifier(&self) {
        let mut v = [0u8; 8];
        if sys::getrandom(&mut v).is_err() {
            // Never fails on Linux ≥ 3.17 once the pool is initialised; still, any different
            // value does the job.
            v = (u64::from_be_bytes(self.write_verifier()) ^ 0x5a5a_5a5a_a5a5_a5a5).to_be_bytes();
        }
        self.write_verifier
            .store(u64::from_be_bytes(v), std::sync::atomic::Ordering::SeqCst);
        tracing::warn!(path = %self.config.path.display(), "write verifier changed after a lost write; clients will resend uncommitted data");
    }

    /// The cache mode of READs in effect: the configured one, or [`IoMode::Buffered`] once the
    /// file system refused it (learnt on first use, logged once).
    pub fn read_mode(&self) -> IoMode {
        self.modes.read_mode()
    }

    /// The cache mode of WRITEs in effect, as [`LocalFs::read_mode`].
    pub fn write_mode(&self) -> IoMode {
        self.modes.write_mode()
    }

    /// A hint that `len` bytes from `offset` of the file will be read soon: buffered and
    /// dontcache exports start reading them into the page cache (`POSIX_FADV_WILLNEED`, which
    /// queues the reads and returns); direct exports ignore it (their reads bypass the page
    /// cache). Only a file already in the open-file cache is hinted (it is, right after a READ of
    /// it); nothing is opened, checked or answered.
    pub fn readahead_hint(&self, fh: &FileHandle, offset: u64, len: u64) {
        if let Some(file) = self.files.get(fh.as_bytes()) {
            self.modes.readahead(&file, offset, len);
        }
    }

    /// The open-file cache (for statistics and tests).
    pub fn open_files(&self) -> &OpenFiles {
        &self.files
    }

    // --- Procedures --------------------------------------------------------------------------

    /// GETATTR (RFC 1813 §3.3.1). No permission is needed to read attributes. A file in the
    /// open-file cache is answered from its descriptor (clients revalidate open files often).
    pub fn getattr(&self, fh: &FileHandle) -> Result<Attr, FsError> {
        if let Some((_, st)) = self.cached_file(fh, false)? {
            return Ok(self.fattr(&st));
        }
        let obj = self.resolve(fh)?;
        Ok(self.fattr(&obj.st))
    }

    /// SETATTR (§3.3.2). `guard` is `sattrguard3`: the ctime the client believes the object has;
    /// a mismatch is `FsError::NotSync` and changes nothing.
    ///
    /// Order: size, owner, mode, times, so that a mode set with the owner survives the kernel
    /// clearing set-id bits on chown, and explicit times survive the truncate.
    pub fn setattr(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        sattr: &SetAttr,
        guard: Option<Time>,
    ) -> Res<Wcc, Wcc> {
        let obj = self.resolve(fh).map_err(|s| (s, Wcc::default()))?;
        let pre = attr::wcc(&obj.st);
        let fail = |s| (s, self.wcc_after(Some(pre), obj.fd.as_fd()));
        if guard.is_some_and(|ctime| ctime != pre.ctime) {
            return Err(fail(FsError::NotSync));
        }
        if caller.read_only {
            return Err(fail(FsError::RoFs));
        }
        let file = match sattr.size {
            Some(_) if is_dir(&obj.st) => return Err(fail(FsError::IsDir)),
            Some(_) if !is_reg(&obj.st) => return Err(fail(FsError::Inval)),
            Some(_) => Some(self.open_file(fh, true).map_err(fail)?.0),
            None => None,
        };
        {
            let _as = self.act_as(caller).map_err(fail)?;
            self.apply_sattr(
                obj.fd.as_fd(),
                &obj.st,
                file.as_deref(),
                sattr,
                &caller.cred,
            )
            .map_err(fail)?;
        }
        let post = sys::statx(obj.fd.as_fd(), sys::EMPTY).ok();
        if let (Some(file), Some(post)) = (&file, &post) {
            // Found inside the export by `resolve` above; the ctime change is our own.
            file.set_validated(ctime_stamp(post));
        }
        Ok(Wcc::new(Some(pre), post.map(|st| self.fattr(&st))))
    }

    /// LOOKUP (§3.3.3). Never follows a symlink; `..` of the export root is the root.
    pub fn lookup(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
    ) -> Res<LookupOk, Option<Attr>> {
        let d = self.resolve(dir).map_err(|s| (s, None))?;
        let fail = |s| (s, self.post_op(d.fd.as_fd()));
        if !is_dir(&d.st) {
            return Err(fail(FsError::NotDir));
        }
        let name = Name::parse(name).map_err(fail)?;
        let (fh, st) = {
            let _as = self.act_as(caller).map_err(fail)?;
            if name.is_dot() || (name.is_dotdot() && dev_ino(&d.st) == self.root_id) {
                // Looking up "." (or ".." at the root) still needs search permission.
                permitted(d.fd.as_fd(), &d.st, &caller.cred, libc::X_OK)
                    .map_err(|e| fail(errno(&e)))?;
                (None, d.st)
            } else {
                let flags = libc::O_PATH | libc::O_NOFOLLOW;
                let fd =
                    sys::openat(d.fd.as_fd(), name.c(), flags, 0).map_err(|e| fail(errno(&e)))?;
                let st = sys::statx(fd.as_fd(), sys::EMPTY).map_err(|e| fail(errno(&e)))?;
                (Some(fd), st)
            }
        };
        let fh = match fh {
            None if name.is_dot() => dir.clone(),
            None => self.root_fh.clone(),
            Some(fd) => self
                .handle_for(fd.as_fd(), &st, Some(&d.kh))
                .map_err(fail)?,
        };
        Ok(LookupOk {
            fh,
            attr: self.fattr(&st),
            dir_attr: self.post_op(d.fd.as_fd()),
        })
    }

    /// ACCESS (§3.3.4): which of the `requested` ACCESS3 bits the caller has, asked of the kernel
    /// under the caller's credentials. Modifying bits are never granted on a read-only export.
    /// DELETE is only meaningful (and only granted) for directories, as in knfsd.
    pub fn access(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        requested: u32,
    ) -> Res<(u32, Option<Attr>), Option<Attr>> {
        use access::*;
        let obj = self.resolve(fh).map_err(|s| (s, None))?;
        let dir = is_dir(&obj.st);
        let mut granted = 0;
        {
            let _as = self
                .act_as(caller)
                .map_err(|s| (s, self.post_op(obj.fd.as_fd())))?;
            let may = |mode| permitted(obj.fd.as_fd(), &obj.st, &caller.cred, mode).is_ok();
            if requested & READ != 0 && may(libc::R_OK) {
                granted |= READ;
            }
            if dir && requested & LOOKUP != 0 && may(libc::X_OK) {
                granted |= LOOKUP;
            }
            if !dir && requested & EXECUTE != 0 && may(libc::X_OK) {
                granted |= EXECUTE;
            }
            if !caller.read_only && requested & (MODIFY | EXTEND | DELETE) != 0 {
                if may(libc::W_OK) {
                    granted |= requested & (MODIFY | EXTEND);
                }
                if dir && requested & DELETE != 0 && may(libc::W_OK | libc::X_OK) {
                    granted |= DELETE;
                }
            }
        }
        Ok((granted & requested, self.post_op(obj.fd.as_fd())))
    }

    /// READLINK (§3.3.5). The target bytes, as stored.
    pub fn readlink(&self, fh: &FileHandle) -> Res<(Vec<u8>, Option<Attr>), Option<Attr>> {
        let obj = self.resolve(fh).map_err(|s| (s, None))?;
        let post = self.fattr(&obj.st);
        if !is_lnk(&obj.st) {
            return Err((FsError::Inval, Some(post)));
        }
        let target =
            sys::readlinkat(obj.fd.as_fd(), sys::EMPTY).map_err(|e| (errno(&e), Some(post)))?;
        Ok((target, Some(post)))
    }

    /// READ (§3.3.6) into the caller's buffers, filled in order, as the export's cache mode says
    /// (see `iomode`). Pass chunks of at most 64 KiB: buffered and dontcache reads allocate no
    /// data buffer; direct reads use pooled aligned buffers unless the caller's are aligned
    /// (address and length multiples of 4 KiB, and an aligned offset). `eof` is true when the
    /// read reached the end of the file.
    ///
    /// Permission: read permission, or execute permission on a regular file (a client must be
    /// able to load a binary it may only execute), or being the owner.
    pub fn read<B: AsMut<[u8]>>(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        bufs: &mut [B],
    ) -> Res<ReadOk, Option<Attr>> {
        let want: usize = bufs.iter_mut().map(|b| b.as_mut().len()).sum();
        self.read_with(caller, fh, offset, want, |file| {
            self.modes.read(file, offset, bufs)
        })
    }

    /// READ (§3.3.6) of up to `want` bytes at `offset` by `reader`, given the open file once
    /// the caller's permission is checked; it returns the bytes it read. For readers the cache
    /// modes do not cover (a splice into a pipe); the attributes are taken after it.
    pub fn read_with(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        want: usize,
        reader: impl FnOnce(&OpenFile) -> io::Result<usize>,
    ) -> Res<ReadOk, Option<Attr>> {
        let (file, st) = self
            .open_file(fh, false)
            .map_err(|s| (s, self.attr_or_none(fh)))?;
        self.check_read(caller, &file, &st)?;
        let count = reader(&file).map_err(|e| (errno(&e), self.post_op(file.as_fd())))?;
        let post = sys::statx(file.as_fd(), sys::EMPTY).map_err(|e| (errno(&e), None))?;
        let eof = count < want || offset.saturating_add(count as u64) >= post.stx_size;
        Ok(ReadOk {
            count,
            eof,
            attr: self.fattr(&post),
        })
    }

    /// READ (§3.3.6) that never waits for the disk, for async code: only a file in the
    /// open-file cache (and validated since its last change) of a buffered export, read with
    /// `RWF_NOWAIT` from the page cache. `None` when any of that does not hold: nothing happened,
    /// do the READ on a blocking thread instead. [`NowaitRead::NeedsDisk`] when all of it holds
    /// but the range is not all cached: the file, checked and ready for an asynchronous read
    /// whose result [`LocalFs::read_finish`] turns into the reply. With `try_cache` false the
    /// page cache is not tried: checked files are always `NeedsDisk`.
    pub fn read_nowait<B: AsMut<[u8]>>(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        bufs: &mut [B],
        try_cache: bool,
    ) -> Option<NowaitRead> {
        if self.read_mode() != IoMode::Buffered {
            return None;
        }
        let file = self.files.get(fh.as_bytes())?;
        let st = sys::statx(file.as_fd(), sys::EMPTY).ok()?;
        if st.stx_nlink == 0 || !file.validated_at(ctime_stamp(&st)) {
            return None;
        }
        if let Err(e) = self.check_read(caller, &file, &st) {
            return Some(NowaitRead::Done(Err(e)));
        }
        let checked = CheckedRead { file, pre: st };
        if !try_cache {
            return Some(NowaitRead::NeedsDisk(checked));
        }
        let mut slices: Vec<std::io::IoSliceMut<'_>> = bufs
            .iter_mut()
            .map(|b| std::io::IoSliceMut::new(b.as_mut()))
            .collect();
        let want: usize = slices.iter().map(|s| s.len()).sum();
        let fd = checked.file.as_fd();
        let count = match sys::preadv2(fd, &mut slices, offset, libc::RWF_NOWAIT) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                return Some(NowaitRead::NeedsDisk(checked))
            }
            Err(_) => return None,
        };
        match self.read_finish(&checked, offset, want, count) {
            Some(ok) => Some(NowaitRead::Done(Ok(ok))),
            // partly cached: the rest needs the disk
            None => Some(NowaitRead::NeedsDisk(checked)),
        }
    }

    /// The reply to a READ of `want` bytes at `offset` that read `count` bytes from the checked
    /// file without the blocking path. `None` when the read came back short before the end of the
    /// file: do it again on the blocking path.
    ///
    /// Post-op attributes: a READ that got all it asked for, inside the size seen when it was
    /// checked, answers with those attributes (one `statx` fewer per READ; ganesha answers from
    /// its attribute cache); a short READ, or one reaching past that size (the file grew in
    /// between), takes a fresh `statx` so that `eof` and the size agree with the data.
    pub fn read_finish(
        &self,
        checked: &CheckedRead,
        offset: u64,
        want: usize,
        count: usize,
    ) -> Option<ReadOk> {
        let end = offset.saturating_add(count as u64);
        if count == want && end <= checked.pre.stx_size {
            return Some(ReadOk {
                count,
                eof: end == checked.pre.stx_size,
                attr: self.fattr(&checked.pre),
            });
        }
        let post = sys::statx(checked.file.as_fd(), sys::EMPTY).ok()?;
        if count < want && end < post.stx_size {
            return None;
        }
        Some(ReadOk {
            count,
            eof: end >= post.stx_size,
            attr: self.fattr(&post),
        })
    }

    /// Read permission (see `may_read`). An owner needs no kernel check, so no credential switch
    /// either: the read itself goes through a descriptor already open.
    fn check_read(
        &self,
        caller: &Caller,
        file: &OpenFile,
        st: &libc::statx,
    ) -> Result<(), (FsError, Option<Attr>)> {
        if st.stx_uid == caller.cred.uid {
            return Ok(());
        }
        let _as = self.act_as(caller).map_err(|s| (s, Some(self.fattr(st))))?;
        may_read(file.as_fd(), st, &caller.cred).map_err(|s| (s, Some(self.fattr(st))))
    }

    /// WRITE (§3.3.7) of `data` (the payload's chunks, in order) at `offset`, with `pwritev2` as
    /// the export's cache mode says (see `iomode`).
    /// UNSTABLE leaves the data in the page cache; DATA_SYNC and FILE_SYNC make the written range
    /// durable before returning (`RWF_DSYNC` / `RWF_SYNC`: the range, its allocation metadata,
    /// and for FILE_SYNC all metadata, with a disk cache flush).
    pub fn write(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        data: &[Bytes],
        stable: StableHow,
    ) -> Res<WriteOk, Wcc> {
        self.write_as(caller, fh, offset, data, stable, None)
    }

    /// An UNSTABLE write that is part of a write-behind flush of `flush_bytes` contiguous
    /// bytes: a streaming flush goes O_DIRECT even on a buffered export (see the iomode
    /// module, "Streaming writes of a buffered export"). Otherwise exactly [`LocalFs::write`].
    pub fn write_flush(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        data: &[Bytes],
        flush_bytes: u64,
    ) -> Res<WriteOk, Wcc> {
        self.write_as(
            caller,
            fh,
            offset,
            data,
            StableHow::Unstable,
            Some(flush_bytes),
        )
    }

    fn write_as(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        data: &[Bytes],
        stable: StableHow,
        flush_bytes: Option<u64>,
    ) -> Res<WriteOk, Wcc> {
        let (file, st, pre) = self.open_to_change(caller, fh, true)?;
        let fail = |s| (s, self.wcc_after(Some(pre), file.as_fd()));
        let total: u64 = data.iter().map(|b| b.len() as u64).sum();
        if offset
            .checked_add(total)
            .is_none_or(|end| end > i64::MAX as u64)
        {
            return Err(fail(FsError::FBig));
        }
        let count = {
            let _as = self.act_as(caller).map_err(fail)?;
            may_write(file.as_fd(), &st, &caller.cred).map_err(fail)?;
            match flush_bytes {
                Some(n) => self.modes.write_flush(&file, offset, data, n),
                None => self.modes.write(&file, offset, data, stable),
            }
            .map_err(|e| fail(errno(&e)))?
        };
        let post = sys::statx(file.as_fd(), sys::EMPTY).ok();
        if let Some(post) = &post {
            file.advance_validated(ctime_stamp(&st), ctime_stamp(post));
        }
        Ok(WriteOk {
            count,
            committed: stable,
            wcc: Wcc::new(Some(pre), post.map(|p| self.fattr(&p))),
        })
    }

    /// SEEK (RFC 7862 §15.11): the first offset at or after `offset` where `what` starts, by
    /// `lseek(SEEK_DATA / SEEK_HOLE)`, which file systems without holes answer as if the file
    /// were all data. An offset at or past the end is [`FsError::Nxio`], as `lseek` answers;
    /// SEEK_DATA with only a hole after `offset` is not an error in NFSv4.2 but the size with
    /// `eof` set.
    pub fn seek(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        what: SeekWhat,
    ) -> Res<SeekOk, Option<Attr>> {
        let (file, st) = self
            .open_file(fh, false)
            .map_err(|s| (s, self.attr_or_none(fh)))?;
        self.check_read(caller, &file, &st)?;
        let size = st.stx_size;
        if offset >= size {
            return Err((FsError::Nxio, Some(self.fattr(&st))));
        }
        // The cached descriptor's file position moves; every reader and writer of it uses
        // positional I/O, so nothing else depends on it.
        match sys::lseek_data_or_hole(file.as_fd(), offset, what == SeekWhat::Data) {
            Ok(at) => Ok(SeekOk {
                offset: at,
                eof: at >= size,
            }),
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) && what == SeekWhat::Data => {
                Ok(SeekOk {
                    offset: size,
                    eof: true,
                })
            }
            Err(e) => Err((errno(&e), self.post_op(file.as_fd()))),
        }
    }

    /// ALLOCATE (RFC 7862 §15.1, `punch` false: `fallocate` mode 0, which extends the size) and
    /// DEALLOCATE (§15.4, `punch` true: `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`, the size
    /// never changes and the range reads as zeros). A file system without `fallocate` (or
    /// without hole punching) answers [`FsError::NotSupp`] (EOPNOTSUPP); a zero length is
    /// [`FsError::Inval`], as `fallocate` has it.
    pub fn allocate(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        len: u64,
        punch: bool,
    ) -> Res<Wcc, Wcc> {
        let (file, st, pre) = self.open_to_change(caller, fh, true)?;
        let fail = |s| (s, self.wcc_after(Some(pre), file.as_fd()));
        {
            let _as = self.act_as(caller).map_err(fail)?;
            may_write(file.as_fd(), &st, &caller.cred).map_err(fail)?;
            sys::fallocate(file.as_fd(), punch, offset, len).map_err(|e| fail(errno(&e)))?;
        }
        let post = sys::statx(file.as_fd(), sys::EMPTY).ok();
        if let Some(post) = &post {
            file.advance_validated(ctime_stamp(&st), ctime_stamp(post));
        }
        Ok(Wcc::new(Some(pre), post.map(|p| self.fattr(&p))))
    }

    /// COPY within this file system (RFC 7862 §15.2): up to `count` bytes (0: to the source's
    /// end) of `src` from `src_offset` to `dst` at `dst_offset`, by `copy_file_range`, which
    /// shares extents where the file system can and copies in the kernel otherwise. At most
    /// [`COPY_BYTES_MAX`], and never past the source's end (a source offset past it is
    /// [`FsError::Inval`], §15.2.3). Overlapping ranges of one file are [`FsError::Inval`]
    /// (the kernel's EINVAL). The attributes are the destination's.
    pub fn copy_range(
        &self,
        caller: &Caller,
        src: &FileHandle,
        src_offset: u64,
        dst: &FileHandle,
        dst_offset: u64,
        count: u64,
    ) -> Res<CopyOk, Wcc> {
        let (sfile, sst, dfile, dst_st) = self.two_files(caller, src, dst)?;
        let pre = attr::wcc(&dst_st);
        let fail = |s| (s, self.wcc_after(Some(pre), dfile.as_fd()));
        let Some(left) = sst.stx_size.checked_sub(src_offset) else {
            return Err(fail(FsError::Inval));
        };
        let want = match count {
            0 => left,
            n => n.min(left),
        }
        .min(COPY_BYTES_MAX);
        if dst_offset
            .checked_add(want)
            .is_none_or(|end| end > i64::MAX as u64)
        {
            return Err(fail(FsError::FBig));
        }
        let mut done = 0u64;
        {
            let _as = self.act_as(caller).map_err(fail)?;
            may_read(sfile.as_fd(), &sst, &caller.cred).map_err(fail)?;
            may_write(dfile.as_fd(), &dst_st, &caller.cred).map_err(fail)?;
            while done < want {
                let r = sys::copy_file_range(
                    sfile.as_fd(),
                    src_offset + done,
                    dfile.as_fd(),
                    dst_offset + done,
                    // Bounded by COPY_BYTES_MAX, far below usize::MAX.
                    (want - done) as usize,
                );
                match r {
                    // The source shrank meanwhile: a short copy.
                    Ok(0) => break,
                    Ok(n) => done += n as u64,
                    // What was copied stays copied; the reply says how much.
                    Err(_) if done > 0 => break,
                    Err(e) => return Err(fail(errno(&e))),
                }
            }
        }
        let post = sys::statx(dfile.as_fd(), sys::EMPTY).ok();
        if let Some(post) = &post {
            dfile.advance_validated(ctime_stamp(&dst_st), ctime_stamp(post));
        }
        Ok(CopyOk {
            count: done,
            wcc: Wcc::new(Some(pre), post.map(|p| self.fattr(&p))),
        })
    }

    /// CLONE (RFC 7862 §15.13): shares `count` bytes (0: to the source's end) of `src` into
    /// `dst` by `FICLONERANGE`. A file system without reflinks (ext4, tmpfs) is
    /// [`FsError::NotSupp`]; ranges not aligned to its block size are [`FsError::Inval`].
    pub fn clone_range(
        &self,
        caller: &Caller,
        src: &FileHandle,
        src_offset: u64,
        dst: &FileHandle,
        dst_offset: u64,
        count: u64,
    ) -> Res<Wcc, Wcc> {
        let (sfile, sst, dfile, dst_st) = self.two_files(caller, src, dst)?;
        let pre = attr::wcc(&dst_st);
        let fail = |s| (s, self.wcc_after(Some(pre), dfile.as_fd()));
        {
            let _as = self.act_as(caller).map_err(fail)?;
            may_read(sfile.as_fd(), &sst, &caller.cred).map_err(fail)?;
            may_write(dfile.as_fd(), &dst_st, &caller.cred).map_err(fail)?;
            sys::clone_range(sfile.as_fd(), src_offset, dfile.as_fd(), dst_offset, count).map_err(
                |e| match e.raw_os_error() {
                    // No remap support at all: the ioctl is unknown to the file system.
                    Some(libc::ENOTTY) => fail(FsError::NotSupp),
                    _ => fail(errno(&e)),
                },
            )?;
        }
        let post = sys::statx(dfile.as_fd(), sys::EMPTY).ok();
        if let Some(post) = &post {
            dfile.advance_validated(ctime_stamp(&dst_st), ctime_stamp(post));
        }
        Ok(Wcc::new(Some(pre), post.map(|p| self.fattr(&p))))
    }

    /// The source (open for reading) and destination (open for writing) of a COPY or CLONE,
    /// with their attributes; failures carry the destination's.
    #[allow(clippy::type_complexity)]
    fn two_files(
        &self,
        caller: &Caller,
        src: &FileHandle,
        dst: &FileHandle,
    ) -> Res<(Arc<OpenFile>, libc::statx, Arc<OpenFile>, libc::statx), Wcc> {
        if caller.read_only {
            return Err((FsError::RoFs, self.wcc_or_default(dst)));
        }
        let (sfile, sst) = self
            .open_file(src, false)
            .map_err(|s| (s, self.wcc_or_default(dst)))?;
        let (dfile, dst_st) = self
            .open_file(dst, true)
            .map_err(|s| (s, self.wcc_or_default(dst)))?;
        Ok((sfile, sst, dfile, dst_st))
    }

    /// CREATE (§3.3.8).
    ///
    /// * UNCHECKED: creates, or if a regular file of that name exists, only applies `size`.
    /// * GUARDED: `FsError::Exist` if the name exists.
    /// * EXCLUSIVE: creates with mode 0 and stores the verifier in the times, like knfsd
    ///   (mtime seconds = first 4 bytes, atime seconds = last 4, high bits cleared for file
    ///   systems with 31-bit times). A retransmission finds an empty regular file with the same
    ///   verifier and succeeds; anything else under that name is `FsError::Exist`. The client sets
    ///   the real attributes with a SETATTR afterwards.
    pub fn create(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        how: CreateHow,
    ) -> Res<CreateOk, Wcc> {
        let (d, pre) = self.modify_dir(caller, dir)?;
        let fail = |s| (s, self.wcc_after(Some(pre), d.fd.as_fd()));
        let name = Name::parse(name).map_err(fail)?;
        if name.is_dot_or_dotdot() {
            return Err(fail(FsError::Exist));
        }
        let (mode, sattr) = match how {
            CreateHow::Unchecked(s) | CreateHow::Guarded(s) | CreateHow::Exclusive41(_, s) => {
                (s.mode.unwrap_or(0), Some(s))
            }
            CreateHow::Exclusive(_) => (0, None),
        };
        let (obj, exists) = {
            let _as = self.act_as(caller).map_err(fail)?;
            let made = sys::mknodat(d.fd.as_fd(), name.c(), libc::S_IFREG | (mode & 0o7777), 0);
            let exists = matches!(&made, Err(e) if e.raw_os_error() == Some(libc::EEXIST));
            if let Err(e) = &made {
                if !exists || matches!(how, CreateHow::Guarded(_)) {
                    return Err(fail(errno(e)));
                }
            }
            let obj = self.child(&d, &name).map_err(fail)?;
            match (how.verifier(), exists) {
                (Some(verf), false) => {
                    let (m, a) = exclusive_times(verf);
                    sys::set_times(obj.fd.as_fd(), Some(Some((a, 0))), Some(Some((m, 0))))
                        .map_err(|e| fail(errno(&e)))?;
                }
                (Some(verf), true) => {
                    let (m, a) = exclusive_times(verf);
                    let same = is_reg(&obj.st)
                        && obj.st.stx_size == 0
                        && obj.st.stx_mtime.tv_sec == m
                        && obj.st.stx_atime.tv_sec == a;
                    if !same {
                        return Err(fail(FsError::Exist));
                    }
                }
                (_, true) if !is_reg(&obj.st) => return Err(fail(FsError::Exist)),
                _ => {}
            }
            (obj, exists)
        };
        // Attributes beyond the mode: after creation (or only the size for an existing file).
        let fh = self
            .handle_for(obj.fd.as_fd(), &obj.st, Some(&d.kh))
            .map_err(fail)?;
        if let Some(mut s) = sattr {
            s.mode = None;
            if exists && how.verifier().is_some() {
                // A retransmitted EXCLUSIVE4_1: its original set the attributes.
                s = SetAttr::default();
            } else if exists {
                // UNCHECKED over an existing file: only the size applies (as knfsd).
                s = SetAttr {
                    size: s.size,
                    ..SetAttr::default()
                };
            }
            let file = match s.size {
                Some(_) => Some(self.open_file(&fh, true).map_err(fail)?.0),
                None => None,
            };
            let _as = self.act_as(caller).map_err(fail)?;
            self.apply_sattr(obj.fd.as_fd(), &obj.st, file.as_deref(), &s, &caller.cred)
                .map_err(fail)?;
        }
        let st = sys::statx(obj.fd.as_fd(), sys::EMPTY).map_err(|e| fail(errno(&e)))?;
        Ok(CreateOk {
            fh,
            attr: self.fattr(&st),
            dir_wcc: self.wcc_after(Some(pre), d.fd.as_fd()),
        })
    }

    /// MKDIR (§3.3.9).
    pub fn mkdir(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        sattr: &SetAttr,
    ) -> Res<CreateOk, Wcc> {
        self.make(caller, dir, name, sattr, |dirfd, name| {
            sys::mkdirat(dirfd, name, sattr.mode.unwrap_or(0) & 0o7777)
        })
    }

    /// SYMLINK (§3.3.10). The target is stored as given (it is the client's to interpret); a
    /// target containing NUL is `FsError::Inval`, one over 4095 bytes `FsError::NameTooLong`.
    pub fn symlink(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        target: &[u8],
        sattr: &SetAttr,
    ) -> Res<CreateOk, Wcc> {
        let target_c = match CString::new(target) {
            _ if target.len() > SYMLINK_TARGET_MAX => Err(FsError::NameTooLong),
            Ok(c) => Ok(c),
            Err(_) => Err(FsError::Inval),
        };
        // A symlink's mode is meaningless on Linux (always 0777).
        let sattr = SetAttr {
            mode: None,
            size: None,
            ..*sattr
        };
        self.make(caller, dir, name, &sattr, |dirfd, name| match &target_c {
            Ok(t) => sys::symlinkat(t, dirfd, name),
            Err(s) => Err(status_error(*s)),
        })
    }

    /// MKNOD (§3.3.11): character and block devices (which the kernel lets only root create),
    /// sockets and FIFOs. Other types are `FsError::BadType`.
    pub fn mknod(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        ftype: FileType,
        sattr: &SetAttr,
        rdev: DeviceId,
    ) -> Res<CreateOk, Wcc> {
        let (kind, dev) = match ftype {
            FileType::CharDevice => (libc::S_IFCHR, sys::makedev(rdev.major, rdev.minor)),
            FileType::BlockDevice => (libc::S_IFBLK, sys::makedev(rdev.major, rdev.minor)),
            FileType::Socket => (libc::S_IFSOCK, 0),
            FileType::Fifo => (libc::S_IFIFO, 0),
            _ => {
                let wcc = self.wcc_or_default(dir);
                return Err((FsError::BadType, wcc));
            }
        };
        let mode = kind | (sattr.mode.unwrap_or(0) & 0o7777);
        self.make(caller, dir, name, sattr, |dirfd, name| {
            sys::mknodat(dirfd, name, mode, dev)
        })
    }

    /// REMOVE (§3.3.12) of a non-directory. Closes cached descriptors of the removed file.
    pub fn remove(&self, caller: &Caller, dir: &FileHandle, name: &[u8]) -> Res<Wcc, Wcc> {
        self.unlink(caller, dir, name, 0)
    }

    /// RMDIR (§3.3.13).
    pub fn rmdir(&self, caller: &Caller, dir: &FileHandle, name: &[u8]) -> Res<Wcc, Wcc> {
        self.unlink(caller, dir, name, libc::AT_REMOVEDIR)
    }

    /// RENAME (§3.3.14). Both directories must belong to this export (else `FsError::Xdev`). A
    /// replaced target's cached descriptors are closed.
    pub fn rename(
        &self,
        caller: &Caller,
        from_dir: &FileHandle,
        from_name: &[u8],
        to_dir: &FileHandle,
        to_name: &[u8],
    ) -> Res<RenameWcc, RenameWcc> {
        if handle::export_id_of(to_dir.as_bytes()).is_some_and(|e| e != self.export_id()) {
            return Err((FsError::Xdev, RenameWcc::default()));
        }
        let (fd_, fpre) = self.modify_dir(caller, from_dir).map_err(|(s, w)| {
            (
                s,
                RenameWcc {
                    from_dir: w,
                    ..Default::default()
                },
            )
        })?;
        let (td, tpre) = self.modify_dir(caller, to_dir).map_err(|(s, w)| {
            (
                s,
                RenameWcc {
                    from_dir: self.wcc_after(Some(fpre), fd_.fd.as_fd()),
                    to_dir: w,
                },
            )
        })?;
        let wccs = || RenameWcc {
            from_dir: self.wcc_after(Some(fpre), fd_.fd.as_fd()),
            to_dir: self.wcc_after(Some(tpre), td.fd.as_fd()),
        };
        let fail = |s| (s, wccs());
        let from = Name::parse(from_name).map_err(fail)?;
        let to = Name::parse(to_name).map_err(fail)?;
        if from.is_dot_or_dotdot() || to.is_dot_or_dotdot() {
            return Err(fail(FsError::Inval));
        }
        {
            let _as = self.act_as(caller).map_err(fail)?;
            let source = sys::statx(fd_.fd.as_fd(), from.c())
                .ok()
                .map(|s| dev_ino(&s));
            let victim = sys::statx(td.fd.as_fd(), to.c()).ok().map(|s| dev_ino(&s));
            sys::renameat(fd_.fd.as_fd(), from.c(), td.fd.as_fd(), to.c())
                .map_err(|e| fail(errno_busy_is_acces(&e)))?;
            if let Some((dev, ino)) = victim.filter(|v| Some(*v) != source) {
                self.files.remove_inode(dev, ino);
            }
        }
        Ok(wccs())
    }

    /// LINK (§3.3.15): a new name in `dir` for the object `fh`. Across exports: `FsError::Xdev`.
    pub fn link(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        dir: &FileHandle,
        name: &[u8],
    ) -> Res<LinkRes, LinkRes> {
        if handle::export_id_of(dir.as_bytes()).is_some_and(|e| e != self.export_id()) {
            return Err((FsError::Xdev, LinkRes::default()));
        }
        let obj = self.resolve(fh).map_err(|s| (s, LinkRes::default()))?;
        let (d, pre) = self.modify_dir(caller, dir).map_err(|(s, w)| {
            (
                s,
                LinkRes {
                    attr: self.post_op(obj.fd.as_fd()),
                    dir_wcc: w,
                },
            )
        })?;
        let res = || LinkRes {
            attr: self.post_op(obj.fd.as_fd()),
            dir_wcc: self.wcc_after(Some(pre), d.fd.as_fd()),
        };
        let fail = |s| (s, res());
        let name = Name::parse(name).map_err(fail)?;
        if name.is_dot_or_dotdot() {
            return Err(fail(FsError::Exist));
        }
        if is_dir(&obj.st) {
            // Hard links to directories do not exist on Linux (EPERM); RFC 1813 suggests ISDIR.
            return Err(fail(FsError::IsDir));
        }
        {
            let _as = self.act_as(caller).map_err(fail)?;
            sys::link_fd(obj.fd.as_fd(), d.fd.as_fd(), name.c()).map_err(|e| fail(errno(&e)))?;
        }
        Ok(res())
    }

    /// READDIR and READDIRPLUS (§3.3.16, §3.3.17): offers entries from `cookie` on to `visit`,
    /// which returns `false` to refuse one (the page is full; that entry is not part of the
    /// reply and the next call resumes at the last accepted entry's cookie). `"."` and `".."` are
    /// included; `".."` of the export root is the root itself. With `plus`, entries carry
    /// attributes and handles when the caller may look them up.
    ///
    /// `visit` runs on this thread with the caller's credentials switched in: keep it to size
    /// accounting and encoding (no I/O, no spawning threads).
    pub fn readdir(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        cookie: u64,
        cookieverf: [u8; 8],
        plus: bool,
        visit: &mut dyn FnMut(DirEntry<'_>) -> bool,
    ) -> Res<ReaddirOk, Option<Attr>> {
        let decoded = self.key.decode(dir.as_bytes()).map_err(|s| (s, None))?;
        if decoded.kind != Kind::Dir {
            return Err((FsError::NotDir, self.attr_or_none(dir)));
        }
        let d = self
            .open_checked(&decoded, libc::O_RDONLY | libc::O_DIRECTORY)
            .map_err(|s| (s, None))?;
        let fail = |s| (s, self.post_op(d.fd.as_fd()));
        let verf = self.key.digest8(&d.kh);
        if cookie != 0 && cookieverf != [0; 8] && cookieverf != verf {
            return Err(fail(FsError::BadCookie));
        }
        let at_root = dev_ino(&d.st) == self.root_id;
        let eof = {
            let _as = self.act_as(caller).map_err(fail)?;
            permitted(d.fd.as_fd(), &d.st, &caller.cred, libc::R_OK)
                .map_err(|e| fail(errno(&e)))?;
            if cookie != 0 {
                // Only a cookie no directory offset can have is refused here (the file system
                // resumes after any other value).
                sys::lseek_set(d.fd.as_fd(), cookie).map_err(|_| fail(FsError::BadCookie))?;
            }
            let mut buf = vec![0u8; DIRENT_BUF_BYTES];
            'outer: loop {
                let n = sys::getdents64(d.fd.as_fd(), &mut buf).map_err(|e| fail(errno(&e)))?;
                if n == 0 {
                    break 'outer true;
                }
                for ent in Dirents::new(&buf[..n]) {
                    let entry = self.dir_entry(&d, dir, at_root, &ent, plus);
                    if !visit(entry) {
                        break 'outer false;
                    }
                }
            }
        };
        Ok(ReaddirOk {
            dir_attr: self.post_op(d.fd.as_fd()),
            cookieverf: verf,
            eof,
        })
    }

    /// FSSTAT (§3.3.18) from `fstatfs`. `afiles` is the free inode count (Linux has no separate
    /// count for unprivileged users, knfsd sends the same).
    pub fn fsstat(&self, fh: &FileHandle) -> Res<FsStat, Option<Attr>> {
        let obj = self.resolve(fh).map_err(|s| (s, None))?;
        let post = Some(self.fattr(&obj.st));
        let s = sys::fstatfs(obj.fd.as_fd()).map_err(|e| (errno(&e), post))?;
        let unit = if s.f_frsize > 0 {
            s.f_frsize
        } else {
            s.f_bsize
        } as u64;
        Ok(FsStat {
            tbytes: (s.f_blocks as u64).saturating_mul(unit),
            fbytes: (s.f_bfree as u64).saturating_mul(unit),
            abytes: (s.f_bavail as u64).saturating_mul(unit),
            tfiles: s.f_files as u64,
            ffiles: s.f_ffree as u64,
            afiles: s.f_ffree as u64,
            invarsec: 0,
            attr: post,
        })
    }

    /// FSINFO (§3.3.19).
    pub fn fsinfo(&self, fh: &FileHandle) -> Res<FsInfo, Option<Attr>> {
        let obj = self.resolve(fh).map_err(|s| (s, None))?;
        let c = &self.config;
        // The page size: a multiple keeps client I/O page-aligned.
        let mult = 4096;
        Ok(FsInfo {
            rtmax: c.read_bytes_max,
            rtpref: c.read_bytes_max,
            rtmult: mult,
            wtmax: c.write_bytes_max,
            wtpref: c.write_bytes_max,
            wtmult: mult,
            dtpref: c.readdir_bytes_pref,
            // Linux's MAX_LFS_FILESIZE; a file system with a smaller limit answers EFBIG.
            maxfilesize: i64::MAX as u64,
            time_delta: Time {
                seconds: 0,
                nseconds: 1,
            },
            properties: fsprops::LINK
                | fsprops::SYMLINK
                | fsprops::HOMOGENEOUS
                | fsprops::CANSETTIME,
            attr: Some(self.fattr(&obj.st)),
        })
    }

    /// PATHCONF (§3.3.20).
    pub fn pathconf(&self, fh: &FileHandle) -> Res<PathConf, Option<Attr>> {
        let obj = self.resolve(fh).map_err(|s| (s, None))?;
        let post = Some(self.fattr(&obj.st));
        let name_max = sys::fstatfs(obj.fd.as_fd())
            .map(|s| (s.f_namelen as u64).min(NAME_MAX as u64) as u32)
            .unwrap_or(NAME_MAX as u32);
        Ok(PathConf {
            // ext4's limit is 65000; when unknown, the POSIX minimum a client may rely on.
            linkmax: sys::fpathconf_link_max(obj.fd.as_fd()).unwrap_or(8),
            name_max,
            no_trunc: true,
            chown_restricted: true,
            case_insensitive: false,
            case_preserving: true,
            attr: post,
        })
    }

    /// COMMIT (§3.3.21): makes `count` bytes from `offset` durable (`count == 0`: to the end of
    /// the file): `sync_file_range` writes the range's dirty pages and waits for them, then
    /// `fdatasync` commits the metadata needed to read them back and flushes the disk cache.
    /// Needs write permission (or ownership), like WRITE.
    pub fn commit(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        count: u32,
    ) -> Res<Wcc, Wcc> {
        let (file, st, pre) = self.open_to_change(caller, fh, false)?;
        let fail = |s| (s, self.wcc_after(Some(pre), file.as_fd()));
        {
            let _as = self.act_as(caller).map_err(fail)?;
            may_write(file.as_fd(), &st, &caller.cred).map_err(fail)?;
        }
        sys::sync_range(file.as_fd(), offset, u64::from(count)).map_err(|e| fail(errno(&e)))?;
        sys::fdatasync(file.as_fd()).map_err(|e| fail(errno(&e)))?;
        Ok(self.wcc_after(Some(pre), file.as_fd()))
    }

    // --- Handles and confinement ---------------------------------------------------------------

    /// Verifies a handle and opens its object `O_PATH`, checking that it still exists and is
    /// inside the export.
    fn resolve(&self, fh: &FileHandle) -> Result<Obj, FsError> {
        let d = self.key.decode(fh.as_bytes())?;
        self.open_checked(&d, libc::O_PATH)
    }

    fn open_checked(&self, d: &Decoded, flags: libc::c_int) -> Result<Obj, FsError> {
        let fd = self
            .open_kernel(&d.object, flags)
            .map_err(|e| stale_errno(&e))?;
        let st = sys::statx(fd.as_fd(), sys::EMPTY).map_err(|e| errno(&e))?;
        // An unlinked object still open somewhere (even in our own cache) has no names left.
        if st.stx_nlink == 0 || is_dir(&st) != (d.kind == Kind::Dir) {
            return Err(FsError::Stale);
        }
        self.confine(fd.as_fd(), &st, d)?;
        Ok(Obj {
            fd,
            st,
            kh: d.object,
        })
    }

    fn open_kernel(&self, kh: &KernelHandle, flags: libc::c_int) -> io::Result<OwnedFd> {
        if *kh == self.root_kh && flags == libc::O_PATH {
            return sys::dup(self.root.as_fd());
        }
        match sys::open_by_handle_at(self.root.as_fd(), kh, flags) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                // Out of descriptors: give back half of the cache and try once more.
                tracing::warn!(cached = self.files.len(), "out of file descriptors");
                self.files.shrink_to(self.files.len() / 2);
                sys::open_by_handle_at(self.root.as_fd(), kh, flags)
            }
            r => r,
        }
    }

    /// Is the object behind `fd` inside the export?
    fn confine(&self, fd: BorrowedFd<'_>, st: &libc::statx, d: &Decoded) -> Result<(), FsError> {
        if self.whole_fs || dev_ino(st) == self.root_id {
            return Ok(());
        }
        match self.place_of(fd, st) {
            Place::Inside => Ok(()),
            Place::Outside | Place::Unknown if is_dir(st) => Err(FsError::Stale),
            Place::Outside | Place::Unknown => {
                // A non-directory the kernel reports disconnected, or under a name outside the
                // export (it may have another hard link inside): look for it in the directory
                // it was found in.
                let Some(parent) = d.parent else {
                    return Err(FsError::Stale);
                };
                let pd = Decoded {
                    kind: Kind::Dir,
                    object: parent,
                    parent: None,
                };
                let p = self.open_checked(&pd, libc::O_RDONLY | libc::O_DIRECTORY)?;
                if dir_holds(p.fd.as_fd(), dev_ino(st)) {
                    Ok(())
                } else {
                    Err(FsError::Stale)
                }
            }
        }
    }

    /// Where the kernel says `fd` is: under the export root's current path, somewhere else, or
    /// unknown (a disconnected dentry, reported as `/`).
    fn place_of(&self, fd: BorrowedFd<'_>, st: &libc::statx) -> Place {
        let (Ok(root), Ok(path)) = (sys::fd_path(self.root.as_fd()), sys::fd_path(fd)) else {
            return Place::Unknown;
        };
        let inside = root == b"/"
            || path == root
            || (path.starts_with(&root) && path.get(root.len()) == Some(&b'/'));
        if inside {
            return Place::Inside;
        }
        match sys::lstat_dev_ino(&path) {
            Ok(found) if found == dev_ino(st) => Place::Outside,
            _ => Place::Unknown,
        }
    }

    /// The handle of an object found inside the export; `parent` is the directory it was found
    /// in (recorded as a hint for non-directories).
    fn handle_for(
        &self,
        fd: BorrowedFd<'_>,
        st: &libc::statx,
        parent: Option<&KernelHandle>,
    ) -> Result<FileHandle, FsError> {
        if dev_ino(st) == self.root_id {
            return Ok(self.root_fh.clone());
        }
        if st.stx_mnt_id != self.root_mnt_id {
            return Err(FsError::Acces);
        }
        let (kh, _) = sys::name_to_handle_at(fd, sys::EMPTY, libc::AT_EMPTY_PATH).map_err(|e| {
            if e.raw_os_error() == Some(libc::EOVERFLOW) {
                tracing::error!(
                    "kernel file handle larger than {} bytes",
                    sys::KERNEL_HANDLE_MAX
                );
                FsError::ServerFault
            } else {
                errno(&e)
            }
        })?;
        self.key
            .encode(is_dir(st), &kh, parent.filter(|_| !is_dir(st)))
            .ok_or(FsError::ServerFault)
    }

    /// The start that calls changing a file's data share (WRITE, COMMIT, ALLOCATE): refuse a
    /// read-only caller, open the file (`write`: for writing), and take its pre-op attributes.
    fn open_to_change(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        write: bool,
    ) -> Res<(Arc<OpenFile>, libc::statx, WccAttr), Wcc> {
        if caller.read_only {
            return Err((FsError::RoFs, self.wcc_or_default(fh)));
        }
        let (file, st) = self
            .open_file(fh, write)
            .map_err(|s| (s, self.wcc_or_default(fh)))?;
        let pre = attr::wcc(&st);
        Ok((file, st, pre))
    }

    /// The cached descriptor for a regular file and its current attributes, opening (or
    /// upgrading to read-write) on a miss.
    fn open_file(
        &self,
        fh: &FileHandle,
        write: bool,
    ) -> Result<(Arc<OpenFile>, libc::statx), FsError> {
        if let Some(hit) = self.cached_file(fh, write)? {
            return Ok(hit);
        }
        let d = self.key.decode(fh.as_bytes())?;
        let obj = self.open_checked(&d, libc::O_PATH)?;
        if is_dir(&obj.st) {
            return Err(FsError::IsDir);
        }
        if !is_reg(&obj.st) {
            return Err(FsError::Inval);
        }
        // The handle was just found valid, so errors here are about opening: EROFS, EPERM
        // (immutable, append-only), ETXTBSY.
        let (fd, writable) = match self.open_kernel(&d.object, libc::O_RDWR) {
            Ok(fd) => (fd, true),
            Err(_) if !write => (
                self.open_kernel(&d.object, libc::O_RDONLY)
                    .map_err(|e| errno(&e))?,
                false,
            ),
            Err(e) => return Err(errno(&e)),
        };
        let (dev, ino) = dev_ino(&obj.st);
        let mut file = OpenFile::new(fd, writable, dev, ino, ctime_stamp(&obj.st));
        if self.modes.wants_direct_twin(write && writable) {
            if let Some(direct) = self.open_direct(&obj, writable) {
                file = file.with_direct(direct);
            }
        }
        Ok((self.files.insert(fh.as_bytes(), file), obj.st))
    }

    /// The `O_DIRECT` twin of a file being opened for the cache, or `None` when the export is to
    /// fall back to buffered I/O (then [`ModeIo::refuse_direct`] has turned it, once) or the
    /// process is short of descriptors (this file is then served buffered until evicted).
    fn open_direct(&self, obj: &Obj, writable: bool) -> Option<DirectFd> {
        let align = match sys::statx_dio_align(obj.fd.as_fd()) {
            Ok(a) => a,
            Err(e) => {
                self.modes
                    .refuse_direct(&format!("statx(STATX_DIOALIGN): {e}"));
                return None;
            }
        };
        let (mem, off) = match self.modes.usable_alignment(align) {
            Ok(a) => a,
            Err(why) => {
                self.modes.refuse_direct(&why);
                return None;
            }
        };
        let access = if writable {
            libc::O_RDWR
        } else {
            libc::O_RDONLY
        };
        match self.open_kernel(&obj.kh, access | libc::O_DIRECT) {
            Ok(fd) => Some(DirectFd::new(fd, mem, off)),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) => {
                self.modes.refuse_direct(&format!("open(O_DIRECT): {e}"));
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "open(O_DIRECT) failed; this file is served buffered");
                None
            }
        }
    }

    /// A cache hit usable for `write`, with current attributes; `None` on a miss. A file
    /// without names left is stale; one whose ctime moved since it was last found inside the
    /// export (a rename, a link, a change by another process) is checked again.
    fn cached_file(
        &self,
        fh: &FileHandle,
        write: bool,
    ) -> Result<Option<(Arc<OpenFile>, libc::statx)>, FsError> {
        let Some(file) = self.files.get(fh.as_bytes()) else {
            return Ok(None);
        };
        if write && !file.writable() {
            return Ok(None);
        }
        let st = sys::statx(file.as_fd(), sys::EMPTY).map_err(|e| errno(&e))?;
        if st.stx_nlink == 0 {
            self.files.remove(fh.as_bytes());
            return Err(FsError::Stale);
        }
        let stamp = ctime_stamp(&st);
        if !file.validated_at(stamp) {
            if let Err(s) = self.resolve(fh) {
                self.files.remove(fh.as_bytes());
                return Err(s);
            }
            file.set_validated(stamp);
        }
        Ok(Some((file, st)))
    }

    // --- Shared pieces of the procedures -------------------------------------------------------

    fn act_as(&self, caller: &Caller) -> Result<CredGuard, FsError> {
        CredGuard::switch(&caller.cred).map_err(|e| {
            tracing::error!(error = %e, uid = caller.cred.uid, "cannot switch credentials");
            FsError::ServerFault
        })
    }

    /// Resolves a directory about to be modified: its object and pre-op attributes.
    fn modify_dir(&self, caller: &Caller, dir: &FileHandle) -> Res<(Obj, WccAttr), Wcc> {
        let d = self.resolve(dir).map_err(|s| (s, Wcc::default()))?;
        let pre = attr::wcc(&d.st);
        if !is_dir(&d.st) {
            return Err((FsError::NotDir, self.wcc_after(Some(pre), d.fd.as_fd())));
        }
        if caller.read_only {
            return Err((FsError::RoFs, self.wcc_after(Some(pre), d.fd.as_fd())));
        }
        Ok((d, pre))
    }

    /// Opens `dir/name` `O_PATH` without following a symlink (call with credentials switched).
    fn child(&self, dir: &Obj, name: &Name) -> Result<Found, FsError> {
        let flags = libc::O_PATH | libc::O_NOFOLLOW;
        let fd = sys::openat(dir.fd.as_fd(), name.c(), flags, 0).map_err(|e| errno(&e))?;
        let st = sys::statx(fd.as_fd(), sys::EMPTY).map_err(|e| errno(&e))?;
        Ok(Found { fd, st })
    }

    /// MKDIR, SYMLINK, MKNOD: `make(dirfd, name)` creates the object as the caller, then the
    /// remaining attributes are applied.
    fn make(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        sattr: &SetAttr,
        make: impl FnOnce(BorrowedFd<'_>, &CStr) -> io::Result<()>,
    ) -> Res<CreateOk, Wcc> {
        let (d, pre) = self.modify_dir(caller, dir)?;
        let fail = |s| (s, self.wcc_after(Some(pre), d.fd.as_fd()));
        let name = Name::parse(name).map_err(fail)?;
        if name.is_dot_or_dotdot() {
            return Err(fail(FsError::Exist));
        }
        let obj = {
            let _as = self.act_as(caller).map_err(fail)?;
            make(d.fd.as_fd(), name.c()).map_err(|e| fail(errno(&e)))?;
            let obj = self.child(&d, &name).map_err(fail)?;
            let rest = SetAttr {
                mode: None,
                size: None,
                ..*sattr
            };
            self.apply_sattr(obj.fd.as_fd(), &obj.st, None, &rest, &caller.cred)
                .map_err(fail)?;
            obj
        };
        let fh = self
            .handle_for(obj.fd.as_fd(), &obj.st, Some(&d.kh))
            .map_err(fail)?;
        let st = sys::statx(obj.fd.as_fd(), sys::EMPTY).map_err(|e| fail(errno(&e)))?;
        Ok(CreateOk {
            fh,
            attr: self.fattr(&st),
            dir_wcc: self.wcc_after(Some(pre), d.fd.as_fd()),
        })
    }

    /// REMOVE and RMDIR.
    fn unlink(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        flags: libc::c_int,
    ) -> Res<Wcc, Wcc> {
        let (d, pre) = self.modify_dir(caller, dir)?;
        let fail = |s| (s, self.wcc_after(Some(pre), d.fd.as_fd()));
        let name = Name::parse(name).map_err(fail)?;
        if name.is_dot_or_dotdot() {
            return Err(fail(FsError::Acces));
        }
        {
            let _as = self.act_as(caller).map_err(fail)?;
            let victim = sys::statx(d.fd.as_fd(), name.c()).ok().map(|s| dev_ino(&s));
            sys::unlinkat(d.fd.as_fd(), name.c(), flags)
                .map_err(|e| fail(errno_busy_is_acces(&e)))?;
            if let Some((dev, ino)) = victim {
                self.files.remove_inode(dev, ino);
            }
        }
        Ok(self.wcc_after(Some(pre), d.fd.as_fd()))
    }

    /// Applies size, owner, mode and times (call with credentials switched). `file` is the
    /// writable descriptor for a size change.
    fn apply_sattr(
        &self,
        fd: BorrowedFd<'_>,
        st: &libc::statx,
        file: Option<&OpenFile>,
        s: &SetAttr,
        cred: &Cred,
    ) -> Result<(), FsError> {
        if let Some(size) = s.size {
            let file = file.ok_or(FsError::Inval)?;
            may_write(file.as_fd(), st, cred)?;
            sys::ftruncate(file.as_fd(), size).map_err(|e| errno(&e))?;
        }
        // Unchanged ids are skipped: a chown to the same ids would still clear set-id bits.
        let uid = s.uid.filter(|&u| u != st.stx_uid);
        let gid = s.gid.filter(|&g| g != st.stx_gid);
        if uid.is_some() || gid.is_some() {
            sys::fchown(fd, uid.unwrap_or(u32::MAX), gid.unwrap_or(u32::MAX))
                .map_err(|e| errno(&e))?;
        }
        if let Some(mode) = s.mode {
            if !is_lnk(st) {
                sys::chmod_fd(fd, mode & 0o7777).map_err(|e| errno(&e))?;
            }
        }
        if s.atime != SetTime::DontChange || s.mtime != SetTime::DontChange {
            sys::set_times(fd, timespec(s.atime), timespec(s.mtime)).map_err(|e| errno(&e))?;
        }
        Ok(())
    }

    /// One READDIR entry, with attributes and handle for READDIRPLUS.
    fn dir_entry<'a>(
        &self,
        d: &Obj,
        dir_fh: &FileHandle,
        at_root: bool,
        ent: &Dirent<'a>,
        plus: bool,
    ) -> DirEntry<'a> {
        let dot = ent.name == b".";
        let dotdot = ent.name == b"..";
        let mut e = DirEntry {
            fileid: ent.ino,
            name: ent.name,
            cookie: ent.off,
            attr: None,
            fh: None,
        };
        if dot || (dotdot && at_root) {
            e.fileid = d.st.stx_ino;
            if plus {
                e.attr = Some(self.fattr(&d.st));
                e.fh = Some(if dot {
                    dir_fh.clone()
                } else {
                    self.root_fh.clone()
                });
            }
            return e;
        }
        if plus {
            let Ok(name) = CString::new(ent.name) else {
                return e;
            };
            let flags = libc::O_PATH | libc::O_NOFOLLOW;
            if let Ok(fd) = sys::openat(d.fd.as_fd(), &name, flags, 0) {
                if let Ok(st) = sys::statx(fd.as_fd(), sys::EMPTY) {
                    if let Ok(fh) = self.handle_for(fd.as_fd(), &st, Some(&d.kh)) {
                        e.attr = Some(self.fattr(&st));
                        e.fh = Some(fh);
                    }
                }
            }
        }
        e
    }

    fn fattr(&self, st: &libc::statx) -> Attr {
        attr::fattr(st, self.fsid)
    }

    fn post_op(&self, fd: BorrowedFd<'_>) -> Option<Attr> {
        sys::statx(fd, sys::EMPTY).ok().map(|st| self.fattr(&st))
    }

    fn wcc_after(&self, before: Option<WccAttr>, fd: BorrowedFd<'_>) -> Wcc {
        Wcc::new(before, self.post_op(fd))
    }

    /// Attributes for a failure reply, if the handle still resolves.
    fn attr_or_none(&self, fh: &FileHandle) -> Option<Attr> {
        self.resolve(fh).ok().map(|o| self.fattr(&o.st))
    }

    fn wcc_or_default(&self, fh: &FileHandle) -> Wcc {
        Wcc::after(self.attr_or_none(fh))
    }
}

/// The getdents64 buffer: 16 KiB holds about 500 typical entries; a small page pays for reading
/// more than it uses, a large one for more system calls, and neither matters much.
const DIRENT_BUF_BYTES: usize = 16 << 10;

enum Place {
    Inside,
    Outside,
    Unknown,
}

/// A validated file name: one path component, NUL-terminated in place.
struct Name {
    buf: [u8; NAME_MAX + 1],
    len: usize,
}

impl Name {
    fn parse(raw: &[u8]) -> Result<Name, FsError> {
        if raw.is_empty() || raw.contains(&b'/') || raw.contains(&0) {
            return Err(FsError::Acces);
        }
        if raw.len() > NAME_MAX {
            return Err(FsError::NameTooLong);
        }
        let mut buf = [0u8; NAME_MAX + 1];
        buf[..raw.len()].copy_from_slice(raw);
        Ok(Name {
            buf,
            len: raw.len(),
        })
    }

    fn c(&self) -> &CStr {
        CStr::from_bytes_with_nul(&self.buf[..=self.len]).expect("no interior NUL, checked")
    }

    fn is_dot(&self) -> bool {
        &self.buf[..self.len] == b"."
    }

    fn is_dotdot(&self) -> bool {
        &self.buf[..self.len] == b".."
    }

    fn is_dot_or_dotdot(&self) -> bool {
        self.is_dot() || self.is_dotdot()
    }
}

/// One `linux_dirent64`.
struct Dirent<'a> {
    ino: u64,
    off: u64,
    name: &'a [u8],
}

/// Parses the records `getdents64` wrote: `d_ino` u64, `d_off` i64, `d_reclen` u16, `d_type`
/// u8, then the NUL-terminated name, padded to `d_reclen`.
struct Dirents<'a> {
    buf: &'a [u8],
}

impl<'a> Dirents<'a> {
    fn new(buf: &'a [u8]) -> Self {
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

/// Whether the directory holds a name for the inode (reconnects it in the kernel's dcache).
fn dir_holds(dir: BorrowedFd<'_>, target: (u64, u64)) -> bool {
    let mut buf = vec![0u8; DIRENT_BUF_BYTES];
    loop {
        let n = match sys::getdents64(dir, &mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        for ent in Dirents::new(&buf[..n]) {
            if ent.ino != target.1 || ent.name == b"." || ent.name == b".." {
                continue;
            }
            let Ok(name) = CString::new(ent.name) else {
                continue;
            };
            if sys::statx(dir, &name).is_ok_and(|st| dev_ino(&st) == target) {
                return true;
            }
        }
    }
}

/// Read permission for READ: read, or execute on a regular file, or ownership.
fn may_read(fd: BorrowedFd<'_>, st: &libc::statx, cred: &Cred) -> Result<(), FsError> {
    if st.stx_uid == cred.uid {
        return Ok(());
    }
    match permitted(fd, st, cred, libc::R_OK) {
        Ok(()) => Ok(()),
        Err(_) if is_reg(st) && permitted(fd, st, cred, libc::X_OK).is_ok() => Ok(()),
        Err(e) => Err(errno(&e)),
    }
}

/// Write permission for WRITE, COMMIT and truncation: write, or ownership.
fn may_write(fd: BorrowedFd<'_>, st: &libc::statx, cred: &Cred) -> Result<(), FsError> {
    if st.stx_uid == cred.uid {
        return Ok(());
    }
    permitted(fd, st, cred, libc::W_OK).map_err(|e| errno(&e))
}

/// The ctime as one number, for the open-file cache's validation stamps.
fn ctime_stamp(st: &libc::statx) -> u64 {
    ((st.stx_ctime.tv_sec as u64) << 30) | u64::from(st.stx_ctime.tv_nsec)
}

/// May the caller (whose credentials are switched in) access the object with `mode`? The
/// kernel's answer (`faccessat2`); on kernels before 5.8, which lack it, the mode bits alone
/// (POSIX ACLs are then not consulted).
fn permitted(
    fd: BorrowedFd<'_>,
    st: &libc::statx,
    cred: &Cred,
    mode: libc::c_int,
) -> io::Result<()> {
    match sys::access(fd, mode) {
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => mode_bits_allow(st, cred, mode)
            .then_some(())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EACCES)),
        r => r,
    }
}

/// The classic permission check on mode bits, with root's overrides.
fn mode_bits_allow(st: &libc::statx, cred: &Cred, mode: libc::c_int) -> bool {
    let bits = u32::from(st.stx_mode);
    let want = (mode & (libc::R_OK | libc::W_OK | libc::X_OK)) as u32;
    if cred.uid == 0 {
        // Root may read and write anything, and execute what anyone may (or search directories).
        return want & libc::X_OK as u32 == 0 || is_dir(st) || bits & 0o111 != 0;
    }
    let granted = if st.stx_uid == cred.uid {
        (bits >> 6) & 7
    } else if cred.in_group(st.stx_gid) {
        (bits >> 3) & 7
    } else {
        bits & 7
    };
    granted & want == want
}

/// The times knfsd stores an exclusive-create verifier in: (mtime, atime) seconds.
fn exclusive_times(verf: [u8; 8]) -> (i64, i64) {
    let m = u32::from_be_bytes(verf[0..4].try_into().expect("4 bytes")) & 0x7fff_ffff;
    let a = u32::from_be_bytes(verf[4..8].try_into().expect("4 bytes")) & 0x7fff_ffff;
    (i64::from(m), i64::from(a))
}

fn timespec(t: SetTime) -> sys::TimeSpec {
    match t {
        SetTime::DontChange => None,
        SetTime::ServerTime => Some(None),
        SetTime::ClientTime(t) => Some(Some((t.seconds, t.nseconds))),
    }
}

fn errno(e: &io::Error) -> FsError {
    FsError::from_io(e)
}

/// EBUSY from unlink/rmdir/rename means a mount point or the like: not worth a retry
/// (JUKEBOX), refused.
fn errno_busy_is_acces(e: &io::Error) -> FsError {
    match e.raw_os_error() {
        Some(libc::EBUSY) => FsError::Acces,
        _ => errno(e),
    }
}

/// `open_by_handle_at` errors. Whatever the file system answers for a handle it cannot turn
/// into a live object (ESTALE, ENOENT, EINVAL, and on some paths EIO or EUCLEAN for an inode
/// freed and reused under us) means the handle is stale. Only a lack of resources is worth a
/// retry, and EPERM means the server lacks CAP_DAC_READ_SEARCH: a server fault, not the client's.
fn stale_errno(e: &io::Error) -> FsError {
    match e.raw_os_error() {
        Some(libc::ENOMEM | libc::EMFILE | libc::ENFILE | libc::EAGAIN) => FsError::Delay,
        Some(libc::EPERM) => {
            tracing::error!("open_by_handle_at: EPERM; the server needs CAP_DAC_READ_SEARCH");
            FsError::ServerFault
        }
        _ => FsError::Stale,
    }
}

/// Carries an NFS status through an `io::Result` closure.
fn status_error(s: FsError) -> io::Error {
    let errno = match s {
        FsError::NameTooLong => libc::ENAMETOOLONG,
        _ => libc::EINVAL,
    };
    io::Error::from_raw_os_error(errno)
}

/// Whether mount `mnt_id` mounts its file system's root at `path` (from /proc/self/mountinfo).
/// When it does, every object reachable through the mount is inside the export.
fn mount_is_fs_root_at(mnt_id: u64, path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    for line in text.lines() {
        let mut f = line.split(' ');
        let (Some(id), Some(_parent), Some(_dev), Some(root), Some(mount_point)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        if id.parse::<u64>().ok() == Some(mnt_id) {
            return root == "/" && unescape_mountinfo(mount_point) == path.as_os_str().as_bytes();
        }
    }
    false
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = b[i + 1..i + 4]
                .iter()
                .fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// The block size FICLONERANGE needs ranges aligned to on a file system of `fs_type` (statfs
/// `f_type`) with blocks of `bsize` bytes, or 0 where the file system has no reflinks. XFS,
/// btrfs, OCFS2 and bcachefs share extents and refuse (EINVAL) a range whose offsets or length
/// are not whole blocks, unless the length reaches the source's end (the kernel's
/// `generic_remap_file_range_prep`); ext4, tmpfs and others answer EOPNOTSUPP to any clone, so
/// they state no alignment. Which file systems share extents is a property of the kernel's
/// `remap_file_range` implementations, not something statfs says: the list is that.
pub fn reflink_block_bytes(fs_type: i64, bsize: i64) -> u32 {
    const XFS: i64 = 0x5846_5342;
    const BTRFS: i64 = 0x9123_683e;
    const OCFS2: i64 = 0x7461_636f;
    const BCACHEFS: i64 = 0xca45_1a4e;
    match fs_type {
        XFS | BTRFS | OCFS2 | BCACHEFS => u32::try_from(bsize).unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(Name::parse(b"").err(), Some(FsError::Acces));
        assert_eq!(Name::parse(b"a/b").err(), Some(FsError::Acces));
        assert_eq!(Name::parse(b"a\0b").err(), Some(FsError::Acces));
        assert_eq!(Name::parse(&[b'x'; 256]).err(), Some(FsError::NameTooLong));
        let n = Name::parse(&[b'x'; 255]).unwrap();
        assert_eq!(n.c().to_bytes().len(), 255);
        assert!(Name::parse(b"..").unwrap().is_dotdot());
        assert!(Name::parse(b".").unwrap().is_dot());
        assert!(!Name::parse(b"...").unwrap().is_dot_or_dotdot());
    }

    #[test]
    fn mode_bits_fallback() {
        let mut st = sys::zeroed_statx();
        st.stx_mode = (libc::S_IFREG | 0o640) as u16;
        st.stx_uid = 1000;
        st.stx_gid = 100;
        let owner = Cred::new(1000, 1000);
        let member = Cred::new(1001, 1001).with_groups(&[100]);
        let other = Cred::new(1002, 1002);
        assert!(mode_bits_allow(&st, &owner, libc::R_OK | libc::W_OK));
        assert!(!mode_bits_allow(&st, &owner, libc::X_OK));
        assert!(mode_bits_allow(&st, &member, libc::R_OK));
        assert!(!mode_bits_allow(&st, &member, libc::W_OK));
        assert!(!mode_bits_allow(&st, &other, libc::R_OK));
        assert!(mode_bits_allow(&st, &Cred::root(), libc::R_OK | libc::W_OK));
        assert!(!mode_bits_allow(&st, &Cred::root(), libc::X_OK));
        st.stx_mode = (libc::S_IFDIR | 0o700) as u16;
        assert!(mode_bits_allow(&st, &Cred::root(), libc::X_OK));
    }

    #[test]
    fn exclusive_verifier_times_clear_the_high_bit() {
        let (m, a) = exclusive_times([0xff, 0, 0, 1, 0x12, 0x34, 0x56, 0x78]);
        assert_eq!(m, 0x7f00_0001);
        assert_eq!(a, 0x1234_5678);
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo(r"/a\040b\134c"), b"/a b\\c".to_vec());
        assert_eq!(unescape_mountinfo(r"/x\04"), b"/x\\04".to_vec());
    }
}
