//! A private one-node Ceph cluster for tests (`tests/peers/ceph.sh`), ceph-fuse mounts of it,
//! and one cluster shared by a whole test process.
//!
//! ```text
//!   Cluster::start(dir)         ceph.sh start dir  (mon + memstore OSD + MDS, ~10 s)
//!   FuseMount::mount(conf, at)  ceph-fuse          another Ceph client of the same files
//!   shared(tag, env)            both, once per process; stopped when it exits
//!   drop / exit                 fusermount3 -u, ceph.sh stop, rm -rf dir
//! ```
//!
//! The daemons `ceph.sh` starts detach from the test process, so nothing stops them when the
//! test ends unless this module does: a [`Cluster`] stops its daemons when dropped, and the
//! [`shared`] one (a static, never dropped) when the process exits: an `atexit` hook stops it
//! on a normal exit, and a watcher process in its own session (`tail --pid`) does it when the
//! test process dies any other way (a signal, an abort), so an interrupted run leaves no
//! daemons or mounts behind.
//!
//! A missing Ceph installation fails the caller with what to install: tests that need Ceph
//! never skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

/// The repository's root (this crate is `crates/testkit`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `tests/peers/ceph.sh`.
pub fn script() -> PathBuf {
    repo_root().join("tests/peers/ceph.sh")
}

/// A one-node cluster whose files all live under one directory; stopped (and the directory
/// removed) on drop.
pub struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
}

impl Cluster {
    /// Starts a cluster in `dir` (created; see `ceph.sh` for what goes in it).
    pub fn start(dir: impl Into<PathBuf>) -> Cluster {
        Cluster::start_with(dir, &[])
    }

    /// [`Cluster::start`] with `ceph.sh`'s environment settings, e.g. `("CEPH_MGR", "1")`.
    pub fn start_with(dir: impl Into<PathBuf>, env: &[(&str, &str)]) -> Cluster {
        let dir = dir.into();
        let t0 = Instant::now();
        let out = Command::new("bash")
            .arg(script())
            .arg("start")
            .arg(&dir)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .expect("run tests/peers/ceph.sh");
        if !out.status.success() {
            // Kill whatever the failed start left running before failing.
            stop_dir(&dir);
        }
        assert!(
            out.status.success(),
            "tests/peers/ceph.sh start failed (run scripts/install-deps.sh for the ceph \
             packages): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let conf = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        eprintln!("ceph cluster up in {:?}: {}", t0.elapsed(), conf.display());
        Cluster { dir, conf }
    }

    /// The cluster's ceph.conf.
    pub fn conf(&self) -> &Path {
        &self.conf
    }

    /// The directory holding the cluster's files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        stop_dir(&self.dir);
    }
}

/// Stops the daemons of the cluster in `dir` and removes `dir` (idempotent).
fn stop_dir(dir: &Path) {
    let _ = Command::new("bash")
        .arg(script())
        .arg("stop")
        .arg(dir)
        .stdin(Stdio::null())
        .status();
    let _ = std::fs::remove_dir_all(dir);
}

/// A ceph-fuse mount of a cluster's file system: another Ceph client, independent of any
/// libcephfs session in the test process. Unmounted on drop.
pub struct FuseMount {
    path: PathBuf,
}

impl FuseMount {
    /// Mounts the root of the file system of `conf`'s cluster at `at` (created). Bounded: a
    /// mount that takes over 30 s fails the caller.
    pub fn mount(conf: &Path, at: impl Into<PathBuf>) -> FuseMount {
        let path = at.into();
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("mount point {}: {e}", path.display()));
        let st = Command::new("timeout")
            .arg("30")
            .arg("ceph-fuse")
            .arg("-c")
            .arg(conf)
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run ceph-fuse (install the ceph-fuse package)");
        assert!(
            st.success(),
            "ceph-fuse could not mount the test cluster at {} ({st})",
            path.display()
        );
        FuseMount { path }
    }

    /// Where the file system's root is mounted.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        unmount(&self.path);
    }
}

/// Unmounts a FUSE mount, lazily when it is busy.
fn unmount(path: &Path) {
    let quiet = |cmd: &mut Command| {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !quiet(Command::new("fusermount3").arg("-u").arg(path)) {
        let _ = quiet(Command::new("fusermount3").arg("-uz").arg(path));
    }
}

/// The cluster and the ceph-fuse mount of its root that every test of one process shares.
pub struct Shared {
    pub cluster: Cluster,
    pub fuse: FuseMount,
}

/// The process's cluster: started (with `ceph.sh`'s environment settings `env`, and a
/// ceph-fuse mount of its root) by the first caller, in `$TMPDIR/sluice-ceph-{tag}-{pid}`;
/// stopped when the process exits. Callers that come while it starts wait for it; later
/// callers' `tag` and `env` are not used. When it cannot start, every caller fails with the
/// first one's reason (no test waits for a second attempt).
pub fn shared(tag: &str, env: &[(&str, &str)]) -> &'static Shared {
    let started = SHARED.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("sluice-ceph-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("cluster directory");
        watch_for_exit(&dir);
        // SAFETY: `stop_shared` is an `extern "C" fn()` that does not unwind (it catches
        // panics); it does nothing unless SHARED holds a cluster.
        unsafe { atexit(stop_shared) };
        std::panic::catch_unwind(|| {
            let cluster = Cluster::start_with(dir.join("cluster"), env);
            let fuse = FuseMount::mount(cluster.conf(), dir.join("fuse"));
            Shared { cluster, fuse }
        })
        .map_err(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        })
    });
    match started {
        Ok(s) => s,
        Err(why) => panic!("the test process's Ceph cluster did not start: {why}"),
    }
}

static SHARED: OnceLock<Result<Shared, String>> = OnceLock::new();

extern "C" {
    fn atexit(f: extern "C" fn()) -> i32;
}

/// The `atexit` hook: unmounts and stops the shared cluster (a static is never dropped).
extern "C" fn stop_shared() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(Ok(s)) = SHARED.get() {
            unmount(s.fuse.path());
            stop_dir(s.cluster.dir());
        }
    });
}

/// Starts a process, in a session of its own (so a Ctrl-C to the test's process group does not
/// reach it), that waits for this process to end and then unmounts `dir/fuse`, stops the
/// cluster in `dir/cluster` and removes `dir`. After a normal exit the `atexit` hook has
/// stopped both already and the watcher only removes what is left.
fn watch_for_exit(dir: &Path) {
    let script = format!(
        "tail --pid={pid} -f /dev/null; \
         fusermount3 -uz '{dir}/fuse' 2>/dev/null; \
         bash '{ceph}' stop '{dir}/cluster' >/dev/null 2>&1; \
         rm -rf '{dir}'",
        pid = std::process::id(),
        ceph = script().display(),
        dir = dir.display(),
    );
    // `setsid --fork` returns once the watcher runs in the background: nothing to reap.
    let st = Command::new("setsid")
        .arg("--fork")
        .arg("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("start the cluster's exit watcher (setsid, from util-linux)");
    assert!(st.success(), "setsid --fork: {st}");
}
