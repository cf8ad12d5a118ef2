//! Issue #2 on the wire: the server spoken to byte by byte, as a client nobody here wrote would.
//!
//! Each test starts its own in-process server (`sluice_server::bind` on 127.0.0.1:0, then
//! `run` on the test's tokio runtime) over its own temporary export and state directory, and
//! talks to it with [`Rpc`], a deliberately small ONC RPC client built from the codecs
//! (`sluice_xdr`) and record marking (`sluice_rpc::record`) only: no call table, no retries, so
//! what the server sends is exactly what the test sees.
//!
//! ```text
//!   test ── Rpc (XDR call, record mark) ──TCP 127.0.0.1──► net ─► service ─► nfs/mountd/portmap
//!        ◄─ reply decoded header + results ◄──────────────┘
//! ```
//! Groups: RPC layer; concurrency on one connection; PORTMAP and MOUNT; all 22 NFSv3
//! procedures; READDIR(PLUS) of 100 000 entries; names; handles; identity and export options;
//! several exports; the open-file cache. Every wait is bounded ([`REPLY_TIMEOUT`]). The server
//! fixture, the client and the typed calls are in `support/` (shared with `hostile.rs`,
//! `backend_errors.rs` and the engine tests).
//!
//! The tests live by role in the files beside this one: `rpc.rs` (the RPC layer and several
//! calls on one connection), `mount.rs` (PORTMAP and MOUNT), `procedures.rs` (the 22
//! procedures), `readdir.rs` (a directory of 100 000 entries), `names_and_handles.rs`,
//! `exports.rs` (identity, export options, several exports) and `open_files.rs` (the
//! open-file cache); the imports and helpers they share are in `common.rs`.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

mod common;
use common::*;

mod exports;
mod mount;
mod names_and_handles;
mod open_files;
mod procedures;
mod readdir;
mod rpc;
