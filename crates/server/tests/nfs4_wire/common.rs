//! What the modules of the v4.1 wire suite share (they `use super::*`): the imports and the
//! helpers more than one of them uses. The same modules run over a local directory (this
//! directory's `main.rs`) and over Ceph (`../nfs4_wire_ceph/main.rs`), and both include this file.

pub use crate::support::nfs4::*;
pub use crate::support::{auth_sys, call_message, parse_reply, rw, TestServer, NFS, REPLY_TIMEOUT};
pub use bytes::Bytes;
pub use sluice_xdr::nfs4::attrs::num;
pub use sluice_xdr::nfs4::ops::{
    AccessArgs, CommitArgs, CreateArgs, Createtype4, NfsArgop4, NfsResop4, OpenDowngradeArgs,
    Opnum4, ReadArgs, ReaddirArgs, RenameArgs, Res4, SetattrArgs, StateidList, WriteArgs,
    OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_ACCESS_WRITE,
    OPEN4_SHARE_DENY_NONE, OPEN4_SHARE_DENY_READ, OPEN4_SHARE_DENY_WRITE,
};
pub use sluice_xdr::nfs4::{
    self, Bitmap4, Ftype4, Linktext4, NfsFh4, Nfsstat4, StableHow4, Stateid4,
};
pub use sluice_xdr::rpc::{AcceptStat, OpaqueAuth, ReplyBody};
pub use std::time::Duration;

pub fn mkdir_op(name: &str) -> NfsArgop4 {
    NfsArgop4::Create(CreateArgs {
        objtype: Createtype4::Dir,
        objname: component(name),
        createattrs: mode_attrs(0o755),
    })
}

pub fn read_op(stateid: Stateid4) -> NfsArgop4 {
    NfsArgop4::Read(ReadArgs {
        stateid,
        offset: 0,
        count: 4096,
    })
}
