//! Issue #14, locks and the NFSv4.2 operations through the Linux kernel client:
//! `tests/peers/kernel-v42.sh` boots the kclient guest once, mounts the `sluice` binary's export
//! with vers=4.1 and vers=4.2 (two NFS clients to the server) and runs guest/kernel-v42.sh with
//! the static helper guest/v42-tool.c:
//! - fcntl byte-range locks between two processes, through two clients (the server arbitrates:
//!   LOCK, LOCKT, LOCKU) and through one mount: conflicts are EAGAIN/EACCES, F_GETLK reports
//!   the holder's range (with pid 0 from the other client), a partial unlock splits the range,
//!   whole-file read locks share, a released or exited holder's lock is gone;
//! - flock between two processes: LOCK_EX conflicts, LOCK_SH shares (after a downgrade);
//! - fallocate (ALLOCATE), punch hole (DEALLOCATE), SEEK_DATA / SEEK_HOLE (SEEK) on a sparse
//!   file, and fallocate refused on the 4.1 mount;
//! - copy_file_range (COPY) of a 40 MiB file, more than one chunk (answered short and asked
//!   again, or asynchronously with a CB_OFFLOAD: `sluice_nfs4_cb_offload_total`), and FICLONE
//!   (CLONE); each mount makes one session (no back-channel fault resets it);
//! - a write delegation (issue #14): the 4.1 client opens a file for reading and writing and
//!   writes into its cache; the 4.2 client's stat is answered from the holder's CB_GETATTR
//!   (the holder's size), its read recalls the delegation and sees the holder's data
//!   (`sluice_nfs4_delegations_granted_total{type="write"}`, `..._cb_getattr_*_total`).
//!
//! The host checks the SHA-256 of the copies and the holes of the sparse file in the backing
//! directory, and this test reads the server's per-op counts from its metrics endpoint
//! (`sluice stats --prometheus`): LOCK, LOCKT, LOCKU, SEEK, ALLOCATE, DEALLOCATE and COPY must
//! each have been called without failing every time.

mod common;

use common::kclient_logs as logs_of;
use common::{free_port, metric, op_counts, require_tools, run_peer_script, Sluice, TempDir};
use std::time::Duration;

#[test]
fn linux_kernel_client_locks_and_v42_ops_reach_the_server() {
    require_tools(&["qemu-system-x86_64", "sha256sum", "gcc"]);
    let work = TempDir::new("kernel-v42");
    let results = work.path().join("kclient-run");
    let export = work.path().join("export");
    let state = work.path().join("state");
    std::fs::create_dir_all(&export).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let metrics = format!("127.0.0.1:{}", free_port());
    let server = Sluice::start(
        &export,
        &state,
        // Write delegations are off by default (`sluice_nfs4state::delegations::table`): on here,
        // where the locks between two clients and the write-delegation checks run with them.
        &[
            "--no-root-squash",
            "--metrics",
            &metrics,
            "--write-delegations",
        ],
        &work.path().join("server.log"),
    );
    let port = server.port.to_string();
    let export_s = server.export.to_str().unwrap().to_string();
    let run = run_peer_script(
        "kernel-v42.sh",
        &[&port, &export_s, &export_s],
        &[
            ("KC_VERBOSE", "1"),
            ("KC_RUN_DIR", results.to_str().unwrap()),
            ("KC_TIMEOUT", "200"),
        ],
        Duration::from_secs(240),
    );
    assert!(
        run.status.success(),
        "kernel-v42.sh failed against sluice: {}\n{}\n--- server log ---\n{}",
        run.describe(),
        logs_of(&results),
        server.log_text()
    );
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("kernel-v42: PASS")),
        "no PASS line: {}",
        run.describe()
    );
    assert!(
        !run.stdout.contains("FAIL") && !run.stderr.contains("FAIL"),
        "a guest check failed: {}",
        run.describe()
    );
    // The guest's checks ran through both mounts: at least this many PASS lines.
    let passes = run.stdout.lines().filter(|l| l.starts_with("PASS")).count();
    assert!(
        passes >= 100,
        "only {passes} checks passed: {}",
        run.describe()
    );

    let ops = op_counts(&metrics);
    for op in [
        "LOCK",
        "LOCKT",
        "LOCKU",
        "SEEK",
        "ALLOCATE",
        "DEALLOCATE",
        "COPY",
    ] {
        let (calls, errors) = ops.get(op).copied().unwrap_or_default();
        assert!(
            calls > 0 && errors < calls,
            "{op}: {calls} calls, {errors} errors in the server's stats: {ops:?}"
        );
    }
    // A 40 MiB copy is more than one chunk (32 MiB): asynchronous (one COPY, then CB_OFFLOAD)
    // once the 4.2 session has a back channel bound, even while its probe is still out (the
    // strict check is interop_kernel_reflink.rs); synchronous and answered short (two COPYs)
    // only if the path was found down. Either is a correct COPY.
    let cb_offloads = metric(&metrics, "sluice_nfs4_cb_offload_total");
    assert!(
        ops["COPY"].0 >= 2 || cb_offloads >= 1,
        "neither asked again nor CB_OFFLOAD ({cb_offloads}): {ops:?}"
    );
    // Each mount made its session once: no session resets (a back channel the client found
    // faulty would make it reset its session again and again).
    let (sessions, _) = ops.get("CREATE_SESSION").copied().unwrap_or_default();
    assert!(sessions <= 4, "{sessions} CREATE_SESSIONs: {ops:?}");
    // The write delegation: granted to the 4.1 client's read-write open, asked with
    // CB_GETATTR for the 4.2 client's stat (which saw the holder's size), recalled by its read.
    for (name, at_least) in [
        ("sluice_nfs4_delegations_granted_total{type=\"write\"}", 1),
        ("sluice_nfs4_cb_getattr_sent_total", 1),
        ("sluice_nfs4_cb_getattr_answered_total", 1),
        ("sluice_nfs4_recalls_sent_total", 1),
    ] {
        let n = metric(&metrics, name);
        assert!(n >= at_least, "{name} is {n}");
    }
    assert_eq!(metric(&metrics, "sluice_nfs4_delegations_revoked_total"), 0);
    // LOCK's errors are the conflicts (NFS4ERR_DENIED) the guest provoked across clients.
    assert!(ops["LOCK"].1 > 0, "no LOCK was denied: {ops:?}");
    assert!(ops["LOCKT"].1 > 0, "no LOCKT was denied: {ops:?}");
}
