//! The NFSv4.2 operations over a real socket (RFC 7862): SEEK, ALLOCATE, DEALLOCATE, COPY and
//! CLONE, each with its error paths, through record marking, the RPC layer and the service, on
//! a LocalFs export (ext4 or tmpfs here: holes and `copy_file_range`, but no reflinks; CLONE
//! that works runs on an XFS image on a loop device).
//!
//! | RFC 7862 | error / behaviour | test |
//! |---|---|---|
//! | §15 (RFC 8881 §16.2.3) | the 4.2 ops in a 4.1 COMPOUND: NFS4ERR_OP_ILLEGAL | `v42_ops_are_illegal_in_minor_version_1` |
//! | §15.11 | SEEK_DATA / SEEK_HOLE; NXIO at or past the end; `sr_eof`; UNION_NOTSUPP | `seek_finds_data_and_holes` |
//! | §15.11 | SEEK on a directory: ISDIR; a bad stateid: BAD_STATEID | `seek_finds_data_and_holes` |
//! | §15.1, §15.4 | ALLOCATE extends, DEALLOCATE punches and keeps the size | `allocate_and_deallocate_change_space_not_contents` |
//! | §15.1, §15.4 | a read-only open: OPENMODE; a read-only export: ROFS; a directory: WRONG_TYPE | `allocate_and_deallocate_change_space_not_contents`, `allocate_on_a_read_only_export_is_rofs` |
//! | §15.2 | synchronous COPY, UNSTABLE with the write verifier, COMMIT after | `copy_copies_within_the_export` |
//! | §15.2 | COPY: source past its end INVAL, a directory WRONG_TYPE, no saved handle NOFILEHANDLE, bad stateid, inter-server NOTSUPP | `copy_error_paths` |
//! | §15.2 | COPY between two exports: XDEV | `copy_between_exports_is_xdev` |
//! | §15.13 | CLONE: NOTSUPP without reflinks (or the range shared where there are) | `clone_shares_or_is_not_supported` |
//! | §15.13, §12.2.1 | CLONE on XFS with reflinks (a loop device, `tests/peers/reflink-fs.sh`; fails saying why where there are none, unless `SLUICE_TEST_SKIP` names `reflink`): `clone_blksize` the block size there and 0 on ext4; whole file and aligned range share extents (FIEMAP) with the right bytes; misaligned offsets, a length neither whole blocks nor to the end, a source offset past the end, overlapping ranges of one file INVAL; across exports XDEV | `clone_on_a_reflink_file_system_shares_extents_and_checks_ranges` |
//! | §15.11, §15.2 | SEEK and COPY right after UNSTABLE WRITEs see the written data (held writes land first) | `seek_and_copy_right_after_unstable_writes_see_the_data` |
//! | | each op counted by name in the per-op statistics, errors apart | `the_v42_ops_are_counted_in_the_per_op_stats` |
//! | §15.3, §15.10 | COPY_NOTIFY: NOTSUPP; READ_PLUS too with `--no-read-plus` | `copy_notify_is_not_supported_nor_read_plus_when_turned_off` |
//! | §15.10 | READ_PLUS: holes of 64 KiB or more as ranges, data as bytes, ranges starting and ending in holes, eof, past the end | `read_plus_sends_holes_as_ranges` |
//! | §15.10 | READ_PLUS of dense ranges (and small holes) as one data segment, spliced or not; a file of one hole; held writes land first | `read_plus_of_dense_files_all_holes_and_held_writes` |
//! | §15.10 | READ_PLUS: NOFILEHANDLE, ISDIR, BAD_STATEID, OP_ILLEGAL in 4.1, the anonymous stateid | `read_plus_error_paths` |
//! | §15.8, §15.9 | OFFLOAD_CANCEL, OFFLOAD_STATUS of a stateid that is no copy's (an open stateid): BAD_STATEID | `offload_ops_know_no_copy` |
//! | §15.2, §15.9, §16.1, §4.8 | a large COPY with `ca_synchronous` false over a session with a back channel: a copy stateid at once, OFFLOAD_STATUS, CB_OFFLOAD with the count, UNSTABLE and the verifier, the copy equal to the source, the stateid gone once CB_OFFLOAD is answered (OFFLOAD_STATUS / OFFLOAD_CANCEL BAD_STATEID, also for an unknown one); asked synchronously or without a back channel: synchronous | `offload::a_large_copy_is_asynchronous_and_ends_in_cb_offload` |
//! | §15.8 | OFFLOAD_CANCEL between chunks, no CB_OFFLOAD; TEST_STATEID / FREE_STATEID of a copy stateid (in process, the driver's jobs held by the test) | `nfs4::compound::v42::tests::an_async_copy_is_cancelled_between_chunks_or_ends_in_cb_offload` (lib) |
//! | §12.2 | `clone_blksize`, `space_freed`, `change_attr_type` advertised and answered in 4.2 only; VERIFY of one in 4.1 ATTRNOTSUPP | `v42_attributes_exist_in_minor_version_2_only` |

#[macro_use]
mod support;
#[path = "../../../tests/support/needs.rs"]
mod needs;

use bytes::Bytes;
use sluice_xdr::nfs4::attrs::num;
use sluice_xdr::nfs4::ops::{
    AllocateArgs, CloneArgs, CommitArgs, CopyArgs, CopyNotifyArgs, CopyRes, Netloc4, NetlocList,
    NfsArgop4, NfsResop4, ReadPlusArgs, ReadPlusContent, Res4, SeekArgs, SeekResOk, WriteArgs,
    OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ,
};
use sluice_xdr::nfs4::{Bitmap4, NfsFh4, Nfsstat4, StableHow4, Stateid4, Utf8Str};
use std::os::unix::fs::FileExt;
use support::nfs4::*;
use support::{rw, with_options, TestServer};

/// The block size of the file systems the tests run on: holes are whole blocks.
const BLOCK: u64 = 4096;
const DATA: u32 = 0;
const HOLE: u32 = 1;

async fn send42(v: &mut V4, ops: Vec<NfsArgop4>) -> sluice_xdr::nfs4::compound::Compound4Res {
    v.send_minor(2, ops).await
}

fn seek_op(stateid: Stateid4, offset: u64, what: u32) -> NfsArgop4 {
    NfsArgop4::Seek(SeekArgs {
        stateid,
        offset,
        what,
    })
}

async fn seek(v: &mut V4, fh: &NfsFh4, sid: Stateid4, offset: u64, what: u32) -> Res4<SeekResOk> {
    let res = send42(
        v,
        vec![NfsArgop4::Putfh(fh.clone()), seek_op(sid, offset, what)],
    )
    .await;
    match res.results.last() {
        Some(NfsResop4::Seek(r)) => r.clone(),
        other => panic!("{other:?} in {res:?}"),
    }
}

fn alloc(stateid: Stateid4, offset: u64, length: u64) -> AllocateArgs {
    AllocateArgs {
        stateid,
        offset,
        length,
    }
}

fn size_of(res: &sluice_xdr::nfs4::compound::Compound4Res) -> u64 {
    attrs(res.results.last().unwrap()).size.unwrap()
}

fn getattr_size() -> NfsArgop4 {
    NfsArgop4::Getattr(Bitmap4::from_bits(&[num::SIZE]))
}

fn copy_op(src: Stateid4, dst: Stateid4, src_offset: u64, dst_offset: u64, count: u64) -> CopyArgs {
    CopyArgs {
        src_stateid: src,
        dst_stateid: dst,
        src_offset,
        dst_offset,
        count,
        consecutive: false,
        synchronous: false,
        source_server: NetlocList(Vec::new()),
    }
}

/// A file of `len` bytes: `byte` in the first and the last block, a hole between.
fn sparse_file(path: &std::path::Path, len: u64, byte: u8) {
    let f = std::fs::File::create(path).unwrap();
    f.write_all_at(&vec![byte; BLOCK as usize], 0).unwrap();
    f.write_all_at(&vec![byte; BLOCK as usize], len - BLOCK)
        .unwrap();
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clone_shares_or_is_not_supported() {
    let s = TestServer::start(rw()).await;
    let data = vec![5u8; 2 * BLOCK as usize];
    std::fs::write(s.export.join("src"), &data).unwrap();
    let mut v = V4::mount(&s, "clone client").await;
    let (so, sfh) = v
        .open(&s.export, "o", "src", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .unwrap();
    let (d, dfh) = v
        .open(&s.export, "o", "dst", true, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    let res = send42(
        &mut v,
        vec![
            NfsArgop4::Putfh(sfh),
            NfsArgop4::Savefh(()),
            NfsArgop4::Putfh(dfh),
            NfsArgop4::Clone(CloneArgs {
                src_stateid: so.stateid,
                dst_stateid: d.stateid,
                src_offset: 0,
                dst_offset: 0,
                count: 0,
            }),
        ],
    )
    .await;
    match res.status {
        // ext4 and tmpfs: no reflinks.
        Nfsstat4::NOTSUPP => {
            assert_eq!(std::fs::metadata(s.export.join("dst")).unwrap().len(), 0)
        }
        Nfsstat4::OK => assert_eq!(std::fs::read(s.export.join("dst")).unwrap(), data),
        other => panic!("{other:?}: {res:?}"),
    }
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

const KIB: u64 = 1024;

/// A READ_PLUS segment as the tests compare them: (hole, offset, length).
type Seg = (bool, u64, u64);

fn read_plus_op(stateid: Stateid4, offset: u64, count: u32) -> NfsArgop4 {
    NfsArgop4::ReadPlus(ReadPlusArgs {
        stateid,
        offset,
        count,
    })
}

/// READ_PLUS of `count` at `offset` (with `after` ops following it): eof, the segments, and the
/// bytes they stand for (holes as zeros), checked to follow each other from `offset`.
async fn read_plus(
    v: &mut V4,
    fh: &NfsFh4,
    sid: Stateid4,
    offset: u64,
    count: u32,
    after: Vec<NfsArgop4>,
) -> Result<(bool, Vec<Seg>, Vec<u8>), Nfsstat4> {
    let mut ops = vec![
        NfsArgop4::Putfh(fh.clone()),
        read_plus_op(sid, offset, count),
    ];
    ops.extend(after);
    let res = send42(v, ops).await;
    let ok = match res.results.get(2) {
        Some(NfsResop4::ReadPlus(Res4::Ok(ok))) => ok.clone(),
        Some(NfsResop4::ReadPlus(Res4::Err(s))) => return Err(*s),
        other => panic!("{other:?} in {res:?}"),
    };
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let (mut segs, mut bytes) = (Vec::new(), Vec::new());
    for c in &ok.contents.0 {
        let (seg, data) = match c {
            ReadPlusContent::Data(d) => ((false, d.offset, d.data.len() as u64), d.data.to_vec()),
            ReadPlusContent::Hole(h) => ((true, h.offset, h.length), vec![0; h.length as usize]),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            seg.1,
            offset + bytes.len() as u64,
            "a gap before {seg:?}: {segs:?}"
        );
        segs.push(seg);
        bytes.extend(data);
    }
    Ok((ok.eof, segs, bytes))
}

/// A file written at the given (offset, length) runs with `byte + run index`, holes between, of
/// `size` bytes; its contents.
fn file_with_runs(path: &std::path::Path, size: u64, runs: &[(u64, u64)]) -> Vec<u8> {
    let f = std::fs::File::create(path).unwrap();
    f.set_len(size).unwrap();
    let mut want = vec![0u8; size as usize];
    for (i, &(at, len)) in runs.iter().enumerate() {
        let run = vec![i as u8 + 1; len as usize];
        f.write_all_at(&run, at).unwrap();
        want[at as usize..(at + len) as usize].copy_from_slice(&run);
    }
    want
}

/// READ_PLUS (RFC 7862 §15.10) of a sparse file: holes of 64 KiB or more come back as ranges,
/// data as bytes, in order and without gaps; a range may start or end inside a hole; eof is
/// set only when the reply reaches the end; the bytes are the file's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_plus_sends_holes_as_ranges() {
    let s = TestServer::start(rw()).await;
    let size = 1024 * KIB;
    let want = file_with_runs(
        &s.export.join("sparse"),
        size,
        &[(0, 64 * KIB), (512 * KIB, 64 * KIB), (960 * KIB, 64 * KIB)],
    );
    let mut v = V4::mount(&s, "read_plus client").await;
    let (o, fh) = v
        .open(&s.export, "o", "sparse", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .unwrap();
    let sid = o.stateid;
    // The whole file, as the last op (the path that may splice) and with an op after it.
    for after in [vec![], vec![getattr_size()]] {
        let (eof, segs, bytes) = read_plus(&mut v, &fh, sid, 0, size as u32, after)
            .await
            .unwrap();
        assert!(eof);
        assert_eq!(
            segs,
            vec![
                (false, 0, 64 * KIB),
                (true, 64 * KIB, 448 * KIB),
                (false, 512 * KIB, 64 * KIB),
                (true, 576 * KIB, 384 * KIB),
                (false, 960 * KIB, 64 * KIB),
            ]
        );
        assert!(bytes == want, "the bytes differ");
    }
    // From inside a hole to inside the next one: not the end.
    let (eof, segs, bytes) = read_plus(&mut v, &fh, sid, 100 * KIB, 500 * KIB as u32, vec![])
        .await
        .unwrap();
    assert!(!eof);
    assert_eq!(
        segs,
        vec![
            (true, 100 * KIB, 412 * KIB),
            (false, 512 * KIB, 64 * KIB),
            (true, 576 * KIB, 24 * KIB),
        ]
    );
    assert!(bytes == want[100 * KIB as usize..600 * KIB as usize]);
    // Past the end of the file: cut at the end, with eof.
    let (eof, segs, _) = read_plus(&mut v, &fh, sid, 600 * KIB, 1 << 20, vec![])
        .await
        .unwrap();
    assert!(eof);
    assert_eq!(
        segs,
        vec![(true, 600 * KIB, 360 * KIB), (false, 960 * KIB, 64 * KIB)]
    );
    // A small range inside a hole: one data segment of zeros, no lseek games.
    let (eof, segs, bytes) = read_plus(&mut v, &fh, sid, 128 * KIB, 4096, vec![])
        .await
        .unwrap();
    assert!(!eof);
    assert_eq!(segs, vec![(false, 128 * KIB, 4096)]);
    assert!(bytes.iter().all(|&b| b == 0));
    // At and past the end: nothing, eof.
    for at in [size, size + 12345] {
        let (eof, segs, _) = read_plus(&mut v, &fh, sid, at, 65536, vec![])
            .await
            .unwrap();
        assert!(eof && segs.is_empty(), "at {at}: {segs:?}");
    }
}

/// Dense ranges (no hole of 64 KiB in them) are one data segment, spliced or not; a file that
/// is all hole is one hole; held UNSTABLE writes into a hole land before the range is mapped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_plus_of_dense_files_all_holes_and_held_writes() {
    let s = TestServer::start(rw()).await;
    let dense: Vec<u8> = (0..768 * KIB).map(|i| (i % 251) as u8).collect();
    std::fs::write(s.export.join("dense"), &dense).unwrap();
    // Holes shorter than 64 KiB count as data.
    let small_holes = file_with_runs(
        &s.export.join("small-holes"),
        256 * KIB,
        &[(0, 8 * KIB), (40 * KIB, 8 * KIB), (100 * KIB, 156 * KIB)],
    );
    file_with_runs(&s.export.join("empty"), 1024 * KIB, &[]);
    let mut v = V4::mount(&s, "read_plus dense client").await;
    for (name, want) in [("dense", &dense), ("small-holes", &small_holes)] {
        let (o, fh) = v
            .open(&s.export, "o", name, false, OPEN4_SHARE_ACCESS_READ, 0)
            .await
            .unwrap();
        for after in [vec![], vec![getattr_size()]] {
            let (eof, segs, bytes) = read_plus(&mut v, &fh, o.stateid, 0, 1 << 20, after)
                .await
                .unwrap();
            assert!(eof, "{name}");
            assert_eq!(segs, vec![(false, 0, want.len() as u64)], "{name}");
            assert!(&bytes == want, "{name}: the bytes differ");
        }
    }
    let (o, fh) = v
        .open(&s.export, "o", "empty", false, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    let (eof, segs, _) = read_plus(&mut v, &fh, o.stateid, 0, 1 << 20, vec![])
        .await
        .unwrap();
    assert!(eof);
    assert_eq!(segs, vec![(true, 0, 1024 * KIB)]);
    // An UNSTABLE WRITE into the hole, maybe held by write-behind: READ_PLUS sees it.
    let res = send42(
        &mut v,
        vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Write(WriteArgs {
                stateid: o.stateid,
                offset: 256 * KIB,
                stable: StableHow4::UNSTABLE,
                data: sluice_xdr::Payload::from(vec![9u8; 64 * KIB as usize]),
            }),
        ],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let (eof, segs, bytes) = read_plus(&mut v, &fh, o.stateid, 0, 1 << 20, vec![])
        .await
        .unwrap();
    assert!(eof);
    assert_eq!(
        segs,
        vec![
            (true, 0, 256 * KIB),
            (false, 256 * KIB, 64 * KIB),
            (true, 320 * KIB, 704 * KIB),
        ]
    );
    assert!(bytes[256 * KIB as usize..320 * KIB as usize]
        .iter()
        .all(|&b| b == 9));
}

/// READ_PLUS checks as READ does: no current handle NOFILEHANDLE, a directory ISDIR, a stateid
/// this server never issued BAD_STATEID; in minor version 1 it does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_plus_error_paths() {
    let s = TestServer::start(rw()).await;
    std::fs::create_dir(s.export.join("dir")).unwrap();
    std::fs::write(s.export.join("f"), vec![5u8; 8192]).unwrap();
    let mut v = V4::mount(&s, "read_plus errors").await;
    let (o, fh) = v
        .open(&s.export, "o", "f", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .unwrap();
    let res = send42(&mut v, vec![read_plus_op(o.stateid, 0, 4096)]).await;
    assert_eq!(res.status, Nfsstat4::NOFILEHANDLE, "{res:?}");
    let mut ops = walk_to(&s.export.join("dir"));
    ops.push(read_plus_op(Stateid4::ANONYMOUS, 0, 4096));
    let res = send42(&mut v, ops).await;
    assert_eq!(res.status, Nfsstat4::ISDIR, "{res:?}");
    let mut bogus = o.stateid;
    bogus.other[11] ^= 0xff;
    let err = read_plus(&mut v, &fh, bogus, 0, 4096, vec![])
        .await
        .unwrap_err();
    assert_eq!(err, Nfsstat4::BAD_STATEID);
    let res = v
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            read_plus_op(o.stateid, 0, 4096),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OP_ILLEGAL, "{res:?}");
    // The anonymous stateid reads, as READ's does.
    let (eof, segs, _) = read_plus(&mut v, &fh, Stateid4::ANONYMOUS, 0, 65536, vec![])
        .await
        .unwrap();
    assert!(eof);
    assert_eq!(segs, vec![(false, 0, 8192)]);
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

// ----- asynchronous COPY over a client with a back channel ------------------------------------

mod offload {
    use super::*;
    use sluice_client::transport::{
        CallbackReply, CallbackService, Callbacks, IncomingCall, RpcClient, RpcConfig,
    };
    use sluice_nfs4state::callback::PathState;
    use sluice_rpc::client::ProcId;
    use sluice_server::net::Connections;
    use sluice_xdr::nfs4::callback::{
        self as cb, CbArgop4, CbCompound4Args, CbCompound4Res, CbOffloadArgs, CbResop4,
        CbSequenceResOk, OffloadInfo4,
    };
    use sluice_xdr::nfs4::compound::{Compound4Args, Compound4Res, CompoundLimits};
    use sluice_xdr::nfs4::ops::{
        CallbackSecParms4, CallbackSecParmsList, ClientOwner4, CreateSessionArgs, ExchangeIdArgs,
        ImplIdList, StateProtect4A, CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
    };
    use sluice_xdr::nfs4::{self, Opaque4, SessionId4};
    use sluice_xdr::procs::TimerClass;
    use sluice_xdr::rpc::AuthSys;
    use sluice_xdr::{Pack, Writer};
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::time::Duration;
    use support::TestDirs;
    use tokio::sync::mpsc;

    const LIMIT: Duration = Duration::from_secs(60);

    /// Answers CB_NULL, CB_SEQUENCE and CB_OFFLOAD (OK) in minor version 2 (a 4.1
    /// CB_COMPOUND gets NFS4ERR_BADSESSION, as from Linux), and hands each CB_OFFLOAD over.
    struct Service {
        offloads: mpsc::UnboundedSender<CbOffloadArgs>,
    }

    impl CallbackService for Service {
        fn handle(
            self: Arc<Self>,
            call: IncomingCall,
        ) -> Pin<Box<dyn Future<Output = CallbackReply> + Send>> {
            Box::pin(async move {
                if call.call.proc_() == cb::proc_::CB_NULL {
                    return CallbackReply::Results(Vec::new());
                }
                let mut r = call.args();
                let Ok(args) = CbCompound4Args::decode(&mut r, &CompoundLimits::default()) else {
                    return CallbackReply::GarbageArgs;
                };
                let mut results = Vec::new();
                // As Linux: the session is looked up among the clients of the CB_COMPOUND's
                // minor version; this client is a 4.2 one.
                if args.minorversion != 2 {
                    let res = CbCompound4Res {
                        status: Nfsstat4::BADSESSION,
                        tag: args.tag.clone(),
                        results: vec![CbResop4::Sequence(Res4::Err(Nfsstat4::BADSESSION))],
                    };
                    let mut w = Writer::new();
                    res.pack(&mut w);
                    return CallbackReply::Results(w.into_segments());
                }
                for op in &args.ops {
                    results.push(match op {
                        CbArgop4::Sequence(s) => CbResop4::Sequence(Res4::Ok(CbSequenceResOk {
                            sessionid: s.sessionid,
                            sequenceid: s.sequenceid,
                            slotid: s.slotid,
                            highest_slotid: 0,
                            target_highest_slotid: 0,
                        })),
                        CbArgop4::Offload(o) => {
                            let _ = self.offloads.send(o.clone());
                            CbResop4::Offload(Nfsstat4::OK)
                        }
                        _ => return CallbackReply::GarbageArgs,
                    });
                }
                let res = CbCompound4Res {
                    status: Nfsstat4::OK,
                    tag: args.tag.clone(),
                    results,
                };
                let mut w = Writer::new();
                res.pack(&mut w);
                CallbackReply::Results(w.into_segments())
            })
        }
    }

    struct StopOnDrop(tokio::task::JoinHandle<Result<(), String>>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }

    /// A 4.2 client over `RpcClient` whose connection carries the session's back channel.
    struct CbClient {
        rpc: RpcClient,
        sessionid: SessionId4,
        seq: u32,
    }

    async fn compound_on(rpc: &RpcClient, ops: Vec<NfsArgop4>) -> Compound4Res {
        let args = Compound4Args {
            tag: Utf8Str(Bytes::from_static(b"offload")),
            minorversion: 2,
            ops,
        };
        let mut w = Writer::new();
        args.pack(&mut w);
        let id = ProcId {
            prog: nfs4::PROGRAM,
            vers: 4,
            proc_: nfs4::proc_::COMPOUND,
        };
        let out = tokio::time::timeout(
            LIMIT,
            rpc.call(
                id,
                &support::auth_sys(0, 0),
                w.into_segments(),
                TimerClass::Getattr,
            ),
        )
        .await
        .expect("COMPOUND answered in time")
        .expect("COMPOUND answered");
        let mut r = out.reply.results();
        Compound4Res::decode(&mut r, &CompoundLimits::default()).expect("COMPOUND4res")
    }

    impl CbClient {
        async fn send(&mut self, ops: Vec<NfsArgop4>) -> Compound4Res {
            let mut all = vec![sequence(self.sessionid, self.seq)];
            self.seq += 1;
            all.extend(ops);
            compound_on(&self.rpc, all).await
        }

        /// EXCHANGE_ID, CREATE_SESSION with the back channel on this connection, and a
        /// SEQUENCE; returns once the server has the path up.
        async fn connect(
            addr: std::net::SocketAddr,
            server: &sluice_server::service::Server,
            offloads: mpsc::UnboundedSender<CbOffloadArgs>,
        ) -> CbClient {
            let rpc = RpcClient::connect(
                addr,
                RpcConfig {
                    callbacks: Some(Callbacks(Arc::new(Service { offloads }))),
                    privileged_port: false,
                    ..RpcConfig::default()
                },
            )
            .await
            .unwrap();
            let res = compound_on(
                &rpc,
                vec![NfsArgop4::ExchangeId(ExchangeIdArgs {
                    clientowner: ClientOwner4 {
                        verifier: [4; 8],
                        ownerid: Opaque4(Bytes::from_static(b"offload client")),
                    },
                    flags: 0,
                    state_protect: StateProtect4A::None,
                    client_impl_id: ImplIdList(Vec::new()),
                })],
            )
            .await;
            let Some(NfsResop4::ExchangeId(Res4::Ok(e))) = res.results.first() else {
                panic!("EXCHANGE_ID: {res:?}")
            };
            let sys = AuthSys {
                stamp: 1,
                machine_name: Bytes::from_static(b"offload"),
                uid: 0,
                gid: 0,
                gids: Vec::new(),
            };
            let res = compound_on(
                &rpc,
                vec![NfsArgop4::CreateSession(CreateSessionArgs {
                    clientid: e.clientid,
                    sequence: e.sequenceid,
                    flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
                    fore_chan_attrs: chan(),
                    back_chan_attrs: chan(),
                    cb_program: cb::PROGRAM_DEFAULT,
                    sec_parms: CallbackSecParmsList(vec![CallbackSecParms4::AuthSys(sys)]),
                })],
            )
            .await;
            let Some(NfsResop4::CreateSession(Res4::Ok(cs))) = res.results.first() else {
                panic!("CREATE_SESSION: {res:?}")
            };
            let mut c = CbClient {
                rpc,
                sessionid: cs.sessionid,
                seq: 1,
            };
            let res = c.send(vec![]).await;
            assert_eq!(res.status, Nfsstat4::OK);
            tokio::time::timeout(LIMIT, async {
                while server
                    .nfs4
                    .state
                    .lock()
                    .unwrap()
                    .callback_path(&c.sessionid)
                    != Some(PathState::Up)
                {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await
            .expect("the back channel comes up");
            c
        }
    }

    /// `len` bytes no two 8-byte words of which are alike.
    fn pattern(len: usize) -> Vec<u8> {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut v = Vec::with_capacity(len);
        while v.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.truncate(len);
        v
    }

    /// The COPY of `src` to `dst` (both in the export at `export`), with the destination's
    /// handle fetched before it.
    fn copy_ops(export: &std::path::Path, count: u64, synchronous: bool) -> Vec<NfsArgop4> {
        let mut ops = walk_to(export);
        ops.push(lookup("src"));
        ops.push(NfsArgop4::Savefh(()));
        ops.extend(walk_to(export));
        ops.push(lookup("dst"));
        ops.push(NfsArgop4::Getfh(()));
        ops.push(NfsArgop4::Copy(CopyArgs {
            synchronous,
            ..copy_op(Stateid4::ANONYMOUS, Stateid4::ANONYMOUS, 0, 0, count)
        }));
        ops
    }

    fn offload_status(res: &Compound4Res) -> Res4<sluice_xdr::nfs4::ops::OffloadStatusResOk> {
        match res.results.last() {
            Some(NfsResop4::OffloadStatus(r)) => r.clone(),
            other => panic!("{other:?} in {res:?}"),
        }
    }

    /// RFC 7862 §15.2, §15.9, §16.1, §4.8: an 80 MiB COPY with `ca_synchronous` false from a
    /// client whose back channel is up is answered at once with a copy stateid; OFFLOAD_STATUS
    /// follows it; CB_OFFLOAD brings the count, UNSTABLE and the write verifier; the answered
    /// CB_OFFLOAD ends the stateid; the copy is byte for byte the source. A client without a
    /// back channel gets the same COPY synchronously (short, one 32 MiB chunk), and a
    /// synchronous request of the same size stays synchronous.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_large_copy_is_asynchronous_and_ends_in_cb_offload() {
        const LEN: usize = 80 << 20;
        let dirs = TestDirs::new("nfs42-offload");
        let export = dirs.export();
        let data = pattern(LEN);
        std::fs::write(export.join("src"), &data).unwrap();
        std::fs::write(export.join("dst"), b"").unwrap();
        let bound = sluice_server::bind(dirs.config()).await.unwrap();
        let addr = bound.local_addr().unwrap();
        let server = bound.server.clone();
        let _run = StopOnDrop(tokio::spawn(sluice_server::run_with(
            bound,
            Connections::default(),
        )));
        let (tx, mut offloads) = mpsc::unbounded_channel();
        let mut c = CbClient::connect(addr, &server, tx).await;

        let res = c.send(copy_ops(&export, 0, false)).await;
        assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
        let n = res.results.len();
        let (NfsResop4::Getfh(Res4::Ok(dst_fh)), NfsResop4::Copy(CopyRes::Ok(copy))) =
            (&res.results[n - 2], &res.results[n - 1])
        else {
            panic!("{res:?}")
        };
        assert!(!copy.requirements.synchronous, "{copy:?}");
        assert_eq!(
            copy.response.callback_id.0.len(),
            1,
            "a copy stateid: {copy:?}"
        );
        let sid = copy.response.callback_id.0[0];
        assert_eq!(sid.other[4] & 0xC0, 0x40, "a copy stateid's mark");

        // OFFLOAD_STATUS while it runs or once done: never more than the file, and the
        // completion status only with the whole count.
        let res = c
            .send(vec![
                NfsArgop4::Putfh(dst_fh.clone()),
                NfsArgop4::OffloadStatus(sid),
            ])
            .await;
        match offload_status(&res) {
            Res4::Ok(s) if s.complete.0.is_empty() => assert!(s.count <= LEN as u64),
            Res4::Ok(s) => {
                assert_eq!(s.complete.0, vec![Nfsstat4::OK]);
                assert_eq!(s.count, LEN as u64);
            }
            // Already answered CB_OFFLOAD: the stateid is gone.
            Res4::Err(e) => assert_eq!(e, Nfsstat4::BAD_STATEID),
        }

        let cb = tokio::time::timeout(LIMIT, offloads.recv())
            .await
            .expect("CB_OFFLOAD in time")
            .unwrap();
        assert_eq!(cb.stateid, sid);
        assert_eq!(&cb.fh, dst_fh);
        let OffloadInfo4::Ok(w) = &cb.offload_info else {
            panic!("{cb:?}")
        };
        assert_eq!(w.count, LEN as u64);
        assert_eq!(w.committed, StableHow4::UNSTABLE);
        assert_eq!(w.writeverf, copy.response.writeverf);
        assert!(
            std::fs::read(export.join("dst")).unwrap() == data,
            "dst == src"
        );
        assert_eq!(
            sluice_server::stats::Gauges4::of(&server.nfs4).cb_offloads,
            1,
            "counted for the stats"
        );

        // The answered CB_OFFLOAD ends the copy stateid (§4.8): OFFLOAD_STATUS and
        // OFFLOAD_CANCEL no longer know it, nor a stateid that never was a copy's.
        tokio::time::timeout(LIMIT, async {
            while server.nfs4.state.lock().unwrap().copies_len() != 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the answer is taken");
        let mut unknown = sid;
        unknown.other[11] ^= 0xff;
        for s in [sid, unknown] {
            let res = c
                .send(vec![
                    NfsArgop4::Putfh(dst_fh.clone()),
                    NfsArgop4::OffloadStatus(s),
                ])
                .await;
            assert_eq!(res.status, Nfsstat4::BAD_STATEID, "{res:?}");
            let res = c
                .send(vec![
                    NfsArgop4::Putfh(dst_fh.clone()),
                    NfsArgop4::OffloadCancel(s),
                ])
                .await;
            assert_eq!(res.status, Nfsstat4::BAD_STATEID, "{res:?}");
        }

        // The same COPY asked synchronously: done synchronously, one chunk.
        let res = c.send(copy_ops(&export, 0, true)).await;
        let Some(NfsResop4::Copy(CopyRes::Ok(sync))) = res.results.last() else {
            panic!("{res:?}")
        };
        assert!(sync.requirements.synchronous && sync.response.callback_id.0.is_empty());
        assert_eq!(sync.response.count, sluice_server::backend::COPY_BYTES_MAX);

        // A client without a back channel: synchronous, whatever it allowed.
        let ts = support::TestServer::exporting(&[&export]).await;
        let mut v = V4::mount(&ts, "no back channel").await;
        let res = send42(&mut v, copy_ops(&export, 0, false)).await;
        let Some(NfsResop4::Copy(CopyRes::Ok(sync))) = res.results.last() else {
            panic!("{res:?}")
        };
        assert!(sync.requirements.synchronous && sync.response.callback_id.0.is_empty());
        assert_eq!(sync.response.count, sluice_server::backend::COPY_BYTES_MAX);
        assert!(offloads.try_recv().is_err(), "no other CB_OFFLOAD");
    }
}

/// An XFS file system with reflinks on a loop device (`tests/peers/reflink-fs.sh`), unmounted
/// and detached when dropped.
struct ReflinkFs {
    dir: std::path::PathBuf,
}

/// What an XFS with reflinks on a loop device takes.
const NEEDS_REFLINK: &str = "Run the test as root on a machine with loop devices \
                             (/dev/loop-control), mkfs.xfs (apt-get install xfsprogs) and a \
                             kernel with XFS";

impl ReflinkFs {
    /// Mounts one on `dir`, or says why this machine cannot (the script's exit 77).
    fn mount(dir: std::path::PathBuf) -> Result<ReflinkFs, String> {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/peers/reflink-fs.sh");
        let out = std::process::Command::new("bash")
            .arg(&script)
            .arg("mount")
            .arg(&dir)
            .output()
            .expect("run reflink-fs.sh");
        match out.status.code() {
            Some(0) => Ok(ReflinkFs { dir }),
            Some(77) => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
            _ => panic!("reflink-fs.sh mount: {out:?}"),
        }
    }
}

impl Drop for ReflinkFs {
    fn drop(&mut self) {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/peers/reflink-fs.sh");
        let _ = std::process::Command::new("bash")
            .arg(&script)
            .arg("umount")
            .arg(&self.dir)
            .status();
    }
}

/// The status of CLONE of `count` bytes of `src` at `src_offset` into `dst` at `dst_offset`.
async fn clone_status(
    v: &mut V4,
    src: (&NfsFh4, Stateid4),
    dst: (&NfsFh4, Stateid4),
    src_offset: u64,
    dst_offset: u64,
    count: u64,
) -> Nfsstat4 {
    let ops = vec![
        NfsArgop4::Putfh(src.0.clone()),
        NfsArgop4::Savefh(()),
        NfsArgop4::Putfh(dst.0.clone()),
        NfsArgop4::Clone(CloneArgs {
            src_stateid: src.1,
            dst_stateid: dst.1,
            src_offset,
            dst_offset,
            count,
        }),
    ];
    send42(v, ops).await.status
}

/// CLONE (RFC 7862 §15.13) where the file system has reflinks (XFS with reflink=1 on a loop
/// device): `clone_blksize` is its block size there and 0 on ext4; a whole-file clone and an
/// aligned range share extents (FIEMAP says so) and read back as the source; a misaligned
/// offset, a length that is neither whole blocks nor to the end, and a source offset past the
/// end are INVAL; overlapping ranges of one file INVAL; a source on another export (ext4) XDEV.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clone_on_a_reflink_file_system_shares_extents_and_checks_ranges() {
    let dirs = support::TestDirs::new("nfs42-clone");
    let fs = match ReflinkFs::mount(dirs.base.join("xfs")) {
        Ok(fs) => fs,
        Err(why) => return needs::missing("reflink", &why, NEEDS_REFLINK),
    };
    let xfs = fs.dir.join("export");
    std::fs::create_dir(&xfs).unwrap();
    let mut config = rw();
    config.exports = vec![
        support::export_to_all(xfs.clone(), support::rw_options()),
        support::export_to_all(std::path::PathBuf::new(), support::rw_options()),
    ];
    let s = TestServer::start_in(config, dirs).await;
    let ext4 = s.export.clone();
    let src: Vec<u8> = (0..3 * BLOCK + 100).map(|i| (i * 7 % 253) as u8).collect();
    std::fs::write(xfs.join("src"), &src).unwrap();
    std::fs::write(ext4.join("other"), &src).unwrap();
    let mut v = V4::mount(&s, "reflink client").await;
    let (so, sfh) = v
        .open(&xfs, "o", "src", false, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    let (d, dfh) = v
        .open(&xfs, "o", "dst", true, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    let (e, efh) = v
        .open(&ext4, "o", "other", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .unwrap();
    // clone_blksize: the block size on XFS, none stated on ext4 (no reflinks).
    for (fh, want) in [(&sfh, BLOCK), (&efh, 0)] {
        let res = send42(
            &mut v,
            vec![
                NfsArgop4::Putfh(fh.clone()),
                NfsArgop4::Getattr(Bitmap4::from_bits(&[num::CLONE_BLKSIZE])),
            ],
        )
        .await;
        assert_eq!(
            attrs(res.results.last().unwrap()).clone_blksize,
            Some(want as u32),
            "{res:?}"
        );
    }
    // The whole file (count 0: to the source's end).
    let st = clone_status(&mut v, (&sfh, so.stateid), (&dfh, d.stateid), 0, 0, 0).await;
    assert_eq!(st, Nfsstat4::OK);
    assert!(std::fs::read(xfs.join("dst")).unwrap() == src);
    let frag = std::process::Command::new("filefrag")
        .arg("-v")
        .arg(xfs.join("dst"))
        .output()
        .expect("filefrag");
    assert!(
        String::from_utf8_lossy(&frag.stdout).contains("shared"),
        "the clone shares no extent: {}",
        String::from_utf8_lossy(&frag.stdout)
    );
    // An aligned range into the middle of the destination.
    let st = clone_status(
        &mut v,
        (&sfh, so.stateid),
        (&dfh, d.stateid),
        0,
        2 * BLOCK,
        BLOCK,
    )
    .await;
    assert_eq!(st, Nfsstat4::OK);
    let got = std::fs::read(xfs.join("dst")).unwrap();
    assert!(got[2 * BLOCK as usize..3 * BLOCK as usize] == src[..BLOCK as usize]);
    // Bad ranges.
    for (so_, doff, n, why) in [
        (100, 0, BLOCK, "a misaligned source offset"),
        (0, 100, BLOCK, "a misaligned destination offset"),
        (0, 0, 1000, "a length neither whole blocks nor to the end"),
        (8 * BLOCK, 0, BLOCK, "a source offset past the end"),
    ] {
        let st = clone_status(&mut v, (&sfh, so.stateid), (&dfh, d.stateid), so_, doff, n).await;
        assert_eq!(st, Nfsstat4::INVAL, "{why}");
    }
    // One file onto itself, overlapping.
    let st = clone_status(
        &mut v,
        (&sfh, so.stateid),
        (&sfh, so.stateid),
        0,
        BLOCK,
        2 * BLOCK,
    )
    .await;
    assert_eq!(st, Nfsstat4::INVAL, "overlapping ranges of one file");
    // Across exports (file systems).
    let st = clone_status(&mut v, (&efh, e.stateid), (&dfh, d.stateid), 0, 0, 0).await;
    assert_eq!(st, Nfsstat4::XDEV);
    drop(v);
    drop(s);
}
