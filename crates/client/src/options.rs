//! The settings both NFS versions take: [`ClientOptions`], and what `nconnect` may be.
//!
//! Neither version owns them: the v3 [`crate::Client`] and [`crate::v4::Client`] read the same
//! struct, and [`crate::connect`] hands it to whichever it picks. What only one version needs
//! lives with that version ([`crate::v4::V4Options`]).

use crate::transport::{RpcConfig, RpcTls};
use crate::url::{NfsUrl, XprtSec};
use sluice_engine::readahead::ReadaheadMode;
use sluice_engine::trunk::TrunkConfig;
use sluice_tcp::tls::ClientTls;
use std::path::PathBuf;
use std::time::Duration;

/// Settings of a client of either version (the v3 [`crate::Client`], [`crate::v4::Client`]).
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Transport settings (slots, hard/soft, reconnect backoff).
    pub rpc: RpcConfig,
    /// Cap on the READ size; the server's `rtmax` may lower it. Default 1 MiB, Linux's cap.
    pub rsize_max: u32,
    /// Cap on the WRITE size; the server's `wtmax` may lower it. Default 1 MiB.
    pub wsize_max: u32,
    /// Readahead policy of every file read (see `sluice_engine::readahead`). Default
    /// [`ReadaheadMode::Auto`]: the window grows while readers keep consuming, up to twice the
    /// measured bandwidth-delay product. `Fixed(128 KiB)` reproduces Linux >= 5.4's NFS
    /// default (at most 128 KiB in flight per file), `Fixed(15 MiB)` Linux 4.14's 15 x rsize;
    /// `Off` fetches only what is read.
    pub readahead: ReadaheadMode,
    /// Memory all files of this client may hold in data fetched ahead of their readers and
    /// not yet consumed. Default 256 MiB: twice the 40 ms x 1 GB/s bandwidth-delay product
    /// (one fast reader at full window), or 16 readers at 16 MiB each. Demand fetches (what a
    /// reader waits for) are never refused; readahead beyond the budget waits.
    pub readahead_budget_bytes: u64,
    /// Print a line on stderr for every readahead window change (like the kernel's readahead
    /// debug prints). Default false.
    pub trace_readahead: bool,
    /// How long a file's attributes are trusted before a read revalidates them with GETATTR
    /// (data cached ahead is dropped if size, mtime or ctime changed). Default 3 s, Linux's
    /// `acregmin`. Every READ reply's post-op attributes also revalidate.
    pub attr_timeout: Duration,
    /// Use UDP instead of TCP (also `?proto=udp` in the URL). Default false.
    pub udp: bool,
    /// UNSTABLE WRITEs of wsize in flight per writer. Default 4, for the same reason.
    pub write_depth: usize,
    /// Uncommitted bytes a writer may hold (for resending after a server restart) before it
    /// sends a COMMIT. Default 64 MiB: a bound on client memory per open writer.
    pub commit_bytes_max: u64,
    /// Credentials (AUTH_SYS); the URL's `uid`/`gid` override these. Default: the process's
    /// effective ids.
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// READDIR(PLUS) reply size asked for; the server's `dtpref` may lower it. Default 64 KiB.
    pub readdir_bytes: u32,
    /// TCP connections to the NFS service, 1..=[`NCONNECT_MAX`] (the URL's `nconnect` overrides
    /// it) to start with. Default 1. Calls go to the connections in turn, each with its own call table,
    /// reader and writer task: one connection's receive path (the copy of every reply out of the
    /// socket) runs on one thread at a time, so a single fast stream can be bound by one core
    /// on the client, which more connections spread over several. Like Linux's `nconnect`
    /// mount option, and capped like it at 16. UDP has no connections: more than 1 is refused.
    pub nconnect: usize,
    /// Automatic `nconnect` (see `sluice_engine::trunk`): the client opens one more connection
    /// when its receive path turns out to be the limit, up to `max` in all. Default `max`: the
    /// CPUs, at most [`NCONNECT_AUTO_MAX`]. A URL's `nconnect` fixes the count; so does a
    /// `max` of `nconnect` ([`ClientOptions::fixed_nconnect`]).
    pub nconnect_auto: TrunkConfig,
    /// How long a URL without `version=` waits for the NFSv4 probe (connect, NULL,
    /// EXCHANGE_ID) before it gives up on v4 and tries v3. Default 5 s; see
    /// [`V4_PROBE_TIMEOUT`]. An explicit `version=4.x` never gives up early.
    pub v4_probe_timeout: Duration,
    /// NFSv4 EXCHANGE_ID's client owner. `None` (the default): unique per client instance, as
    /// a command wants; a long-lived client (the mount) gives a stable one (see the v4 module
    /// docs, "Client owner").
    pub v4_owner: Option<Vec<u8>>,
    /// Certificate files for RPC-with-TLS, used when the URL asks for `xprtsec=tls|mtls`.
    pub tls: TlsFiles,
}

/// The client's certificate files for RPC-with-TLS (PEM; `--tls-ca`, `--tls-cert`,
/// `--tls-key`, or `SLUICE_TLS_CA` / `SLUICE_TLS_CERT` / `SLUICE_TLS_KEY` in the commands).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA certificates the server's certificate must chain to. Needed for any TLS.
    pub ca: Option<PathBuf>,
    /// The client's certificate chain and key, presented with `xprtsec=mtls`.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// The TLS settings of `url`'s connections: `None` for plaintext, else the loaded files, the
/// name to verify (the URL's host) and the probe's program. A URL that asks for TLS without
/// the files it needs is an error here, before any connection.
pub(crate) fn rpc_tls(
    url: &NfsUrl,
    options: &ClientOptions,
    probe_program: (u32, u32),
) -> Result<Option<RpcTls>, String> {
    let mutual = match url.xprtsec {
        None | Some(XprtSec::None) => return Ok(None),
        Some(XprtSec::Tls) => false,
        Some(XprtSec::Mtls) => true,
    };
    let Some(ca) = &options.tls.ca else {
        return Err(
            "xprtsec=tls|mtls needs the CA that signed the server's certificate (--tls-ca or SLUICE_TLS_CA)"
                .into(),
        );
    };
    let identity = match (mutual, &options.tls.cert, &options.tls.key) {
        (false, _, _) => None,
        (true, Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
        (true, _, _) => {
            return Err("xprtsec=mtls needs a client certificate and key (--tls-cert and --tls-key, or SLUICE_TLS_CERT and SLUICE_TLS_KEY)".into())
        }
    };
    let client = ClientTls::load(ca, identity).map_err(|e| e.to_string())?;
    Ok(Some(RpcTls {
        client,
        server_name: url.host.clone(),
        probe_program,
    }))
}

/// Most TCP connections one client opens to the NFS service (Linux's cap for `nconnect`).
pub const NCONNECT_MAX: usize = 16;

/// Most connections the automatic `nconnect` grows to: each is a reader on its own core, and
/// past a few the server's send path is the limit.
pub const NCONNECT_AUTO_MAX: usize = 4;

/// The default ceiling of the automatic `nconnect`: the CPUs, at most [`NCONNECT_AUTO_MAX`].
pub fn nconnect_auto_default() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, NCONNECT_AUTO_MAX)
}

/// The connections `url` (its `nconnect`, else the option's) asks for to start with:
/// 1..=[`NCONNECT_MAX`], and only 1 over UDP; and the most the client may grow to by itself
/// (the start when the count is fixed), with the rest of the automatic `nconnect`'s settings.
pub(crate) fn checked_nconnect(
    url: &NfsUrl,
    options: &ClientOptions,
) -> Result<(usize, TrunkConfig), String> {
    let n = url.nconnect.map_or(options.nconnect, |n| n as usize);
    if !(1..=NCONNECT_MAX).contains(&n) {
        return Err(format!("nconnect must be 1 to {NCONNECT_MAX}, not {n}"));
    }
    if options.udp && n > 1 {
        return Err(
            "nconnect above 1 needs TCP: UDP has no connections to spread calls over".to_string(),
        );
    }
    let max = if url.nconnect.is_some() || options.udp {
        n
    } else {
        options.nconnect_auto.max.clamp(n, NCONNECT_MAX)
    };
    Ok((
        n,
        TrunkConfig {
            max,
            ..options.nconnect_auto
        },
    ))
}

impl ClientOptions {
    /// Exactly `n` connections, none added automatically (an explicit `--nconnect`).
    pub fn fixed_nconnect(&mut self, n: usize) {
        self.nconnect = n;
        self.nconnect_auto.max = n;
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            rpc: RpcConfig::default(),
            rsize_max: 1 << 20,
            wsize_max: 1 << 20,
            readahead: ReadaheadMode::Auto,
            readahead_budget_bytes: 256 << 20,
            trace_readahead: false,
            attr_timeout: Duration::from_secs(3),
            udp: false,
            write_depth: 4,
            commit_bytes_max: 64 << 20,
            uid: None,
            gid: None,
            readdir_bytes: 64 << 10,
            nconnect: 1,
            nconnect_auto: TrunkConfig {
                max: nconnect_auto_default(),
                ..TrunkConfig::default()
            },
            v4_probe_timeout: V4_PROBE_TIMEOUT,
            v4_owner: None,
            tls: TlsFiles::default(),
        }
    }
}

/// How long a URL without a version waits for the NFSv4 probe (TCP connect, NULL, then
/// EXCHANGE_ID) before it tries NFSv3 instead: 5 s.
///
/// A server that serves no NFSv4 normally says so at once (connection refused, PROG_MISMATCH,
/// MINOR_VERS_MISMATCH; see [`crate::connect::falls_back`]), but some stay silent: a firewall that drops the
/// port, an old server that ignores calls for a version it does not serve, a proxy that accepts
/// and never forwards. Without a bound the probe would wait for the RPC layer's major timeout
/// (a minute, and forever with hard mounts). A live server answers NULL within a round trip
/// plus a retransmission or two (the RPC layer's first timeout is under a second), so 5 s
/// leaves room for a loaded server or a slow WAN and still reads as "a short wait, then v3"
/// to a person at a prompt. Only the probe is bounded: once EXCHANGE_ID answered, the server
/// speaks v4 and session setup runs under the ordinary RPC rules.
pub const V4_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nconnect_is_automatic_unless_given() {
        let url = |s: &str| NfsUrl::parse(s).unwrap();
        let mut o = ClientOptions::default();
        o.nconnect_auto.max = 4;
        assert_eq!(checked_nconnect(&url("nfs://h/x"), &o).unwrap().0, 1);
        assert_eq!(checked_nconnect(&url("nfs://h/x"), &o).unwrap().1.max, 4);
        // The URL's count is the count.
        let (n, t) = checked_nconnect(&url("nfs://h/x?nconnect=2"), &o).unwrap();
        assert_eq!((n, t.max), (2, 2));
        // So is an explicit option.
        let mut fixed = o.clone();
        fixed.fixed_nconnect(3);
        let (n, t) = checked_nconnect(&url("nfs://h/x"), &fixed).unwrap();
        assert_eq!((n, t.max), (3, 3));
        // More to start with than the automatic ceiling: the start wins.
        let mut many = o.clone();
        many.nconnect = 8;
        assert_eq!(checked_nconnect(&url("nfs://h/x"), &many).unwrap().1.max, 8);
        // UDP has one socket.
        let mut udp = o.clone();
        udp.udp = true;
        assert_eq!(checked_nconnect(&url("nfs://h/x"), &udp).unwrap().1.max, 1);
        assert!((1..=NCONNECT_AUTO_MAX).contains(&nconnect_auto_default()));
    }
}
