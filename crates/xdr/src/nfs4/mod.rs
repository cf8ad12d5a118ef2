//! NFS version 4.1 (RFC 8881, XDR in RFC 5662) and 4.2 (RFC 7862, XDR in RFC 7863) wire types.
//!
//! # Shape
//! Version 4 has two procedures: NULL and COMPOUND. A COMPOUND carries a tag, a minor version and
//! a list of operations, each an op number followed by that op's arguments; the reply carries a
//! status, the tag echoed and one result per op executed, in order, stopping at the first op
//! that failed.
//!
//! ```text
//!  COMPOUND4args                         COMPOUND4res
//!  +-----+-------+-------+-----+-----+   +--------+-----+-------+-----+-----+
//!  | tag | minor | count | op  | op  |   | status | tag | count | res | res |
//!  +-----+-------+-------+-----+-----+   +--------+-----+-------+-----+-----+
//!                          |                                      |
//!                          v                                      v
//!                  opnum | args                         opnum | status | resok
//! ```
//!
//! The modules, in the order a reader needs them:
//! * this one: constants, [`Nfsstat4`], the basic types every op uses (file handles, stateids,
//!   names, times, [`Bitmap4`], [`Fattr4`] as raw mask + bytes);
//! * [`attrs`]: the attribute numbers and a typed codec between [`Fattr4`] and [`attrs::AttrValues`];
//! * [`ops`]: [`ops::Opnum4`], the arguments and results of every 4.0/4.1/4.2 op, and the
//!   per-op facts table ([`ops::OpInfo`]);
//! * [`compound`]: COMPOUND decoding with hard bounds, and result encoding;
//! * [`callback`]: the callback program (CB_NULL, CB_COMPOUND and its ops).
//!
//! # Rules the decoders follow
//! * Everything variable-length has a bound checked before allocation (names, handles, opaques,
//!   bitmaps, arrays). Bounds are ours where the RFC leaves `<>` open; each says why.
//! * Enums from the wire are newtypes with named constants: an unknown value survives decoding and
//!   the server decides what it means (usually NFS4ERR_INVAL or NFS4ERR_BADXDR). A union whose
//!   discriminant has no arm and no `default` is a decode error: there is no way to know what
//!   follows it.
//! * Names are not interpreted here. A `component4` is a bounded byte string; the server checks it
//!   for `/`, NUL, `.`/`..`, emptiness and UTF-8 (NFS4ERR_BADNAME / NFS4ERR_INVAL /
//!   NFS4ERR_BADCHAR), because those are legal XDR that needs a precise NFS error, not GARBAGE_ARGS.
//! * Minor version 0 is not served, but the COMPOUND decoder still reads the tag and minor version
//!   so that the server can answer NFS4ERR_MINOR_VERS_MISMATCH (RFC 8881 §16.2.3).

#[cfg(test)]
use crate::DecodeError;
use crate::{Pack, Reader, Result, Unpack, Writer};
use bytes::Bytes;

/// RPC program and version of NFSv4 (RFC 8881 §16.1).
pub const PROGRAM: u32 = 100003;
pub const VERSION: u32 = 4;
/// Minor versions this crate decodes: 4.1 and 4.2. (4.0 is answered with
/// NFS4ERR_MINOR_VERS_MISMATCH by the server.)
pub const MINOR_VERSIONS: [u32; 2] = [1, 2];

/// Procedure numbers of program 100003 version 4.
pub mod proc_ {
    pub const NULL: u32 = 0;
    pub const COMPOUND: u32 = 1;
    /// Names indexed by procedure number (from [`super::PROCS`]).
    pub const NAMES: [&str; 2] = crate::procs::names(&super::TABLE);
}

/// The facts of the two NFSv4 procedures (see [`crate::procs`]). A COMPOUND's reply is bounded by
/// the session's negotiated `ca_maxresponsesize` and its ops' bounds ([`ops::OP_INFO`]), not by
/// the procedure; retransmissions are answered from the session slot's cache (RFC 8881 §2.10.6),
/// not an RPC-level one, so COMPOUND is not marked non-idempotent here.
pub static PROCS: [crate::procs::ProcInfo; 2] = TABLE;

const TABLE: [crate::procs::ProcInfo; 2] = {
    use crate::procs::{row, ReplyBound::*, TimerClass::Other};
    [
        row(proc_::NULL, "NULL", false, Fixed(0), Other),
        row(proc_::COMPOUND, "COMPOUND", false, Record, Other),
    ]
};

/// RFC 8881 §2.4.1 / RFC 5662: NFS4_FHSIZE, the largest file handle.
pub const FHSIZE: usize = 128;
/// NFS4_VERIFIER_SIZE.
pub const VERIFIER_SIZE: usize = 8;
/// NFS4_OTHER_SIZE: the `other` part of a stateid.
pub const OTHER_SIZE: usize = 12;
/// NFS4_SESSIONID_SIZE.
pub const SESSIONID_SIZE: usize = 16;
/// NFS4_DEVICEID4_SIZE (pNFS device ids).
pub const DEVICEID_SIZE: usize = 16;
/// NFS4_OPAQUE_LIMIT: the RFC's own bound for owners, client ids and server scopes.
pub const OPAQUE_LIMIT: usize = 1024;

/// Largest `component4` accepted on the wire. The RFC leaves it unbounded; names up to this size
/// decode so that the server can answer NFS4ERR_NAMETOOLONG for names over its `maxname` (255)
/// as a kernel server would, and larger ones are bad XDR. Same value as the v3 layer.
pub const MAX_NAME_WIRE: usize = 4096;
/// Largest `linktext4` (symlink target) accepted on the wire: PATH_MAX.
pub const MAX_PATH_WIRE: usize = 4096;
/// Largest other `utf8string` (owners, groups, domains, netids, addresses, tags of CB_COMPOUND)
/// accepted on the wire: the RFC's NFS4_OPAQUE_LIMIT, far above `name@domain` strings in use.
pub const MAX_UTF8_WIRE: usize = OPAQUE_LIMIT;
/// Most 32-bit words in a `bitmap4`. Attribute numbers stop at 82 today (3 words); 8 words leave
/// room for 256 attributes while refusing a hostile count early.
pub const MAX_BITMAP_WORDS: usize = 8;
/// Largest `attrlist4` (the value bytes of a `fattr4`). The largest attribute a client sends or
/// asks for is an ACL; 256 KiB holds about 8000 ACEs with 16-byte names, far above any file
/// system's ACL limit (ext4 and XFS stop near 64 KiB of xattr).
pub const MAX_FATTR_BYTES: usize = 256 * 1024;
/// Most items in the small arrays of the protocol (security flavors, OIDs, GSS handles, impl ids,
/// stateids to test, layouts, device ids, referring calls, notifications). None is more than a
/// handful in practice; 1024 bounds the vector a hostile peer can make us grow.
pub const MAX_ARRAY: usize = 1024;
/// Largest READ/WRITE payload accepted on the wire: the same 16 MiB as the v3 layer
/// ([`crate::nfs3::MAX_DATA_WIRE`]), far above the 1 MiB rsize/wsize Linux uses. The record size
/// limit of the transport is the real memory bound.
pub const MAX_DATA_WIRE: usize = crate::nfs3::MAX_DATA_WIRE;

pub mod attrs;
#[macro_use]
pub mod ops;
pub mod callback;
pub mod compound;

// ---------------------------------------------------------------------------------------------
// nfsstat4
// ---------------------------------------------------------------------------------------------

xdr_enum!(
    /// `nfsstat4` (RFC 8881 §15.1, RFC 7862 §11.1, RFC 8276 §8.3).
    Nfsstat4 {
        OK = 0 => "NFS4_OK",
        PERM = 1 => "NFS4ERR_PERM",
        NOENT = 2 => "NFS4ERR_NOENT",
        IO = 5 => "NFS4ERR_IO",
        NXIO = 6 => "NFS4ERR_NXIO",
        ACCESS = 13 => "NFS4ERR_ACCESS",
        EXIST = 17 => "NFS4ERR_EXIST",
        XDEV = 18 => "NFS4ERR_XDEV",
        NOTDIR = 20 => "NFS4ERR_NOTDIR",
        ISDIR = 21 => "NFS4ERR_ISDIR",
        INVAL = 22 => "NFS4ERR_INVAL",
        FBIG = 27 => "NFS4ERR_FBIG",
        NOSPC = 28 => "NFS4ERR_NOSPC",
        ROFS = 30 => "NFS4ERR_ROFS",
        MLINK = 31 => "NFS4ERR_MLINK",
        NAMETOOLONG = 63 => "NFS4ERR_NAMETOOLONG",
        NOTEMPTY = 66 => "NFS4ERR_NOTEMPTY",
        DQUOT = 69 => "NFS4ERR_DQUOT",
        STALE = 70 => "NFS4ERR_STALE",
        BADHANDLE = 10001 => "NFS4ERR_BADHANDLE",
        BAD_COOKIE = 10003 => "NFS4ERR_BAD_COOKIE",
        NOTSUPP = 10004 => "NFS4ERR_NOTSUPP",
        TOOSMALL = 10005 => "NFS4ERR_TOOSMALL",
        SERVERFAULT = 10006 => "NFS4ERR_SERVERFAULT",
        BADTYPE = 10007 => "NFS4ERR_BADTYPE",
        DELAY = 10008 => "NFS4ERR_DELAY",
        SAME = 10009 => "NFS4ERR_SAME",
        DENIED = 10010 => "NFS4ERR_DENIED",
        EXPIRED = 10011 => "NFS4ERR_EXPIRED",
        LOCKED = 10012 => "NFS4ERR_LOCKED",
        GRACE = 10013 => "NFS4ERR_GRACE",
        FHEXPIRED = 10014 => "NFS4ERR_FHEXPIRED",
        SHARE_DENIED = 10015 => "NFS4ERR_SHARE_DENIED",
        WRONGSEC = 10016 => "NFS4ERR_WRONGSEC",
        CLID_INUSE = 10017 => "NFS4ERR_CLID_INUSE",
        RESOURCE = 10018 => "NFS4ERR_RESOURCE",
        MOVED = 10019 => "NFS4ERR_MOVED",
        NOFILEHANDLE = 10020 => "NFS4ERR_NOFILEHANDLE",
        MINOR_VERS_MISMATCH = 10021 => "NFS4ERR_MINOR_VERS_MISMATCH",
        STALE_CLIENTID = 10022 => "NFS4ERR_STALE_CLIENTID",
        STALE_STATEID = 10023 => "NFS4ERR_STALE_STATEID",
        OLD_STATEID = 10024 => "NFS4ERR_OLD_STATEID",
        BAD_STATEID = 10025 => "NFS4ERR_BAD_STATEID",
        BAD_SEQID = 10026 => "NFS4ERR_BAD_SEQID",
        NOT_SAME = 10027 => "NFS4ERR_NOT_SAME",
        LOCK_RANGE = 10028 => "NFS4ERR_LOCK_RANGE",
        SYMLINK = 10029 => "NFS4ERR_SYMLINK",
        RESTOREFH = 10030 => "NFS4ERR_RESTOREFH",
        LEASE_MOVED = 10031 => "NFS4ERR_LEASE_MOVED",
        ATTRNOTSUPP = 10032 => "NFS4ERR_ATTRNOTSUPP",
        NO_GRACE = 10033 => "NFS4ERR_NO_GRACE",
        RECLAIM_BAD = 10034 => "NFS4ERR_RECLAIM_BAD",
        RECLAIM_CONFLICT = 10035 => "NFS4ERR_RECLAIM_CONFLICT",
        BADXDR = 10036 => "NFS4ERR_BADXDR",
        LOCKS_HELD = 10037 => "NFS4ERR_LOCKS_HELD",
        OPENMODE = 10038 => "NFS4ERR_OPENMODE",
        BADOWNER = 10039 => "NFS4ERR_BADOWNER",
        BADCHAR = 10040 => "NFS4ERR_BADCHAR",
        BADNAME = 10041 => "NFS4ERR_BADNAME",
        BAD_RANGE = 10042 => "NFS4ERR_BAD_RANGE",
        LOCK_NOTSUPP = 10043 => "NFS4ERR_LOCK_NOTSUPP",
        OP_ILLEGAL = 10044 => "NFS4ERR_OP_ILLEGAL",
        DEADLOCK = 10045 => "NFS4ERR_DEADLOCK",
        FILE_OPEN = 10046 => "NFS4ERR_FILE_OPEN",
        ADMIN_REVOKED = 10047 => "NFS4ERR_ADMIN_REVOKED",
        CB_PATH_DOWN = 10048 => "NFS4ERR_CB_PATH_DOWN",
        BADIOMODE = 10049 => "NFS4ERR_BADIOMODE",
        BADLAYOUT = 10050 => "NFS4ERR_BADLAYOUT",
        BAD_SESSION_DIGEST = 10051 => "NFS4ERR_BAD_SESSION_DIGEST",
        BADSESSION = 10052 => "NFS4ERR_BADSESSION",
        BADSLOT = 10053 => "NFS4ERR_BADSLOT",
        COMPLETE_ALREADY = 10054 => "NFS4ERR_COMPLETE_ALREADY",
        CONN_NOT_BOUND_TO_SESSION = 10055 => "NFS4ERR_CONN_NOT_BOUND_TO_SESSION",
        DELEG_ALREADY_WANTED = 10056 => "NFS4ERR_DELEG_ALREADY_WANTED",
        BACK_CHAN_BUSY = 10057 => "NFS4ERR_BACK_CHAN_BUSY",
        LAYOUTTRYLATER = 10058 => "NFS4ERR_LAYOUTTRYLATER",
        LAYOUTUNAVAILABLE = 10059 => "NFS4ERR_LAYOUTUNAVAILABLE",
        NOMATCHING_LAYOUT = 10060 => "NFS4ERR_NOMATCHING_LAYOUT",
        RECALLCONFLICT = 10061 => "NFS4ERR_RECALLCONFLICT",
        UNKNOWN_LAYOUTTYPE = 10062 => "NFS4ERR_UNKNOWN_LAYOUTTYPE",
        SEQ_MISORDERED = 10063 => "NFS4ERR_SEQ_MISORDERED",
        SEQUENCE_POS = 10064 => "NFS4ERR_SEQUENCE_POS",
        REQ_TOO_BIG = 10065 => "NFS4ERR_REQ_TOO_BIG",
        REP_TOO_BIG = 10066 => "NFS4ERR_REP_TOO_BIG",
        REP_TOO_BIG_TO_CACHE = 10067 => "NFS4ERR_REP_TOO_BIG_TO_CACHE",
        RETRY_UNCACHED_REP = 10068 => "NFS4ERR_RETRY_UNCACHED_REP",
        UNSAFE_COMPOUND = 10069 => "NFS4ERR_UNSAFE_COMPOUND",
        TOO_MANY_OPS = 10070 => "NFS4ERR_TOO_MANY_OPS",
        OP_NOT_IN_SESSION = 10071 => "NFS4ERR_OP_NOT_IN_SESSION",
        HASH_ALG_UNSUPP = 10072 => "NFS4ERR_HASH_ALG_UNSUPP",
        CLIENTID_BUSY = 10074 => "NFS4ERR_CLIENTID_BUSY",
        PNFS_IO_HOLE = 10075 => "NFS4ERR_PNFS_IO_HOLE",
        SEQ_FALSE_RETRY = 10076 => "NFS4ERR_SEQ_FALSE_RETRY",
        BAD_HIGH_SLOT = 10077 => "NFS4ERR_BAD_HIGH_SLOT",
        DEADSESSION = 10078 => "NFS4ERR_DEADSESSION",
        ENCR_ALG_UNSUPP = 10079 => "NFS4ERR_ENCR_ALG_UNSUPP",
        PNFS_NO_LAYOUT = 10080 => "NFS4ERR_PNFS_NO_LAYOUT",
        NOT_ONLY_OP = 10081 => "NFS4ERR_NOT_ONLY_OP",
        WRONG_CRED = 10082 => "NFS4ERR_WRONG_CRED",
        WRONG_TYPE = 10083 => "NFS4ERR_WRONG_TYPE",
        DIRDELEG_UNAVAIL = 10084 => "NFS4ERR_DIRDELEG_UNAVAIL",
        REJECT_DELEG = 10085 => "NFS4ERR_REJECT_DELEG",
        RETURNCONFLICT = 10086 => "NFS4ERR_RETURNCONFLICT",
        DELEG_REVOKED = 10087 => "NFS4ERR_DELEG_REVOKED",
        PARTNER_NOTSUPP = 10088 => "NFS4ERR_PARTNER_NOTSUPP",
        PARTNER_NO_AUTH = 10089 => "NFS4ERR_PARTNER_NO_AUTH",
        UNION_NOTSUPP = 10090 => "NFS4ERR_UNION_NOTSUPP",
        OFFLOAD_DENIED = 10091 => "NFS4ERR_OFFLOAD_DENIED",
        WRONG_LFS = 10092 => "NFS4ERR_WRONG_LFS",
        BADLABEL = 10093 => "NFS4ERR_BADLABEL",
        OFFLOAD_NO_REQS = 10094 => "NFS4ERR_OFFLOAD_NO_REQS",
        NOXATTR = 10095 => "NFS4ERR_NOXATTR",
        XATTR2BIG = 10096 => "NFS4ERR_XATTR2BIG",
    }
);

impl Nfsstat4 {
    pub fn is_ok(self) -> bool {
        self == Self::OK
    }
}

// ---------------------------------------------------------------------------------------------
// Basic types (RFC 8881 §3)
// ---------------------------------------------------------------------------------------------

/// `clientid4`.
pub type ClientId4 = u64;
/// `seqid4`, `sequenceid4`, `slotid4`, `count4`, `offset4`, `length4`, `nfs_cookie4`,
/// `changeid4` are plain integers.
pub type SequenceId4 = u32;
pub type SlotId4 = u32;
/// `verifier4`.
pub type Verifier4 = [u8; VERIFIER_SIZE];
/// `sessionid4`.
pub type SessionId4 = [u8; SESSIONID_SIZE];
/// `deviceid4`.
pub type DeviceId4 = [u8; DEVICEID_SIZE];

xdr_bytes!(
    /// `nfs_fh4`: an opaque handle of at most [`FHSIZE`] (128) bytes.
    NfsFh4("nfs_fh4", FHSIZE)
);
xdr_bytes!(
    /// `component4`: one path component, not interpreted here (see the module notes).
    Component4("component4", MAX_NAME_WIRE)
);
xdr_bytes!(
    /// `linktext4`: a symlink target.
    Linktext4("linktext4", MAX_PATH_WIRE)
);
xdr_bytes!(
    /// Any other `utf8string` (`utf8str_cs`, `utf8str_cis`, `utf8str_mixed`): owners, groups,
    /// domains, tags, netids, universal addresses. Not checked for UTF-8 here.
    Utf8Str("utf8string", MAX_UTF8_WIRE)
);
xdr_bytes!(
    /// An `opaque <NFS4_OPAQUE_LIMIT>`: state owners, client owner ids, server scopes and major ids.
    Opaque4("opaque", OPAQUE_LIMIT)
);
xdr_bytes!(
    /// `sec_oid4`: a GSS mechanism OID (DER). Real ones are about 10 bytes.
    SecOid4("sec_oid4", OPAQUE_LIMIT)
);
xdr_bytes!(
    /// `gsshandle4_t`: an RPCSEC_GSS context handle.
    GssHandle4("gsshandle4_t", OPAQUE_LIMIT)
);
xdr_bytes!(
    /// Layout-type-specific bodies (`layout_content4.loc_body`, `device_addr4.da_addr_body`,
    /// `layoutupdate4.lou_body`, ...): opaque to everything but the layout driver. Bounded like
    /// an attribute list.
    LayoutBody("layout body", MAX_FATTR_BYTES)
);

xdr_array!(
    /// `pathname4`: a sequence of components.
    Pathname4(Component4, "pathname4", MAX_ARRAY)
);

/// `stateid4` (RFC 8881 §8.2): a sequence number and 12 bytes the server chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Stateid4 {
    pub seqid: u32,
    pub other: [u8; OTHER_SIZE],
}

impl Stateid4 {
    /// RFC 8881 §8.2.3: all zeros, the anonymous stateid (I/O with no open state).
    pub const ANONYMOUS: Self = Self {
        seqid: 0,
        other: [0; OTHER_SIZE],
    };
    /// All ones: the READ bypass stateid (a READ that ignores share reservations and locks).
    pub const READ_BYPASS: Self = Self {
        seqid: u32::MAX,
        other: [0xff; OTHER_SIZE],
    };
    /// seqid 1, other all zeros: "the current stateid" of the COMPOUND.
    pub const CURRENT: Self = Self {
        seqid: 1,
        other: [0; OTHER_SIZE],
    };
    /// seqid u32::MAX, other all zeros: a stateid that is never valid (clients use it to make
    /// sure an op does not use the current stateid).
    pub const INVALID: Self = Self {
        seqid: u32::MAX,
        other: [0; OTHER_SIZE],
    };

    /// One of the four special stateids (RFC 8881 §8.2.3).
    pub fn is_special(&self) -> bool {
        *self == Self::ANONYMOUS
            || *self == Self::READ_BYPASS
            || *self == Self::CURRENT
            || *self == Self::INVALID
    }
}

impl Pack for Stateid4 {
    fn pack(&self, w: &mut Writer) {
        w.put_u32(self.seqid);
        w.put_fixed(&self.other);
    }
}
impl Unpack for Stateid4 {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            seqid: r.get_u32()?,
            other: r.get_fixed()?,
        })
    }
}
#[cfg(test)]
impl arb::Arb for Stateid4 {
    fn arb(g: &mut arb::Gen) -> Self {
        Self {
            seqid: g.u32(),
            other: arb::Arb::arb(g),
        }
    }
}

xdr_struct!(
    /// `nfstime4`: seconds since the epoch (signed) and nanoseconds.
    Nfstime4 {
        seconds: i64,
        nseconds: u32,
    }
);

xdr_union!(
    /// `settime4`: how SETATTR sets a time (`time_how4` SET_TO_SERVER_TIME4 / SET_TO_CLIENT_TIME4).
    Settime4("time_how4") {
        0u32 => ServerTime,
        1u32 => ClientTime(Nfstime4),
    }
);

xdr_struct!(
    /// `change_info4`: the directory's change attribute before and after a modifying op.
    ChangeInfo4 {
        atomic: bool,
        before: u64,
        after: u64,
    }
);

xdr_struct!(
    /// `specdata4`: device numbers.
    Specdata4 {
        specdata1: u32,
        specdata2: u32,
    }
);

xdr_struct!(
    /// `fsid4`.
    Fsid4 { major: u64, minor: u64 }
);

xdr_enum!(
    /// `nfs_ftype4`.
    Ftype4 {
        REG = 1 => "NF4REG",
        DIR = 2 => "NF4DIR",
        BLK = 3 => "NF4BLK",
        CHR = 4 => "NF4CHR",
        LNK = 5 => "NF4LNK",
        SOCK = 6 => "NF4SOCK",
        FIFO = 7 => "NF4FIFO",
        ATTRDIR = 8 => "NF4ATTRDIR",
        NAMEDATTR = 9 => "NF4NAMEDATTR",
    }
);

xdr_struct!(
    /// `netaddr4` (and 4.0's `clientaddr4`): a netid ("tcp", "tcp6") and a universal address.
    Netaddr4 {
        netid: Utf8Str,
        addr: Utf8Str,
    }
);

xdr_struct!(
    /// `nfs_impl_id4`: who implemented the peer (EXCHANGE_ID).
    NfsImplId4 {
        domain: Utf8Str,
        name: Utf8Str,
        date: Nfstime4,
    }
);

xdr_struct!(
    /// `state_owner4` (`open_owner4`, `lock_owner4`): client id and an opaque owner.
    StateOwner4 {
        clientid: ClientId4,
        owner: Opaque4,
    }
);
/// `open_owner4`.
pub type OpenOwner4 = StateOwner4;
/// `lock_owner4`.
pub type LockOwner4 = StateOwner4;

xdr_struct!(
    /// `nfsace4`: one access control entry.
    Nfsace4 {
        acetype: u32,
        flag: u32,
        access_mask: u32,
        who: Utf8Str,
    }
);

xdr_enum!(
    /// `layouttype4` (RFC 8881 §3.3.13, RFC 8435 for flexfiles).
    LayoutType4 {
        NFSV4_1_FILES = 1 => "LAYOUT4_NFSV4_1_FILES",
        OSD2_OBJECTS = 2 => "LAYOUT4_OSD2_OBJECTS",
        BLOCK_VOLUME = 3 => "LAYOUT4_BLOCK_VOLUME",
        FLEX_FILES = 4 => "LAYOUT4_FLEX_FILES",
    }
);

xdr_enum!(
    /// `layoutiomode4`.
    LayoutIomode4 {
        READ = 1 => "LAYOUTIOMODE4_READ",
        RW = 2 => "LAYOUTIOMODE4_RW",
        ANY = 3 => "LAYOUTIOMODE4_ANY",
    }
);

xdr_enum!(
    /// `stable_how4`.
    StableHow4 {
        UNSTABLE = 0 => "UNSTABLE4",
        DATA_SYNC = 1 => "DATA_SYNC4",
        FILE_SYNC = 2 => "FILE_SYNC4",
    }
);

// ---------------------------------------------------------------------------------------------
// bitmap4 and fattr4
// ---------------------------------------------------------------------------------------------

/// `bitmap4`: a variable-length bit set (bit `n` is word `n / 32`, bit `n % 32`), at most
/// [`MAX_BITMAP_WORDS`] words.
///
/// Equality is on the words as sent: `[0x1]` and `[0x1, 0]` differ on the wire, and a round trip
/// keeps trailing zero words. Use [`Bitmap4::same_bits`] to compare sets.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct Bitmap4(pub Vec<u32>);

impl Bitmap4 {
    pub fn new() -> Self {
        Self::default()
    }

    /// A bitmap with these bits set.
    pub fn from_bits(bits: &[u32]) -> Self {
        let mut b = Self::new();
        for &n in bits {
            b.set(n);
        }
        b
    }

    pub fn contains(&self, bit: u32) -> bool {
        let word = (bit / 32) as usize;
        self.0.get(word).is_some_and(|w| w & (1 << (bit % 32)) != 0)
    }

    /// Sets `bit`, growing the word list as needed.
    ///
    /// # Panics
    /// If `bit` needs more than [`MAX_BITMAP_WORDS`] words: such a bitmap could not be decoded
    /// back, so building one is our bug.
    pub fn set(&mut self, bit: u32) {
        let word = (bit / 32) as usize;
        assert!(word < MAX_BITMAP_WORDS, "bit {bit} beyond the bitmap bound");
        if self.0.len() <= word {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << (bit % 32);
    }

    pub fn clear(&mut self, bit: u32) {
        let word = (bit / 32) as usize;
        if let Some(w) = self.0.get_mut(word) {
            *w &= !(1 << (bit % 32));
        }
    }

    /// The set bits, in increasing order (the order attribute values travel in).
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().enumerate().flat_map(|(i, &w)| {
            (0..32u32)
                .filter(move |b| w & (1 << b) != 0)
                .map(move |b| i as u32 * 32 + b)
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// The bits set in both.
    pub fn intersect(&self, other: &Bitmap4) -> Bitmap4 {
        let n = self.0.len().min(other.0.len());
        let mut b = Bitmap4((0..n).map(|i| self.0[i] & other.0[i]).collect());
        b.trim();
        b
    }

    /// Whether the two bitmaps hold the same bits, whatever their trailing zero words.
    pub fn same_bits(&self, other: &Bitmap4) -> bool {
        let n = self.0.len().max(other.0.len());
        (0..n).all(|i| self.0.get(i).unwrap_or(&0) == other.0.get(i).unwrap_or(&0))
    }

    /// Drops trailing zero words (the shortest encoding).
    pub fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }
}

impl Pack for Bitmap4 {
    fn pack(&self, w: &mut Writer) {
        debug_assert!(self.0.len() <= MAX_BITMAP_WORDS);
        w.put_array(&self.0)
    }
}
impl Unpack for Bitmap4 {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self(r.get_array("bitmap4", MAX_BITMAP_WORDS)?))
    }
}
#[cfg(test)]
impl arb::Arb for Bitmap4 {
    fn arb(g: &mut arb::Gen) -> Self {
        let n = g.below(4);
        Self((0..n).map(|_| g.u32()).collect())
    }
}

/// `fattr4`: an attribute mask and the values of the attributes in it, as raw XDR in bit order.
///
/// At this level the values are not parsed (an unknown attribute has no known length, so a
/// generic decoder could not skip it); [`attrs::AttrValues`] turns the pair into typed values.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fattr4 {
    pub mask: Bitmap4,
    pub vals: Bytes,
}
impl Pack for Fattr4 {
    fn pack(&self, w: &mut Writer) {
        self.mask.pack(w);
        debug_assert!(self.vals.len() <= MAX_FATTR_BYTES);
        w.put_opaque(&self.vals);
    }
}
impl Unpack for Fattr4 {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            mask: Bitmap4::unpack(r)?,
            vals: r.get_opaque("attrlist4", MAX_FATTR_BYTES)?,
        })
    }
}
#[cfg(test)]
impl arb::Arb for Fattr4 {
    fn arb(g: &mut arb::Gen) -> Self {
        Self {
            mask: arb::Arb::arb(g),
            vals: g.bytes(24),
        }
    }
}

/// The generator of arbitrary values moved to the crate root ([`crate::arb`]), shared by every
/// program's declarations; this path stays for the v4 modules' tests.
#[cfg(test)]
pub(crate) use crate::arb;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{from_bytes, to_bytes};
    use proptest::prelude::*;

    #[test]
    fn special_stateids_have_the_rfc_layout() {
        let b = to_bytes(&Stateid4::READ_BYPASS);
        assert_eq!(&b[..], &[0xff; 16][..]);
        let b = to_bytes(&Stateid4::CURRENT);
        assert_eq!(&b[..4], &[0, 0, 0, 1]);
        assert_eq!(&b[4..], &[0; 12][..]);
        assert!(Stateid4::INVALID.is_special());
        assert!(!Stateid4 {
            seqid: 1,
            other: [1; 12]
        }
        .is_special());
    }

    #[test]
    fn unknown_status_survives_and_names_are_the_rfcs() {
        let s: Nfsstat4 = from_bytes(&to_bytes(&Nfsstat4(99_999))).unwrap();
        assert_eq!(s, Nfsstat4(99_999));
        assert_eq!(s.name(), "UNKNOWN");
        assert_eq!(Nfsstat4::TOO_MANY_OPS.name(), "NFS4ERR_TOO_MANY_OPS");
        assert_eq!(Nfsstat4::OP_ILLEGAL.0, 10044);
        assert_eq!(Nfsstat4::OFFLOAD_NO_REQS.0, 10094);
    }

    #[test]
    fn bitmap_bits_and_order() {
        let b = Bitmap4::from_bits(&[55, 1, 33, 4]);
        assert_eq!(b.0, vec![(1 << 1) | (1 << 4), (1 << 1) | (1 << 23)]);
        assert_eq!(b.iter().collect::<Vec<_>>(), vec![1, 4, 33, 55]);
        assert!(b.contains(33) && !b.contains(32) && !b.contains(200));
        assert!(Bitmap4(vec![2, 0]).same_bits(&Bitmap4(vec![2])));
    }

    #[test]
    fn bitmap_too_long_is_refused() {
        let mut w = Writer::new();
        w.put_array(&[0u32; MAX_BITMAP_WORDS + 1]);
        assert!(matches!(
            from_bytes::<Bitmap4>(&w.into_bytes()),
            Err(DecodeError::TooLong {
                what: "bitmap4",
                ..
            })
        ));
    }

    #[test]
    fn oversize_handle_and_name_are_refused() {
        let fh = Bytes::from(vec![1u8; FHSIZE + 1]);
        let mut w = Writer::new();
        w.put_opaque(&fh);
        assert!(matches!(
            from_bytes::<NfsFh4>(&w.into_bytes()),
            Err(DecodeError::TooLong { .. })
        ));
        let mut w = Writer::new();
        w.put_opaque(&vec![b'a'; MAX_NAME_WIRE + 1]);
        assert!(matches!(
            from_bytes::<Component4>(&w.into_bytes()),
            Err(DecodeError::TooLong { .. })
        ));
        // A name the server must judge (NFS4ERR_BADNAME) is still legal XDR.
        let n = Component4::from(&b"a/.."[..]);
        assert_eq!(from_bytes::<Component4>(&to_bytes(&n)).unwrap(), n);
    }

    #[test]
    fn settime_unknown_how_is_bad_xdr() {
        let b = Bytes::from_static(&[0, 0, 0, 2]);
        assert!(matches!(
            from_bytes::<Settime4>(&b),
            Err(DecodeError::BadDiscriminant { .. })
        ));
    }

    proptest! {
        #[test]
        fn basic_types_round_trip(seed in any::<u64>()) {
            let mut g = arb::Gen::new(seed);
            fn rt<T: Pack + Unpack + PartialEq + std::fmt::Debug + arb::Arb>(g: &mut arb::Gen) {
                let v = T::arb(g);
                assert_eq!(from_bytes::<T>(&to_bytes(&v)).unwrap(), v);
            }
            rt::<Stateid4>(&mut g);
            rt::<Settime4>(&mut g);
            rt::<Fattr4>(&mut g);
            rt::<Bitmap4>(&mut g);
            rt::<Netaddr4>(&mut g);
            rt::<Pathname4>(&mut g);
            rt::<Nfsace4>(&mut g);
        }
    }
}
