//! Synchronous COPY (RFC 7862 §15.2) within an export, its error paths and across exports;
//! SEEK and COPY right after held UNSTABLE writes.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_copies_within_the_export() {
    let s = TestServer::start(rw()).await;
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(s.export.join("src"), &data).unwrap();
    let mut v = V4::mount(&s, "copy client").await;
    let (so, sfh) = v
        .open(&s.export, "o", "src", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .unwrap();
    let (d, dfh) = v
        .open(&s.export, "o", "dst", true, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    // The whole source (count 0), then a range of it past the first copy's end.
    let res = send42(
        &mut v,
        vec![
            NfsArgop4::Putfh(sfh.clone()),
            NfsArgop4::Savefh(()),
            NfsArgop4::Putfh(dfh.clone()),
            NfsArgop4::Copy(copy_op(so.stateid, d.stateid, 0, 0, 0)),
            NfsArgop4::Copy(copy_op(so.stateid, d.stateid, 10, 200_000, 1000)),
            NfsArgop4::Commit(CommitArgs {
                offset: 0,
                count: 0,
            }),
            getattr_size(),
        ],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let NfsResop4::Copy(CopyRes::Ok(whole)) = &res.results[4] else {
        panic!("{res:?}")
    };
    assert_eq!(whole.response.count, data.len() as u64);
    assert!(
        whole.response.callback_id.0.is_empty(),
        "done synchronously"
    );
    assert!(whole.requirements.synchronous && whole.requirements.consecutive);
    assert_eq!(whole.response.committed, StableHow4::UNSTABLE);
    let NfsResop4::Copy(CopyRes::Ok(part)) = &res.results[5] else {
        panic!("{res:?}")
    };
    assert_eq!(part.response.count, 1000);
    let NfsResop4::Commit(Res4::Ok(verf)) = &res.results[6] else {
        panic!("{res:?}")
    };
    assert_eq!(
        verf, &whole.response.writeverf,
        "COMMIT's verifier is the one COPY answered"
    );
    assert_eq!(size_of(&res), 201_000);
    let got = std::fs::read(s.export.join("dst")).unwrap();
    assert_eq!(got[..data.len()], data[..]);
    assert!(got[data.len()..200_000].iter().all(|&b| b == 0));
    assert_eq!(got[200_000..], data[10..1010]);

    // Asking for more than the source holds: a short copy to its end.
    let res = send42(
        &mut v,
        vec![
            NfsArgop4::Putfh(sfh.clone()),
            NfsArgop4::Savefh(()),
            NfsArgop4::Putfh(dfh.clone()),
            NfsArgop4::Copy(copy_op(so.stateid, d.stateid, 99_000, 0, 1 << 40)),
        ],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let Some(NfsResop4::Copy(CopyRes::Ok(short))) = res.results.last() else {
        panic!("{res:?}")
    };
    assert_eq!(short.response.count, 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_error_paths() {
    let s = TestServer::start(rw()).await;
    std::fs::write(s.export.join("src"), vec![1u8; 5000]).unwrap();
    let mut v = V4::mount(&s, "copy errors").await;
    let (so, sfh) = v
        .open(&s.export, "o", "src", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .unwrap();
    let (d, dfh) = v
        .open(&s.export, "o", "dst", true, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    let copy_status = |src: NfsFh4, dst: NfsFh4, args: CopyArgs| {
        vec![
            NfsArgop4::Putfh(src),
            NfsArgop4::Savefh(()),
            NfsArgop4::Putfh(dst),
            NfsArgop4::Copy(args),
        ]
    };
    // The source offset past the source's end.
    let res = send42(
        &mut v,
        copy_status(
            sfh.clone(),
            dfh.clone(),
            copy_op(so.stateid, d.stateid, 5001, 0, 1),
        ),
    )
    .await;
    assert_eq!(res.status, Nfsstat4::INVAL, "{res:?}");
    // The source's stateid for the destination: a stateid of another file.
    let res = send42(
        &mut v,
        copy_status(
            sfh.clone(),
            dfh.clone(),
            copy_op(so.stateid, so.stateid, 0, 0, 1),
        ),
    )
    .await;
    assert_eq!(res.status, Nfsstat4::BAD_STATEID, "{res:?}");
    let mut bad = so.stateid;
    bad.other[11] ^= 0xff;
    let res = send42(
        &mut v,
        copy_status(sfh.clone(), dfh.clone(), copy_op(bad, d.stateid, 0, 0, 1)),
    )
    .await;
    assert_eq!(res.status, Nfsstat4::BAD_STATEID, "{res:?}");
    // An inter-server copy.
    let mut inter = copy_op(so.stateid, d.stateid, 0, 0, 1);
    inter.source_server = NetlocList(vec![Netloc4::Name(Utf8Str(Bytes::from_static(
        b"elsewhere",
    )))]);
    let res = send42(&mut v, copy_status(sfh.clone(), dfh.clone(), inter)).await;
    assert_eq!(res.status, Nfsstat4::NOTSUPP, "{res:?}");
    // No saved handle.
    let res = send42(
        &mut v,
        vec![
            NfsArgop4::Putfh(dfh.clone()),
            NfsArgop4::Copy(copy_op(so.stateid, d.stateid, 0, 0, 1)),
        ],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::NOFILEHANDLE, "{res:?}");
    // A directory as the source.
    let mut ops = walk_to(&s.export);
    ops.push(NfsArgop4::Savefh(()));
    ops.push(NfsArgop4::Putfh(dfh.clone()));
    ops.push(NfsArgop4::Copy(copy_op(
        Stateid4::ANONYMOUS,
        d.stateid,
        0,
        0,
        1,
    )));
    let res = send42(&mut v, ops).await;
    assert_eq!(res.status, Nfsstat4::WRONG_TYPE, "{res:?}");
    assert_eq!(std::fs::metadata(s.export.join("dst")).unwrap().len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_between_exports_is_xdev() {
    let base = std::env::temp_dir().join(format!("sluice-nfs42-xdev-{}", std::process::id()));
    let (a, b) = (base.join("a"), base.join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(a.join("src"), b"source").unwrap();
    std::fs::write(b.join("dst"), b"").unwrap();
    let s = TestServer::exporting(&[&a, &b]).await;
    let mut v = V4::mount(&s, "xdev client").await;
    let (so, sfh) = v
        .open(&a, "o", "src", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .unwrap();
    let (d, dfh) = v
        .open(&b, "o", "dst", false, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    for op in [
        NfsArgop4::Copy(copy_op(so.stateid, d.stateid, 0, 0, 0)),
        NfsArgop4::Clone(CloneArgs {
            src_stateid: so.stateid,
            dst_stateid: d.stateid,
            src_offset: 0,
            dst_offset: 0,
            count: 0,
        }),
    ] {
        let res = send42(
            &mut v,
            vec![
                NfsArgop4::Putfh(sfh.clone()),
                NfsArgop4::Savefh(()),
                NfsArgop4::Putfh(dfh.clone()),
                op,
            ],
        )
        .await;
        assert_eq!(res.status, Nfsstat4::XDEV, "{res:?}");
    }
    assert_eq!(std::fs::read(b.join("dst")).unwrap(), b"");
    drop(s);
    let _ = std::fs::remove_dir_all(&base);
}

/// UNSTABLE WRITEs the server may still hold (write-behind) land before SEEK and COPY look at
/// the file, so both see what the client wrote, in the very next COMPOUND.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seek_and_copy_right_after_unstable_writes_see_the_data() {
    let s = TestServer::start(rw()).await;
    let mut v = V4::mount(&s, "held client").await;
    let (o, sfh) = v
        .open(&s.export, "o", "src", true, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    let (d, dfh) = v
        .open(&s.export, "o", "dst", true, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    let data = vec![3u8; 2 * BLOCK as usize];
    let res = send42(
        &mut v,
        vec![
            NfsArgop4::Putfh(sfh.clone()),
            NfsArgop4::Write(WriteArgs {
                stateid: o.stateid,
                offset: BLOCK,
                stable: StableHow4::UNSTABLE,
                data: sluice_xdr::Payload::from_chunks(vec![Bytes::from(data.clone())]),
            }),
        ],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    // The first block was never written: data starts after it.
    assert_eq!(
        seek(&mut v, &sfh, o.stateid, 0, DATA).await,
        Res4::Ok(SeekResOk {
            eof: false,
            offset: BLOCK
        })
    );
    let res = send42(
        &mut v,
        vec![
            NfsArgop4::Putfh(sfh.clone()),
            NfsArgop4::Savefh(()),
            NfsArgop4::Putfh(dfh.clone()),
            NfsArgop4::Copy(copy_op(o.stateid, d.stateid, BLOCK, 0, 0)),
        ],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let Some(NfsResop4::Copy(CopyRes::Ok(c))) = res.results.last() else {
        panic!("{res:?}")
    };
    assert_eq!(c.response.count, data.len() as u64);
    assert_eq!(std::fs::read(s.export.join("dst")).unwrap(), data);
}
