//! The NFSv4.1 callback program (RFC 8881 §20, XDR in RFC 5662; CB_OFFLOAD from RFC 7862 §16):
//! CB_NULL (procedure 0) and CB_COMPOUND (procedure 1), which the server sends over the
//! back channel of a session and the client answers.
//!
//! The program number is the client's choice (`csa_cb_program` in CREATE_SESSION,
//! `bca_cb_program` in BACKCHANNEL_CTL); Linux uses [`PROGRAM_DEFAULT`]. The version is 1.
//!
//! CB_COMPOUND has the same shape and the same decoding rules as COMPOUND (see
//! [`super::compound`]): tag and minor version first, a hard cap on the op count, an unknown op
//! ends the list with [`CbArgop4::Illegal`] and arguments that fail to decode end it with
//! [`CbArgop4::BadXdr`]. Both directions encode and decode: the server encodes calls and decodes
//! replies, the sluice client the opposite.

use super::compound::{CompoundError, CompoundLimits};
use super::ops::{OpStatus, OpenDelegation4, Res4, WriteResponse4};
use super::{
    Bitmap4, DeviceId4, Fattr4, Fsid4, LayoutIomode4, LayoutType4, LockOwner4, NfsFh4, Nfsstat4,
    SessionId4, Stateid4, Utf8Str, MAX_ARRAY, MAX_FATTR_BYTES, MINOR_VERSIONS,
};
use crate::{DecodeError, Pack, Reader, Result, Unpack, Writer};

/// The callback program number Linux clients register (`NFS4_CALLBACK`); any number is legal.
pub const PROGRAM_DEFAULT: u32 = 0x4000_0000;
/// The callback program's version (`NFS_CB`).
pub const VERSION: u32 = 1;

/// Procedure numbers of the callback program.
pub mod proc_ {
    pub const CB_NULL: u32 = 0;
    pub const CB_COMPOUND: u32 = 1;
    pub const NAMES: [&str; 2] = ["CB_NULL", "CB_COMPOUND"];
}

xdr_enum!(
    /// `nfs_cb_opnum4`.
    CbOpnum4 {
        GETATTR = 3 => "CB_GETATTR",
        RECALL = 4 => "CB_RECALL",
        LAYOUTRECALL = 5 => "CB_LAYOUTRECALL",
        NOTIFY = 6 => "CB_NOTIFY",
        PUSH_DELEG = 7 => "CB_PUSH_DELEG",
        RECALL_ANY = 8 => "CB_RECALL_ANY",
        RECALLABLE_OBJ_AVAIL = 9 => "CB_RECALLABLE_OBJ_AVAIL",
        RECALL_SLOT = 10 => "CB_RECALL_SLOT",
        SEQUENCE = 11 => "CB_SEQUENCE",
        WANTS_CANCELLED = 12 => "CB_WANTS_CANCELLED",
        NOTIFY_LOCK = 13 => "CB_NOTIFY_LOCK",
        NOTIFY_DEVICEID = 14 => "CB_NOTIFY_DEVICEID",
        OFFLOAD = 15 => "CB_OFFLOAD",
        ILLEGAL = 10044 => "CB_ILLEGAL",
    }
);

xdr_struct!(
    /// `CB_GETATTR4args`.
    CbGetattrArgs {
        fh: NfsFh4,
        attr_request: Bitmap4,
    }
);
xdr_struct!(
    /// `CB_RECALL4args`.
    CbRecallArgs {
        stateid: Stateid4,
        truncate: bool,
        fh: NfsFh4,
    }
);

xdr_struct!(
    /// `layoutrecall_file4`.
    LayoutrecallFile4 {
        fh: NfsFh4,
        offset: u64,
        length: u64,
        stateid: Stateid4,
    }
);
xdr_union!(
    /// `layoutrecall4` (`switch (layoutrecall_type4)`).
    #[derive(Default)]
    Layoutrecall4("layoutrecall_type4") {
        1u32 => File(LayoutrecallFile4),
        2u32 => Fsid(Fsid4),
        #[default]
        3u32 => All,
    }
);
xdr_struct!(
    /// `CB_LAYOUTRECALL4args`.
    CbLayoutrecallArgs {
        layout_type: LayoutType4,
        iomode: LayoutIomode4,
        changed: bool,
        recall: Layoutrecall4,
    }
);

/// `notify_type4` bit numbers of `notify4.notify_mask`.
pub const NOTIFY4_CHANGE_CHILD_ATTRS: u32 = 0;
pub const NOTIFY4_CHANGE_DIR_ATTRS: u32 = 1;
pub const NOTIFY4_REMOVE_ENTRY: u32 = 2;
pub const NOTIFY4_ADD_ENTRY: u32 = 3;
pub const NOTIFY4_RENAME_ENTRY: u32 = 4;
pub const NOTIFY4_CHANGE_COOKIE_VERIFIER: u32 = 5;

xdr_bytes!(
    /// `notifylist4`: the XDR of the notifications in `notify_mask` order, like `attrlist4`.
    NotifyList4("notifylist4", MAX_FATTR_BYTES)
);
xdr_struct!(
    /// `notify4`: a mask and its values, kept raw as `fattr4` is.
    Notify4 {
        mask: Bitmap4,
        vals: NotifyList4,
    }
);
xdr_array!(
    /// `notify4<>`.
    NotifyList(Notify4, "notify4<>", MAX_ARRAY)
);
xdr_struct!(
    /// `CB_NOTIFY4args`.
    CbNotifyArgs {
        stateid: Stateid4,
        fh: NfsFh4,
        changes: NotifyList,
    }
);
xdr_struct!(
    /// `CB_PUSH_DELEG4args`.
    CbPushDelegArgs {
        fh: NfsFh4,
        delegation: OpenDelegation4,
    }
);

/// `craa_type_mask` bit numbers (RFC 8881 §20.6.3).
pub const RCA4_TYPE_MASK_RDATA_DLG: u32 = 0;
pub const RCA4_TYPE_MASK_WDATA_DLG: u32 = 1;
pub const RCA4_TYPE_MASK_DIR_DLG: u32 = 2;
pub const RCA4_TYPE_MASK_FILE_LAYOUT: u32 = 3;
pub const RCA4_TYPE_MASK_BLK_LAYOUT: u32 = 4;

xdr_struct!(
    /// `CB_RECALL_ANY4args` (and `CB_RECALLABLE_OBJ_AVAIL4args`).
    CbRecallAnyArgs {
        objects_to_keep: u32,
        type_mask: Bitmap4,
    }
);

xdr_struct!(
    /// `referring_call4`.
    ReferringCall4 {
        sequenceid: u32,
        slotid: u32,
    }
);
xdr_array!(
    /// `referring_call4<>`.
    ReferringCalls(ReferringCall4, "referring_call4<>", MAX_ARRAY)
);
xdr_struct!(
    /// `referring_call_list4`.
    ReferringCallList4 {
        sessionid: SessionId4,
        calls: ReferringCalls,
    }
);
xdr_array!(
    /// `referring_call_list4<>`.
    ReferringCallLists(ReferringCallList4, "referring_call_list4<>", MAX_ARRAY)
);
xdr_struct!(
    /// `CB_SEQUENCE4args`.
    CbSequenceArgs {
        sessionid: SessionId4,
        sequenceid: u32,
        slotid: u32,
        highest_slotid: u32,
        cachethis: bool,
        referring_call_lists: ReferringCallLists,
    }
);
xdr_struct!(
    /// `CB_SEQUENCE4resok`.
    CbSequenceResOk {
        sessionid: SessionId4,
        sequenceid: u32,
        slotid: u32,
        highest_slotid: u32,
        target_highest_slotid: u32,
    }
);
xdr_struct!(
    /// `CB_WANTS_CANCELLED4args`.
    CbWantsCancelledArgs {
        contended_wants_cancelled: bool,
        resourced_wants_cancelled: bool,
    }
);
xdr_struct!(
    /// `CB_NOTIFY_LOCK4args`.
    CbNotifyLockArgs {
        fh: NfsFh4,
        lock_owner: LockOwner4,
    }
);

/// `notify_deviceid_type4` bit numbers.
pub const NOTIFY_DEVICEID4_CHANGE: u32 = 1;
pub const NOTIFY_DEVICEID4_DELETE: u32 = 2;
xdr_struct!(
    /// `notify_deviceid_delete4` (one of the values inside a [`Notify4`]).
    NotifyDeviceidDelete4 {
        layout_type: LayoutType4,
        deviceid: DeviceId4,
    }
);
xdr_struct!(
    /// `notify_deviceid_change4`.
    NotifyDeviceidChange4 {
        layout_type: LayoutType4,
        deviceid: DeviceId4,
        immediate: bool,
    }
);

/// `offload_info4` (`switch (nfsstat4 coa_status)`): the copy's result, or on error how many
/// bytes were copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffloadInfo4 {
    Ok(WriteResponse4),
    /// Never [`Nfsstat4::OK`].
    Err(Nfsstat4, u64),
}
impl Default for OffloadInfo4 {
    fn default() -> Self {
        OffloadInfo4::Ok(WriteResponse4::default())
    }
}
impl Pack for OffloadInfo4 {
    fn pack(&self, w: &mut Writer) {
        match self {
            OffloadInfo4::Ok(r) => {
                Nfsstat4::OK.pack(w);
                r.pack(w);
            }
            OffloadInfo4::Err(s, n) => {
                debug_assert_ne!(*s, Nfsstat4::OK);
                s.pack(w);
                w.put_u64(*n);
            }
        }
    }
}
impl Unpack for OffloadInfo4 {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        let s = Nfsstat4::unpack(r)?;
        if s == Nfsstat4::OK {
            Ok(OffloadInfo4::Ok(WriteResponse4::unpack(r)?))
        } else {
            Ok(OffloadInfo4::Err(s, r.get_u64()?))
        }
    }
}
#[cfg(test)]
impl super::arb::Arb for OffloadInfo4 {
    fn arb(g: &mut super::arb::Gen) -> Self {
        if g.below(2) == 0 {
            OffloadInfo4::Ok(super::arb::Arb::arb(g))
        } else {
            OffloadInfo4::Err(super::ops::arb_error(g, &[]), g.u64())
        }
    }
}
xdr_struct!(
    /// `CB_OFFLOAD4args` (RFC 7862 §16.1).
    CbOffloadArgs {
        fh: NfsFh4,
        stateid: Stateid4,
        offload_info: OffloadInfo4,
    }
);

macro_rules! cb_ops {
    ($($variant:ident = $op:ident: $args:ty => $res:ty),* $(,)?) => {
        /// `nfs_cb_argop4`.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum CbArgop4 {
            $($variant($args),)*
            /// An undefined op number (answered with CB_ILLEGAL / NFS4ERR_OP_ILLEGAL).
            Illegal(u32),
            /// A known op whose arguments failed to decode (answered NFS4ERR_BADXDR).
            BadXdr(CbOpnum4, DecodeError),
        }

        /// `nfs_cb_resop4`.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum CbResop4 {
            $($variant($res),)*
            /// `CB_ILLEGAL4res`.
            Illegal(Nfsstat4),
        }

        impl CbArgop4 {
            pub fn opnum(&self) -> CbOpnum4 {
                match self {
                    $(CbArgop4::$variant(_) => CbOpnum4::$op,)*
                    CbArgop4::Illegal(n) => CbOpnum4(*n),
                    CbArgop4::BadXdr(op, _) => *op,
                }
            }

            /// Decodes the arguments of op `op`; an undefined number is [`CbArgop4::Illegal`].
            pub fn decode(op: CbOpnum4, r: &mut Reader<'_>) -> Result<CbArgop4> {
                Ok(match op {
                    $(CbOpnum4::$op => CbArgop4::$variant(<$args as Unpack>::unpack(r)?),)*
                    CbOpnum4(n) => CbArgop4::Illegal(n),
                })
            }
        }

        impl Pack for CbArgop4 {
            fn pack(&self, w: &mut Writer) {
                self.opnum().pack(w);
                match self {
                    $(CbArgop4::$variant(a) => a.pack(w),)*
                    CbArgop4::Illegal(_) | CbArgop4::BadXdr(..) => {}
                }
            }
        }

        impl Unpack for CbArgop4 {
            fn unpack(r: &mut Reader<'_>) -> Result<Self> {
                let op = CbOpnum4::unpack(r)?;
                CbArgop4::decode(op, r)
            }
        }

        impl CbResop4 {
            pub fn opnum(&self) -> CbOpnum4 {
                match self {
                    $(CbResop4::$variant(_) => CbOpnum4::$op,)*
                    CbResop4::Illegal(_) => CbOpnum4::ILLEGAL,
                }
            }

            pub fn status(&self) -> Nfsstat4 {
                match self {
                    $(CbResop4::$variant(r) => OpStatus::status(r),)*
                    CbResop4::Illegal(s) => *s,
                }
            }

            /// An error-only result for `op` (the client refusing an op it does not do).
            pub fn error(op: CbOpnum4, status: Nfsstat4) -> CbResop4 {
                debug_assert_ne!(status, Nfsstat4::OK);
                match op {
                    $(CbOpnum4::$op => CbResop4::$variant(<$res as super::ops::ErrorOnly>::error_only(status)),)*
                    _ => CbResop4::Illegal(status),
                }
            }
        }

        impl Pack for CbResop4 {
            fn pack(&self, w: &mut Writer) {
                self.opnum().pack(w);
                match self {
                    $(CbResop4::$variant(r) => r.pack(w),)*
                    CbResop4::Illegal(s) => s.pack(w),
                }
            }
        }

        impl Unpack for CbResop4 {
            fn unpack(r: &mut Reader<'_>) -> Result<Self> {
                let op = CbOpnum4::unpack(r)?;
                Ok(match op {
                    $(CbOpnum4::$op => CbResop4::$variant(<$res as Unpack>::unpack(r)?),)*
                    CbOpnum4::ILLEGAL => CbResop4::Illegal(Nfsstat4::unpack(r)?),
                    CbOpnum4(n) => return Err(DecodeError::BadDiscriminant { what: "nfs_cb_opnum4", value: n }),
                })
            }
        }

        #[cfg(test)]
        impl super::arb::Arb for CbArgop4 {
            fn arb(g: &mut super::arb::Gen) -> Self {
                let choices: &[fn(&mut super::arb::Gen) -> Self] = &[
                    $(|g| CbArgop4::$variant(<$args as super::arb::Arb>::arb(g)),)*
                ];
                let i = g.below(choices.len());
                choices[i](g)
            }
        }

        #[cfg(test)]
        impl super::arb::Arb for CbResop4 {
            fn arb(g: &mut super::arb::Gen) -> Self {
                let choices: &[fn(&mut super::arb::Gen) -> Self] = &[
                    $(|g| CbResop4::$variant(<$res as super::arb::Arb>::arb(g)),)*
                    |g| CbResop4::Illegal(super::ops::arb_error(g, &[])),
                ];
                let i = g.below(choices.len());
                choices[i](g)
            }
        }

        /// Every callback op, in op-number order.
        pub const CB_OPS: &[CbOpnum4] = &[$(CbOpnum4::$op),*];
    };
}

cb_ops! {
    Getattr = GETATTR: CbGetattrArgs => Res4<Fattr4>,
    Recall = RECALL: CbRecallArgs => Nfsstat4,
    Layoutrecall = LAYOUTRECALL: CbLayoutrecallArgs => Nfsstat4,
    Notify = NOTIFY: CbNotifyArgs => Nfsstat4,
    PushDeleg = PUSH_DELEG: CbPushDelegArgs => Nfsstat4,
    RecallAny = RECALL_ANY: CbRecallAnyArgs => Nfsstat4,
    RecallableObjAvail = RECALLABLE_OBJ_AVAIL: CbRecallAnyArgs => Nfsstat4,
    RecallSlot = RECALL_SLOT: u32 => Nfsstat4,
    Sequence = SEQUENCE: CbSequenceArgs => Res4<CbSequenceResOk>,
    WantsCancelled = WANTS_CANCELLED: CbWantsCancelledArgs => Nfsstat4,
    NotifyLock = NOTIFY_LOCK: CbNotifyLockArgs => Nfsstat4,
    NotifyDeviceid = NOTIFY_DEVICEID: NotifyList => Nfsstat4,
    Offload = OFFLOAD: CbOffloadArgs => Nfsstat4,
}

/// `CB_COMPOUND4args`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CbCompound4Args {
    pub tag: Utf8Str,
    pub minorversion: u32,
    /// The `callback_ident` of 4.0's SETCLIENTID; ignored in 4.1 (the session identifies the
    /// client).
    pub callback_ident: u32,
    /// Empty when `minorversion` is not 1 or 2 (nothing after `callback_ident` is read).
    pub ops: Vec<CbArgop4>,
}

impl CbCompound4Args {
    /// Decodes a CB_COMPOUND under `limits`, with the same rules as
    /// [`super::compound::Compound4Args::decode`]. For
    /// [`CompoundError::TooManyOps`], `first` is `None`: the client answers the whole call with
    /// the error.
    pub fn decode(
        r: &mut Reader<'_>,
        limits: &CompoundLimits,
    ) -> std::result::Result<CbCompound4Args, CompoundError> {
        let tag = Utf8Str(r.get_opaque("CB_COMPOUND tag", limits.tag_bytes_max)?);
        let minorversion = r.get_u32()?;
        let callback_ident = r.get_u32()?;
        let mut c = CbCompound4Args {
            tag,
            minorversion,
            callback_ident,
            ops: Vec::new(),
        };
        if !MINOR_VERSIONS.contains(&minorversion) {
            return Ok(c);
        }
        let count = r.get_u32()?;
        if count > limits.ops_max {
            return Err(CompoundError::TooManyOps {
                tag: c.tag,
                minorversion,
                count,
                first: None,
            });
        }
        c.ops.reserve((count as usize).min(r.remaining() / 4));
        for _ in 0..count {
            let op = CbOpnum4::unpack(r)?;
            match CbArgop4::decode(op, r) {
                Ok(a @ CbArgop4::Illegal(_)) => {
                    c.ops.push(a);
                    break;
                }
                Ok(a) => c.ops.push(a),
                Err(e) => {
                    c.ops.push(CbArgop4::BadXdr(op, e));
                    break;
                }
            }
        }
        Ok(c)
    }
}

impl Pack for CbCompound4Args {
    fn pack(&self, w: &mut Writer) {
        self.tag.pack(w);
        w.put_u32(self.minorversion);
        w.put_u32(self.callback_ident);
        w.put_array(&self.ops);
    }
}

impl Unpack for CbCompound4Args {
    /// Decodes with the default limits; too many ops is [`DecodeError::TooLong`].
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        let limits = CompoundLimits::default();
        CbCompound4Args::decode(r, &limits).map_err(|e| match e {
            CompoundError::Xdr(e) => e,
            CompoundError::TooManyOps { count, .. } => DecodeError::TooLong {
                what: "CB_COMPOUND ops",
                max: limits.ops_max as usize,
                got: count as usize,
            },
        })
    }
}

/// `CB_COMPOUND4res`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CbCompound4Res {
    pub status: Nfsstat4,
    pub tag: Utf8Str,
    pub results: Vec<CbResop4>,
}

impl CbCompound4Res {
    /// Decodes a reply with at most `limits.ops_max` results (server side).
    pub fn decode(r: &mut Reader<'_>, limits: &CompoundLimits) -> Result<CbCompound4Res> {
        Ok(CbCompound4Res {
            status: Nfsstat4::unpack(r)?,
            tag: Utf8Str(r.get_opaque("CB_COMPOUND tag", limits.tag_bytes_max)?),
            results: r.get_array("CB_COMPOUND results", limits.ops_max as usize)?,
        })
    }
}

impl Pack for CbCompound4Res {
    fn pack(&self, w: &mut Writer) {
        self.status.pack(w);
        self.tag.pack(w);
        w.put_array(&self.results);
    }
}

impl Unpack for CbCompound4Res {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        CbCompound4Res::decode(r, &CompoundLimits::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs4::arb::{Arb, Gen};
    use crate::{from_bytes, to_bytes};
    use bytes::Bytes;
    use proptest::prelude::*;

    fn decode(b: &[u8]) -> std::result::Result<CbCompound4Args, CompoundError> {
        let b = Bytes::copy_from_slice(b);
        CbCompound4Args::decode(&mut Reader::from_bytes(&b), &CompoundLimits::default())
    }

    /// CB_SEQUENCE + CB_RECALL: what a server sends to recall a delegation.
    #[test]
    fn cb_compound_golden_bytes() {
        let c = CbCompound4Args {
            tag: Utf8Str::default(),
            minorversion: 1,
            callback_ident: 0,
            ops: vec![
                CbArgop4::Sequence(CbSequenceArgs {
                    sessionid: [0x22; 16],
                    sequenceid: 1,
                    slotid: 0,
                    highest_slotid: 0,
                    cachethis: false,
                    referring_call_lists: ReferringCallLists::default(),
                }),
                CbArgop4::Recall(CbRecallArgs {
                    stateid: Stateid4 {
                        seqid: 1,
                        other: [0x33; 12],
                    },
                    truncate: false,
                    fh: NfsFh4::from(&b"\xaa\xbb\xcc\xdd"[..]),
                }),
            ],
        };
        let mut want: Vec<u8> = vec![
            0, 0, 0, 0, // tag<>: empty
            0, 0, 0, 1, // minorversion
            0, 0, 0, 0, // callback_ident
            0, 0, 0, 2, // 2 ops
            0, 0, 0, 11, // OP_CB_SEQUENCE
        ];
        want.extend_from_slice(&[0x22; 16]);
        want.extend_from_slice(&[
            0, 0, 0, 1, // csa_sequenceid
            0, 0, 0, 0, // csa_slotid
            0, 0, 0, 0, // csa_highest_slotid
            0, 0, 0, 0, // csa_cachethis
            0, 0, 0, 0, // csa_referring_call_lists<>: none
            0, 0, 0, 4, // OP_CB_RECALL
            0, 0, 0, 1, // stateid.seqid
        ]);
        want.extend_from_slice(&[0x33; 12]);
        want.extend_from_slice(&[
            0, 0, 0, 0, // truncate false
            0, 0, 0, 4, 0xaa, 0xbb, 0xcc, 0xdd, // fh
        ]);
        assert_eq!(to_bytes(&c).to_vec(), want);
        assert_eq!(decode(&want).unwrap(), c);
    }

    #[test]
    fn unknown_and_bad_cb_ops_end_the_list() {
        let mut w = Writer::new();
        w.put_opaque(b"");
        w.put_u32(1);
        w.put_u32(0);
        w.put_u32(2);
        w.put_u32(10); // CB_RECALL_SLOT
        w.put_u32(4);
        w.put_u32(77); // no such op
        let c = decode(&w.into_bytes()).unwrap();
        assert_eq!(c.ops, vec![CbArgop4::RecallSlot(4), CbArgop4::Illegal(77)]);

        let mut w = Writer::new();
        w.put_opaque(b"");
        w.put_u32(1);
        w.put_u32(0);
        w.put_u32(1);
        w.put_u32(5); // CB_LAYOUTRECALL with recall type 9
        w.put_u32(1);
        w.put_u32(1);
        w.put_bool(false);
        w.put_u32(9);
        let c = decode(&w.into_bytes()).unwrap();
        assert!(matches!(
            c.ops[..],
            [CbArgop4::BadXdr(
                CbOpnum4::LAYOUTRECALL,
                DecodeError::BadDiscriminant { .. }
            )]
        ));
    }

    #[test]
    fn too_many_cb_ops_is_refused() {
        let b = [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0];
        assert!(matches!(
            decode(&b),
            Err(CompoundError::TooManyOps { count: 256, .. })
        ));
    }

    #[test]
    fn every_cb_op_round_trips_and_has_an_error_result() {
        let mut g = Gen::new(7);
        for op in CB_OPS {
            for _ in 0..32 {
                let a = loop {
                    let a = CbArgop4::arb(&mut g);
                    if a.opnum() == *op {
                        break a;
                    }
                };
                assert_eq!(from_bytes::<CbArgop4>(&to_bytes(&a)).unwrap(), a, "{op:?}");
            }
            let e = CbResop4::error(*op, Nfsstat4::NOTSUPP);
            assert_eq!(e.status(), Nfsstat4::NOTSUPP);
            assert_eq!(from_bytes::<CbResop4>(&to_bytes(&e)).unwrap(), e);
        }
    }

    proptest! {
        #[test]
        fn cb_compound_round_trip(seed in any::<u64>()) {
            let mut g = Gen::new(seed);
            let n = g.below(5);
            let c = CbCompound4Args {
                tag: Arb::arb(&mut g),
                minorversion: 1 + g.below(2) as u32,
                callback_ident: g.u32(),
                ops: (0..n).map(|_| CbArgop4::arb(&mut g)).collect(),
            };
            prop_assert_eq!(from_bytes::<CbCompound4Args>(&to_bytes(&c)).unwrap(), c);
            let n = g.below(5);
            let res = CbCompound4Res {
                status: Arb::arb(&mut g),
                tag: Arb::arb(&mut g),
                results: (0..n).map(|_| CbResop4::arb(&mut g)).collect(),
            };
            prop_assert_eq!(from_bytes::<CbCompound4Res>(&to_bytes(&res)).unwrap(), res);
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let b = Bytes::from(data);
            let _ = CbCompound4Args::decode(&mut Reader::from_bytes(&b), &CompoundLimits::default());
            let _ = CbCompound4Res::unpack(&mut Reader::from_bytes(&b));
        }
    }
}
