//! Open state: open stateids, share reservations, OPEN upgrade, OPEN_DOWNGRADE, CLOSE, and the
//! stateid checks every op does (RFC 8881 §8.2, §9.7, §18.16, §18.18, §18.2, §18.38, §18.48).
//!
//! Keyed by a neutral file id (the handle's `FileSystem::state_key`, the same for every handle
//! of one file: hard links in two directories have two handles), not by a file system: the
//! core only needs "same file or not".
//!
//! # Stateids (§8.2)
//! One open stateid per (client, open owner, file). Its `other` is
//! `boot_epoch (4) | index (4) | random (4)`: the epoch tells a stateid of an earlier server
//! instance (NFS4ERR_STALE_STATEID), the index is unique while the state lives, the random part
//! makes a stateid hard to guess. Its `seqid` starts at 1 and is bumped by every OPEN upgrade
//! and OPEN_DOWNGRADE (wrapping past u32::MAX to 1, as 0 has a meaning of its own). Checking a
//! stateid against the current one:
//! ```text
//!   special (all-zero/all-one other)  → the caller's business (anonymous I/O, current stateid)
//!   other from another instance       → STALE_STATEID
//!   unknown, other client's, other file → BAD_STATEID
//!   seqid 0                           → the current one (§8.2.2, minor version 1)
//!   seqid < current                   → OLD_STATEID
//!   seqid > current                   → BAD_STATEID
//! ```
//!
//! Not returned (yet): NFS4ERR_EXPIRED and NFS4ERR_ADMIN_REVOKED. State is never revoked
//! piecemeal here: a client expires as a whole (see [`crate::state`]), after which its session is
//! gone and it learns of the loss from SEQUENCE (NFS4ERR_BADSESSION) and CREATE_SESSION
//! (NFS4ERR_STALE_CLIENTID) before it can present a stateid; its old stateids are then just
//! unknown (BAD_STATEID). Revocation of single states comes with delegations and locks.
//!
//! # Share reservations (§9.7)
//! A new OPEN conflicts with an existing open of another owner when its access meets that
//! open's deny or its deny meets that open's access. The same owner opening the same file
//! again upgrades its stateid (access and deny are OR-ed). OPEN_DOWNGRADE may only go to a
//! subset that some OPEN of the owner used (knfsd keeps the same record as bitmaps of access
//! and deny modes seen); anything else is NFS4ERR_INVAL.

use crate::ids::Entropy;
use bytes::Bytes;
use sluice_xdr::nfs4::ops::{OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_WRITE};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{ClientId4, Stateid4, OTHER_SIZE};
use std::collections::HashMap;

/// A stateid's `other`.
pub type Other = [u8; OTHER_SIZE];

/// One open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenState {
    pub clientid: ClientId4,
    pub owner: Bytes,
    pub file: Bytes,
    pub seqid: u32,
    /// OPEN4_SHARE_ACCESS_* (1..=3).
    pub access: u32,
    /// OPEN4_SHARE_DENY_* (0..=3).
    pub deny: u32,
    /// Bit `n` set when an OPEN used access mode `n` (1..=3).
    access_seen: u8,
    /// Bit `n` set when an OPEN used deny mode `n` (0..=3).
    deny_seen: u8,
}

/// An OPEN's share arguments after checking: the `want` and signal bits are the delegation
/// layer's (masked off here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    pub access: u32,
    pub deny: u32,
}

impl Share {
    /// Checks `share_access` (delegation `want` bits ignored) and `share_deny`: NFS4ERR_INVAL
    /// for an access of 0 or an unknown bit (§18.16.3).
    pub fn parse(share_access: u32, share_deny: u32) -> Result<Self, Nfsstat4> {
        let access = share_access & 0xff;
        if !(1..=OPEN4_SHARE_ACCESS_BOTH).contains(&access) || share_deny > 3 {
            return Err(Nfsstat4::INVAL);
        }
        Ok(Self {
            access,
            deny: share_deny,
        })
    }

    fn conflicts(self, access: u32, deny: u32) -> bool {
        self.access & deny != 0 || self.deny & access != 0
    }
}

/// All open state.
#[derive(Debug)]
pub struct OpenTable {
    states: HashMap<Other, OpenState>,
    /// (client, owner, file) → its stateid's other.
    by_owner: HashMap<(ClientId4, Bytes, Bytes), Other>,
    /// file → the opens of it (short lists: a file has few openers).
    by_file: HashMap<Bytes, Vec<Other>>,
    per_client: HashMap<ClientId4, usize>,
    boot_epoch: u32,
    next_index: u32,
    per_client_max: usize,
    total_max: usize,
}

/// What a stateid allows for READ/WRITE/SETATTR(size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoState {
    /// The anonymous stateid: subject to share reservations.
    Anonymous,
    /// The READ bypass stateid on a READ: ignores share reservations (§8.2.3).
    Bypass,
    /// An open stateid of the caller.
    Open(Other),
    /// A delegation stateid of the caller (READ under a read delegation).
    Deleg(Other),
}

impl OpenTable {
    pub fn new(boot_epoch: u32, per_client_max: usize, total_max: usize) -> Self {
        Self {
            states: HashMap::new(),
            by_owner: HashMap::new(),
            by_file: HashMap::new(),
            per_client: HashMap::new(),
            boot_epoch,
            next_index: 1,
            per_client_max,
            total_max,
        }
    }

    /// The clients whose opens of `file` conflict with `share` for this (client, owner). The
    /// caller refuses the OPEN (NFS4ERR_SHARE_DENIED) or expires courtesy clients among them.
    pub fn conflicts(
        &self,
        clientid: ClientId4,
        owner: &[u8],
        file: &[u8],
        share: Share,
    ) -> Vec<ClientId4> {
        let mut out: Vec<ClientId4> = self
            .opens_of(file)
            .filter(|s| !(s.clientid == clientid && s.owner == owner))
            .filter(|s| share.conflicts(s.access, s.deny))
            .map(|s| s.clientid)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// OPEN's state part after conflicts were resolved: a new stateid, or the owner's existing
    /// one upgraded (§18.16.4). NFS4ERR_SHARE_DENIED if a conflict remains; NFS4ERR_DELAY at
    /// the per-client or total bound.
    pub fn open(
        &mut self,
        clientid: ClientId4,
        owner: &[u8],
        file: &[u8],
        share: Share,
        entropy: &mut dyn Entropy,
    ) -> Result<Stateid4, Nfsstat4> {
        if !self.conflicts(clientid, owner, file, share).is_empty() {
            return Err(Nfsstat4::SHARE_DENIED);
        }
        let key = (
            clientid,
            Bytes::copy_from_slice(owner),
            Bytes::copy_from_slice(file),
        );
        if let Some(other) = self.by_owner.get(&key) {
            let other = *other;
            let s = self
                .states
                .get_mut(&other)
                .expect("by_owner and states agree");
            s.access |= share.access;
            s.deny |= share.deny;
            s.access_seen |= 1 << share.access;
            s.deny_seen |= 1 << share.deny;
            s.seqid = bump(s.seqid);
            return Ok(Stateid4 {
                seqid: s.seqid,
                other,
            });
        }
        let n = self.per_client.get(&clientid).copied().unwrap_or(0);
        if n >= self.per_client_max || self.states.len() >= self.total_max {
            return Err(Nfsstat4::DELAY);
        }
        let other = self.allocate_other(entropy);
        let (_, owner, file) = key.clone();
        self.states.insert(
            other,
            OpenState {
                clientid,
                owner,
                file: file.clone(),
                seqid: 1,
                access: share.access,
                deny: share.deny,
                access_seen: 1 << share.access,
                deny_seen: 1 << share.deny,
            },
        );
        self.by_owner.insert(key, other);
        self.by_file.entry(file).or_default().push(other);
        *self.per_client.entry(clientid).or_default() += 1;
        Ok(Stateid4 { seqid: 1, other })
    }

    /// Checks a non-special stateid of `clientid` (and of `file`, when given) against the
    /// current one (the table in the module notes).
    pub fn check(
        &self,
        clientid: ClientId4,
        stateid: &Stateid4,
        file: Option<&[u8]>,
    ) -> Result<&OpenState, Nfsstat4> {
        check_stateid(
            self.boot_epoch,
            &self.states,
            clientid,
            stateid,
            file,
            |s| (s.clientid, &s.file[..], s.seqid),
        )
    }

    /// The stateid an I/O op may proceed under (§8.2.3, §9.1.2): open stateids need the access
    /// (WRITE needs write access: NFS4ERR_OPENMODE; READ is allowed under any open, as knfsd);
    /// the anonymous stateid (and READ bypass on a WRITE) is subject to other opens' deny
    /// modes (NFS4ERR_LOCKED, knfsd's answer); READ bypass on a READ ignores them.
    pub fn check_io(
        &self,
        clientid: ClientId4,
        stateid: &Stateid4,
        file: &[u8],
        write: bool,
    ) -> Result<IoState, Nfsstat4> {
        let special = if *stateid == Stateid4::ANONYMOUS {
            Some(IoState::Anonymous)
        } else if *stateid == Stateid4::READ_BYPASS {
            Some(if write {
                IoState::Anonymous
            } else {
                IoState::Bypass
            })
        } else {
            None
        };
        match special {
            Some(IoState::Anonymous) => {
                let want = if write {
                    OPEN4_SHARE_ACCESS_WRITE
                } else {
                    OPEN4_SHARE_ACCESS_BOTH & !OPEN4_SHARE_ACCESS_WRITE
                };
                if self.opens_of(file).any(|s| s.deny & want != 0) {
                    return Err(Nfsstat4::LOCKED);
                }
                Ok(IoState::Anonymous)
            }
            Some(other) => Ok(other),
            None => {
                let s = self.check(clientid, stateid, Some(file))?;
                if write && s.access & OPEN4_SHARE_ACCESS_WRITE == 0 {
                    return Err(Nfsstat4::OPENMODE);
                }
                Ok(IoState::Open(stateid.other))
            }
        }
    }

    /// OPEN_DOWNGRADE (§18.18.4): the new modes must be a subset of the current ones that an
    /// OPEN of this owner used (NFS4ERR_INVAL otherwise). Returns the bumped stateid.
    pub fn downgrade(
        &mut self,
        clientid: ClientId4,
        stateid: &Stateid4,
        file: &[u8],
        share: Share,
    ) -> Result<Stateid4, Nfsstat4> {
        self.check(clientid, stateid, Some(file))?;
        let s = self.states.get_mut(&stateid.other).expect("checked");
        let subset = share.access & !s.access == 0 && share.deny & !s.deny == 0;
        let used = (share.access == s.access || s.access_seen & (1 << share.access) != 0)
            && (share.deny == s.deny || s.deny_seen & (1 << share.deny) != 0);
        if !subset || !used {
            return Err(Nfsstat4::INVAL);
        }
        s.access = share.access;
        s.deny = share.deny;
        s.access_seen = keep_subsets(s.access_seen, share.access) | 1 << share.access;
        s.deny_seen = keep_subsets(s.deny_seen, share.deny) | 1 << share.deny;
        s.seqid = bump(s.seqid);
        Ok(Stateid4 {
            seqid: s.seqid,
            other: stateid.other,
        })
    }

    /// CLOSE (§18.2.4): ends the open; the reply carries the invalid special stateid, as the
    /// RFC recommends for minor version 1.
    pub fn close(
        &mut self,
        clientid: ClientId4,
        stateid: &Stateid4,
        file: &[u8],
    ) -> Result<Stateid4, Nfsstat4> {
        self.check(clientid, stateid, Some(file))?;
        self.remove(&stateid.other);
        Ok(Stateid4::INVALID)
    }

    /// TEST_STATEID's answer for one stateid (§18.48.3): OK, BAD_STATEID or OLD_STATEID (a
    /// stale one is just bad here: the op has no STALE answer).
    pub fn test(&self, clientid: ClientId4, stateid: &Stateid4) -> Nfsstat4 {
        match self.check(clientid, stateid, None) {
            Ok(_) => Nfsstat4::OK,
            Err(Nfsstat4::STALE_STATEID) => Nfsstat4::BAD_STATEID,
            Err(e) => e,
        }
    }

    /// FREE_STATEID (§18.38.4) on an open stateid: it still holds an open, so
    /// NFS4ERR_LOCKS_HELD (CLOSE ends it), as knfsd answers; a bad one gets its error.
    pub fn free(&self, clientid: ClientId4, stateid: &Stateid4) -> Nfsstat4 {
        match self.check(clientid, stateid, None) {
            Ok(_) => Nfsstat4::LOCKS_HELD,
            Err(e) => e,
        }
    }

    /// Removes every open of a client (expiry, DESTROY_CLIENTID of a client without opens is a
    /// no-op, a replaced record).
    pub fn remove_client(&mut self, clientid: ClientId4) {
        let others: Vec<Other> = self
            .states
            .iter()
            .filter(|(_, s)| s.clientid == clientid)
            .map(|(o, _)| *o)
            .collect();
        for o in others {
            self.remove(&o);
        }
    }

    /// Opens held by a client.
    pub fn count_for(&self, clientid: ClientId4) -> usize {
        self.per_client.get(&clientid).copied().unwrap_or(0)
    }

    pub fn len(&self) -> usize {
        self.states.len()
    }

    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    pub fn get(&self, other: &Other) -> Option<&OpenState> {
        self.states.get(other)
    }

    pub fn iter(&self) -> impl Iterator<Item = &OpenState> {
        self.states.values()
    }

    /// Whether anyone has `file` open.
    pub fn is_open(&self, file: &[u8]) -> bool {
        self.opens_of(file).next().is_some()
    }

    /// The opens of `file`.
    pub fn iter_file<'a>(&'a self, file: &[u8]) -> impl Iterator<Item = &'a OpenState> + 'a {
        self.opens_of(file)
    }

    fn opens_of<'a>(&'a self, file: &[u8]) -> impl Iterator<Item = &'a OpenState> + 'a {
        self.by_file
            .get(file)
            .into_iter()
            .flatten()
            .filter_map(|o| self.states.get(o))
    }

    fn remove(&mut self, other: &Other) {
        let Some(s) = self.states.remove(other) else {
            return;
        };
        self.by_owner.remove(&(s.clientid, s.owner, s.file.clone()));
        if let Some(v) = self.by_file.get_mut(&s.file) {
            v.retain(|o| o != other);
            if v.is_empty() {
                self.by_file.remove(&s.file);
            }
        }
        if let Some(n) = self.per_client.get_mut(&s.clientid) {
            *n -= 1;
            if *n == 0 {
                self.per_client.remove(&s.clientid);
            }
        }
    }

    fn allocate_other(&mut self, entropy: &mut dyn Entropy) -> Other {
        loop {
            let mut o = [0u8; OTHER_SIZE];
            o[..4].copy_from_slice(&self.boot_epoch.to_be_bytes());
            o[4..8].copy_from_slice(&self.next_index.to_be_bytes());
            entropy.fill(&mut o[8..]);
            self.next_index = self.next_index.wrapping_add(1);
            if !self.states.contains_key(&o) && !Stateid4::INVALID.other.eq(&o) {
                return o;
            }
        }
    }
}

/// The next seqid of a stateid: 0 is never issued (it means "current", §8.2.2).
fn bump(seqid: u32) -> u32 {
    seqid.wrapping_add(1).max(1)
}

/// The modes (as a bitmap indexed by mode) that are subsets of `mode`.
fn keep_subsets(seen: u8, mode: u32) -> u8 {
    (0..4u32)
        .filter(|m| m & !mode == 0 && seen & (1 << m) != 0)
        .fold(0, |acc, m| acc | 1 << m)
}

/// The stateid checks open and lock stateids share (the table in the module notes): special
/// stateids and other boot epochs are refused, the stateid must name a live state of
/// `clientid` (and of `file`, when given), and its seqid must be 0 (the current one), the
/// current one, or else it is OLD (lower) or BAD (higher). `key` gives a state's client, file
/// and current seqid.
pub(crate) fn check_stateid<'a, S>(
    boot_epoch: u32,
    states: &'a HashMap<Other, S>,
    clientid: ClientId4,
    stateid: &Stateid4,
    file: Option<&[u8]>,
    key: impl Fn(&S) -> (ClientId4, &[u8], u32),
) -> Result<&'a S, Nfsstat4> {
    if stateid.is_special() {
        return Err(Nfsstat4::BAD_STATEID);
    }
    if stateid.other[..4] != boot_epoch.to_be_bytes() {
        return Err(Nfsstat4::STALE_STATEID);
    }
    let s = states.get(&stateid.other).ok_or(Nfsstat4::BAD_STATEID)?;
    let (owner, its_file, seqid) = key(s);
    if owner != clientid || file.is_some_and(|f| f != its_file) {
        return Err(Nfsstat4::BAD_STATEID);
    }
    match stateid.seqid {
        0 => Ok(s),
        q if q == seqid => Ok(s),
        q if q < seqid => Err(Nfsstat4::OLD_STATEID),
        _ => Err(Nfsstat4::BAD_STATEID),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SplitMix;

    const R: u32 = 1;
    const W: u32 = 2;
    const B: u32 = 3;

    fn sh(access: u32, deny: u32) -> Share {
        Share::parse(access, deny).unwrap()
    }

    fn table() -> (OpenTable, SplitMix) {
        (OpenTable::new(9, 100, 1000), SplitMix(1))
    }

    #[test]
    fn share_arguments_are_checked() {
        assert_eq!(Share::parse(0, 0), Err(Nfsstat4::INVAL));
        assert_eq!(Share::parse(4, 0), Err(Nfsstat4::INVAL));
        assert_eq!(Share::parse(R, 4), Err(Nfsstat4::INVAL));
        assert_eq!(
            Share::parse(R | 0x0400, 0),
            Ok(sh(R, 0)),
            "want bits are ignored"
        );
    }

    #[test]
    fn deny_conflicts_across_owners_but_the_same_owner_upgrades() {
        let (mut t, mut e) = table();
        let a = t.open(1, b"o", b"f", sh(R, W), &mut e).unwrap();
        assert_eq!(a.seqid, 1);
        assert_eq!(a.other[..4], 9u32.to_be_bytes());
        assert_eq!(
            t.open(2, b"o", b"f", sh(W, 0), &mut e),
            Err(Nfsstat4::SHARE_DENIED)
        );
        assert_eq!(
            t.open(1, b"p", b"f", sh(B, 0), &mut e),
            Err(Nfsstat4::SHARE_DENIED)
        );
        assert_eq!(
            t.open(2, b"o", b"f", sh(R, R), &mut e),
            Err(Nfsstat4::SHARE_DENIED)
        );
        assert_eq!(t.conflicts(2, b"o", b"f", sh(W, 0)), vec![1]);
        assert!(t.open(2, b"o", b"f", sh(R, 0), &mut e).is_ok());
        assert!(
            t.open(2, b"o", b"g", sh(W, B), &mut e).is_ok(),
            "another file"
        );
        let up = t.open(1, b"o", b"f", sh(R, R), &mut e);
        assert_eq!(up, Err(Nfsstat4::SHARE_DENIED), "client 2 reads f");
        let up = t.open(1, b"o", b"f", sh(W, 0), &mut e).unwrap();
        assert_eq!((up.other, up.seqid), (a.other, 2));
        let s = t.get(&a.other).unwrap();
        assert_eq!((s.access, s.deny), (B, W));
        assert_eq!(t.count_for(1), 1);
    }

    #[test]
    fn stateid_checks() {
        let (mut t, mut e) = table();
        let a = t.open(1, b"o", b"f", sh(R, 0), &mut e).unwrap();
        t.open(1, b"o", b"f", sh(W, 0), &mut e).unwrap();
        let cur = Stateid4 { seqid: 2, ..a };
        assert!(t.check(1, &cur, Some(b"f")).is_ok());
        assert!(t.check(1, &Stateid4 { seqid: 0, ..a }, None).is_ok());
        assert_eq!(t.check(1, &a, None).err(), Some(Nfsstat4::OLD_STATEID));
        let future = Stateid4 { seqid: 3, ..a };
        assert_eq!(t.check(1, &future, None).err(), Some(Nfsstat4::BAD_STATEID));
        assert_eq!(t.check(2, &cur, None).err(), Some(Nfsstat4::BAD_STATEID));
        assert_eq!(
            t.check(1, &cur, Some(b"g")).err(),
            Some(Nfsstat4::BAD_STATEID)
        );
        let mut stale = cur;
        stale.other[0] ^= 1;
        assert_eq!(
            t.check(1, &stale, None).err(),
            Some(Nfsstat4::STALE_STATEID)
        );
        let mut unknown = cur;
        unknown.other[11] ^= 1;
        assert_eq!(
            t.check(1, &unknown, None).err(),
            Some(Nfsstat4::BAD_STATEID)
        );
        assert_eq!(
            t.check(1, &Stateid4::ANONYMOUS, None).err(),
            Some(Nfsstat4::BAD_STATEID)
        );
        assert_eq!(t.test(1, &stale), Nfsstat4::BAD_STATEID);
        assert_eq!(t.test(1, &a), Nfsstat4::OLD_STATEID);
        assert_eq!(t.test(1, &cur), Nfsstat4::OK);
        assert_eq!(t.free(1, &cur), Nfsstat4::LOCKS_HELD);
        assert_eq!(t.free(1, &unknown), Nfsstat4::BAD_STATEID);
    }

    #[test]
    fn io_under_special_and_open_stateids() {
        let (mut t, mut e) = table();
        let r = t.open(1, b"o", b"f", sh(R, W), &mut e).unwrap();
        assert_eq!(t.check_io(1, &r, b"f", true), Err(Nfsstat4::OPENMODE));
        assert_eq!(t.check_io(1, &r, b"f", false), Ok(IoState::Open(r.other)));
        let anon = Stateid4::ANONYMOUS;
        let bypass = Stateid4::READ_BYPASS;
        assert_eq!(t.check_io(2, &anon, b"f", true), Err(Nfsstat4::LOCKED));
        assert_eq!(t.check_io(2, &bypass, b"f", true), Err(Nfsstat4::LOCKED));
        assert_eq!(t.check_io(2, &anon, b"f", false), Ok(IoState::Anonymous));
        assert_eq!(t.check_io(2, &bypass, b"f", false), Ok(IoState::Bypass));
        t.open(3, b"o", b"g", sh(R, R), &mut e).unwrap();
        assert_eq!(t.check_io(2, &anon, b"g", false), Err(Nfsstat4::LOCKED));
        assert_eq!(t.check_io(2, &bypass, b"g", false), Ok(IoState::Bypass));
        assert_eq!(
            t.check_io(2, &Stateid4::CURRENT, b"g", false),
            Err(Nfsstat4::BAD_STATEID),
            "the processor resolves the current stateid first"
        );
    }

    #[test]
    fn downgrade_to_modes_an_open_used() {
        let (mut t, mut e) = table();
        t.open(1, b"o", b"f", sh(R, 0), &mut e).unwrap();
        let a = t.open(1, b"o", b"f", sh(W, W), &mut e).unwrap();
        assert_eq!(
            t.downgrade(1, &a, b"f", sh(B, B)),
            Err(Nfsstat4::INVAL),
            "not a subset"
        );
        let d = t.downgrade(1, &a, b"f", sh(R, 0)).unwrap();
        assert_eq!(d.seqid, 3);
        assert_eq!(
            t.downgrade(1, &d, b"f", sh(W, 0)),
            Err(Nfsstat4::INVAL),
            "write was dropped"
        );
        assert_eq!(
            t.downgrade(1, &a, b"f", sh(R, 0)),
            Err(Nfsstat4::OLD_STATEID)
        );
        // Opened BOTH at once: READ alone was never used.
        let b = t.open(2, b"o", b"g", sh(B, 0), &mut e).unwrap();
        assert_eq!(t.downgrade(2, &b, b"g", sh(R, 0)), Err(Nfsstat4::INVAL));
        assert!(
            t.downgrade(2, &b, b"g", sh(B, 0)).is_ok(),
            "no change is allowed"
        );
    }

    #[test]
    fn close_frees_the_reservation() {
        let (mut t, mut e) = table();
        let a = t.open(1, b"o", b"f", sh(B, B), &mut e).unwrap();
        assert_eq!(
            t.open(2, b"o", b"f", sh(R, 0), &mut e),
            Err(Nfsstat4::SHARE_DENIED)
        );
        assert_eq!(t.close(1, &a, b"g"), Err(Nfsstat4::BAD_STATEID));
        assert_eq!(t.close(1, &a, b"f"), Ok(Stateid4::INVALID));
        assert_eq!(t.close(1, &a, b"f"), Err(Nfsstat4::BAD_STATEID));
        assert!(t.open(2, b"o", b"f", sh(R, 0), &mut e).is_ok());
        assert_eq!(t.count_for(1), 0);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn opens_are_bounded_per_client_and_overall() {
        let mut t = OpenTable::new(9, 2, 3);
        let mut e = SplitMix(2);
        assert!(t.open(1, b"o", b"a", sh(R, 0), &mut e).is_ok());
        assert!(t.open(1, b"o", b"b", sh(R, 0), &mut e).is_ok());
        assert_eq!(
            t.open(1, b"o", b"c", sh(R, 0), &mut e),
            Err(Nfsstat4::DELAY)
        );
        assert!(
            t.open(1, b"o", b"a", sh(W, 0), &mut e).is_ok(),
            "an upgrade takes no room"
        );
        assert!(t.open(2, b"o", b"c", sh(R, 0), &mut e).is_ok());
        assert_eq!(
            t.open(3, b"o", b"d", sh(R, 0), &mut e),
            Err(Nfsstat4::DELAY)
        );
        t.remove_client(1);
        assert_eq!(t.len(), 1);
        assert!(t.open(3, b"o", b"d", sh(R, 0), &mut e).is_ok());
    }
}
