//! The FUSE mount under ordinary tools (cp, rsync, tar, mv, rm), against the sluice server and
//! nfs-ganesha, over NFSv3 and NFSv4.1; fcntl and flock locks over v4.1 (LOCK, LOCKT, LOCKU),
//! and fcntl locks over v3 (NLM), meeting v4.1 locks; `user.*` extended attributes over 4.2
//! (setfattr, getfattr, the `*xattr(2)` calls).
//! Each test has its own directories, ports and mount point; every command runs under
//! `timeout`. A missing peer fails the test loudly: nothing is skipped.

#[path = "../../cli/tests/servers/announce.rs"]
mod announce;

use sluice_client::namespace::{SetAttr, SetTime};
use sluice_client::{Client, ClientOptions};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

// --- fixtures ----------------------------------------------------------------------------------

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "sluice-fuse-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn free_port_pair() -> u16 {
    for _ in 0..100 {
        let a = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = a.local_addr().unwrap().port();
        if p < 65535 && TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            return p;
        }
    }
    panic!("no free pair of loopback ports");
}

trait Peer {
    fn export_dir(&self) -> &Path;
    fn url(&self) -> String;
    /// Whether SETATTR of a symlink's times takes effect. nfs-ganesha 4.3 (FSAL_VFS) answers
    /// NFS3_OK to a SETATTR that sets a symlink's atime and mtime and leaves both unchanged (seen
    /// on the wire: the reply's post-op mtime is the creation time), so rsync finds the link's
    /// time different on every run. The mount sends the SETATTR either way.
    fn sets_symlink_times(&self) -> bool {
        true
    }
}

struct SluiceServer {
    export: TempDir,
    _state: TempDir,
    child: std::process::Child,
    port: u16,
}

impl SluiceServer {
    fn start() -> SluiceServer {
        SluiceServer::start_with(&[])
    }

    fn start_with(extra: &[&str]) -> SluiceServer {
        let bin = std::env::var("SLUICE_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|_| workspace_root().join("target/debug/sluice"));
        assert!(
            bin.exists(),
            "the sluice server binary {} is missing: run `cargo build -p sluice` (or set \
             SLUICE_BIN). These tests do not skip.",
            bin.display()
        );
        let export = TempDir::new("sluice-export");
        let state = TempDir::new("sluice-state");
        // Port 0, read back from the server's announcement: a port picked here could be taken
        // by a server another test starts in parallel.
        let mut child = Command::new(&bin)
            .arg("serve")
            .arg(export.path())
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--state-dir")
            .arg(state.path())
            .arg("--no-root-squash")
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sluice serve");
        let Some(port) = announce::announced_port(child.stdout.take().expect("piped stdout"))
        else {
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

impl Peer for SluiceServer {
    fn export_dir(&self) -> &Path {
        self.export.path()
    }
    fn url(&self) -> String {
        format!(
            "nfs://127.0.0.1{}?version=3&nfsport={p}&mountport={p}",
            self.export.path().display(),
            p = self.port
        )
    }
}

impl Drop for SluiceServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Ganesha {
    export: TempDir,
    state: TempDir,
    port: u16,
}

impl Ganesha {
    fn start() -> Ganesha {
        let found = Command::new("sh")
            .args(["-c", "command -v ganesha.nfsd"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        assert!(
            found,
            "nfs-ganesha (ganesha.nfsd) is not installed: run `bash scripts/install-deps.sh`. \
             These tests do not skip."
        );
        let export = TempDir::new("ganesha-export");
        let state = TempDir::new("ganesha-state");
        let port = free_port_pair();
        let out = Command::new("timeout")
            .arg("60")
            .arg("bash")
            .arg(workspace_root().join("tests/peers/ganesha.sh"))
            .arg("start")
            .arg(export.path())
            .arg(port.to_string())
            .arg(state.path())
            .output()
            .expect("run ganesha.sh");
        assert!(
            out.status.success(),
            "ganesha.sh start failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ganesha {
            export,
            state,
            port,
        }
    }
}

impl Peer for Ganesha {
    fn export_dir(&self) -> &Path {
        self.export.path()
    }
    fn sets_symlink_times(&self) -> bool {
        false
    }
    fn url(&self) -> String {
        format!(
            "nfs://127.0.0.1{}?version=3&nfsport={}&mountport={}",
            self.export.path().display(),
            self.port,
            self.port + 1
        )
    }
}

impl Drop for Ganesha {
    fn drop(&mut self) {
        let _ = Command::new("timeout")
            .arg("30")
            .arg("bash")
            .arg(workspace_root().join("tests/peers/ganesha.sh"))
            .arg("stop")
            .arg(self.state.path())
            .output();
    }
}

/// A mount served by this process; unmounted (lazily if need be) on drop.
struct Mount {
    rt: tokio::runtime::Runtime,
    mounted: Option<sluice_fuse::Mounted>,
    dir: TempDir,
}

impl Mount {
    fn new(url: &str) -> Mount {
        Mount::new_with(url, |_| {})
    }

    /// A mount whose arguments `adjust` changes first.
    fn new_with(url: &str, adjust: impl FnOnce(&mut sluice_fuse::MountArgs)) -> Mount {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = TempDir::new("mnt");
        let mut args = sluice_fuse::MountArgs::new(url, dir.path());
        adjust(&mut args);
        let mounted = rt
            .block_on(async {
                tokio::time::timeout(Duration::from_secs(30), sluice_fuse::mount(args)).await
            })
            .expect("mount timed out")
            .unwrap_or_else(|e| panic!("mount failed: {e}"));
        Mount {
            rt,
            mounted: Some(mounted),
            dir,
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `sluice umount`, then the session must end by itself.
    fn unmount(mut self) {
        // The kernel sends the last RELEASEs after close(2) returned: the mount may be busy
        // for a moment after the last file was closed.
        let mut tries = 0;
        while let Err(e) = sluice_fuse::umount(self.path()) {
            tries += 1;
            assert!(tries < 20, "umount: {e}");
            std::thread::sleep(Duration::from_millis(100));
        }
        let m = self.mounted.take().unwrap();
        let r = self
            .rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(20), m.wait()).await });
        r.expect("session did not end after umount")
            .expect("session result");
        assert!(!is_mounted(self.path()), "still mounted after umount");
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.mounted.is_some() {
            let _ = sluice_fuse::umount(self.path());
            if is_mounted(self.path()) {
                let _ = Command::new("umount").arg("-l").arg(self.path()).status();
            }
        }
    }
}

fn is_mounted(p: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let p = p.to_string_lossy();
    mounts
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(p.as_ref()))
}

/// Runs a shell command under `timeout 120`; panics with its output on failure.
fn sh(cmd: &str) -> String {
    let out = Command::new("timeout")
        .args(["120", "sh", "-c", cmd])
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "`{cmd}` failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn make_file(p: &Path, len: usize, seed: u64) {
    let mut x = seed | 1;
    let mut buf = vec![0u8; len];
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    std::fs::write(p, buf).unwrap();
}

/// A source tree: nested directories, empty to multi-wsize files, odd modes, a symlink, a
/// hard link, and set mtimes.
fn make_tree(root: &Path) {
    let d = |p: &str| std::fs::create_dir_all(root.join(p)).unwrap();
    d("a/b/c");
    d("empty");
    d("x y");
    let sizes = [
        0usize,
        1,
        4095,
        4097,
        65536,
        1 << 20,
        (1 << 20) + 1,
        3 * (1 << 20) + 12345,
    ];
    for (i, n) in sizes.iter().enumerate() {
        make_file(&root.join(format!("f{i}")), *n, i as u64 + 1);
        make_file(&root.join(format!("a/b/g{i}")), *n / 3, i as u64 + 100);
    }
    make_file(&root.join("a/b/c/deep"), 10_000, 7);
    make_file(&root.join("x y/spaced name"), 123, 8);
    std::os::unix::fs::symlink("../f3", root.join("a/link")).unwrap();
    // a link time in the past, so that rsync always has to set it (a link made in the same
    // second as its copy would hide a SETATTR that did nothing)
    sh(&format!(
        "touch -h -d '2019-05-06 07:08:09' '{}/a/link'",
        root.display()
    ));
    std::fs::hard_link(root.join("f2"), root.join("a/hard")).unwrap();
    sh(&format!(
        "chmod 0640 '{0}/f1' && chmod 0755 '{0}/f4' && chmod 0700 '{0}/a/b'",
        root.display()
    ));
    sh(&format!(
        "touch -d '2020-01-02 03:04:05.123456789' '{}/f5'",
        root.display()
    ));
}

// --- the scenario ------------------------------------------------------------------------------

/// `peer`'s URL asking for NFS `version` ("3", "4.1").
fn versioned_url(peer: &dyn Peer, version: &str) -> String {
    peer.url()
        .replace("version=3", &format!("version={version}"))
}

fn exercise(peer: &dyn Peer, version: &str) {
    let src = TempDir::new("src");
    make_tree(src.path());
    let m = Mount::new(&versioned_url(peer, version));
    assert_eq!(
        m.mounted.as_ref().unwrap().fs().version().to_string(),
        version,
        "the NFS version mounted"
    );
    let mnt = m.path().to_path_buf();
    let (s, mp, backing) = (
        src.path().display(),
        mnt.display(),
        peer.export_dir().display(),
    );

    // The kernel's readahead in front of the mount is raised from the 128 KiB every FUSE file
    // system starts with (as root, which these tests run as): with 128 KiB a sequential reader
    // waits on one small batch of FUSE READs after another.
    let dev = std::os::unix::fs::MetadataExt::dev(&std::fs::metadata(&mnt).unwrap());
    let ra = std::fs::read_to_string(format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        libc::major(dev),
        libc::minor(dev)
    ))
    .unwrap();
    assert_eq!(
        ra.trim().parse::<u64>().unwrap(),
        sluice_fuse::mount::KERNEL_READAHEAD_BYTES >> 10,
        "the mount's kernel readahead"
    );

    // statfs and an empty listing
    sh(&format!("df '{mp}' >/dev/null && ls -la '{mp}' >/dev/null"));

    // cp of a file: the mount, the server's backing directory
    sh(&format!(
        "cp '{s}/f7' '{mp}/big' && cmp '{s}/f7' '{mp}/big' && cmp '{s}/f7' '{backing}/big'"
    ));

    // cp -a of a tree
    sh(&format!(
        "cp -a '{s}' '{mp}/cpa' && diff -r '{s}' '{mp}/cpa' && diff -r '{s}' '{backing}/cpa'"
    ));

    // rsync -a, then a second run that must transfer nothing
    sh(&format!("rsync -a '{s}/' '{mp}/rs/'"));
    sh(&format!("diff -r '{s}' '{mp}/rs'"));
    let again = sh(&format!("rsync -a --itemize-changes '{s}/' '{mp}/rs/'"));
    let changed: Vec<&str> = again
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        // the peer ignores symlink times: only that one line is allowed
        .filter(|l| peer.sets_symlink_times() || *l != ".L..t...... a/link -> ../f3")
        .collect();
    assert!(
        changed.is_empty(),
        "second rsync transferred something:\n{again}"
    );

    // tar extract into the mount
    let tarball = TempDir::new("tar");
    let t = tarball.path().display();
    sh(&format!(
        "tar -C '{s}' -cf '{t}/t.tar' . && mkdir '{mp}/tarx' && tar -C '{mp}/tarx' -xf '{t}/t.tar'"
    ));
    sh(&format!(
        "diff -r '{s}' '{mp}/tarx' && diff -r '{s}' '{backing}/tarx'"
    ));

    // modes, mtimes and sizes as the server sees them
    let stat = |p: String| sh(&format!("stat -c '%a %s %Y %F' '{p}'"));
    let link_stat = |p: String| sh(&format!("stat -c '%a %s %F' '{p}'"));
    assert_eq!(
        link_stat(format!("{s}/a/link")),
        link_stat(format!("{backing}/rs/a/link"))
    );
    let mut checked = vec!["f1", "f4", "f5", "a/b"];
    if peer.sets_symlink_times() {
        checked.push("a/link");
    }
    for f in checked {
        assert_eq!(
            stat(format!("{s}/{f}")),
            stat(format!("{mp}/rs/{f}")),
            "{f}"
        );
        assert_eq!(
            stat(format!("{s}/{f}")),
            stat(format!("{backing}/rs/{f}")),
            "{f}"
        );
    }

    // rename over an existing file; unlink
    sh(&format!(
        "echo one > '{mp}/r1' && echo two > '{mp}/r2' && mv '{mp}/r1' '{mp}/r2'"
    ));
    assert_eq!(std::fs::read_to_string(mnt.join("r2")).unwrap(), "one\n");
    assert!(!mnt.join("r1").exists());
    assert_eq!(
        std::fs::read_to_string(peer.export_dir().join("r2")).unwrap(),
        "one\n"
    );
    sh(&format!(
        "mv '{mp}/cpa/a' '{mp}/moved' && test -f '{mp}/moved/b/c/deep' && test ! -e '{mp}/cpa/a'"
    ));
    sh(&format!(
        "rm '{mp}/r2' && test ! -e '{mp}/r2' && test ! -e '{backing}/r2'"
    ));
    sh(&format!("rm -r '{mp}/cpa' && test ! -e '{backing}/cpa'"));

    // truncate, chmod, utimens, append
    sh(&format!(
        "truncate -s 1000 '{mp}/big' && test $(stat -c %s '{backing}/big') = 1000"
    ));
    sh(&format!(
        "chmod 0604 '{mp}/big' && test $(stat -c %a '{backing}/big') = 604"
    ));
    sh(&format!("touch -d '2001-02-03 04:05:06' '{mp}/big' && test $(stat -c %Y '{backing}/big') = $(date -d '2001-02-03 04:05:06' +%s)"));
    sh(&format!(
        "printf abc >> '{mp}/big' && test $(stat -c %s '{mp}/big') = 1003"
    ));

    // symlink, hard link, mkdir/rmdir
    sh(&format!(
        "ln -s target '{mp}/sl' && test $(readlink '{mp}/sl') = target"
    ));
    sh(&format!(
        "ln '{mp}/big' '{mp}/big2' && test $(stat -c %h '{mp}/big') = 2"
    ));
    sh(&format!(
        "mkdir '{mp}/d' && rmdir '{mp}/d' && test ! -e '{backing}/d'"
    ));
    // mknod: a FIFO (MKNOD over v3, CREATE NF4FIFO over v4)
    sh(&format!(
        "mkfifo '{mp}/fifo' && test -p '{backing}/fifo' && rm '{mp}/fifo'"
    ));

    // written through the mount (dd: 1 MiB blocks), read by the library; the kernel's chunks
    // must have been coalesced into wsize WRITEs and committed
    let prog = if version == "3" { "NFS3" } else { "NFS4" };
    let calls = |name: &str| {
        let st = m.mounted.as_ref().unwrap().fs().namespace().stats();
        st.get(prog, name).map_or(0, |p| p.calls)
    };
    let (writes0, commits0) = (calls("WRITE"), calls("COMMIT"));
    sh(&format!(
        "dd if='{s}/f7' of='{mp}/viadd' bs=1M status=none conv=fsync"
    ));
    let wsize = m.mounted.as_ref().unwrap().fs().wsize() as u64;
    let len = std::fs::metadata(src.path().join("f7")).unwrap().len();
    let writes = calls("WRITE") - writes0;
    assert!(
        writes <= len.div_ceil(wsize) + 1,
        "{writes} WRITEs for {len} bytes at wsize {wsize}: not coalesced"
    );
    assert!(calls("COMMIT") > commits0, "fsync/close sent no COMMIT");
    let expect = std::fs::read(src.path().join("f7")).unwrap();
    let url = peer.url();
    let got = m.rt.block_on(async move {
        let c = Client::connect(url.as_str(), ClientOptions::default())
            .await
            .unwrap();
        let f = c.open("/viadd").await.unwrap();
        f.read_all().await.unwrap()
    });
    assert!(
        got == expect,
        "file written through the mount differs when read by the client"
    );

    // a change made on the server is seen after reopening (close-to-open)
    std::fs::write(peer.export_dir().join("c2o"), b"first").unwrap();
    assert_eq!(std::fs::read(mnt.join("c2o")).unwrap(), b"first");
    std::thread::sleep(Duration::from_millis(1100)); // a different mtime second on any server
    std::fs::write(peer.export_dir().join("c2o"), b"second, longer").unwrap();
    assert_eq!(std::fs::read(mnt.join("c2o")).unwrap(), b"second, longer");

    // clean unmount: nothing open, the session ends by itself
    m.unmount();
}

#[test]
fn tools_work_on_a_mount_of_the_sluice_server() {
    let server = SluiceServer::start();
    exercise(&server, "3");
}

#[test]
fn tools_work_on_a_v4_1_mount_of_the_sluice_server() {
    let server = SluiceServer::start();
    exercise(&server, "4.1");
}

#[test]
fn tools_work_on_a_mount_of_ganesha() {
    let server = Ganesha::start();
    exercise(&server, "3");
}

#[test]
fn tools_work_on_a_v4_1_mount_of_ganesha() {
    let server = Ganesha::start();
    exercise(&server, "4.1");
}

/// A URL without a version mounts the highest the server offers: 4.2 from `sluice serve`.
#[test]
fn a_url_without_a_version_mounts_nfsv4_2() {
    let server = SluiceServer::start();
    let url = server
        .url()
        .replace("?version=3&", "?")
        .replace("&version=3", "");
    let m = Mount::new(&url);
    assert_eq!(
        m.mounted.as_ref().unwrap().fs().version().to_string(),
        "4.2"
    );
    std::fs::write(m.path().join("x"), b"over 4.2").unwrap();
    assert_eq!(std::fs::read(m.path().join("x")).unwrap(), b"over 4.2");
    // Written under a write delegation: the close sent the data UNSTABLE, and the server
    // puts it in the exported file at the COMMIT, which the unmount sends (as it would a
    // recall or an fsync) before it returns the delegation.
    m.unmount();
    assert_eq!(
        std::fs::read(server.export_dir().join("x")).unwrap(),
        b"over 4.2"
    );
}

#[test]
fn mounting_a_missing_mountpoint_fails_with_a_message() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let args = sluice_fuse::MountArgs::new(
        "nfs://127.0.0.1/nowhere?nfsport=1&mountport=1",
        "/nonexistent/sluice-mnt",
    );
    let e = rt
        .block_on(sluice_fuse::mount(args))
        .err()
        .expect("must fail");
    assert!(e.contains("/nonexistent/sluice-mnt"), "{e}");
}

/// The mount's reads are the client library's: a sequential reader is read ahead for; a reader
/// that then seeks far away makes the window shrink and gets only what it asks for (4 KiB
/// pages); both get the file's bytes. Through `Fs` directly, so the offsets are exactly the
/// ones given here (the kernel would add its own readahead on top).
#[test]
fn mount_reads_go_through_the_autotuned_readahead() {
    use sluice_fuse::fs::ROOT_INO;
    use sluice_fuse::{Fs, FsConfig};
    const MIB: usize = 1 << 20;
    let server = SluiceServer::start();
    let path = server.export_dir().join("big");
    make_file(&path, 64 * MIB, 7);
    let want = std::fs::read(&path).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = Client::connect(server.url().as_str(), ClientOptions::default())
            .await
            .unwrap();
        let ns: std::sync::Arc<dyn sluice_client::Namespace> = std::sync::Arc::new(client.clone());
        let fs = Fs::new(ns, "", FsConfig::default()).await.unwrap();
        let node = fs.lookup(ROOT_INO, b"big").await.unwrap();
        let h = fs.open(node.ino, false).await.unwrap().fh;

        // Sequential: 128 KiB application reads (the kernel's usual size) over 8 MiB.
        const PIECE: usize = 128 << 10;
        for off in (0..8 * MIB).step_by(PIECE) {
            let got = fs.read(h, off as u64, PIECE as u32).await.unwrap();
            assert!(got == want[off..off + PIECE], "sequential read at {off}");
        }
        let seq = client.read_stats();
        assert!(
            seq.readahead_bytes > 0,
            "a sequential reader through the mount must be read ahead for: {seq:?}"
        );

        // Random 4 KiB reads in [40, 64) MiB, beyond anything the sequential window reached
        // (it doubles only after a whole window was read, so after 8 MiB read it ends before
        // 8 + 16 MiB): only what is asked is fetched.
        let mut x: u64 = 12345;
        let n = 200u64;
        for _ in 0..n {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let page = (40 * MIB / 4096) as u64 + (x >> 33) % (24 * MIB / 4096) as u64;
            let off = (page * 4096) as usize;
            let got = fs.read(h, off as u64, 4096).await.unwrap();
            assert!(got == want[off..off + 4096], "random read at {off}");
        }
        let after = client.read_stats();
        assert!(
            after.window_shrinks > seq.window_shrinks,
            "seeking away must shrink the sequential window: {after:?}"
        );
        let random_fetched = after.read_bytes - seq.read_bytes;
        assert!(
            random_fetched <= 2 * n * 4096,
            "random reads through the mount fetched {random_fetched} bytes for {} asked",
            n * 4096
        );
        fs.release(h, None).await.unwrap();
    });
}

/// Close-to-open over NFSv3: an open right after the LOOKUP that found the name (one `open(2)`
/// of a name the kernel has not cached) uses the LOOKUP's attributes; a later open of the same
/// file asks the server with GETATTR; with `--noac` every open asks. Through `Fs` directly,
/// counting the client's GETATTR calls.
#[test]
fn an_open_right_after_its_lookup_sends_no_getattr_and_a_later_open_does() {
    use sluice_fuse::fs::ROOT_INO;
    use sluice_fuse::{Fs, FsConfig};
    let server = SluiceServer::start();
    std::fs::write(server.export_dir().join("f"), b"close to open").unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = Client::connect(server.url().as_str(), ClientOptions::default())
            .await
            .unwrap();
        let getattrs = || client.stats().get("NFS3", "GETATTR").map_or(0, |p| p.calls);
        // 200 ms rather than the default 2 ms, so that a loaded machine's pause between the
        // LOOKUP and the open does not decide the test.
        for (config, first_open_asks) in [
            (
                FsConfig {
                    open_trusts_attrs_for: std::time::Duration::from_millis(200),
                    ..FsConfig::default()
                },
                0,
            ),
            (
                FsConfig {
                    open_trusts_attrs_for: std::time::Duration::ZERO,
                    ..FsConfig::default()
                },
                1,
            ),
        ] {
            let ns: std::sync::Arc<dyn sluice_client::Namespace> =
                std::sync::Arc::new(client.clone());
            let fs = Fs::new(ns, "", config).await.unwrap();
            let node = fs.lookup(ROOT_INO, b"f").await.unwrap();
            let before = getattrs();
            let h = fs.open(node.ino, false).await.unwrap().fh;
            assert_eq!(getattrs() - before, first_open_asks, "first open");
            assert_eq!(fs.read(h, 0, 100).await.unwrap(), b"close to open");
            fs.release(h, None).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            let before = getattrs();
            let h = fs.open(node.ino, false).await.unwrap().fh;
            assert_eq!(getattrs() - before, 1, "an open 250 ms after the lookup");
            fs.release(h, None).await.unwrap();
        }
    });
}

// --- locks over NFSv4.1 ----------------------------------------------------------------------

/// fcntl locks through a v3 mount go to the server's NLM: two processes conflict on
/// overlapping ranges and not on disjoint ones, F_GETLK reports the holder's range, an unlock
/// lets the other in; and a lock taken through a v3 mount and one through a v4.1 mount of the
/// same server conflict both ways (one lock table for NLM and NFSv4).
#[test]
fn fcntl_locks_on_a_v3_mount_go_to_nlm_and_meet_v4_locks() {
    let server = SluiceServer::start_with(&[]);
    let m3 = Mount::new(&versioned_url(&server, "3"));
    let m4 = Mount::new(&versioned_url(&server, "4.1"));
    let file3 = m3.path().join("locked3");
    std::fs::write(&file3, vec![7u8; 4096]).unwrap();
    let file4 = m4.path().join("locked3");
    let path3 = std::ffi::CString::new(file3.as_os_str().as_encoded_bytes()).unwrap();
    let path4 = std::ffi::CString::new(file4.as_os_str().as_encoded_bytes()).unwrap();
    let (p3, p4) = (path3.as_c_str(), path4.as_c_str());
    const CONFLICT: i32 = 1;
    let try_lock = |p: &std::ffi::CStr, start: i64, len: i64| {
        let fd = open_rw(p);
        match fcntl_lock(fd, libc::F_SETLK, libc::F_WRLCK, start, len).0 {
            0 => 0,
            libc::EAGAIN | libc::EACCES => CONFLICT,
            _ => 9,
        }
    };

    // This process holds [0, 100) through the v3 mount.
    let fd = open_rw(p3);
    assert!(fd >= 0);
    assert_eq!(fcntl_lock(fd, libc::F_SETLK, libc::F_WRLCK, 0, 100).0, 0);
    assert_eq!(in_child(|| try_lock(p3, 50, 10)), CONFLICT, "v3 vs v3");
    assert_eq!(in_child(|| try_lock(p3, 100, 100)), 0, "disjoint on v3");
    assert_eq!(in_child(|| try_lock(p4, 50, 10)), CONFLICT, "v4 vs v3");
    let getlk = in_child(|| {
        let fd = open_rw(p3);
        let (e, fl) = fcntl_lock(fd, libc::F_GETLK, libc::F_RDLCK, 10, 5);
        if e != 0 {
            return 9;
        }
        let ok = i32::from(fl.l_type) == libc::F_WRLCK && fl.l_start == 0 && fl.l_len == 100;
        if ok {
            0
        } else {
            CONFLICT
        }
    });
    assert_eq!(getlk, 0, "F_GETLK must report the write lock on [0, 100)");
    assert_eq!(fcntl_lock(fd, libc::F_SETLK, libc::F_UNLCK, 0, 100).0, 0);
    assert_eq!(
        in_child(|| try_lock(p3, 50, 10)),
        0,
        "free after the unlock"
    );

    // Now this process holds [0, 100) through the v4.1 mount: the v3 mount meets it.
    let fd4 = open_rw(p4);
    assert!(fd4 >= 0);
    assert_eq!(fcntl_lock(fd4, libc::F_SETLK, libc::F_WRLCK, 0, 100).0, 0);
    assert_eq!(in_child(|| try_lock(p3, 10, 1)), CONFLICT, "v3 vs v4");
    assert_eq!(fcntl_lock(fd4, libc::F_SETLK, libc::F_UNLCK, 0, 100).0, 0);
    assert_eq!(
        in_child(|| try_lock(p3, 10, 1)),
        0,
        "free after the v4 unlock"
    );
    // SAFETY: our fds.
    unsafe {
        libc::close(fd);
        libc::close(fd4);
    }
}

/// Runs `f` in a forked child and returns its exit code. The child only makes system calls
/// (this process has other threads, so it must not allocate or take locks after the fork).
fn in_child(f: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child calls only async-signal-safe functions (open, fcntl, flock, alarm,
    // sigaction, _exit) on data prepared before the fork.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            libc::_exit(f());
        }
        wait_child(pid)
    }
}

/// Starts `f` in a forked child (see [`in_child`]); its pid.
fn spawn_child(f: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: as in_child.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            libc::_exit(f());
        }
        pid
    }
}

fn wait_child(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: waiting for our own child.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid, "waitpid");
    assert!(libc::WIFEXITED(status), "child did not exit: {status:#x}");
    libc::WEXITSTATUS(status)
}

/// open(2) of a path prepared before a fork. Close-on-exec: the other tests of this process
/// spawn commands, which must not inherit (and hold the locks and the mount of) these.
fn open_rw(path: &std::ffi::CStr) -> i32 {
    // SAFETY: a valid C string.
    unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) }
}

/// fcntl F_SETLK / F_SETLKW / F_GETLK of `[start, start + len)` (`len` 0: to the end).
fn fcntl_lock(fd: i32, cmd: i32, typ: i32, start: i64, len: i64) -> (i32, libc::flock) {
    // SAFETY: a zeroed flock is valid; fd is ours.
    unsafe {
        let mut fl: libc::flock = std::mem::zeroed();
        fl.l_type = typ as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = start;
        fl.l_len = len;
        let r = libc::fcntl(fd, cmd, &mut fl);
        let err = if r == 0 { 0 } else { *libc::__errno_location() };
        (err, fl)
    }
}

extern "C" fn on_alarm(_: libc::c_int) {}

/// The server's count of an NFSv4 op, from its metrics endpoint.
fn server_op_calls(metrics: u16, op: &str) -> u64 {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", metrics)).unwrap();
    c.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    c.read_to_string(&mut body).unwrap();
    let key = format!("sluice_nfs4_op_calls_total{{op=\"{op}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(key.as_str()))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// fcntl and flock through a v4.1 mount are the server's locks: two processes conflict on
/// overlapping ranges and not on disjoint ones, F_GETLK reports the holder's range, an unlock
/// lets the other in, F_SETLKW waits for a release and is interrupted by a signal, flock
/// conflicts with flock and (over NFS, as on Linux) with fcntl; the server counted LOCK, LOCKT
/// and LOCKU.
#[test]
fn fcntl_and_flock_on_a_v4_1_mount_are_server_locks() {
    let metrics = free_port_pair();
    let addr = format!("127.0.0.1:{metrics}");
    let server = SluiceServer::start_with(&["--metrics", &addr]);
    let m = Mount::new(&versioned_url(&server, "4.1"));
    let file = m.path().join("locked");
    std::fs::write(&file, vec![7u8; 4096]).unwrap();
    let path = std::ffi::CString::new(file.as_os_str().as_encoded_bytes()).unwrap();
    let p = path.as_c_str();
    const CONFLICT: i32 = 1;

    // This process holds a write lock on [0, 100).
    let fd = open_rw(p);
    assert!(fd >= 0);
    assert_eq!(fcntl_lock(fd, libc::F_SETLK, libc::F_WRLCK, 0, 100).0, 0);

    // Another process: [50, 60) conflicts, [100, 200) does not.
    let overlapping = in_child(|| {
        let fd = open_rw(p);
        match fcntl_lock(fd, libc::F_SETLK, libc::F_WRLCK, 50, 10).0 {
            0 => 0,
            libc::EAGAIN | libc::EACCES => CONFLICT,
            _ => 9,
        }
    });
    assert_eq!(
        overlapping, CONFLICT,
        "an overlapping write lock must be refused"
    );
    let disjoint = in_child(|| {
        let fd = open_rw(p);
        fcntl_lock(fd, libc::F_SETLK, libc::F_WRLCK, 100, 100).0
    });
    assert_eq!(disjoint, 0, "a disjoint range must be granted");
    // A read lock conflicts with the write lock too; F_GETLK shows the holder's range.
    let getlk = in_child(|| {
        let fd = open_rw(p);
        let (e, fl) = fcntl_lock(fd, libc::F_GETLK, libc::F_RDLCK, 10, 5);
        if e != 0 {
            return 9;
        }
        let ok = i32::from(fl.l_type) == libc::F_WRLCK && fl.l_start == 0 && fl.l_len == 100;
        if ok {
            0
        } else {
            CONFLICT
        }
    });
    assert_eq!(getlk, 0, "F_GETLK must report the write lock on [0, 100)");
    // flock (a whole-file lock over NFS) conflicts with the fcntl lock.
    let flock_vs_fcntl = in_child(|| {
        let fd = open_rw(p);
        // SAFETY: our fd.
        match unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } {
            0 => 0,
            _ => CONFLICT,
        }
    });
    assert_eq!(flock_vs_fcntl, CONFLICT, "flock must meet the fcntl lock");

    // Released: the other process gets [50, 60).
    assert_eq!(fcntl_lock(fd, libc::F_SETLK, libc::F_UNLCK, 0, 100).0, 0);
    let after_unlock = in_child(|| {
        let fd = open_rw(p);
        fcntl_lock(fd, libc::F_SETLK, libc::F_WRLCK, 50, 10).0
    });
    assert_eq!(after_unlock, 0, "after the unlock the range must be free");

    // F_SETLKW waits for the holder's release.
    assert_eq!(fcntl_lock(fd, libc::F_SETLK, libc::F_WRLCK, 0, 0).0, 0);
    let started = Instant::now();
    let waiter = spawn_child(|| {
        let fd = open_rw(p);
        fcntl_lock(fd, libc::F_SETLKW, libc::F_WRLCK, 0, 10).0
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(fcntl_lock(fd, libc::F_SETLK, libc::F_UNLCK, 0, 0).0, 0);
    assert_eq!(wait_child(waiter), 0, "the waiting lock must be granted");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(10),
        "F_SETLKW waited {waited:?}"
    );

    // F_SETLKW is interrupted by a signal (EINTR), as on a local file system.
    assert_eq!(fcntl_lock(fd, libc::F_SETLK, libc::F_WRLCK, 0, 0).0, 0);
    let interrupted = in_child(|| {
        // SAFETY: a handler without SA_RESTART, then an alarm, in the child.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_alarm as *const () as usize;
            libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut());
            libc::alarm(1);
        }
        let fd = open_rw(p);
        fcntl_lock(fd, libc::F_SETLKW, libc::F_WRLCK, 0, 10).0
    });
    assert_eq!(
        interrupted,
        libc::EINTR,
        "a signal must end F_SETLKW with EINTR"
    );
    assert_eq!(fcntl_lock(fd, libc::F_SETLK, libc::F_UNLCK, 0, 0).0, 0);

    // flock against flock: held by one open file description, refused to another process,
    // free again once that description is closed.
    let fd2 = open_rw(p);
    // SAFETY: our fd.
    assert_eq!(
        unsafe { libc::flock(fd2, libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
    let flock_held = in_child(|| {
        let fd = open_rw(p);
        // SAFETY: our fd.
        match unsafe { libc::flock(fd, libc::LOCK_SH | libc::LOCK_NB) } {
            0 => 0,
            _ => CONFLICT,
        }
    });
    assert_eq!(
        flock_held, CONFLICT,
        "a held flock must be refused to another"
    );
    // SAFETY: our fds.
    unsafe {
        libc::close(fd2);
    }
    // The kernel sends RELEASE after close(2) returns: a few tries.
    let flock_free = in_child(|| {
        let fd = open_rw(p);
        for _ in 0..50 {
            // SAFETY: our fd; usleep is a plain system call.
            unsafe {
                if libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) == 0 {
                    return 0;
                }
                libc::usleep(100_000);
            }
        }
        CONFLICT
    });
    assert_eq!(flock_free, 0, "closing the holder must release its flock");
    // SAFETY: our fd.
    unsafe {
        libc::close(fd);
    }

    for op in ["LOCK", "LOCKT", "LOCKU"] {
        assert!(server_op_calls(metrics, op) > 0, "the server saw no {op}");
    }
    m.unmount();
}

/// A change another client makes over NFSv4 that keeps size and mtime (the same number of
/// bytes written, then the mtime set back with SETATTR) is seen through the change attribute:
/// after the attribute cache time the mount serves the new bytes. Size and mtime alone (all
/// NFSv3 has) could not tell.
#[test]
fn a_v4_change_that_keeps_size_and_mtime_is_seen_through_the_change_attribute() {
    let server = SluiceServer::start();
    let url = versioned_url(&server, "4.1");
    let m = Mount::new_with(&url, |a| {
        a.acregmin = 1;
        a.acregmax = 1;
    });
    std::fs::write(server.export_dir().join("same"), b"old bytes").unwrap();
    assert_eq!(std::fs::read(m.path().join("same")).unwrap(), b"old bytes");

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (before, after) = rt.block_on(async {
        let ns = sluice_client::connect(
            &sluice_client::NfsUrl::parse(&url).unwrap(),
            &ClientOptions::default(),
        )
        .await
        .expect("connect");
        let rel = format!("{}/same", server.export_dir().display());
        let (fh, before) = ns.lookup_path(&rel).await.expect("lookup");
        let f = ns.open(&fh, before, true).await.expect("open");
        let mut w = f.writer();
        w.write(b"new bytes").await.unwrap();
        w.finish().await.unwrap();
        f.close().await.unwrap();
        let restore = SetAttr {
            mtime: SetTime::ClientTime(before.mtime),
            ..SetAttr::default()
        };
        let after = ns.setattr_attrs(&fh, &restore).await.expect("setattr");
        ns.shutdown().await.unwrap();
        (before, after)
    });
    assert_eq!(
        (after.size, after.mtime),
        (before.size, before.mtime),
        "size and mtime as they were"
    );
    assert!(
        before.change.is_some(),
        "a v4 server has a change attribute"
    );
    assert_ne!(after.change, before.change, "the change attribute moved");

    // Past the attribute cache time (1 s here), the next open revalidates.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(std::fs::read(m.path().join("same")).unwrap(), b"new bytes");
    m.unmount();
}

/// `sluice mount` exits promptly after `sluice umount` even when its server has just gone:
/// nothing it still owes a dead server (NFSv4's DESTROY_SESSION, calls in flight) keeps the
/// process alive. (It used to sleep on for 20 s and more.)
#[test]
fn a_mount_process_exits_promptly_after_umount_when_its_server_is_gone() {
    let server = SluiceServer::start();
    let url = versioned_url(&server, "4.1");
    let dir = TempDir::new("mnt-proc");
    let bin = std::env::var("SLUICE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace_root().join("target/debug/sluice"));
    let mut child = Command::new(&bin)
        .arg("mount")
        .arg(&url)
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sluice mount");
    let mounted_by = Instant::now() + Duration::from_secs(30);
    while !is_mounted(dir.path()) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "sluice mount exited before mounting"
        );
        assert!(Instant::now() < mounted_by, "not mounted within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::metadata(dir.path().join(".")).expect("stat through the mount");
    drop(server);

    let status = Command::new(&bin)
        .arg("umount")
        .arg(dir.path())
        .status()
        .expect("run sluice umount");
    assert!(status.success(), "sluice umount: {status:?}");
    let unmounted = Instant::now();
    let bound = Duration::from_secs(10);
    let exited = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if unmounted.elapsed() > bound {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if exited.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let waited = unmounted.elapsed();
    assert!(
        exited.is_some(),
        "sluice mount still running {waited:?} after umount"
    );
}

/// The value of attribute `name` of `path` through `getxattr(2)`, or the errno.
fn xattr_get(path: &Path, name: &str) -> Result<Vec<u8>, i32> {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 65536];
    // SAFETY: NUL-terminated strings, `buf` valid for its length.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    match usize::try_from(r) {
        Ok(len) => Ok(buf[..len].to_vec()),
        Err(_) => Err(std::io::Error::last_os_error().raw_os_error().unwrap()),
    }
}

/// `setxattr(2)` with `flags`: 0 or the errno.
fn xattr_set(path: &Path, name: &str, value: &[u8], flags: i32) -> i32 {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: NUL-terminated strings, `value` valid for its length.
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    };
    if r == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }
}

/// `user.*` attributes over a 4.2 mount reach the export's files as `user.*` attributes
/// (GETXATTR, SETXATTR, LISTXATTRS, REMOVEXATTR); other namespaces, and every attribute over
/// 4.1 and v3, are EOPNOTSUPP, as on Linux's own NFS mounts.
#[test]
fn user_xattrs_work_on_a_v4_2_mount_and_are_not_supported_on_v4_1_and_v3() {
    let server = SluiceServer::start();
    let export = server.export_dir().to_path_buf();
    std::fs::write(export.join("f"), b"data").unwrap();
    let m = Mount::new(&versioned_url(&server, "4.2"));
    let f = m.path().join("f");
    let q = |p: &Path| p.display().to_string();

    sh(&format!("setfattr -n user.color -v blue {}", q(&f)));
    assert_eq!(
        sh(&format!("getfattr --only-values -n user.color {}", q(&f))),
        "blue"
    );
    assert_eq!(
        xattr_get(&export.join("f"), "user.color").unwrap(),
        b"blue",
        "stored on the server's file as user.color"
    );
    // Set on the server, listed and read through the mount.
    assert_eq!(
        xattr_set(&export.join("f"), "user.from.server", b"hello", 0),
        0
    );
    let dump = sh(&format!("getfattr -d {}", q(&f)));
    assert!(
        dump.contains("user.color=\"blue\"") && dump.contains("user.from.server=\"hello\""),
        "{dump}"
    );
    // A value of a few KiB, binary, round-trips.
    let big: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    assert_eq!(xattr_set(&f, "user.big", &big, 0), 0);
    assert_eq!(xattr_get(&f, "user.big").unwrap(), big);
    // XATTR_CREATE of an existing name, XATTR_REPLACE of a missing one, a missing name.
    assert_eq!(
        xattr_set(&f, "user.color", b"red", libc::XATTR_CREATE),
        libc::EEXIST
    );
    assert_eq!(
        xattr_set(&f, "user.none", b"x", libc::XATTR_REPLACE),
        libc::ENODATA
    );
    assert_eq!(xattr_get(&f, "user.none"), Err(libc::ENODATA));
    assert_eq!(xattr_set(&f, "user.color", b"red", libc::XATTR_REPLACE), 0);
    assert_eq!(xattr_get(&f, "user.color").unwrap(), b"red");
    // Other namespaces have no NFS counterpart.
    assert_eq!(xattr_set(&f, "trusted.t", b"x", 0), libc::EOPNOTSUPP);
    sh(&format!("setfattr -x user.color {}", q(&f)));
    assert_eq!(
        xattr_get(&export.join("f"), "user.color"),
        Err(libc::ENODATA)
    );
    assert_eq!(xattr_get(&f, "user.color"), Err(libc::ENODATA));
    assert_eq!(std::fs::read(&f).unwrap(), b"data");
    m.unmount();

    for version in ["4.1", "3"] {
        let m = Mount::new(&versioned_url(&server, version));
        let f = m.path().join("f");
        assert_eq!(
            xattr_get(&f, "user.from.server"),
            Err(libc::EOPNOTSUPP),
            "v{version}"
        );
        assert_eq!(
            xattr_set(&f, "user.x", b"1", 0),
            libc::EOPNOTSUPP,
            "v{version}"
        );
        m.unmount();
    }
    assert_eq!(xattr_get(&export.join("f"), "user.x"), Err(libc::ENODATA));
}
