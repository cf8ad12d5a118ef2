//! The file system as the commands (and next the FUSE mount) see it, whatever the NFS version:
//! [`Namespace`], beside [`crate::FileProtocol`] (which is only what [`File`] needs to move data).
//!
//! ```text
//!   cli: cat ls stat cp mkdir rm mv        (fuse: lookup getattr readdir create open ...)
//!            │ Arc<dyn Namespace>
//!   connect(url) ── version=3 ──────────────▶ Client (v3: MOUNT, then NFS3 procedures)
//!            ├───── version=4 / 4.1 / 4.2 ──▶ v4::Client (a SEQUENCE-led COMPOUND per call)
//!            └───── no version: 4.2, 4.1, then 3 (as the Linux mount does; the v4 probe
//!                    gives up after V4_PROBE_TIMEOUT on a silent server)
//!   open / create ──▶ OpenFile: File<Client> or File<v4::Client>, the same reader and writer
//! ```
//!
//! # What is neutral
//! * Handles are [`Handle`]: the bytes of an NFSv3 or NFSv4 file handle, tagged with their
//!   version so that one cannot be sent to the other's server. Calls are by parent handle and
//!   name (LOOKUP, CREATE, REMOVE, RENAME), so a FUSE inode maps to one handle.
//! * Attributes are the v3 path's [`Fattr3`]: NFSv4's `nfs_ftype4` numbers the common types as
//!   `ftype3` does (RFC 8881 §3.3.13, RFC 1813 §2.5); its owner strings become numbers when they
//!   are numbers (`"1000"` or `"1000@domain"`), else [`NOBODY_ID`], as the Linux client shows an
//!   owner it cannot map. Times are clamped into `nfstime3`'s unsigned 32-bit seconds.
//! * Errors are [`Error`]: the version's own error, so messages keep the status name the server
//!   sent (`NFS4ERR_NOENT`), and [`Error::status`] as an `nfsstat3`: the two lists give the same
//!   number to every status a command tests for (NOENT 2, EXIST 17, NOTDIR 20, ISDIR 21, NOTEMPTY
//!   66, NOTSUPP 10004; RFC 8881 §15.1).
//! * Setting attributes takes [`Sattr3`] (mode, owner, size, times), mapped into `fattr4` with
//!   `time_access_set` / `time_modify_set` and numeric owner strings for v4.
//!
//! # Open state
//! NFSv3 has none: [`Namespace::open`] is a GETATTR-free wrap of the handle. NFSv4 reads and
//! writes under an open stateid, so `open` is OPEN with CLAIM_FH (RFC 8881 §18.16.3: a 4.1 open
//! by handle, which is what a mount has) and `create` is OPEN with CREATE in the directory;
//! [`OpenFile::close`] sends the CLOSE. Callers must close what they open.
//!
//! # Directory listings
//! [`Namespace::read_dir_page`] returns one reply's entries and advances a [`Cursor`] (cookie
//! and cookie verifier, what FUSE's readdir offsets resume from). Entries carry a handle and
//! attributes when the server sends them (READDIRPLUS; READDIR with the `filehandle`
//! attribute), so a walker needs no LOOKUP per entry. [`DirStream`] is the loop over it.
//!
//! # Futures
//! The trait is used as `Arc<dyn Namespace>` (one command may hold a v3 and a v4 server at
//! once, as `cp` between them does), so its methods return boxed futures ([`Fut`]); a call is a
//! round trip, so the allocation is noise.

use crate::client::{components, Client, ClientOptions};
use crate::error::NfsError;
use crate::file::{File, FileReader, FileWriter, ReadToError};
use crate::stats::{ClientStats, ReadStats};
use crate::transport::TransportStats;
use crate::url::{NfsUrl, NfsVersion, Proto};
use crate::v4;
use bytes::Bytes;
use sluice_xdr::nfs3::{Fattr3, Ftype3, NfsFh3, Nfsstat3, Sattr3};
use sluice_xdr::nfs4::{NfsFh4, Nfsstat4};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::io::AsyncWrite;

/// A namespace call in flight.
pub type Fut<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// The owner shown for an NFSv4 owner string that is not a number (the usual "nobody").
pub const NOBODY_ID: u32 = 65534;

/// Most entries [`DirStream::collect`] gathers: a million names with attributes is ~200 MiB,
/// a bound on what a broken or hostile server can make a listing hold.
pub const DIR_ENTRIES_MAX: usize = 1_000_000;

/// The protocol version a [`Namespace`] speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtoVersion {
    V3,
    V4_1,
    V4_2,
}

impl fmt::Display for ProtoVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProtoVersion::V3 => "3",
            ProtoVersion::V4_1 => "4.1",
            ProtoVersion::V4_2 => "4.2",
        })
    }
}

/// A file handle of either version (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Handle {
    V3(NfsFh3),
    V4(NfsFh4),
}

impl Handle {
    /// The handle's bytes as the server made them.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Handle::V3(h) => &h.0,
            Handle::V4(h) => &h.0,
        }
    }
}

/// Why a namespace call failed: the version's own error (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    V3(NfsError),
    V4(v4::Error),
}

impl Error {
    /// The NFS status the server (or the client, for a condition it found itself) gave, as an
    /// `nfsstat3` (see the module docs).
    pub fn status(&self) -> Option<Nfsstat3> {
        match self {
            Error::V3(e) => e.status(),
            Error::V4(e) => e.status().map(|s| Nfsstat3(s.0)),
        }
    }

    /// A status the client found itself (a path component that is not a directory, say).
    pub fn local(status: Nfsstat3) -> Error {
        Error::V3(NfsError::local(status))
    }

    /// Anything else, in words.
    pub fn other(message: impl Into<String>) -> Error {
        Error::V3(NfsError::Other(message.into()))
    }

    fn wrong_handle() -> Error {
        Error::other("a file handle of another NFS version")
    }
}

/// As the v3 client words a status, "no such file or directory (NFS4ERR_NOENT)", for every
/// status the two lists share; the others as the v4 client says them ("EXCHANGE_ID failed:
/// NFS4ERR_MINOR_VERS_MISMATCH").
impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::V3(e) => e.fmt(f),
            Error::V4(v4::Error::Status { status, .. })
                if Nfsstat3(status.0).describe() != Nfsstat3(u32::MAX).describe() =>
            {
                write!(f, "{} ({})", Nfsstat3(status.0).describe(), status.name())
            }
            Error::V4(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {}

impl From<NfsError> for Error {
    fn from(e: NfsError) -> Self {
        Error::V3(e)
    }
}

impl From<v4::Error> for Error {
    fn from(e: v4::Error) -> Self {
        Error::V4(e)
    }
}

/// One directory entry ("." and ".." are left out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    /// Where a listing resumes after this entry.
    pub cookie: u64,
    pub fileid: u64,
    /// The entry's handle and attributes, when the server sent them with the listing.
    pub node: Option<(Handle, Fattr3)>,
}

/// Where a directory listing stands (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cursor {
    pub cookie: u64,
    pub verf: [u8; 8],
    /// The last reply carried EOF.
    pub eof: bool,
    /// NFSv3 only: the server said NOTSUPP to READDIRPLUS, so plain READDIR from now on.
    pub plain: bool,
}

/// How [`Namespace::create`] treats a name that exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    /// Create, or truncate what is there (`open(O_CREAT|O_TRUNC)`): UNCHECKED with size 0.
    Truncate,
    /// Create, or open what is there as it is (`open(O_CREAT)`): UNCHECKED without a size.
    Unchecked,
    /// Fail with EXIST (GUARDED); attributes are set by the CREATE itself.
    Guarded,
    /// Fail with EXIST, and safe to resend (EXCLUSIVE with a verifier; EXCLUSIVE4_1 in v4).
    Exclusive,
}

/// What [`Namespace::mknod`] makes (regular files come from [`Namespace::create`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecialKind {
    Fifo,
    Socket,
    Char { major: u32, minor: u32 },
    Block { major: u32, minor: u32 },
}

/// The file system's space and file counts (v3 FSSTAT; v4 the `space_*` and `files_*`
/// attributes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FsStat {
    pub total_bytes: u64,
    pub free_bytes: u64,
    /// Free to the caller (quotas, reserved blocks).
    pub avail_bytes: u64,
    pub total_files: u64,
    pub free_files: u64,
    pub avail_files: u64,
}

/// A file system reached over NFS, whatever the version. See the module docs.
pub trait Namespace: Send + Sync + 'static {
    /// The version negotiated.
    fn version(&self) -> ProtoVersion;
    /// The URL this namespace was connected with.
    fn url(&self) -> &NfsUrl;
    /// The server path [`Namespace::root`] stands for: the export (v3), "/" (v4's pseudo root).
    fn export(&self) -> &str;
    fn root(&self) -> Handle;
    /// Largest READ and WRITE.
    fn rsize(&self) -> u32;
    fn wsize(&self) -> u32;
    /// Calls that may be on the wire at once, over all connections.
    fn slots(&self) -> usize;

    fn getattr<'a>(&'a self, fh: &'a Handle) -> Fut<'a, Fattr3>;
    fn lookup<'a>(&'a self, dir: &'a Handle, name: &'a str) -> Fut<'a, (Handle, Fattr3)>;
    /// `path` relative to [`Namespace::root`] ("/" or "" is the root), component by component;
    /// symbolic links are not followed.
    fn lookup_path<'a>(&'a self, path: &'a str) -> Fut<'a, (Handle, Fattr3)> {
        Box::pin(async move {
            let mut at = (self.root(), None);
            for name in components(path) {
                let (fh, attr) = self.lookup(&at.0, name).await?;
                at = (fh, Some(attr));
            }
            match at {
                (fh, Some(attr)) => Ok((fh, attr)),
                (fh, None) => {
                    let attr = self.getattr(&fh).await?;
                    Ok((fh, attr))
                }
            }
        })
    }
    /// One reply's entries from `cursor` on (possibly none, when a reply held only "." and
    /// ".."); advances `cursor`, and sets its `eof` after the last reply.
    fn read_dir_page<'a>(&'a self, dir: &'a Handle, cursor: &'a mut Cursor) -> Fut<'a, Vec<Entry>>;

    /// Creates `name` in `dir` with `mode`, open for writing.
    fn create<'a>(
        &'a self,
        dir: &'a Handle,
        name: &'a str,
        mode: u32,
        how: CreateMode,
    ) -> Fut<'a, OpenFile>;
    /// Opens the file `fh` (attributes `attr`, from a lookup) for reading, or for reading and
    /// writing.
    fn open<'a>(&'a self, fh: &'a Handle, attr: Fattr3, write: bool) -> Fut<'a, OpenFile>;
    /// Opens the file at `path` (relative to [`Namespace::root`]) for reading: a lookup, then
    /// [`Namespace::open`]. NFSv4 does both in one COMPOUND, one round trip fewer before the
    /// first READ.
    fn open_path<'a>(&'a self, path: &'a str) -> Fut<'a, OpenFile> {
        Box::pin(async move {
            let (fh, attr) = self.lookup_path(path).await?;
            self.open(&fh, attr, false).await
        })
    }
    fn mkdir<'a>(&'a self, dir: &'a Handle, name: &'a str, mode: u32) -> Fut<'a, (Handle, Fattr3)>;
    fn symlink<'a>(&'a self, dir: &'a Handle, name: &'a str, target: &'a str) -> Fut<'a, ()>;
    fn readlink<'a>(&'a self, fh: &'a Handle) -> Fut<'a, String>;
    /// A hard link to `fh` named `name` in `dir`.
    fn link<'a>(&'a self, fh: &'a Handle, dir: &'a Handle, name: &'a str) -> Fut<'a, ()>;
    fn remove<'a>(&'a self, dir: &'a Handle, name: &'a str) -> Fut<'a, ()>;
    fn rmdir<'a>(&'a self, dir: &'a Handle, name: &'a str) -> Fut<'a, ()>;
    fn rename<'a>(
        &'a self,
        from_dir: &'a Handle,
        from_name: &'a str,
        to_dir: &'a Handle,
        to_name: &'a str,
    ) -> Fut<'a, ()>;
    /// Sets mode, owner, size and times (what is `Some` / not `DontChange`).
    fn setattr<'a>(&'a self, fh: &'a Handle, attrs: &'a Sattr3) -> Fut<'a, ()>;
    /// [`Namespace::setattr`] and the attributes after it, in the same round trip where the
    /// version allows (v3: SETATTR's post-op attributes; v4: GETATTR in the COMPOUND).
    fn setattr_attrs<'a>(&'a self, fh: &'a Handle, attrs: &'a Sattr3) -> Fut<'a, Fattr3> {
        Box::pin(async move {
            self.setattr(fh, attrs).await?;
            self.getattr(fh).await
        })
    }
    /// A FIFO, socket or device node (v3 MKNOD, v4 CREATE); NOTSUPP where the version or
    /// server has none.
    fn mknod<'a>(
        &'a self,
        _dir: &'a Handle,
        _name: &'a str,
        _kind: SpecialKind,
        _mode: u32,
    ) -> Fut<'a, (Handle, Fattr3)> {
        Box::pin(async { Err(Error::local(Nfsstat3::NOTSUPP)) })
    }
    /// Space and files of the file system holding `fh`.
    fn statfs<'a>(&'a self, _fh: &'a Handle) -> Fut<'a, FsStat> {
        Box::pin(async { Err(Error::local(Nfsstat3::NOTSUPP)) })
    }

    /// Per-procedure (v3) or per-op (v4) statistics.
    fn stats(&self) -> ClientStats;
    fn read_stats(&self) -> ReadStats;
    fn transport_stats(&self) -> TransportStats;
    fn is_udp(&self) -> bool;
    /// Why this version was chosen over a higher one, when [`connect`] fell back (v3 after
    /// an NFSv4 probe that failed or went unanswered).
    fn version_note(&self) -> Option<String> {
        None
    }
    /// Connections to the NFS service now, and how the automatic `nconnect` came to that
    /// number (`None` when the count was fixed).
    fn connections(&self) -> (usize, Option<String>) {
        (1, None)
    }
    /// Ends what the server holds for this client (v4: the session and client id).
    fn shutdown(&self) -> Fut<'_, ()>;
}

impl dyn Namespace {
    /// The directory holding `path` (relative to the root) and the last component's name.
    pub async fn lookup_parent(&self, path: &str) -> Result<(Handle, String), Error> {
        let parts: Vec<&str> = components(path).collect();
        let Some((name, dirs)) = parts.split_last() else {
            return Err(Error::other("the export root has no parent"));
        };
        let (dir, attr) = self.lookup_path(&dirs.join("/")).await?;
        if attr.ftype != Ftype3::DIR {
            return Err(Error::local(Nfsstat3::NOTDIR));
        }
        Ok((dir, name.to_string()))
    }

    /// Every entry of `dir`, in the server's order (at most [`DIR_ENTRIES_MAX`]).
    pub async fn read_dir(&self, dir: &Handle) -> Result<Vec<Entry>, Error> {
        let mut pages = DirStream::new(dir.clone());
        let mut out = Vec::new();
        while let Some(page) = pages.next_page(self).await? {
            out.extend(page);
            if out.len() > DIR_ENTRIES_MAX {
                return Err(Error::other(format!(
                    "more than {DIR_ENTRIES_MAX} directory entries"
                )));
            }
        }
        Ok(out)
    }

    /// The handle and attributes of `e`, from the listing or by a LOOKUP.
    pub async fn resolve_entry(&self, dir: &Handle, e: &Entry) -> Result<(Handle, Fattr3), Error> {
        match &e.node {
            Some(n) => Ok(n.clone()),
            None => self.lookup(dir, &e.name).await,
        }
    }
}

/// A directory read one reply at a time: a tree walk starts on the first entries while the
/// rest of a large directory is on its way, and holds one reply's entries.
pub struct DirStream {
    dir: Handle,
    cursor: Cursor,
}

impl DirStream {
    pub fn new(dir: Handle) -> DirStream {
        DirStream {
            dir,
            cursor: Cursor::default(),
        }
    }

    /// The next reply's entries, or `None` after the one that carried EOF.
    pub async fn next_page(&mut self, ns: &dyn Namespace) -> Result<Option<Vec<Entry>>, Error> {
        if self.cursor.eof {
            return Ok(None);
        }
        let before = self.cursor.cookie;
        let page = ns.read_dir_page(&self.dir, &mut self.cursor).await?;
        // An empty reply without EOF would make the walk loop forever.
        if page.is_empty() && !self.cursor.eof && self.cursor.cookie == before {
            return Err(Error::other(
                "the server returned an empty directory reply before the end",
            ));
        }
        Ok(Some(page))
    }
}

/// A file open for reading (and, if asked, writing) through [`File`]'s reader and writer.
/// Clones share the open (its stateid) and the read cache; close once.
#[derive(Clone)]
pub enum OpenFile {
    V3(File<Client>),
    V4(File<v4::Client>),
}

impl OpenFile {
    /// The size when opened (or as the file layer last saw it).
    pub fn size(&self) -> u64 {
        match self {
            OpenFile::V3(f) => f.size(),
            OpenFile::V4(f) => f.size(),
        }
    }

    pub fn handle(&self) -> Handle {
        match self {
            OpenFile::V3(f) => Handle::V3(f.fh().clone()),
            OpenFile::V4(f) => Handle::V4(f.fh().fh.clone()),
        }
    }

    /// The attributes when opened (or as the file layer last saw them).
    pub fn attr(&self) -> Fattr3 {
        match self {
            OpenFile::V3(f) => *f.attr(),
            OpenFile::V4(f) => f.attr().to_fattr3(),
        }
    }

    /// Positional read through the file's readahead (see [`File::read_at`]).
    pub async fn read_at(&self, offset: u64, len: u64) -> Result<Vec<Bytes>, Error> {
        match self {
            OpenFile::V3(f) => Ok(f.read_at(offset, len).await?),
            OpenFile::V4(f) => Ok(f.read_at(offset, len).await?),
        }
    }

    /// Attributes fetched elsewhere (see [`File::observe`]): the read cache is dropped if
    /// size or mtime changed. NFSv4's change attribute is not in [`Fattr3`]; it is carried
    /// over when size and mtime are the same and bumped when they differ, so the test is the
    /// one NFSv3 makes.
    pub fn observe(&mut self, attr: Fattr3) {
        match self {
            OpenFile::V3(f) => f.observe(attr),
            OpenFile::V4(f) => {
                let old = f.attr().clone();
                let mtime = sluice_xdr::nfs4::Nfstime4 {
                    seconds: i64::from(attr.mtime.seconds),
                    nseconds: attr.mtime.nseconds,
                };
                let same = old.size == attr.size
                    && old.mtime.seconds.clamp(0, i64::from(u32::MAX)) == mtime.seconds
                    && old.mtime.nseconds == mtime.nseconds;
                let change = if same {
                    old.change
                } else {
                    old.change.wrapping_add(1)
                };
                let to_time = |t: sluice_xdr::nfs3::Nfstime3| sluice_xdr::nfs4::Nfstime4 {
                    seconds: i64::from(t.seconds),
                    nseconds: t.nseconds,
                };
                f.observe(v4::Attr {
                    change,
                    size: attr.size,
                    mode: attr.mode,
                    numlinks: attr.nlink,
                    space_used: attr.used,
                    atime: to_time(attr.atime),
                    mtime: if same { old.mtime.clone() } else { mtime },
                    ctime: to_time(attr.ctime),
                    ..old
                });
            }
        }
    }

    /// Drops what was read ahead (see [`File::invalidate`]).
    pub fn invalidate(&self) {
        match self {
            OpenFile::V3(f) => f.invalidate(),
            OpenFile::V4(f) => f.invalidate(),
        }
    }

    /// Takes a byte-range lock for `owner` (`length` `u64::MAX`: to the end of the file):
    /// `Ok(None)` when granted, `Ok(Some(conflict))` when another owner holds one in the way.
    /// NFSv4 only (LOCK); NFSv3 has no locking protocol in sluice (no NLM): NOTSUPP.
    pub async fn lock(
        &self,
        owner: &[u8],
        write: bool,
        offset: u64,
        length: u64,
    ) -> Result<Option<v4::LockConflict>, Error> {
        match self {
            OpenFile::V3(_) => Err(Error::local(Nfsstat3::NOTSUPP)),
            OpenFile::V4(f) => Ok(f
                .client()
                .lock(f.fh(), owner, write, offset, length)
                .await?),
        }
    }

    /// The lock another owner holds that would keep `owner` from this one (LOCKT).
    pub async fn test_lock(
        &self,
        owner: &[u8],
        write: bool,
        offset: u64,
        length: u64,
    ) -> Result<Option<v4::LockConflict>, Error> {
        match self {
            OpenFile::V3(_) => Err(Error::local(Nfsstat3::NOTSUPP)),
            OpenFile::V4(f) => Ok(f
                .client()
                .test_lock(f.fh(), owner, write, offset, length)
                .await?),
        }
    }

    /// Releases `owner`'s locks in the range (LOCKU).
    pub async fn unlock(&self, owner: &[u8], offset: u64, length: u64) -> Result<(), Error> {
        match self {
            OpenFile::V3(_) => Err(Error::local(Nfsstat3::NOTSUPP)),
            OpenFile::V4(f) => Ok(f.client().unlock(f.fh(), owner, offset, length).await?),
        }
    }

    /// Streams the whole file into `sink` (see [`File::read_to`]); returns the bytes copied.
    pub async fn read_to<W: AsyncWrite + Unpin + ?Sized>(
        &self,
        sink: &mut W,
        progress: impl FnMut(u64),
    ) -> Result<u64, ReadToError<Error>> {
        match self {
            OpenFile::V3(f) => f.read_to(sink, progress).await.map_err(neutral),
            OpenFile::V4(f) => f.read_to(sink, progress).await.map_err(neutral),
        }
    }

    /// The whole file.
    pub async fn read_all(&self) -> Result<Vec<u8>, Error> {
        match self {
            OpenFile::V3(f) => Ok(f.read_all().await?),
            OpenFile::V4(f) => Ok(f.read_all().await?),
        }
    }

    pub fn reader(&self) -> Reader {
        match self {
            OpenFile::V3(f) => Reader::V3(f.reader()),
            OpenFile::V4(f) => Reader::V4(f.reader()),
        }
    }

    /// A writer from offset 0.
    pub fn writer(&self) -> Writer {
        match self {
            OpenFile::V3(f) => Writer::V3(f.writer()),
            OpenFile::V4(f) => Writer::V4(f.writer()),
        }
    }

    /// Sets attributes of the open file (v4: under its open stateid, as a size change needs).
    pub async fn set_attr(&self, attrs: &Sattr3) -> Result<(), Error> {
        match self {
            OpenFile::V3(f) => Ok(f.set_attr(*attrs).await?),
            OpenFile::V4(f) => Ok(f.client().setattr_open(f.fh(), attrs).await?),
        }
    }

    /// [`OpenFile::set_attr`] and the attributes after it (see [`Namespace::setattr_attrs`]).
    pub async fn set_attr_attrs(&self, attrs: &Sattr3) -> Result<Fattr3, Error> {
        match self {
            OpenFile::V3(f) => {
                let r = f.client().setattr(f.fh(), *attrs, None).await?;
                f.client().attr_or_getattr(f.fh(), r.obj_wcc.after).await
            }
            OpenFile::V4(f) => Ok(f
                .client()
                .setattr_get(&f.fh().fh, f.fh().stateid, attrs)
                .await?),
        }
    }

    /// Ends the open (v4: CLOSE, and DELEGRETURN of a delegation it came with).
    pub async fn close(&self) -> Result<(), Error> {
        match self {
            OpenFile::V3(_) => Ok(()),
            OpenFile::V4(f) => Ok(f.client().close(f.fh()).await?),
        }
    }
}

/// A read-to failure with the version's error made neutral.
fn neutral<E: Into<Error>>(e: ReadToError<E>) -> ReadToError<Error> {
    match e {
        ReadToError::Nfs(e) => ReadToError::Nfs(e.into()),
        ReadToError::Io(e) => ReadToError::Io(e),
    }
}

/// [`OpenFile::reader`]: sequential reads through the readahead.
pub enum Reader {
    V3(FileReader<Client>),
    V4(FileReader<v4::Client>),
}

impl Reader {
    /// The next chunks of data, or `None` at the end.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<Bytes>>, Error> {
        match self {
            Reader::V3(r) => Ok(r.next_chunk().await?),
            Reader::V4(r) => Ok(r.next_chunk().await?),
        }
    }
}

/// [`OpenFile::writer`]: write-behind with UNSTABLE WRITEs and a COMMIT at the end.
pub enum Writer {
    V3(FileWriter<Client>),
    V4(FileWriter<v4::Client>),
}

impl Writer {
    pub async fn write(&mut self, data: &[u8]) -> Result<(), Error> {
        match self {
            Writer::V3(w) => Ok(w.write(data).await?),
            Writer::V4(w) => Ok(w.write(data).await?),
        }
    }

    pub async fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<(), Error> {
        match self {
            Writer::V3(w) => Ok(w.write_at(offset, data).await?),
            Writer::V4(w) => Ok(w.write_at(offset, data).await?),
        }
    }

    /// Data buffered or WRITEs unanswered (see [`FileWriter::is_dirty`]).
    pub fn is_dirty(&self) -> bool {
        match self {
            Writer::V3(w) => w.is_dirty(),
            Writer::V4(w) => w.is_dirty(),
        }
    }

    /// Written but not yet committed (see [`FileWriter::is_uncommitted`]).
    pub fn is_uncommitted(&self) -> bool {
        match self {
            Writer::V3(w) => w.is_uncommitted(),
            Writer::V4(w) => w.is_uncommitted(),
        }
    }

    /// Sends what is buffered and waits for every WRITE, without COMMIT.
    pub async fn write_out(&mut self) -> Result<(), Error> {
        match self {
            Writer::V3(w) => Ok(w.write_out().await?),
            Writer::V4(w) => Ok(w.write_out().await?),
        }
    }

    /// Everything written so far on stable storage.
    pub async fn sync(&mut self) -> Result<(), Error> {
        match self {
            Writer::V3(w) => Ok(w.sync().await?),
            Writer::V4(w) => Ok(w.sync().await?),
        }
    }

    /// Sends and commits the rest; returns the bytes written.
    pub async fn finish(self) -> Result<u64, Error> {
        match self {
            Writer::V3(w) => Ok(w.finish().await?),
            Writer::V4(w) => Ok(w.finish().await?),
        }
    }
}

/// How long a URL without a version waits for the NFSv4 probe (TCP connect, NULL, then
/// EXCHANGE_ID) before it tries NFSv3 instead: 5 s.
///
/// A server that serves no NFSv4 normally says so at once (connection refused, PROG_MISMATCH,
/// MINOR_VERS_MISMATCH; see [`falls_back`]), but some stay silent: a firewall that drops the
/// port, an old server that ignores calls for a version it does not serve, a proxy that accepts
/// and never forwards. Without a bound the probe would wait for the RPC layer's major timeout
/// (a minute, and forever with hard mounts). A live server answers NULL within a round trip
/// plus a retransmission or two (the RPC layer's first timeout is under a second), so 5 s
/// leaves room for a loaded server or a slow WAN and still reads as "a short wait, then v3"
/// to a person at a prompt. Only the probe is bounded: once EXCHANGE_ID answered, the server
/// speaks v4 and session setup runs under the ordinary RPC rules.
pub const V4_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Connects to the server of `url` with the version it asks for; with none, NFSv4.2, then 4.1,
/// then 3, as the Linux mount does (see [`choose`]). The v4 attempt of a URL without a version
/// gives up after [`ClientOptions::v4_probe_timeout`]; why v3 was taken then is logged at
/// debug level and shown by [`Namespace::version_note`] (the commands' `--stats`).
pub async fn connect(url: &NfsUrl, options: &ClientOptions) -> Result<Arc<dyn Namespace>, Error> {
    match choose(url, options) {
        Choice::V3 => Ok(Arc::new(Client::connect(url, options.clone()).await?)),
        Choice::V4(minor) => Ok(Arc::new(connect_v4(url, options, minor, None).await?)),
        Choice::Any => {
            let probe = Some(options.v4_probe_timeout);
            match connect_v4(url, options, v4::Minor::Highest, probe).await {
                Ok(c) => Ok(Arc::new(c)),
                Err(e) if falls_back(&e) => {
                    tracing::debug!("{url}: no NFSv4 ({e}); trying NFSv3");
                    let c = Client::connect(url, options.clone()).await?;
                    c.set_version_note(format!("NFSv4 not used: {e}"));
                    Ok(Arc::new(c))
                }
                Err(e) => Err(e.into()),
            }
        }
    }
}

async fn connect_v4(
    url: &NfsUrl,
    options: &ClientOptions,
    minor: v4::Minor,
    probe_timeout: Option<std::time::Duration>,
) -> Result<v4::Client, v4::Error> {
    let v4 = v4::V4Options {
        probe_timeout,
        owner: options.v4_owner.clone(),
    };
    v4::Client::connect(url, options, minor, v4).await
}

/// What [`connect`] tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    V3,
    V4(v4::Minor),
    /// 4.2, 4.1, then 3.
    Any,
}

/// The versions a URL allows. Without `version=`, UDP (`proto=udp`, or the option when the URL
/// names no transport) picks v3 at once: NFSv4 needs a transport with congestion control (RFC
/// 8881 §2.9.1). A `mountport` does not: like the Linux mount, v4 is tried first and the MOUNT
/// port serves the v3 fallback; `version=3` asks for v3 alone.
pub fn choose(url: &NfsUrl, options: &ClientOptions) -> Choice {
    match url.version {
        Some(NfsVersion::V3) => Choice::V3,
        Some(NfsVersion::V4) => Choice::V4(v4::Minor::Highest),
        Some(NfsVersion::V4_1) => Choice::V4(v4::Minor::V1),
        Some(NfsVersion::V4_2) => Choice::V4(v4::Minor::V2),
        None => {
            let udp = match url.proto {
                Some(p) => p == Proto::Udp,
                None => options.udp,
            };
            if udp {
                Choice::V3
            } else {
                Choice::Any
            }
        }
    }
}

/// True when a v4 attempt says the server has no NFSv4 there, so v3 is worth trying: the
/// connection was refused, NULL got PROG_MISMATCH or PROG_UNAVAIL (both
/// [`v4::Error::Connect`]), or no minor version was taken (NFS4ERR_MINOR_VERS_MISMATCH). Each
/// is an answer, not a silence, so falling back costs a round trip or two, not a timeout. A
/// probe that got no answer in time is also [`v4::Error::Connect`] (see [`V4_PROBE_TIMEOUT`]).
pub fn falls_back(e: &v4::Error) -> bool {
    match e {
        v4::Error::Connect(_) => true,
        v4::Error::Status { status, .. } => *status == Nfsstat4::MINOR_VERS_MISMATCH,
        _ => false,
    }
}

// --- NFSv3 -------------------------------------------------------------------------------------

fn fh3(h: &Handle) -> Result<&NfsFh3, Error> {
    match h {
        Handle::V3(h) => Ok(h),
        Handle::V4(_) => Err(Error::wrong_handle()),
    }
}

impl Client {
    /// The attributes of `fh`, from `attr` when a reply carried them, else a GETATTR.
    async fn attr_or_getattr(&self, fh: &NfsFh3, attr: Option<Fattr3>) -> Result<Fattr3, Error> {
        match attr {
            Some(a) => Ok(a),
            None => Ok(self.getattr(fh).await?.obj_attributes),
        }
    }

    async fn page3(&self, dir: &NfsFh3, cursor: &mut Cursor) -> Result<Vec<Entry>, Error> {
        if !cursor.plain {
            // dircount bounds the names, maxcount the whole reply with attributes and handles;
            // a 4:1 ratio like Linux's leaves room for the ~200 bytes of attributes per entry.
            let dircount = self.readdir_bytes();
            let maxcount = dircount.saturating_mul(4).min(1 << 20);
            match self
                .readdirplus(dir, cursor.cookie, cursor.verf, dircount, maxcount)
                .await
            {
                Ok(res) => {
                    cursor.verf = res.cookieverf;
                    cursor.eof = res.eof;
                    let mut out = Vec::with_capacity(res.entries.len());
                    for e in res.entries {
                        cursor.cookie = e.cookie;
                        if is_dot(&e.name) {
                            continue;
                        }
                        out.push(Entry {
                            name: String::from_utf8_lossy(&e.name).into_owned(),
                            cookie: e.cookie,
                            fileid: e.fileid,
                            node: match (e.name_handle, e.name_attributes) {
                                (Some(h), Some(a)) => Some((Handle::V3(h), a)),
                                _ => None,
                            },
                        });
                    }
                    return Ok(out);
                }
                Err(e) if e.status() == Some(Nfsstat3::NOTSUPP) && cursor.cookie == 0 => {
                    cursor.plain = true;
                }
                Err(e) => return Err(e.into()),
            }
        }
        let res = self
            .readdir(dir, cursor.cookie, cursor.verf, self.readdir_bytes())
            .await?;
        cursor.verf = res.cookieverf;
        cursor.eof = res.eof;
        let mut out = Vec::with_capacity(res.entries.len());
        for e in res.entries {
            cursor.cookie = e.cookie;
            if is_dot(&e.name) {
                continue;
            }
            out.push(Entry {
                name: String::from_utf8_lossy(&e.name).into_owned(),
                cookie: e.cookie,
                fileid: e.fileid,
                node: None,
            });
        }
        Ok(out)
    }
}

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

impl Namespace for Client {
    fn version(&self) -> ProtoVersion {
        ProtoVersion::V3
    }
    fn url(&self) -> &NfsUrl {
        Client::url(self)
    }
    fn export(&self) -> &str {
        Client::export(self)
    }
    fn root(&self) -> Handle {
        Handle::V3(Client::root(self).clone())
    }
    fn rsize(&self) -> u32 {
        Client::rsize(self)
    }
    fn wsize(&self) -> u32 {
        Client::wsize(self)
    }
    fn slots(&self) -> usize {
        let o = self.options();
        o.rpc.table.max_in_flight.saturating_mul(o.nconnect.max(1))
    }

    fn getattr<'a>(&'a self, fh: &'a Handle) -> Fut<'a, Fattr3> {
        Box::pin(async move { Ok(Client::getattr(self, fh3(fh)?).await?.obj_attributes) })
    }

    fn lookup<'a>(&'a self, dir: &'a Handle, name: &'a str) -> Fut<'a, (Handle, Fattr3)> {
        Box::pin(async move {
            let r = Client::lookup(self, fh3(dir)?, name).await?;
            let attr = self.attr_or_getattr(&r.object, r.obj_attributes).await?;
            Ok((Handle::V3(r.object), attr))
        })
    }

    fn read_dir_page<'a>(&'a self, dir: &'a Handle, cursor: &'a mut Cursor) -> Fut<'a, Vec<Entry>> {
        Box::pin(async move { self.page3(fh3(dir)?, cursor).await })
    }

    fn create<'a>(
        &'a self,
        dir: &'a Handle,
        name: &'a str,
        mode: u32,
        how: CreateMode,
    ) -> Fut<'a, OpenFile> {
        use sluice_xdr::nfs3::CreateHow;
        Box::pin(async move {
            let dir = fh3(dir)?;
            if how == CreateMode::Truncate {
                return Ok(OpenFile::V3(self.create_in(dir, name, mode).await?));
            }
            let attrs = Sattr3 {
                mode: Some(mode),
                ..Sattr3::default()
            };
            let how3 = match how {
                CreateMode::Guarded => CreateHow::Guarded(attrs),
                CreateMode::Unchecked => CreateHow::Unchecked(attrs),
                _ => CreateHow::Exclusive(rand::random()),
            };
            let res = Client::create(self, dir, name, how3).await?;
            let fh = match res.obj {
                Some(fh) => fh,
                None => Client::lookup(self, dir, name).await?.object,
            };
            let attr = if how == CreateMode::Exclusive {
                // EXCLUSIVE stored the verifier in the times: set the real attributes now
                // (RFC 1813 §3.3.8).
                let r = Client::setattr(self, &fh, attrs, None).await?;
                self.attr_or_getattr(&fh, r.obj_wcc.after).await?
            } else {
                self.attr_or_getattr(&fh, res.obj_attributes).await?
            };
            Ok(OpenFile::V3(File::new(self.clone(), fh, attr)))
        })
    }

    fn open<'a>(&'a self, fh: &'a Handle, attr: Fattr3, _write: bool) -> Fut<'a, OpenFile> {
        Box::pin(async move {
            if attr.ftype == Ftype3::DIR {
                return Err(Error::local(Nfsstat3::ISDIR));
            }
            Ok(OpenFile::V3(File::new(
                self.clone(),
                fh3(fh)?.clone(),
                attr,
            )))
        })
    }

    fn mkdir<'a>(&'a self, dir: &'a Handle, name: &'a str, mode: u32) -> Fut<'a, (Handle, Fattr3)> {
        Box::pin(async move {
            let dir = fh3(dir)?;
            let attrs = Sattr3 {
                mode: Some(mode),
                ..Sattr3::default()
            };
            let r = Client::mkdir(self, dir, name, attrs).await?;
            let fh = match r.obj {
                Some(h) => h,
                None => Client::lookup(self, dir, name).await?.object,
            };
            let attr = self.attr_or_getattr(&fh, r.obj_attributes).await?;
            Ok((Handle::V3(fh), attr))
        })
    }

    fn symlink<'a>(&'a self, dir: &'a Handle, name: &'a str, target: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            Client::symlink(self, fh3(dir)?, name, target, Sattr3::default()).await?;
            Ok(())
        })
    }

    fn readlink<'a>(&'a self, fh: &'a Handle) -> Fut<'a, String> {
        Box::pin(async move {
            let r = Client::readlink(self, fh3(fh)?).await?;
            Ok(String::from_utf8_lossy(&r.data).into_owned())
        })
    }

    fn link<'a>(&'a self, fh: &'a Handle, dir: &'a Handle, name: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            Client::link(self, fh3(fh)?, fh3(dir)?, name).await?;
            Ok(())
        })
    }

    fn remove<'a>(&'a self, dir: &'a Handle, name: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            Client::remove(self, fh3(dir)?, name).await?;
            Ok(())
        })
    }

    fn rmdir<'a>(&'a self, dir: &'a Handle, name: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            Client::rmdir(self, fh3(dir)?, name).await?;
            Ok(())
        })
    }

    fn rename<'a>(
        &'a self,
        from_dir: &'a Handle,
        from_name: &'a str,
        to_dir: &'a Handle,
        to_name: &'a str,
    ) -> Fut<'a, ()> {
        Box::pin(async move {
            Client::rename(self, fh3(from_dir)?, from_name, fh3(to_dir)?, to_name).await?;
            Ok(())
        })
    }

    fn setattr<'a>(&'a self, fh: &'a Handle, attrs: &'a Sattr3) -> Fut<'a, ()> {
        Box::pin(async move {
            Client::setattr(self, fh3(fh)?, *attrs, None).await?;
            Ok(())
        })
    }

    fn setattr_attrs<'a>(&'a self, fh: &'a Handle, attrs: &'a Sattr3) -> Fut<'a, Fattr3> {
        Box::pin(async move {
            let fh = fh3(fh)?;
            let r = Client::setattr(self, fh, *attrs, None).await?;
            self.attr_or_getattr(fh, r.obj_wcc.after).await
        })
    }

    fn mknod<'a>(
        &'a self,
        dir: &'a Handle,
        name: &'a str,
        kind: SpecialKind,
        mode: u32,
    ) -> Fut<'a, (Handle, Fattr3)> {
        use sluice_xdr::nfs3::{DeviceData3, MknodData, Specdata3};
        Box::pin(async move {
            let dir = fh3(dir)?;
            let attrs = Sattr3 {
                mode: Some(mode & 0o7777),
                ..Sattr3::default()
            };
            let dev = |major, minor| DeviceData3 {
                dev_attributes: attrs,
                spec: Specdata3 { major, minor },
            };
            let what = match kind {
                SpecialKind::Fifo => MknodData::Fifo(attrs),
                SpecialKind::Socket => MknodData::Sock(attrs),
                SpecialKind::Char { major, minor } => MknodData::Chr(dev(major, minor)),
                SpecialKind::Block { major, minor } => MknodData::Blk(dev(major, minor)),
            };
            let r = Client::mknod(self, dir, name, what).await?;
            let fh = match r.obj {
                Some(h) => h,
                None => Client::lookup(self, dir, name).await?.object,
            };
            let attr = self.attr_or_getattr(&fh, r.obj_attributes).await?;
            Ok((Handle::V3(fh), attr))
        })
    }

    fn statfs<'a>(&'a self, fh: &'a Handle) -> Fut<'a, FsStat> {
        Box::pin(async move {
            let s = Client::fsstat(self, fh3(fh)?).await?;
            Ok(FsStat {
                total_bytes: s.tbytes,
                free_bytes: s.fbytes,
                avail_bytes: s.abytes,
                total_files: s.tfiles,
                free_files: s.ffiles,
                avail_files: s.afiles,
            })
        })
    }

    fn stats(&self) -> ClientStats {
        Client::stats(self)
    }
    fn read_stats(&self) -> ReadStats {
        Client::read_stats(self)
    }
    fn transport_stats(&self) -> TransportStats {
        Client::transport_stats(self)
    }
    fn is_udp(&self) -> bool {
        Client::is_udp(self)
    }
    fn version_note(&self) -> Option<String> {
        Client::version_note(self).map(str::to_string)
    }
    fn connections(&self) -> (usize, Option<String>) {
        Client::connections(self)
    }
    fn shutdown(&self) -> Fut<'_, ()> {
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> NfsUrl {
        NfsUrl::parse(s).unwrap()
    }

    #[test]
    fn a_url_without_a_version_tries_v4_unless_it_asks_for_udp() {
        let o = ClientOptions::default();
        assert_eq!(choose(&url("nfs://h/x"), &o), Choice::Any);
        assert_eq!(choose(&url("nfs://h/x?nfsport=2049"), &o), Choice::Any);
        assert_eq!(
            choose(&url("nfs://h/x?nfsport=2049&mountport=2050"), &o),
            Choice::Any
        );
        assert_eq!(choose(&url("nfs://h/x?proto=udp"), &o), Choice::V3);
        let udp = ClientOptions {
            udp: true,
            ..ClientOptions::default()
        };
        assert_eq!(choose(&url("nfs://h/x"), &udp), Choice::V3);
        assert_eq!(choose(&url("nfs://h/x?proto=tcp"), &udp), Choice::Any);
    }

    #[test]
    fn an_explicit_version_is_the_only_one_tried() {
        let o = ClientOptions::default();
        assert_eq!(choose(&url("nfs://h/x?version=3"), &o), Choice::V3);
        assert_eq!(
            choose(&url("nfs://h/x?version=4.1&mountport=9"), &o),
            Choice::V4(v4::Minor::V1)
        );
        assert_eq!(
            choose(&url("nfs://h/x?version=4.2"), &o),
            Choice::V4(v4::Minor::V2)
        );
        assert_eq!(
            choose(&url("nfs://h/x?version=4"), &o),
            Choice::V4(v4::Minor::Highest)
        );
    }

    #[test]
    fn only_answers_that_say_no_nfsv4_fall_back() {
        use sluice_xdr::nfs4::ops::Opnum4;
        assert!(falls_back(&v4::Error::Connect("refused".into())));
        assert!(falls_back(&v4::Error::Status {
            op: Opnum4::EXCHANGE_ID,
            status: Nfsstat4::MINOR_VERS_MISMATCH,
        }));
        assert!(!falls_back(&v4::Error::Status {
            op: Opnum4::CREATE_SESSION,
            status: Nfsstat4::ACCESS,
        }));
        assert!(!falls_back(&v4::Error::Other("bad".into())));
    }

    /// A directory served as scripted pages: (entries, cookie after, eof). Only the listing
    /// is implemented.
    struct Pages(
        std::sync::Mutex<Vec<(Vec<&'static str>, u64, bool)>>,
        NfsUrl,
    );

    /// What the listing-only fake answers to everything but `read_dir`: the call a test did
    /// not script fails loudly with NOTSUPP instead of panicking.
    fn not_listing<'a, T: Send + 'a>() -> Fut<'a, T> {
        Box::pin(async { Err(Error::local(sluice_xdr::nfs3::Nfsstat3::NOTSUPP)) })
    }

    impl Namespace for Pages {
        fn read_dir_page<'a>(&'a self, _: &'a Handle, c: &'a mut Cursor) -> Fut<'a, Vec<Entry>> {
            let (names, cookie, eof) = self.0.lock().unwrap().remove(0);
            c.cookie = cookie;
            c.eof = eof;
            let entries = names
                .into_iter()
                .map(|n| Entry {
                    name: n.into(),
                    cookie,
                    fileid: 0,
                    node: None,
                })
                .collect();
            Box::pin(async move { Ok(entries) })
        }
        fn version(&self) -> ProtoVersion {
            ProtoVersion::V4_1
        }
        fn url(&self) -> &NfsUrl {
            &self.1
        }
        fn export(&self) -> &str {
            "/"
        }
        fn root(&self) -> Handle {
            Handle::V4(NfsFh4(Bytes::new()))
        }
        fn rsize(&self) -> u32 {
            4096
        }
        fn wsize(&self) -> u32 {
            4096
        }
        fn slots(&self) -> usize {
            1
        }
        fn getattr<'a>(&'a self, _: &'a Handle) -> Fut<'a, Fattr3> {
            not_listing()
        }
        fn lookup<'a>(&'a self, _: &'a Handle, _: &'a str) -> Fut<'a, (Handle, Fattr3)> {
            not_listing()
        }
        fn create<'a>(
            &'a self,
            _: &'a Handle,
            _: &'a str,
            _: u32,
            _: CreateMode,
        ) -> Fut<'a, OpenFile> {
            not_listing()
        }
        fn open<'a>(&'a self, _: &'a Handle, _: Fattr3, _: bool) -> Fut<'a, OpenFile> {
            not_listing()
        }
        fn mkdir<'a>(&'a self, _: &'a Handle, _: &'a str, _: u32) -> Fut<'a, (Handle, Fattr3)> {
            not_listing()
        }
        fn symlink<'a>(&'a self, _: &'a Handle, _: &'a str, _: &'a str) -> Fut<'a, ()> {
            not_listing()
        }
        fn readlink<'a>(&'a self, _: &'a Handle) -> Fut<'a, String> {
            not_listing()
        }
        fn link<'a>(&'a self, _: &'a Handle, _: &'a Handle, _: &'a str) -> Fut<'a, ()> {
            not_listing()
        }
        fn remove<'a>(&'a self, _: &'a Handle, _: &'a str) -> Fut<'a, ()> {
            not_listing()
        }
        fn rmdir<'a>(&'a self, _: &'a Handle, _: &'a str) -> Fut<'a, ()> {
            not_listing()
        }
        fn rename<'a>(
            &'a self,
            _: &'a Handle,
            _: &'a str,
            _: &'a Handle,
            _: &'a str,
        ) -> Fut<'a, ()> {
            not_listing()
        }
        fn setattr<'a>(&'a self, _: &'a Handle, _: &'a Sattr3) -> Fut<'a, ()> {
            not_listing()
        }
        fn stats(&self) -> ClientStats {
            ClientStats::default()
        }
        fn read_stats(&self) -> ReadStats {
            ReadStats::default()
        }
        fn transport_stats(&self) -> TransportStats {
            TransportStats::default()
        }
        fn is_udp(&self) -> bool {
            false
        }
        fn shutdown(&self) -> Fut<'_, ()> {
            Box::pin(async { Ok(()) })
        }
    }

    fn listing(pages: Vec<(Vec<&'static str>, u64, bool)>) -> Result<Vec<String>, Error> {
        let ns: Arc<dyn Namespace> = Arc::new(Pages(pages.into(), url("nfs://h/")));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let dir = ns.root();
        rt.block_on(ns.read_dir(&dir))
            .map(|v| v.into_iter().map(|e| e.name).collect())
    }

    #[test]
    fn a_listing_goes_on_past_a_page_of_only_dots_and_stops_at_eof() {
        // v3: a first reply of only "." and ".." is empty once they are left out, but moves on.
        let got = listing(vec![
            (vec![], 2, false),
            (vec!["a", "b"], 4, false),
            (vec!["c"], 5, true),
        ]);
        assert_eq!(got.unwrap(), ["a", "b", "c"]);
    }

    #[test]
    fn an_empty_page_that_does_not_move_on_is_an_error_not_a_loop() {
        let got = listing(vec![
            (vec!["a"], 1, false),
            (vec![], 1, false),
            (vec!["never"], 2, true),
        ]);
        assert!(got
            .unwrap_err()
            .to_string()
            .contains("empty directory reply"));
    }

    #[test]
    fn v4_statuses_read_as_the_same_v3_status() {
        use sluice_xdr::nfs4::ops::Opnum4;
        let e = |s| {
            Error::V4(v4::Error::Status {
                op: Opnum4::LOOKUP,
                status: s,
            })
        };
        assert_eq!(e(Nfsstat4::NOENT).status(), Some(Nfsstat3::NOENT));
        assert_eq!(e(Nfsstat4::EXIST).status(), Some(Nfsstat3::EXIST));
        assert_eq!(e(Nfsstat4::NOTDIR).status(), Some(Nfsstat3::NOTDIR));
        assert_eq!(e(Nfsstat4::NOTEMPTY).status(), Some(Nfsstat3::NOTEMPTY));
        assert_eq!(
            e(Nfsstat4::NOENT).to_string(),
            "no such file or directory (NFS4ERR_NOENT)"
        );
        assert_eq!(
            e(Nfsstat4::MINOR_VERS_MISMATCH).to_string(),
            "LOOKUP failed: NFS4ERR_MINOR_VERS_MISMATCH"
        );
    }
}
