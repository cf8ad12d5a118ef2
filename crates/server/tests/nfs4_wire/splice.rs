//! The data path's local fast path over NFSv4.1: a READ that ends a COMPOUND goes from the page
//! cache through a pipe to the socket.

use super::*;

/// A READ that is the COMPOUND's last op, of a LocalFs export over TCP, is spliced (its data
/// goes from the page cache through a pipe to the socket, as v3's) and arrives intact with its
/// padding; one with an op after it is not. A 1 MiB WRITE (kept by the slot, as the Linux client
/// asks for WRITEs) lands whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_last_read_is_spliced_and_a_1_mib_write_lands() {
    use sluice_xdr::nfs4::ops::{ChannelAttrs4, SequenceArgs};
    use sluice_xdr::nfs4::ops::{CommitArgs, ReadArgs, WriteArgs};
    use sluice_xdr::nfs4::{StableHow4, Stateid4};
    use std::sync::atomic::Ordering::Relaxed;
    use support::{Rpc, TestDirs};
    const MIB: usize = 1 << 20;
    let dirs = TestDirs::new("v4splice");
    let export = dirs.export();
    // A page, then half a MiB and 3 bytes: the READ below (page-aligned, so that it fits the
    // pipe) has an odd count and reaches the end of the file.
    let content: Vec<u8> = (0..4096 + MIB / 2 + 3)
        .map(|i| (i * 7 + i / 4096) as u8)
        .collect();
    std::fs::write(export.join("big"), &content).unwrap();
    let mut config = dirs.config();
    config.read_splice = true;
    let bound = sluice_server::bind(config).await.expect("server binds");
    let addr = bound.local_addr().unwrap();
    let stats = bound.server.stats.clone();
    let _server = tokio::spawn(sluice_server::run(bound));

    let mut c = Rpc::connect(addr).await;
    let (clientid, seq) = exchange_id(&mut c, b"nfs4_wire splice client").await;
    // 1 MiB of data and the COMPOUND around it, as the Linux client asks.
    let fore = ChannelAttrs4 {
        maxrequestsize: (1 << 20) + 8192,
        maxresponsesize: (1 << 20) + 8192,
        ..chan()
    };
    let res = create_session_with(&mut c, clientid, seq, fore).await;
    let Some(NfsResop4::CreateSession(Res4::Ok(cs))) = res.results.first() else {
        panic!("{res:?}")
    };
    let sessionid = cs.sessionid;
    let into = |seq: NfsArgop4, name: &str| {
        let mut ops = vec![seq, NfsArgop4::Putrootfh(())];
        for p in export.components() {
            if let std::path::Component::Normal(n) = p {
                ops.push(lookup(n.to_str().unwrap()));
            }
        }
        ops.push(lookup(name));
        ops
    };
    let read = |offset: u64, count: u32| {
        NfsArgop4::Read(ReadArgs {
            stateid: Stateid4::ANONYMOUS,
            offset,
            count,
        })
    };

    // Last op: spliced. An odd count, so the reply ends with padding after the pipe's bytes
    // (`compound` checks that nothing follows the COMPOUND4res).
    let count = MIB / 2 + 3;
    let mut ops = into(sequence(sessionid, 1), "big");
    let at = ops.len();
    ops.push(read(4096, count as u32));
    let res = compound(&mut c, 1, ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let NfsResop4::Read(Res4::Ok(r)) = &res.results[at] else {
        panic!("{res:?}")
    };
    assert_eq!(r.data.len(), count);
    assert!(r.data.to_vec() == content[4096..], "the spliced bytes");
    assert!(r.eof);
    assert_eq!(
        stats.engine.spliced_bytes.load(Relaxed),
        count as u64,
        "the READ was spliced"
    );

    // With an op after it: chunks, not spliced.
    let mut ops = into(sequence(sessionid, 2), "big");
    ops.extend([
        read(0, (MIB / 2) as u32),
        NfsArgop4::Getattr(Bitmap4::from_bits(&[num::SIZE])),
    ]);
    let res = compound(&mut c, 1, ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let NfsResop4::Read(Res4::Ok(r)) = &res.results[at] else {
        panic!("{res:?}")
    };
    assert!(r.data.to_vec() == content[..MIB / 2]);
    assert!(!r.eof);
    assert_eq!(attrs(&res.results[at + 1]).size, Some(content.len() as u64));
    assert_eq!(stats.engine.spliced_bytes.load(Relaxed), count as u64);

    // A 1 MiB UNSTABLE WRITE and a COMMIT, the reply kept by the slot.
    std::fs::write(export.join("w"), b"").unwrap();
    let data: Vec<u8> = (0..MIB).map(|i| (i % 251) as u8).collect();
    let mut ops = into(
        NfsArgop4::Sequence(SequenceArgs {
            sessionid,
            sequenceid: 3,
            slotid: 0,
            highest_slotid: 0,
            cachethis: true,
        }),
        "w",
    );
    ops.extend([
        NfsArgop4::Write(WriteArgs {
            stateid: Stateid4::ANONYMOUS,
            offset: 0,
            stable: StableHow4::UNSTABLE,
            data: sluice_xdr::Payload::from(data.clone()),
        }),
        NfsArgop4::Commit(CommitArgs {
            offset: 0,
            count: 0,
        }),
    ]);
    let res = compound(&mut c, 1, ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let NfsResop4::Write(Res4::Ok(w)) = &res.results[at] else {
        panic!("{res:?}")
    };
    assert_eq!(w.count as usize, MIB);
    assert!(
        std::fs::read(export.join("w")).unwrap() == data,
        "the file holds the WRITE"
    );
}
