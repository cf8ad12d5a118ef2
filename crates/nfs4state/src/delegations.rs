//! Delegations as [`State4`] entry points: the grant at OPEN, the recall gate every
//! conflicting op passes, DELEGRETURN, and the recalls' CB_RECALLs over the holder's back
//! channel (the table and its design notes are in [`crate::delegations::table`]).
//!
//! ```text
//!   OPEN (sole reader, or sole writer that may read; no NLM lock on the file)
//!        ─ open_delegation ─▶ DelegTable::grant
//!   conflicting op of another client ─ break_delegations ─▶ DelegTable::conflicts
//!     (an NFSv3 op through the server's `recall::RecallGate`: no client id, NFS3ERR_JUKEBOX for the DELAY;
//!      an NLM LOCK or TEST, and a waiting NLM LOCK's retry (`crate::nlm`): the request is dropped)
//!        │ holder is a courtesy client: expired at once, the op goes on
//!        └ else: CB_RECALL queued (queue_recalls), the op gets NFS4ERR_DELAY
//!   poll_callbacks(now) ──▶ recall_sent (the clock starts)
//!   handle_callback(now) ─▶ recall_answered (answered / DELAY: again / lost)
//!   tick(now) ─▶ DelegTable::tick: revoked after the lease; recalls stranded on a session
//!                that cannot deliver them taken back; unqueued recalls queued again
//! ```

pub mod table;

use crate::callback::{CbDone, PathState};
use crate::delegations::table::{GetattrView, GrantAsk, Kind, RecallAnswer, SizeChange};
use crate::opens::IoState;
use crate::state::State4;
use sluice_xdr::nfs4::attrs::{num, AttrValues};
use sluice_xdr::nfs4::callback::{CbArgop4, CbGetattrArgs, CbRecallArgs, CbResop4};
use sluice_xdr::nfs4::ops::Res4;
use sluice_xdr::nfs4::ops::{
    OpenDelegation4, OPEN4_SHARE_ACCESS_WRITE, OPEN4_SHARE_DENY_READ, OPEN_DELEGATE_READ,
    OPEN_DELEGATE_WRITE,
};
use sluice_xdr::nfs4::Bitmap4;
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{ClientId4, NfsFh4, SessionId4, Stateid4};
use std::time::Instant;

impl State4 {
    /// OPEN's delegation result, after its open state was created (see
    /// [`crate::delegations::table::DelegTable::grant`]). `(file, fh)`: the file's key in the state
    /// tables and the handle the client opened it by (what its callbacks name). A write-only
    /// OPEN gets no write delegation here: see [`State4::open_delegation_may_read`].
    pub fn open_delegation(
        &mut self,
        now: Instant,
        clientid: ClientId4,
        (file, fh): (&[u8], &[u8]),
        share_access: u32,
        attrs: SizeChange,
    ) -> OpenDelegation4 {
        self.open_delegation_may_read(now, clientid, (file, fh), share_access, attrs, false)
    }

    /// [`State4::open_delegation`] with what the caller found out about the client's read
    /// permission (`may_read`): a write-only OPEN of a client that may read the file gets a
    /// write delegation as an OPEN for both would (the table's notes: what is granted).
    pub fn open_delegation_may_read(
        &mut self,
        now: Instant,
        clientid: ClientId4,
        (file, fh): (&[u8], &[u8]),
        share_access: u32,
        attrs: SizeChange,
        may_read: bool,
    ) -> OpenDelegation4 {
        let contended = self.opens.iter_file(file).any(|o| {
            o.clientid != clientid
                && (o.access & OPEN4_SHARE_ACCESS_WRITE != 0 || o.deny & OPEN4_SHARE_DENY_READ != 0)
        }) || self.nlm_locked(file);
        let others_open = self.opens.iter_file(file).any(|o| o.clientid != clientid);
        let ask = GrantAsk {
            share_access,
            callback_up: self.callback_session(clientid, true).is_some(),
            contended,
            others_open,
            attrs,
            may_read,
        };
        self.delegs
            .grant(now, clientid, (file, fh), ask, self.entropy.as_mut())
    }

    /// Whether an NFSv3 host holds NLM locks on `file` (`crate::nlm`): no delegation is
    /// granted then. The Linux client keeps its locks local under a delegation (it sends no
    /// LOCK), so a delegation beside another host's NLM lock would let the two overlap
    /// unseen; knfsd refuses the lease for the same reason (lockd holds the file open).
    fn nlm_locked(&self, file: &[u8]) -> bool {
        self.locks
            .ranges
            .locks_of(file)
            .iter()
            .any(|l| crate::nlm::is_nlm_owner(l.owner.clientid))
    }

    /// OPEN CLAIM_PREVIOUS's delegation (see [`crate::delegations::table::DelegTable::grant_reclaimed`]):
    /// a read delegation the client names is granted back, none of another kind. `(file, fh)`
    /// as for [`State4::open_delegation`].
    pub fn reclaimed_delegation(
        &mut self,
        now: Instant,
        clientid: ClientId4,
        (file, fh): (&[u8], &[u8]),
        delegate_type: u32,
        attrs: SizeChange,
    ) -> OpenDelegation4 {
        let write = match delegate_type {
            OPEN_DELEGATE_READ => None,
            OPEN_DELEGATE_WRITE => Some(attrs),
            _ => return OpenDelegation4::None,
        };
        let callback_up = self.callback_session(clientid, true).is_some();
        self.delegs.grant_reclaimed(
            now,
            clientid,
            (file, fh),
            callback_up,
            write,
            self.entropy.as_mut(),
        )
    }

    /// The recall gate (RFC 8881 §10.4.1): an op of `clientid` on `file` (its key in the state
    /// tables, `FileSystem::state_key`: the same for every handle of it) that writes it or
    /// changes its name or attributes (`write`) conflicts with every other client's
    /// delegation of it; one that reads it, with other clients' write delegations. Courtesy holders are expired at once; live ones are recalled and the
    /// op gets NFS4ERR_DELAY until they return (or lose) them. `clientid` is `None` for a
    /// caller with no client (nothing is its own then).
    pub fn break_delegations(
        &mut self,
        now: Instant,
        clientid: Option<ClientId4>,
        file: &[u8],
        write: bool,
    ) -> Result<(), Nfsstat4> {
        if self.delegs.is_empty() {
            return Ok(());
        }
        let me = clientid.unwrap_or(0);
        let conflicts = self.delegs.conflicts(now, me, file, write);
        if conflicts.is_empty() {
            return Ok(());
        }
        let mut live = false;
        for o in conflicts {
            let Some(holder) = self.delegs.get(&o).map(|d| d.clientid) else {
                continue; // expired with an earlier holder in this loop
            };
            let courtesy = self.clients.get(holder).map_or(true, |r| {
                r.courtesy_since.is_some() || r.lease_expired(now, self.cfg.lease)
            });
            if courtesy {
                self.expire(holder);
            } else {
                live = true;
            }
        }
        if !live {
            return Ok(());
        }
        self.queue_recalls(now);
        Err(Nfsstat4::DELAY)
    }

    /// DELEGRETURN (§18.6).
    pub fn delegreturn(
        &mut self,
        clientid: ClientId4,
        stateid: &Stateid4,
        file: &[u8],
    ) -> Result<(), Nfsstat4> {
        self.delegs.delegreturn(clientid, stateid, file)
    }

    /// A delegation stateid used for I/O: the holder's own; a read delegation's for READ
    /// only (NFS4ERR_OPENMODE for a write), a write delegation's for both.
    pub(crate) fn check_deleg_io(
        &self,
        clientid: ClientId4,
        stateid: &Stateid4,
        file: &[u8],
        write: bool,
    ) -> Result<IoState, Nfsstat4> {
        let d = self.delegs.check(clientid, stateid, Some(file))?;
        if write && d.kind() == Kind::Read {
            return Err(Nfsstat4::OPENMODE);
        }
        Ok(IoState::Deleg(stateid.other))
    }

    /// A GETATTR of `clientid` (`None`: no client) on `file` that asks for the size or the
    /// change attribute (§10.4.3; [`crate::delegations::table`]: CB_GETATTR): the server's own attributes, the
    /// write delegation holder's view from a fresh CB_GETATTR answer, or NFS4ERR_DELAY while
    /// one is asked for (queued here) or the delegation is recalled.
    pub fn deleg_getattr(
        &mut self,
        now: Instant,
        clientid: Option<ClientId4>,
        file: &[u8],
    ) -> Result<GetattrView, Nfsstat4> {
        if self.delegs.is_empty() {
            return Ok(GetattrView::Server);
        }
        match self.delegs.getattr_view(now, clientid.unwrap_or(0), file) {
            GetattrView::Delay => {
                self.queue_getattrs(now);
                self.queue_recalls(now);
                Err(Nfsstat4::DELAY)
            }
            v => Ok(v),
        }
    }

    /// Queues the CB_GETATTRs another client's GETATTR wants, on a session of the holder;
    /// one that cannot be queued recalls the delegation.
    fn queue_getattrs(&mut self, now: Instant) {
        let mut recalled = false;
        for (holder, file, other) in self.delegs.getattrs_to_queue() {
            let token = match self.callback_session(holder, false) {
                Some(sid) => {
                    let op = CbArgop4::Getattr(CbGetattrArgs {
                        fh: NfsFh4(file),
                        attr_request: Bitmap4::from_bits(&[num::CHANGE, num::SIZE]),
                    });
                    self.queue_callback(&sid, vec![op]).ok().map(|t| (sid, t))
                }
                None => None,
            };
            recalled |= token.is_none();
            self.delegs.getattr_queued(now, &other, token);
        }
        if recalled {
            self.queue_recalls(now);
        }
    }

    /// OPEN with CLAIM_DELEGATE_CUR / CLAIM_DELEG_CUR_FH (§18.16.3): the delegation must be
    /// the caller's, of this file, and not revoked.
    pub fn check_delegate_cur(
        &self,
        clientid: ClientId4,
        stateid: &Stateid4,
        file: &[u8],
    ) -> Result<(), Nfsstat4> {
        self.delegs.check(clientid, stateid, Some(file)).map(|_| ())
    }

    /// Queues a CB_RECALL for every recall that has none on its way, on a session of the
    /// holder whose back channel works; with none, the recall's clock starts now.
    pub(crate) fn queue_recalls(&mut self, now: Instant) {
        for (stateid, holder, file) in self.delegs.to_queue() {
            let token = match self.callback_session(holder, false) {
                Some(sid) => {
                    let recall = CbArgop4::Recall(CbRecallArgs {
                        stateid,
                        truncate: false,
                        fh: NfsFh4(file),
                    });
                    self.queue_callback(&sid, vec![recall])
                        .ok()
                        .map(|t| (sid, t))
                }
                None => None,
            };
            self.delegs.recall_queued(now, &stateid.other, token);
        }
    }

    /// The callbacks `done` of session `sid` as recall and CB_GETATTR answers.
    pub(crate) fn recalls_done(&mut self, now: Instant, sid: &SessionId4, done: &[CbDone]) {
        let mut recall = false;
        for d in done {
            let seen = match &d.result {
                Ok(res) => match res.results.get(1) {
                    Some(CbResop4::Getattr(Res4::Ok(f))) => cb_getattr_values(f),
                    _ => None,
                },
                Err(_) => None,
            };
            if self.delegs.getattr_answered(now, sid, d.token, seen) {
                recall |= seen.is_none();
                continue;
            }
            let answer = match &d.result {
                Ok(res) => match res.results.get(1) {
                    Some(CbResop4::Recall(Nfsstat4::OK)) => RecallAnswer::Ok,
                    Some(CbResop4::Recall(Nfsstat4::DELAY)) => RecallAnswer::Delay,
                    // The CB_RECALL overtook the OPEN reply that granted the delegation: the
                    // client does not know it yet (Linux answers BADHANDLE). Sent again at
                    // the next tick under the same clock, as knfsd retries it ([`crate::delegations::table`]).
                    Some(CbResop4::Recall(Nfsstat4::BADHANDLE | Nfsstat4::BAD_STATEID)) => {
                        RecallAnswer::Delay
                    }
                    _ => RecallAnswer::Refused,
                },
                Err(Nfsstat4::DELAY) => RecallAnswer::Delay,
                Err(_) => RecallAnswer::Lost,
            };
            self.delegs.recall_answered(now, sid, d.token, answer);
        }
        if recall {
            self.queue_recalls(now);
        }
    }

    /// Applies the delegation clock at `now`: revocations, recalls stranded on a session that
    /// cannot deliver them, and recalls to queue again.
    pub(crate) fn tick_delegations(&mut self, now: Instant) {
        self.delegs.tick(now, self.cfg.lease);
        self.unstrand_recalls();
        if self.delegs.has_unqueued_recall() {
            self.queue_recalls(now);
        }
    }

    /// Takes back the CB_RECALLs queued on a session that will not deliver them, so that the
    /// next [`State4::queue_recalls`] sends them on one that will: the session was destroyed
    /// (the client reset it, DESTROY_SESSION then CREATE_SESSION, with a recall on its way or
    /// waiting: its answer can no longer come), or its back channel is down with the recall
    /// still in its queue. Without this the recall stayed with the dead session, the holder was
    /// never asked again on its new session or new back channel, and the conflicting client
    /// waited a whole lease for the revocation. A recall on the wire on a live session is left
    /// to its outcome (an unanswered one comes back Lost, and is queued again then).
    fn unstrand_recalls(&mut self) {
        for (other, sid, token) in self.delegs.queued_recalls() {
            let stranded = match self.sessions.get_mut(&sid) {
                None => true,
                Some(s) => s.cb.is_down() && !s.cb.in_flight(token) && s.cb.unqueue(token),
            };
            if stranded {
                self.delegs.recall_stranded(&other);
            }
        }
    }

    /// A session of `clientid` with a back channel that is up (`proven`), or at least not
    /// known to be down (a recall may wait for a probe); the lowest id first (deterministic).
    fn callback_session(&self, clientid: ClientId4, proven: bool) -> Option<SessionId4> {
        let mut ids: Vec<SessionId4> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.clientid == clientid && s.back_conn().is_some())
            .filter(|(_, s)| match proven {
                true => s.cb.path() == PathState::Up,
                false => !s.cb.is_down(),
            })
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids.first().copied()
    }
}

/// The size and change of a CB_GETATTR answer (§20.1.2); `None` when either is missing or
/// the values do not decode (the holder's answer is then no use: its delegation is recalled).
pub fn cb_getattr_values(f: &sluice_xdr::nfs4::Fattr4) -> Option<SizeChange> {
    let v = AttrValues::decode(f).ok()?.values;
    Some(SizeChange {
        size: v.size?,
        change: v.change?,
    })
}
