//! Issue #6, "nothing lost": `kill -9` of the server in the middle of a large transfer, then a
//! restart on the same directory, state directory and port.
//!
//! The server holds UNSTABLE WRITEs in memory (write-behind) and answers them before they reach
//! the disk, so a SIGKILL really loses acknowledged data. Its write verifier changes on every
//! start; a client that kept its uncommitted data sees the new verifier in the COMMIT reply and
//! resends (RFC 1813 §3.3.7, §3.3.21). File handles survive the restart because the handle
//! secret lives in the state directory.
//!
//! Each test: a 256 MiB transfer, the kill once a third of it has gone, the server down for
//! [`DOWN`] (longer than the client's 1 s major timeout, so the client says "not responding"),
//! the restart, then: the transfer finished, the SHA-256 of what arrived equals the source's,
//! the client logged "not responding" and "OK" (the FUSE mount also its reconnect), the client
//! resent WRITEs or saw the verifier change, and handles from before the restart still work.
//!
//! | test | client | kill |
//! |---|---|---|
//! | `library_writer_...` | `File::writer` in this process | at 96 MiB handed to the writer |
//! | `cp_local_to_nfs_...` | `sluice cp --timeo 1` child | at 96 MiB on the server's disk |
//! | `fuse_dd_...` | `dd` into a `sluice mount --timeo 1` | at 96 MiB on the server's disk |
//! | `cat_...` | `sluice cat --timeo 1` child | at 96 MiB on its stdout |
//! | `library_v4_lock_...` | a v4.1 client holding a write lock | with the lock held |
//!
//! `cp` and `cat` also run over NFSv4.1 (`..._v4_1`): there the restarted server knows neither
//! the session nor the client id (BADSESSION, then STALE_CLIENTID), so the client makes new
//! ones and carries on with the same handle. The server's client records (in the state
//! directory) name the client, so the restarted server is in its grace period: the client
//! reclaims its open (OPEN CLAIM_PREVIOUS) and sends RECLAIM_COMPLETE, which ends grace early.
//! The checks are the same, plus a second CREATE_SESSION and OPEN, the client's "1 reclaimed"
//! and the server's log of grace ending with AllReclaimed, long before its 90 s.

mod common;

use common::*;
use sluice_client::{Client, ClientOptions};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The transfer: large enough that the kill falls well inside it and that the writer's
/// 64 MiB COMMIT interval leaves uncommitted data at the kill.
const FILE_BYTES: usize = 256 << 20;
/// Where the kill falls: between two of the writer's COMMITs (every 64 MiB).
const KILL_AT_BYTES: u64 = 96 << 20;
/// How long the server stays dead: above the 1 s major timeout the clients use here, so they
/// log "not responding" before the server comes back.
const DOWN: Duration = Duration::from_secs(2);
/// Backstop for one transfer including the outage (normally ~5 s).
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(120);

const NOT_RESPONDING: &str = "server 127.0.0.1 not responding, still trying";
const OK: &str = "server 127.0.0.1 OK";

/// A server on fresh directories, spoken to over NFS `version`.
struct Setup {
    server: Sluice,
    _dirs: TempDir,
    version: &'static str,
}

impl Setup {
    fn new(tag: &str) -> Setup {
        Setup::over(tag, "3")
    }

    fn over(tag: &str, version: &'static str) -> Setup {
        let dirs = TempDir::new(&format!("{tag}-v{}", version.replace('.', "_")));
        let server = Sluice::start_in(&dirs);
        Setup {
            server,
            _dirs: dirs,
            version,
        }
    }

    fn url(&self, name: &str) -> String {
        nfs_url_version(
            self.server.port,
            &self.server.export.join(name),
            self.version,
        )
    }

    /// A local file (outside the export) holding `data`.
    fn local_file(&self, name: &str, data: &[u8]) -> std::path::PathBuf {
        let p = self._dirs.path().join(name);
        std::fs::write(&p, data).unwrap();
        p
    }
}

/// Kills the server, keeps it down for [`DOWN`], restarts it: on a thread of its own, so the
/// client under test keeps running meanwhile. Returns the server when done.
fn kill_and_restart_later(mut server: Sluice) -> std::thread::JoinHandle<Sluice> {
    server.kill9();
    std::thread::spawn(move || {
        std::thread::sleep(DOWN);
        server.restart();
        server
    })
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

/// The "retrans" column of one procedure in a `--stats` table.
fn retrans_of(stats: &str, prog: &str, proc_: &str) -> Option<u64> {
    column_of(stats, prog, proc_, 4)
}

/// Column `i` of one procedure's line in a `--stats` table (2: calls, 4: retrans).
fn column_of(stats: &str, prog: &str, proc_: &str, i: usize) -> Option<u64> {
    stats.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 5 && f[0] == prog && f[1] == proc_).then(|| f[i].parse().ok())?
    })
}

/// Over NFSv4.1: the `--stats` of a client that went through a restart show a second session
/// and its file opened again, by a reclaim in the restarted server's grace period, which the
/// client's RECLAIM_COMPLETE ended early (the server's log says so within a second).
fn assert_v4_recovered(version: &str, err: &str, server: &Sluice) {
    if version == "3" {
        return;
    }
    let sessions = column_of(err, "NFS4", "CREATE_SESSION", 2).expect("CREATE_SESSION line");
    assert!(sessions >= 2, "no new session after the restart:\n{err}");
    let opens = column_of(err, "NFS4", "OPEN", 2).expect("OPEN line");
    assert!(opens >= 2, "the file was not opened again:\n{err}");
    assert!(
        err.contains("NFSv4 opens after the new client id: 1 reclaimed, 0 opened again"),
        "the open was not reclaimed in grace:\n{err}"
    );
    // The restarted server's lines: after its "started" (the first run's grace was skipped).
    let ended = |log: &str| {
        let (_, after) = log.rsplit_once("NFSv4 grace period started")?;
        after
            .lines()
            .find(|l| l.contains("NFSv4 grace period ended"))
            .map(str::to_string)
    };
    wait_until(Duration::from_secs(5), Duration::from_millis(50), || {
        ended(&server.log_text()).is_some()
    });
    let log = server.log_text();
    assert!(
        log.contains("NFSv4 grace period started"),
        "the restarted server started no grace period:\n{log}"
    );
    let line = ended(&log).unwrap_or_else(|| panic!("grace never ended:\n{log}"));
    eprintln!("restarted server: {line}");
    assert!(
        line.contains("AllReclaimed"),
        "grace did not end early: {line}"
    );
}

// --- (a) the library ---------------------------------------------------------------------------

/// Log lines of the tracing events emitted on this thread, for asserting on the client's
/// "not responding" / "OK" in-process.
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

#[test]
fn library_writer_survives_kill9_restart_and_resends_unstable_data() {
    let setup = Setup::new("restart-lib");
    let data = pattern(1, FILE_BYTES);
    let want = sha256_hex(&data);
    let url = setup.url("");
    let disk_path = setup.server.export.join("lib.bin");
    std::fs::write(
        setup.server.export.join("before.txt"),
        b"made before the restart",
    )
    .unwrap();
    let log = LogBuf::default();
    let log_w = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || log_w.clone())
        .with_max_level(tracing::Level::INFO)
        .finish();
    // A current-thread runtime: every task of the client runs on this thread, so the
    // thread-local subscriber sees all of its log lines (and no other test's).
    let _guard = tracing::subscriber::set_default(subscriber);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut server_slot = Some(setup.server);
    let mut restarter = None;
    let started = Instant::now();
    let (client, file, before, verifier_changes, missing_at_kill) = rt.block_on(async {
        let mut options = ClientOptions::default();
        options.rpc.table.major_timeout = Duration::from_secs(1);
        let client = Client::connect(url.as_str(), options)
            .await
            .expect("connect");
        let before = client.lookup_path("/before.txt").await.expect("lookup").0;
        let file = client.create_file("/lib.bin", 0o644).await.expect("create");
        let mut w = file.writer();
        let mut missing_at_kill = None;
        for chunk in data.chunks(1 << 20) {
            w.write(chunk).await.expect("write");
            if restarter.is_none() && w.position() >= KILL_AT_BYTES {
                let server = server_slot.take().unwrap();
                // What the server acknowledged but had not written when it died: the data
                // only the client's resend can bring back.
                let acked = w.position() - 4 * u64::from(client.wsize());
                let mut srv = server;
                srv.kill9();
                missing_at_kill = Some(missing_bytes(&disk_path, &data[..acked as usize]));
                restarter = Some(kill_and_restart_later(srv));
            }
        }
        let verifier_changes_before_finish = w.verifier_changes();
        let n = w.finish().await.expect("finish after the restart");
        assert_eq!(n, FILE_BYTES as u64);
        (
            client,
            file,
            before,
            verifier_changes_before_finish,
            missing_at_kill,
        )
    });
    let elapsed = started.elapsed();
    let server = restarter.expect("the kill happened").join().unwrap();
    let got = sha256_file(&server.export.join("lib.bin"));
    assert_eq!(
        got, want,
        "the file on the server differs from what was written"
    );

    // Handles from before the restart: the file written and one only looked up.
    rt.block_on(async {
        let a = client.getattr(file.fh()).await.expect("GETATTR old handle");
        assert_eq!(a.obj_attributes.size, FILE_BYTES as u64);
        let b = client.getattr(&before).await.expect("GETATTR old handle");
        assert_eq!(b.obj_attributes.size, 23);
        let back = file.read_all().await.expect("read back");
        assert_eq!(sha256_hex(&back), want, "read back through the client");
    });

    let stats = client.stats();
    let t = client.transport_stats();
    let writes = stats.get("NFS3", "WRITE").unwrap();
    let logs = log.text();
    eprintln!(
        "library: {elapsed:.1?}, {} WRITE calls ({} retransmitted), {verifier_changes} verifier \
         change(s) seen before finish, {} reconnects, acknowledged bytes missing on disk at the \
         kill: {missing_at_kill:?}",
        writes.calls, writes.retransmits, t.reconnects
    );
    assert!(t.reconnects >= 1, "the client never reconnected: {t:?}");
    assert!(
        writes.retransmits > 0 || verifier_changes > 0 || logs.contains("verifier changed"),
        "no WRITE was resent and no verifier change seen: the restart went unnoticed"
    );
    assert!(
        writes.calls > (FILE_BYTES as u64) / u64::from(client.wsize()),
        "no extra WRITE calls: uncommitted data was not resent ({writes:?})"
    );
    assert!(
        count(&logs, NOT_RESPONDING) >= 1,
        "no 'not responding':\n{logs}"
    );
    assert!(
        count(&logs, OK) >= 1,
        "no 'OK' after 'not responding':\n{logs}"
    );
}

/// Bytes of `want` that the file at `path` does not hold (shorter file, or different bytes),
/// counted in 4 KiB blocks.
fn missing_bytes(path: &Path, want: &[u8]) -> u64 {
    let have = std::fs::read(path).unwrap_or_default();
    want.chunks(4096)
        .enumerate()
        .filter(|(i, w)| have.get(i * 4096..i * 4096 + w.len()) != Some(*w))
        .map(|(_, w)| w.len() as u64)
        .sum()
}

// --- (b) sluice cp -----------------------------------------------------------------------------

#[test]
fn cp_local_to_nfs_survives_kill9_restart() {
    cp_survives_kill9_restart("3");
}

#[test]
fn cp_local_to_nfs_survives_kill9_restart_v4_1() {
    cp_survives_kill9_restart("4.1");
}

fn cp_survives_kill9_restart(version: &'static str) {
    let setup = Setup::over("restart-cp", version);
    let data = pattern(2, FILE_BYTES);
    let want = sha256_hex(&data);
    let src = setup.local_file("src.bin", &data);
    drop(data);
    let dest = setup.server.export.join("cp.bin");
    let url = setup.url("cp.bin");
    let started = Instant::now();
    let mut cp = SluiceProc::spawn(
        &["cp", "--stats", "--timeo", "1", src.to_str().unwrap(), &url],
        &[],
    );
    let reached = wait_until(TRANSFER_TIMEOUT, Duration::from_millis(2), || {
        file_len(&dest) >= KILL_AT_BYTES || cp.try_wait().is_some()
    });
    assert!(
        reached && cp.try_wait().is_none(),
        "cp ended (or stalled) before the kill point:\n{}",
        cp.stderr_text()
    );
    let restarter = kill_and_restart_later(setup.server);
    let st = cp.wait_timeout(TRANSFER_TIMEOUT);
    let elapsed = started.elapsed();
    let server = restarter.join().unwrap();
    let err = cp.stderr_text();
    assert!(st.success(), "cp failed across the restart: {st}\n{err}");
    assert_eq!(sha256_file(&dest), want, "copied file differs\n{err}");
    let resent = retrans_of(&err, stats_prog(version), "WRITE").expect("WRITE line in --stats");
    eprintln!("cp: {elapsed:.1?}; WRITE retransmits {resent}\n{err}");
    assert!(
        resent > 0 || err.contains("write verifier changed"),
        "neither resent WRITEs nor a verifier change:\n{err}"
    );
    assert!(
        count(&err, NOT_RESPONDING) >= 1,
        "no 'not responding':\n{err}"
    );
    assert!(count(&err, OK) >= 1, "no 'OK':\n{err}");
    assert_v4_recovered(version, &err, &server);
    // The restarted server serves the file under the same path (and the old handle, which
    // the next test checks through the FUSE mount).
    drop(server);
}

// --- (c) a FUSE mount --------------------------------------------------------------------------

#[test]
fn fuse_dd_survives_kill9_restart_without_remount() {
    let setup = Setup::new("restart-fuse");
    let data = pattern(3, FILE_BYTES);
    let want = sha256_hex(&data);
    let src = setup.local_file("src.bin", &data);
    drop(data);
    std::fs::write(
        setup.server.export.join("before.txt"),
        b"made before the restart",
    )
    .unwrap();
    let mnt = setup._dirs.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mut mount = FuseMount::mount(
        &setup.url(""),
        &mnt,
        &["--timeo", "1"],
        &[("RUST_LOG", "info,sluice_client::transport=debug")],
    );
    // Look the old file up through the mount before the restart: its inode holds the handle.
    assert_eq!(
        std::fs::read(mnt.join("before.txt")).unwrap(),
        b"made before the restart"
    );
    let dest = setup.server.export.join("fuse.bin");
    let started = Instant::now();
    let mut dd = std::process::Command::new("timeout")
        .arg(TRANSFER_TIMEOUT.as_secs().to_string())
        .arg("dd")
        .arg(format!("if={}", src.display()))
        .arg(format!("of={}", mnt.join("fuse.bin").display()))
        .arg("bs=1M")
        .arg("conv=fsync")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let reached = wait_until(TRANSFER_TIMEOUT, Duration::from_millis(2), || {
        file_len(&dest) >= KILL_AT_BYTES || dd.try_wait().unwrap().is_some()
    });
    assert!(reached, "dd never got to the kill point");
    assert!(dd.try_wait().unwrap().is_none(), "dd ended before the kill");
    let restarter = kill_and_restart_later(setup.server);
    let out = dd.wait_with_output().unwrap();
    let elapsed = started.elapsed();
    let server = restarter.join().unwrap();
    let log = mount.log_text();
    assert!(
        out.status.success(),
        "dd into the mount failed across the restart: {}\n{}\n--- mount log ---\n{log}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(sha256_file(&dest), want, "file on the server differs");
    assert_eq!(
        sha256_file(&mnt.join("fuse.bin")),
        want,
        "file read back through the mount differs"
    );
    // The same mount, without a remount: the inode looked up before the restart, and new work.
    let meta = std::fs::metadata(mnt.join("before.txt")).expect("stat old file via the mount");
    assert_eq!(meta.len(), 23);
    assert_eq!(
        std::fs::read(mnt.join("before.txt")).unwrap(),
        b"made before the restart"
    );
    std::fs::write(mnt.join("after.txt"), b"after").expect("create through the mount");
    assert_eq!(
        std::fs::read(server.export.join("after.txt")).unwrap(),
        b"after"
    );
    eprintln!("fuse: {elapsed:.1?}\n{log}");
    assert!(
        log.contains("reconnected to"),
        "no reconnect logged:\n{log}"
    );
    assert!(
        count(&log, NOT_RESPONDING) >= 1,
        "no 'not responding':\n{log}"
    );
    assert!(count(&log, OK) >= 1, "no 'OK':\n{log}");
    assert!(
        log.contains("write verifier changed"),
        "the mount did not notice the verifier change:\n{log}"
    );
    mount.unmount();
}

// --- (d) the read side -------------------------------------------------------------------------

#[test]
fn cat_survives_kill9_restart() {
    cat_survives("3");
}

#[test]
fn cat_survives_kill9_restart_v4_1() {
    cat_survives("4.1");
}

fn cat_survives(version: &'static str) {
    let setup = Setup::over("restart-cat", version);
    let data = pattern(4, FILE_BYTES);
    let want = sha256_hex(&data);
    std::fs::write(setup.server.export.join("big.bin"), &data).unwrap();
    drop(data);
    let url = setup.url("big.bin");
    let started = Instant::now();
    let mut cat = SluiceProc::spawn(&["cat", "--stats", "--timeo", "1", &url], &[]);
    let out = cat.stdout.clone();
    let reached = wait_until(TRANSFER_TIMEOUT, Duration::from_millis(2), || {
        file_len(&out) >= KILL_AT_BYTES || cat.try_wait().is_some()
    });
    assert!(
        reached && cat.try_wait().is_none(),
        "cat ended (or stalled) before the kill point:\n{}",
        cat.stderr_text()
    );
    let restarter = kill_and_restart_later(setup.server);
    let st = cat.wait_timeout(TRANSFER_TIMEOUT);
    let elapsed = started.elapsed();
    let server = restarter.join().unwrap();
    let err = cat.stderr_text();
    assert!(st.success(), "cat failed across the restart: {st}\n{err}");
    assert_eq!(file_len(&out), FILE_BYTES as u64, "short output\n{err}");
    assert_eq!(sha256_file(&out), want, "cat output differs\n{err}");
    eprintln!("cat: {elapsed:.1?}\n{err}");
    assert!(
        count(&err, NOT_RESPONDING) >= 1,
        "no 'not responding':\n{err}"
    );
    assert!(count(&err, OK) >= 1, "no 'OK':\n{err}");
    assert_v4_recovered(version, &err, &server);
}

// --- (e) byte-range locks over NFSv4.1 ---------------------------------------------------------

/// A v4.1 client of the library holds a write lock on a range when the server is killed with -9
/// and restarted: the client reclaims its open and then the lock (LOCK reclaim=true) in the
/// restarted server's grace period, before RECLAIM_COMPLETE, so grace ends early
/// (AllReclaimed) and a second client, made after the restart, is denied the range by LOCKT and
/// LOCK. Without the lock reclaim the restarted server holds no lock and grants it. The first
/// client then unlocks through its handle from before the restart (the reclaimed lock stateid),
/// and the second client gets the range.
#[test]
fn library_v4_lock_is_reclaimed_after_kill9_restart() {
    use sluice_client::url::NfsUrl;
    use sluice_client::v4::{Client as V4, CreateMode, Minor, V4Options};
    let setup = Setup::over("restart-lock", "4.1");
    let url = NfsUrl::parse(&setup.url("")).unwrap();
    let mut server = setup.server;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut options = ClientOptions::default();
        options.rpc.table.major_timeout = Duration::from_secs(1);
        let connect = || V4::connect(&url, &options, Minor::V1, V4Options::default());
        let a = connect().await.expect("connect");
        let path = format!("{}/locked", url.path);
        let (fh, _) = a
            .create(&path, 0o644, CreateMode::Truncate)
            .await
            .expect("create");
        assert_eq!(a.lock(&fh, b"holder", true, 100, 50).await.unwrap(), None);

        server.kill9();
        server.restart();
        // The first call after the restart recovers: new client id, then the reopen pass.
        let started = Instant::now();
        a.getattr_fh(&fh.fh)
            .await
            .expect("GETATTR after the restart");
        eprintln!("recovered in {:.1?}", started.elapsed());

        let b = connect().await.expect("second client");
        let (fh_b, _) = b.open(&path).await.expect("open by the second client");
        let conflict = b
            .test_lock(&fh_b, b"other", true, 120, 10)
            .await
            .expect("LOCKT")
            .expect("the second client's LOCKT must be denied: the lock was not reclaimed");
        assert_eq!(
            (conflict.offset, conflict.length, conflict.write),
            (100, 50, true)
        );
        assert!(
            b.lock(&fh_b, b"other", false, 0, 101)
                .await
                .unwrap()
                .is_some(),
            "a read lock over the held range was granted"
        );
        assert_eq!(
            b.lock(&fh_b, b"other", false, 0, 100).await.unwrap(),
            None,
            "the range before the held one is free"
        );
        b.unlock(&fh_b, b"other", 0, 100).await.unwrap();

        // Unlocked through the handle from before the restart: the reclaimed stateid is used.
        a.unlock(&fh, b"holder", 100, 50).await.expect("LOCKU");
        assert_eq!(
            b.test_lock(&fh_b, b"other", true, 0, u64::MAX)
                .await
                .unwrap(),
            None,
            "the first client's unlock after the restart did not reach the server"
        );
        b.close(&fh_b).await.unwrap();
        a.close(&fh).await.unwrap();
    });
    // The restarted server's lines: after its "started" (the first run's grace was skipped).
    let ended = |log: &str| {
        let (_, after) = log.rsplit_once("NFSv4 grace period started")?;
        after
            .lines()
            .find(|l| l.contains("NFSv4 grace period ended"))
            .map(str::to_string)
    };
    wait_until(Duration::from_secs(5), Duration::from_millis(50), || {
        ended(&server.log_text()).is_some()
    });
    let log = server.log_text();
    let line = ended(&log).unwrap_or_else(|| panic!("grace never ended:\n{log}"));
    eprintln!("restarted server: {line}");
    assert!(
        line.contains("AllReclaimed"),
        "grace did not end early: {line}"
    );
}
