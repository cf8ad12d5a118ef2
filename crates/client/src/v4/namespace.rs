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
//!
//! Attributes come back as `fattr4` and are mapped to the v3 [`Fattr3`] here (see
//! [`crate::namespace`] for the mapping's rules).

use super::{
    component, find_fh, Attr, Client, Error, Fh, OpenClaim4, Openflag4, OPEN4_SHARE_ACCESS_BOTH,
    OPEN4_SHARE_ACCESS_READ,
};
use crate::file::File;
use crate::namespace::{
    CreateMode, Cursor, Entry, FsStat, Fut, Handle, Namespace, OpenFile, ProtoVersion, SpecialKind,
    NOBODY_ID,
};
use crate::proto::FileProtocol;
use crate::stats::{ClientStats, ReadStats};
use crate::transport::TransportStats;
use crate::url::NfsUrl;
use bytes::Bytes;
use sluice_xdr::nfs3::{Fattr3, Ftype3, Nfstime3, Sattr3, SetTime, Specdata3};
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

/// `fattr4` as the v3 attribute struct (see [`crate::namespace`]).
pub fn fattr3(f: &Fattr4) -> Result<Fattr3, Error> {
    Ok(fattr3_of(&AttrValues::decode(f)?.values))
}

fn fattr3_of(v: &AttrValues) -> Fattr3 {
    let time = |t: &Option<Nfstime4>| {
        let t = t.clone().unwrap_or_default();
        Nfstime3 {
            seconds: t.seconds.clamp(0, i64::from(u32::MAX)) as u32,
            nseconds: t.nseconds,
        }
    };
    Fattr3 {
        ftype: Ftype3(v.ftype.unwrap_or_default().0),
        mode: v.mode.unwrap_or(0),
        nlink: v.numlinks.unwrap_or(0),
        uid: owner_id(v.owner.as_ref()),
        gid: owner_id(v.owner_group.as_ref()),
        size: v.size.unwrap_or(0),
        used: v.space_used.unwrap_or(0),
        rdev: v
            .rawdev
            .as_ref()
            .map(|r| Specdata3 {
                major: r.specdata1,
                minor: r.specdata2,
            })
            .unwrap_or_default(),
        // v3's fsid is one number: the major, with the minor folded in.
        fsid: v
            .fsid
            .as_ref()
            .map_or(0, |f| f.major ^ f.minor.rotate_left(32)),
        fileid: v.fileid.unwrap_or(0),
        atime: time(&v.time_access),
        mtime: time(&v.time_modify),
        ctime: time(&v.time_metadata),
    }
}

/// `"1000"` or `"1000@domain"` → 1000; a name → [`NOBODY_ID`].
pub fn owner_id(owner: Option<&Utf8Str>) -> u32 {
    let Some(o) = owner else { return NOBODY_ID };
    let s = String::from_utf8_lossy(o);
    let id = s.split('@').next().unwrap_or("");
    id.parse().unwrap_or(NOBODY_ID)
}

/// [`Sattr3`] as `fattr4` for SETATTR or CREATE (owners as numeric strings).
pub fn sattr_values(a: &Sattr3) -> AttrValues {
    let time = |t: SetTime| match t {
        SetTime::DontChange => None,
        SetTime::ServerTime => Some(Settime4::ServerTime),
        SetTime::ClientTime(t) => Some(Settime4::ClientTime(Nfstime4 {
            seconds: i64::from(t.seconds),
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

fn fh4(h: &Handle) -> Result<&NfsFh4, crate::namespace::Error> {
    match h {
        Handle::V4(h) => Ok(h),
        Handle::V3(_) => Err(crate::namespace::Error::other(
            "a file handle of another NFS version",
        )),
    }
}

/// The last GETATTR result, as `Fattr3`.
fn find_fattr3(res: &[NfsResop4]) -> Result<Fattr3, Error> {
    res.iter()
        .rev()
        .find_map(|r| match r {
            NfsResop4::Getattr(Res4::Ok(f)) => Some(fattr3(f)),
            _ => None,
        })
        .unwrap_or_else(|| Err(Error::Other("the reply has no attributes".into())))
}

impl Attr {
    /// As the v3 attribute struct (fsid and rawdev, not asked for, zero).
    pub fn to_fattr3(&self) -> Fattr3 {
        let id = |s: &str| owner_id(Some(&Utf8Str(Bytes::copy_from_slice(s.as_bytes()))));
        let time = |t: &Nfstime4| Nfstime3 {
            seconds: t.seconds.clamp(0, i64::from(u32::MAX)) as u32,
            nseconds: t.nseconds,
        };
        Fattr3 {
            ftype: Ftype3(self.ftype.0),
            mode: self.mode,
            nlink: self.numlinks,
            uid: id(&self.owner),
            gid: id(&self.owner_group),
            size: self.size,
            used: self.space_used,
            rdev: Specdata3::default(),
            fsid: 0,
            fileid: self.fileid,
            atime: time(&self.atime),
            mtime: time(&self.mtime),
            ctime: time(&self.ctime),
        }
    }
}

impl Client {
    /// SETATTR under the open's stateid (a size change must present one, RFC 8881 §18.30).
    pub async fn setattr_open(&self, fh: &Fh, attrs: &Sattr3) -> Result<(), Error> {
        self.setattr_with(&fh.fh, fh.stateid, attrs).await
    }

    /// SETATTR under `stateid` and GETATTR after it, in one COMPOUND: the attributes after.
    pub async fn setattr_get(
        &self,
        fh: &NfsFh4,
        stateid: Stateid4,
        attrs: &Sattr3,
    ) -> Result<Fattr3, Error> {
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
        find_fattr3(&res)
    }

    async fn setattr_with(
        &self,
        fh: &NfsFh4,
        stateid: Stateid4,
        attrs: &Sattr3,
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
    pub(super) async fn open_at(
        &self,
        fh: &NfsFh4,
        access: u32,
        openhow: Openflag4,
        claim: OpenClaim4,
    ) -> Result<(Fh, Attr), Error> {
        self.open_after(vec![NfsArgop4::Putfh(fh.clone())], access, openhow, claim)
            .await
    }

    /// [`Client::open_at`] with the ops that make the current filehandle spelled out: PUTFH,
    /// or a whole path walk (PUTROOTFH, LOOKUP...) for [`Namespace::open_path`].
    async fn open_after(
        &self,
        mut ops: Vec<NfsArgop4>,
        access: u32,
        openhow: Openflag4,
        claim: OpenClaim4,
    ) -> Result<(Fh, Attr), Error> {
        let clientid = self.inner.session.lock().expect("session lock").clientid;
        let n = self.inner.opens.fetch_add(1, Ordering::Relaxed);
        let owner = format!("open-{n}").into_bytes();
        // Without a back channel a delegation could never be recalled: ask for none. A
        // writer asks for none either: a write delegation is no use to this client (see
        // `deleg`: write delegations).
        let writes = access & sluice_xdr::nfs4::ops::OPEN4_SHARE_ACCESS_WRITE != 0;
        let want = if self.back_channel_up() && !writes {
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
        let res = self.compound(ops).await?.ok()?;
        let Some(open) = res.iter().find_map(|r| match r {
            NfsResop4::Open(Res4::Ok(o)) => Some(o),
            _ => None,
        }) else {
            return Err(Error::Other("OPEN returned no result".into()));
        };
        let fhandle = find_fh(&res)?;
        let attr = super::find_attr(&res)?;
        // Recorded (returned at the last close or on recall), or returned at once.
        let delegation = self
            .delegation_granted(&fhandle, &open.delegation, Some((attr.size, attr.change)))
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
        Ok((fh, attr))
    }

    /// `ops` after PUTFH `dir`, ending with GETFH and GETATTR: the new object.
    async fn make_in(
        &self,
        dir: &NfsFh4,
        op: NfsArgop4,
    ) -> Result<(Handle, sluice_xdr::nfs3::Fattr3), Error> {
        let res = self
            .compound(vec![
                NfsArgop4::Putfh(dir.clone()),
                op,
                NfsArgop4::Getfh(()),
                NfsArgop4::Getattr(ns_attr_request()),
            ])
            .await?
            .ok()?;
        Ok((Handle::V4(find_fh(&res)?), find_fattr3(&res)?))
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
            let attr = fattr3_of(&v);
            out.push(Entry {
                name: String::from_utf8_lossy(&e.name).into_owned(),
                cookie: e.cookie,
                fileid: attr.fileid,
                node: v.filehandle.map(|h| (Handle::V4(h), attr)),
            });
        }
        Ok(out)
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
        Handle::V4(NfsFh4(Bytes::new()))
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

    fn getattr<'a>(&'a self, fh: &'a Handle) -> Fut<'a, Fattr3> {
        Box::pin(async move {
            let fh = fh4(fh)?;
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
            Ok(find_fattr3(&res)?)
        })
    }

    fn lookup<'a>(&'a self, dir: &'a Handle, name: &'a str) -> Fut<'a, (Handle, Fattr3)> {
        Box::pin(async move {
            let dir = fh4(dir)?;
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
            Ok((Handle::V4(find_fh(&res)?), find_fattr3(&res)?))
        })
    }

    fn lookup_path<'a>(&'a self, path: &'a str) -> Fut<'a, (Handle, Fattr3)> {
        Box::pin(async move {
            // One COMPOUND for the whole walk; its GETATTR asked for ATTR_BITS, so fsid and
            // rawdev are left zero rather than costing another round trip.
            let (fh, attr) = Client::lookup(self, path).await?;
            Ok((Handle::V4(fh), attr.to_fattr3()))
        })
    }

    fn read_dir_page<'a>(&'a self, dir: &'a Handle, cursor: &'a mut Cursor) -> Fut<'a, Vec<Entry>> {
        Box::pin(async move { Ok(self.page4(fh4(dir)?, cursor).await?) })
    }

    fn create<'a>(
        &'a self,
        dir: &'a Handle,
        name: &'a str,
        mode: u32,
        how: CreateMode,
    ) -> Fut<'a, OpenFile> {
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
            let (fh, attr) = self
                .open_at(
                    fh4(dir)?,
                    OPEN4_SHARE_ACCESS_BOTH,
                    Openflag4::Create(how),
                    OpenClaim4::Null(component(name)?),
                )
                .await?;
            Ok(OpenFile::V4(File::new(self.clone(), fh, attr)))
        })
    }

    fn open<'a>(&'a self, fh: &'a Handle, attr: Fattr3, write: bool) -> Fut<'a, OpenFile> {
        Box::pin(async move {
            if attr.ftype == Ftype3::DIR {
                return Err(crate::namespace::Error::local(
                    sluice_xdr::nfs3::Nfsstat3::ISDIR,
                ));
            }
            let access = if write {
                OPEN4_SHARE_ACCESS_BOTH
            } else {
                OPEN4_SHARE_ACCESS_READ
            };
            let (fh, attr) = self
                .open_at(fh4(fh)?, access, Openflag4::NoCreate, OpenClaim4::Fh)
                .await?;
            Ok(OpenFile::V4(File::new(self.clone(), fh, attr)))
        })
    }

    fn open_path<'a>(&'a self, path: &'a str) -> Fut<'a, OpenFile> {
        Box::pin(async move {
            let comps: Vec<&str> = crate::client::components(path).collect();
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
                    )
                    .await
                {
                    Ok((fh, attr)) => return Ok(OpenFile::V4(File::new(self.clone(), fh, attr))),
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

    fn mkdir<'a>(&'a self, dir: &'a Handle, name: &'a str, mode: u32) -> Fut<'a, (Handle, Fattr3)> {
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
            Ok(self.make_in(fh4(dir)?, op).await?)
        })
    }

    fn symlink<'a>(&'a self, dir: &'a Handle, name: &'a str, target: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            let op = NfsArgop4::Create(CreateArgs {
                objtype: Createtype4::Lnk(Linktext4(Bytes::copy_from_slice(target.as_bytes()))),
                objname: component(name)?,
                createattrs: AttrValues::default().encode(),
            });
            self.make_in(fh4(dir)?, op).await?;
            Ok(())
        })
    }

    fn readlink<'a>(&'a self, fh: &'a Handle) -> Fut<'a, String> {
        Box::pin(async move {
            let res = self.simple(fh4(fh)?, NfsArgop4::Readlink(())).await?;
            match res.last() {
                Some(NfsResop4::Readlink(Res4::Ok(t))) => Ok(String::from_utf8_lossy(&t.0).into()),
                _ => Err(Error::Other("READLINK returned nothing".into()).into()),
            }
        })
    }

    fn link<'a>(&'a self, fh: &'a Handle, dir: &'a Handle, name: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            let op = NfsArgop4::Link(component(name)?);
            Ok(self.two_handles(fh4(fh)?, fh4(dir)?, op).await?)
        })
    }

    fn remove<'a>(&'a self, dir: &'a Handle, name: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            let op = NfsArgop4::Remove(component(name)?);
            self.simple(fh4(dir)?, op).await?;
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
            Ok(self.two_handles(fh4(from_dir)?, fh4(to_dir)?, op).await?)
        })
    }

    fn setattr<'a>(&'a self, fh: &'a Handle, attrs: &'a Sattr3) -> Fut<'a, ()> {
        Box::pin(async move {
            Ok(self
                .setattr_with(fh4(fh)?, Stateid4::ANONYMOUS, attrs)
                .await?)
        })
    }

    fn setattr_attrs<'a>(&'a self, fh: &'a Handle, attrs: &'a Sattr3) -> Fut<'a, Fattr3> {
        Box::pin(async move {
            Ok(self
                .setattr_get(fh4(fh)?, Stateid4::ANONYMOUS, attrs)
                .await?)
        })
    }

    fn mknod<'a>(
        &'a self,
        dir: &'a Handle,
        name: &'a str,
        kind: SpecialKind,
        mode: u32,
    ) -> Fut<'a, (Handle, Fattr3)> {
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
            Ok(self.make_in(fh4(dir)?, op).await?)
        })
    }

    fn statfs<'a>(&'a self, fh: &'a Handle) -> Fut<'a, FsStat> {
        Box::pin(async move {
            let fh = fh4(fh)?;
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
    fn fattr4_maps_to_the_v3_attributes() {
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
        let a = fattr3(&v.encode()).unwrap();
        assert_eq!(a.ftype, Ftype3::DIR);
        assert_eq!((a.mode, a.nlink, a.uid, a.gid), (0o755, 3, 12, 34));
        assert_eq!((a.size, a.used, a.fileid, a.fsid), (4096, 8192, 99, 7));
        assert_eq!((a.rdev.major, a.rdev.minor), (1, 2));
        assert_eq!(a.mtime.seconds, 0, "before 1970 clamps to 0");
        assert_eq!(
            a.atime.seconds,
            u32::MAX,
            "past 2106 clamps to the last second"
        );
    }

    #[test]
    fn sattr3_maps_to_settable_attributes() {
        let v = sattr_values(&Sattr3 {
            mode: Some(0o10644),
            uid: Some(5),
            gid: None,
            size: Some(0),
            atime: SetTime::ServerTime,
            mtime: SetTime::ClientTime(Nfstime3 {
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
}
