//! Lock stateids (RFC 8881 §8.2, §9.1, §18.10-§18.12): one per (client, lock owner, file),
//! tied to the open it was created from, over the byte-range table of [`crate::locks::ranges`].
//!
//! # Life of a lock stateid
//! ```text
//!   LOCK with open_to_lock_owner4 (an open stateid of the file, a new lock owner)
//!     │  denied or refused: no stateid is created
//!     ▼
//!   lock stateid, seqid 1 ──LOCK with exist_lock_owner4 / LOCKU──▶ seqid + 1 (each change)
//!     │  a LOCKU of the last range leaves it valid (§8.2.4), holding nothing
//!     ├─ FREE_STATEID: NFS4ERR_LOCKS_HELD while it holds ranges, else gone
//!     ├─ CLOSE of its open: gone with its ranges (see below)
//!     └─ client expiry (lease + courtesy), DESTROY_CLIENTID, a replaced client record: gone
//! ```
//! A second open_to_lock_owner4 LOCK by a lock owner that already has a stateid for the file
//! gets that stateid back (bumped), as knfsd does.
//!
//! Its `other` is `boot_epoch (4) | index (4) | random (4)` like an open stateid's, with the
//! top bit of the index set: open and lock stateids never share an `other` (the open table
//! counts its indexes from 1 and would need 2^31 opens to reach that bit; the allocator checks
//! the open table anyway). The checks of a presented stateid are those of open stateids
//! (STALE / BAD / OLD, seqid 0 meaning the current one); the `lock_seqid` and LOCKU's `seqid`
//! fields are ignored, as minor version 1 requires (§8.13: the session's slot orders requests).
//!
//! # CLOSE with locks held (§18.2.4)
//! The RFC lets a server free all of an open's locks on CLOSE, and requires NFS4ERR_LOCKS_HELD
//! only from a server that would leave locks behind. knfsd frees them (the Linux client
//! unlocks before it closes anyway); so do we, so CLOSE never answers LOCKS_HELD. A lock
//! stateid whose open is gone is gone with it. FREE_STATEID is where LOCKS_HELD arises.
//!
//! # Blocking locks and callbacks
//! READW_LT and WRITEW_LT are answered like READ_LT and WRITE_LT: NFS4ERR_DENIED at once, and
//! the client polls (§9.6 allows it). CB_NOTIFY_LOCK is not offered (OPEN never sets
//! OPEN4_RESULT_MAY_NOTIFY_LOCK), so no waiter is queued and nothing needs a timer.
//!
//! # Courtesy clients
//! A lock of a courtesy client (or of a client whose lease ran out and that `tick` has not seen
//! yet) that conflicts with a LOCK is not a reason to deny it: the courtesy client is expired
//! whole, as for a conflicting OPEN, and the LOCK proceeds. LOCKT changes no state: it just
//! does not report such locks, since a LOCK would break them.
//!
//! # Backend locks: owner keys and what to release
//! A backend that also holds the locks (CephFS takes them in Ceph, so that other Ceph clients
//! see them) names a lock owner by a number: [`LockState::owner_key`], one per (client, lock
//! owner bytes) while that owner has a lock stateid, drawn from a counter (never reused in this
//! server's life, so two owners never share one; 2^64 draws never wrap). This table does no
//! I/O, so when a lock stateid goes (FREE_STATEID, CLOSE of its open, the client's expiry,
//! DESTROY_CLIENTID, a client record replaced by a new EXCHANGE_ID, a courtesy client broken
//! by a conflicting LOCK) or a LOCKU leaves its owner nothing on the file, it queues a
//! [`LockRelease`]: "drop every backend lock of this owner on this file". The server's driver
//! takes the queue ([`LockStates::take_released`]) after each call into the state and hands
//! each entry to the backends. The queue holds at most one entry per lock stateid removed or
//! emptied since the last take, so it is bounded by the lock stateids' own bound between two
//! takes.
//!
//! # Bounds
//! Lock stateids per client and overall, and lock ranges per client and overall (the same two
//! numbers, [`crate::config::Config4::locks_per_client_max`] and [`crate::config::Config4::locks_max`]); at a
//! bound courtesy clients are expired first, then the answer is NFS4ERR_DELAY.

use crate::ids::Entropy;
use crate::locks::ranges::{LockError, LockTable, Owner, Range};
use crate::opens::Other;
use bytes::Bytes;
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{ClientId4, Stateid4, OTHER_SIZE};
use std::collections::HashMap;

/// Marks the index of a lock stateid's `other`.
const LOCK_INDEX_BIT: u32 = 0x8000_0000;

/// One lock stateid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockState {
    pub clientid: ClientId4,
    /// The lock owner's bytes.
    pub owner: Bytes,
    pub file: Bytes,
    /// The open stateid it was created from.
    pub open: Other,
    pub seqid: u32,
    /// The lock owner's number for backends (module notes), the same for all of the owner's
    /// lock stateids.
    pub owner_key: u64,
}

/// Every backend lock of owner `owner_key` on `file` (the file's key, its handle's
/// `FileSystem::state_key`) is to go: the state holds none of them any more (module notes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockRelease {
    pub file: Bytes,
    pub owner_key: u64,
}

impl LockState {
    pub fn lock_owner(&self) -> Owner {
        Owner {
            clientid: self.clientid,
            owner: self.owner.clone(),
        }
    }
}

/// Lock stateids and the byte ranges they hold.
#[derive(Debug)]
pub struct LockStates {
    states: HashMap<Other, LockState>,
    /// (client, lock owner, file) → its stateid's other.
    by_owner: HashMap<(ClientId4, Bytes, Bytes), Other>,
    per_client: HashMap<ClientId4, usize>,
    /// (client, lock owner) → its backend number and how many lock stateids it has.
    owner_keys: HashMap<(ClientId4, Bytes), (u64, usize)>,
    /// The next owner key drawn; starts at 1.
    next_owner_key: u64,
    /// Backend locks to drop, for the driver (module notes).
    released: Vec<LockRelease>,
    /// The ranges.
    pub ranges: LockTable,
    boot_epoch: u32,
    next_index: u32,
    per_client_max: usize,
    total_max: usize,
}

impl LockStates {
    pub fn new(boot_epoch: u32, per_client_max: usize, total_max: usize) -> Self {
        Self {
            states: HashMap::new(),
            by_owner: HashMap::new(),
            per_client: HashMap::new(),
            owner_keys: HashMap::new(),
            next_owner_key: 1,
            released: Vec::new(),
            ranges: LockTable::new(per_client_max, total_max),
            boot_epoch,
            next_index: 0,
            per_client_max,
            total_max,
        }
    }

    /// Whether `other` names a lock stateid (of this instance, alive).
    pub fn knows(&self, other: &Other) -> bool {
        self.states.contains_key(other)
    }

    /// Checks a lock stateid of `clientid` (of `file`, when given), as open stateids are
    /// checked ([`crate::opens`]' table).
    pub fn check(
        &self,
        clientid: ClientId4,
        stateid: &Stateid4,
        file: Option<&[u8]>,
    ) -> Result<&LockState, Nfsstat4> {
        crate::opens::check_stateid(
            self.boot_epoch,
            &self.states,
            clientid,
            stateid,
            file,
            |s| (s.clientid, &s.file[..], s.seqid),
        )
    }

    /// The lock stateid of (client, owner, file), if there is one.
    pub fn find(&self, clientid: ClientId4, owner: &Bytes, file: &[u8]) -> Option<Other> {
        self.by_owner
            .get(&(clientid, owner.clone(), Bytes::copy_from_slice(file)))
            .copied()
    }

    /// Whether a new lock stateid of `clientid` fits the bounds.
    pub fn has_room(&self, clientid: ClientId4) -> bool {
        self.count_for(clientid) < self.per_client_max && self.states.len() < self.total_max
    }

    /// A new lock stateid, seqid 1 (the caller checked [`LockStates::has_room`]); `taken`
    /// tells the `other` values in use elsewhere (the open table).
    pub fn create(
        &mut self,
        clientid: ClientId4,
        owner: Bytes,
        file: Bytes,
        open: Other,
        entropy: &mut dyn Entropy,
        taken: &dyn Fn(&Other) -> bool,
    ) -> Stateid4 {
        debug_assert!(self.has_room(clientid));
        let other = loop {
            let mut o = [0u8; OTHER_SIZE];
            o[..4].copy_from_slice(&self.boot_epoch.to_be_bytes());
            let index = LOCK_INDEX_BIT | (self.next_index & !LOCK_INDEX_BIT);
            o[4..8].copy_from_slice(&index.to_be_bytes());
            entropy.fill(&mut o[8..]);
            self.next_index = self.next_index.wrapping_add(1);
            if !self.states.contains_key(&o) && !taken(&o) {
                break o;
            }
        };
        self.by_owner
            .insert((clientid, owner.clone(), file.clone()), other);
        let next = &mut self.next_owner_key;
        let key = self
            .owner_keys
            .entry((clientid, owner.clone()))
            .or_insert_with(|| {
                let k = *next;
                *next += 1;
                (k, 0)
            });
        key.1 += 1;
        let owner_key = key.0;
        self.states.insert(
            other,
            LockState {
                clientid,
                owner,
                file,
                open,
                seqid: 1,
                owner_key,
            },
        );
        *self.per_client.entry(clientid).or_default() += 1;
        Stateid4 { seqid: 1, other }
    }

    /// Bumps a lock stateid's seqid after a change (0 is skipped: it means "current").
    pub fn bump(&mut self, other: &Other) -> Stateid4 {
        let s = self.states.get_mut(other).expect("a live lock stateid");
        s.seqid = s.seqid.wrapping_add(1).max(1);
        Stateid4 {
            seqid: s.seqid,
            other: *other,
        }
    }

    /// TEST_STATEID's answer (§18.48.3).
    pub fn test(&self, clientid: ClientId4, stateid: &Stateid4) -> Nfsstat4 {
        match self.check(clientid, stateid, None) {
            Ok(_) => Nfsstat4::OK,
            Err(Nfsstat4::STALE_STATEID) => Nfsstat4::BAD_STATEID,
            Err(e) => e,
        }
    }

    /// FREE_STATEID (§18.38.4): NFS4ERR_LOCKS_HELD while the stateid holds ranges.
    pub fn free(&mut self, clientid: ClientId4, stateid: &Stateid4) -> Nfsstat4 {
        let s = match self.check(clientid, stateid, None) {
            Ok(s) => s,
            Err(e) => return e,
        };
        if self.ranges.holds(&s.file, &s.lock_owner()) {
            return Nfsstat4::LOCKS_HELD;
        }
        self.remove(&stateid.other);
        Nfsstat4::OK
    }

    /// Removes the lock stateids created from open `open`, and their ranges (CLOSE).
    pub fn remove_open(&mut self, open: &Other) {
        let gone: Vec<Other> = self
            .states
            .iter()
            .filter(|(_, s)| s.open == *open)
            .map(|(o, _)| *o)
            .collect();
        for o in gone {
            self.remove(&o);
        }
    }

    /// Removes every lock stateid and range of a client.
    pub fn remove_client(&mut self, clientid: ClientId4) {
        let released = &mut self.released;
        self.states.retain(|_, s| {
            if s.clientid != clientid {
                return true;
            }
            released.push(LockRelease {
                file: s.file.clone(),
                owner_key: s.owner_key,
            });
            false
        });
        self.owner_keys.retain(|(c, _), _| *c != clientid);
        self.by_owner.retain(|(c, _, _), _| *c != clientid);
        self.per_client.remove(&clientid);
        self.ranges.remove_client(clientid);
    }

    /// Lock stateids held by a client.
    pub fn count_for(&self, clientid: ClientId4) -> usize {
        self.per_client.get(&clientid).copied().unwrap_or(0)
    }

    /// Lock stateids overall.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    pub fn get(&self, other: &Other) -> Option<&LockState> {
        self.states.get(other)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Other, &LockState)> {
        self.states.iter()
    }

    /// Unlocks `range` for a lock stateid's owner (LOCKU's table part); when the owner is
    /// left nothing on the file, its backend locks there are queued for release.
    pub fn unlock(&mut self, other: &Other, range: Range) -> Result<(), LockError> {
        let s = self.states.get(other).expect("a live lock stateid");
        let (file, owner, owner_key) = (s.file.clone(), s.lock_owner(), s.owner_key);
        self.ranges.unlock(&file, &owner, range)?;
        if !self.ranges.holds(&file, &owner) {
            self.released.push(LockRelease { file, owner_key });
        }
        Ok(())
    }

    /// The backend number of lock owner (`clientid`, `owner`) while it has a lock stateid.
    pub fn owner_key(&self, clientid: ClientId4, owner: &Bytes) -> Option<u64> {
        self.owner_keys.get(&(clientid, owner.clone())).map(|k| k.0)
    }

    /// The backend locks to drop since the last call, oldest first (module notes).
    pub fn take_released(&mut self) -> Vec<LockRelease> {
        std::mem::take(&mut self.released)
    }

    /// Takes back a lock stateid just created (a LOCK the backend refused): gone with its
    /// ranges, and nothing queued for release (the backend holds nothing for it).
    pub(crate) fn uncreate(&mut self, other: &Other) {
        let queued = self.released.len();
        self.remove(other);
        self.released.truncate(queued);
    }

    /// Puts a lock stateid's seqid back (a LOCK the backend refused after the bump).
    pub(crate) fn set_seqid(&mut self, other: &Other, seqid: u32) {
        if let Some(s) = self.states.get_mut(other) {
            s.seqid = seqid;
        }
    }

    fn remove(&mut self, other: &Other) {
        let Some(s) = self.states.remove(other) else {
            return;
        };
        self.ranges.remove_owner(&s.file, &s.lock_owner());
        self.released.push(LockRelease {
            file: s.file.clone(),
            owner_key: s.owner_key,
        });
        if let Some(k) = self.owner_keys.get_mut(&(s.clientid, s.owner.clone())) {
            k.1 -= 1;
            if k.1 == 0 {
                self.owner_keys.remove(&(s.clientid, s.owner.clone()));
            }
        }
        self.by_owner.remove(&(s.clientid, s.owner, s.file));
        if let Some(n) = self.per_client.get_mut(&s.clientid) {
            *n -= 1;
            if *n == 0 {
                self.per_client.remove(&s.clientid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SplitMix;
    use crate::locks::ranges::LockKind;

    fn b(s: &'static [u8]) -> Bytes {
        Bytes::from_static(s)
    }

    #[test]
    fn stateids_are_checked_bumped_and_freed_only_when_empty() {
        let mut t = LockStates::new(9, 10, 10);
        let mut e = SplitMix(3);
        let open = [1u8; OTHER_SIZE];
        let sid = t.create(1, b(b"lo"), b(b"f"), open, &mut e, &|_| false);
        assert_eq!(sid.seqid, 1);
        assert_eq!(sid.other[..4], 9u32.to_be_bytes());
        assert!(
            sid.other[4] & 0x80 != 0,
            "lock stateids have the index's top bit"
        );
        assert_eq!(t.find(1, &b(b"lo"), b"f"), Some(sid.other));
        let owner = t.get(&sid.other).unwrap().lock_owner();
        t.ranges
            .lock(
                b"f",
                &owner,
                LockKind::Write,
                Range::from_wire(0, 10).unwrap(),
            )
            .unwrap();
        let s2 = t.bump(&sid.other);
        assert_eq!(s2.seqid, 2);
        assert_eq!(
            t.check(1, &sid, Some(b"f")).err(),
            Some(Nfsstat4::OLD_STATEID)
        );
        assert!(t.check(1, &s2, Some(b"f")).is_ok());
        assert_eq!(
            t.check(1, &s2, Some(b"g")).err(),
            Some(Nfsstat4::BAD_STATEID)
        );
        assert_eq!(t.check(2, &s2, None).err(), Some(Nfsstat4::BAD_STATEID));
        let mut stale = s2;
        stale.other[0] ^= 1;
        assert_eq!(t.test(1, &stale), Nfsstat4::BAD_STATEID);
        assert_eq!(t.free(1, &s2), Nfsstat4::LOCKS_HELD);
        t.unlock(&s2.other, Range::from_wire(0, u64::MAX).unwrap())
            .unwrap();
        assert_eq!(t.test(1, &s2), Nfsstat4::OK, "valid with no locks (§8.2.4)");
        assert_eq!(t.free(1, &s2), Nfsstat4::OK);
        assert_eq!(t.test(1, &s2), Nfsstat4::BAD_STATEID);
        assert!(t.is_empty() && t.count_for(1) == 0);
    }

    #[test]
    fn close_and_expiry_take_the_ranges_along() {
        let mut t = LockStates::new(9, 2, 3);
        let mut e = SplitMix(4);
        let (o1, o2) = ([1u8; OTHER_SIZE], [2u8; OTHER_SIZE]);
        let a = t.create(1, b(b"lo"), b(b"f"), o1, &mut e, &|_| false);
        let c = t.create(1, b(b"lo"), b(b"g"), o2, &mut e, &|_| false);
        assert!(!t.has_room(1), "two per client");
        assert!(t.has_room(2));
        let d = t.create(2, b(b"lo"), b(b"f"), [3; OTHER_SIZE], &mut e, &|_| false);
        assert!(!t.has_room(2), "three overall");
        for s in [a, c, d] {
            let st = t.get(&s.other).unwrap().clone();
            t.ranges
                .lock(
                    &st.file,
                    &st.lock_owner(),
                    LockKind::Read,
                    Range::from_wire(0, 1).unwrap(),
                )
                .unwrap();
        }
        t.remove_open(&o1);
        assert!(!t.knows(&a.other) && t.knows(&c.other));
        assert_eq!(t.ranges.len(), 2);
        t.remove_client(1);
        assert_eq!((t.len(), t.ranges.len()), (1, 1));
        assert_eq!(t.find(1, &b(b"lo"), b"g"), None);
    }
}
