//! Issue #14, restart and grace through the Linux kernel client (vers=4.1): one guest boot
//! (`tests/peers/guest/kernel-grace.sh` through `tests/peers/kclient.sh`) in which a process
//! holds an fcntl write lock on one file while a paced write stream goes to another; the host
//! kills `sluice serve` with -9 once a quarter of the stream is on the server's disk and starts
//! it again on the same port and state directory after [`DOWN`].
//!
//! The client reclaims its opens (OPEN CLAIM_PREVIOUS) and the lock (LOCK reclaim) in the
//! restarted server's grace period and sends RECLAIM_COMPLETE. Checked:
//! - in the guest: the stream completes and its SHA-256 (after drop_caches) is the source's;
//!   the holder's write and fsync under its lock after the restart succeed (a lost lock is
//!   EIO) and a second process finds the lock held (its F_SETLK is answered from the client's
//!   own lock table, so the server-side proof is below);
//! - on the host: the file on the server's disk has the guest's SHA-256;
//! - in the restarted server: it started a grace period from its client records, the LOCKs it
//!   saw all succeeded (in grace only reclaims can, so the lock was reclaimed) and it holds one
//!   locked range; grace ended early (AllReclaimed), well before its 90 s, in the log and in
//!   the metrics.
//!
//! A static helper (`tests/peers/guest/kc-lock.c`, built here with gcc) takes and probes the
//! lock: the guest has only busybox.

mod common;

use common::kclient_logs as logs_of;
use common::{free_port, require_tools, run_peer_script, sha256_file, Sluice, TempDir};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// The stream's size, and the part of it on the server's disk when the host kills the server.
const STREAM_MIB: u64 = 48;
const KILL_AT_BYTES: u64 = 12 << 20;
/// How long the server stays dead.
const DOWN: Duration = Duration::from_secs(2);
/// The grace period's full length (the default: the 90 s lease): an early end is far below.
const GRACE: Duration = Duration::from_secs(90);

#[test]
fn linux_client_reclaims_its_lock_and_stream_across_a_kill9_restart() {
    require_tools(&["qemu-system-x86_64", "gcc", "sha256sum"]);
    let work = TempDir::new("kernel-grace");
    let helper = work.path().join("kc-lock");
    let src = common::repo_root().join("tests/peers/guest/kc-lock.c");
    let built = std::process::Command::new("gcc")
        .args(["-static", "-O2", "-o"])
        .arg(&helper)
        .arg(&src)
        .status()
        .expect("run gcc");
    assert!(built.success(), "gcc could not build {}", src.display());

    let export = work.path().join("export");
    let state = work.path().join("state");
    std::fs::create_dir_all(&export).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut server = Sluice::start(
        &export,
        &state,
        &["--no-root-squash", "--metrics", &metrics],
        &work.path().join("server.log"),
    );
    let port = server.port.to_string();
    let export_s = server.export.to_str().unwrap().to_string();
    let results = work.path().join("kclient-run");
    let guest_script = common::repo_root().join("tests/peers/guest/kernel-grace.sh");
    let stream = server.export.join("kernel-grace/stream.bin");

    let guest = {
        let (port, export_s, results) = (port.clone(), export_s.clone(), results.clone());
        let (script, helper) = (guest_script.clone(), helper.clone());
        std::thread::spawn(move || {
            run_peer_script(
                "kclient.sh",
                &[
                    &port,
                    &port,
                    &export_s,
                    script.to_str().unwrap(),
                    "--file",
                    helper.to_str().unwrap(),
                    "--env",
                    &format!("KG_MIB={STREAM_MIB}"),
                ],
                &[
                    ("KC_VERBOSE", "1"),
                    ("KC_VERS", "4.1"),
                    ("KC_RUN_DIR", results.to_str().unwrap()),
                    ("KC_TIMEOUT", "300"),
                ],
                Duration::from_secs(360),
            )
        })
    };

    // The kill: the lock is held, the stream runs, a quarter of it is on the server's disk.
    let out = results.join("out");
    let reached = common::wait_until(Duration::from_secs(300), Duration::from_millis(20), || {
        (out.join("locked").exists()
            && out.join("streaming").exists()
            && common::file_len(&stream) >= KILL_AT_BYTES)
            || out.join("stream-done").exists()
            || guest.is_finished()
    });
    let too_late = out.join("stream-done").exists() || guest.is_finished();
    assert!(
        reached && !too_late,
        "the guest's stream never reached the kill point (or ended before it):\n{}",
        logs_of(&results)
    );
    server.kill9();
    let killed = Instant::now();
    std::thread::sleep(DOWN);
    server.restart();
    eprintln!(
        "kernel-grace: killed at {} bytes on disk, restarted",
        common::file_len(&stream)
    );

    // The read lock, held under a read delegation: once the guest asks, a second client
    // opens the file for writing (which recalls the delegation, so the client hands its locks
    // to the server first) and tests for a write lock at the server.
    let asked = common::wait_until(Duration::from_secs(240), Duration::from_millis(50), || {
        out.join("rlock-check").exists() || guest.is_finished()
    });
    let conflict = (asked && out.join("rlock-check").exists())
        .then(|| second_client_lock_tests(&port, &export_s));
    std::fs::write(out.join("rrelease"), b"").unwrap();

    let run = guest.join().expect("the guest thread");
    let log = server.log_text();
    let guest_log = logs_of(&results);
    assert!(
        run.status.success(),
        "kernel-grace.sh failed: {}\n{guest_log}\n--- server log ---\n{log}",
        run.describe()
    );
    assert!(
        run.stdout.contains("RESULT: PASS") && !run.stdout.contains("FAIL"),
        "{}",
        run.describe()
    );

    // The bytes on the server's disk are the guest's.
    let sums = std::fs::read_to_string(out.join("sums.txt")).expect("sums.txt from the guest");
    let want = sums.split_whitespace().next().expect("a sum").to_string();
    assert_eq!(
        sha256_file(&stream),
        want,
        "the stream on the server's disk"
    );

    // The restarted server: grace from the records, ended early because everyone reclaimed.
    let after = log
        .rsplit_once("NFSv4 grace period started")
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("the restarted server started no grace period:\n{log}"));
    let ended = after
        .lines()
        .find(|l| l.contains("NFSv4 grace period ended"))
        .unwrap_or_else(|| panic!("grace never ended:\n{log}"));
    assert!(ended.contains("AllReclaimed"), "{ended}");
    let lasted: f64 = ended
        .split("lasted_secs=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no lasted_secs in: {ended}"));
    assert!(
        lasted < GRACE.as_secs_f64() / 3.0,
        "grace lasted {lasted} s of {GRACE:?}"
    );
    let prom = http_get(&metrics, "/metrics");
    let value = |line: &str| -> Option<f64> {
        prom.lines()
            .find_map(|l| l.strip_prefix(line)?.trim().parse().ok())
    };
    assert_eq!(
        value("sluice_nfs4_grace_ended{reason=\"AllReclaimed\"}"),
        Some(1.0),
        "{prom}"
    );
    let (write_lock, read_lock) = match conflict {
        Some(Ok(both)) => both,
        Some(Err(e)) => panic!("the second client's check failed: {e}"),
        None => panic!("the guest never asked for the lock check:\n{guest_log}"),
    };
    for (what, found, write) in [("write", write_lock, true), ("read", read_lock, false)] {
        let c = found.unwrap_or_else(|| {
            panic!(
                "after the restart the server does not know the guest's {what} lock: a second \
                 client's write LOCKT found the file free\n{}",
                run.stdout
            )
        });
        assert_eq!(c.write, write, "{what} lock: {c:?}");
        eprintln!("kernel-grace: the guest's {what} lock is the server's: {c:?}");
    }
    // The restarted server granted delegations back at CLAIM_PREVIOUS (its counters start at
    // zero): the guest held both files under one (write delegations are on by default), which
    // is what made the server-side lock checks above worth making.
    let granted = |kind: &str| {
        value(&format!(
            "sluice_nfs4_delegations_granted_total{{type=\"{kind}\"}}"
        ))
        .unwrap_or(0.0)
    };
    eprintln!(
        "kernel-grace: delegations granted by the restarted server: {} read, {} write",
        granted("read"),
        granted("write")
    );
    assert!(
        granted("read") >= 1.0 && granted("write") >= 1.0,
        "no read and write delegation granted back after the restart:\n{prom}"
    );
    let locks = value("sluice_nfs4_op_calls_total{op=\"LOCK\"}").unwrap_or(0.0);
    let lock_errors = value("sluice_nfs4_op_errors_total{op=\"LOCK\"}").unwrap_or(0.0);
    assert!(locks >= 1.0, "the restarted server saw no LOCK:\n{prom}");
    assert_eq!(
        lock_errors, 0.0,
        "a LOCK failed in the restarted server:\n{prom}"
    );
    eprintln!(
        "kernel-grace: guest done {:.1?} after the kill; grace lasted {lasted} s; {locks} LOCK(s) \
         after the restart\n{}",
        killed.elapsed(),
        run.stdout
    );
}

/// From a second NFSv4.1 client, each file opened so that a delegation the guest holds it
/// under is recalled (which makes the guest's client send its cached locks to the server
/// first), then LOCKT of a write lock on all of it: the conflicts found on `locked` (opened
/// for reading: that recalls a write delegation) and on `rlocked` (opened for writing).
#[allow(clippy::type_complexity)]
fn second_client_lock_tests(
    port: &str,
    export: &str,
) -> Result<
    (
        Option<sluice_client::v4::LockConflict>,
        Option<sluice_client::v4::LockConflict>,
    ),
    String,
> {
    use sluice_client::v4::{Client, CreateMode, Minor, V4Options};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let url = sluice_client::url::NfsUrl::parse(&format!(
            "nfs://127.0.0.1:{port}{export}?version=4.1"
        ))
        .map_err(|e| e.to_string())?;
        let c = Client::connect(
            &url,
            &sluice_client::ClientOptions::default(),
            Minor::V1,
            V4Options::default(),
        )
        .await
        .map_err(|e| e.to_string())?;
        let limit = Duration::from_secs(120);
        let waited = |what: &str| format!("opening {what} waited {limit:?}");
        let locked = format!("{export}/kernel-grace/locked");
        let (fh, _) = tokio::time::timeout(limit, c.open(&locked))
            .await
            .map_err(|_| waited("locked"))?
            .map_err(|e| e.to_string())?;
        let w = c
            .test_lock(&fh, b"second-client", true, 0, u64::MAX)
            .await
            .map_err(|e| e.to_string())?;
        let _ = c.close(&fh).await;
        let rlocked = format!("{export}/kernel-grace/rlocked");
        let (fh, _) = tokio::time::timeout(limit, c.create(&rlocked, 0o644, CreateMode::Truncate))
            .await
            .map_err(|_| waited("rlocked"))?
            .map_err(|e| e.to_string())?;
        let r = c
            .test_lock(&fh, b"second-client", true, 0, u64::MAX)
            .await
            .map_err(|e| e.to_string())?;
        let _ = c.close(&fh).await;
        c.shutdown().await;
        Ok((w, r))
    })
}

/// A plain HTTP/1.0 GET of the server's metrics endpoint: the body.
fn http_get(addr: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("metrics endpoint");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).expect("metrics reply");
    text.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or(text)
}
