//! Fixtures for the client tests (`client_*.rs`): a private nfs-ganesha (tests/peers/ganesha.sh),
//! the sluice server binary, and helpers. (`common/` holds the interop and fault tests' own.)
#![allow(dead_code)]

mod announce;
pub use announce::announced_port;

use sha2::{Digest, Sha256};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "sluice-client-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
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

/// Two consecutive free loopback ports (NFS and MOUNT for ganesha).
pub fn free_port_pair() -> u16 {
    for _ in 0..100 {
        let a = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = a.local_addr().unwrap().port();
        if p < 65535 && TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            return p;
        }
    }
    panic!("no free pair of loopback ports");
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An NFS server under test: where its export lives on disk and how to build URLs to it.
pub trait Server {
    /// The exported directory on the local filesystem.
    fn export_dir(&self) -> &Path;
    /// `nfs://` URL of `rel` (relative to the export, starting with '/' or empty).
    fn url(&self, rel: &str) -> String;
    fn name(&self) -> &str;
}

/// nfs-ganesha 4.3 exporting a fresh directory, NFS on PORT and MOUNT on PORT+1.
pub struct Ganesha {
    export: TempDir,
    state: TempDir,
    port: u16,
}

impl Ganesha {
    /// Starts ganesha; panics loudly when it is not installed.
    pub fn start() -> Ganesha {
        Self::start_with_env(&[])
    }

    /// With settings of tests/peers/ganesha.sh in its environment (for example
    /// `GANESHA_MINOR_VERSIONS`).
    pub fn start_with_env(env: &[(&str, &str)]) -> Ganesha {
        let found = Command::new("sh")
            .args(["-c", "command -v ganesha.nfsd"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        assert!(
            found,
            "nfs-ganesha (ganesha.nfsd) is not installed: run `bash scripts/install-deps.sh`. \
             These tests need a real third-party NFS server and do not skip."
        );
        let export = TempDir::new("ganesha-export");
        let state = TempDir::new("ganesha-state");
        let script = workspace_root().join("tests/peers/ganesha.sh");
        // ganesha cannot be told to pick its own ports: a pair found free here may be taken
        // by a server another test starts before ganesha binds it. ganesha.sh refuses a busy
        // port; then another pair is tried.
        let mut attempts = 0;
        let port = loop {
            attempts += 1;
            let port = free_port_pair();
            let out = Command::new("bash")
                .arg(&script)
                .arg("start")
                .arg(export.path())
                .arg(port.to_string())
                .arg(state.path())
                .envs(env.iter().copied())
                .output()
                .expect("run ganesha.sh");
            if out.status.success() {
                break port;
            }
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                attempts < 3 && err.contains("already in use"),
                "ganesha.sh start failed: {}{err}",
                String::from_utf8_lossy(&out.stdout),
            );
        };
        Ganesha {
            export,
            state,
            port,
        }
    }
}

impl Server for Ganesha {
    fn export_dir(&self) -> &Path {
        self.export.path()
    }
    fn url(&self, rel: &str) -> String {
        format!(
            "nfs://127.0.0.1{}{rel}?version=3&nfsport={}&mountport={}",
            self.export.path().display(),
            self.port,
            self.port + 1
        )
    }
    fn name(&self) -> &str {
        "ganesha"
    }
}

impl Drop for Ganesha {
    fn drop(&mut self) {
        let script = workspace_root().join("tests/peers/ganesha.sh");
        let _ = Command::new("bash")
            .arg(&script)
            .arg("stop")
            .arg(self.state.path())
            .output();
    }
}

/// The sluice server binary (`sluice serve DIR --listen 127.0.0.1:PORT`), if built.
pub struct SluiceServer {
    export: TempDir,
    _state: TempDir,
    child: std::process::Child,
    port: u16,
}

impl SluiceServer {
    /// $SLUICE_BIN, or the `sluice` binary cargo built for these tests.
    pub fn binary() -> PathBuf {
        std::env::var_os("SLUICE_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_sluice")))
    }

    pub fn start(bin: &Path) -> SluiceServer {
        Self::start_with(bin, &[], true)
    }

    /// With extra `serve` flags (e.g. `--udp`: NFS and MOUNT also over UDP on the same port).
    /// `secure`: as root, require a reserved source port (a `sluice link` proxy in between
    /// connects from an ordinary port, so tests through it pass false).
    pub fn start_with(bin: &Path, extra: &[&str], secure: bool) -> SluiceServer {
        let export = TempDir::new("sluice-export");
        let state = TempDir::new("sluice-state");
        // Port 0: the server binds a port the kernel picks and says which on stdout. Picking a
        // free port here and passing it would race with the other tests of this binary, which
        // start servers in parallel: the loser of a race exits, and its test would talk to the
        // winner's server until that test ends and kills it.
        // Root as root (like ganesha's No_Root_Squash), and `--secure`: the client binds a
        // reserved source port when it runs as root, as the kernel does.
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .arg(export.path())
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--no-root-squash")
            .arg("--state-dir")
            .arg(state.path())
            .args(extra);
        // SAFETY: geteuid has no preconditions.
        if secure && unsafe { libc::geteuid() } == 0 {
            cmd.arg("--secure");
        }
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn sluice serve");
        let port = announced_port(child.stdout.take().expect("piped stdout"));
        let Some(port) = port else {
            let status = child.wait();
            panic!("sluice serve exited without saying where it listens: {status:?}");
        };
        SluiceServer {
            export,
            _state: state,
            child,
            port,
        }
    }
}

impl SluiceServer {
    /// The port NFS, MOUNT and PORTMAP listen on.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Server for SluiceServer {
    fn export_dir(&self) -> &Path {
        self.export.path()
    }
    fn url(&self, rel: &str) -> String {
        // PORTMAP is served on the NFS port: the authority's port is enough.
        format!(
            "nfs://127.0.0.1:{}{}{rel}",
            self.port,
            self.export.path().display()
        )
    }
    fn name(&self) -> &str {
        "sluice"
    }
}

impl Drop for SluiceServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn sha256_file(p: &Path) -> String {
    let mut h = Sha256::new();
    let mut f = std::fs::File::open(p).unwrap();
    std::io::copy(&mut f, &mut h).unwrap();
    format!("{:x}", h.finalize())
}

/// A file of `len` pseudo-random bytes (fast: xorshift, not a CSPRNG).
pub fn make_file(p: &Path, len: u64, seed: u64) {
    use std::io::Write;
    let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(p).unwrap());
    let mut x = seed | 1;
    let mut left = len;
    let mut buf = vec![0u8; 1 << 20];
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        for chunk in buf[..n].chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let b = x.to_le_bytes();
            chunk.copy_from_slice(&b[..chunk.len()]);
        }
        f.write_all(&buf[..n]).unwrap();
        left -= n as u64;
    }
    f.flush().unwrap();
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
