//! Open state: stateids, share reservations, leases and courtesy clients, the state limits,
//! EXCLUSIVE4_1 creates and pseudo handles across restarts.

use super::*;

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
    let mut v = V4::mount_reclaiming(&s, "excl client").await;
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
