//! The NFSv4.1 / 4.2 client (`?version=4.1`, `4.2`, `4`) against `sluice serve` and nfs-ganesha:
//! `cp` both ways at the sizes that find off-by-ones (0 B, 1 B, 1 MiB + 1) and one that keeps
//! many READs and WRITEs in flight on the session's slots (16 MiB), checked by SHA-256; `cat`;
//! minor version negotiation; `--stats` naming the version; a session shared by many files;
//! `ls` / `ls -l` (READDIR in pages); `cp -r` of a small tree both ways; and every client
//! command (`cat`, `ls -l -R`, `stat`, `cp -r -p` with links, NFS → NFS `cp`, `mkdir [-p]`, `mv`,
//! `ln [-s]`, `rm [-r]`) over 4.1 and over a URL with no version (4.2 chosen; 3 from a server that offers
//! neither 4.1 nor 4.2), by the same code as over v3; session trunking
//! (`nconnect`); recovery after a server restart; and 256 MiB both ways, one test per server.
mod servers;

use clap::Parser;
use servers::*;
use sluice_cli::cmd::{run_with_output, ClientCmd};
use sluice_client::url::NfsUrl;
use sluice_client::v4::{Client, CreateMode, Minor, V4Options};
use sluice_client::{ClientOptions, File, ProtoVersion};
use std::path::Path;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: ClientCmd,
}

/// Runs `sluice ARGS...` in-process; returns (result, stdout).
async fn sluice(args: &[&str]) -> (Result<(), String>, Vec<u8>) {
    let mut argv = vec!["sluice"];
    argv.extend_from_slice(args);
    let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("bad command {argv:?}: {e}"));
    let mut out: Vec<u8> = Vec::new();
    let r = run_with_output(cli.cmd, &mut out).await;
    (r, out)
}

async fn ok(args: &[&str]) -> Vec<u8> {
    let (r, out) = sluice(args).await;
    if let Err(e) = r {
        panic!("sluice {args:?} failed: {e}");
    }
    out
}

/// The v4 URL of `rel` on `s`: its v3 URL with `version=` replaced (ganesha's pseudo path is its
/// export's path, and sluice lists exports by absolute path in its pseudo root, so the path is
/// the same; the v4 client takes `nfsport`, else the authority's port).
fn v4_url(s: &dyn Server, rel: &str, version: &str) -> String {
    let u = s.url(rel);
    if u.contains("version=3") {
        u.replace("version=3", &format!("version={version}"))
    } else {
        format!("{u}?version={version}")
    }
}

fn all(s: &dyn Server) {
    runtime().block_on(async {
        for version in ["4.1", "4.2"] {
            copies_both_ways(s, version).await;
        }
        negotiation(s).await;
        many_files_share_one_session(s).await;
        listing(s).await;
        tree_both_ways(s).await;
        commands(s, Some("4.1"), "4.1").await;
        commands(s, None, "4.2").await;
        namespace_api(s).await;
        trunking(s).await;
    });
    stats_name_the_version(s);
}

/// `s`'s URL of `rel` with `version` (none: the no-version fallback; `nfsport` and `mountport`
/// stay, as a v3 URL has them).
fn url_of(s: &dyn Server, rel: &str, version: Option<&str>) -> String {
    match version {
        Some(v) => v4_url(s, rel, v),
        None => s
            .url(rel)
            .replace("?version=3&", "?")
            .replace("&version=3", "")
            .replace("?version=3", ""),
    }
}

/// The NFS version `sluice stat --stats` says it used for `url` (the binary, for its stderr).
fn version_chosen(url: &str) -> String {
    let out = std::process::Command::new(SluiceServer::binary())
        .args(["stat", "--stats", url])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    err.lines()
        .find_map(|l| l.strip_prefix("NFS version: "))
        .unwrap_or_else(|| panic!("no version in --stats: {err}"))
        .to_string()
}

/// Every client command over one version: `mkdir [-p]`, `cp` up, `cat`, `mv` (rename and into a
/// directory), `ls -R`, `ls -l` of a link, `stat`, `cp -r -p` of a tree with a link both ways
/// (modes, times, link target and SHA-256 of every file), NFS → NFS `cp`, `rm`, `rm -r`.
async fn commands(s: &dyn Server, version: Option<&str>, want_version: &str) {
    let tag = format!("cmds-{}", version.unwrap_or("any").replace('.', "_"));
    let u = |rel: &str| url_of(s, &format!("/{tag}{rel}"), version);
    let on_disk = |rel: &str| s.export_dir().join(&tag).join(rel.trim_start_matches('/'));
    let name = s.name().to_string();
    assert_eq!(
        version_chosen(&url_of(s, "", version)),
        want_version,
        "[{name}]"
    );

    ok(&["mkdir", &u("")]).await;
    ok(&["mkdir", "-p", &u("/a/b/c")]).await;
    ok(&["mkdir", "-p", &u("/a/b/c")]).await; // exists: fine with -p
    ok(&["mkdir", &u("/a/x")]).await;
    assert!(
        on_disk("a/b/c").is_dir() && on_disk("a/x").is_dir(),
        "[{name}]"
    );
    let (r, _) = sluice(&["mkdir", &u("/a/x")]).await;
    assert!(
        r.unwrap_err().contains("EXIST"),
        "[{name}] mkdir over a directory"
    );

    let local = TempDir::new("v4-cmds");
    let f = local.path().join("file");
    make_file(&f, 300_001, 9);
    let want = sha256_file(&f);
    ok(&["cp", "-q", f.to_str().unwrap(), &u("/a/b/c/file")]).await;
    let got = ok(&["cat", &u("/a/b/c/file")]).await;
    assert_eq!(got, std::fs::read(&f).unwrap(), "[{name}] cat");
    ok(&["mv", &u("/a/b/c/file"), &u("/a/x")]).await; // into a directory
    ok(&["mv", &u("/a/x/file"), &u("/a/renamed")]).await;
    assert_eq!(sha256_file(&on_disk("a/renamed")), want, "[{name}] mv");
    assert!(!on_disk("a/x/file").exists() && !on_disk("a/b/c/file").exists());

    let listing = String::from_utf8(ok(&["ls", "-R", &u("/a")]).await).unwrap();
    for want in [
        "renamed",
        &format!("/{tag}/a/b:"),
        &format!("/{tag}/a/b/c:"),
    ] {
        assert!(
            listing.contains(want),
            "[{name}] ls -R lacks {want}: {listing}"
        );
    }
    let stat = String::from_utf8(ok(&["stat", &u("/a/renamed")]).await).unwrap();
    assert!(stat.contains("Size: 300001 "), "[{name}] {stat}");
    assert!(stat.contains("Type: regular file"), "[{name}] {stat}");

    // A tree with modes, times and a link, up and back down with -p.
    let src = local.path().join("tree");
    std::fs::create_dir_all(src.join("d")).unwrap();
    make_file(&src.join("d/f1"), 70_000, 1);
    make_file(&src.join("f2"), 0, 2);
    std::os::unix::fs::symlink("d/f1", src.join("lnk")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(src.join("d/f1"), std::fs::Permissions::from_mode(0o640)).unwrap();
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    std::fs::File::options()
        .write(true)
        .open(src.join("d/f1"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    ok(&["cp", "-q", "-r", "-p", src.to_str().unwrap(), &u("/tree")]).await;
    let back = local.path().join("back");
    ok(&["cp", "-q", "-r", "-p", &u("/tree"), back.to_str().unwrap()]).await;
    for rel in ["d/f1", "f2"] {
        let want = sha256_file(&src.join(rel));
        assert_eq!(
            sha256_file(&on_disk(&format!("tree/{rel}"))),
            want,
            "[{name}] up {rel}"
        );
        assert_eq!(sha256_file(&back.join(rel)), want, "[{name}] down {rel}");
    }
    for side in [on_disk("tree"), back.clone()] {
        let m = std::fs::metadata(side.join("d/f1")).unwrap();
        assert_eq!(
            m.permissions().mode() & 0o777,
            0o640,
            "[{name}] -p mode {side:?}"
        );
        assert_eq!(m.modified().unwrap(), old, "[{name}] -p mtime {side:?}");
        let target = std::fs::read_link(side.join("lnk")).unwrap();
        assert_eq!(target, Path::new("d/f1"), "[{name}] link {side:?}");
    }
    let l = String::from_utf8(ok(&["ls", "-l", &u("/tree")]).await).unwrap();
    assert!(
        l.lines()
            .any(|l| l.starts_with('l') && l.ends_with(" lnk -> d/f1")),
        "[{name}] {l}"
    );

    // NFS -> NFS on the same server.
    ok(&["cp", "-q", &u("/a/renamed"), &u("/copy")]).await;
    assert_eq!(sha256_file(&on_disk("copy")), want, "[{name}] NFS -> NFS");

    // ln: hard (by name, and into a directory under the target's name), and symbolic.
    ok(&["ln", &u("/copy"), &u("/hard")]).await;
    ok(&["ln", &u("/copy"), &u("/a")]).await;
    use std::os::unix::fs::MetadataExt;
    let copy = std::fs::metadata(on_disk("copy")).unwrap();
    assert_eq!(copy.nlink(), 3, "[{name}] two hard links");
    assert_eq!(
        std::fs::metadata(on_disk("hard")).unwrap().ino(),
        copy.ino()
    );
    assert_eq!(
        std::fs::metadata(on_disk("a/copy")).unwrap().ino(),
        copy.ino()
    );
    ok(&["ln", "-s", "../copy", &u("/a/soft")]).await;
    assert_eq!(
        std::fs::read_link(on_disk("a/soft")).unwrap(),
        Path::new("../copy"),
        "[{name}] ln -s"
    );
    let (r, _) = sluice(&["ln", &u("/copy"), &u("/hard")]).await;
    assert!(r.unwrap_err().contains("EXIST"), "[{name}] ln over a name");
    ok(&["rm", &u("/hard")]).await;

    let (r, _) = sluice(&["rm", &u("/a")]).await;
    assert!(r.unwrap_err().contains("use -r"), "[{name}]");
    ok(&["rm", &u("/copy")]).await;
    ok(&["rm", "-r", &u("/a"), &u("/tree")]).await;
    assert!(!on_disk("copy").exists() && !on_disk("a").exists() && !on_disk("tree").exists());
    let (r, _) = sluice(&["rm", &u("/a")]).await;
    assert!(
        r.unwrap_err().contains("NOENT"),
        "[{name}] rm of a missing name"
    );
}

async fn copies_both_ways(s: &dyn Server, version: &str) {
    let local = TempDir::new("v4-local");
    let v = version.replace('.', "_");
    for (i, len) in [0u64, 1, (1 << 20) + 1, 16 << 20].into_iter().enumerate() {
        let src = local.path().join(format!("src{len}"));
        make_file(&src, len, 77 + i as u64);
        let want = sha256_file(&src);
        let name = format!("v4-{v}-{len}");
        let url = v4_url(s, &format!("/{name}"), version);
        ok(&["cp", "-q", src.to_str().unwrap(), &url]).await;
        let on_server = s.export_dir().join(&name);
        assert_eq!(
            sha256_file(&on_server),
            want,
            "[{}] {version} upload of {len} bytes",
            s.name()
        );
        let back = local.path().join(format!("back{len}"));
        ok(&["cp", "-q", &url, back.to_str().unwrap()]).await;
        assert_eq!(
            sha256_file(&back),
            want,
            "[{}] {version} download of {len} bytes",
            s.name()
        );
        if len <= 1 {
            assert_eq!(
                ok(&["cat", &url]).await,
                std::fs::read(&src).unwrap(),
                "[{}] cat",
                s.name()
            );
        }
    }
    // Over an existing file: truncated, not merged.
    let small = local.path().join("small");
    std::fs::write(&small, b"short").unwrap();
    let url = v4_url(s, &format!("/v4-{v}-{}", (1u64 << 20) + 1), version);
    ok(&["cp", "-q", small.to_str().unwrap(), &url]).await;
    assert_eq!(
        std::fs::read(s.export_dir().join(format!("v4-{v}-{}", (1u64 << 20) + 1))).unwrap(),
        b"short"
    );
    // Into an existing directory on either side: under the source's name.
    let dir_url = v4_url(s, "", version);
    ok(&["cp", "-q", small.to_str().unwrap(), &dir_url]).await;
    assert_eq!(
        std::fs::read(s.export_dir().join("small")).unwrap(),
        b"short"
    );
    ok(&["cp", "-q", &url, local.path().to_str().unwrap()]).await;
    assert_eq!(
        std::fs::read(local.path().join(format!("v4-{v}-{}", (1u64 << 20) + 1))).unwrap(),
        b"short"
    );
    // A missing file is the server's NOENT, named.
    let (r, _) = sluice(&["cat", &v4_url(s, "/no-such-file", version)]).await;
    let e = r.unwrap_err();
    assert!(e.contains("NFS4ERR_NOENT"), "[{}] {e}", s.name());
}

/// `ls` and `ls -l` of a directory of 3,000 entries (several READDIR pages) and of a file.
async fn listing(s: &dyn Server) {
    let dir = s.export_dir().join("listing");
    std::fs::create_dir(&dir).unwrap();
    let mut want: Vec<String> = (0..3000).map(|i| format!("entry-{i:05}")).collect();
    for n in &want {
        std::fs::write(dir.join(n), b"").unwrap();
    }
    std::fs::write(dir.join("entry-00007"), b"1234567").unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    want.push("sub".into());
    let url = v4_url(s, "/listing", "4.1");
    let names = String::from_utf8(ok(&["ls", &url]).await).unwrap();
    assert_eq!(names.lines().collect::<Vec<_>>(), want, "[{}]", s.name());
    let long = String::from_utf8(ok(&["ls", "-l", &url]).await).unwrap();
    let line = long.lines().find(|l| l.ends_with(" entry-00007")).unwrap();
    assert!(line.starts_with("-rw-"), "[{}] {line}", s.name());
    assert!(line.contains(" 7 "), "[{}] size: {line}", s.name());
    let sub = long.lines().find(|l| l.ends_with(" sub")).unwrap();
    assert!(sub.starts_with('d'), "[{}] {sub}", s.name());
    let one = ok(&["ls", "-l", &v4_url(s, "/listing/entry-00007", "4.1")]).await;
    assert!(String::from_utf8(one).unwrap().ends_with(" entry-00007\n"));
}

/// `cp -r` of a small tree (3 levels, 40 files of 0 B to 300 KiB) up and back down, by
/// SHA-256 of every file.
async fn tree_both_ways(s: &dyn Server) {
    let local = TempDir::new("v4-tree");
    let src = local.path().join("tree");
    let mut files = Vec::new();
    for d in ["", "a", "a/b", "c"] {
        std::fs::create_dir_all(src.join(d)).unwrap();
        for i in 0..10u64 {
            let rel = Path::new(d).join(format!("f{i}"));
            make_file(&src.join(&rel), i * i * 3000, 5 + i);
            files.push(rel);
        }
    }
    std::fs::create_dir(src.join("empty")).unwrap();
    let url = v4_url(s, "/tree", "4.1");
    ok(&["cp", "-q", "-r", src.to_str().unwrap(), &url]).await;
    let back = local.path().join("back");
    ok(&["cp", "-q", "-r", &url, back.to_str().unwrap()]).await;
    for rel in &files {
        let want = sha256_file(&src.join(rel));
        assert_eq!(
            sha256_file(&s.export_dir().join("tree").join(rel)),
            want,
            "[{}] up {rel:?}",
            s.name()
        );
        assert_eq!(
            sha256_file(&back.join(rel)),
            want,
            "[{}] down {rel:?}",
            s.name()
        );
    }
    assert!(back.join("empty").is_dir());
    let (r, _) = sluice(&["cp", "-q", &url, back.to_str().unwrap()]).await;
    assert!(r.unwrap_err().contains("use -r"));
}

/// `nconnect=4` is session trunking: one session, its COMPOUNDs over four connections, the
/// three extra ones bound with BIND_CONN_TO_SESSION. `sluice serve` must take the binds; a
/// server that refuses them (if ganesha does) leaves the client on one connection with a note
/// saying so, and the data still arrives. Then `cp --nconnect 4` both ways, by SHA-256.
async fn trunking(s: &dyn Server) {
    let url = NfsUrl::parse(&format!("{}&nconnect=4", v4_url(s, "", "4.1"))).unwrap();
    let c = Client::connect(
        &url,
        &ClientOptions::default(),
        Minor::V1,
        V4Options::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("[{}] nconnect=4: {e}", s.name()));
    let path = format!("{}/trunked", url.path);
    let data: Vec<u8> = (0..(8u32 << 20) + 5).map(|i| (i % 251) as u8).collect();
    let (fh, attr) = c.create(&path, 0o644, CreateMode::Truncate).await.unwrap();
    let mut w = File::new(c.clone(), fh.clone(), attr).writer();
    w.write(&data).await.unwrap();
    w.finish().await.unwrap();
    c.close(&fh).await.unwrap();
    let (fh, attr) = c.open(&path).await.unwrap();
    let got = File::new(c.clone(), fh.clone(), attr).read_all().await;
    c.close(&fh).await.unwrap();
    assert!(
        got.unwrap() == data,
        "[{}] read back over nconnect=4",
        s.name()
    );
    let conns = c.connection_stats();
    let binds = c.stats().get("NFS4", "BIND_CONN_TO_SESSION");
    match c.trunking_note() {
        None => {
            assert_eq!(conns.len(), 4, "[{}]", s.name());
            // About 30 COMPOUNDs (9 WRITEs, COMMIT, 9 READs, OPENs, CLOSEs...) in turns of
            // four, and the bind: every connection carries some.
            for (i, t) in conns.iter().enumerate() {
                assert!(
                    t.table.calls_completed >= 4,
                    "[{}] connection {} carried {} calls",
                    s.name(),
                    i + 1,
                    t.table.calls_completed
                );
            }
            let binds = binds.expect("binds were counted");
            assert_eq!((binds.calls, binds.errors), (3, 0), "[{}]", s.name());
        }
        Some(note) => {
            assert_ne!(s.name(), "sluice", "sluice serve refused trunking: {note}");
            assert_eq!(conns.len(), 1, "[{}] {note}", s.name());
            assert!(note.contains("one connection"), "{note}");
            eprintln!("[{}] no trunking: {note}", s.name());
        }
    }
    c.shutdown().await;
    automatic_trunking(s, &data).await;
    // The command line: `--nconnect 4` on a v4 URL, up and down.
    let local = TempDir::new("v4-nconnect");
    let src = local.path().join("src");
    make_file(&src, (3 << 20) + 7, 99);
    let want = sha256_file(&src);
    let file_url = v4_url(s, "/nconnect-cp", "4.1");
    ok(&[
        "cp",
        "-q",
        "--nconnect",
        "4",
        src.to_str().unwrap(),
        &file_url,
    ])
    .await;
    assert_eq!(sha256_file(&s.export_dir().join("nconnect-cp")), want);
    let back = local.path().join("back");
    ok(&[
        "cp",
        "-q",
        "--nconnect",
        "4",
        &file_url,
        back.to_str().unwrap(),
    ])
    .await;
    assert_eq!(sha256_file(&back), want, "[{}]", s.name());
}

/// Automatic nconnect over 4.1, the policy told to grow at every look: connections added while
/// a file is read are bound to the session (BIND_CONN_TO_SESSION) before they carry
/// COMPOUNDs, and then carry READs; the data is intact. A server that refuses the bind leaves
/// the client where it was, with a note.
async fn automatic_trunking(s: &dyn Server, data: &[u8]) {
    let url = NfsUrl::parse(&v4_url(s, "", "4.1")).unwrap();
    let options = ClientOptions {
        nconnect_auto: sluice_client::TrunkConfig {
            max: 3,
            window_bytes: 1 << 20,
            busy_fraction: 0.0,
            gain_min: 0.0,
        },
        ..ClientOptions::default()
    };
    let c = Client::connect(&url, &options, Minor::V1, V4Options::default())
        .await
        .unwrap_or_else(|e| panic!("[{}] {e}", s.name()));
    let path = format!("{}/trunked", url.path);
    let read = || async {
        let (fh, attr) = c.open(&path).await.unwrap();
        let got = File::new(c.clone(), fh.clone(), attr).read_all().await;
        c.close(&fh).await.unwrap();
        assert!(got.unwrap() == data, "[{}] read back", s.name());
    };
    for _ in 0..40 {
        read().await;
        let (n, note) = c.connections();
        if n == 3 || note.as_deref().is_some_and(|n| n.contains("failed")) {
            break;
        }
    }
    read().await;
    let (n, note) = c.connections();
    let note = note.expect("an automatic count has a note");
    let binds = c.stats().get("NFS4", "BIND_CONN_TO_SESSION");
    if note.contains("failed") {
        assert_ne!(s.name(), "sluice", "sluice serve refused a bind: {note}");
        assert_eq!(n, 1, "[{}] {note}", s.name());
        eprintln!("[{}] no automatic trunking: {note}", s.name());
    } else {
        assert_eq!(n, 3, "[{}] {note}", s.name());
        assert!(note.contains("3 of at most 3"), "{note}");
        let binds = binds.expect("binds were counted");
        assert_eq!((binds.calls, binds.errors), (2, 0), "[{}]", s.name());
        for (i, t) in c.connection_stats().iter().enumerate() {
            assert!(
                t.bytes_received > 1 << 20,
                "[{}] connection {} carried no READs",
                s.name(),
                i + 1
            );
        }
    }
    c.shutdown().await;
}

async fn negotiation(s: &dyn Server) {
    let url = NfsUrl::parse(&v4_url(s, "", "4")).unwrap();
    let options = ClientOptions::default();
    for (minor, want) in [(Minor::Highest, 2), (Minor::V1, 1), (Minor::V2, 2)] {
        let c = Client::connect(&url, &options, minor, V4Options::default())
            .await
            .unwrap_or_else(|e| panic!("[{}] {minor:?}: {e}", s.name()));
        assert_eq!(c.minor_version(), want, "[{}] {minor:?}", s.name());
        // Both servers take the back channel CREATE_SESSION offers (for recalls).
        assert!(
            c.back_channel_up(),
            "[{}] {minor:?}: no back channel",
            s.name()
        );
        c.shutdown().await;
    }
}

/// 24 files written and read back at once through one client: more COMPOUNDs in flight than
/// the table has slots, so slots are waited for and reused with the next sequence id.
async fn many_files_share_one_session(s: &dyn Server) {
    let url = NfsUrl::parse(&v4_url(s, "", "4.1")).unwrap();
    let mut options = ClientOptions::default();
    options.rpc.table.max_in_flight = 4;
    let c = Client::connect(&url, &options, Minor::V1, V4Options::default())
        .await
        .unwrap();
    let base = url.path.clone();
    let mut tasks = Vec::new();
    for i in 0..24u8 {
        let c = c.clone();
        let path = format!("{base}/many-{i}");
        tasks.push(tokio::spawn(async move {
            let data = vec![i; 100_000 + usize::from(i) * 1000];
            let (fh, attr) = c.create(&path, 0o600, CreateMode::Exclusive).await.unwrap();
            let f = File::new(c.clone(), fh.clone(), attr);
            let mut w = f.writer();
            w.write(&data).await.unwrap();
            w.finish().await.unwrap();
            c.close(&fh).await.unwrap();
            let (fh, attr) = c.open(&path).await.unwrap();
            let got = File::new(c.clone(), fh.clone(), attr)
                .read_all()
                .await
                .unwrap();
            c.close(&fh).await.unwrap();
            assert_eq!(got, data, "file {i}");
            let again = c.create(&path, 0o600, CreateMode::Exclusive).await;
            assert_eq!(
                again.unwrap_err().status(),
                Some(sluice_xdr::nfs4::Nfsstat4::EXIST),
                "EXCLUSIVE4_1 over an existing file"
            );
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let writes = c.stats().get("NFS4", "WRITE").unwrap();
    assert!(writes.calls >= 24 && writes.errors == 0, "{writes:?}");
    c.shutdown().await;
    let after = c.lookup(&base).await;
    assert!(after.is_err(), "calls after shutdown fail");
}

/// `--stats` ends with the version the client chose (the binary, for its stderr).
fn stats_name_the_version(s: &dyn Server) {
    let out = std::process::Command::new(SluiceServer::binary())
        .args(["cat", "--stats", &v4_url(s, "/small", "4")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, b"short");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NFS version: 4.2"), "[{}] {err}", s.name());
    assert!(err.contains("READ "), "[{}] {err}", s.name());
}

/// The parts of [`Namespace`] the commands do not use but a mount will, the same over v3 and
/// v4.1: exclusive and guarded creates (a second one is EXIST), open for writing and a
/// positional write, a size change on the open file, a hard link, rename, and a listing resumed
/// from an entry's cookie.
async fn namespace_api(s: &dyn Server) {
    use sluice_client::namespace::{CreateMode, Cursor};
    use sluice_client::namespace::{FileType, SetAttr, Status};
    for (version, want) in [("3", ProtoVersion::V3), ("4.1", ProtoVersion::V4_1)] {
        let dir_name = format!("ns-api-{}", version.replace('.', "_"));
        std::fs::create_dir(s.export_dir().join(&dir_name)).unwrap();
        let url = NfsUrl::parse(&url_of(s, "", Some(version))).unwrap();
        let ns = sluice_client::connect(&url, &ClientOptions::default())
            .await
            .unwrap();
        assert_eq!(ns.version(), want);
        let rel = sluice_client::client::strip_export(&url.path, ns.export());
        let (dir, _) = ns.lookup_path(&format!("{rel}/{dir_name}")).await.unwrap();
        let tag = format!("[{}] v{version}", s.name());
        for how in [CreateMode::Exclusive, CreateMode::Guarded] {
            let name = format!("{how:?}");
            let f = ns.create(&dir, &name, 0o600, how).await.unwrap();
            f.close().await.unwrap();
            let again = ns.create(&dir, &name, 0o600, how).await.err().unwrap();
            assert_eq!(again.status(), Some(Status::EXIST), "{tag} {how:?}");
            let (_, a) = ns.lookup(&dir, &name).await.unwrap();
            assert_eq!(a.mode & 0o777, 0o600, "{tag} {how:?} mode");
        }
        let (fh, attr) = ns.lookup(&dir, "Guarded").await.unwrap();
        let f = ns.open(&fh, attr, true).await.unwrap();
        let mut w = f.writer();
        w.write_at(0, b"hello, world").await.unwrap();
        w.finish().await.unwrap();
        f.set_attr(&SetAttr {
            size: Some(5),
            ..SetAttr::default()
        })
        .await
        .unwrap();
        f.close().await.unwrap();
        let attr = ns.getattr(&fh).await.unwrap();
        assert_eq!(attr.size, 5, "{tag} truncated");
        let f = ns.open(&fh, attr, false).await.unwrap();
        assert_eq!(f.read_all().await.unwrap(), b"hello", "{tag}");
        f.close().await.unwrap();
        // A path opened whole (what `cat` does): over v4 the walk and the OPEN are one
        // COMPOUND, so no LOOKUP goes out on its own; a directory or a missing name is told
        // apart as with a lookup.
        let calls = |name: &str| ns.stats().get("NFS4", name).map_or(0, |p| p.calls);
        let lookups = calls("LOOKUP");
        let f = ns
            .open_path(&format!("{rel}/{dir_name}/Guarded"))
            .await
            .unwrap();
        assert_eq!(f.read_all().await.unwrap(), b"hello", "{tag} open_path");
        f.close().await.unwrap();
        assert_eq!(calls("LOOKUP"), lookups, "{tag} open_path sent a LOOKUP");
        let e = ns.open_path(&format!("{rel}/{dir_name}")).await.err();
        assert_eq!(e.unwrap().status(), Some(Status::ISDIR), "{tag} directory");
        let e = ns.open_path(&format!("{rel}/{dir_name}/nope")).await.err();
        assert_eq!(e.unwrap().status(), Some(Status::NOENT), "{tag} missing");
        ns.link(&fh, &dir, "hard").await.unwrap();
        assert_eq!(ns.getattr(&fh).await.unwrap().nlink, 2, "{tag} link");
        ns.rename(&dir, "hard", &dir, "renamed").await.unwrap();
        let (dfh, da) = ns.mkdir(&dir, "sub", 0o755).await.unwrap();
        assert_eq!(da.ftype, FileType::DIR, "{tag}");
        ns.symlink(&dfh, "lnk", "../renamed").await.unwrap();
        let (lfh, la) = ns.lookup(&dfh, "lnk").await.unwrap();
        assert_eq!(la.ftype, FileType::LNK, "{tag}");
        assert_eq!(ns.readlink(&lfh).await.unwrap(), "../renamed", "{tag}");
        // A listing read whole, then again from the first entry's cookie (as a mount resumes
        // at an offset): the rest, each name once.
        let mut first = Cursor::default();
        let mut all = Vec::new();
        while !first.eof {
            all.extend(ns.read_dir_page(&dir, &mut first).await.unwrap());
        }
        let mut names: Vec<&str> = all.iter().map(|e| e.name.as_str()).collect();
        names.sort();
        assert_eq!(names, ["Exclusive", "Guarded", "renamed", "sub"], "{tag}");
        let mut cursor = Cursor {
            cookie: all[0].cookie,
            verf: first.verf,
            ..Cursor::default()
        };
        let mut rest = Vec::new();
        while !cursor.eof {
            rest.extend(ns.read_dir_page(&dir, &mut cursor).await.unwrap());
        }
        let rest: Vec<&str> = rest.iter().map(|e| e.name.as_str()).collect();
        let want_rest: Vec<&str> = all[1..].iter().map(|e| e.name.as_str()).collect();
        assert_eq!(rest, want_rest, "{tag} resumed listing");
        ns.remove(&dfh, "lnk").await.unwrap();
        ns.rmdir(&dir, "sub").await.unwrap();
        for name in ["Exclusive", "Guarded", "renamed"] {
            ns.remove(&dir, name).await.unwrap();
        }
        assert!(ns.read_dir(&dir).await.unwrap().is_empty(), "{tag}");
        ns.shutdown().await.unwrap();
    }
}

/// 256 MiB up and back down over 4.1 by SHA-256: long enough for the readahead window and
/// write-behind to reach their limits and for slots to be reused many times over. One size and
/// one version per server, to keep the suite short (the small sizes run in `all`).
fn large_file_both_ways(s: &dyn Server) {
    const LARGE_BYTES: u64 = 256 << 20;
    let local = TempDir::new("v4-large");
    let src = local.path().join("src");
    make_file(&src, LARGE_BYTES, 256);
    let want = sha256_file(&src);
    let url = v4_url(s, "/v4-large", "4.1");
    let back = local.path().join("back");
    runtime().block_on(async {
        ok(&["cp", "-q", src.to_str().unwrap(), &url]).await;
        ok(&["cp", "-q", &url, back.to_str().unwrap()]).await;
    });
    std::fs::remove_file(&src).unwrap();
    assert_eq!(
        sha256_file(&s.export_dir().join("v4-large")),
        want,
        "[{}] upload of 256 MiB",
        s.name()
    );
    assert_eq!(
        sha256_file(&back),
        want,
        "[{}] download of 256 MiB",
        s.name()
    );
}

#[test]
fn v4_256mib_both_ways_against_sluice_server() {
    let server = SluiceServer::start(&SluiceServer::binary());
    large_file_both_ways(&server);
}

#[test]
fn v4_256mib_both_ways_against_ganesha() {
    let server = Ganesha::start();
    large_file_both_ways(&server);
}

#[test]
fn v4_client_against_sluice_server() {
    let server = SluiceServer::start(&SluiceServer::binary());
    all(&server);
}

#[test]
fn v4_client_against_ganesha() {
    let server = Ganesha::start();
    all(&server);
}

/// `sluice serve` killed and started again on the same port and state: the client's next
/// COMPOUND finds its session (and client id) gone, sets up new ones by itself, and goes on;
/// handles survive, opens made before the restart read and write through the same handles
/// (the client opened them again), and a new open reads the file.
#[test]
fn v4_session_and_client_id_are_recovered_after_a_server_restart() {
    recovered_after_a_restart(1);
}

/// The same over three trunked connections: the new session has every connection bound to
/// it again (two more BIND_CONN_TO_SESSION the server accepts), and all three carry calls
/// after the restart.
#[test]
fn v4_trunked_connections_are_rebound_after_a_server_restart() {
    recovered_after_a_restart(3);
}

fn recovered_after_a_restart(nconnect: usize) {
    let bin = SluiceServer::binary();
    let export = TempDir::new("v4-restart");
    let state = TempDir::new("v4-restart-state");
    let port = free_port();
    let start = || {
        let mut cmd = std::process::Command::new(&bin);
        cmd.arg("serve")
            .arg(export.path())
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--no-root-squash")
            .arg("--state-dir")
            .arg(state.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let child = cmd.spawn().expect("spawn sluice serve");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "no listen");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        child
    };
    std::fs::write(export.path().join("f"), b"hello").unwrap();
    let mut child = start();
    let dir = export.path().display().to_string();
    let url = NfsUrl::parse(&format!(
        "nfs://127.0.0.1:{port}{dir}?version=4.1&nconnect={nconnect}"
    ))
    .unwrap();
    let rt = runtime();
    let c = rt.block_on(async {
        Client::connect(
            &url,
            &ClientOptions::default(),
            Minor::V1,
            V4Options::default(),
        )
        .await
        .unwrap()
    });
    let (fh, _) = rt.block_on(c.lookup(&format!("{dir}/f"))).unwrap();
    // Opens made before the restart, used after it through the same handles: the client
    // opens them again under its new client id (CLAIM_FH: sluice serve has no grace period).
    let (rfh, rattr) = rt.block_on(c.open(&format!("{dir}/f"))).unwrap();
    let (wfh, wattr) = rt
        .block_on(c.create(&format!("{dir}/w"), 0o644, CreateMode::Truncate))
        .unwrap();
    let accepted_binds = |c: &Client| {
        c.stats()
            .get("NFS4", "BIND_CONN_TO_SESSION")
            .map_or(0, |b| b.calls - b.errors)
    };
    let binds_before = accepted_binds(&c);
    assert_eq!(binds_before as usize, nconnect - 1);
    let calls_before: Vec<u64> = c
        .connection_stats()
        .iter()
        .map(|t| t.table.calls_completed)
        .collect();
    child.kill().unwrap();
    child.wait().unwrap();
    let mut child = start();
    rt.block_on(async {
        let a = c.getattr_fh(&fh).await.expect("GETATTR after the restart");
        assert_eq!(a.size, 5);
        let got = File::new(c.clone(), rfh.clone(), rattr).read_all().await;
        assert_eq!(
            got.unwrap(),
            b"hello",
            "READ on an open from before the restart"
        );
        let mut w = File::new(c.clone(), wfh.clone(), wattr).writer();
        w.write(b"written after the restart").await.unwrap();
        w.finish()
            .await
            .expect("WRITE on an open from before the restart");
        c.close(&wfh).await.expect("CLOSE of the reopened file");
        c.close(&rfh).await.expect("CLOSE of the reopened file");
        assert_eq!(
            std::fs::read(export.path().join("w")).unwrap(),
            b"written after the restart"
        );
        let (ofh, attr) = c.open(&format!("{dir}/f")).await.unwrap();
        let got = File::new(c.clone(), ofh.clone(), attr).read_all().await;
        assert_eq!(got.unwrap(), b"hello");
        c.close(&ofh).await.unwrap();
        let sessions = c.stats().get("NFS4", "CREATE_SESSION").unwrap().calls;
        assert!(sessions >= 2, "a new session was made: {sessions}");
        let conns = c.connection_stats();
        assert_eq!(conns.len(), nconnect);
        assert!(
            accepted_binds(&c) >= binds_before + nconnect as u64 - 1,
            "every extra connection bound to the new session: {} then {}",
            binds_before,
            accepted_binds(&c)
        );
        for (i, t) in conns.iter().enumerate() {
            assert!(t.reconnects >= 1, "connection {} reconnected", i + 1);
            assert!(
                t.table.calls_completed > calls_before[i],
                "connection {} carried calls after the restart",
                i + 1
            );
        }
        c.shutdown().await;
    });
    let _ = child.kill();
    let _ = child.wait();
}

/// A server that serves 4.1 only answers a 4.2 COMPOUND with NFS4ERR_MINOR_VERS_MISMATCH:
/// `version=4` then settles on 4.1, and `version=4.2` fails saying why.
#[test]
fn v4_picks_4_1_from_a_server_without_4_2() {
    let server = Ganesha::start_with_env(&[("GANESHA_MINOR_VERSIONS", "1")]);
    std::fs::write(server.export_dir().join("f"), b"41").unwrap();
    runtime().block_on(async {
        let url = NfsUrl::parse(&v4_url(&server, "", "4")).unwrap();
        let options = ClientOptions::default();
        let c = Client::connect(&url, &options, Minor::Highest, V4Options::default())
            .await
            .unwrap();
        assert_eq!(c.minor_version(), 1);
        c.shutdown().await;
        let e = Client::connect(&url, &options, Minor::V2, V4Options::default())
            .await
            .err()
            .expect("4.2 refused");
        assert!(e.to_string().contains("MINOR_VERS_MISMATCH"), "{e}");
        assert_eq!(ok(&["cat", &v4_url(&server, "/f", "4")]).await, b"41");
        // No version: 4.2 is refused, 4.1 taken.
        commands(&server, None, "4.1").await;
    });
}

/// A server whose NFSv4 offers neither 4.2 nor 4.1 (ganesha serving 4.0 only) answers both
/// EXCHANGE_IDs with NFS4ERR_MINOR_VERS_MISMATCH: a URL with no version falls back to NFSv3
/// (over the URL's MOUNT port) and every command works there; `version=4.1` fails saying why.
#[test]
fn no_version_falls_back_to_v3_from_a_server_without_4_1() {
    let server = Ganesha::start_with_env(&[("GANESHA_MINOR_VERSIONS", "0")]);
    runtime().block_on(async {
        let (r, _) = sluice(&["ls", &v4_url(&server, "", "4.1")]).await;
        assert!(r.unwrap_err().contains("MINOR_VERS_MISMATCH"));
        commands(&server, None, "3").await;
        // --stats says why v3 was chosen.
        let out = std::process::Command::new(SluiceServer::binary())
            .args(["stat", "--stats", &url_of(&server, "", None)])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.lines()
                .any(|l| l.starts_with("NFS version fallback: ")
                    && l.contains("MINOR_VERS_MISMATCH")),
            "{err}"
        );
    });
}

/// With a 10 s lease (the server's shortest), an idle client sends a SEQUENCE of its own
/// after a third of it (3.3 s), not before, and its session is still the first one afterwards.
#[test]
fn v4_idle_client_renews_its_lease_after_a_third_of_it() {
    let server = SluiceServer::start_with(&SluiceServer::binary(), &["--lease-secs", "10"], true);
    let rt = runtime();
    rt.block_on(async {
        let url = NfsUrl::parse(&v4_url(&server, "", "4.1")).unwrap();
        let c = Client::connect(
            &url,
            &ClientOptions::default(),
            Minor::V1,
            V4Options::default(),
        )
        .await
        .unwrap();
        let t0 = tokio::time::Instant::now();
        let renewals = || c.stats().get("NFS4", "SEQUENCE").map_or(0, |p| p.calls);
        tokio::time::sleep_until(t0 + std::time::Duration::from_millis(3000)).await;
        assert_eq!(renewals(), 0, "no renewal before a third of the lease");
        tokio::time::sleep_until(t0 + std::time::Duration::from_millis(5000)).await;
        assert_eq!(renewals(), 1, "one renewal after a third of the lease");
        c.lookup(&url.path).await.unwrap();
        let sessions = c.stats().get("NFS4", "CREATE_SESSION").unwrap().calls;
        assert_eq!(sessions, 1, "the lease never lapsed");
        c.shutdown().await;
    });
}
