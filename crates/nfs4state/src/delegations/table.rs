//! Delegations (RFC 8881 §10.2, §10.4, §18.16 OPEN's `open_delegation4`, §18.6 DELEGRETURN,
//! §20.2 CB_RECALL): which client may cache a file, which recalls are under way, which
//! delegations were revoked. Pure: time is an argument, callbacks are tokens that
//! [`crate::state::State4`] hands to the back channel, conflicts are decided by the caller's view of
//! the open table.
//!
//! # What is granted
//! A read delegation lets a client serve opens for reading, READs and GETATTRs from its
//! cache. A write delegation also lets it cache writes and the file's size, and open the file
//! any way without asking (§10.4): other clients' GETATTRs then need CB_GETATTR (below), and
//! every other client's access to the file is a conflict. knfsd grants write delegations
//! since 6.6 and asks their holders with CB_GETATTR since 6.10; this follows it.
//!
//! A read delegation goes to an OPEN for reading only (no write access), a write delegation
//! to an OPEN for writing, with or without reading, when the client may also read the file
//! (`GrantAsk::may_read`, below), and
//! ```text
//!   the client did not say OPEN4_SHARE_WANT_NO_DELEG
//!   its back channel works (PathState::Up)        (§10.2.1: we must be able to recall it)
//!   read:  no other client has the file open for writing or denies reading (caller's check),
//!          and no other client holds a write delegation of it
//!   write: no other client has the file open at all, nor holds any delegation of it,
//!          and write delegations are on (`DelegConfig::write`; `--no-write-delegations`
//!          turns them off)
//!   no recall of the file is under way, and none ended recently  (the "recently recalled" set)
//!   the client holds no delegation of the file already
//!   the per-client and overall bounds leave room
//! ```
//! Other clients may hold read delegations of the same file at the same time, as in knfsd:
//! readers do not conflict.
//!
//! The holder of a write delegation reads under it too (a page cache fills partial pages
//! before it writes them back), and the v4 data path does not check READ permission per op,
//! so the client must be allowed to read the file. An OPEN for reading was checked for that;
//! a write-only OPEN (`tar`, `cp` and compilers create their outputs O_WRONLY, so this is the
//! small-file case) gets its write delegation only when the caller finds that the client may
//! read the file as well (`GrantAsk::may_read`: the server's OPEN asks the backend's ACCESS
//! for READ). Without it (a file created with mode 0200, say) the answer is no delegation,
//! WND4_NOT_SUPP_UPGRADE when asked by want bits. knfsd decides the same way since 2025
//! (before, from 6.6, it granted write delegations to OPEN4_SHARE_ACCESS_BOTH only): for a
//! write-only OPEN it opens the file for reading itself, which checks read permission, and
//! grants none when that fails. A write delegation carries no space limit (NFS_LIMIT_SIZE of
//! 2^64-1 bytes, as knfsd) and an empty ACE.
//!
//! Write delegations are on by default (`--no-write-delegations` turns them off). Measured
//! with the Linux 6.1 client in the kernel guest: stat and read by another client, recalls,
//! and fcntl/flock between two clients work with them (`interop_kernel_v42.rs`). They were
//! off by default for a while because the kill -9 restart test (`interop_kernel_grace.rs`)
//! lost a byte-range lock: Linux takes fcntl locks locally under a delegation, and at
//! reclaim skips the locks of an open it still counts as delegated, so when this server
//! answered CLAIM_PREVIOUS with no delegation the lock never reached the restarted server.
//! The same held for read locks under read delegations. Both kinds are now granted back at
//! CLAIM_PREVIOUS ("Reboot recovery" below), and that test checks from a second client that
//! the restarted server knows both a write lock and a read lock the guest held under
//! delegations.
//!
//! # Conflicts
//! | op of another client | read delegation | write delegation |
//! |---|---|---|
//! | OPEN for reading, READ (anonymous too) | none | recall |
//! | OPEN for writing or denying reads, WRITE, SETATTR, REMOVE, RENAME, LINK, COPY's target | recall | recall |
//! | GETATTR of size or change | none | CB_GETATTR (below), no recall |
//!
//! The holder's own ops never conflict: it reads and writes under the delegation stateid
//! (a WRITE under a read delegation's is NFS4ERR_OPENMODE), or under its open stateids.
//!
//! # CB_GETATTR (§10.4.3, §20.1)
//! A write delegation's holder may have written data the server has not seen, so another
//! client's GETATTR asking for the size or the change attribute is answered from the holder's
//! view. Nothing here waits (knfsd holds the GETATTR for a few milliseconds instead):
//! ```text
//!   GETATTR(size|change) of another client
//!     ├ fresh answer (< CB_GETATTR_FRESH old) ─▶ OK with the holder's size and change
//!     └ else ─▶ CB_GETATTR(fh, {size, change}) queued; NFS4ERR_DELAY; the client retries
//!   CB_GETATTR answered OK ─▶ stored with its time; the retry finds it
//!   CB_GETATTR error, no answer, no path ─▶ the delegation is recalled (the GETATTR keeps
//!     getting NFS4ERR_DELAY until it is returned or revoked, like any conflicting op)
//! ```
//! The change attribute other clients see: the holder's answer is compared with the last one
//! (at first with the size and change of the grant, which the holder also started from); each
//! answer that differs counts once, and the server's own change plus that count is shown,
//! with the reported size (the server's own size until the holder reports a change). So the
//! change moves on whenever the holder reports something new (§10.4.3's rule that a modified
//! file shows a new change value) and never goes back while the delegation lasts. After the
//! return the server's own attribute shows the holder's flushed data; LocalFs's change is
//! made from the ctime in nanoseconds, so the flush moves it far past the count. An answer
//! serves the first GETATTR after it, however late (a client that backs off longer than
//! the freshness must still get its answer: Linux doubles its wait after each DELAY, up to
//! 15 s), and every GETATTR within [`CB_GETATTR_FRESH`] (2 s) of it: less than Linux's own
//! attribute cache.
//!
//! # Life of a delegation
//! ```text
//!   granted (OPEN) ──DELEGRETURN──────────────────────────────────────────▶ gone
//!     │ a conflicting op from another client (the table above), or a CB_GETATTR that
//!     │ failed: the op gets NFS4ERR_DELAY; or from an NFSv3 client (WRITE, SETATTR,
//!     │ REMOVE, RENAME, LINK, truncating CREATE): the v3 op gets NFS3ERR_JUKEBOX
//!     ▼
//!   recalling ── CB_RECALL queued on a session of the holder ── sent (the clock starts)
//!     │ DELEGRETURN ──────────────────────────────────────────────────────▶ gone
//!     │ no DELEGRETURN within the lease after the CB_RECALL went out, or after it could not
//!     │ be sent at all (no path)
//!     ▼
//!   revoked: the holder's SEQUENCE shows RECALLABLE_STATE_REVOKED, its stateid gets
//!     NFS4ERR_DELEG_REVOKED (TEST_STATEID, I/O, DELEGRETURN) until FREE_STATEID ──▶ gone
//! ```
//! The timeout starts when the recall is *sent*, not queued: a CB_RECALL waiting behind
//! another callback on the session's one slot is not the client's fault (knfsd stamps the
//! delegation in its callback's prepare step, for the same reason). A recall that cannot go
//! out (the path is down, the queue full) starts the clock when that is found out, so a
//! dead client never blocks the file for longer than a lease. A client that answers
//! CB_RECALL with NFS4ERR_DELAY, or whose slot was busy, gets the recall queued again at the
//! next tick, under the same clock. So does one that answers NFS4ERR_BADHANDLE or
//! NFS4ERR_BAD_STATEID: the CB_RECALL overtook the OPEN reply that granted the delegation,
//! and the client does not know it yet (knfsd retries these too). Seen with the Linux client
//! when two clients open a file at once: the first got a write delegation, the second's OPEN
//! recalled it before the first had taken it in; answered as a refusal, that cost a lease. Nothing here waits: the conflicting caller is told
//! NFS4ERR_DELAY and retries, and revocation happens in [`DelegTable::tick`].
//!
//! # NFSv3 callers
//! sluice serves v3 and v4 on one export, so a v3 change of a delegated file must recall the
//! delegation too, or the holder keeps serving its cached copy. The v3 procedures reach this
//! table only through the server's `recall::RecallGate`, which its COMPOUND processor (`Nfs4`)
//! implements with [`crate::state::State4::break_delegations`] and no client id: the same recall,
//! clock, revocation and courtesy rules as for a v4 caller, with NFS3ERR_JUKEBOX in place of
//! NFS4ERR_DELAY (as knfsd answers a v3 client while it breaks a lease). The v3 hot path
//! reads [`DelegTable::published`], the live count this table keeps in an atomic as
//! records come and go, and takes no lock while it is 0. Which v3 procedures conflict, and
//! what is left open, is in the server's `recall` module.
//!
//! # Recently recalled files
//! knfsd keeps a bloom filter of files recalled in the last 30-60 s and grants no delegation
//! on them, so a file that two clients share does not ping-pong between grant and recall.
//! Here: a set of files with the time of their recall, [`RECENT_FOR`] long, at most
//! [`RECENT_MAX`] entries (the oldest forgotten first: forgetting only risks one more recall).
//!
//! # Bounds
//! | what | bound | at the bound |
//! |---|---|---|
//! | delegations of one client (held, recalling, revoked) | `per_client_max` (1024) | no new one: OPEN_DELEGATE_NONE_EXT, WND4_RESOURCE |
//! | delegations overall | `total_max` (16384) | the same |
//! | recently recalled files | [`RECENT_MAX`] (4096) | the oldest entry is forgotten |
//!
//! Revoked records count against the bounds until the client frees them; a client's expiry
//! or DESTROY_CLIENTID drops all of its records. Nothing is reclaimed from another client:
//! a delegation is an optimisation, so a full table just stops granting them.
//!
//! # Reboot recovery
//! CLAIM_DELEGATE_PREV and CLAIM_DELEG_PREV_FH (a client that rebooted itself) are answered
//! NFS4ERR_NOTSUPP, which §18.16.3 allows (knfsd answers the same).
//!
//! A *server* restart is different: the client reclaims each open with CLAIM_PREVIOUS and
//! names the delegation it held (`delegate_type`). A read delegation named so is granted back
//! ([`DelegTable::grant_reclaimed`]), as knfsd does, in grace, where no other client can have
//! taken conflicting state: with its `recall` flag set when the back channel is not up yet,
//! which asks the client to return it at once (the clock of a recall starts then). This is
//! not an optimisation. The Linux client keeps byte-range locks local under a delegation, and
//! at reclaim it skips the locks of an open it still counts as delegated (its
//! `nfs4_lock_reclaim` returns early for such a state): a delegation refused at
//! CLAIM_PREVIOUS would leave those locks unknown to the restarted server. Granted back, the
//! delegation still covers them, and a later recall makes the client send them (LOCK) before
//! its DELEGRETURN.
//!
//! A write delegation named so is granted back too, when write delegations are on (knfsd
//! grants none; without one, Linux loses the locks it held under it, as above). Its view of
//! the size and change starts from the file's at the reclaim.

use crate::ids::Entropy;
use crate::opens::Other;
use bytes::Bytes;
use sluice_xdr::nfs4::ops::{
    NfsSpaceLimit4, OpenDelegation4, OpenNoneDelegation4, OpenReadDelegation4,
    OpenWriteDelegation4, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_ACCESS_WRITE,
    OPEN4_SHARE_WANT_CANCEL, OPEN4_SHARE_WANT_MASK, OPEN4_SHARE_WANT_NO_DELEG,
    OPEN4_SHARE_WANT_NO_PREFERENCE, OPEN4_SHARE_WANT_READ_DELEG, OPEN4_SHARE_WANT_WRITE_DELEG,
    WND4_CANCELLED, WND4_NOT_SUPP_UPGRADE, WND4_NOT_WANTED, WND4_WRITE_DELEG_NOT_SUPP_FTYPE,
};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{ClientId4, Nfsace4, SessionId4, Stateid4, OTHER_SIZE};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Marks the index of a delegation stateid's `other` (open stateids count from 1, lock
/// stateids set the top bit): the three tables never share an `other`.
const DELEG_INDEX_BIT: u32 = 0x4000_0000;
/// How long a recalled file gets no new delegation. 30 s: the lower end of knfsd's bloom
/// filter (swapped every 30 s, so it remembers 30-60 s).
pub const RECENT_FOR: Duration = Duration::from_secs(30);
/// Recently recalled files remembered at most (module notes).
pub const RECENT_MAX: usize = 4096;
/// How long a CB_GETATTR answer stands in for the holder's view of the file (module notes:
/// CB_GETATTR). 2 s: longer than a client's first retry after NFS4ERR_DELAY (Linux waits
/// 100 ms, the sluice client 1 s... at most), shorter than Linux's own attribute cache
/// (`acregmin`, 3 s), so a client that polls a file's size sees the holder's writes as soon
/// as it would see a local writer's.
pub const CB_GETATTR_FRESH: Duration = Duration::from_secs(2);

/// The bounds of the table (module notes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelegConfig {
    /// Delegations of one client, held, recalling or revoked. Default 1024: a desktop's
    /// working set of files opened for reading.
    pub per_client_max: usize,
    /// Delegations overall. Default 16384 (a record is ~200 bytes: ~3 MiB at the bound).
    pub total_max: usize,
    /// Grant write delegations (default true; `sluice serve --no-write-delegations` turns
    /// them off).
    pub write: bool,
}

impl Default for DelegConfig {
    fn default() -> Self {
        Self {
            per_client_max: 1024,
            total_max: 16384,
            write: true,
        }
    }
}

/// Read or write delegation (`open_delegation_type4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
}

/// A file's size and change attribute (bytes; the opaque counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SizeChange {
    pub size: u64,
    pub change: u64,
}

/// Where a write delegation's CB_GETATTR stands (module notes: CB_GETATTR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CbGetattr {
    /// None asked, or the last answer is stale.
    Idle,
    /// Another client's GETATTR wants one: to be queued by the caller.
    Wanted,
    /// On its way as (session, token).
    Queued(SessionId4, u64),
    /// Answered at this time; `true` once a GETATTR has used the answer.
    Answered(Instant, bool),
}

/// What a write delegation's holder told us of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteView {
    /// The server's size and change when the delegation was granted (the holder's start).
    pub granted: SizeChange,
    /// The last size and change the holder reported (`granted` until it reports).
    pub last: SizeChange,
    /// How many CB_GETATTR answers reported something new (module notes): the change
    /// attribute other clients see is the server's plus this.
    pub bumps: u64,
    pub getattr: CbGetattr,
}

/// The answer to another client's GETATTR of size or change (module notes: CB_GETATTR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetattrView {
    /// No other client holds a write delegation: the server's own attributes.
    Server,
    /// The holder's view: the size it reported if it modified the file (`None`: the
    /// server's), and what to add to the server's change attribute.
    Holder { size: Option<u64>, change_bump: u64 },
    /// A CB_GETATTR or a recall is under way: NFS4ERR_DELAY.
    Delay,
}

/// Where one delegation stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DelegStatus {
    Held,
    /// Recalled: `queued` is the CB_RECALL's (session, token) while it waits for its
    /// answer; `since` is when the clock started (sent, or found unsendable), `None` until
    /// then.
    Recalling {
        queued: Option<(SessionId4, u64)>,
        since: Option<Instant>,
    },
    /// Revoked at this time; kept for NFS4ERR_DELEG_REVOKED until FREE_STATEID.
    Revoked(Instant),
}

/// One delegation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deleg {
    pub clientid: ClientId4,
    /// The file, as the open table keys it (`FileSystem::state_key`: one key for all of the
    /// file's handles, so a conflict through another hard link finds the delegation).
    pub file: Bytes,
    /// The handle the holder opened the file by (its `nfs_fh4`): what CB_RECALL and
    /// CB_GETATTR name, since the holder knows the file by it.
    pub fh: Bytes,
    pub status: DelegStatus,
    /// `Some` for a write delegation.
    pub write: Option<WriteView>,
}

impl Deleg {
    pub fn kind(&self) -> Kind {
        match self.write {
            Some(_) => Kind::Write,
            None => Kind::Read,
        }
    }

    fn live(&self) -> bool {
        !matches!(self.status, DelegStatus::Revoked(_))
    }
}

/// Counters for `sluice stats` (monotonic).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DelegCounters {
    /// Delegations granted, read and write.
    pub granted: u64,
    pub granted_write: u64,
    /// CB_GETATTRs put on the wire, and answered with attributes.
    pub cb_getattr_sent: u64,
    pub cb_getattr_answered: u64,
    /// CB_GETATTRs that failed (an error, no answer): each recalls its delegation.
    pub cb_getattr_failed: u64,
    /// CB_RECALLs put on the wire.
    pub recalls_sent: u64,
    /// CB_RECALLs the client answered (any status but a transport failure).
    pub recalls_answered: u64,
    /// CB_RECALLs that got no answer (timed out, connection gone, undecodable).
    pub recalls_timed_out: u64,
    /// Delegations revoked because they were not returned within the lease.
    pub revoked: u64,
    /// Delegations returned (DELEGRETURN), recalled or not.
    pub returned: u64,
}

/// What an OPEN asked for and what the caller knows about the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantAsk {
    /// `share_access` as sent (access, want and signal bits).
    pub share_access: u32,
    /// The client's back channel works.
    pub callback_up: bool,
    /// Another client has the file open for writing, or denies reading, or an NFSv3 host
    /// holds NLM locks on it.
    pub contended: bool,
    /// Another client has the file open at all (a write delegation needs a sole opener).
    pub others_open: bool,
    /// The file's size and change now (a write delegation's starting point).
    pub attrs: SizeChange,
    /// The client may read the file (module notes: a write-only OPEN gets a write delegation
    /// only then). Implied by an OPEN for reading; for a write-only OPEN the caller checks
    /// read permission.
    pub may_read: bool,
}

/// How a recall answer came back (from the back channel's [`crate::callback::CbDone`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecallAnswer {
    /// CB_RECALL answered OK: the client will DELEGRETURN.
    Ok,
    /// The client (or its CB_SEQUENCE) said NFS4ERR_DELAY: queue it again.
    Delay,
    /// The client answered with another error (e.g. it does not know the stateid): it will
    /// not return it; the clock runs out.
    Refused,
    /// No answer at all (timed out, path down).
    Lost,
}

/// All delegations of one server instance.
#[derive(Debug)]
pub struct DelegTable {
    cfg: DelegConfig,
    boot_epoch: u32,
    delegs: HashMap<Other, Deleg>,
    by_file: HashMap<Bytes, Vec<Other>>,
    per_client: HashMap<ClientId4, usize>,
    /// Revoked records per client (SEQUENCE asks on every call).
    revoked_per_client: HashMap<ClientId4, usize>,
    /// Recently recalled files, oldest first, and their recall time.
    recent: VecDeque<(Bytes, Instant)>,
    /// CB_RECALLs (session, token) still on their way whose delegation was returned or
    /// revoked meanwhile (a client may DELEGRETURN before its CB_RECALL reply reaches us):
    /// their answers still count. At most [`RECENT_MAX`], the oldest forgotten.
    orphans: VecDeque<(SessionId4, u64)>,
    next_index: u32,
    /// Live records (held or recalling), published for readers outside the state's lock
    /// ([`DelegTable::published`]).
    published: Arc<AtomicUsize>,
    pub counters: DelegCounters,
}

impl DelegTable {
    pub fn new(boot_epoch: u32, cfg: DelegConfig) -> Self {
        Self {
            cfg,
            boot_epoch,
            delegs: HashMap::new(),
            by_file: HashMap::new(),
            per_client: HashMap::new(),
            revoked_per_client: HashMap::new(),
            recent: VecDeque::new(),
            orphans: VecDeque::new(),
            next_index: 1,
            published: Arc::new(AtomicUsize::new(0)),
            counters: DelegCounters::default(),
        }
    }

    /// The number of live delegations (held or being recalled: revoked ones conflict with
    /// nothing), kept up to date as they come and go: a caller outside the state's lock reads
    /// it to skip the lock when it is 0 (the NFSv3 recall gate, the server's `recall` module). Only a
    /// hint: decide under the lock.
    pub fn published(&self) -> Arc<AtomicUsize> {
        self.published.clone()
    }

    /// OPEN's delegation result (module notes: what is granted). A grant creates the record.
    /// `file`: the file's key in the state tables; `fh`: the handle the client opened it by.
    pub fn grant(
        &mut self,
        now: Instant,
        clientid: ClientId4,
        (file, fh): (&[u8], &[u8]),
        ask: GrantAsk,
        entropy: &mut dyn Entropy,
    ) -> OpenDelegation4 {
        let want = ask.share_access & OPEN4_SHARE_WANT_MASK;
        let asked = want != OPEN4_SHARE_WANT_NO_PREFERENCE;
        // NONE_EXT is a 4.1 reply: send it only to a client that used the 4.1 want bits.
        let none = |why| match asked {
            true => OpenDelegation4::NoneExt(why),
            false => OpenDelegation4::None,
        };
        match want {
            OPEN4_SHARE_WANT_NO_DELEG => return none(OpenNoneDelegation4::Why(WND4_NOT_WANTED)),
            OPEN4_SHARE_WANT_CANCEL => return none(OpenNoneDelegation4::Why(WND4_CANCELLED)),
            _ => {}
        }
        let writer = ask.share_access & OPEN4_SHARE_ACCESS_WRITE != 0;
        if ask.contended
            || self.file_busy(now, clientid, file)
            || self.others_write_deleg(clientid, file)
            || (writer && (ask.others_open || self.others_deleg(clientid, file)))
        {
            // The signal bit (OPEN4_SHARE_SIGNAL_DELEG_WHEN_RESRC_AVAIL) is not honoured:
            // no CB_PUSH_DELEG is promised.
            return none(OpenNoneDelegation4::Contention(false));
        }
        if writer || want == OPEN4_SHARE_WANT_WRITE_DELEG {
            if !self.cfg.write {
                return none(OpenNoneDelegation4::Why(WND4_WRITE_DELEG_NOT_SUPP_FTYPE));
            }
            // A write delegation lets the holder read too (its page cache fills partial
            // pages under it), so it goes to a writer that may read as well, as knfsd's:
            // a read-only open asking for one, or a write-only open of a client that may
            // not read the file, gets none.
            let may_read = ask.may_read || ask.share_access & OPEN4_SHARE_ACCESS_READ != 0;
            if !writer || !may_read || want == OPEN4_SHARE_WANT_READ_DELEG {
                return none(OpenNoneDelegation4::Why(WND4_NOT_SUPP_UPGRADE));
            }
        }
        if !ask.callback_up
            || self.count_for(clientid) >= self.cfg.per_client_max
            || self.delegs.len() >= self.cfg.total_max
        {
            return none(OpenNoneDelegation4::Resource(false));
        }
        if self.held_by(clientid, file).is_some() {
            // One delegation per client and file: the one it has covers this open.
            return none(OpenNoneDelegation4::Contention(false));
        }
        let write = writer.then_some(ask.attrs);
        let other = self.insert(clientid, (file, fh), DelegStatus::Held, write, entropy);
        let stateid = Stateid4 { seqid: 1, other };
        // An empty ACE: the client checks access with ACCESS itself (§10.4.1 allows it;
        // Linux ignores the field).
        let permissions = Nfsace4::default();
        if writer {
            self.counters.granted_write += 1;
            return OpenDelegation4::Write(OpenWriteDelegation4 {
                stateid,
                recall: false,
                // No limit on how far the holder may grow the file before it flushes
                // (§10.4.1's space limit), as knfsd: NFS_LIMIT_SIZE of 2^64-1 bytes. The
                // backend's ENOSPC reaches the holder on its WRITEs and COMMIT.
                space_limit: NfsSpaceLimit4::Size(u64::MAX),
                permissions,
            });
        }
        OpenDelegation4::Read(OpenReadDelegation4 {
            stateid,
            recall: false,
            permissions,
        })
    }

    /// The delegations of other clients on `file` that an op of `clientid` conflicts with:
    /// every one for a namespace op or a write (`write`), the write delegations for a read
    /// (an OPEN for reading, READ). Those not being recalled yet are marked recalling (and
    /// the file recently recalled); the caller queues a CB_RECALL for each of
    /// [`DelegTable::to_queue`]. Empty: the op may go on.
    pub fn conflicts(
        &mut self,
        now: Instant,
        clientid: ClientId4,
        file: &[u8],
        write: bool,
    ) -> Vec<Other> {
        let Some(list) = self.by_file.get(file) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for o in list {
            let d = self.delegs.get_mut(o).expect("by_file and delegs agree");
            if d.clientid == clientid || !d.live() || (!write && d.write.is_none()) {
                continue;
            }
            if d.status == DelegStatus::Held {
                d.status = DelegStatus::Recalling {
                    queued: None,
                    since: None,
                };
            }
            out.push(*o);
        }
        if !out.is_empty() {
            self.remember_recall(now, file);
        }
        out
    }

    /// Recalls that need a CB_RECALL queued (new ones, and those to retry): (stateid, holder,
    /// the holder's handle of the file).
    pub fn to_queue(&self) -> Vec<(Stateid4, ClientId4, Bytes)> {
        let mut v: Vec<_> = self
            .delegs
            .iter()
            .filter(|(_, d)| matches!(d.status, DelegStatus::Recalling { queued: None, .. }))
            .map(|(o, d)| {
                (
                    Stateid4 {
                        seqid: 1,
                        other: *o,
                    },
                    d.clientid,
                    d.fh.clone(),
                )
            })
            .collect();
        v.sort_unstable_by_key(|e| e.0.other);
        v
    }

    /// The CB_RECALL of `other` was queued as `token` on `session`; or could not be queued
    /// (`None`: no path), which starts its clock now.
    pub fn recall_queued(&mut self, now: Instant, other: &Other, token: Option<(SessionId4, u64)>) {
        if let Some(Deleg {
            status: DelegStatus::Recalling { queued, since },
            ..
        }) = self.delegs.get_mut(other)
        {
            match token {
                Some(t) => *queued = Some(t),
                None => {
                    // Nothing to send it on: the clock runs from now; `queued` stays None,
                    // so a path that comes back gets the recall at the next tick.
                    since.get_or_insert(now);
                }
            }
        }
    }

    /// The callback `token` of `session` went on the wire at `now`: if it is a recall, its
    /// clock starts (once: a re-sent recall keeps its first start).
    pub fn recall_sent(&mut self, now: Instant, session: &SessionId4, token: u64) {
        if let Some(since) = self.recall_by_token(session, token) {
            if since.is_none() {
                *since = Some(now);
            }
            self.counters.recalls_sent += 1;
        } else if self.orphans.contains(&(*session, token)) {
            self.counters.recalls_sent += 1;
        } else if self.delegs.values().any(|d| {
            d.write
                .is_some_and(|w| w.getattr == CbGetattr::Queued(*session, token))
        }) {
            self.counters.cb_getattr_sent += 1;
        }
    }

    /// The callback `token` of `session` finished with `answer`. Not a recall: false.
    pub fn recall_answered(
        &mut self,
        now: Instant,
        session: &SessionId4,
        token: u64,
        answer: RecallAnswer,
    ) -> bool {
        if let Some(i) = self.orphans.iter().position(|o| *o == (*session, token)) {
            self.orphans.remove(i);
            match answer {
                RecallAnswer::Lost => self.counters.recalls_timed_out += 1,
                _ => self.counters.recalls_answered += 1,
            }
            return true;
        }
        let Some(d) = self.delegs.values_mut().find(|d| {
            matches!(d.status, DelegStatus::Recalling { queued: Some((s, t)), .. }
                if s == *session && t == token)
        }) else {
            return false;
        };
        let DelegStatus::Recalling { queued, since } = &mut d.status else {
            unreachable!("matched above");
        };
        since.get_or_insert(now);
        match answer {
            RecallAnswer::Ok => self.counters.recalls_answered += 1,
            RecallAnswer::Delay => {
                self.counters.recalls_answered += 1;
                *queued = None; // queue it again at the next tick
            }
            RecallAnswer::Refused => self.counters.recalls_answered += 1,
            RecallAnswer::Lost => {
                self.counters.recalls_timed_out += 1;
                *queued = None; // sent again once a path works (the clock keeps running)
            }
        }
        true
    }

    /// Another client's GETATTR of `file` asking for its size or change (§10.4.3; module
    /// notes: CB_GETATTR). A write delegation of another client that has no fresh
    /// CB_GETATTR answer is marked [`CbGetattr::Wanted`]: the caller queues one for each of
    /// [`DelegTable::getattrs_to_queue`] and answers NFS4ERR_DELAY.
    pub fn getattr_view(&mut self, now: Instant, clientid: ClientId4, file: &[u8]) -> GetattrView {
        let Some(list) = self.by_file.get(file) else {
            return GetattrView::Server;
        };
        for o in list {
            let d = self.delegs.get_mut(o).expect("by_file and delegs agree");
            if d.clientid == clientid || !d.live() {
                continue;
            }
            let Some(w) = d.write.as_mut() else {
                continue;
            };
            if d.status != DelegStatus::Held {
                return GetattrView::Delay; // being recalled: its return settles the file
            }
            return match w.getattr {
                // An answer serves the first GETATTR after it however late that comes (a
                // client backing off past CB_GETATTR_FRESH must not ask again forever), then
                // every one within CB_GETATTR_FRESH of it.
                CbGetattr::Answered(at, used)
                    if !used || now.saturating_duration_since(at) < CB_GETATTR_FRESH =>
                {
                    w.getattr = CbGetattr::Answered(at, true);
                    GetattrView::Holder {
                        size: (w.bumps > 0).then_some(w.last.size),
                        change_bump: w.bumps,
                    }
                }
                CbGetattr::Wanted | CbGetattr::Queued(..) => GetattrView::Delay,
                CbGetattr::Idle | CbGetattr::Answered(..) => {
                    w.getattr = CbGetattr::Wanted;
                    GetattrView::Delay
                }
            };
        }
        GetattrView::Server
    }

    /// CB_GETATTRs to queue: (holder, the holder's handle of the file, the delegation's
    /// `other`).
    pub fn getattrs_to_queue(&self) -> Vec<(ClientId4, Bytes, Other)> {
        let mut v: Vec<_> = self
            .delegs
            .iter()
            .filter(|(_, d)| {
                d.status == DelegStatus::Held
                    && d.write.is_some_and(|w| w.getattr == CbGetattr::Wanted)
            })
            .map(|(o, d)| (d.clientid, d.fh.clone(), *o))
            .collect();
        v.sort_unstable_by_key(|e| e.2);
        v
    }

    /// The CB_GETATTR of `other` was queued as `token` on `session`; or could not be queued
    /// (`None`): the delegation is recalled instead, as knfsd does when the holder cannot
    /// tell us what it wrote.
    pub fn getattr_queued(
        &mut self,
        now: Instant,
        other: &Other,
        token: Option<(SessionId4, u64)>,
    ) {
        let Some(d) = self.delegs.get_mut(other) else {
            return;
        };
        let Some(w) = d.write.as_mut() else {
            return;
        };
        match token {
            Some((sid, t)) => w.getattr = CbGetattr::Queued(sid, t),
            None => {
                w.getattr = CbGetattr::Idle;
                self.counters.cb_getattr_failed += 1;
                self.start_recall(now, other);
            }
        }
    }

    /// The callback `token` of `session` finished: if it is a CB_GETATTR, its answer
    /// (`Some`: the size and change the holder reported; `None`: an error or no answer,
    /// which recalls the delegation). Not a CB_GETATTR: false.
    pub fn getattr_answered(
        &mut self,
        now: Instant,
        session: &SessionId4,
        token: u64,
        answer: Option<SizeChange>,
    ) -> bool {
        let Some((other, d)) = self.delegs.iter_mut().find(|(_, d)| {
            d.write
                .is_some_and(|w| w.getattr == CbGetattr::Queued(*session, token))
        }) else {
            return false;
        };
        let other = *other;
        let w = d.write.as_mut().expect("matched above");
        match answer {
            Some(seen) => {
                self.counters.cb_getattr_answered += 1;
                if seen != w.last {
                    // Something new since the last answer (or since the grant): the file
                    // changed in the holder's cache, so its change attribute moves on.
                    w.bumps += 1;
                    w.last = seen;
                }
                w.getattr = CbGetattr::Answered(now, false);
            }
            None => {
                self.counters.cb_getattr_failed += 1;
                w.getattr = CbGetattr::Idle;
                if d.status == DelegStatus::Held {
                    self.start_recall(now, &other);
                }
            }
        }
        true
    }

    /// Live delegations by kind: (read, write).
    pub fn live_by_kind(&self) -> (usize, usize) {
        self.delegs
            .values()
            .filter(|d| d.live())
            .fold((0, 0), |(r, w), d| match d.kind() {
                Kind::Read => (r + 1, w),
                Kind::Write => (r, w + 1),
            })
    }

    /// Revokes the recalls whose clock ran past `lease` at `now`; returns them.
    pub fn tick(&mut self, now: Instant, lease: Duration) -> Vec<Other> {
        let mut out: Vec<Other> = self
            .delegs
            .iter()
            .filter(|(_, d)| {
                matches!(d.status, DelegStatus::Recalling { since: Some(t), .. }
                if now.saturating_duration_since(t) >= lease)
            })
            .map(|(o, _)| *o)
            .collect();
        out.sort_unstable();
        for o in &out {
            let d = self.delegs.get_mut(o).expect("listed");
            orphan(&mut self.orphans, &d.status);
            d.status = DelegStatus::Revoked(now);
            *self.revoked_per_client.entry(d.clientid).or_default() += 1;
            self.counters.revoked += 1;
        }
        if !out.is_empty() {
            self.publish();
        }
        while self
            .recent
            .front()
            .is_some_and(|(_, t)| now.saturating_duration_since(*t) >= RECENT_FOR)
        {
            self.recent.pop_front();
        }
        out
    }

    /// When [`DelegTable::tick`] next has something to do: a recall's revocation, or a recall
    /// to queue again (at once).
    pub fn next_wakeup(&self, lease: Duration) -> Option<Instant> {
        self.delegs
            .values()
            .filter_map(|d| match d.status {
                DelegStatus::Recalling { since: Some(t), .. } => Some(t + lease),
                _ => None,
            })
            .min()
    }

    /// The recalls queued on a session's back channel: (delegation, session, token).
    pub fn queued_recalls(&self) -> Vec<(Other, SessionId4, u64)> {
        let mut v: Vec<_> = self
            .delegs
            .iter()
            .filter_map(|(o, d)| match d.status {
                DelegStatus::Recalling {
                    queued: Some((s, t)),
                    ..
                } => Some((*o, s, t)),
                _ => None,
            })
            .collect();
        v.sort_unstable();
        v
    }

    /// The CB_RECALL of `other` will never be answered where it was queued (its session went,
    /// or its back channel is down with the call still waiting there): it waits to be queued
    /// again, on a back channel that works. Its clock keeps running.
    pub fn recall_stranded(&mut self, other: &Other) {
        if let Some(Deleg {
            status: DelegStatus::Recalling { queued, .. },
            ..
        }) = self.delegs.get_mut(other)
        {
            *queued = None;
        }
    }

    /// Whether any recall waits to be queued (the caller's tick queues it).
    pub fn has_unqueued_recall(&self) -> bool {
        self.delegs
            .values()
            .any(|d| matches!(d.status, DelegStatus::Recalling { queued: None, .. }))
    }

    /// DELEGRETURN (§18.6): the delegation of `clientid` on `file` ends; a revoked one is
    /// NFS4ERR_DELEG_REVOKED (FREE_STATEID ends it).
    pub fn delegreturn(
        &mut self,
        clientid: ClientId4,
        stateid: &Stateid4,
        file: &[u8],
    ) -> Result<(), Nfsstat4> {
        self.check(clientid, stateid, Some(file))?;
        self.remove(&stateid.other);
        self.counters.returned += 1;
        Ok(())
    }

    /// Checks a delegation stateid of `clientid` (of `file`, when given): the open table's
    /// rules (STALE / BAD / OLD), then NFS4ERR_DELEG_REVOKED for a revoked one.
    pub fn check(
        &self,
        clientid: ClientId4,
        stateid: &Stateid4,
        file: Option<&[u8]>,
    ) -> Result<&Deleg, Nfsstat4> {
        let d = crate::opens::check_stateid(
            self.boot_epoch,
            &self.delegs,
            clientid,
            stateid,
            file,
            |d| (d.clientid, &d.file[..], 1),
        )?;
        match d.status {
            DelegStatus::Revoked(_) => Err(Nfsstat4::DELEG_REVOKED),
            _ => Ok(d),
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

    /// FREE_STATEID (§18.38.4): a revoked delegation is forgotten; a live one is
    /// NFS4ERR_LOCKS_HELD (DELEGRETURN ends it), as knfsd answers.
    pub fn free(&mut self, clientid: ClientId4, stateid: &Stateid4) -> Nfsstat4 {
        match self.check(clientid, stateid, None) {
            Ok(_) => Nfsstat4::LOCKS_HELD,
            Err(Nfsstat4::DELEG_REVOKED) => {
                self.remove(&stateid.other);
                Nfsstat4::OK
            }
            Err(e) => e,
        }
    }

    /// Whether this is a delegation stateid's `other` (live or revoked).
    pub fn knows(&self, other: &Other) -> bool {
        self.delegs.contains_key(other)
    }

    /// Whether `clientid` has revoked delegations it has not freed
    /// (SEQ4_STATUS_RECALLABLE_STATE_REVOKED).
    pub fn has_revoked(&self, clientid: ClientId4) -> bool {
        self.revoked_per_client.contains_key(&clientid)
    }

    /// OPEN CLAIM_PREVIOUS that names a read delegation (module notes, "Reboot recovery"):
    /// granted back, in grace, whatever the want bits or the recently-recalled set say; with
    /// `recall` set, and the recall's clock running from `now`, when the client's back channel
    /// is not up. The bounds still hold.
    pub fn grant_reclaimed(
        &mut self,
        now: Instant,
        clientid: ClientId4,
        (file, fh): (&[u8], &[u8]),
        callback_up: bool,
        write: Option<SizeChange>,
        entropy: &mut dyn Entropy,
    ) -> OpenDelegation4 {
        if (write.is_some() && !self.cfg.write)
            || self.count_for(clientid) >= self.cfg.per_client_max
            || self.delegs.len() >= self.cfg.total_max
            || self.held_by(clientid, file).is_some()
        {
            return OpenDelegation4::None;
        }
        let status = match callback_up {
            true => DelegStatus::Held,
            false => DelegStatus::Recalling {
                queued: None,
                since: Some(now),
            },
        };
        let other = self.insert(clientid, (file, fh), status, write, entropy);
        let stateid = Stateid4 { seqid: 1, other };
        if write.is_some() {
            self.counters.granted_write += 1;
            return OpenDelegation4::Write(OpenWriteDelegation4 {
                stateid,
                recall: !callback_up,
                space_limit: NfsSpaceLimit4::Size(u64::MAX),
                permissions: Nfsace4::default(),
            });
        }
        OpenDelegation4::Read(OpenReadDelegation4 {
            stateid,
            recall: !callback_up,
            permissions: Nfsace4::default(),
        })
    }

    /// A new record (a write delegation when `write` has the file's size and change at the
    /// grant), counted and published; its stateid's `other`.
    fn insert(
        &mut self,
        clientid: ClientId4,
        (file, fh): (&[u8], &[u8]),
        status: DelegStatus,
        write: Option<SizeChange>,
        entropy: &mut dyn Entropy,
    ) -> Other {
        let other = self.new_other(entropy);
        let write = write.map(|attrs| WriteView {
            granted: attrs,
            last: attrs,
            bumps: 0,
            getattr: CbGetattr::Idle,
        });
        self.delegs.insert(
            other,
            Deleg {
                clientid,
                file: Bytes::copy_from_slice(file),
                fh: Bytes::copy_from_slice(fh),
                status,
                write,
            },
        );
        self.by_file
            .entry(Bytes::copy_from_slice(file))
            .or_default()
            .push(other);
        *self.per_client.entry(clientid).or_default() += 1;
        self.counters.granted += 1;
        self.publish();
        other
    }

    /// The live delegation `clientid` holds on `file`, if any.
    pub fn held_by(&self, clientid: ClientId4, file: &[u8]) -> Option<Other> {
        self.by_file.get(file)?.iter().copied().find(|o| {
            let d = &self.delegs[o];
            d.clientid == clientid && !matches!(d.status, DelegStatus::Revoked(_))
        })
    }

    /// Drops every record of a client (expiry, DESTROY_CLIENTID, a replaced record).
    pub fn remove_client(&mut self, clientid: ClientId4) {
        let others: Vec<Other> = self
            .delegs
            .iter()
            .filter(|(_, d)| d.clientid == clientid)
            .map(|(o, _)| *o)
            .collect();
        for o in others {
            self.remove(&o);
        }
    }

    /// Live delegations of `clientid` (held or being recalled).
    pub fn live_for(&self, clientid: ClientId4) -> usize {
        self.delegs
            .values()
            .filter(|d| d.clientid == clientid && !matches!(d.status, DelegStatus::Revoked(_)))
            .count()
    }

    /// Records of `clientid` (held, recalling, revoked).
    pub fn count_for(&self, clientid: ClientId4) -> usize {
        self.per_client.get(&clientid).copied().unwrap_or(0)
    }

    /// Live delegations (held or being recalled): the `delegations_read` gauge.
    pub fn live(&self) -> usize {
        self.delegs
            .values()
            .filter(|d| !matches!(d.status, DelegStatus::Revoked(_)))
            .count()
    }

    pub fn len(&self) -> usize {
        self.delegs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.delegs.is_empty()
    }

    pub fn get(&self, other: &Other) -> Option<&Deleg> {
        self.delegs.get(other)
    }

    /// Where the delegation `other` stands, if it exists.
    pub fn status_of(&self, other: &Other) -> Option<DelegStatus> {
        self.delegs.get(other).map(|d| d.status.clone())
    }

    // ----- helpers -------------------------------------------------------------------------

    /// Another client's recall of `file` is under way, or the file was recalled recently.
    fn file_busy(&self, now: Instant, clientid: ClientId4, file: &[u8]) -> bool {
        let recalling = self.by_file.get(file).is_some_and(|l| {
            l.iter().any(|o| {
                let d = &self.delegs[o];
                d.clientid != clientid && matches!(d.status, DelegStatus::Recalling { .. })
            })
        });
        recalling
            || self
                .recent
                .iter()
                .any(|(f, t)| f[..] == *file && now.saturating_duration_since(*t) < RECENT_FOR)
    }

    /// Another client holds a live write delegation of `file`.
    fn others_write_deleg(&self, clientid: ClientId4, file: &[u8]) -> bool {
        self.by_file.get(file).is_some_and(|l| {
            l.iter().any(|o| {
                let d = &self.delegs[o];
                d.clientid != clientid && d.live() && d.write.is_some()
            })
        })
    }

    /// Another client holds a live delegation of `file`, of either kind.
    fn others_deleg(&self, clientid: ClientId4, file: &[u8]) -> bool {
        self.by_file.get(file).is_some_and(|l| {
            l.iter().any(|o| {
                let d = &self.delegs[o];
                d.clientid != clientid && d.live()
            })
        })
    }

    /// Marks a held delegation recalling (the caller's tick or queue_recalls sends it).
    fn start_recall(&mut self, now: Instant, other: &Other) {
        let Some(d) = self.delegs.get_mut(other) else {
            return;
        };
        if d.status != DelegStatus::Held {
            return;
        }
        d.status = DelegStatus::Recalling {
            queued: None,
            since: None,
        };
        let file = d.file.clone();
        self.remember_recall(now, &file);
    }

    fn remember_recall(&mut self, now: Instant, file: &[u8]) {
        if let Some(e) = self.recent.iter_mut().find(|(f, _)| f[..] == *file) {
            e.1 = now;
            return;
        }
        if self.recent.len() >= RECENT_MAX {
            self.recent.pop_front();
        }
        self.recent.push_back((Bytes::copy_from_slice(file), now));
    }

    fn recall_by_token(
        &mut self,
        session: &SessionId4,
        token: u64,
    ) -> Option<&mut Option<Instant>> {
        self.delegs.values_mut().find_map(|d| match &mut d.status {
            DelegStatus::Recalling {
                queued: Some((s, t)),
                since,
            } if s == session && *t == token => Some(since),
            _ => None,
        })
    }

    fn new_other(&mut self, entropy: &mut dyn Entropy) -> Other {
        loop {
            let mut other = [0u8; OTHER_SIZE];
            other[..4].copy_from_slice(&self.boot_epoch.to_be_bytes());
            let index = (self.next_index & !(DELEG_INDEX_BIT | 0x8000_0000)) | DELEG_INDEX_BIT;
            other[4..8].copy_from_slice(&index.to_be_bytes());
            entropy.fill(&mut other[8..]);
            self.next_index = self.next_index.wrapping_add(1);
            if !self.delegs.contains_key(&other) {
                return other;
            }
        }
    }

    /// Stores the live count for [`DelegTable::published`].
    fn publish(&mut self) {
        let revoked: usize = self.revoked_per_client.values().sum();
        let live = self.delegs.len() - revoked;
        self.published.store(live, Ordering::Release);
    }

    fn remove(&mut self, other: &Other) {
        let Some(d) = self.delegs.remove(other) else {
            return;
        };
        orphan(&mut self.orphans, &d.status);
        if let Some(list) = self.by_file.get_mut(&d.file) {
            list.retain(|o| o != other);
            if list.is_empty() {
                self.by_file.remove(&d.file);
            }
        }
        decrement(&mut self.per_client, d.clientid);
        if matches!(d.status, DelegStatus::Revoked(_)) {
            decrement(&mut self.revoked_per_client, d.clientid);
        }
        self.publish();
    }
}

/// Keeps the CB_RECALL in flight of a delegation that leaves the recalling state.
fn orphan(orphans: &mut VecDeque<(SessionId4, u64)>, status: &DelegStatus) {
    if let DelegStatus::Recalling {
        queued: Some(t), ..
    } = status
    {
        if orphans.len() >= RECENT_MAX {
            orphans.pop_front();
        }
        orphans.push_back(*t);
    }
}

fn decrement(counts: &mut HashMap<ClientId4, usize>, clientid: ClientId4) {
    if let Some(n) = counts.get_mut(&clientid) {
        *n -= 1;
        if *n == 0 {
            counts.remove(&clientid);
        }
    }
}

#[cfg(test)]
mod tests;
