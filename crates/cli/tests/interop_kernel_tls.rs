//! Issue #28, RPC-with-TLS (RFC 9289) with the Linux kernel client: the kclient guest built
//! from Debian 13 (`KC_SUITE=trixie`: kernel 6.12, whose NFS client does RPC-with-TLS, and
//! `tlshd` from ktls-utils, which makes the TLS handshakes for it) boots once and mounts the
//! `sluice` binary's export four times in turn: NFSv4.2 and NFSv3, each with `xprtsec=tls`
//! (the server's certificate verified) and `xprtsec=mtls` (the guest presents its own).
//! guest/kernel-tls.sh runs the interop workload of guest/kernel-interop.sh on each mount
//! (cp -a of a tree, 16 MiB dd both ways with SHA-256 after drop_caches, a host-placed tree and
//! file, renames, links, a file removed while open, fcntl locks, kc-fsx). Then three mounts
//! must fail: mtls with tlshd presenting a certificate of another CA (the server refuses the
//! handshake), mtls with tlshd holding no certificate (tlshd gives up), and tls against a
//! second server whose certificate names 127.0.0.1 but not 10.0.2.2 (tlshd refuses it).
//!
//! The certificates are made here (rcgen): a CA, the server's for the address the guest mounts
//! (10.0.2.2, qemu's name for this machine's loopback, as an IP SAN: the kernel hands tlshd the
//! mount's server address as the peer name and tlshd checks it against the certificate, which
//! the wrong-name mount shows), a client certificate of that CA, a stranger's from another CA.
//!
//! Three views must agree that the data went through TLS:
//! - the guest's: every mount's /proc/mounts line carries its `xprtsec=` option, and tlshd's
//!   log has one completed handshake per TLS connection (the kernel itself logs nothing about
//!   a handshake);
//! - the server's counters (`sluice_tls_*`): as many connections upgraded as tlshd completed,
//!   client certificates verified on the mtls mounts only, the two refused mtls handshakes
//!   counted as failed;
//! - the wire's (a capture of what the guest sent to the port, [`common::conns`]): every
//!   connection began with the AUTH_TLS probe, except the v3 mounts' MOUNT calls. The kernel
//!   sends its MNT request (program 100005) on a plaintext connection of its own even under
//!   `xprtsec=`; no connection carried plaintext NFS.
//!
//! The host then checks the SHA-256 of every file the guest kept in the export, as
//! interop_kernel.rs does, and that the guest read the host's file intact over each mount.
//! The first run downloads and builds the guest (~120 MB of packages, about half a minute
//! with a near mirror; `tests/peers/kclient/README.md`).

mod common;

use common::conns::{classify, ConnCapture, FirstRecord};
use common::kclient_logs as logs_of;
use common::{free_port, metric, prometheus, require_tools, run_peer_script, sha256_file};
use common::{Sluice, TempDir};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The mounts, in the order the guest makes them: NFS version and `xprtsec=` policy.
const MOUNTS: [(&str, &str); 4] = [("4.2", "tls"), ("4.2", "mtls"), ("3", "tls"), ("3", "mtls")];

/// The dd file's size: 16 MiB each way per mount keeps the whole run near two minutes (the
/// guest's TLS runs the generic AES-GCM under TCG, about 5-10 MB/s).
const BIG_MIB: u64 = 16;

const NFS_PROGRAM: u32 = 100003;
const MOUNT_PROGRAM: u32 = 100005;

#[test]
fn linux_kernel_client_mounts_with_xprtsec_tls_and_mtls() {
    require_tools(&[
        "qemu-system-x86_64",
        "sha256sum",
        "gcc",
        "dumpcap",
        "zstd",
        "readelf",
    ]);
    let work = TempDir::new("kernel-tls");
    let results = work.path().join("kclient-run");
    let pki = make_pki(&work.path().join("pki"));
    let (export, state) = (work.path().join("export"), work.path().join("state"));
    std::fs::create_dir_all(&export).unwrap();
    std::fs::create_dir_all(&state).unwrap();

    // What the host places for the guest to read: a small tree and a file of BIG_MIB.
    let tree = export.join("host-tree");
    std::fs::create_dir_all(tree.join("a/b")).unwrap();
    for i in 1..=8u64 {
        std::fs::write(
            tree.join(format!("file{i}")),
            common::pattern(i, (i * 777) as usize),
        )
        .unwrap();
    }
    std::fs::write(tree.join("a/b/nested.txt"), b"nested\n").unwrap();
    std::os::unix::fs::symlink("a/b/nested.txt", tree.join("rel-link")).unwrap();
    let host_file = export.join("host-file.bin");
    std::fs::write(
        &host_file,
        common::pattern(0x7e57, (BIG_MIB << 20) as usize),
    )
    .unwrap();
    let host_sum = sha256_file(&host_file);

    let metrics = format!("127.0.0.1:{}", free_port());
    let p = |f: &str| pki.join(f).to_str().unwrap().to_string();
    let server = Sluice::start(
        &export,
        &state,
        &[
            "--no-root-squash",
            "--metrics",
            &metrics,
            "--tls-cert",
            &p("server.pem"),
            "--tls-key",
            &p("server.key"),
            "--tls-client-ca",
            &p("ca.pem"),
        ],
        &work.path().join("server.log"),
    );
    let port = server.port.to_string();
    let export_s = server.export.to_str().unwrap().to_string();
    // The wrong-name server: the same CA, a certificate for 127.0.0.1 only.
    let (export2, state2) = (work.path().join("export2"), work.path().join("state2"));
    std::fs::create_dir_all(&export2).unwrap();
    std::fs::create_dir_all(&state2).unwrap();
    let metrics2 = format!("127.0.0.1:{}", free_port());
    let wrong_name = Sluice::start(
        &export2,
        &state2,
        &[
            "--metrics",
            &metrics2,
            "--tls-cert",
            &p("loopback.pem"),
            "--tls-key",
            &p("loopback.key"),
        ],
        &work.path().join("server2.log"),
    );

    // The guest's static helpers, as kernel-interop.sh builds them.
    let peers = common::repo_root().join("tests/peers");
    let build = work.path().join("build");
    std::fs::create_dir_all(&build).unwrap();
    for t in ["kc-lock", "kc-fsx"] {
        let st = std::process::Command::new("gcc")
            .args(["-static", "-O2", "-Wall", "-o"])
            .arg(build.join(t))
            .arg(peers.join(format!("guest/{t}.c")))
            .status()
            .expect("run gcc");
        assert!(st.success(), "gcc -static {t}.c failed");
    }

    let mut capture = ConnCapture::start(server.port, &work.path().join("conns.pcap"));
    let guest_script = peers.join("guest/kernel-tls.sh");
    let interop_script = peers.join("guest/kernel-interop.sh");
    let files = [
        pki.clone(),
        interop_script,
        build.join("kc-lock"),
        build.join("kc-fsx"),
    ];
    let mut args: Vec<String> = vec![
        port.clone(),
        port.clone(),
        export_s.clone(),
        guest_script.to_str().unwrap().into(),
    ];
    for f in &files {
        args.extend(["--file".into(), f.to_str().unwrap().into()]);
    }
    for env in [
        format!("KI_BIG_MIB={BIG_MIB}"),
        // kc-fsx's random operations are interop_kernel.rs's subject; here 150 of them keep
        // the run near two minutes and still send unaligned READs and WRITEs through TLS.
        "KI_FSX_OPS=150".into(),
        "KI_HOST_TREE=host-tree".into(),
        "KI_HOST_FILE=host-file.bin".into(),
        format!(
            "KT_MOUNTS={}",
            MOUNTS.map(|(v, s)| format!("{v}:{s}")).join(" ")
        ),
        format!("KT_WRONG_NAME_PORT={}", wrong_name.port),
    ] {
        args.extend(["--env".into(), env]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = run_peer_script(
        "kclient.sh",
        &args,
        &[
            ("KC_SUITE", "trixie"),
            ("KC_VERBOSE", "1"),
            ("KC_RUN_DIR", results.to_str().unwrap()),
            // The guest's own bound (about two minutes are needed), below this test's
            // backstop, which also covers a first build of the guest (kclient.sh allows it
            // 900 s).
            ("KC_TIMEOUT", "420"),
        ],
        Duration::from_secs(1500),
    );
    let conns = capture.stop();
    let out = results.join("out");
    eprintln!(
        "kernel-tls: guest run {:.1?} (boot, four mounts with the workload, three refused \
         mounts)\n  {}",
        run.elapsed,
        phases(&out).join("\n  ")
    );
    assert!(
        run.status.success(),
        "the guest's TLS mounts failed against sluice: {}\n{}\n--- server log ---\n{}",
        run.describe(),
        logs_of(&results),
        server.log_text()
    );

    // (a) Every check of every mount passed, and the three mounts that must fail failed.
    assert!(
        !run.stdout.lines().any(|l| l.starts_with("FAIL")) && !run.stdout.contains("KT FAIL"),
        "a guest check failed: {}",
        run.describe()
    );
    for (vers, sec) in MOUNTS {
        let name = format!("v{vers}-{sec}");
        assert!(
            run.stdout.lines().any(|l| l == format!("KT PASS {name}")),
            "no verdict for {name}: {}",
            run.describe()
        );
        verify_sums(&out.join(&name), &export, &host_sum, &name);
    }
    for refusal in ["stranger", "no-client-cert", "wrong-name"] {
        assert!(
            run.stdout.contains(&format!("KT PASS {refusal}: refused")),
            "{refusal}: {}",
            run.describe()
        );
    }
    let passes = run.stdout.lines().filter(|l| l.starts_with("PASS")).count();
    assert!(
        passes >= 4 * 45,
        "only {passes} checks passed: {}",
        run.describe()
    );

    // (b) The guest says TLS: each mount's options carry its xprtsec=, and tlshd completed a
    // handshake for each connection.
    for (vers, sec) in MOUNTS {
        let name = format!("v{vers}-{sec}");
        let line = std::fs::read_to_string(out.join(&name).join("mounts.txt")).unwrap_or_default();
        assert!(
            line.split_whitespace()
                .nth(3)
                .is_some_and(|o| o.split(',').any(|o| o == format!("xprtsec={sec}"))
                    && o.split(',').any(|o| o == format!("vers={vers}"))),
            "{name}: /proc/mounts shows no xprtsec={sec}: {line:?}"
        );
        let stats =
            std::fs::read_to_string(out.join(&name).join("mountstats.txt")).unwrap_or_default();
        assert!(
            stats.contains(&format!("xprtsec={sec}")),
            "{name}: mountstats: {stats}"
        );
    }
    let tlshd = std::fs::read_to_string(out.join("tlshd.log")).unwrap_or_default();
    let handshakes_ok = tlshd
        .lines()
        .filter(|l| l.contains("Handshake with") && l.contains("was successful"))
        .count() as u64;
    let handshakes_failed = tlshd
        .lines()
        .filter(|l| l.contains("Handshake with") && l.ends_with("failed"))
        .count() as u64;
    assert!(
        handshakes_ok >= MOUNTS.len() as u64,
        "tlshd completed {handshakes_ok} handshakes for {} mounts:\n{tlshd}",
        MOUNTS.len()
    );
    assert_eq!(
        handshakes_failed, 3,
        "the refused mounts' handshakes, no other, fail:\n{tlshd}"
    );

    // (c) The server's counters: the same handshakes, certificates verified on the mtls
    // connections only, the stranger's and the certificate-less handshakes failed (the latter
    // after the probe: tlshd sends no ClientHello); and the NFS calls were served.
    let upgraded = metric(&metrics, "sluice_tls_connections_total");
    let verified = metric(&metrics, "sluice_tls_client_verified_total");
    let failed = metric(&metrics, "sluice_tls_handshake_failures_total");
    assert_eq!(
        upgraded, handshakes_ok,
        "the server upgraded {upgraded} connections, tlshd completed {handshakes_ok}"
    );
    assert_eq!(failed, 2, "handshake failures on the server");
    assert_eq!(
        (
            metric(&metrics2, "sluice_tls_connections_total"),
            metric(&metrics2, "sluice_tls_handshake_failures_total")
        ),
        (0, 1),
        "the wrong-name server: upgraded, failed"
    );
    let mtls_mounts = MOUNTS.iter().filter(|(_, s)| *s == "mtls").count() as u64;
    let tls_mounts = MOUNTS.len() as u64 - mtls_mounts;
    assert!(
        verified >= mtls_mounts && upgraded - verified >= tls_mounts,
        "{verified} of {upgraded} TLS connections had a verified client certificate \
         ({mtls_mounts} mtls and {tls_mounts} tls mounts)"
    );
    let prom = prometheus(&metrics);
    let calls = |prefix: &str, proc_: &str| -> u64 {
        metric_line(&prom, &format!("{prefix}{{proc=\"{proc_}\"}}"))
    };
    assert!(calls("sluice_nfs_calls_total", "WRITE") > 0, "no v3 WRITE");
    assert!(calls("sluice_nfs_calls_total", "READ") > 0, "no v3 READ");
    assert!(
        calls("sluice_nfs4_calls_total", "COMPOUND") > 0,
        "no v4 COMPOUND"
    );

    // ... and the wire: every connection asked for TLS first, but the v3 mounts' MOUNT calls.
    let probes = conns
        .iter()
        .filter(|c| c.first == FirstRecord::TlsProbe)
        .count() as u64;
    let plain: Vec<_> = conns
        .iter()
        .filter(|c| c.first != FirstRecord::TlsProbe)
        .collect();
    eprintln!(
        "kernel-tls: {} connections: {probes} began with the AUTH_TLS probe, plaintext: {:?}",
        conns.len(),
        plain
    );
    assert!(
        plain.iter().all(|c| matches!(
            c.first,
            FirstRecord::PlainCall {
                program: MOUNT_PROGRAM,
                ..
            }
        )),
        "a connection other than MOUNT's went without TLS: {plain:?}"
    );
    assert!(
        !plain.iter().any(|c| matches!(
            c.first,
            FirstRecord::PlainCall {
                program: NFS_PROGRAM,
                ..
            }
        )),
        "plaintext NFS: {plain:?}"
    );
    let v3_mounts = MOUNTS.iter().filter(|(v, _)| *v == "3").count();
    assert!(
        !plain.is_empty() && plain.len() <= 2 * v3_mounts,
        "{} plaintext MOUNT connections for {v3_mounts} v3 mounts",
        plain.len()
    );
    assert_eq!(
        probes,
        upgraded + failed,
        "probes on the wire vs connections the server upgraded or failed"
    );
}

/// The capture's classifier tells the probe from a plaintext call and from bytes that are no
/// RPC call.
#[test]
fn the_first_record_of_a_connection_is_classified() {
    let words = |w: &[u32]| -> Vec<u8> { w.iter().flat_map(|w| w.to_be_bytes()).collect() };
    let probe = words(&[0x8000_0028, 1, 0, 2, NFS_PROGRAM, 3, 0, 7, 0, 0, 0]);
    assert_eq!(classify(&probe), FirstRecord::TlsProbe);
    let mnt = words(&[0x8000_0050, 9, 0, 2, MOUNT_PROGRAM, 3, 1, 1]);
    assert_eq!(
        classify(&mnt),
        FirstRecord::PlainCall {
            program: MOUNT_PROGRAM,
            version: 3
        }
    );
    // AUTH_TLS on a call that is not NULL is no probe.
    let odd = words(&[0x8000_0028, 1, 0, 2, NFS_PROGRAM, 3, 4, 7]);
    assert!(matches!(classify(&odd), FirstRecord::PlainCall { .. }));
    assert!(matches!(classify(&[0x16, 3, 1]), FirstRecord::Other(_)));
}

/// Writes the PEM files the servers and the guest use into `dir`: ca.pem, server.pem/.key
/// (for 10.0.2.2), loopback.pem/.key (for 127.0.0.1 only), client.pem/.key (signed by the CA),
/// stranger.pem/.key (another CA's).
fn make_pki(dir: &Path) -> PathBuf {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    std::fs::create_dir_all(dir).unwrap();
    let ca = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(rcgen::DnType::CommonName, format!("sluice test {name}"));
        let cert = p.self_signed(&key).unwrap();
        (cert, key)
    };
    let (ca_cert, ca_key) = ca("CA");
    let (other_cert, other_key) = ca("other CA");
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
    let leaf = |names: &[&str], file: &str, by: (&rcgen::Certificate, &KeyPair)| {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, by.0, by.1)
            .unwrap();
        std::fs::write(dir.join(format!("{file}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{file}.key")), key.serialize_pem()).unwrap();
    };
    // An IP string becomes an IP address SAN (rcgen): what tlshd checks 10.0.2.2 against.
    leaf(&["10.0.2.2"], "server", (&ca_cert, &ca_key));
    leaf(&["127.0.0.1"], "loopback", (&ca_cert, &ca_key));
    leaf(&["kclient"], "client", (&ca_cert, &ca_key));
    leaf(&["kclient"], "stranger", (&other_cert, &other_key));
    dir.to_path_buf()
}

/// Checks a mount's e1-sums.txt (kernel-interop.sh's): every file the guest kept has that
/// SHA-256 in the export, and the guest read the host's file as the host wrote it.
fn verify_sums(dir: &Path, export: &Path, host_sum: &str, name: &str) {
    let sums = std::fs::read_to_string(dir.join("e1-sums.txt"))
        .unwrap_or_else(|e| panic!("{name}: no e1-sums.txt in {}: {e}", dir.display()));
    let (mut files, mut host_read) = (0, false);
    for line in sums.lines() {
        let Some((sum, path)) = line.split_once("  ") else {
            panic!("{name}: bad line {line:?}")
        };
        if let Some(read) = sum.strip_prefix("host:") {
            assert_eq!(read, host_sum, "{name}: the guest read {path} differently");
            host_read = true;
        } else {
            assert_eq!(
                sha256_file(&export.join(path)),
                sum,
                "{name}: {path} differs on the host"
            );
            files += 1;
        }
    }
    assert!(host_read, "{name}: the guest did not read the host's file");
    assert!(files >= 30, "{name}: only {files} files verified");
}

/// The value of one labelled metric line (0 when absent).
fn metric_line(prom: &str, name: &str) -> u64 {
    prom.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0)
}

/// The guest's phase lines (uptime stamps): tlshd up, each mount, each workload's end.
fn phases(out: &Path) -> Vec<String> {
    std::fs::read_to_string(out.join("guest.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.starts_with("[kc ")
                && (l.contains("] ==") || l.contains("done with") || l.contains("tlshd up"))
        })
        .map(|l| l.chars().take(70).collect())
        .collect()
}
