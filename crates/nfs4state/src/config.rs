//! The settings of the state cores ([`Config4`]) and the bounds they put on every table.
//!
//! # Bounds (and what happens at them)
//! | table | bound (default) | at the bound |
//! |---|---|---|
//! | client records | [`Config4::clients_max`] (1024) | courtesy clients are expired first; else EXCHANGE_ID gets NFS4ERR_DELAY |
//! | sessions per client | [`Config4::sessions_per_client_max`] (8) | CREATE_SESSION gets NFS4ERR_DELAY (not cached) |
//! | slots per session | [`crate::sessions::ChannelLimits::slots_max`] (64) | negotiated down; a higher slot id is NFS4ERR_BADSLOT |
//! | reply cache, all sessions | [`Config4::reply_cache_bytes_max`] (64 MiB) | CREATE_SESSION grants fewer slots; none fit: NFS4ERR_DELAY |
//! | cached reply per slot | `maxresponsesize_cached` (≤ 4 KiB) | NFS4ERR_REP_TOO_BIG_TO_CACHE (the processor checks) |
//! | connections per session | [`crate::sessions::CONNS_PER_SESSION_MAX`] (16) | the oldest binding is forgotten |
//! | callbacks per session | one CB_NULL and one CB_COMPOUND in flight, [`crate::callback::QUEUED_MAX`] (16) queued | NFS4ERR_DELAY to the queuer |
//! | open stateids per client | [`Config4::opens_per_client_max`] (4096) | OPEN gets NFS4ERR_DELAY |
//! | open stateids overall | [`Config4::opens_max`] (65536) | OPEN gets NFS4ERR_DELAY |
//! | lock stateids, locked ranges per client | [`Config4::locks_per_client_max`] (4096 each) | LOCK (and a splitting LOCKU) gets NFS4ERR_DELAY |
//! | lock stateids, locked ranges overall | [`Config4::locks_max`] (65536 each) | LOCK (and a splitting LOCKU) gets NFS4ERR_DELAY |
//! | delegations per client / overall | [`crate::delegations::table::DelegConfig`] (1024 / 16384) | OPEN grants none (OPEN_DELEGATE_NONE_EXT, WND4_RESOURCE) |
//! | pseudo tree | [`crate::pseudo::PSEUDO_NODES_MAX`] nodes | building from the export list fails |
//!
//! NFS4ERR_RESOURCE is not used: in minor version 1 a COMPOUND's own limits are the session's
//! (NFS4ERR_REQ_TOO_BIG, REP_TOO_BIG, TOO_MANY_OPS, RFC 8881 §2.10.6.4), and knfsd answers a
//! full state table with NFS4ERR_DELAY ("jukebox"). So do we, since every bound here frees up
//! with time (leases expire, clients close files).

use crate::delegations::table::DelegConfig;
use crate::sessions::ChannelLimits;
use std::time::Duration;

/// Settings of the NFSv4.1 state cores. Fields carry their unit; defaults say why.
#[derive(Debug, Clone)]
pub struct Config4 {
    /// Lease time (the `lease_time` attribute, RFC 8881 §8.3). Default 90 s, the value of knfsd
    /// and ganesha: long enough that a client renewing every third of it survives a short
    /// network outage, short enough that a crashed client's share reservations clear soon.
    pub lease: Duration,
    /// How long an expired client with state is kept as a courtesy client before it is
    /// expired anyway. Default 24 h, knfsd's value: a laptop that slept overnight gets its
    /// opens back if nobody wanted its files.
    pub courtesy_max: Duration,
    /// Client records (confirmed and unconfirmed) at most. Default 1024: a record with its
    /// sessions costs at most ~300 KiB of slot cache, so 1024 caps that at ~300 MiB in the
    /// worst case and far less in practice (slots are allocated as they are used).
    pub clients_max: usize,
    /// Sessions per client. Default 8: the Linux client uses one per server (plus one during
    /// trunking discovery); 8 leaves room without letting one client hoard slot memory.
    pub sessions_per_client_max: usize,
    /// Open stateids per client. Default 4096, well above a desktop's open files.
    pub opens_per_client_max: usize,
    /// Open stateids overall. Default 65536 (about 10 MiB of records).
    pub opens_max: usize,
    /// Lock stateids per client, and byte ranges locked per client (each bound apart).
    /// Default 4096, as for opens: a lock owner per process and file, and ranges enough for
    /// a database's row locks on one client.
    pub locks_per_client_max: usize,
    /// Lock stateids overall, and byte ranges locked overall. Default 65536: a range costs
    /// ~100 bytes and a stateid ~150, so ~16 MiB at the bound.
    pub locks_max: usize,
    /// The server instance: stamped into client ids, session ids and stateids so that ids from
    /// an earlier instance are recognised as stale. The driver passes e.g. boot seconds.
    pub boot_epoch: u32,
    /// Channel attribute limits for CREATE_SESSION.
    pub channel: ChannelLimits,
    /// Reply cache reserved over all sessions: each session reserves
    /// `maxrequests × maxresponsesize_cached` at CREATE_SESSION, which gets fewer slots when
    /// the budget runs low (and NFS4ERR_DELAY when not even one fits), as knfsd does with its
    /// DRC memory. Default 64 MiB: 256 sessions at the full 64 slots × 4 KiB, and many more
    /// at the few slots a client really asks for; without it the other bounds multiply to
    /// 1024 clients × 8 sessions × 256 KiB = 2 GiB.
    pub reply_cache_bytes_max: usize,
    /// `so_major_id` of EXCHANGE_ID: the same value on two addresses tells a client they are
    /// one server (trunking, RFC 8881 §2.10.5). The driver passes e.g. the host name.
    pub server_owner: bytes::Bytes,
    /// `eir_server_scope`: servers sharing a scope share owner names. Default "sluice".
    pub server_scope: bytes::Bytes,
    /// Delegation bounds ([`crate::delegations::table`]).
    pub delegs: DelegConfig,
}

impl Default for Config4 {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(90),
            courtesy_max: Duration::from_secs(24 * 3600),
            clients_max: 1024,
            sessions_per_client_max: 8,
            opens_per_client_max: 4096,
            opens_max: 65536,
            locks_per_client_max: 4096,
            locks_max: 65536,
            boot_epoch: 1,
            channel: ChannelLimits::default(),
            reply_cache_bytes_max: 64 << 20,
            server_owner: bytes::Bytes::from_static(b"sluice"),
            server_scope: bytes::Bytes::from_static(b"sluice"),
            delegs: DelegConfig::default(),
        }
    }
}

/// The table limits of [`Config4`] that a server's configuration sets
/// (`ServerConfig::nfs4_limits`); defaults are [`Config4`]'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateLimits {
    pub clients_max: usize,
    pub sessions_per_client_max: usize,
    pub opens_per_client_max: usize,
    pub opens_max: usize,
}

impl Default for StateLimits {
    fn default() -> Self {
        let c = Config4::default();
        StateLimits {
            clients_max: c.clients_max,
            sessions_per_client_max: c.sessions_per_client_max,
            opens_per_client_max: c.opens_per_client_max,
            opens_max: c.opens_max,
        }
    }
}
