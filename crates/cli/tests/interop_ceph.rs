//! `sluice serve ceph:/vol` on a private one-node Ceph cluster (tests/peers/ceph.sh), with
//! ceph-fuse as the independent reader and writer: what `sluice cp` writes through sluice is
//! read back byte for byte through ceph-fuse, and a file changed through ceph-fuse is read
//! through sluice with its new contents; and the client scenarios every server passes
//! (tests/scenarios) against the Ceph export, with files placed through ceph-fuse. Needs root, /dev/fuse and the ceph packages
//! (scripts/install-deps.sh).

mod common;
mod scenarios;
mod servers;

use common::{free_port, pattern, SluiceProc, TempDir};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The cluster, a ceph-fuse mount of its root, and a `sluice serve ceph:/vol`; all stopped on
/// drop.
struct Rig {
    dir: TempDir,
    conf: PathBuf,
    fuse: PathBuf,
    server: Option<Child>,
    port: u16,
    /// The server's metrics endpoint (`--metrics`), for `sluice stats`.
    metrics: String,
}

fn script() -> PathBuf {
    common::repo_root().join("tests/peers/ceph.sh")
}

impl Rig {
    /// `mgr`: also a Ceph manager, without which the cluster reports no capacity (FSSTAT 0).
    fn start(mgr: bool) -> Rig {
        common::require_tools(&["ceph-fuse", "ceph-mon", "fusermount3"]);
        let dir = TempDir::new("ceph");
        let cluster = dir.path().join("cluster");
        let out = Command::new("bash")
            .arg(script())
            .arg("start")
            .arg(&cluster)
            .env("CEPH_MGR", if mgr { "1" } else { "0" })
            .output()
            .expect("run tests/peers/ceph.sh");
        let mut rig = Rig {
            conf: cluster.join("ceph.conf"),
            fuse: dir.path().join("fuse"),
            dir,
            server: None,
            port: 0,
            metrics: String::new(),
        };
        assert!(
            out.status.success(),
            "tests/peers/ceph.sh start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::create_dir_all(&rig.fuse).unwrap();
        let st = Command::new("timeout")
            .arg("30")
            .arg("ceph-fuse")
            .arg("-c")
            .arg(&rig.conf)
            .arg(&rig.fuse)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run ceph-fuse");
        assert!(st.success(), "ceph-fuse could not mount the test cluster");
        std::fs::create_dir_all(rig.fuse.join("vol")).unwrap();
        rig.serve();
        rig
    }

    fn serve(&mut self) {
        self.port = free_port();
        self.metrics = format!("127.0.0.1:{}", free_port());
        let out = std::fs::File::create(self.dir.path().join("serve.out")).unwrap();
        let err = std::fs::File::create(self.dir.path().join("serve.err")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args([
                "serve",
                "ceph:/vol",
                "--ceph-fs",
                "cephfs",
                "--no-root-squash",
            ])
            .arg("--ceph-conf")
            .arg(&self.conf)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--metrics")
            .arg(&self.metrics)
            .arg("--state-dir")
            .arg(self.dir.path().join("state"))
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn sluice serve");
        self.server = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let banner = std::fs::read_to_string(self.dir.path().join("serve.out")).unwrap();
            if banner.contains("ceph:/vol is /vol of file system cephfs") {
                return;
            }
            let errors = std::fs::read_to_string(self.dir.path().join("serve.err")).unwrap();
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

    fn url(&self, name: &str) -> String {
        format!("nfs://127.0.0.1:{}/vol/{name}", self.port)
    }

    fn fuse_path(&self, name: &str) -> PathBuf {
        self.fuse.join("vol").join(name)
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.fuse)
            .status();
        let _ = Command::new("umount").arg("-l").arg(&self.fuse).status();
        let _ = Command::new("bash")
            .arg(script())
            .arg("stop")
            .arg(self.dir.path().join("cluster"))
            .status();
    }
}

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

/// The Ceph calls behind NFS traffic show in `sluice stats` and `/metrics`: after a write, a
/// read and a listing through sluice, the export's libcephfs read, write and lookup counts have
/// grown and carry latencies; and the start-up banner names the cluster's monitor, the file
/// system and the Ceph client.
#[test]
fn ceph_calls_show_in_stats_and_metrics_and_the_banner_names_the_cluster() {
    let rig = Rig::start(false);
    let banner = std::fs::read_to_string(rig.dir.path().join("serve.out")).unwrap();
    let mon_port = std::fs::read_to_string(rig.dir.path().join("cluster/port")).unwrap();
    for part in [
        format!("monitors v1:127.0.0.1:{}", mon_port.trim()),
        "of file system cephfs".to_string(),
        "as client.admin".to_string(),
    ] {
        assert!(banner.contains(&part), "{part:?} in the banner: {banner}");
    }

    let series = |kind: &str, call: &str| {
        format!("sluice_backend_{kind}{{export=\"/vol\",backend=\"ceph\",call=\"{call}\"}}")
    };
    let before = common::prometheus(&rig.metrics);
    let local = rig.dir.path().join("stats.bin");
    let data = pattern(7, (3 << 20) + 11);
    std::fs::write(&local, &data).unwrap();
    sluice(&["cp", local.to_str().unwrap(), &rig.url("stats.bin")]);
    let p = sluice(&["cat", &rig.url("stats.bin")]);
    assert!(
        read(&p.stdout) == data,
        "sluice cat reads what sluice cp wrote"
    );
    sluice(&["ls", &rig.url("")]);
    let after = common::prometheus(&rig.metrics);

    for call in ["read", "write", "lookup"] {
        let calls = series("calls_total", call);
        let (was, now) = (value(&before, &calls), value(&after, &calls));
        assert!(
            now > was,
            "{calls}: {was} before the I/O, {now} after: {after}"
        );
        assert_eq!(
            value(&after, &series("latency_seconds_count", call)),
            now,
            "{call}: one latency per call"
        );
    }
    for call in ["read", "write"] {
        // Each of these calls moved at least 1 MiB through libcephfs: microseconds at least.
        let sum = value(&after, &series("latency_seconds_sum", call));
        assert!(sum > 0.0, "{call}: latency sum {sum}: {after}");
    }

    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["stats", &rig.metrics])
        .output()
        .expect("run sluice stats");
    assert!(out.status.success(), "sluice stats: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    // The section's rows, not the NFS tables' rows of the same names above it.
    let section = text
        .find("Backend ceph of export /vol:")
        .map(|at| &text[at..])
        .unwrap_or_else(|| panic!("a Ceph section: {text}"));
    for call in ["read", "write", "lookup"] {
        let row: Vec<&str> = section
            .lines()
            .find(|l| l.split_whitespace().next() == Some(call))
            .unwrap_or_else(|| panic!("no {call} row: {text}"))
            .split_whitespace()
            .collect();
        let calls: u64 = row[1].parse().unwrap();
        assert!(calls > 0, "{row:?}");
        assert!(row[3].parse::<u64>().is_ok(), "mean latency in {row:?}");
        assert!(
            row[4].starts_with("<=") || row[4].starts_with('>'),
            "99th percentile bound in {row:?}"
        );
    }
}

/// The value of one series (name and labels, exactly as rendered) in a Prometheus text; 0 when
/// absent.
fn value(prom: &str, series: &str) -> f64 {
    prom.lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}
