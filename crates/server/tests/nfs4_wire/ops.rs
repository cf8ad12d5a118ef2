//! The ops of part 1: the pNFS ones sluice does not support, every implemented one over TCP,
//! and SECINFO, state protection and SET_SSV as knfsd answers them.

use super::*;

/// sluice is not a pNFS server yet: EXCHANGE_ID grants USE_NON_PNFS only, `fs_layout_types`
/// is not a supported attribute, and the layout and device ops (OPTIONAL in §17) answer
/// NFS4ERR_NOTSUPP, whatever their arguments; the 4.2 ones are OP_ILLEGAL in a 4.1 COMPOUND.
/// (LAYOUTUNAVAILABLE is for a pNFS server without layouts for one file or file system.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pnfs_ops_are_not_supported() {
    use sluice_xdr::nfs4::ops::{
        GetdeviceinfoArgs, GetdevicelistArgs, LayoutcommitArgs, LayouterrorArgs, LayoutgetArgs,
        LayoutreturnArgs, LayoutstatsArgs, EXCHGID4_FLAG_MASK_PNFS, EXCHGID4_FLAG_USE_NON_PNFS,
    };
    use sluice_xdr::nfs4::{LayoutIomode4, LayoutType4};
    let s = TestServer::start(rw()).await;
    std::fs::write(s.export.join("f"), b"data").unwrap();
    let mut c = s.connect().await;
    let e = exchange_id_res(&mut c, b"pnfs probe").await;
    assert_eq!(
        e.flags & EXCHGID4_FLAG_MASK_PNFS,
        EXCHGID4_FLAG_USE_NON_PNFS
    );
    let mut v = V4::mount(&s, "pnfs client").await;
    let mut ops = walk_to(&s.export);
    ops.push(NfsArgop4::Getattr(Bitmap4::from_bits(&[
        num::SUPPORTED_ATTRS,
    ])));
    let res = v.send(ops).await;
    let supported = attrs(res.results.last().unwrap())
        .supported_attrs
        .expect("supported_attrs");
    assert!(supported.contains(num::TYPE));
    assert!(!supported.contains(num::FS_LAYOUT_TYPES));

    let files = LayoutType4::NFSV4_1_FILES;
    let layout_ops = [
        NfsArgop4::Layoutget(LayoutgetArgs {
            layout_type: files,
            iomode: LayoutIomode4::RW,
            length: u64::MAX,
            maxcount: 4096,
            stateid: Stateid4::ANONYMOUS,
            ..LayoutgetArgs::default()
        }),
        NfsArgop4::Layoutcommit(LayoutcommitArgs {
            length: 4,
            ..LayoutcommitArgs::default()
        }),
        NfsArgop4::Layoutreturn(LayoutreturnArgs {
            layout_type: files,
            iomode: LayoutIomode4::ANY,
            ..LayoutreturnArgs::default()
        }),
        NfsArgop4::Getdeviceinfo(GetdeviceinfoArgs {
            device_id: [1; 16],
            layout_type: files,
            maxcount: 4096,
            ..GetdeviceinfoArgs::default()
        }),
        NfsArgop4::Getdevicelist(GetdevicelistArgs {
            layout_type: files,
            maxdevices: 8,
            ..GetdevicelistArgs::default()
        }),
    ];
    for op in layout_ops {
        let num = op.opnum();
        let mut ops = walk_to(&s.export);
        ops.push(lookup("f"));
        ops.push(op.clone());
        let n = ops.len() + 1;
        let res = v.send(ops).await;
        assert_eq!(
            res.status,
            Nfsstat4::NOTSUPP,
            "{num:?}: {:?}",
            statuses(&res)
        );
        assert_eq!(res.results.len(), n, "{num:?} ran last");
        assert_eq!(res.results[n - 1].opnum(), num);
        // Without a current file handle too: NOTSUPP comes first.
        let res = v.send(vec![op]).await;
        assert_eq!(res.status, Nfsstat4::NOTSUPP, "{num:?} without a handle");
    }
    // RFC 7862's LAYOUTERROR and LAYOUTSTATS: NOTSUPP in 4.2, not defined in 4.1.
    for op in [
        NfsArgop4::Layouterror(LayouterrorArgs::default()),
        NfsArgop4::Layoutstats(LayoutstatsArgs::default()),
    ] {
        let num = op.opnum();
        let mut ops = walk_to(&s.export);
        ops.push(lookup("f"));
        ops.push(op.clone());
        let res = v.send_minor(2, ops.clone()).await;
        assert_eq!(res.status, Nfsstat4::NOTSUPP, "{num:?} in 4.2");
        let res = v.send_minor(1, ops).await;
        assert_eq!(res.status, Nfsstat4::OP_ILLEGAL, "{num:?} in 4.1");
    }
}

/// Every op part 1 implements, each at least once over TCP with its effect checked, in the
/// order a client would use them (the session ops, PUTFH/PUTROOTFH/LOOKUP/GETFH/GETATTR,
/// READ/WRITE/COMMIT and the error paths are in the tests above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_implemented_op_over_tcp() {
    use sluice_xdr::nfs4::ops::{
        BindConnToSessionArgs, ACCESS4_LOOKUP, ACCESS4_MODIFY, ACCESS4_READ, CDFS4_FORE,
        SECINFO_STYLE4_CURRENT_FH,
    };
    use sluice_xdr::nfs4::Component4;
    let s = TestServer::start(rw()).await;
    let fore = sluice_xdr::nfs4::ops::ChannelAttrs4 {
        maxoperations: 32,
        ..chan()
    };
    let mut v = V4::mount_with(&s, "every op client", fore).await;
    let bits = |b: &[u32]| Bitmap4::from_bits(b);

    // ACCESS, CREATE (dir, symlink), LOOKUPP, READLINK, SAVEFH/RESTOREFH, OPEN, WRITE under
    // the current stateid, SETATTR, VERIFY, NVERIFY, GETFH.
    let mut ops = walk_to(&s.export);
    let root_at = ops.len();
    ops.extend([
        NfsArgop4::Access(AccessArgs {
            access: ACCESS4_READ | ACCESS4_LOOKUP | ACCESS4_MODIFY,
        }),
        NfsArgop4::Savefh(()),
        mkdir_op("d"),
        NfsArgop4::Lookupp(()),
        NfsArgop4::Create(CreateArgs {
            objtype: Createtype4::Lnk(Linktext4(Bytes::from_static(b"d"))),
            objname: component("ln"),
            createattrs: Default::default(),
        }),
        NfsArgop4::Readlink(()),
        NfsArgop4::Restorefh(()),
        open_op("o", "f", true, OPEN4_SHARE_ACCESS_BOTH, 0),
        NfsArgop4::Write(WriteArgs {
            stateid: Stateid4::CURRENT,
            offset: 0,
            stable: StableHow4::UNSTABLE,
            data: sluice_xdr::Payload::from_chunks(vec![Bytes::from_static(b"every op")]),
        }),
        NfsArgop4::Commit(CommitArgs {
            offset: 0,
            count: 0,
        }),
        NfsArgop4::Setattr(SetattrArgs {
            stateid: Stateid4::CURRENT,
            obj_attributes: mode_attrs(0o600),
        }),
        NfsArgop4::Verify(mode_attrs(0o600)),
        NfsArgop4::Nverify(mode_attrs(0o644)),
        NfsArgop4::Getfh(()),
    ]);
    let res = v.send(ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let at = |i: usize| &res.results[1 + root_at + i];
    let NfsResop4::Access(Res4::Ok(acc)) = at(0) else {
        panic!("{res:?}")
    };
    assert_eq!(
        acc.access & ACCESS4_MODIFY,
        ACCESS4_MODIFY,
        "root may modify"
    );
    let NfsResop4::Readlink(Res4::Ok(target)) = at(5) else {
        panic!("{res:?}")
    };
    assert_eq!(&target.0[..], b"d");
    let NfsResop4::Open(Res4::Ok(o)) = at(7) else {
        panic!("{res:?}")
    };
    let NfsResop4::Getfh(Res4::Ok(fh)) = at(13) else {
        panic!("{res:?}")
    };
    let (fh, first) = (fh.clone(), o.stateid);
    assert!(s.export.join("d").is_dir());
    assert_eq!(
        std::fs::read_link(s.export.join("ln")).unwrap(),
        std::path::Path::new("d")
    );
    assert_eq!(std::fs::read(s.export.join("f")).unwrap(), b"every op");

    // OPEN again for reading (an upgrade), OPEN_DOWNGRADE to it, TEST_STATEID, CLOSE,
    // FREE_STATEID of what CLOSE ended.
    let mut ops = walk_to(&s.export);
    ops.extend([
        open_op("o", "f", false, OPEN4_SHARE_ACCESS_READ, 0),
        NfsArgop4::OpenDowngrade(OpenDowngradeArgs {
            open_stateid: Stateid4::CURRENT,
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_READ,
            share_deny: 0,
        }),
    ]);
    let res = v.send(ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let Some(NfsResop4::OpenDowngrade(Res4::Ok(down))) = res.results.last() else {
        panic!("{res:?}")
    };
    assert_eq!((down.seqid, down.other), (3, first.other));
    let res = v
        .send(vec![
            NfsArgop4::TestStateid(StateidList(vec![*down])),
            NfsArgop4::Putfh(fh.clone()),
            close_op(*down),
            NfsArgop4::FreeStateid(*down),
        ])
        .await;
    assert_eq!(
        statuses(&res)[1..],
        [
            Nfsstat4::OK,
            Nfsstat4::OK,
            Nfsstat4::OK,
            Nfsstat4::BAD_STATEID
        ],
        "CLOSE ended the stateid FREE_STATEID was given"
    );

    // LINK, RENAME, REMOVE, READDIR, SECINFO (which consumes the current handle).
    let mut ops = vec![NfsArgop4::Putfh(fh.clone()), NfsArgop4::Savefh(())];
    ops.extend(walk_to(&s.export));
    ops.extend([
        NfsArgop4::Link(component("g")),
        NfsArgop4::Savefh(()),
        NfsArgop4::Rename(RenameArgs {
            oldname: component("g"),
            newname: component("h"),
        }),
        NfsArgop4::Remove(component("ln")),
        NfsArgop4::Readdir(ReaddirArgs {
            cookie: 0,
            cookieverf: [0; 8],
            dircount: 4096,
            maxcount: 8192,
            attr_request: bits(&[num::TYPE]),
        }),
        NfsArgop4::Secinfo(Component4(Bytes::from_static(b"h"))),
    ]);
    let res = v.send(ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let n = res.results.len();
    let NfsResop4::Readdir(Res4::Ok(listing)) = &res.results[n - 2] else {
        panic!("{res:?}")
    };
    let mut names: Vec<Vec<u8>> = listing.entries.iter().map(|e| e.name.0.to_vec()).collect();
    names.sort();
    assert_eq!(names, vec![b"d".to_vec(), b"f".to_vec(), b"h".to_vec()]);
    let NfsResop4::Secinfo(Res4::Ok(flavors)) = &res.results[n - 1] else {
        panic!("{res:?}")
    };
    assert!(!flavors.0.is_empty());
    let nlinks =
        std::os::unix::fs::MetadataExt::nlink(&std::fs::metadata(s.export.join("f")).unwrap());
    assert_eq!(nlinks, 2, "f and h are one file");

    // PUTPUBFH, SECINFO_NO_NAME, RECLAIM_COMPLETE.
    let res = v
        .send(vec![
            NfsArgop4::Putpubfh(()),
            NfsArgop4::SecinfoNoName(SECINFO_STYLE4_CURRENT_FH),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    // RECLAIM_COMPLETE of a client that has not sent it yet (`v` did, at its set-up).
    let mut fresh = V4::mount_reclaiming(&s, "reclaim complete client").await;
    let res = fresh.send(vec![NfsArgop4::ReclaimComplete(false)]).await;
    assert_eq!(res.status, Nfsstat4::OK);

    // BIND_CONN_TO_SESSION from a second connection, which then carries the session.
    let mut second = s.connect().await;
    let res = compound(
        &mut second,
        1,
        vec![NfsArgop4::BindConnToSession(BindConnToSessionArgs {
            sessid: v.sessionid,
            dir: CDFS4_FORE,
            use_conn_in_rdma_mode: false,
        })],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let res = compound(
        &mut second,
        1,
        vec![
            v.session.sequence(0, false),
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Getattr(bits(&[num::TYPE])),
        ],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::OK);
    assert_eq!(attrs(&res.results[2]).ftype, Some(Ftype4::DIR));

    // DESTROY_SESSION, then DESTROY_CLIENTID: the session and the client are gone.
    let res = compound(&mut v.rpc, 1, vec![NfsArgop4::DestroySession(v.sessionid)]).await;
    assert_eq!(res.status, Nfsstat4::OK);
    let res = compound(&mut v.rpc, 1, vec![NfsArgop4::DestroyClientid(v.clientid)]).await;
    assert_eq!(res.status, Nfsstat4::OK);
    let res = v.send(vec![]).await;
    assert_eq!(res.status, Nfsstat4::BADSESSION);
    let res = create_session(&mut v.rpc, v.clientid, 2).await;
    assert_eq!(res.status, Nfsstat4::STALE_CLIENTID);
}

/// SECINFO (RFC 8881 §18.29) on names, SECINFO_NO_NAME (§18.45), EXCHANGE_ID's state
/// protection (§18.35.4) and SET_SSV (§18.47), as knfsd answers them over AUTH_SYS:
/// - SECINFO lists AUTH_SYS then AUTH_NONE (every export takes both) for a name in the pseudo
///   tree and in an export, and consumes the current handle (§2.6.3.1.1.8): a GETFH after it
///   is NFS4ERR_NOFILEHANDLE. A missing name is NOENT, a file as the directory NOTDIR, no
///   handle NOFILEHANDLE;
/// - SECINFO_NO_NAME with style PARENT from the export root answers for the pseudo directory
///   above it, and from the pseudo root (no parent) NOENT;
/// - SP4_NONE is granted as SP4_NONE; SP4_MACH_CRED needs an integrity-protected (RPCSEC_GSS)
///   call, so over AUTH_SYS it is NFS4ERR_INVAL, as knfsd answers; SP4_SSV is
///   NFS4ERR_ENCR_ALG_UNSUPP (knfsd's answer since it gave up on SSV), and no client record is
///   left behind by either refusal;
/// - SET_SSV: no client id can have an SSV here, and knfsd's op table answers it
///   NFS4ERR_NOTSUPP; so does sluice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secinfo_state_protection_and_set_ssv_answer_as_knfsd() {
    use sluice_xdr::nfs4::ops::{
        ExchangeIdArgs, SecOidList, SetSsvArgs, SsvSpParms4, StateProtect4A, StateProtect4R,
        StateProtectOps4, SECINFO_STYLE4_PARENT,
    };
    use sluice_xdr::nfs4::{Component4, Opaque4};
    let s = TestServer::start(rw()).await;
    std::fs::write(s.export.join("file"), b"x").unwrap();
    let mut v = V4::mount(&s, "secinfo client").await;
    const AUTH_SYS: u32 = 1;
    const AUTH_NONE: u32 = 0;
    let flavors = |r: &NfsResop4| -> Vec<u32> {
        let (NfsResop4::Secinfo(Res4::Ok(l)) | NfsResop4::SecinfoNoName(Res4::Ok(l))) = r else {
            panic!("{r:?}")
        };
        l.0.iter()
            .map(|f| match f {
                sluice_xdr::nfs4::ops::Secinfo4::Flavor(n) => *n,
                other => panic!("an RPCSEC_GSS flavor: {other:?}"),
            })
            .collect()
    };

    // In the export: the name's flavors, then the handle is gone.
    let mut ops = walk_to(&s.export);
    ops.extend([NfsArgop4::Secinfo(component("file")), NfsArgop4::Getfh(())]);
    let res = v.send(ops).await;
    assert_eq!(res.status, Nfsstat4::NOFILEHANDLE, "{:?}", statuses(&res));
    let n = res.results.len();
    assert_eq!(flavors(&res.results[n - 2]), vec![AUTH_SYS, AUTH_NONE]);

    // In the pseudo tree: the first component of the export's path.
    let first = s
        .export
        .components()
        .nth(1)
        .unwrap()
        .as_os_str()
        .to_str()
        .unwrap()
        .to_string();
    let res = v
        .send(vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Secinfo(component(&first)),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert_eq!(flavors(&res.results[2]), vec![AUTH_SYS, AUTH_NONE]);

    // The errors.
    let mut ops = walk_to(&s.export);
    ops.push(NfsArgop4::Secinfo(component("missing")));
    assert_eq!(v.send(ops).await.status, Nfsstat4::NOENT);
    let mut ops = walk_to(&s.export);
    ops.extend([lookup("file"), NfsArgop4::Secinfo(component("x"))]);
    assert_eq!(v.send(ops).await.status, Nfsstat4::NOTDIR);
    let res = v
        .send(vec![NfsArgop4::Secinfo(Component4(Bytes::from_static(
            b"file",
        )))])
        .await;
    assert_eq!(res.status, Nfsstat4::NOFILEHANDLE, "{:?}", statuses(&res));

    // SECINFO_NO_NAME, style PARENT: from the export root up into the pseudo tree; nothing
    // above the pseudo root.
    let mut ops = walk_to(&s.export);
    ops.push(NfsArgop4::SecinfoNoName(SECINFO_STYLE4_PARENT));
    let res = v.send(ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert_eq!(
        flavors(res.results.last().unwrap()),
        vec![AUTH_SYS, AUTH_NONE]
    );
    let res = v
        .send(vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::SecinfoNoName(SECINFO_STYLE4_PARENT),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::NOENT, "{:?}", statuses(&res));

    // SET_SSV in a session.
    let res = v
        .send(vec![NfsArgop4::SetSsv(SetSsvArgs {
            ssv: Opaque4(Bytes::from_static(&[1; 16])),
            digest: Opaque4(Bytes::from_static(&[2; 16])),
        })])
        .await;
    assert_eq!(res.status, Nfsstat4::NOTSUPP, "{:?}", statuses(&res));
    assert_eq!(
        res.results.len(),
        2,
        "SET_SSV's own error ends the COMPOUND"
    );

    // BACKCHANNEL_CTL in the session.
    let res = v
        .send(vec![NfsArgop4::BackchannelCtl(
            sluice_xdr::nfs4::ops::BackchannelCtlArgs {
                cb_program: 0x4000_0001,
                sec_parms: sluice_xdr::nfs4::ops::CallbackSecParmsList(vec![
                    sluice_xdr::nfs4::ops::CallbackSecParms4::AuthNone,
                ]),
            },
        )])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));

    // EXCHANGE_ID's state protection.
    let mut c = s.connect().await;
    let exid = |owner: &'static [u8], sp: StateProtect4A| {
        let NfsArgop4::ExchangeId(mut a) = exchange_id_op(owner) else {
            unreachable!()
        };
        a.state_protect = sp;
        NfsArgop4::ExchangeId(ExchangeIdArgs { ..a })
    };
    let ops = StateProtectOps4 {
        must_enforce: Bitmap4::from_bits(&[sluice_xdr::nfs4::ops::Opnum4::CLOSE.0]),
        must_allow: Bitmap4::new(),
    };
    let res = compound(
        &mut c,
        1,
        vec![exid(b"mach cred", StateProtect4A::MachCred(ops.clone()))],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::INVAL, "SP4_MACH_CRED: {res:?}");
    let res = compound(
        &mut c,
        1,
        vec![exid(
            b"ssv",
            StateProtect4A::Ssv(SsvSpParms4 {
                ops,
                hash_algs: SecOidList(Vec::new()),
                encr_algs: SecOidList(Vec::new()),
                window: 1,
                num_gss_handles: 1,
            }),
        )],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::ENCR_ALG_UNSUPP, "SP4_SSV: {res:?}");
    let res = compound(&mut c, 1, vec![exid(b"none", StateProtect4A::None)]).await;
    assert_eq!(res.status, Nfsstat4::OK, "SP4_NONE: {res:?}");
    let Some(NfsResop4::ExchangeId(Res4::Ok(e))) = res.results.first() else {
        panic!("{res:?}")
    };
    assert_eq!(e.state_protect, StateProtect4R::None);
    // The refused owners left no record: the same owner with SP4_NONE is a new client whose
    // CREATE_SESSION starts at the sequence id it was given.
    let (id, seq) = exchange_id(&mut c, b"mach cred").await;
    assert_eq!(create_session(&mut c, id, seq).await.status, Nfsstat4::OK);
}
