//! Records the git revision the binary is built from, for `sluice --version`.
//!
//! Asks git at build time; outside a checkout (a source tarball, a crate package) or without
//! git the revision is "unknown". Cargo reruns this when HEAD moves (a commit, a checkout):
//! the worktree's HEAD file and the branch ref it points to are watched.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let rev = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SLUICE_GIT_REV={rev}");
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]).map(PathBuf::from) {
        println!("cargo:rerun-if-changed={}", dir.join("HEAD").display());
        if let (Some(common), Some(head_ref)) = (
            git(&["rev-parse", "--git-common-dir"]).map(PathBuf::from),
            git(&["symbolic-ref", "-q", "HEAD"]),
        ) {
            let common = if common.is_absolute() {
                common
            } else {
                // --git-common-dir is relative to the current directory when it is not absolute.
                std::env::current_dir().unwrap_or_default().join(common)
            };
            println!(
                "cargo:rerun-if-changed={}",
                common.join(&head_ref).display()
            );
            println!(
                "cargo:rerun-if-changed={}",
                common.join("packed-refs").display()
            );
        }
    }
}

/// The trimmed output of a successful git command, or `None`.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8(out.stdout).ok()?.trim().to_string())
}
