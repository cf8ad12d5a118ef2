//! The NFSv4.1 and 4.2 server state as pure cores (RFC 8881, RFC 7862): clients, sessions and
//! their slot tables, leases, opens, locks, delegations and the callbacks that recall them,
//! grace after a restart, the pseudo file system, owner-name mapping and asynchronous COPY. No
//! socket, no file, no thread, no clock: every entry point takes values and `now: Instant` and
//! returns a decision or an [`Nfsstat4`]; what must outlive the instance goes through the
//! [`StateStore`] trait. `clippy.toml` forbids the clock, files, sockets, threads and global
//! randomness here, and the manifest has no tokio.
//!
//! # Why pure
//! Everything here is a question about ordering and time: a retransmitted SEQUENCE must not
//! run twice, a lease runs out at a precise instant, a courtesy client keeps its opens until
//! someone else wants the file, a recall answered late revokes. Those are tested
//! deterministically (unit tests, seeded random op sequences against invariants) and, through
//! the server's COMPOUND processor, in the simulator's virtual time, crashes included.
//!
//! # One behaviour, one module
//! | module | behaviour | RFC 8881 |
//! |---|---|---|
//! | [`state`] | [`State4`]: the tables in one place, behind the processor's one lock; leases and courtesy clients | §8.3 |
//! | [`clients`] | client records, EXCHANGE_ID, CREATE_SESSION's confirmation, DESTROY_CLIENTID | §2.4, §18.35 |
//! | [`sessions`] | sessions, channel negotiation, connection binding; `slots`: exactly-once SEQUENCE and the reply cache; `digest`: what tells a retry from a false one | §2.10 |
//! | [`opens`] | open stateids, share reservations, OPEN_DOWNGRADE, CLOSE, stateid checks | §9.7, §18.16 |
//! | [`locks`] | LOCK, LOCKT, LOCKU; `stateids`: lock stateids; `ranges`: the byte ranges | §9, §18.10 |
//! | [`delegations`] | the grant at OPEN, the recall gate, DELEGRETURN, CB_GETATTR; `table`: the delegations | §10.2, §10.4 |
//! | [`callback`] | one session's back channel: credentials, the server's slot, path state, what a reply means | §2.10.3.1, §20 |
//! | [`recovery`] | restart recovery; `grace`: the grace period; `records`: the stable client records and the boot epoch; `parked`: files kept open after REMOVE | §8.4.2 |
//! | [`cluster`] | several heads over one file system: the shared grace record (ganesha's layout), each head's grace coordination, takeover of a dead head's clients | §8.4 |
//! | [`store`] | [`StateStore`], the one seam to persistence, and [`MemStore`] | |
//! | [`pseudo`] | the read-only tree over the exports' paths | §7.3 |
//! | [`idmap`] | owners and groups as strings | §5.9 |
//! | [`offload`] | asynchronous COPYs and their copy stateids | RFC 7862 §15.2 |
//!
//! # How the server drives them
//! ```text
//!  COMPOUND(tag, minor, ops)                          one State4, behind one lock
//!   │
//!   ├─ EXCHANGE_ID ───────── exchange_id(now, args, principal) ──▶ clients: records,
//!   ├─ CREATE_SESSION ────── create_session(now, args, principal, conn)     the nine cases,
//!   ├─ DESTROY_CLIENTID ──── destroy_clientid(id)                           csa_sequence cache
//!   │
//!   ├─ SEQUENCE ──────────── sequence(now, sessionid, call) ──▶ sessions ─▶ sessions::slots
//!   │     ├─ Execute ──────▶ run the other ops, then complete(sessionid, slot, reply bytes)
//!   │     ├─ Replay(bytes) ▶ send the cached reply; nothing runs again
//!   │     └─ Err(status) ──▶ the reply is SEQUENCE's error alone
//!   ├─ BIND_CONN_TO_SESSION, DESTROY_SESSION, RECLAIM_COMPLETE, BACKCHANNEL_CTL
//!   │     └─ a back channel given ──▶ callback: probe (CB_NULL, CB_SEQUENCE), the server's
//!   │          slot, path state; the server's callback driver makes the calls
//!   │          (poll_callbacks / handle_callback); a closed connection: conn_closed
//!   │
//!   ├─ OPEN / OPEN_DOWNGRADE / CLOSE ──▶ opens: stateids, share reservations (a conflict
//!   ├─ READ / WRITE: check_io(stateid)              with a courtesy client expires it)
//!   ├─ LOCK / LOCKT / LOCKU ───────────▶ locks over locks::stateids and locks::ranges
//!   ├─ TEST_STATEID / FREE_STATEID
//!   ├─ delegations: OPEN's grant, the recall gate of conflicting ops, DELEGRETURN ──▶
//!   │     delegations over delegations::table; CB_RECALL through callback
//!   │
//!   └─ PUTROOTFH / LOOKUP / LOOKUPP / READDIR in the pseudo tree ──▶ pseudo (read-only,
//!        built from the export list; an export root hands over to the file-system layer)
//!
//!  driver timer: at State4::next_wakeup() call State4::tick(now): leases, courtesy expiry,
//!  then State4::recovery_tick(now): the grace period after a restart and the stable client
//!  records to remove (see recovery); the records are written through a StateStore
//! ```
//!
//! The current stateid and the current/saved file handles belong to one COMPOUND and live in
//! the processor, not here; the processor resolves the special "current" stateid before it
//! calls [`state::State4::check_io`] and friends.
//!
//!
//! # Where the shared vocabulary is
//! [`config`] holds [`Config4`] and the table of bounds; [`ids`] the identity and staleness
//! rules of client ids, session ids and stateids, and [`Entropy`]. This file declares the
//! modules and re-exports what callers name most; no module imports through it.

// Tests build virtual clocks on a real `Instant` base; the library itself never reads a clock
// (enforced by clippy.toml).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod callback;
pub mod clients;
pub mod cluster;
pub mod config;
pub mod delegations;
pub mod idmap;
pub mod ids;
pub mod locks;
pub mod nlm;
pub mod offload;
pub mod opens;
pub mod pseudo;
pub mod recovery;
pub mod sessions;
pub mod state;
pub mod store;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

pub use config::{Config4, StateLimits};
pub use ids::{ConnId, Entropy, Principal, SplitMix};
pub use sluice_xdr::nfs4::Nfsstat4;
pub use state::State4;
pub use store::{MemStore, StateStore, StoreError};
