//! The 22 NFSv3 procedures: each with its statuses and attributes, their misuse, CREATE's
//! three modes and the write verifier.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_22_procedures_answer_with_correct_status_and_attributes() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;

    // 0 NULL
    assert!(matches!(c.nfs(Args3::Null(())).await, Res3::Null(())));
    // 1 GETATTR
    let rattr = ok(getattr(&mut c, &root).await).obj_attributes;
    let md = std::fs::metadata(&s.export).unwrap();
    assert_eq!(rattr.ftype, Ftype3::DIR);
    assert_eq!(rattr.fileid, md.ino());
    assert_eq!(rattr.mode, md.mode() & 0o7777);
    assert_eq!((rattr.uid, rattr.gid), (md.uid(), md.gid()));
    // 8 CREATE (UNCHECKED with a mode)
    let r = op!(
        c,
        Create,
        CreateArgs {
            where_: dirop(&root, "file"),
            how: CreateHow::Unchecked(Sattr3 {
                mode: Some(0o640),
                ..Default::default()
            }),
        }
    );
    let created = ok(r);
    let fh = created.obj.clone().expect("CREATE returns the handle");
    let fattr = created.obj_attributes.expect("CREATE returns attributes");
    assert_eq!(
        (fattr.ftype, fattr.mode, fattr.size),
        (Ftype3::REG, 0o640, 0)
    );
    assert!(created.dir_wcc.after.is_some(), "directory wcc after");
    // 3 LOOKUP finds the same object.
    let l = ok(lookup(&mut c, &root, "file").await);
    assert_eq!(l.obj_attributes.unwrap().fileid, fattr.fileid);
    assert_eq!(l.dir_attributes.unwrap().fileid, rattr.fileid);
    assert_eq!(
        lookup(&mut c, &root, "nope").await.status(),
        Nfsstat3::NOENT
    );
    // 7 WRITE, each stability; the verifier is the same for every call of this server run.
    let mut verfs = HashSet::new();
    for (i, stable) in [
        StableHow::UNSTABLE,
        StableHow::DATA_SYNC,
        StableHow::FILE_SYNC,
    ]
    .into_iter()
    .enumerate()
    {
        let w = ok(write(&mut c, &fh, i as u64 * 5, b"hello", stable).await);
        assert_eq!(w.count, 5);
        assert!(
            w.committed.0 >= stable.0,
            "committed {:?} < asked {stable:?}",
            w.committed
        );
        assert_eq!(w.file_wcc.after.unwrap().size, (i as u64 + 1) * 5);
        verfs.insert(w.verf);
    }
    assert_eq!(verfs.len(), 1, "one write verifier per server run");
    // 6 READ
    let rd = ok(read(&mut c, &fh, 0, 100).await);
    assert_eq!(rd.data.to_vec(), b"hellohellohello");
    assert_eq!(rd.count, 15);
    assert!(rd.eof);
    let rd = ok(read(&mut c, &fh, 5, 5).await);
    assert_eq!(
        (rd.data.to_vec().as_slice(), rd.eof),
        (&b"hello"[..], false)
    );
    assert_eq!(
        std::fs::read(s.export.join("file")).unwrap(),
        b"hellohellohello"
    );
    // 21 COMMIT: the same verifier.
    let cm = ok(op!(
        c,
        Commit,
        CommitArgs {
            file: fh.clone(),
            offset: 0,
            count: 0
        }
    ));
    assert!(verfs.contains(&cm.verf));
    assert_eq!(cm.file_wcc.after.unwrap().size, 15);
    // 2 SETATTR: size and mode, then a guard that does not match.
    let before = ok(getattr(&mut c, &fh).await).obj_attributes;
    let r = ok(op!(
        c,
        Setattr,
        SetattrArgs {
            object: fh.clone(),
            new_attributes: Sattr3 {
                mode: Some(0o600),
                size: Some(3),
                ..Default::default()
            },
            guard: Some(before.ctime),
        }
    ));
    let after = r.obj_wcc.after.unwrap();
    assert_eq!((after.mode, after.size), (0o600, 3));
    let stale_guard = Nfstime3 {
        seconds: before.ctime.seconds.wrapping_sub(1000),
        nseconds: 0,
    };
    let r = op!(
        c,
        Setattr,
        SetattrArgs {
            object: fh.clone(),
            new_attributes: Sattr3 {
                mode: Some(0o644),
                ..Default::default()
            },
            guard: Some(stale_guard),
        }
    );
    assert_eq!(r.status(), Nfsstat3::NOT_SYNC);
    assert_eq!(
        std::fs::metadata(s.export.join("file")).unwrap().mode() & 0o7777,
        0o600,
        "a guarded SETATTR that failed changed nothing"
    );
    // 4 ACCESS as the owner (root, not squashed here).
    let a = ok(op!(
        c,
        Access,
        AccessArgs {
            object: fh.clone(),
            access: ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_EXECUTE,
        }
    ));
    assert_eq!(
        a.access & (ACCESS3_READ | ACCESS3_MODIFY),
        ACCESS3_READ | ACCESS3_MODIFY
    );
    assert_eq!(a.access & ACCESS3_EXECUTE, 0, "0600 file is not executable");
    // 9 MKDIR
    let d = ok(op!(
        c,
        Mkdir,
        MkdirArgs {
            where_: dirop(&root, "dir"),
            attributes: Sattr3 {
                mode: Some(0o750),
                ..Default::default()
            },
        }
    ));
    let dfh = d.obj.unwrap();
    assert_eq!(d.obj_attributes.unwrap().ftype, Ftype3::DIR);
    assert_eq!(d.obj_attributes.unwrap().mode, 0o750);
    assert!(s.export.join("dir").is_dir());
    // 10 SYMLINK and 5 READLINK
    let sl = ok(op!(
        c,
        Symlink,
        SymlinkArgs {
            where_: dirop(&dfh, "link"),
            symlink_attributes: Sattr3::default(),
            symlink_data: Bytes::from_static(b"../file"),
        }
    ));
    let slfh = sl.obj.unwrap();
    assert_eq!(sl.obj_attributes.unwrap().ftype, Ftype3::LNK);
    let rl = ok(op!(
        c,
        Readlink,
        ReadlinkArgs {
            symlink: slfh.clone()
        }
    ));
    assert_eq!(rl.data.as_ref(), b"../file");
    assert_eq!(
        std::fs::read_link(s.export.join("dir/link")).unwrap(),
        PathBuf::from("../file")
    );
    // 11 MKNOD: a FIFO works; REG is not MKNOD's business.
    let fifo = ok(op!(
        c,
        Mknod,
        MknodArgs {
            where_: dirop(&root, "fifo"),
            what: MknodData::Fifo(Sattr3 {
                mode: Some(0o600),
                ..Default::default()
            }),
        }
    ));
    assert_eq!(fifo.obj_attributes.unwrap().ftype, Ftype3::FIFO);
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(s.export.join("fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
    let r = op!(
        c,
        Mknod,
        MknodArgs {
            where_: dirop(&root, "reg"),
            what: MknodData::Reg,
        }
    );
    assert_eq!(r.status(), Nfsstat3::BADTYPE);
    // 15 LINK
    let ln = ok(op!(
        c,
        Link,
        LinkArgs {
            file: fh.clone(),
            link: dirop(&dfh, "hard"),
        }
    ));
    assert_eq!(ln.file_attributes.unwrap().nlink, 2);
    assert_eq!(
        std::fs::metadata(s.export.join("dir/hard")).unwrap().ino(),
        fattr.fileid
    );
    // 14 RENAME within and across directories.
    ok(op!(
        c,
        Rename,
        RenameArgs {
            from: dirop(&dfh, "hard"),
            to: dirop(&root, "hard2"),
        }
    ));
    assert!(!s.export.join("dir/hard").exists());
    assert_eq!(
        std::fs::metadata(s.export.join("hard2")).unwrap().ino(),
        fattr.fileid
    );
    // 16 READDIR and 17 READDIRPLUS list what was made.
    let names = readdir_all(&mut c, &root, 4096).await;
    let want: HashSet<Vec<u8>> = [".", "..", "file", "dir", "fifo", "hard2"]
        .iter()
        .map(|n| n.as_bytes().to_vec())
        .collect();
    assert_eq!(names.keys().cloned().collect::<HashSet<_>>(), want);
    assert_eq!(names[&b"file".to_vec()], fattr.fileid);
    let plus = readdirplus_all(&mut c, &root, 4096).await;
    assert_eq!(plus.keys().cloned().collect::<HashSet<_>>(), want);
    let (attr, handle) = &plus[&b"dir".to_vec()];
    assert_eq!(attr.unwrap().ftype, Ftype3::DIR);
    assert_eq!(
        ok(getattr(&mut c, handle.as_ref().unwrap()).await)
            .obj_attributes
            .fileid,
        d.obj_attributes.unwrap().fileid
    );
    // 18 FSSTAT, 19 FSINFO, 20 PATHCONF
    let fs = ok(op!(
        c,
        Fsstat,
        FsstatArgs {
            fsroot: root.clone()
        }
    ));
    assert!(fs.tbytes > 0 && fs.fbytes <= fs.tbytes && fs.abytes <= fs.fbytes);
    assert!(fs.tfiles > 0 && fs.ffiles <= fs.tfiles);
    let fi = ok(op!(
        c,
        Fsinfo,
        FsinfoArgs {
            fsroot: root.clone()
        }
    ));
    assert_eq!(fi.rtmax, 1 << 20, "rtmax defaults to 1 MiB");
    assert_eq!(fi.wtmax, 1 << 20, "wtmax defaults to 1 MiB");
    assert!(fi.rtpref <= fi.rtmax && fi.wtpref <= fi.wtmax && fi.dtpref > 0);
    assert!(fi.maxfilesize >= 1 << 40);
    assert_ne!(fi.properties & FSF3_LINK, 0);
    assert_ne!(fi.properties & FSF3_SYMLINK, 0);
    let pc = ok(op!(
        c,
        Pathconf,
        PathconfArgs {
            object: root.clone()
        }
    ));
    assert_eq!(pc.name_max, 255);
    assert!(pc.no_trunc && pc.linkmax >= 1);
    // 12 REMOVE and 13 RMDIR
    assert_eq!(remove(&mut c, &dfh, "link").await.status(), Nfsstat3::OK);
    let r = op!(
        c,
        Rmdir,
        RmdirArgs {
            object: dirop(&root, "file")
        }
    );
    assert_eq!(r.status(), Nfsstat3::NOTDIR);
    std::fs::write(s.export.join("dir/occupant"), b"").unwrap();
    let r = op!(
        c,
        Rmdir,
        RmdirArgs {
            object: dirop(&root, "dir")
        }
    );
    assert_eq!(r.status(), Nfsstat3::NOTEMPTY);
    std::fs::remove_file(s.export.join("dir/occupant")).unwrap();
    let r = ok(op!(
        c,
        Rmdir,
        RmdirArgs {
            object: dirop(&root, "dir")
        }
    ));
    assert!(r.dir_wcc.after.is_some());
    assert!(!s.export.join("dir").exists());
    assert_eq!(remove(&mut c, &root, "dir").await.status(), Nfsstat3::NOENT);
    ok(remove(&mut c, &root, "file").await);
    assert!(!s.export.join("file").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misuse_of_procedures_gets_the_statuses_a_linux_server_gives() {
    let s = TestServer::start(rw()).await;
    std::fs::create_dir_all(s.export.join("d/sub")).unwrap();
    std::fs::create_dir_all(s.export.join("e/x")).unwrap();
    std::fs::write(s.export.join("f"), b"abc").unwrap();
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let f = ok(lookup(&mut c, &root, "f").await).object;
    let d = ok(lookup(&mut c, &root, "d").await).object;
    let sub = ok(lookup(&mut c, &d, "sub").await).object;
    let rename = |from: DirOpArgs3, to: DirOpArgs3| RenameArgs { from, to };
    let checks: Vec<(&str, Nfsstat3, Nfsstat3)> = vec![
        (
            "LOOKUP in a file",
            lookup(&mut c, &f, "x").await.status(),
            Nfsstat3::NOTDIR,
        ),
        (
            "READ of a directory",
            read(&mut c, &d, 0, 10).await.status(),
            Nfsstat3::ISDIR,
        ),
        (
            "WRITE to a directory",
            write(&mut c, &d, 0, b"x", StableHow::FILE_SYNC)
                .await
                .status(),
            Nfsstat3::ISDIR,
        ),
        (
            "REMOVE of a directory",
            remove(&mut c, &root, "d").await.status(),
            Nfsstat3::ISDIR,
        ),
        (
            "RMDIR of '.'",
            op!(
                c,
                Rmdir,
                RmdirArgs {
                    object: dirop(&d, ".")
                }
            )
            .status(),
            Nfsstat3::ACCES,
        ),
        (
            "RENAME of a directory into itself",
            op!(c, Rename, rename(dirop(&root, "d"), dirop(&sub, "d2"))).status(),
            Nfsstat3::INVAL,
        ),
        (
            "RENAME over a non-empty directory",
            op!(c, Rename, rename(dirop(&root, "d"), dirop(&root, "e"))).status(),
            Nfsstat3::NOTEMPTY,
        ),
        (
            "RENAME of a file over a directory",
            op!(c, Rename, rename(dirop(&root, "f"), dirop(&root, "e"))).status(),
            Nfsstat3::ISDIR,
        ),
        (
            "RENAME of a missing name",
            op!(c, Rename, rename(dirop(&root, "nope"), dirop(&root, "n2"))).status(),
            Nfsstat3::NOENT,
        ),
        (
            "LINK to a directory",
            op!(
                c,
                Link,
                LinkArgs {
                    file: d.clone(),
                    link: dirop(&root, "dl")
                }
            )
            .status(),
            Nfsstat3::ISDIR,
        ),
        (
            "LINK over an existing name",
            op!(
                c,
                Link,
                LinkArgs {
                    file: f.clone(),
                    link: dirop(&root, "e")
                }
            )
            .status(),
            Nfsstat3::EXIST,
        ),
        (
            "READLINK of a file",
            op!(c, Readlink, ReadlinkArgs { symlink: f.clone() }).status(),
            Nfsstat3::INVAL,
        ),
        (
            "READDIR of a file",
            op!(
                c,
                Readdir,
                ReaddirArgs {
                    dir: f.clone(),
                    cookie: 0,
                    cookieverf: [0; 8],
                    count: 4096
                }
            )
            .status(),
            Nfsstat3::NOTDIR,
        ),
        (
            "MKDIR over an existing name",
            op!(
                c,
                Mkdir,
                MkdirArgs {
                    where_: dirop(&root, "d"),
                    attributes: Sattr3::default()
                }
            )
            .status(),
            Nfsstat3::EXIST,
        ),
        (
            "SYMLINK over an existing name",
            op!(
                c,
                Symlink,
                SymlinkArgs {
                    where_: dirop(&root, "f"),
                    symlink_attributes: Sattr3::default(),
                    symlink_data: Bytes::from_static(b"x"),
                }
            )
            .status(),
            Nfsstat3::EXIST,
        ),
        (
            "MKNOD of a directory",
            op!(
                c,
                Mknod,
                MknodArgs {
                    where_: dirop(&root, "md"),
                    what: MknodData::Dir
                }
            )
            .status(),
            Nfsstat3::BADTYPE,
        ),
        (
            "WRITE whose count exceeds its data",
            op!(
                c,
                Write,
                WriteArgs {
                    file: f.clone(),
                    offset: 0,
                    count: 10,
                    stable: StableHow::FILE_SYNC,
                    data: Payload::from(b"ab".to_vec()),
                }
            )
            .status(),
            Nfsstat3::INVAL,
        ),
        (
            "WRITE with an undefined stable_how",
            op!(
                c,
                Write,
                WriteArgs {
                    file: f.clone(),
                    offset: 0,
                    count: 2,
                    stable: StableHow(7),
                    data: Payload::from(b"ab".to_vec()),
                }
            )
            .status(),
            Nfsstat3::INVAL,
        ),
        (
            "WRITE past the largest file size",
            write(&mut c, &f, u64::MAX - 1, b"ab", StableHow::FILE_SYNC)
                .await
                .status(),
            Nfsstat3::FBIG,
        ),
        (
            "READDIR with a cookie and verifier this server never gave",
            op!(
                c,
                Readdir,
                ReaddirArgs {
                    dir: d.clone(),
                    cookie: 0x7777_7777_7777,
                    cookieverf: [1; 8],
                    count: 4096
                }
            )
            .status(),
            Nfsstat3::BAD_COOKIE,
        ),
    ];
    let wrong: Vec<String> = checks
        .iter()
        .filter(|(_, got, want)| got != want)
        .map(|(what, got, want)| format!("{what}: got {}, want {}", got.name(), want.name()))
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
    // Nothing changed on disk.
    assert_eq!(std::fs::read(s.export.join("f")).unwrap(), b"abc");
    assert!(s.export.join("d/sub").is_dir() && s.export.join("e/x").is_dir());
    // READ edge cases: past EOF is an empty eof reply; a zero count at 0 is not eof.
    let r = ok(read(&mut c, &f, 100, 10).await);
    assert_eq!((r.count, r.eof, r.data.len()), (0, true, 0));
    let r = ok(read(&mut c, &f, 0, 0).await);
    assert_eq!((r.count, r.eof), (0, false));
    // A READ larger than rtmax is cut to rtmax.
    std::fs::write(s.export.join("f"), vec![1u8; 3 << 20]).unwrap();
    let r = ok(read(&mut c, &f, 0, 2 << 20).await);
    assert_eq!((r.count, r.eof, r.data.len()), (1 << 20, false, 1 << 20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_unchecked_guarded_and_exclusive_follow_rfc_1813() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let sattr = Sattr3 {
        mode: Some(0o644),
        ..Default::default()
    };
    let create_how = |name: &str, how: CreateHow| CreateArgs {
        where_: dirop(&root, name),
        how,
    };
    // UNCHECKED over an existing file succeeds (and may truncate only if asked).
    std::fs::write(s.export.join("u"), b"keep").unwrap();
    ok(op!(c, Create, create_how("u", CreateHow::Unchecked(sattr))));
    assert_eq!(std::fs::read(s.export.join("u")).unwrap(), b"keep");
    // GUARDED: new, then EXIST.
    ok(op!(c, Create, create_how("g", CreateHow::Guarded(sattr))));
    let r = op!(c, Create, create_how("g", CreateHow::Guarded(sattr)));
    assert_eq!(r.status(), Nfsstat3::EXIST);
    // EXCLUSIVE: the same verifier retransmitted succeeds with the same object; another EXIST.
    let v1 = *b"verifier";
    let first = ok(op!(c, Create, create_how("x", CreateHow::Exclusive(v1))));
    let again = ok(op!(c, Create, create_how("x", CreateHow::Exclusive(v1))));
    let fileid = std::fs::metadata(s.export.join("x")).unwrap().ino();
    for r in [&first, &again] {
        if let Some(a) = r.obj_attributes {
            assert_eq!(a.fileid, fileid);
        }
        let fh = r.obj.clone().expect("EXCLUSIVE create returns a handle");
        assert_eq!(ok(getattr(&mut c, &fh).await).obj_attributes.fileid, fileid);
    }
    let r = op!(
        c,
        Create,
        create_how("x", CreateHow::Exclusive(*b"another!"))
    );
    assert_eq!(r.status(), Nfsstat3::EXIST);
    // EXCLUSIVE over a file that was not created exclusively is EXIST too.
    let r = op!(c, Create, create_how("u", CreateHow::Exclusive(v1)));
    assert_eq!(r.status(), Nfsstat3::EXIST);
    // The client then sets the attributes (RFC 1813 §3.3.8), and the file is ordinary.
    let fh = first.obj.unwrap();
    ok(op!(
        c,
        Setattr,
        SetattrArgs {
            object: fh.clone(),
            new_attributes: Sattr3 {
                mode: Some(0o600),
                atime: SetTime::ServerTime,
                mtime: SetTime::ServerTime,
                ..Default::default()
            },
            guard: None,
        }
    ));
    assert_eq!(
        std::fs::metadata(s.export.join("x")).unwrap().mode() & 0o7777,
        0o600
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_verifier_is_constant_within_a_run_and_changes_across_a_restart() {
    let dirs = TestDirs::new("wire");
    let mut s = TestServer::start_in(rw(), dirs).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let fh = create(&mut c, &root, "v").await;
    let mut first_run = HashSet::new();
    for i in 0..10u64 {
        let stable = [
            StableHow::UNSTABLE,
            StableHow::DATA_SYNC,
            StableHow::FILE_SYNC,
        ][(i % 3) as usize];
        first_run.insert(ok(write(&mut c, &fh, i, b"z", stable).await).verf);
    }
    first_run.insert(
        ok(op!(
            c,
            Commit,
            CommitArgs {
                file: fh.clone(),
                offset: 0,
                count: 0
            }
        ))
        .verf,
    );
    assert_eq!(first_run.len(), 1, "{first_run:?}");
    drop(c);
    s.restart().await;
    let mut c = s.connect().await;
    // The handle from before the restart still works (same state dir).
    let w = ok(write(&mut c, &fh, 0, b"y", StableHow::UNSTABLE).await);
    assert!(
        !first_run.contains(&w.verf),
        "a restarted server must change the write verifier so clients resend unstable data"
    );
    let cm = ok(op!(
        c,
        Commit,
        CommitArgs {
            file: fh.clone(),
            offset: 0,
            count: 0
        }
    ));
    assert_eq!(cm.verf, w.verf);
}
