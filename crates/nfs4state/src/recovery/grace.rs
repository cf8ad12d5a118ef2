//! The grace period after a server restart (RFC 8881 §8.4.2), as a pure core: the set of
//! clients the stable records name, the deadline, and the answer to "may this op run now?".
//! Time is an argument; the driver logs what [`Grace::start`] and the `*_end` returns say.
//!
//! # Why
//! A restarted server has forgotten every open and lock, but its clients have not. For one
//! grace period they may reclaim what they held (OPEN with CLAIM_PREVIOUS, LOCK with
//! `reclaim = true`) and nobody may take new state that could conflict with a reclaim: a
//! new OPEN or LOCK, or I/O under an anonymous stateid that bypasses share reservations,
//! gets NFS4ERR_GRACE and the client retries after a pause. Without the stable records a
//! server cannot tell a client that held state from one that did not, so a reclaim from a
//! client not named there is refused (knfsd's `nfsd4_client_record_check`, NFS4ERR_RECLAIM_BAD).
//!
//! # The phases
//! ```text
//!  start(now, records, length) ─┬─ no records ───────────────────────▶ Over(Skipped)
//!                               └─ records ──▶ InGrace{deadline, waiting = records}
//!  InGrace ─┬─ every waiting client sent RECLAIM_COMPLETE or is gone ──▶ Over(AllReclaimed)
//!           ├─ tick(now ≥ deadline), a reclaim since the last look, now < start + 2 × length
//!           │    ──▶ InGrace{deadline = now + EXTENSION_STEP} (extended)
//!           └─ tick(now ≥ deadline) otherwise ──▶ Over(Deadline), the still-waiting records
//!              are handed back: the driver removes them from the stable store
//! ```
//!
//! # Extending grace while reclaims still arrive
//! A server restarted under a thousand clients cannot count on all of them reclaiming within
//! one lease: they come back in a crowd, retry after DELAY, and the last ones would meet
//! NO_GRACE and lose their locks to whoever asks first. knfsd's rule (its laundromat's
//! `clients_still_reclaiming`) is kept: when the deadline comes and some client reclaimed
//! (OPEN CLAIM_PREVIOUS or LOCK reclaim, [`Grace::reclaimed`]) since the last look, grace goes
//! on and is looked at again [`EXTENSION_STEP`] later, as long as reclaims keep coming, but
//! never past twice its length from the start: a client that reclaims one lock a second
//! cannot hold every other client's new state off forever. A deadline with no reclaim since
//! the last look ends grace at once, as before.
//!
//! # What each check answers
//! | call | in grace | after grace |
//! |---|---|---|
//! | [`Grace::check_reclaim`], owner waiting | OK | NFS4ERR_NO_GRACE |
//! | [`Grace::check_reclaim`], owner not in the records | NFS4ERR_RECLAIM_BAD | NFS4ERR_NO_GRACE |
//! | [`Grace::check_reclaim`], owner sent RECLAIM_COMPLETE | NFS4ERR_NO_GRACE | NFS4ERR_NO_GRACE |
//! | [`Grace::check_new_state`] (new OPEN, LOCK, anonymous I/O, SETATTR size) | NFS4ERR_GRACE | OK |
//! | [`Grace::reclaim_complete`], first for this client | OK | OK |
//! | [`Grace::reclaim_complete`], again | NFS4ERR_COMPLETE_ALREADY | NFS4ERR_COMPLETE_ALREADY |
//!
//! I/O under a stateid of this instance is never refused: such a stateid came from a reclaim
//! or from an OPEN that grace already let through, so it cannot conflict with a reclaim.
//!
//! # Bounds
//! The records come from the stable store, itself bounded ([`RECORDS_MAX`]); the set of
//! clients that sent RECLAIM_COMPLETE holds at most [`RECORDS_MAX`] owners too (the client
//! table's own bound is lower), and an owner leaves it when its client is destroyed or expires
//! ([`Grace::client_gone`]). Past the bound RECLAIM_COMPLETE gets NFS4ERR_DELAY.

use sluice_xdr::nfs4::Nfsstat4;
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// Owners tracked at most, in the records and in the completed set. 4096 is four times the
/// client table's default bound (`Config4::clients_max`, 1024), so a server that ran with a
/// larger table still fits; an owner is at most 1024 bytes (NFS4_OPAQUE_LIMIT), so the set
/// costs at most 4 MiB.
pub const RECORDS_MAX: usize = 4096;

/// How much longer grace lasts each time its deadline finds reclaims still arriving: one
/// second, knfsd's laundromat's shortest wait (`NFSD_LAUNDROMAT_MINTIMEOUT`), so grace ends at
/// most a second after the last reclaim once the lease has passed.
pub const EXTENSION_STEP: Duration = Duration::from_secs(1);

/// Why grace ended (or never began). Logged by the driver and kept for the stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// No stable record named a client: nobody held state, so there is nothing to protect.
    Skipped,
    /// Every client of the records sent RECLAIM_COMPLETE or was found gone, before the deadline.
    AllReclaimed,
    /// The grace period ran out; the clients still waiting lose their right to reclaim.
    Deadline,
}

/// The end of grace, as returned to the driver to log and act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraceEnd {
    /// Why it ended.
    pub reason: EndReason,
    /// How long grace lasted (zero when skipped).
    pub lasted: Duration,
    /// Records of clients that never came back (only at [`EndReason::Deadline`]): the driver
    /// removes them from the stable store, as they may no longer reclaim.
    pub forgotten: Vec<Vec<u8>>,
}

/// What the stats report about grace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraceStats {
    /// Clients named by the stable records at start.
    pub clients_recorded: usize,
    /// Clients of the records still expected to reclaim.
    pub clients_waiting: usize,
    /// The configured length of grace.
    pub length: Duration,
    /// Why grace ended, or `None` while it lasts.
    pub ended: Option<EndReason>,
    /// How long grace lasted, once it ended (zero when skipped).
    pub lasted: Option<Duration>,
}

#[derive(Debug)]
enum Phase {
    InGrace { deadline: Instant },
    Over(EndReason, Duration),
}

/// The grace state of one server instance.
#[derive(Debug)]
pub struct Grace {
    phase: Phase,
    started: Instant,
    length: Duration,
    recorded: HashSet<Vec<u8>>,
    waiting: HashSet<Vec<u8>>,
    completed: HashSet<Vec<u8>>,
    /// A reclaim ran since the deadline was last looked at ([`Grace::tick`]).
    reclaimed_since_look: bool,
}

impl Grace {
    /// A server starting at `now` whose stable store named `records` (client owners). Grace
    /// lasts `length` (normally one lease period) unless no record names a client. Returns
    /// the core and, when grace is skipped, its end for the driver to log. Records past
    /// [`RECORDS_MAX`] are ignored (the store never writes that many).
    pub fn start(
        now: Instant,
        records: impl IntoIterator<Item = Vec<u8>>,
        length: Duration,
    ) -> (Self, Option<GraceEnd>) {
        let recorded: HashSet<Vec<u8>> = records.into_iter().take(RECORDS_MAX).collect();
        let skipped = recorded.is_empty();
        let grace = Self {
            phase: if skipped {
                Phase::Over(EndReason::Skipped, Duration::ZERO)
            } else {
                Phase::InGrace {
                    deadline: now + length,
                }
            },
            started: now,
            length,
            waiting: recorded.clone(),
            recorded,
            completed: HashSet::new(),
            reclaimed_since_look: false,
        };
        let end = skipped.then(|| GraceEnd {
            reason: EndReason::Skipped,
            lasted: Duration::ZERO,
            forgotten: Vec::new(),
        });
        (grace, end)
    }

    /// Whether the server is in grace.
    pub fn in_grace(&self) -> bool {
        matches!(self.phase, Phase::InGrace { .. })
    }

    /// When [`Grace::tick`] has something to do, if ever.
    pub fn next_wakeup(&self) -> Option<Instant> {
        match self.phase {
            Phase::InGrace { deadline } => Some(deadline),
            Phase::Over(..) => None,
        }
    }

    /// A reclaim (OPEN CLAIM_PREVIOUS, LOCK reclaim) passed [`Grace::check_reclaim`]: reclaims
    /// are still arriving, and a deadline that finds this extends grace (module notes).
    pub fn reclaimed(&mut self) {
        if self.in_grace() {
            self.reclaimed_since_look = true;
        }
    }

    /// Ends grace when its deadline has passed, unless reclaims are still arriving and grace
    /// has not yet lasted twice its length: then it goes on for [`EXTENSION_STEP`] more.
    pub fn tick(&mut self, now: Instant) -> Option<GraceEnd> {
        match self.phase {
            Phase::InGrace { deadline } if now >= deadline => {
                let limit = self.started + self.length * 2;
                if std::mem::take(&mut self.reclaimed_since_look) && now < limit {
                    self.phase = Phase::InGrace {
                        deadline: (now + EXTENSION_STEP).min(limit),
                    };
                    return None;
                }
                let mut forgotten: Vec<Vec<u8>> = self.waiting.drain().collect();
                forgotten.sort();
                Some(self.end(now, EndReason::Deadline, forgotten))
            }
            _ => None,
        }
    }

    /// May `owner` reclaim state (OPEN CLAIM_PREVIOUS, LOCK with reclaim) now?
    pub fn check_reclaim(&self, owner: &[u8]) -> Result<(), Nfsstat4> {
        if !self.in_grace() || self.completed.contains(owner) {
            return Err(Nfsstat4::NO_GRACE);
        }
        if !self.recorded.contains(owner) {
            return Err(Nfsstat4::RECLAIM_BAD);
        }
        Ok(())
    }

    /// May an op that takes new state or could conflict with a reclaim (a new OPEN, a new
    /// LOCK, READ/WRITE under an anonymous stateid, SETATTR of the size) run now?
    pub fn check_new_state(&self) -> Result<(), Nfsstat4> {
        if self.in_grace() {
            Err(Nfsstat4::GRACE)
        } else {
            Ok(())
        }
    }

    /// RECLAIM_COMPLETE (whole client, `rca_one_fs` false) from `owner`. Ends grace when it
    /// was the last client the records were waiting for.
    pub fn reclaim_complete(
        &mut self,
        now: Instant,
        owner: &[u8],
    ) -> Result<Option<GraceEnd>, Nfsstat4> {
        if self.completed.contains(owner) {
            return Err(Nfsstat4::COMPLETE_ALREADY);
        }
        if self.completed.len() >= RECORDS_MAX {
            return Err(Nfsstat4::DELAY);
        }
        self.completed.insert(owner.to_vec());
        Ok(self.stop_waiting(now, owner))
    }

    /// The client of `owner` was destroyed or expired: it will not reclaim, and a new client
    /// of the same owner must send RECLAIM_COMPLETE afresh. May end grace early.
    pub fn client_gone(&mut self, now: Instant, owner: &[u8]) -> Option<GraceEnd> {
        self.completed.remove(owner);
        self.stop_waiting(now, owner)
    }

    /// What the stats report.
    pub fn stats(&self) -> GraceStats {
        GraceStats {
            clients_recorded: self.recorded.len(),
            clients_waiting: self.waiting.len(),
            length: self.length,
            ended: match self.phase {
                Phase::InGrace { .. } => None,
                Phase::Over(reason, _) => Some(reason),
            },
            lasted: match self.phase {
                Phase::InGrace { .. } => None,
                Phase::Over(_, lasted) => Some(lasted),
            },
        }
    }

    fn stop_waiting(&mut self, now: Instant, owner: &[u8]) -> Option<GraceEnd> {
        // A deadline passed without a tick still ends grace by the deadline, not early.
        if let Some(end) = self.tick(now) {
            return Some(end);
        }
        if !self.waiting.remove(owner) || !self.waiting.is_empty() || !self.in_grace() {
            return None;
        }
        Some(self.end(now, EndReason::AllReclaimed, Vec::new()))
    }

    fn end(&mut self, now: Instant, reason: EndReason, forgotten: Vec<Vec<u8>>) -> GraceEnd {
        let lasted = now.saturating_duration_since(self.started);
        self.phase = Phase::Over(reason, lasted);
        GraceEnd {
            reason,
            lasted,
            forgotten,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LEASE: Duration = Duration::from_secs(90);

    fn owners(names: &[&str]) -> Vec<Vec<u8>> {
        names.iter().map(|n| n.as_bytes().to_vec()).collect()
    }

    #[test]
    fn no_records_skips_grace() {
        let t0 = Instant::now();
        let (g, end) = Grace::start(t0, Vec::new(), LEASE);
        assert!(!g.in_grace());
        assert_eq!(end.unwrap().reason, EndReason::Skipped);
        assert_eq!(g.check_new_state(), Ok(()));
        assert_eq!(g.check_reclaim(b"a"), Err(Nfsstat4::NO_GRACE));
        assert_eq!(g.next_wakeup(), None);
        assert_eq!(g.stats().ended, Some(EndReason::Skipped));
    }

    #[test]
    fn in_grace_only_reclaims_of_recorded_clients_run() {
        let t0 = Instant::now();
        let (g, end) = Grace::start(t0, owners(&["a", "b"]), LEASE);
        assert!(end.is_none());
        assert!(g.in_grace());
        assert_eq!(g.check_new_state(), Err(Nfsstat4::GRACE));
        assert_eq!(g.check_reclaim(b"a"), Ok(()));
        assert_eq!(g.check_reclaim(b"stranger"), Err(Nfsstat4::RECLAIM_BAD));
        assert_eq!(g.next_wakeup(), Some(t0 + LEASE));
    }

    #[test]
    fn grace_ends_early_when_every_client_completed() {
        let t0 = Instant::now();
        let (mut g, _) = Grace::start(t0, owners(&["a", "b"]), LEASE);
        let t1 = t0 + Duration::from_secs(3);
        assert_eq!(g.reclaim_complete(t1, b"a"), Ok(None));
        assert!(g.in_grace());
        // a finished reclaiming: its late reclaims are refused while b still may.
        assert_eq!(g.check_reclaim(b"a"), Err(Nfsstat4::NO_GRACE));
        assert_eq!(g.check_reclaim(b"b"), Ok(()));
        let t2 = t0 + Duration::from_secs(5);
        let end = g.reclaim_complete(t2, b"b").unwrap().unwrap();
        assert_eq!(end.reason, EndReason::AllReclaimed);
        assert_eq!(end.lasted, Duration::from_secs(5));
        assert!(end.forgotten.is_empty());
        assert!(!g.in_grace());
        assert_eq!(g.check_new_state(), Ok(()));
        assert_eq!(g.check_reclaim(b"b"), Err(Nfsstat4::NO_GRACE));
        assert_eq!(g.tick(t0 + LEASE), None, "grace ends once");
    }

    #[test]
    fn a_gone_client_does_not_hold_grace_open() {
        let t0 = Instant::now();
        let (mut g, _) = Grace::start(t0, owners(&["a", "b"]), LEASE);
        assert_eq!(g.reclaim_complete(t0, b"a"), Ok(None));
        let end = g.client_gone(t0 + Duration::from_secs(1), b"b").unwrap();
        assert_eq!(end.reason, EndReason::AllReclaimed);
    }

    #[test]
    fn deadline_forgets_the_absent_clients() {
        let t0 = Instant::now();
        let (mut g, _) = Grace::start(t0, owners(&["a", "b", "c"]), LEASE);
        g.reclaim_complete(t0, b"b").unwrap();
        assert_eq!(g.tick(t0 + LEASE - Duration::from_millis(1)), None);
        assert!(g.in_grace());
        let end = g.tick(t0 + LEASE).unwrap();
        assert_eq!(end.reason, EndReason::Deadline);
        assert_eq!(end.lasted, LEASE);
        assert_eq!(end.forgotten, owners(&["a", "c"]));
        assert_eq!(g.check_reclaim(b"a"), Err(Nfsstat4::NO_GRACE));
        assert_eq!(g.stats().ended, Some(EndReason::Deadline));
        assert_eq!(g.stats().clients_waiting, 0);
    }

    #[test]
    fn reclaim_complete_twice_is_complete_already_until_the_client_goes() {
        let t0 = Instant::now();
        let (mut g, _) = Grace::start(t0, Vec::new(), LEASE);
        assert_eq!(g.reclaim_complete(t0, b"a"), Ok(None));
        assert_eq!(
            g.reclaim_complete(t0, b"a"),
            Err(Nfsstat4::COMPLETE_ALREADY)
        );
        assert_eq!(g.client_gone(t0, b"a"), None);
        assert_eq!(g.reclaim_complete(t0, b"a"), Ok(None));
    }

    #[test]
    fn reclaims_still_arriving_extend_grace_up_to_twice_its_length() {
        let t0 = Instant::now();
        let (mut g, _) = Grace::start(t0, owners(&["a", "b"]), LEASE);
        g.reclaimed();
        // The deadline finds a reclaim since the start: one step more.
        assert_eq!(g.tick(t0 + LEASE), None);
        assert!(g.in_grace());
        assert_eq!(g.check_reclaim(b"b"), Ok(()));
        assert_eq!(g.next_wakeup(), Some(t0 + LEASE + EXTENSION_STEP));
        // Reclaims every step keep it going, but not past twice the length.
        let mut now = t0 + LEASE;
        while g.in_grace() {
            g.reclaimed();
            now = g.next_wakeup().unwrap();
            if let Some(end) = g.tick(now) {
                assert_eq!(end.reason, EndReason::Deadline);
                assert_eq!(end.lasted, LEASE * 2);
                assert_eq!(end.forgotten, owners(&["a", "b"]));
            }
        }
        assert_eq!(now, t0 + LEASE * 2);
        assert_eq!(g.check_reclaim(b"a"), Err(Nfsstat4::NO_GRACE));
    }

    #[test]
    fn a_step_without_a_reclaim_ends_the_extension() {
        let t0 = Instant::now();
        let (mut g, _) = Grace::start(t0, owners(&["a", "b"]), LEASE);
        g.reclaimed();
        assert_eq!(g.tick(t0 + LEASE), None);
        let end = g.tick(t0 + LEASE + EXTENSION_STEP).unwrap();
        assert_eq!(end.reason, EndReason::Deadline);
        assert_eq!(end.lasted, LEASE + EXTENSION_STEP);
        // No reclaim at all: the deadline ends grace, as without the rule.
        let (mut g, _) = Grace::start(t0, owners(&["a"]), LEASE);
        assert_eq!(g.tick(t0 + LEASE).unwrap().lasted, LEASE);
        // A reclaim noted after grace ended changes nothing.
        g.reclaimed();
        assert_eq!(g.tick(t0 + LEASE * 2), None);
        assert!(!g.in_grace());
    }

    /// A thousand clients after a restart, reclaiming one after another 100 ms apart (100 s
    /// for all, past a 90 s lease): every reclaim is in grace, and grace ends within two steps
    /// of the last one (the look that finds it, and the one that finds none), by the deadline
    /// (nobody sent RECLAIM_COMPLETE).
    #[test]
    fn a_thousand_clients_reclaiming_past_the_lease_all_get_grace() {
        let t0 = Instant::now();
        let names: Vec<Vec<u8>> = (0..1000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let (mut g, _) = Grace::start(t0, names.clone(), LEASE);
        let mut now = t0;
        for (i, n) in names.iter().enumerate() {
            now = t0 + Duration::from_millis(100 * (i as u64 + 1));
            // The driver ticks at every wake-up it is given before this reclaim.
            while let Some(w) = g.next_wakeup().filter(|w| *w <= now) {
                assert_eq!(g.tick(w), None, "grace ended before client {i}");
            }
            assert_eq!(g.check_reclaim(n), Ok(()), "client {i}");
            g.reclaimed();
        }
        let mut end = None;
        while end.is_none() {
            end = g.tick(g.next_wakeup().unwrap());
        }
        let end = end.unwrap();
        assert_eq!(end.reason, EndReason::Deadline);
        assert!(end.lasted > now - t0 && end.lasted <= now - t0 + EXTENSION_STEP * 2);
    }

    proptest! {
        /// With reclaims among the events too: grace still ends exactly once, never by the
        /// deadline before its length nor early (all reclaimed) past twice its length, is
        /// over at any look at or past twice its length, and GRACE is answered exactly while
        /// it lasts.
        #[test]
        fn extended_grace_ends_once_within_twice_its_length(
            n in 1usize..5,
            events in proptest::collection::vec((0u8..5, 0usize..6, 0u64..40), 0..40),
        ) {
            let t0 = Instant::now();
            let names: Vec<Vec<u8>> = (0..n).map(|i| vec![b'c', i as u8]).collect();
            let (mut g, _) = Grace::start(t0, names, LEASE);
            let mut ends = 0;
            let mut now = t0;
            for (kind, who, secs) in events {
                now += Duration::from_secs(secs);
                let owner = vec![b'c', who as u8];
                let end = match kind {
                    0 => g.reclaim_complete(now, &owner).ok().flatten(),
                    1 => g.client_gone(now, &owner),
                    2 => {
                        g.reclaimed();
                        None
                    }
                    _ => g.tick(now),
                };
                if let Some(end) = end {
                    ends += 1;
                    prop_assert!(end.lasted <= now - t0);
                    match end.reason {
                        EndReason::AllReclaimed => prop_assert!(end.lasted < LEASE * 2),
                        EndReason::Deadline => prop_assert!(end.lasted >= LEASE),
                        EndReason::Skipped => prop_assert!(false, "skipped only at start"),
                    }
                }
                if kind >= 3 && now >= t0 + LEASE * 2 {
                    prop_assert!(!g.in_grace(), "a look past twice the length ends grace");
                }
                prop_assert_eq!(g.in_grace(), g.check_new_state() == Err(Nfsstat4::GRACE));
            }
            prop_assert!(ends <= 1);
        }
    }

    proptest! {
        /// Whatever order clients complete, go away or time passes in: grace ends exactly
        /// once, never after its deadline, never while a recorded client is still waiting
        /// before the deadline, and GRACE is answered exactly while it lasts.
        #[test]
        fn grace_ends_once_and_on_time(
            n in 0usize..5,
            events in proptest::collection::vec((0u8..4, 0usize..6, 0u64..40), 0..30),
        ) {
            let t0 = Instant::now();
            let names: Vec<Vec<u8>> = (0..n).map(|i| vec![b'c', i as u8]).collect();
            let (mut g, start_end) = Grace::start(t0, names.clone(), LEASE);
            let mut ends = usize::from(start_end.is_some());
            let mut now = t0;
            for (kind, who, secs) in events {
                now += Duration::from_secs(secs);
                let owner = vec![b'c', who as u8];
                let end = match kind {
                    0 => g.reclaim_complete(now, &owner).ok().flatten(),
                    1 => g.client_gone(now, &owner),
                    _ => g.tick(now),
                };
                if let Some(end) = end {
                    ends += 1;
                    prop_assert!(end.lasted <= now - t0);
                    match end.reason {
                        EndReason::AllReclaimed => prop_assert!(end.lasted < LEASE),
                        EndReason::Deadline => prop_assert!(end.lasted >= LEASE),
                        EndReason::Skipped => prop_assert!(false, "skipped only at start"),
                    }
                }
                prop_assert_eq!(g.in_grace(), g.check_new_state() == Err(Nfsstat4::GRACE));
                if g.in_grace() {
                    prop_assert!(g.stats().clients_waiting > 0);
                }
            }
            prop_assert!(ends <= 1);
            if n == 0 {
                prop_assert_eq!(ends, 1);
            }
        }
    }
}
