//! The CephFS backend: sluice serving a directory of a Ceph file system, so that several sluice
//! heads can serve one file system (scale-out runs on Ceph's distributed engine, not ours).
//!
//! Foreign code stays here, out of `sluice_vfs`: the version-neutral layer knows only its
//! [`FileSystem`](sluice_vfs::FileSystem) trait, which [`CephFs`] implements.
//!
//! # Modules
//! * `ffi`: the libcephfs calls used, as a table of function pointers filled by `dlopen` when
//!   the first Ceph export is configured (a binary without Ceph installed runs as before).
//! * `mount`: [`CephMount`], one libcephfs session: bounded mount time, reclaim after a
//!   restart ([`Reclaim`]), the MDS's cache callbacks, and per-call counts, failures and
//!   latency ([`CephStats`], shown by `sluice stats` and `/metrics` through
//!   `FileSystem::backend_stats`).
//! * `release`: the MDS's cache-pressure requests (`ino_release_cb`), handed from libcephfs's
//!   callback thread to the open-file cache, which closes what it holds of those inodes.
//! * `identity`: the session's uuid for reclaim, stable per node (a node id kept in the state
//!   directory) and export ([`default_session_uuid`]).
//! * `cephfs`: [`CephFs`], the trait over `ceph_ll_*`: handles from (ino, snapid) with a MAC,
//!   attributes from `ceph_statx` with Ceph's change counter, open files and directory
//!   streams kept between calls ([`OpenCacheConfig`], [`OpenCacheStats`]), and the NFSv4
//!   server's byte-range locks taken in Ceph too (`FileSystem::lock` and its kin over
//!   `ceph_ll_setlk` and `ceph_ll_getlk`, so other Ceph clients see them; [`CephFs::set_lock`]
//!   for one lock of its own). No delegation is backed by Ceph yet, so none is granted on this
//!   backend.

mod cephfs;
pub mod ffi;
mod identity;
mod mount;
mod release;

pub use cephfs::{
    CephFs, CephFsConfig, CephLock, IdleLimits, OpenCacheConfig, OpenCacheStats, OPEN_DIRS_DEFAULT,
    OPEN_FILES_DEFAULT,
};
pub use identity::{default_session_uuid, load_or_create_node_id, session_uuid, NODE_ID_FILE};
pub use mount::{
    CallKind, CephConfig, CephError, CephMount, CephStats, Reclaim, MOUNT_TIMEOUT_DEFAULT,
};
