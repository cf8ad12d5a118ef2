//! Records the git revision the binary is built from, for `sluice --version`.
//!
//! Asks git at build time; outside a checkout (a source tarball, a crate package) or without
//! git the revision is "unknown".
//!
//! Cargo reruns this script when a watched path changes, and treats a watched path that does
//! not exist as changed on every build: watching a missing file would rerun the script and
//! relink `sluice` on each `cargo build`. So only paths that exist are watched:
//!
//! - the worktree's `HEAD` (a checkout of another branch, a detached HEAD moving);
//! - the branch's loose ref file, `refs/heads/NAME`, when it exists: a commit rewrites it, and
//!   `git pack-refs` deletes it, which cargo sees as a change;
//! - when the branch's ref lives only in `packed-refs` (a fresh clone, after `git gc`), that
//!   file, and the nearest existing directory on the way to the loose ref's path: the next
//!   commit creates the loose file there, which cargo's scan of the directory sees. From then
//!   on the script watches the loose file alone.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let rev = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SLUICE_GIT_REV={rev}");
    for path in watched_paths() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// The git paths whose change means HEAD may have moved; every one of them exists.
fn watched_paths() -> Vec<PathBuf> {
    let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]).map(PathBuf::from) else {
        return Vec::new();
    };
    let mut paths = vec![git_dir.join("HEAD")];
    let (Some(common), Some(head_ref)) = (
        git(&["rev-parse", "--git-common-dir"]).map(PathBuf::from),
        git(&["symbolic-ref", "-q", "HEAD"]),
    ) else {
        // Detached HEAD: the HEAD file itself holds the commit.
        return existing(paths);
    };
    let common = if common.is_absolute() {
        common
    } else {
        // --git-common-dir is relative to the current directory when it is not absolute.
        std::env::current_dir().unwrap_or_default().join(common)
    };
    let loose = common.join(&head_ref);
    if loose.is_file() {
        paths.push(loose);
    } else {
        paths.push(common.join("packed-refs"));
        if let Some(dir) = nearest_existing_dir(&loose) {
            paths.push(dir);
        }
    }
    existing(paths)
}

/// The closest ancestor of `path` that is an existing directory.
fn nearest_existing_dir(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .skip(1)
        .find(|p| p.is_dir())
        .map(Path::to_path_buf)
}

fn existing(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    paths.into_iter().filter(|p| p.exists()).collect()
}

/// The trimmed output of a successful git command, or `None`.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8(out.stdout).ok()?.trim().to_string())
}
