//! Sessions (RFC 8881 §2.10): channel attribute negotiation for CREATE_SESSION (§18.36), the
//! per-session half of SEQUENCE (§18.46), connection binding (BIND_CONN_TO_SESSION §18.34,
//! and the implicit binding of §2.10.3.1), and what DESTROY_SESSION (§18.37) checks.
//!
//! # Channel limits, and why these numbers
//! The fore channel must carry a 1 MiB WRITE (the `maxwrite` we advertise, the v3 `wtmax`) and
//! return a 1 MiB READ, plus everything around the payload in the same COMPOUND: the RPC header
//! with an AUTH_SYS credential (≤ 430 bytes), SEQUENCE (~50), PUTFH (≤ 136), the WRITE/READ
//! arguments (~40) and a trailing GETATTR. 8 KiB of headroom covers those with room for a
//! client's longer compounds (OPEN with a 4 KiB name is still far below); the Linux client
//! asks for exactly "payload + a few pages". Larger limits only cost buffer memory per
//! connection. Cached replies are small by design: the reply cache exists for non-idempotent
//! ops (CREATE, REMOVE, OPEN, ...) whose replies are a few hundred bytes; READ replies are not
//! cached (the client sets `sa_cachethis` false for them). knfsd keeps ~2 KiB per slot; 4 KiB
//! leaves room for an OPEN reply with a full GETATTR.
//!
//! The back channel carries CB_SEQUENCE, CB_RECALL and friends, all small; we accept the
//! client's sizes if they can hold one such call (NFS4ERR_TOOSMALL otherwise, as knfsd does)
//! and use at most [`BACK_SLOTS_MAX`] slot.

pub mod digest;
pub mod slots;

use crate::callback::{PathState, SessionCallbacks};
use crate::ids::ConnId;
use crate::sessions::slots::{SlotDecision, SlotTable};
use sluice_xdr::nfs4::ops::{
    CallbackSecParms4, ChannelAttrs4, RdmaIrd, CDFC4_BACK, CDFC4_BACK_OR_BOTH, CDFC4_FORE,
    CDFC4_FORE_OR_BOTH, CDFS4_BACK, CDFS4_BOTH, CDFS4_FORE, CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
    SEQ4_STATUS_BACKCHANNEL_FAULT, SEQ4_STATUS_CB_PATH_DOWN_SESSION,
};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{ClientId4, SessionId4};
use std::collections::VecDeque;

/// Fore-channel limits offered in CREATE_SESSION (see the module notes for the numbers).
#[derive(Debug, Clone)]
pub struct ChannelLimits {
    /// `ca_maxrequestsize` at most. Default 1 MiB + 8 KiB.
    pub request_bytes_max: u32,
    /// `ca_maxresponsesize` at most. Default 1 MiB + 8 KiB.
    pub response_bytes_max: u32,
    /// `ca_maxresponsesize_cached` at most. Default 4 KiB.
    pub response_cached_bytes_max: u32,
    /// `ca_maxoperations` at most. Default 64: the longest compound the Linux client sends is
    /// about 10 ops; the XDR layer's own COMPOUND bound is the hard ceiling.
    pub ops_max: u32,
    /// `ca_maxrequests` at most. Default 64 slots: the Linux client's default is 64 requests in
    /// flight (sunrpc slot table); slots are allocated as used, so an idle slot costs nothing.
    pub slots_max: u32,
}

impl Default for ChannelLimits {
    fn default() -> Self {
        Self {
            request_bytes_max: (1 << 20) + 8 * 1024,
            response_bytes_max: (1 << 20) + 8 * 1024,
            response_cached_bytes_max: 4 * 1024,
            ops_max: 64,
            slots_max: 64,
        }
    }
}

/// Smallest fore-channel request a session may have: room for a COMPOUND of one SEQUENCE
/// with an empty tag, 16 XDR words (64 bytes), knfsd's `NFSD_MIN_REQ_HDR_SEQ_SZ`. Below it
/// not even SEQUENCE fits and CREATE_SESSION answers NFS4ERR_TOOSMALL; above it the session is
/// granted however small, and a COMPOUND that does not fit meets NFS4ERR_REQ_TOO_BIG (or
/// NFS4ERR_REP_TOO_BIG) on the op that crosses the line, as a client asking for 400-512 bytes
/// expects. (An earlier 1 KiB floor refused such clients a session outright.)
pub const FORE_REQUEST_BYTES_MIN: u32 = 64;
/// Smallest fore-channel reply a session may have: SEQUENCE's result with an empty tag, 16
/// XDR words (64 bytes), knfsd's `NFSD_MIN_RESP_HDR_SEQ_SZ`.
pub const FORE_RESPONSE_BYTES_MIN: u32 = 64;
/// Smallest back-channel sizes: a CB_SEQUENCE and a CB_RECALL with a 128-byte handle fit in
/// 512 bytes of call and 256 of reply (knfsd's minimums are of the same order).
pub const BACK_REQUEST_BYTES_MIN: u32 = 512;
pub const BACK_RESPONSE_BYTES_MIN: u32 = 256;
/// Back-channel slots we use: one, as knfsd; callbacks are rare and serialised per client.
pub const BACK_SLOTS_MAX: u32 = 1;
/// Connections remembered per session. A client has one or two (trunking); the bound keeps a
/// client that reconnects forever from growing the set, the oldest binding being forgotten
/// (a forgotten fore-channel connection is bound again by its next SEQUENCE).
pub const CONNS_PER_SESSION_MAX: usize = 16;

/// Negotiates the fore channel: each size is the smaller of the client's and ours (§18.36.3).
pub fn negotiate_fore(
    client: &ChannelAttrs4,
    ours: &ChannelLimits,
) -> Result<ChannelAttrs4, Nfsstat4> {
    if client.maxrequestsize < FORE_REQUEST_BYTES_MIN
        || client.maxresponsesize < FORE_RESPONSE_BYTES_MIN
        || client.maxoperations == 0
        || client.maxrequests == 0
    {
        return Err(Nfsstat4::TOOSMALL);
    }
    Ok(ChannelAttrs4 {
        headerpadsize: 0,
        maxrequestsize: client.maxrequestsize.min(ours.request_bytes_max),
        maxresponsesize: client.maxresponsesize.min(ours.response_bytes_max),
        maxresponsesize_cached: client
            .maxresponsesize_cached
            .min(ours.response_cached_bytes_max),
        maxoperations: client.maxoperations.min(ours.ops_max),
        maxrequests: client.maxrequests.min(ours.slots_max),
        rdma_ird: RdmaIrd(Vec::new()),
    })
}

/// Checks the back channel's attributes; we keep the client's sizes and use one slot.
pub fn negotiate_back(client: &ChannelAttrs4) -> Result<ChannelAttrs4, Nfsstat4> {
    if client.maxrequestsize < BACK_REQUEST_BYTES_MIN
        || client.maxresponsesize < BACK_RESPONSE_BYTES_MIN
        || client.maxrequests == 0
        || client.maxoperations < 2
    {
        return Err(Nfsstat4::TOOSMALL);
    }
    Ok(ChannelAttrs4 {
        headerpadsize: 0,
        maxrequests: client.maxrequests.min(BACK_SLOTS_MAX),
        rdma_ird: RdmaIrd(Vec::new()),
        ..client.clone()
    })
}

/// One SEQUENCE as the session sees it: the arguments plus facts about the whole COMPOUND.
#[derive(Debug, Clone)]
pub struct SequenceCall {
    pub slotid: u32,
    pub sequenceid: u32,
    pub highest_slotid: u32,
    pub cachethis: bool,
    /// Size of the whole RPC call in bytes.
    pub request_bytes: usize,
    /// Operations in the COMPOUND, SEQUENCE included.
    pub op_count: usize,
    /// A digest of the COMPOUND's operations (after SEQUENCE's sequence id), to tell a retry
    /// from a different request on the same sequence id.
    pub digest: u64,
    /// The connection it came on.
    pub conn: ConnId,
}

/// A SEQUENCE that passed: what to do, and the values of SEQUENCE4resok that come from here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceOk {
    pub decision: SlotDecision,
    pub highest_slotid: u32,
    pub target_highest_slotid: u32,
    /// The session's SEQ4_STATUS_* bits (the client-wide ones, such as CB_PATH_DOWN, are OR-ed
    /// in by the caller).
    pub status_flags: u32,
}

/// One session.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: SessionId4,
    pub clientid: ClientId4,
    pub fore: ChannelAttrs4,
    pub back: ChannelAttrs4,
    /// CREATE_SESSION4_FLAG_* granted.
    pub flags: u32,
    /// The back channel: program, credentials, the server's slot, the path's state.
    pub cb: SessionCallbacks,
    slots: SlotTable,
    /// Bound connections, oldest first, with the directions they carry (CDFS4_*).
    conns: VecDeque<(ConnId, u32)>,
    /// The client wants callbacks (it asked for a back channel at creation or by binding).
    back_wanted: bool,
    /// A SEQUENCE made a callback due (see [`Session::take_callbacks_due`]).
    callbacks_due: bool,
}

impl Session {
    /// A new session whose channels were negotiated; `conn` is the creating connection, bound
    /// to the fore channel and, if `flags` has CREATE_SESSION4_FLAG_CONN_BACK_CHAN, to the back
    /// channel too (§18.36.3). Callbacks go to `cb_program` with credentials from `sec_parms`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: SessionId4,
        clientid: ClientId4,
        fore: ChannelAttrs4,
        back: ChannelAttrs4,
        flags: u32,
        cb_program: u32,
        sec_parms: &[CallbackSecParms4],
        conn: ConnId,
    ) -> Self {
        let back_on_conn = flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0;
        let slots = SlotTable::new(fore.maxrequests, fore.maxresponsesize_cached as usize);
        let dir = if back_on_conn { CDFS4_BOTH } else { CDFS4_FORE };
        Self {
            id,
            clientid,
            fore,
            back,
            flags,
            cb: SessionCallbacks::new(id, cb_program, sec_parms),
            slots,
            conns: VecDeque::from([(conn, dir)]),
            back_wanted: back_on_conn,
            callbacks_due: false,
        }
    }

    /// The session's half of SEQUENCE (§18.46.4): size and op-count limits, the slot rules,
    /// the implicit fore-channel binding of the connection, and status flags.
    pub fn sequence(&mut self, call: &SequenceCall) -> Result<SequenceOk, Nfsstat4> {
        if call.request_bytes > self.fore.maxrequestsize as usize {
            return Err(Nfsstat4::REQ_TOO_BIG);
        }
        if call.op_count > self.fore.maxoperations as usize {
            return Err(Nfsstat4::TOO_MANY_OPS);
        }
        let decision =
            self.slots
                .begin(call.slotid, call.sequenceid, call.digest, call.cachethis)?;
        self.slots.client_highest(call.highest_slotid);
        if self.conn_dir(call.conn).is_none() {
            self.bind(call.conn, CDFS4_FORE);
        }
        self.callbacks_due |= self.cb.sequence_seen();
        Ok(SequenceOk {
            decision,
            highest_slotid: self.slots.highest_slotid(),
            target_highest_slotid: self.slots.target_highest_slotid(),
            status_flags: self.status_flags(),
        })
    }

    /// Ends the request on `slotid` (see [`SlotTable::complete`]).
    pub fn complete(&mut self, slotid: u32, reply: Option<bytes::Bytes>) {
        self.slots.complete(slotid, reply);
    }

    /// The most bytes a reply may have: `maxresponsesize`, or `maxresponsesize_cached` when
    /// the request asked to be cached (NFS4ERR_REP_TOO_BIG / REP_TOO_BIG_TO_CACHE past it).
    pub fn reply_bytes_max(&self, cachethis: bool) -> usize {
        if cachethis {
            self.fore.maxresponsesize_cached as usize
        } else {
            self.fore.maxresponsesize as usize
        }
    }

    /// Checks an encoded reply's size against the channel (§2.10.6.4, §18.46.3): over
    /// `maxresponsesize` is NFS4ERR_REP_TOO_BIG; a request that asked to be cached whose reply
    /// is over `maxresponsesize_cached` is NFS4ERR_REP_TOO_BIG_TO_CACHE. The processor checks
    /// as it encodes and puts the error on the op that crossed the line.
    pub fn check_reply_bytes(&self, reply_bytes: usize, cachethis: bool) -> Result<(), Nfsstat4> {
        if reply_bytes > self.fore.maxresponsesize as usize {
            return Err(Nfsstat4::REP_TOO_BIG);
        }
        if cachethis && reply_bytes > self.fore.maxresponsesize_cached as usize {
            return Err(Nfsstat4::REP_TOO_BIG_TO_CACHE);
        }
        Ok(())
    }

    /// BIND_CONN_TO_SESSION's state part (§18.34.3): binds `conn` for the asked direction and
    /// returns the direction granted (CDFS4_*). We grant what is asked; "or both" means both.
    pub fn bind_conn(&mut self, conn: ConnId, dir_from_client: u32) -> Result<u32, Nfsstat4> {
        let dir = match dir_from_client {
            CDFC4_FORE => CDFS4_FORE,
            CDFC4_BACK => CDFS4_BACK,
            CDFC4_FORE_OR_BOTH | CDFC4_BACK_OR_BOTH => CDFS4_BOTH,
            _ => return Err(Nfsstat4::INVAL),
        };
        self.bind(conn, dir);
        if dir & CDFS4_BACK != 0 {
            self.back_wanted = true;
            self.cb.new_path();
        }
        Ok(dir)
    }

    /// The driver saw `conn` close. If it carried the back channel, the next one (if any) is
    /// probed; with none left the path is down.
    pub fn conn_closed(&mut self, conn: ConnId) {
        let was_back = self.conn_dir(conn).is_some_and(|d| d & CDFS4_BACK != 0);
        self.conns.retain(|&(c, _)| c != conn);
        if was_back {
            if self.back_conn().is_some() {
                self.cb.new_path();
            } else {
                self.cb.lost_path();
            }
        }
    }

    /// Whether a SEQUENCE since the last call made a callback due (the driver should poll).
    pub fn take_callbacks_due(&mut self) -> bool {
        std::mem::take(&mut self.callbacks_due)
    }

    /// BACKCHANNEL_CTL (§18.33): the program and credentials of later callbacks.
    pub fn backchannel_ctl(&mut self, program: u32, sec_parms: &[CallbackSecParms4]) {
        self.cb.set_program(program, sec_parms);
    }

    /// Whether the client asked for callbacks and they cannot reach it: no back-channel
    /// connection, or the last probe or callback failed.
    pub fn cb_path_down(&self) -> bool {
        self.back_wanted && (self.back_conn().is_none() || self.cb.is_down())
    }

    /// Whether callbacks are known to get through (the probe passed).
    pub fn cb_path_up(&self) -> bool {
        self.back_conn().is_some() && self.cb.path() == PathState::Up
    }

    /// A connection the server can send callbacks on, newest first.
    pub fn back_conn(&self) -> Option<ConnId> {
        self.conns
            .iter()
            .rev()
            .find(|&&(_, d)| d & CDFS4_BACK != 0)
            .map(|&(c, _)| c)
    }

    /// Whether `conn` is bound, and for which directions.
    pub fn conn_dir(&self, conn: ConnId) -> Option<u32> {
        self.conns
            .iter()
            .find(|&&(c, _)| c == conn)
            .map(|&(_, d)| d)
    }

    /// Whether a request other than the one on `own_slot` is executing (DESTROY_SESSION then
    /// answers NFS4ERR_DELAY, as knfsd: the session is still in use).
    pub fn busy_except(&self, own_slot: Option<u32>) -> bool {
        self.slots.busy_except(own_slot)
    }

    /// Sets the slot target (`sr_target_highest_slotid`).
    pub fn set_slot_target(&mut self, target_highest_slotid: u32) {
        self.slots.set_target(target_highest_slotid);
    }

    pub fn slots(&self) -> &SlotTable {
        &self.slots
    }

    /// This session's SEQ4_STATUS_* bits (§18.46.3): CB_PATH_DOWN_SESSION when callbacks were
    /// asked for and cannot reach the client, BACKCHANNEL_FAULT when the client's answer to
    /// our CB_SEQUENCE showed that the two ends disagree about the back channel.
    fn status_flags(&self) -> u32 {
        let mut flags = 0;
        if self.cb_path_down() {
            flags |= SEQ4_STATUS_CB_PATH_DOWN_SESSION;
        }
        if self.back_wanted && self.cb.path() == PathState::Fault {
            flags |= SEQ4_STATUS_BACKCHANNEL_FAULT;
        }
        flags
    }

    fn bind(&mut self, conn: ConnId, dir: u32) {
        self.conns.retain(|&(c, _)| c != conn);
        if self.conns.len() == CONNS_PER_SESSION_MAX {
            self.conns.pop_front();
        }
        self.conns.push_back((conn, dir));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn attrs(req: u32, resp: u32, cached: u32, ops: u32, slots: u32) -> ChannelAttrs4 {
        ChannelAttrs4 {
            headerpadsize: 0,
            maxrequestsize: req,
            maxresponsesize: resp,
            maxresponsesize_cached: cached,
            maxoperations: ops,
            maxrequests: slots,
            rdma_ird: RdmaIrd(Vec::new()),
        }
    }

    fn session() -> Session {
        let fore =
            negotiate_fore(&attrs(1 << 21, 1 << 21, 8192, 16, 4), &Default::default()).unwrap();
        let back = negotiate_back(&attrs(4096, 4096, 0, 2, 16)).unwrap();
        let sys = CallbackSecParms4::AuthNone;
        Session::new([1; 16], 7, fore, back, 0, 0x4000_0000, &[sys], 1)
    }

    fn call(slotid: u32, sequenceid: u32) -> SequenceCall {
        SequenceCall {
            slotid,
            sequenceid,
            highest_slotid: 3,
            cachethis: true,
            request_bytes: 200,
            op_count: 3,
            digest: 0,
            conn: 1,
        }
    }

    #[test]
    fn fore_channel_is_the_smaller_of_theirs_and_ours() {
        let ours = ChannelLimits::default();
        let a = negotiate_fore(&attrs(u32::MAX, 1 << 16, u32::MAX, 1000, 1000), &ours).unwrap();
        assert_eq!(a.maxrequestsize, ours.request_bytes_max);
        assert_eq!(a.maxresponsesize, 1 << 16);
        assert_eq!(a.maxresponsesize_cached, 4096);
        assert_eq!(a.maxoperations, 64);
        assert_eq!(a.maxrequests, 64);
        assert_eq!(a.headerpadsize, 0);
    }

    #[test]
    fn channels_too_small_to_be_useful_are_toosmall() {
        let ours = ChannelLimits::default();
        assert_eq!(
            negotiate_fore(&attrs(63, 1 << 20, 0, 8, 8), &ours),
            Err(Nfsstat4::TOOSMALL)
        );
        assert_eq!(
            negotiate_fore(&attrs(1 << 20, 1 << 20, 0, 8, 0), &ours),
            Err(Nfsstat4::TOOSMALL)
        );
        assert_eq!(
            negotiate_fore(&attrs(1 << 20, 63, 0, 8, 8), &ours),
            Err(Nfsstat4::TOOSMALL)
        );
        // Small, as knfsd allows: a session, whose COMPOUNDs then meet REQ/REP_TOO_BIG.
        let small = negotiate_fore(&attrs(400, 512, 0, 8, 8), &ours).unwrap();
        assert_eq!((small.maxrequestsize, small.maxresponsesize), (400, 512));
        assert!(negotiate_fore(&attrs(64, 64, 0, 8, 8), &ours).is_ok());
        assert_eq!(
            negotiate_back(&attrs(4096, 4096, 0, 1, 1)),
            Err(Nfsstat4::TOOSMALL)
        );
        assert_eq!(
            negotiate_back(&attrs(4096, 4096, 0, 2, 8))
                .unwrap()
                .maxrequests,
            1
        );
    }

    #[test]
    fn oversize_requests_and_long_compounds_are_refused_before_the_slot() {
        let mut s = session();
        let mut c = call(0, 1);
        c.request_bytes = (1 << 20) + 8 * 1024 + 1;
        assert_eq!(s.sequence(&c), Err(Nfsstat4::REQ_TOO_BIG));
        let mut c = call(0, 1);
        c.op_count = 17;
        assert_eq!(s.sequence(&c), Err(Nfsstat4::TOO_MANY_OPS));
        // The slot did not move: seqid 1 is still the next one.
        assert_eq!(
            s.sequence(&call(0, 1)).unwrap().decision,
            SlotDecision::Execute
        );
    }

    #[test]
    fn sequence_binds_the_connection_and_reports_a_missing_back_channel() {
        let mut s = session();
        let mut c = call(0, 1);
        c.conn = 9;
        let ok = s.sequence(&c).unwrap();
        assert_eq!(ok.status_flags, 0, "no callbacks asked for");
        assert_eq!(s.conn_dir(9), Some(CDFS4_FORE));
        assert_eq!(s.bind_conn(5, CDFC4_BACK_OR_BOTH), Ok(CDFS4_BOTH));
        s.complete(0, None);
        assert_eq!(s.back_conn(), Some(5));
        s.conn_closed(5);
        let ok = s.sequence(&call(0, 2)).unwrap();
        assert_eq!(ok.status_flags, SEQ4_STATUS_CB_PATH_DOWN_SESSION);
        assert_eq!(s.bind_conn(5, 9), Err(Nfsstat4::INVAL));
    }

    #[test]
    fn connections_per_session_are_bounded() {
        let mut s = session();
        for c in 0..100 {
            s.bind_conn(c, CDFC4_FORE).unwrap();
        }
        assert_eq!(s.conns.len(), CONNS_PER_SESSION_MAX);
        assert_eq!(s.conn_dir(99), Some(CDFS4_FORE));
        assert_eq!(s.conn_dir(0), None);
    }

    #[test]
    fn reply_limits_follow_cachethis() {
        let s = session();
        assert_eq!(s.reply_bytes_max(true), 4096);
        assert_eq!(s.reply_bytes_max(false), (1 << 20) + 8 * 1024);
        assert_eq!(s.check_reply_bytes(4096, true), Ok(()));
        assert_eq!(
            s.check_reply_bytes(4097, true),
            Err(Nfsstat4::REP_TOO_BIG_TO_CACHE)
        );
        assert_eq!(s.check_reply_bytes(1 << 20, false), Ok(()));
        assert_eq!(
            s.check_reply_bytes((1 << 20) + 8 * 1024 + 1, true),
            Err(Nfsstat4::REP_TOO_BIG)
        );
    }
}
