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
//! open-file cache); the helpers more than one of them uses are at the end of this file.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

use bytes::Bytes;
use sluice_rpc::record::{self};
use sluice_server::backend::exports::{parse_exports, ClientMatch, Squash};
use sluice_server::ServerConfig;
use sluice_xdr::mount3::{self, DirPath, MntRes, Mountstat3};
use sluice_xdr::nfs3::*;
use sluice_xdr::portmap::{self, Mapping, IPPROTO_TCP};
use sluice_xdr::rpc::{AcceptStat, AuthFlavor, AuthStat, MsgHeader, OpaqueAuth, ReplyBody};
use sluice_xdr::{Pack, Payload, Reader, Unpack, Writer};
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::*;
use tokio::io::AsyncWriteExt;

mod exports;
mod mount;
mod names_and_handles;
mod open_files;
mod procedures;
mod readdir;
mod rpc;

/// Fills `path` with `bytes` of data through the page cache, without syncing it.
fn write_dirty(path: &Path, bytes: usize) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let chunk = vec![0x5au8; 1 << 20];
    for _ in 0..bytes / chunk.len() {
        f.write_all(&chunk).unwrap();
    }
}

/// Every entry of a small directory by READDIR: name -> fileid.
async fn readdir_all(c: &mut Rpc, dir: &NfsFh3, count: u32) -> HashMap<Vec<u8>, u64> {
    let mut out = HashMap::new();
    let mut cookie = 0;
    let mut verf = [0; 8];
    loop {
        let r = ok(op!(
            c,
            Readdir,
            ReaddirArgs {
                dir: dir.clone(),
                cookie,
                cookieverf: verf,
                count,
            }
        ));
        verf = r.cookieverf;
        for e in &r.entries {
            assert!(
                out.insert(e.name.to_vec(), e.fileid).is_none(),
                "listed twice"
            );
            cookie = e.cookie;
        }
        if r.eof {
            return out;
        }
    }
}

/// Every entry of a small directory by READDIRPLUS: name -> (attributes, handle).
async fn readdirplus_all(
    c: &mut Rpc,
    dir: &NfsFh3,
    count: u32,
) -> HashMap<Vec<u8>, (PostOpAttr, PostOpFh3)> {
    let mut out = HashMap::new();
    let mut cookie = 0;
    let mut verf = [0; 8];
    loop {
        let r = ok(op!(
            c,
            Readdirplus,
            ReaddirplusArgs {
                dir: dir.clone(),
                cookie,
                cookieverf: verf,
                dircount: count,
                maxcount: count,
            }
        ));
        verf = r.cookieverf;
        for e in r.entries {
            cookie = e.cookie;
            assert!(
                out.insert(e.name.to_vec(), (e.name_attributes, e.name_handle))
                    .is_none(),
                "listed twice"
            );
        }
        if r.eof {
            return out;
        }
    }
}
