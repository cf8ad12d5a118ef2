//! The tokio driver: sockets and tasks around the pure RPC and NFS code.
//!
//! ```text
//!            +-------------------- one TCP connection --------------------+
//!  socket -> | reader task: read 64 KiB chunks -> RecordDecoder -> record |
//!            |     |  (one task per call, at most `calls_in_flight_max`)   |
//!            |     +--> Service::handle(record) --> reply segments --+     |
//!            |                                                       v     |
//!  socket <- | writer task: record-mark, writev, in completion order <-+   |
//!            +-------------------------------------------------------------+
//! ```
//!
//! Calls on one connection run concurrently and their replies go out as they complete, so a
//! slow COMMIT never holds up the READs behind it. Every queue is bounded: the per-connection
//! call semaphore stops the reader (and so the client, through TCP flow control) when too many
//! calls are outstanding; the connection semaphore refuses connections past the limit; an idle
//! connection is closed after `idle_timeout`, and so is one whose replies make no progress for
//! that long (a client that never reads would otherwise pin its queue, its calls and its
//! connection slot forever).
//!
//! The server also *makes* calls on a client's connection (the NFSv4.1 back channel): each TCP
//! connection has a [`CallbackConn`] handle, reachable from every call through
//! [`Peer::back_channel`] and from a [`Connections`] registry by `conn_id`. Records that
//! arrive are sorted by `msg_type` (`sluice_rpc::duplex::classify`): a REPLY goes to the
//! connection's table of outgoing calls, never to the dispatcher; a CALL (or garbage) goes to
//! the dispatcher as before. Outgoing CALL records go through the same writer as replies, one
//! whole record at a time, and a connection that closes fails every pending outgoing call at
//! once (see [`crate::nfs4::callback::conn`]).
//!
//! ```text
//!  socket -> reader: classify ─ CALL ──► Service::handle ─► reply ─┐
//!                              └ REPLY ─► CallbackConn table ─► the waiting `call`
//!  CallbackConn::call ─► "calls ready" ─────────────────────────────┤
//!  socket <- writer: replies and framed CALLs, in queue order  ◄────┘
//! ```
//!
//! # RPC-with-TLS (RFC 9289)
//! With [`NetConfig::tls`] set, a connection whose first record is the AUTH_TLS probe is
//! answered STARTTLS and upgraded before its reader starts ([`sluice_tcp::tls::accept_upgrade`]:
//! the first record is peeked, so a plaintext connection reaches the reader with every byte
//! still in the socket). The reader and writer then work on a [`Stream`] half, plain or TLS,
//! and the calls of a TLS connection carry [`Transport::Tls`]. Where the kernel took the record
//! layer after the handshake ([`sluice_tcp::ktls`], `TlsPeer::kernel`), the connection is a
//! plaintext socket to the driver and READ replies go by splice as over plain TCP, encrypted by
//! the kernel. Otherwise rustls keeps READ replies off the splice path (a pipe cannot be
//! spliced into rustls): their data comes in pooled chunks, and the writer's iovec of chunks is
//! encrypted by rustls into 16 KiB TLS records, never gathered into one buffer. The log line
//! of each upgrade names the path: "(kernel TLS)" or "(rustls)". A failed or stalled handshake
//! (bounded by the TLS configuration's `handshake_timeout`) closes that connection alone; it
//! is counted and logged with the peer and the reason.
//!
//! Socket reads go into 64 KiB buffers that are frozen and handed to the record decoder as
//! they are, so a 1 MiB WRITE arrives as sixteen 64 KiB segments and is never copied into one
//! contiguous buffer.

use crate::nfs4::callback::conn::Outbound;
pub use crate::nfs4::callback::conn::{CallbackConn, Connections};
/// The request types are the RPC service layer's ([`crate::service`]); named here too so that
/// code written before they moved keeps compiling. Protocol handlers name them from `service`
/// (`tests/layering.rs` checks).
pub use crate::service::{Peer, Reply, Service, Transport};
use crate::splice::SplicedData;
use bytes::{Bytes, BytesMut};
use sluice_rpc::duplex::{classify, MsgKind, OutgoingConfig};
use sluice_rpc::record::{self, RecordDecoder, RecordDecoderConfig};
use sluice_tcp::tls::{ServerTls, Stream, Upgraded, WriteHalf};
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{mpsc, Semaphore};
use tracing::{debug, info, warn};

/// Size of one socket read buffer; also the largest contiguous allocation the receive path makes.
pub const READ_CHUNK_BYTES: usize = 64 * 1024;
// A received WRITE's payload segments are held by write-behind and written as pieces: no larger
// than a pool chunk, so no contiguous allocation on the data path exceeds one.
const _: () = assert!(READ_CHUNK_BYTES == sluice_engine::pool::CHUNK_BYTES);

/// Queued replies written by one `writev`: at most this many segments ...
const WRITE_BATCH_SEGMENTS: usize = 256;
/// ... and, once past this many bytes, no more replies are added.
const WRITE_BATCH_BYTES: usize = 1 << 20;

/// Segments passed to one `writev` (the kernel accepts up to 1024).
const IOVECS_PER_WRITE: usize = 256;

/// Limits of the network driver.
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// Largest RPC record accepted; a larger one closes the connection (default 4 MiB: a 1 MiB
    /// WRITE plus headers fits with room to spare, and `--wtmax` larger raises it).
    pub record_bytes_max: usize,
    /// Calls executing at once on one connection (default 128: more than any client's slot table).
    pub calls_in_flight_max: usize,
    /// Connections served at once (default 1024); more are accepted and closed at once.
    pub connections_max: usize,
    /// A connection with no outstanding call and no traffic for this long is closed (default 6 min,
    /// like knfsd's idle timeout); so is one whose reply writes make no progress for this long.
    pub idle_timeout: Duration,
    /// Replies queued for the writer of one connection (default 256).
    pub replies_queued_max: usize,
    /// Calls the server itself may have outstanding on one connection (the callbacks):
    /// see [`OutgoingConfig::calls_in_flight_max`] for the default and why.
    pub callbacks: OutgoingConfig,
    /// RPC-with-TLS: certificates and counters (`--tls-cert`, `--tls-key`); `None` (the
    /// default): the AUTH_TLS probe is refused with AUTH_BADCRED like any unknown flavor.
    pub tls: Option<Arc<ServerTls>>,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            record_bytes_max: 4 << 20,
            calls_in_flight_max: 128,
            connections_max: 1024,
            idle_timeout: Duration::from_secs(360),
            replies_queued_max: 256,
            callbacks: OutgoingConfig::default(),
            tls: None,
        }
    }
}

/// Accepts TCP connections until the listener fails.
pub async fn serve_tcp<S: Service>(
    listener: TcpListener,
    svc: Arc<S>,
    cfg: NetConfig,
) -> io::Result<()> {
    serve_tcp_with(listener, svc, cfg, Connections::default()).await
}

/// [`serve_tcp`], keeping every live connection's [`CallbackConn`] in `registry` (from accept
/// to close), where protocol code finds the connection to call back on by `conn_id`. Listeners
/// sharing a registry share its `conn_id` numbering.
pub async fn serve_tcp_with<S: Service>(
    listener: TcpListener,
    svc: Arc<S>,
    cfg: NetConfig,
    registry: Connections,
) -> io::Result<()> {
    let conns = Arc::new(Semaphore::new(cfg.connections_max));
    loop {
        let (stream, addr) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                warn!("accept failed: {e}; retrying in 100 ms");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let permit = match conns.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                warn!(%addr, limit = cfg.connections_max, "connection refused: too many connections");
                drop(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        match sluice_tcp::tune(&stream, addr.ip()) {
            Ok(Some(cc)) => debug!(%addr, cc, "loopback client: congestion control switched"),
            Ok(None) => {}
            Err(e) => debug!(%addr, error = %e, "congestion control left as is"),
        }
        let conn_id = registry.next_id();
        let svc = svc.clone();
        let cfg = cfg.clone();
        let registry = registry.clone();
        tokio::spawn(async move {
            let (stream, transport) = match sluice_tcp::tls::accept_upgrade(
                stream,
                cfg.tls.as_deref(),
                cfg.idle_timeout,
            )
            .await
            {
                Ok(Upgraded::Plain(s)) => (Stream::Plain(s), Transport::Tcp),
                Ok(Upgraded::Tls(s, peer)) => {
                    info!(%addr, client_verified = peer.verified, "connection upgraded to TLS (rustls)");
                    (Stream::Tls(s), Transport::Tls(peer))
                }
                Ok(Upgraded::Ktls(s, peer)) => {
                    info!(%addr, client_verified = peer.verified, "connection upgraded to TLS (kernel TLS)");
                    (Stream::Ktls(s), Transport::Tls(peer))
                }
                Err(e) => {
                    warn!(%addr, reason = %e, "RPC-with-TLS handshake failed; connection closed");
                    return;
                }
            };
            if let Err(e) = serve_conn(stream, transport, addr, conn_id, svc, cfg, &registry).await
            {
                debug!(%addr, "connection closed: {e}");
            }
            drop(permit);
        });
    }
}

/// Serves one TCP connection: its reader (this task), writer and back channel.
async fn serve_conn<S: Service>(
    stream: Stream,
    transport: Transport,
    addr: SocketAddr,
    conn_id: u64,
    svc: Arc<S>,
    cfg: NetConfig,
    registry: &Connections,
) -> io::Result<()> {
    let (tx, rx) = mpsc::channel::<Outbound>(cfg.replies_queued_max);
    let back = CallbackConn::open(conn_id, addr, cfg.callbacks, &tx);
    let peer = Peer {
        addr,
        conn_id,
        transport,
        back_channel: Some(back.clone()),
    };
    registry.insert(back.clone());
    let result = serve_conn_io(stream, peer, svc.clone(), cfg, tx, rx, back.clone()).await;
    // Whatever ended the connection, no callback on it can be answered any more, and the
    // protocol state must stop counting on it (an NFSv4.1 session's back channel).
    registry.remove(conn_id);
    back.close();
    svc.conn_closed(conn_id);
    result
}

async fn serve_conn_io<S: Service>(
    stream: Stream,
    peer: Peer,
    svc: Arc<S>,
    cfg: NetConfig,
    tx: mpsc::Sender<Outbound>,
    mut rx: mpsc::Receiver<Outbound>,
    back: CallbackConn,
) -> io::Result<()> {
    let (mut rd, mut wr) = stream.into_split();
    let stall_max = cfg.idle_timeout;
    let writer_back = back.clone();
    let writer = tokio::spawn(async move {
        let back = writer_back;
        let mut next = None;
        loop {
            let item = match next.take() {
                Some(r) => r,
                None => match rx.recv().await {
                    Some(r) => r,
                    None => break,
                },
            };
            let sent = match item {
                Outbound::Reply(Reply {
                    segs,
                    spliced: Some(sp),
                }) => match &mut wr {
                    WriteHalf::Plain(wr) => write_spliced(wr, segs, sp, stall_max).await,
                    // Calls over rustls carry a `Transport::Tls` that never splices: our bug.
                    // (Kernel TLS writes through `WriteHalf::Plain`: the kernel encrypts.)
                    WriteHalf::Tls(_) => {
                        Err(io::Error::other("a spliced reply on a TLS connection"))
                    }
                },
                first => {
                    // Replies (and calls) already queued behind this one go out in the same
                    // writev: one system call (and one wake-up of the client) for a burst of
                    // small records. Each record is framed whole: records never interleave.
                    let mut framed = Vec::new();
                    push_framed(&back, first, &mut framed);
                    let mut bytes: usize = framed.iter().map(|s| s.len()).sum();
                    while framed.len() < WRITE_BATCH_SEGMENTS && bytes < WRITE_BATCH_BYTES {
                        match rx.try_recv() {
                            Ok(Outbound::Reply(r)) if r.spliced.is_some() => {
                                next = Some(Outbound::Reply(r));
                                break;
                            }
                            Ok(o) => {
                                let before = framed.len();
                                push_framed(&back, o, &mut framed);
                                bytes += framed[before..].iter().map(|s| s.len()).sum::<usize>();
                            }
                            Err(_) => break,
                        }
                    }
                    if framed.is_empty() {
                        continue; // a "calls ready" whose calls went out already or were cancelled
                    }
                    write_all_vectored_within(&mut wr, &framed, stall_max).await
                }
            };
            // Under TLS the last bytes of a batch may wait inside rustls: push them out.
            let sent = match sent {
                Ok(()) if matches!(wr, WriteHalf::Tls(_)) => {
                    match tokio::time::timeout(stall_max, wr.flush()).await {
                        Ok(r) => r,
                        Err(_) => Err(io::ErrorKind::TimedOut.into()),
                    }
                }
                other => other,
            };
            if let Err(e) = sent {
                // Calls already sent can no longer be answered on this connection.
                back.close();
                if e.kind() == io::ErrorKind::TimedOut {
                    // A client that does not read its replies: everything behind this reply
                    // (the queue, the calls in flight, the reader) is stuck, and the
                    // connection would be held forever. Closing it frees all of it.
                    warn!(addr = %peer.addr, "closing connection: replies made no progress for {stall_max:?}");
                } else {
                    debug!("write failed: {e}");
                }
                return;
            }
        }
        let _ = wr.shutdown().await;
    });

    let calls = Arc::new(Semaphore::new(cfg.calls_in_flight_max));
    let mut decoder = RecordDecoder::new(RecordDecoderConfig {
        max_record_bytes: cfg.record_bytes_max,
        ..RecordDecoderConfig::default()
    });
    let mut buf = BytesMut::new();
    let result = loop {
        // Every read is bounded by the idle timeout; when it expires while calls are still
        // running, the connection is busy, not idle, and the read is retried. (Deciding before
        // the read instead would miss the usual case: the reader is back here before the call
        // it just spawned has finished, and would then wait without bound for a client that
        // went quiet after its last reply.) `read_into` is cancel safe: a timed-out read lost
        // nothing. Plaintext lands in 64 KiB buffers cut into `Bytes`; under TLS the
        // decrypted records go to the decoder from where they were opened.
        let n = loop {
            let read = rd.read_into(&mut decoder, &mut buf, 4096, READ_CHUNK_BYTES);
            match tokio::time::timeout(cfg.idle_timeout, read).await {
                Ok(r) => break Some(r?.bytes),
                Err(_) if calls.available_permits() < cfg.calls_in_flight_max => continue,
                // The server waits for callback replies: busy too.
                Err(_) if back.in_flight() > 0 => continue,
                Err(_) => break None,
            }
        };
        let Some(n) = n else {
            info!(addr = %peer.addr, "closing idle connection after {:?}", cfg.idle_timeout);
            break Ok(());
        };
        if n == 0 {
            break Ok(());
        }
        loop {
            match decoder.next_record() {
                Ok(Some(rec)) => {
                    if let MsgKind::Reply { .. } = classify(&rec) {
                        // The answer to one of our calls: never the dispatcher's business.
                        back.handle_reply(rec);
                        continue;
                    }
                    let permit = calls
                        .clone()
                        .acquire_owned()
                        .await
                        .expect("semaphore is never closed");
                    if tx.is_closed() {
                        // The writer gave up (see above): executing more calls is wasted work.
                        drop(tx);
                        let _ = writer.await;
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "replies stuck"));
                    }
                    let svc = svc.clone();
                    let tx = tx.clone();
                    let peer = peer.clone();
                    tokio::spawn(async move {
                        if let Some(reply) = svc.handle(peer, rec).await {
                            let _ = tx.send(Outbound::Reply(reply)).await;
                        }
                        drop(permit);
                    });
                }
                Ok(None) => break,
                Err(e) => {
                    warn!(addr = %peer.addr, "closing connection: {e}");
                    drop(tx);
                    let _ = writer.await;
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string()));
                }
            }
        }
    };
    drop(tx);
    let _ = writer.await;
    result
}

/// Appends an outbound item to a batch: a reply record-marked, or every call the back channel
/// has waiting (their deadlines start now).
fn push_framed(back: &CallbackConn, item: Outbound, out: &mut Vec<Bytes>) {
    match item {
        Outbound::Reply(r) => {
            debug_assert!(
                r.spliced.is_none(),
                "spliced replies are written on their own"
            );
            out.extend(record::frame(r.segs, usize::MAX >> 1));
        }
        Outbound::Calls => back.take_transmits(out),
    }
}

/// Writes a spliced reply as one record: the record mark and `head` (with MSG_MORE when more
/// follows: a partial segment is held for it, never for nothing), the pipe's bytes by splice,
/// then the tail. Each step is bounded by `stall_max` without progress, like
/// [`write_all_vectored_within`].
async fn write_spliced(
    wr: &mut tokio::net::tcp::OwnedWriteHalf,
    head: Vec<Bytes>,
    mut sp: SplicedData,
    stall_max: Duration,
) -> io::Result<()> {
    let total = head.iter().map(|s| s.len()).sum::<usize>() + sp.pipe.len() + sp.tail.len();
    if total > record::MAX_FRAGMENT_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "reply too large",
        ));
    }
    let mut segs = Vec::with_capacity(head.len() + 1);
    segs.push(Bytes::copy_from_slice(&record::record_header(total, true)));
    segs.extend(head.into_iter().filter(|s| !s.is_empty()));
    let stream: &TcpStream = wr.as_ref();
    let fd = stream.as_raw_fd();
    let more_after_head = !sp.pipe.is_empty() || !sp.tail.is_empty();
    let head_flags = libc::MSG_NOSIGNAL | if more_after_head { libc::MSG_MORE } else { 0 };
    let (mut idx, mut off) = (0usize, 0usize);
    while idx < segs.len() {
        let n = nonblocking_write(stream, stall_max, || {
            let iov: Vec<libc::iovec> = std::iter::once(&segs[idx][off..])
                .chain(segs[idx + 1..].iter().map(|s| &s[..]))
                .take(64)
                .map(|s| libc::iovec {
                    iov_base: s.as_ptr() as *mut libc::c_void,
                    iov_len: s.len(),
                })
                .collect();
            // SAFETY: a zeroed msghdr is valid; the iovecs describe live buffers borrowed for
            // the call.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
            msg.msg_iovlen = iov.len() as _;
            // SAFETY: fd is the connection's socket, alive for the borrow of `stream`.
            let rc = unsafe { libc::sendmsg(fd, &msg, head_flags) };
            if rc < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(rc as usize)
            }
        })
        .await?;
        (idx, off) = advance(&segs, idx, off, n);
    }
    let more = !sp.tail.is_empty();
    while !sp.pipe.is_empty() {
        nonblocking_write(stream, stall_max, || sp.pipe.drain(fd, more)).await?;
    }
    if more {
        write_all_vectored_within(wr, &[sp.tail], stall_max).await?;
    }
    Ok(())
}

/// Runs the non-blocking socket write `f` until it makes progress, waiting (at most
/// `stall_max` each time) for the socket to become writable.
async fn nonblocking_write(
    stream: &TcpStream,
    stall_max: Duration,
    mut f: impl FnMut() -> io::Result<usize>,
) -> io::Result<usize> {
    loop {
        match tokio::time::timeout(stall_max, stream.writable()).await {
            Ok(r) => r?,
            Err(_) => return Err(io::ErrorKind::TimedOut.into()),
        }
        match stream.try_io(tokio::io::Interest::WRITABLE, &mut f) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Writes every segment, in order, with as few `writev` calls as the socket allows.
pub async fn write_all_vectored<W: AsyncWriteExt + Unpin>(
    w: &mut W,
    segs: &[Bytes],
) -> io::Result<()> {
    write_all_vectored_within(w, segs, Duration::MAX).await
}

/// [`write_all_vectored`], failing with `TimedOut` when one `writev` makes no progress for
/// `stall_max` (the peer stopped reading). Progress, not the whole write, is timed, so a large
/// reply to a slow but live client is never cut.
pub async fn write_all_vectored_within<W: AsyncWriteExt + Unpin>(
    w: &mut W,
    segs: &[Bytes],
    stall_max: Duration,
) -> io::Result<()> {
    let mut idx = 0;
    let mut off = 0;
    while idx < segs.len() {
        let mut slices: Vec<IoSlice<'_>> =
            Vec::with_capacity((segs.len() - idx).min(IOVECS_PER_WRITE));
        slices.push(IoSlice::new(&segs[idx][off..]));
        for s in segs[idx + 1..].iter().take(IOVECS_PER_WRITE - 1) {
            slices.push(IoSlice::new(s));
        }
        let n = match tokio::time::timeout(stall_max, w.write_vectored(&slices)).await {
            Ok(r) => r?,
            Err(_) => return Err(io::ErrorKind::TimedOut.into()),
        };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        (idx, off) = advance(segs, idx, off, n);
        while idx < segs.len() && segs[idx].len() == off {
            idx += 1;
            off = 0;
        }
    }
    Ok(())
}

/// Moves the write position (`idx` segment, `off` bytes into it) past `n` bytes sent.
fn advance(segs: &[Bytes], mut idx: usize, mut off: usize, mut n: usize) -> (usize, usize) {
    while n > 0 && idx < segs.len() {
        let left = segs[idx].len() - off;
        if n >= left {
            n -= left;
            idx += 1;
            off = 0;
        } else {
            off += n;
            n = 0;
        }
    }
    (idx, off)
}

/// UDP socket buffers: WRITEs of 32 KiB from many clients at once. The default (about 208 KiB)
/// holds six; past that the kernel drops datagrams (`RcvbufErrors`) and clients retransmit on a
/// healthy network.
pub const UDP_BUFFER_BYTES: usize = 8 << 20;

/// Serves RPC over UDP: one datagram is one record (no record marking).
pub async fn serve_udp<S: Service>(sock: UdpSocket, svc: Arc<S>, cfg: NetConfig) -> io::Result<()> {
    sluice_tcp::set_udp_buffers(&sock, UDP_BUFFER_BYTES);
    let sock = Arc::new(sock);
    let calls = Arc::new(Semaphore::new(cfg.calls_in_flight_max));
    loop {
        let mut buf = BytesMut::zeroed(READ_CHUNK_BYTES);
        let (n, addr) = sock.recv_from(&mut buf).await?;
        buf.truncate(n);
        let rec = vec![buf.freeze()];
        let permit = calls
            .clone()
            .acquire_owned()
            .await
            .expect("semaphore is never closed");
        let svc = svc.clone();
        let sock = sock.clone();
        tokio::spawn(async move {
            let peer = Peer {
                addr,
                conn_id: 0,
                transport: Transport::Udp,
                back_channel: None,
            };
            if let Some(reply) = svc.handle(peer, rec).await {
                if reply.spliced.is_some() {
                    // The NFS layer splices TCP replies only; a datagram is built in memory.
                    warn!(%addr, "a spliced reply cannot go out over UDP; dropped");
                    drop(permit);
                    return;
                }
                let total: usize = reply.segs.iter().map(|s| s.len()).sum();
                let mut out = BytesMut::with_capacity(total);
                for s in &reply.segs {
                    out.extend_from_slice(s);
                }
                if let Err(e) = sock.send_to(&out, addr).await {
                    debug!(%addr, "UDP reply of {total} bytes not sent: {e}");
                }
            }
            drop(permit);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::splice::PipePool;

    /// A loopback connection: the server's write half and the client's socket.
    async fn pair() -> (tokio::net::tcp::OwnedWriteHalf, std::net::TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().await.unwrap();
        client.set_nonblocking(true).unwrap();
        (server.into_split().1, client)
    }

    /// What the client can read at once, without waiting.
    fn readable_now(c: &mut std::net::TcpStream) -> Vec<u8> {
        use std::io::Read;
        let mut out = vec![0u8; 1 << 16];
        match c.read(&mut out) {
            Ok(n) => out.truncate(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => out.clear(),
            Err(e) => panic!("{e}"),
        }
        out
    }

    #[tokio::test]
    async fn a_spliced_reply_without_data_is_not_held_back() {
        // On loopback a pushed segment is in the receiver's queue when the send returns; one
        // held by MSG_MORE is not (it would wait for TCP's 200 ms cork timer).
        let (mut wr, mut client) = pair().await;
        let pool = PipePool::new(1, 1 << 20, Default::default());
        let pipe = pool.acquire(0, 1 << 20).expect("a pipe");
        let head = vec![Bytes::from_static(b"header!!")];
        let sp = SplicedData {
            pipe,
            tail: Bytes::new(),
        };
        write_spliced(&mut wr, head, sp, Duration::from_secs(5))
            .await
            .unwrap();
        let got = readable_now(&mut client);
        assert_eq!(
            got, b"\x80\x00\x00\x08header!!",
            "the record went out whole, at once"
        );
    }

    #[tokio::test]
    async fn a_spliced_reply_is_one_record_of_head_data_and_tail() {
        let (mut wr, mut client) = pair().await;
        let pool = PipePool::new(1, 1 << 20, Default::default());
        let mut pipe = pool.acquire(0, 5).expect("a pipe");
        let path = std::env::temp_dir().join(format!("sluice-net-test-{}", std::process::id()));
        std::fs::write(&path, b"12345").unwrap();
        let f = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(pipe.fill(std::os::fd::AsFd::as_fd(&f), 0, 5).unwrap(), 5);
        let sp = SplicedData {
            pipe,
            tail: Bytes::from_static(&[0, 0, 0]),
        };
        write_spliced(
            &mut wr,
            vec![Bytes::from_static(b"hd")],
            sp,
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        let got = readable_now(&mut client);
        assert_eq!(got, b"\x80\x00\x00\x0ahd12345\0\0\0");
    }
}
