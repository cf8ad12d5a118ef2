//! Restart on Ceph, at the backend level: a sluice head killed without unmounting leaves its
//! MDS session, and the caps and locks of that session, behind; a new session with the same
//! uuid drops them at start (`ceph_start_reclaim`, see `sluice_ceph`'s `mount` notes), and
//! handles from before the restart resolve in the new session, whose cache is empty.
//!
//! | behaviour | test |
//! |---|---|
//! | a SIGKILLed holder's Ceph lock outlives it; a new session with another uuid changes nothing; one with its uuid frees the lock at once | `a_killed_holders_lock_is_freed_by_a_session_with_its_uuid_only` |
//! | a handle of a file deep in a tree resolves in a new session (looked up through the MDS), and is STALE once the file is gone | `handles_resolve_in_a_new_session_with_a_cold_cache` |
//!
//! The first test re-runs its own binary as the lock holder (the child role of the same test,
//! chosen by [`HOLDER_ENV`]), so that the holder can be killed like a crashed server. Needs
//! root, /dev/fuse, ceph-fuse and the ceph packages.

mod common;

use sluice_ceph::{CephFs, Reclaim};
use sluice_vfs::{Caller, CreateHow, Cred, FileSystem, FsError, SetAttr};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the re-run child: what it is to lock and where it says it holds the lock.
const HOLDER_ENV: &str = "SLUICE_CEPH_RECLAIM_HOLDER";

/// Bound on waiting for the child to mount and lock (a mount takes well under a second).
const HOLDER_START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the reclaimed lock may take to show as free to ceph-fuse: the MDS drops the old
/// session's locks while answering the reclaim, so the first try normally succeeds; the bound
/// only absorbs a slow machine. It is far below the MDS's own expiry of a dead session
/// (`session_timeout` 60 s, `session_autoclose` 300 s), so a success cannot be that expiry.
const FREED_WITHIN: Duration = Duration::from_secs(10);

#[test]
fn a_killed_holders_lock_is_freed_by_a_session_with_its_uuid_only() {
    if let Ok(spec) = std::env::var(HOLDER_ENV) {
        hold_lock_until_killed(&spec);
    }
    let cluster = common::Cluster::start("reclaim");
    let fuse = cluster.fuse();
    let dir = cluster.fresh_dir("r");
    let admin = cluster.admin();
    let root = Caller::with_cred(Cred::root());
    let d = admin
        .lookup(&root, &admin.root_handle(), &dir.as_bytes()[1..])
        .unwrap();
    admin
        .create(
            &root,
            &d.fh,
            b"locked",
            CreateHow::Unchecked(SetAttr {
                mode: Some(0o666),
                ..SetAttr::default()
            }),
        )
        .unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(fuse.path(&dir).join("locked"))
        .unwrap();

    let uuid = format!("sluice-test-reclaim-{}", std::process::id());
    let mut holder = Holder::start(&cluster, &dir, &uuid);
    assert_refused(&file, "while the holder lives");
    holder.kill();
    assert_refused(
        &file,
        "after the holder was killed: its session still holds the lock",
    );

    // Another uuid reclaims nothing: the dead session and its lock stay.
    let mut other = cluster.config(&dir);
    other.ceph.uuid = Some(format!("{uuid}-other"));
    let other = CephFs::new(other).expect("mount with another uuid");
    assert_eq!(other.mount().reclaim(), Reclaim::NothingLeft);
    assert_refused(&file, "after a session with another uuid started");
    drop(other);

    // The holder's uuid: the MDS drops the dead session, and its lock with it.
    let mut same = cluster.config(&dir);
    same.ceph.uuid = Some(uuid.clone());
    let restarted = CephFs::new(same).expect("mount with the holder's uuid");
    assert_eq!(restarted.mount().reclaim(), Reclaim::Reclaimed);
    assert_eq!(restarted.mount().uuid(), Some(uuid.as_str()));
    let t0 = Instant::now();
    let freed = loop {
        match fcntl_lock(&file, libc::F_WRLCK) {
            Ok(()) => break true,
            Err(_) if t0.elapsed() < FREED_WITHIN => std::thread::sleep(Duration::from_millis(100)),
            Err(_) => break false,
        }
    };
    assert!(
        freed,
        "the dead holder's lock was not freed by the reclaim (still refused after {FREED_WITHIN:?})"
    );
    eprintln!("lock free {:?} after the reclaiming mount", t0.elapsed());
    fcntl_lock(&file, libc::F_UNLCK).unwrap();

    // The restarted head's own lock works as before.
    let h = restarted
        .lookup(&root, &restarted.root_handle(), b"locked")
        .unwrap();
    let lock = restarted
        .set_lock(&h.fh, libc::F_WRLCK as i16, 0, 0, 7)
        .expect("the restarted head locks the file");
    assert_refused(&file, "while the restarted head holds its lock");
    drop(lock);
}

#[test]
fn handles_resolve_in_a_new_session_with_a_cold_cache() {
    let cluster = common::Cluster::start("handles");
    let dir = cluster.fresh_dir("h");
    let root = Caller::with_cred(Cred::root());
    let first = cluster.export(&dir);
    let mut at = first.root_handle();
    for name in ["a", "b", "c", "d"] {
        at = first
            .mkdir(&root, &at, name.as_bytes(), &SetAttr::default())
            .unwrap_or_else(|e| panic!("mkdir {name}: {:?}", e.0))
            .fh;
    }
    let made = first
        .create(
            &root,
            &at,
            b"deep",
            CreateHow::Unchecked(SetAttr::default()),
        )
        .unwrap();
    let deep_dir = at;
    drop(first);

    // A new libcephfs client (as after a restart) has only the export root cached: the handle
    // is resolved through the MDS by inode number.
    let second = cluster.export(&dir);
    let attr = second
        .getattr(&made.fh)
        .expect("a handle from before the restart");
    assert_eq!(attr.fileid, made.attr.fileid);
    // The directory's old handle works too, and a lookup in it gives the same handle as before.
    let again = second
        .lookup(&root, &deep_dir, b"deep")
        .expect("a lookup in a directory by its handle from before the restart");
    assert_eq!(
        again.fh, made.fh,
        "one object, one handle, in every session"
    );
    drop(second);

    // Gone: STALE, in a fresh session too.
    let third = cluster.export(&dir);
    third.remove(&root, &deep_dir, b"deep").unwrap();
    drop(third);
    let fourth = cluster.export(&dir);
    assert_eq!(fourth.getattr(&made.fh).err(), Some(FsError::Stale));
}

/// The child role: mount with the given uuid, lock the file, say so, wait to be killed.
fn hold_lock_until_killed(spec: &str) -> ! {
    let f: Vec<&str> = spec.split('\t').collect();
    let [conf, state, path, uuid, marker] = f[..] else {
        panic!("{HOLDER_ENV}: expected 5 tab-separated fields, got {spec:?}");
    };
    let mut config =
        sluice_ceph::CephFsConfig::new(sluice_ceph::CephConfig::new(conf, path), state);
    config.ceph.fs_name = Some("cephfs".into());
    config.ceph.uuid = Some(uuid.to_string());
    let fs = CephFs::new(config).expect("the holder mounts");
    let root = Caller::with_cred(Cred::root());
    let f = fs.lookup(&root, &fs.root_handle(), b"locked").unwrap();
    let lock = fs
        .set_lock(&f.fh, libc::F_WRLCK as i16, 0, 0, 1)
        .expect("the holder locks the file");
    std::fs::write(marker, b"locked").unwrap();
    let _held = (fs, lock);
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// The lock-holding child process; killed on drop.
struct Holder(Child);

impl Holder {
    fn start(cluster: &common::Cluster, path: &str, uuid: &str) -> Holder {
        let marker = cluster.dir.join(format!("holder-{uuid}"));
        let spec = [
            cluster.conf.to_str().unwrap(),
            cluster.dir.join("state").to_str().unwrap(),
            path,
            uuid,
            marker.to_str().unwrap(),
        ]
        .join("\t");
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "a_killed_holders_lock_is_freed_by_a_session_with_its_uuid_only",
                "--exact",
                "--nocapture",
            ])
            .env(HOLDER_ENV, spec)
            .stdin(Stdio::null())
            .spawn()
            .expect("re-run the test binary as the holder");
        let t0 = Instant::now();
        while !marker.exists() {
            if let Some(st) = child.try_wait().unwrap() {
                panic!("the holder exited ({st}) before locking");
            }
            assert!(
                t0.elapsed() < HOLDER_START_TIMEOUT,
                "the holder did not lock within {HOLDER_START_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Holder(child)
    }

    /// SIGKILL: no unmount, no unlock, as in a crash.
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.kill();
    }
}

/// ceph-fuse's F_SETLK of the whole file is refused (someone else holds a lock).
fn assert_refused(file: &std::fs::File, when: &str) {
    match fcntl_lock(file, libc::F_WRLCK) {
        Err(e) => assert!(e == libc::EAGAIN || e == libc::EACCES, "{when}: errno {e}"),
        Ok(()) => panic!("{when}: ceph-fuse got the lock, so nobody held it"),
    }
}

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
