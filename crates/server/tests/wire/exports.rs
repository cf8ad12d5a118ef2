//! Identity and export options (AUTH_SYS owners, root and all squash, read-only exports,
//! allowed networks) and several exports side by side.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_sys_uid_owns_what_it_creates_and_cannot_write_others_files() {
    let s = TestServer::start(with_options(|o| o.squash = Squash::Root)).await;
    std::fs::set_permissions(&s.export, std::fs::Permissions::from_mode(0o777)).unwrap();
    let theirs = s.export.join("theirs");
    std::fs::write(&theirs, b"owned by 1001").unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::chown(&theirs, Some(1001), Some(1001)).unwrap();
    let mut c = s.connect().await;
    c.cred = auth_sys(1000, 1000);
    let root = c.mnt_root(&s).await;
    let fh = create(&mut c, &root, "mine").await;
    let md = std::fs::metadata(s.export.join("mine")).unwrap();
    assert_eq!((md.uid(), md.gid()), (1000, 1000));
    ok(write(&mut c, &fh, 0, b"ok", StableHow::FILE_SYNC).await);
    let t = ok(lookup(&mut c, &root, "theirs").await).object;
    assert_eq!(
        write(&mut c, &t, 0, b"no", StableHow::FILE_SYNC)
            .await
            .status(),
        Nfsstat3::ACCES
    );
    assert_eq!(std::fs::read(&theirs).unwrap(), b"owned by 1001");
    // Reading is allowed (0644).
    assert_eq!(ok(read(&mut c, &t, 0, 5).await).data.to_vec(), b"owned");
    // Nor may 1000 chmod it.
    let r = op!(
        c,
        Setattr,
        SetattrArgs {
            object: t.clone(),
            new_attributes: Sattr3 {
                mode: Some(0o666),
                ..Default::default()
            },
            guard: None,
        }
    );
    assert_eq!(r.status(), Nfsstat3::PERM);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_squash_maps_uid_0_to_65534_and_no_root_squash_keeps_it() {
    for (squash, want) in [(Squash::Root, 65534), (Squash::None, 0)] {
        let s = TestServer::start(with_options(|o| o.squash = squash)).await;
        std::fs::set_permissions(&s.export, std::fs::Permissions::from_mode(0o777)).unwrap();
        let mut c = s.connect().await;
        c.cred = auth_sys(0, 0);
        let root = c.mnt_root(&s).await;
        let fh = create(&mut c, &root, "f").await;
        let md = std::fs::metadata(s.export.join("f")).unwrap();
        assert_eq!((md.uid(), md.gid()), (want, want), "{squash:?}");
        assert_eq!(ok(getattr(&mut c, &fh).await).obj_attributes.uid, want);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_squash_with_anonuid_maps_every_caller() {
    let s = TestServer::start(with_options(|o| {
        o.squash = Squash::All;
        o.anonuid = 1234;
        o.anongid = 4321;
    }))
    .await;
    std::fs::set_permissions(&s.export, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    for (i, cred) in [auth_sys(1000, 1000), auth_sys(0, 0), OpaqueAuth::none()]
        .into_iter()
        .enumerate()
    {
        c.cred = cred;
        create(&mut c, &root, &format!("f{i}")).await;
        let md = std::fs::metadata(s.export.join(format!("f{i}"))).unwrap();
        assert_eq!((md.uid(), md.gid()), (1234, 4321), "caller {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_export_refuses_modifications_with_rofs() {
    let s = TestServer::start(with_options(|o| o.read_only = true)).await;
    std::fs::write(s.export.join("f"), b"read me").unwrap();
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let f = ok(lookup(&mut c, &root, "f").await).object;
    assert_eq!(ok(read(&mut c, &f, 0, 100).await).data.to_vec(), b"read me");
    assert_eq!(
        write(&mut c, &f, 0, b"x", StableHow::FILE_SYNC)
            .await
            .status(),
        Nfsstat3::ROFS
    );
    let r = op!(
        c,
        Create,
        CreateArgs {
            where_: dirop(&root, "new"),
            how: CreateHow::Unchecked(Sattr3::default()),
        }
    );
    assert_eq!(r.status(), Nfsstat3::ROFS);
    let r = op!(
        c,
        Mkdir,
        MkdirArgs {
            where_: dirop(&root, "newdir"),
            attributes: Sattr3::default(),
        }
    );
    assert_eq!(r.status(), Nfsstat3::ROFS);
    assert_eq!(remove(&mut c, &root, "f").await.status(), Nfsstat3::ROFS);
    let r = op!(
        c,
        Setattr,
        SetattrArgs {
            object: f.clone(),
            new_attributes: Sattr3 {
                size: Some(0),
                ..Default::default()
            },
            guard: None,
        }
    );
    assert_eq!(r.status(), Nfsstat3::ROFS);
    assert_eq!(std::fs::read(s.export.join("f")).unwrap(), b"read me");
    assert!(!s.export.join("new").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_outside_the_allowed_network_cannot_mount_or_use_handles() {
    // First learn a valid root handle from a server that allows everyone...
    let dirs = TestDirs::new("wire");
    let mut s = TestServer::start_in(rw(), dirs).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    drop(c);
    // ...then serve the same directory and state to 10.0.0.0/8 only (we connect from
    // 127.0.0.1; nothing is ever sent to that network).
    let mut cfg = rw();
    cfg.exports[0].clients[0].client = ClientMatch::Network {
        addr: "10.0.0.0".parse().unwrap(),
        prefix_len: 8,
    };
    s.config = cfg;
    s.restart().await;
    let mut c = s.connect().await;
    let export = s.export.display().to_string();
    assert_eq!(c.mnt(&export).await.status(), Mountstat3::ACCES);
    assert_eq!(getattr(&mut c, &root).await.status(), Nfsstat3::ACCES);
    assert_eq!(lookup(&mut c, &root, "x").await.status(), Nfsstat3::ACCES);
    let r = op!(
        c,
        Fsinfo,
        FsinfoArgs {
            fsroot: root.clone()
        }
    );
    assert_eq!(r.status(), Nfsstat3::ACCES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_exports_each_handle_reaches_only_its_own_export() {
    let dirs = TestDirs::new("wire");
    let a = dirs.base.join("a");
    let b = dirs.base.join("b");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(a.join("only-in-a"), b"A").unwrap();
    std::fs::write(b.join("only-in-b"), b"B").unwrap();
    let text = format!(
        "# two exports, as `sluice serve --exports FILE` reads them\n\
         {} 127.0.0.1(rw,no_root_squash,insecure)\n\
         {} *(ro,insecure)\n",
        a.display(),
        b.display()
    );
    let exports = parse_exports(&text).expect("exports file parses");
    let cfg = ServerConfig { exports, ..rw() };
    let s = TestServer::start_in(cfg, dirs).await;
    let mut c = s.connect().await;
    let MntRes::Ok(ra) = c.mnt(a.to_str().unwrap()).await else {
        panic!("MNT a")
    };
    let MntRes::Ok(rb) = c.mnt(b.to_str().unwrap()).await else {
        panic!("MNT b")
    };
    let (ra, rb) = (ra.fhandle, rb.fhandle);
    assert_ne!(ra, rb);
    let mount3::Res::Export(ex) = c.mount(mount3::Args::Export).await else {
        panic!("EXPORT")
    };
    assert_eq!(ex.0.len(), 2);
    // Each root sees its own files only.
    ok(lookup(&mut c, &ra, "only-in-a").await);
    ok(lookup(&mut c, &rb, "only-in-b").await);
    assert_eq!(
        lookup(&mut c, &ra, "only-in-b").await.status(),
        Nfsstat3::NOENT
    );
    assert_eq!(
        lookup(&mut c, &rb, "only-in-a").await.status(),
        Nfsstat3::NOENT
    );
    // ".." of either root stays in it.
    let up = ok(lookup(&mut c, &rb, "..").await);
    assert_eq!(
        up.obj_attributes.unwrap().fileid,
        std::fs::metadata(&b).unwrap().ino()
    );
    // Each export keeps its options: a is writable, b is not.
    let fa = ok(lookup(&mut c, &ra, "only-in-a").await).object;
    let fb = ok(lookup(&mut c, &rb, "only-in-b").await).object;
    ok(write(&mut c, &fa, 0, b"a", StableHow::FILE_SYNC).await);
    assert_eq!(
        write(&mut c, &fb, 0, b"b", StableHow::FILE_SYNC)
            .await
            .status(),
        Nfsstat3::ROFS
    );
    // Crossing exports: RENAME and LINK from a into b are refused; nothing moves.
    let r = op!(
        c,
        Rename,
        RenameArgs {
            from: dirop(&ra, "only-in-a"),
            to: dirop(&rb, "moved"),
        }
    );
    assert_ne!(r.status(), Nfsstat3::OK);
    let r = op!(
        c,
        Link,
        LinkArgs {
            file: fa.clone(),
            link: dirop(&rb, "linked"),
        }
    );
    assert_ne!(r.status(), Nfsstat3::OK);
    assert!(a.join("only-in-a").exists());
    assert!(!b.join("moved").exists() && !b.join("linked").exists());
    // A handle of a with b's export id (or the reverse) is not accepted: the MAC is per export.
    let id_of = |fh: &NfsFh3| fh.0.slice(1..5);
    assert_ne!(id_of(&ra), id_of(&rb));
    let mut moved = fa.0.to_vec();
    moved[1..5].copy_from_slice(&id_of(&rb));
    let st = getattr(&mut c, &NfsFh3(Bytes::from(moved))).await.status();
    assert!(
        st == Nfsstat3::BADHANDLE || st == Nfsstat3::STALE,
        "a's handle relabelled as b's: {st:?}"
    );
}
