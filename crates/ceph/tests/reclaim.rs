//! Restart on Ceph, at the backend level: a sluice head killed without unmounting leaves its
//! MDS session, and the caps and locks of that session, behind; a new session with the same
//! uuid drops them at start (`ceph_start_reclaim`, see `sluice_ceph`'s `mount` notes), and
//! handles from before the restart resolve in the new session, whose cache is empty.
//!
//! | behaviour | test |
//! |---|---|
//! | a SIGKILLed holder's Ceph lock outlives it; a new session with another uuid changes nothing; one with its uuid frees the lock at once | `a_killed_holders_lock_is_freed_by_a_session_with_its_uuid_only` |
//! | a handle of a file deep in a tree resolves in a new session (looked up through the MDS), and is STALE once the file is gone | `handles_resolve_in_a_new_session_with_a_cold_cache` |
//! | a session's own timeout (`ceph_set_session_timeout`) delays the end of a dead session whose caps another client needs, never hastens it | `a_session_timeout_delays_the_end_of_a_dead_session` |
//!
//! The lock tests re-run their own binary as the lock holders (the child role of the same
//! test, chosen by [`HOLDER_ENV`]), so that a holder can be killed like a crashed server. Needs
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

const RECLAIM_TEST: &str = "a_killed_holders_lock_is_freed_by_a_session_with_its_uuid_only";

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
    let mut holder = Holder::start(&cluster, &dir, &uuid, None, RECLAIM_TEST);
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

const SESSION_TIMEOUT_TEST: &str = "a_session_timeout_delays_the_end_of_a_dead_session";

/// The file system's `session_timeout` for the test below: the least the monitors accept.
const FS_SESSION_TIMEOUT_SECS: u32 = 30;
/// One holder's own session timeout (`ceph_set_session_timeout`): far enough past the file
/// system's for the MDS's ticks (5 s) to tell the two ends apart on a busy machine, three
/// ticks. Measured at a load average of 15 with 60 s here: the untimed lock freed 32.4 s after
/// the kill, the timed one 62.1 s, each about 2 s past its timeout; every second of this one
/// is a second of the test's run.
const HOLDER_SESSION_TIMEOUT_SECS: u32 = 45;
/// How long both dead holders' locks may take to be freed after the kill: the longer timeout
/// and room for a slow machine. Far below the file system's `session_autoclose` (300 s).
const BOTH_FREED_WITHIN: Duration = Duration::from_secs(180);

/// What `ceph_set_session_timeout` does on Ceph 16, as measured: two heads hold a lock each and
/// are killed; another Ceph client then writes to both files, so the MDS must take caps back
/// from both dead sessions. The session without a timeout of its own goes stale at the file
/// system's `session_timeout`, and its lock is freed then; the one with a timeout is evicted
/// only when its timeout passes, and its lock freed then. So a timeout past the file system's
/// delays the end of a dead head's session, and one below it changes nothing: the MDS looks
/// at it only for a session already past `session_timeout`. (A dead session the MDS needs no
/// caps from is kept until `session_autoclose`, timeout or not: the MDS defers ending
/// sessions it is not waiting for.) This is why `sluice serve` does not set it from its lease.
#[test]
fn a_session_timeout_delays_the_end_of_a_dead_session() {
    if let Ok(spec) = std::env::var(HOLDER_ENV) {
        hold_lock_until_killed(&spec);
    }
    let cluster = common::Cluster::start("sessiontimeout");
    cluster.ceph(&[
        "fs",
        "set",
        "cephfs",
        "session_timeout",
        &FS_SESSION_TIMEOUT_SECS.to_string(),
    ]);
    let fuse = cluster.fuse();
    let root = Caller::with_cred(Cred::root());
    let admin = cluster.admin();
    let mut dirs = Vec::new();
    for name in ["timed", "untimed"] {
        let dir = cluster.fresh_dir(name);
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
        dirs.push(dir);
    }
    let open = |dir: &str| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(fuse.path(dir).join("locked"))
            .unwrap()
    };
    let files = [open(&dirs[0]), open(&dirs[1])];
    let pid = std::process::id();
    let mut timed = Holder::start(
        &cluster,
        &dirs[0],
        &format!("sluice-test-timed-{pid}"),
        Some(HOLDER_SESSION_TIMEOUT_SECS),
        SESSION_TIMEOUT_TEST,
    );
    let mut untimed = Holder::start(
        &cluster,
        &dirs[1],
        &format!("sluice-test-untimed-{pid}"),
        None,
        SESSION_TIMEOUT_TEST,
    );
    assert_refused(&files[0], "while the timed holder lives");
    assert_refused(&files[1], "while the untimed holder lives");
    timed.kill();
    untimed.kill();
    let t0 = Instant::now();
    // The other client's writes wait for the dead sessions' caps, each until the MDS gives up
    // on its session. Detached: they end by then, or with the unmount.
    for dir in &dirs {
        let p = fuse.path(dir).join("locked");
        std::thread::spawn(move || {
            let r = std::fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .and_then(|mut f| std::io::Write::write_all(&mut f, b"w"));
            eprintln!(
                "write to {} done after {:?}: {r:?}",
                p.display(),
                t0.elapsed()
            );
        });
    }
    // The order in which the two locks are freed (each polled until it is).
    let mut freed: Vec<usize> = Vec::new();
    while freed.len() < 2 && t0.elapsed() < BOTH_FREED_WITHIN {
        for (i, f) in files.iter().enumerate() {
            if !freed.contains(&i) && fcntl_lock(f, libc::F_WRLCK).is_ok() {
                eprintln!(
                    "{} holder's lock free {:?} after the kill",
                    ["timed", "untimed"][i],
                    t0.elapsed()
                );
                freed.push(i);
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(
        freed,
        [1, 0],
        "within {BOTH_FREED_WITHIN:?} of the kill: the untimed session's lock first (file \
         system session_timeout {FS_SESSION_TIMEOUT_SECS} s), then the timed one's (its \
         {HOLDER_SESSION_TIMEOUT_SECS} s)"
    );
    for f in &files {
        fcntl_lock(f, libc::F_UNLCK).unwrap();
    }
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

/// The child role: mount with the given uuid (and session timeout, in seconds, unless the
/// field is empty), lock the file, say so, wait to be killed.
fn hold_lock_until_killed(spec: &str) -> ! {
    let f: Vec<&str> = spec.split('\t').collect();
    let [conf, state, path, uuid, timeout, marker] = f[..] else {
        panic!("{HOLDER_ENV}: expected 6 tab-separated fields, got {spec:?}");
    };
    let mut config =
        sluice_ceph::CephFsConfig::new(sluice_ceph::CephConfig::new(conf, path), state);
    config.ceph.fs_name = Some("cephfs".into());
    config.ceph.uuid = Some(uuid.to_string());
    config.ceph.session_timeout =
        (!timeout.is_empty()).then(|| Duration::from_secs(timeout.parse().expect("seconds")));
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
    /// Re-runs this binary's test `test` (which must start by taking the child role when
    /// [`HOLDER_ENV`] is set) as the holder.
    fn start(
        cluster: &common::Cluster,
        path: &str,
        uuid: &str,
        session_timeout_secs: Option<u32>,
        test: &str,
    ) -> Holder {
        let marker = cluster.dir.join(format!("holder-{uuid}"));
        let timeout = session_timeout_secs.map_or(String::new(), |s| s.to_string());
        let spec = [
            cluster.conf.to_str().unwrap(),
            cluster.dir.join("state").to_str().unwrap(),
            path,
            uuid,
            &timeout,
            marker.to_str().unwrap(),
        ]
        .join("\t");
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([test, "--exact", "--nocapture"])
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
