//! Issue #2 on the wire: the server spoken to byte by byte, as a client nobody here wrote would.
//!
//! Each test starts its own in-process server (`sluice_server::bind` on 127.0.0.1:0, then
//! `run` on the test's tokio runtime) over its own temporary export and state directory, and
//! talks to it with [`Rpc`], a deliberately small ONC RPC client built from the codecs
//! (`sluice_xdr`) and record marking (`sluice_rpc::record`) only: no call table, no retries, so
//! what the server sends is exactly what the test sees.
//!
//! ```text
//!   test ── Rpc (XDR call, record mark) ──TCP 127.0.0.1──► net ─► service ─► nfs/mountd/portmap
//!        ◄─ reply decoded header + results ◄──────────────┘
//! ```
//! Groups: RPC layer; concurrency on one connection; PORTMAP and MOUNT; all 22 NFSv3
//! procedures; READDIR(PLUS) of 100 000 entries; names; handles; identity and export options;
//! several exports; the open-file cache. Every wait is bounded ([`REPLY_TIMEOUT`]). The server
//! fixture, the client and the typed calls are in `support/` (shared with `hostile.rs`,
//! `backend_errors.rs` and the engine tests).

#[macro_use]
mod support;

use bytes::Bytes;
use sluice_rpc::record::{self};
use sluice_server::backend::exports::{parse_exports, ClientMatch, Squash};
use sluice_server::ServerConfig;
use sluice_xdr::mount3::{self, DirPath, MntRes, Mountstat3};
use sluice_xdr::nfs3::*;
use sluice_xdr::portmap::{self, Mapping, IPPROTO_TCP};
use sluice_xdr::rpc::{AcceptStat, AuthFlavor, AuthStat, MsgHeader, OpaqueAuth, ReplyBody};
use sluice_xdr::{Pack, Payload, Reader, Unpack, Writer};
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::*;
use tokio::io::AsyncWriteExt;

// =============================================================================================
// RPC layer (RFC 5531)
// =============================================================================================

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
    let r = c.call(100_021, 4, 0, &[]).await; // NLM: not served
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

// =============================================================================================
// Concurrency on one connection
// =============================================================================================

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

// =============================================================================================
// PORTMAP and MOUNT
// =============================================================================================

/// Each PORTMAP procedure has its own handler: SET and UNSET are refused (`false`), CALLIT's
/// arguments are decoded (GARBAGE_ARGS when they do not) and then it is PROC_UNAVAIL, and
/// MNT's path must decode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portmap_refuses_set_and_unset_and_does_not_carry_out_callit() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let m = Mapping {
        prog: 400_000,
        vers: 1,
        prot: IPPROTO_TCP,
        port: 4000,
    };
    assert_eq!(
        c.portmap(portmap::Args::Set(m)).await,
        portmap::Res::Set(false)
    );
    assert_eq!(
        c.portmap(portmap::Args::Unset(m)).await,
        portmap::Res::Unset(false)
    );
    let callit = portmap::Args::Callit(portmap::CallArgs {
        prog: NFS,
        vers: 3,
        proc_: 0,
        args: Bytes::new(),
    });
    let r = c
        .call(
            portmap::PROGRAM,
            2,
            portmap::proc_::CALLIT,
            &sluice_xdr::to_bytes(&callit),
        )
        .await;
    assert_eq!(r.body, ReplyBody::accepted(AcceptStat::PROC_UNAVAIL));
    let r = c
        .call(portmap::PROGRAM, 2, portmap::proc_::CALLIT, &[0, 0, 0, 1])
        .await;
    assert_eq!(r.body, ReplyBody::accepted(AcceptStat::GARBAGE_ARGS));
    let r = c
        .call(portmap::PROGRAM, 2, portmap::proc_::GETPORT, &[0; 12])
        .await;
    assert_eq!(r.body, ReplyBody::accepted(AcceptStat::GARBAGE_ARGS));
    let r = c
        .call(mount3::PROGRAM, 3, mount3::proc_::UMNT, &[0, 0, 0, 4])
        .await;
    assert_eq!(r.body, ReplyBody::accepted(AcceptStat::GARBAGE_ARGS));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portmap_getport_and_dump_name_the_one_port() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let port = u32::from(s.addr.port());
    for (prog, vers) in [(NFS, 3), (NFS, 4), (mount3::PROGRAM, 3)] {
        let r = c
            .portmap(portmap::Args::Getport(Mapping {
                prog,
                vers,
                prot: IPPROTO_TCP,
                port: 0,
            }))
            .await;
        assert_eq!(r, portmap::Res::Getport(port), "GETPORT {prog} v{vers} tcp");
    }
    // Not served: NFS v2, NLM.
    for (prog, vers) in [(NFS, 2), (100_021, 4)] {
        let r = c
            .portmap(portmap::Args::Getport(Mapping {
                prog,
                vers,
                prot: IPPROTO_TCP,
                port: 0,
            }))
            .await;
        assert_eq!(r, portmap::Res::Getport(0));
    }
    let portmap::Res::Dump(list) = c.portmap(portmap::Args::Dump).await else {
        panic!("DUMP reply")
    };
    for (prog, vers) in [(NFS, 3), (NFS, 4), (mount3::PROGRAM, 3)] {
        assert!(
            list.0.contains(&Mapping {
                prog,
                vers,
                prot: IPPROTO_TCP,
                port
            }),
            "{prog} v{vers} in {list:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mount_export_subdirectory_unknown_path_export_list_dump_and_umnt() {
    let s = TestServer::start(rw()).await;
    std::fs::create_dir_all(s.export.join("sub/deeper")).unwrap();
    std::fs::write(s.export.join("plain"), b"x").unwrap();
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let root_attr = ok(getattr(&mut c, &root).await).obj_attributes;
    assert_eq!(root_attr.ftype, Ftype3::DIR);

    let sub_path = format!("{}/sub/deeper", s.export.display());
    let MntRes::Ok(sub) = c.mnt(&sub_path).await else {
        panic!("MNT of a subdirectory")
    };
    assert!(sub.auth_flavors.contains(&AuthFlavor::SYS.0));
    let sub_attr = ok(getattr(&mut c, &sub.fhandle).await).obj_attributes;
    assert_eq!(
        sub_attr.fileid,
        std::fs::metadata(s.export.join("sub/deeper"))
            .unwrap()
            .ino()
    );

    assert_eq!(c.mnt("/").await.status(), Mountstat3::NOENT);
    assert_eq!(c.mnt("/etc").await.status(), Mountstat3::NOENT);
    let sibling = format!("{}-not-exported", s.export.display());
    assert_eq!(c.mnt(&sibling).await.status(), Mountstat3::NOENT);
    let missing = format!("{}/missing", s.export.display());
    assert_eq!(c.mnt(&missing).await.status(), Mountstat3::NOENT);
    let file = format!("{}/plain", s.export.display());
    assert_eq!(c.mnt(&file).await.status(), Mountstat3::NOTDIR);
    // `..` cannot climb out of the export.
    let escape = format!("{}/../..", s.export.display());
    assert_ne!(c.mnt(&escape).await.status(), Mountstat3::OK);

    let mount3::Res::Export(ex) = c.mount(mount3::Args::Export).await else {
        panic!("EXPORT reply")
    };
    assert_eq!(ex.0.len(), 1);
    assert_eq!(
        ex.0[0].dir.0.as_ref(),
        s.export.as_os_str().as_encoded_bytes()
    );

    let dump = |res: mount3::Res| match res {
        mount3::Res::Dump(l) => {
            l.0.into_iter()
                .map(|b| String::from_utf8(b.directory.0.to_vec()).unwrap())
                .collect::<Vec<_>>()
        }
        other => panic!("DUMP reply: {other:?}"),
    };
    let listed = dump(c.mount(mount3::Args::Dump).await);
    let export_s = s.export.display().to_string();
    assert!(listed.contains(&export_s), "{listed:?}");
    assert!(listed.contains(&sub_path), "{listed:?}");
    let r = c
        .mount(mount3::Args::Umnt(DirPath(Bytes::from(sub_path.clone()))))
        .await;
    assert_eq!(r, mount3::Res::Umnt);
    let listed = dump(c.mount(mount3::Args::Dump).await);
    assert!(!listed.contains(&sub_path), "{listed:?}");
    assert!(listed.contains(&export_s), "{listed:?}");
    assert_eq!(c.mount(mount3::Args::Umntall).await, mount3::Res::Umntall);
    assert!(dump(c.mount(mount3::Args::Dump).await).is_empty());
    assert_eq!(c.mount(mount3::Args::Null).await, mount3::Res::Null);
}

// =============================================================================================
// The 22 NFSv3 procedures
// =============================================================================================

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_22_procedures_answer_with_correct_status_and_attributes() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;

    // 0 NULL
    assert!(matches!(c.nfs(Args3::Null(())).await, Res3::Null(())));
    // 1 GETATTR
    let rattr = ok(getattr(&mut c, &root).await).obj_attributes;
    let md = std::fs::metadata(&s.export).unwrap();
    assert_eq!(rattr.ftype, Ftype3::DIR);
    assert_eq!(rattr.fileid, md.ino());
    assert_eq!(rattr.mode, md.mode() & 0o7777);
    assert_eq!((rattr.uid, rattr.gid), (md.uid(), md.gid()));
    // 8 CREATE (UNCHECKED with a mode)
    let r = op!(
        c,
        Create,
        CreateArgs {
            where_: dirop(&root, "file"),
            how: CreateHow::Unchecked(Sattr3 {
                mode: Some(0o640),
                ..Default::default()
            }),
        }
    );
    let created = ok(r);
    let fh = created.obj.clone().expect("CREATE returns the handle");
    let fattr = created.obj_attributes.expect("CREATE returns attributes");
    assert_eq!(
        (fattr.ftype, fattr.mode, fattr.size),
        (Ftype3::REG, 0o640, 0)
    );
    assert!(created.dir_wcc.after.is_some(), "directory wcc after");
    // 3 LOOKUP finds the same object.
    let l = ok(lookup(&mut c, &root, "file").await);
    assert_eq!(l.obj_attributes.unwrap().fileid, fattr.fileid);
    assert_eq!(l.dir_attributes.unwrap().fileid, rattr.fileid);
    assert_eq!(
        lookup(&mut c, &root, "nope").await.status(),
        Nfsstat3::NOENT
    );
    // 7 WRITE, each stability; the verifier is the same for every call of this server run.
    let mut verfs = HashSet::new();
    for (i, stable) in [
        StableHow::UNSTABLE,
        StableHow::DATA_SYNC,
        StableHow::FILE_SYNC,
    ]
    .into_iter()
    .enumerate()
    {
        let w = ok(write(&mut c, &fh, i as u64 * 5, b"hello", stable).await);
        assert_eq!(w.count, 5);
        assert!(
            w.committed.0 >= stable.0,
            "committed {:?} < asked {stable:?}",
            w.committed
        );
        assert_eq!(w.file_wcc.after.unwrap().size, (i as u64 + 1) * 5);
        verfs.insert(w.verf);
    }
    assert_eq!(verfs.len(), 1, "one write verifier per server run");
    // 6 READ
    let rd = ok(read(&mut c, &fh, 0, 100).await);
    assert_eq!(rd.data.to_vec(), b"hellohellohello");
    assert_eq!(rd.count, 15);
    assert!(rd.eof);
    let rd = ok(read(&mut c, &fh, 5, 5).await);
    assert_eq!(
        (rd.data.to_vec().as_slice(), rd.eof),
        (&b"hello"[..], false)
    );
    assert_eq!(
        std::fs::read(s.export.join("file")).unwrap(),
        b"hellohellohello"
    );
    // 21 COMMIT: the same verifier.
    let cm = ok(op!(
        c,
        Commit,
        CommitArgs {
            file: fh.clone(),
            offset: 0,
            count: 0
        }
    ));
    assert!(verfs.contains(&cm.verf));
    assert_eq!(cm.file_wcc.after.unwrap().size, 15);
    // 2 SETATTR: size and mode, then a guard that does not match.
    let before = ok(getattr(&mut c, &fh).await).obj_attributes;
    let r = ok(op!(
        c,
        Setattr,
        SetattrArgs {
            object: fh.clone(),
            new_attributes: Sattr3 {
                mode: Some(0o600),
                size: Some(3),
                ..Default::default()
            },
            guard: Some(before.ctime),
        }
    ));
    let after = r.obj_wcc.after.unwrap();
    assert_eq!((after.mode, after.size), (0o600, 3));
    let stale_guard = Nfstime3 {
        seconds: before.ctime.seconds.wrapping_sub(1000),
        nseconds: 0,
    };
    let r = op!(
        c,
        Setattr,
        SetattrArgs {
            object: fh.clone(),
            new_attributes: Sattr3 {
                mode: Some(0o644),
                ..Default::default()
            },
            guard: Some(stale_guard),
        }
    );
    assert_eq!(r.status(), Nfsstat3::NOT_SYNC);
    assert_eq!(
        std::fs::metadata(s.export.join("file")).unwrap().mode() & 0o7777,
        0o600,
        "a guarded SETATTR that failed changed nothing"
    );
    // 4 ACCESS as the owner (root, not squashed here).
    let a = ok(op!(
        c,
        Access,
        AccessArgs {
            object: fh.clone(),
            access: ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_EXECUTE,
        }
    ));
    assert_eq!(
        a.access & (ACCESS3_READ | ACCESS3_MODIFY),
        ACCESS3_READ | ACCESS3_MODIFY
    );
    assert_eq!(a.access & ACCESS3_EXECUTE, 0, "0600 file is not executable");
    // 9 MKDIR
    let d = ok(op!(
        c,
        Mkdir,
        MkdirArgs {
            where_: dirop(&root, "dir"),
            attributes: Sattr3 {
                mode: Some(0o750),
                ..Default::default()
            },
        }
    ));
    let dfh = d.obj.unwrap();
    assert_eq!(d.obj_attributes.unwrap().ftype, Ftype3::DIR);
    assert_eq!(d.obj_attributes.unwrap().mode, 0o750);
    assert!(s.export.join("dir").is_dir());
    // 10 SYMLINK and 5 READLINK
    let sl = ok(op!(
        c,
        Symlink,
        SymlinkArgs {
            where_: dirop(&dfh, "link"),
            symlink_attributes: Sattr3::default(),
            symlink_data: Bytes::from_static(b"../file"),
        }
    ));
    let slfh = sl.obj.unwrap();
    assert_eq!(sl.obj_attributes.unwrap().ftype, Ftype3::LNK);
    let rl = ok(op!(
        c,
        Readlink,
        ReadlinkArgs {
            symlink: slfh.clone()
        }
    ));
    assert_eq!(rl.data.as_ref(), b"../file");
    assert_eq!(
        std::fs::read_link(s.export.join("dir/link")).unwrap(),
        PathBuf::from("../file")
    );
    // 11 MKNOD: a FIFO works; REG is not MKNOD's business.
    let fifo = ok(op!(
        c,
        Mknod,
        MknodArgs {
            where_: dirop(&root, "fifo"),
            what: MknodData::Fifo(Sattr3 {
                mode: Some(0o600),
                ..Default::default()
            }),
        }
    ));
    assert_eq!(fifo.obj_attributes.unwrap().ftype, Ftype3::FIFO);
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(s.export.join("fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
    let r = op!(
        c,
        Mknod,
        MknodArgs {
            where_: dirop(&root, "reg"),
            what: MknodData::Reg,
        }
    );
    assert_eq!(r.status(), Nfsstat3::BADTYPE);
    // 15 LINK
    let ln = ok(op!(
        c,
        Link,
        LinkArgs {
            file: fh.clone(),
            link: dirop(&dfh, "hard"),
        }
    ));
    assert_eq!(ln.file_attributes.unwrap().nlink, 2);
    assert_eq!(
        std::fs::metadata(s.export.join("dir/hard")).unwrap().ino(),
        fattr.fileid
    );
    // 14 RENAME within and across directories.
    ok(op!(
        c,
        Rename,
        RenameArgs {
            from: dirop(&dfh, "hard"),
            to: dirop(&root, "hard2"),
        }
    ));
    assert!(!s.export.join("dir/hard").exists());
    assert_eq!(
        std::fs::metadata(s.export.join("hard2")).unwrap().ino(),
        fattr.fileid
    );
    // 16 READDIR and 17 READDIRPLUS list what was made.
    let names = readdir_all(&mut c, &root, 4096).await;
    let want: HashSet<Vec<u8>> = [".", "..", "file", "dir", "fifo", "hard2"]
        .iter()
        .map(|n| n.as_bytes().to_vec())
        .collect();
    assert_eq!(names.keys().cloned().collect::<HashSet<_>>(), want);
    assert_eq!(names[&b"file".to_vec()], fattr.fileid);
    let plus = readdirplus_all(&mut c, &root, 4096).await;
    assert_eq!(plus.keys().cloned().collect::<HashSet<_>>(), want);
    let (attr, handle) = &plus[&b"dir".to_vec()];
    assert_eq!(attr.unwrap().ftype, Ftype3::DIR);
    assert_eq!(
        ok(getattr(&mut c, handle.as_ref().unwrap()).await)
            .obj_attributes
            .fileid,
        d.obj_attributes.unwrap().fileid
    );
    // 18 FSSTAT, 19 FSINFO, 20 PATHCONF
    let fs = ok(op!(
        c,
        Fsstat,
        FsstatArgs {
            fsroot: root.clone()
        }
    ));
    assert!(fs.tbytes > 0 && fs.fbytes <= fs.tbytes && fs.abytes <= fs.fbytes);
    assert!(fs.tfiles > 0 && fs.ffiles <= fs.tfiles);
    let fi = ok(op!(
        c,
        Fsinfo,
        FsinfoArgs {
            fsroot: root.clone()
        }
    ));
    assert_eq!(fi.rtmax, 1 << 20, "rtmax defaults to 1 MiB");
    assert_eq!(fi.wtmax, 1 << 20, "wtmax defaults to 1 MiB");
    assert!(fi.rtpref <= fi.rtmax && fi.wtpref <= fi.wtmax && fi.dtpref > 0);
    assert!(fi.maxfilesize >= 1 << 40);
    assert_ne!(fi.properties & FSF3_LINK, 0);
    assert_ne!(fi.properties & FSF3_SYMLINK, 0);
    let pc = ok(op!(
        c,
        Pathconf,
        PathconfArgs {
            object: root.clone()
        }
    ));
    assert_eq!(pc.name_max, 255);
    assert!(pc.no_trunc && pc.linkmax >= 1);
    // 12 REMOVE and 13 RMDIR
    assert_eq!(remove(&mut c, &dfh, "link").await.status(), Nfsstat3::OK);
    let r = op!(
        c,
        Rmdir,
        RmdirArgs {
            object: dirop(&root, "file")
        }
    );
    assert_eq!(r.status(), Nfsstat3::NOTDIR);
    std::fs::write(s.export.join("dir/occupant"), b"").unwrap();
    let r = op!(
        c,
        Rmdir,
        RmdirArgs {
            object: dirop(&root, "dir")
        }
    );
    assert_eq!(r.status(), Nfsstat3::NOTEMPTY);
    std::fs::remove_file(s.export.join("dir/occupant")).unwrap();
    let r = ok(op!(
        c,
        Rmdir,
        RmdirArgs {
            object: dirop(&root, "dir")
        }
    ));
    assert!(r.dir_wcc.after.is_some());
    assert!(!s.export.join("dir").exists());
    assert_eq!(remove(&mut c, &root, "dir").await.status(), Nfsstat3::NOENT);
    ok(remove(&mut c, &root, "file").await);
    assert!(!s.export.join("file").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misuse_of_procedures_gets_the_statuses_a_linux_server_gives() {
    let s = TestServer::start(rw()).await;
    std::fs::create_dir_all(s.export.join("d/sub")).unwrap();
    std::fs::create_dir_all(s.export.join("e/x")).unwrap();
    std::fs::write(s.export.join("f"), b"abc").unwrap();
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let f = ok(lookup(&mut c, &root, "f").await).object;
    let d = ok(lookup(&mut c, &root, "d").await).object;
    let sub = ok(lookup(&mut c, &d, "sub").await).object;
    let rename = |from: DirOpArgs3, to: DirOpArgs3| RenameArgs { from, to };
    let checks: Vec<(&str, Nfsstat3, Nfsstat3)> = vec![
        (
            "LOOKUP in a file",
            lookup(&mut c, &f, "x").await.status(),
            Nfsstat3::NOTDIR,
        ),
        (
            "READ of a directory",
            read(&mut c, &d, 0, 10).await.status(),
            Nfsstat3::ISDIR,
        ),
        (
            "WRITE to a directory",
            write(&mut c, &d, 0, b"x", StableHow::FILE_SYNC)
                .await
                .status(),
            Nfsstat3::ISDIR,
        ),
        (
            "REMOVE of a directory",
            remove(&mut c, &root, "d").await.status(),
            Nfsstat3::ISDIR,
        ),
        (
            "RMDIR of '.'",
            op!(
                c,
                Rmdir,
                RmdirArgs {
                    object: dirop(&d, ".")
                }
            )
            .status(),
            Nfsstat3::ACCES,
        ),
        (
            "RENAME of a directory into itself",
            op!(c, Rename, rename(dirop(&root, "d"), dirop(&sub, "d2"))).status(),
            Nfsstat3::INVAL,
        ),
        (
            "RENAME over a non-empty directory",
            op!(c, Rename, rename(dirop(&root, "d"), dirop(&root, "e"))).status(),
            Nfsstat3::NOTEMPTY,
        ),
        (
            "RENAME of a file over a directory",
            op!(c, Rename, rename(dirop(&root, "f"), dirop(&root, "e"))).status(),
            Nfsstat3::ISDIR,
        ),
        (
            "RENAME of a missing name",
            op!(c, Rename, rename(dirop(&root, "nope"), dirop(&root, "n2"))).status(),
            Nfsstat3::NOENT,
        ),
        (
            "LINK to a directory",
            op!(
                c,
                Link,
                LinkArgs {
                    file: d.clone(),
                    link: dirop(&root, "dl")
                }
            )
            .status(),
            Nfsstat3::ISDIR,
        ),
        (
            "LINK over an existing name",
            op!(
                c,
                Link,
                LinkArgs {
                    file: f.clone(),
                    link: dirop(&root, "e")
                }
            )
            .status(),
            Nfsstat3::EXIST,
        ),
        (
            "READLINK of a file",
            op!(c, Readlink, ReadlinkArgs { symlink: f.clone() }).status(),
            Nfsstat3::INVAL,
        ),
        (
            "READDIR of a file",
            op!(
                c,
                Readdir,
                ReaddirArgs {
                    dir: f.clone(),
                    cookie: 0,
                    cookieverf: [0; 8],
                    count: 4096
                }
            )
            .status(),
            Nfsstat3::NOTDIR,
        ),
        (
            "MKDIR over an existing name",
            op!(
                c,
                Mkdir,
                MkdirArgs {
                    where_: dirop(&root, "d"),
                    attributes: Sattr3::default()
                }
            )
            .status(),
            Nfsstat3::EXIST,
        ),
        (
            "SYMLINK over an existing name",
            op!(
                c,
                Symlink,
                SymlinkArgs {
                    where_: dirop(&root, "f"),
                    symlink_attributes: Sattr3::default(),
                    symlink_data: Bytes::from_static(b"x"),
                }
            )
            .status(),
            Nfsstat3::EXIST,
        ),
        (
            "MKNOD of a directory",
            op!(
                c,
                Mknod,
                MknodArgs {
                    where_: dirop(&root, "md"),
                    what: MknodData::Dir
                }
            )
            .status(),
            Nfsstat3::BADTYPE,
        ),
        (
            "WRITE whose count exceeds its data",
            op!(
                c,
                Write,
                WriteArgs {
                    file: f.clone(),
                    offset: 0,
                    count: 10,
                    stable: StableHow::FILE_SYNC,
                    data: Payload::from(b"ab".to_vec()),
                }
            )
            .status(),
            Nfsstat3::INVAL,
        ),
        (
            "WRITE with an undefined stable_how",
            op!(
                c,
                Write,
                WriteArgs {
                    file: f.clone(),
                    offset: 0,
                    count: 2,
                    stable: StableHow(7),
                    data: Payload::from(b"ab".to_vec()),
                }
            )
            .status(),
            Nfsstat3::INVAL,
        ),
        (
            "WRITE past the largest file size",
            write(&mut c, &f, u64::MAX - 1, b"ab", StableHow::FILE_SYNC)
                .await
                .status(),
            Nfsstat3::FBIG,
        ),
        (
            "READDIR with a cookie and verifier this server never gave",
            op!(
                c,
                Readdir,
                ReaddirArgs {
                    dir: d.clone(),
                    cookie: 0x7777_7777_7777,
                    cookieverf: [1; 8],
                    count: 4096
                }
            )
            .status(),
            Nfsstat3::BAD_COOKIE,
        ),
    ];
    let wrong: Vec<String> = checks
        .iter()
        .filter(|(_, got, want)| got != want)
        .map(|(what, got, want)| format!("{what}: got {}, want {}", got.name(), want.name()))
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
    // Nothing changed on disk.
    assert_eq!(std::fs::read(s.export.join("f")).unwrap(), b"abc");
    assert!(s.export.join("d/sub").is_dir() && s.export.join("e/x").is_dir());
    // READ edge cases: past EOF is an empty eof reply; a zero count at 0 is not eof.
    let r = ok(read(&mut c, &f, 100, 10).await);
    assert_eq!((r.count, r.eof, r.data.len()), (0, true, 0));
    let r = ok(read(&mut c, &f, 0, 0).await);
    assert_eq!((r.count, r.eof), (0, false));
    // A READ larger than rtmax is cut to rtmax.
    std::fs::write(s.export.join("f"), vec![1u8; 3 << 20]).unwrap();
    let r = ok(read(&mut c, &f, 0, 2 << 20).await);
    assert_eq!((r.count, r.eof, r.data.len()), (1 << 20, false, 1 << 20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_unchecked_guarded_and_exclusive_follow_rfc_1813() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let sattr = Sattr3 {
        mode: Some(0o644),
        ..Default::default()
    };
    let create_how = |name: &str, how: CreateHow| CreateArgs {
        where_: dirop(&root, name),
        how,
    };
    // UNCHECKED over an existing file succeeds (and may truncate only if asked).
    std::fs::write(s.export.join("u"), b"keep").unwrap();
    ok(op!(c, Create, create_how("u", CreateHow::Unchecked(sattr))));
    assert_eq!(std::fs::read(s.export.join("u")).unwrap(), b"keep");
    // GUARDED: new, then EXIST.
    ok(op!(c, Create, create_how("g", CreateHow::Guarded(sattr))));
    let r = op!(c, Create, create_how("g", CreateHow::Guarded(sattr)));
    assert_eq!(r.status(), Nfsstat3::EXIST);
    // EXCLUSIVE: the same verifier retransmitted succeeds with the same object; another EXIST.
    let v1 = *b"verifier";
    let first = ok(op!(c, Create, create_how("x", CreateHow::Exclusive(v1))));
    let again = ok(op!(c, Create, create_how("x", CreateHow::Exclusive(v1))));
    let fileid = std::fs::metadata(s.export.join("x")).unwrap().ino();
    for r in [&first, &again] {
        if let Some(a) = r.obj_attributes {
            assert_eq!(a.fileid, fileid);
        }
        let fh = r.obj.clone().expect("EXCLUSIVE create returns a handle");
        assert_eq!(ok(getattr(&mut c, &fh).await).obj_attributes.fileid, fileid);
    }
    let r = op!(
        c,
        Create,
        create_how("x", CreateHow::Exclusive(*b"another!"))
    );
    assert_eq!(r.status(), Nfsstat3::EXIST);
    // EXCLUSIVE over a file that was not created exclusively is EXIST too.
    let r = op!(c, Create, create_how("u", CreateHow::Exclusive(v1)));
    assert_eq!(r.status(), Nfsstat3::EXIST);
    // The client then sets the attributes (RFC 1813 §3.3.8), and the file is ordinary.
    let fh = first.obj.unwrap();
    ok(op!(
        c,
        Setattr,
        SetattrArgs {
            object: fh.clone(),
            new_attributes: Sattr3 {
                mode: Some(0o600),
                atime: SetTime::ServerTime,
                mtime: SetTime::ServerTime,
                ..Default::default()
            },
            guard: None,
        }
    ));
    assert_eq!(
        std::fs::metadata(s.export.join("x")).unwrap().mode() & 0o7777,
        0o600
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_verifier_is_constant_within_a_run_and_changes_across_a_restart() {
    let dirs = TestDirs::new("wire");
    let mut s = TestServer::start_in(rw(), dirs).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let fh = create(&mut c, &root, "v").await;
    let mut first_run = HashSet::new();
    for i in 0..10u64 {
        let stable = [
            StableHow::UNSTABLE,
            StableHow::DATA_SYNC,
            StableHow::FILE_SYNC,
        ][(i % 3) as usize];
        first_run.insert(ok(write(&mut c, &fh, i, b"z", stable).await).verf);
    }
    first_run.insert(
        ok(op!(
            c,
            Commit,
            CommitArgs {
                file: fh.clone(),
                offset: 0,
                count: 0
            }
        ))
        .verf,
    );
    assert_eq!(first_run.len(), 1, "{first_run:?}");
    drop(c);
    s.restart().await;
    let mut c = s.connect().await;
    // The handle from before the restart still works (same state dir).
    let w = ok(write(&mut c, &fh, 0, b"y", StableHow::UNSTABLE).await);
    assert!(
        !first_run.contains(&w.verf),
        "a restarted server must change the write verifier so clients resend unstable data"
    );
    let cm = ok(op!(
        c,
        Commit,
        CommitArgs {
            file: fh.clone(),
            offset: 0,
            count: 0
        }
    ));
    assert_eq!(cm.verf, w.verf);
}

// =============================================================================================
// READDIR and READDIRPLUS of a large directory
// =============================================================================================

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdir_and_readdirplus_of_100000_entries_list_each_exactly_once() {
    const N: usize = 100_000;
    let s = TestServer::start(rw()).await;
    let big = s.export.join("big");
    std::fs::create_dir(&big).unwrap();
    for i in 0..N {
        std::fs::File::create(big.join(format!("e{i:06}"))).unwrap();
    }
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let dir = ok(lookup(&mut c, &root, "big").await).object;
    let check = |names: Vec<Vec<u8>>, what: &str| {
        let mut seen = HashSet::with_capacity(N + 2);
        for n in &names {
            assert!(
                seen.insert(n.clone()),
                "{what}: {} listed twice",
                String::from_utf8_lossy(n)
            );
        }
        assert_eq!(seen.len(), N + 2, "{what}: every entry plus . and ..");
        for i in (0..N).step_by(997) {
            assert!(
                seen.contains(format!("e{i:06}").as_bytes()),
                "{what}: e{i:06}"
            );
        }
    };
    for count in [4096u32, 1 << 20] {
        let (names, calls) = readdir_walk(&mut c, &dir, count, false).await;
        assert!(calls > 1, "READDIR count {count}: {calls} calls");
        check(names, &format!("READDIR count {count}"));
    }
    for count in [1u32 << 20, 4096] {
        let (names, calls) = readdir_walk(&mut c, &dir, count, true).await;
        assert!(calls > 1, "READDIRPLUS maxcount {count}: {calls} calls");
        check(names, &format!("READDIRPLUS maxcount {count}"));
    }
    // A count too small for even one entry.
    let r = op!(
        c,
        Readdir,
        ReaddirArgs {
            dir: dir.clone(),
            cookie: 0,
            cookieverf: [0; 8],
            count: 64,
        }
    );
    assert_eq!(r.status(), Nfsstat3::TOOSMALL);
    let r = op!(
        c,
        Readdirplus,
        ReaddirplusArgs {
            dir: dir.clone(),
            cookie: 0,
            cookieverf: [0; 8],
            dircount: 64,
            maxcount: 64,
        }
    );
    assert_eq!(r.status(), Nfsstat3::TOOSMALL);
}

/// Lists a directory to the end with READDIR or READDIRPLUS, sending back each reply's last
/// cookie and the verifier of the first reply, and checking the verifier stays the same and
/// every reply fits in `count`. Returns the names and the number of calls.
async fn readdir_walk(c: &mut Rpc, dir: &NfsFh3, count: u32, plus: bool) -> (Vec<Vec<u8>>, u32) {
    let mut names = Vec::new();
    let mut cookie = 0u64;
    let mut verf = [0u8; 8];
    let mut calls = 0;
    loop {
        calls += 1;
        assert!(calls < 100_000, "READDIR does not reach eof");
        let (entries, eof, v, reply_bytes) = if plus {
            let r = c
                .call(
                    NFS,
                    3,
                    proc_::READDIRPLUS,
                    &sluice_xdr::to_bytes(&ReaddirplusArgs {
                        dir: dir.clone(),
                        cookie,
                        cookieverf: verf,
                        dircount: count,
                        maxcount: count,
                    }),
                )
                .await;
            let len = r.results.len();
            let ok = ok(ReaddirplusRes::unpack(&mut Reader::from_bytes(&r.results)).unwrap());
            for e in &ok.entries {
                assert!(
                    e.name_attributes.is_some() && e.name_handle.is_some()
                        || e.name.starts_with(b".")
                );
            }
            let es: Vec<(Vec<u8>, u64)> = ok
                .entries
                .iter()
                .map(|e| (e.name.to_vec(), e.cookie))
                .collect();
            (es, ok.eof, ok.cookieverf, len)
        } else {
            let r = c
                .call(
                    NFS,
                    3,
                    proc_::READDIR,
                    &sluice_xdr::to_bytes(&ReaddirArgs {
                        dir: dir.clone(),
                        cookie,
                        cookieverf: verf,
                        count,
                    }),
                )
                .await;
            let len = r.results.len();
            let ok = ok(ReaddirRes::unpack(&mut Reader::from_bytes(&r.results)).unwrap());
            let es: Vec<(Vec<u8>, u64)> = ok
                .entries
                .iter()
                .map(|e| (e.name.to_vec(), e.cookie))
                .collect();
            (es, ok.eof, ok.cookieverf, len)
        };
        // The results (status word aside) must fit the client's count.
        assert!(
            reply_bytes - 4 <= count as usize,
            "reply of {reply_bytes} bytes for count {count}"
        );
        if calls == 1 {
            verf = v;
        } else {
            assert_eq!(
                v, verf,
                "cookieverf changed while listing an unchanged directory"
            );
        }
        assert!(eof || !entries.is_empty(), "no progress without eof");
        if let Some((_, last)) = entries.last() {
            cookie = *last;
        }
        names.extend(entries.into_iter().map(|(n, _)| n));
        if eof {
            return (names, calls);
        }
    }
}

// =============================================================================================
// Names
// =============================================================================================

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_are_refused_as_a_linux_server_would() {
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    std::fs::write(s.export.join("f"), b"").unwrap();
    let long = "n".repeat(256);
    let cases: [(&[u8], Nfsstat3); 5] = [
        (b"a/b", Nfsstat3::ACCES),
        (b"../escape", Nfsstat3::ACCES),
        (b"nul\0byte", Nfsstat3::ACCES),
        (b"", Nfsstat3::ACCES),
        (long.as_bytes(), Nfsstat3::NAMETOOLONG),
    ];
    for (name, want) in cases {
        let shown = String::from_utf8_lossy(&name[..name.len().min(20)]).into_owned();
        let args = CreateArgs {
            where_: DirOpArgs3 {
                dir: root.clone(),
                name: Bytes::copy_from_slice(name),
            },
            how: CreateHow::Unchecked(Sattr3::default()),
        };
        assert_eq!(op!(c, Create, args).status(), want, "CREATE {shown:?}");
        let args = MkdirArgs {
            where_: DirOpArgs3 {
                dir: root.clone(),
                name: Bytes::copy_from_slice(name),
            },
            attributes: Sattr3::default(),
        };
        assert_eq!(op!(c, Mkdir, args).status(), want, "MKDIR {shown:?}");
        let l = lookup_raw(&mut c, &root, name).await;
        assert!(
            l.status() == want || (l.status() == Nfsstat3::NOENT && name.is_empty()),
            "LOOKUP {shown:?}: {:?}",
            l.status()
        );
        let r = op!(
            c,
            Rename,
            RenameArgs {
                from: dirop(&root, "f"),
                to: DirOpArgs3 {
                    dir: root.clone(),
                    name: Bytes::copy_from_slice(name),
                },
            }
        );
        assert_eq!(r.status(), want, "RENAME to {shown:?}");
    }
    // A 255-byte name is fine.
    let max = "m".repeat(255);
    ok(op!(
        c,
        Create,
        CreateArgs {
            where_: dirop(&root, &max),
            how: CreateHow::Guarded(Sattr3::default()),
        }
    ));
    // "." and ".." always exist.
    for name in [".", ".."] {
        for how in [
            CreateHow::Guarded(Sattr3::default()),
            CreateHow::Exclusive(*b"12345678"),
        ] {
            let r = op!(
                c,
                Create,
                CreateArgs {
                    where_: dirop(&root, name),
                    how,
                }
            );
            assert_eq!(r.status(), Nfsstat3::EXIST, "CREATE {name:?}");
        }
        let r = op!(
            c,
            Mkdir,
            MkdirArgs {
                where_: dirop(&root, name),
                attributes: Sattr3::default(),
            }
        );
        assert_eq!(r.status(), Nfsstat3::EXIST, "MKDIR {name:?}");
    }
    // Nothing escaped the export.
    let mut on_disk: Vec<String> = std::fs::read_dir(&s.export)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    on_disk.sort();
    assert_eq!(on_disk, vec!["f".to_string(), max]);
    assert!(!s.export.parent().unwrap().join("escape").exists());
}

// =============================================================================================
// Handles
// =============================================================================================

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_survive_a_restart_with_the_same_state_dir() {
    let mut s = TestServer::start_in(rw(), TestDirs::new("wire")).await;
    std::fs::create_dir(s.export.join("d")).unwrap();
    std::fs::write(s.export.join("d/f"), b"persistent").unwrap();
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let d = ok(lookup(&mut c, &root, "d").await).object;
    let f = ok(lookup(&mut c, &d, "f").await).object;
    drop(c);
    s.restart().await;
    let mut c = s.connect().await;
    for (fh, ino) in [
        (&root, std::fs::metadata(&s.export).unwrap().ino()),
        (&d, std::fs::metadata(s.export.join("d")).unwrap().ino()),
        (&f, std::fs::metadata(s.export.join("d/f")).unwrap().ino()),
    ] {
        assert_eq!(ok(getattr(&mut c, fh).await).obj_attributes.fileid, ino);
    }
    assert_eq!(
        ok(read(&mut c, &f, 0, 100).await).data.to_vec(),
        b"persistent"
    );
    // The root handle MNT gives after the restart is the same bytes.
    assert_eq!(c.mnt_root(&s).await, root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_removed_and_foreign_handles_are_refused() {
    let s = TestServer::start(rw()).await;
    std::fs::write(s.export.join("f"), b"data").unwrap();
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let f = ok(lookup(&mut c, &root, "f").await).object;
    // Flip each byte in turn: never accepted.
    for i in 0..f.0.len() {
        let mut forged = f.0.to_vec();
        forged[i] ^= 0x5a;
        let st = getattr(&mut c, &NfsFh3(Bytes::from(forged))).await.status();
        assert!(
            st == Nfsstat3::BADHANDLE || st == Nfsstat3::STALE,
            "byte {i} flipped: {st:?}"
        );
    }
    // Truncated, empty and random handles.
    for bad in [
        f.0.slice(..f.0.len() - 1),
        Bytes::new(),
        Bytes::from_static(&[1u8; 64]),
    ] {
        let st = getattr(&mut c, &NfsFh3(bad.clone())).await.status();
        assert!(
            st == Nfsstat3::BADHANDLE || st == Nfsstat3::STALE,
            "{bad:02x?}: {st:?}"
        );
    }
    // A removed file's handle is stale.
    ok(remove(&mut c, &root, "f").await);
    assert_eq!(getattr(&mut c, &f).await.status(), Nfsstat3::STALE);
    assert_eq!(read(&mut c, &f, 0, 10).await.status(), Nfsstat3::STALE);
    // Removed behind the server's back, with a new file reusing the name.
    std::fs::write(s.export.join("g"), b"1").unwrap();
    let g = ok(lookup(&mut c, &root, "g").await).object;
    std::fs::remove_file(s.export.join("g")).unwrap();
    std::fs::write(s.export.join("g"), b"2").unwrap();
    assert_eq!(getattr(&mut c, &g).await.status(), Nfsstat3::STALE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dotdot_at_the_root_and_symlinks_out_stay_inside_the_export() {
    let s = TestServer::start(rw()).await;
    std::os::unix::fs::symlink("/etc", s.export.join("etc-link")).unwrap();
    std::fs::write(s.export.join("victim"), b"v").unwrap();
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let root_id = ok(getattr(&mut c, &root).await).obj_attributes.fileid;
    // ".." of the root is the root.
    let up = ok(lookup(&mut c, &root, "..").await);
    assert_eq!(up.obj_attributes.unwrap().fileid, root_id);
    let up2 = ok(lookup(&mut c, &up.object, "..").await);
    assert_eq!(up2.obj_attributes.unwrap().fileid, root_id);
    // READDIRPLUS of the root does not hand out the parent either.
    for (name, (attr, _)) in readdirplus_all(&mut c, &root, 8192).await {
        if name == b".." {
            if let Some(a) = attr {
                assert_eq!(a.fileid, root_id, "READDIRPLUS '..' of the root");
            }
        }
    }
    // The symlink is a symlink; the server never follows it.
    let l = ok(lookup(&mut c, &root, "etc-link").await);
    assert_eq!(l.obj_attributes.unwrap().ftype, Ftype3::LNK);
    let rl = ok(op!(
        c,
        Readlink,
        ReadlinkArgs {
            symlink: l.object.clone()
        }
    ));
    assert_eq!(rl.data.as_ref(), b"/etc");
    let through = lookup(&mut c, &l.object, "passwd").await.status();
    assert_ne!(through, Nfsstat3::OK, "LOOKUP through a symlink");
    let r = op!(
        c,
        Readdir,
        ReaddirArgs {
            dir: l.object.clone(),
            cookie: 0,
            cookieverf: [0; 8],
            count: 4096,
        }
    );
    assert_ne!(r.status(), Nfsstat3::OK, "READDIR of a symlink");
    let r = op!(
        c,
        Create,
        CreateArgs {
            where_: dirop(&l.object, "planted"),
            how: CreateHow::Unchecked(Sattr3::default()),
        }
    );
    assert_ne!(r.status(), Nfsstat3::OK, "CREATE through a symlink");
    assert!(!Path::new("/etc/planted").exists());
    // RENAME cannot move a file out: names are single components.
    let r = op!(
        c,
        Rename,
        RenameArgs {
            from: dirop(&root, "victim"),
            to: dirop(&root, "../victim"),
        }
    );
    assert_eq!(r.status(), Nfsstat3::ACCES);
    let r = op!(
        c,
        Rename,
        RenameArgs {
            from: dirop(&root, "victim"),
            to: dirop(&l.object, "victim"),
        }
    );
    assert_ne!(r.status(), Nfsstat3::OK, "RENAME into a symlink to /etc");
    assert!(s.export.join("victim").exists());
    assert!(!Path::new("/etc/victim").exists());
}

// =============================================================================================
// Identity and export options
// =============================================================================================

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_sys_uid_owns_what_it_creates_and_cannot_write_others_files() {
    let s = TestServer::start(with_options(|o| o.squash = Squash::Root)).await;
    std::fs::set_permissions(&s.export, std::fs::Permissions::from_mode(0o777)).unwrap();
    let theirs = s.export.join("theirs");
    std::fs::write(&theirs, b"owned by 1001").unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::chown(&theirs, Some(1001), Some(1001)).unwrap();
    let mut c = s.connect().await;
    c.cred = auth_sys(1000, 1000);
    let root = c.mnt_root(&s).await;
    let fh = create(&mut c, &root, "mine").await;
    let md = std::fs::metadata(s.export.join("mine")).unwrap();
    assert_eq!((md.uid(), md.gid()), (1000, 1000));
    ok(write(&mut c, &fh, 0, b"ok", StableHow::FILE_SYNC).await);
    let t = ok(lookup(&mut c, &root, "theirs").await).object;
    assert_eq!(
        write(&mut c, &t, 0, b"no", StableHow::FILE_SYNC)
            .await
            .status(),
        Nfsstat3::ACCES
    );
    assert_eq!(std::fs::read(&theirs).unwrap(), b"owned by 1001");
    // Reading is allowed (0644).
    assert_eq!(ok(read(&mut c, &t, 0, 5).await).data.to_vec(), b"owned");
    // Nor may 1000 chmod it.
    let r = op!(
        c,
        Setattr,
        SetattrArgs {
            object: t.clone(),
            new_attributes: Sattr3 {
                mode: Some(0o666),
                ..Default::default()
            },
            guard: None,
        }
    );
    assert_eq!(r.status(), Nfsstat3::PERM);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_squash_maps_uid_0_to_65534_and_no_root_squash_keeps_it() {
    for (squash, want) in [(Squash::Root, 65534), (Squash::None, 0)] {
        let s = TestServer::start(with_options(|o| o.squash = squash)).await;
        std::fs::set_permissions(&s.export, std::fs::Permissions::from_mode(0o777)).unwrap();
        let mut c = s.connect().await;
        c.cred = auth_sys(0, 0);
        let root = c.mnt_root(&s).await;
        let fh = create(&mut c, &root, "f").await;
        let md = std::fs::metadata(s.export.join("f")).unwrap();
        assert_eq!((md.uid(), md.gid()), (want, want), "{squash:?}");
        assert_eq!(ok(getattr(&mut c, &fh).await).obj_attributes.uid, want);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_squash_with_anonuid_maps_every_caller() {
    let s = TestServer::start(with_options(|o| {
        o.squash = Squash::All;
        o.anonuid = 1234;
        o.anongid = 4321;
    }))
    .await;
    std::fs::set_permissions(&s.export, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    for (i, cred) in [auth_sys(1000, 1000), auth_sys(0, 0), OpaqueAuth::none()]
        .into_iter()
        .enumerate()
    {
        c.cred = cred;
        create(&mut c, &root, &format!("f{i}")).await;
        let md = std::fs::metadata(s.export.join(format!("f{i}"))).unwrap();
        assert_eq!((md.uid(), md.gid()), (1234, 4321), "caller {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_export_refuses_modifications_with_rofs() {
    let s = TestServer::start(with_options(|o| o.read_only = true)).await;
    std::fs::write(s.export.join("f"), b"read me").unwrap();
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let f = ok(lookup(&mut c, &root, "f").await).object;
    assert_eq!(ok(read(&mut c, &f, 0, 100).await).data.to_vec(), b"read me");
    assert_eq!(
        write(&mut c, &f, 0, b"x", StableHow::FILE_SYNC)
            .await
            .status(),
        Nfsstat3::ROFS
    );
    let r = op!(
        c,
        Create,
        CreateArgs {
            where_: dirop(&root, "new"),
            how: CreateHow::Unchecked(Sattr3::default()),
        }
    );
    assert_eq!(r.status(), Nfsstat3::ROFS);
    let r = op!(
        c,
        Mkdir,
        MkdirArgs {
            where_: dirop(&root, "newdir"),
            attributes: Sattr3::default(),
        }
    );
    assert_eq!(r.status(), Nfsstat3::ROFS);
    assert_eq!(remove(&mut c, &root, "f").await.status(), Nfsstat3::ROFS);
    let r = op!(
        c,
        Setattr,
        SetattrArgs {
            object: f.clone(),
            new_attributes: Sattr3 {
                size: Some(0),
                ..Default::default()
            },
            guard: None,
        }
    );
    assert_eq!(r.status(), Nfsstat3::ROFS);
    assert_eq!(std::fs::read(s.export.join("f")).unwrap(), b"read me");
    assert!(!s.export.join("new").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_outside_the_allowed_network_cannot_mount_or_use_handles() {
    // First learn a valid root handle from a server that allows everyone...
    let dirs = TestDirs::new("wire");
    let mut s = TestServer::start_in(rw(), dirs).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    drop(c);
    // ...then serve the same directory and state to 10.0.0.0/8 only (we connect from
    // 127.0.0.1; nothing is ever sent to that network).
    let mut cfg = rw();
    cfg.exports[0].clients[0].client = ClientMatch::Network {
        addr: "10.0.0.0".parse().unwrap(),
        prefix_len: 8,
    };
    s.config = cfg;
    s.restart().await;
    let mut c = s.connect().await;
    let export = s.export.display().to_string();
    assert_eq!(c.mnt(&export).await.status(), Mountstat3::ACCES);
    assert_eq!(getattr(&mut c, &root).await.status(), Nfsstat3::ACCES);
    assert_eq!(lookup(&mut c, &root, "x").await.status(), Nfsstat3::ACCES);
    let r = op!(
        c,
        Fsinfo,
        FsinfoArgs {
            fsroot: root.clone()
        }
    );
    assert_eq!(r.status(), Nfsstat3::ACCES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_exports_each_handle_reaches_only_its_own_export() {
    let dirs = TestDirs::new("wire");
    let a = dirs.base.join("a");
    let b = dirs.base.join("b");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(a.join("only-in-a"), b"A").unwrap();
    std::fs::write(b.join("only-in-b"), b"B").unwrap();
    let text = format!(
        "# two exports, as `sluice serve --exports FILE` reads them\n\
         {} 127.0.0.1(rw,no_root_squash,insecure)\n\
         {} *(ro,insecure)\n",
        a.display(),
        b.display()
    );
    let exports = parse_exports(&text).expect("exports file parses");
    let cfg = ServerConfig { exports, ..rw() };
    let s = TestServer::start_in(cfg, dirs).await;
    let mut c = s.connect().await;
    let MntRes::Ok(ra) = c.mnt(a.to_str().unwrap()).await else {
        panic!("MNT a")
    };
    let MntRes::Ok(rb) = c.mnt(b.to_str().unwrap()).await else {
        panic!("MNT b")
    };
    let (ra, rb) = (ra.fhandle, rb.fhandle);
    assert_ne!(ra, rb);
    let mount3::Res::Export(ex) = c.mount(mount3::Args::Export).await else {
        panic!("EXPORT")
    };
    assert_eq!(ex.0.len(), 2);
    // Each root sees its own files only.
    ok(lookup(&mut c, &ra, "only-in-a").await);
    ok(lookup(&mut c, &rb, "only-in-b").await);
    assert_eq!(
        lookup(&mut c, &ra, "only-in-b").await.status(),
        Nfsstat3::NOENT
    );
    assert_eq!(
        lookup(&mut c, &rb, "only-in-a").await.status(),
        Nfsstat3::NOENT
    );
    // ".." of either root stays in it.
    let up = ok(lookup(&mut c, &rb, "..").await);
    assert_eq!(
        up.obj_attributes.unwrap().fileid,
        std::fs::metadata(&b).unwrap().ino()
    );
    // Each export keeps its options: a is writable, b is not.
    let fa = ok(lookup(&mut c, &ra, "only-in-a").await).object;
    let fb = ok(lookup(&mut c, &rb, "only-in-b").await).object;
    ok(write(&mut c, &fa, 0, b"a", StableHow::FILE_SYNC).await);
    assert_eq!(
        write(&mut c, &fb, 0, b"b", StableHow::FILE_SYNC)
            .await
            .status(),
        Nfsstat3::ROFS
    );
    // Crossing exports: RENAME and LINK from a into b are refused; nothing moves.
    let r = op!(
        c,
        Rename,
        RenameArgs {
            from: dirop(&ra, "only-in-a"),
            to: dirop(&rb, "moved"),
        }
    );
    assert_ne!(r.status(), Nfsstat3::OK);
    let r = op!(
        c,
        Link,
        LinkArgs {
            file: fa.clone(),
            link: dirop(&rb, "linked"),
        }
    );
    assert_ne!(r.status(), Nfsstat3::OK);
    assert!(a.join("only-in-a").exists());
    assert!(!b.join("moved").exists() && !b.join("linked").exists());
    // A handle of a with b's export id (or the reverse) is not accepted: the MAC is per export.
    let id_of = |fh: &NfsFh3| fh.0.slice(1..5);
    assert_ne!(id_of(&ra), id_of(&rb));
    let mut moved = fa.0.to_vec();
    moved[1..5].copy_from_slice(&id_of(&rb));
    let st = getattr(&mut c, &NfsFh3(Bytes::from(moved))).await.status();
    assert!(
        st == Nfsstat3::BADHANDLE || st == Nfsstat3::STALE,
        "a's handle relabelled as b's: {st:?}"
    );
}

// =============================================================================================
// The open-file cache
// =============================================================================================

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_open_file_cache_does_not_leak_descriptors() {
    const FILES: usize = 500;
    const OPS: usize = 2000;
    let s = TestServer::start(rw()).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    // Other tests run in this process at the same time, so count only descriptors that point
    // into this test's export.
    let before = fds_under(&s.export);
    let mut handles = Vec::new();
    for i in 0..FILES {
        handles.push(create(&mut c, &root, &format!("f{i}")).await);
    }
    for k in 0..OPS {
        let fh = &handles[(k * 7) % FILES];
        if k % 2 == 0 {
            ok(write(&mut c, fh, k as u64, b"0123456789", StableHow::UNSTABLE).await);
        } else {
            ok(read(&mut c, fh, 0, 4096).await);
        }
    }
    let during = fds_under(&s.export);
    assert!(
        during <= before + sluice_server::backend::openfiles::OPEN_FILES_DEFAULT,
        "{during} descriptors into the export after {OPS} READ/WRITE calls (before: {before})"
    );
    for i in 0..FILES {
        ok(remove(&mut c, &root, &format!("f{i}")).await);
    }
    let after = fds_under(&s.export);
    assert!(
        after <= before,
        "{after} descriptors into the export after removing every file (before: {before}); \
         removed files must not stay open"
    );
}

/// Descriptors of this process whose target lies under `dir` (removed files included).
fn fds_under(dir: &Path) -> usize {
    let dir = dir.to_str().unwrap().to_string();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|t| t.to_str().is_some_and(|t| t.starts_with(&dir)))
        .count()
}

// =============================================================================================
// Helpers of this file (the server, client and typed calls are in `support`)
// =============================================================================================

/// Fills `path` with `bytes` of data through the page cache, without syncing it.
fn write_dirty(path: &Path, bytes: usize) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let chunk = vec![0x5au8; 1 << 20];
    for _ in 0..bytes / chunk.len() {
        f.write_all(&chunk).unwrap();
    }
}

/// Every entry of a small directory by READDIR: name -> fileid.
async fn readdir_all(c: &mut Rpc, dir: &NfsFh3, count: u32) -> HashMap<Vec<u8>, u64> {
    let mut out = HashMap::new();
    let mut cookie = 0;
    let mut verf = [0; 8];
    loop {
        let r = ok(op!(
            c,
            Readdir,
            ReaddirArgs {
                dir: dir.clone(),
                cookie,
                cookieverf: verf,
                count,
            }
        ));
        verf = r.cookieverf;
        for e in &r.entries {
            assert!(
                out.insert(e.name.to_vec(), e.fileid).is_none(),
                "listed twice"
            );
            cookie = e.cookie;
        }
        if r.eof {
            return out;
        }
    }
}

/// Every entry of a small directory by READDIRPLUS: name -> (attributes, handle).
async fn readdirplus_all(
    c: &mut Rpc,
    dir: &NfsFh3,
    count: u32,
) -> HashMap<Vec<u8>, (PostOpAttr, PostOpFh3)> {
    let mut out = HashMap::new();
    let mut cookie = 0;
    let mut verf = [0; 8];
    loop {
        let r = ok(op!(
            c,
            Readdirplus,
            ReaddirplusArgs {
                dir: dir.clone(),
                cookie,
                cookieverf: verf,
                dircount: count,
                maxcount: count,
            }
        ));
        verf = r.cookieverf;
        for e in r.entries {
            cookie = e.cookie;
            assert!(
                out.insert(e.name.to_vec(), (e.name_attributes, e.name_handle))
                    .is_none(),
                "listed twice"
            );
        }
        if r.eof {
            return out;
        }
    }
}
