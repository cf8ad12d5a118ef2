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
//!                                   (the server is in grace: reclaim)        │ not in grace:
//!                    RECLAIM_COMPLETE ◄──────────────────────────────────────┘ stop reclaiming
//!                    for each open not reclaimed: PUTFH, OPEN CLAIM_FH (a new open, no name
//!                    needed: the file may have been renamed since)
//! ```
//! Reclaims must come before RECLAIM_COMPLETE and new opens after it (§18.51.3), so the pass
//! has that order whatever the server answers. A server that reports no grace period
//! (NFS4ERR_NO_GRACE, as sluice serve without stable client records) is not asked again for
//! the other files.
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
    /// The lock stateid (seqid 0); `None` after a new client id, when the server forgot it
    /// (the next LOCK starts again with open_to_lock_owner4).
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
}

impl Default for OpenTable {
    fn default() -> Self {
        OpenTable {
            records: HashMap::new(),
            pass: Pass::Idle,
            epoch: 0,
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

    /// A new client id was made: the server has no lock stateids of the old one.
    pub fn forget_lock_stateid(&mut self, open: Stateid4, owner: &[u8]) {
        if let Some(r) = self.records.get_mut(&open.other) {
            for l in r.locks.iter_mut().filter(|l| l.owner == owner) {
                l.stateid = None;
            }
        }
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
        self.records
            .remove(&stateid.other)
            .map_or(stateid, |r| r.current)
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
                // The lock stateids died with the old client id; the ranges stay recorded.
                // TODO(#15): reclaim them here (LOCK with `reclaim` in the grace period).
                for l in &mut r.locks {
                    l.stateid = None;
                }
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
        // A new client id: the lock stateid is gone, the record stays for a reclaim.
        t.locked(open, b"a", lk, true, 0, 1);
        assert!(t.reopened(open.other, sid(2, 1)));
        assert_eq!(t.lock_stateid(open, b"a"), None);
        assert_eq!(t.records[&open.other].locks[0].ranges, [(true, 0, 1)]);
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
