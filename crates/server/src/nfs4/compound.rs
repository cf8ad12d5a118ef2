//! The COMPOUND processor (RFC 8881 §16.2, §2.10.6): one encoded COMPOUND in, one encoded
//! reply out, over the state cores ([`State4`]), the pseudo tree and the exports' file systems.
//!
//! # Entry point
//! [`Nfs4::begin`] decodes a COMPOUND in place (a WRITE's payload stays slices of the received
//! record) into an [`Eval`], a resumable state machine that does no socket I/O: [`Eval::step`]
//! runs ops in order, calling the file systems inline, until a data op (READ, WRITE, COMMIT),
//! which it hands back to its driver ([`Step::Data`]) after the checks that are v4's; the
//! driver runs it through the shared data path and hands the result back with
//! [`Eval::resume`]; the last step returns the encoded reply ([`Step::Reply`]). Who sent the
//! call ([`Call`]: address, connection, credentials) and the time are arguments. The service
//! (`service::nfs4_call`) runs steps that may call a file system on the blocking pool, as v3
//! runs its backend calls, and the data ops on its own task (see [`super::data`]);
//! [`Nfs4::compound`] is the synchronous driver tests use.
//!
//! ```text
//!  record ─▶ decode (bounded: ops_max, tag) ──▶ not a COMPOUND: GarbageArgs
//!            │ minor version 0 or > 2 ─────────▶ MINOR_VERS_MISMATCH, no results
//!            ▼
//!  op 0:  SEQUENCE ─▶ State4::sequence ─┬─ Replay(bytes) ─▶ those bytes, nothing runs
//!         │                             ├─ RetryUncached ─▶ SEQUENCE OK, op 1: RETRY_UNCACHED_REP
//!         │                             ├─ Err(s) ────────▶ SEQUENCE's error alone
//!         │                             └─ Execute ─▶ ops 1.. ─▶ encode ─▶ slot keeps bytes
//!         EXCHANGE_ID, CREATE_SESSION, DESTROY_SESSION, DESTROY_CLIENTID,
//!         BIND_CONN_TO_SESSION: allowed alone (NOT_ONLY_OP with company)
//!         anything else: OP_NOT_IN_SESSION
//!  op n>0: SEQUENCE ─▶ SEQUENCE_POS; undefined ─▶ OP_ILLEGAL; 4.0-only, pNFS or not written
//!         yet ─▶ NOTSUPP; args that did not decode ─▶ BADXDR; needs a handle ─▶ NOFILEHANDLE
//!  the first error ends the COMPOUND; its status is the COMPOUND's
//! ```
//!
//! # File handles
//! The current and saved handles are either a pseudo-tree node or an export's handle (with
//! the export's index). LOOKUP of a pseudo node that is an export's path crosses into that
//! export's root, where the fsid changes (§7.4); LOOKUPP from an export root comes back to the
//! pseudo tree. Every op on an export handle passes the export's gate first: the client's
//! rules (no rule matching its address: NFS4ERR_ACCESS, as v3 answers ACCES), `secure`
//! (an unprivileged source port: NFS4ERR_PERM, knfsd's answer), and squashing, exactly as
//! [`crate::exports::caller_for`] does for v3. Only AUTH_SYS and AUTH_NONE reach this layer, and
//! every export accepts both, so SECINFO and SECINFO_NO_NAME answer those two and
//! NFS4ERR_WRONGSEC does not arise yet: knfsd answers it in v4 (ACCES in v3) for a flavor or
//! transport security an export does not accept, which is where it will come from here once
//! exports take `sec=`.
//!
//! # The reply cache
//! A request that passed SEQUENCE completes its slot ([`State4::complete`]) when its reply is
//! encoded; when the client set `sa_cachethis` the reply is handed over in one buffer and kept
//! if it fits `ca_maxresponsesize_cached`, and a retry gets those exact bytes back. Without
//! `sa_cachethis` nothing is kept (a retry gets a good SEQUENCE result and
//! NFS4ERR_RETRY_UNCACHED_REP on the op after it, nothing runs), so the reply is
//! never joined or copied for the slot. The reply is checked
//! against the session's limits op by op as it is built: the op whose result crosses
//! `ca_maxresponsesize` (or the cached limit, when caching was asked) is replaced by
//! NFS4ERR_REP_TOO_BIG (_TO_CACHE) and ends the COMPOUND (§2.10.6.4). An op that changes
//! state is refused before it runs if its largest result could cross the line, so that no
//! change is ever answered with an error.
//!
//! # Data ops
//! READ, WRITE and COMMIT go through [`crate::datapath::DataPath`] (not a copy of it), outside
//! the processor: the current handle must be a regular file of an export the caller may use,
//! and the stateid is checked by the open table first ([`State4::check_io`]: open stateids, the
//! anonymous and READ-bypass stateids, OPENMODE and LOCKED); then [`Eval::step`] returns the
//! [`DataReq`]. A READ that is the COMPOUND's last op may come back spliced (its data in a
//! pipe, sent after the encoded reply, as v3's), unless the slot keeps the reply: with
//! `sa_cachethis` the reply must be all in memory, and it is small
//! (`ca_maxresponsesize_cached`). A READ with ops after it comes back as pooled chunks, sent
//! as an iovec without joining. With `sa_cachethis` false, the slot keeps nothing and a retry
//! gets NFS4ERR_RETRY_UNCACHED_REP, so nothing of the reply needs keeping; the Linux client
//! sets it for every non-idempotent COMPOUND (WRITE, OPEN, CLOSE, …), whose replies the slot
//! then keeps whole, so a retried WRITE is answered, never re-executed (§2.10.6.1.3).
//!
//! # Write-behind
//! The ops that drop or shorten a file's data meet write-behind as v3's do (see
//! [`super::data`]): before SETATTR of the size or an OPEN that truncates a file with held
//! writes, the evaluation suspends with [`Step::Settle`] ([`Settle::Land`]) and the driver
//! lands them; after a REMOVE of such a file it suspends with [`Settle::Removed`] so that the
//! data of a file whose last link is gone is dropped. The driver answers with
//! [`Eval::settled`]. Held writes that did not land within [`Nfs4::settle_wait_max`] (or that
//! a driver cannot land) make the op answer NFS4ERR_DELAY, as does a write held again between
//! the landing and the op ([`Nfs4::settle`]): an op never truncates under held data.

use super::data::{DataDone, DataOp, DataReq, ReadPlusDone, Settle};
use super::deleg::GetattrView;
use super::digest::Digest;
use super::idmap::IdMap;
use super::map::{self, AttrCtx};
use super::parked::{self, Parked, ParkedFiles};
use super::pseudo::{Lookup, NodeId, PseudoFs};
use super::session::SequenceCall;
use super::slots::SlotDecision;
use super::state::State4;
use super::{ConnId, Nfsstat4, Principal};
use crate::backend::{
    Caller, ChangeKind, CreateHow, DeviceId, FileHandle, FileSystem, FileType, FsStat, StableHow,
    Wcc,
};
use crate::datapath::ReadData;
use crate::exports::{caller_for, ExportEntry};
use crate::io::writebehind::{SizeFix, WriteBehindDriver};
use crate::splice::{LentPipe, SplicedData};
use bytes::Bytes;
use sluice_rpc::server::Credentials;
use sluice_xdr::nfs4::attrs::{num as attr_num, AttrValues};
use sluice_xdr::nfs4::compound::{
    padding_after, Compound4Args, Compound4Res, CompoundError, CompoundLimits,
};
use sluice_xdr::nfs4::ops::{
    op_info, AccessResOk, BindConnToSessionResOk, CloseArgs, CopyRes, Createhow4, Entry4,
    NfsArgop4, NfsResop4, OpFlags, OpenArgs, OpenClaim4, OpenDelegation4, OpenDowngradeArgs,
    OpenResOk, Openflag4, Opnum4, ReaddirArgs, ReaddirResOk, Res4, Secinfo4, SecinfoList,
    SetattrArgs, SetattrRes, StatusList, ACCESS4_MODIFY, ACCESS4_READ, MAX_DIR_ENTRIES,
    OPEN4_RESULT_LOCKTYPE_POSIX, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_ACCESS_WRITE,
    OPEN4_SHARE_DENY_READ, OPEN4_SHARE_WANT_MASK,
};
use sluice_xdr::nfs4::ops::{CreateArgs, CreateResOk, Createtype4, RenameArgs, RenameResOk};
use sluice_xdr::nfs4::ops::{
    Data4, ReadPlusContent, ReadPlusContents, ReadPlusResOk, ReadResOk, WriteResOk,
    NFS4_CONTENT_DATA,
};
use sluice_xdr::nfs4::{
    Bitmap4, ChangeInfo4, Component4, Fattr4, Linktext4, NfsFh4, SessionId4, Stateid4,
    MINOR_VERSIONS,
};
use sluice_xdr::nfs4::{Specdata4, StableHow4};
use sluice_xdr::{Pack, Reader, Writer};
// `core::net`: an address is plain data here; this module opens no sockets.
use core::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Sees every op's outcome (per-op statistics): `op_start` just before an op runs,
/// `op_done` with the status its result carries. The processor reads no clock itself; the
/// observer does, so this module stays sans-IO. The server's statistics (`stats::Stats`)
/// implement it; the processor knows nothing of them.
pub trait OpObserver: Send + Sync {
    /// An op is about to run; the value comes back in [`OpObserver::op_done`].
    fn op_start(&self) -> Instant;
    /// The op finished with `status` (the COMPOUND stops after a non-OK one).
    fn op_done(&self, op: Opnum4, status: Nfsstat4, started: Instant);
}

/// AUTH_NONE and AUTH_SYS flavor numbers (RFC 5531 §8.2), in SECINFO's order of preference.
const FLAVORS: [u32; 2] = [1, 0];

/// The NFSv4.1 service state: exports, the pseudo tree built from their paths, and the state
/// cores behind one lock.
pub struct Nfs4 {
    pub exports: Arc<Vec<ExportEntry>>,
    pub pseudo: PseudoFs,
    pub state: Mutex<State4>,
    pub limits: CompoundLimits,
    /// The data path's write-behind, shared with v3 (see [`Nfs4::settle`]); `None` when the
    /// server runs none (tests).
    pub write_behind: Option<Arc<WriteBehindDriver>>,
    /// Told each op's outcome (per-op statistics); `None`: nobody counts.
    pub op_observer: Option<Arc<dyn OpObserver>>,
    /// Files removed while open, kept under a hidden name until their last CLOSE.
    pub parked: ParkedFiles,
    /// Owners as numbers (the default) or `name@domain` ([`super::idmap`]).
    pub idmap: IdMap,
    /// Longest wait for held writes to land before an op that truncates their file
    /// (default [`super::data::SETTLE_WAIT_MAX`]); past it the op answers NFS4ERR_DELAY.
    pub settle_wait_max: Duration,
    /// The stable client records (`compound/recovery.rs`); `None`: no restart recovery.
    pub records: Option<Arc<dyn super::stable::ClientRecords>>,
    /// Hands asynchronous COPYs to their driver (`crate::offload`), once it runs; until then
    /// (and in tests without it) every COPY is synchronous.
    pub copy_spawner: std::sync::OnceLock<Box<dyn super::offload::CopySpawner>>,
    /// CB_OFFLOADs queued for finished asynchronous copies (for the statistics).
    pub copy_offloads_sent: std::sync::atomic::AtomicU64,
    /// The delegation table's record count, read without the lock by the NFSv3 recall gate
    /// ([`crate::recall`]).
    delegs_published: Arc<std::sync::atomic::AtomicUsize>,
    /// READ_PLUS is answered (RFC 7862 §15.10, `super::data::read_plus`); false (`sluice serve
    /// --no-read-plus`): NFS4ERR_NOTSUPP, and the client reads with READ. Default true.
    pub read_plus: bool,
}

/// Who sent a COMPOUND, and when it runs: what a step needs besides the [`Eval`].
#[derive(Clone)]
pub struct Call<'a> {
    pub addr: SocketAddr,
    pub conn: ConnId,
    pub cred: &'a Credentials,
    pub now: Instant,
}

/// The encoded `COMPOUND4res`: segments to send as they are (a READ's pooled chunks are among
/// them, not copied) and, for a spliced last READ, its data in a pipe and the padding after it
/// (sent after `segs`).
#[derive(Debug)]
pub struct Reply4 {
    /// The COMPOUND's status (the first four bytes of `segs`).
    pub status: Nfsstat4,
    pub segs: Vec<Bytes>,
    pub spliced: Option<SplicedData>,
}

/// What [`Eval::step`] came to.
pub enum Step {
    /// A data op to run through the data path; then [`Eval::resume`] with its result.
    Data(DataReq),
    /// Write-behind holds writes of a file the next op truncates, or of a file the last op
    /// removed: land (or drop) them through the data path, then [`Eval::settled`].
    Settle(Settle),
    /// The COMPOUND is over: its reply.
    Reply(Reply4),
    /// Not a COMPOUND at all: the RPC layer answers GARBAGE_ARGS.
    GarbageArgs,
}

/// One COMPOUND being evaluated (from [`Nfs4::begin`]): a state machine that runs ops until
/// a data op or the end, so its driver can run the data op elsewhere and come back.
///
/// ```text
///   begin ─▶ step ─┬─ Data(req) ─▶ (driver runs req) ─▶ resume(result) ─▶ step ─┬─ …
///                  ├─ Settle(s) ─▶ (driver lands / drops held writes) ─▶ settled ─▶ step ─┤
///                  ├─ Reply(reply)     (slot completed: reply kept if cachethis)  │
///                  └─ GarbageArgs                                                 ┘
/// ```
///
/// Every op's result passes through one place ([`Eval::record`]), where the reply limits are
/// applied and its status decides whether evaluation goes on. An `Eval` dropped before its
/// reply must be [`Eval::abandon`]ed, or its slot stays busy.
pub struct Eval {
    args: Compound4Args,
    phase: Phase,
    /// Bytes of the COMPOUND's arguments, and the digest of those after SEQUENCE's sequence
    /// id (the slot's false-retry check).
    request_bytes: usize,
    digest: Digest,
    /// The driver can send a spliced READ.
    splice_ok: bool,
    /// The next op to run.
    next: usize,
    ctx: Ctx,
    res: Compound4Res,
    /// Bytes of the reply so far (counted when the session sets limits).
    reply_bytes: usize,
    limits: Option<ReplyLimits>,
    /// The slot this COMPOUND holds until its reply: session, slot id, `sa_cachethis`.
    slot: Option<(SessionId4, u32, bool)>,
    /// The data op the evaluation waits on.
    pending: Option<Pending>,
    /// The [`Step::Settle`] the evaluation waits on.
    settling: Option<Settling>,
    /// The op whose file's held writes were landed: it runs without suspending again.
    landed_for: Option<usize>,
    /// The last op's READ (or READ_PLUS) data, spliced.
    spliced: Option<SplicedRead>,
    /// Per-op statistics: the observer, and the start mark of the op now running (taken back
    /// by [`Eval::record`], the one place its status is known).
    observer: Option<Arc<dyn OpObserver>>,
    op_started: Option<Instant>,
}

enum Phase {
    /// Decoded; SEQUENCE (or the sessionless rules) next.
    Start,
    Run,
    Done,
    /// Answered without running anything (MINOR_VERS_MISMATCH, TOO_MANY_OPS, no ops).
    Early(Compound4Res),
    Garbage,
}

/// A last READ or READ_PLUS whose data is in a pipe: the pipe, the count and eof, and for a
/// READ_PLUS (one data segment) the segment's offset.
struct SplicedRead {
    pipe: LentPipe,
    count: u32,
    eof: bool,
    plus_offset: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    op: Opnum4,
    splice_ok: bool,
}

#[derive(Debug, Clone, Copy)]
enum Settling {
    /// Held writes landing before op `op` (at `next`) runs.
    Before { op: Opnum4 },
    /// Held data dropped after a REMOVE, whose result is recorded.
    After,
}

impl Eval {
    /// Runs ops up to the next data op (returned for the driver to run) or the end (the reply;
    /// the slot is completed). Call it again after [`Eval::resume`].
    pub fn step(&mut self, nfs: &Nfs4, call: &Call<'_>) -> Step {
        if self.pending.is_some() {
            debug_assert!(false, "step() before resume()");
            self.resume(Err(Nfsstat4::SERVERFAULT));
        }
        if self.settling.is_some() {
            debug_assert!(false, "step() before settled()");
            self.settled(false);
        }
        match std::mem::replace(&mut self.phase, Phase::Run) {
            Phase::Garbage | Phase::Done => {
                self.phase = Phase::Done;
                return Step::GarbageArgs;
            }
            Phase::Early(res) => {
                self.phase = Phase::Done;
                self.res = res;
                return self.finish(nfs);
            }
            Phase::Start => {
                if let Some(reply) = self.start(nfs, call) {
                    self.phase = Phase::Done;
                    return reply;
                }
            }
            Phase::Run => {}
        }
        while let Some(op) = self.args.ops.get(self.next) {
            let last = self.next + 1 == self.args.ops.len();
            self.next += 1;
            self.op_started = self.observer.as_ref().map(|o| o.op_start());
            let num = op.opnum();
            let r = if matches!(op, NfsArgop4::Sequence(_)) {
                NfsResop4::error(Opnum4::SEQUENCE, Nfsstat4::SEQUENCE_POS)
            } else if let Some(refused) = refuse(op, self.args.minorversion) {
                refused
            } else if let Some(s) = self
                .limits
                .as_ref()
                .and_then(|l| l.refuse_before(op, self.reply_bytes))
            {
                NfsResop4::error(num, s)
            } else if matches!(
                op,
                NfsArgop4::Read(_) | NfsArgop4::Write(_) | NfsArgop4::Commit(_)
            ) || (nfs.read_plus && matches!(op, NfsArgop4::ReadPlus(_)))
            {
                // Spliced data must be the reply's last bytes, and a reply the slot keeps
                // must be all in memory.
                let cached = self.slot.is_some_and(|(_, _, cachethis)| cachethis);
                let splice_ok = self.splice_ok && last && !cached;
                match nfs.data_req(call, &self.ctx, op, splice_ok) {
                    Ok(req) => {
                        self.pending = Some(Pending { op: num, splice_ok });
                        return Step::Data(req);
                    }
                    Err(s) => NfsResop4::error(num, s),
                }
            } else {
                let index = self.next - 1;
                if self.landed_for != Some(index) {
                    if let Some(fh) = nfs.held_before(call, &self.ctx, op) {
                        // Back to this op once the held writes landed.
                        self.next = index;
                        self.settling = Some(Settling::Before { op: num });
                        return Step::Settle(Settle::Land(fh));
                    }
                }
                let removed = nfs.held_removal(call, &self.ctx, op);
                let r = nfs.run_op(call, op, &mut self.ctx);
                if let Some((fs, fh)) = removed.filter(|_| r.status() == Nfsstat4::OK) {
                    self.record(r);
                    self.settling = Some(Settling::After);
                    return Step::Settle(Settle::Removed { fs, fh });
                }
                r
            };
            self.record(r);
        }
        self.phase = Phase::Done;
        self.finish(nfs)
    }

    /// The result of the data op [`Eval::step`] returned.
    pub fn resume(&mut self, done: Result<DataDone, Nfsstat4>) {
        let Some(p) = self.pending.take() else {
            debug_assert!(false, "resume() without a data op");
            return;
        };
        let r = match done {
            Err(s) => NfsResop4::error(p.op, s),
            Ok(DataDone::Read(d)) if p.op == Opnum4::READ => match d.data {
                ReadData::Chunks(data) => NfsResop4::Read(Res4::Ok(ReadResOk { eof: d.eof, data })),
                ReadData::Spliced(pipe) if p.splice_ok => {
                    self.spliced = Some(SplicedRead {
                        pipe,
                        count: d.count,
                        eof: d.eof,
                        plus_offset: None,
                    });
                    NfsResop4::Read(Res4::Ok(ReadResOk {
                        eof: d.eof,
                        data: Default::default(),
                    }))
                }
                // Not asked for: it could not be sent.
                ReadData::Spliced(_) => NfsResop4::error(p.op, Nfsstat4::SERVERFAULT),
            },
            Ok(DataDone::ReadPlus(rp)) if p.op == Opnum4::READ_PLUS => match rp {
                ReadPlusDone::Sparse { eof, contents } => {
                    NfsResop4::ReadPlus(Res4::Ok(ReadPlusResOk {
                        eof,
                        contents: ReadPlusContents(contents),
                    }))
                }
                ReadPlusDone::Dense { offset, done } => {
                    let one = |data| {
                        NfsResop4::ReadPlus(Res4::Ok(ReadPlusResOk {
                            eof: done.eof,
                            contents: ReadPlusContents(vec![ReadPlusContent::Data(Data4 {
                                offset,
                                data,
                            })]),
                        }))
                    };
                    match done.data {
                        // Nothing read (at or past the end): no segment, only eof.
                        _ if done.count == 0 => NfsResop4::ReadPlus(Res4::Ok(ReadPlusResOk {
                            eof: done.eof,
                            contents: ReadPlusContents(Vec::new()),
                        })),
                        ReadData::Chunks(data) => one(data),
                        ReadData::Spliced(pipe) if p.splice_ok => {
                            self.spliced = Some(SplicedRead {
                                pipe,
                                count: done.count,
                                eof: done.eof,
                                plus_offset: Some(offset),
                            });
                            one(Default::default())
                        }
                        ReadData::Spliced(_) => NfsResop4::error(p.op, Nfsstat4::SERVERFAULT),
                    }
                }
            },
            Ok(DataDone::Write(w)) if p.op == Opnum4::WRITE => {
                NfsResop4::Write(Res4::Ok(WriteResOk {
                    count: w.count,
                    committed: StableHow4(w.committed as u32),
                    writeverf: w.verifier,
                }))
            }
            Ok(DataDone::Commit(c)) if p.op == Opnum4::COMMIT => {
                NfsResop4::Commit(Res4::Ok(c.verifier))
            }
            Ok(_) => {
                debug_assert!(false, "a data result of another op than {:?}", p.op);
                NfsResop4::error(p.op, Nfsstat4::SERVERFAULT)
            }
        };
        self.record(r);
    }

    /// The end of the [`Step::Settle`] that [`Eval::step`] returned: whether the held writes
    /// landed (ignored after a REMOVE). Not landed: the op that waited answers NFS4ERR_DELAY.
    pub fn settled(&mut self, landed: bool) {
        match self.settling.take() {
            Some(Settling::Before { .. }) if landed => self.landed_for = Some(self.next),
            Some(Settling::Before { op }) => {
                self.next += 1;
                self.record(NfsResop4::error(op, Nfsstat4::DELAY));
            }
            Some(Settling::After) => {}
            None => debug_assert!(false, "settled() without a Settle step"),
        }
    }

    /// Whether the next [`Eval::step`] may call a file system (the driver then runs it on a
    /// blocking thread): false when what is left only touches memory, as when the last data
    /// op has been resumed and only the reply remains.
    pub fn may_block(&self) -> bool {
        match self.phase {
            Phase::Start | Phase::Run => self.args.ops[self.next..].iter().any(|op| {
                !matches!(
                    op,
                    NfsArgop4::Sequence(_)
                        | NfsArgop4::Putfh(_)
                        | NfsArgop4::Getfh(())
                        | NfsArgop4::Savefh(())
                        | NfsArgop4::Restorefh(())
                )
            }),
            _ => false,
        }
    }

    /// Ends an evaluation that will not reach its reply (its driver went away): the slot is
    /// freed with nothing kept, so a retry gets NFS4ERR_RETRY_UNCACHED_REP, not DELAY forever.
    pub fn abandon(&mut self, nfs: &Nfs4) {
        if let Some((sid, slot, _)) = self.slot.take() {
            nfs.state().complete(&sid, slot, None);
        }
        self.spliced = None;
        self.settling = None;
        self.phase = Phase::Done;
    }

    /// SEQUENCE (or the rules for a COMPOUND without one): `Some` answer when nothing else
    /// runs, `None` to run the ops from `self.next`.
    fn start(&mut self, nfs: &Nfs4, call: &Call<'_>) -> Option<Step> {
        self.op_started = self.observer.as_ref().map(|o| o.op_start());
        let first = &self.args.ops[0];
        if let NfsArgop4::Sequence(seq) = first {
            let sc = SequenceCall {
                slotid: seq.slotid,
                sequenceid: seq.sequenceid,
                highest_slotid: seq.highest_slotid,
                cachethis: seq.cachethis,
                request_bytes: self.request_bytes,
                op_count: self.args.ops.len(),
                digest: self.digest.clone().principal(&principal(call.cred).0),
                conn: call.conn,
            };
            let outcome = nfs.state().sequence(call.now, &seq.sessionid, &sc);
            let out = match outcome {
                Err(s) => {
                    self.record(NfsResop4::Sequence(Res4::Err(s)));
                    return Some(self.finish(nfs));
                }
                Ok(o) => o,
            };
            if matches!(out.decision, SlotDecision::RetryUncached) {
                // A retry of a reply the slot did not keep (§2.10.6.1.3): SEQUENCE
                // succeeds, as every reply's SEQUENCE must, and the op after it is
                // NFS4ERR_RETRY_UNCACHED_REP, where the Linux client looks for it (it handles
                // the error with the op's, and frees the slot to send the call again). Nothing
                // runs and the slot stays as it was, so the next call on it is not held up. A
                // lone SEQUENCE has no op after it: its SEQUENCE is answered again, which
                // changes nothing (knfsd keeps every lone SEQUENCE's reply to the same end).
                self.record(NfsResop4::Sequence(Res4::Ok(out.res)));
                if let Some(op) = self.args.ops.get(1) {
                    let num = op.opnum();
                    self.op_started = self.observer.as_ref().map(|o| o.op_start());
                    self.record(NfsResop4::error(num, Nfsstat4::RETRY_UNCACHED_REP));
                }
                return Some(self.finish(nfs));
            }
            if let SlotDecision::Replay(bytes) = out.decision {
                if let (Some(o), Some(t)) = (&self.observer, self.op_started.take()) {
                    o.op_done(Opnum4::SEQUENCE, Nfsstat4::OK, t);
                }
                // The reply as first sent, status and all.
                let status = Nfsstat4(
                    bytes
                        .get(..4)
                        .map_or(u32::MAX, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
                );
                return Some(Step::Reply(Reply4 {
                    status,
                    segs: vec![bytes],
                    spliced: None,
                }));
            }
            self.slot = Some((seq.sessionid, seq.slotid, seq.cachethis));
            self.ctx.session = Some((seq.sessionid, seq.slotid));
            self.ctx.clientid = Some(out.clientid);
            // SEQUENCE's own result is recorded before the session's limits apply: it is
            // always sent.
            let limits = nfs.state().session(&seq.sessionid).map(|s| ReplyLimits {
                bytes_max: s.reply_bytes_max(false),
                cached_bytes_max: seq.cachethis.then(|| s.reply_bytes_max(true)),
            });
            let sequence = NfsResop4::Sequence(Res4::Ok(out.res));
            self.reply_bytes += encoded_len(&sequence);
            self.record(sequence);
            self.limits = limits;
            self.next = 1;
            return None;
        }
        let status_alone = if sessionless(first.opnum()) {
            (self.args.ops.len() > 1).then_some(Nfsstat4::NOT_ONLY_OP)
        } else if refuse(first, self.args.minorversion).is_some() {
            None
        } else {
            Some(Nfsstat4::OP_NOT_IN_SESSION)
        };
        if let Some(s) = status_alone {
            let num = first.opnum();
            self.record(NfsResop4::error(num, s));
            return Some(self.finish(nfs));
        }
        None
    }

    /// Adds one op's result: the one place where every op's status is known. The reply limits
    /// apply here (the op whose result crosses one is replaced by its error, §2.10.6.4), and a
    /// status other than OK ends the COMPOUND with that status.
    fn record(&mut self, mut r: NfsResop4) {
        let spliced_bytes = |s: &Option<SplicedRead>| {
            s.as_ref()
                .map_or(0, |s| s.count as usize + padding_after(s.count as usize))
        };
        if let Some(l) = &self.limits {
            let len = encoded_len(&r) + spliced_bytes(&self.spliced);
            let over = if self.reply_bytes + len > l.bytes_max {
                Some(Nfsstat4::REP_TOO_BIG)
            } else if l
                .cached_bytes_max
                .is_some_and(|m| self.reply_bytes + len > m)
            {
                Some(Nfsstat4::REP_TOO_BIG_TO_CACHE)
            } else {
                None
            };
            if let Some(s) = over {
                r = NfsResop4::error(r.opnum(), s);
                self.spliced = None;
            }
            self.reply_bytes += encoded_len(&r) + spliced_bytes(&self.spliced);
        }
        let status = r.status();
        if let (Some(o), Some(t)) = (&self.observer, self.op_started.take()) {
            o.op_done(r.opnum(), status, t);
        }
        if status != Nfsstat4::OK {
            tracing::trace!(op = ?r.opnum(), ?status, "NFSv4 op failed");
        }
        self.res.results.push(r);
        if status != Nfsstat4::OK {
            self.res.status = status;
            self.next = self.args.ops.len();
        }
    }

    /// Encodes the reply and completes the slot, which keeps the reply when the client asked
    /// for caching (§2.10.6.1.3). Such a reply is within `ca_maxresponsesize_cached`, so
    /// joining it into the one buffer the slot keeps copies little.
    fn finish(&mut self, nfs: &Nfs4) -> Step {
        let mut w = Writer::new();
        let spliced = self.spliced.take();
        match &spliced {
            None => self.res.pack(&mut w),
            Some(sp) => {
                // All but the last result's data, which follows in the pipe.
                self.res.status.pack(&mut w);
                self.res.tag.pack(&mut w);
                w.put_u32(self.res.results.len() as u32);
                let (_, head) = self.res.results.split_last().expect("a READ's result");
                for r in head {
                    r.pack(&mut w);
                }
                match sp.plus_offset {
                    None => {
                        Opnum4::READ.pack(&mut w);
                        Nfsstat4::OK.pack(&mut w);
                        w.put_bool(sp.eof);
                    }
                    Some(offset) => {
                        // read_plus_res4 with one data4 segment.
                        Opnum4::READ_PLUS.pack(&mut w);
                        Nfsstat4::OK.pack(&mut w);
                        w.put_bool(sp.eof);
                        w.put_u32(1);
                        w.put_u32(NFS4_CONTENT_DATA);
                        w.put_u64(offset);
                    }
                }
                w.put_u32(sp.count);
            }
        }
        let mut segs = w.into_segments();
        if let Some((sid, slot, cachethis)) = self.slot.take() {
            debug_assert!(!(cachethis && spliced.is_some()), "a kept reply is spliced");
            let keep = (cachethis && spliced.is_none()).then(|| join(std::mem::take(&mut segs)));
            if let Some(b) = &keep {
                segs = vec![b.clone()];
            }
            nfs.state().complete(&sid, slot, keep);
        }
        Step::Reply(Reply4 {
            status: self.res.status,
            segs,
            spliced: spliced.map(|sp| SplicedData {
                pipe: sp.pipe,
                tail: Bytes::from_static(&[0u8; 3][..padding_after(sp.count as usize)]),
            }),
        })
    }
}

/// One buffer of `segs` (copies when there are several).
fn join(mut segs: Vec<Bytes>) -> Bytes {
    match segs.len() {
        0 => Bytes::new(),
        1 => segs.pop().expect("one"),
        _ => {
            let mut v = Vec::with_capacity(segs.iter().map(|s| s.len()).sum());
            for s in &segs {
                v.extend_from_slice(s);
            }
            Bytes::from(v)
        }
    }
}

/// Bytes a reply may have (`ca_maxresponsesize`) and, when the client asked for caching,
/// `ca_maxresponsesize_cached`.
struct ReplyLimits {
    bytes_max: usize,
    cached_bytes_max: Option<usize>,
}

impl ReplyLimits {
    /// The error an op that changes state gets *before* it runs when its largest result
    /// (OP_INFO's `reply_bytes_max`) could push the reply past a limit: a retry must find the
    /// reply the client was sent, so such an op must not run and then be answered with an error
    /// (RFC 8881 §2.10.6.4, §15.1.10.8). Ops whose result grows with their arguments are
    /// checked after they run (they do not change state yet).
    fn refuse_before(&self, op: &NfsArgop4, reply_bytes: usize) -> Option<Nfsstat4> {
        let info = op_info(op.opnum())?;
        if !info.flags.contains(OpFlags::MODIFIES)
            || info.flags.contains(OpFlags::REPLY_GROWS_WITH_ARGS)
        {
            return None;
        }
        let worst = reply_bytes + info.reply_bytes_max as usize;
        if worst > self.bytes_max {
            Some(Nfsstat4::REP_TOO_BIG)
        } else if self.cached_bytes_max.is_some_and(|m| worst > m) {
            Some(Nfsstat4::REP_TOO_BIG_TO_CACHE)
        } else {
            None
        }
    }
}

/// What a data op works on (see [`Nfs4::data_target`]).
type DataTarget = (Arc<dyn FileSystem>, Caller, FileHandle);

/// A file handle of the current or saved slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fh {
    Pseudo(NodeId),
    Export { idx: usize, fh: FileHandle },
}

/// One COMPOUND's evaluation state.
#[derive(Debug, Clone, Default)]
pub struct Ctx {
    pub current: Option<Fh>,
    pub saved: Option<Fh>,
    /// The current stateid (§16.2.3.1.2), for the "current stateid" special value.
    pub stateid: Option<Stateid4>,
    /// The session and slot of this COMPOUND's SEQUENCE, and the client it acts for.
    pub session: Option<(SessionId4, u32)>,
    pub clientid: Option<u64>,
    /// The COMPOUND's minor version (1 or 2): which attributes exist.
    pub minor: u32,
}

impl Ctx {
    /// Resolves the special "current stateid" (§16.2.3.1.2) to the one last set.
    pub fn resolve_stateid(&self, s: &Stateid4) -> Result<Stateid4, Nfsstat4> {
        if *s == Stateid4::CURRENT {
            return self.stateid.ok_or(Nfsstat4::BAD_STATEID);
        }
        Ok(*s)
    }
}

/// The principal the client-record rules compare (RFC 8881 §2.4): for AUTH_SYS the uid, gid
/// and machine name; AUTH_NONE is one anonymous principal.
pub fn principal(cred: &Credentials) -> Principal {
    match cred {
        Credentials::None => Principal(Bytes::from_static(b"none")),
        Credentials::Sys(a) => {
            let mut b = Vec::with_capacity(12 + a.machine_name.len());
            b.extend_from_slice(b"sys:");
            b.extend_from_slice(&a.uid.to_be_bytes());
            b.extend_from_slice(&a.gid.to_be_bytes());
            b.extend_from_slice(&a.machine_name);
            Principal(Bytes::from(b))
        }
    }
}

/// How much of a request that did not ask for its reply to be cached (`sa_cachethis` false)
/// goes into its digest, beside its total length.
///
/// The digest exists so that a false retry never gets another request's *cached reply*. An
/// uncached request has none: a retry of it is answered NFS4ERR_RETRY_UNCACHED_REP, a false
/// retry NFS4ERR_SEQ_FALSE_RETRY, and both tell the client that nothing was replayed. So for
/// it the digest only chooses between two errors (and, on a retired slot, between running a
/// request at sequence id 1 and answering that error), and a sample is enough: the arguments
/// up to a WRITE's first few KiB of data. The Linux client sends READ and WRITE uncached, and
/// hashing every byte of a 1 MiB WRITE was 16 % of the server's CPU on a stream of them even
/// with XXH3 (2026-11-25 profile). Cached requests are hashed whole (see [`super::digest`]).
const UNCACHED_DIGEST_BYTES: usize = 4096;

/// The [`Digest`] of the arguments (starting `args_offset` bytes into `segs`) after SEQUENCE's
/// sequence id, skipping what comes before it: tag (length + padded bytes), minor version, op
/// count, SEQUENCE's op number, session id (16), sequence id. Read in place from the record's
/// segments (§2.10.6.1.3; what it can and cannot tell apart: [`super::digest`]). With `limit`,
/// only the first `limit` bytes of them, then the length of all of them.
fn digest_after_sequenceid(segs: &[Bytes], args_offset: usize, limit: Option<usize>) -> Digest {
    let mut d = Digest::new();
    let mut r = Reader::new(segs);
    let tag_len = match r.skip(args_offset).and_then(|()| r.get_u32()) {
        Ok(n) => n as usize,
        Err(_) => return d,
    };
    let mut skip = args_offset + 4 + tag_len.div_ceil(4) * 4 + 4 + 4 + 4 + 16 + 4;
    let mut room = limit.unwrap_or(usize::MAX);
    let mut total_bytes = 0u64;
    for s in segs {
        if skip >= s.len() {
            skip -= s.len();
            continue;
        }
        let rest = &s[skip..];
        total_bytes += rest.len() as u64;
        let n = rest.len().min(room);
        d.update(&rest[..n]);
        room -= n;
        skip = 0;
    }
    if limit.is_some() {
        // What was left out still counts by its length.
        d.update(&total_bytes.to_le_bytes());
    }
    d
}

/// Bytes `v` encodes to, without joining the encoder's segments (a READ result's data chunks
/// are referenced, not copied).
fn encoded_len<T: Pack>(v: &T) -> usize {
    let mut w = Writer::new();
    v.pack(&mut w);
    w.len()
}

/// Ops allowed first without SEQUENCE (RFC 8881 §2.6.3.1.1.1).
fn sessionless(op: Opnum4) -> bool {
    op_info(op).is_some_and(|i| i.flags.contains(OpFlags::SESSIONLESS))
}

/// The refusal an op gets before it runs, if any: undefined, from another minor version, pNFS.
fn refuse(op: &NfsArgop4, minorversion: u32) -> Option<NfsResop4> {
    let num = op.opnum();
    match op {
        NfsArgop4::Illegal(_) => return Some(NfsResop4::Illegal(Nfsstat4::OP_ILLEGAL)),
        NfsArgop4::BadXdr(..) => return Some(NfsResop4::error(num, Nfsstat4::BADXDR)),
        _ => {}
    }
    let flags = op_info(num)?.flags;
    if flags.contains(OpFlags::V42) && minorversion < 2 {
        return Some(NfsResop4::Illegal(Nfsstat4::OP_ILLEGAL));
    }
    if flags.contains(OpFlags::V40_ONLY) || flags.contains(OpFlags::PNFS) {
        return Some(NfsResop4::error(num, Nfsstat4::NOTSUPP));
    }
    None
}

fn nfs_fh4(fh: &FileHandle) -> NfsFh4 {
    NfsFh4(fh.to_bytes())
}

impl Nfs4 {
    /// A service over `exports`, its pseudo tree built from their paths (`generation` tells
    /// this tree's handles from an earlier one's).
    pub fn new(
        exports: Arc<Vec<ExportEntry>>,
        state: State4,
        generation: u32,
    ) -> Result<Self, super::pseudo::PseudoError> {
        let paths: Vec<String> = exports
            .iter()
            .map(|e| e.export.path.to_string_lossy().into_owned())
            .collect();
        Ok(Self {
            pseudo: PseudoFs::new(&paths, generation)?,
            exports,
            delegs_published: state.delegations().published(),
            state: Mutex::new(state),
            limits: CompoundLimits::default(),
            write_behind: None,
            op_observer: None,
            parked: ParkedFiles::default(),
            idmap: IdMap::numeric(),
            settle_wait_max: super::data::SETTLE_WAIT_MAX,
            records: None,
            copy_spawner: std::sync::OnceLock::new(),
            copy_offloads_sent: std::sync::atomic::AtomicU64::new(0),
            read_plus: true,
        })
    }

    /// The driver saw connection `conn` close: sessions unbind it (see [`State4::conn_closed`]).
    pub fn conn_closed(&self, conn: ConnId) {
        self.state().conn_closed(conn);
    }

    fn state(&self) -> MutexGuard<'_, State4> {
        // A panic under the lock is a bug elsewhere; the tables stay usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts evaluating the COMPOUND whose arguments start `args_offset` bytes into the
    /// record `segs`. Decoding copies nothing bulky: a WRITE's payload stays slices of `segs`.
    /// `splice_ok`: a READ that is the last op may come back spliced (the driver sends a
    /// [`Reply4::spliced`] part), when the slot does not keep the reply.
    pub fn begin(&self, segs: &[Bytes], args_offset: usize, splice_ok: bool) -> Eval {
        let mut r = Reader::new(segs);
        let request_bytes = r.remaining().saturating_sub(args_offset);
        let decoded = match r.skip(args_offset) {
            Err(_) => Err(None),
            Ok(()) => match Compound4Args::decode(&mut r, &self.limits) {
                Ok(a) if !MINOR_VERSIONS.contains(&a.minorversion) => Err(Some(Compound4Res {
                    status: Nfsstat4::MINOR_VERS_MISMATCH,
                    tag: a.tag,
                    results: Vec::new(),
                })),
                Ok(a) if a.ops.is_empty() => Err(Some(Compound4Res {
                    status: Nfsstat4::OK,
                    tag: a.tag,
                    results: Vec::new(),
                })),
                Ok(a) => Ok(a),
                Err(CompoundError::Xdr(_)) => Err(None),
                Err(CompoundError::TooManyOps { tag, first, .. }) => {
                    // Only minor versions 1 and 2 get this far: their error is TOO_MANY_OPS.
                    let status = Nfsstat4::TOO_MANY_OPS;
                    let results = first
                        .iter()
                        .map(|op| NfsResop4::error(op.opnum(), status))
                        .collect();
                    Err(Some(Compound4Res {
                        status,
                        tag,
                        results,
                    }))
                }
            },
        };
        let (args, phase) = match decoded {
            Ok(a) => (a, Phase::Start),
            Err(early) => (
                Compound4Args {
                    tag: Default::default(),
                    minorversion: 0,
                    ops: Vec::new(),
                },
                early.map_or(Phase::Garbage, Phase::Early),
            ),
        };
        let digest = match args.ops.first() {
            Some(NfsArgop4::Sequence(seq)) => {
                let limit = (!seq.cachethis).then_some(UNCACHED_DIGEST_BYTES);
                digest_after_sequenceid(segs, args_offset, limit)
            }
            _ => Digest::new(),
        };
        let minor = args.minorversion;
        Eval {
            res: Compound4Res {
                status: Nfsstat4::OK,
                tag: args.tag.clone(),
                results: Vec::with_capacity(args.ops.len()),
            },
            // Status, tag and result count, then each result as it is added.
            reply_bytes: 4 + encoded_len(&args.tag) + 4,
            args,
            phase,
            request_bytes,
            digest,
            splice_ok,
            next: 0,
            ctx: Ctx {
                minor,
                ..Ctx::default()
            },
            limits: None,
            slot: None,
            pending: None,
            settling: None,
            landed_for: None,
            spliced: None,
            observer: self.op_observer.clone(),
            op_started: None,
        }
    }

    /// One op that passed the position checks.
    fn run_op(&self, call: &Call<'_>, op: &NfsArgop4, ctx: &mut Ctx) -> NfsResop4 {
        let num = op.opnum();
        let needs_fh = op_info(num).is_some_and(|i| i.flags.contains(OpFlags::NEEDS_FH));
        if needs_fh && ctx.current.is_none() {
            return NfsResop4::error(num, Nfsstat4::NOFILEHANDLE);
        }
        match op {
            NfsArgop4::ExchangeId(a) => NfsResop4::ExchangeId(res(self.state().exchange_id(
                call.now,
                a,
                &principal(call.cred),
            ))),
            NfsArgop4::CreateSession(a) => NfsResop4::CreateSession(res({
                let mut st = self.state();
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
            })),
            NfsArgop4::DestroySession(id) => {
                NfsResop4::DestroySession(status_of(self.destroy_session(call, ctx, id)))
            }
            NfsArgop4::DestroyClientid(id) => {
                let r = self.state().destroy_clientid(*id);
                if r.is_ok() {
                    self.remove_gone_records(call.now);
                }
                NfsResop4::DestroyClientid(status_of(r))
            }
            // BIND_CONN_TO_SESSION must be a COMPOUND's only op (§18.34.3).
            NfsArgop4::BindConnToSession(_) if ctx.session.is_some() => {
                NfsResop4::error(num, Nfsstat4::NOT_ONLY_OP)
            }
            NfsArgop4::BindConnToSession(a) => NfsResop4::BindConnToSession(res(self
                .state()
                .bind_conn_to_session(&a.sessid, call.conn, a.dir)
                .map(|dir| BindConnToSessionResOk {
                    sessid: a.sessid,
                    dir,
                    use_conn_in_rdma_mode: false,
                }))),
            NfsArgop4::BackchannelCtl(a) => NfsResop4::BackchannelCtl(match &ctx.session {
                Some((id, _)) => status_of(self.state().backchannel_ctl(
                    id,
                    a.cb_program,
                    &a.sec_parms.0,
                )),
                None => Nfsstat4::OP_NOT_IN_SESSION,
            }),
            NfsArgop4::ReclaimComplete(one_fs) => NfsResop4::ReclaimComplete(match ctx.clientid {
                Some(c) => status_of(
                    self.ensure_record(c)
                        .and_then(|()| self.state().reclaim_complete(call.now, c, *one_fs)),
                ),
                None => Nfsstat4::OP_NOT_IN_SESSION,
            }),
            NfsArgop4::Putrootfh(()) => NfsResop4::Putrootfh(self.put_root(call, ctx)),
            // knfsd's public handle is its root handle; so is ours.
            NfsArgop4::Putpubfh(()) => NfsResop4::Putpubfh(self.put_root(call, ctx)),
            NfsArgop4::Putfh(fh) => NfsResop4::Putfh(status_of(self.put_fh(fh).map(|f| {
                ctx.current = Some(f);
            }))),
            NfsArgop4::Getfh(()) => NfsResop4::Getfh(match &ctx.current {
                Some(Fh::Pseudo(n)) => {
                    Res4::Ok(NfsFh4(Bytes::copy_from_slice(&self.pseudo.handle(*n))))
                }
                Some(Fh::Export { fh, .. }) => Res4::Ok(nfs_fh4(fh)),
                None => Res4::Err(Nfsstat4::NOFILEHANDLE),
            }),
            NfsArgop4::Savefh(()) => {
                ctx.saved = ctx.current.clone();
                NfsResop4::Savefh(Nfsstat4::OK)
            }
            NfsArgop4::Restorefh(()) => NfsResop4::Restorefh(match &ctx.saved {
                Some(f) => {
                    ctx.current = Some(f.clone());
                    Nfsstat4::OK
                }
                None => Nfsstat4::RESTOREFH,
            }),
            NfsArgop4::Lookup(name) => {
                NfsResop4::Lookup(status_of(self.lookup(call, ctx, &name.0)))
            }
            NfsArgop4::Lookupp(()) => NfsResop4::Lookupp(status_of(self.lookupp(call, ctx))),
            NfsArgop4::Getattr(req) => NfsResop4::Getattr(res(self.getattr(call, ctx, req))),
            NfsArgop4::Access(a) => NfsResop4::Access(res(self.access(call, ctx, a.access))),
            NfsArgop4::Open(a) => NfsResop4::Open(res(self.open(call, ctx, a))),
            NfsArgop4::Close(a) => NfsResop4::Close(res(self.close(ctx, a))),
            NfsArgop4::Delegreturn(sid) => {
                NfsResop4::Delegreturn(status_of(self.delegreturn(ctx, sid)))
            }
            NfsArgop4::OpenDowngrade(a) => {
                NfsResop4::OpenDowngrade(res(self.open_downgrade(ctx, a)))
            }
            NfsArgop4::TestStateid(list) => NfsResop4::TestStateid(match ctx.clientid {
                Some(c) => Res4::Ok(StatusList(self.state().test_stateids(c, &list.0))),
                None => Res4::Err(Nfsstat4::OP_NOT_IN_SESSION),
            }),
            NfsArgop4::FreeStateid(sid) => NfsResop4::FreeStateid(match ctx.clientid {
                Some(c) => self.state().free_stateid(c, sid),
                None => Nfsstat4::OP_NOT_IN_SESSION,
            }),
            NfsArgop4::Lock(a) => NfsResop4::Lock(self.lock(call, ctx, a)),
            NfsArgop4::Lockt(a) => NfsResop4::Lockt(self.lockt(call, ctx, a)),
            NfsArgop4::Locku(a) => NfsResop4::Locku(res(self.locku(ctx, a))),
            NfsArgop4::Readlink(()) => NfsResop4::Readlink(res(self.readlink(call, ctx))),
            NfsArgop4::Secinfo(name) => NfsResop4::Secinfo(res(self.secinfo(call, ctx, &name.0))),
            NfsArgop4::Verify(f) => NfsResop4::Verify(match self.same_attrs(call, ctx, f) {
                Ok(true) => Nfsstat4::OK,
                Ok(false) => Nfsstat4::NOT_SAME,
                Err(s) => s,
            }),
            NfsArgop4::Nverify(f) => NfsResop4::Nverify(match self.same_attrs(call, ctx, f) {
                Ok(true) => Nfsstat4::SAME,
                Ok(false) => Nfsstat4::OK,
                Err(s) => s,
            }),
            NfsArgop4::Setattr(a) => NfsResop4::Setattr(match self.setattr(call, ctx, a) {
                Ok(attrsset) => SetattrRes {
                    status: Nfsstat4::OK,
                    attrsset,
                },
                Err(status) => SetattrRes {
                    status,
                    attrsset: Bitmap4::new(),
                },
            }),
            NfsArgop4::Create(a) => NfsResop4::Create(res(self.create(call, ctx, a))),
            NfsArgop4::Rename(a) => NfsResop4::Rename(res(self.rename(call, ctx, a))),
            NfsArgop4::Link(name) => NfsResop4::Link(res(self.link(call, ctx, &name.0))),
            NfsArgop4::Remove(name) => NfsResop4::Remove(res(self.remove(call, ctx, &name.0))),
            NfsArgop4::Readdir(a) => NfsResop4::Readdir(res(self.readdir(call, ctx, a))),
            NfsArgop4::SecinfoNoName(style) => {
                NfsResop4::SecinfoNoName(res(self.secinfo_no_name(call, ctx, *style)))
            }
            // The evaluation runs these through the data path ([`Eval::step`]).
            NfsArgop4::Seek(a) => NfsResop4::Seek(res(self.seek(call, ctx, a))),
            NfsArgop4::Allocate(a) => {
                NfsResop4::Allocate(status_of(self.allocate(call, ctx, a, false)))
            }
            NfsArgop4::Deallocate(a) => {
                NfsResop4::Deallocate(status_of(self.allocate(call, ctx, a, true)))
            }
            NfsArgop4::Copy(a) => NfsResop4::Copy(match self.copy(call, ctx, a) {
                Ok(r) => CopyRes::Ok(r),
                Err(s) => CopyRes::Err(s),
            }),
            NfsArgop4::Clone(a) => NfsResop4::Clone(status_of(self.clone_op(call, ctx, a))),
            NfsArgop4::OffloadStatus(sid) => {
                NfsResop4::OffloadStatus(res(self.offload_status(ctx, sid)))
            }
            NfsArgop4::OffloadCancel(sid) => {
                NfsResop4::OffloadCancel(status_of(self.offload_cancel(ctx, sid)))
            }
            NfsArgop4::Read(_) | NfsArgop4::Write(_) | NfsArgop4::Commit(_) => {
                debug_assert!(false, "data op {num:?} in run_op");
                NfsResop4::error(num, Nfsstat4::SERVERFAULT)
            }
            other => NfsResop4::error(other.opnum(), Nfsstat4::NOTSUPP),
        }
    }

    /// The export at `idx` as this caller may use it: its file system and the caller after
    /// the export's rules and squashing (see the module notes).
    fn gate(&self, call: &Call<'_>, idx: usize) -> Result<(&dyn FileSystem, Caller), Nfsstat4> {
        let entry = self.exports.get(idx).ok_or(Nfsstat4::STALE)?;
        let opts = entry
            .export
            .options_for(call.addr.ip())
            .ok_or(Nfsstat4::ACCESS)?;
        if opts.secure && call.addr.port() >= 1024 {
            return Err(Nfsstat4::PERM);
        }
        Ok((&*entry.fs, caller_for(call.cred, opts)))
    }

    /// The root of export `idx`, if the caller may enter it.
    fn enter_export(&self, call: &Call<'_>, idx: usize) -> Result<Fh, Nfsstat4> {
        let (fs, _) = self.gate(call, idx)?;
        Ok(Fh::Export {
            idx,
            fh: fs.root_handle(),
        })
    }

    fn put_root(&self, call: &Call<'_>, ctx: &mut Ctx) -> Nfsstat4 {
        let root = self.pseudo.root();
        let fh = match self.pseudo.export_at(root) {
            Some(idx) => match self.enter_export(call, idx) {
                Ok(f) => f,
                Err(s) => return s,
            },
            None => Fh::Pseudo(root),
        };
        ctx.current = Some(fh);
        Nfsstat4::OK
    }

    fn put_fh(&self, fh: &NfsFh4) -> Result<Fh, Nfsstat4> {
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

    fn lookup(&self, call: &Call<'_>, ctx: &mut Ctx, name: &[u8]) -> Result<(), Nfsstat4> {
        check_name(name)?;
        let next = match ctx.current.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)? {
            Fh::Pseudo(n) => match self.pseudo.lookup(*n, name)? {
                Lookup::Pseudo(m) => Fh::Pseudo(m),
                Lookup::Export(idx) => self.enter_export(call, idx)?,
            },
            Fh::Export { idx, fh } => {
                let (fs, caller) = self.gate(call, *idx)?;
                let ok = fs
                    .lookup(&caller, fh, name)
                    .map_err(|(e, _)| map::status(e))?;
                Fh::Export {
                    idx: *idx,
                    fh: ok.fh,
                }
            }
        };
        ctx.current = Some(next);
        Ok(())
    }

    fn lookupp(&self, call: &Call<'_>, ctx: &mut Ctx) -> Result<(), Nfsstat4> {
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
        ctx.current = Some(next);
        Ok(())
    }

    fn lease_time_secs(&self) -> u32 {
        u32::try_from(self.state().config().lease.as_secs()).unwrap_or(u32::MAX)
    }

    fn getattr(&self, call: &Call<'_>, ctx: &Ctx, req: &Bitmap4) -> Result<Fattr4, Nfsstat4> {
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
                self.export_fattr_as(fs, *idx, fh, (lease_time, ctx.minor), req, view)
            }
        }
    }

    /// READDIR (§18.23) of a pseudo directory (its children; exports the caller may not use
    /// are left out) or an export directory ("." and ".." are not v4 entries).
    fn readdir(
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

    fn pseudo_fattr(
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
            fsid: super::pseudo::PSEUDO_FSID,
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
        };
        map::fattr4(
            &map::pseudo_attr(n, subdirs, self.pseudo.generation()),
            &actx,
            req,
        )
    }

    fn export_fattr(
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
    fn export_fattr_as(
        &self,
        fs: &dyn FileSystem,
        idx: usize,
        fh: &FileHandle,
        (lease_time, minor): (u32, u32),
        req: &Bitmap4,
        view: GetattrView,
    ) -> Result<Fattr4, Nfsstat4> {
        let since = self.write_behind.as_ref().map(|wb| wb.epoch());
        let mut attr = fs.getattr(fh).map_err(map::status)?;
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
        };
        map::fattr4(&attr, &actx, req)
    }

    /// OPEN (§18.16): CLAIM_NULL (with or without create: UNCHECKED, GUARDED, EXCLUSIVE4_1
    /// and 4.0's EXCLUSIVE), CLAIM_FH, and CLAIM_DELEGATE_CUR / CLAIM_DELEG_CUR_FH under the
    /// caller's delegation, of a regular file in an export; then the recall gate of other
    /// clients' delegations (for a writer), the share reservation in the state core, and the
    /// delegation grant (`deleg.rs`). CLAIM_PREVIOUS reclaims an open of the current handle in
    /// grace (NO_GRACE / RECLAIM_BAD otherwise), with the read delegation it names granted
    /// back; every other claim is NFS4ERR_GRACE in grace (`state/recovery.rs`);
    /// CLAIM_DELEGATE_PREV / CLAIM_DELEG_PREV_FH are NOTSUPP (`deleg.rs`, "Reboot recovery").
    fn open(&self, call: &Call<'_>, ctx: &mut Ctx, a: &OpenArgs) -> Result<OpenResOk, Nfsstat4> {
        let clientid = ctx.clientid.ok_or(Nfsstat4::OP_NOT_IN_SESSION)?;
        // Grace before anything is created, the stable record before anything is granted.
        let reclaim = matches!(a.claim, OpenClaim4::Previous(_));
        if reclaim {
            self.state().check_reclaim(clientid)?;
        } else {
            self.state().check_grace_new_state()?;
        }
        self.ensure_record(clientid)?;
        let creating = matches!(a.openhow, Openflag4::Create(_));
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
        let mut attrset = Bitmap4::new();
        let mut created = false;
        let (fh, attr, cinfo) = match &a.claim {
            OpenClaim4::Fh | OpenClaim4::Previous(_) | OpenClaim4::DelegCurFh(_) if creating => {
                return Err(Nfsstat4::INVAL)
            }
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
                check_name(&name.0)?;
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
                        let attr = fs.getattr(&ok.fh).map_err(map::status)?;
                        (ok.fh, attr, cinfo)
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
                OpenClaim4::Null(_) | OpenClaim4::Fh => {
                    let now_attrs = crate::nfs4::deleg::SizeChange {
                        size: attr.size,
                        change: attr.change,
                    };
                    let fh = fh.as_bytes();
                    st.open_delegation(call.now, clientid, (&file, fh), a.share_access, now_attrs)
                }
                // A reclaim gets the read delegation it names back (`deleg.rs`, "Reboot
                // recovery").
                OpenClaim4::Previous(dtype) => {
                    let now_attrs = crate::nfs4::deleg::SizeChange {
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
    fn open_existing(
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
    fn open_file(&self, ctx: &Ctx) -> Result<Bytes, Nfsstat4> {
        match ctx.current.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)? {
            Fh::Export { idx, fh } => Ok(self.state_key(*idx, fh)),
            // Nothing in the pseudo tree is ever open.
            Fh::Pseudo(_) => Err(Nfsstat4::BAD_STATEID),
        }
    }

    /// CLOSE (§18.2).
    fn close(&self, ctx: &mut Ctx, a: &CloseArgs) -> Result<Stateid4, Nfsstat4> {
        let clientid = ctx.clientid.ok_or(Nfsstat4::OP_NOT_IN_SESSION)?;
        let file = self.open_file(ctx)?;
        let sid = ctx.resolve_stateid(&a.open_stateid)?;
        let out = self.state().close(clientid, &sid, &file)?;
        ctx.stateid = Some(out);
        self.unlink_closed();
        Ok(out)
    }

    /// OPEN_DOWNGRADE (§18.18).
    fn open_downgrade(&self, ctx: &mut Ctx, a: &OpenDowngradeArgs) -> Result<Stateid4, Nfsstat4> {
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

    /// What a data op works on: the export's file system, the caller after the export's
    /// gate, and the current handle, which must be a regular file (a directory is ISDIR,
    /// anything else INVAL, §18.22.3; a pseudo node is a directory).
    fn data_target(&self, call: &Call<'_>, ctx: &Ctx) -> Result<DataTarget, Nfsstat4> {
        match ctx.current.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)? {
            Fh::Pseudo(_) => Err(Nfsstat4::ISDIR),
            Fh::Export { idx, fh } => {
                let (fs, caller) = self.gate(call, *idx)?;
                match fs.getattr(fh).map_err(map::status)?.ftype {
                    FileType::Regular => {}
                    FileType::Directory => return Err(Nfsstat4::ISDIR),
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
    fn check_io(
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
    fn break_delegations(
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
    fn any_delegation(&self) -> bool {
        self.delegs_published
            .load(std::sync::atomic::Ordering::Acquire)
            != 0
    }

    /// The same for the object `name` in `dir`, if there is one (a lookup only while some
    /// delegation exists).
    fn break_delegations_at(
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

    /// DELEGRETURN (§18.6).
    fn delegreturn(&self, ctx: &Ctx, stateid: &Stateid4) -> Result<(), Nfsstat4> {
        let clientid = ctx.clientid.ok_or(Nfsstat4::OP_NOT_IN_SESSION)?;
        let file = self.open_file(ctx)?;
        let sid = ctx.resolve_stateid(stateid)?;
        self.state().delegreturn(clientid, &sid, &file)
    }

    /// READ (§18.22), WRITE (§18.32) and COMMIT (§18.3) up to the data path: the current
    /// handle and the stateid checked (COMMIT takes none), the arguments as the data path
    /// takes them (`stable_how4` as v3's `stable_how`). `splice_ok` is READ's.
    fn data_req(
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
    /// READLINK (§18.24).
    fn readlink(&self, call: &Call<'_>, ctx: &Ctx) -> Result<Linktext4, Nfsstat4> {
        match ctx.current.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)? {
            // Pseudo nodes are directories.
            Fh::Pseudo(_) => Err(Nfsstat4::INVAL),
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
    fn secinfo(
        &self,
        call: &Call<'_>,
        ctx: &mut Ctx,
        name: &[u8],
    ) -> Result<SecinfoList, Nfsstat4> {
        self.lookup(call, ctx, name)?;
        self.secinfo_no_name(call, ctx, 0)
    }

    /// VERIFY / NVERIFY (§18.31, §18.15): whether the current object's attributes encode
    /// exactly as the client's. An attribute not supported is ATTRNOTSUPP; rdattr_error and
    /// the write-only ones are INVAL.
    fn same_attrs(&self, call: &Call<'_>, ctx: &Ctx, theirs: &Fattr4) -> Result<bool, Nfsstat4> {
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

    /// SETATTR (§18.30): the attributes in [`map::SETTABLE`]. A size change needs a stateid
    /// that allows writing (an open for write, or the anonymous stateid subject to share
    /// reservations), checked by the open-state core.
    fn setattr(&self, call: &Call<'_>, ctx: &Ctx, a: &SetattrArgs) -> Result<Bitmap4, Nfsstat4> {
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
            self.settle(fh)?;
        }
        // Any attribute change is one a read delegation's holder caches (§10.4.1).
        self.break_delegations(call, ctx, fs, fh)?;
        fs.setattr(&caller, fh, &sattr, None)
            .map_err(|(e, _)| map::status(e))?;
        Ok(mask)
    }

    /// The export directory (or file) a namespace op works in; the pseudo tree is ROFS.
    fn export_fh(ctx: &Option<Fh>) -> Result<(usize, &FileHandle), Nfsstat4> {
        match ctx.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)? {
            Fh::Pseudo(_) => Err(Nfsstat4::ROFS),
            Fh::Export { idx, fh } => Ok((*idx, fh)),
        }
    }

    /// CREATE (§18.4): directories, symlinks, devices, fifos and sockets (regular files are
    /// OPEN's); the new object becomes the current handle.
    fn create(
        &self,
        call: &Call<'_>,
        ctx: &mut Ctx,
        a: &CreateArgs,
    ) -> Result<CreateResOk, Nfsstat4> {
        let (idx, dir) = Self::export_fh(&ctx.current)?;
        let (fs, caller) = self.gate(call, idx)?;
        check_name(&a.objname.0)?;
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
        ctx.current = Some(Fh::Export { idx, fh: ok.fh });
        Ok(CreateResOk { cinfo, attrset })
    }

    /// RENAME (§18.26): `oldname` in the saved directory to `newname` in the current one, in
    /// the same export (else XDEV). A file someone has open that the rename replaces is kept
    /// under a hidden name until its last CLOSE, as REMOVE keeps one ([`super::parked`]).
    fn rename(&self, call: &Call<'_>, ctx: &Ctx, a: &RenameArgs) -> Result<RenameResOk, Nfsstat4> {
        let (from_idx, from_dir) = Self::export_fh(&ctx.saved)?;
        let (to_idx, to_dir) = Self::export_fh(&ctx.current)?;
        if from_idx != to_idx {
            return Err(Nfsstat4::XDEV);
        }
        let (old, new) = (&a.oldname.0[..], &a.newname.0[..]);
        check_name(old)?;
        check_name(new)?;
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
    fn keep_replaced(
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
    fn unkeep(&self, fs: &dyn FileSystem, caller: &Caller, dir: &FileHandle, name: &[u8], k: Kept) {
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

    /// LINK (§18.9): the saved file gets the name `name` in the current directory.
    fn link(&self, call: &Call<'_>, ctx: &Ctx, name: &[u8]) -> Result<ChangeInfo4, Nfsstat4> {
        let (file_idx, file) = Self::export_fh(&ctx.saved)?;
        let (dir_idx, dir) = Self::export_fh(&ctx.current)?;
        if file_idx != dir_idx {
            return Err(Nfsstat4::XDEV);
        }
        check_name(name)?;
        let (fs, caller) = self.gate(call, dir_idx)?;
        self.break_delegations(call, ctx, fs, file)?; // its link count and ctime change
        let r = fs
            .link(&caller, file, dir, name)
            .map_err(|(e, _)| map::status(e))?;
        Ok(change_info(&r.dir_wcc))
    }

    /// DESTROY_SESSION (§18.37.3): outside a session (no SEQUENCE) the connection it comes on
    /// must be bound to the session it names, so that a session is not destroyed by whoever
    /// learned its id.
    fn destroy_session(&self, call: &Call<'_>, ctx: &Ctx, id: &SessionId4) -> Result<(), Nfsstat4> {
        let mut st = self.state();
        if ctx.session.is_none() {
            let s = st.session(id).ok_or(Nfsstat4::BADSESSION)?;
            if s.conn_dir(call.conn).is_none() {
                return Err(Nfsstat4::CONN_NOT_BOUND_TO_SESSION);
            }
        }
        st.destroy_session(id, ctx.session)
    }

    /// The file whose held writes must land before `op` runs: the current file for SETATTR of
    /// the size, the named one for an OPEN that truncates (CLAIM_NULL, UNCHECKED with a size),
    /// the file of SEEK and DEALLOCATE, the source (else the destination) of COPY and CLONE,
    /// when write-behind holds writes for it. `None` also when the op will fail anyway.
    fn held_before(&self, call: &Call<'_>, ctx: &Ctx, op: &NfsArgop4) -> Option<FileHandle> {
        let wb = self.write_behind.as_ref().filter(|wb| wb.holds_any())?;
        let Some(Fh::Export { idx, fh }) = &ctx.current else {
            return None;
        };
        let sets_size = |f: &Fattr4| {
            map::set_attr(f, &self.idmap, ctx.minor).is_ok_and(|(s, _)| s.size.is_some())
        };
        let target = match op {
            NfsArgop4::Setattr(a) if sets_size(&a.obj_attributes) => fh.clone(),
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

    /// For a REMOVE of a file write-behind holds writes for: the file, whose data is dropped
    /// after the REMOVE if that was its last link (v3's REMOVE does the same).
    fn held_removal(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        op: &NfsArgop4,
    ) -> Option<(Arc<dyn FileSystem>, FileHandle)> {
        let NfsArgop4::Remove(name) = op else {
            return None;
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
    fn settle(&self, fh: &FileHandle) -> Result<(), Nfsstat4> {
        match &self.write_behind {
            Some(wb) if wb.holds(fh.as_bytes()) => Err(Nfsstat4::DELAY),
            _ => Ok(()),
        }
    }

    /// REMOVE (§18.25): a file or an empty directory of the current directory. A file someone
    /// has open is kept under a hidden name until its last CLOSE ([`super::parked`]).
    fn remove(&self, call: &Call<'_>, ctx: &Ctx, name: &[u8]) -> Result<ChangeInfo4, Nfsstat4> {
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
    fn unlink_closed(&self) {
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

    fn access(&self, call: &Call<'_>, ctx: &Ctx, asked: u32) -> Result<AccessResOk, Nfsstat4> {
        use sluice_xdr::nfs4::ops::{
            ACCESS4_DELETE, ACCESS4_EXECUTE, ACCESS4_EXTEND, ACCESS4_LOOKUP,
        };
        let known = ACCESS4_READ
            | ACCESS4_LOOKUP
            | ACCESS4_MODIFY
            | ACCESS4_EXTEND
            | ACCESS4_DELETE
            | ACCESS4_EXECUTE;
        let supported = asked & known;
        let access = match ctx.current.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)? {
            // Read-only directories anyone may list and traverse.
            Fh::Pseudo(_) => supported & (ACCESS4_READ | ACCESS4_LOOKUP | ACCESS4_EXECUTE),
            Fh::Export { idx, fh } => {
                let (fs, caller) = self.gate(call, *idx)?;
                // The neutral access bits have v3's values, which are v4's.
                let (granted, _) = fs
                    .access(&caller, fh, supported)
                    .map_err(|(e, _)| map::status(e))?;
                granted & supported
            }
        };
        Ok(AccessResOk { supported, access })
    }

    /// SECINFO_NO_NAME (§18.45): the flavors for the current handle (style 0) or its parent
    /// (style 1). Like SECINFO it consumes the current handle (§2.6.3.1.1.8).
    fn secinfo_no_name(
        &self,
        call: &Call<'_>,
        ctx: &mut Ctx,
        style: u32,
    ) -> Result<SecinfoList, Nfsstat4> {
        const SECINFO_STYLE4_CURRENT_FH: u32 = 0;
        const SECINFO_STYLE4_PARENT: u32 = 1;
        match style {
            SECINFO_STYLE4_CURRENT_FH => {
                if let Some(Fh::Export { idx, .. }) = &ctx.current {
                    self.gate(call, *idx)?;
                }
            }
            SECINFO_STYLE4_PARENT => self.lookupp(call, ctx)?,
            _ => return Err(Nfsstat4::INVAL),
        }
        ctx.current = None;
        Ok(SecinfoList(
            FLAVORS.iter().map(|&f| Secinfo4::Flavor(f)).collect(),
        ))
    }
}

/// A file RENAME replaced while it was open, kept under its hidden name
/// ([`Nfs4::keep_replaced`]).
struct Kept {
    /// Its key in the open table and the parked files.
    key: Bytes,
    /// The target directory's change attribute before the hidden name was made.
    dir_before: Option<u64>,
    /// Renamed away rather than linked: undoing renames it back.
    moved: bool,
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

/// A LOOKUP name: not empty (INVAL), at most NAME_MAX (NAMETOOLONG), not "." or ".." and
/// without '/' or NUL (BADNAME) — RFC 8881 §18.15.3.
fn check_name(name: &[u8]) -> Result<(), Nfsstat4> {
    if name.is_empty() {
        return Err(Nfsstat4::INVAL);
    }
    if name.len() > map::NAME_BYTES_MAX as usize {
        return Err(Nfsstat4::NAMETOOLONG);
    }
    if name == b"." || name == b".." || name.iter().any(|&b| b == b'/' || b == 0) {
        return Err(Nfsstat4::BADNAME);
    }
    Ok(())
}

fn res<T>(r: Result<T, Nfsstat4>) -> Res4<T> {
    match r {
        Ok(v) => Res4::Ok(v),
        Err(s) => Res4::Err(s),
    }
}

/// A directory's `change_info4` from its wcc data; without the before value, not atomic
/// and before = after (the client then revalidates the directory).
fn change_info(w: &Wcc) -> ChangeInfo4 {
    match w.change_info() {
        Some(c) => ChangeInfo4 {
            atomic: c.atomic,
            before: c.before,
            after: c.after,
        },
        None => {
            let after = w.after.map_or(0, |d| d.change);
            ChangeInfo4 {
                atomic: false,
                before: after,
                after,
            }
        }
    }
}

fn status_of(r: Result<(), Nfsstat4>) -> Nfsstat4 {
    match r {
        Ok(()) => Nfsstat4::OK,
        Err(s) => s,
    }
}

pub mod driver;
mod locks;
mod recall;
mod recovery;
pub use driver::{drive, drive_ready, Driven, Executor, Inline, Outcome, Sender};
pub use recovery::TickReport;
#[cfg(test)]
mod tests;
mod v42;
