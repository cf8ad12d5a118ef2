//! The NFSv4.1 wire suite (`../nfs4_wire/`) over a Ceph export: the same test modules, each
//! test's server exporting its own directory of a private one-node Ceph cluster through
//! `sluice_ceph::CephFs`, and every check the tests make "on disk" made through a ceph-fuse
//! mount of the same file system, another Ceph client (`support/ceph.rs`). This target's name
//! ends in `_ceph`, which is what makes `support` serve Ceph ([`support::BACKEND`]).
//!
//! One cluster (with a manager, so that FSSTAT has sizes) and one ceph-fuse mount serve the
//! whole process; they are started by the first test and stopped when the process exits.
//! Needs root, /dev/fuse and the ceph packages (`scripts/install-deps.sh`); never skips.
//!
//! # Not run over Ceph
//! Every module of `../nfs4_wire/` runs here but these, each for the reason given:
//! * `splice` (`a_last_read_is_spliced_and_a_1_mib_write_lands`): splicing a READ from the
//!   page cache is LocalFs's fast path; a CephFs export reads through libcephfs, by the data
//!   path's choice, so nothing is spliced.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

#[path = "../nfs4_wire/common.rs"]
mod common;
use common::*;

#[path = "../nfs4_wire/basics.rs"]
mod basics;
#[path = "../nfs4_wire/open_state.rs"]
mod open_state;
#[path = "../nfs4_wire/ops.rs"]
mod ops;
#[path = "../nfs4_wire/removed_while_open.rs"]
mod removed_while_open;
#[path = "../nfs4_wire/sessions.rs"]
mod sessions;
#[path = "../nfs4_wire/tshark.rs"]
mod tshark;

/// Every module of `../nfs4_wire/` runs here or is named above with its reason.
#[test]
fn every_module_of_the_local_suite_runs_here_or_is_excluded_with_a_reason() {
    support::ceph::every_module_runs_or_is_excluded("nfs4_wire", include_str!("main.rs"));
}
