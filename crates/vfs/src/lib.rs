//! The version-neutral file-system layer: what NFSv3 and NFSv4 handlers call, in types of its
//! own ([`types`]), so no protocol's wire types reach the file system and no handler re-maps
//! another protocol's (the model is knfsd's `fs/nfsd/vfs.c`, one layer under `nfs3proc.c` and
//! `nfs4proc.c`). This crate does not depend on the XDR crate: the compiler keeps it neutral.
//!
//! The RPC layer decodes a call, picks the export from the handle ([`handle::export_id_of`]),
//! passes the export gate ([`gate::admit`]: the client's rule, `secure`, squashing) for the
//! [`Caller`] it runs as, and calls one synchronous method of a [`FileSystem`]
//! ([`LocalFs`]) inside `tokio::task::spawn_blocking`. Each method returns neutral results: on
//! failure an [`FsError`] together with the attributes the failure reply carries
//! (`Res<T, F>` = `Result<T, (FsError, F)>`); each protocol maps `FsError` to its status once.
//!
//! ```text
//!          handler (async)                          file system (this crate, blocking)
//!   decode ─► export, gate ─► spawn_blocking ─► LocalFs::op(&caller, &fh, ...)
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
//! * [`types`]: the trait's vocabulary: handles, attributes, before/after pairs, [`FsError`],
//!   the [`Caller`], and each operation's arguments and results. Pure.
//! * [`fs`]: the [`FileSystem`] trait.
//! * [`xattr`]: the vocabulary of its extended-attribute methods (user namespace, RFC 8276):
//!   limits, [`XattrSet`], [`XattrError`]. Pure.
//! * [`memfs`]: [`MemFs`], the same trait in memory with injected faults. Pure.
//! * [`exports`]: export options and `/etc/exports` parsing, squashing. Pure.
//! * [`gate`]: the export gate every protocol calls ([`gate::admit`]): the client's rule,
//!   `secure`, `xprtsec`, squashing; a neutral [`gate::Refusal`] each protocol maps to its
//!   status. Pure.
//! * [`handle`]: the file handle layout, its MAC and the secret in the state directory.
//! * [`creds`]: per-thread fsuid/fsgid/groups switching.
//! * [`openfiles`]: the bounded cache of open descriptors.
//! * [`stats`]: call counters with a latency histogram ([`stats::ProcStats`]), the shape in
//!   which the server reports its calls and a backend the calls it makes beneath
//!   ([`FileSystem::backend_stats`]). Pure.
//! * `iomode`: the cache modes per export (buffered, dontcache, direct) behind READ and WRITE.
//! * `localfs`: [`LocalFs`], which implements [`FileSystem`] directly: the 21 procedures (NULL
//!   needs no backend) and NFSv4.2's range operations: SEEK (`lseek` SEEK_DATA/SEEK_HOLE),
//!   ALLOCATE and DEALLOCATE (`fallocate`), COPY (`copy_file_range`, at most
//!   [`COPY_BYTES_MAX`] a call) and CLONE (`FICLONERANGE`). One file per role: setup, handle
//!   resolution and confinement, permissions, directories, data, and the procedures.
//! * `sys`: one wrapper per system call, and nearly all of the crate's `unsafe`. The other
//!   three blocks: `sync_file_range` in `openfiles`, and two in `iomode` that view a bounce
//!   buffer's aligned pages as bytes.

mod attr;
pub mod creds;
pub mod exports;
pub mod fs;
pub mod gate;
pub mod handle;
mod iomode;
mod localfs;
pub mod memfs;
pub mod openfiles;
pub mod stats;
pub mod syncgate;
mod sys;
pub mod types;
pub mod xattr;

pub use creds::Cred;
pub use exports::{Export, ExportOptions, IoMode, IoModes};
pub use fs::FileSystem;
pub use handle::{export_id_of, ExportId};
pub use localfs::*;
pub use memfs::MemFs;
pub use types::*;
pub use xattr::{XattrError, XattrSet};
