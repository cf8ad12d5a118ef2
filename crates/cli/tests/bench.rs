//! `sluice bench` (the benchmarks' load generator) against `sluice serve` over NFSv3 and
//! NFSv4.1 / 4.2, and against nfs-ganesha over NFSv4.1 (what `bench/*.sh --nfs-version 4.1`
//! runs): each workload moves the bytes it reports, in the calls it reports, on the version it
//! names, and `write` leaves the file it claims to have written. Tiny sizes: this checks the
//! tool, it measures nothing.
mod common;
mod servers;

use common::{nfs_url, Sluice, SluiceProc, TempDir};
use servers::{Ganesha, Server};
use std::path::Path;
use std::time::Duration;

/// 3 MiB and 5 bytes: the last call is a short one.
const SIZE_BYTES: u64 = (3 << 20) + 5;
const BLOCK_BYTES: u64 = 1 << 20;
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `sluice bench ARGS URL`; returns its stdout line, or its stderr if it failed.
fn bench(args: &[&str], url: &str) -> Result<String, String> {
    let mut argv = vec!["bench"];
    argv.extend_from_slice(args);
    argv.push(url);
    let mut p = SluiceProc::spawn(&argv, &[]);
    let status = p.wait_timeout(RUN_TIMEOUT);
    let out = std::fs::read_to_string(&p.stdout).unwrap_or_default();
    if status.success() {
        Ok(out.trim().to_string())
    } else {
        Err(p.stderr_text())
    }
}

fn ok(args: &[&str], url: &str) -> String {
    bench(args, url).unwrap_or_else(|e| panic!("sluice bench {args:?} {url} failed: {e}"))
}

/// The value of `key` in a `k=v k=v` line.
fn kv<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

/// What `bench --workload write` sends: every block starts the same pattern afresh.
fn written_byte(offset: u64) -> u8 {
    ((offset % BLOCK_BYTES) * 31 + 7) as u8
}

fn url(port: u16, path: &Path, version: &str) -> String {
    match version {
        "3" => nfs_url(port, path),
        v => format!(
            "nfs://127.0.0.1{}?version={v}&nfsport={port}",
            path.display()
        ),
    }
}

/// Runs the three workloads on the file at `path` (on disk) through `u` and checks them.
fn workloads_move_what_they_report(path: &Path, u: &str, version: &str) {
    // A longer file first: `write` must truncate it, not write over its start.
    std::fs::write(path, vec![0xEEu8; 5 << 20]).unwrap();
    let size = SIZE_BYTES.to_string();

    let w = ok(
        &[
            "--workload",
            "write",
            "--size",
            &size,
            "--depth",
            "4",
            "--shuffle",
        ],
        u,
    );
    assert_eq!(kv(&w, "nfs_version"), version, "{w}");
    assert_eq!(kv(&w, "bytes"), size, "{w}");
    assert_eq!(kv(&w, "calls"), "4", "{w}");
    assert_eq!(kv(&w, "nconnect"), "1", "{w}");
    let data = std::fs::read(path).unwrap();
    assert_eq!(data.len() as u64, SIZE_BYTES, "[{u}] size after write");
    let wrong = (0..SIZE_BYTES).find(|&o| data[o as usize] != written_byte(o));
    assert_eq!(wrong, None, "[{u}] first wrong byte after write");

    let r = ok(&["--workload", "read", "--depth", "4"], u);
    assert_eq!(kv(&r, "nfs_version"), version, "{r}");
    assert_eq!(
        kv(&r, "bytes"),
        size,
        "read stops at the end of the file: {r}"
    );
    assert_eq!(kv(&r, "calls"), "4", "{r}");

    let rr = ok(
        &["--workload", "randread", "--block", "4k", "--count", "9"],
        u,
    );
    assert_eq!(kv(&rr, "nfs_version"), version, "{rr}");
    assert_eq!(kv(&rr, "calls"), "9", "{rr}");
    assert_eq!(kv(&rr, "bytes"), (9 * 4096).to_string(), "{rr}");
}

#[test]
fn each_workload_moves_what_it_reports_over_v3_and_v4() {
    let dirs = TempDir::new("bench");
    let server = Sluice::start_in(&dirs);
    for version in ["3", "4.1", "4.2"] {
        let path = server
            .export
            .join(format!("f{}", version.replace('.', "_")));
        workloads_move_what_they_report(&path, &url(server.port, &path, version), version);
    }
}

#[test]
fn each_workload_moves_what_it_reports_from_ganesha_over_v4_1() {
    let g = Ganesha::start();
    // ganesha's pseudo path is the export's path: the v3 URL with another version.
    let u = g.url("/f").replace("version=3", "version=4.1");
    workloads_move_what_they_report(&g.export_dir().join("f"), &u, "4.1");
}

#[test]
fn version_4_takes_the_highest_minor_and_nconnect_over_v4_is_session_trunking() {
    let dirs = TempDir::new("bench-v4");
    let server = Sluice::start_in(&dirs);
    let path = server.export.join("g");
    std::fs::write(&path, vec![1u8; 8192]).unwrap();

    let r = ok(
        &["--workload", "read", "--block", "4k"],
        &url(server.port, &path, "4"),
    );
    assert_eq!(kv(&r, "nfs_version"), "4.2", "{r}");
    assert_eq!(kv(&r, "bytes"), "8192", "{r}");

    // Session trunking: the line says how many connections the session really used (sluice
    // serve binds them all), and the calls and bytes are the same as over one.
    let r = ok(
        &["--workload", "read", "--block", "1k", "--nconnect", "2"],
        &url(server.port, &path, "4.1"),
    );
    assert_eq!(kv(&r, "nconnect"), "2", "{r}");
    assert_eq!(kv(&r, "nfs_version"), "4.1", "{r}");
    assert_eq!(kv(&r, "bytes"), "8192", "{r}");
    assert_eq!(kv(&r, "calls"), "8", "{r}");

    // A file that is not there is an error naming the URL, not a hang.
    let missing = url(server.port, &server.export.join("nope"), "4.1");
    let e = bench(&["--workload", "read"], &missing).expect_err("reading a missing file");
    assert!(e.contains("nope"), "{e}");
}
