//! The client call table: XIDs, slots, transmission, retransmission and timeouts, with no I/O.
//!
//! Shaped like `quinn-proto`'s connection: the driver feeds inputs with `handle_*(now, ..)`,
//! drains outputs with [`CallTable::poll_transmit`] and [`CallTable::poll_event`], and sleeps
//! until [`CallTable::poll_timeout`], then calls [`CallTable::handle_timeout`].
//!
//! ```text
//!  start_call ──► waiting queue ──(free slot)──► slot table ──(UDP: room in cwnd)──► wire
//!   (Busy when        (bounded,                   (max_in_flight)   poll_transmit    ▲
//!    both full)        max_queued)                   │    │                          │ resend: UDP minor
//!                                                    │    └──────────────────────────┘ timeout, TCP reconnect
//!                                  handle_reply ◄────┘ (matched by xid; unknown xids counted)
//! ```
//!
//! # XIDs
//! The first call gets the caller's seed, each next one the previous plus one (wrapping). The
//! seed should differ across client restarts (the driver derives it from time and randomness)
//! so that the server's duplicate request cache does not mistake a new client's call for an old
//! one. An XID still owned by an outstanding call is skipped. A retransmission always reuses the
//! call's XID: that is what lets the server's reply cache recognise it.
//!
//! # Retransmission policy
//! **TCP** delivers or breaks the connection; it never loses a message on a live connection.
//! So over TCP there is *no timer-driven retransmission on a live connection*, ever: a slow
//! reply is just slow, and resending would only load a server that is already busy. A call
//! waits up to `major_timeout` (default 60 s, Linux's `timeo=600` for TCP). When that expires
//! the table emits [`Event::NotResponding`] (once per episode) and [`Event::Reconnect`], and
//! treats the connection as broken: the driver closes it, reconnects and calls
//! [`CallTable::handle_connected`]. Then *every* outstanding call is resent, once, with its
//! original XID: replies in flight on the old connection are lost with it. The driver reports
//! connection losses it sees itself with [`CallTable::handle_disconnect`].
//!
//! **UDP** loses datagrams, so a call is resent when its RTO expires: the per-class estimate of
//! [`crate::rtt`], doubled for each timeout of that call or its class (whichever has backed off
//! more), capped at `rto_max`. The first timeout of a call also backs its class off, so new calls
//! of that class start with the longer timeout until a valid sample arrives (Karn's rule: no
//! sample from a call transmitted twice). `major_timeout` (default 10 s) measures how long a
//! call may go unanswered, across retransmissions, before the server is declared not
//! responding.
//!
//! # UDP congestion window
//! A slot lets a call exist; over UDP it may only go on the wire inside a *congestion window*
//! counted in requests, as in Linux's RPC transport (`xprt_adjust_cwnd`, the 4.4BSD / Van
//! Jacobson scheme). Why: the slot table alone lets 64 calls out at once, and 64 READs of
//! 32 KiB are 2 MiB of replies arriving at the bottleneck together. A router queue of 1 MiB
//! (the simulator's link model default) tail-drops the excess, each drop costs a retransmission
//! on a link that loses nothing, and the retransmit timers, armed at the same moment, expire
//! together and overflow the queue again (seed 5 of the simulator: 359 retransmissions and 0.20
//! of a 12.5 MB/s link). TCP needs none of this: its own congestion control paces the stream,
//! so over TCP the slots stay the only limit and everything below is skipped.
//!
//! ```text
//!   cwnd (requests)
//!    64 ┤                                        ─ ─ ─ ─ ─ max_in_flight
//!       │            ╱│hold: our own queue   ╱
//!       │          ╱  │ is standing         ╱  +1 per window of replies
//!       │        ╱    └──────────┐        ╱
//!       │      ╱                 │timeout╱
//!     2 ┤────╱                   └──÷2──╱
//!       └─────────────────────────────────────────► time
//! ```
//! * **Start at 2 requests.** Linux starts at 1; two is the smallest pipeline that overlaps one
//!   reply's transfer with the next request (the same reasoning as the readahead engine's first
//!   window), and two 32 KiB replies are a burst that any queue absorbs. A larger start would
//!   guess at a queue we know nothing about yet.
//! * **Additive increase**: +1 request for each window's worth of replies (`cwnd` replies)
//!   received while the window was full. A table that does not fill its window learns nothing
//!   about the path and does not grow (Linux: `cwnd <= cong`).
//! * **Multiplicative decrease**: a retransmit timer expiry is the loss signal: the window
//!   halves, never below 1. A burst of drops from one overflow makes many timers expire within
//!   one RTO, and halving for each (as Linux does) would collapse the window to 1 for one event;
//!   so, as in NewReno (RFC 6582), the window halves once per loss event: a timeout of a
//!   transmission sent before the last reduction does not reduce it again.
//! * **What counts**: a call occupies the window from its transmission until its reply, its
//!   cancellation, its failure or its retransmit timeout (then its datagram is presumed lost and
//!   it leaves the window). A retransmission must find room like any call, and goes first.
//! * **Hold on a standing queue.** Loss-based AIMD probes by overflowing the queue, and a drop
//!   means a retransmission: exactly what a healthy link must never see. So the window also stops
//!   growing (it does not shrink) while the replies show a standing queue that we built. The
//!   signal must tell our queueing from the path's own jitter (on a path whose RTT is uniform in
//!   [0.2, 40] ms the mean is 100 × the minimum with no queue at all). A standing queue *shifts*
//!   every sample, jitter *spreads* them, so the table keeps, over all valid RTT samples (Karn's
//!   rule; the filters are [`crate::rtt`]'s, shared with the readahead window): `rtt_min`, the minimum over 10 s; `rtt_smoothed` (gain 1/8); and `rtt_jitter`, the
//!   RTP interarrival jitter of RFC 3550 §6.4.1 applied to consecutive samples (`J += (|R_i -
//!   R_{i-1}| - J) / 16`), which no shift changes. `rtt_min + 3 × rtt_jitter` is the RTT of a
//!   late call on the unqueued path (for RTTs uniform in [a, b], about b). The window holds
//!   while `rtt_smoothed >= 2 × rtt_min + 3 × rtt_jitter`: the mean has left the jitter band by
//!   one more base RTT, a standing queue of about one BDP beyond the late-RTT pipe. That keeps
//!   the link busy (the queue never drains) and well inside a sane buffer. Measured in the
//!   simulator with 32 KiB READs and the 1 MiB default queue: on 1 ms × 100 MB/s the window
//!   settles at 10 requests (320 KiB for a 100 KB BDP), on RTTs uniform in [0.2, 40] ms at
//!   12.5 MB/s at 25 (800 KiB in flight), no drop in either. A GETATTR storm, whose replies
//!   queue nothing, still grows to `max_in_flight`. The cost is Reno's: random loss that is not
//!   congestion halves the window too (10 000 GETATTRs at 1 % loss each way take ~13 s of
//!   virtual time instead of ~4).
//!
//! # Hard and soft
//! By default (`retrans: None`) calls never give up: the NFS "hard" semantics, where an
//! application waits for the server to come back. With `retrans: Some(n)` ("soft") a call fails
//! with [`RpcError::TimedOut`] at its `n`-th major timeout, reported as [`Event::Failed`].
//!
//! # Server (not) responding
//! [`Event::NotResponding`] is emitted at the first major timeout of an episode and
//! [`Event::Ok`] at the first reply after it: once each, however many calls time out, so the
//! driver can log "server not responding" / "server OK" exactly like the kernel.
//!
//! # Bounds and cost
//! At most `max_in_flight` calls hold slots and at most `max_queued` wait for one; beyond that
//! [`CallTable::start_call`] returns [`Busy`] (backpressure, never growth). Timer scans are
//! linear in the slots (64 by default), which is cheaper than maintaining a heap at that size.
//! Everything that iterates over calls does so in start order, so a simulation run is a pure
//! function of its inputs.

pub use crate::msg::{ProcId, Reply, RpcError, Transmit};

use crate::msg::{build_call, classify, decode_reply, MsgKind};
use crate::rtt::{Extreme, RttConfig, RttEstimator, RttJitter, TimerClass, WindowedExtreme};
use bytes::Bytes;
use sluice_xdr::rpc::OpaqueAuth;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

/// The transport the table drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Udp,
}

/// Settings of a [`CallTable`]. Start from [`CallTableConfig::tcp`] or [`CallTableConfig::udp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallTableConfig {
    pub transport: Transport,
    /// Calls outstanding on the wire at once (the slot table). Default 64: enough 1 MiB READs
    /// to cover 64 MiB of bandwidth-delay product (10 Gb/s at 50 ms RTT), far more than the
    /// 16 of Linux's UDP default, and still a bound on server work per client.
    pub max_in_flight: usize,
    /// Calls waiting for a slot before [`CallTable::start_call`] refuses with [`Busy`].
    /// Default 1024.
    pub max_queued: usize,
    /// How long a call may go unanswered before a major timeout. Defaults: 60 s over TCP
    /// (`timeo=600`), 10 s over UDP (about where `timeo=11,retrans=3` gives up: 1.1 + 2.2 + 4.4 s
    /// plus the last wait).
    pub major_timeout: Duration,
    /// Soft mode: fail a call at its `n`-th major timeout. `None` (default): hard, never fail.
    pub retrans: Option<u32>,
    /// RTT estimation; used for UDP retransmit timers (and reported for TCP).
    pub rtt: RttConfig,
    /// UDP: the congestion window's first size, in requests (see the module docs). Default 2.
    /// Ignored over TCP. Clamped to `1..=max_in_flight`.
    pub cwnd_initial_requests: usize,
}

impl CallTableConfig {
    pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;
    pub const DEFAULT_MAX_QUEUED: usize = 1024;
    pub const DEFAULT_CWND_INITIAL_REQUESTS: usize = 2;

    pub fn tcp() -> Self {
        CallTableConfig {
            transport: Transport::Tcp,
            max_in_flight: Self::DEFAULT_MAX_IN_FLIGHT,
            max_queued: Self::DEFAULT_MAX_QUEUED,
            major_timeout: Duration::from_secs(60),
            retrans: None,
            rtt: RttConfig::default(),
            cwnd_initial_requests: Self::DEFAULT_CWND_INITIAL_REQUESTS,
        }
    }

    pub fn udp() -> Self {
        CallTableConfig {
            transport: Transport::Udp,
            major_timeout: Duration::from_secs(10),
            ..Self::tcp()
        }
    }
}

/// Both the slot table and the waiting queue are full: try again after a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy;

impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RPC call table and queue are full")
    }
}

impl std::error::Error for Busy {}

/// A call answered by the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    pub xid: u32,
    pub class: TimerClass,
    pub result: Result<Reply, RpcError>,
    /// The RTT sample taken from this reply; `None` if the call was transmitted more than once
    /// (Karn's rule).
    pub rtt_sample: Option<Duration>,
    /// How many times the call was put on the wire.
    pub transmissions: u32,
    /// Time from `start_call` to the reply, queueing included.
    pub elapsed: Duration,
}

/// What [`CallTable::handle_record`] made of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// A reply: the call it completed, if any.
    Reply(Option<Completed>),
    /// A CALL from the peer: answer it through the callback service.
    Call(Vec<Bytes>),
}

/// Something the driver must act on or log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// First major timeout of an episode: log "server not responding".
    NotResponding,
    /// First reply after [`Event::NotResponding`]: log "server OK".
    Ok,
    /// TCP: close the connection and connect again, then call [`CallTable::handle_connected`].
    /// The table already considers the connection gone.
    Reconnect,
    /// Soft mode: the call failed without a reply. Its slot is free.
    Failed { xid: u32, error: RpcError },
}

/// Counters, for `sluice stats` and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallStats {
    pub calls_started: u64,
    pub calls_completed: u64,
    pub busy_refusals: u64,
    pub transmissions: u64,
    pub retransmissions: u64,
    /// UDP retransmit timer expiries.
    pub minor_timeouts: u64,
    pub major_timeouts: u64,
    pub reconnects_requested: u64,
    pub disconnects: u64,
    pub soft_failures: u64,
    pub cancelled: u64,
    /// Replies whose XID matched no outstanding transmitted call (late duplicates, mostly).
    pub unknown_xid_replies: u64,
    /// Records that were neither replies nor calls.
    pub garbage_replies: u64,
    /// CALL records from the server (backchannel callbacks, see [`crate::duplex`]): not
    /// replies, but not garbage either; [`CallTable::handle_record`] hands them back to the
    /// driver for its callback service.
    pub calls_received: u64,
    /// UDP congestion window: additive increases, halvings (one per loss event), and replies
    /// that would have grown a full window but found a standing queue.
    pub cwnd_increases: u64,
    pub cwnd_reductions: u64,
    pub cwnd_holds: u64,
}

impl CallStats {
    /// The counters of two call tables added up (a client with several connections).
    pub fn plus(&self, o: &CallStats) -> CallStats {
        CallStats {
            calls_started: self.calls_started + o.calls_started,
            calls_completed: self.calls_completed + o.calls_completed,
            busy_refusals: self.busy_refusals + o.busy_refusals,
            transmissions: self.transmissions + o.transmissions,
            retransmissions: self.retransmissions + o.retransmissions,
            minor_timeouts: self.minor_timeouts + o.minor_timeouts,
            major_timeouts: self.major_timeouts + o.major_timeouts,
            reconnects_requested: self.reconnects_requested + o.reconnects_requested,
            disconnects: self.disconnects + o.disconnects,
            soft_failures: self.soft_failures + o.soft_failures,
            cancelled: self.cancelled + o.cancelled,
            unknown_xid_replies: self.unknown_xid_replies + o.unknown_xid_replies,
            garbage_replies: self.garbage_replies + o.garbage_replies,
            calls_received: self.calls_received + o.calls_received,
            cwnd_increases: self.cwnd_increases + o.cwnd_increases,
            cwnd_reductions: self.cwnd_reductions + o.cwnd_reductions,
            cwnd_holds: self.cwnd_holds + o.cwnd_holds,
        }
    }
}

/// The client call table. See the module docs.
#[derive(Debug)]
pub struct CallTable {
    config: CallTableConfig,
    rtt: RttEstimator,
    /// Every call not yet completed, waiting or in a slot.
    calls: HashMap<u32, Call>,
    /// XIDs of calls waiting for a slot, in start order.
    waiting: VecDeque<u32>,
    /// XIDs of slotted calls to (re)transmit, in order; stale entries are skipped.
    send_queue: VecDeque<u32>,
    /// UDP: calls whose retransmit timer expired, sent before anything in `send_queue`.
    resend_queue: VecDeque<u32>,
    /// UDP congestion window (unused over TCP).
    cwnd: Cwnd,
    in_flight: usize,
    connected: bool,
    /// Incremented on each (re)connection; asserts the TCP no-retransmit rule.
    connection_epoch: u64,
    not_responding: bool,
    next_xid: u32,
    next_seq: u64,
    events: VecDeque<Event>,
    stats: CallStats,
}

#[derive(Debug)]
struct Call {
    /// Start order, for deterministic iteration.
    seq: u64,
    class: TimerClass,
    /// The whole RPC message, kept for retransmission (reference-counted, not copied).
    message: Vec<Bytes>,
    started: Instant,
    in_slot: bool,
    /// Queued in `send_queue` for (re)transmission.
    needs_send: bool,
    transmissions: u32,
    last_sent: Option<Instant>,
    sent_epoch: u64,
    /// UDP: occupies the congestion window (transmitted, no reply or timeout since).
    in_cwnd: bool,
    /// UDP: `Cwnd::transmissions` when this call was last transmitted.
    cwnd_tx_seq: u64,
    /// UDP retransmit timer expiries of this call.
    timeouts: u32,
    /// UDP only: when to retransmit.
    retransmit_at: Option<Instant>,
    /// When the next major timeout falls (set once the call has a slot).
    major_at: Option<Instant>,
    major_timeouts: u32,
}

impl CallTable {
    /// A table whose first XID is `xid_seed`. For TCP the connection is assumed to be up; if
    /// it is not yet, call [`CallTable::handle_disconnect`] first.
    pub fn new(config: CallTableConfig, xid_seed: u32) -> Self {
        assert!(config.max_in_flight >= 1, "max_in_flight is 0");
        assert!(config.retrans != Some(0), "soft mode needs retrans >= 1");
        CallTable {
            rtt: RttEstimator::new(config.rtt),
            config,
            calls: HashMap::new(),
            waiting: VecDeque::new(),
            send_queue: VecDeque::new(),
            resend_queue: VecDeque::new(),
            cwnd: Cwnd::new(config.cwnd_initial_requests, config.max_in_flight),
            in_flight: 0,
            connected: true,
            connection_epoch: 0,
            not_responding: false,
            next_xid: xid_seed,
            next_seq: 0,
            events: VecDeque::new(),
            stats: CallStats::default(),
        }
    }

    // --- getters ---------------------------------------------------------------------------

    pub fn config(&self) -> &CallTableConfig {
        &self.config
    }
    pub fn rtt(&self) -> &RttEstimator {
        &self.rtt
    }
    pub fn stats(&self) -> &CallStats {
        &self.stats
    }
    /// Calls holding a slot.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }
    /// UDP: the congestion window, in requests. Over TCP: `max_in_flight`.
    pub fn cwnd(&self) -> usize {
        match self.config.transport {
            Transport::Udp => self.cwnd.window_requests,
            Transport::Tcp => self.config.max_in_flight,
        }
    }
    /// UDP: calls on the wire counted against the congestion window. Always 0 over TCP.
    pub fn in_cwnd(&self) -> usize {
        self.cwnd.used_requests
    }
    /// Calls waiting for a slot.
    pub fn queued(&self) -> usize {
        self.waiting.len()
    }
    pub fn is_connected(&self) -> bool {
        self.connected
    }
    /// True between [`Event::NotResponding`] and [`Event::Ok`].
    pub fn is_not_responding(&self) -> bool {
        self.not_responding
    }

    // --- commands --------------------------------------------------------------------------

    /// Starts a call and returns its XID. `args` is the XDR-encoded argument list (its segments
    /// are sent as they are, without copying). The call gets a slot now or waits in the bounded
    /// queue; when both are full it is refused with [`Busy`].
    pub fn start_call(
        &mut self,
        now: Instant,
        proc_id: ProcId,
        cred: &OpaqueAuth,
        args: Vec<Bytes>,
        class: TimerClass,
    ) -> Result<u32, Busy> {
        let slot_free = self.in_flight < self.config.max_in_flight && self.waiting.is_empty();
        if !slot_free && self.waiting.len() >= self.config.max_queued {
            self.stats.busy_refusals += 1;
            return Err(Busy);
        }
        let xid = self.alloc_xid();
        let call = Call {
            seq: self.next_seq,
            class,
            message: build_call(xid, proc_id, cred, args),
            started: now,
            in_slot: false,
            needs_send: false,
            transmissions: 0,
            last_sent: None,
            sent_epoch: 0,
            in_cwnd: false,
            cwnd_tx_seq: 0,
            timeouts: 0,
            retransmit_at: None,
            major_at: None,
            major_timeouts: 0,
        };
        self.next_seq += 1;
        self.calls.insert(xid, call);
        self.stats.calls_started += 1;
        if slot_free {
            self.admit(now, xid);
        } else {
            self.waiting.push_back(xid);
        }
        Ok(xid)
    }

    /// Forgets a call (the caller gave up on it). A later reply counts as an unknown XID.
    /// Returns false if no such call is outstanding.
    pub fn cancel(&mut self, now: Instant, xid: u32) -> bool {
        let Some(call) = self.calls.remove(&xid) else {
            return false;
        };
        if call.in_cwnd {
            self.cwnd.release();
        }
        if call.in_slot {
            self.free_slot(now);
        } else {
            self.waiting.retain(|&x| x != xid);
        }
        self.stats.cancelled += 1;
        true
    }

    // --- inputs ----------------------------------------------------------------------------

    /// Sorts a record that arrived on the connection: a REPLY goes through
    /// [`CallTable::handle_reply`]; a CALL (the server calling back, RFC 8881 §2.10.3.1) is
    /// counted and handed back for the driver's callback service, never matched against our
    /// calls (the server's XIDs are its own, see [`crate::duplex`]).
    pub fn handle_record(&mut self, now: Instant, segments: Vec<Bytes>) -> Received {
        match classify(&segments) {
            MsgKind::Call { .. } => {
                self.stats.calls_received += 1;
                Received::Call(segments)
            }
            _ => Received::Reply(self.handle_reply(now, segments)),
        }
    }

    /// Matches a reply record to its call. Returns `None` for records that complete nothing
    /// (unknown XIDs, late duplicates, non-replies), which are counted in [`CallStats`]; a
    /// CALL given here is counted in `calls_received` (use [`CallTable::handle_record`] to
    /// get it back).
    pub fn handle_reply(&mut self, now: Instant, segments: Vec<Bytes>) -> Option<Completed> {
        let xid = match classify(&segments) {
            MsgKind::Reply { xid } => xid,
            MsgKind::Call { .. } => {
                self.stats.calls_received += 1;
                return None;
            }
            MsgKind::Garbage => {
                self.stats.garbage_replies += 1;
                return None;
            }
        };
        match self.calls.get(&xid) {
            Some(call) if call.in_slot && call.transmissions > 0 => {}
            _ => {
                self.stats.unknown_xid_replies += 1;
                return None;
            }
        }
        let call = self.calls.remove(&xid).expect("checked above");
        let result = decode_reply(segments);
        let last_sent = call.last_sent.expect("transmitted calls have a send time");
        let rtt_sample = self
            .rtt
            .observe(call.class, last_sent, now, call.transmissions);
        if self.config.transport == Transport::Udp {
            self.cwnd
                .on_reply(now, call.in_cwnd, rtt_sample, &mut self.stats);
        }
        if self.not_responding {
            self.not_responding = false;
            self.events.push_back(Event::Ok);
        }
        self.stats.calls_completed += 1;
        self.free_slot(now);
        Some(Completed {
            xid,
            class: call.class,
            result,
            rtt_sample,
            transmissions: call.transmissions,
            elapsed: now.saturating_duration_since(call.started),
        })
    }

    /// Runs the timers that are due: UDP retransmissions, major timeouts (not-responding
    /// events, TCP reconnects, soft failures).
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut due: Vec<(u64, u32)> = self
            .calls
            .iter()
            .filter(|(_, c)| {
                c.in_slot
                    && (c.major_at.is_some_and(|t| t <= now)
                        || c.retransmit_at.is_some_and(|t| t <= now))
            })
            .map(|(&xid, c)| (c.seq, xid))
            .collect();
        due.sort_unstable();
        for (_, xid) in due {
            if self.major_due(now, xid) && !self.major_timeout(now, xid) {
                continue; // the call failed
            }
            self.minor_due(now, xid);
        }
    }

    /// The connection broke (TCP). Outstanding calls will be resent, with their XIDs, after
    /// [`CallTable::handle_connected`]. Idempotent; a no-op for UDP.
    pub fn handle_disconnect(&mut self, _now: Instant) {
        if self.config.transport == Transport::Udp || !self.connected {
            return;
        }
        self.stats.disconnects += 1;
        self.disconnect();
    }

    /// A (new) connection is up (TCP): every outstanding call is queued for transmission.
    pub fn handle_connected(&mut self, _now: Instant) {
        if self.config.transport == Transport::Udp || self.connected {
            return;
        }
        self.connected = true;
        self.connection_epoch += 1;
    }

    // --- outputs ---------------------------------------------------------------------------

    /// The next message to send, if any. A returned message counts as sent at `now`.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        if !self.connected {
            return None;
        }
        let udp = self.config.transport == Transport::Udp;
        loop {
            if udp && !self.cwnd.has_room() {
                return None; // the call stays queued until a reply or a timeout makes room
            }
            let xid = self
                .resend_queue
                .pop_front()
                .or_else(|| self.send_queue.pop_front())?;
            let Some(call) = self.calls.get_mut(&xid) else {
                continue; // completed or cancelled while queued
            };
            if !call.needs_send {
                continue;
            }
            let is_retransmit = call.transmissions > 0;
            debug_assert!(
                self.config.transport == Transport::Udp
                    || !is_retransmit
                    || call.sent_epoch != self.connection_epoch,
                "TCP retransmission on the connection that carried the call"
            );
            call.needs_send = false;
            call.transmissions += 1;
            call.last_sent = Some(now);
            call.sent_epoch = self.connection_epoch;
            match self.config.transport {
                Transport::Udp => {
                    let rto = self.rtt.rto_with_backoff(call.class, call.timeouts);
                    call.retransmit_at = Some(now + rto);
                    debug_assert!(!call.in_cwnd, "a call on the wire was queued again");
                    call.in_cwnd = true;
                    call.cwnd_tx_seq = self.cwnd.acquire();
                }
                // A fresh connection gets a fresh major timeout.
                Transport::Tcp => call.major_at = Some(now + self.config.major_timeout),
            }
            self.stats.transmissions += 1;
            if is_retransmit {
                self.stats.retransmissions += 1;
            }
            return Some(Transmit {
                xid,
                segments: call.message.clone(),
                is_retransmit,
            });
        }
    }

    /// When [`CallTable::handle_timeout`] should next run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.calls
            .values()
            .filter(|c| c.in_slot)
            .flat_map(|c| [c.retransmit_at, c.major_at])
            .flatten()
            .min()
    }

    /// The next event for the driver.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    // --- helpers ---------------------------------------------------------------------------

    fn alloc_xid(&mut self) -> u32 {
        // Outstanding calls are far fewer than 2^32, so this ends.
        loop {
            let xid = self.next_xid;
            self.next_xid = self.next_xid.wrapping_add(1);
            if !self.calls.contains_key(&xid) {
                return xid;
            }
        }
    }

    /// Gives a call a slot and queues it for transmission.
    fn admit(&mut self, now: Instant, xid: u32) {
        let call = self.calls.get_mut(&xid).expect("admitted call exists");
        debug_assert!(!call.in_slot);
        call.in_slot = true;
        call.needs_send = true;
        // The major timer covers waiting for a connection too, so soft calls fail even when
        // the server cannot be reached at all.
        call.major_at = Some(now + self.config.major_timeout);
        self.in_flight += 1;
        self.send_queue.push_back(xid);
    }

    fn free_slot(&mut self, now: Instant) {
        self.in_flight -= 1;
        while self.in_flight < self.config.max_in_flight {
            let Some(xid) = self.waiting.pop_front() else {
                break;
            };
            self.admit(now, xid);
        }
    }

    fn major_due(&self, now: Instant, xid: u32) -> bool {
        self.calls[&xid].major_at.is_some_and(|t| t <= now)
    }

    /// Handles a major timeout of one call; returns false if the call failed (soft mode).
    fn major_timeout(&mut self, now: Instant, xid: u32) -> bool {
        self.stats.major_timeouts += 1;
        let call = self.calls.get_mut(&xid).expect("due call exists");
        call.major_timeouts += 1;
        if self
            .config
            .retrans
            .is_some_and(|n| call.major_timeouts >= n)
        {
            if self.calls.remove(&xid).is_some_and(|c| c.in_cwnd) {
                self.cwnd.release();
            }
            self.stats.soft_failures += 1;
            self.events.push_back(Event::Failed {
                xid,
                error: RpcError::TimedOut,
            });
            self.free_slot(now);
            return false;
        }
        call.major_at = Some(now + self.config.major_timeout);
        if !self.not_responding {
            self.not_responding = true;
            self.events.push_back(Event::NotResponding);
        }
        if self.config.transport == Transport::Tcp && self.connected {
            self.stats.reconnects_requested += 1;
            self.events.push_back(Event::Reconnect);
            self.disconnect();
        }
        true
    }

    /// UDP: a retransmit timer expired; back off and queue the call for resending.
    fn minor_due(&mut self, now: Instant, xid: u32) {
        let call = self.calls.get_mut(&xid).expect("due call exists");
        if call.retransmit_at.is_none_or(|t| t > now) {
            return;
        }
        debug_assert_eq!(self.config.transport, Transport::Udp);
        if call.timeouts == 0 {
            self.rtt.on_timeout(call.class);
        }
        call.timeouts += 1;
        call.retransmit_at = None;
        self.stats.minor_timeouts += 1;
        // The datagram (or its reply) is presumed lost: it leaves the window, and the loss
        // halves the window once per loss event.
        if call.in_cwnd {
            call.in_cwnd = false;
            self.cwnd.release();
        }
        self.cwnd.on_timeout(call.cwnd_tx_seq, &mut self.stats);
        if !call.needs_send {
            call.needs_send = true;
            self.resend_queue.push_back(xid);
        }
    }

    /// TCP: the connection is gone. Queue every slotted call for resending, in start order.
    fn disconnect(&mut self) {
        self.connected = false;
        let mut resend: Vec<(u64, u32)> = Vec::with_capacity(self.in_flight);
        for (&xid, call) in self.calls.iter_mut().filter(|(_, c)| c.in_slot) {
            call.needs_send = true;
            call.retransmit_at = None;
            resend.push((call.seq, xid));
        }
        resend.sort_unstable();
        self.send_queue = resend.into_iter().map(|(_, xid)| xid).collect();
    }
}

/// The UDP congestion window and the delay signals that hold its growth. See the module docs.
#[derive(Debug)]
struct Cwnd {
    window_requests: usize,
    window_max_requests: usize,
    /// Calls counted against the window.
    used_requests: usize,
    /// Replies to a full window since the last increase; at `window_requests`, +1.
    full_replies: usize,
    /// Transmissions so far; tags each one so that a timeout can tell whether it was sent
    /// before the last reduction.
    transmissions: u64,
    /// Timeouts of transmissions tagged below this belong to a loss event already answered.
    recovery_tx_seq: u64,
    rtt_min: WindowedExtreme,
    rtt_smoothed_ns: Option<u64>,
    rtt_jitter: RttJitter,
}

impl Cwnd {
    /// How long an RTT sample stays a candidate for the minimum: 10 s, as BBR's min_rtt and
    /// the readahead engine's; long enough to span many rounds, short enough to follow a route
    /// change.
    const RTT_MIN_WINDOW: Duration = Duration::from_secs(10);
    /// Late RTT = `rtt_min + JITTER_MULTIPLIER × rtt_jitter`: the mean absolute difference of
    /// two samples uniform over a width w is w / 3, so 3 spans the whole range.
    const JITTER_MULTIPLIER: u64 = 3;

    fn new(initial_requests: usize, max_requests: usize) -> Self {
        Cwnd {
            window_requests: initial_requests.clamp(1, max_requests),
            window_max_requests: max_requests,
            used_requests: 0,
            full_replies: 0,
            transmissions: 0,
            recovery_tx_seq: 0,
            rtt_min: WindowedExtreme::new(Extreme::Min),
            rtt_smoothed_ns: None,
            rtt_jitter: RttJitter::from_zero(),
        }
    }

    fn has_room(&self) -> bool {
        self.used_requests < self.window_requests
    }

    /// A call goes on the wire; returns its transmission tag.
    fn acquire(&mut self) -> u64 {
        self.used_requests += 1;
        self.transmissions += 1;
        self.transmissions
    }

    fn release(&mut self) {
        debug_assert!(self.used_requests > 0, "cwnd released more than acquired");
        self.used_requests -= 1;
    }

    /// A reply arrived for a call that did (`in_cwnd`) or did not (it had timed out) still
    /// occupy the window; `rtt_sample` is its valid RTT sample, if any.
    fn on_reply(
        &mut self,
        now: Instant,
        in_cwnd: bool,
        rtt_sample: Option<Duration>,
        stats: &mut CallStats,
    ) {
        if let Some(rtt) = rtt_sample {
            self.observe(now, rtt);
        }
        let was_full = self.used_requests >= self.window_requests;
        if in_cwnd {
            self.release();
        }
        if !was_full || self.window_requests >= self.window_max_requests {
            return;
        }
        if self.standing_queue() {
            stats.cwnd_holds += 1;
            return;
        }
        self.full_replies += 1;
        if self.full_replies >= self.window_requests {
            self.full_replies = 0;
            self.window_requests += 1;
            stats.cwnd_increases += 1;
        }
    }

    /// A retransmit timer of the transmission tagged `tx_seq` expired.
    fn on_timeout(&mut self, tx_seq: u64, stats: &mut CallStats) {
        if tx_seq < self.recovery_tx_seq {
            return; // same loss event as the last reduction
        }
        self.window_requests = (self.window_requests / 2).max(1);
        self.full_replies = 0;
        self.recovery_tx_seq = self.transmissions + 1;
        stats.cwnd_reductions += 1;
    }

    fn observe(&mut self, now: Instant, rtt: Duration) {
        let r = u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX);
        self.rtt_min.update(now, r, Self::RTT_MIN_WINDOW);
        // srtt = 7/8 srtt + 1/8 R (u128: no overflow); the jitter starts from 0 (RFC 3550).
        self.rtt_smoothed_ns = Some(match self.rtt_smoothed_ns {
            None => r,
            Some(srtt) => ((7 * u128::from(srtt) + u128::from(r)) / 8) as u64,
        });
        self.rtt_jitter.update(r);
    }

    /// True while the smoothed RTT sits above the unqueued late RTT by one more minimum RTT:
    /// `srtt >= 2 × rtt_min + 3 × jitter`.
    fn standing_queue(&self) -> bool {
        let (Some(srtt), Some(min)) = (self.rtt_smoothed_ns, self.rtt_min.get()) else {
            return false;
        };
        let jitter_ns = self.rtt_jitter.get_ns().unwrap_or(0);
        let late = min.saturating_add(jitter_ns.saturating_mul(Self::JITTER_MULTIPLIER));
        srtt >= late.saturating_add(min)
    }
}

#[cfg(test)]
mod tests;
