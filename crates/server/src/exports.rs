//! What every protocol version's handlers share about exports: the export list entry (its file
//! system and client rules), the caller an export sees for a call's credentials (squashing,
//! anonymous ids), and the bound on a directory listing's reply. NFSv3 (`nfs.rs`), MOUNT
//! (`mountd.rs`) and NFSv4 (`nfs4/`) all use these; none of them is any version's own.

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

/// The credentials a call runs with: AUTH_SYS ids, or the export's anonymous ids for AUTH_NONE,
/// then squashed by the export's rules.
pub fn caller_for(cred: &Credentials, opts: &ExportOptions) -> Caller {
    let c = match cred {
        Credentials::Sys(a) => Cred::new(a.uid, a.gid).with_groups(&a.gids),
        Credentials::None => Cred::new(opts.anonuid, opts.anongid),
    };
    Caller::new(&c, opts)
}
