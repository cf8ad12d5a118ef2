//! Data ops and what they pass: the data path, stateid checks, splicing, and held writes
//! met by SETATTR, OPEN and REMOVE.

use super::*;

/// Held writes a driver cannot land (here: no data path at all) make the op that would
/// truncate their file NFS4ERR_DELAY; a REMOVE goes ahead, as v3's does.
#[test]
fn truncation_is_delay_when_held_writes_cannot_land() {
    use crate::io::writebehind::WriteBehindDriver;
    use crate::stats::Stats;
    let mut c = Client::new();
    let wb = WriteBehindDriver::new(Default::default(), Arc::new(Stats::default()));
    c.nfs_mut().write_behind = Some(wb.clone());
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.push(open(
        b"o",
        b"f",
        Some(Createhow4::Unchecked(mode_attrs(0o644))),
        OPEN4_SHARE_ACCESS_BOTH,
        OPEN4_SHARE_DENY_NONE,
    ));
    ops.push(NfsArgop4::Getfh(()));
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK);
    let fh = FileHandle::from_slice(&fh_of(&res.results[5]).0).unwrap();
    // A v3 client's unstable write of the file is held.
    let fs = c.nfs.exports[0].fs.clone();
    wb.hold(
        &fs,
        &fh,
        0,
        vec![Bytes::from_static(b"hello")],
        Caller::with_cred(Cred::new(1000, 1000)),
    );
    let truncate = AttrValues {
        size: Some(0),
        ..AttrValues::default()
    };
    let mut ops = vec![seq(sid, 2)];
    ops.extend(into_export());
    ops.push(lookup(b"f"));
    ops.push(NfsArgop4::Setattr(SetattrArgs {
        stateid: Stateid4::ANONYMOUS,
        obj_attributes: truncate.encode(),
    }));
    assert_eq!(c.send(ops).status, Nfsstat4::DELAY);
    let mut ops = vec![seq(sid, 3)];
    ops.extend(into_export());
    ops.push(open(
        b"o2",
        b"f",
        Some(Createhow4::Unchecked(truncate.encode())),
        OPEN4_SHARE_ACCESS_READ,
        OPEN4_SHARE_DENY_NONE,
    ));
    assert_eq!(c.send(ops).status, Nfsstat4::DELAY);
    let mut ops = vec![seq(sid, 4)];
    ops.extend(into_export());
    ops.push(NfsArgop4::Remove(Component4(Bytes::from_static(b"f"))));
    assert_eq!(c.send(ops).status, Nfsstat4::OK);
    // Without held writes REMOVE goes ahead.
    let mut c2 = Client::new();
    c2.nfs_mut().write_behind = None;
    let sid2 = mount(&c2);
    let mut ops = vec![seq(sid2, 1)];
    ops.extend(into_export());
    ops.push(open(
        b"o",
        b"g",
        Some(Createhow4::Unchecked(mode_attrs(0o644))),
        OPEN4_SHARE_ACCESS_READ,
        OPEN4_SHARE_DENY_NONE,
    ));
    ops.extend(into_export());
    ops.push(NfsArgop4::Remove(Component4(Bytes::from_static(b"g"))));
    ops.push(lookup(b"g"));
    let res = c2.send(ops);
    assert_eq!(res.status, Nfsstat4::NOENT, "{:?}", statuses(&res));
    assert_eq!(res.results[res.results.len() - 2].status(), Nfsstat4::OK);
}

#[test]
fn held_writes_land_before_a_truncating_setattr_or_open_instead_of_delay() {
    let c = Client::with_data();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"o",
            b"f",
            Some(Createhow4::Unchecked(mode_attrs(0o644))),
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
        ),
        write_op(Stateid4::CURRENT, 0, StableHow4::UNSTABLE, b"hello world"),
        NfsArgop4::Getfh(()),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert!(held(&c, &res.results[6]), "the UNSTABLE write is held");
    let getfh = res.results[6].clone();
    // SETATTR of the size in the next COMPOUND: the held bytes land first, then the file is
    // cut; no DELAY.
    let size = |n| {
        AttrValues {
            size: Some(n),
            ..AttrValues::default()
        }
        .encode()
    };
    let mut ops = vec![seq(sid, 2)];
    ops.extend(into_export());
    ops.extend([
        lookup(b"f"),
        NfsArgop4::Setattr(SetattrArgs {
            stateid: Stateid4::ANONYMOUS,
            obj_attributes: size(5),
        }),
        getattr(&[num::SIZE]),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert_eq!(attrs(&res.results[6]).size, Some(5));
    assert!(!held(&c, &getfh));
    assert_eq!(contents(&c, b"f"), b"hello", "landed, then cut");
    // Held again, then an OPEN that truncates: the same.
    let mut ops = vec![seq(sid, 3)];
    ops.extend(into_export());
    ops.extend([
        lookup(b"f"),
        write_op(
            Stateid4::ANONYMOUS,
            0,
            StableHow4::UNSTABLE,
            b"HELLO WORLD!",
        ),
    ]);
    assert_eq!(c.send(ops).status, Nfsstat4::OK);
    assert!(held(&c, &getfh));
    let mut ops = vec![seq(sid, 4)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"o2",
            b"f",
            Some(Createhow4::Unchecked(size(0))),
            OPEN4_SHARE_ACCESS_READ,
            OPEN4_SHARE_DENY_NONE,
        ),
        getattr(&[num::SIZE]),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert_eq!(attrs(&res.results[5]).size, Some(0));
    assert!(!held(&c, &getfh), "nothing left to land past the new size");
    assert_eq!(contents(&c, b"f"), b"");
}

#[test]
fn a_remove_of_a_file_with_held_writes_drops_them_instead_of_delay() {
    let c = Client::with_data();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"o",
            b"f",
            Some(Createhow4::Unchecked(mode_attrs(0o644))),
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
        ),
        write_op(Stateid4::CURRENT, 0, StableHow4::UNSTABLE, b"doomed"),
        NfsArgop4::Close(CloseArgs {
            seqid: 0,
            open_stateid: Stateid4::CURRENT,
        }),
        NfsArgop4::Getfh(()),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let getfh = res.results[7].clone();
    assert!(held(&c, &getfh));
    let mut ops = vec![seq(sid, 2)];
    ops.extend(into_export());
    ops.extend([
        NfsArgop4::Remove(Component4(Bytes::from_static(b"f"))),
        lookup(b"f"),
    ]);
    let res = c.send(ops);
    assert_eq!(
        statuses(&res)[4..],
        [Nfsstat4::OK, Nfsstat4::NOENT],
        "removed at once, and gone"
    );
    assert!(
        !held(&c, &getfh),
        "the last link is gone: its held data is dropped"
    );
}

#[test]
fn write_unstable_commit_and_read_back_through_the_data_path() {
    let c = Client::with_data();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"o",
            b"f",
            Some(Createhow4::Unchecked(mode_attrs(0o644))),
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
        ),
        write_op(Stateid4::CURRENT, 0, StableHow4::UNSTABLE, b"hello v4"),
        NfsArgop4::Commit(CommitArgs {
            offset: 0,
            count: 0,
        }),
        read_op(Stateid4::CURRENT, 0, 100),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let NfsResop4::Write(Res4::Ok(w)) = &res.results[5] else {
        panic!("{res:?}")
    };
    assert_eq!(w.count, 8);
    // Write-behind holds an UNSTABLE write: it is acknowledged as UNSTABLE.
    assert_eq!(w.committed, StableHow4::UNSTABLE);
    let fs = c.nfs.exports[0].fs.clone();
    assert_eq!(w.writeverf, fs.write_verifier(), "v3's write verifier");
    let NfsResop4::Commit(Res4::Ok(verf)) = &res.results[6] else {
        panic!("{res:?}")
    };
    assert_eq!(*verf, w.writeverf);
    let NfsResop4::Read(Res4::Ok(r)) = &res.results[7] else {
        panic!("{res:?}")
    };
    assert_eq!(r.data.to_vec(), b"hello v4");
    assert!(r.eof);
    // The data landed in the file system (COMMIT flushed write-behind).
    let fh = fs
        .lookup(
            &Caller::with_cred(Cred::new(1000, 1000)),
            &fs.root_handle(),
            b"f",
        )
        .unwrap()
        .fh;
    assert_eq!(fs.getattr(&fh).unwrap().size, 8);
    // READ with the anonymous stateid, from the middle: the tail and eof.
    let mut ops = vec![seq(sid, 2)];
    ops.extend(into_export());
    ops.extend([lookup(b"f"), read_op(Stateid4::ANONYMOUS, 6, 100)]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let NfsResop4::Read(Res4::Ok(r)) = &res.results[5] else {
        panic!("{res:?}")
    };
    assert_eq!((r.data.to_vec(), r.eof), (b"v4".to_vec(), true));
    // A short READ of the start is not eof.
    let mut ops = vec![seq(sid, 3)];
    ops.extend(into_export());
    ops.extend([lookup(b"f"), read_op(Stateid4::ANONYMOUS, 0, 5)]);
    let res = c.send(ops);
    let NfsResop4::Read(Res4::Ok(r)) = &res.results[5] else {
        panic!("{res:?}")
    };
    assert_eq!((r.data.to_vec(), r.eof), (b"hello".to_vec(), false));
}

#[test]
fn write_under_a_read_only_open_is_openmode_and_changes_nothing() {
    let c = Client::with_data();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"o",
            b"f",
            Some(Createhow4::Unchecked(mode_attrs(0o644))),
            OPEN4_SHARE_ACCESS_READ,
            OPEN4_SHARE_DENY_NONE,
        ),
        write_op(Stateid4::CURRENT, 0, StableHow4::FILE_SYNC, b"x"),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OPENMODE, "{:?}", statuses(&res));
    let fs = c.nfs.exports[0].fs.clone();
    let fh = fs
        .lookup(
            &Caller::with_cred(Cred::new(1000, 1000)),
            &fs.root_handle(),
            b"f",
        )
        .unwrap()
        .fh;
    assert_eq!(fs.getattr(&fh).unwrap().size, 0);
    // FILE_SYNC under the anonymous stateid goes through and is FILE_SYNC.
    let mut ops = vec![seq(sid, 2)];
    ops.extend(into_export());
    ops.extend([
        lookup(b"f"),
        write_op(Stateid4::ANONYMOUS, 0, StableHow4::FILE_SYNC, b"xyz"),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let NfsResop4::Write(Res4::Ok(w)) = &res.results[5] else {
        panic!("{res:?}")
    };
    assert_eq!((w.count, w.committed), (3, StableHow4::FILE_SYNC));
    assert_eq!(fs.getattr(&fh).unwrap().size, 3);
}

#[test]
fn data_ops_without_a_data_path_or_on_a_directory() {
    // No data path: the op's checks still come first (the export root is a directory) ...
    let c = Client::new();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.push(read_op(Stateid4::ANONYMOUS, 0, 10));
    assert_eq!(c.send(ops).status, Nfsstat4::ISDIR);
    // ... then NOTSUPP for a file.
    let fs = c.nfs.exports[0].fs.clone();
    let root = fs.root_handle();
    fs.create(
        &Caller::with_cred(Cred::new(1000, 1000)),
        &root,
        b"f",
        CreateHow::Unchecked(SetAttr::default()),
    )
    .unwrap();
    let mut ops = vec![seq(sid, 2)];
    ops.extend(into_export());
    ops.push(NfsArgop4::Lookup(Component4(Bytes::from_static(b"f"))));
    ops.push(read_op(Stateid4::ANONYMOUS, 0, 10));
    assert_eq!(c.send(ops).status, Nfsstat4::NOTSUPP);
    // With one, a directory is ISDIR.
    let c = Client::with_data();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.push(read_op(Stateid4::ANONYMOUS, 0, 10));
    assert_eq!(c.send(ops).status, Nfsstat4::ISDIR);
}

#[test]
fn anonymous_write_against_a_deny_write_open_is_locked_and_a_read_only_export_is_rofs() {
    let c = Client::with_data();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"o",
            b"f",
            Some(Createhow4::Unchecked(mode_attrs(0o644))),
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_WRITE,
        ),
        write_op(Stateid4::ANONYMOUS, 0, StableHow4::UNSTABLE, b"x"),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::LOCKED, "{:?}", statuses(&res));
    // The same export, read-only: the file system refuses the write, as v3's ROFS.
    let mut c = Client::with_data();
    let mut e = export("/srv/export", ClientMatch::Any, EXPORT_FSID);
    e.export.clients[0].options.read_only = true;
    let state = State4::new(Config4::default(), Box::new(SplitMix(5)));
    c.nfs = Arc::new(Nfs4::new(Arc::new(vec![e]), state, 1).unwrap());
    let fs = c.nfs.exports[0].fs.clone();
    let owner = Caller::with_cred(Cred::new(1000, 1000));
    fs.create(
        &owner,
        &fs.root_handle(),
        b"g",
        CreateHow::Unchecked(SetAttr::default()),
    )
    .unwrap();
    let sid = mount(&c);
    for (i, stable) in [StableHow4::UNSTABLE, StableHow4::FILE_SYNC]
        .into_iter()
        .enumerate()
    {
        let mut ops = vec![seq(sid, 1 + i as u32)];
        ops.extend(into_export());
        ops.extend([lookup(b"g"), write_op(Stateid4::ANONYMOUS, 0, stable, b"x")]);
        assert_eq!(c.send(ops).status, Nfsstat4::ROFS, "{stable:?}");
    }
}

#[test]
fn unstable_and_file_sync_writes_commit_and_read_back_without_a_runtime() {
    let (c, writes) = direct_client();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"o",
            b"f",
            Some(Createhow4::Unchecked(mode_attrs(0o644))),
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
        ),
        write_op(Stateid4::CURRENT, 0, StableHow4::UNSTABLE, b"hello"),
        write_op(Stateid4::CURRENT, 5, StableHow4::FILE_SYNC, b" v4"),
        NfsArgop4::Commit(CommitArgs {
            offset: 0,
            count: 0,
        }),
        read_op(Stateid4::CURRENT, 0, 100),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert_eq!(writes.load(std::sync::atomic::Ordering::SeqCst), 2);
    let fs = c.nfs.exports[0].fs.clone();
    let (unstable, sync) = (write_result(&res.results[5]), write_result(&res.results[6]));
    assert_eq!(
        (unstable.count, unstable.committed),
        (5, StableHow4::UNSTABLE)
    );
    assert_eq!((sync.count, sync.committed), (3, StableHow4::FILE_SYNC));
    assert_eq!(unstable.writeverf, fs.write_verifier());
    let NfsResop4::Commit(Res4::Ok(verf)) = &res.results[7] else {
        panic!("{res:?}")
    };
    assert_eq!(
        *verf,
        fs.write_verifier(),
        "COMMIT's verifier is the WRITEs'"
    );
    let r = read_result(&res.results[8]);
    assert_eq!((r.data.to_vec(), r.eof), (b"hello v4".to_vec(), true));
}

#[test]
fn only_a_last_read_whose_reply_the_slot_does_not_keep_may_splice() {
    let (c, _) = direct_client();
    let sid = mount(&c);
    let fs = c.nfs.exports[0].fs.clone();
    let owner = Caller::with_cred(Cred::new(1000, 1000));
    let f = fs
        .create(
            &owner,
            &fs.root_handle(),
            b"f",
            CreateHow::Unchecked(SetAttr::default()),
        )
        .unwrap()
        .fh;
    fs.write(
        &owner,
        &f,
        0,
        &[Bytes::from_static(b"0123456789")],
        StableHow::FileSync,
    )
    .unwrap();
    let to_file = |s: NfsArgop4| {
        let mut ops = vec![s];
        ops.extend(into_export());
        ops.push(lookup(b"f"));
        ops
    };
    // Last, and the slot keeps nothing: the READ may be spliced.
    let mut ops = to_file(seq_uncached(sid, 1));
    ops.push(read_op(Stateid4::ANONYMOUS, 2, 3));
    let (res, reads) = drive(&c, ops, true);
    assert_eq!(reads, [true]);
    assert_eq!(read_result(&res.results[5]).data.to_vec(), b"234");
    // With an op after it: chunks.
    let mut ops = to_file(seq_uncached(sid, 2));
    ops.extend([read_op(Stateid4::ANONYMOUS, 0, 2), getattr(&[num::SIZE])]);
    let (res, reads) = drive(&c, ops, true);
    assert_eq!(reads, [false]);
    assert_eq!(res.status, Nfsstat4::OK);
    assert_eq!(read_result(&res.results[5]).data.to_vec(), b"01");
    // Two READs: only the last may be spliced.
    let mut ops = to_file(seq_uncached(sid, 3));
    ops.extend([
        read_op(Stateid4::ANONYMOUS, 0, 1),
        read_op(Stateid4::ANONYMOUS, 9, 5),
    ]);
    let (res, reads) = drive(&c, ops, true);
    assert_eq!(reads, [false, true]);
    let last = read_result(&res.results[6]);
    assert_eq!((last.data.to_vec(), last.eof), (b"9".to_vec(), true));
    // The slot keeps the reply (sa_cachethis): it must be all in memory.
    let mut ops = to_file(seq(sid, 4));
    ops.push(read_op(Stateid4::ANONYMOUS, 0, 4));
    assert_eq!(drive(&c, ops, true).1, [false]);
    // A driver that cannot splice.
    let mut ops = to_file(seq_uncached(sid, 5));
    ops.push(read_op(Stateid4::ANONYMOUS, 0, 4));
    assert_eq!(drive(&c, ops, false).1, [false]);
}

/// A GETATTR after an UNSTABLE WRITE that write-behind still holds shows the written size
/// (the backend's is still 0): a client that chmods or utimens a file it just wrote (cp -p
/// through a v4.1 mount) must not see it empty.
#[test]
fn getattr_size_includes_writes_held_by_write_behind() {
    let c = Client::with_data();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"o",
            b"g",
            Some(Createhow4::Unchecked(mode_attrs(0o644))),
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
        ),
        write_op(Stateid4::CURRENT, 0, StableHow4::UNSTABLE, b"hello world"),
        NfsArgop4::Getfh(()),
        getattr(&[num::SIZE]),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    // Still held after the COMPOUND, so it was while GETATTR ran (nothing is held again).
    assert!(held(&c, &res.results[6]), "the UNSTABLE write is held");
    assert_eq!(attrs(&res.results[7]).size, Some(11));
}
