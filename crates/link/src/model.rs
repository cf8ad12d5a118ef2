//! The link model: one direction of an emulated network path, as pure code.
//!
//! # What is modelled
//!
//! A real path between two hosts has a *bottleneck*: the slowest hop, with a
//! queue in front of it. Everything the emulator promises follows from
//! modelling exactly that hop plus the propagation delay behind it:
//!
//! ```text
//!             offer(now, len)
//!                   |
//!                   v
//!   +---------------------------------+     +-------------+     +---------------------+
//!   | bottleneck queue                | --> | serializer  | --> | wire: one-way delay | --> poll_deliver(now)
//!   | bounded by queue_bytes_max      |     | rate bytes/s|     | (+ jitter, reorder, |
//!   | full -> Offer::Full             |     | one segment |     |  loss, duplication) |
//!   | (TCP: backpressure, UDP: drop)  |     | at a time   |     |                     |
//!   +---------------------------------+     +-------------+     +---------------------+
//!        queue_bytes(now)                 free_at: Instant       heap ordered by (at, seq)
//! ```
//!
//! * **Serializer.** The link sends one segment at a time at `rate_bytes_per_sec`.
//!   A segment offered at `now` starts at `max(now, free_at)` and finishes
//!   `len / rate` later; `free_at` becomes that finish time. This is a token
//!   bucket whose depth is one segment: it never bursts above the rate, which is
//!   what a real serializing link does. The division keeps its remainder
//!   (`serializer_remainder`), so a long stream does not drift by rounding: after
//!   `n` bytes the serializer has advanced exactly `n / rate` seconds, to the
//!   nanosecond.
//! * **Queue.** Bytes that have been offered but have not finished serializing
//!   sit in the bottleneck queue. An offer that would push the queue above
//!   `queue_bytes_max` gets [`Offer::Full`]; the TCP driver stops reading from its
//!   source (backpressure, so the sender blocks as it would behind a full router
//!   queue) and the UDP driver drops the datagram (tail drop). An empty queue
//!   always accepts one segment, so a bound smaller than a datagram cannot wedge
//!   the link. With an unlimited rate nothing ever waits for the serializer, so
//!   the bound applies to every byte the direction holds (queue and wire).
//! * **Wire.** A segment leaves the serializer and arrives `delay_one_way` later,
//!   where the one-way delay is `rtt / 2` (the reverse direction gets the odd
//!   nanosecond). Jitter adds a uniform sample in `[-jitter, +jitter]` (jitter is
//!   clamped to the one-way delay, so delay never goes negative and the mean
//!   stays `rtt / 2`). In [`Mode::Stream`] a segment is never delivered before
//!   its predecessor (a TCP byte stream cannot reorder), so jitter there only
//!   stretches gaps. In [`Mode::Datagram`] jitter may reorder, and so may
//!   `reorder_ratio`: such a datagram is held back an extra `reorder_delay`, so
//!   that datagrams sent in that gap overtake it. `loss_ratio` drops a datagram
//!   after it has used the serializer (it was sent, then lost), `dup_ratio`
//!   delivers a second copy right after the first.
//! * **Faults.** `reset_after_bytes = N`: the direction accepts exactly `N`
//!   bytes (later offers get [`Offer::Closed`]) and, right after delivering the
//!   segment holding byte `N`, yields [`Event::Reset`]; the driver then aborts the
//!   connection. [`Stall`] makes the serializer go dark for a duration, either
//!   once `N` bytes have been serialized or at a fixed time after creation: bytes
//!   behind the stall wait in the queue (and so fill it and push back).
//!   [`LinkDirection::segment_limit_bytes`] tells a stream driver how to cut its
//!   segments so that a fault boundary always ends a segment, which makes the
//!   fault points exact to the byte.
//!
//! # What is not modelled
//!
//! Only the bottleneck hop: no cross traffic, no per-hop queues, no ECN, no
//! MTU-driven fragmentation. The proxy around this model terminates TCP, so the
//! endpoints' congestion control sees the link through the proxy's
//! backpressure, not through its own round trips (see `proxy`).
//!
//! # Time and randomness
//!
//! Every method takes `now`; nothing here reads a clock. Randomness (jitter,
//! loss, duplication, reordering) comes from a ChaCha8 generator seeded from
//! [`LinkConfig::seed`] and the [`Direction`], so a run is a pure function of
//! its configuration, its seed and the sequence of calls. The payload type `P`
//! is opaque: the proxy stores `Bytes`, simulations store `()` or ids.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The queue bound used when [`LinkConfig::queue_bytes_max`] is `None` and the
/// bandwidth-delay product is smaller: 1 MiB.
///
/// Why a floor: the classic rule sizes a router buffer at one BDP (Villamizar &
/// Song, 1994), which lets a single TCP flow keep the link busy through a
/// window halving. On loopback-scale paths (sub-millisecond RTT) one BDP is
/// smaller than what the real-time driver reads in one wake-up, and the driver
/// can be late by a timer tick; at 1 GB/s a 1 ms hiccup is 1 MB. A queue below
/// that would let the link idle because of the *driver*, not the model, and the
/// measured rate would fall short. Raising it adds latency under load
/// (bufferbloat); lowering it risks the idling just described.
pub const QUEUE_BYTES_FLOOR: u64 = 1 << 20;

/// Largest segment the model cuts a stream into: 64 KiB, the largest TCP
/// segment with TSO/GRO and the size a UDP datagram cannot exceed anyway.
pub const SEGMENT_BYTES_MAX: u32 = 64 * 1024;

/// Smallest default segment: an Ethernet MTU.
pub const SEGMENT_BYTES_MIN: u32 = 1500;

/// Configuration of one emulated path (both directions).
#[derive(Clone, Debug, PartialEq)]
pub struct LinkConfig {
    /// Round-trip propagation delay; each direction gets half. Default 0.
    pub rtt: Duration,
    /// Maximum jitter of each one-way delay (uniform in `[-jitter, +jitter]`,
    /// clamped to the one-way delay). Default 0.
    pub jitter: Duration,
    /// Bottleneck rate in bytes per second; 0 means unlimited. Default 0.
    pub rate_bytes_per_sec: u64,
    /// Bound of the bottleneck queue in bytes. `None`: `max(BDP, 1 MiB)`, see
    /// [`QUEUE_BYTES_FLOOR`].
    pub queue_bytes_max: Option<u64>,
    /// Size of the segments a stream is cut into. `None`: the bytes the link
    /// carries in 100 µs, clamped to `[1500, 64 KiB]`, see
    /// [`LinkConfig::segment_bytes`].
    pub segment_bytes: Option<u32>,
    /// Datagram mode: probability that a datagram is lost. Default 0.
    pub loss_ratio: f64,
    /// Datagram mode: probability that a datagram is delivered twice. Default 0.
    pub dup_ratio: f64,
    /// Datagram mode: probability that a datagram is held back by
    /// `reorder_delay`. Default 0.
    pub reorder_ratio: f64,
    /// How long a reordered datagram is held back. Default 1 ms.
    pub reorder_delay: Duration,
    /// Accept exactly this many bytes per direction, then reset. Default none.
    pub reset_after_bytes: Option<u64>,
    /// Make the serializer go dark once. Default none.
    pub stall: Option<Stall>,
    /// Seed of the per-direction random generators. Default 0.
    pub seed: u64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            rtt: Duration::ZERO,
            jitter: Duration::ZERO,
            rate_bytes_per_sec: 0,
            queue_bytes_max: None,
            segment_bytes: None,
            loss_ratio: 0.0,
            dup_ratio: 0.0,
            reorder_ratio: 0.0,
            reorder_delay: Duration::from_millis(1),
            reset_after_bytes: None,
            stall: None,
            seed: 0,
        }
    }
}

impl LinkConfig {
    /// Bandwidth-delay product in bytes (0 for an unlimited rate).
    pub fn bdp_bytes(&self) -> u64 {
        mul_rate(self.rate_bytes_per_sec, self.rtt)
    }

    /// The queue bound in effect: the configured one, or `max(BDP, 1 MiB)`.
    pub fn queue_bytes(&self) -> u64 {
        self.queue_bytes_max
            .unwrap_or_else(|| self.bdp_bytes().max(QUEUE_BYTES_FLOOR))
            .max(1)
    }

    /// The segment size in effect. The default is the bytes serialized in
    /// 100 µs: small enough that cutting a stream into segments adds at most
    /// 0.1 ms of store-and-forward delay, large enough that a fast link does not
    /// cost the driver more than ~10 000 segments a second. Clamped to
    /// `[1500, 64 KiB]`; 64 KiB for an unlimited rate.
    pub fn segment_bytes(&self) -> u32 {
        self.segment_bytes
            .unwrap_or_else(|| {
                if self.rate_bytes_per_sec == 0 {
                    SEGMENT_BYTES_MAX
                } else {
                    let per_100us = self.rate_bytes_per_sec / 10_000;
                    per_100us.clamp(SEGMENT_BYTES_MIN.into(), SEGMENT_BYTES_MAX.into()) as u32
                }
            })
            .clamp(1, SEGMENT_BYTES_MAX)
    }

    /// One-way propagation delay of `direction`.
    pub fn delay_one_way(&self, direction: Direction) -> Duration {
        let forward = self.rtt / 2;
        match direction {
            Direction::Forward => forward,
            Direction::Reverse => self.rtt - forward,
        }
    }
}

/// A one-shot outage of the serializer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    /// When the outage begins.
    pub trigger: StallTrigger,
    /// How long the serializer stays dark.
    pub duration: Duration,
}

/// When a [`Stall`] begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StallTrigger {
    /// Right after the serializer has finished the first `n` bytes.
    AfterBytes(u64),
    /// At this offset from the creation of the direction.
    AfterTime(Duration),
}

/// Which half of the path a [`LinkDirection`] models.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From the connecting side (the proxy's client) to the target.
    Forward,
    /// From the target back to the client.
    Reverse,
}

/// How the direction treats order and faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A byte stream (TCP): FIFO delivery; loss, duplication and reordering
    /// ratios are ignored (the proxy's TCP legs would repair them anyway).
    Stream,
    /// Datagrams (UDP): jitter may reorder; loss, duplication, reordering apply.
    Datagram,
}

/// Result of [`LinkDirection::offer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offer {
    /// The segment is queued and will be delivered.
    Queued,
    /// The segment used the link and was lost (datagram mode).
    Lost,
    /// The queue has no room: back off (stream) or drop (datagram).
    Full,
    /// The direction has accepted `reset_after_bytes` and takes no more.
    Closed,
}

/// Output of [`LinkDirection::poll_deliver`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event<P> {
    /// Hand this segment to the far end now.
    Deliver(P),
    /// The `reset_after_bytes` point has been delivered: abort the connection.
    Reset,
}

/// Counters of one direction, for logs and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectionStats {
    /// Segments accepted by [`LinkDirection::offer`] (including lost ones).
    pub offered_segments: u64,
    /// Bytes accepted by [`LinkDirection::offer`] (including lost ones).
    pub offered_bytes: u64,
    /// Segments handed out by [`LinkDirection::poll_deliver`] (with duplicates).
    pub delivered_segments: u64,
    /// Bytes handed out by [`LinkDirection::poll_deliver`] (with duplicates).
    pub delivered_bytes: u64,
    /// Offers refused with [`Offer::Full`].
    pub full_segments: u64,
    /// Segments lost on the wire.
    pub lost_segments: u64,
    /// Extra copies scheduled.
    pub duplicated_segments: u64,
    /// Segments held back by the reorder delay.
    pub reordered_segments: u64,
    /// Highest queue occupancy seen, in bytes.
    pub queue_bytes_peak: u64,
}

/// One direction of an emulated path. See the module documentation.
#[derive(Debug)]
pub struct LinkDirection<P> {
    mode: Mode,
    rate_bytes_per_sec: u64,
    queue_bytes_max: u64,
    segment_bytes: u32,
    delay_one_way: Duration,
    jitter: Duration,
    loss_ratio: f64,
    dup_ratio: f64,
    reorder_ratio: f64,
    reorder_delay: Duration,
    reset_after_bytes: Option<u64>,
    stall: Option<Stall>,
    created_at: Instant,
    rng: ChaCha8Rng,

    /// When the serializer finishes its last accepted segment.
    free_at: Instant,
    /// Nanosecond fraction carried between segments, in units of 1/rate ns.
    serializer_remainder: u128,
    /// Segments not yet serialized: (finish time, bytes).
    serializing: VecDeque<(Instant, u64)>,
    /// Sum of the bytes in `serializing`.
    serializing_bytes: u64,
    /// Segments on the wire, earliest first.
    wire: BinaryHeap<Reverse<InFlight<P>>>,
    /// Sum of the bytes in `wire`.
    wire_bytes: u64,
    /// Sequence number of the next scheduled delivery (ties break FIFO).
    next_seq: u64,
    /// Latest delivery time scheduled (stream FIFO clamp).
    last_at: Instant,
    /// Sequence number of the delivery after which to reset.
    reset_seq: Option<u64>,
    /// Set once the reset segment has been delivered; taken by poll_deliver.
    reset_due: bool,
    /// Whether the stall has been scheduled (byte trigger) or is past.
    stall_done: bool,
    stats: DirectionStats,
}

impl<P: Clone> LinkDirection<P> {
    /// A direction of the path `config`, created at `now`.
    pub fn new(config: &LinkConfig, direction: Direction, mode: Mode, now: Instant) -> Self {
        let delay_one_way = config.delay_one_way(direction);
        let stream_salt = match direction {
            Direction::Forward => 0x5eed_f0f0_0000_0001,
            Direction::Reverse => 0x5eed_f0f0_0000_0002,
        };
        let ratio = |r: f64| {
            if r.is_finite() {
                r.clamp(0.0, 1.0)
            } else {
                0.0
            }
        };
        Self {
            mode,
            rate_bytes_per_sec: config.rate_bytes_per_sec,
            queue_bytes_max: config.queue_bytes(),
            segment_bytes: config.segment_bytes(),
            delay_one_way,
            jitter: config.jitter.min(delay_one_way),
            loss_ratio: ratio(config.loss_ratio),
            dup_ratio: ratio(config.dup_ratio),
            reorder_ratio: ratio(config.reorder_ratio),
            reorder_delay: config.reorder_delay,
            reset_after_bytes: config.reset_after_bytes,
            stall: config.stall,
            created_at: now,
            rng: ChaCha8Rng::seed_from_u64(config.seed ^ stream_salt),
            free_at: now,
            serializer_remainder: 0,
            serializing: VecDeque::new(),
            serializing_bytes: 0,
            wire: BinaryHeap::new(),
            wire_bytes: 0,
            next_seq: 0,
            last_at: now,
            reset_seq: None,
            reset_due: false,
            stall_done: false,
            stats: DirectionStats::default(),
        }
    }

    /// Offers a segment of `len_bytes` carrying `payload` at `now`.
    pub fn offer(&mut self, now: Instant, payload: P, len_bytes: usize) -> Offer {
        self.advance(now);
        let len = len_bytes as u64;
        if self.is_closed() {
            return Offer::Closed;
        }
        if !self.fits(len) {
            self.stats.full_segments += 1;
            return Offer::Full;
        }
        let offset_end = self.stats.offered_bytes + len;
        self.stats.offered_segments += 1;
        self.stats.offered_bytes = offset_end;

        let finish = self.serialize(now, len, offset_end);
        self.serializing.push_back((finish, len));
        self.serializing_bytes += len;
        let held = self.held_bytes();
        self.stats.queue_bytes_peak = self.stats.queue_bytes_peak.max(held);

        let resets_here = self.reset_after_bytes.is_some_and(|n| offset_end >= n);
        let outcome = self.schedule(finish, payload, len, resets_here);
        // The bound may be overshot by the segment that an empty queue always
        // admits, twice if the wire duplicated it (counted with unlimited rate).
        debug_assert!(self.held_bytes() <= self.held_bytes_max().saturating_add(2 * len));
        outcome
    }

    /// The next event due at or before `now`, if any. Call until `None`.
    pub fn poll_deliver(&mut self, now: Instant) -> Option<Event<P>> {
        self.advance(now);
        if self.reset_due {
            self.reset_due = false;
            self.reset_seq = None;
            return Some(Event::Reset);
        }
        let head = self.wire.peek()?;
        if head.0.at > now {
            return None;
        }
        let Reverse(seg) = self.wire.pop().expect("peeked");
        self.wire_bytes -= seg.len;
        self.stats.delivered_segments += 1;
        self.stats.delivered_bytes += seg.len;
        if self.reset_seq == Some(seg.seq) {
            self.reset_due = true;
        }
        Some(Event::Deliver(seg.payload))
    }

    /// When [`poll_deliver`](Self::poll_deliver) next has something to return.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.reset_due {
            return Some(self.last_at);
        }
        self.wire.peek().map(|seg| seg.0.at)
    }

    /// When the queue next gains room (the head of the queue finishes
    /// serializing), or `None` if nothing is queued. A driver blocked on
    /// [`Offer::Full`] sleeps until then and retries.
    pub fn room_timeout(&self) -> Option<Instant> {
        if self.rate_bytes_per_sec == 0 {
            return self.poll_timeout();
        }
        self.serializing.front().map(|&(finish, _)| finish)
    }

    /// Bytes the direction accepts at `now` before returning [`Offer::Full`]
    /// (0 once closed). Offers larger than this still succeed into an empty queue.
    pub fn room_bytes(&mut self, now: Instant) -> u64 {
        self.advance(now);
        if self.is_closed() {
            return 0;
        }
        let room = self.held_bytes_max().saturating_sub(self.held_bytes());
        match self.reset_after_bytes {
            Some(n) => room.min(n - self.stats.offered_bytes),
            None => room,
        }
    }

    /// Largest segment a stream driver should offer next: the segment size, cut
    /// short so that the reset and stall points end a segment.
    pub fn segment_limit_bytes(&self) -> usize {
        let mut limit = u64::from(self.segment_bytes);
        let offered = self.stats.offered_bytes;
        if let Some(n) = self.reset_after_bytes {
            if n > offered {
                limit = limit.min(n - offered);
            }
        }
        if let Some(Stall {
            trigger: StallTrigger::AfterBytes(n),
            ..
        }) = self.stall
        {
            if !self.stall_done && n > offered {
                limit = limit.min(n - offered);
            }
        }
        limit.max(1) as usize
    }

    /// Whether everything accepted has been delivered (and any reset reported).
    pub fn is_idle(&self) -> bool {
        self.wire.is_empty() && !self.reset_due
    }

    /// Whether the direction takes no more bytes (the reset point was reached).
    pub fn is_closed(&self) -> bool {
        self.reset_after_bytes
            .is_some_and(|n| self.stats.offered_bytes >= n)
    }

    /// Segments on the wire (serialized, not yet delivered). A driver may time
    /// the last one more carefully than the ones in the middle of a burst.
    pub fn wire_segments(&self) -> usize {
        self.wire.len()
    }

    /// Bytes waiting for the serializer at the last call's `now`.
    pub fn queue_bytes(&self) -> u64 {
        self.serializing_bytes
    }

    /// Counters since creation.
    pub fn stats(&self) -> DirectionStats {
        self.stats
    }

    /// The bound the queue is held to, in bytes.
    pub fn queue_bytes_max(&self) -> u64 {
        self.queue_bytes_max
    }

    /// One-way propagation delay of this direction.
    pub fn delay_one_way(&self) -> Duration {
        self.delay_one_way
    }

    // ---- helpers ----

    /// Retires segments that have finished serializing by `now`.
    fn advance(&mut self, now: Instant) {
        while let Some(&(finish, len)) = self.serializing.front() {
            if finish > now {
                break;
            }
            self.serializing.pop_front();
            self.serializing_bytes -= len;
        }
    }

    /// Bytes counted against the bound: the queue, or with an unlimited rate
    /// (where nothing queues) everything on the wire too.
    fn held_bytes(&self) -> u64 {
        if self.rate_bytes_per_sec == 0 {
            self.wire_bytes
        } else {
            self.serializing_bytes
        }
    }

    fn held_bytes_max(&self) -> u64 {
        self.queue_bytes_max
    }

    fn fits(&self, len: u64) -> bool {
        let held = self.held_bytes();
        held == 0 || held.saturating_add(len) <= self.held_bytes_max()
    }

    /// Runs the serializer for `len` bytes ending at stream offset
    /// `offset_end`; returns when the last bit leaves it.
    fn serialize(&mut self, now: Instant, len: u64, offset_end: u64) -> Instant {
        let mut start = now.max(self.free_at);
        if let Some(Stall {
            trigger: StallTrigger::AfterTime(at),
            duration,
        }) = self.stall
        {
            let dark_from = self.created_at + at;
            let dark_until = dark_from + duration;
            if start >= dark_from && start < dark_until {
                start = dark_until;
            }
        }
        let finish = start + self.serialization_time(len);
        self.free_at = finish;
        if let Some(Stall {
            trigger: StallTrigger::AfterBytes(n),
            duration,
        }) = self.stall
        {
            if !self.stall_done && offset_end >= n {
                self.stall_done = true;
                self.free_at = finish + duration;
            }
        }
        finish
    }

    /// `len / rate` seconds, carrying the sub-nanosecond remainder.
    fn serialization_time(&mut self, len: u64) -> Duration {
        if self.rate_bytes_per_sec == 0 {
            return Duration::ZERO;
        }
        let rate = u128::from(self.rate_bytes_per_sec);
        let total = u128::from(len) * 1_000_000_000 + self.serializer_remainder;
        self.serializer_remainder = total % rate;
        Duration::from_nanos((total / rate) as u64)
    }

    /// Puts a serialized segment on the wire (or loses it).
    fn schedule(&mut self, finish: Instant, payload: P, len: u64, resets_here: bool) -> Offer {
        let mut at = finish + self.sample_delay();
        if self.mode == Mode::Stream {
            at = at.max(self.last_at);
            self.last_at = at;
            let seq = self.push_wire(at, payload, len);
            if resets_here {
                self.reset_seq = Some(seq);
            }
            return Offer::Queued;
        }
        // Datagram mode: fixed draw order (loss, reorder, dup) for replay.
        let lost = self.draw(self.loss_ratio);
        let reordered = self.draw(self.reorder_ratio);
        let duplicated = self.draw(self.dup_ratio);
        if lost {
            self.stats.lost_segments += 1;
            return Offer::Lost;
        }
        if reordered {
            self.stats.reordered_segments += 1;
            at += self.reorder_delay;
        }
        self.last_at = self.last_at.max(at);
        if duplicated {
            self.stats.duplicated_segments += 1;
            self.push_wire(at, payload.clone(), len);
        }
        let seq = self.push_wire(at, payload, len);
        if resets_here {
            self.reset_seq = Some(seq);
        }
        Offer::Queued
    }

    fn push_wire(&mut self, at: Instant, payload: P, len: u64) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.wire_bytes += len;
        self.wire.push(Reverse(InFlight {
            at,
            seq,
            len,
            payload,
        }));
        seq
    }

    fn sample_delay(&mut self) -> Duration {
        if self.jitter.is_zero() {
            return self.delay_one_way;
        }
        let j = self.jitter.as_nanos() as u64;
        let offset = self.rng.gen_range(0..=2 * j);
        // delay - j + offset, with j <= delay so it never underflows.
        self.delay_one_way - self.jitter + Duration::from_nanos(offset)
    }

    fn draw(&mut self, ratio: f64) -> bool {
        ratio > 0.0 && self.rng.gen_bool(ratio)
    }
}

/// `rate * d` in bytes, saturating.
fn mul_rate(rate_bytes_per_sec: u64, d: Duration) -> u64 {
    let bytes = u128::from(rate_bytes_per_sec) * d.as_nanos() / 1_000_000_000;
    bytes.min(u128::from(u64::MAX)) as u64
}

/// A segment on the wire, ordered by (delivery time, sequence number).
#[derive(Debug)]
struct InFlight<P> {
    at: Instant,
    seq: u64,
    len: u64,
    payload: P,
}

impl<P> PartialEq for InFlight<P> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<P> Eq for InFlight<P> {}
impl<P> PartialOrd for InFlight<P> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<P> Ord for InFlight<P> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

#[cfg(test)]
mod tests;
