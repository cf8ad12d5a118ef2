//! The open-file cache: descriptors for READ, WRITE and COMMIT, kept open between RPCs.
//!
//! # Why
//! NFSv3 has no OPEN or CLOSE. Resolving a handle costs `open_by_handle_at` plus the confinement
//! check (a few system calls and a path walk in the kernel), and a sequential 1 GiB copy in 1 MiB
//! WRITEs would pay it a thousand times. knfsd keeps a similar cache (`nfsd_file`, the "filecache").
//!
//! # Shape
//! ```text
//!   key: the wire handle's bytes (already verified once: MAC, export, confinement)
//!   map: key ─► Slot { file: Arc<OpenFile>, tick }
//!   lru: tick ─► key          (BTreeMap: oldest first; a hit moves the entry to a new tick)
//! ```
//! The cache holds at most `limit` descriptors (default [`OPEN_FILES_DEFAULT`]). Inserting beyond
//! it evicts the least recently used. A descriptor is closed when it has been evicted *and* the
//! last operation using it finished (an `Arc`), so eviction never pulls a descriptor from under
//! a running `pread`. Evicted descriptors are dropped after the lock is released.
//!
//! Descriptors are opened by the server (as root), `O_RDWR` when root may, else `O_RDONLY`
//! (a read-only file system, an immutable file). On `io=direct` exports an entry also holds an
//! `O_DIRECT` twin descriptor ([`DirectFd`], same access mode), so such an entry costs two
//! descriptors and the backend halves the number of entries to keep the descriptor bound. A WRITE that finds a read-only entry reopens
//! the file and replaces the entry: the mode upgrade. The descriptors carry no client identity,
//! so every operation still checks the caller's permission explicitly (see `LocalFs::read`).
//!
//! # Invalidation
//! REMOVE and a RENAME over an existing name drop the victim's entries ([`OpenFiles::remove_inode`]).
//! Changes made behind the server's back are caught on use: every use `fstat`s the file, a link
//! count of zero answers `FsError::Stale`, and a ctime other than the one recorded when the entry
//! was last found inside the export (its *validation stamp*) makes the backend check the handle
//! again (a rename or link changes the ctime), so a file moved out of the export stops being
//! served. The backend's own WRITE and SETATTR carry the stamp forward, so they do not cause
//! re-checks.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Default for the number of cached descriptors. The default `RLIMIT_NOFILE` soft limit is 1024
/// and systemd raises services to 524288; 1024 leaves room for sockets under either.
pub const OPEN_FILES_DEFAULT: usize = 1024;

/// A second descriptor of the same file opened `O_DIRECT` (exports with `io=direct`), with the
/// alignment the file system asks of it.
#[derive(Debug)]
pub struct DirectFd {
    fd: OwnedFd,
    /// `stx_dio_mem_align`: buffer addresses must be multiples of it.
    pub mem_align_bytes: u32,
    /// `stx_dio_offset_align`: file offsets and lengths must be multiples of it.
    pub offset_align_bytes: u32,
}

impl DirectFd {
    pub fn new(fd: OwnedFd, mem_align_bytes: u32, offset_align_bytes: u32) -> DirectFd {
        DirectFd {
            fd,
            mem_align_bytes,
            offset_align_bytes,
        }
    }
}

impl AsFd for DirectFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// An open regular file.
#[derive(Debug)]
pub struct OpenFile {
    fd: OwnedFd,
    /// The `O_DIRECT` twin of `fd` (same access mode), on `io=direct` exports only.
    direct: Option<DirectFd>,
    writable: bool,
    dev: u64,
    ino: u64,
    /// The ctime (as packed by the backend) at which the file was last known to be inside the
    /// export. A torn or stale value only causes an extra check.
    validated: AtomicU64,
}

impl OpenFile {
    pub fn new(fd: OwnedFd, writable: bool, dev: u64, ino: u64, validated: u64) -> OpenFile {
        OpenFile {
            fd,
            direct: None,
            writable,
            dev,
            ino,
            validated: AtomicU64::new(validated),
        }
    }

    /// Adds the `O_DIRECT` twin descriptor.
    pub fn with_direct(mut self, direct: DirectFd) -> OpenFile {
        self.direct = Some(direct);
        self
    }

    /// The `O_DIRECT` twin descriptor, if the file has one.
    pub fn direct(&self) -> Option<&DirectFd> {
        self.direct.as_ref()
    }

    /// Whether the file was last validated at `stamp`.
    pub fn validated_at(&self, stamp: u64) -> bool {
        self.validated.load(Ordering::Relaxed) == stamp
    }

    /// Records a new validation.
    pub fn set_validated(&self, stamp: u64) {
        self.validated.store(stamp, Ordering::Relaxed);
    }

    /// Moves the validation from `from` to `to` (an own change), unless something else changed
    /// the file first (then the next use checks it again).
    pub fn advance_validated(&self, from: u64, to: u64) {
        let _ = self
            .validated
            .compare_exchange(from, to, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Whether the descriptor was opened `O_RDWR`.
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// `(st_dev, st_ino)` of the file.
    pub fn inode(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    /// Starts writing the dirty pages of `len` bytes at `offset` to the disk and returns without
    /// waiting for them (`sync_file_range(SYNC_FILE_RANGE_WRITE)`; it may still wait for a free
    /// slot in the device's request queue). A hint: it makes nothing durable (COMMIT still
    /// syncs), so an error is only returned, never acted on. Write-behind calls it after each
    /// clustered flush (see `sluice_engine::writebehind`, "After a flush lands").
    pub fn start_writeback(&self, offset: u64, len: u64) -> std::io::Result<()> {
        let offset = i64::try_from(offset).unwrap_or(i64::MAX);
        let len = i64::try_from(len).unwrap_or(0);
        // SAFETY: a descriptor we own and integer arguments.
        let r = unsafe {
            libc::sync_file_range(
                std::os::fd::AsRawFd::as_raw_fd(&self.fd),
                offset,
                len,
                libc::SYNC_FILE_RANGE_WRITE,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

impl AsFd for OpenFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

struct Slot {
    file: Arc<OpenFile>,
    tick: u64,
}

struct Lru {
    map: HashMap<Box<[u8]>, Slot>,
    order: BTreeMap<u64, Box<[u8]>>,
    tick: u64,
}

/// A bounded LRU of open files keyed by file handle. Shared by the threads serving requests.
pub struct OpenFiles {
    limit: usize,
    inner: Mutex<Lru>,
}

impl OpenFiles {
    /// A cache of at most `limit` descriptors (at least 1).
    pub fn new(limit: usize) -> OpenFiles {
        OpenFiles {
            limit: limit.max(1),
            inner: Mutex::new(Lru {
                map: HashMap::new(),
                order: BTreeMap::new(),
                tick: 0,
            }),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Number of cached descriptors.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cached file for `key`, marking it most recently used.
    pub fn get(&self, key: &[u8]) -> Option<Arc<OpenFile>> {
        let mut g = self.lock();
        let lru = &mut *g;
        let slot = lru.map.get_mut(key)?;
        lru.tick += 1;
        let key_box = lru.order.remove(&slot.tick).expect("order mirrors map");
        slot.tick = lru.tick;
        lru.order.insert(lru.tick, key_box);
        Some(slot.file.clone())
    }

    /// Caches `file` under `key` (replacing an entry for the same key), evicting the least
    /// recently used entries beyond the limit. Returns the shared file.
    pub fn insert(&self, key: &[u8], file: OpenFile) -> Arc<OpenFile> {
        let file = Arc::new(file);
        let mut evicted = Vec::new();
        {
            let mut g = self.lock();
            let lru = &mut *g;
            lru.tick += 1;
            let tick = lru.tick;
            if let Some(old) = lru.map.remove(key) {
                lru.order.remove(&old.tick);
                evicted.push(old.file);
            }
            let key: Box<[u8]> = key.into();
            lru.order.insert(tick, key.clone());
            lru.map.insert(
                key,
                Slot {
                    file: file.clone(),
                    tick,
                },
            );
            while lru.map.len() > self.limit {
                evicted.extend(Self::pop_oldest(lru));
            }
        }
        drop(evicted); // Closed outside the lock (unless still in use elsewhere).
        file
    }

    /// Drops the entry for `key`.
    pub fn remove<Q: Borrow<[u8]> + ?Sized>(&self, key: &Q) {
        let old = {
            let mut g = self.lock();
            let lru = &mut *g;
            lru.map.remove(key.borrow()).map(|s| {
                lru.order.remove(&s.tick);
                s.file
            })
        };
        drop(old);
    }

    /// Drops every entry for the inode `(dev, ino)`; returns how many.
    pub fn remove_inode(&self, dev: u64, ino: u64) -> usize {
        let mut evicted = Vec::new();
        {
            let mut g = self.lock();
            let lru = &mut *g;
            let order = &mut lru.order;
            lru.map.retain(|_, s| {
                if s.file.inode() == (dev, ino) {
                    order.remove(&s.tick);
                    evicted.push(s.file.clone());
                    false
                } else {
                    true
                }
            });
        }
        evicted.len()
    }

    /// Evicts least recently used entries until at most `keep` remain (used when the process
    /// runs out of descriptors).
    pub fn shrink_to(&self, keep: usize) {
        let mut evicted = Vec::new();
        {
            let mut g = self.lock();
            while g.map.len() > keep {
                evicted.extend(Self::pop_oldest(&mut g));
            }
        }
        drop(evicted);
    }

    fn pop_oldest(lru: &mut Lru) -> Option<Arc<OpenFile>> {
        let (_, key) = lru.order.pop_first()?;
        lru.map.remove(&key).map(|s| s.file)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        // A panic while holding the lock cannot leave the map and the order inconsistent in a
        // way that matters more than losing the cache, so recover the data.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(ino: u64) -> OpenFile {
        let fd = std::fs::File::open("/dev/null").unwrap();
        OpenFile::new(fd.into(), false, 1, ino, 0)
    }

    #[test]
    fn evicts_least_recently_used() {
        let c = OpenFiles::new(2);
        c.insert(b"a", file(1));
        c.insert(b"b", file(2));
        assert!(c.get(b"a").is_some()); // a is now newer than b
        c.insert(b"c", file(3));
        assert_eq!(c.len(), 2);
        assert!(c.get(b"b").is_none());
        assert!(c.get(b"a").is_some());
        assert!(c.get(b"c").is_some());
    }

    #[test]
    fn replace_remove_and_inode_invalidation() {
        let c = OpenFiles::new(10);
        c.insert(b"a", file(1));
        c.insert(b"a2", file(1));
        c.insert(b"b", file(2));
        let w = c.insert(
            b"b",
            OpenFile::new(
                std::fs::File::open("/dev/null").unwrap().into(),
                true,
                1,
                2,
                0,
            ),
        );
        assert!(w.writable());
        assert_eq!(c.len(), 3);
        assert_eq!(c.remove_inode(1, 1), 2);
        assert_eq!(c.len(), 1);
        c.remove(&b"b"[..]);
        assert!(c.is_empty());
        for i in 0..10u64 {
            c.insert(&i.to_be_bytes(), file(i));
        }
        c.shrink_to(3);
        assert_eq!(c.len(), 3);
        assert!(c.get(&9u64.to_be_bytes()).is_some());
    }

    #[test]
    fn in_use_descriptor_survives_eviction() {
        let c = OpenFiles::new(1);
        let a = c.insert(b"a", file(1));
        c.insert(b"b", file(2));
        assert!(c.get(b"a").is_none());
        // Still usable: the Arc keeps it open.
        let dup = a.as_fd().try_clone_to_owned();
        assert!(dup.is_ok());
    }

    #[test]
    fn start_writeback_of_a_written_range() {
        use std::io::Write;
        let path = std::env::temp_dir().join(format!("sluice-wb-start-{}", std::process::id()));
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&[7u8; 64 * 1024]).unwrap();
        let file = OpenFile::new(f.into(), true, 1, 1, 0);
        let r = file.start_writeback(0, 64 * 1024);
        let whole = file.start_writeback(4096, u64::MAX); // len clamped: to the end
        std::fs::remove_file(&path).unwrap();
        r.unwrap();
        whole.unwrap();
    }
}
