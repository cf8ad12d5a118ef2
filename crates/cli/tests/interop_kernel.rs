//! Issue #2, interop with the Linux kernel NFS client: `tests/peers/kernel-interop.sh` boots a
//! stock Debian kernel in qemu, mounts the `sluice` binary's exports over NFSv3/TCP and runs
//! guest/kernel-interop.sh on each (cp -a of a tree, ls -lR, 64 MiB dd both ways with SHA-256
//! after drop_caches, renames, symlinks, hard links, rm -r, and a file renamed and removed while
//! another process holds it open: the holder still reads its data and what it appended after
//! the remove, the name is gone, no `.nfs` file is left). The host side then verifies the SHA-256
//! of every file the guest kept and that the guest read the host's 64 MiB file intact.
//!
//! The same script runs three times: over NFSv3 (MOUNT, then NFS), and over NFSv4.1 and 4.2
//! (`mount -o vers=4.1|4.2`: sessions, the pseudo file system down to the export, OPEN/CLOSE,
//! and READ/WRITE/COMMIT through the same data path as v3).
//!
//! Issue #26, the same over CephFS: one server exports a local directory and `ceph:/vol` of a
//! private one-node Ceph cluster (`tests/peers/ceph.sh`, through an exports file), and the one
//! guest boot runs the workload on both exports in turn. For the Ceph export the host's side
//! is a ceph-fuse mount: the host tree and file go in through it, and the SHA-256 of what the
//! kernel client wrote through sluice is read back through it (an independent Ceph client).
//! Then the reverse: the guest reads a file, the host rewrites it through ceph-fuse with new
//! bytes but the same size and mtime, and the guest's next open must read the new bytes (the
//! mount has the default attribute cache options, acregmin 3 s .. acregmax 60 s, and
//! close-to-open coherence revalidates at open), which only the change attribute (v4) or the
//! ctime (v3) that sluice takes from Ceph can tell it.

mod common;

use common::ceph::CephCluster;
use common::kclient_logs as logs_of;
use common::{free_port, require_tools, run_peer_script, Sluice, TempDir};
use std::time::Duration;

#[test]
fn linux_kernel_client_copies_renames_links_and_checksums_match() {
    kernel_interop("3");
}

#[test]
fn linux_kernel_client_over_nfsv4_1() {
    kernel_interop("4.1");
}

#[test]
fn linux_kernel_client_over_nfsv4_2() {
    kernel_interop("4.2");
}

/// Runs kernel-interop.sh with the guest mounting `vers`, on a local and a Ceph export of one
/// server, and checks its verdict.
fn kernel_interop(vers: &str) {
    require_tools(&["qemu-system-x86_64", "sha256sum"]);
    let work = TempDir::new(&format!("kernel-v{vers}"));
    let results = work.path().join("kclient-run");
    let started = std::time::Instant::now();
    let ceph = CephCluster::start(false);
    let ceph_start = started.elapsed();
    // The guest works as root (cp -a keeps modes and owners), as against ganesha; qemu's user
    // networking connects from unprivileged ports (insecure). The metrics endpoint tells
    // afterwards whether the guest took delegations (v4).
    let metrics = format!("127.0.0.1:{}", free_port());
    let (export, state) = (work.path().join("export"), work.path().join("state"));
    std::fs::create_dir_all(&export).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let export = export.canonicalize().unwrap();
    let exports_file = work.path().join("exports");
    let opts = "rw,insecure,no_root_squash";
    std::fs::write(
        &exports_file,
        format!(
            "{} 127.0.0.1({opts})\nceph:/vol 127.0.0.1({opts},ceph_conf={},ceph_fs=cephfs)\n",
            export.display(),
            ceph.conf.display()
        ),
    )
    .unwrap();
    let server = Sluice::start_exports(
        &exports_file,
        &state,
        &["--metrics", &metrics],
        &work.path().join("server.log"),
    );
    let port = server.port.to_string();
    let export_s = export.to_str().unwrap().to_string();
    let ceph_back = ceph.fuse.join("vol");
    let run = run_peer_script(
        "kernel-interop.sh",
        &[
            &port,
            &port,
            &export_s,
            &export_s,
            "/vol",
            ceph_back.to_str().unwrap(),
        ],
        &[
            ("KC_VERBOSE", "1"),
            ("KC_VERS", vers),
            ("KC_RUN_DIR", results.to_str().unwrap()),
            // The coherence check on the Ceph export (the second).
            ("KI_COHERE", "2"),
            // The guest's own bound, below this test's backstop.
            ("KC_TIMEOUT", "900"),
        ],
        Duration::from_secs(960),
    );
    // The figures docs/testing.md quotes: the cluster's start, the whole run (one boot, both
    // exports), and when (guest uptime) the guest began and finished each export's workload.
    let phases: Vec<String> = std::fs::read_to_string(results.join("out/guest.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("[kc ") && (l.contains("] mount ") || l.contains("done with")))
        .map(|l| l.chars().take(60).collect())
        .collect();
    eprintln!(
        "kernel-interop v{vers}: Ceph cluster up in {ceph_start:.1?}; local + Ceph export in one \
         boot: {:.1?}\n  {}",
        run.elapsed,
        phases.join("\n  ")
    );
    let guest_log = logs_of(&results);
    assert!(
        run.status.success(),
        "kernel-interop.sh (vers={vers}) failed against sluice: {}\n{guest_log}\n--- server log ---\n{}",
        run.describe(),
        server.log_text()
    );
    // With KC_VERBOSE the host driver ends with its verdict per export: every kept file's
    // SHA-256 matched on the host (through ceph-fuse for /vol), and the guest read the host's
    // file with the host's SHA-256.
    for (name, coherence) in [(export_s.as_str(), false), ("/vol", true)] {
        let pass = run
            .stdout
            .lines()
            .find(|l| {
                l.starts_with("kernel-interop: PASS") && l.contains(&format!("export {name};"))
            })
            .unwrap_or_else(|| {
                panic!(
                    "no PASS line for {name} from kernel-interop.sh: {}",
                    run.describe()
                )
            });
        assert!(pass.contains("host file sha256 ok"), "{pass}");
        let verified: u32 = pass
            .split('(')
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("cannot read the verified-file count in: {pass}"));
        assert!(verified >= 30, "{pass}");
        assert_eq!(
            pass.contains("a host rewrite read at the next open"),
            coherence,
            "{pass}"
        );
    }
    assert!(
        !run.stdout.contains("FAIL") && !run.stderr.contains("FAIL"),
        "a guest check failed: {}",
        run.describe()
    );
    if vers != "3" {
        // The guest read files under read delegations and returned them (at the latest at
        // its unmount): the server granted them to the Linux client and it gave them back.
        // Those are the local export's: a Ceph export grants none (other Ceph clients change
        // its files behind the server's back; the coherence check above would see it).
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["stats", &metrics])
            .output()
            .expect("sluice stats");
        let text = String::from_utf8_lossy(&out.stdout);
        let returns = text
            .lines()
            .find(|l| l.starts_with("delegreturn "))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        let log = server.log_text();
        let callbacks: Vec<&str> = log.lines().filter(|l| l.contains("callback")).collect();
        assert!(
            returns > 0,
            "the guest returned no delegation:\n{text}\n--- callbacks in the server log ---\n{}",
            callbacks[callbacks.len().saturating_sub(20)..].join("\n")
        );
        assert!(
            text.contains("nfs v4 delegations: 0 read, 0 write"),
            "every delegation came back:\n{text}"
        );
    }
}
