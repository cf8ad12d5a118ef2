//! The COMPOUND side of I/O: what a data op must pass before the driver runs it, and the
//! delegation breaks and held writes that other ops meet.
//!
//! ```text
//!   READ / WRITE / COMMIT / READ_PLUS ─▶ data_target: the current handle is a regular file
//!        of an export the caller may use ─▶ check_io: the stateid allows the access
//!        (open table; anonymous and READ-bypass stateids) ─▶ break_delegations: another
//!        client's conflicting delegation is recalled (NFS4ERR_DELAY meanwhile) ─▶ DataReq
//!   SETATTR(size), OPEN(truncate) ─▶ held_before: write-behind holds writes? Settle::Land
//!   REMOVE, RENAME onto a file ─▶ held_removal: its held writes dropped if its last link went
//! ```
//!
//! Delegations are keyed by the file's identity ([`Nfs4::state_key`]), so two handles of one
//! file meet the same delegation. The evaluation (`eval.rs`) suspends on what these return;
//! the driver runs it.

use super::{Call, Ctx, Fh, Nfs4};
use crate::backend::{Caller, FileHandle, FileSystem, FileType, StableHow};
use crate::nfs4::data::{DataOp, DataReq};
use crate::nfs4::map::{self};
use bytes::Bytes;
use sluice_xdr::nfs4::ops::{Createhow4, NfsArgop4, OpenArgs, OpenClaim4, Openflag4};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::StableHow4;
use sluice_xdr::nfs4::{Fattr4, Stateid4};
// `core::net`: an address is plain data here; this module opens no sockets.
use std::sync::Arc;

/// What a data op works on (see [`Nfs4::data_target`]).
pub(super) type DataTarget = (Arc<dyn FileSystem>, Caller, FileHandle);

impl Nfs4 {
    /// What a data op works on: the export's file system, the caller after the export's
    /// gate, and the current handle, which must be a regular file (a directory is ISDIR, a
    /// symbolic link SYMLINK, RFC 8881 §18.22.3 and knfsd's `nfsd_mode_check`; anything else
    /// INVAL; a pseudo node is a directory).
    pub(super) fn data_target(&self, call: &Call<'_>, ctx: &Ctx) -> Result<DataTarget, Nfsstat4> {
        match ctx.current.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)? {
            Fh::Pseudo(_) => Err(Nfsstat4::ISDIR),
            Fh::Export { idx, fh } => {
                let (fs, caller) = self.gate(call, *idx)?;
                match fs.getattr(fh).map_err(map::status)?.ftype {
                    FileType::Regular => {}
                    FileType::Directory => return Err(Nfsstat4::ISDIR),
                    FileType::Symlink => return Err(Nfsstat4::SYMLINK),
                    _ => return Err(Nfsstat4::INVAL),
                }
                let fs = self.exports[*idx].fs.clone();
                Ok((fs, caller, fh.clone()))
            }
        }
    }

    /// The stateid check of a data op (§8.2.3): open stateids of this client, or the special
    /// ones, as the open table decides ([`State4::check_io`]); then, for a write, the recall
    /// gate of other clients' delegations (NFS4ERR_DELAY while they are recalled).
    pub(super) fn check_io(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        stateid: &Stateid4,
        write: bool,
    ) -> Result<(), Nfsstat4> {
        let clientid = ctx.clientid.ok_or(Nfsstat4::OP_NOT_IN_SESSION)?;
        let file = self.open_file(ctx)?;
        let sid = ctx.resolve_stateid(stateid)?;
        let mut st = self.state();
        st.check_io(clientid, &sid, &file, write)?;
        st.break_delegations(call.now, Some(clientid), &file, write)
    }

    /// The key of `fh` of export `idx` in the state tables ([`FileSystem::state_key`]).
    pub(super) fn state_key(&self, idx: usize, fh: &FileHandle) -> Bytes {
        match self.exports.get(idx) {
            Some(e) => e.fs.state_key(fh),
            // Not an export's handle: no state is kept under it; a key of its own.
            None => fh.to_bytes(),
        }
    }

    /// The recall gate ([`State4::break_delegations`]) for a change of `fh` of `fs` (its data,
    /// name or attributes) by this COMPOUND's client.
    pub(super) fn break_delegations(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        fs: &dyn FileSystem,
        fh: &FileHandle,
    ) -> Result<(), Nfsstat4> {
        if !self.any_delegation() {
            return Ok(());
        }
        self.state()
            .break_delegations(call.now, ctx.clientid, &fs.state_key(fh), true)
    }

    /// Whether any live delegation exists: one atomic load (the count the delegation table
    /// publishes, as for the NFSv3 recall gate), so that ops which only consult delegations
    /// (GETATTR, the recall gate) neither take the state lock nor work out a file's key
    /// when there are none.
    pub(super) fn any_delegation(&self) -> bool {
        self.delegs_published
            .load(std::sync::atomic::Ordering::Acquire)
            != 0
    }

    /// The same for the object `name` in `dir`, if there is one (a lookup only while some
    /// delegation exists).
    pub(super) fn break_delegations_at(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        (fs, caller): (&dyn FileSystem, &Caller),
        dir: &FileHandle,
        name: &[u8],
    ) -> Result<(), Nfsstat4> {
        if self.state().delegations().is_empty() {
            return Ok(());
        }
        match fs.lookup(caller, dir, name) {
            Ok(found) => self.break_delegations(call, ctx, fs, &found.fh),
            Err(_) => Ok(()),
        }
    }

    /// READ (§18.22), WRITE (§18.32) and COMMIT (§18.3) up to the data path: the current
    /// handle and the stateid checked (COMMIT takes none), the arguments as the data path
    /// takes them (`stable_how4` as v3's `stable_how`). `splice_ok` is READ's.
    pub(super) fn data_req(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        op: &NfsArgop4,
        splice_ok: bool,
    ) -> Result<DataReq, Nfsstat4> {
        let (fs, caller, fh) = self.data_target(call, ctx)?;
        let op = match op {
            NfsArgop4::Read(a) => {
                self.check_io(call, ctx, &a.stateid, false)?;
                DataOp::Read {
                    offset: a.offset,
                    count: a.count,
                    splice_ok,
                }
            }
            NfsArgop4::Write(a) => {
                self.check_io(call, ctx, &a.stateid, true)?;
                let stable = match a.stable {
                    StableHow4::UNSTABLE => StableHow::Unstable,
                    StableHow4::DATA_SYNC => StableHow::DataSync,
                    StableHow4::FILE_SYNC => StableHow::FileSync,
                    _ => return Err(Nfsstat4::INVAL),
                };
                DataOp::Write {
                    offset: a.offset,
                    data: a.data.chunks().to_vec(),
                    stable,
                }
            }
            NfsArgop4::Commit(a) => DataOp::Commit {
                offset: a.offset,
                count: a.count,
            },
            NfsArgop4::ReadPlus(a) => {
                self.check_io(call, ctx, &a.stateid, false)?;
                DataOp::ReadPlus {
                    offset: a.offset,
                    count: a.count,
                    splice_ok,
                }
            }
            _ => {
                debug_assert!(false, "data_req of {:?}", op.opnum());
                return Err(Nfsstat4::SERVERFAULT);
            }
        };
        Ok(DataReq { fs, caller, fh, op })
    }

    /// The file whose held writes must land before `op` runs: the current file for SETATTR
    /// (of any attribute), the named one for an OPEN that truncates (CLAIM_NULL, UNCHECKED with a size),
    /// the file of SEEK and DEALLOCATE, the source (else the destination) of COPY and CLONE,
    /// when write-behind holds writes for it. `None` also when the op will fail anyway.
    pub(super) fn held_before(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        op: &NfsArgop4,
    ) -> Option<FileHandle> {
        let wb = self.write_behind.as_ref().filter(|wb| wb.holds_any())?;
        let Some(Fh::Export { idx, fh }) = &ctx.current else {
            return None;
        };
        let sets_size = |f: &Fattr4| {
            map::set_attr(f, &self.idmap, ctx.minor).is_ok_and(|(s, _)| s.size.is_some())
        };
        let target = match op {
            // Any SETATTR: times or a mode set must not be undone by held data landing later.
            NfsArgop4::Setattr(_) => fh.clone(),
            NfsArgop4::Open(OpenArgs {
                openhow: Openflag4::Create(Createhow4::Unchecked(f)),
                claim: OpenClaim4::Null(name),
                ..
            }) if sets_size(f) => {
                let (fs, caller) = self.gate(call, *idx).ok()?;
                fs.lookup(&caller, fh, &name.0).ok()?.fh
            }
            // 4.2 ops that read or drop data (see `v42`): the source of a copy first.
            NfsArgop4::Seek(_) | NfsArgop4::Deallocate(_) => fh.clone(),
            NfsArgop4::Copy(_) | NfsArgop4::Clone(_) => match &ctx.saved {
                Some(Fh::Export { fh: src, .. }) if wb.holds(src.as_bytes()) => src.clone(),
                _ => fh.clone(),
            },
            _ => return None,
        };
        wb.holds(target.as_bytes()).then_some(target)
    }

    /// For a REMOVE of a file write-behind holds writes for, or a RENAME over one: the file,
    /// whose data is dropped after the op if that was its last link (v3's REMOVE does the
    /// same). Left held, it would fail to land on a file that is gone, and the failure would
    /// change the write verifier, making every client resend what it has not committed.
    pub(super) fn held_removal(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        op: &NfsArgop4,
    ) -> Option<(Arc<dyn FileSystem>, FileHandle)> {
        // A RENAME over an existing file removes that file's link as a REMOVE does.
        let name = match op {
            NfsArgop4::Remove(name) => name,
            NfsArgop4::Rename(a) => &a.newname,
            _ => return None,
        };
        let wb = self.write_behind.as_ref().filter(|wb| wb.holds_any())?;
        let Some(Fh::Export { idx, fh: dir }) = &ctx.current else {
            return None;
        };
        let (fs, caller) = self.gate(call, *idx).ok()?;
        let target = fs.lookup(&caller, dir, &name.0).ok()?.fh;
        wb.holds(target.as_bytes())
            .then(|| (self.exports[*idx].fs.clone(), target))
    }

    /// The last check before a call that shortens a file's data (SETATTR of the size, an OPEN
    /// that truncates): writes held for it that the evaluation did not land first (held again
    /// since, or the driver could not wait) make it NFS4ERR_DELAY, so none lands past the new
    /// size.
    pub(super) fn settle(&self, fh: &FileHandle) -> Result<(), Nfsstat4> {
        match &self.write_behind {
            Some(wb) if wb.holds(fh.as_bytes()) => Err(Nfsstat4::DELAY),
            _ => Ok(()),
        }
    }
}
