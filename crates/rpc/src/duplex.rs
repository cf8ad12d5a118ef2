//! Calls in both directions on one connection: telling CALLs from REPLYs, and the table of
//! calls a server originates towards its client (the NFSv4.1 back channel), with no I/O.
//!
//! NFSv4.1 runs its callback program (CB_NULL, CB_SEQUENCE, CB_RECALL; the program number the
//! client chose in CREATE_SESSION's `csa_cb_program`) from the server to the client over the
//! client's *own* TCP connection (RFC 8881 §2.10.3.1), so that callbacks pass NATs and
//! firewalls that would refuse a connection opened by the server. One byte stream then carries
//! two independent conversations:
//!
//! ```text
//!        client                          one TCP connection                       server
//!  ┌──────────────┐   CALL  xid c1 (NFS, client's XID space)  ───────────►   ┌──────────────┐
//!  │ CallTable     │  ◄───────────  REPLY xid c1                              │ dispatcher   │
//!  │ (its calls)   │                                                          │ (its calls   │
//!  │               │  ◄───────────  CALL  xid s1 (callback, server's space)   │  answered)   │
//!  │ callback      │   REPLY xid s1 ───────────────────────────────────────►  │              │
//!  │ service       │                                                          │ OutgoingCalls│
//!  └──────────────┘                                                           └──────────────┘
//!   each side: record ──classify──► CALL  → its service (answer it)
//!                                   REPLY → its own table (match by xid)
//!                                   neither → garbage, counted and dropped
//! ```
//!
//! # Demultiplexing
//! Every RPC message starts with `xid` and `msg_type` (RFC 5531 §9), so [`classify`] reads
//! eight bytes and tells the two apart; nothing else of the record is trusted yet. A side
//! hands CALL records to whatever answers calls and REPLY records to the table of calls *it*
//! sent.
//!
//! # XID spaces
//! Each direction has its own XID space: a REPLY is matched only against the calls this side
//! sent, because a peer's CALL and our REPLY can never be confused once `msg_type` has sorted
//! them. The server's XIDs for callbacks may therefore equal XIDs the client is using at the
//! same moment, and that is harmless. (RFC 8881 §2.10.3.1 says the same: the back channel's
//! XIDs are the server's business.) The table starts at a seed that the driver draws at random
//! per connection, like the client's [`crate::client::CallTable`].
//!
//! # Why not reuse [`crate::client::CallTable`]
//! Read before deciding; the client's table is built around three policies that are wrong here:
//! 1. **Disconnect means resend.** The client keeps its calls across a reconnect and resends
//!    them on the next connection. A server cannot reconnect to a client: when the connection
//!    drops, a callback has nowhere to go until the client binds a new connection to its
//!    session, and *the session* decides then what to send again (CB_SEQUENCE slots). So here a
//!    disconnect fails every outstanding call at once ([`CallError::ConnectionGone`]).
//! 2. **One timeout for every call, and hard mode.** A recall's deadline is the caller's
//!    (a lease period, a grace period, a test's short timeout), so every call carries its own.
//!    A callback never waits forever: an unanswered CB_RECALL must end in revocation, never in
//!    a hung server task.
//! 3. **A waiting queue, RTT estimation, a UDP congestion window.** The back channel is TCP
//!    only, and its flow is tiny; a full table is the caller's problem
//!    ([`CallError::TooManyInFlight`]), because the caller (a lease manager) is the one that
//!    can choose to wait, retry or revoke.
//!
//! What is shared is the wire format: the call header builder, the reply decoder and
//! [`classify`] live in [`crate::msg`], below both tables, so a callback reply maps to the same
//! [`RpcError`]s.
//!
//! # Timeouts start at send
//! A call's deadline is `now + timeout` where `now` is when [`OutgoingCalls::poll_transmit`]
//! hands it to the driver, not when it was started: a call stuck behind a long reply in the
//! connection's writer has not yet given the client any chance to answer. (A writer that makes
//! no progress at all is the driver's to bound; the server's closes the connection after its
//! stall limit, which fails the call as [`CallError::ConnectionGone`].)
//!
//! ```text
//!  start_call ──► send queue ──poll_transmit(now)──► on the wire, deadline = now + timeout
//!   │ TooManyInFlight                                   │ handle_reply: matched by xid → Done
//!   │ ConnectionGone                                    │ handle_timeout(now ≥ deadline) → TimedOut
//!   └ (after disconnect)                                └ handle_disconnect → ConnectionGone (all)
//! ```
//!
//! # Bounds
//! At most [`OutgoingConfig::calls_in_flight_max`] calls exist at once (queued or sent); beyond
//! that [`OutgoingCalls::start_call`] refuses. Timer scans are linear in the calls, which the
//! bound keeps small. Everything that iterates over calls does so in start order, so a
//! simulation is a pure function of its inputs.

pub use crate::msg::{classify, MsgKind};

use crate::msg::{build_call, decode_reply, ProcId, Reply, RpcError, Transmit};
use bytes::Bytes;
use sluice_xdr::rpc::OpaqueAuth;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

/// Settings of an [`OutgoingCalls`] table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutgoingConfig {
    /// Calls that may exist at once on one connection, queued or sent. Default 16: a client's
    /// back-channel session has few slots (Linux's client offers 1 to 16 in `ca_maxrequests` of
    /// its back-channel attributes), so more calls in flight than that would only wait in the
    /// client's slot table; the bound keeps a server that recalls many delegations at once
    /// from queueing without limit on one connection.
    pub calls_in_flight_max: usize,
}

impl Default for OutgoingConfig {
    fn default() -> Self {
        OutgoingConfig {
            calls_in_flight_max: 16,
        }
    }
}

/// Why an outgoing call produced no results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// Sent, and no reply came within its timeout (counted from the send).
    TimedOut,
    /// The connection closed before the reply came (or before the call was started).
    ConnectionGone,
    /// [`OutgoingConfig::calls_in_flight_max`] calls are outstanding on this connection.
    TooManyInFlight,
    /// The peer answered with an RPC-level error, or a reply header that did not decode.
    Rejected(RpcError),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::TimedOut => write!(f, "callback timed out"),
            CallError::ConnectionGone => write!(f, "callback connection gone"),
            CallError::TooManyInFlight => write!(f, "too many callbacks in flight"),
            CallError::Rejected(e) => write!(f, "callback rejected: {e}"),
        }
    }
}

impl std::error::Error for CallError {}

/// A finished outgoing call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    pub xid: u32,
    pub result: Result<Reply, CallError>,
}

/// Counters, for statistics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutgoingStats {
    pub calls_started: u64,
    pub calls_sent: u64,
    /// Calls that got a reply (successful or rejected).
    pub calls_answered: u64,
    pub calls_timed_out: u64,
    /// Calls failed by a disconnect.
    pub calls_disconnected: u64,
    pub calls_cancelled: u64,
    /// `start_call` refused: table full, or the connection already gone.
    pub calls_refused: u64,
    /// Replies whose XID matched no sent call (late, duplicated, or never ours).
    pub unknown_xid_replies: u64,
    /// Records given to `handle_reply` that were not replies.
    pub garbage_replies: u64,
}

/// The calls one side originates on one connection. See the module docs.
#[derive(Debug)]
pub struct OutgoingCalls {
    config: OutgoingConfig,
    calls: HashMap<u32, OutCall>,
    /// XIDs waiting to be sent, in start order; entries of cancelled calls are skipped.
    send_queue: VecDeque<u32>,
    connected: bool,
    next_xid: u32,
    next_seq: u64,
    events: VecDeque<Done>,
    stats: OutgoingStats,
}

#[derive(Debug)]
struct OutCall {
    seq: u64,
    message: Vec<Bytes>,
    timeout: Duration,
    /// Set when the call goes on the wire.
    deadline: Option<Instant>,
}

impl OutgoingCalls {
    /// A table whose first XID is `xid_seed`, on a live connection.
    pub fn new(config: OutgoingConfig, xid_seed: u32) -> Self {
        assert!(config.calls_in_flight_max >= 1, "calls_in_flight_max is 0");
        OutgoingCalls {
            config,
            calls: HashMap::new(),
            send_queue: VecDeque::new(),
            connected: true,
            next_xid: xid_seed,
            next_seq: 0,
            events: VecDeque::new(),
            stats: OutgoingStats::default(),
        }
    }

    // --- getters ---------------------------------------------------------------------------

    pub fn config(&self) -> &OutgoingConfig {
        &self.config
    }
    pub fn stats(&self) -> &OutgoingStats {
        &self.stats
    }
    /// Calls started and not yet finished (queued or sent).
    pub fn in_flight(&self) -> usize {
        self.calls.len()
    }
    pub fn is_connected(&self) -> bool {
        self.connected
    }

    // --- commands --------------------------------------------------------------------------

    /// Starts a call and returns its XID; it waits for [`OutgoingCalls::poll_transmit`]. Its
    /// `timeout` runs from that send. Refused when the table is full or the connection gone.
    pub fn start_call(
        &mut self,
        _now: Instant,
        proc_id: ProcId,
        cred: &OpaqueAuth,
        args: Vec<Bytes>,
        timeout: Duration,
    ) -> Result<u32, CallError> {
        if !self.connected {
            self.stats.calls_refused += 1;
            return Err(CallError::ConnectionGone);
        }
        if self.calls.len() >= self.config.calls_in_flight_max {
            self.stats.calls_refused += 1;
            return Err(CallError::TooManyInFlight);
        }
        let xid = self.alloc_xid();
        self.calls.insert(
            xid,
            OutCall {
                seq: self.next_seq,
                message: build_call(xid, proc_id, cred, args),
                timeout,
                deadline: None,
            },
        );
        self.next_seq += 1;
        self.send_queue.push_back(xid);
        self.stats.calls_started += 1;
        Ok(xid)
    }

    /// Forgets a call (its caller gave up). A later reply counts as an unknown XID. Returns
    /// false if no such call is outstanding.
    pub fn cancel(&mut self, xid: u32) -> bool {
        if self.calls.remove(&xid).is_none() {
            return false;
        }
        self.stats.calls_cancelled += 1;
        true
    }

    // --- inputs ----------------------------------------------------------------------------

    /// Matches a REPLY record to a sent call. Returns `None` for records that finish nothing
    /// (unknown XIDs, replies to calls not yet sent, non-replies), which are counted.
    pub fn handle_reply(&mut self, _now: Instant, segments: Vec<Bytes>) -> Option<Done> {
        let MsgKind::Reply { xid } = classify(&segments) else {
            self.stats.garbage_replies += 1;
            return None;
        };
        if self.calls.get(&xid).is_none_or(|c| c.deadline.is_none()) {
            self.stats.unknown_xid_replies += 1;
            return None;
        }
        self.calls.remove(&xid);
        self.stats.calls_answered += 1;
        Some(Done {
            xid,
            result: decode_reply(segments).map_err(CallError::Rejected),
        })
    }

    /// Fails the sent calls whose deadline has passed ([`CallError::TimedOut`], as events).
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut due: Vec<(u64, u32)> = self
            .calls
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| d <= now))
            .map(|(&xid, c)| (c.seq, xid))
            .collect();
        due.sort_unstable();
        for (_, xid) in due {
            self.calls.remove(&xid);
            self.stats.calls_timed_out += 1;
            self.events.push_back(Done {
                xid,
                result: Err(CallError::TimedOut),
            });
        }
    }

    /// The connection is gone: every outstanding call fails with [`CallError::ConnectionGone`]
    /// (as events, in start order), and later calls are refused. Idempotent.
    pub fn handle_disconnect(&mut self, _now: Instant) {
        if !self.connected {
            return;
        }
        self.connected = false;
        let mut all: Vec<(u64, u32)> = self.calls.iter().map(|(&x, c)| (c.seq, x)).collect();
        all.sort_unstable();
        for (_, xid) in all {
            self.calls.remove(&xid);
            self.stats.calls_disconnected += 1;
            self.events.push_back(Done {
                xid,
                result: Err(CallError::ConnectionGone),
            });
        }
        self.send_queue.clear();
    }

    // --- outputs ---------------------------------------------------------------------------

    /// The next call to put on the wire, if any; it counts as sent at `now`, and its deadline
    /// starts. Not record-marked: over TCP pass it through [`crate::record::frame`].
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        if !self.connected {
            return None;
        }
        while let Some(xid) = self.send_queue.pop_front() {
            let Some(call) = self.calls.get_mut(&xid) else {
                continue; // cancelled while queued
            };
            debug_assert!(call.deadline.is_none(), "an outgoing call is sent once");
            call.deadline = Some(now + call.timeout);
            self.stats.calls_sent += 1;
            return Some(Transmit {
                xid,
                segments: call.message.clone(),
                is_retransmit: false,
            });
        }
        None
    }

    /// When [`OutgoingCalls::handle_timeout`] should next run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.calls.values().filter_map(|c| c.deadline).min()
    }

    /// The next call finished by a timeout or a disconnect.
    pub fn poll_event(&mut self) -> Option<Done> {
        self.events.pop_front()
    }

    // --- helpers ---------------------------------------------------------------------------

    fn alloc_xid(&mut self) -> u32 {
        // Outstanding calls are at most `calls_in_flight_max`, far fewer than 2^32.
        loop {
            let xid = self.next_xid;
            self.next_xid = self.next_xid.wrapping_add(1);
            if !self.calls.contains_key(&xid) {
                return xid;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{CallTable, CallTableConfig};
    use crate::rtt::TimerClass;
    use crate::server::{self, CallParse};
    use crate::test_util::base_instant;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// The NFSv4.1 callback program as a client might number it (`csa_cb_program`).
    const CB: ProcId = ProcId {
        prog: 0x4000_0000,
        vers: 1,
        proc_: 1,
    };
    const NFS: ProcId = ProcId {
        prog: 100003,
        vers: 4,
        proc_: 1,
    };
    const MS: Duration = Duration::from_millis(1);
    const S: Duration = Duration::from_secs(1);

    fn table(max: usize) -> OutgoingCalls {
        OutgoingCalls::new(
            OutgoingConfig {
                calls_in_flight_max: max,
            },
            1000,
        )
    }

    fn start(t: &mut OutgoingCalls, now: Instant, timeout: Duration) -> u32 {
        t.start_call(now, CB, &OpaqueAuth::none(), vec![], timeout)
            .unwrap()
    }

    fn ok_reply(xid: u32) -> Vec<Bytes> {
        let mut w = server::success_header(xid);
        w.put_u32(xid.wrapping_mul(3));
        w.into_segments()
    }

    fn drain(t: &mut OutgoingCalls, now: Instant) -> Vec<u32> {
        std::iter::from_fn(|| t.poll_transmit(now))
            .map(|x| x.xid)
            .collect()
    }

    fn events(t: &mut OutgoingCalls) -> Vec<Done> {
        std::iter::from_fn(|| t.poll_event()).collect()
    }

    #[test]
    fn classify_tells_calls_replies_and_garbage_apart() {
        let call = build_call(7, CB, &OpaqueAuth::none(), vec![]);
        assert_eq!(classify(&call), MsgKind::Call { xid: 7 });
        assert_eq!(classify(&ok_reply(8)), MsgKind::Reply { xid: 8 });
        // Split across segments, as the record decoder may hand it over.
        let split = vec![
            Bytes::from_static(&[0, 0, 0]),
            Bytes::from_static(&[9, 0, 0, 0, 1]),
        ];
        assert_eq!(classify(&split), MsgKind::Reply { xid: 9 });
        for bad in [
            &b""[..],
            b"\0\0\0\x01",
            b"\0\0\0\x01\0\0\0",
            b"\0\0\0\x01\0\0\0\x02",
        ] {
            assert_eq!(classify(&[Bytes::copy_from_slice(bad)]), MsgKind::Garbage);
        }
    }

    #[test]
    fn replies_complete_calls_in_any_order_and_map_results() {
        let t0 = base_instant();
        let mut t = table(8);
        let xids: Vec<u32> = (0..4).map(|_| start(&mut t, t0, S)).collect();
        assert_eq!(drain(&mut t, t0), xids, "sent in start order");
        for &xid in xids.iter().rev() {
            let done = t.handle_reply(t0 + MS, ok_reply(xid)).unwrap();
            assert_eq!(done.xid, xid);
            let reply = done.result.unwrap();
            assert_eq!(reply.results().get_u32().unwrap(), xid.wrapping_mul(3));
        }
        assert_eq!(t.in_flight(), 0);
        assert_eq!(t.poll_timeout(), None);
        // A rejected call is an answer, with the client table's error mapping.
        let x = start(&mut t, t0, S);
        drain(&mut t, t0);
        let mut rej: Vec<u8> = server::proc_unavail(0).concat();
        rej[..4].copy_from_slice(&x.to_be_bytes());
        let done = t.handle_reply(t0, vec![Bytes::from(rej)]).unwrap();
        assert_eq!(done.result, Err(CallError::Rejected(RpcError::ProcUnavail)));
        assert_eq!(t.stats().calls_answered, 5);
    }

    #[test]
    fn the_timeout_starts_when_the_call_is_sent_not_when_it_is_started() {
        let t0 = base_instant();
        let mut t = table(8);
        let a = start(&mut t, t0, 100 * MS);
        assert_eq!(t.poll_timeout(), None, "not sent: no deadline yet");
        // Sent 5 s later (behind a long reply in the writer, say).
        t.handle_timeout(t0 + 5 * S);
        assert!(events(&mut t).is_empty());
        assert_eq!(drain(&mut t, t0 + 5 * S), vec![a]);
        assert_eq!(t.poll_timeout(), Some(t0 + 5 * S + 100 * MS));
        t.handle_timeout(t0 + 5 * S + 99 * MS);
        assert!(events(&mut t).is_empty());
        t.handle_timeout(t0 + 5 * S + 100 * MS);
        assert_eq!(
            events(&mut t),
            vec![Done {
                xid: a,
                result: Err(CallError::TimedOut)
            }]
        );
        // The late reply finds nothing.
        assert!(t.handle_reply(t0 + 6 * S, ok_reply(a)).is_none());
        let s = t.stats();
        assert_eq!((s.calls_timed_out, s.unknown_xid_replies), (1, 1));
        assert_eq!(t.in_flight(), 0);
    }

    #[test]
    fn each_call_has_its_own_timeout_and_they_fail_in_start_order() {
        let t0 = base_instant();
        let mut t = table(8);
        let long = start(&mut t, t0, 10 * S);
        let short = start(&mut t, t0, S);
        let also_short = start(&mut t, t0, S);
        drain(&mut t, t0);
        assert_eq!(t.poll_timeout(), Some(t0 + S));
        t.handle_timeout(t0 + 2 * S);
        let failed: Vec<u32> = events(&mut t).iter().map(|d| d.xid).collect();
        assert_eq!(failed, vec![short, also_short]);
        assert_eq!(t.poll_timeout(), Some(t0 + 10 * S));
        assert!(t.handle_reply(t0 + 3 * S, ok_reply(long)).is_some());
    }

    #[test]
    fn a_disconnect_fails_every_call_sent_or_not_and_refuses_new_ones() {
        let t0 = base_instant();
        let mut t = table(8);
        let sent = start(&mut t, t0, S);
        drain(&mut t, t0);
        let queued = start(&mut t, t0, S);
        t.handle_disconnect(t0 + MS);
        let done = events(&mut t);
        assert_eq!(
            done,
            vec![
                Done {
                    xid: sent,
                    result: Err(CallError::ConnectionGone)
                },
                Done {
                    xid: queued,
                    result: Err(CallError::ConnectionGone)
                },
            ]
        );
        assert_eq!(t.poll_transmit(t0 + MS), None, "nothing left to send");
        assert_eq!(t.poll_timeout(), None, "no timer outlives the connection");
        assert_eq!(
            t.start_call(t0, CB, &OpaqueAuth::none(), vec![], S),
            Err(CallError::ConnectionGone)
        );
        t.handle_disconnect(t0 + 2 * MS);
        assert!(events(&mut t).is_empty(), "idempotent");
        assert_eq!(t.stats().calls_disconnected, 2);
    }

    #[test]
    fn the_in_flight_bound_refuses_and_a_finished_call_frees_room() {
        let t0 = base_instant();
        let mut t = table(2);
        let a = start(&mut t, t0, S);
        start(&mut t, t0, S);
        assert_eq!(
            t.start_call(t0, CB, &OpaqueAuth::none(), vec![], S),
            Err(CallError::TooManyInFlight)
        );
        drain(&mut t, t0);
        t.handle_reply(t0, ok_reply(a)).unwrap();
        start(&mut t, t0, S);
        assert_eq!(t.stats().calls_refused, 1);
        // A cancelled call frees room too, and is never sent.
        let mut t = table(1);
        let c = start(&mut t, t0, S);
        assert!(t.cancel(c));
        assert!(!t.cancel(c));
        let d = start(&mut t, t0, S);
        assert_eq!(drain(&mut t, t0), vec![d]);
    }

    #[test]
    fn replies_before_the_send_unknown_xids_and_non_replies_are_counted_not_matched() {
        let t0 = base_instant();
        let mut t = table(4);
        let a = start(&mut t, t0, S);
        assert!(t.handle_reply(t0, ok_reply(a)).is_none(), "not sent yet");
        drain(&mut t, t0);
        assert!(t.handle_reply(t0, ok_reply(a + 1)).is_none());
        assert!(t
            .handle_reply(t0, vec![Bytes::from_static(b"\0")])
            .is_none());
        // A CALL with our xid is not our reply.
        let call = build_call(a, NFS, &OpaqueAuth::none(), vec![]);
        assert!(t.handle_reply(t0, call).is_none());
        let s = t.stats();
        assert_eq!((s.unknown_xid_replies, s.garbage_replies), (2, 2));
        assert!(t.handle_reply(t0, ok_reply(a)).is_some());
    }

    #[test]
    fn xids_skip_outstanding_ones_and_wrap() {
        let t0 = base_instant();
        let mut t = OutgoingCalls::new(OutgoingConfig::default(), u32::MAX);
        assert_eq!(start(&mut t, t0, S), u32::MAX);
        assert_eq!(start(&mut t, t0, S), 0);
        t.next_xid = u32::MAX;
        assert_eq!(start(&mut t, t0, S), 1);
    }

    /// Both directions on one simulated connection, in virtual time: the client's NFS calls
    /// and the server's callbacks interleave, in both directions, with the same XIDs on
    /// purpose, and every record is demultiplexed by `classify` to the right side.
    #[test]
    fn both_directions_interleave_on_one_connection_with_overlapping_xids() {
        let seed = sluice_testkit::seed::seed("duplex::both_directions_interleave", 0x0bac_c4a1);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let t0 = base_instant();
        let mut now = t0;
        // Same seeds: the two XID spaces overlap completely.
        let mut client = CallTable::new(CallTableConfig::tcp(), 5000);
        let mut server_out = OutgoingCalls::new(OutgoingConfig::default(), 5000);
        let mut to_server: VecDeque<Vec<Bytes>> = VecDeque::new();
        let mut to_client: VecDeque<Vec<Bytes>> = VecDeque::new();
        let (mut nfs_started, mut cb_started) = (0u32, 0u32);
        let (mut nfs_done, mut cb_done) = (0, 0);
        while nfs_done < 300 || cb_done < 300 {
            now += MS;
            if nfs_started < 300 && rng.gen_bool(0.5) {
                let arg = Bytes::copy_from_slice(&nfs_started.to_be_bytes());
                client
                    .start_call(now, NFS, &OpaqueAuth::none(), vec![arg], TimerClass::Other)
                    .unwrap();
                nfs_started += 1;
            }
            if cb_started < 300 && rng.gen_bool(0.5) {
                let arg = Bytes::copy_from_slice(&(cb_started | 0x8000_0000).to_be_bytes());
                if server_out
                    .start_call(now, CB, &OpaqueAuth::none(), vec![arg], S)
                    .is_ok()
                {
                    cb_started += 1;
                }
            }
            while let Some(tx) = client.poll_transmit(now) {
                to_server.push_back(tx.segments);
            }
            while let Some(tx) = server_out.poll_transmit(now) {
                to_client.push_back(tx.segments);
            }
            // Deliver a random number of records each way, in order (one TCP stream).
            for _ in 0..rng.gen_range(0..4) {
                let Some(rec) = to_server.pop_front() else {
                    break;
                };
                match classify(&rec) {
                    MsgKind::Call { xid } => to_client.push_back(echo(&rec, xid)),
                    MsgKind::Reply { .. } => {
                        let done = server_out.handle_reply(now, rec).expect("a callback reply");
                        let v = done.result.unwrap().results().get_u32().unwrap();
                        assert_eq!(v & 0x8000_0000, 0x8000_0000, "a callback's own argument");
                        cb_done += 1;
                    }
                    MsgKind::Garbage => panic!("garbage on the wire"),
                }
            }
            for _ in 0..rng.gen_range(0..4) {
                let Some(rec) = to_client.pop_front() else {
                    break;
                };
                match classify(&rec) {
                    MsgKind::Call { xid } => to_server.push_back(echo(&rec, xid)),
                    MsgKind::Reply { .. } => {
                        let done = client.handle_reply(now, rec).expect("an NFS reply");
                        let v = done.result.unwrap().results().get_u32().unwrap();
                        assert_eq!(v & 0x8000_0000, 0, "an NFS call's own argument");
                        nfs_done += 1;
                    }
                    MsgKind::Garbage => panic!("garbage on the wire"),
                }
            }
            server_out.handle_timeout(now);
            assert_eq!(server_out.poll_event(), None, "no callback times out");
            assert!(now < t0 + 60 * S, "the simulation makes progress");
        }
        assert_eq!(client.stats().unknown_xid_replies, 0);
        assert_eq!(client.stats().garbage_replies, 0);
        assert_eq!(server_out.stats().unknown_xid_replies, 0);
        assert_eq!(server_out.stats().calls_timed_out, 0);
    }

    /// A peer that answers every call with its first argument word.
    fn echo(rec: &[Bytes], xid: u32) -> Vec<Bytes> {
        let CallParse::Call(call) = server::parse_call(rec) else {
            panic!("not a call")
        };
        let v = call.args(rec).get_u32().unwrap();
        let mut w = server::success_header(xid);
        w.put_u32(v);
        w.into_segments()
    }
}
