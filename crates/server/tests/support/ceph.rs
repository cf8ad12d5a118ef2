//! The wire suites over Ceph ([`Backend::Ceph`](super::Backend::Ceph)): one private one-node
//! cluster per test process (`sluice_testkit::ceph::shared`, stopped when the process exits),
//! a directory of its file system per test, served by `sluice_ceph::CephFs`, and the same
//! directory seen through a ceph-fuse mount, so that what a test checks "on disk" it checks
//! through another Ceph client.
//!
//! ```text
//!   test ── Rpc ──► sluice (bind_exports) ── CephFs (libcephfs) ──┐
//!     │                                                           ├─► MDS + OSD (one node)
//!     └── std::fs on dirs.export() ── ceph-fuse ──────────────────┘
//! ```
//!
//! One path names a test's directory both ways: the NFS export path is its path under the
//! ceph-fuse mount point (`<fuse>/<tag>-<n>/export`), and the `CephFs` behind it mounts the
//! same directory of the Ceph file system (`/<tag>-<n>/export`). So the tests' `s.export` is
//! the path they mount, walk the pseudo tree to, and check files under, as over a local
//! directory. (`sluice serve ceph:PATH` names the export PATH; the NFS path is the server's
//! choice, and here it is the one that makes the local checks work unchanged.)

use sluice_ceph::{CephConfig, CephFs, CephFsConfig};
use sluice_server::backend::ExportId;
use sluice_server::nfs::ExportEntry;
use sluice_server::ServerConfig;
use std::path::Path;
use std::sync::Arc;

/// The file system's name (`tests/peers/ceph.sh` makes one, `cephfs`).
pub const FS_NAME: &str = "cephfs";

/// The process's cluster and ceph-fuse mount, started by the first test that needs them.
/// With a manager: without one the cluster reports no capacity, and FSSTAT's sizes would be
/// zero (it costs about 8 s more at the start).
pub fn rig() -> &'static sluice_testkit::ceph::Shared {
    sluice_testkit::ceph::shared(env!("CARGO_CRATE_NAME"), &[("CEPH_MGR", "1")])
}

/// Where the root of the Ceph file system is mounted through ceph-fuse.
pub fn fuse_root() -> &'static Path {
    rig().fuse.path()
}

/// The directory of the Ceph file system that `local` (a path under [`fuse_root`]) names.
pub fn ceph_path(local: &Path) -> String {
    let rel = local.strip_prefix(fuse_root()).unwrap_or_else(|_| {
        panic!(
            "over Ceph every export must be inside the Ceph file system (under {}), not {}",
            fuse_root().display(),
            local.display()
        )
    });
    format!("/{}", rel.display())
}

/// The export configured as `sluice serve ceph:PATH` configures it (the file system's name,
/// FSINFO's sizes, `fsid=` as the export id); mounted off the async threads, as libcephfs's
/// mount blocks.
pub async fn open(config: &ServerConfig, export: &sluice_server::backend::Export) -> CephFs {
    let mut ceph = CephConfig::new(rig().cluster.conf(), ceph_path(&export.path));
    ceph.fs_name = Some(FS_NAME.into());
    let mut cfg = CephFsConfig::new(ceph, &config.state_dir);
    cfg.io_bytes_max = config.read_bytes_max.min(config.write_bytes_max);
    if let Some(id) = export.clients.iter().find_map(|c| c.options.fsid) {
        cfg.export_id = Some(ExportId(id));
    }
    let path = export.path.clone();
    tokio::task::spawn_blocking(move || CephFs::new(cfg))
        .await
        .expect("mount task")
        .unwrap_or_else(|e| panic!("mount {} over Ceph: {e}", path.display()))
}

/// `sluice_server::bind` with every export served by a `CephFs` of its directory.
pub async fn bind(mut config: ServerConfig) -> Result<sluice_server::Bound, String> {
    if config.exports.is_empty() {
        return Err("nothing to export".into());
    }
    for export in &mut config.exports {
        export.path = export
            .path
            .canonicalize()
            .map_err(|e| format!("export {}: {e}", export.path.display()))?;
    }
    let mut entries = Vec::new();
    for export in &config.exports {
        entries.push(ExportEntry {
            fs: Arc::new(open(&config, export).await),
            export: export.clone(),
        });
    }
    sluice_server::bind_exports(config, entries).await
}

/// Checks that a Ceph target (its `main.rs` is `main_rs`) runs every test module of the local
/// suite in `tests/{suite}/` (declares it with `#[path = "../{suite}/NAME.rs"]`) or names it in
/// its "Not run over Ceph" list (a line `* `NAME` (...): reason`), and not both; so a module
/// added to the local suite is never left out without a reason.
pub fn every_module_runs_or_is_excluded(suite: &str, main_rs: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(suite);
    let mut wrong = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let Some(stem) = name.strip_suffix(".rs") else {
            continue;
        };
        if stem == "main" || stem == "common" {
            continue;
        }
        let included = main_rs.contains(&format!("#[path = \"../{suite}/{name}\"]"));
        let excluded = main_rs.contains(&format!("//! * `{stem}` ("));
        match (included, excluded) {
            (true, false) | (false, true) => {}
            (false, false) => wrong.push(format!("{name}: neither run nor excluded")),
            (true, true) => wrong.push(format!("{name}: both run and excluded")),
        }
    }
    assert!(wrong.is_empty(), "tests/{suite}/ over Ceph: {wrong:#?}");
}
