//! [`ReleaseQueue`]: the MDS's cache-pressure requests, carried from libcephfs's callback
//! thread to the open-file cache that can honour them.
//!
//! # What the MDS asks, and who can answer
//! When the MDS wants capabilities back (its cache is over its memory limit, a client holds
//! more than `mds_max_caps_per_client`, or an operator ran `ceph tell mds.X cache drop`), it
//! sends the client a recall with a new cap limit. libcephfs then walks its caps, drops what
//! nobody uses, and for each inode it cannot drop because its user holds exactly one
//! reference to it (`ll_ref == 1`, the shape of a gateway's cache entry) it calls
//! `ino_release_cb(vino)` from a finisher thread of its own: "let go of this one if you can".
//! The reference is sluice's to put; until it does, the inode and its caps stay in the client
//! and count against the limit. nfs-ganesha's FSAL_CEPH answers by dropping the entry from its
//! cache; sluice's entries are the open-file cache's files and directory streams
//! (`cephfs::open_files`).
//!
//! # The hand-over
//! The callback must not call into libcephfs (it runs on libcephfs's thread, and closing a
//! file may wait for the MDS) and must not wait for anything slow. So it only notes the
//! inode here; the open-file cache takes the notes and closes what it holds of those inodes,
//! outside the callback, on its sweeper thread (woken by the note, so "soon" is the time it
//! takes to close the files) or on its next operation (whichever comes first):
//!
//! ```text
//!   libcephfs finisher ── ino_release_cb(vino) ──► push(vino)     lock, append, unlock, wake
//!   ceph-open-sweep ─────────────── wait(tick) ──► Released       the notes, the queue empty
//!   a cache operation ────────────────── take() ──► Released       (an atomic load when empty)
//!         └─► files and directory streams of those inodes out of their tables, closed
//!             (ceph_ll_close, ceph_ll_put) outside every lock
//! ```
//!
//! The queue is bounded ([`RELEASE_QUEUE_MAX`]) and allocates nothing in `push`: its buffer is
//! reserved when it is emptied, outside the lock. Past the bound the queue remembers only that
//! it overflowed, and the next drain closes everything the cache holds: a recall that large
//! asks for most of what the client caches anyway, and every entry is reopened on its next
//! use. The lock is held for an append or a swap of two vectors, never across a libcephfs
//! call, so the callback never waits behind a close.

use crate::ffi::Vino;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// The most inodes noted between two drains: about four times what the open-file cache holds
/// by default ([`OPEN_FILES_DEFAULT`](crate::OPEN_FILES_DEFAULT) and
/// [`OPEN_DIRS_DEFAULT`](crate::OPEN_DIRS_DEFAULT), 1,088 entries), so only a cache configured
/// far larger, or a drain long delayed, overflows. 4096 notes are 64 KiB.
pub const RELEASE_QUEUE_MAX: usize = 4096;

/// What the MDS asked to release since the last drain.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Released {
    /// The inodes named, each once, in the order first asked.
    pub vinos: Vec<Vino>,
    /// More were asked than the queue holds: release everything that can be.
    pub everything: bool,
}

impl Released {
    /// Whether an entry of `vino` is to be released.
    pub fn covers(&self, vino: Vino) -> bool {
        self.everything || self.vinos.contains(&vino)
    }

    pub fn is_empty(&self) -> bool {
        !self.everything && self.vinos.is_empty()
    }
}

struct Notes {
    vinos: Vec<Vino>,
    overflowed: bool,
}

/// The bounded hand-over of release requests (see the module notes).
pub struct ReleaseQueue {
    notes: Mutex<Notes>,
    wake: Condvar,
    /// Something is noted: lets a cache operation skip the lock when nothing is.
    pending: AtomicBool,
    max: usize,
}

impl Default for ReleaseQueue {
    fn default() -> ReleaseQueue {
        ReleaseQueue::with_max(RELEASE_QUEUE_MAX)
    }
}

impl ReleaseQueue {
    /// An empty queue that notes at most `max` inodes between drains.
    pub fn with_max(max: usize) -> ReleaseQueue {
        ReleaseQueue {
            notes: Mutex::new(Notes {
                vinos: Vec::with_capacity(max),
                overflowed: false,
            }),
            wake: Condvar::new(),
            pending: AtomicBool::new(false),
            max,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Notes> {
        // Every critical section leaves the notes whole: a poisoned lock is used as is.
        self.notes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes a request (the callback's side): no allocation, no libcephfs call, no wait but
    /// for the lock's few instructions.
    pub fn push(&self, vino: Vino) {
        {
            let mut n = self.lock();
            if n.vinos.len() < self.max {
                n.vinos.push(vino);
            } else {
                n.overflowed = true;
            }
            self.pending.store(true, Ordering::Release);
        }
        self.wake.notify_all();
    }

    /// The requests noted so far, and the queue empty again; `None` when nothing was noted.
    pub fn take(&self) -> Option<Released> {
        if !self.pending.load(Ordering::Acquire) {
            return None;
        }
        let fresh = Vec::with_capacity(self.max);
        let n = self.lock();
        self.swap(n, fresh)
    }

    /// As [`take`](Self::take), waiting up to `timeout` for a first request (the sweeper's
    /// tick).
    pub fn wait(&self, timeout: Duration) -> Option<Released> {
        let fresh = Vec::with_capacity(self.max);
        let n = self.lock();
        let (n, _) = self
            .wake
            .wait_timeout_while(n, timeout, |n| n.vinos.is_empty() && !n.overflowed)
            .unwrap_or_else(|p| p.into_inner());
        self.swap(n, fresh)
    }

    fn swap(&self, mut n: MutexGuard<'_, Notes>, fresh: Vec<Vino>) -> Option<Released> {
        if n.vinos.is_empty() && !n.overflowed {
            return None;
        }
        let vinos = std::mem::replace(&mut n.vinos, fresh);
        let everything = std::mem::take(&mut n.overflowed);
        self.pending.store(false, Ordering::Release);
        drop(n);
        let mut seen = std::collections::HashSet::with_capacity(vinos.len());
        let vinos = vinos.into_iter().filter(|v| seen.insert(*v)).collect();
        Some(Released { vinos, everything })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn v(ino: u64) -> Vino {
        Vino {
            ino,
            snapid: crate::ffi::NOSNAP,
        }
    }

    #[test]
    fn nothing_noted_is_nothing_taken() {
        let q = ReleaseQueue::with_max(4);
        assert_eq!(q.take(), None);
        assert_eq!(q.wait(Duration::ZERO), None);
    }

    #[test]
    fn notes_are_taken_once_each_in_order_and_the_queue_empties() {
        let q = ReleaseQueue::with_max(8);
        for ino in [5, 3, 5, 9, 3] {
            q.push(v(ino));
        }
        let r = q.take().expect("noted");
        assert_eq!(r.vinos, [v(5), v(3), v(9)]);
        assert!(!r.everything);
        assert!(r.covers(v(9)) && !r.covers(v(4)));
        // A snapshot of the same inode is another object.
        assert!(!r.covers(Vino { ino: 5, snapid: 2 }));
        assert_eq!(q.take(), None, "taken once");
        q.push(v(7));
        assert_eq!(q.take().expect("noted again").vinos, [v(7)]);
    }

    #[test]
    fn past_the_bound_the_queue_asks_for_everything() {
        let q = ReleaseQueue::with_max(2);
        for ino in 1..=5 {
            q.push(v(ino));
        }
        let r = q.take().expect("noted");
        assert_eq!(r.vinos, [v(1), v(2)], "the first ones are kept");
        assert!(r.everything);
        assert!(r.covers(v(5)));
        // The overflow is forgotten once taken: the next round is bounded again.
        q.push(v(6));
        let r = q.take().expect("noted");
        assert!(!r.everything);
        assert!(!r.covers(v(1)));
    }

    #[test]
    fn a_waiting_drainer_gets_what_another_thread_notes() {
        let q = Arc::new(ReleaseQueue::with_max(4));
        let pusher = {
            let q = q.clone();
            std::thread::spawn(move || q.push(v(42)))
        };
        // Whichever runs first, the note is there once the pusher is done: a wait returns it
        // at once if it came before, or is woken by it (the bound only ends a broken test).
        let mut got = Released::default();
        let t0 = std::time::Instant::now();
        while got.is_empty() && t0.elapsed() < Duration::from_secs(60) {
            got = q.wait(Duration::from_secs(60)).unwrap_or_default();
        }
        pusher.join().unwrap();
        assert_eq!(got.vinos, [v(42)]);
        assert_eq!(q.take(), None);
    }
}
