//! Issue #28, kernel TLS in the server: the `sluice` binary runs INSIDE the kclient guest built
//! from Debian 13 (`KC_SUITE=trixie`, kernel 6.12 with the `tls` module), server and client on
//! the guest's own 127.0.0.1, so the server's sockets are that kernel's (the machines this
//! project is developed on have no `tls` module: there the server always takes rustls).
//! guest/ktls.sh runs three servers in turn: plaintext, TLS (`--tls-cert`, `?xprtsec=tls`)
//! with kernel TLS at both ends (server and `sluice cp`), and TLS with `SLUICE_KTLS=0` at both
//! ends (rustls), and a rustls server with a kernel-TLS client (whose kernel then receives the
//! server's session tickets, which the client must skip). Each gets one `sluice cp` up of a KT_MIB file and three `sluice cp` down,
//! timed, each compared by SHA-256.
//!
//! Checked here, from what the guest saved:
//! - every copy was intact (the guest's "KT PASS" per mode);
//! - the kTLS server: every TLS connection took kernel TLS (`sluice_tls_ktls_connections_total`
//!   equals `sluice_tls_connections_total`, and `sluice stats` says so), its log names the path
//!   ("connection upgraded to TLS (kernel TLS)"), READ data went by splice
//!   (`sluice_spliced_read_bytes_total` at least the three reads), and the kernel did the
//!   crypto: /proc/net/tls_stat's TlsTxSw and TlsRxSw (kernel software crypto sessions) grew
//!   by two per connection, the server's socket and the client's;
//! - the rustls server: no kTLS connection, no spliced byte, tls_stat unchanged, its log says
//!   "kernel TLS unavailable";
//! - the mixed run: copies intact, no kTLS connection at the server, one kernel TLS session
//!   per connection (the client's) in tls_stat;
//! - the plaintext server splices its READs too (so "spliced" means the same in both).
//!
//! The read times are printed, plaintext vs kernel TLS vs rustls (medians of three): relative
//! figures under TCG emulation, not checked (bench/results/tls-ktls-guest-2026-11-28.md holds
//! one such run).

mod common;

use common::{require_tools, run_peer_script, TempDir};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The file copied each way: 32 MiB keeps the guest's run near two minutes (TCG, generic
/// AES-GCM in both the client's rustls and the kernel) and is 32 READs of 1 MiB per copy.
const FILE_MIB: u64 = 32;
const READS: usize = 3;

#[test]
fn server_hands_tls_records_to_the_kernel_and_splices_reads() {
    require_tools(&["qemu-system-x86_64", "zstd", "objcopy"]);
    let work = TempDir::new("ktls-guest");
    let results = work.path().join("kclient-run");
    let pki = make_pki(&work.path().join("pki"));
    // The binary without its debug sections: a fifth of the size to page in over 9p.
    let bin = work.path().join("sluice");
    let st = std::process::Command::new("objcopy")
        .args(["--strip-debug", env!("CARGO_BIN_EXE_sluice")])
        .arg(&bin)
        .status()
        .unwrap();
    assert!(st.success(), "objcopy --strip-debug failed");
    // The guest's initramfs has libc and libm (tlshd's) but not libgcc_s, which Rust binaries
    // link: the host's goes along (the guest's glibc is newer than the host's).
    let lib = work.path().join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::copy(shared_object("libgcc_s.so.1"), lib.join("libgcc_s.so.1")).unwrap();

    let repo = common::repo_root();
    let guest_script = repo.join("tests/peers/guest/ktls.sh");
    let mut args: Vec<String> = vec![
        // kclient.sh's NFS port, MOUNT port and export: the guest mounts nothing here.
        "2049".into(),
        "2049".into(),
        "/".into(),
        guest_script.to_str().unwrap().into(),
    ];
    for f in [&bin, &pki, &lib] {
        args.extend(["--file".into(), f.to_str().unwrap().into()]);
    }
    for env in [
        format!("KT_MIB={FILE_MIB}"),
        format!("KT_READS={READS}"),
        "KT_PKI=/kc/pki".into(),
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
            ("KC_TIMEOUT", "600"),
        ],
        Duration::from_secs(1500),
    );
    let out = results.join("out");
    // KTLS_GUEST_KEEP=DIR keeps what the guest saved (for bench/results), pass or fail.
    if let Some(keep) = std::env::var_os("KTLS_GUEST_KEEP") {
        let st = std::process::Command::new("cp")
            .arg("-r")
            .arg(&out)
            .arg(&keep)
            .status();
        eprintln!("ktls guest: out/ copied to {keep:?}: {st:?}");
    }
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap_or_default();
    assert!(
        run.status.success() && !run.stdout.contains("KT FAIL"),
        "the guest's run failed: {}\n--- cp logs ---\n{}{}{}\n--- ktls serve log ---\n{}\n--- rustls serve log ---\n{}",
        run.describe(),
        read("plain-cp.log"),
        read("ktls-cp.log"),
        read("rustls-cp.log"),
        read("ktls-serve.log"),
        read("rustls-serve.log")
    );
    for mode in ["plain", "ktls", "rustls", "mixed"] {
        assert!(
            run.stdout.lines().any(|l| l == format!("KT PASS {mode}")),
            "no verdict for {mode}: {}",
            run.describe()
        );
    }

    // The client's `--stats` of its upload names the path its connections took.
    for (mode, says) in [
        ("plain", "tls: none (plaintext)"),
        ("ktls", "tls (kernel TLS): TLSv1_3 "),
        ("rustls", "tls (rustls, no kernel TLS): TLSv1_3 "),
        ("mixed", "tls (kernel TLS): TLSv1_3 "),
    ] {
        let log = read(&format!("{mode}-cp.log"));
        assert!(
            log.lines().any(|l| l.starts_with(says)),
            "{mode}: the client's --stats does not say {says:?}:\n{log}"
        );
    }

    let least_spliced = READS as u64 * (FILE_MIB << 20);
    // Plaintext: READs by splice.
    let plain = read("plain-metrics.txt");
    assert!(
        metric(&plain, "sluice_spliced_read_bytes_total") >= least_spliced,
        "the plaintext server did not splice its READs:\n{plain}"
    );

    // Kernel TLS: every TLS connection, READs by splice, the kernel's crypto counters.
    let k = read("ktls-metrics.txt");
    let (up, kernel) = (
        metric(&k, "sluice_tls_connections_total"),
        metric(&k, "sluice_tls_ktls_connections_total"),
    );
    assert!(up >= 4, "too few TLS connections ({up}):\n{k}");
    assert_eq!(kernel, up, "a connection stayed on rustls:\n{k}");
    assert!(
        metric(&k, "sluice_spliced_read_bytes_total") >= least_spliced,
        "READ data did not go by splice over kernel TLS:\n{k}"
    );
    let stats = read("ktls-stats.txt");
    assert!(
        stats.contains(&format!("({up} kernel TLS with READ by splice, 0 rustls)")),
        "sluice stats does not say kernel TLS:\n{stats}"
    );
    let log = read("ktls-serve.log");
    assert!(
        log.contains("connection upgraded to TLS (kernel TLS)"),
        "the server log does not name kernel TLS:\n{log}"
    );
    let grew = tls_stat_growth(
        &read("ktls-tls_stat-before.txt"),
        &read("ktls-tls_stat-after.txt"),
    );
    for counter in ["TlsTxSw", "TlsRxSw"] {
        assert!(
            grew.get(counter).copied().unwrap_or(0) >= 2 * up,
            "/proc/net/tls_stat {counter} grew by less than two per connection ({up}): {grew:?}"
        );
    }

    // rustls: no kernel TLS, no splice.
    let r = read("rustls-metrics.txt");
    assert!(metric(&r, "sluice_tls_connections_total") >= 4, "{r}");
    assert_eq!(metric(&r, "sluice_tls_ktls_connections_total"), 0, "{r}");
    assert_eq!(metric(&r, "sluice_spliced_read_bytes_total"), 0, "{r}");
    let rlog = read("rustls-serve.log");
    assert!(
        rlog.contains("kernel TLS unavailable: switched off (SLUICE_KTLS=0)"),
        "{rlog}"
    );
    let grew = tls_stat_growth(
        &read("rustls-tls_stat-before.txt"),
        &read("rustls-tls_stat-after.txt"),
    );
    assert!(
        grew.values().all(|&v| v == 0),
        "kernel TLS counters moved under rustls: {grew:?}"
    );

    // Mixed: the client's kernel does its side, the server's connections stay on rustls.
    let m = read("mixed-metrics.txt");
    let up = metric(&m, "sluice_tls_connections_total");
    assert!(up >= 4, "{m}");
    assert_eq!(metric(&m, "sluice_tls_ktls_connections_total"), 0, "{m}");
    let grew = tls_stat_growth(
        &read("mixed-tls_stat-before.txt"),
        &read("mixed-tls_stat-after.txt"),
    );
    for counter in ["TlsTxSw", "TlsRxSw"] {
        assert_eq!(
            grew.get(counter).copied().unwrap_or(0),
            up,
            "/proc/net/tls_stat {counter}: one client session per connection: {grew:?}"
        );
    }

    // The relative figures (emulated: printed, not checked).
    let times = read("times.txt");
    let mib = FILE_MIB as f64;
    let mut line = String::new();
    for mode in ["plain", "ktls", "rustls", "mixed"] {
        let mut downs: Vec<f64> = times
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                (w.next()? == mode && w.next()? == "down").then_some(())?;
                w.next()?.parse().ok()
            })
            .collect();
        downs.sort_by(|a, b| a.total_cmp(b));
        let Some(median) = downs.get(downs.len() / 2) else {
            continue;
        };
        line += &format!(
            "  {mode}: read median {median:.2} s = {:.1} MiB/s (of {downs:?})\n",
            mib / median
        );
    }
    eprintln!(
        "ktls guest (TCG-emulated, relative only), {FILE_MIB} MiB per copy, run {:.1?}:\n{line}{times}",
        run.elapsed
    );
}

/// Where the sluice binary's loader finds `name` on this machine (from ldd).
fn shared_object(name: &str) -> PathBuf {
    let out = std::process::Command::new("ldd")
        .arg(env!("CARGO_BIN_EXE_sluice"))
        .output()
        .expect("run ldd");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            let (so, path) = l.trim().split_once(" => ")?;
            let path = path.split_whitespace().next()?;
            (so == name).then(|| PathBuf::from(path))
        })
        .unwrap_or_else(|| panic!("ldd names no {name}:\n{text}"))
}

/// How much each counter of /proc/net/tls_stat grew between two readings.
fn tls_stat_growth(before: &str, after: &str) -> BTreeMap<String, u64> {
    let parse = |s: &str| -> BTreeMap<String, u64> {
        s.lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                Some((w.next()?.to_string(), w.next()?.parse().ok()?))
            })
            .collect()
    };
    let (b, a) = (parse(before), parse(after));
    assert!(!a.is_empty(), "no /proc/net/tls_stat from the guest");
    a.into_iter()
        .map(|(k, v)| {
            let was = b.get(&k).copied().unwrap_or(0);
            (k, v.saturating_sub(was))
        })
        .collect()
}

/// The value of a metric in Prometheus text (0 when absent).
fn metric(prom: &str, name: &str) -> u64 {
    prom.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0)
}

/// A CA (ca.pem) and a server certificate for 127.0.0.1 from it (server.pem/.key).
fn make_pki(dir: &Path) -> PathBuf {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    std::fs::create_dir_all(dir).unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "sluice test CA");
    let ca_cert = p.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca_cert, &ca_key)
        .unwrap();
    std::fs::write(dir.join("server.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
    dir.to_path_buf()
}
