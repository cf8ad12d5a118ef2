//! The client's back channel and delegations, sans IO: which delegations are held, what a
//! CB_COMPOUND from the server must be answered, and what a recall obliges the client to do.
//!
//! # The back channel (RFC 8881 §2.10.3.1, §20)
//! CREATE_SESSION offers it: `CREATE_SESSION4_FLAG_CONN_BACK_CHAN` makes the session's first
//! connection carry the server's calls too, to the callback program we name. The transport
//! hands those calls to the driver's callback service; the driver decodes them and asks this
//! module what to answer:
//!
//! ```text
//!   server ── CB_NULL ───────────────────────────────▶ empty reply
//!   server ── CB_COMPOUND [CB_SEQUENCE, op, ...] ───▶ Callbacks::handle_compound
//!                                                       ├ BackSlots: new, retry, or error
//!                                                       ├ each op: answer + what to do
//!                                                       └ reply now; recalls run after it
//! ```
//! A server that does not take the back channel (no CONN_BACK_CHAN in its reply; EFS grants
//! no delegations at all) leaves the client without one: then it asks for no delegation on
//! OPEN (`OPEN4_SHARE_WANT_NO_DELEG`) and returns at once any it is granted anyway, because a
//! delegation nobody can recall makes every conflicting client wait for the lease to run out.
//!
//! # Back-channel slots (RFC 8881 §2.10.6.1, with the roles swapped)
//! The server is the requester here and [`BackSlots`] is our replier's table: one sequence
//! id per slot, starting at 0 so that the first call is 1. A call with the next id is new
//! work; the same id again is a retry, answered from the slot's cached reply when the server
//! asked for caching (`csa_cachethis`), else NFS4ERR_RETRY_UNCACHED_REP; any other id is
//! NFS4ERR_SEQ_MISORDERED; a slot beyond the table is NFS4ERR_BADSLOT; a session id not ours
//! is NFS4ERR_BADSESSION. A CB_COMPOUND is answered synchronously under the table's lock, so
//! a slot is never "busy" from the table's point of view. A new session starts a new table.
//!
//! # Delegations
//! [`Delegations`] maps a file handle to the delegation held on it: its stateid, read or
//! write, how many of our opens use it, and whether UNSTABLE data was written to the file
//! since its last COMMIT went out. A second OPEN of the same file gets the same delegation
//! (RFC 8881 §10.4), so the table counts opens, and the last CLOSE returns it.
//!
//! CB_RECALL (§20.2) is answered OK at once, before the return: the RFC allows the reply to
//! come first, and a client that held the reply until its data was flushed could make the
//! server time the callback out. What the recall must do is handed back as a [`Return`]:
//!
//! ```text
//!   CB_RECALL(stateid, fh) ── held ─────────▶ OK, Return { flush: dirty } ── driver:
//!                          │                      COMMIT the file if dirty, then DELEGRETURN
//!                          ├ being returned ─▶ OK (the return is on its way)
//!                          ├ unknown, the server names calls of ours still in flight
//!                          │                ─▶ NFS4ERR_DELAY (our OPEN reply may be racing it)
//!                          └ unknown ───────▶ NFS4ERR_BADHANDLE (§20.2.3)
//! ```
//! Flushing means COMMIT here, plus whatever the file layer still holds: a write-back hook
//! the mount registers ([`super::Client::set_write_back`]) sends the data it kept under a
//! write delegation, then the COMMIT covers it (below). Data the file layer of a file still
//! open has not yet sent is sent later under the open stateid, which stays valid after the
//! return. CB_RECALL_ANY (§20.6) returns all but `craa_objects_to_keep` of the delegations.
//! CB_GETATTR is answered as below. Other callback ops get NFS4ERR_NOTSUPP (this client
//! holds no layouts, directory delegations or lock notifications to act on).
//!
//! # Write delegations: taken on creates, kept after the close
//! A write delegation is what makes a small file cheap (issue #29): a file this client
//! creates (`tar`, `cp`, a compiler's output) is its alone until another client asks, so its
//! close needs no COMMIT, and the delegation need not go back with the CLOSE. An OPEN that
//! creates asks for any delegation (no want bits); any other OPEN with write access says
//! `OPEN4_SHARE_WANT_NO_DELEG`, and a write delegation granted to it anyway is returned at
//! once, as before (a file opened for writing that the client did not make is more likely
//! shared).
//!
//! ```text
//!   OPEN(create) ─▶ write delegation held (opens counted; CB_GETATTR answered from it)
//!   close(2) ─▶ WRITEs of what is buffered, no COMMIT; the mount keeps the written data
//!   last CLOSE ─▶ the delegation stays (Held, no opens)
//!   CB_RECALL / unmount / more than DELEGATIONS_MAX ─▶ write-back hook (resends what a
//!       server restart lost), COMMIT if UNSTABLE data went out since the last one, DELEGRETURN
//!   fsync ─▶ the file layer's COMMIT, as without a delegation
//! ```
//! This is what the Linux client does under a write delegation: `nfs4_file_flush` starts the
//! write-back at close without waiting for a COMMIT, and the delegation outlives the open.
//! While the delegation is held, a CB_GETATTR is answered with the size and change the OPEN
//! saw, the size grown to the end of every WRITE sent under it and the change moved on once
//! per WRITE (the server shows the holder's size and a change that moved on; RFC 8881
//! §10.4.3). A delegation whose DELEGRETURN is under way is answered from the same values;
//! any other file's CB_GETATTR is NFS4ERR_BADHANDLE (§20.1.3).
//!
//! # Bounds
//! [`DELEGATIONS_MAX`] delegations are kept; one granted beyond that is returned at once.
//! [`BACK_SLOTS_MAX`] back-channel slots are offered; a cached reply is one CB_COMPOUND
//! result (a few hundred bytes).

use sluice_xdr::nfs4::attrs::AttrValues;
use sluice_xdr::nfs4::callback::{
    CbArgop4, CbCompound4Args, CbCompound4Res, CbResop4, CbSequenceArgs, CbSequenceResOk,
};
use sluice_xdr::nfs4::ops::Res4;
use sluice_xdr::nfs4::{Bitmap4, Fattr4, NfsFh4, Nfsstat4, SessionId4, Stateid4, MINOR_VERSIONS};
use std::collections::HashMap;

/// Most delegations remembered: 4,096, as many as a busy interactive client holds open
/// files; each entry is under 200 bytes. One granted beyond it is returned at once.
pub const DELEGATIONS_MAX: usize = 4096;
/// Back-channel slots offered in CREATE_SESSION (`ca_maxrequests`): 16, the transport's
/// bound on callbacks run at once per connection (`RpcConfig::callbacks_in_flight_max`), and
/// what Linux offers. Servers use one (knfsd, sluice).
pub const BACK_SLOTS_MAX: u32 = 16;

/// Read or write delegation (`open_delegation_type4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
}

/// What the driver must do for a recalled delegation: optionally COMMIT the file, then
/// DELEGRETURN, then [`Delegations::returned`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Return {
    pub fh: NfsFh4,
    pub stateid: Stateid4,
    /// UNSTABLE data went to the file since the last COMMIT was sent: COMMIT first.
    pub flush: bool,
}

/// What to do with a delegation an OPEN came with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granted {
    /// Recorded; it is returned at the last close or on recall.
    Held,
    /// Return it now (no back channel, the table is full, or a return of it is under way).
    ReturnNow,
}

#[derive(Debug, Clone)]
struct Held {
    stateid: Stateid4,
    kind: Kind,
    /// Our opens of the file that came with (or joined) this delegation.
    opens: u32,
    /// UNSTABLE data was sent since the last COMMIT.
    dirty: bool,
    /// A DELEGRETURN of it has been started.
    returning: bool,
    /// A write delegation's size and change as the OPEN that came with it saw them, grown by
    /// the WRITEs sent under it (what a CB_GETATTR is answered until the return is done).
    attrs: Option<(u64, u64)>,
}

/// The delegations this client holds, by file handle. See the module docs.
#[derive(Debug, Default)]
pub struct Delegations {
    held: HashMap<NfsFh4, Held>,
}

impl Delegations {
    /// An OPEN of `fh` came with delegation `stateid`.
    pub fn granted(&mut self, fh: &NfsFh4, stateid: Stateid4, kind: Kind) -> Granted {
        if let Some(h) = self.held.get_mut(fh) {
            if h.returning || h.stateid.other != stateid.other {
                // Another delegation than the one we hold, or one we are giving back: the
                // server should not do this; returning the newcomer is always allowed.
                return Granted::ReturnNow;
            }
            h.opens += 1;
            h.stateid = stateid;
            return Granted::Held;
        }
        if self.held.len() >= DELEGATIONS_MAX {
            return Granted::ReturnNow;
        }
        self.held.insert(
            fh.clone(),
            Held {
                stateid,
                kind,
                opens: 1,
                dirty: false,
                returning: false,
                attrs: None,
            },
        );
        Granted::Held
    }

    /// An OPEN that created `fh` came with write delegation `stateid`, the file then of
    /// `size` bytes and change `change`: held past the last close (module notes: write
    /// delegations), or returned at once when the table is full.
    pub fn write_held(
        &mut self,
        fh: &NfsFh4,
        stateid: Stateid4,
        size: u64,
        change: u64,
    ) -> Granted {
        let g = self.granted(fh, stateid, Kind::Write);
        if g == Granted::Held {
            let h = self.held.get_mut(fh).expect("just granted");
            h.attrs.get_or_insert((size, change));
        }
        g
    }

    /// An OPEN of `fh` came with write delegation `stateid`, the file then of `size` bytes
    /// and change `change`, that this client does not keep (not a create): returned at once
    /// (module notes: write delegations), and remembered until [`Delegations::returned`] so
    /// that a CB_GETATTR meanwhile is answered.
    pub fn write_granted(
        &mut self,
        fh: &NfsFh4,
        stateid: Stateid4,
        size: u64,
        change: u64,
    ) -> Granted {
        if !self.held.contains_key(fh) && self.held.len() < DELEGATIONS_MAX {
            self.held.insert(
                fh.clone(),
                Held {
                    stateid,
                    kind: Kind::Write,
                    opens: 0,
                    dirty: false,
                    returning: true,
                    attrs: Some((size, change)),
                },
            );
        }
        Granted::ReturnNow
    }

    /// CB_GETATTR (§20.1) of `fh` asking for `request`: the size and change of a write
    /// delegation we hold, NFS4ERR_BADHANDLE for any other file (§20.1.3).
    pub fn cb_getattr(&self, fh: &NfsFh4, request: &Bitmap4) -> Result<Fattr4, Nfsstat4> {
        let Some((size, change)) = self.held.get(fh).and_then(|h| h.attrs) else {
            return Err(Nfsstat4::BADHANDLE);
        };
        let v = AttrValues {
            size: Some(size),
            change: Some(change),
            ..AttrValues::default()
        };
        Ok(v.encode_masked(Some(request)))
    }

    /// The write delegation of `fh`, held or being returned: what I/O of a file whose open
    /// is closed goes under (the mount writes back after the close).
    pub fn write_stateid(&self, fh: &NfsFh4) -> Option<Stateid4> {
        self.held
            .get(fh)
            .filter(|h| h.kind == Kind::Write)
            .map(|h| h.stateid)
    }

    /// A WRITE under our write delegation of `fh` reached `end` (bytes): the size and change a
    /// CB_GETATTR is answered with move on (module notes: write delegations).
    pub fn wrote(&mut self, fh: &NfsFh4, end: u64) {
        if let Some((size, change)) = self.held.get_mut(fh).and_then(|h| h.attrs.as_mut()) {
            *size = (*size).max(end);
            *change = change.wrapping_add(1);
        }
    }

    /// Every delegation not already being returned, marked returning (the client is going
    /// away: unmount).
    pub fn return_all(&mut self) -> Vec<Return> {
        self.recall_any(0)
    }

    /// The delegation held on `fh`, if any (and not being returned).
    pub fn held(&self, fh: &NfsFh4) -> Option<(Stateid4, Kind)> {
        self.held
            .get(fh)
            .filter(|h| !h.returning)
            .map(|h| (h.stateid, h.kind))
    }

    /// Delegations held or being returned.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Delegations held and not being returned.
    pub fn held_count(&self) -> usize {
        self.held.values().filter(|h| !h.returning).count()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// UNSTABLE data went to `fh` since the last COMMIT was sent.
    pub fn is_dirty(&self, fh: &NfsFh4) -> bool {
        self.held.get(fh).is_some_and(|h| h.dirty)
    }

    /// An UNSTABLE WRITE to `fh` is going out.
    pub fn wrote_unstable(&mut self, fh: &NfsFh4) {
        if let Some(h) = self.held.get_mut(fh) {
            h.dirty = true;
        }
    }

    /// A COMMIT of `fh` is going out: what was written before it is covered.
    pub fn committing(&mut self, fh: &NfsFh4) {
        if let Some(h) = self.held.get_mut(fh) {
            h.dirty = false;
        }
    }

    /// One of our opens of `fh` is closing: the delegation to return with the CLOSE when it
    /// was the last open using it. A write delegation is kept (module notes: write
    /// delegations).
    pub fn closing(&mut self, fh: &NfsFh4) -> Option<Stateid4> {
        let h = self.held.get_mut(fh)?;
        h.opens = h.opens.saturating_sub(1);
        if h.opens > 0 || h.returning || h.kind == Kind::Write {
            return None;
        }
        h.returning = true;
        Some(h.stateid)
    }

    /// The DELEGRETURN of `stateid` on `fh` is done (or failed: the server forgets it either
    /// way, by revocation at worst).
    pub fn returned(&mut self, fh: &NfsFh4, stateid: Stateid4) {
        if self
            .held
            .get(fh)
            .is_some_and(|h| h.stateid.other == stateid.other)
        {
            self.held.remove(fh);
        }
    }

    /// A new client id: every delegation of the old one is gone (RFC 8881 §10.2.1).
    pub fn clear(&mut self) {
        self.held.clear();
    }

    /// CB_RECALL of `stateid` on `fh`; `racing`: the server names calls of ours it may still
    /// be answering (`csa_referring_call_lists` not empty). See the module docs.
    pub fn recall(
        &mut self,
        fh: &NfsFh4,
        stateid: Stateid4,
        racing: bool,
    ) -> Result<Option<Return>, Nfsstat4> {
        match self.held.get_mut(fh) {
            Some(h) if h.stateid.other == stateid.other => {
                if h.returning {
                    return Ok(None);
                }
                h.returning = true;
                Ok(Some(Return {
                    fh: fh.clone(),
                    stateid: h.stateid,
                    flush: h.dirty,
                }))
            }
            _ if racing => Err(Nfsstat4::DELAY),
            _ => Err(Nfsstat4::BADHANDLE),
        }
    }

    /// CB_RECALL_ANY: return all but `keep` of the delegations not already being returned.
    pub fn recall_any(&mut self, keep: u32) -> Vec<Return> {
        let mut live: Vec<(&NfsFh4, &mut Held)> =
            self.held.iter_mut().filter(|(_, h)| !h.returning).collect();
        // Keep the ones in use by the most opens; the order among equals does not matter.
        live.sort_by_key(|(_, h)| std::cmp::Reverse(h.opens));
        live.into_iter()
            .skip(keep as usize)
            .map(|(fh, h)| {
                h.returning = true;
                Return {
                    fh: fh.clone(),
                    stateid: h.stateid,
                    flush: h.dirty,
                }
            })
            .collect()
    }
}

/// One back-channel slot: the last sequence id seen and the reply cached for it.
#[derive(Debug, Clone, Default)]
struct BackSlot {
    seqid: u32,
    cached: Option<CbCompound4Res>,
}

/// The replier's slot table of the back channel. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct BackSlots {
    sessionid: SessionId4,
    slots: Vec<BackSlot>,
}

/// What [`BackSlots::check`] says of a CB_SEQUENCE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeqCheck {
    /// New work on the slot.
    New,
    /// A retry of the last call on the slot: send this reply again.
    Replay(CbCompound4Res),
    /// Answer CB_SEQUENCE with this error.
    Error(Nfsstat4),
}

impl BackSlots {
    /// The table of session `sessionid` with `slots` slots (at most [`BACK_SLOTS_MAX`]).
    pub fn new(sessionid: SessionId4, slots: u32) -> BackSlots {
        BackSlots {
            sessionid,
            slots: vec![BackSlot::default(); slots.clamp(1, BACK_SLOTS_MAX) as usize],
        }
    }

    /// Checks a CB_SEQUENCE against the table.
    pub fn check(&self, a: &CbSequenceArgs) -> SeqCheck {
        if a.sessionid != self.sessionid || self.slots.is_empty() {
            return SeqCheck::Error(Nfsstat4::BADSESSION);
        }
        let Some(slot) = self.slots.get(a.slotid as usize) else {
            return SeqCheck::Error(Nfsstat4::BADSLOT);
        };
        if a.sequenceid == slot.seqid.wrapping_add(1) {
            SeqCheck::New
        } else if a.sequenceid == slot.seqid && slot.seqid != 0 {
            match &slot.cached {
                Some(res) => SeqCheck::Replay(res.clone()),
                None => SeqCheck::Error(Nfsstat4::RETRY_UNCACHED_REP),
            }
        } else {
            SeqCheck::Error(Nfsstat4::SEQ_MISORDERED)
        }
    }

    /// New work on `a`'s slot was answered with `res`: the slot moves on.
    fn done(&mut self, a: &CbSequenceArgs, res: &CbCompound4Res) {
        if let Some(slot) = self.slots.get_mut(a.slotid as usize) {
            slot.seqid = a.sequenceid;
            slot.cached = a.cachethis.then(|| res.clone());
        }
    }

    fn highest_slotid(&self) -> u32 {
        self.slots.len().saturating_sub(1) as u32
    }
}

/// The back channel's state: the session's slot table and the delegations held.
#[derive(Debug, Default)]
pub struct Callbacks {
    /// Whether the current session has a back channel (CREATE_SESSION took CONN_BACK_CHAN).
    pub up: bool,
    pub slots: BackSlots,
    pub delegations: Delegations,
}

/// A CB_COMPOUND's answer and the returns it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbOutcome {
    pub res: CbCompound4Res,
    pub returns: Vec<Return>,
}

impl Callbacks {
    /// A new session: its back channel is `up` with `slots` slots.
    pub fn new_session(&mut self, sessionid: SessionId4, up: bool, slots: u32) {
        self.up = up;
        self.slots = if up {
            BackSlots::new(sessionid, slots)
        } else {
            // No slots: every CB_SEQUENCE is BADSESSION (nothing is bound to call us on).
            BackSlots::default()
        };
    }

    /// Answers one CB_COMPOUND (RFC 8881 §20): CB_SEQUENCE first, then the ops in order until
    /// one fails. See the module docs.
    pub fn handle_compound(&mut self, args: &CbCompound4Args) -> CbOutcome {
        let mut res = CbCompound4Res {
            status: Nfsstat4::OK,
            tag: args.tag.clone(),
            results: Vec::new(),
        };
        let mut returns = Vec::new();
        if !MINOR_VERSIONS.contains(&args.minorversion) {
            res.status = Nfsstat4::MINOR_VERS_MISMATCH;
            return CbOutcome { res, returns };
        }
        let Some(first) = args.ops.first() else {
            return CbOutcome { res, returns };
        };
        let CbArgop4::Sequence(seq) = first else {
            let status = match first {
                CbArgop4::Illegal(_) => Nfsstat4::OP_ILLEGAL,
                _ => Nfsstat4::OP_NOT_IN_SESSION,
            };
            res.status = status;
            res.results.push(error_for(first, status));
            return CbOutcome { res, returns };
        };
        match self.slots.check(seq) {
            SeqCheck::Replay(cached) => {
                return CbOutcome {
                    res: cached,
                    returns,
                }
            }
            SeqCheck::Error(status) => {
                res.status = status;
                res.results.push(CbResop4::Sequence(Res4::Err(status)));
                return CbOutcome { res, returns };
            }
            SeqCheck::New => {}
        }
        let highest = self.slots.highest_slotid();
        res.results
            .push(CbResop4::Sequence(Res4::Ok(CbSequenceResOk {
                sessionid: seq.sessionid,
                sequenceid: seq.sequenceid,
                slotid: seq.slotid,
                highest_slotid: highest,
                target_highest_slotid: highest,
            })));
        let racing = !seq.referring_call_lists.0.is_empty();
        for op in &args.ops[1..] {
            let r = match op {
                CbArgop4::Sequence(_) => error_for(op, Nfsstat4::SEQUENCE_POS),
                CbArgop4::Recall(a) => match self.delegations.recall(&a.fh, a.stateid, racing) {
                    Ok(ret) => {
                        returns.extend(ret);
                        CbResop4::Recall(Nfsstat4::OK)
                    }
                    Err(s) => CbResop4::Recall(s),
                },
                CbArgop4::Getattr(a) => {
                    CbResop4::Getattr(match self.delegations.cb_getattr(&a.fh, &a.attr_request) {
                        Ok(f) => Res4::Ok(f),
                        Err(e) => Res4::Err(e),
                    })
                }
                CbArgop4::RecallAny(a) => {
                    returns.extend(self.delegations.recall_any(a.objects_to_keep));
                    CbResop4::RecallAny(Nfsstat4::OK)
                }
                CbArgop4::Illegal(_) => CbResop4::Illegal(Nfsstat4::OP_ILLEGAL),
                CbArgop4::BadXdr(..) => error_for(op, Nfsstat4::BADXDR),
                _ => error_for(op, Nfsstat4::NOTSUPP),
            };
            let status = r.status();
            res.results.push(r);
            if !status.is_ok() {
                res.status = status;
                break;
            }
        }
        self.slots.done(seq, &res);
        CbOutcome { res, returns }
    }
}

fn error_for(op: &CbArgop4, status: Nfsstat4) -> CbResop4 {
    match op {
        CbArgop4::Illegal(_) => CbResop4::Illegal(status),
        _ => CbResop4::error(op.opnum(), status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_xdr::nfs4::callback::{
        CbGetattrArgs, CbOpnum4, CbRecallAnyArgs, CbRecallArgs, ReferringCall4, ReferringCallList4,
        ReferringCallLists, ReferringCalls,
    };
    use sluice_xdr::nfs4::Utf8Str;

    const SESSION: SessionId4 = [5; 16];

    fn fh(n: u8) -> NfsFh4 {
        NfsFh4(bytes::Bytes::from(vec![n; 8]))
    }

    fn sid(n: u8) -> Stateid4 {
        Stateid4 {
            seqid: 1,
            other: [n; 12],
        }
    }

    fn seq(slot: u32, seqid: u32, cachethis: bool) -> CbArgop4 {
        CbArgop4::Sequence(CbSequenceArgs {
            sessionid: SESSION,
            sequenceid: seqid,
            slotid: slot,
            highest_slotid: 0,
            cachethis,
            referring_call_lists: ReferringCallLists::default(),
        })
    }

    fn recall(n: u8) -> CbArgop4 {
        CbArgop4::Recall(CbRecallArgs {
            stateid: sid(n),
            truncate: false,
            fh: fh(n),
        })
    }

    fn compound(ops: Vec<CbArgop4>) -> CbCompound4Args {
        CbCompound4Args {
            tag: Utf8Str::default(),
            minorversion: 1,
            callback_ident: 0,
            ops,
        }
    }

    fn up() -> Callbacks {
        let mut c = Callbacks::default();
        c.new_session(SESSION, true, 2);
        c
    }

    fn statuses(o: &CbOutcome) -> Vec<Nfsstat4> {
        o.res.results.iter().map(|r| r.status()).collect()
    }

    #[test]
    fn a_recall_of_a_held_delegation_is_answered_ok_at_once_and_returns_it() {
        let mut c = up();
        assert_eq!(
            c.delegations.granted(&fh(1), sid(1), Kind::Read),
            Granted::Held
        );
        let o = c.handle_compound(&compound(vec![seq(0, 1, false), recall(1)]));
        assert_eq!(o.res.status, Nfsstat4::OK);
        assert_eq!(statuses(&o), [Nfsstat4::OK, Nfsstat4::OK]);
        assert_eq!(
            o.returns,
            [Return {
                fh: fh(1),
                stateid: sid(1),
                flush: false
            }]
        );
        // Being returned: a second recall changes nothing, a close returns nothing more.
        let o = c.handle_compound(&compound(vec![seq(0, 2, false), recall(1)]));
        assert_eq!(o.res.status, Nfsstat4::OK);
        assert!(o.returns.is_empty());
        assert_eq!(c.delegations.closing(&fh(1)), None);
        c.delegations.returned(&fh(1), sid(1));
        assert!(c.delegations.is_empty());
    }

    #[test]
    fn a_recall_flushes_only_a_file_with_unstable_data_since_its_last_commit() {
        let mut d = Delegations::default();
        d.granted(&fh(1), sid(1), Kind::Write);
        d.granted(&fh(2), sid(2), Kind::Write);
        d.wrote_unstable(&fh(1));
        d.wrote_unstable(&fh(2));
        d.committing(&fh(2));
        assert!(d.recall(&fh(1), sid(1), false).unwrap().unwrap().flush);
        assert!(!d.recall(&fh(2), sid(2), false).unwrap().unwrap().flush);
    }

    #[test]
    fn an_unknown_recall_is_badhandle_or_delay_when_it_may_race_an_open_reply() {
        let mut c = up();
        let o = c.handle_compound(&compound(vec![seq(0, 1, false), recall(9)]));
        assert_eq!(o.res.status, Nfsstat4::BADHANDLE);
        let mut racing = compound(vec![seq(0, 2, false), recall(9)]);
        if let CbArgop4::Sequence(s) = &mut racing.ops[0] {
            s.referring_call_lists = ReferringCallLists(vec![ReferringCallList4 {
                sessionid: SESSION,
                calls: ReferringCalls(vec![ReferringCall4 {
                    sequenceid: 4,
                    slotid: 0,
                }]),
            }]);
        }
        assert_eq!(c.handle_compound(&racing).res.status, Nfsstat4::DELAY);
    }

    #[test]
    fn the_last_close_returns_a_delegation_shared_by_two_opens() {
        let mut d = Delegations::default();
        assert_eq!(d.granted(&fh(1), sid(1), Kind::Read), Granted::Held);
        assert_eq!(d.granted(&fh(1), sid(1), Kind::Read), Granted::Held);
        assert_eq!(d.closing(&fh(1)), None);
        assert_eq!(d.closing(&fh(1)), Some(sid(1)));
        // Another stateid for a file whose delegation is being returned: give it back.
        assert_eq!(d.granted(&fh(1), sid(3), Kind::Read), Granted::ReturnNow);
        d.returned(&fh(1), sid(1));
        assert_eq!(d.held(&fh(1)), None);
    }

    #[test]
    fn the_table_is_bounded() {
        let mut d = Delegations::default();
        for i in 0..DELEGATIONS_MAX {
            let f = NfsFh4(bytes::Bytes::from((i as u32).to_be_bytes().to_vec()));
            assert_eq!(d.granted(&f, sid(1), Kind::Read), Granted::Held);
        }
        assert_eq!(d.granted(&fh(1), sid(1), Kind::Read), Granted::ReturnNow);
    }

    #[test]
    fn back_slots_follow_the_replier_rules() {
        let mut c = up();
        c.delegations.granted(&fh(1), sid(1), Kind::Read);
        // First call on a slot must be seqid 1.
        let o = c.handle_compound(&compound(vec![seq(0, 2, false)]));
        assert_eq!(o.res.status, Nfsstat4::SEQ_MISORDERED);
        let o = c.handle_compound(&compound(vec![seq(0, 1, true), recall(1)]));
        assert_eq!(o.returns.len(), 1);
        // The retry gets the cached reply and starts nothing again.
        let again = c.handle_compound(&compound(vec![seq(0, 1, true), recall(1)]));
        assert_eq!(again.res, o.res);
        assert!(again.returns.is_empty());
        // Uncached retry, a slot beyond the table, a session not ours.
        c.handle_compound(&compound(vec![seq(1, 1, false)]));
        let o = c.handle_compound(&compound(vec![seq(1, 1, false)]));
        assert_eq!(o.res.status, Nfsstat4::RETRY_UNCACHED_REP);
        let o = c.handle_compound(&compound(vec![seq(2, 1, false)]));
        assert_eq!(o.res.status, Nfsstat4::BADSLOT);
        c.new_session([6; 16], true, 1);
        let o = c.handle_compound(&compound(vec![seq(0, 1, false)]));
        assert_eq!(o.res.status, Nfsstat4::BADSESSION);
    }

    #[test]
    fn ops_out_of_place_or_unsupported_get_the_rfc_errors() {
        let mut c = up();
        // No CB_SEQUENCE first.
        let o = c.handle_compound(&compound(vec![recall(1)]));
        assert_eq!(o.res.status, Nfsstat4::OP_NOT_IN_SESSION);
        assert_eq!(o.res.results[0].opnum(), CbOpnum4::RECALL);
        // CB_SEQUENCE twice; then an unsupported op; then an undefined one.
        let o = c.handle_compound(&compound(vec![seq(0, 1, false), seq(0, 2, false)]));
        assert_eq!(statuses(&o), [Nfsstat4::OK, Nfsstat4::SEQUENCE_POS]);
        let getattr = CbArgop4::Getattr(CbGetattrArgs {
            fh: fh(1),
            attr_request: Bitmap4::default(),
        });
        let o = c.handle_compound(&compound(vec![seq(0, 2, false), getattr, recall(1)]));
        assert_eq!(
            statuses(&o),
            [Nfsstat4::OK, Nfsstat4::BADHANDLE],
            "CB_GETATTR of a file without a write delegation"
        );
        let o = c.handle_compound(&compound(vec![seq(0, 3, false), CbArgop4::Illegal(99)]));
        assert_eq!(o.res.status, Nfsstat4::OP_ILLEGAL);
        assert_eq!(o.res.results[1], CbResop4::Illegal(Nfsstat4::OP_ILLEGAL));
        // Minor version 0 or 3.
        let mut v0 = compound(vec![seq(0, 4, false)]);
        v0.minorversion = 0;
        let o = c.handle_compound(&v0);
        assert_eq!(o.res.status, Nfsstat4::MINOR_VERS_MISMATCH);
        assert!(o.res.results.is_empty());
    }

    #[test]
    fn recall_any_keeps_the_most_used_and_returns_the_rest() {
        let mut c = up();
        c.delegations.granted(&fh(1), sid(1), Kind::Read);
        c.delegations.granted(&fh(2), sid(2), Kind::Read);
        c.delegations.granted(&fh(2), sid(2), Kind::Read);
        let any = CbArgop4::RecallAny(CbRecallAnyArgs {
            objects_to_keep: 1,
            type_mask: Bitmap4::default(),
        });
        let o = c.handle_compound(&compound(vec![seq(0, 1, false), any]));
        assert_eq!(o.res.status, Nfsstat4::OK);
        assert_eq!(o.returns.len(), 1);
        assert_eq!(o.returns[0].fh, fh(1));
        assert!(c.delegations.held(&fh(2)).is_some());
    }

    #[test]
    fn without_a_back_channel_every_cb_sequence_is_badsession() {
        let mut c = Callbacks::default();
        c.new_session(SESSION, false, 4);
        let o = c.handle_compound(&compound(vec![seq(0, 1, false)]));
        assert_eq!(o.res.status, Nfsstat4::BADSESSION);
    }

    #[test]
    fn a_write_delegation_of_a_created_file_outlives_its_close_and_goes_back_with_its_data() {
        use sluice_xdr::nfs4::attrs::num;
        let mut c = up();
        assert_eq!(
            c.delegations.write_held(&fh(4), sid(4), 0, 50),
            Granted::Held
        );
        assert_eq!(c.delegations.held(&fh(4)), Some((sid(4), Kind::Write)));
        // Writes under it move the CB_GETATTR answer on.
        c.delegations.wrote(&fh(4), 300);
        c.delegations.wrote_unstable(&fh(4));
        let getattr = CbArgop4::Getattr(CbGetattrArgs {
            fh: fh(4),
            attr_request: Bitmap4::from_bits(&[num::CHANGE, num::SIZE]),
        });
        let o = c.handle_compound(&compound(vec![seq(0, 1, false), getattr]));
        let CbResop4::Getattr(Res4::Ok(f)) = &o.res.results[1] else {
            panic!("{o:?}")
        };
        let v = AttrValues::decode(f).unwrap().values;
        assert_eq!((v.size, v.change), (Some(300), Some(51)));
        // The last close keeps it; its stateid still carries writes.
        assert_eq!(c.delegations.closing(&fh(4)), None);
        assert_eq!(c.delegations.write_stateid(&fh(4)), Some(sid(4)));
        assert!(c.delegations.is_dirty(&fh(4)));
        // Unmount: returned, with a flush for its UNSTABLE data.
        let all = c.delegations.return_all();
        assert_eq!(
            all,
            [Return {
                fh: fh(4),
                stateid: sid(4),
                flush: true
            }]
        );
        assert_eq!(c.delegations.held(&fh(4)), None, "being returned");
        assert_eq!(
            c.delegations.write_stateid(&fh(4)),
            Some(sid(4)),
            "the write-back before DELEGRETURN still writes under it"
        );
        c.delegations.returned(&fh(4), sid(4));
        assert!(c.delegations.is_empty());
        assert_eq!(c.delegations.write_stateid(&fh(4)), None);
    }

    #[test]
    fn a_write_delegation_is_returned_at_once_and_cb_getattr_answered_until_then() {
        use sluice_xdr::nfs4::attrs::num;
        let mut c = up();
        assert_eq!(
            c.delegations.write_granted(&fh(3), sid(3), 4096, 77),
            Granted::ReturnNow
        );
        assert_eq!(c.delegations.held(&fh(3)), None, "being returned");
        let getattr = |f| {
            CbArgop4::Getattr(CbGetattrArgs {
                fh: f,
                attr_request: Bitmap4::from_bits(&[num::CHANGE, num::SIZE]),
            })
        };
        let o = c.handle_compound(&compound(vec![seq(0, 1, false), getattr(fh(3))]));
        let CbResop4::Getattr(Res4::Ok(f)) = &o.res.results[1] else {
            panic!("{o:?}")
        };
        let v = AttrValues::decode(f).unwrap().values;
        assert_eq!((v.size, v.change), (Some(4096), Some(77)));
        // A recall meanwhile: the return is on its way.
        let o = c.handle_compound(&compound(vec![seq(0, 2, false), recall(3)]));
        assert_eq!(statuses(&o), [Nfsstat4::OK, Nfsstat4::OK]);
        assert!(o.returns.is_empty());
        c.delegations.returned(&fh(3), sid(3));
        let o = c.handle_compound(&compound(vec![seq(0, 3, false), getattr(fh(3))]));
        assert_eq!(statuses(&o), [Nfsstat4::OK, Nfsstat4::BADHANDLE]);
    }
}
