//! The NFSv4.1 grace period after a server crash, in virtual time: the real COMPOUND processor
//! (through its one driver loop, [`sluice_server::nfs4::compound::drive`], as the service runs
//! it) and state cores over one `MemFs` (the "disk" that survives the crash) and one
//! [`MemStore`] (the state store holding the stable client records, likewise), two server
//! instances one after the
//! other, and clients that held state, come back or do not, and newcomers that never held any.
//! Ticks follow the lease task's rule ([`sluice_server::nfs4::lease::sleep_for`] over
//! [`Nfs4::tick`]); the only clock is the one this module advances.
//!
//! # The run
//! ```text
//!  instance 1, t=0  each client that holds state: EXCHANGE_ID, CREATE_SESSION,
//!                   RECLAIM_COMPLETE, OPEN its file (deny WRITE), LOCK bytes 0..100
//!  crash            the instance is dropped; the MemFs and the records stay
//!  instance 2, t=0  grace starts from the records (skipped when none), length G
//!  returners        at a random time in 0..1.5 G: a new client id, OPEN CLAIM_PREVIOUS,
//!                   LOCK reclaim, RECLAIM_COMPLETE
//!  absent           never come back
//!  newcomers        at random times: a non-reclaim OPEN, an anonymous READ, a reclaim
//! ```
//!
//! # What the reference model predicts (RFC 8881 §8.4.2, §18.51.3)
//! Grace ends at the first of: the start, when nobody held state (Skipped); the instant the
//! last client that held state sent RECLAIM_COMPLETE, if every one of them came back before
//! the deadline (AllReclaimed); the deadline (Deadline): G, or later while returners keep
//! reclaiming (a look every second from G on finds a reclaim since the last look; never past
//! 2 G). While it lasts, a returner's reclaims succeed and a newcomer's OPEN and anonymous
//! READ get NFS4ERR_GRACE and its reclaim RECLAIM_BAD; after it, reclaims are NO_GRACE and
//! new state is granted. The end the server reports carries that reason and lasts exactly
//! that long; at the end, the records name exactly the clients that hold state in instance
//! 2 (absent ones forgotten at the deadline).

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_nfs4state::recovery::grace::{EndReason, EXTENSION_STEP};
use sluice_nfs4state::recovery::records::StableClients;
use sluice_nfs4state::{Config4, SplitMix, State4};
use sluice_rpc::server::Credentials;
use sluice_server::backend::exports::{ClientMatch, ClientRule, Squash};
use sluice_server::backend::memfs::MemFsConfig;
use sluice_server::backend::{Export, ExportOptions, MemFs};
use sluice_server::exports::ExportEntry;
use sluice_server::nfs4::compound::{drive_ready, Inline, Nfs4, Outcome, Sender};
use sluice_server::nfs4::lease;
use sluice_server::nfs4::store::MemStore;
use sluice_server::testkit::{Session4, SessionConfig};
use sluice_xdr::nfs4::compound::{Compound4Args, Compound4Res, CompoundLimits};
use sluice_xdr::nfs4::ops::{
    Createhow4, LockArgs, Locker4, NfsArgop4, NfsResop4, OpenArgs, OpenClaim4, OpenToLockOwner4,
    Openflag4, ReadArgs, Res4, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ,
    OPEN4_SHARE_DENY_WRITE, OPEN_DELEGATE_NONE, WRITE_LT,
};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{
    Component4, Fattr4, LockOwner4, NfsFh4, Opaque4, StateOwner4, Stateid4, Utf8Str,
};
use sluice_xdr::rpc::AuthSys;
use sluice_xdr::{Pack, Reader, Writer};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One run's parameters, drawn from its seed.
#[derive(Debug, Clone)]
pub struct GraceScenario {
    pub seed: u64,
    /// Lease, and grace length (grace = lease, knfsd's default).
    pub lease: Duration,
    /// Clients that held state before the crash.
    pub holders: usize,
    /// Of those, how many never come back.
    pub absent: usize,
    /// Clients that never held state and try to take some after the restart.
    pub newcomers: usize,
    /// Attempts per newcomer.
    pub attempts: usize,
}

impl GraceScenario {
    pub fn draw(seed: u64) -> Self {
        let mut g = ChaCha8Rng::seed_from_u64(seed ^ 0x9ace);
        let holders = g.gen_range(0..=4);
        Self {
            seed,
            lease: Duration::from_secs(g.gen_range(10..=90)),
            holders,
            // Most runs have everyone back (the early end); some leave one or more out.
            absent: if holders > 0 && g.gen_bool(0.3) {
                g.gen_range(1..=holders)
            } else {
                0
            },
            newcomers: g.gen_range(1..=2),
            attempts: g.gen_range(1..=4),
        }
    }
}

/// What a run saw, and what it found wrong.
#[derive(Debug, Clone, Default)]
pub struct GraceReport {
    pub seed: u64,
    /// Why grace ended, as the server reported it.
    pub reason: Option<EndReason>,
    /// How long it lasted, as the server reported it.
    pub lasted: Duration,
    /// Opens and locks reclaimed.
    pub reclaimed: u64,
    /// Non-reclaim ops refused with NFS4ERR_GRACE.
    pub refused: u64,
    /// Reclaims refused with RECLAIM_BAD (newcomers in grace) and NO_GRACE (after).
    pub reclaim_bad: u64,
    pub no_grace: u64,
    /// New opens granted after grace.
    pub granted: u64,
    pub violations: Vec<String>,
}

impl GraceReport {
    pub fn assert_invariants(&self) {
        assert!(
            self.violations.is_empty(),
            "seed {} (replay with SLUICE_SEED={}): {:#?}",
            self.seed,
            self.seed,
            self.violations
        );
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// The lease task's tick (first at a given instant, as the server's task would have run).
    Tick,
    Return(usize),
    Attempt(usize),
}

struct World {
    sc: GraceScenario,
    epoch: Instant,
    now: Duration,
    fs: Arc<MemFs>,
    records: Arc<MemStore>,
    nfs: Arc<Nfs4>,
    cred: Credentials,
    root: NfsFh4,
    /// Handles of the holders' files.
    files: Vec<NfsFh4>,
    sessions: BTreeMap<String, Session4>,
    report: GraceReport,
}

/// When the deadline ends grace of length `grace` with returners reclaiming at `returns`:
/// at `grace`, unless one reclaimed since the last look, then a look every
/// [`EXTENSION_STEP`] while reclaims keep coming, never past twice the length
/// (`sluice_nfs4state::recovery::grace`, knfsd's rule). A return at a look's very instant
/// comes after that look's tick, so it counts for the next one.
fn deadline_end(grace: Duration, returns: &[Duration]) -> Duration {
    let limit = grace * 2;
    let (mut since, mut look) = (Duration::ZERO, grace);
    while look < limit && returns.iter().any(|t| since <= *t && *t < look) {
        since = look;
        look = (look + EXTENSION_STEP).min(limit);
    }
    look
}

/// Runs one scenario; `epoch` is the `Instant` virtual zero maps to.
pub fn run_grace(sc: &GraceScenario, epoch: Instant) -> GraceReport {
    let mut g = ChaCha8Rng::seed_from_u64(sc.seed);
    let mut w = World::new(sc.clone(), epoch);
    w.first_instance();
    w.crash_and_restart();

    // The model: when grace ends and why.
    let grace = sc.lease;
    let returners = sc.holders - sc.absent;
    let returns: Vec<Duration> = (0..returners)
        .map(|_| grace.mul_f64(g.gen_range(0.0..1.5)))
        .collect();
    let (want_reason, want_end) = if sc.holders == 0 {
        (EndReason::Skipped, Duration::ZERO)
    } else {
        let last = returns.iter().copied().max().unwrap_or(Duration::MAX);
        let deadline = deadline_end(grace, &returns);
        if sc.absent == 0 && last < deadline {
            (EndReason::AllReclaimed, last)
        } else {
            (EndReason::Deadline, deadline)
        }
    };

    let mut events: Vec<(Duration, Ev)> = returns
        .iter()
        .enumerate()
        .map(|(i, t)| (*t, Ev::Return(i)))
        .collect();
    for n in 0..sc.newcomers {
        for _ in 0..sc.attempts {
            events.push((grace.mul_f64(g.gen_range(0.0..1.5)), Ev::Attempt(n)));
        }
    }
    events.sort();
    // Past the model's end (an extended grace can end after 1.6 G when G is short), so that
    // its end is seen and new state after it too.
    let horizon = grace.mul_f64(1.6).max(want_end + EXTENSION_STEP * 2);
    let mut next_tick = Duration::ZERO;
    let mut events = events.into_iter().peekable();
    while w.now < horizon {
        let due = events.peek().map(|e| e.0);
        let (t, ev) = match due {
            Some(t) if t < next_tick => events.next().expect("peeked"),
            _ => (next_tick, Ev::Tick),
        };
        w.now = t;
        let ended = w.ended_by(want_end, want_reason);
        match ev {
            Ev::Tick => {
                let now = w.instant();
                let r = w.nfs.tick(now);
                if let Some(end) = r.grace_ended {
                    if w.report.reason.is_some() {
                        w.violation("grace ended twice".into());
                    }
                    w.report.reason = Some(end.reason);
                    w.report.lasted = end.lasted;
                }
                let next = w.nfs.state.lock().expect("state").next_wakeup();
                next_tick = w.now + lease::sleep_for(now, next);
            }
            Ev::Return(i) => w.come_back(i, ended),
            Ev::Attempt(n) => w.newcomer(n, ended),
        }
    }

    if w.report.reason != Some(want_reason) {
        let got = w.report.reason;
        w.violation(format!(
            "grace ended by {got:?}, the model says {want_reason:?}"
        ));
    }
    if w.report.lasted != want_end {
        let got = w.report.lasted;
        w.violation(format!("grace lasted {got:?}, the model says {want_end:?}"));
    }
    // The records name the clients of instance 2 that may take state: the returners (each
    // reclaimed in grace, or opened anew after it) and the newcomers, recorded at their
    // RECLAIM_COMPLETE. The absent holders' records went at the deadline.
    let mut want: Vec<Vec<u8>> = (0..returners)
        .map(|i| holder_owner(i).into_bytes())
        .collect();
    for n in 0..sc.newcomers {
        if w.sessions.contains_key(&newcomer_owner(n)) {
            want.push(newcomer_owner(n).into_bytes());
        }
    }
    want.sort();
    let got = StableClients::open(w.records.clone())
        .expect("the memory store reads")
        .owners();
    if got != want {
        w.violation(format!(
            "records {:?}, want {:?}",
            lossy(&got),
            lossy(&want)
        ));
    }
    w.report
}

fn lossy(v: &[Vec<u8>]) -> Vec<String> {
    v.iter()
        .map(|o| String::from_utf8_lossy(o).into_owned())
        .collect()
}

fn holder_owner(i: usize) -> String {
    format!("holder {i}")
}

fn newcomer_owner(n: usize) -> String {
    format!("newcomer {n}")
}

impl World {
    fn new(sc: GraceScenario, epoch: Instant) -> Self {
        let fs = Arc::new(MemFs::new(MemFsConfig::default()));
        let records = Arc::new(MemStore::default());
        let nfs = Self::instance(&sc, &fs, &records, 7, epoch, false);
        World {
            report: GraceReport {
                seed: sc.seed,
                ..GraceReport::default()
            },
            sc,
            epoch,
            now: Duration::ZERO,
            fs,
            records,
            nfs,
            cred: Credentials::Sys(AuthSys {
                stamp: 1,
                machine_name: Bytes::from_static(b"sim"),
                uid: 0,
                gid: 0,
                gids: Vec::new(),
            }),
            root: NfsFh4(Bytes::new()),
            files: Vec::new(),
            sessions: BTreeMap::new(),
        }
    }

    /// A server instance over the shared file system and records; `grace`: started from the
    /// records at `epoch` (the second instance).
    fn instance(
        sc: &GraceScenario,
        fs: &Arc<MemFs>,
        records: &Arc<MemStore>,
        boot_epoch: u32,
        epoch: Instant,
        grace: bool,
    ) -> Arc<Nfs4> {
        let exports = vec![ExportEntry {
            fs: fs.clone(),
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
        let mut state = State4::new(
            Config4 {
                lease: sc.lease,
                boot_epoch,
                ..Config4::default()
            },
            Box::new(SplitMix(sc.seed)),
        );
        let records =
            Arc::new(StableClients::open(records.clone()).expect("the memory store reads"));
        if grace {
            state.start_grace(epoch, records.owners(), sc.lease);
        }
        let mut nfs = Nfs4::new(Arc::new(exports), state, 1).expect("one export");
        nfs.records = Some(records);
        Arc::new(nfs)
    }

    fn instant(&self) -> Instant {
        self.epoch + self.now
    }

    /// Whether the model's grace is over for an event at `now`. At the end instant itself
    /// only the skip (ended before anything) and the deadline (its tick runs before the
    /// events of that instant) are over; the last RECLAIM_COMPLETE ends it by its own event.
    fn ended_by(&self, end: Duration, reason: EndReason) -> bool {
        self.now > end || (self.now == end && reason != EndReason::AllReclaimed)
    }

    fn first_instance(&mut self) {
        for i in 0..self.sc.holders {
            let owner = holder_owner(i);
            self.establish(&owner);
            let st = self.in_session(&owner, vec![NfsArgop4::ReclaimComplete(false)]);
            self.expect(st.status, Nfsstat4::OK, "RECLAIM_COMPLETE before the crash");
            if self.root.0.is_empty() {
                self.root = self.export_root(&owner);
            }
            let res = self.in_session(
                &owner,
                vec![
                    NfsArgop4::Putfh(self.root.clone()),
                    open(
                        &owner,
                        OpenClaim4::Null(Component4(Bytes::from(format!("file {i}")))),
                        true,
                    ),
                    NfsArgop4::Getfh(()),
                ],
            );
            let (Some(NfsResop4::Open(Res4::Ok(o))), Some(NfsResop4::Getfh(Res4::Ok(fh)))) =
                (res.results.get(2), res.results.get(3))
            else {
                panic!("holder {i}: OPEN before the crash: {res:?}")
            };
            self.files.push(fh.clone());
            let res = self.in_session(
                &owner,
                vec![NfsArgop4::Putfh(fh.clone()), lock(&owner, o.stateid, false)],
            );
            self.expect(res.status, Nfsstat4::OK, "LOCK before the crash");
        }
    }

    fn crash_and_restart(&mut self) {
        self.sessions.clear();
        self.nfs = Self::instance(&self.sc, &self.fs, &self.records, 8, self.instant(), true);
    }

    /// Holder `i` comes back: reclaims its open and lock (or, after grace, is refused and
    /// opens anew), then RECLAIM_COMPLETE.
    fn come_back(&mut self, i: usize, ended: bool) {
        let owner = holder_owner(i);
        self.establish(&owner);
        let fh = self.files[i].clone();
        let res = self.in_session(
            &owner,
            vec![
                NfsArgop4::Putfh(fh.clone()),
                open(&owner, OpenClaim4::Previous(OPEN_DELEGATE_NONE), false),
            ],
        );
        let open_sid = match (ended, res.status, res.results.get(2)) {
            (false, Nfsstat4::OK, Some(NfsResop4::Open(Res4::Ok(o)))) => {
                self.report.reclaimed += 1;
                let res = self.in_session(
                    &owner,
                    vec![NfsArgop4::Putfh(fh.clone()), lock(&owner, o.stateid, true)],
                );
                self.expect(res.status, Nfsstat4::OK, "LOCK reclaim in grace");
                self.report.reclaimed += 1;
                None
            }
            (true, Nfsstat4::NO_GRACE, _) => {
                self.report.no_grace += 1;
                Some(())
            }
            (_, st, _) => {
                self.violation(format!(
                    "holder {i}: reclaim answered {st:?} with grace ended={ended}"
                ));
                None
            }
        };
        let st = self.in_session(&owner, vec![NfsArgop4::ReclaimComplete(false)]);
        self.expect(st.status, Nfsstat4::OK, "RECLAIM_COMPLETE");
        if open_sid.is_some() {
            // Too late to reclaim: the file is opened again as new state.
            let res = self.in_session(
                &owner,
                vec![NfsArgop4::Putfh(fh), open(&owner, OpenClaim4::Fh, false)],
            );
            self.expect(res.status, Nfsstat4::OK, "a late holder's new OPEN");
        }
    }

    /// A newcomer tries a new OPEN, an anonymous READ and a reclaim.
    fn newcomer(&mut self, n: usize, ended: bool) {
        let owner = newcomer_owner(n);
        if !self.sessions.contains_key(&owner) {
            self.establish(&owner);
            let st = self.in_session(&owner, vec![NfsArgop4::ReclaimComplete(false)]);
            self.expect(st.status, Nfsstat4::OK, "a newcomer's RECLAIM_COMPLETE");
        }
        let name = Component4(Bytes::from(format!("new {n}")));
        let root = self.root_or_lookup(&owner);
        let res = self.in_session(
            &owner,
            vec![
                NfsArgop4::Putfh(root),
                open(&owner, OpenClaim4::Null(name), true),
                NfsArgop4::Getfh(()),
            ],
        );
        match (ended, res.status) {
            (false, Nfsstat4::GRACE) => self.report.refused += 1,
            (true, Nfsstat4::OK) => self.report.granted += 1,
            (_, st) => self.violation(format!(
                "newcomer {n}: new OPEN answered {st:?} with grace ended={ended}"
            )),
        }
        if self.files.is_empty() {
            return;
        }
        let file = self.files[n % self.files.len()].clone();
        let res = self.in_session(
            &owner,
            vec![
                NfsArgop4::Putfh(file.clone()),
                NfsArgop4::Read(ReadArgs {
                    stateid: Stateid4::ANONYMOUS,
                    offset: 0,
                    count: 10,
                }),
            ],
        );
        if (res.status == Nfsstat4::GRACE) == ended {
            self.violation(format!(
                "newcomer {n}: anonymous READ answered {:?} with grace ended={ended}",
                res.status
            ));
        } else if !ended {
            self.report.refused += 1;
        }
        let res = self.in_session(
            &owner,
            vec![
                NfsArgop4::Putfh(file),
                open(&owner, OpenClaim4::Previous(OPEN_DELEGATE_NONE), false),
            ],
        );
        // A newcomer sent RECLAIM_COMPLETE first: NO_GRACE, in grace or not (RFC 8881
        // §18.51.3); before it, in grace, it would be RECLAIM_BAD (the wire tests check that).
        match res.status {
            Nfsstat4::NO_GRACE => self.report.no_grace += 1,
            st => self.violation(format!("newcomer {n}: reclaim answered {st:?}")),
        }
    }

    fn root_or_lookup(&mut self, owner: &str) -> NfsFh4 {
        if self.root.0.is_empty() {
            self.root = self.export_root(owner);
        }
        self.root.clone()
    }

    fn export_root(&mut self, owner: &str) -> NfsFh4 {
        let res = self.in_session(
            owner,
            vec![
                NfsArgop4::Putrootfh(()),
                NfsArgop4::Lookup(Component4(Bytes::from_static(b"sim"))),
                NfsArgop4::Getfh(()),
            ],
        );
        match res.results.get(3) {
            Some(NfsResop4::Getfh(Res4::Ok(fh))) => fh.clone(),
            _ => panic!("no export root handle: {res:?}"),
        }
    }

    fn compound(&self, ops: Vec<NfsArgop4>) -> Compound4Res {
        let args = Compound4Args {
            tag: Utf8Str(Bytes::from_static(b"sim")),
            minorversion: 1,
            ops,
        };
        let mut w = Writer::new();
        args.pack(&mut w);
        let from = Sender {
            addr: "127.0.0.1:700".parse().expect("an address"),
            conn: 1,
            xprtsec: sluice_server::backend::exports::Xprtsec::None,
            cred: self.cred.clone(),
        };
        let exec = Inline {
            now: self.instant(),
            data: None,
        };
        let reply = match drive_ready(&self.nfs, &exec, &from, &w.into_bytes()) {
            Outcome::Reply(b) => b,
            Outcome::GarbageArgs => panic!("the simulator sent a malformed COMPOUND"),
        };
        let segs = [reply];
        let mut r = Reader::new(&segs);
        Compound4Res::decode(&mut r, &CompoundLimits::default()).expect("the reply decodes")
    }

    fn establish(&mut self, owner: &str) {
        // RECLAIM_COMPLETE is each scenario step's own: reclaims come before it.
        let cfg = SessionConfig {
            reclaim_complete: false,
            ..SessionConfig::new(owner.as_bytes(), 1)
        };
        let s = Session4::establish(&cfg, |ops| self.compound(ops));
        self.sessions.insert(owner.to_string(), s);
    }

    fn in_session(&mut self, owner: &str, ops: Vec<NfsArgop4>) -> Compound4Res {
        let s = self.sessions.get_mut(owner).expect("established");
        let all = s.in_session(ops);
        self.compound(all)
    }

    fn expect(&mut self, got: Nfsstat4, want: Nfsstat4, what: &str) {
        if got != want {
            self.violation(format!("{what}: {got:?}, want {want:?}"));
        }
    }

    fn violation(&mut self, v: String) {
        if self.report.violations.len() < 20 {
            self.report
                .violations
                .push(format!("t={:?}: {v}", self.now));
        }
    }
}

fn open(owner: &str, claim: OpenClaim4, create: bool) -> NfsArgop4 {
    let reclaim = matches!(claim, OpenClaim4::Previous(_));
    NfsArgop4::Open(OpenArgs {
        seqid: 0,
        share_access: if reclaim || create {
            OPEN4_SHARE_ACCESS_BOTH
        } else {
            OPEN4_SHARE_ACCESS_READ
        },
        share_deny: if reclaim || create {
            OPEN4_SHARE_DENY_WRITE
        } else {
            0
        },
        owner: StateOwner4 {
            clientid: 0,
            owner: Opaque4(Bytes::from(owner.to_string())),
        },
        openhow: if create {
            Openflag4::Create(Createhow4::Unchecked(Fattr4::default()))
        } else {
            Openflag4::NoCreate
        },
        claim,
    })
}

fn lock(owner: &str, open: Stateid4, reclaim: bool) -> NfsArgop4 {
    NfsArgop4::Lock(LockArgs {
        locktype: WRITE_LT,
        reclaim,
        offset: 0,
        length: 100,
        locker: Locker4::New(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid: open,
            lock_seqid: 0,
            lock_owner: LockOwner4 {
                clientid: 0,
                owner: Opaque4(Bytes::from(format!("{owner} pid"))),
            },
        }),
    })
}
