//! RPC-with-TLS (RFC 9289) end to end, with certificates made here (rcgen): `sluice serve
//! --tls-cert --tls-key [--tls-client-ca]` and the client commands with `?xprtsec=tls|mtls`.
//!
//! - `cp` both ways over NFSv3 and NFSv4.1, checked by SHA-256, with two connections (both
//!   upgraded) and, over 4.1, the back channel on the same TLS connection;
//! - a plaintext client of the same server and port still served;
//! - a TLS client of a server without certificates told the server does not offer TLS;
//! - mtls: a client certificate from another CA fails the handshake;
//! - a hostile client on the server's port: garbage instead of a ClientHello, and a second
//!   AUTH_TLS probe inside TLS (refused with AUTH_BADCRED, the connection still serving).
mod servers;
// The certificates every TLS test uses (its `TempDir` is this binary's, from `servers`).
#[path = "common/pki.rs"]
mod pki;

use clap::Parser;
use pki::Pki;
use servers::*;
use sluice_cli::cmd::{run_with_output, ClientCmd};
use std::path::Path;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: ClientCmd,
}

async fn sluice(args: &[&str]) -> Result<Vec<u8>, String> {
    let mut argv = vec!["sluice"];
    argv.extend_from_slice(args);
    let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("bad command {argv:?}: {e}"));
    let mut out: Vec<u8> = Vec::new();
    run_with_output(cli.cmd, &mut out).await.map(|()| out)
}

fn start(pki: &Pki, client_ca: bool) -> SluiceServer {
    let flags = pki.serve_flags(client_ca);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    SluiceServer::start_with(&SluiceServer::binary(), &flags, true)
}

/// `s`'s URL of `rel` with these query parameters.
fn url(s: &SluiceServer, rel: &str, query: &str) -> String {
    format!("{}?{query}", s.url(rel))
}

async fn round_trip(s: &SluiceServer, pki: &Pki, query: &str, tag: &str) {
    let local = TempDir::new("sluice-tls-local");
    let src = local.path().join("src.bin");
    make_file(&src, (3 << 20) + 7, 0x5eed ^ tag.len() as u64);
    let ca = pki.p("ca.pem");
    let remote = url(s, &format!("/{tag}.bin"), query);
    let src_s = src.display().to_string();
    sluice(&["cp", "--tls-ca", &ca, "--nconnect", "2", &src_s, &remote])
        .await
        .unwrap_or_else(|e| panic!("cp up ({query}): {e}"));
    assert_eq!(
        sha256_file(&s.export_dir().join(format!("{tag}.bin"))),
        sha256_file(&src)
    );
    let back = local.path().join("back.bin");
    let back_s = back.display().to_string();
    sluice(&["cp", "--tls-ca", &ca, "--nconnect", "2", &remote, &back_s])
        .await
        .unwrap_or_else(|e| panic!("cp down ({query}): {e}"));
    assert_eq!(sha256_file(&back), sha256_file(&src));
}

#[test]
fn copies_both_ways_over_tls_with_v3_and_v4_1() {
    let pki = Pki::new();
    let s = start(&pki, false);
    runtime().block_on(async {
        round_trip(&s, &pki, "version=3&xprtsec=tls", "v3").await;
        round_trip(&s, &pki, "version=4.1&xprtsec=tls", "v41").await;
        // The same port still serves a plaintext client.
        let out = sluice(&["cat", &url(&s, "/v3.bin", "version=3")])
            .await
            .unwrap();
        assert_eq!(out.len(), (3 << 20) + 7);
    });
}

#[test]
fn mtls_presents_the_client_certificate_and_a_stranger_is_refused() {
    let pki = Pki::new();
    let s = start(&pki, true);
    std::fs::write(s.export_dir().join("m.txt"), b"mutual\n").unwrap();
    runtime().block_on(async {
        let ca = pki.p("ca.pem");
        let (cert, key) = (pki.p("client.pem"), pki.p("client.key"));
        for version in ["3", "4.1"] {
            let u = url(&s, "/m.txt", &format!("version={version}&xprtsec=mtls"));
            let out = sluice(&[
                "cat",
                "--tls-ca",
                &ca,
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
                "--soft",
                "1",
                &u,
            ])
            .await
            .unwrap();
            assert_eq!(out, b"mutual\n");
            let (cert, key) = (pki.p("stranger.pem"), pki.p("stranger.key"));
            let e = sluice(&[
                "cat",
                "--tls-ca",
                &ca,
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
                "--soft",
                "1",
                "--timeo",
                "3",
                &u,
            ])
            .await
            .unwrap_err();
            assert!(!e.is_empty());
        }
        // mtls without the certificate files is an error before any connection.
        let u = url(&s, "/m.txt", "version=3&xprtsec=mtls");
        let e = sluice(&["cat", "--tls-ca", &ca, &u]).await.unwrap_err();
        assert!(e.contains("client certificate"), "{e}");
    });
}

#[test]
fn a_server_without_tls_is_reported_as_not_offering_it() {
    let pki = Pki::new();
    let s = SluiceServer::start(&SluiceServer::binary());
    std::fs::write(s.export_dir().join("p.txt"), b"plain\n").unwrap();
    runtime().block_on(async {
        let ca = pki.p("ca.pem");
        let e = sluice(&[
            "cat",
            "--tls-ca",
            &ca,
            &url(&s, "/p.txt", "version=3&xprtsec=tls"),
        ])
        .await
        .unwrap_err();
        assert!(e.contains("does not offer RPC-with-TLS"), "{e}");
        let e = sluice(&["cat", &url(&s, "/p.txt", "version=3&xprtsec=tls")])
            .await
            .unwrap_err();
        assert!(e.contains("--tls-ca"), "{e}");
    });
}

/// Garbage after the probe costs that connection; a second probe inside TLS is an ordinary
/// call with an unknown flavor (AUTH_BADCRED) and the connection keeps serving.
#[test]
fn hostile_clients_cost_their_own_connection_only() {
    use sluice_rpc::record::{frame, MAX_FRAGMENT_BYTES};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let pki = Pki::new();
    let s = start(&pki, false);
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", s.port()).parse().unwrap();
    runtime().block_on(async {
        // Garbage instead of a ClientHello: the server closes the connection.
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let probe = frame(
            sluice_rpc::tls::probe_call(1, 100003, 3),
            MAX_FRAGMENT_BYTES,
        )
        .concat();
        c.write_all(&probe).await.unwrap();
        let mut reply = [0u8; 36];
        c.read_exact(&mut reply).await.unwrap();
        assert_eq!(&reply[24..32], b"STARTTLS");
        c.write_all(&[0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5])
            .await
            .unwrap();
        let mut rest = Vec::new();
        let closed =
            tokio::time::timeout(std::time::Duration::from_secs(10), c.read_to_end(&mut rest))
                .await;
        assert!(
            closed.is_ok(),
            "the server closes a connection whose handshake failed"
        );
        // A second probe inside TLS.
        let client = sluice_tcp::tls::ClientTls::load(Path::new(&pki.p("ca.pem")), None).unwrap();
        let c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut t = sluice_tcp::tls::connect_upgrade(
            c,
            &client,
            "127.0.0.1",
            100003,
            3,
            std::time::Duration::from_secs(10),
        )
        .await
        .unwrap();
        t.write_all(&probe).await.unwrap();
        t.flush().await.unwrap();
        let mut denied = [0u8; 24];
        t.read_exact(&mut denied).await.unwrap();
        let words: Vec<u32> = denied
            .chunks(4)
            .map(|w| u32::from_be_bytes(w.try_into().unwrap()))
            .collect();
        // Mark, xid, REPLY, MSG_DENIED, AUTH_ERROR, AUTH_BADCRED.
        assert_eq!(words, [0x8000_0014, 1, 1, 1, 1, 1]);
        // ... and the connection still answers an ordinary NULL (AUTH_NONE).
        let null: Vec<u8> = [0x8000_0028u32, 2, 0, 2, 100003, 3, 0, 0, 0, 0, 0]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect();
        t.write_all(&null).await.unwrap();
        t.flush().await.unwrap();
        let mut ok = [0u8; 28];
        t.read_exact(&mut ok).await.unwrap();
        let words: Vec<u32> = ok
            .chunks(4)
            .map(|w| u32::from_be_bytes(w.try_into().unwrap()))
            .collect();
        // Mark, xid, REPLY, MSG_ACCEPTED, verifier AUTH_NONE (empty), SUCCESS.
        assert_eq!(words, [0x8000_0018, 2, 1, 0, 0, 0, 0]);
    });
    // The server is still there for everyone else.
    runtime().block_on(async {
        let out = sluice(&["ls", &url(&s, "/", "version=3")]).await;
        assert!(out.is_ok(), "{out:?}");
    });
}
