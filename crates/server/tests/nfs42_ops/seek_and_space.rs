//! SEEK (RFC 7862 §15.11), ALLOCATE and DEALLOCATE (§15.1, §15.4).

use super::*;

/// A file of `len` bytes: `byte` in the first and the last block, a hole between.
fn sparse_file(path: &std::path::Path, len: u64, byte: u8) {
    let f = std::fs::File::create(path).unwrap();
    f.write_all_at(&vec![byte; BLOCK as usize], 0).unwrap();
    f.write_all_at(&vec![byte; BLOCK as usize], len - BLOCK)
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seek_finds_data_and_holes() {
    let s = TestServer::start(rw()).await;
    let len = 4 * BLOCK;
    sparse_file(&s.export.join("sparse"), len, 1);
    let mut v = V4::mount(&s, "seek client").await;
    let (o, fh) = v
        .open(&s.export, "o", "sparse", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .unwrap();
    let sid = o.stateid;
    let at = |offset, eof| Res4::Ok(SeekResOk { eof, offset });
    assert_eq!(seek(&mut v, &fh, sid, 0, DATA).await, at(0, false));
    assert_eq!(seek(&mut v, &fh, sid, 0, HOLE).await, at(BLOCK, false));
    assert_eq!(
        seek(&mut v, &fh, sid, BLOCK, DATA).await,
        at(3 * BLOCK, false)
    );
    // From the last data block, the only hole left is the implicit one at the end.
    assert_eq!(seek(&mut v, &fh, sid, 3 * BLOCK, HOLE).await, at(len, true));
    // At and past the end: NXIO.
    assert_eq!(
        seek(&mut v, &fh, sid, len, DATA).await,
        Res4::Err(Nfsstat4::NXIO)
    );
    assert_eq!(
        seek(&mut v, &fh, sid, len, HOLE).await,
        Res4::Err(Nfsstat4::NXIO)
    );
    assert_eq!(
        seek(&mut v, &fh, sid, u64::MAX, DATA).await,
        Res4::Err(Nfsstat4::NXIO)
    );
    // An unknown data_content4.
    assert_eq!(
        seek(&mut v, &fh, sid, 0, 7).await,
        Res4::Err(Nfsstat4::UNION_NOTSUPP)
    );
    // A stateid this server never issued.
    let mut bad = sid;
    bad.other[11] ^= 0xff;
    assert_eq!(
        seek(&mut v, &fh, bad, 0, DATA).await,
        Res4::Err(Nfsstat4::BAD_STATEID)
    );
    // A directory.
    let mut ops = walk_to(&s.export);
    ops.push(seek_op(Stateid4::ANONYMOUS, 0, DATA));
    let res = send42(&mut v, ops).await;
    assert_eq!(res.status, Nfsstat4::ISDIR, "{res:?}");

    // SEEK_DATA in a trailing hole: the size, with sr_eof (not an error, §15.11.3).
    let (o, wfh) = v
        .open(&s.export, "w", "tail", true, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    std::fs::File::options()
        .write(true)
        .open(s.export.join("tail"))
        .unwrap()
        .write_all_at(&[2; 2 * BLOCK as usize], 0)
        .unwrap();
    let res = send42(
        &mut v,
        vec![
            NfsArgop4::Putfh(wfh.clone()),
            NfsArgop4::Deallocate(alloc(o.stateid, BLOCK, BLOCK)),
            seek_op(o.stateid, BLOCK, DATA),
        ],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    assert_eq!(
        res.results.last(),
        Some(&NfsResop4::Seek(at(2 * BLOCK, true)))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocate_and_deallocate_change_space_not_contents() {
    let s = TestServer::start(rw()).await;
    let path = s.export.join("f");
    std::fs::write(&path, vec![9u8; 3 * BLOCK as usize]).unwrap();
    let mut v = V4::mount(&s, "alloc client").await;
    let (o, fh) = v
        .open(&s.export, "o", "f", false, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    let sid = o.stateid;
    // ALLOCATE past the end extends the file with zeros.
    let res = send42(
        &mut v,
        vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Allocate(alloc(sid, 2 * BLOCK, 3 * BLOCK)),
            getattr_size(),
        ],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    assert_eq!(size_of(&res), 5 * BLOCK);
    // DEALLOCATE the middle block: zeros there, the size unchanged.
    let res = send42(
        &mut v,
        vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Deallocate(alloc(sid, BLOCK, BLOCK)),
            getattr_size(),
        ],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    assert_eq!(size_of(&res), 5 * BLOCK);
    let data = std::fs::read(&path).unwrap();
    assert_eq!(data.len() as u64, 5 * BLOCK);
    assert!(data[..BLOCK as usize].iter().all(|&b| b == 9));
    assert!(data[BLOCK as usize..2 * BLOCK as usize]
        .iter()
        .all(|&b| b == 0));
    assert!(data[2 * BLOCK as usize..3 * BLOCK as usize]
        .iter()
        .all(|&b| b == 9));
    assert!(data[3 * BLOCK as usize..].iter().all(|&b| b == 0));

    // A zero length is INVAL (fallocate's EINVAL).
    let res = send42(
        &mut v,
        vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Allocate(alloc(sid, 0, 0)),
        ],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::INVAL, "{res:?}");
    // A read-only open may not change space, as it may not WRITE.
    let (ro, _) = v
        .open(&s.export, "reader", "f", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .unwrap();
    for op in [
        NfsArgop4::Allocate(alloc(ro.stateid, 0, 1)),
        NfsArgop4::Deallocate(alloc(ro.stateid, 0, 1)),
    ] {
        let res = send42(&mut v, vec![NfsArgop4::Putfh(fh.clone()), op]).await;
        assert_eq!(res.status, Nfsstat4::OPENMODE, "{res:?}");
    }
    // A directory: not a regular file (§15.1.3, §15.4.3).
    for op in [
        NfsArgop4::Allocate(alloc(Stateid4::ANONYMOUS, 0, 1)),
        NfsArgop4::Deallocate(alloc(Stateid4::ANONYMOUS, 0, 1)),
    ] {
        let mut ops = walk_to(&s.export);
        ops.push(op);
        let res = send42(&mut v, ops).await;
        assert_eq!(res.status, Nfsstat4::WRONG_TYPE, "{res:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocate_on_a_read_only_export_is_rofs() {
    let s = TestServer::start(with_options(|o| o.read_only = true)).await;
    std::fs::write(s.export.join("f"), b"data").unwrap();
    let mut v = V4::mount(&s, "ro client").await;
    let mut ops = walk_to(&s.export);
    ops.push(lookup("f"));
    ops.push(NfsArgop4::Allocate(alloc(Stateid4::ANONYMOUS, 0, BLOCK)));
    let res = send42(&mut v, ops).await;
    assert_eq!(res.status, Nfsstat4::ROFS, "{res:?}");
    assert_eq!(std::fs::metadata(s.export.join("f")).unwrap().len(), 4);
}
