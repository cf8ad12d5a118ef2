//! The OPEN family in the COMPOUND processor (RFC 8881 §18.16, §18.2, §18.18, §18.6): OPEN
//! (create or not, by name or by handle, with reclaims in grace), CLOSE, OPEN_DOWNGRADE and
//! DELEGRETURN. The handle, the file system and its caller are resolved here; the share
//! reservations, open stateids, delegations and grace rules are the state core's
//! (`State4::open` and its neighbours). A file removed while open is parked under a hidden
//! name until its last CLOSE (`namespace.rs`, `sluice_nfs4state::recovery::parked`).

use super::{change_info, check_name, check_new_name, Call, Ctx, Fh, FreshAttr, Nfs4};
use crate::backend::{CreateHow, FileHandle, FileSystem, FileType};
use crate::nfs4::map::{self};
use bytes::Bytes;
use sluice_nfs4state::State4;
use sluice_xdr::nfs4::ops::{
    CloseArgs, Createhow4, OpenArgs, OpenClaim4, OpenDelegation4, OpenDowngradeArgs,
    OpenNoneDelegation4, OpenResOk, Openflag4, ACCESS4_MODIFY, ACCESS4_READ,
    OPEN4_RESULT_LOCKTYPE_POSIX, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_ACCESS_WRITE,
    OPEN4_SHARE_DENY_READ, OPEN4_SHARE_WANT_CANCEL, OPEN4_SHARE_WANT_MASK,
    OPEN4_SHARE_WANT_NO_DELEG, OPEN4_SHARE_WANT_NO_PREFERENCE, WND4_CANCELLED, WND4_NOT_WANTED,
};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{Bitmap4, ChangeInfo4, Stateid4};
// `core::net`: an address is plain data here; this module opens no sockets.

impl Nfs4 {
    /// OPEN (§18.16): CLAIM_NULL (with or without create: UNCHECKED, GUARDED, EXCLUSIVE4_1
    /// and 4.0's EXCLUSIVE), CLAIM_FH, and CLAIM_DELEGATE_CUR / CLAIM_DELEG_CUR_FH under the
    /// caller's delegation, of a regular file in an export; then the recall gate of other
    /// clients' delegations (for a writer), the share reservation in the state core, and the
    /// delegation grant (`deleg.rs`). CLAIM_PREVIOUS reclaims an open of the current handle in
    /// grace (NO_GRACE / RECLAIM_BAD otherwise), with the read delegation it names granted
    /// back; every other claim is NFS4ERR_GRACE in grace and before the client's
    /// RECLAIM_COMPLETE (`sluice_nfs4state::recovery`, "Before RECLAIM_COMPLETE");
    /// CLAIM_DELEGATE_PREV / CLAIM_DELEG_PREV_FH are NOTSUPP (`deleg.rs`, "Reboot recovery").
    pub(super) fn open(
        &self,
        call: &Call<'_>,
        ctx: &mut Ctx,
        a: &OpenArgs,
    ) -> Result<OpenResOk, Nfsstat4> {
        let clientid = ctx.clientid.ok_or(Nfsstat4::OP_NOT_IN_SESSION)?;
        // §18.16.3: only CLAIM_NULL creates. Any other claim with OPEN4_CREATE is INVAL, the
        // delegation claims too (this was NOTSUPP for the PREV ones and ran as a plain open
        // for CLAIM_DELEGATE_CUR); first of all, as knfsd checks it.
        let creating = matches!(a.openhow, Openflag4::Create(_));
        if creating && !matches!(a.claim, OpenClaim4::Null(_)) {
            return Err(Nfsstat4::INVAL);
        }
        // Grace before anything is created, the stable record before anything is granted.
        let reclaim = matches!(a.claim, OpenClaim4::Previous(_));
        if reclaim {
            self.state().check_reclaim(clientid)?;
        } else {
            self.state().check_new_state(clientid)?;
        }
        self.ensure_record(clientid)?;
        let (idx, cur) = match ctx.current.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)? {
            // Pseudo directories hold no files.
            Fh::Pseudo(_) if creating => return Err(Nfsstat4::ROFS),
            Fh::Pseudo(_) => {
                return Err(match a.claim {
                    OpenClaim4::Fh | OpenClaim4::Previous(_) => Nfsstat4::ISDIR,
                    _ => Nfsstat4::NOENT,
                })
            }
            Fh::Export { idx, fh } => (*idx, fh.clone()),
        };
        let (fs, caller) = self.gate(call, idx)?;
        let since = self.wb_epoch();
        let mut attrset = Bitmap4::new();
        let mut created = false;
        let (fh, attr, cinfo) = match &a.claim {
            // CLAIM_PREVIOUS names the file by the current handle, as CLAIM_FH does; the
            // delegation it asks back is decided after the open (below).
            OpenClaim4::Fh | OpenClaim4::Previous(_) => Self::open_existing(fs, cur)?,
            // The holder opens under its delegation (§18.16.3; Linux does so before it
            // returns one it has local opens under): by handle, or by name in the current
            // directory.
            OpenClaim4::DelegCurFh(sid) => {
                let sid = ctx.resolve_stateid(sid)?;
                self.state()
                    .check_delegate_cur(clientid, &sid, &fs.state_key(&cur))?;
                Self::open_existing(fs, cur)?
            }
            OpenClaim4::DelegateCur(c) => {
                check_name(&c.file.0)?;
                let found = fs
                    .lookup(&caller, &cur, &c.file.0)
                    .map_err(|(e, _)| map::status(e))?;
                let sid = ctx.resolve_stateid(&c.delegate_stateid)?;
                self.state()
                    .check_delegate_cur(clientid, &sid, &fs.state_key(&found.fh))?;
                Self::open_existing(fs, found.fh)?
            }
            // A client's own reboot: no delegation reclaim (see `deleg.rs`).
            OpenClaim4::DelegatePrev(_) | OpenClaim4::DelegPrevFh => return Err(Nfsstat4::NOTSUPP),
            OpenClaim4::Null(name) => {
                if creating {
                    check_new_name(&name.0)?;
                } else {
                    check_name(&name.0)?;
                }
                match &a.openhow {
                    Openflag4::Create(how) => {
                        let how = match how {
                            Createhow4::Unchecked(f) => {
                                let (s, m) = map::set_attr(f, &self.idmap, ctx.minor)?;
                                attrset = m;
                                CreateHow::Unchecked(s)
                            }
                            Createhow4::Guarded(f) => {
                                let (s, m) = map::set_attr(f, &self.idmap, ctx.minor)?;
                                attrset = m;
                                CreateHow::Guarded(s)
                            }
                            Createhow4::Exclusive(verf) => CreateHow::Exclusive(*verf),
                            // The attributes go with the creation, one step (see
                            // `CreateHow::Exclusive41`): nobody sees the file without them,
                            // and a retransmission that finds its file sets nothing again.
                            Createhow4::Exclusive41(v) => {
                                if v.attrs.mask.iter().any(|b| !map::EXCLCREAT.contains(&b)) {
                                    return Err(Nfsstat4::INVAL);
                                }
                                let (s, m) = map::set_attr(&v.attrs, &self.idmap, ctx.minor)?;
                                attrset = m;
                                CreateHow::Exclusive41(v.verf, s)
                            }
                        };
                        let truncates = matches!(&how, CreateHow::Unchecked(s) if s.size.is_some());
                        if truncates {
                            if let Ok(existing) = fs.lookup(&caller, &cur, &name.0) {
                                self.break_delegations(call, ctx, fs, &existing.fh)?;
                                self.settle(&existing.fh)?;
                            }
                        }
                        let ok = fs
                            .create(&caller, &cur, &name.0, how)
                            .map_err(|(e, _)| map::status(e))?;
                        created = true;
                        let cinfo = change_info(&ok.dir_wcc);
                        // CREATE's own attributes are the new file's after its settings:
                        // no second backend call (and handle resolution) for them.
                        (ok.fh, ok.attr, cinfo)
                    }
                    _ => {
                        let ok = fs
                            .lookup(&caller, &cur, &name.0)
                            .map_err(|(e, _)| map::status(e))?;
                        let c = ok.dir_attr.map_or(0, |d| d.change);
                        (
                            ok.fh,
                            ok.attr,
                            ChangeInfo4 {
                                atomic: true,
                                before: c,
                                after: c,
                            },
                        )
                    }
                }
            }
        };
        match attr.ftype {
            FileType::Regular => {}
            FileType::Directory => return Err(Nfsstat4::ISDIR),
            FileType::Symlink => return Err(Nfsstat4::SYMLINK),
            _ => return Err(Nfsstat4::WRONG_TYPE),
        }
        // The want and signal bits are the delegation grant's (`deleg.rs`).
        let access = a.share_access & !(OPEN4_SHARE_WANT_MASK | 0x3_0000);
        if !created {
            // Permission as for v3's ACCESS: reading needs READ, writing MODIFY. The creator
            // of a file may open it whatever mode it was created with.
            let mut need = 0;
            if access & OPEN4_SHARE_ACCESS_READ != 0 {
                need |= ACCESS4_READ;
            }
            if access & OPEN4_SHARE_ACCESS_WRITE != 0 {
                need |= ACCESS4_MODIFY;
            }
            let (granted, _) = fs
                .access(&caller, &fh, need)
                .map_err(|(e, _)| map::status(e))?;
            if granted & need != need {
                return Err(Nfsstat4::ACCESS);
            }
        }
        // A write-only OPEN gets a write delegation only if the client may read the file too
        // (its page cache reads under it): asked of the backend as knfsd does, here before
        // the state's lock is taken (`delegations::table`, what is granted).
        let may_read = access & OPEN4_SHARE_ACCESS_READ != 0
            || (access == OPEN4_SHARE_ACCESS_WRITE
                && matches!(a.claim, OpenClaim4::Null(_) | OpenClaim4::Fh)
                && fs.grants_delegations()
                && wants_delegation(a.share_access)
                && fs
                    .access(&caller, &fh, ACCESS4_READ)
                    .is_ok_and(|(granted, _)| granted & ACCESS4_READ != 0));
        // State is the file's, whichever of its handles (hard links in other directories)
        // the client came by (`FileSystem::state_key`).
        let file = fs.state_key(&fh);
        let delegation = {
            let mut st = self.state();
            // Writing, or denying others' reads, conflicts with other clients' delegations;
            // reading, with their write delegations: recalled first, NFS4ERR_DELAY meanwhile
            // (`deleg.rs`). A reclaim runs in grace, when no delegation exists yet.
            if !reclaim {
                let write = access & OPEN4_SHARE_ACCESS_WRITE != 0
                    || a.share_deny & OPEN4_SHARE_DENY_READ != 0;
                st.break_delegations(call.now, Some(clientid), &file, write)?;
            }
            let open = match reclaim {
                true => State4::reclaim_open,
                false => State4::open,
            };
            let stateid = open(
                &mut st,
                call.now,
                clientid,
                &a.owner.owner.0,
                &file,
                access,
                a.share_deny,
            )?;
            ctx.stateid = Some(stateid);
            match a.claim {
                // A backend that cannot back a delegation (CephFS: other Ceph clients change
                // files without asking this server) gets none (`FileSystem::grants_delegations`).
                OpenClaim4::Null(_) | OpenClaim4::Fh | OpenClaim4::Previous(_)
                    if !fs.grants_delegations() =>
                {
                    not_wanted(a.share_access)
                }
                OpenClaim4::Null(_) | OpenClaim4::Fh => {
                    let now_attrs = sluice_nfs4state::delegations::table::SizeChange {
                        size: attr.size,
                        change: attr.change,
                    };
                    let fh = fh.as_bytes();
                    let at = (&file[..], fh);
                    st.open_delegation_may_read(
                        call.now,
                        clientid,
                        at,
                        a.share_access,
                        now_attrs,
                        may_read,
                    )
                }
                // A reclaim gets the read delegation it names back (`deleg.rs`, "Reboot
                // recovery").
                OpenClaim4::Previous(dtype) => {
                    let now_attrs = sluice_nfs4state::delegations::table::SizeChange {
                        size: attr.size,
                        change: attr.change,
                    };
                    let fh = fh.as_bytes();
                    st.reclaimed_delegation(call.now, clientid, (&file, fh), dtype, now_attrs)
                }
                // Under a delegation the client already has.
                _ => OpenDelegation4::None,
            }
        };
        let stateid = ctx.stateid.expect("set above");
        // The attributes answer a GETATTR after this op (`Ctx::fresh`).
        ctx.fresh = Some(FreshAttr {
            fh: fh.clone(),
            attr,
            since,
        });
        ctx.current = Some(Fh::Export { idx, fh });
        Ok(OpenResOk {
            stateid,
            cinfo,
            rflags: OPEN4_RESULT_LOCKTYPE_POSIX,
            attrset,
            delegation,
        })
    }

    /// OPEN of an existing file by handle: its attributes, and a change_info with nothing
    /// changed.
    pub(super) fn open_existing(
        fs: &dyn FileSystem,
        fh: FileHandle,
    ) -> Result<(FileHandle, crate::backend::Attr, ChangeInfo4), Nfsstat4> {
        let attr = fs.getattr(&fh).map_err(map::status)?;
        let c = attr.change;
        let cinfo = ChangeInfo4 {
            atomic: true,
            before: c,
            after: c,
        };
        Ok((fh, attr, cinfo))
    }

    /// The current file's key in the state tables (an export handle's
    /// [`FileSystem::state_key`]: the file, whichever of its names it was found by).
    pub(super) fn open_file(&self, ctx: &Ctx) -> Result<Bytes, Nfsstat4> {
        match ctx.current.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)? {
            Fh::Export { idx, fh } => Ok(self.state_key(*idx, fh)),
            // Nothing in the pseudo tree is ever open.
            Fh::Pseudo(_) => Err(Nfsstat4::BAD_STATEID),
        }
    }

    /// CLOSE (§18.2).
    pub(super) fn close(&self, ctx: &mut Ctx, a: &CloseArgs) -> Result<Stateid4, Nfsstat4> {
        let clientid = ctx.clientid.ok_or(Nfsstat4::OP_NOT_IN_SESSION)?;
        let file = self.open_file(ctx)?;
        let sid = ctx.resolve_stateid(&a.open_stateid)?;
        let out = self.state().close(clientid, &sid, &file)?;
        ctx.stateid = Some(out);
        self.unlink_closed();
        Ok(out)
    }

    /// OPEN_DOWNGRADE (§18.18).
    pub(super) fn open_downgrade(
        &self,
        ctx: &mut Ctx,
        a: &OpenDowngradeArgs,
    ) -> Result<Stateid4, Nfsstat4> {
        let clientid = ctx.clientid.ok_or(Nfsstat4::OP_NOT_IN_SESSION)?;
        let file = self.open_file(ctx)?;
        let sid = ctx.resolve_stateid(&a.open_stateid)?;
        let access = a.share_access & !(OPEN4_SHARE_WANT_MASK | 0x3_0000);
        let out = self
            .state()
            .open_downgrade(clientid, &sid, &file, access, a.share_deny)?;
        ctx.stateid = Some(out);
        Ok(out)
    }

    /// DELEGRETURN (§18.6).
    pub(super) fn delegreturn(&self, ctx: &Ctx, stateid: &Stateid4) -> Result<(), Nfsstat4> {
        let clientid = ctx.clientid.ok_or(Nfsstat4::OP_NOT_IN_SESSION)?;
        let file = self.open_file(ctx)?;
        let sid = ctx.resolve_stateid(stateid)?;
        self.state().delegreturn(clientid, &sid, &file)
    }
}

/// The OPEN did not decline a delegation by its want bits (OPEN4_SHARE_WANT_NO_DELEG,
/// OPEN4_SHARE_WANT_CANCEL): worth asking the backend whether it may get a write one.
fn wants_delegation(share_access: u32) -> bool {
    !matches!(
        share_access & OPEN4_SHARE_WANT_MASK,
        OPEN4_SHARE_WANT_NO_DELEG | OPEN4_SHARE_WANT_CANCEL
    )
}

/// No delegation because the server does not want to grant one on this file system: a
/// client that used the 4.1 want bits hears so (OPEN_DELEGATE_NONE_EXT, WND4_NOT_WANTED,
/// RFC 8881 §18.16.3), any other plain OPEN_DELEGATE_NONE.
fn not_wanted(share_access: u32) -> OpenDelegation4 {
    match share_access & OPEN4_SHARE_WANT_MASK {
        OPEN4_SHARE_WANT_NO_PREFERENCE => OpenDelegation4::None,
        OPEN4_SHARE_WANT_CANCEL => {
            OpenDelegation4::NoneExt(OpenNoneDelegation4::Why(WND4_CANCELLED))
        }
        _ => OpenDelegation4::NoneExt(OpenNoneDelegation4::Why(WND4_NOT_WANTED)),
    }
}
