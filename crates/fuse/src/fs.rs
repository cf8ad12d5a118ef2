//! [`Fs`]: an async filesystem over a [`Client`], shaped for FUSE but independent of it.
//!
//! ```text
//!   fuse.rs (fuser callbacks) ──► Fs ──► Client (typed NFSv3 calls)
//!                                  │
//!      Tables (std Mutex, never held across an await)
//!        inodes   ino ─► { fh, lookups, CachedAttr }      (FUSE node ids; forget drops them)
//!        by_fh    fh  ─► ino
//!        names    (dir ino, name) ─► { fh, attr, dir mtime when cached }   (bounded)
//!      open       ino ─► FileIo (tokio Mutex): the client library's File (reads: autotuned
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
//!   remaining validity as its TTL. Every reply carrying post-op attributes refreshes the cache.
//! - Names: a positive LOOKUP or READDIRPLUS entry is reused while the directory's cached mtime
//!   equals the mtime it was cached under and the directory's attributes are fresh; any change
//!   of the directory makes its entries be looked up again (Linux's dentry revalidation).
//! - Close-to-open (RFC 1813 §4.11 practice): `open` always sends GETATTR; if size, mtime or
//!   ctime changed, the caller is told to drop cached pages. `flush`/`release`/`fsync` write
//!   the dirty data and COMMIT it before returning.
//!
//! # One data path
//! Reads and writes go through the client library's [`File`] and [`FileWriter`], the same code
//! `sluice cp` and `sluice cat` use; this module adds only what a mount needs on top.
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
//! # Reads
//! [`File::read_at`]: the engine of `sluice_engine::readahead` sees every offset the kernel
//! asks for, so sequential readers get a window that grows with bandwidth × delay (within the
//! client's readahead budget) and random readers shrink it to what they ask. Data read ahead is
//! dropped when the attributes show a change, when this mount writes or truncates the file
//! (within the attributes' time granularity its own change may not show), and at open when
//! close-to-open revalidation sees a change.

use crate::cache::{data_changed, AttrCacheConfig, CachedAttr};
use bytes::Bytes;
use sluice_client::{Client, File, FileWriter, NfsError};
use sluice_xdr::nfs3::{
    CreateHow, DeviceData3, Fattr3, Ftype3, MknodData, NfsFh3, Nfsstat3, Nfstime3, Sattr3, SetTime,
    Specdata3, WccData,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// A FUSE node id.
pub type Ino = u64;
/// The export root's node id (FUSE_ROOT_ID).
pub const ROOT_INO: Ino = 1;

/// Synthetic node ids (fileid collisions) start here, far above real fileids.
const SYNTHETIC_INO_BASE: u64 = 1 << 63;

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
}

impl Default for FsConfig {
    fn default() -> Self {
        FsConfig {
            attr: AttrCacheConfig::default(),
            read_only: false,
            name_cache_entries_max: 64 << 10,
        }
    }
}

/// A node as the kernel sees it: its id, its attributes and how long they may be cached.
#[derive(Debug, Clone, Copy)]
pub struct Node {
    pub ino: Ino,
    pub attr: Fattr3,
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
    pub ftype: Option<Ftype3>,
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
#[derive(Debug, Clone, Copy)]
pub enum NodeKind {
    Regular,
    Fifo,
    Socket,
    Char { major: u32, minor: u32 },
    Block { major: u32, minor: u32 },
}

/// The filesystem. Shared by all callbacks (`Arc<Fs>`).
pub struct Fs {
    client: Client,
    config: FsConfig,
    tables: Mutex<Tables>,
    open: Mutex<HashMap<Ino, OpenEntry>>,
    handles: Mutex<HashMap<u64, Ino>>,
    dirs: Mutex<HashMap<u64, Arc<Vec<DirItem>>>>,
    next_handle: AtomicU64,
}

struct OpenEntry {
    io: Arc<FileIo>,
    opens: usize,
}

struct Tables {
    inodes: HashMap<Ino, Inode>,
    by_fh: HashMap<NfsFh3, Ino>,
    names: HashMap<(Ino, Bytes), NameEntry>,
    root_fileid: u64,
    next_synthetic: u64,
}

struct Inode {
    fh: NfsFh3,
    lookups: u64,
    attr: CachedAttr,
    /// Name-cache keys pointing at this node: dropped with the node, because their attributes
    /// may be older than changes made through the node (setattr, writes).
    names: Vec<(Ino, Bytes)>,
}

struct NameEntry {
    fh: NfsFh3,
    attr: Fattr3,
    fetched_at: Instant,
    dir_mtime: Nfstime3,
}

impl Fs {
    /// A filesystem over `client`'s export root (node 1). Fetches the root's attributes.
    pub async fn new(client: Client, config: FsConfig) -> Result<Fs, NfsError> {
        let root = client.root().clone();
        let attr = client.getattr(&root).await?.obj_attributes;
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
        Ok(Fs {
            client,
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
        })
    }

    pub fn client(&self) -> &Client {
        &self.client
    }
    pub fn config(&self) -> &FsConfig {
        &self.config
    }
    /// Largest READ the server takes; the kernel's max_read should not exceed it.
    pub fn rsize(&self) -> u32 {
        self.client.rsize()
    }
    pub fn wsize(&self) -> u32 {
        self.client.wsize()
    }

    // --- names and attributes ----------------------------------------------------------------

    /// LOOKUP, answered from the name cache when the directory is unchanged. Counts a lookup.
    pub async fn lookup(&self, parent: Ino, name: &[u8]) -> FsResult<Node> {
        let dir_attr = self.fresh_attr(parent).await?;
        let key = (parent, Bytes::copy_from_slice(name));
        let now = Instant::now();
        let cached = {
            let t = self.lock_tables();
            t.names.get(&key).and_then(|e| {
                let age = now.saturating_duration_since(e.fetched_at);
                let timeout = CachedAttr::new(e.attr, e.fetched_at, &self.config.attr).timeout;
                (e.dir_mtime == dir_attr.mtime && age < timeout)
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
        let res = match self.client.lookup(&dir, name_str).await {
            Ok(r) => r,
            Err(e) => {
                if e.status() == Some(Nfsstat3::NOENT) {
                    self.lock_tables().names.remove(&key);
                }
                return Err(errno(&e));
            }
        };
        if let Some(d) = res.dir_attributes {
            self.update_attr(parent, d);
        }
        let attr = match res.obj_attributes {
            Some(a) => a,
            None => self.getattr_rpc(&res.object).await?,
        };
        let now = Instant::now();
        let node = self.remember(res.object.clone(), attr, now, true);
        let dir_mtime = res.dir_attributes.map(|d| d.mtime);
        self.cache_name(parent, key.1, &res.object, attr, now, dir_mtime);
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
            if s.writer.is_dirty() {
                s.write_out().await?;
                self.invalidate_attr(ino);
            }
        }
        let attr = self.fresh_attr(ino).await?;
        Ok(self.node(ino, attr))
    }

    /// SETATTR (chmod, chown, truncate, utimens).
    pub async fn setattr(&self, ino: Ino, set: SetAttr) -> FsResult<Node> {
        self.check_writable()?;
        if let Some(io) = self.open_io(ino) {
            let mut s = io.state.lock().await;
            s.reads_stale = true;
            if s.writer.is_dirty() {
                s.write_out().await?;
            }
        }
        let fh = self.fh_of(ino)?;
        let sattr = Sattr3 {
            mode: set.mode.map(|m| m & 0o7777),
            uid: set.uid,
            gid: set.gid,
            size: set.size,
            atime: set_time(set.atime),
            mtime: set_time(set.mtime),
        };
        let res = self
            .client
            .setattr(&fh, sattr, None)
            .await
            .map_err(|e| errno(&e))?;
        let attr = match res.obj_wcc.after {
            Some(a) => a,
            None => self.getattr_rpc(&fh).await?,
        };
        self.update_attr(ino, attr);
        Ok(self.node(ino, attr))
    }

    pub async fn readlink(&self, ino: Ino) -> FsResult<Bytes> {
        let fh = self.fh_of(ino)?;
        let res = self.client.readlink(&fh).await.map_err(|e| errno(&e))?;
        if let Some(a) = res.symlink_attributes {
            self.update_attr(ino, a);
        }
        Ok(res.data)
    }

    pub async fn statfs(&self) -> FsResult<sluice_xdr::nfs3::FsstatResOk> {
        let root = self.client.root().clone();
        self.client.fsstat(&root).await.map_err(|e| errno(&e))
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
        let mut sattr = owned_sattr(mode, owner);
        if truncate {
            sattr.size = Some(0);
        }
        let how = if exclusive {
            CreateHow::Guarded(sattr)
        } else {
            CreateHow::Unchecked(sattr)
        };
        let name_str = utf8(name)?;
        let res = self.client.create(&dir, name_str, how).await;
        let res = res.map_err(|e| errno(&e))?;
        let node = self
            .created(parent, name, res.obj, res.obj_attributes, res.dir_wcc)
            .await?;
        let fh = self.open_handle(node.ino);
        if truncate {
            self.mark_reads_stale(node.ino).await;
        }
        Ok((
            node,
            Opened {
                fh,
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
        let res = self
            .client
            .mkdir(&dir, utf8(name)?, owned_sattr(mode, owner))
            .await
            .map_err(|e| errno(&e))?;
        self.created(parent, name, res.obj, res.obj_attributes, res.dir_wcc)
            .await
    }

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
        let sattr = owned_sattr(mode, owner);
        let dev = |major, minor| DeviceData3 {
            dev_attributes: sattr,
            spec: Specdata3 { major, minor },
        };
        let what = match kind {
            NodeKind::Regular => {
                let res = self
                    .client
                    .create(&dir, utf8(name)?, CreateHow::Guarded(sattr))
                    .await
                    .map_err(|e| errno(&e))?;
                return self
                    .created(parent, name, res.obj, res.obj_attributes, res.dir_wcc)
                    .await;
            }
            NodeKind::Fifo => MknodData::Fifo(sattr),
            NodeKind::Socket => MknodData::Sock(sattr),
            NodeKind::Char { major, minor } => MknodData::Chr(dev(major, minor)),
            NodeKind::Block { major, minor } => MknodData::Blk(dev(major, minor)),
        };
        let res = self
            .client
            .mknod(&dir, utf8(name)?, what)
            .await
            .map_err(|e| errno(&e))?;
        self.created(parent, name, res.obj, res.obj_attributes, res.dir_wcc)
            .await
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
        let mut sattr = owned_sattr(0o777, owner);
        sattr.mode = None; // symlink modes are meaningless; some servers refuse them
        let res = self
            .client
            .symlink(&dir, utf8(name)?, utf8(target)?, sattr)
            .await
            .map_err(|e| errno(&e))?;
        self.created(parent, name, res.obj, res.obj_attributes, res.dir_wcc)
            .await
    }

    pub async fn link(&self, ino: Ino, new_parent: Ino, new_name: &[u8]) -> FsResult<Node> {
        self.check_writable()?;
        let fh = self.fh_of(ino)?;
        let dir = self.fh_of(new_parent)?;
        let res = self
            .client
            .link(&fh, &dir, utf8(new_name)?)
            .await
            .map_err(|e| errno(&e))?;
        self.after_dir_change(new_parent, &res.linkdir_wcc);
        let attr = match res.file_attributes {
            Some(a) => a,
            None => self.getattr_rpc(&fh).await?,
        };
        let now = Instant::now();
        let dir_mtime = res.linkdir_wcc.after.map(|a| a.mtime);
        let node = self.remember(fh.clone(), attr, now, true);
        self.cache_name(
            new_parent,
            Bytes::copy_from_slice(new_name),
            &fh,
            attr,
            now,
            dir_mtime,
        );
        Ok(node)
    }

    pub async fn unlink(&self, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.check_writable()?;
        let dir = self.fh_of(parent)?;
        let victim = self.forget_name(parent, name);
        let res = self.client.remove(&dir, utf8(name)?).await;
        self.invalidate_fh(victim.as_ref());
        let res = res.map_err(|e| errno(&e))?;
        self.after_dir_change(parent, &res.dir_wcc);
        Ok(())
    }

    pub async fn rmdir(&self, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.check_writable()?;
        let dir = self.fh_of(parent)?;
        self.forget_name(parent, name);
        let res = self
            .client
            .rmdir(&dir, utf8(name)?)
            .await
            .map_err(|e| errno(&e))?;
        self.after_dir_change(parent, &res.dir_wcc);
        Ok(())
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
            .client
            .rename(&from, utf8(name)?, &to, utf8(new_name)?)
            .await;
        // ctime of the moved file and nlink of a replaced one changed on the server.
        self.invalidate_fh(moved.as_ref());
        self.invalidate_fh(replaced.as_ref());
        let res = res.map_err(|e| errno(&e))?;
        self.after_dir_change(parent, &res.fromdir_wcc);
        self.after_dir_change(new_parent, &res.todir_wcc);
        Ok(())
    }

    // --- directories --------------------------------------------------------------------------

    /// Reads the whole directory (READDIRPLUS, READDIR if the server has none), primes the
    /// name and attribute caches and returns a handle to the snapshot.
    pub async fn opendir(&self, ino: Ino) -> FsResult<u64> {
        // Like open: always revalidate, so the names below are cached under a current mtime.
        let dir = self.fh_of(ino)?;
        let dir_attr = self.getattr_rpc(&dir).await?;
        self.update_attr(ino, dir_attr);
        let entries = self.client.read_dir(&dir).await.map_err(|e| errno(&e))?;
        let now = Instant::now();
        let mut items = Vec::with_capacity(entries.len() + 2);
        for dot in [&b"."[..], &b".."[..]] {
            items.push(DirItem {
                ino,
                name: Bytes::from_static(dot),
                ftype: Some(Ftype3::DIR),
            });
        }
        {
            let mut t = self.lock_tables();
            for e in entries {
                let name = Bytes::from(e.name.into_bytes());
                let known = e.fh.as_ref().and_then(|fh| t.by_fh.get(fh).copied());
                let child = known.unwrap_or_else(|| t.ino_for_fileid(e.fileid));
                if let (Some(fh), Some(attr)) = (&e.fh, &e.attr) {
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
                    ftype: e.attr.map(|a| a.ftype),
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

    /// Opens a file: close-to-open revalidation with GETATTR.
    pub async fn open(&self, ino: Ino, write: bool) -> FsResult<Opened> {
        if write {
            self.check_writable()?;
        }
        let fh = self.fh_of(ino)?;
        let attr = self.getattr_rpc(&fh).await?;
        let changed = {
            let now = Instant::now();
            let mut t = self.lock_tables();
            match t.inodes.get_mut(&ino) {
                Some(i) => i.attr.update(attr, now, &self.config.attr),
                None => true,
            }
        };
        if let Some(io) = self.open_io(ino) {
            // Open already through another handle: its read cache follows the revalidation.
            io.state.lock().await.file.observe(attr);
        }
        let handle = self.open_handle(ino);
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
                let attr = self.getattr_rpc(s.file.fh()).await?;
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

    /// The last close of a handle: sync, then forget the handle.
    pub async fn release(&self, handle: u64) -> FsResult<()> {
        let r = self.sync(handle).await;
        let ino = self.handles.lock().expect("handles").remove(&handle);
        if let Some(ino) = ino {
            let mut open = self.open.lock().expect("open");
            if let Some(e) = open.get_mut(&ino) {
                e.opens -= 1;
                if e.opens == 0 {
                    open.remove(&ino);
                }
            }
        }
        r
    }

    // --- helpers: tables -------------------------------------------------------------------------

    fn lock_tables(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().expect("tables lock")
    }

    fn fh_of(&self, ino: Ino) -> FsResult<NfsFh3> {
        self.lock_tables()
            .inodes
            .get(&ino)
            .map(|i| i.fh.clone())
            .ok_or(Errno(libc::ESTALE))
    }

    /// Interns `fh` with `attr` (fetched at `at`) and counts a kernel lookup if `count`.
    fn remember(&self, fh: NfsFh3, attr: Fattr3, at: Instant, count: bool) -> Node {
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

    fn node(&self, ino: Ino, attr: Fattr3) -> Node {
        let ttl = self
            .lock_tables()
            .inodes
            .get(&ino)
            .map_or(Duration::ZERO, |i| i.attr.remaining(Instant::now()));
        Node { ino, attr, ttl }
    }

    /// The node's attributes, from the cache or by GETATTR.
    async fn fresh_attr(&self, ino: Ino) -> FsResult<Fattr3> {
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

    async fn getattr_rpc(&self, fh: &NfsFh3) -> FsResult<Fattr3> {
        self.client
            .getattr(fh)
            .await
            .map(|r| r.obj_attributes)
            .map_err(|e| errno(&e))
    }

    fn update_attr(&self, ino: Ino, attr: Fattr3) {
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

    fn invalidate_fh(&self, fh: Option<&NfsFh3>) {
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
        fh: &NfsFh3,
        attr: Fattr3,
        now: Instant,
        dir_mtime: Option<Nfstime3>,
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
    fn forget_name(&self, dir: Ino, name: &[u8]) -> Option<NfsFh3> {
        let key = (dir, Bytes::copy_from_slice(name));
        self.lock_tables().names.remove(&key).map(|e| e.fh)
    }

    /// A directory changed by us: take its post-op attributes (or forget the cached ones).
    fn after_dir_change(&self, dir: Ino, wcc: &WccData) {
        match wcc.after {
            Some(a) => self.update_attr(dir, a),
            None => self.invalidate_attr(dir),
        }
    }

    /// The tail shared by CREATE, MKDIR, MKNOD and SYMLINK.
    async fn created(
        &self,
        parent: Ino,
        name: &[u8],
        fh: Option<NfsFh3>,
        attr: Option<Fattr3>,
        dir_wcc: WccData,
    ) -> FsResult<Node> {
        self.after_dir_change(parent, &dir_wcc);
        let fh = match fh {
            Some(fh) => fh,
            None => {
                let dir = self.fh_of(parent)?;
                self.client
                    .lookup(&dir, utf8(name)?)
                    .await
                    .map_err(|e| errno(&e))?
                    .object
            }
        };
        let attr = match attr {
            Some(a) => a,
            None => self.getattr_rpc(&fh).await?,
        };
        let now = Instant::now();
        let dir_mtime = dir_wcc.after.map(|a| a.mtime);
        let node = self.remember(fh.clone(), attr, now, true);
        self.cache_name(
            parent,
            Bytes::copy_from_slice(name),
            &fh,
            attr,
            now,
            dir_mtime,
        );
        Ok(node)
    }

    fn check_writable(&self) -> FsResult<()> {
        if self.config.read_only {
            Err(Errno(libc::EROFS))
        } else {
            Ok(())
        }
    }

    // --- helpers: open files -------------------------------------------------------------------

    fn open_handle(&self, ino: Ino) -> u64 {
        let (fh, attr) = self
            .lock_tables()
            .inodes
            .get(&ino)
            .map(|i| (i.fh.clone(), i.attr.attr))
            .unwrap_or_default();
        {
            let mut open = self.open.lock().expect("open");
            let e = open.entry(ino).or_insert_with(|| OpenEntry {
                io: Arc::new(FileIo::new(File::new(self.client.clone(), fh, attr))),
                opens: 0,
            });
            e.opens += 1;
        }
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

    /// Drops what the open file read ahead, at the next read (this mount changed the file).
    async fn mark_reads_stale(&self, ino: Ino) {
        if let Some(io) = self.open_io(ino) {
            io.state.lock().await.reads_stale = true;
        }
    }
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
    fn new(file: File) -> FileIo {
        FileIo {
            state: tokio::sync::Mutex::new(IoState {
                writer: file.writer(),
                file,
                error: None,
                reads_stale: false,
            }),
        }
    }
}

struct IoState {
    /// Reads (clones share the cache and the READs in flight).
    file: File,
    writer: FileWriter,
    /// The first error of a background WRITE or COMMIT, reported by the next flush/fsync.
    error: Option<Errno>,
    /// Written or truncated here since the read cache was last dropped.
    reads_stale: bool,
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
}

// --- conversions ---------------------------------------------------------------------------------

fn utf8(name: &[u8]) -> FsResult<&str> {
    std::str::from_utf8(name).map_err(|_| Errno(libc::EINVAL))
}

fn owned_sattr(mode: u32, owner: Option<(u32, u32)>) -> Sattr3 {
    Sattr3 {
        mode: Some(mode & 0o7777),
        uid: owner.map(|o| o.0),
        gid: owner.map(|o| o.1),
        ..Sattr3::default()
    }
}

fn set_time(t: Option<Option<SystemTime>>) -> SetTime {
    match t {
        None => SetTime::DontChange,
        Some(None) => SetTime::ServerTime,
        Some(Some(t)) => SetTime::ClientTime(nfstime(t)),
    }
}

/// A `SystemTime` as `nfstime3` (seconds since 1970 as u32; earlier times clamp to 0).
pub fn nfstime(t: SystemTime) -> Nfstime3 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => Nfstime3 {
            seconds: d.as_secs().min(u32::MAX as u64) as u32,
            nseconds: d.subsec_nanos(),
        },
        Err(_) => Nfstime3::default(),
    }
}

/// `nfstime3` as a `SystemTime`.
pub fn system_time(t: Nfstime3) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::new(t.seconds as u64, t.nseconds.min(999_999_999))
}

/// The errno for an NFS error (RFC 1813 §2.6; the values below 10000 are Linux errnos except
/// where Linux numbers differ).
pub fn errno(e: &NfsError) -> Errno {
    let Some(s) = e.status() else {
        return Errno(if e.is_timeout() {
            libc::ETIMEDOUT
        } else {
            libc::EIO
        });
    };
    Errno(match s {
        Nfsstat3::NAMETOOLONG => libc::ENAMETOOLONG,
        Nfsstat3::NOTEMPTY => libc::ENOTEMPTY,
        Nfsstat3::DQUOT => libc::EDQUOT,
        Nfsstat3::STALE | Nfsstat3::BADHANDLE => libc::ESTALE,
        Nfsstat3::REMOTE => libc::EREMOTE,
        Nfsstat3::NOTSUPP => libc::EOPNOTSUPP,
        Nfsstat3::BADTYPE => libc::EINVAL,
        Nfsstat3::JUKEBOX => libc::EAGAIN,
        Nfsstat3::TOOSMALL | Nfsstat3::SERVERFAULT | Nfsstat3::NOT_SYNC | Nfsstat3::BAD_COOKIE => {
            libc::EIO
        }
        Nfsstat3(v) if v > 0 && v < 128 => v as i32,
        _ => libc::EIO,
    })
}

/// True if two attribute sets differ in what close-to-open cares about.
pub fn changed(old: &Fattr3, new: &Fattr3) -> bool {
    data_changed(old, new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nfs_statuses_map_to_linux_errnos() {
        let st = |s| NfsError::local(s);
        assert_eq!(errno(&st(Nfsstat3::NOENT)), Errno(libc::ENOENT));
        assert_eq!(errno(&st(Nfsstat3::NOTEMPTY)), Errno(libc::ENOTEMPTY));
        assert_eq!(errno(&st(Nfsstat3::NAMETOOLONG)), Errno(libc::ENAMETOOLONG));
        assert_eq!(errno(&st(Nfsstat3::STALE)), Errno(libc::ESTALE));
        assert_eq!(errno(&st(Nfsstat3::EXIST)), Errno(libc::EEXIST));
        assert_eq!(errno(&NfsError::Other("x".into())), Errno(libc::EIO));
    }

    #[test]
    fn times_round_trip() {
        let t = Nfstime3 {
            seconds: 1_700_000_000,
            nseconds: 123_456_789,
        };
        assert_eq!(nfstime(system_time(t)), t);
        assert_eq!(
            nfstime(SystemTime::UNIX_EPOCH - Duration::from_secs(5)),
            Nfstime3::default()
        );
    }

    #[test]
    fn fileids_become_node_ids_with_the_root_swapped_and_collisions_synthetic() {
        let mut t = Tables {
            inodes: HashMap::new(),
            by_fh: HashMap::new(),
            names: HashMap::new(),
            root_fileid: 77,
            next_synthetic: SYNTHETIC_INO_BASE,
        };
        assert_eq!(t.ino_for_fileid(5), 5);
        assert_eq!(t.ino_for_fileid(1), 77);
        t.inodes.insert(
            5,
            Inode {
                fh: NfsFh3::default(),
                lookups: 1,
                attr: CachedAttr::new(
                    Fattr3::default(),
                    Instant::now(),
                    &AttrCacheConfig::default(),
                ),
                names: Vec::new(),
            },
        );
        assert!(t.ino_for_fileid(5) > SYNTHETIC_INO_BASE);
        assert_eq!(t.ino_for_fileid(77), ROOT_INO, "root's fileid is node 1");
    }
}
