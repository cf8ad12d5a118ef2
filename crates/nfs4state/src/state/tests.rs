use super::*;
use crate::delegations::table::SizeChange;
use crate::ids::SplitMix;
use crate::locks::LockRefused;
use proptest::prelude::*;
use sluice_xdr::nfs4::ops::{
    CallbackSecParmsList, ChannelAttrs4, ClientOwner4, StateProtect4A, EXCHGID4_FLAG_CONFIRMED_R,
    SEQ4_STATUS_CB_PATH_DOWN,
};
use std::time::Duration;

fn state() -> State4 {
    let cfg = Config4 {
        boot_epoch: 77,
        delegs: crate::delegations::table::DelegConfig {
            write: true,
            ..Default::default()
        },
        ..Config4::default()
    };
    State4::new(cfg, Box::new(SplitMix(5)))
}

fn p(s: &'static [u8]) -> Principal {
    Principal(Bytes::from_static(s))
}

fn exid(owner: &'static [u8], verifier: u8) -> ExchangeIdArgs {
    ExchangeIdArgs {
        clientowner: ClientOwner4 {
            verifier: [verifier; 8],
            ownerid: Opaque4(Bytes::from_static(owner)),
        },
        flags: 0,
        state_protect: StateProtect4A::None,
        client_impl_id: ImplIdList(Vec::new()),
    }
}

fn chan(slots: u32) -> ChannelAttrs4 {
    crate::testkit::channel_attrs(slots)
}

fn cs(clientid: ClientId4, sequence: u32, flags: u32) -> CreateSessionArgs {
    CreateSessionArgs {
        clientid,
        sequence,
        flags,
        fore_chan_attrs: chan(8),
        back_chan_attrs: chan(2),
        cb_program: 0x4000_0000,
        sec_parms: CallbackSecParmsList(Vec::new()),
    }
}

fn seq(slotid: u32, sequenceid: u32) -> SequenceCall {
    SequenceCall {
        slotid,
        sequenceid,
        highest_slotid: 7,
        cachethis: true,
        request_bytes: 300,
        op_count: 4,
        digest: sequenceid as u64,
        conn: 1,
    }
}

/// EXCHANGE_ID + CREATE_SESSION + RECLAIM_COMPLETE: a confirmed client with one session,
/// free to open and lock, as a client comes up with nothing to reclaim.
fn mount(st: &mut State4, now: Instant, owner: &'static [u8]) -> (ClientId4, SessionId4) {
    let (c, s) = mount_reclaiming(st, now, owner);
    st.reclaim_complete(now, c, false).unwrap();
    (c, s)
}

/// EXCHANGE_ID + CREATE_SESSION, no RECLAIM_COMPLETE yet: a client that may still reclaim
/// and may not yet take new state (`crate::recovery`, "Before RECLAIM_COMPLETE").
fn mount_reclaiming(
    st: &mut State4,
    now: Instant,
    owner: &'static [u8],
) -> (ClientId4, SessionId4) {
    let e = st.exchange_id(now, &exid(owner, 1), &p(b"u")).unwrap();
    let s = st
        .create_session(now, &cs(e.clientid, e.sequenceid, 0), &p(b"u"), 1)
        .unwrap();
    (e.clientid, s.sessionid)
}

#[test]
fn mount_open_close_unmount() {
    let now = Instant::now();
    let mut st = state();
    let (c, s) = mount(&mut st, now, b"host-a");
    assert!(st.clients().get(c).unwrap().confirmed);
    let e = st.exchange_id(now, &exid(b"host-a", 1), &p(b"u")).unwrap();
    assert_eq!(e.clientid, c);
    assert_ne!(e.flags & EXCHGID4_FLAG_CONFIRMED_R, 0);

    let out = st.sequence(now, &s, &seq(0, 1)).unwrap();
    assert_eq!(out.decision, SlotDecision::Execute);
    assert_eq!(out.clientid, c);
    assert_eq!(out.res.highest_slotid, 7);
    let open = st.open(now, c, b"owner", b"fh-1", 3, 0).unwrap();
    st.complete(&s, 0, Some(Bytes::from_static(b"open reply")));
    let replay = st.sequence(now, &s, &seq(0, 1)).unwrap();
    assert_eq!(
        replay.decision,
        SlotDecision::Replay(Bytes::from_static(b"open reply"))
    );
    assert_eq!(st.opens().len(), 1, "the replay opened nothing");

    assert_eq!(st.destroy_clientid(c), Err(Nfsstat4::CLIENTID_BUSY));
    assert_eq!(st.close(c, &open, b"fh-1"), Ok(Stateid4::INVALID));
    assert_eq!(st.destroy_session(&s, None), Ok(()));
    assert_eq!(st.destroy_session(&s, None), Err(Nfsstat4::BADSESSION));
    assert_eq!(
        st.sequence(now, &s, &seq(0, 2)).err(),
        Some(Nfsstat4::BADSESSION)
    );
    assert_eq!(st.destroy_clientid(c), Ok(()));
    assert_eq!(st.destroy_clientid(c), Err(Nfsstat4::STALE_CLIENTID));
    assert!(st.clients().is_empty());
}

#[test]
fn create_session_retry_returns_the_same_session() {
    let now = Instant::now();
    let mut st = state();
    let e = st.exchange_id(now, &exid(b"a", 1), &p(b"u")).unwrap();
    let args = cs(
        e.clientid,
        e.sequenceid,
        CREATE_SESSION4_FLAG_CONN_BACK_CHAN | 1,
    );
    let first = st.create_session(now, &args, &p(b"u"), 1).unwrap();
    assert_eq!(
        first.flags, CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
        "no PERSIST"
    );
    assert_eq!(first.fore_chan_attrs.maxrequests, 8);
    assert_eq!(first.back_chan_attrs.maxrequests, 1);
    let again = st.create_session(now, &args, &p(b"u"), 1).unwrap();
    assert_eq!(again, first);
    assert_eq!(st.sessions_len(), 1);
    let mut skip = args.clone();
    skip.sequence += 2;
    assert_eq!(
        st.create_session(now, &skip, &p(b"u"), 1),
        Err(Nfsstat4::SEQ_MISORDERED)
    );
    let mut other = args.clone();
    other.clientid ^= 1 << 40;
    assert_eq!(
        st.create_session(now, &other, &p(b"u"), 1),
        Err(Nfsstat4::STALE_CLIENTID)
    );
    // The back channel was asked for on connection 1; once it closes, SEQUENCE says so.
    st.conn_closed(1);
    let out = st.sequence(now, &first.sessionid, &seq(0, 1)).unwrap();
    assert_ne!(out.res.status_flags & SEQ4_STATUS_CB_PATH_DOWN, 0);
}

#[test]
fn sessions_per_client_are_bounded_with_nospc() {
    let now = Instant::now();
    let mut st = state();
    let e = st.exchange_id(now, &exid(b"a", 1), &p(b"u")).unwrap();
    let max = st.config().sessions_per_client_max as u32;
    for i in 0..max {
        st.create_session(now, &cs(e.clientid, 1 + i, 0), &p(b"u"), 1)
            .unwrap();
    }
    let over = cs(e.clientid, 1 + max, 0);
    assert_eq!(
        st.create_session(now, &over, &p(b"u"), 1),
        Err(Nfsstat4::NOSPC),
        "the client's quota: waiting would not help"
    );
    assert_eq!(st.sessions_len(), max as usize);
}

#[test]
fn a_restarted_client_loses_its_old_state_when_it_confirms() {
    let now = Instant::now();
    let mut st = state();
    let (c, s) = mount(&mut st, now, b"a");
    st.open(now, c, b"o", b"f", 1, 3).unwrap();
    let e = st.exchange_id(now, &exid(b"a", 2), &p(b"u")).unwrap();
    assert_ne!(e.clientid, c);
    assert_eq!(
        st.opens().len(),
        1,
        "kept until the new record is confirmed"
    );
    st.create_session(now, &cs(e.clientid, e.sequenceid, 0), &p(b"u"), 2)
        .unwrap();
    st.reclaim_complete(now, e.clientid, false).unwrap();
    assert!(st.opens().is_empty());
    assert!(st.session(&s).is_none());
    assert!(st.clients().get(c).is_err());
    assert!(st.open(now, e.clientid, b"o", b"f", 3, 3).is_ok());
}

#[test]
fn destroy_session_waits_for_other_requests() {
    let now = Instant::now();
    let mut st = state();
    let (_, s) = mount(&mut st, now, b"a");
    st.sequence(now, &s, &seq(0, 1)).unwrap();
    st.sequence(now, &s, &seq(1, 1)).unwrap();
    assert_eq!(st.destroy_session(&s, Some((s, 0))), Err(Nfsstat4::DELAY));
    st.complete(&s, 1, None);
    assert_eq!(st.destroy_session(&s, Some((s, 0))), Ok(()));
}

#[test]
fn leases_expire_and_courtesy_clients_keep_state_until_a_conflict() {
    let t0 = Instant::now();
    let lease = Duration::from_secs(90);
    let mut st = state();
    let (a, sa) = mount(&mut st, t0, b"a");
    let (b, _) = mount(&mut st, t0, b"b");
    let idle = st.exchange_id(t0, &exid(b"idle", 1), &p(b"u")).unwrap();
    st.destroy_session(&sa, None).unwrap();
    let oa = st.open(t0, a, b"o", b"f", 3, 3).unwrap();
    assert_eq!(st.next_wakeup(), Some(t0 + lease));

    // b keeps renewing; a and the unconfirmed record do not.
    let t1 = t0 + Duration::from_secs(60);
    let (_, sb) = (
        b,
        st.sessions.values().find(|s| s.clientid == b).unwrap().id,
    );
    st.sequence(t1, &sb, &seq(0, 1)).unwrap();
    st.complete(&sb, 0, None);
    assert!(st.tick(t0 + lease - Duration::from_millis(1)).is_empty());
    let t2 = t0 + lease;
    assert_eq!(
        st.tick(t2),
        vec![idle.clientid],
        "no state: expired at once"
    );
    let rec = st.clients().get(a).unwrap();
    assert_eq!(
        rec.courtesy_since,
        Some(t2),
        "a keeps its open as a courtesy client"
    );
    assert_eq!(st.check_io(a, &oa, b"f", true), Ok(IoState::Open(oa.other)));

    // b wants the file: a is expired for real and b's OPEN succeeds.
    st.sequence(t2, &sb, &seq(0, 2)).unwrap();
    let ob = st.open(t2, b, b"o", b"f", 1, 0);
    assert!(ob.is_ok());
    assert!(st.clients().get(a).is_err());
    assert_eq!(st.opens().count_for(a), 0);

    // A live client's share reservation is not broken.
    assert_eq!(st.open(t2, b, b"p", b"g", 3, 3).map(|_| ()), Ok(()));
    let (c, _) = mount(&mut st, t2, b"c");
    assert_eq!(
        st.open(t2, c, b"o", b"g", 1, 0),
        Err(Nfsstat4::SHARE_DENIED)
    );
}

#[test]
fn a_courtesy_client_that_comes_back_is_ordinary_again_and_courtesy_ends() {
    let t0 = Instant::now();
    let mut st = state();
    let (a, sa) = mount(&mut st, t0, b"a");
    let t1 = t0 + Duration::from_secs(100);
    assert!(st.tick(t1).is_empty(), "a session is state: courtesy");
    assert!(st.clients().get(a).unwrap().courtesy_since.is_some());
    st.sequence(t1, &sa, &seq(0, 1)).unwrap();
    st.complete(&sa, 0, None);
    assert_eq!(st.clients().get(a).unwrap().courtesy_since, None);
    let t2 = t1 + Duration::from_secs(90);
    st.tick(t2);
    let day = st.config().courtesy_max;
    assert_eq!(st.next_wakeup(), Some(t2 + day));
    assert_eq!(st.tick(t2 + day), vec![a]);
    assert_eq!(st.sessions_len(), 0);
    assert_eq!(st.next_wakeup(), None);
}

#[test]
fn test_and_free_stateid_and_reclaim_complete() {
    let now = Instant::now();
    let mut st = state();
    let (c, _) = mount_reclaiming(&mut st, now, b"a");
    // No new state before RECLAIM_COMPLETE, out of grace too; rca_one_fs does not count.
    assert_eq!(st.open(now, c, b"o", b"f", 1, 0), Err(Nfsstat4::GRACE));
    assert_eq!(st.reclaim_complete(now, c, true), Ok(()));
    assert_eq!(st.open(now, c, b"o", b"f", 1, 0), Err(Nfsstat4::GRACE));
    assert_eq!(st.reclaim_complete(now, c, false), Ok(()));
    let o = st.open(now, c, b"o", b"f", 1, 0).unwrap();
    let bad = Stateid4 {
        seqid: 1,
        other: [9; 12],
    };
    assert_eq!(
        st.test_stateids(c, &[o, bad, Stateid4 { seqid: 2, ..o }]),
        vec![Nfsstat4::OK, Nfsstat4::BAD_STATEID, Nfsstat4::BAD_STATEID]
    );
    assert_eq!(st.free_stateid(c, &o), Nfsstat4::LOCKS_HELD);
    assert_eq!(st.reclaim_complete(now, c, true), Ok(()));
    assert_eq!(
        st.reclaim_complete(now, c, false),
        Err(Nfsstat4::COMPLETE_ALREADY)
    );
    assert_eq!(st.open_downgrade(c, &o, b"f", 0, 0), Err(Nfsstat4::INVAL));
}

// ----- random op sequences ----------------------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    Exchange {
        who: u8,
        verifier: u8,
    },
    Create {
        who: u8,
        skew: u8,
    },
    Sequence {
        who: u8,
        slot: u8,
        retry: bool,
        cache: bool,
    },
    Open {
        who: u8,
        owner: u8,
        file: u8,
        access: u8,
        deny: u8,
    },
    Close {
        who: u8,
        pick: u8,
    },
    Downgrade {
        who: u8,
        pick: u8,
        access: u8,
        deny: u8,
    },
    DestroySession {
        who: u8,
    },
    DestroyClient {
        who: u8,
    },
    Wait {
        secs: u16,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let who = 0u8..4;
    prop_oneof![
        2 => (who.clone(), 0u8..2).prop_map(|(who, verifier)| Op::Exchange { who, verifier }),
        3 => (who.clone(), prop_oneof![3 => Just(1u8), 1 => 0u8..3])
            .prop_map(|(who, skew)| Op::Create { who, skew }),
        8 => (who.clone(), 0u8..10, any::<bool>(), any::<bool>())
            .prop_map(|(who, slot, retry, cache)| Op::Sequence { who, slot, retry, cache }),
        4 => (who.clone(), 0u8..2, 0u8..3, 0u8..5, 0u8..5)
            .prop_map(|(who, owner, file, access, deny)| Op::Open { who, owner, file, access, deny }),
        2 => (who.clone(), any::<u8>()).prop_map(|(who, pick)| Op::Close { who, pick }),
        1 => (who.clone(), any::<u8>(), 0u8..4, 0u8..4)
            .prop_map(|(who, pick, access, deny)| Op::Downgrade { who, pick, access, deny }),
        1 => who.clone().prop_map(|who| Op::DestroySession { who }),
        1 => who.clone().prop_map(|who| Op::DestroyClient { who }),
        1 => prop_oneof![4 => 0u16..40, 1 => 0u16..200].prop_map(|secs| Op::Wait { secs }),
    ]
}

/// What the model client `who` knows.
#[derive(Debug, Default, Clone)]
struct Model {
    clientid: Option<ClientId4>,
    cs_seq: u32,
    session: Option<SessionId4>,
    slots: [u32; 10],
    stateids: Vec<(Stateid4, Bytes)>,
    /// The client sent RECLAIM_COMPLETE (after its first session): it may open.
    completed: bool,
}

const OWNERS: [&[u8]; 4] = [b"c0", b"c1", b"c2", b"c3"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn random_op_sequences_keep_the_invariants(ops in proptest::collection::vec(op(), 1..300)) {
        let cfg = Config4 {
            clients_max: 3,
            sessions_per_client_max: 2,
            opens_per_client_max: 4,
            opens_max: 6,
            // Two full sessions' worth: the budget binds in some runs.
            reply_cache_bytes_max: 2 * 8 * 4096,
            ..Config4::default()
        };
        let mut st = State4::new(cfg, Box::new(SplitMix(11)));
        let mut now = Instant::now();
        let mut models: Vec<Model> = vec![Model::default(); 4];
        // (session, slot, seqid) → times executed.
        let mut executed: HashMap<(SessionId4, u8, u32), u32> = HashMap::new();
        for op in ops {
            match op {
                Op::Exchange { who, verifier } => {
                    let args = exid(OWNERS[who as usize], verifier);
                    if let Ok(r) = st.exchange_id(now, &args, &p(b"u")) {
                        let m = &mut models[who as usize];
                        if m.clientid != Some(r.clientid) {
                            *m = Model { clientid: Some(r.clientid), ..Model::default() };
                        }
                        m.cs_seq = r.sequenceid;
                    }
                }
                Op::Create { who, skew } => {
                    let m = &mut models[who as usize];
                    if let Some(c) = m.clientid {
                        let seq = m.cs_seq.wrapping_add(skew as u32).wrapping_sub(1);
                        let r = st.create_session(now, &cs(c, seq, 0), &p(b"u"), who as u64);
                        match r {
                            Ok(r) if skew == 1 => {
                                m.cs_seq += 1;
                                m.session = Some(r.sessionid);
                                m.slots = [0; 10];
                                // As a client does before it opens (once per client id).
                                let rc = st.reclaim_complete(now, c, false);
                                prop_assert!(
                                    matches!(rc, Ok(()) | Err(Nfsstat4::COMPLETE_ALREADY)),
                                    "{:?}", rc
                                );
                                m.completed = true;
                            }
                            // Over the session quota: an answer that uses up the sequence id.
                            Err(Nfsstat4::NOSPC) if skew == 1 => m.cs_seq += 1,
                            _ => {}
                        }
                    }
                }
                Op::Sequence { who, slot, retry, cache } => {
                    let m = &mut models[who as usize];
                    let Some(s) = m.session else { continue };
                    let last = m.slots[slot as usize];
                    let sq = if retry { last } else { last + 1 };
                    let mut call = seq(slot as u32, sq);
                    call.cachethis = cache;
                    call.digest = ((slot as u64) << 32) | sq as u64;
                    match st.sequence(now, &s, &call) {
                        Ok(out) => {
                            match out.decision {
                                SlotDecision::Execute => {
                                    prop_assert!(!retry, "a retry executed");
                                    *executed.entry((s, slot, sq)).or_default() += 1;
                                    m.slots[slot as usize] = sq;
                                    let body = Bytes::from(format!("{slot}/{sq}"));
                                    st.complete(&s, slot as u32, Some(body));
                                }
                                SlotDecision::Replay(b) => {
                                    prop_assert!(retry);
                                    prop_assert_eq!(b, Bytes::from(format!("{slot}/{sq}")));
                                }
                                SlotDecision::RetryUncached => prop_assert!(retry),
                            }
                        }
                        Err(e) => prop_assert!(
                            [Nfsstat4::BADSESSION, Nfsstat4::BADSLOT, Nfsstat4::SEQ_MISORDERED]
                                .contains(&e), "{:?}", e),
                    }
                }
                Op::Open { who, owner, file, access, deny } => {
                    let m = &mut models[who as usize];
                    let Some(c) = m.clientid else { continue };
                    let fh = Bytes::from(vec![file]);
                    match st.open(now, c, &[owner], &fh, access as u32, deny as u32) {
                        Ok(sid) => {
                            m.stateids.retain(|(s, _)| s.other != sid.other);
                            m.stateids.push((sid, fh));
                        }
                        // GRACE: no RECLAIM_COMPLETE yet (no session yet).
                        Err(Nfsstat4::GRACE) => prop_assert!(!m.completed),
                        Err(e) => prop_assert!(
                            [Nfsstat4::INVAL, Nfsstat4::SHARE_DENIED, Nfsstat4::DELAY,
                             Nfsstat4::STALE_CLIENTID].contains(&e), "{:?}", e),
                    }
                }
                Op::Close { who, pick } => {
                    let m = &mut models[who as usize];
                    let (Some(c), false) = (m.clientid, m.stateids.is_empty()) else { continue };
                    let i = pick as usize % m.stateids.len();
                    let (sid, fh) = m.stateids.remove(i);
                    let r = st.close(c, &sid, &fh);
                    prop_assert!(r.is_ok() || r == Err(Nfsstat4::BAD_STATEID), "{:?}", r);
                }
                Op::Downgrade { who, pick, access, deny } => {
                    let m = &mut models[who as usize];
                    let (Some(c), false) = (m.clientid, m.stateids.is_empty()) else { continue };
                    let i = pick as usize % m.stateids.len();
                    let (sid, fh) = m.stateids[i].clone();
                    if let Ok(n) = st.open_downgrade(c, &sid, &fh, access as u32, deny as u32) {
                        prop_assert_eq!(n.seqid, sid.seqid + 1);
                        m.stateids[i].0 = n;
                    }
                }
                Op::DestroySession { who } => {
                    let m = &mut models[who as usize];
                    if let Some(s) = m.session.take() {
                        let r = st.destroy_session(&s, None);
                        prop_assert!(r.is_ok() || r == Err(Nfsstat4::BADSESSION));
                    }
                }
                Op::DestroyClient { who } => {
                    let m = &mut models[who as usize];
                    if let Some(c) = m.clientid {
                        if st.destroy_clientid(c).is_ok() {
                            *m = Model::default();
                        }
                    }
                }
                Op::Wait { secs } => {
                    now += Duration::from_secs(secs as u64);
                    st.tick(now);
                }
            }
            check_invariants(&st)?;
        }
        for (k, n) in executed {
            prop_assert_eq!(n, 1, "{:?} executed {} times", k, n);
        }
    }
}

fn check_invariants(st: &State4) -> Result<(), TestCaseError> {
    prop_assert!(st.clients().len() <= 3);
    prop_assert!(st.opens().len() <= 6);
    prop_assert!(st.reply_cache_reserved_bytes() <= st.config().reply_cache_bytes_max);
    for s in st.sessions.values() {
        prop_assert!(st.clients().get(s.clientid).is_ok(), "orphan session");
        prop_assert!(s.slots().slots_allocated() <= 8);
        prop_assert!(!s.busy_except(None), "a slot left in progress");
    }
    let mut per_client: HashMap<ClientId4, usize> = HashMap::new();
    for s in st.opens().iter() {
        prop_assert!(st.clients().get(s.clientid).is_ok(), "orphan open");
        *per_client.entry(s.clientid).or_default() += 1;
        for t in st.opens().iter() {
            if s.file == t.file && (s.clientid, &s.owner) != (t.clientid, &t.owner) {
                let conflict = s.access & t.deny != 0 || s.deny & t.access != 0;
                prop_assert!(!conflict, "conflicting opens {:?} {:?}", s, t);
            }
        }
    }
    for n in per_client.values() {
        prop_assert!(*n <= 4);
    }
    Ok(())
}

/// Found by the random sequences: a client whose lease ran out opening a file its own other
/// owner holds must not expire itself (it used to, leaving the new open without a client).
#[test]
fn a_conflict_with_ones_own_other_owner_never_expires_oneself() {
    let t0 = Instant::now();
    let mut st = state();
    let (c, _) = mount(&mut st, t0, b"a");
    st.open(t0, c, b"o1", b"f", 1, 0).unwrap();
    let t1 = t0 + Duration::from_secs(90);
    st.tick(t1);
    assert_eq!(
        st.open(t1, c, b"o2", b"f", 1, 1),
        Err(Nfsstat4::SHARE_DENIED)
    );
    assert!(st.clients().get(c).is_ok());
}

#[test]
fn create_session_with_unknown_flags_is_inval_and_a_confirmed_record_ignores_the_principal() {
    let now = Instant::now();
    let mut st = state();
    let e = st.exchange_id(now, &exid(b"a", 1), &p(b"u")).unwrap();
    assert_eq!(
        st.create_session(now, &cs(e.clientid, 1, 0x10), &p(b"u"), 1),
        Err(Nfsstat4::INVAL)
    );
    assert_eq!(
        st.create_session(now, &cs(e.clientid, 2, 0), &p(b"other"), 1),
        Err(Nfsstat4::CLID_INUSE),
        "another principal cannot confirm the record"
    );
    st.create_session(now, &cs(e.clientid, 2, 0), &p(b"u"), 1)
        .unwrap();
    assert!(st
        .create_session(now, &cs(e.clientid, 3, 0), &p(b"root"), 2)
        .is_ok());
}

#[test]
fn the_reply_cache_budget_grants_fewer_slots_then_delay() {
    let now = Instant::now();
    let cfg = Config4 {
        // Room for 12 slots of 4 KiB.
        reply_cache_bytes_max: 12 * 4096,
        ..Config4::default()
    };
    let mut st = State4::new(cfg, Box::new(SplitMix(3)));
    let e = st.exchange_id(now, &exid(b"a", 1), &p(b"u")).unwrap();
    let a = st
        .create_session(now, &cs(e.clientid, 1, 0), &p(b"u"), 1)
        .unwrap();
    assert_eq!(a.fore_chan_attrs.maxrequests, 8);
    let b = st
        .create_session(now, &cs(e.clientid, 2, 0), &p(b"u"), 1)
        .unwrap();
    assert_eq!(
        b.fore_chan_attrs.maxrequests, 4,
        "what is left of the budget"
    );
    assert_eq!(st.reply_cache_reserved_bytes(), 12 * 4096);
    assert_eq!(
        st.create_session(now, &cs(e.clientid, 3, 0), &p(b"u"), 1),
        Err(Nfsstat4::DELAY)
    );
    st.destroy_session(&a.sessionid, None).unwrap();
    let c = st
        .create_session(now, &cs(e.clientid, 3, 0), &p(b"u"), 1)
        .unwrap();
    assert_eq!(c.fore_chan_attrs.maxrequests, 8, "freed by DESTROY_SESSION");
}

/// Virtual time: a client that sends SEQUENCE every 30 s keeps its lease over ten lease
/// periods, and one that stops is a courtesy client one lease after its last SEQUENCE.
#[test]
fn sequence_every_third_of_a_lease_keeps_a_client_alive() {
    let t0 = Instant::now();
    let mut st = state();
    let (a, sa) = mount(&mut st, t0, b"a");
    let (b, sb) = mount(&mut st, t0, b"b");
    st.open(t0, a, b"o", b"f", 3, 3).unwrap();
    let mut now = t0;
    let mut seqid = 0;
    while now < t0 + Duration::from_secs(900) {
        now += Duration::from_secs(30);
        seqid += 1;
        st.sequence(now, &sa, &seq(0, seqid)).unwrap();
        st.complete(&sa, 0, None);
        if now <= t0 + Duration::from_secs(60) {
            st.sequence(now, &sb, &seq(0, seqid)).unwrap();
            st.complete(&sb, 0, None);
        }
        assert!(st.tick(now).is_empty());
        assert_eq!(st.clients().get(a).unwrap().courtesy_since, None);
        let b_courtesy = st.clients().get(b).unwrap().courtesy_since;
        let b_last = t0 + Duration::from_secs(60);
        if now >= b_last + Duration::from_secs(90) {
            assert_eq!(b_courtesy, Some(b_last + Duration::from_secs(90)));
        } else {
            assert_eq!(b_courtesy, None);
        }
    }
    assert_eq!(st.opens().count_for(a), 1);
}

#[test]
fn courtesy_clients_give_back_the_reply_cache_budget_and_open_room() {
    let t0 = Instant::now();
    let cfg = Config4 {
        reply_cache_bytes_max: 8 * 4096,
        opens_max: 1,
        ..Config4::default()
    };
    let mut st = State4::new(cfg, Box::new(SplitMix(4)));
    let (a, _) = mount(&mut st, t0, b"a");
    st.open(t0, a, b"o", b"f", 1, 0).unwrap();
    let t1 = t0 + Duration::from_secs(90);
    st.tick(t1);
    assert!(st.clients().get(a).unwrap().courtesy_since.is_some());
    let e = st.exchange_id(t1, &exid(b"b", 1), &p(b"u")).unwrap();
    let s = st
        .create_session(t1, &cs(e.clientid, 1, 0), &p(b"u"), 2)
        .unwrap();
    assert_eq!(
        s.fore_chan_attrs.maxrequests, 8,
        "a's session was expired for room"
    );
    st.reclaim_complete(t1, e.clientid, false).unwrap();
    assert!(st.clients().get(a).is_err());
    assert!(st.open(t1, e.clientid, b"o", b"g", 1, 0).is_ok());

    // Without a courtesy client to expire, the bounds hold.
    assert_eq!(
        st.open(t1, e.clientid, b"o", b"h", 1, 0),
        Err(Nfsstat4::DELAY)
    );
    let e2 = st.exchange_id(t1, &exid(b"c", 1), &p(b"u")).unwrap();
    assert_eq!(
        st.create_session(t1, &cs(e2.clientid, 1, 0), &p(b"u"), 3),
        Err(Nfsstat4::DELAY)
    );
}

/// A session whose back channel (AUTH_SYS, on `conn`) was created with CONN_BACK_CHAN.
fn back_session(st: &mut State4, now: Instant, clientid: ClientId4, sequence: u32) -> SessionId4 {
    use sluice_xdr::nfs4::ops::CallbackSecParms4;
    let mut args = cs(clientid, sequence, CREATE_SESSION4_FLAG_CONN_BACK_CHAN);
    args.sec_parms =
        CallbackSecParmsList(vec![CallbackSecParms4::AuthSys(sluice_xdr::rpc::AuthSys {
            stamp: 0,
            machine_name: Bytes::from_static(b"c"),
            uid: 0,
            gid: 0,
            gids: Vec::new(),
        })]);
    st.create_session(now, &args, &p(b"u"), 1)
        .unwrap()
        .sessionid
}

/// Runs every callback `poll_callbacks` asks for, the client answering each as it should.
fn answer_all(st: &mut State4) -> usize {
    use crate::callback::{CbCall, CbOutcome};
    use sluice_xdr::nfs4::callback::{CbArgop4, CbCompound4Res, CbResop4, CbSequenceResOk};
    use sluice_xdr::nfs4::ops::Res4;
    let mut n = 0;
    loop {
        let sends = st.poll_callbacks(Instant::now());
        if sends.is_empty() {
            return n;
        }
        for (sid, send) in sends {
            n += 1;
            let outcome = match &send.call {
                CbCall::Null => CbOutcome::NullOk,
                CbCall::Compound(a) => {
                    let Some(CbArgop4::Sequence(s)) = a.ops.first() else {
                        panic!("{a:?}")
                    };
                    CbOutcome::Compound(CbCompound4Res {
                        status: Nfsstat4::OK,
                        tag: a.tag.clone(),
                        results: vec![CbResop4::Sequence(Res4::Ok(CbSequenceResOk {
                            sessionid: s.sessionid,
                            sequenceid: s.sequenceid,
                            slotid: s.slotid,
                            highest_slotid: 0,
                            target_highest_slotid: 0,
                        }))],
                    })
                }
            };
            st.handle_callback(Instant::now(), &sid, send.token, outcome);
        }
    }
}

#[test]
fn a_back_channel_is_probed_and_its_loss_is_reported_per_session_and_per_client() {
    use crate::callback::PathState;
    use sluice_xdr::nfs4::ops::{CDFC4_BACK, SEQ4_STATUS_CB_PATH_DOWN_SESSION};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let now = Instant::now();
    let mut st = state();
    let wakes = Arc::new(AtomicUsize::new(0));
    let w = wakes.clone();
    st.set_callback_waker(Box::new(move || {
        w.fetch_add(1, Ordering::Relaxed);
    }));
    let e = st.exchange_id(now, &exid(b"cb", 1), &p(b"u")).unwrap();
    let a = back_session(&mut st, now, e.clientid, e.sequenceid);
    assert_eq!(
        wakes.load(Ordering::Relaxed),
        1,
        "a new back channel wakes the driver"
    );
    assert_eq!(answer_all(&mut st), 1, "CB_NULL");
    assert_eq!(st.callback_path(&a), Some(PathState::Probing));
    // CB_SEQUENCE waits for the client's first SEQUENCE, which wakes the driver.
    let out = st.sequence(now, &a, &seq(0, 1)).unwrap();
    assert_eq!(out.res.status_flags, 0, "a path being probed is not down");
    st.complete(&a, 0, None);
    assert_eq!(wakes.load(Ordering::Relaxed), 2);
    assert_eq!(answer_all(&mut st), 1, "CB_SEQUENCE");
    assert_eq!(st.callback_path(&a), Some(PathState::Up));
    // A second session of the client, its back channel on connection 2.
    let b = back_session(&mut st, now, e.clientid, e.sequenceid + 1);
    st.bind_conn_to_session(&b, 2, CDFC4_BACK).unwrap();
    st.sequence(now, &b, &seq(0, 1)).unwrap();
    st.complete(&b, 0, None);
    answer_all(&mut st);
    assert_eq!(st.callback_path(&b), Some(PathState::Up));
    // Connection 1 closes: session a has no back channel left, but b's works, so only
    // CB_PATH_DOWN_SESSION is true for a.
    st.conn_closed(1);
    let out = st.sequence(now, &a, &seq(0, 2)).unwrap();
    assert_eq!(out.res.status_flags, SEQ4_STATUS_CB_PATH_DOWN_SESSION);
    st.complete(&a, 0, None);
    // Connection 2 closes too: no session of the client can be called back.
    st.conn_closed(2);
    let out = st.sequence(now, &a, &seq(0, 3)).unwrap();
    assert_eq!(
        out.res.status_flags,
        SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION
    );
    st.complete(&a, 0, None);
    assert!(
        st.poll_callbacks(Instant::now()).is_empty(),
        "nothing to call back on"
    );
    // The client binds a new back connection to a: probed, and the flags clear.
    st.bind_conn_to_session(&a, 3, CDFC4_BACK).unwrap();
    let sends = st.poll_callbacks(Instant::now());
    assert_eq!(sends.len(), 1);
    assert_eq!((sends[0].0, sends[0].1.conn), (a, 3));
    st.handle_callback(
        now,
        &a,
        sends[0].1.token,
        crate::callback::CbOutcome::NullOk,
    );
    assert_eq!(
        answer_all(&mut st),
        1,
        "the client is known to be ready: CB_SEQUENCE at once"
    );
    assert_eq!(st.callback_path(&a), Some(PathState::Up));
    let out = st.sequence(now, &a, &seq(0, 4)).unwrap();
    assert_eq!(out.res.status_flags, 0);
}

#[test]
fn backchannel_ctl_changes_the_program_and_probes_again() {
    use crate::callback::PathState;
    use sluice_xdr::nfs4::ops::CallbackSecParms4;
    let now = Instant::now();
    let mut st = state();
    let e = st.exchange_id(now, &exid(b"ctl", 1), &p(b"u")).unwrap();
    let a = back_session(&mut st, now, e.clientid, e.sequenceid);
    answer_all(&mut st);
    st.backchannel_ctl(&a, 0x4000_0001, &[CallbackSecParms4::AuthNone])
        .unwrap();
    assert_eq!(st.callback_path(&a), Some(PathState::Unknown));
    let sends = st.poll_callbacks(Instant::now());
    assert_eq!(sends[0].1.program, 0x4000_0001);
    assert_eq!(
        st.backchannel_ctl(&[0; 16], 1, &[]),
        Err(Nfsstat4::BADSESSION)
    );
}

// ----- restart recovery (recovery.rs) ------- --------------------------------------------------

const GRACE: Duration = Duration::from_secs(90);

/// A restarted state whose stable records name `owners`.
fn restarted(now: Instant, owners: &[&[u8]]) -> State4 {
    let mut st = state();
    st.start_grace(now, owners.iter().map(|o| o.to_vec()), GRACE);
    st
}

#[test]
fn reclaims_run_in_grace_and_new_state_waits() {
    let t0 = Instant::now();
    let mut st = restarted(t0, &[b"host-a"]);
    assert!(st.in_grace());
    let (a, _) = mount_reclaiming(&mut st, t0, b"host-a");
    let (b, _) = mount_reclaiming(&mut st, t0, b"host-b");
    let (c, _) = mount(&mut st, t0, b"host-c");
    // a's open comes back with its share reservation; c's new open waits (c has nothing to
    // reclaim and said so: only grace holds it back).
    let o = st.reclaim_open(t0, a, b"oa", b"f", 3, 2).unwrap();
    assert_eq!(st.open(t0, c, b"oc", b"g", 1, 0), Err(Nfsstat4::GRACE));
    // b held nothing before the restart: its reclaim is refused.
    assert_eq!(
        st.reclaim_open(t0, b, b"ob", b"g", 1, 0),
        Err(Nfsstat4::RECLAIM_BAD)
    );
    // Anonymous I/O would bypass reclaims; a stateid of this instance does not.
    assert_eq!(
        st.check_io(b, &Stateid4::ANONYMOUS, b"g", false),
        Err(Nfsstat4::GRACE)
    );
    assert_eq!(
        st.check_io(b, &Stateid4::READ_BYPASS, b"g", false),
        Err(Nfsstat4::GRACE)
    );
    assert!(st.check_io(a, &o, b"f", true).is_ok());
    // The reclaimed deny-write is in force again for the others after grace.
    assert_eq!(st.reclaim_complete(t0, a, false), Ok(()));
    let end = st
        .recovery_tick(t0)
        .ended
        .expect("the only recorded client reclaimed");
    assert_eq!(end.reason, crate::recovery::grace::EndReason::AllReclaimed);
    assert!(!st.in_grace());
    assert_eq!(
        st.open(t0, c, b"oc", b"f", 2, 0),
        Err(Nfsstat4::SHARE_DENIED)
    );
    // Reclaims after grace: NO_GRACE.
    assert_eq!(
        st.reclaim_open(t0, a, b"oa", b"f", 3, 0),
        Err(Nfsstat4::NO_GRACE)
    );
}

#[test]
fn a_client_that_completed_may_not_reclaim_and_grace_waits_for_the_others() {
    let t0 = Instant::now();
    let mut st = restarted(t0, &[b"host-a", b"host-b"]);
    let (a, _) = mount_reclaiming(&mut st, t0, b"host-a");
    assert_eq!(st.reclaim_complete(t0, a, false), Ok(()));
    assert_eq!(
        st.reclaim_open(t0, a, b"oa", b"f", 1, 0),
        Err(Nfsstat4::NO_GRACE)
    );
    assert_eq!(st.recovery_tick(t0).ended, None);
    assert!(st.in_grace(), "host-b has not come back");
    assert_eq!(st.next_wakeup().map(|t| t <= t0 + GRACE), Some(true));
    let tick = st.recovery_tick(t0 + GRACE);
    let end = tick.ended.unwrap();
    assert_eq!(end.reason, crate::recovery::grace::EndReason::Deadline);
    // host-b never came back: its record goes; host-a is live and keeps its own.
    assert_eq!(tick.forget, vec![Bytes::from_static(b"host-b")]);
    assert_eq!(st.record_needed(a), None);
}

#[test]
fn no_records_no_grace() {
    let t0 = Instant::now();
    let mut st = restarted(t0, &[]);
    assert!(!st.in_grace());
    let end = st.recovery_tick(t0).ended.unwrap();
    assert_eq!(end.reason, crate::recovery::grace::EndReason::Skipped);
    let (a, _) = mount(&mut st, t0, b"host-a");
    assert!(st.open(t0, a, b"o", b"f", 1, 0).is_ok());
    assert_eq!(
        st.reclaim_open(t0, a, b"o", b"g", 1, 0),
        Err(Nfsstat4::NO_GRACE)
    );
}

#[test]
fn records_are_asked_for_once_and_removed_when_the_client_goes() {
    let t0 = Instant::now();
    let mut st = restarted(t0, &[]);
    let (a, s) = mount(&mut st, t0, b"host-a");
    assert_eq!(st.record_needed(a), Some(Bytes::from_static(b"host-a")));
    st.record_written(b"host-a");
    assert_eq!(st.record_needed(a), None);
    // A courtesy client keeps its record.
    st.tick(t0 + st.config().lease);
    assert!(st.clients().get(a).unwrap().courtesy_since.is_some());
    assert!(st.recovery_tick(t0 + st.config().lease).forget.is_empty());
    // DESTROY_CLIENTID removes it (at the next tick).
    st.destroy_session(&s, None).unwrap();
    st.destroy_clientid(a).unwrap();
    let t1 = t0 + st.config().lease * 2;
    assert_eq!(
        st.recovery_tick(t1).forget,
        vec![Bytes::from_static(b"host-a")]
    );
    // A client that expires for real loses it too.
    let (b, _) = mount(&mut st, t1, b"host-b");
    st.record_written(b"host-b");
    let day = st.config().courtesy_max;
    st.tick(t1 + st.config().lease);
    assert_eq!(st.tick(t1 + st.config().lease + day), vec![b]);
    assert_eq!(
        st.recovery_tick(t1 + st.config().lease + day).forget,
        vec![Bytes::from_static(b"host-b")]
    );
}

#[test]
fn reclaimed_locks_come_back_and_new_locks_wait() {
    use sluice_xdr::nfs4::ops::{LockArgs, Locker4, OpenToLockOwner4, WRITE_LT};
    use sluice_xdr::nfs4::LockOwner4;
    let t0 = Instant::now();
    let mut st = restarted(t0, &[b"host-a"]);
    let (a, _) = mount_reclaiming(&mut st, t0, b"host-a");
    let open = st.reclaim_open(t0, a, b"oa", b"f", 3, 0).unwrap();
    let lock = |reclaim: bool, open: Stateid4| LockArgs {
        locktype: WRITE_LT,
        reclaim,
        offset: 0,
        length: 10,
        locker: Locker4::New(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid: open,
            lock_seqid: 0,
            lock_owner: LockOwner4 {
                clientid: a,
                owner: Opaque4(Bytes::from_static(b"pid-1")),
            },
        }),
    };
    assert_eq!(
        st.lock(t0, a, b"f", &lock(false, open)),
        Err(LockRefused::Status(Nfsstat4::GRACE))
    );
    assert!(st.lock(t0, a, b"f", &lock(true, open)).is_ok());
    assert_eq!(st.locks().ranges.len(), 1);
    st.reclaim_complete(t0, a, false).unwrap();
    assert_eq!(
        st.lock(t0, a, b"f", &lock(true, open)),
        Err(LockRefused::Status(Nfsstat4::NO_GRACE))
    );
}

/// RFC 8881 §18.51.3: a client takes no new locking state before its RECLAIM_COMPLETE, even
/// once grace is over (here it ended at its deadline between the client's reclaim and its
/// RECLAIM_COMPLETE); its reclaimed state stays usable meanwhile.
#[test]
fn no_new_open_or_lock_before_reclaim_complete_even_after_grace() {
    use sluice_xdr::nfs4::ops::{LockArgs, Locker4, OpenToLockOwner4, WRITE_LT};
    use sluice_xdr::nfs4::LockOwner4;
    let t0 = Instant::now();
    let mut st = restarted(t0, &[b"host-a"]);
    let (a, _) = mount_reclaiming(&mut st, t0, b"host-a");
    let open = st.reclaim_open(t0, a, b"oa", b"f", 3, 0).unwrap();
    // Past any extension (at most twice the length, `recovery::grace`).
    let t1 = t0 + GRACE * 3;
    st.recovery_tick(t1);
    assert!(!st.in_grace());
    let lock = LockArgs {
        locktype: WRITE_LT,
        reclaim: false,
        offset: 0,
        length: 10,
        locker: Locker4::New(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid: open,
            lock_seqid: 0,
            lock_owner: LockOwner4 {
                clientid: a,
                owner: Opaque4(Bytes::from_static(b"pid-1")),
            },
        }),
    };
    assert_eq!(
        st.lock(t1, a, b"f", &lock),
        Err(LockRefused::Status(Nfsstat4::GRACE))
    );
    assert_eq!(st.open(t1, a, b"ob", b"g", 1, 0), Err(Nfsstat4::GRACE));
    assert!(st.check_io(a, &open, b"f", true).is_ok());
    st.reclaim_complete(t1, a, false).unwrap();
    assert!(st.lock(t1, a, b"f", &lock).is_ok());
    assert!(st.open(t1, a, b"ob", b"g", 1, 0).is_ok());
}

/// A client with a back channel that the probe found up: its client id and session.
fn holder(st: &mut State4, now: Instant, owner: &'static [u8]) -> (ClientId4, SessionId4) {
    let e = st.exchange_id(now, &exid(owner, 1), &p(b"u")).unwrap();
    let s = back_session(st, now, e.clientid, e.sequenceid);
    answer_all(st);
    st.sequence(now, &s, &seq(0, 1)).unwrap();
    st.reclaim_complete(now, e.clientid, false).unwrap();
    st.complete(&s, 0, None);
    answer_all(st);
    assert_eq!(st.callback_path(&s), Some(crate::callback::PathState::Up));
    (e.clientid, s)
}

#[test]
fn a_delegation_needs_a_working_back_channel_and_a_conflict_queues_a_cb_recall() {
    use crate::callback::{CbCall, CbOutcome};
    use sluice_xdr::nfs4::callback::{CbArgop4, CbCompound4Res, CbResop4, CbSequenceResOk};
    use sluice_xdr::nfs4::ops::{OpenDelegation4, Res4};
    let now = Instant::now();
    let mut st = state();
    let (a, sa) = holder(&mut st, now, b"holder");
    let (b, _) = mount(&mut st, now, b"no back channel");
    st.open(now, b, b"o", b"g", 1, 0).unwrap();
    assert_eq!(
        st.open_delegation(now, b, (&b"g"[..], &b"g"[..]), 1, SizeChange::default()),
        OpenDelegation4::None,
        "no back channel, no delegation"
    );
    st.open(now, a, b"o", b"f", 1, 0).unwrap();
    let OpenDelegation4::Read(d) =
        st.open_delegation(now, a, (&b"f"[..], &b"f"[..]), 1, SizeChange::default())
    else {
        panic!("a sole reader with a back channel gets one")
    };
    assert_eq!(
        st.check_io(a, &d.stateid, b"f", false),
        Ok(IoState::Deleg(d.stateid.other))
    );
    assert_eq!(
        st.check_io(a, &d.stateid, b"f", true),
        Err(Nfsstat4::OPENMODE)
    );
    assert_eq!(st.test_stateids(a, &[d.stateid]), vec![Nfsstat4::OK]);
    assert_eq!(st.destroy_clientid(a), Err(Nfsstat4::CLIENTID_BUSY));
    // B writes: DELAY, and the CB_RECALL goes to A's session; sending it starts the clock.
    assert_eq!(
        st.break_delegations(now, Some(b), b"f", true),
        Err(Nfsstat4::DELAY)
    );
    assert_eq!(
        st.break_delegations(now, Some(a), b"f", true),
        Ok(()),
        "its own"
    );
    let sent = now + Duration::from_secs(5);
    let sends = st.poll_callbacks(sent);
    assert_eq!(sends.len(), 1);
    assert_eq!(sends[0].0, sa);
    let CbCall::Compound(args) = &sends[0].1.call else {
        panic!("{sends:?}")
    };
    let (Some(CbArgop4::Sequence(s)), Some(CbArgop4::Recall(r))) =
        (args.ops.first(), args.ops.get(1))
    else {
        panic!("{args:?}")
    };
    assert_eq!((r.stateid, &r.fh.0[..]), (d.stateid, &b"f"[..]));
    let lease = Config4::default().lease;
    assert_eq!(st.delegations().next_wakeup(lease), Some(sent + lease));
    assert!(st.next_wakeup() <= Some(sent + lease));
    let reply = CbOutcome::Compound(CbCompound4Res {
        status: Nfsstat4::OK,
        tag: args.tag.clone(),
        results: vec![
            CbResop4::Sequence(Res4::Ok(CbSequenceResOk {
                sessionid: s.sessionid,
                sequenceid: s.sequenceid,
                slotid: 0,
                highest_slotid: 0,
                target_highest_slotid: 0,
            })),
            CbResop4::Recall(Nfsstat4::OK),
        ],
    });
    st.handle_callback(sent, &sa, sends[0].1.token, reply);
    assert_eq!(st.delegations().counters.recalls_answered, 1);
    assert_eq!(st.delegreturn(a, &d.stateid, b"f"), Ok(()));
    assert_eq!(st.break_delegations(now, Some(b), b"f", true), Ok(()));
    assert_eq!(st.destroy_clientid(b), Err(Nfsstat4::CLIENTID_BUSY));
}

#[test]
fn a_courtesy_holder_loses_its_delegation_at_once_to_a_conflict() {
    use sluice_xdr::nfs4::ops::OpenDelegation4;
    let now = Instant::now();
    let mut st = state();
    let (a, _) = holder(&mut st, now, b"holder");
    let (b, sb) = mount(&mut st, now, b"writer");
    st.open(now, a, b"o", b"f", 1, 0).unwrap();
    assert!(matches!(
        st.open_delegation(now, a, (&b"f"[..], &b"f"[..]), 1, SizeChange::default()),
        OpenDelegation4::Read(_)
    ));
    let later = now + Config4::default().lease + Duration::from_secs(1);
    st.sequence(later, &sb, &seq(0, 1)).unwrap();
    st.complete(&sb, 0, None);
    st.tick(later);
    assert!(st.clients().get(a).unwrap().courtesy_since.is_some());
    assert_eq!(st.break_delegations(later, Some(b), b"f", true), Ok(()));
    assert!(st.clients().get(a).is_err(), "expired whole");
    assert!(st.delegations().is_empty());
}

proptest! {
    /// A CB_GETATTR answer's attributes come from the holder: any bytes under any mask give
    /// values or `None` (the delegation is then recalled), never a panic.
    #[test]
    fn cb_getattr_values_of_hostile_attributes_never_panic(
        mask in proptest::collection::vec(any::<u32>(), 0..4),
        vals in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let f = sluice_xdr::nfs4::Fattr4 {
            mask: sluice_xdr::nfs4::Bitmap4(mask),
            vals: Bytes::from(vals),
        };
        let _ = crate::delegations::cb_getattr_values(&f);
    }
}

#[test]
fn cb_getattr_values_need_both_size_and_change() {
    use sluice_xdr::nfs4::attrs::AttrValues;
    let both = AttrValues {
        size: Some(5),
        change: Some(9),
        ..AttrValues::default()
    };
    assert_eq!(
        crate::delegations::cb_getattr_values(&both.encode()),
        Some(SizeChange { size: 5, change: 9 })
    );
    let size_only = AttrValues {
        size: Some(5),
        ..AttrValues::default()
    };
    assert_eq!(
        crate::delegations::cb_getattr_values(&size_only.encode()),
        None
    );
}

/// A CB_RECALL answered NFS4ERR_BADHANDLE overtook the OPEN reply that granted the
/// delegation (the Linux client, two clients opening at once): it is sent again at the next
/// tick, not left to run out the lease.
#[test]
fn a_recall_answered_badhandle_is_sent_again() {
    use crate::callback::{CbCall, CbOutcome};
    use sluice_xdr::nfs4::callback::{CbArgop4, CbCompound4Res, CbResop4, CbSequenceResOk};
    use sluice_xdr::nfs4::ops::{OpenDelegation4, Res4};
    let now = Instant::now();
    let mut st = state();
    let (a, sa) = holder(&mut st, now, b"holder");
    let (b, _) = mount(&mut st, now, b"other");
    st.open(now, a, b"o", b"f", 3, 0).unwrap();
    let OpenDelegation4::Write(_) =
        st.open_delegation(now, a, (&b"f"[..], &b"f"[..]), 3, SizeChange::default())
    else {
        panic!("a sole opener for reading and writing gets a write delegation")
    };
    assert_eq!(
        st.break_delegations(now, Some(b), b"f", false),
        Err(Nfsstat4::DELAY)
    );
    let sends = st.poll_callbacks(now);
    let CbCall::Compound(args) = &sends[0].1.call else {
        panic!("{sends:?}")
    };
    let Some(CbArgop4::Sequence(s)) = args.ops.first() else {
        panic!("{args:?}")
    };
    let reply = CbOutcome::Compound(CbCompound4Res {
        status: Nfsstat4::BADHANDLE,
        tag: args.tag.clone(),
        results: vec![
            CbResop4::Sequence(Res4::Ok(CbSequenceResOk {
                sessionid: s.sessionid,
                sequenceid: s.sequenceid,
                slotid: 0,
                highest_slotid: 0,
                target_highest_slotid: 0,
            })),
            CbResop4::Recall(Nfsstat4::BADHANDLE),
        ],
    });
    st.handle_callback(now, &sa, sends[0].1.token, reply);
    assert!(st.delegations().has_unqueued_recall(), "to be sent again");
    st.tick(now + Duration::from_millis(500));
    let again = st.poll_callbacks(now + Duration::from_millis(500));
    assert!(
        again
            .iter()
            .any(|(_, c)| matches!(&c.call, CbCall::Compound(a)
            if a.ops.iter().any(|o| matches!(o, CbArgop4::Recall(_))))),
        "{again:?}"
    );
}

/// Whether `sends` holds a CB_RECALL on session `sid`.
fn recall_on(sends: &[(SessionId4, crate::callback::CbSend)], sid: SessionId4) -> bool {
    use crate::callback::CbCall;
    use sluice_xdr::nfs4::callback::CbArgop4;
    sends.iter().any(|(s, c)| {
        *s == sid
            && matches!(&c.call, CbCall::Compound(a)
                if a.ops.iter().any(|o| matches!(o, CbArgop4::Recall(_))))
    })
}

/// A holder whose CB_RECALL went out unanswered and who then reset its session (DESTROY_SESSION,
/// CREATE_SESSION with a new back channel) is asked again on the new session at the next tick,
/// long before the lease would revoke the delegation.
#[test]
fn an_unanswered_recall_is_sent_again_on_the_holders_new_session() {
    use sluice_xdr::nfs4::ops::OpenDelegation4;
    let now = Instant::now();
    let mut st = state();
    let (a, sa) = holder(&mut st, now, b"holder");
    let (b, _) = mount(&mut st, now, b"other");
    st.open(now, a, b"o", b"f", 1, 0).unwrap();
    let OpenDelegation4::Read(_) =
        st.open_delegation(now, a, (&b"f"[..], &b"f"[..]), 1, SizeChange::default())
    else {
        panic!("a sole reader with a back channel gets one")
    };
    assert_eq!(
        st.break_delegations(now, Some(b), b"f", true),
        Err(Nfsstat4::DELAY)
    );
    let sends = st.poll_callbacks(now);
    assert!(recall_on(&sends, sa), "{sends:?}");
    // No answer; the client resets its session.
    let t1 = now + Duration::from_secs(2);
    st.destroy_session(&sa, None).unwrap();
    let sb = back_session(&mut st, t1, a, 2);
    // The probe of the new back channel (the client's SEQUENCE lets it finish).
    answer_all(&mut st);
    st.sequence(t1, &sb, &seq(0, 1)).unwrap();
    st.complete(&sb, 0, None);
    answer_all(&mut st);
    assert_eq!(st.callback_path(&sb), Some(crate::callback::PathState::Up));
    let t2 = t1 + Duration::from_secs(1);
    st.tick(t2);
    let again = st.poll_callbacks(t2);
    assert!(
        recall_on(&again, sb),
        "sent again on the new session: {again:?}"
    );
    // The clock kept its first start: the recall is revoked a lease after it first went out.
    let lease = Config4::default().lease;
    assert_eq!(st.delegations().next_wakeup(lease), Some(now + lease));
}

/// A recall queued on a session whose back channel went down before it could be sent moves to
/// another session of the holder whose back channel works.
#[test]
fn a_recall_waiting_on_a_dead_back_channel_moves_to_a_working_one() {
    use sluice_xdr::nfs4::ops::OpenDelegation4;
    let now = Instant::now();
    let mut st = state();
    let (a, sa) = holder(&mut st, now, b"holder");
    let (b, _) = mount(&mut st, now, b"other");
    st.open(now, a, b"o", b"f", 1, 0).unwrap();
    let OpenDelegation4::Read(_) =
        st.open_delegation(now, a, (&b"f"[..], &b"f"[..]), 1, SizeChange::default())
    else {
        panic!("a sole reader with a back channel gets one")
    };
    assert_eq!(
        st.break_delegations(now, Some(b), b"f", true),
        Err(Nfsstat4::DELAY)
    );
    // The back connection closes before the driver polled: the recall is left in the queue
    // of a session with no path.
    st.conn_closed(1);
    assert!(st.poll_callbacks(now).is_empty());
    // A second session with a working back channel.
    let sb = back_session(&mut st, now, a, 2);
    answer_all(&mut st);
    st.sequence(now, &sb, &seq(0, 1)).unwrap();
    st.complete(&sb, 0, None);
    answer_all(&mut st);
    let t1 = now + Duration::from_secs(1);
    st.tick(t1);
    let sends = st.poll_callbacks(t1);
    assert!(recall_on(&sends, sb), "{sends:?}");
    assert!(!recall_on(&sends, sa));
}

/// NLM locks and delegations (`crate::nlm`: Delegations): no delegation of a file an NLM host
/// holds a lock on; a waiting NLM LOCK does not take a lock beside a delegation granted while
/// it waited, but recalls it and is granted after the DELEGRETURN.
#[test]
fn nlm_locks_and_delegations_exclude_each_other() {
    use crate::callback::CbCall;
    use crate::nlm::{Decision, Nlm, NlmConfig};
    use sluice_xdr::nfs4::callback::CbArgop4;
    use sluice_xdr::nfs4::ops::{
        LockArgs, Locker4, LockuArgs, OpenDelegation4, OpenToLockOwner4, READ_LT,
    };
    use sluice_xdr::nfs4::LockOwner4;
    use sluice_xdr::nlm::{
        CallerName, Netobj, Nlm4Lock, Nlm4LockArgs, Nlm4Stats, Nlm4UnlockArgs, NlmFh,
    };
    let now = Instant::now();
    let mut st = state();
    let mut n = Nlm::new(NlmConfig::default());
    let (a, sa) = holder(&mut st, now, b"holder");
    let (b, _) = mount(&mut st, now, b"v4 locker");
    let alock = |svid: u32| Nlm4Lock {
        caller_name: CallerName(Bytes::from_static(b"v3host")),
        fh: NlmFh(Bytes::from_static(b"fh")),
        oh: Netobj(Bytes::from_static(b"oh")),
        svid,
        l_offset: 0,
        l_len: 0,
    };
    let nlm_lock = |svid: u32, exclusive: bool, block: bool| Nlm4LockArgs {
        cookie: Netobj(Bytes::from_static(b"c")),
        block,
        exclusive,
        alock: alock(svid),
        reclaim: false,
        state: 1,
    };
    let deleg = |st: &mut State4| {
        st.open_delegation(now, a, (&b"f"[..], &b"f"[..]), 1, SizeChange::default())
    };

    // A shared NLM lock on f: a sole reader gets no delegation; once unlocked, it does.
    assert_eq!(
        n.lock(&mut st, now, b"f", &nlm_lock(1, false, false)).stat,
        Nlm4Stats::GRANTED
    );
    st.open(now, a, b"o", b"f", 1, 0).unwrap();
    assert_eq!(deleg(&mut st), OpenDelegation4::None);
    let unlock = Nlm4UnlockArgs {
        cookie: Netobj::default(),
        alock: alock(1),
    };
    let (r, _) = n.unlock(&mut st, now, b"f", &unlock);
    assert_eq!(r.stat, Nlm4Stats::GRANTED);
    let OpenDelegation4::Read(d) = deleg(&mut st) else {
        panic!("no NLM lock left: a read delegation")
    };
    assert_eq!(st.delegreturn(a, &d.stateid, b"f"), Ok(()));

    // An exclusive NLM LOCK waits on b's v4 read lock.
    let open_b = st.open(now, b, b"ob", b"f", 1, 0).unwrap();
    let v4 = LockArgs {
        locktype: READ_LT,
        reclaim: false,
        offset: 0,
        length: u64::MAX,
        locker: Locker4::New(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid: open_b,
            lock_seqid: 0,
            lock_owner: LockOwner4 {
                clientid: b,
                owner: Opaque4(Bytes::from_static(b"pid-1")),
            },
        }),
    };
    let lock_b = st.lock(now, b, b"f", &v4).unwrap();
    assert_eq!(
        n.lock(&mut st, now, b"f", &nlm_lock(2, true, true)).stat,
        Nlm4Stats::BLOCKED
    );
    // b unlocks (a v4 LOCKU: the NLM core learns of it at its next retry); meanwhile a
    // gets a read delegation.
    let locku = LockuArgs {
        locktype: READ_LT,
        seqid: 0,
        lock_stateid: lock_b,
        offset: 0,
        length: u64::MAX,
    };
    st.locku(b, b"f", &locku).unwrap();
    let OpenDelegation4::Read(d) = deleg(&mut st) else {
        panic!("only a waiter on f: a read delegation")
    };
    // The retry recalls the delegation instead of locking beside it.
    let t1 = now + NlmConfig::default().retry_interval;
    assert_eq!(n.tick(&mut st, t1), Vec::new());
    assert_eq!(n.blocked_len(), 1);
    let sends = st.poll_callbacks(t1);
    assert_eq!(sends.len(), 1);
    assert_eq!(sends[0].0, sa);
    let CbCall::Compound(args) = &sends[0].1.call else {
        panic!("{sends:?}")
    };
    assert!(
        matches!(args.ops.get(1), Some(CbArgop4::Recall(r)) if r.stateid == d.stateid),
        "{args:?}"
    );
    // Returned: the next retry grants the waiter.
    assert_eq!(st.delegreturn(a, &d.stateid, b"f"), Ok(()));
    let t2 = t1 + NlmConfig::default().retry_interval;
    let granted = n.tick(&mut st, t2);
    assert!(
        matches!(&granted[..], [Decision::Granted { args, .. }] if args.alock.svid == 2),
        "{granted:?}"
    );
}
