//! What a TLS connection agreed on, for statistics: shared by the rustls path
//! ([`crate::tls`]) and the kernel record layer ([`crate::ktls`]), which records it before it
//! hands the keys over.

use std::fmt;

/// The protocol version and cipher suite of a TLS connection, as rustls names them
/// (`TLSv1_3`, `TLS13_AES_128_GCM_SHA256`), and whether the kernel carries its records, for
/// statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsSession {
    pub version: &'static str,
    pub cipher_suite: &'static str,
    /// The record layer is in the kernel (kernel TLS), not in rustls.
    pub kernel: bool,
}

impl TlsSession {
    /// What `conn`'s handshake agreed on.
    pub(crate) fn of(conn: &rustls::CommonState, kernel: bool) -> TlsSession {
        let name = |s: Option<&'static str>| s.unwrap_or("unknown");
        TlsSession {
            version: name(conn.protocol_version().and_then(|v| v.as_str())),
            cipher_suite: name(
                conn.negotiated_cipher_suite()
                    .and_then(|c| c.suite().as_str()),
            ),
            kernel,
        }
    }
}

impl fmt::Display for TlsSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.version, self.cipher_suite)
    }
}
