//! One session's back channel (RFC 8881 §2.10.3.1, §20): which credentials callbacks carry,
//! the server's own slot for CB_SEQUENCE, whether the path to the client works, and what a
//! callback's reply means. Pure: the driver (`sluice_server::nfs4::callback`) sends what
//! [`SessionCallbacks::poll`] hands it over the connection the session names and feeds the
//! outcome back to [`SessionCallbacks::handle_reply`].
//!
//! # The path, and how it is tested
//! ```text
//!   CONN_BACK_CHAN, BIND_CONN_TO_SESSION(back), BACKCHANNEL_CTL ──▶ probe needed
//!   probe needed + a back connection ──▶ CB_NULL ──ok──▶ CB_COMPOUND[CB_SEQUENCE] ──ok──▶ Up
//!                                           │ no answer, connection gone, refused │
//!                                           ▼                                     ▼
//!                                         Down ◀──────────────────────────── (any failure)
//!   CB_SEQUENCE answered with a session or sequence error ──▶ Fault (BACKCHANNEL_FAULT)
//! ```
//! CB_NULL alone proves only that something answers RPC on the connection; the CB_SEQUENCE
//! that follows proves the client's back-channel session and our slot's sequence id agree,
//! which is what a CB_RECALL will need. The CB_SEQUENCE waits for the client's first SEQUENCE
//! on the session: until then the client may not have installed the session it is just
//! being told about (the CREATE_SESSION reply and our CB_NULL cross on the wire), and would
//! answer NFS4ERR_BADSESSION, which we would have to take for a fault. A probe runs again when
//! the client gives us a new path (a binding or BACKCHANNEL_CTL); a path that went down stays
//! down until then, so a dead client costs one probe, not a retry loop.
//!
//! # The slot
//! One slot ([`crate::sessions::BACK_SLOTS_MAX`]): callbacks are rare and serialised per
//! session, as in knfsd. Its sequence id starts at 1 (§2.10.6.1) and moves on only when the
//! client answered CB_SEQUENCE with OK: that is the only evidence that it saw the id. A call
//! that timed out or whose connection died leaves the id where it was, so the next call reuses
//! it and the client's reply cache answers a retry rather than running it twice.
//!
//! # Credentials
//! From `callback_sec_parms4` (CREATE_SESSION, BACKCHANNEL_CTL) we take AUTH_SYS if offered
//! (Linux accepts nothing else on callbacks other than CB_NULL), else AUTH_NONE. RPCSEC_GSS
//! is not supported: a list with nothing else leaves the session without a usable path, which
//! SEQUENCE reports as CB_PATH_DOWN_SESSION.
//!
//! # Bounds
//! At most one call of each kind in flight (the probe's CB_NULL, the slot's CB_COMPOUND) and
//! [`QUEUED_MAX`] CB_COMPOUNDs waiting for the slot; more are refused with NFS4ERR_DELAY.

use crate::ids::ConnId;
use sluice_xdr::nfs4::callback::{
    CbArgop4, CbCompound4Args, CbCompound4Res, CbResop4, CbSequenceArgs, ReferringCallLists,
};
use sluice_xdr::nfs4::ops::{CallbackSecParms4, Res4};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{SessionId4, Utf8Str};
use sluice_xdr::rpc::AuthSys;
use std::collections::VecDeque;
use std::time::Duration;

/// How long the server waits for a callback's reply, from the moment it went on the wire.
/// 10 s: a client answers CB_NULL and CB_SEQUENCE at once; one that has not answered in 10 s
/// is gone for our purposes (knfsd's callback RPC timeout is of the same order), and a
/// CB_RECALL must be given up well within a 90 s lease.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// CB_COMPOUNDs waiting for the session's one slot. 16: a burst of recalls for one client
/// (a directory of files it holds delegations on) queues; an unbounded queue would let a
/// client that never answers hold server memory.
pub const QUEUED_MAX: usize = 16;

/// The credentials callbacks carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CbCred {
    None,
    Sys(AuthSys),
}

/// Picks the flavor to call back with from the client's list (module notes); `None` if no
/// flavor on it is one we can use.
pub fn choose_cred(parms: &[CallbackSecParms4]) -> Option<CbCred> {
    let sys = parms.iter().find_map(|p| match p {
        CallbackSecParms4::AuthSys(a) => Some(CbCred::Sys(a.clone())),
        _ => None,
    });
    sys.or_else(|| {
        parms
            .iter()
            .any(|p| matches!(p, CallbackSecParms4::AuthNone))
            .then_some(CbCred::None)
    })
}

/// Where the path to the client stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathState {
    /// Not tested yet (or a new path was given): a probe is due.
    Unknown,
    /// The probe is on its way.
    Probing,
    /// The last call was answered.
    Up,
    /// A call went unanswered, its connection died, or no credentials are usable.
    Down,
    /// The client answered CB_SEQUENCE with a session or sequence error: the two ends disagree
    /// about the back channel (SEQ4_STATUS_BACKCHANNEL_FAULT).
    Fault,
}

/// A call for the driver to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbSend {
    /// Hand it back with the outcome.
    pub token: u64,
    pub conn: ConnId,
    pub program: u32,
    pub cred: CbCred,
    pub call: CbCall,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CbCall {
    /// CB_NULL (procedure 0).
    Null,
    /// CB_COMPOUND (procedure 1), CB_SEQUENCE first.
    Compound(CbCompound4Args),
}

/// How a call ended, as the driver saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CbOutcome {
    /// CB_NULL answered.
    NullOk,
    /// CB_COMPOUND answered with this (decoded) reply.
    Compound(CbCompound4Res),
    /// No usable answer: timed out, connection gone, refused at the RPC level, or a reply
    /// that did not decode.
    Failed,
}

/// A queued CB_COMPOUND finished (the probe's own CB_SEQUENCE reports nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbDone {
    pub token: u64,
    /// The client's reply, or `Err` if the call failed (path down, or the slot's sequence
    /// was refused).
    pub result: Result<CbCompound4Res, Nfsstat4>,
}

/// One session's back channel (module notes).
#[derive(Debug, Clone)]
pub struct SessionCallbacks {
    sessionid: SessionId4,
    program: u32,
    cred: Option<CbCred>,
    path: PathState,
    /// The slot's next sequence id.
    seqid: u32,
    /// The call on the slot, if any: its token and whether it is the probe's.
    slot_busy: Option<(u64, bool)>,
    /// The CB_NULL in flight, if any.
    null_busy: Option<u64>,
    /// CB_NULL passed: the probe's CB_SEQUENCE is due (once the client is ready).
    probe_sequence_due: bool,
    /// The client sent SEQUENCE on the session: it knows the session (module notes).
    client_ready: bool,
    queued: VecDeque<(u64, Vec<CbArgop4>)>,
    next_token: u64,
    /// The CB_COMPOUNDs' minor version: the client's (its CREATE_SESSION's COMPOUND's).
    minor: u32,
}

impl SessionCallbacks {
    pub fn new(sessionid: SessionId4, program: u32, parms: &[CallbackSecParms4]) -> Self {
        let cred = choose_cred(parms);
        Self {
            sessionid,
            program,
            path: if cred.is_some() {
                PathState::Unknown
            } else {
                PathState::Down
            },
            cred,
            seqid: 1,
            slot_busy: None,
            null_busy: None,
            probe_sequence_due: false,
            client_ready: false,
            queued: VecDeque::new(),
            next_token: 1,
            minor: 1,
        }
    }

    /// The client's minor version (1 until told): CB_COMPOUNDs carry it. The Linux client
    /// finds the session of a CB_SEQUENCE among its clients of that minor version only, so a
    /// 4.2 mount answers a 4.1 CB_COMPOUND with NFS4ERR_BADSESSION (a BACKCHANNEL_FAULT, and
    /// the client resets its session, again and again).
    pub fn set_minor_version(&mut self, minor: u32) {
        self.minor = minor;
    }

    pub fn path(&self) -> PathState {
        self.path
    }

    pub fn program(&self) -> u32 {
        self.program
    }

    /// The slot's next CB_SEQUENCE sequence id.
    pub fn seqid(&self) -> u32 {
        self.seqid
    }

    /// BACKCHANNEL_CTL (§18.33): new program and credentials; the path is probed again.
    pub fn set_program(&mut self, program: u32, parms: &[CallbackSecParms4]) {
        self.program = program;
        self.cred = choose_cred(parms);
        self.new_path();
    }

    /// The client gave us a (new) back-channel connection: probe it, unless no credentials
    /// are usable.
    pub fn new_path(&mut self) {
        self.path = if self.cred.is_some() {
            PathState::Unknown
        } else {
            PathState::Down
        };
        self.probe_sequence_due = false;
    }

    /// The client sent a SEQUENCE on the session. True if that makes a call due (the first
    /// one, with the probe's CB_SEQUENCE waiting for it): the driver should poll.
    pub fn sequence_seen(&mut self) -> bool {
        let was = self.client_ready;
        self.client_ready = true;
        !was && self.probe_sequence_due
    }

    /// The path is down for good: no back-channel connection is left.
    pub fn lost_path(&mut self) {
        self.path = PathState::Down;
        self.probe_sequence_due = false;
    }

    /// Takes queued CB_COMPOUND `token` back out of the queue, unsent (its caller sends it on
    /// another session). False when it is not queued here: already on the wire, or done.
    pub fn unqueue(&mut self, token: u64) -> bool {
        let before = self.queued.len();
        self.queued.retain(|(t, _)| *t != token);
        self.queued.len() != before
    }

    /// Whether CB_COMPOUND `token` is on the wire now (its outcome will come).
    pub fn in_flight(&self, token: u64) -> bool {
        self.slot_busy.is_some_and(|(t, _)| t == token)
    }

    /// Whether SEQUENCE should say this session's callbacks cannot get through.
    pub fn is_down(&self) -> bool {
        matches!(self.path, PathState::Down | PathState::Fault)
    }

    /// Queues a CB_COMPOUND (after a CB_SEQUENCE the slot adds) for the client: its token,
    /// which comes back in [`CbDone`]. NFS4ERR_DELAY when the queue is full, and
    /// NFS4ERR_CB_PATH_DOWN when the path is known not to work.
    pub fn queue(&mut self, ops: Vec<CbArgop4>) -> Result<u64, Nfsstat4> {
        if self.is_down() {
            return Err(Nfsstat4::CB_PATH_DOWN);
        }
        if self.queued.len() >= QUEUED_MAX {
            return Err(Nfsstat4::DELAY);
        }
        let token = self.token();
        self.queued.push_back((token, ops));
        Ok(token)
    }

    /// The calls to make now over `conn` (the session's newest back-channel connection).
    pub fn poll(&mut self, conn: ConnId) -> Vec<CbSend> {
        let Some(cred) = self.cred.clone() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if self.path == PathState::Unknown && self.null_busy.is_none() {
            self.path = PathState::Probing;
            let token = self.token();
            self.null_busy = Some(token);
            out.push(self.send(token, conn, &cred, CbCall::Null));
        }
        if self.slot_busy.is_none() {
            let next = if self.probe_sequence_due && self.client_ready {
                self.probe_sequence_due = false;
                Some((self.token(), Vec::new(), true))
            } else if self.path == PathState::Up {
                self.queued.pop_front().map(|(t, ops)| (t, ops, false))
            } else {
                None
            };
            if let Some((token, ops, probe)) = next {
                self.slot_busy = Some((token, probe));
                let args = self.compound(ops);
                out.push(self.send(token, conn, &cred, CbCall::Compound(args)));
            }
        }
        out
    }

    /// The outcome of call `token`; a queued CB_COMPOUND's result comes back as [`CbDone`],
    /// as do queued calls dropped because the path went down.
    pub fn handle_reply(&mut self, token: u64, outcome: CbOutcome) -> Vec<CbDone> {
        let mut done = Vec::new();
        if self.null_busy == Some(token) {
            self.null_busy = None;
            match outcome {
                CbOutcome::NullOk if self.path == PathState::Probing => {
                    self.probe_sequence_due = true;
                }
                CbOutcome::NullOk => {}
                _ => self.failed(),
            }
        } else if let Some((t, probe)) = self.slot_busy.filter(|&(t, _)| t == token) {
            self.slot_busy = None;
            let result = self.sequence_result(outcome);
            if probe && matches!(result, Err(Nfsstat4::DELAY)) {
                // The client is not ready for callbacks yet (Linux answers a CB_SEQUENCE
                // with NFS4ERR_DELAY while it is still setting the session up): probe again
                // after its next SEQUENCE, which paces the retries by its own traffic.
                self.probe_sequence_due = true;
                self.client_ready = false;
            }
            if !probe {
                done.push(CbDone { token: t, result });
            }
        } else {
            return done; // a call we no longer wait for (already failed over)
        }
        if self.is_down() {
            done.extend(self.drain_queue());
        }
        done
    }

    /// The queued calls, failed with NFS4ERR_CB_PATH_DOWN (the path went down or away).
    pub fn drain_queue(&mut self) -> Vec<CbDone> {
        self.queued
            .drain(..)
            .map(|(token, _)| CbDone {
                token,
                result: Err(Nfsstat4::CB_PATH_DOWN),
            })
            .collect()
    }

    /// What the reply of a slot call means for the slot and the path.
    fn sequence_result(&mut self, outcome: CbOutcome) -> Result<CbCompound4Res, Nfsstat4> {
        let res = match outcome {
            CbOutcome::Compound(res) => res,
            _ => {
                self.failed();
                return Err(Nfsstat4::CB_PATH_DOWN);
            }
        };
        match res.results.first() {
            Some(CbResop4::Sequence(Res4::Ok(ok)))
                if ok.sessionid == self.sessionid
                    && ok.sequenceid == self.seqid
                    && ok.slotid == 0 =>
            {
                self.seqid = self.seqid.wrapping_add(1);
                self.path = PathState::Up;
                Ok(res)
            }
            // The client is busy: the slot's id was not used; try again later.
            Some(CbResop4::Sequence(Res4::Err(Nfsstat4::DELAY))) => Err(Nfsstat4::DELAY),
            // A sequence or session error, a reply for another session or slot, or no
            // CB_SEQUENCE result at all: the two ends disagree about the back channel.
            _ => {
                self.path = PathState::Fault;
                Err(Nfsstat4::CB_PATH_DOWN)
            }
        }
    }

    /// A call went unanswered: the path is down, unless a new path was given meanwhile (the
    /// failure is then the old connection's, and the new one gets its own probe).
    fn failed(&mut self) {
        if self.path != PathState::Unknown {
            self.path = PathState::Down;
        }
    }

    fn compound(&self, ops: Vec<CbArgop4>) -> CbCompound4Args {
        let mut all = Vec::with_capacity(ops.len() + 1);
        all.push(CbArgop4::Sequence(CbSequenceArgs {
            sessionid: self.sessionid,
            sequenceid: self.seqid,
            slotid: 0,
            highest_slotid: 0,
            cachethis: false,
            referring_call_lists: ReferringCallLists(Vec::new()),
        }));
        all.extend(ops);
        CbCompound4Args {
            tag: Utf8Str(bytes::Bytes::new()),
            minorversion: self.minor,
            callback_ident: 0,
            ops: all,
        }
    }

    fn send(&self, token: u64, conn: ConnId, cred: &CbCred, call: CbCall) -> CbSend {
        CbSend {
            token,
            conn,
            program: self.program,
            cred: cred.clone(),
            call,
        }
    }

    fn token(&mut self) -> u64 {
        let t = self.next_token;
        self.next_token += 1;
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_xdr::nfs4::callback::{CbRecallArgs, CbSequenceResOk};
    use sluice_xdr::nfs4::{NfsFh4, Stateid4};

    const SID: SessionId4 = [9; 16];

    fn sys() -> CallbackSecParms4 {
        CallbackSecParms4::AuthSys(AuthSys {
            stamp: 1,
            machine_name: bytes::Bytes::from_static(b"client"),
            uid: 0,
            gid: 0,
            gids: Vec::new(),
        })
    }

    /// The client's answer to the CB_COMPOUND in `send`: CB_SEQUENCE echoed with `status`
    /// (OK: the ids of the call), then OK for every other op.
    fn answer(send: &CbSend, status: Nfsstat4) -> CbOutcome {
        let CbCall::Compound(args) = &send.call else {
            panic!("not a CB_COMPOUND: {send:?}")
        };
        let Some(CbArgop4::Sequence(seq)) = args.ops.first() else {
            panic!("CB_SEQUENCE comes first: {args:?}")
        };
        let first = if status == Nfsstat4::OK {
            CbResop4::Sequence(Res4::Ok(CbSequenceResOk {
                sessionid: seq.sessionid,
                sequenceid: seq.sequenceid,
                slotid: seq.slotid,
                highest_slotid: 0,
                target_highest_slotid: 0,
            }))
        } else {
            CbResop4::Sequence(Res4::Err(status))
        };
        let mut results = vec![first];
        results.extend(args.ops[1..].iter().map(|op| match op {
            CbArgop4::Recall(_) => CbResop4::Recall(Nfsstat4::OK),
            other => panic!("the tests send only CB_RECALL: {other:?}"),
        }));
        CbOutcome::Compound(CbCompound4Res {
            status,
            tag: args.tag.clone(),
            results,
        })
    }

    fn seq_of(send: &CbSend) -> (u32, u32) {
        match &send.call {
            CbCall::Compound(a) => match a.ops.first() {
                Some(CbArgop4::Sequence(s)) => (s.sequenceid, s.slotid),
                _ => panic!("{a:?}"),
            },
            CbCall::Null => panic!("CB_NULL"),
        }
    }

    fn recall() -> Vec<CbArgop4> {
        vec![CbArgop4::Recall(CbRecallArgs {
            stateid: Stateid4::default(),
            truncate: false,
            fh: NfsFh4(bytes::Bytes::from_static(b"fh")),
        })]
    }

    /// CB_NULL, then CB_SEQUENCE, then Up; returns the channel.
    #[test]
    fn a_probe_answered_delay_is_sent_again_after_the_clients_next_sequence() {
        let mut b = SessionCallbacks::new(SID, 0x4000_0000, &[sys()]);
        b.sequence_seen();
        let null = b.poll(5);
        b.handle_reply(null[0].token, CbOutcome::NullOk);
        let seq = b.poll(5);
        assert_eq!(seq.len(), 1, "the CB_SEQUENCE probe");
        b.handle_reply(seq[0].token, answer(&seq[0], Nfsstat4::DELAY));
        assert_eq!(b.path(), PathState::Probing, "neither up nor a fault");
        assert!(
            b.poll(5).is_empty(),
            "not again before the client's next SEQUENCE"
        );
        assert!(b.sequence_seen(), "its SEQUENCE makes the probe due again");
        let again = b.poll(5);
        assert_eq!(again.len(), 1);
        assert_eq!(
            seq_of(&again[0]),
            (1, 0),
            "the slot's id was not used by the DELAY"
        );
        b.handle_reply(again[0].token, answer(&again[0], Nfsstat4::OK));
        assert_eq!(b.path(), PathState::Up);
    }

    fn probed() -> SessionCallbacks {
        let mut b = SessionCallbacks::new(SID, 0x4000_0000, &[sys()]);
        b.sequence_seen();
        let null = b.poll(5);
        assert_eq!(null.len(), 1);
        b.handle_reply(null[0].token, CbOutcome::NullOk);
        let seq = b.poll(5);
        b.handle_reply(seq[0].token, answer(&seq[0], Nfsstat4::OK));
        assert_eq!(b.path(), PathState::Up);
        b
    }

    #[test]
    fn auth_sys_is_preferred_and_gss_alone_leaves_no_path() {
        let gss = CallbackSecParms4::Gss(Default::default());
        assert!(matches!(
            choose_cred(&[CallbackSecParms4::AuthNone, sys()]),
            Some(CbCred::Sys(_))
        ));
        assert_eq!(
            choose_cred(&[gss.clone(), CallbackSecParms4::AuthNone]),
            Some(CbCred::None)
        );
        assert_eq!(choose_cred(std::slice::from_ref(&gss)), None);
        let mut b = SessionCallbacks::new(SID, 1, &[gss]);
        assert_eq!(b.path(), PathState::Down);
        assert!(b.poll(1).is_empty(), "nothing to call with");
        assert_eq!(b.queue(recall()), Err(Nfsstat4::CB_PATH_DOWN));
    }

    #[test]
    fn the_probe_is_cb_null_then_cb_sequence_on_slot_0_with_seqid_1() {
        let mut b = SessionCallbacks::new(SID, 0x4000_0000, &[sys()]);
        let first = b.poll(5);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].call, CbCall::Null);
        assert_eq!((first[0].conn, first[0].program), (5, 0x4000_0000));
        assert!(matches!(first[0].cred, CbCred::Sys(_)));
        assert_eq!(b.path(), PathState::Probing);
        assert!(b.poll(5).is_empty(), "one probe at a time");
        assert!(b.handle_reply(first[0].token, CbOutcome::NullOk).is_empty());
        assert!(
            b.poll(5).is_empty(),
            "CB_SEQUENCE waits for the client's first SEQUENCE"
        );
        assert!(b.sequence_seen(), "which makes it due");
        assert!(!b.sequence_seen(), "once");
        let seq = b.poll(5);
        assert_eq!(seq.len(), 1);
        assert_eq!(seq_of(&seq[0]), (1, 0));
        let CbCall::Compound(args) = &seq[0].call else {
            unreachable!()
        };
        assert_eq!(args.ops.len(), 1, "the probe is CB_SEQUENCE alone");
        assert_eq!(args.minorversion, 1);
        b.set_minor_version(2);
        assert_eq!(
            b.compound(Vec::new()).minorversion,
            2,
            "the client's minor version"
        );
        assert!(b.poll(5).is_empty(), "the slot is busy");
        let done = b.handle_reply(seq[0].token, answer(&seq[0], Nfsstat4::OK));
        assert!(done.is_empty(), "the probe reports nothing");
        assert_eq!(b.path(), PathState::Up);
        assert_eq!(b.seqid(), 2);
    }

    #[test]
    fn queued_calls_take_the_slot_in_turn_and_the_seqid_advances_on_ok_only() {
        let mut b = probed();
        let t1 = b.queue(recall()).unwrap();
        let t2 = b.queue(recall()).unwrap();
        let s1 = b.poll(5);
        assert_eq!(s1.len(), 1, "one slot");
        assert_eq!(s1[0].token, t1);
        assert_eq!(seq_of(&s1[0]), (2, 0));
        // The client is busy: the id was not used, the caller hears DELAY.
        let done = b.handle_reply(t1, answer(&s1[0], Nfsstat4::DELAY));
        assert_eq!(done[0].result, Err(Nfsstat4::DELAY));
        assert_eq!(b.seqid(), 2);
        let s2 = b.poll(5);
        assert_eq!(s2[0].token, t2);
        assert_eq!(seq_of(&s2[0]), (2, 0), "the id is reused");
        let done = b.handle_reply(t2, answer(&s2[0], Nfsstat4::OK));
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].token, t2);
        let res = done[0].result.as_ref().unwrap();
        assert_eq!(res.results.len(), 2, "CB_SEQUENCE and CB_RECALL");
        assert_eq!(b.seqid(), 3);
        // A reply to something no longer waited for changes nothing.
        assert!(b.handle_reply(999, CbOutcome::NullOk).is_empty());
        assert_eq!(b.path(), PathState::Up);
    }

    #[test]
    fn an_unanswered_call_takes_the_path_down_and_keeps_the_seqid() {
        let mut b = probed();
        let t = b.queue(recall()).unwrap();
        let _waiting = b.queue(recall()).unwrap();
        let s = b.poll(5);
        let done = b.handle_reply(t, CbOutcome::Failed);
        assert_eq!(done.len(), 2, "the call and the one queued behind it");
        assert!(done.iter().all(|d| d.result == Err(Nfsstat4::CB_PATH_DOWN)));
        assert!(b.is_down());
        assert_eq!(b.seqid(), 2, "the client may not have seen it");
        assert_eq!(b.queue(recall()), Err(Nfsstat4::CB_PATH_DOWN));
        assert!(b.poll(5).is_empty(), "a down path is not retried by itself");
        let _ = s;
        // A new path is probed, with the same sequence id.
        b.new_path();
        let null = b.poll(6);
        assert_eq!((null.len(), null[0].conn), (1, 6));
        b.handle_reply(null[0].token, CbOutcome::NullOk);
        let seq = b.poll(6);
        assert_eq!(seq_of(&seq[0]), (2, 0));
    }

    #[test]
    fn a_sequence_error_is_a_fault_and_a_failed_probe_is_down() {
        let mut b = SessionCallbacks::new(SID, 1, &[sys()]);
        b.sequence_seen();
        let null = b.poll(1);
        b.handle_reply(null[0].token, CbOutcome::NullOk);
        let seq = b.poll(1);
        b.handle_reply(seq[0].token, answer(&seq[0], Nfsstat4::SEQ_MISORDERED));
        assert_eq!(b.path(), PathState::Fault);
        assert!(b.is_down());
        assert_eq!(b.seqid(), 1);
        // A reply for another session is as bad.
        let mut b = SessionCallbacks::new(SID, 1, &[sys()]);
        b.sequence_seen();
        let null = b.poll(1);
        b.handle_reply(null[0].token, CbOutcome::NullOk);
        let seq = b.poll(1);
        let mut wrong = answer(&seq[0], Nfsstat4::OK);
        if let CbOutcome::Compound(r) = &mut wrong {
            if let Some(CbResop4::Sequence(Res4::Ok(ok))) = r.results.first_mut() {
                ok.sessionid = [1; 16];
            }
        }
        b.handle_reply(seq[0].token, wrong);
        assert_eq!(b.path(), PathState::Fault);
        // CB_NULL unanswered.
        let mut b = SessionCallbacks::new(SID, 1, &[sys()]);
        let null = b.poll(1);
        b.handle_reply(null[0].token, CbOutcome::Failed);
        assert_eq!(b.path(), PathState::Down);
    }

    #[test]
    fn an_old_connections_failure_does_not_spoil_the_new_paths_probe() {
        let mut b = SessionCallbacks::new(SID, 1, &[sys()]);
        let old = b.poll(1);
        b.new_path(); // the client bound another connection meanwhile
        b.handle_reply(old[0].token, CbOutcome::Failed);
        assert_eq!(b.path(), PathState::Unknown);
        let probe = b.poll(2);
        assert_eq!((probe[0].call.clone(), probe[0].conn), (CbCall::Null, 2));
    }

    #[test]
    fn callbacks_carry_the_sessions_minor_version() {
        let mut b = probed();
        b.set_minor_version(2);
        b.queue(recall()).unwrap();
        let s = b.poll(5);
        let CbCall::Compound(args) = &s[0].call else {
            panic!("{s:?}")
        };
        assert_eq!(args.minorversion, 2);
    }

    #[test]
    fn the_queue_is_bounded() {
        let mut b = probed();
        for _ in 0..QUEUED_MAX {
            b.queue(recall()).unwrap();
        }
        assert_eq!(b.queue(recall()), Err(Nfsstat4::DELAY));
    }
}
