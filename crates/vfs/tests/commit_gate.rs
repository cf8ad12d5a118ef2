//! LocalFs COMMITs through the sync gate: a COMMIT of a file with no change since a successful
//! `fdatasync` runs none, and every kind of change (WRITE, a truncating SETATTR, ALLOCATE,
//! COPY) makes the next COMMIT sync again.

use bytes::Bytes;
use sluice_vfs::syncgate::SyncCounts;
use sluice_vfs::FileSystem;
use sluice_vfs::{Caller, CreateHow, Cred, LocalFs, LocalFsConfig, SetAttr, StableHow};
use std::path::PathBuf;

fn counts(synced: u64, spared: u64) -> SyncCounts {
    SyncCounts { synced, spared }
}

#[test]
fn a_commit_syncs_only_what_changed_since_the_last_sync() {
    let base = PathBuf::from(format!("/tmp/sluice-commitgate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("export")).unwrap();
    let fs = LocalFs::new(LocalFsConfig::new(base.join("export")).state_dir(base.join("state")))
        .unwrap();
    let root = fs.root_handle();
    let me = Caller::with_cred(Cred::root());
    let attrs = SetAttr {
        mode: Some(0o644),
        ..SetAttr::default()
    };
    let a = fs
        .create(&me, &root, b"a", CreateHow::Unchecked(attrs))
        .unwrap()
        .fh;
    let b = fs
        .create(&me, &root, b"b", CreateHow::Unchecked(attrs))
        .unwrap()
        .fh;
    let data = Bytes::from(vec![7u8; 4096]);

    fs.write(&me, &a, 0, std::slice::from_ref(&data), StableHow::Unstable)
        .unwrap();
    fs.commit(&me, &a, 0, 0).unwrap();
    assert_eq!(fs.sync_counts(), counts(1, 0), "first COMMIT syncs");
    fs.commit(&me, &a, 0, 0).unwrap();
    fs.commit(&me, &a, 0, 4096).unwrap();
    assert_eq!(fs.sync_counts(), counts(1, 2), "nothing new: no sync");

    // Another file is its own: its first COMMIT syncs.
    fs.commit(&me, &b, 0, 0).unwrap();
    assert_eq!(fs.sync_counts(), counts(2, 2));

    fs.write(
        &me,
        &a,
        4096,
        std::slice::from_ref(&data),
        StableHow::Unstable,
    )
    .unwrap();
    fs.commit(&me, &a, 0, 0).unwrap();
    assert_eq!(fs.sync_counts(), counts(3, 2), "a WRITE makes it dirty");

    let trunc = SetAttr {
        size: Some(100),
        ..SetAttr::default()
    };
    fs.setattr(&me, &a, &trunc, None).unwrap();
    fs.commit(&me, &a, 0, 0).unwrap();
    assert_eq!(
        fs.sync_counts(),
        counts(4, 2),
        "a truncation makes it dirty"
    );

    // A SETATTR without a size changes no data: the next COMMIT is spared.
    fs.setattr(&me, &a, &attrs, None).unwrap();
    fs.commit(&me, &a, 0, 0).unwrap();
    assert_eq!(fs.sync_counts(), counts(4, 3));

    if fs.allocate(&me, &a, 0, 8192).is_ok() {
        fs.commit(&me, &a, 0, 0).unwrap();
        assert_eq!(fs.sync_counts(), counts(5, 3), "ALLOCATE makes it dirty");
    } else {
        fs.write(&me, &a, 0, std::slice::from_ref(&data), StableHow::Unstable)
            .unwrap();
        fs.commit(&me, &a, 0, 0).unwrap();
    }
    fs.commit(&me, &b, 0, 0).unwrap();
    assert_eq!(fs.sync_counts(), counts(5, 4));
    fs.copy_range(&me, &a, 0, &b, 0, 100).unwrap();
    fs.commit(&me, &b, 0, 0).unwrap();
    assert_eq!(
        fs.sync_counts(),
        counts(6, 4),
        "COPY makes the destination dirty"
    );

    // A removed file is forgotten: a new file reusing the inode number starts unknown.
    fs.remove(&me, &root, b"b").unwrap();
    let c = fs
        .create(&me, &root, b"c", CreateHow::Unchecked(attrs))
        .unwrap()
        .fh;
    fs.commit(&me, &c, 0, 0).unwrap();
    assert_eq!(fs.sync_counts(), counts(7, 4));
    std::fs::remove_dir_all(&base).unwrap();
}
