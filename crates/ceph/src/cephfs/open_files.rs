//! The open-file and directory-stream caches of [`CephFs`]: one libcephfs `Fh` per (inode,
//! read or read-write) kept open across READ, WRITE and COMMIT, and a directory stream kept
//! open between the pages of one READDIR walk.
//!
//! # Why
//! Before the cache every READ and WRITE made `ceph_ll_lookup_inode`, `ceph_ll_getattr`,
//! `ceph_ll_open`, the I/O, `ceph_ll_close` and another `ceph_ll_getattr`, and a first benchmark
//! run's statistics showed OPEN averaging 11 ms on the Ceph export (the getattrs cost
//! microseconds). What libcephfs does there (libcephfs 16.2, the Client of Ceph's
//! src/client/Client.cc, as documented by its behaviour; the source was not at hand to quote
//! line by line): an open asks the MDS for the capabilities its mode wants when the client does
//! not hold them yet (a round trip; an open for writing is journalled by the MDS), and the last
//! close of a mode drops what it wanted, so the next open asks again. nfs-ganesha's FSAL_CEPH
//! keeps its `Fh` open across operations for the same reason. With the file held open the
//! capabilities stay issued, reads and writes go to the OSDs through libcephfs's cache, and
//! `ceph_ll_getattr` is answered from the inode the client holds under those capabilities.
//!
//! Measured here (crates/ceph/tests/open_cache.rs, a one-node cluster): 100 READs of a file
//! through the cache make one `ceph_ll_open` and no `ceph_ll_lookup_inode` after the first; a
//! READDIR walk of 1,000 entries in pages of 50 opens the directory once. With one client
//! alone on a file whose caps it already holds, an open or close costs about 10 us and a
//! lookup by number 15 us, a getattr 3 to 7 us, a cached 4 KiB read under 20 us: the cost of
//! opening per call is the MDS round trip when the caps are not held (the benchmark's 11 ms
//! average OPEN, with other clients and gateways on the file system), which the cache pays
//! once per file instead of once per call. (The small benchmark before and after, on a busy
//! host: sluice's 4 KiB random reads 10 to 38 MB/s, 1,000 small-file creates 2.4 s to 1.4 s.)
//! And one fact that
//! shapes the policy: while one libcephfs client holds a file open for writing, another
//! client's `ceph_ll_read` of it waits until the writer closes it (seen with two mounts in one
//! process: the reader blocked in `ceph_ll_read` until the writer's idle close). So a
//! read-write file is closed as soon as its data is on the OSDs, after a COMMIT or a stable
//! WRITE, not only when idle: an NFS client writing a file keeps it open for the stream of
//! unstable WRITEs and lets it go at its COMMIT; another head's READ of a file whose writer
//! has not committed waits at most `idle`.
//!
//! READDIR walked a directory by opening it, seeking to the cookie and closing it, per page; a
//! stream kept open from one page to the next continues where it stopped instead (its buffered
//! chunk of entries is still there, so a page costs no MDS round trip unless a chunk ends).
//!
//! # The file cache
//! ```text
//!   READ  ─┐                         hit: the cached OpenFile (an Arc), its inode's attributes
//!   WRITE ─┼─► io_file(fh, access) ──┤      from ceph_ll_getattr (cached caps: no MDS trip)
//!   COMMIT ┘                         miss: resolve, check, ceph_ll_open, keep the inode ref
//!                                         and the Fh in the table
//!   CREATE ──► the Fh ceph_ll_create returns is cached read-write (the WRITE after it hits)
//!   table (IdleTable, pure): key (ino, snapid, access), count_max, idle
//!     closed when: read-write and its data committed (COMMIT, a stable WRITE: see above),
//!                  idle past `idle` (a sweeper thread ticks; `expire_idle(now)` for a driver),
//!                  the least recently used past `count_max`, the inode REMOVEd or RENAMEd
//!                  over through this CephFs (so a deleted file is not pinned as a stray),
//!                  its link count seen at 0 (removed by another client), the MDS asked
//!                  for the inode back (ino_release_cb: see below), CephFs dropped.
//! ```
//! A READ uses a read-write file when one is open (one Fh per inode then serves both). A value
//! leaves the table as an `Arc`: a READ still using it finishes, and the last holder closes
//! the Fh and puts the inode reference, outside the table's lock. COMMIT is `ceph_ll_fsync`
//! on the cached read-write Fh: libcephfs flushes the inode's dirty data whatever Fh wrote it,
//! so coherence with other Ceph clients is what it was with an Fh per call. Files are opened
//! as the mount's own user, as before: the mode-bit checks stay per call, per caller.
//!
//! A handle that names a cached inode is resolved from the cache too (GETATTR, SETATTR after a
//! WRITE): no `ceph_ll_lookup_inode`.
//!
//! # Cache pressure: the MDS's release requests
//! Each cached file holds one inode reference, the shape libcephfs asks about when the MDS
//! recalls caps: its `ino_release_cb` names an inode whose only reference is its user's
//! (`crate::release` has the protocol). The mount notes the request; the sweeper, woken by
//! the note, takes the notes and closes the cached files of those inodes (read and
//! read-write) and the directory streams of those directories or holding a pending entry's
//! reference to one of them, as nfs-ganesha's FSAL_CEPH drops its cache entry; so does any
//! cache operation that comes first. [`OpenCacheStats::released`] counts what was closed. A
//! call using the file at that moment keeps it (its `Arc`) until it returns; the file is not
//! served from the cache again, and its next use reopens it. What is not closed:
//! * the open files that hold the NFS server's byte-range locks in Ceph (`locks`): closing
//!   one would drop locks an NFS client holds. They hold an `Fh` but no inode reference of
//!   ours, so the request is not about them; their caps stay wanted while the lock is held,
//!   and a lock ends with its NFS state (LOCKU, CLOSE, lease expiry);
//! * the export root's reference, held for the mount's life (one inode);
//! * a directory stream a READDIR has taken out of the table for its page at that moment
//!   (the MDS asks again at its next recall if it still wants it);
//! * an inode with both a read and a read-write file cached: each holds a reference, and
//!   libcephfs asks only about inodes with one, so these wait for the cache's own bounds (a
//!   written file is closed at its COMMIT anyway).
//!
//! The open-file cache is not tied to NFS OPEN state: an NFS client's open stateid does not
//! pin a cached file, so no stateid keeps one from being released; the next READ or WRITE
//! under that stateid opens the file again.
//!
//! # The directory-stream cache
//! A READDIR that stops before the end leaves its stream in a table keyed by (directory, the
//! cookie of the last entry it returned), with the entry it read but could not fit (libcephfs
//! has moved past it; seeking back would drop its buffered chunk). The next page, asked with
//! that cookie, takes the stream out of the table and goes on from that entry; any other cookie
//! opens and seeks as before. A stream at the end of the directory is closed. The table is
//! bounded and idle streams are closed as files are.

use super::idle_table::{IdleLimits, IdleTable};
use super::CephFs;
use crate::ffi::{DirResult, Fh, Inode, Statx, Vino};
use crate::mount::{CallKind, CephMount};
use crate::release::{ReleaseQueue, Released};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Default [`OpenCacheConfig::files`]: 1024 files (each pins an inode and its capabilities in
/// this client; the MDS's default per-client cap limit is far above it), closed after 10 s idle
/// (an NFS client streaming a file sends its next READ or WRITE within milliseconds; a file
/// held longer keeps other Ceph clients' access to it uncached for no gain).
pub const OPEN_FILES_DEFAULT: IdleLimits = IdleLimits {
    count_max: 1024,
    idle: Duration::from_secs(10),
};

/// Default [`OpenCacheConfig::dirs`]: 64 walks in progress at once, 10 s between their pages.
pub const OPEN_DIRS_DEFAULT: IdleLimits = IdleLimits {
    count_max: 64,
    idle: Duration::from_secs(10),
};

/// The bounds of the caches (see the module notes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenCacheConfig {
    /// Open files. Default [`OPEN_FILES_DEFAULT`]; a `count_max` of 0 opens per call.
    pub files: IdleLimits,
    /// Directory streams between READDIR pages. Default [`OPEN_DIRS_DEFAULT`].
    pub dirs: IdleLimits,
}

impl Default for OpenCacheConfig {
    fn default() -> OpenCacheConfig {
        OpenCacheConfig {
            files: OPEN_FILES_DEFAULT,
            dirs: OPEN_DIRS_DEFAULT,
        }
    }
}

/// What the caches did since the mount (the libcephfs calls are in `CephStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenCacheStats {
    /// Files open in the cache now.
    pub files_open: u64,
    /// Files opened for the cache (misses).
    pub files_opened: u64,
    /// READ, WRITE and COMMIT served by a cached file.
    pub file_hits: u64,
    /// Directory streams kept between pages now.
    pub dirs_open: u64,
    /// Directory streams opened by READDIR.
    pub dirs_opened: u64,
    /// READDIR pages that went on with a kept stream.
    pub dir_hits: u64,
    /// Files and directory streams closed at the MDS's request (`ino_release_cb`).
    pub released: u64,
}

/// Read-only, or read and write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Access {
    Read,
    ReadWrite,
}

/// An open libcephfs file and the inode reference under it; closed when the last holder drops.
pub(super) struct OpenFile {
    mount: Arc<CephMount>,
    pub(super) inode: *mut Inode,
    pub(super) fh: *mut Fh,
}

// SAFETY: libcephfs calls on an inode and Fh are thread-safe; the pointers are released once,
// in Drop.
unsafe impl Send for OpenFile {}
unsafe impl Sync for OpenFile {}

impl Drop for OpenFile {
    fn drop(&mut self) {
        let m = &self.mount;
        // SAFETY: opened by ceph_ll_open, closed once; then the reference it was opened on.
        m.call(CallKind::Open, || unsafe {
            (m.lib.ceph_ll_close)(m.cmount, self.fh)
        });
        m.put(self.inode);
    }
}

/// An entry read from a stream but not yet returned.
pub(super) struct Pending {
    pub(super) name: Vec<u8>,
    pub(super) fileid: u64,
    pub(super) cookie: u64,
    pub(super) st: Statx,
    /// A reference returned by readdirplus (null without one), put unless taken.
    pub(super) inode: *mut Inode,
}

/// An open directory stream between two pages.
pub(super) struct DirStream {
    mount: Arc<CephMount>,
    pub(super) dirp: *mut DirResult,
    pub(super) pending: Option<Pending>,
}

// SAFETY: used by one call at a time (taken out of the table), released once in Drop.
unsafe impl Send for DirStream {}

impl DirStream {
    pub(super) fn new(mount: Arc<CephMount>, dirp: *mut DirResult) -> DirStream {
        DirStream {
            mount,
            dirp,
            pending: None,
        }
    }
}

impl Drop for DirStream {
    fn drop(&mut self) {
        if let Some(p) = self.pending.take() {
            self.mount.put(p.inode);
        }
        // SAFETY: opened by ceph_ll_opendir, released once.
        unsafe { (self.mount.lib.ceph_ll_releasedir)(self.mount.cmount, self.dirp) };
    }
}

type FileTable = IdleTable<(Vino, Access), Arc<OpenFile>>;
type DirTable = IdleTable<(Vino, u64), DirStream>;

/// The two tables and what the sweeper thread shares of them.
struct Tables {
    files: Mutex<FileTable>,
    dirs: Mutex<DirTable>,
    /// The mount's notes of the MDS's release requests (`crate::release`).
    releases: Arc<ReleaseQueue>,
    /// Files and directory streams closed at the MDS's request.
    released: AtomicU64,
}

impl Tables {
    /// Closes what has been idle too long at `now`.
    fn expire(&self, now: Instant) {
        let files = lock(&self.files).expire(now);
        let dirs = lock(&self.dirs).expire(now);
        drop((files, dirs));
    }

    /// Applies the release requests noted since the last time, if any (an atomic load when
    /// none are).
    fn honour_releases(&self) {
        if let Some(r) = self.releases.take() {
            self.release(&r);
        }
    }

    /// Closes the files and directory streams the MDS asked for: those of the inodes named,
    /// and a stream whose pending entry holds a reference to one of them (everything, when the
    /// queue overflowed). Closed outside the tables' locks, as every eviction is.
    fn release(&self, r: &Released) {
        if r.is_empty() {
            return;
        }
        // Counted under the table's lock, so that a snapshot of the stats (which reads the
        // count under the files' lock too) sees every closed file either open or released.
        let files = {
            let mut t = lock(&self.files);
            let gone = t.remove_if(|(v, _)| r.covers(*v));
            self.released
                .fetch_add(gone.len() as u64, Ordering::Relaxed);
            gone
        };
        let dirs = {
            let mut t = lock(&self.dirs);
            let gone = t.remove_entries_if(|(v, _), s| {
                r.covers(*v)
                    || s.pending.as_ref().is_some_and(|p| {
                        !p.inode.is_null()
                            && r.covers(Vino {
                                ino: p.fileid,
                                snapid: v.snapid,
                            })
                    })
            });
            self.released
                .fetch_add(gone.len() as u64, Ordering::Relaxed);
            gone
        };
        drop((files, dirs));
    }
}

/// The two tables, their counters, and the sweeper that closes idle entries and honours the
/// MDS's release requests.
pub(super) struct Caches {
    tables: Arc<Tables>,
    files_opened: AtomicU64,
    file_hits: AtomicU64,
    dirs_opened: AtomicU64,
    dir_hits: AtomicU64,
}

impl Caches {
    /// Empty tables, and a sweeper thread that ends once they are dropped. `releases` is the
    /// mount's queue of release requests ([`CephMount::release_queue`]).
    pub(super) fn new(config: OpenCacheConfig, releases: Arc<ReleaseQueue>) -> Caches {
        let tables = Arc::new(Tables {
            files: Mutex::new(IdleTable::new(config.files)),
            dirs: Mutex::new(IdleTable::new(config.dirs)),
            releases: releases.clone(),
            released: AtomicU64::new(0),
        });
        let tick = config
            .files
            .idle
            .min(config.dirs.idle)
            .checked_div(2)
            .unwrap_or_default()
            .clamp(Duration::from_millis(10), Duration::from_secs(5));
        let weak = Arc::downgrade(&tables);
        let spawned = std::thread::Builder::new()
            .name("ceph-open-sweep".into())
            .spawn(move || sweep(weak, releases, tick));
        // Without the thread, idle entries still go on the next insert, and release requests
        // on the next operation.
        drop(spawned);
        Caches {
            tables,
            files_opened: AtomicU64::new(0),
            file_hits: AtomicU64::new(0),
            dirs_opened: AtomicU64::new(0),
            dir_hits: AtomicU64::new(0),
        }
    }

    fn files(&self) -> std::sync::MutexGuard<'_, FileTable> {
        self.tables.honour_releases();
        lock(&self.tables.files)
    }

    fn dirs(&self) -> std::sync::MutexGuard<'_, DirTable> {
        self.tables.honour_releases();
        lock(&self.tables.dirs)
    }

    pub(super) fn stats(&self) -> OpenCacheStats {
        let t = &self.tables;
        let (files_open, released) = {
            let files = lock(&t.files);
            (files.len() as u64, t.released.load(Ordering::Relaxed))
        };
        OpenCacheStats {
            files_open,
            files_opened: self.files_opened.load(Ordering::Relaxed),
            file_hits: self.file_hits.load(Ordering::Relaxed),
            dirs_open: lock(&t.dirs).len() as u64,
            dirs_opened: self.dirs_opened.load(Ordering::Relaxed),
            dir_hits: self.dir_hits.load(Ordering::Relaxed),
            released,
        }
    }

    /// A cached file of `vino` for `access` (a read-write one serves a read), marked used.
    pub(super) fn file(&self, vino: Vino, access: Access, now: Instant) -> Option<Arc<OpenFile>> {
        let mut t = self.files();
        let hit = match access {
            Access::Read => t
                .get(&(vino, Access::ReadWrite), now)
                .or_else(|| t.get(&(vino, Access::Read), now)),
            Access::ReadWrite => t.get(&(vino, Access::ReadWrite), now),
        };
        if hit.is_some() {
            self.file_hits.fetch_add(1, Ordering::Relaxed);
        }
        hit
    }

    /// Any cached file of `vino` (for resolving a handle without a lookup), marked used.
    pub(super) fn any_file(&self, vino: Vino, now: Instant) -> Option<Arc<OpenFile>> {
        let mut t = self.files();
        t.get(&(vino, Access::ReadWrite), now)
            .or_else(|| t.get(&(vino, Access::Read), now))
    }

    pub(super) fn insert_file(&self, vino: Vino, access: Access, f: Arc<OpenFile>, now: Instant) {
        self.files_opened.fetch_add(1, Ordering::Relaxed);
        let gone = self.files().insert((vino, access), f, now);
        drop(gone);
    }

    /// Closes the cached file of `vino` for `access` (when no call is using it any more).
    pub(super) fn release(&self, vino: Vino, access: Access) {
        let gone = self.files().take(&(vino, access));
        drop(gone);
    }

    /// Closes the cached files and directory streams of inode `ino` (every snapshot).
    pub(super) fn forget(&self, ino: u64) {
        let files = self.files().remove_if(|(v, _)| v.ino == ino);
        let dirs = self.dirs().remove_if(|(v, _)| v.ino == ino);
        drop((files, dirs));
    }

    /// The stream a walk of `dir` left at `cookie`, out of the table.
    pub(super) fn take_dir(&self, dir: Vino, cookie: u64) -> Option<DirStream> {
        let s = self.dirs().take(&(dir, cookie));
        if s.is_some() {
            self.dir_hits.fetch_add(1, Ordering::Relaxed);
        }
        s
    }

    pub(super) fn opened_dir(&self) {
        self.dirs_opened.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn keep_dir(&self, dir: Vino, cookie: u64, s: DirStream, now: Instant) {
        let gone = self.dirs().insert((dir, cookie), s, now);
        drop(gone);
    }

    /// Closes what has been idle too long at `now`, and what the MDS asked for.
    pub(super) fn expire(&self, now: Instant) {
        self.tables.honour_releases();
        self.tables.expire(now);
    }

    /// Closes everything.
    pub(super) fn clear(&self) {
        let files = lock(&self.tables.files).clear();
        let dirs = lock(&self.tables.dirs).clear();
        drop((files, dirs));
    }
}

/// A table's lock; a panic elsewhere while holding it leaves a table that is still consistent
/// (every method leaves it whole), so a poisoned lock is used as is.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The sweeper: waits a tick, or less when the MDS asks for a release, then honours the
/// requests and closes the idle entries; ends once the tables are gone.
fn sweep(tables: Weak<Tables>, releases: Arc<ReleaseQueue>, tick: Duration) {
    loop {
        let asked = releases.wait(tick);
        let Some(t) = tables.upgrade() else {
            return;
        };
        if let Some(r) = asked {
            t.release(&r);
        }
        t.expire(Instant::now());
    }
}

impl CephFs {
    /// Closes the cached files and directory streams idle at `now` (the sweeper does this on
    /// its own; a driver or a test may call it with its clock).
    pub fn expire_idle(&self, now: Instant) {
        self.caches.expire(now);
    }

    /// What the open-file and directory-stream caches did.
    pub fn open_cache_stats(&self) -> OpenCacheStats {
        self.caches.stats()
    }

    /// A new cached-file value for an inode reference this call owns and an Fh opened on it.
    pub(super) fn open_file_value(&self, inode: *mut Inode, fh: *mut Fh) -> Arc<OpenFile> {
        Arc::new(OpenFile {
            mount: self.mount.clone(),
            inode,
            fh,
        })
    }
}
