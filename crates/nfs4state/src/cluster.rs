//! Several sluice heads serving one shared file system (CephFS) at once: the cluster-wide
//! grace period and the takeover of a dead head's clients, as pure cores.
//!
//! # The problem
//! A single server's grace (RFC 8881 §8.4.2, [`crate::recovery`]) protects the reclaims of its
//! own clients from its own new state. With two heads over one file system that is not
//! enough: when head A dies, the file system must eventually drop the locks A's session held,
//! and from that moment head B could hand one of them to a new client before A's client
//! reclaims it. So the grace becomes a property of the cluster: every head refuses new state
//! while any head's clients may reclaim, and a dead head's locks are released only once every
//! head refuses (ganesha's `ganesha-rados-cluster-design`, whose record and rules this
//! follows; [`head`]'s notes list the rules as built).
//!
//! # The pieces
//! ```text
//!   grace record (one, shared)          client records (per head and epoch)
//!   record::GraceRecord                 rec-<epoch>:<head>, recovery::records' format
//!     C, R, head → NEED/ENFORCING[,carrier]
//!        ▲   conditional write                   ▲ WriteClientRecords / ReadClientRecords
//!        │   (StateStore::put_if_version)        │
//!   ┌────┴───────────────────────────────────────┴───┐
//!   │ head::Head: one per head, decides on the record │── Enforce, StartReclaim, AdmitReclaims,
//!   └─────────────────────────────────────────────────┘   EndReclaims, Heartbeat, Fenced
//! ```
//! [`record`] is the record and its bytes (ganesha's layout: what matches and what is added
//! is in its notes); [`head`] is the state machine a head's driver runs. The single-server
//! [`crate::recovery::grace::Grace`] still decides, per head, which clients may reclaim and
//! when they are all done; the cluster core decides when a head may admit them at all and
//! when the cluster's grace ends.
//!
//! # Why here, not a crate of its own
//! The core needs the [`crate::store::StateStore`] seam and the client-record format of
//! [`crate::recovery::records`], and it is driven next to [`crate::State4`] by the same
//! driver; it is as pure as the rest of this crate and obeys the same `clippy.toml`. A crate of
//! its own would re-export those or depend on this one anyway, for no gain in build time.
//!
//! # Not here yet
//! The RADOS store (the grace record as an object with an omap, watch/notify for
//! [`head::Head::handle_notify`] and heartbeats), the server driver that runs a [`head::Head`]
//! beside [`crate::State4`], and the `sluice serve --cluster` flags: the design essay
//! `docs/design/two-heads.md` says how they fit.

pub mod head;
pub mod record;

pub use head::{Action, GraceSeen, Head, HeadConfig, HeadStatus, WriteResult};
pub use record::{client_record_name, Flags, GraceRecord, HeadId, GRACE_RECORD};
