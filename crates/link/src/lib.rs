//! `sluice-link`: a link emulator for loopback benchmarks and fault tests.
//!
//! * [`model`]: one direction of a network path as pure code (delay, jitter,
//!   bottleneck rate, bounded queue, loss/dup/reorder, reset and stall faults),
//!   driven by `now` and a seeded generator, tested in virtual time.
//! * `proxy`: a thin tokio driver that puts two model directions between a
//!   listening port and a target, for TCP and for UDP.

pub mod model;
pub mod proxy;

mod args;
mod timer;

pub use args::{parse_bytes, parse_duration, parse_rate, parse_ratio, run, LinkArgs};
pub use model::{LinkConfig, LinkDirection};
pub use proxy::{run_tcp_proxy, run_udp_proxy, ProxyConfig, TcpProxy, UdpProxy};
