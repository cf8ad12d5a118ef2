use super::*;
use crate::server;
use crate::test_util::base_instant;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_xdr::rpc::{AcceptStat, AuthStat};
use sluice_xdr::DecodeError;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const NFS: ProcId = ProcId {
    prog: 100003,
    vers: 3,
    proc_: 1,
};
const S: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

fn args(v: u32) -> Vec<Bytes> {
    vec![Bytes::copy_from_slice(&v.to_be_bytes())]
}

fn start(t: &mut CallTable, now: Instant) -> u32 {
    t.start_call(now, NFS, &OpaqueAuth::none(), args(7), TimerClass::Getattr)
        .unwrap()
}

/// The reply a well-behaved server sends: SUCCESS and a result derived from the xid.
fn ok_reply(xid: u32) -> Vec<Bytes> {
    let mut w = server::success_header(xid);
    w.put_u32(xid ^ 0x5a5a_5a5a);
    w.into_segments()
}

fn drain_transmits(t: &mut CallTable, now: Instant) -> Vec<Transmit> {
    std::iter::from_fn(|| t.poll_transmit(now)).collect()
}

fn drain_events(t: &mut CallTable) -> Vec<Event> {
    std::iter::from_fn(|| t.poll_event()).collect()
}

// --- a small link simulator --------------------------------------------------------------

/// A virtual-time link to an echo server: each call that survives loss gets its reply after
/// an RTT drawn uniformly from `rtt`; a down server swallows calls.
struct Sim {
    now: Instant,
    rng: ChaCha8Rng,
    rtt: (Duration, Duration),
    loss: f64,
    server_up: bool,
    in_transit: BinaryHeap<Reverse<(Instant, u64, u32)>>,
    seq: u64,
    lost_datagrams: u64,
    events: Vec<Event>,
    completed: u64,
}

impl Sim {
    fn new(seed: u64, rtt: (Duration, Duration), loss: f64) -> Self {
        let seed = sluice_testkit::seed::seed("rpc::client simulation", seed);
        Sim {
            now: base_instant(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            rtt,
            loss,
            server_up: true,
            in_transit: BinaryHeap::new(),
            seq: 0,
            lost_datagrams: 0,
            events: Vec::new(),
            completed: 0,
        }
    }

    fn send(&mut self, t: &Transmit) {
        if !self.server_up {
            return;
        }
        // The call and the reply each cross the link once.
        for _ in 0..2 {
            if self.loss > 0.0 && self.rng.gen_bool(self.loss) {
                self.lost_datagrams += 1;
                return;
            }
        }
        let rtt = self.rng.gen_range(self.rtt.0..=self.rtt.1);
        self.seq += 1;
        self.in_transit
            .push(Reverse((self.now + rtt, self.seq, t.xid)));
    }

    /// Pumps transmits and events, then advances to the next arrival or timer (not beyond
    /// `limit`). Returns false when nothing is scheduled before `limit`.
    fn step(&mut self, t: &mut CallTable, limit: Instant) -> bool {
        while let Some(tx) = t.poll_transmit(self.now) {
            self.send(&tx);
        }
        self.events.extend(drain_events(t));
        let arrival = self.in_transit.peek().map(|r| r.0 .0);
        let Some(next) = [arrival, t.poll_timeout()].into_iter().flatten().min() else {
            return false;
        };
        if next > limit {
            self.now = limit;
            return false;
        }
        assert!(next >= self.now, "time went backwards");
        self.now = next;
        while self.in_transit.peek().is_some_and(|r| r.0 .0 <= self.now) {
            let Reverse((_, _, xid)) = self.in_transit.pop().unwrap();
            if let Some(c) = t.handle_reply(self.now, ok_reply(xid)) {
                let reply = c.result.expect("echo server replies SUCCESS");
                assert_eq!(reply.results().get_u32().unwrap(), xid ^ 0x5a5a_5a5a);
                self.completed += 1;
            }
        }
        if t.poll_timeout().is_some_and(|d| d <= self.now) {
            t.handle_timeout(self.now);
        }
        self.events.extend(drain_events(t));
        true
    }

    /// Runs `total` calls, keeping every slot busy, until all complete.
    fn run_calls(&mut self, t: &mut CallTable, total: u64) {
        let mut started = 0;
        let target = self.completed + total;
        let far = self.now + Duration::from_secs(1_000_000);
        while self.completed < target {
            while started < total && t.in_flight() < t.config().max_in_flight {
                start(t, self.now);
                started += 1;
            }
            assert!(self.step(t, far), "simulation stalled");
        }
    }

    fn run_until(&mut self, t: &mut CallTable, limit: Instant) {
        while self.step(t, limit) {}
    }
}

// --- scenarios -----------------------------------------------------------------------------

#[test]
fn jittery_lossless_link_causes_no_retransmissions() {
    // The third case takes rto_min away: the margin floor alone must prevent spurious
    // retransmissions (the Linux 2.4.21 ratchet).
    let udp_no_rto_min = CallTableConfig {
        rtt: RttConfig {
            rto_min: Duration::ZERO,
            ..RttConfig::default()
        },
        ..CallTableConfig::udp()
    };
    for (i, config) in [
        CallTableConfig::tcp(),
        CallTableConfig::udp(),
        udp_no_rto_min,
    ]
    .into_iter()
    .enumerate()
    {
        let mut sim = Sim::new(
            0xa11ce + i as u64,
            (200 * Duration::from_micros(1), 40 * MS),
            0.0,
        );
        let mut t = CallTable::new(config, 1);
        sim.run_calls(&mut t, 10_000);
        let s = t.stats();
        assert_eq!(s.calls_completed, 10_000);
        assert_eq!(s.retransmissions, 0, "{:?}: {s:?}", config.transport);
        assert_eq!(s.minor_timeouts + s.major_timeouts, 0);
        assert_eq!(s.unknown_xid_replies, 0);
        assert!(sim.events.is_empty());
    }
}

#[test]
fn udp_loss_costs_at_most_two_retransmissions_per_lost_datagram() {
    for seed in [1u64, 2, 3] {
        let mut sim = Sim::new(seed, (200 * Duration::from_micros(1), 40 * MS), 0.01);
        let mut t = CallTable::new(CallTableConfig::udp(), seed as u32);
        sim.run_calls(&mut t, 10_000);
        let s = *t.stats();
        println!("lost {} datagrams, {s:?}", sim.lost_datagrams);
        assert!(sim.lost_datagrams > 0);
        assert!(s.retransmissions <= 2 * sim.lost_datagrams);
        assert_eq!(s.calls_completed, 10_000);
    }
}

#[test]
fn tcp_slow_server_is_never_retransmitted_before_the_major_timeout() {
    let mut sim = Sim::new(7, (50 * S, 59 * S), 0.0);
    let mut t = CallTable::new(CallTableConfig::tcp(), 1);
    sim.run_calls(&mut t, 500);
    assert_eq!(t.stats().retransmissions, 0);
    assert_eq!(t.stats().major_timeouts, 0);
    assert!(sim.events.is_empty());
}

#[test]
fn tcp_disconnect_resends_outstanding_calls_once_with_the_same_xids() {
    let t0 = base_instant();
    let mut t = CallTable::new(CallTableConfig::tcp(), 1000);
    let xids: Vec<u32> = (0..10).map(|_| start(&mut t, t0)).collect();
    assert_eq!(xids, (1000..1010).collect::<Vec<_>>());
    let first = drain_transmits(&mut t, t0);
    assert_eq!(first.iter().map(|x| x.xid).collect::<Vec<_>>(), xids);
    assert!(first.iter().all(|x| !x.is_retransmit));
    for &xid in &xids[..3] {
        assert!(t.handle_reply(t0 + MS, ok_reply(xid)).is_some());
    }
    t.handle_disconnect(t0 + 2 * MS);
    t.handle_disconnect(t0 + 2 * MS); // idempotent
    let late = start(&mut t, t0 + 3 * MS);
    assert_eq!(
        t.poll_transmit(t0 + 3 * MS),
        None,
        "nothing goes out while down"
    );
    t.handle_connected(t0 + 4 * MS);
    let again = drain_transmits(&mut t, t0 + 4 * MS);
    let mut want: Vec<u32> = xids[3..].to_vec();
    want.push(late);
    assert_eq!(again.iter().map(|x| x.xid).collect::<Vec<_>>(), want);
    for tx in &again {
        assert_eq!(tx.is_retransmit, tx.xid != late);
        let orig = first.iter().find(|f| f.xid == tx.xid);
        if let Some(orig) = orig {
            assert_eq!(orig.segments, tx.segments, "same message, same xid");
        }
    }
    assert_eq!(t.poll_transmit(t0 + 5 * MS), None);
    assert_eq!(t.stats().retransmissions, 7);
    // Karn: the resent calls give no RTT sample.
    let c = t.handle_reply(t0 + 6 * MS, ok_reply(xids[5])).unwrap();
    assert_eq!(c.rtt_sample, None);
    assert_eq!(c.transmissions, 2);
    let c = t.handle_reply(t0 + 6 * MS, ok_reply(late)).unwrap();
    assert_eq!(c.rtt_sample, Some(2 * MS));
}

#[test]
fn tcp_major_timeout_requests_a_reconnect_then_resends() {
    let t0 = base_instant();
    let mut t = CallTable::new(CallTableConfig::tcp(), 1);
    let a = start(&mut t, t0);
    drain_transmits(&mut t, t0);
    let b = start(&mut t, t0 + S);
    drain_transmits(&mut t, t0 + S);
    assert_eq!(t.poll_timeout(), Some(t0 + 60 * S), "only the major timer");
    t.handle_timeout(t0 + 60 * S);
    assert_eq!(
        drain_events(&mut t),
        vec![Event::NotResponding, Event::Reconnect]
    );
    assert!(!t.is_connected());
    // b's major timeout falls while reconnecting: counted, but no second Reconnect.
    t.handle_timeout(t0 + 61 * S);
    assert_eq!(drain_events(&mut t), vec![]);
    t.handle_connected(t0 + 62 * S);
    let again = drain_transmits(&mut t, t0 + 62 * S);
    assert_eq!(again.iter().map(|x| x.xid).collect::<Vec<_>>(), vec![a, b]);
    assert!(again.iter().all(|x| x.is_retransmit));
    assert_eq!(t.poll_timeout(), Some(t0 + 122 * S));
    t.handle_reply(t0 + 63 * S, ok_reply(a)).unwrap();
    assert_eq!(drain_events(&mut t), vec![Event::Ok]);
    assert_eq!(t.stats().major_timeouts, 2);
}

#[test]
fn not_responding_and_ok_fire_once_per_episode() {
    let mut sim = Sim::new(11, (MS, 2 * MS), 0.0);
    let mut t = CallTable::new(CallTableConfig::udp(), 1);
    sim.run_calls(&mut t, 50);
    for episode in 0..2 {
        sim.server_up = false;
        for _ in 0..8 {
            start(&mut t, sim.now);
        }
        let down_until = sim.now + Duration::from_secs(100);
        sim.run_until(&mut t, down_until);
        assert!(t.stats().major_timeouts > 8, "several major timeouts");
        sim.server_up = true;
        let far = sim.now + Duration::from_secs(1000);
        while t.in_flight() > 0 {
            assert!(sim.step(&mut t, far));
        }
        assert_eq!(
            sim.events,
            vec![Event::NotResponding, Event::Ok],
            "episode {episode}"
        );
        sim.events.clear();
    }
}

#[test]
fn soft_mode_fails_after_retrans_major_timeouts() {
    let t0 = base_instant();
    for transport in [Transport::Tcp, Transport::Udp] {
        let config = CallTableConfig {
            transport,
            retrans: Some(2),
            major_timeout: 60 * S,
            ..CallTableConfig::tcp()
        };
        let mut t = CallTable::new(config, 1);
        let xid = start(&mut t, t0);
        let mut now = t0;
        let mut failed_at = None;
        while failed_at.is_none() {
            while t.poll_transmit(now).is_some() {}
            now = t.poll_timeout().expect("a timer is pending");
            t.handle_timeout(now);
            for ev in drain_events(&mut t) {
                match ev {
                    Event::Reconnect => t.handle_connected(now),
                    Event::Failed { xid: x, error } => {
                        assert_eq!((x, error), (xid, RpcError::TimedOut));
                        failed_at = Some(now);
                    }
                    Event::NotResponding => {}
                    Event::Ok => panic!("no reply was sent"),
                }
            }
        }
        assert_eq!(failed_at, Some(t0 + 120 * S), "{transport:?}");
        assert_eq!(t.in_flight(), 0);
        assert_eq!(t.stats().soft_failures, 1);
        assert_eq!(t.poll_timeout(), None);
        // A late reply is just an unknown xid.
        assert!(t.handle_reply(now, ok_reply(xid)).is_none());
        assert_eq!(t.stats().unknown_xid_replies, 1);
    }
}

#[test]
fn soft_calls_fail_even_when_never_connected() {
    let t0 = base_instant();
    let mut t = CallTable::new(
        CallTableConfig {
            retrans: Some(1),
            ..CallTableConfig::tcp()
        },
        1,
    );
    t.handle_disconnect(t0);
    let xid = start(&mut t, t0);
    assert_eq!(t.poll_timeout(), Some(t0 + 60 * S));
    t.handle_timeout(t0 + 60 * S);
    assert_eq!(
        drain_events(&mut t),
        vec![Event::Failed {
            xid,
            error: RpcError::TimedOut
        }]
    );
}

// --- unit behaviour ------------------------------------------------------------------------

#[test]
fn slots_then_queue_then_busy() {
    let t0 = base_instant();
    let mut t = CallTable::new(
        CallTableConfig {
            max_in_flight: 2,
            max_queued: 1,
            ..CallTableConfig::udp()
        },
        1,
    );
    let a = start(&mut t, t0);
    start(&mut t, t0);
    let c = start(&mut t, t0);
    assert_eq!((t.in_flight(), t.queued()), (2, 1));
    assert_eq!(
        t.start_call(t0, NFS, &OpaqueAuth::none(), args(1), TimerClass::Other),
        Err(Busy)
    );
    assert_eq!(drain_transmits(&mut t, t0).len(), 2);
    t.handle_reply(t0 + MS, ok_reply(a)).unwrap();
    assert_eq!((t.in_flight(), t.queued()), (2, 0));
    let tx = drain_transmits(&mut t, t0 + MS);
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].xid, c);
    assert_eq!(t.stats().busy_refusals, 1);
}

#[test]
fn xids_start_at_the_seed_wrap_and_skip_outstanding_ones() {
    let t0 = base_instant();
    let mut t = CallTable::new(CallTableConfig::udp(), u32::MAX);
    assert_eq!(start(&mut t, t0), u32::MAX);
    assert_eq!(start(&mut t, t0), 0);
    // Force the counter back onto an outstanding xid.
    t.next_xid = u32::MAX;
    assert_eq!(start(&mut t, t0), 1);
}

#[test]
fn call_message_is_header_then_args_zero_copy() {
    let t0 = base_instant();
    let mut t = CallTable::new(CallTableConfig::udp(), 42);
    let payload = Bytes::from(vec![9u8; 8192]);
    let cred = sluice_xdr::rpc::AuthSys {
        stamp: 1,
        machine_name: Bytes::from_static(b"h"),
        uid: 5,
        gid: 6,
        gids: vec![],
    }
    .to_opaque_auth();
    t.start_call(t0, NFS, &cred, vec![payload.clone()], TimerClass::Write)
        .unwrap();
    let tx = t.poll_transmit(t0).unwrap();
    assert!(tx.segments.iter().any(|s| s.as_ptr() == payload.as_ptr()));
    let server::CallParse::Call(call) = server::parse_call(&tx.segments) else {
        panic!("not a call")
    };
    assert_eq!(call.xid, 42);
    assert_eq!(call.cred.uid(), Some(5));
    assert_eq!((call.prog(), call.vers(), call.proc_()), (100003, 3, 1));
    assert_eq!(call.args(&tx.segments).remaining(), 8192);
}

#[test]
fn error_replies_map_to_rpc_errors() {
    let t0 = base_instant();
    let cases: Vec<(Vec<Bytes>, RpcError)> = vec![
        (server::prog_unavail(0), RpcError::ProgUnavail),
        (
            server::prog_mismatch(0, 2, 3),
            RpcError::ProgMismatch { low: 2, high: 3 },
        ),
        (server::proc_unavail(0), RpcError::ProcUnavail),
        (server::garbage_args(0), RpcError::GarbageArgs),
        (server::system_err(0), RpcError::SystemErr),
        (
            server::auth_error(0, AuthStat::TOOWEAK),
            RpcError::AuthError(AuthStat::TOOWEAK),
        ),
        (
            server::rpc_mismatch(0),
            RpcError::RpcMismatch { low: 2, high: 2 },
        ),
        (
            server::accepted_reply(0, AcceptStat(99), |_| {}),
            RpcError::BadReply(DecodeError::BadDiscriminant {
                what: "accept_stat",
                value: 99,
            }),
        ),
    ];
    let mut t = CallTable::new(CallTableConfig::udp(), 0);
    for (reply, want) in cases {
        let xid = start(&mut t, t0);
        drain_transmits(&mut t, t0);
        // Patch in the xid (the builders above used 0).
        let mut bytes: Vec<u8> = reply.iter().flat_map(|s| s.to_vec()).collect();
        bytes[..4].copy_from_slice(&xid.to_be_bytes());
        let c = t.handle_reply(t0, vec![Bytes::from(bytes)]).unwrap();
        assert_eq!(c.result, Err(want));
    }
    // A truncated reply header for a live xid fails the call.
    let xid = start(&mut t, t0);
    drain_transmits(&mut t, t0);
    let mut bytes = xid.to_be_bytes().to_vec();
    bytes.extend_from_slice(&[0, 0, 0, 1, 0, 0]);
    let c = t.handle_reply(t0, vec![Bytes::from(bytes)]).unwrap();
    assert_eq!(c.result, Err(RpcError::BadReply(DecodeError::Truncated)));
}

#[test]
fn stray_records_are_counted_not_matched() {
    let t0 = base_instant();
    let mut t = CallTable::new(CallTableConfig::udp(), 10);
    let xid = start(&mut t, t0);
    // Not yet transmitted: a reply cannot be for it.
    assert!(t.handle_reply(t0, ok_reply(xid)).is_none());
    drain_transmits(&mut t, t0);
    assert!(t.handle_reply(t0, ok_reply(xid + 1)).is_none());
    assert!(t
        .handle_reply(t0, vec![Bytes::from_static(b"\0\0")])
        .is_none());
    // A record with an undefined msg_type is garbage.
    assert!(t
        .handle_reply(t0, vec![Bytes::from_static(b"\0\0\0\x0a\0\0\0\x07")])
        .is_none());
    // A CALL with our xid is not a reply, and not garbage either: a callback.
    let call = vec![Bytes::from_static(b"\0\0\0\x0a\0\0\0\0")];
    assert!(t.handle_reply(t0, call.clone()).is_none());
    assert_eq!(t.handle_record(t0, call.clone()), Received::Call(call));
    let s = t.stats();
    assert_eq!((s.unknown_xid_replies, s.garbage_replies), (2, 2));
    assert_eq!(s.calls_received, 2);
    assert!(
        t.in_flight() == 1,
        "the call with that xid is still waiting"
    );
    assert!(t.handle_reply(t0, ok_reply(xid)).is_some());
}

#[test]
fn udp_retransmit_backs_off_and_obeys_karn() {
    let t0 = base_instant();
    let mut t = CallTable::new(CallTableConfig::udp(), 1);
    let xid = start(&mut t, t0);
    drain_transmits(&mut t, t0);
    let rto0 = Duration::from_millis(1100);
    assert_eq!(t.poll_timeout(), Some(t0 + rto0));
    t.handle_timeout(t0 + rto0);
    let tx = drain_transmits(&mut t, t0 + rto0);
    assert_eq!(tx.len(), 1);
    assert!(tx[0].is_retransmit && tx[0].xid == xid);
    assert_eq!(t.poll_timeout(), Some(t0 + 3 * rto0), "doubled");
    let c = t.handle_reply(t0 + rto0 + MS, ok_reply(xid)).unwrap();
    assert_eq!(c.rtt_sample, None);
    assert_eq!(t.rtt().backoff_shift(TimerClass::Getattr), 1);
    // The next call starts backed off; its clean reply resets the class.
    let y = start(&mut t, t0 + 2 * S);
    drain_transmits(&mut t, t0 + 2 * S);
    assert_eq!(t.poll_timeout(), Some(t0 + 2 * S + 2 * rto0));
    let c = t.handle_reply(t0 + 2 * S + 3 * MS, ok_reply(y)).unwrap();
    assert_eq!(c.rtt_sample, Some(3 * MS));
    assert_eq!(t.rtt().backoff_shift(TimerClass::Getattr), 0);
}

/// Regression (simulator seed 5, `udp_bulk_reads_do_not_overflow_a_default_queue`): over
/// UDP only the congestion window's calls go on the wire; it grows by one per window of
/// replies, halves once per loss event, and retransmissions count against it.
#[test]
fn udp_congestion_window_grows_additively_and_halves_once_per_loss_event() {
    let t0 = base_instant();
    let mut t = CallTable::new(CallTableConfig::udp(), 1);
    let xids: Vec<u32> = (0..40).map(|_| start(&mut t, t0)).collect();
    assert_eq!(t.in_flight(), 40);
    let sent = drain_transmits(&mut t, t0);
    assert_eq!(sent.len(), 2, "the window starts at 2");
    assert_eq!((t.cwnd(), t.in_cwnd()), (2, 2));
    // Reply to everything in turn at a steady 5 ms: +1 per window of replies.
    let mut now = t0;
    let mut next = 0;
    while t.cwnd() < 6 {
        now += 5 * MS;
        for tx in drain_transmits(&mut t, now) {
            assert!(!tx.is_retransmit);
        }
        let xid = xids[next];
        next += 1;
        t.handle_reply(now, ok_reply(xid)).unwrap();
    }
    assert_eq!(
        next,
        2 + 3 + 4 + 5,
        "2 replies at cwnd 2, 3 at 3, 4 at 4, 5 at 5"
    );
    let sent = drain_transmits(&mut t, now);
    assert_eq!(t.in_cwnd(), 6, "{sent:?}");
    // Every call on the wire is lost: their timers expire one after another, one halving.
    let mut rto = now;
    while t.in_cwnd() > 0 {
        rto = t.poll_timeout().unwrap();
        t.handle_timeout(rto);
    }
    assert_eq!(t.cwnd(), 3);
    assert_eq!(t.stats().cwnd_reductions, 1);
    // Only 3 go out again, retransmissions first.
    let again = drain_transmits(&mut t, rto);
    assert_eq!(again.len(), 3);
    assert!(again.iter().all(|x| x.is_retransmit));
    // TCP has no window beyond the slots.
    let mut tcp = CallTable::new(CallTableConfig::tcp(), 1);
    (0..40).for_each(|_| {
        start(&mut tcp, t0);
    });
    assert_eq!(drain_transmits(&mut tcp, t0).len(), 40);
}

#[test]
fn udp_congestion_window_holds_on_a_standing_queue() {
    let t0 = base_instant();
    let mut t = CallTable::new(CallTableConfig::udp(), 1);
    let mut now = t0;
    // A 10 ms path: the window grows with each window of replies...
    for _ in 0..20 {
        start(&mut t, now);
    }
    let mut sent_at: VecDeque<(u32, Instant)> = VecDeque::new();
    let mut rtt = 10 * MS;
    for round in 0..400 {
        for tx in drain_transmits(&mut t, now) {
            sent_at.push_back((tx.xid, now));
        }
        let (xid, at) = sent_at.pop_front().unwrap();
        now = now.max(at + rtt);
        t.handle_reply(now, ok_reply(xid)).unwrap();
        start(&mut t, now);
        // ...until every reply waits 30 ms more in a queue of our own.
        if round == 100 {
            rtt = 40 * MS;
        }
    }
    let s = t.stats();
    assert!(s.cwnd_holds > 0, "{s:?}");
    assert!(t.cwnd() < 20, "{}", t.cwnd());
    assert_eq!(s.retransmissions, 0);
}

#[test]
fn cancel_frees_the_slot() {
    let t0 = base_instant();
    let mut t = CallTable::new(
        CallTableConfig {
            max_in_flight: 1,
            ..CallTableConfig::tcp()
        },
        1,
    );
    let a = start(&mut t, t0);
    let b = start(&mut t, t0);
    assert!(t.cancel(t0, a));
    assert!(!t.cancel(t0, a));
    let tx = drain_transmits(&mut t, t0);
    assert_eq!(tx.iter().map(|x| x.xid).collect::<Vec<_>>(), vec![b]);
}
