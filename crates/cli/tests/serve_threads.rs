//! `sluice serve --threads N`: the server runs N async threads (it says so in its start-up
//! line), and with one thread or several it serves clients that copy at the same time, both
//! ways, each over two connections, without mixing up their data.

mod common;

use common::*;
use std::time::Duration;

const CLIENTS: u64 = 4;
const FILE_BYTES: usize = 8 << 20;
const COPY_TIMEOUT: Duration = Duration::from_secs(120);

fn concurrent_copies_with(threads: &str) {
    let dirs = TempDir::new("threads");
    let export = dirs.path().join("export");
    let state = dirs.path().join("state");
    let local = dirs.path().join("local");
    for d in [&export, &state, &local] {
        std::fs::create_dir_all(d).unwrap();
    }
    let server = Sluice::start(
        &export,
        &state,
        &["--no-root-squash", "--threads", threads],
        &dirs.path().join("server.log"),
    );
    let export = server.export.clone();
    let said = format!("threads={threads}");
    assert!(
        wait_until(Duration::from_secs(5), Duration::from_millis(50), || server
            .log_text()
            .contains(&said)),
        "the start-up line does not say {said}:\n{}",
        server.log_text()
    );

    // every client writes its own file, all at once, then they all read them back at once
    let mut want = Vec::new();
    let mut writes = Vec::new();
    let mut reads = Vec::new();
    for c in 0..CLIENTS {
        let data = pattern(c + 1, FILE_BYTES);
        want.push(sha256_hex(&data));
        let src = local.join(format!("src{c}"));
        std::fs::write(&src, &data).unwrap();
        let remote = export.join(format!("f{c}"));
        let url = nfs_url(server.port, &remote);
        writes.push((src.to_str().unwrap().to_string(), url.clone(), remote));
        let back = local.join(format!("back{c}"));
        reads.push((url, back.to_str().unwrap().to_string(), back));
    }
    copy_at_once(&writes, &want);
    copy_at_once(&reads, &want);
}

/// Runs `sluice cp --nconnect 2 SRC DST` for every `(SRC, DST, where DST lands)` at the same
/// time, then checks each landed file against its SHA-256 in `want`.
fn copy_at_once(copies: &[(String, String, std::path::PathBuf)], want: &[String]) {
    let mut cps: Vec<SluiceProc> = copies
        .iter()
        .map(|(src, dst, _)| SluiceProc::spawn(&["cp", "-q", "--nconnect", "2", src, dst], &[]))
        .collect();
    for ((src, dst, landed), (cp, sum)) in copies.iter().zip(cps.iter_mut().zip(want)) {
        let st = cp.wait_timeout(COPY_TIMEOUT);
        assert!(st.success(), "cp {src} {dst}: {st}\n{}", cp.stderr_text());
        assert_eq!(
            &sha256_file(landed),
            sum,
            "{} after cp {src} {dst}",
            landed.display()
        );
    }
}

#[test]
fn one_thread_serves_concurrent_clients() {
    concurrent_copies_with("1");
}

#[test]
fn three_threads_serve_concurrent_clients() {
    concurrent_copies_with("3");
}
