//! Data operations below READ, WRITE and COMMIT: the permission checks done here as knfsd does
//! (the owner may always read and write its own file), reads and writes of a call's chunks in
//! one vectored libcephfs call each (`ceph_ll_readv`, `ceph_ll_writev`), looped until the
//! whole range is done, fsync, the fallocate behind ALLOCATE and DEALLOCATE, and `io_file`: the
//! cached open file a READ, WRITE or COMMIT works on (see `open_files`).

use super::handles::{err, ftype, OpenFh};
use super::open_files::{Access, OpenFile};
use super::CephFs;
use crate::ffi::{Fh, Statx};
use crate::mount::CallKind;
use sluice_vfs::{Attr, Caller, FileHandle, FileType, FsError, Res, SetAttr, Wcc, WccAttr};
use std::sync::Arc;
use std::time::Instant;

impl CephFs {
    /// The open file READ, WRITE or COMMIT works on, with the inode's attributes before the
    /// operation, after `check` passed on them. A cached file is used as is (its attributes
    /// come from `ceph_ll_getattr`, answered from the caps the open holds); otherwise the
    /// handle is resolved, checked, opened as the mount's user and cached. The error carries
    /// the attributes when they were read.
    pub(super) fn io_file(
        &self,
        fh: &FileHandle,
        access: Access,
        check: impl FnOnce(&Statx) -> Result<(), FsError>,
    ) -> Result<(Arc<OpenFile>, Statx), (FsError, Option<Statx>)> {
        let vino = self.decode(fh).map_err(|e| (e, None))?;
        let now = Instant::now();
        if let Some(f) = self.caches.file(vino, access, now) {
            let st = self.statx(f.inode).map_err(|e| (e, None))?;
            if st.stx_nlink == 0 {
                // Removed by another client: close it, so the stray can go.
                self.caches.forget(vino.ino);
                return Err((FsError::Stale, None));
            }
            check(&st).map_err(|e| (e, Some(st)))?;
            return Ok((f, st));
        }
        let i = self.resolve(fh).map_err(|e| (e, None))?;
        let st = i.st;
        check(&st).map_err(|e| (e, Some(st)))?;
        let flags = match access {
            Access::Read => libc::O_RDONLY,
            Access::ReadWrite => libc::O_RDWR,
        };
        let opened = self.open(&i, flags).map_err(|e| (e, Some(st)))?;
        let fh_ptr: *mut Fh = opened.ptr;
        std::mem::forget(opened);
        // The cached file owns an inode reference of its own: this call's, or a new one when
        // this call borrowed another cached file's.
        let inode = match i.into_owned_ptr() {
            Some(p) => Ok(p),
            None => self.lookup_vino(vino),
        };
        let inode = match inode {
            Ok(p) => p,
            Err(e) => {
                drop(OpenFh {
                    fs: self,
                    ptr: fh_ptr,
                });
                return Err((e, Some(st)));
            }
        };
        let f = self.open_file_value(inode, fh_ptr);
        self.caches.insert_file(vino, access, f.clone(), now);
        Ok((f, st))
    }

    /// Closes the read-write file of a handle once its data is on the OSDs (after COMMIT or a
    /// stable WRITE): in libcephfs 16.2 a file held open for writing by this client stalls
    /// other clients' reads of it until it is closed (measured; see `open_files`), so a
    /// writer that is done lets go at once rather than after `idle`.
    pub(super) fn release_written(&self, fh: &FileHandle) {
        if let Ok(vino) = self.decode(fh) {
            self.caches.release(vino, Access::ReadWrite);
        }
    }

    /// The WCC of a READ, WRITE or COMMIT that failed before changing anything.
    pub(super) fn wcc_of(&self, st: Option<Statx>) -> Wcc {
        st.map_or_else(Wcc::default, |st| {
            let a = self.attr(&st);
            Wcc::new(Some(WccAttr::of(&a)), Some(a))
        })
    }

    /// Fresh attributes of an open file's inode, or none.
    pub(super) fn post_of(&self, f: &OpenFile) -> Option<Attr> {
        self.statx(f.inode).ok().map(|st| self.attr(&st))
    }

    /// Read permission for READ: read or execute bits, or ownership.
    pub(super) fn may_read(&self, caller: &Caller, st: &Statx) -> Result<(), FsError> {
        match ftype(u32::from(st.stx_mode)) {
            FileType::Regular => {}
            FileType::Directory => return Err(FsError::IsDir),
            _ => return Err(FsError::Inval),
        }
        if caller.cred.uid != st.stx_uid && !may(st, caller, 0o4) && !may(st, caller, 0o1) {
            return Err(FsError::Acces);
        }
        Ok(())
    }

    /// Write permission for WRITE and COMMIT: the write bit or ownership, on a writable export.
    pub(super) fn may_write(&self, caller: &Caller, st: &Statx) -> Result<(), FsError> {
        if caller.read_only {
            return Err(FsError::RoFs);
        }
        match ftype(u32::from(st.stx_mode)) {
            FileType::Regular => {}
            FileType::Directory => return Err(FsError::IsDir),
            _ => return Err(FsError::Inval),
        }
        if caller.cred.uid != st.stx_uid && !may(st, caller, 0o2) {
            return Err(FsError::Acces);
        }
        Ok(())
    }

    /// Reads into `bufs` from `offset` in as few libcephfs calls as it allows: one
    /// `ceph_ll_readv` over every buffer, again from where a short read stopped, until the
    /// buffers are full or the file ends (a 0 return). A 1 MiB READ arrives here as sixteen
    /// pooled 64 KiB chunks; one `ceph_ll_read` per chunk, as before, cost about twice
    /// ganesha's CPU per GiB on sequential reads (bench/results/ceph-vs-ganesha-2026-11-28-*).
    pub(super) fn read_vectored(
        &self,
        f: *mut Fh,
        offset: u64,
        bufs: &mut [&mut [u8]],
    ) -> Result<usize, FsError> {
        let m = &self.mount;
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let mut done = 0;
        while done < total {
            let iov = iovecs(bufs.iter_mut().map(|b| (b.as_mut_ptr(), b.len())), done);
            // SAFETY: open file; each iovec points into a distinct caller buffer, live for
            // the call, of the length given.
            let r = m.call(CallKind::Read, || unsafe {
                (m.lib.ceph_ll_readv)(
                    m.cmount,
                    f,
                    iov.as_ptr(),
                    iov.len() as i32,
                    (offset + done as u64) as i64,
                )
            });
            if r < 0 {
                return Err(err(r as i32));
            }
            if r == 0 {
                break;
            }
            done += r as usize;
        }
        Ok(done)
    }

    pub(super) fn read_into(
        &self,
        f: *mut Fh,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, FsError> {
        let m = &self.mount;
        let mut done = 0;
        while done < buf.len() {
            let rest = &mut buf[done..];
            // SAFETY: open file, a buffer of the given length.
            let r = m.call(CallKind::Read, || unsafe {
                (m.lib.ceph_ll_read)(
                    m.cmount,
                    f,
                    (offset + done as u64) as i64,
                    rest.len() as u64,
                    rest.as_mut_ptr().cast(),
                )
            });
            if r < 0 {
                return Err(err(r));
            }
            if r == 0 {
                break;
            }
            done += r as usize;
        }
        Ok(done)
    }

    /// Writes all of `data` at `offset` (the copy path's single buffer).
    pub(super) fn write_all(&self, f: *mut Fh, offset: u64, data: &[u8]) -> Result<(), FsError> {
        self.write_vectored(f, offset, &[data])
    }

    /// Writes the chunks of a WRITE's payload, in order, from `offset`: one `ceph_ll_writev`
    /// over every chunk (no gathering copy here; libcephfs 16 copies the chunks into its own
    /// buffer list once, as `ceph_ll_write` copies its one buffer), again from where a short
    /// write stopped. libcephfs 16 answers a buffered write with its whole length or a
    /// negative errno (EFBIG past the file system's maximum size, EDQUOT past a quota, ENOSPC),
    /// and `ceph_ll_writev` does not clamp the length to an `int` as `ceph_ll_write` does; the
    /// loop is for a short count all the same, and a 0 return (no progress) is EIO.
    ///
    /// Measured (`sluice cp` of 512 MiB over NFSv4.1 to a one-node memstore cluster, eight
    /// alternating runs of the binary before and after): the server hands the backend about
    /// a hundred writes of some 5 MiB (consecutive WRITEs gathered), each in about 88 chunks
    /// as received; one `ceph_ll_write` per chunk made 8,750 libcephfs write calls, one
    /// `ceph_ll_writev` per write makes 100 to 150, and the server's CPU for the copy went
    /// from a median 1.08 s to 0.92 s (its wall time from about 1.6 s to 1.4 s).
    pub(super) fn write_vectored(
        &self,
        f: *mut Fh,
        offset: u64,
        chunks: &[&[u8]],
    ) -> Result<(), FsError> {
        let m = &self.mount;
        let total: usize = chunks.iter().map(|c| c.len()).sum();
        let mut done = 0;
        while done < total {
            // libcephfs only reads through these pointers (`const struct iovec *`).
            let iov = iovecs(
                chunks.iter().map(|c| (c.as_ptr().cast_mut(), c.len())),
                done,
            );
            // SAFETY: open file; each iovec points into a caller chunk, live for the call, of
            // the length given.
            let r = m.call(CallKind::Write, || unsafe {
                (m.lib.ceph_ll_writev)(
                    m.cmount,
                    f,
                    iov.as_ptr(),
                    iov.len() as i32,
                    (offset + done as u64) as i64,
                )
            });
            if r < 0 {
                return Err(err(r as i32));
            }
            if r == 0 {
                return Err(FsError::Io);
            }
            done += r as usize;
        }
        Ok(())
    }

    pub(super) fn fsync(&self, f: *mut Fh, data_only: bool) -> Result<(), FsError> {
        let m = &self.mount;
        // SAFETY: open file.
        let r = m.call(CallKind::Fsync, || unsafe {
            (m.lib.ceph_ll_fsync)(m.cmount, f, i32::from(data_only))
        });
        if r < 0 {
            return Err(err(r));
        }
        Ok(())
    }

    pub(super) fn fallocate(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        mode: i32,
        offset: u64,
        len: u64,
    ) -> Res<Wcc, Wcc> {
        let i = self.resolve(fh).map_err(|e| (e, Wcc::default()))?;
        let pre = WccAttr::of(&self.attr(&i.st));
        let fail = |e| (e, self.wcc_after(pre, &i));
        self.may_write(caller, &i.st).map_err(fail)?;
        if offset.checked_add(len).is_none_or(|e| e > i64::MAX as u64) {
            return Err(fail(FsError::FBig));
        }
        let f = self.open(&i, libc::O_WRONLY).map_err(fail)?;
        if mode == 0 {
            // ALLOCATE: Ceph reserves nothing; only a range past the end changes the file.
            let end = offset + len;
            if end > i.st.stx_size {
                let s = SetAttr {
                    size: Some(end),
                    ..SetAttr::default()
                };
                self.apply_sattr(&i, &s, &self.root_perm()).map_err(fail)?;
            }
        } else {
            let m = &self.mount;
            // SAFETY: open file.
            let r = m.call(CallKind::Write, || unsafe {
                (m.lib.ceph_ll_fallocate)(m.cmount, f.ptr, mode, offset as i64, len as i64)
            });
            if r < 0 {
                return Err(fail(err(r)));
            }
        }
        drop(f);
        Ok(self.wcc_after(pre, &i))
    }
}

/// At most this many iovecs per libcephfs call: Linux's `IOV_MAX`. libcephfs sets no bound of
/// its own (it walks the array into one buffer list), but a payload in more pieces than this
/// is rare enough that a second call for the rest costs nothing worth a longer array.
const IOVECS_PER_CALL_MAX: usize = 1024;

/// The iovecs over `bufs` (pointer, length) from byte `skip` of their concatenation on: the
/// buffers wholly before it left out, the first one cut at it, empty ones left out, at most
/// [`IOVECS_PER_CALL_MAX`].
fn iovecs(bufs: impl Iterator<Item = (*mut u8, usize)>, mut skip: usize) -> Vec<libc::iovec> {
    let mut iov = Vec::new();
    for (ptr, len) in bufs {
        if skip >= len {
            skip -= len;
            continue;
        }
        if iov.len() == IOVECS_PER_CALL_MAX {
            break;
        }
        iov.push(libc::iovec {
            // In bounds: skip < len.
            iov_base: ptr.wrapping_add(skip).cast(),
            iov_len: len - skip,
        });
        skip = 0;
    }
    iov
}

/// Whether the mode bits give the caller `want` (rwx as 4/2/1). Root may do anything except
/// execute a file with no execute bit.
pub(super) fn may(st: &Statx, caller: &Caller, want: u32) -> bool {
    let c = &caller.cred;
    let mode = u32::from(st.stx_mode);
    if c.uid == 0 {
        return want & 1 == 0 || ftype(mode) == FileType::Directory || mode & 0o111 != 0;
    }
    let bits = if st.stx_uid == c.uid {
        mode >> 6
    } else if c.in_group(st.stx_gid) {
        mode >> 3
    } else {
        mode
    } & 7;
    bits & want == want
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(bufs: &[Vec<u8>], skip: usize) -> Vec<(usize, usize, usize)> {
        // (buffer index, offset in it, length) of each iovec.
        let bases: Vec<*const u8> = bufs.iter().map(|b| b.as_ptr()).collect();
        iovecs(bufs.iter().map(|b| (b.as_ptr().cast_mut(), b.len())), skip)
            .iter()
            .map(|v| {
                let p = v.iov_base as *const u8;
                let i = bufs
                    .iter()
                    .position(|b| b.as_ptr_range().contains(&p))
                    .expect("points into a buffer");
                (i, p as usize - bases[i] as usize, v.iov_len)
            })
            .collect()
    }

    #[test]
    fn iovecs_cover_every_byte_from_the_skip_on_and_leave_empty_buffers_out() {
        let bufs = vec![vec![0u8; 4], vec![], vec![0u8; 3], vec![0u8; 5]];
        assert_eq!(spans(&bufs, 0), [(0, 0, 4), (2, 0, 3), (3, 0, 5)]);
        // A short call stopped after 5 bytes: the rest of the third buffer, then the fourth.
        assert_eq!(spans(&bufs, 5), [(2, 1, 2), (3, 0, 5)]);
        // Exactly at a boundary: the empty buffer and the finished ones are skipped.
        assert_eq!(spans(&bufs, 4), [(2, 0, 3), (3, 0, 5)]);
        assert_eq!(spans(&bufs, 7), [(3, 0, 5)]);
        assert!(spans(&bufs, 12).is_empty());
    }

    #[test]
    fn a_call_takes_at_most_iov_max_buffers_and_the_next_goes_on() {
        let bufs = vec![vec![0u8; 2]; IOVECS_PER_CALL_MAX + 3];
        let first = spans(&bufs, 1);
        assert_eq!(first.len(), IOVECS_PER_CALL_MAX);
        assert_eq!(first[0], (0, 1, 1));
        let covered: usize = first.iter().map(|s| s.2).sum();
        let next = spans(&bufs, 1 + covered);
        assert_eq!(next, [(1024, 0, 2), (1025, 0, 2), (1026, 0, 2)]);
    }
}
