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
//! Elsewhere the record layer is ours, in user space, the same split as kernel TLS: rustls makes
//! the handshake (its unbuffered connection, driven over the socket by `handshake`), then
//! hands over the traffic secrets together with what only it can do afterwards, the key
//! schedule for KeyUpdates and the client's session store (`dangerous_into_kernel_connection`,
//! the API rustls has for kernel TLS). [`TlsStream`] then seals and opens records itself with
//! ring's AEAD, in buffers it owns (`tls_record` has the records and the messages after
//! the handshake). The reader and the writer are independent: they share the key schedule only,
//! touched at a KeyUpdate (rustls's stream, split in two, took a lock for every read and write,
//! so decrypting and encrypting took turns).
//!
//! # Reading under TLS
//! ```text
//!  socket ─recv, ≤ 256 KiB─► ciphertext buffer ─open in place─► plaintext slices ─► decoder
//!                                                                       └─copy─► AsyncRead
//! ```
//! One `recvfrom` takes as much as is there, up to `TLS_READ_BUFFER_BYTES`, and the whole
//! records in it are decrypted where they lie. The drivers read with [`ReadHalf::read_into`],
//! which hands each record's plaintext to their RPC record decoder as a `Bytes` slice of the
//! buffer it was read into: the decrypted bytes are not copied at all (a 1 MiB READ reply
//! arrives as 64 slices of 16 KiB). Through `AsyncRead` (the handshake's NULL call, tests) the
//! plaintext is copied once, into the caller's buffer. Through rustls's buffered API it was
//! copied three times (from a read buffer under rustls into rustls's, out of the record into
//! rustls's plaintext queue, out of that into the caller's buffer), about a seventh of a
//! server's CPU on a TLS WRITE load. Measured against rustls's buffered path (A/B on loopback,
//! 256 MiB sequential, NFSv3, 14 alternating reps on a loaded 2-core machine, medians): server
//! CPU on TLS WRITEs 1.52 -> 1.12 s/GiB, client CPU on TLS READs 0.71 -> 0.66 s/GiB, with the
//! one copy left then.
//!
//! # Writing under TLS
//! A write seals the caller's iovec a batch at a time (`TLS_SEND_BATCH_BYTES`, four records
//! of 16 KiB) into a batch buffer, record by record, copying the plaintext in and encrypting
//! it in place (ring's AEAD encrypts in place only; no allocation, where rustls made one per
//! record), and writes the batch out before it seals the next, so the kernel copies the
//! records into the socket while they are still in the core's cache. A READ reply written as
//! an iovec of pooled 64 KiB chunks is never gathered into one large buffer. A batch the
//! socket does not take whole waits for the next write or the flush, which send it before
//! anything more is sealed.
//!
//! # Buffers and idle connections
//! Neither buffer stays with a connection that has nothing to do. A send batch comes from a
//! pool shared by all connections (`SEND_POOL`) and goes back as soon as all of it is
//! written. The read buffer goes back to its own pool (`READ_POOL`) whenever the socket has
//! nothing and no record is begun, and is taken again (most likely the same one, for the room
//! it has left) when bytes come. Both pools are bounded (2 and 4 MiB). Before, a TLS
//! connection that had moved bulk data held a 256 KiB read and a 512 KiB send buffer for
//! life. Freeing the read buffer to the allocator at each wait instead of pooling it cost more
//! CPU than decryption (see `ReadPool`).
//!
//! Measured with `examples/tls_cpu.rs` (one connection on loopback, 1 MiB messages of
//! 64 KiB chunks, each thread's CPU time; 5 alternating reps of 512 MiB on a 2-core machine
//! at a load average of 15, medians, s/GiB), against the one 512 KiB send buffer and the
//! copy into the decoder's buffer before: sending READ replies 0.46 -> 0.38, receiving them
//! 0.45 -> 0.34; sending WRITE calls 0.36 -> 0.36, receiving them 0.36 -> 0.32. Plaintext on
//! the same harness: about 0.13 sending, 0.17 receiving. Of the sender's TLS cost, a profile
//! puts AES-GCM and the one copy into the batch at about half each.
//!
//! # Closing
//! Shutting the writer down sends `close_notify` before the FIN. A `close_notify` received
//! ends the stream; so does a FIN at a record boundary (TLS 1.3 does not require the alert),
//! while a FIN inside a record is an error.

use crate::tls_record::{
    self, Kernel, Receiver, Sender, RECORD_BYTES_MAX, RECORD_OVERHEAD_BYTES,
    RECORD_PLAINTEXT_BYTES_MAX,
};
use bytes::{Buf, Bytes, BytesMut};
use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ServerConnectionData, UnbufferedServerConnection, WebPkiClientVerifier};
use rustls::unbuffered::{
    ConnectionState, EncodeError, EncodeTlsData, UnbufferedConnectionCommon, UnbufferedStatus,
};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use sluice_rpc::record::{frame, RecordDecoder, RecordDecoderConfig, MAX_FRAGMENT_BYTES};
use sluice_rpc::tls::{check_probe_reply, is_probe, probe_call, starttls_reply};
use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// A TLS session over TCP, either end.
pub use crate::tls_session::TlsSession;

/// Ciphertext is read from the socket into buffers of this size: as large as the plaintext
/// reader's (64 KiB) and four times that, so a 1 MiB WRITE call or READ reply takes a handful
/// of `recvfrom` calls (rustls on its own asked for one record, 16 KiB, per call).
const TLS_READ_BUFFER_BYTES: usize = 256 * 1024;

/// The plaintext sealed into one batch before its records go out in one `write`: four
/// records. Batches of 64, 128 and 512 KiB measured within the noise of each other in CPU
/// per GiB (`examples/tls_cpu.rs`, loaded machine); the smallest keeps a batch in the core's
/// cache between the AEAD and the kernel's copy, and the pool small, for 16 `write` calls per
/// 1 MiB READ reply instead of 2.
const TLS_SEND_BATCH_BYTES: usize = 4 * RECORD_PLAINTEXT_BYTES_MAX;

/// A batch's buffer: its plaintext, each record's header, content type and tag, and room for
/// a KeyUpdate and a `close_notify` record.
const TLS_SEND_BATCH_CAPACITY_BYTES: usize = TLS_SEND_BATCH_BYTES
    + (TLS_SEND_BATCH_BYTES / RECORD_PLAINTEXT_BYTES_MAX + 2) * RECORD_OVERHEAD_BYTES
    + 64;

/// Send batches no connection holds: a connection takes one when it seals and gives it back
/// once every record in it is written, so an idle connection holds none and a busy one
/// reuses them without allocating.
struct BatchPool {
    free: std::sync::Mutex<Vec<Vec<u8>>>,
}

/// Read buffers no connection holds, shared by all: a connection gives its buffer back
/// whenever the socket has nothing for it and no record is begun, and takes one (most likely
/// its own) when bytes come. A buffer here may still be shared with plaintext handed out of
/// it (records are opened in place and handed on without a copy): it is taken for the room
/// left after that plaintext, or whole again once the plaintext is dropped (`try_reclaim`).
/// So an idle connection holds no read buffer, and a busy one does not allocate a buffer per
/// wait for the socket: freeing and allocating 256 KiB that often (the allocator's `munmap`
/// and page faults, and the TLB shootdowns they send to the other threads) cost more CPU per
/// GiB than the decryption, measured with `examples/tls_cpu.rs`.
struct ReadPool {
    free: std::sync::Mutex<VecDeque<BytesMut>>,
}

/// The most read buffers the pool keeps (4 MiB): past that the oldest is dropped.
const READ_POOL_FREE_MAX: usize = 16;

static READ_POOL: ReadPool = ReadPool {
    free: std::sync::Mutex::new(VecDeque::new()),
};

impl ReadPool {
    fn free(&self) -> std::sync::MutexGuard<'_, VecDeque<BytesMut>> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A buffer with at least `room_bytes` of room, the newest given back first.
    fn take(&self, room_bytes: usize) -> BytesMut {
        let mut free = self.free();
        let usable = free.iter_mut().rev().position(|b| {
            b.capacity() - b.len() >= room_bytes || b.try_reclaim(TLS_READ_BUFFER_BYTES)
        });
        if let Some(from_back) = usable {
            let at = free.len() - 1 - from_back;
            if let Some(b) = free.remove(at) {
                if b.capacity() - b.len() >= room_bytes {
                    return b;
                }
            }
        }
        drop(free);
        BytesMut::with_capacity(TLS_READ_BUFFER_BYTES.max(room_bytes))
    }

    fn give(&self, b: BytesMut) {
        if b.capacity() == 0 {
            return;
        }
        debug_assert!(b.is_empty());
        let mut free = self.free();
        if free.len() == READ_POOL_FREE_MAX {
            free.pop_front();
        }
        free.push_back(b);
    }
}

/// The most batches the pool keeps free (2 MiB): past that a batch given back is freed.
const SEND_POOL_FREE_MAX: usize = 32;

static SEND_POOL: BatchPool = BatchPool {
    free: std::sync::Mutex::new(Vec::new()),
};

impl BatchPool {
    fn free(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self) -> Vec<u8> {
        let b = self.free().pop();
        b.unwrap_or_else(|| Vec::with_capacity(TLS_SEND_BATCH_CAPACITY_BYTES))
    }

    fn give(&self, mut b: Vec<u8>) {
        b.clear();
        let mut free = self.free();
        if free.len() < SEND_POOL_FREE_MAX {
            free.push(b);
        }
    }
}

/// The most the handshake may buffer from the peer: a flight with a certificate chain is a
/// few KiB; rustls reassembles handshake messages of up to 64 KiB in this buffer.
const HANDSHAKE_BUFFER_BYTES_MAX: usize = 256 * 1024;

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
    let mut conn = UnbufferedServerConnection::new(tls.config())
        .map_err(|e| HandshakeError(format!("TLS handshake: {e}")))?;
    let mut stream = stream;
    let (ciphertext, plaintext) = handshake(&mut conn, &mut stream)
        .await
        .map_err(|e| HandshakeError(format!("TLS handshake: {e}")))?;
    let verified = conn.peer_certificates().is_some();
    let session = TlsSession::of(&conn, false);
    let (secrets, kernel) = conn
        .dangerous_into_kernel_connection()
        .map_err(|e| HandshakeError(format!("TLS handshake: taking the keys: {e}")))?;
    let tls_stream = TlsStream::new(
        stream,
        secrets,
        Kernel::Server(kernel),
        ciphertext,
        plaintext,
        session,
    )
    .map_err(|e| HandshakeError(format!("TLS handshake: {e}")))?;
    tls.stats.handshakes.fetch_add(1, Relaxed);
    if verified {
        tls.stats.peers_verified.fetch_add(1, Relaxed);
    }
    Ok(Upgraded::Tls(
        Box::new(tls_stream),
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
        let mut config = match identity {
            Some((cert, key)) => builder
                .with_client_auth_cert(certs(cert)?, private_key(key)?)
                .map_err(|e| bad_file(cert, e))?,
            None => builder.with_no_client_auth(),
        };
        // As the server's (see `server_config`).
        config.enable_secret_extraction = true;
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

/// The client's handshake through rustls, after the probe; the record layer is then ours
/// (see "The data path under TLS" above).
async fn rustls_connect(
    mut stream: TcpStream,
    tls: &ClientTls,
    name: ServerName<'static>,
    prog: u32,
    vers: u32,
) -> io::Result<TlsStream> {
    let handshake_failed = |e: &dyn fmt::Display| {
        io::Error::new(
            io::ErrorKind::ConnectionAborted,
            format!("TLS handshake: {e}"),
        )
    };
    let mut conn = UnbufferedClientConnection::new(tls.config.clone(), name)
        .map_err(|e| handshake_failed(&e))?;
    let (ciphertext, plaintext) = handshake(&mut conn, &mut stream)
        .await
        .map_err(|e| handshake_failed(&e))?;
    let session = TlsSession::of(&conn, false);
    let (secrets, kernel) = conn
        .dangerous_into_kernel_connection()
        .map_err(|e| handshake_failed(&e))?;
    let mut s = TlsStream::new(
        stream,
        secrets,
        Kernel::Client(kernel),
        ciphertext,
        plaintext,
        session,
    )?;
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

// --- the handshake ---------------------------------------------------------------------------

/// The two sides of rustls's unbuffered connection, for [`handshake`].
trait Side: Sized {
    fn process<'c, 'i>(
        conn: &'c mut UnbufferedConnectionCommon<Self>,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self>;
}

impl Side for ServerConnectionData {
    fn process<'c, 'i>(
        conn: &'c mut UnbufferedConnectionCommon<Self>,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self> {
        conn.process_tls_records(incoming)
    }
}

impl Side for ClientConnectionData {
    fn process<'c, 'i>(
        conn: &'c mut UnbufferedConnectionCommon<Self>,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self> {
        conn.process_tls_records(incoming)
    }
}

/// What the handshake loop does next.
enum Step {
    Again,
    Send,
    Receive,
    /// rustls may send application data: done unless the handshake is still going (a
    /// server waits for the client's Finished).
    Traffic,
    Failed(rustls::Error),
    Closed,
}

/// Drives rustls's unbuffered connection through the handshake on `tcp`. Returns the bytes
/// read past it (records the peer sent after its Finished) and any application data rustls
/// already decrypted from them; the connection is then ready for
/// `dangerous_into_kernel_connection` (handshake over, nothing left to send).
async fn handshake<D: Side>(
    conn: &mut UnbufferedConnectionCommon<D>,
    tcp: &mut TcpStream,
) -> Result<(BytesMut, Vec<u8>), String> {
    let mut incoming = BytesMut::new();
    let mut outgoing: Vec<u8> = Vec::new();
    let mut plaintext: Vec<u8> = Vec::new();
    loop {
        let UnbufferedStatus { mut discard, state } = D::process(conn, &mut incoming);
        let step = match state {
            Ok(ConnectionState::EncodeTlsData(mut e)) => {
                encode(&mut e, &mut outgoing)?;
                Step::Again
            }
            Ok(ConnectionState::TransmitTlsData(t)) => {
                // Sent right below, before rustls is asked anything else.
                t.done();
                Step::Send
            }
            Ok(ConnectionState::BlockedHandshake) => Step::Receive,
            Ok(ConnectionState::WriteTraffic(_)) => Step::Traffic,
            Ok(ConnectionState::ReadTraffic(mut r)) => {
                // The client's first call can come with its Finished.
                while let Some(record) = r.next_record() {
                    let record = record.map_err(|e| e.to_string())?;
                    discard += record.discard;
                    plaintext.extend_from_slice(record.payload);
                }
                Step::Again
            }
            Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => Step::Closed,
            Ok(other) => return Err(format!("unexpected state {other:?}")),
            Err(e) => Step::Failed(e),
        };
        incoming.advance(discard);
        match step {
            Step::Again => {}
            Step::Send => {
                tcp.write_all(&outgoing)
                    .await
                    .map_err(|e| format!("sending: {e}"))?;
                outgoing.clear();
            }
            Step::Traffic if !conn.is_handshaking() => break,
            Step::Receive | Step::Traffic => {
                if incoming.len() >= HANDSHAKE_BUFFER_BYTES_MAX {
                    return Err("handshake messages too long".into());
                }
                incoming.reserve(RECORD_BYTES_MAX);
                let n = tcp
                    .read_buf(&mut incoming)
                    .await
                    .map_err(|e| format!("receiving: {e}"))?;
                if n == 0 {
                    return Err("the peer closed the connection".into());
                }
            }
            Step::Closed => return Err("the peer closed the connection".into()),
            Step::Failed(e) => {
                send_alert(conn, &mut incoming, tcp).await;
                return Err(e.to_string());
            }
        }
    }
    Ok((incoming, plaintext))
}

/// Appends the record rustls has for the peer to `out`.
fn encode<D>(e: &mut EncodeTlsData<'_, D>, out: &mut Vec<u8>) -> Result<(), String> {
    let mut room = 4096;
    loop {
        let used = out.len();
        out.resize(used + room, 0);
        match e.encode(&mut out[used..]) {
            Ok(n) => {
                out.truncate(used + n);
                return Ok(());
            }
            Err(EncodeError::InsufficientSize(s)) => {
                out.truncate(used);
                room = s.required_size;
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// After a failed handshake: the alert rustls queued for the peer, if any, best effort.
/// rustls hands out what it queued before it looks at `incoming` again (the handshake's
/// buffer, which it may still point into); it is asked once only, as asking again would
/// make it process the bytes that failed a second time.
async fn send_alert<D: Side>(
    conn: &mut UnbufferedConnectionCommon<D>,
    incoming: &mut BytesMut,
    tcp: &mut TcpStream,
) {
    let mut out = Vec::new();
    let queued = match D::process(conn, incoming).state {
        Ok(ConnectionState::EncodeTlsData(mut e)) => encode(&mut e, &mut out).is_ok(),
        _ => false,
    };
    if queued {
        let _ = tcp.write_all(&out).await;
    }
}

// --- the record layer on the socket ----------------------------------------------------------

/// The receiving side of a TLS connection: ciphertext read into a buffer of ours, opened in
/// place ([`tls_record`]), the plaintext handed out from where it lies.
struct ReadSide {
    rx: Receiver,
    /// Bytes read and not yet opened: a record's head first. From [`READ_POOL`], and back
    /// there (leaving this empty, no capacity) while the socket has nothing.
    ciphertext: BytesMut,
    /// Plaintext opened and not yet handed out, in order: slices of earlier ciphertext buffers.
    plaintext: VecDeque<Bytes>,
    /// Scratch for [`Receiver::open_records`].
    ranges: Vec<Range<usize>>,
    /// The peer sent `close_notify` or closed TCP at a record boundary.
    end: bool,
    /// The last read from the socket filled all the room it had: more was likely waiting.
    full: bool,
}

impl ReadSide {
    /// Ready when plaintext waits or the stream ended.
    fn poll_fill<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.plaintext.is_empty() || self.end {
                return Poll::Ready(Ok(()));
            }
            if !self.ciphertext.is_empty() {
                self.ranges.clear();
                let got = self
                    .rx
                    .open_records(&mut self.ciphertext, &mut self.ranges)?;
                if got.consumed > 0 {
                    let opened = self.ciphertext.split_to(got.consumed).freeze();
                    for r in self.ranges.drain(..) {
                        self.plaintext.push_back(opened.slice(r));
                    }
                }
                self.end = got.end;
                if !self.plaintext.is_empty() || self.end {
                    continue;
                }
            }
            if self.ciphertext.capacity() - self.ciphertext.len() < RECORD_BYTES_MAX {
                // A buffer with room for a whole record more, the record begun moved in.
                let mut fresh = READ_POOL.take(self.ciphertext.len() + RECORD_BYTES_MAX);
                fresh.extend_from_slice(&self.ciphertext);
                let mut old = std::mem::replace(&mut self.ciphertext, fresh);
                old.clear();
                READ_POOL.give(old);
            }
            let spare = self.ciphertext.spare_capacity_mut();
            let room = spare.len();
            let mut rb = ReadBuf::uninit(spare);
            if Pin::new(&mut *io).poll_read(cx, &mut rb)?.is_pending() {
                if self.ciphertext.is_empty() {
                    // Nothing to read and no record begun: the buffer goes back to the pool
                    // until there is.
                    READ_POOL.give(std::mem::take(&mut self.ciphertext));
                }
                return Poll::Pending;
            }
            let n = rb.filled().len();
            self.full = n == room;
            if n == 0 {
                if self.ciphertext.is_empty() {
                    // TLS 1.3 does not require close_notify before the FIN; a record cut
                    // short is another matter.
                    self.end = true;
                    continue;
                }
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "TLS: the peer closed the connection inside a record",
                )));
            }
            // SAFETY: `poll_read` initialized the first `n` bytes of the spare capacity.
            unsafe { self.ciphertext.set_len(self.ciphertext.len() + n) };
        }
    }

    /// Hands the plaintext opened to `decoder` as it lies, in the buffers it was read into.
    fn poll_read_into<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        cx: &mut Context<'_>,
        decoder: &mut RecordDecoder,
    ) -> Poll<io::Result<ReadInto>> {
        ready!(self.poll_fill(io, cx))?;
        let mut bytes = 0;
        for b in self.plaintext.drain(..) {
            bytes += b.len();
            decoder.push(b);
        }
        Poll::Ready(Ok(ReadInto {
            bytes,
            full: self.full,
        }))
    }

    /// Bytes of buffer held (capacity), for the tests of the release when idle.
    #[cfg(test)]
    fn buffer_bytes(&self) -> usize {
        self.ciphertext.capacity()
    }

    fn poll_read<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        ready!(self.poll_fill(io, cx))?;
        while buf.remaining() > 0 {
            let Some(front) = self.plaintext.front_mut() else {
                break;
            };
            let n = front.len().min(buf.remaining());
            buf.put_slice(&front[..n]);
            front.advance(n);
            if front.is_empty() {
                self.plaintext.pop_front();
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// The sending side: plaintext sealed a batch at a time into a buffer from [`SEND_POOL`],
/// written from there.
struct WriteSide {
    tx: Sender,
    /// Records sealed; `out[sent..]` not yet written. A batch from the pool while it holds
    /// records not yet all written, empty (no allocation) otherwise.
    out: Vec<u8>,
    sent: usize,
    closing: bool,
}

impl WriteSide {
    /// The batch to seal into (`out`), from the pool if the connection holds none.
    fn batch(out: &mut Vec<u8>) -> &mut Vec<u8> {
        if out.capacity() == 0 {
            *out = SEND_POOL.take();
        }
        out
    }

    /// Writes what is sealed; ready when all of it is out, and the batch then goes back to
    /// the pool.
    fn poll_send<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        while self.sent < self.out.len() {
            let n = ready!(Pin::new(&mut *io).poll_write(cx, &self.out[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        if self.out.capacity() > 0 {
            SEND_POOL.give(std::mem::take(&mut self.out));
        }
        self.sent = 0;
        Poll::Ready(Ok(()))
    }

    fn poll_write<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        // What was sealed before goes out first, so records are sealed into an empty batch
        // only: no compaction, no growth past one batch, and no trickle of small seals while
        // the socket is full (the socket's own buffer keeps the wire busy while the next
        // batch is sealed).
        ready!(self.poll_send(io, cx))?;
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let mut taken = 0;
        while taken < total {
            let out = Self::batch(&mut self.out);
            taken += self.tx.seal(bufs, taken, TLS_SEND_BATCH_BYTES, out)?;
            // Out now while it is in the cache; if the socket is full the rest of the batch
            // waits for the next write or the flush.
            match self.poll_send(io, cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => break,
            }
        }
        Poll::Ready(Ok(taken))
    }

    fn poll_flush<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        ready!(self.poll_send(io, cx))?;
        Pin::new(io).poll_flush(cx)
    }

    /// `close_notify`, then the FIN.
    fn poll_shutdown<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.closing {
            self.closing = true;
            self.tx.close_notify(Self::batch(&mut self.out))?;
        }
        ready!(self.poll_send(io, cx))?;
        Pin::new(io).poll_shutdown(cx)
    }
}

/// A TCP connection under TLS whose record layer is ours (see the module docs): rustls made
/// the handshake and keeps the key schedule.
pub struct TlsStream {
    tcp: TcpStream,
    // Boxed: a key schedule is about half a KiB, and the halves sit in the drivers' enums.
    rd: Box<ReadSide>,
    wr: Box<WriteSide>,
    session: TlsSession,
}

impl TlsStream {
    /// After the handshake: `ciphertext` read past it, `plaintext` rustls decrypted of that.
    fn new(
        tcp: TcpStream,
        secrets: rustls::ExtractedSecrets,
        kernel: Kernel,
        ciphertext: BytesMut,
        plaintext: Vec<u8>,
        session: TlsSession,
    ) -> io::Result<TlsStream> {
        let (rx, tx) = tls_record::record_layer(secrets, kernel)?;
        let mut early = VecDeque::new();
        if !plaintext.is_empty() {
            early.push_back(Bytes::from(plaintext));
        }
        Ok(TlsStream {
            tcp,
            rd: Box::new(ReadSide {
                rx,
                ciphertext,
                plaintext: early,
                ranges: Vec::new(),
                end: false,
                full: false,
            }),
            wr: Box::new(WriteSide {
                tx,
                out: Vec::new(),
                sent: 0,
                closing: false,
            }),
            session,
        })
    }

    /// What the handshake agreed on.
    pub fn session(&self) -> TlsSession {
        self.session
    }

    /// The TCP socket underneath.
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// Reader and writer, usable from two tasks: they share nothing but the key schedule
    /// (touched at a KeyUpdate only).
    pub fn into_split(self) -> (TlsReadHalf, TlsWriteHalf) {
        let (r, w) = self.tcp.into_split();
        (
            TlsReadHalf { io: r, rd: self.rd },
            TlsWriteHalf { io: w, wr: self.wr },
        )
    }
}

impl fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsStream")
            .field("tcp", &self.tcp)
            .field("session", &self.session)
            .finish()
    }
}

impl AsyncRead for TlsStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.rd.poll_read(&mut this.tcp, cx, buf)
    }
}

impl AsyncWrite for TlsStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.wr
            .poll_write(&mut this.tcp, cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.wr.poll_write(&mut this.tcp, cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.wr.poll_flush(&mut this.tcp, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.wr.poll_shutdown(&mut this.tcp, cx)
    }
}

/// The reading half of a [`TlsStream`].
pub struct TlsReadHalf {
    io: OwnedReadHalf,
    rd: Box<ReadSide>,
}

impl AsyncRead for TlsReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.rd.poll_read(&mut this.io, cx, buf)
    }
}

/// The writing half of a [`TlsStream`]: what is written is sealed into records at once and
/// may wait in its buffer until a flush.
pub struct TlsWriteHalf {
    io: OwnedWriteHalf,
    wr: Box<WriteSide>,
}

impl AsyncWrite for TlsWriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.wr
            .poll_write(&mut this.io, cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.wr.poll_write(&mut this.io, cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.wr.poll_flush(&mut this.io, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.wr.poll_shutdown(&mut this.io, cx)
    }
}

// --- what the drivers use --------------------------------------------------------------------

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
            Stream::Tls(t) => Some(t.session()),
            Stream::Ktls(k) => Some(k.session()),
        }
    }

    /// The TCP socket underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => t.tcp(),
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
                let (r, w) = t.into_split();
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
    Tls(TlsReadHalf),
    Ktls(crate::ktls::KtlsReadHalf),
}

/// What one [`ReadHalf::read_into`] took in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadInto {
    /// Bytes handed to the decoder; 0 at the end of the stream.
    pub bytes: usize,
    /// The read from the socket filled all the room it had: more was likely waiting.
    pub full: bool,
}

impl ReadHalf {
    /// Reads what the socket has and hands it to `decoder` as `Bytes`, copied nowhere:
    /// plaintext is read into `buf` (given `chunk_bytes` more room whenever less than
    /// `room_min_bytes` is left) and cut off it; under TLS in user space the records are
    /// opened where they were read, and their plaintext goes to the decoder from there
    /// (`buf` is then not used). Cancel safe, as `read_buf` is.
    pub async fn read_into(
        &mut self,
        decoder: &mut RecordDecoder,
        buf: &mut BytesMut,
        room_min_bytes: usize,
        chunk_bytes: usize,
    ) -> io::Result<ReadInto> {
        std::future::poll_fn(|cx| match self {
            ReadHalf::Tls(r) => r.rd.poll_read_into(&mut r.io, cx, decoder),
            ReadHalf::Plain(r) => poll_read_chunk(r, cx, decoder, buf, room_min_bytes, chunk_bytes),
            ReadHalf::Ktls(r) => poll_read_chunk(r, cx, decoder, buf, room_min_bytes, chunk_bytes),
        })
        .await
    }
}

/// One read into `buf`'s spare room, cut off and handed to `decoder`.
fn poll_read_chunk<R: AsyncRead + Unpin>(
    r: &mut R,
    cx: &mut Context<'_>,
    decoder: &mut RecordDecoder,
    buf: &mut BytesMut,
    room_min_bytes: usize,
    chunk_bytes: usize,
) -> Poll<io::Result<ReadInto>> {
    if buf.capacity() - buf.len() < room_min_bytes {
        buf.reserve(chunk_bytes);
    }
    let spare = buf.spare_capacity_mut();
    let room = spare.len();
    let mut rb = ReadBuf::uninit(spare);
    ready!(Pin::new(r).poll_read(cx, &mut rb))?;
    let n = rb.filled().len();
    // SAFETY: `poll_read` initialized the first `n` bytes of the spare capacity.
    unsafe { buf.set_len(buf.len() + n) };
    if n > 0 {
        decoder.push(buf.split().freeze());
    }
    Poll::Ready(Ok(ReadInto {
        bytes: n,
        full: n == room,
    }))
}

/// The writing half of a [`Stream`]. Under TLS, bytes written may wait in the connection's
/// send buffer until a flush: writers flush after each batch.
pub enum WriteHalf {
    Plain(OwnedWriteHalf),
    Tls(TlsWriteHalf),
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
    let mut config = builder
        .with_single_cert(certs(&files.cert)?, private_key(&files.key)?)
        .map_err(|e| bad_file(&files.key, e))?;
    // The record layer after the handshake is ours (or the kernel's): rustls hands over the
    // traffic secrets.
    config.enable_secret_extraction = true;
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

    /// A server that upgrades one connection and echoes what it reads until the client's
    /// close_notify, then closes with its own. `key_update_every`: its key moves on that often.
    async fn bulk_echo_server(
        tls: Arc<ServerTls>,
        key_update_every: Option<u64>,
    ) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            let Ok(Upgraded::Tls(mut t, _)) =
                accept_upgrade(s, Some(&tls), Duration::from_secs(5)).await
            else {
                panic!("not upgraded")
            };
            if let Some(n) = key_update_every {
                t.wr.tx.key_update_every(n);
            }
            let (mut r, mut w) = Stream::Tls(t).into_split();
            let mut buf = vec![0u8; 100_000];
            loop {
                let n = r.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                w.write_all(&buf[..n]).await.unwrap();
                w.flush().await.unwrap();
            }
            w.shutdown().await.unwrap();
        });
        (addr, task)
    }

    fn pattern(bytes: usize, salt: u32) -> Vec<u8> {
        (0..bytes as u32)
            .map(|i| (i.wrapping_mul(7) ^ (i >> 9) ^ salt) as u8)
            .collect()
    }

    /// Writes `data` through `w` in uneven vectored writes, then closes (close_notify).
    async fn write_unevenly<W: AsyncWrite + Unpin>(mut w: W, data: Vec<u8>) {
        let mut at = 0;
        let mut k = 1usize;
        while at < data.len() {
            let a = (at + (k * 7919) % 70_000 + 1).min(data.len());
            let b = (a + (k * 104_729) % 40_000).min(data.len());
            let slices = [
                io::IoSlice::new(&data[at..a]),
                io::IoSlice::new(&data[a..b]),
            ];
            at += w.write_vectored(&slices).await.unwrap();
            k += 1;
        }
        w.flush().await.unwrap();
        w.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bulk_data_flows_both_ways_through_key_updates_and_close_notify() {
        let pki = Pki::new("bulk");
        let tls = Arc::new(pki.server(false));
        // The server's key moves on every 3 records, the client's every 2.
        let (addr, server) = bulk_echo_server(tls, Some(3)).await;
        let client = ClientTls::load(&pki.p("ca.pem"), None).unwrap();
        let s = TcpStream::connect(addr).await.unwrap();
        let mut t = connect_upgrade(s, &client, "127.0.0.1", 100003, 3, Duration::from_secs(5))
            .await
            .unwrap();
        t.wr.tx.key_update_every(2);
        let (mut r, w) = t.into_split();
        let data = pattern(3_000_000, 1);
        let writer = tokio::spawn(write_unevenly(w, data.clone()));
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        writer.await.unwrap();
        server.await.unwrap();
        assert_eq!(got.len(), data.len());
        assert!(got == data, "the echo differs");
    }

    /// After bulk data both ways, a connection with nothing to read or send holds no
    /// buffer: the send batch goes back to the pool once written, the read buffer when the
    /// socket has nothing and no record is begun (the poll that finds it so is the idle event:
    /// no sleeping). And the records were handed to a decoder without a copy.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_connection_holds_no_buffers_after_bulk_data() {
        let pki = Pki::new("idle");
        let tls = Arc::new(pki.server(false));
        let (addr, server) = bulk_echo_server(tls, None).await;
        let client = ClientTls::load(&pki.p("ca.pem"), None).unwrap();
        let s = TcpStream::connect(addr).await.unwrap();
        let t = connect_upgrade(s, &client, "127.0.0.1", 100003, 3, Duration::from_secs(5))
            .await
            .unwrap();
        let (mut r, mut w) = t.into_split();
        // One RPC record of 2 MB, echoed back whole.
        let body = pattern(2_000_000, 3);
        let record = frame(vec![Bytes::from(body.clone())], MAX_FRAGMENT_BYTES).concat();
        let mut decoder = RecordDecoder::new(RecordDecoderConfig {
            max_record_bytes: 4_000_000,
            ..RecordDecoderConfig::default()
        });
        let mut rd = ReadHalf::Tls(r);
        let mut buf = BytesMut::new();
        let write = async {
            w.write_all(&record).await.unwrap();
            w.flush().await.unwrap();
        };
        let read = async {
            loop {
                if let Some(got) = decoder.next_record().unwrap() {
                    return got;
                }
                let n = rd.read_into(&mut decoder, &mut buf, 1, 1).await.unwrap();
                assert!(n.bytes > 0, "the echo ended early");
            }
        };
        let ((), got) = tokio::join!(write, read);
        assert!(got.concat() == body, "the echo differs");
        assert!(got.len() > 1, "handed over in the records' slices");
        assert_eq!(
            buf.capacity(),
            0,
            "the plaintext buffer is not used under TLS"
        );
        // All of it written: the send batch is back in the pool.
        assert_eq!(w.wr.out.capacity(), 0);
        let ReadHalf::Tls(r2) = rd else {
            unreachable!()
        };
        r = r2;
        // One small echo: the read side holds a buffer with room for a record.
        w.write_all(b"x").await.unwrap();
        w.flush().await.unwrap();
        let mut x = [0u8; 1];
        r.read_exact(&mut x).await.unwrap();
        assert!(r.rd.buffer_bytes() >= RECORD_BYTES_MAX - 64);
        // The server sends nothing more: the next poll finds the socket empty.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut one = [0u8; 1];
        let mut rb = ReadBuf::new(&mut one);
        assert!(Pin::new(&mut r).poll_read(&mut cx, &mut rb).is_pending());
        assert_eq!(
            r.rd.buffer_bytes(),
            0,
            "the read buffer went back to the pool"
        );
        w.shutdown().await.unwrap();
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        server.await.unwrap();
    }

    #[test]
    fn the_read_pool_hands_out_room_and_reclaims_what_is_no_longer_shared() {
        let pool = ReadPool {
            free: std::sync::Mutex::new(VecDeque::new()),
        };
        let mut b = pool.take(RECORD_BYTES_MAX);
        assert!(b.capacity() >= TLS_READ_BUFFER_BYTES);
        b.extend_from_slice(&vec![7u8; TLS_READ_BUFFER_BYTES - 100]);
        let handed_out = b.split().freeze();
        pool.give(b);
        // Shared with plaintext still in use, and too little room left: a new one, and the
        // first stays in the pool.
        let c = pool.take(RECORD_BYTES_MAX);
        assert!(c.capacity() >= TLS_READ_BUFFER_BYTES);
        assert_eq!(pool.free().len(), 1);
        // Its room left is taken as it is.
        let b = pool.take(50);
        assert_eq!(b.capacity(), 100);
        pool.give(b);
        // The plaintext dropped: the buffer is whole again.
        drop(handed_out);
        let d = pool.take(TLS_READ_BUFFER_BYTES);
        assert!(d.capacity() >= TLS_READ_BUFFER_BYTES);
        assert!(pool.free().is_empty());
        for _ in 0..READ_POOL_FREE_MAX + 3 {
            pool.give(BytesMut::with_capacity(10));
        }
        assert_eq!(pool.free().len(), READ_POOL_FREE_MAX, "bounded");
    }

    /// Our server against rustls's own record layer (tokio-rustls, buffered) as the client,
    /// which asks for a KeyUpdate between rounds (update_requested: ours must follow).
    #[tokio::test]
    async fn a_rustls_client_interoperates_through_key_updates() {
        let pki = Pki::new("rustlscli");
        let tls = Arc::new(pki.server(false));
        let (addr, server) = bulk_echo_server(tls, None).await;
        let client = ClientTls::load(&pki.p("ca.pem"), None).unwrap();
        let mut s = TcpStream::connect(addr).await.unwrap();
        probe(&mut s, 100003, 3).await.unwrap();
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let mut t = tokio_rustls::TlsConnector::from(client.config.clone())
            .connect(name, s)
            .await
            .unwrap();
        for round in 0..6 {
            let chunk = pattern(200_000, round);
            t.write_all(&chunk).await.unwrap();
            t.flush().await.unwrap();
            let mut back = vec![0u8; chunk.len()];
            t.read_exact(&mut back).await.unwrap();
            assert!(back == chunk, "round {round}");
            t.get_mut().1.refresh_traffic_keys().unwrap();
        }
        t.shutdown().await.unwrap();
        let mut rest = Vec::new();
        t.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        server.await.unwrap();
    }

    /// Our client against a rustls server (buffered): it takes the server's session tickets
    /// (the second connection resumes) and follows its KeyUpdates.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn our_client_takes_a_rustls_servers_tickets_and_key_updates() {
        let pki = Pki::new("rustlssrv");
        let config = server_config(&ServerTlsFiles {
            cert: pki.p("server.pem"),
            key: pki.p("server.key"),
            client_ca: None,
        })
        .unwrap();
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let mut kinds = Vec::new();
            for _ in 0..2 {
                let (mut s, _) = l.accept().await.unwrap();
                let mut call = [0u8; PROBE_RECORD_BYTES];
                s.read_exact(&mut call).await.unwrap();
                let xid = is_probe(&[Bytes::copy_from_slice(&call[4..])]).unwrap();
                s.write_all(&frame(starttls_reply(xid), MAX_FRAGMENT_BYTES).concat())
                    .await
                    .unwrap();
                let mut t = tokio_rustls::TlsAcceptor::from(config.clone())
                    .accept(s)
                    .await
                    .unwrap();
                kinds.push(t.get_ref().1.handshake_kind());
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = t.read(&mut buf).await.unwrap();
                    if n == 0 {
                        break;
                    }
                    t.get_mut().1.refresh_traffic_keys().unwrap();
                    t.write_all(&buf[..n]).await.unwrap();
                    t.flush().await.unwrap();
                }
                t.shutdown().await.unwrap();
            }
            kinds
        });
        let client = ClientTls::load(&pki.p("ca.pem"), None).unwrap();
        for round in 0..2 {
            let s = TcpStream::connect(addr).await.unwrap();
            let t = connect_upgrade(s, &client, "127.0.0.1", 100003, 3, Duration::from_secs(5))
                .await
                .unwrap();
            let (mut r, w) = t.into_split();
            let data = pattern(1_000_000, round);
            let writer = tokio::spawn(write_unevenly(w, data.clone()));
            let mut got = Vec::new();
            r.read_to_end(&mut got).await.unwrap();
            writer.await.unwrap();
            assert!(got == data, "round {round}");
        }
        use rustls::HandshakeKind::{Full, Resumed};
        assert_eq!(server.await.unwrap(), [Some(Full), Some(Resumed)]);
    }
}
