//! The client's open files across a server restart, sans IO: which stateid a caller's handle
//! stands for now, and when a reopen pass runs.
//!
//! # Why
//! A restarted server has lost its client records, so the client's next COMPOUND gets
//! BADSESSION, then CREATE_SESSION gets STALE_CLIENTID, and the client makes a new client id
//! (RFC 8881 §8.4.2). Its open stateids died with the old one: a WRITE that presents one gets
//! NFS4ERR_STALE_STATEID (sluice) or BAD_STATEID. The file layer above holds its [`super::Fh`]
//! (handle and stateid) by value for the whole copy, so the stateid cannot be swapped under
//! it; instead the driver keeps this table, keyed by the stateid the caller was given, and
//! rewrites each READ, WRITE, SETATTR and CLOSE to the current stateid as it sends it.
//!
//! # The reopen pass (after every new client id)
//! ```text
//!   new client id ── for each open: PUTFH, OPEN CLAIM_PREVIOUS ── NO_GRACE? ──┐
//!                    (the server is in grace: reclaim)                        │ not in grace:
//!                      └ for each lock owner, each range it held:             │ stop reclaiming
//!                        PUTFH, LOCK reclaim=true (open_to_lock_owner4 with   │
//!                        the new open stateid, then exist_lock_owner4)        │
//!                    RECLAIM_COMPLETE ◄───────────────────────────────────────┘
//!                    for each open not reclaimed: PUTFH, OPEN CLAIM_FH (a new open, no name
//!                    needed: the file may have been renamed since); its locks are lost
//! ```
//! Reclaims (opens and locks) must come before RECLAIM_COMPLETE and new opens after it
//! (RFC 8881 §8.4.2.1, §18.51.3), so the pass has that order whatever the server answers:
//! [`ReclaimPass`] is that order as a state machine, the driver only sends its steps. A server
//! that reports no grace period (NFS4ERR_NO_GRACE, as sluice serve without stable client
//! records) is not asked again for the other files.
//!
//! # Locks outside grace are lost, not taken again
//! A lock that could not be reclaimed (no grace period, or the reclaim refused) is not asked
//! for again as a new lock: between the restart and now another client may have taken the
//! range and changed the data under it, and the holder would never know. Like Linux (which
//! fails the lost lock's file with EIO), the pass logs a warning and drops the lock's record;
//! a later unlock of it is then a no-op and a later lock a new one.
//!
//! # Lock stateids across the pass
//! The caller asks the table for an owner's lock stateid as it builds each LOCK and LOCKU, but
//! a call built before the pass carries the old one. The table maps every lock stateid it gave
//! out to the one to send now ([`OpenTable::translate`]), so such a call is sent again with the
//! reclaimed stateid after the pass, as calls with old open stateids are.
//!
//! # Calls racing the pass
//! The new session is usable before the pass ends, and a WRITE sent meanwhile still carries
//! the old stateid and fails with a stateid error. Such a call waits until no pass runs
//! ([`OpenTable::pass_running`]) and is sent again if a pass finished since it was sent
//! ([`OpenTable::epoch`] grew): then the rewrite gives it the new stateid. A stateid error
//! with no pass in between is the caller's. A new client id made while a pass runs (the server
//! restarted again) marks the pass to run once more rather than starting a second one, so
//! there is never more than one.

use sluice_xdr::nfs4::ops::NfsArgop4;
use sluice_xdr::nfs4::{NfsFh4, Stateid4};
use std::collections::HashMap;

/// Most opens tracked for reopening: 65,536, far above what one client holds (Linux's
/// default open-files limit is 1,024 per process) and ~10 MiB of table at most. An open
/// beyond it still works; it is just not reopened after a server restart.
pub const OPENS_TRACKED_MAX: usize = 1 << 16;

/// One open, as it must be made again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRecord {
    pub fh: NfsFh4,
    /// OPEN4_SHARE_ACCESS_* it was opened with.
    pub access: u32,
    /// The open owner's bytes (the client id part is the current one at reopen).
    pub owner: Vec<u8>,
    /// The stateid to present now (seqid 0: "the current one").
    pub current: Stateid4,
    /// The byte-range locks taken under this open, per lock owner (see [`super::lock`]).
    pub locks: Vec<LockRecord>,
}

/// Most lock owners recorded per open, and ranges per owner: 64 and 1,024. A process holds a
/// handful; past the bound a lock still works, it is just not recorded for a reclaim.
pub const LOCK_OWNERS_MAX: usize = 64;
pub const LOCK_RANGES_MAX: usize = 1024;

/// The locks one lock owner holds under one open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockRecord {
    pub owner: Vec<u8>,
    /// The lock stateid (seqid 0); `None` when the server forgot it (the next LOCK starts
    /// again with open_to_lock_owner4). After a new client id it is the old one until the
    /// reopen pass reclaims the owner's ranges (then the new one) or drops the record.
    pub stateid: Option<Stateid4>,
    /// Ranges held: (write, offset, end) with `end` exclusive (`u64::MAX`: to the end of
    /// the file), disjoint; kept for reclaiming after a server restart.
    pub ranges: Vec<(bool, u64, u64)>,
}

/// `offset + length` as an exclusive end (`u64::MAX` for "to the end").
fn range_end(offset: u64, length: u64) -> u64 {
    offset.saturating_add(length)
}

impl LockRecord {
    /// `[start, end)` no longer held (an unlock, or the part a new lock replaces).
    fn subtract(&mut self, start: u64, end: u64) {
        let mut out = Vec::with_capacity(self.ranges.len() + 1);
        for &(w, s, e) in &self.ranges {
            if e <= start || s >= end {
                out.push((w, s, e));
                continue;
            }
            if s < start {
                out.push((w, s, start));
            }
            if e > end {
                out.push((w, end, e));
            }
        }
        self.ranges = out;
    }
}

/// Whether a reopen pass runs. See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    Idle,
    Running,
    /// A new client id came while the pass ran: run it again when it ends.
    RunningAgain,
}

/// The open files of one client. See the module docs.
#[derive(Debug)]
pub struct OpenTable {
    /// Keyed by the `other` field of the stateid the caller holds.
    records: HashMap<[u8; 12], OpenRecord>,
    pass: Pass,
    /// Reopen passes finished.
    epoch: u64,
    /// Every lock stateid handed out (its `other`) to the one to send for it now: itself, or
    /// the stateid that reclaimed its ranges. At most [`LOCK_IDS_MAX`].
    lock_ids: HashMap<[u8; 12], [u8; 12]>,
}

/// Most lock stateids mapped for rewriting: 65,536; past it a lock stateid is not rewritten
/// (a call racing a reopen pass with it fails with a stateid error instead of being resent).
pub const LOCK_IDS_MAX: usize = 1 << 16;

impl Default for OpenTable {
    fn default() -> Self {
        OpenTable {
            records: HashMap::new(),
            pass: Pass::Idle,
            epoch: 0,
            lock_ids: HashMap::new(),
        }
    }
}

impl OpenTable {
    /// Records a new open whose stateid is `stateid`. False (not tracked) when the table is
    /// full.
    pub fn insert(&mut self, stateid: Stateid4, fh: NfsFh4, access: u32, owner: Vec<u8>) -> bool {
        if self.records.len() >= OPENS_TRACKED_MAX {
            return false;
        }
        let current = Stateid4 {
            seqid: 0,
            ..stateid
        };
        self.records.insert(
            stateid.other,
            OpenRecord {
                fh,
                access,
                owner,
                current,
                locks: Vec::new(),
            },
        );
        true
    }

    /// The lock stateid of `owner` under the open the caller knows as `open`.
    pub fn lock_stateid(&self, open: Stateid4, owner: &[u8]) -> Option<Stateid4> {
        self.records
            .get(&open.other)?
            .locks
            .iter()
            .find(|l| l.owner == owner)?
            .stateid
    }

    /// The server no longer knows the lock stateid of `owner` under `open`.
    pub fn forget_lock_stateid(&mut self, open: Stateid4, owner: &[u8]) {
        let mut gone = Vec::new();
        if let Some(r) = self.records.get_mut(&open.other) {
            for l in r.locks.iter_mut().filter(|l| l.owner == owner) {
                gone.extend(l.stateid.take());
            }
        }
        self.unmap_lock_ids(&gone);
    }

    /// Stops rewriting to (and from) the lock stateids `gone`.
    fn unmap_lock_ids(&mut self, gone: &[Stateid4]) {
        if gone.is_empty() {
            return;
        }
        self.lock_ids
            .retain(|_, now| !gone.iter().any(|g| g.other == *now));
    }

    fn map_lock_id(&mut self, s: Stateid4) {
        if self.lock_ids.len() < LOCK_IDS_MAX || self.lock_ids.contains_key(&s.other) {
            self.lock_ids.insert(s.other, s.other);
        }
    }

    /// A LOCK with `reclaim` gave `owner` (under the open known as `key`) the stateid `new`:
    /// it replaces the old one, and calls carrying the old one are sent with it.
    pub fn lock_reclaimed(&mut self, key: [u8; 12], owner: &[u8], new: Stateid4) {
        let new = Stateid4 { seqid: 0, ..new };
        let Some(l) = self
            .records
            .get_mut(&key)
            .and_then(|r| r.locks.iter_mut().find(|l| l.owner == owner))
        else {
            return;
        };
        let old = l.stateid.replace(new);
        if let Some(old) = old.filter(|o| o.other != new.other) {
            for now in self.lock_ids.values_mut() {
                if *now == old.other {
                    *now = new.other;
                }
            }
        }
        self.map_lock_id(new);
    }

    /// The range `[offset, end)` of `owner` under `key` was not reclaimed: it is lost.
    pub fn lock_lost(&mut self, key: [u8; 12], owner: &[u8], offset: u64, end: u64) {
        if let Some(r) = self.records.get_mut(&key) {
            for l in r.locks.iter_mut().filter(|l| l.owner == owner) {
                l.subtract(offset, end);
            }
        }
    }

    /// After the lock reclaims of the open `key`: drops the lock owners not in `renewed`
    /// (their stateid is the old client id's, their ranges lost). The ranges dropped.
    pub fn settle_locks(&mut self, key: [u8; 12], renewed: &[Vec<u8>]) -> usize {
        let Some(r) = self.records.get_mut(&key) else {
            return 0;
        };
        let mut gone = Vec::new();
        let mut ranges = 0;
        r.locks.retain(|l| {
            let keep = renewed.contains(&l.owner);
            if !keep {
                gone.extend(l.stateid);
                ranges += l.ranges.len();
            }
            keep
        });
        self.unmap_lock_ids(&gone);
        ranges
    }

    /// LOCK granted `owner` the range `[offset, offset + length)` under `open` with
    /// `stateid`: it replaces what the owner held there (POSIX upgrade/downgrade).
    pub fn locked(
        &mut self,
        open: Stateid4,
        owner: &[u8],
        stateid: Stateid4,
        write: bool,
        offset: u64,
        length: u64,
    ) {
        let Some(r) = self.records.get_mut(&open.other) else {
            return;
        };
        let i = match r.locks.iter().position(|l| l.owner == owner) {
            Some(i) => i,
            None if r.locks.len() < LOCK_OWNERS_MAX => {
                r.locks.push(LockRecord {
                    owner: owner.to_vec(),
                    stateid: None,
                    ranges: Vec::new(),
                });
                r.locks.len() - 1
            }
            None => return,
        };
        let l = &mut r.locks[i];
        l.stateid = Some(stateid);
        let end = range_end(offset, length);
        l.subtract(offset, end);
        if l.ranges.len() < LOCK_RANGES_MAX {
            l.ranges.push((write, offset, end));
            l.ranges.sort_by_key(|r| r.1);
        }
        self.map_lock_id(stateid);
    }

    /// LOCKU of `[offset, offset + length)` by `owner` under `open`.
    pub fn unlocked(&mut self, open: Stateid4, owner: &[u8], offset: u64, length: u64) {
        if let Some(r) = self.records.get_mut(&open.other) {
            for l in r.locks.iter_mut().filter(|l| l.owner == owner) {
                l.subtract(offset, range_end(offset, length));
            }
        }
    }

    /// Forgets the open the caller knows as `stateid`; the stateid to CLOSE it with.
    pub fn remove(&mut self, stateid: Stateid4) -> Stateid4 {
        match self.records.remove(&stateid.other) {
            Some(r) => {
                let gone: Vec<Stateid4> = r.locks.iter().filter_map(|l| l.stateid).collect();
                self.unmap_lock_ids(&gone);
                r.current
            }
            None => stateid,
        }
    }

    /// Whether `stateid` is an open this table tracks (not closed).
    pub fn tracks(&self, stateid: Stateid4) -> bool {
        self.records.contains_key(&stateid.other)
    }

    /// The stateid to send for the one the caller holds.
    pub fn current(&self, stateid: Stateid4) -> Stateid4 {
        self.records
            .get(&stateid.other)
            .map_or(stateid, |r| r.current)
    }

    /// Rewrites the stateids of `ops` to the current ones; true if any op carried a tracked
    /// stateid (a stateid error on it may be cured by a reopen).
    pub fn translate(&self, ops: &mut [NfsArgop4]) -> bool {
        let mut tracked = false;
        for op in ops {
            let lock = match op {
                NfsArgop4::Lock(sluice_xdr::nfs4::ops::LockArgs {
                    locker: sluice_xdr::nfs4::ops::Locker4::Exist(e),
                    ..
                }) => Some(&mut e.lock_stateid),
                NfsArgop4::Locku(a) => Some(&mut a.lock_stateid),
                _ => None,
            };
            if let Some(s) = lock {
                if let Some(now) = self.lock_ids.get(&s.other) {
                    *s = Stateid4 {
                        seqid: 0,
                        other: *now,
                    };
                    tracked = true;
                }
                continue;
            }
            let s = match op {
                NfsArgop4::Read(a) => &mut a.stateid,
                NfsArgop4::Write(a) => &mut a.stateid,
                NfsArgop4::Setattr(a) => &mut a.stateid,
                NfsArgop4::Close(a) => &mut a.open_stateid,
                NfsArgop4::Lock(sluice_xdr::nfs4::ops::LockArgs {
                    locker: sluice_xdr::nfs4::ops::Locker4::New(n),
                    ..
                }) => &mut n.open_stateid,
                _ => continue,
            };
            if let Some(r) = self.records.get(&s.other) {
                *s = r.current;
                tracked = true;
            }
        }
        tracked
    }

    /// The opens to make again: (key, record) in no particular order.
    pub fn to_reopen(&self) -> Vec<([u8; 12], OpenRecord)> {
        self.records.iter().map(|(k, r)| (*k, r.clone())).collect()
    }

    /// The open known as `key` was made again with `stateid`. An open closed meanwhile stays
    /// forgotten (the caller CLOSEs the new one itself).
    pub fn reopened(&mut self, key: [u8; 12], stateid: Stateid4) -> bool {
        match self.records.get_mut(&key) {
            Some(r) => {
                r.current = Stateid4 {
                    seqid: 0,
                    ..stateid
                };
                // The lock records stay as they are: the pass reclaims or drops them
                // ([`ReclaimPass`]).
                true
            }
            None => false,
        }
    }

    /// A new client id was made: true if the caller must run the pass now, false if one is
    /// running already (it will run again).
    pub fn start_pass(&mut self) -> bool {
        match self.pass {
            Pass::Idle => {
                self.pass = Pass::Running;
                true
            }
            Pass::Running | Pass::RunningAgain => {
                self.pass = Pass::RunningAgain;
                false
            }
        }
    }

    /// The pass ended: true if it must run again (another new client id came meanwhile).
    pub fn end_pass(&mut self) -> bool {
        match self.pass {
            Pass::RunningAgain => {
                self.pass = Pass::Running;
                true
            }
            _ => {
                self.pass = Pass::Idle;
                self.epoch += 1;
                false
            }
        }
    }

    pub fn pass_running(&self) -> bool {
        self.pass != Pass::Idle
    }

    /// Passes finished so far.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// One call of the reopen pass, in the order the pass must send them (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// PUTFH, OPEN CLAIM_PREVIOUS of this open.
    ClaimPrevious(OpenRecord),
    /// PUTFH `fh`, LOCK with `reclaim`: with `lock_stateid` (exist_lock_owner4) once the owner
    /// has one in this pass, else open_to_lock_owner4 with `open_stateid` and `owner`.
    ReclaimLock {
        fh: NfsFh4,
        open_stateid: Stateid4,
        owner: Vec<u8>,
        lock_stateid: Option<Stateid4>,
        write: bool,
        offset: u64,
        /// `u64::MAX`: to the end of the file.
        length: u64,
    },
    /// RECLAIM_COMPLETE: every reclaim has been sent.
    ReclaimComplete,
    /// PUTFH, OPEN CLAIM_FH of this open (a new open; its locks were dropped as lost).
    ClaimFh(OpenRecord),
    Done,
}

/// What the server answered to a [`Step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The open or lock stateid granted.
    Ok(Stateid4),
    /// NFS4ERR_NO_GRACE: the server has no grace period (any more); reclaim nothing else.
    NoGrace,
    /// Any other failure.
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Claim,
    Complete,
    Fh,
    Done,
}

/// What one reopen pass did, for its log line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassCounts {
    pub reclaimed: usize,
    pub reopened: usize,
    pub locks_reclaimed: usize,
    /// Ranges dropped: not reclaimed (no grace, refused) or under an open made again outside
    /// grace.
    pub locks_lost: usize,
}

/// The open being reclaimed and its lock ranges still to reclaim.
#[derive(Debug)]
struct Current {
    key: [u8; 12],
    fh: NfsFh4,
    open: Stateid4,
    /// (owner, write, offset, end), owner by owner.
    todo: std::collections::VecDeque<(Vec<u8>, bool, u64, u64)>,
    /// Owners that got a lock stateid in this pass, with it.
    renewed: Vec<(Vec<u8>, Stateid4)>,
}

/// One reopen pass as a state machine: [`ReclaimPass::next`] says what to send,
/// [`ReclaimPass::answer`] takes the reply and updates the [`OpenTable`]. Whatever the
/// answers, every reclaim comes before RECLAIM_COMPLETE and every new open after it.
#[derive(Debug)]
pub struct ReclaimPass {
    claim: std::collections::VecDeque<([u8; 12], OpenRecord)>,
    rest: std::collections::VecDeque<([u8; 12], OpenRecord)>,
    grace: bool,
    phase: Phase,
    current: Option<Current>,
    /// The step sent and not yet answered, with its key.
    asked: Option<([u8; 12], Step)>,
    pub counts: PassCounts,
}

impl ReclaimPass {
    /// A pass over the opens `todo` ([`OpenTable::to_reopen`]).
    pub fn new(todo: Vec<([u8; 12], OpenRecord)>) -> Self {
        ReclaimPass {
            claim: todo.into(),
            rest: Default::default(),
            grace: true,
            phase: Phase::Claim,
            current: None,
            asked: None,
            counts: PassCounts::default(),
        }
    }

    /// The next call to send; [`Step::Done`] at the end. Each open and lock step must be
    /// answered before the next is asked for (RECLAIM_COMPLETE needs no answer).
    pub fn next(&mut self, table: &mut OpenTable) -> Step {
        assert!(self.asked.is_none(), "reopen pass: a step was not answered");
        loop {
            match self.phase {
                Phase::Claim => {
                    if let Some(c) = &mut self.current {
                        if let Some((owner, write, offset, end)) = c.todo.pop_front() {
                            if !self.grace {
                                table.lock_lost(c.key, &owner, offset, end);
                                self.counts.locks_lost += 1;
                                continue;
                            }
                            let lock_stateid =
                                c.renewed.iter().find(|(o, _)| *o == owner).map(|(_, s)| *s);
                            let step = Step::ReclaimLock {
                                fh: c.fh.clone(),
                                open_stateid: c.open,
                                owner,
                                lock_stateid,
                                write,
                                offset,
                                length: if end == u64::MAX {
                                    u64::MAX
                                } else {
                                    end - offset
                                },
                            };
                            self.asked = Some((c.key, step.clone()));
                            return step;
                        }
                        let c = self.current.take().expect("just seen");
                        let renewed: Vec<Vec<u8>> = c.renewed.into_iter().map(|(o, _)| o).collect();
                        self.counts.locks_lost += table.settle_locks(c.key, &renewed);
                        continue;
                    }
                    match self.claim.pop_front() {
                        Some((key, rec)) if self.grace => {
                            let step = Step::ClaimPrevious(rec);
                            self.asked = Some((key, step.clone()));
                            return step;
                        }
                        Some(r) => self.rest.push_back(r),
                        None => {
                            self.phase = Phase::Complete;
                            return Step::ReclaimComplete;
                        }
                    }
                }
                Phase::Complete => self.phase = Phase::Fh,
                Phase::Fh => match self.rest.pop_front() {
                    Some((key, rec)) => {
                        let step = Step::ClaimFh(rec);
                        self.asked = Some((key, step.clone()));
                        return step;
                    }
                    None => self.phase = Phase::Done,
                },
                Phase::Done => return Step::Done,
            }
        }
    }

    /// The server's answer to the step last asked for.
    pub fn answer(&mut self, a: Answer, table: &mut OpenTable) {
        let Some((key, step)) = self.asked.take() else {
            return;
        };
        match step {
            Step::ClaimPrevious(rec) => match a {
                Answer::Ok(s) => {
                    self.counts.reclaimed += 1;
                    if !table.reopened(key, s) {
                        return;
                    }
                    let mut todo = std::collections::VecDeque::new();
                    for l in &rec.locks {
                        for &(w, off, end) in &l.ranges {
                            todo.push_back((l.owner.clone(), w, off, end));
                        }
                    }
                    self.current = Some(Current {
                        key,
                        fh: rec.fh,
                        open: Stateid4 { seqid: 0, ..s },
                        todo,
                        renewed: Vec::new(),
                    });
                }
                Answer::NoGrace => {
                    self.grace = false;
                    self.rest.push_back((key, rec));
                }
                Answer::Failed => self.rest.push_back((key, rec)),
            },
            Step::ReclaimLock {
                owner,
                offset,
                length,
                ..
            } => {
                let c = self.current.as_mut().expect("a lock reclaim has its open");
                match a {
                    Answer::Ok(s) => {
                        self.counts.locks_reclaimed += 1;
                        table.lock_reclaimed(key, &owner, s);
                        let s = Stateid4 { seqid: 0, ..s };
                        match c.renewed.iter_mut().find(|(o, _)| *o == owner) {
                            Some(r) => r.1 = s,
                            None => c.renewed.push((owner, s)),
                        }
                    }
                    Answer::NoGrace | Answer::Failed => {
                        if a == Answer::NoGrace {
                            self.grace = false;
                        }
                        self.counts.locks_lost += 1;
                        table.lock_lost(key, &owner, offset, range_end(offset, length));
                    }
                }
            }
            Step::ClaimFh(_) => {
                if let Answer::Ok(s) = a {
                    self.counts.reopened += 1;
                    table.reopened(key, s);
                }
                // Made again outside grace (or not at all): its locks are not taken again.
                self.counts.locks_lost += table.settle_locks(key, &[]);
            }
            Step::ReclaimComplete | Step::Done => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_xdr::nfs4::ops::{CloseArgs, ReadArgs};

    fn sid(n: u8, seqid: u32) -> Stateid4 {
        Stateid4 {
            seqid,
            other: [n; 12],
        }
    }

    fn read(s: Stateid4) -> NfsArgop4 {
        NfsArgop4::Read(ReadArgs {
            stateid: s,
            offset: 0,
            count: 1,
        })
    }

    #[test]
    fn locks_are_recorded_per_owner_with_split_and_replaced_ranges() {
        let mut t = OpenTable::default();
        let open = sid(1, 1);
        assert!(t.insert(
            open,
            NfsFh4(bytes::Bytes::from_static(b"f")),
            3,
            b"o".to_vec()
        ));
        assert_eq!(
            t.lock_stateid(open, b"a"),
            None,
            "first lock: open_to_lock_owner"
        );
        let lk = sid(9, 0);
        t.locked(open, b"a", lk, true, 0, 100);
        assert_eq!(t.lock_stateid(open, b"a"), Some(lk));
        assert_eq!(t.lock_stateid(open, b"b"), None, "per owner");
        // A read lock over the middle replaces that part (a downgrade), an unlock splits.
        t.locked(open, b"a", lk, false, 40, 20);
        t.unlocked(open, b"a", 0, 10);
        let r = &t.records[&open.other].locks[0].ranges;
        assert_eq!(r, &[(true, 10, 40), (false, 40, 60), (true, 60, 100)]);
        // To the end of the file.
        t.locked(open, b"a", lk, true, 200, u64::MAX);
        t.unlocked(open, b"a", 0, u64::MAX);
        assert!(t.records[&open.other].locks[0].ranges.is_empty());
        // A new client id: the record stays as it is for the reclaim.
        t.locked(open, b"a", lk, true, 0, 1);
        assert!(t.reopened(open.other, sid(2, 1)));
        assert_eq!(t.lock_stateid(open, b"a"), Some(lk));
        assert_eq!(t.records[&open.other].locks[0].ranges, [(true, 0, 1)]);
    }

    fn locker(step: &Step) -> (Option<Stateid4>, Stateid4, u64, u64) {
        match step {
            Step::ReclaimLock {
                lock_stateid,
                open_stateid,
                offset,
                length,
                ..
            } => (*lock_stateid, *open_stateid, *offset, *length),
            s => panic!("not a lock reclaim: {s:?}"),
        }
    }

    #[test]
    fn the_pass_reclaims_opens_then_their_locks_then_completes_and_rewrites_lock_stateids() {
        use sluice_xdr::nfs4::ops::{LockArgs, Locker4, LockuArgs};
        let mut t = OpenTable::default();
        let open = sid(1, 1);
        t.insert(open, NfsFh4::from(&b"f"[..]), 3, b"o".to_vec());
        let old = sid(7, 0);
        t.locked(open, b"a", old, true, 0, 10);
        t.locked(open, b"a", old, false, 20, u64::MAX);
        // An owner that unlocked everything: nothing to reclaim, its stateid is dropped.
        t.locked(open, b"b", sid(8, 0), true, 0, 1);
        t.unlocked(open, b"b", 0, 1);
        let mut p = ReclaimPass::new(t.to_reopen());
        assert!(matches!(p.next(&mut t), Step::ClaimPrevious(_)));
        p.answer(Answer::Ok(sid(2, 1)), &mut t);
        // The first range: open_to_lock_owner4 with the new open stateid.
        let s = p.next(&mut t);
        assert_eq!(locker(&s), (None, sid(2, 0), 0, 10));
        p.answer(Answer::Ok(sid(9, 1)), &mut t);
        // The second: the lock stateid just granted; "to the end" stays u64::MAX.
        let s = p.next(&mut t);
        assert_eq!(locker(&s), (Some(sid(9, 0)), sid(2, 0), 20, u64::MAX));
        p.answer(Answer::Ok(sid(9, 2)), &mut t);
        assert_eq!(p.next(&mut t), Step::ReclaimComplete, "reclaims first");
        assert_eq!(p.next(&mut t), Step::Done);
        assert_eq!(
            p.counts,
            PassCounts {
                reclaimed: 1,
                reopened: 0,
                locks_reclaimed: 2,
                locks_lost: 0
            }
        );
        assert_eq!(t.lock_stateid(open, b"a"), Some(sid(9, 0)));
        assert_eq!(t.lock_stateid(open, b"b"), None);
        // A LOCKU built before the pass goes out with the reclaimed stateid.
        let mut ops = [
            NfsArgop4::Locku(LockuArgs {
                lock_stateid: old,
                ..LockuArgs::default()
            }),
            NfsArgop4::Lock(LockArgs {
                locker: Locker4::Exist(sluice_xdr::nfs4::ops::ExistLockOwner4 {
                    lock_stateid: sid(7, 3),
                    lock_seqid: 0,
                }),
                ..LockArgs::default()
            }),
        ];
        assert!(t.translate(&mut ops));
        let NfsArgop4::Locku(u) = &ops[0] else {
            unreachable!()
        };
        assert_eq!(u.lock_stateid, sid(9, 0));
        let NfsArgop4::Lock(LockArgs {
            locker: Locker4::Exist(e),
            ..
        }) = &ops[1]
        else {
            unreachable!()
        };
        assert_eq!(e.lock_stateid, sid(9, 0));
        // Closed: no longer rewritten.
        t.remove(open);
        let mut ops = [NfsArgop4::Locku(LockuArgs {
            lock_stateid: old,
            ..LockuArgs::default()
        })];
        assert!(!t.translate(&mut ops));
    }

    #[test]
    fn without_grace_opens_are_made_again_after_reclaim_complete_and_their_locks_dropped() {
        let mut t = OpenTable::default();
        for n in [1, 2] {
            t.insert(
                sid(n, 1),
                NfsFh4(bytes::Bytes::from(vec![n])),
                3,
                b"o".to_vec(),
            );
            t.locked(sid(n, 1), b"a", sid(n + 10, 0), true, 0, 10);
        }
        let mut p = ReclaimPass::new(t.to_reopen());
        assert!(matches!(p.next(&mut t), Step::ClaimPrevious(_)));
        p.answer(Answer::NoGrace, &mut t);
        // Not asked again for the other file; RECLAIM_COMPLETE before the new opens.
        assert_eq!(p.next(&mut t), Step::ReclaimComplete);
        for n in 0..2 {
            assert!(matches!(p.next(&mut t), Step::ClaimFh(_)));
            p.answer(Answer::Ok(sid(20 + n, 1)), &mut t);
        }
        assert_eq!(p.next(&mut t), Step::Done);
        assert_eq!((p.counts.reopened, p.counts.locks_lost), (2, 2));
        for n in [1, 2] {
            assert_eq!(t.lock_stateid(sid(n, 1), b"a"), None);
            assert!(t.records[&sid(n, 1).other].locks.is_empty());
        }
        let mut ops = [NfsArgop4::Locku(sluice_xdr::nfs4::ops::LockuArgs {
            lock_stateid: sid(11, 0),
            ..Default::default()
        })];
        assert!(
            !t.translate(&mut ops),
            "a lost lock's stateid is not rewritten"
        );
    }

    #[test]
    fn grace_ending_mid_pass_loses_the_remaining_locks_and_keeps_the_order() {
        let mut t = OpenTable::default();
        let open = sid(1, 1);
        t.insert(open, NfsFh4::from(&b"f"[..]), 3, b"o".to_vec());
        t.locked(open, b"a", sid(7, 0), true, 0, 10);
        t.locked(open, b"a", sid(7, 0), true, 20, 10);
        let mut p = ReclaimPass::new(t.to_reopen());
        assert!(matches!(p.next(&mut t), Step::ClaimPrevious(_)));
        p.answer(Answer::Ok(sid(2, 1)), &mut t);
        assert!(matches!(p.next(&mut t), Step::ReclaimLock { .. }));
        p.answer(Answer::NoGrace, &mut t);
        // The second range is not asked for.
        assert_eq!(p.next(&mut t), Step::ReclaimComplete);
        assert_eq!(p.next(&mut t), Step::Done);
        assert_eq!((p.counts.locks_reclaimed, p.counts.locks_lost), (0, 2));
        assert_eq!(t.lock_stateid(open, b"a"), None);
    }

    #[test]
    fn a_first_lock_presents_the_current_open_stateid() {
        use sluice_xdr::nfs4::ops::{LockArgs, Locker4, OpenToLockOwner4};
        let mut t = OpenTable::default();
        let open = sid(1, 1);
        t.insert(
            open,
            NfsFh4(bytes::Bytes::from_static(b"f")),
            3,
            b"o".to_vec(),
        );
        t.reopened(open.other, sid(2, 5));
        let mut ops = [NfsArgop4::Lock(LockArgs {
            locker: Locker4::New(OpenToLockOwner4 {
                open_stateid: Stateid4 { seqid: 0, ..open },
                ..OpenToLockOwner4::default()
            }),
            ..LockArgs::default()
        })];
        assert!(t.translate(&mut ops));
        let NfsArgop4::Lock(LockArgs {
            locker: Locker4::New(n),
            ..
        }) = &ops[0]
        else {
            unreachable!()
        };
        assert_eq!(n.open_stateid, sid(2, 0));
    }

    #[test]
    fn a_reopened_file_is_sent_with_its_new_stateid_and_closed_with_it() {
        let mut t = OpenTable::default();
        assert!(t.insert(sid(1, 1), NfsFh4::from(&b"a"[..]), 3, b"o".to_vec()));
        let mut ops = vec![NfsArgop4::Putfh(NfsFh4::from(&b"a"[..])), read(sid(1, 0))];
        assert!(t.translate(&mut ops));
        assert_eq!(ops[1], read(sid(1, 0)), "unchanged before a restart");
        let (key, rec) = t.to_reopen().pop().unwrap();
        assert_eq!((rec.access, rec.owner.as_slice()), (3, &b"o"[..]));
        assert!(t.reopened(key, sid(9, 1)));
        let mut ops = vec![read(sid(1, 0))];
        assert!(t.translate(&mut ops));
        assert_eq!(
            ops[0],
            read(sid(9, 0)),
            "the current open's stateid, seqid 0"
        );
        let mut close = vec![NfsArgop4::Close(CloseArgs {
            seqid: 0,
            open_stateid: sid(1, 0),
        })];
        t.translate(&mut close);
        assert_eq!(t.remove(sid(1, 0)), sid(9, 0));
        assert!(t.is_empty());
        assert!(
            !t.reopened(key, sid(10, 1)),
            "closed meanwhile: stays forgotten"
        );
    }

    #[test]
    fn untracked_stateids_pass_through() {
        let t = OpenTable::default();
        let mut ops = vec![read(Stateid4::ANONYMOUS)];
        assert!(!t.translate(&mut ops));
        assert_eq!(ops[0], read(Stateid4::ANONYMOUS));
        assert_eq!(t.current(sid(4, 0)), sid(4, 0));
    }

    #[test]
    fn a_new_client_id_during_a_pass_runs_the_pass_again_not_twice_at_once() {
        let mut t = OpenTable::default();
        assert!(!t.pass_running());
        assert!(t.start_pass());
        assert!(t.pass_running());
        assert!(!t.start_pass(), "one pass at a time");
        assert!(t.end_pass(), "run again for the second new client id");
        assert_eq!(t.epoch(), 0);
        assert!(!t.end_pass());
        assert!(!t.pass_running());
        assert_eq!(t.epoch(), 1, "one finished pass");
    }

    #[test]
    fn the_table_is_bounded() {
        let mut t = OpenTable::default();
        for i in 0..OPENS_TRACKED_MAX as u32 {
            let mut other = [0u8; 12];
            other[..4].copy_from_slice(&i.to_be_bytes());
            assert!(t.insert(
                Stateid4 { seqid: 1, other },
                NfsFh4::from(&b"f"[..]),
                1,
                Vec::new()
            ));
        }
        assert!(!t.insert(sid(0xff, 1), NfsFh4::from(&b"f"[..]), 1, Vec::new()));
        assert_eq!(t.len(), OPENS_TRACKED_MAX);
    }
}
