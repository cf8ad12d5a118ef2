use super::*;
use crate::ids::SplitMix;
use sluice_xdr::nfs4::ops::{
    NfsSpaceLimit4, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_WANT_ANY_DELEG,
    OPEN4_SHARE_WANT_READ_DELEG, WND4_WRITE_DELEG_NOT_SUPP_FTYPE,
};

const A: ClientId4 = 0xa;
const B: ClientId4 = 0xb;
const LEASE: Duration = Duration::from_secs(90);
const SID: SessionId4 = [7; 16];

fn table() -> (DelegTable, SplitMix) {
    let cfg = DelegConfig {
        write: true,
        ..DelegConfig::default()
    };
    (DelegTable::new(9, cfg), SplitMix(3))
}

/// A file's key and the handle it was opened by: the same bytes here (the table only compares
/// keys and hands the handle back in callbacks).
fn same(file: &[u8]) -> (&[u8], &[u8]) {
    (file, file)
}

fn ask(share_access: u32) -> GrantAsk {
    GrantAsk {
        share_access,
        callback_up: true,
        contended: false,
        others_open: false,
        attrs: SizeChange {
            size: 10,
            change: 100,
        },
        may_read: false,
    }
}

fn read_grant(
    t: &mut DelegTable,
    e: &mut SplitMix,
    now: Instant,
    c: ClientId4,
    f: &[u8],
) -> Stateid4 {
    match t.grant(now, c, same(f), ask(OPEN4_SHARE_ACCESS_READ), e) {
        OpenDelegation4::Read(r) => r.stateid,
        other => panic!("no read delegation: {other:?}"),
    }
}

#[test]
fn a_sole_reader_gets_a_read_delegation_and_readers_share_it() {
    let (mut t, mut e) = table();
    let now = Instant::now();
    let a = read_grant(&mut t, &mut e, now, A, b"f");
    assert_eq!(a.seqid, 1);
    assert_eq!(&a.other[..4], &9u32.to_be_bytes(), "the boot epoch");
    assert!(t.knows(&a.other));
    // B reads the same file: readers do not conflict.
    let b = read_grant(&mut t, &mut e, now, B, b"f");
    assert_ne!(a.other, b.other);
    // A asks again: it has one already.
    assert_eq!(
        t.grant(now, A, same(b"f"), ask(OPEN4_SHARE_ACCESS_READ), &mut e),
        OpenDelegation4::None
    );
    assert_eq!(t.live(), 2);
    assert_eq!(t.counters.granted, 2);
}

#[test]
fn want_bits_writers_contention_and_no_back_channel_get_none_with_a_why() {
    // With write delegations off (the default), as before they existed.
    let mut t = DelegTable::new(
        9,
        DelegConfig {
            write: false,
            ..DelegConfig::default()
        },
    );
    let mut e = SplitMix(3);
    let now = Instant::now();
    let r = OPEN4_SHARE_ACCESS_READ;
    let ext = |w| OpenDelegation4::NoneExt(OpenNoneDelegation4::Why(w));
    assert_eq!(
        t.grant(
            now,
            A,
            same(b"f"),
            ask(r | OPEN4_SHARE_WANT_NO_DELEG),
            &mut e
        ),
        ext(WND4_NOT_WANTED)
    );
    assert_eq!(
        t.grant(now, A, same(b"f"), ask(r | OPEN4_SHARE_WANT_CANCEL), &mut e),
        ext(WND4_CANCELLED)
    );
    // A writer: no write delegations; plain NONE without want bits, NONE_EXT with them.
    assert_eq!(
        t.grant(now, A, same(b"f"), ask(OPEN4_SHARE_ACCESS_BOTH), &mut e),
        OpenDelegation4::None
    );
    assert_eq!(
        t.grant(
            now,
            A,
            same(b"f"),
            ask(OPEN4_SHARE_ACCESS_BOTH | OPEN4_SHARE_WANT_ANY_DELEG),
            &mut e
        ),
        ext(WND4_WRITE_DELEG_NOT_SUPP_FTYPE)
    );
    assert_eq!(
        t.grant(
            now,
            A,
            same(b"f"),
            ask(r | OPEN4_SHARE_WANT_WRITE_DELEG),
            &mut e
        ),
        ext(WND4_WRITE_DELEG_NOT_SUPP_FTYPE)
    );
    let mut contended = ask(r | OPEN4_SHARE_WANT_READ_DELEG);
    contended.contended = true;
    assert_eq!(
        t.grant(now, A, same(b"f"), contended, &mut e),
        OpenDelegation4::NoneExt(OpenNoneDelegation4::Contention(false))
    );
    let mut down = ask(r | OPEN4_SHARE_WANT_READ_DELEG);
    down.callback_up = false;
    assert_eq!(
        t.grant(now, A, same(b"f"), down, &mut e),
        OpenDelegation4::NoneExt(OpenNoneDelegation4::Resource(false))
    );
    assert!(t.is_empty(), "nothing granted");
    // WANT_READ_DELEG and WANT_ANY_DELEG on a read open do get one.
    assert!(matches!(
        t.grant(
            now,
            A,
            same(b"f"),
            ask(r | OPEN4_SHARE_WANT_ANY_DELEG),
            &mut e
        ),
        OpenDelegation4::Read(_)
    ));
}

#[test]
fn a_conflict_recalls_other_clients_delegations_only_and_marks_the_file_recent() {
    let (mut t, mut e) = table();
    let now = Instant::now();
    let a = read_grant(&mut t, &mut e, now, A, b"f");
    assert!(
        t.conflicts(now, B, b"f", false).is_empty(),
        "reads do not conflict"
    );
    assert!(
        t.conflicts(now, A, b"f", true).is_empty(),
        "the holder's own writes do not"
    );
    assert!(t.conflicts(now, B, b"g", true).is_empty(), "another file");
    assert_eq!(t.conflicts(now, B, b"f", true), vec![a.other]);
    assert_eq!(t.to_queue().len(), 1);
    assert_eq!(t.to_queue()[0].0, a);
    assert_eq!(t.to_queue()[0].1, A);
    // Asked again (the client retried after DELAY): still the same recall.
    assert_eq!(t.conflicts(now, B, b"f", true), vec![a.other]);
    // No new delegation on a file being recalled, to anyone, nor soon after.
    let later = now + Duration::from_secs(1);
    assert_eq!(
        t.grant(later, B, same(b"f"), ask(OPEN4_SHARE_ACCESS_READ), &mut e),
        OpenDelegation4::None
    );
    t.delegreturn(A, &a, b"f").unwrap();
    assert!(
        t.conflicts(later, B, b"f", true).is_empty(),
        "returned: the op may go on"
    );
    assert_eq!(
        t.grant(later, A, same(b"f"), ask(OPEN4_SHARE_ACCESS_READ), &mut e),
        OpenDelegation4::None,
        "recently recalled"
    );
    t.tick(now + RECENT_FOR, LEASE);
    read_grant(&mut t, &mut e, now + RECENT_FOR, A, b"f");
}

#[test]
fn the_recall_clock_starts_when_sent_and_an_unreturned_delegation_is_revoked_after_the_lease() {
    let (mut t, mut e) = table();
    let t0 = Instant::now();
    let a = read_grant(&mut t, &mut e, t0, A, b"f");
    t.conflicts(t0, B, b"f", true);
    t.recall_queued(t0, &a.other, Some((SID, 5)));
    assert!(t.to_queue().is_empty(), "queued");
    // Queued for a long time behind other callbacks: no clock yet.
    assert_eq!(t.next_wakeup(LEASE), None);
    assert!(t.tick(t0 + LEASE * 2, LEASE).is_empty());
    let sent = t0 + LEASE * 2;
    t.recall_sent(sent, &[1; 16], 5); // another session's token 5: not this recall
    assert_eq!(t.counters.recalls_sent, 0);
    t.recall_sent(sent, &SID, 5);
    assert_eq!(t.counters.recalls_sent, 1);
    assert_eq!(t.next_wakeup(LEASE), Some(sent + LEASE));
    assert!(t.recall_answered(sent, &SID, 5, RecallAnswer::Ok));
    assert!(
        !t.recall_answered(sent, &SID, 6, RecallAnswer::Ok),
        "not a recall"
    );
    assert_eq!(t.counters.recalls_answered, 1);
    assert!(t
        .tick(sent + LEASE - Duration::from_millis(1), LEASE)
        .is_empty());
    assert_eq!(t.tick(sent + LEASE, LEASE), vec![a.other]);
    assert_eq!(t.counters.revoked, 1);
    // Revoked: the holder hears of it until it frees the stateid.
    assert!(t.has_revoked(A));
    assert!(!t.has_revoked(B));
    assert_eq!(
        t.check(A, &a, Some(b"f")).err(),
        Some(Nfsstat4::DELEG_REVOKED)
    );
    assert_eq!(t.test(A, &a), Nfsstat4::DELEG_REVOKED);
    assert_eq!(t.delegreturn(A, &a, b"f"), Err(Nfsstat4::DELEG_REVOKED));
    assert!(
        t.conflicts(sent + LEASE, B, b"f", true).is_empty(),
        "no longer in the way"
    );
    assert_eq!(t.live(), 0);
    assert_eq!(t.free(B, &a), Nfsstat4::BAD_STATEID, "not B's");
    assert_eq!(t.free(A, &a), Nfsstat4::OK);
    assert!(!t.has_revoked(A));
    assert!(t.is_empty());
    assert_eq!(t.test(A, &a), Nfsstat4::BAD_STATEID);
}

#[test]
fn an_unsendable_recall_starts_its_clock_at_once_and_a_delayed_one_is_queued_again() {
    let (mut t, mut e) = table();
    let t0 = Instant::now();
    let a = read_grant(&mut t, &mut e, t0, A, b"f");
    t.conflicts(t0, B, b"f", true);
    t.recall_queued(t0, &a.other, None); // no path
    assert_eq!(t.next_wakeup(LEASE), Some(t0 + LEASE));
    assert!(t.has_unqueued_recall(), "tried again when a path comes");
    let t1 = t0 + Duration::from_secs(10);
    t.recall_queued(t1, &a.other, Some((SID, 1)));
    t.recall_sent(t1, &SID, 1);
    assert_eq!(
        t.next_wakeup(LEASE),
        Some(t0 + LEASE),
        "the first start counts"
    );
    t.recall_answered(t1, &SID, 1, RecallAnswer::Delay);
    assert!(t.has_unqueued_recall());
    t.recall_queued(t1, &a.other, Some((SID, 2)));
    t.recall_answered(t1, &SID, 2, RecallAnswer::Lost);
    assert_eq!(t.counters.recalls_timed_out, 1);
    assert_eq!(t.tick(t0 + LEASE, LEASE), vec![a.other]);
}

#[test]
fn stateid_checks_and_client_removal() {
    let (mut t, mut e) = table();
    let now = Instant::now();
    let a = read_grant(&mut t, &mut e, now, A, b"f");
    assert!(t.check(A, &a, Some(b"f")).is_ok());
    assert!(t.check(A, &Stateid4 { seqid: 0, ..a }, Some(b"f")).is_ok());
    assert_eq!(t.check(B, &a, None).err(), Some(Nfsstat4::BAD_STATEID));
    assert_eq!(
        t.check(A, &a, Some(b"g")).err(),
        Some(Nfsstat4::BAD_STATEID)
    );
    assert_eq!(
        t.check(A, &Stateid4 { seqid: 2, ..a }, None).err(),
        Some(Nfsstat4::BAD_STATEID)
    );
    let mut stale = a;
    stale.other[..4].copy_from_slice(&8u32.to_be_bytes());
    assert_eq!(
        t.check(A, &stale, None).err(),
        Some(Nfsstat4::STALE_STATEID)
    );
    assert_eq!(
        t.free(A, &a),
        Nfsstat4::LOCKS_HELD,
        "DELEGRETURN ends a live one"
    );
    assert_eq!(t.live_for(A), 1);
    t.remove_client(A);
    assert!(t.is_empty());
    assert_eq!(t.count_for(A), 0);
    assert!(t.by_file.is_empty());
}

#[test]
fn the_bounds_stop_grants_and_the_recent_set_is_bounded() {
    let mut t = DelegTable::new(
        9,
        DelegConfig {
            per_client_max: 2,
            total_max: 3,
            write: true,
        },
    );
    let mut e = SplitMix(1);
    let now = Instant::now();
    let r = OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_WANT_READ_DELEG;
    let resource = OpenDelegation4::NoneExt(OpenNoneDelegation4::Resource(false));
    for f in [&b"1"[..], b"2"] {
        assert!(matches!(
            t.grant(now, A, same(f), ask(r), &mut e),
            OpenDelegation4::Read(_)
        ));
    }
    assert_eq!(
        t.grant(now, A, same(b"3"), ask(r), &mut e),
        resource,
        "per client"
    );
    assert!(matches!(
        t.grant(now, B, same(b"3"), ask(r), &mut e),
        OpenDelegation4::Read(_)
    ));
    assert_eq!(
        t.grant(now, B, same(b"4"), ask(r), &mut e),
        resource,
        "overall"
    );
    for i in 0..RECENT_MAX + 10 {
        t.remember_recall(now, &(i as u64).to_be_bytes());
    }
    assert_eq!(t.recent.len(), RECENT_MAX);
}

#[test]
fn delegation_others_never_look_like_open_or_lock_others() {
    let (mut t, mut e) = table();
    let now = Instant::now();
    for i in 0..100u32 {
        let s = read_grant(&mut t, &mut e, now, A, &i.to_be_bytes());
        let index = u32::from_be_bytes(s.other[4..8].try_into().unwrap());
        assert_eq!(index & 0xc000_0000, DELEG_INDEX_BIT);
    }
}

#[test]
fn a_recall_answer_that_comes_after_the_delegreturn_still_counts() {
    let (mut t, mut e) = table();
    let now = Instant::now();
    let a = read_grant(&mut t, &mut e, now, A, b"f");
    t.conflicts(now, B, b"f", true);
    t.recall_queued(now, &a.other, Some((SID, 3)));
    t.recall_sent(now, &SID, 3);
    // The client returns it before its CB_RECALL reply is handed to us.
    t.delegreturn(A, &a, b"f").unwrap();
    assert!(t.recall_answered(now, &SID, 3, RecallAnswer::Ok));
    assert_eq!(
        (t.counters.recalls_sent, t.counters.recalls_answered),
        (1, 1)
    );
    assert!(!t.recall_answered(now, &SID, 3, RecallAnswer::Ok), "once");
    assert!(t.orphans.is_empty());
}

#[test]
fn the_published_count_follows_live_delegations_for_the_nfsv3_gate() {
    let (mut t, mut e) = table();
    let live = t.published();
    let n = || live.load(std::sync::atomic::Ordering::Acquire);
    let t0 = Instant::now();
    assert_eq!(n(), 0);
    let a = read_grant(&mut t, &mut e, t0, A, b"f");
    let b = read_grant(&mut t, &mut e, t0, B, b"g");
    assert_eq!(n(), 2);
    // Recalling is still live; revoked is not (it conflicts with nothing).
    t.conflicts(t0, 0, b"f", true);
    t.recall_queued(t0, &a.other, None);
    assert_eq!(n(), 2);
    assert_eq!(t.tick(t0 + LEASE, LEASE), vec![a.other]);
    assert_eq!((n(), t.len()), (1, 2));
    assert_eq!(t.delegreturn(B, &b, b"g"), Ok(()));
    assert_eq!(n(), 0);
    assert_eq!(t.free(A, &a), Nfsstat4::OK);
    assert_eq!(n(), 0);
    read_grant(&mut t, &mut e, t0 + LEASE, B, b"h");
    t.remove_client(B);
    assert_eq!((n(), t.len()), (0, 0));
}

fn write_grant(
    t: &mut DelegTable,
    e: &mut SplitMix,
    now: Instant,
    c: ClientId4,
    f: &[u8],
) -> Stateid4 {
    match t.grant(now, c, same(f), ask(OPEN4_SHARE_ACCESS_BOTH), e) {
        OpenDelegation4::Write(w) => {
            assert_eq!(w.space_limit, NfsSpaceLimit4::Size(u64::MAX));
            w.stateid
        }
        other => panic!("no write delegation: {other:?}"),
    }
}

#[test]
fn a_sole_opener_for_reading_and_writing_gets_a_write_delegation_and_only_then() {
    use sluice_xdr::nfs4::ops::OPEN4_SHARE_ACCESS_WRITE;
    let (mut t, mut e) = table();
    let now = Instant::now();
    let both = OPEN4_SHARE_ACCESS_BOTH;
    let ext = |w| OpenDelegation4::NoneExt(OpenNoneDelegation4::Why(w));
    // Write-only by a client that may not read the file: none (the holder must be allowed
    // to read too).
    assert_eq!(
        t.grant(now, A, same(b"f"), ask(OPEN4_SHARE_ACCESS_WRITE), &mut e),
        OpenDelegation4::None
    );
    assert_eq!(
        t.grant(
            now,
            A,
            same(b"f"),
            ask(OPEN4_SHARE_ACCESS_WRITE | OPEN4_SHARE_WANT_WRITE_DELEG),
            &mut e
        ),
        ext(WND4_NOT_SUPP_UPGRADE)
    );
    // A read-only open asking for a write delegation gets none, whatever it may do.
    let mut reader = ask(OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_WANT_WRITE_DELEG);
    reader.may_read = true;
    assert_eq!(
        t.grant(now, A, same(b"f"), reader, &mut e),
        ext(WND4_NOT_SUPP_UPGRADE)
    );
    assert!(t.is_empty());
    // Another client's open, of any kind, is contention.
    let mut others = ask(both | OPEN4_SHARE_WANT_ANY_DELEG);
    others.others_open = true;
    assert_eq!(
        t.grant(now, A, same(b"f"), others, &mut e),
        OpenDelegation4::NoneExt(OpenNoneDelegation4::Contention(false))
    );
    // Another client's read delegation too.
    read_grant(&mut t, &mut e, now, B, b"g");
    assert_eq!(
        t.grant(now, A, same(b"g"), ask(both), &mut e),
        OpenDelegation4::None
    );
    assert!(t.is_empty() || t.live_by_kind() == (1, 0));
    // The sole opener gets one; nobody else gets anything on that file meanwhile.
    let w = write_grant(&mut t, &mut e, now, A, b"f");
    assert_eq!(t.live_by_kind(), (1, 1));
    assert_eq!(t.counters.granted_write, 1);
    assert_eq!(
        t.grant(now, B, same(b"f"), ask(OPEN4_SHARE_ACCESS_READ), &mut e),
        OpenDelegation4::None
    );
    assert_eq!(t.get(&w.other).unwrap().kind(), Kind::Write);
    // Turned off: none, said so by want bits.
    let mut off = DelegTable::new(
        9,
        DelegConfig {
            write: false,
            ..DelegConfig::default()
        },
    );
    assert_eq!(
        off.grant(
            now,
            A,
            same(b"f"),
            ask(both | OPEN4_SHARE_WANT_WRITE_DELEG),
            &mut e
        ),
        ext(WND4_WRITE_DELEG_NOT_SUPP_FTYPE)
    );
}

#[test]
fn a_write_only_opener_that_may_read_gets_a_write_delegation_recalled_as_any() {
    use sluice_xdr::nfs4::ops::OPEN4_SHARE_ACCESS_WRITE;
    let (mut t, mut e) = table();
    let now = Instant::now();
    let mut creat = ask(OPEN4_SHARE_ACCESS_WRITE);
    creat.may_read = true;
    let w = match t.grant(now, A, same(b"f"), creat, &mut e) {
        OpenDelegation4::Write(w) => w.stateid,
        other => panic!("no write delegation: {other:?}"),
    };
    assert_eq!(t.get(&w.other).unwrap().kind(), Kind::Write);
    assert_eq!(t.counters.granted_write, 1);
    // The same bounds as any write delegation: another's open is contention.
    let mut contended = creat;
    contended.others_open = true;
    assert_eq!(
        t.grant(now, A, same(b"g"), contended, &mut e),
        OpenDelegation4::None
    );
    // Another client's read recalls it.
    assert_eq!(t.conflicts(now, B, b"f", false), vec![w.other]);
    // Turned off: none.
    let mut off = DelegTable::new(
        9,
        DelegConfig {
            write: false,
            ..DelegConfig::default()
        },
    );
    assert_eq!(
        off.grant(now, A, same(b"f"), creat, &mut e),
        OpenDelegation4::None
    );
}

#[test]
fn any_access_of_another_client_recalls_a_write_delegation_but_reads_spare_read_ones() {
    let (mut t, mut e) = table();
    let now = Instant::now();
    let w = write_grant(&mut t, &mut e, now, A, b"f");
    let r = read_grant(&mut t, &mut e, now, A, b"g");
    // B reads g: no conflict with A's read delegation; reads f: recalls A's write one.
    assert!(t.conflicts(now, B, b"g", false).is_empty());
    assert!(t.conflicts(now, A, b"f", false).is_empty(), "its own");
    assert_eq!(t.conflicts(now, B, b"f", false), vec![w.other]);
    assert_eq!(t.to_queue(), vec![(w, A, Bytes::from_static(b"f"))]);
    assert_eq!(t.conflicts(now, B, b"g", true), vec![r.other]);
}

#[test]
fn cb_getattr_answers_other_clients_getattrs_and_moves_the_change_on() {
    let (mut t, mut e) = table();
    let now = Instant::now();
    let w = write_grant(&mut t, &mut e, now, A, b"f");
    // The holder's own GETATTR, and files without a write delegation: the server's values.
    assert_eq!(t.getattr_view(now, A, b"f"), GetattrView::Server);
    assert_eq!(t.getattr_view(now, B, b"g"), GetattrView::Server);
    // B asks: DELAY, one CB_GETATTR wanted however often it asks.
    assert_eq!(t.getattr_view(now, B, b"f"), GetattrView::Delay);
    assert_eq!(t.getattr_view(now, B, b"f"), GetattrView::Delay);
    assert_eq!(
        t.getattrs_to_queue(),
        vec![(A, Bytes::from_static(b"f"), w.other)]
    );
    t.getattr_queued(now, &w.other, Some((SID, 5)));
    assert!(t.getattrs_to_queue().is_empty());
    t.recall_sent(now, &SID, 5);
    assert_eq!(t.counters.cb_getattr_sent, 1);
    assert_eq!(
        t.getattr_view(now, B, b"f"),
        GetattrView::Delay,
        "still out"
    );
    // Unchanged since the grant (size 10, change 100): the server's own values.
    let same = SizeChange {
        size: 10,
        change: 100,
    };
    assert!(t.getattr_answered(now, &SID, 5, Some(same)));
    assert!(!t.getattr_answered(now, &SID, 5, Some(same)), "once");
    assert_eq!(
        t.getattr_view(now, B, b"f"),
        GetattrView::Holder {
            size: None,
            change_bump: 0
        }
    );
    // Stale after CB_GETATTR_FRESH: asked again; now the holder has written.
    let later = now + CB_GETATTR_FRESH;
    assert_eq!(t.getattr_view(later, B, b"f"), GetattrView::Delay);
    t.getattr_queued(later, &w.other, Some((SID, 6)));
    let grown = SizeChange {
        size: 4096,
        change: 101,
    };
    t.getattr_answered(later, &SID, 6, Some(grown));
    assert_eq!(
        t.getattr_view(later, B, b"f"),
        GetattrView::Holder {
            size: Some(4096),
            change_bump: 1
        }
    );
    // The same answer again does not move it; a new one does.
    let later2 = later + CB_GETATTR_FRESH;
    t.getattr_view(later2, B, b"f");
    t.getattr_queued(later2, &w.other, Some((SID, 7)));
    t.getattr_answered(later2, &SID, 7, Some(grown));
    assert_eq!(
        t.getattr_view(later2, B, b"f"),
        GetattrView::Holder {
            size: Some(4096),
            change_bump: 1
        }
    );
    assert_eq!(t.counters.cb_getattr_answered, 3);
    // An answer nobody used yet serves the first GETATTR however late it comes.
    let late = later2 + CB_GETATTR_FRESH * 5;
    t.getattr_view(late, B, b"f");
    t.getattr_queued(late, &w.other, Some((SID, 8)));
    t.getattr_answered(late, &SID, 8, Some(grown));
    let later3 = late + CB_GETATTR_FRESH * 3;
    assert!(matches!(
        t.getattr_view(later3, B, b"f"),
        GetattrView::Holder { .. }
    ));
    assert_eq!(
        t.getattr_view(later3 + CB_GETATTR_FRESH, B, b"f"),
        GetattrView::Delay
    );
    assert_eq!(
        t.status_of(&w.other),
        Some(DelegStatus::Held),
        "never recalled"
    );
}

#[test]
fn a_failed_or_unsendable_cb_getattr_recalls_the_write_delegation() {
    let (mut t, mut e) = table();
    let now = Instant::now();
    let w = write_grant(&mut t, &mut e, now, A, b"f");
    t.getattr_view(now, B, b"f");
    t.getattr_queued(now, &w.other, Some((SID, 1)));
    assert!(t.getattr_answered(now, &SID, 1, None));
    assert_eq!(t.counters.cb_getattr_failed, 1);
    assert!(matches!(
        t.status_of(&w.other),
        Some(DelegStatus::Recalling { .. })
    ));
    assert_eq!(t.to_queue().len(), 1, "the recall waits to be queued");
    assert_eq!(t.getattr_view(now, B, b"f"), GetattrView::Delay);
    assert!(
        t.getattrs_to_queue().is_empty(),
        "no CB_GETATTR while recalling"
    );
    // No path at all: recalled at once too.
    let w2 = write_grant(&mut t, &mut e, now, A, b"h");
    t.getattr_view(now, B, b"h");
    t.getattr_queued(now, &w2.other, None);
    assert!(matches!(
        t.status_of(&w2.other),
        Some(DelegStatus::Recalling { .. })
    ));
    // The recalled file is recently recalled: no new write delegation on it.
    t.delegreturn(A, &w, b"f").unwrap();
    assert_eq!(
        t.grant(now, A, same(b"f"), ask(OPEN4_SHARE_ACCESS_BOTH), &mut e),
        OpenDelegation4::None
    );
}

/// CLAIM_PREVIOUS after a server restart (module notes, "Reboot recovery"): the read
/// delegation is granted back. With the back channel up it is held; without, it goes out
/// with `recall` set and is revoked a lease later unless returned. One per client and file.
#[test]
fn a_reclaimed_read_delegation_is_held_or_already_recalled() {
    let (mut t, mut e) = table();
    let t0 = Instant::now();
    let OpenDelegation4::Read(up) = t.grant_reclaimed(t0, A, same(b"f"), true, None, &mut e) else {
        panic!("none granted back")
    };
    assert!(!up.recall);
    assert_eq!(t.get(&up.stateid.other).unwrap().status, DelegStatus::Held);
    assert_eq!(
        t.grant_reclaimed(t0, A, same(b"f"), true, None, &mut e),
        OpenDelegation4::None,
        "one per client and file"
    );
    let OpenDelegation4::Read(down) = t.grant_reclaimed(t0, B, same(b"f"), false, None, &mut e)
    else {
        panic!("none granted back")
    };
    assert!(down.recall, "no back channel: return it at once");
    assert!(t.tick(t0 + LEASE / 2, LEASE).is_empty());
    assert_eq!(t.tick(t0 + LEASE, LEASE), vec![down.stateid.other]);
    assert_eq!(t.delegreturn(A, &up.stateid, b"f"), Ok(()));
}

/// Delegations are found by the file's key (the same for all of its handles: hard links in two
/// directories); the callbacks name the handle the holder opened the file by.
#[test]
fn conflicts_go_by_the_key_and_callbacks_name_the_holders_handle() {
    let (mut t, mut e) = table();
    let now = Instant::now();
    let OpenDelegation4::Write(w) = t.grant(
        now,
        A,
        (b"file", b"fh via a"),
        ask(OPEN4_SHARE_ACCESS_BOTH),
        &mut e,
    ) else {
        panic!("no write delegation")
    };
    assert_eq!(t.held_by(A, b"file"), Some(w.stateid.other));
    assert_eq!(t.held_by(A, b"fh via a"), None, "the handle is no key");
    assert_eq!(t.getattr_view(now, B, b"file"), GetattrView::Delay);
    assert_eq!(
        t.getattrs_to_queue(),
        vec![(A, Bytes::from_static(b"fh via a"), w.stateid.other)]
    );
    assert_eq!(t.conflicts(now, B, b"file", false), vec![w.stateid.other]);
    assert_eq!(
        t.to_queue(),
        vec![(w.stateid, A, Bytes::from_static(b"fh via a"))]
    );
}
