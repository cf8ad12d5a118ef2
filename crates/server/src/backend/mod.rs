//! The backend: NFSv3 semantics over a real exported directory.
//!
//! The RPC layer decodes a call, picks the export from the handle ([`handle::export_id_of`]),
//! works out the caller's credentials for this client ([`exports::Export::options_for`] and
//! [`Caller::new`], which squashes), and calls one synchronous method of [`LocalFs`] inside
//! `tokio::task::spawn_blocking`. Each method returns what the procedure's reply needs: NFS types
//! from `sluice_xdr::nfs3`, and on failure an [`Nfsstat3`](sluice_xdr::nfs3::Nfsstat3) together
//! with the attributes the failure reply carries (`Res<T, F>` = `Result<T, (Nfsstat3, F)>`).
//!
//! ```text
//!          handler (async)                          backend (this module, blocking)
//!   decode ─► export, Caller ─► spawn_blocking ─► LocalFs::op(&caller, &fh, ...)
//!                                                   │ 1. resolve handle as root     (handle.rs)
//!                                                   │    MAC, open_by_handle_at, confinement
//!                                                   │ 2. pre-op attributes           (attr.rs)
//!                                                   │ 3. CredGuard: act as the client (creds.rs)
//!                                                   │    *at() system calls, the kernel checks
//!                                                   │ 4. post-op attributes
//!   encode ◄───────────────────────────────────────┘    READ/WRITE/COMMIT via the fd cache
//!                                                        (openfiles.rs)
//! ```
//!
//! # Modules
//! * [`exports`]: export options and `/etc/exports` parsing, squashing. Pure.
//! * [`handle`]: the file handle layout, its MAC and the secret in the state directory.
//! * [`creds`]: per-thread fsuid/fsgid/groups switching.
//! * [`openfiles`]: the bounded cache of open descriptors.
//! * `iomode`: the cache modes per export (buffered, dontcache, direct) behind READ and WRITE.
//! * `localfs`: [`LocalFs`], the 21 procedures (NULL needs no backend).
//! * `sys`: the only place with `unsafe`: one wrapper per system call.

mod attr;
pub mod creds;
pub mod exports;
pub mod handle;
mod iomode;
mod localfs;
pub mod openfiles;
mod sys;

pub use creds::Cred;
pub use exports::{Export, ExportOptions, IoMode, IoModes};
pub use handle::{export_id_of, ExportId};
pub use localfs::*;
