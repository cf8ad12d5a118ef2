//! Issue #14, the NFSv4.2 pieces that need more than ext4, through the Linux kernel client in
//! one guest boot (`tests/peers/guest/kernel-reflink.sh` through `tests/peers/kclient.sh`):
//! `sluice serve` exports a directory on a small XFS with reflinks (`tests/peers/reflink-fs.sh`:
//! an image on a loop device; where loop devices or mkfs.xfs are missing the test fails saying
//! why, unless `SLUICE_TEST_SKIP` names `reflink`, docs/testing.md), and a fresh vers=4.2 mount
//! - copies a 40 MiB file with copy_file_range right after the mount: more than one COPY chunk
//!   (32 MiB), so the server makes it asynchronous even though the session's back channel is
//!   still being probed (`sluice_nfs4_cb_offload_total` 1, one COPY), with the right contents;
//! - clones it with FICLONE: CLONE succeeds, and the clone shares the source's extents on the
//!   server's disk (FIEMAP's shared flag) and has its contents;
//! - reads a sparse and a dense file after dropping its caches, with the right SHA-256 either
//!   way. The server answers READ_PLUS; whether this guest's client sends it is its kernel's
//!   build option: Debian's 6.1 is built without CONFIG_NFS_V4_2_READ_PLUS (the option
//!   defaults to y from Linux 6.6) and reads with READ, so the test checks that the server's
//!   READ_PLUS count equals what the client's mountstats say it sent (zero or more), not that
//!   it is positive.

mod common;
#[path = "../../../tests/support/needs.rs"]
mod needs;

use common::{
    free_port, metric, op_counts, repo_root, require_tools, run_peer_script, Sluice, TempDir,
};
use std::process::Command;
use std::time::Duration;

/// An XFS with reflinks mounted on `dir` (unmounted and detached when dropped).
struct ReflinkFs(std::path::PathBuf);

impl Drop for ReflinkFs {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo_root().join("tests/peers/reflink-fs.sh"))
            .arg("umount")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn linux_kernel_client_clones_copies_asynchronously_and_reads_sparse_files_on_xfs() {
    require_tools(&["qemu-system-x86_64", "sha256sum", "gcc", "filefrag"]);
    let work = TempDir::new("kernel-reflink");
    let xfs = work.path().join("xfs");
    let out = Command::new("bash")
        .arg(repo_root().join("tests/peers/reflink-fs.sh"))
        .arg("mount")
        .arg(&xfs)
        .output()
        .expect("run reflink-fs.sh");
    if out.status.code() == Some(77) {
        return needs::missing(
            "reflink",
            String::from_utf8_lossy(&out.stderr).trim(),
            "Run the test as root on a machine with loop devices (/dev/loop-control), mkfs.xfs \
             (apt-get install xfsprogs) and a kernel with XFS",
        );
    }
    assert!(out.status.success(), "reflink-fs.sh mount: {out:?}");
    let _fs = ReflinkFs(xfs.clone());
    let export = xfs.join("export");
    let dir = export.join("reflink");
    std::fs::create_dir_all(&dir).unwrap();
    // The files: a 40 MiB source (more than one 32 MiB COPY chunk), a sparse file (8 MiB,
    // 256 KiB of data at the start of each MiB) and a dense one of 8 MiB.
    let pattern = |seed: u64, len: usize| -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    std::fs::write(dir.join("src.bin"), pattern(1, 40 << 20)).unwrap();
    std::fs::write(dir.join("dense"), pattern(2, 8 << 20)).unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::create(dir.join("sparse")).unwrap();
        f.set_len(8 << 20).unwrap();
        for i in 0..8u64 {
            f.write_all_at(&pattern(3 + i, 256 << 10), i << 20).unwrap();
        }
    }
    let state = work.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let metrics = format!("127.0.0.1:{}", free_port());
    let server = Sluice::start(
        &export,
        &state,
        &["--no-root-squash", "--metrics", &metrics],
        &work.path().join("server.log"),
    );
    let tool = work.path().join("v42-tool");
    let gcc = Command::new("gcc")
        .args(["-static", "-O2", "-o"])
        .arg(&tool)
        .arg(repo_root().join("tests/peers/guest/v42-tool.c"))
        .output()
        .expect("gcc");
    assert!(gcc.status.success(), "gcc v42-tool.c: {gcc:?}");
    let results = work.path().join("kclient-run");
    let port = server.port.to_string();
    let export_s = server.export.to_str().unwrap().to_string();
    let guest = repo_root().join("tests/peers/guest/kernel-reflink.sh");
    let run = run_peer_script(
        "kclient.sh",
        &[
            &port,
            &port,
            &export_s,
            guest.to_str().unwrap(),
            "--file",
            tool.to_str().unwrap(),
        ],
        &[
            ("KC_VERS", "4.2"),
            ("KC_VERBOSE", "1"),
            ("KC_RUN_DIR", results.to_str().unwrap()),
            ("KC_TIMEOUT", "200"),
        ],
        Duration::from_secs(260),
    );
    let guest_log = std::fs::read_to_string(results.join("out/guest.log")).unwrap_or_default();
    assert!(
        run.status.success(),
        "kernel-reflink.sh failed: {}\n{guest_log}\n--- server log ---\n{}",
        run.describe(),
        server.log_text()
    );
    assert!(!guest_log.contains("FAIL"), "{guest_log}");

    // What the guest read is what the server's disk holds (and the copies are the source).
    let sha = |p: &std::path::Path| -> String {
        let out = Command::new("sha256sum").arg(p).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    let src_sum = sha(&dir.join("src.bin"));
    let sums = std::fs::read_to_string(results.join("out/sums.txt")).expect("sums.txt");
    let mut n = 0;
    for line in sums.lines() {
        let (sum, rel) = line.split_once("  ").expect("sha256  path");
        assert_eq!(
            sum,
            sha(&export.join(rel)),
            "{rel}: the guest read other bytes"
        );
        if rel.ends_with("copy.bin") || rel.ends_with("clone.bin") {
            assert_eq!(sum, src_sum, "{rel} is not the source");
        }
        n += 1;
    }
    assert_eq!(n, 4, "{sums}");
    // The clone shares the source's extents on the server's disk.
    let frag = Command::new("filefrag")
        .arg("-v")
        .arg(dir.join("clone.bin"))
        .output()
        .unwrap();
    let frag = String::from_utf8_lossy(&frag.stdout);
    assert!(
        frag.contains("shared"),
        "clone.bin shares no extent:\n{frag}"
    );

    let ops = op_counts(&metrics);
    let (clones, clone_errors) = ops.get("CLONE").copied().unwrap_or_default();
    assert!(
        clones >= 1 && clone_errors == 0,
        "CLONE {clones} calls, {clone_errors} errors: {ops:?}"
    );
    // The copy right after the mount was asynchronous: one COPY, one CB_OFFLOAD.
    let cb_offloads = metric(&metrics, "sluice_nfs4_cb_offload_total");
    assert_eq!(
        (ops["COPY"].0, cb_offloads),
        (1, 1),
        "the 40 MiB copy right after the mount was not one asynchronous COPY: {ops:?}"
    );
    // READ_PLUS: the server counted what the client says it sent.
    let counts = std::fs::read_to_string(results.join("out/counts.txt")).expect("counts.txt");
    let sent: u64 = counts
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("read_plus="))
        .and_then(|n| n.parse().ok())
        .expect("read_plus= in counts.txt");
    let (plus, plus_errors) = ops.get("READ_PLUS").copied().unwrap_or_default();
    assert_eq!(
        (plus, plus_errors),
        (sent, 0),
        "READ_PLUS: {counts} {ops:?}"
    );
    eprintln!("guest READ/READ_PLUS counts: {counts}");
}
