//! Names a Linux server refuses, and file handles: across a restart, forged, removed or
//! foreign, and never leading out of the export.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_are_refused_as_a_linux_server_would() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    std::fs::write(s.export.join("f"), b"").unwrap();
    let long = "n".repeat(256);
    let cases: [(&[u8], Nfsstat3); 5] = [
        (b"a/b", Nfsstat3::ACCES),
        (b"../escape", Nfsstat3::ACCES),
        (b"nul\0byte", Nfsstat3::ACCES),
        (b"", Nfsstat3::ACCES),
        (long.as_bytes(), Nfsstat3::NAMETOOLONG),
    ];
    for (name, want) in cases {
        let shown = String::from_utf8_lossy(&name[..name.len().min(20)]).into_owned();
        let args = CreateArgs {
            where_: DirOpArgs3 {
                dir: root.clone(),
                name: Bytes::copy_from_slice(name),
            },
            how: CreateHow::Unchecked(Sattr3::default()),
        };
        assert_eq!(op!(c, Create, args).status(), want, "CREATE {shown:?}");
        let args = MkdirArgs {
            where_: DirOpArgs3 {
                dir: root.clone(),
                name: Bytes::copy_from_slice(name),
            },
            attributes: Sattr3::default(),
        };
        assert_eq!(op!(c, Mkdir, args).status(), want, "MKDIR {shown:?}");
        let l = lookup_raw(&mut c, &root, name).await;
        assert!(
            l.status() == want || (l.status() == Nfsstat3::NOENT && name.is_empty()),
            "LOOKUP {shown:?}: {:?}",
            l.status()
        );
        let r = op!(
            c,
            Rename,
            RenameArgs {
                from: dirop(&root, "f"),
                to: DirOpArgs3 {
                    dir: root.clone(),
                    name: Bytes::copy_from_slice(name),
                },
            }
        );
        assert_eq!(r.status(), want, "RENAME to {shown:?}");
    }
    // A 255-byte name is fine.
    let max = "m".repeat(255);
    ok(op!(
        c,
        Create,
        CreateArgs {
            where_: dirop(&root, &max),
            how: CreateHow::Guarded(Sattr3::default()),
        }
    ));
    // "." and ".." always exist.
    for name in [".", ".."] {
        for how in [
            CreateHow::Guarded(Sattr3::default()),
            CreateHow::Exclusive(*b"12345678"),
        ] {
            let r = op!(
                c,
                Create,
                CreateArgs {
                    where_: dirop(&root, name),
                    how,
                }
            );
            assert_eq!(r.status(), Nfsstat3::EXIST, "CREATE {name:?}");
        }
        let r = op!(
            c,
            Mkdir,
            MkdirArgs {
                where_: dirop(&root, name),
                attributes: Sattr3::default(),
            }
        );
        assert_eq!(r.status(), Nfsstat3::EXIST, "MKDIR {name:?}");
    }
    // Nothing escaped the export.
    let mut on_disk: Vec<String> = std::fs::read_dir(&s.export)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    on_disk.sort();
    assert_eq!(on_disk, vec!["f".to_string(), max]);
    assert!(!s.export.parent().unwrap().join("escape").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_survive_a_restart_with_the_same_state_dir() {
    let mut s = TestServer::start_in(rw(), TestDirs::new("wire")).await;
    std::fs::create_dir(s.export.join("d")).unwrap();
    std::fs::write(s.export.join("d/f"), b"persistent").unwrap();
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let d = ok(lookup(&mut c, &root, "d").await).object;
    let f = ok(lookup(&mut c, &d, "f").await).object;
    drop(c);
    s.restart().await;
    let mut c = s.connect().await;
    for (fh, ino) in [
        (&root, std::fs::metadata(&s.export).unwrap().ino()),
        (&d, std::fs::metadata(s.export.join("d")).unwrap().ino()),
        (&f, std::fs::metadata(s.export.join("d/f")).unwrap().ino()),
    ] {
        assert_eq!(ok(getattr(&mut c, fh).await).obj_attributes.fileid, ino);
    }
    assert_eq!(
        ok(read(&mut c, &f, 0, 100).await).data.to_vec(),
        b"persistent"
    );
    // The root handle MNT gives after the restart is the same bytes.
    assert_eq!(c.mnt_root(&s).await, root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_removed_and_foreign_handles_are_refused() {
    let s = TestServer::start(rw()).await;
    std::fs::write(s.export.join("f"), b"data").unwrap();
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let f = ok(lookup(&mut c, &root, "f").await).object;
    // Flip each byte in turn: never accepted.
    for i in 0..f.0.len() {
        let mut forged = f.0.to_vec();
        forged[i] ^= 0x5a;
        let st = getattr(&mut c, &NfsFh3(Bytes::from(forged))).await.status();
        assert!(
            st == Nfsstat3::BADHANDLE || st == Nfsstat3::STALE,
            "byte {i} flipped: {st:?}"
        );
    }
    // Truncated, empty and random handles.
    for bad in [
        f.0.slice(..f.0.len() - 1),
        Bytes::new(),
        Bytes::from_static(&[1u8; 64]),
    ] {
        let st = getattr(&mut c, &NfsFh3(bad.clone())).await.status();
        assert!(
            st == Nfsstat3::BADHANDLE || st == Nfsstat3::STALE,
            "{bad:02x?}: {st:?}"
        );
    }
    // A removed file's handle is stale.
    ok(remove(&mut c, &root, "f").await);
    assert_eq!(getattr(&mut c, &f).await.status(), Nfsstat3::STALE);
    assert_eq!(read(&mut c, &f, 0, 10).await.status(), Nfsstat3::STALE);
    // Removed behind the server's back, with a new file reusing the name.
    std::fs::write(s.export.join("g"), b"1").unwrap();
    let g = ok(lookup(&mut c, &root, "g").await).object;
    std::fs::remove_file(s.export.join("g")).unwrap();
    std::fs::write(s.export.join("g"), b"2").unwrap();
    assert_eq!(getattr(&mut c, &g).await.status(), Nfsstat3::STALE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dotdot_at_the_root_and_symlinks_out_stay_inside_the_export() {
    let s = TestServer::start(rw()).await;
    std::os::unix::fs::symlink("/etc", s.export.join("etc-link")).unwrap();
    std::fs::write(s.export.join("victim"), b"v").unwrap();
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let root_id = ok(getattr(&mut c, &root).await).obj_attributes.fileid;
    // ".." of the root is the root.
    let up = ok(lookup(&mut c, &root, "..").await);
    assert_eq!(up.obj_attributes.unwrap().fileid, root_id);
    let up2 = ok(lookup(&mut c, &up.object, "..").await);
    assert_eq!(up2.obj_attributes.unwrap().fileid, root_id);
    // READDIRPLUS of the root does not hand out the parent either.
    for (name, (attr, _)) in readdirplus_all(&mut c, &root, 8192).await {
        if name == b".." {
            if let Some(a) = attr {
                assert_eq!(a.fileid, root_id, "READDIRPLUS '..' of the root");
            }
        }
    }
    // The symlink is a symlink; the server never follows it.
    let l = ok(lookup(&mut c, &root, "etc-link").await);
    assert_eq!(l.obj_attributes.unwrap().ftype, Ftype3::LNK);
    let rl = ok(op!(
        c,
        Readlink,
        ReadlinkArgs {
            symlink: l.object.clone()
        }
    ));
    assert_eq!(rl.data.as_ref(), b"/etc");
    let through = lookup(&mut c, &l.object, "passwd").await.status();
    assert_ne!(through, Nfsstat3::OK, "LOOKUP through a symlink");
    let r = op!(
        c,
        Readdir,
        ReaddirArgs {
            dir: l.object.clone(),
            cookie: 0,
            cookieverf: [0; 8],
            count: 4096,
        }
    );
    assert_ne!(r.status(), Nfsstat3::OK, "READDIR of a symlink");
    let r = op!(
        c,
        Create,
        CreateArgs {
            where_: dirop(&l.object, "planted"),
            how: CreateHow::Unchecked(Sattr3::default()),
        }
    );
    assert_ne!(r.status(), Nfsstat3::OK, "CREATE through a symlink");
    assert!(!Path::new("/etc/planted").exists());
    // RENAME cannot move a file out: names are single components.
    let r = op!(
        c,
        Rename,
        RenameArgs {
            from: dirop(&root, "victim"),
            to: dirop(&root, "../victim"),
        }
    );
    assert_eq!(r.status(), Nfsstat3::ACCES);
    let r = op!(
        c,
        Rename,
        RenameArgs {
            from: dirop(&root, "victim"),
            to: dirop(&l.object, "victim"),
        }
    );
    assert_ne!(r.status(), Nfsstat3::OK, "RENAME into a symlink to /etc");
    assert!(s.export.join("victim").exists());
    assert!(!Path::new("/etc/victim").exists());
}
