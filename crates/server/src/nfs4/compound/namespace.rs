//! Namespace ops in the COMPOUND processor: SETATTR, CREATE (not regular files: OPEN makes those),
//! RENAME, LINK and REMOVE (RFC 8881 §18.30, §18.4, §18.26, §18.9, §18.25), each answering its
//! directory's `change_info4` from the file system's before/after attributes. A REMOVE or a RENAME
//! over a file that is still open keeps it under a hidden name until its last CLOSE
//! (`sluice_nfs4state::recovery::parked`, [`Nfs4::sweep_parked`]), as knfsd's "silly rename" does
//! on the client side; other clients' delegations on what changes are recalled first (`io.rs`).

use super::{change_info, check_name, check_new_name, Call, Ctx, Fh, FreshAttr, Nfs4};
use crate::backend::{Caller, DeviceId, FileHandle, FileSystem, FileType};
use crate::nfs4::map::{self};
use bytes::Bytes;
use sluice_nfs4state::recovery::parked::{self, Parked};
use sluice_xdr::nfs4::ops::SetattrArgs;
use sluice_xdr::nfs4::ops::{CreateArgs, CreateResOk, Createtype4, RenameArgs, RenameResOk};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::Specdata4;
use sluice_xdr::nfs4::{Bitmap4, ChangeInfo4};
// `core::net`: an address is plain data here; this module opens no sockets.

impl Nfs4 {
    /// SETATTR (§18.30): the attributes in [`map::SETTABLE`]. A size change needs a stateid
    /// that allows writing (an open for write, or the anonymous stateid subject to share
    /// reservations), checked by the open-state core.
    pub(super) fn setattr(
        &self,
        call: &Call<'_>,
        ctx: &mut Ctx,
        a: &SetattrArgs,
    ) -> Result<Bitmap4, Nfsstat4> {
        let (idx, fh) = match ctx.current.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)? {
            Fh::Pseudo(_) => return Err(Nfsstat4::ROFS),
            Fh::Export { idx, fh } => (*idx, fh),
        };
        let (fs, caller) = self.gate(call, idx)?;
        let (sattr, mask) = map::set_attr(&a.obj_attributes, &self.idmap, ctx.minor)?;
        if sattr.size.is_some() {
            let clientid = ctx.clientid.ok_or(Nfsstat4::OP_NOT_IN_SESSION)?;
            let sid = ctx.resolve_stateid(&a.stateid)?;
            self.state()
                .check_io(clientid, &sid, &fs.state_key(fh), true)?;
        }
        // Held writes landed before this op ran (`held_before`), whatever it sets: none may
        // land past a new size or after new times.
        self.settle(fh)?;
        // Any attribute change is one a read delegation's holder caches (§10.4.1).
        self.break_delegations(call, ctx, fs, fh)?;
        let since = self.wb_epoch();
        let wcc = fs
            .setattr(&caller, fh, &sattr, None)
            .map_err(|(e, _)| map::status(e))?;
        // The post-op attributes answer a GETATTR after this op (`Ctx::fresh`).
        ctx.fresh = wcc.after.map(|attr| FreshAttr {
            fh: fh.clone(),
            attr,
            since,
        });
        Ok(mask)
    }

    /// The export directory (or file) a namespace op works in; the pseudo tree is ROFS.
    pub(super) fn export_fh(ctx: &Option<Fh>) -> Result<(usize, &FileHandle), Nfsstat4> {
        match ctx.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)? {
            Fh::Pseudo(_) => Err(Nfsstat4::ROFS),
            Fh::Export { idx, fh } => Ok((*idx, fh)),
        }
    }

    /// CREATE (§18.4): directories, symlinks, devices, fifos and sockets (regular files are
    /// OPEN's); the new object becomes the current handle.
    pub(super) fn create(
        &self,
        call: &Call<'_>,
        ctx: &mut Ctx,
        a: &CreateArgs,
    ) -> Result<CreateResOk, Nfsstat4> {
        let (idx, dir) = Self::export_fh(&ctx.current)?;
        let (fs, caller) = self.gate(call, idx)?;
        check_new_name(&a.objname.0)?;
        let (sattr, attrset) = map::set_attr(&a.createattrs, &self.idmap, ctx.minor)?;
        let name = &a.objname.0;
        let dev = |d: &Specdata4| DeviceId {
            major: d.specdata1,
            minor: d.specdata2,
        };
        let ok = match &a.objtype {
            Createtype4::Dir => fs.mkdir(&caller, dir, name, &sattr),
            Createtype4::Lnk(target) => fs.symlink(&caller, dir, name, &target.0, &sattr),
            Createtype4::Blk(d) => {
                fs.mknod(&caller, dir, name, FileType::BlockDevice, &sattr, dev(d))
            }
            Createtype4::Chr(d) => {
                fs.mknod(&caller, dir, name, FileType::CharDevice, &sattr, dev(d))
            }
            Createtype4::Sock => fs.mknod(
                &caller,
                dir,
                name,
                FileType::Socket,
                &sattr,
                DeviceId::default(),
            ),
            Createtype4::Fifo => fs.mknod(
                &caller,
                dir,
                name,
                FileType::Fifo,
                &sattr,
                DeviceId::default(),
            ),
            // Regular files (and anything unknown) are not CREATE's.
            Createtype4::Other(_) => return Err(Nfsstat4::BADTYPE),
        }
        .map_err(|(e, _)| map::status(e))?;
        let cinfo = change_info(&ok.dir_wcc);
        ctx.set_current(Fh::Export { idx, fh: ok.fh });
        Ok(CreateResOk { cinfo, attrset })
    }

    /// RENAME (§18.26): `oldname` in the saved directory to `newname` in the current one, in the
    /// same export (else XDEV). A file someone has open that the rename replaces is kept under a
    /// hidden name until its last CLOSE, as REMOVE keeps one
    /// ([`sluice_nfs4state::recovery::parked`]).
    pub(super) fn rename(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        a: &RenameArgs,
    ) -> Result<RenameResOk, Nfsstat4> {
        let (from_idx, from_dir) = Self::export_fh(&ctx.saved)?;
        let (to_idx, to_dir) = Self::export_fh(&ctx.current)?;
        if from_idx != to_idx {
            return Err(Nfsstat4::XDEV);
        }
        let (old, new) = (&a.oldname.0[..], &a.newname.0[..]);
        check_name(old)?;
        check_new_name(new)?;
        let (fs, caller) = self.gate(call, to_idx)?;
        // The file renamed and the file it replaces are both changes of their delegations.
        self.break_delegations_at(call, ctx, (fs, &caller), from_dir, old)?;
        self.break_delegations_at(call, ctx, (fs, &caller), to_dir, new)?;
        let kept = self.keep_replaced(fs, &caller, to_idx, (from_dir, old), (to_dir, new))?;
        let w = match fs.rename(&caller, from_dir, old, to_dir, new) {
            Ok(w) => w,
            Err((e, _)) => {
                if let Some(k) = kept {
                    self.unkeep(fs, &caller, to_dir, new, k);
                }
                return Err(map::status(e));
            }
        };
        let (mut source_cinfo, mut target_cinfo) =
            (change_info(&w.from_dir), change_info(&w.to_dir));
        if let Some(Kept { dir_before, .. }) = kept {
            // Two changes to the target directory (the hidden name, then the rename): report
            // the span of both, not atomic (§3.3.6: the client then revalidates the directory).
            let span = |c: ChangeInfo4| ChangeInfo4 {
                atomic: false,
                before: dir_before.unwrap_or(c.before),
                after: c.after,
            };
            target_cinfo = span(target_cinfo);
            if from_dir == to_dir {
                source_cinfo = span(source_cinfo);
            }
        }
        self.unlink_closed();
        Ok(RenameResOk {
            source_cinfo,
            target_cinfo,
        })
    }

    /// Before RENAME replaces `to.1` in `to.0`: when that is a regular file someone has open
    /// (and not already parked, nor the file being renamed), keep it under its hidden name
    /// and park it, so its opens outlive the rename. The hidden name is a hard link made
    /// before the rename, so the rename itself stays one atomic replacement that no other
    /// client sees half done. Where the file system refuses the link (no hard links, or
    /// Linux's `protected_hardlinks` for a file the caller does not own), the file is renamed
    /// away instead, and for a moment `to.1` is absent.
    pub(super) fn keep_replaced(
        &self,
        fs: &dyn FileSystem,
        caller: &Caller,
        idx: usize,
        from: (&FileHandle, &[u8]),
        to: (&FileHandle, &[u8]),
    ) -> Result<Option<Kept>, Nfsstat4> {
        let Ok(target) = fs.lookup(caller, to.0, to.1) else {
            // Nothing there (or nothing the caller may see): the rename decides.
            return Ok(None);
        };
        let key = fs.state_key(&target.fh);
        if target.attr.ftype != FileType::Regular
            || !self.state().opens().is_open(&key)
            || self.parked.is_parked(&key)
        {
            return Ok(None);
        }
        if fs
            .lookup(caller, from.0, from.1)
            .is_ok_and(|src| fs.state_key(&src.fh) == key)
        {
            // Two links of one file: the rename changes nothing (POSIX), nothing to keep.
            return Ok(None);
        }
        let hidden = parked::hidden_name(target.attr.fileid);
        // Parked (journalled) first, so that a crash never leaves a hidden name unrecorded.
        self.parked
            .park(
                key.clone(),
                Parked {
                    idx,
                    export: fs.export_id(),
                    dir: to.0.clone(),
                    name: hidden.clone(),
                    caller: caller.clone(),
                },
            )
            .map_err(|_| Nfsstat4::SERVERFAULT)?;
        let (dir_before, moved) = match fs.link(caller, &target.fh, to.0, &hidden) {
            Ok(l) => (l.dir_wcc.before.map(|b| b.change), false),
            Err(_) => match fs.rename(caller, to.0, to.1, to.0, &hidden) {
                Ok(w) => (w.to_dir.before.map(|b| b.change), true),
                Err((e, _)) => {
                    self.parked.unpark(&key);
                    return Err(map::status(e));
                }
            },
        };
        Ok(Some(Kept {
            key,
            dir_before,
            moved,
        }))
    }

    /// The rename after [`Nfs4::keep_replaced`] failed: the replaced file goes back to how it
    /// was (its hidden name gone, or renamed back to `name`), and is no longer parked.
    pub(super) fn unkeep(
        &self,
        fs: &dyn FileSystem,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        k: Kept,
    ) {
        if let Some(p) = self.parked.unpark(&k.key) {
            // Best effort: a failure here leaves a hidden name behind, which the next start
            // sweeps (see `parked.rs`); the client gets the rename's own error either way.
            if k.moved {
                let _ = fs.rename(caller, dir, &p.name, dir, name);
            } else {
                let _ = fs.remove(caller, dir, &p.name);
            }
        }
    }

    /// LINK (§18.9): the saved file gets the name `name` in the current directory. A saved
    /// directory is NFS4ERR_ISDIR (§18.9.3; knfsd's `nfsd_link` checks it before the file
    /// system, which would say EPERM).
    pub(super) fn link(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        name: &[u8],
    ) -> Result<ChangeInfo4, Nfsstat4> {
        let (file_idx, file) = Self::export_fh(&ctx.saved)?;
        let (dir_idx, dir) = Self::export_fh(&ctx.current)?;
        if file_idx != dir_idx {
            return Err(Nfsstat4::XDEV);
        }
        check_new_name(name)?;
        let (fs, caller) = self.gate(call, dir_idx)?;
        if fs.getattr(file).map_err(map::status)?.ftype == FileType::Directory {
            return Err(Nfsstat4::ISDIR);
        }
        self.break_delegations(call, ctx, fs, file)?; // its link count and ctime change
        let r = fs
            .link(&caller, file, dir, name)
            .map_err(|(e, _)| map::status(e))?;
        Ok(change_info(&r.dir_wcc))
    }

    /// REMOVE (§18.25): a file or an empty directory of the current directory. A file someone has
    /// open is kept under a hidden name until its last CLOSE
    /// ([`sluice_nfs4state::recovery::parked`]).
    pub(super) fn remove(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        name: &[u8],
    ) -> Result<ChangeInfo4, Nfsstat4> {
        let (idx, dir) = Self::export_fh(&ctx.current)?;
        check_name(name)?;
        let (fs, caller) = self.gate(call, idx)?;
        let target = fs
            .lookup(&caller, dir, name)
            .map_err(|(e, _)| map::status(e))?;
        if target.attr.ftype != FileType::Directory {
            self.break_delegations(call, ctx, fs, &target.fh)?;
        }
        let key = fs.state_key(&target.fh);
        let w = if target.attr.ftype == FileType::Directory {
            fs.rmdir(&caller, dir, name)
        } else if self.state().opens().is_open(&key) && !self.parked.is_parked(&key) {
            // Open: kept under a hidden name until its last CLOSE (see `parked.rs`), parked
            // (journalled) before it is renamed.
            let hidden = parked::hidden_name(target.attr.fileid);
            self.parked
                .park(
                    key.clone(),
                    Parked {
                        idx,
                        export: fs.export_id(),
                        dir: dir.clone(),
                        name: hidden.clone(),
                        caller: caller.clone(),
                    },
                )
                .map_err(|_| Nfsstat4::SERVERFAULT)?;
            match fs.rename(&caller, dir, name, dir, &hidden) {
                Ok(w) => Ok(w.from_dir),
                Err((e, w)) => {
                    self.parked.unpark(&key);
                    Err((e, w.from_dir))
                }
            }
        } else {
            fs.remove(&caller, dir, name)
        }
        .map_err(|(e, _)| map::status(e))?;
        self.unlink_closed();
        Ok(change_info(&w))
    }

    /// Unlinks the hidden names of parked files nobody has open any more.
    pub(super) fn unlink_closed(&self) {
        if self.parked.is_empty() {
            return;
        }
        let done = {
            let state = self.state();
            self.parked.take_closed(|f| state.opens().is_open(f))
        };
        for p in done {
            if let Some(e) = self.exports.get(p.idx) {
                // Already gone (removed behind the server's back) is as good as removed.
                let _ = e.fs.remove(&p.caller, &p.dir, &p.name);
            }
        }
    }

    /// At start-up: unlinks the hidden names an earlier run left parked (it crashed or was
    /// stopped with files open; see `parked.rs`), each only if it still names the file it
    /// was made for. Returns how many were unlinked.
    pub fn sweep_parked(&self) -> usize {
        let root = Caller::with_cred(crate::backend::Cred::root());
        let mut unlinked = 0;
        for left in self.parked.leftovers() {
            let Some(e) = self
                .exports
                .iter()
                .find(|e| e.fs.export_id() == left.export)
            else {
                continue;
            };
            let same = e
                .fs
                .lookup(&root, &left.dir, &left.name)
                .is_ok_and(|f| f.attr.fileid == left.fileid && f.attr.ftype == FileType::Regular);
            if same && e.fs.remove(&root, &left.dir, &left.name).is_ok() {
                unlinked += 1;
            }
        }
        unlinked
    }
}

/// A file RENAME replaced while it was open, kept under its hidden name
/// ([`Nfs4::keep_replaced`]).
pub(super) struct Kept {
    /// Its key in the open table and the parked files.
    key: Bytes,
    /// The target directory's change attribute before the hidden name was made.
    dir_before: Option<u64>,
    /// Renamed away rather than linked: undoing renames it back.
    moved: bool,
}
