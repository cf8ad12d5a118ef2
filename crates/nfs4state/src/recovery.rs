//! Restart recovery in [`State4`]: the grace period ([`crate::recovery::grace`]) and the
//! bookkeeping of the stable client records ([`crate::recovery::records`]), as pure entry points.
//! The COMPOUND processor writes the records through a [`crate::store::StateStore`] and the
//! driver logs; this module decides. The files kept open after REMOVE or RENAME
//! ([`crate::recovery::parked`]) are the third thing a restart must know of.
//!
//! # When a client's record is written (and why then)
//! A record must be durable in the store before the client is granted any state it could need to reclaim
//! after a crash; otherwise a crash right after the grant leaves a client that holds state the
//! restarted server refuses to let it reclaim (RECLAIM_BAD). knfsd writes the record of a 4.1
//! client at its RECLAIM_COMPLETE, relying on the client's duty (RFC 8881 §18.51.3) to send it
//! before its first non-reclaim OPEN. A client that skips it would hold unrecorded opens, so
//! the processor also asks before every OPEN: [`State4::record_needed`] names the owner of a
//! client not yet recorded, the driver writes it durably, then [`State4::record_written`]. Both
//! points come before the reply: the record exists before the grant. Locks need an open, so
//! the OPEN covers them. A record is written once per owner and instance (the state keeps the
//! set the store holds), so steady-state OPENs cost a hash lookup.
//!
//! # Before RECLAIM_COMPLETE (RFC 8881 §18.51.3)
//! A 4.1 client "MUST send a RECLAIM_COMPLETE with rca_one_fs set to FALSE, even if there are
//! no locks to reclaim", before "the first non-reclaim operation that obtains a lock", and
//! non-reclaim locking operations before it "will" get NFS4ERR_GRACE. The ops that obtain a
//! lock (share reservation or byte range) are OPEN and LOCK, so [`State4::check_new_state`]
//! refuses, with NFS4ERR_GRACE and whether or not the server is in grace:
//! - OPEN with any claim but CLAIM_PREVIOUS (CLAIM_NULL, CLAIM_FH, CLAIM_DELEGATE_CUR,
//!   CLAIM_DELEG_CUR_FH; the delegation reclaims CLAIM_DELEGATE_PREV / CLAIM_DELEG_PREV_FH
//!   are NOTSUPP before this is asked);
//! - LOCK with `reclaim` false.
//!
//! knfsd refuses the OPENs the same way (in `nfsd4_open`, after its claim checks) but not
//! the LOCK; a LOCK needs an open, which before RECLAIM_COMPLETE is a reclaimed one, so the two
//! differ only for a client whose grace ended between its reclaim and its RECLAIM_COMPLETE:
//! there the RFC's words decide. Everything else (LOOKUP, GETATTR, READ and WRITE under the
//! stateids it holds, CLOSE, LOCKU, DELEGRETURN, ...) obtains no lock and runs as usual; the
//! Linux client sends RECLAIM_COMPLETE and its first GETATTR of the root together.
//!
//! With that duty enforced, the record written at RECLAIM_COMPLETE would cover every grant;
//! the processor still asks before each OPEN (above), which costs a hash lookup and keeps the
//! promise whatever the order of the checks.

//! # When it is removed
//! When the last client record of its owner goes for real: DESTROY_CLIENTID, or expiry (the
//! lease ran out with no state, a courtesy client's `courtesy_max` passed, or a conflict broke
//! a courtesy client). A courtesy client keeps its record: it still holds state it may
//! reclaim. Owners whose grace ran out without a RECLAIM_COMPLETE are removed too, unless a
//! client of that owner is live in this instance (it may have reclaimed and hold state). The
//! removals are collected here and handed to the driver by [`State4::recovery_tick`]: a
//! removal that is late (at most the driver's tick, a second) or lost in a crash costs only a
//! grace period that waits for a client that will not come, never a lost reclaim.
//!
//! # Grace, op by op (RFC 8881 §8.4.2, §18.16.3, §18.10.4, §18.51.3)
//! | op | in grace | after |
//! |---|---|---|
//! | OPEN CLAIM_PREVIOUS, LOCK reclaim, client of the records | reclaims | NO_GRACE |
//! | the same, client not in the records | RECLAIM_BAD | NO_GRACE |
//! | the same, after the client's RECLAIM_COMPLETE | NO_GRACE | NO_GRACE |
//! | OPEN other claims, LOCK without reclaim | GRACE | as usual (GRACE before the client's RECLAIM_COMPLETE) |
//! | READ / WRITE / SETATTR(size) under the anonymous or READ-bypass stateid | GRACE | as usual |
//! | the same under a stateid of this instance | as usual | as usual |
//! | RECLAIM_COMPLETE | may end grace early (AllReclaimed) | as usual |
//!
//! A deadline that finds reclaims still arriving extends grace a second at a time, up to twice
//! its length ([`crate::recovery::grace`], "Extending grace").

pub mod grace;
pub mod parked;
pub mod records;

use crate::recovery::grace::{Grace, GraceEnd, GraceStats};
use crate::state::State4;
use bytes::Bytes;
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{ClientId4, Stateid4};
use std::time::{Duration, Instant};

/// What [`State4::recovery_tick`] hands the driver.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RecoveryTick {
    /// Owners whose stable records the driver removes.
    pub forget: Vec<Bytes>,
    /// Grace ended since the last tick (or was skipped at start): the driver logs it.
    pub ended: Option<GraceEnd>,
}

impl State4 {
    /// Starts this instance's grace period at `now` from the owners the stable store named
    /// (`records`), lasting `length` (normally the lease) unless no record names a client.
    /// The end (when skipped) comes back from the next [`State4::recovery_tick`].
    pub fn start_grace(
        &mut self,
        now: Instant,
        records: impl IntoIterator<Item = Vec<u8>>,
        length: Duration,
    ) {
        let records: Vec<Vec<u8>> = records.into_iter().collect();
        self.recovery.stable = records.iter().map(|o| Bytes::from(o.clone())).collect();
        let (grace, end) = Grace::start(now, records, length);
        self.recovery.grace = Some(grace);
        self.recovery.ended = end;
    }

    /// Whether the server is in its grace period.
    pub fn in_grace(&self) -> bool {
        self.recovery.grace.as_ref().is_some_and(Grace::in_grace)
    }

    /// Grace's figures for the stats, once started.
    pub fn grace_stats(&self) -> Option<GraceStats> {
        self.recovery.grace.as_ref().map(Grace::stats)
    }

    /// The owner of `clientid` when the stable store does not hold it yet: the driver writes
    /// it, durably, then calls [`State4::record_written`], before the op that needs it (OPEN,
    /// RECLAIM_COMPLETE) runs.
    pub fn record_needed(&self, clientid: ClientId4) -> Option<Bytes> {
        let owner = &self.clients.get(clientid).ok()?.owner;
        (!self.recovery.stable.contains(owner)).then(|| owner.clone())
    }

    /// The driver wrote `owner`'s record.
    pub fn record_written(&mut self, owner: &[u8]) {
        self.recovery.stable.insert(Bytes::copy_from_slice(owner));
    }

    /// Ends grace at its deadline, lets the clients that went away stop holding it open, and
    /// hands the driver the records to remove and the end to log. Called with the lease tick.
    pub fn recovery_tick(&mut self, now: Instant) -> RecoveryTick {
        let forget = self.take_gone_records(now);
        let mut out = RecoveryTick {
            ended: self.recovery.ended.take(),
            forget,
        };
        if let Some(end) = self.recovery.grace.as_mut().and_then(|g| g.tick(now)) {
            for owner in &end.forgotten {
                let owner = Bytes::copy_from_slice(owner);
                if !self.owner_live(&owner) && self.recovery.stable.remove(&owner) {
                    out.forget.push(owner);
                }
            }
            out.ended = Some(end);
        }
        out
    }

    /// The records of clients gone since the last look (DESTROY_CLIENTID, expiry), for the
    /// driver to remove from the stable store. DESTROY_CLIENTID takes them at once rather than
    /// leaving them to the next tick: a server stopped right after a client's exit must not
    /// find the record at its next start and hold a grace period for a client that is gone.
    /// A grace period this ends is reported by the next [`State4::recovery_tick`].
    pub fn take_gone_records(&mut self, now: Instant) -> Vec<Bytes> {
        let mut gone = std::mem::take(&mut self.recovery.gone);
        gone.sort_unstable();
        gone.dedup();
        let mut forget = Vec::new();
        for owner in gone {
            if self.owner_live(&owner) {
                continue; // a newer client of the owner still counts on the record
            }
            if let Some(g) = self.recovery.grace.as_mut() {
                if let Some(end) = g.client_gone(now, &owner) {
                    self.recovery.ended = Some(end);
                }
            }
            if self.recovery.stable.remove(&owner) {
                forget.push(owner);
            }
        }
        forget
    }

    /// When [`State4::recovery_tick`] next has something to do (grace's deadline), if ever;
    /// owners gone and an end not yet reported are handled by the driver's next regular tick.
    pub(crate) fn recovery_wakeup(&self) -> Option<Instant> {
        self.recovery.grace.as_ref().and_then(Grace::next_wakeup)
    }

    /// NFS4ERR_GRACE while in grace: for ops that take new state or could conflict with a
    /// reclaim (non-reclaim OPEN and LOCK, anonymous I/O, SETATTR of the size under the
    /// anonymous stateid).
    pub fn check_grace_new_state(&self) -> Result<(), Nfsstat4> {
        match &self.recovery.grace {
            Some(g) => g.check_new_state(),
            None => Ok(()),
        }
    }

    /// May `clientid` take new locking state (OPEN other than CLAIM_PREVIOUS, LOCK without
    /// reclaim)? NFS4ERR_GRACE before its RECLAIM_COMPLETE (module notes, "Before
    /// RECLAIM_COMPLETE"), and in grace.
    pub fn check_new_state(&self, clientid: ClientId4) -> Result<(), Nfsstat4> {
        if !self.clients.get(clientid)?.reclaim_complete {
            return Err(Nfsstat4::GRACE);
        }
        self.check_grace_new_state()
    }

    /// May `clientid` reclaim (OPEN CLAIM_PREVIOUS, LOCK with reclaim) now?
    pub fn check_reclaim(&self, clientid: ClientId4) -> Result<(), Nfsstat4> {
        let rec = self.clients.get(clientid)?;
        if rec.reclaim_complete {
            return Err(Nfsstat4::NO_GRACE);
        }
        match &self.recovery.grace {
            Some(g) => g.check_reclaim(&rec.owner),
            None => Err(Nfsstat4::NO_GRACE),
        }
    }

    /// OPEN with CLAIM_PREVIOUS (§18.16.3): the client's open of `file` from before the
    /// restart, re-established with its share reservation, in grace only.
    pub fn reclaim_open(
        &mut self,
        now: Instant,
        clientid: ClientId4,
        owner: &[u8],
        file: &[u8],
        share_access: u32,
        share_deny: u32,
    ) -> Result<Stateid4, Nfsstat4> {
        self.check_reclaim(clientid)?;
        self.note_reclaimed();
        self.open_share(now, clientid, owner, file, share_access, share_deny)
    }

    /// A reclaim passed [`State4::check_reclaim`]: grace is extended while they still arrive
    /// ([`Grace::reclaimed`]).
    pub(crate) fn note_reclaimed(&mut self) {
        if let Some(g) = self.recovery.grace.as_mut() {
            g.reclaimed();
        }
    }

    /// RECLAIM_COMPLETE's part in grace: may end it early.
    pub(crate) fn grace_reclaim_complete(
        &mut self,
        now: Instant,
        clientid: ClientId4,
    ) -> Result<(), Nfsstat4> {
        let owner = self.clients.get(clientid)?.owner.clone();
        let Some(g) = self.recovery.grace.as_mut() else {
            return Ok(());
        };
        match g.reclaim_complete(now, &owner) {
            Ok(Some(end)) => self.recovery.ended = Some(end),
            Ok(None) => {}
            // An earlier client of the same owner in this instance completed already; this
            // one's own RECLAIM_COMPLETE is counted on its record.
            Err(Nfsstat4::COMPLETE_ALREADY) => {}
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// A client record is about to go for real: its owner's stable record may go with it.
    pub(crate) fn note_gone(&mut self, clientid: ClientId4) {
        // Bounded: past the bound a removal is dropped, which costs at most a longer grace
        // after a crash (module notes), never a reclaim.
        if self.recovery.gone.len() >= crate::recovery::grace::RECORDS_MAX {
            return;
        }
        if let Ok(rec) = self.clients.get(clientid) {
            self.recovery.gone.push(rec.owner.clone());
        }
    }

    fn owner_live(&self, owner: &[u8]) -> bool {
        self.clients.iter().any(|r| r.owner == owner)
    }
}
