//! Objects lately found inside the export, so that a handle used again and again (the
//! directory of every CREATE in an untar, the file an OPEN, SETATTR, GETATTR and CLOSE
//! follow one another on) is not proved to be inside the export each time.
//!
//! # Why
//! Proving it ([`LocalFs::confine`](super::LocalFs)) asks the kernel for the paths of the
//! export root and of the object (two `readlink`s of `/proc/self/fd/N`, each a walk of
//! procfs and a `d_path`): in a profile of `stat` through `sluice mount` over NFSv4.2 on this
//! project's 2-core machine (one LOOKUP COMPOUND per file, each resolving the directory and
//! then the new handle) they were 11% of the server's CPU, more than the file-system calls.
//!
//! # What is trusted, and for how long
//! An object proved inside is recorded with its stamp: device, inode number and ctime; so is
//! an object found by name in a directory just resolved (LOOKUP, CREATE, READDIRPLUS's
//! entries: `LocalFs::handle_for`), which is inside because its directory is. A
//! later resolution of the same kernel handle whose `statx` shows the same stamp within
//! [`CONFINED_TTL`] of the proof is taken as inside. A rename or link of the object itself
//! changes its ctime, so it is proved again at once. What the stamp cannot see is a rename of
//! one of its *ancestors* out of the export: such an object keeps being served for at most
//! the TTL (the open-file cache's validation stamp has the same blind spot, without the
//! bound; knfsd's default, `no_subtree_check`, does not check at all).
//!
//! # Bounds
//! At most [`CONFINED_ENTRIES_MAX`] entries; a record into a full table first drops the
//! entries past their TTL, and if none were, all of them (the next uses prove again). The
//! time is an argument, so the tests step it.

use crate::sys::KernelHandle;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a proof that an object is inside the export is trusted (see the module notes):
/// long enough to cover the burst of calls a client makes on one object (an untar's CREATE,
/// SETATTR, GETATTR and CLOSE of a file, the CREATEs of a directory's files), short enough
/// that an object whose directory was moved out of the export stops being served at once
/// for any practical purpose.
pub(super) const CONFINED_TTL: Duration = Duration::from_secs(1);

/// Entries kept at most: 4096 × ~150 bytes (the kernel handle is 128) ≈ 600 KiB.
pub(super) const CONFINED_ENTRIES_MAX: usize = 4096;

/// What must not have changed since the proof: device and inode (the same object) and the
/// ctime (not renamed, linked or re-permissioned since).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    pub dev_ino: (u64, u64),
    pub ctime: (i64, u32),
}

impl Stamp {
    pub(super) fn of(st: &libc::statx) -> Stamp {
        Stamp {
            dev_ino: crate::attr::dev_ino(st),
            ctime: (st.stx_ctime.tv_sec, st.stx_ctime.tv_nsec),
        }
    }
}

/// The table of recent proofs.
pub(super) struct Confined {
    ttl: Duration,
    entries_max: usize,
    seen: Mutex<HashMap<KernelHandle, (Stamp, Instant)>>,
}

impl Confined {
    pub(super) fn new(ttl: Duration, entries_max: usize) -> Confined {
        Confined {
            ttl,
            entries_max,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `kh` was proved inside less than the TTL before `now`, with the same stamp.
    pub(super) fn fresh(&self, kh: &KernelHandle, stamp: Stamp, now: Instant) -> bool {
        let seen = self.seen.lock().expect("confined lock");
        seen.get(kh)
            .is_some_and(|(s, at)| *s == stamp && now.saturating_duration_since(*at) < self.ttl)
    }

    /// Records that `kh` (with `stamp`) was proved inside at `now`.
    pub(super) fn record(&self, kh: KernelHandle, stamp: Stamp, now: Instant) {
        let mut seen = self.seen.lock().expect("confined lock");
        if seen.len() >= self.entries_max && !seen.contains_key(&kh) {
            let ttl = self.ttl;
            seen.retain(|_, (_, at)| now.saturating_duration_since(*at) < ttl);
            if seen.len() >= self.entries_max {
                seen.clear();
            }
        }
        seen.insert(kh, (stamp, now));
    }

    /// Entries held (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.seen.lock().expect("confined lock").len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kh(n: u8) -> KernelHandle {
        KernelHandle::new(1, &[n; 8]).expect("small handle")
    }

    fn stamp(ino: u64, ctime_s: i64) -> Stamp {
        Stamp {
            dev_ino: (8, ino),
            ctime: (ctime_s, 0),
        }
    }

    #[test]
    fn a_proof_is_trusted_for_the_ttl_with_the_same_stamp_only() {
        let c = Confined::new(Duration::from_secs(1), 16);
        let t0 = Instant::now();
        assert!(!c.fresh(&kh(1), stamp(5, 100), t0), "nothing proved yet");
        c.record(kh(1), stamp(5, 100), t0);
        assert!(c.fresh(&kh(1), stamp(5, 100), t0));
        assert!(c.fresh(&kh(1), stamp(5, 100), t0 + Duration::from_millis(999)));
        assert!(
            !c.fresh(&kh(1), stamp(5, 100), t0 + Duration::from_secs(1)),
            "past the TTL: prove again"
        );
        assert!(
            !c.fresh(&kh(1), stamp(5, 101), t0),
            "the ctime changed: renamed or linked since"
        );
        assert!(!c.fresh(&kh(1), stamp(6, 100), t0), "another object");
        assert!(!c.fresh(&kh(2), stamp(5, 100), t0), "another handle");
    }

    #[test]
    fn a_full_table_drops_stale_entries_then_everything() {
        let c = Confined::new(Duration::from_secs(1), 4);
        let t0 = Instant::now();
        for n in 0..4 {
            c.record(kh(n), stamp(u64::from(n), 1), t0);
        }
        assert_eq!(c.len(), 4);
        // Re-recording one already held needs no room.
        c.record(kh(0), stamp(0, 1), t0);
        assert_eq!(c.len(), 4);
        // Full, none stale: all go, the new one stays.
        c.record(kh(9), stamp(9, 1), t0);
        assert_eq!(c.len(), 1);
        assert!(c.fresh(&kh(9), stamp(9, 1), t0));
        assert!(!c.fresh(&kh(0), stamp(0, 1), t0));
        // Full with some stale: only the stale go.
        let t1 = t0 + Duration::from_secs(2);
        for n in 10..13 {
            c.record(kh(n), stamp(u64::from(n), 1), t1);
        }
        assert_eq!(c.len(), 4);
        c.record(kh(20), stamp(20, 1), t1);
        assert_eq!(c.len(), 4, "kh(9) was past its TTL and made room");
        assert!(c.fresh(&kh(10), stamp(10, 1), t1));
        assert!(c.fresh(&kh(20), stamp(20, 1), t1));
    }
}
