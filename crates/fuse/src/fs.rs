//! [`Fs`]: an async filesystem over a [`Namespace`] (NFSv3, 4.1 or 4.2), shaped for FUSE but
//! independent of it.
//!
//! ```text
//!   fuse.rs (fuser callbacks) ──► Fs ──► Arc<dyn Namespace> (v3 Client or v4::Client)
//!                                  │
//!      Tables (std Mutex, never held across an await)
//!        inodes   ino ─► { fh, lookups, CachedAttr }      (FUSE node ids; forget drops them)
//!        by_fh    fh  ─► ino
//!        names    (dir ino, name) ─► { fh, attr, dir mtime when cached }   (bounded)
//!      open       ino ─► FileIo (tokio Mutex): the namespace's OpenFile (reads: autotuned
//!                        readahead within the client's memory budget) and its FileWriter
//!                        (write-behind: UNSTABLE WRITEs, COMMIT, resend on a verifier change)
//!      handles    FUSE file handle ─► ino;  dirs: FUSE dir handle ─► listing snapshot
//! ```
//!
//! # Inode numbers
//! A node id is the NFS `fileid`, so that `st_ino` and `d_ino` agree with the server (`ls -i`,
//! `find`, hard links). Two exceptions: the export root is node 1 (FUSE's root id) and a file
//! whose fileid is 1 takes the root's fileid instead; and a fileid already used by another live
//! handle (a file replaced on the server while the kernel still knows the old one, or an export
//! spanning file systems) gets a synthetic id above 2^63.
//!
//! # Caching (the Linux NFS client's rules)
//! - Attributes: [`CachedAttr`] with acregmin/acregmax/acdirmin/acdirmax; the kernel gets the
//!   remaining validity as its TTL. Every reply carrying post-op attributes refreshes the cache;
//!   a create's reply carries its directory's too (`Namespace::create_in_dir`), so the
//!   kernel's permission check before the next create in the directory needs no GETATTR.
//! - Names: a positive LOOKUP or READDIRPLUS entry is reused while the directory's cached mtime
//!   equals the mtime it was cached under and the directory's attributes are fresh; any change
//!   of the directory makes its entries be looked up again (Linux's dentry revalidation). A
//!   name not in the cache is looked up without the directory's attributes being fetched
//!   first (they validate cached names only).
//! - Close-to-open (RFC 1813 §4.11 practice): `open` sends GETATTR; if the file changed since
//!   the attributes the cache held (the NFSv4 change attribute where the server has one, else
//!   size and mtime; `cache::data_changed`), or an earlier LOOKUP or GETATTR saw it
//!   change, the caller is told to drop cached pages. `flush`/`release`/`fsync` write the
//!   dirty data and COMMIT it before returning. The exception is an open right after a LOOKUP
//!   (the kernel sends LOOKUP and then OPEN for one `open(2)` of a name it has not cached):
//!   attributes from the server less than [`FsConfig::open_trusts_attrs_for`] (2 ms) old are
//!   used as they are, as Linux does not revalidate a dentry it has just looked up. That saves
//!   one round trip per file opened by name (a 40 ms link: `cat` of a new name waits 2 RTTs
//!   before its first READ instead of 3). The price is a window of those 2 ms plus the reply's
//!   one-way delay in which another client's close could go unseen when a separate `stat`
//!   looked the name up just before.
//!
//! # One data path, any version
//! Reads and writes go through the client library's [`OpenFile`] (its `File` reader and
//! writer), the same code `sluice cp` and `sluice cat` use, over NFSv3 or v4; this module adds
//! only what a mount needs on top. Handles are the neutral [`Handle`], attributes the neutral
//! [`Attr`] (see [`sluice_client::namespace`]).
//!
//! # Open state (NFSv4)
//! A FUSE open of a file with no open state yet is an OPEN (CLAIM_FH) with the access asked
//! for: READ for `O_RDONLY`, BOTH otherwise. Every handle of one file shares that open (and its
//! read cache and writer); a write open of a file open only for reading makes a second OPEN
//! with BOTH, which carries the I/O from then on. The last release CLOSEs them all, after the
//! dirty data is committed; READ, WRITE and a truncating SETATTR carry the open stateid. A
//! delegation that came with the OPEN is the v4 client's business: a recall is answered by
//! its deleg core (COMMIT, DELEGRETURN) without this module. Over v4 the OPEN's own GETATTR is
//! the close-to-open revalidation of a first open. NFSv3 has no open state: an open is free.
//!
//! # Locks (NFSv4 LOCK, NFSv3 NLM)
//! `fcntl` and `flock` locks reach [`Fs::getlk`] / [`Fs::setlk`] (the mount asks the kernel
//! for both with FUSE_POSIX_LOCKS and FUSE_FLOCK_LOCKS, over v4 only) and become LOCKT, LOCK
//! and LOCKU under the file's open, one NFS lock owner per FUSE `lock_owner` (a process's
//! `fcntl` locks; one open file description's `flock`). A `flock` is a lock of the whole file,
//! as Linux's NFS client makes it, so over NFS `flock` and `fcntl` locks conflict with each
//! other. A waiting lock (`F_SETLKW`, `flock` without `LOCK_NB`) polls the server while it is
//! denied, 1 s doubling to 30 s between tries as Linux does for NFS4ERR_DENIED, and gives up
//! with EINTR when the waiting process has a signal to take (see [`Fs::setlk`]). The kernel
//! does not unlock by itself when the fs keeps the locks: `flush` drops the `fcntl` locks of
//! its `lock_owner` and `release` the `flock` of its file. Over NFSv3 the same calls become
//! NLM v4 LOCK, TEST and UNLOCK to the server's lock manager (`sluice_client`'s
//! `v3/client/nlm.rs`), so v3 and v4 mounts of one server see each other's locks.
//!
//! # Writes
//! The kernel's writes go to the file's [`FileWriter::write_at`]: contiguous ones fill wsize
//! UNSTABLE WRITEs, several in flight (`ClientOptions::write_depth`), and every reply's
//! verifier is kept until a COMMIT matches it; a write elsewhere first sends what is buffered.
//! `sync` (flush on close, fsync) is [`FileWriter::sync`]: the rest is sent, then COMMITs until
//! the verifier confirms everything, resending what a server restart may have lost. Errors of
//! background WRITEs are kept and reported by the next flush/fsync, like Linux reports them at
//! close. A getattr or read of a file with unanswered WRITEs first waits for them, so size,
//! mtime and data are the server's after the writes.
//!
//! # Writes under a write delegation (NFSv4)
//! On unless [`FsConfig::write_delegations`] is off (`--no-write-delegations`). A file the
//! mount creates comes with a write delegation when the server grants one (the v4 client asks
//! for it on creates once [`Fs::new`] registered its write-back hook). Until the delegation
//! goes back no other client sees the file, so its close need not make the data
//! stable: `flush` and `release` send what is buffered (WRITEs, UNSTABLE) and COMMIT nothing,
//! and the last release parks the file's writer, with the data the server has not committed,
//! in [`Fs`]'s parked table. That data is committed, and resent if the server's write
//! verifier changed (a restart lost it), when the client returns the delegation: on CB_RECALL
//! before its DELEGRETURN, and at unmount; or when the file is opened again; or, past
//! [`PARKED_FILES_MAX`] parked files, at once. `fsync` commits as always. So a small file
//! costs its OPEN, one WRITE and its CLOSE, without a disk flush on the server per file (the
//! COMMIT comes later, or the recall's). This is the Linux client's way under a write
//! delegation (`nfs4_file_flush` starts the write-back and does not wait for a COMMIT).
//!
//! # Attribute changes under a write delegation (NFSv4)
//! `tar` sets each file's times, owner and mode on the open descriptor after writing it, one
//! FUSE SETATTR each. On a file open for writing under a write delegation, a SETATTR of
//! mode, owner or times (no size, no set-id bits) is held in the open's I/O state, merged
//! with the ones that follow, and answered with the attributes the file will have (the
//! cached ones with the changes applied, the size covering what this open wrote, ctime now);
//! a GETATTR of the file (the kernel asks before a chown) is answered the same. The one
//! merged SETATTR goes out, after the data written before it, at the first of: the close
//! (`flush`/`release`), `fsync`, a write (which must move mtime on after the set times), a
//! SETATTR that cannot be held. So `tar`'s three SETATTRs cost one. The delegation makes the
//! file this client's alone until a recall (RFC 8881 §10.4): no other client opens it
//! without one, and the hold never outlives the open, so the change reaches the server
//! before the delegation goes back when the file was closed first, and at the close
//! otherwise (like data still buffered in an open file). The price: an error of the held
//! SETATTR (a server that refuses the owner) is reported by the close, not by the `fchown`;
//! and a `stat` from another client between the `fchmod` and the close sees the old mode,
//! as it would have had the `fchmod` come later.

use crate::cache::{AttrCacheConfig, CachedAttr};
use bytes::Bytes;
use sluice_client::namespace::{
    Attr, CreateMode, Error as NsError, FileType, FsStat, Handle, Namespace, OpenFile,
    ProtoVersion, SetAttr as NsSetAttr, SetTime, SpecialKind, Status, Time, WriteBack, Writer,
    XattrSet,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// The attribute namespace NFSv4.2 carries (RFC 8276 §5): the only one a mount serves.
const XATTR_USER_PREFIX: &[u8] = b"user.";

/// A FUSE node id.
pub type Ino = u64;
/// The export root's node id (FUSE_ROOT_ID).
pub const ROOT_INO: Ino = 1;

/// Synthetic node ids (fileid collisions) start here, far above real fileids.
const SYNTHETIC_INO_BASE: u64 = 1 << 63;

/// Closed files whose written data is kept uncommitted under a write delegation (see "Writes
/// under a write delegation"): 1024, a quarter of the client's delegation table
/// (`DELEGATIONS_MAX`). A parked writer holds the data the server has not committed, which
/// for a file written in one go is the file (the writer's COMMIT bound caps it otherwise), so
/// 1024 small files are a few MiB. Past it a release commits at once.
pub const PARKED_FILES_MAX: usize = 1024;

/// A POSIX error number for the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

pub type FsResult<T> = Result<T, Errno>;

/// Settings of an [`Fs`].
#[derive(Debug, Clone)]
pub struct FsConfig {
    /// Attribute cache timeouts (Linux defaults 3/60/30/60 s).
    pub attr: AttrCacheConfig,
    /// Refuse every modification with EROFS.
    pub read_only: bool,
    /// Entries of the name cache; when full it is cleared (they are only hints). Default 64 Ki.
    pub name_cache_entries_max: usize,
    /// The AUTH_SYS identity the mount's calls carry (the client options' uid and gid, else
    /// the process's): new files of another caller are given that caller's ids.
    pub auth_ids: (u32, u32),
    /// Over NFSv3, an open trusts attributes the server sent less than this long ago instead
    /// of asking again (see "Close-to-open" in the module docs). Default 2 ms; 0 (`--noac`):
    /// every open asks.
    pub open_trusts_attrs_for: Duration,
    /// Take write delegations on creates and keep the written data uncommitted past the
    /// close under them, and the SETATTRs of the open file merged until its close (NFSv4;
    /// see "Writes under a write delegation"). Default true; `--no-write-delegations` turns
    /// it off, and then every close COMMITs what it wrote.
    pub write_delegations: bool,
}

impl Default for FsConfig {
    fn default() -> Self {
        FsConfig {
            attr: AttrCacheConfig::default(),
            read_only: false,
            name_cache_entries_max: 64 << 10,
            // SAFETY: geteuid/getegid have no preconditions and cannot fail.
            auth_ids: unsafe { (libc::geteuid(), libc::getegid()) },
            open_trusts_attrs_for: Duration::from_millis(2),
            write_delegations: true,
        }
    }
}

/// A node as the kernel sees it: its id, its attributes and how long they may be cached.
#[derive(Debug, Clone, Copy)]
pub struct Node {
    pub ino: Ino,
    pub attr: Attr,
    pub ttl: Duration,
}

/// The result of `open`: a handle and whether the kernel may keep its cached pages.
#[derive(Debug, Clone, Copy)]
pub struct Opened {
    pub fh: u64,
    /// False when close-to-open revalidation saw the file change (or on first open).
    pub keep_cache: bool,
}

/// One entry of a directory listing.
#[derive(Debug, Clone)]
pub struct DirItem {
    pub ino: Ino,
    pub name: Bytes,
    pub ftype: Option<FileType>,
}

/// Attribute changes asked by setattr (chmod, chown, truncate, utimens).
#[derive(Debug, Clone, Copy, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    /// `Some(None)` means "now" (server time).
    pub atime: Option<Option<SystemTime>>,
    pub mtime: Option<Option<SystemTime>>,
}

/// What mknod creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    Regular,
    Fifo,
    Socket,
    Char { major: u32, minor: u32 },
    Block { major: u32, minor: u32 },
}

/// A lock's type as `fcntl` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockType {
    Read,
    Write,
    Unlock,
}

/// A byte-range lock as FUSE carries it: `start..=end`, `end` [`LOCK_TO_END`] meaning to the
/// end of the file and beyond.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockRange {
    pub start: u64,
    pub end: u64,
    pub typ: LockType,
}

/// The kernel's `OFFSET_MAX` (i64::MAX): a lock to the end of the file.
pub const LOCK_TO_END: u64 = i64::MAX as u64;

/// First wait before a denied waiting lock is asked again: 1 s, Linux's NFS4_LOCK_MINTIMEOUT.
pub const LOCK_POLL_INITIAL: Duration = Duration::from_secs(1);
/// Longest wait between two tries: 30 s, Linux's NFS4_LOCK_MAXTIMEOUT. A lock released just
/// after a try is taken that much later at worst; a waiter costs one LOCK per 30 s.
pub const LOCK_POLL_MAX: Duration = Duration::from_secs(30);
/// How often a waiting lock checks whether its process wants to stop waiting (a signal).
pub const LOCK_INTERRUPT_CHECK: Duration = Duration::from_millis(100);

/// The wait after `prev` before a denied waiting lock tries again (doubling, bounded).
pub fn next_lock_poll(prev: Duration) -> Duration {
    (prev * 2).clamp(LOCK_POLL_INITIAL, LOCK_POLL_MAX)
}

/// The filesystem. Shared by all callbacks (`Arc<Fs>`).
pub struct Fs {
    ns: Arc<dyn Namespace>,
    config: FsConfig,
    tables: Mutex<Tables>,
    open: Mutex<HashMap<Ino, OpenEntry>>,
    handles: Mutex<HashMap<u64, Ino>>,
    dirs: Mutex<HashMap<u64, Arc<Vec<DirItem>>>>,
    next_handle: AtomicU64,
    /// Writers of closed files with uncommitted data under a write delegation (see "Writes
    /// under a write delegation"); the client's write-back hook holds a weak reference.
    parked: Arc<Mutex<HashMap<Handle, Writer>>>,
}

struct OpenEntry {
    io: Arc<FileIo>,
    opens: usize,
}

struct Tables {
    inodes: HashMap<Ino, Inode>,
    by_fh: HashMap<Handle, Ino>,
    names: HashMap<(Ino, Bytes), NameEntry>,
    root_fileid: u64,
    next_synthetic: u64,
}

struct Inode {
    fh: Handle,
    lookups: u64,
    attr: CachedAttr,
    /// Name-cache keys pointing at this node: dropped with the node, because their attributes
    /// may be older than changes made through the node (setattr, writes).
    names: Vec<(Ino, Bytes)>,
}

struct NameEntry {
    fh: Handle,
    attr: Attr,
    fetched_at: Instant,
    dir_mtime: Time,
}

impl Fs {
    /// A filesystem over the directory `path` of `ns` (relative to [`Namespace::root`]; ""
    /// for the root itself) as node 1. Fetches the root's attributes.
    pub async fn new(ns: Arc<dyn Namespace>, path: &str, config: FsConfig) -> Result<Fs, NsError> {
        let (root, attr) = if path.trim_matches('/').is_empty() {
            let root = ns.root();
            let attr = ns.getattr(&root).await?;
            (root, attr)
        } else {
            ns.lookup_path(path).await?
        };
        if attr.ftype != FileType::DIR {
            return Err(NsError::local(Status::NOTDIR));
        }
        let now = Instant::now();
        let mut inodes = HashMap::new();
        inodes.insert(
            ROOT_INO,
            Inode {
                fh: root.clone(),
                lookups: 1,
                attr: CachedAttr::new(attr, now, &config.attr),
                names: Vec::new(),
            },
        );
        let mut by_fh = HashMap::new();
        by_fh.insert(root, ROOT_INO);
        let parked = Arc::new(Mutex::new(HashMap::new()));
        if config.write_delegations {
            ns.set_write_back(write_back(Arc::downgrade(&parked)));
        }
        Ok(Fs {
            ns,
            config,
            tables: Mutex::new(Tables {
                inodes,
                by_fh,
                names: HashMap::new(),
                root_fileid: attr.fileid,
                next_synthetic: SYNTHETIC_INO_BASE,
            }),
            open: Mutex::new(HashMap::new()),
            handles: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            parked,
        })
    }

    pub fn namespace(&self) -> &Arc<dyn Namespace> {
        &self.ns
    }
    /// The NFS version the mount speaks.
    pub fn version(&self) -> ProtoVersion {
        self.ns.version()
    }
    /// Whether byte-range locks go to the server: NFSv4 LOCK, NFSv3 NLM (see the module
    /// docs). Always, now that v3 has NLM; kept as the one place that decides.
    pub fn server_locks(&self) -> bool {
        true
    }
    pub fn config(&self) -> &FsConfig {
        &self.config
    }
    /// Largest READ the server takes; the kernel's max_read should not exceed it.
    pub fn rsize(&self) -> u32 {
        self.ns.rsize()
    }
    pub fn wsize(&self) -> u32 {
        self.ns.wsize()
    }

    // --- names and attributes ----------------------------------------------------------------

    /// LOOKUP, answered from the name cache when the directory is unchanged. Counts a lookup.
    pub async fn lookup(&self, parent: Ino, name: &[u8]) -> FsResult<Node> {
        let key = (parent, Bytes::copy_from_slice(name));
        // The directory's attributes serve only to validate a cached name: a name not in the
        // cache (a create's LOOKUP of its new name, every name the first time) goes to the
        // server without them, and is cached under the directory mtime last seen, which is
        // at worst older than the LOOKUP (a later check then finds it changed and looks the
        // name up again).
        let known = self.lock_tables().names.contains_key(&key);
        let dir_mtime = if known {
            self.fresh_attr(parent).await?.mtime
        } else {
            self.cached_attr_of(parent)?.mtime
        };
        let now = Instant::now();
        let cached = {
            let t = self.lock_tables();
            t.names.get(&key).and_then(|e| {
                let age = now.saturating_duration_since(e.fetched_at);
                let timeout = CachedAttr::new(e.attr, e.fetched_at, &self.config.attr).timeout;
                (known && e.dir_mtime == dir_mtime && age < timeout)
                    .then(|| (e.fh.clone(), e.attr, e.fetched_at))
            })
        };
        if let Some((fh, attr, fetched_at)) = cached {
            let node = self.remember(fh, attr, fetched_at, true);
            self.lock_tables().attach_name(node.ino, key);
            return Ok(node);
        }
        let dir = self.fh_of(parent)?;
        let name_str = std::str::from_utf8(name).map_err(|_| Errno(libc::EINVAL))?;
        let (fh, attr) = match self.ns.lookup(&dir, name_str).await {
            Ok(r) => r,
            Err(e) => {
                if e.status() == Some(Status::NOENT) {
                    self.lock_tables().names.remove(&key);
                }
                return Err(errno(&e));
            }
        };
        let now = Instant::now();
        let node = self.remember(fh.clone(), attr, now, true);
        // Cached under the directory's mtime as it was before the LOOKUP (the neutral lookup
        // carries no directory attributes): a change since then makes it looked up again.
        self.cache_name(parent, key.1, &fh, attr, now, Some(dir_mtime));
        Ok(node)
    }

    /// The kernel forgets `n` lookups of `ino`; at zero the node is dropped.
    pub fn forget(&self, ino: Ino, n: u64) {
        if ino == ROOT_INO {
            return;
        }
        let mut t = self.lock_tables();
        let gone = match t.inodes.get_mut(&ino) {
            Some(i) => {
                i.lookups = i.lookups.saturating_sub(n);
                i.lookups == 0
            }
            None => false,
        };
        if gone {
            if let Some(i) = t.inodes.remove(&ino) {
                if t.by_fh.get(&i.fh) == Some(&ino) {
                    t.by_fh.remove(&i.fh);
                }
                for key in i.names {
                    if t.names.get(&key).is_some_and(|e| e.fh == i.fh) {
                        t.names.remove(&key);
                    }
                }
            }
        }
    }

    /// GETATTR through the attribute cache. Dirty data of the file is written first, so that
    /// size and mtime are the server's after the writes (as Linux's `nfs_getattr` does).
    pub async fn getattr(&self, ino: Ino) -> FsResult<Node> {
        if let Some(io) = self.open_io(ino) {
            let mut s = io.state.lock().await;
            if s.held.is_some() {
                // The attributes the held SETATTR will give, as its own reply told (see
                // "Attribute changes under a write delegation"); the kernel asks before a
                // chown, to clear set-id bits.
                let attr = self.cached_attr_of(ino)?;
                drop(s);
                self.update_attr(ino, attr);
                return Ok(self.node(ino, attr));
            }
            if s.writer.is_dirty() {
                s.write_out().await?;
                self.invalidate_attr(ino);
            }
        }
        let attr = self.fresh_attr(ino).await?;
        Ok(self.node(ino, attr))
    }

    /// SETATTR (chmod, chown, truncate, utimens). Under a write delegation, on a file open
    /// for writing, held and merged with the next (see "Attribute changes under a write
    /// delegation").
    pub async fn setattr(&self, ino: Ino, set: SetAttr) -> FsResult<Node> {
        self.check_writable()?;
        let sattr = NsSetAttr {
            mode: set.mode.map(|m| m & 0o7777),
            uid: set.uid,
            gid: set.gid,
            size: set.size,
            atime: set_time(set.atime),
            mtime: set_time(set.mtime),
        };
        // A file open for writing is changed under its open (NFSv4: a size change must present
        // a stateid with write access, RFC 8881 §18.30); otherwise the anonymous stateid.
        let mut open = None;
        if let Some(io) = self.open_io(ino) {
            let mut s = io.state.lock().await;
            if s.write && holdable(&sattr) && self.ns.write_delegated(&s.file.handle()) {
                let held = merge_setattr(s.held.take(), &sattr);
                let attr = with_set(self.cached_attr_of(ino)?, &held, &s, SystemTime::now());
                s.held = Some(held);
                drop(s);
                self.update_attr(ino, attr);
                return Ok(self.node(ino, attr));
            }
            // What is held goes first, on its own: a truncate or set-id bits are the server's
            // to order against it.
            self.send_held(ino, &mut s).await?;
            s.reads_stale = true;
            if s.writer.is_dirty() {
                if s.write && !self.ns.write_delegated(&s.file.handle()) {
                    // Written back and committed, as Linux's `nfs_setattr` does: a file that
                    // fits one WRITE goes FILE_SYNC, and its close has nothing left to COMMIT.
                    if let Err(e) = s.writer.sync().await {
                        tracing::warn!("writing back failed: {e}");
                        s.error.get_or_insert(errno(&e));
                        return Err(errno(&e));
                    }
                } else {
                    s.write_out().await?;
                }
            }
            if s.write {
                open = Some(s.file.clone());
            }
        }
        let fh = self.fh_of(ino)?;
        let r = match &open {
            Some(f) => f.set_attr_attrs(&sattr).await,
            None => self.ns.setattr_attrs(&fh, &sattr).await,
        };
        let attr = r.map_err(|e| errno(&e))?;
        self.update_attr(ino, attr);
        Ok(self.node(ino, attr))
    }

    pub async fn readlink(&self, ino: Ino) -> FsResult<Bytes> {
        let fh = self.fh_of(ino)?;
        let target = self.ns.readlink(&fh).await.map_err(|e| errno(&e))?;
        Ok(Bytes::from(target.into_bytes()))
    }

    pub async fn statfs(&self) -> FsResult<FsStat> {
        let root = self.fh_of(ROOT_INO)?;
        self.ns.statfs(&root).await.map_err(|e| errno(&e))
    }

    // --- extended attributes -------------------------------------------------------------------
    // `user.*` attributes over NFSv4.2 (RFC 8276, which has only that namespace and sends its
    // names without the prefix); see "Extended attributes" in the module notes.

    /// The value of attribute `name` (a full name, `user.` and the rest).
    pub async fn getxattr(&self, ino: Ino, name: &[u8]) -> FsResult<Vec<u8>> {
        let key = self.xattr_key(name)?;
        let fh = self.fh_of(ino)?;
        self.ns.getxattr(&fh, key).await.map_err(|e| errno(&e))
    }

    /// Sets attribute `name` to `value`; `flags` are `setxattr(2)`'s (`XATTR_CREATE`,
    /// `XATTR_REPLACE`).
    pub async fn setxattr(&self, ino: Ino, name: &[u8], value: &[u8], flags: i32) -> FsResult<()> {
        let key = self.xattr_key(name)?;
        self.check_writable()?;
        let how = match flags {
            0 => XattrSet::Either,
            libc::XATTR_CREATE => XattrSet::Create,
            libc::XATTR_REPLACE => XattrSet::Replace,
            _ => return Err(Errno(libc::EINVAL)),
        };
        let fh = self.fh_of(ino)?;
        let r = self.ns.setxattr(&fh, key, value, how).await;
        // The change attribute and ctime moved (or may have).
        self.invalidate_attr(ino);
        r.map_err(|e| errno(&e))
    }

    /// The names of the attributes, `user.NAME\0` each, as `listxattr(2)` returns them.
    pub async fn listxattr(&self, ino: Ino) -> FsResult<Vec<u8>> {
        self.xattr_version()?;
        let fh = self.fh_of(ino)?;
        let names = self.ns.listxattrs(&fh).await.map_err(|e| errno(&e))?;
        let mut out = Vec::new();
        for n in names {
            out.extend_from_slice(XATTR_USER_PREFIX);
            out.extend_from_slice(&n);
            out.push(0);
        }
        Ok(out)
    }

    /// Removes attribute `name`.
    pub async fn removexattr(&self, ino: Ino, name: &[u8]) -> FsResult<()> {
        let key = self.xattr_key(name)?;
        self.check_writable()?;
        let fh = self.fh_of(ino)?;
        let r = self.ns.removexattr(&fh, key).await;
        self.invalidate_attr(ino);
        r.map_err(|e| errno(&e))
    }

    /// The NFS name of the attribute `name`: without `user.`. Other namespaces have no NFS
    /// counterpart: EOPNOTSUPP, as from Linux's NFS client (no handler for them).
    fn xattr_key<'n>(&self, name: &'n [u8]) -> FsResult<&'n [u8]> {
        self.xattr_version()?;
        match name.strip_prefix(XATTR_USER_PREFIX) {
            Some(key) if !key.is_empty() => Ok(key),
            Some(_) => Err(Errno(libc::EINVAL)),
            None => Err(Errno(libc::EOPNOTSUPP)),
        }
    }

    /// Extended attributes exist over NFSv4.2 only. Elsewhere ENOSYS, which the kernel
    /// remembers for the mount and turns into EOPNOTSUPP for the caller (what Linux's own
    /// client answers on v3 and 4.1 mounts): the kernel's own attribute lookups (one per write,
    /// `security.capability`) then stop coming here.
    fn xattr_version(&self) -> FsResult<()> {
        if self.version() == ProtoVersion::V4_2 {
            Ok(())
        } else {
            Err(Errno(libc::ENOSYS))
        }
    }

    // --- namespace changes ---------------------------------------------------------------------

    /// CREATE and open. `exclusive` is O_EXCL (GUARDED), `truncate` O_TRUNC.
    pub async fn create(
        &self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
        exclusive: bool,
        truncate: bool,
    ) -> FsResult<(Node, Opened)> {
        self.check_writable()?;
        let dir = self.fh_of(parent)?;
        let how = if exclusive {
            CreateMode::Guarded
        } else if truncate {
            CreateMode::Truncate
        } else {
            CreateMode::Unchecked
        };
        let name_str = utf8(name)?;
        let (file, dir_attr) = self
            .ns
            .create_in_dir(&dir, name_str, mode & 0o7777, how)
            .await
            .map_err(|e| errno(&e))?;
        let fh = file.handle();
        let mut attr = file.attr();
        if let Some((uid, gid)) = owner {
            // The neutral CREATE sets the mode only; the caller's ids follow (under the open,
            // so NFSv4 sees the stateid).
            let ids = NsSetAttr {
                uid: Some(uid),
                gid: Some(gid),
                ..NsSetAttr::default()
            };
            match file.set_attr_attrs(&ids).await {
                Ok(a) => attr = a,
                Err(e) => {
                    let _ = file.close().await;
                    return Err(errno(&e));
                }
            }
        }
        // The directory changed: its attributes from the create's own reply, else fetched
        // again when next needed.
        match dir_attr {
            Some(a) => self.update_attr(parent, a),
            None => self.invalidate_attr(parent),
        }
        let node = self.remember(fh, attr, Instant::now(), true);
        let handle = self.open_handle(node.ino, file, true).await;
        if truncate {
            self.mark_reads_stale(node.ino).await;
        }
        Ok((
            node,
            Opened {
                fh: handle,
                keep_cache: false,
            },
        ))
    }

    pub async fn mkdir(
        &self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> FsResult<Node> {
        self.check_writable()?;
        let dir = self.fh_of(parent)?;
        let made = self.ns.mkdir(&dir, utf8(name)?, mode & 0o7777).await;
        let (fh, attr) = made.map_err(|e| errno(&e))?;
        self.created(parent, fh, attr, owner).await
    }

    /// MKNOD (v3) or CREATE (v4) of a FIFO, socket or device; a regular file is a CREATE
    /// (GUARDED) closed at once.
    pub async fn mknod(
        &self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        kind: NodeKind,
        owner: Option<(u32, u32)>,
    ) -> FsResult<Node> {
        self.check_writable()?;
        let dir = self.fh_of(parent)?;
        let special = match kind {
            NodeKind::Regular => {
                let file = self
                    .ns
                    .create(&dir, utf8(name)?, mode & 0o7777, CreateMode::Guarded)
                    .await
                    .map_err(|e| errno(&e))?;
                let made = (file.handle(), file.attr());
                file.close().await.map_err(|e| errno(&e))?;
                return self.created(parent, made.0, made.1, owner).await;
            }
            NodeKind::Fifo => SpecialKind::Fifo,
            NodeKind::Socket => SpecialKind::Socket,
            NodeKind::Char { major, minor } => SpecialKind::Char { major, minor },
            NodeKind::Block { major, minor } => SpecialKind::Block { major, minor },
        };
        let made = self
            .ns
            .mknod(&dir, utf8(name)?, special, mode & 0o7777)
            .await;
        let (fh, attr) = made.map_err(|e| errno(&e))?;
        self.created(parent, fh, attr, owner).await
    }

    pub async fn symlink(
        &self,
        parent: Ino,
        name: &[u8],
        target: &[u8],
        owner: Option<(u32, u32)>,
    ) -> FsResult<Node> {
        self.check_writable()?;
        let dir = self.fh_of(parent)?;
        let name_str = utf8(name)?;
        self.ns
            .symlink(&dir, name_str, utf8(target)?)
            .await
            .map_err(|e| errno(&e))?;
        let (fh, attr) = self
            .ns
            .lookup(&dir, name_str)
            .await
            .map_err(|e| errno(&e))?;
        self.created(parent, fh, attr, owner).await
    }

    pub async fn link(&self, ino: Ino, new_parent: Ino, new_name: &[u8]) -> FsResult<Node> {
        self.check_writable()?;
        let fh = self.fh_of(ino)?;
        let dir = self.fh_of(new_parent)?;
        self.ns
            .link(&fh, &dir, utf8(new_name)?)
            .await
            .map_err(|e| errno(&e))?;
        self.invalidate_attr(new_parent);
        // nlink and ctime changed.
        let attr = self.getattr_rpc(&fh).await?;
        Ok(self.remember(fh, attr, Instant::now(), true))
    }

    pub async fn unlink(&self, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.check_writable()?;
        let dir = self.fh_of(parent)?;
        let victim = self.forget_name(parent, name);
        let res = self.ns.remove(&dir, utf8(name)?).await;
        self.invalidate_fh(victim.as_ref());
        self.invalidate_attr(parent);
        res.map_err(|e| errno(&e))
    }

    pub async fn rmdir(&self, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.check_writable()?;
        let dir = self.fh_of(parent)?;
        self.forget_name(parent, name);
        let res = self.ns.rmdir(&dir, utf8(name)?).await;
        self.invalidate_attr(parent);
        res.map_err(|e| errno(&e))
    }

    pub async fn rename(
        &self,
        parent: Ino,
        name: &[u8],
        new_parent: Ino,
        new_name: &[u8],
    ) -> FsResult<()> {
        self.check_writable()?;
        let from = self.fh_of(parent)?;
        let to = self.fh_of(new_parent)?;
        let moved = self.forget_name(parent, name);
        let replaced = self.forget_name(new_parent, new_name);
        let res = self
            .ns
            .rename(&from, utf8(name)?, &to, utf8(new_name)?)
            .await;
        // ctime of the moved file and nlink of a replaced one changed on the server.
        self.invalidate_fh(moved.as_ref());
        self.invalidate_fh(replaced.as_ref());
        self.invalidate_attr(parent);
        self.invalidate_attr(new_parent);
        res.map_err(|e| errno(&e))
    }

    // --- directories --------------------------------------------------------------------------

    /// Reads the whole directory (READDIRPLUS, READDIR if the server has none), primes the
    /// name and attribute caches and returns a handle to the snapshot.
    pub async fn opendir(&self, ino: Ino) -> FsResult<u64> {
        // Like open: always revalidate, so the names below are cached under a current mtime.
        let dir = self.fh_of(ino)?;
        let dir_attr = self.getattr_rpc(&dir).await?;
        self.update_attr(ino, dir_attr);
        let entries = self.ns.read_dir(&dir).await.map_err(|e| errno(&e))?;
        let now = Instant::now();
        let mut items = Vec::with_capacity(entries.len() + 2);
        for dot in [&b"."[..], &b".."[..]] {
            items.push(DirItem {
                ino,
                name: Bytes::from_static(dot),
                ftype: Some(FileType::DIR),
            });
        }
        {
            let mut t = self.lock_tables();
            for e in entries {
                let name = Bytes::from(e.name.into_bytes());
                let known = e.node.as_ref().and_then(|n| t.by_fh.get(&n.0).copied());
                let child = known.unwrap_or_else(|| t.ino_for_fileid(e.fileid));
                let ftype = e.node.as_ref().map(|n| n.1.ftype);
                if let Some((fh, attr)) = &e.node {
                    if let Some(i) = known.and_then(|k| t.inodes.get_mut(&k)) {
                        i.attr.update(*attr, now, &self.config.attr);
                    }
                    if t.names.len() >= self.config.name_cache_entries_max {
                        t.names.clear();
                    }
                    t.names.insert(
                        (ino, name.clone()),
                        NameEntry {
                            fh: fh.clone(),
                            attr: *attr,
                            fetched_at: now,
                            dir_mtime: dir_attr.mtime,
                        },
                    );
                    if let Some(k) = known {
                        t.attach_name(k, (ino, name.clone()));
                    }
                }
                items.push(DirItem {
                    ino: child,
                    name,
                    ftype,
                });
            }
        }
        let h = self.next_handle.fetch_add(1, Ordering::Relaxed);
        self.dirs.lock().expect("dirs").insert(h, Arc::new(items));
        Ok(h)
    }

    /// The snapshot of an open directory.
    pub fn dir_items(&self, handle: u64) -> FsResult<Arc<Vec<DirItem>>> {
        self.dirs
            .lock()
            .expect("dirs")
            .get(&handle)
            .cloned()
            .ok_or(Errno(libc::EBADF))
    }

    pub fn releasedir(&self, handle: u64) {
        self.dirs.lock().expect("dirs").remove(&handle);
    }

    // --- files ---------------------------------------------------------------------------------

    /// Opens a file: close-to-open revalidation with GETATTR (over NFSv4 the OPEN's own
    /// GETATTR when the file has no open yet; over v3 none right after a LOOKUP; see the
    /// module docs).
    pub async fn open(&self, ino: Ino, write: bool) -> FsResult<Opened> {
        if write {
            self.check_writable()?;
        }
        let fh = self.fh_of(ino)?;
        self.commit_parked(&fh).await?;
        let existing = self.open_io(ino);
        let covered = match &existing {
            Some(io) => !write || io.state.lock().await.write,
            None => false,
        };
        let (attr, new_open) = if covered || self.version() == ProtoVersion::V3 {
            let attr = match self.just_fetched_attr(ino) {
                Some(attr) => attr,
                None => self.getattr_rpc(&fh).await?,
            };
            let file = if covered {
                None
            } else {
                Some(self.ns_open(&fh, attr, write).await?)
            };
            (attr, file)
        } else {
            let cached = self.cached_attr(ino);
            let file = self.ns_open(&fh, cached, write).await?;
            (file.attr(), Some(file))
        };
        let changed = {
            let now = Instant::now();
            let mut t = self.lock_tables();
            match t.inodes.get_mut(&ino) {
                // A change the LOOKUP or GETATTR before this open saw counts too.
                Some(i) => i.attr.update(attr, now, &self.config.attr) | i.attr.take_data_changed(),
                None => true,
            }
        };
        if let Some(io) = self.open_io(ino) {
            // Open already through another handle: its read cache follows the revalidation.
            io.state.lock().await.file.observe(attr);
        }
        let handle = match new_open {
            Some(file) => self.open_handle(ino, file, write).await,
            None => match self.add_handle(ino) {
                Some(h) => h,
                // Its last handle was released meanwhile: open it again.
                None => {
                    let file = self.ns_open(&fh, attr, write).await?;
                    self.open_handle(ino, file, write).await
                }
            },
        };
        Ok(Opened {
            fh: handle,
            keep_cache: !changed,
        })
    }

    /// Reads through the file's readahead (see the module docs).
    pub async fn read(&self, handle: u64, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        let (ino, io) = self.io_of(handle)?;
        let file = {
            let mut s = io.state.lock().await;
            if s.writer.is_dirty() {
                s.write_out().await?;
            }
            if s.reads_stale {
                // Written or truncated here: what was read ahead may be old, and the size the
                // read path knows may be short. Fetch both again.
                s.file.invalidate();
                let attr = self.getattr_rpc(&s.file.handle()).await?;
                self.update_attr(ino, attr);
                s.file.observe(attr);
                s.reads_stale = false;
            }
            s.file.clone()
        };
        let chunks = file
            .read_at(offset, u64::from(size))
            .await
            .map_err(|e| errno(&e))?;
        let mut out = Vec::with_capacity(chunks.iter().map(|c| c.len()).sum());
        for c in chunks {
            out.extend_from_slice(&c);
        }
        Ok(out)
    }

    /// Hands `data` at `offset` to the file's writer (write-behind; see the module docs).
    pub async fn write(&self, handle: u64, offset: u64, data: &[u8]) -> FsResult<u32> {
        self.check_writable()?;
        let (ino, io) = self.io_of(handle)?;
        let mut s = io.state.lock().await;
        s.reads_stale = true;
        // Held times and mode go out before data written after them (a write moves mtime on).
        self.send_held(ino, &mut s).await?;
        s.written_end = s.written_end.max(offset.saturating_add(data.len() as u64));
        s.wrote_since_attr = true;
        if let Err(e) = s.writer.write_at(offset, data).await {
            tracing::warn!("WRITE near offset {offset} failed: {e}");
            s.error.get_or_insert(errno(&e));
        }
        drop(s);
        self.invalidate_attr(ino);
        Ok(data.len() as u32)
    }

    /// Writes out and COMMITs the file's dirty data (flush, fsync); reports deferred errors.
    pub async fn sync(&self, handle: u64) -> FsResult<()> {
        let (ino, io) = self.io_of(handle)?;
        let mut s = io.state.lock().await;
        if let Err(e) = self.send_held(ino, &mut s).await {
            s.error.get_or_insert(e);
        }
        let had_data = s.writer.is_uncommitted();
        if had_data {
            if let Err(e) = s.writer.sync().await {
                tracing::warn!("writing back failed: {e}");
                s.error.get_or_insert(errno(&e));
            }
        }
        let deferred = s.error.take();
        drop(s);
        if had_data {
            self.invalidate_attr(ino);
        }
        match deferred {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// What a close sends: [`Fs::sync`], or under a write delegation the buffered data without
    /// a COMMIT (see "Writes under a write delegation"); reports deferred errors.
    async fn sync_at_close(&self, handle: u64) -> FsResult<()> {
        let (ino, io) = self.io_of(handle)?;
        let mut s = io.state.lock().await;
        if !s.write || !self.ns.write_delegated(&s.file.handle()) {
            drop(s);
            return self.sync(handle).await;
        }
        let had_data = s.writer.is_dirty();
        let r = match self.send_held(ino, &mut s).await {
            Ok(()) => s.write_out().await,
            Err(e) => Err(e),
        };
        s.error = None;
        drop(s);
        if had_data {
            self.invalidate_attr(ino);
        }
        r
    }

    /// `close(2)` of a descriptor: [`Fs::sync`] (under a write delegation without the
    /// COMMIT), and (server locks) the `fcntl` locks of
    /// `lock_owner` on the file are dropped, as POSIX drops them at any close by the process.
    pub async fn flush(&self, handle: u64, lock_owner: Option<u64>) -> FsResult<()> {
        let r = self.sync_at_close(handle).await;
        if let Some(owner) = lock_owner.filter(|_| self.server_locks()) {
            self.unlock_all(handle, owner).await?;
        }
        r
    }

    /// The last close of a handle: sync, then forget the handle; the last handle of a file
    /// ends its open (NFSv4 CLOSE). `flock_owner`: the kernel's word that this file
    /// description held a `flock`, released here.
    pub async fn release(&self, handle: u64, flock_owner: Option<u64>) -> FsResult<()> {
        let mut r = self.sync_at_close(handle).await;
        if let Some(owner) = flock_owner.filter(|_| self.server_locks()) {
            if let Err(e) = self.unlock_all(handle, owner).await {
                r = r.and(Err(e));
            }
        }
        let ino = self.handles.lock().expect("handles").remove(&handle);
        let Some(ino) = ino else { return r };
        let last = {
            let mut open = self.open.lock().expect("open");
            match open.get_mut(&ino) {
                Some(e) => {
                    e.opens -= 1;
                    if e.opens == 0 {
                        open.remove(&ino).map(|e| e.io)
                    } else {
                        None
                    }
                }
                None => None,
            }
        };
        if let Some(io) = last {
            let mut s = io.state.lock().await;
            if s.writer.is_uncommitted() {
                // Written under a write delegation and not committed (`sync_at_close`): parked
                // until the delegation goes back, or committed now past the bound.
                let fresh = s.file.writer();
                let writer = std::mem::replace(&mut s.writer, fresh);
                if let Some(mut w) = self.park(s.file.handle(), writer) {
                    if let Err(e) = w.sync().await {
                        tracing::warn!("writing back failed: {e}");
                        r = r.and(Err(errno(&e)));
                    }
                }
            }
            for f in s.retired.iter().chain(std::iter::once(&s.file)) {
                if let Err(e) = f.close().await {
                    tracing::warn!("CLOSE failed: {e}");
                    r = r.and(Err(errno(&e)));
                }
            }
        }
        r
    }

    // --- locks ---------------------------------------------------------------------------------

    /// F_GETLK: the lock that would keep `owner` from taking `want`, or `None` (LOCKT).
    pub async fn getlk(
        &self,
        handle: u64,
        owner: u64,
        want: LockRange,
    ) -> FsResult<Option<LockRange>> {
        let file = self.lock_file(handle, false).await?;
        let (offset, length) = nfs_range(want)?;
        let write = want.typ == LockType::Write;
        let conflict = file
            .test_lock(&owner.to_be_bytes(), write, offset, length)
            .await
            .map_err(|e| errno(&e))?;
        Ok(conflict.map(|c| LockRange {
            start: c.offset,
            end: fuse_end(c.offset, c.length),
            typ: if c.write {
                LockType::Write
            } else {
                LockType::Read
            },
        }))
    }

    /// F_SETLK / F_SETLKW / flock: LOCK or LOCKU. A denied lock is EAGAIN, unless `wait`:
    /// then it is asked again with back-off ([`next_lock_poll`]) until granted, or until
    /// `interrupted` says the waiting process has a signal to take (EINTR; checked every
    /// [`LOCK_INTERRUPT_CHECK`]).
    pub async fn setlk(
        &self,
        handle: u64,
        owner: u64,
        want: LockRange,
        wait: bool,
        interrupted: impl Fn() -> bool,
    ) -> FsResult<()> {
        let (offset, length) = nfs_range(want)?;
        let owner = owner.to_be_bytes();
        if want.typ == LockType::Unlock {
            if !self.server_locks() {
                return Err(Errno(libc::ENOSYS));
            }
            return self.unlock_range(handle, &owner, offset, length).await;
        }
        let write = want.typ == LockType::Write;
        let file = self.lock_file(handle, write).await?;
        let mut pause = Duration::ZERO;
        loop {
            let conflict = file
                .lock(&owner, write, offset, length)
                .await
                .map_err(|e| errno(&e))?;
            if conflict.is_none() {
                return Ok(());
            }
            if !wait {
                return Err(Errno(libc::EAGAIN));
            }
            pause = next_lock_poll(pause);
            let until = Instant::now() + pause;
            while Instant::now() < until {
                if interrupted() {
                    return Err(Errno(libc::EINTR));
                }
                tokio::time::sleep(LOCK_INTERRUPT_CHECK.min(until - Instant::now())).await;
            }
        }
    }

    /// The open to lock under; a write lock on a file open only for reading upgrades the
    /// open to read-write (EBADF if that is refused: NFSv4 asks write access for a write
    /// lock, RFC 8881 §18.10.4).
    async fn lock_file(&self, handle: u64, write: bool) -> FsResult<OpenFile> {
        if !self.server_locks() {
            return Err(Errno(libc::ENOSYS));
        }
        let (ino, io) = self.io_of(handle)?;
        let mut s = io.state.lock().await;
        if write && !s.write {
            if self.config.read_only {
                return Err(Errno(libc::EBADF));
            }
            let fh = self.fh_of(ino)?;
            let attr = self.cached_attr(ino);
            let file = self
                .ns_open(&fh, attr, true)
                .await
                .map_err(|_| Errno(libc::EBADF))?;
            s.upgrade(file);
        }
        Ok(s.file.clone())
    }

    /// Drops every lock of `owner` on the file of `handle` (no call if it never locked).
    async fn unlock_all(&self, handle: u64, owner: u64) -> FsResult<()> {
        self.unlock_range(handle, &owner.to_be_bytes(), 0, u64::MAX)
            .await
    }

    /// LOCKU of `owner`'s range under every open of the file (a lock taken before the open
    /// was upgraded lives under the older one); no call under an open it never locked.
    async fn unlock_range(
        &self,
        handle: u64,
        owner: &[u8],
        offset: u64,
        length: u64,
    ) -> FsResult<()> {
        let Ok((_, io)) = self.io_of(handle) else {
            return Ok(());
        };
        let files: Vec<OpenFile> = {
            let s = io.state.lock().await;
            s.retired
                .iter()
                .chain(std::iter::once(&s.file))
                .cloned()
                .collect()
        };
        for f in files {
            f.unlock(owner, offset, length)
                .await
                .map_err(|e| errno(&e))?;
        }
        Ok(())
    }

    // --- helpers: tables -------------------------------------------------------------------------

    fn lock_tables(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().expect("tables lock")
    }

    fn fh_of(&self, ino: Ino) -> FsResult<Handle> {
        self.lock_tables()
            .inodes
            .get(&ino)
            .map(|i| i.fh.clone())
            .ok_or(Errno(libc::ESTALE))
    }

    /// The node's attributes as cached, fresh or not.
    /// The cached attributes if the server sent them less than
    /// [`FsConfig::open_trusts_attrs_for`] ago.
    fn just_fetched_attr(&self, ino: Ino) -> Option<Attr> {
        let t = self.lock_tables();
        let a = &t.inodes.get(&ino)?.attr;
        (a.fetched_at.elapsed() < self.config.open_trusts_attrs_for).then_some(a.attr)
    }

    /// The node's attributes as last seen, fresh or not; ESTALE for a node the kernel forgot.
    fn cached_attr_of(&self, ino: Ino) -> FsResult<Attr> {
        self.lock_tables()
            .inodes
            .get(&ino)
            .map(|i| i.attr.attr)
            .ok_or(Errno(libc::ESTALE))
    }

    fn cached_attr(&self, ino: Ino) -> Attr {
        self.lock_tables()
            .inodes
            .get(&ino)
            .map(|i| i.attr.attr)
            .unwrap_or_default()
    }

    /// Interns `fh` with `attr` (fetched at `at`) and counts a kernel lookup if `count`.
    fn remember(&self, fh: Handle, attr: Attr, at: Instant, count: bool) -> Node {
        let mut t = self.lock_tables();
        let ino = match t.by_fh.get(&fh) {
            Some(&ino) => ino,
            None => {
                let ino = t.ino_for_fileid(attr.fileid);
                t.by_fh.insert(fh.clone(), ino);
                t.inodes.insert(
                    ino,
                    Inode {
                        fh,
                        lookups: 0,
                        attr: CachedAttr::new(attr, at, &self.config.attr),
                        names: Vec::new(),
                    },
                );
                ino
            }
        };
        let i = t.inodes.get_mut(&ino).expect("interned above");
        if at >= i.attr.fetched_at {
            i.attr.update(attr, at, &self.config.attr);
        }
        if count {
            i.lookups += 1;
        }
        let (attr, ttl) = (i.attr.attr, i.attr.remaining(Instant::now()));
        Node { ino, attr, ttl }
    }

    fn node(&self, ino: Ino, attr: Attr) -> Node {
        let ttl = self
            .lock_tables()
            .inodes
            .get(&ino)
            .map_or(Duration::ZERO, |i| i.attr.remaining(Instant::now()));
        Node { ino, attr, ttl }
    }

    /// The node's attributes, from the cache or by GETATTR.
    async fn fresh_attr(&self, ino: Ino) -> FsResult<Attr> {
        let (fh, cached) = {
            let t = self.lock_tables();
            let i = t.inodes.get(&ino).ok_or(Errno(libc::ESTALE))?;
            let fresh = i.attr.is_fresh(Instant::now()).then_some(i.attr.attr);
            (i.fh.clone(), fresh)
        };
        if let Some(a) = cached {
            return Ok(a);
        }
        let attr = self.getattr_rpc(&fh).await?;
        self.update_attr(ino, attr);
        Ok(attr)
    }

    async fn getattr_rpc(&self, fh: &Handle) -> FsResult<Attr> {
        self.ns.getattr(fh).await.map_err(|e| errno(&e))
    }

    fn update_attr(&self, ino: Ino, attr: Attr) {
        let now = Instant::now();
        if let Some(i) = self.lock_tables().inodes.get_mut(&ino) {
            i.attr.update(attr, now, &self.config.attr);
        }
    }

    fn invalidate_attr(&self, ino: Ino) {
        if let Some(i) = self.lock_tables().inodes.get_mut(&ino) {
            i.attr.invalidate();
        }
    }

    fn invalidate_fh(&self, fh: Option<&Handle>) {
        let Some(fh) = fh else { return };
        let mut t = self.lock_tables();
        if let Some(ino) = t.by_fh.get(fh).copied() {
            if let Some(i) = t.inodes.get_mut(&ino) {
                i.attr.invalidate();
            }
        }
    }

    fn cache_name(
        &self,
        dir: Ino,
        name: Bytes,
        fh: &Handle,
        attr: Attr,
        now: Instant,
        dir_mtime: Option<Time>,
    ) {
        let Some(dir_mtime) = dir_mtime else { return };
        let mut t = self.lock_tables();
        if t.names.len() >= self.config.name_cache_entries_max {
            t.names.clear();
        }
        t.names.insert(
            (dir, name.clone()),
            NameEntry {
                fh: fh.clone(),
                attr,
                fetched_at: now,
                dir_mtime,
            },
        );
        if let Some(ino) = t.by_fh.get(fh).copied() {
            t.attach_name(ino, (dir, name));
        }
    }

    /// Drops a cached name and returns the handle it pointed to.
    fn forget_name(&self, dir: Ino, name: &[u8]) -> Option<Handle> {
        let key = (dir, Bytes::copy_from_slice(name));
        self.lock_tables().names.remove(&key).map(|e| e.fh)
    }

    /// The tail shared by MKDIR, MKNOD and SYMLINK: the directory changed (its attributes
    /// are fetched again when next needed; the neutral calls carry no post-op directory
    /// attributes), the caller's ids are set if they differ from the mount's, the node is
    /// interned.
    async fn created(
        &self,
        parent: Ino,
        fh: Handle,
        mut attr: Attr,
        owner: Option<(u32, u32)>,
    ) -> FsResult<Node> {
        self.invalidate_attr(parent);
        if let Some((uid, gid)) = owner {
            let ids = NsSetAttr {
                uid: Some(uid),
                gid: Some(gid),
                ..NsSetAttr::default()
            };
            attr = self
                .ns
                .setattr_attrs(&fh, &ids)
                .await
                .map_err(|e| errno(&e))?;
        }
        Ok(self.remember(fh, attr, Instant::now(), true))
    }

    fn check_writable(&self) -> FsResult<()> {
        if self.config.read_only {
            Err(Errno(libc::EROFS))
        } else {
            Ok(())
        }
    }

    // --- helpers: open files -------------------------------------------------------------------

    /// The namespace's open (NFSv4: OPEN with READ or BOTH access).
    async fn ns_open(&self, fh: &Handle, attr: Attr, write: bool) -> FsResult<OpenFile> {
        self.ns.open(fh, attr, write).await.map_err(|e| errno(&e))
    }

    /// A new handle for `ino` opened as `file` (with write access if `write`): the file's
    /// I/O state if it has none, else `file` joins it (see "Open state" in the module docs).
    async fn open_handle(&self, ino: Ino, file: OpenFile, write: bool) -> u64 {
        let joined = {
            let mut open = self.open.lock().expect("open");
            match open.get_mut(&ino) {
                Some(e) => {
                    e.opens += 1;
                    Some((e.io.clone(), file))
                }
                None => {
                    open.insert(
                        ino,
                        OpenEntry {
                            io: Arc::new(FileIo::new(file, write)),
                            opens: 1,
                        },
                    );
                    None
                }
            }
        };
        if let Some((io, file)) = joined {
            let mut s = io.state.lock().await;
            if write && !s.write {
                s.upgrade(file);
            } else {
                s.retired.push(file);
            }
        }
        self.new_handle(ino)
    }

    /// Another handle for a file already open, or `None` if its last handle went meanwhile.
    fn add_handle(&self, ino: Ino) -> Option<u64> {
        self.open.lock().expect("open").get_mut(&ino)?.opens += 1;
        Some(self.new_handle(ino))
    }

    fn new_handle(&self, ino: Ino) -> u64 {
        let h = self.next_handle.fetch_add(1, Ordering::Relaxed);
        self.handles.lock().expect("handles").insert(h, ino);
        h
    }

    fn open_io(&self, ino: Ino) -> Option<Arc<FileIo>> {
        self.open
            .lock()
            .expect("open")
            .get(&ino)
            .map(|e| e.io.clone())
    }

    fn io_of(&self, handle: u64) -> FsResult<(Ino, Arc<FileIo>)> {
        let ino = *self
            .handles
            .lock()
            .expect("handles")
            .get(&handle)
            .ok_or(Errno(libc::EBADF))?;
        let io = self.open_io(ino).ok_or(Errno(libc::EBADF))?;
        Ok((ino, io))
    }

    /// Parks `writer` of the closed file `fh` (see "Writes under a write delegation"); hands
    /// it back when the table is full or the file is no longer delegated, to be committed by
    /// the caller.
    fn park(&self, fh: Handle, writer: Writer) -> Option<Writer> {
        let mut parked = self.parked.lock().expect("parked");
        if parked.len() >= PARKED_FILES_MAX || !self.ns.write_delegated(&fh) {
            return Some(writer);
        }
        // A writer parked earlier for the same file was committed at its open (`open`); one
        // that is still there (another open raced it) is the caller's to commit.
        parked.insert(fh, writer)
    }

    /// The mount ends: the data parked under write delegations is committed, then the
    /// client's state on the server ends (NFSv4: the delegations go back, DESTROY_SESSION,
    /// DESTROY_CLIENTID; see [`Namespace::shutdown`]).
    pub async fn shutdown(&self) {
        let parked: Vec<Writer> = {
            let mut p = self.parked.lock().expect("parked");
            p.drain().map(|(_, w)| w).collect()
        };
        for mut w in parked {
            if let Err(e) = w.sync().await {
                tracing::warn!("writing back at unmount failed: {e}");
            }
        }
        let _ = self.ns.shutdown().await;
    }

    /// Sends the SETATTR held for the open file (see "Attribute changes under a write
    /// delegation"), after the data written before it; its reply refreshes the cache.
    async fn send_held(&self, ino: Ino, s: &mut IoState) -> FsResult<()> {
        let Some(held) = s.held.take() else {
            return Ok(());
        };
        s.write_out().await?;
        let attr = s.file.set_attr_attrs(&held).await.map_err(|e| errno(&e))?;
        s.wrote_since_attr = false;
        self.update_attr(ino, attr);
        Ok(())
    }

    /// Commits the data parked for `fh`, if any (a new open of the file: its writes start
    /// from the server's committed state).
    async fn commit_parked(&self, fh: &Handle) -> FsResult<()> {
        let writer = self.parked.lock().expect("parked").remove(fh);
        if let Some(mut w) = writer {
            w.sync().await.map_err(|e| errno(&e))?;
        }
        Ok(())
    }

    /// Drops what the open file read ahead, at the next read (this mount changed the file).
    async fn mark_reads_stale(&self, ino: Ino) {
        if let Some(io) = self.open_io(ino) {
            io.state.lock().await.reads_stale = true;
        }
    }
}

/// The client's write-back hook (see "Writes under a write delegation"): commits the data
/// parked for a file before its delegation goes back. Weak, so the client (which keeps the
/// hook) does not keep the parked writers (which keep the client) alive.
fn write_back(parked: std::sync::Weak<Mutex<HashMap<Handle, Writer>>>) -> WriteBack {
    Arc::new(move |fh: Handle| {
        let writer = parked
            .upgrade()
            .and_then(|p| p.lock().expect("parked").remove(&fh));
        Box::pin(async move {
            if let Some(mut w) = writer {
                if let Err(e) = w.sync().await {
                    tracing::warn!("writing back before a delegation's return failed: {e}");
                }
            }
        })
    })
}

/// Whether a SETATTR may be held (see "Attribute changes under a write delegation"): no
/// size (a truncate goes out at once), and no set-id bits (the server's answer to an owner
/// change next to them is its own).
fn holdable(sa: &NsSetAttr) -> bool {
    sa.size.is_none() && sa.mode.is_none_or(|m| m & 0o6000 == 0)
}

/// `newer` over `older`: what one SETATTR sending both sets (both [`holdable`]).
fn merge_setattr(older: Option<NsSetAttr>, newer: &NsSetAttr) -> NsSetAttr {
    let Some(o) = older else {
        return *newer;
    };
    let time = |n: SetTime, o: SetTime| match n {
        SetTime::DontChange => o,
        n => n,
    };
    NsSetAttr {
        mode: newer.mode.or(o.mode),
        uid: newer.uid.or(o.uid),
        gid: newer.gid.or(o.gid),
        size: newer.size.or(o.size),
        atime: time(newer.atime, o.atime),
        mtime: time(newer.mtime, o.mtime),
    }
}

/// The attributes `attr` will have once `held` is set: what the kernel is told meanwhile.
/// The size covers what this open wrote; a write since the server's attributes moves mtime
/// and ctime to `now`, as does the SETATTR ctime.
fn with_set(mut attr: Attr, held: &NsSetAttr, s: &IoState, now: SystemTime) -> Attr {
    let now = nfstime(now);
    if let Some(m) = held.mode {
        attr.mode = (attr.mode & !0o7777) | (m & 0o7777);
    }
    attr.uid = held.uid.unwrap_or(attr.uid);
    attr.gid = held.gid.unwrap_or(attr.gid);
    attr.size = attr.size.max(s.written_end);
    if s.wrote_since_attr {
        attr.mtime = now;
    }
    let time = |t: &SetTime, old: Time| match t {
        SetTime::DontChange => old,
        SetTime::ServerTime => now,
        SetTime::ClientTime(t) => *t,
    };
    attr.atime = time(&held.atime, attr.atime);
    attr.mtime = time(&held.mtime, attr.mtime);
    attr.ctime = now;
    attr
}

impl Tables {
    /// Records that the name-cache entry `key` points at live node `ino`.
    fn attach_name(&mut self, ino: Ino, key: (Ino, Bytes)) {
        if let Some(i) = self.inodes.get_mut(&ino) {
            // A handful per node (hard links); bounded so a name churned in a loop cannot grow it.
            if !i.names.contains(&key) && i.names.len() < 16 {
                i.names.push(key);
            }
        }
    }

    /// The node id for a new handle with `fileid` (see the module docs).
    fn ino_for_fileid(&mut self, fileid: u64) -> Ino {
        let ino = if fileid == self.root_fileid {
            ROOT_INO
        } else if fileid == ROOT_INO {
            self.root_fileid
        } else {
            fileid
        };
        if ino == 0 || ino >= SYNTHETIC_INO_BASE || self.inodes.contains_key(&ino) {
            self.next_synthetic += 1;
            return self.next_synthetic;
        }
        ino
    }
}

// --- per-file I/O state --------------------------------------------------------------------------

struct FileIo {
    state: tokio::sync::Mutex<IoState>,
}

impl FileIo {
    fn new(file: OpenFile, write: bool) -> FileIo {
        FileIo {
            state: tokio::sync::Mutex::new(IoState {
                writer: file.writer(),
                file,
                write,
                retired: Vec::new(),
                error: None,
                reads_stale: false,
                held: None,
                written_end: 0,
                wrote_since_attr: false,
            }),
        }
    }
}

struct IoState {
    /// The open that carries the I/O (reads: clones share the cache and the READs in flight).
    file: OpenFile,
    writer: Writer,
    /// `file` was opened for writing too.
    write: bool,
    /// Other opens of the file, closed with it at the last release: an open superseded by a
    /// read-write one, or one made by a second open or create racing the first.
    retired: Vec<OpenFile>,
    /// The first error of a background WRITE or COMMIT, reported by the next flush/fsync.
    error: Option<Errno>,
    /// Written or truncated here since the read cache was last dropped.
    reads_stale: bool,
    /// A SETATTR of mode, owner or times held under a write delegation, not yet sent.
    held: Option<NsSetAttr>,
    /// The end of the furthest write through this open: the size the file has at least.
    written_end: u64,
    /// Written since the cached attributes came from the server (their mtime is behind).
    wrote_since_attr: bool,
}

impl IoState {
    /// Sends what is buffered and waits for every WRITE (no COMMIT); the first error so far.
    async fn write_out(&mut self) -> FsResult<()> {
        if let Err(e) = self.writer.write_out().await {
            tracing::warn!("writing back failed: {e}");
            self.error.get_or_insert(errno(&e));
        }
        match self.error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// `file`, open for reading and writing, carries the I/O from now on. Nothing was
    /// written through the read-only open it replaces, so its writer holds nothing.
    fn upgrade(&mut self, file: OpenFile) {
        debug_assert!(!self.writer.is_uncommitted(), "a read-only open wrote");
        self.writer = file.writer();
        let old = std::mem::replace(&mut self.file, file);
        self.retired.push(old);
        self.write = true;
    }
}

mod convert;

pub use convert::{changed, errno, nfstime, system_time};
use convert::{fuse_end, nfs_range, set_time, utf8};

#[cfg(test)]
mod tests;
