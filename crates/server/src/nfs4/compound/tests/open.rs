//! The OPEN family: OPEN, CLOSE and share reservations.

use super::*;

#[test]
fn open_creates_and_close_ends_with_the_current_stateid() {
    let c = Client::new();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"owner-a",
            b"f",
            Some(Createhow4::Unchecked(mode_attrs(0o644))),
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
        ),
        getattr(&[num::TYPE, num::MODE]),
        NfsArgop4::Close(CloseArgs {
            seqid: 0,
            open_stateid: Stateid4::CURRENT,
        }),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let NfsResop4::Open(Res4::Ok(o)) = &res.results[4] else {
        panic!("{res:?}")
    };
    assert_eq!(o.stateid.seqid, 1);
    assert!(o.attrset.contains(num::MODE));
    assert!(o.cinfo.after != o.cinfo.before, "the directory changed");
    let v = attrs(&res.results[5]);
    assert_eq!((v.ftype, v.mode), (Some(Ftype4::REG), Some(0o644)));
    // GUARDED of an existing name is EXIST; a directory cannot be opened.
    let mut ops = vec![seq(sid, 2)];
    ops.extend(into_export());
    ops.push(open(
        b"owner-a",
        b"f",
        Some(Createhow4::Guarded(mode_attrs(0o644))),
        OPEN4_SHARE_ACCESS_READ,
        OPEN4_SHARE_DENY_NONE,
    ));
    assert_eq!(c.send(ops).status, Nfsstat4::EXIST);
    let mut ops = vec![seq(sid, 3), NfsArgop4::Putrootfh(()), lookup(b"srv")];
    ops.push(open(b"o", b"export", None, OPEN4_SHARE_ACCESS_READ, 0));
    assert_eq!(
        c.send(ops).status,
        Nfsstat4::NOENT,
        "pseudo directories hold no files"
    );
    let fs = c.nfs.exports[0].fs.clone();
    fs.mkdir(
        &Caller::with_cred(Cred::new(1000, 1000)),
        &fs.root_handle(),
        b"d",
        &SetAttr::default(),
    )
    .unwrap();
    let mut ops = vec![seq(sid, 4)];
    ops.extend(into_export());
    ops.push(open(b"o", b"d", None, OPEN4_SHARE_ACCESS_READ, 0));
    assert_eq!(c.send(ops).status, Nfsstat4::ISDIR);
}

#[test]
fn share_reservations_conflict_between_owners() {
    let c = Client::new();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.push(open(
        b"writer",
        b"f",
        Some(Createhow4::Unchecked(mode_attrs(0o644))),
        OPEN4_SHARE_ACCESS_BOTH,
        OPEN4_SHARE_DENY_NONE,
    ));
    assert_eq!(c.send(ops).status, Nfsstat4::OK);
    // Denying writes to a file someone has open for writing is refused.
    let mut ops = vec![seq(sid, 2)];
    ops.extend(into_export());
    ops.push(open(
        b"reader",
        b"f",
        None,
        OPEN4_SHARE_ACCESS_READ,
        OPEN4_SHARE_DENY_WRITE,
    ));
    assert_eq!(c.send(ops).status, Nfsstat4::SHARE_DENIED);
    // Without the deny it is fine.
    let mut ops = vec![seq(sid, 3)];
    ops.extend(into_export());
    ops.push(open(
        b"reader",
        b"f",
        None,
        OPEN4_SHARE_ACCESS_READ,
        OPEN4_SHARE_DENY_NONE,
    ));
    assert_eq!(c.send(ops).status, Nfsstat4::OK);
}
