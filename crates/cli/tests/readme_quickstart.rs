//! Issue #16: a newcomer's first command works verbatim.
//!
//! The first line of the README's first ```sh block is run exactly as written (`sh -c`), in a
//! fresh working directory inside the repository's `target/` (so `cargo run` finds the
//! workspace from there; it builds the release binary, the price of testing the line verbatim).
//! The server must create and serve `./sluice-export` on 127.0.0.1:2049, print the URL to paste,
//! and then the client must reach it on bare URLs (no ports: no portmapper runs on 111 here, so
//! this also proves the fall-back to 2049): `sluice ls nfs://127.0.0.1/` lists the export with
//! its allowed clients, `ls` and `cat` of the export read back a file placed in it, and `cp`
//! writes into it as root, squashed to the anonymous user, as the quick start promises.
//! Then the lines of the README's second ```sh block (the quick start's `sluice ls`, `cp` and
//! `cat`) run verbatim too, each through `sh -c` in the directory the server was started in,
//! with the `sluice` this test built first on the PATH: the file they copy in reads back.
//!
//! Port 2049 must be free: a test that silently skipped would prove nothing, so a taken port
//! fails with a message saying what holds it up. No other test listens on 2049.

mod common;

use common::repo_root;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the README's command may take to build the release binary and start listening:
/// a cold release build of the workspace on a shared 2-CPU machine takes several minutes.
const BUILD_AND_START_TIMEOUT: Duration = Duration::from_secs(1800);

/// The port the README's server listens on by default (RFC 1813's NFS port).
const NFS_PORT: u16 = 2049;

#[test]
fn the_readme_first_command_serves_a_default_export_reachable_on_bare_urls() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let line = first_command(&readme).expect("a ```sh block in the README");
    assert!(
        TcpListener::bind(("127.0.0.1", NFS_PORT)).is_ok(),
        "port {NFS_PORT} on 127.0.0.1 is taken, so the README's first command cannot listen \
         there: stop what holds it (`ss -ltnp 'sport = :{NFS_PORT}'`) and rerun"
    );
    let work = repo_root()
        .join("target")
        .join(format!("readme-quickstart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).expect("create the working directory");
    let mut server = Server::start(&line, &work);
    server.wait_listening();

    let export = work.join("sluice-export");
    let mode = std::fs::metadata(&export)
        .expect("the default export was created")
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o1777, "default export mode {mode:o}");
    let abs = export.canonicalize().unwrap();
    let abs_s = abs.to_str().unwrap().to_string();
    let greeting = server.stdout();
    assert!(
        greeting.contains(&format!("nfs://127.0.0.1{abs_s}")),
        "the server did not print the URL of its export: {greeting}"
    );

    let content = b"hello from the README quick start\n";
    std::fs::write(abs.join("hello.txt"), content).unwrap();

    let exports = sluice(&["ls", "nfs://127.0.0.1/"]);
    let row = exports
        .lines()
        .find(|l| l.split_whitespace().next() == Some(abs_s.as_str()))
        .unwrap_or_else(|| panic!("the export is not listed: {exports}"));
    assert_eq!(row.split_whitespace().nth(1), Some("*"), "{row}");

    let listing = sluice(&["ls", &format!("nfs://127.0.0.1{abs_s}")]);
    assert!(
        listing.lines().any(|l| l.trim() == "hello.txt"),
        "{listing}"
    );
    let cat = sluice_bytes(&["cat", &format!("nfs://127.0.0.1{abs_s}/hello.txt")]);
    assert_eq!(cat, content);

    // Root is squashed to 65534; the 1777 default export lets it write anyway.
    let local = work.join("up.txt");
    std::fs::write(&local, b"written by a squashed root\n").unwrap();
    sluice(&[
        "cp",
        "-q",
        local.to_str().unwrap(),
        &format!("nfs://127.0.0.1{abs_s}/up.txt"),
    ]);
    let written = abs.join("up.txt");
    assert_eq!(
        std::fs::read(&written).unwrap(),
        b"written by a squashed root\n"
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&written).unwrap().uid(), 65534);

    // The quick start's client lines, verbatim.
    let notes = b"notes for the README's quick start\n";
    std::fs::write(work.join("notes.txt"), notes).unwrap();
    let lines = sh_block(&readme, 1);
    assert!(
        lines.len() >= 3,
        "the README's second ```sh block should hold the quick start's ls, cp and cat: {lines:?}"
    );
    for line in &lines {
        let out = run_verbatim(line, &work);
        if line.starts_with("sluice ls nfs://127.0.0.1/ ") {
            assert!(
                out.contains(&abs_s),
                "`{line}` did not list the export: {out}"
            );
        }
        if line.starts_with("sluice cat ") {
            assert_eq!(
                out.as_bytes(),
                notes,
                "`{line}` did not read the copied file back"
            );
        }
    }
    assert_eq!(
        std::fs::read(abs.join("notes.txt")).expect("the quick start's cp wrote notes.txt"),
        notes
    );

    drop(server);
    let _ = std::fs::remove_dir_all(&work);
}

/// The first command line of the first ```sh block.
fn first_command(readme: &str) -> Option<String> {
    let start = readme.find("```sh\n")? + "```sh\n".len();
    let line = readme[start..].lines().next()?;
    Some(line.to_string())
}

/// The lines of the `n`-th (from 0) ```sh block, as written (comments are the shell's).
fn sh_block(readme: &str, n: usize) -> Vec<String> {
    readme
        .split("```sh\n")
        .nth(n + 1)
        .and_then(|rest| rest.split("```").next())
        .map(|block| {
            block
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Runs one README line with `sh -c` in `dir` (its `$PWD`), the test's `sluice` first on the
/// PATH; fails the test unless it succeeds. Its standard output.
fn run_verbatim(line: &str, dir: &Path) -> String {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_sluice")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(line)
        .current_dir(dir)
        .env("PWD", dir)
        .env("PATH", path)
        .stdin(Stdio::null())
        .output()
        .expect("spawn sh -c");
    assert!(
        out.status.success(),
        "the README's line `{line}` failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The README's command running in its own process group (cargo, then the server it starts);
/// the whole group is killed on drop, whatever the test's outcome.
struct Server {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    fn start(line: &str, dir: &Path) -> Server {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(line)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("spawn sh -c");
        let stdout = collect(child.stdout.take().unwrap());
        let stderr = collect(child.stderr.take().unwrap());
        Server {
            child,
            stdout,
            stderr,
        }
    }

    fn wait_listening(&mut self) {
        let deadline = Instant::now() + BUILD_AND_START_TIMEOUT;
        loop {
            if TcpStream::connect(("127.0.0.1", NFS_PORT)).is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the README's first command exited ({status}) before listening:\n{}",
                    self.stderr()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the README's first command did not listen on {NFS_PORT} within {:?}:\n{}",
                BUILD_AND_START_TIMEOUT,
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn stdout(&self) -> String {
        // The greeting is printed right after binding; give the pipe a moment to carry it.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let text = self.stdout.lock().unwrap().clone();
            if text.contains("sluice ls") || Instant::now() > deadline {
                return text;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stderr(&self) -> String {
        let text = self.stderr.lock().unwrap().clone();
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let pgid = self.child.id() as libc::pid_t;
        // SAFETY: signals our own process group (created with process_group(0) at spawn).
        unsafe {
            libc::kill(-pgid, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            // SAFETY: probing our own process group with signal 0.
            if unsafe { libc::kill(-pgid, 0) } != 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // SAFETY: as above; the group may already be gone.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

fn collect(mut pipe: impl Read + Send + 'static) -> Arc<Mutex<String>> {
    let buf = Arc::new(Mutex::new(String::new()));
    let b = buf.clone();
    std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut chunk) {
            if n == 0 {
                break;
            }
            b.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    });
    buf
}

/// Runs the sluice client binary; fails the test on a non-zero exit.
fn sluice(args: &[&str]) -> String {
    String::from_utf8(sluice_bytes(args)).expect("utf-8 output")
}

fn sluice_bytes(args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice");
    assert!(
        out.status.success(),
        "sluice {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
