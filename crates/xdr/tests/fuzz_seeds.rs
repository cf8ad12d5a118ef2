//! The hand-made `nfs4_compound` fuzz seeds (`fuzz/regressions/nfs4_compound/v42-*`) are seeds
//! only if they decode: each must come out as a COMPOUND (request or reply, by its first byte,
//! as `fuzz/fuzz_targets/common.rs` lays inputs out) with no undecodable op, and every
//! attribute list in it must decode whole. A seed that stopped decoding (an op's arguments
//! changed shape) would silently start every fuzz run outside the decoders it was made for.

use bytes::Bytes;
use sluice_xdr::nfs4::attrs::AttrValues;
use sluice_xdr::nfs4::compound::{Compound4Args, Compound4Res, CompoundLimits};
use sluice_xdr::nfs4::ops::{NfsArgop4, NfsResop4, Res4};
use sluice_xdr::nfs4::Fattr4;
use sluice_xdr::Reader;
use std::path::Path;

fn attrs_decode_whole(f: &Fattr4, seed: &str) {
    let d = AttrValues::decode(f).unwrap_or_else(|e| panic!("{seed}: fattr4 {e:?}"));
    assert!(
        d.undecoded.is_empty(),
        "{seed}: undecoded {:?}",
        d.undecoded
    );
}

#[test]
fn the_hand_made_nfs4_compound_seeds_decode() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/nfs4_compound");
    let mut seen = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.starts_with("v42-") {
            continue;
        }
        let data = std::fs::read(&path).unwrap();
        let (selector, rest) = (data[0], Bytes::copy_from_slice(&data[2..]));
        let segs = [rest];
        let limits = CompoundLimits::default();
        if selector & 1 == 0 {
            let args = Compound4Args::decode(&mut Reader::new(&segs), &limits)
                .unwrap_or_else(|e| panic!("{name}: {e:?}"));
            for op in &args.ops {
                match op {
                    NfsArgop4::Illegal(_) | NfsArgop4::BadXdr(..) => panic!("{name}: {op:?}"),
                    NfsArgop4::Verify(f) | NfsArgop4::Nverify(f) => attrs_decode_whole(f, &name),
                    NfsArgop4::Setattr(a) => attrs_decode_whole(&a.obj_attributes, &name),
                    _ => {}
                }
            }
            assert!(!args.ops.is_empty(), "{name}");
        } else {
            let res = Compound4Res::decode(&mut Reader::new(&segs), &limits)
                .unwrap_or_else(|e| panic!("{name}: {e:?}"));
            for r in &res.results {
                if let NfsResop4::Getattr(Res4::Ok(f)) = r {
                    attrs_decode_whole(f, &name);
                }
            }
            assert!(!res.results.is_empty(), "{name}");
        }
        seen += 1;
    }
    assert!(seen >= 4, "only {seen} v42 seeds in {}", dir.display());
}

/// The asynchronous COPY's shapes as fuzz seeds: a COMPOUND with COPY (`ca_synchronous`
/// false), OFFLOAD_STATUS and OFFLOAD_CANCEL and its reply (a copy stateid in
/// `wr_callback_id`, a completion status), for `nfs4_compound`; a CB_COMPOUND with CB_SEQUENCE
/// and CB_OFFLOAD (a result, and an error with a partial count) and its reply, for
/// `nfs4_callback`. Each file is `[selector, cut, record]` as `fuzz/fuzz_targets/common.rs`
/// reads it. The test checks the files hold these encodings (so they decode, to these values);
/// `SLUICE_WRITE_SEEDS=1` writes them.
#[test]
fn the_offload_seeds_hold_the_async_copy_shapes() {
    use sluice_xdr::nfs4::callback::{
        CbArgop4, CbCompound4Args, CbCompound4Res, CbOffloadArgs, CbResop4, CbSequenceArgs,
        CbSequenceResOk, OffloadInfo4, ReferringCallLists,
    };
    use sluice_xdr::nfs4::compound::Compound4Args;
    use sluice_xdr::nfs4::ops::{
        CopyArgs, CopyRequirements4, CopyRes, CopyResOk, NetlocList, OffloadStatusResOk,
        StateidOpt, StatusOpt, WriteResponse4,
    };
    use sluice_xdr::nfs4::{NfsFh4, Nfsstat4, StableHow4, Stateid4, Utf8Str};
    use sluice_xdr::{to_bytes, Pack};

    let copy_sid = Stateid4 {
        seqid: 1,
        other: [0, 0, 0, 7, 0x40, 0, 0, 1, 9, 8, 7, 6],
    };
    let fh = NfsFh4(Bytes::from_static(&[1, 2, 3, 4, 5, 6, 7, 8]));
    let tag = Utf8Str(Bytes::from_static(b"seed"));
    let request = Compound4Args {
        tag: tag.clone(),
        minorversion: 2,
        ops: vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Savefh(()),
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Copy(CopyArgs {
                src_stateid: Stateid4::ANONYMOUS,
                dst_stateid: Stateid4::ANONYMOUS,
                src_offset: 0,
                dst_offset: 4096,
                count: 80 << 20,
                consecutive: true,
                synchronous: false,
                source_server: NetlocList(Vec::new()),
            }),
            NfsArgop4::OffloadStatus(copy_sid),
            NfsArgop4::OffloadCancel(copy_sid),
        ],
    };
    let reply = Compound4Res {
        status: Nfsstat4::OK,
        tag: tag.clone(),
        results: vec![
            NfsResop4::Putfh(Nfsstat4::OK),
            NfsResop4::Savefh(Nfsstat4::OK),
            NfsResop4::Putfh(Nfsstat4::OK),
            NfsResop4::Copy(CopyRes::Ok(CopyResOk {
                response: WriteResponse4 {
                    callback_id: StateidOpt(vec![copy_sid]),
                    count: 0,
                    committed: StableHow4::UNSTABLE,
                    writeverf: [5; 8],
                },
                requirements: CopyRequirements4 {
                    consecutive: true,
                    synchronous: false,
                },
            })),
            NfsResop4::OffloadStatus(Res4::Ok(OffloadStatusResOk {
                count: 80 << 20,
                complete: StatusOpt(vec![Nfsstat4::OK]),
            })),
            NfsResop4::OffloadCancel(Nfsstat4::OK),
        ],
    };
    let seq = CbSequenceArgs {
        sessionid: [0x22; 16],
        sequenceid: 3,
        slotid: 0,
        highest_slotid: 0,
        cachethis: false,
        referring_call_lists: ReferringCallLists::default(),
    };
    let offload = |info| {
        CbArgop4::Offload(CbOffloadArgs {
            fh: fh.clone(),
            stateid: copy_sid,
            offload_info: info,
        })
    };
    let cb_request = CbCompound4Args {
        tag: tag.clone(),
        minorversion: 2,
        callback_ident: 0,
        ops: vec![
            CbArgop4::Sequence(seq),
            offload(OffloadInfo4::Ok(WriteResponse4 {
                callback_id: StateidOpt(Vec::new()),
                count: 80 << 20,
                committed: StableHow4::UNSTABLE,
                writeverf: [5; 8],
            })),
            offload(OffloadInfo4::Err(Nfsstat4::NOSPC, 32 << 20)),
        ],
    };
    let cb_reply = CbCompound4Res {
        status: Nfsstat4::OK,
        tag,
        results: vec![
            CbResop4::Sequence(Res4::Ok(CbSequenceResOk {
                sessionid: [0x22; 16],
                sequenceid: 3,
                slotid: 0,
                highest_slotid: 0,
                target_highest_slotid: 0,
            })),
            CbResop4::Offload(Nfsstat4::OK),
            CbResop4::Offload(Nfsstat4::OK),
        ],
    };
    let regressions = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions");
    let seed = |selector: u8, v: &dyn Pack| {
        let mut out = vec![selector, 29];
        out.extend_from_slice(&to_bytes(v));
        out
    };
    let files: [(&str, Vec<u8>); 4] = [
        ("nfs4_compound/v42-offload-request", seed(0, &request)),
        ("nfs4_compound/v42-offload-reply", seed(1, &reply)),
        ("nfs4_callback/cb-offload-request", seed(0, &cb_request)),
        ("nfs4_callback/cb-offload-reply", seed(1, &cb_reply)),
    ];
    for (name, bytes) in files {
        let path = regressions.join(name);
        if std::env::var_os("SLUICE_WRITE_SEEDS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        }
        let on_disk = std::fs::read(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(on_disk, bytes, "{name} holds the encoding");
    }
    // And they decode back to the values (the fuzz targets' first step).
    let limits = CompoundLimits::default();
    let body = |b: &[u8]| [Bytes::copy_from_slice(&b[2..])];
    let segs = body(&seed(0, &cb_request));
    let again = CbCompound4Args::decode(&mut Reader::new(&segs), &limits).unwrap();
    assert_eq!(again, cb_request);
    let segs = body(&seed(1, &cb_reply));
    let again = CbCompound4Res::decode(&mut Reader::new(&segs), &limits).unwrap();
    assert_eq!(again, cb_reply);
    let segs = body(&seed(1, &reply));
    let again = Compound4Res::decode(&mut Reader::new(&segs), &limits).unwrap();
    assert_eq!(again, reply);
}

/// READ_PLUS's shapes as `nfs4_compound` seeds: a COMPOUND with two READ_PLUS ops (one with
/// a GETATTR after it) and its reply: data, hole, data segments with eof false, then a reply
/// of one hole and one with no segment at all (at the end of the file). Written and checked as
/// [`the_offload_seeds_hold_the_async_copy_shapes`]'s.
#[test]
fn the_read_plus_seeds_hold_its_shapes() {
    use sluice_xdr::nfs4::attrs::num;
    use sluice_xdr::nfs4::ops::{
        Data4, DataInfo4, ReadPlusArgs, ReadPlusContent, ReadPlusContents, ReadPlusResOk,
    };
    use sluice_xdr::nfs4::{Bitmap4, NfsFh4, Nfsstat4, Stateid4, Utf8Str};
    use sluice_xdr::{to_bytes, Pack, Payload};

    let sid = Stateid4 {
        seqid: 1,
        other: [0, 0, 0, 7, 0x10, 0, 0, 1, 1, 2, 3, 4],
    };
    let fh = NfsFh4(Bytes::from_static(&[1, 2, 3, 4, 5, 6, 7, 8]));
    let tag = Utf8Str(Bytes::from_static(b"seed"));
    let read_plus = |offset, count| {
        NfsArgop4::ReadPlus(ReadPlusArgs {
            stateid: sid,
            offset,
            count,
        })
    };
    let request = Compound4Args {
        tag: tag.clone(),
        minorversion: 2,
        ops: vec![
            NfsArgop4::Putfh(fh),
            read_plus(0, 1 << 20),
            NfsArgop4::Getattr(Bitmap4::from_bits(&[num::SIZE])),
            read_plus(1 << 20, 1 << 20),
        ],
    };
    let ok = |eof, contents| {
        NfsResop4::ReadPlus(Res4::Ok(ReadPlusResOk {
            eof,
            contents: ReadPlusContents(contents),
        }))
    };
    let reply = Compound4Res {
        status: Nfsstat4::OK,
        tag,
        results: vec![
            NfsResop4::Putfh(Nfsstat4::OK),
            ok(
                false,
                vec![
                    ReadPlusContent::Data(Data4 {
                        offset: 0,
                        data: Payload::from(vec![7u8; 13]),
                    }),
                    ReadPlusContent::Hole(DataInfo4 {
                        offset: 13,
                        length: 65536,
                    }),
                    ReadPlusContent::Data(Data4 {
                        offset: 65549,
                        data: Payload::from(vec![9u8; 8]),
                    }),
                ],
            ),
            ok(
                false,
                vec![ReadPlusContent::Hole(DataInfo4 {
                    offset: 1 << 20,
                    length: 1 << 20,
                })],
            ),
            ok(true, Vec::new()),
        ],
    };
    let regressions = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions");
    let seed = |selector: u8, v: &dyn Pack| {
        let mut out = vec![selector, 29];
        out.extend_from_slice(&to_bytes(v));
        out
    };
    let files: [(&str, Vec<u8>); 2] = [
        ("nfs4_compound/v42-read-plus-request", seed(0, &request)),
        ("nfs4_compound/v42-read-plus-reply", seed(1, &reply)),
    ];
    for (name, bytes) in files {
        let path = regressions.join(name);
        if std::env::var_os("SLUICE_WRITE_SEEDS").is_some() {
            std::fs::write(&path, &bytes).unwrap();
        }
        let on_disk = std::fs::read(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(on_disk, bytes, "{name} holds the encoding");
    }
    let limits = CompoundLimits::default();
    let segs = [Bytes::copy_from_slice(&seed(1, &reply)[2..])];
    let again = Compound4Res::decode(&mut Reader::new(&segs), &limits).unwrap();
    assert_eq!(again, reply);
    let segs = [Bytes::copy_from_slice(&seed(0, &request)[2..])];
    let again = Compound4Args::decode(&mut Reader::new(&segs), &limits).unwrap();
    assert_eq!(again, request);
}

/// CB_GETATTR's shapes as `nfs4_callback` seeds: the server's CB_COMPOUND (CB_SEQUENCE +
/// CB_GETATTR of size and change) and the holder's reply with a fattr4 of both, and one with
/// an error. The values decode back, and the reply's attributes to the size and change.
/// `SLUICE_WRITE_SEEDS=1` writes them.
#[test]
fn the_cb_getattr_seeds_hold_its_call_and_replies() {
    use sluice_xdr::nfs4::attrs::{num, AttrValues};
    use sluice_xdr::nfs4::callback::{
        CbArgop4, CbCompound4Args, CbCompound4Res, CbGetattrArgs, CbResop4, CbSequenceArgs,
        CbSequenceResOk, ReferringCallLists,
    };
    use sluice_xdr::nfs4::{Bitmap4, NfsFh4, Nfsstat4, Utf8Str};
    use sluice_xdr::{to_bytes, Pack};

    let fh = NfsFh4(Bytes::from_static(&[1, 2, 3, 4, 5, 6, 7, 8]));
    let tag = Utf8Str(Bytes::from_static(b"seed"));
    let request = CbCompound4Args {
        tag: tag.clone(),
        minorversion: 1,
        callback_ident: 0,
        ops: vec![
            CbArgop4::Sequence(CbSequenceArgs {
                sessionid: [0x22; 16],
                sequenceid: 4,
                slotid: 0,
                highest_slotid: 0,
                cachethis: false,
                referring_call_lists: ReferringCallLists::default(),
            }),
            CbArgop4::Getattr(CbGetattrArgs {
                fh,
                attr_request: Bitmap4::from_bits(&[num::CHANGE, num::SIZE]),
            }),
        ],
    };
    let attrs = AttrValues {
        size: Some(4096),
        change: Some(0x1234_5678_9abc),
        ..AttrValues::default()
    };
    let reply = |getattr| CbCompound4Res {
        status: Nfsstat4::OK,
        tag: tag.clone(),
        results: vec![
            CbResop4::Sequence(Res4::Ok(CbSequenceResOk {
                sessionid: [0x22; 16],
                sequenceid: 4,
                slotid: 0,
                highest_slotid: 0,
                target_highest_slotid: 0,
            })),
            CbResop4::Getattr(getattr),
        ],
    };
    let ok = reply(Res4::Ok(attrs.encode()));
    let mut err = reply(Res4::Err(Nfsstat4::BADHANDLE));
    err.status = Nfsstat4::BADHANDLE;
    let regressions = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions");
    let seed = |selector: u8, v: &dyn Pack| {
        let mut out = vec![selector, 29];
        out.extend_from_slice(&to_bytes(v));
        out
    };
    let files: [(&str, Vec<u8>); 3] = [
        ("nfs4_callback/cb-getattr-request", seed(0, &request)),
        ("nfs4_callback/cb-getattr-reply", seed(1, &ok)),
        ("nfs4_callback/cb-getattr-reply-error", seed(1, &err)),
    ];
    for (name, bytes) in files {
        let path = regressions.join(name);
        if std::env::var_os("SLUICE_WRITE_SEEDS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        }
        let on_disk = std::fs::read(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(on_disk, bytes, "{name} holds the encoding");
    }
    let limits = CompoundLimits::default();
    let body = |b: &[u8]| [Bytes::copy_from_slice(&b[2..])];
    let segs = body(&seed(0, &request));
    assert_eq!(
        CbCompound4Args::decode(&mut Reader::new(&segs), &limits).unwrap(),
        request
    );
    let segs = body(&seed(1, &ok));
    let again = CbCompound4Res::decode(&mut Reader::new(&segs), &limits).unwrap();
    assert_eq!(again, ok);
    let Some(CbResop4::Getattr(Res4::Ok(f))) = again.results.get(1) else {
        panic!("{again:?}")
    };
    let v = AttrValues::decode(f).unwrap().values;
    assert_eq!((v.size, v.change), (Some(4096), Some(0x1234_5678_9abc)));
}
