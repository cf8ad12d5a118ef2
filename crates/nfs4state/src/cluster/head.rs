//! One head's side of the cluster grace: a state machine that reads the shared record,
//! decides, and asks its driver to write the record back only if nobody changed it since.
//!
//! # The shape
//! Like the other cores here it does no I/O. The driver feeds it what happened
//! (`handle_*`), drains what to do ([`Head::poll_action`]) in order, and calls
//! [`Head::handle_timeout`] at [`Head::poll_timeout`]. At most one read or write of the record
//! is in flight; every decision is taken on the last record read and leads to one
//! conditional write of the whole record (ganesha's read-modify-write with
//! `rados_write_op_assert_version`). A conflict means another head wrote first: read again,
//! decide again. Because each decision is recomputed from the record, a head that loses a race
//! simply finds the other head's change and builds on it.
//!
//! # What a head decides, in order, on the record it last read
//! ```text
//!  1 join      my entry absent           ─▶ add me: ENFORCING if a grace is in force, else 0
//!              my entry present          ─▶ I restarted: my old clients may reclaim:
//!                                           NEED|ENFORCING, start a grace if none (R=C, C+=1)
//!              my entry has a carrier    ─▶ wait: a survivor is serving my old clients
//!  2 fenced    joined, and my entry is gone or carried ─▶ Fenced: stop serving (I was
//!              declared dead; the file system has dropped or will drop my session)
//!  3 takeover  a head, or a head's carrier, not heard from for `dead_after` ─▶ carry it:
//!              its entry NEED|ENFORCING with me as carrier, mine NEED|ENFORCING, start a
//!              grace if none; then read its client records (ReadClientRecords)
//!  4 enforce   R ≠ 0 ─▶ record my clients under the new C (WriteClientRecords), refuse new
//!              state (Enforce(true)), then set my ENFORCING flag (in that order: the flag
//!              promises what the head already does)
//!  5 lift      my reclaims are done (or their deadline passed), every head ENFORCING ─▶
//!              clear my NEED, drop the entries I carry; no NEED left ─▶ R = 0
//!  6 normal    R = 0 ─▶ clear my ENFORCING, then, once that is in the record,
//!              Enforce(false) (the flag never claims more than the head does)
//!  ── when the record needs none of that ──
//!  7 admit     R ≠ 0, every head ENFORCING, I have NEED ─▶ OpenSession (restarted: my
//!              previous session goes with it) and StartReclaim(head) for each head I carry,
//!              then AdmitReclaims: the file system may release the old sessions' locks now
//!              that nobody hands out new state
//!  8 session   joined afresh (no old clients) ─▶ OpenSession
//! ```
//!
//! # The file-system session and its identity
//! On CephFS a head's session carries a uuid, and `ceph_start_reclaim(uuid)` on a new client
//! evicts whatever session holds that uuid. So a head opens its own session
//! ([`Action::OpenSession`]: reclaim-reset its uuid, tag the new session, mount) only at a
//! point where evicting its predecessor is safe, steps 7 and 8, and never while its entry is
//! carried: the carrier's StartReclaim of that head would evict the new session too. A carrier
//! evicts a dead head's session from a client of its own made for that call alone, and takes
//! the reclaimed locks in its own session, so nothing of the dead head's identity lives on
//! once the carrier lifts and the head may join again.
//! Step 7 is the file-system guarantee of ganesha's design: a dead head's locks are released
//! only once every head refuses new state, so no new lock can slip in before the owners
//! reclaim. Step 5's "every head ENFORCING" is ganesha's lift rule for the same reason.
//!
//! # Failure detection
//! Each head asks its driver to send a heartbeat every `heartbeat_interval`
//! ([`Action::Heartbeat`]; over RADOS a notify on the grace object, or the watch itself) and
//! reports the others' ([`Head::handle_heartbeat`]). A head unheard for `dead_after` is dead;
//! the first survivor whose conditional write lands carries it. A head first seen in the
//! record is given a full `dead_after` from then, and so is every head when this one's timer
//! fires more than an interval late (this head was stalled: the silence was its own, and a
//! stalled head that judged the others on it would take over live heads). The driver also
//! re-reads the record at every heartbeat, so a lost change notification costs at most one
//! interval.
//!
//! A head declared dead while alive (stalled, or cut off) is not trusted to notice: the
//! carrier's StartReclaim evicts its file-system session (Ceph blocklists it), so it can
//! neither keep nor take a lock, and it stops ([`Action::Fenced`]) when it next reads the
//! record.
//!
//! # Client records
//! A head records its clients (the owners that may reclaim, [`crate::recovery::records`])
//! under `rec-<epoch>:<head>`, the epoch being the C it last saw. A head carried by another
//! has its clients in its record of R (it died before the grace) or of C (it had copied them
//! when the grace began), so [`Action::ReadClientRecords`] names both; the carrier adds them to
//! its own clients, so that if it dies in turn the next carrier finds them in its records.

use crate::cluster::record::{Entry, Flags, GraceRecord, HeadId, RecordError};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

/// A head's settings.
#[derive(Debug, Clone)]
pub struct HeadConfig {
    /// This head's node id.
    pub me: HeadId,
    /// How often to send a heartbeat and re-read the record. Default 1 s.
    pub heartbeat_interval: Duration,
    /// Silence after which a head is dead and carried. Default 5 s: five missed heartbeats,
    /// far below the 90 s a Linux client waits out in a single server's grace, and above the
    /// pauses a loaded head shows (a missed beat is not a death).
    pub dead_after: Duration,
    /// The longest a head waits for the clients it admitted to reclaim before it lifts its
    /// NEED anyway (the stragglers get NFS4ERR_NO_GRACE). Default 90 s, knfsd's grace.
    pub reclaim_max: Duration,
}

impl HeadConfig {
    pub fn new(me: HeadId) -> Self {
        Self {
            me,
            heartbeat_interval: Duration::from_secs(1),
            dead_after: Duration::from_secs(5),
            reclaim_max: Duration::from_secs(90),
        }
    }
}

/// What the driver is to do, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Read the grace record with its version; answer with [`Head::handle_read`].
    ReadRecord,
    /// Write the grace record only if it is still at `version`; answer with
    /// [`Head::handle_write`].
    WriteRecord { version: u64, data: Vec<u8> },
    /// From now on record this head's clients under `epoch`, writing the current set there
    /// before anything after this action.
    WriteClientRecords { epoch: u64 },
    /// Read `head`'s client records of these epochs and add their clients to this head's
    /// clients and to those that may reclaim here.
    ReadClientRecords { head: HeadId, epochs: [u64; 2] },
    /// Start (true) or stop refusing new state with NFS4ERR_GRACE.
    Enforce(bool),
    /// Tell the file system to release the state `head`'s session holds (on CephFS:
    /// `ceph_start_reclaim` with its uuid in RESET mode, then `ceph_finish_reclaim`, from a
    /// client made for that call). Every head enforces. Never names this head.
    StartReclaim { head: HeadId },
    /// Open this head's own file-system session under its identity, releasing the state its
    /// previous session held (on CephFS: reclaim-reset its uuid, set it, mount). Before this
    /// the head serves no file operation. Once per [`Head`].
    OpenSession,
    /// Admit reclaims from the clients read so far; report with [`Head::reclaims_done`] when
    /// each has sent RECLAIM_COMPLETE or expired. A later generation replaces an earlier one.
    AdmitReclaims { generation: u64 },
    /// Refuse reclaims from now on (NFS4ERR_NO_GRACE).
    EndReclaims,
    /// Send a heartbeat to the other heads.
    Heartbeat,
    /// This head was declared dead by the others: stop serving.
    Fenced,
}

/// The answer to a conditional write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteResult {
    Written { version: u64 },
    Conflict,
}

/// What the stats show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadStatus {
    pub record: Option<GraceRecord>,
    pub enforcing: bool,
    pub reclaiming: bool,
    pub fenced: bool,
    /// Heads this head carries now.
    pub carrying: Vec<HeadId>,
    /// The last cluster grace this head saw begin, and why.
    pub last_grace: Option<GraceSeen>,
}

/// A cluster grace as one head saw it (for the stats: why it started, when it ended).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraceSeen {
    /// Its recovery epoch R.
    pub recovery: u64,
    /// When this head first saw it in force.
    pub seen: Instant,
    /// Why, as the record told it when first seen: the heads with NEED then, each with its
    /// carrier (a head taken over) or none (a head that restarted, or one that carries).
    pub needing: Vec<(HeadId, Option<HeadId>)>,
    /// When this head saw R = 0 again.
    pub ended: Option<Instant>,
    /// This head's own reclaims ended by `reclaim_max` rather than by its clients.
    pub deadline_hit: bool,
}

/// One head's cluster-grace state machine (module notes).
#[derive(Debug)]
pub struct Head {
    cfg: HeadConfig,
    /// The record last read or written, with its version.
    view: Option<(u64, GraceRecord)>,
    /// A read or write is in flight; the record written, if a write.
    in_flight: Option<Option<GraceRecord>>,
    /// A notification came while a request was in flight: read again after it.
    reread: bool,
    joined: bool,
    fenced: bool,
    /// My old clients may reclaim (I restarted with my entry present).
    own_need: bool,
    /// Heads whose client records were read (ReadClientRecords) in this grace.
    read_from: BTreeSet<HeadId>,
    /// Heads whose file-system state was released and whose clients were admitted.
    admitted: BTreeSet<HeadId>,
    generation: u64,
    /// The driver reported the reclaims of `generation` done, or their deadline passed.
    reclaims_over: bool,
    reclaim_deadline: Option<Instant>,
    enforcing: bool,
    session_opened: bool,
    records_epoch: u64,
    last_seen: BTreeMap<HeadId, Instant>,
    /// The uncarried heads of the record last decided on.
    live_seen: BTreeSet<HeadId>,
    last_grace: Option<GraceSeen>,
    next_beat: Instant,
    actions: VecDeque<Action>,
}

impl Head {
    /// A head starting at `now`; its first action reads the record.
    pub fn new(cfg: HeadConfig, now: Instant) -> Self {
        let mut h = Self {
            next_beat: now,
            cfg,
            view: None,
            in_flight: None,
            reread: false,
            joined: false,
            fenced: false,
            own_need: false,
            read_from: BTreeSet::new(),
            admitted: BTreeSet::new(),
            generation: 0,
            reclaims_over: false,
            reclaim_deadline: None,
            enforcing: false,
            session_opened: false,
            records_epoch: 0,
            last_seen: BTreeMap::new(),
            live_seen: BTreeSet::new(),
            last_grace: None,
            actions: VecDeque::new(),
        };
        // Until the record says otherwise a starting head refuses new state: it may be
        // joining a grace.
        h.enforcing = true;
        h.actions.push_back(Action::Enforce(true));
        h.read();
        h
    }

    /// The next thing to do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When to call [`Head::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.fenced {
            return None;
        }
        let mut t = self.next_beat;
        if let Some(d) = self.reclaim_deadline {
            t = t.min(d);
        }
        if let Some((_, rec)) = &self.view {
            for (h, e) in &rec.heads {
                if *h != self.cfg.me && e.carrier.is_none() {
                    if let Some(seen) = self.last_seen.get(h) {
                        t = t.min(*seen + self.cfg.dead_after);
                    }
                }
            }
        }
        Some(t)
    }

    /// The record as read: its version and bytes (`None`: there is none, version 0).
    /// A record that does not decode is left alone and read again at the next heartbeat.
    pub fn handle_read(
        &mut self,
        now: Instant,
        version: u64,
        data: Option<&[u8]>,
    ) -> Result<(), RecordError> {
        self.in_flight = None;
        let rec = match data {
            None => GraceRecord::default(),
            Some(d) => GraceRecord::decode(d)?,
        };
        self.view = Some((version, rec));
        self.after_io(now);
        Ok(())
    }

    /// The answer to the last [`Action::WriteRecord`].
    pub fn handle_write(&mut self, now: Instant, r: WriteResult) {
        let written = self.in_flight.take().flatten();
        match (r, written) {
            (WriteResult::Written { version }, Some(rec)) => {
                if rec
                    .heads
                    .get(&self.cfg.me)
                    .is_some_and(|e| e.carrier.is_none())
                {
                    self.joined = true;
                }
                self.view = Some((version, rec));
                self.after_io(now);
            }
            _ => self.read(),
        }
    }

    /// The record changed (a watch notification): read it again.
    pub fn handle_notify(&mut self) {
        if self.in_flight.is_some() {
            self.reread = true;
        } else {
            self.read();
        }
    }

    /// A heartbeat from `head`.
    pub fn handle_heartbeat(&mut self, now: Instant, head: &HeadId) {
        self.last_seen.insert(head.clone(), now);
    }

    /// The clients admitted in `generation` have all sent RECLAIM_COMPLETE or expired.
    pub fn reclaims_done(&mut self, now: Instant, generation: u64) {
        if generation == self.generation && !self.admitted.is_empty() && !self.reclaims_over {
            self.reclaims_over = true;
            self.reclaim_deadline = None;
            self.actions.push_back(Action::EndReclaims);
            self.decide(now);
        }
    }

    /// Heartbeats, the periodic re-read, a dead head, the reclaim deadline.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.fenced {
            return;
        }
        if now >= self.next_beat {
            if now > self.next_beat + self.cfg.heartbeat_interval {
                // Woken more than an interval late: this head was stalled, and the silence
                // it would see is its own. Judge the others afresh from now.
                for seen in self.last_seen.values_mut() {
                    *seen = (*seen).max(now);
                }
            }
            self.next_beat = now + self.cfg.heartbeat_interval;
            self.actions.push_back(Action::Heartbeat);
            self.handle_notify();
        }
        if self.reclaim_deadline.is_some_and(|d| now >= d) {
            self.reclaim_deadline = None;
            self.reclaims_over = true;
            if let Some(g) = &mut self.last_grace {
                g.deadline_hit = true;
            }
            self.actions.push_back(Action::EndReclaims);
        }
        self.decide(now);
    }

    /// Whether the head refuses new state now.
    pub fn enforcing(&self) -> bool {
        self.enforcing
    }

    /// Whether the head was declared dead by the others.
    pub fn fenced(&self) -> bool {
        self.fenced
    }

    /// What the stats show.
    pub fn status(&self) -> HeadStatus {
        let record = self.view.as_ref().map(|(_, r)| r.clone());
        HeadStatus {
            carrying: record
                .as_ref()
                .map(|r| self.carried(r).into_iter().collect())
                .unwrap_or_default(),
            record,
            enforcing: self.enforcing,
            reclaiming: !self.admitted.is_empty() && !self.reclaims_over,
            fenced: self.fenced,
            last_grace: self.last_grace.clone(),
        }
    }

    /// Notes a grace's start or end as the record `rec` shows it.
    fn observe_grace(&mut self, now: Instant, rec: &GraceRecord) {
        let current = self.last_grace.as_ref().filter(|g| g.ended.is_none());
        match (rec.in_grace(), current) {
            (true, Some(g)) if g.recovery == rec.recovery => {}
            (true, _) => {
                self.last_grace = Some(GraceSeen {
                    recovery: rec.recovery,
                    seen: now,
                    needing: rec
                        .heads
                        .iter()
                        .filter(|(_, e)| e.flags.has(Flags::NEED))
                        .map(|(h, e)| (h.clone(), e.carrier.clone()))
                        .collect(),
                    ended: None,
                    deadline_hit: false,
                })
            }
            (false, Some(_)) => {
                if let Some(g) = &mut self.last_grace {
                    g.ended = Some(now);
                }
            }
            (false, None) => {}
        }
    }

    fn read(&mut self) {
        self.in_flight = Some(None);
        self.reread = false;
        self.actions.push_back(Action::ReadRecord);
    }

    fn after_io(&mut self, now: Instant) {
        if self.reread {
            self.read();
        } else {
            self.decide(now);
        }
    }

    fn carried(&self, rec: &GraceRecord) -> BTreeSet<HeadId> {
        rec.heads
            .iter()
            .filter(|(_, e)| e.carrier.as_ref() == Some(&self.cfg.me))
            .map(|(h, _)| h.clone())
            .collect()
    }

    fn dead(&self, now: Instant, h: &HeadId) -> bool {
        *h != self.cfg.me
            && self
                .last_seen
                .get(h)
                .is_some_and(|seen| now >= *seen + self.cfg.dead_after)
    }

    /// The table of the module notes, on the last record.
    fn decide(&mut self, now: Instant) {
        if self.fenced || self.in_flight.is_some() {
            return;
        }
        let Some((version, rec)) = self.view.clone() else {
            return;
        };
        let me = self.cfg.me.clone();
        // A head that (re)appears uncarried gets a full `dead_after` from now: its last
        // heartbeat may be from an earlier life.
        let live: BTreeSet<HeadId> = rec
            .heads
            .iter()
            .filter(|(_, e)| e.carrier.is_none())
            .map(|(h, _)| h.clone())
            .collect();
        for h in live.difference(&self.live_seen) {
            let t = self.last_seen.entry(h.clone()).or_insert(now);
            *t = (*t).max(now);
        }
        self.live_seen = live;
        self.observe_grace(now, &rec);
        let mut want = rec.clone();
        let mine = rec.heads.get(&me).cloned();

        // 1 join, 2 fenced.
        if !self.joined {
            match &mine {
                Some(e) if e.carrier.is_some() => return,
                Some(_) => {
                    want.start_grace();
                    self.own_need = true;
                    self.read_client_records(me.clone(), &want);
                    want.heads.insert(me.clone(), need_enforcing(None));
                }
                None => {
                    let mut flags = Flags::default();
                    flags.set(Flags::ENFORCING, want.in_grace());
                    want.heads.insert(
                        me.clone(),
                        Entry {
                            flags,
                            carrier: None,
                        },
                    );
                }
            }
        } else if mine.as_ref().is_none_or(|e| e.carrier.is_some()) {
            self.fenced = true;
            self.actions.push_back(Action::Fenced);
            return;
        }

        // 3 takeover: a silent head, or one whose carrier is silent.
        let orphans: Vec<HeadId> = want
            .heads
            .iter()
            .filter(|(h, e)| match &e.carrier {
                None => self.dead(now, h),
                Some(c) => *c != me && (self.dead(now, c) || !want.heads.contains_key(c)),
            })
            .map(|(h, _)| h.clone())
            .collect();
        if !orphans.is_empty() && self.joined {
            want.start_grace();
            for h in &orphans {
                want.heads
                    .insert(h.clone(), need_enforcing(Some(me.clone())));
            }
            if let Some(e) = want.heads.get_mut(&me) {
                e.flags.set(Flags::NEED, true);
                e.flags.set(Flags::ENFORCING, true);
            }
        }

        // 4 enforce.
        if want.in_grace() {
            if self.records_epoch != want.current {
                self.records_epoch = want.current;
                self.actions.push_back(Action::WriteClientRecords {
                    epoch: want.current,
                });
            }
            if !self.enforcing {
                self.enforcing = true;
                self.actions.push_back(Action::Enforce(true));
            }
            if let Some(e) = want.heads.get_mut(&me) {
                e.flags.set(Flags::ENFORCING, true);
            }
        }

        // 5 lift: only what was admitted, only once everyone enforces.
        let carried = self.carried(&want);
        let mut to_admit = carried.clone();
        if self.own_need {
            to_admit.insert(me.clone());
        }
        if want.in_grace()
            && self.reclaims_over
            && to_admit.is_subset(&self.admitted)
            && want.all_enforcing()
            && rec == want
        {
            for h in &carried {
                want.heads.remove(h);
            }
            if let Some(e) = want.heads.get_mut(&me) {
                e.flags.set(Flags::NEED, false);
            }
            if !want.any_need() {
                want.recovery = 0;
            }
        }

        // 6 normal, on a record read with R = 0 only: after my own lift has landed, not
        // before (a lost race would leave the grace in force and my reclaim state gone).
        if !rec.in_grace() && !want.in_grace() {
            self.end_grace_locally();
            if self.records_epoch != want.current {
                self.records_epoch = want.current;
                self.actions.push_back(Action::WriteClientRecords {
                    epoch: want.current,
                });
            }
            // The flag goes first, local refusal after, once a record without my flag has
            // been read or written: a flag must never claim more than the head does, or a
            // grace starting in between would find a stale ENFORCING and release a dead
            // head's locks while this head still grants new ones. (The same rule makes a
            // head starting afresh serve only once its entry is in the record, so that every
            // grace from then on waits for its flag.)
            if let Some(e) = want.heads.get_mut(&me) {
                e.flags.set(Flags::ENFORCING, false);
            }
            let flag_cleared = rec
                .heads
                .get(&me)
                .is_some_and(|e| !e.flags.has(Flags::ENFORCING));
            if self.enforcing && self.joined && flag_cleared {
                self.enforcing = false;
                self.actions.push_back(Action::Enforce(false));
            }
        }

        if want != rec {
            self.in_flight = Some(Some(want.clone()));
            self.actions.push_back(Action::WriteRecord {
                version,
                data: want.encode(),
            });
            return;
        }
        self.joined = true;

        // Read the client records of heads carried since the last look (their entries are
        // ours now: the write that made them so has landed).
        for h in &carried {
            if !self.read_from.contains(h) {
                self.read_client_records(h.clone(), &want);
            }
        }

        // 8 session (before 7: a head carrying others needs its session to take their locks).
        if !self.own_need {
            self.open_session();
        }

        // 7 admit.
        let mine_need = want
            .heads
            .get(&me)
            .is_some_and(|e| e.flags.has(Flags::NEED));
        let new: Vec<HeadId> = to_admit.difference(&self.admitted).cloned().collect();
        if want.in_grace() && want.all_enforcing() && mine_need && !new.is_empty() {
            for h in new {
                if h == me {
                    self.open_session();
                } else {
                    self.actions
                        .push_back(Action::StartReclaim { head: h.clone() });
                }
                self.admitted.insert(h);
            }
            self.generation += 1;
            self.reclaims_over = false;
            self.reclaim_deadline = Some(now + self.cfg.reclaim_max);
            self.actions.push_back(Action::AdmitReclaims {
                generation: self.generation,
            });
        }
    }

    fn open_session(&mut self) {
        if !self.session_opened {
            self.session_opened = true;
            self.actions.push_back(Action::OpenSession);
        }
    }

    fn read_client_records(&mut self, head: HeadId, rec: &GraceRecord) {
        self.read_from.insert(head.clone());
        // Before the grace the clients were under C; once it started, R is the old C.
        let epochs = if rec.in_grace() {
            [rec.recovery, rec.current]
        } else {
            [rec.current, rec.current]
        };
        self.actions
            .push_back(Action::ReadClientRecords { head, epochs });
    }

    /// R is 0: this head's part in the last grace is over.
    fn end_grace_locally(&mut self) {
        if !self.admitted.is_empty() && !self.reclaims_over {
            self.actions.push_back(Action::EndReclaims);
        }
        self.own_need = false;
        self.read_from.clear();
        self.admitted.clear();
        self.reclaims_over = false;
        self.reclaim_deadline = None;
    }
}

fn need_enforcing(carrier: Option<HeadId>) -> Entry {
    Entry {
        flags: Flags(Flags::NEED.0 | Flags::ENFORCING.0),
        carrier,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::record::GRACE_RECORD;
    use crate::store::{MemStore, PutIf, StateStore};

    /// Heads over one memory store, run to quiescence after each event; each head's actions
    /// are logged so tests can check their order.
    struct Net {
        store: MemStore,
        heads: BTreeMap<&'static str, Head>,
        alive: BTreeSet<&'static str>,
        log: Vec<(&'static str, Action)>,
        done_pending: Vec<(&'static str, u64)>,
        now: Instant,
    }

    impl Net {
        fn new(names: &[&'static str]) -> Self {
            let now = Instant::now();
            let mut n = Self {
                store: MemStore::default(),
                heads: BTreeMap::new(),
                alive: BTreeSet::new(),
                log: Vec::new(),
                done_pending: Vec::new(),
                now,
            };
            for name in names {
                n.start(name);
            }
            n.settle();
            n
        }

        fn start(&mut self, name: &'static str) {
            let cfg = HeadConfig::new(HeadId::new(name).unwrap());
            self.heads.insert(name, Head::new(cfg, self.now));
            self.alive.insert(name);
        }

        fn kill(&mut self, name: &'static str) {
            self.alive.remove(name);
            self.heads.remove(name);
        }

        fn settle(&mut self) {
            for _ in 0..1000 {
                let mut any = false;
                let names: Vec<_> = self.alive.iter().copied().collect();
                for name in names {
                    while let Some(a) = self.heads.get_mut(name).unwrap().poll_action() {
                        any = true;
                        self.run(name, a);
                    }
                }
                if !any {
                    return;
                }
            }
            panic!("no quiescence");
        }

        fn run(&mut self, name: &'static str, a: Action) {
            self.log.push((name, a.clone()));
            let now = self.now;
            match a {
                Action::ReadRecord => {
                    let v = self.store.get_versioned(GRACE_RECORD, 4096).unwrap();
                    let h = self.heads.get_mut(name).unwrap();
                    h.handle_read(now, v.version, v.data.as_deref()).unwrap();
                }
                Action::WriteRecord { version, data } => {
                    let r = match self.store.put_if_version(GRACE_RECORD, version, &data) {
                        Ok(PutIf::Written(version)) => WriteResult::Written { version },
                        _ => WriteResult::Conflict,
                    };
                    self.heads.get_mut(name).unwrap().handle_write(now, r);
                    if matches!(r, WriteResult::Written { .. }) {
                        for other in self.alive.clone() {
                            if other != name {
                                self.heads.get_mut(other).unwrap().handle_notify();
                            }
                        }
                    }
                }
                Action::Heartbeat => {
                    let id = HeadId::new(name).unwrap();
                    for other in self.alive.clone() {
                        if other != name {
                            self.heads
                                .get_mut(other)
                                .unwrap()
                                .handle_heartbeat(now, &id);
                        }
                    }
                }
                Action::AdmitReclaims { generation } => self.done_pending.push((name, generation)),
                _ => {}
            }
        }

        /// Advances virtual time by `secs`, a tick a second.
        fn advance(&mut self, secs: u64) {
            for _ in 0..secs {
                self.now += Duration::from_secs(1);
                for name in self.alive.clone() {
                    self.heads.get_mut(name).unwrap().handle_timeout(self.now);
                }
                self.settle();
            }
        }

        fn finish_reclaims(&mut self) {
            for (name, generation) in std::mem::take(&mut self.done_pending) {
                if let Some(h) = self.heads.get_mut(name) {
                    h.reclaims_done(self.now, generation);
                }
            }
            self.settle();
        }

        fn record(&self) -> GraceRecord {
            GraceRecord::decode(&self.store.get(GRACE_RECORD, 4096).unwrap().unwrap()).unwrap()
        }

        fn position(&self, name: &str, pred: impl Fn(&Action) -> bool) -> Option<usize> {
            self.log.iter().position(|(n, a)| *n == name && pred(a))
        }
    }

    fn drain(h: &mut Head) -> Vec<Action> {
        std::iter::from_fn(|| h.poll_action()).collect()
    }

    fn rec(current: u64, recovery: u64, heads: &[(&str, u8)]) -> GraceRecord {
        GraceRecord {
            current,
            recovery,
            heads: heads
                .iter()
                .map(|(h, f)| {
                    (
                        HeadId::new(h).unwrap(),
                        Entry {
                            flags: Flags(*f),
                            carrier: None,
                        },
                    )
                })
                .collect(),
        }
    }

    fn written(actions: &[Action]) -> Option<GraceRecord> {
        actions.iter().find_map(|a| match a {
            Action::WriteRecord { data, .. } => Some(GraceRecord::decode(data).unwrap()),
            _ => None,
        })
    }

    /// Regression (found by the simulation): a head that stopped enforcing when the grace
    /// ended, before clearing its flag, left a stale ENFORCING in the record; a grace starting
    /// in between counted it and released a dead head's locks while this head granted new ones.
    #[test]
    fn a_head_stops_enforcing_only_once_its_flag_is_cleared_in_the_record() {
        let t = Instant::now();
        let mut a = Head::new(HeadConfig::new(HeadId::new("a").unwrap()), t);
        drain(&mut a);
        let start = rec(2, 1, &[("b", 3)]);
        a.handle_read(t, 1, Some(&start.encode())).unwrap();
        let join = written(&drain(&mut a)).unwrap();
        assert_eq!(
            join.heads[&HeadId::new("a").unwrap()].flags,
            Flags::ENFORCING
        );
        a.handle_write(t, WriteResult::Written { version: 2 });
        drain(&mut a);
        assert!(a.enforcing());

        let lifted = rec(2, 0, &[("a", 2), ("b", 2)]);
        a.handle_read(t, 3, Some(&lifted.encode())).unwrap();
        let acts = drain(&mut a);
        let w = written(&acts).expect("the flag is cleared first");
        assert_eq!(w.heads[&HeadId::new("a").unwrap()].flags, Flags::default());
        assert!(!acts.contains(&Action::Enforce(false)), "{acts:?}");
        assert!(a.enforcing());
        a.handle_write(t, WriteResult::Written { version: 4 });
        assert!(drain(&mut a).contains(&Action::Enforce(false)));
        assert!(!a.enforcing());
    }

    /// Regression (found by the simulation): a head that stopped enforcing on its own lift
    /// before the write landed lost the race, stayed in a grace still in force, and had
    /// forgotten that its reclaims were done, so it never lifted.
    #[test]
    fn a_lift_that_loses_a_race_is_made_again_and_enforcement_holds_meanwhile() {
        let t = Instant::now();
        let me = HeadId::new("a").unwrap();
        let mut a = Head::new(HeadConfig::new(me.clone()), t);
        drain(&mut a);
        a.handle_read(t, 1, Some(&rec(1, 0, &[("a", 0)]).encode()))
            .unwrap();
        let join = written(&drain(&mut a)).unwrap();
        assert_eq!(
            (join.current, join.recovery),
            (2, 1),
            "a restart starts a grace"
        );
        a.handle_write(t, WriteResult::Written { version: 2 });
        let acts = drain(&mut a);
        assert!(acts.contains(&Action::OpenSession));
        assert!(acts.contains(&Action::AdmitReclaims { generation: 1 }));

        a.reclaims_done(t, 1);
        let acts = drain(&mut a);
        let lift = written(&acts).unwrap();
        assert_eq!(lift.recovery, 0);
        assert!(!acts.contains(&Action::Enforce(false)));
        a.handle_write(t, WriteResult::Conflict);
        assert_eq!(drain(&mut a), vec![Action::ReadRecord]);
        assert!(a.enforcing(), "the grace is still in force");

        // b joined meanwhile (enforcing, as a grace is in force).
        a.handle_read(t, 3, Some(&rec(2, 1, &[("a", 3), ("b", 2)]).encode()))
            .unwrap();
        let again = written(&drain(&mut a)).expect("the lift is made again");
        assert_eq!(again.recovery, 0);
        assert_eq!(again.heads[&me].flags, Flags::ENFORCING);
    }

    #[test]
    fn fresh_heads_join_without_a_grace_and_serve() {
        let mut n = Net::new(&["a", "b"]);
        n.advance(2);
        let r = n.record();
        assert_eq!((r.current, r.recovery), (1, 0));
        assert_eq!(r.heads.len(), 2);
        assert!(r.heads.values().all(|e| e.flags == Flags::default()));
        assert!(!n.heads["a"].enforcing() && !n.heads["b"].enforcing());
    }

    #[test]
    fn a_silent_head_is_taken_over_and_its_locks_released_only_once_all_enforce() {
        let mut n = Net::new(&["a", "b", "c"]);
        n.advance(2);
        n.kill("a");
        n.log.clear();
        n.advance(4);
        assert!(
            !n.record().in_grace(),
            "four silent seconds are not a death"
        );
        n.advance(2);
        let r = n.record();
        assert!(r.in_grace(), "{r:?}");
        let carrier = r.heads[&HeadId::new("a").unwrap()].carrier.clone().unwrap();
        let carrier: &'static str = if carrier.as_str() == "b" { "b" } else { "c" };
        let other = if carrier == "b" { "c" } else { "b" };
        let start = n
            .position(
                carrier,
                |a| matches!(a, Action::StartReclaim { head } if head.as_str() == "a"),
            )
            .expect("the carrier releases a's file-system state");
        let other_enforces = n
            .position(other, |a| matches!(a, Action::Enforce(true)))
            .expect("the other survivor enforces");
        assert!(
            other_enforces < start,
            "released before every head enforced"
        );
        let read = n
            .position(
                carrier,
                |a| matches!(a, Action::ReadClientRecords { head, .. } if head.as_str() == "a"),
            )
            .unwrap();
        let admit = n
            .position(carrier, |a| matches!(a, Action::AdmitReclaims { .. }))
            .unwrap();
        assert!(read < start && start < admit);
        assert!(
            n.heads[other].enforcing(),
            "new state refused everywhere in grace"
        );

        let seen = n.heads[other].status().last_grace.unwrap();
        assert_eq!(
            seen.needing,
            vec![
                (
                    HeadId::new("a").unwrap(),
                    Some(HeadId::new(carrier).unwrap())
                ),
                (HeadId::new(carrier).unwrap(), None),
            ],
            "the stats say a grace began for a takeover of a by {carrier}"
        );
        n.finish_reclaims();
        assert!(n.heads[other].status().last_grace.unwrap().ended.is_some());
        let r = n.record();
        assert_eq!(
            r.recovery, 0,
            "the grace ends once the carrier's clients are done"
        );
        assert!(!r.heads.contains_key(&HeadId::new("a").unwrap()));
        assert!(!n.heads["b"].enforcing() && !n.heads["c"].enforcing());
        assert!(r.heads.values().all(|e| e.flags == Flags::default()));
    }

    #[test]
    fn a_restarted_head_starts_a_grace_and_reclaims_its_own_clients() {
        let mut n = Net::new(&["a", "b"]);
        n.advance(2);
        n.kill("a");
        n.start("a");
        n.log.clear();
        n.settle();
        let r = n.record();
        assert_eq!((r.current, r.recovery), (2, 1));
        assert!(n.heads["b"].enforcing());
        let start = n
            .position("a", |a| *a == Action::OpenSession)
            .expect("the restarted head opens its session, evicting its predecessor's");
        assert!(n
            .position("a", |a| matches!(a, Action::StartReclaim { .. }))
            .is_none());
        let b_enforces = n
            .position("b", |a| matches!(a, Action::Enforce(true)))
            .unwrap();
        assert!(b_enforces < start);
        assert!(matches!(
            n.log
                .iter()
                .find(|(h, a)| *h == "a" && matches!(a, Action::ReadClientRecords { .. })),
            Some((_, Action::ReadClientRecords { epochs: [1, 2], .. }))
        ));
        n.finish_reclaims();
        assert_eq!(n.record().recovery, 0);
        assert!(!n.heads["a"].enforcing() && !n.heads["b"].enforcing());
    }

    #[test]
    fn a_head_restarted_while_carried_waits_for_its_carrier() {
        let mut n = Net::new(&["a", "b"]);
        n.advance(2);
        n.kill("a");
        n.advance(6);
        assert!(n.record().in_grace());
        n.log.clear();
        n.start("a");
        n.advance(2);
        assert!(n.heads["a"].enforcing(), "it serves nobody yet");
        assert!(
            n.position("a", |a| *a == Action::OpenSession).is_none(),
            "no session while carried: the carrier's eviction would take it"
        );
        assert!(n.record().heads[&HeadId::new("a").unwrap()]
            .carrier
            .is_some());
        n.finish_reclaims();
        n.advance(2);
        let r = n.record();
        assert_eq!(r.recovery, 0);
        assert_eq!(
            r.heads[&HeadId::new("a").unwrap()],
            Entry::default(),
            "a joined afresh"
        );
        assert!(!n.heads["a"].enforcing());
        assert!(n.position("a", |a| *a == Action::OpenSession).is_some());
    }

    #[test]
    fn the_reclaim_deadline_lifts_a_grace_whose_clients_never_return() {
        let mut n = Net::new(&["a", "b"]);
        n.advance(2);
        n.kill("a");
        n.advance(5);
        assert!(
            n.record().in_grace(),
            "a's death noticed at 7 s, reclaims admitted then"
        );
        n.advance(89);
        assert!(n.record().in_grace());
        n.advance(2);
        assert_eq!(n.record().recovery, 0);
        assert!(n.position("b", |a| *a == Action::EndReclaims).is_some());
        assert!(n.heads["b"].status().last_grace.unwrap().deadline_hit);
    }

    #[test]
    fn a_carrier_that_dies_passes_its_heads_on() {
        let mut n = Net::new(&["a", "b", "c"]);
        n.advance(2);
        n.kill("a");
        n.advance(6);
        let r = n.record();
        let carrier = r.heads[&HeadId::new("a").unwrap()].carrier.clone().unwrap();
        let (dead, last): (&'static str, &'static str) = if carrier.as_str() == "b" {
            ("b", "c")
        } else {
            ("c", "b")
        };
        n.kill(dead);
        n.log.clear();
        n.advance(6);
        let r = n.record();
        for h in ["a", dead] {
            assert_eq!(
                r.heads[&HeadId::new(h).unwrap()]
                    .carrier
                    .as_ref()
                    .map(|c| c.as_str()),
                Some(last),
                "{r:?}"
            );
            assert!(n
                .position(
                    last,
                    |a| matches!(a, Action::StartReclaim { head } if head.as_str() == h)
                )
                .is_some());
        }
        n.finish_reclaims();
        let r = n.record();
        assert_eq!(r.recovery, 0);
        assert_eq!(r.heads.len(), 1);
    }
}
