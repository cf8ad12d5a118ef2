//! `sluice-sim`: the whole read path of sluice, client to server and back, in virtual time.
//!
//! # Why a simulator
//! The promises sluice makes are about time and ordering: sequential reads fill the link
//! whatever its RTT and rate, random reads cost no more than they ask, and the RPC client never
//! retransmits on a healthy link. A benchmark on a real network tests one link, slowly, and
//! cannot replay the moment something went wrong. This crate composes the *real* pure cores,
//! unmodified, and drives them from a single-threaded loop whose only clock is a number it
//! advances itself. A run is a pure function of its [`Scenario`] (seed included) and the
//! commit: it prints its seed first, and `SLUICE_SEED=<n>` replays it in the tests (see
//! [`seed_from_env`]). Tigerbeetle's simulator and quinn's `Pair` harness are the models.
//!
//! # What is real and what is modelled
//! Real: the call table ([`sluice_rpc::client::CallTable`]: XIDs, slots, UDP retransmit timers,
//! TCP reconnect policy), record marking, RPC call parsing and reply headers, the NFSv3 codecs,
//! the client's read core ([`sluice_engine::readcore::ReadCore`]: its cache, READs in flight,
//! waiting readers and change detection, around the readahead engine
//! [`sluice_engine::readahead::FileReadahead`]), which sluice-client's tokio driver runs too,
//! the link model
//! ([`sluice_link::model::LinkDirection`]), and the server: `sluice_server`'s NFSv3 handlers,
//! its data path, sequential table, chunk pool and write-behind, over the in-memory backend
//! (`MemFs`), hosted in virtual time by `host` through the engine's hooks (a manual clock,
//! blocking work inline, the write-behind flusher stepped by the event loop). Every byte that
//! crosses the simulated link is a real RPC message, record-marked over TCP, one datagram over
//! UDP.
//!
//! Modelled here: an application (a sequential reader, random 4 KiB reads, two interleaved
//! readers, a pipelined bulk reader, a GETATTR storm) and its driver of the read core, TCP send
//! buffers with backpressure from the bottleneck queue, and the server's costs: a per-call
//! service time with bounded concurrency around the real handler (which takes no virtual time
//! itself). Not run: the server's socket driver and RPC service layer (duplicate request cache,
//! statistics per procedure); the worlds parse calls and frame replies themselves. The file's
//! content is a position-dependent pattern ([`content`]) written into the MemFs, and every
//! byte the application receives is checked. The [`faults`] world adds crashes and EIO through
//! the MemFs's own faults.
//!
//! # The event loop
//! ```text
//!            ┌──────────────────────────── settle(now): repeat until nothing changes ───────────┐
//!            │                                                                                  │
//!            │  s2c.poll_deliver ─► client.on_segment ─► RecordDecoder ─► CallTable.handle_reply │
//!            │                                            ─► ReadCore.on_reply (cache, engine)  │
//!            │  c2s.poll_deliver ─► server.on_segment ─► RecordDecoder ─► parse_call ─► queue    │
//!            │  server.step      : due service ─► Host: real handler ─► frame ─► s2c.offer       │
//!            │                     woken handlers, write-behind flusher step                    │
//!            │  client.step      : CallTable timers/events, readers ─► ReadCore.begin_read/poll │
//!            │                     ─► start_call ─► poll_transmit ─► frame ─► c2s.offer         │
//!            └──────────────────────────────────────────────────────────────────────────────────┘
//!                 │ quiet
//!                 ▼
//!   now = min( c2s.poll_timeout, s2c.poll_timeout,      (next delivery)
//!              CallTable.poll_timeout,                  (UDP retransmit, major timeout)
//!              server service completion,
//!              write-behind flusher deadline,
//!              room_timeout of a blocked TCP sender )   (backpressure)
//!                 │
//!                 └──► until the application is done and every call has completed
//!                      (the liveness phase), or the scenario's time limit.
//! ```
//! Order within an instant is fixed (deliveries to the client, deliveries to the server, the
//! server, the client), every component iterates in a deterministic order, and every random
//! draw comes from generators seeded by the scenario, so the same seed gives the same run, byte
//! for byte. Nothing reads a clock: [`run`] takes the `Instant` that virtual zero maps to.
//!
//! # Measuring
//! [`Report::achieved_rate_after_warmup`] is the rate at which the application consumed bytes
//! after its first 8 × BDP (the readahead window's growth phase), divided by nothing: compare it
//! with [`Report::link_rate`] ([`Report::ratio`]). The link rate counts RPC and record-marking
//! headers too, so a perfect client reaches about 99.99 % with 1 MiB READs.
//!
//! | module       | what                                                             |
//! |--------------|------------------------------------------------------------------|
//! | [`scenario`] | [`Scenario`], [`Pattern`], [`Report`]                            |
//! | `world`      | the event loop above, [`run`]                                    |
//! | `client`     | readers, the read core's driver, the call table driver           |
//! | `server`     | call parsing, service time and concurrency around `host`         |
//! | `pipe`       | TCP send buffers and datagrams on the link model                 |
//! | [`content`]  | the file's position-dependent pattern                            |
//! | [`grid`]     | the RTT × rate acceptance grid and its markdown table            |
//! | [`faults`]   | resets, stalls, restarts, EIO against a write+read model (own world) |
//! | `host`       | the real NFSv3 server over MemFs, polled in virtual time         |
//! | [`v4`]       | the NFSv4.1 COMPOUND processor's slots, leases and courtesy clients (own world) |

mod client;
pub mod content;
pub mod faults;
pub mod grid;
mod host;
mod pipe;
pub mod scenario;
mod server;
pub mod v4;
pub mod v4_cutoff;
pub mod v4_grace;
pub mod v4deleg;
mod world;

pub use scenario::{
    Pattern, Report, Scenario, ServerOrder, WindowEvent, KIB, MIB, UDP_RSIZE_BYTES_MAX,
};
pub use sluice_engine::readahead::ReadaheadMode;
pub use sluice_rpc::client::Transport;
pub use world::run;

/// The seed to use: `SLUICE_SEED` if set (to replay a printed seed), else `default`; printed
/// first ([`sluice_testkit::seed::seed`]).
///
/// For tests and examples: the simulator itself takes its seed from the [`Scenario`].
pub fn seed_from_env(default: u64) -> u64 {
    sluice_testkit::seed::seed("sluice-sim", default)
}
