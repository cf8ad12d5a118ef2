//! The open-file cache: descriptors are not leaked.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_open_file_cache_does_not_leak_descriptors() {
    const FILES: usize = 500;
    const OPS: usize = 2000;
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    // Other tests run in this process at the same time, so count only descriptors that point
    // into this test's export.
    let before = fds_under(&s.export);
    let mut handles = Vec::new();
    for i in 0..FILES {
        handles.push(create(&mut c, &root, &format!("f{i}")).await);
    }
    for k in 0..OPS {
        let fh = &handles[(k * 7) % FILES];
        if k % 2 == 0 {
            ok(write(&mut c, fh, k as u64, b"0123456789", StableHow::UNSTABLE).await);
        } else {
            ok(read(&mut c, fh, 0, 4096).await);
        }
    }
    let during = fds_under(&s.export);
    assert!(
        during <= before + sluice_server::backend::openfiles::OPEN_FILES_DEFAULT,
        "{during} descriptors into the export after {OPS} READ/WRITE calls (before: {before})"
    );
    for i in 0..FILES {
        ok(remove(&mut c, &root, &format!("f{i}")).await);
    }
    let after = fds_under(&s.export);
    assert!(
        after <= before,
        "{after} descriptors into the export after removing every file (before: {before}); \
         removed files must not stay open"
    );
}

/// Descriptors of this process whose target lies under `dir` (removed files included).
fn fds_under(dir: &Path) -> usize {
    let dir = dir.to_str().unwrap().to_string();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|t| t.to_str().is_some_and(|t| t.starts_with(&dir)))
        .count()
}
