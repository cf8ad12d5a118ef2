//! File handles and the pseudo tree in the COMPOUND processor: PUTFH, PUTROOTFH, PUTPUBFH,
//! LOOKUP, LOOKUPP, and the ops that read what a handle names (GETATTR, VERIFY, NVERIFY,
//! ACCESS, READDIR, READLINK, SECINFO, SECINFO_NO_NAME), on a pseudo-tree node or an
//! export's file.
//!
//! The current and saved handles are either a pseudo-tree node or an export's handle (with
//! the export's index). LOOKUP of a pseudo node that is an export's path crosses into that
//! export's root, where the fsid changes (§7.4); LOOKUPP from an export root comes back to the
//! pseudo tree. Every op on an export handle passes the export's gate first: the client's
//! rules (no rule matching its address: NFS4ERR_ACCESS, as v3 answers ACCES), `secure`
//! (an unprivileged source port: NFS4ERR_PERM, knfsd's answer), `xprtsec=` (see below) and
//! squashing: one gate for all, [`crate::backend::gate::admit`]. Only AUTH_SYS and AUTH_NONE
//! reach this layer and every export accepts both, so SECINFO and SECINFO_NO_NAME answer those
//! two.
//!
//! # Transport security: which op answers NFS4ERR_WRONGSEC
//! A connection whose transport security (none, tls, mtls; RFC 9289) is not in an export's
//! `xprtsec=` list is refused the export with NFS4ERR_WRONGSEC, knfsd's status for it
//! (`check_xprtsec_policy`). The gate refuses every op on a handle of that export, so a handle
//! learnt over TLS is useless in plaintext; RFC 8881 §2.6.3.1 says which op is to *answer*:
//!
//! ```text
//!   PUTFH/PUTROOTFH/PUTPUBFH/RESTOREFH (refused export), then
//!     nothing, another put, SAVEFH ─► OK (the handle is not used here)       §2.6.3.1.1.1,2,6
//!     LOOKUP, OPEN, LOOKUPP        ─► they answer WRONGSEC for what they reach  §2.6.3.1.1.3,4
//!     SECINFO, SECINFO_NO_NAME     ─► the flavors, never WRONGSEC             §2.6.3.1.1.5
//!     anything else                ─► the put op answers WRONGSEC            §2.6.3.1.1.7
//!   LOOKUP from the pseudo tree into a refused export ─► WRONGSEC (crossing into it)
//! ```
//!
//! The put op's answer is [`Nfs4::put_wrongsec`], called by the evaluation loop with the next
//! op (knfsd's `need_wrongsec_check`). SECINFO of a name in a refused export does not look the
//! name up: it answers the export's flavors for any name, so a plaintext client learns nothing
//! of the export's contents (knfsd answers WRONGSEC there, which §2.6.3.1.1.5 forbids and the
//! Linux client tolerates). The flavors cannot say "use TLS" (RFC 9289 defines no
//! pseudo-flavor for it); a client learns that from the WRONGSEC itself. READDIR of the pseudo
//! tree leaves out exports the caller may not use, a refused transport included.
//!

use super::{check_name, nfs_fh4, Call, Ctx, Fh, FreshAttr, Nfs4, FLAVORS};
use crate::backend::gate::{self, Program, Refusal};
use crate::backend::{Attr, Caller, ChangeKind, FileHandle, FileSystem, FileType, FsStat};
use crate::exports::identity;
use crate::io::writebehind::SizeFix;
use crate::nfs4::map::{self, AttrCtx};
use bytes::Bytes;
use sluice_nfs4state::delegations::table::GetattrView;
use sluice_nfs4state::pseudo::{Lookup, NodeId, PseudoFs};
use sluice_nfs4state::recovery::parked::{self};
use sluice_xdr::nfs4::attrs::{num as attr_num, AttrValues};
use sluice_xdr::nfs4::ops::{
    AccessResOk, Entry4, Opnum4, ReaddirArgs, ReaddirResOk, Secinfo4, SecinfoList, ACCESS4_MODIFY,
    ACCESS4_READ, MAX_DIR_ENTRIES,
};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{Bitmap4, Component4, Fattr4, Linktext4, NfsFh4};
// `core::net`: an address is plain data here; this module opens no sockets.

impl Nfs4 {
    /// The export at `idx` as this caller may use it: its file system and the caller after
    /// the export's rules and squashing (see the module notes).
    pub(super) fn gate(
        &self,
        call: &Call<'_>,
        idx: usize,
    ) -> Result<(&dyn FileSystem, Caller), Nfsstat4> {
        let entry = self.exports.get(idx).ok_or(Nfsstat4::STALE)?;
        let caller = gate::admit(
            &entry.export,
            call.addr,
            call.xprtsec,
            identity(call.cred).as_ref(),
            Program::Nfs,
        )
        .map_err(|refusal| match refusal {
            Refusal::NotListed => Nfsstat4::ACCESS,
            Refusal::InsecurePort => Nfsstat4::PERM,
            // knfsd's `check_xprtsec_policy` answer (see the module notes for which ops
            // may send it).
            Refusal::Xprtsec(_) => Nfsstat4::WRONGSEC,
        })?;
        Ok((&*entry.fs, caller))
    }

    /// The root of export `idx`, if the caller may enter it.
    pub(super) fn enter_export(&self, call: &Call<'_>, idx: usize) -> Result<Fh, Nfsstat4> {
        let (fs, _) = self.gate(call, idx)?;
        Ok(Fh::Export {
            idx,
            fh: fs.root_handle(),
        })
    }

    pub(super) fn put_root(&self, call: &Call<'_>, ctx: &mut Ctx) -> Nfsstat4 {
        let root = self.pseudo.root();
        let fh = match self.pseudo.export_at(root) {
            Some(idx) => match self.enter_export(call, idx) {
                Ok(f) => f,
                // A put-filehandle op answers WRONGSEC only as the next op decides
                // (`put_wrongsec`), so the handle is set anyway.
                Err(Nfsstat4::WRONGSEC) => match self.exports.get(idx) {
                    Some(e) => Fh::Export {
                        idx,
                        fh: e.fs.root_handle(),
                    },
                    None => return Nfsstat4::SERVERFAULT,
                },
                Err(s) => return s,
            },
            None => Fh::Pseudo(root),
        };
        ctx.set_current(fh);
        Nfsstat4::OK
    }

    /// RFC 8881 §2.6.3.1.1: the status a put-filehandle op (`op`: PUTFH, PUTROOTFH,
    /// PUTPUBFH, RESTOREFH) that succeeded answers instead, WRONGSEC, when the handle it set
    /// is in an export whose `xprtsec=` refuses this connection and the op after it (`next`)
    /// does not judge the handle itself ([`put_answers_wrongsec`]). `None`: keep the result.
    pub(super) fn put_wrongsec(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        op: Opnum4,
        next: Option<Opnum4>,
    ) -> Option<Nfsstat4> {
        if !is_put_fh(op) || !put_answers_wrongsec(next) {
            return None;
        }
        let Some(Fh::Export { idx, .. }) = ctx.current else {
            return None;
        };
        match self.gate(call, idx) {
            Err(Nfsstat4::WRONGSEC) => Some(Nfsstat4::WRONGSEC),
            // Other refusals keep their place: the op that uses the handle answers them.
            _ => None,
        }
    }

    pub(super) fn put_fh(&self, fh: &NfsFh4) -> Result<Fh, Nfsstat4> {
        if PseudoFs::is_pseudo_handle(&fh.0) {
            return self.pseudo.from_handle(&fh.0).map(Fh::Pseudo);
        }
        let id = crate::backend::export_id_of(&fh.0).ok_or(Nfsstat4::BADHANDLE)?;
        let idx = self
            .exports
            .iter()
            .position(|e| e.fs.export_id() == id)
            .ok_or(Nfsstat4::STALE)?;
        let fh = FileHandle::from_slice(&fh.0).map_err(map::status)?;
        Ok(Fh::Export { idx, fh })
    }

    pub(super) fn lookup(
        &self,
        call: &Call<'_>,
        ctx: &mut Ctx,
        name: &[u8],
    ) -> Result<(), Nfsstat4> {
        check_name(name)?;
        let next = match ctx.current.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)? {
            Fh::Pseudo(n) => match self.pseudo.lookup(*n, name)? {
                Lookup::Pseudo(m) => Fh::Pseudo(m),
                Lookup::Export(idx) => self.enter_export(call, idx)?,
            },
            Fh::Export { idx, fh } => {
                let (fs, caller) = self.gate(call, *idx)?;
                let since = self.wb_epoch();
                let ok = fs
                    .lookup(&caller, fh, name)
                    .map_err(|(e, _)| map::status(e))?;
                let fresh = FreshAttr {
                    fh: ok.fh.clone(),
                    attr: ok.attr,
                    since,
                };
                let next = Fh::Export {
                    idx: *idx,
                    fh: ok.fh,
                };
                ctx.set_current(next);
                ctx.fresh = Some(fresh);
                return Ok(());
            }
        };
        ctx.set_current(next);
        Ok(())
    }

    pub(super) fn lookupp(&self, call: &Call<'_>, ctx: &mut Ctx) -> Result<(), Nfsstat4> {
        let next = match ctx.current.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)? {
            Fh::Pseudo(n) => Fh::Pseudo(self.pseudo.lookupp(*n)?),
            Fh::Export { idx, fh } => {
                let (fs, caller) = self.gate(call, *idx)?;
                let attr = fs.getattr(fh).map_err(map::status)?;
                if attr.ftype != FileType::Directory {
                    return Err(Nfsstat4::NOTDIR);
                }
                if *fh == fs.root_handle() {
                    // Out of the export, back into the pseudo tree (the root of an export of
                    // `/` has no parent: NOENT, as at the pseudo root).
                    Fh::Pseudo(self.pseudo.parent_of_export(*idx).ok_or(Nfsstat4::NOENT)?)
                } else {
                    let ok = fs
                        .lookup(&caller, fh, b"..")
                        .map_err(|(e, _)| map::status(e))?;
                    Fh::Export {
                        idx: *idx,
                        fh: ok.fh,
                    }
                }
            }
        };
        ctx.set_current(next);
        Ok(())
    }

    /// Whether op `op`, which answered NFS4ERR_NOTDIR, must answer NFS4ERR_SYMLINK instead:
    /// it needs a directory and the handle it was given is a symbolic link. RFC 8881 names
    /// SYMLINK for LOOKUP and LOOKUPP (§18.13.3, §18.14.3) and NOTDIR for a directory op's
    /// handle of another type; knfsd answers SYMLINK for every v4 op whose handle is a symlink
    /// where a directory was wanted (`nfsd_mode_check`), and so do we, for the ops that take
    /// a directory: LOOKUP, LOOKUPP, CREATE, OPEN, REMOVE, LINK, READDIR, SECINFO and
    /// SECINFO_NO_NAME (current handle), RENAME (current or saved). Looked up only on the
    /// error path.
    pub(super) fn symlink_for_dir(&self, call: &Call<'_>, ctx: &Ctx, op: Opnum4) -> bool {
        let handles = match op {
            Opnum4::LOOKUP
            | Opnum4::LOOKUPP
            | Opnum4::CREATE
            | Opnum4::OPEN
            | Opnum4::REMOVE
            | Opnum4::LINK
            | Opnum4::READDIR
            | Opnum4::SECINFO
            | Opnum4::SECINFO_NO_NAME => [ctx.current.as_ref(), None],
            Opnum4::RENAME => [ctx.current.as_ref(), ctx.saved.as_ref()],
            _ => return false,
        };
        handles.into_iter().flatten().any(|h| match h {
            Fh::Pseudo(_) => false,
            Fh::Export { idx, fh } => self
                .gate(call, *idx)
                .is_ok_and(|(fs, _)| fs.getattr(fh).is_ok_and(|a| a.ftype == FileType::Symlink)),
        })
    }

    pub(super) fn lease_time_secs(&self) -> u32 {
        u32::try_from(self.state().config().lease.as_secs()).unwrap_or(u32::MAX)
    }

    pub(super) fn getattr(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        req: &Bitmap4,
    ) -> Result<Fattr4, Nfsstat4> {
        let lease_time = self.lease_time_secs();
        match ctx.current.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)? {
            Fh::Pseudo(n) => self.pseudo_fattr(*n, lease_time, ctx.minor, req),
            Fh::Export { idx, fh } => {
                let (fs, _) = self.gate(call, *idx)?;
                // Another client's write delegation: its holder's size and change
                // (CB_GETATTR, `deleg.rs`), or NFS4ERR_DELAY while it is asked.
                let asks = req.contains(attr_num::SIZE) || req.contains(attr_num::CHANGE);
                let view = if asks && self.any_delegation() {
                    self.state()
                        .deleg_getattr(call.now, ctx.clientid, &fs.state_key(fh))?
                } else {
                    GetattrView::Server
                };
                let fresh = ctx.fresh.as_ref().filter(|f| f.fh == *fh);
                let attr = self.fetch_attr(fs, fh, fresh, view)?;
                self.fattr_of(fs, *idx, fh, (lease_time, ctx.minor), req, &attr)
            }
        }
    }

    /// READDIR (§18.23) of a pseudo directory (its children; exports the caller may not use
    /// are left out) or an export directory ("." and ".." are not v4 entries).
    pub(super) fn readdir(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        a: &ReaddirArgs,
    ) -> Result<ReaddirResOk, Nfsstat4> {
        if a.cookie == 1 || a.cookie == 2 {
            return Err(Nfsstat4::BAD_COOKIE);
        }
        if map::asks_any(&a.attr_request, map::WRITE_ONLY) {
            return Err(Nfsstat4::INVAL);
        }
        let lease_time = self.lease_time_secs();
        let mut page = DirPage::new(a.maxcount);
        match ctx.current.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)? {
            Fh::Pseudo(n) => {
                let children = self.pseudo.readdir(*n)?;
                let skip = a.cookie.saturating_sub(COOKIE_FIRST - 1);
                for (i, (name, to)) in children.iter().enumerate().skip(skip as usize) {
                    let cookie = i as u64 + COOKIE_FIRST;
                    let attrs = match *to {
                        Lookup::Pseudo(m) => {
                            self.pseudo_fattr(m, lease_time, ctx.minor, &a.attr_request)?
                        }
                        Lookup::Export(idx) => match self.gate(call, idx) {
                            Ok((fs, _)) => {
                                let root = fs.root_handle();
                                self.export_fattr(
                                    fs,
                                    idx,
                                    &root,
                                    lease_time,
                                    ctx.minor,
                                    &a.attr_request,
                                )?
                            }
                            Err(_) => continue,
                        },
                    };
                    let e = Entry4 {
                        cookie,
                        name: Component4(name.clone()),
                        attrs,
                    };
                    if !page.push(e) {
                        break;
                    }
                }
                page.finish(true)
            }
            Fh::Export { idx, fh } => {
                let (fs, caller) = self.gate(call, *idx)?;
                let fsid = map::export_fsid(fs.export_id().0);
                let change_kind = fs.change_kind();
                let clone_blksize = fs.clone_blksize();
                let xattr_support = fs.xattr_support();
                let mut failed = None;
                let ok = fs
                    .readdir(&caller, fh, a.cookie, a.cookieverf, true, &mut |d| {
                        // Parked files are the server's, not the client's (`parked.rs`).
                        if d.name == b"." || d.name == b".." || parked::is_hidden_name(d.name) {
                            return true;
                        }
                        let attrs = match (&d.attr, &d.fh) {
                            (Some(attr), Some(efh)) => {
                                let actx = AttrCtx {
                                    fh: nfs_fh4(efh),
                                    fsid: fsid.clone(),
                                    lease_time,
                                    mounted_on_fileid: None,
                                    fsstat: None,
                                    idmap: &self.idmap,
                                    minor: ctx.minor,
                                    change_kind,
                                    clone_blksize,
                                    xattr_support,
                                };
                                match map::fattr4(attr, &actx, &a.attr_request) {
                                    Ok(f) => f,
                                    Err(s) => {
                                        failed = Some(s);
                                        return false;
                                    }
                                }
                            }
                            // Not looked up (no search permission): the entry's error in
                            // rdattr_error, and what is known without a lookup.
                            _ => AttrValues {
                                rdattr_error: Some(Nfsstat4::ACCESS),
                                fileid: Some(d.fileid),
                                mounted_on_fileid: Some(d.fileid),
                                ..AttrValues::default()
                            }
                            .encode_masked(Some(&a.attr_request)),
                        };
                        page.push(Entry4 {
                            cookie: d.cookie,
                            name: Component4(Bytes::copy_from_slice(d.name)),
                            attrs,
                        })
                    })
                    .map_err(|(e, _)| map::status(e))?;
                if let Some(s) = failed {
                    return Err(s);
                }
                page.ok.cookieverf = ok.cookieverf;
                page.finish(ok.eof)
            }
        }
    }

    pub(super) fn pseudo_fattr(
        &self,
        n: NodeId,
        lease_time: u32,
        minor: u32,
        req: &Bitmap4,
    ) -> Result<Fattr4, Nfsstat4> {
        let subdirs = self.pseudo.readdir(n)?.len();
        let wants_fsstat = map::asks_any(req, map::NEEDS_FSSTAT);
        let actx = AttrCtx {
            fh: NfsFh4(Bytes::copy_from_slice(&self.pseudo.handle(n))),
            fsid: sluice_nfs4state::pseudo::PSEUDO_FSID,
            lease_time,
            mounted_on_fileid: None,
            // The pseudo tree holds no data: zero space, zero files.
            fsstat: wants_fsstat.then_some(FsStat {
                tbytes: 0,
                fbytes: 0,
                abytes: 0,
                tfiles: 0,
                ffiles: 0,
                afiles: 0,
                invarsec: 0,
                attr: None,
            }),
            idmap: &self.idmap,
            minor,
            // The tree's change attribute is its generation, a counter.
            change_kind: ChangeKind::Counter,
            clone_blksize: map::CLONE_BLKSIZE,
            // The pseudo tree is no file system that holds attributes.
            xattr_support: false,
        };
        map::fattr4(
            &map::pseudo_attr(n, subdirs, self.pseudo.generation()),
            &actx,
            req,
        )
    }

    pub(super) fn export_fattr(
        &self,
        fs: &dyn FileSystem,
        idx: usize,
        fh: &FileHandle,
        lease_time: u32,
        minor: u32,
        req: &Bitmap4,
    ) -> Result<Fattr4, Nfsstat4> {
        self.export_fattr_as(fs, idx, fh, (lease_time, minor), req, GetattrView::Server)
    }

    /// [`Nfs4::export_fattr`] with a write delegation holder's size and change over the
    /// server's (`deleg.rs`: CB_GETATTR).
    pub(super) fn export_fattr_as(
        &self,
        fs: &dyn FileSystem,
        idx: usize,
        fh: &FileHandle,
        (lease_time, minor): (u32, u32),
        req: &Bitmap4,
        view: GetattrView,
    ) -> Result<Fattr4, Nfsstat4> {
        let attr = self.fetch_attr(fs, fh, None, view)?;
        self.fattr_of(fs, idx, fh, (lease_time, minor), req, &attr)
    }

    /// Write-behind's epoch now (none without write-behind), to take before a backend call
    /// whose attributes a later GETATTR may use ([`FreshAttr::since`]).
    pub(super) fn wb_epoch(&self) -> Option<u64> {
        self.write_behind.as_ref().map(|wb| wb.epoch())
    }

    /// The attributes GETATTR reports for `fh`: the backend's (or `fresh`, fetched earlier in
    /// this COMPOUND), the size raised for held writes, a delegation holder's size and change.
    fn fetch_attr(
        &self,
        fs: &dyn FileSystem,
        fh: &FileHandle,
        fresh: Option<&FreshAttr>,
        view: GetattrView,
    ) -> Result<Attr, Nfsstat4> {
        let (mut attr, since) = match fresh {
            Some(f) => (f.attr, f.since),
            None => {
                let since = self.wb_epoch();
                (fs.getattr(fh).map_err(map::status)?, since)
            }
        };
        // Writes write-behind holds were acknowledged (UNSTABLE) but are not in the backend
        // yet: the size must show them, as v3's attributes do (datapath::fix_post_op).
        if let (Some(wb), Some(since)) = (&self.write_behind, since) {
            if wb.fix_size(fh.as_bytes(), &mut attr, since) == SizeFix::Uncertain {
                attr = fs.getattr(fh).map_err(map::status)?;
            }
        }
        if let GetattrView::Holder { size, change_bump } = view {
            attr.size = size.unwrap_or(attr.size);
            attr.change = attr.change.wrapping_add(change_bump);
        }
        Ok(attr)
    }

    /// The FATTR4 of `attr`, the attributes of `fh` in export `idx`, as `req` asks.
    fn fattr_of(
        &self,
        fs: &dyn FileSystem,
        idx: usize,
        fh: &FileHandle,
        (lease_time, minor): (u32, u32),
        req: &Bitmap4,
        attr: &Attr,
    ) -> Result<Fattr4, Nfsstat4> {
        let mounted_on_fileid = if *fh == fs.root_handle() {
            self.pseudo
                .node_of_export(idx)
                .map(|n| map::pseudo_attr(n, 0, 0).fileid)
        } else {
            None
        };
        let fsstat = if map::asks_any(req, map::NEEDS_FSSTAT) {
            Some(fs.fsstat(fh).map_err(|(e, _)| map::status(e))?)
        } else {
            None
        };
        let actx = AttrCtx {
            fh: nfs_fh4(fh),
            fsid: map::export_fsid(fs.export_id().0),
            lease_time,
            mounted_on_fileid,
            fsstat,
            idmap: &self.idmap,
            minor,
            change_kind: fs.change_kind(),
            clone_blksize: fs.clone_blksize(),
            xattr_support: fs.xattr_support(),
        };
        map::fattr4(attr, &actx, req)
    }

    /// READLINK (§18.24).
    pub(super) fn readlink(&self, call: &Call<'_>, ctx: &Ctx) -> Result<Linktext4, Nfsstat4> {
        match ctx.current.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)? {
            // Pseudo nodes are directories: ISDIR, as for an export's directory below (it was
            // INVAL here, so READLINK of `/` answered differently by where the export is).
            Fh::Pseudo(_) => Err(Nfsstat4::ISDIR),
            Fh::Export { idx, fh } => {
                let (fs, _) = self.gate(call, *idx)?;
                let attr = fs.getattr(fh).map_err(map::status)?;
                if attr.ftype != FileType::Symlink {
                    // §18.24.3: INVAL for anything but a symlink (ISDIR for a directory).
                    return Err(if attr.ftype == FileType::Directory {
                        Nfsstat4::ISDIR
                    } else {
                        Nfsstat4::INVAL
                    });
                }
                let (target, _) = fs.readlink(fh).map_err(|(e, _)| map::status(e))?;
                Ok(Linktext4(Bytes::from(target)))
            }
        }
    }

    /// SECINFO (§18.29): the flavors for `name` in the current directory; like
    /// SECINFO_NO_NAME it consumes the current handle.
    pub(super) fn secinfo(
        &self,
        call: &Call<'_>,
        ctx: &mut Ctx,
        name: &[u8],
    ) -> Result<SecinfoList, Nfsstat4> {
        // §2.6.3.1.1.5: never WRONGSEC. A name in (or into) an export this connection may
        // not use is not looked up (its existence is not told in plaintext); the flavors are
        // the same for every name of an export.
        not_wrongsec(self.lookup(call, ctx, name))?;
        self.secinfo_no_name(call, ctx, 0)
    }

    /// VERIFY / NVERIFY (§18.31, §18.15): whether the current object's attributes encode
    /// exactly as the client's. An attribute not supported is ATTRNOTSUPP; rdattr_error and
    /// the write-only ones are INVAL.
    pub(super) fn same_attrs(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        theirs: &Fattr4,
    ) -> Result<bool, Nfsstat4> {
        for bit in theirs.mask.iter() {
            if !map::is_supported(ctx.minor, bit) {
                return Err(Nfsstat4::ATTRNOTSUPP);
            }
            if bit == sluice_xdr::nfs4::attrs::num::RDATTR_ERROR || map::WRITE_ONLY.contains(&bit) {
                return Err(Nfsstat4::INVAL);
            }
        }
        let ours = self.getattr(call, ctx, &theirs.mask)?;
        Ok(ours.mask.same_bits(&theirs.mask) && ours.vals == theirs.vals)
    }

    pub(super) fn access(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        asked: u32,
    ) -> Result<AccessResOk, Nfsstat4> {
        use sluice_xdr::nfs4::ops::{
            ACCESS4_DELETE, ACCESS4_EXECUTE, ACCESS4_EXTEND, ACCESS4_LOOKUP,
        };
        let known = ACCESS4_READ
            | ACCESS4_LOOKUP
            | ACCESS4_MODIFY
            | ACCESS4_EXTEND
            | ACCESS4_DELETE
            | ACCESS4_EXECUTE;
        let mut supported = asked & known;
        let access = match ctx.current.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)? {
            // Read-only directories anyone may list and traverse.
            Fh::Pseudo(_) => supported & (ACCESS4_READ | ACCESS4_LOOKUP | ACCESS4_EXECUTE),
            Fh::Export { idx, fh } => {
                let (fs, caller) = self.gate(call, *idx)?;
                // RFC 8276 §8.4.1.1: the xattr bits exist in 4.2, where the file system has
                // user attributes (`xattr.rs`).
                let xattr_bits = asked & super::xattr::ACCESS4_XATTR_BITS;
                if ctx.minor >= 2 && fs.xattr_support() {
                    supported |= xattr_bits;
                }
                let wanted = supported | super::xattr::access_needs(supported);
                // The neutral access bits have v3's values, which are v4's.
                let (granted, _) = fs
                    .access(&caller, fh, wanted & known)
                    .map_err(|(e, _)| map::status(e))?;
                (granted | super::xattr::access_grants(granted)) & supported
            }
        };
        Ok(AccessResOk { supported, access })
    }

    /// SECINFO_NO_NAME (§18.45): the flavors for the current handle (style 0) or its parent
    /// (style 1). Like SECINFO it consumes the current handle (§2.6.3.1.1.8).
    pub(super) fn secinfo_no_name(
        &self,
        call: &Call<'_>,
        ctx: &mut Ctx,
        style: u32,
    ) -> Result<SecinfoList, Nfsstat4> {
        const SECINFO_STYLE4_CURRENT_FH: u32 = 0;
        const SECINFO_STYLE4_PARENT: u32 = 1;
        match style {
            // §2.6.3.1.1.5: SECINFO_NO_NAME never answers WRONGSEC (knfsd does; the Linux
            // client copes with it, the RFC forbids it). The flavors do not depend on the
            // transport, so a connection `xprtsec=` refuses gets them too.
            SECINFO_STYLE4_CURRENT_FH => {
                if let Some(Fh::Export { idx, .. }) = &ctx.current {
                    not_wrongsec(self.gate(call, *idx).map(|_| ()))?;
                }
            }
            SECINFO_STYLE4_PARENT => not_wrongsec(self.lookupp(call, ctx))?,
            _ => return Err(Nfsstat4::INVAL),
        }
        // SECINFO_NO_NAME consumes the handle (§18.45.3), and the stateid goes with it.
        ctx.current = None;
        ctx.stateid = None;
        Ok(SecinfoList(
            FLAVORS.iter().map(|&f| Secinfo4::Flavor(f)).collect(),
        ))
    }
}

/// Whether `op` is a put-filehandle op in RFC 8881 §2.6.3.1.1's sense: one that sets the
/// current handle from outside the current one (knfsd's `OP_IS_PUTFH_LIKE`).
pub(super) fn is_put_fh(op: Opnum4) -> bool {
    matches!(
        op,
        Opnum4::PUTFH | Opnum4::PUTROOTFH | Opnum4::PUTPUBFH | Opnum4::RESTOREFH
    )
}

/// RFC 8881 §2.6.3.1.1: whether a put-filehandle op followed by `next` answers WRONGSEC for
/// its handle itself. Not when nothing follows (§2.6.3.1.1.6: the handle is not used), nor
/// before another put-filehandle op (§2.6.3.1.1.2: it replaces the handle), SAVEFH
/// (§2.6.3.1.1.1: judged when restored), LOOKUP or OPEN (§2.6.3.1.1.3) and LOOKUPP
/// (§2.6.3.1.1.4), which judge the object they reach, or SECINFO and SECINFO_NO_NAME
/// (§2.6.3.1.1.5), which are how a client asks what to use. Before anything else
/// (§2.6.3.1.1.7) the put-filehandle op answers it, so that no other op needs WRONGSEC among
/// its errors. knfsd's `need_wrongsec_check` is the same with `OP_HANDLES_WRONGSEC` on the
/// exempt ops, except that it also checks a put before another put.
pub(super) fn put_answers_wrongsec(next: Option<Opnum4>) -> bool {
    match next {
        None | Some(Opnum4::ILLEGAL) => false,
        Some(op) if is_put_fh(op) => false,
        Some(
            Opnum4::SAVEFH
            | Opnum4::LOOKUP
            | Opnum4::OPEN
            | Opnum4::LOOKUPP
            | Opnum4::SECINFO
            | Opnum4::SECINFO_NO_NAME,
        ) => false,
        Some(_) => true,
    }
}

/// A WRONGSEC from the gate read as success, for SECINFO and SECINFO_NO_NAME (§2.6.3.1.1.5).
fn not_wrongsec(r: Result<(), Nfsstat4>) -> Result<(), Nfsstat4> {
    match r {
        Err(Nfsstat4::WRONGSEC) => Ok(()),
        r => r,
    }
}

/// Cookies 1 and 2 are never handed out (RFC 8881 §18.23.3 reserves them: some clients use
/// them for "." and ".."); entry cookies start at 3.
const COOKIE_FIRST: u64 = 3;

/// The answer being built by READDIR: entries until `maxcount` or the entry bound.
struct DirPage {
    ok: ReaddirResOk,
    bytes: usize,
    bytes_max: usize,
    /// An entry did not fit (the page is full).
    full: bool,
}

impl DirPage {
    fn new(maxcount: u32) -> Self {
        // The reply's own bytes: op number and status, then READDIR4resok's fixed part.
        let bytes_max = (maxcount as usize).min(crate::exports::READDIR_REPLY_BYTES_MAX);
        DirPage {
            ok: ReaddirResOk::default(),
            bytes: 8 + ReaddirResOk::FIXED_BYTES,
            bytes_max,
            full: false,
        }
    }

    /// Adds `e` if it fits; false (and the page is full) if not.
    fn push(&mut self, e: Entry4) -> bool {
        let len = e.encoded_len();
        if self.bytes + len > self.bytes_max || self.ok.entries.len() >= MAX_DIR_ENTRIES {
            self.full = true;
            return false;
        }
        self.bytes += len;
        self.ok.entries.push(e);
        true
    }

    /// The result: NFS4ERR_TOOSMALL when not even one entry fit (§18.23.3).
    fn finish(mut self, eof: bool) -> Result<ReaddirResOk, Nfsstat4> {
        if self.full && self.ok.entries.is_empty() {
            return Err(Nfsstat4::TOOSMALL);
        }
        self.ok.eof = eof && !self.full;
        Ok(self.ok)
    }
}
