//! RPC-with-TLS (RFC 9289) seen from outside the `sluice` binaries: on the wire, in the
//! client's `--stats`, and against clients that never finish their handshake.
//!
//! - **The wire** (`tshark_sees_the_probe_the_handshake_and_no_nfs`): a `sluice cp` over
//!   NFSv3 and NFSv4.1 with `xprtsec=tls` is captured on loopback and dissected twice, the
//!   server's port decoded once as ONC RPC and once as TLS. RPC must find, on every TCP stream,
//!   exactly the probe (a NULL call with credential flavor 7, AUTH_TLS) and its reply (verifier
//!   body `STARTTLS` in plaintext) and nothing else; TLS must find on that same stream, after
//!   the reply, a ClientHello and a TLS 1.3 ServerHello, then application data records carrying
//!   at least the file's bytes. The same analysis of a plaintext copy (the control) finds NFS
//!   procedures and no handshake, so the test can tell the two apart. The URLs name `nfsport`
//!   and `mountport`, so no portmapper query precedes the probes: every RPC message that tshark
//!   can decode is accounted for. (`tshark -Y nfs` alone would not do: tshark files the NULL
//!   reply under NFS too. What counts is that no procedure but NULL decodes.)
//! - **Statistics**: `sluice cat --stats` says whether the connections used TLS, with the
//!   version and cipher suite, as the server's `sluice stats` does.
//! - **Hostile clients** against the server binary with `--tls-handshake-timeout 1`: one that
//!   goes silent after STARTTLS, one that sends half a ClientHello, and one that sends garbage
//!   in its place. A TLS and a plaintext client are served while the first two hang; those two
//!   are closed no earlier than the bound; all three are counted
//!   (`sluice_tls_handshake_failures_total`) and logged with the peer's address and the reason.
//!   (A second probe inside TLS is in `tls.rs`.)

mod common;

use common::pki::Pki;
use common::{free_port, metric, require_tools, Capture, Sluice, SluiceProc, TempDir};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// `sluice serve` of `work/export` with TLS and these extra flags, logging to
/// `work/server.log`.
fn serve(work: &TempDir, pki: &Pki, extra: &[&str]) -> Sluice {
    let export = work.path().join("export");
    let state = work.path().join("state");
    std::fs::create_dir_all(&export).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let (cert, key) = (pki.p("server.pem"), pki.p("server.key"));
    let mut flags = vec!["--no-root-squash", "--tls-cert", &cert, "--tls-key", &key];
    flags.extend_from_slice(extra);
    Sluice::start(&export, &state, &flags, &work.path().join("server.log"))
}

/// The URL of `name` in the export over NFS `version`, with `query` added; `nfsport` and
/// `mountport` named so that the client asks no portmapper.
fn url(s: &Sluice, name: &str, version: &str, query: &str) -> String {
    format!(
        "nfs://127.0.0.1{}/{name}?version={version}&nfsport={p}&mountport={p}{query}",
        s.export.display(),
        p = s.port
    )
}

/// Runs `sluice args...` to the end; its stderr, or a panic with it on failure.
fn sluice_ok(args: &[&str]) -> String {
    let mut p = SluiceProc::spawn(args, &[]);
    let st = p.wait_timeout(Duration::from_secs(120));
    assert!(st.success(), "sluice {args:?}: {st}\n{}", p.stderr_text());
    p.stderr_text()
}

// --- the wire --------------------------------------------------------------------------------

/// The probe's reply verifier body, "STARTTLS", as tshark prints opaque data.
const STARTTLS_HEX: &str = "5354415254544c53";
/// RFC 9289 §4.1: the credential flavor of the probe.
const AUTH_TLS: u32 = 7;
/// RFC 8446: the `supported_versions` value of TLS 1.3.
const TLS_1_3: &str = "0x0304";

#[test]
fn tshark_sees_the_probe_the_handshake_and_no_nfs() {
    require_tools(&["tshark", "dumpcap"]);
    let work = TempDir::new("tls-wire");
    let pki = Pki::new();
    let s = serve(&work, &pki, &[]);
    let size: u64 = (3 << 20) + 7;
    std::fs::write(s.export.join("f.bin"), common::pattern(7, size as usize)).unwrap();
    let ca = pki.p("ca.pem");
    for version in ["3", "4.1"] {
        for tls in [true, false] {
            let tag = format!("v{version}-{}", if tls { "tls" } else { "plain" });
            let pcap = work.path().join(format!("{tag}.pcapng"));
            let back = work.path().join(format!("{tag}.bin"));
            let query = if tls { "&xprtsec=tls" } else { "" };
            let mut cap = Capture::start(s.port, &pcap);
            sluice_ok(&[
                "cp",
                "--tls-ca",
                &ca,
                "--nconnect",
                "2",
                &url(&s, "f.bin", version, query),
                back.to_str().unwrap(),
            ]);
            cap.stop();
            assert_eq!(common::file_len(&back), size, "{tag}: copied");
            let rpc = rpc_frames(&pcap, s.port);
            let tls_view = tls_streams(&pcap, s.port);
            let what = format!("{tag}: RPC frames {rpc:#?}\nTLS streams {tls_view:#?}");
            if tls {
                check_tls_session(&rpc, &tls_view, size, &what);
            } else {
                // The control: the same analysis sees the NFS calls of a plaintext copy.
                assert!(
                    rpc.iter()
                        .any(|f| f.program.contains(&100003) && f.procedure.iter().any(|&p| p != 0)),
                    "{what}"
                );
                assert!(
                    tls_view.values().all(|t| t.client_hello.is_none()),
                    "{what}"
                );
            }
        }
    }
}

/// Every decodable RPC message is a probe or its reply, one pair per TCP stream; each of
/// those streams then carries a TLS 1.3 handshake and the data.
fn check_tls_session(rpc: &[RpcFrame], tls: &BTreeMap<u64, TlsStream>, size: u64, what: &str) {
    let mut pairs: BTreeMap<u64, (Option<u64>, Option<u64>)> = BTreeMap::new();
    for f in rpc {
        assert_eq!(f.msgtyp.len(), 1, "one RPC message per frame: {what}");
        assert!(
            f.program.iter().all(|&p| p == 100003 || p == 100005),
            "NFS or MOUNT only: {what}"
        );
        assert_eq!(f.procedure, [0], "nothing but NULL is decodable: {what}");
        let pair = pairs.entry(f.stream).or_default();
        if f.msgtyp == [0] {
            // Credential AUTH_TLS, verifier AUTH_NONE.
            assert_eq!(f.flavors, [AUTH_TLS, 0], "the probe's flavors: {what}");
            assert!(
                pair.0.replace(f.frame).is_none(),
                "one probe per stream: {what}"
            );
        } else {
            assert_eq!(f.opaque, [STARTTLS_HEX], "the reply says STARTTLS: {what}");
            assert!(
                pair.1.replace(f.frame).is_none(),
                "one reply per stream: {what}"
            );
        }
    }
    assert!(!pairs.is_empty(), "no probe on the wire: {what}");
    let mut app_bytes = 0;
    for (stream, (call, reply)) in &pairs {
        let (Some(call), Some(reply)) = (call, reply) else {
            panic!("stream {stream}: a probe without its reply: {what}");
        };
        assert!(call < reply, "{what}");
        let t = tls
            .get(stream)
            .unwrap_or_else(|| panic!("stream {stream}: no TLS: {what}"));
        let hello = t.client_hello.expect("a ClientHello");
        let server_hello = t.server_hello.expect("a ServerHello");
        assert!(
            *reply < hello && hello < server_hello,
            "stream {stream}: {what}"
        );
        assert!(
            t.server_versions.iter().any(|v| v == TLS_1_3),
            "stream {stream}: TLS 1.3: {what}"
        );
        assert!(
            t.app_records > 0,
            "stream {stream}: application data: {what}"
        );
        app_bytes += t.app_bytes;
    }
    assert!(app_bytes >= size, "the file went inside TLS: {what}");
    // Every TCP stream on the port began with a probe: none went around TLS.
    assert!(tls.keys().all(|s| pairs.contains_key(s)), "{what}");
}

/// One frame in which tshark decoded RPC (the port forced to RPC), its fields in order.
#[derive(Debug)]
struct RpcFrame {
    frame: u64,
    stream: u64,
    msgtyp: Vec<u32>,
    program: Vec<u32>,
    procedure: Vec<u32>,
    /// Credential and verifier flavors of calls, the verifier's of replies.
    flavors: Vec<u32>,
    /// Opaque bodies (hex) tshark showed: the reply verifier's.
    opaque: Vec<String>,
}

/// What tshark saw of TLS on one TCP stream (the port forced to TLS).
#[derive(Debug, Default)]
struct TlsStream {
    client_hello: Option<u64>,
    server_hello: Option<u64>,
    /// `supported_versions` in the ServerHello (TLS 1.3: "0x0304").
    server_versions: Vec<String>,
    /// Application data records (TLS 1.3 encrypted records), and their bytes.
    app_records: u64,
    app_bytes: u64,
}

const TSHARK_OPTS: &[&str] = &[
    "-n",
    "-o",
    "tcp.desegment_tcp_streams:TRUE",
    "-o",
    "tcp.reassemble_out_of_order:TRUE",
];

/// `tshark -r pcap` with the port decoded as `proto`, display filter and fields: one line per
/// frame, fields separated by `|`, repeated values by `,`.
fn tshark(pcap: &Path, port: u16, proto: &str, filter: &str, fields: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(pcap).args(TSHARK_OPTS);
    cmd.args(["-d", &format!("tcp.port=={port},{proto}"), "-Y", filter]);
    cmd.args(["-T", "fields", "-E", "separator=|", "-E", "occurrence=a"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(out.status.success(), "tshark: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('|').map(str::to_string).collect())
        .collect()
}

fn list<T: std::str::FromStr>(s: &str) -> Vec<T> {
    s.split(',').filter_map(|x| x.parse().ok()).collect()
}

fn rpc_frames(pcap: &Path, port: u16) -> Vec<RpcFrame> {
    let fields = [
        "frame.number",
        "tcp.stream",
        "rpc.msgtyp",
        "rpc.program",
        "rpc.procedure",
        "rpc.auth.flavor",
        "rpc.opaque_data",
    ];
    tshark(pcap, port, "rpc", "rpc.msgtyp", &fields)
        .into_iter()
        .map(|f| RpcFrame {
            frame: f[0].parse().unwrap(),
            stream: f[1].parse().unwrap(),
            msgtyp: list(&f[2]),
            program: list(&f[3]),
            procedure: list(&f[4]),
            flavors: list(&f[5]),
            opaque: list(&f[6]),
        })
        .collect()
}

fn tls_streams(pcap: &Path, port: u16) -> BTreeMap<u64, TlsStream> {
    let fields = [
        "frame.number",
        "tcp.stream",
        "tls.handshake.type",
        "tls.handshake.extensions.supported_version",
        "tls.record.content_type",
        "tls.record.opaque_type",
        "tls.record.length",
    ];
    let mut streams: BTreeMap<u64, TlsStream> = BTreeMap::new();
    for f in tshark(pcap, port, "tls", "tcp.len > 0", &fields) {
        let frame: u64 = f[0].parse().unwrap();
        let t = streams.entry(f[1].parse().unwrap()).or_default();
        let types: Vec<u32> = list(&f[2]);
        if types.contains(&1) {
            t.client_hello.get_or_insert(frame);
        }
        if types.contains(&2) {
            t.server_hello.get_or_insert(frame);
            t.server_versions.extend(list::<String>(&f[3]));
        }
        // TLS 1.3 protects every record after the ServerHello as "opaque type" application
        // data (23); a frame of only such records counts whole (the handshake's first frames
        // mix them with plaintext records and carry no file data).
        let opaque: Vec<u32> = list(&f[5]);
        t.app_records += opaque.iter().filter(|&&k| k == 23).count() as u64;
        if f[4].is_empty() && opaque.iter().all(|&k| k == 23) {
            t.app_bytes += list::<u64>(&f[6]).iter().sum::<u64>();
        }
    }
    streams
}

// --- statistics ------------------------------------------------------------------------------

#[test]
fn client_stats_say_whether_the_connections_used_tls() {
    let work = TempDir::new("tls-stats");
    let pki = Pki::new();
    let s = serve(&work, &pki, &[]);
    std::fs::write(s.export.join("s.txt"), b"stats\n").unwrap();
    let ca = pki.p("ca.pem");
    for version in ["3", "4.1"] {
        let u = url(&s, "s.txt", version, "&xprtsec=tls");
        let err = sluice_ok(&["cat", "--stats", "--nconnect", "2", "--tls-ca", &ca, &u]);
        // The cipher suite is the first of the client's list the server has (sluice: AES-128-GCM).
        assert!(
            err.lines().any(
                |l| l.starts_with("tls (rustls, no kernel TLS): TLSv1_3 TLS13_")
                    && l.ends_with(", 2 connections upgraded")
            ),
            "v{version}: {err}"
        );
        let err = sluice_ok(&["cat", "--stats", &url(&s, "s.txt", version, "")]);
        assert!(
            err.lines().any(|l| l == "tls: none (plaintext)"),
            "v{version}: {err}"
        );
    }
}

/// `sluice bench` takes `xprtsec=tls` URLs and the TLS files, and its summary line says what
/// the connections negotiated (`bench/tls.sh` reads it).
#[test]
fn bench_runs_over_tls_and_says_so() {
    let work = TempDir::new("tls-bench");
    let pki = Pki::new();
    let s = serve(&work, &pki, &[]);
    let ca = pki.p("ca.pem");
    for version in ["3", "4.1"] {
        for (query, tls) in [("&xprtsec=tls", "tls=TLSv1_3:TLS13_"), ("", "tls=none")] {
            for workload in ["write", "read"] {
                let u = url(&s, "b.bin", version, query);
                let mut p = SluiceProc::spawn(
                    &[
                        "bench",
                        "--workload",
                        workload,
                        "--size",
                        "4M",
                        "--block",
                        "256k",
                        "--depth",
                        "4",
                        "--nconnect",
                        "2",
                        "--tls-ca",
                        &ca,
                        &u,
                    ],
                    &[],
                );
                let st = p.wait_timeout(Duration::from_secs(60));
                assert!(st.success(), "{}", p.stderr_text());
                let line = std::fs::read_to_string(&p.stdout).unwrap();
                assert!(line.contains(" bytes=4194304 "), "{line}");
                assert!(line.contains(" nconnect=2 "), "{line}");
                assert!(
                    line.contains(&format!(" {tls}")),
                    "v{version} {query}: {line}"
                );
            }
        }
    }
}

// --- hostile clients -------------------------------------------------------------------------

/// The bound the server is started with here (`--tls-handshake-timeout`).
const BOUND: Duration = Duration::from_secs(1);

#[test]
fn stalled_or_broken_handshakes_cost_their_own_connection_after_the_bound() {
    let work = TempDir::new("tls-hostile");
    let pki = Pki::new();
    let metrics = format!("127.0.0.1:{}", free_port());
    let s = serve(
        &work,
        &pki,
        &["--tls-handshake-timeout", "1", "--metrics", &metrics],
    );
    std::fs::write(s.export.join("h.txt"), b"still serving\n").unwrap();

    // Silent after STARTTLS; half a ClientHello (a record header announcing 512 bytes, and
    // 100 of them); garbage where the ClientHello belongs.
    let silent = Hostile::start(&s, &[]);
    let mut half = vec![
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ];
    half.resize(5 + 100, 0x42);
    let half = Hostile::start(&s, &half);
    let garbage = Hostile::start(&s, &[0x55; 300]);

    // Others are served meanwhile, over TLS and in plaintext.
    let ca = pki.p("ca.pem");
    for query in ["&xprtsec=tls", ""] {
        let mut p = SluiceProc::spawn(
            &["cat", "--tls-ca", &ca, &url(&s, "h.txt", "3", query)],
            &[],
        );
        let st = p.wait_timeout(Duration::from_secs(60));
        assert!(st.success(), "{}", p.stderr_text());
        assert_eq!(std::fs::read(&p.stdout).unwrap(), b"still serving\n");
    }

    // The stalled ones are closed, and not before the bound.
    for h in [&silent, &half] {
        let waited = h.wait_closed();
        assert!(waited >= BOUND, "closed after {waited:?}, before the bound");
    }
    garbage.wait_closed();

    // Counted, and logged with the peer and the reason.
    assert_eq!(metric(&metrics, "sluice_tls_handshake_failures_total"), 3);
    assert!(metric(&metrics, "sluice_tls_connections_total") >= 1);
    for (h, reason) in [
        (&silent, "reason=handshake not finished within 1s"),
        (&half, "reason=handshake not finished within 1s"),
        (&garbage, "reason=TLS handshake:"),
    ] {
        let peer = format!("addr={}", h.local);
        let logged = common::wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
            s.log_text().lines().any(|l| {
                l.contains("RPC-with-TLS handshake failed")
                    && l.contains(&peer)
                    && l.contains(reason)
            })
        });
        assert!(logged, "{peer} {reason}: log:\n{}", s.log_text());
    }
}

/// A connection that sent the probe, got STARTTLS, then sent `then` (maybe nothing).
struct Hostile {
    conn: TcpStream,
    local: std::net::SocketAddr,
    /// When the probe was sent: the server's bound runs from after that.
    probed: Instant,
}

impl Hostile {
    fn start(s: &Sluice, then: &[u8]) -> Hostile {
        use sluice_rpc::record::{frame, MAX_FRAGMENT_BYTES};
        let mut conn = TcpStream::connect(s.addr()).unwrap();
        let local = conn.local_addr().unwrap();
        let probe = frame(
            sluice_rpc::tls::probe_call(9, 100003, 3),
            MAX_FRAGMENT_BYTES,
        )
        .concat();
        let probed = Instant::now();
        conn.write_all(&probe).unwrap();
        let mut reply = [0u8; 36];
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        conn.read_exact(&mut reply).unwrap();
        assert_eq!(&reply[24..32], b"STARTTLS");
        conn.write_all(then).unwrap();
        Hostile {
            conn,
            local,
            probed,
        }
    }

    /// Waits (at most 30 s) for the server to close the connection; the time since the probe.
    fn wait_closed(&self) -> Duration {
        let mut buf = [0u8; 4096];
        let mut conn = &self.conn;
        loop {
            match conn.read(&mut buf) {
                Ok(0) => break,
                // The server may answer garbage with an alert before it closes.
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("{}: not closed: {e}", self.local),
            }
        }
        self.probed.elapsed()
    }
}
