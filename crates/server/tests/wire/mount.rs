//! PORTMAP and MOUNT: what the one port says about itself, and the export list.

use super::*;

/// Each PORTMAP procedure has its own handler: SET and UNSET are refused (`false`), CALLIT's
/// arguments are decoded (GARBAGE_ARGS when they do not) and then it is PROC_UNAVAIL, and
/// MNT's path must decode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portmap_refuses_set_and_unset_and_does_not_carry_out_callit() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let m = Mapping {
        prog: 400_000,
        vers: 1,
        prot: IPPROTO_TCP,
        port: 4000,
    };
    assert_eq!(
        c.portmap(portmap::Args::Set(m)).await,
        portmap::Res::Set(false)
    );
    assert_eq!(
        c.portmap(portmap::Args::Unset(m)).await,
        portmap::Res::Unset(false)
    );
    let callit = portmap::Args::Callit(portmap::CallArgs {
        prog: NFS,
        vers: 3,
        proc_: 0,
        args: Bytes::new(),
    });
    let r = c
        .call(
            portmap::PROGRAM,
            2,
            portmap::proc_::CALLIT,
            &sluice_xdr::to_bytes(&callit),
        )
        .await;
    assert_eq!(r.body, ReplyBody::accepted(AcceptStat::PROC_UNAVAIL));
    let r = c
        .call(portmap::PROGRAM, 2, portmap::proc_::CALLIT, &[0, 0, 0, 1])
        .await;
    assert_eq!(r.body, ReplyBody::accepted(AcceptStat::GARBAGE_ARGS));
    let r = c
        .call(portmap::PROGRAM, 2, portmap::proc_::GETPORT, &[0; 12])
        .await;
    assert_eq!(r.body, ReplyBody::accepted(AcceptStat::GARBAGE_ARGS));
    let r = c
        .call(mount3::PROGRAM, 3, mount3::proc_::UMNT, &[0, 0, 0, 4])
        .await;
    assert_eq!(r.body, ReplyBody::accepted(AcceptStat::GARBAGE_ARGS));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portmap_getport_and_dump_name_the_one_port() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let port = u32::from(s.addr.port());
    // NLM v4 and NSM v1: v3 clients' locks, on the same port.
    for (prog, vers) in [
        (NFS, 3),
        (NFS, 4),
        (mount3::PROGRAM, 3),
        (100_021, 4),
        (100_024, 1),
    ] {
        let r = c
            .portmap(portmap::Args::Getport(Mapping {
                prog,
                vers,
                prot: IPPROTO_TCP,
                port: 0,
            }))
            .await;
        assert_eq!(r, portmap::Res::Getport(port), "GETPORT {prog} v{vers} tcp");
    }
    // Not served: NFS v2, NLM v1 (the 32-bit one), the rquota program.
    for (prog, vers) in [(NFS, 2), (100_021, 1), (100_011, 1)] {
        let r = c
            .portmap(portmap::Args::Getport(Mapping {
                prog,
                vers,
                prot: IPPROTO_TCP,
                port: 0,
            }))
            .await;
        assert_eq!(r, portmap::Res::Getport(0));
    }
    let portmap::Res::Dump(list) = c.portmap(portmap::Args::Dump).await else {
        panic!("DUMP reply")
    };
    for (prog, vers) in [(NFS, 3), (NFS, 4), (mount3::PROGRAM, 3)] {
        assert!(
            list.0.contains(&Mapping {
                prog,
                vers,
                prot: IPPROTO_TCP,
                port
            }),
            "{prog} v{vers} in {list:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mount_export_subdirectory_unknown_path_export_list_dump_and_umnt() {
    let s = TestServer::start(rw()).await;
    std::fs::create_dir_all(s.export.join("sub/deeper")).unwrap();
    std::fs::write(s.export.join("plain"), b"x").unwrap();
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let root_attr = ok(getattr(&mut c, &root).await).obj_attributes;
    assert_eq!(root_attr.ftype, Ftype3::DIR);

    let sub_path = format!("{}/sub/deeper", s.export.display());
    let MntRes::Ok(sub) = c.mnt(&sub_path).await else {
        panic!("MNT of a subdirectory")
    };
    assert!(sub.auth_flavors.contains(&AuthFlavor::SYS.0));
    let sub_attr = ok(getattr(&mut c, &sub.fhandle).await).obj_attributes;
    assert_eq!(
        sub_attr.fileid,
        std::fs::metadata(s.export.join("sub/deeper"))
            .unwrap()
            .ino()
    );

    assert_eq!(c.mnt("/").await.status(), Mountstat3::NOENT);
    assert_eq!(c.mnt("/etc").await.status(), Mountstat3::NOENT);
    let sibling = format!("{}-not-exported", s.export.display());
    assert_eq!(c.mnt(&sibling).await.status(), Mountstat3::NOENT);
    let missing = format!("{}/missing", s.export.display());
    assert_eq!(c.mnt(&missing).await.status(), Mountstat3::NOENT);
    let file = format!("{}/plain", s.export.display());
    assert_eq!(c.mnt(&file).await.status(), Mountstat3::NOTDIR);
    // `..` cannot climb out of the export.
    let escape = format!("{}/../..", s.export.display());
    assert_ne!(c.mnt(&escape).await.status(), Mountstat3::OK);

    let mount3::Res::Export(ex) = c.mount(mount3::Args::Export).await else {
        panic!("EXPORT reply")
    };
    assert_eq!(ex.0.len(), 1);
    assert_eq!(
        ex.0[0].dir.0.as_ref(),
        s.export.as_os_str().as_encoded_bytes()
    );

    let dump = |res: mount3::Res| match res {
        mount3::Res::Dump(l) => {
            l.0.into_iter()
                .map(|b| String::from_utf8(b.directory.0.to_vec()).unwrap())
                .collect::<Vec<_>>()
        }
        other => panic!("DUMP reply: {other:?}"),
    };
    let listed = dump(c.mount(mount3::Args::Dump).await);
    let export_s = s.export.display().to_string();
    assert!(listed.contains(&export_s), "{listed:?}");
    assert!(listed.contains(&sub_path), "{listed:?}");
    let r = c
        .mount(mount3::Args::Umnt(DirPath(Bytes::from(sub_path.clone()))))
        .await;
    assert_eq!(r, mount3::Res::Umnt);
    let listed = dump(c.mount(mount3::Args::Dump).await);
    assert!(!listed.contains(&sub_path), "{listed:?}");
    assert!(listed.contains(&export_s), "{listed:?}");
    assert_eq!(c.mount(mount3::Args::Umntall).await, mount3::Res::Umntall);
    assert!(dump(c.mount(mount3::Args::Dump).await).is_empty());
    assert_eq!(c.mount(mount3::Args::Null).await, mount3::Res::Null);
}
