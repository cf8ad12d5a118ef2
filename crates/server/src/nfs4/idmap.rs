//! NFSv4 owner names: the pure mapping of [`sluice_nfs4state::idmap`] (re-exported here), and
//! its driver half, [`SystemIds`]: the system's user and group databases
//! (`serve --idmap-domain`), through the C library's reentrant NSS calls
//! (`getpwuid_r`, `getpwnam_r`, `getgrgid_r`, `getgrnam_r`), so `/etc/passwd`, LDAP or SSSD
//! answer as they do for `ls -l`.
//!
//! Every call gets its own buffer, starting at `BUF_BYTES_START` and doubled on `ERANGE` up
//! to `BUF_BYTES_MAX`; an entry larger than that (a group with tens of thousands of members)
//! counts as not found, so its id goes out as a number and its name is refused with
//! NFS4ERR_BADOWNER rather than the server allocating without bound. There is no cache: the
//! C library's own (nscd, sssd) is the place for one.

pub use sluice_nfs4state::idmap::*;
use std::ffi::{CStr, CString};

/// First buffer for one entry: `sysconf(_SC_GETPW_R_SIZE_MAX)` is 1024 on glibc.
const BUF_BYTES_START: usize = 1024;
/// Largest buffer for one entry: a group's member list is the only thing that grows, and 1 MiB
/// holds ~60,000 member names.
const BUF_BYTES_MAX: usize = 1 << 20;

/// The C library's databases.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemIds;

impl IdDatabase for SystemIds {
    fn user_name(&self, uid: u32) -> Option<String> {
        // SAFETY: `pw` and `buf` outlive the call; on success `out` points at `pw`, whose
        // string fields point into `buf`, and both are read before they go out of scope.
        with_buf(|buf| unsafe {
            let mut pw: libc::passwd = std::mem::zeroed();
            let mut out = std::ptr::null_mut();
            let rc = libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out);
            (rc, (!out.is_null()).then(|| c_string(pw.pw_name)).flatten())
        })
    }

    fn user_id(&self, name: &str) -> Option<u32> {
        let name = CString::new(name).ok()?;
        // SAFETY: as in `user_name`; `name` outlives the call.
        with_buf(|buf| unsafe {
            let mut pw: libc::passwd = std::mem::zeroed();
            let mut out = std::ptr::null_mut();
            let rc = libc::getpwnam_r(
                name.as_ptr(),
                &mut pw,
                buf.as_mut_ptr(),
                buf.len(),
                &mut out,
            );
            (rc, (!out.is_null()).then_some(pw.pw_uid))
        })
    }

    fn group_name(&self, gid: u32) -> Option<String> {
        // SAFETY: as in `user_name`, for `group`.
        with_buf(|buf| unsafe {
            let mut gr: libc::group = std::mem::zeroed();
            let mut out = std::ptr::null_mut();
            let rc = libc::getgrgid_r(gid, &mut gr, buf.as_mut_ptr(), buf.len(), &mut out);
            (rc, (!out.is_null()).then(|| c_string(gr.gr_name)).flatten())
        })
    }

    fn group_id(&self, name: &str) -> Option<u32> {
        let name = CString::new(name).ok()?;
        // SAFETY: as in `user_id`, for `group`.
        with_buf(|buf| unsafe {
            let mut gr: libc::group = std::mem::zeroed();
            let mut out = std::ptr::null_mut();
            let rc = libc::getgrnam_r(
                name.as_ptr(),
                &mut gr,
                buf.as_mut_ptr(),
                buf.len(),
                &mut out,
            );
            (rc, (!out.is_null()).then_some(gr.gr_gid))
        })
    }
}

/// Runs `call` with a buffer that grows on `ERANGE` (module notes); `call` returns the C
/// function's result code and what it found.
fn with_buf<T>(mut call: impl FnMut(&mut [libc::c_char]) -> (libc::c_int, Option<T>)) -> Option<T> {
    let mut len = BUF_BYTES_START;
    loop {
        let mut buf = vec![0 as libc::c_char; len];
        match call(&mut buf) {
            (libc::ERANGE, _) if len < BUF_BYTES_MAX => len *= 2,
            (0, found) => return found,
            // Not found is 0 with no entry; anything else (EIO, too large) is not found too.
            _ => return None,
        }
    }
}

/// # Safety
/// `p` is null or points at a NUL-terminated string.
unsafe fn c_string(p: *const libc::c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller's promise.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .ok()
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every system this runs on has root as uid 0 and a group with gid 0 ("root" on Linux,
    /// "wheel" on the BSDs).
    #[test]
    fn root_is_found_both_ways() {
        let db = SystemIds;
        assert_eq!(db.user_name(0).as_deref(), Some("root"));
        assert_eq!(db.user_id("root"), Some(0));
        let g = db.group_name(0).expect("a group with gid 0");
        assert_eq!(db.group_id(&g), Some(0));
        assert_eq!(db.user_id("no-such-user-sluice"), None);
        assert_eq!(db.user_id("nul\0inside"), None);
    }
}
