//! NFSv4.1 locks pushed down to Ceph, and no delegations on a Ceph export (issue 26): `sluice
//! serve` exporting `ceph:/vol` of a private one-node cluster (tests/peers/ceph.sh) beside a
//! local directory, the sluice v4 client library as the NFS client, and ceph-fuse as another
//! Ceph client taking `fcntl` locks on the same files.
//!
//! - A LOCK through sluice makes ceph-fuse's conflicting F_SETLK fail (EAGAIN); after LOCKU it
//!   succeeds.
//! - The reverse: while ceph-fuse holds a write lock, the NFS LOCK is NFS4ERR_DENIED and LOCKT
//!   reports the conflict; once ceph-fuse unlocks, the LOCK is granted.
//! - A client whose state the server drops (the same client owner coming back with a new
//!   verifier: a client reboot, RFC 8881 §18.35.5) leaves no Ceph lock behind.
//! - An OPEN on the Ceph export gets no delegation; the same OPEN on the local export does.
//!
//! Needs root, /dev/fuse and the ceph packages (scripts/install-deps.sh).

mod common;
mod servers;

use common::ceph::CephCluster;
use common::{free_port, TempDir};
use sluice_client::url::NfsUrl;
use sluice_client::v4::{Client, CreateMode, Minor, V4Options};
use sluice_client::ClientOptions;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const ALL: u64 = u64::MAX;
const LIMIT: Duration = Duration::from_secs(30);

/// The cluster, a ceph-fuse mount of its root, and `sluice serve` of `ceph:/vol` and a local
/// directory; all stopped on drop.
struct Rig {
    server: Option<Child>,
    port: u16,
    local: PathBuf,
    /// Dropped after the server (the `Drop` below kills it first).
    ceph: CephCluster,
}

impl std::ops::Deref for Rig {
    type Target = CephCluster;
    fn deref(&self) -> &CephCluster {
        &self.ceph
    }
}

impl Rig {
    fn start() -> Rig {
        let ceph = CephCluster::start_in(TempDir::new("ceph-locks"), false);
        let mut rig = Rig {
            local: ceph.dir.path().join("local"),
            server: None,
            port: free_port(),
            ceph,
        };
        let conf = rig.conf.clone();
        std::fs::create_dir_all(&rig.local).unwrap();
        let exports = rig.dir.path().join("exports");
        std::fs::write(
            &exports,
            format!(
                "{} *(rw,no_root_squash,insecure)\n\
                 ceph:/vol *(rw,no_root_squash,insecure,ceph_conf={},ceph_fs=cephfs)\n",
                rig.local.display(),
                conf.display()
            ),
        )
        .unwrap();
        let out = std::fs::File::create(rig.dir.path().join("serve.out")).unwrap();
        let err = std::fs::File::create(rig.dir.path().join("serve.err")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("serve")
            .arg("--exports")
            .arg(&exports)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", rig.port))
            .arg("--state-dir")
            .arg(rig.dir.path().join("state"))
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn sluice serve");
        rig.server = Some(child);
        let deadline = Instant::now() + LIMIT;
        loop {
            let banner = std::fs::read_to_string(rig.dir.path().join("serve.out")).unwrap();
            if banner.contains("ceph:/vol is /vol of file system cephfs") {
                return rig;
            }
            let errors = std::fs::read_to_string(rig.dir.path().join("serve.err")).unwrap();
            if let Some(st) = rig.server.as_mut().unwrap().try_wait().unwrap() {
                panic!("sluice serve exited ({st}): {errors}");
            }
            assert!(
                Instant::now() < deadline,
                "no Ceph banner: {banner}{errors}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A v4.1 client of the server; `owner`: its client owner (else a fresh one).
    async fn client(&self, owner: Option<&[u8]>) -> Client {
        let url = NfsUrl::parse(&format!("nfs://127.0.0.1:{}/vol?version=4.1", self.port)).unwrap();
        let opts = V4Options {
            owner: owner.map(|o| o.to_vec()),
            ..V4Options::default()
        };
        Client::connect(&url, &ClientOptions::default(), Minor::V1, opts)
            .await
            .unwrap()
    }

    /// `name` in the Ceph export, opened read-write through ceph-fuse.
    fn fuse_file(&self, name: &str) -> std::fs::File {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.fuse.join("vol").join(name))
            .unwrap()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// fcntl(F_SETLK) of the whole file through ceph-fuse: Ok, or the errno.
fn fcntl_lock(f: &std::fs::File, kind: i32) -> Result<(), i32> {
    // SAFETY: zeroed is a valid flock.
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

fn refused(r: Result<(), i32>) {
    match r {
        Err(e) if e == libc::EAGAIN || e == libc::EACCES => {}
        other => panic!("ceph-fuse's lock should be refused: {other:?}"),
    }
}

#[test]
fn locks_conflict_between_nfs_through_sluice_and_ceph_fuse_and_no_delegations_on_ceph() {
    let rig = Rig::start();
    let rt = servers::runtime();
    rt.block_on(async {
        let c = rig.client(None).await;
        let (fh, _) = c
            .create("/vol/locked", 0o666, CreateMode::Truncate)
            .await
            .unwrap();
        let fuse = rig.fuse_file("locked");

        // (a) Held through sluice: ceph-fuse is refused; after LOCKU, granted.
        let got = c.lock(&fh, b"nfs owner", true, 0, ALL).await.unwrap();
        assert!(got.is_none(), "a lock on a file nobody locks: {got:?}");
        refused(fcntl_lock(&fuse, libc::F_WRLCK));
        refused(fcntl_lock(&fuse, libc::F_RDLCK));
        c.unlock(&fh, b"nfs owner", 0, ALL).await.unwrap();
        fcntl_lock(&fuse, libc::F_WRLCK).expect("granted once sluice unlocked");

        // (b) Held through ceph-fuse: the NFS LOCK is denied and LOCKT sees it; after
        // ceph-fuse unlocks, granted.
        let denied = c.lock(&fh, b"nfs owner", false, 10, 5).await.unwrap();
        let d = denied.expect("NFS4ERR_DENIED while ceph-fuse holds the file");
        assert!(d.write, "ceph-fuse's lock is a write lock: {d:?}");
        let t = c
            .test_lock(&fh, b"another owner", false, 0, 1)
            .await
            .unwrap();
        assert!(t.is_some(), "LOCKT reports ceph-fuse's lock");
        fcntl_lock(&fuse, libc::F_UNLCK).unwrap();
        assert_eq!(
            c.test_lock(&fh, b"another owner", true, 0, ALL)
                .await
                .unwrap(),
            None
        );
        let got = c.lock(&fh, b"nfs owner", true, 0, ALL).await.unwrap();
        assert!(got.is_none(), "granted once ceph-fuse unlocked: {got:?}");
        refused(fcntl_lock(&fuse, libc::F_RDLCK));
        c.unlock(&fh, b"nfs owner", 0, ALL).await.unwrap();
        c.close(&fh).await.unwrap();

        // (c) A client that holds a lock and "reboots": the same client owner with a new
        // verifier. The server drops its old state, and its Ceph lock with it.
        let owner: &[u8] = b"sluice test: a client that reboots";
        let gone = rig.client(Some(owner)).await;
        let (gfh, _) = gone
            .create("/vol/dropped", 0o666, CreateMode::Truncate)
            .await
            .unwrap();
        assert!(gone.lock(&gfh, b"o", true, 0, ALL).await.unwrap().is_none());
        let fuse2 = rig.fuse_file("dropped");
        refused(fcntl_lock(&fuse2, libc::F_WRLCK));
        // Gone without a word (its DESTROY_CLIENTID, if any, is busy: it holds a lock).
        drop(gone);
        let back = rig.client(Some(owner)).await;
        fcntl_lock(&fuse2, libc::F_WRLCK).expect("no Ceph lock left by the dropped state");
        fcntl_lock(&fuse2, libc::F_UNLCK).unwrap();
        drop(back);

        // (d) No delegation on the Ceph export; the same OPEN on the local one gets one.
        let t0 = Instant::now();
        while !c.back_channel_up() {
            assert!(t0.elapsed() < LIMIT, "the back channel comes up");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Made and closed, then opened for reading by its sole opener (as a read delegation
        // is granted on a local export, deleg_v4.rs).
        for path in [
            "/vol/deleg".to_string(),
            format!("{}/deleg", rig.local.display()),
        ] {
            let (fh, _) = c.create(&path, 0o666, CreateMode::Truncate).await.unwrap();
            c.close(&fh).await.unwrap();
        }
        let (cfh, _) = c.open("/vol/deleg").await.unwrap();
        assert!(cfh.delegation.is_none(), "no delegation on a Ceph export");
        c.close(&cfh).await.unwrap();
        let local = format!("{}/deleg", rig.local.display());
        let (lfh, _) = c.open(&local).await.unwrap();
        assert!(
            lfh.delegation.is_some(),
            "a sole reader of a local file gets a read delegation"
        );
        c.close(&lfh).await.unwrap();
    });
}
