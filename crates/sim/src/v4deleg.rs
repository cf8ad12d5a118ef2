//! A delegation recall to a client that never returns it, in virtual time: the real COMPOUND
//! processor (through its one driver loop, [`sluice_server::nfs4::compound::drive`], as the
//! service runs it) and [`State4`] over a `MemFs` export, the back channel driven the way the
//! server's callback task drives it (`poll_callbacks` when woken, `handle_callback` when a
//! call ends), leases ticked at the lease task's rhythm ([`lease::sleep_for`]).
//!
//! # The run
//! ```text
//!  t=0   holder: EXCHANGE_ID, CREATE_SESSION with a back channel, the probe answered;
//!        it creates f, closes it, opens it for reading: a read delegation
//!  T0    writer (another client, no back channel): OPEN f for writing ─▶ NFS4ERR_DELAY,
//!        the server queues CB_RECALL; or (`v3_writer`) an NFSv3 WRITE of f, which passes the
//!        same gate through `sluice_server::recall::RecallGate` ─▶ NFS3ERR_JUKEBOX
//!  T0+d  the callback driver gets to it (d drawn: a busy driver) and sends it; the holder
//!        • never answers (the call times out after callback::CALL_TIMEOUT), or
//!        • answers CB_RECALL OK and never sends DELEGRETURN, or
//!        • answers NFS4ERR_DELAY again and again (the recall is re-queued each time)
//!  ...   the holder renews its lease every third of it (it is alive, just not returning);
//!        the writer retries its OPEN every `retry`
//! ```
//! With `write` (half the seeds), the holder opened f for reading and writing and holds a
//! write delegation instead; before the other client opens f (for reading: a reader conflicts
//! with a write delegation) it stats f:
//! ```text
//!  T0    other: GETATTR(size, change) ─▶ NFS4ERR_DELAY, the server queues CB_GETATTR
//!  T0+d  the driver sends it; the holder answers at once with the size it has cached
//!  ...   other retries every `retry` until the GETATTR is answered: the holder's size,
//!        no recall; then its OPEN ─▶ DELAY, CB_RECALL, and the recall goes as above
//! ```
//!
//! # What must hold
//! - Every OPEN of the writer before `sent + lease` gets NFS4ERR_DELAY: the clock starts when
//!   the recall is sent, never when it is queued (and `d` may be longer than the lease).
//! - The delegation is revoked at the first tick at or after `sent + lease`, and the writer's
//!   next OPEN succeeds: nothing hangs, whatever the holder does.
//! - The holder's SEQUENCE shows SEQ4_STATUS_RECALLABLE_STATE_REVOKED exactly after the
//!   revocation; its READ with the delegation stateid then gets NFS4ERR_DELEG_REVOKED; its
//!   FREE_STATEID clears the flag.
//! - The counters: one recall sent per transmission, one revocation.

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_nfs4state::callback::{CbCall, CbOutcome, CALL_TIMEOUT};
use sluice_nfs4state::{Config4, SplitMix, State4};
use sluice_rpc::server::Credentials;
use sluice_server::backend::exports::{ClientMatch, ClientRule, Squash};
use sluice_server::backend::memfs::MemFsConfig;
use sluice_server::backend::{Export, ExportOptions, MemFs};
use sluice_server::exports::ExportEntry;
use sluice_server::nfs4::compound::{drive_ready, Inline, Nfs4, Outcome, Sender};
use sluice_server::nfs4::lease;
use sluice_server::recall::RecallGate;
use sluice_server::testkit::{Session4, SessionConfig};
use sluice_xdr::nfs4::attrs::{num, AttrValues};
use sluice_xdr::nfs4::callback::{CbArgop4, CbCompound4Res, CbResop4, CbSequenceResOk};
use sluice_xdr::nfs4::compound::{Compound4Args, Compound4Res, CompoundLimits};
use sluice_xdr::nfs4::ops::{
    CallbackSecParms4, CallbackSecParmsList, CloseArgs, Createhow4, NfsArgop4, NfsResop4, OpenArgs,
    OpenClaim4, OpenDelegation4, Openflag4, ReadArgs, Res4, SequenceArgs,
    CREATE_SESSION4_FLAG_CONN_BACK_CHAN, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ,
    OPEN4_SHARE_ACCESS_WRITE, OPEN4_SHARE_WANT_NO_DELEG, SEQ4_STATUS_RECALLABLE_STATE_REVOKED,
};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{
    Bitmap4, Component4, Fattr4, NfsFh4, Opaque4, SessionId4, StateOwner4, Stateid4, Utf8Str,
};
use sluice_xdr::rpc::AuthSys;
use sluice_xdr::{Pack, Reader, Writer};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The size the holder reports in CB_GETATTR (it has written more than the server has).
const HOLDER_SIZE: u64 = 123_456;

/// How the holder treats the CB_RECALL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// Never answers: the driver's call times out.
    Silent,
    /// Answers OK, never returns the delegation.
    AnswersOk,
    /// Answers NFS4ERR_DELAY every time.
    Delays,
}

/// One run's parameters, drawn from its seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegScenario {
    pub seed: u64,
    pub lease: Duration,
    /// From the writer's first OPEN to the moment it tries.
    pub first_open: Duration,
    /// From a wake-up of the callback driver to its poll (a busy driver).
    pub driver_delay: Duration,
    /// The writer's retry interval.
    pub retry: Duration,
    pub holder: Holder,
    /// The writer is an NFSv3 client: its WRITE goes through the recall gate with no client
    /// id (JUKEBOX for DELAY) instead of a v4 OPEN.
    pub v3_writer: bool,
    /// A write delegation, stat by the other client first (module notes).
    pub write: bool,
}

impl DelegScenario {
    pub fn draw(seed: u64) -> Self {
        let mut g = ChaCha8Rng::seed_from_u64(seed ^ 0xde1e);
        let lease = Duration::from_millis(g.gen_range(1_000..=90_000));
        Self {
            seed,
            lease,
            first_open: Duration::from_millis(g.gen_range(0..5_000)),
            // Up to twice the lease: the queue-to-send time must not count.
            driver_delay: Duration::from_millis(g.gen_range(0..=2 * lease.as_millis() as u64)),
            retry: Duration::from_millis(g.gen_range(20..=3_000)),
            holder: match g.gen_range(0..3) {
                0 => Holder::Silent,
                1 => Holder::AnswersOk,
                _ => Holder::Delays,
            },
            // Drawn last: the earlier fields of a seed stay what they were.
            v3_writer: g.gen_bool(0.5),
            write: g.gen_bool(0.5),
        }
    }
}

/// What a run saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DelegReport {
    pub seed: u64,
    /// When the first CB_RECALL went out, and when the writer's OPEN succeeded.
    pub sent_at: Option<Duration>,
    pub open_ok_at: Option<Duration>,
    pub delays: u64,
    pub recalls_sent: u64,
    pub revoked: u64,
    /// When the other client's GETATTR was answered (write delegations).
    pub getattr_ok_at: Option<Duration>,
    pub cb_getattrs: u64,
    pub violations: Vec<String>,
}

impl DelegReport {
    pub fn assert_invariants(&self) {
        assert!(
            self.violations.is_empty(),
            "seed {}: {:#?}",
            self.seed,
            self.violations
        );
    }
}

/// Runs one scenario; `epoch` is where virtual time starts.
pub fn run_deleg(sc: &DelegScenario, epoch: Instant) -> DelegReport {
    let mut w = World::new(sc, epoch);
    w.run();
    w.report
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Tick,
    DriverPoll,
    CbEnd {
        sid: SessionId4,
        token: u64,
        seqid: u32,
        outcome_ok: Option<Nfsstat4>,
    },
    HolderRenew,
    WriterOpen,
    OtherGetattr,
}

struct World<'a> {
    sc: &'a DelegScenario,
    epoch: Instant,
    now: Duration,
    nfs: Arc<Nfs4>,
    cred: Credentials,
    events: BTreeMap<(Duration, u64), Ev>,
    seq: u64,
    woken: Arc<AtomicBool>,
    poll_planned: bool,
    holder: (SessionId4, u32),
    writer: (SessionId4, u32),
    root: NfsFh4,
    fh: NfsFh4,
    deleg: Stateid4,
    revoked_seen: bool,
    report: DelegReport,
}

const HOLDER_CONN: u64 = 1;
const WRITER_CONN: u64 = 2;

impl<'a> World<'a> {
    fn new(sc: &'a DelegScenario, epoch: Instant) -> Self {
        let fs = Arc::new(MemFs::new(MemFsConfig::default()));
        let exports = vec![ExportEntry {
            fs,
            export: Export {
                path: PathBuf::from("/sim"),
                clients: vec![ClientRule {
                    client: ClientMatch::Any,
                    options: ExportOptions {
                        read_only: false,
                        squash: Squash::None,
                        secure: false,
                        ..ExportOptions::default()
                    },
                }],
            },
        }];
        let state = State4::new(
            Config4 {
                lease: sc.lease,
                boot_epoch: 7,
                delegs: sluice_nfs4state::delegations::table::DelegConfig {
                    write: true,
                    ..Default::default()
                },
                ..Config4::default()
            },
            Box::new(SplitMix(sc.seed)),
        );
        let nfs = Arc::new(Nfs4::new(Arc::new(exports), state, 1).expect("one export"));
        let woken = Arc::new(AtomicBool::new(false));
        {
            let w = woken.clone();
            nfs.state
                .lock()
                .unwrap()
                .set_callback_waker(Box::new(move || w.store(true, Ordering::SeqCst)));
        }
        let mut w = World {
            sc,
            epoch,
            now: Duration::ZERO,
            nfs,
            cred: Credentials::Sys(AuthSys {
                stamp: 1,
                machine_name: Bytes::from_static(b"sim"),
                uid: 0,
                gid: 0,
                gids: Vec::new(),
            }),
            events: BTreeMap::new(),
            seq: 0,
            woken,
            poll_planned: false,
            holder: ([0; 16], 1),
            writer: ([0; 16], 1),
            root: NfsFh4(Bytes::new()),
            fh: NfsFh4(Bytes::new()),
            deleg: Stateid4::ANONYMOUS,
            revoked_seen: false,
            report: DelegReport {
                seed: sc.seed,
                ..DelegReport::default()
            },
        };
        w.setup();
        w
    }

    /// The holder with a probed back channel and a read delegation of f; the writer's session.
    fn setup(&mut self) {
        self.holder = self.establish(b"holder", HOLDER_CONN, true);
        self.writer = self.establish(b"writer", WRITER_CONN, false);
        // The probe: CB_NULL, the holder's first SEQUENCE, CB_SEQUENCE.
        self.send(true, vec![]);
        for _ in 0..3 {
            self.poll_now_and_answer_probes();
        }
        let res = self.send(
            true,
            vec![
                NfsArgop4::Putrootfh(()),
                NfsArgop4::Lookup(Component4(Bytes::from_static(b"sim"))),
                NfsArgop4::Getfh(()),
            ],
        );
        let Some(NfsResop4::Getfh(Res4::Ok(root))) = res.results.get(3) else {
            panic!("no export root: {res:?}")
        };
        self.root = root.clone();
        let res = self.send(
            true,
            vec![
                NfsArgop4::Putfh(self.root.clone()),
                // No delegation for the creating open: the one under test comes below.
                open(
                    b"h",
                    OPEN4_SHARE_ACCESS_BOTH | OPEN4_SHARE_WANT_NO_DELEG,
                    true,
                ),
                NfsArgop4::Getfh(()),
            ],
        );
        let (Some(NfsResop4::Open(Res4::Ok(o))), Some(NfsResop4::Getfh(Res4::Ok(fh)))) =
            (res.results.get(2), res.results.get(3))
        else {
            panic!("create: {res:?}")
        };
        self.fh = fh.clone();
        let sid = o.stateid;
        self.send(
            true,
            vec![
                NfsArgop4::Putfh(self.fh.clone()),
                NfsArgop4::Close(CloseArgs {
                    seqid: 0,
                    open_stateid: sid,
                }),
            ],
        );
        let access = match self.sc.write {
            true => OPEN4_SHARE_ACCESS_BOTH,
            false => OPEN4_SHARE_ACCESS_READ,
        };
        let res = self.send(
            true,
            vec![
                NfsArgop4::Putfh(self.root.clone()),
                open(b"h", access, false),
            ],
        );
        match res.results.get(2) {
            Some(NfsResop4::Open(Res4::Ok(o))) => match (&o.delegation, self.sc.write) {
                (OpenDelegation4::Read(r), false) => self.deleg = r.stateid,
                (OpenDelegation4::Write(w), true) => self.deleg = w.stateid,
                (d, _) => self.violation(format!("the sole opener got no delegation: {d:?}")),
            },
            r => self.violation(format!("OPEN: {r:?}")),
        }
    }

    fn run(&mut self) {
        match self.sc.write {
            true => self.at(self.sc.first_open, Ev::OtherGetattr),
            false => self.at(self.sc.first_open, Ev::WriterOpen),
        }
        self.at(self.sc.lease / 3, Ev::HolderRenew);
        self.at(Duration::ZERO, Ev::Tick);
        // Bounded: a run that has not ended well after any legal revocation is a hang.
        let end = self.sc.driver_delay * 2
            + self.sc.first_open
            + self.sc.retry
            + self.sc.lease * 3
            + CALL_TIMEOUT;
        while let Some(((t, _), ev)) = self.events.pop_first() {
            if t > end {
                self.violation("nothing ended the recall: hung".into());
                break;
            }
            self.now = t;
            match ev {
                Ev::Tick => self.tick(),
                Ev::DriverPoll => self.driver_poll(),
                Ev::CbEnd {
                    sid,
                    token,
                    seqid,
                    outcome_ok,
                } => self.cb_end(sid, token, seqid, outcome_ok),
                Ev::HolderRenew => self.holder_renew(),
                Ev::OtherGetattr => self.other_getattr(),
                Ev::WriterOpen => {
                    if self.writer_open() {
                        break;
                    }
                }
            }
            self.plan_poll();
        }
        if self.report.open_ok_at.is_none() && self.report.violations.is_empty() {
            self.violation("the writer never opened the file".into());
        }
        self.finish();
    }

    fn tick(&mut self) {
        let now = self.instant();
        let next = {
            let mut st = self.nfs.state.lock().unwrap();
            st.tick(now);
            st.next_wakeup()
        };
        let d = lease::sleep_for(now, next);
        self.at(self.now + d, Ev::Tick);
    }

    /// The callback driver: woken, it polls `driver_delay` later.
    fn plan_poll(&mut self) {
        if self.woken.swap(false, Ordering::SeqCst) && !self.poll_planned {
            self.poll_planned = true;
            self.at(self.now + self.sc.driver_delay, Ev::DriverPoll);
        }
    }

    fn driver_poll(&mut self) {
        self.poll_planned = false;
        let sends = self
            .nfs
            .state
            .lock()
            .unwrap()
            .poll_callbacks(self.instant());
        for (sid, send) in sends {
            let recall = match &send.call {
                CbCall::Compound(a) => a
                    .ops
                    .iter()
                    .find(|o| matches!(o, CbArgop4::Recall(_)))
                    .and(a.ops.first()),
                CbCall::Null => None,
            };
            let Some(CbArgop4::Sequence(seq)) = recall else {
                // Not a recall (a probe after a new path, a CB_GETATTR): answered at once.
                let now = self.instant();
                let mut outcome = plain_answer(&send.call);
                if let (CbCall::Compound(a), CbOutcome::Compound(res)) = (&send.call, &mut outcome)
                {
                    if a.ops.iter().any(|o| matches!(o, CbArgop4::Getattr(_))) {
                        self.report.cb_getattrs += 1;
                        let attrs = AttrValues {
                            size: Some(HOLDER_SIZE),
                            change: Some(u64::MAX / 2),
                            ..AttrValues::default()
                        };
                        res.results
                            .push(CbResop4::Getattr(Res4::Ok(attrs.encode())));
                    }
                }
                let mut st = self.nfs.state.lock().unwrap();
                st.handle_callback(now, &sid, send.token, outcome);
                continue;
            };
            // A CB_RECALL queued before the revocation may still go out after it: moot, but
            // on the wire, and counted as sent by the server too.
            self.report.recalls_sent += 1;
            self.report.sent_at.get_or_insert(self.now);
            let (after, outcome_ok) = match self.sc.holder {
                Holder::Silent => (CALL_TIMEOUT, None),
                Holder::AnswersOk => (Duration::from_millis(2), Some(Nfsstat4::OK)),
                Holder::Delays => (Duration::from_millis(2), Some(Nfsstat4::DELAY)),
            };
            let seqid = seq.sequenceid;
            self.at(
                self.now + after,
                Ev::CbEnd {
                    sid,
                    token: send.token,
                    seqid,
                    outcome_ok,
                },
            );
        }
    }

    /// A recall's call ends: `outcome_ok` None is a timeout; otherwise the status of the
    /// CB_RECALL (CB_SEQUENCE is answered OK).
    fn cb_end(&mut self, sid: SessionId4, token: u64, seqid: u32, outcome_ok: Option<Nfsstat4>) {
        let now = self.instant();
        let outcome = match outcome_ok {
            None => CbOutcome::Failed,
            Some(status) => CbOutcome::Compound(CbCompound4Res {
                status,
                tag: Utf8Str(Bytes::new()),
                results: vec![
                    CbResop4::Sequence(Res4::Ok(CbSequenceResOk {
                        sessionid: sid,
                        sequenceid: seqid,
                        slotid: 0,
                        highest_slotid: 0,
                        target_highest_slotid: 0,
                    })),
                    CbResop4::Recall(status),
                ],
            }),
        };
        let mut st = self.nfs.state.lock().unwrap();
        st.handle_callback(now, &sid, token, outcome);
    }

    fn holder_renew(&mut self) {
        let res = self.send(true, vec![]);
        let flags = match res.results.first() {
            Some(NfsResop4::Sequence(Res4::Ok(ok))) => ok.status_flags,
            r => {
                self.violation(format!("the holder's SEQUENCE failed: {r:?}"));
                return;
            }
        };
        let revoked = self.revoked();
        let flagged = flags & SEQ4_STATUS_RECALLABLE_STATE_REVOKED != 0;
        if flagged != revoked {
            self.violation(format!(
                "RECALLABLE_STATE_REVOKED is {flagged} with the delegation revoked {revoked}"
            ));
        }
        self.revoked_seen |= flagged;
        self.at(self.now + self.sc.lease / 3, Ev::HolderRenew);
    }

    /// The other client stats f (write delegations): DELAY until the CB_GETATTR's answer,
    /// then the holder's size, and no recall for it; then it opens f.
    fn other_getattr(&mut self) {
        let res = self.send(
            false,
            vec![
                NfsArgop4::Putfh(self.fh.clone()),
                NfsArgop4::Getattr(Bitmap4::from_bits(&[num::CHANGE, num::SIZE])),
            ],
        );
        match res.results.get(2) {
            Some(NfsResop4::Getattr(Res4::Ok(f))) => {
                let v = AttrValues::decode(f).map(|d| d.values).unwrap_or_default();
                if v.size != Some(HOLDER_SIZE) {
                    self.violation(format!(
                        "GETATTR size {:?}, the holder has {HOLDER_SIZE}",
                        v.size
                    ));
                }
                if self.report.cb_getattrs == 0 {
                    self.violation("GETATTR answered with no CB_GETATTR".into());
                }
                if self.report.recalls_sent > 0 {
                    self.violation("a GETATTR recalled the delegation".into());
                }
                self.report.getattr_ok_at = Some(self.now);
                self.at(self.now + self.sc.retry, Ev::WriterOpen);
            }
            _ if res.status == Nfsstat4::DELAY => {
                self.at(self.now + self.sc.retry, Ev::OtherGetattr);
            }
            r => self.violation(format!("the other client's GETATTR: {r:?}")),
        }
    }

    /// The writer tries; true when its OPEN (or v3 WRITE) went through. Against a write
    /// delegation a v4 writer opens for reading: a reader conflicts too.
    fn writer_open(&mut self) -> bool {
        let status = match self.sc.v3_writer {
            // The v3 WRITE's gate, as `Nfs3` calls it (its JUKEBOX is DELAY here).
            true => Some(
                match RecallGate::break_for(&*self.nfs, self.instant(), &self.fh.0, true) {
                    Ok(()) => Nfsstat4::OK,
                    Err(_) => Nfsstat4::DELAY,
                },
            ),
            false => {
                let access = match self.sc.write {
                    true => OPEN4_SHARE_ACCESS_READ,
                    false => OPEN4_SHARE_ACCESS_WRITE,
                };
                let res = self.send(
                    false,
                    vec![
                        NfsArgop4::Putfh(self.root.clone()),
                        open(b"w", access, false),
                    ],
                );
                res.results.get(2).map(|r| r.status())
            }
        };
        let earliest = self.report.sent_at.map(|s| s + self.sc.lease);
        match status {
            Some(Nfsstat4::DELAY) => {
                self.report.delays += 1;
                // Late by at most a tick (the lease task's longest sleep) after the lease.
                if let Some(e) = earliest {
                    if self.now > e + lease::SLEEP_MAX + Duration::from_millis(1) {
                        self.violation(format!(
                            "still DELAY {:?} after the recall was sent (lease {:?})",
                            self.now - self.report.sent_at.unwrap_or_default(),
                            self.sc.lease
                        ));
                    }
                }
                self.at(self.now + self.sc.retry, Ev::WriterOpen);
                false
            }
            Some(Nfsstat4::OK) => {
                match earliest {
                    Some(e) if self.now >= e => {}
                    _ => self.violation(format!(
                        "the OPEN went through before a lease from the recall's sending \
                         (sent {:?})",
                        self.report.sent_at
                    )),
                }
                self.report.open_ok_at = Some(self.now);
                true
            }
            s => {
                self.violation(format!("the writer's OPEN: {s:?}"));
                true
            }
        }
    }

    /// The holder learns of the revocation and frees the stateid.
    fn finish(&mut self) {
        let c = self.nfs.state.lock().unwrap().delegations().counters;
        self.report.revoked = c.revoked;
        if c.revoked != 1 {
            self.violation(format!("{} revocations", c.revoked));
        }
        if self.sc.write && (c.cb_getattr_answered == 0 || self.report.getattr_ok_at.is_none()) {
            self.violation(format!("no CB_GETATTR answered: {c:?}"));
        }
        if c.recalls_sent != self.report.recalls_sent {
            self.violation(format!(
                "recalls sent: server {} driver {}",
                c.recalls_sent, self.report.recalls_sent
            ));
        }
        if self.report.open_ok_at.is_none() {
            return;
        }
        let res = self.send(true, vec![]);
        if !matches!(res.results.first(), Some(NfsResop4::Sequence(Res4::Ok(ok)))
            if ok.status_flags & SEQ4_STATUS_RECALLABLE_STATE_REVOKED != 0)
        {
            self.violation(format!("the holder is not told: {res:?}"));
        }
        let res = self.send(
            true,
            vec![
                NfsArgop4::Putfh(self.fh.clone()),
                NfsArgop4::Read(ReadArgs {
                    stateid: self.deleg,
                    offset: 0,
                    count: 1,
                }),
            ],
        );
        if res.status != Nfsstat4::DELEG_REVOKED {
            self.violation(format!("READ under a revoked delegation: {:?}", res.status));
        }
        let res = self.send(true, vec![NfsArgop4::FreeStateid(self.deleg)]);
        if res.status != Nfsstat4::OK {
            self.violation(format!("FREE_STATEID: {:?}", res.status));
        }
        let res = self.send(true, vec![]);
        if !matches!(res.results.first(), Some(NfsResop4::Sequence(Res4::Ok(ok)))
            if ok.status_flags & SEQ4_STATUS_RECALLABLE_STATE_REVOKED == 0)
        {
            self.violation(format!("the flag stays after FREE_STATEID: {res:?}"));
        }
    }

    // ----- helpers -------------------------------------------------------------------------

    fn revoked(&self) -> bool {
        self.nfs
            .state
            .lock()
            .unwrap()
            .delegations()
            .counters
            .revoked
            > 0
    }

    fn poll_now_and_answer_probes(&mut self) {
        let sends = self
            .nfs
            .state
            .lock()
            .unwrap()
            .poll_callbacks(self.instant());
        for (sid, send) in sends {
            let outcome = plain_answer(&send.call);
            let now = self.instant();
            self.nfs
                .state
                .lock()
                .unwrap()
                .handle_callback(now, &sid, send.token, outcome);
        }
        self.woken.store(false, Ordering::SeqCst);
    }

    /// The shared test client's set-up, RECLAIM_COMPLETE included (on slot 0, the only one):
    /// the session and the sequence id of its next request on slot 0.
    fn establish(&mut self, owner: &'static [u8], conn: u64, back: bool) -> (SessionId4, u32) {
        let sys = AuthSys {
            stamp: 1,
            machine_name: Bytes::from_static(b"sim"),
            uid: 0,
            gid: 0,
            gids: Vec::new(),
        };
        let cfg = SessionConfig {
            flags: if back {
                CREATE_SESSION4_FLAG_CONN_BACK_CHAN
            } else {
                0
            },
            cb_sec: CallbackSecParmsList(vec![CallbackSecParms4::AuthSys(sys)]),
            ..SessionConfig::new(owner, 1)
        };
        let s = Session4::establish(&cfg, |ops| self.compound(conn, ops));
        (s.sessionid, s.seqid(0) + 1)
    }

    /// A SEQUENCE'd COMPOUND of the holder (`true`) or the writer, on slot 0.
    fn send(&mut self, holder: bool, ops: Vec<NfsArgop4>) -> Compound4Res {
        let (who, conn) = match holder {
            true => (&mut self.holder, HOLDER_CONN),
            false => (&mut self.writer, WRITER_CONN),
        };
        let mut all = vec![NfsArgop4::Sequence(SequenceArgs {
            sessionid: who.0,
            sequenceid: who.1,
            slotid: 0,
            highest_slotid: 0,
            cachethis: false,
        })];
        who.1 += 1;
        all.extend(ops);
        self.compound(conn, all)
    }

    fn compound(&self, conn: u64, ops: Vec<NfsArgop4>) -> Compound4Res {
        let args = Compound4Args {
            tag: Utf8Str(Bytes::from_static(b"sim")),
            minorversion: 1,
            ops,
        };
        let mut w = Writer::new();
        args.pack(&mut w);
        let from = Sender {
            addr: "127.0.0.1:700".parse().expect("an address"),
            conn,
            xprtsec: sluice_server::backend::exports::Xprtsec::None,
            cred: self.cred.clone(),
        };
        let exec = Inline {
            now: self.instant(),
            data: None,
        };
        let reply = match drive_ready(&self.nfs, &exec, &from, &w.into_bytes()) {
            Outcome::Reply(b) => b,
            Outcome::GarbageArgs => panic!("a malformed COMPOUND"),
        };
        let segs = [reply];
        Compound4Res::decode(&mut Reader::new(&segs), &CompoundLimits::default())
            .expect("the reply decodes")
    }

    fn at(&mut self, t: Duration, ev: Ev) {
        self.seq += 1;
        self.events.insert((t, self.seq), ev);
    }

    fn instant(&self) -> Instant {
        self.epoch + self.now
    }

    fn violation(&mut self, v: String) {
        if self.report.violations.len() < 20 {
            self.report
                .violations
                .push(format!("t={:?}: {v}", self.now));
        }
    }
}

/// The holder's answer to a call that is not a recall: CB_NULL, or CB_SEQUENCE echoed.
fn plain_answer(call: &CbCall) -> CbOutcome {
    match call {
        CbCall::Null => CbOutcome::NullOk,
        CbCall::Compound(a) => {
            let Some(CbArgop4::Sequence(s)) = a.ops.first() else {
                panic!("CB_SEQUENCE comes first: {a:?}")
            };
            CbOutcome::Compound(CbCompound4Res {
                status: Nfsstat4::OK,
                tag: a.tag.clone(),
                results: vec![CbResop4::Sequence(Res4::Ok(CbSequenceResOk {
                    sessionid: s.sessionid,
                    sequenceid: s.sequenceid,
                    slotid: s.slotid,
                    highest_slotid: 0,
                    target_highest_slotid: 0,
                }))],
            })
        }
    }
}

fn open(owner: &[u8], access: u32, create: bool) -> NfsArgop4 {
    NfsArgop4::Open(OpenArgs {
        seqid: 0,
        share_access: access,
        share_deny: 0,
        owner: StateOwner4 {
            clientid: 0,
            owner: Opaque4(Bytes::copy_from_slice(owner)),
        },
        openhow: match create {
            true => Openflag4::Create(Createhow4::Unchecked(Fattr4::default())),
            false => Openflag4::NoCreate,
        },
        claim: OpenClaim4::Null(Component4(Bytes::from_static(b"f"))),
    })
}
