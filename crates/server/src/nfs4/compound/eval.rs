//! The evaluation of one COMPOUND (RFC 8881 §16.2, §2.10.6) and the session reply cache:
//! [`Nfs4::begin`] decodes a COMPOUND in place (a WRITE's payload stays slices of the received
//! record) into an [`Eval`], a resumable state machine that does no socket I/O: [`Eval::step`]
//! runs ops in order by the op table (`table.rs`), calling the file systems inline, until a
//! data op (READ, WRITE, COMMIT, READ_PLUS), which it hands back to its driver
//! ([`Step::Data`]) after the checks that are v4's; the driver runs it through the shared
//! data path and hands the result back with [`Eval::resume`]; the last step returns the
//! encoded reply ([`Step::Reply`]). Who sent the call ([`Call`]: address, connection,
//! credentials) and the time are arguments. The one driver is `driver.rs`'s [`crate::nfs4::drive`].
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
//!
//! # Write-behind
//! The ops that drop or shorten a file's data meet write-behind as v3's do (see
//! [`crate::nfs4::data`]): before SETATTR of the size or an OPEN that truncates a file with held
//! writes, the evaluation suspends with [`Step::Settle`] ([`Settle::Land`]) and the driver
//! lands them; after a REMOVE of such a file it suspends with [`Settle::Removed`] so that the
//! data of a file whose last link is gone is dropped. The driver answers with
//! [`Eval::settled`]. Held writes that did not land within [`Nfs4::settle_wait_max`] (or that
//! a driver cannot land) make the op answer NFS4ERR_DELAY, as does a write held again between
//! the landing and the op ([`Nfs4::settle`]): an op never truncates under held data.

use super::table::{self, Run};
use super::{principal, Call, Ctx, Nfs4, OpObserver};
use crate::datapath::ReadData;
use crate::nfs4::data::{DataDone, DataReq, ReadPlusDone, Settle};
use crate::splice::{LentPipe, SplicedData};
use bytes::Bytes;
use sluice_nfs4state::sessions::digest::Digest;
use sluice_nfs4state::sessions::slots::SlotDecision;
use sluice_nfs4state::sessions::SequenceCall;
use sluice_xdr::nfs4::compound::{padding_after, Compound4Args, Compound4Res, CompoundError};
use sluice_xdr::nfs4::ops::{op_info, NfsArgop4, NfsResop4, OpFlags, Opnum4, Res4};
use sluice_xdr::nfs4::ops::{
    Data4, ReadPlusContent, ReadPlusContents, ReadPlusResOk, ReadResOk, WriteResOk,
    NFS4_CONTENT_DATA,
};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::StableHow4;
use sluice_xdr::nfs4::{SessionId4, MINOR_VERSIONS};
use sluice_xdr::{Pack, Reader, Writer};
// `core::net`: an address is plain data here; this module opens no sockets.
use std::sync::Arc;
use std::time::Instant;

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
            if num != Opnum4::GETATTR && num != Opnum4::GETFH {
                self.ctx.fresh = None;
            }
            let run = table::row(num).map(|row| row.run);
            let r = if let Some(refused) = refuse(op, self.args.minorversion) {
                refused
            } else if let Some(s) = self
                .limits
                .as_ref()
                .and_then(|l| l.refuse_before(op, self.reply_bytes))
            {
                NfsResop4::error(num, s)
            } else if matches!(run, Some(Run::Data)) && (num != Opnum4::READ_PLUS || nfs.read_plus)
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
                self.ctx.last_op = last;
                let mut r = table::run(nfs, call, op, &mut self.ctx);
                if r.status() == Nfsstat4::OK {
                    // RFC 8881 §2.6.3.1.1: a put-filehandle op may have to answer WRONGSEC
                    // for the handle it set, depending on the op after it (`fh.rs`).
                    let next = self.args.ops.get(self.next).map(|o| o.opnum());
                    if let Some(s) = nfs.put_wrongsec(call, &self.ctx, num, next) {
                        r = NfsResop4::error(num, s);
                    }
                }
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
            Phase::Start | Phase::Run => self.args.ops[self.next..]
                .iter()
                .any(|op| table::row(op.opnum()).is_some_and(|row| row.run.may_block())),
            _ => false,
        }
    }

    /// The ops the next [`Eval::step`] runs, up to the next data op (what the driver asks
    /// `service::inline` about); none once only the reply is left.
    pub fn step_ops(&self) -> impl Iterator<Item = Opnum4> + '_ {
        let ops = match self.phase {
            Phase::Start | Phase::Run => &self.args.ops[self.next..],
            _ => &[],
        };
        ops.iter()
            .map(|op| op.opnum())
            .take_while(|n| !table::row(*n).is_some_and(|row| matches!(row.run, Run::Data)))
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
            let limits = nfs.state().session(&seq.sessionid).map(|s| ReplyLimits {
                bytes_max: s.reply_bytes_max(false),
                cached_bytes_max: seq.cachethis.then(|| s.reply_bytes_max(true)),
            });
            // SEQUENCE's own result must fit too (§2.10.6.4): a session whose reply limit
            // (or cached limit, when caching was asked) cannot hold it answers SEQUENCE with
            // REP_TOO_BIG (_TO_CACHE) before the slot is touched, as knfsd does (its
            // `nfsd4_sequence` restricts the reply buffer before it bumps the slot).
            if let Some(s) = limits
                .as_ref()
                .and_then(|l| l.over(self.reply_bytes + SEQUENCE_RESULT_BYTES))
            {
                self.record(NfsResop4::Sequence(Res4::Err(s)));
                return Some(self.finish(nfs));
            }
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
            // SEQUENCE's own result was checked against the limits above, before the slot.
            let sequence = NfsResop4::Sequence(Res4::Ok(out.res));
            debug_assert_eq!(encoded_len(&sequence), SEQUENCE_RESULT_BYTES);
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
            if let Some(s) = l.over(self.reply_bytes + len) {
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

impl Nfs4 {
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
}

/// One buffer of `segs` (copies when there are several).
pub(super) fn join(mut segs: Vec<Bytes>) -> Bytes {
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
        self.over(reply_bytes + info.reply_bytes_max as usize)
    }

    /// The error of a reply of `reply_bytes`: over `ca_maxresponsesize` REP_TOO_BIG, else over
    /// the cached limit (when caching was asked) REP_TOO_BIG_TO_CACHE.
    fn over(&self, reply_bytes: usize) -> Option<Nfsstat4> {
        if reply_bytes > self.bytes_max {
            Some(Nfsstat4::REP_TOO_BIG)
        } else if self.cached_bytes_max.is_some_and(|m| reply_bytes > m) {
            Some(Nfsstat4::REP_TOO_BIG_TO_CACHE)
        } else {
            None
        }
    }
}

/// Bytes of SEQUENCE's successful result: op number, status, session id (16), sequence id,
/// slot id, highest slot id, target highest slot id, status flags (RFC 8881 §18.46.2).
const SEQUENCE_RESULT_BYTES: usize = 4 + 4 + 16 + 4 * 5;

/// How much of a request that did not ask for its reply to be cached (`sa_cachethis` false)
/// goes into its digest, beside its total length.
///
/// The digest exists so that a false retry never gets another request's *cached reply*. An uncached
/// request has none: a retry of it is answered NFS4ERR_RETRY_UNCACHED_REP, a false retry
/// NFS4ERR_SEQ_FALSE_RETRY, and both tell the client that nothing was replayed. So for it the
/// digest only chooses between two errors (and, on a retired slot, between running a request at
/// sequence id 1 and answering that error), and a sample is enough: the arguments up to a WRITE's
/// first few KiB of data. The Linux client sends READ and WRITE uncached, and hashing every byte of
/// a 1 MiB WRITE was 16 % of the server's CPU on a stream of them even with XXH3 (2026-11-25
/// profile). Cached requests are hashed whole (see [`sluice_nfs4state::sessions::digest`]).
const UNCACHED_DIGEST_BYTES: usize = 4096;

/// The [`Digest`] of the arguments (starting `args_offset` bytes into `segs`) after SEQUENCE's
/// sequence id, skipping what comes before it: tag (length + padded bytes), minor version, op
/// count, SEQUENCE's op number, session id (16), sequence id. Read in place from the record's
/// segments (§2.10.6.1.3; what it can and cannot tell apart:
/// [`sluice_nfs4state::sessions::digest`]). With `limit`, only the first `limit` bytes of them,
/// then the length of all of them.
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
pub(super) fn encoded_len<T: Pack>(v: &T) -> usize {
    let mut w = Writer::new();
    v.pack(&mut w);
    w.len()
}

/// Ops allowed first without SEQUENCE, each alone in its COMPOUND: EXCHANGE_ID,
/// CREATE_SESSION, DESTROY_SESSION, DESTROY_CLIENTID and BIND_CONN_TO_SESSION (RFC 8881
/// §18.46.3, SEQUENCE's placement rules, and those ops' own descriptions, §18.34-§18.37 and
/// §18.50; not §2.6.3.1.1.x, which is about WRONGSEC).
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
