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
//! # Naming the state
//! Code here names the state by its one path in [`sluice_nfs4state`] (`sluice_nfs4state::sessions`,
//! `sluice_nfs4state::State4`, ...); this tree re-exports none of its modules. [`idmap`] and
//! [`offload`] are this tree's drivers, which re-export the cores of the same name.

pub mod callback;
pub mod compound;
pub mod data;
pub mod gauges;
pub mod idmap;
pub mod lease;
pub mod map;
pub mod offload;
pub mod store;
