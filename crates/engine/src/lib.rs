//! The I/O policies of sluice, as pure state machines.
//!
//! Every module here decides *what* to do with bytes on the wire or on disk and *when*; none of
//! them performs I/O, reads a clock or draws a random number. Time enters as a `now: Instant`
//! argument, completions enter as method calls, and decisions leave as returned values
//! (`FetchRequest`s, `FlushOp`s, wake-up deadlines). The same code is driven by tokio in the
//! client and server crates and by a seeded virtual-time simulator in tests.
//!
//! | module          | side   | question it answers                                             |
//! |-----------------|--------|-----------------------------------------------------------------|
//! | [`seqtable`]    | server | is this file being read/written sequentially, and how strongly? |
//! | [`readahead`]   | client | what should be fetched now, and how far ahead of the reader?    |
//! | [`writebehind`] | server | which UNSTABLE writes are flushed together, and when?            |
//! | [`writewindow`] | client | how many UNSTABLE WRITEs should one writer keep in flight?       |
//! | [`pool`]        | both   | how many fixed-size chunks are in use, and may one more be?     |
//! | [`readcore`]    | client | what is cached, in flight, awaited; is a reply still current?    |
//! | [`plan`]        | client | which UNSTABLE writes must a COMMIT still cover or be resent?    |
//! | [`trunk`]       | client | is one connection's receive path the limit: open another?       |
//!
//! Each module opens with a design essay; read those before the code.

// Tests build virtual clocks on a real `Instant` base; the library itself never reads a clock
// (enforced by clippy.toml).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod plan;
pub mod pool;
pub mod readahead;
pub mod readcore;
pub mod seqtable;
pub mod trunk;
pub mod writebehind;
pub mod writewindow;

#[cfg(test)]
mod testutil;

/// One KiB (1024 bytes); used to spell sizes in configuration defaults.
pub const KIB: u64 = 1024;
/// One MiB (1024 KiB).
pub const MIB: u64 = 1024 * KIB;
