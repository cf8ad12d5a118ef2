//! Handles and resolution: the handle layout (see the essay of `cephfs`) made and checked with
//! the export's MAC key, a handle resolved to a libcephfs inode (`ceph_ll_lookup_inode`, or
//! `ceph_ll_lookup_vino` for a snapshot; an inode that is gone is STALE), the caller's
//! credentials as a `UserPerm`, `ceph_statx` turned into [`Attr`], and a file opened as the
//! mount's own user. The guards that put back what a call borrowed from libcephfs
//! ([`InodeRef`], [`Perm`], [`OpenFh`]) live here, with the name checks every namespace
//! operation applies first.

use super::open_files::OpenFile;
use super::CephFs;
use crate::ffi::{self, Fh, Inode, Statx, UserPerm, Vino};
use crate::mount::CallKind;
use bytes::Bytes;
use hmac::Mac;
use sluice_vfs::{
    Attr, Caller, DeviceId, FileHandle, FileType, FsError, Time, Wcc, WccAttr, NAME_MAX,
};
use std::ffi::CString;
use std::sync::Arc;
use std::time::Instant;

/// The handle layout version (the envelope LocalFs uses).
const HANDLE_VERSION: u8 = 1;
/// The kind byte of a Ceph handle (LocalFs uses 0..=2).
const KIND_CEPH: u8 = 0x43;
const MAC_BYTES: usize = 12;
const HANDLE_BYTES: usize = 8 + 16 + MAC_BYTES;

/// An inode reference for the duration of one call: one this call took (a lookup, a create,
/// a readdirplus entry: put when it is dropped) or one it borrows (the export root's, held
/// for the mount's life, or a cached open file's).
///
/// Whether it is owned is said by `owned`, not by the pointer: libcephfs hands out the same
/// `Inode*` for every reference to one inode, so a lookup or a READDIR entry that names the
/// export root (`.` and `..` of the root, `..` of a directory under it) returns a reference
/// to put like any other, although its pointer is the root's. (Telling them apart by the
/// pointer kept one reference to the root per READDIR of the root, never put.)
pub(super) struct InodeRef<'a> {
    pub(super) fs: &'a CephFs,
    pub(super) ptr: *mut Inode,
    pub(super) vino: Vino,
    pub(super) st: Statx,
    /// The reference is this call's to put.
    owned: bool,
    /// The cached open file whose inode reference this borrows, kept open meanwhile.
    pub(super) pin: Option<Arc<OpenFile>>,
}

impl InodeRef<'_> {
    /// The reference, now the caller's to put (a borrowed one is taken anew by the caller's
    /// own lookup, so only an owned one may leave).
    pub(super) fn into_owned_ptr(self) -> Option<*mut Inode> {
        if !self.owned {
            return None;
        }
        let ptr = self.ptr;
        std::mem::forget(self);
        Some(ptr)
    }
}

impl Drop for InodeRef<'_> {
    fn drop(&mut self) {
        if self.owned {
            self.fs.mount.put(self.ptr);
        }
    }
}

/// A caller's credentials in libcephfs's form.
pub(super) struct Perm<'a> {
    pub(super) fs: &'a CephFs,
    pub(super) ptr: *mut UserPerm,
}

impl Drop for Perm<'_> {
    fn drop(&mut self) {
        // SAFETY: created by ceph_userperm_new, destroyed once.
        unsafe { (self.fs.mount.lib.ceph_userperm_destroy)(self.ptr) };
    }
}

/// An open file for the duration of one call.
pub(super) struct OpenFh<'a> {
    pub(super) fs: &'a CephFs,
    pub(super) ptr: *mut Fh,
}

impl Drop for OpenFh<'_> {
    fn drop(&mut self) {
        let m = &self.fs.mount;
        // SAFETY: opened by ceph_ll_open / ceph_ll_create, closed once.
        m.call(CallKind::Open, || unsafe {
            (m.lib.ceph_ll_close)(m.cmount, self.ptr)
        });
    }
}

pub(super) fn err(r: i32) -> FsError {
    FsError::from_errno(-r)
}

impl CephFs {
    // --- Handles -----------------------------------------------------------------------------

    pub(super) fn handle(&self, vino: Vino) -> FileHandle {
        let mut b = Vec::with_capacity(HANDLE_BYTES);
        b.push(HANDLE_VERSION);
        b.extend_from_slice(&self.export.0.to_be_bytes());
        b.extend_from_slice(&[KIND_CEPH, 0, 16]);
        b.extend_from_slice(&vino.ino.to_be_bytes());
        b.extend_from_slice(&vino.snapid.to_be_bytes());
        let mut m = self.mac.clone();
        m.update(&b);
        let tag = m.finalize().into_bytes();
        b.extend_from_slice(&tag[..MAC_BYTES]);
        FileHandle::new(Bytes::from(b)).expect("36 bytes fit a handle")
    }

    pub(super) fn decode(&self, fh: &FileHandle) -> Result<Vino, FsError> {
        let b = fh.as_bytes();
        if b.len() != HANDLE_BYTES || b[0] != HANDLE_VERSION || b[5] != KIND_CEPH {
            return Err(FsError::BadHandle);
        }
        if b[1..5] != self.export.0.to_be_bytes() {
            return Err(FsError::Stale);
        }
        let (body, tag) = b.split_at(HANDLE_BYTES - MAC_BYTES);
        let mut m = self.mac.clone();
        m.update(body);
        m.verify_truncated_left(tag)
            .map_err(|_| FsError::BadHandle)?;
        let ino = u64::from_be_bytes(body[8..16].try_into().expect("8 bytes"));
        let snapid = u64::from_be_bytes(body[16..24].try_into().expect("8 bytes"));
        Ok(Vino { ino, snapid })
    }

    /// The inode a handle names, with fresh attributes. An inode with a cached open file is
    /// borrowed from it; one not in libcephfs's cache is asked of the MDS by number. Gone:
    /// STALE.
    pub(super) fn resolve(&self, fh: &FileHandle) -> Result<InodeRef<'_>, FsError> {
        let vino = self.decode(fh)?;
        if vino == self.root_vino {
            let st = self.statx(self.root)?;
            let mut i = self.inode_ref(self.root, vino, st);
            i.owned = false;
            return Ok(i);
        }
        if let Some(f) = self.caches.any_file(vino, Instant::now()) {
            let st = self.statx(f.inode)?;
            if st.stx_nlink == 0 {
                // Removed by another client: let the stray go.
                self.caches.forget(vino.ino);
                return Err(FsError::Stale);
            }
            let mut i = self.inode_ref(f.inode, vino, st);
            i.owned = false;
            i.pin = Some(f);
            return Ok(i);
        }
        let ptr = self.lookup_vino(vino)?;
        let mut inode = self.inode_ref(ptr, vino, Statx::default());
        inode.st = self.statx(ptr)?;
        if inode.st.stx_nlink == 0 {
            return Err(FsError::Stale);
        }
        Ok(inode)
    }

    /// A new reference to the inode `vino` (libcephfs's cache, else the MDS). Gone: STALE.
    pub(super) fn lookup_vino(&self, vino: Vino) -> Result<*mut Inode, FsError> {
        let m = &self.mount;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: mounted handle, out-pointer to a local.
        let r = m.call(CallKind::Lookup, || unsafe {
            if vino.snapid == ffi::NOSNAP {
                (m.lib.ceph_ll_lookup_inode)(m.cmount, vino.ino, &mut ptr)
            } else {
                (m.lib.ceph_ll_lookup_vino)(m.cmount, vino, &mut ptr)
            }
        });
        if r < 0 || ptr.is_null() {
            return Err(match -r {
                libc::ENOENT | libc::ESTALE => FsError::Stale,
                _ if r >= 0 => FsError::Stale,
                _ => err(r),
            });
        }
        Ok(ptr)
    }

    /// An owned reference (see [`InodeRef`]).
    pub(super) fn inode_ref(&self, ptr: *mut Inode, vino: Vino, st: Statx) -> InodeRef<'_> {
        InodeRef {
            fs: self,
            ptr,
            vino,
            st,
            owned: true,
            pin: None,
        }
    }

    /// Adopts a reference returned by a lookup or create, with the attributes it came with.
    pub(super) fn adopt(&self, ptr: *mut Inode, st: Statx, snapid: u64) -> InodeRef<'_> {
        let vino = Vino {
            ino: st.stx_ino,
            snapid,
        };
        self.inode_ref(ptr, vino, st)
    }

    // --- Calls ------------------------------------------------------------------------------

    pub(super) fn root_perm(&self) -> Perm<'_> {
        self.perm(&Caller::with_cred(sluice_vfs::Cred::root()))
    }

    pub(super) fn perm(&self, caller: &Caller) -> Perm<'_> {
        let c = &caller.cred;
        let mut gids: Vec<libc::gid_t> = c.gids.clone();
        // SAFETY: copies the group list.
        let ptr = unsafe {
            (self.mount.lib.ceph_userperm_new)(c.uid, c.gid, gids.len() as i32, gids.as_mut_ptr())
        };
        Perm { fs: self, ptr }
    }

    pub(super) fn statx(&self, inode: *mut Inode) -> Result<Statx, FsError> {
        let m = &self.mount;
        let perm = self.root_perm();
        let mut st = Statx::default();
        // SAFETY: a live inode reference, out-pointer to a local.
        let r = m.call(CallKind::Getattr, || unsafe {
            (m.lib.ceph_ll_getattr)(m.cmount, inode, &mut st, ffi::STATX_WANT, 0, perm.ptr)
        });
        if r < 0 {
            return Err(err(r));
        }
        Ok(st)
    }

    pub(super) fn attr(&self, st: &Statx) -> Attr {
        let t = |ts: ffi::Timespec| Time {
            seconds: ts.tv_sec,
            nseconds: ts.tv_nsec.clamp(0, 999_999_999) as u32,
        };
        Attr {
            ftype: ftype(u32::from(st.stx_mode)),
            mode: u32::from(st.stx_mode) & 0o7777,
            nlink: st.stx_nlink,
            uid: st.stx_uid,
            gid: st.stx_gid,
            size: st.stx_size,
            used: st.stx_blocks.saturating_mul(512),
            rdev: DeviceId {
                major: libc::major(st.stx_rdev),
                minor: libc::minor(st.stx_rdev),
            },
            fsid: u64::from(self.export.0),
            fileid: st.stx_ino,
            atime: t(st.stx_atime),
            mtime: t(st.stx_mtime),
            ctime: t(st.stx_ctime),
            change: st.stx_version,
        }
    }

    /// Fresh attributes of a held inode, or none.
    pub(super) fn post(&self, i: &InodeRef<'_>) -> Option<Attr> {
        self.statx(i.ptr).ok().map(|st| self.attr(&st))
    }

    pub(super) fn wcc_after(&self, before: WccAttr, i: &InodeRef<'_>) -> Wcc {
        Wcc::new(Some(before), self.post(i))
    }

    pub(super) fn open(&self, i: &InodeRef<'_>, flags: i32) -> Result<OpenFh<'_>, FsError> {
        let m = &self.mount;
        let perm = self.root_perm();
        let mut fh = std::ptr::null_mut();
        // SAFETY: a live inode, out-pointer to a local.
        let r = m.call(CallKind::Open, || unsafe {
            (m.lib.ceph_ll_open)(m.cmount, i.ptr, flags, &mut fh, perm.ptr)
        });
        if r < 0 {
            return Err(err(r));
        }
        Ok(OpenFh { fs: self, ptr: fh })
    }
}

pub(super) fn ftype(mode: u32) -> FileType {
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

/// A name to look up or remove: no `/`, no NUL, not empty, at most NAME_MAX bytes.
pub(super) fn lookup_name(name: &[u8]) -> Result<CString, FsError> {
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    if name.is_empty() || name.contains(&b'/') {
        return Err(FsError::Acces);
    }
    CString::new(name).map_err(|_| FsError::Acces)
}

/// A name to create: as [`lookup_name`], and not `.` or `..` (they exist).
pub(super) fn new_name(name: &[u8]) -> Result<CString, FsError> {
    if name == b"." || name == b".." {
        return Err(FsError::Exist);
    }
    lookup_name(name)
}
