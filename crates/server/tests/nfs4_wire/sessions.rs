//! Sessions: the reply cache, slots, op positions and the negotiated sizes.

use super::*;

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
    // Without RECLAIM_COMPLETE, which the shared set-up sends on the highest slot: every
    // slot here is fresh.
    let mut v = V4::mount_reclaiming(&s, "slot client").await;
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
