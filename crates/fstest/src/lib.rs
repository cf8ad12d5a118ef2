//! Backend conformance: what every [`FileSystem`] must do, checked the same way for each.
//!
//! `sluice_vfs` has three backends (LocalFs, MemFs) and `sluice_ceph` a third (CephFs); the
//! NFS handlers assume the same behaviour of all of them. This crate holds the checks once,
//! over the trait, so a backend crate runs them without `sluice_vfs` depending on it:
//!
//! * [`run_suite`]: named cases (create, read/write, truncate, directories and cookies, rename,
//!   links, symlinks, exclusive create, permissions, stale and forged handles, the change
//!   attribute). Each case gets a fresh, empty export from the backend's factory.
//! * [`compare_with_local`]: seeded random sequences of operations applied to the backend and
//!   to a LocalFs side by side; outcomes, bytes read and the final tree must agree. A failure
//!   prints its seed and step.
//!
//! A case panics with its name on the first difference (these are tests).

use bytes::Bytes;
use sluice_vfs::xattr::XATTR_NAME_BYTES_MAX;
use sluice_vfs::{
    Caller, CreateHow, Cred, DirEntry, FileHandle, FileSystem, FileType, FsError, SetAttr,
    StableHow, XattrError, XattrSet,
};

/// Makes a fresh backend whose root is an empty directory.
pub type Factory<'a> = &'a dyn Fn() -> Box<dyn FileSystem>;

/// One named check.
pub struct Case {
    pub name: &'static str,
    pub run: fn(&dyn FileSystem),
}

/// Every case, in order.
pub const CASES: &[Case] = &[
    Case {
        name: "create_then_lookup_and_getattr_agree",
        run: create_then_lookup_and_getattr_agree,
    },
    Case {
        name: "written_bytes_read_back_with_eof",
        run: written_bytes_read_back_with_eof,
    },
    Case {
        name: "setattr_size_truncates_and_extends_with_zeros",
        run: setattr_size_truncates_and_extends_with_zeros,
    },
    Case {
        name: "guarded_create_of_an_existing_name_is_exist",
        run: guarded_create_of_an_existing_name_is_exist,
    },
    Case {
        name: "exclusive_create_retransmission_succeeds",
        run: exclusive_create_retransmission_succeeds,
    },
    Case {
        name: "readdir_lists_every_name_across_pages",
        run: readdir_lists_every_name_across_pages,
    },
    Case {
        name: "rename_replaces_the_target",
        run: rename_replaces_the_target,
    },
    Case {
        name: "rmdir_of_a_non_empty_directory_is_not_empty",
        run: rmdir_of_a_non_empty_directory_is_not_empty,
    },
    Case {
        name: "hard_link_counts_and_shares_data",
        run: hard_link_counts_and_shares_data,
    },
    Case {
        name: "symlink_target_reads_back",
        run: symlink_target_reads_back,
    },
    Case {
        name: "handles_are_stable_and_removed_files_are_stale",
        run: handles_are_stable_and_removed_files_are_stale,
    },
    Case {
        name: "non_owner_cannot_write_a_private_file",
        run: non_owner_cannot_write_a_private_file,
    },
    Case {
        name: "read_only_caller_cannot_change_anything",
        run: read_only_caller_cannot_change_anything,
    },
    Case {
        name: "change_attribute_moves_on_every_change",
        run: change_attribute_moves_on_every_change,
    },
    Case {
        name: "new_objects_belong_to_the_caller",
        run: new_objects_belong_to_the_caller,
    },
    Case {
        name: "dot_and_dotdot_at_the_root",
        run: dot_and_dotdot_at_the_root,
    },
    Case {
        name: "user_xattrs_set_list_get_remove",
        run: user_xattrs_set_list_get_remove,
    },
];

/// The cases for backends whose handles carry a MAC (LocalFs, CephFs; not MemFs, whose
/// handles never leave a test).
pub const MAC_CASES: &[Case] = &[Case {
    name: "forged_handles_are_refused",
    run: forged_handles_are_refused,
}];

/// Runs every case of [`CASES`], each on a fresh backend from `make`.
pub fn run_suite(make: Factory<'_>) {
    for case in CASES {
        eprintln!("conformance: {}", case.name);
        let fs = make();
        (case.run)(fs.as_ref());
    }
}

/// Runs [`CASES`] and [`MAC_CASES`].
pub fn run_suite_with_macs(make: Factory<'_>) {
    run_suite(make);
    for case in MAC_CASES {
        eprintln!("conformance: {}", case.name);
        let fs = make();
        (case.run)(fs.as_ref());
    }
}

fn root() -> Caller {
    Caller::with_cred(Cred::root())
}

fn user(uid: u32) -> Caller {
    Caller::with_cred(Cred::new(uid, uid))
}

fn mode(m: u32) -> SetAttr {
    SetAttr {
        mode: Some(m),
        ..SetAttr::default()
    }
}

fn create(fs: &dyn FileSystem, c: &Caller, dir: &FileHandle, name: &[u8], m: u32) -> FileHandle {
    fs.create(c, dir, name, CreateHow::Unchecked(mode(m)))
        .unwrap_or_else(|e| panic!("create {:?}: {:?}", String::from_utf8_lossy(name), e.0))
        .fh
}

fn write(fs: &dyn FileSystem, fh: &FileHandle, offset: u64, data: &[u8]) {
    fs.write(
        &root(),
        fh,
        offset,
        &[Bytes::copy_from_slice(data)],
        StableHow::FileSync,
    )
    .unwrap_or_else(|e| panic!("write: {:?}", e.0));
}

fn read_all(fs: &dyn FileSystem, fh: &FileHandle) -> Vec<u8> {
    let size = fs.getattr(fh).unwrap().size as usize;
    let mut buf = vec![0u8; size + 10];
    let ok = fs.read(&root(), fh, 0, &mut [&mut buf[..]]).unwrap();
    assert!(ok.eof, "a read past the end has eof");
    buf.truncate(ok.count);
    buf
}

fn names(fs: &dyn FileSystem, dir: &FileHandle) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    fs.readdir(&root(), dir, 0, [0; 8], false, &mut |e: DirEntry<'_>| {
        if e.name != b"." && e.name != b".." {
            v.push(e.name.to_vec());
        }
        true
    })
    .unwrap();
    v.sort();
    v
}

fn create_then_lookup_and_getattr_agree(fs: &dyn FileSystem) {
    let r = fs.root_handle();
    let made = fs
        .create(&root(), &r, b"f", CreateHow::Unchecked(mode(0o640)))
        .unwrap();
    assert_eq!(made.attr.ftype, FileType::Regular);
    assert_eq!(made.attr.mode, 0o640);
    assert_eq!(made.attr.size, 0);
    let l = fs.lookup(&root(), &r, b"f").unwrap();
    assert_eq!(l.fh, made.fh);
    assert_eq!(l.attr.fileid, made.attr.fileid);
    assert_eq!(fs.getattr(&made.fh).unwrap().fileid, made.attr.fileid);
    assert_eq!(
        fs.lookup(&root(), &r, b"missing").unwrap_err().0,
        FsError::NoEnt
    );
    assert!(made.dir_wcc.after.is_some());
}

fn written_bytes_read_back_with_eof(fs: &dyn FileSystem) {
    let r = fs.root_handle();
    let fh = create(fs, &root(), &r, b"data", 0o644);
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    // Two chunks in one call, then a write past the end leaving a gap of zeros.
    let w = fs
        .write(
            &root(),
            &fh,
            0,
            &[
                Bytes::copy_from_slice(&data[..70_000]),
                Bytes::copy_from_slice(&data[70_000..]),
            ],
            StableHow::Unstable,
        )
        .unwrap();
    assert_eq!(w.count, data.len());
    assert_eq!(w.committed, StableHow::Unstable);
    fs.commit(&root(), &fh, 0, 0).unwrap();
    write(fs, &fh, 300_000, b"tail");
    let got = read_all(fs, &fh);
    assert_eq!(got.len(), 300_004);
    assert_eq!(&got[..data.len()], &data[..]);
    assert!(got[data.len()..300_000].iter().all(|&b| b == 0));
    assert_eq!(&got[300_000..], b"tail");
    // A read in the middle is not at the end; one into two buffers fills them in order.
    let (mut a, mut b) = (vec![0u8; 10], vec![0u8; 10]);
    let ok = fs
        .read(&root(), &fh, 100, &mut [&mut a[..], &mut b[..]])
        .unwrap();
    assert_eq!(ok.count, 20);
    assert!(!ok.eof);
    assert_eq!(a, data[100..110]);
    assert_eq!(b, data[110..120]);
    // Past the end: nothing, at the end.
    let mut c = [0u8; 10];
    let ok = fs.read(&root(), &fh, 400_000, &mut [&mut c[..]]).unwrap();
    assert_eq!((ok.count, ok.eof), (0, true));
    // A directory is not read.
    assert_eq!(
        fs.read(&root(), &r, 0, &mut [&mut c[..]]).unwrap_err().0,
        FsError::IsDir
    );
}

fn setattr_size_truncates_and_extends_with_zeros(fs: &dyn FileSystem) {
    let r = fs.root_handle();
    let fh = create(fs, &root(), &r, b"t", 0o644);
    write(fs, &fh, 0, b"0123456789");
    let size = |s| SetAttr {
        size: Some(s),
        ..SetAttr::default()
    };
    let wcc = fs.setattr(&root(), &fh, &size(4), None).unwrap();
    assert_eq!(wcc.before.unwrap().size, 10);
    assert_eq!(wcc.after.unwrap().size, 4);
    fs.setattr(&root(), &fh, &size(8), None).unwrap();
    assert_eq!(read_all(fs, &fh), b"0123\0\0\0\0");
    assert_eq!(
        fs.setattr(&root(), &r, &size(0), None).unwrap_err().0,
        FsError::IsDir
    );
    // A guard that does not match changes nothing.
    let ctime = fs.getattr(&fh).unwrap().ctime;
    let wrong = sluice_vfs::Time {
        seconds: ctime.seconds - 1,
        nseconds: ctime.nseconds,
    };
    assert_eq!(
        fs.setattr(&root(), &fh, &size(1), Some(wrong))
            .unwrap_err()
            .0,
        FsError::NotSync
    );
    assert_eq!(fs.getattr(&fh).unwrap().size, 8);
    fs.setattr(&root(), &fh, &mode(0o600), Some(ctime)).unwrap();
    assert_eq!(fs.getattr(&fh).unwrap().mode, 0o600);
}

fn guarded_create_of_an_existing_name_is_exist(fs: &dyn FileSystem) {
    let r = fs.root_handle();
    let fh = create(fs, &root(), &r, b"g", 0o644);
    write(fs, &fh, 0, b"keep");
    assert_eq!(
        fs.create(&root(), &r, b"g", CreateHow::Guarded(mode(0o644)))
            .unwrap_err()
            .0,
        FsError::Exist
    );
    // UNCHECKED over an existing file keeps it (and its data, no size given).
    let again = fs
        .create(&root(), &r, b"g", CreateHow::Unchecked(mode(0o600)))
        .unwrap();
    assert_eq!(again.fh, fh);
    assert_eq!(read_all(fs, &fh), b"keep");
    fs.mkdir(&root(), &r, b"d", &mode(0o755)).unwrap();
    assert_eq!(
        fs.create(&root(), &r, b"d", CreateHow::Unchecked(mode(0o644)))
            .unwrap_err()
            .0,
        FsError::Exist
    );
    assert_eq!(
        fs.mkdir(&root(), &r, b"g", &mode(0o755)).unwrap_err().0,
        FsError::Exist
    );
}

fn exclusive_create_retransmission_succeeds(fs: &dyn FileSystem) {
    let r = fs.root_handle();
    let v = [1, 2, 3, 4, 5, 6, 7, 8];
    let a = fs
        .create(&root(), &r, b"x", CreateHow::Exclusive(v))
        .unwrap();
    let b = fs
        .create(&root(), &r, b"x", CreateHow::Exclusive(v))
        .unwrap();
    assert_eq!(a.fh, b.fh, "a retransmission finds its own file");
    assert_eq!(
        fs.create(&root(), &r, b"x", CreateHow::Exclusive([9; 8]))
            .unwrap_err()
            .0,
        FsError::Exist,
        "another verifier is another create"
    );
}

fn readdir_lists_every_name_across_pages(fs: &dyn FileSystem) {
    let r = fs.root_handle();
    let mut want: Vec<Vec<u8>> = (0..40).map(|i| format!("n{i:02}").into_bytes()).collect();
    for n in &want {
        create(fs, &root(), &r, n, 0o644);
    }
    fs.mkdir(&root(), &r, b"sub", &mode(0o755)).unwrap();
    want.push(b"sub".to_vec());
    want.sort();
    // Pages of 7 entries, resuming from the last accepted cookie with the verifier.
    let mut seen = Vec::new();
    let (mut cookie, mut verf) = (0u64, [0u8; 8]);
    for _ in 0..100 {
        let mut page = 0;
        let mut last = cookie;
        let ok = fs
            .readdir(&root(), &r, cookie, verf, true, &mut |e: DirEntry<'_>| {
                if page == 7 {
                    return false;
                }
                page += 1;
                last = e.cookie;
                if e.name != b"." && e.name != b".." {
                    let a = e.attr.expect("readdirplus gives attributes");
                    assert_eq!(a.fileid, e.fileid);
                    assert!(e.fh.is_some());
                    seen.push(e.name.to_vec());
                }
                true
            })
            .unwrap();
        verf = ok.cookieverf;
        cookie = last;
        if ok.eof {
            break;
        }
    }
    seen.sort();
    assert_eq!(seen, want, "every name once, across pages");
    let f = fs.lookup(&root(), &r, b"n00").unwrap().fh;
    assert_eq!(
        fs.readdir(&root(), &f, 0, [0; 8], false, &mut |_| true)
            .unwrap_err()
            .0,
        FsError::NotDir
    );
}

fn rename_replaces_the_target(fs: &dyn FileSystem) {
    let r = fs.root_handle();
    let a = create(fs, &root(), &r, b"a", 0o644);
    write(fs, &a, 0, b"from a");
    let b = create(fs, &root(), &r, b"b", 0o644);
    write(fs, &b, 0, b"from b");
    let d = fs.mkdir(&root(), &r, b"d", &mode(0o755)).unwrap().fh;
    let w = fs.rename(&root(), &r, b"a", &r, b"b").unwrap();
    assert!(w.from_dir.after.is_some() && w.to_dir.after.is_some());
    assert_eq!(names(fs, &r), vec![b"b".to_vec(), b"d".to_vec()]);
    let nb = fs.lookup(&root(), &r, b"b").unwrap().fh;
    assert_eq!(nb, a, "the renamed file keeps its handle");
    assert_eq!(read_all(fs, &nb), b"from a");
    fs.rename(&root(), &r, b"b", &d, b"in-d").unwrap();
    assert_eq!(names(fs, &d), vec![b"in-d".to_vec()]);
    assert_eq!(
        fs.rename(&root(), &r, b"nothing", &r, b"x").unwrap_err().0,
        FsError::NoEnt
    );
}

fn rmdir_of_a_non_empty_directory_is_not_empty(fs: &dyn FileSystem) {
    let r = fs.root_handle();
    let d = fs.mkdir(&root(), &r, b"d", &mode(0o755)).unwrap().fh;
    create(fs, &root(), &d, b"f", 0o644);
    assert_eq!(
        fs.rmdir(&root(), &r, b"d").unwrap_err().0,
        FsError::NotEmpty
    );
    assert_eq!(fs.remove(&root(), &r, b"d").unwrap_err().0, FsError::IsDir);
    assert_eq!(fs.rmdir(&root(), &d, b"f").unwrap_err().0, FsError::NotDir);
    fs.remove(&root(), &d, b"f").unwrap();
    fs.rmdir(&root(), &r, b"d").unwrap();
    assert!(names(fs, &r).is_empty());
    assert_eq!(fs.remove(&root(), &r, b"d").unwrap_err().0, FsError::NoEnt);
}

fn hard_link_counts_and_shares_data(fs: &dyn FileSystem) {
    let r = fs.root_handle();
    let f = create(fs, &root(), &r, b"one", 0o644);
    let d = fs.mkdir(&root(), &r, b"d", &mode(0o755)).unwrap().fh;
    let l = fs.link(&root(), &f, &d, b"two").unwrap();
    assert_eq!(l.attr.unwrap().nlink, 2);
    let two = fs.lookup(&root(), &d, b"two").unwrap();
    assert_eq!(
        fs.state_key(&two.fh),
        fs.state_key(&f),
        "one object, one state key"
    );
    write(fs, &two.fh, 0, b"shared");
    assert_eq!(read_all(fs, &f), b"shared");
    fs.remove(&root(), &r, b"one").unwrap();
    assert_eq!(fs.getattr(&two.fh).unwrap().nlink, 1);
    assert_eq!(
        fs.link(&root(), &d, &r, b"dirlink").unwrap_err().0,
        FsError::IsDir
    );
    assert_eq!(
        fs.link(&root(), &two.fh, &d, b"two").unwrap_err().0,
        FsError::Exist
    );
}

fn symlink_target_reads_back(fs: &dyn FileSystem) {
    let r = fs.root_handle();
    let target = b"../some/where else";
    let s = fs
        .symlink(&root(), &r, b"s", target, &SetAttr::default())
        .unwrap();
    assert_eq!(s.attr.ftype, FileType::Symlink);
    assert_eq!(fs.readlink(&s.fh).unwrap().0, target);
    let l = fs.lookup(&root(), &r, b"s").unwrap();
    assert_eq!(l.attr.ftype, FileType::Symlink, "lookup does not follow");
    assert_eq!(fs.readlink(&r).unwrap_err().0, FsError::Inval);
    // The longest target is taken; one byte more, or a NUL inside, is refused and makes nothing.
    let longest = vec![b'x'; sluice_vfs::SYMLINK_TARGET_MAX];
    let s = fs.symlink(&root(), &r, b"long", &longest, &SetAttr::default());
    assert_eq!(fs.readlink(&s.unwrap().fh).unwrap().0, longest);
    let over = vec![b'x'; sluice_vfs::SYMLINK_TARGET_MAX + 1];
    let refused = fs.symlink(&root(), &r, b"over", &over, &SetAttr::default());
    assert_eq!(refused.unwrap_err().0, FsError::NameTooLong);
    let refused = fs.symlink(&root(), &r, b"nul", b"a\0b", &SetAttr::default());
    assert_eq!(refused.unwrap_err().0, FsError::Inval);
    for name in [&b"over"[..], b"nul"] {
        assert_eq!(fs.lookup(&root(), &r, name).unwrap_err().0, FsError::NoEnt);
    }
}

fn handles_are_stable_and_removed_files_are_stale(fs: &dyn FileSystem) {
    let r = fs.root_handle();
    let f = create(fs, &root(), &r, b"f", 0o644);
    assert_eq!(fs.lookup(&root(), &r, b"f").unwrap().fh, f);
    assert_eq!(fs.root_handle(), r);
    assert_eq!(
        sluice_vfs::export_id_of(f.as_bytes()),
        Some(fs.export_id()),
        "handles carry the export id"
    );
    fs.remove(&root(), &r, b"f").unwrap();
    // LocalFs may answer a transient Delay here (open_by_handle_at's ENOMEM/EMFILE under a
    // loaded suite); a client retries that, and so does the check.
    let mut got = fs.getattr(&f);
    for _ in 0..50 {
        if got != Err(FsError::Delay) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        got = fs.getattr(&f);
    }
    assert_eq!(got.unwrap_err(), FsError::Stale);
}

fn forged_handles_are_refused(fs: &dyn FileSystem) {
    let r = fs.root_handle();
    let f = create(fs, &root(), &r, b"f", 0o644);
    let mut b = f.as_bytes().to_vec();
    let mid = b.len() / 2;
    b[mid] ^= 1;
    let forged = FileHandle::from_slice(&b).unwrap();
    assert_eq!(fs.getattr(&forged).unwrap_err(), FsError::BadHandle);
    let mut tag = f.as_bytes().to_vec();
    let last = tag.len() - 1;
    tag[last] ^= 0x80;
    let forged = FileHandle::from_slice(&tag).unwrap();
    assert_eq!(fs.getattr(&forged).unwrap_err(), FsError::BadHandle);
    assert!(fs.getattr(&FileHandle::default()).is_err());
    assert_ne!(fs.state_key(&forged), fs.state_key(&f));
}

fn non_owner_cannot_write_a_private_file(fs: &dyn FileSystem) {
    let r = fs.root_handle();
    fs.setattr(&root(), &r, &mode(0o777), None).unwrap();
    let alice = user(1001);
    let bob = user(1002);
    let f = create(fs, &alice, &r, b"private", 0o600);
    let data = [Bytes::from_static(b"x")];
    assert_eq!(
        fs.write(&bob, &f, 0, &data, StableHow::FileSync)
            .unwrap_err()
            .0,
        FsError::Acces
    );
    let mut buf = [0u8; 4];
    assert_eq!(
        fs.read(&bob, &f, 0, &mut [&mut buf[..]]).unwrap_err().0,
        FsError::Acces
    );
    fs.write(&alice, &f, 0, &data, StableHow::FileSync).unwrap();
    // The owner writes its own file even without the write bit (cp -p of a read-only file).
    fs.setattr(&alice, &f, &mode(0o400), None).unwrap();
    fs.write(&alice, &f, 1, &data, StableHow::FileSync).unwrap();
    assert_eq!(
        fs.setattr(&bob, &f, &mode(0o666), None).unwrap_err().0,
        FsError::Perm,
        "only the owner changes the mode"
    );
    let (granted, _) = fs
        .access(
            &bob,
            &f,
            sluice_vfs::access::READ | sluice_vfs::access::MODIFY,
        )
        .unwrap();
    assert_eq!(granted, 0);
    // A private directory cannot be searched or written by others.
    let d = fs.mkdir(&alice, &r, b"pd", &mode(0o700)).unwrap().fh;
    assert_eq!(
        fs.create(&bob, &d, b"no", CreateHow::Unchecked(mode(0o644)))
            .unwrap_err()
            .0,
        FsError::Acces
    );
}

fn read_only_caller_cannot_change_anything(fs: &dyn FileSystem) {
    let r = fs.root_handle();
    let f = create(fs, &root(), &r, b"f", 0o666);
    let ro = Caller {
        cred: Cred::root(),
        read_only: true,
    };
    let data = [Bytes::from_static(b"x")];
    assert_eq!(
        fs.write(&ro, &f, 0, &data, StableHow::FileSync)
            .unwrap_err()
            .0,
        FsError::RoFs
    );
    assert_eq!(
        fs.create(&ro, &r, b"n", CreateHow::Unchecked(mode(0o644)))
            .unwrap_err()
            .0,
        FsError::RoFs
    );
    assert_eq!(fs.remove(&ro, &r, b"f").unwrap_err().0, FsError::RoFs);
    assert_eq!(
        fs.setattr(&ro, &f, &mode(0o600), None).unwrap_err().0,
        FsError::RoFs
    );
    let mut buf = [0u8; 1];
    fs.read(&ro, &f, 0, &mut [&mut buf[..]]).unwrap();
}

fn change_attribute_moves_on_every_change(fs: &dyn FileSystem) {
    let r = fs.root_handle();
    let f = create(fs, &root(), &r, b"c", 0o644);
    let mut last = fs.getattr(&f).unwrap().change;
    for i in 0..3u64 {
        write(fs, &f, i, b"z");
        let now = fs.getattr(&f).unwrap().change;
        assert_ne!(now, last, "a write changes the change attribute");
        last = now;
    }
    fs.setattr(&root(), &f, &mode(0o600), None).unwrap();
    assert_ne!(fs.getattr(&f).unwrap().change, last, "so does a chmod");
    let before = fs.getattr(&r).unwrap().change;
    create(fs, &root(), &r, b"another", 0o644);
    assert_ne!(
        fs.getattr(&r).unwrap().change,
        before,
        "a new name changes the directory"
    );
}

/// User extended attributes (RFC 8276's semantics, `setxattr(2)`'s flags): on a backend that
/// says it has none, every call is NotSupp; otherwise create/replace rules, sorted listing,
/// size limits, permissions, the read-only flag and the change attribute.
fn user_xattrs_set_list_get_remove(fs: &dyn FileSystem) {
    let r = fs.root_handle();
    fs.setattr(&root(), &r, &mode(0o777), None).unwrap();
    let alice = user(1001);
    let bob = user(1002);
    let f = create(fs, &alice, &r, b"x", 0o644);
    let not_supp = XattrError::Fs(FsError::NotSupp);
    if !fs.xattr_support() {
        assert_eq!(fs.getxattr(&alice, &f, b"a", 64), Err(not_supp));
        assert_eq!(
            fs.setxattr(&alice, &f, b"a", b"1", XattrSet::Either),
            Err(not_supp)
        );
        assert_eq!(fs.listxattrs(&alice, &f), Err(not_supp));
        assert_eq!(fs.removexattr(&alice, &f, b"a"), Err(not_supp));
        return;
    }
    let before = fs.getattr(&f).unwrap().change;
    let wcc = fs
        .setxattr(&alice, &f, b"b", b"1", XattrSet::Create)
        .unwrap();
    let after = wcc.after.expect("attributes after").change;
    assert_ne!(after, before, "an xattr change moves the change attribute");
    assert_eq!(fs.getattr(&f).unwrap().change, after);
    assert_eq!(
        fs.setxattr(&alice, &f, b"b", b"2", XattrSet::Create),
        Err(XattrError::Fs(FsError::Exist))
    );
    assert_eq!(
        fs.setxattr(&alice, &f, b"a", b"2", XattrSet::Replace),
        Err(XattrError::NoXattr)
    );
    fs.setxattr(&alice, &f, b"b", b"22", XattrSet::Replace)
        .unwrap();
    fs.setxattr(&alice, &f, b"a", b"", XattrSet::Either)
        .unwrap();
    assert_eq!(fs.getxattr(&alice, &f, b"b", 64).unwrap(), b"22");
    assert_eq!(fs.getxattr(&alice, &f, b"a", 64).unwrap(), b"");
    assert_eq!(fs.getxattr(&alice, &f, b"b", 1), Err(XattrError::TooBig));
    assert_eq!(fs.getxattr(&alice, &f, b"zz", 64), Err(XattrError::NoXattr));
    assert_eq!(
        fs.listxattrs(&alice, &f).unwrap(),
        vec![b"a".to_vec(), b"b".to_vec()],
        "names sorted, without the user. prefix"
    );
    assert_eq!(
        fs.getxattr(&alice, &f, &[b'n'; XATTR_NAME_BYTES_MAX + 1], 64),
        Err(XattrError::Fs(FsError::NameTooLong))
    );
    assert_eq!(
        fs.getxattr(&alice, &f, b"", 64),
        Err(XattrError::Fs(FsError::Inval))
    );
    // Others read a 0644 file's attributes but may not change them.
    assert_eq!(fs.getxattr(&bob, &f, b"b", 64).unwrap(), b"22");
    assert_eq!(
        fs.setxattr(&bob, &f, b"c", b"1", XattrSet::Either),
        Err(XattrError::Fs(FsError::Acces))
    );
    assert_eq!(
        fs.removexattr(&bob, &f, b"b"),
        Err(XattrError::Fs(FsError::Acces))
    );
    fs.setattr(&alice, &f, &mode(0o600), None).unwrap();
    assert_eq!(
        fs.getxattr(&bob, &f, b"b", 64),
        Err(XattrError::Fs(FsError::Acces))
    );
    assert_eq!(fs.listxattrs(&bob, &f), Err(XattrError::Fs(FsError::Acces)));
    let ro = Caller {
        cred: Cred::root(),
        read_only: true,
    };
    assert_eq!(
        fs.setxattr(&ro, &f, b"c", b"1", XattrSet::Either),
        Err(XattrError::Fs(FsError::RoFs))
    );
    assert_eq!(
        fs.removexattr(&ro, &f, b"b"),
        Err(XattrError::Fs(FsError::RoFs))
    );
    assert_eq!(fs.getxattr(&ro, &f, b"b", 64).unwrap(), b"22");
    fs.removexattr(&alice, &f, b"a").unwrap();
    assert_eq!(fs.removexattr(&alice, &f, b"a"), Err(XattrError::NoXattr));
    assert_eq!(fs.listxattrs(&alice, &f).unwrap(), vec![b"b".to_vec()]);
    // Directories hold them too.
    let d = fs.mkdir(&alice, &r, b"d", &mode(0o755)).unwrap().fh;
    fs.setxattr(&alice, &d, b"on.dir", b"v", XattrSet::Either)
        .unwrap();
    assert_eq!(fs.getxattr(&alice, &d, b"on.dir", 64).unwrap(), b"v");
}

fn new_objects_belong_to_the_caller(fs: &dyn FileSystem) {
    let r = fs.root_handle();
    fs.setattr(&root(), &r, &mode(0o777), None).unwrap();
    let c = Caller::with_cred(Cred::new(1234, 5678));
    let f = fs
        .create(&c, &r, b"mine", CreateHow::Unchecked(mode(0o640)))
        .unwrap();
    assert_eq!((f.attr.uid, f.attr.gid), (1234, 5678));
    let d = fs.mkdir(&c, &r, b"mydir", &mode(0o750)).unwrap();
    assert_eq!((d.attr.uid, d.attr.gid), (1234, 5678));
    assert_eq!(d.attr.ftype, FileType::Directory);
    assert_eq!(d.attr.mode, 0o750);
}

fn dot_and_dotdot_at_the_root(fs: &dyn FileSystem) {
    let r = fs.root_handle();
    assert_eq!(fs.lookup(&root(), &r, b".").unwrap().fh, r);
    assert_eq!(fs.lookup(&root(), &r, b"..").unwrap().fh, r);
    let d = fs.mkdir(&root(), &r, b"d", &mode(0o755)).unwrap().fh;
    assert_eq!(fs.lookup(&root(), &d, b"..").unwrap().fh, r);
    let mut dots = Vec::new();
    fs.readdir(&root(), &r, 0, [0; 8], false, &mut |e: DirEntry<'_>| {
        if e.name == b"." || e.name == b".." {
            dots.push(e.name.to_vec());
        }
        true
    })
    .unwrap();
    dots.sort();
    assert_eq!(dots, vec![b".".to_vec(), b"..".to_vec()]);
}

// --- Randomized comparison with LocalFs ----------------------------------------------------

/// Operations per seed: enough to reach every operation against every kind of name (missing,
/// file, directory) many times.
pub const STEPS: usize = 80;
/// Names used: few, so operations collide with each other's results.
const NAMES: &[&[u8]] = &[b"a", b"b", b"c", b"d"];
/// Largest write or read offset and length, bytes.
const SPAN_BYTES: u64 = 9000;

/// xorshift64*: a small deterministic generator, enough to draw operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn name(&mut self) -> &'static [u8] {
        NAMES[self.below(NAMES.len() as u64) as usize]
    }
}

/// What an operation gave, comparable across backends.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Ok,
    Bytes(Vec<u8>, bool),
    Err(FsError),
    /// The name does not exist (the operation needs a handle and was not tried).
    Missing,
}

/// For each seed: a fresh `subject` and a fresh `local` (both empty), the same random
/// operations on both, the same outcomes and the same tree at the end.
/// `SLUICE_FSTEST_TRACE=1` prints each operation before it runs.
pub fn compare_with_local(
    subject: Factory<'_>,
    local: Factory<'_>,
    seeds: impl IntoIterator<Item = u64>,
) {
    let trace = std::env::var_os("SLUICE_FSTEST_TRACE").is_some();
    for seed in seeds {
        eprintln!("random comparison: seed {seed}");
        let (l, s) = (local(), subject());
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        for step in 0..STEPS {
            let op = rng.below(13);
            let (name, other) = (rng.name(), rng.name());
            let (offset, len) = (rng.below(SPAN_BYTES), 1 + rng.below(SPAN_BYTES));
            if trace {
                eprintln!("seed {seed} step {step}: op {op} {name:?} {other:?} {offset} {len}");
            }
            let a = run_op(l.as_ref(), op, name, other, offset, len);
            let b = run_op(s.as_ref(), op, name, other, offset, len);
            assert_eq!(
                a,
                b,
                "seed {seed} step {step}: op {op} on {:?} (other {:?}, offset {offset}, len \
                 {len}): LocalFs left, the backend right",
                String::from_utf8_lossy(name),
                String::from_utf8_lossy(other)
            );
        }
        assert_eq!(
            tree(l.as_ref()),
            tree(s.as_ref()),
            "seed {seed}: trees differ at the end"
        );
    }
}

fn find(fs: &dyn FileSystem, name: &[u8]) -> Option<FileHandle> {
    fs.lookup(&root(), &fs.root_handle(), name)
        .ok()
        .map(|l| l.fh)
}

fn run_op(
    fs: &dyn FileSystem,
    op: u64,
    name: &[u8],
    other: &[u8],
    offset: u64,
    len: u64,
) -> Outcome {
    let r = root();
    let dir = fs.root_handle();
    let res = |r: Result<(), FsError>| match r {
        Ok(()) => Outcome::Ok,
        Err(e) => Outcome::Err(e),
    };
    let with_fh = |f: &dyn Fn(&FileHandle) -> Outcome| match find(fs, name) {
        Some(fh) => f(&fh),
        None => Outcome::Missing,
    };
    match op {
        0 => res(fs
            .create(&r, &dir, name, CreateHow::Guarded(mode(0o644)))
            .map(|_| ())
            .map_err(|e| e.0)),
        1 => res(fs
            .mkdir(&r, &dir, name, &mode(0o755))
            .map(|_| ())
            .map_err(|e| e.0)),
        2 | 3 => with_fh(&|fh| {
            let data = Bytes::from(vec![(offset % 251) as u8 + 1; len as usize]);
            let how = if op == 2 {
                StableHow::Unstable
            } else {
                StableHow::FileSync
            };
            res(fs
                .write(&r, fh, offset, &[data], how)
                .map(|_| ())
                .map_err(|e| e.0))
        }),
        4 => with_fh(&|fh| {
            let mut buf = vec![0u8; len as usize];
            match fs.read(&r, fh, offset, &mut [&mut buf[..]]) {
                Ok(ok) => {
                    buf.truncate(ok.count);
                    Outcome::Bytes(buf, ok.eof)
                }
                Err((e, _)) => Outcome::Err(e),
            }
        }),
        5 => with_fh(&|fh| {
            let s = SetAttr {
                size: Some(offset),
                ..SetAttr::default()
            };
            res(fs.setattr(&r, fh, &s, None).map(|_| ()).map_err(|e| e.0))
        }),
        6 => res(fs.remove(&r, &dir, name).map(|_| ()).map_err(|e| e.0)),
        7 => res(fs.rmdir(&r, &dir, name).map(|_| ()).map_err(|e| e.0)),
        8 => res(fs
            .rename(&r, &dir, name, &dir, other)
            .map(|_| ())
            .map_err(|e| e.0)),
        9 => with_fh(&|fh| res(fs.commit(&r, fh, 0, 0).map(|_| ()).map_err(|e| e.0))),
        10 => with_fh(&|fh| {
            res(fs
                .allocate(&r, fh, offset, len)
                .map(|_| ())
                .map_err(|e| e.0))
        }),
        11 => with_fh(&|fh| {
            res(fs
                .deallocate(&r, fh, offset, len)
                .map(|_| ())
                .map_err(|e| e.0))
        }),
        _ => with_fh(&|src| match find(fs, other) {
            Some(dst) => match fs.copy_range(&r, src, offset, &dst, len, len) {
                Ok(c) => Outcome::Bytes(c.count.to_be_bytes().to_vec(), false),
                Err((e, _)) => Outcome::Err(e),
            },
            None => Outcome::Missing,
        }),
    }
}

/// The tree under the root: (name, is a directory, size, contents of files).
fn tree(fs: &dyn FileSystem) -> Vec<(Vec<u8>, bool, u64, Vec<u8>)> {
    names(fs, &fs.root_handle())
        .into_iter()
        .map(|n| {
            let fh = find(fs, &n).unwrap();
            let a = fs.getattr(&fh).unwrap();
            let dir = a.ftype == FileType::Directory;
            let data = if dir { Vec::new() } else { read_all(fs, &fh) };
            // Directory sizes are the file system's business.
            (n, dir, if dir { 0 } else { a.size }, data)
        })
        .collect()
}
