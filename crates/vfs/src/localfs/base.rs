//! What every part of the backend shares: the [`LocalFs`] value and its configuration, how an
//! export is opened (the directory, the handle secret, the checks that its file system can serve
//! persistent handles), a resolved object ([`Obj`]), attributes for replies, and errno mapping.

use super::confined::{Confined, CONFINED_ENTRIES_MAX, CONFINED_TTL};
use crate::attr::{self, dev_ino};
use crate::exports::{IoMode, IoModes};
use crate::handle::{self, ExportId, HandleKey};
use crate::iomode::ModeIo;
use crate::openfiles::{OpenFiles, OPEN_FILES_DEFAULT};
use crate::syncgate::{SyncCounts, SyncDriver, SYNC_FILES_DEFAULT};
use crate::sys::{self, KernelHandle};
use crate::types::{
    Attr, FileHandle, FsError, Wcc, WccAttr, IO_BYTES_MAX_DEFAULT, READDIR_BYTES_PREF_DEFAULT,
};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where the server keeps its state (the handle secret) unless configured otherwise. The server
/// runs as root, so the FHS location for variable state is used rather than `$XDG_STATE_HOME`.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/sluice";

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

/// One exported directory.
pub struct LocalFs {
    /// The export root, `O_RDONLY`: the mount descriptor for `open_by_handle_at`. Never read
    /// from (its directory offset is shared by every dup).
    pub(super) root: OwnedFd,
    pub(super) root_id: (u64, u64),
    pub(super) root_mnt_id: u64,
    pub(super) root_kh: KernelHandle,
    pub(super) root_fh: FileHandle,
    /// The export root is the root of its file system, so every object of the mount is inside
    /// and confinement needs no check.
    pub(super) whole_fs: bool,
    /// [`LocalFs::clone_blksize`], from `fstatfs` of the root at start.
    pub(super) clone_blksize: u32,
    /// The file system takes user extended attributes (probed at start, see `xattr`).
    pub(super) xattr_support: bool,
    pub(super) key: HandleKey,
    pub(super) fsid: u64,
    pub(super) files: OpenFiles,
    /// Which COMMIT needs an `fdatasync` (see [`crate::syncgate`]), by `(dev, ino)`.
    pub(super) syncs: SyncDriver<(u64, u64)>,
    /// Objects lately proved inside the export (`confined.rs`).
    pub(super) confined: Confined,
    /// The cache mode and its fallbacks; does every READ and WRITE.
    pub(super) modes: ModeIo,
    /// The WRITE/COMMIT verifier, as a big-endian u64 so it can change without a lock.
    pub(super) write_verifier: std::sync::atomic::AtomicU64,
    pub(super) config: LocalFsConfig,
}

/// A resolved handle: a descriptor (usually `O_PATH`), its attributes, its kernel handle.
pub(super) struct Obj {
    pub(super) fd: OwnedFd,
    pub(super) st: libc::statx,
    pub(super) kh: KernelHandle,
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
        let xattr_support = crate::sys::user_xattrs_supported(root.as_fd());
        Ok(LocalFs {
            root,
            root_id: dev_ino(&st),
            root_mnt_id: st.stx_mnt_id,
            root_kh,
            root_fh,
            whole_fs,
            clone_blksize,
            xattr_support,
            key,
            fsid: u64::from(export.0),
            files: OpenFiles::new(open_files_max),
            syncs: SyncDriver::new(SYNC_FILES_DEFAULT),
            confined: Confined::new(CONFINED_TTL, CONFINED_ENTRIES_MAX),
            modes: ModeIo::new(config.io, path.clone()),
            write_verifier: std::sync::atomic::AtomicU64::new(u64::from_be_bytes(write_verifier)),
            config: LocalFsConfig { path, ..config },
        })
    }

    /// What the sync gate decided so far: `fdatasync`s run for COMMITs, and COMMITs spared
    /// one (clean file, or joined a running sync).
    pub fn sync_counts(&self) -> SyncCounts {
        self.syncs.counts()
    }

    /// The canonical path of the export.
    pub fn path(&self) -> &Path {
        &self.config.path
    }

    pub fn config(&self) -> &LocalFsConfig {
        &self.config
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

    /// The open-file cache (for statistics and tests).
    pub fn open_files(&self) -> &OpenFiles {
        &self.files
    }

    pub(super) fn fattr(&self, st: &libc::statx) -> Attr {
        attr::fattr(st, self.fsid)
    }

    pub(super) fn post_op(&self, fd: BorrowedFd<'_>) -> Option<Attr> {
        sys::statx(fd, sys::EMPTY).ok().map(|st| self.fattr(&st))
    }

    pub(super) fn wcc_after(&self, before: Option<WccAttr>, fd: BorrowedFd<'_>) -> Wcc {
        Wcc::new(before, self.post_op(fd))
    }
}

/// The getdents64 buffer: 16 KiB holds about 500 typical entries; a small page pays for reading
/// more than it uses, a large one for more system calls, and neither matters much.
pub(super) const DIRENT_BUF_BYTES: usize = 16 << 10;

pub(super) fn errno(e: &io::Error) -> FsError {
    FsError::from_io(e)
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
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo(r"/a\040b\134c"), b"/a b\\c".to_vec());
        assert_eq!(unescape_mountinfo(r"/x\04"), b"/x\\04".to_vec());
    }
}
