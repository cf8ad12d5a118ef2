//! The data side: the open-file cache in front of READ, WRITE, COMMIT and the range operations
//! (a handle's descriptor is opened once and revalidated by ctime), the export's cache mode
//! behind them (`iomode`), and the READ fast paths only a real file has, which the data path
//! calls directly through [`FileSystem::local`](crate::FileSystem::local): a read by any reader
//! ([`LocalFs::read_with`], for splice) and a read that never waits for the disk
//! ([`LocalFs::read_nowait`]).

use super::base::{errno, LocalFs, Obj};
use super::perms::{may_read, may_write};
use crate::attr::{self, dev_ino, is_dir, is_reg};
use crate::exports::IoMode;
use crate::openfiles::{DirectFd, OpenFile};
use crate::sys;
use crate::types::{
    Attr, Caller, FileHandle, FsError, ReadOk, Res, StableHow, Wcc, WccAttr, WriteOk,
};
use bytes::Bytes;
use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;

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

impl LocalFs {
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
    pub(super) fn check_read(
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

    pub(super) fn write_as(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        data: &[Bytes],
        stable: StableHow,
        flush_bytes: Option<u64>,
    ) -> Res<WriteOk, Wcc> {
        let (file, st, pre) = self.open_to_change(caller, fh, true)?;
        let _written = self.writing(&st);
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

    /// ALLOCATE (RFC 7862 §15.1, `punch` false: `fallocate` mode 0, which extends the size) and
    /// DEALLOCATE (§15.4, `punch` true: `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`, the size
    /// never changes and the range reads as zeros). A file system without `fallocate` (or
    /// without hole punching) answers [`FsError::NotSupp`] (EOPNOTSUPP); a zero length is
    /// [`FsError::Inval`], as `fallocate` has it.
    pub(super) fn fallocate(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        len: u64,
        punch: bool,
    ) -> Res<Wcc, Wcc> {
        let (file, st, pre) = self.open_to_change(caller, fh, true)?;
        let _written = self.writing(&st);
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

    /// The source (open for reading) and destination (open for writing) of a COPY or CLONE,
    /// with their attributes; failures carry the destination's.
    #[allow(clippy::type_complexity)]
    pub(super) fn two_files(
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

    /// Marks the file of `st` written for the sync gate when the returned guard drops, that
    /// is after the caller's system calls returned and before its reply leaves. Every call
    /// that changes a file's data or size through a descriptor opened for writing takes one
    /// (WRITE, ALLOCATE, COPY, CLONE, a size in SETATTR or CREATE): a change the gate does not
    /// see would let a later COMMIT skip the `fdatasync` it needs.
    pub(super) fn writing(&self, st: &libc::statx) -> Written<'_> {
        Written {
            syncs: &self.syncs,
            key: dev_ino(st),
        }
    }

    /// The start that calls changing a file's data share (WRITE, COMMIT, ALLOCATE): refuse a
    /// read-only caller, open the file (`write`: for writing), and take its pre-op attributes.
    pub(super) fn open_to_change(
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
    pub(super) fn open_file(
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
    pub(super) fn open_direct(&self, obj: &Obj, writable: bool) -> Option<DirectFd> {
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
    pub(super) fn cached_file(
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
}

/// The ctime as one number, for the open-file cache's validation stamps.
pub(super) fn ctime_stamp(st: &libc::statx) -> u64 {
    ((st.stx_ctime.tv_sec as u64) << 30) | u64::from(st.stx_ctime.tv_nsec)
}

/// See [`LocalFs::writing`].
pub(super) struct Written<'a> {
    syncs: &'a crate::syncgate::SyncDriver<(u64, u64)>,
    key: (u64, u64),
}

impl Drop for Written<'_> {
    fn drop(&mut self) {
        self.syncs.note_written(&self.key);
    }
}
