//! The v4 program on the port that serves v3: NULL, the walk through the pseudo tree a
//! mount makes first, minor versions, the lease driver, no v4 over UDP, and the data path
//! (READ, WRITE, COMMIT; the spliced last READ and its 1 MiB WRITE are in `splice.rs`).

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_v4_answers_on_the_v3_port() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let r = c.call(nfs4::PROGRAM, 4, nfs4::proc_::NULL, &[]).await;
    assert_eq!(r.body, ReplyBody::success());
    assert!(r.results.is_empty(), "NULL has no results");
    // The same connection still speaks v3.
    let r = c.call(NFS, 3, sluice_xdr::nfs3::proc_::NULL, &[]).await;
    assert_eq!(r.body, ReplyBody::success());
    // A procedure past COMPOUND.
    let r = c.call(nfs4::PROGRAM, 4, 2, &[]).await;
    assert_eq!(r.body, ReplyBody::accepted(AcceptStat::PROC_UNAVAIL));
}

/// What `mount -o vers=4.1 server:/path` does first: a client id, a session, then PUTROOTFH and
/// LOOKUP down the export's absolute path through the pseudo tree into the export.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_walks_the_pseudo_tree_into_the_export() {
    let s = TestServer::start(rw()).await;
    std::fs::write(s.export.join("hello"), b"hello").unwrap();
    let mut c = s.connect().await;
    let (clientid, seq) = exchange_id(&mut c, b"nfs4_wire client").await;
    let res = create_session(&mut c, clientid, seq).await;
    assert_eq!(res.status, Nfsstat4::OK, "CREATE_SESSION: {res:?}");
    let Some(NfsResop4::CreateSession(Res4::Ok(cs))) = res.results.first() else {
        panic!("{res:?}")
    };
    let sessionid = cs.sessionid;

    let bits = Bitmap4::from_bits(&[num::TYPE, num::SIZE, num::FSID]);
    let mut ops = vec![sequence(sessionid, 1), NfsArgop4::Putrootfh(())];
    // The root of the pseudo tree, for its fsid.
    ops.push(NfsArgop4::Getattr(bits.clone()));
    let components: Vec<String> = s
        .export
        .components()
        .filter_map(|p| match p {
            std::path::Component::Normal(n) => Some(n.to_str().unwrap().to_owned()),
            _ => None,
        })
        .collect();
    assert!(!components.is_empty());
    ops.extend(components.iter().map(|n| lookup(n)));
    ops.push(NfsArgop4::Getfh(()));
    ops.push(NfsArgop4::Getattr(bits.clone()));
    ops.push(lookup("hello"));
    ops.push(NfsArgop4::Getattr(bits));
    let n = ops.len();
    let res = compound(&mut c, 1, ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    assert_eq!(res.results.len(), n, "every op ran");
    let Some(NfsResop4::Sequence(Res4::Ok(sr))) = res.results.first() else {
        panic!("{res:?}")
    };
    assert_eq!((sr.sessionid, sr.sequenceid), (sessionid, 1));
    let root = attrs(&res.results[2]);
    assert_eq!(root.ftype, Some(Ftype4::DIR));
    let getfh = &res.results[n - 4];
    let NfsResop4::Getfh(Res4::Ok(fh)) = getfh else {
        panic!("not a GETFH result: {getfh:?}")
    };
    assert!(!fh.0.is_empty());
    let export = attrs(&res.results[n - 3]);
    assert_eq!(export.ftype, Some(Ftype4::DIR));
    assert_ne!(
        export.fsid, root.fsid,
        "crossing into the export changes the fsid"
    );
    let file = attrs(&res.results[n - 1]);
    assert_eq!(file.ftype, Some(Ftype4::REG));
    assert_eq!(file.size, Some(5));
    assert_eq!(file.fsid, export.fsid);

    // A sequence id that skips one is misordered (the slot is at 1).
    let res = compound(&mut c, 1, vec![sequence(sessionid, 3)]).await;
    assert_eq!(res.status, Nfsstat4::SEQ_MISORDERED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minor_version_0_is_mismatched_and_v2_is_prog_mismatch_3_4() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let res = compound(&mut c, 0, vec![NfsArgop4::Putrootfh(())]).await;
    assert_eq!(res.status, Nfsstat4::MINOR_VERS_MISMATCH);
    assert!(res.results.is_empty());
    let r = c.call(NFS, 2, 0, &[]).await;
    assert_eq!(
        r.body,
        ReplyBody::Accepted {
            verf: OpaqueAuth::none(),
            stat: AcceptStat::PROG_MISMATCH,
            mismatch: Some((3, 4)),
        }
    );
    // Arguments that are not a COMPOUND at all: GARBAGE_ARGS.
    let r = c
        .call(nfs4::PROGRAM, 4, nfs4::proc_::COMPOUND, &[0, 0])
        .await;
    assert_eq!(r.body, ReplyBody::accepted(AcceptStat::GARBAGE_ARGS));
}

/// The lease driver runs with the server: a client id nobody confirmed is gone once its lease
/// has run out, without any call arriving to notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_driver_expires_an_unconfirmed_client() {
    let mut cfg = rw();
    cfg.lease = Duration::from_secs(1);
    let s = TestServer::start(cfg).await;
    let mut c = s.connect().await;
    let (clientid, seq) = exchange_id(&mut c, b"forgetful client").await;
    // The lease (1 s), plus the driver's longest sleep (1 s), plus slack for a loaded machine.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let res = create_session(&mut c, clientid, seq).await;
    assert_eq!(res.status, Nfsstat4::STALE_CLIENTID, "{res:?}");
    // A fresh client on the same connection is served as usual.
    let (clientid, seq) = exchange_id(&mut c, b"prompt client").await;
    let res = create_session(&mut c, clientid, seq).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
}

/// NFSv4.1 needs a transport with congestion control (RFC 8881 §2.9.1): over UDP, version 4 is
/// refused with the program's version range while v3 still answers there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v4_is_not_served_over_udp() {
    let mut cfg = rw();
    cfg.udp = true;
    let s = TestServer::start(cfg).await;
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(s.addr).await.unwrap();
    let cred = auth_sys(0, 0);
    let mut buf = vec![0u8; 65536];
    for (xid, vers, proc_, mismatch) in [
        (21, 4, nfs4::proc_::NULL, Some((3, 4))),
        (22, 4, nfs4::proc_::COMPOUND, Some((3, 4))),
        (23, 3, 0, None),
    ] {
        sock.send(&call_message(xid, NFS, vers, proc_, &cred, &[]))
            .await
            .unwrap();
        let n = tokio::time::timeout(REPLY_TIMEOUT, sock.recv(&mut buf))
            .await
            .expect("a UDP reply in time")
            .unwrap();
        let r = parse_reply(&[Bytes::copy_from_slice(&buf[..n])]);
        assert_eq!(r.xid, xid);
        match mismatch {
            Some(range) => assert_eq!(r.mismatch(), Some(range), "v{vers} proc {proc_}"),
            None => assert_eq!(r.body, ReplyBody::success(), "v3 NULL over UDP"),
        }
    }
}

/// READ, WRITE and COMMIT over TCP through the data path v3 uses: an UNSTABLE WRITE with the
/// anonymous stateid is acknowledged UNSTABLE with v3's verifier, is read back before it lands,
/// and is in the file once COMMIT returns the same verifier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_commit_and_read_over_tcp() {
    use sluice_xdr::nfs4::ops::{CommitArgs, ReadArgs, WriteArgs};
    use sluice_xdr::nfs4::{StableHow4, Stateid4};
    let s = TestServer::start(rw()).await;
    let path = s.export.join("hello");
    std::fs::write(&path, b"hello").unwrap();
    let mut c = s.connect().await;
    let (clientid, seq) = exchange_id(&mut c, b"nfs4_wire data client").await;
    let res = create_session(&mut c, clientid, seq).await;
    let Some(NfsResop4::CreateSession(Res4::Ok(cs))) = res.results.first() else {
        panic!("{res:?}")
    };
    let sessionid = cs.sessionid;
    let into_file = |seqid: u32| {
        let mut ops = vec![sequence(sessionid, seqid), NfsArgop4::Putrootfh(())];
        for p in s.export.components() {
            if let std::path::Component::Normal(n) = p {
                ops.push(lookup(n.to_str().unwrap()));
            }
        }
        ops.push(lookup("hello"));
        ops
    };
    let mut ops = into_file(1);
    let first = ops.len();
    ops.extend([
        NfsArgop4::Write(WriteArgs {
            stateid: Stateid4::ANONYMOUS,
            offset: 5,
            stable: StableHow4::UNSTABLE,
            data: sluice_xdr::Payload::from_chunks(vec![Bytes::from_static(b", world")]),
        }),
        NfsArgop4::Read(ReadArgs {
            stateid: Stateid4::ANONYMOUS,
            offset: 0,
            count: 1 << 16,
        }),
    ]);
    let res = compound(&mut c, 1, ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let NfsResop4::Write(Res4::Ok(w)) = &res.results[first] else {
        panic!("{res:?}")
    };
    assert_eq!(w.count, 7);
    let NfsResop4::Read(Res4::Ok(r)) = &res.results[first + 1] else {
        panic!("{res:?}")
    };
    assert_eq!(
        r.data.to_vec(),
        b"hello, world",
        "the held write reads back"
    );
    assert!(r.eof);

    let mut ops = into_file(2);
    ops.push(NfsArgop4::Commit(CommitArgs {
        offset: 0,
        count: 0,
    }));
    let res = compound(&mut c, 1, ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let Some(NfsResop4::Commit(Res4::Ok(verf))) = res.results.last() else {
        panic!("{res:?}")
    };
    assert_eq!(*verf, w.writeverf, "one write verifier");
    assert_eq!(std::fs::read(&path).unwrap(), b"hello, world");
}
