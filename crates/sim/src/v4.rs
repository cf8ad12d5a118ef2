//! The NFSv4.1 server's session and lease state in virtual time: the real COMPOUND processor (its
//! one driver loop, [`sluice_server::nfs4::compound::drive`], the loop the service runs, with an
//! executor that runs everything at once) and its state cores ([`sluice_nfs4state::State4`]) over a
//! `MemFs` export, driven by simulated clients through a network that delays, loses, duplicates and
//! reorders messages. Nothing is a stand-in: every message is an encoded COMPOUND, every reply the
//! processor's bytes, and leases are ticked the way the server's lease task ticks them
//! ([`sluice_server::nfs4::lease::sleep_for`]), only on a clock this module advances itself.
//!
//! # What a run checks (RFC 8881 §2.10.6, §8.3)
//! A reference model beside the server predicts, for every request that reaches it, what the
//! slot table must answer, from nothing but the order of arrivals:
//! ```text
//!   seqid == last + 1 ─▶ executes: SEQUENCE OK; a CREATE must not find its name (EXIST would
//!                        mean a second execution), a REMOVE must find its name (NOENT)
//!   seqid == last     ─▶ other bytes than the request that ran: NFS4ERR_SEQ_FALSE_RETRY
//!                        cached: the very bytes the execution produced, byte for byte
//!                        not cached (sa_cachethis false): NFS4ERR_RETRY_UNCACHED_REP
//!   anything else     ─▶ NFS4ERR_SEQ_MISORDERED, nothing runs
//!   session revoked   ─▶ NFS4ERR_BADSESSION;  slot above the (shrunk) table ─▶ NFS4ERR_BADSLOT
//!   retired slot      ─▶ sequence id 1 restarts it (its cached reply is gone), except the
//!                        request that last ran as 1 there: a retry, RETRY_UNCACHED_REP
//! ```
//! The server changes its slot target at random moments (`set_slot_target`); the model follows
//! the shrink the client's `sa_highest_slotid` allows and the growth a higher target gives, and
//! checks `sr_highest_slotid` / `sr_target_highest_slotid` in every new reply. A
//! retransmission of the request that last ran as a retired slot's sequence id 1 is a retry,
//! not a restart (it once ran twice: seeds 3796, 5085, 5640, 7287, 13239, 18148 of 0..20000).
//! The model also renews a lease wherever the server must (a SEQUENCE that executes or
//! replays), so after every tick at `t` a client is a courtesy client exactly when its last
//! renewal is a lease or more before `t`: never sooner, and never a tick later; and
//! `next_wakeup` is the next lease to run out (a courtesy client's: its `courtesy_max`), and a
//! tick expires for real exactly the courtesy clients whose `courtesy_max` has passed (drawn as
//! a fraction of the lease in half the seeds; their return then gets BADSESSION). At the end,
//! the export's directory holds exactly the names the model says were created and not removed.
//!
//! # The run
//! ```text
//!  t=0   every client: EXCHANGE_ID, CREATE_SESSION, OPEN its own file (share BOTH/NONE)
//!  busy  each client keeps `slots` slots busy with SEQUENCE'd CREATE / REMOVE / GETATTR,
//!        a few deliberately misordered sequence ids and false retries (a new request on the
//!        last sequence id), random delays, losses (the client
//!        retransmits the same bytes) and spurious duplicates (delivered any time later)
//!  idle  client 0 (the keeper) renews every third of a lease; every other client goes quiet:
//!        • some are left alone and come back (before or after their lease ran out): SEQUENCE
//!          must pass and CLOSE of their open stateid must succeed (courtesy kept them)
//!        • some see the keeper OPEN their file with DENY_BOTH at a random moment: before the
//!          lease ran out that is NFS4ERR_SHARE_DENIED; after it the OPEN succeeds and the quiet
//!          client is revoked, so its return gets NFS4ERR_BADSESSION; it then starts again with
//!          EXCHANGE_ID and CREATE_SESSION and must be able to work
//! ```
//! Messages of one client's setup and recovery (the session-less ops) go straight to the
//! processor: their own replay rules (`csa_sequence`) are the wire tests' business.

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_nfs4state::{Config4, SplitMix, State4};
use sluice_rpc::server::Credentials;
use sluice_server::backend::exports::{ClientMatch, ClientRule, Squash};
use sluice_server::backend::memfs::MemFsConfig;
use sluice_server::backend::{Caller, Cred, Export, ExportOptions, FileHandle, FileSystem, MemFs};
use sluice_server::exports::ExportEntry;
use sluice_server::nfs4::compound::{drive_ready, Inline, Nfs4, Outcome, Sender};
use sluice_server::nfs4::lease;
use sluice_server::testkit::{Session4, SessionConfig};
use sluice_xdr::nfs4::compound::{Compound4Args, Compound4Res, CompoundLimits};
use sluice_xdr::nfs4::ops::{
    CloseArgs, CreateArgs, Createhow4, Createtype4, NfsArgop4, NfsResop4, OpenArgs, OpenClaim4,
    Openflag4, Res4, SequenceArgs, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_DENY_BOTH,
    OPEN4_SHARE_DENY_NONE,
};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{
    Bitmap4, Component4, Fattr4, NfsFh4, Opaque4, SessionId4, StateOwner4, Stateid4, Utf8Str,
};
use sluice_xdr::rpc::AuthSys;
use sluice_xdr::{Pack, Reader, Writer};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One seed's world: everything else is derived from it.
#[derive(Debug, Clone, PartialEq)]
pub struct V4Scenario {
    pub seed: u64,
    /// Clients, the keeper (client 0) included.
    pub clients: usize,
    /// Slots each client keeps busy (it negotiates this many).
    pub slots: u32,
    /// The server's lease time.
    pub lease: Duration,
    /// How long a courtesy client is kept (`Config4::courtesy_max`): the default 24 h (never
    /// reached here) or a fraction of the lease, so that some quiet clients expire for real.
    pub courtesy_max: Duration,
    /// Longest one-way delay; each message draws its own, so messages overtake each other.
    pub delay_max: Duration,
    /// Probability that a message (request or reply) is lost.
    pub loss_ratio: f64,
    /// Probability that a request is sent twice (the copy arrives at any later time).
    pub dup_ratio: f64,
    /// Probability that a request on an idle slot carries a wrong sequence id on purpose.
    pub misordered_ratio: f64,
    /// Probability that a request does not ask for its reply to be cached.
    pub uncached_ratio: f64,
    /// Requests each client completes in the busy phase.
    pub requests: u32,
    /// Longest pause between a reply and the slot's next request in the busy phase.
    pub think_max: Duration,
    /// Times, per client, that the server changes its slot target (`sr_target_highest_slotid`)
    /// during the first seconds, so that the table shrinks and grows under the client.
    pub slot_target_changes: u32,
}

impl V4Scenario {
    /// The scenario of `seed`.
    pub fn draw(seed: u64) -> Self {
        let mut g = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_0004);
        let lease = Duration::from_secs(g.gen_range(5..=90));
        // Delays well under the lease: a lost message costs a retransmission, not the lease.
        let delay_max = Duration::from_millis(g.gen_range(1..=500));
        let courtesy_max = if g.gen_bool(0.5) {
            Config4::default().courtesy_max
        } else {
            lease.mul_f64(g.gen_range(0.2..2.0))
        };
        Self {
            seed,
            courtesy_max,
            clients: g.gen_range(2..=5),
            slots: g.gen_range(1..=6),
            lease,
            delay_max,
            loss_ratio: if g.gen_bool(0.6) {
                g.gen_range(0.0..0.1)
            } else {
                0.0
            },
            dup_ratio: g.gen_range(0.0..0.3),
            misordered_ratio: g.gen_range(0.0..0.1),
            uncached_ratio: if g.gen_bool(0.5) {
                g.gen_range(0.0..0.3)
            } else {
                0.0
            },
            requests: g.gen_range(5..=60),
            think_max: Duration::from_millis(g.gen_range(0..=2_000)),
            slot_target_changes: g.gen_range(0..=4),
        }
    }
}

/// What a run did and what it found wrong (`violations` is empty when every invariant held).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct V4Report {
    pub seed: u64,
    pub elapsed: Duration,
    /// Requests that executed at the server (the model predicted it and the server agreed).
    pub executed: u64,
    /// Duplicates answered with the cached bytes.
    pub replays: u64,
    /// Duplicates of uncached requests (NFS4ERR_RETRY_UNCACHED_REP).
    pub uncached_retries: u64,
    /// NFS4ERR_SEQ_MISORDERED answers (stale duplicates and deliberate ones).
    pub misordered: u64,
    /// NFS4ERR_SEQ_FALSE_RETRY answers (a different request on a used sequence id).
    pub false_retries: u64,
    /// NFS4ERR_BADSLOT answers (a slot above the shrunk table).
    pub badslot: u64,
    /// Shrinks of a slot table (the client's `sa_highest_slotid` reached the server's target).
    pub slot_shrinks: u64,
    /// Spurious duplicates not delivered because their slot was retired since (see
    /// `DELIVER_ACROSS_SHRINK`).
    pub dropped_across_shrink: u64,
    /// Requests answered NFS4ERR_BADSESSION (after a revocation).
    pub badsession: u64,
    /// Retransmissions after a timeout.
    pub retransmissions: u64,
    /// Clients seen to become courtesy clients at a tick.
    pub courtesy: u64,
    /// Courtesy clients expired for real at a tick, `courtesy_max` after their lease ran out.
    pub courtesy_expired: u64,
    /// Quiet clients that came back (before or after their lease ran out) and kept their open.
    pub courtesy_returns: u64,
    /// Of those, the ones whose lease had run out: courtesy kept their open for them.
    pub courtesy_kept: u64,
    /// Conflicting OPENs refused because the holder's lease still ran.
    pub share_denied: u64,
    /// Clients revoked by a conflicting OPEN, and recovered afterwards.
    pub revoked: u64,
    pub recovered: u64,
    /// Lease ticks run.
    pub ticks: u64,
    pub violations: Vec<String>,
}

impl V4Report {
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

/// Runs one scenario; `epoch` is the `Instant` virtual zero maps to.
pub fn run_v4(sc: &V4Scenario, epoch: Instant) -> V4Report {
    let mut w = World::new(sc, epoch);
    w.run();
    w.report.elapsed = w.now;
    w.report
}

/// Whether the network may deliver a spurious duplicate after its slot was retired by a
/// shrink. Off: a retired slot accepts sequence id 1 again (`slots.rs`, as knfsd, for clients
/// that restart retired slots at 1), so a stale copy of a slot's *first* request arriving
/// after a shrink executes a second time (seed 77 with this on: a CREATE runs twice). Over TCP
/// a copy cannot arrive that late (retransmissions follow a reconnect), so the run assumes it;
/// the client's own retransmissions are always delivered.
const DELIVER_ACROSS_SHRINK: bool = false;

fn m_generation_ok(m: &ModelClient, generation: u32) -> bool {
    m.generation == generation && !m.revoked
}

/// When the server's slot-target changes happen: the first seconds, while clients are busy.
const SLOT_POLICY_WINDOW: Duration = Duration::from_secs(10);

/// A run that has not finished by then is a liveness failure.
const VIRTUAL_TIME_MAX: Duration = Duration::from_secs(3600);
/// Retransmission timeout of a client: twice the longest round trip plus a margin, so that every
/// copy of a request is delivered or lost before the client sends another one on that slot.
fn retransmit_after(sc: &V4Scenario) -> Duration {
    sc.delay_max * 4 + Duration::from_millis(100)
}

/// The name of client `c`'s open file.
fn file_name(c: usize) -> Bytes {
    Bytes::from(format!("file{c}"))
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Create(Bytes),
    Remove(Bytes),
    Getattr,
    /// SEQUENCE alone (the keeper's renewal).
    Renew,
    /// A sequence id two ahead: must be SEQ_MISORDERED.
    Misordered,
    /// The slot's last sequence id again with a different request: SEQ_FALSE_RETRY, never
    /// the other request's cached reply (§2.10.6.1.3).
    FalseRetry,
    /// A quiet client's return: PUTFH its file, CLOSE its open stateid.
    Return,
    /// The keeper OPENs client `victim`'s file with DENY_BOTH.
    Conflict {
        victim: usize,
    },
}

/// What a client is doing after the busy phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Client 0: renews and makes the conflicting OPENs.
    Keeper,
    /// Goes quiet, comes back at a random time.
    Alone,
    /// Goes quiet; the keeper opens its file at a random time; comes back after that.
    Conflicted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Busy,
    /// Busy phase done; waiting for the last replies.
    Draining,
    Quiet,
    Done,
}

#[derive(Debug)]
struct Out {
    /// Unique over the run: a retransmission timer belongs to one request (a misordered
    /// request repeats a sequence id, so the id alone does not tell requests apart).
    nonce: u64,
    cachethis: bool,
    sa_highest: u32,
    seqid: u32,
    bytes: Bytes,
    kind: Kind,
}

#[derive(Debug, Default)]
struct ClientSlot {
    /// Sequence id of the last request sent (0: none).
    seqid: u32,
    out: Option<Out>,
}

struct Client {
    fate: Fate,
    phase: Phase,
    sessionid: SessionId4,
    /// Bumped when the client starts again after a revocation.
    generation: u32,
    clientid: u64,
    open: Stateid4,
    slots: Vec<ClientSlot>,
    /// The highest slot the client starts new requests on: the last
    /// `sr_target_highest_slotid` it was told.
    target: u32,
    completed: u32,
    next_name: u32,
    /// Names whose CREATE succeeded and that no REMOVE was sent for yet.
    created: Vec<Bytes>,
    /// Set when the model revoked this client.
    revoked: bool,
}

/// The server's side of a slot as the model predicts it.
#[derive(Debug, Default, Clone)]
struct ModelSlot {
    last: u32,
    /// Retired by a shrink: its reply is gone, and it accepts sequence id 1 again.
    retired: bool,
    /// Times the slot was retired.
    retirements: u32,
    /// The request that executed as `last` (a retry must be these bytes).
    request: Bytes,
    /// The bytes of the last execution and whether they were cached.
    reply: Option<(Bytes, bool)>,
}

struct ModelClient {
    generation: u32,
    slots: Vec<ModelSlot>,
    /// The slot table's enforced highest slot id and the server's target.
    highest: u32,
    target: u32,
    renewed: Duration,
    revoked: bool,
    /// The client's return closed its open: an OPEN of its file conflicts with nothing.
    closed: bool,
    clientid: u64,
}

/// One copy of a request on the network, and what the client and the model know about it.
#[derive(Debug, Clone)]
struct Req {
    c: usize,
    generation: u32,
    slot: u32,
    seqid: u32,
    /// The client's request this is a copy of ([`Out::nonce`]).
    nonce: u64,
    cachethis: bool,
    /// `sa_highest_slotid`.
    sa_highest: u32,
    /// A spurious copy made by the network (not the client's own retransmission), and the
    /// slot's retirements (model) when it was made: see [`DELIVER_ACROSS_SHRINK`].
    spurious: Option<u32>,
    kind: Kind,
    bytes: Bytes,
}

#[derive(Debug)]
enum Ev {
    ToServer(Req),
    /// The reply to a copy of `req`.
    ToClient {
        req: Req,
        reply: Bytes,
    },
    /// The slot's think time is over: send the next request.
    Wake {
        c: usize,
        slot: u32,
    },
    Retransmit {
        c: usize,
        slot: u32,
        nonce: u64,
    },
    /// A quiet client's plan: the keeper's conflicting OPEN, or the client's return.
    Plan {
        c: usize,
        kind: Kind,
    },
    /// The keeper's renewal timer.
    KeeperRenew,
    /// The server's slot policy: a new `sr_target_highest_slotid` for client `c`'s session.
    SlotTarget {
        c: usize,
        target: u32,
    },
    /// The lease task's tick.
    Tick,
}

struct World<'a> {
    sc: &'a V4Scenario,
    epoch: Instant,
    now: Duration,
    g: ChaCha8Rng,
    nfs: Arc<Nfs4>,
    fs: Arc<MemFs>,
    root_fh: NfsFh4,
    cred: Credentials,
    events: BTreeMap<(Duration, u64), Ev>,
    event_seq: u64,
    clients: Vec<Client>,
    model: Vec<ModelClient>,
    /// Names the model says exist in the export's root, and every name ever created.
    names: HashMap<Bytes, bool>,
    report: V4Report,
}

impl<'a> World<'a> {
    fn new(sc: &'a V4Scenario, epoch: Instant) -> Self {
        let fs = Arc::new(MemFs::new(MemFsConfig::default()));
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
        let state = State4::new(
            Config4 {
                lease: sc.lease,
                courtesy_max: sc.courtesy_max,
                boot_epoch: 7,
                ..Config4::default()
            },
            Box::new(SplitMix(sc.seed)),
        );
        let nfs = Arc::new(Nfs4::new(Arc::new(exports), state, 1).expect("one export"));
        let mut w = World {
            sc,
            epoch,
            now: Duration::ZERO,
            g: ChaCha8Rng::seed_from_u64(sc.seed),
            nfs,
            fs,
            root_fh: NfsFh4(Bytes::new()),
            cred: Credentials::Sys(AuthSys {
                stamp: 1,
                machine_name: Bytes::from_static(b"sim"),
                uid: 0,
                gid: 0,
                gids: Vec::new(),
            }),
            events: BTreeMap::new(),
            event_seq: 0,
            clients: Vec::new(),
            model: Vec::new(),
            names: HashMap::new(),
            report: V4Report {
                seed: sc.seed,
                ..V4Report::default()
            },
        };
        for c in 0..sc.clients {
            let fate = match c {
                0 => Fate::Keeper,
                _ if w.g.gen_bool(0.5) => Fate::Alone,
                _ => Fate::Conflicted,
            };
            let (clientid, sessionid) = w.establish(c);
            w.clients.push(Client {
                fate,
                phase: Phase::Busy,
                sessionid,
                generation: 0,
                clientid,
                open: Stateid4::ANONYMOUS,
                slots: (0..sc.slots).map(|_| ClientSlot::default()).collect(),
                target: sc.slots - 1,
                completed: 0,
                next_name: 0,
                created: Vec::new(),
                revoked: false,
            });
            w.model.push(ModelClient {
                generation: 0,
                slots: vec![ModelSlot::default(); sc.slots as usize],
                highest: sc.slots - 1,
                target: sc.slots - 1,
                renewed: Duration::ZERO,
                revoked: false,
                closed: false,
                clientid,
            });
            w.reclaim_complete(c);
            if c == 0 {
                w.root_fh = w.export_root_fh();
            }
            w.open_own_file(c);
        }
        w
    }

    fn run(&mut self) {
        for c in 0..self.sc.clients {
            for slot in 0..self.sc.slots {
                let t = self.g.gen_range(Duration::ZERO..=self.sc.think_max);
                self.at(t, Ev::Wake { c, slot });
            }
        }
        self.at(Duration::ZERO, Ev::Tick);
        if self.sc.slots > 1 {
            for c in 0..self.sc.clients {
                for _ in 0..self.sc.slot_target_changes {
                    let t = self.g.gen_range(Duration::ZERO..=SLOT_POLICY_WINDOW);
                    let target = self.g.gen_range(0..self.sc.slots);
                    self.at(t, Ev::SlotTarget { c, target });
                }
            }
        }
        while let Some(((t, _), ev)) = self.events.pop_first() {
            if t > VIRTUAL_TIME_MAX {
                self.violation(format!("not finished after {VIRTUAL_TIME_MAX:?}"));
                return;
            }
            self.now = t;
            match ev {
                Ev::Tick => {
                    self.tick();
                    if self.clients.iter().any(|c| c.phase != Phase::Done) {
                        let next = self.nfs.state.lock().unwrap().next_wakeup();
                        let wait = lease::sleep_for(self.instant(), next);
                        self.at(self.now + wait, Ev::Tick);
                    }
                }
                Ev::Wake { c, slot } => self.wake(c, slot),
                Ev::ToServer(req) => self.at_server(req),
                Ev::ToClient { req, reply } => self.at_client(req, reply),
                Ev::Retransmit { c, slot, nonce } => self.retransmit(c, slot, nonce),
                Ev::Plan { c, kind } => self.plan(c, kind),
                Ev::KeeperRenew => self.keeper_renew(),
                Ev::SlotTarget { c, target } => self.slot_target(c, target),
            }
        }
        let unfinished: Vec<usize> = (0..self.clients.len())
            .filter(|&c| self.clients[c].phase != Phase::Done)
            .collect();
        if !unfinished.is_empty() {
            self.violation(format!("clients {unfinished:?} never finished"));
        }
        self.check_names();
    }

    // ----- clients -------------------------------------------------------------------------

    /// A slot's think time ended: its next request in the busy phase.
    fn wake(&mut self, c: usize, slot: u32) {
        let cl = &mut self.clients[c];
        if cl.phase != Phase::Busy || cl.slots[slot as usize].out.is_some() {
            return;
        }
        let in_flight = cl.slots.iter().filter(|s| s.out.is_some()).count() as u32;
        if cl.completed + in_flight >= self.sc.requests {
            return;
        }
        if slot > cl.target {
            // Above the server's target: the slot rests until the target comes back up.
            let t = self.now + self.sc.think_max.max(Duration::from_millis(100));
            self.at(t, Ev::Wake { c, slot });
            return;
        }
        let kind = if self.g.gen_bool(self.sc.misordered_ratio) {
            if self.g.gen_bool(0.5) {
                Kind::Misordered
            } else {
                Kind::FalseRetry
            }
        } else {
            match self.g.gen_range(0..4) {
                0 | 1 => {
                    let cl = &mut self.clients[c];
                    cl.next_name += 1;
                    Kind::Create(Bytes::from(format!(
                        "c{c}g{}n{}",
                        cl.generation, cl.next_name
                    )))
                }
                2 if !self.clients[c].created.is_empty() => {
                    let cl = &mut self.clients[c];
                    let i = self.g.gen_range(0..cl.created.len());
                    Kind::Remove(cl.created.swap_remove(i))
                }
                _ => Kind::Getattr,
            }
        };
        self.send(c, slot, kind);
    }

    /// Sends a new request on an idle slot.
    fn send(&mut self, c: usize, slot: u32, kind: Kind) {
        let cachethis = !self.g.gen_bool(self.sc.uncached_ratio);
        let cl = &mut self.clients[c];
        debug_assert!(cl.slots[slot as usize].out.is_none());
        let s = &mut cl.slots[slot as usize];
        let seqid = match kind {
            Kind::Misordered => s.seqid.wrapping_add(2),
            Kind::FalseRetry => s.seqid,
            _ => {
                s.seqid = s.seqid.wrapping_add(1);
                s.seqid
            }
        };
        // `sa_highest_slotid`: the highest slot with a request outstanding, this one included
        // (RFC 8881 §18.46.3). Claiming less while a slot above is busy would let the server
        // retire that slot under its unanswered request, whose retransmission could then
        // restart the slot (a retired slot accepts sequence id 1) and run twice.
        let sa_highest = (cl.slots.iter().enumerate())
            .filter(|(_, s)| s.out.is_some())
            .map(|(i, _)| i as u32)
            .fold(slot, u32::max);
        let mut ops = vec![NfsArgop4::Sequence(SequenceArgs {
            sessionid: cl.sessionid,
            sequenceid: seqid,
            slotid: slot,
            highest_slotid: sa_highest,
            cachethis,
        })];
        ops.extend(self.ops_of(c, &kind));
        let bytes = encode_args(ops);
        let generation = self.clients[c].generation;
        self.event_seq += 1;
        let nonce = self.event_seq;
        self.clients[c].slots[slot as usize].out = Some(Out {
            nonce,
            cachethis,
            sa_highest,
            seqid,
            bytes: bytes.clone(),
            kind: kind.clone(),
        });
        let ev = Ev::ToServer(Req {
            c,
            generation,
            slot,
            seqid,
            nonce,
            cachethis,
            sa_highest,
            spurious: None,
            kind: kind.clone(),
            bytes,
        });
        self.transmit(ev, kind != Kind::Misordered);
        let rto = retransmit_after(self.sc);
        self.at(self.now + rto, Ev::Retransmit { c, slot, nonce });
    }

    fn ops_of(&self, c: usize, kind: &Kind) -> Vec<NfsArgop4> {
        let putroot = NfsArgop4::Putfh(self.root_fh.clone());
        match kind {
            Kind::Create(name) => vec![
                putroot,
                NfsArgop4::Create(CreateArgs {
                    objtype: Createtype4::Dir,
                    objname: Component4(name.clone()),
                    createattrs: Fattr4::default(),
                }),
            ],
            Kind::Remove(name) => vec![putroot, NfsArgop4::Remove(Component4(name.clone()))],
            Kind::Getattr | Kind::Misordered => {
                vec![putroot, NfsArgop4::Getattr(Bitmap4::from_bits(&[1]))]
            }
            // No other request asks for the size: this one differs from the slot's last.
            Kind::FalseRetry => vec![putroot, NfsArgop4::Getattr(Bitmap4::from_bits(&[1, 4]))],
            Kind::Renew => Vec::new(),
            Kind::Return => vec![
                putroot,
                NfsArgop4::Lookup(Component4(file_name(c))),
                NfsArgop4::Close(CloseArgs {
                    seqid: 0,
                    open_stateid: self.clients[c].open,
                }),
            ],
            Kind::Conflict { victim } => vec![
                putroot,
                open_op(b"keeper", file_name(*victim), OPEN4_SHARE_DENY_BOTH),
            ],
        }
    }

    /// The retransmission timer of a request: if it is still unanswered, the same bytes again.
    fn retransmit(&mut self, c: usize, slot: u32, nonce: u64) {
        let cl = &self.clients[c];
        let Some(out) = cl.slots[slot as usize]
            .out
            .as_ref()
            .filter(|o| o.nonce == nonce)
        else {
            return;
        };
        let (generation, seqid) = (cl.generation, out.seqid);
        self.report.retransmissions += 1;
        let ev = Ev::ToServer(Req {
            c,
            generation,
            slot,
            seqid,
            nonce,
            cachethis: out.cachethis,
            sa_highest: out.sa_highest,
            spurious: None,
            kind: out.kind.clone(),
            bytes: out.bytes.clone(),
        });
        self.transmit(ev, false);
        let rto = retransmit_after(self.sc);
        self.at(self.now + rto, Ev::Retransmit { c, slot, nonce });
    }

    /// A reply reached client `c`.
    fn at_client(&mut self, req: Req, reply: Bytes) {
        let (c, slot) = (req.c, req.slot);
        let cl = &mut self.clients[c];
        let s = &mut cl.slots[slot as usize];
        let Some(out) = s.out.take_if(|o| o.nonce == req.nonce) else {
            return; // the answer to a stale duplicate: the client has moved on
        };
        let res = decode_res(&reply);
        // (A CREATE answered RETRY_UNCACHED_REP may have run: the client cannot know, so it
        // never removes that name; the model knows and checks it at the end.)
        if let Kind::Create(name) = &out.kind {
            if res.status == Nfsstat4::OK {
                cl.created.push(name.clone());
            }
        }
        if let Some(NfsResop4::Sequence(Res4::Ok(r))) = res.results.first() {
            cl.target = r.target_highest_slotid.min(self.sc.slots - 1);
        }
        if res.status == Nfsstat4::BADSESSION && !cl.revoked {
            self.violation(format!("client {c}: BADSESSION while not revoked"));
        }
        // What a misordered or false-retry request must get is the model's to say (at the
        // server): after a BADSLOT or a shrink, the client's intent and the slot can differ.
        match out.kind {
            Kind::Renew => {
                let t = self.now + self.sc.lease / 3;
                self.at(t, Ev::KeeperRenew);
            }
            Kind::Return => self.returned(c, res.status),
            Kind::Conflict { .. } => {}
            _ => self.busy_reply(c, slot),
        }
    }

    /// A busy-phase reply: think, or end the busy phase.
    fn busy_reply(&mut self, c: usize, slot: u32) {
        let cl = &mut self.clients[c];
        cl.completed += 1;
        if cl.phase == Phase::Busy && cl.completed < self.sc.requests {
            let t = self.now + self.g.gen_range(Duration::ZERO..=self.sc.think_max);
            self.at(t, Ev::Wake { c, slot });
            return;
        }
        if cl.phase == Phase::Busy {
            cl.phase = Phase::Draining;
        }
        let cl = &mut self.clients[c];
        if cl.phase == Phase::Draining && cl.slots.iter().all(|s| s.out.is_none()) {
            cl.phase = Phase::Quiet;
            self.go_quiet(c);
        }
    }

    /// The busy phase of `c` is over: its plan for the quiet phase.
    fn go_quiet(&mut self, c: usize) {
        let lease = self.sc.lease;
        match self.clients[c].fate {
            Fate::Keeper => self.keeper_renew(),
            Fate::Alone => {
                let t = self.now + lease.mul_f64(self.g.gen_range(0.3..2.5));
                self.at(
                    t,
                    Ev::Plan {
                        c,
                        kind: Kind::Return,
                    },
                );
            }
            Fate::Conflicted => {
                let conflict = self.now + lease.mul_f64(self.g.gen_range(0.3..2.0));
                let back = conflict + lease.mul_f64(self.g.gen_range(0.1..1.0));
                self.at(
                    conflict,
                    Ev::Plan {
                        c,
                        kind: Kind::Conflict { victim: c },
                    },
                );
                self.at(
                    back,
                    Ev::Plan {
                        c,
                        kind: Kind::Return,
                    },
                );
            }
        }
    }

    fn plan(&mut self, c: usize, kind: Kind) {
        match kind {
            Kind::Conflict { victim } if self.clients[victim].phase == Phase::Done => {
                // The victim came back before the keeper got to it: nothing left to test.
            }
            Kind::Conflict { victim } => {
                // The keeper's slot 0 may be renewing: any idle slot of the keeper will do.
                let keeper = &self.clients[0];
                match (0..=keeper.target).find(|&s| keeper.slots[s as usize].out.is_none()) {
                    Some(slot) if keeper.phase == Phase::Quiet => {
                        self.send(0, slot, Kind::Conflict { victim })
                    }
                    _ => {
                        let t = self.now + Duration::from_millis(100);
                        self.at(t, Ev::Plan { c, kind });
                    }
                }
            }
            Kind::Return => {
                if self.clients[c].slots[0].out.is_some() {
                    let t = self.now + Duration::from_millis(100);
                    self.at(t, Ev::Plan { c, kind });
                } else {
                    self.send(c, 0, Kind::Return);
                }
            }
            _ => unreachable!("only conflicts and returns are planned"),
        }
    }

    /// The keeper renews every third of a lease until every other client is done.
    fn keeper_renew(&mut self) {
        if self.clients[1..].iter().all(|c| c.phase == Phase::Done) {
            self.clients[0].phase = Phase::Done;
            return;
        }
        let keeper = &self.clients[0];
        match (0..=keeper.target).find(|&s| keeper.slots[s as usize].out.is_none()) {
            Some(slot) => self.send(0, slot, Kind::Renew),
            None => {
                let t = self.now + Duration::from_millis(100);
                self.at(t, Ev::KeeperRenew);
            }
        }
    }

    /// The answer to a quiet client's return.
    fn returned(&mut self, c: usize, status: Nfsstat4) {
        if self.clients[c].revoked {
            if status != Nfsstat4::BADSESSION {
                self.violation(format!(
                    "client {c}: revoked, but its return got {status:?}"
                ));
            }
            // Start again: a new record and session; it must be able to work.
            let old = self.clients[c].clientid;
            let (clientid, sessionid) = self.establish(c);
            if clientid == old {
                self.violation(format!(
                    "client {c}: the revoked client id {old:#x} came back"
                ));
            }
            let cl = &mut self.clients[c];
            cl.generation += 1;
            cl.clientid = clientid;
            cl.sessionid = sessionid;
            cl.revoked = false;
            cl.slots = (0..self.sc.slots).map(|_| ClientSlot::default()).collect();
            cl.target = self.sc.slots - 1;
            let m = &mut self.model[c];
            m.generation = cl.generation;
            m.clientid = clientid;
            m.revoked = false;
            m.slots = vec![ModelSlot::default(); self.sc.slots as usize];
            m.highest = self.sc.slots - 1;
            m.target = self.sc.slots - 1;
            m.renewed = self.now;
            self.reclaim_complete(c);
            let res = self.direct_in_session(c, vec![NfsArgop4::Putfh(self.root_fh.clone())]);
            if res.status != Nfsstat4::OK {
                self.violation(format!(
                    "client {c}: recovered session got {:?}",
                    res.status
                ));
            } else {
                self.report.recovered += 1;
            }
        } else if status == Nfsstat4::OK || status == Nfsstat4::RETRY_UNCACHED_REP {
            // (An uncached CLOSE whose reply was lost: the server side saw it pass.)
            self.report.courtesy_returns += 1;
        } else {
            self.violation(format!(
                "client {c}: kept its state, but CLOSE on return got {status:?}"
            ));
        }
        self.clients[c].phase = Phase::Done;
    }

    // ----- network -------------------------------------------------------------------------

    /// Puts a message on the network: a random delay, maybe lost, maybe duplicated.
    fn transmit(&mut self, ev: Ev, may_duplicate: bool) {
        if self.g.gen_bool(self.sc.loss_ratio) {
            return;
        }
        let delay = self.g.gen_range(Duration::ZERO..=self.sc.delay_max);
        if let (true, Ev::ToServer(req)) = (may_duplicate, &ev) {
            if self.g.gen_bool(self.sc.dup_ratio) {
                // A spurious copy, delivered any time: before the original, or long after the
                // client moved on (a stale duplicate).
                let late = self.g.gen_range(Duration::ZERO..=self.sc.delay_max * 20);
                let retirements = self.model[req.c]
                    .slots
                    .get(req.slot as usize)
                    .map_or(0, |s| s.retirements);
                let copy = Ev::ToServer(Req {
                    spurious: Some(retirements),
                    ..req.clone()
                });
                self.at(self.now + late, copy);
            }
        }
        self.at(self.now + delay, ev);
    }

    fn at(&mut self, t: Duration, ev: Ev) {
        self.event_seq += 1;
        self.events.insert((t, self.event_seq), ev);
    }

    fn instant(&self) -> Instant {
        self.epoch + self.now
    }

    // ----- the server and the model --------------------------------------------------------

    /// A request reached the server: the model's prediction, the real processor, the check.
    fn at_server(&mut self, req: Req) {
        let (c, generation, slot, seqid) = (req.c, req.generation, req.slot, req.seqid);
        let crossed = |m: &ModelClient| {
            let r = m.slots.get(slot as usize).map_or(0, |s| s.retirements);
            req.spurious.is_some_and(|at| at != r)
        };
        if !DELIVER_ACROSS_SHRINK
            && m_generation_ok(&self.model[c], generation)
            && crossed(&self.model[c])
        {
            self.report.dropped_across_shrink += 1;
            return;
        }
        let (cachethis, kind) = (req.cachethis, &req.kind);
        let m = &self.model[c];
        let stale_session = m.generation != generation || m.revoked;
        let ms = m.slots[slot as usize].clone();
        let reply = self.compound(&req.bytes);
        let res = decode_res(&reply);
        let who = format!("client {c} slot {slot} seqid {seqid} {kind:?}");
        if stale_session {
            self.report.badsession += 1;
            if res.status != Nfsstat4::BADSESSION {
                self.violation(format!("{who}: revoked session got {:?}", res.status));
            }
        } else if slot > m.highest {
            // No renewal: a SEQUENCE error.
            self.report.badslot += 1;
            if res.status != Nfsstat4::BADSLOT {
                self.violation(format!(
                    "{who}: above the table (highest {}), got {:?}",
                    m.highest, res.status
                ));
            }
        } else if seqid == ms.last.wrapping_add(1)
            || (ms.retired && seqid == 1 && !(ms.last == 1 && req.bytes == ms.request))
        {
            // (Sequence id 1 on a retired slot restarts the slot, unless it is the very
            // request that last ran as 1 there: see below; and a request meant to be
            // misordered is in order when an earlier one got BADSLOT.)
            self.executed(
                &req.bytes, c, slot, seqid, cachethis, kind, &reply, &res, &who,
            );
            self.client_highest(c, req.sa_highest);
            if let Some(NfsResop4::Sequence(Res4::Ok(r))) = res.results.first() {
                let m = &self.model[c];
                if (r.highest_slotid, r.target_highest_slotid) != (m.highest, m.target) {
                    let got = (r.highest_slotid, r.target_highest_slotid);
                    let want = (m.highest, m.target);
                    self.violation(format!("{who}: (highest, target) {got:?}, model {want:?}"));
                }
            }
        } else if seqid == ms.last && ms.last != 0 && req.bytes != ms.request {
            // A SEQUENCE error: no renewal.
            self.report.false_retries += 1;
            if res.status != Nfsstat4::SEQ_FALSE_RETRY {
                self.violation(format!("{who}: a false retry got {:?}", res.status));
            }
        } else if seqid == ms.last && ms.last != 0 {
            match ms.reply {
                Some((cached, true)) => {
                    // A replay passed SEQUENCE: it renews the lease.
                    self.model[c].renewed = self.now;
                    self.client_highest(c, req.sa_highest);
                    self.report.replays += 1;
                    if cached != reply {
                        self.violation(format!("{who}: the replay is not the cached reply"));
                    }
                }
                Some((_, false)) => {
                    let alone = matches!(kind, Kind::Renew);
                    self.uncached_retry(c, req.sa_highest, alone, &res, &who)
                }
                None => self.violation(format!("{who}: model has no reply for the last seqid")),
            }
        } else {
            self.report.misordered += 1;
            if res.status != Nfsstat4::SEQ_MISORDERED {
                self.violation(format!(
                    "{who}: expected SEQ_MISORDERED (slot at {}), got {:?}",
                    ms.last, res.status
                ));
            }
        }
        self.transmit(Ev::ToClient { req, reply }, false);
    }

    /// The model predicted an execution: check it, then record its reply and effects.
    #[allow(clippy::too_many_arguments)]
    fn executed(
        &mut self,
        request: &Bytes,
        c: usize,
        slot: u32,
        seqid: u32,
        cachethis: bool,
        kind: &Kind,
        reply: &Bytes,
        res: &Compound4Res,
        who: &str,
    ) {
        self.report.executed += 1;
        let seq_ok = matches!(res.results.first(), Some(NfsResop4::Sequence(Res4::Ok(_))));
        if !seq_ok {
            self.violation(format!(
                "{who}: a new request was refused: {:?}",
                res.status
            ));
            return;
        }
        let m = &mut self.model[c];
        let was_expired = self.now >= m.renewed + self.sc.lease;
        m.renewed = self.now;
        let retirements = m.slots[slot as usize].retirements;
        m.slots[slot as usize] = ModelSlot {
            last: seqid,
            retired: false,
            retirements,
            request: request.clone(),
            reply: Some((reply.clone(), cachethis)),
        };
        let expect = |ok: bool, what: &str| (!ok).then(|| format!("{who}: {what}"));
        let wrong = match kind {
            Kind::Create(name) => {
                let fresh = !self.names.contains_key(name);
                self.names.insert(name.clone(), true);
                expect(
                    fresh && res.status == Nfsstat4::OK,
                    &format!("CREATE ran twice or failed: {:?}", res.status),
                )
            }
            Kind::Remove(name) => {
                let present = self.names.get(name) == Some(&true);
                self.names.insert(name.clone(), false);
                expect(
                    present && res.status == Nfsstat4::OK,
                    &format!("REMOVE ran twice or failed: {:?}", res.status),
                )
            }
            Kind::Getattr | Kind::Renew => expect(res.status == Nfsstat4::OK, "failed"),
            Kind::Misordered | Kind::FalseRetry => expect(res.status == Nfsstat4::OK, "failed"),
            Kind::Return => {
                // CLOSE of the open stateid: the client kept its state (it was not revoked).
                self.model[c].closed = true;
                if res.status != Nfsstat4::OK {
                    Some(format!("{who}: return failed: {:?}", res.status))
                } else {
                    self.report.courtesy_kept += u64::from(was_expired);
                    None
                }
            }
            Kind::Conflict { victim } => self.conflict_outcome(*victim, res.status, who),
        };
        if let Some(w) = wrong {
            self.violation(w);
        }
    }

    /// A retry of a request whose reply was not kept (not asked for, or dropped when its slot
    /// was retired): SEQUENCE passes (renewing the lease, applying `sa_highest_slotid`) and
    /// the op after it gets NFS4ERR_RETRY_UNCACHED_REP; nothing runs again.
    fn uncached_retry(
        &mut self,
        c: usize,
        sa_highest: u32,
        sequence_only: bool,
        res: &Compound4Res,
        who: &str,
    ) {
        self.report.uncached_retries += 1;
        self.model[c].renewed = self.now;
        self.client_highest(c, sa_highest);
        let seq_ok = matches!(res.results.first(), Some(NfsResop4::Sequence(Res4::Ok(_))));
        // A SEQUENCE sent alone has nothing after it to carry the error: it is answered again.
        let alone = res.results.len() == 1 && res.status == Nfsstat4::OK && sequence_only;
        if !seq_ok || !(alone || res.status == Nfsstat4::RETRY_UNCACHED_REP) {
            self.violation(format!("{who}: uncached retry got {:?}", res.results));
        }
    }

    /// The model of the slot table's shrink (§18.46.3): once the client's `sa_highest_slotid`
    /// is at or below the target, the enforced limit drops to it, and the used slots above
    /// are retired (their replies dropped).
    fn client_highest(&mut self, c: usize, sa_highest: u32) {
        let m = &mut self.model[c];
        if sa_highest <= m.target && m.target < m.highest {
            self.report.slot_shrinks += 1;
            m.highest = m.target;
            for s in m.slots.iter_mut().skip(m.highest as usize + 1) {
                if s.last != 0 {
                    s.retired = true;
                    s.retirements += 1;
                    if let Some((_, cached)) = &mut s.reply {
                        *cached = false;
                    }
                }
            }
        }
    }

    /// The server's slot policy sets a new target for client `c`'s session: raising it raises
    /// the limit at once; lowering it waits for the client.
    fn slot_target(&mut self, c: usize, target: u32) {
        if self.model[c].revoked {
            return;
        }
        let sessionid = self.clients[c].sessionid;
        if let Some(s) = self.nfs.state.lock().unwrap().session_mut(&sessionid) {
            s.set_slot_target(target);
        }
        let m = &mut self.model[c];
        m.target = target.min(self.sc.slots - 1);
        m.highest = m.highest.max(m.target);
    }

    /// The keeper's DENY_BOTH OPEN of `victim`'s file ran: it must have been refused while the
    /// victim's lease ran, and must have revoked the victim once it had run out.
    fn conflict_outcome(&mut self, victim: usize, status: Nfsstat4, who: &str) -> Option<String> {
        let expired = self.now >= self.model[victim].renewed + self.sc.lease;
        let gone = self
            .nfs
            .state
            .lock()
            .unwrap()
            .clients()
            .get(self.model[victim].clientid)
            .is_err();
        if self.model[victim].revoked {
            // Expired at a tick already: its open went with it.
            return (status != Nfsstat4::OK || !gone)
                .then(|| format!("{who}: OPEN of an expired client's file got {status:?}"));
        }
        if self.model[victim].closed {
            // The victim's return closed the file first: nothing to conflict with.
            return (status != Nfsstat4::OK || gone)
                .then(|| format!("{who}: OPEN of a closed file got {status:?}, gone={gone}"));
        }
        match (expired, status) {
            (false, Nfsstat4::SHARE_DENIED) if !gone => {
                self.report.share_denied += 1;
                None
            }
            (true, Nfsstat4::OK) if gone => {
                self.report.revoked += 1;
                self.model[victim].revoked = true;
                self.clients[victim].revoked = true;
                None
            }
            _ => Some(format!(
                "{who}: victim lease expired={expired}, OPEN got {status:?}, victim record gone={gone}"
            )),
        }
    }

    /// The lease task's tick, and the courtesy check after it.
    fn tick(&mut self) {
        self.report.ticks += 1;
        let now = self.instant();
        let (expired, next) = {
            let mut st = self.nfs.state.lock().unwrap();
            (st.tick(now), st.next_wakeup())
        };
        // Expired for real: courtesy clients `courtesy_max` after their lease ran out (every
        // client here has a session, so none is expired at the end of its lease).
        let courtesy_max = self.sc.courtesy_max;
        let mut want_expired: Vec<u64> = self
            .model
            .iter()
            .filter(|m| !m.revoked && self.now >= m.renewed + self.sc.lease + courtesy_max)
            .map(|m| m.clientid)
            .collect();
        want_expired.sort_unstable();
        if expired != want_expired {
            self.violation(format!(
                "a tick expired {expired:x?}, the model says {want_expired:x?}"
            ));
        }
        for c in 0..self.model.len() {
            if want_expired.contains(&self.model[c].clientid) {
                self.report.courtesy_expired += 1;
                self.model[c].revoked = true;
                self.clients[c].revoked = true;
            }
        }
        // The next wake-up is the next lease to run out, or a courtesy client's last day.
        let want = self
            .model
            .iter()
            .filter(|m| !m.revoked)
            .map(|m| {
                let end = m.renewed + self.sc.lease;
                if self.now >= end {
                    end + courtesy_max
                } else {
                    end
                }
            })
            .min()
            .map(|t| self.epoch + t);
        if next != want {
            self.violation(format!("next wake-up {next:?}, the model says {want:?}"));
        }
        for c in 0..self.model.len() {
            let m = &self.model[c];
            if m.revoked {
                continue;
            }
            let st = self.nfs.state.lock().unwrap();
            let Ok(rec) = st.clients().get(m.clientid) else {
                drop(st);
                self.violation(format!("client {c}: record gone though never revoked"));
                continue;
            };
            let should = self.now >= m.renewed + self.sc.lease;
            let is = rec.courtesy_since;
            drop(st);
            match (should, is) {
                (false, None) => {}
                (true, Some(since)) => {
                    if since != self.epoch + m.renewed + self.sc.lease {
                        self.violation(format!("client {c}: courtesy since the wrong instant"));
                    }
                    if since == now {
                        self.report.courtesy += 1;
                    }
                }
                _ => self.violation(format!(
                    "client {c} at {:?}: renewed at {:?}, lease {:?}, courtesy {:?}",
                    self.now, m.renewed, self.sc.lease, is
                )),
            }
        }
    }

    /// Every name the model says exists is in the export's root, and no other.
    fn check_names(&mut self) {
        let caller = Caller::with_cred(Cred::root());
        let root: FileHandle = self.fs.root_handle();
        let mut names: Vec<(Bytes, bool)> =
            self.names.iter().map(|(k, v)| (k.clone(), *v)).collect();
        names.sort();
        for (name, exists) in names {
            let found = self.fs.lookup(&caller, &root, &name).is_ok();
            if found != exists {
                self.violation(format!(
                    "{}: model says exists={exists}, the file system found={found}",
                    String::from_utf8_lossy(&name)
                ));
            }
        }
    }

    // ----- direct calls (setup and recovery) -----------------------------------------------

    fn compound(&self, record: &[u8]) -> Bytes {
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
        match drive_ready(&self.nfs, &exec, &from, record) {
            Outcome::Reply(b) => b,
            Outcome::GarbageArgs => panic!("the simulator sent a malformed COMPOUND"),
        }
    }

    fn direct(&self, ops: Vec<NfsArgop4>) -> Compound4Res {
        decode_res(&self.compound(&encode_args(ops)))
    }

    /// EXCHANGE_ID and CREATE_SESSION for client `c` (the shared test client's set-up); its
    /// RECLAIM_COMPLETE is [`World::reclaim_complete`], on a slot the model knows of.
    fn establish(&mut self, c: usize) -> (u64, SessionId4) {
        let cfg = SessionConfig {
            reclaim_complete: false,
            ..SessionConfig::new(format!("sim client {c}").as_bytes(), self.sc.slots)
        };
        let s = Session4::establish(&cfg, |ops| self.direct(ops));
        assert_eq!(
            s.granted.fore_chan_attrs.maxrequests, self.sc.slots,
            "slots granted"
        );
        (s.clientid, s.sessionid)
    }

    /// RECLAIM_COMPLETE of client `c`, before it opens anything (RFC 8881 §18.51.3), on slot 0
    /// as the model counts it.
    fn reclaim_complete(&mut self, c: usize) {
        let res = self.direct_in_session(c, vec![NfsArgop4::ReclaimComplete(false)]);
        if res.status != Nfsstat4::OK {
            self.violation(format!("client {c}: RECLAIM_COMPLETE got {:?}", res.status));
        }
    }

    /// A SEQUENCE'd COMPOUND sent straight to the processor on slot 0 (kept in the model).
    fn direct_in_session(&mut self, c: usize, ops: Vec<NfsArgop4>) -> Compound4Res {
        let seqid = self.clients[c].slots[0].seqid + 1;
        self.clients[c].slots[0].seqid = seqid;
        let mut all = vec![NfsArgop4::Sequence(SequenceArgs {
            sessionid: self.clients[c].sessionid,
            sequenceid: seqid,
            slotid: 0,
            highest_slotid: 0,
            cachethis: true,
        })];
        all.extend(ops);
        let request = encode_args(all);
        let reply = self.compound(&request);
        self.model[c].slots[0] = ModelSlot {
            last: seqid,
            retired: false,
            retirements: self.model[c].slots[0].retirements,
            request,
            reply: Some((reply.clone(), true)),
        };
        self.model[c].renewed = self.now;
        decode_res(&reply)
    }

    /// OPEN (create) of client `c`'s own file with share BOTH/NONE: the state a courtesy
    /// client keeps.
    fn open_own_file(&mut self, c: usize) {
        let owner = format!("owner {c}");
        let res = self.direct_in_session(
            c,
            vec![
                NfsArgop4::Putfh(self.root_fh.clone()),
                open_op(owner.as_bytes(), file_name(c), OPEN4_SHARE_DENY_NONE),
            ],
        );
        let Some(NfsResop4::Open(Res4::Ok(o))) = res.results.get(2) else {
            panic!("client {c}: OPEN failed: {res:?}")
        };
        self.clients[c].open = o.stateid;
    }

    /// The export root's handle, looked up by client 0 (the ops then PUTFH it).
    fn export_root_fh(&mut self) -> NfsFh4 {
        let res = self.direct_in_session(
            0,
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

    fn violation(&mut self, v: String) {
        // Bounded: the first few tell the story; a run that goes wrong goes wrong everywhere.
        if self.report.violations.len() < 20 {
            self.report
                .violations
                .push(format!("t={:?}: {v}", self.now));
        }
    }
}

fn open_op(owner: &[u8], name: Bytes, deny: u32) -> NfsArgop4 {
    NfsArgop4::Open(OpenArgs {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH,
        share_deny: deny,
        owner: StateOwner4 {
            clientid: 0,
            owner: Opaque4(Bytes::copy_from_slice(owner)),
        },
        openhow: Openflag4::Create(Createhow4::Unchecked(Fattr4::default())),
        claim: OpenClaim4::Null(Component4(name)),
    })
}

fn encode_args(ops: Vec<NfsArgop4>) -> Bytes {
    let args = Compound4Args {
        tag: Utf8Str(Bytes::from_static(b"sim")),
        minorversion: 1,
        ops,
    };
    let mut w = Writer::new();
    args.pack(&mut w);
    w.into_bytes()
}

fn decode_res(b: &Bytes) -> Compound4Res {
    let segs = [b.clone()];
    let mut r = Reader::new(&segs);
    Compound4Res::decode(&mut r, &CompoundLimits::default()).expect("the server's reply decodes")
}
