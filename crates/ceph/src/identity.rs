//! The Ceph session's identity: the uuid a sluice head gives its libcephfs session of one
//! export, so that the next instance of the same head can reclaim it after a crash (see the
//! reclaim notes in `mount`).
//!
//! # What the uuid must be
//! The MDS finds the session to drop by this string alone (`ceph_start_reclaim`), so it must be:
//!
//! * **the same after a restart** of the same head serving the same export, or the dead
//!   instance's caps and locks stay until its session times out;
//! * **different for every other live session**, or starting one head evicts another: the MDS
//!   drops the old session's state and blocklists its address, whoever holds it.
//!
//! ```text
//!   sluice:<node id>:<fs name>:<path>      e.g. sluice:5f0c…e1:cephfs:/vol/proj
//!           │          │         └─ the directory of the Ceph file system exported
//!           │          └─ as configured (empty: the cluster's default file system)
//!           └─ 32 hex digits, random, kept in <state dir>/ceph-node-id
//! ```
//!
//! # Why the node id lives in the state directory
//! The state directory is already what makes a restarted server "the same server": it holds
//! the handle secret and the NFSv4 client records that decide who may reclaim in the grace
//! period. A restart with the same state directory is exactly the restart whose NFS clients
//! reclaim, so it is the one whose Ceph session must be reclaimed too. The host name or
//! /etc/machine-id would not do: two heads on one machine (tests, containers sharing a host
//! identity) serving one export would take each other's uuid and evict each other at start.
//! Nor would the handle secret: heads of one cluster share it on purpose, so that their handles
//! agree.
//!
//! A head that takes over a dead head's clients (the two-head cluster) names the dead head's
//! uuid explicitly (`sluice serve --ceph-uuid`), which overrides this default.

use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// The node id's file in the state directory.
pub const NODE_ID_FILE: &str = "ceph-node-id";

/// Random bytes in a node id: 128 bits, so two heads never draw the same one.
const NODE_ID_BYTES: usize = 16;

/// The default session uuid of an export of `path` in file system `fs_name` (`None`: the
/// cluster's default) served with `state_dir` (see the module notes). Creates the node id on
/// first use.
pub fn default_session_uuid(
    state_dir: &Path,
    fs_name: Option<&str>,
    path: &str,
) -> io::Result<String> {
    let node = load_or_create_node_id(state_dir)?;
    Ok(session_uuid(&node, fs_name, path))
}

/// The session uuid of `node` for one export (see the module notes).
pub fn session_uuid(node: &str, fs_name: Option<&str>, path: &str) -> String {
    format!("sluice:{node}:{}:{path}", fs_name.unwrap_or(""))
}

/// Reads `<state_dir>/ceph-node-id`, creating the directory (0700) and the file (random) on
/// first use. Concurrent first starts agree on one id: each writes a private temporary file
/// and publishes it with `link(2)`, which fails for all but the first.
pub fn load_or_create_node_id(state_dir: &Path) -> io::Result<String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(state_dir)?;
    let path = state_dir.join(NODE_ID_FILE);
    match read_node_id(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        r => return r,
    }
    let mut raw = [0u8; NODE_ID_BYTES];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut raw)?;
    let id: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = state_dir.join(format!(".{NODE_ID_FILE}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)?;
        writeln!(f, "{id}")?;
        f.sync_all()?;
    }
    let published = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match published {
        Ok(()) => {
            std::fs::File::open(state_dir)?.sync_all()?;
            tracing::info!(path = %path.display(), "created a new Ceph node id");
            Ok(id)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => read_node_id(&path),
        Err(e) => Err(e),
    }
}

/// The node id in `path`: one line of hex digits (any length, so an operator may write one by
/// hand), nothing else.
fn read_node_id(path: &Path) -> io::Result<String> {
    let text = std::fs::read_to_string(path)?;
    let id = text.trim();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a line of hex digits", path.display()),
        ));
    }
    Ok(id.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("sluice-ceph-id-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn the_node_id_is_created_once_and_read_back_after() {
        let dir = temp_dir("once");
        let a = load_or_create_node_id(&dir).unwrap();
        assert_eq!(a.len(), 2 * NODE_ID_BYTES);
        assert_eq!(load_or_create_node_id(&dir).unwrap(), a);
        let other = temp_dir("other");
        assert_ne!(
            load_or_create_node_id(&other).unwrap(),
            a,
            "one id per state dir"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&other).unwrap();
    }

    #[test]
    fn the_uuid_names_node_file_system_and_path() {
        assert_eq!(
            session_uuid("ab12", Some("cephfs"), "/vol/p"),
            "sluice:ab12:cephfs:/vol/p"
        );
        assert_eq!(session_uuid("ab12", None, "/"), "sluice:ab12::/");
        assert_ne!(
            session_uuid("ab12", None, "/a"),
            session_uuid("ab12", None, "/b"),
            "one session per export"
        );
    }

    #[test]
    fn a_node_id_written_by_hand_is_used_and_a_bad_one_is_an_error() {
        let dir = temp_dir("hand");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(NODE_ID_FILE), "CAFE01\n").unwrap();
        assert_eq!(load_or_create_node_id(&dir).unwrap(), "cafe01");
        std::fs::write(dir.join(NODE_ID_FILE), "not hex\n").unwrap();
        let e = load_or_create_node_id(&dir).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
