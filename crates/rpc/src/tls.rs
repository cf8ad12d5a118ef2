//! The RPC-with-TLS probe (RFC 9289 §4.1), as bytes in and bytes out: the one exchange on a
//! connection that happens in plaintext before TLS.
//!
//! ```text
//!   client                                              server
//!     │ TCP connect                                        │
//!     │ CALL  proc 0 (NULL), cred AUTH_TLS (7, empty) ────►│ is_probe: first record only
//!     │◄──── REPLY accepted, verf AUTH_NONE "STARTTLS", SUCCESS   (starttls_reply)
//!     │                         or MSG_DENIED AUTH_ERROR BADCRED  (no TLS configured here)
//!     │ TLS 1.3 ClientHello ... Finished  ◄──────────────► │
//!     │ record-marked RPC inside TLS records, as over TCP   │
//! ```
//!
//! # What the RFC fixes, and what this module decides
//! - The probe is a NULL call whose credential is AUTH_TLS with an empty body and whose
//!   verifier is AUTH_NONE (§4.1). The program and version are the service's own (the Linux
//!   client probes the NFS or MOUNT program it is about to use); any program is accepted here,
//!   because the upgrade is of the connection, not of one program.
//! - A server that offers TLS answers with an accepted reply whose verifier is AUTH_NONE with
//!   the eight bytes `STARTTLS` as its body; the client checks that token before its
//!   ClientHello (§4.1), so a server that merely ignores unknown flavors is not mistaken for one
//!   that speaks TLS.
//! - A server that does not offer TLS treats AUTH_TLS as any flavor it has no handler for:
//!   MSG_DENIED / AUTH_ERROR / AUTH_BADCRED, which is what [`crate::server::parse_call`]
//!   already returns for flavor 7. [`check_probe_reply`] turns that into
//!   [`ProbeRefused::NotOffered`], the "this server does not offer TLS" the client reports.
//! - Only the **first** record of a connection may be a probe the server acts on. A probe that
//!   arrives later (after other calls, or inside TLS: a second upgrade) is an ordinary call with
//!   an unknown flavor and gets AUTH_BADCRED: a connection is upgraded once, before anything
//!   else, and never in the middle of a record stream.
//!
//! Nothing here does I/O; `sluice-tcp`'s `tls` module drives the exchange and the handshake.

use crate::msg::{build_call, ProcId};
use bytes::Bytes;
use sluice_xdr::rpc::{
    AcceptStat, AuthFlavor, AuthStat, MsgHeader, OpaqueAuth, ReplyBody, MSG_CALL, RPC_VERSION,
};
use sluice_xdr::{Pack, Reader, Unpack, Writer};
use std::fmt;

/// The AUTH_TLS flavor (RFC 9289 §4.1; IANA's RPC auth flavor registry).
pub const AUTH_TLS: AuthFlavor = AuthFlavor(7);

/// The body of the verifier a server that offers TLS puts in its probe reply.
pub const STARTTLS: &[u8; 8] = b"STARTTLS";

/// The probe call: NULL of `prog`/`vers` with an empty AUTH_TLS credential.
pub fn probe_call(xid: u32, prog: u32, vers: u32) -> Vec<Bytes> {
    let cred = OpaqueAuth {
        flavor: AUTH_TLS,
        body: Bytes::new(),
    };
    build_call(
        xid,
        ProcId {
            prog,
            vers,
            proc_: 0,
        },
        &cred,
        Vec::new(),
    )
}

/// `Some(xid)` when `record` is a probe: a CALL of RPC version 2, procedure 0, credential
/// AUTH_TLS with an empty body, verifier AUTH_NONE. Never panics on any input.
pub fn is_probe(record: &[Bytes]) -> Option<u32> {
    let mut r = Reader::new(record);
    let xid = r.get_u32().ok()?;
    if r.get_u32().ok()? != MSG_CALL || r.get_u32().ok()? != RPC_VERSION {
        return None;
    }
    let (_prog, _vers, proc_) = (r.get_u32().ok()?, r.get_u32().ok()?, r.get_u32().ok()?);
    let cred = OpaqueAuth::unpack(&mut r).ok()?;
    let verf = OpaqueAuth::unpack(&mut r).ok()?;
    let probe = proc_ == 0
        && cred.flavor == AUTH_TLS
        && cred.body.is_empty()
        && verf.flavor == AuthFlavor::NONE
        && r.remaining() == 0;
    probe.then_some(xid)
}

/// The reply that says "TLS offered, start the handshake".
pub fn starttls_reply(xid: u32) -> Vec<Bytes> {
    let mut w = Writer::new();
    MsgHeader::Reply {
        xid,
        body: ReplyBody::Accepted {
            verf: OpaqueAuth {
                flavor: AuthFlavor::NONE,
                body: Bytes::from_static(STARTTLS),
            },
            stat: AcceptStat::SUCCESS,
            mismatch: None,
        },
    }
    .pack(&mut w);
    w.into_segments()
}

/// Why a probe did not lead to a handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeRefused {
    /// The server answered, and what it said means it has no TLS for us: AUTH_ERROR (how a
    /// server without RPC-with-TLS answers an unknown flavor) or an accepted reply without the
    /// `STARTTLS` token.
    NotOffered(String),
    /// The answer was not a reply to the probe at all.
    BadReply(String),
}

impl fmt::Display for ProbeRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeRefused::NotOffered(why) => {
                write!(f, "the server does not offer RPC-with-TLS ({why})")
            }
            ProbeRefused::BadReply(why) => write!(f, "bad answer to the TLS probe: {why}"),
        }
    }
}

impl std::error::Error for ProbeRefused {}

/// Checks the server's answer to the probe with `xid`. Never panics on any input.
pub fn check_probe_reply(record: &[Bytes], xid: u32) -> Result<(), ProbeRefused> {
    let mut r = Reader::new(record);
    let header = MsgHeader::unpack(&mut r).map_err(|e| ProbeRefused::BadReply(e.to_string()))?;
    let body = match header {
        MsgHeader::Reply { xid: got, body } if got == xid => body,
        MsgHeader::Reply { xid: got, .. } => {
            return Err(ProbeRefused::BadReply(format!(
                "reply to xid {got:#x}, probe was {xid:#x}"
            )))
        }
        MsgHeader::Call { .. } => return Err(ProbeRefused::BadReply("a CALL".into())),
    };
    match body {
        ReplyBody::Accepted {
            verf,
            stat: AcceptStat::SUCCESS,
            ..
        } if verf.flavor == AuthFlavor::NONE && verf.body[..] == STARTTLS[..] => Ok(()),
        ReplyBody::Accepted { stat, .. } => Err(ProbeRefused::NotOffered(format!(
            "accepted with status {} and no STARTTLS verifier",
            stat.0
        ))),
        ReplyBody::AuthError(AuthStat(stat)) => {
            Err(ProbeRefused::NotOffered(format!("AUTH_ERROR {stat}")))
        }
        ReplyBody::RpcMismatch { low, high } => Err(ProbeRefused::NotOffered(format!(
            "RPC_MISMATCH {low}..={high}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::{auth_error, parse_call, success_header, CallParse};

    fn flat(segs: &[Bytes]) -> Bytes {
        Bytes::from(segs.concat())
    }

    #[test]
    fn the_probe_is_recognised_and_answered_with_starttls() {
        let call = probe_call(0x1234, 100003, 4);
        assert_eq!(is_probe(&call), Some(0x1234));
        assert_eq!(
            is_probe(&[flat(&call)]),
            Some(0x1234),
            "one segment or many"
        );
        check_probe_reply(&starttls_reply(0x1234), 0x1234).unwrap();
        // The verifier body is the eight ASCII bytes, after flavor 0 and length 8.
        let reply = flat(&starttls_reply(7));
        assert_eq!(&reply[8..24], b"\0\0\0\0\0\0\0\0\0\0\0\x08STAR");
        assert_eq!(&reply[24..28], b"TTLS");
    }

    #[test]
    fn the_ordinary_parser_refuses_auth_tls_with_badcred() {
        // What a server without TLS (or a probe after the first record) answers.
        let call = probe_call(9, 100003, 3);
        assert_eq!(
            parse_call(&call),
            CallParse::AuthError {
                xid: 9,
                stat: AuthStat::BADCRED
            }
        );
        assert!(matches!(
            check_probe_reply(&auth_error(9, AuthStat::BADCRED), 9),
            Err(ProbeRefused::NotOffered(_))
        ));
    }

    #[test]
    fn a_reply_without_the_token_or_for_another_xid_is_not_an_offer() {
        let plain = success_header(5).into_segments();
        assert!(matches!(
            check_probe_reply(&plain, 5),
            Err(ProbeRefused::NotOffered(_))
        ));
        assert!(matches!(
            check_probe_reply(&starttls_reply(6), 5),
            Err(ProbeRefused::BadReply(_))
        ));
        assert!(matches!(
            check_probe_reply(&probe_call(5, 1, 1), 5),
            Err(ProbeRefused::BadReply(_))
        ));
    }

    #[test]
    fn other_calls_are_not_probes() {
        let sys = OpaqueAuth {
            flavor: AuthFlavor::SYS,
            body: Bytes::new(),
        };
        let null_sys = build_call(
            1,
            ProcId {
                prog: 100003,
                vers: 3,
                proc_: 0,
            },
            &sys,
            vec![],
        );
        assert_eq!(is_probe(&null_sys), None);
        let tls = OpaqueAuth {
            flavor: AUTH_TLS,
            body: Bytes::new(),
        };
        let getattr = build_call(
            1,
            ProcId {
                prog: 100003,
                vers: 3,
                proc_: 1,
            },
            &tls,
            vec![],
        );
        assert_eq!(is_probe(&getattr), None, "only NULL is a probe");
        let with_args = build_call(
            1,
            ProcId {
                prog: 100003,
                vers: 3,
                proc_: 0,
            },
            &tls,
            vec![Bytes::from_static(&[0, 0, 0, 1])],
        );
        assert_eq!(is_probe(&with_args), None, "NULL takes no arguments");
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200), xid in 0u32..4) {
            let rec = [Bytes::from(bytes)];
            let _ = is_probe(&rec);
            let _ = check_probe_reply(&rec, xid);
        }
    }
}
