//! A private one-node Ceph cluster for a test binary (tests/peers/ceph.sh), and fresh CephFs
//! exports on it. A missing Ceph installation fails the test with what to install.

#![allow(dead_code)]

use sluice_ceph::{CephConfig, CephFs, CephFsConfig};
use sluice_vfs::{Caller, Cred, FileSystem, SetAttr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

pub fn repo_root() -> PathBuf {
    sluice_testkit::ceph::repo_root()
}

/// The cluster (`sluice_testkit::ceph::Cluster`: stopped, and its directory removed, on drop)
/// and a session on its whole file system.
pub struct Cluster {
    pub dir: PathBuf,
    pub conf: PathBuf,
    admin: Option<CephFs>,
    next: AtomicU32,
    cluster: sluice_testkit::ceph::Cluster,
}

impl Cluster {
    pub fn start(tag: &str) -> Cluster {
        let dir = PathBuf::from(format!("/tmp/sluice-ceph-{tag}-{}", std::process::id()));
        let cluster = sluice_testkit::ceph::Cluster::start(&dir);
        let mut c = Cluster {
            dir,
            conf: cluster.conf().to_path_buf(),
            admin: None,
            next: AtomicU32::new(0),
            cluster,
        };
        c.admin = Some(c.export("/"));
        c
    }

    /// The configuration of an export of `path` with the cluster's secret in its state dir.
    pub fn config(&self, path: &str) -> CephFsConfig {
        let mut cfg = CephFsConfig::new(CephConfig::new(&self.conf, path), self.dir.join("state"));
        cfg.ceph.fs_name = Some("cephfs".into());
        cfg
    }

    pub fn export(&self, path: &str) -> CephFs {
        CephFs::new(self.config(path)).unwrap_or_else(|e| panic!("mount {path}: {e}"))
    }

    /// The whole file system, as root.
    pub fn admin(&self) -> &CephFs {
        self.admin.as_ref().expect("mounted at start")
    }

    /// A new empty directory `/<prefix><n>` (mode 0777 so tests can act as any user), and its
    /// path.
    pub fn fresh_dir(&self, prefix: &str) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let name = format!("{prefix}{n}");
        let a = self.admin();
        let root = Caller::with_cred(Cred::root());
        let s = SetAttr {
            mode: Some(0o777),
            ..SetAttr::default()
        };
        a.mkdir(&root, &a.root_handle(), name.as_bytes(), &s)
            .unwrap_or_else(|e| panic!("mkdir {name}: {:?}", e.0));
        format!("/{name}")
    }

    /// Runs the `ceph` command line against the cluster (bounded: a dead monitor or daemon
    /// fails the test rather than hanging it); its standard output.
    /// A few tries, as `ceph.sh` makes: a busy monitor was seen to refuse a command now and
    /// then ("problem getting command descriptions").
    pub fn ceph(&self, args: &[&str]) -> String {
        let mut last = String::new();
        for _ in 0..5 {
            let out = std::process::Command::new("timeout")
                .args(["-k", "2", "60", "ceph", "-c"])
                .arg(&self.conf)
                .args(["--connect-timeout", "10"])
                .args(args)
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap_or_else(|e| panic!("run ceph {args:?}: {e}"));
            if out.status.success() {
                return String::from_utf8_lossy(&out.stdout).into_owned();
            }
            last = String::from_utf8_lossy(&out.stderr).into_owned();
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        panic!("ceph {args:?}: {last}");
    }

    /// A fresh export on a new empty directory.
    pub fn fresh(&self) -> Box<dyn FileSystem> {
        let p = self.fresh_dir("e");
        Box::new(self.export(&p))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The session ends before the cluster it talks to (the field `cluster` drops last).
        self.admin = None;
    }
}

/// A ceph-fuse mount of the cluster's root (another Ceph client, independent of the test's
/// libcephfs sessions), unmounted on drop.
pub struct Fuse(sluice_testkit::ceph::FuseMount);

impl Fuse {
    /// The mount point.
    pub fn root(&self) -> &Path {
        self.0.path()
    }

    /// `p` (a path in the file system, with or without its leading `/`) through the mount.
    pub fn path(&self, p: &str) -> PathBuf {
        self.root().join(p.trim_start_matches('/'))
    }
}

impl Cluster {
    /// Mounts the cluster's root with ceph-fuse at `DIR/fuse` (one per cluster at a time).
    pub fn fuse(&self) -> Fuse {
        Fuse(sluice_testkit::ceph::FuseMount::mount(
            &self.conf,
            self.dir.join("fuse"),
        ))
    }
}
