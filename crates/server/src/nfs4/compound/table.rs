//! The op table: one row per NFSv4.1/4.2 op (RFC 8881 §18, RFC 7862 §15) pairing the op's
//! facts from xdr ([`OpInfo`]: name, flags, reply-size bound, in `sluice_xdr::nfs4::ops`) with
//! how the processor runs it ([`Run`]). knfsd's `nfsd4_ops[]` (fs/nfsd/nfs4proc.c) is the
//! model: there each op's row holds its handler, flags, name and reply-size bound; here the
//! facts stay in the codec crate, where the decoder and the statistics read them too, and this
//! table adds the half that is the server's.
//!
//! ```text
//!   op n ─▶ row(n) ─┬─ Memory(h)   handler, memory only: PUTFH, GETFH, SAVEFH, RESTOREFH,
//!                   │              SEQUENCE (past op 0: SEQUENCE_POS)
//!                   ├─ Fs(h)       handler that may call a file system (blocking pool)
//!                   ├─ Data        checked here, run by the driver (super::io::data_req)
//!                   └─ NotSupported NFS4ERR_NOTSUPP (4.0-only and pNFS ops are refused
//!                                  earlier, by their flags)
//! ```
//!
//! The rows are in op-number order, as xdr's facts are (a test checks each row's number), so
//! finding an op's row is an index. Each handler takes the decoded `NfsArgop4` of its own op
//! (the `op!` macro matches it; another op is a bug, answered SERVERFAULT) and returns its
//! result; the role files (`fh.rs`, `open.rs`, `io.rs`, `namespace.rs`, `locks.rs`,
//! `v42.rs`, `xattr.rs`, `recovery.rs`) hold what the handlers call. What the evaluation does around a
//! handler (position rules, refusals, reply limits, held writes) is `eval.rs`'s.

use super::{nfs_fh4, principal};
use super::{res, status_of, Call, Ctx, Fh, Nfs4};
use bytes::Bytes;
use sluice_xdr::nfs4::ops::{
    op_info, BindConnToSessionResOk, CopyRes, NfsArgop4, NfsResop4, OpFlags, OpInfo, Opnum4, Res4,
    SetattrRes, StatusList,
};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{Bitmap4, NfsFh4, SessionId4};

/// What runs an op's handler: the processor, given the op's arguments and the COMPOUND's
/// evaluation state.
pub(super) type Handler = fn(&Nfs4, &Call<'_>, &NfsArgop4, &mut Ctx) -> NfsResop4;

/// How the processor runs an op.
#[derive(Clone, Copy)]
pub(super) enum Run {
    /// A handler that touches memory only: a driver need not leave its task for it.
    Memory(Handler),
    /// A handler that may call a file system: the service runs it on the blocking pool.
    Fs(Handler),
    /// A data op (READ, WRITE, COMMIT, READ_PLUS): the processor checks it and suspends; the
    /// driver runs it through the data path.
    Data,
    /// Defined, not served: NFS4ERR_NOTSUPP.
    NotSupported,
}

impl Run {
    /// Whether running the op may call a file system (see `Eval::may_block`).
    pub(super) fn may_block(self) -> bool {
        matches!(self, Run::Fs(_) | Run::Data)
    }
}

/// One op's row: its facts and how it runs.
#[derive(Clone, Copy)]
pub(super) struct OpRow {
    pub info: &'static OpInfo,
    pub run: Run,
}

/// The row of op `op`; `None` for an undefined op (and ILLEGAL), which the evaluation refuses
/// before it looks here.
pub(super) fn row(op: Opnum4) -> Option<OpRow> {
    let info = op_info(op)?;
    let (num, run) = *RUNS.get(usize::try_from(op.0.checked_sub(FIRST_OP)?).ok()?)?;
    debug_assert_eq!(num, op, "the table is in op-number order");
    Some(OpRow { info, run })
}

/// Runs op `op` by its row: the current handle checked first when the op needs one
/// (NFS4ERR_NOFILEHANDLE), then its handler. Not for data ops, which the evaluation hands to
/// its driver.
pub(super) fn run(nfs: &Nfs4, call: &Call<'_>, op: &NfsArgop4, ctx: &mut Ctx) -> NfsResop4 {
    let num = op.opnum();
    let Some(row) = row(num) else {
        return NfsResop4::Illegal(Nfsstat4::OP_ILLEGAL);
    };
    if row.info.flags.contains(OpFlags::NEEDS_FH) && ctx.current.is_none() {
        return NfsResop4::error(num, Nfsstat4::NOFILEHANDLE);
    }
    match row.run {
        Run::Memory(h) | Run::Fs(h) => {
            let r = h(nfs, call, op, ctx);
            match r.status() {
                Nfsstat4::NOTDIR if nfs.symlink_for_dir(call, ctx, num) => {
                    NfsResop4::error(num, Nfsstat4::SYMLINK)
                }
                _ => r,
            }
        }
        Run::NotSupported => NfsResop4::error(num, Nfsstat4::NOTSUPP),
        // The evaluation runs data ops itself, but for READ_PLUS while it is switched off
        // (`Nfs4::read_plus`): not served.
        Run::Data if num == Opnum4::READ_PLUS => NfsResop4::error(num, Nfsstat4::NOTSUPP),
        Run::Data => {
            debug_assert!(false, "data op {num:?} run as a handler");
            NfsResop4::error(num, Nfsstat4::SERVERFAULT)
        }
    }
}

/// The number of the first op (ACCESS, RFC 8881 §18.1); ops 0-2 are not defined.
const FIRST_OP: u32 = 3;

/// A handler for op `$variant`: `$a` binds its arguments, `$body` is its result.
macro_rules! op {
    ($variant:ident, |$nfs:ident, $call:ident, $a:pat, $ctx:ident| $body:expr) => {{
        #[allow(unused_variables)]
        fn handler($nfs: &Nfs4, $call: &Call<'_>, op: &NfsArgop4, $ctx: &mut Ctx) -> NfsResop4 {
            match op {
                NfsArgop4::$variant($a) => $body,
                other => not_mine(other),
            }
        }
        handler as Handler
    }};
}

/// A handler given another op's arguments: the table is wrong.
fn not_mine(op: &NfsArgop4) -> NfsResop4 {
    debug_assert!(false, "{:?} given to another op's handler", op.opnum());
    NfsResop4::error(op.opnum(), Nfsstat4::SERVERFAULT)
}

use Run::{Data, Fs, Memory, NotSupported};

/// The rows from ACCESS (3) to REMOVEXATTR (75), in op-number order.
static RUNS: [(Opnum4, Run); 73] = [
    (
        Opnum4::ACCESS,
        Fs(op!(Access, |nfs, call, a, ctx| NfsResop4::Access(res(
            nfs.access(call, ctx, a.access)
        )))),
    ),
    (
        Opnum4::CLOSE,
        Fs(op!(Close, |nfs, call, a, ctx| NfsResop4::Close(res(
            nfs.close(ctx, a)
        )))),
    ),
    (Opnum4::COMMIT, Data),
    (
        Opnum4::CREATE,
        Fs(op!(Create, |nfs, call, a, ctx| NfsResop4::Create(res(
            nfs.create(call, ctx, a)
        )))),
    ),
    (Opnum4::DELEGPURGE, NotSupported),
    (
        Opnum4::DELEGRETURN,
        Fs(op!(Delegreturn, |nfs, call, sid, ctx| {
            NfsResop4::Delegreturn(status_of(nfs.delegreturn(ctx, sid)))
        })),
    ),
    (
        Opnum4::GETATTR,
        Fs(op!(Getattr, |nfs, call, req, ctx| NfsResop4::Getattr(res(
            nfs.getattr(call, ctx, req)
        )))),
    ),
    (
        Opnum4::GETFH,
        Memory(op!(Getfh, |nfs, call, (), ctx| NfsResop4::Getfh(
            match &ctx.current {
                Some(Fh::Pseudo(n)) => {
                    Res4::Ok(NfsFh4(Bytes::copy_from_slice(&nfs.pseudo.handle(*n))))
                }
                Some(Fh::Export { fh, .. }) => Res4::Ok(nfs_fh4(fh)),
                None => Res4::Err(Nfsstat4::NOFILEHANDLE),
            }
        ))),
    ),
    (
        Opnum4::LINK,
        Fs(op!(Link, |nfs, call, name, ctx| NfsResop4::Link(res(
            nfs.link(call, ctx, &name.0)
        )))),
    ),
    (
        Opnum4::LOCK,
        Fs(op!(Lock, |nfs, call, a, ctx| NfsResop4::Lock(
            nfs.lock(call, ctx, a)
        ))),
    ),
    (
        Opnum4::LOCKT,
        Fs(op!(Lockt, |nfs, call, a, ctx| NfsResop4::Lockt(
            nfs.lockt(call, ctx, a)
        ))),
    ),
    (
        Opnum4::LOCKU,
        Fs(op!(Locku, |nfs, call, a, ctx| NfsResop4::Locku(res(
            nfs.locku(ctx, a)
        )))),
    ),
    (
        Opnum4::LOOKUP,
        Fs(op!(Lookup, |nfs, call, name, ctx| NfsResop4::Lookup(
            status_of(nfs.lookup(call, ctx, &name.0))
        ))),
    ),
    (
        Opnum4::LOOKUPP,
        Fs(op!(Lookupp, |nfs, call, (), ctx| NfsResop4::Lookupp(
            status_of(nfs.lookupp(call, ctx))
        ))),
    ),
    (
        Opnum4::NVERIFY,
        Fs(op!(Nverify, |nfs, call, f, ctx| NfsResop4::Nverify(
            match nfs.same_attrs(call, ctx, f) {
                Ok(true) => Nfsstat4::SAME,
                Ok(false) => Nfsstat4::OK,
                Err(s) => s,
            }
        ))),
    ),
    (
        Opnum4::OPEN,
        Fs(op!(Open, |nfs, call, a, ctx| NfsResop4::Open(res(
            nfs.open(call, ctx, a)
        )))),
    ),
    (Opnum4::OPENATTR, NotSupported),
    (Opnum4::OPEN_CONFIRM, NotSupported),
    (
        Opnum4::OPEN_DOWNGRADE,
        Fs(op!(OpenDowngrade, |nfs, call, a, ctx| {
            NfsResop4::OpenDowngrade(res(nfs.open_downgrade(ctx, a)))
        })),
    ),
    (
        Opnum4::PUTFH,
        Memory(op!(Putfh, |nfs, call, fh, ctx| NfsResop4::Putfh(
            status_of(nfs.put_fh(fh).map(|f| ctx.set_current(f)))
        ))),
    ),
    // knfsd's public handle is its root handle; so is ours.
    (
        Opnum4::PUTPUBFH,
        Fs(op!(Putpubfh, |nfs, call, (), ctx| NfsResop4::Putpubfh(
            nfs.put_root(call, ctx)
        ))),
    ),
    (
        Opnum4::PUTROOTFH,
        Fs(op!(Putrootfh, |nfs, call, (), ctx| NfsResop4::Putrootfh(
            nfs.put_root(call, ctx)
        ))),
    ),
    (Opnum4::READ, Data),
    (
        Opnum4::READDIR,
        Fs(op!(Readdir, |nfs, call, a, ctx| NfsResop4::Readdir(res(
            nfs.readdir(call, ctx, a)
        )))),
    ),
    (
        Opnum4::READLINK,
        Fs(op!(Readlink, |nfs, call, (), ctx| NfsResop4::Readlink(
            res(nfs.readlink(call, ctx))
        ))),
    ),
    (
        Opnum4::REMOVE,
        Fs(op!(Remove, |nfs, call, name, ctx| NfsResop4::Remove(res(
            nfs.remove(call, ctx, &name.0)
        )))),
    ),
    (
        Opnum4::RENAME,
        Fs(op!(Rename, |nfs, call, a, ctx| NfsResop4::Rename(res(
            nfs.rename(call, ctx, a)
        )))),
    ),
    (Opnum4::RENEW, NotSupported),
    (
        Opnum4::RESTOREFH,
        Memory(op!(Restorefh, |nfs, call, (), ctx| NfsResop4::Restorefh(
            match &ctx.saved {
                Some(f) => {
                    ctx.current = Some(f.clone());
                    ctx.stateid = ctx.saved_stateid;
                    Nfsstat4::OK
                }
                None => Nfsstat4::RESTOREFH,
            }
        ))),
    ),
    (
        Opnum4::SAVEFH,
        Memory(op!(Savefh, |nfs, call, (), ctx| {
            ctx.saved = ctx.current.clone();
            ctx.saved_stateid = ctx.stateid;
            NfsResop4::Savefh(Nfsstat4::OK)
        })),
    ),
    (
        Opnum4::SECINFO,
        Fs(op!(Secinfo, |nfs, call, name, ctx| NfsResop4::Secinfo(
            res(nfs.secinfo(call, ctx, &name.0))
        ))),
    ),
    (
        Opnum4::SETATTR,
        Fs(op!(Setattr, |nfs, call, a, ctx| NfsResop4::Setattr(
            match nfs.setattr(call, ctx, a) {
                Ok(attrsset) => SetattrRes {
                    status: Nfsstat4::OK,
                    attrsset,
                },
                Err(status) => SetattrRes {
                    status,
                    attrsset: Bitmap4::new(),
                },
            }
        ))),
    ),
    (Opnum4::SETCLIENTID, NotSupported),
    (Opnum4::SETCLIENTID_CONFIRM, NotSupported),
    (
        Opnum4::VERIFY,
        Fs(op!(Verify, |nfs, call, f, ctx| NfsResop4::Verify(
            match nfs.same_attrs(call, ctx, f) {
                Ok(true) => Nfsstat4::OK,
                Ok(false) => Nfsstat4::NOT_SAME,
                Err(s) => s,
            }
        ))),
    ),
    (Opnum4::WRITE, Data),
    (Opnum4::RELEASE_LOCKOWNER, NotSupported),
    (
        Opnum4::BACKCHANNEL_CTL,
        Fs(op!(BackchannelCtl, |nfs, call, a, ctx| {
            NfsResop4::BackchannelCtl(match &ctx.session {
                Some((id, _)) => status_of(nfs.state().backchannel_ctl(
                    id,
                    a.cb_program,
                    &a.sec_parms.0,
                )),
                None => Nfsstat4::OP_NOT_IN_SESSION,
            })
        })),
    ),
    (
        Opnum4::BIND_CONN_TO_SESSION,
        // BIND_CONN_TO_SESSION must be a COMPOUND's only op (§18.34.3).
        Fs(op!(BindConnToSession, |nfs, call, a, ctx| {
            if ctx.session.is_some() {
                return NfsResop4::error(Opnum4::BIND_CONN_TO_SESSION, Nfsstat4::NOT_ONLY_OP);
            }
            NfsResop4::BindConnToSession(res(nfs
                .state()
                .bind_conn_to_session(&a.sessid, call.conn, a.dir)
                .map(|dir| BindConnToSessionResOk {
                    sessid: a.sessid,
                    dir,
                    use_conn_in_rdma_mode: false,
                })))
        })),
    ),
    (
        Opnum4::EXCHANGE_ID,
        Fs(op!(ExchangeId, |nfs, call, a, ctx| {
            NfsResop4::ExchangeId(res(nfs.state().exchange_id(
                call.now,
                a,
                &principal(call.cred),
            )))
        })),
    ),
    (
        Opnum4::CREATE_SESSION,
        Fs(op!(CreateSession, |nfs, call, a, ctx| {
            NfsResop4::CreateSession(res({
                let mut st = nfs.state();
                let r = st.create_session(call.now, a, &principal(call.cred), call.conn);
                if let Ok(ok) = &r {
                    // Callbacks speak the client's minor version: Linux looks the session up
                    // among its clients of the CB_COMPOUND's minor version (a 4.2 mount's
                    // session is not found in a 4.1 CB_COMPOUND: NFS4ERR_BADSESSION).
                    if let Some(s) = st.session_mut(&ok.sessionid) {
                        s.cb.set_minor_version(ctx.minor);
                    }
                }
                r
            }))
        })),
    ),
    (
        Opnum4::DESTROY_SESSION,
        Fs(op!(DestroySession, |nfs, call, id, ctx| {
            NfsResop4::DestroySession(status_of(destroy_session(nfs, call, ctx, id)))
        })),
    ),
    (
        Opnum4::FREE_STATEID,
        Fs(op!(FreeStateid, |nfs, call, sid, ctx| {
            NfsResop4::FreeStateid(match (ctx.clientid, ctx.resolve_stateid(sid)) {
                (None, _) => Nfsstat4::OP_NOT_IN_SESSION,
                (Some(_), Err(s)) => s,
                (Some(c), Ok(sid)) => nfs.state().free_stateid(c, &sid),
            })
        })),
    ),
    (Opnum4::GET_DIR_DELEGATION, NotSupported),
    (Opnum4::GETDEVICEINFO, NotSupported),
    (Opnum4::GETDEVICELIST, NotSupported),
    (Opnum4::LAYOUTCOMMIT, NotSupported),
    (Opnum4::LAYOUTGET, NotSupported),
    (Opnum4::LAYOUTRETURN, NotSupported),
    (
        Opnum4::SECINFO_NO_NAME,
        Fs(op!(SecinfoNoName, |nfs, call, style, ctx| {
            NfsResop4::SecinfoNoName(res(nfs.secinfo_no_name(call, ctx, *style)))
        })),
    ),
    // Op 0 is the evaluation's start (`eval.rs`); anywhere else SEQUENCE is out of place.
    (
        Opnum4::SEQUENCE,
        Memory(op!(Sequence, |nfs, call, _, ctx| NfsResop4::error(
            Opnum4::SEQUENCE,
            Nfsstat4::SEQUENCE_POS
        ))),
    ),
    (Opnum4::SET_SSV, NotSupported),
    (
        Opnum4::TEST_STATEID,
        Fs(op!(TestStateid, |nfs, call, list, ctx| {
            NfsResop4::TestStateid(match ctx.clientid {
                Some(c) => Res4::Ok(StatusList(nfs.state().test_stateids(c, &list.0))),
                None => Res4::Err(Nfsstat4::OP_NOT_IN_SESSION),
            })
        })),
    ),
    (Opnum4::WANT_DELEGATION, NotSupported),
    (
        Opnum4::DESTROY_CLIENTID,
        Fs(op!(DestroyClientid, |nfs, call, id, ctx| {
            let r = nfs.state().destroy_clientid(*id);
            if r.is_ok() {
                nfs.remove_gone_records(call.now);
            }
            NfsResop4::DestroyClientid(status_of(r))
        })),
    ),
    (
        Opnum4::RECLAIM_COMPLETE,
        Fs(op!(ReclaimComplete, |nfs, call, one_fs, ctx| {
            NfsResop4::ReclaimComplete(match ctx.clientid {
                Some(c) => status_of(
                    nfs.ensure_record(c)
                        .and_then(|()| nfs.state().reclaim_complete(call.now, c, *one_fs)),
                ),
                None => Nfsstat4::OP_NOT_IN_SESSION,
            })
        })),
    ),
    (
        Opnum4::ALLOCATE,
        Fs(op!(Allocate, |nfs, call, a, ctx| NfsResop4::Allocate(
            status_of(nfs.allocate(call, ctx, a, false))
        ))),
    ),
    (
        Opnum4::COPY,
        Fs(op!(Copy, |nfs, call, a, ctx| NfsResop4::Copy(
            match nfs.copy(call, ctx, a) {
                Ok(r) => CopyRes::Ok(r),
                Err(s) => CopyRes::Err(s),
            }
        ))),
    ),
    (Opnum4::COPY_NOTIFY, NotSupported),
    (
        Opnum4::DEALLOCATE,
        Fs(op!(Deallocate, |nfs, call, a, ctx| NfsResop4::Deallocate(
            status_of(nfs.allocate(call, ctx, a, true))
        ))),
    ),
    (Opnum4::IO_ADVISE, NotSupported),
    (Opnum4::LAYOUTERROR, NotSupported),
    (Opnum4::LAYOUTSTATS, NotSupported),
    (
        Opnum4::OFFLOAD_CANCEL,
        Fs(op!(OffloadCancel, |nfs, call, sid, ctx| {
            NfsResop4::OffloadCancel(status_of(nfs.offload_cancel(ctx, sid)))
        })),
    ),
    (
        Opnum4::OFFLOAD_STATUS,
        Fs(op!(OffloadStatus, |nfs, call, sid, ctx| {
            NfsResop4::OffloadStatus(res(nfs.offload_status(ctx, sid)))
        })),
    ),
    // A data op while `Nfs4::read_plus` is on; NFS4ERR_NOTSUPP when it is off (eval.rs).
    (Opnum4::READ_PLUS, Data),
    (
        Opnum4::SEEK,
        Fs(op!(Seek, |nfs, call, a, ctx| NfsResop4::Seek(res(
            nfs.seek(call, ctx, a)
        )))),
    ),
    (Opnum4::WRITE_SAME, NotSupported),
    (
        Opnum4::CLONE,
        Fs(op!(Clone, |nfs, call, a, ctx| NfsResop4::Clone(status_of(
            nfs.clone_op(call, ctx, a)
        )))),
    ),
    // The extended-attribute ops of RFC 8276 (`xattr.rs`).
    (
        Opnum4::GETXATTR,
        Fs(op!(Getxattr, |nfs, call, name, ctx| NfsResop4::Getxattr(
            res(nfs.getxattr(call, ctx, name))
        ))),
    ),
    (
        Opnum4::SETXATTR,
        Fs(op!(Setxattr, |nfs, call, a, ctx| NfsResop4::Setxattr(res(
            nfs.setxattr(call, ctx, a)
        )))),
    ),
    (
        Opnum4::LISTXATTRS,
        Fs(op!(Listxattrs, |nfs, call, a, ctx| NfsResop4::Listxattrs(
            res(nfs.listxattrs(call, ctx, a))
        ))),
    ),
    (
        Opnum4::REMOVEXATTR,
        Fs(op!(Removexattr, |nfs, call, name, ctx| {
            NfsResop4::Removexattr(res(nfs.removexattr(call, ctx, name)))
        })),
    ),
];

/// DESTROY_SESSION (§18.37.3): outside a session (no SEQUENCE) the connection it comes on
/// must be bound to the session it names, so that a session is not destroyed by whoever
/// learned its id.
fn destroy_session(
    nfs: &Nfs4,
    call: &Call<'_>,
    ctx: &Ctx,
    id: &SessionId4,
) -> Result<(), Nfsstat4> {
    // The COMPOUND's own session may be destroyed only by its last op (§18.37.3): nothing
    // may run in a session that is gone (knfsd answers the same).
    if ctx.session.is_some_and(|(s, _)| s == *id) && !ctx.last_op {
        return Err(Nfsstat4::NOT_ONLY_OP);
    }
    let mut st = nfs.state();
    if ctx.session.is_none() {
        let s = st.session(id).ok_or(Nfsstat4::BADSESSION)?;
        if s.conn_dir(call.conn).is_none() {
            return Err(Nfsstat4::CONN_NOT_BOUND_TO_SESSION);
        }
    }
    st.destroy_session(id, ctx.session)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_xdr::nfs4::ops::OPS;

    #[test]
    fn every_defined_op_has_its_own_row_in_op_number_order() {
        for (i, (num, _)) in RUNS.iter().enumerate() {
            assert_eq!(num.0, FIRST_OP + i as u32, "row {i}");
            assert!(op_info(*num).is_some(), "{num:?} has facts");
        }
        for op in OPS.iter().filter(|op| **op != Opnum4::ILLEGAL) {
            let r = row(*op).unwrap_or_else(|| panic!("{op:?} has a row"));
            assert_eq!(r.info.num, *op);
        }
        assert!(row(Opnum4::ILLEGAL).is_none());
        assert!(row(Opnum4(2)).is_none());
        assert!(row(Opnum4(76)).is_none());
    }

    #[test]
    fn only_the_handle_and_sequence_ops_run_in_memory() {
        let memory: Vec<Opnum4> = RUNS
            .iter()
            .filter(|(_, r)| matches!(r, Memory(_)))
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(
            memory,
            [
                Opnum4::GETFH,
                Opnum4::PUTFH,
                Opnum4::RESTOREFH,
                Opnum4::SAVEFH,
                Opnum4::SEQUENCE
            ]
        );
        for op in [
            Opnum4::READ,
            Opnum4::WRITE,
            Opnum4::COMMIT,
            Opnum4::READ_PLUS,
        ] {
            assert!(matches!(row(op).map(|r| r.run), Some(Data)), "{op:?}");
        }
    }
}
