//! The NLM v4 lock service (X/Open XNFS chapter 10) as a pure core: NFSv3 clients' byte-range
//! locks and share reservations, in the same range table as NFSv4's locks.
//!
//! # One lock table for both protocols
//! A v3 client's `fcntl` lock and a v4 client's LOCK on the same file must conflict, whichever
//! came first. So NLM keeps no ranges of its own: its locks are rows of
//! [`crate::locks::ranges::LockTable`] (the table behind [`State4`]), whose owner is a
//! [`crate::locks::ranges::Owner`] like any other. What tells the two kinds apart is the
//! owner's client id:
//!
//! ```text
//!   Owner { clientid, owner }
//!     v4:  clientid = boot_epoch << 32 | index   (boot_epoch >= 1, `clients`)
//!          owner    = lock_owner4's opaque bytes
//!     NLM: clientid = 0 << 32 | host index        (host index >= 1, one per caller name)
//!          owner    = svid (4 bytes, big-endian) ++ oh (the client's owner handle)
//! ```
//!
//! A boot epoch is never 0 (`recovery::records::choose_epoch`), so the high half alone says
//! which protocol an owner is of ([`is_nlm_owner`]), and every check of the table — conflicts,
//! upgrades, splits, the per-client and total bounds — applies to both unchanged. An NFSv4
//! client's LOCK that meets an NLM lock is refused with NFS4ERR_DENIED naming it; an NLM LOCK
//! that meets a v4 lock is NLM4_DENIED (or queued, if it asked to block), and a v4 courtesy
//! client in the way is expired first, as for a v4 LOCK. The owner of an NLM lock is the
//! (host, svid, oh) triple knfsd's lockd uses, so two processes of one client conflict.
//!
//! # Grace
//! The grace period is [`State4`]'s, one for both protocols (the server adds the hosts NSM
//! monitored to the records grace waits for). During grace an NLM LOCK with `reclaim` is
//! taken, any other LOCK, TEST, UNLOCK, CANCEL and SHARE gets NLM4_DENIED_GRACE_PERIOD; after
//! it, a reclaim gets NLM4_DENIED_GRACE_PERIOD too (knfsd's lockd answers the same).
//!
//! # Blocking locks and what the core asks the driver to send
//! A LOCK with `block` that conflicts is queued and answered NLM4_BLOCKED. Whenever locks may
//! have gone away (an NLM UNLOCK or FREE_ALL, a host's reboot, and on the timer
//! [`Nlm::poll_timeout`] names, which also catches NFSv4 LOCKUs and expiries) the queue is
//! retried in arrival order; each waiter now free is locked and returned as a
//! [`Decision::Granted`]: "send NLM_GRANTED_MSG with these arguments to this host". The
//! driver finds the host's NLM program through its portmapper. A client that answers
//! GRANTED_RES with anything but NLM4_GRANTED no longer wants the lock: it is released.
//!
//! ```text
//!   LOCK(block) ──conflict──▶ queue (BLOCKED) ──retry: free──▶ lock taken ──▶ Granted decision
//!        │                      │                                                 │
//!        │                  CANCEL: removed                      GRANTED_RES(!GRANTED): unlocked
//!        └──no conflict──▶ GRANTED
//! ```
//!
//! A waiter that its client neither renews (the Linux client re-sends a blocking LOCK every
//! 30 s while it waits) nor cancels is dropped after [`NlmConfig::blocked_ttl`].
//!
//! # Delegations
//! A v4 client holding a delegation keeps its locks to itself (the Linux client sends no LOCK
//! under one), so the range table alone cannot see them. Two rules close that: no delegation
//! is granted on a file with an NLM lock (`State4::open_delegation`), and an NLM request that
//! could meet the holder's unseen locks recalls the delegation first. The request itself
//! passes the gate in the server's driver (`sluice_server::nlm`, which drops it while the
//! recall runs); a waiting LOCK's retry here passes the same gate
//! ([`State4::break_delegations`], `write` = the lock is exclusive) and stays queued until
//! the delegation is returned or revoked.
//!
//! # Share reservations
//! SHARE and UNSHARE (DOS-style deny modes) are kept here, per file, and checked against each
//! other only: NFSv3 has no OPEN, and NFSv4 share reservations are not consulted.
//!
//! # Bounds
//! Ranges per host and overall are the range table's own ([`crate::Config4`]'s lock bounds),
//! answered NLM4_DENIED_NOLOCKS when full; hosts, waiters (overall and per host) and shares
//! have the bounds of [`NlmConfig`].

pub mod monitor;

use crate::locks::ranges::{Lock, LockError, LockKind, Owner, Range};
use crate::state::State4;
use bytes::{BufMut, Bytes, BytesMut};
use sluice_xdr::nfs4::ClientId4;
use sluice_xdr::nlm::{
    CallerName, Netobj, Nlm4CancArgs, Nlm4Holder, Nlm4Lock, Nlm4LockArgs, Nlm4Res, Nlm4ShareArgs,
    Nlm4ShareRes, Nlm4Stats, Nlm4TestArgs, Nlm4TestRes, Nlm4TestRply, Nlm4UnlockArgs, MAXNETOBJ_SZ,
};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Limits and timers of the NLM service.
#[derive(Debug, Clone)]
pub struct NlmConfig {
    /// Client hosts (caller names) known at once. A host is forgotten when it holds nothing;
    /// past the bound a new host's LOCK is NLM4_DENIED_NOLOCKS. Default 1024, the NFSv4 client
    /// table's default bound.
    pub hosts_max: usize,
    /// Waiting (blocked) LOCKs overall; past it a blocking LOCK is NLM4_DENIED_NOLOCKS.
    /// Default 1024.
    pub blocked_max: usize,
    /// Waiting LOCKs per host. Default 64: a host has that many processes waiting on locks
    /// at most, in any workload we know of.
    pub blocked_per_host_max: usize,
    /// How long a waiter lives without being re-sent. Default 120 s: four times the Linux
    /// client's 30 s re-send interval.
    pub blocked_ttl: Duration,
    /// How often the queue is retried while it is not empty (catches NFSv4 unlocks, which do
    /// not pass through here). Default 1 s.
    pub retry_interval: Duration,
    /// Share reservations overall. Default 4096.
    pub shares_max: usize,
}

impl Default for NlmConfig {
    fn default() -> Self {
        Self {
            hosts_max: 1024,
            blocked_max: 1024,
            blocked_per_host_max: 64,
            blocked_ttl: Duration::from_secs(120),
            retry_interval: Duration::from_secs(1),
            shares_max: 4096,
        }
    }
}

/// What the core asks its driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Send NLM_GRANTED_MSG (procedure 10) with `args` to `host`'s NLM program: its blocked
    /// LOCK is now held.
    Granted {
        host: CallerName,
        args: Nlm4TestArgs,
    },
}

/// Whether a lock owner is an NLM host's (module notes).
pub fn is_nlm_owner(clientid: ClientId4) -> bool {
    clientid >> 32 == 0
}

/// The NLM lock service's own state (module notes): hosts, waiters, share reservations. The
/// locks themselves are in the [`State4`] passed to each call.
#[derive(Debug)]
pub struct Nlm {
    cfg: NlmConfig,
    /// Caller name → host index (the low half of the owners' client id).
    hosts: HashMap<Bytes, u32>,
    next_host: u32,
    blocked: VecDeque<Waiter>,
    shares: Vec<Share>,
    /// Grants sent and not yet answered: cookie → (host, file, owner, range), so a refused
    /// GRANTED_RES releases the right lock.
    granted: HashMap<Bytes, (Bytes, Owner, Range)>,
    next_cookie: u64,
    next_retry: Option<Instant>,
}

/// A queued blocking LOCK.
#[derive(Debug, Clone)]
struct Waiter {
    host: CallerName,
    file: Bytes,
    owner: Owner,
    kind: LockKind,
    range: Range,
    lock: Nlm4Lock,
    exclusive: bool,
    since: Instant,
}

/// One share reservation.
#[derive(Debug, Clone)]
struct Share {
    file: Bytes,
    owner: Owner,
    access: u32,
    mode: u32,
}

impl Nlm {
    pub fn new(cfg: NlmConfig) -> Self {
        Self {
            cfg,
            hosts: HashMap::new(),
            next_host: 1,
            blocked: VecDeque::new(),
            shares: Vec::new(),
            granted: HashMap::new(),
            next_cookie: 1,
            next_retry: None,
        }
    }

    /// TEST: GRANTED when the lock could be taken now, DENIED with the first conflicting
    /// holder otherwise. Creates no state.
    pub fn test(
        &mut self,
        st: &State4,
        now: Instant,
        file: &[u8],
        a: &Nlm4TestArgs,
    ) -> Nlm4TestRes {
        let res = |stat: Nlm4TestRply| Nlm4TestRes {
            cookie: a.cookie.clone(),
            stat,
        };
        if st.in_grace() {
            return res(Nlm4TestRply::Other(Nlm4Stats::DENIED_GRACE_PERIOD.0));
        }
        let range = range_of(a.alock.l_offset, a.alock.l_len);
        let owner = self.peek_owner(&a.alock);
        let kind = kind_of(a.exclusive);
        let conflicts = st.locks.ranges.conflicts(file, &owner, kind, range);
        match conflicts
            .into_iter()
            .find(|l| !st.nlm_may_break(now, l.owner.clientid))
        {
            Some(l) => res(Nlm4TestRply::Denied(holder(l))),
            None => res(Nlm4TestRply::Other(Nlm4Stats::GRANTED.0)),
        }
    }

    /// LOCK, LOCK_MSG and NM_LOCK (module notes for grace and blocking).
    pub fn lock(
        &mut self,
        st: &mut State4,
        now: Instant,
        file: &[u8],
        a: &Nlm4LockArgs,
    ) -> Nlm4Res {
        let stat = self.lock_stat(st, now, file, a);
        if stat != Nlm4Stats::GRANTED && stat != Nlm4Stats::BLOCKED {
            self.forget_idle_host(st, &a.alock.caller_name);
        }
        Nlm4Res {
            cookie: a.cookie.clone(),
            stat,
        }
    }

    /// CANCEL: withdraws a queued LOCK of the same owner, file and range. NLM4_DENIED when
    /// nothing matched (the lock may have been granted already).
    pub fn cancel(&mut self, st: &State4, file: &[u8], a: &Nlm4CancArgs) -> Nlm4Res {
        let stat = if st.in_grace() {
            Nlm4Stats::DENIED_GRACE_PERIOD
        } else {
            let owner = self.peek_owner(&a.alock);
            let range = range_of(a.alock.l_offset, a.alock.l_len);
            let before = self.blocked.len();
            self.blocked
                .retain(|w| !(w.file == file && w.owner == owner && w.range == range));
            if self.blocked.len() < before {
                Nlm4Stats::GRANTED
            } else {
                Nlm4Stats::DENIED
            }
        };
        Nlm4Res {
            cookie: a.cookie.clone(),
            stat,
        }
    }

    /// UNLOCK: releases the range (parts not held are no error), then retries the queue.
    pub fn unlock(
        &mut self,
        st: &mut State4,
        now: Instant,
        file: &[u8],
        a: &Nlm4UnlockArgs,
    ) -> (Nlm4Res, Vec<Decision>) {
        let res = |stat| Nlm4Res {
            cookie: a.cookie.clone(),
            stat,
        };
        if st.in_grace() {
            return (res(Nlm4Stats::DENIED_GRACE_PERIOD), Vec::new());
        }
        let owner = self.peek_owner(&a.alock);
        let range = range_of(a.alock.l_offset, a.alock.l_len);
        match st.locks.ranges.unlock(file, &owner, range) {
            Ok(()) => {}
            // Unlocking the middle of a range needs one more row.
            Err(_) => return (res(Nlm4Stats::DENIED_NOLOCKS), Vec::new()),
        }
        self.forget_idle_host(st, &a.alock.caller_name);
        (res(Nlm4Stats::GRANTED), self.retry(st, now))
    }

    /// GRANTED_RES: the client's answer to a [`Decision::Granted`]. Anything but
    /// NLM4_GRANTED means it no longer waits for the lock, which is released.
    pub fn granted_res(&mut self, st: &mut State4, now: Instant, r: &Nlm4Res) -> Vec<Decision> {
        let Some((file, owner, range)) = self.granted.remove(&r.cookie.0) else {
            return Vec::new();
        };
        if r.stat == Nlm4Stats::GRANTED {
            return Vec::new();
        }
        let _ = st.locks.ranges.unlock(&file, &owner, range);
        self.retry(st, now)
    }

    /// FREE_ALL, and a host's reboot (NSM NOTIFY): every lock, waiter and share reservation
    /// of host `name` goes, then the queue is retried.
    pub fn free_all(&mut self, st: &mut State4, now: Instant, name: &[u8]) -> Vec<Decision> {
        let Some(index) = self.hosts.remove(name) else {
            return Vec::new();
        };
        let id = ClientId4::from(index);
        st.locks.ranges.remove_client(id);
        self.blocked.retain(|w| w.owner.clientid != id);
        self.shares.retain(|s| s.owner.clientid != id);
        self.granted.retain(|_, (_, o, _)| o.clientid != id);
        self.retry(st, now)
    }

    /// SHARE: a share reservation, refused (NLM4_DENIED) when it denies what another holds
    /// or another denies what it asks.
    pub fn share(&mut self, st: &State4, file: &[u8], a: &Nlm4ShareArgs) -> Nlm4ShareRes {
        let stat = self.share_stat(st, file, a);
        Nlm4ShareRes {
            cookie: a.cookie.clone(),
            stat,
            sequence: 0,
        }
    }

    /// UNSHARE: drops the owner's reservation on the file (none is no error).
    pub fn unshare(&mut self, st: &State4, file: &[u8], a: &Nlm4ShareArgs) -> Nlm4ShareRes {
        let stat = if st.in_grace() {
            Nlm4Stats::DENIED_GRACE_PERIOD
        } else {
            let owner = self.peek_share_owner(&a.share.caller_name, &a.share.oh);
            self.shares
                .retain(|s| !(s.file == file && s.owner == owner));
            Nlm4Stats::GRANTED
        };
        Nlm4ShareRes {
            cookie: a.cookie.clone(),
            stat,
            sequence: 0,
        }
    }

    /// When the driver should call [`Nlm::tick`] next: while waiters are queued, every
    /// [`NlmConfig::retry_interval`].
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_retry
    }

    /// The timer: drops waiters past their time to live and retries the queue.
    pub fn tick(&mut self, st: &mut State4, now: Instant) -> Vec<Decision> {
        let ttl = self.cfg.blocked_ttl;
        self.blocked
            .retain(|w| now.saturating_duration_since(w.since) < ttl);
        self.retry(st, now)
    }

    /// Waiting LOCKs (gauges, tests).
    pub fn blocked_len(&self) -> usize {
        self.blocked.len()
    }

    /// Hosts known (gauges, tests).
    pub fn hosts_len(&self) -> usize {
        self.hosts.len()
    }

    /// Whether host `name` holds any lock, waiter or share reservation.
    pub fn holds(&self, st: &State4, name: &[u8]) -> bool {
        self.hosts
            .get(name)
            .is_some_and(|&i| self.holds_anything(st, ClientId4::from(i)))
    }

    /// The host names known, for the monitor's records.
    pub fn hosts(&self) -> impl Iterator<Item = &Bytes> {
        self.hosts.keys()
    }

    // ----- helpers ---------------------------------------------------------------------------

    fn lock_stat(
        &mut self,
        st: &mut State4,
        now: Instant,
        file: &[u8],
        a: &Nlm4LockArgs,
    ) -> Nlm4Stats {
        if a.reclaim != st.in_grace() {
            return Nlm4Stats::DENIED_GRACE_PERIOD;
        }
        let Some(owner) = self.owner(st, &a.alock) else {
            return Nlm4Stats::DENIED_NOLOCKS;
        };
        let kind = kind_of(a.exclusive);
        let range = range_of(a.alock.l_offset, a.alock.l_len);
        if let Err(l) = st.nlm_break_courtesy(now, file, &owner, kind, range) {
            return self.wait_or_deny(now, file, owner, kind, range, a, &l);
        }
        match st.locks.ranges.lock(file, &owner, kind, range) {
            Ok(()) => {
                // A re-sent blocking LOCK that is now held needs no waiter any more.
                self.blocked
                    .retain(|w| !(w.file == file && w.owner == owner && w.range == range));
                Nlm4Stats::GRANTED
            }
            Err(LockError::Full) => Nlm4Stats::DENIED_NOLOCKS,
            Err(LockError::Denied(l)) => self.wait_or_deny(now, file, owner, kind, range, a, &l),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn wait_or_deny(
        &mut self,
        now: Instant,
        file: &[u8],
        owner: Owner,
        kind: LockKind,
        range: Range,
        a: &Nlm4LockArgs,
        _conflict: &Lock,
    ) -> Nlm4Stats {
        if !a.block {
            return Nlm4Stats::DENIED;
        }
        if let Some(w) = self
            .blocked
            .iter_mut()
            .find(|w| w.file == file && w.owner == owner && w.range == range)
        {
            // A re-send: renews the waiter (its type may have changed).
            w.kind = kind;
            w.exclusive = a.exclusive;
            w.since = now;
            return Nlm4Stats::BLOCKED;
        }
        let mine = self
            .blocked
            .iter()
            .filter(|w| w.owner.clientid == owner.clientid)
            .count();
        if self.blocked.len() >= self.cfg.blocked_max || mine >= self.cfg.blocked_per_host_max {
            return Nlm4Stats::DENIED_NOLOCKS;
        }
        self.blocked.push_back(Waiter {
            host: a.alock.caller_name.clone(),
            file: Bytes::copy_from_slice(file),
            owner,
            kind,
            range,
            lock: a.alock.clone(),
            exclusive: a.exclusive,
            since: now,
        });
        self.next_retry.get_or_insert(now + self.cfg.retry_interval);
        Nlm4Stats::BLOCKED
    }

    /// Retries every waiter in arrival order; those now free are locked and granted.
    fn retry(&mut self, st: &mut State4, now: Instant) -> Vec<Decision> {
        let mut out = Vec::new();
        let mut still = VecDeque::with_capacity(self.blocked.len());
        while let Some(w) = self.blocked.pop_front() {
            // A delegation granted since the waiter came (to a client whose locks under it
            // are local) is recalled first: the waiter waits for the DELEGRETURN.
            let free = st
                .break_delegations(now, None, &w.file, w.exclusive)
                .is_ok()
                && st
                    .nlm_break_courtesy(now, &w.file, &w.owner, w.kind, w.range)
                    .is_ok()
                && st
                    .locks
                    .ranges
                    .lock(&w.file, &w.owner, w.kind, w.range)
                    .is_ok();
            if !free {
                still.push_back(w);
                continue;
            }
            let cookie = self.cookie();
            self.granted
                .insert(cookie.clone(), (w.file.clone(), w.owner.clone(), w.range));
            out.push(Decision::Granted {
                host: w.host,
                args: Nlm4TestArgs {
                    cookie: Netobj(cookie),
                    exclusive: w.exclusive,
                    alock: w.lock,
                },
            });
        }
        self.blocked = still;
        self.next_retry = (!self.blocked.is_empty()).then(|| now + self.cfg.retry_interval);
        out
    }

    fn share_stat(&mut self, st: &State4, file: &[u8], a: &Nlm4ShareArgs) -> Nlm4Stats {
        if a.reclaim != st.in_grace() {
            return Nlm4Stats::DENIED_GRACE_PERIOD;
        }
        let (access, mode) = (a.share.access.0 & 3, a.share.mode.0 & 3);
        let Some(owner) = self.host_owner(st, &a.share.caller_name, &a.share.oh) else {
            return Nlm4Stats::DENIED_NOLOCKS;
        };
        let clash = self.shares.iter().any(|s| {
            s.file == file && s.owner != owner && (s.mode & access != 0 || mode & s.access != 0)
        });
        if clash {
            return Nlm4Stats::DENIED;
        }
        if let Some(s) = self
            .shares
            .iter_mut()
            .find(|s| s.file == file && s.owner == owner)
        {
            s.access = access;
            s.mode = mode;
            return Nlm4Stats::GRANTED;
        }
        if self.shares.len() >= self.cfg.shares_max {
            return Nlm4Stats::DENIED_NOLOCKS;
        }
        self.shares.push(Share {
            file: Bytes::copy_from_slice(file),
            owner,
            access,
            mode,
        });
        Nlm4Stats::GRANTED
    }

    /// The owner of `lock`, registering its host (`None`: the host table is full).
    fn owner(&mut self, st: &State4, lock: &Nlm4Lock) -> Option<Owner> {
        let id = self.host_id(st, &lock.caller_name)?;
        Some(owner_of(id, lock.svid, &lock.oh))
    }

    fn host_owner(&mut self, st: &State4, host: &CallerName, oh: &Netobj) -> Option<Owner> {
        let id = self.host_id(st, host)?;
        Some(owner_of(id, 0, oh))
    }

    /// The owner of `lock` without registering its host: an unknown host holds nothing, and
    /// its owner (client id 0) matches no row.
    fn peek_owner(&self, lock: &Nlm4Lock) -> Owner {
        let id = self.hosts.get(&lock.caller_name.0).copied().unwrap_or(0);
        owner_of(ClientId4::from(id), lock.svid, &lock.oh)
    }

    fn peek_share_owner(&self, host: &CallerName, oh: &Netobj) -> Owner {
        let id = self.hosts.get(&host.0).copied().unwrap_or(0);
        owner_of(ClientId4::from(id), 0, oh)
    }

    /// The host's index, registering it; when the table is full, hosts that hold nothing are
    /// forgotten first.
    fn host_id(&mut self, st: &State4, name: &CallerName) -> Option<ClientId4> {
        if let Some(&i) = self.hosts.get(&name.0) {
            return Some(ClientId4::from(i));
        }
        if self.hosts.len() >= self.cfg.hosts_max {
            let idle: Vec<Bytes> = self
                .hosts
                .iter()
                .filter(|(_, &i)| !self.holds_anything(st, ClientId4::from(i)))
                .map(|(n, _)| n.clone())
                .collect();
            for n in idle {
                self.hosts.remove(&n);
            }
            if self.hosts.len() >= self.cfg.hosts_max {
                return None;
            }
        }
        // Indexes are never reused within an instance: 2^32 hosts is beyond any run.
        let i = self.next_host;
        self.next_host = self.next_host.checked_add(1)?;
        self.hosts.insert(name.0.clone(), i);
        Some(ClientId4::from(i))
    }

    fn holds_anything(&self, st: &State4, id: ClientId4) -> bool {
        st.locks.ranges.count_for(id) > 0
            || self.blocked.iter().any(|w| w.owner.clientid == id)
            || self.shares.iter().any(|s| s.owner.clientid == id)
    }

    /// Forgets a host that holds nothing any more (keeps the host table small).
    fn forget_idle_host(&mut self, st: &State4, name: &CallerName) {
        if let Some(&i) = self.hosts.get(&name.0) {
            if !self.holds_anything(st, ClientId4::from(i))
                && !self
                    .granted
                    .values()
                    .any(|(_, o, _)| o.clientid == u64::from(i))
            {
                self.hosts.remove(&name.0);
            }
        }
    }

    fn cookie(&mut self) -> Bytes {
        let c = self.next_cookie;
        self.next_cookie += 1;
        Bytes::copy_from_slice(&c.to_be_bytes())
    }
}

impl State4 {
    /// Whether `other`'s lock may be broken for an NLM request: a v4 courtesy client's, or one
    /// whose lease ran out (as for a v4 LOCK). NLM hosts have no leases: theirs never.
    fn nlm_may_break(&self, now: Instant, other: ClientId4) -> bool {
        !is_nlm_owner(other)
            && self
                .clients
                .get(other)
                .is_ok_and(|r| r.courtesy_since.is_some() || r.lease_expired(now, self.cfg.lease))
    }

    /// Expires the v4 courtesy clients whose locks conflict, unless a live lock conflicts:
    /// then nothing changes and that lock is returned.
    fn nlm_break_courtesy(
        &mut self,
        now: Instant,
        file: &[u8],
        owner: &Owner,
        kind: LockKind,
        range: Range,
    ) -> Result<(), Lock> {
        let conflicts = self.locks.ranges.conflicts(file, owner, kind, range);
        if let Some(l) = conflicts
            .iter()
            .find(|l| !self.nlm_may_break(now, l.owner.clientid))
        {
            return Err((*l).clone());
        }
        let mut gone: Vec<ClientId4> = conflicts.iter().map(|l| l.owner.clientid).collect();
        gone.sort_unstable();
        gone.dedup();
        for c in gone {
            self.expire(c);
        }
        Ok(())
    }
}

/// The table's owner for an NLM (host, svid, oh) (module notes).
fn owner_of(host: ClientId4, svid: u32, oh: &Netobj) -> Owner {
    let mut b = BytesMut::with_capacity(4 + oh.len());
    b.put_u32(svid);
    b.put_slice(oh);
    Owner {
        clientid: host,
        owner: b.freeze(),
    }
}

/// `nlm4_holder` for a conflicting lock: an NLM owner's svid and oh as it sent them; a v4
/// owner's bytes as the oh, svid 0.
fn holder(l: &Lock) -> Nlm4Holder {
    let (svid, oh) = if is_nlm_owner(l.owner.clientid) && l.owner.owner.len() >= 4 {
        let b = &l.owner.owner;
        (u32::from_be_bytes([b[0], b[1], b[2], b[3]]), b.slice(4..))
    } else {
        let b = &l.owner.owner;
        (0, b.slice(..b.len().min(MAXNETOBJ_SZ)))
    };
    let l_len = if l.range.last == u64::MAX {
        0
    } else {
        l.range.last - l.range.first + 1
    };
    Nlm4Holder {
        exclusive: l.kind == LockKind::Write,
        svid,
        oh: Netobj(oh),
        l_offset: l.range.first,
        l_len,
    }
}

/// The range of an NLM `(l_offset, l_len)`: a length of 0 is "to the end of the file", as
/// is one whose end would pass 2^64 (POSIX clamps such a length the same way).
pub fn range_of(offset: u64, len: u64) -> Range {
    let last = match len {
        0 => u64::MAX,
        n => offset.saturating_add(n - 1),
    };
    Range {
        first: offset,
        last,
    }
}

fn kind_of(exclusive: bool) -> LockKind {
    if exclusive {
        LockKind::Write
    } else {
        LockKind::Read
    }
}

#[cfg(test)]
mod tests;
