//! Issue #2, interop with a client nobody here wrote: libnfs-utils 4.0 (nfs-ls, nfs-cp, nfs-cat)
//! against the `sluice` binary, judged by Wireshark.
//!
//! `tests/peers/libnfs-interop.sh` lists a host-placed tree and moves 0 B, 1 B, 1 MiB + 1 and
//! 64 MiB both ways (and NFS -> NFS), comparing SHA-256 with the local files. The whole session
//! is captured with dumpcap and `tshark-check.sh check` must find no malformed or unreassembled
//! packet, no unanswered call, no GARBAGE_ARGS/SYSTEM_ERR, and every procedure such a session
//! needs. NFS, MOUNT and PORTMAP share one port, so that port is both `nfsport` and `mountport`.

mod common;

use common::{calls_seen, require_tools, run_peer_script, Capture, Sluice, TempDir};
use std::time::Duration;

/// Procedures a libnfs v3 session must have used (with at least one call and one reply each).
const EXPECTED: &[&str] = &[
    "MOUNT3.MNT",
    "NFS3.FSINFO",
    "NFS3.GETATTR",
    "NFS3.LOOKUP",
    "NFS3.ACCESS",
    "NFS3.READ",
    "NFS3.WRITE",
    "NFS3.CREATE",
    // nfs-cp sets the mode of what it creates, and ends an UNSTABLE copy with COMMIT.
    "NFS3.SETATTR",
    "NFS3.COMMIT",
    "NFS3.READDIRPLUS",
];

#[test]
fn libnfs_utils_transfers_and_lists_and_the_wire_is_clean() {
    require_tools(&[
        "nfs-ls",
        "nfs-cp",
        "nfs-cat",
        "tshark",
        "dumpcap",
        "sha256sum",
    ]);
    let work = TempDir::new("libnfs");
    // libnfs runs as root here and writes as uid 0: export like the ganesha baseline does.
    let server = Sluice::start_in(&work);
    let port = server.port.to_string();
    let export_s = server.export.to_str().unwrap().to_string();

    let mut cap = Capture::start(server.port, &work.path().join("libnfs.pcapng"));
    let run = run_peer_script(
        "libnfs-interop.sh",
        &["127.0.0.1", &port, &port, &export_s, &export_s],
        &[],
        Duration::from_secs(240),
    );
    assert!(
        run.status.success(),
        "libnfs-interop.sh failed against sluice: {}\n--- server log ---\n{}",
        run.describe(),
        server.log_text()
    );

    let verdict = cap.check(EXPECTED);
    assert!(
        verdict.status.success(),
        "tshark-check found problems in the libnfs session: {}",
        verdict.describe()
    );
    let report = verdict.stdout;
    eprintln!("tshark-check report for the libnfs session:\n{report}");
    let summary = report
        .lines()
        .find(|l| l.starts_with("summary:"))
        .unwrap_or_else(|| panic!("no summary line in:\n{report}"));
    assert!(
        summary.contains("unanswered=0")
            && summary.contains("orphan_replies=0")
            && summary.contains("rpc_errors=0"),
        "{summary}"
    );
    // The 64 MiB transfers alone are 64 one-MiB WRITEs and READs each way.
    let writes = calls_seen(&report, "NFS3", "WRITE").unwrap_or(0);
    let reads = calls_seen(&report, "NFS3", "READ").unwrap_or(0);
    assert!(writes >= 64, "only {writes} WRITE calls seen:\n{report}");
    assert!(reads >= 64, "only {reads} READ calls seen:\n{report}");
    drop(cap);
    drop(server);
}
