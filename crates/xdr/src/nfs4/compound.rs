//! COMPOUND (RFC 8881 §16.2): decoding a request op by op under hard bounds, and encoding the
//! reply.
//!
//! ```text
//!  tag<>  minorversion  count  { opnum args } * count
//!   |          |          |          |
//!   |          |          |          +-- unknown opnum: list ends with Illegal (the server
//!   |          |          |              answers OP_ILLEGAL / NFS4ERR_OP_ILLEGAL for it)
//!   |          |          |          +-- args that do not decode: list ends with BadXdr(op) (the
//!   |          |          |              server runs the ops before it, then answers
//!   |          |          |              NFS4ERR_BADXDR for it, as knfsd does)
//!   |          |          +-- over `ops_max`: CompoundError::TooManyOps, with the tag, the minor
//!   |          |              version and the first op, so the server can still answer
//!   |          +-- not 1 or 2: nothing more is read; the server answers
//!   |              NFS4ERR_MINOR_VERS_MISMATCH with no results (RFC 8881 §16.2.3)
//!   +-- over `tag_bytes_max`: CompoundError::Xdr (GARBAGE_ARGS)
//! ```
//!
//! What cannot be parsed as a COMPOUND at all (a short record, a tag over its bound, an op number
//! cut off) is a [`DecodeError`], which the RPC layer turns into GARBAGE_ARGS. Everything after it
//! gets an NFS answer, because an NFS error tells the client which op failed.
//!
//! The op count bound is a hard cap on work and memory per request, independent of sessions; the
//! server additionally enforces the session's `ca_maxoperations` (NFS4ERR_TOO_MANY_OPS in the
//! SEQUENCE result). The request's size is bounded by the transport's record limit (and the
//! session's `ca_maxrequestsize`), so no op list can hold more than a record's worth of data.

use super::ops::{NfsArgop4, NfsResop4, Opnum4, ReadRes, Res4};
use super::{Nfsstat4, Utf8Str, MINOR_VERSIONS};
use crate::{DecodeError, Pack, Payload, Reader, Result, Unpack, Writer};

/// Bounds applied while decoding a COMPOUND or CB_COMPOUND.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompoundLimits {
    /// Most ops accepted in one COMPOUND. Default 128: the Linux client sends at most about a
    /// dozen (an OPEN with its GETATTRs and a LAYOUTGET), knfsd accepts up to 200 and advertises
    /// fewer in `ca_maxoperations`; 128 leaves room while keeping the work one request can ask
    /// for small.
    pub ops_max: u32,
    /// Largest tag in bytes. Default 256: Linux and FreeBSD send an empty tag, and the tag is only
    /// echoed back; a longer one is GARBAGE_ARGS.
    pub tag_bytes_max: usize,
}

impl Default for CompoundLimits {
    fn default() -> Self {
        CompoundLimits {
            ops_max: 128,
            tag_bytes_max: 256,
        }
    }
}

/// Why a COMPOUND could not be decoded into ops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompoundError {
    /// Not a COMPOUND: the RPC layer answers GARBAGE_ARGS.
    Xdr(DecodeError),
    /// More ops than [`CompoundLimits::ops_max`]. The server answers [`CompoundError::status`]
    /// with the tag echoed (and, for a SEQUENCE first, may run it to keep the slot consistent).
    TooManyOps {
        tag: Utf8Str,
        minorversion: u32,
        count: u32,
        /// The first op, if it decoded.
        first: Option<Box<NfsArgop4>>,
    },
}

impl CompoundError {
    /// The COMPOUND status for this error: NFS4ERR_TOO_MANY_OPS from minor version 1 on
    /// (RFC 8881 §15.1), NFS4ERR_RESOURCE for 4.0 (RFC 7530 §13.1). `None` for GARBAGE_ARGS.
    pub fn status(&self) -> Option<Nfsstat4> {
        match self {
            CompoundError::Xdr(_) => None,
            CompoundError::TooManyOps {
                minorversion: 0, ..
            } => Some(Nfsstat4::RESOURCE),
            CompoundError::TooManyOps { .. } => Some(Nfsstat4::TOO_MANY_OPS),
        }
    }
}

impl From<DecodeError> for CompoundError {
    fn from(e: DecodeError) -> Self {
        CompoundError::Xdr(e)
    }
}

impl std::fmt::Display for CompoundError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CompoundError::Xdr(e) => write!(f, "{e}"),
            CompoundError::TooManyOps { count, .. } => write!(f, "COMPOUND of {count} ops"),
        }
    }
}

impl std::error::Error for CompoundError {}

/// `COMPOUND4args`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Compound4Args {
    pub tag: Utf8Str,
    pub minorversion: u32,
    /// Empty when `minorversion` is not served (nothing after it is read).
    pub ops: Vec<NfsArgop4>,
}

impl Compound4Args {
    /// Whether this crate decoded the ops (minor version 1 or 2).
    pub fn minorversion_supported(&self) -> bool {
        MINOR_VERSIONS.contains(&self.minorversion)
    }

    /// Decodes a COMPOUND under `limits` (see the module notes). Bytes after the last op read are
    /// left in `r`: after an `Illegal` or `BadXdr` op the rest is not looked at.
    pub fn decode(
        r: &mut Reader<'_>,
        limits: &CompoundLimits,
    ) -> std::result::Result<Compound4Args, CompoundError> {
        let tag = Utf8Str(r.get_opaque("COMPOUND tag", limits.tag_bytes_max)?);
        let minorversion = r.get_u32()?;
        if !MINOR_VERSIONS.contains(&minorversion) {
            return Ok(Compound4Args {
                tag,
                minorversion,
                ops: Vec::new(),
            });
        }
        let count = r.get_u32()?;
        if count > limits.ops_max {
            let first = if count > 0 {
                NfsArgop4::unpack(r).ok().map(Box::new)
            } else {
                None
            };
            return Err(CompoundError::TooManyOps {
                tag,
                minorversion,
                count,
                first,
            });
        }
        let ops = decode_ops(r, count)?;
        Ok(Compound4Args {
            tag,
            minorversion,
            ops,
        })
    }
}

/// Reads up to `count` ops, ending the list early at an Illegal or BadXdr op.
fn decode_ops(r: &mut Reader<'_>, count: u32) -> Result<Vec<NfsArgop4>> {
    // Each op takes at least its 4-byte number: never reserve more than the record can hold.
    let mut ops = Vec::with_capacity((count as usize).min(r.remaining() / 4));
    for _ in 0..count {
        let op = Opnum4::unpack(r)?;
        match NfsArgop4::decode(op, r) {
            Ok(a @ NfsArgop4::Illegal(_)) => {
                ops.push(a);
                break;
            }
            Ok(a) => ops.push(a),
            Err(e) => {
                ops.push(NfsArgop4::BadXdr(op, e));
                break;
            }
        }
    }
    Ok(ops)
}

impl Pack for Compound4Args {
    fn pack(&self, w: &mut Writer) {
        self.tag.pack(w);
        w.put_u32(self.minorversion);
        w.put_array(&self.ops);
    }
}

impl Unpack for Compound4Args {
    /// Decodes with the default limits; a [`CompoundError::TooManyOps`] becomes a
    /// [`DecodeError::TooLong`].
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        let limits = CompoundLimits::default();
        Compound4Args::decode(r, &limits).map_err(|e| match e {
            CompoundError::Xdr(e) => e,
            CompoundError::TooManyOps { count, .. } => DecodeError::TooLong {
                what: "COMPOUND ops",
                max: limits.ops_max as usize,
                got: count as usize,
            },
        })
    }
}

/// `COMPOUND4res`: the status of the last op run, the tag, and one result per op run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Compound4Res {
    pub status: Nfsstat4,
    pub tag: Utf8Str,
    pub results: Vec<NfsResop4>,
}

impl Compound4Res {
    /// Encodes the reply; when the last result is a successful READ, its data bytes are left
    /// out and returned, so the caller can send them after the encoded part (as separate iovec
    /// entries, or spliced from a pipe), followed by [`padding_after`]`(data.len())` zero bytes.
    /// Otherwise everything is encoded and `None` is returned.
    ///
    /// Only a READ that is the last op can be deferred: everything in a COMPOUND reply is
    /// sequential, so data in the middle must be in place.
    pub fn pack_with_read_data_last(&self, w: &mut Writer) -> Option<Payload> {
        match self.results.last() {
            Some(NfsResop4::Read(Res4::Ok(ok))) => {
                self.status.pack(w);
                self.tag.pack(w);
                w.put_u32(self.results.len() as u32);
                for r in &self.results[..self.results.len() - 1] {
                    r.pack(w);
                }
                Opnum4::READ.pack(w);
                Nfsstat4::OK.pack(w);
                ok.pack_without_data(w);
                Some(ok.data.clone())
            }
            _ => {
                self.pack(w);
                None
            }
        }
    }

    /// Decodes a reply with at most `limits.ops_max` results (client side).
    pub fn decode(r: &mut Reader<'_>, limits: &CompoundLimits) -> Result<Compound4Res> {
        Ok(Compound4Res {
            status: Nfsstat4::unpack(r)?,
            tag: Utf8Str(r.get_opaque("COMPOUND tag", limits.tag_bytes_max)?),
            results: r.get_array("COMPOUND results", limits.ops_max as usize)?,
        })
    }

    /// The READ result, if the last op is a READ (helper for servers choosing a send path).
    pub fn last_read(&self) -> Option<&ReadRes> {
        match self.results.last() {
            Some(NfsResop4::Read(r)) => Some(r),
            _ => None,
        }
    }
}

/// The zero bytes after `len` bytes of opaque data (RFC 4506 §4.10).
pub fn padding_after(len: usize) -> usize {
    crate::pad_len(len)
}

impl Pack for Compound4Res {
    fn pack(&self, w: &mut Writer) {
        self.status.pack(w);
        self.tag.pack(w);
        w.put_array(&self.results);
    }
}

impl Unpack for Compound4Res {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Compound4Res::decode(r, &CompoundLimits::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs4::arb::{Arb, Gen};
    use crate::nfs4::ops::{ReadResOk, SequenceArgs};
    use crate::nfs4::{Bitmap4, NfsFh4};
    use crate::to_bytes;
    use bytes::Bytes;
    use proptest::prelude::*;

    fn decode(
        b: &[u8],
        limits: &CompoundLimits,
    ) -> std::result::Result<Compound4Args, CompoundError> {
        let b = Bytes::copy_from_slice(b);
        Compound4Args::decode(&mut Reader::from_bytes(&b), limits)
    }

    fn sequence() -> NfsArgop4 {
        NfsArgop4::Sequence(SequenceArgs {
            sessionid: [0x11; 16],
            sequenceid: 1,
            slotid: 0,
            highest_slotid: 0,
            cachethis: false,
        })
    }

    /// SEQUENCE, PUTROOTFH, GETFH, GETATTR {type, size}: what a client sends to find the root.
    #[test]
    fn compound_golden_bytes() {
        let c = Compound4Args {
            tag: Utf8Str::from(&b"ab"[..]),
            minorversion: 1,
            ops: vec![
                sequence(),
                NfsArgop4::Putrootfh(()),
                NfsArgop4::Getfh(()),
                NfsArgop4::Getattr(Bitmap4(vec![0b10010])),
            ],
        };
        let mut want: Vec<u8> = vec![
            0, 0, 0, 2, b'a', b'b', 0, 0, // tag<>: length 2, "ab", 2 bytes of padding
            0, 0, 0, 1, // minorversion 1
            0, 0, 0, 4, // argarray<>: 4 ops
            0, 0, 0, 53, // OP_SEQUENCE
        ];
        want.extend_from_slice(&[0x11; 16]); // sa_sessionid
        want.extend_from_slice(&[
            0, 0, 0, 1, // sa_sequenceid
            0, 0, 0, 0, // sa_slotid
            0, 0, 0, 0, // sa_highest_slotid
            0, 0, 0, 0, // sa_cachethis false
            0, 0, 0, 24, // OP_PUTROOTFH (void args)
            0, 0, 0, 10, // OP_GETFH (void args)
            0, 0, 0, 9, // OP_GETATTR
            0, 0, 0, 1, 0, 0, 0, 0x12, // attr_request: 1 word, bits 1 (type) and 4 (size)
        ]);
        assert_eq!(to_bytes(&c).to_vec(), want);
        assert_eq!(decode(&want, &CompoundLimits::default()).unwrap(), c);
    }

    #[test]
    fn compound_reply_golden_bytes() {
        let res = Compound4Res {
            status: Nfsstat4::NOENT,
            tag: Utf8Str::default(),
            results: vec![
                NfsResop4::Putrootfh(Nfsstat4::OK),
                NfsResop4::Getfh(Res4::Ok(NfsFh4::from(&b"\x01\x02\x03"[..]))),
                NfsResop4::Lookup(Nfsstat4::NOENT),
            ],
        };
        let mut want = vec![0, 0, 0, 2]; // status NFS4ERR_NOENT
        want.extend_from_slice(&[0, 0, 0, 0]); // empty tag
        want.extend_from_slice(&[0, 0, 0, 3]); // 3 results
        want.extend_from_slice(&[0, 0, 0, 24, 0, 0, 0, 0]); // PUTROOTFH NFS4_OK
        want.extend_from_slice(&[0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 3, 1, 2, 3, 0]); // GETFH OK fh
        want.extend_from_slice(&[0, 0, 0, 15, 0, 0, 0, 2]); // LOOKUP NFS4ERR_NOENT
        assert_eq!(to_bytes(&res).to_vec(), want);
        let b = Bytes::from(want);
        assert_eq!(
            Compound4Res::unpack(&mut Reader::from_bytes(&b)).unwrap(),
            res
        );
    }

    #[test]
    fn too_many_ops_is_a_distinct_error_with_the_tag_and_first_op() {
        let limits = CompoundLimits {
            ops_max: 2,
            ..Default::default()
        };
        let c = Compound4Args {
            tag: Utf8Str::from(&b"t"[..]),
            minorversion: 1,
            ops: vec![sequence(), NfsArgop4::Putrootfh(()), NfsArgop4::Getfh(())],
        };
        match decode(&to_bytes(&c), &limits) {
            Err(e @ CompoundError::TooManyOps { .. }) => {
                assert_eq!(e.status(), Some(Nfsstat4::TOO_MANY_OPS));
                let CompoundError::TooManyOps {
                    tag, count, first, ..
                } = e
                else {
                    unreachable!()
                };
                assert_eq!(&tag[..], b"t");
                assert_eq!(count, 3);
                assert_eq!(first, Some(Box::new(sequence())));
            }
            other => panic!("{other:?}"),
        }
        // A huge count in a short record is refused before anything is reserved.
        let b = [0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            decode(&b, &CompoundLimits::default()),
            Err(CompoundError::TooManyOps {
                count: u32::MAX,
                first: None,
                ..
            })
        ));
    }

    #[test]
    fn oversize_tag_is_garbage() {
        let c = Compound4Args {
            tag: Utf8Str(Bytes::from(vec![b'x'; 257])),
            minorversion: 1,
            ops: vec![],
        };
        assert!(matches!(
            decode(&to_bytes(&c), &CompoundLimits::default()),
            Err(CompoundError::Xdr(DecodeError::TooLong { .. }))
        ));
    }

    #[test]
    fn minor_version_zero_reads_only_tag_and_version() {
        // A 4.0 COMPOUND with garbage after the version still yields the tag and the version.
        let b = [0, 0, 0, 1, b'z', 0, 0, 0, 0, 0, 0, 0, 0xde, 0xad];
        let c = decode(&b, &CompoundLimits::default()).unwrap();
        assert_eq!(&c.tag[..], b"z");
        assert_eq!(c.minorversion, 0);
        assert!(c.ops.is_empty() && !c.minorversion_supported());
        let c = decode(&[0, 0, 0, 0, 0, 0, 0, 3], &CompoundLimits::default()).unwrap();
        assert_eq!(c.minorversion, 3);
    }

    #[test]
    fn unknown_op_ends_the_list_with_illegal() {
        let mut w = Writer::new();
        w.put_opaque(b"");
        w.put_u32(1);
        w.put_u32(3);
        sequence().pack(&mut w);
        w.put_u32(9999); // no such op
        w.put_u32(24); // PUTROOTFH, never read
        let c = decode(&w.into_bytes(), &CompoundLimits::default()).unwrap();
        assert_eq!(c.ops, vec![sequence(), NfsArgop4::Illegal(9999)]);
    }

    #[test]
    fn bad_args_end_the_list_with_bad_xdr() {
        let mut w = Writer::new();
        w.put_opaque(b"");
        w.put_u32(2);
        w.put_u32(3);
        NfsArgop4::Putrootfh(()).pack(&mut w);
        w.put_u32(22); // PUTFH with a 200-byte handle: over NFS4_FHSIZE
        w.put_opaque(&[0u8; 200]);
        NfsArgop4::Getfh(()).pack(&mut w);
        let c = decode(&w.into_bytes(), &CompoundLimits::default()).unwrap();
        assert_eq!(c.ops.len(), 2);
        assert_eq!(c.ops[0], NfsArgop4::Putrootfh(()));
        assert!(matches!(
            &c.ops[1],
            NfsArgop4::BadXdr(Opnum4::PUTFH, DecodeError::TooLong { .. })
        ));
    }

    #[test]
    fn oversize_owner_is_bad_xdr_for_its_op() {
        use crate::nfs4::OPAQUE_LIMIT;
        let mut w = Writer::new();
        // By hand: the typed encoder asserts the bound in debug builds.
        w.put_opaque(b""); // tag
        w.put_u32(1);
        w.put_u32(1);
        w.put_u32(Opnum4::EXCHANGE_ID.0);
        w.put_fixed(&[0; 8]);
        w.put_opaque(&vec![1u8; OPAQUE_LIMIT + 1]);
        let got = decode(&w.into_bytes(), &CompoundLimits::default()).unwrap();
        assert!(matches!(
            got.ops[..],
            [NfsArgop4::BadXdr(
                Opnum4::EXCHANGE_ID,
                DecodeError::TooLong {
                    max: OPAQUE_LIMIT,
                    ..
                }
            )]
        ));
    }

    #[test]
    fn truncated_op_number_is_garbage() {
        let b = [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 24, 0, 0];
        assert_eq!(
            decode(&b, &CompoundLimits::default()),
            Err(CompoundError::Xdr(DecodeError::Truncated))
        );
    }

    #[test]
    fn read_data_can_go_last_in_the_iovec() {
        let data = Bytes::from(vec![5u8; 10]);
        let res = Compound4Res {
            status: Nfsstat4::OK,
            tag: Utf8Str::default(),
            results: vec![
                NfsResop4::Putfh(Nfsstat4::OK),
                NfsResop4::Read(Res4::Ok(ReadResOk {
                    eof: false,
                    data: Payload::from(data.clone()),
                })),
            ],
        };
        let mut w = Writer::new();
        let deferred = res.pack_with_read_data_last(&mut w).unwrap();
        let mut parts = w.into_bytes().to_vec();
        assert_eq!(deferred.chunks()[0].as_ptr(), data.as_ptr(), "no copy");
        parts.extend_from_slice(&deferred.to_vec());
        parts.extend(std::iter::repeat_n(0u8, padding_after(deferred.len())));
        assert_eq!(parts, to_bytes(&res).to_vec());
        // Without a READ last, everything is encoded in place.
        let res = Compound4Res {
            results: vec![NfsResop4::Putfh(Nfsstat4::OK)],
            ..Default::default()
        };
        let mut w = Writer::new();
        assert!(res.pack_with_read_data_last(&mut w).is_none());
        assert_eq!(w.into_bytes(), to_bytes(&res));
    }

    fn arb_args(g: &mut Gen) -> Compound4Args {
        let n = g.below(6);
        Compound4Args {
            tag: Arb::arb(g),
            minorversion: 1 + g.below(2) as u32,
            ops: (0..n).map(|_| NfsArgop4::arb(g)).collect(),
        }
    }

    proptest! {
        #[test]
        fn compound_round_trip(seed in any::<u64>(), cut in any::<usize>()) {
            let mut g = Gen::new(seed);
            let c = arb_args(&mut g);
            let b = to_bytes(&c);
            let at = cut % (b.len() + 1);
            let segs = [b.slice(..at), b.slice(at..)];
            let mut r = Reader::new(&segs);
            prop_assert_eq!(Compound4Args::decode(&mut r, &CompoundLimits::default()).unwrap(), c);
            prop_assert_eq!(r.remaining(), 0);

            let n = g.below(6);
            let res = Compound4Res {
                status: Arb::arb(&mut g),
                tag: Arb::arb(&mut g),
                results: (0..n).map(|_| NfsResop4::arb(&mut g)).collect(),
            };
            let b = to_bytes(&res);
            let mut r = Reader::from_bytes(&b);
            prop_assert_eq!(Compound4Res::unpack(&mut r).unwrap(), res);
            prop_assert_eq!(r.remaining(), 0);
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let b = Bytes::from(data);
            let _ = Compound4Args::decode(&mut Reader::from_bytes(&b), &CompoundLimits::default());
            let _ = Compound4Res::unpack(&mut Reader::from_bytes(&b));
        }

        #[test]
        fn mutated_compounds_never_panic(seed in any::<u64>(), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
            // Valid requests with a few bytes changed reach far deeper than random bytes do.
            let c = arb_args(&mut Gen::new(seed));
            let mut b = to_bytes(&c).to_vec();
            for (at, v) in flips {
                let n = b.len();
                b[at % n] = v;
            }
            let b = Bytes::from(b);
            let _ = Compound4Args::decode(&mut Reader::from_bytes(&b), &CompoundLimits::default());
        }
    }
}
