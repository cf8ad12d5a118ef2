//! What the socket driver hands the RPC service layer and gets back: who sent a call
//! ([`Peer`], over which [`Transport`]), the reply record ([`Reply`]) and the [`Service`] that
//! turns one into the other. Protocol handlers take these; the driver (`crate::net`) produces
//! and consumes them, and nothing here knows about sockets.

pub use super::reply::Reply;
use crate::nfs4::callback::conn::CallbackConn;
use bytes::Bytes;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

/// Who sent a call.
#[derive(Debug, Clone)]
pub struct Peer {
    pub addr: SocketAddr,
    /// A number unique to the connection (0 for UDP), for the duplicate request cache.
    pub conn_id: u64,
    pub transport: Transport,
    /// TCP: the connection's back channel, for calls from the server to this client (a v4.1
    /// session keeps it to send callbacks). `None` over UDP, which has no connection.
    pub back_channel: Option<CallbackConn>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Udp,
    /// TCP upgraded to RPC-with-TLS (RFC 9289), and what the client proved in the handshake.
    Tls(sluice_tcp::tls::TlsPeer),
}

impl Transport {
    /// Whether a READ reply's data may go by splice (pipe to socket): over plain TCP, and over
    /// TLS whose record layer is the kernel's (kTLS encrypts the spliced pages). UDP builds
    /// each datagram in memory, and rustls must encrypt the bytes in user space.
    pub fn may_splice(self) -> bool {
        match self {
            Transport::Tcp => true,
            Transport::Tls(p) => p.kernel,
            Transport::Udp => false,
        }
    }

    /// Whether the call came over TLS, and whether its client certificate was verified.
    pub fn tls(self) -> Option<sluice_tcp::tls::TlsPeer> {
        match self {
            Transport::Tls(p) => Some(p),
            _ => None,
        }
    }

    /// The connection's transport security as an export's `xprtsec=` names it: what the
    /// export gate ([`sluice_vfs::gate::admit`]) checks.
    pub fn xprtsec(self) -> sluice_vfs::exports::Xprtsec {
        use sluice_vfs::exports::Xprtsec;
        match self {
            Transport::Tls(p) if p.verified => Xprtsec::Mtls,
            Transport::Tls(_) => Xprtsec::Tls,
            Transport::Tcp | Transport::Udp => Xprtsec::None,
        }
    }
}

/// Whatever answers RPC records: the NFS/MOUNT/PORTMAP dispatcher in production.
pub trait Service: Send + Sync + 'static {
    /// Handles one call record; `None` means send nothing (e.g. an undecodable header).
    fn handle(
        self: Arc<Self>,
        peer: Peer,
        record: Vec<Bytes>,
    ) -> impl Future<Output = Option<Reply>> + Send;

    /// The connection `conn_id` is gone (the driver calls it once, after the last call on it
    /// was handled or abandoned). State bound to connections (NFSv4.1 sessions) lets go of it.
    fn conn_closed(&self, _conn_id: u64) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_tcp::tls::TlsPeer;

    #[test]
    fn read_replies_splice_over_plain_tcp_and_kernel_tls_only() {
        assert!(Transport::Tcp.may_splice());
        assert!(!Transport::Udp.may_splice());
        let tls = |kernel| {
            Transport::Tls(TlsPeer {
                verified: false,
                kernel,
            })
        };
        assert!(tls(true).may_splice());
        assert!(!tls(false).may_splice());
        assert!(
            tls(true).tls().is_some(),
            "kernel TLS is TLS to the export policy"
        );
    }
}
