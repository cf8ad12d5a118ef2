//! The RPC layer (RFC 5531): credentials, versions, record marking, the reply cache,
//! connection limits, UDP; and many calls in flight on one connection.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_none_and_auth_sys_are_accepted() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    c.cred = OpaqueAuth::none();
    let r = c.call(NFS, 3, proc_::NULL, &[]).await;
    assert_eq!(r.body, ReplyBody::success());
    assert!(r.results.is_empty(), "NULL returns nothing");
    c.cred = auth_sys(1000, 1000);
    let r = c.call(NFS, 3, proc_::NULL, &[]).await;
    assert_eq!(r.body, ReplyBody::success());
    // And a real procedure under each flavor.
    let root = c.mnt_root(&s).await;
    for cred in [OpaqueAuth::none(), auth_sys(1000, 1000)] {
        c.cred = cred;
        ok(getattr(&mut c, &root).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_version_3_is_denied_with_rpc_mismatch_2_2() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let xid = c.next_xid();
    let mut msg = call_message(xid, NFS, 3, proc_::NULL, &c.cred, &[]);
    msg[8..12].copy_from_slice(&3u32.to_be_bytes()); // rpcvers
    c.send_message(&msg).await;
    let r = c.recv().await.expect("a reply");
    assert_eq!(r.xid, xid);
    assert_eq!(r.body, ReplyBody::RpcMismatch { low: 2, high: 2 });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_program_is_prog_unavail() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let r = c.call(100_011, 1, 0, &[]).await; // rquota: not served
    assert_eq!(r.body, ReplyBody::accepted(AcceptStat::PROG_UNAVAIL));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nfs_versions_2_and_5_are_prog_mismatch_3_4() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    for vers in [2, 5] {
        let r = c.call(NFS, vers, 0, &[]).await;
        assert_eq!(
            r.body,
            ReplyBody::Accepted {
                verf: OpaqueAuth::none(),
                stat: AcceptStat::PROG_MISMATCH,
                mismatch: Some((3, 4)),
            },
            "NFS version {vers}"
        );
    }
    let r = c.call(mount3::PROGRAM, 1, 0, &[]).await;
    assert_eq!(r.mismatch(), Some((3, 3)), "MOUNT v1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn procedure_22_is_proc_unavail() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let r = c.call(NFS, 3, 22, &[]).await;
    assert_eq!(r.body, ReplyBody::accepted(AcceptStat::PROC_UNAVAIL));
    let r = c.call(mount3::PROGRAM, 3, 6, &[]).await;
    assert_eq!(r.body, ReplyBody::accepted(AcceptStat::PROC_UNAVAIL));
    // The connection is still in service.
    assert_eq!(c.call(NFS, 3, 0, &[]).await.body, ReplyBody::success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_args_are_refused_and_the_connection_keeps_serving() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let bad_args: Vec<(u32, Vec<u8>)> = vec![
        // GETATTR with a truncated handle length word.
        (proc_::GETATTR, vec![0, 0]),
        // GETATTR with a 65-byte handle (nfs_fh3 is at most 64).
        (proc_::GETATTR, {
            let mut w = Writer::new();
            w.put_opaque(&[7u8; 65]);
            w.into_bytes().to_vec()
        }),
        // LOOKUP whose name length runs past the end of the record.
        (proc_::LOOKUP, {
            let mut w = Writer::new();
            NfsFh3(root.0.clone()).pack(&mut w);
            w.put_u32(1000);
            w.put_raw(b"abcd");
            w.into_bytes().to_vec()
        }),
        // CREATE with an undefined createmode3.
        (proc_::CREATE, {
            let mut w = Writer::new();
            DirOpArgs3 {
                dir: root.clone(),
                name: Bytes::from_static(b"x"),
            }
            .pack(&mut w);
            w.put_u32(9);
            w.into_bytes().to_vec()
        }),
        // Plain noise.
        (proc_::WRITE, b"\xff\xff\xff\xff\x00\x01".to_vec()),
    ];
    for (p, args) in bad_args {
        let r = c.call(NFS, 3, p, &args).await;
        assert_eq!(
            r.body,
            ReplyBody::accepted(AcceptStat::GARBAGE_ARGS),
            "{} with {args:02x?}",
            proc_::NAMES[p as usize]
        );
        // The very next call on the same connection is answered normally.
        ok(getattr(&mut c, &root).await);
    }
    let r = c
        .call(mount3::PROGRAM, 3, mount3::proc_::MNT, &[0, 0, 0, 9])
        .await;
    assert_eq!(r.body, ReplyBody::accepted(AcceptStat::GARBAGE_ARGS));
    ok(getattr(&mut c, &root).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_in_many_fragments_is_accepted() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let xid = c.next_xid();
    let msg = call_message(
        xid,
        NFS,
        3,
        proc_::GETATTR,
        &c.cred,
        &sluice_xdr::to_bytes(&GetattrArgs {
            object: root.clone(),
        }),
    );
    // 7-byte fragments (headers split across words), sent in pieces with pauses so the server
    // also sees the record arrive across many socket reads.
    let framed = record::frame(vec![Bytes::from(msg)], 7);
    assert!(framed.len() > 20, "the record is cut into many fragments");
    let wire: Vec<u8> = framed.iter().flat_map(|b| b.iter().copied()).collect();
    for piece in wire.chunks(5) {
        c.stream.write_all(piece).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let r = c.recv().await.expect("a reply");
    assert_eq!(r.xid, xid);
    assert_eq!(r.body, ReplyBody::success());
    let res = GetattrRes::unpack(&mut Reader::from_bytes(&r.results)).unwrap();
    assert_eq!(ok(res).obj_attributes.ftype, Ftype3::DIR);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_over_the_limit_closes_the_connection_and_the_server_keeps_serving() {
    let mut cfg = rw();
    cfg.net.record_bytes_max = 256 * 1024;
    let s = TestServer::start(cfg).await;
    let mut c = s.connect().await;
    assert_eq!(c.call(NFS, 3, 0, &[]).await.body, ReplyBody::success());
    // A header announcing a 1 MiB last fragment: refused before any body byte arrives.
    c.stream
        .write_all(&record::record_header(1 << 20, true))
        .await
        .unwrap();
    let _ = c.stream.write_all(&[0u8; 4096]).await;
    assert!(c.recv().await.is_none(), "the server closes the connection");
    // Split over fragments, the record is refused as well.
    let mut c = s.connect().await;
    let mut oversize = Vec::new();
    for _ in 0..5 {
        oversize.extend_from_slice(&record::record_header(64 * 1024, false));
        oversize.extend_from_slice(&[0u8; 64 * 1024]);
    }
    let _ = c.stream.write_all(&oversize).await;
    assert!(c.recv().await.is_none(), "closed after the fifth fragment");
    // New connections are served.
    let mut c = s.connect().await;
    assert_eq!(c.call(NFS, 3, 0, &[]).await.body, ReplyBody::success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_credential_flavor_is_auth_error() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let cases = [
        // AUTH_DH: not supported.
        (
            OpaqueAuth {
                flavor: AuthFlavor::DH,
                body: Bytes::from_static(&[0; 8]),
            },
            AuthStat::BADCRED,
        ),
        // An undefined flavor.
        (
            OpaqueAuth {
                flavor: AuthFlavor(0x1234),
                body: Bytes::new(),
            },
            AuthStat::BADCRED,
        ),
        // AUTH_SYS whose body does not decode.
        (
            OpaqueAuth {
                flavor: AuthFlavor::SYS,
                body: Bytes::from_static(&[0, 0, 0, 1]),
            },
            AuthStat::BADCRED,
        ),
    ];
    for (cred, want) in cases {
        c.cred = cred.clone();
        let r = c.call(NFS, 3, proc_::NULL, &[]).await;
        assert_eq!(r.body, ReplyBody::AuthError(want), "credential {cred:?}");
    }
    c.cred = auth_sys(0, 0);
    assert_eq!(c.call(NFS, 3, 0, &[]).await.body, ReplyBody::success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_message_sent_to_the_server_is_ignored() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let mut w = Writer::new();
    MsgHeader::Reply {
        xid: 0xdead_beef,
        body: ReplyBody::success(),
    }
    .pack(&mut w);
    c.send_message(&w.into_bytes()).await;
    // Too short to hold even an xid.
    c.send_message(&[1, 2]).await;
    // Nothing comes back for either; the next call gets the next reply.
    let r = c.call(NFS, 3, proc_::NULL, &[]).await;
    assert_eq!(r.body, ReplyBody::success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retransmitted_remove_is_answered_from_the_reply_cache() {
    let s = TestServer::start(rw()).await;
    std::fs::write(s.export.join("gone"), b"").unwrap();
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let xid = c.next_xid();
    let msg = call_message(
        xid,
        NFS,
        3,
        proc_::REMOVE,
        &c.cred,
        &sluice_xdr::to_bytes(&RemoveArgs {
            object: dirop(&root, "gone"),
        }),
    );
    c.send_message(&msg).await;
    let first = c.recv().await.expect("a reply");
    let res = RemoveRes::unpack(&mut Reader::from_bytes(&first.results)).unwrap();
    ok(res);
    assert!(!s.export.join("gone").exists());
    // The client lost the reply, reconnected and resent the same call (same xid): it must
    // see the original success, not NFS3ERR_NOENT from running the REMOVE again.
    let mut again = s.connect().await;
    again.send_message(&msg).await;
    let second = again.recv().await.expect("a reply");
    assert_eq!(second.xid, xid);
    assert_eq!(second.body, first.body);
    assert_eq!(
        second.results, first.results,
        "the cached reply, byte for byte"
    );
    // A new call (new xid) with the same arguments is executed.
    assert_eq!(
        remove(&mut c, &root, "gone").await.status(),
        Nfsstat3::NOENT
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_are_closed_and_idle_ones_time_out() {
    let mut cfg = rw();
    cfg.net.connections_max = 2;
    cfg.net.idle_timeout = Duration::from_secs(2);
    let s = TestServer::start(cfg).await;
    let mut a = s.connect().await;
    let mut b = s.connect().await;
    assert_eq!(a.call(NFS, 3, 0, &[]).await.body, ReplyBody::success());
    assert_eq!(b.call(NFS, 3, 0, &[]).await.body, ReplyBody::success());
    let mut third = s.connect().await;
    third
        .send_message(&call_message(1, NFS, 3, 0, &auth_sys(0, 0), &[]))
        .await;
    assert!(
        third.recv().await.is_none(),
        "a third connection is closed at once"
    );
    // Once one closes, a new connection is served (the slot is freed when the server notices).
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = s.connect().await;
        c.send_message(&call_message(2, NFS, 3, 0, &auth_sys(0, 0), &[]))
            .await;
        if c.recv().await.is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "the freed slot was never reused");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // b has been idle: it is closed after about the idle timeout.
    let idle_since = Instant::now();
    assert!(b.recv().await.is_none(), "an idle connection is closed");
    assert!(idle_since.elapsed() < Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nfs_and_mount_also_answer_over_udp() {
    let mut cfg = rw();
    cfg.udp = true;
    let s = TestServer::start(cfg).await;
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(s.addr).await.unwrap();
    let exchange = |msg: Vec<u8>| {
        let sock = &sock;
        async move {
            sock.send(&msg).await.unwrap();
            let mut buf = vec![0u8; 65536];
            let n = tokio::time::timeout(REPLY_TIMEOUT, sock.recv(&mut buf))
                .await
                .expect("a UDP reply in time")
                .unwrap();
            parse_reply(&[Bytes::copy_from_slice(&buf[..n])])
        }
    };
    let cred = auth_sys(0, 0);
    let path = s.export.to_str().unwrap().as_bytes().to_vec();
    let r = exchange(call_message(
        11,
        mount3::PROGRAM,
        3,
        mount3::proc_::MNT,
        &cred,
        &sluice_xdr::to_bytes(&mount3::Args::Mnt(DirPath(Bytes::from(path)))),
    ))
    .await;
    assert_eq!((r.xid, &r.body), (11, &ReplyBody::success()));
    let MntRes::Ok(m) = MntRes::unpack(&mut Reader::from_bytes(&r.results)).unwrap() else {
        panic!("MNT over UDP")
    };
    let r = exchange(call_message(
        12,
        NFS,
        3,
        proc_::GETATTR,
        &cred,
        &sluice_xdr::to_bytes(&GetattrArgs { object: m.fhandle }),
    ))
    .await;
    assert_eq!(r.xid, 12);
    let res = GetattrRes::unpack(&mut Reader::from_bytes(&r.results)).unwrap();
    assert_eq!(ok(res).obj_attributes.ftype, Ftype3::DIR);
    // PORTMAP over TCP now lists the UDP mappings too.
    let mut c = s.connect().await;
    let r = c
        .portmap(portmap::Args::Getport(Mapping {
            prog: NFS,
            vers: 3,
            prot: portmap::IPPROTO_UDP,
            port: 0,
        }))
        .await;
    assert_eq!(r, portmap::Res::Getport(u32::from(s.addr.port())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_calls_in_flight_on_one_connection_are_matched_by_xid() {
    const FILES: usize = 300;
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    for i in 0..FILES {
        std::fs::write(s.export.join(format!("f{i}")), vec![b'a'; i * 10]).unwrap();
    }
    // Look up 300 files of 300 different sizes, all sent before any reply is read: more than
    // the server runs at once on one connection (`calls_in_flight_max`, 128).
    let mut sent: HashMap<u32, usize> = HashMap::new();
    let mut batch = Vec::new();
    for i in 0..FILES {
        let xid = c.next_xid();
        let args = sluice_xdr::to_bytes(&LookupArgs {
            what: DirOpArgs3 {
                dir: root.clone(),
                name: Bytes::from(format!("f{i}")),
            },
        });
        batch.extend(frame_one(&call_message(
            xid,
            NFS,
            3,
            proc_::LOOKUP,
            &c.cred,
            &args,
        )));
        sent.insert(xid, i);
    }
    c.stream.write_all(&batch).await.unwrap();
    let mut seen = HashSet::new();
    for _ in 0..FILES {
        let r = c.recv().await.expect("a reply");
        let i = *sent
            .get(&r.xid)
            .unwrap_or_else(|| panic!("reply with unknown xid {}", r.xid));
        assert!(seen.insert(r.xid), "xid {} answered twice", r.xid);
        let res = LookupRes::unpack(&mut Reader::from_bytes(&r.results)).unwrap();
        let attr = ok(res).obj_attributes.expect("attributes");
        assert_eq!(attr.size, i as u64 * 10, "reply {} belongs to f{i}", r.xid);
    }
    assert_eq!(seen.len(), FILES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_commit_does_not_hold_up_getattrs_behind_it() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let fh = create(&mut c, &root, "big").await;
    // 64 MiB of dirty page cache behind the handle: COMMIT must fsync all of it.
    write_dirty(&s.export.join("big"), 64 << 20);
    let commit_xid = c.next_xid();
    let mut batch = frame_one(&call_message(
        commit_xid,
        NFS,
        3,
        proc_::COMMIT,
        &c.cred,
        &sluice_xdr::to_bytes(&CommitArgs {
            file: fh.clone(),
            offset: 0,
            count: 0,
        }),
    ));
    let mut getattrs = HashSet::new();
    for _ in 0..30 {
        let xid = c.next_xid();
        getattrs.insert(xid);
        batch.extend(frame_one(&call_message(
            xid,
            NFS,
            3,
            proc_::GETATTR,
            &c.cred,
            &sluice_xdr::to_bytes(&GetattrArgs {
                object: root.clone(),
            }),
        )));
    }
    c.stream.write_all(&batch).await.unwrap();
    let mut order = Vec::new();
    for _ in 0..31 {
        let r = c.recv().await.expect("a reply");
        assert_eq!(r.body, ReplyBody::success());
        order.push(r.xid);
    }
    let commit_pos = order.iter().position(|&x| x == commit_xid).unwrap();
    assert!(
        commit_pos > 0,
        "the COMMIT sent first was answered before every GETATTR queued behind it: {order:?}"
    );
    assert_eq!(
        order.iter().filter(|x| getattrs.contains(x)).count(),
        30,
        "every GETATTR answered once"
    );
}
