//! What the modules of the v3 wire suite share (they `use super::*`): the imports and the
//! helpers more than one of them uses. The same modules run over a local directory (this
//! directory's `main.rs`) and over Ceph (`../wire_ceph/main.rs`), and both include this file.

pub use crate::support::*;
pub use bytes::Bytes;
pub use sluice_rpc::record;
pub use sluice_server::backend::exports::{parse_exports, ClientMatch, Squash};
pub use sluice_server::ServerConfig;
pub use sluice_xdr::mount3::{self, DirPath, MntRes, Mountstat3};
pub use sluice_xdr::nfs3::*;
pub use sluice_xdr::portmap::{self, Mapping, IPPROTO_TCP};
pub use sluice_xdr::rpc::{AcceptStat, AuthFlavor, AuthStat, MsgHeader, OpaqueAuth, ReplyBody};
pub use sluice_xdr::{Pack, Payload, Reader, Unpack, Writer};
pub use std::collections::{HashMap, HashSet};
pub use std::os::unix::fs::{MetadataExt, PermissionsExt};
pub use std::path::{Path, PathBuf};
pub use std::time::{Duration, Instant};
pub use tokio::io::AsyncWriteExt;

/// Fills `path` with `bytes` of data through the page cache, without syncing it.
pub fn write_dirty(path: &Path, bytes: usize) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let chunk = vec![0x5au8; 1 << 20];
    for _ in 0..bytes / chunk.len() {
        f.write_all(&chunk).unwrap();
    }
}

/// Every entry of a small directory by READDIR: name -> fileid.
pub async fn readdir_all(c: &mut Rpc, dir: &NfsFh3, count: u32) -> HashMap<Vec<u8>, u64> {
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
pub async fn readdirplus_all(
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
