//! XDR (RFC 4506) primitives and the wire types of the protocols sluice speaks.
//!
//! Everything here is pure: bytes in, values out, and values in, bytes out. No I/O, no clock.
//!
//! # Reading
//! A [`Reader`] walks a record that may be split over several [`Bytes`] segments (the record
//! decoder hands over fragments as they arrived; the server receives WRITE payloads into pooled
//! chunks). Small items (integers, names, handles) are copied out; bulk data
//! ([`Reader::get_payload`]) is returned as zero-copy slices of the segments, so a 1 MiB WRITE never
//! becomes one contiguous 1 MiB allocation.
//!
//! Every length read from the wire is checked against a caller-supplied maximum *before* anything
//! is allocated; a short record is [`DecodeError::Truncated`], never a panic.
//!
//! # Writing
//! A [`Writer`] produces a list of segments. Scalars go into a small staging buffer that is cut
//! into a segment every [`Writer::SEGMENT_BYTES`]; bulk data ([`Writer::put_payload`]) is appended as
//! the caller's own segments without a copy. The result is an iovec ready for `writev`.

// First: the declaration macros are textually scoped, and every protocol module uses them.
#[macro_use]
mod decl;
#[cfg(test)]
pub(crate) mod arb;
pub mod mount3;
pub mod nfs3;
pub mod nfs4;
pub mod nlm;
pub mod nsm;
pub mod portmap;
pub mod procs;
pub mod rpc;

use bytes::{Bytes, BytesMut};
use std::fmt;

/// Why a byte sequence is not a valid XDR encoding of the expected type.
///
/// These are the peer's errors, not ours: the RPC layer maps every one of them to
/// `GARBAGE_ARGS` (server) or a failed call (client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The record ended before the item did.
    Truncated,
    /// A variable-length item declared more bytes/elements than its bound allows.
    TooLong {
        what: &'static str,
        max: usize,
        got: usize,
    },
    /// An enum or union discriminant with no defined meaning where one is required.
    BadDiscriminant { what: &'static str, value: u32 },
    /// An XDR bool that was neither 0 nor 1.
    BadBool(u32),
    /// A value that decodes but breaks a rule of the protocol (for example a bad string).
    Invalid(&'static str),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated => write!(f, "record truncated"),
            DecodeError::TooLong { what, max, got } => {
                write!(f, "{what} of {got} exceeds the limit of {max}")
            }
            DecodeError::BadDiscriminant { what, value } => {
                write!(f, "bad {what} discriminant {value}")
            }
            DecodeError::BadBool(v) => write!(f, "bad XDR bool {v}"),
            DecodeError::Invalid(why) => write!(f, "invalid value: {why}"),
        }
    }
}

impl std::error::Error for DecodeError {}

pub type Result<T> = std::result::Result<T, DecodeError>;

/// A value with an XDR encoding.
pub trait Pack {
    fn pack(&self, w: &mut Writer);
}

/// A value that can be decoded from XDR. Decoding untrusted bytes never panics.
pub trait Unpack: Sized {
    fn unpack(r: &mut Reader<'_>) -> Result<Self>;
}

/// Bytes needed to pad `len` to a multiple of four.
#[inline]
pub fn pad_len(len: usize) -> usize {
    (4 - (len & 3)) & 3
}

// ---------------------------------------------------------------------------------------------
// Reader
// ---------------------------------------------------------------------------------------------

/// A cursor over a record held in one or more segments.
#[derive(Clone)]
pub struct Reader<'a> {
    segs: &'a [Bytes],
    /// Index of the segment holding the next byte.
    seg: usize,
    /// Offset of the next byte inside `segs[seg]`.
    off: usize,
    /// Bytes left in the whole record.
    remaining: usize,
}

impl<'a> Reader<'a> {
    /// A reader over a record split into `segs` (empty segments are allowed).
    pub fn new(segs: &'a [Bytes]) -> Self {
        let remaining = segs.iter().map(|s| s.len()).sum();
        let mut r = Reader {
            segs,
            seg: 0,
            off: 0,
            remaining,
        };
        r.skip_empty();
        r
    }

    /// A reader over one contiguous buffer.
    pub fn from_bytes(b: &'a Bytes) -> Self {
        Self::new(std::slice::from_ref(b))
    }

    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.remaining
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        let total: usize = self.segs.iter().map(|s| s.len()).sum();
        total - self.remaining
    }

    fn skip_empty(&mut self) {
        while self.seg < self.segs.len() && self.off >= self.segs[self.seg].len() {
            self.seg += 1;
            self.off = 0;
        }
    }

    /// Copies exactly `out.len()` bytes out of the record.
    pub fn copy_to(&mut self, out: &mut [u8]) -> Result<()> {
        if out.len() > self.remaining {
            return Err(DecodeError::Truncated);
        }
        let mut done = 0;
        while done < out.len() {
            let seg = &self.segs[self.seg];
            let n = (seg.len() - self.off).min(out.len() - done);
            out[done..done + n].copy_from_slice(&seg[self.off..self.off + n]);
            done += n;
            self.advance_unchecked(n);
        }
        Ok(())
    }

    /// Skips `n` bytes.
    pub fn skip(&mut self, n: usize) -> Result<()> {
        if n > self.remaining {
            return Err(DecodeError::Truncated);
        }
        let mut left = n;
        while left > 0 {
            let seg = &self.segs[self.seg];
            let step = (seg.len() - self.off).min(left);
            self.advance_unchecked(step);
            left -= step;
        }
        Ok(())
    }

    fn advance_unchecked(&mut self, n: usize) {
        self.off += n;
        self.remaining -= n;
        self.skip_empty();
    }

    pub fn get_u32(&mut self) -> Result<u32> {
        let mut b = [0u8; 4];
        self.copy_to(&mut b)?;
        Ok(u32::from_be_bytes(b))
    }

    pub fn get_i32(&mut self) -> Result<i32> {
        Ok(self.get_u32()? as i32)
    }

    pub fn get_u64(&mut self) -> Result<u64> {
        let mut b = [0u8; 8];
        self.copy_to(&mut b)?;
        Ok(u64::from_be_bytes(b))
    }

    pub fn get_i64(&mut self) -> Result<i64> {
        Ok(self.get_u64()? as i64)
    }

    pub fn get_bool(&mut self) -> Result<bool> {
        match self.get_u32()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(DecodeError::BadBool(v)),
        }
    }

    /// Fixed-length opaque data (`opaque x[N]`), with its padding.
    pub fn get_fixed<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        self.copy_to(&mut b)?;
        self.skip(pad_len(N))?;
        Ok(b)
    }

    /// Reads a length prefix and checks it against `max` and the bytes left.
    fn get_len(&mut self, what: &'static str, max: usize) -> Result<usize> {
        let len = self.get_u32()? as usize;
        if len > max {
            return Err(DecodeError::TooLong {
                what,
                max,
                got: len,
            });
        }
        if len + pad_len(len) > self.remaining {
            return Err(DecodeError::Truncated);
        }
        Ok(len)
    }

    /// Variable-length opaque data (`opaque x<max>`) as one contiguous buffer.
    ///
    /// Zero-copy when the item lies within one segment; otherwise the (bounded) item is copied.
    /// Use [`Reader::get_payload`] for bulk data.
    pub fn get_opaque(&mut self, what: &'static str, max: usize) -> Result<Bytes> {
        let len = self.get_len(what, max)?;
        let out = self.take_contiguous(len)?;
        self.skip(pad_len(len))?;
        Ok(out)
    }

    /// A string (`string x<max>`): same wire form as opaque data. Its bytes are not
    /// interpreted here (NFS names are byte strings, not UTF-8).
    pub fn get_string(&mut self, what: &'static str, max: usize) -> Result<Bytes> {
        self.get_opaque(what, max)
    }

    fn take_contiguous(&mut self, len: usize) -> Result<Bytes> {
        if len > self.remaining {
            return Err(DecodeError::Truncated);
        }
        if len == 0 {
            return Ok(Bytes::new());
        }
        let seg = &self.segs[self.seg];
        if seg.len() - self.off >= len {
            let out = seg.slice(self.off..self.off + len);
            self.advance_unchecked(len);
            Ok(out)
        } else {
            let mut v = vec![0u8; len];
            self.copy_to(&mut v)?;
            Ok(Bytes::from(v))
        }
    }

    /// Bulk variable-length opaque data, as zero-copy slices of the record's segments.
    pub fn get_payload(&mut self, what: &'static str, max: usize) -> Result<Payload> {
        let len = self.get_len(what, max)?;
        let mut chunks = Vec::new();
        let mut left = len;
        while left > 0 {
            let seg = &self.segs[self.seg];
            let n = (seg.len() - self.off).min(left);
            chunks.push(seg.slice(self.off..self.off + n));
            self.advance_unchecked(n);
            left -= n;
        }
        self.skip(pad_len(len))?;
        Ok(Payload { chunks, len })
    }

    /// A counted array (`T x<max>`).
    pub fn get_array<T: Unpack>(&mut self, what: &'static str, max: usize) -> Result<Vec<T>> {
        let n = self.get_u32()? as usize;
        if n > max {
            return Err(DecodeError::TooLong { what, max, got: n });
        }
        // Every XDR item takes at least 4 bytes; refuse counts the record cannot hold before
        // reserving memory for them.
        if n > self.remaining / 4 + 1 {
            return Err(DecodeError::Truncated);
        }
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(T::unpack(self)?);
        }
        Ok(v)
    }

    /// An optional item (`T *x`).
    pub fn get_option<T: Unpack>(&mut self) -> Result<Option<T>> {
        if self.get_bool()? {
            Ok(Some(T::unpack(self)?))
        } else {
            Ok(None)
        }
    }

    /// An XDR linked list (`struct node { T item; node *next; }`, as used by READDIR entries and
    /// the MOUNT/PORTMAP lists): a `true` before each item and a `false` after the last.
    ///
    /// At most `max` items are accepted; every item takes at least 4 bytes of the record, so a
    /// list can never claim more memory than the record (bounded by the transport) holds.
    pub fn get_list<T: Unpack>(&mut self, what: &'static str, max: usize) -> Result<Vec<T>> {
        let mut v = Vec::new();
        while self.get_bool()? {
            if v.len() >= max {
                return Err(DecodeError::TooLong {
                    what,
                    max,
                    got: v.len() + 1,
                });
            }
            v.push(T::unpack(self)?);
        }
        Ok(v)
    }

    /// Fails unless the whole record has been consumed.
    pub fn finish(&self) -> Result<()> {
        if self.remaining == 0 {
            Ok(())
        } else {
            Err(DecodeError::Invalid("trailing bytes after the last item"))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Payload
// ---------------------------------------------------------------------------------------------

/// Bulk data (READ/WRITE payloads, READLINK targets are not bulk) as a list of chunks.
///
/// Equality compares the bytes, not how they are split into chunks: the same payload decoded
/// from differently fragmented records is the same value.
#[derive(Clone, Default)]
pub struct Payload {
    chunks: Vec<Bytes>,
    len: usize,
}

impl Payload {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn from_chunks(chunks: Vec<Bytes>) -> Self {
        let len = chunks.iter().map(|c| c.len()).sum();
        Payload { chunks, len }
    }

    pub fn push(&mut self, chunk: Bytes) {
        self.len += chunk.len();
        if !chunk.is_empty() {
            self.chunks.push(chunk);
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn chunks(&self) -> &[Bytes] {
        &self.chunks
    }

    pub fn into_chunks(self) -> Vec<Bytes> {
        self.chunks
    }

    /// Copies the payload into one buffer. Only for tests and small payloads.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for c in &self.chunks {
            v.extend_from_slice(c);
        }
        v
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len
            && self
                .chunks
                .iter()
                .flat_map(|c| c.iter())
                .eq(other.chunks.iter().flat_map(|c| c.iter()))
    }
}
impl Eq for Payload {}

impl From<Bytes> for Payload {
    fn from(b: Bytes) -> Self {
        Payload::from_chunks(vec![b])
    }
}

impl From<Vec<u8>> for Payload {
    fn from(v: Vec<u8>) -> Self {
        Payload::from(Bytes::from(v))
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Payload({} bytes in {} chunks)",
            self.len,
            self.chunks.len()
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------------------------

/// Builds an encoding as a list of segments (an iovec).
#[derive(Default)]
pub struct Writer {
    segs: Vec<Bytes>,
    cur: BytesMut,
    len: usize,
}

impl Writer {
    /// The staging buffer is cut into a segment once it holds this much. Keeps every contiguous
    /// allocation made while encoding (large READDIR replies included) at or below 64 KiB.
    pub const SEGMENT_BYTES: usize = 64 * 1024;

    pub fn new() -> Self {
        Self::default()
    }

    /// Total bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn reserve_small(&mut self, n: usize) {
        if self.cur.len() + n > Self::SEGMENT_BYTES {
            self.flush();
        }
        if self.cur.capacity() - self.cur.len() < n {
            self.cur.reserve(n.max(512));
        }
    }

    fn flush(&mut self) {
        if !self.cur.is_empty() {
            self.segs.push(self.cur.split().freeze());
        }
    }

    pub fn put_u32(&mut self, v: u32) {
        self.reserve_small(4);
        self.cur.extend_from_slice(&v.to_be_bytes());
        self.len += 4;
    }

    pub fn put_i32(&mut self, v: i32) {
        self.put_u32(v as u32)
    }

    pub fn put_u64(&mut self, v: u64) {
        self.reserve_small(8);
        self.cur.extend_from_slice(&v.to_be_bytes());
        self.len += 8;
    }

    pub fn put_i64(&mut self, v: i64) {
        self.put_u64(v as u64)
    }

    pub fn put_bool(&mut self, v: bool) {
        self.put_u32(v as u32)
    }

    /// Raw bytes, copied, no length and no padding.
    pub fn put_raw(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.cur.len() >= Self::SEGMENT_BYTES {
                self.flush();
            }
            let room = Self::SEGMENT_BYTES - self.cur.len();
            let n = room.min(data.len());
            self.reserve_small(n);
            self.cur.extend_from_slice(&data[..n]);
            self.len += n;
            data = &data[n..];
        }
    }

    fn put_pad(&mut self, len: usize) {
        let pad = pad_len(len);
        if pad > 0 {
            self.put_raw(&[0u8; 3][..pad]);
        }
    }

    /// Fixed-length opaque data with padding.
    pub fn put_fixed(&mut self, data: &[u8]) {
        self.put_raw(data);
        self.put_pad(data.len());
    }

    /// Variable-length opaque data (length, bytes, padding), copied.
    pub fn put_opaque(&mut self, data: &[u8]) {
        self.put_u32(data.len() as u32);
        self.put_fixed(data);
    }

    /// A string; same wire form as opaque data.
    pub fn put_string(&mut self, s: &[u8]) {
        self.put_opaque(s)
    }

    /// Bulk opaque data appended as the payload's own chunks, without copying them.
    pub fn put_payload(&mut self, p: &Payload) {
        self.put_u32(p.len() as u32);
        self.flush();
        for c in p.chunks() {
            self.segs.push(c.clone());
        }
        self.len += p.len();
        self.put_pad(p.len());
    }

    /// A counted array.
    pub fn put_array<T: Pack>(&mut self, items: &[T]) {
        self.put_u32(items.len() as u32);
        for it in items {
            it.pack(self);
        }
    }

    /// An XDR linked list: `true` and the item for each item, then `false`
    /// (see [`Reader::get_list`]).
    pub fn put_list<T: Pack>(&mut self, items: &[T]) {
        for it in items {
            self.put_bool(true);
            it.pack(self);
        }
        self.put_bool(false);
    }

    /// An optional item.
    pub fn put_option<T: Pack>(&mut self, v: &Option<T>) {
        match v {
            Some(x) => {
                self.put_bool(true);
                x.pack(self);
            }
            None => self.put_bool(false),
        }
    }

    /// The finished encoding as segments.
    pub fn into_segments(mut self) -> Vec<Bytes> {
        self.flush();
        self.segs
    }

    /// The finished encoding in one buffer (copies when there is more than one segment; meant
    /// for small messages and tests).
    pub fn into_bytes(self) -> Bytes {
        let mut segs = self.into_segments();
        match segs.len() {
            0 => Bytes::new(),
            1 => segs.pop().unwrap(),
            _ => {
                let total = segs.iter().map(|s| s.len()).sum();
                let mut out = BytesMut::with_capacity(total);
                for s in segs {
                    out.extend_from_slice(&s);
                }
                out.freeze()
            }
        }
    }
}

/// Encodes a value into one buffer.
pub fn to_bytes<T: Pack + ?Sized>(v: &T) -> Bytes {
    let mut w = Writer::new();
    v.pack(&mut w);
    w.into_bytes()
}

/// Decodes a value from one buffer, requiring that every byte is consumed.
pub fn from_bytes<T: Unpack>(b: &Bytes) -> Result<T> {
    let mut r = Reader::from_bytes(b);
    let v = T::unpack(&mut r)?;
    r.finish()?;
    Ok(v)
}

// ---------------------------------------------------------------------------------------------
// Impls for scalars
// ---------------------------------------------------------------------------------------------

impl Pack for u32 {
    fn pack(&self, w: &mut Writer) {
        w.put_u32(*self)
    }
}
impl Unpack for u32 {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        r.get_u32()
    }
}
impl Pack for i32 {
    fn pack(&self, w: &mut Writer) {
        w.put_i32(*self)
    }
}
impl Unpack for i32 {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        r.get_i32()
    }
}
impl Pack for u64 {
    fn pack(&self, w: &mut Writer) {
        w.put_u64(*self)
    }
}
impl Unpack for u64 {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        r.get_u64()
    }
}
impl Pack for i64 {
    fn pack(&self, w: &mut Writer) {
        w.put_i64(*self)
    }
}
impl Unpack for i64 {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        r.get_i64()
    }
}
impl Pack for bool {
    fn pack(&self, w: &mut Writer) {
        w.put_bool(*self)
    }
}
impl Unpack for bool {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        r.get_bool()
    }
}
/// `void`: nothing on the wire (NULL procedures, resfail arms with no body).
impl Pack for () {
    fn pack(&self, _w: &mut Writer) {}
}
impl Unpack for () {
    fn unpack(_r: &mut Reader<'_>) -> Result<Self> {
        Ok(())
    }
}
/// Fixed-length opaque data (`opaque x[N]`, e.g. NFS verifiers), padded to four bytes.
impl<const N: usize> Pack for [u8; N] {
    fn pack(&self, w: &mut Writer) {
        w.put_fixed(self)
    }
}
impl<const N: usize> Unpack for [u8; N] {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        r.get_fixed()
    }
}
impl<T: Pack> Pack for Option<T> {
    fn pack(&self, w: &mut Writer) {
        w.put_option(self)
    }
}
impl<T: Unpack> Unpack for Option<T> {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        r.get_option()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn split(b: &Bytes, cuts: &[usize]) -> Vec<Bytes> {
        let mut segs = Vec::new();
        let mut start = 0;
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (b.len() + 1)).collect();
        cuts.sort();
        for c in cuts {
            segs.push(b.slice(start..c.max(start)));
            start = c.max(start);
        }
        segs.push(b.slice(start..));
        segs
    }

    #[test]
    fn scalars_round_trip() {
        let mut w = Writer::new();
        w.put_u32(7);
        w.put_i64(-2);
        w.put_bool(true);
        w.put_opaque(b"hello");
        let b = w.into_bytes();
        assert_eq!(b.len(), 4 + 8 + 4 + 4 + 8);
        let mut r = Reader::from_bytes(&b);
        assert_eq!(r.get_u32().unwrap(), 7);
        assert_eq!(r.get_i64().unwrap(), -2);
        assert!(r.get_bool().unwrap());
        assert_eq!(&r.get_opaque("x", 5).unwrap()[..], b"hello");
        r.finish().unwrap();
    }

    #[test]
    fn length_over_bound_is_refused_before_allocating() {
        let mut w = Writer::new();
        w.put_u32(u32::MAX);
        let b = w.into_bytes();
        let mut r = Reader::from_bytes(&b);
        assert!(matches!(
            r.get_opaque("name", 255),
            Err(DecodeError::TooLong { .. })
        ));
        let mut r = Reader::from_bytes(&b);
        assert_eq!(
            r.get_payload("data", usize::MAX).unwrap_err(),
            DecodeError::Truncated
        );
        let mut r = Reader::from_bytes(&b);
        assert_eq!(
            r.get_array::<u32>("list", usize::MAX).unwrap_err(),
            DecodeError::Truncated
        );
    }

    #[test]
    fn bad_bool_is_an_error() {
        let b = Bytes::from_static(&[0, 0, 0, 2]);
        assert_eq!(
            Reader::from_bytes(&b).get_bool().unwrap_err(),
            DecodeError::BadBool(2)
        );
    }

    #[test]
    fn writer_never_stages_more_than_a_segment() {
        let mut w = Writer::new();
        w.put_opaque(&vec![1u8; 300_000]);
        let segs = w.into_segments();
        assert!(segs.iter().all(|s| s.len() <= Writer::SEGMENT_BYTES));
        assert_eq!(segs.iter().map(|s| s.len()).sum::<usize>(), 300_004);
    }

    #[test]
    fn payload_is_zero_copy() {
        let data = Bytes::from(vec![9u8; 10_000]);
        let mut w = Writer::new();
        w.put_payload(&Payload::from(data.clone()));
        let segs = w.into_segments();
        assert!(segs.iter().any(|s| s.as_ptr() == data.as_ptr()));
    }

    proptest! {
        #[test]
        fn segmented_reads_match_contiguous(
            a in any::<u32>(), b in any::<u64>(),
            s in proptest::collection::vec(any::<u8>(), 0..300),
            d in proptest::collection::vec(any::<u8>(), 0..3000),
            cuts in proptest::collection::vec(any::<usize>(), 0..8),
        ) {
            let mut w = Writer::new();
            w.put_u32(a);
            w.put_u64(b);
            w.put_opaque(&s);
            w.put_payload(&Payload::from(d.clone()));
            let whole = w.into_bytes();
            let segs = split(&whole, &cuts);
            let mut r = Reader::new(&segs);
            prop_assert_eq!(r.get_u32().unwrap(), a);
            prop_assert_eq!(r.get_u64().unwrap(), b);
            prop_assert_eq!(r.get_opaque("s", 300).unwrap().to_vec(), s);
            prop_assert_eq!(r.get_payload("d", 3000).unwrap().to_vec(), d);
            prop_assert!(r.finish().is_ok());
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let b = Bytes::from(data);
            let mut r = Reader::from_bytes(&b);
            let _ = r.get_opaque("x", 1 << 20);
            let _ = r.get_payload("y", 1 << 20);
            let _ = r.get_array::<u64>("z", 1 << 20);
            let _ = r.get_fixed::<8>();
        }
    }
}
