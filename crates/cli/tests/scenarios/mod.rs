//! Scenarios run against every real server (ganesha, sluice): the library and the commands.
use crate::servers::*;
use clap::Parser;
use sluice_cli::cmd::{run_with_output, ClientCmd};
use sluice_client::{Client, ClientOptions, TrunkConfig};
use std::collections::HashSet;
use std::path::Path;
use std::time::Instant;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: ClientCmd,
}

/// Runs `sluice ARGS...` in-process; returns (result, stdout).
async fn sluice(args: &[&str]) -> (Result<(), String>, String) {
    let mut argv = vec!["sluice"];
    argv.extend_from_slice(args);
    let cli = Cli::try_parse_from(&argv)
        .unwrap_or_else(|e| panic!("bad test command line {argv:?}: {e}"));
    let mut out: Vec<u8> = Vec::new();
    let r = run_with_output(cli.cmd, &mut out).await;
    (r, String::from_utf8(out).unwrap())
}

async fn ok(args: &[&str]) -> String {
    let (r, out) = sluice(args).await;
    if let Err(e) = r {
        panic!("sluice {args:?} failed: {e}");
    }
    out
}

pub async fn all(s: &dyn Server) {
    let t0 = Instant::now();
    let step = |name: &str, t: Instant| eprintln!("[{}] {name}: ok in {:?}", s.name(), t.elapsed());
    let t = Instant::now();
    library_round_trip(s).await;
    step("library round trip", t);
    let t = Instant::now();
    copies_both_ways(s).await;
    step("cp 0 B / 1 B / 1 MiB+1 / 256 MiB both ways + NFS->NFS", t);
    let t = Instant::now();
    several_connections(s).await;
    step(
        "nconnect: 4 connections share the calls; cp --nconnect 2 both ways",
        t,
    );
    let t = Instant::now();
    recursive_tree(s).await;
    step("cp -r -p of 1,000 small files both ways", t);
    let t = Instant::now();
    big_directory(s).await;
    step("ls of 10,000 entries", t);
    let t = Instant::now();
    namespace_commands(s).await;
    step("mkdir -p / mv / rm -r / stat / cat", t);
    let t = Instant::now();
    error_messages(s).await;
    step("error messages", t);
    eprintln!("[{}] all scenarios passed in {:?}", s.name(), t0.elapsed());
}

async fn library_round_trip(s: &dyn Server) {
    let c = Client::connect(&s.url(""), ClientOptions::default())
        .await
        .unwrap();
    let data: Vec<u8> = (0..(1u32 << 20) + 1).map(|i| (i * 7 % 251) as u8).collect();
    let f = c.create_file("/lib.bin", 0o644).await.unwrap();
    let mut w = f.writer();
    w.write(&data).await.unwrap();
    assert_eq!(w.finish().await.unwrap(), data.len() as u64);
    assert_eq!(std::fs::read(s.export_dir().join("lib.bin")).unwrap(), data);
    let f = c.open("/lib.bin").await.unwrap();
    assert_eq!(f.size(), data.len() as u64);
    assert_eq!(f.read_all().await.unwrap(), data);
    // A few of the other procedures, typed.
    let root = c.root().clone();
    c.null().await.unwrap();
    assert!(c.fsstat(&root).await.unwrap().tbytes > 0);
    assert!(c.pathconf(&root).await.unwrap().name_max >= 255);
    c.access(&root, sluice_client::nfs3::ACCESS3_READ)
        .await
        .unwrap();
    c.symlink(&root, "lib.lnk", "lib.bin", Default::default())
        .await
        .unwrap();
    let (lnk, _) = c.lookup_path("/lib.lnk").await.unwrap();
    assert_eq!(&c.readlink(&lnk).await.unwrap().data[..], b"lib.bin");
    c.link(f.fh(), &root, "lib.hard").await.unwrap();
    assert_eq!(c.lookup_path("/lib.hard").await.unwrap().1.nlink, 2);
    for name in ["lib.lnk", "lib.hard", "lib.bin"] {
        c.remove(&root, name).await.unwrap();
    }
    let st = c.stats();
    assert_eq!(
        st.total_retransmits(),
        0,
        "no retransmission on a healthy loopback:\n{st}"
    );
    eprintln!("[{}] library stats:\n{st}", s.name());
}

/// `url` with one more query parameter.
fn with_param(url: &str, param: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{param}")
}

/// Automatic nconnect, with the policy told to grow at every look (the policy's own decisions
/// are tested in `sluice_engine::trunk`): a client that starts on one connection ends on three
/// while it reads, the new ones carry READs, the data is intact, and `--stats`' note says how
/// the count came about. A URL's `nconnect` fixes the count.
async fn automatic_connections(s: &dyn Server, data: &[u8]) {
    let eager = TrunkConfig {
        max: 3,
        window_bytes: 1 << 20,
        busy_fraction: 0.0,
        gain_min: 0.0,
    };
    let c = Client::connect(
        &s.url(""),
        ClientOptions {
            nconnect_auto: eager,
            ..ClientOptions::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        c.connection_stats().len(),
        1,
        "[{}] starts on one",
        s.name()
    );
    for _ in 0..40 {
        let f = c.open("/nconnect.bin").await.unwrap();
        assert_eq!(f.read_all().await.unwrap(), data, "[{}]", s.name());
        if c.connection_stats().len() == 3 {
            break;
        }
    }
    // Once more, so the last connection added carries its share.
    let f = c.open("/nconnect.bin").await.unwrap();
    assert_eq!(f.read_all().await.unwrap(), data, "[{}]", s.name());
    let per = c.connection_stats();
    assert_eq!(per.len(), 3, "[{}] grew to its ceiling: {per:?}", s.name());
    for (i, t) in per.iter().enumerate() {
        assert!(
            t.bytes_received > 1 << 20,
            "[{}] connection {} carried no READs: {per:?}",
            s.name(),
            i + 1
        );
    }
    let (n, note) = c.connections();
    assert_eq!(n, 3);
    let note = note.expect("an automatic count has a note");
    assert!(note.contains("3 of at most 3"), "{note}");
    // The URL's count is the count.
    let fixed = Client::connect(
        &with_param(&s.url(""), "nconnect=1"),
        ClientOptions {
            nconnect_auto: eager,
            ..ClientOptions::default()
        },
    )
    .await
    .unwrap();
    for _ in 0..4 {
        let f = fixed.open("/nconnect.bin").await.unwrap();
        assert_eq!(f.read_all().await.unwrap(), data);
    }
    assert_eq!(fixed.connections(), (1, None), "[{}]", s.name());
}

/// nconnect: the calls of one client spread over its connections, every one of them carries
/// replies, the data comes back intact, and bad counts are refused with a message.
async fn several_connections(s: &dyn Server) {
    let c = Client::connect(
        &s.url(""),
        ClientOptions {
            nconnect: 4,
            ..ClientOptions::default()
        },
    )
    .await
    .unwrap();
    let data: Vec<u8> = (0..(8u32 << 20) + 17)
        .map(|i| (i * 13 % 253) as u8)
        .collect();
    let f = c.create_file("/nconnect.bin", 0o644).await.unwrap();
    let mut w = f.writer();
    w.write(&data).await.unwrap();
    w.finish().await.unwrap();
    let f = c.open("/nconnect.bin").await.unwrap();
    assert_eq!(
        f.read_all().await.unwrap(),
        data,
        "read back over 4 connections"
    );
    assert_eq!(
        std::fs::read(s.export_dir().join("nconnect.bin")).unwrap(),
        data
    );
    let per = c.connection_stats();
    assert_eq!(per.len(), 4, "one transport per connection");
    for (i, t) in per.iter().enumerate() {
        assert!(
            t.table.calls_completed >= 3 && t.bytes_received > 0,
            "connection {i} carried no share of the calls: {per:?}"
        );
    }
    let total = c.transport_stats();
    assert_eq!(
        total.table.calls_completed,
        per.iter().map(|t| t.table.calls_completed).sum::<u64>()
    );
    automatic_connections(s, &data).await;
    // the URL parameter and the command flag
    let c2 = Client::connect(
        &with_param(&s.url(""), "nconnect=3"),
        ClientOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(c2.connection_stats().len(), 3);
    let local = TempDir::new("nconnect");
    let back = local.path().join("back.bin");
    ok(&[
        "cp",
        "-q",
        "--nconnect",
        "2",
        &s.url("/nconnect.bin"),
        back.to_str().unwrap(),
    ])
    .await;
    assert_eq!(std::fs::read(&back).unwrap(), data);
    ok(&[
        "cp",
        "-q",
        "--nconnect",
        "2",
        back.to_str().unwrap(),
        &s.url("/nconnect2.bin"),
    ])
    .await;
    assert_eq!(
        std::fs::read(s.export_dir().join("nconnect2.bin")).unwrap(),
        data
    );
    for bad in ["nconnect=0", "nconnect=17"] {
        let e = Client::connect(&with_param(&s.url(""), bad), ClientOptions::default())
            .await
            .err()
            .unwrap_or_else(|| panic!("{bad} was accepted"));
        assert!(
            e.to_string().contains("nconnect must be 1 to 16"),
            "{bad}: {e}"
        );
    }
    let e = Client::connect(
        &with_param(&s.url(""), "nconnect=2&proto=udp"),
        ClientOptions::default(),
    )
    .await
    .err()
    .expect("nconnect over UDP was accepted");
    assert!(e.to_string().contains("needs TCP"), "{e}");
    for f in ["nconnect.bin", "nconnect2.bin"] {
        std::fs::remove_file(s.export_dir().join(f)).unwrap();
    }
}

async fn copies_both_ways(s: &dyn Server) {
    let local = TempDir::new("cp");
    let exp = s.export_dir();
    for (i, len) in [0u64, 1, (1 << 20) + 1, 256 << 20].into_iter().enumerate() {
        let name = format!("f{len}");
        let src = local.path().join(&name);
        make_file(&src, len, 0x5eed + i as u64);
        let want = sha256_file(&src);
        let t = Instant::now();
        // local -> NFS
        ok(&[
            "cp",
            "-q",
            src.to_str().unwrap(),
            &s.url(&format!("/{name}")),
        ])
        .await;
        let up = t.elapsed();
        assert_eq!(
            sha256_file(&exp.join(&name)),
            want,
            "local->NFS {len} bytes"
        );
        // NFS -> local
        let back = local.path().join(format!("{name}.back"));
        let t = Instant::now();
        ok(&[
            "cp",
            "-q",
            &s.url(&format!("/{name}")),
            back.to_str().unwrap(),
        ])
        .await;
        let down = t.elapsed();
        assert_eq!(sha256_file(&back), want, "NFS->local {len} bytes");
        if len >= 1 << 20 {
            let mib = len as f64 / (1 << 20) as f64;
            eprintln!(
                "[{}] {len} B: up {:.0} MiB/s, down {:.0} MiB/s",
                s.name(),
                mib / up.as_secs_f64(),
                mib / down.as_secs_f64()
            );
        }
        // NFS -> NFS (into an existing directory: keeps the name)
        if len < 256 << 20 {
            std::fs::create_dir_all(exp.join("copies")).unwrap();
            ok(&["cp", "-q", &s.url(&format!("/{name}")), &s.url("/copies")]).await;
            assert_eq!(
                sha256_file(&exp.join("copies").join(&name)),
                want,
                "NFS->NFS {len}"
            );
        }
        let _ = std::fs::remove_file(exp.join(&name));
        let _ = std::fs::remove_file(&back);
        let _ = std::fs::remove_file(&src);
    }
    // Overwriting an existing, longer file truncates it.
    std::fs::write(exp.join("over"), vec![b'x'; 10_000]).unwrap();
    let small = local.path().join("small");
    std::fs::write(&small, b"short").unwrap();
    ok(&["cp", "-q", small.to_str().unwrap(), &s.url("/over")]).await;
    assert_eq!(std::fs::read(exp.join("over")).unwrap(), b"short");
    let _ = std::fs::remove_dir_all(exp.join("copies"));
    let _ = std::fs::remove_file(exp.join("over"));
}

async fn recursive_tree(s: &dyn Server) {
    let local = TempDir::new("tree");
    let src = local.path().join("tree");
    for d in 0..10 {
        let dir = src.join(format!("d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            let body = format!("file {d}/{f}\n").repeat(f % 7 + 1);
            std::fs::write(dir.join(format!("f{f:03}")), body).unwrap();
        }
    }
    std::os::unix::fs::symlink("d0/f000", src.join("link")).unwrap();
    std::fs::set_permissions(
        src.join("d3/f042"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    ok(&["cp", "-q", "-r", "-p", src.to_str().unwrap(), &s.url("/")]).await;
    let exp = s.export_dir();
    compare_trees(&src, &exp.join("tree"));
    let meta = std::fs::metadata(exp.join("tree/d3/f042")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );
    let src_mtime = std::fs::metadata(src.join("d3/f042"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(meta.modified().unwrap(), src_mtime, "-p keeps mtime");
    // And back, to a new name.
    let back = local.path().join("back");
    ok(&[
        "cp",
        "-q",
        "-r",
        "-p",
        &s.url("/tree"),
        back.to_str().unwrap(),
    ])
    .await;
    compare_trees(&src, &back);
    let _ = std::fs::remove_dir_all(exp.join("tree"));
}

fn compare_trees(a: &Path, b: &Path) {
    let mut n = 0;
    for e in std::fs::read_dir(a).unwrap() {
        let e = e.unwrap();
        let other = b.join(e.file_name());
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            compare_trees(&e.path(), &other);
        } else if ft.is_symlink() {
            assert_eq!(
                std::fs::read_link(e.path()).unwrap(),
                std::fs::read_link(&other).unwrap()
            );
        } else {
            assert_eq!(
                std::fs::read(e.path()).unwrap(),
                std::fs::read(&other).unwrap(),
                "{other:?}"
            );
        }
        n += 1;
    }
    assert_eq!(
        std::fs::read_dir(b).unwrap().count(),
        n,
        "{b:?} has extra entries"
    );
}

async fn big_directory(s: &dyn Server) {
    let dir = s.export_dir().join("big");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..10_000 {
        std::fs::File::create(dir.join(format!("entry-{i:05}"))).unwrap();
    }
    let c = Client::connect(&s.url("/big"), ClientOptions::default())
        .await
        .unwrap();
    let (fh, _) = c.lookup_path(c.target_path()).await.unwrap();
    let entries = c.read_dir(&fh).await.unwrap();
    let names: HashSet<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(entries.len(), 10_000, "each entry exactly once");
    assert_eq!(names.len(), 10_000);
    assert!((0..10_000).all(|i| names.contains(format!("entry-{i:05}").as_str())));
    let calls = c
        .stats()
        .get("NFS3", "READDIRPLUS")
        .map(|p| p.calls)
        .unwrap_or(0);
    eprintln!("[{}] 10,000 entries in {calls} READDIRPLUS calls", s.name());
    // The command, plain and long.
    let out = ok(&["ls", &s.url("/big")]).await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 10_000);
    assert_eq!(lines.iter().collect::<HashSet<_>>().len(), 10_000);
    assert_eq!(lines[0], "entry-00000");
    let out = ok(&["ls", "-l", &s.url("/big")]).await;
    assert_eq!(out.lines().count(), 10_000);
    assert!(out.lines().all(|l| l.starts_with("-rw")), "{}", &out[..200]);
    std::fs::remove_dir_all(&dir).unwrap();
}

async fn namespace_commands(s: &dyn Server) {
    let exp = s.export_dir();
    ok(&["mkdir", "-p", &s.url("/a/b/c")]).await;
    assert!(exp.join("a/b/c").is_dir());
    ok(&["mkdir", "-p", &s.url("/a/b/c")]).await; // exists: fine with -p
    ok(&["mkdir", &s.url("/a/x")]).await;
    std::fs::write(exp.join("a/b/c/file"), b"contents\n").unwrap();
    assert_eq!(ok(&["cat", &s.url("/a/b/c/file")]).await, "contents\n");
    ok(&["mv", &s.url("/a/b/c/file"), &s.url("/a/x")]).await; // into a directory
    assert!(exp.join("a/x/file").is_file());
    ok(&["mv", &s.url("/a/x/file"), &s.url("/a/renamed")]).await;
    assert!(exp.join("a/renamed").is_file());
    let out = ok(&["ls", "-R", &s.url("/a")]).await;
    for want in ["renamed", "/a/b:", "/a/b/c:", "/a/x:"] {
        assert!(out.contains(want), "ls -R lacks {want}:\n{out}");
    }
    let out = ok(&["stat", "--rpc", &s.url("/a/renamed")]).await;
    assert!(
        out.contains("Size: 9") && out.contains("regular file"),
        "{out}"
    );
    assert!(
        out.contains("LOOKUP"),
        "--rpc prints the statistics:\n{out}"
    );
    let (r, _) = sluice(&["rm", &s.url("/a")]).await;
    assert!(r.unwrap_err().contains("is a directory"));
    ok(&["rm", "-r", &s.url("/a")]).await;
    assert!(!exp.join("a").exists());
}

async fn error_messages(s: &dyn Server) {
    let exp = s.export_dir();
    // A missing path.
    let (r, _) = sluice(&["cat", &s.url("/no/such/file")]).await;
    let e = r.unwrap_err();
    // The same words over either version (a URL without `version` may get NFSv4 from the
    // server), then the status's name in the version spoken.
    let named = |e: &str, words: &str, names: &[&str]| {
        names.iter().any(|n| e.contains(&format!("{words} ({n})")))
    };
    const NOENT: &[&str] = &["NFS3ERR_NOENT", "NFS4ERR_NOENT"];
    assert!(
        named(&e, "/no/such/file: no such file or directory", NOENT),
        "{e}"
    );
    assert!(e.starts_with("nfs://127.0.0.1"), "{e}");
    let (r, _) = sluice(&["ls", &s.url("/missing")]).await;
    assert!(named(&r.unwrap_err(), "no such file or directory", NOENT));
    // Permission denied: a root-owned 0700 directory, as an unprivileged uid.
    std::fs::create_dir_all(exp.join("private")).unwrap();
    std::fs::set_permissions(
        exp.join("private"),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let local = TempDir::new("perm");
    let f = local.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    let url = format!("{}&uid=65534&gid=65534", s.url("/private/f"));
    let url = if url.contains('?') {
        url
    } else {
        url.replacen('&', "?", 1)
    };
    let (r, _) = sluice(&["cp", "-q", f.to_str().unwrap(), &url]).await;
    let e = r.unwrap_err();
    assert!(
        named(
            &e,
            "permission denied",
            &["NFS3ERR_ACCES", "NFS4ERR_ACCESS"]
        ),
        "{e}"
    );
    assert!(e.contains("/private"), "the message names the path: {e}");
    let _ = std::fs::remove_dir_all(exp.join("private"));
}
