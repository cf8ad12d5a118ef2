//! READ_PLUS (RFC 7862 §15.10): holes as ranges, dense ranges as one data segment, its error
//! paths.

use super::*;

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
