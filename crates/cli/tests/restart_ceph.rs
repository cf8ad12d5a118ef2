//! `sluice serve ceph:/vol` killed with SIGKILL and started again with the same state
//! directory, on a private one-node Ceph cluster (tests/peers/ceph.sh): restart recovery works
//! over Ceph as it does over a local export (fault_restart.rs).
//!
//! | behaviour | test |
//! |---|---|
//! | the restarted server reclaims its dead instance's Ceph session (same uuid); an NFSv4.1 client reclaims its open and lock in grace (CLAIM_PREVIOUS), its handle still resolves and its data is intact; a new client's OPEN waits for grace to end | `an_nfs_client_reclaims_its_open_and_lock_after_a_kill9_restart_on_ceph` |
//! | a handle of a file deep in a tree, taken before the restart, resolves after it, although the new libcephfs client has nothing of it cached (found through the MDS by inode number) | `handles_from_before_a_restart_resolve_after_it_on_ceph` |
//!
//! Needs root, /dev/fuse, ceph-fuse and the ceph packages (scripts/install-deps.sh).

mod common;

use common::ceph::CephCluster;
use common::{free_port, op_counts, pattern, TempDir};
use sluice_client::url::NfsUrl;
use sluice_client::v4::{Client as V4, CreateMode, Minor, V4Options};
use sluice_client::{ClientOptions, File};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The restarted server's grace period: far longer than the tests take to reclaim, so that its
/// end can only be the clients' RECLAIM_COMPLETE, never its deadline.
const GRACE_SECS: &str = "120";

/// The lease: long, so that the first client, idle from the kill until the test makes it
/// recover, does not renew (at a third of the lease) and recover on its own before the second
/// client's OPEN has been seen waiting for grace.
const LEASE_SECS: &str = "600";

/// Bound on a server start (the Ceph mount is bounded by 10 s; a start takes about 1 s).
const SERVER_START_TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn an_nfs_client_reclaims_its_open_and_lock_after_a_kill9_restart_on_ceph() {
    let mut rig = Rig::start("ceph-reclaim");
    let first = rig.session_line(1);
    assert!(
        first.ends_with("no earlier session to reclaim"),
        "first start: {first}"
    );
    let log = LogBuf::default();
    let log_w = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || log_w.clone())
        .with_max_level(tracing::Level::INFO)
        .finish();
    // A current-thread runtime: the client's tasks all run on this thread, so the thread-local
    // subscriber sees their lines.
    let _guard = tracing::subscriber::set_default(subscriber);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = NfsUrl::parse(&rig.url()).unwrap();
    let data = pattern(26, 1 << 20);
    rt.block_on(async {
        let mut options = ClientOptions::default();
        options.rpc.table.major_timeout = Duration::from_secs(1);
        let connect = || V4::connect(&url, &options, Minor::V1, V4Options::default());
        let a = connect().await.expect("connect");
        let (fh, attr) = a
            .create("/vol/data", 0o644, CreateMode::Truncate)
            .await
            .expect("create data");
        let mut w = File::new(a.clone(), fh.clone(), attr).writer();
        w.write(&data).await.unwrap();
        w.finish().await.expect("write and commit");
        assert_eq!(a.lock(&fh, b"holder", true, 0, 100).await.unwrap(), None);

        rig.kill9();
        rig.restart();
        let second = rig.session_line(2);
        assert!(
            second.ends_with("reclaimed the previous instance's session"),
            "the restarted server did not reclaim its Ceph session: {second}"
        );
        assert_eq!(
            uuid_of(&first),
            uuid_of(&second),
            "the same uuid at both starts"
        );

        // A new client's OPEN is refused while the server is in grace; its client waits.
        let b = connect().await.expect("second client");
        let b_open = {
            let b = b.clone();
            tokio::spawn(async move { b.open("/vol/data").await })
        };
        let metrics = rig.metrics.clone();
        let t0 = Instant::now();
        while op_counts(&metrics).get("OPEN").map_or(0, |c| c.1) == 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "the second client's OPEN was never refused in grace"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            !b_open.is_finished(),
            "a new OPEN went through before the first client reclaimed"
        );

        // The first client's next call recovers: new client id, its open and lock reclaimed,
        // RECLAIM_COMPLETE. Its handle resolves on the restarted server, its data is there.
        let got = a
            .getattr_fh(&fh.fh)
            .await
            .expect("GETATTR by the handle from before the restart");
        assert_eq!(got.size, data.len() as u64);
        let back = File::new(a.clone(), fh.clone(), got)
            .read_all()
            .await
            .expect("read back");
        assert!(back == data, "the data written before the restart changed");

        // Grace over: the second client's OPEN completes, and the reclaimed lock holds.
        let (fh_b, _) = b_open.await.unwrap().expect("the second client's OPEN");
        let conflict = b
            .test_lock(&fh_b, b"other", true, 50, 10)
            .await
            .expect("LOCKT")
            .expect("the first client's lock was not reclaimed");
        assert_eq!((conflict.offset, conflict.length), (0, 100));
        a.unlock(&fh, b"holder", 0, 100).await.expect("LOCKU");
        b.close(&fh_b).await.unwrap();
        a.close(&fh).await.unwrap();
    });
    let client = log.text();
    assert!(
        client.contains("NFSv4 opens after the new client id: 1 reclaimed, 0 opened again"),
        "the open was not reclaimed in grace:\n{client}"
    );
    let server = rig.log_text();
    let (_, restarted) = server
        .rsplit_once("NFSv4 grace period started")
        .unwrap_or_else(|| panic!("the restarted server started no grace period:\n{server}"));
    let ended = restarted
        .lines()
        .find(|l| l.contains("NFSv4 grace period ended"))
        .unwrap_or_else(|| panic!("grace never ended:\n{server}"));
    assert!(ended.contains("AllReclaimed"), "grace ended so: {ended}");
}

#[test]
fn handles_from_before_a_restart_resolve_after_it_on_ceph() {
    let mut rig = Rig::start("ceph-handles");
    let url = NfsUrl::parse(&rig.url()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let options = ClientOptions::default();
    let connect = || V4::connect(&url, &options, Minor::V1, V4Options::default());
    let (leaf, dir, fileid) = rt.block_on(async {
        let a = connect().await.expect("connect");
        let mut path = String::from("/vol");
        for name in ["t1", "t2", "t3", "t4"] {
            path = format!("{path}/{name}");
            a.mkdir(&path, 0o755).await.expect("mkdir");
        }
        let (f, attr) = a
            .create(&format!("{path}/leaf"), 0o644, CreateMode::Truncate)
            .await
            .expect("create");
        a.close(&f).await.unwrap();
        let (dir, _) = a.lookup(&path).await.expect("lookup the directory");
        a.shutdown().await;
        (f.fh, dir, attr.fileid)
    });

    rig.kill9();
    rig.restart();
    // The new process's libcephfs client has only the export root in its cache.
    rt.block_on(async {
        let c = connect().await.expect("connect after the restart");
        let attr = c
            .getattr_fh(&leaf)
            .await
            .expect("GETATTR by a handle from before the restart");
        assert_eq!(attr.fileid, fileid);
        let names: Vec<String> = c
            .readdir(&dir)
            .await
            .expect("READDIR by a directory handle from before the restart")
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, vec!["leaf".to_string()]);
    });
}

/// The cluster, a ceph-fuse mount of its root (to make /vol), and `sluice serve ceph:/vol`
/// with a state directory, a metrics port and a log appended to across restarts; all stopped
/// on drop.
struct Rig {
    server: Option<Child>,
    port: u16,
    metrics: String,
    /// Dropped after the server (the `Drop` below kills it first).
    ceph: CephCluster,
}

impl std::ops::Deref for Rig {
    type Target = CephCluster;
    fn deref(&self) -> &CephCluster {
        &self.ceph
    }
}

impl Rig {
    fn start(tag: &str) -> Rig {
        let mut rig = Rig {
            server: None,
            port: free_port(),
            metrics: format!("127.0.0.1:{}", free_port()),
            ceph: CephCluster::start_in(TempDir::new(tag), false),
        };
        rig.serve();
        rig
    }

    fn url(&self) -> String {
        format!("nfs://127.0.0.1:{}/vol?version=4.1", self.port)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The `ceph:/vol session ...` banner line of the `n`-th start.
    fn session_line(&self, n: usize) -> String {
        self.log_text()
            .lines()
            .filter(|l| l.trim_start().starts_with("ceph:/vol session "))
            .nth(n - 1)
            .unwrap_or_else(|| panic!("no banner of start {n}:\n{}", self.log_text()))
            .trim()
            .to_string()
    }

    /// Starts the server and waits for its banner (printed once it listens). The same port,
    /// state directory and log at every start; a port not yet free after a kill is retried.
    fn serve(&mut self) {
        let deadline = Instant::now() + SERVER_START_TIMEOUT;
        loop {
            let before = self.starts();
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.log_path())
                .unwrap();
            let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
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
                .args(["--grace-secs", GRACE_SECS, "--lease-secs", LEASE_SECS])
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("spawn sluice serve");
            loop {
                if self.starts() > before {
                    self.server = Some(child);
                    return;
                }
                if let Some(st) = child.try_wait().unwrap() {
                    let text = self.log_text();
                    assert!(
                        text.contains("cannot listen") && Instant::now() < deadline,
                        "sluice serve exited ({st}):\n{text}"
                    );
                    std::thread::sleep(Duration::from_millis(200));
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "no Ceph banner in {SERVER_START_TIMEOUT:?}:\n{}",
                    self.log_text()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    fn starts(&self) -> usize {
        self.log_text()
            .lines()
            .filter(|l| l.trim_start().starts_with("ceph:/vol session "))
            .count()
    }

    /// SIGKILL: no unmount, as in a crash. The Ceph session stays open at the MDS.
    fn kill9(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn restart(&mut self) {
        self.kill9();
        self.serve();
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The uuid in a `ceph:/vol session UUID: ...` line.
fn uuid_of(line: &str) -> &str {
    line.trim_start_matches("ceph:/vol session ")
        .split(": ")
        .next()
        .unwrap_or("")
}

/// The tracing lines of this thread's client, kept for assertions and echoed to stderr.
#[derive(Clone, Default)]
struct LogBuf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        std::io::stderr().write_all(b)?;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogBuf {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}
