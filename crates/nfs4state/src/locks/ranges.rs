//! Byte-range locks as a pure table (RFC 8881 §9, §18.10-§18.12): which lock owner holds which
//! ranges of which file, READ or WRITE, and whether a new lock conflicts. The locks are
//! advisory, as the Linux client expects of a server (it never relies on mandatory locking),
//! and READ / WRITE do not consult them. This table decides for the server's clients; a
//! backend other clients share (CephFS) takes the same locks too, told by the server's driver
//! (see `stateids`, "Backend locks").
//!
//! # Ranges
//! A lock covers an inclusive range `[first, last]` of 64-bit offsets. On the wire it is
//! `(offset, length)`: a length of all ones means "to the end of the file", which here is the
//! last representable offset, so `(0, u64::MAX)` is the whole 64-bit range. A length of zero,
//! or one whose end would pass 2^64, is NFS4ERR_INVAL (§18.10.4). With `last` inclusive the
//! whole range is representable without a 65-bit end.
//!
//! # Conflicts
//! Two locks conflict when their ranges overlap, they belong to different owners, and at least
//! one is a WRITE lock. An owner never conflicts with itself: a new lock by the same owner
//! replaces the owner's lock type over its range (POSIX semantics, which is what the Linux
//! client's `fcntl` locks need), which is how an upgrade (READ → WRITE) and a downgrade
//! (WRITE → READ) happen. An upgrade that conflicts with another owner's READ lock is refused
//! whole; nothing changes.
//!
//! # Splitting and merging
//! An owner's locks on a file are kept in a canonical form: no two overlap, and no two of the
//! same type touch (they are merged). Locking or unlocking the middle of a range splits it:
//! ```text
//!   owner holds   [0 ─────────── WRITE ─────────── 99]
//!   LOCK READ 40..59 ─▶ [0 ─ W ─ 39][40 ─ R ─ 59][60 ─ W ─ 99]      one range became three
//!   LOCKU 40..59     ─▶ [0 ─ W ─ 39]             [60 ─ W ─ 99]
//!   LOCK WRITE 40..59─▶ [0 ─────────── WRITE ─────────── 99]         merged back into one
//! ```
//! So the number of ranges a request adds is at most two (a split of one range around a new
//! one), and every change is computed on the owner's ranges of one file, then checked against
//! the bounds, then committed: a refused request changes nothing.
//!
//! # Bounds
//! Ranges per client ([`LockTable::new`]'s `per_client_max`) and overall (`total_max`); a
//! change that would pass either fails with [`LockError::Full`], which the state layer answers
//! with NFS4ERR_DELAY after expiring courtesy clients, as it does for full open tables (knfsd
//! answers an allocation failure of lock state with `nfserr_jukebox`, the same code). Note
//! that an unlock can need room: unlocking the middle of a range makes two ranges of one.
//!
//! # Cost
//! A file's locks are one vector, scanned whole by each request on that file: O(locks on the
//! file). Files rarely carry more than a handful of ranges (a database's row locks are the
//! heavy case, thousands), and the total bound caps the worst case; a per-file interval tree
//! would pay off only past that.

use bytes::Bytes;
use sluice_xdr::nfs4::ClientId4;
use sluice_xdr::nfs4::Nfsstat4;
use std::collections::HashMap;

/// A lock owner (`lock_owner4`): the client and its opaque owner bytes. In minor version 1
/// the client id on the wire is ignored and the session's is used (§18.10.3).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    pub clientid: ClientId4,
    pub owner: Bytes,
}

/// A lock's type. The blocking types (READW_LT, WRITEW_LT) map to these: the server never
/// queues a waiter (see [`crate::locks::stateids`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LockKind {
    Read,
    Write,
}

impl LockKind {
    /// `nfs_lock_type4` → kind; anything else is NFS4ERR_INVAL.
    pub fn from_wire(locktype: u32) -> Result<Self, Nfsstat4> {
        use sluice_xdr::nfs4::ops::{READW_LT, READ_LT, WRITEW_LT, WRITE_LT};
        match locktype {
            READ_LT | READW_LT => Ok(Self::Read),
            WRITE_LT | WRITEW_LT => Ok(Self::Write),
            _ => Err(Nfsstat4::INVAL),
        }
    }

    /// The non-blocking `nfs_lock_type4` (what LOCK4denied reports).
    pub fn to_wire(self) -> u32 {
        use sluice_xdr::nfs4::ops::{READ_LT, WRITE_LT};
        match self {
            Self::Read => READ_LT,
            Self::Write => WRITE_LT,
        }
    }

    fn conflicts(self, other: Self) -> bool {
        self == Self::Write || other == Self::Write
    }
}

/// An inclusive range of offsets, `first <= last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub first: u64,
    pub last: u64,
}

impl Range {
    /// The range of a wire `(offset, length)` (module notes): NFS4ERR_INVAL for a zero length
    /// or an end past 2^64; all ones is "to the end".
    pub fn from_wire(offset: u64, length: u64) -> Result<Self, Nfsstat4> {
        if length == u64::MAX {
            return Ok(Self {
                first: offset,
                last: u64::MAX,
            });
        }
        if length == 0 {
            return Err(Nfsstat4::INVAL);
        }
        // offset + length may be 2^64 exactly (the range ends at the last offset).
        let last = offset.checked_add(length - 1).ok_or(Nfsstat4::INVAL)?;
        Ok(Self {
            first: offset,
            last,
        })
    }

    /// `(offset, length)` as LOCK4denied reports it: a range that runs to the last offset is
    /// reported with the all-ones length, as knfsd does.
    pub fn to_wire(self) -> (u64, u64) {
        if self.last == u64::MAX {
            (self.first, u64::MAX)
        } else {
            (self.first, self.last - self.first + 1)
        }
    }

    pub fn overlaps(self, o: Range) -> bool {
        self.first <= o.last && o.first <= self.last
    }

    /// Whether `o` starts right after `self` ends.
    fn adjoins(self, o: Range) -> bool {
        self.last != u64::MAX && self.last + 1 == o.first
    }

    /// What remains of `self` after cutting `cut` out: zero, one or two pieces.
    fn minus(self, cut: Range) -> impl Iterator<Item = Range> {
        let (mut left, mut right) = (None, None);
        if !self.overlaps(cut) {
            left = Some(self);
        } else {
            if self.first < cut.first {
                left = Some(Range {
                    first: self.first,
                    last: cut.first - 1,
                });
            }
            if cut.last < self.last {
                right = Some(Range {
                    first: cut.last + 1,
                    last: self.last,
                });
            }
        }
        left.into_iter().chain(right)
    }
}

/// One held lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    pub owner: Owner,
    pub kind: LockKind,
    pub range: Range,
}

/// Why a change was refused (nothing changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockError {
    /// Another owner's lock conflicts (the first one by offset): NFS4ERR_DENIED with it.
    Denied(Lock),
    /// The change would pass a bound on ranges.
    Full,
}

/// All byte-range locks.
#[derive(Debug)]
pub struct LockTable {
    files: HashMap<Bytes, Vec<Lock>>,
    per_client: HashMap<ClientId4, usize>,
    total: usize,
    per_client_max: usize,
    total_max: usize,
}

impl LockTable {
    pub fn new(per_client_max: usize, total_max: usize) -> Self {
        Self {
            files: HashMap::new(),
            per_client: HashMap::new(),
            total: 0,
            per_client_max,
            total_max,
        }
    }

    /// The locks of other owners on `file` that conflict with `kind` over `range`, by offset.
    pub fn conflicts<'a>(
        &'a self,
        file: &[u8],
        owner: &Owner,
        kind: LockKind,
        range: Range,
    ) -> Vec<&'a Lock> {
        let mut out: Vec<&Lock> = self
            .locks_of(file)
            .iter()
            .filter(|l| l.owner != *owner && l.range.overlaps(range) && l.kind.conflicts(kind))
            .collect();
        out.sort_by_key(|l| (l.range.first, l.range.last));
        out
    }

    /// LOCKT's question: the first conflicting lock, if any.
    pub fn test(&self, file: &[u8], owner: &Owner, kind: LockKind, range: Range) -> Option<&Lock> {
        self.conflicts(file, owner, kind, range).into_iter().next()
    }

    /// Locks `range` of `file` for `owner` with `kind`, replacing the owner's type over the
    /// range (upgrade, downgrade) and merging with its touching ranges of the same type.
    pub fn lock(
        &mut self,
        file: &[u8],
        owner: &Owner,
        kind: LockKind,
        range: Range,
    ) -> Result<(), LockError> {
        if let Some(c) = self.test(file, owner, kind, range) {
            return Err(LockError::Denied(c.clone()));
        }
        self.rewrite(file, owner, range, Some(kind))
    }

    /// Unlocks `range` of `file` for `owner` (parts it does not hold are no error, §18.12.4
    /// leaves that to the server, and POSIX unlocks the same way).
    pub fn unlock(&mut self, file: &[u8], owner: &Owner, range: Range) -> Result<(), LockError> {
        self.rewrite(file, owner, range, None)
    }

    /// Drops every lock `owner` holds on `file` (its lock stateid went away).
    pub fn remove_owner(&mut self, file: &[u8], owner: &Owner) {
        let whole = Range {
            first: 0,
            last: u64::MAX,
        };
        // Unlocking everything never splits, so it never needs room.
        let r = self.rewrite(file, owner, whole, None);
        debug_assert!(r.is_ok());
    }

    /// `owner`'s locks on `file`, by offset (what [`LockTable::restore`] puts back).
    pub fn owner_locks(&self, file: &[u8], owner: &Owner) -> Vec<Lock> {
        let mut v: Vec<Lock> = self
            .locks_of(file)
            .iter()
            .filter(|l| l.owner == *owner)
            .cloned()
            .collect();
        v.sort_by_key(|l| l.range.first);
        v
    }

    /// Puts `owner`'s locks on `file` back as [`LockTable::owner_locks`] saw them (undoing a
    /// LOCK the backend refused). The counts follow; the bounds are not checked, since the
    /// ranges fitted before.
    pub fn restore(&mut self, file: &[u8], owner: &Owner, before: Vec<Lock>) {
        let mine_now = self
            .locks_of(file)
            .iter()
            .filter(|l| l.owner == *owner)
            .count();
        if mine_now == 0 && before.is_empty() {
            return;
        }
        let back = before.len();
        let v = self.files.entry(Bytes::copy_from_slice(file)).or_default();
        v.retain(|l| l.owner != *owner);
        v.extend(before);
        if v.is_empty() {
            self.files.remove(file);
        }
        self.total = self.total + back - mine_now;
        let n = self.per_client.entry(owner.clientid).or_default();
        *n = *n + back - mine_now;
        if *n == 0 {
            self.per_client.remove(&owner.clientid);
        }
    }

    /// Drops every lock of a client.
    pub fn remove_client(&mut self, clientid: ClientId4) {
        let mut dropped = 0;
        self.files.retain(|_, v| {
            let before = v.len();
            v.retain(|l| l.owner.clientid != clientid);
            dropped += before - v.len();
            !v.is_empty()
        });
        self.total -= dropped;
        self.per_client.remove(&clientid);
    }

    /// Whether `owner` holds any lock on `file`.
    pub fn holds(&self, file: &[u8], owner: &Owner) -> bool {
        self.locks_of(file).iter().any(|l| l.owner == *owner)
    }

    /// The locks on `file`, in no particular order.
    pub fn locks_of(&self, file: &[u8]) -> &[Lock] {
        self.files.get(file).map_or(&[], |v| v.as_slice())
    }

    /// Ranges held by a client.
    pub fn count_for(&self, clientid: ClientId4) -> usize {
        self.per_client.get(&clientid).copied().unwrap_or(0)
    }

    /// Ranges held overall.
    pub fn len(&self) -> usize {
        self.total
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Replaces `owner`'s locks on `file` by: them minus `cut`, plus `cut` with `kind` when
    /// given, in canonical form. Checked against the bounds before anything changes.
    fn rewrite(
        &mut self,
        file: &[u8],
        owner: &Owner,
        cut: Range,
        kind: Option<LockKind>,
    ) -> Result<(), LockError> {
        let held = self.locks_of(file);
        let mine_before = held.iter().filter(|l| l.owner == *owner).count();
        let mut mine: Vec<(Range, LockKind)> = held
            .iter()
            .filter(|l| l.owner == *owner)
            .flat_map(|l| l.range.minus(cut).map(move |r| (r, l.kind)))
            .collect();
        if let Some(k) = kind {
            mine.push((cut, k));
        }
        mine.sort_by_key(|(r, _)| r.first);
        let mut merged: Vec<(Range, LockKind)> = Vec::with_capacity(mine.len());
        for (r, k) in mine {
            match merged.last_mut() {
                Some((prev, pk)) if *pk == k && prev.adjoins(r) => prev.last = r.last,
                _ => merged.push((r, k)),
            }
        }
        if merged.len() > mine_before {
            let grow = merged.len() - mine_before;
            if self.count_for(owner.clientid) + grow > self.per_client_max
                || self.total + grow > self.total_max
            {
                return Err(LockError::Full);
            }
        }
        if mine_before == 0 && merged.is_empty() {
            return Ok(());
        }
        let v = self.files.entry(Bytes::copy_from_slice(file)).or_default();
        v.retain(|l| l.owner != *owner);
        v.extend(merged.iter().map(|&(range, kind)| Lock {
            owner: owner.clone(),
            kind,
            range,
        }));
        if v.is_empty() {
            self.files.remove(file);
        }
        self.total = self.total + merged.len() - mine_before;
        let n = self.per_client.entry(owner.clientid).or_default();
        *n = *n + merged.len() - mine_before;
        if *n == 0 {
            self.per_client.remove(&owner.clientid);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn own(c: u64, o: &'static [u8]) -> Owner {
        Owner {
            clientid: c,
            owner: Bytes::from_static(o),
        }
    }

    fn r(offset: u64, length: u64) -> Range {
        Range::from_wire(offset, length).unwrap()
    }

    /// The owner's locks on `f` as (first, last, kind), by offset.
    fn held(t: &LockTable, f: &[u8], o: &Owner) -> Vec<(u64, u64, LockKind)> {
        let mut v: Vec<_> = t
            .locks_of(f)
            .iter()
            .filter(|l| l.owner == *o)
            .map(|l| (l.range.first, l.range.last, l.kind))
            .collect();
        v.sort();
        v
    }

    use LockKind::{Read as R, Write as W};

    #[test]
    fn wire_ranges_whole_range_and_overflow() {
        assert_eq!(
            r(0, u64::MAX),
            Range {
                first: 0,
                last: u64::MAX
            }
        );
        assert_eq!(r(7, u64::MAX).last, u64::MAX, "all ones runs to the end");
        assert_eq!(
            r(10, 5),
            Range {
                first: 10,
                last: 14
            }
        );
        assert_eq!(Range::from_wire(10, 0), Err(Nfsstat4::INVAL));
        assert_eq!(Range::from_wire(u64::MAX, 2), Err(Nfsstat4::INVAL));
        assert_eq!(Range::from_wire(3, u64::MAX - 1), Err(Nfsstat4::INVAL));
        assert_eq!(
            r(2, u64::MAX - 1).last,
            u64::MAX,
            "offset + length == 2^64 is the last offset, not an overflow"
        );
        assert_eq!(
            r(u64::MAX, 1),
            Range {
                first: u64::MAX,
                last: u64::MAX
            }
        );
        assert_eq!(r(5, u64::MAX).to_wire(), (5, u64::MAX));
        assert_eq!(r(5, 10).to_wire(), (5, 10));
        assert_eq!(LockKind::from_wire(3), Ok(R), "READW is answered as READ");
        assert_eq!(LockKind::from_wire(4), Ok(W));
        assert_eq!(LockKind::from_wire(0), Err(Nfsstat4::INVAL));
        assert_eq!(LockKind::from_wire(5), Err(Nfsstat4::INVAL));
    }

    #[test]
    fn reads_share_writes_conflict_and_owners_never_conflict_with_themselves() {
        let mut t = LockTable::new(100, 100);
        let (a, b) = (own(1, b"a"), own(2, b"b"));
        t.lock(b"f", &a, R, r(0, 10)).unwrap();
        t.lock(b"f", &b, R, r(5, 10)).unwrap();
        let denied = t.lock(b"f", &b, W, r(8, 1)).unwrap_err();
        assert_eq!(
            denied,
            LockError::Denied(Lock {
                owner: a.clone(),
                kind: R,
                range: r(0, 10)
            })
        );
        assert!(t.lock(b"f", &b, W, r(10, 10)).is_ok(), "past a's range");
        assert!(t.lock(b"g", &b, W, r(0, 10)).is_ok(), "another file");
        let other_owner_same_client = own(1, b"x");
        assert!(t.test(b"f", &other_owner_same_client, R, r(0, 5)).is_none());
        assert!(
            t.test(b"f", &other_owner_same_client, W, r(0, 5)).is_some(),
            "owners of one client conflict"
        );
        assert!(t.lock(b"f", &a, W, r(0, 5)).is_ok(), "a upgrades its own");
        assert_eq!(held(&t, b"f", &a), vec![(0, 4, W), (5, 9, R)]);
    }

    #[test]
    fn split_by_downgrade_and_unlock_then_merge_back() {
        let mut t = LockTable::new(100, 100);
        let a = own(1, b"a");
        t.lock(b"f", &a, W, r(0, 100)).unwrap();
        t.lock(b"f", &a, R, r(40, 20)).unwrap();
        assert_eq!(
            held(&t, b"f", &a),
            vec![(0, 39, W), (40, 59, R), (60, 99, W)]
        );
        t.unlock(b"f", &a, r(40, 20)).unwrap();
        assert_eq!(held(&t, b"f", &a), vec![(0, 39, W), (60, 99, W)]);
        t.lock(b"f", &a, W, r(40, 20)).unwrap();
        assert_eq!(held(&t, b"f", &a), vec![(0, 99, W)]);
        assert_eq!(t.len(), 1);
        t.unlock(b"f", &a, r(0, u64::MAX)).unwrap();
        assert!(t.is_empty());
        assert_eq!(t.count_for(1), 0);
        assert!(t.locks_of(b"f").is_empty());
    }

    #[test]
    fn an_upgrade_that_conflicts_changes_nothing() {
        let mut t = LockTable::new(100, 100);
        let (a, b) = (own(1, b"a"), own(2, b"b"));
        t.lock(b"f", &a, R, r(0, 100)).unwrap();
        t.lock(b"f", &b, R, r(50, 1)).unwrap();
        assert!(matches!(
            t.lock(b"f", &a, W, r(0, u64::MAX)),
            Err(LockError::Denied(l)) if l.owner == b
        ));
        assert_eq!(held(&t, b"f", &a), vec![(0, 99, R)]);
    }

    #[test]
    fn whole_range_at_the_top_of_the_offsets() {
        let mut t = LockTable::new(100, 100);
        let (a, b) = (own(1, b"a"), own(2, b"b"));
        t.lock(b"f", &a, W, r(0, u64::MAX)).unwrap();
        let l = t.test(b"f", &b, R, r(u64::MAX, 1)).unwrap();
        assert_eq!(l.range.to_wire(), (0, u64::MAX));
        t.unlock(b"f", &a, r(u64::MAX - 1, 1)).unwrap();
        assert_eq!(
            held(&t, b"f", &a),
            vec![(0, u64::MAX - 2, W), (u64::MAX, u64::MAX, W)]
        );
        assert!(t.lock(b"f", &b, W, r(u64::MAX - 1, 1)).is_ok());
        assert!(t.test(b"f", &b, W, r(u64::MAX, u64::MAX)).is_some());
    }

    #[test]
    fn ranges_are_bounded_per_client_and_overall_even_when_unlocking() {
        let mut t = LockTable::new(3, 4);
        let (a, b) = (own(1, b"a"), own(2, b"b"));
        t.lock(b"f", &a, W, r(0, 100)).unwrap();
        t.unlock(b"f", &a, r(10, 1)).unwrap();
        t.unlock(b"f", &a, r(20, 1)).unwrap();
        assert_eq!(t.count_for(1), 3);
        assert_eq!(t.unlock(b"f", &a, r(30, 1)), Err(LockError::Full));
        assert_eq!(t.lock(b"g", &a, W, r(0, 1)), Err(LockError::Full));
        assert_eq!(held(&t, b"f", &a).len(), 3, "nothing changed");
        assert!(
            t.lock(b"f", &a, W, r(10, 1)).is_ok(),
            "a merge frees room at the bound"
        );
        assert_eq!(t.count_for(1), 2);
        t.lock(b"g", &b, R, r(0, 1)).unwrap();
        t.lock(b"g", &b, R, r(5, 1)).unwrap();
        assert_eq!(t.len(), 4);
        assert_eq!(t.lock(b"h", &b, R, r(0, 1)), Err(LockError::Full));
        t.remove_client(1);
        assert_eq!((t.len(), t.count_for(1)), (2, 0));
        assert!(t.lock(b"h", &b, R, r(0, 1)).is_ok());
        t.remove_owner(b"g", &b);
        assert_eq!(t.len(), 1);
        assert!(!t.holds(b"g", &b) && t.holds(b"h", &b));
    }

    // ----- property tests against a byte map --------------------------------------------

    /// Offsets the model tracks one by one; every generated finite range ends below it, so
    /// all offsets from `TOP` up are alike and the model keeps one for them all.
    const TOP: u64 = 48;

    #[derive(Debug, Clone)]
    enum Op {
        Lock(u8, LockKind, u64, u64),
        Unlock(u8, u64, u64),
        Test(u8, LockKind, u64, u64),
    }

    fn wire_range() -> impl Strategy<Value = (u64, u64)> {
        (0..TOP).prop_flat_map(|off| {
            prop_oneof![(Just(off), 1..=(TOP - off)), (Just(off), Just(u64::MAX)),]
        })
    }

    fn kind() -> impl Strategy<Value = LockKind> {
        prop_oneof![Just(R), Just(W)]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..4u8, kind(), wire_range()).prop_map(|(o, k, (off, len))| Op::Lock(o, k, off, len)),
            (0..4u8, wire_range()).prop_map(|(o, (off, len))| Op::Unlock(o, off, len)),
            (0..4u8, kind(), wire_range()).prop_map(|(o, k, (off, len))| Op::Test(o, k, off, len)),
        ]
    }

    /// Owners 0 and 1 are one client, 2 and 3 another.
    fn owner_of(i: u8) -> Owner {
        const NAMES: [&[u8]; 4] = [b"o0", b"o1", b"o2", b"o3"];
        own(u64::from(i / 2), NAMES[i as usize])
    }

    /// The model: (owner, offset) → kind, offsets `0..=TOP` (`TOP` stands for all above).
    type Model = BTreeMap<(u8, u64), LockKind>;

    fn model_offsets(off: u64, len: u64) -> std::ops::RangeInclusive<u64> {
        if len == u64::MAX {
            off..=TOP
        } else {
            off..=off + len - 1
        }
    }

    fn model_conflict(m: &Model, o: u8, k: LockKind, off: u64, len: u64) -> bool {
        model_offsets(off, len)
            .any(|b| (0..4u8).any(|p| p != o && m.get(&(p, b)).is_some_and(|h| h.conflicts(k))))
    }

    fn check_against(t: &LockTable, m: &Model) {
        for p in 0..4u8 {
            let owner = owner_of(p);
            let locks = held(t, b"f", &owner);
            for w in locks.windows(2) {
                assert!(
                    w[0].1 < w[1].0,
                    "an owner's ranges never overlap: {locks:?}"
                );
                assert!(
                    !(w[0].2 == w[1].2 && w[0].1 + 1 == w[1].0),
                    "touching ranges of one type are merged: {locks:?}"
                );
            }
            for b in 0..=TOP {
                let got = locks
                    .iter()
                    .find(|(f, l, _)| *f <= b && b <= *l)
                    .map(|x| x.2);
                assert_eq!(got, m.get(&(p, b)).copied(), "owner {p} offset {b}");
            }
            for (_, l, _) in &locks {
                assert!(
                    *l < TOP || *l == u64::MAX,
                    "ranges reaching TOP run to the end"
                );
            }
        }
        let per: usize = (0..2).map(|c| t.count_for(c)).sum();
        assert_eq!(per, t.len());
        assert_eq!(t.locks_of(b"f").len(), t.len());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn the_table_agrees_with_a_byte_map(ops in proptest::collection::vec(op(), 1..40)) {
            let mut t = LockTable::new(1000, 1000);
            let mut m = Model::new();
            for op in ops {
                match op {
                    Op::Lock(o, k, off, len) => {
                        let conflict = model_conflict(&m, o, k, off, len);
                        let got = t.lock(b"f", &owner_of(o), k, r(off, len));
                        match got {
                            Err(LockError::Denied(l)) => {
                                prop_assert!(conflict);
                                prop_assert!(l.owner != owner_of(o));
                                prop_assert!(l.range.overlaps(r(off, len)));
                                prop_assert!(l.kind.conflicts(k));
                            }
                            Err(LockError::Full) => prop_assert!(false, "no bound in reach"),
                            Ok(()) => {
                                prop_assert!(!conflict);
                                for b in model_offsets(off, len) {
                                    m.insert((o, b), k);
                                }
                            }
                        }
                    }
                    Op::Unlock(o, off, len) => {
                        t.unlock(b"f", &owner_of(o), r(off, len)).unwrap();
                        for b in model_offsets(off, len) {
                            m.remove(&(o, b));
                        }
                    }
                    Op::Test(o, k, off, len) => {
                        let got = t.test(b"f", &owner_of(o), k, r(off, len)).is_some();
                        prop_assert_eq!(got, model_conflict(&m, o, k, off, len));
                    }
                }
                check_against(&t, &m);
            }
        }

        #[test]
        fn a_refused_change_leaves_the_table_as_it_was(
            ops in proptest::collection::vec(op(), 1..40)
        ) {
            // Tight bounds: Full happens often; it must change nothing.
            let mut t = LockTable::new(3, 5);
            for op in ops {
                let before: Vec<Vec<_>> =
                    (0..4u8).map(|p| held(&t, b"f", &owner_of(p))).collect();
                let res = match op {
                    Op::Lock(o, k, off, len) => t.lock(b"f", &owner_of(o), k, r(off, len)),
                    Op::Unlock(o, off, len) => t.unlock(b"f", &owner_of(o), r(off, len)),
                    Op::Test(..) => Ok(()),
                };
                let after: Vec<Vec<_>> =
                    (0..4u8).map(|p| held(&t, b"f", &owner_of(p))).collect();
                if res.is_err() {
                    prop_assert_eq!(before, after);
                }
                prop_assert!(t.count_for(0) <= 3 && t.count_for(1) <= 3 && t.len() <= 5);
            }
        }
    }
}
