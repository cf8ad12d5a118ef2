//! Issue #30, locks for NFSv3 clients through the Linux kernel client: one guest boot
//! (`tests/peers/guest/kernel-nlm.sh` through `tests/peers/kclient.sh`) with the guest's own
//! rpcbind and rpc.statd and v3 mounts WITHOUT `nolock`, so the kernel's lockd speaks NLM to
//! sluice and its statd hears sluice's SM_NOTIFY.
//!
//! Checked in the guest (the script's PASS lines): fcntl and flock locks of two processes on
//! two v3 mounts conflict (F_SETLK refused, F_GETLK reports the holder, free once released);
//! a v3 lock refuses a v4.1 F_SETLK on the same file and a v4.1 lock a v3 one; the
//! Connectathon-style cases of `kc-tlock` (20, parent through one v3 mount, child through the
//! other: ranges, splits, upgrades, EOF-relative, F_SETLKW waits and interruption) all pass.
//! Then, while a
//! guest process holds a v3 write lock, the host kills `sluice serve` with -9 and starts it
//! again on the same port and state directory. Checked on the host: the restarted server's
//! SM_NOTIFY was answered by the guest's statd (the server's log, and statd's own log in the
//! guest), the guest's lockd reclaimed the lock (an NLM LOCK with `reclaim`, granted, in the
//! server's log), and a second client (sluice's own NFSv4.1 client on the host) is refused a
//! lock meanwhile: NFS4ERR_GRACE while grace lasts, then NFS4ERR_DENIED naming a write lock.
//! Back in the guest, a second process is still refused and the holder writes under its lock.
//!
//! # The network
//! qemu's user-mode network: the guest reaches the host's 127.0.0.1 as 10.0.2.2, and the host
//! reaches the guest only through forwarded ports. So:
//! - the guest's lockd asks 10.0.2.2:111 for the server's NLM port: sluice runs with
//!   `--portmapper`, on the host's port 111. One test at a time may hold that port ([`Port111`]);
//! - sluice sees the guest as 127.0.0.1 and calls it (SM_NOTIFY, GRANTED) after asking the
//!   portmapper there: `--client-portmap-port` names a host port forwarded to the guest's
//!   rpcbind, and the guest's statd and lockd listen on fixed ports forwarded from the same
//!   port numbers on the host (`run.sh --fwd`), so the ports rpcbind gives work from the host.
//!
//! Write delegations are on (the server's default): the v4.1 client that holds one keeps its
//! locks to itself, so the v3 lock's NLM request recalls it and is dropped until the
//! DELEGRETURN (`sluice_server::nlm`: Delegations); the client's retry then meets the v4.1
//! lock, which the client sent before returning the delegation. A v4.1 OPEN of a file with
//! a v3 lock gets no delegation, so its LOCK reaches the server and meets the v3 lock.

mod common;

use common::kclient_logs as logs_of;
use common::{free_port, require_tools, run_peer_script, Sluice, TempDir};
use std::net::{TcpListener, UdpSocket};
use std::time::{Duration, Instant};

/// The restarted server's grace period: long enough for the guest's statd to hear the notice
/// and its lockd to reclaim under TCG (seconds), short enough that the second client sees it end.
const GRACE_SECS: u64 = 40;
/// How long the server stays dead.
const DOWN: Duration = Duration::from_secs(2);

/// Holds the host's port 111 for this test (an exclusive lock on a file in the temp folder,
/// shared by every test that runs `sluice serve --portmapper`), and checks it is free.
struct Port111(#[allow(dead_code)] std::fs::File);

impl Port111 {
    fn take() -> Port111 {
        let path = std::env::temp_dir().join("sluice-portmapper-111.lock");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        f.lock()
            .unwrap_or_else(|e| panic!("lock {}: {e}", path.display()));
        if let Err(e) = TcpListener::bind("127.0.0.1:111") {
            panic!(
                "port 111 is taken ({e}): this test runs `sluice serve --portmapper`, which needs \
                 it (stop rpcbind: systemctl stop rpcbind.socket rpcbind)"
            );
        }
        Port111(f)
    }
}

/// A loopback port free for both TCP and UDP a moment ago (forwarded both ways to the guest).
fn free_tcp_udp_port() -> u16 {
    loop {
        let p = free_port();
        if UdpSocket::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
}

#[test]
fn linux_v3_client_locks_conflict_and_are_reclaimed_after_a_kill9_restart() {
    require_tools(&["qemu-system-x86_64", "gcc"]);
    let _port111 = Port111::take();
    let work = TempDir::new("kernel-nlm");
    let helper = build_static(work.path(), "kc-lock");
    let tlock = build_static(work.path(), "kc-tlock");

    let (rpcbind_fwd, statd_port, nlm_port) = (
        free_tcp_udp_port(),
        free_tcp_udp_port(),
        free_tcp_udp_port(),
    );
    assert!(
        rpcbind_fwd != statd_port && statd_port != nlm_port && rpcbind_fwd != nlm_port,
        "three distinct ports"
    );
    let export = work.path().join("export");
    let state = work.path().join("state");
    std::fs::create_dir_all(&export).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let grace = GRACE_SECS.to_string();
    let pmap = rpcbind_fwd.to_string();
    let mut server = Sluice::start(
        &export,
        &state,
        &[
            "--no-root-squash",
            "--portmapper",
            "--client-portmap-port",
            &pmap,
            "--grace-secs",
            &grace,
        ],
        &work.path().join("server.log"),
    );
    let port = server.port.to_string();
    let export_s = server.export.to_str().unwrap().to_string();
    let results = work.path().join("kclient-run");
    let guest_script = common::repo_root().join("tests/peers/guest/kernel-nlm.sh");

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
                    "--file",
                    tlock.to_str().unwrap(),
                    "--env",
                    &format!("KC_STATD_PORT={statd_port}"),
                    "--env",
                    &format!("KC_NLM_PORT={nlm_port}"),
                    "--fwd",
                    &format!("{rpcbind_fwd}:111"),
                    "--fwd",
                    &statd_port.to_string(),
                    "--fwd",
                    &nlm_port.to_string(),
                ],
                &[
                    ("KC_VERBOSE", "1"),
                    ("KC_VERS", "3"),
                    ("KC_RUN_DIR", results.to_str().unwrap()),
                    ("KC_TIMEOUT", "900"),
                ],
                Duration::from_secs(960),
            )
        })
    };

    // The kill: the guest holds its v3 lock and asks for it.
    let out = results.join("out");
    let reached = common::wait_until(Duration::from_secs(840), Duration::from_millis(50), || {
        out.join("kill-me").exists() || guest.is_finished()
    });
    assert!(
        reached && !guest.is_finished(),
        "the guest never asked for the kill (its earlier checks failed?):\n{}\n--- server log ---\n{}",
        logs_of(&results),
        server.log_text()
    );
    let before = server.log_text();
    assert!(
        before.contains("sluice: serving") && !before.contains("NLM lock reclaim"),
        "{before}"
    );
    // Whether the v4.1 holder had a delegation recalled (it gets one only if its back channel
    // was up at its OPEN): shown, not required; the guest's checks hold either way.
    eprintln!(
        "NLM requests dropped for a delegation recall before the kill: {}",
        before
            .lines()
            .filter(|l| l.contains("a delegation of its file is being recalled"))
            .count()
    );
    server.kill9();
    std::thread::sleep(DOWN);
    server.restart();
    let restarted = Instant::now();
    std::fs::write(out.join("restarted"), b"").unwrap();
    eprintln!("kernel-nlm: server killed and restarted");

    // The reclaim: the server's SM_NOTIFY reaches the guest's statd, which tells its lockd.
    let after = |log: &str| -> String {
        log.rsplit_once("NFSv4 grace period started")
            .map(|(_, rest)| rest.to_string())
            .unwrap_or_default()
    };
    let reclaimed =
        common::wait_until(Duration::from_secs(120), Duration::from_millis(100), || {
            after(&server.log_text()).contains("NLM lock reclaim") || guest.is_finished()
        });
    let log = server.log_text();
    let since = after(&log);
    assert!(
        !since.is_empty(),
        "the restarted server started no grace period (it knew no monitored host?):\n{log}"
    );
    assert!(
        reclaimed && since.contains("NLM lock reclaim"),
        "no NLM reclaim reached the restarted server within 120 s:\n{}\n--- server log ---\n{log}",
        logs_of(&results)
    );
    let reclaim_line = since
        .lines()
        .find(|l| l.contains("NLM lock reclaim"))
        .unwrap();
    assert!(reclaim_line.contains("granted=true"), "{reclaim_line}");
    assert!(
        since.contains("NSM: SM_NOTIFY answered by the client's status monitor"),
        "the reclaim came without the server's SM_NOTIFY being answered?\n{log}"
    );
    eprintln!(
        "kernel-nlm: reclaim {:.1?} after the restart: {reclaim_line}",
        restarted.elapsed()
    );

    // A second client meanwhile: refused while grace lasts, then refused by the lock.
    let second = second_client_tries(&port, &export_s);
    std::fs::write(out.join("checked"), b"").unwrap();

    let run = guest.join().expect("the guest thread");
    let log = server.log_text();
    let guest_log = logs_of(&results);
    assert!(
        run.status.success(),
        "kernel-nlm.sh failed: {}\n{guest_log}\n--- server log ---\n{log}",
        run.describe()
    );
    assert!(
        run.stdout.contains("RESULT: PASS") && !run.stdout.contains("FAIL"),
        "{}",
        run.describe()
    );
    let statd_log = std::fs::read_to_string(out.join("statd.log")).unwrap_or_default();
    assert!(
        statd_log.contains("SM_NOTIFY"),
        "the guest's statd logged no SM_NOTIFY:\n{statd_log}"
    );
    let (grace_refusals, conflict) = match second {
        Ok(r) => r,
        Err(e) => panic!("the second client's tries failed: {e}\n--- server log ---\n{log}"),
    };
    assert!(
        conflict.write,
        "the second client's LOCK was denied, but not by the guest's write lock: {conflict:?}"
    );
    eprintln!(
        "kernel-nlm: the second client was refused {grace_refusals} time(s) with NFS4ERR_GRACE, \
         then denied by {conflict:?}\n{}",
        run.stdout
    );
}

/// From sluice's NFSv4.1 client on the host, a read LOCK on all of the guest's locked file,
/// tried once a second: while the restarted server is in grace its OPEN or LOCK answers
/// NFS4ERR_GRACE (counted); after grace the LOCK must be denied by the guest's reclaimed lock.
/// A granted LOCK is an error: the lock was lost.
fn second_client_tries(
    port: &str,
    export: &str,
) -> Result<(u32, sluice_client::v4::LockConflict), String> {
    use sluice_client::v4::{Client, Error, Minor, V4Options};
    use sluice_xdr::nfs4::Nfsstat4;
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
        let path = format!("{export}/kernel-nlm/restart");
        let grace =
            |e: &Error| matches!(e, Error::Status { status, .. } if *status == Nfsstat4::GRACE);
        let deadline = Instant::now() + Duration::from_secs(GRACE_SECS + 60);
        let mut refusals = 0u32;
        let result = loop {
            if Instant::now() > deadline {
                break Err(format!("still NFS4ERR_GRACE after {} s", GRACE_SECS + 60));
            }
            let fh = match c.open(&path).await {
                Ok((fh, _)) => fh,
                Err(e) if grace(&e) => {
                    refusals += 1;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                Err(e) => break Err(format!("OPEN {path}: {e}")),
            };
            // A read lock (the file is open for reading): the guest's write lock refuses it too.
            let r = c.lock(&fh, b"second-client", false, 0, u64::MAX).await;
            let _ = c.close(&fh).await;
            match r {
                Ok(Some(conflict)) => break Ok((refusals, conflict)),
                Ok(None) => {
                    break Err(
                        "the second client was GRANTED the guest's lock: it was lost".to_string(),
                    )
                }
                Err(e) if grace(&e) => {
                    refusals += 1;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => break Err(format!("LOCK: {e}")),
            }
        };
        c.shutdown().await;
        result
    })
}

/// Builds the guest helper `tests/peers/guest/NAME.c` statically into `dir/NAME`.
fn build_static(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let out = dir.join(name);
    let src = common::repo_root().join(format!("tests/peers/guest/{name}.c"));
    let built = std::process::Command::new("gcc")
        .args(["-static", "-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("run gcc");
    assert!(built.success(), "gcc could not build {}", src.display());
    out
}
