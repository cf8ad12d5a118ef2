//! The server's side of a call: from a record to a checked call, and the replies (RFC 5531 §9).
//!
//! ```text
//!  record ──parse_call──► CallParse::Call(RpcCall)          dispatch on prog/vers/proc;
//!                         │                                 args start at args_offset
//!                         ├─ CallParse::RpcMismatch{xid}    reply MSG_DENIED RPC_MISMATCH 2..2
//!                         ├─ CallParse::AuthError{xid,stat} reply MSG_DENIED AUTH_ERROR stat
//!                         └─ CallParse::Garbage{xid,..}     GARBAGE_ARGS if the xid is known
//!                                                           and it is a CALL, else drop
//! ```
//!
//! # What is checked here, in RFC order
//! 1. `xid` and `msg_type` (§9). A record shorter than that, or a REPLY sent to a server, is
//!    [`CallParse::Garbage`] and is dropped: there is no call to answer.
//! 2. `rpcvers` must be 2 (§9, "RPC_MISMATCH"). Checked before anything else is decoded, because
//!    the layout of the rest depends on it; the reply names the range 2..2.
//! 3. `prog`, `vers`, `proc`, the credential and the verifier. If these are truncated (or an
//!    `opaque_auth` body claims more than 400 bytes, §8.2) the xid is known and the message is a
//!    call, so [`reply_for`] answers GARBAGE_ARGS, as Linux's `svc_process` does for garbage
//!    credentials; the client then fails the call instead of retransmitting it forever.
//! 4. Authentication (§8.2, §10, appendix A). sluice accepts AUTH_NONE and AUTH_SYS:
//!    - AUTH_NONE with a non-empty body, or an AUTH_SYS body that does not decode exactly
//!      (machine name over 255 bytes, more than 16 gids, trailing bytes): AUTH_BADCRED.
//!    - AUTH_SHORT: sluice never hands out shorthand verifiers, so it cannot match one:
//!      AUTH_REJECTEDCRED, which tells the client to start over with full AUTH_SYS credentials.
//!    - Any other flavor (AUTH_DH, RPCSEC_GSS, unknown values): AUTH_BADCRED, what Linux's
//!      `svc_authenticate` answers for a flavor it has no handler for. AUTH_TOOWEAK is kept for
//!      policy above this layer (an export that demands a flavor the call did not use); build it
//!      with [`auth_error`].
//!    - The verifier of an AUTH_NONE or AUTH_SYS call must be an empty AUTH_NONE: otherwise
//!      AUTH_BADVERF.
//!
//! Program, version and procedure are *not* checked here: which ones exist is the dispatch
//! table's knowledge. It answers with [`prog_unavail`], [`prog_mismatch`] or [`proc_unavail`].
//!
//! # Replies
//! Every builder returns the reply message as segments (not record-marked: [`crate::record::frame`]
//! does that for TCP). Replies carry an AUTH_NONE verifier, which RFC 5531 allows for AUTH_SYS
//! calls. [`success_header`] returns a [`Writer`] with the 24 header bytes already written so
//! the handler appends its results, including zero-copy payload chunks, to the same iovec.

use bytes::Bytes;
use sluice_xdr::rpc::{
    AcceptStat, AuthFlavor, AuthStat, AuthSys, CallHeader, OpaqueAuth, MSG_CALL, MSG_REPLY,
    RPC_VERSION,
};
use sluice_xdr::{DecodeError, Reader, Unpack, Writer};

/// The outcome of parsing a record as a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallParse {
    /// A well-formed, authenticated call: dispatch it.
    Call(RpcCall),
    /// `rpcvers` was not 2: reply with [`rpc_mismatch`].
    RpcMismatch { xid: u32, rpcvers: u32 },
    /// The credential or verifier was refused: reply with [`auth_error`].
    AuthError { xid: u32, stat: AuthStat },
    /// Not a decodable call. Reply GARBAGE_ARGS only if `xid` is `Some` (see [`reply_for`]).
    Garbage {
        /// Known when the record held a CALL whose header could not be decoded.
        xid: Option<u32>,
        reason: GarbageReason,
    },
}

/// Why a record is not a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GarbageReason {
    /// The record ended before `xid` and `msg_type`.
    TooShort,
    /// `msg_type` was not CALL (a REPLY, or no valid type at all).
    NotACall { msg_type: u32 },
    /// The call header after `rpcvers` failed to decode.
    Header(DecodeError),
}

/// A checked call: header fields, decoded credentials and where the arguments begin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcCall {
    pub xid: u32,
    /// The header as received (`rpcvers` is 2; `cred` is the raw credential).
    pub header: CallHeader,
    pub cred: Credentials,
    /// Byte offset of the procedure arguments in the record.
    pub args_offset: usize,
}

impl RpcCall {
    pub fn prog(&self) -> u32 {
        self.header.prog
    }
    pub fn vers(&self) -> u32 {
        self.header.vers
    }
    pub fn proc_(&self) -> u32 {
        self.header.proc_
    }

    /// A reader positioned at the arguments of the record this call was parsed from.
    pub fn args<'a>(&self, segs: &'a [Bytes]) -> Reader<'a> {
        let mut r = Reader::new(segs);
        r.skip(self.args_offset)
            .expect("args_offset lies within the record it was parsed from");
        r
    }
}

/// Credentials sluice accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    /// AUTH_NONE: no identity; the export maps it to its anonymous user.
    None,
    /// AUTH_SYS: the client's claimed uid, gid and supplementary gids.
    Sys(AuthSys),
}

impl Credentials {
    pub fn flavor(&self) -> AuthFlavor {
        match self {
            Credentials::None => AuthFlavor::NONE,
            Credentials::Sys(_) => AuthFlavor::SYS,
        }
    }
    /// The claimed uid; `None` for AUTH_NONE.
    pub fn uid(&self) -> Option<u32> {
        match self {
            Credentials::None => None,
            Credentials::Sys(a) => Some(a.uid),
        }
    }
    /// The claimed primary gid; `None` for AUTH_NONE.
    pub fn gid(&self) -> Option<u32> {
        match self {
            Credentials::None => None,
            Credentials::Sys(a) => Some(a.gid),
        }
    }
    /// Supplementary gids (at most 16); empty for AUTH_NONE.
    pub fn gids(&self) -> &[u32] {
        match self {
            Credentials::None => &[],
            Credentials::Sys(a) => &a.gids,
        }
    }
}

/// Parses the call header of a record. Never panics on any input.
pub fn parse_call(segs: &[Bytes]) -> CallParse {
    let mut r = Reader::new(segs);
    let (Ok(xid), Ok(msg_type)) = (r.get_u32(), r.get_u32()) else {
        return CallParse::Garbage {
            xid: None,
            reason: GarbageReason::TooShort,
        };
    };
    if msg_type != MSG_CALL {
        return CallParse::Garbage {
            xid: None,
            reason: GarbageReason::NotACall { msg_type },
        };
    }
    let header = match r.get_u32() {
        Ok(RPC_VERSION) => match decode_rest(&mut r) {
            Ok(h) => h,
            Err(e) => {
                return CallParse::Garbage {
                    xid: Some(xid),
                    reason: GarbageReason::Header(e),
                }
            }
        },
        Ok(rpcvers) => return CallParse::RpcMismatch { xid, rpcvers },
        Err(e) => {
            return CallParse::Garbage {
                xid: Some(xid),
                reason: GarbageReason::Header(e),
            }
        }
    };
    match authenticate(&header.cred, &header.verf) {
        Ok(cred) => CallParse::Call(RpcCall {
            xid,
            header,
            cred,
            args_offset: r.position(),
        }),
        Err(stat) => CallParse::AuthError { xid, stat },
    }
}

/// The reply to send for a parse outcome that is not a call, or `None` to drop the record.
/// Returns `None` for [`CallParse::Call`]: the dispatcher answers those.
pub fn reply_for(parse: &CallParse) -> Option<Vec<Bytes>> {
    match parse {
        CallParse::Call(_) => None,
        CallParse::RpcMismatch { xid, .. } => Some(rpc_mismatch(*xid)),
        CallParse::AuthError { xid, stat } => Some(auth_error(*xid, *stat)),
        CallParse::Garbage { xid: Some(xid), .. } => Some(garbage_args(*xid)),
        CallParse::Garbage { xid: None, .. } => None,
    }
}

/// Bytes of an accepted reply header: xid, REPLY, MSG_ACCEPTED, verifier (AUTH_NONE, empty),
/// accept_stat.
pub const ACCEPTED_HEADER_BYTES: usize = 24;

/// A writer holding the header of a SUCCESS reply; the handler appends the results.
pub fn success_header(xid: u32) -> Writer {
    let mut w = Writer::new();
    put_accepted_header(&mut w, xid, AcceptStat::SUCCESS);
    w
}

/// An accepted reply with `stat`, followed by whatever `body` writes: the results for SUCCESS,
/// `mismatch_info` for PROG_MISMATCH, nothing for the other statuses.
pub fn accepted_reply(xid: u32, stat: AcceptStat, body: impl FnOnce(&mut Writer)) -> Vec<Bytes> {
    let mut w = Writer::new();
    put_accepted_header(&mut w, xid, stat);
    body(&mut w);
    w.into_segments()
}

/// PROG_UNAVAIL: the program is not served here.
pub fn prog_unavail(xid: u32) -> Vec<Bytes> {
    accepted_reply(xid, AcceptStat::PROG_UNAVAIL, |_| {})
}

/// PROG_MISMATCH: the program is served, in versions `low..=high` only.
pub fn prog_mismatch(xid: u32, low: u32, high: u32) -> Vec<Bytes> {
    accepted_reply(xid, AcceptStat::PROG_MISMATCH, |w| {
        w.put_u32(low);
        w.put_u32(high);
    })
}

/// PROC_UNAVAIL: the program version has no such procedure.
pub fn proc_unavail(xid: u32) -> Vec<Bytes> {
    accepted_reply(xid, AcceptStat::PROC_UNAVAIL, |_| {})
}

/// GARBAGE_ARGS: the arguments (or the call header) could not be decoded.
pub fn garbage_args(xid: u32) -> Vec<Bytes> {
    accepted_reply(xid, AcceptStat::GARBAGE_ARGS, |_| {})
}

/// SYSTEM_ERR: the server failed for a reason of its own (out of memory, a bug).
pub fn system_err(xid: u32) -> Vec<Bytes> {
    accepted_reply(xid, AcceptStat::SYSTEM_ERR, |_| {})
}

/// MSG_DENIED / RPC_MISMATCH: only RPC version 2 is spoken.
pub fn rpc_mismatch(xid: u32) -> Vec<Bytes> {
    let mut w = Writer::new();
    w.put_u32(xid);
    w.put_u32(MSG_REPLY);
    w.put_u32(MSG_DENIED);
    w.put_u32(REJECT_RPC_MISMATCH);
    w.put_u32(RPC_VERSION);
    w.put_u32(RPC_VERSION);
    w.into_segments()
}

/// MSG_DENIED / AUTH_ERROR with `stat`.
pub fn auth_error(xid: u32, stat: AuthStat) -> Vec<Bytes> {
    let mut w = Writer::new();
    w.put_u32(xid);
    w.put_u32(MSG_REPLY);
    w.put_u32(MSG_DENIED);
    w.put_u32(REJECT_AUTH_ERROR);
    w.put_u32(stat.0);
    w.into_segments()
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

const MSG_ACCEPTED: u32 = 0;
const MSG_DENIED: u32 = 1;
const REJECT_RPC_MISMATCH: u32 = 0;
const REJECT_AUTH_ERROR: u32 = 1;

fn put_accepted_header(w: &mut Writer, xid: u32, stat: AcceptStat) {
    w.put_u32(xid);
    w.put_u32(MSG_REPLY);
    w.put_u32(MSG_ACCEPTED);
    w.put_u32(AuthFlavor::NONE.0);
    w.put_u32(0); // verifier body length
    w.put_u32(stat.0);
}

/// Decodes prog, vers, proc, cred and verf (rpcvers already read).
fn decode_rest(r: &mut Reader<'_>) -> Result<CallHeader, DecodeError> {
    Ok(CallHeader {
        rpcvers: RPC_VERSION,
        prog: r.get_u32()?,
        vers: r.get_u32()?,
        proc_: r.get_u32()?,
        cred: OpaqueAuth::unpack(r)?,
        verf: OpaqueAuth::unpack(r)?,
    })
}

fn authenticate(cred: &OpaqueAuth, verf: &OpaqueAuth) -> Result<Credentials, AuthStat> {
    let creds = match cred.flavor {
        AuthFlavor::NONE if cred.body.is_empty() => Credentials::None,
        AuthFlavor::NONE => return Err(AuthStat::BADCRED),
        AuthFlavor::SYS => {
            Credentials::Sys(AuthSys::from_opaque_auth(cred).map_err(|_| AuthStat::BADCRED)?)
        }
        AuthFlavor::SHORT => return Err(AuthStat::REJECTEDCRED),
        _ => return Err(AuthStat::BADCRED),
    };
    if verf.flavor != AuthFlavor::NONE || !verf.body.is_empty() {
        return Err(AuthStat::BADVERF);
    }
    Ok(creds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sluice_xdr::rpc::MsgHeader;
    use sluice_xdr::{Pack, Payload};

    fn concat(segs: &[Bytes]) -> Vec<u8> {
        segs.iter().flat_map(|s| s.iter().copied()).collect()
    }

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    fn sys() -> AuthSys {
        AuthSys {
            stamp: 9,
            machine_name: Bytes::from_static(b"client"),
            uid: 1000,
            gid: 100,
            gids: vec![4, 27],
        }
    }

    fn call_bytes(xid: u32, cred: OpaqueAuth, verf: OpaqueAuth, args: &[u8]) -> Bytes {
        let mut w = Writer::new();
        MsgHeader::Call {
            xid,
            call: CallHeader {
                rpcvers: 2,
                prog: 100003,
                vers: 3,
                proc_: 6,
                cred,
                verf,
            },
        }
        .pack(&mut w);
        w.put_raw(args);
        w.into_bytes()
    }

    #[test]
    fn good_auth_sys_call_split_anywhere() {
        let whole = call_bytes(
            77,
            sys().to_opaque_auth(),
            OpaqueAuth::none(),
            &words(&[5, 6]),
        );
        for cut in 0..=whole.len() {
            let segs = vec![whole.slice(..cut), whole.slice(cut..)];
            let CallParse::Call(call) = parse_call(&segs) else {
                panic!("not a call at cut {cut}")
            };
            assert_eq!(call.xid, 77);
            assert_eq!((call.prog(), call.vers(), call.proc_()), (100003, 3, 6));
            assert_eq!(call.cred, Credentials::Sys(sys()));
            assert_eq!(call.cred.uid(), Some(1000));
            assert_eq!(call.cred.gid(), Some(100));
            assert_eq!(call.cred.gids(), &[4, 27]);
            assert_eq!(call.args_offset, whole.len() - 8);
            let mut args = call.args(&segs);
            assert_eq!(args.get_u32().unwrap(), 5);
            assert_eq!(args.get_u32().unwrap(), 6);
            args.finish().unwrap();
        }
    }

    #[test]
    fn auth_none_call() {
        let b = call_bytes(1, OpaqueAuth::none(), OpaqueAuth::none(), &[]);
        let CallParse::Call(call) = parse_call(&[b]) else {
            panic!()
        };
        assert_eq!(call.cred, Credentials::None);
        assert_eq!(call.cred.uid(), None);
        assert!(call.cred.gids().is_empty());
    }

    #[test]
    fn wrong_rpc_version_is_a_mismatch() {
        let b = Bytes::from(words(&[5, MSG_CALL, 3, 100003, 3, 0]));
        let p = parse_call(&[b]);
        assert_eq!(p, CallParse::RpcMismatch { xid: 5, rpcvers: 3 });
        assert_eq!(
            concat(&reply_for(&p).unwrap()),
            words(&[5, 1, 1, 0, 2, 2]) // REPLY, MSG_DENIED, RPC_MISMATCH, 2..2
        );
    }

    #[test]
    fn credentials_refused() {
        let flavored = |flavor: AuthFlavor, body: &'static [u8]| OpaqueAuth {
            flavor,
            body: Bytes::from_static(body),
        };
        let cases = [
            // AUTH_NONE with a body.
            (
                flavored(AuthFlavor::NONE, b"x"),
                OpaqueAuth::none(),
                AuthStat::BADCRED,
            ),
            // AUTH_SYS body that is not an authsys_parms.
            (
                flavored(AuthFlavor::SYS, b"\0\0\0\x01"),
                OpaqueAuth::none(),
                AuthStat::BADCRED,
            ),
            (
                flavored(AuthFlavor::SHORT, b"abcd"),
                OpaqueAuth::none(),
                AuthStat::REJECTEDCRED,
            ),
            (
                flavored(AuthFlavor::RPCSEC_GSS, b""),
                OpaqueAuth::none(),
                AuthStat::BADCRED,
            ),
            (
                flavored(AuthFlavor(12345), b""),
                OpaqueAuth::none(),
                AuthStat::BADCRED,
            ),
            // Good credential, verifier that is not an empty AUTH_NONE.
            (
                sys().to_opaque_auth(),
                flavored(AuthFlavor::SYS, b""),
                AuthStat::BADVERF,
            ),
            (
                OpaqueAuth::none(),
                flavored(AuthFlavor::NONE, b"vvvv"),
                AuthStat::BADVERF,
            ),
        ];
        for (cred, verf, want) in cases {
            let p = parse_call(&[call_bytes(8, cred, verf, &[])]);
            assert_eq!(p, CallParse::AuthError { xid: 8, stat: want });
            assert_eq!(
                concat(&reply_for(&p).unwrap()),
                words(&[8, 1, 1, 1, want.0])
            );
        }
    }

    #[test]
    fn too_many_gids_is_badcred() {
        let mut a = sys();
        a.gids = (0..17).collect();
        let p = parse_call(&[call_bytes(3, a.to_opaque_auth(), OpaqueAuth::none(), &[])]);
        assert_eq!(
            p,
            CallParse::AuthError {
                xid: 3,
                stat: AuthStat::BADCRED
            }
        );
    }

    #[test]
    fn garbage_outcomes() {
        // Too short for xid + msg_type: drop.
        let p = parse_call(&[Bytes::from_static(b"\0\0\0\x01\0\0")]);
        assert_eq!(
            p,
            CallParse::Garbage {
                xid: None,
                reason: GarbageReason::TooShort
            }
        );
        assert_eq!(reply_for(&p), None);
        // A REPLY sent to the server: drop.
        let p = parse_call(&[Bytes::from(words(&[4, MSG_REPLY, 0]))]);
        assert_eq!(
            p,
            CallParse::Garbage {
                xid: None,
                reason: GarbageReason::NotACall { msg_type: 1 }
            }
        );
        assert_eq!(reply_for(&p), None);
        // A call truncated inside its credential: GARBAGE_ARGS.
        let whole = call_bytes(6, sys().to_opaque_auth(), OpaqueAuth::none(), &[]);
        let p = parse_call(&[whole.slice(..30)]);
        assert_eq!(
            p,
            CallParse::Garbage {
                xid: Some(6),
                reason: GarbageReason::Header(DecodeError::Truncated)
            }
        );
        assert_eq!(concat(&reply_for(&p).unwrap()), words(&[6, 1, 0, 0, 0, 4]));
        // A credential body over 400 bytes: GARBAGE_ARGS.
        let mut w = Vec::new();
        w.extend(words(&[7, 0, 2, 100003, 3, 0, 1, 401]));
        w.extend(vec![0u8; 404 + 8]);
        let p = parse_call(&[Bytes::from(w)]);
        assert!(matches!(
            p,
            CallParse::Garbage {
                xid: Some(7),
                reason: GarbageReason::Header(DecodeError::TooLong { .. })
            }
        ));
    }

    #[test]
    fn reply_bytes() {
        let hdr = |xid, stat| words(&[xid, 1, 0, 0, 0, stat]);
        let mut w = success_header(0x01020304);
        assert_eq!(w.len(), ACCEPTED_HEADER_BYTES);
        w.put_u32(0xaabbccdd);
        assert_eq!(
            concat(&w.into_segments()),
            [hdr(0x01020304, 0), words(&[0xaabbccdd])].concat()
        );
        assert_eq!(concat(&prog_unavail(1)), hdr(1, 1));
        assert_eq!(
            concat(&prog_mismatch(2, 3, 4)),
            [hdr(2, 2), words(&[3, 4])].concat()
        );
        assert_eq!(concat(&proc_unavail(3)), hdr(3, 3));
        assert_eq!(concat(&garbage_args(4)), hdr(4, 4));
        assert_eq!(concat(&system_err(5)), hdr(5, 5));
        assert_eq!(concat(&rpc_mismatch(6)), words(&[6, 1, 1, 0, 2, 2]));
        assert_eq!(
            concat(&auth_error(7, AuthStat::TOOWEAK)),
            words(&[7, 1, 1, 1, 5])
        );
        let r = accepted_reply(8, AcceptStat::SUCCESS, |w| w.put_u64(1));
        assert_eq!(concat(&r), [hdr(8, 0), words(&[0, 1])].concat());
    }

    #[test]
    fn replies_decode_with_the_xdr_header_codec() {
        let b = Bytes::from(concat(&prog_mismatch(9, 2, 3)));
        let h: MsgHeader = sluice_xdr::from_bytes(&b).unwrap();
        assert_eq!(
            h,
            MsgHeader::Reply {
                xid: 9,
                body: sluice_xdr::rpc::ReplyBody::Accepted {
                    verf: OpaqueAuth::none(),
                    stat: AcceptStat::PROG_MISMATCH,
                    mismatch: Some((2, 3))
                }
            }
        );
    }

    #[test]
    fn success_reply_keeps_payload_zero_copy() {
        let data = Bytes::from(vec![1u8; 100_000]);
        let mut w = success_header(1);
        w.put_payload(&Payload::from(data.clone()));
        assert!(w
            .into_segments()
            .iter()
            .any(|s| s.as_ptr() == data.as_ptr()));
    }

    proptest! {
        #[test]
        fn arbitrary_records_never_panic(
            data in proptest::collection::vec(any::<u8>(), 0..600),
            cut in any::<usize>(),
            prefix in any::<bool>(),
        ) {
            let mut data = data;
            if prefix && data.len() >= 12 {
                // Make it look like a v2 call so the deeper paths run.
                data[4..12].copy_from_slice(&words(&[0, 2]));
            }
            let b = Bytes::from(data);
            let cut = cut % (b.len() + 1);
            let segs = [b.slice(..cut), b.slice(cut..)];
            let p = parse_call(&segs);
            if let CallParse::Call(c) = &p {
                prop_assert!(c.args_offset <= b.len());
                let _ = c.args(&segs);
            }
            let _ = reply_for(&p);
        }
    }
}
