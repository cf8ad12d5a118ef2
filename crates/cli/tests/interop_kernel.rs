//! Issue #2, interop with the Linux kernel NFS client: `tests/peers/kernel-interop.sh` boots a
//! stock Debian kernel in qemu, mounts the `sluice` binary's exports over NFSv3/TCP and runs
//! guest/kernel-interop.sh on each (cp -a of a tree, ls -lR, 64 MiB dd both ways with SHA-256
//! after drop_caches, renames, symlinks, hard links, rm -r, and a file renamed and removed while
//! another process holds it open: the holder still reads its data and what it appended after
//! the remove, the name is gone, no `.nfs` file is left). The host side then verifies the SHA-256
//! of every file the guest kept and that the guest read the host's 64 MiB file intact.
//!
//! One guest boot runs the workload over NFSv3 (MOUNT, then NFS), over NFSv4.1 and over 4.2
//! (`mount -o vers=4.1|4.2`: sessions, the pseudo file system down to the export, OPEN/CLOSE,
//! and READ/WRITE/COMMIT through the same data path as v3) at once, each version on both
//! exports below in turn, in a work folder of its own per version and export. Each version
//! has its own server (the same exports, each its own state and counters), so that what
//! one server's counters say (the delegations below) is one version's.
//!
//! Issue #26, the same over CephFS: one server exports a local directory and `ceph:/vol` of a
//! private one-node Ceph cluster (`tests/peers/ceph.sh`, through an exports file; one cluster
//! for the three servers). For the Ceph export the host's side
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

/// The versions the guest mounts, in this order.
const VERSIONS: [&str; 3] = ["3", "4.1", "4.2"];

#[test]
fn linux_kernel_client_over_nfsv3_4_1_and_4_2_copies_renames_links_and_checksums_match() {
    require_tools(&["qemu-system-x86_64", "sha256sum"]);
    let work = TempDir::new("kernel-interop");
    let results = work.path().join("kclient-run");
    let started = std::time::Instant::now();
    let ceph = CephCluster::start(false);
    let ceph_start = started.elapsed();
    // The guest works as root (cp -a keeps modes and owners), as against ganesha; qemu's user
    // networking connects from unprivileged ports (insecure). Each server's metrics endpoint
    // tells afterwards whether the guest took delegations from it (v4).
    let export = work.path().join("export");
    std::fs::create_dir_all(&export).unwrap();
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
    let servers: Vec<(Sluice, String)> = VERSIONS
        .iter()
        .map(|vers| {
            let state = work.path().join(format!("state-v{vers}"));
            std::fs::create_dir_all(&state).unwrap();
            let metrics = format!("127.0.0.1:{}", free_port());
            let server = Sluice::start_exports(
                &exports_file,
                &state,
                &["--metrics", &metrics],
                &work.path().join(format!("server-v{vers}.log")),
            );
            (server, metrics)
        })
        .collect();
    let versions: Vec<String> = VERSIONS
        .iter()
        .zip(&servers)
        .map(|(vers, (server, _))| format!("{vers}@{}", server.port))
        .collect();
    let port = servers[0].0.port.to_string();
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
            ("KI_VERSIONS", &versions.join(" ")),
            ("KC_RUN_DIR", results.to_str().unwrap()),
            // The coherence check on the Ceph export (the second), at every version.
            ("KI_COHERE", "2"),
            // The guest's own bound, below this test's backstop.
            ("KC_TIMEOUT", "1500"),
        ],
        Duration::from_secs(1560),
    );
    // The figures docs/testing.md quotes: the cluster's start, the whole run (one boot, three
    // versions at once, both exports each), and when (guest uptime) the guest began and
    // finished each run.
    let phases: Vec<String> = std::fs::read_to_string(results.join("out/guest.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("[kc ") && (l.contains("] mount ") || l.contains("done with")))
        .map(|l| l.chars().take(60).collect())
        .collect();
    eprintln!(
        "kernel-interop: Ceph cluster up in {ceph_start:.1?}; v3, 4.1 and 4.2 on the local and \
         the Ceph export in one boot: {:.1?}\n  {}",
        run.elapsed,
        phases.join("\n  ")
    );
    let guest_log = logs_of(&results);
    assert!(
        run.status.success(),
        "kernel-interop.sh (versions {VERSIONS:?}; its FAIL line says which) failed against \
         sluice: {}\n{guest_log}\n{}",
        run.describe(),
        server_logs(&servers)
    );
    // With KC_VERBOSE the host driver ends with its verdict per version and export: every
    // kept file's SHA-256 matched on the host (through ceph-fuse for /vol), and the guest read
    // the host's file with the host's SHA-256.
    for vers in VERSIONS {
        for (name, coherence) in [(export_s.as_str(), false), ("/vol", true)] {
            let pass = run
                .stdout
                .lines()
                .find(|l| {
                    l.starts_with("kernel-interop: PASS")
                        && l.contains(&format!("; vers {vers} export {name};"))
                })
                .unwrap_or_else(|| {
                    panic!(
                        "no PASS line for vers {vers} export {name} from kernel-interop.sh: {}",
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
    }
    assert!(
        !run.stdout.contains("FAIL") && !run.stderr.contains("FAIL"),
        "a guest check failed: {}",
        run.describe()
    );
    for (vers, (server, metrics)) in VERSIONS.iter().zip(&servers) {
        if *vers == "3" {
            continue;
        }
        // The guest read files under read delegations and returned them (at the latest at
        // its unmount): the server granted them to the Linux client and it gave them back.
        // Those are the local export's: a Ceph export grants none (other Ceph clients change
        // its files behind the server's back; the coherence check above would see it).
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["stats", metrics])
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
            "vers {vers}: the guest returned no delegation:\n{text}\n--- callbacks in the \
             server log ---\n{}",
            callbacks[callbacks.len().saturating_sub(20)..].join("\n")
        );
        assert!(
            text.contains("nfs v4 delegations: 0 read, 0 write"),
            "vers {vers}: every delegation came back:\n{text}"
        );
    }
}

/// Every server's log, each under its version, for a failure message.
fn server_logs(servers: &[(Sluice, String)]) -> String {
    VERSIONS
        .iter()
        .zip(servers)
        .map(|(vers, (server, _))| format!("--- server log (v{vers}) ---\n{}", server.log_text()))
        .collect::<Vec<_>>()
        .join("\n")
}
