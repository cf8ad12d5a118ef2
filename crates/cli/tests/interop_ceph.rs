//! `sluice serve ceph:/vol` on a private one-node Ceph cluster (tests/peers/ceph.sh), with
//! ceph-fuse as the independent reader and writer: what `sluice cp` writes through sluice is
//! read back byte for byte through ceph-fuse, and a file changed through ceph-fuse is read
//! through sluice with its new contents; and the client scenarios every server passes
//! (tests/scenarios) against the Ceph export, with files placed through ceph-fuse. Needs root, /dev/fuse and the ceph packages
//! (scripts/install-deps.sh).

mod common;
mod scenarios;
mod servers;

use common::ceph::Rig;
use common::{pattern, SluiceProc};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn sluice(args: &[&str]) -> SluiceProc {
    let mut p = SluiceProc::spawn(args, &[]);
    let st = p.wait_timeout(Duration::from_secs(60));
    assert!(st.success(), "sluice {args:?}: {}", p.stderr_text());
    p
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn ceph_export_is_coherent_with_ceph_fuse() {
    let rig = Rig::start(false);
    let local = rig.dir.path().join("local.bin");
    // 9 MiB + 5: several 1 MiB WRITEs and a short tail.
    let data = pattern(26, (9 << 20) + 5);
    std::fs::write(&local, &data).unwrap();

    // Written through sluice, read through ceph-fuse.
    sluice(&["cp", local.to_str().unwrap(), &rig.url("copied.bin")]);
    assert!(
        read(&rig.fuse_path("copied.bin")) == data,
        "ceph-fuse reads what sluice wrote"
    );

    // Written through ceph-fuse, read through sluice; then changed, and read again.
    std::fs::write(rig.fuse_path("note.txt"), b"first version\n").unwrap();
    let p = sluice(&["cat", &rig.url("note.txt")]);
    assert_eq!(read(&p.stdout), b"first version\n");
    std::fs::write(rig.fuse_path("note.txt"), b"second, longer version\n").unwrap();
    let p = sluice(&["cat", &rig.url("note.txt")]);
    assert_eq!(read(&p.stdout), b"second, longer version\n");

    // And back: the file sluice wrote, copied out through sluice, is the same bytes.
    let back = rig.dir.path().join("back.bin");
    sluice(&["cp", &rig.url("copied.bin"), back.to_str().unwrap()]);
    assert!(read(&back) == data, "sluice reads back what it wrote");
}

/// The client scenarios (library round trip, cp both ways up to 256 MiB, nconnect, trees,
/// 10,000 entries, namespace commands, error messages) against a Ceph export, the files the
/// scenarios place on the server's side going in through ceph-fuse.
struct CephServer<'a> {
    rig: &'a Rig,
    export: PathBuf,
}

impl servers::Server for CephServer<'_> {
    fn export_dir(&self) -> &Path {
        &self.export
    }
    fn url(&self, rel: &str) -> String {
        format!("nfs://127.0.0.1:{}/vol{rel}", self.rig.port)
    }
    fn name(&self) -> &str {
        "sluice-ceph"
    }
}

#[test]
fn client_scenarios_against_a_ceph_export() {
    let rig = Rig::start(true);
    let server = CephServer {
        export: rig.fuse.join("vol"),
        rig: &rig,
    };
    servers::runtime().block_on(scenarios::all(&server));
}
