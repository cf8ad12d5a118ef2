//! Client records and EXCHANGE_ID (RFC 8881 §2.4, §18.35), the CREATE_SESSION sequence slot
//! that confirms a record (§18.36.4), and the lease clock of each record (§8.3).
//!
//! # The EXCHANGE_ID cases (§18.35.4), keyed by what the server already has for the owner
//! ```text
//!  update flag?  record for owner          principal  verifier   outcome
//!  no            none                      -          -          new unconfirmed record    (1)
//!  no            confirmed                 same       same       same client id            (2)
//!  no            confirmed                 differs    -          CLID_INUSE if it has state
//!                                                                or sessions, else replace (3)
//!  no            confirmed                 same       differs    new unconfirmed record; the
//!                                                                old one goes when the new is
//!                                                                confirmed (client restart) (4)
//!  no            unconfirmed only          -          -          replace it                (5)
//!  yes           confirmed                 same       same       same client id            (6)
//!  yes           confirmed                 same       differs    NOT_SAME                  (7)
//!  yes           confirmed                 differs    -          PERM                      (8)
//!  yes           none / unconfirmed only   -          -          NOENT                     (9)
//! ```
//! Only SP4_NONE state protection is offered. Over AUTH_SYS, knfsd answers SP4_MACH_CRED with
//! NFS4ERR_INVAL (it needs an integrity-protected RPCSEC_GSS call) and SP4_SSV with
//! NFS4ERR_ENCR_ALG_UNSUPP; so do we.
//!
//! # Client ids
//! `boot_epoch << 32 | index`: the high half names the server instance, so a client id from
//! before a restart is NFS4ERR_STALE_CLIENTID, never someone else's record; the low half is a
//! counter that skips ids in use.
//!
//! # CREATE_SESSION's sequence slot
//! Each record has one slot for CREATE_SESSION: `eir_sequenceid` tells the client the next
//! `csa_sequence`; the same value again is a retry and gets the cached result; anything else
//! is NFS4ERR_SEQ_MISORDERED. As in knfsd, STALE_CLIENTID, SEQ_MISORDERED and (our choice, as
//! it is transient) DELAY are not cached; every other result is, so argument errors such as
//! TOOSMALL use up the sequence id. That is what the Linux client expects (it bumps its
//! sequence id after every answer but STALE_CLIENTID and DELAY); knfsd checks the channel
//! attributes before the slot and does not.

use crate::ids::Principal;
use bytes::Bytes;
use sluice_xdr::nfs4::ops::{
    CreateSessionResOk, ExchangeIdArgs, StateProtect4A, EXCHGID4_FLAG_BIND_PRINC_STATEID,
    EXCHGID4_FLAG_CONFIRMED_R, EXCHGID4_FLAG_MASK_PNFS, EXCHGID4_FLAG_SUPP_FENCE_OPS,
    EXCHGID4_FLAG_SUPP_MOVED_MIGR, EXCHGID4_FLAG_SUPP_MOVED_REFER,
    EXCHGID4_FLAG_UPD_CONFIRMED_REC_A, EXCHGID4_FLAG_USE_NON_PNFS,
};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{ClientId4, Verifier4};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Flags a client may set in `eia_flags` (§18.35.3); anything else is NFS4ERR_INVAL.
const EXCHGID_FLAGS_ARGS: u32 = EXCHGID4_FLAG_SUPP_MOVED_REFER
    | EXCHGID4_FLAG_SUPP_MOVED_MIGR
    | EXCHGID4_FLAG_SUPP_FENCE_OPS
    | EXCHGID4_FLAG_BIND_PRINC_STATEID
    | EXCHGID4_FLAG_MASK_PNFS
    | EXCHGID4_FLAG_UPD_CONFIRMED_REC_A;

/// One client record.
#[derive(Debug, Clone)]
pub struct ClientRecord {
    pub id: ClientId4,
    /// `co_ownerid`.
    pub owner: Bytes,
    /// `co_verifier`: changes when the client restarts.
    pub verifier: Verifier4,
    pub principal: Principal,
    /// Confirmed by a CREATE_SESSION.
    pub confirmed: bool,
    /// Last lease renewal (EXCHANGE_ID, CREATE_SESSION, SEQUENCE).
    pub renewed_at: Instant,
    /// Since when the lease has been expired while the record was kept for its state.
    pub courtesy_since: Option<Instant>,
    /// RECLAIM_COMPLETE was done (§18.51).
    pub reclaim_complete: bool,
    cs_seqid: u32,
    cs_reply: Option<Result<CreateSessionResOk, Nfsstat4>>,
}

impl ClientRecord {
    /// Whether the lease ran out (`lease` after the last renewal).
    pub fn lease_expired(&self, now: Instant, lease: Duration) -> bool {
        now.saturating_duration_since(self.renewed_at) >= lease
    }
}

/// What EXCHANGE_ID decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeOutcome {
    pub clientid: ClientId4,
    /// `eir_sequenceid`: the `csa_sequence` of the next CREATE_SESSION.
    pub sequenceid: u32,
    /// `eir_flags`.
    pub flags: u32,
    /// Records removed to make this one (replaced, or courtesy clients evicted for room): the
    /// caller destroys their sessions and state.
    pub removed: Vec<ClientId4>,
}

/// CREATE_SESSION's first step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateSessionStep {
    /// A retry: answer this again, change nothing.
    Replay(Result<CreateSessionResOk, Nfsstat4>),
    /// A new request: negotiate, then [`ClientTable::create_session_done`].
    Proceed,
}

/// All client records.
#[derive(Debug)]
pub struct ClientTable {
    records: HashMap<ClientId4, ClientRecord>,
    boot_epoch: u32,
    next_index: u32,
    clients_max: usize,
}

impl ClientTable {
    pub fn new(boot_epoch: u32, clients_max: usize) -> Self {
        Self {
            records: HashMap::new(),
            boot_epoch,
            next_index: 1,
            clients_max: clients_max.max(1),
        }
    }

    /// EXCHANGE_ID (§18.35.4, the table in the module notes). `has_state` says whether a record
    /// has sessions or opens (case 3).
    pub fn exchange_id(
        &mut self,
        now: Instant,
        args: &ExchangeIdArgs,
        principal: &Principal,
        has_state: impl Fn(ClientId4) -> bool,
    ) -> Result<ExchangeOutcome, Nfsstat4> {
        if args.flags & !EXCHGID_FLAGS_ARGS != 0 {
            return Err(Nfsstat4::INVAL);
        }
        match args.state_protect {
            StateProtect4A::None => {}
            StateProtect4A::MachCred(_) => return Err(Nfsstat4::INVAL),
            StateProtect4A::Ssv(_) => return Err(Nfsstat4::ENCR_ALG_UNSUPP),
        }
        let owner = &args.clientowner.ownerid.0;
        let verifier = args.clientowner.verifier;
        let conf = self.find(owner, true);
        let unconf = self.find(owner, false);
        if args.flags & EXCHGID4_FLAG_UPD_CONFIRMED_REC_A != 0 {
            let c = conf.ok_or(Nfsstat4::NOENT)?; // (9)
            let rec = &self.records[&c];
            if rec.principal != *principal {
                return Err(Nfsstat4::PERM); // (8)
            }
            if rec.verifier != verifier {
                return Err(Nfsstat4::NOT_SAME); // (7)
            }
            return Ok(self.existing(c, now)); // (6)
        }
        let mut removed = Vec::new();
        if let Some(c) = conf {
            let rec = &self.records[&c];
            if rec.principal != *principal {
                if has_state(c) {
                    return Err(Nfsstat4::CLID_INUSE); // (3)
                }
                removed.push(c);
            } else if rec.verifier == verifier {
                return Ok(self.existing(c, now)); // (2)
            }
            // (4): the confirmed record stays until the new one is confirmed.
        }
        removed.extend(unconf); // (5)
        let room = self.records.len() - removed.len() < self.clients_max;
        if !room {
            // Full: a courtesy client gives way first, then the oldest unconfirmed record
            // (an EXCHANGE_ID never followed by CREATE_SESSION, or one mid-handshake, whose
            // CREATE_SESSION then gets STALE_CLIENTID and starts over with a new
            // EXCHANGE_ID), so that a flood of EXCHANGE_IDs cannot lock new clients out for a
            // lease. Only a table of live confirmed clients refuses: NFS4ERR_DELAY, as knfsd
            // answers when its client count is at its limit (NFS4ERR_RESOURCE is 4.0's).
            let victim = self
                .oldest_courtesy(&removed)
                .or_else(|| self.oldest_unconfirmed(&removed))
                .ok_or(Nfsstat4::DELAY)?;
            removed.push(victim);
        }
        for c in &removed {
            self.records.remove(c);
        }
        let id = self.allocate_id();
        self.records.insert(
            id,
            ClientRecord {
                id,
                owner: owner.clone(),
                verifier,
                principal: principal.clone(),
                confirmed: false,
                renewed_at: now,
                courtesy_since: None,
                reclaim_complete: false,
                cs_seqid: 0,
                cs_reply: None,
            },
        );
        Ok(ExchangeOutcome {
            clientid: id,
            sequenceid: 1,
            flags: EXCHGID4_FLAG_USE_NON_PNFS,
            removed,
        })
    }

    /// CREATE_SESSION's checks on the record and its sequence slot (§18.36.4).
    pub fn create_session_begin(
        &mut self,
        clientid: ClientId4,
        sequence: u32,
        principal: &Principal,
    ) -> Result<CreateSessionStep, Nfsstat4> {
        let rec = self.get(clientid)?;
        // knfsd: another principal confirming an unconfirmed record is CLID_INUSE; for a
        // confirmed record the principal only matters under SP4_MACH_CRED, which we refuse.
        if !rec.confirmed && rec.principal != *principal {
            return Err(Nfsstat4::CLID_INUSE);
        }
        if sequence == rec.cs_seqid {
            if let Some(r) = &rec.cs_reply {
                return Ok(CreateSessionStep::Replay(r.clone()));
            }
        }
        if sequence != rec.cs_seqid.wrapping_add(1) {
            return Err(Nfsstat4::SEQ_MISORDERED);
        }
        Ok(CreateSessionStep::Proceed)
    }

    /// Records CREATE_SESSION's result in the record's slot and, on success, confirms the
    /// record and renews its lease. Returns the older confirmed record of the same owner that
    /// this confirmation replaces (case 4 of EXCHANGE_ID), for the caller to destroy.
    pub fn create_session_done(
        &mut self,
        now: Instant,
        clientid: ClientId4,
        sequence: u32,
        result: &Result<CreateSessionResOk, Nfsstat4>,
    ) -> Option<ClientId4> {
        if *result == Err(Nfsstat4::DELAY) {
            return None;
        }
        let rec = self.records.get_mut(&clientid)?;
        rec.cs_seqid = sequence;
        rec.cs_reply = Some(result.clone());
        if result.is_err() || rec.confirmed {
            return None;
        }
        rec.confirmed = true;
        rec.renewed_at = now;
        let owner = rec.owner.clone();
        let old = self
            .records
            .values()
            .find(|r| r.confirmed && r.owner == owner && r.id != clientid)
            .map(|r| r.id);
        if let Some(o) = old {
            self.records.remove(&o);
        }
        old
    }

    /// A record by id: NFS4ERR_STALE_CLIENTID if unknown (or from an earlier instance).
    pub fn get(&self, clientid: ClientId4) -> Result<&ClientRecord, Nfsstat4> {
        self.records.get(&clientid).ok_or(Nfsstat4::STALE_CLIENTID)
    }

    pub fn get_mut(&mut self, clientid: ClientId4) -> Result<&mut ClientRecord, Nfsstat4> {
        self.records
            .get_mut(&clientid)
            .ok_or(Nfsstat4::STALE_CLIENTID)
    }

    /// Renews a lease; a courtesy client that comes back is an ordinary client again.
    pub fn renew(&mut self, clientid: ClientId4, now: Instant) {
        if let Some(r) = self.records.get_mut(&clientid) {
            r.renewed_at = now;
            r.courtesy_since = None;
        }
    }

    pub fn remove(&mut self, clientid: ClientId4) -> Option<ClientRecord> {
        self.records.remove(&clientid)
    }

    pub fn iter(&self) -> impl Iterator<Item = &ClientRecord> {
        self.records.values()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut ClientRecord> {
        self.records.values_mut()
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Whether a client id was issued by this server instance (its high half).
    pub fn is_ours(&self, clientid: ClientId4) -> bool {
        (clientid >> 32) as u32 == self.boot_epoch
    }

    fn existing(&mut self, c: ClientId4, now: Instant) -> ExchangeOutcome {
        self.renew(c, now);
        let rec = &self.records[&c];
        ExchangeOutcome {
            clientid: c,
            sequenceid: rec.cs_seqid.wrapping_add(1),
            flags: EXCHGID4_FLAG_USE_NON_PNFS | EXCHGID4_FLAG_CONFIRMED_R,
            removed: Vec::new(),
        }
    }

    /// The record for `owner` in the given confirmation state. A linear scan: EXCHANGE_ID is
    /// rare (once per client mount) and the table is bounded by `clients_max`.
    fn find(&self, owner: &[u8], confirmed: bool) -> Option<ClientId4> {
        self.records
            .values()
            .find(|r| r.confirmed == confirmed && r.owner == owner)
            .map(|r| r.id)
    }

    /// The unconfirmed record made longest ago, other than those in `except`.
    fn oldest_unconfirmed(&self, except: &[ClientId4]) -> Option<ClientId4> {
        self.records
            .values()
            .filter(|r| !r.confirmed && !except.contains(&r.id))
            .map(|r| (r.renewed_at, r.id))
            .min()
            .map(|(_, id)| id)
    }

    /// The courtesy client expired longest ago, other than those in `except`.
    pub fn oldest_courtesy(&self, except: &[ClientId4]) -> Option<ClientId4> {
        self.records
            .values()
            .filter(|r| !except.contains(&r.id))
            .filter_map(|r| r.courtesy_since.map(|t| (t, r.id)))
            .min()
            .map(|(_, id)| id)
    }

    fn allocate_id(&mut self) -> ClientId4 {
        loop {
            let id = (self.boot_epoch as u64) << 32 | self.next_index as u64;
            self.next_index = self.next_index.wrapping_add(1).max(1);
            if !self.records.contains_key(&id) {
                return id;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_xdr::nfs4::ops::{ClientOwner4, ImplIdList, StateProtectOps4};
    use sluice_xdr::nfs4::{Bitmap4, Opaque4};

    fn args(owner: &'static [u8], verifier: u8, flags: u32) -> ExchangeIdArgs {
        ExchangeIdArgs {
            clientowner: ClientOwner4 {
                verifier: [verifier; 8],
                ownerid: Opaque4(Bytes::from_static(owner)),
            },
            flags,
            state_protect: StateProtect4A::None,
            client_impl_id: ImplIdList(Vec::new()),
        }
    }

    fn p(s: &'static [u8]) -> Principal {
        Principal(Bytes::from_static(s))
    }

    const UPD: u32 = EXCHGID4_FLAG_UPD_CONFIRMED_REC_A;

    fn confirm(t: &mut ClientTable, now: Instant, id: ClientId4) -> Option<ClientId4> {
        let seq = t.get(id).unwrap().cs_seqid + 1;
        assert_eq!(
            t.create_session_begin(id, seq, &t.get(id).unwrap().principal.clone()),
            Ok(CreateSessionStep::Proceed)
        );
        let none = t.create_session_done(now, id, seq, &Err(Nfsstat4::TOOSMALL));
        assert_eq!(none, None, "an error confirms nothing");
        // The error was cached under `seq`; a new CREATE_SESSION uses seq + 1.
        let ok = CreateSessionResOk {
            sessionid: [0; 16],
            sequence: seq + 1,
            flags: 0,
            fore_chan_attrs: Default::default(),
            back_chan_attrs: Default::default(),
        };
        t.create_session_done(now, id, seq + 1, &Ok(ok))
    }

    #[test]
    fn case_1_new_owner_gets_an_unconfirmed_record() {
        let now = Instant::now();
        let mut t = ClientTable::new(7, 10);
        let o = t
            .exchange_id(now, &args(b"a", 1, 0), &p(b"u"), |_| false)
            .unwrap();
        assert_eq!(o.clientid >> 32, 7);
        assert_eq!(o.sequenceid, 1);
        assert_eq!(o.flags & EXCHGID4_FLAG_CONFIRMED_R, 0);
        assert!(!t.get(o.clientid).unwrap().confirmed);
        assert!(t.is_ours(o.clientid));
        assert!(!t.is_ours(o.clientid ^ (1 << 40)));
    }

    #[test]
    fn case_2_same_verifier_and_principal_returns_the_confirmed_record() {
        let now = Instant::now();
        let mut t = ClientTable::new(7, 10);
        let a = t
            .exchange_id(now, &args(b"a", 1, 0), &p(b"u"), |_| false)
            .unwrap();
        confirm(&mut t, now, a.clientid);
        let b = t
            .exchange_id(now, &args(b"a", 1, 0), &p(b"u"), |_| false)
            .unwrap();
        assert_eq!(b.clientid, a.clientid);
        assert_ne!(b.flags & EXCHGID4_FLAG_CONFIRMED_R, 0);
        assert_eq!(b.sequenceid, 3, "two CREATE_SESSIONs were done");
    }

    #[test]
    fn case_3_another_principal_collides_only_while_the_record_has_state() {
        let now = Instant::now();
        let mut t = ClientTable::new(7, 10);
        let a = t
            .exchange_id(now, &args(b"a", 1, 0), &p(b"u"), |_| false)
            .unwrap();
        confirm(&mut t, now, a.clientid);
        assert_eq!(
            t.exchange_id(now, &args(b"a", 1, 0), &p(b"v"), |_| true),
            Err(Nfsstat4::CLID_INUSE)
        );
        let b = t
            .exchange_id(now, &args(b"a", 1, 0), &p(b"v"), |_| false)
            .unwrap();
        assert_ne!(b.clientid, a.clientid);
        assert_eq!(b.removed, vec![a.clientid]);
        assert_eq!(t.get(a.clientid).err(), Some(Nfsstat4::STALE_CLIENTID));
    }

    #[test]
    fn case_4_a_restarted_client_replaces_its_record_when_it_confirms() {
        let now = Instant::now();
        let mut t = ClientTable::new(7, 10);
        let a = t
            .exchange_id(now, &args(b"a", 1, 0), &p(b"u"), |_| false)
            .unwrap();
        confirm(&mut t, now, a.clientid);
        let b = t
            .exchange_id(now, &args(b"a", 2, 0), &p(b"u"), |_| true)
            .unwrap();
        assert_ne!(b.clientid, a.clientid);
        assert!(b.removed.is_empty());
        assert!(
            t.get(a.clientid).is_ok(),
            "kept until the new record is confirmed"
        );
        assert_eq!(confirm(&mut t, now, b.clientid), Some(a.clientid));
        assert!(t.get(a.clientid).is_err());
    }

    #[test]
    fn case_5_an_unconfirmed_record_is_replaced() {
        let now = Instant::now();
        let mut t = ClientTable::new(7, 10);
        let a = t
            .exchange_id(now, &args(b"a", 1, 0), &p(b"u"), |_| false)
            .unwrap();
        let b = t
            .exchange_id(now, &args(b"a", 1, 0), &p(b"u"), |_| false)
            .unwrap();
        assert_ne!(a.clientid, b.clientid);
        assert_eq!(b.removed, vec![a.clientid]);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn cases_6_to_9_updates() {
        let now = Instant::now();
        let mut t = ClientTable::new(7, 10);
        assert_eq!(
            t.exchange_id(now, &args(b"a", 1, UPD), &p(b"u"), |_| false),
            Err(Nfsstat4::NOENT)
        );
        let a = t
            .exchange_id(now, &args(b"a", 1, 0), &p(b"u"), |_| false)
            .unwrap();
        assert_eq!(
            t.exchange_id(now, &args(b"a", 1, UPD), &p(b"u"), |_| false),
            Err(Nfsstat4::NOENT),
            "an unconfirmed record cannot be updated"
        );
        confirm(&mut t, now, a.clientid);
        let u = t
            .exchange_id(now, &args(b"a", 1, UPD), &p(b"u"), |_| false)
            .unwrap();
        assert_eq!(u.clientid, a.clientid);
        assert_eq!(
            t.exchange_id(now, &args(b"a", 2, UPD), &p(b"u"), |_| false),
            Err(Nfsstat4::NOT_SAME)
        );
        assert_eq!(
            t.exchange_id(now, &args(b"a", 1, UPD), &p(b"v"), |_| false),
            Err(Nfsstat4::PERM)
        );
    }

    #[test]
    fn bad_flags_and_state_protection_are_refused() {
        let now = Instant::now();
        let mut t = ClientTable::new(7, 10);
        for f in [EXCHGID4_FLAG_CONFIRMED_R, 0x0000_1000] {
            assert_eq!(
                t.exchange_id(now, &args(b"a", 1, f), &p(b"u"), |_| false),
                Err(Nfsstat4::INVAL)
            );
        }
        let ops = StateProtectOps4 {
            must_enforce: Bitmap4::new(),
            must_allow: Bitmap4::new(),
        };
        let mut a = args(b"a", 1, 0);
        a.state_protect = StateProtect4A::MachCred(ops);
        assert_eq!(
            t.exchange_id(now, &a, &p(b"u"), |_| false),
            Err(Nfsstat4::INVAL)
        );
        assert!(t.is_empty());
    }

    #[test]
    fn create_session_sequence_replay_and_misorder() {
        let now = Instant::now();
        let mut t = ClientTable::new(7, 10);
        let a = t
            .exchange_id(now, &args(b"a", 1, 0), &p(b"u"), |_| false)
            .unwrap();
        let id = a.clientid;
        assert_eq!(
            t.create_session_begin(id, 2, &p(b"u")),
            Err(Nfsstat4::SEQ_MISORDERED)
        );
        assert_eq!(
            t.create_session_begin(id, 1, &p(b"x")),
            Err(Nfsstat4::CLID_INUSE)
        );
        assert_eq!(
            t.create_session_begin(id + 1000, 1, &p(b"u")),
            Err(Nfsstat4::STALE_CLIENTID)
        );
        assert_eq!(
            t.create_session_begin(id, 1, &p(b"u")),
            Ok(CreateSessionStep::Proceed)
        );
        t.create_session_done(now, id, 1, &Err(Nfsstat4::DELAY));
        assert_eq!(
            t.create_session_begin(id, 1, &p(b"u")),
            Ok(CreateSessionStep::Proceed),
            "DELAY is not cached"
        );
        t.create_session_done(now, id, 1, &Err(Nfsstat4::TOOSMALL));
        assert_eq!(
            t.create_session_begin(id, 1, &p(b"u")),
            Ok(CreateSessionStep::Replay(Err(Nfsstat4::TOOSMALL)))
        );
    }

    #[test]
    fn a_full_table_evicts_the_oldest_courtesy_client_or_says_delay() {
        let now = Instant::now();
        let mut t = ClientTable::new(7, 2);
        let a = t
            .exchange_id(now, &args(b"a", 1, 0), &p(b"u"), |_| false)
            .unwrap();
        let b = t
            .exchange_id(now, &args(b"b", 1, 0), &p(b"u"), |_| false)
            .unwrap();
        for c in [a.clientid, b.clientid] {
            t.get_mut(c).unwrap().confirmed = true;
        }
        assert_eq!(
            t.exchange_id(now, &args(b"c", 1, 0), &p(b"u"), |_| false),
            Err(Nfsstat4::DELAY),
            "only live confirmed clients: nothing to give way"
        );
        t.get_mut(b.clientid).unwrap().courtesy_since = Some(now);
        t.get_mut(a.clientid).unwrap().courtesy_since = Some(now + Duration::from_secs(1));
        let c = t
            .exchange_id(now, &args(b"c", 1, 0), &p(b"u"), |_| false)
            .unwrap();
        assert_eq!(c.removed, vec![b.clientid]);
        assert_eq!(t.len(), 2);
    }

    /// EXCHANGE_IDs never followed by CREATE_SESSION cannot fill the table for a lease: the
    /// oldest unconfirmed record gives way to a new client.
    #[test]
    fn a_full_table_evicts_the_oldest_unconfirmed_record() {
        let now = Instant::now();
        let mut t = ClientTable::new(7, 2);
        let a = t
            .exchange_id(now, &args(b"a", 1, 0), &p(b"u"), |_| false)
            .unwrap();
        let later = now + Duration::from_secs(1);
        let b = t
            .exchange_id(later, &args(b"b", 1, 0), &p(b"u"), |_| false)
            .unwrap();
        let c = t
            .exchange_id(later, &args(b"c", 1, 0), &p(b"u"), |_| false)
            .unwrap();
        assert_eq!(c.removed, vec![a.clientid], "the oldest went");
        assert_eq!(
            t.create_session_begin(a.clientid, 1, &p(b"u")),
            Err(Nfsstat4::STALE_CLIENTID),
            "its CREATE_SESSION then starts over"
        );
        assert!(t.get(b.clientid).is_ok() && t.get(c.clientid).is_ok());
    }
}
