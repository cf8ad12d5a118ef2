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

    // every client writes its own file, all at once
    let mut want = Vec::new();
    let mut cps = Vec::new();
    for c in 0..CLIENTS {
        let data = pattern(c + 1, FILE_BYTES);
        want.push(sha256_hex(&data));
        let src = local.join(format!("src{c}"));
        std::fs::write(&src, &data).unwrap();
        let url = nfs_url(server.port, &export.join(format!("f{c}")));
        let args = ["cp", "-q", "--nconnect", "2", src.to_str().unwrap(), &url];
        cps.push(SluiceProc::spawn(&args, &[]));
    }
    for (c, cp) in cps.iter_mut().enumerate() {
        let st = cp.wait_timeout(COPY_TIMEOUT);
        assert!(st.success(), "cp to f{c}: {st}\n{}", cp.stderr_text());
    }
    for (c, sum) in want.iter().enumerate() {
        assert_eq!(
            &sha256_file(&export.join(format!("f{c}"))),
            sum,
            "f{c} on the server"
        );
    }

    // and reads them all back at once
    let mut cps = Vec::new();
    for c in 0..CLIENTS {
        let url = nfs_url(server.port, &export.join(format!("f{c}")));
        let dst = local.join(format!("back{c}"));
        let args = ["cp", "-q", "--nconnect", "2", &url, dst.to_str().unwrap()];
        cps.push(SluiceProc::spawn(&args, &[]));
    }
    for (c, cp) in cps.iter_mut().enumerate() {
        let st = cp.wait_timeout(COPY_TIMEOUT);
        assert!(st.success(), "cp from f{c}: {st}\n{}", cp.stderr_text());
    }
    for (c, sum) in want.iter().enumerate() {
        assert_eq!(
            &sha256_file(&local.join(format!("back{c}"))),
            sum,
            "f{c} read back"
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
