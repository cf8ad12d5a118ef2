//! [`CephFs`]: the version-neutral [`FileSystem`] over a directory of a Ceph file system.
//!
//! Every method resolves its handles to libcephfs inodes, makes the `ceph_ll_*` calls and
//! turns `ceph_statx` into [`Attr`]; NFSv3 and NFSv4 reach it through the same handlers and
//! data path as a local directory (the data path's local-only fast paths see
//! [`FileSystem::local`] answer `None` and use the trait's READ and WRITE).
//!
//! ```text
//!   handler ─► CephFs::op(&caller, &fh, ...)
//!                │ 1. handle → (ino, snapid) → Inode*   the open-file cache's, else
//!                │                                      ceph_ll_lookup_inode
//!                │ 2. UserPerm of the caller            the MDS and the client check access
//!                │ 3. ceph_ll_* call(s)                 counted and timed (CephStats); READ,
//!                │                                      WRITE, COMMIT on a cached open Fh
//!                │ 4. ceph_statx → Attr                 change = Ceph's change counter
//!                └─ references put back, except those the open-file and directory-stream
//!                   caches keep between calls (bounded, closed when idle: `open_files`)
//! ```
//!
//! # Handles
//! A handle names (ino, snapid), MAC'd like a local handle (see `sluice_vfs::handle`), in the
//! same envelope so [`sluice_vfs::export_id_of`] routes it:
//!
//! ```text
//!  0       1               5      6      7      8            16           24       36
//!  +-------+---------------+------+------+------+------------+------------+--------+
//!  | ver=1 | export id (BE)| 0x43 | 0    | 16   | ino (BE)   | snapid (BE)|  MAC   |
//!  +-------+---------------+------+------+------+------------+------------+--------+
//! ```
//! The MAC key is `HMAC-SHA256(secret, "sluice ceph handle v1" || export id)`, the secret the
//! state directory's (the same file LocalFs uses). Inode numbers are the cluster's, so a handle
//! is the same after a restart and on every sluice head given the same secret and export id.
//! An inode that is not in this client's cache (after a restart, or on another head) is found
//! through the MDS with `ceph_ll_lookup_inode`; only an inode that no longer exists is
//! [`FsError::Stale`] (so is a cached inode whose link count has dropped to 0). One object has
//! one handle, so the default [`FileSystem::state_key`] (the handle's bytes) is the object's
//! identity.
//!
//! # Permissions
//! Calls that create or change a name run with the caller's credentials (`UserPerm`), so
//! libcephfs and the MDS check them, and new objects belong to the caller. READ, WRITE and
//! COMMIT check the mode bits here, as knfsd does (the owner may always read and write its own
//! file: a client that created a file 0444 still writes it), then use a file opened as the
//! mount's own user (kept open between calls: the checks are per call, the open is not).
//!
//! # Coherence
//! libcephfs holds capabilities from the MDS for what it caches; when another Ceph client
//! (ceph-fuse, the kernel client, another sluice head) changes a file, the MDS revokes them
//! and the next GETATTR or READ here goes to the cluster. [`Attr::change`] is Ceph's change
//! counter (`stx_version`), bumped by every change of data or metadata, wherever it was made:
//! [`ChangeKind::Counter`].
//!
//! # Layout
//! This file holds the configuration, the mount of the export's root and the [`FileSystem`]
//! methods; what they call lives beside it by role: `handles` (handles, resolution, the call
//! guards, name checks), `namespace` (lookups, directory changes, creation, SETATTR, removal,
//! directory entries), `data` (permission checks of READ and WRITE, the open file they use,
//! reads, writes, fsync, fallocate), `open_files` (the open-file and directory-stream caches,
//! and what was measured that made them worth having), `idle_table` (their pure keep-or-close
//! policy, with the clock passed in) and `locks` (the NFS server's byte-range locks taken in
//! Ceph too, [`CephFs::set_lock`] and [`CephLock`]). No delegations are granted on this
//! backend ([`FileSystem::grants_delegations`] is false): a delegation would promise an NFS
//! client that no other Ceph client changes the file unseen, which only a Ceph delegation
//! (`ceph_ll_delegation`) behind it could keep; that is future work.

// As in sluice_vfs: the failure side carries the failure reply's attributes.
#![allow(clippy::result_large_err)]

use crate::ffi::{self, Inode, Statx, Vino};
use crate::mount::{CallKind, CephConfig, CephError, CephMount, CephStats};
use bytes::Bytes;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use sluice_vfs::handle::{load_or_create_secret, SECRET_BYTES};
use sluice_vfs::{
    access, fsprops, Attr, Caller, ChangeKind, CopyOk, CreateHow, CreateOk, DeviceId, DirEntry,
    ExportId, FileHandle, FileSystem, FileType, FsError, FsInfo, FsStat, LinkRes, LockConflict,
    LockError, LockType, LookupOk, PathConf, ReadOk, ReaddirOk, RenameWcc, Res, SeekOk, SeekWhat,
    SetAttr, SetTime, StableHow, Time, Wcc, WccAttr, WriteOk, COPY_BYTES_MAX, IO_BYTES_MAX_DEFAULT,
    NAME_MAX, READDIR_BYTES_PREF_DEFAULT, SYMLINK_TARGET_MAX,
};
use sluice_vfs::{XattrError, XattrSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod data;
mod handles;
mod idle_table;
mod locks;
mod namespace;
mod open_files;
mod xattr;

use data::may;
use handles::{err, ftype, lookup_name, new_name, OpenFh};
pub use idle_table::IdleLimits;
pub use locks::CephLock;
use namespace::exclusive_times;
use open_files::{Access, Caches, DirStream, Pending};
pub use open_files::{OpenCacheConfig, OpenCacheStats, OPEN_DIRS_DEFAULT, OPEN_FILES_DEFAULT};

/// Bytes read or written per libcephfs call in a server-side copy.
const COPY_CHUNK_BYTES: usize = 1 << 20;

/// One Ceph export: where it is and how handles are made.
#[derive(Debug, Clone)]
pub struct CephFsConfig {
    pub ceph: CephConfig,
    /// The server's state directory (the handle secret).
    pub state_dir: PathBuf,
    /// The export id in handles and the `fsid` of attributes. Default: from
    /// `ceph:<fs name>:<path>` ([`ExportId::from_path`]).
    pub export_id: Option<ExportId>,
    /// FSINFO's read and write sizes, bytes. Default [`IO_BYTES_MAX_DEFAULT`].
    pub io_bytes_max: u32,
    /// Open files and directory streams kept between calls. Default
    /// [`OpenCacheConfig::default`].
    pub open_cache: OpenCacheConfig,
}

impl CephFsConfig {
    pub fn new(ceph: CephConfig, state_dir: impl Into<PathBuf>) -> CephFsConfig {
        CephFsConfig {
            ceph,
            state_dir: state_dir.into(),
            export_id: None,
            io_bytes_max: IO_BYTES_MAX_DEFAULT,
            open_cache: OpenCacheConfig::default(),
        }
    }

    /// The default export id of this export (see [`CephFsConfig::export_id`]).
    pub fn default_export_id(&self) -> ExportId {
        let fs = self.ceph.fs_name.as_deref().unwrap_or("");
        ExportId::from_path(std::path::Path::new(&format!(
            "ceph:{fs}:{}",
            self.ceph.path
        )))
    }
}

/// A directory of a Ceph file system, served through libcephfs.
pub struct CephFs {
    mount: Arc<CephMount>,
    root: *mut Inode,
    root_vino: Vino,
    root_fh: FileHandle,
    export: ExportId,
    mac: Hmac<Sha256>,
    verifier: AtomicU64,
    caches: Caches,
    config: CephFsConfig,
    /// The open files holding the NFS server's locks (`locks`).
    locks: locks::HeldLocks,
}

// SAFETY: `root` is a reference held for the lifetime of the mount; libcephfs calls on it are
// thread-safe.
unsafe impl Send for CephFs {}
unsafe impl Sync for CephFs {}

impl CephFs {
    /// Mounts the export's directory (see [`CephMount::mount`]) and loads the handle secret.
    pub fn new(config: CephFsConfig) -> Result<CephFs, CephError> {
        let mount = Arc::new(CephMount::mount(&config.ceph)?);
        let secret = load_or_create_secret(&config.state_dir).map_err(|e| CephError::Call {
            what: format!("state directory {}: {e}", config.state_dir.display()),
            errno: e.raw_os_error().unwrap_or(libc::EIO),
        })?;
        CephFs::with_mount(mount, config, &secret)
    }

    /// A file system on an existing mount (whose root is the export's directory).
    pub fn with_mount(
        mount: Arc<CephMount>,
        config: CephFsConfig,
        secret: &[u8; SECRET_BYTES],
    ) -> Result<CephFs, CephError> {
        let export = config
            .export_id
            .unwrap_or_else(|| config.default_export_id());
        let mut kdf = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key size");
        kdf.update(b"sluice ceph handle v1");
        kdf.update(&export.0.to_be_bytes());
        let key = kdf.finalize().into_bytes();
        let mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes any key size");
        let mut root = std::ptr::null_mut();
        // SAFETY: mounted handle, out-pointer to a local.
        let r = mount.call(CallKind::Lookup, || unsafe {
            (mount.lib.ceph_ll_lookup_root)(mount.cmount, &mut root)
        });
        if r < 0 {
            return Err(CephError::Call {
                what: "looking up the export root".into(),
                errno: -r,
            });
        }
        let releases = mount.release_queue();
        let mut fs = CephFs {
            mount,
            root,
            root_vino: Vino {
                ino: 0,
                snapid: ffi::NOSNAP,
            },
            root_fh: FileHandle::default(),
            export,
            mac,
            verifier: AtomicU64::new(random_u64()),
            caches: Caches::new(config.open_cache, releases),
            config,
            locks: locks::HeldLocks::default(),
        };
        let st = fs.statx(root).map_err(|e| CephError::Call {
            what: format!("getattr of the export root: {e}"),
            errno: libc::EIO,
        })?;
        fs.root_vino = Vino {
            ino: st.stx_ino,
            snapid: ffi::NOSNAP,
        };
        fs.root_fh = fs.handle(fs.root_vino);
        Ok(fs)
    }

    /// The mount under this file system (cluster address, statistics).
    pub fn mount(&self) -> &CephMount {
        &self.mount
    }

    pub fn config(&self) -> &CephFsConfig {
        &self.config
    }

    /// The libcephfs calls made so far, with their time, and the MDS's callbacks.
    pub fn stats(&self) -> CephStats {
        self.mount.stats()
    }
}
impl Drop for CephFs {
    fn drop(&mut self) {
        self.caches.clear();
        self.mount.put(self.root);
    }
}

impl FileSystem for CephFs {
    fn root_handle(&self) -> FileHandle {
        self.root_fh.clone()
    }
    fn export_id(&self) -> ExportId {
        self.export
    }
    fn read_bytes_max(&self) -> u32 {
        self.config.io_bytes_max
    }
    fn change_kind(&self) -> ChangeKind {
        ChangeKind::Counter
    }
    /// The mount's calls and callbacks, and what the open-file cache closed at the MDS's
    /// request (`open_cache_released`: the release requests honoured).
    fn backend_stats(&self) -> Option<sluice_vfs::stats::BackendStats> {
        let mut b = self.stats().backend();
        b.events
            .push(("open_cache_released", self.open_cache_stats().released));
        Some(b)
    }
    fn write_verifier(&self) -> [u8; 8] {
        self.verifier.load(Ordering::Relaxed).to_be_bytes()
    }
    fn reset_write_verifier(&self) {
        self.verifier.store(random_u64(), Ordering::Relaxed);
    }
    fn lock(
        &self,
        fh: &FileHandle,
        owner_key: u64,
        kind: LockType,
        offset: u64,
        len: u64,
    ) -> Result<(), LockError> {
        self.push_lock(fh, owner_key, kind, offset, len)
    }
    fn unlock(
        &self,
        fh: &FileHandle,
        owner_key: u64,
        offset: u64,
        len: u64,
    ) -> Result<(), FsError> {
        self.push_unlock(fh, owner_key, offset, len)
    }
    fn test_lock(
        &self,
        fh: &FileHandle,
        owner_key: u64,
        kind: LockType,
        offset: u64,
        len: u64,
    ) -> Result<Option<LockConflict>, FsError> {
        self.test_pushed_lock(fh, owner_key, kind, offset, len)
    }
    fn release_locks(&self, file: &[u8], owner_key: u64) {
        self.release_pushed_locks(file, owner_key)
    }
    fn release_lock_owner(&self, owner_key: u64) {
        self.release_pushed_owner(owner_key)
    }
    /// None until a Ceph delegation (`ceph_ll_delegation`) stands behind each: other Ceph
    /// clients (ceph-fuse, the kernel client, another sluice head) change files without this
    /// server knowing, and an NFSv4 client holding a delegation would keep reading its stale
    /// cache (the kernel client's next open of a file rewritten through ceph-fuse read the old
    /// bytes for as long as it held the read delegation).
    fn grants_delegations(&self) -> bool {
        false
    }

    fn getattr(&self, fh: &FileHandle) -> Result<Attr, FsError> {
        let i = self.resolve(fh)?;
        Ok(self.attr(&i.st))
    }

    fn setattr(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        sattr: &SetAttr,
        guard: Option<Time>,
    ) -> Res<Wcc, Wcc> {
        let i = self.resolve(fh).map_err(|e| (e, Wcc::default()))?;
        let pre = WccAttr::of(&self.attr(&i.st));
        let fail = |e| (e, self.wcc_after(pre, &i));
        if guard.is_some_and(|ctime| ctime != pre.ctime) {
            return Err(fail(FsError::NotSync));
        }
        if caller.read_only {
            return Err(fail(FsError::RoFs));
        }
        let kind = ftype(u32::from(i.st.stx_mode));
        if sattr.size.is_some() {
            match kind {
                FileType::Directory => return Err(fail(FsError::IsDir)),
                FileType::Regular => {}
                _ => return Err(fail(FsError::Inval)),
            }
        }
        let owner = caller.cred.uid == 0 || caller.cred.uid == i.st.stx_uid;
        if let Some(size) = sattr.size {
            // Truncation by the owner needs no write bit (as WRITE), so it is made as root
            // after the check here; the rest runs as the caller (the MDS checks ownership).
            if !owner && !may(&i.st, caller, 0o2) {
                return Err(fail(FsError::Acces));
            }
            let s = SetAttr {
                size: Some(size),
                ..SetAttr::default()
            };
            self.apply_sattr(&i, &s, &self.root_perm()).map_err(fail)?;
        }
        let rest = SetAttr {
            size: None,
            ..*sattr
        };
        self.apply_sattr(&i, &rest, &self.perm(caller))
            .map_err(fail)?;
        Ok(self.wcc_after(pre, &i))
    }

    fn lookup(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
    ) -> Res<LookupOk, Option<Attr>> {
        let d = self.resolve(dir).map_err(|e| (e, None))?;
        let fail = |e| (e, self.post(&d));
        if ftype(u32::from(d.st.stx_mode)) != FileType::Directory {
            return Err(fail(FsError::NotDir));
        }
        let perm = self.perm(caller);
        let at_root = d.vino == self.root_vino;
        if name == b"." || (name == b".." && at_root) {
            if !may(&d.st, caller, 0o1) {
                return Err(fail(FsError::Acces));
            }
            let attr = self.attr(&d.st);
            return Ok(LookupOk {
                fh: self.handle(d.vino),
                attr,
                dir_attr: Some(attr),
            });
        }
        let name = lookup_name(name).map_err(fail)?;
        let c = self.lookup_child(&d, &name, &perm).map_err(fail)?;
        Ok(LookupOk {
            fh: self.handle(c.vino),
            attr: self.attr(&c.st),
            dir_attr: self.post(&d),
        })
    }

    fn access(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        requested: u32,
    ) -> Res<(u32, Option<Attr>), Option<Attr>> {
        let i = self.resolve(fh).map_err(|e| (e, None))?;
        let st = &i.st;
        let dir = ftype(u32::from(st.stx_mode)) == FileType::Directory;
        let mut granted = 0;
        if may(st, caller, 0o4) {
            granted |= access::READ;
        }
        if may(st, caller, 0o1) {
            granted |= if dir { access::LOOKUP } else { access::EXECUTE };
        }
        if !caller.read_only && may(st, caller, 0o2) {
            granted |= access::MODIFY | access::EXTEND;
            if dir && may(st, caller, 0o1) {
                granted |= access::DELETE;
            }
        }
        Ok((granted & requested, Some(self.attr(st))))
    }

    fn readlink(&self, fh: &FileHandle) -> Res<(Vec<u8>, Option<Attr>), Option<Attr>> {
        let i = self.resolve(fh).map_err(|e| (e, None))?;
        let attr = Some(self.attr(&i.st));
        if ftype(u32::from(i.st.stx_mode)) != FileType::Symlink {
            return Err((FsError::Inval, attr));
        }
        let m = &self.mount;
        let perm = self.root_perm();
        let mut buf = vec![0u8; SYMLINK_TARGET_MAX + 1];
        // SAFETY: live inode and perm, a buffer of the given length.
        let r = m.call(CallKind::Readlink, || unsafe {
            (m.lib.ceph_ll_readlink)(
                m.cmount,
                i.ptr,
                buf.as_mut_ptr().cast(),
                buf.len(),
                perm.ptr,
            )
        });
        if r < 0 {
            return Err((err(r), attr));
        }
        buf.truncate(r as usize);
        Ok((buf, attr))
    }

    fn read(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        bufs: &mut [&mut [u8]],
    ) -> Res<ReadOk, Option<Attr>> {
        let (f, st) = self
            .io_file(fh, Access::Read, |st| self.may_read(caller, st))
            .map_err(|(e, st)| (e, st.map(|st| self.attr(&st))))?;
        // A READ changes no attribute NFS shows but atime: those read before it serve as its
        // post-operation attributes (one getattr, from cached caps, per READ).
        let attr = self.attr(&st);
        let count = self
            .read_vectored(f.fh, offset, bufs)
            .map_err(|e| (e, Some(attr)))?;
        let eof = offset.saturating_add(count as u64) >= attr.size;
        Ok(ReadOk { count, eof, attr })
    }

    fn write(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        data: &[Bytes],
        stable: StableHow,
    ) -> Res<WriteOk, Wcc> {
        let total: u64 = data.iter().map(|b| b.len() as u64).sum();
        let (f, st) = self
            .io_file(fh, Access::ReadWrite, |st| {
                self.may_write(caller, st)?;
                if offset
                    .checked_add(total)
                    .is_none_or(|e| e > i64::MAX as u64)
                {
                    return Err(FsError::FBig);
                }
                Ok(())
            })
            .map_err(|(e, st)| (e, self.wcc_of(st)))?;
        let pre = WccAttr::of(&self.attr(&st));
        let fail = |e| (e, Wcc::new(Some(pre), self.post_of(&f)));
        let chunks: Vec<&[u8]> = data.iter().map(|b| &b[..]).collect();
        self.write_vectored(f.fh, offset, &chunks).map_err(fail)?;
        if stable != StableHow::Unstable {
            self.fsync(f.fh, stable == StableHow::DataSync)
                .map_err(fail)?;
        }
        let wcc = Wcc::new(Some(pre), self.post_of(&f));
        if stable != StableHow::Unstable {
            self.release_written(fh);
        }
        Ok(WriteOk {
            count: total as usize,
            committed: stable,
            wcc,
        })
    }

    fn commit(&self, caller: &Caller, fh: &FileHandle, _offset: u64, _count: u32) -> Res<Wcc, Wcc> {
        let (f, st) = self
            .io_file(fh, Access::ReadWrite, |st| self.may_write(caller, st))
            .map_err(|(e, st)| (e, self.wcc_of(st)))?;
        let pre = WccAttr::of(&self.attr(&st));
        // libcephfs flushes a file's dirty data as a whole, whichever Fh wrote it: the range
        // is not narrower, and the cached Fh serves.
        self.fsync(f.fh, true)
            .map_err(|e| (e, Wcc::new(Some(pre), self.post_of(&f))))?;
        let wcc = Wcc::new(Some(pre), self.post_of(&f));
        self.release_written(fh);
        Ok(wcc)
    }

    fn create(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        how: CreateHow,
    ) -> Res<CreateOk, Wcc> {
        let (d, pre) = self.modify_dir(caller, dir)?;
        let fail = |e| (e, self.wcc_after(pre, &d));
        if name == b"." || name == b".." {
            return Err(fail(FsError::Exist));
        }
        let cname = new_name(name).map_err(fail)?;
        let (mode, sattr) = match how {
            CreateHow::Unchecked(s) | CreateHow::Guarded(s) | CreateHow::Exclusive41(_, s) => {
                (s.mode.unwrap_or(0), Some(s))
            }
            CreateHow::Exclusive(_) => (0, None),
        };
        let perm = self.perm(caller);
        let m = &self.mount;
        let mut out = std::ptr::null_mut();
        let mut fhp = std::ptr::null_mut();
        let mut st = Statx::default();
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR;
        // SAFETY: live inode and perm, NUL-terminated name, out-pointers to locals.
        let r = m.call(CallKind::Create, || unsafe {
            (m.lib.ceph_ll_create)(
                m.cmount,
                d.ptr,
                cname.as_ptr(),
                (mode & 0o7777) | libc::S_IFREG,
                flags,
                &mut out,
                &mut fhp,
                &mut st,
                ffi::STATX_WANT,
                0,
                perm.ptr,
            )
        });
        let exists = r == -libc::EEXIST;
        // The new file's Fh (read-write): closed on failure, cached on success (the WRITE that
        // usually follows a CREATE finds it open).
        // (Built only when there is one: a guard of a null Fh would close it.)
        let created = if r >= 0 && !fhp.is_null() {
            Some(OpenFh { fs: self, ptr: fhp })
        } else {
            None
        };
        if r < 0 && (!exists || matches!(how, CreateHow::Guarded(_))) {
            return Err(fail(err(r)));
        }
        let obj = if exists {
            self.lookup_child(&d, &cname, &perm).map_err(fail)?
        } else {
            self.adopt(out, st, d.vino.snapid)
        };
        let is_reg = ftype(u32::from(obj.st.stx_mode)) == FileType::Regular;
        match (how.verifier(), exists) {
            (Some(verf), false) => {
                let (mt, at) = exclusive_times(verf);
                let s = SetAttr {
                    atime: SetTime::ClientTime(at),
                    mtime: SetTime::ClientTime(mt),
                    ..SetAttr::default()
                };
                self.apply_sattr(&obj, &s, &perm).map_err(fail)?;
            }
            (Some(verf), true) => {
                let (mt, at) = exclusive_times(verf);
                let same = is_reg
                    && obj.st.stx_size == 0
                    && obj.st.stx_mtime.tv_sec == mt.seconds
                    && obj.st.stx_atime.tv_sec == at.seconds;
                if !same {
                    return Err(fail(FsError::Exist));
                }
            }
            (_, true) if !is_reg => return Err(fail(FsError::Exist)),
            _ => {}
        }
        if let Some(mut s) = sattr {
            s.mode = None;
            if exists && how.verifier().is_some() {
                s = SetAttr::default();
            } else if exists {
                // UNCHECKED over an existing file: only the size applies (as knfsd).
                s = SetAttr {
                    size: s.size,
                    ..SetAttr::default()
                };
            }
            if let Some(size) = s.size {
                if exists {
                    self.may_write(caller, &obj.st).map_err(fail)?;
                }
                let sz = SetAttr {
                    size: Some(size),
                    ..SetAttr::default()
                };
                self.apply_sattr(&obj, &sz, &self.root_perm())
                    .map_err(fail)?;
                s.size = None;
            }
            self.apply_sattr(&obj, &s, &perm).map_err(fail)?;
        }
        let attr = self.post(&obj).unwrap_or_else(|| self.attr(&obj.st));
        let ok = CreateOk {
            fh: self.handle(obj.vino),
            attr,
            dir_wcc: self.wcc_after(pre, &d),
        };
        if let Some(f) = created {
            let vino = obj.vino;
            if let Some(inode) = obj.into_owned_ptr() {
                let ptr = f.ptr;
                std::mem::forget(f);
                let value = self.open_file_value(inode, ptr);
                self.caches
                    .insert_file(vino, Access::ReadWrite, value, std::time::Instant::now());
            }
        }
        Ok(ok)
    }

    fn mkdir(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        sattr: &SetAttr,
    ) -> Res<CreateOk, Wcc> {
        let mode = sattr.mode.unwrap_or(0) & 0o7777;
        self.make(caller, dir, name, sattr, |d, name, perm| {
            let m = &self.mount;
            let mut out = std::ptr::null_mut();
            let mut st = Statx::default();
            // SAFETY: live inode and perm, NUL-terminated name, out-pointers to locals.
            let r = m.call(CallKind::Create, || unsafe {
                (m.lib.ceph_ll_mkdir)(
                    m.cmount,
                    d.ptr,
                    name.as_ptr(),
                    mode,
                    &mut out,
                    &mut st,
                    ffi::STATX_WANT,
                    0,
                    perm.ptr,
                )
            });
            if r < 0 {
                return Err(err(r));
            }
            Ok((out, st))
        })
    }

    fn symlink(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        target: &[u8],
        sattr: &SetAttr,
    ) -> Res<CreateOk, Wcc> {
        let target = sluice_vfs::symlink_target(target);
        let sattr = SetAttr {
            mode: None,
            size: None,
            ..*sattr
        };
        self.make(caller, dir, name, &sattr, |d, name, perm| {
            let target = target?;
            let m = &self.mount;
            let mut out = std::ptr::null_mut();
            let mut st = Statx::default();
            // SAFETY: live inode and perm, NUL-terminated strings, out-pointers to locals.
            let r = m.call(CallKind::Create, || unsafe {
                (m.lib.ceph_ll_symlink)(
                    m.cmount,
                    d.ptr,
                    name.as_ptr(),
                    target.as_ptr(),
                    &mut out,
                    &mut st,
                    ffi::STATX_WANT,
                    0,
                    perm.ptr,
                )
            });
            if r < 0 {
                return Err(err(r));
            }
            Ok((out, st))
        })
    }

    fn mknod(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        ftype_: FileType,
        sattr: &SetAttr,
        rdev: DeviceId,
    ) -> Res<CreateOk, Wcc> {
        let (kind, dev) = match ftype_ {
            FileType::CharDevice => (libc::S_IFCHR, libc::makedev(rdev.major, rdev.minor)),
            FileType::BlockDevice => (libc::S_IFBLK, libc::makedev(rdev.major, rdev.minor)),
            FileType::Socket => (libc::S_IFSOCK, 0),
            FileType::Fifo => (libc::S_IFIFO, 0),
            _ => {
                let wcc = match self.resolve(dir) {
                    Ok(d) => Wcc::after(Some(self.attr(&d.st))),
                    Err(_) => Wcc::default(),
                };
                return Err((FsError::BadType, wcc));
            }
        };
        if matches!(kind, libc::S_IFCHR | libc::S_IFBLK) && caller.cred.uid != 0 {
            // Only root makes device nodes (as mknod(2) without CAP_MKNOD).
            let wcc = match self.resolve(dir) {
                Ok(d) => Wcc::after(Some(self.attr(&d.st))),
                Err(_) => Wcc::default(),
            };
            return Err((FsError::Perm, wcc));
        }
        let mode = kind | (sattr.mode.unwrap_or(0) & 0o7777);
        self.make(caller, dir, name, sattr, |d, name, perm| {
            let m = &self.mount;
            let mut out = std::ptr::null_mut();
            let mut st = Statx::default();
            // SAFETY: live inode and perm, NUL-terminated name, out-pointers to locals.
            let r = m.call(CallKind::Create, || unsafe {
                (m.lib.ceph_ll_mknod)(
                    m.cmount,
                    d.ptr,
                    name.as_ptr(),
                    mode,
                    dev,
                    &mut out,
                    &mut st,
                    ffi::STATX_WANT,
                    0,
                    perm.ptr,
                )
            });
            if r < 0 {
                return Err(err(r));
            }
            Ok((out, st))
        })
    }

    fn remove(&self, caller: &Caller, dir: &FileHandle, name: &[u8]) -> Res<Wcc, Wcc> {
        self.unlink(caller, dir, name, false)
    }

    fn rmdir(&self, caller: &Caller, dir: &FileHandle, name: &[u8]) -> Res<Wcc, Wcc> {
        self.unlink(caller, dir, name, true)
    }

    fn rename(
        &self,
        caller: &Caller,
        from_dir: &FileHandle,
        from_name: &[u8],
        to_dir: &FileHandle,
        to_name: &[u8],
    ) -> Res<RenameWcc, RenameWcc> {
        if sluice_vfs::export_id_of(to_dir.as_bytes()).is_some_and(|e| e != self.export) {
            return Err((FsError::Xdev, RenameWcc::default()));
        }
        let (fd, fpre) = self.modify_dir(caller, from_dir).map_err(|(e, w)| {
            (
                e,
                RenameWcc {
                    from_dir: w,
                    ..Default::default()
                },
            )
        })?;
        let (td, tpre) = self.modify_dir(caller, to_dir).map_err(|(e, w)| {
            (
                e,
                RenameWcc {
                    from_dir: self.wcc_after(fpre, &fd),
                    to_dir: w,
                },
            )
        })?;
        let wccs = || RenameWcc {
            from_dir: self.wcc_after(fpre, &fd),
            to_dir: self.wcc_after(tpre, &td),
        };
        let fail = |e| (e, wccs());
        let dots = |n: &[u8]| n == b"." || n == b"..";
        if dots(from_name) || dots(to_name) {
            return Err(fail(FsError::Inval));
        }
        let from = lookup_name(from_name).map_err(fail)?;
        let to = new_name(to_name).map_err(fail)?;
        let perm = self.perm(caller);
        // Refuse here what rename(2) refuses for the kinds of the two names. Measured on
        // libcephfs 16.2: a ceph_ll_rename that fails (a missing source) leaves the target
        // name marked as being renamed, and the next lookup of that name waits forever
        // ("rename is on the way, will wait for dn"), so failures must not reach it.
        let source = self.lookup_child(&fd, &from, &perm).map_err(fail)?;
        let src_dir = ftype(u32::from(source.st.stx_mode)) == FileType::Directory;
        let mut replaced = None;
        match self.lookup_child(&td, &to, &perm) {
            Ok(target) if target.vino == source.vino => return Ok(wccs()),
            Ok(target) => {
                replaced = Some(target.vino.ino);
                let dst_dir = ftype(u32::from(target.st.stx_mode)) == FileType::Directory;
                if src_dir && !dst_dir {
                    return Err(fail(FsError::NotDir));
                }
                if !src_dir && dst_dir {
                    return Err(fail(FsError::IsDir));
                }
                if dst_dir && self.has_entries(&target, &perm).map_err(fail)? {
                    return Err(fail(FsError::NotEmpty));
                }
            }
            Err(FsError::NoEnt) => {}
            Err(e) => return Err(fail(e)),
        }
        drop(source);
        let m = &self.mount;
        // SAFETY: live inodes and perm, NUL-terminated names.
        let r = m.call(CallKind::Rename, || unsafe {
            (m.lib.ceph_ll_rename)(
                m.cmount,
                fd.ptr,
                from.as_ptr(),
                td.ptr,
                to.as_ptr(),
                perm.ptr,
            )
        });
        if r < 0 {
            return Err(fail(match -r {
                // Renaming a directory into itself: EINVAL, as rename(2).
                libc::EBUSY => FsError::Acces,
                _ => err(r),
            }));
        }
        if let Some(ino) = replaced {
            // The target's name is gone: close what the cache holds open of it.
            self.caches.forget(ino);
        }
        Ok(wccs())
    }

    fn link(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        dir: &FileHandle,
        name: &[u8],
    ) -> Res<LinkRes, LinkRes> {
        if sluice_vfs::export_id_of(dir.as_bytes()).is_some_and(|e| e != self.export) {
            return Err((FsError::Xdev, LinkRes::default()));
        }
        let obj = self.resolve(fh).map_err(|e| (e, LinkRes::default()))?;
        let (d, pre) = self.modify_dir(caller, dir).map_err(|(e, w)| {
            (
                e,
                LinkRes {
                    attr: self.post(&obj),
                    dir_wcc: w,
                },
            )
        })?;
        let res = || LinkRes {
            attr: self.post(&obj),
            dir_wcc: self.wcc_after(pre, &d),
        };
        let fail = |e| (e, res());
        if name == b"." || name == b".." {
            return Err(fail(FsError::Exist));
        }
        if ftype(u32::from(obj.st.stx_mode)) == FileType::Directory {
            return Err(fail(FsError::IsDir));
        }
        let name = new_name(name).map_err(fail)?;
        let perm = self.perm(caller);
        let m = &self.mount;
        // SAFETY: live inodes and perm, NUL-terminated name.
        let r = m.call(CallKind::Link, || unsafe {
            (m.lib.ceph_ll_link)(m.cmount, obj.ptr, d.ptr, name.as_ptr(), perm.ptr)
        });
        if r < 0 {
            return Err(fail(err(r)));
        }
        Ok(res())
    }

    fn readdir(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        cookie: u64,
        cookieverf: [u8; 8],
        plus: bool,
        visit: &mut dyn FnMut(DirEntry<'_>) -> bool,
    ) -> Res<ReaddirOk, Option<Attr>> {
        let d = self.resolve(dir).map_err(|e| (e, None))?;
        let fail = |e| (e, Some(self.attr(&d.st)));
        if ftype(u32::from(d.st.stx_mode)) != FileType::Directory {
            return Err(fail(FsError::NotDir));
        }
        let verf = self.cookie_verifier(d.vino);
        if cookie != 0 && cookieverf != [0; 8] && cookieverf != verf {
            return Err(fail(FsError::BadCookie));
        }
        let m = &self.mount;
        let now = std::time::Instant::now();
        // The stream an earlier page of this walk stopped at (see `open_files`), else a new
        // one positioned at the cookie.
        let mut stream = match self.caches.take_dir(d.vino, cookie) {
            Some(s) => s,
            None => {
                let perm = self.perm(caller);
                let mut dirp = std::ptr::null_mut();
                // SAFETY: live inode and perm, out-pointer to a local.
                let r = m.call(CallKind::Readdir, || unsafe {
                    (m.lib.ceph_ll_opendir)(m.cmount, d.ptr, &mut dirp, perm.ptr)
                });
                if r < 0 {
                    return Err(fail(err(r)));
                }
                self.caches.opened_dir();
                let s = DirStream::new(self.mount.clone(), dirp);
                if cookie != 0 {
                    // SAFETY: an open directory stream.
                    unsafe { (m.lib.ceph_seekdir)(m.cmount, s.dirp, cookie as i64) };
                }
                s
            }
        };
        let at_root = d.vino == self.root_vino;
        let mut last = cookie;
        let eof = loop {
            let next = match stream.pending.take() {
                Some(p) => p,
                None => match self.next_entry(&stream, plus).map_err(fail)? {
                    Some(p) => p,
                    None => break true,
                },
            };
            let inode = next.inode;
            let entry_ref = (!inode.is_null()).then(|| self.adopt(inode, next.st, d.vino.snapid));
            let name = next.name.as_slice();
            let dotdot_at_root = at_root && name == b"..";
            let fileid = if dotdot_at_root {
                d.vino.ino
            } else {
                next.fileid
            };
            let (attr, fh) = match (&entry_ref, plus) {
                (_, true) if dotdot_at_root || name == b"." => {
                    (Some(self.attr(&d.st)), Some(self.handle(d.vino)))
                }
                (Some(e), true) => (Some(self.attr(&e.st)), Some(self.handle(e.vino))),
                _ => (None, None),
            };
            let entry = DirEntry {
                fileid,
                name,
                cookie: next.cookie,
                attr,
                fh,
            };
            if !visit(entry) {
                // Kept for the next page, which asks from `last`: the reference goes back
                // into the pending entry rather than being put.
                let keep_inode = entry_ref.and_then(|e| e.into_owned_ptr());
                stream.pending = Some(Pending {
                    inode: keep_inode.unwrap_or(std::ptr::null_mut()),
                    ..next
                });
                break false;
            }
            last = next.cookie;
        };
        if !eof {
            self.caches.keep_dir(d.vino, last, stream, now);
        } else {
            drop(stream);
        }
        Ok(ReaddirOk {
            dir_attr: self.post(&d),
            cookieverf: verf,
            eof,
        })
    }

    fn fsstat(&self, fh: &FileHandle) -> Res<FsStat, Option<Attr>> {
        let i = self.resolve(fh).map_err(|e| (e, None))?;
        let post = Some(self.attr(&i.st));
        let m = &self.mount;
        // SAFETY: zeroed is a valid statvfs.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: live inode, out-pointer to a local.
        let r = m.call(CallKind::Statfs, || unsafe {
            (m.lib.ceph_ll_statfs)(m.cmount, i.ptr, &mut s)
        });
        if r < 0 {
            return Err((err(r), post));
        }
        let unit = if s.f_frsize > 0 {
            s.f_frsize
        } else {
            s.f_bsize
        };
        // Ceph sets no limit on files: libcephfs reports the files in use as f_files and
        // f_ffree as -1. FSSTAT's counts must add up (a client shows tfiles - ffiles as the
        // files used), so an unlimited free count becomes every count above those in use.
        let (tfiles, ffiles) = if s.f_ffree == u64::MAX {
            (u64::MAX, u64::MAX - s.f_files)
        } else {
            (s.f_files, s.f_ffree)
        };
        Ok(FsStat {
            tbytes: s.f_blocks.saturating_mul(unit),
            fbytes: s.f_bfree.saturating_mul(unit),
            abytes: s.f_bavail.saturating_mul(unit),
            tfiles,
            ffiles,
            afiles: ffiles,
            invarsec: 0,
            attr: post,
        })
    }

    fn fsinfo(&self, fh: &FileHandle) -> Res<FsInfo, Option<Attr>> {
        let i = self.resolve(fh).map_err(|e| (e, None))?;
        let io = self.config.io_bytes_max;
        Ok(FsInfo {
            rtmax: io,
            rtpref: io,
            rtmult: 4096,
            wtmax: io,
            wtpref: io,
            wtmult: 4096,
            dtpref: READDIR_BYTES_PREF_DEFAULT,
            maxfilesize: i64::MAX as u64,
            time_delta: Time {
                seconds: 0,
                nseconds: 1,
            },
            properties: fsprops::LINK
                | fsprops::SYMLINK
                | fsprops::HOMOGENEOUS
                | fsprops::CANSETTIME,
            attr: Some(self.attr(&i.st)),
        })
    }

    fn pathconf(&self, fh: &FileHandle) -> Res<PathConf, Option<Attr>> {
        let i = self.resolve(fh).map_err(|e| (e, None))?;
        Ok(PathConf {
            // The MDS has no small link limit; the POSIX minimum a client may rely on is not
            // the right answer either, so say what ext4 says.
            linkmax: 65000,
            name_max: NAME_MAX as u32,
            no_trunc: true,
            chown_restricted: true,
            case_insensitive: false,
            case_preserving: true,
            attr: Some(self.attr(&i.st)),
        })
    }

    /// CephFS keeps no hole map a client can ask for: every byte before the end is data.
    fn seek(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        what: SeekWhat,
    ) -> Res<SeekOk, Option<Attr>> {
        let i = self.resolve(fh).map_err(|e| (e, None))?;
        let attr = self.attr(&i.st);
        self.may_read(caller, &i.st).map_err(|e| (e, Some(attr)))?;
        if offset >= attr.size {
            return Err((FsError::Nxio, Some(attr)));
        }
        Ok(match what {
            SeekWhat::Data => SeekOk { offset, eof: false },
            SeekWhat::Hole => SeekOk {
                offset: attr.size,
                eof: true,
            },
        })
    }

    /// CephFS does not reserve space; ALLOCATE extends the size (the range reads as zeros).
    fn allocate(&self, caller: &Caller, fh: &FileHandle, offset: u64, len: u64) -> Res<Wcc, Wcc> {
        self.fallocate(caller, fh, 0, offset, len)
    }

    fn deallocate(&self, caller: &Caller, fh: &FileHandle, offset: u64, len: u64) -> Res<Wcc, Wcc> {
        self.fallocate(
            caller,
            fh,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset,
            len,
        )
    }

    /// A copy through this client (READ and WRITE in chunks): libcephfs 16 has no
    /// server-side copy in its low-level API.
    fn copy_range(
        &self,
        caller: &Caller,
        src: &FileHandle,
        src_offset: u64,
        dst: &FileHandle,
        dst_offset: u64,
        count: u64,
    ) -> Res<CopyOk, Wcc> {
        let d = self.resolve(dst).map_err(|e| (e, Wcc::default()))?;
        let pre = WccAttr::of(&self.attr(&d.st));
        let fail = |e| (e, self.wcc_after(pre, &d));
        let s = self.resolve(src).map_err(fail)?;
        self.may_write(caller, &d.st).map_err(fail)?;
        self.may_read(caller, &s.st).map_err(fail)?;
        let Some(left) = s.st.stx_size.checked_sub(src_offset) else {
            return Err(fail(FsError::Inval));
        };
        let want = match count {
            0 => left,
            n => n.min(left),
        }
        .min(COPY_BYTES_MAX);
        if s.vino == d.vino && src_offset < dst_offset + want && dst_offset < src_offset + want {
            return Err(fail(FsError::Inval));
        }
        if dst_offset
            .checked_add(want)
            .is_none_or(|e| e > i64::MAX as u64)
        {
            return Err(fail(FsError::FBig));
        }
        let sf = self.open(&s, libc::O_RDONLY).map_err(fail)?;
        let df = self.open(&d, libc::O_WRONLY).map_err(fail)?;
        let mut buf = vec![0u8; COPY_CHUNK_BYTES.min(want as usize)];
        let mut done = 0u64;
        while done < want {
            let n = ((want - done) as usize).min(buf.len());
            let got = self
                .read_into(sf.ptr, src_offset + done, &mut buf[..n])
                .map_err(fail)?;
            if got == 0 {
                break;
            }
            self.write_all(df.ptr, dst_offset + done, &buf[..got])
                .map_err(fail)?;
            done += got as u64;
        }
        drop((sf, df));
        Ok(CopyOk {
            count: done,
            wcc: self.wcc_after(pre, &d),
        })
    }

    /// User extended attributes (`xattr`): CephFS always has them.
    fn xattr_support(&self) -> bool {
        true
    }
    fn getxattr(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        name: &[u8],
        size_max: usize,
    ) -> Result<Vec<u8>, XattrError> {
        self.xattr_get(caller, fh, name, size_max)
    }
    fn setxattr(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> Result<Wcc, XattrError> {
        self.xattr_set(caller, fh, name, value, how)
    }
    fn listxattrs(&self, caller: &Caller, fh: &FileHandle) -> Result<Vec<Vec<u8>>, XattrError> {
        self.xattr_list(caller, fh)
    }
    fn removexattr(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        name: &[u8],
    ) -> Result<Wcc, XattrError> {
        self.xattr_remove(caller, fh, name)
    }
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: a buffer of 8 bytes.
    let r = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 8, 0) };
    if r != 8 {
        // Not secret, only different per start: the time will do.
        return std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
    }
    u64::from_be_bytes(b)
}
