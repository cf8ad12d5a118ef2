//! How RPC messages become what the link model carries.
//!
//! * TCP: a message is record-marked ([`sluice_rpc::record::frame`]) and appended to the
//!   sender's byte stream ([`StreamTx`], the socket send buffer). The stream is cut into
//!   segments of the link's segment size and offered while the bottleneck queue has room; when
//!   it is full the sender waits for [`LinkDirection::room_timeout`] (TCP backpressure). The
//!   receiver pushes every delivered piece into a [`sluice_rpc::record::RecordDecoder`].
//! * UDP: a message is one datagram; a full queue drops it (tail drop), the wire may lose,
//!   duplicate or reorder it.
//!
//! Every segment carries the connection number it was sent on, so that after a reconnect the
//! receiver ignores the old connection's bytes instead of feeding them to a fresh decoder.

use bytes::Bytes;
use sluice_link::model::{LinkDirection, Offer};
use std::collections::VecDeque;
use std::time::Instant;

/// A segment on the simulated wire: slices of a byte stream (TCP) or one whole message (UDP).
#[derive(Debug, Clone)]
pub struct Segment {
    /// Connection the bytes belong to (always 0 for UDP).
    pub conn: u64,
    pub pieces: Vec<Bytes>,
}

impl Segment {
    pub fn len(&self) -> usize {
        self.pieces.iter().map(Bytes::len).sum()
    }
}

/// One side's TCP send buffer.
#[derive(Debug, Default)]
pub struct StreamTx {
    pending: VecDeque<Bytes>,
    pending_bytes: u64,
    /// Most bytes ever pending, for the report.
    pub pending_bytes_peak: u64,
}

impl StreamTx {
    /// Appends a record-marked message.
    pub fn push(&mut self, framed: Vec<Bytes>) {
        for b in framed.into_iter().filter(|b| !b.is_empty()) {
            self.pending_bytes += b.len() as u64;
            self.pending.push_back(b);
        }
        self.pending_bytes_peak = self.pending_bytes_peak.max(self.pending_bytes);
    }

    /// Drops everything (the connection is gone).
    pub fn clear(&mut self) {
        self.pending.clear();
        self.pending_bytes = 0;
    }

    /// Whether bytes wait for room on the link.
    pub fn is_blocked(&self) -> bool {
        self.pending_bytes > 0
    }

    /// Offers segments while the link takes them. Returns whether anything was sent.
    pub fn pump(&mut self, now: Instant, link: &mut LinkDirection<Segment>, conn: u64) -> bool {
        let mut sent = false;
        while self.pending_bytes > 0 {
            let n = (link.segment_limit_bytes() as u64).min(self.pending_bytes) as usize;
            let pieces = self.peek(n);
            match link.offer(now, Segment { conn, pieces }, n) {
                Offer::Queued => {
                    self.consume(n);
                    sent = true;
                }
                Offer::Full => break,
                // Stream mode never loses; resets are not configured by the simulator.
                Offer::Lost | Offer::Closed => unreachable!("stream link refused a segment"),
            }
        }
        sent
    }

    /// The first `n` pending bytes as slices (without consuming them).
    fn peek(&self, n: usize) -> Vec<Bytes> {
        let mut out = Vec::new();
        let mut left = n;
        for b in &self.pending {
            if left == 0 {
                break;
            }
            let k = b.len().min(left);
            out.push(b.slice(..k));
            left -= k;
        }
        out
    }

    fn consume(&mut self, mut n: usize) {
        self.pending_bytes -= n as u64;
        while n > 0 {
            let front = self.pending.front_mut().expect("pending bytes");
            if front.len() <= n {
                n -= front.len();
                self.pending.pop_front();
            } else {
                let _ = front.split_to(n);
                n = 0;
            }
        }
    }
}

/// Sends one UDP datagram; returns false if it was lost or dropped at a full queue.
pub fn send_datagram(now: Instant, link: &mut LinkDirection<Segment>, message: Vec<Bytes>) -> bool {
    let seg = Segment {
        conn: 0,
        pieces: message,
    };
    let len = seg.len();
    match link.offer(now, seg, len) {
        Offer::Queued => true,
        Offer::Lost | Offer::Full => false,
        Offer::Closed => unreachable!("resets are not configured by the simulator"),
    }
}
