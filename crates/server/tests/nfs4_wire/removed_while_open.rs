//! Files removed or renamed over while open: kept under a hidden name until their last CLOSE
//! (`src/nfs4/parked.rs`), not listed, unlinked at the next start; and SETATTR of the size and
//! REMOVE right after held UNSTABLE writes.

use super::*;

/// The names in `dir`, as the server's local file system shows them.
fn names_in(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// A file removed while open (REMOVE, §18.25): as with a local file, READ and WRITE under the
/// open stateid go on after the name is gone, and the data goes with the last CLOSE. The
/// server keeps the file under a hidden name meanwhile (`src/nfs4/parked.rs`).
/// UNSTABLE writes held by write-behind, then SETATTR of the size and REMOVE in the next
/// COMPOUNDs: both answer OK at once (no NFS4ERR_DELAY, which costs a Linux client 100 ms or
/// more per retry), and the file keeps the held bytes below the new size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncate_and_remove_right_after_unstable_writes_are_not_delayed() {
    let s = TestServer::start(rw()).await;
    let mut v = V4::mount(&s, "settle client").await;
    let mut fhs = Vec::new();
    for name in ["cut", "gone"] {
        let (o, fh) = v
            .open(&s.export, "owner", name, true, OPEN4_SHARE_ACCESS_BOTH, 0)
            .await
            .unwrap();
        let res = v
            .send(vec![
                NfsArgop4::Putfh(fh.clone()),
                NfsArgop4::Write(WriteArgs {
                    stateid: o.stateid,
                    offset: 0,
                    stable: StableHow4::UNSTABLE,
                    data: sluice_xdr::Payload::from_chunks(vec![Bytes::from_static(
                        b"hello world",
                    )]),
                }),
                close_op(o.stateid),
            ])
            .await;
        assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
        fhs.push(fh);
    }
    let size = sluice_xdr::nfs4::attrs::AttrValues {
        size: Some(5),
        ..Default::default()
    };
    let res = v
        .send(vec![
            NfsArgop4::Putfh(fhs[0].clone()),
            NfsArgop4::Setattr(SetattrArgs {
                stateid: Stateid4::ANONYMOUS,
                obj_attributes: size.encode(),
            }),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert_eq!(std::fs::read(s.export.join("cut")).unwrap(), b"hello");
    let mut ops = walk_to(&s.export);
    ops.push(NfsArgop4::Remove(component("gone")));
    let res = v.send(ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert!(!s.export.join("gone").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_file_stays_usable_after_remove() {
    let s = TestServer::start(rw()).await;
    let mut v = V4::mount(&s, "remove client").await;
    let (o, fh) = v
        .open(
            &s.export,
            "owner",
            "doomed",
            true,
            OPEN4_SHARE_ACCESS_BOTH,
            0,
        )
        .await
        .unwrap();
    let write = |offset: u64, data: &'static [u8]| {
        NfsArgop4::Write(WriteArgs {
            stateid: o.stateid,
            offset,
            stable: StableHow4::FILE_SYNC,
            data: sluice_xdr::Payload::from_chunks(vec![Bytes::from_static(data)]),
        })
    };
    let res = v
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            write(0, b"before remove\n"),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let mut ops = walk_to(&s.export);
    ops.push(NfsArgop4::Remove(component("doomed")));
    ops.push(lookup("doomed"));
    let res = v.send(ops).await;
    assert_eq!(res.status, Nfsstat4::NOENT, "{:?}", statuses(&res));
    assert!(!s.export.join("doomed").exists());
    let res = v
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            write(14, b"after remove\n"),
            read_op(o.stateid),
            NfsArgop4::Getattr(Bitmap4::from_bits(&[num::SIZE])),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let NfsResop4::Read(Res4::Ok(r)) = &res.results[3] else {
        panic!("{res:?}")
    };
    assert_eq!(r.data.to_vec(), b"before remove\nafter remove\n");
    assert_eq!(attrs(&res.results[4]).size, Some(27));
    let names = || names_in(&s.export);
    let kept = names();
    assert!(
        kept.len() == 1 && kept[0].starts_with(".sluice-open-"),
        "kept under a hidden name while open: {kept:?}"
    );
    // The last CLOSE takes the file away.
    let res = v
        .send(vec![NfsArgop4::Putfh(fh.clone()), close_op(o.stateid)])
        .await;
    assert_eq!(res.status, Nfsstat4::OK);
    assert_eq!(names(), Vec::<String>::new(), "nothing left after CLOSE");
    let res = v
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            read_op(Stateid4::ANONYMOUS),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::STALE, "the file is gone");

    // A file nobody has open is unlinked at once, as in v3.
    std::fs::write(s.export.join("plain"), b"x").unwrap();
    let mut ops = walk_to(&s.export);
    ops.push(NfsArgop4::Remove(component("plain")));
    assert_eq!(v.send(ops).await.status, Nfsstat4::OK);
    assert_eq!(names(), Vec::<String>::new());
}

/// RENAME over a file another client has open (§18.26): the open file's data is not destroyed
/// while it is open. Its opener reads the old contents under its stateid after the rename,
/// the name shows the new file, and the old one goes with its last CLOSE (kept meanwhile
/// under a hidden name, `src/nfs4/parked.rs`). A rename over a file nobody has open leaves
/// nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_renamed_over_while_open_stays_usable_until_close() {
    let s = TestServer::start(rw()).await;
    let mut a = V4::mount(&s, "rename holder").await;
    let mut b = V4::mount(&s, "rename writer").await;
    std::fs::write(s.export.join("target"), b"old contents\n").unwrap();
    std::fs::write(s.export.join("new"), b"new contents\n").unwrap();
    let (o, fh) = a
        .open(
            &s.export,
            "holder",
            "target",
            false,
            OPEN4_SHARE_ACCESS_READ,
            0,
        )
        .await
        .unwrap();
    let rename = |from: &str, to: &str| {
        let mut ops = walk_to(&s.export);
        ops.push(NfsArgop4::Savefh(()));
        ops.push(NfsArgop4::Rename(RenameArgs {
            oldname: component(from),
            newname: component(to),
        }));
        ops
    };
    let res = b.send(rename("new", "target")).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert_eq!(
        std::fs::read(s.export.join("target")).unwrap(),
        b"new contents\n",
        "the name is the new file's"
    );
    let res = a
        .send(vec![NfsArgop4::Putfh(fh.clone()), read_op(o.stateid)])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let NfsResop4::Read(Res4::Ok(r)) = &res.results[2] else {
        panic!("{res:?}")
    };
    assert_eq!(
        r.data.to_vec(),
        b"old contents\n",
        "the opener's data survived"
    );
    let names = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&s.export)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let kept = names();
    assert!(
        kept.len() == 2 && kept[0].starts_with(".sluice-open-") && kept[1] == "target",
        "the replaced file is kept under a hidden name while open: {kept:?}"
    );
    let res = a
        .send(vec![NfsArgop4::Putfh(fh.clone()), close_op(o.stateid)])
        .await;
    assert_eq!(res.status, Nfsstat4::OK);
    assert_eq!(
        names(),
        ["target"],
        "the replaced file went with its last CLOSE"
    );

    // Nobody has `target` open now: replaced at once, as in v3.
    std::fs::write(s.export.join("newer"), b"newer\n").unwrap();
    let res = b.send(rename("newer", "target")).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert_eq!(names(), ["target"]);
    assert_eq!(std::fs::read(s.export.join("target")).unwrap(), b"newer\n");
}

/// Parked files are the server's, not the clients': READDIR leaves their hidden names out in
/// v4 and in v3 (READDIR and READDIRPLUS), and a server stopped while one was open unlinks it
/// when it starts again (from its journal in the state directory, `src/nfs4/parked.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_files_are_not_listed_and_a_restart_unlinks_them() {
    use sluice_xdr::nfs3::{Args3, Res3};
    let mut s = TestServer::start(rw()).await;
    let mut v = V4::mount(&s, "parked client").await;
    std::fs::write(s.export.join("kept"), b"k").unwrap();
    let (_open, _fh) = v
        .open(
            &s.export,
            "owner",
            "doomed",
            true,
            OPEN4_SHARE_ACCESS_BOTH,
            0,
        )
        .await
        .unwrap();
    let mut ops = walk_to(&s.export);
    ops.push(NfsArgop4::Remove(component("doomed")));
    assert_eq!(v.send(ops).await.status, Nfsstat4::OK);
    let export = s.export.clone();
    let on_disk = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&export)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let disk = on_disk();
    assert!(
        disk.len() == 2 && disk[0].starts_with(".sluice-open-"),
        "{disk:?}"
    );

    let mut ops = walk_to(&s.export);
    ops.push(NfsArgop4::Readdir(ReaddirArgs {
        cookie: 0,
        cookieverf: [0; 8],
        dircount: 4096,
        maxcount: 8192,
        attr_request: Bitmap4::from_bits(&[num::TYPE]),
    }));
    let res = v.send(ops).await;
    let Some(NfsResop4::Readdir(Res4::Ok(dir))) = res.results.last() else {
        panic!("{res:?}")
    };
    let names: Vec<&[u8]> = dir.entries.iter().map(|e| &e.name.0[..]).collect();
    assert_eq!(names, [b"kept"], "v4 READDIR");

    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let plain = support::ok(op!(
        c,
        Readdir,
        sluice_xdr::nfs3::ReaddirArgs {
            dir: root.clone(),
            cookie: 0,
            cookieverf: [0; 8],
            count: 4096,
        }
    ));
    let names: Vec<&[u8]> = plain.entries.iter().map(|e| &e.name[..]).collect();
    assert!(plain.eof);
    assert_eq!(names, [&b"."[..], b"..", b"kept"], "v3 READDIR");
    let plus = support::ok(op!(
        c,
        Readdirplus,
        sluice_xdr::nfs3::ReaddirplusArgs {
            dir: root,
            cookie: 0,
            cookieverf: [0; 8],
            dircount: 4096,
            maxcount: 8192,
        }
    ));
    let names: Vec<&[u8]> = plus.entries.iter().map(|e| &e.name[..]).collect();
    assert_eq!(names, [&b"."[..], b"..", b"kept"], "v3 READDIRPLUS");

    // Stopped with the file still open (no CLOSE): the next start unlinks it.
    drop(v);
    s.restart().await;
    assert_eq!(on_disk(), ["kept"], "the leftover went at start-up");
}

/// A file hard-linked as `a/f` and `b/f` is open through `a/f` (its handle names `a`); `a/f`
/// goes behind the server's back (a local user, or an NFSv3 client); another client then
/// REMOVEs `b/f`, the last name, through a handle that names `b`. The file is open whichever
/// name it was opened by (state is the file's, `FileSystem::state_key`): kept under a hidden
/// name, readable by the opener, gone at its CLOSE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_link_of_an_open_file_removed_by_another_name_is_kept_until_close() {
    let s = TestServer::start(rw()).await;
    let (dir_a, dir_b) = (s.export.join("a"), s.export.join("b"));
    std::fs::create_dir(&dir_a).unwrap();
    std::fs::create_dir(&dir_b).unwrap();
    std::fs::write(dir_a.join("f"), b"still here\n").unwrap();
    std::fs::hard_link(dir_a.join("f"), dir_b.join("f")).unwrap();
    let mut a = V4::mount(&s, "link opener").await;
    let mut b = V4::mount(&s, "link remover").await;
    let (o, fh) = a
        .open(&dir_a, "opener", "f", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .unwrap();
    std::fs::remove_file(dir_a.join("f")).unwrap();
    let mut ops = walk_to(&dir_b);
    ops.push(NfsArgop4::Remove(component("f")));
    let res = b.send(ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let names = || names_in(&dir_b);
    let kept = names();
    assert!(
        kept.len() == 1 && kept[0].starts_with(".sluice-open-"),
        "kept under a hidden name while open: {kept:?}"
    );
    let res = a
        .send(vec![NfsArgop4::Putfh(fh.clone()), read_op(o.stateid)])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let NfsResop4::Read(Res4::Ok(r)) = &res.results[2] else {
        panic!("{res:?}")
    };
    assert_eq!(r.data.to_vec(), b"still here\n");
    let res = a
        .send(vec![NfsArgop4::Putfh(fh), close_op(o.stateid)])
        .await;
    assert_eq!(res.status, Nfsstat4::OK);
    assert!(
        names().is_empty(),
        "gone with the last CLOSE: {:?}",
        names()
    );
}
