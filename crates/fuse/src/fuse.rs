//! The FUSE adapter: translates `fuser` callbacks into [`Fs`] calls, nothing more.
//!
//! Every callback that may talk to the server spawns a task on the tokio runtime and replies
//! from it, so the single `fuser` dispatch thread never waits on the network and many kernel
//! requests are in flight at once (the kernel sends reads asynchronously: FUSE_ASYNC_READ).
//! Conversions between NFS and FUSE types live here; decisions live in `fs.rs`.

use crate::fs::{
    system_time, Errno as FsErrno, Fs, FsResult, LockRange, LockType, Node, NodeKind, SetAttr,
};
use bytes::Bytes;
use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, Notifier, OpenAccMode, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLock,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use sluice_client::namespace::{Attr, FileType as NsType};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;
use tokio::runtime::Handle;

/// Largest READ/WRITE the kernel is asked to send us: 1 MiB, Linux's NFS rsize/wsize cap. The
/// server's rsize/wsize may be smaller; [`Fs`] splits and coalesces as needed.
pub const TRANSFER_BYTES_MAX: u32 = 1 << 20;

/// The `fuser::Filesystem` of a sluice mount.
pub struct SluiceFuse {
    fs: Arc<Fs>,
    rt: Handle,
    /// Set once the session exists; used to drop the kernel's cached attributes after
    /// close-to-open revalidation saw a change.
    notifier: Arc<OnceLock<Notifier>>,
}

impl SluiceFuse {
    pub fn new(fs: Arc<Fs>, rt: Handle) -> SluiceFuse {
        SluiceFuse {
            fs,
            rt,
            notifier: Arc::new(OnceLock::new()),
        }
    }

    /// Where to put the session's notifier once it exists.
    pub fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
        self.notifier.clone()
    }

    fn spawn<F>(&self, f: impl FnOnce(Arc<Fs>) -> F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.rt.spawn(f(self.fs.clone()));
    }
}

impl Filesystem for SluiceFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let want = TRANSFER_BYTES_MAX;
        if let Err(max) = config.set_max_write(want) {
            let _ = config.set_max_write(max);
        }
        if let Err(max) = config.set_max_readahead(want) {
            let _ = config.set_max_readahead(max);
        }
        // Many READs/WRITEs in flight: the kernel's default of 12 congests at ~9 background
        // requests, below what one sequential reader keeps in flight at 1 MiB each.
        let _ = config.set_max_background(64);
        // When a GETATTR shows a new mtime/size, the kernel drops the file's cached pages: the
        // data-cache half of the NFS client's attribute revalidation.
        let _ = config.add_capabilities(InitFlags::FUSE_AUTO_INVAL_DATA);
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        // fcntl and flock locks come to us (getlk/setlk) and become LOCK/LOCKU (NFSv4) or
        // NLM LOCK/UNLOCK (NFSv3).
        if self.fs.server_locks() {
            let _ = config.add_capabilities(InitFlags::FUSE_POSIX_LOCKS);
            let _ = config.add_capabilities(InitFlags::FUSE_FLOCK_LOCKS);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let name = bytes(name);
        self.spawn(|fs| async move { entry(reply, fs.lookup(parent.0, &name).await) });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.spawn(|fs| async move { attr(reply, fs.getattr(ino.0).await) });
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(time_or_now),
            mtime: mtime.map(time_or_now),
        };
        self.spawn(|fs| async move { attr(reply, fs.setattr(ino.0, set).await) });
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.spawn(|fs| async move {
            match fs.readlink(ino.0).await {
                Ok(target) => reply.data(&target),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let (major, minor) = (
            libc::major(rdev as libc::dev_t),
            libc::minor(rdev as libc::dev_t),
        );
        let kind = match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => NodeKind::Regular,
            libc::S_IFIFO => NodeKind::Fifo,
            libc::S_IFSOCK => NodeKind::Socket,
            libc::S_IFCHR => NodeKind::Char { major, minor },
            libc::S_IFBLK => NodeKind::Block { major, minor },
            _ => return reply.error(Errno::EINVAL),
        };
        let (name, owner) = (bytes(name), owner(req, &self.fs));
        self.spawn(
            |fs| async move { entry(reply, fs.mknod(parent.0, &name, mode, kind, owner).await) },
        );
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let (name, owner) = (bytes(name), owner(req, &self.fs));
        self.spawn(|fs| async move { entry(reply, fs.mkdir(parent.0, &name, mode, owner).await) });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = bytes(name);
        self.spawn(|fs| async move { empty(reply, fs.unlink(parent.0, &name).await) });
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = bytes(name);
        self.spawn(|fs| async move { empty(reply, fs.rmdir(parent.0, &name).await) });
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let (name, owner) = (bytes(link_name), owner(req, &self.fs));
        let target = bytes(target.as_os_str());
        self.spawn(
            |fs| async move { entry(reply, fs.symlink(parent.0, &name, &target, owner).await) },
        );
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        // NFSv3 RENAME always replaces: RENAME_NOREPLACE/EXCHANGE cannot be honoured.
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        let (name, newname) = (bytes(name), bytes(newname));
        self.spawn(|fs| async move {
            empty(
                reply,
                fs.rename(parent.0, &name, newparent.0, &newname).await,
            )
        });
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let newname = bytes(newname);
        self.spawn(|fs| async move { entry(reply, fs.link(ino.0, newparent.0, &newname).await) });
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let write = flags.acc_mode() != OpenAccMode::O_RDONLY;
        let notifier = self.notifier.clone();
        self.spawn(|fs| async move {
            match fs.open(ino.0, write).await {
                Ok(o) => {
                    let flags = if o.keep_cache {
                        FopenFlags::FOPEN_KEEP_CACHE
                    } else {
                        invalidate_kernel_attr(&notifier, ino);
                        FopenFlags::empty()
                    };
                    reply.opened(FileHandle(o.fh), flags)
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.spawn(|fs| async move {
            match fs.read(fh.0, offset, size).await {
                Ok(data) => reply.data(&data),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // The kernel's buffer is only borrowed for this call: one copy, into the write buffer.
        let data = Bytes::copy_from_slice(data);
        self.spawn(|fs| async move {
            match fs.write(fh.0, offset, &data).await {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.spawn(|fs| async move { empty(reply, fs.flush(fh.0, Some(lock_owner.0)).await) });
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // lock_owner is set when the file description held a flock (FUSE_RELEASE_FLOCK_UNLOCK).
        let owner = lock_owner.map(|o| o.0);
        self.spawn(|fs| async move { empty(reply, fs.release(fh.0, owner).await) });
    }

    fn getlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        let Some(want) = lock_range(start, end, typ) else {
            return reply.error(Errno::EINVAL);
        };
        self.spawn(|fs| async move {
            match fs.getlk(fh.0, lock_owner.0, want).await {
                // The holder is another client or process of this mount: no pid to show (as
                // Linux's NFS client reports a remote holder).
                Ok(Some(c)) => reply.locked(c.start, c.end, lock_type(c.typ), 0),
                Ok(None) => reply.locked(start, end, libc::F_UNLCK, pid),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn setlk(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        _pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let Some(want) = lock_range(start, end, typ) else {
            return reply.error(Errno::EINVAL);
        };
        let waiter = req.pid();
        self.spawn(|fs| async move {
            let r = fs
                .setlk(fh.0, lock_owner.0, want, sleep, || signal_pending(waiter))
                .await;
            empty(reply, r)
        });
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.spawn(|fs| async move { empty(reply, fs.sync(fh.0).await) });
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.spawn(|fs| async move {
            match fs.opendir(ino.0).await {
                Ok(h) => reply.opened(FileHandle(h), FopenFlags::empty()),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        // Served from the snapshot taken by opendir: no network, no task.
        let items = match self.fs.dir_items(fh.0) {
            Ok(items) => items,
            Err(e) => return reply.error(errno(e)),
        };
        for (i, item) in items.iter().enumerate().skip(offset as usize) {
            let kind = item.ftype.map_or(FileType::RegularFile, file_type);
            let name = OsStr::from_bytes(&item.name);
            if reply.add(INodeNo(item.ino), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.fs.releasedir(fh.0);
        reply.ok();
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let name = bytes(name);
        self.spawn(|fs| async move {
            match fs.getxattr(ino.0, &name).await {
                Ok(v) => xattr_reply(reply, &v, size),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let (name, value) = (bytes(name), Bytes::copy_from_slice(value));
        self.spawn(|fs| async move {
            match fs.setxattr(ino.0, &name, &value, flags).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.spawn(|fs| async move {
            match fs.listxattr(ino.0).await {
                Ok(list) => xattr_reply(reply, &list, size),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = bytes(name);
        self.spawn(|fs| async move {
            match fs.removexattr(ino.0, &name).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.spawn(|fs| async move {
            match fs.statfs().await {
                Ok(s) => {
                    const BSIZE: u64 = 4096;
                    reply.statfs(
                        s.total_bytes / BSIZE,
                        s.free_bytes / BSIZE,
                        s.avail_bytes / BSIZE,
                        s.total_files,
                        s.free_files,
                        BSIZE as u32,
                        255,
                        BSIZE as u32,
                    )
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Mounted with default_permissions: the kernel checks modes itself and does not call
        // this; answer yes if an old kernel does.
        reply.ok();
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let (name, owner) = (bytes(name), owner(req, &self.fs));
        let exclusive = flags & libc::O_EXCL != 0;
        let truncate = flags & libc::O_TRUNC != 0;
        self.spawn(|fs| async move {
            match fs
                .create(parent.0, &name, mode, owner, exclusive, truncate)
                .await
            {
                Ok((node, o)) => reply.created(
                    &node.ttl,
                    &file_attr(&node),
                    Generation(0),
                    FileHandle(o.fh),
                    FopenFlags::empty(),
                ),
                Err(e) => reply.error(errno(e)),
            }
        });
    }
}

// --- replies ---------------------------------------------------------------------------------

fn entry(reply: ReplyEntry, r: FsResult<Node>) {
    match r {
        Ok(n) => reply.entry(&n.ttl, &file_attr(&n), Generation(0)),
        Err(e) => reply.error(errno(e)),
    }
}

fn attr(reply: ReplyAttr, r: FsResult<Node>) {
    match r {
        Ok(n) => reply.attr(&n.ttl, &file_attr(&n)),
        Err(e) => reply.error(errno(e)),
    }
}

fn empty(reply: ReplyEmpty, r: FsResult<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

fn invalidate_kernel_attr(notifier: &OnceLock<Notifier>, ino: INodeNo) {
    if let Some(n) = notifier.get() {
        // offset < 0: attributes only (the pages go because FOPEN_KEEP_CACHE is not set).
        if let Err(e) = n.inval_inode(ino, -1, 0) {
            tracing::debug!("inval_inode({ino}): {e}");
        }
    }
}

// --- conversions -----------------------------------------------------------------------------

fn errno(e: FsErrno) -> Errno {
    Errno::from_i32(e.0)
}

/// A getxattr or listxattr answer as FUSE wants it: the size when asked with no room (`size`
/// 0), the bytes when they fit, ERANGE when they do not.
fn xattr_reply(reply: ReplyXattr, data: &[u8], size: u32) {
    match u32::try_from(data.len()) {
        Ok(len) if size == 0 => reply.size(len),
        Ok(len) if len <= size => reply.data(data),
        _ => reply.error(Errno::ERANGE),
    }
}

fn bytes(s: &OsStr) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn time_or_now(t: TimeOrNow) -> Option<SystemTime> {
    match t {
        TimeOrNow::SpecificTime(t) => Some(t),
        TimeOrNow::Now => None,
    }
}

/// The owner to give new files: the caller's ids when they differ from the mount's AUTH_SYS
/// identity (which the server uses otherwise).
fn owner(req: &Request, fs: &Fs) -> Option<(u32, u32)> {
    let (uid, gid) = fs.config().auth_ids;
    (req.uid() != uid || req.gid() != gid).then(|| (req.uid(), req.gid()))
}

/// FUSE's lock (`start..=end`, an `F_*LCK` type) as the fs's.
fn lock_range(start: u64, end: u64, typ: i32) -> Option<LockRange> {
    let typ = match typ {
        libc::F_RDLCK => LockType::Read,
        libc::F_WRLCK => LockType::Write,
        libc::F_UNLCK => LockType::Unlock,
        _ => return None,
    };
    Some(LockRange { start, end, typ })
}

fn lock_type(t: LockType) -> i32 {
    match t {
        LockType::Read => libc::F_RDLCK,
        LockType::Write => libc::F_WRLCK,
        LockType::Unlock => libc::F_UNLCK,
    }
}

/// Whether process `pid` has an unblocked signal pending, or is gone: a waiting lock then
/// stops with EINTR. fuser answers the kernel's FUSE_INTERRUPT with ENOSYS, so the kernel
/// never tells us; a signal to a process waiting in F_SETLKW shows in its /proc status
/// (SigPnd for the thread, ShdPnd for the process; SigBlk masks them).
fn signal_pending(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    let pending = field("SigPnd:") | field("ShdPnd:");
    pending & !field("SigBlk:") != 0
}

fn file_type(t: NsType) -> FileType {
    match t {
        NsType::DIR => FileType::Directory,
        NsType::LNK => FileType::Symlink,
        NsType::BLK => FileType::BlockDevice,
        NsType::CHR => FileType::CharDevice,
        NsType::SOCK => FileType::Socket,
        NsType::FIFO => FileType::NamedPipe,
        _ => FileType::RegularFile,
    }
}

/// `fattr3` as the kernel's attributes, with the node id in place of the fileid.
pub fn file_attr(n: &Node) -> FileAttr {
    let a: &Attr = &n.attr;
    FileAttr {
        ino: INodeNo(n.ino),
        size: a.size,
        blocks: a.used.div_ceil(512),
        atime: system_time(a.atime),
        mtime: system_time(a.mtime),
        ctime: system_time(a.ctime),
        crtime: system_time(a.ctime),
        kind: file_type(a.ftype),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: libc::makedev(a.rdev.major, a.rdev.minor) as u32,
        // Tools size their buffers by st_blksize (cp: max(128 KiB, blksize)); 1 MiB makes
        // them write in whole WRITEs.
        blksize: TRANSFER_BYTES_MAX,
        flags: 0,
    }
}
