//! TCP record marking (RFC 5531 §11).
//!
//! On a stream transport every RPC message is a *record* sent as one or more *fragments*. Each
//! fragment starts with a 4-byte big-endian header: the top bit says "this is the last fragment
//! of the record", the low 31 bits are the fragment's length in bytes.
//!
//! ```text
//!  record = fragment* last-fragment
//!  ┌────────────┬──────────────┐┌────────────┬──────────────┐
//!  │0│ len = 8192│ 8192 bytes   ││1│ len = 100 │ 100 bytes    │
//!  └────────────┴──────────────┘└────────────┴──────────────┘
//!   31 bits of length, bit 31 = last fragment
//! ```
//!
//! # Decoding: zero-copy, any split
//! The socket hands over bytes in arbitrary pieces: a header may be split across two reads, one
//! read may hold the tail of one record and the head of the next. [`RecordDecoder::push`] takes
//! those pieces as they came; [`RecordDecoder::next_record`] returns each complete record as a list
//! of [`Bytes`] that are *slices of the pushed buffers*: a 1 MiB WRITE received in 64 KiB reads
//! becomes ~16 segments pointing into the receive buffers, never one 1 MiB copy. Fragment
//! boundaries vanish: the record is the concatenation of the fragment bodies.
//!
//! One exception keeps the segment count bounded: a piece shorter than [`COALESCE_BELOW_BYTES`]
//! (a peer trickling bytes, or the few body bytes that share a read with a fragment header) is
//! copied into a small staging buffer instead of becoming its own segment. Without it, a peer
//! sending one byte per TCP segment would make a 1 MiB record cost a million 32-byte `Bytes`
//! handles. With it, a record of `n` bytes has at most about `2n / COALESCE_BELOW_BYTES + 2`
//! segments, and every large piece is still zero-copy.
//!
//! # Limits
//! The peer chooses fragment lengths, so everything it can make us hold is bounded by
//! [`RecordDecoderConfig`]:
//! - `max_record_bytes`: checked when a fragment *header* arrives, before any of its body is
//!   buffered, so a peer declaring a 2 GiB fragment costs nothing.
//! - `max_fragments_per_record`: zero-length non-final fragments are legal and cost the peer four
//!   bytes each; without a count limit a peer could keep us parsing headers forever without a
//!   record ever completing.
//!
//! Exceeding either is a [`RecordError`]; the decoder then stays failed (every later call returns
//! the same error) and the driver is expected to close the connection, since the byte stream can
//! no longer be resynchronised.
//!
//! Bytes pushed but not yet consumed are not limited here (the decoder cannot refuse a push);
//! the driver keeps that bounded by draining [`RecordDecoder::next_record`] after each push and by
//! reading at most one buffer at a time. [`RecordDecoder::buffered_bytes`] reports it.
//!
//! # Encoding
//! [`frame`] turns a message (an iovec) into record-marked output: headers are small new buffers,
//! bodies are slices of the caller's segments, ready for `writev`.

use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;
use std::fmt;

/// The "last fragment" bit of a record marking header.
pub const LAST_FRAGMENT_BIT: u32 = 0x8000_0000;

/// Largest length a fragment header can express (31 bits).
pub const MAX_FRAGMENT_BYTES: usize = 0x7fff_ffff;

/// Pieces shorter than this are copied into a staging buffer rather than kept as their own
/// zero-copy segment (see the module docs). 256 bytes: far below any real socket read, so it
/// never copies bulk data, and it caps the per-record segment count at about 1 per 128 bytes.
pub const COALESCE_BELOW_BYTES: usize = 256;

/// Limits for a [`RecordDecoder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordDecoderConfig {
    /// Largest record (sum of its fragment bodies) accepted, in bytes.
    ///
    /// Default [`RecordDecoderConfig::DEFAULT_MAX_RECORD_BYTES`] = 4 MiB + 64 KiB: room for a
    /// READ reply or WRITE call carrying a 4 MiB payload (sluice's largest transfer size; Linux
    /// nfsd stops at 1 MiB) plus headers and attributes, which are a few hundred bytes. Doubling
    /// it only raises the memory a misbehaving peer can pin per connection.
    pub max_record_bytes: usize,
    /// Most fragments one record may have. Default 1024: real senders use one fragment per
    /// record (Linux) or a handful (older BSD stacks cut at 8 KiB or 64 KiB); 1024 fragments of
    /// 4 KiB still express a 4 MiB record.
    pub max_fragments_per_record: usize,
}

impl RecordDecoderConfig {
    pub const DEFAULT_MAX_RECORD_BYTES: usize = 4 * 1024 * 1024 + 64 * 1024;
    pub const DEFAULT_MAX_FRAGMENTS_PER_RECORD: usize = 1024;
}

impl Default for RecordDecoderConfig {
    fn default() -> Self {
        RecordDecoderConfig {
            max_record_bytes: Self::DEFAULT_MAX_RECORD_BYTES,
            max_fragments_per_record: Self::DEFAULT_MAX_FRAGMENTS_PER_RECORD,
        }
    }
}

/// Why the byte stream cannot be decoded further. The connection must be closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordError {
    /// A fragment header would make the record larger than `limit` bytes.
    TooLarge {
        /// The configured `max_record_bytes`.
        limit: usize,
        /// The record size the peer's headers declare so far.
        declared: usize,
    },
    /// The record has more than `limit` fragments.
    TooManyFragments { limit: usize },
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::TooLarge { limit, declared } => {
                write!(
                    f,
                    "RPC record of {declared} bytes exceeds the limit of {limit}"
                )
            }
            RecordError::TooManyFragments { limit } => {
                write!(f, "RPC record has more than {limit} fragments")
            }
        }
    }
}

impl std::error::Error for RecordError {}

/// Reassembles records from a byte stream. See the module docs.
#[derive(Debug)]
pub struct RecordDecoder {
    config: RecordDecoderConfig,
    /// Pushed buffers not yet consumed, oldest first; never holds empty buffers.
    input: VecDeque<Bytes>,
    input_bytes: usize,
    /// Header bytes gathered so far (a header can straddle pushes).
    header: [u8; 4],
    header_have: usize,
    /// `Some` while inside a fragment body: bytes still to take and whether it is the last.
    fragment: Option<FragmentState>,
    /// The record being assembled.
    record: Vec<Bytes>,
    /// Small pieces waiting to become one segment of `record`.
    staging: BytesMut,
    record_bytes: usize,
    record_fragments: usize,
    failed: Option<RecordError>,
}

#[derive(Debug, Clone, Copy)]
struct FragmentState {
    left: usize,
    last: bool,
}

impl Default for RecordDecoder {
    fn default() -> Self {
        Self::new(RecordDecoderConfig::default())
    }
}

impl RecordDecoder {
    pub fn new(config: RecordDecoderConfig) -> Self {
        assert!(
            config.max_fragments_per_record >= 1,
            "a record needs at least one fragment"
        );
        RecordDecoder {
            config,
            input: VecDeque::new(),
            input_bytes: 0,
            header: [0; 4],
            header_have: 0,
            fragment: None,
            record: Vec::new(),
            staging: BytesMut::new(),
            record_bytes: 0,
            record_fragments: 0,
            failed: None,
        }
    }

    pub fn config(&self) -> &RecordDecoderConfig {
        &self.config
    }

    /// Appends bytes exactly as they were read from the socket.
    pub fn push(&mut self, data: Bytes) {
        if data.is_empty() || self.failed.is_some() {
            return;
        }
        self.input_bytes += data.len();
        self.input.push_back(data);
    }

    /// Bytes held by the decoder: pushed but not yet returned in a record.
    pub fn buffered_bytes(&self) -> usize {
        self.input_bytes + self.record_bytes
    }

    /// True when no partial record or unconsumed input is held (a clean point to close).
    pub fn is_idle(&self) -> bool {
        self.input_bytes == 0
            && self.header_have == 0
            && self.fragment.is_none()
            && self.record_fragments == 0
    }

    /// The next complete record, if the pushed bytes hold one.
    ///
    /// Returns `Ok(None)` when more bytes are needed. After an `Err` the decoder is failed for
    /// good and returns the same error again.
    pub fn next_record(&mut self) -> Result<Option<Vec<Bytes>>, RecordError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        loop {
            let fragment = match self.fragment {
                Some(f) => f,
                None => match self.take_header() {
                    None => return Ok(None),
                    Some(header) => match self.start_fragment(header) {
                        Ok(f) => f,
                        Err(e) => {
                            self.fail(e.clone());
                            return Err(e);
                        }
                    },
                },
            };
            let left = self.take_body(fragment.left);
            if left > 0 {
                self.fragment = Some(FragmentState { left, ..fragment });
                return Ok(None);
            }
            self.fragment = None;
            if fragment.last {
                return Ok(Some(self.finish_record()));
            }
        }
    }

    /// Gathers the 4 header bytes; `None` if the input runs out first.
    fn take_header(&mut self) -> Option<u32> {
        while self.header_have < 4 {
            let front = self.input.front_mut()?;
            let n = (4 - self.header_have).min(front.len());
            self.header[self.header_have..self.header_have + n].copy_from_slice(&front[..n]);
            front.advance(n);
            if front.is_empty() {
                self.input.pop_front();
            }
            self.input_bytes -= n;
            self.header_have += n;
        }
        self.header_have = 0;
        Some(u32::from_be_bytes(self.header))
    }

    /// Checks a new fragment header against the limits.
    fn start_fragment(&mut self, header: u32) -> Result<FragmentState, RecordError> {
        let len = (header & !LAST_FRAGMENT_BIT) as usize;
        let last = header & LAST_FRAGMENT_BIT != 0;
        self.record_fragments += 1;
        if self.record_fragments > self.config.max_fragments_per_record {
            return Err(RecordError::TooManyFragments {
                limit: self.config.max_fragments_per_record,
            });
        }
        let declared = self.record_bytes + len;
        if declared > self.config.max_record_bytes {
            return Err(RecordError::TooLarge {
                limit: self.config.max_record_bytes,
                declared,
            });
        }
        Ok(FragmentState { left: len, last })
    }

    /// Moves up to `want` body bytes from the input into the record; returns how many are
    /// still missing.
    fn take_body(&mut self, mut want: usize) -> usize {
        while want > 0 {
            let Some(front) = self.input.front_mut() else {
                break;
            };
            let n = front.len().min(want);
            let piece = if n == front.len() {
                self.input.pop_front().expect("front exists")
            } else {
                front.split_to(n)
            };
            self.add_piece(piece);
            self.input_bytes -= n;
            self.record_bytes += n;
            want -= n;
        }
        want
    }

    fn add_piece(&mut self, piece: Bytes) {
        if piece.len() < COALESCE_BELOW_BYTES {
            self.staging.extend_from_slice(&piece);
            if self.staging.len() >= COALESCE_BELOW_BYTES {
                self.flush_staging();
            }
        } else {
            self.flush_staging();
            self.record.push(piece);
        }
    }

    fn flush_staging(&mut self) {
        if !self.staging.is_empty() {
            self.record.push(self.staging.split().freeze());
        }
    }

    fn finish_record(&mut self) -> Vec<Bytes> {
        self.flush_staging();
        self.record_bytes = 0;
        self.record_fragments = 0;
        std::mem::take(&mut self.record)
    }

    fn fail(&mut self, e: RecordError) {
        self.failed = Some(e);
        self.input.clear();
        self.input_bytes = 0;
        self.record.clear();
        self.staging = BytesMut::new();
        self.record_bytes = 0;
    }
}

/// The 4-byte record marking header for a fragment of `len` bytes.
///
/// Panics if `len` exceeds [`MAX_FRAGMENT_BYTES`] (a bug in the caller, which chooses lengths).
pub fn record_header(len: usize, last: bool) -> [u8; 4] {
    assert!(len <= MAX_FRAGMENT_BYTES, "fragment of {len} bytes");
    let mut h = len as u32;
    if last {
        h |= LAST_FRAGMENT_BIT;
    }
    h.to_be_bytes()
}

/// Record-marks one message for a stream transport.
///
/// The output is headers interleaved with slices of `segments` (no body bytes are copied),
/// cut into fragments of at most `max_fragment_bytes` (clamped to [`MAX_FRAGMENT_BYTES`]); the
/// final fragment carries the last bit. An empty message becomes one empty last fragment.
/// Empty input segments are dropped.
///
/// Panics if `max_fragment_bytes` is 0.
pub fn frame(segments: Vec<Bytes>, max_fragment_bytes: usize) -> Vec<Bytes> {
    assert!(
        max_fragment_bytes > 0,
        "fragments must hold at least a byte"
    );
    let max = max_fragment_bytes.min(MAX_FRAGMENT_BYTES);
    let mut left_total: usize = segments.iter().map(|s| s.len()).sum();
    let mut out = Vec::with_capacity(segments.len() + 2);
    if left_total == 0 {
        out.push(Bytes::copy_from_slice(&record_header(0, true)));
        return out;
    }
    let mut left_in_fragment = 0;
    for mut seg in segments {
        while !seg.is_empty() {
            if left_in_fragment == 0 {
                left_in_fragment = left_total.min(max);
                let last = left_in_fragment == left_total;
                out.push(Bytes::copy_from_slice(&record_header(
                    left_in_fragment,
                    last,
                )));
            }
            let n = seg.len().min(left_in_fragment);
            let piece = if n == seg.len() {
                std::mem::take(&mut seg)
            } else {
                seg.split_to(n)
            };
            out.push(piece);
            left_in_fragment -= n;
            left_total -= n;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn concat(segs: &[Bytes]) -> Vec<u8> {
        segs.iter().flat_map(|s| s.iter().copied()).collect()
    }

    /// Splits `b` at the given cut points (taken modulo its length, sorted).
    fn split_at(b: &Bytes, cuts: &[usize]) -> Vec<Bytes> {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (b.len() + 1)).collect();
        cuts.sort_unstable();
        let mut out = Vec::new();
        let mut start = 0;
        for c in cuts {
            out.push(b.slice(start..c));
            start = c;
        }
        out.push(b.slice(start..));
        out
    }

    fn stream_of(records: &[Vec<u8>], frag: usize) -> Bytes {
        let mut all = Vec::new();
        for r in records {
            all.extend(concat(&frame(vec![Bytes::from(r.clone())], frag)));
        }
        Bytes::from(all)
    }

    #[test]
    fn header_bits() {
        assert_eq!(record_header(0, true), [0x80, 0, 0, 0]);
        assert_eq!(record_header(0x1234, false), [0, 0, 0x12, 0x34]);
        assert_eq!(record_header(MAX_FRAGMENT_BYTES, true), [0xff; 4]);
    }

    #[test]
    fn frame_single_and_multi() {
        let out = frame(vec![Bytes::from_static(b"abcdefgh")], 1000);
        assert_eq!(concat(&out), b"\x80\0\0\x08abcdefgh");
        let out = frame(
            vec![Bytes::from_static(b"abc"), Bytes::from_static(b"defgh")],
            3,
        );
        assert_eq!(
            concat(&out),
            b"\0\0\0\x03abc\0\0\0\x03def\x80\0\0\x02gh".to_vec()
        );
        assert_eq!(concat(&frame(vec![], 10)), vec![0x80, 0, 0, 0]);
        assert_eq!(concat(&frame(vec![Bytes::new()], 10)), vec![0x80, 0, 0, 0]);
    }

    #[test]
    fn frame_is_zero_copy() {
        let body = Bytes::from(vec![7u8; 100_000]);
        let out = frame(vec![body.clone()], 1 << 20);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].as_ptr(), body.as_ptr());
    }

    #[test]
    fn decodes_back_to_back_records_in_one_read() {
        let mut d = RecordDecoder::default();
        d.push(stream_of(&[b"one".to_vec(), b"two!".to_vec()], 2));
        assert_eq!(concat(&d.next_record().unwrap().unwrap()), b"one");
        assert_eq!(concat(&d.next_record().unwrap().unwrap()), b"two!");
        assert_eq!(d.next_record().unwrap(), None);
        assert!(d.is_idle());
    }

    #[test]
    fn zero_length_fragments_and_empty_record() {
        let mut d = RecordDecoder::default();
        // empty, non-last; then "ab" non-last; empty last.
        d.push(Bytes::from_static(b"\0\0\0\0\0\0\0\x02ab\x80\0\0\0"));
        assert_eq!(concat(&d.next_record().unwrap().unwrap()), b"ab");
        // An empty record is a record.
        d.push(Bytes::from_static(b"\x80\0\0\0"));
        assert_eq!(d.next_record().unwrap().unwrap(), Vec::<Bytes>::new());
        assert_eq!(d.next_record().unwrap(), None);
    }

    #[test]
    fn large_reads_stay_zero_copy() {
        let body = vec![3u8; 200_000];
        let wire = stream_of(std::slice::from_ref(&body), 1 << 20);
        let mut d = RecordDecoder::default();
        let reads = split_at(&wire, &[10, 70_000, 140_000]);
        for r in &reads {
            d.push(r.clone());
        }
        let rec = d.next_record().unwrap().unwrap();
        assert_eq!(concat(&rec), body);
        // Every segment of at least COALESCE_BELOW_BYTES points into one of the reads.
        for seg in rec.iter().filter(|s| s.len() >= COALESCE_BELOW_BYTES) {
            let p = seg.as_ptr() as usize;
            assert!(reads.iter().any(|r| {
                let s = r.as_ptr() as usize;
                p >= s && p + seg.len() <= s + r.len()
            }));
        }
    }

    #[test]
    fn trickled_bytes_are_coalesced() {
        let body = vec![5u8; 10_000];
        let wire = stream_of(std::slice::from_ref(&body), 1 << 20);
        let mut d = RecordDecoder::default();
        for i in 0..wire.len() {
            d.push(wire.slice(i..i + 1));
        }
        let rec = d.next_record().unwrap().unwrap();
        assert_eq!(concat(&rec), body);
        assert!(rec.len() <= 2 * body.len() / COALESCE_BELOW_BYTES + 2);
    }

    #[test]
    fn oversized_fragment_is_refused_at_its_header() {
        let mut d = RecordDecoder::new(RecordDecoderConfig {
            max_record_bytes: 100,
            max_fragments_per_record: 8,
        });
        d.push(Bytes::copy_from_slice(&record_header(101, true)));
        assert_eq!(
            d.next_record(),
            Err(RecordError::TooLarge {
                limit: 100,
                declared: 101
            })
        );
        // Sticky, and further input is ignored.
        d.push(Bytes::from_static(b"\x80\0\0\0"));
        assert!(d.next_record().is_err());
        assert_eq!(d.buffered_bytes(), 0);
    }

    #[test]
    fn record_over_limit_across_fragments() {
        let mut d = RecordDecoder::new(RecordDecoderConfig {
            max_record_bytes: 100,
            max_fragments_per_record: 8,
        });
        // Exactly at the limit is fine.
        let ok: Vec<u8> = (0..100u8).collect();
        d.push(stream_of(std::slice::from_ref(&ok), 40));
        assert_eq!(concat(&d.next_record().unwrap().unwrap()), ok);
        d.push(stream_of(&[vec![1u8; 101]], 40));
        assert_eq!(
            d.next_record(),
            Err(RecordError::TooLarge {
                limit: 100,
                declared: 101
            })
        );
    }

    #[test]
    fn fragment_flood_is_refused() {
        let mut d = RecordDecoder::new(RecordDecoderConfig {
            max_record_bytes: 1000,
            max_fragments_per_record: 4,
        });
        d.push(Bytes::from(vec![0u8; 4 * 4])); // four empty non-last fragments
        assert_eq!(d.next_record(), Ok(None));
        d.push(Bytes::from_static(b"\x80\0\0\0"));
        assert_eq!(
            d.next_record(),
            Err(RecordError::TooManyFragments { limit: 4 })
        );
    }

    proptest! {
        #[test]
        fn any_split_any_fragmentation_round_trips(
            records in proptest::collection::vec(
                proptest::collection::vec(any::<u8>(), 0..2000), 1..5),
            frag in 1usize..700,
            cuts in proptest::collection::vec(any::<usize>(), 0..40),
        ) {
            let wire = stream_of(&records, frag);
            // frag = 1 makes up to 2000 fragments per record.
            let mut d = RecordDecoder::new(RecordDecoderConfig {
                max_fragments_per_record: 2000,
                ..Default::default()
            });
            let mut got = Vec::new();
            for piece in split_at(&wire, &cuts) {
                d.push(piece);
                while let Some(rec) = d.next_record().unwrap() {
                    got.push(concat(&rec));
                }
            }
            prop_assert_eq!(got, records);
            prop_assert!(d.is_idle());
        }

        #[test]
        fn frame_preserves_bytes_and_bounds_fragments(
            segs in proptest::collection::vec(
                proptest::collection::vec(any::<u8>(), 0..300), 0..6),
            frag in 1usize..500,
        ) {
            let body: Vec<u8> = segs.iter().flatten().copied().collect();
            let out = frame(segs.into_iter().map(Bytes::from).collect(), frag);
            // Walk the output as a stream and check every header.
            let wire = concat(&out);
            let mut i = 0;
            let mut decoded = Vec::new();
            loop {
                let h = u32::from_be_bytes(wire[i..i + 4].try_into().unwrap());
                let len = (h & !LAST_FRAGMENT_BIT) as usize;
                prop_assert!(len <= frag);
                decoded.extend_from_slice(&wire[i + 4..i + 4 + len]);
                i += 4 + len;
                if h & LAST_FRAGMENT_BIT != 0 {
                    break;
                }
                prop_assert!(len > 0);
            }
            prop_assert_eq!(i, wire.len());
            prop_assert_eq!(decoded, body);
        }

        #[test]
        fn arbitrary_bytes_never_panic(
            data in proptest::collection::vec(any::<u8>(), 0..4000),
            cuts in proptest::collection::vec(any::<usize>(), 0..20),
        ) {
            let mut d = RecordDecoder::new(RecordDecoderConfig {
                max_record_bytes: 1500,
                max_fragments_per_record: 16,
            });
            let data = Bytes::from(data);
            for piece in split_at(&data, &cuts) {
                d.push(piece);
                while let Ok(Some(rec)) = d.next_record() {
                    prop_assert!(rec.iter().map(|s| s.len()).sum::<usize>() <= 1500);
                }
            }
        }
    }
}
