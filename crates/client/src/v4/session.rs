//! The client side of an NFSv4.1 session, sans IO: the slot table, what to do with each
//! SEQUENCE result, and when to renew the lease.
//!
//! # Slots (RFC 8881 §2.10.6)
//! Every COMPOUND starts with SEQUENCE naming a slot and that slot's next sequence id. The
//! server keeps one cached reply per slot, which is what makes a retransmission exactly-once:
//! the same (slot, seqid) again is answered from the cache, the next seqid is new work, any
//! other is SEQ_MISORDERED. So a slot carries one request at a time, and the client's table is
//! the session's concurrency limit:
//!
//! ```text
//!   slot:    0     1     2     3   ...  n-1        n = ca_maxrequests from CREATE_SESSION
//!   seqid:   7     7     6     1        1          next sequence id to send on the slot
//!   busy:    x           x                       a request is outstanding
//!   usable:  └──── target_highest_slotid + 1 ───┘  what the server currently wants us to use
//! ```
//!
//! [`SlotTable::acquire`] hands out the lowest free usable slot (low slots stay warm in the
//! server's cache; knfsd and Linux do the same), with `sa_highest_slotid` = the highest slot
//! then busy. [`SlotTable::complete`] takes the SEQUENCE outcome and says what the caller must do
//! next, as a [`Next`]:
//!
//! | SEQUENCE result             | slot                         | [`Next`]               |
//! |-----------------------------|------------------------------|------------------------|
//! | OK                          | seqid + 1, free; the table follows `sr_target_highest_slotid` | `Done` |
//! | BADSLOT                     | beyond the server's table: usable shrinks below it | `Retry` (another slot) |
//! | SEQ_MISORDERED              | our seqid is not the server's: the slot is retired for this session | `Retry`, or `NewSession` once no slot is left |
//! | DELAY                       | unchanged (the server is still busy with this slot's last request) | `RetryAfter` the same slot |
//! | BADSESSION, DEADSESSION     | table dropped                | `NewSession` |
//! | CONN_NOT_BOUND_TO_SESSION   | free, seqid unchanged (the server refused the COMPOUND before the slot) | `Rebind` that connection, then `Retry` |
//! | STALE_CLIENTID, EXPIRED     | table dropped                | `NewClient` |
//! | no reply at all             | retired: whether the server executed the request is unknown, so the slot's seqid is too | `Failed` |
//! | anything else               | free, seqid unchanged (the server did not take the seqid) | `Failed` |
//!
//! Retiring a slot on SEQ_MISORDERED (rather than guessing the server's seqid, as Linux does
//! by retrying with seqid 1) costs one slot out of many and can never make the server execute a
//! request twice; a session whose slots are all retired is replaced.
//!
//! Each outcome carries the table's generation: results of a session already replaced are
//! ignored, so a late reply can never free a slot of the new session.
//!
//! # Replies lost on a broken connection (`sa_cachethis`)
//! When a connection breaks, the transport sends what was outstanding again on the next one,
//! with the same slot and sequence id: to the server a retry (RFC 8881 §2.10.6.1.3). It
//! answers a retry from the slot's reply cache, but keeps only the replies the client asked
//! it to keep (`sa_cachethis`), else NFS4ERR_RETRY_UNCACHED_REP. So [`cache_this`] asks for
//! every COMPOUND that changes something (an op flagged MODIFIES in the op table: WRITE,
//! COMMIT, OPEN, CLOSE, CREATE...): their replies are small, and running one twice could do
//! harm. A COMPOUND that only reads is not cached (a READ reply is up to a megabyte): its
//! lost reply comes back RETRY_UNCACHED_REP, and [`resend_uncached`] says it may simply be
//! sent again as new work, which is harmless for an op that changes nothing.
//!
//! # Lease renewal (RFC 8881 §8.3)
//! Any successful SEQUENCE renews the client's lease. [`Lease`] only asks for a SEQUENCE of its
//! own when nothing succeeded for a third of the lease: at one third, a renewal that is lost or
//! answered slowly (up to another third of the lease) still leaves time for one more before the
//! server may expire the client. Linux renews at two thirds, which leaves no room for a second
//! attempt; renewal costs one tiny COMPOUND per lease/3 of idle time, nothing when busy.

use sluice_xdr::nfs4::ops::{op_info, OpFlags, Opnum4, SequenceResOk};
use sluice_xdr::nfs4::Nfsstat4;
use std::time::{Duration, Instant};

/// Most slots a table holds, whatever the server offers: the transport's call table bounds
/// what is in flight anyway, and 1024 is far above any slot count useful on one connection
/// (Linux's client caps its fore channel at 1024 too).
pub const SLOTS_MAX: u32 = 1024;

/// A slot handed out for one COMPOUND.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Table generation (see the module docs).
    pub generation: u64,
    pub slotid: u32,
    pub seqid: u32,
    /// `sa_highest_slotid`: the highest slot busy when this one was taken (itself included).
    pub highest_slotid: u32,
}

/// What the SEQUENCE of a COMPOUND came back with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok(SequenceResOk),
    /// SEQUENCE failed with this status (or the COMPOUND failed before it).
    Err(Nfsstat4),
    /// No reply: the transport failed or gave up.
    NoReply,
}

/// What the caller does after [`SlotTable::complete`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The COMPOUND's results count.
    Done,
    /// Send the COMPOUND again on a newly acquired slot.
    Retry,
    /// Send it again after the delay, on a newly acquired slot.
    RetryAfter(Duration),
    /// The session is gone: create a new one (same client id), then retry.
    NewSession,
    /// The client id is gone: EXCHANGE_ID and CREATE_SESSION again, then retry.
    NewClient,
    /// The connection the COMPOUND went on is not bound to the session (it was re-established,
    /// and the server does not bind on SEQUENCE): BIND_CONN_TO_SESSION on it, then retry. The
    /// session itself is fine, so replacing it (and losing every slot's cache) would be wrong.
    Rebind,
    /// Give the error to the caller.
    Failed,
}

/// Wait before retrying after NFS4ERR_DELAY. 100 ms, Linux's `NFS4_POLL_RETRY_MIN`: the
/// server said it is busy with this very slot, so an immediate retry would only be refused
/// again.
pub const DELAY_RETRY: Duration = Duration::from_millis(100);

/// Wait before retrying an op the server refused with NFS4ERR_GRACE: it has just restarted and
/// lets its earlier clients reclaim first (RFC 8881 §8.4.2). 1 s, Linux's `NFS4_POLL_RETRY_MAX`
/// range: grace lasts a lease (90 s by default) or ends early, so a faster poll gains little.
pub const GRACE_RETRY: Duration = Duration::from_secs(1);

/// How long one COMPOUND waits out a grace period before it fails with NFS4ERR_GRACE: longer
/// than the default grace (one 90 s lease) with room for a longer lease, short enough that a
/// server stuck in grace is reported.
pub const GRACE_WAIT_MAX: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Free,
    Busy,
    /// Unusable for the rest of the session (see the module docs).
    Retired,
}

/// The slot table of one session. See the module docs.
#[derive(Debug, Clone)]
pub struct SlotTable {
    generation: u64,
    seqids: Vec<u32>,
    states: Vec<SlotState>,
    /// Slots `0..=usable_highest` may be handed out: the server's target, BADSLOT shrinks.
    usable_highest: u32,
}

impl SlotTable {
    /// The table of a new session with `slots` slots (the negotiated `ca_maxrequests`, capped at
    /// [`SLOTS_MAX`]; at least one). Every slot's first seqid is 1 (RFC 8881 §2.10.6.1: the
    /// server's slot starts at 0).
    pub fn new(generation: u64, slots: u32) -> SlotTable {
        let n = slots.clamp(1, SLOTS_MAX) as usize;
        SlotTable {
            generation,
            seqids: vec![1; n],
            states: vec![SlotState::Free; n],
            usable_highest: n as u32 - 1,
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Slots the table was created with.
    pub fn len(&self) -> usize {
        self.seqids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seqids.is_empty()
    }

    /// Slots that may be handed out now (the server's target, less retired ones).
    pub fn usable(&self) -> usize {
        self.states[..=self.usable_highest as usize]
            .iter()
            .filter(|s| **s != SlotState::Retired)
            .count()
    }

    /// Requests outstanding.
    pub fn busy(&self) -> usize {
        self.states
            .iter()
            .filter(|s| **s == SlotState::Busy)
            .count()
    }

    /// True when no slot is usable any more: the session must be replaced.
    pub fn exhausted(&self) -> bool {
        self.states.iter().all(|s| *s == SlotState::Retired)
    }

    /// The lowest free usable slot, now busy; `None` when all are busy (wait for a completion).
    pub fn acquire(&mut self) -> Option<Slot> {
        let limit = self.usable_highest as usize;
        let i = self.states[..=limit]
            .iter()
            .position(|s| *s == SlotState::Free)?;
        self.states[i] = SlotState::Busy;
        let highest = self
            .states
            .iter()
            .rposition(|s| *s == SlotState::Busy)
            .expect("slot i is busy") as u32;
        Some(Slot {
            generation: self.generation,
            slotid: i as u32,
            seqid: self.seqids[i],
            highest_slotid: highest,
        })
    }

    /// Gives back a slot whose COMPOUND was never sent (the seqid was not used).
    pub fn release_unsent(&mut self, slot: Slot) {
        if slot.generation == self.generation {
            self.set_free(slot.slotid);
        }
    }

    /// Records how `slot`'s COMPOUND went and says what to do next (see the module docs).
    pub fn complete(&mut self, slot: Slot, outcome: &Outcome) -> Next {
        if slot.generation != self.generation {
            // A reply from a replaced session: the new one's slots are not ours to touch.
            return match outcome {
                Outcome::Ok(_) => Next::Done,
                _ => Next::Retry,
            };
        }
        let i = slot.slotid as usize;
        debug_assert_eq!(
            self.states[i],
            SlotState::Busy,
            "completing a slot not busy"
        );
        match outcome {
            Outcome::Ok(ok) => {
                self.seqids[i] = slot.seqid.wrapping_add(1);
                self.set_free(slot.slotid);
                self.follow_target(ok.target_highest_slotid.min(ok.highest_slotid));
                Next::Done
            }
            Outcome::Err(s) => match *s {
                Nfsstat4::BADSLOT => {
                    self.set_free(slot.slotid);
                    if slot.slotid == 0 {
                        // Even slot 0 is refused: this is no session we know how to use.
                        Next::NewSession
                    } else {
                        self.usable_highest = self.usable_highest.min(slot.slotid - 1);
                        Next::Retry
                    }
                }
                Nfsstat4::SEQ_MISORDERED => {
                    self.states[i] = SlotState::Retired;
                    if self.exhausted() {
                        Next::NewSession
                    } else {
                        Next::Retry
                    }
                }
                Nfsstat4::DELAY => {
                    self.set_free(slot.slotid);
                    Next::RetryAfter(DELAY_RETRY)
                }
                Nfsstat4::BADSESSION | Nfsstat4::DEADSESSION => Next::NewSession,
                Nfsstat4::CONN_NOT_BOUND_TO_SESSION => {
                    // The SEQUENCE was refused as a whole, for the connection it came on, not
                    // for the slot: the slot's seqid was not taken.
                    self.set_free(slot.slotid);
                    Next::Rebind
                }
                Nfsstat4::STALE_CLIENTID | Nfsstat4::EXPIRED => Next::NewClient,
                _ => {
                    self.set_free(slot.slotid);
                    Next::Failed
                }
            },
            Outcome::NoReply => {
                self.states[i] = SlotState::Retired;
                Next::Failed
            }
        }
    }

    /// The server's `sr_target_highest_slotid`: grow back to it (never past the table) or
    /// shrink to it. Busy slots above a lower target finish their request and are then not
    /// handed out again.
    fn follow_target(&mut self, target: u32) {
        let top = self.seqids.len() as u32 - 1;
        self.usable_highest = target.min(top);
    }

    fn set_free(&mut self, slotid: u32) {
        let s = &mut self.states[slotid as usize];
        if *s == SlotState::Busy {
            *s = SlotState::Free;
        }
    }
}

/// Whether a COMPOUND of `ops` asks the server to cache its reply (see the module docs). An op
/// the table does not know counts as modifying.
pub fn cache_this(ops: impl IntoIterator<Item = Opnum4>) -> bool {
    ops.into_iter()
        .any(|op| op_info(op).is_none_or(|i| i.flags.contains(OpFlags::MODIFIES)))
}

/// Whether a COMPOUND of `ops` answered NFS4ERR_RETRY_UNCACHED_REP (it ran, its reply was
/// lost and not cached) may be sent again as new work: only if nothing in it changes state.
pub fn resend_uncached(ops: impl IntoIterator<Item = Opnum4>) -> bool {
    !cache_this(ops)
}

/// Whether a COMPOUND whose op number `failed` (0-based, SEQUENCE not counted) came back
/// NFS4ERR_DELAY may be sent again as it is, after [`DELAY_RETRY`]. The op that answered
/// DELAY was not done (RFC 8881 §15.1.1.3), so the question is only whether the ops before it
/// changed anything: a PUTFH/LOOKUP/GETATTR prefix did not, a CLOSE did (sending it again
/// would fail on its closed stateid). The common case is a server recalling another client's
/// delegation: it answers the conflicting OPEN with DELAY until the delegation is returned
/// (§10.4.5 wants the server to wait for the return, not to fail the OPEN).
pub fn resend_delayed(ops: impl IntoIterator<Item = Opnum4>, failed: usize) -> bool {
    !cache_this(ops.into_iter().take(failed))
}

/// When to renew the lease while idle. See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    lease: Duration,
    renewed_at: Instant,
}

impl Lease {
    /// A lease of `lease` (the server's `lease_time` attribute), renewed at `now`.
    pub fn new(lease: Duration, now: Instant) -> Lease {
        Lease {
            lease,
            renewed_at: now,
        }
    }

    /// A SEQUENCE sent at `sent_at` succeeded: the server renewed the lease no earlier than that.
    pub fn renewed(&mut self, sent_at: Instant) {
        self.renewed_at = self.renewed_at.max(sent_at);
    }

    /// When a renewal should be sent if nothing else succeeds before.
    pub fn renew_at(&self) -> Instant {
        self.renewed_at + self.lease / 3
    }

    /// True when a renewal is due at `now`.
    pub fn due(&self, now: Instant) -> bool {
        now >= self.renew_at()
    }

    /// True when the lease has certainly run out at `now` (nothing succeeded for a whole lease).
    pub fn expired(&self, now: Instant) -> bool {
        now >= self.renewed_at + self.lease
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(slot: Slot, target: u32) -> Outcome {
        Outcome::Ok(SequenceResOk {
            sessionid: [0; 16],
            sequenceid: slot.seqid,
            slotid: slot.slotid,
            highest_slotid: 63,
            target_highest_slotid: target,
            status_flags: 0,
        })
    }

    #[test]
    fn slots_are_lowest_first_and_seqids_advance_only_on_success() {
        let mut t = SlotTable::new(1, 4);
        let a = t.acquire().unwrap();
        let b = t.acquire().unwrap();
        assert_eq!((a.slotid, a.seqid, a.highest_slotid), (0, 1, 0));
        assert_eq!((b.slotid, b.seqid, b.highest_slotid), (1, 1, 1));
        assert_eq!(t.complete(a, &ok(a, 3)), Next::Done);
        let c = t.acquire().unwrap();
        assert_eq!(
            (c.slotid, c.seqid, c.highest_slotid),
            (0, 2, 1),
            "slot 0 again, next seqid; slot 1 still busy"
        );
        assert_eq!(t.complete(c, &Outcome::Err(Nfsstat4::ACCESS)), Next::Failed);
        let d = t.acquire().unwrap();
        assert_eq!(
            (d.slotid, d.seqid),
            (0, 2),
            "a SEQUENCE error other than the session's does not consume the seqid"
        );
    }

    #[test]
    fn a_full_table_hands_out_nothing_until_a_completion() {
        let mut t = SlotTable::new(1, 2);
        let a = t.acquire().unwrap();
        let _b = t.acquire().unwrap();
        assert_eq!(t.acquire(), None);
        assert_eq!(t.busy(), 2);
        t.complete(a, &ok(a, 1));
        assert_eq!(t.acquire().map(|s| s.slotid), Some(0));
    }

    #[test]
    fn the_table_shrinks_and_grows_with_the_servers_target() {
        let mut t = SlotTable::new(1, 8);
        let a = t.acquire().unwrap();
        t.complete(a, &ok(a, 1));
        assert_eq!(t.usable(), 2);
        let s: Vec<_> = (0..3).map(|_| t.acquire()).collect();
        assert_eq!(s[0].map(|s| s.slotid), Some(0));
        assert_eq!(s[1].map(|s| s.slotid), Some(1));
        assert_eq!(s[2], None, "target_highest_slotid 1 allows two slots");
        let x = s[0].unwrap();
        t.complete(x, &ok(x, 7));
        assert_eq!(t.usable(), 8);
        let y = s[1].unwrap();
        t.complete(y, &ok(y, 200));
        assert_eq!(t.usable(), 8, "never beyond the negotiated table");
    }

    #[test]
    fn badslot_shrinks_below_the_slot_and_retries() {
        let mut t = SlotTable::new(1, 8);
        let held: Vec<_> = (0..5).map(|_| t.acquire().unwrap()).collect();
        let s4 = held[4];
        assert_eq!(
            t.complete(s4, &Outcome::Err(Nfsstat4::BADSLOT)),
            Next::Retry
        );
        assert_eq!(t.usable(), 4);
        assert_eq!(t.acquire(), None, "slots 0-3 are busy and 4 is gone");
        let s0 = held[0];
        assert_eq!(
            t.complete(s0, &Outcome::Err(Nfsstat4::BADSLOT)),
            Next::NewSession,
            "slot 0 refused: nothing to shrink to"
        );
    }

    #[test]
    fn seq_misordered_retires_the_slot_and_a_table_of_retired_slots_needs_a_new_session() {
        let mut t = SlotTable::new(1, 2);
        let a = t.acquire().unwrap();
        assert_eq!(
            t.complete(a, &Outcome::Err(Nfsstat4::SEQ_MISORDERED)),
            Next::Retry
        );
        let b = t.acquire().unwrap();
        assert_eq!(b.slotid, 1, "slot 0 is never used again");
        t.complete(b, &ok(b, 1));
        let b = t.acquire().unwrap();
        assert_eq!(b.slotid, 1);
        assert_eq!(
            t.complete(b, &Outcome::Err(Nfsstat4::SEQ_MISORDERED)),
            Next::NewSession
        );
        assert!(t.exhausted());
    }

    #[test]
    fn delay_keeps_the_seqid_and_waits() {
        let mut t = SlotTable::new(1, 1);
        let a = t.acquire().unwrap();
        assert_eq!(
            t.complete(a, &Outcome::Err(Nfsstat4::DELAY)),
            Next::RetryAfter(DELAY_RETRY)
        );
        let b = t.acquire().unwrap();
        assert_eq!((b.slotid, b.seqid), (0, 1));
    }

    #[test]
    fn lost_sessions_and_clients_are_told_apart() {
        for (s, want) in [
            (Nfsstat4::BADSESSION, Next::NewSession),
            (Nfsstat4::DEADSESSION, Next::NewSession),
            (Nfsstat4::STALE_CLIENTID, Next::NewClient),
            (Nfsstat4::EXPIRED, Next::NewClient),
        ] {
            let mut t = SlotTable::new(1, 4);
            let a = t.acquire().unwrap();
            assert_eq!(t.complete(a, &Outcome::Err(s)), want, "{}", s.name());
        }
    }

    #[test]
    fn an_unbound_connection_is_rebound_and_keeps_the_session_and_the_seqid() {
        let mut t = SlotTable::new(1, 2);
        let a = t.acquire().unwrap();
        assert_eq!(
            t.complete(a, &Outcome::Err(Nfsstat4::CONN_NOT_BOUND_TO_SESSION)),
            Next::Rebind
        );
        assert_eq!(t.busy(), 0);
        let b = t.acquire().unwrap();
        assert_eq!(
            (b.generation, b.slotid, b.seqid),
            (1, 0, 1),
            "same session, same slot, seqid not consumed"
        );
    }

    #[test]
    fn compounds_that_change_state_are_cached_and_only_reads_are_sent_again_uncached() {
        let write = [Opnum4::PUTFH, Opnum4::WRITE];
        let read = [Opnum4::PUTFH, Opnum4::READ];
        let open = [Opnum4::PUTFH, Opnum4::OPEN, Opnum4::GETFH, Opnum4::GETATTR];
        assert!(cache_this(write) && !resend_uncached(write));
        assert!(cache_this(open) && !resend_uncached(open));
        assert!(cache_this([Opnum4::PUTFH, Opnum4::COMMIT]));
        assert!(!cache_this(read) && resend_uncached(read));
        assert!(resend_uncached([
            Opnum4::PUTROOTFH,
            Opnum4::LOOKUP,
            Opnum4::GETFH
        ]));
        assert!(cache_this([Opnum4(9999)]), "unknown ops count as modifying");
    }

    #[test]
    fn no_reply_retires_the_slot_because_its_seqid_is_unknown() {
        let mut t = SlotTable::new(1, 2);
        let a = t.acquire().unwrap();
        assert_eq!(t.complete(a, &Outcome::NoReply), Next::Failed);
        assert_eq!(t.usable(), 1);
        assert_eq!(t.acquire().map(|s| s.slotid), Some(1));
    }

    #[test]
    fn replies_from_a_replaced_session_do_not_touch_the_new_table() {
        let mut old = SlotTable::new(1, 2);
        let stale = old.acquire().unwrap();
        let mut t = SlotTable::new(2, 2);
        let a = t.acquire().unwrap();
        assert_eq!(a.slotid, 0);
        assert_eq!(
            t.complete(stale, &Outcome::Err(Nfsstat4::BADSESSION)),
            Next::Retry
        );
        assert_eq!(t.busy(), 1, "the new session's slot 0 is still busy");
        t.release_unsent(stale);
        assert_eq!(t.busy(), 1);
    }

    #[test]
    fn many_completions_in_any_order_keep_every_slot_consistent() {
        // A seeded shuffle of acquire/complete: every slot's seqid is 1 + its successes.
        let mut t = SlotTable::new(1, 8);
        let mut successes = [0u32; 8];
        let mut held = Vec::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if !x.is_multiple_of(3) {
                if let Some(s) = t.acquire() {
                    assert_eq!(s.seqid, 1 + successes[s.slotid as usize]);
                    held.push(s);
                    continue;
                }
            }
            if !held.is_empty() {
                let s = held.swap_remove((x as usize / 3) % held.len());
                let outcome = if x.is_multiple_of(5) {
                    Outcome::Err(Nfsstat4::DELAY)
                } else {
                    ok(s, 7)
                };
                if matches!(outcome, Outcome::Ok(_)) {
                    successes[s.slotid as usize] += 1;
                }
                t.complete(s, &outcome);
            }
        }
        assert!(successes.iter().all(|&n| n > 100), "{successes:?}");
    }

    #[test]
    fn the_lease_is_renewed_after_a_third_of_it_idle() {
        let t0 = Instant::now();
        let mut l = Lease::new(Duration::from_secs(90), t0);
        assert_eq!(l.renew_at(), t0 + Duration::from_secs(30));
        assert!(!l.due(t0 + Duration::from_secs(29)));
        assert!(l.due(t0 + Duration::from_secs(30)));
        l.renewed(t0 + Duration::from_secs(20));
        assert_eq!(l.renew_at(), t0 + Duration::from_secs(50));
        l.renewed(t0 + Duration::from_secs(10));
        assert_eq!(
            l.renew_at(),
            t0 + Duration::from_secs(50),
            "an older call's reply does not move renewal back"
        );
        assert!(!l.expired(t0 + Duration::from_secs(109)));
        assert!(l.expired(t0 + Duration::from_secs(110)));
    }

    #[test]
    fn a_delayed_op_is_resent_only_after_ops_that_changed_nothing() {
        let open = [Opnum4::PUTFH, Opnum4::OPEN, Opnum4::GETFH, Opnum4::GETATTR];
        assert!(resend_delayed(open, 1));
        let close = [Opnum4::PUTFH, Opnum4::CLOSE, Opnum4::DELEGRETURN];
        assert!(resend_delayed(close, 1));
        assert!(!resend_delayed(close, 2));
    }
}
