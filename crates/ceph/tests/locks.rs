//! Byte-range locks pushed down to Ceph (`CephFs::set_lock`, `ceph_ll_setlk`) conflict with
//! fcntl locks taken by another Ceph client, ceph-fuse, both ways. Needs root, /dev/fuse and the
//! ceph packages.

mod common;

use sluice_vfs::{
    Caller, CreateHow, Cred, FileSystem, FsError, LockConflict, LockError, LockType, SetAttr,
};
use std::os::fd::AsRawFd;

/// fcntl(F_SETLK) of the whole file: Ok, or the errno.
fn fcntl_lock(f: &std::fs::File, kind: i32) -> Result<(), i32> {
    // SAFETY: zeroed is a valid flock; a live descriptor.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    // SAFETY: a live descriptor and a flock on the stack.
    if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLK, &fl) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

#[test]
fn locks_conflict_between_sluice_and_ceph_fuse_both_ways() {
    let cluster = common::Cluster::start("locks");
    let fuse = cluster.fuse();
    let mnt = fuse.root().to_path_buf();

    let fs = cluster.admin();
    let root = Caller::with_cred(Cred::root());
    let made = fs
        .create(
            &root,
            &fs.root_handle(),
            b"locked",
            CreateHow::Unchecked(SetAttr {
                mode: Some(0o644),
                ..SetAttr::default()
            }),
        )
        .unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(mnt.join("locked"))
        .unwrap();

    // Held through sluice: ceph-fuse's fcntl is refused; released: granted.
    let held = fs
        .set_lock(&made.fh, libc::F_WRLCK as i16, 0, 0, 1)
        .expect("a lock on a file nobody locks");
    let e = fcntl_lock(&file, libc::F_WRLCK).unwrap_err();
    assert!(e == libc::EAGAIN || e == libc::EACCES, "errno {e}");
    drop(held);
    fcntl_lock(&file, libc::F_WRLCK).expect("granted once sluice released its lock");

    // Held through ceph-fuse: sluice's lock is refused; released: granted.
    assert_eq!(
        fs.set_lock(&made.fh, libc::F_RDLCK as i16, 0, 0, 2).err(),
        Some(FsError::Delay)
    );
    fcntl_lock(&file, libc::F_UNLCK).unwrap();
    let again = fs.set_lock(&made.fh, libc::F_WRLCK as i16, 0, 0, 3);
    assert!(again.is_ok(), "granted once ceph-fuse released its lock");
}

/// The `FileSystem` lock calls the NFSv4 server makes: pushed into Ceph on one open file per
/// (file, owner), seen by ceph-fuse, refused by ceph-fuse's lock with the lock in the way, and
/// gone (the open file closed) at release.
#[test]
fn pushed_down_locks_conflict_with_ceph_fuse_and_go_at_release() {
    let cluster = common::Cluster::start("pushed");
    let fuse = cluster.fuse();
    let mnt = fuse.root().to_path_buf();

    let fs = cluster.admin();
    assert!(!fs.grants_delegations());
    let root = Caller::with_cred(Cred::root());
    let made = fs
        .create(
            &root,
            &fs.root_handle(),
            b"pushed",
            CreateHow::Unchecked(SetAttr {
                mode: Some(0o644),
                ..SetAttr::default()
            }),
        )
        .unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(mnt.join("pushed"))
        .unwrap();
    let key = fs.state_key(&made.fh);

    // Two ranges of one owner, one open file; ceph-fuse is refused where they are.
    fs.lock(&made.fh, 7, LockType::Write, 0, 10).unwrap();
    fs.lock(&made.fh, 7, LockType::Read, 100, 0).unwrap();
    assert_eq!(fs.held_lock_files(), 1);
    let e = fcntl_lock(&file, libc::F_WRLCK).unwrap_err();
    assert!(e == libc::EAGAIN || e == libc::EACCES, "errno {e}");
    // Another owner of this mount conflicts too, and LOCKT's question names the lock.
    assert!(matches!(
        fs.lock(&made.fh, 8, LockType::Read, 5, 1),
        Err(LockError::Conflict(LockConflict {
            kind: LockType::Write,
            ..
        }))
    ));
    assert_eq!(
        fs.held_lock_files(),
        1,
        "a refused first lock keeps no open file"
    );
    let t = fs.test_lock(&made.fh, 8, LockType::Read, 200, 1).unwrap();
    assert_eq!(t, None, "read locks share");
    assert!(fs
        .test_lock(&made.fh, 8, LockType::Write, 200, 1)
        .unwrap()
        .is_some());
    // Unlocked in part, then released: ceph-fuse gets the whole file.
    fs.unlock(&made.fh, 7, 0, 10).unwrap();
    assert!(fs
        .test_lock(&made.fh, 8, LockType::Write, 0, 10)
        .unwrap()
        .is_none());
    fs.release_locks(&key, 7);
    assert_eq!(fs.held_lock_files(), 0);
    fcntl_lock(&file, libc::F_WRLCK).expect("granted once the owner's locks are released");

    // The reverse: ceph-fuse's lock refuses the pushed-down one and is named.
    let refused = fs.lock(&made.fh, 9, LockType::Read, 0, 1);
    assert!(
        matches!(
            refused,
            Err(LockError::Conflict(LockConflict {
                kind: LockType::Write,
                ..
            }))
        ),
        "{refused:?}"
    );
    assert_eq!(fs.held_lock_files(), 0);
    fcntl_lock(&file, libc::F_UNLCK).unwrap();
    fs.lock(&made.fh, 9, LockType::Write, 0, 0).unwrap();
    fs.release_lock_owner(9);
    assert_eq!(fs.held_lock_files(), 0);
    fcntl_lock(&file, libc::F_WRLCK).expect("granted once the owner is released");
}
