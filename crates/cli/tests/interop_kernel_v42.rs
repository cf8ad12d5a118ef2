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
//!
//! Issue #30, in the same boot: the Linux kernel client in the guest sets, lists, reads and
//! removes user extended attributes on a vers=4.2 mount of the `sluice` binary (RFC 8276:
//! GETXATTR, SETXATTR, LISTXATTRS, REMOVEXATTR). `tests/peers/kernel-xattr.sh`'s checks
//! (through kernel-v42.sh's `KV_XATTR`) mount a second server's export with vers=4.2 and
//! vers=4.1 and run guest/kernel-xattr.sh with the static helper guest/xattr-tool.c: set,
//! XATTR_CREATE and XATTR_REPLACE with their EEXIST and ENODATA, get (of an attribute the host
//! set too), list, remove, a 3000-byte value; and EOPNOTSUPP through the 4.1 mount. The host
//! script checks the backing file's `user.*` attributes afterwards, and this test reads that
//! server's per-op counts from its metrics endpoint: each of the four ops called, not every
//! call failing.
//!
//! The two tests share one guest boot (`tests/peers/kernel-v42.sh` with `KV_XATTR`): the
//! first of them to run starts both servers (each as its test had it: write delegations on
//! for the v42 checks only), boots the guest once, keeps each server's counters and stops
//! them; each test then checks its own part of what was kept.

mod common;

use common::kclient_logs as logs_of;
use common::{free_port, prometheus, require_tools, run_peer_script, ScriptRun, Sluice, TempDir};
use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

/// What the one boot left for the two tests.
struct Shared {
    run: ScriptRun,
    /// The host's verdict on the xattr checks (kernel-xattr.sh's verify phase) and the guest's
    /// output of them (out/xattr.log).
    xattr_verdict: String,
    xattr_guest: String,
    /// The run folder's logs and each server's log, for failure messages.
    logs: String,
    v42_log: String,
    xattr_log: String,
    /// Each server's metrics (Prometheus text) after the run.
    v42_metrics: String,
    xattr_metrics: String,
}

static SHARED: OnceLock<Shared> = OnceLock::new();

/// Runs the one boot, the first time it is asked for (the other test waits for it). Both
/// servers and the work folder are gone when it returns: what the tests check was kept.
fn shared() -> &'static Shared {
    SHARED.get_or_init(|| {
        require_tools(&[
            "qemu-system-x86_64",
            "sha256sum",
            "gcc",
            "setfattr",
            "getfattr",
        ]);
        let work = TempDir::new("kernel-v42");
        let results = work.path().join("kclient-run");
        let serve = |name: &str, extra: &[&str]| {
            let (export, state) = (
                work.path().join(name),
                work.path().join(format!("{name}-state")),
            );
            std::fs::create_dir_all(&export).unwrap();
            std::fs::create_dir_all(&state).unwrap();
            let metrics = format!("127.0.0.1:{}", free_port());
            let mut args = vec!["--no-root-squash", "--metrics", &metrics];
            args.extend_from_slice(extra);
            let server = Sluice::start(
                &export,
                &state,
                &args,
                &work.path().join(format!("{name}-server.log")),
            );
            (server, metrics)
        };
        // Write delegations are off by default (`sluice_nfs4state::delegations::table`): on
        // for the v42 checks, where the locks between two clients and the write-delegation
        // checks run with them; off for the xattr checks, as a default server.
        let (v42, v42_metrics) = serve("export", &["--write-delegations"]);
        let (xattr, xattr_metrics) = serve("xattr-export", &[]);
        let export_s = v42.export.to_str().unwrap().to_string();
        let xattr_spec = format!("{} {1} {1}", xattr.port, xattr.export.to_str().unwrap());
        let run = run_peer_script(
            "kernel-v42.sh",
            &[&v42.port.to_string(), &export_s, &export_s],
            &[
                ("KC_VERBOSE", "1"),
                ("KC_RUN_DIR", results.to_str().unwrap()),
                ("KV_XATTR", &xattr_spec),
                ("KC_TIMEOUT", "300"),
            ],
            Duration::from_secs(360),
        );
        Shared {
            logs: logs_of(&results),
            v42_log: v42.log_text(),
            xattr_log: xattr.log_text(),
            v42_metrics: prometheus(&v42_metrics),
            xattr_metrics: prometheus(&xattr_metrics),
            xattr_verdict: std::fs::read_to_string(results.join("xattr-verdict.txt"))
                .unwrap_or_default(),
            xattr_guest: std::fs::read_to_string(results.join("out/xattr.log")).unwrap_or_default(),
            run,
        }
    })
}

/// The per-op (calls, errors) of a Prometheus text, as `common::op_counts` reads them.
fn op_counts(prom: &str) -> HashMap<String, (u64, u64)> {
    let mut ops: HashMap<String, (u64, u64)> = HashMap::new();
    for line in prom.lines() {
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

/// One unlabelled metric of a Prometheus text (0 when absent).
fn metric(prom: &str, name: &str) -> u64 {
    prom.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn linux_kernel_client_locks_and_v42_ops_reach_the_server() {
    let s = shared();
    let run = &s.run;
    assert!(
        run.status.success(),
        "kernel-v42.sh failed against sluice: {}\n{}\n--- server log ---\n{}",
        run.describe(),
        s.logs,
        s.v42_log
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

    let ops = op_counts(&s.v42_metrics);
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
    let cb_offloads = metric(&s.v42_metrics, "sluice_nfs4_cb_offload_total");
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
        let n = metric(&s.v42_metrics, name);
        assert!(n >= at_least, "{name} is {n}");
    }
    assert_eq!(
        metric(&s.v42_metrics, "sluice_nfs4_delegations_revoked_total"),
        0
    );
    // LOCK's errors are the conflicts (NFS4ERR_DENIED) the guest provoked across clients.
    assert!(ops["LOCK"].1 > 0, "no LOCK was denied: {ops:?}");
    assert!(ops["LOCKT"].1 > 0, "no LOCKT was denied: {ops:?}");
}

#[test]
fn linux_kernel_client_sets_lists_reads_and_removes_user_xattrs_over_v4_2() {
    let s = shared();
    // The v42 checks' status is the script's; this part's are the guest's xattr.log and the
    // host's verdict on it.
    let (verdict, guest) = (&s.xattr_verdict, &s.xattr_guest);
    let failed = || {
        format!(
            "--- xattr verdict ---\n{verdict}\n--- guest xattr.log ---\n{guest}\n--- run \
             ---\n{}\n{}\n--- server log ---\n{}",
            s.run.describe(),
            s.logs,
            s.xattr_log
        )
    };
    assert!(
        verdict.lines().any(|l| l.starts_with("kernel-xattr: PASS")),
        "kernel-xattr.sh failed against sluice (no PASS line): {}",
        failed()
    );
    assert!(
        !verdict.contains("FAIL") && !guest.contains("FAIL"),
        "a guest check failed: {}",
        failed()
    );
    let passes = guest.lines().filter(|l| l.starts_with("PASS")).count();
    assert!(passes >= 19, "only {passes} checks passed: {}", failed());
    let ops = op_counts(&s.xattr_metrics);
    for op in ["GETXATTR", "SETXATTR", "LISTXATTRS", "REMOVEXATTR"] {
        let (calls, errors) = ops.get(op).copied().unwrap_or_default();
        assert!(
            calls > 0 && errors < calls,
            "{op}: {calls} calls, {errors} errors in the server's stats: {ops:?}"
        );
    }
}
