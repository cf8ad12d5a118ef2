//! POSIX `fcntl` lock semantics through `sluice mount` (issue #30): the two-process lock
//! cases of `tests/peers/guest/kc-tlock.c` (whole file, disjoint and overlapping ranges, read
//! sharing, upgrade and downgrade, unlock of what was never locked, splits, locks to and
//! beyond EOF, SEEK_END, coalescing, F_SETLKW, release at any close, OFFSET_MAX) run on
//! `sluice serve`'s export mounted with `sluice mount`, locks on (there is no `nolock`).
//!
//! Over NFSv3 the mount's locks are NLM v4 calls to the server's lock manager:
//!
//! - two mounts of the export (two clients of the server), the cases' parent process on one
//!   and its child on the other: every conflict is decided by the server;
//! - one mount, both processes on it: two lock owners of one client, still decided by the
//!   server (a FUSE mount keeps no locks of its own).
//!
//! Each run must show on the server's metrics endpoint as NLM TEST, LOCK and UNLOCK calls
//! (`sluice_nlm_calls_total`), so a mount that kept its locks to itself fails here even when
//! its local answers are right. Over NFSv4.1 the same cases run through two mounts and must
//! show as LOCK, LOCKT and LOCKU operations; and between a v3 mount and a v4.1 mount, each
//! side in turn holding, as NLM and NFSv4 share the server's one lock table.
//!
//! The mounts are given the server's port in the URL (`?nfsport=`), as a sluice on a port of
//! its own is usually mounted; the portmapper on port 111 of the same address, if any, is
//! some other server's (the mount used to take its lock manager from there: every lock failed
//! with EIO when another sluice or a kernel NFS server held port 111).
//!
//! kc-tlock is built here with gcc (static, as the kernel-guest tests build their helpers).
//! Needs root, /dev/fuse and gcc.

mod common;

use common::{
    free_port, nfs_url_version, prometheus, repo_root, require_tools, FuseMount, Sluice, TempDir,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The longest a kc-tlock run may take: each case is a few dozen lock calls, and F_SETLKW
/// waits for a poll of the mount's back-off (1 s, then 2 s). Far above a normal run.
const RUN_LIMIT: Duration = Duration::from_secs(240);

/// gcc's static build of kc-tlock in `dir`.
fn build_tlock(dir: &Path) -> PathBuf {
    let bin = dir.join("kc-tlock");
    let src = repo_root().join("tests/peers/guest/kc-tlock.c");
    let st = Command::new("gcc")
        .args(["-static", "-O2", "-Wall", "-Werror", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("run gcc");
    assert!(st.success(), "gcc could not build {}", src.display());
    bin
}

/// Runs kc-tlock on `dirs` (one or two directories naming the same export); panics with its
/// output unless every case passed.
fn run_tlock(bin: &Path, dirs: &[&Path], what: &str, logs: &dyn Fn() -> String) {
    let out = Command::new("timeout")
        .arg(RUN_LIMIT.as_secs().to_string())
        .arg(bin)
        .args(dirs)
        .env("KC_TLOCK_TIMEOUT", (RUN_LIMIT.as_secs() - 10).to_string())
        .output()
        .expect("run kc-tlock");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("kc-tlock {what}:\n{stdout}{stderr}");
    assert!(
        out.status.success() && stdout.contains("kc-tlock: all cases passed"),
        "kc-tlock {what} failed ({}):\n{stdout}{stderr}\n{}",
        out.status,
        logs()
    );
    assert!(
        !stdout.contains("FAIL"),
        "kc-tlock {what} passed with a FAIL line:\n{stdout}"
    );
}

/// The server, its metrics address and a mount of its export per version asked.
/// Fields drop in order: the mounts go first, the directories last.
struct Rig {
    mounts: Vec<FuseMount>,
    server: Sluice,
    metrics: String,
    dirs: TempDir,
}

impl Rig {
    fn start(tag: &str, versions: &[&str]) -> Rig {
        let dirs = TempDir::new(tag);
        let export = dirs.path().join("export");
        let state = dirs.path().join("state");
        std::fs::create_dir_all(&export).unwrap();
        std::fs::create_dir_all(&state).unwrap();
        let metrics = format!("127.0.0.1:{}", free_port());
        let server = Sluice::start(
            &export,
            &state,
            &["--no-root-squash", "--metrics", &metrics],
            &dirs.path().join("server.log"),
        );
        let mut mounts = Vec::new();
        for (i, version) in versions.iter().enumerate() {
            let url = nfs_url_version(server.port, &server.export, version);
            let mp = dirs.path().join(format!("mnt-{i}"));
            std::fs::create_dir_all(&mp).unwrap();
            mounts.push(FuseMount::mount(&url, &mp, &[], &[]));
        }
        Rig {
            dirs,
            server,
            metrics,
            mounts,
        }
    }

    fn mount(&self, i: usize) -> &Path {
        &self.mounts[i].mountpoint
    }

    /// The server's and the mounts' logs, for a failure's message.
    fn logs(&self) -> String {
        let mut s = format!("--- server ---\n{}\n", self.server.log_text());
        for m in &self.mounts {
            s.push_str(&format!(
                "--- mount {} ---\n{}\n",
                m.mountpoint.display(),
                m.log_text()
            ));
        }
        s
    }

    /// `name{proc="PROC"}` or `name{op="OP"}` of the metrics endpoint (0 when absent).
    fn counter(&self, name: &str, label: &str, value: &str) -> u64 {
        let want = format!("{name}{{{label}=\"{value}\"}} ");
        prometheus(&self.metrics)
            .lines()
            .find_map(|l| l.strip_prefix(&want)?.trim().parse().ok())
            .unwrap_or(0)
    }

    fn nlm_calls(&self) -> [u64; 3] {
        ["TEST", "LOCK", "UNLOCK"].map(|p| self.counter("sluice_nlm_calls_total", "proc", p))
    }

    fn unmount(&mut self) {
        for m in &mut self.mounts {
            m.unmount();
        }
    }
}

#[test]
fn tlock_cases_pass_through_v3_mounts_with_nlm_at_the_server() {
    require_tools(&["gcc", "timeout"]);
    let mut rig = Rig::start("locks-v3", &["3", "3"]);
    let bin = build_tlock(rig.dirs.path());
    assert_eq!(rig.nlm_calls(), [0, 0, 0], "no lock call before the runs");

    // Two clients: parent on one mount, child on the other.
    run_tlock(
        &bin,
        &[rig.mount(0), rig.mount(1)],
        "on two v3 mounts",
        &|| rig.logs(),
    );
    let after_two = rig.nlm_calls();
    eprintln!("NLM TEST, LOCK, UNLOCK after two mounts: {after_two:?}");
    // Each F_GETLK is a TEST, each F_SETLK a LOCK and each F_UNLCK an UNLOCK at the server;
    // kc-tlock makes dozens of each.
    for (name, n) in ["TEST", "LOCK", "UNLOCK"].iter().zip(after_two) {
        assert!(n >= 20, "NLM {name} calls at the server: {n}");
    }

    // One client, two lock owners.
    run_tlock(&bin, &[rig.mount(0)], "on one v3 mount", &|| rig.logs());
    let after_one = rig.nlm_calls();
    eprintln!("NLM TEST, LOCK, UNLOCK after one mount: {after_one:?}");
    for (i, name) in ["TEST", "LOCK", "UNLOCK"].iter().enumerate() {
        assert!(
            after_one[i] >= after_two[i] + 20,
            "NLM {name} calls of the one-mount run: {} then {}",
            after_two[i],
            after_one[i]
        );
    }
    assert_eq!(
        rig.counter("sluice_nfs4_op_calls_total", "op", "LOCK"),
        0,
        "a v3 mount's locks are not NFSv4 LOCKs"
    );
    rig.unmount();
}

#[test]
fn tlock_cases_pass_through_v41_mounts_with_lock_ops_at_the_server() {
    require_tools(&["gcc", "timeout"]);
    let mut rig = Rig::start("locks-v41", &["4.1", "4.1"]);
    let bin = build_tlock(rig.dirs.path());

    run_tlock(
        &bin,
        &[rig.mount(0), rig.mount(1)],
        "on two v4.1 mounts",
        &|| rig.logs(),
    );
    let ops =
        ["LOCKT", "LOCK", "LOCKU"].map(|op| rig.counter("sluice_nfs4_op_calls_total", "op", op));
    eprintln!("NFSv4 LOCKT, LOCK, LOCKU after two mounts: {ops:?}");
    for (name, n) in ["LOCKT", "LOCK", "LOCKU"].iter().zip(ops) {
        assert!(n >= 20, "NFSv4 {name} operations at the server: {n}");
    }
    run_tlock(&bin, &[rig.mount(0)], "on one v4.1 mount", &|| rig.logs());
    assert_eq!(
        rig.nlm_calls(),
        [0, 0, 0],
        "a v4.1 mount's locks are not NLM calls"
    );
    rig.unmount();
}

/// NLM and NFSv4 share the server's one lock table: a v3 mount's process and a v4.1 mount's
/// see each other's locks with the same semantics, whichever side holds.
#[test]
fn tlock_cases_pass_between_a_v3_and_a_v41_mount() {
    require_tools(&["gcc", "timeout"]);
    let mut rig = Rig::start("locks-mixed", &["3", "4.1"]);
    let bin = build_tlock(rig.dirs.path());
    run_tlock(
        &bin,
        &[rig.mount(0), rig.mount(1)],
        "v3 parent, v4.1 child",
        &|| rig.logs(),
    );
    run_tlock(
        &bin,
        &[rig.mount(1), rig.mount(0)],
        "v4.1 parent, v3 child",
        &|| rig.logs(),
    );
    let nlm = rig.nlm_calls();
    let lock4 = rig.counter("sluice_nfs4_op_calls_total", "op", "LOCK");
    assert!(
        nlm.iter().all(|&n| n >= 20) && lock4 >= 20,
        "both protocols' lock calls at the server: NLM {nlm:?}, NFSv4 LOCK {lock4}"
    );
    rig.unmount();
}
