//! `sluice cp -r` of a tree against `sluice serve`, one file at a time (`--jobs 1`) and many at
//! once (the default): local → NFS, NFS → local and NFS → NFS, every file checked by SHA-256,
//! every link by its target, and nothing extra on the other side. Also `-p` on directories
//! (applied after their entries, so the entries do not change the mtime again) and the report of
//! a file that fails, by its path.
mod servers;

use clap::Parser;
use servers::{make_file, sha256_file, Server, SluiceServer, TempDir};
use sluice_cli::cmd::{run_with_output, ClientCmd};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: ClientCmd,
}

/// Runs `sluice ARGS...` in-process on a current-thread runtime, as the binary does.
fn sluice(args: &[&str]) -> Result<(), String> {
    let mut argv = vec!["sluice"];
    argv.extend_from_slice(args);
    let cli = Cli::try_parse_from(&argv)
        .unwrap_or_else(|e| panic!("bad test command line {argv:?}: {e}"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut out: Vec<u8> = Vec::new();
    rt.block_on(run_with_output(cli.cmd, &mut out))
}

fn ok(args: &[&str]) {
    if let Err(e) = sluice(args) {
        panic!("sluice {args:?} failed: {e}");
    }
}

/// What a tree holds: relative path → "dir", "link -> TARGET" or the file's SHA-256.
fn inventory(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let rel = e
                .path()
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                out.insert(rel, "dir".into());
                walk(root, &e.path(), out);
            } else if ft.is_symlink() {
                let t = std::fs::read_link(e.path()).unwrap();
                out.insert(rel, format!("link -> {}", t.display()));
            } else {
                out.insert(rel, sha256_file(&e.path()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// Nested directories (an empty one among them), empty and small files, a file of 1 MiB + 1
/// (past one WRITE of the default wsize: UNSTABLE WRITEs and a COMMIT), links; 300 files in all.
fn make_tree(root: &Path) {
    let deep = root.join("a/b/c");
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::create_dir_all(root.join("empty-dir")).unwrap();
    for d in ["", "a", "a/b", "a/b/c"] {
        let dir = root.join(d);
        for f in 0..70 {
            let p = dir.join(format!("f{f:02}"));
            match f % 10 {
                0 => std::fs::write(&p, b"").unwrap(),
                _ => make_file(&p, (f * 61) as u64 % 5000 + 1, f as u64 + d.len() as u64),
            }
        }
    }
    for (i, d) in ["", "a/b"].iter().enumerate() {
        make_file(&root.join(d).join("big"), (1 << 20) + 1, 99 + i as u64);
    }
    for f in 0..16 {
        make_file(&root.join(format!("a/b/c/tail{f}")), 4096, 1000 + f);
    }
    std::os::unix::fs::symlink("a/b/f01", root.join("link")).unwrap();
    std::os::unix::fs::symlink("../nowhere", root.join("a/dangling")).unwrap();
}

/// All three directions with `jobs` (None: the default).
fn round_trips(jobs: Option<&str>) {
    let server = SluiceServer::start(&SluiceServer::binary());
    let local = TempDir::new("cp-tree");
    let src = local.path().join("src");
    make_tree(&src);
    let want = inventory(&src);
    assert_eq!(want.values().filter(|v| v.len() == 64).count(), 298);
    let with_jobs = |args: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = vec!["cp".into(), "-q".into(), "-r".into()];
        if let Some(j) = jobs {
            v.push("--jobs".into());
            v.push(j.into());
        }
        v.extend(args.iter().map(|s| s.to_string()));
        v
    };
    let run = |args: Vec<String>| ok(&args.iter().map(String::as_str).collect::<Vec<_>>());

    // Local → NFS, to a new name.
    run(with_jobs(&[src.to_str().unwrap(), &server.url("/up")]));
    assert_eq!(
        inventory(&server.export_dir().join("up")),
        want,
        "local -> NFS"
    );
    // NFS → local.
    let back = local.path().join("back");
    run(with_jobs(&[&server.url("/up"), back.to_str().unwrap()]));
    assert_eq!(inventory(&back), want, "NFS -> local");
    // NFS → NFS, into an existing directory (under the source's name).
    std::fs::create_dir(server.export_dir().join("into")).unwrap();
    run(with_jobs(&[&server.url("/up"), &server.url("/into")]));
    assert_eq!(
        inventory(&server.export_dir().join("into/up")),
        want,
        "NFS -> NFS"
    );
}

#[test]
fn tree_one_file_at_a_time() {
    round_trips(Some("1"));
}

#[test]
fn tree_many_files_at_once() {
    round_trips(None);
}

/// `-p`: a directory keeps its mtime although its entries are created (concurrently) after it,
/// and a file its mode, both ways.
#[test]
fn tree_preserve_directory_times() {
    let server = SluiceServer::start(&SluiceServer::binary());
    let local = TempDir::new("cp-tree-p");
    let src = local.path().join("src");
    make_tree(&src);
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_500_000_000);
    for d in ["a/b/c", "a/b", "a", ""] {
        let f = std::fs::File::open(src.join(d)).unwrap();
        f.set_modified(old).unwrap();
    }
    std::fs::set_permissions(
        src.join("a/f03"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    ok(&[
        "cp",
        "-q",
        "-r",
        "-p",
        src.to_str().unwrap(),
        &server.url("/p"),
    ]);
    let back = local.path().join("back");
    ok(&[
        "cp",
        "-q",
        "-r",
        "-p",
        &server.url("/p"),
        back.to_str().unwrap(),
    ]);
    for top in [server.export_dir().join("p"), back] {
        assert_eq!(inventory(&top), inventory(&src));
        for d in ["a/b/c", "a/b", "a", ""] {
            let m = std::fs::metadata(top.join(d)).unwrap().modified().unwrap();
            assert_eq!(m, old, "{top:?}/{d}: mtime kept");
        }
        let mode = std::fs::metadata(top.join("a/f03")).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o600
        );
    }
}

/// A file that cannot be created (a directory of that name is in the way) fails the copy with
/// a message naming it; the other files in flight still finish.
#[test]
fn tree_failure_names_the_file() {
    let server = SluiceServer::start(&SluiceServer::binary());
    let local = TempDir::new("cp-tree-err");
    let src = local.path().join("t");
    std::fs::create_dir_all(&src).unwrap();
    for f in 0..20 {
        std::fs::write(src.join(format!("f{f:02}")), format!("{f}")).unwrap();
    }
    std::fs::create_dir_all(server.export_dir().join("t/f07")).unwrap();
    let err = sluice(&["cp", "-q", "-r", src.to_str().unwrap(), &server.url("/")])
        .expect_err("f07 is a directory on the server");
    assert!(err.contains("/t/f07"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// A directory that cannot be created (a file of that name is in the way) stops the walk with
/// a message naming it, and the files already started are finished, not cut off: every file
/// that exists on the server has all its contents.
#[test]
fn tree_walk_failure_lets_the_files_in_flight_finish() {
    let server = SluiceServer::start(&SluiceServer::binary());
    let local = TempDir::new("cp-tree-walk-err");
    let src = local.path().join("t");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/inner"), b"inner").unwrap();
    for f in 0..200 {
        std::fs::write(src.join(format!("f{f:03}")), format!("file {f}")).unwrap();
    }
    std::fs::create_dir_all(server.export_dir().join("t")).unwrap();
    std::fs::write(server.export_dir().join("t/sub"), b"in the way").unwrap();
    let err = sluice(&["cp", "-q", "-r", src.to_str().unwrap(), &server.url("/")])
        .expect_err("t/sub is a file on the server");
    assert!(err.contains("/t/sub"), "{err}");
    for e in std::fs::read_dir(server.export_dir().join("t")).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(n) = name.strip_prefix('f') {
            let n: u32 = n.parse().unwrap();
            assert_eq!(
                std::fs::read_to_string(e.path()).unwrap(),
                format!("file {n}"),
                "{name} was cut off"
            );
        }
    }
}

/// Listings stream: a directory comes one READDIRPLUS reply at a time (here 4 KiB replies for
/// 2,000 names), each entry exactly once, with the handle and attributes the walk needs.
#[test]
fn a_directory_is_listed_one_reply_at_a_time() {
    let server = SluiceServer::start(&SluiceServer::binary());
    let dir = server.export_dir().join("many");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..2000 {
        std::fs::write(dir.join(format!("entry-{i:04}")), b"").unwrap();
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let options = sluice_client::ClientOptions {
            readdir_bytes: 4096,
            ..Default::default()
        };
        let c = sluice_client::Client::connect(&server.url("/many"), options)
            .await
            .unwrap();
        let (fh, _) = c.lookup_path(c.target_path()).await.unwrap();
        let mut pages = sluice_client::DirPages::new(c.clone(), fh);
        let (mut n_pages, mut names) = (0, std::collections::BTreeSet::new());
        while let Some(page) = pages.next_page().await.unwrap() {
            n_pages += 1;
            assert!(page.len() < 2000, "a page is one reply, not the directory");
            for e in page {
                assert!(e.fh.is_some() && e.attr.is_some(), "{}", e.name);
                assert!(names.insert(e.name.clone()), "{} twice", e.name);
            }
        }
        assert_eq!(names.len(), 2000);
        assert!(n_pages > 10, "{n_pages} pages");
        assert!(
            pages.next_page().await.unwrap().is_none(),
            "stays at the end"
        );
    });
}
