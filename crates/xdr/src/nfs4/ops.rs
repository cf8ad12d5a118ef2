//! The operations of NFSv4.1 (RFC 8881 §18, XDR in RFC 5662) and 4.2 (RFC 7862 §15, RFC 7863),
//! with the extended-attribute ops of RFC 8276: op numbers, arguments, results, and a table of
//! per-op facts.
//!
//! Every op a 4.1 or 4.2 client may send decodes, including the pNFS ops a server without layouts
//! answers with NFS4ERR_NOTSUPP and the 4.0-only ops (OPEN_CONFIRM, RENEW, SETCLIENTID,
//! SETCLIENTID_CONFIRM, RELEASE_LOCKOWNER) that RFC 8881 §18 makes NFS4ERR_NOTSUPP in 4.1: their
//! arguments must still be read so that the server can answer them, and the client can encode them
//! for tests.
//!
//! Results follow the RFC's `union switch (nfsstat4 status)`: [`Res4`] is NFS4_OK with a body or
//! any other status with none; the few results with a body on an error (LOCK and LOCKT on
//! NFS4ERR_DENIED, SETCLIENTID on NFS4ERR_CLID_INUSE, GETDEVICEINFO on NFS4ERR_TOOSMALL,
//! LAYOUTGET on NFS4ERR_LAYOUTTRYLATER, COPY on NFS4ERR_OFFLOAD_NO_REQS) have their own enums, and
//! results that are only a status are [`Nfsstat4`] itself.
//!
//! READ results and WRITE arguments carry a [`Payload`]: decoding slices the record without a
//! copy, and encoding appends the chunks as their own iovec segments. [`ReadResOk::pack_without_data`]
//! lets a server send the data from elsewhere (a spliced pipe) when READ is the last op of the
//! reply (see `compound::Compound4Res::pack_with_read_data_last`).

use super::{
    Bitmap4, ChangeInfo4, ClientId4, Component4, DeviceId4, Fattr4, GssHandle4, LayoutBody,
    LayoutIomode4, LayoutType4, Linktext4, LockOwner4, Netaddr4, NfsFh4, NfsImplId4, Nfsace4,
    Nfsstat4, Nfstime4, Opaque4, OpenOwner4, SecOid4, SessionId4, Specdata4, StableHow4, Stateid4,
    Utf8Str, Verifier4, MAX_ARRAY, MAX_DATA_WIRE,
};
use crate::rpc::AuthSys;
use crate::{DecodeError, Pack, Payload, Reader, Result, Unpack, Writer};

xdr_enum!(
    /// `nfs_opnum4`: every op number of 4.0, 4.1, 4.2 and RFC 8276, and OP_ILLEGAL.
    Opnum4 {
        ACCESS = 3 => "ACCESS",
        CLOSE = 4 => "CLOSE",
        COMMIT = 5 => "COMMIT",
        CREATE = 6 => "CREATE",
        DELEGPURGE = 7 => "DELEGPURGE",
        DELEGRETURN = 8 => "DELEGRETURN",
        GETATTR = 9 => "GETATTR",
        GETFH = 10 => "GETFH",
        LINK = 11 => "LINK",
        LOCK = 12 => "LOCK",
        LOCKT = 13 => "LOCKT",
        LOCKU = 14 => "LOCKU",
        LOOKUP = 15 => "LOOKUP",
        LOOKUPP = 16 => "LOOKUPP",
        NVERIFY = 17 => "NVERIFY",
        OPEN = 18 => "OPEN",
        OPENATTR = 19 => "OPENATTR",
        OPEN_CONFIRM = 20 => "OPEN_CONFIRM",
        OPEN_DOWNGRADE = 21 => "OPEN_DOWNGRADE",
        PUTFH = 22 => "PUTFH",
        PUTPUBFH = 23 => "PUTPUBFH",
        PUTROOTFH = 24 => "PUTROOTFH",
        READ = 25 => "READ",
        READDIR = 26 => "READDIR",
        READLINK = 27 => "READLINK",
        REMOVE = 28 => "REMOVE",
        RENAME = 29 => "RENAME",
        RENEW = 30 => "RENEW",
        RESTOREFH = 31 => "RESTOREFH",
        SAVEFH = 32 => "SAVEFH",
        SECINFO = 33 => "SECINFO",
        SETATTR = 34 => "SETATTR",
        SETCLIENTID = 35 => "SETCLIENTID",
        SETCLIENTID_CONFIRM = 36 => "SETCLIENTID_CONFIRM",
        VERIFY = 37 => "VERIFY",
        WRITE = 38 => "WRITE",
        RELEASE_LOCKOWNER = 39 => "RELEASE_LOCKOWNER",
        BACKCHANNEL_CTL = 40 => "BACKCHANNEL_CTL",
        BIND_CONN_TO_SESSION = 41 => "BIND_CONN_TO_SESSION",
        EXCHANGE_ID = 42 => "EXCHANGE_ID",
        CREATE_SESSION = 43 => "CREATE_SESSION",
        DESTROY_SESSION = 44 => "DESTROY_SESSION",
        FREE_STATEID = 45 => "FREE_STATEID",
        GET_DIR_DELEGATION = 46 => "GET_DIR_DELEGATION",
        GETDEVICEINFO = 47 => "GETDEVICEINFO",
        GETDEVICELIST = 48 => "GETDEVICELIST",
        LAYOUTCOMMIT = 49 => "LAYOUTCOMMIT",
        LAYOUTGET = 50 => "LAYOUTGET",
        LAYOUTRETURN = 51 => "LAYOUTRETURN",
        SECINFO_NO_NAME = 52 => "SECINFO_NO_NAME",
        SEQUENCE = 53 => "SEQUENCE",
        SET_SSV = 54 => "SET_SSV",
        TEST_STATEID = 55 => "TEST_STATEID",
        WANT_DELEGATION = 56 => "WANT_DELEGATION",
        DESTROY_CLIENTID = 57 => "DESTROY_CLIENTID",
        RECLAIM_COMPLETE = 58 => "RECLAIM_COMPLETE",
        ALLOCATE = 59 => "ALLOCATE",
        COPY = 60 => "COPY",
        COPY_NOTIFY = 61 => "COPY_NOTIFY",
        DEALLOCATE = 62 => "DEALLOCATE",
        IO_ADVISE = 63 => "IO_ADVISE",
        LAYOUTERROR = 64 => "LAYOUTERROR",
        LAYOUTSTATS = 65 => "LAYOUTSTATS",
        OFFLOAD_CANCEL = 66 => "OFFLOAD_CANCEL",
        OFFLOAD_STATUS = 67 => "OFFLOAD_STATUS",
        READ_PLUS = 68 => "READ_PLUS",
        SEEK = 69 => "SEEK",
        WRITE_SAME = 70 => "WRITE_SAME",
        CLONE = 71 => "CLONE",
        GETXATTR = 72 => "GETXATTR",
        SETXATTR = 73 => "SETXATTR",
        LISTXATTRS = 74 => "LISTXATTRS",
        REMOVEXATTR = 75 => "REMOVEXATTR",
        ILLEGAL = 10044 => "ILLEGAL",
    }
);

/// Largest name of an extended attribute key and value accepted on the wire (RFC 8276 leaves
/// them open; Linux caps names at 255 bytes and values at 64 KiB, XATTR_SIZE_MAX).
pub const MAX_XATTR_VALUE_WIRE: usize = 64 * 1024;

/// Most directory entries a READDIR reply may carry when decoded: the v3 layer's bound, for the
/// same reason (an entry takes at least 28 bytes, so 2^18 is above any sane reply).
pub const MAX_DIR_ENTRIES: usize = crate::nfs3::MAX_DIR_ENTRIES;

// ---------------------------------------------------------------------------------------------
// Result shapes
// ---------------------------------------------------------------------------------------------

/// The status of an op's result (what the COMPOUND status becomes when the op fails).
pub trait OpStatus {
    fn status(&self) -> Nfsstat4;
}

impl OpStatus for Nfsstat4 {
    fn status(&self) -> Nfsstat4 {
        *self
    }
}

/// `union switch (nfsstat4 status) { case NFS4_OK: T resok4; default: void; }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Res4<T> {
    Ok(T),
    /// Never [`Nfsstat4::OK`].
    Err(Nfsstat4),
}

impl<T> OpStatus for Res4<T> {
    fn status(&self) -> Nfsstat4 {
        match self {
            Res4::Ok(_) => Nfsstat4::OK,
            Res4::Err(s) => *s,
        }
    }
}
impl<T: Pack> Pack for Res4<T> {
    fn pack(&self, w: &mut Writer) {
        match self {
            Res4::Ok(v) => {
                Nfsstat4::OK.pack(w);
                v.pack(w);
            }
            Res4::Err(s) => {
                debug_assert_ne!(*s, Nfsstat4::OK);
                s.pack(w);
            }
        }
    }
}
impl<T: Unpack> Unpack for Res4<T> {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        let s = Nfsstat4::unpack(r)?;
        if s == Nfsstat4::OK {
            Ok(Res4::Ok(T::unpack(r)?))
        } else {
            Ok(Res4::Err(s))
        }
    }
}
#[cfg(test)]
impl<T: super::arb::Arb> super::arb::Arb for Res4<T> {
    fn arb(g: &mut super::arb::Gen) -> Self {
        if g.below(3) == 0 {
            Res4::Err(arb_error(g, &[]))
        } else {
            Res4::Ok(T::arb(g))
        }
    }
}

/// An error status other than OK and the `except` ones (which have their own arms).
#[cfg(test)]
pub(crate) fn arb_error(g: &mut super::arb::Gen, except: &[Nfsstat4]) -> Nfsstat4 {
    loop {
        let s = <Nfsstat4 as super::arb::Arb>::arb(g);
        if s != Nfsstat4::OK && !except.contains(&s) {
            return s;
        }
    }
}

/// A result union with NFS4_OK, extra error arms that carry a body, and `default: void`.
macro_rules! nfs4_res {
    ($(#[$m:meta])* $name:ident { Ok($ok:ty) $(, $st:ident => $var:ident($ty:ty))* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum $name {
            Ok($ok),
            $($var($ty),)*
            /// Any other error, with no body. Never OK nor a status with its own arm.
            Err($crate::nfs4::Nfsstat4),
        }
        impl $crate::nfs4::ops::OpStatus for $name {
            fn status(&self) -> $crate::nfs4::Nfsstat4 {
                match self {
                    Self::Ok(_) => $crate::nfs4::Nfsstat4::OK,
                    $(Self::$var(_) => $crate::nfs4::Nfsstat4::$st,)*
                    Self::Err(s) => *s,
                }
            }
        }
        impl $crate::Pack for $name {
            fn pack(&self, w: &mut $crate::Writer) {
                $crate::Pack::pack(&$crate::nfs4::ops::OpStatus::status(self), w);
                match self {
                    Self::Ok(v) => $crate::Pack::pack(v, w),
                    $(Self::$var(v) => $crate::Pack::pack(v, w),)*
                    Self::Err(_) => {}
                }
            }
        }
        impl $crate::Unpack for $name {
            fn unpack(r: &mut $crate::Reader<'_>) -> $crate::Result<Self> {
                let s = <$crate::nfs4::Nfsstat4 as $crate::Unpack>::unpack(r)?;
                if s == $crate::nfs4::Nfsstat4::OK {
                    return Ok(Self::Ok(<$ok as $crate::Unpack>::unpack(r)?));
                }
                $(
                    if s == $crate::nfs4::Nfsstat4::$st {
                        return Ok(Self::$var(<$ty as $crate::Unpack>::unpack(r)?));
                    }
                )*
                Ok(Self::Err(s))
            }
        }
        #[cfg(test)]
        impl $crate::arb::Arb for $name {
            fn arb(g: &mut $crate::arb::Gen) -> Self {
                use $crate::arb::Arb;
                #[allow(unused_variables)]
                let choices: &[fn(&mut $crate::arb::Gen) -> Self] = &[
                    |g| Self::Ok(Arb::arb(g)),
                    $(|g| Self::$var(<$ty as Arb>::arb(g)),)*
                    |g| Self::Err($crate::nfs4::ops::arb_error(g, &[$($crate::nfs4::Nfsstat4::$st),*])),
                ];
                let i = g.below(choices.len());
                choices[i](g)
            }
        }
    };
}

// ---------------------------------------------------------------------------------------------
// 4.0 operations (RFC 8881 §18.1 - §18.26 and §18.27 - §18.35 for their 4.1 forms)
// ---------------------------------------------------------------------------------------------

/// ACCESS4 bits (RFC 8881 §18.1).
pub const ACCESS4_READ: u32 = 0x01;
pub const ACCESS4_LOOKUP: u32 = 0x02;
pub const ACCESS4_MODIFY: u32 = 0x04;
pub const ACCESS4_EXTEND: u32 = 0x08;
pub const ACCESS4_DELETE: u32 = 0x10;
pub const ACCESS4_EXECUTE: u32 = 0x20;
/// The extended-attribute ACCESS4 bits of RFC 8276 §8.4.1 (minor version 2): read an
/// attribute's value (GETXATTR), set or remove one (SETXATTR, REMOVEXATTR), list the names
/// (LISTXATTRS).
pub const ACCESS4_XAREAD: u32 = 0x40;
pub const ACCESS4_XAWRITE: u32 = 0x80;
pub const ACCESS4_XALIST: u32 = 0x100;

xdr_struct!(
    /// `ACCESS4args`.
    AccessArgs { access: u32 }
);
xdr_struct!(
    /// `ACCESS4resok`.
    AccessResOk { supported: u32, access: u32 }
);
pub type AccessRes = Res4<AccessResOk>;

xdr_struct!(
    /// `CLOSE4args`. `seqid` is ignored in 4.1 (RFC 8881 §18.2.3).
    CloseArgs {
        seqid: u32,
        open_stateid: Stateid4,
    }
);
pub type CloseRes = Res4<Stateid4>;

xdr_struct!(
    /// `COMMIT4args`.
    CommitArgs { offset: u64, count: u32 }
);
/// `COMMIT4res`: the write verifier.
pub type CommitRes = Res4<Verifier4>;

xdr_union!(
    /// `createtype4`: what CREATE makes (regular files are made by OPEN). Other types decode to
    /// `Other` so that the server can answer NFS4ERR_BADTYPE.
    #[derive(Default)]
    Createtype4("createtype4") default => Other {
        5u32 => Lnk(Linktext4),
        3u32 => Blk(Specdata4),
        4u32 => Chr(Specdata4),
        6u32 => Sock,
        7u32 => Fifo,
        #[default]
        2u32 => Dir,
    }
);

xdr_struct!(
    /// `CREATE4args`.
    CreateArgs {
        objtype: Createtype4,
        objname: Component4,
        createattrs: Fattr4,
    }
);
xdr_struct!(
    /// `CREATE4resok`.
    CreateResOk {
        cinfo: ChangeInfo4,
        attrset: Bitmap4,
    }
);
pub type CreateRes = Res4<CreateResOk>;

/// `nfs_lock_type4`.
pub const READ_LT: u32 = 1;
pub const WRITE_LT: u32 = 2;
pub const READW_LT: u32 = 3;
pub const WRITEW_LT: u32 = 4;

xdr_struct!(
    /// `open_to_lock_owner4`: the first lock of a lock owner, tied to an open.
    OpenToLockOwner4 {
        open_seqid: u32,
        open_stateid: Stateid4,
        lock_seqid: u32,
        lock_owner: LockOwner4,
    }
);
xdr_struct!(
    /// `exist_lock_owner4`.
    ExistLockOwner4 {
        lock_stateid: Stateid4,
        lock_seqid: u32,
    }
);
xdr_union!(
    /// `locker4` (`switch (bool new_lock_owner)`).
    Locker4("locker4") {
        1u32 => New(OpenToLockOwner4),
        0u32 => Exist(ExistLockOwner4),
    }
);
impl Default for Locker4 {
    fn default() -> Self {
        Locker4::Exist(ExistLockOwner4::default())
    }
}

xdr_struct!(
    /// `LOCK4args`. `locktype` is a `nfs_lock_type4` ([`READ_LT`] ...).
    LockArgs {
        locktype: u32,
        reclaim: bool,
        offset: u64,
        length: u64,
        locker: Locker4,
    }
);
xdr_struct!(
    /// `LOCK4denied`: the conflicting lock.
    Lock4Denied {
        offset: u64,
        length: u64,
        locktype: u32,
        owner: LockOwner4,
    }
);
nfs4_res!(
    /// `LOCK4res`.
    LockRes { Ok(Stateid4), DENIED => Denied(Lock4Denied) }
);

xdr_struct!(
    /// `LOCKT4args`.
    LocktArgs {
        locktype: u32,
        offset: u64,
        length: u64,
        owner: LockOwner4,
    }
);
nfs4_res!(
    /// `LOCKT4res`.
    LocktRes { Ok(()), DENIED => Denied(Lock4Denied) }
);

xdr_struct!(
    /// `LOCKU4args`.
    LockuArgs {
        locktype: u32,
        seqid: u32,
        lock_stateid: Stateid4,
        offset: u64,
        length: u64,
    }
);
pub type LockuRes = Res4<Stateid4>;

/// OPEN share access and deny bits, and the 4.1 delegation wants in `share_access`
/// (RFC 8881 §18.16.3).
pub const OPEN4_SHARE_ACCESS_READ: u32 = 0x1;
pub const OPEN4_SHARE_ACCESS_WRITE: u32 = 0x2;
pub const OPEN4_SHARE_ACCESS_BOTH: u32 = 0x3;
pub const OPEN4_SHARE_DENY_NONE: u32 = 0x0;
pub const OPEN4_SHARE_DENY_READ: u32 = 0x1;
pub const OPEN4_SHARE_DENY_WRITE: u32 = 0x2;
pub const OPEN4_SHARE_DENY_BOTH: u32 = 0x3;
pub const OPEN4_SHARE_WANT_MASK: u32 = 0xff00;
pub const OPEN4_SHARE_WANT_NO_PREFERENCE: u32 = 0x0000;
pub const OPEN4_SHARE_WANT_READ_DELEG: u32 = 0x0100;
pub const OPEN4_SHARE_WANT_WRITE_DELEG: u32 = 0x0200;
pub const OPEN4_SHARE_WANT_ANY_DELEG: u32 = 0x0300;
pub const OPEN4_SHARE_WANT_NO_DELEG: u32 = 0x0400;
pub const OPEN4_SHARE_WANT_CANCEL: u32 = 0x0500;
pub const OPEN4_SHARE_SIGNAL_DELEG_WHEN_RESRC_AVAIL: u32 = 0x10000;
pub const OPEN4_SHARE_PUSH_DELEG_WHEN_UNCONTENDED: u32 = 0x20000;
/// OPEN result flags.
pub const OPEN4_RESULT_CONFIRM: u32 = 0x2;
pub const OPEN4_RESULT_LOCKTYPE_POSIX: u32 = 0x4;
pub const OPEN4_RESULT_PRESERVE_UNLINKED: u32 = 0x8;
pub const OPEN4_RESULT_MAY_NOTIFY_LOCK: u32 = 0x20;

xdr_struct!(
    /// `creatverfattr`: EXCLUSIVE4_1's verifier and attributes.
    CreatVerfAttr {
        verf: Verifier4,
        attrs: Fattr4,
    }
);
xdr_union!(
    /// `createhow4` (`switch (createmode4 mode)`).
    Createhow4("createmode4") {
        0u32 => Unchecked(Fattr4),
        1u32 => Guarded(Fattr4),
        2u32 => Exclusive(Verifier4),
        3u32 => Exclusive41(CreatVerfAttr),
    }
);
xdr_union!(
    /// `openflag4` (`switch (opentype4 opentype)`); `default: void`.
    #[derive(Default)]
    Openflag4("opentype4") default => Other {
        #[default]
        0u32 => NoCreate,
        1u32 => Create(Createhow4),
    }
);

/// `open_delegation_type4`.
pub const OPEN_DELEGATE_NONE: u32 = 0;
pub const OPEN_DELEGATE_READ: u32 = 1;
pub const OPEN_DELEGATE_WRITE: u32 = 2;
pub const OPEN_DELEGATE_NONE_EXT: u32 = 3;

xdr_struct!(
    /// `open_claim_delegate_cur4`.
    OpenClaimDelegateCur4 {
        delegate_stateid: Stateid4,
        file: Component4,
    }
);
xdr_union!(
    /// `open_claim4` (`switch (open_claim_type4 claim)`).
    #[derive(Default)]
    OpenClaim4("open_claim_type4") {
        0u32 => Null(Component4),
        1u32 => Previous(u32),
        2u32 => DelegateCur(OpenClaimDelegateCur4),
        3u32 => DelegatePrev(Component4),
        #[default]
        4u32 => Fh,
        5u32 => DelegCurFh(Stateid4),
        6u32 => DelegPrevFh,
    }
);

xdr_struct!(
    /// `OPEN4args`.
    OpenArgs {
        seqid: u32,
        share_access: u32,
        share_deny: u32,
        owner: OpenOwner4,
        openhow: Openflag4,
        claim: OpenClaim4,
    }
);

xdr_struct!(
    /// `nfs_modified_limit4`.
    NfsModifiedLimit4 {
        num_blocks: u32,
        bytes_per_block: u32,
    }
);
xdr_union!(
    /// `nfs_space_limit4` (`switch (limit_by4 limitby)`).
    NfsSpaceLimit4("limit_by4") {
        1u32 => Size(u64),
        2u32 => Blocks(NfsModifiedLimit4),
    }
);
impl Default for NfsSpaceLimit4 {
    fn default() -> Self {
        NfsSpaceLimit4::Size(0)
    }
}
xdr_struct!(
    /// `open_read_delegation4`.
    OpenReadDelegation4 {
        stateid: Stateid4,
        recall: bool,
        permissions: Nfsace4,
    }
);
xdr_struct!(
    /// `open_write_delegation4`.
    OpenWriteDelegation4 {
        stateid: Stateid4,
        recall: bool,
        space_limit: NfsSpaceLimit4,
        permissions: Nfsace4,
    }
);
/// `why_no_delegation4`.
pub const WND4_NOT_WANTED: u32 = 0;
pub const WND4_CONTENTION: u32 = 1;
pub const WND4_RESOURCE: u32 = 2;
pub const WND4_NOT_SUPP_FTYPE: u32 = 3;
pub const WND4_WRITE_DELEG_NOT_SUPP_FTYPE: u32 = 4;
pub const WND4_NOT_SUPP_UPGRADE: u32 = 5;
pub const WND4_NOT_SUPP_DOWNGRADE: u32 = 6;
pub const WND4_CANCELLED: u32 = 7;
pub const WND4_IS_DIR: u32 = 8;
xdr_union!(
    /// `open_none_delegation4` (`switch (why_no_delegation4 ond_why)`); the other reasons carry
    /// nothing and decode to `Why(reason)`.
    OpenNoneDelegation4("why_no_delegation4") default => Why {
        1u32 => Contention(bool),
        2u32 => Resource(bool),
    }
);
xdr_union!(
    /// `open_delegation4` (`switch (open_delegation_type4 delegation_type)`).
    #[derive(Default)]
    OpenDelegation4("open_delegation_type4") {
        #[default]
        0u32 => None,
        1u32 => Read(OpenReadDelegation4),
        2u32 => Write(OpenWriteDelegation4),
        3u32 => NoneExt(OpenNoneDelegation4),
    }
);
xdr_struct!(
    /// `OPEN4resok`.
    OpenResOk {
        stateid: Stateid4,
        cinfo: ChangeInfo4,
        rflags: u32,
        attrset: Bitmap4,
        delegation: OpenDelegation4,
    }
);
pub type OpenRes = Res4<OpenResOk>;

xdr_struct!(
    /// `OPEN_CONFIRM4args` (4.0 only).
    OpenConfirmArgs {
        open_stateid: Stateid4,
        seqid: u32,
    }
);
xdr_struct!(
    /// `OPEN_DOWNGRADE4args`.
    OpenDowngradeArgs {
        open_stateid: Stateid4,
        seqid: u32,
        share_access: u32,
        share_deny: u32,
    }
);

xdr_struct!(
    /// `READ4args`.
    ReadArgs {
        stateid: Stateid4,
        offset: u64,
        count: u32,
    }
);

/// `READ4resok`. `data` is encoded without copying its chunks and decoded as zero-copy slices of
/// the record, at most [`MAX_DATA_WIRE`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReadResOk {
    pub eof: bool,
    pub data: Payload,
}
impl ReadResOk {
    /// Encoded size of everything but the data bytes and their padding: eof (4) + length (4).
    pub const FIXED_BYTES: usize = 8;

    /// Encodes eof and the data's length only; on the wire the `data.len()` bytes follow, then
    /// [`super::compound::padding_after`] zero bytes.
    pub fn pack_without_data(&self, w: &mut Writer) {
        w.put_bool(self.eof);
        w.put_u32(self.data.len() as u32);
    }
}
impl Pack for ReadResOk {
    fn pack(&self, w: &mut Writer) {
        w.put_bool(self.eof);
        w.put_payload(&self.data);
    }
}
impl Unpack for ReadResOk {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            eof: r.get_bool()?,
            data: r.get_payload("READ data", MAX_DATA_WIRE)?,
        })
    }
}
#[cfg(test)]
impl super::arb::Arb for ReadResOk {
    fn arb(g: &mut super::arb::Gen) -> Self {
        Self {
            eof: super::arb::Arb::arb(g),
            data: super::arb::Arb::arb(g),
        }
    }
}
pub type ReadRes = Res4<ReadResOk>;

xdr_struct!(
    /// `READDIR4args`. `dircount` bounds the names and cookies, `maxcount` the whole reply.
    ReaddirArgs {
        cookie: u64,
        cookieverf: Verifier4,
        dircount: u32,
        maxcount: u32,
        attr_request: Bitmap4,
    }
);
xdr_struct!(
    /// `entry4` without its link.
    Entry4 {
        cookie: u64,
        name: Component4,
        attrs: Fattr4,
    }
);
impl Entry4 {
    /// Encoded size, with the list bool in front: what a server counts against `maxcount`.
    pub fn encoded_len(&self) -> usize {
        4 + 8
            + 4
            + self.name.len()
            + crate::pad_len(self.name.len())
            + 4 * (1 + self.attrs.mask.0.len())
            + 4
            + self.attrs.vals.len()
            + crate::pad_len(self.attrs.vals.len())
    }
}
/// `READDIR4resok`: the cookie verifier and `dirlist4` (entries as an XDR list, then eof).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReaddirResOk {
    pub cookieverf: Verifier4,
    pub entries: Vec<Entry4>,
    pub eof: bool,
}
impl ReaddirResOk {
    /// Size without entries: cookieverf (8), the list's final false (4), eof (4).
    pub const FIXED_BYTES: usize = 16;
}
impl Pack for ReaddirResOk {
    fn pack(&self, w: &mut Writer) {
        self.cookieverf.pack(w);
        w.put_list(&self.entries);
        w.put_bool(self.eof);
    }
}
impl Unpack for ReaddirResOk {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            cookieverf: Unpack::unpack(r)?,
            entries: r.get_list("dirlist4", MAX_DIR_ENTRIES)?,
            eof: r.get_bool()?,
        })
    }
}
#[cfg(test)]
impl super::arb::Arb for ReaddirResOk {
    fn arb(g: &mut super::arb::Gen) -> Self {
        use super::arb::Arb;
        let n = g.below(3);
        Self {
            cookieverf: Arb::arb(g),
            entries: (0..n).map(|_| Arb::arb(g)).collect(),
            eof: Arb::arb(g),
        }
    }
}
pub type ReaddirRes = Res4<ReaddirResOk>;

pub type ReadlinkRes = Res4<Linktext4>;
pub type RemoveRes = Res4<ChangeInfo4>;
pub type LinkRes = Res4<ChangeInfo4>;

xdr_struct!(
    /// `RENAME4args` (source directory is the saved handle, target the current one).
    RenameArgs {
        oldname: Component4,
        newname: Component4,
    }
);
xdr_struct!(
    /// `RENAME4resok`.
    RenameResOk {
        source_cinfo: ChangeInfo4,
        target_cinfo: ChangeInfo4,
    }
);
pub type RenameRes = Res4<RenameResOk>;

/// `rpc_gss_svc_t`.
pub const RPC_GSS_SVC_NONE: u32 = 1;
pub const RPC_GSS_SVC_INTEGRITY: u32 = 2;
pub const RPC_GSS_SVC_PRIVACY: u32 = 3;
xdr_struct!(
    /// `rpcsec_gss_info`.
    RpcsecGssInfo {
        oid: SecOid4,
        qop: u32,
        service: u32,
    }
);
xdr_union!(
    /// `secinfo4` (`switch (uint32_t flavor)`): RPCSEC_GSS (6) carries its mechanism; any other
    /// flavor (AUTH_NONE, AUTH_SYS) is just the number.
    Secinfo4("secinfo4") default => Flavor {
        6u32 => Gss(RpcsecGssInfo),
    }
);
xdr_array!(
    /// `SECINFO4resok`: the flavors in the server's order of preference.
    SecinfoList(Secinfo4, "SECINFO4resok", MAX_ARRAY)
);
pub type SecinfoRes = Res4<SecinfoList>;

xdr_struct!(
    /// `SETATTR4args`.
    SetattrArgs {
        stateid: Stateid4,
        obj_attributes: Fattr4,
    }
);
xdr_struct!(
    /// `SETATTR4res`: a status and, whatever it is, the attributes that were set.
    SetattrRes {
        status: Nfsstat4,
        attrsset: Bitmap4,
    }
);
impl OpStatus for SetattrRes {
    fn status(&self) -> Nfsstat4 {
        self.status
    }
}

xdr_struct!(
    /// `nfs_client_id4` (4.0).
    NfsClientId4 {
        verifier: Verifier4,
        id: Opaque4,
    }
);
xdr_struct!(
    /// `cb_client4` (4.0).
    CbClient4 {
        cb_program: u32,
        cb_location: Netaddr4,
    }
);
xdr_struct!(
    /// `SETCLIENTID4args` (4.0 only).
    SetclientidArgs {
        client: NfsClientId4,
        callback: CbClient4,
        callback_ident: u32,
    }
);
xdr_struct!(
    /// `SETCLIENTID4resok`.
    SetclientidResOk {
        clientid: ClientId4,
        setclientid_confirm: Verifier4,
    }
);
nfs4_res!(
    /// `SETCLIENTID4res`.
    SetclientidRes { Ok(SetclientidResOk), CLID_INUSE => ClidInuse(Netaddr4) }
);
xdr_struct!(
    /// `SETCLIENTID_CONFIRM4args` (4.0 only).
    SetclientidConfirmArgs {
        clientid: ClientId4,
        setclientid_confirm: Verifier4,
    }
);

/// `WRITE4args`. `data` is a zero-copy [`Payload`] of the record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WriteArgs {
    pub stateid: Stateid4,
    pub offset: u64,
    pub stable: StableHow4,
    pub data: Payload,
}
impl Pack for WriteArgs {
    fn pack(&self, w: &mut Writer) {
        self.stateid.pack(w);
        w.put_u64(self.offset);
        self.stable.pack(w);
        w.put_payload(&self.data);
    }
}
impl Unpack for WriteArgs {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            stateid: Stateid4::unpack(r)?,
            offset: r.get_u64()?,
            stable: StableHow4::unpack(r)?,
            data: r.get_payload("WRITE data", MAX_DATA_WIRE)?,
        })
    }
}
#[cfg(test)]
impl super::arb::Arb for WriteArgs {
    fn arb(g: &mut super::arb::Gen) -> Self {
        use super::arb::Arb;
        Self {
            stateid: Arb::arb(g),
            offset: Arb::arb(g),
            stable: Arb::arb(g),
            data: Arb::arb(g),
        }
    }
}
xdr_struct!(
    /// `WRITE4resok`.
    WriteResOk {
        count: u32,
        committed: StableHow4,
        writeverf: Verifier4,
    }
);
pub type WriteRes = Res4<WriteResOk>;

// ---------------------------------------------------------------------------------------------
// 4.1 operations (RFC 8881 §18.33 - §18.51)
// ---------------------------------------------------------------------------------------------

xdr_struct!(
    /// `gss_cb_handles4`.
    GssCbHandles4 {
        service: u32,
        handle_from_server: GssHandle4,
        handle_from_client: GssHandle4,
    }
);
xdr_union!(
    /// `callback_sec_parms4` (`switch (uint32_t cb_secflavor)`): how the server authenticates
    /// its callbacks.
    CallbackSecParms4("callback_sec_parms4") {
        0u32 => AuthNone,
        1u32 => AuthSys(AuthSys),
        6u32 => Gss(GssCbHandles4),
    }
);
xdr_array!(
    /// `callback_sec_parms4<>`.
    CallbackSecParmsList(CallbackSecParms4, "callback_sec_parms4<>", MAX_ARRAY)
);
xdr_struct!(
    /// `BACKCHANNEL_CTL4args`.
    BackchannelCtlArgs {
        cb_program: u32,
        sec_parms: CallbackSecParmsList,
    }
);

/// `channel_dir_from_client4` / `channel_dir_from_server4`.
pub const CDFC4_FORE: u32 = 0x1;
pub const CDFC4_BACK: u32 = 0x2;
pub const CDFC4_FORE_OR_BOTH: u32 = 0x3;
pub const CDFC4_BACK_OR_BOTH: u32 = 0x7;
pub const CDFS4_FORE: u32 = 0x1;
pub const CDFS4_BACK: u32 = 0x2;
pub const CDFS4_BOTH: u32 = 0x3;
xdr_struct!(
    /// `BIND_CONN_TO_SESSION4args`.
    BindConnToSessionArgs {
        sessid: SessionId4,
        dir: u32,
        use_conn_in_rdma_mode: bool,
    }
);
xdr_struct!(
    /// `BIND_CONN_TO_SESSION4resok`.
    BindConnToSessionResOk {
        sessid: SessionId4,
        dir: u32,
        use_conn_in_rdma_mode: bool,
    }
);
pub type BindConnToSessionRes = Res4<BindConnToSessionResOk>;

/// EXCHANGE_ID flags (RFC 8881 §18.35.3).
pub const EXCHGID4_FLAG_SUPP_MOVED_REFER: u32 = 0x0000_0001;
pub const EXCHGID4_FLAG_SUPP_MOVED_MIGR: u32 = 0x0000_0002;
pub const EXCHGID4_FLAG_SUPP_FENCE_OPS: u32 = 0x0000_0004;
pub const EXCHGID4_FLAG_BIND_PRINC_STATEID: u32 = 0x0000_0100;
pub const EXCHGID4_FLAG_USE_NON_PNFS: u32 = 0x0001_0000;
pub const EXCHGID4_FLAG_USE_PNFS_MDS: u32 = 0x0002_0000;
pub const EXCHGID4_FLAG_USE_PNFS_DS: u32 = 0x0004_0000;
pub const EXCHGID4_FLAG_MASK_PNFS: u32 = 0x0007_0000;
pub const EXCHGID4_FLAG_UPD_CONFIRMED_REC_A: u32 = 0x4000_0000;
pub const EXCHGID4_FLAG_CONFIRMED_R: u32 = 0x8000_0000;

xdr_struct!(
    /// `client_owner4`.
    ClientOwner4 {
        verifier: Verifier4,
        ownerid: Opaque4,
    }
);
xdr_struct!(
    /// `server_owner4`.
    ServerOwner4 {
        minor_id: u64,
        major_id: Opaque4,
    }
);
xdr_struct!(
    /// `state_protect_ops4`.
    StateProtectOps4 {
        must_enforce: Bitmap4,
        must_allow: Bitmap4,
    }
);
xdr_array!(
    /// `sec_oid4<>`.
    SecOidList(SecOid4, "sec_oid4<>", MAX_ARRAY)
);
xdr_array!(
    /// `gsshandle4_t<>`.
    GssHandleList(GssHandle4, "gsshandle4_t<>", MAX_ARRAY)
);
xdr_struct!(
    /// `ssv_sp_parms4`.
    SsvSpParms4 {
        ops: StateProtectOps4,
        hash_algs: SecOidList,
        encr_algs: SecOidList,
        window: u32,
        num_gss_handles: u32,
    }
);
xdr_union!(
    /// `state_protect4_a` (`switch (state_protect_how4 spa_how)`).
    #[derive(Default)]
    StateProtect4A("state_protect_how4") {
        #[default]
        0u32 => None,
        1u32 => MachCred(StateProtectOps4),
        2u32 => Ssv(SsvSpParms4),
    }
);
xdr_struct!(
    /// `ssv_prot_info4`.
    SsvProtInfo4 {
        ops: StateProtectOps4,
        hash_alg: u32,
        encr_alg: u32,
        ssv_len: u32,
        window: u32,
        handles: GssHandleList,
    }
);
xdr_union!(
    /// `state_protect4_r`.
    #[derive(Default)]
    StateProtect4R("state_protect_how4") {
        #[default]
        0u32 => None,
        1u32 => MachCred(StateProtectOps4),
        2u32 => Ssv(SsvProtInfo4),
    }
);
xdr_array!(
    /// `nfs_impl_id4<1>`.
    ImplIdList(NfsImplId4, "nfs_impl_id4<1>", 1)
);
xdr_struct!(
    /// `EXCHANGE_ID4args`.
    ExchangeIdArgs {
        clientowner: ClientOwner4,
        flags: u32,
        state_protect: StateProtect4A,
        client_impl_id: ImplIdList,
    }
);
xdr_struct!(
    /// `EXCHANGE_ID4resok`.
    ExchangeIdResOk {
        clientid: ClientId4,
        sequenceid: u32,
        flags: u32,
        state_protect: StateProtect4R,
        server_owner: ServerOwner4,
        server_scope: Opaque4,
        server_impl_id: ImplIdList,
    }
);
pub type ExchangeIdRes = Res4<ExchangeIdResOk>;

/// CREATE_SESSION flags.
pub const CREATE_SESSION4_FLAG_PERSIST: u32 = 0x1;
pub const CREATE_SESSION4_FLAG_CONN_BACK_CHAN: u32 = 0x2;
pub const CREATE_SESSION4_FLAG_CONN_RDMA: u32 = 0x4;
xdr_array!(
    /// `ca_rdma_ird<1>`.
    RdmaIrd(u32, "ca_rdma_ird", 1)
);
xdr_struct!(
    /// `channel_attrs4`: sizes in bytes, counts of ops and slots.
    ChannelAttrs4 {
        headerpadsize: u32,
        maxrequestsize: u32,
        maxresponsesize: u32,
        maxresponsesize_cached: u32,
        maxoperations: u32,
        maxrequests: u32,
        rdma_ird: RdmaIrd,
    }
);
xdr_struct!(
    /// `CREATE_SESSION4args`.
    CreateSessionArgs {
        clientid: ClientId4,
        sequence: u32,
        flags: u32,
        fore_chan_attrs: ChannelAttrs4,
        back_chan_attrs: ChannelAttrs4,
        cb_program: u32,
        sec_parms: CallbackSecParmsList,
    }
);
xdr_struct!(
    /// `CREATE_SESSION4resok`.
    CreateSessionResOk {
        sessionid: SessionId4,
        sequence: u32,
        flags: u32,
        fore_chan_attrs: ChannelAttrs4,
        back_chan_attrs: ChannelAttrs4,
    }
);
pub type CreateSessionRes = Res4<CreateSessionResOk>;

xdr_struct!(
    /// `GET_DIR_DELEGATION4args`.
    GetDirDelegationArgs {
        signal_deleg_avail: bool,
        notification_types: Bitmap4,
        child_attr_delay: Nfstime4,
        dir_attr_delay: Nfstime4,
        child_attributes: Bitmap4,
        dir_attributes: Bitmap4,
    }
);
xdr_struct!(
    /// `GET_DIR_DELEGATION4resok`.
    GetDirDelegationResOk {
        cookieverf: Verifier4,
        stateid: Stateid4,
        notification: Bitmap4,
        child_attributes: Bitmap4,
        dir_attributes: Bitmap4,
    }
);
xdr_union!(
    /// `GET_DIR_DELEGATION4res_non_fatal` (`switch (gddrnf4_status)`): GDD4_OK or GDD4_UNAVAIL
    /// with whether the server will signal availability.
    GetDirDelegationNonFatal("gddrnf4_status") {
        0u32 => Ok(GetDirDelegationResOk),
        1u32 => Unavail(bool),
    }
);
pub type GetDirDelegationRes = Res4<GetDirDelegationNonFatal>;

xdr_struct!(
    /// `GETDEVICEINFO4args`.
    GetdeviceinfoArgs {
        device_id: DeviceId4,
        layout_type: LayoutType4,
        maxcount: u32,
        notify_types: Bitmap4,
    }
);
xdr_struct!(
    /// `device_addr4`.
    DeviceAddr4 {
        layout_type: LayoutType4,
        addr_body: LayoutBody,
    }
);
xdr_struct!(
    /// `GETDEVICEINFO4resok`.
    GetdeviceinfoResOk {
        device_addr: DeviceAddr4,
        notification: Bitmap4,
    }
);
nfs4_res!(
    /// `GETDEVICEINFO4res`: on NFS4ERR_TOOSMALL, the `maxcount` that would do.
    GetdeviceinfoRes { Ok(GetdeviceinfoResOk), TOOSMALL => TooSmall(u32) }
);

xdr_struct!(
    /// `GETDEVICELIST4args`.
    GetdevicelistArgs {
        layout_type: LayoutType4,
        maxdevices: u32,
        cookie: u64,
        cookieverf: Verifier4,
    }
);
xdr_array!(
    /// `deviceid4<>`.
    DeviceIdList(DeviceId4, "deviceid4<>", MAX_ARRAY)
);
xdr_struct!(
    /// `GETDEVICELIST4resok`.
    GetdevicelistResOk {
        cookie: u64,
        cookieverf: Verifier4,
        deviceid_list: DeviceIdList,
        eof: bool,
    }
);
pub type GetdevicelistRes = Res4<GetdevicelistResOk>;

xdr_struct!(
    /// `layoutupdate4`.
    LayoutUpdate4 {
        layout_type: LayoutType4,
        body: LayoutBody,
    }
);
xdr_struct!(
    /// `LAYOUTCOMMIT4args`. `newoffset4` and `newtime4` are `switch (bool)` unions, the same wire
    /// form as an XDR optional.
    LayoutcommitArgs {
        offset: u64,
        length: u64,
        reclaim: bool,
        stateid: Stateid4,
        last_write_offset: Option<u64>,
        time_modify: Option<Nfstime4>,
        layoutupdate: LayoutUpdate4,
    }
);
/// `LAYOUTCOMMIT4resok`: `newsize4`, the new file size if it changed.
pub type LayoutcommitRes = Res4<Option<u64>>;

xdr_struct!(
    /// `LAYOUTGET4args`.
    LayoutgetArgs {
        signal_layout_avail: bool,
        layout_type: LayoutType4,
        iomode: LayoutIomode4,
        offset: u64,
        length: u64,
        minlength: u64,
        stateid: Stateid4,
        maxcount: u32,
    }
);
xdr_struct!(
    /// `layout_content4`.
    LayoutContent4 {
        layout_type: LayoutType4,
        body: LayoutBody,
    }
);
xdr_struct!(
    /// `layout4`.
    Layout4 {
        offset: u64,
        length: u64,
        iomode: LayoutIomode4,
        content: LayoutContent4,
    }
);
xdr_array!(
    /// `layout4<>`.
    LayoutList(Layout4, "layout4<>", MAX_ARRAY)
);
xdr_struct!(
    /// `LAYOUTGET4resok`.
    LayoutgetResOk {
        return_on_close: bool,
        stateid: Stateid4,
        layouts: LayoutList,
    }
);
nfs4_res!(
    /// `LAYOUTGET4res`: on NFS4ERR_LAYOUTTRYLATER, whether the server will signal availability.
    LayoutgetRes { Ok(LayoutgetResOk), LAYOUTTRYLATER => TryLater(bool) }
);

xdr_struct!(
    /// `layoutreturn_file4`.
    LayoutreturnFile4 {
        offset: u64,
        length: u64,
        stateid: Stateid4,
        body: LayoutBody,
    }
);
xdr_union!(
    /// `layoutreturn4` (`switch (layoutreturn_type4)`): FILE carries the range; FSID (2) and ALL
    /// (3) decode to `Other`.
    Layoutreturn4("layoutreturn_type4") default => Other {
        1u32 => File(LayoutreturnFile4),
    }
);
impl Default for Layoutreturn4 {
    fn default() -> Self {
        Layoutreturn4::Other(3)
    }
}
xdr_struct!(
    /// `LAYOUTRETURN4args`.
    LayoutreturnArgs {
        reclaim: bool,
        layout_type: LayoutType4,
        iomode: LayoutIomode4,
        layoutreturn: Layoutreturn4,
    }
);
/// `LAYOUTRETURN4res`: `layoutreturn_stateid`, a `switch (bool)` union like an optional.
pub type LayoutreturnRes = Res4<Option<Stateid4>>;

/// `secinfo_style4` (SECINFO_NO_NAME's argument).
pub const SECINFO_STYLE4_CURRENT_FH: u32 = 0;
pub const SECINFO_STYLE4_PARENT: u32 = 1;

/// SEQUENCE status flags (RFC 8881 §18.46.3).
pub const SEQ4_STATUS_CB_PATH_DOWN: u32 = 0x0000_0001;
pub const SEQ4_STATUS_CB_GSS_CONTEXTS_EXPIRING: u32 = 0x0000_0002;
pub const SEQ4_STATUS_CB_GSS_CONTEXTS_EXPIRED: u32 = 0x0000_0004;
pub const SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED: u32 = 0x0000_0008;
pub const SEQ4_STATUS_EXPIRED_SOME_STATE_REVOKED: u32 = 0x0000_0010;
pub const SEQ4_STATUS_ADMIN_STATE_REVOKED: u32 = 0x0000_0020;
pub const SEQ4_STATUS_RECALLABLE_STATE_REVOKED: u32 = 0x0000_0040;
pub const SEQ4_STATUS_LEASE_MOVED: u32 = 0x0000_0080;
pub const SEQ4_STATUS_RESTART_RECLAIM_NEEDED: u32 = 0x0000_0100;
pub const SEQ4_STATUS_CB_PATH_DOWN_SESSION: u32 = 0x0000_0200;
pub const SEQ4_STATUS_BACKCHANNEL_FAULT: u32 = 0x0000_0400;
pub const SEQ4_STATUS_DEVID_CHANGED: u32 = 0x0000_0800;
pub const SEQ4_STATUS_DEVID_DELETED: u32 = 0x0000_1000;

xdr_struct!(
    /// `SEQUENCE4args`.
    SequenceArgs {
        sessionid: SessionId4,
        sequenceid: u32,
        slotid: u32,
        highest_slotid: u32,
        cachethis: bool,
    }
);
xdr_struct!(
    /// `SEQUENCE4resok`.
    SequenceResOk {
        sessionid: SessionId4,
        sequenceid: u32,
        slotid: u32,
        highest_slotid: u32,
        target_highest_slotid: u32,
        status_flags: u32,
    }
);
pub type SequenceRes = Res4<SequenceResOk>;

xdr_struct!(
    /// `SET_SSV4args`.
    SetSsvArgs { ssv: Opaque4, digest: Opaque4 }
);
/// `SET_SSV4resok`: the digest.
pub type SetSsvRes = Res4<Opaque4>;

xdr_array!(
    /// `stateid4<>`.
    StateidList(Stateid4, "stateid4<>", MAX_ARRAY)
);
xdr_array!(
    /// `nfsstat4<>`.
    StatusList(Nfsstat4, "nfsstat4<>", MAX_ARRAY)
);
/// `TEST_STATEID4resok`: one status per stateid.
pub type TestStateidRes = Res4<StatusList>;

xdr_union!(
    /// `deleg_claim4` (`switch (open_claim_type4 dc_claim)`).
    #[derive(Default)]
    DelegClaim4("deleg_claim4") {
        #[default]
        4u32 => Fh,
        6u32 => DelegPrevFh,
        1u32 => Previous(u32),
    }
);
xdr_struct!(
    /// `WANT_DELEGATION4args`.
    WantDelegationArgs {
        want: u32,
        claim: DelegClaim4,
    }
);
pub type WantDelegationRes = Res4<OpenDelegation4>;

// ---------------------------------------------------------------------------------------------
// 4.2 operations (RFC 7862 §15) and extended attributes (RFC 8276 §8.4)
// ---------------------------------------------------------------------------------------------

xdr_struct!(
    /// `ALLOCATE4args` and `DEALLOCATE4args`.
    AllocateArgs {
        stateid: Stateid4,
        offset: u64,
        length: u64,
    }
);

xdr_union!(
    /// `netloc4` (`switch (netloc_type4 nl_type)`).
    Netloc4("netloc_type4") {
        1u32 => Name(Utf8Str),
        2u32 => Url(Utf8Str),
        3u32 => Netaddr(Netaddr4),
    }
);
xdr_array!(
    /// `netloc4<>`.
    NetlocList(Netloc4, "netloc4<>", MAX_ARRAY)
);
xdr_struct!(
    /// `COPY4args`.
    CopyArgs {
        src_stateid: Stateid4,
        dst_stateid: Stateid4,
        src_offset: u64,
        dst_offset: u64,
        count: u64,
        consecutive: bool,
        synchronous: bool,
        source_server: NetlocList,
    }
);
xdr_array!(
    /// `stateid4<1>`.
    StateidOpt(Stateid4, "stateid4<1>", 1)
);
xdr_struct!(
    /// `write_response4`.
    WriteResponse4 {
        callback_id: StateidOpt,
        count: u64,
        committed: StableHow4,
        writeverf: Verifier4,
    }
);
xdr_struct!(
    /// `copy_requirements4`.
    CopyRequirements4 {
        consecutive: bool,
        synchronous: bool,
    }
);
xdr_struct!(
    /// `COPY4resok`.
    CopyResOk {
        response: WriteResponse4,
        requirements: CopyRequirements4,
    }
);
nfs4_res!(
    /// `COPY4res`: on NFS4ERR_OFFLOAD_NO_REQS, the requirements the server could meet.
    CopyRes { Ok(CopyResOk), OFFLOAD_NO_REQS => NoReqs(CopyRequirements4) }
);

xdr_struct!(
    /// `COPY_NOTIFY4args`.
    CopyNotifyArgs {
        src_stateid: Stateid4,
        destination_server: Netloc4,
    }
);
impl Default for Netloc4 {
    fn default() -> Self {
        Netloc4::Name(Utf8Str::default())
    }
}
xdr_struct!(
    /// `COPY_NOTIFY4resok`.
    CopyNotifyResOk {
        lease_time: Nfstime4,
        stateid: Stateid4,
        source_server: NetlocList,
    }
);
pub type CopyNotifyRes = Res4<CopyNotifyResOk>;

xdr_struct!(
    /// `IO_ADVISE4args`.
    IoAdviseArgs {
        stateid: Stateid4,
        offset: u64,
        count: u64,
        hints: Bitmap4,
    }
);
/// `IO_ADVISE4resok`: the hints the server will act on.
pub type IoAdviseRes = Res4<Bitmap4>;

xdr_struct!(
    /// `device_error4`.
    DeviceError4 {
        deviceid: DeviceId4,
        status: Nfsstat4,
        opnum: Opnum4,
    }
);
xdr_array!(
    /// `device_error4<>`.
    DeviceErrorList(DeviceError4, "device_error4<>", MAX_ARRAY)
);
xdr_struct!(
    /// `LAYOUTERROR4args`.
    LayouterrorArgs {
        offset: u64,
        length: u64,
        stateid: Stateid4,
        errors: DeviceErrorList,
    }
);
xdr_struct!(
    /// `io_info4`.
    IoInfo4 { count: u64, bytes: u64 }
);
xdr_struct!(
    /// `LAYOUTSTATS4args`.
    LayoutstatsArgs {
        offset: u64,
        length: u64,
        stateid: Stateid4,
        read: IoInfo4,
        write: IoInfo4,
        deviceid: DeviceId4,
        layoutupdate: LayoutUpdate4,
    }
);

xdr_array!(
    /// `nfsstat4<1>`.
    StatusOpt(Nfsstat4, "nfsstat4<1>", 1)
);
xdr_struct!(
    /// `OFFLOAD_STATUS4resok`.
    OffloadStatusResOk {
        count: u64,
        complete: StatusOpt,
    }
);
pub type OffloadStatusRes = Res4<OffloadStatusResOk>;

/// `data_content4`.
pub const NFS4_CONTENT_DATA: u32 = 0;
pub const NFS4_CONTENT_HOLE: u32 = 1;

xdr_struct!(
    /// `READ_PLUS4args`.
    ReadPlusArgs {
        stateid: Stateid4,
        offset: u64,
        count: u32,
    }
);
/// `data4`: bytes at an offset (zero-copy, like READ data).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Data4 {
    pub offset: u64,
    pub data: Payload,
}
impl Pack for Data4 {
    fn pack(&self, w: &mut Writer) {
        w.put_u64(self.offset);
        w.put_payload(&self.data);
    }
}
impl Unpack for Data4 {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            offset: r.get_u64()?,
            data: r.get_payload("READ_PLUS data", MAX_DATA_WIRE)?,
        })
    }
}
#[cfg(test)]
impl super::arb::Arb for Data4 {
    fn arb(g: &mut super::arb::Gen) -> Self {
        use super::arb::Arb;
        Self {
            offset: Arb::arb(g),
            data: Arb::arb(g),
        }
    }
}
xdr_struct!(
    /// `data_info4`: a hole.
    DataInfo4 { offset: u64, length: u64 }
);
xdr_union!(
    /// `read_plus_content` (`switch (data_content4)`).
    ReadPlusContent("data_content4") default => Other {
        0u32 => Data(Data4),
        1u32 => Hole(DataInfo4),
    }
);
xdr_array!(
    /// `read_plus_content<>`.
    ReadPlusContents(ReadPlusContent, "read_plus_content<>", MAX_ARRAY)
);
xdr_struct!(
    /// `read_plus_res4`.
    ReadPlusResOk {
        eof: bool,
        contents: ReadPlusContents,
    }
);
pub type ReadPlusRes = Res4<ReadPlusResOk>;

xdr_struct!(
    /// `SEEK4args`. `what` is a `data_content4`.
    SeekArgs {
        stateid: Stateid4,
        offset: u64,
        what: u32,
    }
);
xdr_struct!(
    /// `seek_res4`.
    SeekResOk { eof: bool, offset: u64 }
);
pub type SeekRes = Res4<SeekResOk>;

xdr_bytes!(
    /// The pattern of WRITE_SAME (`adb_pattern`): one block, bounded like an xattr value.
    Pattern4("adb_pattern", MAX_XATTR_VALUE_WIRE)
);
xdr_struct!(
    /// `app_data_block4`.
    AppDataBlock4 {
        offset: u64,
        block_size: u64,
        block_count: u64,
        reloff_blocknum: u64,
        block_num: u32,
        reloff_pattern: u64,
        pattern: Pattern4,
    }
);
xdr_struct!(
    /// `WRITE_SAME4args`.
    WriteSameArgs {
        stateid: Stateid4,
        stable: StableHow4,
        adb: AppDataBlock4,
    }
);
pub type WriteSameRes = Res4<WriteResponse4>;

xdr_struct!(
    /// `CLONE4args`.
    CloneArgs {
        src_stateid: Stateid4,
        dst_stateid: Stateid4,
        src_offset: u64,
        dst_offset: u64,
        count: u64,
    }
);

xdr_bytes!(
    /// `xattrvalue4`.
    XattrValue4("xattrvalue4", MAX_XATTR_VALUE_WIRE)
);
/// `setxattr_option4`.
pub const SETXATTR4_EITHER: u32 = 0;
pub const SETXATTR4_CREATE: u32 = 1;
pub const SETXATTR4_REPLACE: u32 = 2;
xdr_struct!(
    /// `SETXATTR4args`. Keys are `component4`s.
    SetxattrArgs {
        option: u32,
        key: Component4,
        value: XattrValue4,
    }
);
xdr_struct!(
    /// `LISTXATTRS4args`.
    ListxattrsArgs { cookie: u64, maxcount: u32 }
);
xdr_array!(
    /// `xattrkey4<>`.
    XattrKeyList(Component4, "xattrkey4<>", MAX_DIR_ENTRIES)
);
xdr_struct!(
    /// `LISTXATTRS4resok`.
    ListxattrsResOk {
        cookie: u64,
        names: XattrKeyList,
        eof: bool,
    }
);

// ---------------------------------------------------------------------------------------------
// The op table: argument and result enums, decoding by op number
// ---------------------------------------------------------------------------------------------

macro_rules! ops {
    ($($variant:ident = $op:ident: $args:ty => $res:ty),* $(,)?) => {
        /// `nfs_argop4`: one op of a COMPOUND with its arguments.
        ///
        /// A decoded list may end with [`NfsArgop4::Illegal`] (an op number nobody defined) or
        /// [`NfsArgop4::BadXdr`] (a known op whose arguments did not decode); see
        /// [`super::compound`].
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum NfsArgop4 {
            $($variant($args),)*
            /// An undefined op number (the server answers OP_ILLEGAL / NFS4ERR_OP_ILLEGAL).
            Illegal(u32),
            /// A known op whose arguments failed to decode (the server answers NFS4ERR_BADXDR
            /// for it). Encodes as the op number alone.
            BadXdr(Opnum4, DecodeError),
        }

        /// `nfs_resop4`: one op's result.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum NfsResop4 {
            $($variant($res),)*
            /// `ILLEGAL4res`, sent with op number OP_ILLEGAL.
            Illegal(Nfsstat4),
        }

        impl NfsArgop4 {
            /// The op number these arguments encode with.
            pub fn opnum(&self) -> Opnum4 {
                match self {
                    $(NfsArgop4::$variant(_) => Opnum4::$op,)*
                    NfsArgop4::Illegal(n) => Opnum4(*n),
                    NfsArgop4::BadXdr(op, _) => *op,
                }
            }

            /// Decodes the arguments of op `op`. An undefined op number is not an error: it is
            /// [`NfsArgop4::Illegal`] and nothing more is read.
            pub fn decode(op: Opnum4, r: &mut Reader<'_>) -> Result<NfsArgop4> {
                Ok(match op {
                    $(Opnum4::$op => NfsArgop4::$variant(<$args as Unpack>::unpack(r)?),)*
                    Opnum4(n) => NfsArgop4::Illegal(n),
                })
            }
        }

        impl Pack for NfsArgop4 {
            fn pack(&self, w: &mut Writer) {
                self.opnum().pack(w);
                match self {
                    $(NfsArgop4::$variant(a) => a.pack(w),)*
                    NfsArgop4::Illegal(_) | NfsArgop4::BadXdr(..) => {}
                }
            }
        }

        impl Unpack for NfsArgop4 {
            /// Op number and arguments; a failure of the arguments is an error here (the
            /// COMPOUND decoder turns it into [`NfsArgop4::BadXdr`]).
            fn unpack(r: &mut Reader<'_>) -> Result<Self> {
                let op = Opnum4::unpack(r)?;
                NfsArgop4::decode(op, r)
            }
        }

        impl NfsResop4 {
            /// The op number this result encodes with.
            pub fn opnum(&self) -> Opnum4 {
                match self {
                    $(NfsResop4::$variant(_) => Opnum4::$op,)*
                    NfsResop4::Illegal(_) => Opnum4::ILLEGAL,
                }
            }

            /// The result's status.
            pub fn status(&self) -> Nfsstat4 {
                match self {
                    $(NfsResop4::$variant(r) => OpStatus::status(r),)*
                    NfsResop4::Illegal(s) => *s,
                }
            }

            /// A result for `op` that is only `status` (an error), for ops the server refuses
            /// before running them (NOTSUPP, BADXDR, OP_NOT_IN_SESSION, ...). `None` for the few
            /// results that cannot carry a bare error (SETATTR carries a bitmap too: use
            /// [`SetattrRes`] with an empty one) — never for a defined op; an undefined op gets
            /// [`NfsResop4::Illegal`].
            pub fn error(op: Opnum4, status: Nfsstat4) -> NfsResop4 {
                debug_assert_ne!(status, Nfsstat4::OK);
                match op {
                    $(Opnum4::$op => NfsResop4::$variant(<$res as ErrorOnly>::error_only(status)),)*
                    _ => NfsResop4::Illegal(status),
                }
            }
        }

        impl Pack for NfsResop4 {
            fn pack(&self, w: &mut Writer) {
                self.opnum().pack(w);
                match self {
                    $(NfsResop4::$variant(r) => r.pack(w),)*
                    NfsResop4::Illegal(s) => s.pack(w),
                }
            }
        }

        impl Unpack for NfsResop4 {
            /// An op number the client never sent cannot be skipped: the decode fails.
            fn unpack(r: &mut Reader<'_>) -> Result<Self> {
                let op = Opnum4::unpack(r)?;
                Ok(match op {
                    $(Opnum4::$op => NfsResop4::$variant(<$res as Unpack>::unpack(r)?),)*
                    Opnum4::ILLEGAL => NfsResop4::Illegal(Nfsstat4::unpack(r)?),
                    Opnum4(n) => return Err(DecodeError::BadDiscriminant { what: "nfs_opnum4", value: n }),
                })
            }
        }

        #[cfg(test)]
        impl super::arb::Arb for NfsArgop4 {
            fn arb(g: &mut super::arb::Gen) -> Self {
                let choices: &[fn(&mut super::arb::Gen) -> Self] = &[
                    $(|g| NfsArgop4::$variant(<$args as super::arb::Arb>::arb(g)),)*
                ];
                let i = g.below(choices.len());
                choices[i](g)
            }
        }

        #[cfg(test)]
        impl super::arb::Arb for NfsResop4 {
            fn arb(g: &mut super::arb::Gen) -> Self {
                let choices: &[fn(&mut super::arb::Gen) -> Self] = &[
                    $(|g| NfsResop4::$variant(<$res as super::arb::Arb>::arb(g)),)*
                    |g| NfsResop4::Illegal(arb_error(g, &[])),
                ];
                let i = g.below(choices.len());
                choices[i](g)
            }
        }

        /// Every op with arguments and results, in op-number order.
        pub const OPS: &[Opnum4] = &[$(Opnum4::$op),*];
    };
}

/// A result type that can be built from a bare error status.
pub trait ErrorOnly {
    fn error_only(status: Nfsstat4) -> Self;
}
impl ErrorOnly for Nfsstat4 {
    fn error_only(status: Nfsstat4) -> Self {
        status
    }
}
impl<T> ErrorOnly for Res4<T> {
    fn error_only(status: Nfsstat4) -> Self {
        Res4::Err(status)
    }
}
impl ErrorOnly for SetattrRes {
    fn error_only(status: Nfsstat4) -> Self {
        SetattrRes {
            status,
            attrsset: Bitmap4::new(),
        }
    }
}
macro_rules! error_only_via_err {
    ($($t:ty),*) => {
        $(impl ErrorOnly for $t {
            fn error_only(status: Nfsstat4) -> Self {
                Self::Err(status)
            }
        })*
    };
}
error_only_via_err!(
    LockRes,
    LocktRes,
    SetclientidRes,
    GetdeviceinfoRes,
    LayoutgetRes,
    CopyRes
);

ops! {
    Access = ACCESS: AccessArgs => AccessRes,
    Close = CLOSE: CloseArgs => CloseRes,
    Commit = COMMIT: CommitArgs => CommitRes,
    Create = CREATE: CreateArgs => CreateRes,
    Delegpurge = DELEGPURGE: ClientId4 => Nfsstat4,
    Delegreturn = DELEGRETURN: Stateid4 => Nfsstat4,
    Getattr = GETATTR: Bitmap4 => Res4<Fattr4>,
    Getfh = GETFH: () => Res4<NfsFh4>,
    Link = LINK: Component4 => LinkRes,
    Lock = LOCK: LockArgs => LockRes,
    Lockt = LOCKT: LocktArgs => LocktRes,
    Locku = LOCKU: LockuArgs => LockuRes,
    Lookup = LOOKUP: Component4 => Nfsstat4,
    Lookupp = LOOKUPP: () => Nfsstat4,
    Nverify = NVERIFY: Fattr4 => Nfsstat4,
    Open = OPEN: OpenArgs => OpenRes,
    Openattr = OPENATTR: bool => Nfsstat4,
    OpenConfirm = OPEN_CONFIRM: OpenConfirmArgs => Res4<Stateid4>,
    OpenDowngrade = OPEN_DOWNGRADE: OpenDowngradeArgs => Res4<Stateid4>,
    Putfh = PUTFH: NfsFh4 => Nfsstat4,
    Putpubfh = PUTPUBFH: () => Nfsstat4,
    Putrootfh = PUTROOTFH: () => Nfsstat4,
    Read = READ: ReadArgs => ReadRes,
    Readdir = READDIR: ReaddirArgs => ReaddirRes,
    Readlink = READLINK: () => ReadlinkRes,
    Remove = REMOVE: Component4 => RemoveRes,
    Rename = RENAME: RenameArgs => RenameRes,
    Renew = RENEW: ClientId4 => Nfsstat4,
    Restorefh = RESTOREFH: () => Nfsstat4,
    Savefh = SAVEFH: () => Nfsstat4,
    Secinfo = SECINFO: Component4 => SecinfoRes,
    Setattr = SETATTR: SetattrArgs => SetattrRes,
    Setclientid = SETCLIENTID: SetclientidArgs => SetclientidRes,
    SetclientidConfirm = SETCLIENTID_CONFIRM: SetclientidConfirmArgs => Nfsstat4,
    Verify = VERIFY: Fattr4 => Nfsstat4,
    Write = WRITE: WriteArgs => WriteRes,
    ReleaseLockowner = RELEASE_LOCKOWNER: LockOwner4 => Nfsstat4,
    BackchannelCtl = BACKCHANNEL_CTL: BackchannelCtlArgs => Nfsstat4,
    BindConnToSession = BIND_CONN_TO_SESSION: BindConnToSessionArgs => BindConnToSessionRes,
    ExchangeId = EXCHANGE_ID: ExchangeIdArgs => ExchangeIdRes,
    CreateSession = CREATE_SESSION: CreateSessionArgs => CreateSessionRes,
    DestroySession = DESTROY_SESSION: SessionId4 => Nfsstat4,
    FreeStateid = FREE_STATEID: Stateid4 => Nfsstat4,
    GetDirDelegation = GET_DIR_DELEGATION: GetDirDelegationArgs => GetDirDelegationRes,
    Getdeviceinfo = GETDEVICEINFO: GetdeviceinfoArgs => GetdeviceinfoRes,
    Getdevicelist = GETDEVICELIST: GetdevicelistArgs => GetdevicelistRes,
    Layoutcommit = LAYOUTCOMMIT: LayoutcommitArgs => LayoutcommitRes,
    Layoutget = LAYOUTGET: LayoutgetArgs => LayoutgetRes,
    Layoutreturn = LAYOUTRETURN: LayoutreturnArgs => LayoutreturnRes,
    SecinfoNoName = SECINFO_NO_NAME: u32 => SecinfoRes,
    Sequence = SEQUENCE: SequenceArgs => SequenceRes,
    SetSsv = SET_SSV: SetSsvArgs => SetSsvRes,
    TestStateid = TEST_STATEID: StateidList => TestStateidRes,
    WantDelegation = WANT_DELEGATION: WantDelegationArgs => WantDelegationRes,
    DestroyClientid = DESTROY_CLIENTID: ClientId4 => Nfsstat4,
    ReclaimComplete = RECLAIM_COMPLETE: bool => Nfsstat4,
    Allocate = ALLOCATE: AllocateArgs => Nfsstat4,
    Copy = COPY: CopyArgs => CopyRes,
    CopyNotify = COPY_NOTIFY: CopyNotifyArgs => CopyNotifyRes,
    Deallocate = DEALLOCATE: AllocateArgs => Nfsstat4,
    IoAdvise = IO_ADVISE: IoAdviseArgs => IoAdviseRes,
    Layouterror = LAYOUTERROR: LayouterrorArgs => Nfsstat4,
    Layoutstats = LAYOUTSTATS: LayoutstatsArgs => Nfsstat4,
    OffloadCancel = OFFLOAD_CANCEL: Stateid4 => Nfsstat4,
    OffloadStatus = OFFLOAD_STATUS: Stateid4 => OffloadStatusRes,
    ReadPlus = READ_PLUS: ReadPlusArgs => ReadPlusRes,
    Seek = SEEK: SeekArgs => SeekRes,
    WriteSame = WRITE_SAME: WriteSameArgs => WriteSameRes,
    Clone = CLONE: CloneArgs => Nfsstat4,
    Getxattr = GETXATTR: Component4 => Res4<XattrValue4>,
    Setxattr = SETXATTR: SetxattrArgs => Res4<ChangeInfo4>,
    Listxattrs = LISTXATTRS: ListxattrsArgs => Res4<ListxattrsResOk>,
    Removexattr = REMOVEXATTR: Component4 => Res4<ChangeInfo4>,
}

// ---------------------------------------------------------------------------------------------
// Per-op facts
// ---------------------------------------------------------------------------------------------

/// What a server needs to know about an op before running it (the data half of knfsd's
/// `nfsd4_ops[]`; the server pairs it with handlers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpInfo {
    pub num: Opnum4,
    pub name: &'static str,
    pub flags: OpFlags,
    /// Largest encoded result in bytes, op number and status included, for everything but bulk
    /// data; for ops flagged [`OpFlags::REPLY_GROWS_WITH_ARGS`] add what the arguments ask for
    /// (READ/READ_PLUS `count`, READDIR/LISTXATTRS/GETDEVICEINFO/LAYOUTGET `maxcount`,
    /// GETDEVICELIST 16 bytes per device of `maxdevices`, GETATTR the attributes). Used to
    /// refuse a COMPOUND whose reply cannot fit `ca_maxresponsesize` before running it
    /// (NFS4ERR_REP_TOO_BIG, RFC 8881 §2.10.6.4).
    pub reply_bytes_max: u32,
}

/// Flags of [`OpInfo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpFlags(pub u16);

impl OpFlags {
    /// Changes the file system or the server's state (not idempotent): a retry must be answered
    /// from the slot's reply cache.
    pub const MODIFIES: Self = Self(1);
    /// May be the first op of a COMPOUND without SEQUENCE (RFC 8881 §2.6.3.1.1.1: EXCHANGE_ID,
    /// CREATE_SESSION, DESTROY_SESSION, DESTROY_CLIENTID, BIND_CONN_TO_SESSION); such a
    /// COMPOUND must then hold only that op (NFS4ERR_NOT_ONLY_OP).
    pub const SESSIONLESS: Self = Self(2);
    /// Must be the first op (SEQUENCE; elsewhere NFS4ERR_SEQUENCE_POS).
    pub const MUST_BE_FIRST: Self = Self(4);
    /// A 4.0-only op: NFS4ERR_NOTSUPP in 4.1 and later (RFC 8881 §18 table).
    pub const V40_ONLY: Self = Self(8);
    /// Defined from minor version 2 on (RFC 7862, RFC 8276): NFS4ERR_OP_ILLEGAL in 4.1.
    pub const V42: Self = Self(16);
    /// pNFS: a server without layouts answers NFS4ERR_NOTSUPP.
    pub const PNFS: Self = Self(32);
    /// Needs a current file handle (else NFS4ERR_NOFILEHANDLE).
    pub const NEEDS_FH: Self = Self(64);
    /// The reply grows with what the arguments ask for (see [`OpInfo::reply_bytes_max`]).
    pub const REPLY_GROWS_WITH_ARGS: Self = Self(128);

    pub const fn union(self, o: Self) -> Self {
        Self(self.0 | o.0)
    }
    pub fn contains(self, o: Self) -> bool {
        self.0 & o.0 == o.0
    }
}

/// Sizes used by the reply bounds below: op number + status (8), a stateid (16), a
/// `change_info4` (20), a verifier (8), a file handle with its length (132), a bitmap of
/// [`super::MAX_BITMAP_WORDS`] words with its count (36).
const HDR: u32 = 8;
const SID: u32 = 16;
const CINFO: u32 = 20;
const FH: u32 = 4 + super::FHSIZE as u32;
const BITMAP: u32 = 4 + 4 * super::MAX_BITMAP_WORDS as u32;
/// A bound for results that carry server-chosen opaques and lists (EXCHANGE_ID's owner, scope
/// and impl id; SECINFO's flavors; layouts; device lists): 4 KiB, the size of the reply cache
/// knfsd keeps per slot is about half that, and none of these is cached by a real client twice.
const VARIABLE: u32 = 4096;

const fn f(a: OpFlags, b: OpFlags) -> OpFlags {
    a.union(b)
}

const M: OpFlags = OpFlags::MODIFIES;
const FHF: OpFlags = OpFlags::NEEDS_FH;
const NONE: OpFlags = OpFlags(0);

macro_rules! info {
    ($op:ident, $flags:expr, $bytes:expr) => {
        OpInfo {
            num: Opnum4::$op,
            name: Opnum4::$op.name(),
            flags: $flags,
            reply_bytes_max: $bytes,
        }
    };
}

/// The facts of every op, in op-number order (OP_ILLEGAL last).
pub static OP_INFO: &[OpInfo] = &[
    info!(ACCESS, FHF, HDR + 8),
    info!(CLOSE, f(M, FHF), HDR + SID),
    info!(COMMIT, f(M, FHF), HDR + 8),
    info!(CREATE, f(M, FHF), HDR + CINFO + BITMAP),
    info!(DELEGPURGE, M, HDR),
    info!(DELEGRETURN, f(M, FHF), HDR),
    info!(
        GETATTR,
        f(FHF, OpFlags::REPLY_GROWS_WITH_ARGS),
        HDR + BITMAP + 4
    ),
    info!(GETFH, FHF, HDR + FH),
    info!(LINK, f(M, FHF), HDR + CINFO),
    // LOCK4denied: offset, length, type, owner (clientid + opaque<1024>).
    info!(LOCK, f(M, FHF), HDR + 8 + 8 + 4 + 8 + 4 + 1024),
    info!(LOCKT, FHF, HDR + 8 + 8 + 4 + 8 + 4 + 1024),
    info!(LOCKU, f(M, FHF), HDR + SID),
    info!(LOOKUP, FHF, HDR),
    info!(LOOKUPP, FHF, HDR),
    info!(NVERIFY, FHF, HDR),
    // stateid, cinfo, rflags, attrset, and the largest delegation (a write delegation with an
    // ACE whose `who` is up to 1024 bytes).
    info!(
        OPEN,
        f(M, FHF),
        HDR + SID + CINFO + 4 + BITMAP + 4 + SID + 4 + 12 + 16 + 1024
    ),
    info!(OPENATTR, f(M, FHF), HDR),
    info!(OPEN_CONFIRM, f(f(M, FHF), OpFlags::V40_ONLY), HDR + SID),
    info!(OPEN_DOWNGRADE, f(M, FHF), HDR + SID),
    info!(PUTFH, NONE, HDR),
    info!(PUTPUBFH, NONE, HDR),
    info!(PUTROOTFH, NONE, HDR),
    info!(READ, f(FHF, OpFlags::REPLY_GROWS_WITH_ARGS), HDR + 8 + 3),
    info!(READDIR, f(FHF, OpFlags::REPLY_GROWS_WITH_ARGS), HDR + 16),
    info!(READLINK, FHF, HDR + 4 + super::MAX_PATH_WIRE as u32),
    info!(REMOVE, f(M, FHF), HDR + CINFO),
    info!(RENAME, f(M, FHF), HDR + 2 * CINFO),
    info!(RENEW, OpFlags::V40_ONLY, HDR),
    info!(RESTOREFH, NONE, HDR),
    info!(SAVEFH, FHF, HDR),
    info!(SECINFO, FHF, HDR + VARIABLE),
    info!(SETATTR, f(M, FHF), HDR + BITMAP),
    info!(SETCLIENTID, f(M, OpFlags::V40_ONLY), HDR + VARIABLE),
    info!(SETCLIENTID_CONFIRM, f(M, OpFlags::V40_ONLY), HDR),
    info!(VERIFY, FHF, HDR),
    info!(WRITE, f(M, FHF), HDR + 4 + 4 + 8),
    info!(RELEASE_LOCKOWNER, f(M, OpFlags::V40_ONLY), HDR),
    info!(BACKCHANNEL_CTL, M, HDR),
    info!(
        BIND_CONN_TO_SESSION,
        f(M, OpFlags::SESSIONLESS),
        HDR + 16 + 4 + 4
    ),
    info!(EXCHANGE_ID, f(M, OpFlags::SESSIONLESS), HDR + VARIABLE),
    // sessionid, sequence, flags, two channel_attrs4 of 7 words + an ird of at most 1.
    info!(
        CREATE_SESSION,
        f(M, OpFlags::SESSIONLESS),
        HDR + 16 + 4 + 4 + 2 * (6 * 4 + 8)
    ),
    info!(DESTROY_SESSION, f(M, OpFlags::SESSIONLESS), HDR),
    info!(FREE_STATEID, M, HDR),
    info!(
        GET_DIR_DELEGATION,
        f(M, FHF),
        HDR + 4 + 8 + SID + 3 * BITMAP
    ),
    info!(
        GETDEVICEINFO,
        f(OpFlags::PNFS, OpFlags::REPLY_GROWS_WITH_ARGS),
        HDR + 8 + BITMAP
    ),
    info!(
        GETDEVICELIST,
        f(f(FHF, OpFlags::PNFS), OpFlags::REPLY_GROWS_WITH_ARGS),
        HDR + 8 + 8 + 4 + 4
    ),
    info!(LAYOUTCOMMIT, f(f(M, FHF), OpFlags::PNFS), HDR + 4 + 8),
    info!(
        LAYOUTGET,
        f(f(f(M, FHF), OpFlags::PNFS), OpFlags::REPLY_GROWS_WITH_ARGS),
        HDR + 4 + SID + 4
    ),
    info!(LAYOUTRETURN, f(f(M, FHF), OpFlags::PNFS), HDR + 4 + SID),
    info!(SECINFO_NO_NAME, FHF, HDR + VARIABLE),
    info!(SEQUENCE, OpFlags::MUST_BE_FIRST, HDR + 16 + 5 * 4),
    info!(SET_SSV, M, HDR + 4 + super::OPAQUE_LIMIT as u32),
    // One status per stateid asked about, at most MAX_ARRAY of them.
    info!(TEST_STATEID, NONE, HDR + 4 + 4 * MAX_ARRAY as u32),
    info!(
        WANT_DELEGATION,
        f(M, FHF),
        HDR + 4 + SID + 4 + 12 + 16 + 1024
    ),
    info!(DESTROY_CLIENTID, f(M, OpFlags::SESSIONLESS), HDR),
    info!(RECLAIM_COMPLETE, M, HDR),
    info!(ALLOCATE, f(f(M, FHF), OpFlags::V42), HDR),
    info!(
        COPY,
        f(f(M, FHF), OpFlags::V42),
        HDR + 4 + SID + 8 + 4 + 8 + 8
    ),
    info!(COPY_NOTIFY, f(f(M, FHF), OpFlags::V42), HDR + VARIABLE),
    info!(DEALLOCATE, f(f(M, FHF), OpFlags::V42), HDR),
    info!(IO_ADVISE, f(FHF, OpFlags::V42), HDR + BITMAP),
    info!(LAYOUTERROR, f(f(FHF, OpFlags::V42), OpFlags::PNFS), HDR),
    info!(LAYOUTSTATS, f(f(FHF, OpFlags::V42), OpFlags::PNFS), HDR),
    info!(OFFLOAD_CANCEL, f(f(M, FHF), OpFlags::V42), HDR),
    info!(OFFLOAD_STATUS, f(FHF, OpFlags::V42), HDR + 8 + 8),
    info!(
        READ_PLUS,
        f(f(FHF, OpFlags::V42), OpFlags::REPLY_GROWS_WITH_ARGS),
        HDR + 8
    ),
    info!(SEEK, f(FHF, OpFlags::V42), HDR + 12),
    info!(
        WRITE_SAME,
        f(f(M, FHF), OpFlags::V42),
        HDR + 4 + SID + 8 + 4 + 8
    ),
    info!(CLONE, f(f(M, FHF), OpFlags::V42), HDR),
    info!(
        GETXATTR,
        f(FHF, OpFlags::V42),
        HDR + 4 + MAX_XATTR_VALUE_WIRE as u32
    ),
    info!(SETXATTR, f(f(M, FHF), OpFlags::V42), HDR + CINFO),
    info!(
        LISTXATTRS,
        f(f(FHF, OpFlags::V42), OpFlags::REPLY_GROWS_WITH_ARGS),
        HDR + 16
    ),
    info!(REMOVEXATTR, f(f(M, FHF), OpFlags::V42), HDR + CINFO),
    info!(ILLEGAL, NONE, HDR),
];

/// The facts of op `op`, or `None` for an undefined number (which the server treats as
/// OP_ILLEGAL).
pub fn op_info(op: Opnum4) -> Option<&'static OpInfo> {
    match op.0 {
        3..=75 => Some(&OP_INFO[(op.0 - 3) as usize]),
        10044 => OP_INFO.last(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs4::arb::{Arb, Gen};
    use crate::{from_bytes, to_bytes};
    use bytes::Bytes;
    use proptest::prelude::*;

    fn split(b: &Bytes, at: usize) -> Vec<Bytes> {
        let at = at % (b.len() + 1);
        vec![b.slice(..at), b.slice(at..)]
    }

    #[test]
    fn op_table_is_complete_and_ordered() {
        assert_eq!(OP_INFO.len(), OPS.len() + 1);
        for (i, op) in OPS.iter().enumerate() {
            assert_eq!(OP_INFO[i].num, *op);
            assert_eq!(op_info(*op).unwrap().num, *op);
            assert_ne!(op.name(), "UNKNOWN");
        }
        assert_eq!(op_info(Opnum4::ILLEGAL).unwrap().name, "ILLEGAL");
        assert!(op_info(Opnum4(2)).is_none() && op_info(Opnum4(76)).is_none());
        assert!(op_info(Opnum4::SEQUENCE)
            .unwrap()
            .flags
            .contains(OpFlags::MUST_BE_FIRST));
        assert!(op_info(Opnum4::RENEW)
            .unwrap()
            .flags
            .contains(OpFlags::V40_ONLY));
    }

    #[test]
    fn every_op_has_an_error_only_result_that_round_trips() {
        for op in OPS {
            let res = NfsResop4::error(*op, Nfsstat4::NOTSUPP);
            assert_eq!(res.opnum(), *op);
            assert_eq!(res.status(), Nfsstat4::NOTSUPP);
            assert_eq!(from_bytes::<NfsResop4>(&to_bytes(&res)).unwrap(), res);
        }
    }

    #[test]
    fn unknown_op_decodes_to_illegal() {
        let b = Bytes::from_static(&[0, 0, 0, 99, 1, 2, 3]);
        let mut r = Reader::from_bytes(&b);
        assert_eq!(NfsArgop4::unpack(&mut r).unwrap(), NfsArgop4::Illegal(99));
        assert_eq!(
            r.remaining(),
            3,
            "nothing after an illegal op number is read"
        );
    }

    #[test]
    fn sequence_args_golden() {
        let a = NfsArgop4::Sequence(SequenceArgs {
            sessionid: [0xaa; 16],
            sequenceid: 7,
            slotid: 0,
            highest_slotid: 3,
            cachethis: true,
        });
        let mut want = vec![0, 0, 0, 53];
        want.extend_from_slice(&[0xaa; 16]);
        want.extend_from_slice(&[0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 1]);
        assert_eq!(&to_bytes(&a)[..], &want[..]);
    }

    #[test]
    fn lock_denied_result_carries_the_conflict() {
        let d = Lock4Denied {
            offset: 1,
            length: 2,
            locktype: WRITE_LT,
            owner: LockOwner4 {
                clientid: 3,
                owner: Opaque4::from(&b"o"[..]),
            },
        };
        let res = LockRes::Denied(d);
        assert_eq!(res.status(), Nfsstat4::DENIED);
        let b = to_bytes(&res);
        assert_eq!(&b[..4], &10010u32.to_be_bytes());
        assert_eq!(from_bytes::<LockRes>(&b).unwrap(), res);
    }

    #[test]
    fn write_args_payload_is_zero_copy() {
        let a = WriteArgs {
            data: Payload::from(vec![7u8; 5000]),
            ..Default::default()
        };
        let b = to_bytes(&a);
        let segs = [b.clone()];
        let back = WriteArgs::unpack(&mut Reader::new(&segs)).unwrap();
        assert_eq!(back, a);
        let chunk = &back.data.chunks()[0];
        let base = b.as_ptr() as usize;
        let p = chunk.as_ptr() as usize;
        assert!(
            p >= base && p < base + b.len(),
            "data is a slice of the record"
        );
    }

    #[test]
    fn read_without_data_is_the_reply_minus_the_data() {
        let ok = ReadResOk {
            eof: true,
            data: Payload::from(vec![1u8; 5]),
        };
        let mut w = Writer::new();
        ok.pack_without_data(&mut w);
        let mut head = w.into_bytes().to_vec();
        head.extend_from_slice(&[1; 5]);
        head.extend_from_slice(&[0; 3]);
        assert_eq!(head, to_bytes(&ok).to_vec());
    }

    /// RFC 8276 §8.4.3: SETXATTR4args is the option, the key (a `component4`) and the value.
    #[test]
    fn setxattr_args_golden_and_value_bound() {
        let a = NfsArgop4::Setxattr(SetxattrArgs {
            option: SETXATTR4_CREATE,
            key: Component4(Bytes::from_static(b"ab")),
            value: XattrValue4(Bytes::from_static(b"xyz")),
        });
        let b = to_bytes(&a);
        assert_eq!(
            &b[..],
            &[
                0, 0, 0, 73, 0, 0, 0, 1, 0, 0, 0, 2, b'a', b'b', 0, 0, 0, 0, 0, 3, b'x', b'y',
                b'z', 0
            ]
        );
        assert_eq!(from_bytes::<NfsArgop4>(&b).unwrap(), a);
        // A value one byte over the bound is refused before allocation.
        let mut w = Writer::new();
        SETXATTR4_EITHER.pack(&mut w);
        Component4(Bytes::from_static(b"k")).pack(&mut w);
        ((MAX_XATTR_VALUE_WIRE + 1) as u32).pack(&mut w);
        let b = w.into_bytes();
        assert!(SetxattrArgs::unpack(&mut Reader::from_bytes(&b)).is_err());
    }

    #[test]
    fn open_with_unknown_claim_is_bad_xdr() {
        let mut w = Writer::new();
        OpenArgs::default().pack(&mut w);
        let mut b = w.into_bytes().to_vec();
        let n = b.len();
        b[n - 4..].copy_from_slice(&9u32.to_be_bytes()); // claim CLAIM_FH (4) -> 9
        assert!(matches!(
            from_bytes::<OpenArgs>(&Bytes::from(b)),
            Err(DecodeError::BadDiscriminant { .. })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn args_round_trip(seed in any::<u64>(), cut in any::<usize>()) {
            let a = NfsArgop4::arb(&mut Gen::new(seed));
            let b = to_bytes(&a);
            let segs = split(&b, cut);
            let mut r = Reader::new(&segs);
            prop_assert_eq!(NfsArgop4::unpack(&mut r).unwrap(), a);
            prop_assert_eq!(r.remaining(), 0);
        }

        #[test]
        fn results_round_trip(seed in any::<u64>(), cut in any::<usize>()) {
            let x = NfsResop4::arb(&mut Gen::new(seed));
            let b = to_bytes(&x);
            let segs = split(&b, cut);
            let mut r = Reader::new(&segs);
            prop_assert_eq!(NfsResop4::unpack(&mut r).unwrap(), x);
            prop_assert_eq!(r.remaining(), 0);
        }

        #[test]
        fn arbitrary_bytes_never_panic(op in 0u32..80, data in proptest::collection::vec(any::<u8>(), 0..256)) {
            let b = Bytes::from(data);
            let _ = NfsArgop4::decode(Opnum4(op), &mut Reader::from_bytes(&b));
            let mut with_op = op.to_be_bytes().to_vec();
            with_op.extend_from_slice(&b);
            let _ = NfsResop4::unpack(&mut Reader::from_bytes(&Bytes::from(with_op)));
        }
    }

    #[test]
    fn sampled_results_fit_their_reply_bound() {
        // Results whose size does not grow with the arguments must fit `reply_bytes_max`. The
        // generator keeps opaques short, so this catches undercounted fixed parts, not long ones.
        let mut g = Gen::new(3);
        for _ in 0..20_000 {
            let x = NfsResop4::arb(&mut g);
            let info = op_info(x.opnum()).unwrap();
            if info.flags.contains(OpFlags::REPLY_GROWS_WITH_ARGS) {
                continue;
            }
            let n = to_bytes(&x).len();
            assert!(
                n <= info.reply_bytes_max as usize,
                "{}: {n} bytes",
                info.name
            );
        }
    }

    #[test]
    fn every_op_round_trips_args_and_results() {
        // Deterministic coverage: several values for every op, so none is left to chance.
        let mut g = Gen::new(42);
        for _ in 0..64 {
            for op in OPS {
                let a = loop {
                    let a = NfsArgop4::arb(&mut g);
                    if a.opnum() == *op {
                        break a;
                    }
                };
                assert_eq!(from_bytes::<NfsArgop4>(&to_bytes(&a)).unwrap(), a, "{op:?}");
                let x = loop {
                    let x = NfsResop4::arb(&mut g);
                    if x.opnum() == *op {
                        break x;
                    }
                };
                assert_eq!(from_bytes::<NfsResop4>(&to_bytes(&x)).unwrap(), x, "{op:?}");
            }
        }
    }
}
