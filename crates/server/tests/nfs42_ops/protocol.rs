//! The 4.2 ops as a whole: illegal in a 4.1 COMPOUND, the ones not supported,
//! OFFLOAD_CANCEL and OFFLOAD_STATUS when there is no copy, the per-op statistics and the 4.2
//! attributes.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v42_ops_are_illegal_in_minor_version_1() {
    let s = TestServer::start(rw()).await;
    let mut v = V4::mount(&s, "v41 client").await;
    let res = v
        .send(vec![
            NfsArgop4::Putrootfh(()),
            seek_op(Stateid4::ANONYMOUS, 0, DATA),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OP_ILLEGAL, "{res:?}");
    assert!(matches!(
        res.results.last(),
        Some(NfsResop4::Illegal(Nfsstat4::OP_ILLEGAL))
    ));
    // The same op in minor version 2 is known (the pseudo root is a directory).
    let res = send42(
        &mut v,
        vec![
            NfsArgop4::Putrootfh(()),
            seek_op(Stateid4::ANONYMOUS, 0, DATA),
        ],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::ISDIR, "{res:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_notify_is_not_supported_nor_read_plus_when_turned_off() {
    let mut config = rw();
    config.read_plus = false;
    let s = TestServer::start(config).await;
    std::fs::write(s.export.join("f"), b"data").unwrap();
    let mut v = V4::mount(&s, "offload client").await;
    let (o, fh) = v
        .open(&s.export, "o", "f", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .unwrap();
    for op in [
        NfsArgop4::CopyNotify(CopyNotifyArgs {
            src_stateid: o.stateid,
            destination_server: Netloc4::Name(Utf8Str(Bytes::from_static(b"elsewhere"))),
        }),
        NfsArgop4::ReadPlus(ReadPlusArgs {
            stateid: o.stateid,
            offset: 0,
            count: 4,
        }),
    ] {
        let num = op.opnum();
        let res = send42(&mut v, vec![NfsArgop4::Putfh(fh.clone()), op]).await;
        assert_eq!(res.status, Nfsstat4::NOTSUPP, "{num:?}: {res:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offload_ops_know_no_copy() {
    let s = TestServer::start(rw()).await;
    std::fs::write(s.export.join("f"), b"data").unwrap();
    let mut v = V4::mount(&s, "offload client").await;
    let (o, fh) = v
        .open(&s.export, "o", "f", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .unwrap();
    // Even the file's own open stateid is no copy's (copy stateids: the `offload` tests).
    for op in [
        NfsArgop4::OffloadStatus(o.stateid),
        NfsArgop4::OffloadCancel(o.stateid),
    ] {
        let num = op.opnum();
        let res = send42(&mut v, vec![NfsArgop4::Putfh(fh.clone()), op]).await;
        assert_eq!(res.status, Nfsstat4::BAD_STATEID, "{num:?}: {res:?}");
    }
}

/// The per-op statistics (`sluice stats`, the metrics endpoint) count the 4.2 ops by name,
/// failures apart: what the issue checks after `fallocate` and `copy_file_range` in a guest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_v42_ops_are_counted_in_the_per_op_stats() {
    use std::sync::atomic::Ordering::Relaxed;
    let dirs = support::TestDirs::new("nfs42-stats");
    let config = dirs.config();
    let bound = sluice_server::bind(config.clone())
        .await
        .expect("server binds");
    let stats = bound.server.stats.clone();
    let s = TestServer {
        addr: bound.local_addr().unwrap(),
        export: dirs.export(),
        config,
        task: tokio::spawn(sluice_server::run(bound)),
        dirs,
    };
    std::fs::write(s.export.join("f"), vec![1u8; BLOCK as usize]).unwrap();
    let mut v = V4::mount(&s, "stats client").await;
    let (o, fh) = v
        .open(&s.export, "o", "f", false, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    let res = send42(
        &mut v,
        vec![
            NfsArgop4::Putfh(fh.clone()),
            seek_op(o.stateid, 0, DATA),
            NfsArgop4::Allocate(alloc(o.stateid, 0, 2 * BLOCK)),
            NfsArgop4::Deallocate(alloc(o.stateid, 0, BLOCK)),
            NfsArgop4::Savefh(()),
            NfsArgop4::Copy(copy_op(o.stateid, o.stateid, 0, 4 * BLOCK, BLOCK)),
        ],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    // One failure: SEEK past the end.
    let res = send42(
        &mut v,
        vec![NfsArgop4::Putfh(fh), seek_op(o.stateid, 1 << 30, DATA)],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::NXIO, "{res:?}");
    let counted: std::collections::HashMap<&str, (u64, u64)> = stats
        .nfs4_ops
        .used()
        .map(|(name, p)| (name, (p.calls.load(Relaxed), p.errors.load(Relaxed))))
        .collect();
    assert_eq!(counted.get("SEEK"), Some(&(2, 1)), "{counted:?}");
    assert_eq!(counted.get("ALLOCATE"), Some(&(1, 0)), "{counted:?}");
    assert_eq!(counted.get("DEALLOCATE"), Some(&(1, 0)), "{counted:?}");
    assert_eq!(counted.get("COPY"), Some(&(1, 0)), "{counted:?}");
}

/// RFC 7862 §12.2: the 4.2 attributes the Linux client asks for (`clone_blksize`,
/// `change_attr_type`) and `space_freed` are in `supported_attrs` and answered in a 4.2
/// COMPOUND only; a 4.1 COMPOUND neither advertises nor answers them, and a VERIFY naming one
/// is NFS4ERR_ATTRNOTSUPP there (4.2: the values compare).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v42_attributes_exist_in_minor_version_2_only() {
    use sluice_xdr::nfs4::attrs::{AttrValues, NFS4_CHANGE_TYPE_IS_TIME_METADATA};
    let s = TestServer::start(rw()).await;
    std::fs::write(s.export.join("f"), vec![5u8; 3 * BLOCK as usize]).unwrap();
    std::fs::hard_link(s.export.join("f"), s.export.join("g")).unwrap();
    std::fs::write(s.export.join("h"), vec![6u8; 2 * BLOCK as usize]).unwrap();
    let mut v = V4::mount(&s, "v42 attrs client").await;
    let v42_bits = [num::CLONE_BLKSIZE, num::SPACE_FREED, num::CHANGE_ATTR_TYPE];
    let mut req = Bitmap4::from_bits(&[num::SUPPORTED_ATTRS, num::SPACE_USED]);
    for b in v42_bits {
        req.set(b);
    }
    let getattr = |name: &str| {
        let mut ops = walk_to(&s.export);
        ops.extend([lookup(name), NfsArgop4::Getattr(req.clone())]);
        ops
    };

    let res = v.send_minor(1, getattr("h")).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let a = attrs(res.results.last().unwrap());
    let supported = a.supported_attrs.clone().unwrap();
    for b in v42_bits {
        assert!(!supported.contains(b), "4.1 advertises attribute {b}");
    }
    assert_eq!(
        a.mask(),
        Bitmap4::from_bits(&[num::SUPPORTED_ATTRS, num::SPACE_USED]),
        "4.1 answers only its own attributes: {a:?}"
    );

    let res = send42(&mut v, getattr("h")).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let a = attrs(res.results.last().unwrap());
    for b in v42_bits {
        assert!(
            a.supported_attrs.as_ref().unwrap().contains(b),
            "4.2 lacks {b}"
        );
    }
    assert_eq!(a.clone_blksize, Some(0));
    // LocalFs's change attribute is the ctime.
    assert_eq!(a.change_attr_type, Some(NFS4_CHANGE_TYPE_IS_TIME_METADATA));
    // One link: removing it frees what it uses.
    assert_eq!(a.space_freed, a.space_used);
    assert!(a.space_used.unwrap() >= 2 * BLOCK, "{a:?}");
    // Two links: removing one frees nothing.
    let res = send42(&mut v, getattr("f")).await;
    assert_eq!(attrs(res.results.last().unwrap()).space_freed, Some(0));

    // VERIFY of change_attr_type: unknown in 4.1, equal in 4.2.
    let verify = || {
        let mut ops = walk_to(&s.export);
        ops.extend([
            lookup("h"),
            NfsArgop4::Verify(
                AttrValues {
                    change_attr_type: Some(NFS4_CHANGE_TYPE_IS_TIME_METADATA),
                    ..Default::default()
                }
                .encode(),
            ),
        ]);
        ops
    };
    let res = v.send_minor(1, verify()).await;
    assert_eq!(res.status, Nfsstat4::ATTRNOTSUPP, "{res:?}");
    let res = send42(&mut v, verify()).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
}
