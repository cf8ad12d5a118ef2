//! NFSv4.1 server state as pure cores: client records, sessions and their slot tables, leases,
//! open state and the pseudo file system (RFC 8881). No sockets, no tokio, no file system: every
//! entry point takes values and `now: Instant` and returns a decision or an [`Nfsstat4`].
//!
//! # Why pure
//! Everything in this tree is a question about ordering and time: a retransmitted SEQUENCE must
//! not run twice, a lease runs out at a precise instant, a courtesy client keeps its opens until
//! someone else wants the file. Those are tested here deterministically (unit tests and seeded
//! random op sequences against invariants). The COMPOUND processor that wires them to the wire
//! ops and the file-system layer is [`compound`] (its one driver loop, [`compound::drive`], is
//! what the RPC service and the simulator run); the one mapping between the file-system layer's neutral
//! types and `nfsstat4` / `fattr4` is [`map`].
//!
//! # How COMPOUND will use these cores
//! ```text
//!  COMPOUND(tag, minor, ops)                        one State4 (state.rs), behind one lock
//!   │
//!   ├─ EXCHANGE_ID ───────── exchange_id(now, args, principal) ──▶ client.rs: records,
//!   ├─ CREATE_SESSION ────── create_session(now, args, principal, conn)     the nine cases,
//!   ├─ DESTROY_CLIENTID ──── destroy_clientid(id)                           csa_sequence cache
//!   │
//!   ├─ SEQUENCE ──────────── sequence(now, sessionid, call) ──▶ session.rs ─▶ slots.rs
//!   │     ├─ Execute ──────▶ run the other ops, then complete(sessionid, slot, reply bytes)
//!   │     ├─ Replay(bytes) ▶ send the cached reply; nothing runs again
//!   │     └─ Err(status) ──▶ the reply is SEQUENCE's error alone
//!   ├─ BIND_CONN_TO_SESSION, DESTROY_SESSION, RECLAIM_COMPLETE, BACKCHANNEL_CTL
//!   │     └─ a back channel given ──▶ backchan.rs: probe (CB_NULL, CB_SEQUENCE), the
//!   │          server's slot, path state; calls made by the driver `crate::callback`
//!   │          (poll_callbacks / handle_callback); a closed connection: conn_closed
//!   │
//!   ├─ OPEN / OPEN_DOWNGRADE / CLOSE ──▶ open.rs: stateids, share reservations (a conflict
//!   ├─ READ / WRITE: check_io(stateid)                     with a courtesy client expires it)
//!   ├─ LOCK / LOCKT / LOCKU ───────────▶ state/locks.rs over lockstate.rs (lock stateids)
//!   │                                      and lock.rs (the byte ranges)
//!   ├─ TEST_STATEID / FREE_STATEID
//!   ├─ delegations: OPEN's grant, the recall gate of conflicting ops, DELEGRETURN ──▶
//!   │     state/delegs.rs over deleg.rs; CB_RECALL through backchan.rs
//!   │
//!   └─ PUTROOTFH / LOOKUP / LOOKUPP / READDIR in the pseudo tree ──▶ pseudo.rs (read-only,
//!        built from the export list; an export root hands over to the file-system layer)
//!
//!  driver timer: at State4::next_wakeup() call State4::tick(now): leases, courtesy expiry,
//!  then State4::recovery_tick(now): the grace period after a restart (grace.rs) and the
//!  stable client records to remove (stable.rs); see state/recovery.rs
//! ```
//!
//! The current stateid and the current/saved file handles belong to one COMPOUND and live in
//! the processor, not here; the processor resolves the special "current" stateid before it
//! calls [`state::State4::check_io`] and friends.
//!
//! # Identity and staleness
//! Client ids, session ids and stateid `other` fields all carry the server instance's
//! `boot_epoch` (a 32-bit value the driver picks at start, e.g. seconds since the Unix epoch, as
//! knfsd does): an id from an earlier instance is recognised as stale (NFS4ERR_STALE_CLIENTID /
//! NFS4ERR_STALE_STATEID) instead of aliasing a new record. The parts a peer should not be able
//! to guess (4 bytes of every stateid `other` and session id) come from an injected
//! [`Entropy`] so tests are deterministic.
//!
//! # Bounds (and what happens at them)
//! | table | bound (default) | at the bound |
//! |---|---|---|
//! | client records | [`Config4::clients_max`] (1024) | courtesy clients are expired first; else EXCHANGE_ID gets NFS4ERR_DELAY |
//! | sessions per client | [`Config4::sessions_per_client_max`] (8) | CREATE_SESSION gets NFS4ERR_DELAY (not cached) |
//! | slots per session | [`session::ChannelLimits::slots_max`] (64) | negotiated down; a higher slot id is NFS4ERR_BADSLOT |
//! | reply cache, all sessions | [`Config4::reply_cache_bytes_max`] (64 MiB) | CREATE_SESSION grants fewer slots; none fit: NFS4ERR_DELAY |
//! | cached reply per slot | `maxresponsesize_cached` (≤ 4 KiB) | NFS4ERR_REP_TOO_BIG_TO_CACHE (the processor checks) |
//! | connections per session | [`session::CONNS_PER_SESSION_MAX`] (16) | the oldest binding is forgotten |
//! | callbacks per session | one CB_NULL and one CB_COMPOUND in flight, [`backchan::QUEUED_MAX`] (16) queued | NFS4ERR_DELAY to the queuer |
//! | open stateids per client | [`Config4::opens_per_client_max`] (4096) | OPEN gets NFS4ERR_DELAY |
//! | open stateids overall | [`Config4::opens_max`] (65536) | OPEN gets NFS4ERR_DELAY |
//! | lock stateids, locked ranges per client | [`Config4::locks_per_client_max`] (4096 each) | LOCK (and a splitting LOCKU) gets NFS4ERR_DELAY |
//! | lock stateids, locked ranges overall | [`Config4::locks_max`] (65536 each) | LOCK (and a splitting LOCKU) gets NFS4ERR_DELAY |
//! | delegations per client / overall | [`deleg::DelegConfig`] (1024 / 16384) | OPEN grants none (OPEN_DELEGATE_NONE_EXT, WND4_RESOURCE) |
//! | pseudo tree | [`pseudo::PSEUDO_NODES_MAX`] nodes | building from the export list fails |
//!
//! NFS4ERR_RESOURCE is not used: in minor version 1 a COMPOUND's own limits are the session's
//! (NFS4ERR_REQ_TOO_BIG, REP_TOO_BIG, TOO_MANY_OPS, RFC 8881 §2.10.6.4), and knfsd answers a
//! full state table with NFS4ERR_DELAY ("jukebox"). So do we, since every bound here frees up
//! with time (leases expire, clients close files).

pub mod backchan;
pub mod client;
pub mod compound;
pub mod data;
pub mod deleg;
pub mod digest;
pub mod grace;
pub mod idmap;
pub mod lock;
pub mod lockstate;
pub mod map;
pub mod offload;
pub mod open;
pub mod parked;
pub mod pseudo;
pub mod session;
pub mod slots;
pub mod stable;
pub mod state;

pub use sluice_xdr::nfs4::Nfsstat4;
pub use state::State4;

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
    pub channel: session::ChannelLimits,
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
    /// Delegation bounds (`deleg.rs`).
    pub delegs: deleg::DelegConfig,
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
            channel: session::ChannelLimits::default(),
            reply_cache_bytes_max: 64 << 20,
            server_owner: bytes::Bytes::from_static(b"sluice"),
            server_scope: bytes::Bytes::from_static(b"sluice"),
            delegs: deleg::DelegConfig::default(),
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

/// Where unguessable bytes come from. Production passes an OS-seeded generator; tests a
/// seeded one, so that a run is a function of its seed.
pub trait Entropy {
    fn fill(&mut self, buf: &mut [u8]);
}

/// A small deterministic generator (splitmix64). Not cryptographic: it makes ids hard to guess
/// by accident, not against an attacker who can watch the wire (who could read them anyway).
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl Entropy for SplitMix {
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_be_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// Who made a request, as the client-record rules compare it (RFC 8881 §2.4: the principal).
/// For AUTH_SYS the processor builds it from uid, gid and machine name; an opaque byte string
/// here so the cores do not depend on the RPC layer's credential types.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Principal(pub bytes::Bytes);

/// A connection's identity, chosen by the driver (unique while the connection lives).
pub type ConnId = u64;

#[cfg(test)]
mod tests {
    /// The sans-IO rule, enforced: the server crate does I/O elsewhere, so a crate-wide clippy
    /// `disallowed-methods` list cannot cover this tree; this scan of its non-test code can.
    #[test]
    fn the_cores_read_no_clock_and_do_no_io() {
        let sources = [
            ("mod.rs", include_str!("mod.rs")),
            ("backchan.rs", include_str!("backchan.rs")),
            ("client.rs", include_str!("client.rs")),
            ("deleg.rs", include_str!("deleg.rs")),
            ("state/delegs.rs", include_str!("state/delegs.rs")),
            ("compound.rs", include_str!("compound.rs")),
            ("grace.rs", include_str!("grace.rs")),
            ("idmap.rs", include_str!("idmap.rs")),
            ("lock.rs", include_str!("lock.rs")),
            ("lockstate.rs", include_str!("lockstate.rs")),
            ("state/locks.rs", include_str!("state/locks.rs")),
            ("map.rs", include_str!("map.rs")),
            ("offload.rs", include_str!("offload.rs")),
            ("open.rs", include_str!("open.rs")),
            ("pseudo.rs", include_str!("pseudo.rs")),
            ("session.rs", include_str!("session.rs")),
            ("slots.rs", include_str!("slots.rs")),
            ("state.rs", include_str!("state.rs")),
        ];
        let forbidden = [
            concat!("Instant", "::now"),
            concat!("SystemTime", "::now"),
            concat!("tokio", "::"),
            concat!("std::", "fs"),
            concat!("std::", "net"),
            concat!("thread_", "rng"),
        ];
        for (name, text) in sources {
            let code = text.split("#[cfg(test)]").next().unwrap_or(text);
            for f in forbidden {
                assert!(!code.contains(f), "{name} uses {f} outside its tests");
            }
        }
    }
}
