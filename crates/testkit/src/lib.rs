//! Test support that every crate's tests can reach: it depends on no other sluice crate, so
//! any crate may take it as a (dev-)dependency without a cycle.
//!
//! | module   | what                                                                     |
//! |----------|--------------------------------------------------------------------------|
//! | [`seed`] | one way to pick a seed, print it first and replay it from `SLUICE_SEED`  |
//! | [`ceph`] | a private one-node Ceph cluster, ceph-fuse mounts, one cluster per process |

pub mod ceph;
pub mod seed;
