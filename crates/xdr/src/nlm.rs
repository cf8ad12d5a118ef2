//! NLM version 4 (the Network Lock Manager, program 100021; X/Open XNFS chapter 10 and RFC 1813
//! §6.1) wire types: byte-range locks and DOS share reservations for NFSv3 clients.
//!
//! ```text
//! NULL          void              -> void
//! TEST          nlm4_testargs     -> nlm4_testres   would this lock be granted? (who holds it)
//! LOCK          nlm4_lockargs     -> nlm4_res       take it; `block` asks to be queued
//! CANCEL        nlm4_cancargs     -> nlm4_res       withdraw a queued (blocked) LOCK
//! UNLOCK        nlm4_unlockargs   -> nlm4_res
//! GRANTED       nlm4_testargs     -> nlm4_res       server -> client: your blocked LOCK is held
//! TEST_MSG .. GRANTED_MSG (6-10)  -> void           the same calls, answered by a separate call
//! TEST_RES .. GRANTED_RES (11-15) -> void           ... of the *_RES procedure (the reply)
//! 16-19         unused            -> PROC_UNAVAIL
//! SHARE         nlm4_shareargs    -> nlm4_shareres  DOS share reservation (deny modes)
//! UNSHARE       nlm4_shareargs    -> nlm4_shareres
//! NM_LOCK       nlm4_lockargs     -> nlm4_res       LOCK for a host that does not run NSM
//! FREE_ALL      nlm4_notify       -> void           drop every lock of a host
//! ```
//!
//! Bounds, from the protocol's constants: a caller name of at most [`LM_MAXSTRLEN`] bytes, the
//! `nlm4_notify` name of at most [`LM_MAXNAMELEN`], every other `netobj` (cookie, owner handle)
//! at most [`MAXNETOBJ_SZ`]. The file handle is a `netobj` on the wire, but NLM v4 carries NFSv3
//! handles only, so it is bounded by [`FHSIZE3`](crate::mount3::FHSIZE3): a longer one cannot
//! name a file of this server and is GARBAGE_ARGS.
//!
//! Offsets and lengths are unsigned 64-bit; a length of 0 means "to the end of the file" (unlike
//! NFSv4's all-ones), which the lock service maps onto its ranges.

use crate::{DecodeError, Reader, Result, Unpack};

pub const PROGRAM: u32 = 100021;
pub const VERSION: u32 = 4;

/// LM_MAXSTRLEN: the longest caller name (a host name).
pub const LM_MAXSTRLEN: usize = 1024;
/// LM_MAXNAMELEN: the longest `nlm4_notify` name (one more than LM_MAXSTRLEN, in the spec).
pub const LM_MAXNAMELEN: usize = 1025;
/// MAXNETOBJ_SZ: the longest `netobj` (cookies, owner handles).
pub const MAXNETOBJ_SZ: usize = 1024;
/// The longest file handle accepted: an NFSv3 handle (module notes).
pub const FH_BYTES_MAX: usize = crate::mount3::FHSIZE3;

/// Procedure numbers.
pub mod proc_ {
    pub const NULL: u32 = 0;
    pub const TEST: u32 = 1;
    pub const LOCK: u32 = 2;
    pub const CANCEL: u32 = 3;
    pub const UNLOCK: u32 = 4;
    pub const GRANTED: u32 = 5;
    pub const TEST_MSG: u32 = 6;
    pub const LOCK_MSG: u32 = 7;
    pub const CANCEL_MSG: u32 = 8;
    pub const UNLOCK_MSG: u32 = 9;
    pub const GRANTED_MSG: u32 = 10;
    pub const TEST_RES: u32 = 11;
    pub const LOCK_RES: u32 = 12;
    pub const CANCEL_RES: u32 = 13;
    pub const UNLOCK_RES: u32 = 14;
    pub const GRANTED_RES: u32 = 15;
    pub const SHARE: u32 = 20;
    pub const UNSHARE: u32 = 21;
    pub const NM_LOCK: u32 = 22;
    pub const FREE_ALL: u32 = 23;
    /// Names indexed by procedure number (from [`super::PROCS`]).
    pub const NAMES: [&str; 24] = crate::procs::names(&super::TABLE);
}

/// The facts of every NLM v4 procedure, indexed by procedure number (see [`crate::procs`]).
/// Procedures 16-19 are unassigned; their rows exist so the table stays indexed by number, and
/// the server answers them PROC_UNAVAIL. None is cached as non-idempotent: a retransmitted LOCK
/// by the same owner is granted again (an owner never conflicts with itself), an UNLOCK of an
/// unlocked range succeeds, and a CANCEL of nothing queued is NLM4_DENIED, all harmless.
pub static PROCS: [crate::procs::ProcInfo; 24] = TABLE;

/// `nlm4_res`: a cookie and a status.
const RES_BYTES: u32 = 4 + MAXNETOBJ_SZ as u32 + 4;
/// `nlm4_testres`: a cookie, a status and, on DENIED, the holder (exclusive, svid, owner
/// handle, offset, length).
const TESTRES_BYTES: u32 = 4 + MAXNETOBJ_SZ as u32 + 4 + 4 + 4 + 4 + MAXNETOBJ_SZ as u32 + 16;
/// `nlm4_shareres`: a cookie, a status and a sequence number.
const SHARERES_BYTES: u32 = 4 + MAXNETOBJ_SZ as u32 + 4 + 4;

const TABLE: [crate::procs::ProcInfo; 24] = {
    use crate::procs::{row, ReplyBound::*, TimerClass::Other};
    use proc_::*;
    [
        row(NULL, "NULL", false, Fixed(0), Other),
        row(TEST, "TEST", false, Fixed(TESTRES_BYTES), Other),
        row(LOCK, "LOCK", false, Fixed(RES_BYTES), Other),
        row(CANCEL, "CANCEL", false, Fixed(RES_BYTES), Other),
        row(UNLOCK, "UNLOCK", false, Fixed(RES_BYTES), Other),
        row(GRANTED, "GRANTED", false, Fixed(RES_BYTES), Other),
        row(TEST_MSG, "TEST_MSG", false, Fixed(0), Other),
        row(LOCK_MSG, "LOCK_MSG", false, Fixed(0), Other),
        row(CANCEL_MSG, "CANCEL_MSG", false, Fixed(0), Other),
        row(UNLOCK_MSG, "UNLOCK_MSG", false, Fixed(0), Other),
        row(GRANTED_MSG, "GRANTED_MSG", false, Fixed(0), Other),
        row(TEST_RES, "TEST_RES", false, Fixed(0), Other),
        row(LOCK_RES, "LOCK_RES", false, Fixed(0), Other),
        row(CANCEL_RES, "CANCEL_RES", false, Fixed(0), Other),
        row(UNLOCK_RES, "UNLOCK_RES", false, Fixed(0), Other),
        row(GRANTED_RES, "GRANTED_RES", false, Fixed(0), Other),
        row(16, "UNUSED16", false, Fixed(0), Other),
        row(17, "UNUSED17", false, Fixed(0), Other),
        row(18, "UNUSED18", false, Fixed(0), Other),
        row(19, "UNUSED19", false, Fixed(0), Other),
        row(SHARE, "SHARE", false, Fixed(SHARERES_BYTES), Other),
        row(UNSHARE, "UNSHARE", false, Fixed(SHARERES_BYTES), Other),
        row(NM_LOCK, "NM_LOCK", false, Fixed(RES_BYTES), Other),
        row(FREE_ALL, "FREE_ALL", false, Fixed(0), Other),
    ]
};

xdr_enum!(
    /// `nlm4_stats`.
    Nlm4Stats {
        GRANTED = 0 => "NLM4_GRANTED",
        DENIED = 1 => "NLM4_DENIED",
        DENIED_NOLOCKS = 2 => "NLM4_DENIED_NOLOCKS",
        BLOCKED = 3 => "NLM4_BLOCKED",
        DENIED_GRACE_PERIOD = 4 => "NLM4_DENIED_GRACE_PERIOD",
        DEADLCK = 5 => "NLM4_DEADLCK",
        ROFS = 6 => "NLM4_ROFS",
        STALE_FH = 7 => "NLM4_STALE_FH",
        FBIG = 8 => "NLM4_FBIG",
        FAILED = 9 => "NLM4_FAILED",
    }
);

xdr_bytes!(
    /// A `netobj` of at most [`MAXNETOBJ_SZ`] bytes: cookies and owner handles.
    Netobj("netobj", MAXNETOBJ_SZ)
);
xdr_bytes!(
    /// `caller_name`: the client's host name, at most [`LM_MAXSTRLEN`] bytes.
    CallerName("caller_name", LM_MAXSTRLEN)
);
xdr_bytes!(
    /// The file handle (`netobj fh`), an NFSv3 handle of at most [`FH_BYTES_MAX`] bytes.
    NlmFh("fh", FH_BYTES_MAX)
);
xdr_bytes!(
    /// The `nlm4_notify` host name, at most [`LM_MAXNAMELEN`] bytes.
    NotifyName("name", LM_MAXNAMELEN)
);

xdr_struct!(
    /// `nlm4_lock`: who (caller name, owner handle, svid: the client's process id) locks
    /// which range of which file.
    Nlm4Lock {
        caller_name: CallerName,
        fh: NlmFh,
        oh: Netobj,
        svid: u32,
        l_offset: u64,
        l_len: u64,
    }
);

xdr_struct!(
    /// `nlm4_holder`: the conflicting lock TEST reports.
    Nlm4Holder {
        exclusive: bool,
        svid: u32,
        oh: Netobj,
        l_offset: u64,
        l_len: u64,
    }
);

xdr_struct!(
    /// `nlm4_testargs` (TEST, TEST_MSG, GRANTED, GRANTED_MSG).
    Nlm4TestArgs {
        cookie: Netobj,
        exclusive: bool,
        alock: Nlm4Lock,
    }
);

xdr_struct!(
    /// `nlm4_lockargs` (LOCK, LOCK_MSG, NM_LOCK). `state` is the client's NSM state number.
    Nlm4LockArgs {
        cookie: Netobj,
        block: bool,
        exclusive: bool,
        alock: Nlm4Lock,
        reclaim: bool,
        state: u32,
    }
);

xdr_struct!(
    /// `nlm4_cancargs` (CANCEL, CANCEL_MSG).
    Nlm4CancArgs {
        cookie: Netobj,
        block: bool,
        exclusive: bool,
        alock: Nlm4Lock,
    }
);

xdr_struct!(
    /// `nlm4_unlockargs` (UNLOCK, UNLOCK_MSG).
    Nlm4UnlockArgs {
        cookie: Netobj,
        alock: Nlm4Lock,
    }
);

xdr_struct!(
    /// `nlm4_res` (the reply of LOCK, CANCEL, UNLOCK, GRANTED, and the argument of their
    /// `_RES` calls).
    Nlm4Res {
        cookie: Netobj,
        stat: Nlm4Stats,
    }
);

xdr_union!(
    /// `nlm4_testrply`: the holder on NLM4_DENIED, nothing otherwise.
    Nlm4TestRply("nlm4_testrply") default => Other {
        1u32 => Denied(Nlm4Holder),
    }
);

impl Default for Nlm4TestRply {
    /// NLM4_GRANTED: no conflicting lock.
    fn default() -> Self {
        Self::Other(Nlm4Stats::GRANTED.0)
    }
}

impl Nlm4TestRply {
    /// The status this reply carries.
    pub fn stat(&self) -> Nlm4Stats {
        Nlm4Stats(self.discriminant())
    }
}

xdr_struct!(
    /// `nlm4_testres` (TEST's reply, TEST_RES's argument).
    Nlm4TestRes {
        cookie: Netobj,
        stat: Nlm4TestRply,
    }
);

xdr_enum!(
    /// `fsh4_mode`: what a share reservation denies others.
    Fsh4Mode {
        DN = 0 => "fsm_DN",
        DR = 1 => "fsm_DR",
        DW = 2 => "fsm_DW",
        DRW = 3 => "fsm_DRW",
    }
);

xdr_enum!(
    /// `fsh4_access`: what a share reservation opens the file for.
    Fsh4Access {
        NONE = 0 => "fsa_NONE",
        R = 1 => "fsa_R",
        W = 2 => "fsa_W",
        RW = 3 => "fsa_RW",
    }
);

xdr_struct!(
    /// `nlm4_share`: a DOS-style share reservation.
    Nlm4Share {
        caller_name: CallerName,
        fh: NlmFh,
        oh: Netobj,
        mode: Fsh4Mode,
        access: Fsh4Access,
    }
);

xdr_struct!(
    /// `nlm4_shareargs` (SHARE, UNSHARE).
    Nlm4ShareArgs {
        cookie: Netobj,
        share: Nlm4Share,
        reclaim: bool,
    }
);

xdr_struct!(
    /// `nlm4_shareres`.
    Nlm4ShareRes {
        cookie: Netobj,
        stat: Nlm4Stats,
        sequence: u32,
    }
);

xdr_struct!(
    /// `nlm4_notify` (FREE_ALL): a host and its new NSM state.
    Nlm4Notify {
        name: NotifyName,
        state: u32,
    }
);

/// A decoded NLM v4 call's arguments, by procedure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Args {
    Null,
    /// TEST, TEST_MSG, GRANTED, GRANTED_MSG.
    Test(Nlm4TestArgs),
    /// LOCK, LOCK_MSG, NM_LOCK.
    Lock(Nlm4LockArgs),
    /// CANCEL, CANCEL_MSG.
    Cancel(Nlm4CancArgs),
    /// UNLOCK, UNLOCK_MSG.
    Unlock(Nlm4UnlockArgs),
    /// TEST_RES.
    TestRes(Nlm4TestRes),
    /// LOCK_RES, CANCEL_RES, UNLOCK_RES, GRANTED_RES.
    Res(Nlm4Res),
    /// SHARE, UNSHARE.
    Share(Nlm4ShareArgs),
    /// FREE_ALL.
    FreeAll(Nlm4Notify),
}

/// A decoded NLM v4 reply's results, by procedure (client side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Res {
    /// NULL and the one-way procedures (_MSG, _RES, FREE_ALL).
    Void,
    Test(Nlm4TestRes),
    Res(Nlm4Res),
    Share(Nlm4ShareRes),
}

/// Decodes the arguments of procedure `proc_` (server side).
pub fn decode_args(proc_: u32, r: &mut Reader<'_>) -> Result<Args> {
    use proc_::*;
    Ok(match proc_ {
        NULL => Args::Null,
        TEST | TEST_MSG | GRANTED | GRANTED_MSG => Args::Test(Nlm4TestArgs::unpack(r)?),
        LOCK | LOCK_MSG | NM_LOCK => Args::Lock(Nlm4LockArgs::unpack(r)?),
        CANCEL | CANCEL_MSG => Args::Cancel(Nlm4CancArgs::unpack(r)?),
        UNLOCK | UNLOCK_MSG => Args::Unlock(Nlm4UnlockArgs::unpack(r)?),
        TEST_RES => Args::TestRes(Nlm4TestRes::unpack(r)?),
        LOCK_RES | CANCEL_RES | UNLOCK_RES | GRANTED_RES => Args::Res(Nlm4Res::unpack(r)?),
        SHARE | UNSHARE => Args::Share(Nlm4ShareArgs::unpack(r)?),
        FREE_ALL => Args::FreeAll(Nlm4Notify::unpack(r)?),
        v => return Err(unknown_proc(v)),
    })
}

/// Decodes the results of procedure `proc_` (client side).
pub fn decode_res(proc_: u32, r: &mut Reader<'_>) -> Result<Res> {
    use proc_::*;
    Ok(match proc_ {
        TEST => Res::Test(Nlm4TestRes::unpack(r)?),
        LOCK | CANCEL | UNLOCK | GRANTED | NM_LOCK => Res::Res(Nlm4Res::unpack(r)?),
        SHARE | UNSHARE => Res::Share(Nlm4ShareRes::unpack(r)?),
        NULL | TEST_MSG..=GRANTED_RES | FREE_ALL => Res::Void,
        v => return Err(unknown_proc(v)),
    })
}

fn unknown_proc(v: u32) -> DecodeError {
    DecodeError::BadDiscriminant {
        what: "NLM4 procedure",
        value: v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arb::{Arb, Gen};
    use crate::{from_bytes, to_bytes, Pack, Unpack};
    use bytes::Bytes;

    #[test]
    fn declared_types_round_trip_from_arbitrary_values() {
        fn check<T: Arb + Pack + Unpack + PartialEq + std::fmt::Debug>(g: &mut Gen) {
            for _ in 0..64 {
                let v = T::arb(g);
                let back: T = from_bytes(&to_bytes(&v)).expect("decodes");
                assert_eq!(back, v);
            }
        }
        let mut g = Gen::new(sluice_testkit::seed::seed(
            "nlm4 declared types",
            0x5eed_0021,
        ));
        check::<Nlm4TestArgs>(&mut g);
        check::<Nlm4LockArgs>(&mut g);
        check::<Nlm4CancArgs>(&mut g);
        check::<Nlm4UnlockArgs>(&mut g);
        check::<Nlm4Res>(&mut g);
        check::<Nlm4TestRes>(&mut g);
        check::<Nlm4ShareArgs>(&mut g);
        check::<Nlm4ShareRes>(&mut g);
        check::<Nlm4Notify>(&mut g);
    }

    #[test]
    fn the_table_is_indexed_by_procedure_number() {
        for (i, p) in PROCS.iter().enumerate() {
            assert_eq!(p.num as usize, i);
        }
        assert_eq!(proc_::NAMES[proc_::FREE_ALL as usize], "FREE_ALL");
    }

    /// A lock request as the Linux client sends one, byte for byte (cookie 4 bytes, caller
    /// "c", a 8-byte handle, an owner handle "1@c", svid 7, range 0..100).
    #[test]
    fn a_lock_call_decodes_field_by_field() {
        let a = Nlm4LockArgs {
            cookie: Netobj(Bytes::from_static(&[0, 0, 0, 1])),
            block: true,
            exclusive: true,
            alock: Nlm4Lock {
                caller_name: CallerName(Bytes::from_static(b"c")),
                fh: NlmFh(Bytes::from_static(&[9; 8])),
                oh: Netobj(Bytes::from_static(b"1@c")),
                svid: 7,
                l_offset: 0,
                l_len: 100,
            },
            reclaim: false,
            state: 3,
        };
        let bytes = to_bytes(&a);
        #[rustfmt::skip]
        let want: Vec<u8> = [
            &[0, 0, 0, 4, 0, 0, 0, 1][..],      // cookie
            &[0, 0, 0, 1, 0, 0, 0, 1],          // block, exclusive
            &[0, 0, 0, 1, b'c', 0, 0, 0],       // caller_name
            &[0, 0, 0, 8, 9, 9, 9, 9, 9, 9, 9, 9], // fh
            &[0, 0, 0, 3, b'1', b'@', b'c', 0], // oh
            &[0, 0, 0, 7],                      // svid
            &[0, 0, 0, 0, 0, 0, 0, 0],          // l_offset
            &[0, 0, 0, 0, 0, 0, 0, 100],        // l_len
            &[0, 0, 0, 0, 0, 0, 0, 3],          // reclaim, state
        ]
        .concat();
        assert_eq!(&bytes[..], &want[..]);
        let back = decode_args(proc_::LOCK, &mut Reader::new(&[Bytes::from(want)])).unwrap();
        assert_eq!(back, Args::Lock(a));
    }

    #[test]
    fn a_handle_longer_than_an_nfsv3_handle_is_refused() {
        let mut w = crate::Writer::new();
        Netobj(Bytes::new()).pack(&mut w);
        w.put_bool(false);
        CallerName(Bytes::from_static(b"c")).pack(&mut w);
        w.put_opaque(&[0; FH_BYTES_MAX + 1]);
        let rec = w.into_bytes();
        let e = decode_args(proc_::TEST, &mut Reader::new(&[rec])).unwrap_err();
        assert!(
            matches!(e, DecodeError::TooLong { what: "fh", .. }),
            "{e:?}"
        );
    }

    #[test]
    fn unassigned_procedures_do_not_decode() {
        for p in [16, 17, 18, 19, 24] {
            assert!(decode_args(p, &mut Reader::new(&[])).is_err());
        }
    }

    #[test]
    fn a_test_reply_carries_the_holder_only_when_denied() {
        let denied = Nlm4TestRes {
            cookie: Netobj::default(),
            stat: Nlm4TestRply::Denied(Nlm4Holder {
                exclusive: true,
                svid: 1,
                oh: Netobj(Bytes::from_static(b"x")),
                l_offset: 5,
                l_len: 0,
            }),
        };
        assert_eq!(denied.stat.stat(), Nlm4Stats::DENIED);
        let granted = Nlm4TestRes {
            cookie: Netobj::default(),
            stat: Nlm4TestRply::Other(Nlm4Stats::GRANTED.0),
        };
        assert_eq!(to_bytes(&granted).len(), 8);
        let back: Nlm4TestRes = from_bytes(&to_bytes(&denied)).unwrap();
        assert_eq!(back, denied);
    }
}
