//! The NFSv4.1 / 4.2 client: a session over the existing transport, and [`FileProtocol`] for
//! [`crate::File`], so readahead, write-behind and COMMIT/verifier resend work unchanged.
//!
//! ```text
//!   Client::connect ── NULL + EXCHANGE_ID ── CREATE_SESSION ── RECLAIM_COMPLETE + GETATTR root
//!        │              (minor version 2, then 1 on MINOR_VERS_MISMATCH; "+": sent together,
//!        │               one round trip for both)
//!        ▼
//!   compound(ops) ── slot from session::SlotTable ── SEQUENCE + ops ── RpcClient ── reply
//!        ▲                                                                           │
//!        └──── session::Next: Done / Retry / RetryAfter / NewSession / NewClient ◄───┘
//!   renewal task: a SEQUENCE alone when nothing succeeded for lease/3 (session::Lease)
//!   nconnect: more connections, each bound to the session (see "Session trunking")
//!   new client id: every open and its locks reclaimed (reopen::ReclaimPass), then
//!                  RECLAIM_COMPLETE, then opens not reclaimed made again (their locks lost)
//!   shutdown: DESTROY_SESSION, DESTROY_CLIENTID
//! ```
//!
//! Every decision about slots, sequence ids, recovery and renewal is in the sans-IO
//! [`session`] module; this one sends, waits and decodes. A COMMIT or WRITE started here is
//! one COMPOUND (SEQUENCE, PUTFH, op) whose future re-sends it itself after a session
//! recovery, so the file layer above never sees a session fault.
//!
//! # Client owner
//! EXCHANGE_ID's owner names a client across its restarts (RFC 8881 §2.4): a new verifier under
//! a known owner tells the server the old instance rebooted, and its state (opens, locks,
//! delegations) is dropped at once instead of when its lease runs out. Two live clients must
//! never share one, or each EXCHANGE_ID would wipe the other's state (§18.35.5).
//! - **Commands** (`cp`, `cat`, ...): `sluice/HOST/uid/PID/N` with a random verifier, unique
//!   per client instance. A command lives as long as its copy and two of them of one user on
//!   one host run side by side; a per-user owner would make each look like the other
//!   rebooting. Their state is only opens, closed before they exit.
//! - **The mount** ([`stable_owner`]): `sluice/HOST/uid/mount:MOUNTPOINT`, stable per host,
//!   user and mount point, given through [`V4Options::owner`] (`ClientOptions::v4_owner`).
//!   Linux makes one owner per host (`nfs4_unique_id` or the hostname) because the kernel is
//!   one client for all its mounts of a server; each sluice mount is a process of its own, so
//!   two mounts of one server by one user must differ, and the mount point is what tells
//!   them apart (two live mounts cannot share one). A mount that crashed and is mounted again
//!   at the same place is the same client rebooting: the server frees its old locks at the
//!   new EXCHANGE_ID, and the locks of a crashed mount do not block others for a lease.

//! # Session trunking (`nconnect`)
//! With `nconnect=N` (the URL's, else [`ClientOptions::nconnect`]) the session runs over N TCP
//! connections to the same address, used in turn as NFSv3's are ([`Connections`]). The first
//! carries NULL, EXCHANGE_ID and CREATE_SESSION, which binds it; each other one is bound with
//! BIND_CONN_TO_SESSION before its first COMPOUND (RFC 8881 §2.10.3.1, §18.34). One session,
//! one slot table: the connections share the slots, so N connections do not multiply what
//! is in flight, they spread the replies' receive path over N reader tasks.
//!
//! ```text
//!   conn 1: NULL, EXCHANGE_ID, CREATE_SESSION ─┐
//!   conn 2: BIND_CONN_TO_SESSION ──────────────┼─ one session: SEQUENCE + ops, round robin
//!   conn N: BIND_CONN_TO_SESSION ──────────────┘
//! ```
//!
//! A connection is bound for a (session, connection) pair: each keeps the session generation
//! and its transport's reconnect count of its last bind, and one whose pair is stale is bound
//! again before it carries a COMPOUND. So a new session (BADSESSION, STALE_CLIENTID) re-binds
//! every connection, right after the recovery, and a connection the transport re-established
//! is re-bound on its next use. The transport resends what was in flight on a reset before
//! that bind can go out; a server that binds the fore channel on SEQUENCE (RFC 8881 says it
//! does with SP4_NONE; sluice and Linux do) takes them, and one that answers
//! CONN_NOT_BOUND_TO_SESSION gets the bind and the same slot and sequence id again
//! ([`session::Next::Rebind`]), never a new session. All the connections go to one address,
//! so they reach one server instance; no server-owner check is needed.
//!
//! A server that refuses the bind at connect time leaves the client on its first connection,
//! with a warning and [`Client::trunking_note`] saying why: fewer connections are slower, not
//! wrong.
//!
//! # After a server restart
//! The session comes back by itself (BADSESSION, then STALE_CLIENTID: a new client id and
//! session); the files opened before are opened again by the driver, reclaimed with
//! CLAIM_PREVIOUS when the server is in its grace period, else with CLAIM_FH, and the caller's
//! handles keep working: their stateids are rewritten to the new ones as calls go out
//! ([`reopen`]). Unstable data the server lost shows as a changed write verifier, which the
//! file layer resends as over NFSv3.
//!
//! The version-neutral [`crate::namespace::Namespace`] over this client is in `namespace.rs`.
//!
//! # Callbacks and delegations
//! CREATE_SESSION offers a back channel on the first connection; the transport hands the
//! server's calls to [`CbService`], which answers them from the sans-IO [`deleg`] module. A
//! delegation granted on OPEN is recorded per file; a CB_RECALL is answered at once and the
//! file is committed (if UNSTABLE data went to it) and returned on a task of its own; the
//! last CLOSE of a file returns its delegation with the CLOSE. A server that takes no back
//! channel gets `OPEN4_SHARE_WANT_NO_DELEG`, and any delegation it grants anyway is returned
//! at once. After a new client id the old delegations are forgotten.
//!
//! # Locks
//! LOCK, LOCKT and LOCKU for the mount's `fcntl` and `flock`: see [`lock`].

pub mod deleg;
pub mod lock;
mod namespace;
pub mod reopen;
pub mod session;

#[cfg(test)]
mod fake;

use crate::identity::{credentials, resolve};
use crate::options::{checked_nconnect, ClientOptions};
use crate::proto::{
    Call, CommitCall, FileContext, FileError, FileOptions, FileProtocol, ReadCall, ReadReply,
    Stability, Version, WriteCall, WriteReply,
};
use crate::stats::{ClientStats, ReadStats, Sample};
use crate::transport::{
    CallError, CallbackReply, CallbackService, Callbacks, Connections, IncomingCall, PendingCall,
    RpcClient, RpcConfig, TransportStats,
};
use crate::url::NfsUrl;
use bytes::Bytes;
pub use lock::LockConflict;
use reopen::{Answer, OpenRecord, OpenTable, ReclaimPass, Step};
use session::{Lease, Next, Outcome, Slot, SlotTable};
use sluice_rpc::client::{ProcId, RpcError};
use sluice_rpc::rtt::TimerClass;
use sluice_xdr::nfs4::attrs::{num, AttrValues};
use sluice_xdr::nfs4::callback::{self as cb, CbCompound4Args, CbCompound4Res};
use sluice_xdr::nfs4::compound::{Compound4Args, Compound4Res, CompoundError, CompoundLimits};
use sluice_xdr::nfs4::ops::{
    BindConnToSessionArgs, CallbackSecParms4, CallbackSecParmsList, ChannelAttrs4, ClientOwner4,
    CloseArgs, CommitArgs, CreatVerfAttr, CreateArgs, CreateSessionArgs, CreateSessionResOk,
    Createhow4, Createtype4, ExchangeIdArgs, ExistLockOwner4, ImplIdList, LockArgs, LockRes,
    Locker4, NfsArgop4, NfsResop4, OpenArgs, OpenClaim4, OpenDelegation4, OpenToLockOwner4,
    Openflag4, Opnum4, ReadArgs, ReaddirArgs, Res4, SequenceArgs, StateProtect4A, WriteArgs,
    CDFC4_FORE, CDFC4_FORE_OR_BOTH, CDFS4_FORE, CREATE_SESSION4_FLAG_CONN_BACK_CHAN, READ_LT,
    WRITE_LT,
};
use sluice_xdr::nfs4::{
    self as nfs4, Bitmap4, Component4, Fattr4, Ftype4, NfsFh4, Nfsstat4, Nfstime4, Opaque4,
    SessionId4, StableHow4, StateOwner4, Stateid4, Utf8Str,
};
use sluice_xdr::rpc::OpaqueAuth;
use sluice_xdr::{DecodeError, Pack, Payload, Writer};
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Which minor versions [`Client::connect`] may use, in the order it tries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Minor {
    /// Exactly 4.1.
    V1,
    /// Exactly 4.2.
    V2,
    /// The highest the server offers: 4.2, then 4.1.
    Highest,
}

impl Minor {
    fn candidates(self) -> &'static [u32] {
        match self {
            Minor::V1 => &[1],
            Minor::V2 => &[2],
            Minor::Highest => &[2, 1],
        }
    }
}

/// Settings of the v4 session, beside the [`ClientOptions`] the v3 client also takes.
#[derive(Debug, Clone, Default)]
pub struct V4Options {
    /// EXCHANGE_ID's client owner; `None`: unique per instance (see the module docs).
    pub owner: Option<Vec<u8>>,
    /// A bound on the probe (TCP connect, NULL, the first EXCHANGE_ID answer): past it,
    /// connecting fails with [`Error::Connect`], so that a caller with another version to try
    /// does not hang on a silent server. `None` (the default): the RPC layer's own timeouts.
    pub probe_timeout: Option<Duration>,
}

/// Why a v4 operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The server answered an op with an error status.
    Status { op: Opnum4, status: Nfsstat4 },
    /// The call got no NFS answer.
    Rpc(CallError),
    /// The reply did not decode.
    Decode(DecodeError),
    /// No connection could be made.
    Connect(String),
    /// Anything else, in words.
    Other(String),
}

impl Error {
    pub fn status(&self) -> Option<Nfsstat4> {
        match self {
            Error::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Status { op, status } => write!(f, "{} failed: {}", op.name(), status.name()),
            Error::Rpc(e) => write!(f, "{e}"),
            Error::Decode(e) => write!(f, "bad reply from the server: {e}"),
            Error::Connect(e) | Error::Other(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for Error {}

impl From<FileError> for Error {
    fn from(e: FileError) -> Self {
        Error::Other(e.0)
    }
}

impl From<DecodeError> for Error {
    fn from(e: DecodeError) -> Self {
        Error::Decode(e)
    }
}

/// An open file: its handle and the open's stateid (what READ and WRITE present).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fh {
    pub fh: NfsFh4,
    /// The open stateid with seqid 0 ("the current one", RFC 8881 §8.2.2), or the anonymous
    /// stateid for a handle that was only looked up.
    pub stateid: Stateid4,
    /// A delegation the server granted with the open, if the client keeps it (see [`deleg`]:
    /// the client's table, not this copy, decides what CLOSE returns).
    pub delegation: Option<Stateid4>,
}

impl Fh {
    /// A looked-up handle with no open state.
    pub fn unopened(fh: NfsFh4) -> Fh {
        Fh {
            fh,
            stateid: Stateid4::ANONYMOUS,
            delegation: None,
        }
    }
}

/// A file's attributes as this client asks for them (see [`ATTR_BITS`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attr {
    pub ftype: Ftype4,
    /// The change attribute: grows with every change of the file.
    pub change: u64,
    pub size: u64,
    pub fileid: u64,
    pub mode: u32,
    pub numlinks: u32,
    pub owner: String,
    pub owner_group: String,
    pub space_used: u64,
    pub atime: Nfstime4,
    pub mtime: Nfstime4,
    pub ctime: Nfstime4,
}

/// The attributes GETATTR asks for: what `ls -l`, `stat` and the file layer's change
/// detection need.
pub const ATTR_BITS: &[u32] = &[
    num::TYPE,
    num::CHANGE,
    num::SIZE,
    num::FILEID,
    num::MODE,
    num::NUMLINKS,
    num::OWNER,
    num::OWNER_GROUP,
    num::SPACE_USED,
    num::TIME_ACCESS,
    num::TIME_METADATA,
    num::TIME_MODIFY,
];

impl Attr {
    fn from_fattr(f: &Fattr4) -> Result<Attr, Error> {
        let v = AttrValues::decode(f)?.values;
        let s = |u: Option<Utf8Str>| u.map(|u| String::from_utf8_lossy(&u).into_owned());
        Ok(Attr {
            ftype: v.ftype.unwrap_or_default(),
            change: v.change.unwrap_or(0),
            size: v.size.unwrap_or(0),
            fileid: v.fileid.unwrap_or(0),
            mode: v.mode.unwrap_or(0),
            numlinks: v.numlinks.unwrap_or(0),
            owner: s(v.owner).unwrap_or_default(),
            owner_group: s(v.owner_group).unwrap_or_default(),
            space_used: v.space_used.unwrap_or(0),
            atime: v.time_access.unwrap_or_default(),
            mtime: v.time_modify.unwrap_or_default(),
            ctime: v.time_metadata.unwrap_or_default(),
        })
    }
}

/// How [`Client::create`] makes a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    /// UNCHECKED4 with size 0: create, or truncate what is there (like `open(O_CREAT|O_TRUNC)`).
    Truncate,
    /// EXCLUSIVE4_1: fail with NFS4ERR_EXIST if the name exists (`O_EXCL`), safe to resend.
    Exclusive,
}

/// Largest READ/WRITE asked for: 1 MiB, what Linux uses and what sluice's data path is tuned
/// for.
const TRANSFER_BYTES_MAX: u32 = 1 << 20;
/// Room for the RPC and COMPOUND headers around a READ's or WRITE's data: a call header with
/// AUTH_SYS (at most ~430 bytes), SEQUENCE (44), PUTFH (136), WRITE's fixed part (36), with
/// margin; rounded to a page so the transfer size stays page aligned.
const HEADER_BYTES_MAX: u32 = 4096;
/// Reply bytes a slot may cache (`ca_maxresponsesize_cached` asked for): the largest reply of
/// a COMPOUND that changes state, OPEN + GETFH + GETATTR with a delegation and long owner
/// names, stays under 2 KiB; twice that for margin.
const CACHED_REPLY_BYTES: u32 = 4096;
/// Ops asked for per COMPOUND (`ca_maxoperations`): a path walk of 28 components fits one
/// COMPOUND; longer walks are split by what the server grants.
const OPS_MAX: u32 = 32;
/// The lease assumed until the server says (`lease_time`): 90 s, the Linux and knfsd default.
const LEASE_DEFAULT: Duration = Duration::from_secs(90);
/// Session recoveries (new session or client) one COMPOUND may go through before it fails:
/// a server that drops every new session at once would otherwise keep the call looping.
const RECOVERIES_MAX: u32 = 8;
/// Wait before trying again to replace a session whose slots are all retired, when the last
/// attempt failed (the server is unreachable, say): 1 s, so a dead server costs a CREATE_SESSION
/// per second per waiting caller at most.
const RECOVERY_RETRY: Duration = Duration::from_secs(1);
/// Re-sends of one COMPOUND for BADSLOT / SEQ_MISORDERED / DELAY before it fails (at 100 ms a
/// DELAY, about a minute of a busy server: the v3 client's major timeout).
const RETRIES_MAX: u32 = 600;

/// An NFSv4.1 / 4.2 client of one server. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    /// The session's connections: the first carries session setup and recovery; with
    /// `nconnect`, the others are bound to the session and COMPOUNDs go to all in turn.
    conns: Connections,
    /// Per connection, the (session generation, connection's reconnect count) it was last
    /// bound for: a connection whose pair differs from the current one is bound again before it
    /// carries a COMPOUND (see "Session trunking" in the module docs).
    bound: Mutex<Vec<Option<(u64, u64)>>>,
    /// Why the client runs on fewer connections than `nconnect` asked for, if it does.
    trunking_note: Option<String>,
    cred: OpaqueAuth,
    minor: u32,
    url: NfsUrl,
    owner: Vec<u8>,
    verifier: [u8; 8],
    session: Mutex<SessionState>,
    /// Woken when a slot is freed or a new session installed.
    slot_freed: Notify,
    /// One recovery at a time (see [`Client::recover`]).
    recovery: tokio::sync::Mutex<()>,
    lease: Mutex<Lease>,
    files: FileContext,
    rsize: u32,
    wsize: u32,
    ops_max: u32,
    stats: Mutex<ClientStats>,
    closed: AtomicBool,
    /// Numbers the open owners of this client's files.
    opens: AtomicU64,
    /// The open files, for reopening after a new client id (see [`reopen`]).
    open_files: Mutex<OpenTable>,
    /// Woken when a reopen pass ends.
    reopen_done: Notify,
    /// The back channel's slots and the delegations held (see [`deleg`]); shared with the
    /// callback service the transport calls.
    callbacks: Arc<Mutex<deleg::Callbacks>>,
}

struct SessionState {
    clientid: u64,
    /// CREATE_SESSION's `csa_sequence` for the next session of this client id.
    create_seq: u32,
    sessionid: SessionId4,
    table: SlotTable,
    /// The session's `ca_maxresponsesize_cached`: replies up to it may be cached.
    cached_bytes: u32,
}

/// What a COMPOUND came back with (SEQUENCE's result removed).
#[derive(Debug)]
pub struct Reply {
    pub status: Nfsstat4,
    pub results: Vec<NfsResop4>,
}

impl Reply {
    /// The results if every op succeeded, else the failing op's status as an error.
    pub fn ok(self) -> Result<Vec<NfsResop4>, Error> {
        if self.status.is_ok() {
            return Ok(self.results);
        }
        let op = self.results.last().map_or(Opnum4(0), |r| r.opnum());
        Err(Error::Status {
            op,
            status: self.status,
        })
    }
}

impl Client {
    /// Connects to the server of `url` (port: `nfsport`, else the URL's port, else 2049) and
    /// sets up a session with the first minor version of `minor` the server takes.
    pub async fn connect(
        url: &NfsUrl,
        options: &ClientOptions,
        minor: Minor,
        v4: V4Options,
    ) -> Result<Client, Error> {
        let ip = resolve(url)
            .await
            .map_err(|e| Error::Connect(e.to_string()))?;
        let port = url.nfsport.or(url.port).unwrap_or(2049);
        let addr = SocketAddr::new(ip, port);
        let mut rpc_config = options.rpc.clone();
        if rpc_config.server_name.is_empty() {
            rpc_config.server_name = url.host.clone();
        }
        let (nconnect, trunk_cfg) = checked_nconnect(url, options).map_err(Error::Connect)?;
        let service = Arc::new(CbService::default());
        rpc_config.callbacks = Some(Callbacks(service.clone()));
        let probe = Probe::new(v4.probe_timeout);
        let rpc = probe
            .within(async {
                RpcClient::connect(addr, rpc_config.clone())
                    .await
                    .map_err(|e| Error::Connect(format!("cannot connect to {addr}: {e}")))
            })
            .await?;
        let cred = credentials(url, options);
        let owner = v4.owner.unwrap_or_else(instance_owner);
        let verifier: [u8; 8] = rand::random();
        let stats = Mutex::new(ClientStats::default());
        let mut last = None;
        for (i, &m) in minor.candidates().iter().enumerate() {
            let x = probe.within(async {
                let x = exchange_id(&rpc, &cred, m, &owner, verifier, &stats);
                if i > 0 {
                    return Ok(x.await);
                }
                // NULL goes out together with the first EXCHANGE_ID: one round trip for
                // both, where waiting for NULL first cost one more before anything useful
                // (a whole 40 ms on a 40 ms link). NULL's answer is looked at first: it says
                // best why a server does not speak NFSv4 at all.
                let (n, x) = tokio::join!(null(&rpc, &cred), x);
                n.map(|()| x)
            });
            match x.await? {
                Ok(x) => {
                    let slots = (options.rpc.table.max_in_flight as u32).max(1);
                    let (sess, create_seq) =
                        create_session(&rpc, &cred, m, x.0, x.1, slots, &stats).await?;
                    let mut conns = Connections::new(rpc);
                    let trunk = Trunk {
                        n: nconnect,
                        config: &rpc_config,
                        cred: &cred,
                        minor: m,
                        sessionid: sess.sessionid,
                        stats: &stats,
                    };
                    let note = trunk.open(&mut conns).await?;
                    if note.is_none() {
                        conns.grow_up_to(trunk_cfg, &rpc_config);
                    }
                    return Client::finish_connect(
                        conns, note, cred, m, url, owner, verifier, x.0, create_seq, sess, options,
                        stats, service,
                    )
                    .await;
                }
                Err(e) if e.status() == Some(Nfsstat4::MINOR_VERS_MISMATCH) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Other("no minor version to try".into())))
    }

    #[allow(clippy::too_many_arguments)]
    async fn finish_connect(
        conns: Connections,
        trunking_note: Option<String>,
        cred: OpaqueAuth,
        minor: u32,
        url: &NfsUrl,
        owner: Vec<u8>,
        verifier: [u8; 8],
        clientid: u64,
        create_seq: u32,
        sess: CreateSessionResOk,
        options: &ClientOptions,
        stats: Mutex<ClientStats>,
        service: Arc<CbService>,
    ) -> Result<Client, Error> {
        let fore = &sess.fore_chan_attrs;
        // Before the first SEQUENCE, after which the server may call back on the session.
        service.state.lock().expect("callbacks lock").new_session(
            sess.sessionid,
            back_channel(&sess),
            sess.back_chan_attrs.maxrequests,
        );
        if !back_channel(&sess) {
            tracing::debug!("{}: no NFSv4.1 back channel; no delegations", url.host);
        }
        let size = |server: u32, cap: u32| {
            let s = server.saturating_sub(HEADER_BYTES_MAX).min(cap);
            if s >= 4096 {
                s & !4095
            } else {
                s.max(512)
            }
        };
        let rsize = size(
            fore.maxresponsesize,
            options.rsize_max.min(TRANSFER_BYTES_MAX),
        );
        let wsize = size(
            fore.maxrequestsize,
            options.wsize_max.min(TRANSFER_BYTES_MAX),
        );
        let now = Instant::now();
        // CREATE_SESSION bound the first connection, `Trunk::open` the others.
        // Room for connections the automatic `nconnect` may add (bound before they carry calls).
        let bound = (0..conns.capacity())
            .map(|i| (i < conns.len()).then(|| (1, conns.get(i).stats().reconnects)))
            .collect();
        let inner = Inner {
            conns,
            bound: Mutex::new(bound),
            trunking_note,
            cred,
            minor,
            url: url.clone(),
            owner,
            verifier,
            session: Mutex::new(SessionState {
                clientid,
                create_seq,
                sessionid: sess.sessionid,
                table: SlotTable::new(1, fore.maxrequests),
                cached_bytes: fore.maxresponsesize_cached,
            }),
            slot_freed: Notify::new(),
            recovery: tokio::sync::Mutex::new(()),
            lease: Mutex::new(Lease::new(LEASE_DEFAULT, now)),
            files: FileContext::new(
                FileOptions {
                    readahead: options.readahead,
                    trace_readahead: options.trace_readahead,
                    attr_timeout: options.attr_timeout,
                    write_depth: options.write_depth,
                    write_depth_max: options.rpc.table.max_in_flight,
                    commit_bytes_max: options.commit_bytes_max,
                },
                options.readahead_budget_bytes,
            ),
            rsize,
            wsize,
            // At least one LOOKUP per COMPOUND of a path walk (see `lookup`).
            ops_max: fore.maxoperations.clamp(5, OPS_MAX),
            stats,
            closed: AtomicBool::new(false),
            opens: AtomicU64::new(0),
            open_files: Mutex::new(OpenTable::default()),
            reopen_done: Notify::new(),
            callbacks: service.state.clone(),
        };
        let mut client = Client {
            inner: Arc::new(inner),
        };
        // RECLAIM_COMPLETE and the root's GETATTR go out together (neither obtains a lock,
        // so the GETATTR need not wait for RECLAIM_COMPLETE: RFC 8881 §18.51.3).
        let (_, limits) = tokio::join!(client.reclaim_complete(), client.root_limits());
        client.fit_to_filesystem(limits?);
        // Only now: `fit_to_filesystem` needs the one strong handle and no weak ones.
        let _ = service.client.set(Arc::downgrade(&client.inner));
        tokio::spawn(renew_loop(Arc::downgrade(&client.inner)));
        Ok(client)
    }

    /// RECLAIM_COMPLETE: this client has nothing to reclaim, so the server need not hold its
    /// grace period for it (RFC 8881 §18.51). An error (COMPLETE_ALREADY) changes nothing.
    async fn reclaim_complete(&self) {
        let _ = self.compound(vec![NfsArgop4::ReclaimComplete(false)]).await;
    }

    /// The root's lease time and transfer limits (see [`Client::fit_to_filesystem`]).
    async fn root_limits(&self) -> Result<AttrValues, Error> {
        let bits = Bitmap4::from_bits(&[num::LEASE_TIME, num::MAXREAD, num::MAXWRITE]);
        let res = self
            .compound(vec![NfsArgop4::Putrootfh(()), NfsArgop4::Getattr(bits)])
            .await?
            .ok()?;
        let Some(NfsResop4::Getattr(Res4::Ok(f))) = res.last() else {
            return Err(Error::Other("GETATTR of the root returned nothing".into()));
        };
        Ok(AttrValues::decode(f)?.values)
    }

    /// Takes the root's lease time, and lowers rsize/wsize to its transfer limits.
    fn fit_to_filesystem(&mut self, v: AttrValues) {
        if let Some(secs) = v.lease_time.filter(|s| *s > 0) {
            *self.inner.lease.lock().expect("lease lock") =
                Lease::new(Duration::from_secs(u64::from(secs)), Instant::now());
        }
        let cap = |server: Option<u64>, mine: u32| match server {
            Some(s) if s >= 4096 => (s.min(u64::from(mine)) as u32) & !4095,
            _ => mine,
        };
        let inner = Arc::get_mut(&mut self.inner).expect("no other handle yet");
        inner.rsize = cap(v.maxread, inner.rsize);
        inner.wsize = cap(v.maxwrite, inner.wsize);
    }

    /// The minor version in use (1 or 2).
    pub fn minor_version(&self) -> u32 {
        self.inner.minor
    }

    pub fn url(&self) -> &NfsUrl {
        &self.inner.url
    }

    /// Per-op statistics (program "NFS4", one line per COMPOUND's main op).
    pub fn stats(&self) -> ClientStats {
        self.inner.stats.lock().expect("stats lock").clone()
    }

    /// Transport counters, summed over the session's connections.
    pub fn transport_stats(&self) -> TransportStats {
        self.inner.conns.stats()
    }

    /// Transport counters of each connection of the session, in order (one per connection
    /// in use: fewer than `nconnect` when the server refused trunking).
    pub fn connection_stats(&self) -> Vec<TransportStats> {
        self.inner.conns.stats_each()
    }

    /// Connections to the NFS service now, and how the automatic `nconnect` came to that
    /// number (`None` when the count was fixed).
    pub fn connections(&self) -> (usize, Option<String>) {
        (self.inner.conns.len(), self.inner.conns.growth_note())
    }

    /// Why the session has fewer connections than `nconnect` asked for (the server refused
    /// BIND_CONN_TO_SESSION), or `None`.
    pub fn trunking_note(&self) -> Option<&str> {
        self.inner.trunking_note.as_deref()
    }

    pub fn read_stats(&self) -> ReadStats {
        self.inner.files.read_stats()
    }

    /// The handle and attributes of `path` (absolute on the server's pseudo file system:
    /// PUTROOTFH, then one LOOKUP per component).
    pub async fn lookup(&self, path: &str) -> Result<(NfsFh4, Attr), Error> {
        let comps: Vec<&str> = crate::url::components(path).collect();
        // Besides the LOOKUPs: SEQUENCE, PUTROOTFH or PUTFH, GETFH, GETATTR.
        let per = (self.inner.ops_max - 4) as usize;
        let mut fh: Option<NfsFh4> = None;
        let mut chunks: Vec<&[&str]> = comps.chunks(per).collect();
        if chunks.is_empty() {
            chunks.push(&[]);
        }
        let n = chunks.len();
        for (i, chunk) in chunks.into_iter().enumerate() {
            let mut ops = vec![match &fh {
                None => NfsArgop4::Putrootfh(()),
                Some(f) => NfsArgop4::Putfh(f.clone()),
            }];
            for c in chunk {
                ops.push(NfsArgop4::Lookup(component(c)?));
            }
            ops.push(NfsArgop4::Getfh(()));
            if i + 1 == n {
                ops.push(NfsArgop4::Getattr(attr_request()));
            }
            let res = self.compound(ops).await?.ok()?;
            fh = Some(find_fh(&res)?);
            if i + 1 == n {
                return Ok((fh.expect("just set"), find_attr(&res)?));
            }
        }
        unreachable!("the last chunk returns")
    }

    /// Opens the regular file at `path` for reading (OPEN CLAIM_NULL in its directory).
    pub async fn open(&self, path: &str) -> Result<(Fh, Attr), Error> {
        self.open_in(path, OPEN4_SHARE_ACCESS_READ, Openflag4::NoCreate)
            .await
    }

    /// Creates (or with [`CreateMode::Truncate`] truncates) the file at `path` with `mode` and
    /// opens it for writing.
    pub async fn create(
        &self,
        path: &str,
        mode: u32,
        how: CreateMode,
    ) -> Result<(Fh, Attr), Error> {
        let mut a = AttrValues {
            mode: Some(mode & 0o7777),
            ..AttrValues::default()
        };
        let how = match how {
            CreateMode::Truncate => {
                a.size = Some(0);
                Createhow4::Unchecked(a.encode())
            }
            CreateMode::Exclusive => Createhow4::Exclusive41(CreatVerfAttr {
                verf: rand::random(),
                attrs: a.encode(),
            }),
        };
        self.open_in(path, OPEN4_SHARE_ACCESS_BOTH, Openflag4::Create(how))
            .await
    }

    async fn open_in(
        &self,
        path: &str,
        access: u32,
        openhow: Openflag4,
    ) -> Result<(Fh, Attr), Error> {
        let (dir, name) = split_path(path)?;
        let (dirfh, _) = self.lookup(dir).await?;
        self.open_at(&dirfh, access, openhow, OpenClaim4::Null(component(name)?))
            .await
    }

    /// Makes the directory `path` with `mode` (CREATE NF4DIR in its parent).
    pub async fn mkdir(&self, path: &str, mode: u32) -> Result<NfsFh4, Error> {
        let (dir, name) = split_path(path)?;
        let (dirfh, _) = self.lookup(dir).await?;
        let attrs = AttrValues {
            mode: Some(mode & 0o7777),
            ..AttrValues::default()
        };
        let res = self
            .compound(vec![
                NfsArgop4::Putfh(dirfh),
                NfsArgop4::Create(CreateArgs {
                    objtype: Createtype4::Dir,
                    objname: component(name)?,
                    createattrs: attrs.encode(),
                }),
                NfsArgop4::Getfh(()),
            ])
            .await?
            .ok()?;
        find_fh(&res)
    }

    /// CLOSE (and DELEGRETURN of a delegation the open came with).
    pub async fn close(&self, fh: &Fh) -> Result<(), Error> {
        if fh.stateid == Stateid4::ANONYMOUS {
            return Ok(());
        }
        // Forgotten first, so that a reopen pass from now on leaves it closed.
        let current = self
            .inner
            .open_files
            .lock()
            .expect("opens lock")
            .remove(fh.stateid);
        let mut ops = vec![
            NfsArgop4::Putfh(fh.fh.clone()),
            NfsArgop4::Close(CloseArgs {
                seqid: 0,
                open_stateid: current,
            }),
        ];
        let delegation = self
            .inner
            .callbacks
            .lock()
            .expect("callbacks lock")
            .delegations
            .closing(&fh.fh);
        if let Some(d) = delegation {
            ops.push(NfsArgop4::Delegreturn(d));
        }
        let res = self.compound(ops).await;
        if let Some(d) = delegation {
            let returned =
                matches!(&res, Ok(r) if r.results.iter().any(|r| r.opnum() == Opnum4::DELEGRETURN));
            if !returned {
                // CLOSE failed before it: the delegation is returned on its own.
                let _ = self
                    .compound(vec![
                        NfsArgop4::Putfh(fh.fh.clone()),
                        NfsArgop4::Delegreturn(d),
                    ])
                    .await;
            }
            self.inner
                .callbacks
                .lock()
                .expect("callbacks lock")
                .delegations
                .returned(&fh.fh, d);
        }
        res?.ok().map(|_| ())
    }

    /// Whether the current session has a back channel (the server can recall delegations).
    pub fn back_channel_up(&self) -> bool {
        self.inner.callbacks.lock().expect("callbacks lock").up
    }

    /// Delegations held now (not counting ones being returned).
    pub fn delegations_held(&self) -> usize {
        self.inner
            .callbacks
            .lock()
            .expect("callbacks lock")
            .delegations
            .held_count()
    }

    /// An OPEN of `fh` came with `d`: records it, or returns it at once when it cannot be
    /// kept (see [`deleg::Granted`]). The delegation stateid kept, if any.
    /// `attr`: the file's size and change as the OPEN's GETATTR saw them (a write
    /// delegation's CB_GETATTR answer until it is returned, which is at once: see [`deleg`]).
    async fn delegation_granted(
        &self,
        fh: &NfsFh4,
        d: &OpenDelegation4,
        attr: Option<(u64, u64)>,
    ) -> Option<Stateid4> {
        let (stateid, kind) = match d {
            OpenDelegation4::Read(d) => (d.stateid, deleg::Kind::Read),
            OpenDelegation4::Write(d) => (d.stateid, deleg::Kind::Write),
            _ => return None,
        };
        let granted = {
            let mut cbs = self.inner.callbacks.lock().expect("callbacks lock");
            match (cbs.up, kind, attr) {
                (true, deleg::Kind::Read, _) => cbs.delegations.granted(fh, stateid, kind),
                (true, deleg::Kind::Write, Some((size, change))) => {
                    cbs.delegations.write_granted(fh, stateid, size, change)
                }
                _ => deleg::Granted::ReturnNow,
            }
        };
        match granted {
            deleg::Granted::Held => Some(stateid),
            deleg::Granted::ReturnNow => {
                let _ = self
                    .compound(vec![
                        NfsArgop4::Putfh(fh.clone()),
                        NfsArgop4::Delegreturn(stateid),
                    ])
                    .await;
                self.inner
                    .callbacks
                    .lock()
                    .expect("callbacks lock")
                    .delegations
                    .returned(fh, stateid);
                None
            }
        }
    }

    /// Carries out a recall (see [`deleg::Return`]): COMMIT the file if UNSTABLE data went to
    /// it since its last COMMIT, through the same path as the file layer's COMMITs, then
    /// DELEGRETURN. Failures are logged: the server revokes a delegation that is not
    /// returned, which costs us nothing we rely on.
    async fn return_delegation(self, r: deleg::Return) {
        if r.flush {
            let fh = Fh::unopened(r.fh.clone());
            if let Err(e) = self.start_commit(&fh, 0, 0).await.await {
                tracing::debug!("{}: COMMIT before DELEGRETURN: {e}", self.inner.url.host);
            }
        }
        let res = self
            .compound(vec![
                NfsArgop4::Putfh(r.fh.clone()),
                NfsArgop4::Delegreturn(r.stateid),
            ])
            .await
            .and_then(Reply::ok);
        if let Err(e) = res {
            tracing::debug!("{}: recalled delegation: {e}", self.inner.url.host);
        }
        self.inner
            .callbacks
            .lock()
            .expect("callbacks lock")
            .delegations
            .returned(&r.fh, r.stateid);
    }

    /// Ends the session and the client id (DESTROY_SESSION, DESTROY_CLIENTID). Calls after it
    /// fail; dropping the last handle without it does the same in the background. Gives up
    /// after [`SHUTDOWN_WAIT`]: a server that is gone must not keep the caller (a mount that
    /// was just unmounted) waiting; its lease ends the state instead.
    pub async fn shutdown(&self) {
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let goodbye = async {
            // DESTROY_SESSION outside a SEQUENCE must come on a connection bound to the session.
            self.ensure_bound(0).await;
            let (sessionid, clientid) = {
                let s = self.inner.session.lock().expect("session lock");
                (s.sessionid, s.clientid)
            };
            destroy(
                self.inner.conns.first(),
                &self.inner.cred,
                self.inner.minor,
                sessionid,
                clientid,
            )
            .await;
        };
        if tokio::time::timeout(SHUTDOWN_WAIT, goodbye).await.is_err() {
            tracing::debug!(
                "{}: no answer to DESTROY_SESSION within {SHUTDOWN_WAIT:?}; the server's lease \
                 will end the state",
                self.inner.url
            );
        }
    }

    /// Sends `ops` after a SEQUENCE and waits for the reply (recovering the session as needed).
    pub async fn compound(&self, ops: Vec<NfsArgop4>) -> Result<Reply, Error> {
        self.start_compound(ops).await.await.0
    }

    /// Sends `ops` after a SEQUENCE; the [`Call`] resolves to the reply and the RTT sample of
    /// its last transmission (`None` if the transport resent it).
    pub async fn start_compound(
        &self,
        ops: Vec<NfsArgop4>,
    ) -> Call<(Result<Reply, Error>, Option<Duration>)> {
        if self.inner.closed.load(Ordering::SeqCst) {
            return Box::pin(async { (Err(Error::Other("the client is shut down".into())), None) });
        }
        let first = self.send(&ops).await;
        let c = self.clone();
        Box::pin(async move { c.finish(ops, first).await })
    }

    /// Takes a slot and sends `ops` on it, on the next connection in turn (bound first if it
    /// is new to the session).
    async fn send(&self, ops: &[NfsArgop4]) -> Sent {
        if let Some(i) = self.inner.conns.growth_due() {
            self.grow(i);
        }
        let (conn, rpc) = self.inner.conns.next();
        self.ensure_bound(conn).await;
        let slot = self.acquire().await;
        let (sessionid, cached_bytes) = {
            let s = self.inner.session.lock().expect("session lock");
            (s.sessionid, s.cached_bytes)
        };
        // A server that keeps less than we asked for might refuse to cache an OPEN's reply
        // (REP_TOO_BIG_TO_CACHE): then nothing is cached, as before the reply cache was used.
        let cachethis = cached_bytes >= CACHED_REPLY_BYTES
            && session::cache_this(ops.iter().map(|o| o.opnum()));
        let mut all = Vec::with_capacity(ops.len() + 1);
        all.push(NfsArgop4::Sequence(SequenceArgs {
            sessionid,
            sequenceid: slot.seqid,
            slotid: slot.slotid,
            highest_slotid: slot.highest_slotid,
            cachethis,
        }));
        all.extend(ops.iter().cloned());
        let (tracked, reopen_epoch) = {
            let t = self.inner.open_files.lock().expect("opens lock");
            (t.translate(&mut all[1..]), t.epoch())
        };
        let args = Compound4Args {
            tag: Utf8Str::default(),
            minorversion: self.inner.minor,
            ops: all,
        };
        let mut w = Writer::new();
        args.pack(&mut w);
        let segments = w.into_segments();
        let bytes_sent = segments.iter().map(|s| s.len()).sum();
        let sent_at = Instant::now();
        let call = rpc
            .start(compound_id(), &self.inner.cred, segments, TimerClass::Other)
            .await;
        Sent {
            slot,
            conn,
            tracked,
            reopen_epoch,
            call,
            bytes_sent,
            sent_at,
        }
    }

    /// Waits for `sent`, and re-sends `ops` as the slot table says until it is done.
    async fn finish(
        self,
        ops: Vec<NfsArgop4>,
        mut sent: Sent,
    ) -> (Result<Reply, Error>, Option<Duration>) {
        let (mut retries, mut recoveries) = (0u32, 0u32);
        let mut grace_waited = Duration::ZERO;
        let main_op = main_op(&ops);
        loop {
            let outcome = sent.call.wait().await;
            let rtt = outcome.as_ref().ok().and_then(|o| o.rtt_sample);
            let mut sample = Sample {
                bytes_sent: sent.bytes_sent,
                ..Sample::default()
            };
            let (seq, result) = match outcome {
                Ok(o) => {
                    sample.transmissions = o.transmissions;
                    sample.bytes_received = o.reply_bytes;
                    sample.elapsed = o.elapsed;
                    let limits = CompoundLimits {
                        ops_max: self.inner.ops_max + 1,
                        ..CompoundLimits::default()
                    };
                    match Compound4Res::decode(&mut o.reply.results(), &limits) {
                        Ok(res) => split_sequence(res),
                        Err(e) => (Outcome::NoReply, Err(Error::Decode(e))),
                    }
                }
                Err(e) => (Outcome::NoReply, Err(Error::Rpc(e))),
            };
            let next = {
                let mut s = self.inner.session.lock().expect("session lock");
                s.table.complete(sent.slot, &seq)
            };
            self.inner.slot_freed.notify_waiters();
            if let Outcome::Ok(_) = seq {
                self.inner
                    .lease
                    .lock()
                    .expect("lease lock")
                    .renewed(sent.sent_at);
            }
            let failed = match &result {
                Ok(r) => !r.status.is_ok(),
                Err(_) => true,
            };
            sample.error = failed || next != Next::Done;
            self.record(main_op, sample);
            let uncached = matches!(&result, Ok(r) if r.status == Nfsstat4::RETRY_UNCACHED_REP);
            if next == Next::Done
                && uncached
                && session::resend_uncached(ops.iter().map(|o| o.opnum()))
                && retries < RETRIES_MAX
            {
                // It ran, its reply was lost on a broken connection, and it changes nothing:
                // send it again as new work (see `session`).
                retries += 1;
                sent = self.send(&ops).await;
                continue;
            }
            let delayed = matches!(&result, Ok(r) if r.status == Nfsstat4::DELAY
            && session::resend_delayed(
                ops.iter().map(|o| o.opnum()),
                r.results.len().saturating_sub(1),
            ));
            if next == Next::Done && delayed && retries < RETRIES_MAX {
                // Not done, and nothing before it changed anything: again, a little later
                // (a conflicting OPEN while the server recalls a delegation, say).
                retries += 1;
                tokio::time::sleep(session::DELAY_RETRY).await;
                sent = self.send(&ops).await;
                continue;
            }
            let in_grace = matches!(&result, Ok(r) if r.status == Nfsstat4::GRACE
            && session::resend_delayed(
                ops.iter().map(|o| o.opnum()),
                r.results.len().saturating_sub(1),
            ));
            if next == Next::Done && in_grace && grace_waited < session::GRACE_WAIT_MAX {
                // The server restarted and lets its earlier clients reclaim first: new state
                // waits for the end of its grace period (RFC 8881 §8.4.2), as Linux waits.
                if grace_waited.is_zero() {
                    tracing::warn!(
                        "the server is in its grace period after a restart; waiting (up to {} s) for it to end",
                        session::GRACE_WAIT_MAX.as_secs()
                    );
                }
                grace_waited += session::GRACE_RETRY;
                tokio::time::sleep(session::GRACE_RETRY).await;
                sent = self.send(&ops).await;
                continue;
            }
            let stale = matches!(&result, Ok(r) if matches!(
                r.status,
                Nfsstat4::STALE_STATEID | Nfsstat4::BAD_STATEID
            ));
            if next == Next::Done && stale && sent.tracked {
                // Sent with a stateid of the old client id, racing the reopen pass: again with
                // the new one, if a pass has run since (see `reopen`).
                if self.reopen_finished().await > sent.reopen_epoch && retries < RETRIES_MAX {
                    retries += 1;
                    sent = self.send(&ops).await;
                    continue;
                }
            }
            match next {
                Next::Done => return (result, rtt),
                Next::Failed => {
                    return (
                        result.and_then(|r| {
                            // SEQUENCE itself failed: say so rather than "OK".
                            Err(Error::Status {
                                op: Opnum4::SEQUENCE,
                                status: r.status,
                            })
                        }),
                        rtt,
                    );
                }
                Next::Retry | Next::RetryAfter(_) | Next::Rebind => {
                    retries += 1;
                    if retries > RETRIES_MAX {
                        return (Err(sequence_error(&seq)), rtt);
                    }
                    if let Next::RetryAfter(d) = next {
                        tokio::time::sleep(d).await;
                    }
                    if next == Next::Rebind {
                        self.inner.bound.lock().expect("bound lock")[sent.conn] = None;
                        self.ensure_bound(sent.conn).await;
                    }
                }
                Next::NewSession | Next::NewClient => {
                    recoveries += 1;
                    if recoveries > RECOVERIES_MAX {
                        return (Err(sequence_error(&seq)), rtt);
                    }
                    if let Err(e) = self.recover(sent.slot.generation, next).await {
                        return (Err(e), rtt);
                    }
                }
            }
            sent = self.send(&ops).await;
        }
    }

    /// A free slot of the current session (waits while all are busy). A session whose slots
    /// are all retired (requests that got no reply) is replaced first.
    async fn acquire(&self) -> Slot {
        loop {
            let freed = self.inner.slot_freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let exhausted = {
                let mut s = self.inner.session.lock().expect("session lock");
                if let Some(slot) = s.table.acquire() {
                    return slot;
                }
                s.table.exhausted().then(|| s.table.generation())
            };
            match exhausted {
                Some(generation) => {
                    if let Err(e) = self.recover(generation, Next::NewSession).await {
                        tracing::warn!(
                            "{}: NFSv4 session recovery failed: {e}",
                            self.inner.url.host
                        );
                        tokio::time::sleep(RECOVERY_RETRY).await;
                    }
                }
                None => freed.await,
            }
        }
    }

    /// Opens connection `i` in the background (automatic `nconnect`) and binds it to the
    /// session (BIND_CONN_TO_SESSION) before it carries a COMPOUND; a server that refuses the
    /// bind leaves the client on the connections it has, as at connect time.
    fn grow(&self, i: usize) {
        let c = self.clone();
        tokio::spawn(async move {
            let inner = &c.inner;
            let rpc = match inner.conns.connect_more().await {
                Ok(rpc) => rpc,
                Err(e) => return inner.conns.growth_failed(&e.to_string()),
            };
            let (sessionid, generation) = {
                let s = inner.session.lock().expect("session lock");
                (s.sessionid, s.table.generation())
            };
            match bind_conn(
                &rpc,
                &inner.cred,
                inner.minor,
                sessionid,
                CDFC4_FORE,
                &inner.stats,
            )
            .await
            {
                Ok(()) => {
                    // Bound to this session: `ensure_bound` binds it again only if the session
                    // changed meanwhile or the connection was re-established.
                    inner.bound.lock().expect("bound lock")[i] =
                        Some((generation, rpc.stats().reconnects));
                    inner.conns.place(i, rpc);
                    inner.conns.activate(i);
                }
                Err(e) => inner
                    .conns
                    .growth_failed(&format!("BIND_CONN_TO_SESSION refused: {e}")),
            }
        });
    }

    /// Binds connection `conn` to the current session unless it already is, for this session
    /// and since its last reconnect. A failure is only logged: the COMPOUND that follows finds
    /// out (a server that binds on SEQUENCE takes it anyway; one that does not answers
    /// CONN_NOT_BOUND_TO_SESSION, which comes back here through [`Next::Rebind`]).
    async fn ensure_bound(&self, conn: usize) {
        let i = &self.inner;
        let rpc = i.conns.get(conn);
        let (sessionid, generation) = {
            let s = i.session.lock().expect("session lock");
            (s.sessionid, s.table.generation())
        };
        let want = Some((generation, rpc.stats().reconnects));
        {
            let mut bound = i.bound.lock().expect("bound lock");
            if bound[conn] == want {
                return;
            }
            // Claimed before the call, so that callers racing on this connection bind it once.
            bound[conn] = want;
        }
        // The first connection carries the back channel, if the session has one: a
        // reconnected first connection must be bound for both directions again.
        let dir = if conn == 0 && self.back_channel_up() {
            CDFC4_FORE_OR_BOTH
        } else {
            CDFC4_FORE
        };
        if let Err(e) = bind_conn(rpc, &i.cred, i.minor, sessionid, dir, &i.stats).await {
            tracing::debug!(
                "{}: BIND_CONN_TO_SESSION of connection {} failed: {e}",
                i.url.host,
                conn + 1
            );
        }
    }

    /// Replaces the session (and with [`Next::NewClient`], or when CREATE_SESSION finds the
    /// client id gone, the client id) that `generation` numbered. Recoveries are one at a
    /// time, and a caller that finds the session already replaced returns at once.
    ///
    /// Boxed with its `Send` bound spelled out: recovery sends RECLAIM_COMPLETE through
    /// [`Client::compound`], whose future contains this one, a cycle the compiler cannot see
    /// `Send` through on its own.
    fn recover(
        &self,
        generation: u64,
        why: Next,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Error>> + Send + '_>> {
        Box::pin(self.recover_now(generation, why))
    }

    async fn recover_now(&self, generation: u64, why: Next) -> Result<(), Error> {
        let _one = self.inner.recovery.lock().await;
        let (clientid, create_seq, current) = {
            let s = self.inner.session.lock().expect("session lock");
            (s.clientid, s.create_seq, s.table.generation())
        };
        if current != generation {
            return Ok(());
        }
        let i = &self.inner;
        let slots = i.files.options.write_depth_max.max(1) as u32;
        tracing::info!(
            "{}: NFSv4 {} lost, recovering",
            i.url.host,
            if why == Next::NewClient {
                "client id"
            } else {
                "session"
            }
        );
        let mut made = None;
        if why == Next::NewSession {
            match create_session(
                i.conns.first(),
                &i.cred,
                i.minor,
                clientid,
                create_seq,
                slots,
                &i.stats,
            )
            .await
            {
                Ok(x) => made = Some((clientid, x)),
                Err(e)
                    if matches!(
                        e.status(),
                        Some(Nfsstat4::STALE_CLIENTID) | Some(Nfsstat4::EXPIRED)
                    ) => {}
                Err(e) => return Err(e),
            }
        }
        let new_client = made.is_none();
        let (clientid, (sess, create_seq)) = match made {
            Some(m) => m,
            None => {
                let rpc = i.conns.first();
                let (id, seq) =
                    exchange_id(rpc, &i.cred, i.minor, &i.owner, i.verifier, &i.stats).await?;
                (
                    id,
                    create_session(rpc, &i.cred, i.minor, id, seq, slots, &i.stats).await?,
                )
            }
        };
        // Before the new session is usable: a call failing on an old stateid from now on
        // waits for the pass (see `reopen`).
        let run_pass = new_client && i.open_files.lock().expect("opens lock").start_pass();
        {
            let mut s = i.session.lock().expect("session lock");
            s.clientid = clientid;
            s.create_seq = create_seq;
            s.sessionid = sess.sessionid;
            s.table = SlotTable::new(generation + 1, sess.fore_chan_attrs.maxrequests);
            s.cached_bytes = sess.fore_chan_attrs.maxresponsesize_cached;
            let mut cbs = i.callbacks.lock().expect("callbacks lock");
            cbs.new_session(
                sess.sessionid,
                back_channel(&sess),
                sess.back_chan_attrs.maxrequests,
            );
            if new_client {
                // The old client id's delegations died with it (RFC 8881 §10.2.1).
                cbs.delegations.clear();
            }
            drop(cbs);
            // CREATE_SESSION bound the first connection to the new session.
            i.bound.lock().expect("bound lock")[0] =
                Some((generation + 1, i.conns.first().stats().reconnects));
        }
        // The others were bound to the old one: bind them to the new one before anyone sends.
        for conn in 1..i.conns.len() {
            self.ensure_bound(conn).await;
        }
        i.slot_freed.notify_waiters();
        // The pass runs after the recovery lock is released: its calls may need a recovery of
        // their own.
        drop(_one);
        if run_pass {
            self.reopen_pass().await;
        }
        Ok(())
    }

    /// Opens every tracked file again under the new client id, reclaiming opens and their
    /// byte-range locks in the server's grace period when it has one, and sends
    /// RECLAIM_COMPLETE in between (see [`reopen`]).
    async fn reopen_pass(&self) {
        let mut rounds = 0;
        loop {
            self.reopen_round().await;
            let again = self.inner.open_files.lock().expect("opens lock").end_pass();
            if !again {
                break;
            }
            rounds += 1;
            if rounds > RECOVERIES_MAX {
                while self.inner.open_files.lock().expect("opens lock").end_pass() {}
                break;
            }
        }
        self.inner.reopen_done.notify_waiters();
    }

    async fn reopen_round(&self) {
        let todo = self
            .inner
            .open_files
            .lock()
            .expect("opens lock")
            .to_reopen();
        let host = &self.inner.url.host;
        let mut pass = ReclaimPass::new(todo);
        loop {
            let step = pass.next(&mut self.inner.open_files.lock().expect("opens lock"));
            let result = match &step {
                Step::Done => break,
                Step::ReclaimComplete => {
                    self.reclaim_complete().await;
                    continue;
                }
                Step::ClaimPrevious(rec) => {
                    self.reopen_one(rec, OpenClaim4::Previous(OPEN_DELEGATE_NONE))
                        .await
                }
                Step::ClaimFh(rec) => self.reopen_one(rec, OpenClaim4::Fh).await,
                Step::ReclaimLock {
                    fh,
                    open_stateid,
                    owner,
                    lock_stateid,
                    write,
                    offset,
                    length,
                } => {
                    self.reclaim_lock(
                        fh,
                        *open_stateid,
                        owner,
                        *lock_stateid,
                        *write,
                        *offset,
                        *length,
                    )
                    .await
                }
            };
            let answer = match result {
                Ok(s) => Answer::Ok(s),
                Err(e) if e.status() == Some(Nfsstat4::NO_GRACE) => Answer::NoGrace,
                Err(e) => {
                    match &step {
                        Step::ClaimFh(_) => {
                            tracing::warn!("{host}: reopening a file after the restart failed: {e}")
                        }
                        _ => tracing::debug!("{host}: a reclaim failed: {e}"),
                    }
                    Answer::Failed
                }
            };
            pass.answer(
                answer,
                &mut self.inner.open_files.lock().expect("opens lock"),
            );
        }
        let c = pass.counts;
        if c.reclaimed + c.reopened > 0 {
            tracing::info!(
                "{host}: NFSv4 opens after the new client id: {} reclaimed, {} opened again",
                c.reclaimed,
                c.reopened
            );
        }
        if c.locks_reclaimed > 0 {
            tracing::info!(
                "{host}: NFSv4 byte-range locks after the new client id: {} reclaimed",
                c.locks_reclaimed
            );
        }
        if c.locks_lost > 0 {
            tracing::warn!(
                "{host}: the server restarted; {} byte-range lock(s) could not be reclaimed \
                 and were lost (not taken again: another client may hold them now)",
                c.locks_lost
            );
        }
    }

    /// LOCK with `reclaim` of one range held before the restart; the new lock stateid.
    #[allow(clippy::too_many_arguments)]
    async fn reclaim_lock(
        &self,
        fh: &NfsFh4,
        open_stateid: Stateid4,
        owner: &[u8],
        lock_stateid: Option<Stateid4>,
        write: bool,
        offset: u64,
        length: u64,
    ) -> Result<Stateid4, Error> {
        let locker = match lock_stateid {
            Some(lock_stateid) => Locker4::Exist(ExistLockOwner4 {
                lock_stateid,
                lock_seqid: 0,
            }),
            None => {
                let clientid = self.inner.session.lock().expect("session lock").clientid;
                Locker4::New(OpenToLockOwner4 {
                    open_seqid: 0,
                    open_stateid,
                    lock_seqid: 0,
                    lock_owner: StateOwner4 {
                        clientid,
                        owner: Opaque4(Bytes::copy_from_slice(owner)),
                    },
                })
            }
        };
        let res = self
            .compound(vec![
                NfsArgop4::Putfh(fh.clone()),
                NfsArgop4::Lock(LockArgs {
                    locktype: if write { WRITE_LT } else { READ_LT },
                    reclaim: true,
                    offset,
                    length,
                    locker,
                }),
            ])
            .await?
            .ok()?;
        match res.last() {
            Some(NfsResop4::Lock(LockRes::Ok(s))) => Ok(*s),
            _ => Err(Error::Other("LOCK returned no result".into())),
        }
    }

    /// OPEN of `rec`'s file by handle with `claim` (CLAIM_PREVIOUS or CLAIM_FH); the new
    /// stateid. A delegation that comes with it is returned at once: the caller's handle does
    /// not know it.
    async fn reopen_one(&self, rec: &OpenRecord, claim: OpenClaim4) -> Result<Stateid4, Error> {
        let clientid = self.inner.session.lock().expect("session lock").clientid;
        let res = self
            .compound(vec![
                NfsArgop4::Putfh(rec.fh.clone()),
                NfsArgop4::Open(OpenArgs {
                    seqid: 0,
                    share_access: rec.access,
                    share_deny: 0,
                    owner: StateOwner4 {
                        clientid,
                        owner: Opaque4(Bytes::from(rec.owner.clone())),
                    },
                    openhow: Openflag4::NoCreate,
                    claim,
                }),
            ])
            .await?
            .ok()?;
        let Some(NfsResop4::Open(Res4::Ok(open))) = res.last() else {
            return Err(Error::Other("OPEN returned no result".into()));
        };
        let delegation = match &open.delegation {
            OpenDelegation4::Read(d) => Some(d.stateid),
            OpenDelegation4::Write(d) => Some(d.stateid),
            _ => None,
        };
        if let Some(d) = delegation {
            let _ = self
                .compound(vec![
                    NfsArgop4::Putfh(rec.fh.clone()),
                    NfsArgop4::Delegreturn(d),
                ])
                .await;
        }
        Ok(open.stateid)
    }

    /// Waits until no reopen pass runs; the passes finished by then.
    async fn reopen_finished(&self) -> u64 {
        loop {
            let done = self.inner.reopen_done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            {
                let t = self.inner.open_files.lock().expect("opens lock");
                if !t.pass_running() {
                    return t.epoch();
                }
            }
            done.await;
        }
    }

    fn record(&self, op: Opnum4, sample: Sample) {
        self.inner
            .stats
            .lock()
            .expect("stats lock")
            .record("NFS4", op.0, op.name(), sample);
    }

    /// Every entry of the directory `dir` with its attributes (READDIR pages, at most
    /// [`DIR_ENTRIES_MAX`] entries), in the server's order.
    pub async fn readdir(&self, dir: &NfsFh4) -> Result<Vec<(String, Attr)>, Error> {
        let mut out = Vec::new();
        let (mut cookie, mut cookieverf) = (0u64, [0u8; 8]);
        loop {
            let res = self
                .compound(vec![
                    NfsArgop4::Putfh(dir.clone()),
                    NfsArgop4::Readdir(ReaddirArgs {
                        cookie,
                        cookieverf,
                        dircount: READDIR_DIRCOUNT_BYTES,
                        maxcount: self.inner.rsize.min(READDIR_MAXCOUNT_BYTES),
                        attr_request: attr_request(),
                    }),
                ])
                .await?
                .ok()?;
            let Some(NfsResop4::Readdir(Res4::Ok(page))) = res.into_iter().last() else {
                return Err(Error::Other("READDIR returned nothing".into()));
            };
            if page.entries.is_empty() && !page.eof {
                return Err(Error::Other(
                    "the server returned an empty READDIR page before the end".into(),
                ));
            }
            for e in &page.entries {
                let name = String::from_utf8_lossy(&e.name).into_owned();
                out.push((name, Attr::from_fattr(&e.attrs)?));
            }
            if out.len() > DIR_ENTRIES_MAX {
                return Err(Error::Other(format!(
                    "more than {DIR_ENTRIES_MAX} directory entries"
                )));
            }
            if page.eof {
                return Ok(out);
            }
            cookie = page.entries.last().map_or(cookie, |e| e.cookie);
            cookieverf = page.cookieverf;
        }
    }

    /// GETATTR of any handle.
    pub async fn getattr_fh(&self, fh: &NfsFh4) -> Result<Attr, Error> {
        let res = self
            .compound(vec![
                NfsArgop4::Putfh(fh.clone()),
                NfsArgop4::Getattr(attr_request()),
            ])
            .await?
            .ok()?;
        find_attr(&res)
    }
}

/// One transmission of a COMPOUND.
struct Sent {
    slot: Slot,
    /// The connection it went on.
    conn: usize,
    /// Whether it carried a stateid of [`Inner::open_files`], and the reopen passes done when
    /// it was sent.
    tracked: bool,
    reopen_epoch: u64,
    call: PendingCall,
    bytes_sent: usize,
    sent_at: Instant,
}

impl Drop for Inner {
    /// The last handle is gone without [`Client::shutdown`]: end the session in the background
    /// if a runtime is still there (the server's lease expiry is the fallback).
    fn drop(&mut self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let s = self.session.lock().expect("session lock");
        let (rpc, cred, minor) = (self.conns.first().clone(), self.cred.clone(), self.minor);
        let (sessionid, clientid) = (s.sessionid, s.clientid);
        rt.spawn(async move { destroy(&rpc, &cred, minor, sessionid, clientid).await });
    }
}

/// READDIR's `dircount`: 64 KiB of names and cookies per page (about 2,000 entries), Linux's
/// choice for READDIRPLUS-like listings.
const READDIR_DIRCOUNT_BYTES: u32 = 64 * 1024;
/// READDIR's `maxcount`: a page with attributes, 256 KiB (lowered to rsize).
const READDIR_MAXCOUNT_BYTES: u32 = 256 * 1024;
/// Most entries one listing collects: a million names with attributes is ~200 MiB, a bound
/// on what a hostile or broken server can make us hold.
pub const DIR_ENTRIES_MAX: usize = 1_000_000;

/// Largest back-channel call and reply (`ca_maxrequestsize`, `ca_maxresponsesize`): see
/// `create_session`.
const BACK_CALL_BYTES: u32 = 4096;
/// Ops per CB_COMPOUND (`ca_maxoperations`): CB_SEQUENCE and up to 15 recalls; more are
/// refused by the decoder's own bound.
const BACK_OPS_MAX: u32 = 16;

/// Whether CREATE_SESSION gave the session a back channel on its first connection.
fn back_channel(sess: &CreateSessionResOk) -> bool {
    sess.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0
}

/// The callback program as the transport sees it: decodes CB_COMPOUND, lets
/// [`deleg::Callbacks`] answer it, and starts the returns a recall asks for on tasks of
/// their own, so the reply goes out at once (see [`deleg`]).
#[derive(Default)]
struct CbService {
    state: Arc<Mutex<deleg::Callbacks>>,
    /// The client, once connected (before that there is nothing to return).
    client: std::sync::OnceLock<Weak<Inner>>,
}

impl CallbackService for CbService {
    fn handle(
        self: Arc<Self>,
        call: IncomingCall,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = CallbackReply> + Send>> {
        Box::pin(async move { self.answer(&call) })
    }
}

impl CbService {
    fn answer(&self, call: &IncomingCall) -> CallbackReply {
        if call.call.prog() != cb::PROGRAM_DEFAULT {
            return CallbackReply::ProgUnavail;
        }
        if call.call.vers() != cb::VERSION {
            return CallbackReply::ProgMismatch {
                low: cb::VERSION,
                high: cb::VERSION,
            };
        }
        match call.call.proc_() {
            cb::proc_::CB_NULL => return CallbackReply::Results(Vec::new()),
            cb::proc_::CB_COMPOUND => {}
            _ => return CallbackReply::ProcUnavail,
        }
        let limits = CompoundLimits {
            ops_max: BACK_OPS_MAX,
            ..CompoundLimits::default()
        };
        let res = match CbCompound4Args::decode(&mut call.args(), &limits) {
            Ok(args) => {
                let outcome = self
                    .state
                    .lock()
                    .expect("callbacks lock")
                    .handle_compound(&args);
                let client = self.client.get().and_then(Weak::upgrade);
                for r in outcome.returns {
                    match &client {
                        Some(inner) => {
                            let c = Client {
                                inner: inner.clone(),
                            };
                            tokio::spawn(c.return_delegation(r));
                        }
                        None => tracing::debug!("a recall with no client left to return it"),
                    }
                }
                outcome.res
            }
            Err(CompoundError::TooManyOps { tag, .. }) => CbCompound4Res {
                status: Nfsstat4::TOO_MANY_OPS,
                tag,
                results: Vec::new(),
            },
            Err(CompoundError::Xdr(_)) => return CallbackReply::GarbageArgs,
        };
        let mut w = Writer::new();
        res.pack(&mut w);
        CallbackReply::Results(w.into_segments())
    }
}

/// OPEN CLAIM_PREVIOUS's delegation type: none (RFC 8881 §18.16.1, `open_delegation_type4`).
const OPEN_DELEGATE_NONE: u32 = 0;
/// OPEN share access (RFC 8881 §18.16.3).
const OPEN4_SHARE_ACCESS_READ: u32 = 1;
const OPEN4_SHARE_ACCESS_BOTH: u32 = 3;

fn compound_id() -> ProcId {
    ProcId {
        prog: nfs4::PROGRAM,
        vers: nfs4::VERSION,
        proc_: nfs4::proc_::COMPOUND,
    }
}

fn attr_request() -> Bitmap4 {
    Bitmap4::from_bits(ATTR_BITS)
}

fn component(name: &str) -> Result<Component4, Error> {
    if name.is_empty() || name.len() > 255 || name.contains('/') || name.contains('\0') {
        return Err(Error::Other(format!("bad file name {name:?}")));
    }
    Ok(Component4(Bytes::copy_from_slice(name.as_bytes())))
}

/// `/a/b/c` → (`/a/b`, `c`).
fn split_path(path: &str) -> Result<(&str, &str), Error> {
    let p = path.trim_end_matches('/');
    match p.rsplit_once('/') {
        Some((dir, name)) if !name.is_empty() => Ok((if dir.is_empty() { "/" } else { dir }, name)),
        _ => Err(Error::Other(format!("{path}: not a file path"))),
    }
}

/// The last GETFH result.
fn find_fh(res: &[NfsResop4]) -> Result<NfsFh4, Error> {
    res.iter()
        .rev()
        .find_map(|r| match r {
            NfsResop4::Getfh(Res4::Ok(fh)) => Some(fh.clone()),
            _ => None,
        })
        .ok_or_else(|| Error::Other("the reply has no file handle".into()))
}

/// The last GETATTR result.
fn find_attr(res: &[NfsResop4]) -> Result<Attr, Error> {
    res.iter()
        .rev()
        .find_map(|r| match r {
            NfsResop4::Getattr(Res4::Ok(f)) => Some(Attr::from_fattr(f)),
            _ => None,
        })
        .unwrap_or_else(|| Err(Error::Other("the reply has no attributes".into())))
}

/// Separates SEQUENCE's result from the others.
fn split_sequence(res: Compound4Res) -> (Outcome, Result<Reply, Error>) {
    let mut results = res.results.into_iter();
    let seq = match results.next() {
        Some(NfsResop4::Sequence(Res4::Ok(ok))) => Outcome::Ok(ok),
        Some(NfsResop4::Sequence(Res4::Err(s))) => Outcome::Err(s),
        // No SEQUENCE result: the COMPOUND failed as a whole (MINOR_VERS_MISMATCH, say).
        _ => Outcome::Err(if res.status.is_ok() {
            Nfsstat4::SERVERFAULT
        } else {
            res.status
        }),
    };
    let reply = Reply {
        status: res.status,
        results: results.collect(),
    };
    (seq, Ok(reply))
}

/// The op a COMPOUND is counted under in the statistics: the first after the PUT*FH that sets
/// its file handle (READ, WRITE, OPEN, LOOKUP, ...); SEQUENCE for a renewal.
fn main_op(ops: &[NfsArgop4]) -> Opnum4 {
    // A path walk that ends in OPEN (`Namespace::open_path`) counts as the OPEN.
    if ops.iter().any(|o| o.opnum() == Opnum4::OPEN) {
        return Opnum4::OPEN;
    }
    ops.iter()
        .map(|o| o.opnum())
        .find(|&o| o != Opnum4::PUTFH && o != Opnum4::PUTROOTFH)
        .unwrap_or(Opnum4::SEQUENCE)
}

fn sequence_error(seq: &Outcome) -> Error {
    match seq {
        Outcome::Err(s) => Error::Status {
            op: Opnum4::SEQUENCE,
            status: *s,
        },
        _ => Error::Other("the session could not be recovered".into()),
    }
}

/// Most bytes of a client owner (`NFS4_OPAQUE_LIMIT`).
const OWNER_BYTES_MAX: usize = 1024;

/// `sluice/HOST/UID/TAG`: a client owner stable per host, user and `tag` (the mount passes
/// `mount:` and its mount point; see the module docs). A `tag` too long for the owner's 1 KiB
/// is replaced by its 64-bit FNV-1a hash, which is stable across builds.
pub fn stable_owner(uid: u32, tag: &str) -> Vec<u8> {
    let host = String::from_utf8_lossy(&crate::identity::hostname()).into_owned();
    let owner = format!("sluice/{host}/{uid}/{tag}");
    if owner.len() <= OWNER_BYTES_MAX {
        return owner.into_bytes();
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in tag.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut owner = format!("sluice/{host}/{uid}/#{h:016x}").into_bytes();
    owner.truncate(OWNER_BYTES_MAX);
    owner
}

/// `sluice/HOST/UID/PID/N`: see the module docs.
fn instance_owner() -> Vec<u8> {
    static INSTANCES: AtomicU64 = AtomicU64::new(0);
    let n = INSTANCES.fetch_add(1, Ordering::Relaxed);
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let host = String::from_utf8_lossy(&crate::identity::hostname()).into_owned();
    format!("sluice/{host}/{uid}/{}/{n}", std::process::id()).into_bytes()
}

// --- calls outside a session -------------------------------------------------------------------

/// The deadline of the connect probe ([`V4Options::probe_timeout`]).
struct Probe {
    timeout: Option<Duration>,
    deadline: Option<tokio::time::Instant>,
}

impl Probe {
    fn new(timeout: Option<Duration>) -> Probe {
        Probe {
            timeout,
            deadline: timeout.map(|t| tokio::time::Instant::now() + t),
        }
    }

    /// `f`, or [`Error::Connect`] if the deadline passes first (the call is dropped, which
    /// forgets it in the transport; the connection goes with the client).
    async fn within<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let (Some(deadline), Some(t)) = (self.deadline, self.timeout) else {
            return f.await;
        };
        match tokio::time::timeout_at(deadline, f).await {
            Ok(r) => r,
            Err(_) => Err(Error::Connect(format!(
                "no answer to the NFSv4 probe (connect, NULL, EXCHANGE_ID) within {} ms",
                t.as_millis()
            ))),
        }
    }
}

/// NULL: is anyone serving NFSv4 there? (PROG_MISMATCH says which versions are.)
async fn null(rpc: &RpcClient, cred: &OpaqueAuth) -> Result<(), Error> {
    let id = ProcId {
        proc_: nfs4::proc_::NULL,
        ..compound_id()
    };
    match rpc.call(id, cred, Vec::new(), TimerClass::Other).await {
        Ok(_) => Ok(()),
        Err(CallError::Rpc(RpcError::ProgMismatch { low, high })) => Err(Error::Connect(format!(
            "the server does not speak NFSv4 (versions {low} to {high} only)"
        ))),
        Err(CallError::Rpc(RpcError::ProgUnavail)) => {
            Err(Error::Connect("the server does not serve NFS there".into()))
        }
        Err(e) => Err(Error::Rpc(e)),
    }
}

/// A COMPOUND without SEQUENCE (EXCHANGE_ID, CREATE_SESSION, DESTROY_*: RFC 8881 §2.10.6.3 lets
/// each stand alone).
async fn lone_op(
    rpc: &RpcClient,
    cred: &OpaqueAuth,
    minor: u32,
    op: NfsArgop4,
    stats: Option<&Mutex<ClientStats>>,
) -> Result<NfsResop4, Error> {
    let opnum = op.opnum();
    let args = Compound4Args {
        tag: Utf8Str::default(),
        minorversion: minor,
        ops: vec![op],
    };
    let mut w = Writer::new();
    args.pack(&mut w);
    let segments = w.into_segments();
    let bytes_sent = segments.iter().map(|s| s.len()).sum();
    let outcome = rpc
        .call(compound_id(), cred, segments, TimerClass::Other)
        .await;
    let mut sample = Sample {
        bytes_sent,
        ..Sample::default()
    };
    let result = match outcome {
        Ok(o) => {
            sample.transmissions = o.transmissions;
            sample.bytes_received = o.reply_bytes;
            sample.elapsed = o.elapsed;
            let res = Compound4Res::decode(&mut o.reply.results(), &CompoundLimits::default())?;
            match res.results.into_iter().next() {
                Some(r) if res.status.is_ok() => Ok(r),
                _ => Err(Error::Status {
                    op: opnum,
                    status: if res.status.is_ok() {
                        Nfsstat4::SERVERFAULT
                    } else {
                        res.status
                    },
                }),
            }
        }
        Err(e) => Err(Error::Rpc(e)),
    };
    sample.error = result.is_err();
    if let Some(stats) = stats {
        stats
            .lock()
            .expect("stats lock")
            .record("NFS4", opnum.0, opnum.name(), sample);
    }
    result
}

/// EXCHANGE_ID with SP4_NONE: the client id and the sequence id for CREATE_SESSION.
async fn exchange_id(
    rpc: &RpcClient,
    cred: &OpaqueAuth,
    minor: u32,
    owner: &[u8],
    verifier: [u8; 8],
    stats: &Mutex<ClientStats>,
) -> Result<(u64, u32), Error> {
    let op = NfsArgop4::ExchangeId(ExchangeIdArgs {
        clientowner: ClientOwner4 {
            verifier,
            ownerid: Opaque4(Bytes::copy_from_slice(owner)),
        },
        flags: 0,
        state_protect: StateProtect4A::None,
        client_impl_id: ImplIdList::default(),
    });
    match lone_op(rpc, cred, minor, op, Some(stats)).await? {
        NfsResop4::ExchangeId(Res4::Ok(ok)) => Ok((ok.clientid, ok.sequenceid)),
        other => Err(Error::Status {
            op: Opnum4::EXCHANGE_ID,
            status: other.status(),
        }),
    }
}

/// CREATE_SESSION asking for `slots` fore-channel slots sized for 1 MiB transfers; the session
/// and the next `csa_sequence`.
async fn create_session(
    rpc: &RpcClient,
    cred: &OpaqueAuth,
    minor: u32,
    clientid: u64,
    sequence: u32,
    slots: u32,
    stats: &Mutex<ClientStats>,
) -> Result<(CreateSessionResOk, u32), Error> {
    let transfer = TRANSFER_BYTES_MAX + HEADER_BYTES_MAX;
    let op = NfsArgop4::CreateSession(CreateSessionArgs {
        clientid,
        sequence,
        // The session's first connection also carries the server's calls (see `deleg`).
        flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
        fore_chan_attrs: ChannelAttrs4 {
            headerpadsize: 0,
            maxrequestsize: transfer,
            maxresponsesize: transfer,
            // Only the replies of COMPOUNDs that change state are cached (WRITE, OPEN...),
            // which are small (see `session::cache_this`).
            maxresponsesize_cached: CACHED_REPLY_BYTES,
            maxoperations: OPS_MAX,
            maxrequests: slots.min(session::SLOTS_MAX),
            rdma_ird: Default::default(),
        },
        // Callbacks are small: CB_SEQUENCE and a few recalls (each ~180 bytes with a 128-byte
        // handle) fit 4 KiB, as Linux asks; the replies are smaller still and all may be
        // cached (see `deleg::BackSlots`).
        back_chan_attrs: ChannelAttrs4 {
            headerpadsize: 0,
            maxrequestsize: BACK_CALL_BYTES,
            maxresponsesize: BACK_CALL_BYTES,
            maxresponsesize_cached: BACK_CALL_BYTES,
            maxoperations: BACK_OPS_MAX,
            maxrequests: deleg::BACK_SLOTS_MAX,
            rdma_ird: Default::default(),
        },
        // The callback program number is ours to choose; Linux's is the usual one.
        cb_program: cb::PROGRAM_DEFAULT,
        sec_parms: CallbackSecParmsList(vec![CallbackSecParms4::AuthNone]),
    });
    match lone_op(rpc, cred, minor, op, Some(stats)).await? {
        NfsResop4::CreateSession(Res4::Ok(ok)) => Ok((ok, sequence.wrapping_add(1))),
        other => Err(Error::Status {
            op: Opnum4::CREATE_SESSION,
            status: other.status(),
        }),
    }
}

/// BIND_CONN_TO_SESSION of `rpc`'s connection to the session, in direction `dir`
/// (`CDFC4_FORE`, or `CDFC4_FORE_OR_BOTH` for the first connection of a session with a back
/// channel). Extra `nconnect` connections are bound for the fore channel only: every
/// connection answers callbacks, but one path is all the server needs, and the first
/// connection is the one CREATE_SESSION gave it. Success needs the fore channel bound.
async fn bind_conn(
    rpc: &RpcClient,
    cred: &OpaqueAuth,
    minor: u32,
    sessionid: SessionId4,
    dir: u32,
    stats: &Mutex<ClientStats>,
) -> Result<(), Error> {
    let op = NfsArgop4::BindConnToSession(BindConnToSessionArgs {
        sessid: sessionid,
        dir,
        use_conn_in_rdma_mode: false,
    });
    match lone_op(rpc, cred, minor, op, Some(stats)).await? {
        NfsResop4::BindConnToSession(Res4::Ok(ok)) if ok.dir & CDFS4_FORE != 0 => Ok(()),
        NfsResop4::BindConnToSession(Res4::Ok(ok)) => Err(Error::Other(format!(
            "BIND_CONN_TO_SESSION bound direction {:#x}, not the fore channel",
            ok.dir
        ))),
        other => Err(Error::Status {
            op: Opnum4::BIND_CONN_TO_SESSION,
            status: other.status(),
        }),
    }
}

/// What session trunking at connect time needs (see "Session trunking" in the module docs).
struct Trunk<'a> {
    /// Connections wanted in all (`nconnect`).
    n: usize,
    config: &'a RpcConfig,
    cred: &'a OpaqueAuth,
    minor: u32,
    sessionid: SessionId4,
    stats: &'a Mutex<ClientStats>,
}

impl Trunk<'_> {
    /// Opens connections until there are `n` and binds each new one to the session. When the
    /// server refuses a bind, the client goes on with the first connection alone and says why
    /// (the returned note, also logged): trunking is an optimisation, not a reason to fail.
    /// Failing to open a connection at all is an error, as for NFSv3.
    async fn open(&self, conns: &mut Connections) -> Result<Option<String>, Error> {
        conns
            .open(self.n, self.config)
            .await
            .map_err(Error::Connect)?;
        for i in 1..conns.len() {
            let rpc = conns.get(i);
            if let Err(e) = bind_conn(
                rpc,
                self.cred,
                self.minor,
                self.sessionid,
                CDFC4_FORE,
                self.stats,
            )
            .await
            {
                let note = format!(
                    "nconnect={}: the server did not bind connection {} to the NFSv4.1 session \
                     ({e}), so the session uses one connection",
                    self.n,
                    i + 1
                );
                tracing::warn!("{}: {note}", rpc.peer_addr());
                conns.truncate(1);
                return Ok(Some(note));
            }
        }
        Ok(None)
    }
}

/// DESTROY_SESSION then DESTROY_CLIENTID; errors are ignored (the lease ends it all anyway).
async fn destroy(
    rpc: &RpcClient,
    cred: &OpaqueAuth,
    minor: u32,
    sessionid: SessionId4,
    clientid: u64,
) {
    let _ = lone_op(rpc, cred, minor, NfsArgop4::DestroySession(sessionid), None).await;
    let _ = lone_op(rpc, cred, minor, NfsArgop4::DestroyClientid(clientid), None).await;
}

/// How long [`Client::shutdown`] waits for DESTROY_SESSION and DESTROY_CLIENTID: 3 s. Two
/// round trips take milliseconds on a LAN and well under a second over a WAN, so a live server
/// has answered long before; a dead or unreachable one never will (a hard mount would retry
/// forever), and the state it holds ends with the lease (90 s by default) anyway. The bound is
/// what lets `sluice mount` exit at once after an unmount whatever the server does.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);

/// Renews the lease while the client is idle, until the client is gone or shut down.
async fn renew_loop(inner: Weak<Inner>) {
    loop {
        let at = match inner.upgrade() {
            Some(i) if !i.closed.load(Ordering::SeqCst) => {
                i.lease.lock().expect("lease lock").renew_at()
            }
            _ => return,
        };
        tokio::time::sleep_until(at.into()).await;
        let Some(i) = inner.upgrade() else { return };
        if i.closed.load(Ordering::SeqCst) {
            return;
        }
        let due = i.lease.lock().expect("lease lock").due(Instant::now());
        if due {
            let c = Client { inner: i };
            // A SEQUENCE alone; its success renews the lease (in `finish`).
            let _ = c.compound(Vec::new()).await;
        }
    }
}

// --- the file layer's protocol -----------------------------------------------------------------

impl FileProtocol for Client {
    type Handle = Fh;
    type Attr = Attr;
    type Error = Error;

    async fn start_read(&self, fh: &Fh, offset: u64, count: u32) -> ReadCall<Attr, Error> {
        let ops = vec![
            NfsArgop4::Putfh(fh.fh.clone()),
            NfsArgop4::Read(ReadArgs {
                stateid: fh.stateid,
                offset,
                count,
            }),
        ];
        let call = self.start_compound(ops).await;
        Box::pin(async move {
            let (res, rtt) = call.await;
            let reply = res.and_then(Reply::ok).and_then(|r| match r.last() {
                Some(NfsResop4::Read(Res4::Ok(ok))) => Ok(ReadReply {
                    data: ok.data.clone().into_chunks(),
                    eof: ok.eof,
                    attr: None,
                }),
                _ => Err(Error::Other("READ returned no data".into())),
            });
            (reply, rtt)
        })
    }

    async fn start_write(
        &self,
        fh: &Fh,
        offset: u64,
        data: Bytes,
        stable: Stability,
    ) -> WriteCall<Error> {
        let stable = match stable {
            Stability::Unstable => StableHow4::UNSTABLE,
            Stability::DataSync => StableHow4::DATA_SYNC,
            Stability::FileSync => StableHow4::FILE_SYNC,
        };
        let ops = vec![
            NfsArgop4::Putfh(fh.fh.clone()),
            NfsArgop4::Write(WriteArgs {
                stateid: fh.stateid,
                offset,
                stable,
                data: Payload::from(data),
            }),
        ];
        let call = self.start_compound(ops).await;
        let (callbacks, file) = (self.inner.callbacks.clone(), fh.fh.clone());
        Box::pin(async move {
            let (res, rtt) = call.await;
            let reply = res.and_then(Reply::ok).and_then(|r| match r.last() {
                Some(NfsResop4::Write(Res4::Ok(ok))) => Ok(WriteReply {
                    count: ok.count,
                    // Outside the three levels counts as UNSTABLE: kept until a COMMIT.
                    committed: match ok.committed {
                        StableHow4::FILE_SYNC => Stability::FileSync,
                        StableHow4::DATA_SYNC => Stability::DataSync,
                        _ => Stability::Unstable,
                    },
                    verifier: ok.writeverf,
                }),
                _ => Err(Error::Other("WRITE returned no result".into())),
            });
            if matches!(&reply, Ok(w) if w.committed == Stability::Unstable) {
                // Marked on the reply, not the send: a COMMIT sent before the WRITE ran does
                // not cover it, and this mark comes after that COMMIT's send (see `deleg`).
                callbacks
                    .lock()
                    .expect("callbacks lock")
                    .delegations
                    .wrote_unstable(&file);
            }
            (reply, rtt)
        })
    }

    async fn start_commit(&self, fh: &Fh, offset: u64, count: u32) -> CommitCall<Error> {
        self.inner
            .callbacks
            .lock()
            .expect("callbacks lock")
            .delegations
            .committing(&fh.fh);
        let ops = vec![
            NfsArgop4::Putfh(fh.fh.clone()),
            NfsArgop4::Commit(CommitArgs { offset, count }),
        ];
        let call = self.start_compound(ops).await;
        Box::pin(async move {
            let (res, _) = call.await;
            res.and_then(Reply::ok).and_then(|r| match r.last() {
                Some(NfsResop4::Commit(Res4::Ok(verf))) => Ok(*verf),
                _ => Err(Error::Other("COMMIT returned no verifier".into())),
            })
        })
    }

    async fn getattr(&self, fh: &Fh) -> Result<Attr, Error> {
        self.getattr_fh(&fh.fh).await
    }

    fn version(a: &Attr) -> Version {
        Version {
            size: a.size,
            mtime_ns: (a.mtime.seconds.max(0) as u64)
                .saturating_mul(1_000_000_000)
                .saturating_add(u64::from(a.mtime.nseconds)),
            change: a.change,
        }
    }

    fn rsize(&self) -> u32 {
        self.inner.rsize
    }
    fn wsize(&self) -> u32 {
        self.inner.wsize
    }
    fn files(&self) -> &FileContext {
        &self.inner.files
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_split_into_directory_and_name() {
        assert_eq!(split_path("/a/b/c").unwrap(), ("/a/b", "c"));
        assert_eq!(split_path("/c").unwrap(), ("/", "c"));
        assert_eq!(split_path("/a/b/").unwrap(), ("/a", "b"));
        assert!(split_path("/").is_err());
    }

    #[test]
    fn names_with_a_slash_nul_or_over_255_bytes_are_refused_before_the_wire() {
        assert!(component("ok").is_ok());
        assert!(component("a/b").is_err());
        assert!(component("a\0").is_err());
        assert!(component("").is_err());
        assert!(component(&"x".repeat(256)).is_err());
    }

    #[test]
    fn a_compound_without_a_sequence_result_is_its_status() {
        let res = Compound4Res {
            status: Nfsstat4::MINOR_VERS_MISMATCH,
            tag: Utf8Str::default(),
            results: vec![],
        };
        let (seq, reply) = split_sequence(res);
        assert_eq!(seq, Outcome::Err(Nfsstat4::MINOR_VERS_MISMATCH));
        assert!(reply.unwrap().results.is_empty());
    }

    #[test]
    fn the_version_of_a_file_is_its_change_attribute() {
        let a = Attr {
            size: 10,
            change: 77,
            mtime: Nfstime4 {
                seconds: 2,
                nseconds: 5,
            },
            ..Attr::default()
        };
        let v = <Client as FileProtocol>::version(&a);
        assert_eq!((v.size, v.change, v.mtime_ns), (10, 77, 2_000_000_005));
    }

    #[test]
    fn stable_owners_are_stable_and_bounded() {
        assert_eq!(
            stable_owner(7, "mount:/mnt/a"),
            stable_owner(7, "mount:/mnt/a")
        );
        assert_ne!(
            stable_owner(7, "mount:/mnt/a"),
            stable_owner(7, "mount:/mnt/b")
        );
        assert_ne!(
            stable_owner(7, "mount:/mnt/a"),
            stable_owner(8, "mount:/mnt/a")
        );
        let long = "x".repeat(5000);
        let o = stable_owner(7, &long);
        assert!(o.len() <= OWNER_BYTES_MAX);
        assert_eq!(o, stable_owner(7, &long));
    }

    #[test]
    fn instance_owners_differ_within_a_process() {
        assert_ne!(instance_owner(), instance_owner());
    }
}
