//! MOUNT v3 (RFC 1813 appendix I): hands out export root handles and keeps the mount list.
//!
//! MNT accepts an export's path or a directory below it (as knfsd's mountd does), checks the
//! client's address against the export's rules, and answers with the directory's handle and the
//! flavors the server accepts (AUTH_SYS, then AUTH_NONE). The mount list behind DUMP is advisory,
//! as in every implementation, and bounded.
//!
//! # Paths below an export, and symlinks in them
//! nfs-utils' mountd runs `realpath()` on the requested path before it looks for the export, so
//! `/export/link/sub` mounts when `link` is a symlink to a directory (libnfs's tests expect it).
//! sluice resolves the path itself, one component at a time from the export's root handle, with
//! the caller's (squashed) credentials ([`resolve_in_export`]):
//!
//! ```text
//!   /srv/export/link/sub        export /srv/export, rest [link, sub]
//!     link -> ../data           queue [.., data, sub]   relative: spliced into the queue
//!     ..                        pop back to the export root (never above it)
//!     data, sub                 LOOKUP each; DIR -> descend
//!   a target like ../../etc or /etc leaves the export: MNT3ERR_ACCES
//! ```
//!
//! A target that leaves the export is refused with MNT3ERR_ACCES, the status knfsd's mountd gives
//! when the resolved path is under no export it may mount; unlike knfsd, a link never leads into
//! another export (each export is confined to itself, as the NFS handlers are). NOTDIR is only
//! for a real non-directory; more than [`SYMLINKS_MAX`] links in one path answers NOENT, as a
//! failed `realpath` (ELOOP) ends in mountd's `stat` failing.

use crate::backend::gate::{self, Program, Refusal};
use crate::exports::{identity, ExportEntry};
use crate::service::request::Peer;
use bytes::Bytes;
use sluice_rpc::server::Credentials;
use sluice_xdr::mount3::{
    DirPath, ExportNode, Exports, MntRes, MntResOk, MountBody, MountList, Mountstat3, Name,
};
use std::collections::VecDeque;
use std::os::unix::ffi::OsStrExt;
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

    /// MNT: the handle of `path` if the peer may mount it (then remembered for DUMP).
    pub async fn mnt(&self, peer: &Peer, cred: &Credentials, path: DirPath) -> MntRes {
        let res = self.resolve(peer, cred, &path).await;
        if let MntRes::Ok(_) = res {
            self.remember(peer, &path);
        }
        res
    }

    /// DUMP: the mount list.
    pub fn dump(&self) -> MountList {
        let list = self.mounts.lock().expect("mount list lock");
        MountList(
            list.iter()
                .map(|(h, d)| MountBody {
                    hostname: Name(Bytes::copy_from_slice(h.as_bytes())),
                    directory: DirPath(Bytes::copy_from_slice(d.as_bytes())),
                })
                .collect(),
        )
    }

    /// UMNT: forgets the peer's mount of `path`.
    pub fn umnt(&self, peer: &Peer, path: &DirPath) {
        let host = peer.addr.ip().to_string();
        let dir = String::from_utf8_lossy(&path.0).into_owned();
        self.mounts
            .lock()
            .expect("mount list lock")
            .retain(|(h, d)| !(h == &host && d == &dir));
    }

    /// UMNTALL: forgets every mount of the peer.
    pub fn umntall(&self, peer: &Peer) {
        let host = peer.addr.ip().to_string();
        self.mounts
            .lock()
            .expect("mount list lock")
            .retain(|(h, _)| h != &host);
    }

    /// EXPORT: every export and the client patterns it admits.
    pub fn export(&self) -> Exports {
        Exports(
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
    }

    /// The handle MNT answers for `path`, or why not.
    async fn resolve(&self, peer: &Peer, cred: &Credentials, path: &DirPath) -> MntRes {
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
        let caller = match gate::admit(
            &entry.export,
            peer.addr,
            peer.transport.xprtsec(),
            identity(cred).as_ref(),
            Program::Mount,
        ) {
            Ok(caller) => caller,
            // MOUNT is not held to `secure` (see `gate`), so only NotListed arises; knfsd's
            // mountd answers ACCES to both.
            Err(Refusal::NotListed | Refusal::InsecurePort) => {
                tracing::warn!(addr = %peer.addr, path = text, "MNT refused: client not allowed by the export's rules");
                return MntRes::Err(Mountstat3::ACCES);
            }
            // Only a MNT that came over TLS is held to `xprtsec=` (a plaintext one is answered,
            // as Linux clients send MNT in plaintext for TLS mounts: see `gate`).
            Err(Refusal::Xprtsec(mode)) => {
                tracing::warn!(addr = %peer.addr, path = text, mode = mode.name(), "MNT refused: the export's xprtsec= does not admit this transport security");
                return MntRes::Err(Mountstat3::ACCES);
            }
        };
        let fs = entry.fs.clone();
        let export_path = entry.export.path.clone();
        let walked = tokio::task::spawn_blocking(move || {
            use crate::backend::FileType;
            use crate::nfs::map::status;
            resolve_in_export(fs.root_handle(), &export_path, &rest, |dir, name| match fs
                .lookup(&caller, dir, name)
            {
                Ok(l) if l.attr.ftype == FileType::Directory => Step::Dir(l.fh),
                Ok(l) if l.attr.ftype == FileType::Symlink => match fs.readlink(&l.fh) {
                    Ok((target, _)) => Step::Link(target),
                    Err((e, _)) => Step::Fail(Mountstat3(status(e).0)),
                },
                Ok(_) => Step::Fail(Mountstat3::NOTDIR),
                Err((e, _)) => Step::Fail(Mountstat3(status(e).0)),
            })
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

/// What one LOOKUP during MNT's path walk found.
pub(crate) enum Step<H> {
    /// A directory: descend into it.
    Dir(H),
    /// A symbolic link, with its target.
    Link(Vec<u8>),
    /// Anything else stops the walk with this status (NOTDIR for a non-directory).
    Fail(Mountstat3),
}

/// Symbolic links followed in one MNT path; Linux's path walk gives up after 40 (MAXSYMLINKS),
/// which catches loops long before the queue of components could grow large.
pub const SYMLINKS_MAX: usize = 40;

/// Walks `rest` (a path relative to the export at `export`, lexically normalized) from the
/// export's root handle `root`, asking `step` about each name in its directory. Symbolic links
/// are followed as long as they stay inside the export; one that leads out of it is refused with
/// ACCES. Pure: the caller's `step` does the file-system work.
pub(crate) fn resolve_in_export<H: Clone>(
    root: H,
    export: &Path,
    rest: &Path,
    mut step: impl FnMut(&H, &[u8]) -> Step<H>,
) -> Result<H, Mountstat3> {
    // The directories from the export root down to where the walk stands; `..` pops one, and
    // popping the root would leave the export.
    let mut stack: Vec<H> = vec![root];
    let mut queue: VecDeque<Vec<u8>> = names(rest).collect();
    let mut links = 0usize;
    while let Some(name) = queue.pop_front() {
        match name.as_slice() {
            b"" | b"." => continue,
            b".." => {
                if stack.len() == 1 {
                    return Err(Mountstat3::ACCES);
                }
                stack.pop();
                continue;
            }
            _ => {}
        }
        let dir = stack
            .last()
            .expect("the stack always holds the export root");
        match step(dir, &name) {
            Step::Dir(h) => stack.push(h),
            Step::Fail(s) => return Err(s),
            Step::Link(target) => {
                links += 1;
                if links > SYMLINKS_MAX {
                    return Err(Mountstat3::NOENT);
                }
                let target = Path::new(std::ffi::OsStr::from_bytes(&target));
                let inside = if target.is_absolute() {
                    // Only a target that names the export's own path leads back into it.
                    let Ok(below) = target.strip_prefix(export) else {
                        return Err(Mountstat3::ACCES);
                    };
                    stack.truncate(1);
                    below
                } else {
                    target
                };
                for n in names(inside).collect::<Vec<_>>().into_iter().rev() {
                    queue.push_front(n);
                }
            }
        }
    }
    Ok(stack.pop().expect("the stack always holds the export root"))
}

/// The components of a relative path as bytes, `..` kept (the walk resolves it).
fn names(p: &Path) -> impl Iterator<Item = Vec<u8>> + '_ {
    p.components().filter_map(|c| match c {
        Component::Normal(n) => Some(n.as_bytes().to_vec()),
        Component::ParentDir => Some(b"..".to_vec()),
        _ => None,
    })
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

    /// A toy tree for the walk: directories by path relative to the export, and links.
    fn walk(rest: &str, links: &[(&str, &str)], files: &[&str]) -> Result<String, Mountstat3> {
        let dirs = ["a", "a/sub", "data", "data/sub", "data/sub/deep"];
        resolve_in_export(
            String::new(),
            Path::new("/srv/export"),
            Path::new(rest),
            |dir, name| {
                let name = std::str::from_utf8(name).unwrap();
                let p = if dir.is_empty() {
                    name.to_string()
                } else {
                    format!("{dir}/{name}")
                };
                if let Some((_, t)) = links.iter().find(|(l, _)| *l == p) {
                    Step::Link(t.as_bytes().to_vec())
                } else if dirs.contains(&p.as_str()) {
                    Step::Dir(p)
                } else if files.contains(&p.as_str()) {
                    Step::Fail(Mountstat3::NOTDIR)
                } else {
                    Step::Fail(Mountstat3::NOENT)
                }
            },
        )
    }

    #[test]
    fn mnt_walk_follows_links_that_stay_inside_the_export() {
        assert_eq!(walk("a/sub", &[], &[]).unwrap(), "a/sub");
        assert_eq!(walk("", &[], &[]).unwrap(), "");
        let relative = [("link", "data")];
        assert_eq!(walk("link/sub", &relative, &[]).unwrap(), "data/sub");
        let climbing = [("a/up", "../data/sub")];
        assert_eq!(walk("a/up/deep", &climbing, &[]).unwrap(), "data/sub/deep");
        let absolute = [("abs", "/srv/export/data")];
        assert_eq!(walk("abs/sub", &absolute, &[]).unwrap(), "data/sub");
        let chain = [("l1", "l2"), ("l2", "a/../data")];
        assert_eq!(walk("l1/sub", &chain, &[]).unwrap(), "data/sub");
    }

    #[test]
    fn mnt_walk_refuses_links_that_leave_the_export() {
        let out = [
            ("out", "../../etc"),
            ("abs", "/etc"),
            ("near", "/srv/exportx"),
        ];
        for p in ["out", "abs", "near", "out/x"] {
            assert_eq!(walk(p, &out, &[]), Err(Mountstat3::ACCES), "{p}");
        }
        let nested = [("a/sub/up", "../../..")];
        assert_eq!(walk("a/sub/up", &nested, &[]), Err(Mountstat3::ACCES));
    }

    #[test]
    fn mnt_walk_says_notdir_only_for_real_non_directories_and_stops_loops() {
        assert_eq!(walk("f", &[], &["f"]), Err(Mountstat3::NOTDIR));
        assert_eq!(walk("missing", &[], &[]), Err(Mountstat3::NOENT));
        let to_file = [("lf", "f")];
        assert_eq!(walk("lf", &to_file, &["f"]), Err(Mountstat3::NOTDIR));
        let looped = [("x", "y"), ("y", "x")];
        assert_eq!(walk("x", &looped, &[]), Err(Mountstat3::NOENT));
    }

    #[test]
    fn normalize_never_climbs_above_root() {
        assert_eq!(normalize(Path::new("/a/./b/../c/")), PathBuf::from("/a/c"));
        assert_eq!(normalize(Path::new("/../../etc")), PathBuf::from("/etc"));
    }
}
