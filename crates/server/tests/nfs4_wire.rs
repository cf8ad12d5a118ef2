//! NFSv4.1 over a real socket: program 100003 version 4 on the port that serves v3, COMPOUNDs
//! built by hand with `sluice_xdr::nfs4`'s encoders ([`support::nfs4`]) and sent through the
//! test's small RPC client, so what the server answers is exactly what the test sees.
//!
//! # The error paths of RFC 8881 and the test that provokes each
//! The COMPOUND processor's unit tests (`src/nfs4/compound/tests.rs`) run the same paths in
//! process; these run them over TCP, through record marking, the RPC layer and the service.
//!
//! | RFC 8881 | error / behaviour | test |
//! |---|---|---|
//! | §2.10.6.1, §18.46.3 | a retry gets the cached reply byte for byte; nothing runs twice | `a_retried_request_gets_the_cached_reply_byte_for_byte` |
//! | §2.10.6.1.3 | NFS4ERR_SEQ_FALSE_RETRY (same slot and sequence id, other ops) | same |
//! | §2.10.6.1.3 | NFS4ERR_RETRY_UNCACHED_REP on the op after a good SEQUENCE (retry of a reply not cached) | same |
//! | §18.46.3 | NFS4ERR_SEQ_MISORDERED | `slot_and_position_errors`, `a_session_walks_the_pseudo_tree_into_the_export` |
//! | §18.46.3 | NFS4ERR_BADSLOT (slot id past the negotiated `ca_maxrequests`) | `slot_and_position_errors` |
//! | §18.46.3 | NFS4ERR_BADSESSION (unknown session id) | `slot_and_position_errors` |
//! | §2.6.3.1.1.1 | NFS4ERR_SEQUENCE_POS (SEQUENCE not first) | `slot_and_position_errors` |
//! | §2.6.3.1.1.1 | NFS4ERR_OP_NOT_IN_SESSION (no SEQUENCE first) | `slot_and_position_errors` |
//! | §15.1.3.6 | NFS4ERR_OP_ILLEGAL (an undefined op number) | `slot_and_position_errors` |
//! | §2.10.6.4, §15.1.3.9 | NFS4ERR_TOO_MANY_OPS (session's `ca_maxoperations`; the decoder's bound) | `slot_and_position_errors` |
//! | §2.10.6.4 | NFS4ERR_REQ_TOO_BIG (request over `ca_maxrequestsize`) | `request_and_reply_size_limits` |
//! | §2.10.6.4 | NFS4ERR_REP_TOO_BIG, NFS4ERR_REP_TOO_BIG_TO_CACHE | `request_and_reply_size_limits` |
//! | §2.7 | NFS4ERR_MINOR_VERS_MISMATCH (minor version 0) | `minor_version_0_is_mismatched_and_v2_is_prog_mismatch_3_4` |
//! | §8.2.2, §8.2.4 | NFS4ERR_BAD_STATEID, NFS4ERR_OLD_STATEID, NFS4ERR_STALE_STATEID | `stateid_errors` |
//! | §9.7, §18.16.3 | NFS4ERR_SHARE_DENIED between two clients | `share_reservations_between_two_clients` |
//! | §8.3 | an expired client's state kept (courtesy) until another client conflicts | `an_expired_client_keeps_its_open_until_another_client_conflicts` |
//! | §12, §17 | pNFS ops: NFS4ERR_NOTSUPP (no layouts: EXCHANGE_ID says USE_NON_PNFS) | `pnfs_ops_are_not_supported` |
//! | §18 | every op of part 1 at least once | `every_implemented_op_over_tcp` (plus the tests above) |
//! | §18.25 | a removed open file stays readable and writable until its last CLOSE | `an_open_file_stays_usable_after_remove` |
//! | §18.26 | a file renamed over while open keeps its data until its last CLOSE | `a_file_renamed_over_while_open_stays_usable_until_close` |
//! | §18.25 | the last name of an open file removed through another hard link than it was opened by: kept until its last CLOSE | `the_last_link_of_an_open_file_removed_by_another_name_is_kept_until_close` |
//! | §18.35, §18.36, §18.16 | state limits: EXCHANGE_ID / OPEN get NFS4ERR_DELAY, CREATE_SESSION over a client's quota NFS4ERR_NOSPC; room after DESTROY_CLIENTID, DESTROY_SESSION, CLOSE | `state_limits_answer_their_errors_and_recover` |
//! | §18.16.3 | EXCLUSIVE4_1: attributes with the creation; same verifier OK, another EXIST, across a restart | `exclusive4_1_creates_once_and_knows_its_retransmission_after_a_restart` |
//! | §7.3, §4.2.3 | pseudo handles persist across a restart with the same exports, STALE with others | `pseudo_handles_survive_a_restart_and_go_stale_when_the_exports_change` |
//! | §18.25 | parked files are not listed (v4 and v3) and are unlinked at the next start | `parked_files_are_not_listed_and_a_restart_unlinks_them` |
//! | §18.30, §18.25 | SETATTR of the size and REMOVE right after held UNSTABLE writes: OK, not NFS4ERR_DELAY | `truncate_and_remove_right_after_unstable_writes_are_not_delayed` |
//!
//! | §18.29, §18.45 | SECINFO on names (pseudo tree and export; NOENT, NOTDIR, NOFILEHANDLE; the handle consumed), SECINFO_NO_NAME's PARENT style | `secinfo_state_protection_and_set_ssv_answer_as_knfsd` |
//! | §18.35.4 | SP4_NONE granted; SP4_MACH_CRED over AUTH_SYS NFS4ERR_INVAL, SP4_SSV NFS4ERR_ENCR_ALG_UNSUPP (knfsd's answers) | same |
//! | §18.47 | SET_SSV: NFS4ERR_NOTSUPP (no client id has an SSV; knfsd's op table answers the same) | same |
//!
//! | §18.33 | BACKCHANNEL_CTL in a session: OK | same (the program it sets: `compound/tests.rs`) |
//!
//! The back channel's probe and its SEQUENCE flags are tested in `nfs4_callback.rs`; LOCK,
//! LOCKT and LOCKU in `nfs4_locks.rs`; the 4.2 ops in `nfs42_ops.rs`.
//!
//! `tshark_dissects_a_v41_session` captures one whole session on loopback (with one 4.2
//! COMPOUND: READ_PLUS of a sparse file, holes and data, chunked and spliced) and has Wireshark's
//! dissector judge it (`tests/peers/tshark-check.sh`): no malformed packet, every call
//! answered, the ops seen.

#[macro_use]
mod support;

use bytes::Bytes;
use sluice_xdr::nfs4::attrs::num;
use sluice_xdr::nfs4::ops::{
    AccessArgs, CommitArgs, CreateArgs, Createtype4, NfsArgop4, NfsResop4, OpenDowngradeArgs,
    Opnum4, ReadArgs, ReaddirArgs, RenameArgs, Res4, SetattrArgs, StateidList, WriteArgs,
    OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_ACCESS_WRITE,
    OPEN4_SHARE_DENY_NONE, OPEN4_SHARE_DENY_READ, OPEN4_SHARE_DENY_WRITE,
};
use sluice_xdr::nfs4::{self, Bitmap4, Ftype4, Linktext4, NfsFh4, Nfsstat4, StableHow4, Stateid4};
use sluice_xdr::rpc::{AcceptStat, OpaqueAuth, ReplyBody};
use std::time::Duration;
use support::nfs4::*;
use support::{auth_sys, call_message, parse_reply, rw, TestServer, NFS, REPLY_TIMEOUT};

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

// =============================================================================================
// Sessions: the reply cache, slots, positions and sizes
// =============================================================================================

fn mkdir_op(name: &str) -> NfsArgop4 {
    NfsArgop4::Create(CreateArgs {
        objtype: Createtype4::Dir,
        objname: component(name),
        createattrs: mode_attrs(0o755),
    })
}

/// Exactly once (§2.10.6): a request that asked to be cached and is sent again on the same
/// slot and sequence id (a new RPC, a new xid) gets the first reply's bytes, and its CREATE
/// is not run a second time (it would say EXIST).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_request_gets_the_cached_reply_byte_for_byte() {
    let s = TestServer::start(rw()).await;
    let mut v = V4::mount(&s, "replay client").await;
    let sid = v.sessionid;
    let mut ops = vec![sequence_on(sid, 0, 1, true)];
    ops.extend(walk_to(&s.export));
    ops.push(mkdir_op("once"));
    ops.push(NfsArgop4::Getattr(Bitmap4::from_bits(&[num::TYPE])));
    let args = compound_args(1, ops);
    let first = compound_raw(&mut v.rpc, &args).await;
    let res = decode_res(&first.results);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let again = compound_raw(&mut v.rpc, &args).await;
    assert_ne!(again.xid, first.xid, "a new RPC");
    assert_eq!(
        again.results, first.results,
        "the cached reply, byte for byte"
    );
    assert!(s.export.join("once").is_dir());

    // The same slot and sequence id with other ops: a false retry, not the cached reply.
    let res = compound(
        &mut v.rpc,
        1,
        vec![sequence_on(sid, 0, 1, true), NfsArgop4::Putrootfh(())],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::SEQ_FALSE_RETRY);
    assert_eq!(res.results.len(), 1);

    // A request that did not ask to be cached cannot be replayed: SEQUENCE succeeds and the
    // op after it is RETRY_UNCACHED_REP (§2.10.6.1.3); its CREATE is not run again either.
    let mut ops = vec![sequence_on(sid, 0, 2, false)];
    ops.extend(walk_to(&s.export));
    ops.push(mkdir_op("twice"));
    let args = compound_args(1, ops);
    let res = decode_res(&compound_raw(&mut v.rpc, &args).await.results);
    assert_eq!(res.status, Nfsstat4::OK);
    let res = decode_res(&compound_raw(&mut v.rpc, &args).await.results);
    assert_eq!(res.status, Nfsstat4::RETRY_UNCACHED_REP);
    assert_eq!(
        statuses(&res),
        vec![Nfsstat4::OK, Nfsstat4::RETRY_UNCACHED_REP],
        "SEQUENCE OK, the op after it the error"
    );
    // The slot moves on.
    let res = compound(&mut v.rpc, 1, vec![sequence_on(sid, 0, 3, false)]).await;
    assert_eq!(res.status, Nfsstat4::OK);
}

/// SEQUENCE's slot errors, the op position rules and the op-count bounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_and_position_errors() {
    let s = TestServer::start(rw()).await;
    let mut v = V4::mount(&s, "slot client").await;
    let sid = v.sessionid;
    let c = &mut v.rpc;
    // The session has 4 slots (ids 0..=3): slot 4 is BADSLOT, and a slot's first sequence
    // id is 1.
    let res = compound(c, 1, vec![sequence_on(sid, 4, 1, false)]).await;
    assert_eq!(res.status, Nfsstat4::BADSLOT);
    assert_eq!(statuses(&res), vec![Nfsstat4::BADSLOT]);
    let res = compound(c, 1, vec![sequence_on(sid, 3, 2, false)]).await;
    assert_eq!(res.status, Nfsstat4::SEQ_MISORDERED);
    let res = compound(c, 1, vec![sequence_on(sid, 3, 1, false)]).await;
    assert_eq!(res.status, Nfsstat4::OK, "slot 3 starts at 1");
    // A sequence id behind the slot's is misordered too (it is not the last one).
    let res = compound(c, 1, vec![sequence_on(sid, 3, 0, false)]).await;
    assert_eq!(res.status, Nfsstat4::SEQ_MISORDERED);
    // A session nobody created.
    let res = compound(c, 1, vec![sequence([9; 16], 1)]).await;
    assert_eq!(res.status, Nfsstat4::BADSESSION);

    // SEQUENCE anywhere but first: the ops before it ran, it is SEQUENCE_POS.
    let res = compound(
        c,
        1,
        vec![
            sequence(sid, 1),
            NfsArgop4::Putrootfh(()),
            sequence(sid, 2),
            NfsArgop4::Getfh(()),
        ],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::SEQUENCE_POS);
    assert_eq!(
        statuses(&res),
        vec![Nfsstat4::OK, Nfsstat4::OK, Nfsstat4::SEQUENCE_POS]
    );
    // An op that needs a session without one: OP_NOT_IN_SESSION, and nothing ran.
    let res = compound(c, 1, vec![NfsArgop4::Putrootfh(()), NfsArgop4::Getfh(())]).await;
    assert_eq!(res.status, Nfsstat4::OP_NOT_IN_SESSION);
    assert_eq!(statuses(&res), vec![Nfsstat4::OP_NOT_IN_SESSION]);
    // An op number nobody defined: OP_ILLEGAL, answered as op ILLEGAL (10044).
    let res = compound(
        c,
        1,
        vec![
            sequence(sid, 2),
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Illegal(9999),
        ],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::OP_ILLEGAL);
    assert_eq!(res.results.len(), 3);
    assert_eq!(res.results[2].opnum(), Opnum4::ILLEGAL);
    // A 4.2 op in a 4.1 COMPOUND does not exist there either.
    let res = compound(
        c,
        1,
        vec![
            sequence(sid, 3),
            NfsArgop4::Putrootfh(()),
            NfsArgop4::OffloadCancel(Stateid4::ANONYMOUS),
        ],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::OP_ILLEGAL);

    // More ops than the session's ca_maxoperations (16): TOO_MANY_OPS from SEQUENCE, nothing
    // ran and the slot did not move.
    let mut ops = vec![sequence(sid, 4)];
    ops.extend((0..16).map(|_| NfsArgop4::Putrootfh(())));
    let res = compound(c, 1, ops).await;
    assert_eq!(res.status, Nfsstat4::TOO_MANY_OPS);
    assert_eq!(statuses(&res), vec![Nfsstat4::TOO_MANY_OPS]);
    let res = compound(c, 1, vec![sequence(sid, 4)]).await;
    assert_eq!(res.status, Nfsstat4::OK, "sequence id 4 is still the next");
    // More than the decoder takes at all (128 ops), without a session: TOO_MANY_OPS too.
    let ops = (0..129).map(|_| NfsArgop4::Putrootfh(())).collect();
    let res = compound(c, 1, ops).await;
    assert_eq!(res.status, Nfsstat4::TOO_MANY_OPS);
    assert_eq!(statuses(&res), vec![Nfsstat4::TOO_MANY_OPS]);
}

/// The negotiated sizes (§2.10.6.4, §18.36.3): a request over `ca_maxrequestsize` is refused
/// by SEQUENCE; a reply over `ca_maxresponsesize` (or `ca_maxresponsesize_cached` when caching
/// was asked) ends at the op that crossed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_and_reply_size_limits() {
    let s = TestServer::start(rw()).await;
    std::fs::write(s.export.join("data"), vec![b'x'; 6000]).unwrap();
    let fore = sluice_xdr::nfs4::ops::ChannelAttrs4 {
        maxrequestsize: 1024,
        maxresponsesize: 4096,
        maxresponsesize_cached: 512,
        ..chan()
    };
    let mut v = V4::mount_with(&s, "small client", fore).await;
    let sid = v.sessionid;
    let into_data = |seq: u32, cache: bool| {
        let mut ops = vec![sequence_on(sid, 0, seq, cache)];
        ops.extend(walk_to(&s.export));
        ops.push(lookup("data"));
        ops
    };
    let read = |count: u32| {
        NfsArgop4::Read(ReadArgs {
            stateid: Stateid4::ANONYMOUS,
            offset: 0,
            count,
        })
    };
    // A 2000-byte WRITE does not fit a 1024-byte request.
    let mut ops = into_data(1, false);
    ops.push(NfsArgop4::Write(WriteArgs {
        stateid: Stateid4::ANONYMOUS,
        offset: 0,
        stable: StableHow4::FILE_SYNC,
        data: sluice_xdr::Payload::from_chunks(vec![Bytes::from(vec![b'y'; 2000])]),
    }));
    let res = compound(&mut v.rpc, 1, ops).await;
    assert_eq!(res.status, Nfsstat4::REQ_TOO_BIG);
    assert_eq!(statuses(&res), vec![Nfsstat4::REQ_TOO_BIG]);
    assert_eq!(
        std::fs::read(s.export.join("data")).unwrap(),
        vec![b'x'; 6000]
    );
    // A 5000-byte READ does not fit a 4096-byte reply: the READ is REP_TOO_BIG.
    let mut ops = into_data(1, false);
    ops.push(read(5000));
    let n = ops.len();
    let res = compound(&mut v.rpc, 1, ops).await;
    assert_eq!(res.status, Nfsstat4::REP_TOO_BIG, "{:?}", statuses(&res));
    assert_eq!(res.results.len(), n);
    assert_eq!(res.results[n - 1].opnum(), Opnum4::READ);
    // 1000 bytes fit the reply but not the 512 cached bytes, when caching is asked.
    let mut ops = into_data(2, true);
    ops.push(read(1000));
    let res = compound(&mut v.rpc, 1, ops).await;
    assert_eq!(
        res.status,
        Nfsstat4::REP_TOO_BIG_TO_CACHE,
        "{:?}",
        statuses(&res)
    );
    assert_eq!(res.results.last().unwrap().opnum(), Opnum4::READ);
    let mut ops = into_data(3, false);
    ops.push(read(1000));
    let res = compound(&mut v.rpc, 1, ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let Some(NfsResop4::Read(Res4::Ok(r))) = res.results.last() else {
        panic!("{res:?}")
    };
    assert_eq!(r.data.to_vec(), vec![b'x'; 1000]);
}

// =============================================================================================
// Open state: stateids, share reservations, leases
// =============================================================================================

/// The names in `dir`, as the server's local file system shows them.
fn names_in(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

fn read_op(stateid: Stateid4) -> NfsArgop4 {
    NfsArgop4::Read(ReadArgs {
        stateid,
        offset: 0,
        count: 4096,
    })
}

/// READ under `stateid` of the file `fh`: the COMPOUND's status.
async fn read_status(v: &mut V4, fh: &NfsFh4, stateid: Stateid4) -> Nfsstat4 {
    v.send(vec![NfsArgop4::Putfh(fh.clone()), read_op(stateid)])
        .await
        .status
}

/// The stateid checks of §8.2 on READ, TEST_STATEID and CLOSE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateid_errors() {
    let s = TestServer::start(rw()).await;
    let mut v = V4::mount(&s, "stateid client").await;
    let (o, fh) = v
        .open(&s.export, "owner", "f", true, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    let first = o.stateid;
    assert_eq!(first.seqid, 1);
    // The same owner opening again upgrades the stateid: seqid 2, same `other`.
    let (o, _) = v
        .open(&s.export, "owner", "f", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .unwrap();
    let current = o.stateid;
    assert_eq!((current.seqid, current.other), (2, first.other));
    assert_eq!(read_status(&mut v, &fh, current).await, Nfsstat4::OK);
    let seqid_0 = Stateid4 {
        seqid: 0,
        ..current
    };
    assert_eq!(
        read_status(&mut v, &fh, seqid_0).await,
        Nfsstat4::OK,
        "seqid 0: the current one"
    );
    assert_eq!(read_status(&mut v, &fh, first).await, Nfsstat4::OLD_STATEID);
    let future = Stateid4 {
        seqid: 3,
        ..current
    };
    assert_eq!(
        read_status(&mut v, &fh, future).await,
        Nfsstat4::BAD_STATEID
    );
    let mut unknown = current;
    unknown.other[11] ^= 0xff;
    assert_eq!(
        read_status(&mut v, &fh, unknown).await,
        Nfsstat4::BAD_STATEID
    );
    // `other` starts with the server instance's epoch: another epoch is a stale stateid.
    let mut stale = current;
    stale.other[0] ^= 0xff;
    assert_eq!(
        read_status(&mut v, &fh, stale).await,
        Nfsstat4::STALE_STATEID
    );
    // The current stateid with nothing set in this COMPOUND.
    assert_eq!(
        read_status(&mut v, &fh, Stateid4::CURRENT).await,
        Nfsstat4::BAD_STATEID
    );
    // Another client's stateid is not ours.
    let mut w = V4::mount(&s, "other client").await;
    assert_eq!(
        read_status(&mut w, &fh, current).await,
        Nfsstat4::BAD_STATEID
    );
    // TEST_STATEID says the same without failing.
    let res = v
        .send(vec![NfsArgop4::TestStateid(StateidList(vec![
            current, first, unknown,
        ]))])
        .await;
    let Some(NfsResop4::TestStateid(Res4::Ok(st))) = res.results.last() else {
        panic!("{res:?}")
    };
    assert_eq!(
        st.0,
        vec![Nfsstat4::OK, Nfsstat4::OLD_STATEID, Nfsstat4::BAD_STATEID]
    );
    // CLOSE with the old seqid is refused; with the current one it ends the open, after
    // which the stateid is unknown.
    let res = v
        .send(vec![NfsArgop4::Putfh(fh.clone()), close_op(first)])
        .await;
    assert_eq!(res.status, Nfsstat4::OLD_STATEID);
    let res = v
        .send(vec![NfsArgop4::Putfh(fh.clone()), close_op(current)])
        .await;
    assert_eq!(res.status, Nfsstat4::OK);
    assert_eq!(
        read_status(&mut v, &fh, current).await,
        Nfsstat4::BAD_STATEID
    );
}

/// Share reservations (§9.7) between two clients: a deny that meets the other's access, or an
/// access that meets the other's deny, is SHARE_DENIED; CLOSE lifts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_reservations_between_two_clients() {
    let s = TestServer::start(rw()).await;
    let mut a = V4::mount(&s, "client a").await;
    let mut b = V4::mount(&s, "client b").await;
    let (oa, fh) = a
        .open(
            &s.export,
            "a",
            "f",
            true,
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_WRITE,
        )
        .await
        .unwrap();
    for (access, deny, want) in [
        // B wants to write; A denies writes.
        (
            OPEN4_SHARE_ACCESS_WRITE,
            OPEN4_SHARE_DENY_NONE,
            Err(Nfsstat4::SHARE_DENIED),
        ),
        // B would deny reads; A reads.
        (
            OPEN4_SHARE_ACCESS_READ,
            OPEN4_SHARE_DENY_READ,
            Err(Nfsstat4::SHARE_DENIED),
        ),
        // Reading without a deny is fine.
        (OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_DENY_NONE, Ok(())),
    ] {
        let got = b
            .open(&s.export, "b", "f", false, access, deny)
            .await
            .map(|_| ());
        assert_eq!(got, want, "B opens with access {access} deny {deny}");
    }
    // Anonymous writes meet A's deny too (knfsd's answer: LOCKED).
    let res = b
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Write(WriteArgs {
                stateid: Stateid4::ANONYMOUS,
                offset: 0,
                stable: StableHow4::FILE_SYNC,
                data: sluice_xdr::Payload::from_chunks(vec![Bytes::from_static(b"no")]),
            }),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::LOCKED);
    let res = a
        .send(vec![NfsArgop4::Putfh(fh.clone()), close_op(oa.stateid)])
        .await;
    assert_eq!(res.status, Nfsstat4::OK);
    let got = b
        .open(&s.export, "b2", "f", false, OPEN4_SHARE_ACCESS_WRITE, 0)
        .await
        .map(|_| ());
    assert_eq!(got, Ok(()), "A's deny went with its CLOSE");
}

/// Courtesy clients (§8.3, the module notes of `nfs4/state.rs`): a client whose lease ran out
/// keeps its open while nobody conflicts with it, and comes back to it; once it has run out
/// again, another client's conflicting OPEN expires it and succeeds, and the expired client
/// finds its session gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_client_keeps_its_open_until_another_client_conflicts() {
    let mut cfg = rw();
    cfg.lease = Duration::from_secs(1);
    let s = TestServer::start(cfg).await;
    // The lease (1 s), plus the lease driver's longest sleep (1 s), plus slack for a loaded
    // machine.
    let past_the_lease = Duration::from_millis(3500);
    let mut a = V4::mount(&s, "courtesy client a").await;
    let (oa, fh) = a
        .open(
            &s.export,
            "a",
            "f",
            true,
            OPEN4_SHARE_ACCESS_READ,
            OPEN4_SHARE_DENY_WRITE,
        )
        .await
        .unwrap();
    tokio::time::sleep(past_the_lease).await;
    // A's lease ran out. B's OPEN that does not conflict leaves A alone...
    let mut b = V4::mount(&s, "courtesy client b").await;
    let got = b
        .open(&s.export, "b", "f", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .map(|_| ());
    assert_eq!(got, Ok(()));
    // ...and A comes back to its session and its open.
    assert_eq!(read_status(&mut a, &fh, oa.stateid).await, Nfsstat4::OK);

    tokio::time::sleep(past_the_lease).await;
    // Both ran out; B's OPEN for writing conflicts with A's deny: A is expired, B proceeds.
    let got = b
        .open(
            &s.export,
            "b-writer",
            "f",
            false,
            OPEN4_SHARE_ACCESS_WRITE,
            0,
        )
        .await
        .map(|_| ());
    assert_eq!(got, Ok(()), "the courtesy client gave way");
    let res = a.send(vec![]).await;
    assert_eq!(res.status, Nfsstat4::BADSESSION, "A's session went with it");
    // (While a client holds its lease the same OPEN is SHARE_DENIED: the two-client test
    // above, under the default 90 s lease, so that a slow machine cannot expire the holder.)
}

/// A file removed while open (REMOVE, §18.25): as with a local file, READ and WRITE under the
/// open stateid go on after the name is gone, and the data goes with the last CLOSE. The
/// server keeps the file under a hidden name meanwhile (`src/nfs4/parked.rs`).
/// UNSTABLE writes held by write-behind, then SETATTR of the size and REMOVE in the next
/// COMPOUNDs: both answer OK at once (no NFS4ERR_DELAY, which costs a Linux client 100 ms or
/// more per retry), and the file keeps the held bytes below the new size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncate_and_remove_right_after_unstable_writes_are_not_delayed() {
    let s = TestServer::start(rw()).await;
    let mut v = V4::mount(&s, "settle client").await;
    let mut fhs = Vec::new();
    for name in ["cut", "gone"] {
        let (o, fh) = v
            .open(&s.export, "owner", name, true, OPEN4_SHARE_ACCESS_BOTH, 0)
            .await
            .unwrap();
        let res = v
            .send(vec![
                NfsArgop4::Putfh(fh.clone()),
                NfsArgop4::Write(WriteArgs {
                    stateid: o.stateid,
                    offset: 0,
                    stable: StableHow4::UNSTABLE,
                    data: sluice_xdr::Payload::from_chunks(vec![Bytes::from_static(
                        b"hello world",
                    )]),
                }),
                close_op(o.stateid),
            ])
            .await;
        assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
        fhs.push(fh);
    }
    let size = sluice_xdr::nfs4::attrs::AttrValues {
        size: Some(5),
        ..Default::default()
    };
    let res = v
        .send(vec![
            NfsArgop4::Putfh(fhs[0].clone()),
            NfsArgop4::Setattr(SetattrArgs {
                stateid: Stateid4::ANONYMOUS,
                obj_attributes: size.encode(),
            }),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert_eq!(std::fs::read(s.export.join("cut")).unwrap(), b"hello");
    let mut ops = walk_to(&s.export);
    ops.push(NfsArgop4::Remove(component("gone")));
    let res = v.send(ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert!(!s.export.join("gone").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_file_stays_usable_after_remove() {
    let s = TestServer::start(rw()).await;
    let mut v = V4::mount(&s, "remove client").await;
    let (o, fh) = v
        .open(
            &s.export,
            "owner",
            "doomed",
            true,
            OPEN4_SHARE_ACCESS_BOTH,
            0,
        )
        .await
        .unwrap();
    let write = |offset: u64, data: &'static [u8]| {
        NfsArgop4::Write(WriteArgs {
            stateid: o.stateid,
            offset,
            stable: StableHow4::FILE_SYNC,
            data: sluice_xdr::Payload::from_chunks(vec![Bytes::from_static(data)]),
        })
    };
    let res = v
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            write(0, b"before remove\n"),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let mut ops = walk_to(&s.export);
    ops.push(NfsArgop4::Remove(component("doomed")));
    ops.push(lookup("doomed"));
    let res = v.send(ops).await;
    assert_eq!(res.status, Nfsstat4::NOENT, "{:?}", statuses(&res));
    assert!(!s.export.join("doomed").exists());
    let res = v
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            write(14, b"after remove\n"),
            read_op(o.stateid),
            NfsArgop4::Getattr(Bitmap4::from_bits(&[num::SIZE])),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let NfsResop4::Read(Res4::Ok(r)) = &res.results[3] else {
        panic!("{res:?}")
    };
    assert_eq!(r.data.to_vec(), b"before remove\nafter remove\n");
    assert_eq!(attrs(&res.results[4]).size, Some(27));
    let names = || names_in(&s.export);
    let kept = names();
    assert!(
        kept.len() == 1 && kept[0].starts_with(".sluice-open-"),
        "kept under a hidden name while open: {kept:?}"
    );
    // The last CLOSE takes the file away.
    let res = v
        .send(vec![NfsArgop4::Putfh(fh.clone()), close_op(o.stateid)])
        .await;
    assert_eq!(res.status, Nfsstat4::OK);
    assert_eq!(names(), Vec::<String>::new(), "nothing left after CLOSE");
    let res = v
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            read_op(Stateid4::ANONYMOUS),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::STALE, "the file is gone");

    // A file nobody has open is unlinked at once, as in v3.
    std::fs::write(s.export.join("plain"), b"x").unwrap();
    let mut ops = walk_to(&s.export);
    ops.push(NfsArgop4::Remove(component("plain")));
    assert_eq!(v.send(ops).await.status, Nfsstat4::OK);
    assert_eq!(names(), Vec::<String>::new());
}

/// RENAME over a file another client has open (§18.26): the open file's data is not destroyed
/// while it is open. Its opener reads the old contents under its stateid after the rename,
/// the name shows the new file, and the old one goes with its last CLOSE (kept meanwhile
/// under a hidden name, `src/nfs4/parked.rs`). A rename over a file nobody has open leaves
/// nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_renamed_over_while_open_stays_usable_until_close() {
    let s = TestServer::start(rw()).await;
    let mut a = V4::mount(&s, "rename holder").await;
    let mut b = V4::mount(&s, "rename writer").await;
    std::fs::write(s.export.join("target"), b"old contents\n").unwrap();
    std::fs::write(s.export.join("new"), b"new contents\n").unwrap();
    let (o, fh) = a
        .open(
            &s.export,
            "holder",
            "target",
            false,
            OPEN4_SHARE_ACCESS_READ,
            0,
        )
        .await
        .unwrap();
    let rename = |from: &str, to: &str| {
        let mut ops = walk_to(&s.export);
        ops.push(NfsArgop4::Savefh(()));
        ops.push(NfsArgop4::Rename(RenameArgs {
            oldname: component(from),
            newname: component(to),
        }));
        ops
    };
    let res = b.send(rename("new", "target")).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert_eq!(
        std::fs::read(s.export.join("target")).unwrap(),
        b"new contents\n",
        "the name is the new file's"
    );
    let res = a
        .send(vec![NfsArgop4::Putfh(fh.clone()), read_op(o.stateid)])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let NfsResop4::Read(Res4::Ok(r)) = &res.results[2] else {
        panic!("{res:?}")
    };
    assert_eq!(
        r.data.to_vec(),
        b"old contents\n",
        "the opener's data survived"
    );
    let names = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&s.export)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let kept = names();
    assert!(
        kept.len() == 2 && kept[0].starts_with(".sluice-open-") && kept[1] == "target",
        "the replaced file is kept under a hidden name while open: {kept:?}"
    );
    let res = a
        .send(vec![NfsArgop4::Putfh(fh.clone()), close_op(o.stateid)])
        .await;
    assert_eq!(res.status, Nfsstat4::OK);
    assert_eq!(
        names(),
        ["target"],
        "the replaced file went with its last CLOSE"
    );

    // Nobody has `target` open now: replaced at once, as in v3.
    std::fs::write(s.export.join("newer"), b"newer\n").unwrap();
    let res = b.send(rename("newer", "target")).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert_eq!(names(), ["target"]);
    assert_eq!(std::fs::read(s.export.join("target")).unwrap(), b"newer\n");
}

/// Parked files are the server's, not the clients': READDIR leaves their hidden names out in
/// v4 and in v3 (READDIR and READDIRPLUS), and a server stopped while one was open unlinks it
/// when it starts again (from its journal in the state directory, `src/nfs4/parked.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_files_are_not_listed_and_a_restart_unlinks_them() {
    use sluice_xdr::nfs3::{Args3, Res3};
    let mut s = TestServer::start(rw()).await;
    let mut v = V4::mount(&s, "parked client").await;
    std::fs::write(s.export.join("kept"), b"k").unwrap();
    let (_open, _fh) = v
        .open(
            &s.export,
            "owner",
            "doomed",
            true,
            OPEN4_SHARE_ACCESS_BOTH,
            0,
        )
        .await
        .unwrap();
    let mut ops = walk_to(&s.export);
    ops.push(NfsArgop4::Remove(component("doomed")));
    assert_eq!(v.send(ops).await.status, Nfsstat4::OK);
    let export = s.export.clone();
    let on_disk = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&export)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let disk = on_disk();
    assert!(
        disk.len() == 2 && disk[0].starts_with(".sluice-open-"),
        "{disk:?}"
    );

    let mut ops = walk_to(&s.export);
    ops.push(NfsArgop4::Readdir(ReaddirArgs {
        cookie: 0,
        cookieverf: [0; 8],
        dircount: 4096,
        maxcount: 8192,
        attr_request: Bitmap4::from_bits(&[num::TYPE]),
    }));
    let res = v.send(ops).await;
    let Some(NfsResop4::Readdir(Res4::Ok(dir))) = res.results.last() else {
        panic!("{res:?}")
    };
    let names: Vec<&[u8]> = dir.entries.iter().map(|e| &e.name.0[..]).collect();
    assert_eq!(names, [b"kept"], "v4 READDIR");

    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let plain = support::ok(op!(
        c,
        Readdir,
        sluice_xdr::nfs3::ReaddirArgs {
            dir: root.clone(),
            cookie: 0,
            cookieverf: [0; 8],
            count: 4096,
        }
    ));
    let names: Vec<&[u8]> = plain.entries.iter().map(|e| &e.name[..]).collect();
    assert!(plain.eof);
    assert_eq!(names, [&b"."[..], b"..", b"kept"], "v3 READDIR");
    let plus = support::ok(op!(
        c,
        Readdirplus,
        sluice_xdr::nfs3::ReaddirplusArgs {
            dir: root,
            cookie: 0,
            cookieverf: [0; 8],
            dircount: 4096,
            maxcount: 8192,
        }
    ));
    let names: Vec<&[u8]> = plus.entries.iter().map(|e| &e.name[..]).collect();
    assert_eq!(names, [&b"."[..], b"..", b"kept"], "v3 READDIRPLUS");

    // Stopped with the file still open (no CLOSE): the next start unlinks it.
    drop(v);
    s.restart().await;
    assert_eq!(on_disk(), ["kept"], "the leftover went at start-up");
}

/// The state limits over TCP (module notes of `src/nfs4/state.rs`): a full client table
/// answers EXCHANGE_ID with NFS4ERR_DELAY while its clients are live and confirmed, and makes
/// room after DESTROY_CLIENTID; an unconfirmed record gives way to a newcomer; a client over
/// its session quota gets NFS4ERR_NOSPC until it destroys one; opens over the per-client and
/// the overall bound get NFS4ERR_DELAY until a CLOSE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_limits_answer_their_errors_and_recover() {
    let mut cfg = rw();
    cfg.nfs4_limits = sluice_nfs4state::StateLimits {
        clients_max: 2,
        sessions_per_client_max: 2,
        opens_per_client_max: 2,
        opens_max: 3,
    };
    let s = TestServer::start(cfg).await;
    let mut a = V4::mount(&s, "limits a").await;
    let mut b = V4::mount(&s, "limits b").await;

    // Clients: both records are live and confirmed.
    let mut c = s.connect().await;
    let res = compound(&mut c, 1, vec![exchange_id_op(b"limits c")]).await;
    assert_eq!(res.status, Nfsstat4::DELAY, "{res:?}");
    let res = compound(&mut b.rpc, 1, vec![NfsArgop4::DestroySession(b.sessionid)]).await;
    assert_eq!(res.status, Nfsstat4::OK);
    let res = compound(&mut b.rpc, 1, vec![NfsArgop4::DestroyClientid(b.clientid)]).await;
    assert_eq!(res.status, Nfsstat4::OK);
    // An unconfirmed record (EXCHANGE_ID, no CREATE_SESSION) takes the free place; the next
    // newcomer's EXCHANGE_ID takes it over, and the first's CREATE_SESSION starts over.
    let (idle, idle_seq) = exchange_id(&mut c, b"limits idle").await;
    let mut b = V4::mount(&s, "limits b again").await;
    let res = create_session(&mut c, idle, idle_seq).await;
    assert_eq!(res.status, Nfsstat4::STALE_CLIENTID, "{res:?}");

    // Sessions of one client: a has one; a second is fine, a third is over the quota.
    let new_session = |seq: u32| create_session_op(a.clientid, seq, chan());
    let (_, seq) = exchange_id(&mut a.rpc, b"limits a").await;
    let res = compound(&mut a.rpc, 1, vec![new_session(seq)]).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let Some(NfsResop4::CreateSession(Res4::Ok(second))) = res.results.first() else {
        panic!("{res:?}")
    };
    let second = second.sessionid;
    let res = compound(&mut a.rpc, 1, vec![new_session(seq + 1)]).await;
    assert_eq!(res.status, Nfsstat4::NOSPC, "{res:?}");
    let res = compound(&mut a.rpc, 1, vec![NfsArgop4::DestroySession(second)]).await;
    assert_eq!(res.status, Nfsstat4::OK);
    let res = compound(&mut a.rpc, 1, vec![new_session(seq + 2)]).await;
    assert_eq!(
        res.status,
        Nfsstat4::OK,
        "room again after DESTROY_SESSION: {res:?}"
    );

    // Opens: two per client, three overall.
    let both = OPEN4_SHARE_ACCESS_BOTH;
    let (f1, f1_fh) = a.open(&s.export, "o", "f1", true, both, 0).await.unwrap();
    a.open(&s.export, "o", "f2", true, both, 0).await.unwrap();
    let got = a
        .open(&s.export, "o", "f3", true, both, 0)
        .await
        .map(|_| ());
    assert_eq!(got, Err(Nfsstat4::DELAY), "a's own bound");
    b.open(&s.export, "o", "g1", true, both, 0).await.unwrap();
    let got = b
        .open(&s.export, "o", "g2", true, both, 0)
        .await
        .map(|_| ());
    assert_eq!(got, Err(Nfsstat4::DELAY), "the overall bound");
    let res = a
        .send(vec![NfsArgop4::Putfh(f1_fh), close_op(f1.stateid)])
        .await;
    assert_eq!(res.status, Nfsstat4::OK);
    let got = b
        .open(&s.export, "o", "g2", true, both, 0)
        .await
        .map(|_| ());
    assert_eq!(got, Ok(()), "room again after CLOSE");
}

/// OPEN with EXCLUSIVE4_1 (§18.16.3): the file is made with its createattrs in one step (the
/// mode is the file's from the start, and `attrset` says so); a retransmission with the same
/// verifier opens the file it made, one with another verifier is NFS4ERR_EXIST, and both still
/// hold after a restart, which loses the reply cache: the verifier is stored on the file
/// itself (in its times, as knfsd does). Attributes outside `suppattr_exclcreat` (the times
/// and the size) are NFS4ERR_INVAL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive4_1_creates_once_and_knows_its_retransmission_after_a_restart() {
    use sluice_xdr::nfs4::ops::{CreatVerfAttr, Createhow4, OpenArgs, OpenClaim4, Openflag4};
    use std::os::unix::fs::PermissionsExt;
    let mut s = TestServer::start(rw()).await;
    let export = s.export.clone();
    let excl = |verf: u8, attrs: sluice_xdr::nfs4::Fattr4| {
        let mut ops = walk_to(&export);
        ops.push(NfsArgop4::Open(OpenArgs {
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_BOTH,
            share_deny: 0,
            owner: nfs4::StateOwner4 {
                clientid: 0,
                owner: nfs4::Opaque4(Bytes::from_static(b"excl")),
            },
            openhow: Openflag4::Create(Createhow4::Exclusive41(CreatVerfAttr {
                verf: [verf; 8],
                attrs,
            })),
            claim: OpenClaim4::Null(component("x")),
        }));
        ops.push(NfsArgop4::Getfh(()));
        ops
    };
    let opened = |res: &nfs4::compound::Compound4Res| {
        let n = res.results.len();
        let (NfsResop4::Open(Res4::Ok(o)), NfsResop4::Getfh(Res4::Ok(fh))) =
            (&res.results[n - 2], &res.results[n - 1])
        else {
            panic!("{res:?}")
        };
        (o.clone(), fh.clone())
    };
    let mut v = V4::mount(&s, "excl client").await;
    let res = v.send(excl(1, mode_attrs(0o640))).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let (o, fh) = opened(&res);
    assert!(o.attrset.contains(num::MODE), "attrset: {:?}", o.attrset);
    let path = s.export.join("x");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&path), 0o640, "made with its mode");
    let res = v
        .send(vec![
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Getattr(Bitmap4::from_bits(&[num::SUPPATTR_EXCLCREAT])),
            close_op(o.stateid),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert_eq!(
        attrs(&res.results[2]).suppattr_exclcreat,
        Some(Bitmap4::from_bits(&[
            num::MODE,
            num::OWNER,
            num::OWNER_GROUP
        ]))
    );

    // The same verifier again (a retransmission the reply cache no longer has): its file.
    let res = v.send(excl(1, mode_attrs(0o600))).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let (o2, fh2) = opened(&res);
    assert_eq!(fh2, fh);
    assert_eq!(mode(&path), 0o640, "a retransmission sets nothing again");
    let res = v
        .send(vec![NfsArgop4::Putfh(fh.clone()), close_op(o2.stateid)])
        .await;
    assert_eq!(res.status, Nfsstat4::OK);
    let res = v.send(excl(2, mode_attrs(0o640))).await;
    assert_eq!(res.status, Nfsstat4::EXIST, "another verifier");
    let size = sluice_xdr::nfs4::attrs::AttrValues {
        size: Some(0),
        ..Default::default()
    };
    let res = v.send(excl(3, size.encode())).await;
    assert_eq!(
        res.status,
        Nfsstat4::INVAL,
        "size is not in suppattr_exclcreat"
    );

    // After a restart: the verifier is on the file. The client held state, so the server
    // is in grace until it says it has nothing to reclaim.
    drop(v);
    s.restart().await;
    let mut v = V4::mount(&s, "excl client").await;
    let res = v.send(vec![NfsArgop4::ReclaimComplete(false)]).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let res = v.send(excl(1, mode_attrs(0o640))).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert_eq!(opened(&res).1, fh, "the same file");
    let res = v.send(excl(2, mode_attrs(0o640))).await;
    assert_eq!(res.status, Nfsstat4::EXIST);
}

/// The pseudo tree across restarts (`src/nfs4/pseudo.rs`): with the same exports a client's
/// pseudo handle still works and the root's change attribute is the same; with another export
/// list the old handle is NFS4ERR_STALE and the change attribute differs, so a client looks
/// the path up and lists `/` again instead of trusting what it cached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pseudo_handles_survive_a_restart_and_go_stale_when_the_exports_change() {
    let mut s = TestServer::start(rw()).await;
    let root_of = |res: &nfs4::compound::Compound4Res| {
        let NfsResop4::Getfh(Res4::Ok(fh)) = &res.results[2] else {
            panic!("{res:?}")
        };
        (fh.clone(), attrs(&res.results[3]).change)
    };
    let ask = || {
        vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Getfh(()),
            NfsArgop4::Getattr(Bitmap4::from_bits(&[num::CHANGE])),
        ]
    };
    let mut v = V4::mount(&s, "pseudo client").await;
    let (root, change) = root_of(&v.send(ask()).await);

    drop(v);
    s.restart().await;
    let mut v = V4::mount(&s, "pseudo client").await;
    let res = v
        .send(vec![
            NfsArgop4::Putfh(root.clone()),
            NfsArgop4::Getfh(()),
            NfsArgop4::Getattr(Bitmap4::from_bits(&[num::CHANGE])),
        ])
        .await;
    assert_eq!(
        res.status,
        Nfsstat4::OK,
        "same exports: {:?}",
        statuses(&res)
    );
    assert_eq!(root_of(&res), (root.clone(), change));

    let other = s.dirs.base.join("other");
    std::fs::create_dir_all(&other).unwrap();
    s.config
        .exports
        .push(support::export_to_all(other, support::rw_options()));
    drop(v);
    s.restart().await;
    let mut v = V4::mount(&s, "pseudo client").await;
    let res = v.send(vec![NfsArgop4::Putfh(root.clone())]).await;
    assert_eq!(res.status, Nfsstat4::STALE, "another export list");
    let (_, new_change) = root_of(&v.send(ask()).await);
    assert_ne!(new_change, change, "the listing of / changed");
}

// =============================================================================================
// pNFS and the ops of part 1
// =============================================================================================

/// sluice is not a pNFS server yet: EXCHANGE_ID grants USE_NON_PNFS only, `fs_layout_types`
/// is not a supported attribute, and the layout and device ops (OPTIONAL in §17) answer
/// NFS4ERR_NOTSUPP, whatever their arguments; the 4.2 ones are OP_ILLEGAL in a 4.1 COMPOUND.
/// (LAYOUTUNAVAILABLE is for a pNFS server without layouts for one file or file system.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pnfs_ops_are_not_supported() {
    use sluice_xdr::nfs4::ops::{
        GetdeviceinfoArgs, GetdevicelistArgs, LayoutcommitArgs, LayouterrorArgs, LayoutgetArgs,
        LayoutreturnArgs, LayoutstatsArgs, EXCHGID4_FLAG_MASK_PNFS, EXCHGID4_FLAG_USE_NON_PNFS,
    };
    use sluice_xdr::nfs4::{LayoutIomode4, LayoutType4};
    let s = TestServer::start(rw()).await;
    std::fs::write(s.export.join("f"), b"data").unwrap();
    let mut c = s.connect().await;
    let e = exchange_id_res(&mut c, b"pnfs probe").await;
    assert_eq!(
        e.flags & EXCHGID4_FLAG_MASK_PNFS,
        EXCHGID4_FLAG_USE_NON_PNFS
    );
    let mut v = V4::mount(&s, "pnfs client").await;
    let mut ops = walk_to(&s.export);
    ops.push(NfsArgop4::Getattr(Bitmap4::from_bits(&[
        num::SUPPORTED_ATTRS,
    ])));
    let res = v.send(ops).await;
    let supported = attrs(res.results.last().unwrap())
        .supported_attrs
        .expect("supported_attrs");
    assert!(supported.contains(num::TYPE));
    assert!(!supported.contains(num::FS_LAYOUT_TYPES));

    let files = LayoutType4::NFSV4_1_FILES;
    let layout_ops = [
        NfsArgop4::Layoutget(LayoutgetArgs {
            layout_type: files,
            iomode: LayoutIomode4::RW,
            length: u64::MAX,
            maxcount: 4096,
            stateid: Stateid4::ANONYMOUS,
            ..LayoutgetArgs::default()
        }),
        NfsArgop4::Layoutcommit(LayoutcommitArgs {
            length: 4,
            ..LayoutcommitArgs::default()
        }),
        NfsArgop4::Layoutreturn(LayoutreturnArgs {
            layout_type: files,
            iomode: LayoutIomode4::ANY,
            ..LayoutreturnArgs::default()
        }),
        NfsArgop4::Getdeviceinfo(GetdeviceinfoArgs {
            device_id: [1; 16],
            layout_type: files,
            maxcount: 4096,
            ..GetdeviceinfoArgs::default()
        }),
        NfsArgop4::Getdevicelist(GetdevicelistArgs {
            layout_type: files,
            maxdevices: 8,
            ..GetdevicelistArgs::default()
        }),
    ];
    for op in layout_ops {
        let num = op.opnum();
        let mut ops = walk_to(&s.export);
        ops.push(lookup("f"));
        ops.push(op.clone());
        let n = ops.len() + 1;
        let res = v.send(ops).await;
        assert_eq!(
            res.status,
            Nfsstat4::NOTSUPP,
            "{num:?}: {:?}",
            statuses(&res)
        );
        assert_eq!(res.results.len(), n, "{num:?} ran last");
        assert_eq!(res.results[n - 1].opnum(), num);
        // Without a current file handle too: NOTSUPP comes first.
        let res = v.send(vec![op]).await;
        assert_eq!(res.status, Nfsstat4::NOTSUPP, "{num:?} without a handle");
    }
    // RFC 7862's LAYOUTERROR and LAYOUTSTATS: NOTSUPP in 4.2, not defined in 4.1.
    for op in [
        NfsArgop4::Layouterror(LayouterrorArgs::default()),
        NfsArgop4::Layoutstats(LayoutstatsArgs::default()),
    ] {
        let num = op.opnum();
        let mut ops = walk_to(&s.export);
        ops.push(lookup("f"));
        ops.push(op.clone());
        let res = v.send_minor(2, ops.clone()).await;
        assert_eq!(res.status, Nfsstat4::NOTSUPP, "{num:?} in 4.2");
        let res = v.send_minor(1, ops).await;
        assert_eq!(res.status, Nfsstat4::OP_ILLEGAL, "{num:?} in 4.1");
    }
}

/// Every op part 1 implements, each at least once over TCP with its effect checked, in the
/// order a client would use them (the session ops, PUTFH/PUTROOTFH/LOOKUP/GETFH/GETATTR,
/// READ/WRITE/COMMIT and the error paths are in the tests above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_implemented_op_over_tcp() {
    use sluice_xdr::nfs4::ops::{
        BindConnToSessionArgs, ACCESS4_LOOKUP, ACCESS4_MODIFY, ACCESS4_READ, CDFS4_FORE,
        SECINFO_STYLE4_CURRENT_FH,
    };
    use sluice_xdr::nfs4::Component4;
    let s = TestServer::start(rw()).await;
    let fore = sluice_xdr::nfs4::ops::ChannelAttrs4 {
        maxoperations: 32,
        ..chan()
    };
    let mut v = V4::mount_with(&s, "every op client", fore).await;
    let bits = |b: &[u32]| Bitmap4::from_bits(b);

    // ACCESS, CREATE (dir, symlink), LOOKUPP, READLINK, SAVEFH/RESTOREFH, OPEN, WRITE under
    // the current stateid, SETATTR, VERIFY, NVERIFY, GETFH.
    let mut ops = walk_to(&s.export);
    let root_at = ops.len();
    ops.extend([
        NfsArgop4::Access(AccessArgs {
            access: ACCESS4_READ | ACCESS4_LOOKUP | ACCESS4_MODIFY,
        }),
        NfsArgop4::Savefh(()),
        mkdir_op("d"),
        NfsArgop4::Lookupp(()),
        NfsArgop4::Create(CreateArgs {
            objtype: Createtype4::Lnk(Linktext4(Bytes::from_static(b"d"))),
            objname: component("ln"),
            createattrs: Default::default(),
        }),
        NfsArgop4::Readlink(()),
        NfsArgop4::Restorefh(()),
        open_op("o", "f", true, OPEN4_SHARE_ACCESS_BOTH, 0),
        NfsArgop4::Write(WriteArgs {
            stateid: Stateid4::CURRENT,
            offset: 0,
            stable: StableHow4::UNSTABLE,
            data: sluice_xdr::Payload::from_chunks(vec![Bytes::from_static(b"every op")]),
        }),
        NfsArgop4::Commit(CommitArgs {
            offset: 0,
            count: 0,
        }),
        NfsArgop4::Setattr(SetattrArgs {
            stateid: Stateid4::CURRENT,
            obj_attributes: mode_attrs(0o600),
        }),
        NfsArgop4::Verify(mode_attrs(0o600)),
        NfsArgop4::Nverify(mode_attrs(0o644)),
        NfsArgop4::Getfh(()),
    ]);
    let res = v.send(ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let at = |i: usize| &res.results[1 + root_at + i];
    let NfsResop4::Access(Res4::Ok(acc)) = at(0) else {
        panic!("{res:?}")
    };
    assert_eq!(
        acc.access & ACCESS4_MODIFY,
        ACCESS4_MODIFY,
        "root may modify"
    );
    let NfsResop4::Readlink(Res4::Ok(target)) = at(5) else {
        panic!("{res:?}")
    };
    assert_eq!(&target.0[..], b"d");
    let NfsResop4::Open(Res4::Ok(o)) = at(7) else {
        panic!("{res:?}")
    };
    let NfsResop4::Getfh(Res4::Ok(fh)) = at(13) else {
        panic!("{res:?}")
    };
    let (fh, first) = (fh.clone(), o.stateid);
    assert!(s.export.join("d").is_dir());
    assert_eq!(
        std::fs::read_link(s.export.join("ln")).unwrap(),
        std::path::Path::new("d")
    );
    assert_eq!(std::fs::read(s.export.join("f")).unwrap(), b"every op");

    // OPEN again for reading (an upgrade), OPEN_DOWNGRADE to it, TEST_STATEID, CLOSE,
    // FREE_STATEID of what CLOSE ended.
    let mut ops = walk_to(&s.export);
    ops.extend([
        open_op("o", "f", false, OPEN4_SHARE_ACCESS_READ, 0),
        NfsArgop4::OpenDowngrade(OpenDowngradeArgs {
            open_stateid: Stateid4::CURRENT,
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_READ,
            share_deny: 0,
        }),
    ]);
    let res = v.send(ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let Some(NfsResop4::OpenDowngrade(Res4::Ok(down))) = res.results.last() else {
        panic!("{res:?}")
    };
    assert_eq!((down.seqid, down.other), (3, first.other));
    let res = v
        .send(vec![
            NfsArgop4::TestStateid(StateidList(vec![*down])),
            NfsArgop4::Putfh(fh.clone()),
            close_op(*down),
            NfsArgop4::FreeStateid(*down),
        ])
        .await;
    assert_eq!(
        statuses(&res)[1..],
        [
            Nfsstat4::OK,
            Nfsstat4::OK,
            Nfsstat4::OK,
            Nfsstat4::BAD_STATEID
        ],
        "CLOSE ended the stateid FREE_STATEID was given"
    );

    // LINK, RENAME, REMOVE, READDIR, SECINFO (which consumes the current handle).
    let mut ops = vec![NfsArgop4::Putfh(fh.clone()), NfsArgop4::Savefh(())];
    ops.extend(walk_to(&s.export));
    ops.extend([
        NfsArgop4::Link(component("g")),
        NfsArgop4::Savefh(()),
        NfsArgop4::Rename(RenameArgs {
            oldname: component("g"),
            newname: component("h"),
        }),
        NfsArgop4::Remove(component("ln")),
        NfsArgop4::Readdir(ReaddirArgs {
            cookie: 0,
            cookieverf: [0; 8],
            dircount: 4096,
            maxcount: 8192,
            attr_request: bits(&[num::TYPE]),
        }),
        NfsArgop4::Secinfo(Component4(Bytes::from_static(b"h"))),
    ]);
    let res = v.send(ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let n = res.results.len();
    let NfsResop4::Readdir(Res4::Ok(listing)) = &res.results[n - 2] else {
        panic!("{res:?}")
    };
    let mut names: Vec<Vec<u8>> = listing.entries.iter().map(|e| e.name.0.to_vec()).collect();
    names.sort();
    assert_eq!(names, vec![b"d".to_vec(), b"f".to_vec(), b"h".to_vec()]);
    let NfsResop4::Secinfo(Res4::Ok(flavors)) = &res.results[n - 1] else {
        panic!("{res:?}")
    };
    assert!(!flavors.0.is_empty());
    let nlinks =
        std::os::unix::fs::MetadataExt::nlink(&std::fs::metadata(s.export.join("f")).unwrap());
    assert_eq!(nlinks, 2, "f and h are one file");

    // PUTPUBFH, SECINFO_NO_NAME, RECLAIM_COMPLETE.
    let res = v
        .send(vec![
            NfsArgop4::Putpubfh(()),
            NfsArgop4::SecinfoNoName(SECINFO_STYLE4_CURRENT_FH),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let res = v.send(vec![NfsArgop4::ReclaimComplete(false)]).await;
    assert_eq!(res.status, Nfsstat4::OK);

    // BIND_CONN_TO_SESSION from a second connection, which then carries the session.
    let mut second = s.connect().await;
    let res = compound(
        &mut second,
        1,
        vec![NfsArgop4::BindConnToSession(BindConnToSessionArgs {
            sessid: v.sessionid,
            dir: CDFS4_FORE,
            use_conn_in_rdma_mode: false,
        })],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let res = compound(
        &mut second,
        1,
        vec![
            sequence(v.sessionid, v.next_seq),
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Getattr(bits(&[num::TYPE])),
        ],
    )
    .await;
    v.next_seq += 1;
    assert_eq!(res.status, Nfsstat4::OK);
    assert_eq!(attrs(&res.results[2]).ftype, Some(Ftype4::DIR));

    // DESTROY_SESSION, then DESTROY_CLIENTID: the session and the client are gone.
    let res = compound(&mut v.rpc, 1, vec![NfsArgop4::DestroySession(v.sessionid)]).await;
    assert_eq!(res.status, Nfsstat4::OK);
    let res = compound(&mut v.rpc, 1, vec![NfsArgop4::DestroyClientid(v.clientid)]).await;
    assert_eq!(res.status, Nfsstat4::OK);
    let res = v.send(vec![]).await;
    assert_eq!(res.status, Nfsstat4::BADSESSION);
    let res = create_session(&mut v.rpc, v.clientid, 2).await;
    assert_eq!(res.status, Nfsstat4::STALE_CLIENTID);
}

// =============================================================================================
// Wireshark's opinion
// =============================================================================================

/// `tests/peers/tshark-check.sh` with `args`; its output, and whether it succeeded.
fn tshark_check(args: &[&str]) -> (bool, String) {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/peers/tshark-check.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .args(args)
        .output()
        .expect("run tshark-check.sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Stops the capture if the test ends before it did (a failed assertion must not leave
/// dumpcap running).
struct Capture(String);

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = tshark_check(&["stop", &self.0]);
    }
}

/// A whole v4.1 session from hand-made COMPOUNDs, captured on loopback and dissected by
/// tshark: no malformed or unreassembled packet, every call answered and accepted, and each
/// op the session used seen in calls and replies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tshark_dissects_a_v41_session() {
    let s = TestServer::start(rw()).await;
    std::fs::create_dir(s.export.join("sub")).unwrap();
    let pcap = s.dirs.base.join("v41-session.pcap");
    let pcap = pcap.to_str().unwrap().to_owned();
    let port = s.addr.port().to_string();
    let (ok, out) = {
        let (port, pcap) = (port.clone(), pcap.clone());
        tokio::task::spawn_blocking(move || tshark_check(&["start", &port, &pcap]))
            .await
            .unwrap()
    };
    assert!(ok, "capture did not start: {out}");
    let capture = Capture(pcap.clone());

    let mut c = s.connect().await;
    let (clientid, seq) = exchange_id(&mut c, b"tshark client").await;
    let res = create_session(&mut c, clientid, seq).await;
    let Some(NfsResop4::CreateSession(Res4::Ok(cs))) = res.results.first() else {
        panic!("{res:?}")
    };
    let sid = cs.sessionid;
    let mut ops = vec![sequence(sid, 1)];
    ops.extend(walk_to(&s.export));
    ops.extend([
        open_op("owner", "file", true, OPEN4_SHARE_ACCESS_BOTH, 0),
        NfsArgop4::Getfh(()),
        NfsArgop4::Write(WriteArgs {
            stateid: Stateid4::CURRENT,
            offset: 0,
            stable: StableHow4::UNSTABLE,
            data: sluice_xdr::Payload::from_chunks(vec![Bytes::from(vec![b'w'; 3000])]),
        }),
        NfsArgop4::Commit(CommitArgs {
            offset: 0,
            count: 0,
        }),
        NfsArgop4::Read(ReadArgs {
            stateid: Stateid4::CURRENT,
            offset: 0,
            count: 4096,
        }),
        NfsArgop4::Close(sluice_xdr::nfs4::ops::CloseArgs {
            seqid: 0,
            open_stateid: Stateid4::CURRENT,
        }),
    ]);
    let res = compound(&mut c, 1, ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let mut ops = vec![sequence(sid, 2)];
    ops.extend(walk_to(&s.export));
    ops.push(NfsArgop4::Readdir(ReaddirArgs {
        cookie: 0,
        cookieverf: [0; 8],
        dircount: 4096,
        maxcount: 8192,
        attr_request: Bitmap4::from_bits(&[num::TYPE, num::SIZE, num::MODE, num::FILEID]),
    }));
    let res = compound(&mut c, 1, ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    // NFSv4.2 READ_PLUS of a sparse file: data, hole, data as chunks in the middle of a
    // reply, then one data segment spliced as the last op.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::create(s.export.join("sparse")).unwrap();
        f.set_len(256 << 10).unwrap();
        f.write_all_at(&[b'a'; 64 << 10], 0).unwrap();
        f.write_all_at(&[b'b'; 64 << 10], 192 << 10).unwrap();
    }
    let read_plus = |offset, count| {
        NfsArgop4::ReadPlus(sluice_xdr::nfs4::ops::ReadPlusArgs {
            stateid: Stateid4::ANONYMOUS,
            offset,
            count,
        })
    };
    let mut ops = vec![sequence(sid, 3)];
    ops.extend(walk_to(&s.export));
    ops.extend([
        lookup("sparse"),
        read_plus(0, 256 << 10),
        read_plus(0, 64 << 10),
    ]);
    let res = compound(&mut c, 2, ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let res = compound(&mut c, 1, vec![NfsArgop4::DestroySession(sid)]).await;
    assert_eq!(res.status, Nfsstat4::OK);
    drop(c);

    let expected = [
        "NFS4.op.EXCHANGE_ID",
        "NFS4.op.CREATE_SESSION",
        "NFS4.op.SEQUENCE",
        "NFS4.op.PUTROOTFH",
        "NFS4.op.LOOKUP",
        "NFS4.op.OPEN",
        "NFS4.op.GETFH",
        "NFS4.op.WRITE",
        "NFS4.op.COMMIT",
        "NFS4.op.READ",
        "NFS4.op.CLOSE",
        "NFS4.op.READDIR",
        "NFS4.op.READ_PLUS",
        "NFS4.op.DESTROY_SESSION",
    ];
    let report = tokio::task::spawn_blocking(move || {
        let (ok, out) = tshark_check(&["stop", &pcap]);
        assert!(ok, "capture did not stop: {out}");
        let mut args = vec!["check", pcap.as_str(), port.as_str()];
        args.extend(expected);
        tshark_check(&args)
    })
    .await
    .unwrap();
    drop(capture);
    let (ok, out) = report;
    assert!(ok, "tshark-check failed:\n{out}");
    // The script's own verdicts, checked here too: six COMPOUNDs, all answered.
    assert!(out.contains("NFS4 COMPOUND calls=6 replies=6"), "{out}");
    assert!(out.contains("NFS4.op READ_PLUS calls=2 replies=2"), "{out}");
    assert!(out.contains("unanswered=0"), "{out}");
    assert!(out.contains("NFS4.op WRITE calls=1 replies=1"), "{out}");
}

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

/// SECINFO (RFC 8881 §18.29) on names, SECINFO_NO_NAME (§18.45), EXCHANGE_ID's state
/// protection (§18.35.4) and SET_SSV (§18.47), as knfsd answers them over AUTH_SYS:
/// - SECINFO lists AUTH_SYS then AUTH_NONE (every export takes both) for a name in the pseudo
///   tree and in an export, and consumes the current handle (§2.6.3.1.1.8): a GETFH after it
///   is NFS4ERR_NOFILEHANDLE. A missing name is NOENT, a file as the directory NOTDIR, no
///   handle NOFILEHANDLE;
/// - SECINFO_NO_NAME with style PARENT from the export root answers for the pseudo directory
///   above it, and from the pseudo root (no parent) NOENT;
/// - SP4_NONE is granted as SP4_NONE; SP4_MACH_CRED needs an integrity-protected (RPCSEC_GSS)
///   call, so over AUTH_SYS it is NFS4ERR_INVAL, as knfsd answers; SP4_SSV is
///   NFS4ERR_ENCR_ALG_UNSUPP (knfsd's answer since it gave up on SSV), and no client record is
///   left behind by either refusal;
/// - SET_SSV: no client id can have an SSV here, and knfsd's op table answers it
///   NFS4ERR_NOTSUPP; so does sluice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secinfo_state_protection_and_set_ssv_answer_as_knfsd() {
    use sluice_xdr::nfs4::ops::{
        ExchangeIdArgs, SecOidList, SetSsvArgs, SsvSpParms4, StateProtect4A, StateProtect4R,
        StateProtectOps4, SECINFO_STYLE4_PARENT,
    };
    use sluice_xdr::nfs4::{Component4, Opaque4};
    let s = TestServer::start(rw()).await;
    std::fs::write(s.export.join("file"), b"x").unwrap();
    let mut v = V4::mount(&s, "secinfo client").await;
    const AUTH_SYS: u32 = 1;
    const AUTH_NONE: u32 = 0;
    let flavors = |r: &NfsResop4| -> Vec<u32> {
        let (NfsResop4::Secinfo(Res4::Ok(l)) | NfsResop4::SecinfoNoName(Res4::Ok(l))) = r else {
            panic!("{r:?}")
        };
        l.0.iter()
            .map(|f| match f {
                sluice_xdr::nfs4::ops::Secinfo4::Flavor(n) => *n,
                other => panic!("an RPCSEC_GSS flavor: {other:?}"),
            })
            .collect()
    };

    // In the export: the name's flavors, then the handle is gone.
    let mut ops = walk_to(&s.export);
    ops.extend([NfsArgop4::Secinfo(component("file")), NfsArgop4::Getfh(())]);
    let res = v.send(ops).await;
    assert_eq!(res.status, Nfsstat4::NOFILEHANDLE, "{:?}", statuses(&res));
    let n = res.results.len();
    assert_eq!(flavors(&res.results[n - 2]), vec![AUTH_SYS, AUTH_NONE]);

    // In the pseudo tree: the first component of the export's path.
    let first = s
        .export
        .components()
        .nth(1)
        .unwrap()
        .as_os_str()
        .to_str()
        .unwrap()
        .to_string();
    let res = v
        .send(vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Secinfo(component(&first)),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert_eq!(flavors(&res.results[2]), vec![AUTH_SYS, AUTH_NONE]);

    // The errors.
    let mut ops = walk_to(&s.export);
    ops.push(NfsArgop4::Secinfo(component("missing")));
    assert_eq!(v.send(ops).await.status, Nfsstat4::NOENT);
    let mut ops = walk_to(&s.export);
    ops.extend([lookup("file"), NfsArgop4::Secinfo(component("x"))]);
    assert_eq!(v.send(ops).await.status, Nfsstat4::NOTDIR);
    let res = v
        .send(vec![NfsArgop4::Secinfo(Component4(Bytes::from_static(
            b"file",
        )))])
        .await;
    assert_eq!(res.status, Nfsstat4::NOFILEHANDLE, "{:?}", statuses(&res));

    // SECINFO_NO_NAME, style PARENT: from the export root up into the pseudo tree; nothing
    // above the pseudo root.
    let mut ops = walk_to(&s.export);
    ops.push(NfsArgop4::SecinfoNoName(SECINFO_STYLE4_PARENT));
    let res = v.send(ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert_eq!(
        flavors(res.results.last().unwrap()),
        vec![AUTH_SYS, AUTH_NONE]
    );
    let res = v
        .send(vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::SecinfoNoName(SECINFO_STYLE4_PARENT),
        ])
        .await;
    assert_eq!(res.status, Nfsstat4::NOENT, "{:?}", statuses(&res));

    // SET_SSV in a session.
    let res = v
        .send(vec![NfsArgop4::SetSsv(SetSsvArgs {
            ssv: Opaque4(Bytes::from_static(&[1; 16])),
            digest: Opaque4(Bytes::from_static(&[2; 16])),
        })])
        .await;
    assert_eq!(res.status, Nfsstat4::NOTSUPP, "{:?}", statuses(&res));
    assert_eq!(
        res.results.len(),
        2,
        "SET_SSV's own error ends the COMPOUND"
    );

    // BACKCHANNEL_CTL in the session.
    let res = v
        .send(vec![NfsArgop4::BackchannelCtl(
            sluice_xdr::nfs4::ops::BackchannelCtlArgs {
                cb_program: 0x4000_0001,
                sec_parms: sluice_xdr::nfs4::ops::CallbackSecParmsList(vec![
                    sluice_xdr::nfs4::ops::CallbackSecParms4::AuthNone,
                ]),
            },
        )])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));

    // EXCHANGE_ID's state protection.
    let mut c = s.connect().await;
    let exid = |owner: &'static [u8], sp: StateProtect4A| {
        let NfsArgop4::ExchangeId(mut a) = exchange_id_op(owner) else {
            unreachable!()
        };
        a.state_protect = sp;
        NfsArgop4::ExchangeId(ExchangeIdArgs { ..a })
    };
    let ops = StateProtectOps4 {
        must_enforce: Bitmap4::from_bits(&[sluice_xdr::nfs4::ops::Opnum4::CLOSE.0]),
        must_allow: Bitmap4::new(),
    };
    let res = compound(
        &mut c,
        1,
        vec![exid(b"mach cred", StateProtect4A::MachCred(ops.clone()))],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::INVAL, "SP4_MACH_CRED: {res:?}");
    let res = compound(
        &mut c,
        1,
        vec![exid(
            b"ssv",
            StateProtect4A::Ssv(SsvSpParms4 {
                ops,
                hash_algs: SecOidList(Vec::new()),
                encr_algs: SecOidList(Vec::new()),
                window: 1,
                num_gss_handles: 1,
            }),
        )],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::ENCR_ALG_UNSUPP, "SP4_SSV: {res:?}");
    let res = compound(&mut c, 1, vec![exid(b"none", StateProtect4A::None)]).await;
    assert_eq!(res.status, Nfsstat4::OK, "SP4_NONE: {res:?}");
    let Some(NfsResop4::ExchangeId(Res4::Ok(e))) = res.results.first() else {
        panic!("{res:?}")
    };
    assert_eq!(e.state_protect, StateProtect4R::None);
    // The refused owners left no record: the same owner with SP4_NONE is a new client whose
    // CREATE_SESSION starts at the sequence id it was given.
    let (id, seq) = exchange_id(&mut c, b"mach cred").await;
    assert_eq!(create_session(&mut c, id, seq).await.status, Nfsstat4::OK);
}

/// A file hard-linked as `a/f` and `b/f` is open through `a/f` (its handle names `a`); `a/f`
/// goes behind the server's back (a local user, or an NFSv3 client); another client then
/// REMOVEs `b/f`, the last name, through a handle that names `b`. The file is open whichever
/// name it was opened by (state is the file's, `FileSystem::state_key`): kept under a hidden
/// name, readable by the opener, gone at its CLOSE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_link_of_an_open_file_removed_by_another_name_is_kept_until_close() {
    let s = TestServer::start(rw()).await;
    let (dir_a, dir_b) = (s.export.join("a"), s.export.join("b"));
    std::fs::create_dir(&dir_a).unwrap();
    std::fs::create_dir(&dir_b).unwrap();
    std::fs::write(dir_a.join("f"), b"still here\n").unwrap();
    std::fs::hard_link(dir_a.join("f"), dir_b.join("f")).unwrap();
    let mut a = V4::mount(&s, "link opener").await;
    let mut b = V4::mount(&s, "link remover").await;
    let (o, fh) = a
        .open(&dir_a, "opener", "f", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .unwrap();
    std::fs::remove_file(dir_a.join("f")).unwrap();
    let mut ops = walk_to(&dir_b);
    ops.push(NfsArgop4::Remove(component("f")));
    let res = b.send(ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let names = || names_in(&dir_b);
    let kept = names();
    assert!(
        kept.len() == 1 && kept[0].starts_with(".sluice-open-"),
        "kept under a hidden name while open: {kept:?}"
    );
    let res = a
        .send(vec![NfsArgop4::Putfh(fh.clone()), read_op(o.stateid)])
        .await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let NfsResop4::Read(Res4::Ok(r)) = &res.results[2] else {
        panic!("{res:?}")
    };
    assert_eq!(r.data.to_vec(), b"still here\n");
    let res = a
        .send(vec![NfsArgop4::Putfh(fh), close_op(o.stateid)])
        .await;
    assert_eq!(res.status, Nfsstat4::OK);
    assert!(
        names().is_empty(),
        "gone with the last CLOSE: {:?}",
        names()
    );
}
