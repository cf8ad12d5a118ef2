//! The evaluation and the reply cache: SEQUENCE and the sessionless ops, op positions and
//! numbers, minor versions, the reply limits, retries answered from the slot, false retries,
//! the op observer, and hostile COMPOUNDs.

use super::*;

#[test]
fn session_setup_then_sequence_runs_the_ops() {
    let c = Client::new();
    let sid = mount(&c);
    let res = c.send(vec![
        seq(sid, 1),
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Getfh(()),
    ]);
    assert_eq!(res.status, Nfsstat4::OK);
    assert_eq!(statuses(&res), vec![Nfsstat4::OK; 3]);
    let Some(NfsResop4::Sequence(Res4::Ok(s))) = res.results.first() else {
        panic!("{res:?}")
    };
    assert_eq!((s.sessionid, s.sequenceid, s.slotid), (sid, 1, 0));
    assert!(PseudoFs::is_pseudo_handle(&fh_of(&res.results[2]).0));
}

#[test]
fn a_replayed_sequence_returns_the_cached_reply_bytes() {
    let c = Client::new();
    let sid = mount(&c);
    let ops = || {
        vec![
            seq(sid, 1),
            NfsArgop4::Putrootfh(()),
            lookup(b"srv"),
            NfsArgop4::Getfh(()),
        ]
    };
    let first = c.send_raw(1, ops());
    assert_eq!(decode(&first).status, Nfsstat4::OK);
    let again = c.send_raw(1, ops());
    assert_eq!(again, first, "a retry gets the cached bytes");
    // A different request on the same sequence id is a false retry, not someone's reply.
    let other = c.send(vec![seq(sid, 1), NfsArgop4::Putrootfh(())]);
    assert_eq!(other.status, Nfsstat4::SEQ_FALSE_RETRY);
    assert_eq!(other.results.len(), 1);
    // A sequence id out of order is misordered; the next one runs.
    assert_eq!(c.send(vec![seq(sid, 3)]).status, Nfsstat4::SEQ_MISORDERED);
    assert_eq!(c.send(vec![seq(sid, 2)]).status, Nfsstat4::OK);
}

#[test]
fn op_position_and_op_number_errors() {
    let c = Client::new();
    // Without SEQUENCE only the session-less ops may come first.
    let res = c.send(vec![NfsArgop4::Putrootfh(()), NfsArgop4::Getfh(())]);
    assert_eq!(res.status, Nfsstat4::OP_NOT_IN_SESSION);
    assert_eq!(statuses(&res), vec![Nfsstat4::OP_NOT_IN_SESSION]);
    // ...and then alone.
    let res = c.send(vec![
        NfsArgop4::DestroyClientid(5),
        NfsArgop4::Putrootfh(()),
    ]);
    assert_eq!(res.status, Nfsstat4::NOT_ONLY_OP);
    let sid = mount(&c);
    // SEQUENCE anywhere but first.
    let res = c.send(vec![
        seq(sid, 1),
        NfsArgop4::Putrootfh(()),
        seq(sid, 2),
        NfsArgop4::Getfh(()),
    ]);
    assert_eq!(res.status, Nfsstat4::SEQUENCE_POS);
    assert_eq!(
        statuses(&res),
        vec![Nfsstat4::OK, Nfsstat4::OK, Nfsstat4::SEQUENCE_POS]
    );
    // An undefined op number: OP_ILLEGAL, answered as op ILLEGAL.
    let res = c.send(vec![seq(sid, 2), NfsArgop4::Illegal(9999)]);
    assert_eq!(res.status, Nfsstat4::OP_ILLEGAL);
    assert_eq!(res.results[1].opnum(), Opnum4::ILLEGAL);
    // A 4.0-only op, and one that is simply not written yet: NOTSUPP.
    let res = c.send(vec![seq(sid, 3), NfsArgop4::Renew(1)]);
    assert_eq!(res.status, Nfsstat4::NOTSUPP);
    let res = c.send(vec![
        seq(sid, 4),
        NfsArgop4::Putrootfh(()),
        // A data op's checks come before the data path: the pseudo root is a directory.
        NfsArgop4::Commit(sluice_xdr::nfs4::ops::CommitArgs {
            offset: 0,
            count: 0,
        }),
    ]);
    assert_eq!(res.status, Nfsstat4::ISDIR);
    assert_eq!(res.results.len(), 3);
    // No current handle.
    let res = c.send(vec![seq(sid, 5), NfsArgop4::Getfh(())]);
    assert_eq!(res.status, Nfsstat4::NOFILEHANDLE);
    // BIND_CONN_TO_SESSION after SEQUENCE: it must be alone.
    let res = c.send(vec![
        seq(sid, 6),
        NfsArgop4::BindConnToSession(sluice_xdr::nfs4::ops::BindConnToSessionArgs {
            sessid: sid,
            dir: 3,
            use_conn_in_rdma_mode: false,
        }),
    ]);
    assert_eq!(res.status, Nfsstat4::NOT_ONLY_OP);
    // RESTOREFH with nothing saved.
    let res = c.send(vec![seq(sid, 7), NfsArgop4::Restorefh(())]);
    assert_eq!(res.status, Nfsstat4::RESTOREFH);
}

#[test]
fn minor_versions_other_than_1_and_2_are_mismatched_with_no_results() {
    let c = Client::new();
    for minor in [0, 3, 7] {
        let res = decode(&c.send_raw(minor, vec![NfsArgop4::Putrootfh(())]));
        assert_eq!(res.status, Nfsstat4::MINOR_VERS_MISMATCH, "minor {minor}");
        assert!(res.results.is_empty());
    }
}

#[test]
fn not_a_compound_is_garbage_args() {
    let c = Client::new();
    assert_eq!(c.compound(1, &[0, 0]), Outcome::GarbageArgs);
}

#[test]
fn a_reply_over_the_cached_size_is_rep_too_big_to_cache() {
    let c = Client::new();
    let sid = mount(&c);
    // 4096 bytes may be cached: enough GETATTRs of everything cross that.
    let all = crate::nfs4::map::SUPPORTED
        .iter()
        .copied()
        .filter(|b| !crate::nfs4::map::WRITE_ONLY.contains(b))
        .collect::<Vec<_>>();
    let mut ops = vec![seq(sid, 1), NfsArgop4::Putrootfh(())];
    ops.extend((0..12).map(|_| getattr(&all)));
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::REP_TOO_BIG_TO_CACHE);
    let last = res.results.last().unwrap();
    assert_eq!(last.opnum(), Opnum4::GETATTR);
    // The slot is free again: the next request runs.
    assert_eq!(c.send(vec![seq(sid, 2)]).status, Nfsstat4::OK);
}

#[test]
fn destroy_session_and_clientid() {
    let c = Client::new();
    let sid = mount_reclaiming(&c);
    let res = c.send(vec![seq(sid, 1), NfsArgop4::ReclaimComplete(false)]);
    assert_eq!(res.status, Nfsstat4::OK);
    // Alone, BIND_CONN_TO_SESSION binds and answers the direction granted.
    let res = c.send(vec![NfsArgop4::BindConnToSession(
        sluice_xdr::nfs4::ops::BindConnToSessionArgs {
            sessid: sid,
            dir: 3,
            use_conn_in_rdma_mode: false,
        },
    )]);
    let Some(NfsResop4::BindConnToSession(Res4::Ok(b))) = res.results.first() else {
        panic!("{res:?}")
    };
    assert_eq!(b.sessid, sid);
    let res = c.send(vec![NfsArgop4::DestroySession(sid)]);
    assert_eq!(res.status, Nfsstat4::OK);
    assert_eq!(c.send(vec![seq(sid, 2)]).status, Nfsstat4::BADSESSION);
}

#[test]
fn an_open_that_might_not_fit_the_cached_reply_does_not_run() {
    let c = Client::new();
    let sid = mount(&c);
    let all = crate::nfs4::map::SUPPORTED
        .iter()
        .copied()
        .filter(|b| !crate::nfs4::map::WRITE_ONLY.contains(b))
        .collect::<Vec<_>>();
    let open_worst = op_info(Opnum4::OPEN).unwrap().reply_bytes_max as usize;
    // Find a run of GETATTRs whose reply leaves room for a real OPEN result (under 100
    // bytes) but not for OPEN's largest one, within the 4096 cacheable bytes.
    let mut seqid = 0;
    let mut found = None;
    for n in 1..11 {
        seqid += 1;
        let mut ops = vec![seq(sid, seqid)];
        ops.extend(into_export());
        ops.extend((0..n).map(|_| getattr(&all)));
        let len = c.send_raw(1, ops).len();
        if len + 100 < 4096 && len + open_worst > 4096 {
            found = Some(n);
            break;
        }
    }
    let n = found.expect("a GETATTR count that fills the cache just enough");
    let mut ops = vec![seq(sid, seqid + 1)];
    ops.extend(into_export());
    ops.extend((0..n).map(|_| getattr(&all)));
    ops.push(open(
        b"o",
        b"f",
        Some(Createhow4::Unchecked(mode_attrs(0o600))),
        OPEN4_SHARE_ACCESS_BOTH,
        OPEN4_SHARE_DENY_NONE,
    ));
    let res = c.send(ops);
    assert_eq!(
        res.status,
        Nfsstat4::REP_TOO_BIG_TO_CACHE,
        "{:?}",
        statuses(&res)
    );
    assert_eq!(res.results.last().unwrap().opnum(), Opnum4::OPEN);
    // The file was not created.
    let fs = c.nfs.exports[0].fs.clone();
    let caller = Caller::with_cred(Cred::new(1000, 1000));
    assert!(fs.lookup(&caller, &fs.root_handle(), b"f").is_err());
}

mod hostile {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Random bytes, and random op numbers with random argument bytes after a well-formed
        /// COMPOUND header (inside a session or not), never panic and always get an answer
        /// that decodes (or GARBAGE_ARGS).
        #[test]
        fn random_compounds_never_panic(
            raw in proptest::collection::vec(any::<u8>(), 0..256),
            ops in proptest::collection::vec((0u32..80, proptest::collection::vec(any::<u8>(), 0..64)), 0..8),
            in_session in any::<bool>(),
            minor in 0u32..4,
        ) {
            let c = Client::new();
            let _ = c.compound(1, &raw);
            let sid = mount(&c);
            let mut w = Writer::new();
            w.put_opaque(b"t1");
            w.put_u32(minor);
            w.put_u32(ops.len() as u32 + u32::from(in_session));
            if in_session {
                seq(sid, 1).pack(&mut w);
            }
            let mut record = w.into_bytes().to_vec();
            for (op, args) in &ops {
                record.extend_from_slice(&op.to_be_bytes());
                record.extend_from_slice(args);
            }
            match c.compound(1, &record) {
                Outcome::Reply(b) => {
                    let segs = [b];
                    let mut r = Reader::new(&segs);
                    prop_assert!(Compound4Res::decode(&mut r, &CompoundLimits::default()).is_ok());
                }
                Outcome::GarbageArgs => {}
            }
        }
    }
}

#[test]
fn destroy_session_alone_needs_a_bound_connection() {
    let c = Client::new();
    let sid = mount(&c);
    // From a connection the session never saw: refused, the session lives on.
    let mut w = Writer::new();
    Compound4Args {
        tag: Utf8Str(Bytes::from_static(b"t1")),
        minorversion: 1,
        ops: vec![NfsArgop4::DestroySession(sid)],
    }
    .pack(&mut w);
    let Outcome::Reply(b) = c.compound(99, &w.into_bytes()) else {
        panic!("GARBAGE_ARGS")
    };
    assert_eq!(decode(&b).status, Nfsstat4::CONN_NOT_BOUND_TO_SESSION);
    assert_eq!(c.send(vec![seq(sid, 1)]).status, Nfsstat4::OK);
}

#[test]
fn encoded_len_counts_a_read_results_chunks_and_padding() {
    let r = NfsResop4::Read(Res4::Ok(ReadResOk {
        eof: true,
        data: sluice_xdr::Payload::from_chunks(vec![
            Bytes::from_static(b"abc"),
            Bytes::from(vec![7u8; 70_000]),
        ]),
    }));
    let mut w = Writer::new();
    r.pack(&mut w);
    assert_eq!(encoded_len(&r), w.into_bytes().len());
    assert_eq!(encoded_len(&r), 4 + 4 + 4 + 4 + 70_003 + 1);
}

#[test]
fn backchannel_ctl_sets_the_sessions_program_and_needs_a_session() {
    use sluice_nfs4state::callback::PathState;
    use sluice_xdr::nfs4::ops::{BackchannelCtlArgs, CallbackSecParms4};
    let c = Client::new();
    let ctl = || {
        NfsArgop4::BackchannelCtl(BackchannelCtlArgs {
            cb_program: 0x4000_0007,
            sec_parms: CallbackSecParmsList(vec![CallbackSecParms4::AuthNone]),
        })
    };
    let res = c.send(vec![ctl()]);
    assert_eq!(res.status, Nfsstat4::OP_NOT_IN_SESSION);
    let sid = mount(&c);
    let res = c.send(vec![seq(sid, 1), ctl()]);
    assert_eq!(statuses(&res), vec![Nfsstat4::OK; 2]);
    let st = c.nfs.state();
    assert_eq!(st.session(&sid).unwrap().cb.program(), 0x4000_0007);
    assert_eq!(st.callback_path(&sid), Some(PathState::Unknown));
}

#[test]
fn the_op_observer_sees_every_op_with_its_status() {
    use crate::stats::Stats;
    use std::sync::atomic::Ordering::Relaxed;
    let mut c = Client::new();
    let stats = Arc::new(Stats::default());
    c.nfs_mut().op_observer = Some(stats.clone());
    let sid = mount_reclaiming(&c);
    let res = c.send(vec![seq(sid, 1), NfsArgop4::Putrootfh(()), lookup(b"nope")]);
    assert_eq!(res.status, Nfsstat4::NOENT);
    // Not in a session: counted under the op, as an error.
    c.send(vec![NfsArgop4::Putrootfh(())]);
    let count = |op: Opnum4| {
        let p = stats.nfs4_ops.get(op).unwrap();
        (p.calls.load(Relaxed), p.errors.load(Relaxed))
    };
    assert_eq!(count(Opnum4::EXCHANGE_ID), (1, 0));
    assert_eq!(count(Opnum4::CREATE_SESSION), (1, 0));
    assert_eq!(count(Opnum4::SEQUENCE), (1, 0));
    assert_eq!(count(Opnum4::PUTROOTFH), (2, 1));
    assert_eq!(count(Opnum4::LOOKUP), (1, 1));
    assert_eq!(count(Opnum4::GETFH), (0, 0));
}

/// The slot's digest covers every payload byte and the caller (see
/// `sluice_nfs4state::sessions::digest`), and not how the record was cut into segments.
#[test]
fn a_retry_differing_in_one_payload_byte_or_its_user_is_a_false_retry() {
    let (mut c, writes) = direct_client();
    let sid = mount(&c);
    let fs = c.nfs.exports[0].fs.clone();
    let owner = Caller::with_cred(Cred::new(1000, 1000));
    fs.create(
        &owner,
        &fs.root_handle(),
        b"f",
        CreateHow::Unchecked(SetAttr::default()),
    )
    .unwrap();
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut flipped = payload.clone();
    flipped[100_001] ^= 0x01;
    let (payload, flipped): (&'static [u8], &'static [u8]) = (payload.leak(), flipped.leak());
    let ops = |data: &'static [u8]| {
        let mut ops = vec![seq(sid, 1)];
        ops.extend(into_export());
        ops.extend([
            lookup(b"f"),
            write_op(Stateid4::ANONYMOUS, 0, StableHow4::FILE_SYNC, data),
        ]);
        ops
    };
    let count = || writes.load(std::sync::atomic::Ordering::SeqCst);
    let first = c.send_raw(1, ops(payload));
    assert_eq!(decode(&first).status, Nfsstat4::OK);
    // One byte in the middle of the payload differs: not the same request.
    let res = decode(&c.send_raw(1, ops(flipped)));
    assert_eq!(res.status, Nfsstat4::SEQ_FALSE_RETRY);
    // The same bytes cut into other segments (as a retry arrives): the cached reply.
    let record = record_of(ops(payload));
    let segs: Vec<Bytes> = (0..record.len())
        .step_by(997)
        .map(|i| record.slice(i..(i + 997).min(record.len())))
        .collect();
    let call = Call {
        addr: c.addr,
        conn: 1,
        xprtsec: c.xprtsec,
        cred: &c.cred,
        now: c.now,
    };
    let Step::Reply(r) = c.nfs.begin(&segs, 0, false).step(&c.nfs, &call) else {
        panic!("a replay is answered at once")
    };
    assert_eq!(join(r.segs), first);
    // The same bytes from another user: not the same request either.
    c.cred = Credentials::Sys(AuthSys {
        stamp: 1,
        machine_name: Bytes::from_static(b"client"),
        uid: 1001,
        gid: 1000,
        gids: Vec::new(),
    });
    let res = decode(&c.send_raw(1, ops(payload)));
    assert_eq!(res.status, Nfsstat4::SEQ_FALSE_RETRY);
    assert_eq!(count(), 1, "nothing ran again");
}

/// An uncached request's digest samples its first bytes and its length
/// (`UNCACHED_DIGEST_BYTES`): a retry that differs only deep in a WRITE's data is answered as
/// an uncached retry (nothing replayed, nothing run again), one that differs early or in length
/// is still a false retry.
#[test]
fn an_uncached_retry_is_told_apart_by_its_first_bytes_and_length() {
    let (c, writes) = direct_client();
    let sid = mount(&c);
    let fs = c.nfs.exports[0].fs.clone();
    let owner = Caller::with_cred(Cred::new(1000, 1000));
    fs.create(
        &owner,
        &fs.root_handle(),
        b"f",
        CreateHow::Unchecked(SetAttr::default()),
    )
    .unwrap();
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut deep = payload.clone();
    deep[100_001] ^= 0x01;
    let mut early = payload.clone();
    early[10] ^= 0x01;
    let shorter = payload[..199_996].to_vec();
    let leak = |v: Vec<u8>| -> &'static [u8] { v.leak() };
    let (payload, deep, early, shorter) = (leak(payload), leak(deep), leak(early), leak(shorter));
    let ops = |data: &'static [u8]| {
        let mut ops = vec![seq_uncached(sid, 1)];
        ops.extend(into_export());
        ops.extend([
            lookup(b"f"),
            write_op(Stateid4::ANONYMOUS, 0, StableHow4::FILE_SYNC, data),
        ]);
        ops
    };
    let count = || writes.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(decode(&c.send_raw(1, ops(payload))).status, Nfsstat4::OK);
    let res = decode(&c.send_raw(1, ops(deep)));
    assert_eq!(res.status, Nfsstat4::RETRY_UNCACHED_REP);
    let res = decode(&c.send_raw(1, ops(early)));
    assert_eq!(res.status, Nfsstat4::SEQ_FALSE_RETRY);
    let res = decode(&c.send_raw(1, ops(shorter)));
    assert_eq!(res.status, Nfsstat4::SEQ_FALSE_RETRY);
    assert_eq!(count(), 1, "nothing ran again");
}

#[test]
fn a_retried_write_is_answered_from_the_slot_and_not_run_again() {
    let (c, writes) = direct_client();
    let sid = mount(&c);
    let fs = c.nfs.exports[0].fs.clone();
    let owner = Caller::with_cred(Cred::new(1000, 1000));
    let f = fs
        .create(
            &owner,
            &fs.root_handle(),
            b"f",
            CreateHow::Unchecked(SetAttr::default()),
        )
        .unwrap()
        .fh;
    let write = |s: NfsArgop4, data: &'static [u8]| {
        let mut ops = vec![s];
        ops.extend(into_export());
        ops.extend([
            lookup(b"f"),
            write_op(Stateid4::ANONYMOUS, 0, StableHow4::FILE_SYNC, data),
        ]);
        c.send_raw(1, ops)
    };
    let count = || writes.load(std::sync::atomic::Ordering::SeqCst);
    let first = write(seq(sid, 1), b"first");
    assert_eq!(decode(&first).status, Nfsstat4::OK);
    assert_eq!(count(), 1);
    // Someone else writes the file meanwhile.
    fs.write(
        &owner,
        &f,
        0,
        &[Bytes::from_static(b"other")],
        StableHow::FileSync,
    )
    .unwrap();
    // The retry: the same bytes back, and the WRITE does not run again.
    assert_eq!(write(seq(sid, 1), b"first"), first);
    assert_eq!(count(), 1);
    let mut buf = [0u8; 5];
    fs.read(&owner, &f, 0, &mut [&mut buf[..]]).unwrap();
    assert_eq!(&buf, b"other", "the retry did not write again");
    // A different request on the same sequence id is a false retry, not run either.
    let res = decode(&write(seq(sid, 1), b"third"));
    assert_eq!(res.status, Nfsstat4::SEQ_FALSE_RETRY);
    assert_eq!(count(), 1);
    // A WRITE whose client did not ask for caching: its retry is refused, never re-run.
    assert_eq!(
        decode(&write(seq_uncached(sid, 2), b"fourth")).status,
        Nfsstat4::OK
    );
    assert_eq!(count(), 2);
    let res = decode(&write(seq_uncached(sid, 2), b"fourth"));
    assert_eq!(res.status, Nfsstat4::RETRY_UNCACHED_REP);
    // SEQUENCE succeeds and the op after it carries the error (RFC 8881 §2.10.6.1.3).
    let [NfsResop4::Sequence(Res4::Ok(s)), NfsResop4::Putrootfh(e)] = &res.results[..] else {
        panic!("{res:?}")
    };
    assert_eq!((s.sequenceid, *e), (2, Nfsstat4::RETRY_UNCACHED_REP));
    assert_eq!(count(), 2);
    // The slot was left as it was: the next sequence id runs.
    assert_eq!(
        decode(&write(seq_uncached(sid, 3), b"fifth")).status,
        Nfsstat4::OK
    );
    assert_eq!(count(), 3);
    // A lone SEQUENCE retried is answered again.
    assert_eq!(c.send(vec![seq_uncached(sid, 4)]).status, Nfsstat4::OK);
    let res = c.send(vec![seq_uncached(sid, 4)]);
    assert_eq!(statuses(&res), [Nfsstat4::OK]);
}

#[test]
fn a_write_payload_is_decoded_as_slices_of_the_received_record() {
    let (c, _) = direct_client();
    let sid = mount(&c);
    let fs = c.nfs.exports[0].fs.clone();
    let owner = Caller::with_cred(Cred::new(1000, 1000));
    fs.create(
        &owner,
        &fs.root_handle(),
        b"f",
        CreateHow::Unchecked(SetAttr::default()),
    )
    .unwrap();
    let payload: &'static [u8] = &[0x5a; 100_000];
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        lookup(b"f"),
        write_op(Stateid4::ANONYMOUS, 0, StableHow4::UNSTABLE, payload),
    ]);
    // An RPC header's worth of bytes in front, and the record in 64 KiB segments as the
    // receive path hands it over.
    let header = [0xeeu8; 40];
    let mut whole = header.to_vec();
    whole.extend_from_slice(&record_of(ops));
    let whole = Bytes::from(whole);
    let segs: Vec<Bytes> = (0..whole.len())
        .step_by(65_536)
        .map(|at| whole.slice(at..(at + 65_536).min(whole.len())))
        .collect();
    let range = whole.as_ptr() as usize..whole.as_ptr() as usize + whole.len();
    let call = Call {
        addr: c.addr,
        conn: 1,
        xprtsec: c.xprtsec,
        cred: &c.cred,
        now: c.now,
    };
    let mut eval = c.nfs.begin(&segs, header.len(), true);
    let Step::Data(req) = eval.step(&c.nfs, &call) else {
        panic!("the WRITE")
    };
    let DataOp::Write { data, .. } = &req.op else {
        panic!("{:?}", req.op)
    };
    assert!(data.len() >= 2, "the payload straddles a segment boundary");
    assert_eq!(data.iter().map(|d| d.len()).sum::<usize>(), payload.len());
    for d in data {
        let at = d.as_ptr() as usize;
        assert!(
            range.contains(&at) && range.contains(&(at + d.len() - 1)),
            "not a copy"
        );
    }
    eval.resume(DirectData::default().run(req).map_err(map::status));
    let Step::Reply(r) = eval.step(&c.nfs, &call) else {
        panic!("the reply")
    };
    assert_eq!(r.status, Nfsstat4::OK);
    let f = fs.lookup(&owner, &fs.root_handle(), b"f").unwrap().fh;
    assert_eq!(fs.getattr(&f).unwrap().size, payload.len() as u64);
}
