//! What every protocol version's handlers share about exports: the export list entry (its file
//! system and client rules), the identity a call brings to the export gate ([`gate::admit`], in
//! the version-neutral layer), and the bound on a directory listing's reply. NFSv3 (`nfs.rs`),
//! MOUNT (`mountd.rs`) and NFSv4 (`nfs4/`) all use these; none of them is any version's own.

use crate::backend::gate;
use crate::backend::{Caller, Cred, Export, ExportOptions, FileSystem};
use sluice_rpc::server::Credentials;
use std::sync::Arc;

/// Largest READDIR/READDIRPLUS reply built, whatever the client asks (bounds server memory per
/// call; 1 MiB is what Linux clients ask for at most).
pub const READDIR_REPLY_BYTES_MAX: usize = 1 << 20;

/// One export: its file system (a [`LocalFs`](crate::backend::LocalFs) in production; any
/// [`FileSystem`], e.g. an in-memory one, in tests) and its client rules.
pub struct ExportEntry {
    pub fs: Arc<dyn FileSystem>,
    pub export: Export,
}

/// The identity a call claims, for the export gate ([`gate::admit`]): AUTH_SYS ids, or none
/// for AUTH_NONE (the gate gives it the export's anonymous ids).
pub fn identity(cred: &Credentials) -> Option<Cred> {
    match cred {
        Credentials::Sys(a) => Some(Cred::new(a.uid, a.gid).with_groups(&a.gids)),
        Credentials::None => None,
    }
}

/// The credentials a call runs with under one client rule: AUTH_SYS ids, or the rule's
/// anonymous ids for AUTH_NONE, then squashed ([`gate::caller`], what the gate admits with).
pub fn caller_for(cred: &Credentials, opts: &ExportOptions) -> Caller {
    gate::caller(opts, identity(cred).as_ref())
}
