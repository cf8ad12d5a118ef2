//! Fixtures for the interop tests: the `sluice` binary as a child process (killed on drop),
//! free loopback ports, temporary directories and the peer scripts in `tests/peers`.
//!
//! Peer tools are never optional here: the suite installs them (`scripts/install-deps.sh`), so a
//! missing `nfs-ls` or `tshark` is a broken environment and fails the test with that message
//! instead of silently skipping the interop proof.
#![allow(dead_code)]

pub mod ceph;
pub mod conns;
pub mod pki;

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
    /// The exported directory (canonical path, as MOUNT expects it), or the exports file
    /// given to `--exports` ([`Sluice::start_exports`]).
    pub export: PathBuf,
    /// `export` is an exports file.
    exports_file: bool,
    pub log: PathBuf,
    state_dir: PathBuf,
    extra: Vec<String>,
    /// False between [`Sluice::kill9`] and [`Sluice::restart`].
    running: bool,
}

impl Sluice {
    /// Serves `export` with `state_dir` and the extra flags on a free loopback port. Retries
    /// with another port if the chosen one was taken in between.
    pub fn start(export: &Path, state_dir: &Path, extra: &[&str], log: &Path) -> Sluice {
        Sluice::start_serving(export, false, state_dir, extra, log)
    }

    /// As [`Sluice::start`], serving the exports of an exports file (`--exports FILE`, which
    /// also holds the squash and Ceph options) instead of one directory.
    pub fn start_exports(file: &Path, state_dir: &Path, extra: &[&str], log: &Path) -> Sluice {
        Sluice::start_serving(file, true, state_dir, extra, log)
    }

    fn start_serving(
        export: &Path,
        exports_file: bool,
        state_dir: &Path,
        extra: &[&str],
        log: &Path,
    ) -> Sluice {
        let export = export.canonicalize().expect("export dir exists");
        for _attempt in 0..5 {
            let port = free_port();
            let _ = std::fs::remove_file(log);
            let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            let started_before = 0;
            let child = spawn_server(&export, exports_file, port, state_dir, &extra, log);
            let mut s = Sluice {
                child,
                port,
                export: export.clone(),
                exports_file,
                log: log.to_path_buf(),
                state_dir: state_dir.to_path_buf(),
                extra,
                running: true,
            };
            match s.wait_listening(started_before) {
                Ok(()) => return s,
                Err(e) if e.contains("cannot listen") => continue,
                Err(e) => panic!("sluice did not start: {e}"),
            }
        }
        panic!("sluice could not get a free port in 5 attempts");
    }

    /// The usual server of a test: exports `dirs/export` with its state in `dirs/state` (both
    /// created), root not squashed (the tests and the peer clients work as root), logging to
    /// `dirs/server.log`.
    pub fn start_in(dirs: &TempDir) -> Sluice {
        let export = dirs.path().join("export");
        let state = dirs.path().join("state");
        std::fs::create_dir_all(&export).unwrap();
        std::fs::create_dir_all(&state).unwrap();
        Sluice::start(
            &export,
            &state,
            &["--no-root-squash"],
            &dirs.path().join("server.log"),
        )
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL (`kill -9`): the server gets no chance to flush anything it holds in memory
    /// (write-behind data answered UNSTABLE is lost, as in a crash). Reaps the process.
    pub fn kill9(&mut self) {
        if self.running {
            let _ = self.child.kill();
            let _ = self.child.wait();
            self.running = false;
        }
    }

    /// Starts the server again on the same directory, state directory, flags and port (after
    /// [`Sluice::kill9`]; kills it first if it still runs). Its log is appended to the same
    /// file. The port may be briefly unavailable after the kill, so a failed bind is retried
    /// for up to [`RESTART_BIND_TIMEOUT`].
    pub fn restart(&mut self) {
        self.kill9();
        let deadline = Instant::now() + RESTART_BIND_TIMEOUT;
        loop {
            let started_before = self.times_started();
            self.child = spawn_server(
                &self.export,
                self.exports_file,
                self.port,
                &self.state_dir,
                &self.extra,
                &self.log,
            );
            self.running = true;
            match self.wait_listening(started_before) {
                Ok(()) => return,
                Err(e) if e.contains("cannot listen") && Instant::now() < deadline => {
                    let _ = self.child.wait();
                    self.running = false;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("sluice did not restart on port {}: {e}", self.port),
            }
        }
    }

    /// A field of the server's /proc/PID/status in KiB (`VmRSS`, `VmHWM`), if readable.
    pub fn status_kib(&self, field: &str) -> Option<u64> {
        proc_status_kib(self.pid(), field)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// How many times the log says a server started listening on this port (the log is
    /// appended to across restarts).
    fn times_started(&self) -> usize {
        let line = format!("sluice: serving NFSv3, NFSv4.1, NFSv4.2 on {}", self.addr());
        self.log_text().lines().filter(|l| *l == line).count()
    }

    /// Waits until this child listens: its log says so (the line is printed after the bind)
    /// for the `started_before + 1`-th time, and a connection goes through. A connection alone
    /// is not enough: between `free_port` and the bind another process (a parallel test's
    /// link, an ephemeral client port) may take the port, and a connect would reach it while
    /// this child fails to bind and exits.
    fn wait_listening(&mut self, started_before: usize) -> Result<(), String> {
        let deadline = Instant::now() + SERVER_START_TIMEOUT;
        loop {
            if let Some(st) = self.child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!("exited with {st}; log:\n{}", self.log_text()));
            }
            if self.times_started() > started_before
                && TcpStream::connect_timeout(&self.addr(), Duration::from_millis(200)).is_ok()
            {
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

/// How long [`Sluice::restart`] retries binding the old port.
pub const RESTART_BIND_TIMEOUT: Duration = Duration::from_secs(10);

/// `sluice serve` with its output appended to `log`; `export` is a directory, or an exports
/// file when `exports_file`.
fn spawn_server(
    export: &Path,
    exports_file: bool,
    port: u16,
    state_dir: &Path,
    extra: &[String],
    log: &Path,
) -> Child {
    let logf = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("open server log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.arg("serve");
    if exports_file {
        cmd.arg("--exports");
    }
    cmd.arg(export)
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--state-dir")
        .arg(state_dir)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(logf.try_clone().expect("clone log handle"))
        .stderr(logf)
        .spawn()
        .expect("spawn the sluice binary")
}

/// A field of /proc/PID/status given in kB (`VmRSS`, `VmHWM`).
pub fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The NFS URL of `path` (absolute, inside the export) on a sluice serving NFS and MOUNT on
/// `port`.
pub fn nfs_url(port: u16, path: &Path) -> String {
    format!(
        "nfs://127.0.0.1{}?version=3&nfsport={port}&mountport={port}",
        path.display()
    )
}

/// The URL of `path` on a sluice on `port` over NFS `version` ("3", "4.1", "4.2"): for 3 as
/// [`nfs_url`]; for 4.x a session on `port` (no MOUNT).
pub fn nfs_url_version(port: u16, path: &Path, version: &str) -> String {
    if version == "3" {
        nfs_url(port, path)
    } else {
        format!(
            "nfs://127.0.0.1{}?version={version}&nfsport={port}",
            path.display()
        )
    }
}

/// The program name of NFS `version` in `--stats` tables ("NFS3", "NFS4").
pub fn stats_prog(version: &str) -> &'static str {
    if version == "3" {
        "NFS3"
    } else {
        "NFS4"
    }
}

/// Hex SHA-256 of a byte slice.
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex(&Sha256::digest(data))
}

/// Hex SHA-256 of a file, streamed.
pub fn sha256_file(path: &Path) -> String {
    use sha2::{Digest, Sha256};
    use std::io::Read as _;
    let mut f = std::fs::File::open(path)
        .unwrap_or_else(|e| panic!("open {} for hashing: {e}", path.display()));
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).expect("read for hashing");
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    hex(&h.finalize())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `len` bytes of a deterministic pseudo-random stream (xorshift64* from `seed`): data that
/// does not compress and differs per seed, so a misplaced or stale block shows in the hash.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Waits until `cond` holds, polling every `step`; false if `timeout` passed first.
pub fn wait_until(timeout: Duration, step: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(step);
    }
}

/// Size of a file, 0 if it does not exist (yet).
pub fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// A `sluice` client command (`cp`, `cat`, `mount`...) as a child process with stdout and
/// stderr in files; killed and reaped on drop.
pub struct SluiceProc {
    child: Child,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    _dir: TempDir,
}

impl SluiceProc {
    /// Runs `sluice args...` with the extra environment (`RUST_LOG`, say).
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> SluiceProc {
        let dir = TempDir::new("proc");
        let stdout = dir.path().join("stdout");
        let stderr = dir.path().join("stderr");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).expect("stdout file"))
            .stderr(std::fs::File::create(&stderr).expect("stderr file"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn the sluice binary");
        SluiceProc {
            child,
            stdout,
            stderr,
            _dir: dir,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    /// Waits up to `timeout` for the exit; kills the process and panics with its output if it
    /// takes longer.
    pub fn wait_timeout(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.try_wait() {
                return st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "sluice did not finish within {timeout:?}; killed.\n--- stderr ---\n{}",
                    self.stderr_text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for SluiceProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `sluice link` between a client and a server; killed on drop.
pub struct Link {
    proc_: SluiceProc,
    pub port: u16,
}

impl Link {
    /// Listens on a free loopback port and forwards to `to`, with the extra flags (`--rtt`,
    /// `--rate`, `--reset-after`, `--stall-after`/`--stall-for`).
    pub fn start(to: u16, flags: &[&str]) -> Link {
        for _attempt in 0..5 {
            let port = free_port();
            let listen = format!("127.0.0.1:{port}");
            let dest = format!("127.0.0.1:{to}");
            let mut args = vec!["link", "--listen", &listen, "--to", &dest];
            args.extend_from_slice(flags);
            let mut proc_ = SluiceProc::spawn(&args, &[]);
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let up = wait_until(SERVER_START_TIMEOUT, Duration::from_millis(20), || {
                proc_.try_wait().is_some()
                    || TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
            });
            if up && proc_.try_wait().is_none() {
                return Link { proc_, port };
            }
            // Exited (port taken in between?) or never listened: try another port.
            drop(proc_);
        }
        panic!("sluice link could not start in 5 attempts");
    }

    pub fn log_text(&self) -> String {
        self.proc_.stderr_text()
    }
}

/// A `sluice mount` of an export; unmounted (`sluice umount`, then a lazy `umount -l` if
/// that fails) and killed on drop, so a failed test leaves no mount behind.
pub struct FuseMount {
    proc_: SluiceProc,
    pub mountpoint: PathBuf,
    mounted: bool,
}

impl FuseMount {
    /// Mounts `url` on `mountpoint` (an existing empty directory) with the extra `flags`
    /// (`--timeo 1`) and waits until the kernel lists the mount. `env` goes to the mount
    /// process (`RUST_LOG` to see reconnects).
    pub fn mount(url: &str, mountpoint: &Path, flags: &[&str], env: &[(&str, &str)]) -> FuseMount {
        let mp = mountpoint.to_str().expect("utf-8 mount point");
        let mut args = vec!["mount", url, mp];
        args.extend_from_slice(flags);
        let mut proc_ = SluiceProc::spawn(&args, env);
        let ok = wait_until(SERVER_START_TIMEOUT, Duration::from_millis(20), || {
            proc_.try_wait().is_some() || is_mounted(mountpoint)
        }) && is_mounted(mountpoint);
        // Marked mounted even on failure: a mount that completes late is still undone on drop.
        let m = FuseMount {
            proc_,
            mountpoint: mountpoint.to_path_buf(),
            mounted: true,
        };
        assert!(
            ok,
            "sluice mount did not mount {}:\n{}",
            mountpoint.display(),
            m.proc_.stderr_text()
        );
        m
    }

    pub fn log_text(&self) -> String {
        self.proc_.stderr_text()
    }

    /// Unmounts with `sluice umount` and waits for the mount process to exit.
    pub fn unmount(&mut self) {
        if !self.mounted {
            return;
        }
        self.mounted = false;
        let st = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("umount")
            .arg(&self.mountpoint)
            .status();
        if !st.is_ok_and(|s| s.success()) {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(&self.mountpoint)
                .status();
        }
        let gone = wait_until(Duration::from_secs(10), Duration::from_millis(20), || {
            self.proc_.try_wait().is_some()
        });
        assert!(gone, "sluice mount did not exit after umount");
    }
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        if self.mounted {
            self.mounted = false;
            let _ = Command::new(env!("CARGO_BIN_EXE_sluice"))
                .arg("umount")
                .arg(&self.mountpoint)
                .status();
            if is_mounted(&self.mountpoint) {
                let _ = Command::new("umount")
                    .arg("-l")
                    .arg(&self.mountpoint)
                    .status();
            }
        }
    }
}

/// True if `path` is a mount point in /proc/self/mounts.
pub fn is_mounted(path: &Path) -> bool {
    let want = path.to_string_lossy();
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(&*want))
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

/// `op -> (calls, errors)` of the server's v4 per-op counters (`sluice stats --prometheus`).
pub fn op_counts(metrics: &str) -> std::collections::HashMap<String, (u64, u64)> {
    let mut ops: std::collections::HashMap<String, (u64, u64)> = Default::default();
    for line in prometheus(metrics).lines() {
        for (prefix, errors) in [
            ("sluice_nfs4_op_calls_total{op=\"", false),
            ("sluice_nfs4_op_errors_total{op=\"", true),
        ] {
            let Some((op, n)) = line.strip_prefix(prefix).and_then(|r| r.split_once("\"} ")) else {
                continue;
            };
            let n: u64 = n
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("bad line {line}"));
            let e = ops.entry(op.to_string()).or_default();
            if errors {
                e.1 = n;
            } else {
                e.0 = n;
            }
        }
    }
    ops
}

/// One unlabelled metric of the server's metrics endpoint (0 when absent).
pub fn metric(metrics: &str, name: &str) -> u64 {
    prometheus(metrics)
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0)
}

/// The server's metrics endpoint in the Prometheus text format, read with `sluice stats
/// --prometheus`.
pub fn prometheus(metrics: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["stats", "--prometheus", metrics])
        .output()
        .expect("run sluice stats");
    assert!(out.status.success(), "sluice stats: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The last 8 KiB of every log of a kclient run folder (console, run.sh, the guest's output,
/// tlshd's), for a failing kernel-client test's message.
pub fn kclient_logs(run_dir: &Path) -> String {
    let mut out = String::new();
    for dir in [run_dir.to_path_buf(), run_dir.join("out")] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if !p.is_file() || p.extension().is_some_and(|x| x != "log" && x != "txt") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let mut start = text.len().saturating_sub(8192);
            while !text.is_char_boundary(start) {
                start += 1;
            }
            out.push_str(&format!("--- {} ---\n{}\n", p.display(), &text[start..]));
        }
    }
    out
}
