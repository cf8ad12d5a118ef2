//! Issue #6, "nothing lost": network faults between client and server, made by `sluice link`
//! (1 ms RTT, 300 MB/s) in front of a healthy server.
//!
//! * **Reset** (`--reset-after N`): the proxy aborts *every* connection once N bytes have
//!   crossed it in one direction. The client reconnects through the same proxy and resends its
//!   outstanding calls with their XIDs; with N well above what the client keeps in flight each
//!   connection still moves the transfer forward, so a 64 MiB transfer needs several
//!   connections. Checked for a read (`sluice cat`) and a write (`sluice cp`).
//! * **Stall** (`--stall-after N --stall-for D`): each direction of every connection goes dark
//!   once, after N bytes. Over TCP the client must never retransmit on a live connection: a
//!   stall shorter than the major timeout (`--timeo`) costs time and nothing else (no
//!   retransmission, no reconnect, no "not responding"). A stall longer than it makes the
//!   client declare the server not responding, reconnect and resend: "not responding" and
//!   "OK" are logged exactly once for the episode. The transfer (48 MiB) is sized so that the
//!   second connection finishes it before reaching its own stall point (32 MiB).
//!
//! Every transfer's SHA-256 is checked against its source. Each scenario runs over NFSv3 and
//! over NFSv4.1 (`..._v4_1`), where the resent calls are COMPOUNDs on the same session slot
//! and sequence id (the server's slot cache makes them exactly-once) and a re-established
//! connection is bound to the session again before it carries new work.

mod common;

use common::*;
use std::time::{Duration, Instant};

const NOT_RESPONDING: &str = "not responding, still trying";
const OK: &str = "server 127.0.0.1 OK";
/// Backstop for one transfer (normally well under 10 s).
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(120);
/// The link the faults are added to.
const LINK: [&str; 4] = ["--rtt", "1ms", "--rate", "300MB/s"];

/// A server on fresh directories and a link in front of it, spoken to over `version`.
struct Setup {
    server: Sluice,
    link: Link,
    dirs: TempDir,
    version: &'static str,
}

impl Setup {
    fn new(tag: &str, version: &'static str, faults: &[&str]) -> Setup {
        let dirs = TempDir::new(&format!("{tag}-v{}", version.replace('.', "_")));
        let server = Sluice::start_in(&dirs);
        let mut flags = LINK.to_vec();
        flags.extend_from_slice(faults);
        let link = Link::start(server.port, &flags);
        Setup {
            server,
            link,
            dirs,
            version,
        }
    }

    /// The URL of `name` in the export, through the link.
    fn url(&self, name: &str) -> String {
        nfs_url_version(self.link.port, &self.server.export.join(name), self.version)
    }
}

/// What a `--stats` report says about the transport and one procedure.
#[derive(Debug)]
struct Report {
    retransmissions: u64,
    reconnects: u64,
    proc_retrans: u64,
}

fn report(stderr: &str, prog: &str, proc_: &str) -> Report {
    // "transport: tcp, 3 retransmissions, 2 reconnects"
    let t = stderr
        .lines()
        .find_map(|l| l.strip_prefix("transport: "))
        .unwrap_or_else(|| panic!("no transport line in --stats output:\n{stderr}"));
    let num_before = |word: &str| -> u64 {
        let f: Vec<&str> = t.split([',', ' ']).filter(|s| !s.is_empty()).collect();
        let i = f
            .iter()
            .position(|w| *w == word)
            .expect("field in transport line");
        f[i - 1].parse().expect("number")
    };
    let proc_retrans = stderr
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 5 && f[0] == prog && f[1] == proc_).then(|| f[4].parse().ok())?
        })
        .unwrap_or_else(|| panic!("no {prog} {proc_} line in --stats output:\n{stderr}"));
    Report {
        retransmissions: num_before("retransmissions"),
        reconnects: num_before("reconnects"),
        proc_retrans,
    }
}

/// `sluice cat` of a file of `len` bytes placed in the export; checks the output and returns
/// the client's stderr, the report and the time taken.
fn cat_through(
    setup: &Setup,
    len: usize,
    seed: u64,
    client_flags: &[&str],
) -> (String, Report, Duration) {
    let data = pattern(seed, len);
    let want = sha256_hex(&data);
    std::fs::write(setup.server.export.join("r.bin"), &data).unwrap();
    drop(data);
    let url = setup.url("r.bin");
    let mut args = vec!["cat", "--stats"];
    args.extend_from_slice(client_flags);
    args.push(&url);
    let started = Instant::now();
    let mut cat = SluiceProc::spawn(&args, &[]);
    let st = cat.wait_timeout(TRANSFER_TIMEOUT);
    let elapsed = started.elapsed();
    let err = cat.stderr_text();
    assert!(
        st.success(),
        "cat failed: {st}\n{err}\n--- link ---\n{}",
        setup.link.log_text()
    );
    assert_eq!(file_len(&cat.stdout), len as u64, "short output\n{err}");
    assert_eq!(sha256_file(&cat.stdout), want, "cat output differs\n{err}");
    let r = report(&err, stats_prog(setup.version), "READ");
    (err, r, elapsed)
}

/// `sluice cp` of `len` bytes from a local file into the export; checks the result.
fn cp_through(
    setup: &Setup,
    len: usize,
    seed: u64,
    client_flags: &[&str],
) -> (String, Report, Duration) {
    let data = pattern(seed, len);
    let want = sha256_hex(&data);
    let src = setup.dirs.path().join("src.bin");
    std::fs::write(&src, &data).unwrap();
    drop(data);
    let url = setup.url("w.bin");
    let mut args = vec!["cp", "--stats"];
    args.extend_from_slice(client_flags);
    args.push(src.to_str().unwrap());
    args.push(&url);
    let started = Instant::now();
    let mut cp = SluiceProc::spawn(&args, &[]);
    let st = cp.wait_timeout(TRANSFER_TIMEOUT);
    let elapsed = started.elapsed();
    let err = cp.stderr_text();
    assert!(
        st.success(),
        "cp failed: {st}\n{err}\n--- link ---\n{}",
        setup.link.log_text()
    );
    let dest = setup.server.export.join("w.bin");
    assert_eq!(sha256_file(&dest), want, "copied file differs\n{err}");
    let r = report(&err, stats_prog(setup.version), "WRITE");
    (err, r, elapsed)
}

// --- resets ------------------------------------------------------------------------------------

/// 64 MiB through a proxy that resets each connection after 16 MiB: at least three
/// reconnects, READs resent, contents intact.
#[test]
fn reset_every_16mib_during_read_loses_nothing() {
    reset_during_read("3");
}

#[test]
fn reset_every_16mib_during_read_loses_nothing_v4_1() {
    reset_during_read("4.1");
}

fn reset_during_read(version: &'static str) {
    let setup = Setup::new("link-reset-read", version, &["--reset-after", "16MiB"]);
    let (err, r, elapsed) = cat_through(&setup, 64 << 20, 11, &[]);
    eprintln!("reset during read: {elapsed:.1?}, {r:?}\n{err}");
    assert!(r.reconnects >= 3, "expected >= 3 reconnects: {r:?}\n{err}");
    assert!(r.proc_retrans > 0, "no READ was resent: {r:?}\n{err}");
    assert_rebound(version, &err);
}

/// The same for a write: WRITEs cut off mid-record are resent on the next connection.
#[test]
fn reset_every_16mib_during_write_loses_nothing() {
    reset_during_write("3");
}

#[test]
fn reset_every_16mib_during_write_loses_nothing_v4_1() {
    reset_during_write("4.1");
}

fn reset_during_write(version: &'static str) {
    let setup = Setup::new("link-reset-write", version, &["--reset-after", "16MiB"]);
    let (err, r, elapsed) = cp_through(&setup, 64 << 20, 12, &[]);
    eprintln!("reset during write: {elapsed:.1?}, {r:?}\n{err}");
    assert!(r.reconnects >= 3, "expected >= 3 reconnects: {r:?}\n{err}");
    assert!(r.proc_retrans > 0, "no WRITE was resent: {r:?}\n{err}");
    assert_rebound(version, &err);
}

/// Session trunking under resets: `--nconnect 2` over NFSv4.1, both connections cut every
/// 16 MiB; each is re-established and bound to the one session again, and the session is never
/// replaced for it (a reset is not a lost session).
#[test]
fn reset_every_16mib_during_write_over_two_trunked_connections_v4_1() {
    let setup = Setup::new("link-reset-trunk", "4.1", &["--reset-after", "16MiB"]);
    let (err, r, elapsed) = cp_through(&setup, 64 << 20, 17, &["--nconnect", "2"]);
    eprintln!("reset during write, nconnect 2: {elapsed:.1?}, {r:?}\n{err}");
    assert!(r.reconnects >= 2, "expected >= 2 reconnects: {r:?}\n{err}");
    assert_rebound("4.1", &err);
    let sessions = err
        .lines()
        .find(|l| l.starts_with("NFS4 ") && l.contains(" CREATE_SESSION "))
        .and_then(|l| l.split_whitespace().nth(2)?.parse::<u64>().ok());
    assert_eq!(sessions, Some(1), "a reset replaced the session:\n{err}");
}

/// Over NFSv4.1, a connection the client re-established was bound to the session again
/// (BIND_CONN_TO_SESSION, accepted) before it carried new work.
fn assert_rebound(version: &str, err: &str) {
    if version == "3" {
        return;
    }
    let line = err
        .lines()
        .find(|l| l.starts_with("NFS4 ") && l.contains(" BIND_CONN_TO_SESSION "))
        .unwrap_or_else(|| panic!("no BIND_CONN_TO_SESSION after the resets:\n{err}"));
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(2)
        .take(2)
        .map(|n| n.parse().expect("number"))
        .collect();
    assert!(
        f[0] >= 1 && f[1] == 0,
        "binds (calls, errors) {f:?}:\n{err}"
    );
}

// --- stalls ------------------------------------------------------------------------------------

/// Where each connection stalls, and the transfer size: the first connection stalls once
/// at 32 MiB; the reconnected one has < 32 MiB left to move, so it never stalls.
const STALL_AFTER: &str = "32MiB";
const STALL_FILE_BYTES: usize = 48 << 20;

/// A 4 s stall with a 2 s major timeout: one not-responding episode, one reconnect, the
/// outstanding calls resent, the data intact. (2 s rather than 1 s: on a loaded 2-core
/// machine a call on the healthy second connection must not reach the timeout by itself.)
#[test]
fn stall_longer_than_timeo_during_read_reconnects_once() {
    long_stall_during_read("3");
}

#[test]
fn stall_longer_than_timeo_during_read_reconnects_once_v4_1() {
    long_stall_during_read("4.1");
}

fn long_stall_during_read(version: &'static str) {
    let setup = Setup::new(
        "link-stall-read",
        version,
        &["--stall-after", STALL_AFTER, "--stall-for", "4s"],
    );
    let (err, r, elapsed) = cat_through(&setup, STALL_FILE_BYTES, 13, &["--timeo", "2"]);
    eprintln!("4 s stall during read, timeo 2 s: {elapsed:.1?}, {r:?}\n{err}");
    assert_long_stall_episode(&err, &r, elapsed);
}

#[test]
fn stall_longer_than_timeo_during_write_reconnects_once() {
    long_stall_during_write("3");
}

#[test]
fn stall_longer_than_timeo_during_write_reconnects_once_v4_1() {
    long_stall_during_write("4.1");
}

fn long_stall_during_write(version: &'static str) {
    let setup = Setup::new(
        "link-stall-write",
        version,
        &["--stall-after", STALL_AFTER, "--stall-for", "4s"],
    );
    let (err, r, elapsed) = cp_through(&setup, STALL_FILE_BYTES, 14, &["--timeo", "2"]);
    eprintln!("4 s stall during write, timeo 2 s: {elapsed:.1?}, {r:?}\n{err}");
    assert_long_stall_episode(&err, &r, elapsed);
}

fn assert_long_stall_episode(err: &str, r: &Report, elapsed: Duration) {
    assert_eq!(
        err.matches(NOT_RESPONDING).count(),
        1,
        "'not responding' must be logged exactly once for one stall episode:\n{err}"
    );
    assert_eq!(
        err.matches(OK).count(),
        1,
        "'OK' must be logged exactly once for one stall episode:\n{err}"
    );
    let nr = err.find(NOT_RESPONDING).unwrap();
    assert!(
        err.find(OK).unwrap() > nr,
        "'OK' before 'not responding':\n{err}"
    );
    assert_eq!(r.reconnects, 1, "one stall, one reconnect: {r:?}\n{err}");
    assert!(
        r.proc_retrans > 0,
        "nothing resent after the reconnect: {r:?}\n{err}"
    );
    // Bounded: a client stuck behind the stalled connection would hang here.
    assert!(
        elapsed < Duration::from_secs(30),
        "took {elapsed:?}: stuck behind the stall?"
    );
}

/// A 2 s stall with a 5 s major timeout: the transfer just waits. Over TCP nothing is
/// retransmitted on a live connection, and the server is not declared not responding.
#[test]
fn stall_shorter_than_timeo_causes_no_retransmission() {
    short_stall("3");
}

#[test]
fn stall_shorter_than_timeo_causes_no_retransmission_v4_1() {
    short_stall("4.1");
}

fn short_stall(version: &'static str) {
    let setup = Setup::new(
        "link-stall-short",
        version,
        &["--stall-after", "16MiB", "--stall-for", "2s"],
    );
    let (err, r, elapsed) = cat_through(&setup, 32 << 20, 15, &["--timeo", "5"]);
    eprintln!("2 s stall during read, timeo 5 s: {elapsed:.1?}, {r:?}\n{err}");
    assert_short_stall_harmless(&err, &r, elapsed);
    let (err, r, elapsed) = cp_through(&setup, 32 << 20, 16, &["--timeo", "5"]);
    eprintln!("2 s stall during write, timeo 5 s: {elapsed:.1?}, {r:?}\n{err}");
    assert_short_stall_harmless(&err, &r, elapsed);
}

fn assert_short_stall_harmless(err: &str, r: &Report, elapsed: Duration) {
    assert!(
        elapsed >= Duration::from_millis(1900),
        "finished in {elapsed:?}: the stall never happened, the test proves nothing"
    );
    assert_eq!(
        r.retransmissions, 0,
        "retransmitted on a live TCP connection: {r:?}\n{err}"
    );
    assert_eq!(
        r.reconnects, 0,
        "reconnected during a short stall: {r:?}\n{err}"
    );
    assert!(
        !err.contains(NOT_RESPONDING),
        "'not responding' for a stall shorter than timeo:\n{err}"
    );
}
