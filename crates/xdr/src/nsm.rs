//! NSM version 1 (the Network Status Monitor, "statd", program 100024; X/Open XNFS chapter 11)
//! wire types: how hosts learn that a peer rebooted, so locks can be dropped and reclaimed.
//!
//! ```text
//! NULL          void      -> void
//! STAT          sm_name   -> sm_stat_res   could this host be monitored? (and my state)
//! MON           mon       -> sm_stat_res   monitor mon_name; on its reboot call my_id back
//! UNMON         mon_id    -> sm_stat       stop monitoring one host
//! UNMON_ALL     my_id     -> sm_stat       stop monitoring every host for my_id
//! SIMU_CRASH    void      -> void          act as if this host rebooted
//! NOTIFY        stat_chge -> void          "host mon_name rebooted; its state is now N"
//! ```
//!
//! A host's state number is odd while it is up and even while it is down, and increases at
//! each change, so a peer that sees a new odd number knows the host restarted. Every string is
//! at most [`SM_MAXSTRLEN`] bytes; `priv` is a fixed [`SM_PRIV_SIZE`] bytes.

use crate::{DecodeError, Reader, Result, Unpack};

pub const PROGRAM: u32 = 100024;
pub const VERSION: u32 = 1;

/// SM_MAXSTRLEN: the longest host name.
pub const SM_MAXSTRLEN: usize = 1024;
/// The size of the private cookie MON hands over and the callback returns.
pub const SM_PRIV_SIZE: usize = 16;

/// Procedure numbers.
pub mod proc_ {
    pub const NULL: u32 = 0;
    pub const STAT: u32 = 1;
    pub const MON: u32 = 2;
    pub const UNMON: u32 = 3;
    pub const UNMON_ALL: u32 = 4;
    pub const SIMU_CRASH: u32 = 5;
    pub const NOTIFY: u32 = 6;
    /// Names indexed by procedure number (from [`super::PROCS`]).
    pub const NAMES: [&str; 7] = crate::procs::names(&super::TABLE);
}

/// The facts of every NSM v1 procedure (see [`crate::procs`]). All answers are small fixed
/// structs; NOTIFY and SIMU_CRASH return nothing. None is cached: monitoring a host twice, or
/// hearing of a reboot twice, changes nothing the second time.
pub static PROCS: [crate::procs::ProcInfo; 7] = TABLE;

const TABLE: [crate::procs::ProcInfo; 7] = {
    use crate::procs::{row, ReplyBound::*, TimerClass::Other};
    use proc_::*;
    [
        row(NULL, "NULL", false, Fixed(0), Other),
        row(STAT, "STAT", false, Fixed(8), Other),
        row(MON, "MON", false, Fixed(8), Other),
        row(UNMON, "UNMON", false, Fixed(4), Other),
        row(UNMON_ALL, "UNMON_ALL", false, Fixed(4), Other),
        row(SIMU_CRASH, "SIMU_CRASH", false, Fixed(0), Other),
        row(NOTIFY, "NOTIFY", false, Fixed(0), Other),
    ]
};

xdr_enum!(
    /// `res`: whether the monitor accepted the request.
    SmRes {
        SUCC = 0 => "stat_succ",
        FAIL = 1 => "stat_fail",
    }
);

xdr_bytes!(
    /// A host name of at most [`SM_MAXSTRLEN`] bytes.
    SmString("mon_name", SM_MAXSTRLEN)
);

xdr_struct!(
    /// `sm_name` (STAT).
    SmName { mon_name: SmString }
);

xdr_struct!(
    /// `my_id`: whom to call back (host, program, version, procedure) when a monitored host
    /// changes state.
    MyId {
        my_name: SmString,
        my_prog: u32,
        my_vers: u32,
        my_proc: u32,
    }
);

xdr_struct!(
    /// `mon_id` (UNMON): the monitored host and the caller.
    MonId {
        mon_name: SmString,
        my_id: MyId,
    }
);

xdr_struct!(
    /// `mon` (MON): what to monitor, and the caller's private cookie.
    Mon {
        mon_id: MonId,
        priv_: [u8; SM_PRIV_SIZE],
    }
);

xdr_struct!(
    /// `sm_stat_res`: accepted or not, and the monitor's own state number.
    SmStatRes { res_stat: SmRes, state: u32 }
);

xdr_struct!(
    /// `sm_stat`: the monitor's own state number.
    SmStat { state: u32 }
);

xdr_struct!(
    /// `stat_chge` (NOTIFY): host `mon_name` is now in state `state`.
    StatChge {
        mon_name: SmString,
        state: u32,
    }
);

xdr_struct!(
    /// `status`: the callback a monitor makes to `my_id` when a monitored host changed state.
    SmStatus {
        mon_name: SmString,
        state: u32,
        priv_: [u8; SM_PRIV_SIZE],
    }
);

/// A decoded NSM v1 call's arguments, by procedure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Args {
    Null,
    Stat(SmName),
    Mon(Mon),
    Unmon(MonId),
    UnmonAll(MyId),
    SimuCrash,
    Notify(StatChge),
}

/// A decoded NSM v1 reply's results, by procedure (client side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Res {
    Void,
    StatRes(SmStatRes),
    Stat(SmStat),
}

/// Decodes the arguments of procedure `proc_` (server side).
pub fn decode_args(proc_: u32, r: &mut Reader<'_>) -> Result<Args> {
    use proc_::*;
    Ok(match proc_ {
        NULL => Args::Null,
        STAT => Args::Stat(SmName::unpack(r)?),
        MON => Args::Mon(Mon::unpack(r)?),
        UNMON => Args::Unmon(MonId::unpack(r)?),
        UNMON_ALL => Args::UnmonAll(MyId::unpack(r)?),
        SIMU_CRASH => Args::SimuCrash,
        NOTIFY => Args::Notify(StatChge::unpack(r)?),
        v => return Err(unknown_proc(v)),
    })
}

/// Decodes the results of procedure `proc_` (client side).
pub fn decode_res(proc_: u32, r: &mut Reader<'_>) -> Result<Res> {
    use proc_::*;
    Ok(match proc_ {
        STAT | MON => Res::StatRes(SmStatRes::unpack(r)?),
        UNMON | UNMON_ALL => Res::Stat(SmStat::unpack(r)?),
        NULL | SIMU_CRASH | NOTIFY => Res::Void,
        v => return Err(unknown_proc(v)),
    })
}

fn unknown_proc(v: u32) -> DecodeError {
    DecodeError::BadDiscriminant {
        what: "NSM procedure",
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
            "nsm declared types",
            0x5eed_0024,
        ));
        check::<SmName>(&mut g);
        check::<Mon>(&mut g);
        check::<MonId>(&mut g);
        check::<MyId>(&mut g);
        check::<SmStatRes>(&mut g);
        check::<SmStat>(&mut g);
        check::<StatChge>(&mut g);
        check::<SmStatus>(&mut g);
    }

    #[test]
    fn a_notify_decodes_field_by_field() {
        let b = Bytes::from_static(&[0, 0, 0, 2, b'h', b'1', 0, 0, 0, 0, 0, 5]);
        let a = decode_args(proc_::NOTIFY, &mut Reader::new(&[b])).unwrap();
        assert_eq!(
            a,
            Args::Notify(StatChge {
                mon_name: SmString(Bytes::from_static(b"h1")),
                state: 5
            })
        );
        assert!(decode_args(7, &mut Reader::new(&[])).is_err());
        for (i, p) in PROCS.iter().enumerate() {
            assert_eq!(p.num as usize, i);
        }
    }
}
