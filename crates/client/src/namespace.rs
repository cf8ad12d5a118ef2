//! The file system as the commands and the FUSE mount see it, whatever the NFS version:
//! [`Namespace`], beside [`crate::FileProtocol`] (which is only what [`crate::File`] needs to
//! move data).
//!
//! ```text
//!   cli: cat ls stat cp mkdir rm mv        (fuse: lookup getattr readdir create open ...)
//!            │ Arc<dyn Namespace>
//!   crate::connect(url) ── version=3 ──▶ v3::Client (MOUNT, then NFS3 procedures)
//!            ├──────── version=4 / 4.1 / 4.2 ──▶ v4::Client (a SEQUENCE-led COMPOUND per call)
//!            └──────── no version: 4.2, 4.1, then 3 (as the Linux mount does)
//!   open / create ──▶ OpenFile (open.rs): one File over the version's open calls
//! ```
//!
//! # What is neutral
//! Everything the trait names comes from [`crate::neutral`]: [`Handle`], [`Attr`] (with the
//! NFSv4 change attribute and 64-bit times), [`SetAttr`], [`Status`] and [`Error`]. Calls are
//! by parent handle and name (LOOKUP, CREATE, REMOVE, RENAME), so a FUSE inode maps to one
//! handle. The version modules implement the trait: `v3/namespace.rs` over the v3 procedures,
//! `v4/namespace.rs` over COMPOUNDs; [`crate::connect`] picks one.
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

pub use crate::neutral::{
    Attr, Error, FileType, Handle, LockConflict, SetAttr, SetTime, Status, Time, NOBODY_ID,
};
pub use crate::open::{OpenFile, Reader, Writer};
pub use crate::options::V4_PROBE_TIMEOUT;
use crate::stats::{ClientStats, ReadStats};
use crate::transport::TransportStats;
use crate::url::{components, NfsUrl};
use std::fmt;
use std::future::Future;
use std::pin::Pin;

/// A namespace call in flight.
pub type Fut<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

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

/// One directory entry ("." and ".." are left out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    /// Where a listing resumes after this entry.
    pub cookie: u64,
    pub fileid: u64,
    /// The entry's handle and attributes, when the server sent them with the listing.
    pub node: Option<(Handle, Attr)>,
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

/// How [`Namespace::setxattr`] treats an existing attribute (`setxattr(2)`'s flags, RFC 8276
/// `setxattr_option4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrSet {
    /// Create or replace (no flag).
    Either,
    /// Only create: an existing one is EXIST (`XATTR_CREATE`).
    Create,
    /// Only replace: a missing one is NOXATTR (`XATTR_REPLACE`).
    Replace,
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

    fn getattr<'a>(&'a self, fh: &'a Handle) -> Fut<'a, Attr>;
    fn lookup<'a>(&'a self, dir: &'a Handle, name: &'a str) -> Fut<'a, (Handle, Attr)>;
    /// `path` relative to [`Namespace::root`] ("/" or "" is the root), component by component;
    /// symbolic links are not followed.
    fn lookup_path<'a>(&'a self, path: &'a str) -> Fut<'a, (Handle, Attr)> {
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
    /// [`Namespace::create`], and the directory's attributes after it where the same round
    /// trip brings them (NFSv3: CREATE's post-op `dir_wcc`; NFSv4: a GETATTR of the saved
    /// directory in the OPEN's COMPOUND), so that a cache of them stays valid without a
    /// GETATTR of its own. The default brings none.
    fn create_in_dir<'a>(
        &'a self,
        dir: &'a Handle,
        name: &'a str,
        mode: u32,
        how: CreateMode,
    ) -> Fut<'a, (OpenFile, Option<Attr>)> {
        Box::pin(async move { Ok((self.create(dir, name, mode, how).await?, None)) })
    }
    /// Opens the file `fh` (attributes `attr`, from a lookup) for reading, or for reading and
    /// writing.
    fn open<'a>(&'a self, fh: &'a Handle, attr: Attr, write: bool) -> Fut<'a, OpenFile>;
    /// Opens the file at `path` (relative to [`Namespace::root`]) for reading: a lookup, then
    /// [`Namespace::open`]. NFSv4 does both in one COMPOUND, one round trip fewer before the
    /// first READ.
    fn open_path<'a>(&'a self, path: &'a str) -> Fut<'a, OpenFile> {
        Box::pin(async move {
            let (fh, attr) = self.lookup_path(path).await?;
            self.open(&fh, attr, false).await
        })
    }
    fn mkdir<'a>(&'a self, dir: &'a Handle, name: &'a str, mode: u32) -> Fut<'a, (Handle, Attr)>;
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
    fn setattr<'a>(&'a self, fh: &'a Handle, attrs: &'a SetAttr) -> Fut<'a, ()>;
    /// [`Namespace::setattr`] and the attributes after it, in the same round trip where the
    /// version allows (v3: SETATTR's post-op attributes; v4: GETATTR in the COMPOUND).
    fn setattr_attrs<'a>(&'a self, fh: &'a Handle, attrs: &'a SetAttr) -> Fut<'a, Attr> {
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
    ) -> Fut<'a, (Handle, Attr)> {
        Box::pin(async { Err(Error::local(Status::NOTSUPP)) })
    }
    /// Space and files of the file system holding `fh`.
    fn statfs<'a>(&'a self, _fh: &'a Handle) -> Fut<'a, FsStat> {
        Box::pin(async { Err(Error::local(Status::NOTSUPP)) })
    }

    // Extended attributes of the user namespace, names without `user.` (NFSv4.2, RFC 8276):
    // NOTSUPP where the version (v3, 4.1) or the server has none.

    /// The value of attribute `name` of `fh`.
    fn getxattr<'a>(&'a self, _fh: &'a Handle, _name: &'a [u8]) -> Fut<'a, Vec<u8>> {
        Box::pin(async { Err(Error::local(Status::NOTSUPP)) })
    }
    /// Sets attribute `name` of `fh` to `value`, as `how` says.
    fn setxattr<'a>(
        &'a self,
        _fh: &'a Handle,
        _name: &'a [u8],
        _value: &'a [u8],
        _how: XattrSet,
    ) -> Fut<'a, ()> {
        Box::pin(async { Err(Error::local(Status::NOTSUPP)) })
    }
    /// The names of `fh`'s attributes.
    fn listxattrs<'a>(&'a self, _fh: &'a Handle) -> Fut<'a, Vec<Vec<u8>>> {
        Box::pin(async { Err(Error::local(Status::NOTSUPP)) })
    }
    /// Removes attribute `name` of `fh`.
    fn removexattr<'a>(&'a self, _fh: &'a Handle, _name: &'a [u8]) -> Fut<'a, ()> {
        Box::pin(async { Err(Error::local(Status::NOTSUPP)) })
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

    /// Whether this client holds a write delegation of the file `fh` (NFSv4): until it is
    /// returned no other client sees the file, so written data need not be committed at
    /// close (see [`crate::v4::deleg`]: write delegations). Always false over v3.
    fn write_delegated(&self, _fh: &Handle) -> bool {
        false
    }

    /// Registers the hook a delegation's return runs first (NFSv4; see [`WriteBack`]). With
    /// one registered, the v4 client takes write delegations on the files it creates.
    fn set_write_back(&self, _hook: WriteBack) {}
}

/// What a user of [`Namespace`] that keeps written data after a close (the mount, under a
/// write delegation) registers with [`Namespace::set_write_back`]: called with the file's
/// handle before the client returns the file's delegation (recall, unmount), it sends and
/// commits what it kept, resending what a server restart lost.
pub type WriteBack = std::sync::Arc<
    dyn Fn(Handle) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync,
>;

impl dyn Namespace {
    /// The directory holding `path` (relative to the root) and the last component's name.
    pub async fn lookup_parent(&self, path: &str) -> Result<(Handle, String), Error> {
        let parts: Vec<&str> = components(path).collect();
        let Some((name, dirs)) = parts.split_last() else {
            return Err(Error::other("the export root has no parent"));
        };
        let (dir, attr) = self.lookup_path(&dirs.join("/")).await?;
        if attr.ftype != FileType::DIR {
            return Err(Error::local(Status::NOTDIR));
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
    pub async fn resolve_entry(&self, dir: &Handle, e: &Entry) -> Result<(Handle, Attr), Error> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn url(s: &str) -> NfsUrl {
        NfsUrl::parse(s).unwrap()
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
        Box::pin(async { Err(Error::local(Status::NOTSUPP)) })
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
            Handle::v4(bytes::Bytes::new())
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
        fn getattr<'a>(&'a self, _: &'a Handle) -> Fut<'a, Attr> {
            not_listing()
        }
        fn lookup<'a>(&'a self, _: &'a Handle, _: &'a str) -> Fut<'a, (Handle, Attr)> {
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
        fn open<'a>(&'a self, _: &'a Handle, _: Attr, _: bool) -> Fut<'a, OpenFile> {
            not_listing()
        }
        fn mkdir<'a>(&'a self, _: &'a Handle, _: &'a str, _: u32) -> Fut<'a, (Handle, Attr)> {
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
        fn setattr<'a>(&'a self, _: &'a Handle, _: &'a SetAttr) -> Fut<'a, ()> {
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
}
