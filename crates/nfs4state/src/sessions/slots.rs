//! A session's fore-channel slot table and its reply cache: exactly-once semantics
//! (RFC 8881 §2.10.6, SEQUENCE §18.46).
//!
//! Each slot holds one request at a time and remembers the sequence id of the last one and,
//! when the client asked (`sa_cachethis`), its reply bytes:
//!
//! ```text
//!   seqid == last + 1  ─▶ new request: Execute; the caller runs it and calls complete()
//!   seqid == last      ─▶ retry: in progress ─▶ NFS4ERR_DELAY
//!                                 cached      ─▶ Replay(the same bytes), nothing re-executes
//!                                 not cached  ─▶ RetryUncached (NFS4ERR_RETRY_UNCACHED_REP)
//!                                 other body  ─▶ NFS4ERR_SEQ_FALSE_RETRY (digest differs)
//!   anything else      ─▶ NFS4ERR_SEQ_MISORDERED (slot unchanged)
//!   slot > highest     ─▶ NFS4ERR_BADSLOT
//! ```
//!
//! A new slot's last sequence id is 0, so its first request carries 1 (§2.10.6.1). A slot that
//! is busy refuses a new sequence id with NFS4ERR_SEQ_MISORDERED as knfsd does: the client
//! must not reuse a slot before its reply.
//!
//! # Growing and shrinking
//! CREATE_SESSION fixes `slots_max` (the negotiated `ca_maxrequests`); slots are allocated only
//! when first used, so a session that negotiated 64 slots and uses 4 costs 4. The server can
//! ask for fewer with `target_highest_slotid` ([`SlotTable::set_target`]); once the client's
//! `sa_highest_slotid` is at or below the target, the enforced `highest_slotid` drops to it and
//! the cached replies above it are freed (§2.10.6.1, §18.46.3). Raising the target again raises
//! the enforced limit up to `slots_max - 1`. Sequence ids of retired slots are kept (4 bytes
//! each), so a retry that straddles a shrink is still recognised; and since a client may drop
//! the slots it was told to stop using and start them again at sequence id 1 when they come
//! back (the Linux client does), a retired slot accepts 1 as well as the next id, as knfsd
//! does since it learned to shrink slot tables; but not the request that last ran as 1 there
//! (same digest): that is its retransmission, overtaken by the shrink, and gets the retry
//! answer instead of running twice (found by the simulator, `sluice_sim::v4`, which drives the server over these cores).
//!
//! False retries (§2.10.6.1.3): the caller passes a digest of the request's operations and its
//! principal ([`crate::sessions::digest`]: what it catches and what it cannot); a retry
//! whose digest differs from the original's is answered NFS4ERR_SEQ_FALSE_RETRY instead of
//! someone else's cached reply.

use bytes::Bytes;
use sluice_xdr::nfs4::Nfsstat4;

/// What to do with a SEQUENCE that passed the slot checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotDecision {
    /// A new request: run the COMPOUND, then [`SlotTable::complete`] with its reply.
    Execute,
    /// A retry of a completed request whose reply was cached: send these bytes, run nothing.
    Replay(Bytes),
    /// A retry of a completed request whose reply was not kept (not asked for, too large, or
    /// abandoned): run nothing. SEQUENCE itself succeeds and the op after it carries
    /// NFS4ERR_RETRY_UNCACHED_REP (see `compound`); the slot is unchanged.
    RetryUncached,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum SlotState {
    /// Never used (its sequence id is 0).
    #[default]
    Empty,
    /// Executing; `cachethis` as the request asked.
    InProgress { cachethis: bool },
    /// Completed, reply kept for a retry.
    Cached(Bytes),
    /// Completed, reply not kept (not asked for, too large, or the request was abandoned).
    Uncached,
}

#[derive(Debug, Clone, Default)]
struct Slot {
    seqid: u32,
    digest: u64,
    state: SlotState,
    /// Retired by a shrink: the client may have forgotten it and start again at 1.
    retired: bool,
}

/// The fore channel's slots of one session.
#[derive(Debug, Clone)]
pub struct SlotTable {
    /// Allocated lazily; `slots.len() <= slots_max`.
    slots: Vec<Slot>,
    slots_max: u32,
    highest_slotid: u32,
    target_highest_slotid: u32,
    cached_bytes_max: usize,
    cached_bytes: usize,
}

impl SlotTable {
    /// A table of at most `slots_max` slots (at least 1) keeping replies of at most
    /// `cached_bytes_max` bytes each.
    pub fn new(slots_max: u32, cached_bytes_max: usize) -> Self {
        let slots_max = slots_max.max(1);
        Self {
            slots: Vec::new(),
            slots_max,
            highest_slotid: slots_max - 1,
            target_highest_slotid: slots_max - 1,
            cached_bytes_max,
            cached_bytes: 0,
        }
    }

    /// Checks a SEQUENCE's slot and sequence id (the table's half of §18.46.4).
    pub fn begin(
        &mut self,
        slotid: u32,
        seqid: u32,
        digest: u64,
        cachethis: bool,
    ) -> Result<SlotDecision, Nfsstat4> {
        if slotid > self.highest_slotid {
            return Err(Nfsstat4::BADSLOT);
        }
        let i = slotid as usize;
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, Slot::default);
        }
        let slot = &mut self.slots[i];
        if let SlotState::InProgress { .. } = slot.state {
            return Err(if seqid == slot.seqid {
                Nfsstat4::DELAY
            } else {
                Nfsstat4::SEQ_MISORDERED
            });
        }
        // A retired slot restarts at 1, except for the very request that last ran as 1 there:
        // that is a retransmission which a shrink overtook (a stale `sa_highest_slotid`
        // arriving after it), and running it again would break exactly-once. It falls through
        // to the retry rules below (its reply was dropped: RETRY_UNCACHED_REP). The price: a
        // client that restarts the slot with a byte-identical request (same ops, same
        // principal) is told to retry instead of having it run.
        let rerun = slot.seqid == 1 && slot.digest == digest;
        if seqid == next_seqid(slot.seqid) || (slot.retired && seqid == 1 && !rerun) {
            let freed = cached_len(&slot.state);
            slot.seqid = seqid;
            slot.digest = digest;
            slot.state = SlotState::InProgress { cachethis };
            slot.retired = false;
            self.cached_bytes -= freed;
            return Ok(SlotDecision::Execute);
        }
        if seqid == slot.seqid && slot.state != SlotState::Empty {
            if slot.digest != digest {
                return Err(Nfsstat4::SEQ_FALSE_RETRY);
            }
            return match &slot.state {
                SlotState::Cached(b) => Ok(SlotDecision::Replay(b.clone())),
                _ => Ok(SlotDecision::RetryUncached),
            };
        }
        Err(Nfsstat4::SEQ_MISORDERED)
    }

    /// Ends the request running on `slotid`: keeps `reply` if the request asked for caching
    /// and it fits; `None` when the request ended without a reply to keep.
    pub fn complete(&mut self, slotid: u32, reply: Option<Bytes>) {
        let cached_bytes_max = self.cached_bytes_max;
        let Some(slot) = self.slots.get_mut(slotid as usize) else {
            debug_assert!(false, "complete() on a slot never begun");
            return;
        };
        let SlotState::InProgress { cachethis } = slot.state else {
            debug_assert!(false, "complete() on a slot not in progress");
            return;
        };
        slot.state = match reply {
            Some(b) if cachethis && b.len() <= cached_bytes_max => {
                self.cached_bytes += b.len();
                SlotState::Cached(b)
            }
            _ => SlotState::Uncached,
        };
    }

    /// The client's `sa_highest_slotid`: if it is at or below the target, the table shrinks to
    /// the target and frees the cached replies above it.
    pub fn client_highest(&mut self, sa_highest_slotid: u32) {
        if sa_highest_slotid <= self.target_highest_slotid
            && self.target_highest_slotid < self.highest_slotid
        {
            self.highest_slotid = self.target_highest_slotid;
            let keep = self.highest_slotid as usize + 1;
            for slot in self.slots.iter_mut().skip(keep) {
                if !matches!(slot.state, SlotState::InProgress { .. }) {
                    self.cached_bytes -= cached_len(&slot.state);
                    if slot.state != SlotState::Empty {
                        slot.state = SlotState::Uncached;
                        slot.retired = true;
                    }
                }
            }
        }
    }

    /// Sets the server's wish (`sr_target_highest_slotid`), clamped to the negotiated size.
    /// Raising it raises the enforced limit at once; lowering waits for the client.
    pub fn set_target(&mut self, target_highest_slotid: u32) {
        let t = target_highest_slotid.min(self.slots_max - 1);
        self.target_highest_slotid = t;
        if t > self.highest_slotid {
            self.highest_slotid = t;
        }
    }

    /// `sr_highest_slotid`: the highest slot id the server accepts now.
    pub fn highest_slotid(&self) -> u32 {
        self.highest_slotid
    }
    /// `sr_target_highest_slotid`.
    pub fn target_highest_slotid(&self) -> u32 {
        self.target_highest_slotid
    }
    /// The negotiated slot count.
    pub fn slots_max(&self) -> u32 {
        self.slots_max
    }
    /// Slots allocated so far.
    pub fn slots_allocated(&self) -> usize {
        self.slots.len()
    }
    /// Bytes of replies held.
    pub fn cached_bytes(&self) -> usize {
        self.cached_bytes
    }
    /// Whether any slot other than `except` is executing a request.
    pub fn busy_except(&self, except: Option<u32>) -> bool {
        self.slots.iter().enumerate().any(|(i, s)| {
            matches!(s.state, SlotState::InProgress { .. }) && Some(i as u32) != except
        })
    }
}

/// Sequence ids wrap from u32::MAX to 0 (§2.10.6.1: arithmetic modulo 2^32).
fn next_seqid(seqid: u32) -> u32 {
    seqid.wrapping_add(1)
}

fn cached_len(state: &SlotState) -> usize {
    match state {
        SlotState::Cached(b) => b.len(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(t: &mut SlotTable, slot: u32, seq: u32, body: &'static [u8]) -> SlotDecision {
        let d = t.begin(slot, seq, 7, true).unwrap();
        if d == SlotDecision::Execute {
            t.complete(slot, Some(Bytes::from_static(body)));
        }
        d
    }

    #[test]
    fn first_request_on_a_slot_carries_seqid_1() {
        let mut t = SlotTable::new(4, 1024);
        assert_eq!(t.begin(0, 0, 1, true), Err(Nfsstat4::SEQ_MISORDERED));
        assert_eq!(t.begin(0, 2, 1, true), Err(Nfsstat4::SEQ_MISORDERED));
        assert_eq!(t.begin(0, 1, 1, true), Ok(SlotDecision::Execute));
    }

    #[test]
    fn a_retry_returns_the_cached_bytes_and_does_not_execute() {
        let mut t = SlotTable::new(4, 1024);
        assert_eq!(run(&mut t, 1, 1, b"reply-1"), SlotDecision::Execute);
        assert_eq!(
            t.begin(1, 1, 7, true),
            Ok(SlotDecision::Replay(Bytes::from_static(b"reply-1")))
        );
        assert_eq!(t.cached_bytes(), 7);
        assert_eq!(run(&mut t, 1, 2, b"r2"), SlotDecision::Execute);
        assert_eq!(t.cached_bytes(), 2, "the older reply is freed");
    }

    #[test]
    fn a_retry_of_an_uncached_request_is_retry_uncached_rep() {
        let mut t = SlotTable::new(4, 1024);
        assert_eq!(t.begin(0, 1, 9, false), Ok(SlotDecision::Execute));
        t.complete(0, Some(Bytes::from_static(b"x")));
        assert_eq!(t.begin(0, 1, 9, false), Ok(SlotDecision::RetryUncached));
        assert_eq!(t.cached_bytes(), 0);
        // Nothing changed: the same again, and the next sequence id is new.
        assert_eq!(t.begin(0, 1, 9, false), Ok(SlotDecision::RetryUncached));
        assert_eq!(t.begin(0, 2, 9, false), Ok(SlotDecision::Execute));
    }

    #[test]
    fn a_reply_larger_than_the_cache_limit_is_not_kept() {
        let mut t = SlotTable::new(1, 4);
        assert_eq!(t.begin(0, 1, 0, true), Ok(SlotDecision::Execute));
        t.complete(0, Some(Bytes::from_static(b"too long")));
        assert_eq!(t.begin(0, 1, 0, true), Ok(SlotDecision::RetryUncached));
    }

    #[test]
    fn a_retry_while_in_progress_is_delay_and_a_new_seqid_is_misordered() {
        let mut t = SlotTable::new(2, 1024);
        assert_eq!(t.begin(0, 1, 0, true), Ok(SlotDecision::Execute));
        assert_eq!(t.begin(0, 1, 0, true), Err(Nfsstat4::DELAY));
        assert_eq!(t.begin(0, 2, 0, true), Err(Nfsstat4::SEQ_MISORDERED));
        assert!(t.busy_except(None));
        assert!(!t.busy_except(Some(0)));
    }

    #[test]
    fn a_retry_with_another_body_is_a_false_retry() {
        let mut t = SlotTable::new(1, 1024);
        run(&mut t, 0, 1, b"a");
        assert_eq!(t.begin(0, 1, 8, true), Err(Nfsstat4::SEQ_FALSE_RETRY));
    }

    #[test]
    fn slot_ids_above_the_highest_are_badslot() {
        let mut t = SlotTable::new(4, 1024);
        assert_eq!(t.begin(4, 1, 0, true), Err(Nfsstat4::BADSLOT));
        assert_eq!(t.begin(3, 1, 0, true), Ok(SlotDecision::Execute));
        assert_eq!(t.slots_allocated(), 4);
    }

    #[test]
    fn sequence_ids_wrap_modulo_2_pow_32() {
        let mut t = SlotTable::new(1, 1024);
        t.slots.push(Slot {
            seqid: u32::MAX,
            digest: 0,
            state: SlotState::Uncached,
            retired: false,
        });
        assert_eq!(t.begin(0, 0, 0, true), Ok(SlotDecision::Execute));
    }

    #[test]
    fn the_table_shrinks_only_once_the_client_is_below_the_target() {
        let mut t = SlotTable::new(8, 1024);
        run(&mut t, 6, 1, b"six");
        t.set_target(3);
        assert_eq!(
            t.highest_slotid(),
            7,
            "the client may still be using slots 4..7"
        );
        t.client_highest(7);
        assert_eq!(t.highest_slotid(), 7);
        t.client_highest(3);
        assert_eq!(t.highest_slotid(), 3);
        assert_eq!(t.cached_bytes(), 0, "slot 6's reply is freed");
        assert_eq!(t.begin(6, 2, 7, true), Err(Nfsstat4::BADSLOT));
        t.set_target(100);
        assert_eq!(
            t.highest_slotid(),
            7,
            "growth is capped by the negotiated size"
        );
        assert_eq!(t.begin(6, 5, 8, true), Err(Nfsstat4::SEQ_MISORDERED));
        assert_eq!(
            t.begin(6, 1, 8, true),
            Ok(SlotDecision::Execute),
            "restarted at 1 by a new request"
        );
        t.complete(6, None);
        assert_eq!(t.begin(6, 1, 8, true), Ok(SlotDecision::RetryUncached));
        assert_eq!(t.begin(6, 1 + 1, 8, true), Ok(SlotDecision::Execute));
    }

    /// Found by the simulator: request B, the first on slot 3, runs and its reply is lost; a
    /// request sent before B with a lower `sa_highest_slotid` arrives after it and retires the
    /// slot; B's retransmission must not run again.
    #[test]
    fn a_retired_slots_first_request_retransmitted_does_not_run_twice() {
        let mut t = SlotTable::new(8, 1024);
        assert_eq!(run(&mut t, 3, 1, b"B"), SlotDecision::Execute);
        t.set_target(1);
        t.client_highest(1);
        t.set_target(7);
        assert_eq!(t.begin(3, 1, 7, true), Ok(SlotDecision::RetryUncached));
        assert_eq!(
            t.begin(3, 1, 9, true),
            Ok(SlotDecision::Execute),
            "a different request restarts the slot"
        );
    }

    /// A client that retransmits at random: every (slot, seqid) executes at most once, and a
    /// retry of a completed cached request returns exactly the bytes of its first execution.
    #[derive(Debug, Clone)]
    enum Step {
        New { slot: u32 },
        Retry { slot: u32 },
        Stale { slot: u32, back: u32 },
        Shrink { target: u32 },
        ClientHighest { highest: u32 },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0u32..10).prop_map(|slot| Step::New { slot }),
            3 => (0u32..10).prop_map(|slot| Step::Retry { slot }),
            1 => (0u32..10, 1u32..4).prop_map(|(slot, back)| Step::Stale { slot, back }),
            1 => (0u32..10).prop_map(|target| Step::Shrink { target }),
            1 => (0u32..10).prop_map(|highest| Step::ClientHighest { highest }),
        ]
    }

    /// A request's digest: requests differ (a slot restarted at 1 carries a new request, not
    /// the one that ran as 1 before), retries are identical.
    fn digest(epoch: u32, seq: u32) -> u64 {
        (u64::from(epoch) << 32) | u64::from(seq)
    }

    proptest! {
        #[test]
        fn exactly_once(steps in proptest::collection::vec(step(), 1..200), cache in any::<bool>()) {
            let mut t = SlotTable::new(8, 64);
            // The client's view: last seqid used per slot.
            let mut last = [0u32; 10];
            // Bumped when the client forgets a slot the server retired (it restarts at 1).
            let mut epoch = [0u32; 10];
            let mut executions: std::collections::HashMap<(u32, u32, u32), u32> =
                Default::default();
            for s in steps {
                match s {
                    Step::New { slot } => {
                        let seq = last[slot as usize] + 1;
                        match t.begin(slot, seq, digest(epoch[slot as usize], seq), cache) {
                            Ok(SlotDecision::Execute) => {
                                *executions.entry((slot, epoch[slot as usize], seq)).or_default() += 1;
                                last[slot as usize] = seq;
                                t.complete(slot, Some(Bytes::from(format!("{slot}:{seq}"))));
                            }
                            Ok(SlotDecision::Replay(_) | SlotDecision::RetryUncached) => {
                                prop_assert!(false, "new seqid taken for a retry")
                            }
                            Err(e) => prop_assert_eq!(e, Nfsstat4::BADSLOT),
                        }
                    }
                    Step::Retry { slot } => {
                        let seq = last[slot as usize];
                        match t.begin(slot, seq, digest(epoch[slot as usize], seq), cache) {
                            Ok(SlotDecision::Replay(b)) => {
                                prop_assert!(cache);
                                prop_assert_eq!(b, Bytes::from(format!("{slot}:{seq}")));
                            }
                            Ok(SlotDecision::Execute) => prop_assert!(false, "a retry executed"),
                            // Not asked for, or freed by a shrink.
                            Ok(SlotDecision::RetryUncached) => {}
                            Err(e) => prop_assert!(
                                [Nfsstat4::BADSLOT, Nfsstat4::SEQ_MISORDERED].contains(&e),
                                "{:?}", e
                            ),
                        }
                    }
                    Step::Stale { slot, back } => {
                        let seq = last[slot as usize].wrapping_sub(back);
                        let r = t.begin(slot, seq, digest(epoch[slot as usize], seq), cache);
                        prop_assert!(r.is_err(), "an old seqid was accepted: {:?}", r);
                    }
                    Step::Shrink { target } => t.set_target(target),
                    Step::ClientHighest { highest } => t.client_highest(highest),
                }
                // Like the Linux client, forget the slots above the server's highest.
                for (i, l) in last.iter_mut().enumerate() {
                    if i as u32 > t.highest_slotid() && *l != 0 {
                        *l = 0;
                        epoch[i] += 1;
                    }
                }
                prop_assert!(t.slots_allocated() <= 8);
                prop_assert!(t.highest_slotid() < 8);
                prop_assert!(t.cached_bytes() <= 8 * 64);
                prop_assert!(!t.busy_except(None));
            }
            for (k, n) in executions {
                prop_assert_eq!(n, 1, "{:?} executed {} times", k, n);
            }
        }
    }
}
