//! Namespace ops: SETATTR, CREATE, RENAME, LINK.

use super::*;

#[test]
fn setattr_changes_mode_and_size_with_an_open_stateid() {
    let c = Client::new();
    let sid = mount(&c);
    let set = |v: AttrValues| {
        NfsArgop4::Setattr(SetattrArgs {
            stateid: Stateid4::CURRENT,
            obj_attributes: v.encode(),
        })
    };
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"o",
            b"f",
            Some(Createhow4::Unchecked(mode_attrs(0o600))),
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
        ),
        set(AttrValues {
            mode: Some(0o640),
            size: Some(10),
            ..AttrValues::default()
        }),
        getattr(&[num::MODE, num::SIZE]),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let NfsResop4::Setattr(r) = &res.results[5] else {
        panic!("{res:?}")
    };
    assert!(r
        .attrsset
        .same_bits(&Bitmap4::from_bits(&[num::SIZE, num::MODE])));
    let v = attrs(&res.results[6]);
    assert_eq!((v.mode, v.size), (Some(0o640), Some(10)));
    // A size change with a stateid nobody issued is refused; the pseudo tree is read-only.
    let mut ops = vec![seq(sid, 2)];
    ops.extend(into_export());
    ops.push(lookup(b"f"));
    ops.push(NfsArgop4::Setattr(SetattrArgs {
        stateid: Stateid4 {
            seqid: 1,
            other: [9; 12],
        },
        obj_attributes: AttrValues {
            size: Some(0),
            ..AttrValues::default()
        }
        .encode(),
    }));
    assert_ne!(c.send(ops).status, Nfsstat4::OK);
    let res = c.send(vec![
        seq(sid, 3),
        NfsArgop4::Putrootfh(()),
        set(AttrValues {
            mode: Some(0o777),
            ..AttrValues::default()
        }),
    ]);
    assert_eq!(res.status, Nfsstat4::ROFS);
}

#[test]
fn create_rename_and_link_in_an_export() {
    let c = Client::new();
    let sid = mount(&c);
    let mkdir = |name: &'static [u8]| {
        NfsArgop4::Create(CreateArgs {
            objtype: Createtype4::Dir,
            objname: Component4(Bytes::from_static(name)),
            createattrs: mode_attrs(0o755),
        })
    };
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        NfsArgop4::Savefh(()),
        mkdir(b"d"),
        getattr(&[num::TYPE, num::MODE]),
        NfsArgop4::Restorefh(()),
        NfsArgop4::Create(CreateArgs {
            objtype: Createtype4::Lnk(Linktext4(Bytes::from_static(b"d"))),
            objname: Component4(Bytes::from_static(b"ln")),
            createattrs: Fattr4::default(),
        }),
        NfsArgop4::Readlink(()),
        // RENAME d → e within the export root: saved and current are both the root.
        NfsArgop4::Restorefh(()),
        NfsArgop4::Rename(RenameArgs {
            oldname: Component4(Bytes::from_static(b"d")),
            newname: Component4(Bytes::from_static(b"e")),
        }),
        lookup(b"e"),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let NfsResop4::Create(Res4::Ok(made)) = &res.results[5] else {
        panic!("{res:?}")
    };
    assert!(made.attrset.contains(num::MODE));
    assert!(made.cinfo.after != made.cinfo.before);
    let v = attrs(&res.results[6]);
    assert_eq!((v.ftype, v.mode), (Some(Ftype4::DIR), Some(0o755)));
    let NfsResop4::Rename(Res4::Ok(r)) = &res.results[11] else {
        panic!("{res:?}")
    };
    assert!(r.source_cinfo.after != r.source_cinfo.before);
    // LINK: a file made by OPEN gets a second name; REGULAR files are not CREATE's.
    let mut ops = vec![seq(sid, 2)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"o",
            b"f",
            Some(Createhow4::Unchecked(mode_attrs(0o644))),
            OPEN4_SHARE_ACCESS_READ,
            OPEN4_SHARE_DENY_NONE,
        ),
        NfsArgop4::Savefh(()),
        NfsArgop4::Putrootfh(()),
        lookup(b"srv"),
        lookup(b"export"),
        NfsArgop4::Link(Component4(Bytes::from_static(b"g"))),
        lookup(b"g"),
        getattr(&[num::NUMLINKS]),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert_eq!(attrs(res.results.last().unwrap()).numlinks, Some(2));
    // RENAME from the pseudo tree is ROFS; CREATE in it too.
    let res = c.send(vec![seq(sid, 3), NfsArgop4::Putrootfh(()), mkdir(b"x")]);
    assert_eq!(res.status, Nfsstat4::ROFS);
}
