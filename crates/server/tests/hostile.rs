//! Issue #6: a hostile client on one connection costs the server a bounded amount and costs the
//! other clients nothing.
//!
//! Every test starts its own in-process server over a private export holding `data` (3 MiB of
//! a position-dependent pattern) and `dir/` (2 000 entries), starts a [`Witness`] (a
//! well-behaved client on its own connection that loops GETATTR + READ and checks every byte),
//! then lets the attacker loose. At the end the witness must have completed many rounds with no
//! failure, and no task anywhere in the process may have panicked ([`PANICS`]: tokio catches a
//! panic in a spawned connection task, so the hook is the only way to see one).
//!
//! ```text
//!   witness ── GETATTR/READ loop ──────────────┐
//!   attacker ── oversized marks, floods,       ├──TCP 127.0.0.1──► one sluice server
//!               truncated calls, huge counts,  │
//!               slowloris, never reading ──────┘
//! ```
//! The client is `support`'s (shared with `wire.rs`): deliberately tiny (codecs from
//! `sluice_xdr`, record marking from `sluice_rpc::record`), so what the server sends is what
//! the test sees.
//! Log lines are captured by a minimal `tracing` subscriber ([`LOG`]) so that "the connection is
//! closed *and logged*" can be asserted.

#[macro_use]
mod support;

use bytes::Bytes;
use sluice_rpc::record::{self, RecordDecoderConfig};
use sluice_server::ServerConfig;
use sluice_xdr::mount3::{self};
use sluice_xdr::nfs3::*;
use sluice_xdr::rpc::{AcceptStat, AuthStat, OpaqueAuth, ReplyBody};
use sluice_xdr::{Pack, Payload, Writer};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

/// Size of the witness's file: three 1 MiB READs.
const DATA_BYTES: usize = 3 << 20;
/// Entries of `dir/`: enough that a READDIR of 1 MiB is still not the whole directory's
/// worth of READDIRPLUS.
const DIR_ENTRIES: usize = 2000;

// =============================================================================================
// Record marking
// =============================================================================================

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2_gib_record_marker_closes_that_connection_logged_and_others_are_served() {
    let s = TestServer::with_data(config()).await;
    let w = Witness::start(&s).await;
    for header in [
        0xffff_ffffu32, // last fragment of 2 GiB - 1
        0x7fff_ffff,    // a non-last fragment of 2 GiB - 1
        0x8000_0000 | (5 << 20),
    ] {
        let mut c = s.connect().await;
        c.stream.write_all(&header.to_be_bytes()).await.unwrap();
        let _ = c.stream.write_all(&[0u8; 1024]).await;
        assert!(c.recv_closed().await, "{header:#x}: the server closes");
    }
    assert!(
        log_contains("closing connection"),
        "the refusal is logged: {:?}",
        log_tail()
    );
    w.finish(20).await;
    s.assert_alive();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fragment_floods_are_closed_past_the_fragment_limit() {
    let s = TestServer::with_data(config()).await;
    let w = Witness::start(&s).await;
    let limit = RecordDecoderConfig::DEFAULT_MAX_FRAGMENTS_PER_RECORD;
    // Thousands of empty non-last fragments: four bytes each, nothing to buffer, still closed.
    let mut c = s.connect().await;
    let flood: Vec<u8> = (0..5000).flat_map(|_| [0u8, 0, 0, 0]).collect();
    let _ = c.stream.write_all(&flood).await;
    assert!(
        c.recv_closed().await,
        "closed after {limit} empty fragments"
    );
    // Thousands of 1-byte fragments.
    let mut c = s.connect().await;
    let flood: Vec<u8> = (0..5000).flat_map(|_| [0u8, 0, 0, 1, 0x55]).collect();
    let _ = c.stream.write_all(&flood).await;
    assert!(
        c.recv_closed().await,
        "closed after {limit} 1-byte fragments"
    );
    // Just under the limit is a legal record: a NULL call in `limit` fragments is answered.
    let mut c = s.connect().await;
    let msg = call_message(77, NFS, 3, proc_::NULL, &auth_sys(0, 0), &[]);
    let mut wire = Vec::new();
    for _ in 0..limit - msg.len() {
        wire.extend_from_slice(&record::record_header(0, false));
    }
    for (i, b) in msg.iter().enumerate() {
        wire.extend_from_slice(&record::record_header(1, i + 1 == msg.len()));
        wire.push(*b);
    }
    c.stream.write_all(&wire).await.unwrap();
    let r = c
        .recv()
        .await
        .expect("a reply to a record of exactly the limit");
    assert_eq!((r.xid, r.body), (77, ReplyBody::success()));
    w.finish(20).await;
    s.assert_alive();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_calls_get_garbage_args_or_a_close_and_never_stall_others() {
    let s = TestServer::with_data(config()).await;
    let w = Witness::start(&s).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let getattr_args = sluice_xdr::to_bytes(&GetattrArgs {
        object: root.clone(),
    });
    let full = call_message(500, NFS, 3, proc_::GETATTR, &auth_sys(0, 0), &getattr_args);
    let header_len = full.len() - getattr_args.len();
    // 1. Complete records holding a cut message. Cut inside the arguments: GARBAGE_ARGS.
    for cut in [header_len, header_len + 2, full.len() - 1] {
        c.send_message(&full[..cut]).await;
        let r = c.recv().await.expect("a reply");
        assert_eq!(r.xid, 500, "cut at {cut}");
        assert_eq!(r.body, ReplyBody::accepted(AcceptStat::GARBAGE_ARGS));
    }
    // Cut inside the header (credential, verifier): GARBAGE_ARGS, an auth error or nothing,
    // and the connection keeps serving. (Replies come in completion order, so any reply to
    // the cut call is awaited before the next call is sent.)
    for cut in [10, 20, 30, header_len - 4, header_len - 1] {
        c.send_message(&full[..cut]).await;
        if let Some(r) = c.recv_within(Duration::from_millis(300)).await {
            let r = r.expect("the connection stays open");
            assert_eq!(r.xid, 500, "cut at {cut}");
            assert!(
                matches!(
                    r.body,
                    ReplyBody::Accepted {
                        stat: AcceptStat::GARBAGE_ARGS,
                        ..
                    } | ReplyBody::AuthError(_)
                ),
                "cut at {cut}: {:?}",
                r.body
            );
        }
        let r = c.call(NFS, 3, proc_::NULL, &[]).await;
        assert_eq!(r.body, ReplyBody::success(), "cut at {cut}");
    }
    // 2. A record cut short (the mark promises more than arrives) and the client half-closes:
    //    the server closes too, without waiting for the rest.
    for cut in [2, 10, header_len, full.len() - 1] {
        let mut a = s.connect().await;
        a.stream
            .write_all(&record::record_header(full.len(), true))
            .await
            .unwrap();
        a.stream.write_all(&full[..cut]).await.unwrap();
        a.stream.shutdown().await.unwrap();
        assert!(a.recv_closed().await, "cut at {cut}");
    }
    // 3. A record cut short and the client goes quiet: the idle timeout closes it.
    let mut a = s.connect().await;
    a.stream
        .write_all(&record::record_header(full.len(), true))
        .await
        .unwrap();
    a.stream.write_all(&full[..header_len / 2]).await.unwrap();
    let t0 = Instant::now();
    assert!(a.recv_closed().await, "a half-sent record times out");
    assert!(t0.elapsed() < IDLE_TIMEOUT * 4, "{:?}", t0.elapsed());
    // (`c` sat idle meanwhile and was closed too; a new connection is served.)
    let mut c = s.connect().await;
    ok(getattr(&mut c, &root).await);
    w.finish(20).await;
    s.assert_alive();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_after_valid_headers_is_refused_per_call() {
    let s = TestServer::with_data(config()).await;
    let w = Witness::start(&s).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for (prog, vers, procs) in [
        (NFS, 3u32, 0..22u32),
        (mount3::PROGRAM, 3, 0..6),
        (sluice_xdr::portmap::PROGRAM, 2, 0..6),
    ] {
        for p in procs {
            for round in 0..8 {
                let len = (next() % 600) as usize;
                let mut args: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                if round % 2 == 0 && len >= 8 {
                    // Half the time, a plausible handle first so decoders get further.
                    let fh = sluice_xdr::to_bytes(&root);
                    args[..fh.len().min(len)].copy_from_slice(&fh[..fh.len().min(len)]);
                }
                let r = c.call(prog, vers, p, &args).await;
                assert!(
                    matches!(r.body, ReplyBody::Accepted { .. }),
                    "prog {prog} proc {p}: {:?}",
                    r.body
                );
            }
            // The connection still serves a proper call after each procedure's garbage.
            ok(getattr(&mut c, &root).await);
        }
    }
    w.finish(20).await;
    s.assert_alive();
}

// =============================================================================================
// Counts and names
// =============================================================================================

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_and_tiny_counts_give_bounded_replies_or_toosmall() {
    let s = TestServer::with_data(config()).await;
    let w = Witness::start(&s).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let data = ok(lookup(&mut c, &root, "data").await).object;
    let dir = ok(lookup(&mut c, &root, "dir").await).object;
    let rtmax = s.config.read_bytes_max;

    // READ of 4 GiB - 1: at most rtmax, and the right bytes.
    for offset in [0u64, 1, DATA_BYTES as u64 - 10, DATA_BYTES as u64 + 4096] {
        let (r, wire_len) = c
            .nfs_sized(Args3::Read(ReadArgs {
                file: data.clone(),
                offset,
                count: u32::MAX,
            }))
            .await;
        let Res3::Read(r) = r else { unreachable!() };
        let r = ok(r);
        assert!(r.count <= rtmax, "READ count {} > rtmax {rtmax}", r.count);
        assert!(
            wire_len <= rtmax as usize + 4096,
            "reply of {wire_len} bytes"
        );
        let got = r.data.to_vec();
        assert_eq!(got.len(), r.count as usize);
        let start = offset.min(DATA_BYTES as u64) as usize;
        assert_eq!(got, pattern()[start..start + got.len()], "offset {offset}");
        assert_eq!(r.eof, start + got.len() == DATA_BYTES, "offset {offset}");
    }
    // An offset whose end overflows: an error or an empty reply, nothing else.
    let r = read(&mut c, &data, u64::MAX - 1, u32::MAX).await;
    match r {
        NfsResult::Ok(r) => assert_eq!(r.count, 0),
        NfsResult::Err(s, _) => assert_eq!(s, Nfsstat3::INVAL),
    }

    // READDIR / READDIRPLUS with every count at 4 GiB - 1: one bounded reply.
    let bound = sluice_server::nfs::READDIR_REPLY_BYTES_MAX + 4096;
    let (r, len) = c
        .nfs_sized(Args3::Readdir(ReaddirArgs {
            dir: dir.clone(),
            cookie: 0,
            cookieverf: [0; 8],
            count: u32::MAX,
        }))
        .await;
    let Res3::Readdir(r) = r else { unreachable!() };
    assert!(!ok(r).entries.is_empty());
    assert!(len <= bound, "READDIR reply of {len} bytes");
    for (dircount, maxcount) in [(u32::MAX, u32::MAX), (0, u32::MAX), (u32::MAX, 1 << 20)] {
        let (r, len) = c
            .nfs_sized(Args3::Readdirplus(ReaddirplusArgs {
                dir: dir.clone(),
                cookie: 0,
                cookieverf: [0; 8],
                dircount,
                maxcount,
            }))
            .await;
        let Res3::Readdirplus(r) = r else {
            unreachable!()
        };
        assert!(!ok(r).entries.is_empty());
        assert!(
            len <= bound,
            "READDIRPLUS {dircount}/{maxcount}: {len} bytes"
        );
    }
    // Tiny counts: no entry fits, so NFS3ERR_TOOSMALL, not an empty non-eof page (which would
    // loop a client forever).
    for count in [0u32, 1, 8, 64] {
        let r = op!(
            c,
            Readdir,
            ReaddirArgs {
                dir: dir.clone(),
                cookie: 0,
                cookieverf: [0; 8],
                count,
            }
        );
        assert_eq!(r.status(), Nfsstat3::TOOSMALL, "READDIR count {count}");
        let r = op!(
            c,
            Readdirplus,
            ReaddirplusArgs {
                dir: dir.clone(),
                cookie: 0,
                cookieverf: [0; 8],
                dircount: count,
                maxcount: count,
            }
        );
        assert_eq!(r.status(), Nfsstat3::TOOSMALL, "READDIRPLUS count {count}");
    }

    // WRITE whose count exceeds the data sent: refused, nothing written.
    let f = create(&mut c, &root, "w").await;
    let r = op!(
        c,
        Write,
        WriteArgs {
            file: f.clone(),
            offset: 0,
            count: 1 << 20,
            stable: StableHow::FILE_SYNC,
            data: Payload::from(vec![1u8; 100]),
        }
    );
    assert_eq!(r.status(), Nfsstat3::INVAL, "count larger than the data");
    assert_eq!(std::fs::metadata(s.export.join("w")).unwrap().len(), 0);
    // WRITE whose data length word claims more than the record holds: GARBAGE_ARGS.
    let mut args = Writer::new();
    f.pack(&mut args);
    args.put_u64(0);
    args.put_u32(16);
    args.put_u32(StableHow::FILE_SYNC.0);
    args.put_u32(0x7fff_fff0); // opaque data<> length
    args.put_raw(&[2u8; 16]);
    let r = c.call(NFS, 3, proc_::WRITE, &args.into_bytes()).await;
    assert_eq!(r.body, ReplyBody::accepted(AcceptStat::GARBAGE_ARGS));
    // WRITE whose record exceeds the record bound: the connection is closed before the data is
    // buffered.
    let mut big = s.connect().await;
    let mut a = Writer::new();
    f.pack(&mut a);
    a.put_u64(0);
    a.put_u32(8 << 20);
    a.put_u32(StableHow::UNSTABLE.0);
    a.put_u32(8 << 20);
    let head = call_message(9, NFS, 3, proc_::WRITE, &auth_sys(0, 0), &a.into_bytes());
    let total = head.len() + (8 << 20);
    big.stream
        .write_all(&record::record_header(total, true))
        .await
        .unwrap();
    let _ = big.stream.write_all(&head).await;
    let _ = big.stream.write_all(&vec![3u8; 64 * 1024]).await;
    assert!(big.recv_closed().await, "an 8 MiB WRITE record is refused");
    assert_eq!(std::fs::metadata(s.export.join("w")).unwrap().len(), 0);
    w.finish(20).await;
    s.assert_alive();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_slash_nul_or_over_255_bytes_are_refused() {
    let s = TestServer::with_data(config()).await;
    let w = Witness::start(&s).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let long = vec![b'n'; 256];
    let cases: [(&[u8], Nfsstat3); 6] = [
        (b"dir/0", Nfsstat3::ACCES),
        (b"../etc", Nfsstat3::ACCES),
        (b"/etc", Nfsstat3::ACCES),
        (b"data\0x", Nfsstat3::ACCES),
        (b"", Nfsstat3::ACCES),
        (&long, Nfsstat3::NAMETOOLONG),
    ];
    for (name, want) in cases {
        let shown = String::from_utf8_lossy(name).into_owned();
        let r = lookup_raw(&mut c, &root, name).await;
        assert!(r.status() != Nfsstat3::OK, "LOOKUP {shown:?} succeeded");
        let got = create_raw(&mut c, &root, name).await;
        assert_eq!(got, want, "CREATE {shown:?}");
        let r = op!(
            c,
            Mkdir,
            MkdirArgs {
                where_: DirOpArgs3 {
                    dir: root.clone(),
                    name: Bytes::copy_from_slice(name),
                },
                attributes: Sattr3::default(),
            }
        );
        assert_eq!(r.status(), want, "MKDIR {shown:?}");
    }
    // Nothing was created anywhere, inside or outside the export.
    let mut names: Vec<_> = std::fs::read_dir(&s.export)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["data", "dir"]);
    // 255 bytes is legal.
    let ok255 = vec![b'm'; 255];
    assert_eq!(create_raw(&mut c, &root, &ok255).await, Nfsstat3::OK);
    w.finish(20).await;
    s.assert_alive();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_sys_with_17_gids_or_a_300_byte_machine_name_is_badcred() {
    let s = TestServer::with_data(config()).await;
    let w = Witness::start(&s).await;
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    // Encoded by hand: our own encoder is right to refuse to produce these.
    let raw_auth_sys = |name: &[u8], gids: &[u32]| {
        let mut b = Writer::new();
        b.put_u32(1); // stamp
        b.put_opaque(name);
        b.put_u32(0); // uid
        b.put_u32(0); // gid
        b.put_u32(gids.len() as u32);
        for g in gids {
            b.put_u32(*g);
        }
        OpaqueAuth {
            flavor: sluice_xdr::rpc::AuthFlavor::SYS,
            body: b.into_bytes(),
        }
    };
    let gids17: Vec<u32> = (0..17).collect();
    let gids16: Vec<u32> = (0..16).collect();
    for (cred, what) in [
        (raw_auth_sys(b"h", &gids17), "17 gids"),
        (raw_auth_sys(&[b'm'; 300], &[0]), "300-byte machine name"),
        (raw_auth_sys(&[b'm'; 256], &[0]), "256-byte machine name"),
    ] {
        c.cred = cred;
        for p in [proc_::NULL, proc_::GETATTR] {
            let args = if p == proc_::GETATTR {
                sluice_xdr::to_bytes(&GetattrArgs {
                    object: root.clone(),
                })
                .to_vec()
            } else {
                Vec::new()
            };
            let r = c.call(NFS, 3, p, &args).await;
            assert_eq!(
                r.body,
                ReplyBody::AuthError(AuthStat::BADCRED),
                "{what}, proc {p}"
            );
        }
    }
    // The limits themselves are legal.
    c.cred = raw_auth_sys(&[b'm'; 255], &gids16);
    ok(getattr(&mut c, &root).await);
    w.finish(20).await;
    s.assert_alive();
}

// =============================================================================================
// Slow, stuck and many clients
// =============================================================================================

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_clients_holding_half_sent_records_do_not_stall_others() {
    let s = TestServer::with_data(config()).await;
    let w = Witness::start(&s).await;
    let msg = call_message(1, NFS, 3, proc_::NULL, &auth_sys(0, 0), &[]);
    let framed = frame_one(&msg);
    // 40 clients, each trickling one byte of a record every 200 ms (well inside the idle
    // timeout, so only the connection limit bounds them).
    let mut slow = Vec::new();
    for _ in 0..40 {
        slow.push(s.connect().await);
    }
    let trickle_until = Instant::now() + Duration::from_secs(3);
    let mut sent = 0;
    while Instant::now() < trickle_until {
        for c in &mut slow {
            c.stream.write_all(&framed[sent..sent + 1]).await.unwrap();
        }
        sent += 1;
        assert!(sent < framed.len(), "still half sent");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let served_meanwhile = w.count();
    assert!(
        served_meanwhile >= 20,
        "the witness was served {served_meanwhile} rounds while 40 clients trickled"
    );
    // When they finally complete their records, each is answered.
    for c in &mut slow {
        c.stream.write_all(&framed[sent..]).await.unwrap();
        let r = c.recv().await.expect("a reply");
        assert_eq!((r.xid, r.body), (1, ReplyBody::success()));
    }
    w.finish(20).await;
    s.assert_alive();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_replies_is_bounded_and_closed() {
    let mut cfg = config();
    cfg.net.replies_queued_max = 4;
    cfg.net.calls_in_flight_max = 8;
    let s = TestServer::with_data(cfg).await;
    let w = Witness::start(&s).await;
    let mut hog = s.connect().await;
    let root = hog.mnt_root(&s).await;
    let data = ok(lookup(&mut hog, &root, "data").await).object;
    // Pipelined READs of 1 MiB, never reading a reply: 100 000 of them would be 100 GiB of
    // replies. The writes block once the server stops reading calls (that is the bound
    // working), so they are sent from a task that gives up after 5 s without progress.
    let (mut rd, mut wr) = hog.stream.into_split();
    let calls = 100_000u32;
    let sender = tokio::spawn(async move {
        let args = sluice_xdr::to_bytes(&ReadArgs {
            file: data,
            offset: 0,
            count: 1 << 20,
        });
        let mut sent = 0u32;
        for xid in 0..calls {
            let msg = call_message(xid, NFS, 3, proc_::READ, &auth_sys(0, 0), &args);
            let framed = frame_one(&msg);
            let send = wr.write_all(&framed);
            match tokio::time::timeout(Duration::from_secs(5), send).await {
                Ok(Ok(())) => sent += 1,
                _ => break,
            }
        }
        (sent, wr)
    });
    // Meanwhile the witness is served.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = w.count();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        w.count() >= before + 5,
        "the witness stalls behind a client that does not read"
    );
    let (sent, wr) = sender.await.unwrap();
    assert!(
        sent < calls,
        "the server read all {sent} calls while their replies could not be sent"
    );
    // Still not reading, for a few idle timeouts: a connection whose replies make no progress
    // for that long is closed. Then what the server had buffered for us arrives, and the close.
    tokio::time::sleep(IDLE_TIMEOUT * 3).await;
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 20];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rd.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got += n,
            Err(_) => panic!(
                "a connection whose replies were stuck for {:?} is still served ({} MiB read)",
                IDLE_TIMEOUT * 3,
                got >> 20
            ),
        }
    }
    drop(wr);
    // replies_queued_max + calls_in_flight_max + what fits in the two sockets' buffers (a few
    // MiB on loopback): far below the calls sent.
    let replies = got >> 20;
    println!("{sent} calls sent, {replies} replies of 1 MiB buffered before the close");
    assert!(
        replies <= 4 + 8 + 32,
        "{replies} replies of 1 MiB were buffered for a client that never read"
    );
    assert!(log_contains("no progress"), "the close is logged");
    w.finish(20).await;
    s.assert_alive();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_idle_connections_past_the_limit_are_refused_then_time_out() {
    let mut cfg = config();
    cfg.net.connections_max = 16;
    let s = TestServer::with_data(cfg).await;
    let w = Witness::start(&s).await; // one of the 16
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(s.connect().await);
    }
    // Past the limit, new connections are closed at once; the witness, admitted first, is not
    // affected.
    let before = w.count();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(w.count() > before, "the witness is served");
    let closed_now = {
        let mut n = 0;
        for c in idle.iter_mut().skip(15) {
            if c.recv_closed_within(Duration::from_millis(200)).await {
                n += 1;
            }
        }
        n
    };
    assert!(closed_now >= 180, "only {closed_now} of 185 refused");
    // The 15 admitted ones are closed after the idle timeout, and then new clients get in.
    for c in idle.iter_mut().take(15) {
        assert!(c.recv_closed().await);
    }
    let mut late = s.connect().await;
    let r = late.call(NFS, 3, proc_::NULL, &[]).await;
    assert_eq!(r.body, ReplyBody::success());
    w.finish(20).await;
    s.assert_alive();
}

// =============================================================================================
// Fixtures
// =============================================================================================

/// Short, so the timeout paths run in seconds.
const IDLE_TIMEOUT: Duration = Duration::from_secs(2);

fn config() -> ServerConfig {
    install_hooks();
    let mut cfg = rw();
    cfg.net.idle_timeout = IDLE_TIMEOUT;
    cfg
}

/// The witness's file content.
fn pattern() -> &'static [u8] {
    static P: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        (0..DATA_BYTES)
            .map(|i| ((i as u64 * 2_654_435_761) >> 13) as u8)
            .collect()
    })
}

impl TestServer {
    /// A server (on a fresh `sluice-hostile-*` directory) whose export holds `data` (the
    /// witness's [`pattern`]) and `dir/` ([`DIR_ENTRIES`] empty files).
    async fn with_data(config: ServerConfig) -> TestServer {
        let dirs = TestDirs::new("hostile");
        let export = dirs.export();
        std::fs::create_dir_all(export.join("dir")).unwrap();
        std::fs::write(export.join("data"), pattern()).unwrap();
        for i in 0..DIR_ENTRIES {
            std::fs::write(export.join("dir").join(format!("entry-{i:05}")), b"").unwrap();
        }
        TestServer::start_in(config, dirs).await
    }

    /// The server is still running and nothing in the process panicked.
    fn assert_alive(&self) {
        assert!(!self.task.is_finished(), "the server's run() returned");
        assert_eq!(
            PANICS.load(Ordering::Relaxed),
            0,
            "a task panicked: {:?}",
            log_tail()
        );
    }
}

/// A well-behaved client on its own connection: GETATTR + READ of `data` (64 KiB at a moving
/// offset, content checked) in a loop until told to stop.
struct Witness {
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
    task: JoinHandle<Result<u64, String>>,
}

impl Witness {
    async fn start(s: &TestServer) -> Witness {
        let mut c = s.connect().await;
        let root = c.mnt_root(s).await;
        let fh = ok(lookup(&mut c, &root, "data").await).object;
        let stop = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(AtomicU64::new(0));
        let (stop2, rounds2) = (stop.clone(), rounds.clone());
        let task = tokio::spawn(async move {
            let mut i = 0u64;
            while !stop2.load(Ordering::Relaxed) {
                let attr = match getattr(&mut c, &fh).await {
                    NfsResult::Ok(a) => a.obj_attributes,
                    NfsResult::Err(s, _) => return Err(format!("GETATTR {}", s.name())),
                };
                if attr.size != DATA_BYTES as u64 {
                    return Err(format!("size {}", attr.size));
                }
                let offset = (i * 65_537) % (DATA_BYTES as u64 - 65_536);
                let r = match read(&mut c, &fh, offset, 65_536).await {
                    NfsResult::Ok(r) => r,
                    NfsResult::Err(s, _) => return Err(format!("READ {}", s.name())),
                };
                let o = offset as usize;
                if r.data.to_vec() != pattern()[o..o + 65_536] {
                    return Err(format!("READ at {offset}: wrong bytes"));
                }
                i += 1;
                rounds2.store(i, Ordering::Relaxed);
                // Paced, so that the witness measures service, not CPU share.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(i)
        });
        Witness { stop, rounds, task }
    }

    fn count(&self) -> u64 {
        self.rounds.load(Ordering::Relaxed)
    }

    /// Stops the witness once it has made `min_rounds` rounds; none may have failed.
    async fn finish(self, min_rounds: u64) {
        // The attack is over: the witness must now reach `min_rounds` (it ran all along).
        let deadline = Instant::now() + REPLY_TIMEOUT;
        while self.count() < min_rounds && !self.task.is_finished() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.stop.store(true, Ordering::Relaxed);
        let n = self
            .task
            .await
            .expect("the witness task")
            .unwrap_or_else(|e| panic!("the well-behaved client saw an error: {e}"));
        assert!(n >= min_rounds, "the witness completed only {n} rounds");
        println!("witness: {n} correct GETATTR+READ rounds");
    }
}

// --- panics and logs --------------------------------------------------------------------------

/// Panics on tokio's threads (the server's tasks) since the first test started.
static PANICS: AtomicU64 = AtomicU64::new(0);
/// Messages of the `tracing` events the server emitted.
static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn install_hooks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // Test bodies run on the test threads (a failing assertion is a panic there);
            // the server's tasks run on tokio's worker and blocking threads.
            if std::thread::current()
                .name()
                .is_some_and(|n| n.starts_with("tokio-runtime"))
            {
                PANICS.fetch_add(1, Ordering::Relaxed);
            }
            default(info);
        }));
        let _ = tracing::subscriber::set_global_default(LogCapture);
    });
}

fn log_contains(s: &str) -> bool {
    LOG.lock().unwrap().iter().any(|l| l.contains(s))
}

fn log_tail() -> Vec<String> {
    let l = LOG.lock().unwrap();
    l[l.len().saturating_sub(10)..].to_vec()
}

/// The smallest `tracing` subscriber: keeps every event's fields as one line. (The server's
/// crate has no `tracing-subscriber`; this is all the test needs.)
struct LogCapture;

impl tracing::Subscriber for LogCapture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Line(String);
        impl tracing::field::Visit for Line {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={v:?} ", f.name()));
            }
        }
        let mut line = Line(format!("{} ", event.metadata().level()));
        event.record(&mut line);
        let mut log = LOG.lock().unwrap();
        if log.len() < 100_000 {
            log.push(line.0);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
