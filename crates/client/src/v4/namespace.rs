//! [`Namespace`] over NFSv4.1 / 4.2: each call one SEQUENCE-led COMPOUND on the session.
//!
//! | call | COMPOUND after SEQUENCE |
//! |---|---|
//! | lookup | PUTFH dir, LOOKUP name, GETFH, GETATTR |
//! | lookup_path | PUTROOTFH, LOOKUP x n, GETFH, GETATTR ([`Client::lookup`]) |
//! | read_dir_page | PUTFH dir, READDIR asking for `filehandle` too (READDIRPLUS's role) |
//! | open | PUTFH file, OPEN CLAIM_FH, GETFH, GETATTR |
//! | open_path | PUTROOTFH, LOOKUP x (n - 1), OPEN CLAIM_NULL name, GETFH, GETATTR (not a regular file: lookup_path, then open) |
//! | create | PUTFH dir, OPEN CREATE CLAIM_NULL name, GETFH, GETATTR |
//! | mkdir / symlink | PUTFH dir, CREATE NF4DIR / NF4LNK, GETFH, GETATTR |
//! | link / rename | PUTFH src, SAVEFH, PUTFH dir, LINK / RENAME |
//! | setattr | PUTFH, SETATTR (anonymous stateid, or the open's) |
//! | getxattr / setxattr / listxattrs / removexattr | PUTFH, GETXATTR / SETXATTR / LISTXATTRS (per page) / REMOVEXATTR (4.2 only, [`super::xattr`]) |
//!
//! Attributes come back as `fattr4` and are mapped to the neutral [`Attr`] here, change
//! attribute included (see [`crate::neutral`] for the mapping's rules); [`SetAttr`] goes out
//! as `fattr4` ([`sattr_values`]). [`OpenFile`]'s calls are [`Open4`]'s: the open's handle and
//! stateid, CLOSE at the end, and byte-range locks ([`super::lock`]).

use super::{
    component, find_fh, Attr, Client, Error, Fh, OpenClaim4, Openflag4, OPEN4_SHARE_ACCESS_BOTH,
    OPEN4_SHARE_ACCESS_READ,
};
use crate::namespace::{
    Attr as NsAttr, CreateMode, Cursor, Entry, FileType, FsStat, Fut, Handle, Namespace, OpenFile,
    ProtoVersion, SetAttr, SetTime, SpecialKind, Status, Time, XattrSet, NOBODY_ID,
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
use sluice_xdr::nfs4::attrs::{num, AttrValues};
use sluice_xdr::nfs4::ops::{
    CreatVerfAttr, CreateArgs, Createhow4, Createtype4, NfsArgop4, NfsResop4, OpenArgs, Res4,
    SetattrArgs,
};
use sluice_xdr::nfs4::{
    Bitmap4, Fattr4, Linktext4, NfsFh4, Nfsstat4, Nfstime4, Opaque4, Settime4, StateOwner4,
    Stateid4, Utf8Str,
};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What the namespace asks for: [`super::ATTR_BITS`] and what `stat` shows besides (fsid,
/// rawdev).
fn ns_attr_request() -> Bitmap4 {
    let mut bits = super::ATTR_BITS.to_vec();
    bits.extend([num::FSID, num::RAWDEV]);
    Bitmap4::from_bits(&bits)
}

/// READDIR's request: the above and each entry's handle, so a walk needs no LOOKUP.
fn readdir_attr_request() -> Bitmap4 {
    let mut bits = super::ATTR_BITS.to_vec();
    bits.extend([num::FSID, num::RAWDEV, num::FILEHANDLE]);
    Bitmap4::from_bits(&bits)
}

/// `fattr4` in the neutral vocabulary (see [`crate::neutral`]).
pub fn attr_of_fattr(f: &Fattr4) -> Result<NsAttr, Error> {
    Ok(attr_of(&AttrValues::decode(f)?.values))
}

fn attr_of(v: &AttrValues) -> NsAttr {
    let time = |t: &Option<Nfstime4>| {
        let t = t.clone().unwrap_or_default();
        Time {
            seconds: t.seconds,
            nseconds: t.nseconds,
        }
    };
    NsAttr {
        ftype: FileType(v.ftype.unwrap_or_default().0),
        mode: v.mode.unwrap_or(0),
        nlink: v.numlinks.unwrap_or(0),
        uid: owner_id(v.owner.as_ref()),
        gid: owner_id(v.owner_group.as_ref()),
        size: v.size.unwrap_or(0),
        used: v.space_used.unwrap_or(0),
        rdev: v
            .rawdev
            .as_ref()
            .map(|r| Device {
                major: r.specdata1,
                minor: r.specdata2,
            })
            .unwrap_or_default(),
        // One number, as v3 has: the major, with the minor folded in.
        fsid: v
            .fsid
            .as_ref()
            .map_or(0, |f| f.major ^ f.minor.rotate_left(32)),
        fileid: v.fileid.unwrap_or(0),
        atime: time(&v.time_access),
        mtime: time(&v.time_modify),
        ctime: time(&v.time_metadata),
        change: v.change,
    }
}

/// `"1000"` or `"1000@domain"` → 1000; a name → [`NOBODY_ID`].
pub fn owner_id(owner: Option<&Utf8Str>) -> u32 {
    let Some(o) = owner else { return NOBODY_ID };
    let s = String::from_utf8_lossy(o);
    let id = s.split('@').next().unwrap_or("");
    id.parse().unwrap_or(NOBODY_ID)
}

/// [`SetAttr`] as `fattr4` for SETATTR or CREATE (owners as numeric strings).
pub fn sattr_values(a: &SetAttr) -> AttrValues {
    let time = |t: SetTime| match t {
        SetTime::DontChange => None,
        SetTime::ServerTime => Some(Settime4::ServerTime),
        SetTime::ClientTime(t) => Some(Settime4::ClientTime(Nfstime4 {
            seconds: t.seconds,
            nseconds: t.nseconds,
        })),
    };
    let id = |n: Option<u32>| n.map(|n| Utf8Str(Bytes::from(n.to_string().into_bytes())));
    AttrValues {
        mode: a.mode.map(|m| m & 0o7777),
        owner: id(a.uid),
        owner_group: id(a.gid),
        size: a.size,
        time_access_set: time(a.atime),
        time_modify_set: time(a.mtime),
        ..AttrValues::default()
    }
}

/// `h` as a v4 handle, if it is one.
fn h4(h: &Handle) -> Option<NfsFh4> {
    h.is_v4().then(|| NfsFh4(h.bytes().clone()))
}

fn fh4(h: &Handle) -> Result<NfsFh4, crate::namespace::Error> {
    if !h.is_v4() {
        return Err(crate::namespace::Error::wrong_handle());
    }
    Ok(NfsFh4(h.bytes().clone()))
}

/// The last GETATTR result, neutral.
fn find_ns_attr(res: &[NfsResop4]) -> Result<NsAttr, Error> {
    res.iter()
        .rev()
        .find_map(|r| match r {
            NfsResop4::Getattr(Res4::Ok(f)) => Some(attr_of_fattr(f)),
            _ => None,
        })
        .unwrap_or_else(|| Err(Error::Other("the reply has no attributes".into())))
}

impl Attr {
    /// In the neutral vocabulary (fsid and rawdev, not asked for, zero).
    pub fn to_attr(&self) -> NsAttr {
        let id = |s: &str| owner_id(Some(&Utf8Str(Bytes::copy_from_slice(s.as_bytes()))));
        let time = |t: &Nfstime4| Time {
            seconds: t.seconds,
            nseconds: t.nseconds,
        };
        NsAttr {
            ftype: FileType(self.ftype.0),
            mode: self.mode,
            nlink: self.numlinks,
            uid: id(&self.owner),
            gid: id(&self.owner_group),
            size: self.size,
            used: self.space_used,
            rdev: Device::default(),
            fsid: 0,
            fileid: self.fileid,
            atime: time(&self.atime),
            mtime: time(&self.mtime),
            ctime: time(&self.ctime),
            change: Some(self.change),
        }
    }
}

/// The v4 client's error in the neutral vocabulary: a status the two lists share is worded as
/// the v3 client words it, "no such file or directory (NFS4ERR_NOENT)"; the others as the v4
/// client says them ("EXCHANGE_ID failed: NFS4ERR_MINOR_VERS_MISMATCH").
impl From<Error> for crate::namespace::Error {
    fn from(e: Error) -> Self {
        use sluice_xdr::nfs3::Nfsstat3;
        let message = match &e {
            Error::Status { status, .. }
                if Nfsstat3(status.0).describe() != Nfsstat3(u32::MAX).describe() =>
            {
                format!("{} ({})", Nfsstat3(status.0).describe(), status.name())
            }
            e => e.to_string(),
        };
        let timeout = matches!(
            e,
            Error::Rpc(crate::transport::CallError::Rpc(
                sluice_rpc::client::RpcError::TimedOut
            ))
        );
        crate::namespace::Error::new(e.status().map(|s| Status(s.0)), timeout, message)
    }
}

impl Client {
    /// SETATTR under the open's stateid (a size change must present one, RFC 8881 §18.30).
    pub async fn setattr_open(&self, fh: &Fh, attrs: &SetAttr) -> Result<(), Error> {
        self.setattr_with(&fh.fh, fh.stateid, attrs).await
    }

    /// SETATTR under `stateid` and GETATTR after it, in one COMPOUND: the attributes after.
    pub async fn setattr_get(
        &self,
        fh: &NfsFh4,
        stateid: Stateid4,
        attrs: &SetAttr,
    ) -> Result<NsAttr, Error> {
        let res = self
            .compound(vec![
                NfsArgop4::Putfh(fh.clone()),
                NfsArgop4::Setattr(SetattrArgs {
                    stateid,
                    obj_attributes: sattr_values(attrs).encode(),
                }),
                NfsArgop4::Getattr(ns_attr_request()),
            ])
            .await?
            .ok()?;
        find_ns_attr(&res)
    }

    async fn setattr_with(
        &self,
        fh: &NfsFh4,
        stateid: Stateid4,
        attrs: &SetAttr,
    ) -> Result<(), Error> {
        self.compound(vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Setattr(SetattrArgs {
                stateid,
                obj_attributes: sattr_values(attrs).encode(),
            }),
        ])
        .await?
        .ok()
        .map(|_| ())
    }

    /// OPEN after PUTFH `fh` (the file for CLAIM_FH, the directory for CLAIM_NULL): the open
    /// file's handle with its stateid, and its attributes. The one place the client opens a
    /// file: the open is recorded for reopening after a server restart ([`super::reopen`]).
    /// `access` is OPEN's share access (`OPEN4_SHARE_ACCESS_*`); a delegation is asked for
    /// (and then kept and returned by the client) only for reading with a back channel up.
    pub async fn open_at(
        &self,
        fh: &NfsFh4,
        access: u32,
        openhow: Openflag4,
        claim: OpenClaim4,
    ) -> Result<(Fh, Attr), Error> {
        let ops = vec![NfsArgop4::Putfh(fh.clone())];
        let (fh, attr, _) = self.open_after(ops, access, openhow, claim, false).await?;
        Ok((fh, attr))
    }

    /// [`Client::open_at`] with the ops that make the current filehandle spelled out: PUTFH,
    /// or a whole path walk (PUTROOTFH, LOOKUP...) for [`Namespace::open_path`].
    async fn open_after(
        &self,
        mut ops: Vec<NfsArgop4>,
        access: u32,
        openhow: Openflag4,
        claim: OpenClaim4,
        dir_attr: bool,
    ) -> Result<(Fh, Attr, Option<Attr>), Error> {
        let clientid = self.inner.session.lock().expect("session lock").clientid;
        let n = self.inner.opens.fetch_add(1, Ordering::Relaxed);
        let owner = format!("open-{n}").into_bytes();
        // Without a back channel a delegation could never be recalled: ask for none. A
        // writer asks for none either, unless it creates the file and its user keeps written
        // data under a write delegation (the mount's write-back hook; see `deleg`: write
        // delegations).
        let writes = access & sluice_xdr::nfs4::ops::OPEN4_SHARE_ACCESS_WRITE != 0;
        let creates = matches!(openhow, Openflag4::Create(_));
        let keeps_writes = creates
            && self
                .inner
                .write_back
                .lock()
                .expect("write-back lock")
                .is_some();
        let want = if self.back_channel_up() && (!writes || keeps_writes) {
            0
        } else {
            sluice_xdr::nfs4::ops::OPEN4_SHARE_WANT_NO_DELEG
        };
        ops.extend([
            NfsArgop4::Open(OpenArgs {
                seqid: 0,
                share_access: access | want,
                share_deny: 0,
                owner: StateOwner4 {
                    clientid,
                    owner: Opaque4(Bytes::from(owner.clone())),
                },
                openhow,
                claim,
            }),
            NfsArgop4::Getfh(()),
            NfsArgop4::Getattr(super::attr_request()),
        ]);
        if dir_attr {
            // The directory's attributes after the OPEN, from the handle saved before it
            // (`ops` made the directory current).
            ops.insert(ops.len() - 3, NfsArgop4::Savefh(()));
            ops.extend([
                NfsArgop4::Restorefh(()),
                NfsArgop4::Getattr(super::attr_request()),
            ]);
        }
        let reply = self.compound(ops).await?;
        // A failure of the directory's RESTOREFH or GETATTR leaves the open made: it is kept,
        // without the directory's attributes.
        let dir_failed = dir_attr
            && !reply.status.is_ok()
            && matches!(
                reply.results.last().map(|r| r.opnum()),
                Some(
                    sluice_xdr::nfs4::ops::Opnum4::RESTOREFH
                        | sluice_xdr::nfs4::ops::Opnum4::GETATTR
                )
            )
            && reply
                .results
                .iter()
                .filter(|r| matches!(r, NfsResop4::Getattr(Res4::Ok(_))))
                .count()
                == 1;
        let res = if dir_failed {
            let mut r = reply.results;
            r.pop();
            r
        } else {
            reply.ok()?
        };
        let mut attrs = res.iter().filter_map(|r| match r {
            NfsResop4::Getattr(Res4::Ok(f)) => Some(f),
            _ => None,
        });
        let attr = match attrs.next() {
            Some(f) => Attr::from_fattr(f)?,
            None => return Err(Error::Other("the reply has no attributes".into())),
        };
        let dir_attr = attrs.next().and_then(|f| Attr::from_fattr(f).ok());
        let Some(open) = res.iter().find_map(|r| match r {
            NfsResop4::Open(Res4::Ok(o)) => Some(o),
            _ => None,
        }) else {
            return Err(Error::Other("OPEN returned no result".into()));
        };
        let fhandle = find_fh(&res)?;
        // Recorded (returned at the last close or on recall), or returned at once.
        let delegation = self
            .delegation_granted(
                &fhandle,
                &open.delegation,
                Some((attr.size, attr.change)),
                keeps_writes,
            )
            .await;
        let fh = Fh {
            fh: fhandle,
            stateid: Stateid4 {
                seqid: 0,
                other: open.stateid.other,
            },
            delegation,
        };
        let tracked = self.inner.open_files.lock().expect("opens lock").insert(
            fh.stateid,
            fh.fh.clone(),
            access,
            owner,
        );
        if !tracked {
            tracing::debug!("too many opens to track; this one is not reopened after a restart");
        }
        Ok((fh, attr, dir_attr))
    }

    /// `ops` after PUTFH `dir`, ending with GETFH and GETATTR: the new object.
    async fn make_in(&self, dir: &NfsFh4, op: NfsArgop4) -> Result<(Handle, NsAttr), Error> {
        let res = self
            .compound(vec![
                NfsArgop4::Putfh(dir.clone()),
                op,
                NfsArgop4::Getfh(()),
                NfsArgop4::Getattr(ns_attr_request()),
            ])
            .await?
            .ok()?;
        Ok((Handle::v4(find_fh(&res)?.0), find_ns_attr(&res)?))
    }

    /// `op` with the saved handle `from` and the current handle `to` (LINK, RENAME).
    async fn two_handles(&self, from: &NfsFh4, to: &NfsFh4, op: NfsArgop4) -> Result<(), Error> {
        self.compound(vec![
            NfsArgop4::Putfh(from.clone()),
            NfsArgop4::Savefh(()),
            NfsArgop4::Putfh(to.clone()),
            op,
        ])
        .await?
        .ok()
        .map(|_| ())
    }

    async fn simple(&self, fh: &NfsFh4, op: NfsArgop4) -> Result<Vec<NfsResop4>, Error> {
        self.compound(vec![NfsArgop4::Putfh(fh.clone()), op])
            .await?
            .ok()
    }

    async fn page4(&self, dir: &NfsFh4, cursor: &mut Cursor) -> Result<Vec<Entry>, Error> {
        let res = self
            .simple(
                dir,
                NfsArgop4::Readdir(sluice_xdr::nfs4::ops::ReaddirArgs {
                    cookie: cursor.cookie,
                    cookieverf: cursor.verf,
                    dircount: super::READDIR_DIRCOUNT_BYTES,
                    maxcount: self.inner.rsize.min(super::READDIR_MAXCOUNT_BYTES),
                    attr_request: readdir_attr_request(),
                }),
            )
            .await?;
        let Some(NfsResop4::Readdir(Res4::Ok(page))) = res.into_iter().last() else {
            return Err(Error::Other("READDIR returned nothing".into()));
        };
        cursor.verf = page.cookieverf;
        cursor.eof = page.eof;
        let mut out = Vec::with_capacity(page.entries.len());
        for e in &page.entries {
            cursor.cookie = e.cookie;
            let v = AttrValues::decode(&e.attrs)?.values;
            let attr = attr_of(&v);
            out.push(Entry {
                name: String::from_utf8_lossy(&e.name).into_owned(),
                cookie: e.cookie,
                fileid: attr.fileid,
                node: v.filehandle.map(|h| (Handle::v4(h.0), attr)),
            });
        }
        Ok(out)
    }
}

impl Client {
    /// An [`OpenFile`] of the open `fh` (its stateid within).
    fn open_file(&self, fh: Fh, attr: &Attr) -> OpenFile {
        OpenFile::new(
            Arc::new(Open4 {
                handle: Handle::v4(fh.fh.0.clone()),
                client: self.clone(),
                fh,
            }),
            attr.to_attr(),
        )
    }
}

/// One open NFSv4 file: the calls of [`OpenFile`], under its open stateid (see
/// [`crate::open`]).
struct Open4 {
    client: Client,
    fh: Fh,
    handle: Handle,
}

// The outer future is the call being sent, the inner one its reply (see `crate::proto`,
// "Pipelining"): yielding a future is the point.
#[allow(clippy::async_yields_async)]
impl OpenCalls for Open4 {
    fn handle(&self) -> &Handle {
        &self.handle
    }

    fn start_read(
        &self,
        offset: u64,
        count: u32,
    ) -> BoxFut<'_, ReadCall<NsAttr, crate::namespace::Error>> {
        Box::pin(async move {
            let call = FileProtocol::start_read(&self.client, &self.fh, offset, count).await;
            let call: ReadCall<NsAttr, crate::namespace::Error> = Box::pin(async move {
                let (reply, rtt) = call.await;
                let reply = reply.map_err(Into::into).map(|r| ReadReply {
                    data: r.data,
                    eof: r.eof,
                    attr: r.attr.as_ref().map(Attr::to_attr),
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
    ) -> BoxFut<'_, WriteCall<crate::namespace::Error>> {
        Box::pin(async move {
            let call =
                FileProtocol::start_write(&self.client, &self.fh, offset, data, stable).await;
            let call: WriteCall<crate::namespace::Error> = Box::pin(async move {
                let (reply, rtt) = call.await;
                (reply.map_err(Into::into), rtt)
            });
            call
        })
    }

    fn start_commit(
        &self,
        offset: u64,
        count: u32,
    ) -> BoxFut<'_, CommitCall<crate::namespace::Error>> {
        Box::pin(async move {
            let call = FileProtocol::start_commit(&self.client, &self.fh, offset, count).await;
            let call: CommitCall<crate::namespace::Error> =
                Box::pin(async move { call.await.map_err(Into::into) });
            call
        })
    }

    fn getattr(&self) -> BoxFut<'_, Result<NsAttr, crate::namespace::Error>> {
        Box::pin(async move {
            let a = FileProtocol::getattr(&self.client, &self.fh).await?;
            Ok(a.to_attr())
        })
    }

    fn rsize(&self) -> u32 {
        FileProtocol::rsize(&self.client)
    }
    fn wsize(&self) -> u32 {
        FileProtocol::wsize(&self.client)
    }
    fn files(&self) -> &FileContext {
        FileProtocol::files(&self.client)
    }

    fn set_attr<'a>(
        &'a self,
        attrs: &'a SetAttr,
    ) -> BoxFut<'a, Result<NsAttr, crate::namespace::Error>> {
        Box::pin(async move {
            Ok(self
                .client
                .setattr_get(&self.fh.fh, self.fh.stateid, attrs)
                .await?)
        })
    }

    fn close(&self) -> BoxFut<'_, Result<(), crate::namespace::Error>> {
        Box::pin(async move { Ok(self.client.close(&self.fh).await?) })
    }

    fn lock<'a>(
        &'a self,
        owner: &'a [u8],
        write: bool,
        offset: u64,
        length: u64,
    ) -> BoxFut<'a, Result<Option<LockConflict>, crate::namespace::Error>> {
        Box::pin(async move {
            Ok(self
                .client
                .lock(&self.fh, owner, write, offset, length)
                .await?)
        })
    }

    fn test_lock<'a>(
        &'a self,
        owner: &'a [u8],
        write: bool,
        offset: u64,
        length: u64,
    ) -> BoxFut<'a, Result<Option<LockConflict>, crate::namespace::Error>> {
        Box::pin(async move {
            Ok(self
                .client
                .test_lock(&self.fh, owner, write, offset, length)
                .await?)
        })
    }

    fn unlock<'a>(
        &'a self,
        owner: &'a [u8],
        offset: u64,
        length: u64,
    ) -> BoxFut<'a, Result<(), crate::namespace::Error>> {
        Box::pin(async move { Ok(self.client.unlock(&self.fh, owner, offset, length).await?) })
    }
}

impl Namespace for Client {
    fn version(&self) -> ProtoVersion {
        if self.minor_version() >= 2 {
            ProtoVersion::V4_2
        } else {
            ProtoVersion::V4_1
        }
    }
    fn url(&self) -> &NfsUrl {
        Client::url(self)
    }
    fn export(&self) -> &str {
        "/"
    }
    fn root(&self) -> Handle {
        // The pseudo root has a handle only the server knows; lookups from the root go
        // through PUTROOTFH (lookup_path). An empty handle stands for it.
        Handle::v4(Bytes::new())
    }
    fn rsize(&self) -> u32 {
        FileProtocol::rsize(self)
    }
    fn wsize(&self) -> u32 {
        FileProtocol::wsize(self)
    }
    fn slots(&self) -> usize {
        self.files().options().write_depth_max.max(1)
    }

    fn getattr<'a>(&'a self, fh: &'a Handle) -> Fut<'a, NsAttr> {
        Box::pin(async move {
            let fh = &fh4(fh)?;
            let res = if fh.0.is_empty() {
                self.compound(vec![
                    NfsArgop4::Putrootfh(()),
                    NfsArgop4::Getattr(ns_attr_request()),
                ])
                .await?
                .ok()?
            } else {
                self.simple(fh, NfsArgop4::Getattr(ns_attr_request()))
                    .await?
            };
            Ok(find_ns_attr(&res)?)
        })
    }

    fn lookup<'a>(&'a self, dir: &'a Handle, name: &'a str) -> Fut<'a, (Handle, NsAttr)> {
        Box::pin(async move {
            let dir = &fh4(dir)?;
            let put = if dir.0.is_empty() {
                NfsArgop4::Putrootfh(())
            } else {
                NfsArgop4::Putfh(dir.clone())
            };
            let res = self
                .compound(vec![
                    put,
                    NfsArgop4::Lookup(component(name)?),
                    NfsArgop4::Getfh(()),
                    NfsArgop4::Getattr(ns_attr_request()),
                ])
                .await?
                .ok()?;
            Ok((Handle::v4(find_fh(&res)?.0), find_ns_attr(&res)?))
        })
    }

    fn lookup_path<'a>(&'a self, path: &'a str) -> Fut<'a, (Handle, NsAttr)> {
        Box::pin(async move {
            // One COMPOUND for the whole walk; its GETATTR asked for ATTR_BITS, so fsid and
            // rawdev are left zero rather than costing another round trip.
            let (fh, attr) = Client::lookup(self, path).await?;
            Ok((Handle::v4(fh.0), attr.to_attr()))
        })
    }

    fn read_dir_page<'a>(&'a self, dir: &'a Handle, cursor: &'a mut Cursor) -> Fut<'a, Vec<Entry>> {
        Box::pin(async move { Ok(self.page4(&fh4(dir)?, cursor).await?) })
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
    ) -> Fut<'a, (OpenFile, Option<NsAttr>)> {
        Box::pin(async move {
            let mut a = AttrValues {
                mode: Some(mode & 0o7777),
                ..AttrValues::default()
            };
            let how = match how {
                CreateMode::Truncate => {
                    a.size = Some(0);
                    Createhow4::Unchecked(a.encode())
                }
                CreateMode::Unchecked => Createhow4::Unchecked(a.encode()),
                CreateMode::Guarded => Createhow4::Guarded(a.encode()),
                CreateMode::Exclusive => Createhow4::Exclusive41(CreatVerfAttr {
                    verf: rand::random(),
                    attrs: a.encode(),
                }),
            };
            // The directory's attributes in the same COMPOUND (SAVEFH, RESTOREFH, GETATTR), as
            // Linux's OPEN once carried them: a cache of them stays valid without a GETATTR.
            let (fh, attr, dir_attr) = self
                .open_after(
                    vec![NfsArgop4::Putfh(fh4(dir)?)],
                    OPEN4_SHARE_ACCESS_BOTH,
                    Openflag4::Create(how),
                    OpenClaim4::Null(component(name)?),
                    self.inner.ops_max >= 8,
                )
                .await?;
            Ok((self.open_file(fh, &attr), dir_attr.map(|a| a.to_attr())))
        })
    }

    fn open<'a>(&'a self, fh: &'a Handle, attr: NsAttr, write: bool) -> Fut<'a, OpenFile> {
        Box::pin(async move {
            if attr.ftype == FileType::DIR {
                return Err(crate::namespace::Error::local(Status::ISDIR));
            }
            let access = if write {
                OPEN4_SHARE_ACCESS_BOTH
            } else {
                OPEN4_SHARE_ACCESS_READ
            };
            let (fh, attr) = self
                .open_at(&fh4(fh)?, access, Openflag4::NoCreate, OpenClaim4::Fh)
                .await?;
            Ok(self.open_file(fh, &attr))
        })
    }

    fn open_path<'a>(&'a self, path: &'a str) -> Fut<'a, OpenFile> {
        Box::pin(async move {
            let comps: Vec<&str> = crate::url::components(path).collect();
            // PUTROOTFH, the directories' LOOKUPs, and OPEN CLAIM_NULL of the last name with
            // its GETFH and GETATTR, under one SEQUENCE, when that fits the session.
            let walk = match comps.split_last() {
                Some((name, dirs)) if dirs.len() + 5 <= self.inner.ops_max as usize => {
                    let mut ops = vec![NfsArgop4::Putrootfh(())];
                    for d in dirs {
                        ops.push(NfsArgop4::Lookup(component(d)?));
                    }
                    Some((ops, component(name)?))
                }
                _ => None,
            };
            if let Some((ops, name)) = walk {
                match self
                    .open_after(
                        ops,
                        OPEN4_SHARE_ACCESS_READ,
                        Openflag4::NoCreate,
                        OpenClaim4::Null(name),
                        false,
                    )
                    .await
                {
                    Ok((fh, attr, _)) => return Ok(self.open_file(fh, &attr)),
                    // Not a regular file (a directory, a link, a device): the lookup and
                    // `open` below say so as for any other path.
                    Err(e)
                        if matches!(
                            e.status(),
                            Some(
                                Nfsstat4::ISDIR
                                    | Nfsstat4::SYMLINK
                                    | Nfsstat4::WRONG_TYPE
                                    | Nfsstat4::INVAL
                            )
                        ) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            let (fh, attr) = Namespace::lookup_path(self, path).await?;
            Namespace::open(self, &fh, attr, false).await
        })
    }

    fn mkdir<'a>(&'a self, dir: &'a Handle, name: &'a str, mode: u32) -> Fut<'a, (Handle, NsAttr)> {
        Box::pin(async move {
            let attrs = AttrValues {
                mode: Some(mode & 0o7777),
                ..AttrValues::default()
            };
            let op = NfsArgop4::Create(CreateArgs {
                objtype: Createtype4::Dir,
                objname: component(name)?,
                createattrs: attrs.encode(),
            });
            Ok(self.make_in(&fh4(dir)?, op).await?)
        })
    }

    fn symlink<'a>(&'a self, dir: &'a Handle, name: &'a str, target: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            let op = NfsArgop4::Create(CreateArgs {
                objtype: Createtype4::Lnk(Linktext4(Bytes::copy_from_slice(target.as_bytes()))),
                objname: component(name)?,
                createattrs: AttrValues::default().encode(),
            });
            self.make_in(&fh4(dir)?, op).await?;
            Ok(())
        })
    }

    fn readlink<'a>(&'a self, fh: &'a Handle) -> Fut<'a, String> {
        Box::pin(async move {
            let res = self.simple(&fh4(fh)?, NfsArgop4::Readlink(())).await?;
            match res.last() {
                Some(NfsResop4::Readlink(Res4::Ok(t))) => Ok(String::from_utf8_lossy(&t.0).into()),
                _ => Err(Error::Other("READLINK returned nothing".into()).into()),
            }
        })
    }

    fn link<'a>(&'a self, fh: &'a Handle, dir: &'a Handle, name: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            let op = NfsArgop4::Link(component(name)?);
            Ok(self.two_handles(&fh4(fh)?, &fh4(dir)?, op).await?)
        })
    }

    fn remove<'a>(&'a self, dir: &'a Handle, name: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            let op = NfsArgop4::Remove(component(name)?);
            self.simple(&fh4(dir)?, op).await?;
            Ok(())
        })
    }

    fn rmdir<'a>(&'a self, dir: &'a Handle, name: &'a str) -> Fut<'a, ()> {
        // REMOVE takes directories too (RFC 8881 §18.25).
        Namespace::remove(self, dir, name)
    }

    fn rename<'a>(
        &'a self,
        from_dir: &'a Handle,
        from_name: &'a str,
        to_dir: &'a Handle,
        to_name: &'a str,
    ) -> Fut<'a, ()> {
        Box::pin(async move {
            let op = NfsArgop4::Rename(sluice_xdr::nfs4::ops::RenameArgs {
                oldname: component(from_name)?,
                newname: component(to_name)?,
            });
            Ok(self.two_handles(&fh4(from_dir)?, &fh4(to_dir)?, op).await?)
        })
    }

    fn setattr<'a>(&'a self, fh: &'a Handle, attrs: &'a SetAttr) -> Fut<'a, ()> {
        Box::pin(async move {
            Ok(self
                .setattr_with(&fh4(fh)?, Stateid4::ANONYMOUS, attrs)
                .await?)
        })
    }

    fn setattr_attrs<'a>(&'a self, fh: &'a Handle, attrs: &'a SetAttr) -> Fut<'a, NsAttr> {
        Box::pin(async move {
            Ok(self
                .setattr_get(&fh4(fh)?, Stateid4::ANONYMOUS, attrs)
                .await?)
        })
    }

    fn mknod<'a>(
        &'a self,
        dir: &'a Handle,
        name: &'a str,
        kind: SpecialKind,
        mode: u32,
    ) -> Fut<'a, (Handle, NsAttr)> {
        Box::pin(async move {
            let dev = |major, minor| sluice_xdr::nfs4::Specdata4 {
                specdata1: major,
                specdata2: minor,
            };
            let objtype = match kind {
                SpecialKind::Fifo => Createtype4::Fifo,
                SpecialKind::Socket => Createtype4::Sock,
                SpecialKind::Char { major, minor } => Createtype4::Chr(dev(major, minor)),
                SpecialKind::Block { major, minor } => Createtype4::Blk(dev(major, minor)),
            };
            let attrs = AttrValues {
                mode: Some(mode & 0o7777),
                ..AttrValues::default()
            };
            let op = NfsArgop4::Create(CreateArgs {
                objtype,
                objname: component(name)?,
                createattrs: attrs.encode(),
            });
            Ok(self.make_in(&fh4(dir)?, op).await?)
        })
    }

    fn statfs<'a>(&'a self, fh: &'a Handle) -> Fut<'a, FsStat> {
        Box::pin(async move {
            let fh = &fh4(fh)?;
            let bits = Bitmap4::from_bits(&[
                num::FILES_AVAIL,
                num::FILES_FREE,
                num::FILES_TOTAL,
                num::SPACE_AVAIL,
                num::SPACE_FREE,
                num::SPACE_TOTAL,
            ]);
            let put = if fh.0.is_empty() {
                NfsArgop4::Putrootfh(())
            } else {
                NfsArgop4::Putfh(fh.clone())
            };
            let res = self
                .compound(vec![put, NfsArgop4::Getattr(bits)])
                .await?
                .ok()?;
            let Some(NfsResop4::Getattr(Res4::Ok(f))) = res.last() else {
                return Err(Error::Other("GETATTR returned nothing".into()).into());
            };
            let v = AttrValues::decode(f).map_err(Error::from)?.values;
            Ok(FsStat {
                total_bytes: v.space_total.unwrap_or(0),
                free_bytes: v.space_free.unwrap_or(0),
                avail_bytes: v.space_avail.unwrap_or(0),
                total_files: v.files_total.unwrap_or(0),
                free_files: v.files_free.unwrap_or(0),
                avail_files: v.files_avail.unwrap_or(0),
            })
        })
    }

    fn write_delegated(&self, fh: &Handle) -> bool {
        h4(fh).is_some_and(|fh| Client::write_delegated(self, &fh))
    }
    fn set_write_back(&self, hook: crate::namespace::WriteBack) {
        Client::set_write_back(self, hook)
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
        false
    }
    fn connections(&self) -> (usize, Option<String>) {
        Client::connections(self)
    }
    fn shutdown(&self) -> Fut<'_, ()> {
        Box::pin(async move {
            Client::shutdown(self).await;
            Ok(())
        })
    }

    fn getxattr<'a>(&'a self, fh: &'a Handle, name: &'a [u8]) -> Fut<'a, Vec<u8>> {
        Box::pin(async move { Ok(Client::getxattr(self, &fh4(fh)?, name).await?) })
    }
    fn setxattr<'a>(
        &'a self,
        fh: &'a Handle,
        name: &'a [u8],
        value: &'a [u8],
        how: XattrSet,
    ) -> Fut<'a, ()> {
        Box::pin(async move { Ok(Client::setxattr(self, &fh4(fh)?, name, value, how).await?) })
    }
    fn listxattrs<'a>(&'a self, fh: &'a Handle) -> Fut<'a, Vec<Vec<u8>>> {
        Box::pin(async move { Ok(Client::listxattrs(self, &fh4(fh)?).await?) })
    }
    fn removexattr<'a>(&'a self, fh: &'a Handle, name: &'a [u8]) -> Fut<'a, ()> {
        Box::pin(async move { Ok(Client::removexattr(self, &fh4(fh)?, name).await?) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_xdr::nfs4::{Fsid4, Ftype4, Specdata4};

    #[test]
    fn numeric_owners_map_to_ids_and_names_to_nobody() {
        let s = |x: &str| Utf8Str(Bytes::copy_from_slice(x.as_bytes()));
        assert_eq!(owner_id(Some(&s("1000"))), 1000);
        assert_eq!(owner_id(Some(&s("0@example.com"))), 0);
        assert_eq!(owner_id(Some(&s("alice@example.com"))), NOBODY_ID);
        assert_eq!(owner_id(None), NOBODY_ID);
    }

    #[test]
    fn fattr4_maps_to_the_neutral_attributes() {
        let v = AttrValues {
            ftype: Some(Ftype4::DIR),
            mode: Some(0o755),
            numlinks: Some(3),
            owner: Some(Utf8Str(Bytes::from_static(b"12"))),
            owner_group: Some(Utf8Str(Bytes::from_static(b"34"))),
            size: Some(4096),
            space_used: Some(8192),
            rawdev: Some(Specdata4 {
                specdata1: 1,
                specdata2: 2,
            }),
            fsid: Some(Fsid4 { major: 7, minor: 0 }),
            fileid: Some(99),
            change: Some(41),
            time_modify: Some(Nfstime4 {
                seconds: -5,
                nseconds: 1,
            }),
            time_access: Some(Nfstime4 {
                seconds: 1 << 40,
                nseconds: 2,
            }),
            ..AttrValues::default()
        };
        let a = attr_of_fattr(&v.encode()).unwrap();
        assert_eq!(a.ftype, FileType::DIR);
        assert_eq!(a.change, Some(41), "the change attribute is kept");
        assert_eq!((a.mode, a.nlink, a.uid, a.gid), (0o755, 3, 12, 34));
        assert_eq!((a.size, a.used, a.fileid, a.fsid), (4096, 8192, 99, 7));
        assert_eq!((a.rdev.major, a.rdev.minor), (1, 2));
        assert_eq!(a.mtime.seconds, -5, "before 1970 is kept, not clamped");
        assert_eq!(a.atime.seconds, 1 << 40, "past 2106 is kept, not clamped");
    }

    #[test]
    fn set_attributes_map_to_settable_attributes() {
        let v = sattr_values(&SetAttr {
            mode: Some(0o10644),
            uid: Some(5),
            gid: None,
            size: Some(0),
            atime: SetTime::ServerTime,
            mtime: SetTime::ClientTime(Time {
                seconds: 10,
                nseconds: 3,
            }),
        });
        assert_eq!(v.mode, Some(0o644), "only permission bits");
        assert_eq!(v.owner.as_deref(), Some(&b"5"[..]));
        assert!(v.owner_group.is_none());
        assert_eq!(v.size, Some(0));
        assert_eq!(v.time_access_set, Some(Settime4::ServerTime));
        assert_eq!(
            v.time_modify_set,
            Some(Settime4::ClientTime(Nfstime4 {
                seconds: 10,
                nseconds: 3
            }))
        );
        assert!(v.time_access.is_none() && v.ftype.is_none());
    }

    #[test]
    fn v4_statuses_read_as_the_same_v3_status() {
        use sluice_xdr::nfs4::ops::Opnum4;
        let e = |s| {
            crate::namespace::Error::from(Error::Status {
                op: Opnum4::LOOKUP,
                status: s,
            })
        };
        assert_eq!(e(Nfsstat4::NOENT).status(), Some(Status::NOENT));
        assert_eq!(e(Nfsstat4::EXIST).status(), Some(Status::EXIST));
        assert_eq!(e(Nfsstat4::NOTDIR).status(), Some(Status::NOTDIR));
        assert_eq!(e(Nfsstat4::NOTEMPTY).status(), Some(Status::NOTEMPTY));
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
