//! The NFSv4.1 and 4.2 server (RFC 8881, RFC 7862): the COMPOUND processor and the drivers
//! around the pure state of [`sluice_nfs4state`].
//!
//! # Where things are
//! The state (clients, sessions and their slots, opens, locks, delegations, callbacks'
//! protocol state, grace, the pseudo tree, id mapping, COPY offload) is the crate
//! `sluice-nfs4state`: pure cores that take values and `now` and return decisions, with no
//! file, socket, thread or clock (its `clippy.toml` forbids them, its manifest has no tokio).
//! This tree holds what does I/O or speaks for the file-system layer:
//!
//! ```text
//!   RPC service (service.rs) ──▶ compound ──┬─ State4 (sluice_nfs4state), behind one lock
//!                                           ├─ data: READ / WRITE / COMMIT on the one data path
//!                                           ├─ map: fs-layer types ⇄ nfsstat4 / fattr4
//!                                           └─ the file-system layer (sluice_vfs)
//!   drivers (tokio), each over the core that decides:
//!     lease ──── the clock: State4::tick / recovery_tick at State4::next_wakeup
//!     callback ─ CB_NULL / CB_COMPOUND over the client's connection (callback/conn.rs)
//!     offload ── asynchronous COPY, chunk by chunk, off the request path
//!     idmap ──── the system's users and groups (NSS) behind the pure name mapping
//!     store ──── the state store over the state directory (client records, boot epoch,
//!                parked files), the one atomic write
//! ```
//!
//! [`compound`] is the processor; its one driver loop, [`compound::drive`], is what the RPC
//! service and the simulator run. [`map`] is the one mapping between the file-system layer's
//! neutral types and `nfsstat4` / `fattr4`.
//!
//! # Paths kept
//! The state modules were once files of this tree; their old paths are re-exports, so
//! `crate::nfs4::session`, `crate::nfs4::state::State4`, `crate::nfs4::lock`,
//! `crate::nfs4::backchan` and the others still name the same items:
//!
//! | old path | now |
//! |---|---|
//! | `backchan` | [`sluice_nfs4state::callback`] |
//! | `client` | [`sluice_nfs4state::clients`] |
//! | `deleg` | [`sluice_nfs4state::delegations::table`] |
//! | `digest`, `session`, `slots` | [`sluice_nfs4state::sessions`] and its modules |
//! | `grace`, `parked`, `stable` | [`sluice_nfs4state::recovery`]'s modules (`stable` = `records`) |
//! | `lock`, `lockstate` | [`sluice_nfs4state::locks`]`::ranges`, `::stateids` |
//! | `open` | [`sluice_nfs4state::opens`] |
//! | `pseudo`, `state` | the same names there |
//! | `idmap`, `offload` | this tree's drivers, which re-export the cores of the same name |

pub mod callback;
pub mod compound;
pub mod data;
pub mod gauges;
pub mod idmap;
pub mod lease;
pub mod map;
pub mod offload;
pub mod store;

pub use sluice_nfs4state::callback as backchan;
pub use sluice_nfs4state::clients as client;
pub use sluice_nfs4state::delegations::table as deleg;
pub use sluice_nfs4state::locks::ranges as lock;
pub use sluice_nfs4state::locks::stateids as lockstate;
pub use sluice_nfs4state::opens as open;
pub use sluice_nfs4state::pseudo;
pub use sluice_nfs4state::recovery::records as stable;
pub use sluice_nfs4state::recovery::{grace, parked};
pub use sluice_nfs4state::sessions as session;
pub use sluice_nfs4state::sessions::{digest, slots};
/// [`sluice_nfs4state::state`], with the two results its entry points return from the
/// behaviour modules, where they were named before.
pub mod state {
    pub use sluice_nfs4state::locks::LockRefused;
    pub use sluice_nfs4state::recovery::RecoveryTick;
    pub use sluice_nfs4state::state::*;
}
pub use sluice_nfs4state::{
    Config4, ConnId, Entropy, Nfsstat4, Principal, SplitMix, State4, StateLimits,
};
