//! The pure policies of file I/O: what to READ next, and which unstable WRITEs are still owed.
//!
//! Neither does I/O; `file.rs` drives them. They are separate so that the simulator can drive
//! them in virtual time and so that the autotuned readahead of `sluice_engine::readahead` can
//! replace [`FixedWindow`] behind the [`ReadPlanner`] trait without touching the driver.
//!
//! # Reading (a sequential stream)
//! ```text
//!   consumed            fetched_end
//!   ───┼─── in flight ─────┼──────────────► offset
//!      └ delivered to the reader, in order
//! ```
//! The driver asks [`ReadPlanner::next`] for the next READ whenever a reply arrives or the
//! reader asks for data, and issues what it returns; replies are delivered in offset order.
//! [`FixedWindow`] keeps `depth` READs of rsize in flight: enough to overlap one READ's transfer
//! with the requests behind it so that the link never idles. Reads stop at the size the
//! attributes announce; past it a single probe READ runs at a time until the server says EOF
//! (a file that grows while being read is followed, one READ at a time).
//!
//! # Writing (RFC 1813 §3.3.7, §3.3.21: "nothing lost")
//! An UNSTABLE WRITE reply only promises that the data reached the server's memory. The
//! server's write verifier identifies that memory: if it changes (the server restarted), every
//! WRITE answered under the old verifier may be lost. So the client keeps each chunk, with the
//! verifier of its reply, in an [`UnstableLog`] until a COMMIT answers with the same verifier.
//! [`UnstableLog::on_commit`] returns the chunks written under any other verifier: the driver
//! resends them and commits again.

use bytes::Bytes;
use sluice_xdr::nfs3::Verifier;

/// What a read stream looks like to a planner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadState {
    /// Bytes handed to the reader (the stream starts at 0).
    pub consumed: u64,
    /// End of the highest READ issued.
    pub fetched_end: u64,
    /// READs issued and not yet delivered.
    pub in_flight: usize,
    /// The file size as last seen in attributes.
    pub size_hint: u64,
    /// The server said end of file.
    pub eof_seen: bool,
    /// Largest READ the server takes.
    pub rsize: u32,
}

/// One READ to issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRequest {
    pub offset: u64,
    pub count: u32,
}

/// A completed READ, for planners that learn from the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadSample {
    pub offset: u64,
    pub count: u32,
    pub rtt: std::time::Duration,
}

/// Decides what to fetch next for a sequential stream.
pub trait ReadPlanner: Send {
    /// The next READ to issue now, if any. Called repeatedly until it returns `None`.
    fn next(&mut self, state: &ReadState) -> Option<ReadRequest>;
    /// A READ completed.
    fn on_reply(&mut self, _sample: &ReadSample) {}
}

/// A fixed window of `depth` READs of rsize in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindow {
    pub depth: usize,
}

impl ReadPlanner for FixedWindow {
    fn next(&mut self, s: &ReadState) -> Option<ReadRequest> {
        if s.eof_seen || s.in_flight >= self.depth.max(1) {
            return None;
        }
        // Past the announced size only one probe at a time: it is likely answered with EOF.
        if s.fetched_end >= s.size_hint && s.in_flight > 0 {
            return None;
        }
        Some(ReadRequest {
            offset: s.fetched_end,
            count: s.rsize,
        })
    }
}

/// One chunk written UNSTABLE and not yet known to be on stable storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnstableChunk {
    pub offset: u64,
    pub data: Bytes,
    pub verf: Verifier,
}

/// The data a COMMIT must still cover. See the module docs.
#[derive(Debug, Default, Clone)]
pub struct UnstableLog {
    chunks: Vec<UnstableChunk>,
    bytes: u64,
}

impl UnstableLog {
    pub fn new() -> Self {
        Self::default()
    }

    /// A WRITE of `data` at `offset` was answered UNSTABLE (or DATA_SYNC) with `verf`.
    pub fn record(&mut self, offset: u64, data: Bytes, verf: Verifier) {
        self.bytes += data.len() as u64;
        self.chunks.push(UnstableChunk { offset, data, verf });
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// A COMMIT succeeded with `verf`. Chunks written under `verf` are now stable and are
    /// forgotten; the others (written before a server restart) are returned, in write order,
    /// to be resent, and are forgotten too: the resends are recorded anew.
    pub fn on_commit(&mut self, verf: Verifier) -> Vec<UnstableChunk> {
        let (_stable, lost): (Vec<_>, Vec<_>) = self.chunks.drain(..).partition(|c| c.verf == verf);
        self.bytes = 0;
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(fetched_end: u64, in_flight: usize, size: u64) -> ReadState {
        ReadState {
            consumed: 0,
            fetched_end,
            in_flight,
            size_hint: size,
            eof_seen: false,
            rsize: 100,
        }
    }

    #[test]
    fn fixed_window_keeps_depth_reads_in_flight_up_to_the_size() {
        let mut p = FixedWindow { depth: 4 };
        assert_eq!(
            p.next(&state(0, 0, 1000)),
            Some(ReadRequest {
                offset: 0,
                count: 100
            })
        );
        assert_eq!(p.next(&state(300, 3, 1000)).map(|r| r.offset), Some(300));
        assert_eq!(p.next(&state(400, 4, 1000)), None, "window full");
        assert_eq!(
            p.next(&state(1000, 2, 1000)),
            None,
            "no probe while reads run"
        );
        assert_eq!(
            p.next(&state(1000, 0, 1000)).map(|r| r.offset),
            Some(1000),
            "probe"
        );
        let mut eof = state(1000, 0, 1000);
        eof.eof_seen = true;
        assert_eq!(p.next(&eof), None);
        assert_eq!(
            p.next(&state(0, 0, 0)).map(|r| r.offset),
            Some(0),
            "empty file: one probe"
        );
    }

    #[test]
    fn a_verifier_change_makes_the_log_return_what_must_be_resent() {
        let mut log = UnstableLog::new();
        let (a, b) = ([1u8; 8], [2u8; 8]);
        log.record(0, Bytes::from_static(b"xx"), a);
        log.record(2, Bytes::from_static(b"yy"), b);
        log.record(4, Bytes::from_static(b"zz"), a);
        assert_eq!(log.bytes(), 6);
        let lost = log.on_commit(b);
        assert_eq!(
            lost.iter().map(|c| c.offset).collect::<Vec<_>>(),
            vec![0, 4]
        );
        assert!(log.is_empty());
        assert_eq!(log.bytes(), 0);
        log.record(0, Bytes::from_static(b"xx"), b);
        assert!(log.on_commit(b).is_empty());
    }
}
