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
//! is re-bound on its next use; the first one, which carries the back channel, at once (see
//! "Back channel after a reset" below). The transport resends what was in flight on a reset before
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
//! # Files, by role
//! | file | what |
//! |---|---|
//! | `mod.rs` | the types: [`Client`], [`Error`], [`Fh`], [`Attr`], [`Minor`], the client's state |
//! | `setup.rs` | session set-up and tear-down, calls outside a session, lease renewal, owners |
//! | `send.rs` | COMPOUNDs over the slot table; the file layer's READ, WRITE, COMMIT, GETATTR |
//! | `recover.rs` | a new session or client id, and the opens and locks reclaimed after it |
//! | `ops.rs` | path-based operations (LOOKUP walks, OPEN, CREATE, CLOSE, READDIR) |
//! | `namespace.rs` | [`crate::Namespace`] and [`crate::OpenFile`]'s calls, by handle |
//! | `callback.rs` | the back channel's service and delegations granted, recalled, returned |
//! | `session.rs`, `reopen.rs`, `deleg.rs` | the sans-IO cores: slots and lease, what to reclaim, delegations |
//! | `lock.rs` | byte-range locks |
//!
//! # Callbacks and delegations
//! CREATE_SESSION offers a back channel on the first connection; the transport hands the
//! server's calls to the callback service (`callback.rs`), which answers them from the sans-IO [`deleg`] module. A
//! delegation granted on OPEN is recorded per file; a CB_RECALL is answered at once and the
//! file is committed (if UNSTABLE data went to it) and returned on a task of its own; the
//! last CLOSE of a file returns its read delegation with the CLOSE. A write delegation, taken
//! on the files the client creates once its user registered a write-back hook (the mount),
//! outlives the CLOSE: the hook's kept data is committed when it goes back (recall,
//! [`Client::shutdown`]); see [`deleg`]. A server that takes no back channel gets
//! `OPEN4_SHARE_WANT_NO_DELEG`, and any delegation it grants anyway is returned at once.
//! After a new client id the old delegations are forgotten.
//!
//! # Back channel after a reset
//! The server can call back only on a connection bound to the session for the back channel.
//! When the transport re-establishes the first connection (the one CREATE_SESSION gave the
//! back channel), the new connection is bound to nothing; binding it on its next use would
//! leave an idle client that holds a delegation deaf to its recall until the lease renewal,
//! a third of the lease later (30 s with a 90 s lease), while the server answers every
//! conflicting OPEN, RENAME or REMOVE of other clients NFS4ERR_DELAY (the NFSv4.1 load test
//! through a resetting link saw a 30.1 s OPEN). So a task watches the transport's reconnects
//! (`setup::rebind_loop`) and sends BIND_CONN_TO_SESSION with CDFC4_FORE_OR_BOTH as soon as
//! the new connection is up, with nothing from the application. And a SEQUENCE reply whose
//! status flags say the server has no path back (SEQ4_STATUS_CB_PATH_DOWN,
//! CB_PATH_DOWN_SESSION, BACKCHANNEL_FAULT: RFC 8881 §18.46.3) binds the first connection
//! again too, at most once a [`CB_REBIND_INTERVAL`] (Linux binds again on the two PATH_DOWN
//! flags and resets the session on BACKCHANNEL_FAULT; binding again is the lighter cure, and
//! a server whose fault stays gets the same bind each interval).
//!
//! # Locks
//! LOCK, LOCKT and LOCKU for the mount's `fcntl` and `flock`: see [`lock`].

mod callback;
pub mod deleg;
pub mod lock;
mod namespace;
mod ops;
mod recover;
pub mod reopen;
mod send;
pub mod session;
mod setup;
pub mod xattr;

use callback::*;
pub use ops::DIR_ENTRIES_MAX;
use ops::*;
use send::*;
use setup::*;
pub use setup::{stable_owner, SHUTDOWN_WAIT};

#[cfg(test)]
mod fake;

use crate::identity::{credentials, resolve};
pub use crate::namespace::WriteBack;
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
            // Every export accepts AUTH_SYS, so WRONGSEC is about the transport: an export
            // whose `xprtsec=` does not admit this connection (knfsd's and sluice's answer).
            Error::Status {
                op,
                status: Nfsstat4::WRONGSEC,
            } => write!(
                f,
                "{} failed: NFS4ERR_WRONGSEC: the export does not admit this connection's \
                 transport security; if it requires RPC-with-TLS add ?xprtsec=tls to the URL \
                 (with --tls-ca), or ?xprtsec=mtls with --tls-cert and --tls-key if it \
                 requires a client certificate",
                op.name()
            ),
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
/// Least time between two binds of the back channel's connection asked for by SEQUENCE status
/// flags (see "Back channel after a reset"): 1 s. A server keeps the flag up until it has
/// checked the new path (a CB_NULL, one round trip), so every COMPOUND of a busy client would
/// otherwise send one more bind meanwhile; a recall waits at most this long for its path.
const CB_REBIND_INTERVAL: Duration = Duration::from_secs(1);
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
    /// What a delegation's return runs first ([`Client::set_write_back`]); with one set,
    /// creates take write delegations.
    write_back: Mutex<Option<WriteBack>>,
    /// When a SEQUENCE status flag last had the back channel's connection bound again (see
    /// [`Client::callback_path_down`]).
    cb_rebind_at: Mutex<Option<Instant>>,
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
