//! A private one-node Ceph cluster for the tests (`tests/peers/ceph.sh`), with a ceph-fuse mount
//! of its root as the independent reader and writer, and [`Rig`]: that cluster with a
//! `sluice serve ceph:/vol` in front of it. Everything is stopped on drop (the server first,
//! then the ceph-fuse mount, then the cluster, whose memstore data goes with it).
//!
//! Needs root, /dev/fuse and the ceph packages (`scripts/install-deps.sh`); a missing tool
//! fails the test with that message, as every other peer does. The cluster and its mount are
//! the shared test kit's (`sluice_testkit::ceph`).

use super::{free_port, require_tools, TempDir};
use sluice_testkit::ceph::{Cluster, FuseMount};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The cluster and a ceph-fuse mount of its root, with the directory `vol` made in it. Fields
/// drop in order: the mount goes first, then the cluster, then the directory.
pub struct CephCluster {
    _mount: FuseMount,
    _cluster: Cluster,
    /// Everything of the cluster (its daemons' files under `cluster/`), the mount point, and
    /// whatever the test keeps beside them.
    pub dir: TempDir,
    /// The cluster's ceph.conf, for `--ceph-conf` and exports' `ceph_conf=`.
    pub conf: PathBuf,
    /// The ceph-fuse mount of the file system's root.
    pub fuse: PathBuf,
}

impl CephCluster {
    /// `mgr`: also a Ceph manager, without which the cluster reports no capacity (FSSTAT 0).
    pub fn start(mgr: bool) -> CephCluster {
        CephCluster::start_in(TempDir::new("ceph"), mgr)
    }

    /// [`CephCluster::start`] in a directory the caller made (its name tags the test).
    pub fn start_in(dir: TempDir, mgr: bool) -> CephCluster {
        require_tools(&["ceph-fuse", "ceph-mon", "fusermount3"]);
        let env = [("CEPH_MGR", if mgr { "1" } else { "0" })];
        let cluster = Cluster::start_with(dir.path().join("cluster"), &env);
        let mount = FuseMount::mount(cluster.conf(), dir.path().join("fuse"));
        std::fs::create_dir_all(mount.path().join("vol")).unwrap();
        CephCluster {
            conf: cluster.conf().to_path_buf(),
            fuse: mount.path().to_path_buf(),
            _mount: mount,
            _cluster: cluster,
            dir,
        }
    }

    /// The path through ceph-fuse of `name` in `/vol`.
    pub fn fuse_path(&self, name: &str) -> PathBuf {
        self.fuse.join("vol").join(name)
    }
}

/// The cluster and a `sluice serve ceph:/vol` (root not squashed) on a free loopback port. It
/// dereferences to its [`CephCluster`] (`rig.fuse`, `rig.dir`, `rig.fuse_path(..)`).
pub struct Rig {
    cluster: CephCluster,
    server: Option<Child>,
    pub port: u16,
    /// The server's metrics endpoint (`--metrics`), for `sluice stats` and scrapes.
    pub metrics: String,
}

impl std::ops::Deref for Rig {
    type Target = CephCluster;
    fn deref(&self) -> &CephCluster {
        &self.cluster
    }
}

impl Rig {
    /// `mgr`: as [`CephCluster::start`].
    pub fn start(mgr: bool) -> Rig {
        let mut rig = Rig {
            cluster: CephCluster::start(mgr),
            server: None,
            port: 0,
            metrics: String::new(),
        };
        rig.serve();
        rig
    }

    fn serve(&mut self) {
        self.port = free_port();
        self.metrics = format!("127.0.0.1:{}", free_port());
        let dir = self.cluster.dir.path();
        let out = std::fs::File::create(dir.join("serve.out")).unwrap();
        let err = std::fs::File::create(dir.join("serve.err")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args([
                "serve",
                "ceph:/vol",
                "--ceph-fs",
                "cephfs",
                "--no-root-squash",
            ])
            .arg("--ceph-conf")
            .arg(&self.cluster.conf)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--state-dir")
            .arg(dir.join("state"))
            .arg("--metrics")
            .arg(&self.metrics)
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn sluice serve");
        self.server = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let banner = std::fs::read_to_string(dir.join("serve.out")).unwrap();
            if banner.contains("ceph:/vol is /vol of file system cephfs") {
                return;
            }
            let errors = std::fs::read_to_string(dir.join("serve.err")).unwrap();
            if let Some(st) = self.server.as_mut().unwrap().try_wait().unwrap() {
                panic!("sluice serve exited ({st}): {errors}");
            }
            assert!(
                Instant::now() < deadline,
                "no Ceph banner in 30 s: {banner}{errors}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The nfs:// URL of `name` in the export `/vol`.
    pub fn url(&self, name: &str) -> String {
        format!("nfs://127.0.0.1:{}/vol/{name}", self.port)
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        // The server first: the cluster (a field, dropped after this) must outlive its client.
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
