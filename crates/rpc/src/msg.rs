//! The RPC message codec both call tables share: a CALL's header built around its arguments,
//! a REPLY's header mapped to the call's result, and the eight-byte look that tells the two
//! apart (RFC 5531 §9), with no I/O.
//!
//! ```text
//!   ProcId + cred + args ──build_call──► [CALL header][args...]   (zero-copy: args stay segments)
//!   record ──classify──► Call { xid } | Reply { xid } | Garbage   (reads xid and msg_type only)
//!   REPLY record ──decode_reply──► Ok(Reply: segments + results offset) | Err(RpcError)
//! ```
//!
//! The client's [`crate::client::CallTable`] and the server's callback table
//! [`crate::duplex::OutgoingCalls`] both send calls and match replies; they differ in policy
//! (resend on reconnect or fail, one timeout or one per call) and in nothing on the wire. So the
//! wire format lives here, below both, and a callback reply maps to the same [`RpcError`]s as an
//! NFS reply. The old paths (`client::ProcId`, `duplex::classify`, ...) re-export these.

use bytes::Bytes;
use sluice_xdr::rpc::{
    AcceptStat, AuthStat, CallHeader, MsgHeader, OpaqueAuth, ReplyBody, MSG_CALL, MSG_REPLY,
    RPC_VERSION,
};
use sluice_xdr::{DecodeError, Pack, Reader, Unpack, Writer};
use std::fmt;

/// Program, version and procedure of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcId {
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
}

/// A message to put on the wire now. `segments` is the whole RPC message (header and
/// arguments), not record-marked: over TCP pass it through [`crate::record::frame`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    pub xid: u32,
    pub segments: Vec<Bytes>,
    /// True when this call was transmitted before (same XID).
    pub is_retransmit: bool,
}

/// A successful reply: the record and where the procedure's results start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub segments: Vec<Bytes>,
    pub results_offset: usize,
}

impl Reply {
    /// A reader positioned at the results.
    pub fn results(&self) -> Reader<'_> {
        let mut r = Reader::new(&self.segments);
        r.skip(self.results_offset)
            .expect("results_offset lies within the reply");
        r
    }
}

/// Why a call did not produce results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RpcError {
    /// MSG_ACCEPTED / PROG_UNAVAIL.
    ProgUnavail,
    /// MSG_ACCEPTED / PROG_MISMATCH with the versions the server supports.
    ProgMismatch { low: u32, high: u32 },
    /// MSG_ACCEPTED / PROC_UNAVAIL.
    ProcUnavail,
    /// MSG_ACCEPTED / GARBAGE_ARGS.
    GarbageArgs,
    /// MSG_ACCEPTED / SYSTEM_ERR.
    SystemErr,
    /// MSG_DENIED / AUTH_ERROR.
    AuthError(AuthStat),
    /// MSG_DENIED / RPC_MISMATCH with the RPC versions the server supports.
    RpcMismatch { low: u32, high: u32 },
    /// The reply header for this XID did not decode (or had an undefined accept_stat).
    BadReply(DecodeError),
    /// Soft mode: `retrans` major timeouts passed without a reply.
    TimedOut,
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RpcError::ProgUnavail => write!(f, "program unavailable"),
            RpcError::ProgMismatch { low, high } => {
                write!(f, "program version mismatch (server has {low}..={high})")
            }
            RpcError::ProcUnavail => write!(f, "procedure unavailable"),
            RpcError::GarbageArgs => write!(f, "server could not decode the arguments"),
            RpcError::SystemErr => write!(f, "server system error"),
            RpcError::AuthError(s) => write!(f, "authentication error {}", s.0),
            RpcError::RpcMismatch { low, high } => {
                write!(f, "RPC version mismatch (server has {low}..={high})")
            }
            RpcError::BadReply(e) => write!(f, "undecodable reply: {e}"),
            RpcError::TimedOut => write!(f, "timed out"),
        }
    }
}

impl std::error::Error for RpcError {}

/// What a record is, from its first eight bytes (RFC 5531 §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgKind {
    /// `msg_type` CALL: the peer calls us; answer it.
    Call { xid: u32 },
    /// `msg_type` REPLY: an answer to one of our calls; match it in our table.
    Reply { xid: u32 },
    /// Shorter than eight bytes, or an undefined `msg_type`.
    Garbage,
}

/// Sorts a record into CALL, REPLY or garbage. Never panics on any input.
pub fn classify(record: &[Bytes]) -> MsgKind {
    let mut r = Reader::new(record);
    match (r.get_u32(), r.get_u32()) {
        (Ok(xid), Ok(MSG_CALL)) => MsgKind::Call { xid },
        (Ok(xid), Ok(MSG_REPLY)) => MsgKind::Reply { xid },
        _ => MsgKind::Garbage,
    }
}

/// Encodes the call header followed by the argument segments.
pub(crate) fn build_call(xid: u32, p: ProcId, cred: &OpaqueAuth, args: Vec<Bytes>) -> Vec<Bytes> {
    let mut w = Writer::new();
    MsgHeader::Call {
        xid,
        call: CallHeader {
            rpcvers: RPC_VERSION,
            prog: p.prog,
            vers: p.vers,
            proc_: p.proc_,
            cred: cred.clone(),
            verf: OpaqueAuth::none(),
        },
    }
    .pack(&mut w);
    let mut segs = w.into_segments();
    segs.extend(args.into_iter().filter(|a| !a.is_empty()));
    segs
}

/// Maps a reply record (already known to be a REPLY for a live call) to the call's result.
pub(crate) fn decode_reply(segments: Vec<Bytes>) -> Result<Reply, RpcError> {
    let mut r = Reader::new(&segments);
    let body = match MsgHeader::unpack(&mut r) {
        Ok(MsgHeader::Reply { body, .. }) => body,
        Ok(MsgHeader::Call { .. }) => unreachable!("msg_type was checked to be REPLY"),
        Err(e) => return Err(RpcError::BadReply(e)),
    };
    let results_offset = r.position();
    match body {
        ReplyBody::Accepted { stat, mismatch, .. } => match stat {
            AcceptStat::SUCCESS => Ok(Reply {
                segments,
                results_offset,
            }),
            AcceptStat::PROG_UNAVAIL => Err(RpcError::ProgUnavail),
            AcceptStat::PROG_MISMATCH => {
                let (low, high) = mismatch.expect("decoded with PROG_MISMATCH");
                Err(RpcError::ProgMismatch { low, high })
            }
            AcceptStat::PROC_UNAVAIL => Err(RpcError::ProcUnavail),
            AcceptStat::GARBAGE_ARGS => Err(RpcError::GarbageArgs),
            AcceptStat::SYSTEM_ERR => Err(RpcError::SystemErr),
            AcceptStat(value) => Err(RpcError::BadReply(DecodeError::BadDiscriminant {
                what: "accept_stat",
                value,
            })),
        },
        ReplyBody::RpcMismatch { low, high } => Err(RpcError::RpcMismatch { low, high }),
        ReplyBody::AuthError(stat) => Err(RpcError::AuthError(stat)),
    }
}
