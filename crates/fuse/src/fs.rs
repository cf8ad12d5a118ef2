//! [`Fs`]: an async filesystem over a [`Client`], shaped for FUSE but independent of it.
//!
//! ```text
//!   fuse.rs (fuser callbacks) ──► Fs ──► Client (typed NFSv3 calls)
//!                                  │
//!      Tables (std Mutex, never held across an await)
//!        inodes   ino ─► { fh, lookups, CachedAttr }      (FUSE node ids; forget drops them)
//!        by_fh    fh  ─► ino
//!        names    (dir ino, name) ─► { fh, attr, dir mtime when cached }   (bounded)
//!      open       ino ─► FileIo (tokio Mutex): write-behind buffer, WRITEs in flight,
//!                        the UnstableLog (what COMMIT must still cover), the read window
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
//! # Writes
//! The kernel's write chunks are appended to a buffer while they are contiguous; every full
//! wsize is sent as an UNSTABLE WRITE, with up to `write_depth` in flight. Replies go to the
//! [`UnstableLog`]; `sync` sends what is left, waits, and COMMITs. If the COMMIT's verifier
//! differs from a WRITE's (the server restarted and may have lost the data) the chunks written
//! under the old verifier are sent again and committed again. Errors of background WRITEs are
//! kept and reported by the next flush/fsync, like Linux reports them at close.
//!
//! # Reads
//! A per-file window of READs: a read that continues the previous one (or falls inside the
//! window) keeps `read_depth` full-rsize READs in flight ahead of it; any other read resets the
//! window and fetches just what was asked. The seam for an adaptive policy
//! (`sluice_engine::readahead`) is [`ReadWindow::plan_ahead`]: it decides how far ahead to
//! fetch and is the only place that would change.

use crate::cache::{data_changed, AttrCacheConfig, CachedAttr};
use bytes::{Bytes, BytesMut};
use sluice_client::{Client, NfsError, Pending};
use sluice_engine::plan::UnstableLog;
use sluice_xdr::nfs3::{
    CreateHow, DeviceData3, Fattr3, Ftype3, MknodData, NfsFh3, Nfsstat3, Nfstime3, ReadResOk,
    Sattr3, SetTime, Specdata3, StableHow, WccData, WriteResOk,
};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// A FUSE node id.
pub type Ino = u64;
/// The export root's node id (FUSE_ROOT_ID).
pub const ROOT_INO: Ino = 1;

/// How many times a COMMIT may report a new verifier before `sync` gives up with EIO.
const COMMIT_ROUNDS_MAX: usize = 8;
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
    /// READs of rsize kept in flight ahead of a sequential reader. Default 4.
    pub read_depth: usize,
    /// UNSTABLE WRITEs of wsize in flight per file. Default 4.
    pub write_depth: usize,
    /// Uncommitted bytes kept per file (for resending after a server restart) before a COMMIT
    /// is sent mid-stream. Default 64 MiB: the bound on memory held per file being written.
    pub commit_bytes_max: u64,
    /// Entries of the name cache; when full it is cleared (they are only hints). Default 64 Ki.
    pub name_cache_entries_max: usize,
}

impl Default for FsConfig {
    fn default() -> Self {
        FsConfig {
            attr: AttrCacheConfig::default(),
            read_only: false,
            read_depth: 4,
            write_depth: 4,
            commit_bytes_max: 64 << 20,
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
            if s.is_dirty() {
                self.write_out(&io, &mut s).await?;
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
            s.window.clear();
            if s.is_dirty() {
                self.write_out(&io, &mut s).await?;
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
        let handle = self.open_handle(ino);
        Ok(Opened {
            fh: handle,
            keep_cache: !changed,
        })
    }

    pub async fn read(&self, handle: u64, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        let (ino, io) = self.io_of(handle)?;
        let size_hint = self.cached_size(ino);
        let mut s = io.state.lock().await;
        if s.is_dirty() {
            self.write_out(&io, &mut s).await?;
        }
        let depth = self.config.read_depth;
        let r = s
            .window
            .read(&self.client, &io.fh, offset, size, size_hint, depth)
            .await;
        r.map_err(|e| errno(&e))
    }

    /// Buffers `data` at `offset`; full wsize pieces go out as UNSTABLE WRITEs.
    pub async fn write(&self, handle: u64, offset: u64, data: &[u8]) -> FsResult<u32> {
        self.check_writable()?;
        let (ino, io) = self.io_of(handle)?;
        let mut s = io.state.lock().await;
        s.window.clear();
        if !s.buf.is_empty() && offset != s.buf_offset + s.buf.len() as u64 {
            self.send_buffer(&io, &mut s).await;
        }
        if s.buf.is_empty() {
            s.buf_offset = offset;
        }
        s.buf.extend_from_slice(data);
        let wsize = self.wsize().max(4096) as usize;
        while s.buf.len() >= wsize {
            let chunk = s.buf.split_to(wsize).freeze();
            let off = s.buf_offset;
            s.buf_offset += wsize as u64;
            self.start_write(&io, &mut s, off, chunk).await;
        }
        if s.log.bytes() > self.config.commit_bytes_max {
            self.commit(&io, &mut s).await;
        }
        drop(s);
        self.invalidate_attr(ino);
        Ok(data.len() as u32)
    }

    /// Writes out and COMMITs the file's dirty data (flush, fsync); reports deferred errors.
    pub async fn sync(&self, handle: u64) -> FsResult<()> {
        let (ino, io) = self.io_of(handle)?;
        let mut s = io.state.lock().await;
        let had_data = s.is_dirty() || !s.log.is_empty();
        let r = self.write_out(&io, &mut s).await;
        if r.is_ok() && !s.log.is_empty() {
            self.commit(&io, &mut s).await;
        }
        let deferred = s.error.take();
        drop(s);
        if had_data {
            self.invalidate_attr(ino);
        }
        r?;
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

    fn cached_size(&self, ino: Ino) -> u64 {
        self.lock_tables()
            .inodes
            .get(&ino)
            .map_or(0, |i| i.attr.attr.size)
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
        let fh = self.fh_of(ino).unwrap_or_default();
        {
            let mut open = self.open.lock().expect("open");
            let e = open.entry(ino).or_insert_with(|| OpenEntry {
                io: Arc::new(FileIo::new(fh)),
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

    /// Sends the buffer and waits for every WRITE in flight (no COMMIT).
    async fn write_out(&self, io: &FileIo, s: &mut IoState) -> FsResult<()> {
        self.send_buffer(io, s).await;
        while !s.in_flight.is_empty() {
            self.reap_one(io, s).await;
        }
        match s.error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    async fn send_buffer(&self, io: &FileIo, s: &mut IoState) {
        if s.buf.is_empty() {
            return;
        }
        let data = s.buf.split().freeze();
        let off = s.buf_offset;
        s.buf_offset += data.len() as u64;
        self.start_write(io, s, off, data).await;
    }

    async fn start_write(&self, io: &FileIo, s: &mut IoState, offset: u64, data: Bytes) {
        while s.in_flight.len() >= self.config.write_depth.max(1) {
            self.reap_one(io, s).await;
        }
        let pending = self
            .client
            .start_write(&io.fh, offset, data.clone(), StableHow::UNSTABLE)
            .await;
        s.in_flight.push_back(InFlightWrite {
            offset,
            data,
            pending,
        });
    }

    /// Waits for the oldest WRITE; a short write sends the rest synchronously.
    async fn reap_one(&self, io: &FileIo, s: &mut IoState) {
        let Some(w) = s.in_flight.pop_front() else {
            return;
        };
        let (mut offset, mut data) = (w.offset, w.data);
        let mut result = w.pending.wait().await;
        loop {
            match result {
                Ok(res) => {
                    let n = (res.count as usize).min(data.len());
                    if res.committed != StableHow::FILE_SYNC {
                        s.log.record(offset, data.slice(..n), res.verf);
                    }
                    if n == data.len() {
                        return;
                    }
                    if n == 0 {
                        s.error.get_or_insert(Errno(libc::EIO));
                        return;
                    }
                    offset += n as u64;
                    data = data.slice(n..);
                    result = self
                        .client
                        .write(&io.fh, offset, data.clone(), StableHow::UNSTABLE)
                        .await;
                }
                Err(e) => {
                    tracing::warn!("WRITE at {offset} failed: {e}");
                    s.error.get_or_insert(errno(&e));
                    return;
                }
            }
        }
    }

    /// COMMIT everything written; resend what a verifier change may have lost.
    async fn commit(&self, io: &FileIo, s: &mut IoState) {
        for _ in 0..COMMIT_ROUNDS_MAX {
            while !s.in_flight.is_empty() {
                self.reap_one(io, s).await;
            }
            if s.log.is_empty() || s.error.is_some() {
                return;
            }
            let verf = match self.client.commit(&io.fh, 0, 0).await {
                Ok(r) => r.verf,
                Err(e) => {
                    tracing::warn!("COMMIT failed: {e}");
                    s.error.get_or_insert(errno(&e));
                    return;
                }
            };
            let lost = s.log.on_commit(verf);
            if lost.is_empty() {
                return;
            }
            tracing::info!(
                "write verifier changed: resending {} uncommitted chunks",
                lost.len()
            );
            for c in lost {
                self.start_write(io, s, c.offset, c.data).await;
            }
        }
        s.error.get_or_insert(Errno(libc::EIO));
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
    fh: NfsFh3,
    state: tokio::sync::Mutex<IoState>,
}

impl FileIo {
    fn new(fh: NfsFh3) -> FileIo {
        FileIo {
            fh,
            state: tokio::sync::Mutex::new(IoState::default()),
        }
    }
}

#[derive(Default)]
struct IoState {
    /// Contiguous data not yet sent, starting at `buf_offset`.
    buf: BytesMut,
    buf_offset: u64,
    in_flight: VecDeque<InFlightWrite>,
    log: UnstableLog,
    /// The first error of a background WRITE or COMMIT, reported by the next flush/fsync.
    error: Option<Errno>,
    window: ReadWindow,
}

impl IoState {
    fn is_dirty(&self) -> bool {
        !self.buf.is_empty() || !self.in_flight.is_empty()
    }
}

struct InFlightWrite {
    offset: u64,
    data: Bytes,
    pending: Pending<WriteResOk>,
}

/// The readahead window of one file: contiguous READs, oldest first.
#[derive(Default)]
struct ReadWindow {
    chunks: VecDeque<ReadChunk>,
    /// Where the next READ of the window starts.
    next_fetch: u64,
    /// End of the last read served (a read starting here is sequential).
    last_end: u64,
}

struct ReadChunk {
    offset: u64,
    count: u32,
    state: ChunkState,
}

enum ChunkState {
    Pending(Pending<ReadResOk>),
    Ready { data: Bytes, eof: bool },
    Taken,
}

impl ReadWindow {
    fn clear(&mut self) {
        self.chunks.clear();
        self.next_fetch = 0;
    }

    async fn read(
        &mut self,
        client: &Client,
        fh: &NfsFh3,
        offset: u64,
        size: u32,
        size_hint: u64,
        depth: usize,
    ) -> Result<Vec<u8>, NfsError> {
        let end = offset + size as u64;
        let in_window =
            self.chunks.front().is_some_and(|c| c.offset <= offset) && offset < self.next_fetch;
        let sequential = in_window || offset == self.last_end;
        if !in_window {
            self.chunks.clear();
            self.next_fetch = offset;
        }
        let rsize = client.rsize().max(4096);
        let ahead = self.plan_ahead(sequential, end, size_hint, rsize, depth);
        while self.next_fetch < ahead {
            let count = if sequential {
                rsize
            } else {
                (end - self.next_fetch).min(rsize as u64) as u32
            };
            let pending = client.start_read(fh, self.next_fetch, count).await;
            self.chunks.push_back(ReadChunk {
                offset: self.next_fetch,
                count,
                state: ChunkState::Pending(pending),
            });
            self.next_fetch += count as u64;
        }
        let result = self.assemble(client, fh, offset, end).await;
        if result.is_err() {
            self.clear();
        }
        result
    }

    /// How far the window should reach: the request, plus `depth` READs beyond it when the
    /// reader is sequential, never past the known size. The seam for an adaptive policy.
    fn plan_ahead(
        &self,
        sequential: bool,
        end: u64,
        size_hint: u64,
        rsize: u32,
        depth: usize,
    ) -> u64 {
        if !sequential {
            return end;
        }
        let ahead = end.saturating_add(rsize as u64 * depth as u64);
        ahead.min(size_hint.max(end))
    }

    async fn assemble(
        &mut self,
        client: &Client,
        fh: &NfsFh3,
        offset: u64,
        end: u64,
    ) -> Result<Vec<u8>, NfsError> {
        let mut out = Vec::with_capacity((end - offset) as usize);
        let mut hit_eof = false;
        for i in 0..self.chunks.len() {
            let pos = offset + out.len() as u64;
            let c = &mut self.chunks[i];
            if c.offset >= end || hit_eof {
                break;
            }
            if c.offset + c.count as u64 <= pos {
                continue;
            }
            if let ChunkState::Pending(_) = c.state {
                let ChunkState::Pending(p) = std::mem::replace(&mut c.state, ChunkState::Taken)
                else {
                    unreachable!()
                };
                let (data, eof) = complete(client, fh, c.offset, c.count, p).await?;
                c.state = ChunkState::Ready { data, eof };
            }
            let ChunkState::Ready { data, eof } = &c.state else {
                unreachable!("chunks are pending or ready")
            };
            let data_end = c.offset + data.len() as u64;
            if c.offset > pos || data_end <= pos {
                hit_eof = *eof || data_end <= pos;
                break;
            }
            let take_end = data_end.min(end);
            out.extend_from_slice(&data[(pos - c.offset) as usize..(take_end - c.offset) as usize]);
            if *eof && take_end == data_end {
                hit_eof = true;
            }
        }
        if hit_eof {
            // Nothing after EOF is worth keeping.
            let eof_at = offset + out.len() as u64;
            self.chunks.retain(|c| c.offset < eof_at.max(offset + 1));
            self.next_fetch = self
                .chunks
                .back()
                .map_or(eof_at, |c| c.offset + c.count as u64);
        }
        // Keep the chunk the read ended in (the next sequential read starts there).
        let pos = offset + out.len() as u64;
        while self
            .chunks
            .front()
            .is_some_and(|c| c.offset + c.count as u64 <= offset.min(pos))
        {
            self.chunks.pop_front();
        }
        self.last_end = pos;
        Ok(out)
    }
}

/// Waits for a READ and completes a short one (not at EOF) with further READs.
async fn complete(
    client: &Client,
    fh: &NfsFh3,
    offset: u64,
    count: u32,
    pending: Pending<ReadResOk>,
) -> Result<(Bytes, bool), NfsError> {
    let first = pending.wait().await?;
    let mut eof = first.eof;
    let mut data = payload_bytes(first.data);
    if data.len() >= count as usize || eof {
        return Ok((data, eof));
    }
    let mut buf = BytesMut::from(&data[..]);
    while buf.len() < count as usize && !eof {
        let got = buf.len() as u64;
        let r = client.read(fh, offset + got, count - got as u32).await?;
        eof = r.eof;
        if r.data.is_empty() {
            break;
        }
        for c in r.data.chunks() {
            buf.extend_from_slice(c);
        }
    }
    data = buf.freeze();
    Ok((data, eof))
}

fn payload_bytes(p: sluice_xdr::Payload) -> Bytes {
    let mut chunks = p.into_chunks();
    if chunks.len() == 1 {
        return chunks.pop().expect("one chunk");
    }
    let mut b = BytesMut::new();
    for c in chunks {
        b.extend_from_slice(&c);
    }
    b.freeze()
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
