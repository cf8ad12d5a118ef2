//! Fixtures for the interop tests: the `sluice` binary as a child process (killed on drop),
//! free loopback ports, temporary directories and the peer scripts in `tests/peers`.
//!
//! Peer tools are never optional here: the suite installs them (`scripts/install-deps.sh`), so a
//! missing `nfs-ls` or `tshark` is a broken environment and fails the test with that message
//! instead of silently skipping the interop proof.
#![allow(dead_code)]

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long the server gets to start listening. It binds before logging anything, so this is
/// only the process start-up; 20 s leaves room for a loaded 2-core CI machine.
pub const SERVER_START_TIMEOUT: Duration = Duration::from_secs(20);

/// The repository root (`tests/peers` lives there).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// Fails the test when a peer tool is not installed.
pub fn require_tools(tools: &[&str]) {
    for tool in tools {
        let found = std::env::var_os("PATH")
            .map(|paths| std::env::split_paths(&paths).any(|d| d.join(tool).is_file()))
            .unwrap_or(false);
        assert!(
            found,
            "peer tool `{tool}` is not installed: run `bash scripts/install-deps.sh` \
             (interop tests never skip)"
        );
    }
}

/// A fresh directory under /tmp, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "sluice-cli-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind 127.0.0.1:0")
        .local_addr()
        .expect("local addr")
        .port()
}

/// `sluice serve` running as a child process; killed and reaped on drop.
pub struct Sluice {
    child: Child,
    pub port: u16,
    /// The exported directory (canonical path, as MOUNT expects it).
    pub export: PathBuf,
    pub log: PathBuf,
}

impl Sluice {
    /// Serves `export` with `state_dir` and the extra flags on a free loopback port. Retries
    /// with another port if the chosen one was taken in between.
    pub fn start(export: &Path, state_dir: &Path, extra: &[&str], log: &Path) -> Sluice {
        let export = export.canonicalize().expect("export dir exists");
        for _attempt in 0..5 {
            let port = free_port();
            let logf = std::fs::File::create(log).expect("create server log");
            let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
                .arg("serve")
                .arg(&export)
                .arg("--listen")
                .arg(format!("127.0.0.1:{port}"))
                .arg("--state-dir")
                .arg(state_dir)
                .args(extra)
                .stdin(Stdio::null())
                .stdout(logf.try_clone().expect("clone log handle"))
                .stderr(logf)
                .spawn()
                .expect("spawn the sluice binary");
            let mut s = Sluice {
                child,
                port,
                export: export.clone(),
                log: log.to_path_buf(),
            };
            match s.wait_listening() {
                Ok(()) => return s,
                Err(e) if e.contains("cannot listen") => continue,
                Err(e) => panic!("sluice did not start: {e}"),
            }
        }
        panic!("sluice could not get a free port in 5 attempts");
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_listening(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + SERVER_START_TIMEOUT;
        loop {
            if let Some(st) = self.child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!("exited with {st}; log:\n{}", self.log_text()));
            }
            if TcpStream::connect_timeout(&self.addr(), Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "not listening on {} after {SERVER_START_TIMEOUT:?}; log:\n{}",
                    self.addr(),
                    self.log_text()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a finished script printed.
pub struct ScriptRun {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl ScriptRun {
    pub fn describe(&self) -> String {
        format!(
            "exit {} after {:.1?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status, self.elapsed, self.stdout, self.stderr
        )
    }
}

/// Runs `tests/peers/<script> args...` with `env`, killing its whole process group if it runs
/// longer than `timeout` (the scripts bound their own waits; this is the backstop).
pub fn run_peer_script(
    script: &str,
    args: &[&str],
    env: &[(&str, &str)],
    timeout: Duration,
) -> ScriptRun {
    use std::os::unix::process::CommandExt;
    let path = repo_root().join("tests/peers").join(script);
    let out_dir = TempDir::new("script-out");
    let out_path = out_dir.path().join("stdout");
    let err_path = out_dir.path().join("stderr");
    let started = Instant::now();
    let mut cmd = Command::new("bash");
    cmd.arg(&path)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).expect("stdout file"))
        .stderr(std::fs::File::create(&err_path).expect("stderr file"))
        .process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", path.display()));
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for script") {
            break st;
        }
        if started.elapsed() > timeout {
            // The negative pid names the process group the script leads.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let st = child.wait().expect("reap killed script");
            let run = collect(st, &out_path, &err_path, started);
            panic!(
                "{script} did not finish within {timeout:?}; killed.\n{}",
                run.describe()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    collect(status, &out_path, &err_path, started)
}

fn collect(status: ExitStatus, out: &Path, err: &Path, started: Instant) -> ScriptRun {
    let read = |p: &Path| {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(p) {
            let _ = f.read_to_string(&mut s);
        }
        s
    };
    ScriptRun {
        status,
        stdout: read(out),
        stderr: read(err),
        elapsed: started.elapsed(),
    }
}

/// A dumpcap capture of one TCP port through `tests/peers/tshark-check.sh`; stopped on drop if
/// the test did not stop it (a failed assertion must not leave dumpcap running).
pub struct Capture {
    pub pcap: PathBuf,
    port: u16,
    running: bool,
}

impl Capture {
    pub fn start(port: u16, pcap: &Path) -> Capture {
        let run = run_peer_script(
            "tshark-check.sh",
            &[
                "start",
                &port.to_string(),
                pcap.to_str().expect("utf-8 path"),
            ],
            &[],
            Duration::from_secs(30),
        );
        assert!(
            run.status.success(),
            "capture did not start: {}",
            run.describe()
        );
        Capture {
            pcap: pcap.to_path_buf(),
            port,
            running: true,
        }
    }

    pub fn stop(&mut self) {
        if !self.running {
            return;
        }
        self.running = false;
        let run = run_peer_script(
            "tshark-check.sh",
            &["stop", self.pcap.to_str().expect("utf-8 path")],
            &[],
            Duration::from_secs(60),
        );
        assert!(
            run.status.success(),
            "capture did not stop: {}",
            run.describe()
        );
    }

    /// Stops the capture and lets tshark judge it; returns the per-procedure report.
    pub fn check(&mut self, expected_procs: &[&str]) -> ScriptRun {
        self.stop();
        let port = self.port.to_string();
        let pcap = self.pcap.to_str().expect("utf-8 path").to_string();
        let mut args = vec!["check", &pcap, &port];
        args.extend_from_slice(expected_procs);
        run_peer_script("tshark-check.sh", &args, &[], Duration::from_secs(180))
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if self.running {
            self.running = false;
            let _ = run_peer_script(
                "tshark-check.sh",
                &["stop", self.pcap.to_str().unwrap_or_default()],
                &[],
                Duration::from_secs(60),
            );
        }
    }
}

/// `calls=N` of `PROG PROC` in a tshark-check report, if the procedure was seen.
pub fn calls_seen(report: &str, prog: &str, proc_: &str) -> Option<u64> {
    report.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        if it.next()? != prog || it.next()? != proc_ {
            return None;
        }
        it.next()?.strip_prefix("calls=")?.parse().ok()
    })
}
