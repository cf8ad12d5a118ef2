//! [`OpenFile`]: a file a [`crate::Namespace`] opened, one type whatever the version.
//!
//! ```text
//!   OpenFile ── File<OpenProto> ── reader, writer, read cache (file.rs, read.rs)
//!                    │ FileProtocol: neutral Handle, Attr, Error
//!               OpenProto = Arc<dyn OpenCalls>     one open file of one version:
//!                    ├── v3/namespace.rs: Open3    (handle; READ, WRITE, COMMIT, SETATTR)
//!                    └── v4/namespace.rs: Open4    (handle + open stateid; ... CLOSE, LOCK)
//! ```
//!
//! The version difference is in one place, the [`OpenCalls`] object an open makes, which is
//! bound to its file (and in v4 to its open stateid): [`OpenProto`] is the [`FileProtocol`]
//! the one [`File`] runs over, so the readahead, write-behind and change detection are the
//! file layer's, unchanged, and [`Reader`] and [`Writer`] are that layer's reader and writer.
//! What the object adds per call is a boxed future and the mapping of attributes and errors
//! into [`crate::neutral`]'s types: noise beside a round trip.
//!
//! # Change detection
//! Attributes are [`Attr`]s, so a file's data version is its change attribute where the
//! server has one (v4) and its ctime where it does not (v3): a write that keeps size and
//! mtime is still seen over v4 (see [`Attr::data_version`]).

use crate::file::{File, FileReader, FileWriter, ReadToError};
use crate::neutral::{Attr, Error, Handle, LockConflict, SetAttr, Status};
use crate::proto::{
    CommitCall, FileContext, FileProtocol, ReadCall, Stability, Version, WriteCall,
};
use bytes::Bytes;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::io::AsyncWrite;

/// A boxed future of an [`OpenCalls`] method.
pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The calls one open file of one version makes (see the module docs). Implemented by the
/// version modules; every method is bound to the file it was made for.
pub trait OpenCalls: Send + Sync + 'static {
    fn handle(&self) -> &Handle;
    /// [`FileProtocol::start_read`] of this file.
    fn start_read(&self, offset: u64, count: u32) -> BoxFut<'_, ReadCall<Attr, Error>>;
    /// [`FileProtocol::start_write`] of this file.
    fn start_write(
        &self,
        offset: u64,
        data: Bytes,
        stable: Stability,
    ) -> BoxFut<'_, WriteCall<Error>>;
    /// [`FileProtocol::start_commit`] of this file.
    fn start_commit(&self, offset: u64, count: u32) -> BoxFut<'_, CommitCall<Error>>;
    fn getattr(&self) -> BoxFut<'_, Result<Attr, Error>>;
    fn rsize(&self) -> u32;
    fn wsize(&self) -> u32;
    fn files(&self) -> &FileContext;

    /// SETATTR (v4: under the open's stateid, as a size change needs) and the attributes
    /// after it, in one round trip where the version allows.
    fn set_attr<'a>(&'a self, attrs: &'a SetAttr) -> BoxFut<'a, Result<Attr, Error>>;
    /// Ends the open (v4: CLOSE, and DELEGRETURN of a delegation it came with; v3: nothing).
    fn close(&self) -> BoxFut<'_, Result<(), Error>>;
    /// Byte-range locks: NOTSUPP where the version has none in sluice (v3: no NLM).
    fn lock<'a>(
        &'a self,
        _owner: &'a [u8],
        _write: bool,
        _offset: u64,
        _length: u64,
    ) -> BoxFut<'a, Result<Option<LockConflict>, Error>> {
        Box::pin(async { Err(Error::local(Status::NOTSUPP)) })
    }
    fn test_lock<'a>(
        &'a self,
        _owner: &'a [u8],
        _write: bool,
        _offset: u64,
        _length: u64,
    ) -> BoxFut<'a, Result<Option<LockConflict>, Error>> {
        Box::pin(async { Err(Error::local(Status::NOTSUPP)) })
    }
    fn unlock<'a>(
        &'a self,
        _owner: &'a [u8],
        _offset: u64,
        _length: u64,
    ) -> BoxFut<'a, Result<(), Error>> {
        Box::pin(async { Err(Error::local(Status::NOTSUPP)) })
    }
}

/// The [`FileProtocol`] of an [`OpenFile`]: its version's [`OpenCalls`]. The handle the file
/// layer passes is the object's own, so it is not looked at.
#[derive(Clone)]
pub struct OpenProto(Arc<dyn OpenCalls>);

impl FileProtocol for OpenProto {
    type Handle = Handle;
    type Attr = Attr;
    type Error = Error;

    async fn start_read(&self, _fh: &Handle, offset: u64, count: u32) -> ReadCall<Attr, Error> {
        self.0.start_read(offset, count).await
    }
    async fn start_write(
        &self,
        _fh: &Handle,
        offset: u64,
        data: Bytes,
        stable: Stability,
    ) -> WriteCall<Error> {
        self.0.start_write(offset, data, stable).await
    }
    async fn start_commit(&self, _fh: &Handle, offset: u64, count: u32) -> CommitCall<Error> {
        self.0.start_commit(offset, count).await
    }
    async fn getattr(&self, _fh: &Handle) -> Result<Attr, Error> {
        self.0.getattr().await
    }
    fn version(attr: &Attr) -> Version {
        attr.data_version()
    }
    fn rsize(&self) -> u32 {
        self.0.rsize()
    }
    fn wsize(&self) -> u32 {
        self.0.wsize()
    }
    fn files(&self) -> &FileContext {
        self.0.files()
    }
}

/// A file open for reading (and, if asked, writing) through [`File`]'s reader and writer.
/// Clones share the open (its stateid) and the read cache; close once.
#[derive(Clone)]
pub struct OpenFile {
    file: File<OpenProto>,
}

/// [`OpenFile::reader`]: sequential reads through the readahead.
pub type Reader = FileReader<OpenProto>;

/// [`OpenFile::writer`]: write-behind with UNSTABLE WRITEs and a COMMIT at the end.
pub type Writer = FileWriter<OpenProto>;

impl OpenFile {
    /// The open `calls` made, with the attributes it was opened with.
    pub fn new(calls: Arc<dyn OpenCalls>, attr: Attr) -> OpenFile {
        let fh = calls.handle().clone();
        OpenFile {
            file: File::new(OpenProto(calls), fh, attr),
        }
    }

    /// The size when opened (or as the file layer last saw it).
    pub fn size(&self) -> u64 {
        self.file.size()
    }

    pub fn handle(&self) -> Handle {
        self.file.fh().clone()
    }

    /// The attributes when opened (or as the file layer last saw them).
    pub fn attr(&self) -> Attr {
        *self.file.attr()
    }

    /// Positional read through the file's readahead (see [`File::read_at`]).
    pub async fn read_at(&self, offset: u64, len: u64) -> Result<Vec<Bytes>, Error> {
        self.file.read_at(offset, len).await
    }

    /// Attributes fetched elsewhere (see [`File::observe`]): the read cache is dropped if
    /// they show a change (the change attribute where the server has one, else size, mtime
    /// and ctime; see [`Attr::data_version`]).
    pub fn observe(&mut self, attr: Attr) {
        self.file.observe(attr)
    }

    /// Drops what was read ahead (see [`File::invalidate`]).
    pub fn invalidate(&self) {
        self.file.invalidate()
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
    ) -> Result<Option<LockConflict>, Error> {
        self.calls().lock(owner, write, offset, length).await
    }

    /// The lock another owner holds that would keep `owner` from this one (LOCKT).
    pub async fn test_lock(
        &self,
        owner: &[u8],
        write: bool,
        offset: u64,
        length: u64,
    ) -> Result<Option<LockConflict>, Error> {
        self.calls().test_lock(owner, write, offset, length).await
    }

    /// Releases `owner`'s locks in the range (LOCKU).
    pub async fn unlock(&self, owner: &[u8], offset: u64, length: u64) -> Result<(), Error> {
        self.calls().unlock(owner, offset, length).await
    }

    /// Streams the whole file into `sink` (see [`File::read_to`]); returns the bytes copied.
    pub async fn read_to<W: AsyncWrite + Unpin + ?Sized>(
        &self,
        sink: &mut W,
        progress: impl FnMut(u64),
    ) -> Result<u64, ReadToError<Error>> {
        self.file.read_to(sink, progress).await
    }

    /// The whole file.
    pub async fn read_all(&self) -> Result<Vec<u8>, Error> {
        self.file.read_all().await
    }

    pub fn reader(&self) -> Reader {
        self.file.reader()
    }

    /// A writer from offset 0.
    pub fn writer(&self) -> Writer {
        self.file.writer()
    }

    /// Sets attributes of the open file (v4: under its open stateid, as a size change needs).
    pub async fn set_attr(&self, attrs: &SetAttr) -> Result<(), Error> {
        self.calls().set_attr(attrs).await.map(|_| ())
    }

    /// [`OpenFile::set_attr`] and the attributes after it (see
    /// [`crate::Namespace::setattr_attrs`]).
    pub async fn set_attr_attrs(&self, attrs: &SetAttr) -> Result<Attr, Error> {
        self.calls().set_attr(attrs).await
    }

    /// Ends the open (v4: CLOSE, and DELEGRETURN of a delegation it came with).
    pub async fn close(&self) -> Result<(), Error> {
        self.calls().close().await
    }

    fn calls(&self) -> &dyn OpenCalls {
        &*self.file.client().0
    }
}
