//! [`Namespace`] over NFSv3: each call one procedure (LOOKUP, READDIRPLUS, CREATE, ...), and
//! [`OpenFile`]'s calls over READ, WRITE, COMMIT and SETATTR ([`Open3`]). Attributes come back
//! as `fattr3` and go out as `sattr3`; [`attr_of`] and [`sattr3`] translate them to and from
//! the neutral vocabulary ([`crate::neutral`]). NFSv3 has no open state: an open is a wrap of
//! the handle, a close nothing, and locks are NOTSUPP (sluice has no NLM).

use super::client::Client;
use crate::error::NfsError;
use crate::namespace::{
    Attr, CreateMode, Cursor, Entry, Error, FileType, FsStat, Fut, Handle, Namespace, OpenFile,
    ProtoVersion, SetAttr, SetTime, SpecialKind, Status, Time,
};
use crate::neutral::{Device, LockConflict};
use crate::open::{BoxFut, OpenCalls};
use crate::proto::{
    CommitCall, FileContext, FileProtocol, ReadCall, ReadReply, Stability, WriteCall,
};
use crate::stats::{ClientStats, ReadStats};
use crate::transport::TransportStats;
use crate::url::NfsUrl;
use bytes::Bytes;
use sluice_xdr::nfs3::{Fattr3, NfsFh3, Nfsstat3, Nfstime3, Sattr3};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn fh3(h: &Handle) -> Result<NfsFh3, Error> {
    if h.is_v4() {
        return Err(Error::wrong_handle());
    }
    Ok(NfsFh3(h.bytes().clone()))
}

/// `fattr3` in the neutral vocabulary: no change attribute, times as they are.
pub fn attr_of(a: &Fattr3) -> Attr {
    let time = |t: Nfstime3| Time {
        seconds: i64::from(t.seconds),
        nseconds: t.nseconds,
    };
    Attr {
        ftype: FileType(a.ftype.0),
        mode: a.mode,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        used: a.used,
        rdev: Device {
            major: a.rdev.major,
            minor: a.rdev.minor,
        },
        fsid: a.fsid,
        fileid: a.fileid,
        atime: time(a.atime),
        mtime: time(a.mtime),
        ctime: time(a.ctime),
        change: None,
    }
}

/// [`SetAttr`] as `sattr3`: times outside `nfstime3`'s unsigned 32-bit seconds are clamped
/// into it (the most v3 can say).
pub fn sattr3(a: &SetAttr) -> Sattr3 {
    let time = |t: SetTime| match t {
        SetTime::DontChange => sluice_xdr::nfs3::SetTime::DontChange,
        SetTime::ServerTime => sluice_xdr::nfs3::SetTime::ServerTime,
        SetTime::ClientTime(t) => sluice_xdr::nfs3::SetTime::ClientTime(Nfstime3 {
            seconds: t.seconds.clamp(0, i64::from(u32::MAX)) as u32,
            nseconds: t.nseconds,
        }),
    };
    Sattr3 {
        mode: a.mode,
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        atime: time(a.atime),
        mtime: time(a.mtime),
    }
}

/// The v3 client's error in the neutral vocabulary: its status and its words.
impl From<NfsError> for Error {
    fn from(e: NfsError) -> Self {
        Error::new(
            e.status().map(|s| Status(s.0)),
            e.is_timeout(),
            e.to_string(),
        )
    }
}

impl Client {
    /// The attributes of `fh`, from `attr` when a reply carried them, else a GETATTR.
    async fn attr_or_getattr(&self, fh: &NfsFh3, attr: Option<Fattr3>) -> Result<Attr, Error> {
        match attr {
            Some(a) => Ok(attr_of(&a)),
            None => Ok(attr_of(&self.getattr(fh).await?.obj_attributes)),
        }
    }

    /// An [`OpenFile`] of `fh`.
    fn open_file(&self, fh: NfsFh3, attr: Attr) -> OpenFile {
        OpenFile::new(
            Arc::new(Open3 {
                handle: Handle::v3(fh.0.clone()),
                client: self.clone(),
                fh,
                locked: AtomicBool::new(false),
            }),
            attr,
        )
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
                                (Some(h), Some(a)) => Some((Handle::v3(h.0), attr_of(&a))),
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
        Handle::v3(Client::root(self).0.clone())
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

    fn getattr<'a>(&'a self, fh: &'a Handle) -> Fut<'a, Attr> {
        Box::pin(async move {
            Ok(attr_of(
                &Client::getattr(self, &fh3(fh)?).await?.obj_attributes,
            ))
        })
    }

    fn lookup<'a>(&'a self, dir: &'a Handle, name: &'a str) -> Fut<'a, (Handle, Attr)> {
        Box::pin(async move {
            let r = Client::lookup(self, &fh3(dir)?, name).await?;
            let attr = self.attr_or_getattr(&r.object, r.obj_attributes).await?;
            Ok((Handle::v3(r.object.0), attr))
        })
    }

    fn read_dir_page<'a>(&'a self, dir: &'a Handle, cursor: &'a mut Cursor) -> Fut<'a, Vec<Entry>> {
        Box::pin(async move { self.page3(&fh3(dir)?, cursor).await })
    }

    fn create<'a>(
        &'a self,
        dir: &'a Handle,
        name: &'a str,
        mode: u32,
        how: CreateMode,
    ) -> Fut<'a, OpenFile> {
        Box::pin(async move { Ok(self.create_in_dir(dir, name, mode, how).await?.0) })
    }

    fn create_in_dir<'a>(
        &'a self,
        dir: &'a Handle,
        name: &'a str,
        mode: u32,
        how: CreateMode,
    ) -> Fut<'a, (OpenFile, Option<Attr>)> {
        use sluice_xdr::nfs3::CreateHow;
        Box::pin(async move {
            let dir = &fh3(dir)?;
            let attrs = Sattr3 {
                mode: Some(mode),
                ..Sattr3::default()
            };
            let how3 = match how {
                CreateMode::Guarded => CreateHow::Guarded(attrs),
                CreateMode::Unchecked => CreateHow::Unchecked(attrs),
                // UNCHECKED with size 0: an existing file is truncated.
                CreateMode::Truncate => CreateHow::Unchecked(Sattr3 {
                    size: Some(0),
                    ..attrs
                }),
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
            let dir_attr = res.dir_wcc.after.as_ref().map(attr_of);
            Ok((self.open_file(fh, attr), dir_attr))
        })
    }

    fn open<'a>(&'a self, fh: &'a Handle, attr: Attr, _write: bool) -> Fut<'a, OpenFile> {
        Box::pin(async move {
            if attr.ftype == FileType::DIR {
                return Err(Error::local(Status::ISDIR));
            }
            Ok(self.open_file(fh3(fh)?, attr))
        })
    }

    fn mkdir<'a>(&'a self, dir: &'a Handle, name: &'a str, mode: u32) -> Fut<'a, (Handle, Attr)> {
        Box::pin(async move {
            let dir = &fh3(dir)?;
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
            Ok((Handle::v3(fh.0), attr))
        })
    }

    fn symlink<'a>(&'a self, dir: &'a Handle, name: &'a str, target: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            Client::symlink(self, &fh3(dir)?, name, target, Sattr3::default()).await?;
            Ok(())
        })
    }

    fn readlink<'a>(&'a self, fh: &'a Handle) -> Fut<'a, String> {
        Box::pin(async move {
            let r = Client::readlink(self, &fh3(fh)?).await?;
            Ok(String::from_utf8_lossy(&r.data).into_owned())
        })
    }

    fn link<'a>(&'a self, fh: &'a Handle, dir: &'a Handle, name: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            Client::link(self, &fh3(fh)?, &fh3(dir)?, name).await?;
            Ok(())
        })
    }

    fn remove<'a>(&'a self, dir: &'a Handle, name: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            Client::remove(self, &fh3(dir)?, name).await?;
            Ok(())
        })
    }

    fn rmdir<'a>(&'a self, dir: &'a Handle, name: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            Client::rmdir(self, &fh3(dir)?, name).await?;
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
            Client::rename(self, &fh3(from_dir)?, from_name, &fh3(to_dir)?, to_name).await?;
            Ok(())
        })
    }

    fn setattr<'a>(&'a self, fh: &'a Handle, attrs: &'a SetAttr) -> Fut<'a, ()> {
        Box::pin(async move {
            Client::setattr(self, &fh3(fh)?, sattr3(attrs), None).await?;
            Ok(())
        })
    }

    fn setattr_attrs<'a>(&'a self, fh: &'a Handle, attrs: &'a SetAttr) -> Fut<'a, Attr> {
        Box::pin(async move {
            let fh = &fh3(fh)?;
            let r = Client::setattr(self, fh, sattr3(attrs), None).await?;
            self.attr_or_getattr(fh, r.obj_wcc.after).await
        })
    }

    fn mknod<'a>(
        &'a self,
        dir: &'a Handle,
        name: &'a str,
        kind: SpecialKind,
        mode: u32,
    ) -> Fut<'a, (Handle, Attr)> {
        use sluice_xdr::nfs3::{DeviceData3, MknodData, Specdata3};
        Box::pin(async move {
            let dir = &fh3(dir)?;
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
            Ok((Handle::v3(fh.0), attr))
        })
    }

    fn statfs<'a>(&'a self, fh: &'a Handle) -> Fut<'a, FsStat> {
        Box::pin(async move {
            let s = Client::fsstat(self, &fh3(fh)?).await?;
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

/// One open NFSv3 file: the calls of [`OpenFile`], bound to its handle (see [`crate::open`]).
struct Open3 {
    client: Client,
    fh: NfsFh3,
    handle: Handle,
    /// A LOCK was sent under this open: only then does an unlock go to the server. A close
    /// unlocks every range of its owner (POSIX drops a process's locks at any close), and a
    /// file never locked must not cost an NLM call (nor fail where the server has no NLM), as
    /// the Linux client sends none for a file without locks.
    locked: AtomicBool,
}

// The outer future is the call being sent, the inner one its reply (see `crate::proto`,
// "Pipelining"): yielding a future is the point.
#[allow(clippy::async_yields_async)]
impl OpenCalls for Open3 {
    fn handle(&self) -> &Handle {
        &self.handle
    }

    fn start_read(&self, offset: u64, count: u32) -> BoxFut<'_, ReadCall<Attr, Error>> {
        Box::pin(async move {
            let call = FileProtocol::start_read(&self.client, &self.fh, offset, count).await;
            let call: ReadCall<Attr, Error> = Box::pin(async move {
                let (reply, rtt) = call.await;
                let reply = reply.map_err(Error::from).map(|r| ReadReply {
                    data: r.data,
                    eof: r.eof,
                    attr: r.attr.as_ref().map(attr_of),
                });
                (reply, rtt)
            });
            call
        })
    }

    fn start_write(
        &self,
        offset: u64,
        data: Bytes,
        stable: Stability,
    ) -> BoxFut<'_, WriteCall<Error>> {
        Box::pin(async move {
            let call =
                FileProtocol::start_write(&self.client, &self.fh, offset, data, stable).await;
            let call: WriteCall<Error> = Box::pin(async move {
                let (reply, rtt) = call.await;
                (reply.map_err(Error::from), rtt)
            });
            call
        })
    }

    fn start_commit(&self, offset: u64, count: u32) -> BoxFut<'_, CommitCall<Error>> {
        Box::pin(async move {
            let call = FileProtocol::start_commit(&self.client, &self.fh, offset, count).await;
            let call: CommitCall<Error> = Box::pin(async move { call.await.map_err(Error::from) });
            call
        })
    }

    fn getattr(&self) -> BoxFut<'_, Result<Attr, Error>> {
        Box::pin(async move {
            let a = FileProtocol::getattr(&self.client, &self.fh).await?;
            Ok(attr_of(&a))
        })
    }

    fn rsize(&self) -> u32 {
        Client::rsize(&self.client)
    }
    fn wsize(&self) -> u32 {
        Client::wsize(&self.client)
    }
    fn files(&self) -> &FileContext {
        FileProtocol::files(&self.client)
    }

    fn set_attr<'a>(&'a self, attrs: &'a SetAttr) -> BoxFut<'a, Result<Attr, Error>> {
        Box::pin(async move {
            let r = self.client.setattr(&self.fh, sattr3(attrs), None).await?;
            self.client.attr_or_getattr(&self.fh, r.obj_wcc.after).await
        })
    }

    fn close(&self) -> BoxFut<'_, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }

    /// Byte-range locks through the server's NLM (`client/nlm.rs`).
    fn lock<'a>(
        &'a self,
        owner: &'a [u8],
        write: bool,
        offset: u64,
        length: u64,
    ) -> BoxFut<'a, Result<Option<LockConflict>, Error>> {
        Box::pin(async move {
            // Before the call: a reply lost after the server granted still leaves a lock.
            self.locked.store(true, Ordering::Relaxed);
            Ok(self
                .client
                .nlm_lock(&self.fh, owner, write, offset, length)
                .await?)
        })
    }
    fn test_lock<'a>(
        &'a self,
        owner: &'a [u8],
        write: bool,
        offset: u64,
        length: u64,
    ) -> BoxFut<'a, Result<Option<LockConflict>, Error>> {
        Box::pin(async move {
            Ok(self
                .client
                .nlm_test(&self.fh, owner, write, offset, length)
                .await?)
        })
    }
    fn unlock<'a>(
        &'a self,
        owner: &'a [u8],
        offset: u64,
        length: u64,
    ) -> BoxFut<'a, Result<(), Error>> {
        Box::pin(async move {
            if !self.locked.load(Ordering::Relaxed) {
                return Ok(());
            }
            Ok(self
                .client
                .nlm_unlock(&self.fh, owner, offset, length)
                .await?)
        })
    }
}
