//! ONC RPC (RFC 5531) machinery for sluice, with no I/O and no clock.
//!
//! Every type here takes bytes and `now: Instant` as inputs and returns what to send and when to
//! wake up; the tokio drivers in `sluice-server` / `sluice-client` own the sockets, and the
//! simulator drives the very same code in virtual time (see STYLE.md, "the one architectural
//! rule"). `clippy.toml` in this crate forbids `Instant::now` and socket/file types.
//!
//! ```text
//!   socket bytes ──push──► record::RecordDecoder ──next_record──► Vec<Bytes> (one RPC message)
//!                                                                     │
//!                             msg::classify (msg_type) on either side ┤
//!                                                                     │
//!              server side: CALL ─► server::parse_call ◄──────────────┤
//!                 │  CallParse::Call ─► drc::ReplyCache ─► handler ─► server::success_header
//!                 │  other outcomes ─► server::reply_for (ready-made MSG_DENIED / GARBAGE)
//!                 REPLY ─► duplex::OutgoingCalls (the server's own calls: callbacks)
//!                                                                     │
//!              client side: client::CallTable::handle_record ◄────────┘
//!                 REPLY ─► handle_reply; CALL ─► the driver's callback service
//!                 CallTable::poll_transmit ─► record::frame (TCP) ─► writev
//!                 CallTable::poll_timeout / handle_timeout, retransmit policy from rtt
//! ```
//!
//! | module     | what                                                              |
//! |------------|-------------------------------------------------------------------|
//! | [`record`] | TCP record marking (RFC 5531 §11), zero-copy, bounded             |
//! | [`msg`]    | the message codec both tables share: CALL builder, REPLY decoder,|
//! |            | CALL/REPLY classification                                         |
//! | [`server`] | call header parsing and authentication outcome, reply builders    |
//! | [`rtt`]    | per-timer-class RTT estimator with a variance floor and backoff;  |
//! |            | the path filters (windowed min/max, jitter) the windows share     |
//! | [`client`] | the client call table: XIDs, slots, retransmit policy, events     |
//! | [`drc`]    | the server's duplicate request cache                              |
//! | [`duplex`] | calls both ways on one connection: CALL/REPLY demultiplexing and  |
//! |            | the table of calls a server originates (the v4.1 callbacks)     |
//! | [`tls`]    | the RPC-with-TLS probe (RFC 9289): AUTH_TLS NULL and STARTTLS     |

pub mod client;
pub mod drc;
pub mod duplex;
pub mod msg;
pub mod record;
pub mod rtt;
pub mod server;
pub mod tls;

pub use sluice_xdr as xdr;

#[cfg(test)]
pub(crate) mod test_util {
    use std::time::Instant;

    /// The one clock read in this crate: a base for tests, which then only add Durations.
    #[allow(clippy::disallowed_methods)]
    pub fn base_instant() -> Instant {
        Instant::now()
    }
}
