//! MOUNT version 3 (RFC 1813 appendix I) wire types.
//!
//! ```text
//! NULL    void     -> void
//! MNT     dirpath  -> mountres3   (status; on MNT3_OK the root handle and auth flavors)
//! DUMP    void     -> mountlist   (linked list of {hostname, directory})
//! UMNT    dirpath  -> void
//! UMNTALL void     -> void
//! EXPORT  void     -> exports     (linked list of {dir, linked list of group names})
//! ```
//! Every string and list is bounded when decoded: strings by the RFC's MNTPATHLEN/MNTNAMLEN,
//! lists by the `MAX_*` constants below (every list item also consumes record bytes, so a
//! hostile peer cannot make us hold more than a small multiple of its record).

use crate::{DecodeError, Pack, Reader, Result, Unpack, Writer};
use bytes::Bytes;

pub const PROGRAM: u32 = 100005;
pub const VERSION: u32 = 3;

/// RFC 1813 appendix I: MNTPATHLEN, the longest `dirpath`.
pub const MNTPATHLEN: usize = 1024;
/// RFC 1813 appendix I: MNTNAMLEN, the longest `name` (host and group names).
pub const MNTNAMLEN: usize = 255;
/// RFC 1813 appendix I: FHSIZE3, the longest `fhandle3`.
pub const FHSIZE3: usize = 64;

/// Most auth flavors accepted in a MNT reply. The RFC leaves `auth_flavors<>` unbounded; servers
/// send one to three (AUTH_SYS, perhaps RPCSEC_GSS variants), and RFC 5531 defines fewer than 16.
pub const MAX_AUTH_FLAVORS: usize = 32;
/// Most entries accepted in a DUMP reply (mountlist) or an EXPORT reply (exports). Far above any
/// real server's table; only there so a hostile list ends.
pub const MAX_LIST_ENTRIES: usize = 1 << 16;
/// Most group names accepted for one export.
pub const MAX_GROUPS: usize = 1 << 12;

/// Procedure numbers.
pub mod proc_ {
    pub const NULL: u32 = 0;
    pub const MNT: u32 = 1;
    pub const DUMP: u32 = 2;
    pub const UMNT: u32 = 3;
    pub const UMNTALL: u32 = 4;
    pub const EXPORT: u32 = 5;
    /// Names indexed by procedure number (from [`super::PROCS`]).
    pub const NAMES: [&str; 6] = crate::procs::names(&super::TABLE);
}

/// The facts of every MOUNT v3 procedure, indexed by procedure number (see [`crate::procs`]).
/// MNT's reply: status, a handle of at most [`FHSIZE3`] bytes with its length, and at most
/// [`MAX_AUTH_FLAVORS`] flavors with their count. DUMP and EXPORT are lists of server state.
/// MNT and UMNT change the mount list, but it is advisory (RFC 1813 appendix I) and replaying them
/// is harmless, so none is cached as non-idempotent.
pub static PROCS: [crate::procs::ProcInfo; 6] = TABLE;

const TABLE: [crate::procs::ProcInfo; 6] = {
    use crate::procs::{row, ReplyBound::*, TimerClass::Other};
    use proc_::*;
    const MNT_REPLY: u32 = 4 + 4 + FHSIZE3 as u32 + 4 + 4 * MAX_AUTH_FLAVORS as u32;
    [
        row(NULL, "NULL", false, Fixed(0), Other),
        row(MNT, "MNT", false, Fixed(MNT_REPLY), Other),
        row(DUMP, "DUMP", false, Record, Other),
        row(UMNT, "UMNT", false, Fixed(0), Other),
        row(UMNTALL, "UMNTALL", false, Fixed(0), Other),
        row(EXPORT, "EXPORT", false, Record, Other),
    ]
};

/// `mountstat3`; a newtype so that unknown values survive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mountstat3(pub u32);
impl Mountstat3 {
    pub const OK: Self = Self(0);
    pub const PERM: Self = Self(1);
    pub const NOENT: Self = Self(2);
    pub const IO: Self = Self(5);
    pub const ACCES: Self = Self(13);
    pub const NOTDIR: Self = Self(20);
    pub const INVAL: Self = Self(22);
    pub const NAMETOOLONG: Self = Self(63);
    pub const NOTSUPP: Self = Self(10004);
    pub const SERVERFAULT: Self = Self(10006);

    /// The RFC name, e.g. "MNT3ERR_ACCES".
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "MNT3_OK",
            1 => "MNT3ERR_PERM",
            2 => "MNT3ERR_NOENT",
            5 => "MNT3ERR_IO",
            13 => "MNT3ERR_ACCES",
            20 => "MNT3ERR_NOTDIR",
            22 => "MNT3ERR_INVAL",
            63 => "MNT3ERR_NAMETOOLONG",
            10004 => "MNT3ERR_NOTSUPP",
            10006 => "MNT3ERR_SERVERFAULT",
            _ => "MNT3ERR_UNKNOWN",
        }
    }
}
impl Pack for Mountstat3 {
    fn pack(&self, w: &mut Writer) {
        w.put_u32(self.0)
    }
}
impl Unpack for Mountstat3 {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self(r.get_u32()?))
    }
}

/// `dirpath`: an export path of at most [`MNTPATHLEN`] bytes (not interpreted here).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct DirPath(pub Bytes);
impl Pack for DirPath {
    fn pack(&self, w: &mut Writer) {
        w.put_string(&self.0)
    }
}
impl Unpack for DirPath {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self(r.get_string("dirpath", MNTPATHLEN)?))
    }
}

/// `name`: a host or group name of at most [`MNTNAMLEN`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Name(pub Bytes);
impl Pack for Name {
    fn pack(&self, w: &mut Writer) {
        w.put_string(&self.0)
    }
}
impl Unpack for Name {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self(r.get_string("name", MNTNAMLEN)?))
    }
}

/// `mountres3_ok`: the export's root handle (`fhandle3`, at most 64 bytes; the same wire form
/// as `nfs_fh3`) and the auth flavors the client may use, in the server's order of preference.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MntResOk {
    pub fhandle: crate::nfs3::NfsFh3,
    pub auth_flavors: Vec<u32>,
}
impl Pack for MntResOk {
    fn pack(&self, w: &mut Writer) {
        debug_assert!(self.fhandle.0.len() <= FHSIZE3);
        w.put_opaque(&self.fhandle.0);
        w.put_array(&self.auth_flavors);
    }
}
impl Unpack for MntResOk {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            fhandle: crate::nfs3::NfsFh3(r.get_opaque("fhandle3", FHSIZE3)?),
            auth_flavors: r.get_array("auth_flavors", MAX_AUTH_FLAVORS)?,
        })
    }
}

/// `mountres3`: MNT3_OK with the body, or an error status with no body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MntRes {
    Ok(MntResOk),
    /// Never [`Mountstat3::OK`].
    Err(Mountstat3),
}
impl MntRes {
    pub fn status(&self) -> Mountstat3 {
        match self {
            MntRes::Ok(_) => Mountstat3::OK,
            MntRes::Err(s) => *s,
        }
    }
}
impl Pack for MntRes {
    fn pack(&self, w: &mut Writer) {
        match self {
            MntRes::Ok(ok) => {
                Mountstat3::OK.pack(w);
                ok.pack(w);
            }
            MntRes::Err(s) => {
                debug_assert_ne!(*s, Mountstat3::OK);
                s.pack(w);
            }
        }
    }
}
impl Unpack for MntRes {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        let s = Mountstat3::unpack(r)?;
        if s == Mountstat3::OK {
            Ok(MntRes::Ok(MntResOk::unpack(r)?))
        } else {
            Ok(MntRes::Err(s))
        }
    }
}

/// `mountbody` without its link: one entry of a DUMP reply.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MountBody {
    pub hostname: Name,
    pub directory: DirPath,
}
impl Pack for MountBody {
    fn pack(&self, w: &mut Writer) {
        self.hostname.pack(w);
        self.directory.pack(w);
    }
}
impl Unpack for MountBody {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            hostname: Name::unpack(r)?,
            directory: DirPath::unpack(r)?,
        })
    }
}

/// `mountlist`: the DUMP reply, as the XDR linked list of [`MountBody`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MountList(pub Vec<MountBody>);
impl Pack for MountList {
    fn pack(&self, w: &mut Writer) {
        w.put_list(&self.0)
    }
}
impl Unpack for MountList {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self(r.get_list("mountlist", MAX_LIST_ENTRIES)?))
    }
}

/// `exportnode` without its link: an exported directory and the groups (host names, netgroups
/// or wildcards) allowed to mount it; no groups means everyone.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExportNode {
    pub dir: DirPath,
    pub groups: Vec<Name>,
}
impl Pack for ExportNode {
    fn pack(&self, w: &mut Writer) {
        self.dir.pack(w);
        w.put_list(&self.groups);
    }
}
impl Unpack for ExportNode {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            dir: DirPath::unpack(r)?,
            groups: r.get_list("groups", MAX_GROUPS)?,
        })
    }
}

/// `exports`: the EXPORT reply, as the XDR linked list of [`ExportNode`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Exports(pub Vec<ExportNode>);
impl Pack for Exports {
    fn pack(&self, w: &mut Writer) {
        w.put_list(&self.0)
    }
}
impl Unpack for Exports {
    fn unpack(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self(r.get_list("exports", MAX_LIST_ENTRIES)?))
    }
}

/// The arguments of any MOUNT3 procedure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Args {
    Null,
    Mnt(DirPath),
    Dump,
    Umnt(DirPath),
    Umntall,
    Export,
}

/// The results of any MOUNT3 procedure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Res {
    Null,
    Mnt(MntRes),
    Dump(MountList),
    Umnt,
    Umntall,
    Export(Exports),
}

impl Args {
    pub fn proc_(&self) -> u32 {
        match self {
            Args::Null => proc_::NULL,
            Args::Mnt(_) => proc_::MNT,
            Args::Dump => proc_::DUMP,
            Args::Umnt(_) => proc_::UMNT,
            Args::Umntall => proc_::UMNTALL,
            Args::Export => proc_::EXPORT,
        }
    }
}

impl Res {
    pub fn proc_(&self) -> u32 {
        match self {
            Res::Null => proc_::NULL,
            Res::Mnt(_) => proc_::MNT,
            Res::Dump(_) => proc_::DUMP,
            Res::Umnt => proc_::UMNT,
            Res::Umntall => proc_::UMNTALL,
            Res::Export(_) => proc_::EXPORT,
        }
    }
}

impl Pack for Args {
    fn pack(&self, w: &mut Writer) {
        match self {
            Args::Mnt(p) | Args::Umnt(p) => p.pack(w),
            Args::Null | Args::Dump | Args::Umntall | Args::Export => {}
        }
    }
}

impl Pack for Res {
    fn pack(&self, w: &mut Writer) {
        match self {
            Res::Mnt(m) => m.pack(w),
            Res::Dump(l) => l.pack(w),
            Res::Export(e) => e.pack(w),
            Res::Null | Res::Umnt | Res::Umntall => {}
        }
    }
}

/// Decodes the arguments of procedure `proc_` (server side); trailing bytes are left in `r`.
pub fn decode_args(proc_: u32, r: &mut Reader<'_>) -> Result<Args> {
    Ok(match proc_ {
        proc_::NULL => Args::Null,
        proc_::MNT => Args::Mnt(DirPath::unpack(r)?),
        proc_::DUMP => Args::Dump,
        proc_::UMNT => Args::Umnt(DirPath::unpack(r)?),
        proc_::UMNTALL => Args::Umntall,
        proc_::EXPORT => Args::Export,
        v => return Err(unknown_proc(v)),
    })
}

/// Decodes the results of procedure `proc_` (client side).
pub fn decode_res(proc_: u32, r: &mut Reader<'_>) -> Result<Res> {
    Ok(match proc_ {
        proc_::NULL => Res::Null,
        proc_::MNT => Res::Mnt(MntRes::unpack(r)?),
        proc_::DUMP => Res::Dump(MountList::unpack(r)?),
        proc_::UMNT => Res::Umnt,
        proc_::UMNTALL => Res::Umntall,
        proc_::EXPORT => Res::Export(Exports::unpack(r)?),
        v => return Err(unknown_proc(v)),
    })
}

fn unknown_proc(v: u32) -> DecodeError {
    DecodeError::BadDiscriminant {
        what: "MOUNT3 procedure",
        value: v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs3::NfsFh3;
    use crate::{from_bytes, to_bytes};
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn bytes(max: usize) -> impl Strategy<Value = Bytes> {
        vec(any::<u8>(), 0..=max).prop_map(Bytes::from)
    }
    fn dirpath() -> impl Strategy<Value = DirPath> {
        bytes(40).prop_map(DirPath)
    }
    fn name() -> impl Strategy<Value = Name> {
        bytes(20).prop_map(Name)
    }
    fn args() -> impl Strategy<Value = Args> {
        prop_oneof![
            Just(Args::Null),
            dirpath().prop_map(Args::Mnt),
            Just(Args::Dump),
            dirpath().prop_map(Args::Umnt),
            Just(Args::Umntall),
            Just(Args::Export),
        ]
    }
    fn res() -> impl Strategy<Value = Res> {
        let ok = (bytes(FHSIZE3), vec(any::<u32>(), 0..4)).prop_map(|(fh, auth_flavors)| {
            MntRes::Ok(MntResOk {
                fhandle: NfsFh3(fh),
                auth_flavors,
            })
        });
        let err = (1..u32::MAX).prop_map(|s| MntRes::Err(Mountstat3(s)));
        let body = (name(), dirpath()).prop_map(|(hostname, directory)| MountBody {
            hostname,
            directory,
        });
        let export =
            (dirpath(), vec(name(), 0..4)).prop_map(|(dir, groups)| ExportNode { dir, groups });
        prop_oneof![
            Just(Res::Null),
            prop_oneof![ok, err].prop_map(Res::Mnt),
            vec(body, 0..5).prop_map(|l| Res::Dump(MountList(l))),
            Just(Res::Umnt),
            Just(Res::Umntall),
            vec(export, 0..5).prop_map(|e| Res::Export(Exports(e))),
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
    fn mnt_reply_golden() {
        let res = MntRes::Ok(MntResOk {
            fhandle: NfsFh3(Bytes::from_static(&[0xab, 0xcd])),
            auth_flavors: vec![1],
        });
        #[rustfmt::skip]
        let want: &[u8] = &[
            0, 0, 0, 0,                     // MNT3_OK
            0, 0, 0, 2, 0xab, 0xcd, 0, 0,   // fhandle3
            0, 0, 0, 1, 0, 0, 0, 1,         // auth_flavors<>: [AUTH_SYS]
        ];
        assert_eq!(&to_bytes(&res)[..], want);
        assert_eq!(
            from_bytes::<MntRes>(&Bytes::from_static(want)).unwrap(),
            res
        );
        assert_eq!(
            &to_bytes(&MntRes::Err(Mountstat3::ACCES))[..],
            &[0, 0, 0, 13]
        );
    }

    #[test]
    fn exports_golden() {
        let e = Exports(vec![ExportNode {
            dir: DirPath(Bytes::from_static(b"/srv")),
            groups: vec![Name(Bytes::from_static(b"*"))],
        }]);
        #[rustfmt::skip]
        let want: &[u8] = &[
            0, 0, 0, 1,                             // an export follows
            0, 0, 0, 4, b'/', b's', b'r', b'v',     //   ex_dir
            0, 0, 0, 1,                             //   a group follows
            0, 0, 0, 1, b'*', 0, 0, 0,              //     gr_name
            0, 0, 0, 0,                             //   no more groups
            0, 0, 0, 0,                             // no more exports
        ];
        assert_eq!(&to_bytes(&e)[..], want);
        assert_eq!(from_bytes::<Exports>(&Bytes::from_static(want)).unwrap(), e);
    }

    #[test]
    fn overlong_path_is_refused() {
        let p = DirPath(Bytes::from(vec![b'a'; MNTPATHLEN + 1]));
        assert!(matches!(
            from_bytes::<DirPath>(&to_bytes(&p)),
            Err(DecodeError::TooLong { .. })
        ));
    }
}
