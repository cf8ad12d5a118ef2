//! Issue #30: the Linux kernel client in the guest sets, lists, reads and removes user
//! extended attributes on a vers=4.2 mount of the `sluice` binary (RFC 8276: GETXATTR,
//! SETXATTR, LISTXATTRS, REMOVEXATTR). `tests/peers/kernel-xattr.sh` boots the kclient guest
//! once, mounts the export with vers=4.2 and vers=4.1 and runs guest/kernel-xattr.sh with the
//! static helper guest/xattr-tool.c: set, XATTR_CREATE and XATTR_REPLACE with their EEXIST and
//! ENODATA, get (of an attribute the host set too), list, remove, a 3000-byte value; and
//! EOPNOTSUPP through the 4.1 mount. The host script checks the backing file's `user.*`
//! attributes afterwards, and this test reads the server's per-op counts from its metrics
//! endpoint: each of the four ops called, not every call failing.

mod common;

use common::kclient_logs as logs_of;
use common::{free_port, op_counts, require_tools, run_peer_script, Sluice, TempDir};
use std::time::Duration;

#[test]
fn linux_kernel_client_sets_lists_reads_and_removes_user_xattrs_over_v4_2() {
    require_tools(&["qemu-system-x86_64", "gcc", "setfattr", "getfattr"]);
    let work = TempDir::new("kernel-xattr");
    let results = work.path().join("kclient-run");
    let export = work.path().join("export");
    let state = work.path().join("state");
    std::fs::create_dir_all(&export).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let metrics = format!("127.0.0.1:{}", free_port());
    let server = Sluice::start(
        &export,
        &state,
        &["--no-root-squash", "--metrics", &metrics],
        &work.path().join("server.log"),
    );
    let port = server.port.to_string();
    let export_s = server.export.to_str().unwrap().to_string();
    let run = run_peer_script(
        "kernel-xattr.sh",
        &[&port, &export_s, &export_s],
        &[
            ("KC_VERBOSE", "1"),
            ("KC_RUN_DIR", results.to_str().unwrap()),
            ("KC_TIMEOUT", "120"),
        ],
        Duration::from_secs(180),
    );
    assert!(
        run.status.success(),
        "kernel-xattr.sh failed against sluice: {}\n{}\n--- server log ---\n{}",
        run.describe(),
        logs_of(&results),
        server.log_text()
    );
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("kernel-xattr: PASS")),
        "no PASS line: {}",
        run.describe()
    );
    assert!(
        !run.stdout.contains("FAIL") && !run.stderr.contains("FAIL"),
        "a guest check failed: {}",
        run.describe()
    );
    let passes = run.stdout.lines().filter(|l| l.starts_with("PASS")).count();
    assert!(
        passes >= 19,
        "only {passes} checks passed: {}",
        run.describe()
    );
    let ops = op_counts(&metrics);
    for op in ["GETXATTR", "SETXATTR", "LISTXATTRS", "REMOVEXATTR"] {
        let (calls, errors) = ops.get(op).copied().unwrap_or_default();
        assert!(
            calls > 0 && errors < calls,
            "{op}: {calls} calls, {errors} errors in the server's stats: {ops:?}"
        );
    }
}
