//! RPC-with-TLS (RFC 9289) on a TCP connection: the driver half that both ends share. The
//! probe's bytes are `sluice_rpc::tls`'s (pure); this module owns the sockets, the timers and
//! rustls.
//!
//! ```text
//!  server: accept ─► accept_upgrade(stream, Some(tls), wait_max)
//!            │  peek the first record (nothing consumed unless it is a probe)
//!            ├─ not a probe, or no TLS configured ─► Upgraded::Plain(stream): plaintext as before
//!            └─ probe ─► consume it, send STARTTLS ─► TLS 1.3 handshake (≤ handshake_timeout)
//!                 ├─ ok ─► Upgraded::Tls(stream, peer_verified)
//!                 └─ failed ─► Err(HandshakeError): that one connection closes, counted and logged
//!  client: TCP connect ─► connect_upgrade(stream, &ClientTls, server name, prog, vers)
//!            probe ─► STARTTLS? ─► handshake, the server's name verified against the CA
//!            no STARTTLS ─► Err "the server does not offer RPC-with-TLS (AUTH_ERROR 1)"
//! ```
//!
//! # Why the server peeks
//! A plaintext connection must work exactly as before, from the same port. The first record is
//! looked at with `MSG_PEEK`, so a connection whose first record is not a probe is handed on
//! with every byte still in the socket, and the ordinary reader takes over unchanged. A probe is
//! 44 bytes with a record mark of exactly `0x8000_0028` (one last fragment of 40 bytes: call
//! header, empty AUTH_TLS credential, empty AUTH_NONE verifier), so four bytes decide almost
//! every connection. The client sends its ClientHello only after the STARTTLS reply (§4.1), so
//! after the probe there is nothing else to consume in plaintext.
//!
//! # Time bounds
//! Waiting for a plaintext client's first bytes is bounded by the caller's idle timeout (an
//! idle connection is closed then anyway). The probe's remaining bytes and the whole handshake
//! are bounded by [`ServerTls::handshake_timeout`] (default 10 s): a client that stalls half way
//! costs one connection slot for that long, never more. Garbage instead of a ClientHello fails
//! the handshake at once.
//!
//! # Certificates
//! Certificate chain, key and optional client CA are PEM files ([`ServerTlsFiles`]). Only TLS
//! 1.3 is offered (the RFC requires it), no ALPN is required (Linux's `tlshd` sends none).
//! With a client CA, a client certificate is *requested*, not required: a certificate that does
//! not chain to the CA fails the handshake, a client without one gets a TLS connection without
//! a verified peer, and the per-export `xprtsec` policy decides what that connection may reach
//! (`mtls` exports need a verified peer). [`ServerTls::reload`] reads the files again (the
//! server calls it on SIGHUP); connections already up keep the configuration they started with.
//!
//! # The data path under TLS
//! Where the kernel has TLS (the `tls` module), the server hands the record layer to it right
//! after the handshake ([`crate::ktls`]): the connection is [`Upgraded::Ktls`] /
//! [`Stream::Ktls`], a plaintext socket to the drivers, and READ replies keep going by splice.
//! Elsewhere rustls encrypts from the caller's buffers into TLS records of at most 16 KiB, so a
//! READ reply written as an iovec of pooled 64 KiB chunks goes through without ever being
//! gathered into one large buffer; the price is the one copy that encryption is anyway (rustls
//! copies the plaintext into its record buffer and encrypts it there).
//!
//! # Reading under TLS
//! rustls asks its transport for at most one TLS record at a time (about 16 KiB), so straight
//! on the socket a 1 MiB WRITE call (or READ reply) took 65 `recvfrom` calls, against about four
//! of the plaintext reader's 64 KiB reads. The socket under rustls is therefore wrapped in a
//! 64 KiB read buffer ([`TlsIo`]): one system call fills it, and rustls takes its records out of
//! it (measured on a 64 MiB sequential read: 4,132 `recvfrom` calls in the client before, 1,059
//! after). The buffer adds a memory copy of what is read, cheaper than the system calls it
//! saves.
//!
//! # Writing under TLS
//! Writes go straight to the socket: rustls hands the records it has to one `writev`. How
//! many it has is its send buffer limit, raised from rustls's 64 KiB to
//! `TLS_SEND_BUFFER_BYTES` on both ends: a 64 MiB sequential read took 1,095 `writev` calls
//! in the server before, 199 after, and an alternating A/B on loopback (4 reps each, twice)
//! measured about a sixth less server CPU on TLS reads and a fifth less client CPU on TLS
//! writes.

use bytes::{Bytes, BytesMut};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use sluice_rpc::record::{frame, RecordDecoder, RecordDecoderConfig, MAX_FRAGMENT_BYTES};
use sluice_rpc::tls::{check_probe_reply, is_probe, probe_call, starttls_reply};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// A TLS session over TCP, either end.
pub use crate::tls_session::TlsSession;

pub type TlsStream = tokio_rustls::TlsStream<TlsIo>;

/// The socket under rustls: reads go through a buffer of `TLS_READ_BUFFER_BYTES`, writes
/// straight to the socket (see "Reading under TLS" in the module docs).
pub type TlsIo = BufReader<TcpStream>;

/// The read buffer under rustls: as large as the plaintext reader's buffers (64 KiB), so a
/// socket read under TLS takes about as much as one without it.
const TLS_READ_BUFFER_BYTES: usize = 64 * 1024;

/// The most ciphertext rustls holds for the socket on one connection (its default is 64 KiB).
/// Each write encrypts at most this much before the records go out in one `writev`: at 64 KiB
/// a 1 MiB READ reply took 16 system calls (and 16 wake-ups of the reader), at 512 KiB two.
/// The cost is this much memory per connection while it sends, beside the reply it encrypts.
const TLS_SEND_BUFFER_BYTES: usize = 512 * 1024;

fn buffered(stream: TcpStream) -> TlsIo {
    BufReader::with_capacity(TLS_READ_BUFFER_BYTES, stream)
}

/// The bytes of a probe on the wire: a four-byte record mark and a 40-byte call.
const PROBE_RECORD_BYTES: usize = 44;
/// The record mark of a probe: last fragment, 40 bytes.
const PROBE_MARK: [u8; 4] = [0x80, 0, 0, 40];
/// The longest a probe reply can be: a reply header with a 400-byte verifier, marked.
const PROBE_REPLY_BYTES_MAX: usize = 512;

/// Where the server's certificate, key and optional client CA come from (PEM files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsFiles {
    /// The certificate chain, leaf first (`--tls-cert`).
    pub cert: PathBuf,
    /// The leaf's private key: PKCS#8, PKCS#1 or SEC1 (`--tls-key`).
    pub key: PathBuf,
    /// CA certificates client certificates must chain to (`--tls-client-ca`); `None`: no
    /// client certificate is asked for, and no export can be `mtls`.
    pub client_ca: Option<PathBuf>,
}

/// The server's TLS side: its configuration (reloadable) and counters.
pub struct ServerTls {
    files: ServerTlsFiles,
    current: RwLock<Arc<ServerConfig>>,
    /// From the probe's first byte to the end of the handshake (default 10 s: a handshake on
    /// loopback takes about a millisecond, across a continent a few round trips; ten seconds
    /// is far past any live client and short enough that stalled ones cannot pile up).
    pub handshake_timeout: Duration,
    pub stats: TlsStats,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .field("handshake_timeout", &self.handshake_timeout)
            .finish()
    }
}

/// What the TLS side of a server counted.
#[derive(Debug, Default)]
pub struct TlsStats {
    /// Connections upgraded to TLS (rustls), from accept to Finished.
    pub handshakes: AtomicU64,
    /// Probes answered whose handshake then failed or timed out.
    pub handshakes_failed: AtomicU64,
    /// Of those upgraded, the ones whose client certificate was verified against the CA.
    pub peers_verified: AtomicU64,
    /// Of those upgraded, the ones whose record layer went to the kernel ([`crate::ktls`]).
    pub kernel: crate::ktls::KtlsStats,
}

impl ServerTls {
    /// Reads the files; fails with a message naming the file that is wrong.
    pub fn load(files: ServerTlsFiles) -> io::Result<ServerTls> {
        let config = server_config(&files)?;
        Ok(ServerTls {
            files,
            current: RwLock::new(config),
            handshake_timeout: Duration::from_secs(10),
            stats: TlsStats::default(),
        })
    }

    /// Reads the files again; on failure the configuration in use stays.
    pub fn reload(&self) -> io::Result<()> {
        let config = server_config(&self.files)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = config;
        Ok(())
    }

    /// Whether client certificates are asked for (a client CA is configured).
    pub fn verifies_clients(&self) -> bool {
        self.files.client_ca.is_some()
    }

    fn config(&self) -> Arc<ServerConfig> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// What a TLS connection's client proved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsPeer {
    /// The client presented a certificate that chains to the configured client CA.
    pub verified: bool,
    /// The kernel does the TLS record layer ([`crate::ktls`]): the socket takes plaintext,
    /// and splice works on it.
    pub kernel: bool,
}

/// A connection after the server looked at its first record.
pub enum Upgraded {
    /// Not a probe (or the server has no TLS): every byte is still in the socket.
    Plain(TcpStream),
    /// Upgraded: RPC records now flow inside TLS.
    Tls(Box<TlsStream>, TlsPeer),
    /// Upgraded, and the kernel took over the record layer after the handshake.
    Ktls(crate::ktls::KtlsStream, TlsPeer),
}

/// Why an upgrade failed: the connection is lost, and this says why for the log.
#[derive(Debug)]
pub struct HandshakeError(pub String);

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HandshakeError {}

/// The server's side (see the module docs). `first_bytes_wait_max` bounds the wait for a
/// plaintext client's first bytes; with `tls` `None` nothing is read or peeked at all, and a
/// probe then meets the ordinary dispatcher, which refuses AUTH_TLS with AUTH_BADCRED.
pub async fn accept_upgrade(
    stream: TcpStream,
    tls: Option<&ServerTls>,
    first_bytes_wait_max: Duration,
) -> Result<Upgraded, HandshakeError> {
    let Some(tls) = tls else {
        return Ok(Upgraded::Plain(stream));
    };
    let mut mark = [0u8; 4];
    match tokio::time::timeout(first_bytes_wait_max, peek_exact(&stream, &mut mark)).await {
        Ok(Ok(true)) => {}
        // EOF, an error or silence: the plaintext path sees and reports the same.
        _ => return Ok(Upgraded::Plain(stream)),
    }
    if mark != PROBE_MARK {
        return Ok(Upgraded::Plain(stream));
    }
    match tokio::time::timeout(tls.handshake_timeout, upgrade(stream, tls)).await {
        Ok(r) => r,
        Err(_) => Err(HandshakeError(format!(
            "handshake not finished within {:?}",
            tls.handshake_timeout
        ))),
    }
    .inspect_err(|_| {
        tls.stats.handshakes_failed.fetch_add(1, Relaxed);
    })
}

async fn upgrade(mut stream: TcpStream, tls: &ServerTls) -> Result<Upgraded, HandshakeError> {
    let mut probe = [0u8; PROBE_RECORD_BYTES];
    if !peek_exact(&stream, &mut probe)
        .await
        .map_err(|e| HandshakeError(format!("reading the probe: {e}")))?
    {
        return Ok(Upgraded::Plain(stream));
    }
    let Some(xid) = is_probe(&[Bytes::copy_from_slice(&probe[4..])]) else {
        // A 40-byte first record that is some other call: plaintext.
        return Ok(Upgraded::Plain(stream));
    };
    stream
        .read_exact(&mut probe)
        .await
        .map_err(|e| HandshakeError(format!("reading the probe: {e}")))?;
    let reply: Vec<u8> = frame(starttls_reply(xid), MAX_FRAGMENT_BYTES).concat();
    stream
        .write_all(&reply)
        .await
        .map_err(|e| HandshakeError(format!("sending STARTTLS: {e}")))?;
    let stream = match crate::ktls::accept(stream, &tls.config())
        .await
        .map_err(HandshakeError)?
    {
        Ok((k, verified)) => {
            tls.stats.handshakes.fetch_add(1, Relaxed);
            tls.stats.kernel.connections.fetch_add(1, Relaxed);
            if verified {
                tls.stats.peers_verified.fetch_add(1, Relaxed);
            }
            let kernel = true;
            return Ok(Upgraded::Ktls(k, TlsPeer { verified, kernel }));
        }
        Err(stream) => stream,
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.config());
    let mut tls_stream = acceptor
        .accept(buffered(stream))
        .await
        .map_err(|e| HandshakeError(format!("TLS handshake: {e}")))?;
    tls_stream
        .get_mut()
        .1
        .set_buffer_limit(Some(TLS_SEND_BUFFER_BYTES));
    let verified = tls_stream.get_ref().1.peer_certificates().is_some();
    tls.stats.handshakes.fetch_add(1, Relaxed);
    if verified {
        tls.stats.peers_verified.fetch_add(1, Relaxed);
    }
    Ok(Upgraded::Tls(
        Box::new(tokio_rustls::TlsStream::Server(tls_stream)),
        TlsPeer {
            verified,
            kernel: false,
        },
    ))
}

/// Fills `buf` from the socket without consuming anything. `Ok(false)` at EOF before that.
/// A peek returns at once while bytes are queued, so waiting for the rest of a record that
/// arrives in pieces sleeps briefly between peeks rather than spinning.
async fn peek_exact(stream: &TcpStream, buf: &mut [u8]) -> io::Result<bool> {
    let mut last = 0;
    loop {
        let n = stream.peek(buf).await?;
        if n == buf.len() {
            return Ok(true);
        }
        if n == last && n > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        } else if n == 0 {
            return Ok(false);
        }
        last = n;
    }
}

/// The client's TLS settings.
#[derive(Clone)]
pub struct ClientTls {
    config: Arc<ClientConfig>,
    /// Whether a client certificate is presented (`xprtsec=mtls`).
    pub mutual: bool,
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls")
            .field("mutual", &self.mutual)
            .finish()
    }
}

impl ClientTls {
    /// Trusts the CA certificates in `ca` (PEM) for the server's certificate; with
    /// `identity` (certificate chain, key), presents it to the server (mtls).
    pub fn load(ca: &Path, identity: Option<(&Path, &Path)>) -> io::Result<ClientTls> {
        let roots = root_store(ca)?;
        let builder = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(io::Error::other)?
            .with_root_certificates(roots);
        let config = match identity {
            Some((cert, key)) => builder
                .with_client_auth_cert(certs(cert)?, private_key(key)?)
                .map_err(|e| bad_file(cert, e))?,
            None => builder.with_no_client_auth(),
        };
        Ok(ClientTls {
            config: Arc::new(config),
            mutual: identity.is_some(),
        })
    }
}

/// The client's side: probe with NULL of `prog`/`vers`, then the handshake, verifying that the
/// server's certificate names `server_name` (a DNS name or an IP address) and chains to the CA.
/// Bounded by `timeout` as a whole. Always rustls; [`connect_upgrade_stream`] is what clients
/// use.
pub async fn connect_upgrade(
    stream: TcpStream,
    tls: &ClientTls,
    server_name: &str,
    prog: u32,
    vers: u32,
    timeout: Duration,
) -> io::Result<TlsStream> {
    let name = verified_name(server_name)?;
    bounded(timeout, async {
        let mut stream = stream;
        probe(&mut stream, prog, vers).await?;
        rustls_connect(stream, tls, name, prog, vers).await
    })
    .await
}

/// [`connect_upgrade`] as a [`Stream`]: with the record layer in the kernel after the
/// handshake ([`crate::ktls`], [`Stream::Ktls`]) where the kernel has TLS (and `SLUICE_KTLS`
/// is not 0), through rustls ([`Stream::Tls`]) elsewhere.
pub async fn connect_upgrade_stream(
    stream: TcpStream,
    tls: &ClientTls,
    server_name: &str,
    prog: u32,
    vers: u32,
    timeout: Duration,
) -> io::Result<Stream> {
    let name = verified_name(server_name)?;
    bounded(timeout, async {
        let mut stream = stream;
        probe(&mut stream, prog, vers).await?;
        let stream = match crate::ktls::connect(stream, &tls.config, name.clone()).await? {
            Ok(mut k) => {
                if tls.mutual {
                    confirm(&mut k, prog, vers).await?;
                }
                return Ok(Stream::Ktls(k));
            }
            Err(stream) => stream,
        };
        let s = rustls_connect(stream, tls, name, prog, vers).await?;
        Ok(Stream::Tls(Box::new(s)))
    })
    .await
}

/// The name the server's certificate must carry, as TLS takes it.
fn verified_name(server_name: &str) -> io::Result<ServerName<'static>> {
    ServerName::try_from(server_name.to_string()).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{server_name:?} is not a name TLS can verify: {e}"),
        )
    })
}

/// The probe and handshake as a whole, within `timeout`.
async fn bounded<T>(
    timeout: Duration,
    work: impl std::future::Future<Output = io::Result<T>>,
) -> io::Result<T> {
    tokio::time::timeout(timeout, work).await.map_err(|_| {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("RPC-with-TLS probe and handshake not done within {timeout:?}"),
        )
    })?
}

/// The client's handshake through rustls, after the probe: the socket under a read buffer and
/// rustls's send buffer raised (see "Reading under TLS" and "Writing under TLS" above).
async fn rustls_connect(
    stream: TcpStream,
    tls: &ClientTls,
    name: ServerName<'static>,
    prog: u32,
    vers: u32,
) -> io::Result<TlsStream> {
    let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
    let mut s = connector
        .connect(name, buffered(stream))
        .await
        .map_err(|e| io::Error::new(e.kind(), format!("TLS handshake: {e}")))?;
    s.get_mut().1.set_buffer_limit(Some(TLS_SEND_BUFFER_BYTES));
    let mut s = tokio_rustls::TlsStream::Client(s);
    if tls.mutual {
        confirm(&mut s, prog, vers).await?;
    }
    Ok(s)
}

/// Under TLS 1.3 the client's handshake ends before the server has checked the client's
/// certificate: a server that refuses it says so with an alert on the client's first read.
/// So that a refused certificate is an error of the connect (and not a connection that closes
/// under the first call, again at every reconnect), an mtls connection sends a NULL call
/// (AUTH_NONE) inside TLS and waits for its reply before it is handed over.
async fn confirm<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    prog: u32,
    vers: u32,
) -> io::Result<()> {
    const CONFIRM_XID: u32 = 0x544c_5332; // "TLS2"
    let call: Vec<u8> = [
        0x8000_0028,
        CONFIRM_XID,
        0, // CALL
        2, // RPC version
        prog,
        vers,
        0, // NULL
        0,
        0, // credential AUTH_NONE, empty
        0,
        0, // verifier AUTH_NONE, empty
    ]
    .iter()
    .flat_map(|w: &u32| w.to_be_bytes())
    .collect();
    stream.write_all(&call).await?;
    stream.flush().await?;
    let record = read_small_record(stream).await.map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("the server refused the TLS connection (client certificate?): {e}"),
        )
    })?;
    match sluice_rpc::msg::classify(&record) {
        sluice_rpc::msg::MsgKind::Reply { xid } if xid == CONFIRM_XID => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "no reply to the NULL call after the TLS handshake",
        )),
    }
}

/// Reads one record of at most [`PROBE_REPLY_BYTES_MAX`] bytes, and nothing after it.
async fn read_small_record<S: AsyncRead + Unpin>(stream: &mut S) -> io::Result<Vec<Bytes>> {
    let mut decoder = RecordDecoder::new(RecordDecoderConfig {
        max_record_bytes: PROBE_REPLY_BYTES_MAX,
        ..RecordDecoderConfig::default()
    });
    let mut buf = BytesMut::with_capacity(PROBE_REPLY_BYTES_MAX);
    let record = loop {
        if let Some(r) = decoder
            .next_record()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?
        {
            break r;
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the server closed the connection",
            ));
        }
        decoder.push(buf.split().freeze());
    };
    if decoder.buffered_bytes() > 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the server sent more than one reply",
        ));
    }
    Ok(record)
}

/// Sends the probe and checks the answer.
async fn probe(stream: &mut TcpStream, prog: u32, vers: u32) -> io::Result<()> {
    // Any xid will do: it is the only call on the connection so far.
    const PROBE_XID: u32 = 0x544c_5331; // "TLS1"
    let call = frame(probe_call(PROBE_XID, prog, vers), MAX_FRAGMENT_BYTES).concat();
    stream.write_all(&call).await?;
    let record = read_small_record(stream)
        .await
        .map_err(|e| io::Error::new(e.kind(), format!("the RPC-with-TLS probe: {e}")))?;
    check_probe_reply(&record, PROBE_XID)
        .map_err(|e| io::Error::new(io::ErrorKind::ConnectionRefused, e.to_string()))
}

/// A connection, plaintext or TLS: what the drivers read and write.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
    /// TLS with the record layer in the kernel: a plaintext socket to us.
    Ktls(crate::ktls::KtlsStream),
}

impl Stream {
    pub fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_) | Stream::Ktls(_))
    }

    /// What the TLS handshake settled on; `None` for plaintext.
    pub fn tls_session(&self) -> Option<TlsSession> {
        match self {
            Stream::Plain(_) => None,
            Stream::Tls(t) => Some(TlsSession::of(t.get_ref().1, false)),
            Stream::Ktls(k) => Some(k.session()),
        }
    }

    /// The TCP socket underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => t.get_ref().0.get_ref(),
            Stream::Ktls(k) => k.tcp(),
        }
    }

    /// Reader and writer, usable from two tasks.
    pub fn into_split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Stream::Plain(s) => {
                let (r, w) = s.into_split();
                (ReadHalf::Plain(r), WriteHalf::Plain(w))
            }
            Stream::Tls(t) => {
                let (r, w) = tokio::io::split(*t);
                (ReadHalf::Tls(r), WriteHalf::Tls(w))
            }
            // The kernel encrypts what is written: the writer is the socket's own.
            Stream::Ktls(k) => {
                let (r, w) = k.into_split();
                (ReadHalf::Ktls(r), WriteHalf::Plain(w))
            }
        }
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stream::Plain(s) => write!(f, "Plain({s:?})"),
            Stream::Tls(_) => f.write_str("Tls(..)"),
            Stream::Ktls(_) => f.write_str("Ktls(..)"),
        }
    }
}

/// The reading half of a [`Stream`].
pub enum ReadHalf {
    Plain(OwnedReadHalf),
    Tls(tokio::io::ReadHalf<TlsStream>),
    Ktls(crate::ktls::KtlsReadHalf),
}

/// The writing half of a [`Stream`]. Under TLS, bytes written may wait inside rustls until
/// a flush: writers flush after each batch.
pub enum WriteHalf {
    Plain(OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<TlsStream>),
}

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ReadHalf::Plain(r) => Pin::new(r).poll_read(cx, buf),
            ReadHalf::Tls(r) => Pin::new(r).poll_read(cx, buf),
            ReadHalf::Ktls(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteHalf::Plain(w) => Pin::new(w).poll_write(cx, buf),
            WriteHalf::Tls(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteHalf::Plain(w) => Pin::new(w).poll_write_vectored(cx, bufs),
            WriteHalf::Tls(w) => Pin::new(w).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            WriteHalf::Plain(w) => w.is_write_vectored(),
            WriteHalf::Tls(w) => w.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Plain(w) => Pin::new(w).poll_flush(cx),
            WriteHalf::Tls(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Plain(w) => Pin::new(w).poll_shutdown(cx),
            WriteHalf::Tls(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}

// --- configuration -----------------------------------------------------------------------------

/// ring's TLS 1.3 suites with AES-128-GCM first (ring's own order puts AES-256-GCM first).
/// TLS_AES_128_GCM_SHA256 is the suite every TLS 1.3 implementation must have (RFC 8446
/// section 9.1) and gives 128-bit security; its 10 AES rounds against AES-256's 14 were
/// measured here at about a sixth less server CPU per GiB written over TLS, and encryption is
/// the largest single cost of a TLS client writing (30% of its CPU in a profile). A server
/// follows the client's order (rustls's default), so a Linux client with `tlshd` still gets
/// what its own settings prefer.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    let mut p = rustls::crypto::ring::default_provider();
    p.cipher_suites
        .sort_by_key(|s| s.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    Arc::new(p)
}

fn server_config(files: &ServerTlsFiles) -> io::Result<Arc<ServerConfig>> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(io::Error::other)?;
    let builder = match &files.client_ca {
        Some(ca) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(root_store(ca)?), provider())
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| bad_file(ca, e))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(certs(&files.cert)?, private_key(&files.key)?)
        .map_err(|e| bad_file(&files.key, e))?;
    Ok(Arc::new(config))
}

fn root_store(ca: &Path) -> io::Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in certs(ca)? {
        roots.add(cert).map_err(|e| bad_file(ca, e))?;
    }
    Ok(roots)
}

fn certs(path: &Path) -> io::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad_file(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad_file(path, e))?;
    if certs.is_empty() {
        return Err(bad_file(path, "no CERTIFICATE in it"));
    }
    Ok(certs)
}

fn private_key(path: &Path) -> io::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| bad_file(path, e))
}

fn bad_file(path: &Path, e: impl fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{}: {e}", path.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate, as
    /// PEM files in a fresh directory.
    pub(crate) struct Pki {
        pub dir: PathBuf,
    }

    impl Pki {
        fn new(tag: &str) -> Pki {
            use rcgen::{CertificateParams, KeyPair};
            let dir = std::env::temp_dir().join(format!("sluice-tls-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let ca_key = KeyPair::generate().unwrap();
            let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
            ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            let ca = ca.self_signed(&ca_key).unwrap();
            let leaf = |names: Vec<String>, file: &str| {
                let key = KeyPair::generate().unwrap();
                let cert = CertificateParams::new(names)
                    .unwrap()
                    .signed_by(&key, &ca, &ca_key)
                    .unwrap();
                std::fs::write(dir.join(format!("{file}.pem")), cert.pem()).unwrap();
                std::fs::write(dir.join(format!("{file}.key")), key.serialize_pem()).unwrap();
            };
            leaf(vec!["127.0.0.1".into(), "localhost".into()], "server");
            leaf(vec!["client".into()], "client");
            std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
            Pki { dir }
        }

        fn p(&self, f: &str) -> PathBuf {
            self.dir.join(f)
        }

        fn server(&self, client_ca: bool) -> ServerTls {
            ServerTls::load(ServerTlsFiles {
                cert: self.p("server.pem"),
                key: self.p("server.key"),
                client_ca: client_ca.then(|| self.p("ca.pem")),
            })
            .unwrap()
        }
    }

    impl Drop for Pki {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    async fn echo_server(
        tls: Arc<ServerTls>,
        answer_null: bool,
    ) -> (std::net::SocketAddr, tokio::task::JoinHandle<Vec<String>>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut seen = Vec::new();
            let (s, _) = l.accept().await.unwrap();
            match accept_upgrade(s, Some(&tls), Duration::from_secs(5)).await {
                Ok(Upgraded::Plain(_)) => seen.push("plain".into()),
                // Only where the kernel has TLS (not on the machines these tests run on).
                Ok(Upgraded::Ktls(_, peer)) => {
                    seen.push(format!("ktls verified={}", peer.verified))
                }
                Ok(Upgraded::Tls(mut t, peer)) => {
                    seen.push(format!("tls verified={}", peer.verified));
                    if answer_null {
                        // The mtls client's NULL call (see `confirm`).
                        let mut call = [0u8; PROBE_RECORD_BYTES];
                        t.read_exact(&mut call).await.unwrap();
                        let xid = u32::from_be_bytes(call[4..8].try_into().unwrap());
                        let reply = frame(
                            sluice_rpc::server::success_header(xid).into_segments(),
                            MAX_FRAGMENT_BYTES,
                        )
                        .concat();
                        t.write_all(&reply).await.unwrap();
                        t.flush().await.unwrap();
                    }
                    let mut b = [0u8; 5];
                    t.read_exact(&mut b).await.unwrap();
                    t.write_all(&b).await.unwrap();
                    t.flush().await.unwrap();
                }
                Err(e) => seen.push(format!("failed: {e}")),
            }
            seen
        });
        (addr, task)
    }

    #[tokio::test]
    async fn a_probe_upgrades_and_bytes_flow_inside_tls() {
        let pki = Pki::new("up");
        let tls = Arc::new(pki.server(true));
        let (addr, task) = echo_server(tls.clone(), false).await;
        let client = ClientTls::load(&pki.p("ca.pem"), None).unwrap();
        let s = TcpStream::connect(addr).await.unwrap();
        let mut t = connect_upgrade(s, &client, "127.0.0.1", 100003, 3, Duration::from_secs(5))
            .await
            .unwrap();
        t.write_all(b"hello").await.unwrap();
        t.flush().await.unwrap();
        let mut b = [0u8; 5];
        t.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"hello");
        assert_eq!(task.await.unwrap(), vec!["tls verified=false"]);
        assert_eq!(tls.stats.handshakes.load(Relaxed), 1);
    }

    #[tokio::test]
    async fn a_client_certificate_from_the_ca_is_verified() {
        let pki = Pki::new("mtls");
        let tls = Arc::new(pki.server(true));
        let (addr, task) = echo_server(tls.clone(), true).await;
        let client = ClientTls::load(
            &pki.p("ca.pem"),
            Some((&pki.p("client.pem"), &pki.p("client.key"))),
        )
        .unwrap();
        let s = TcpStream::connect(addr).await.unwrap();
        let mut t = connect_upgrade(s, &client, "localhost", 100003, 3, Duration::from_secs(5))
            .await
            .unwrap();
        t.write_all(b"hello").await.unwrap();
        t.flush().await.unwrap();
        let mut b = [0u8; 5];
        t.read_exact(&mut b).await.unwrap();
        assert_eq!(task.await.unwrap(), vec!["tls verified=true"]);
        assert_eq!(tls.stats.peers_verified.load(Relaxed), 1);
    }

    #[tokio::test]
    async fn a_client_certificate_from_another_ca_fails_the_handshake() {
        let pki = Pki::new("wrongca");
        let other = Pki::new("wrongca-other");
        let tls = Arc::new(pki.server(true));
        let (addr, task) = echo_server(tls.clone(), false).await;
        let client = ClientTls::load(
            &pki.p("ca.pem"),
            Some((&other.p("client.pem"), &other.p("client.key"))),
        )
        .unwrap();
        let s = TcpStream::connect(addr).await.unwrap();
        // TLS 1.3: the client's handshake ends before the server checks the certificate; the
        // NULL call of `confirm` makes the refusal an error of the connect.
        let e = connect_upgrade(s, &client, "127.0.0.1", 100003, 3, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("refused the TLS connection"), "{e}");
        let seen = task.await.unwrap();
        assert!(seen[0].starts_with("failed: TLS handshake"), "{seen:?}");
        assert_eq!(tls.stats.handshakes_failed.load(Relaxed), 1);
    }

    #[tokio::test]
    async fn the_wrong_server_name_is_refused_by_the_client() {
        let pki = Pki::new("name");
        let tls = Arc::new(pki.server(false));
        let (addr, _task) = echo_server(tls, false).await;
        let client = ClientTls::load(&pki.p("ca.pem"), None).unwrap();
        let s = TcpStream::connect(addr).await.unwrap();
        let e = connect_upgrade(
            s,
            &client,
            "elsewhere.example",
            100003,
            3,
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
        assert!(e.to_string().contains("TLS handshake"), "{e}");
    }

    #[tokio::test]
    async fn a_server_without_tls_is_reported_as_not_offering_it() {
        let pki = Pki::new("plainsrv");
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut call = [0u8; PROBE_RECORD_BYTES];
            s.read_exact(&mut call).await.unwrap();
            let xid = u32::from_be_bytes(call[4..8].try_into().unwrap());
            let reply = frame(
                sluice_rpc::server::auth_error(xid, sluice_xdr::rpc::AuthStat::BADCRED),
                MAX_FRAGMENT_BYTES,
            )
            .concat();
            s.write_all(&reply).await.unwrap();
        });
        let client = ClientTls::load(&pki.p("ca.pem"), None).unwrap();
        let s = TcpStream::connect(addr).await.unwrap();
        let e = connect_upgrade(s, &client, "127.0.0.1", 100003, 3, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("does not offer RPC-with-TLS"), "{e}");
    }

    #[tokio::test]
    async fn a_plain_first_record_is_left_in_the_socket() {
        let pki = Pki::new("plain");
        let tls = pki.server(false);
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        let call = frame(
            sluice_rpc::tls::probe_call(1, 100003, 3)
                .into_iter()
                .chain([Bytes::from_static(&[0, 0, 0, 0])])
                .collect(),
            MAX_FRAGMENT_BYTES,
        )
        .concat();
        c.write_all(&call).await.unwrap();
        let Ok(Upgraded::Plain(mut s)) =
            accept_upgrade(s, Some(&tls), Duration::from_secs(5)).await
        else {
            panic!("not plain");
        };
        let mut got = vec![0u8; call.len()];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(got, call, "nothing consumed");
    }

    #[tokio::test]
    async fn garbage_or_silence_after_the_probe_costs_the_connection_only() {
        let pki = Pki::new("hostile");
        let mut tls = pki.server(false);
        tls.handshake_timeout = Duration::from_millis(300);
        let tls = Arc::new(tls);
        for garbage in [true, false] {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
            let (s, _) = l.accept().await.unwrap();
            let probe = frame(
                sluice_rpc::tls::probe_call(2, 100003, 3),
                MAX_FRAGMENT_BYTES,
            )
            .concat();
            c.write_all(&probe).await.unwrap();
            if garbage {
                c.write_all(&[0x55; 300]).await.unwrap();
            }
            let r = accept_upgrade(s, Some(&tls), Duration::from_secs(5)).await;
            let Err(e) = r else { panic!("upgraded") };
            if garbage {
                assert!(e.0.contains("TLS handshake"), "{e}");
            } else {
                assert!(e.0.contains("not finished within"), "{e}");
            }
        }
        assert_eq!(tls.stats.handshakes_failed.load(Relaxed), 2);
    }
}
