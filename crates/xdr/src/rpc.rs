//! ONC RPC message headers (RFC 5531 §9) and AUTH_SYS credentials (RFC 5531 appendix A).
//!
//! ```text
//! rpc_msg = xid, CALL  (rpcvers=2, prog, vers, proc, cred, verf), args...
//!         | xid, REPLY MSG_ACCEPTED (verf, accept_stat [, mismatch_info]), results...
//!         | xid, REPLY MSG_DENIED   (RPC_MISMATCH low,high | AUTH_ERROR auth_stat)
//! ```
//! Only the headers live here; the procedure arguments and results follow them in the same
//! record and are decoded by the program's own codec.

use crate::{DecodeError, Pack, Reader, Result, Unpack, Writer};
use bytes::Bytes;

pub const RPC_VERSION: u32 = 2;
pub const MSG_CALL: u32 = 0;
pub const MSG_REPLY: u32 = 1;

/// RFC 5531 §8.2: the body of an opaque_auth is at most 400 bytes.
pub const MAX_AUTH_BYTES: usize = 400;
/// RFC 5531 appendix A: machinename<255>.
pub const MAX_MACHINE_NAME: usize = 255;
/// RFC 5531 appendix A: gids<16>.
pub const MAX_AUX_GIDS: usize = 16;

/// Authentication flavor (`auth_flavor`); a newtype so unknown values survive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AuthFlavor(pub u32);
impl AuthFlavor {
    pub const NONE: Self = Self(0);
    pub const SYS: Self = Self(1);
    pub const SHORT: Self = Self(2);
    pub const DH: Self = Self(3);
    pub const RPCSEC_GSS: Self = Self(6);
}

/// `opaque_auth`: a flavor and up to 400 bytes of body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpaqueAuth {
    pub flavor: AuthFlavor,
    pub body: Bytes,
}

impl OpaqueAuth {
    pub fn none() -> Self {
        OpaqueAuth {
            flavor: AuthFlavor::NONE,
            body: Bytes::new(),
        }
    }
}

impl Pack for OpaqueAuth {
    fn pack(&self, w: &mut Writer) {
        w.put_u32(self.flavor.0);
        w.put_opaque(&self.body);
    }
}
impl Unpack for OpaqueAuth {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        let flavor = AuthFlavor(r.get_u32()?);
        let body = r.get_opaque("opaque_auth body", MAX_AUTH_BYTES)?;
        Ok(OpaqueAuth { flavor, body })
    }
}

/// `authsys_parms` (AUTH_UNIX).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthSys {
    pub stamp: u32,
    pub machine_name: Bytes,
    pub uid: u32,
    pub gid: u32,
    pub gids: Vec<u32>,
}

impl Pack for AuthSys {
    fn pack(&self, w: &mut Writer) {
        w.put_u32(self.stamp);
        w.put_string(&self.machine_name);
        w.put_u32(self.uid);
        w.put_u32(self.gid);
        w.put_array(&self.gids);
    }
}
impl Unpack for AuthSys {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(AuthSys {
            stamp: r.get_u32()?,
            machine_name: r.get_string("machinename", MAX_MACHINE_NAME)?,
            uid: r.get_u32()?,
            gid: r.get_u32()?,
            gids: r.get_array("gids", MAX_AUX_GIDS)?,
        })
    }
}

impl AuthSys {
    /// Encodes these credentials as an `opaque_auth` of flavor AUTH_SYS.
    pub fn to_opaque_auth(&self) -> OpaqueAuth {
        OpaqueAuth {
            flavor: AuthFlavor::SYS,
            body: crate::to_bytes(self),
        }
    }
    /// Decodes the body of an AUTH_SYS `opaque_auth`.
    pub fn from_opaque_auth(a: &OpaqueAuth) -> Result<Self> {
        crate::from_bytes(&a.body)
    }
}

/// The header of a CALL message, after the xid and message type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallHeader {
    pub rpcvers: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    pub cred: OpaqueAuth,
    pub verf: OpaqueAuth,
}

/// `accept_stat` (RFC 5531 §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AcceptStat(pub u32);
impl AcceptStat {
    pub const SUCCESS: Self = Self(0);
    pub const PROG_UNAVAIL: Self = Self(1);
    pub const PROG_MISMATCH: Self = Self(2);
    pub const PROC_UNAVAIL: Self = Self(3);
    pub const GARBAGE_ARGS: Self = Self(4);
    pub const SYSTEM_ERR: Self = Self(5);
}

/// `auth_stat` (RFC 5531 §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AuthStat(pub u32);
impl AuthStat {
    pub const OK: Self = Self(0);
    pub const BADCRED: Self = Self(1);
    pub const REJECTEDCRED: Self = Self(2);
    pub const BADVERF: Self = Self(3);
    pub const REJECTEDVERF: Self = Self(4);
    pub const TOOWEAK: Self = Self(5);
}

/// The body of a REPLY message, up to (not including) the procedure's results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyBody {
    /// MSG_ACCEPTED with a verifier and status. Results follow only for SUCCESS.
    Accepted {
        verf: OpaqueAuth,
        stat: AcceptStat,
        mismatch: Option<(u32, u32)>,
    },
    /// MSG_DENIED / RPC_MISMATCH with the supported RPC version range.
    RpcMismatch { low: u32, high: u32 },
    /// MSG_DENIED / AUTH_ERROR.
    AuthError(AuthStat),
}

impl ReplyBody {
    pub fn success() -> Self {
        ReplyBody::Accepted {
            verf: OpaqueAuth::none(),
            stat: AcceptStat::SUCCESS,
            mismatch: None,
        }
    }
    pub fn accepted(stat: AcceptStat) -> Self {
        ReplyBody::Accepted {
            verf: OpaqueAuth::none(),
            stat,
            mismatch: None,
        }
    }
}

/// A decoded RPC message header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MsgHeader {
    Call { xid: u32, call: CallHeader },
    Reply { xid: u32, body: ReplyBody },
}

impl MsgHeader {
    pub fn xid(&self) -> u32 {
        match self {
            MsgHeader::Call { xid, .. } | MsgHeader::Reply { xid, .. } => *xid,
        }
    }
}

impl Pack for MsgHeader {
    fn pack(&self, w: &mut Writer) {
        match self {
            MsgHeader::Call { xid, call } => {
                w.put_u32(*xid);
                w.put_u32(MSG_CALL);
                w.put_u32(call.rpcvers);
                w.put_u32(call.prog);
                w.put_u32(call.vers);
                w.put_u32(call.proc_);
                call.cred.pack(w);
                call.verf.pack(w);
            }
            MsgHeader::Reply { xid, body } => {
                w.put_u32(*xid);
                w.put_u32(MSG_REPLY);
                match body {
                    ReplyBody::Accepted {
                        verf,
                        stat,
                        mismatch,
                    } => {
                        w.put_u32(0); // MSG_ACCEPTED
                        verf.pack(w);
                        w.put_u32(stat.0);
                        if *stat == AcceptStat::PROG_MISMATCH {
                            let (lo, hi) = mismatch.unwrap_or((0, 0));
                            w.put_u32(lo);
                            w.put_u32(hi);
                        }
                    }
                    ReplyBody::RpcMismatch { low, high } => {
                        w.put_u32(1); // MSG_DENIED
                        w.put_u32(0); // RPC_MISMATCH
                        w.put_u32(*low);
                        w.put_u32(*high);
                    }
                    ReplyBody::AuthError(stat) => {
                        w.put_u32(1); // MSG_DENIED
                        w.put_u32(1); // AUTH_ERROR
                        w.put_u32(stat.0);
                    }
                }
            }
        }
    }
}

impl Unpack for MsgHeader {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        let xid = r.get_u32()?;
        match r.get_u32()? {
            MSG_CALL => {
                let call = CallHeader {
                    rpcvers: r.get_u32()?,
                    prog: r.get_u32()?,
                    vers: r.get_u32()?,
                    proc_: r.get_u32()?,
                    cred: OpaqueAuth::unpack(r)?,
                    verf: OpaqueAuth::unpack(r)?,
                };
                Ok(MsgHeader::Call { xid, call })
            }
            MSG_REPLY => {
                let body = match r.get_u32()? {
                    0 => {
                        let verf = OpaqueAuth::unpack(r)?;
                        let stat = AcceptStat(r.get_u32()?);
                        let mismatch = if stat == AcceptStat::PROG_MISMATCH {
                            Some((r.get_u32()?, r.get_u32()?))
                        } else {
                            None
                        };
                        ReplyBody::Accepted {
                            verf,
                            stat,
                            mismatch,
                        }
                    }
                    1 => match r.get_u32()? {
                        0 => ReplyBody::RpcMismatch {
                            low: r.get_u32()?,
                            high: r.get_u32()?,
                        },
                        1 => ReplyBody::AuthError(AuthStat(r.get_u32()?)),
                        v => {
                            return Err(DecodeError::BadDiscriminant {
                                what: "reject_stat",
                                value: v,
                            })
                        }
                    },
                    v => {
                        return Err(DecodeError::BadDiscriminant {
                            what: "reply_stat",
                            value: v,
                        })
                    }
                };
                Ok(MsgHeader::Reply { xid, body })
            }
            v => Err(DecodeError::BadDiscriminant {
                what: "msg_type",
                value: v,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{from_bytes, to_bytes};

    #[test]
    fn call_header_round_trip_with_auth_sys() {
        let cred = AuthSys {
            stamp: 1,
            machine_name: Bytes::from_static(b"host"),
            uid: 1000,
            gid: 1000,
            gids: vec![4, 24],
        };
        let h = MsgHeader::Call {
            xid: 42,
            call: CallHeader {
                rpcvers: 2,
                prog: 100003,
                vers: 3,
                proc_: 1,
                cred: cred.to_opaque_auth(),
                verf: OpaqueAuth::none(),
            },
        };
        let b = to_bytes(&h);
        let back: MsgHeader = from_bytes(&b).unwrap();
        assert_eq!(back, h);
        if let MsgHeader::Call { call, .. } = back {
            assert_eq!(AuthSys::from_opaque_auth(&call.cred).unwrap(), cred);
        }
    }

    #[test]
    fn replies_round_trip() {
        for body in [
            ReplyBody::success(),
            ReplyBody::Accepted {
                verf: OpaqueAuth::none(),
                stat: AcceptStat::PROG_MISMATCH,
                mismatch: Some((3, 3)),
            },
            ReplyBody::RpcMismatch { low: 2, high: 2 },
            ReplyBody::AuthError(AuthStat::TOOWEAK),
        ] {
            let h = MsgHeader::Reply { xid: 7, body };
            assert_eq!(from_bytes::<MsgHeader>(&to_bytes(&h)).unwrap(), h);
        }
    }

    #[test]
    fn too_many_gids_is_refused() {
        let cred = AuthSys {
            stamp: 0,
            machine_name: Bytes::new(),
            uid: 0,
            gid: 0,
            gids: (0..17).collect(),
        };
        assert!(AuthSys::from_opaque_auth(&cred.to_opaque_auth()).is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..128)) {
            let b = Bytes::from(data);
            let _ = from_bytes::<MsgHeader>(&b);
            let _ = from_bytes::<AuthSys>(&b);
            let _ = from_bytes::<OpaqueAuth>(&b);
        }
    }
}
