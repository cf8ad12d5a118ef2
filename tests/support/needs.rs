//! The test suite's one skip policy (docs/testing.md), shared by every crate's tests through
//! `#[path = "../../../tests/support/needs.rs"] mod needs;`.
//!
//! A test that needs something of its machine (root to mount a tmpfs, loop devices, an XFS with
//! reflinks, tshark, chattr) and does not find it calls [`missing`]. By default that FAILS the
//! test, with what is missing and what to install: the machine that runs the suite is root and
//! has everything, so a missing piece there is a broken set-up, and a test that returned early
//! would pass while proving nothing.
//!
//! Whoever runs the suite where a need cannot be met says so on purpose, by name, in
//! `SLUICE_TEST_SKIP` (comma-separated, e.g. `SLUICE_TEST_SKIP=loop,reflink`). A need named
//! there skips the test, visibly: one `SKIPPED` line goes straight to the terminal (past the
//! test harness's output capture) naming the test, the need and why it is missing.
//!
//! The needs, as named in `SLUICE_TEST_SKIP`:
//!
//! | need      | what it takes                                                        |
//! |-----------|----------------------------------------------------------------------|
//! | `tmpfs`   | root, to mount a tmpfs of a chosen size                              |
//! | `loop`    | root, loop devices and mkfs.ext4 (e2fsprogs), to mount an ext4 image |
//! | `reflink` | root, loop devices, mkfs.xfs (xfsprogs) and a kernel with XFS        |
//! | `tshark`  | tshark (Debian package `tshark`)                                     |
//! | `chattr`  | root and chattr (e2fsprogs) on a file system with the immutable flag |
//! | `fincore` | util-linux's fincore                                                 |
//! | `bbr`     | a kernel with the tcp_bbr congestion control (modprobe tcp_bbr)      |

#![allow(dead_code)]

use std::io::Write;

/// The environment variable listing the needs the runner accepts as missing.
pub const SKIP_VAR: &str = "SLUICE_TEST_SKIP";

/// The calling test needs `need` and this machine lacks it (`why`; `install` says what to do).
/// Fails the test unless `SLUICE_TEST_SKIP` names `need`; then prints one SKIPPED line and
/// returns, and the caller returns at once.
#[track_caller]
pub fn missing(need: &str, why: &str, install: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string();
    if skipped(need) {
        // Straight to the terminal: libtest captures eprintln! of passing tests.
        let _ = writeln!(
            std::io::stderr().lock(),
            "SKIPPED {test}: needs {need}: {why} ({SKIP_VAR} names it)"
        );
        return;
    }
    panic!(
        "{test} needs {need}: {why}. {install}. To skip it on purpose on a machine that cannot \
         have it, set {SKIP_VAR}={need} (docs/testing.md)"
    );
}

/// Whether the runner named `need` in `SLUICE_TEST_SKIP`.
pub fn skipped(need: &str) -> bool {
    std::env::var(SKIP_VAR)
        .map(|v| v.split(',').any(|n| n.trim() == need))
        .unwrap_or(false)
}
