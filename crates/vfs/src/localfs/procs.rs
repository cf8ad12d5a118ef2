//! [`FileSystem`] for [`LocalFs`]: every procedure's body, in the trait's order (RFC 1813's
//! numbering for the v3 procedures, RFC 7862's for the range operations). Each one resolves its
//! handles (`resolve`), switches to the caller's credentials (`perms`) and makes its `*at()`
//! calls; the machinery they share is in the sibling files.

use super::base::{errno, LocalFs, DIRENT_BUF_BYTES};
use super::data::ctime_stamp;
use super::dir::{errno_busy_is_acces, exclusive_times, status_error, Name};
use super::perms::{may_read, may_write, permitted};
use crate::attr::{self, dev_ino, is_dir, is_lnk, is_reg};
use crate::fs::FileSystem;
use crate::handle::{self, ExportId, Kind};
use crate::sys::{self, Dirents};
use crate::types::symlink_target;
use crate::types::{
    access, fsprops, Attr, Caller, CopyOk, CreateHow, CreateOk, DeviceId, DirEntry, FileHandle,
    FileType, FsError, FsInfo, FsStat, LinkRes, LookupOk, MetadataSpeed, PathConf, ReadOk,
    ReaddirOk, RenameWcc, Res, SeekOk, SeekWhat, SetAttr, StableHow, Time, Wcc, WriteOk,
    COPY_BYTES_MAX, NAME_MAX,
};
use crate::xattr::{XattrError, XattrSet};
use bytes::Bytes;
use std::os::fd::AsFd;

impl FileSystem for LocalFs {
    /// The alignment CLONE (`FICLONERANGE`) needs on this export's file system: its block size
    /// where it has reflinks (see [`reflink_block_bytes`](crate::reflink_block_bytes)), else 0.
    fn clone_blksize(&self) -> u32 {
        self.clone_blksize
    }

    /// System calls on the kernel's caches: see [`MetadataSpeed::KernelCache`].
    fn metadata_speed(&self) -> MetadataSpeed {
        MetadataSpeed::KernelCache
    }

    /// The handle of the export root (for MOUNT).
    fn root_handle(&self) -> FileHandle {
        self.root_fh.clone()
    }

    fn export_id(&self) -> ExportId {
        self.key.export()
    }

    /// [`FileSystem::state_key`](crate::FileSystem::state_key): the export id and the kernel
    /// handle, without the parent hint (see `handle::state_key`). The MAC is
    /// checked (no I/O), so forged bytes never name another file's state.
    fn state_key(&self, fh: &FileHandle) -> Bytes {
        handle::state_key(&self.key, fh.as_bytes())
    }

    fn read_bytes_max(&self) -> u32 {
        self.config.read_bytes_max
    }

    /// A hint that `len` bytes from `offset` of the file will be read soon: buffered and
    /// dontcache exports start reading them into the page cache (`POSIX_FADV_WILLNEED`, which
    /// queues the reads and returns); direct exports ignore it (their reads bypass the page
    /// cache). Only a file already in the open-file cache is hinted (it is, right after a READ of
    /// it); nothing is opened, checked or answered.
    fn readahead_hint(&self, fh: &FileHandle, offset: u64, len: u64) {
        if let Some(file) = self.files.get(fh.as_bytes()) {
            self.modes.readahead(&file, offset, len);
        }
    }

    fn local(&self) -> Option<&LocalFs> {
        Some(self)
    }

    /// WRITE/COMMIT verifier: random per instance, so a restarted server tells clients to
    /// resend unstable data.
    fn write_verifier(&self) -> [u8; 8] {
        self.write_verifier
            .load(std::sync::atomic::Ordering::SeqCst)
            .to_be_bytes()
    }

    /// Draws a new write verifier. Called when data acknowledged as UNSTABLE could not be
    /// written (a failed write-behind flush): every client holding uncommitted data then sees a
    /// new verifier at its next COMMIT and resends, instead of being told that lost data is
    /// stable (knfsd resets its verifier on writeback errors for the same reason).
    fn reset_write_verifier(&self) {
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

    /// GETATTR (RFC 1813 §3.3.1). No permission is needed to read attributes. A file in the
    /// open-file cache is answered from its descriptor (clients revalidate open files often).
    fn getattr(&self, fh: &FileHandle) -> Result<Attr, FsError> {
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
    fn setattr(
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
        let _written = file.as_ref().map(|_| self.writing(&obj.st));
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
    fn lookup(
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
    fn access(
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
    fn readlink(&self, fh: &FileHandle) -> Res<(Vec<u8>, Option<Attr>), Option<Attr>> {
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
    fn read(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        bufs: &mut [&mut [u8]],
    ) -> Res<ReadOk, Option<Attr>> {
        let want: usize = bufs.iter().map(|b| b.len()).sum();
        self.read_with(caller, fh, offset, want, |file| {
            self.modes.read(file, offset, bufs)
        })
    }

    /// WRITE (§3.3.7) of `data` (the payload's chunks, in order) at `offset`, with `pwritev2` as
    /// the export's cache mode says (see `iomode`).
    /// UNSTABLE leaves the data in the page cache; DATA_SYNC and FILE_SYNC make the written range
    /// durable before returning (`RWF_DSYNC` / `RWF_SYNC`: the range, its allocation metadata,
    /// and for FILE_SYNC all metadata, with a disk cache flush).
    fn write(
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
    fn write_flush(
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

    /// COMMIT (§3.3.21): makes `count` bytes from `offset` durable (`count == 0`: to the end of
    /// the file): `sync_file_range` writes the range's dirty pages and waits for them, then
    /// `fdatasync` commits the metadata needed to read them back and flushes the disk cache.
    /// Needs write permission (or ownership), like WRITE.
    ///
    /// The sync goes through the sync gate ([`crate::syncgate`]): a file with no change since
    /// a successful `fdatasync` is not synced again, and COMMITs arriving while one runs share
    /// it or the next one. `fdatasync` covers the whole file, so a shared sync answers COMMITs
    /// of any range.
    fn commit(&self, caller: &Caller, fh: &FileHandle, offset: u64, count: u32) -> Res<Wcc, Wcc> {
        let (file, st, pre) = self.open_to_change(caller, fh, false)?;
        let fail = |s| (s, self.wcc_after(Some(pre), file.as_fd()));
        {
            let _as = self.act_as(caller).map_err(fail)?;
            may_write(file.as_fd(), &st, &caller.cred).map_err(fail)?;
        }
        self.syncs
            .commit(&dev_ino(&st), || {
                sys::sync_range(file.as_fd(), offset, u64::from(count))?;
                sys::fdatasync(file.as_fd())
            })
            // A COMMIT that joined a failed sync reports what a sync that lost pages reports.
            .map_err(|e| fail(e.map_or(FsError::Io, |e| errno(&e))))?;
        Ok(self.wcc_after(Some(pre), file.as_fd()))
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
    fn create(
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
            let _written = file.as_ref().map(|_| self.writing(&obj.st));
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
    fn mkdir(
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
    fn symlink(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        target: &[u8],
        sattr: &SetAttr,
    ) -> Res<CreateOk, Wcc> {
        let target_c = symlink_target(target);
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
    fn mknod(
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
    fn remove(&self, caller: &Caller, dir: &FileHandle, name: &[u8]) -> Res<Wcc, Wcc> {
        self.unlink(caller, dir, name, 0)
    }

    /// RMDIR (§3.3.13).
    fn rmdir(&self, caller: &Caller, dir: &FileHandle, name: &[u8]) -> Res<Wcc, Wcc> {
        self.unlink(caller, dir, name, libc::AT_REMOVEDIR)
    }

    /// RENAME (§3.3.14). Both directories must belong to this export (else `FsError::Xdev`). A
    /// replaced target's cached descriptors are closed.
    fn rename(
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
                self.syncs.forget(&(dev, ino));
            }
        }
        Ok(wccs())
    }

    /// LINK (§3.3.15): a new name in `dir` for the object `fh`. Across exports: `FsError::Xdev`.
    fn link(
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
    fn readdir(
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
    fn fsstat(&self, fh: &FileHandle) -> Res<FsStat, Option<Attr>> {
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
    fn fsinfo(&self, fh: &FileHandle) -> Res<FsInfo, Option<Attr>> {
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
    fn pathconf(&self, fh: &FileHandle) -> Res<PathConf, Option<Attr>> {
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

    /// SEEK (RFC 7862 §15.11): the first offset at or after `offset` where `what` starts, by
    /// `lseek(SEEK_DATA / SEEK_HOLE)`, which file systems without holes answer as if the file
    /// were all data. An offset at or past the end is [`FsError::Nxio`], as `lseek` answers;
    /// SEEK_DATA with only a hole after `offset` is not an error in NFSv4.2 but the size with
    /// `eof` set.
    fn seek(
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

    /// ALLOCATE (RFC 7862 §15.1): `fallocate` mode 0, which extends the size.
    fn allocate(&self, caller: &Caller, fh: &FileHandle, offset: u64, len: u64) -> Res<Wcc, Wcc> {
        self.fallocate(caller, fh, offset, len, false)
    }

    /// DEALLOCATE (RFC 7862 §15.4): a hole punched, the size kept.
    fn deallocate(&self, caller: &Caller, fh: &FileHandle, offset: u64, len: u64) -> Res<Wcc, Wcc> {
        self.fallocate(caller, fh, offset, len, true)
    }

    /// COPY within this file system (RFC 7862 §15.2): up to `count` bytes (0: to the source's
    /// end) of `src` from `src_offset` to `dst` at `dst_offset`, by `copy_file_range`, which
    /// shares extents where the file system can and copies in the kernel otherwise. At most
    /// [`COPY_BYTES_MAX`], and never past the source's end (a source offset past it is
    /// [`FsError::Inval`], §15.2.3). Overlapping ranges of one file are [`FsError::Inval`]
    /// (the kernel's EINVAL). The attributes are the destination's.
    fn copy_range(
        &self,
        caller: &Caller,
        src: &FileHandle,
        src_offset: u64,
        dst: &FileHandle,
        dst_offset: u64,
        count: u64,
    ) -> Res<CopyOk, Wcc> {
        let (sfile, sst, dfile, dst_st) = self.two_files(caller, src, dst)?;
        let _written = self.writing(&dst_st);
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
    fn clone_range(
        &self,
        caller: &Caller,
        src: &FileHandle,
        src_offset: u64,
        dst: &FileHandle,
        dst_offset: u64,
        count: u64,
    ) -> Res<Wcc, Wcc> {
        let (sfile, sst, dfile, dst_st) = self.two_files(caller, src, dst)?;
        let _written = self.writing(&dst_st);
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

    /// User extended attributes (`xattr`): whether the export's file system takes them.
    fn xattr_support(&self) -> bool {
        self.xattr_support
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
