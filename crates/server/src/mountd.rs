//! MOUNT v3 (RFC 1813 appendix I): hands out export root handles and keeps the mount list.
//!
//! MNT accepts an export's path or a directory below it (as knfsd's mountd does), checks the
//! client's address against the export's rules, and answers with the directory's handle and the
//! flavors the server accepts (AUTH_SYS, then AUTH_NONE). The mount list behind DUMP is advisory,
//! as in every implementation, and bounded.

use crate::net::Peer;
use crate::nfs::{caller_for, ExportEntry};
use bytes::Bytes;
use sluice_rpc::server::Credentials;
use sluice_xdr::mount3::{
    Args, DirPath, ExportNode, Exports, MntRes, MntResOk, MountBody, MountList, Mountstat3, Name,
};
use sluice_xdr::{Pack, Writer};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Entries kept in the mount list; the oldest is forgotten past this.
pub const MOUNT_LIST_MAX: usize = 4096;

pub struct Mountd {
    pub exports: Arc<Vec<ExportEntry>>,
    mounts: Mutex<Vec<(String, String)>>,
}

impl Mountd {
    pub fn new(exports: Arc<Vec<ExportEntry>>) -> Self {
        Mountd {
            exports,
            mounts: Mutex::new(Vec::new()),
        }
    }

    pub async fn handle(&self, peer: &Peer, cred: &Credentials, args: Args, w: &mut Writer) {
        match args {
            Args::Null => {}
            Args::Mnt(path) => {
                let res = self.mnt(peer, cred, &path).await;
                if let MntRes::Ok(_) = res {
                    self.remember(peer, &path);
                }
                res.pack(w);
            }
            Args::Dump => {
                let list = self.mounts.lock().expect("mount list lock");
                MountList(
                    list.iter()
                        .map(|(h, d)| MountBody {
                            hostname: Name(Bytes::copy_from_slice(h.as_bytes())),
                            directory: DirPath(Bytes::copy_from_slice(d.as_bytes())),
                        })
                        .collect(),
                )
                .pack(w);
            }
            Args::Umnt(path) => {
                let host = peer.addr.ip().to_string();
                let dir = String::from_utf8_lossy(&path.0).into_owned();
                self.mounts
                    .lock()
                    .expect("mount list lock")
                    .retain(|(h, d)| !(h == &host && d == &dir));
            }
            Args::Umntall => {
                let host = peer.addr.ip().to_string();
                self.mounts
                    .lock()
                    .expect("mount list lock")
                    .retain(|(h, _)| h != &host);
            }
            Args::Export => Exports(
                self.exports
                    .iter()
                    .map(|e| ExportNode {
                        dir: DirPath(Bytes::copy_from_slice(
                            e.export.path.as_os_str().as_encoded_bytes(),
                        )),
                        groups: e
                            .export
                            .clients
                            .iter()
                            .map(|c| Name(Bytes::from(client_label(&c.client))))
                            .collect(),
                    })
                    .collect(),
            )
            .pack(w),
        }
    }

    async fn mnt(&self, peer: &Peer, cred: &Credentials, path: &DirPath) -> MntRes {
        let Ok(text) = std::str::from_utf8(&path.0) else {
            return MntRes::Err(Mountstat3::NOENT);
        };
        let wanted = normalize(Path::new(text));
        // The export whose path is the longest prefix of the requested one.
        let Some((entry, rest)) = self
            .exports
            .iter()
            .filter_map(|e| {
                wanted
                    .strip_prefix(&e.export.path)
                    .ok()
                    .map(|rest| (e, rest.to_path_buf()))
            })
            .max_by_key(|(e, _)| e.export.path.as_os_str().len())
        else {
            return MntRes::Err(Mountstat3::NOENT);
        };
        let Some(opts) = entry.export.options_for(peer.addr.ip()) else {
            tracing::warn!(addr = %peer.addr, path = text, "MNT refused: client not allowed by the export's rules");
            return MntRes::Err(Mountstat3::ACCES);
        };
        let caller = caller_for(cred, opts);
        let fs = entry.fs.clone();
        let walked = tokio::task::spawn_blocking(move || {
            let mut fh = fs.root_handle();
            for comp in rest.components() {
                let Component::Normal(name) = comp else {
                    continue;
                };
                match fs.lookup(&caller, &fh, name.as_encoded_bytes()) {
                    Ok(l) if l.attr.ftype == crate::backend::FileType::Directory => fh = l.fh,
                    Ok(_) => return Err(Mountstat3::NOTDIR),
                    Err((s, _)) => return Err(Mountstat3(crate::nfs::map::status(s).0)),
                }
            }
            Ok(fh)
        })
        .await;
        match walked {
            Ok(Ok(fh)) => MntRes::Ok(MntResOk {
                fhandle: crate::nfs::map::fh3(&fh),
                auth_flavors: vec![
                    sluice_xdr::rpc::AuthFlavor::SYS.0,
                    sluice_xdr::rpc::AuthFlavor::NONE.0,
                ],
            }),
            Ok(Err(s)) => MntRes::Err(s),
            Err(_) => MntRes::Err(Mountstat3::SERVERFAULT),
        }
    }

    fn remember(&self, peer: &Peer, path: &DirPath) {
        let mut list = self.mounts.lock().expect("mount list lock");
        let entry = (
            peer.addr.ip().to_string(),
            String::from_utf8_lossy(&path.0).into_owned(),
        );
        if !list.contains(&entry) {
            if list.len() >= MOUNT_LIST_MAX {
                list.remove(0);
            }
            list.push(entry);
        }
    }
}

/// Lexically normalizes an absolute path: removes `.` and empty components and resolves `..`
/// without ever climbing above `/`.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

fn client_label(c: &crate::backend::exports::ClientMatch) -> String {
    use crate::backend::exports::ClientMatch;
    match c {
        ClientMatch::Any => "*".into(),
        ClientMatch::Host(ip) => ip.to_string(),
        ClientMatch::Network { addr, prefix_len } => format!("{addr}/{prefix_len}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_never_climbs_above_root() {
        assert_eq!(normalize(Path::new("/a/./b/../c/")), PathBuf::from("/a/c"));
        assert_eq!(normalize(Path::new("/../../etc")), PathBuf::from("/etc"));
    }
}
