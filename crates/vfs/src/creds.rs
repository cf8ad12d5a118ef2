//! Client credentials, applied for real on the calling thread.
//!
//! # Why the kernel checks permissions, not us
//! Linux file-system permission checks use a thread's *file-system* ids (fsuid, fsgid) and its
//! supplementary groups. Switching exactly those three on the thread that performs an operation
//! makes every check the kernel's own: mode bits, POSIX ACLs, sticky directories, LSMs, quota
//! ownership, `protected_hardlinks`, and the owner of what is created. Setting a non-zero fsuid
//! also drops the file-system capabilities (CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_CHOWN, ...) from the
//! thread's effective set, and setting it back to 0 restores them, so a root server really does
//! act as the user.
//!
//! ```text
//!   resolve handle (root: open_by_handle_at needs CAP_DAC_READ_SEARCH)
//!        │
//!   CredGuard::switch(cred) ── setgroups (raw syscall), setfsgid, setfsuid
//!        │  operation: openat / mknodat / renameat / faccessat2 ... checked by the kernel
//!   drop(guard)            ── setfsuid, setfsgid, setgroups back to what the thread had
//! ```
//!
//! All three calls are per thread only when made as raw system calls: glibc's `setgroups()`
//! (like `setuid()`) broadcasts the change to every thread of the process, which on a server with
//! a pool of worker threads would hand one client's groups to another's request. So
//! [`CredGuard`] uses `libc::syscall` directly, and restores the thread's previous values in
//! `Drop`, which also runs when an operation panics.
//!
//! The guard also sets the umask to 0 while it lives (restoring it afterwards): modes sent by
//! clients are final, as in knfsd, whose threads run with umask 0. The umask belongs to the
//! process's shared `fs_struct`, so the first switch on a thread gives that thread its own
//! (`unshare(CLONE_FS)`); from then on the thread no longer follows the process's `chdir` and
//! `chroot`, which a server does not use.
//!
//! A thread created while a guard is active inherits the switched identity: never spawn threads
//! from inside an operation.

use super::sys;
use std::cell::Cell;
use std::io;

/// AUTH_SYS allows at most 16 supplementary groups (RFC 5531 Appendix A); more are truncated.
pub const GROUPS_MAX: usize = 16;

/// A caller's identity: uid, primary gid and supplementary gids (from AUTH_SYS, after squashing).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    pub gids: Vec<u32>,
}

impl Cred {
    /// Root with no supplementary groups.
    pub fn root() -> Self {
        Cred::default()
    }

    /// A credential with only a uid and a primary gid.
    pub fn new(uid: u32, gid: u32) -> Self {
        Cred {
            uid,
            gid,
            gids: Vec::new(),
        }
    }

    pub fn with_groups(mut self, gids: &[u32]) -> Self {
        self.gids = gids.iter().copied().take(GROUPS_MAX).collect();
        self
    }

    /// Whether `gid` is the primary or a supplementary group.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.gids.contains(&gid)
    }
}

thread_local! {
    /// Whether this thread already has a private fs_struct (so its umask is its own).
    static FS_UNSHARED: Cell<bool> = const { Cell::new(false) };
}

/// The calling thread acts as a client until this guard is dropped.
///
/// Not `Send`: the credentials belong to the thread that switched them.
pub struct CredGuard {
    prev_umask: u32,
    prev_uid: u32,
    prev_gid: u32,
    prev_groups: Vec<u32>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl CredGuard {
    /// Switches the calling thread's fsuid, fsgid and supplementary groups to `cred`.
    pub fn switch(cred: &Cred) -> io::Result<CredGuard> {
        if !FS_UNSHARED.get() {
            sys::unshare_fs()?;
            FS_UNSHARED.set(true);
        }
        let prev_groups = sys::getgroups_thread()?;
        let groups = &cred.gids[..cred.gids.len().min(GROUPS_MAX)];
        sys::setgroups_thread(groups)?;
        // setfsgid/setfsuid cannot report failure except by leaving the id unchanged, which
        // only happens without CAP_SETUID/CAP_SETGID; that is checked below.
        let prev_gid = sys::setfsgid(cred.gid);
        let prev_uid = sys::setfsuid(cred.uid);
        let guard = CredGuard {
            prev_umask: sys::set_umask(0),
            prev_uid,
            prev_gid,
            prev_groups,
            _not_send: std::marker::PhantomData,
        };
        // Reading the ids back: setfsuid(-1) fails and returns the current value.
        let now_uid = sys::setfsuid(u32::MAX);
        let now_gid = sys::setfsgid(u32::MAX);
        if now_uid != cred.uid || now_gid != cred.gid {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        Ok(guard)
    }
}

impl Drop for CredGuard {
    fn drop(&mut self) {
        sys::set_umask(self.prev_umask);
        sys::setfsuid(self.prev_uid);
        sys::setfsgid(self.prev_gid);
        if let Err(e) = sys::setgroups_thread(&self.prev_groups) {
            // Cannot happen for a thread that could set the groups a moment ago; continuing
            // with a client's groups would be a security bug, so stop here.
            panic!("cannot restore supplementary groups: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn current() -> (u32, u32, Vec<u32>, u32) {
        let umask = sys::set_umask(0o22);
        sys::set_umask(umask);
        (
            sys::setfsuid(u32::MAX),
            sys::setfsgid(u32::MAX),
            sys::getgroups_thread().unwrap(),
            umask,
        )
    }

    #[test]
    fn switch_and_restore_on_this_thread_only() {
        let before = current();
        // A thread started *before* the switch (a new thread would inherit the switched ids).
        let (ask, asked) = std::sync::mpsc::channel::<()>();
        let (tell, told) = std::sync::mpsc::channel();
        let other = std::thread::spawn(move || {
            asked.recv().unwrap();
            tell.send(current()).unwrap();
        });
        let cred = Cred::new(1000, 1000).with_groups(&[1000, 27]);
        {
            let _g = CredGuard::switch(&cred).unwrap();
            let (u, g, groups, umask) = current();
            assert_eq!((u, g, umask), (1000, 1000, 0));
            assert_eq!(groups, vec![27, 1000]); // the kernel keeps them sorted
            ask.send(()).unwrap();
            let seen = told.recv().unwrap();
            assert_eq!(seen, before);
        }
        other.join().unwrap();
        assert_eq!(current(), before);
    }

    #[test]
    fn restored_after_panic() {
        let before = current();
        let r = std::panic::catch_unwind(|| {
            let _g = CredGuard::switch(&Cred::new(1234, 1234)).unwrap();
            panic!("boom");
        });
        assert!(r.is_err());
        assert_eq!(current(), before);
    }
}
