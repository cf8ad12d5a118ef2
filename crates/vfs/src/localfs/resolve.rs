//! Resolution and confinement of handles: a handle's MAC is checked ([`HandleKey::decode`]),
//! its kernel handle opened with `open_by_handle_at` (as root: it needs CAP_DAC_READ_SEARCH),
//! and the object found to still exist and to be inside the export (or refused as stale); and
//! the other way, the handle of an object found inside the export. Every procedure starts here.
//!
//! [`HandleKey::decode`]: crate::handle::HandleKey::decode

use super::base::{errno, LocalFs, Obj, DIRENT_BUF_BYTES};
use super::confined::Stamp;
use crate::attr::{dev_ino, is_dir};
use crate::handle::{Decoded, Kind};
use crate::sys::{self, Dirents, KernelHandle};
use crate::types::{Attr, FileHandle, FsError, Wcc};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Instant;

impl LocalFs {
    /// Verifies a handle and opens its object `O_PATH`, checking that it still exists and is
    /// inside the export.
    pub(super) fn resolve(&self, fh: &FileHandle) -> Result<Obj, FsError> {
        let d = self.key.decode(fh.as_bytes())?;
        self.open_checked(&d, libc::O_PATH)
    }

    pub(super) fn open_checked(&self, d: &Decoded, flags: libc::c_int) -> Result<Obj, FsError> {
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

    pub(super) fn open_kernel(&self, kh: &KernelHandle, flags: libc::c_int) -> io::Result<OwnedFd> {
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

    /// Is the object behind `fd` inside the export? Proved by its path (see [`Self::prove_inside`]),
    /// or taken from a recent proof for the same object unchanged since (`confined.rs`).
    fn confine(&self, fd: BorrowedFd<'_>, st: &libc::statx, d: &Decoded) -> Result<(), FsError> {
        if self.whole_fs || dev_ino(st) == self.root_id {
            return Ok(());
        }
        let (stamp, now) = (Stamp::of(st), Instant::now());
        if self.confined.fresh(&d.object, stamp, now) {
            return Ok(());
        }
        self.prove_inside(fd, st, d)?;
        self.confined.record(d.object, stamp, now);
        Ok(())
    }

    /// Proves that the object behind `fd` is inside the export: by its path, or for a
    /// non-directory the kernel places elsewhere, by the directory it was found in.
    fn prove_inside(
        &self,
        fd: BorrowedFd<'_>,
        st: &libc::statx,
        d: &Decoded,
    ) -> Result<(), FsError> {
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

    /// The handle of an object found inside the export (by name, in a directory just resolved);
    /// `parent` is the directory it was found in (recorded as a hint for non-directories).
    pub(super) fn handle_for(
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
        // Found by name in a directory resolved (so proved inside) just before: inside too,
        // so the calls that follow on the new handle need not prove it (`confined.rs`).
        self.confined.record(kh, Stamp::of(st), Instant::now());
        self.key
            .encode(is_dir(st), &kh, parent.filter(|_| !is_dir(st)))
            .ok_or(FsError::ServerFault)
    }

    /// Attributes for a failure reply, if the handle still resolves.
    pub(super) fn attr_or_none(&self, fh: &FileHandle) -> Option<Attr> {
        self.resolve(fh).ok().map(|o| self.fattr(&o.st))
    }

    pub(super) fn wcc_or_default(&self, fh: &FileHandle) -> Wcc {
        Wcc::after(self.attr_or_none(fh))
    }
}

enum Place {
    Inside,
    Outside,
    Unknown,
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
