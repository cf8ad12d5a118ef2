//! The conformance suite against the two backends of `sluice_vfs`: LocalFs (needs root: it
//! switches credentials) and MemFs, and MemFs against LocalFs in the randomized comparison.

use sluice_fstest::{compare_with_local, run_suite, run_suite_with_macs};
use sluice_vfs::memfs::MemFsConfig;
use sluice_vfs::{FileSystem, LocalFs, LocalFsConfig, MemFs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

/// Fresh LocalFs exports under one directory removed at the end.
struct Locals {
    base: PathBuf,
    next: AtomicU32,
}

impl Locals {
    fn new(tag: &str) -> Locals {
        let base = PathBuf::from(format!("/tmp/sluice-fstest-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        Locals {
            base,
            next: AtomicU32::new(0),
        }
    }

    fn make(&self) -> Box<dyn FileSystem> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let dir = self.base.join(format!("e{n}"));
        std::fs::create_dir_all(&dir).unwrap();
        Box::new(LocalFs::new(LocalFsConfig::new(&dir).state_dir(self.base.join("state"))).unwrap())
    }
}

impl Drop for Locals {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

#[test]
fn localfs_passes_the_backend_suite() {
    let l = Locals::new("local");
    run_suite_with_macs(&|| l.make());
}

#[test]
fn memfs_passes_the_backend_suite() {
    run_suite(&|| Box::new(MemFs::new(MemFsConfig::default())));
}

/// Seeds tried by default: enough to reach every operation against every kind of name
/// (missing, file, directory) many times, in about a second. MemFs stands in for the real
/// backend in tests and the simulator, so where the two differ those tests test something else.
const MEM_SEEDS: std::ops::Range<u64> = 1..25;

#[test]
fn memfs_matches_localfs_on_random_operations() {
    let l = Locals::new("cmp");
    compare_with_local(
        &|| Box::new(MemFs::new(MemFsConfig::default())),
        &|| l.make(),
        sluice_testkit::seed::seeds("memfs_matches_localfs_on_random_operations", MEM_SEEDS),
    );
}

/// LocalFs's `xattr_support` is what the directory's file system does: the suite's xattr case
/// takes its supported branch exactly where `setxattr(2)` of a user attribute works.
#[test]
fn localfs_reports_user_xattr_support_as_its_file_system_has_it() {
    let l = Locals::new("xattr");
    let fs = l.make();
    let probe = l.base.join("probe");
    std::fs::write(&probe, b"").unwrap();
    let path = std::ffi::CString::new(probe.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: NUL-terminated strings, a one-byte value.
    let r = unsafe {
        libc::setxattr(
            path.as_ptr(),
            c"user.p".as_ptr(),
            b"1".as_ptr().cast(),
            1,
            0,
        )
    };
    assert_eq!(fs.xattr_support(), r == 0);
}
