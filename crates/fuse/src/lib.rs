//! `sluice mount`: an NFS export (v3, 4.1 or 4.2) as a local filesystem through FUSE (issues
//! #3, #15).
//!
//! ```text
//!   kernel VFS ──/dev/fuse──► fuser session thread ──► fuse.rs (SluiceFuse: callbacks → tasks)
//!                                                          │ tokio runtime
//!                                                          ▼
//!                                       fs.rs (Fs: inodes, attribute/name caches, open files)
//!                                                          │
//!                                       sluice_client::OpenFile: one File for both versions
//!                                         (autotuned
//!                                         readahead, write-behind + COMMIT: cp and cat's path),
//!                                         neutral attributes with the change attribute
//!                                       Arc<dyn sluice_client::Namespace>: the v3 Client or the
//!                                         v4::Client (session, OPEN/CLOSE, LOCK/LOCKU), chosen
//!                                         by sluice_client::connect as for every command
//! ```
//!
//! - [`cache`]: the pure attribute-timeout policy (acregmin/acregmax/acdirmin/acdirmax) and the
//!   change test: the NFSv4 change attribute where the server has one, size and mtime where it
//!   does not (NFSv3); a change drops the kernel's cached pages at the next open.
//! - [`fs`]: the async filesystem, testable without a kernel.
//! - [`fuse`]: translation of `fuser` callbacks, nothing more.
//! - [`mount`]: [`MountArgs`], [`run`] and [`umount`] for the `sluice` binary.
//!
//! Mounting uses `fuser`'s pure-Rust mount (no libfuse): as root it calls mount(2) on
//! /dev/fuse directly, otherwise it runs the setuid `fusermount3` from the fuse3 package.

pub mod cache;
pub mod fs;
pub mod fuse;
pub mod mount;

pub use cache::AttrCacheConfig;
pub use fs::{Fs, FsConfig};
pub use mount::{mount, run, umount, MountArgs, MountError, Mounted, TlsArgs};
