//! PORTMAP version 2 (RFC 1833 §3) wire types.
//!
//! ```text
//! NULL    void      -> void
//! SET     mapping   -> bool
//! UNSET   mapping   -> bool
//! GETPORT mapping   -> unsigned int   (0: not registered)
//! DUMP    void      -> pmaplist       (linked list of mappings)
//! CALLIT  call_args -> call_result    (indirect call; UDP only)
//! ```
//! Lists and CALLIT's opaque arguments/results are bounded when decoded.

use crate::{DecodeError, Pack, Reader, Result, Unpack, Writer};
use bytes::Bytes;

pub const PROGRAM: u32 = 100000;
pub const VERSION: u32 = 2;
/// The portmapper's well-known port.
pub const PORT: u16 = 111;

pub const IPPROTO_TCP: u32 = 6;
pub const IPPROTO_UDP: u32 = 17;

/// Most mappings accepted in a DUMP reply. A host registers tens; this only makes a hostile
/// list end.
pub const MAX_MAPPINGS: usize = 1 << 14;
/// Largest CALLIT argument/result body accepted: CALLIT travels over UDP, whose datagrams are
/// under 64 KiB.
pub const MAX_CALLIT_BYTES: usize = 64 * 1024;

/// Procedure numbers.
pub mod proc_ {
    pub const NULL: u32 = 0;
    pub const SET: u32 = 1;
    pub const UNSET: u32 = 2;
    pub const GETPORT: u32 = 3;
    pub const DUMP: u32 = 4;
    pub const CALLIT: u32 = 5;
    /// Names indexed by procedure number (from [`super::PROCS`]).
    pub const NAMES: [&str; 6] = crate::procs::names(&super::TABLE);
}

/// The facts of every PORTMAP v2 procedure, indexed by procedure number (see [`crate::procs`]).
/// SET, UNSET (a bool) and GETPORT (a port) answer one word; DUMP is the whole map; CALLIT would
/// carry another program's results. SET and UNSET change the map, but sluice's map is fixed
/// (both answer false), so nothing is cached as non-idempotent.
pub static PROCS: [crate::procs::ProcInfo; 6] = TABLE;

const TABLE: [crate::procs::ProcInfo; 6] = {
    use crate::procs::{row, ReplyBound::*, TimerClass::Other};
    use proc_::*;
    [
        row(NULL, "NULL", false, Fixed(0), Other),
        row(SET, "SET", false, Fixed(4), Other),
        row(UNSET, "UNSET", false, Fixed(4), Other),
        row(GETPORT, "GETPORT", false, Fixed(4), Other),
        row(DUMP, "DUMP", false, Record, Other),
        row(CALLIT, "CALLIT", false, Record, Other),
    ]
};

/// `mapping`: program, version, IP protocol (`IPPROTO_*`) and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Mapping {
    pub prog: u32,
    pub vers: u32,
    pub prot: u32,
    pub port: u32,
}
impl Pack for Mapping {
    fn pack(&self, w: &mut Writer) {
        w.put_u32(self.prog);
        w.put_u32(self.vers);
        w.put_u32(self.prot);
        w.put_u32(self.port);
    }
}
impl Unpack for Mapping {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            prog: r.get_u32()?,
            vers: r.get_u32()?,
            prot: r.get_u32()?,
            port: r.get_u32()?,
        })
    }
}

/// `pmaplist`: the DUMP reply, as the XDR linked list of mappings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PmapList(pub Vec<Mapping>);
impl Pack for PmapList {
    fn pack(&self, w: &mut Writer) {
        w.put_list(&self.0)
    }
}
impl Unpack for PmapList {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self(r.get_list("pmaplist", MAX_MAPPINGS)?))
    }
}

/// `call_args`: CALLIT's indirect call; `args` is the procedure's already-encoded arguments.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallArgs {
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    pub args: Bytes,
}
impl Pack for CallArgs {
    fn pack(&self, w: &mut Writer) {
        w.put_u32(self.prog);
        w.put_u32(self.vers);
        w.put_u32(self.proc_);
        w.put_opaque(&self.args);
    }
}
impl Unpack for CallArgs {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            prog: r.get_u32()?,
            vers: r.get_u32()?,
            proc_: r.get_u32()?,
            args: r.get_opaque("call_args args", MAX_CALLIT_BYTES)?,
        })
    }
}

/// `call_result`: the port of the called program and its encoded results.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallResult {
    pub port: u32,
    pub res: Bytes,
}
impl Pack for CallResult {
    fn pack(&self, w: &mut Writer) {
        w.put_u32(self.port);
        w.put_opaque(&self.res);
    }
}
impl Unpack for CallResult {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            port: r.get_u32()?,
            res: r.get_opaque("call_result res", MAX_CALLIT_BYTES)?,
        })
    }
}

/// The arguments of any PORTMAP procedure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Args {
    Null,
    Set(Mapping),
    Unset(Mapping),
    Getport(Mapping),
    Dump,
    Callit(CallArgs),
}

/// The results of any PORTMAP procedure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Res {
    Null,
    Set(bool),
    Unset(bool),
    /// The port, 0 when the program is not registered.
    Getport(u32),
    Dump(PmapList),
    Callit(CallResult),
}

impl Args {
    pub fn proc_(&self) -> u32 {
        match self {
            Args::Null => proc_::NULL,
            Args::Set(_) => proc_::SET,
            Args::Unset(_) => proc_::UNSET,
            Args::Getport(_) => proc_::GETPORT,
            Args::Dump => proc_::DUMP,
            Args::Callit(_) => proc_::CALLIT,
        }
    }
}

impl Res {
    pub fn proc_(&self) -> u32 {
        match self {
            Res::Null => proc_::NULL,
            Res::Set(_) => proc_::SET,
            Res::Unset(_) => proc_::UNSET,
            Res::Getport(_) => proc_::GETPORT,
            Res::Dump(_) => proc_::DUMP,
            Res::Callit(_) => proc_::CALLIT,
        }
    }
}

impl Pack for Args {
    fn pack(&self, w: &mut Writer) {
        match self {
            Args::Set(m) | Args::Unset(m) | Args::Getport(m) => m.pack(w),
            Args::Callit(c) => c.pack(w),
            Args::Null | Args::Dump => {}
        }
    }
}

impl Pack for Res {
    fn pack(&self, w: &mut Writer) {
        match self {
            Res::Set(b) | Res::Unset(b) => w.put_bool(*b),
            Res::Getport(p) => w.put_u32(*p),
            Res::Dump(l) => l.pack(w),
            Res::Callit(c) => c.pack(w),
            Res::Null => {}
        }
    }
}

/// Decodes the arguments of procedure `proc_` (server side); trailing bytes are left in `r`.
pub fn decode_args(proc_: u32, r: &mut Reader<'_>) -> Result<Args> {
    Ok(match proc_ {
        proc_::NULL => Args::Null,
        proc_::SET => Args::Set(Mapping::unpack(r)?),
        proc_::UNSET => Args::Unset(Mapping::unpack(r)?),
        proc_::GETPORT => Args::Getport(Mapping::unpack(r)?),
        proc_::DUMP => Args::Dump,
        proc_::CALLIT => Args::Callit(CallArgs::unpack(r)?),
        v => return Err(unknown_proc(v)),
    })
}

/// Decodes the results of procedure `proc_` (client side).
pub fn decode_res(proc_: u32, r: &mut Reader<'_>) -> Result<Res> {
    Ok(match proc_ {
        proc_::NULL => Res::Null,
        proc_::SET => Res::Set(r.get_bool()?),
        proc_::UNSET => Res::Unset(r.get_bool()?),
        proc_::GETPORT => Res::Getport(r.get_u32()?),
        proc_::DUMP => Res::Dump(PmapList::unpack(r)?),
        proc_::CALLIT => Res::Callit(CallResult::unpack(r)?),
        v => return Err(unknown_proc(v)),
    })
}

fn unknown_proc(v: u32) -> DecodeError {
    DecodeError::BadDiscriminant {
        what: "PORTMAP procedure",
        value: v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{from_bytes, to_bytes};
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn mapping() -> impl Strategy<Value = Mapping> {
        any::<[u32; 4]>().prop_map(|[prog, vers, prot, port]| Mapping {
            prog,
            vers,
            prot,
            port,
        })
    }
    fn opaque() -> impl Strategy<Value = Bytes> {
        vec(any::<u8>(), 0..40).prop_map(Bytes::from)
    }
    fn args() -> impl Strategy<Value = Args> {
        prop_oneof![
            Just(Args::Null),
            mapping().prop_map(Args::Set),
            mapping().prop_map(Args::Unset),
            mapping().prop_map(Args::Getport),
            Just(Args::Dump),
            (any::<[u32; 3]>(), opaque()).prop_map(|([prog, vers, proc_], args)| {
                Args::Callit(CallArgs {
                    prog,
                    vers,
                    proc_,
                    args,
                })
            }),
        ]
    }
    fn res() -> impl Strategy<Value = Res> {
        prop_oneof![
            Just(Res::Null),
            any::<bool>().prop_map(Res::Set),
            any::<bool>().prop_map(Res::Unset),
            any::<u32>().prop_map(Res::Getport),
            vec(mapping(), 0..6).prop_map(|l| Res::Dump(PmapList(l))),
            (any::<u32>(), opaque()).prop_map(|(port, res)| Res::Callit(CallResult { port, res })),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn args_round_trip(a in args()) {
            let b = to_bytes(&a);
            let mut r = Reader::from_bytes(&b);
            prop_assert_eq!(decode_args(a.proc_(), &mut r).unwrap(), a);
            prop_assert_eq!(r.remaining(), 0);
        }

        #[test]
        fn res_round_trip(x in res()) {
            let b = to_bytes(&x);
            let mut r = Reader::from_bytes(&b);
            prop_assert_eq!(decode_res(x.proc_(), &mut r).unwrap(), x);
            prop_assert_eq!(r.remaining(), 0);
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in vec(any::<u8>(), 0..256)) {
            let b = Bytes::from(data);
            for p in 0..=6 {
                let _ = decode_args(p, &mut Reader::from_bytes(&b));
                let _ = decode_res(p, &mut Reader::from_bytes(&b));
            }
        }
    }

    #[test]
    fn getport_args_golden() {
        let m = Mapping {
            prog: crate::nfs3::PROGRAM,
            vers: 3,
            prot: IPPROTO_TCP,
            port: 0,
        };
        #[rustfmt::skip]
        let want: &[u8] = &[
            0, 0x01, 0x86, 0xa3,    // prog 100003
            0, 0, 0, 3,             // vers
            0, 0, 0, 6,             // IPPROTO_TCP
            0, 0, 0, 0,             // port (ignored in GETPORT)
        ];
        assert_eq!(&to_bytes(&Args::Getport(m))[..], want);
        assert_eq!(from_bytes::<Mapping>(&Bytes::from_static(want)).unwrap(), m);
    }

    #[test]
    fn dump_golden() {
        let l = PmapList(vec![Mapping {
            prog: PROGRAM,
            vers: VERSION,
            prot: IPPROTO_UDP,
            port: 111,
        }]);
        #[rustfmt::skip]
        let want: &[u8] = &[
            0, 0, 0, 1,                                     // a mapping follows
            0, 0x01, 0x86, 0xa0, 0, 0, 0, 2, 0, 0, 0, 17, 0, 0, 0, 111,
            0, 0, 0, 0,                                     // end of list
        ];
        assert_eq!(&to_bytes(&l)[..], want);
        assert_eq!(
            from_bytes::<PmapList>(&Bytes::from_static(want)).unwrap(),
            l
        );
    }
}
