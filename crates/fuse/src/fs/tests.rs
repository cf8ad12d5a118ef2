use super::*;

#[test]
fn nfs_statuses_map_to_linux_errnos() {
    let st = NsError::local;
    assert_eq!(errno(&st(Status::NOENT)), Errno(libc::ENOENT));
    assert_eq!(errno(&st(Status::NOTEMPTY)), Errno(libc::ENOTEMPTY));
    assert_eq!(errno(&st(Status::NAMETOOLONG)), Errno(libc::ENAMETOOLONG));
    assert_eq!(errno(&st(Status::STALE)), Errno(libc::ESTALE));
    assert_eq!(errno(&st(Status::EXIST)), Errno(libc::EEXIST));
    assert_eq!(errno(&NsError::other("x")), Errno(libc::EIO));
    assert_eq!(errno(&st(Status(10010))), Errno(libc::EAGAIN), "DENIED");
}

#[test]
fn lock_ranges_convert_between_fuse_and_nfs() {
    let r = |start, end| LockRange {
        start,
        end,
        typ: LockType::Write,
    };
    assert_eq!(nfs_range(r(0, LOCK_TO_END)).unwrap(), (0, u64::MAX));
    assert_eq!(nfs_range(r(10, 19)).unwrap(), (10, 10));
    assert_eq!(nfs_range(r(5, 5)).unwrap(), (5, 1));
    assert!(nfs_range(r(5, 4)).is_err());
    assert_eq!(fuse_end(10, 10), 19);
    assert_eq!(fuse_end(0, u64::MAX), LOCK_TO_END);
    assert_eq!(
        fuse_end(u64::MAX - 5, 100),
        LOCK_TO_END,
        "overflow is to the end"
    );
}

#[test]
fn waiting_locks_back_off_from_one_to_thirty_seconds() {
    let mut d = Duration::ZERO;
    let mut seen = Vec::new();
    for _ in 0..8 {
        d = next_lock_poll(d);
        seen.push(d.as_secs());
    }
    assert_eq!(seen, [1, 2, 4, 8, 16, 30, 30, 30]);
}

#[test]
fn times_round_trip() {
    let t = Time {
        seconds: 1_700_000_000,
        nseconds: 123_456_789,
    };
    assert_eq!(nfstime(system_time(t)), t);
    // Times are 64-bit now: before 1970 is kept (the v3 side clamps it when it sends).
    let early = SystemTime::UNIX_EPOCH - Duration::from_secs(5);
    assert_eq!(
        nfstime(early),
        Time {
            seconds: -5,
            nseconds: 0
        }
    );
    let early = SystemTime::UNIX_EPOCH - Duration::from_millis(1250);
    let t = nfstime(early);
    assert_eq!(
        t,
        Time {
            seconds: -2,
            nseconds: 750_000_000
        }
    );
    assert_eq!(system_time(t), early);
}

#[test]
fn fileids_become_node_ids_with_the_root_swapped_and_collisions_synthetic() {
    let mut t = Tables {
        inodes: HashMap::new(),
        by_fh: HashMap::new(),
        names: HashMap::new(),
        root_fileid: 77,
        next_synthetic: SYNTHETIC_INO_BASE,
    };
    assert_eq!(t.ino_for_fileid(5), 5);
    assert_eq!(t.ino_for_fileid(1), 77);
    t.inodes.insert(
        5,
        Inode {
            fh: Handle::v3(Default::default()),
            lookups: 1,
            attr: CachedAttr::new(Attr::default(), Instant::now(), &AttrCacheConfig::default()),
            names: Vec::new(),
        },
    );
    assert!(t.ino_for_fileid(5) > SYNTHETIC_INO_BASE);
    assert_eq!(t.ino_for_fileid(77), ROOT_INO, "root's fileid is node 1");
}
