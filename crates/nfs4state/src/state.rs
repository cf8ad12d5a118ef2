//! [`State4`]: the server's NFSv4.1 state in one place (clients, sessions, opens), with the
//! entry points the COMPOUND processor calls, one per op or per op family, and the lease clock.
//!
//! # Leases and courtesy clients (RFC 8881 §8.3, knfsd's "courtesy clients")
//! A client's lease is renewed by every SEQUENCE (and by EXCHANGE_ID / CREATE_SESSION). When
//! it runs out, [`State4::tick`] does one of two things:
//! ```text
//!   lease expired ─┬─ unconfirmed, or no sessions and no opens ──▶ expired: record removed
//!                  └─ has sessions or opens ──▶ courtesy client: everything kept, until
//!                        • it sends SEQUENCE again      ──▶ an ordinary client again
//!                        • someone's OPEN or LOCK conflicts ─▶ expired at once, it proceeds
//!                        • a table needs its room       ──▶ expired (oldest courtesy first):
//!                          client records, open and lock stateids, locked ranges,
//!                          the reply-cache budget
//!                        • courtesy_max (24 h) passes   ──▶ expired
//! ```
//! knfsd answers the conflicting OPEN with NFS4ERR_DELAY while its laundromat thread expires
//! the courtesy client in the background; with the state in one pure core the expiry is
//! synchronous and the OPEN just succeeds.
//!
//! # Limits (a bound on every table the wire grows)
//! NFS4ERR_RESOURCE is a 4.0 error that a 4.1 server does not return (RFC 8881's op-error
//! table, §15.2, lists it for no 4.1 op); knfsd answers NFS4ERR_DELAY (its `nfserr_jukebox`)
//! when a state allocation fails, and so do we where waiting can help. Before refusing, a full table takes back what nobody is using:
//!
//! | table | bound (default, why: [`Config4`]) | reclaimed first | then |
//! |---|---|---|---|
//! | client records (EXCHANGE_ID) | `clients_max` (1024) | oldest courtesy client, then the oldest unconfirmed record | DELAY |
//! | sessions of one client | `sessions_per_client_max` (8) | nothing (they are the client's own) | NOSPC: waiting frees nothing, DESTROY_SESSION does |
//! | reply cache over all sessions | `reply_cache_bytes_max` (64 MiB) | courtesy clients' sessions | fewer slots, then DELAY |
//! | open stateids of one client / overall | `opens_per_client_max` (4096) / `opens_max` (65536) | courtesy clients' opens | DELAY |
//! | delegations of one client / overall | `delegs` (`DelegConfig`: 1024 / 16384) | nothing (a revoked one goes at FREE_STATEID or expiry) | OPEN grants none (WND4_RESOURCE) |
//!
//! Open owners have no table of their own (an open stateid is per client, owner and file)
//! and CLOSE frees its stateid at once, so both are inside the open bounds; so are parked
//! files ([`crate::recovery::parked`], one per open file). A back channel queues at most
//! [`crate::callback::QUEUED_MAX`] calls. Unconfirmed and state-less records also expire with their
//! lease ([`State4::tick`]).

use crate::callback::{CbDone, CbOutcome, CbSend, PathState};
use crate::clients::{ClientTable, CreateSessionStep, ExchangeOutcome};
use crate::config::Config4;
use crate::delegations::table::DelegTable;
use crate::ids::{ConnId, Entropy, Principal};
use crate::locks::stateids::LockStates;
use crate::offload::{CopyEnd, CopyTable, COPIES_MAX, COPIES_PER_CLIENT_MAX};
use crate::opens::Other;
use crate::opens::{IoState, OpenTable, Share};
use crate::recovery::grace::{Grace, GraceEnd};
use crate::sessions::slots::SlotDecision;
use crate::sessions::{negotiate_back, negotiate_fore, SequenceCall, Session};
use bytes::Bytes;
use sluice_xdr::nfs4::callback::{CbArgop4, CbOffloadArgs, OffloadInfo4};
use sluice_xdr::nfs4::ops::{
    CallbackSecParms4, ChannelAttrs4, CreateSessionArgs, CreateSessionResOk, ExchangeIdArgs,
    ExchangeIdResOk, ImplIdList, SequenceResOk, ServerOwner4, StateProtect4R,
    CREATE_SESSION4_FLAG_CONN_BACK_CHAN, CREATE_SESSION4_FLAG_CONN_RDMA,
    CREATE_SESSION4_FLAG_PERSIST, SEQ4_STATUS_CB_PATH_DOWN, SEQ4_STATUS_RECALLABLE_STATE_REVOKED,
};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{ClientId4, Opaque4, SessionId4, Stateid4};
use std::collections::HashMap;
use std::time::Instant;

/// The flags a CREATE_SESSION may carry (§18.36.3); others are NFS4ERR_INVAL. Of these only
/// CONN_BACK_CHAN is granted: sessions are not persistent and there is no RDMA.
const CREATE_SESSION_FLAGS_ARGS: u32 = CREATE_SESSION4_FLAG_PERSIST
    | CREATE_SESSION4_FLAG_CONN_BACK_CHAN
    | CREATE_SESSION4_FLAG_CONN_RDMA;

/// A SEQUENCE that passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceOutcome {
    /// Execute the rest of the COMPOUND, or send the cached reply.
    pub decision: SlotDecision,
    /// SEQUENCE's result (for a new request; a replay sends the cached bytes instead).
    pub res: SequenceResOk,
    /// The client the COMPOUND acts for.
    pub clientid: ClientId4,
}

/// All NFSv4.1 state of one server instance.
pub struct State4 {
    pub(crate) cfg: Config4,
    pub(crate) clients: ClientTable,
    pub(crate) sessions: HashMap<SessionId4, Session>,
    pub(crate) opens: OpenTable,
    /// Lock stateids and byte-range locks ([`crate::locks`]).
    pub(crate) locks: LockStates,
    /// Delegations ([`crate::delegations::table`], entry points in [`crate::delegations`]).
    pub(crate) delegs: DelegTable,
    /// Asynchronous COPYs and their copy stateids ([`crate::offload`]).
    pub(crate) copies: CopyTable,
    pub(crate) entropy: Box<dyn Entropy + Send>,
    pub(crate) next_session: u32,
    /// Told when a back channel may have calls to make (see [`State4::set_callback_waker`]).
    pub(crate) callback_waker: Option<Box<dyn Fn() + Send>>,
    /// Grace period and stable client records ([`crate::recovery`]).
    pub(crate) recovery: Recovery,
}

impl State4 {
    pub fn new(cfg: Config4, entropy: Box<dyn Entropy + Send>) -> Self {
        Self {
            clients: ClientTable::new(cfg.boot_epoch, cfg.clients_max),
            opens: OpenTable::new(cfg.boot_epoch, cfg.opens_per_client_max, cfg.opens_max),
            locks: LockStates::new(cfg.boot_epoch, cfg.locks_per_client_max, cfg.locks_max),
            delegs: DelegTable::new(cfg.boot_epoch, cfg.delegs),
            copies: CopyTable::new(cfg.boot_epoch, COPIES_PER_CLIENT_MAX, COPIES_MAX),
            sessions: HashMap::new(),
            entropy,
            next_session: 1,
            callback_waker: None,
            recovery: Recovery::default(),
            cfg,
        }
    }

    // ----- client records ------------------------------------------------------------------

    /// EXCHANGE_ID (§18.35): see [`ClientTable::exchange_id`] for the cases.
    pub fn exchange_id(
        &mut self,
        now: Instant,
        args: &ExchangeIdArgs,
        principal: &Principal,
    ) -> Result<ExchangeIdResOk, Nfsstat4> {
        let (sessions, opens) = (&self.sessions, &self.opens);
        let has_state =
            |c: ClientId4| opens.count_for(c) > 0 || sessions.values().any(|s| s.clientid == c);
        let out: ExchangeOutcome = self.clients.exchange_id(now, args, principal, has_state)?;
        for c in &out.removed {
            self.forget_client_state(*c);
        }
        Ok(ExchangeIdResOk {
            clientid: out.clientid,
            sequenceid: out.sequenceid,
            flags: out.flags,
            state_protect: StateProtect4R::None,
            server_owner: ServerOwner4 {
                minor_id: 0,
                major_id: Opaque4(self.cfg.server_owner.clone()),
            },
            server_scope: Opaque4(self.cfg.server_scope.clone()),
            server_impl_id: ImplIdList(Vec::new()),
        })
    }

    /// CREATE_SESSION (§18.36): the record's sequence slot, channel negotiation, the session
    /// bound to `conn`, and confirmation of the record.
    pub fn create_session(
        &mut self,
        now: Instant,
        args: &CreateSessionArgs,
        principal: &Principal,
        conn: ConnId,
    ) -> Result<CreateSessionResOk, Nfsstat4> {
        let clientid = args.clientid;
        match self
            .clients
            .create_session_begin(clientid, args.sequence, principal)?
        {
            CreateSessionStep::Replay(r) => return r,
            CreateSessionStep::Proceed => {}
        }
        let result = self.new_session_result(args);
        if let Some(old) = self
            .clients
            .create_session_done(now, clientid, args.sequence, &result)
        {
            self.forget_client_state(old);
        }
        if let Ok(r) = &result {
            self.clients.renew(clientid, now);
            let s = Session::new(
                r.sessionid,
                clientid,
                r.fore_chan_attrs.clone(),
                r.back_chan_attrs.clone(),
                r.flags,
                args.cb_program,
                &args.sec_parms.0,
                conn,
            );
            self.sessions.insert(r.sessionid, s);
            if r.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0 {
                self.wake_callbacks();
            }
        }
        result
    }

    /// DESTROY_CLIENTID (§18.50): NFS4ERR_CLIENTID_BUSY while the client has sessions or opens.
    pub fn destroy_clientid(&mut self, clientid: ClientId4) -> Result<(), Nfsstat4> {
        self.clients.get(clientid)?;
        let busy = self.opens.count_for(clientid) > 0
            || self.locks.count_for(clientid) > 0
            || self.delegs.live_for(clientid) > 0
            || self.sessions.values().any(|s| s.clientid == clientid);
        if busy {
            return Err(Nfsstat4::CLIENTID_BUSY);
        }
        self.note_gone(clientid);
        self.clients.remove(clientid);
        self.delegs.remove_client(clientid); // revoked records it never freed
        self.copies.remove_client(clientid);
        Ok(())
    }

    /// RECLAIM_COMPLETE (§18.51): the client reclaims no more (its later reclaims are
    /// NFS4ERR_NO_GRACE) and grace stops waiting for it, which may end grace early
    /// ([`crate::recovery`]); a second one is NFS4ERR_COMPLETE_ALREADY. `one_fs`
    /// (rca_one_fs) completions are accepted and change nothing, as knfsd does.
    pub fn reclaim_complete(
        &mut self,
        now: Instant,
        clientid: ClientId4,
        one_fs: bool,
    ) -> Result<(), Nfsstat4> {
        let rec = self.clients.get(clientid)?;
        if one_fs {
            return Ok(());
        }
        if rec.reclaim_complete {
            return Err(Nfsstat4::COMPLETE_ALREADY);
        }
        self.grace_reclaim_complete(now, clientid)?;
        self.clients.get_mut(clientid)?.reclaim_complete = true;
        Ok(())
    }

    // ----- sessions ------------------------------------------------------------------------

    /// SEQUENCE (§18.46): finds the session (NFS4ERR_BADSESSION), runs the session's checks
    /// and the slot rules, and renews the client's lease.
    ///
    /// `sr_status_flags` (§18.46.3) carries only what this state knows to be true:
    /// CB_PATH_DOWN (no session of the client can be called back), CB_PATH_DOWN_SESSION and
    /// BACKCHANNEL_FAULT (this session's back channel; see [`crate::callback`]), and
    /// RECALLABLE_STATE_REVOKED while the client has revoked delegations it has not freed
    /// ([`crate::delegations::table`]). The others cannot arise yet, and are never set: an expired client loses
    /// its record, sessions and opens together, so its next SEQUENCE is NFS4ERR_BADSESSION
    /// rather than a session with EXPIRED_ALL/SOME_STATE_REVOKED; a courtesy client that
    /// comes back has lost nothing; there is no administrative revocation, no persistent
    /// sessions (so after a restart the client learns of it from BADSESSION and
    /// STALE_CLIENTID, never RESTART_RECLAIM_NEEDED), no migration (LEASE_MOVED), no
    /// RPCSEC_GSS (CB_GSS_CONTEXTS_*) and no pNFS devices (DEVID_*).
    pub fn sequence(
        &mut self,
        now: Instant,
        sessionid: &SessionId4,
        call: &SequenceCall,
    ) -> Result<SequenceOutcome, Nfsstat4> {
        let s = self
            .sessions
            .get_mut(sessionid)
            .ok_or(Nfsstat4::BADSESSION)?;
        let mut ok = s.sequence(call)?;
        let clientid = s.clientid;
        if s.take_callbacks_due() {
            self.wake_callbacks();
        }
        self.clients.renew(clientid, now);
        if self.client_cb_path_down(clientid) {
            ok.status_flags |= SEQ4_STATUS_CB_PATH_DOWN;
        }
        if self.delegs.has_revoked(clientid) {
            ok.status_flags |= SEQ4_STATUS_RECALLABLE_STATE_REVOKED;
        }
        Ok(SequenceOutcome {
            decision: ok.decision,
            res: SequenceResOk {
                sessionid: *sessionid,
                sequenceid: call.sequenceid,
                slotid: call.slotid,
                highest_slotid: ok.highest_slotid,
                target_highest_slotid: ok.target_highest_slotid,
                status_flags: ok.status_flags,
            },
            clientid,
        })
    }

    /// Ends the request a SEQUENCE began (`reply`: the whole encoded COMPOUND reply, kept if
    /// the request asked for caching). Every [`SlotDecision::Execute`] must end here.
    pub fn complete(&mut self, sessionid: &SessionId4, slotid: u32, reply: Option<Bytes>) {
        if let Some(s) = self.sessions.get_mut(sessionid) {
            s.complete(slotid, reply);
        }
    }

    /// BIND_CONN_TO_SESSION's state part (§18.34): the direction granted (CDFS4_*).
    pub fn bind_conn_to_session(
        &mut self,
        sessionid: &SessionId4,
        conn: ConnId,
        dir_from_client: u32,
    ) -> Result<u32, Nfsstat4> {
        let s = self
            .sessions
            .get_mut(sessionid)
            .ok_or(Nfsstat4::BADSESSION)?;
        let dir = s.bind_conn(conn, dir_from_client)?;
        self.wake_callbacks();
        Ok(dir)
    }

    /// BACKCHANNEL_CTL's state part (§18.33): the session's callback program and credentials
    /// change, and its back channel is probed again. The RFC asks for NFS4ERR_INVAL when no
    /// flavor on the list is usable; knfsd accepts the list and then finds no path, and so do
    /// we (SEQUENCE then reports CB_PATH_DOWN_SESSION), which the client can act on.
    pub fn backchannel_ctl(
        &mut self,
        sessionid: &SessionId4,
        program: u32,
        sec_parms: &[CallbackSecParms4],
    ) -> Result<(), Nfsstat4> {
        let s = self
            .sessions
            .get_mut(sessionid)
            .ok_or(Nfsstat4::BADSESSION)?;
        s.backchannel_ctl(program, sec_parms);
        self.wake_callbacks();
        Ok(())
    }

    // ----- callbacks -----------------------------------------------------------------------

    /// Names the function the callback driver wants called when a back channel may have
    /// calls to make (a session was given a back channel, a path is to be probed, a
    /// CB_COMPOUND was queued). It must not block: it is called under the state's lock.
    pub fn set_callback_waker(&mut self, waker: Box<dyn Fn() + Send>) {
        self.callback_waker = Some(waker);
    }

    /// The callbacks to make now, each over its session's newest back-channel connection
    /// (see [`crate::callback::SessionCallbacks::poll`]); the driver sends them at `now`, which
    /// starts a recall's clock ([`crate::delegations::table`]).
    pub fn poll_callbacks(&mut self, now: Instant) -> Vec<(SessionId4, CbSend)> {
        let mut ids: Vec<SessionId4> = self.sessions.keys().copied().collect();
        ids.sort_unstable(); // a deterministic order for tests and simulations
        let mut out = Vec::new();
        for id in ids {
            let Some(s) = self.sessions.get_mut(&id) else {
                continue;
            };
            let Some(conn) = s.back_conn() else {
                continue;
            };
            out.extend(s.cb.poll(conn).into_iter().map(|c| (id, c)));
        }
        for (id, send) in &out {
            self.delegs.recall_sent(now, id, send.token);
        }
        out
    }

    /// The outcome of callback `token` of session `sessionid`; what finished of the queued
    /// CB_COMPOUNDs. A session gone meanwhile is no error: its callbacks are moot.
    pub fn handle_callback(
        &mut self,
        now: Instant,
        sessionid: &SessionId4,
        token: u64,
        outcome: CbOutcome,
    ) -> Vec<CbDone> {
        let done = match self.sessions.get_mut(sessionid) {
            Some(s) => s.cb.handle_reply(token, outcome),
            None => Vec::new(),
        };
        self.recalls_done(now, sessionid, &done);
        for d in &done {
            // A CB_OFFLOAD the client answered ends its copy stateid ([`crate::offload`]).
            self.copies
                .callback_done(sessionid, d.token, d.result.is_ok());
        }
        done
    }

    /// Queues a CB_COMPOUND for session `sessionid` (CB_SEQUENCE is added in front); its token
    /// comes back in a [`CbDone`] from [`State4::handle_callback`].
    pub fn queue_callback(
        &mut self,
        sessionid: &SessionId4,
        ops: Vec<CbArgop4>,
    ) -> Result<u64, Nfsstat4> {
        let s = self
            .sessions
            .get_mut(sessionid)
            .ok_or(Nfsstat4::BADSESSION)?;
        if s.back_conn().is_none() {
            return Err(Nfsstat4::CB_PATH_DOWN);
        }
        let token = s.cb.queue(ops)?;
        self.wake_callbacks();
        Ok(token)
    }

    /// Where session `sessionid`'s back channel stands.
    pub fn callback_path(&self, sessionid: &SessionId4) -> Option<PathState> {
        self.sessions.get(sessionid).map(|s| s.cb.path())
    }

    /// SEQ4_STATUS_CB_PATH_DOWN (§18.46.3): the client asked for callbacks on some session and
    /// none of its sessions has a path that works (one that is still being probed counts as
    /// working, so the flag does not flicker while a new path is tested).
    fn client_cb_path_down(&self, clientid: ClientId4) -> bool {
        let mut wanted = false;
        for s in self.sessions.values().filter(|s| s.clientid == clientid) {
            if s.cb_path_down() {
                wanted = true;
            } else if s.back_conn().is_some() {
                return false;
            }
        }
        wanted
    }

    fn wake_callbacks(&self) {
        if let Some(w) = &self.callback_waker {
            w();
        }
    }

    /// DESTROY_SESSION (§18.37). `own` is the (session, slot) of the COMPOUND's SEQUENCE, if
    /// any: that request is allowed to be in progress; any other is NFS4ERR_DELAY.
    pub fn destroy_session(
        &mut self,
        sessionid: &SessionId4,
        own: Option<(SessionId4, u32)>,
    ) -> Result<(), Nfsstat4> {
        let s = self.sessions.get(sessionid).ok_or(Nfsstat4::BADSESSION)?;
        let own_slot = own.filter(|(id, _)| id == sessionid).map(|(_, slot)| slot);
        if s.busy_except(own_slot) {
            return Err(Nfsstat4::DELAY);
        }
        self.sessions.remove(sessionid);
        Ok(())
    }

    /// The driver saw a connection close: it is unbound from every session; a session that
    /// loses its back channel this way probes the next one, or reports its path down.
    pub fn conn_closed(&mut self, conn: ConnId) {
        for s in self.sessions.values_mut() {
            s.conn_closed(conn);
        }
        self.wake_callbacks();
    }

    pub fn session(&self, sessionid: &SessionId4) -> Option<&Session> {
        self.sessions.get(sessionid)
    }

    pub fn session_mut(&mut self, sessionid: &SessionId4) -> Option<&mut Session> {
        self.sessions.get_mut(sessionid)
    }

    // ----- open state ----------------------------------------------------------------------

    /// OPEN's state part (§18.16): NFS4ERR_GRACE before the client's RECLAIM_COMPLETE and in
    /// grace (reclaims are [`State4::reclaim_open`]; [`State4::check_new_state`]), share checks (conflicting courtesy clients are expired),
    /// then a new or upgraded open stateid.
    pub fn open(
        &mut self,
        now: Instant,
        clientid: ClientId4,
        owner: &[u8],
        file: &[u8],
        share_access: u32,
        share_deny: u32,
    ) -> Result<Stateid4, Nfsstat4> {
        self.check_new_state(clientid)?;
        self.open_share(now, clientid, owner, file, share_access, share_deny)
    }

    /// The share reservation of an OPEN or of its reclaim.
    pub(crate) fn open_share(
        &mut self,
        now: Instant,
        clientid: ClientId4,
        owner: &[u8],
        file: &[u8],
        share_access: u32,
        share_deny: u32,
    ) -> Result<Stateid4, Nfsstat4> {
        let share = Share::parse(share_access, share_deny)?;
        self.clients.get(clientid)?;
        let conflicts = self.opens.conflicts(clientid, owner, file, share);
        // A conflict with the caller's own other open owner is never resolved by expiry.
        let courtesy = |c: &ClientId4| {
            *c != clientid
                && self.clients.get(*c).is_ok_and(|r| {
                    r.courtesy_since.is_some() || r.lease_expired(now, self.cfg.lease)
                })
        };
        if !conflicts.iter().all(courtesy) {
            return Err(Nfsstat4::SHARE_DENIED);
        }
        for c in conflicts {
            self.expire(c);
        }
        loop {
            match self
                .opens
                .open(clientid, owner, file, share, self.entropy.as_mut())
            {
                // The table is full: courtesy clients give up their room first.
                Err(Nfsstat4::DELAY) if self.expire_oldest_courtesy(clientid) => {}
                r => return r,
            }
        }
    }

    /// OPEN_DOWNGRADE (§18.18).
    pub fn open_downgrade(
        &mut self,
        clientid: ClientId4,
        stateid: &Stateid4,
        file: &[u8],
        share_access: u32,
        share_deny: u32,
    ) -> Result<Stateid4, Nfsstat4> {
        let share = Share::parse(share_access, share_deny)?;
        self.opens.downgrade(clientid, stateid, file, share)
    }

    /// CLOSE (§18.2): the open's lock stateids and locks go with it (see [`crate::locks::stateids`]).
    pub fn close(
        &mut self,
        clientid: ClientId4,
        stateid: &Stateid4,
        file: &[u8],
    ) -> Result<Stateid4, Nfsstat4> {
        let out = self.opens.close(clientid, stateid, file)?;
        self.locks.remove_open(&stateid.other);
        Ok(out)
    }

    /// The stateid check of READ / WRITE / SETATTR(size) (see [`OpenTable::check_io`]).
    pub fn check_io(
        &self,
        clientid: ClientId4,
        stateid: &Stateid4,
        file: &[u8],
        write: bool,
    ) -> Result<IoState, Nfsstat4> {
        // I/O under a special stateid bypasses (or, for READ bypass, ignores) share
        // reservations a reclaim may yet re-establish: refused in grace ([`crate::recovery`]).
        if *stateid == Stateid4::ANONYMOUS || *stateid == Stateid4::READ_BYPASS {
            self.check_grace_new_state()?;
        }
        if self.locks.knows(&stateid.other) {
            return self.check_lock_io(clientid, stateid, file, write);
        }
        if self.delegs.knows(&stateid.other) {
            return self.check_deleg_io(clientid, stateid, file, write);
        }
        self.opens.check_io(clientid, stateid, file, write)
    }

    /// TEST_STATEID (§18.48): one status per stateid.
    pub fn test_stateids(&self, clientid: ClientId4, stateids: &[Stateid4]) -> Vec<Nfsstat4> {
        stateids
            .iter()
            .map(|s| {
                if self.copies.knows(&s.other) {
                    self.copies.test(clientid, s)
                } else if self.locks.knows(&s.other) {
                    self.locks.test(clientid, s)
                } else if self.delegs.knows(&s.other) {
                    self.delegs.test(clientid, s)
                } else {
                    self.opens.test(clientid, s)
                }
            })
            .collect()
    }

    /// FREE_STATEID (§18.38).
    pub fn free_stateid(&mut self, clientid: ClientId4, stateid: &Stateid4) -> Nfsstat4 {
        if self.copies.knows(&stateid.other) {
            return self.copies.free(clientid, stateid);
        }
        if self.locks.knows(&stateid.other) {
            return self.locks.free(clientid, stateid);
        }
        if self.delegs.knows(&stateid.other) {
            return self.delegs.free(clientid, stateid);
        }
        self.opens.free(clientid, stateid)
    }

    // ----- asynchronous copies ([`crate::offload`]) ----------------------------------------------

    /// A new asynchronous COPY of `clientid` over `sessionid`, `copied` bytes into it: its copy
    /// stateid, or the error that makes the COPY synchronous instead (NFS4ERR_DELAY: the copy
    /// table is full; CB_PATH_DOWN).
    ///
    /// CB_OFFLOAD goes over the session's back channel, so the session must have a back
    /// connection bound and a path not known to fail: Up, or not yet proven (Unknown, Probing).
    /// A freshly mounted Linux client's first COPY arrives while the probe (CB_NULL, then a
    /// CB_SEQUENCE that waits for the client's first SEQUENCE) is still out, and requiring Up
    /// made that COPY synchronous more often than not. The CB_OFFLOAD is queued behind the
    /// probe and sent once it succeeds. Should the path fail instead, the session reports
    /// CB_PATH_DOWN in its SEQUENCE flags (the client's cue to bind a new back channel), and a
    /// CB_OFFLOAD that could not be delivered leaves the copy's stateid answerable by
    /// OFFLOAD_STATUS, as after any failed callback: the same exposure a path that was Up at
    /// the COPY and failed during the copy already had.
    pub fn start_copy(
        &mut self,
        clientid: ClientId4,
        sessionid: &SessionId4,
        dst: Bytes,
        copied: u64,
    ) -> Result<Stateid4, Nfsstat4> {
        match self.sessions.get(sessionid) {
            Some(s) if s.clientid == clientid && s.back_conn().is_some() => {}
            _ => return Err(Nfsstat4::CB_PATH_DOWN),
        }
        match self.callback_path(sessionid) {
            Some(PathState::Up | PathState::Probing | PathState::Unknown) => {}
            _ => return Err(Nfsstat4::CB_PATH_DOWN),
        }
        self.copies
            .start(clientid, *sessionid, dst, copied, &mut *self.entropy)
    }

    /// The copy driver copied `copied` bytes of copy `other` in all: `false` when the copy is
    /// gone (OFFLOAD_CANCEL, its client expired) and the driver is to stop.
    pub fn copy_progress(&mut self, other: &Other, copied: u64) -> bool {
        self.copies.progress(other, copied)
    }

    /// Copy `other` ended: CB_OFFLOAD (RFC 7862 §16.1) with `end` goes to the client, on the
    /// COPY's session or, if that one is gone or has no back channel, another of the
    /// client's. `verifier` is the destination's write verifier (the data is UNSTABLE, as a
    /// synchronous COPY's). Whether it was queued (a cancelled copy sends nothing).
    pub fn finish_copy(&mut self, other: &Other, end: CopyEnd, verifier: [u8; 8]) -> bool {
        let Some(c) = self.copies.finish(other, end) else {
            return false;
        };
        let info = if end.status == Nfsstat4::OK {
            OffloadInfo4::Ok(sluice_xdr::nfs4::ops::WriteResponse4 {
                callback_id: sluice_xdr::nfs4::ops::StateidOpt(Vec::new()),
                count: end.copied,
                committed: sluice_xdr::nfs4::StableHow4::UNSTABLE,
                writeverf: verifier,
            })
        } else {
            OffloadInfo4::Err(end.status, end.copied)
        };
        let args = CbOffloadArgs {
            fh: sluice_xdr::nfs4::NfsFh4(c.dst.clone()),
            stateid: Stateid4 {
                seqid: 1,
                other: *other,
            },
            offload_info: info,
        };
        let clientid = c.clientid;
        let mut sessions = vec![c.session];
        let mut others: Vec<SessionId4> = self
            .sessions
            .iter()
            .filter(|(id, s)| s.clientid == clientid && **id != sessions[0])
            .map(|(id, _)| *id)
            .collect();
        others.sort_unstable();
        sessions.extend(others);
        for sid in sessions {
            let op = CbArgop4::Offload(args.clone());
            if let Ok(token) = self.queue_callback(&sid, vec![op]) {
                self.copies.callback_queued(other, sid, token);
                return true;
            }
        }
        false
    }

    /// OFFLOAD_STATUS (RFC 7862 §15.9): bytes copied, and the status once done.
    pub fn offload_status(
        &self,
        clientid: ClientId4,
        stateid: &Stateid4,
    ) -> Result<(u64, Option<Nfsstat4>), Nfsstat4> {
        self.copies.status(clientid, stateid)
    }

    /// OFFLOAD_CANCEL (RFC 7862 §15.8).
    pub fn offload_cancel(
        &mut self,
        clientid: ClientId4,
        stateid: &Stateid4,
    ) -> Result<(), Nfsstat4> {
        self.copies.cancel(clientid, stateid)
    }

    /// Asynchronous copies known (running or waiting for their CB_OFFLOAD's answer).
    pub fn copies_len(&self) -> usize {
        self.copies.len()
    }

    // ----- leases --------------------------------------------------------------------------

    /// Applies the lease rules at `now` (module notes); returns the clients expired for real.
    pub fn tick(&mut self, now: Instant) -> Vec<ClientId4> {
        let (lease, courtesy_max) = (self.cfg.lease, self.cfg.courtesy_max);
        let mut expired = Vec::new();
        let (sessions, opens) = (&self.sessions, &self.opens);
        for r in self.clients.iter_mut() {
            if let Some(since) = r.courtesy_since {
                if now.saturating_duration_since(since) >= courtesy_max {
                    expired.push(r.id);
                }
            } else if r.lease_expired(now, lease) {
                let has_state =
                    opens.count_for(r.id) > 0 || sessions.values().any(|s| s.clientid == r.id);
                if r.confirmed && has_state {
                    r.courtesy_since = Some(r.renewed_at + lease);
                } else {
                    expired.push(r.id);
                }
            }
        }
        expired.sort_unstable();
        for c in &expired {
            self.expire(*c);
        }
        self.tick_delegations(now);
        expired
    }

    /// When [`State4::tick`] (or [`State4::recovery_tick`]) next has something to do.
    pub fn next_wakeup(&self) -> Option<Instant> {
        self.clients
            .iter()
            .map(|r| match r.courtesy_since {
                Some(since) => since + self.cfg.courtesy_max,
                None => r.renewed_at + self.cfg.lease,
            })
            .chain(self.recovery_wakeup())
            .chain(self.delegs.next_wakeup(self.cfg.lease))
            .min()
    }

    // ----- gauges --------------------------------------------------------------------------

    pub fn clients(&self) -> &ClientTable {
        &self.clients
    }
    pub fn sessions_len(&self) -> usize {
        self.sessions.len()
    }
    pub fn opens(&self) -> &OpenTable {
        &self.opens
    }
    pub fn delegations(&self) -> &DelegTable {
        &self.delegs
    }
    pub fn config(&self) -> &Config4 {
        &self.cfg
    }

    // ----- helpers -------------------------------------------------------------------------

    fn new_session_result(
        &mut self,
        args: &CreateSessionArgs,
    ) -> Result<CreateSessionResOk, Nfsstat4> {
        let n = self
            .sessions
            .values()
            .filter(|s| s.clientid == args.clientid)
            .count();
        if n >= self.cfg.sessions_per_client_max {
            // The client's own quota: waiting frees nothing (DELAY would have it retry for
            // ever), only its DESTROY_SESSION does. NFS4ERR_NOSPC is among CREATE_SESSION's
            // errors (RFC 8881 §15.2) for a server out of room for another session.
            return Err(Nfsstat4::NOSPC);
        }
        if args.flags & !CREATE_SESSION_FLAGS_ARGS != 0 {
            return Err(Nfsstat4::INVAL);
        }
        let mut fore = negotiate_fore(&args.fore_chan_attrs, &self.cfg.channel)?;
        let back = negotiate_back(&args.back_chan_attrs)?;
        fore.maxrequests = loop {
            match self.slots_within_budget(&fore) {
                // The budget is spent: courtesy clients' sessions give it back first.
                Err(Nfsstat4::DELAY) if self.expire_oldest_courtesy(args.clientid) => {}
                r => break r?,
            }
        };
        Ok(CreateSessionResOk {
            sessionid: self.new_session_id(args.clientid),
            sequence: args.sequence,
            flags: args.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
            fore_chan_attrs: fore,
            back_chan_attrs: back,
        })
    }

    /// The slots the reply-cache budget leaves for a session with these attributes: at most
    /// the negotiated count, NFS4ERR_DELAY if not even one fits.
    fn slots_within_budget(&self, fore: &ChannelAttrs4) -> Result<u32, Nfsstat4> {
        let reserved: usize = self.sessions.values().map(reserved_bytes).sum();
        let per_slot = (fore.maxresponsesize_cached as usize).max(1);
        let free_slots = self.cfg.reply_cache_bytes_max.saturating_sub(reserved) / per_slot;
        let slots = fore
            .maxrequests
            .min(free_slots.min(u32::MAX as usize) as u32);
        if slots == 0 {
            return Err(Nfsstat4::DELAY);
        }
        Ok(slots)
    }

    /// Bytes of reply cache reserved by live sessions.
    pub fn reply_cache_reserved_bytes(&self) -> usize {
        self.sessions.values().map(reserved_bytes).sum()
    }

    /// clientid (8) | counter (4) | random (4).
    fn new_session_id(&mut self, clientid: ClientId4) -> SessionId4 {
        loop {
            let mut id = [0u8; 16];
            id[..8].copy_from_slice(&clientid.to_be_bytes());
            id[8..12].copy_from_slice(&self.next_session.to_be_bytes());
            self.entropy.fill(&mut id[12..]);
            self.next_session = self.next_session.wrapping_add(1);
            if !self.sessions.contains_key(&id) {
                return id;
            }
        }
    }

    /// Expires the courtesy client that has been one longest (never `keep`); false if none.
    pub(crate) fn expire_oldest_courtesy(&mut self, keep: ClientId4) -> bool {
        match self.clients.oldest_courtesy(&[keep]) {
            Some(c) => {
                self.expire(c);
                true
            }
            None => false,
        }
    }

    /// Expires a client for real: record, sessions, opens (and its stable record, at the
    /// next [`State4::recovery_tick`]).
    pub(crate) fn expire(&mut self, clientid: ClientId4) {
        self.note_gone(clientid);
        self.clients.remove(clientid);
        self.forget_client_state(clientid);
    }

    /// Drops the sessions and opens of a client whose record is gone.
    fn forget_client_state(&mut self, clientid: ClientId4) {
        self.sessions.retain(|_, s| s.clientid != clientid);
        self.opens.remove_client(clientid);
        self.locks.remove_client(clientid);
        self.delegs.remove_client(clientid);
        self.copies.remove_client(clientid);
    }
}

fn reserved_bytes(s: &Session) -> usize {
    s.fore.maxrequests as usize * s.fore.maxresponsesize_cached as usize
}

impl std::fmt::Debug for State4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State4")
            .field("clients", &self.clients.len())
            .field("sessions", &self.sessions.len())
            .field("opens", &self.opens.len())
            .field("lock_stateids", &self.locks.len())
            .field("delegations", &self.delegs.len())
            .finish()
    }
}

/// Where restart recovery stands in [`State4`] (its fields, kept together; the entry points
/// that use them are [`crate::recovery`]'s).
#[derive(Debug, Default)]
pub(crate) struct Recovery {
    /// `None` until [`State4::start_grace`]: a state without restart recovery (tests, a server
    /// without a store) behaves as after a skipped grace.
    pub(crate) grace: Option<Grace>,
    /// The owners the stable store holds, as far as this instance knows.
    pub(crate) stable: std::collections::HashSet<Bytes>,
    /// Owners of clients destroyed or expired since the last tick. At most one entry per
    /// client record removed, drained every tick.
    pub(crate) gone: Vec<Bytes>,
    /// Grace ended (or was skipped) and the driver has not been told yet.
    pub(crate) ended: Option<GraceEnd>,
}

#[cfg(test)]
mod tests;
