//! File handles and the pseudo tree: LOOKUP and LOOKUPP across exports, the export gate,
//! ACCESS, SECINFO, READDIR, READLINK, VERIFY and NVERIFY.

use super::*;

#[test]
fn lookup_crosses_into_an_export_where_the_fsid_changes_and_lookupp_comes_back() {
    let c = Client::new();
    let sid = mount(&c);
    let fs = c.nfs.exports[0].fs.clone();
    let sub = fs
        .mkdir(
            &Caller::with_cred(Cred::new(1000, 1000)),
            &fs.root_handle(),
            b"sub",
            &SetAttr {
                mode: Some(0o755),
                ..SetAttr::default()
            },
        )
        .unwrap();
    let bits = [num::TYPE, num::FSID, num::FILEID, num::MOUNTED_ON_FILEID];
    let res = c.send(vec![
        seq(sid, 1),
        NfsArgop4::Putrootfh(()),
        lookup(b"srv"),
        getattr(&bits),
        lookup(b"export"),
        getattr(&bits),
        NfsArgop4::Getfh(()),
        lookup(b"sub"),
        NfsArgop4::Getfh(()),
        NfsArgop4::Lookupp(()),
        NfsArgop4::Getfh(()),
        NfsArgop4::Lookupp(()),
        getattr(&bits),
        NfsArgop4::Getfh(()),
    ]);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let srv = attrs(&res.results[3]);
    assert_eq!(srv.fsid, Some(PSEUDO_FSID));
    assert_eq!(srv.ftype, Some(Ftype4::DIR));
    let root = attrs(&res.results[5]);
    assert_eq!(
        root.fsid,
        Some(Fsid4 {
            major: EXPORT_FSID,
            minor: 0
        })
    );
    assert_ne!(
        root.fsid, srv.fsid,
        "crossing into an export changes the fsid"
    );
    // The export root sits on a pseudo directory: its mounted_on_fileid is that node's.
    assert_ne!(root.mounted_on_fileid, root.fileid);
    assert_eq!(fh_of(&res.results[6]).0, fs.root_handle().to_bytes());
    assert_eq!(fh_of(&res.results[8]).0, sub.fh.to_bytes());
    // LOOKUPP from "sub" is the export root; from the export root it is /srv again.
    assert_eq!(fh_of(&res.results[10]).0, fs.root_handle().to_bytes());
    assert_eq!(attrs(&res.results[12]), srv);
    assert!(PseudoFs::is_pseudo_handle(&fh_of(&res.results[13]).0));
    // A handle from GETFH works with PUTFH in a later COMPOUND.
    let res2 = c.send(vec![
        seq(sid, 2),
        NfsArgop4::Putfh(fh_of(&res.results[8])),
        getattr(&[num::TYPE, num::FSID]),
        NfsArgop4::Putfh(fh_of(&res.results[13])),
        getattr(&[num::FSID]),
    ]);
    assert_eq!(res2.status, Nfsstat4::OK);
    assert_eq!(attrs(&res2.results[2]).ftype, Some(Ftype4::DIR));
    assert_eq!(attrs(&res2.results[4]).fsid, Some(PSEUDO_FSID));
}

#[test]
fn lookup_errors_in_the_pseudo_tree() {
    let c = Client::new();
    let sid = mount(&c);
    let res = c.send(vec![seq(sid, 1), NfsArgop4::Putrootfh(()), lookup(b"nope")]);
    assert_eq!(res.status, Nfsstat4::NOENT);
    let res = c.send(vec![seq(sid, 2), NfsArgop4::Putrootfh(()), lookup(b"..")]);
    assert_eq!(res.status, Nfsstat4::BADNAME);
    let res = c.send(vec![seq(sid, 3), NfsArgop4::Putrootfh(()), lookup(b"")]);
    assert_eq!(res.status, Nfsstat4::INVAL);
    let res = c.send(vec![
        seq(sid, 4),
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Lookupp(()),
    ]);
    assert_eq!(res.status, Nfsstat4::NOENT);
    // A pseudo handle from another tree is stale; garbage is a bad handle.
    let mut stale = c.nfs.pseudo.handle(0);
    stale[1] ^= 0xff;
    let res = c.send(vec![
        seq(sid, 5),
        NfsArgop4::Putfh(NfsFh4(Bytes::copy_from_slice(&stale))),
    ]);
    assert_eq!(res.status, Nfsstat4::STALE);
    let res = c.send(vec![
        seq(sid, 6),
        NfsArgop4::Putfh(NfsFh4(Bytes::from_static(b"\x09junk"))),
    ]);
    assert_eq!(res.status, Nfsstat4::BADHANDLE);
}

#[test]
fn an_export_the_client_may_not_use_is_access_denied() {
    let c = Client::new();
    let sid = mount(&c);
    let res = c.send(vec![
        seq(sid, 1),
        NfsArgop4::Putrootfh(()),
        lookup(b"srv"),
        lookup(b"private"),
    ]);
    assert_eq!(res.status, Nfsstat4::ACCESS);
    assert_eq!(res.results.len(), 4);
    // A guessed handle of its root is refused too, at first use.
    let root = c.nfs.exports[1].fs.root_handle();
    let res = c.send(vec![
        seq(sid, 2),
        NfsArgop4::Putfh(NfsFh4(root.to_bytes())),
        getattr(&[num::TYPE]),
    ]);
    assert_eq!(res.status, Nfsstat4::ACCESS);
    // From an unprivileged port even the open export is refused (`secure`), as knfsd does.
    let mut c2 = Client::new();
    c2.addr = "127.0.0.1:40000".parse().unwrap();
    let sid2 = mount(&c2);
    let res = c2.send(vec![
        seq(sid2, 1),
        NfsArgop4::Putrootfh(()),
        lookup(b"srv"),
        lookup(b"export"),
    ]);
    assert_eq!(res.status, Nfsstat4::PERM);
}

#[test]
fn access_and_secinfo_no_name() {
    let c = Client::new();
    let sid = mount(&c);
    let asked = ACCESS4_READ | ACCESS4_LOOKUP | ACCESS4_MODIFY;
    let res = c.send(vec![
        seq(sid, 1),
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Access(AccessArgs { access: asked }),
        lookup(b"srv"),
        lookup(b"export"),
        NfsArgop4::Access(AccessArgs { access: asked }),
        NfsArgop4::SecinfoNoName(0),
        NfsArgop4::Getfh(()),
    ]);
    let NfsResop4::Access(Res4::Ok(pseudo)) = &res.results[2] else {
        panic!("{res:?}")
    };
    // The pseudo tree is read-only.
    assert_eq!(pseudo.supported, asked);
    assert_eq!(pseudo.access, ACCESS4_READ | ACCESS4_LOOKUP);
    // The MemFs root is 0777: everything asked is granted.
    let NfsResop4::Access(Res4::Ok(root)) = &res.results[5] else {
        panic!("{res:?}")
    };
    assert_eq!(root.access, asked);
    let NfsResop4::SecinfoNoName(Res4::Ok(list)) = &res.results[6] else {
        panic!("{res:?}")
    };
    assert_eq!(list.0, vec![Secinfo4::Flavor(1), Secinfo4::Flavor(0)]);
    // SECINFO_NO_NAME consumed the current handle.
    assert_eq!(res.status, Nfsstat4::NOFILEHANDLE);
    assert_eq!(res.results.len(), 8);
}

#[test]
fn readdir_of_the_pseudo_tree_shows_the_exports_the_client_may_use() {
    let c = Client::new();
    let sid = mount(&c);
    let bits = [num::TYPE, num::FSID, num::MOUNTED_ON_FILEID];
    let res = c.send(vec![
        seq(sid, 1),
        NfsArgop4::Putrootfh(()),
        readdir(0, 4096, &bits),
        lookup(b"srv"),
        readdir(0, 4096, &bits),
        getattr(&[num::FILEID]),
    ]);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let root = listing(&res.results[2]);
    assert_eq!(names(root), vec![&b"srv"[..]]);
    assert!(root.eof);
    assert!(root.entries.iter().all(|e| e.cookie >= 3));
    let srv = listing(&res.results[4]);
    // /srv/private is for 10.9.9.9 only: not listed for 127.0.0.1.
    assert_eq!(names(srv), vec![&b"export"[..]]);
    let v = AttrValues::decode(&srv.entries[0].attrs).unwrap().values;
    assert_eq!(
        v.fsid,
        Some(Fsid4 {
            major: EXPORT_FSID,
            minor: 0
        })
    );
    assert!(v.mounted_on_fileid.is_some());
    // Cookies 1 and 2 are reserved; write-only attributes cannot be read.
    let res = c.send(vec![
        seq(sid, 2),
        NfsArgop4::Putrootfh(()),
        readdir(1, 4096, &[]),
    ]);
    assert_eq!(res.status, Nfsstat4::BAD_COOKIE);
    let res = c.send(vec![
        seq(sid, 3),
        NfsArgop4::Putrootfh(()),
        readdir(0, 4096, &[num::TIME_MODIFY_SET]),
    ]);
    assert_eq!(res.status, Nfsstat4::INVAL);
}

#[test]
fn readdir_of_an_export_pages_by_maxcount_without_dot_entries() {
    let c = Client::new();
    let sid = mount(&c);
    let fs = c.nfs.exports[0].fs.clone();
    let caller = Caller::with_cred(Cred::new(1000, 1000));
    for name in [&b"a"[..], b"b", b"c"] {
        fs.mkdir(&caller, &fs.root_handle(), name, &SetAttr::default())
            .unwrap();
    }
    let bits = [num::TYPE, num::FILEID];
    let into_export = || vec![NfsArgop4::Putrootfh(()), lookup(b"srv"), lookup(b"export")];
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.push(readdir(0, 4096, &bits));
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let all = listing(&res.results[4]);
    assert_eq!(names(all), vec![&b"a"[..], b"b", b"c"]);
    assert!(all.eof);
    let v = AttrValues::decode(&all.entries[0].attrs).unwrap().values;
    assert_eq!(v.ftype, Some(Ftype4::DIR));
    // A page that holds one entry at a time: resume from its cookie.
    let one = 8 + ReaddirResOk::FIXED_BYTES + all.entries[0].encoded_len();
    let mut got = Vec::new();
    let mut cookie = 0;
    let mut seqid = 1;
    for _ in 0..8 {
        seqid += 1;
        let mut ops = vec![seq(sid, seqid)];
        ops.extend(into_export());
        ops.push(readdir(cookie, one as u32, &bits));
        let res = c.send(ops);
        let page = listing(&res.results[4]).clone();
        assert_eq!(page.entries.len(), 1);
        got.push(page.entries[0].name.0.clone());
        cookie = page.entries[0].cookie;
        if page.eof {
            break;
        }
    }
    assert_eq!(got, vec![&b"a"[..], b"b", b"c"]);
    // Too small for any entry.
    let mut ops = vec![seq(sid, seqid + 1)];
    ops.extend(into_export());
    ops.push(readdir(0, 30, &bits));
    assert_eq!(c.send(ops).status, Nfsstat4::TOOSMALL);
}

#[test]
fn readlink_secinfo_and_stateid_tests() {
    let c = Client::new();
    let sid = mount(&c);
    let fs = c.nfs.exports[0].fs.clone();
    fs.symlink(
        &Caller::with_cred(Cred::new(1000, 1000)),
        &fs.root_handle(),
        b"ln",
        b"some/where",
        &SetAttr::default(),
    )
    .unwrap();
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        NfsArgop4::Savefh(()),
        lookup(b"ln"),
        NfsArgop4::Readlink(()),
        NfsArgop4::Restorefh(()),
        NfsArgop4::Readlink(()),
    ]);
    let res = c.send(ops);
    let NfsResop4::Readlink(Res4::Ok(target)) = &res.results[6] else {
        panic!("{res:?}")
    };
    assert_eq!(&target.0[..], b"some/where");
    assert_eq!(res.status, Nfsstat4::ISDIR, "READLINK of a directory");
    // SECINFO of a name answers the flavors and consumes the handle.
    let res = c.send(vec![
        seq(sid, 2),
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Secinfo(Component4(Bytes::from_static(b"srv"))),
        NfsArgop4::Getfh(()),
    ]);
    assert_eq!(res.status, Nfsstat4::NOFILEHANDLE);
    assert_eq!(res.results[2].status(), Nfsstat4::OK);
    // TEST_STATEID knows an open's stateid and not a made-up one.
    let mut ops = vec![seq(sid, 3)];
    ops.extend(into_export());
    ops.push(open(
        b"o",
        b"f",
        Some(Createhow4::Unchecked(mode_attrs(0o600))),
        OPEN4_SHARE_ACCESS_BOTH,
        OPEN4_SHARE_DENY_NONE,
    ));
    let res = c.send(ops);
    let NfsResop4::Open(Res4::Ok(o)) = &res.results[4] else {
        panic!("{res:?}")
    };
    let bogus = Stateid4 {
        seqid: 1,
        other: [7; 12],
    };
    let res = c.send(vec![
        seq(sid, 4),
        NfsArgop4::TestStateid(StateidList(vec![o.stateid, bogus])),
    ]);
    let NfsResop4::TestStateid(Res4::Ok(st)) = &res.results[1] else {
        panic!("{res:?}")
    };
    assert_eq!(st.0[0], Nfsstat4::OK);
    assert_ne!(st.0[1], Nfsstat4::OK);
}

#[test]
fn verify_and_nverify_compare_encoded_attributes() {
    let c = Client::new();
    let sid = mount(&c);
    let dir = |mode| {
        AttrValues {
            ftype: Some(Ftype4::DIR),
            mode: Some(mode),
            ..AttrValues::default()
        }
        .encode()
    };
    // The pseudo root is a 0555 directory.
    let res = c.send(vec![
        seq(sid, 1),
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Verify(dir(0o555)),
        NfsArgop4::Nverify(dir(0o777)),
        NfsArgop4::Verify(dir(0o777)),
    ]);
    assert_eq!(
        statuses(&res),
        vec![
            Nfsstat4::OK,
            Nfsstat4::OK,
            Nfsstat4::OK,
            Nfsstat4::OK,
            Nfsstat4::NOT_SAME
        ]
    );
    let res = c.send(vec![
        seq(sid, 2),
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Nverify(dir(0o555)),
    ]);
    assert_eq!(res.status, Nfsstat4::SAME);
    let unsupported = Fattr4 {
        mask: Bitmap4::from_bits(&[num::ARCHIVE]),
        vals: Bytes::from_static(&[0, 0, 0, 1]),
    };
    let res = c.send(vec![
        seq(sid, 3),
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Verify(unsupported),
    ]);
    assert_eq!(res.status, Nfsstat4::ATTRNOTSUPP);
}

/// A client of a server whose `/srv/export` is `xprtsec=tls:mtls`, on a connection of `mode`.
fn client_of_tls_export(mode: crate::backend::exports::Xprtsec) -> Client {
    use crate::backend::exports::XprtsecPolicy;
    let mut c = Client::new();
    let exports = Arc::get_mut(&mut c.nfs_mut().exports).expect("the exports are not shared");
    exports[0].export.clients[0].options.xprtsec = XprtsecPolicy::parse("tls:mtls").unwrap();
    c.xprtsec = mode;
    c
}

#[test]
fn a_plaintext_lookup_into_a_tls_only_export_is_wrongsec_and_tls_gets_in() {
    use crate::backend::exports::Xprtsec;
    let into_export = |c: &Client, sid| {
        c.send(vec![
            seq(sid, 1),
            NfsArgop4::Putrootfh(()),
            lookup(b"srv"),
            lookup(b"export"),
            NfsArgop4::Getfh(()),
        ])
    };
    let plain = client_of_tls_export(Xprtsec::None);
    let res = into_export(&plain, mount(&plain));
    // The LOOKUP crossing into the export answers (RFC 8881 §2.6.3.1.1.3).
    assert_eq!(statuses(&res)[3..], [Nfsstat4::WRONGSEC]);
    for mode in [Xprtsec::Tls, Xprtsec::Mtls] {
        let c = client_of_tls_export(mode);
        let res = into_export(&c, mount(&c));
        assert_eq!(res.status, Nfsstat4::OK, "{mode:?}");
    }
}

#[test]
fn a_handle_of_a_tls_only_export_is_refused_in_plaintext_by_the_put_op_as_rfc_8881_says() {
    use crate::backend::exports::Xprtsec;
    let c = client_of_tls_export(Xprtsec::None);
    let sid = mount(&c);
    // A handle learnt over TLS (or guessed): its export's root.
    let h = NfsFh4(c.nfs.exports[0].fs.root_handle().to_bytes());
    let put = || NfsArgop4::Putfh(h.clone());
    let mut n = 0;
    let mut send = |ops: Vec<NfsArgop4>| {
        n += 1;
        let mut all = vec![seq(sid, n)];
        all.extend(ops);
        c.send(all)
    };
    // §2.6.3.1.1.7: before anything else, the PUTFH itself answers.
    let res = send(vec![put(), getattr(&[num::TYPE])]);
    assert_eq!(statuses(&res)[1..], [Nfsstat4::WRONGSEC]);
    let res = send(vec![put(), NfsArgop4::Getfh(())]);
    assert_eq!(statuses(&res)[1..], [Nfsstat4::WRONGSEC]);
    // §2.6.3.1.1.6 and .2: nothing after it, or another put, and the handle is not used.
    let res = send(vec![put()]);
    assert_eq!(res.status, Nfsstat4::OK);
    let res = send(vec![put(), NfsArgop4::Putrootfh(()), getattr(&[num::TYPE])]);
    assert_eq!(res.status, Nfsstat4::OK);
    // §2.6.3.1.1.1: SAVEFH is not refused; RESTOREFH is a put op and answers when used.
    let res = send(vec![
        put(),
        NfsArgop4::Savefh(()),
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Restorefh(()),
        getattr(&[num::TYPE]),
    ]);
    assert_eq!(
        statuses(&res)[1..],
        [Nfsstat4::OK, Nfsstat4::OK, Nfsstat4::OK, Nfsstat4::WRONGSEC]
    );
    // §2.6.3.1.1.3: LOOKUP answers for what it reaches (nothing is looked up).
    let res = send(vec![put(), lookup(b"no-such-name")]);
    assert_eq!(statuses(&res)[1..], [Nfsstat4::OK, Nfsstat4::WRONGSEC]);
    // §2.6.3.1.1.5: SECINFO and SECINFO_NO_NAME never answer WRONGSEC; SECINFO does not
    // look the name up (a missing name gets the flavors too).
    let flavors = vec![Secinfo4::Flavor(1), Secinfo4::Flavor(0)];
    let res = send(vec![put(), NfsArgop4::SecinfoNoName(0)]);
    let NfsResop4::SecinfoNoName(Res4::Ok(list)) = &res.results[2] else {
        panic!("{res:?}")
    };
    assert_eq!(list.0, flavors);
    let res = send(vec![
        put(),
        NfsArgop4::Secinfo(Component4(Bytes::from_static(b"no-such-name"))),
    ]);
    let NfsResop4::Secinfo(Res4::Ok(list)) = &res.results[2] else {
        panic!("{res:?}")
    };
    assert_eq!(list.0, flavors);
    // Over TLS the same handle works.
    let mut tls = client_of_tls_export(Xprtsec::Tls);
    tls.nfs = c.nfs.clone();
    let sid = mount(&tls);
    let res = tls.send(vec![seq(sid, 1), put(), getattr(&[num::TYPE])]);
    assert_eq!(res.status, Nfsstat4::OK);
}

#[test]
fn which_op_after_a_put_filehandle_op_lets_it_answer_wrongsec() {
    use crate::nfs4::compound::fh::put_answers_wrongsec;
    // §2.6.3.1.1.1, .2, .3, .4, .5, .6: the put op does not answer.
    for next in [
        None,
        Some(Opnum4::PUTFH),
        Some(Opnum4::PUTROOTFH),
        Some(Opnum4::PUTPUBFH),
        Some(Opnum4::RESTOREFH),
        Some(Opnum4::SAVEFH),
        Some(Opnum4::LOOKUP),
        Some(Opnum4::LOOKUPP),
        Some(Opnum4::OPEN),
        Some(Opnum4::SECINFO),
        Some(Opnum4::SECINFO_NO_NAME),
        Some(Opnum4::ILLEGAL),
    ] {
        assert!(!put_answers_wrongsec(next), "{next:?}");
    }
    // §2.6.3.1.1.7: anything else.
    for next in [
        Opnum4::GETATTR,
        Opnum4::GETFH,
        Opnum4::READ,
        Opnum4::WRITE,
        Opnum4::READDIR,
        Opnum4::ACCESS,
        Opnum4::REMOVE,
        Opnum4::LINK,
    ] {
        assert!(put_answers_wrongsec(Some(next)), "{next:?}");
    }
}
