//! The NFSv3, MOUNT and RPC wire suite (`../wire/`) over a Ceph export: the same test modules,
//! each test's server exporting its own directory of a private one-node Ceph cluster through
//! `sluice_ceph::CephFs`, and every check the tests make "on disk" made through a ceph-fuse
//! mount of the same file system, another Ceph client (`support/ceph.rs`). This target's name
//! ends in `_ceph`, which is what makes `support` serve Ceph ([`support::BACKEND`]).
//!
//! One cluster (with a manager, so that FSSTAT has sizes) and one ceph-fuse mount serve the
//! whole process; they are started by the first test and stopped when the process exits.
//! Needs root, /dev/fuse and the ceph packages (`scripts/install-deps.sh`); never skips.
//!
//! # Not run over Ceph
//! Every module of `../wire/` runs here but these, each for the reason given:
//! * `readdir` (`readdir_and_readdirplus_of_100000_entries_list_each_exactly_once`): creating
//!   its 100 000 files through ceph-fuse (about a thousand a second) and listing them four
//!   times took 357 s on a one-node test cluster on 2 cores, several times this suite's budget.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

#[path = "../wire/common.rs"]
mod common;
use common::*;

#[path = "../wire/exports.rs"]
mod exports;
#[path = "../wire/mount.rs"]
mod mount;
#[path = "../wire/names_and_handles.rs"]
mod names_and_handles;
#[path = "../wire/open_files.rs"]
mod open_files;
#[path = "../wire/procedures.rs"]
mod procedures;
#[path = "../wire/rpc.rs"]
mod rpc;

/// Every module of `../wire/` runs here or is named above with its reason.
#[test]
fn every_module_of_the_local_suite_runs_here_or_is_excluded_with_a_reason() {
    support::ceph::every_module_runs_or_is_excluded("wire", include_str!("main.rs"));
}
