//! LOCK, LOCKT and LOCKU in the COMPOUND processor (RFC 8881 §18.10-§18.12): the current
//! handle and the current stateid resolved here, the rest in the state core
//! (`state/locks.rs`). RELEASE_LOCKOWNER is a 4.0 op: the op table answers it NFS4ERR_NOTSUPP
//! in minor version 1 (§18.39 is absent from 4.1's list of allowed ops).

use super::{Call, Ctx, Nfs4};
use sluice_nfs4state::locks::LockRefused;
use sluice_xdr::nfs4::ops::{LockArgs, LockRes, Locker4, LocktArgs, LocktRes, LockuArgs};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::Stateid4;

impl Nfs4 {
    /// LOCK (§18.10): sets the current stateid to the lock stateid.
    pub(super) fn lock(&self, call: &Call<'_>, ctx: &mut Ctx, a: &LockArgs) -> LockRes {
        let run = || -> Result<Stateid4, LockRefused> {
            let clientid = ctx.clientid.ok_or(Nfsstat4::OP_NOT_IN_SESSION)?;
            let file = self.open_file(ctx)?;
            let mut a = a.clone();
            match &mut a.locker {
                Locker4::New(n) => n.open_stateid = ctx.resolve_stateid(&n.open_stateid)?,
                Locker4::Exist(e) => e.lock_stateid = ctx.resolve_stateid(&e.lock_stateid)?,
            }
            self.state().lock(call.now, clientid, &file, &a)
        };
        match run() {
            Ok(sid) => {
                ctx.stateid = Some(sid);
                LockRes::Ok(sid)
            }
            Err(LockRefused::Denied(d)) => LockRes::Denied(d),
            Err(LockRefused::Status(s)) => LockRes::Err(s),
        }
    }

    /// LOCKT (§18.11): the current handle must be a regular file (ISDIR, INVAL otherwise,
    /// as for READ).
    pub(super) fn lockt(&self, call: &Call<'_>, ctx: &Ctx, a: &LocktArgs) -> LocktRes {
        let run = || -> Result<(), LockRefused> {
            let clientid = ctx.clientid.ok_or(Nfsstat4::OP_NOT_IN_SESSION)?;
            let (fs, _, fh) = self.data_target(call, ctx)?;
            self.state()
                .lockt(call.now, clientid, &fs.state_key(&fh), a)
        };
        match run() {
            Ok(()) => LocktRes::Ok(()),
            Err(LockRefused::Denied(d)) => LocktRes::Denied(d),
            Err(LockRefused::Status(s)) => LocktRes::Err(s),
        }
    }

    /// LOCKU (§18.12): sets the current stateid to the bumped lock stateid.
    pub(super) fn locku(&self, ctx: &mut Ctx, a: &LockuArgs) -> Result<Stateid4, Nfsstat4> {
        let clientid = ctx.clientid.ok_or(Nfsstat4::OP_NOT_IN_SESSION)?;
        let file = self.open_file(ctx)?;
        let mut a = a.clone();
        a.lock_stateid = ctx.resolve_stateid(&a.lock_stateid)?;
        let out = self.state().locku(clientid, &file, &a)?;
        ctx.stateid = Some(out);
        Ok(out)
    }
}
