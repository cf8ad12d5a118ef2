//! Data operations below READ, WRITE and COMMIT: the permission checks done here as knfsd does
//! (the owner may always read and write its own file), reads and writes looped until the whole
//! range is done, fsync, and the fallocate behind ALLOCATE and DEALLOCATE.

use super::handles::{err, ftype, OpenFh};
use super::CephFs;
use crate::ffi::Statx;
use crate::mount::CallKind;
use sluice_vfs::{Caller, FileHandle, FileType, FsError, Res, SetAttr, Wcc, WccAttr};

impl CephFs {
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

    pub(super) fn read_into(
        &self,
        f: &OpenFh<'_>,
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
                    f.ptr,
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

    pub(super) fn write_all(
        &self,
        f: &OpenFh<'_>,
        offset: u64,
        data: &[u8],
    ) -> Result<(), FsError> {
        let m = &self.mount;
        let mut done = 0;
        while done < data.len() {
            let rest = &data[done..];
            // SAFETY: open file, a buffer of the given length.
            let r = m.call(CallKind::Write, || unsafe {
                (m.lib.ceph_ll_write)(
                    m.cmount,
                    f.ptr,
                    (offset + done as u64) as i64,
                    rest.len() as u64,
                    rest.as_ptr().cast(),
                )
            });
            if r < 0 {
                return Err(err(r));
            }
            if r == 0 {
                return Err(FsError::Io);
            }
            done += r as usize;
        }
        Ok(())
    }

    pub(super) fn fsync(&self, f: &OpenFh<'_>, data_only: bool) -> Result<(), FsError> {
        let m = &self.mount;
        // SAFETY: open file.
        let r = m.call(CallKind::Fsync, || unsafe {
            (m.lib.ceph_ll_fsync)(m.cmount, f.ptr, i32::from(data_only))
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
