//! Kernel TLS (kTLS) for RPC-with-TLS connections, the server's ([`accept`]) and the client's
//! ([`connect`], through `tls::connect_upgrade_stream`): rustls makes the handshake, the kernel
//! does the record layer afterwards, so the connection is a plain socket again to the code
//! above it, and the server's READ replies keep going by `splice` (file → pipe → socket; the
//! kernel encrypts the pages on their way out).
//!
//! ```text
//!  accept_upgrade ─► probe, STARTTLS ─► ktls::accept(stream, config)
//!     setsockopt(TCP_ULP, "tls") refused (no `tls` module, SLUICE_KTLS=0)
//!        └─► Ok(Err(stream)): the rustls path, as before (logged once: "kernel TLS unavailable")
//!     accepted ─► handshake through a Corked socket (reads stop at record boundaries)
//!        ─► rustls's output flushed ─► keys extracted ─► setsockopt(SOL_TLS, TLS_TX / TLS_RX)
//!        └─► Ok(Ok(KtlsStream)): plaintext at the socket API, records made by the kernel
//! ```
//!
//! # No byte lost at the switch
//! Whatever rustls has read from the socket but not decrypted when the keys move to the kernel
//! would be lost: the kernel starts at the socket's receive queue. So the handshake reads the
//! socket through [`Corked`], which never hands rustls more than the rest of the TLS record it
//! is in (five header bytes, then exactly the record's body), and the handshake ends at the
//! client's Finished, the last byte rustls asked for. A record the client sent right after
//! (its first RPC call) is still in the socket and the kernel decrypts it. Any plaintext rustls
//! nevertheless holds is carried into the stream and read first. In the other direction rustls
//! may have records queued (NewSessionTickets are switched off for these connections:
//! `send_tls13_tickets = 0`, since resumption is not worth a ticket that rustls would have to
//! send after the keys left it); whatever is queued is written before `TLS_TX`.
//!
//! # What the kernel hands up besides data
//! A record that is not application data (an alert, a KeyUpdate) arrives from `recvmsg` alone,
//! with its type in a `TLS_GET_RECORD_TYPE` control message. A `close_notify` alert reads as
//! end of stream; a NewSessionTicket (which a rustls server sends a client after the
//! handshake) is skipped, as this client does not resume; any other alert, and any other
//! handshake message, fails the read with a reason that the driver logs as it closes the
//! connection: a KeyUpdate would need new receive keys that only rustls could derive, and
//! rustls let go of the session. Decryption failures come back from the kernel as `EBADMSG`
//! and close the connection the same way. Nothing is sent on close but the TCP FIN: TLS 1.3
//! does not require a `close_notify` before it.
//!
//! # Switch
//! `SLUICE_KTLS=0` in the environment keeps every connection of that process on rustls,
//! server or client (to compare the two paths on a kernel that has the module). Which path a
//! server's connection took is in its log ("connection upgraded to TLS (kernel TLS)" or
//! "(rustls)"), in [`TlsPeer::kernel`](crate::tls::TlsPeer) and in `sluice stats` (counter
//! [`KtlsStats::connections`]).

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ConnectionTrafficSecrets, ServerConfig};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tracing::{debug, info};

/// `TCP_ULP` from `<linux/tcp.h>` (libc does not name it).
const TCP_ULP: libc::c_int = 31;
/// From `<linux/tls.h>`.
const TLS_TX: libc::c_int = 1;
const TLS_RX: libc::c_int = 2;
const TLS_GET_RECORD_TYPE: libc::c_int = 2;
const TLS_1_3_VERSION: u16 = 0x0304;
const TLS_CIPHER_AES_GCM_128: u16 = 51;
const TLS_CIPHER_AES_GCM_256: u16 = 52;
const TLS_CIPHER_CHACHA20_POLY1305: u16 = 54;

/// TLS record content types (RFC 8446 §5.1).
const RECORD_ALERT: u8 = 21;
const RECORD_HANDSHAKE: u8 = 22;
const RECORD_APPLICATION_DATA: u8 = 23;
/// The most plaintext one TLS record carries (RFC 8446 §5.1).
const RECORD_PLAINTEXT_BYTES_MAX: usize = 16 * 1024;
/// A read with less room than this goes through a buffer of a whole record: a record that is
/// not data (a session ticket, an alert) must be read whole to be told apart, and the record
/// mark reads of the RPC layer ask for a few bytes at a time.
const SMALL_READ_BYTES: usize = 4096;
/// Handshake message types (RFC 8446 §4) that may follow the handshake.
const HANDSHAKE_NEW_SESSION_TICKET: u8 = 4;
const HANDSHAKE_KEY_UPDATE: u8 = 24;
/// The bytes of a TLS record header: type, legacy version (2), length (2).
const RECORD_HEADER_BYTES: usize = 5;

/// What the server counted about kernel TLS.
#[derive(Debug, Default)]
pub struct KtlsStats {
    /// Connections whose record layer went to the kernel after the handshake.
    pub connections: AtomicU64,
}

/// Whether kernel TLS is to be tried: not with `SLUICE_KTLS=0`.
fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("SLUICE_KTLS").map_or(true, |v| v != "0"))
}

/// Logs once per process why connections stay on rustls: at info in a server (whose operator
/// wants to know which path its connections take), at debug in a client command (where a line
/// on every `sluice cp` would be noise).
fn unavailable(server: bool, reason: &str) {
    static LOGGED: AtomicBool = AtomicBool::new(false);
    if !LOGGED.swap(true, Relaxed) {
        if server {
            info!("kernel TLS unavailable: {reason}; TLS connections use rustls");
        } else {
            debug!("kernel TLS unavailable: {reason}; TLS connections use rustls");
        }
    }
}

/// The server's handshake with kernel TLS, after STARTTLS was sent. `Ok(Err(stream))`: the
/// kernel has no TLS (or it is switched off), nothing was read or written, and the caller
/// goes on with rustls. `Ok(Ok((stream, verified)))`: the kernel has the keys.
pub(crate) async fn accept(
    stream: TcpStream,
    config: &Arc<ServerConfig>,
) -> Result<Result<(KtlsStream, bool), TcpStream>, String> {
    if !enabled() {
        unavailable(true, "switched off (SLUICE_KTLS=0)");
        return Ok(Err(stream));
    }
    if let Err(e) = set_ulp(stream.as_raw_fd()) {
        unavailable(true, &format!("setsockopt(TCP_ULP, \"tls\"): {e}"));
        return Ok(Err(stream));
    }
    let mut config = ServerConfig::clone(config);
    config.enable_secret_extraction = true;
    config.send_tls13_tickets = 0;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let tls = acceptor
        .accept(Corked::new(stream))
        .await
        .map_err(|e| format!("TLS handshake: {e}"))?;
    let (corked, conn) = tls.into_inner();
    let verified = conn.peer_certificates().is_some();
    let stream = hand_over(corked.stream, rustls::Connection::Server(conn)).await?;
    Ok(Ok((stream, verified)))
}

/// The client's side of [`accept`], after the probe was answered STARTTLS: `Ok(Err(stream))`
/// when the kernel has no TLS (nothing read or written). The server may send session tickets
/// after the handshake: they reach the kernel and are skipped (this client does not resume).
pub(crate) async fn connect(
    stream: TcpStream,
    config: &Arc<ClientConfig>,
    name: ServerName<'static>,
) -> io::Result<Result<KtlsStream, TcpStream>> {
    if !enabled() {
        unavailable(false, "switched off (SLUICE_KTLS=0)");
        return Ok(Err(stream));
    }
    if let Err(e) = set_ulp(stream.as_raw_fd()) {
        unavailable(false, &format!("setsockopt(TCP_ULP, \"tls\"): {e}"));
        return Ok(Err(stream));
    }
    let mut config = ClientConfig::clone(config);
    config.enable_secret_extraction = true;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tls = connector
        .connect(name, Corked::new(stream))
        .await
        .map_err(|e| io::Error::new(e.kind(), format!("TLS handshake: {e}")))?;
    let (corked, conn) = tls.into_inner();
    hand_over(corked.stream, rustls::Connection::Client(conn))
        .await
        .map(Ok)
        .map_err(io::Error::other)
}

/// After the handshake: rustls's queued records out, its keys into the kernel.
async fn hand_over(
    mut stream: TcpStream,
    mut conn: rustls::Connection,
) -> Result<KtlsStream, String> {
    // Records rustls still has queued go out before the kernel takes over sending.
    let mut queued = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut queued)
            .map_err(|e| format!("kernel TLS: rustls output: {e}"))?;
    }
    stream
        .write_all(&queued)
        .await
        .map_err(|e| format!("kernel TLS: flushing rustls output: {e}"))?;
    let mut pending = Vec::new();
    let _ = io::Read::read_to_end(&mut conn.reader(), &mut pending);
    let session = crate::tls_session::TlsSession::of(&conn, true);
    let secrets = conn
        .dangerous_extract_secrets()
        .map_err(|e| format!("kernel TLS: extracting the keys: {e}"))?;
    let fd = stream.as_raw_fd();
    set_keys(fd, TLS_TX, secrets.tx.0, &secrets.tx.1)
        .map_err(|e| format!("kernel TLS: setsockopt(TLS_TX): {e}"))?;
    set_keys(fd, TLS_RX, secrets.rx.0, &secrets.rx.1)
        .map_err(|e| format!("kernel TLS: setsockopt(TLS_RX): {e}"))?;
    let (r, w) = stream.into_split();
    Ok(KtlsStream {
        reader: KtlsReadHalf {
            inner: r,
            pending,
            pending_at: 0,
        },
        writer: w,
        session,
    })
}

fn set_ulp(fd: RawFd) -> io::Result<()> {
    setsockopt(fd, libc::IPPROTO_TCP, TCP_ULP, b"tls")
}

/// `struct tls12_crypto_info_*` of `<linux/tls.h>` as bytes: version and cipher (u16 each,
/// native order), then iv, key, salt, rec_seq. For AES-GCM, TLS 1.3's 12-byte nonce base is
/// split into salt (its first 4 bytes) and iv (its last 8); ChaCha20 has no salt and a 12-byte
/// iv. The record sequence number is big-endian.
fn crypto_info(seq: u64, secrets: &ConnectionTrafficSecrets) -> io::Result<Vec<u8>> {
    let (cipher, key, iv) = match secrets {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (TLS_CIPHER_AES_GCM_128, key, iv),
        ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (TLS_CIPHER_AES_GCM_256, key, iv),
        ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
            (TLS_CIPHER_CHACHA20_POLY1305, key, iv)
        }
        _ => return Err(io::Error::other("a cipher the kernel is not given")),
    };
    let iv = iv.as_ref();
    if iv.len() != 12 {
        return Err(io::Error::other("a nonce that is not 12 bytes"));
    }
    let mut info = Vec::with_capacity(64);
    info.extend_from_slice(&TLS_1_3_VERSION.to_ne_bytes());
    info.extend_from_slice(&cipher.to_ne_bytes());
    if cipher == TLS_CIPHER_CHACHA20_POLY1305 {
        info.extend_from_slice(iv);
        info.extend_from_slice(key.as_ref());
    } else {
        info.extend_from_slice(&iv[4..]);
        info.extend_from_slice(key.as_ref());
        info.extend_from_slice(&iv[..4]);
    }
    info.extend_from_slice(&seq.to_be_bytes());
    Ok(info)
}

fn set_keys(
    fd: RawFd,
    direction: libc::c_int,
    seq: u64,
    secrets: &ConnectionTrafficSecrets,
) -> io::Result<()> {
    let info = crypto_info(seq, secrets)?;
    setsockopt(fd, libc::SOL_TLS, direction, &info)
}

fn setsockopt(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &[u8]) -> io::Result<()> {
    // SAFETY: `value` is valid for its length for the duration of the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            value.as_ptr().cast(),
            value.len() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The socket as rustls sees it during the handshake: reads end at TLS record boundaries
/// (see the module docs), writes go straight through.
struct Corked {
    stream: TcpStream,
    header: [u8; RECORD_HEADER_BYTES],
    header_bytes: usize,
    /// Bytes of the current record's body not yet read; 0: a header comes next.
    body_left: usize,
}

impl Corked {
    fn new(stream: TcpStream) -> Corked {
        Corked {
            stream,
            header: [0; RECORD_HEADER_BYTES],
            header_bytes: 0,
            body_left: 0,
        }
    }
}

impl AsyncRead for Corked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let in_header = this.body_left == 0;
        let limit = if in_header {
            RECORD_HEADER_BYTES - this.header_bytes
        } else {
            this.body_left
        };
        let dst = buf.initialize_unfilled_to(limit.min(buf.remaining()));
        let mut part = ReadBuf::new(dst);
        ready!(Pin::new(&mut this.stream).poll_read(cx, &mut part))?;
        let n = part.filled().len();
        if in_header {
            this.header[this.header_bytes..this.header_bytes + n].copy_from_slice(part.filled());
            this.header_bytes += n;
            if this.header_bytes == RECORD_HEADER_BYTES {
                this.header_bytes = 0;
                this.body_left = u16::from_be_bytes([this.header[3], this.header[4]]) as usize;
            }
        } else {
            this.body_left -= n;
        }
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Corked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// A TCP connection whose TLS record layer is the kernel's.
pub struct KtlsStream {
    reader: KtlsReadHalf,
    writer: OwnedWriteHalf,
    session: crate::tls_session::TlsSession,
}

impl KtlsStream {
    /// The version and cipher suite the handshake agreed on (for statistics).
    pub fn session(&self) -> crate::tls_session::TlsSession {
        self.session
    }

    pub fn tcp(&self) -> &TcpStream {
        self.reader.inner.as_ref()
    }

    /// Reader and writer. The writer is the socket's own: what is written (also by splice)
    /// is encrypted by the kernel.
    pub fn into_split(self) -> (KtlsReadHalf, OwnedWriteHalf) {
        (self.reader, self.writer)
    }
}

impl AsyncRead for KtlsStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().reader).poll_read(cx, buf)
    }
}

impl AsyncWrite for KtlsStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().writer).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().writer).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().writer).poll_shutdown(cx)
    }
}

/// The reading half of a [`KtlsStream`]: `recvmsg` with room for the record type.
pub struct KtlsReadHalf {
    inner: OwnedReadHalf,
    /// Plaintext rustls had decrypted before the switch, read before the socket.
    pending: Vec<u8>,
    pending_at: usize,
}

/// What one `recvmsg` on a kTLS socket got.
enum Received {
    Data(usize),
    /// A record that is not application data: its type and first content bytes.
    Control(u8, [u8; 2], usize),
}

impl AsyncRead for KtlsReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pending_at < this.pending.len() {
            let n = (this.pending.len() - this.pending_at).min(buf.remaining());
            buf.put_slice(&this.pending[this.pending_at..this.pending_at + n]);
            this.pending_at += n;
            return Poll::Ready(Ok(()));
        }
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if buf.remaining() < SMALL_READ_BYTES {
            // A record that is not data comes whole or in pieces that no longer say what
            // they are: read into room for a whole record, hand out from there.
            let mut scratch = vec![0u8; RECORD_PLAINTEXT_BYTES_MAX];
            let mut part = ReadBuf::new(&mut scratch);
            ready!(this.poll_recv(cx, &mut part))?;
            let n = part.filled().len();
            scratch.truncate(n);
            let give = n.min(buf.remaining());
            buf.put_slice(&scratch[..give]);
            this.pending = scratch;
            this.pending_at = give;
            return Poll::Ready(Ok(()));
        }
        this.poll_recv(cx, buf)
    }
}

impl KtlsReadHalf {
    /// One `recvmsg` into `buf`, records that are not data dealt with (see the module docs).
    fn poll_recv(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            let tcp: &TcpStream = self.inner.as_ref();
            ready!(tcp.poll_read_ready(cx))?;
            let fd = tcp.as_raw_fd();
            // SAFETY: recvmsg writes at most `remaining` initialized-or-not bytes into the
            // unfilled part; they are marked initialized only for the count it returns.
            let unfilled = unsafe { buf.unfilled_mut() };
            match tcp.try_io(Interest::READABLE, || recv_record(fd, unfilled)) {
                Ok(Received::Data(n)) => {
                    // SAFETY: the kernel wrote `n` bytes.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Received::Control(kind, first, len)) => match control_record(kind, first, len) {
                    Ok(Control::EndOfStream) => return Poll::Ready(Ok(())),
                    Ok(Control::Skip) => continue,
                    Err(e) => return Poll::Ready(Err(e)),
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

/// What a record that is not application data does to the reader.
#[derive(Debug, PartialEq, Eq)]
enum Control {
    /// `close_notify`: the stream ends here.
    EndOfStream,
    /// A NewSessionTicket (the client's side): nothing for us, read on.
    Skip,
}

/// What a record other than application data means for the connection: end of stream for
/// `close_notify`, skipped for a session ticket, an error naming it for anything else.
fn control_record(kind: u8, first: [u8; 2], len: usize) -> io::Result<Control> {
    match kind {
        RECORD_ALERT if len >= 2 && first[1] == 0 => Ok(Control::EndOfStream),
        RECORD_HANDSHAKE if len >= 1 && first[0] == HANDSHAKE_NEW_SESSION_TICKET => Ok(Control::Skip),
        RECORD_ALERT => Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            format!(
                "kernel TLS: the peer sent alert {} (level {})",
                first[1], first[0]
            ),
        )),
        RECORD_HANDSHAKE if len >= 1 && first[0] == HANDSHAKE_KEY_UPDATE => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "kernel TLS: the peer sent a KeyUpdate, which this server cannot follow with the keys in the kernel",
        )),
        _ => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "kernel TLS: an unexpected record of type {kind} (first byte {})",
                first[0]
            ),
        )),
    }
}

fn recv_record(fd: RawFd, dst: &mut [std::mem::MaybeUninit<u8>]) -> io::Result<Received> {
    // Room for one control message carrying one byte (the record type), aligned for cmsghdr.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: dst.len(),
    };
    // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: msg describes buffers valid for writing for their stated lengths.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    // SAFETY: CMSG_FIRSTHDR/CMSG_DATA walk the control buffer the kernel filled, within
    // msg_controllen.
    let kind = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if !cmsg.is_null()
            && (*cmsg).cmsg_level == libc::SOL_TLS
            && (*cmsg).cmsg_type == TLS_GET_RECORD_TYPE
        {
            *libc::CMSG_DATA(cmsg)
        } else {
            RECORD_APPLICATION_DATA
        }
    };
    if kind == RECORD_APPLICATION_DATA {
        return Ok(Received::Data(n));
    }
    let mut first = [0u8; 2];
    for (i, b) in dst.iter().take(n.min(2)).enumerate() {
        // SAFETY: the kernel wrote the first `n` bytes.
        first[i] = unsafe { b.assume_init() };
    }
    Ok(Received::Control(kind, first, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crypto_info_layout_matches_linux_tls_h() {
        let secrets = ConnectionTrafficSecrets::Aes256Gcm {
            key: rustls::crypto::cipher::AeadKey::from([7u8; 32]),
            iv: rustls::crypto::cipher::Iv::from([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]),
        };
        let info = crypto_info(0x0102, &secrets).unwrap();
        // struct tls12_crypto_info_aes_gcm_256: info (4), iv (8), key (32), salt (4), rec_seq (8)
        assert_eq!(info.len(), 4 + 8 + 32 + 4 + 8);
        assert_eq!(&info[..2], &0x0304u16.to_ne_bytes());
        assert_eq!(&info[2..4], &52u16.to_ne_bytes());
        assert_eq!(&info[4..12], &[5, 6, 7, 8, 9, 10, 11, 12]);
        assert_eq!(&info[12..44], &[7u8; 32]);
        assert_eq!(&info[44..48], &[1, 2, 3, 4]);
        assert_eq!(&info[48..], &[0, 0, 0, 0, 0, 0, 1, 2]);
    }

    #[test]
    fn control_records() {
        assert_eq!(
            control_record(RECORD_ALERT, [1, 0], 2).unwrap(),
            Control::EndOfStream
        );
        assert_eq!(
            control_record(RECORD_HANDSHAKE, [4, 0], 100).unwrap(),
            Control::Skip
        );
        assert!(control_record(RECORD_ALERT, [2, 40], 2).is_err());
        let e = control_record(RECORD_HANDSHAKE, [24, 0], 5).unwrap_err();
        assert!(e.to_string().contains("KeyUpdate"));
    }
}
