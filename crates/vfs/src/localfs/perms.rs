//! Permissions: the thread acts as the caller ([`CredGuard`]) for every `*at()` call, which the
//! kernel then checks; where the kernel cannot check (I/O on a descriptor the server opened), the
//! check is explicit: `faccessat2` with `AT_EACCESS` under the caller's credentials (the mode
//! bits on kernels without it), plus knfsd's owner override for READ and WRITE.

use super::base::{errno, LocalFs};
use crate::attr::{is_dir, is_reg};
use crate::creds::{Cred, CredGuard};
use crate::sys;
use crate::types::{Caller, FsError};
use std::io;
use std::os::fd::BorrowedFd;

impl LocalFs {
    pub(super) fn act_as(&self, caller: &Caller) -> Result<CredGuard, FsError> {
        CredGuard::switch(&caller.cred).map_err(|e| {
            tracing::error!(error = %e, uid = caller.cred.uid, "cannot switch credentials");
            FsError::ServerFault
        })
    }
}

/// Read permission for READ: read, or execute on a regular file, or ownership.
pub(super) fn may_read(fd: BorrowedFd<'_>, st: &libc::statx, cred: &Cred) -> Result<(), FsError> {
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
pub(super) fn may_write(fd: BorrowedFd<'_>, st: &libc::statx, cred: &Cred) -> Result<(), FsError> {
    if st.stx_uid == cred.uid {
        return Ok(());
    }
    permitted(fd, st, cred, libc::W_OK).map_err(|e| errno(&e))
}

/// May the caller (whose credentials are switched in) access the object with `mode`? The
/// kernel's answer (`faccessat2`); on kernels before 5.8, which lack it, the mode bits alone
/// (POSIX ACLs are then not consulted).
pub(super) fn permitted(
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
