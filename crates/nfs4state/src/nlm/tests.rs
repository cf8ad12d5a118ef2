//! The NLM core against the shared lock table: NLM hosts among themselves, and NLM against
//! NFSv4 clients on the same file.

use super::*;
use crate::config::Config4;
use crate::ids::{Principal, SplitMix};
use crate::locks::LockRefused;
use sluice_xdr::nfs4::ops::{
    CallbackSecParmsList, ClientOwner4, CreateSessionArgs, ExchangeIdArgs, ImplIdList, LockArgs,
    Locker4, LocktArgs, OpenToLockOwner4, StateProtect4A, WRITE_LT,
};
use sluice_xdr::nfs4::{LockOwner4, Opaque4, Stateid4};
use sluice_xdr::nlm::{Fsh4Access, Fsh4Mode, Nlm4Share, NlmFh};

const F: &[u8] = b"file-key";

fn state() -> State4 {
    let cfg = Config4 {
        boot_epoch: 5,
        lease: Duration::from_secs(10),
        locks_per_client_max: 4,
        ..Config4::default()
    };
    State4::new(cfg, Box::new(SplitMix(7)))
}

fn nlm() -> Nlm {
    Nlm::new(NlmConfig {
        blocked_max: 3,
        blocked_per_host_max: 2,
        ..NlmConfig::default()
    })
}

fn alock(host: &'static [u8], svid: u32, off: u64, len: u64) -> Nlm4Lock {
    Nlm4Lock {
        caller_name: CallerName(Bytes::from_static(host)),
        fh: NlmFh(Bytes::from_static(b"fh")),
        oh: Netobj(Bytes::from_static(b"oh")),
        svid,
        l_offset: off,
        l_len: len,
    }
}

fn lock_args(l: Nlm4Lock, exclusive: bool, block: bool) -> Nlm4LockArgs {
    Nlm4LockArgs {
        cookie: Netobj(Bytes::from_static(b"c")),
        block,
        exclusive,
        alock: l,
        reclaim: false,
        state: 1,
    }
}

fn test_args(l: Nlm4Lock, exclusive: bool) -> Nlm4TestArgs {
    Nlm4TestArgs {
        cookie: Netobj(Bytes::from_static(b"t")),
        exclusive,
        alock: l,
    }
}

fn unlock_args(l: Nlm4Lock) -> Nlm4UnlockArgs {
    Nlm4UnlockArgs {
        cookie: Netobj(Bytes::from_static(b"u")),
        alock: l,
    }
}

/// A confirmed v4 client with one session and an open of `F` for reading and writing.
fn v4_client(st: &mut State4, now: Instant, owner: &'static [u8]) -> (ClientId4, Stateid4) {
    let p = Principal(Bytes::from_static(b"u"));
    let e = st
        .exchange_id(
            now,
            &ExchangeIdArgs {
                clientowner: ClientOwner4 {
                    verifier: [1; 8],
                    ownerid: Opaque4(Bytes::from_static(owner)),
                },
                flags: 0,
                state_protect: StateProtect4A::None,
                client_impl_id: ImplIdList(Vec::new()),
            },
            &p,
        )
        .unwrap();
    let args = CreateSessionArgs {
        clientid: e.clientid,
        sequence: e.sequenceid,
        flags: 0,
        fore_chan_attrs: crate::testkit::channel_attrs(4),
        back_chan_attrs: crate::testkit::channel_attrs(4),
        cb_program: 0x4000_0000,
        sec_parms: CallbackSecParmsList(Vec::new()),
    };
    st.create_session(now, &args, &p, 1).unwrap();
    st.reclaim_complete(now, e.clientid, false).unwrap();
    let open = st.open(now, e.clientid, b"o", F, 3, 0).unwrap();
    (e.clientid, open)
}

fn v4_lock(off: u64, len: u64, open: Stateid4) -> LockArgs {
    LockArgs {
        locktype: WRITE_LT,
        reclaim: false,
        offset: off,
        length: len,
        locker: Locker4::New(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid: open,
            lock_seqid: 0,
            lock_owner: LockOwner4 {
                clientid: 0,
                owner: Opaque4(Bytes::from_static(b"v4-owner")),
            },
        }),
    }
}

#[test]
fn two_hosts_conflict_and_test_names_the_holder() {
    let (mut st, mut n, t0) = (state(), nlm(), Instant::now());
    let r = n.lock(
        &mut st,
        t0,
        F,
        &lock_args(alock(b"a", 1, 0, 100), true, false),
    );
    assert_eq!(r.stat, Nlm4Stats::GRANTED);
    assert_eq!(
        r.cookie.0,
        Bytes::from_static(b"c"),
        "the cookie comes back"
    );
    let r = n.lock(
        &mut st,
        t0,
        F,
        &lock_args(alock(b"b", 1, 50, 10), false, false),
    );
    assert_eq!(r.stat, Nlm4Stats::DENIED);
    let t = n.test(&st, t0, F, &test_args(alock(b"b", 1, 99, 0), false));
    match t.stat {
        Nlm4TestRply::Denied(h) => {
            assert_eq!(
                (h.svid, h.l_offset, h.l_len, h.exclusive),
                (1, 0, 100, true)
            );
            assert_eq!(h.oh.0, Bytes::from_static(b"oh"));
        }
        other => panic!("{other:?}"),
    }
    // Past the end of a's range: free. The same owner never conflicts with itself.
    let t = n.test(&st, t0, F, &test_args(alock(b"b", 1, 100, 0), true));
    assert_eq!(t.stat.stat(), Nlm4Stats::GRANTED);
    let t = n.test(&st, t0, F, &test_args(alock(b"a", 1, 0, 0), true));
    assert_eq!(t.stat.stat(), Nlm4Stats::GRANTED);
    // Another process (svid) of the same host conflicts.
    let t = n.test(&st, t0, F, &test_args(alock(b"a", 2, 0, 1), false));
    assert_eq!(t.stat.stat(), Nlm4Stats::DENIED);
    let (u, d) = n.unlock(&mut st, t0, F, &unlock_args(alock(b"a", 1, 0, 0)));
    assert_eq!((u.stat, d.len()), (Nlm4Stats::GRANTED, 0));
    assert!(st.locks.ranges.is_empty());
    assert_eq!(n.hosts_len(), 0, "a host holding nothing is forgotten");
}

#[test]
fn unlocking_what_is_not_held_succeeds_and_upgrades_replace_the_type() {
    let (mut st, mut n, t0) = (state(), nlm(), Instant::now());
    let (u, _) = n.unlock(&mut st, t0, F, &unlock_args(alock(b"a", 1, 0, 0)));
    assert_eq!(u.stat, Nlm4Stats::GRANTED);
    let a = |ex| lock_args(alock(b"a", 1, 0, 10), ex, false);
    assert_eq!(n.lock(&mut st, t0, F, &a(false)).stat, Nlm4Stats::GRANTED);
    assert_eq!(n.lock(&mut st, t0, F, &a(true)).stat, Nlm4Stats::GRANTED);
    assert_eq!(st.locks.ranges.len(), 1);
    assert_eq!(st.locks.ranges.locks_of(F)[0].kind, LockKind::Write);
    // Unlocking the middle splits it.
    n.unlock(&mut st, t0, F, &unlock_args(alock(b"a", 1, 3, 2)));
    assert_eq!(st.locks.ranges.len(), 2);
}

#[test]
fn a_blocked_lock_is_granted_by_a_callback_when_the_holder_unlocks() {
    let (mut st, mut n, t0) = (state(), nlm(), Instant::now());
    n.lock(
        &mut st,
        t0,
        F,
        &lock_args(alock(b"a", 1, 0, 0), true, false),
    );
    let r = n.lock(
        &mut st,
        t0,
        F,
        &lock_args(alock(b"b", 9, 10, 5), true, true),
    );
    assert_eq!(r.stat, Nlm4Stats::BLOCKED);
    // A re-send renews the waiter, it does not add one.
    let r = n.lock(
        &mut st,
        t0,
        F,
        &lock_args(alock(b"b", 9, 10, 5), true, true),
    );
    assert_eq!((r.stat, n.blocked_len()), (Nlm4Stats::BLOCKED, 1));
    assert!(n.poll_timeout().is_some());
    let (_, decisions) = n.unlock(&mut st, t0, F, &unlock_args(alock(b"a", 1, 0, 0)));
    assert_eq!(decisions.len(), 1);
    let Decision::Granted { host, args } = &decisions[0];
    assert_eq!(host.0, Bytes::from_static(b"b"));
    assert_eq!(
        (args.alock.svid, args.alock.l_offset, args.exclusive),
        (9, 10, true)
    );
    assert_eq!(n.blocked_len(), 0);
    assert!(n.poll_timeout().is_none());
    // b holds it now: a conflicts.
    let r = n.lock(
        &mut st,
        t0,
        F,
        &lock_args(alock(b"a", 1, 12, 1), false, false),
    );
    assert_eq!(r.stat, Nlm4Stats::DENIED);
    // b's client answers GRANTED_RES with DENIED (its process gave up): released.
    let res = Nlm4Res {
        cookie: args.cookie.clone(),
        stat: Nlm4Stats::DENIED,
    };
    n.granted_res(&mut st, t0, &res);
    let r = n.lock(
        &mut st,
        t0,
        F,
        &lock_args(alock(b"a", 1, 12, 1), false, false),
    );
    assert_eq!(r.stat, Nlm4Stats::GRANTED);
}

#[test]
fn cancel_withdraws_a_waiter_and_waiters_are_bounded_and_expire() {
    let (mut st, mut n, t0) = (state(), nlm(), Instant::now());
    n.lock(
        &mut st,
        t0,
        F,
        &lock_args(alock(b"a", 1, 0, 0), true, false),
    );
    let b = |svid| lock_args(alock(b"b", svid, 0, 1), true, true);
    assert_eq!(n.lock(&mut st, t0, F, &b(1)).stat, Nlm4Stats::BLOCKED);
    assert_eq!(n.lock(&mut st, t0, F, &b(2)).stat, Nlm4Stats::BLOCKED);
    // Two per host.
    assert_eq!(
        n.lock(&mut st, t0, F, &b(3)).stat,
        Nlm4Stats::DENIED_NOLOCKS
    );
    let c = lock_args(alock(b"c", 1, 0, 1), true, true);
    assert_eq!(n.lock(&mut st, t0, F, &c).stat, Nlm4Stats::BLOCKED);
    // Three overall.
    let d = lock_args(alock(b"d", 1, 0, 1), true, true);
    assert_eq!(n.lock(&mut st, t0, F, &d).stat, Nlm4Stats::DENIED_NOLOCKS);
    let cancel = |svid| Nlm4CancArgs {
        cookie: Netobj::default(),
        block: true,
        exclusive: true,
        alock: alock(b"b", svid, 0, 1),
    };
    assert_eq!(n.cancel(&st, F, &cancel(1)).stat, Nlm4Stats::GRANTED);
    assert_eq!(n.cancel(&st, F, &cancel(1)).stat, Nlm4Stats::DENIED);
    assert_eq!(n.blocked_len(), 2);
    // Not re-sent for the time to live: gone, and nothing is granted.
    let later = t0 + NlmConfig::default().blocked_ttl;
    assert!(n.tick(&mut st, later).is_empty());
    assert_eq!(n.blocked_len(), 0);
}

#[test]
fn locks_per_host_are_bounded_by_the_shared_table() {
    let (mut st, mut n, t0) = (state(), nlm(), Instant::now());
    for i in 0..4 {
        let r = n.lock(
            &mut st,
            t0,
            F,
            &lock_args(alock(b"a", i, u64::from(i) * 10, 1), true, false),
        );
        assert_eq!(r.stat, Nlm4Stats::GRANTED);
    }
    let r = n.lock(
        &mut st,
        t0,
        F,
        &lock_args(alock(b"a", 9, 100, 1), true, false),
    );
    assert_eq!(r.stat, Nlm4Stats::DENIED_NOLOCKS);
    // Another host has its own budget.
    let r = n.lock(
        &mut st,
        t0,
        F,
        &lock_args(alock(b"b", 9, 100, 1), true, false),
    );
    assert_eq!(r.stat, Nlm4Stats::GRANTED);
}

#[test]
fn free_all_drops_a_hosts_locks_and_grants_its_waiters_successors() {
    let (mut st, mut n, t0) = (state(), nlm(), Instant::now());
    n.lock(
        &mut st,
        t0,
        F,
        &lock_args(alock(b"a", 1, 0, 0), true, false),
    );
    n.lock(
        &mut st,
        t0,
        b"g",
        &lock_args(alock(b"a", 1, 0, 0), true, false),
    );
    n.lock(&mut st, t0, F, &lock_args(alock(b"b", 1, 0, 0), true, true));
    let d = n.free_all(&mut st, t0, b"a");
    assert_eq!(d.len(), 1);
    assert_eq!(st.locks.ranges.len(), 1, "only b's granted lock is left");
    assert!(n.free_all(&mut st, t0, b"nobody").is_empty());
}

#[test]
fn nlm_and_nfsv4_locks_conflict_both_ways() {
    let (mut st, mut n, t0) = (state(), nlm(), Instant::now());
    let (c, open) = v4_client(&mut st, t0, b"v4");
    // v3 first: the v4 LOCK and LOCKT are denied, naming no v4 client.
    n.lock(
        &mut st,
        t0,
        F,
        &lock_args(alock(b"a", 1, 0, 10), true, false),
    );
    let denied = st.lock(t0, c, F, &v4_lock(5, 1, open));
    match denied {
        Err(LockRefused::Denied(d)) => assert!(is_nlm_owner(d.owner.clientid)),
        other => panic!("{other:?}"),
    }
    let lockt = LocktArgs {
        locktype: WRITE_LT,
        offset: 0,
        length: u64::MAX,
        owner: LockOwner4 {
            clientid: 0,
            owner: Opaque4(Bytes::from_static(b"v4-owner")),
        },
    };
    assert!(st.lockt(t0, c, F, &lockt).is_err());
    n.unlock(&mut st, t0, F, &unlock_args(alock(b"a", 1, 0, 0)));
    // v4 second: now it gets the lock, and NLM is denied, TEST naming the v4 owner.
    st.lock(t0, c, F, &v4_lock(5, 1, open)).unwrap();
    let r = n.lock(
        &mut st,
        t0,
        F,
        &lock_args(alock(b"a", 1, 0, 0), false, false),
    );
    assert_eq!(r.stat, Nlm4Stats::DENIED);
    match n
        .test(&st, t0, F, &test_args(alock(b"a", 1, 0, 0), false))
        .stat
    {
        Nlm4TestRply::Denied(h) => {
            assert_eq!((h.svid, h.l_offset, h.l_len), (0, 5, 1));
            assert_eq!(h.oh.0, Bytes::from_static(b"v4-owner"));
        }
        other => panic!("{other:?}"),
    }
    // A blocked NLM LOCK waits for the v4 client; the v4 lease runs out (a courtesy
    // client) and the timer's retry breaks it and grants.
    let r = n.lock(&mut st, t0, F, &lock_args(alock(b"a", 1, 0, 0), true, true));
    assert_eq!(r.stat, Nlm4Stats::BLOCKED);
    assert!(n.tick(&mut st, t0 + Duration::from_secs(1)).is_empty());
    let d = n.tick(&mut st, t0 + Duration::from_secs(11));
    assert_eq!(d.len(), 1, "granted once the v4 client's lease ran out");
    assert!(st.clients().get(c).is_err(), "the courtesy client expired");
}

#[test]
fn grace_admits_reclaims_only_and_refuses_everything_else() {
    let (mut st, mut n, t0) = (state(), nlm(), Instant::now());
    st.start_grace(t0, vec![b"nlm:a".to_vec()], Duration::from_secs(30));
    assert!(st.in_grace());
    let mut reclaim = lock_args(alock(b"a", 1, 0, 0), true, false);
    reclaim.reclaim = true;
    assert_eq!(n.lock(&mut st, t0, F, &reclaim).stat, Nlm4Stats::GRANTED);
    let fresh = lock_args(alock(b"b", 1, 100, 0), true, false);
    assert_eq!(
        n.lock(&mut st, t0, F, &fresh).stat,
        Nlm4Stats::DENIED_GRACE_PERIOD
    );
    let t = n.test(&st, t0, F, &test_args(alock(b"b", 1, 0, 0), true));
    assert_eq!(t.stat.stat(), Nlm4Stats::DENIED_GRACE_PERIOD);
    // After grace: reclaims are refused, new locks go through.
    let after = t0 + Duration::from_secs(31);
    st.recovery_tick(after);
    assert!(!st.in_grace());
    assert_eq!(
        n.lock(&mut st, after, F, &reclaim).stat,
        Nlm4Stats::DENIED_GRACE_PERIOD
    );
    assert_eq!(
        n.lock(&mut st, after, b"g", &fresh).stat,
        Nlm4Stats::GRANTED
    );
}

#[test]
fn share_reservations_deny_what_others_hold() {
    let (st, mut n) = (state(), nlm());
    let share = |host: &'static [u8], access, mode| Nlm4ShareArgs {
        cookie: Netobj::default(),
        share: Nlm4Share {
            caller_name: CallerName(Bytes::from_static(host)),
            fh: NlmFh::default(),
            oh: Netobj(Bytes::from_static(b"o")),
            mode,
            access,
        },
        reclaim: false,
    };
    let a = share(b"a", Fsh4Access::RW, Fsh4Mode::DW);
    assert_eq!(n.share(&st, F, &a).stat, Nlm4Stats::GRANTED);
    let b = share(b"b", Fsh4Access::W, Fsh4Mode::DN);
    assert_eq!(n.share(&st, F, &b).stat, Nlm4Stats::DENIED);
    let r = share(b"b", Fsh4Access::R, Fsh4Mode::DN);
    assert_eq!(n.share(&st, F, &r).stat, Nlm4Stats::GRANTED);
    assert_eq!(n.unshare(&st, F, &a).stat, Nlm4Stats::GRANTED);
    assert_eq!(n.share(&st, F, &b).stat, Nlm4Stats::GRANTED);
}

#[test]
fn nlm_owners_are_never_v4_client_ids() {
    assert!(is_nlm_owner(1));
    assert!(is_nlm_owner(u64::from(u32::MAX)));
    assert!(!is_nlm_owner(1 << 32 | 1));
    assert_eq!(range_of(5, 0).last, u64::MAX);
    assert_eq!(range_of(u64::MAX - 1, 10).last, u64::MAX);
    assert_eq!(range_of(0, 1).last, 0);
}
