//! CephFs against the backend conformance suite and against LocalFs on random operations, on a
//! private one-node cluster (tests/peers/ceph.sh; needs root and the ceph packages).

mod common;

use sluice_fstest::{compare_with_local, run_suite_with_macs};
use sluice_vfs::{FileSystem, LocalFs, LocalFsConfig};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

/// Seeds of the random comparison: about a second each on a one-node test cluster.
const SEEDS: u64 = 8;

#[test]
fn cephfs_passes_the_backend_suite_and_matches_localfs() {
    let cluster = common::Cluster::start("conf");
    let t0 = std::time::Instant::now();
    if std::env::var_os("SLUICE_SKIP_SUITE").is_none() {
        run_suite_with_macs(&|| cluster.fresh());
    }
    eprintln!("suite: {:?}", t0.elapsed());

    let base = PathBuf::from(format!("/tmp/sluice-ceph-local-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let n = AtomicU32::new(0);
    let local = || -> Box<dyn FileSystem> {
        let dir = base.join(format!("l{}", n.fetch_add(1, Ordering::Relaxed)));
        std::fs::create_dir_all(&dir).unwrap();
        Box::new(LocalFs::new(LocalFsConfig::new(&dir).state_dir(base.join("state"))).unwrap())
    };
    let t0 = std::time::Instant::now();
    compare_with_local(&|| cluster.fresh(), &local, 1..=SEEDS);
    eprintln!("random comparison: {:?}", t0.elapsed());
    let _ = std::fs::remove_dir_all(&base);

    // Handles outlive the session that issued them: a new session on the same export (a
    // restarted or another sluice head with the same secret) resolves them through the MDS.
    let path = cluster.fresh_dir("h");
    let (fh, fileid) = {
        let first = cluster.export(&path);
        let root = sluice_vfs::Caller::with_cred(sluice_vfs::Cred::root());
        let made = first
            .create(
                &root,
                &first.root_handle(),
                b"kept",
                sluice_vfs::CreateHow::Unchecked(sluice_vfs::SetAttr::default()),
            )
            .unwrap();
        (made.fh, made.attr.fileid)
    };
    let second = cluster.export(&path);
    assert_eq!(second.getattr(&fh).unwrap().fileid, fileid);
    assert_eq!(
        second
            .lookup(
                &sluice_vfs::Caller::with_cred(sluice_vfs::Cred::root()),
                &second.root_handle(),
                b"kept"
            )
            .unwrap()
            .fh,
        fh
    );
    drop(second);

    // User xattrs written through the backend are what another Ceph client (ceph-fuse) reads
    // as `user.NAME`, and the reverse.
    let path = cluster.fresh_dir("x");
    let fs = cluster.export(&path);
    let root = sluice_vfs::Caller::with_cred(sluice_vfs::Cred::root());
    let made = fs
        .create(
            &root,
            &fs.root_handle(),
            b"xf",
            sluice_vfs::CreateHow::Unchecked(sluice_vfs::SetAttr::default()),
        )
        .unwrap();
    assert!(fs.xattr_support(), "CephFS takes user xattrs");
    fs.setxattr(
        &root,
        &made.fh,
        b"from-sluice",
        b"sluice wrote this",
        sluice_vfs::XattrSet::Create,
    )
    .unwrap();
    let fuse = cluster.fuse();
    let on_fuse = fuse.path(&format!("{path}/xf"));
    let seen = std::process::Command::new("getfattr")
        .args(["--only-values", "-n", "user.from-sluice"])
        .arg(&on_fuse)
        .output()
        .expect("run getfattr (package attr, scripts/install-deps.sh)");
    assert!(
        seen.status.success(),
        "getfattr through ceph-fuse: {seen:?}"
    );
    assert_eq!(seen.stdout, b"sluice wrote this");
    let st = std::process::Command::new("setfattr")
        .args(["-n", "user.from-fuse", "-v", "ceph-fuse wrote this"])
        .arg(&on_fuse)
        .status()
        .expect("run setfattr");
    assert!(st.success(), "setfattr through ceph-fuse");
    let v = fs
        .getxattr(&root, &made.fh, b"from-fuse", 4096)
        .unwrap_or_else(|e| panic!("getxattr of ceph-fuse's attribute: {e:?}"));
    assert_eq!(v, b"ceph-fuse wrote this");
    drop(fuse);
    drop(fs);

    let stats = cluster.admin().stats();
    eprintln!("admin mount stats: {stats:?}");
}
