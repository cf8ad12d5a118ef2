//! The per-export transport security policy (`xprtsec=`, exports(5)'s option) end to end: one
//! server with RPC-with-TLS and a client CA, and an exports file with a `xprtsec=tls` export, a
//! `xprtsec=mtls` export and one with the default (anything); the client commands in process.
//!
//! - `tls`: a plaintext client is refused over NFSv3 (its mount fails: MNT is answered, as
//!   Linux clients send it in plaintext, and the first NFS call gets NFS3ERR_ACCES) and over
//!   NFSv4.1 (LOOKUP into the export: NFS4ERR_WRONGSEC), each error saying to add
//!   `?xprtsec=tls`; a TLS client without a certificate gets in.
//! - `mtls`: a TLS client without a certificate is refused (v3 at MNT, which came over TLS;
//!   v4.1 with WRONGSEC) and told to present one, a certificate from another CA fails the
//!   handshake, the CA's client certificate gets in.
//! - the default export admits all three.
//! - `--xprtsec LIST` on the command line for the one-directory export, and the start-up
//!   refusal of a TLS-only export on a server without `--tls-cert`.
mod common;

use clap::Parser;
use common::pki::Pki;
use common::{nfs_url_version, Sluice, TempDir};
use sluice_cli::cmd::{run_with_output, ClientCmd};
use std::path::{Path, PathBuf};

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

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// How a test client connects: plaintext, TLS without a certificate, TLS with the CA's client
/// certificate, TLS with another CA's.
#[derive(Debug, Clone, Copy)]
enum As {
    Plain,
    Tls,
    Mtls,
    Stranger,
}

/// `sluice cat` of `path` on the server at `port` over NFS `version`, connected `how`.
async fn cat(pki: &Pki, port: u16, path: &Path, version: &str, how: As) -> Result<Vec<u8>, String> {
    let base = nfs_url_version(port, path, version);
    let (query, files): (&str, Option<(&str, &str)>) = match how {
        As::Plain => ("", None),
        As::Tls => ("&xprtsec=tls", None),
        As::Mtls => ("&xprtsec=mtls", Some(("client.pem", "client.key"))),
        As::Stranger => ("&xprtsec=mtls", Some(("stranger.pem", "stranger.key"))),
    };
    let url = format!("{base}{query}");
    let ca = pki.p("ca.pem");
    let mut args: Vec<String> = vec!["cat".into(), "--soft".into(), "1".into()];
    if !matches!(how, As::Plain) {
        args.extend(["--tls-ca".into(), ca]);
    }
    if let Some((cert, key)) = files {
        args.extend([
            "--tls-cert".into(),
            pki.p(cert),
            "--tls-key".into(),
            pki.p(key),
        ]);
    }
    args.push(url);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    sluice(&args).await
}

/// The three exports under `dirs`, each holding `f.txt`, and the exports file naming them.
struct Exports {
    tls: PathBuf,
    mtls: PathBuf,
    open: PathBuf,
    file: PathBuf,
}

fn exports(dirs: &TempDir) -> Exports {
    let mk = |name: &str| {
        let p = dirs.path().join(name);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("f.txt"), format!("{name}\n")).unwrap();
        p.canonicalize().unwrap()
    };
    let (tls, mtls, open) = (mk("tls"), mk("mtls"), mk("open"));
    let opts = "rw,insecure,no_root_squash";
    let text = format!(
        "{} *({opts},xprtsec=tls)\n{} *({opts},xprtsec=mtls)\n{} *({opts})\n",
        tls.display(),
        mtls.display(),
        open.display()
    );
    let file = dirs.path().join("exports");
    std::fs::write(&file, text).unwrap();
    Exports {
        tls,
        mtls,
        open,
        file,
    }
}

fn start(dirs: &TempDir, pki: &Pki, e: &Exports) -> Sluice {
    let state = dirs.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let flags = pki.serve_flags(true);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Sluice::start_exports(&e.file, &state, &flags, &dirs.path().join("server.log"))
}

#[test]
fn a_tls_only_export_refuses_plaintext_over_v3_and_v4_1_and_admits_tls() {
    let (dirs, pki) = (TempDir::new("sluice-xprtsec-tls"), Pki::new());
    let e = exports(&dirs);
    let s = start(&dirs, &pki, &e);
    let f = e.tls.join("f.txt");
    runtime().block_on(async {
        let err = cat(&pki, s.port, &f, "3", As::Plain).await.unwrap_err();
        assert!(err.contains("NFS3ERR_ACCES"), "{err}");
        assert!(err.contains("?xprtsec=tls"), "{err}");
        let err = cat(&pki, s.port, &f, "4.1", As::Plain).await.unwrap_err();
        assert!(err.contains("NFS4ERR_WRONGSEC"), "{err}");
        assert!(err.contains("?xprtsec=tls"), "{err}");
        // No version in the URL: whichever the client settles on, it says what to add.
        let any = format!(
            "nfs://127.0.0.1{}?nfsport={p}&mountport={p}",
            f.display(),
            p = s.port
        );
        let err = sluice(&["cat", "--soft", "1", &any]).await.unwrap_err();
        assert!(err.contains("?xprtsec=tls"), "{err}");
        for version in ["3", "4.1"] {
            let out = cat(&pki, s.port, &f, version, As::Tls).await;
            assert_eq!(out.as_deref(), Ok(&b"tls\n"[..]), "v{version}");
            // `tls` is TLS without a verified certificate, as in knfsd: a client with one
            // is another mode, which this export does not list.
            let err = cat(&pki, s.port, &f, version, As::Mtls).await.unwrap_err();
            assert!(
                err.contains("ACCES") || err.contains("WRONGSEC"),
                "v{version}: {err}"
            );
        }
    });
}

#[test]
fn an_mtls_export_wants_a_certificate_from_the_ca() {
    let (dirs, pki) = (TempDir::new("sluice-xprtsec-mtls"), Pki::new());
    let e = exports(&dirs);
    let s = start(&dirs, &pki, &e);
    let f = e.mtls.join("f.txt");
    runtime().block_on(async {
        for version in ["3", "4.1"] {
            let err = cat(&pki, s.port, &f, version, As::Tls).await.unwrap_err();
            assert!(err.contains("?xprtsec=mtls"), "v{version}: {err}");
            // A certificate from another CA fails the handshake itself (RFC 9289 §4.2).
            assert!(cat(&pki, s.port, &f, version, As::Stranger).await.is_err());
            let out = cat(&pki, s.port, &f, version, As::Mtls).await;
            assert_eq!(out.as_deref(), Ok(&b"mtls\n"[..]), "v{version}");
            // Plaintext: refused as for the `tls` export.
            assert!(cat(&pki, s.port, &f, version, As::Plain).await.is_err());
        }
        // v3 over TLS without a certificate is refused at MNT already: it came over TLS.
        let err = cat(&pki, s.port, &f, "3", As::Tls).await.unwrap_err();
        assert!(err.contains("MNT3ERR_ACCES"), "{err}");
    });
}

#[test]
fn the_default_export_admits_every_mode() {
    let (dirs, pki) = (TempDir::new("sluice-xprtsec-open"), Pki::new());
    let e = exports(&dirs);
    let s = start(&dirs, &pki, &e);
    let f = e.open.join("f.txt");
    runtime().block_on(async {
        for version in ["3", "4.1"] {
            for how in [As::Plain, As::Tls, As::Mtls] {
                let out = cat(&pki, s.port, &f, version, how).await;
                assert_eq!(out.as_deref(), Ok(&b"open\n"[..]), "v{version} {how:?}");
            }
        }
    });
}

#[test]
fn xprtsec_on_the_command_line_and_a_tls_only_export_without_tls_refused_at_start() {
    let (dirs, pki) = (TempDir::new("sluice-xprtsec-flag"), Pki::new());
    let export = dirs.path().join("export");
    let state = dirs.path().join("state");
    std::fs::create_dir_all(&export).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(export.join("f.txt"), b"flag\n").unwrap();
    let mut flags = pki.serve_flags(false);
    flags.extend([
        "--xprtsec".into(),
        "tls:mtls".into(),
        "--no-root-squash".into(),
    ]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let s = Sluice::start(&export, &state, &flags, &dirs.path().join("server.log"));
    let f = s.export.join("f.txt");
    runtime().block_on(async {
        for version in ["3", "4.1"] {
            let err = cat(&pki, s.port, &f, version, As::Plain).await.unwrap_err();
            assert!(err.contains("?xprtsec=tls"), "v{version}: {err}");
            let out = cat(&pki, s.port, &f, version, As::Tls).await;
            assert_eq!(out.as_deref(), Ok(&b"flag\n"[..]), "v{version}");
        }
    });
    drop(s);
    // Without --tls-cert no client could reach a TLS-only export: `serve` says so and exits.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "serve",
            "--xprtsec",
            "tls",
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
        ])
        .arg(&state)
        .arg(&export)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("xprtsec=tls") && err.contains("--tls-cert"),
        "{err}"
    );
}
