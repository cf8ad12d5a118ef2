//! The real-time driver: a TCP or UDP proxy with two [`LinkDirection`]s inside.
//!
//! ```text
//!   client ──TCP──▶ [listen] ─ read ─▶ LinkDirection(Forward) ─ deliver ─▶ write ──TCP──▶ [to] server
//!   client ◀──TCP── [listen] ◀ write ─ LinkDirection(Reverse) ◀ read ─────────────TCP──── [to] server
//! ```
//!
//! One task per TCP connection owns both sockets and both directions, and
//! loops: deliver what is due, write it, then wait for the first of (a source
//! readable, a destination writable, the next model deadline). All decisions
//! are the model's; this code only moves bytes and reads the clock.
//!
//! * **Backpressure.** A source is read only while its direction has room for
//!   a segment ([`LinkDirection::room_bytes`]) and its undelivered output is
//!   below a bound, and never more than that room. A full queue therefore
//!   stops reading, the kernel buffers fill, and the sender blocks, as behind
//!   a real bottleneck. The listening socket's receive buffer is capped at
//!   [`SOCKET_BUFFER_BYTES`] so that hidden kernel buffering stays small next
//!   to the modelled queue.
//! * **Timing.** Deadlines come from the model and are awaited with the
//!   precise timer in `timer` (tokio's own timer has 1 ms granularity). Each
//!   wake-up delivers everything whose time is `<= now`, so a late wake-up
//!   delays segments but never loses rate: the model's serializer clock, not
//!   the driver's wake-ups, decides the throughput.
//! * **Faults.** [`Event::Reset`] flushes the delivered bytes, sets
//!   `SO_LINGER 0` on both sockets and closes them, so both peers see a RST.
//!   Stalls live entirely in the model.
//! * **What a TCP proxy cannot do.** It terminates TCP, so each endpoint's
//!   congestion control runs against loopback plus backpressure, not against
//!   the emulated RTT; slow start over the emulated path is not reproduced.
//!   Request/response traffic (RPCs) sees the delay and the rate exactly.
//!
//! UDP: one socket on `listen`, one connected to `to`; the client is the
//! sender of the first datagram. Datagrams that find the queue full are
//! dropped, as are datagrams the kernel will not take without blocking.

use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream, UdpSocket};
use tokio::task::JoinSet;

use crate::model::{Direction, Event, LinkConfig, LinkDirection, Mode, Offer};
use crate::timer;

/// Receive buffer of the proxy's sockets. Linux doubles it and autotuning is
/// disabled once set, so each source can park at most ~512 KiB in the kernel
/// ahead of the model's queue (1 MiB by default): enough to keep a 1 GB/s link
/// fed across a 0.25 ms scheduling hiccup, small enough that the configured
/// queue, not the kernel, dominates the buffering.
pub const SOCKET_BUFFER_BYTES: u32 = 256 * 1024;

/// Most TCP connections served at once; further ones are closed on accept.
pub const CONNECTIONS_MAX: usize = 1024;

/// Largest single read from a source socket.
const READ_BYTES_MAX: usize = 256 * 1024;

/// Largest datagram (the UDP payload limit).
const DATAGRAM_BYTES_MAX: usize = 65_536;

/// What to proxy and how the path between behaves.
#[derive(Clone, Debug, PartialEq)]
pub struct ProxyConfig {
    /// Address to accept clients on (port 0: ephemeral, see `local_addr`).
    pub listen: SocketAddr,
    /// Address of the server every client is connected to.
    pub to: SocketAddr,
    /// The emulated path. Connection `i` uses seed `link.seed + i`.
    pub link: LinkConfig,
}

/// Runs a TCP proxy until `shutdown` completes.
pub async fn run_tcp_proxy(cfg: ProxyConfig, shutdown: impl Future<Output = ()>) -> io::Result<()> {
    TcpProxy::bind(cfg).await?.run(shutdown).await
}

/// Runs a UDP proxy until `shutdown` completes.
pub async fn run_udp_proxy(cfg: ProxyConfig, shutdown: impl Future<Output = ()>) -> io::Result<()> {
    UdpProxy::bind(cfg).await?.run(shutdown).await
}

/// A bound TCP proxy, not yet running (lets callers learn the port first).
pub struct TcpProxy {
    listener: TcpListener,
    cfg: ProxyConfig,
}

impl TcpProxy {
    /// Binds the listening socket.
    pub async fn bind(cfg: ProxyConfig) -> io::Result<Self> {
        let socket = new_tcp_socket(cfg.listen)?;
        socket.set_reuseaddr(true)?;
        socket.bind(cfg.listen)?;
        let listener = socket.listen(1024)?;
        Ok(Self { listener, cfg })
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts and serves connections until `shutdown` completes; then aborts
    /// the connections in progress.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> io::Result<()> {
        tokio::pin!(shutdown);
        let mut connections = JoinSet::new();
        let mut index = 0u64;
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = self.listener.accept() => {
                    let (client, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            tracing::warn!("link: accept failed: {e}");
                            continue;
                        }
                    };
                    if connections.len() >= CONNECTIONS_MAX {
                        tracing::warn!("link: {peer} refused, {CONNECTIONS_MAX} connections open");
                        continue;
                    }
                    let mut link = self.cfg.link.clone();
                    link.seed = link.seed.wrapping_add(index);
                    index += 1;
                    let to = self.cfg.to;
                    connections.spawn(async move {
                        if let Err(e) = serve_connection(client, to, &link).await {
                            tracing::debug!("link: connection from {peer}: {e}");
                        }
                    });
                }
            }
        }
        connections.shutdown().await;
        Ok(())
    }
}

fn new_tcp_socket(addr: SocketAddr) -> io::Result<TcpSocket> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_recv_buffer_size(SOCKET_BUFFER_BYTES)?;
    Ok(socket)
}

/// Proxies one connection until both directions have closed or reset.
async fn serve_connection(
    mut client: TcpStream,
    to: SocketAddr,
    link: &LinkConfig,
) -> io::Result<()> {
    let mut server = new_tcp_socket(to)?.connect(to).await?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    rx::enable_timestamps(&client);
    rx::enable_timestamps(&server);
    let now = Instant::now();
    let mut fwd = Pump::new(LinkDirection::new(
        link,
        Direction::Forward,
        Mode::Stream,
        now,
    ));
    let mut rev = Pump::new(LinkDirection::new(
        link,
        Direction::Reverse,
        Mode::Stream,
        now,
    ));
    let outcome = pump_loop(&mut client, &mut server, &mut fwd, &mut rev).await;
    tracing::debug!(
        "link: connection done: forward {:?}, reverse {:?}",
        fwd.link.stats(),
        rev.link.stats()
    );
    match outcome {
        Ok(Finish::Closed) => Ok(()),
        Ok(Finish::Reset) => {
            abort(&client, &server);
            Ok(())
        }
        Err(e) => {
            abort(&client, &server);
            Err(e)
        }
    }
}

/// A deadline for the driver loop; ordered by time, precise first on ties.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Wake {
    at: Instant,
    precise: bool,
}

enum Finish {
    Closed,
    Reset,
}

async fn pump_loop(
    client: &mut TcpStream,
    server: &mut TcpStream,
    fwd: &mut Pump,
    rev: &mut Pump,
) -> io::Result<Finish> {
    loop {
        let now = Instant::now();
        let fwd_reset = fwd.deliver_due(now);
        let rev_reset = rev.deliver_due(now);
        fwd.flush(server)?;
        rev.flush(client)?;
        if fwd_reset || rev_reset {
            fwd.flush_all(server).await?;
            rev.flush_all(client).await?;
            return Ok(Finish::Reset);
        }
        fwd.finish_if_done(server).await?;
        rev.finish_if_done(client).await?;
        if fwd.fin_sent && rev.fin_sent {
            return Ok(Finish::Closed);
        }

        let deadline = [fwd.deadline(), rev.deadline()].into_iter().flatten().min();
        let fwd_read = fwd.wants_read(now);
        let rev_read = rev.wants_read(now);
        tokio::select! {
            biased;
            r = client.readable(), if fwd_read => r?,
            r = server.readable(), if rev_read => r?,
            r = server.writable(), if fwd.has_output() => r?,
            r = client.writable(), if rev.has_output() => r?,
            () = sleep(deadline, now), if deadline.is_some() => {}
            else => {
                // Nothing to read, write or wait for: only possible if both
                // sources ended and both directions drained, handled above.
                debug_assert!(false, "link: proxy loop with nothing to wait for");
                return Ok(Finish::Closed);
            }
        }
        if fwd_read {
            fwd.read_from(client)?;
        }
        if rev_read {
            rev.read_from(server)?;
        }
    }
}

/// A sleep until `wake`. select! builds the futures of disabled branches
/// too, so `None` must still produce one (it is never polled).
fn sleep(wake: Option<Wake>, now: Instant) -> timer::PreciseSleep {
    let wake = wake.unwrap_or(Wake {
        at: now,
        precise: false,
    });
    timer::sleep_until(wake.at, wake.precise)
}

/// Closes both sockets with a RST (`SO_LINGER 0`).
fn abort(client: &TcpStream, server: &TcpStream) {
    for s in [client, server] {
        if let Err(e) = s.set_zero_linger() {
            tracing::debug!("link: SO_LINGER 0: {e}");
        }
    }
}

/// One direction of a TCP connection: the model plus the bytes it has
/// delivered but the destination socket has not yet taken.
struct Pump {
    link: LinkDirection<Bytes>,
    read_buf: BytesMut,
    output: VecDeque<Bytes>,
    output_bytes: usize,
    src_eof: bool,
    fin_sent: bool,
}

impl Pump {
    fn new(link: LinkDirection<Bytes>) -> Self {
        Self {
            link,
            read_buf: BytesMut::new(),
            output: VecDeque::new(),
            output_bytes: 0,
            src_eof: false,
            fin_sent: false,
        }
    }

    /// Bound on delivered-but-unwritten bytes: a destination that does not
    /// read (closed receive window) must stop the source, as it would end to
    /// end.
    fn output_bytes_max(&self) -> usize {
        self.link.queue_bytes_max().min(16 << 20) as usize
    }

    /// Moves every due segment to the output; true if the model says reset.
    fn deliver_due(&mut self, now: Instant) -> bool {
        while let Some(ev) = self.link.poll_deliver(now) {
            match ev {
                Event::Deliver(b) => {
                    self.output_bytes += b.len();
                    self.output.push_back(b);
                }
                Event::Reset => return true,
            }
        }
        false
    }

    fn has_output(&self) -> bool {
        !self.output.is_empty()
    }

    /// The next wake-up, and whether it needs precision: the last segment in
    /// flight is what a request/response exchange waits for; segments in the
    /// middle of a burst and queue-room wake-ups only need to be roughly on time.
    fn deadline(&self) -> Option<Wake> {
        let blocked = !self.src_eof && !self.link.is_closed();
        let room = blocked
            .then(|| self.link.room_timeout())
            .flatten()
            .map(|at| Wake { at, precise: false });
        let deliver = self.link.poll_timeout().map(|at| Wake {
            at,
            precise: self.link.wire_segments() <= 1,
        });
        [deliver, room].into_iter().flatten().min()
    }

    fn wants_read(&mut self, now: Instant) -> bool {
        if self.src_eof || self.output_bytes >= self.output_bytes_max() {
            return false;
        }
        let room = self.link.room_bytes(now);
        room > 0 && (room >= self.link.segment_limit_bytes() as u64 || self.link.queue_bytes() == 0)
    }

    /// Reads what the source has, up to the room in the link, and offers it.
    fn read_from(&mut self, src: &TcpStream) -> io::Result<()> {
        // A few reads per wake-up: enough to refill the queue, bounded so one
        // direction cannot starve the other.
        for _ in 0..4 {
            let now = Instant::now();
            if !self.wants_read(now) {
                return Ok(());
            }
            let room = self.link.room_bytes(now) as usize;
            let want = room.clamp(1, READ_BYTES_MAX);
            self.read_buf.reserve(want);
            let (n, now) = match rx::read_timestamped(src, &mut self.read_buf, want) {
                Ok((0, _)) => {
                    self.src_eof = true;
                    return Ok(());
                }
                Ok(read) => read,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            };
            let mut data = self.read_buf.split_to(n).freeze();
            while !data.is_empty() {
                let len = self.link.segment_limit_bytes().min(data.len());
                let segment = data.split_to(len);
                let offer = self.link.offer(now, segment, len);
                debug_assert_eq!(offer, Offer::Queued, "reads never exceed the room");
            }
        }
        Ok(())
    }

    /// Writes as much output as the destination takes without blocking.
    fn flush(&mut self, dst: &TcpStream) -> io::Result<()> {
        while !self.output.is_empty() {
            let slices: Vec<IoSlice<'_>> = self
                .output
                .iter()
                .take(64)
                .map(|b| IoSlice::new(b))
                .collect();
            match dst.try_write_vectored(&slices) {
                Ok(n) => self.consume(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Writes all output, waiting for the destination (bounded to 1 s: used
    /// only before a reset).
    async fn flush_all(&mut self, dst: &TcpStream) -> io::Result<()> {
        let until = tokio::time::Instant::now() + Duration::from_secs(1);
        while self.has_output() {
            match tokio::time::timeout_at(until, dst.writable()).await {
                Ok(r) => r?,
                Err(_) => return Ok(()),
            }
            self.flush(dst)?;
        }
        Ok(())
    }

    fn consume(&mut self, mut n: usize) {
        self.output_bytes -= n;
        while n > 0 {
            let head = self.output.front_mut().expect("wrote more than queued");
            if head.len() <= n {
                n -= head.len();
                self.output.pop_front();
            } else {
                head.advance(n);
                n = 0;
            }
        }
    }

    /// Sends FIN once the source has ended and everything was delivered.
    async fn finish_if_done(&mut self, dst: &mut TcpStream) -> io::Result<()> {
        if self.src_eof && !self.fin_sent && self.link.is_idle() && !self.has_output() {
            self.fin_sent = true;
            dst.shutdown().await?;
        }
        Ok(())
    }
}

/// A bound UDP proxy, not yet running.
pub struct UdpProxy {
    client_side: UdpSocket,
    server_side: UdpSocket,
    cfg: ProxyConfig,
}

impl UdpProxy {
    /// Binds the client-facing socket and connects one to the server.
    pub async fn bind(cfg: ProxyConfig) -> io::Result<Self> {
        let client_side = UdpSocket::bind(cfg.listen).await?;
        let any: SocketAddr = if cfg.to.is_ipv4() {
            (std::net::Ipv4Addr::LOCALHOST, 0).into()
        } else {
            (std::net::Ipv6Addr::LOCALHOST, 0).into()
        };
        let server_side = UdpSocket::bind(any).await?;
        server_side.connect(cfg.to).await?;
        Ok(Self {
            client_side,
            server_side,
            cfg,
        })
    }

    /// The address clients send to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.client_side.local_addr()
    }

    /// Forwards datagrams until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> io::Result<()> {
        tokio::pin!(shutdown);
        let now = Instant::now();
        let mut fwd: LinkDirection<Bytes> =
            LinkDirection::new(&self.cfg.link, Direction::Forward, Mode::Datagram, now);
        let mut rev: LinkDirection<Bytes> =
            LinkDirection::new(&self.cfg.link, Direction::Reverse, Mode::Datagram, now);
        let mut client: Option<SocketAddr> = None;
        let mut buf_client = vec![0u8; DATAGRAM_BYTES_MAX];
        let mut buf_server = vec![0u8; DATAGRAM_BYTES_MAX];
        loop {
            let now = Instant::now();
            while let Some(Event::Deliver(d)) = fwd.poll_deliver(now) {
                let _ = self.server_side.try_send(&d); // a full socket drops, like a NIC
            }
            if let Some(addr) = client {
                while let Some(Event::Deliver(d)) = rev.poll_deliver(now) {
                    let _ = self.client_side.try_send_to(&d, addr);
                }
            }
            let deliver = |l: &LinkDirection<Bytes>| {
                l.poll_timeout().map(|at| Wake {
                    at,
                    precise: l.wire_segments() <= 1,
                })
            };
            let deadline = [deliver(&fwd), deliver(&rev)].into_iter().flatten().min();
            tokio::select! {
                () = &mut shutdown => break,
                r = self.client_side.recv_from(&mut buf_client) => {
                    let Ok((n, from)) = r else { continue };
                    if *client.get_or_insert(from) == from {
                        let d = Bytes::copy_from_slice(&buf_client[..n]);
                        fwd.offer(Instant::now(), d, n);
                    }
                }
                r = self.server_side.recv(&mut buf_server) => {
                    // Errors here are ICMP port-unreachable from the server: ignore.
                    let Ok(n) = r else { continue };
                    if client.is_some() {
                        let d = Bytes::copy_from_slice(&buf_server[..n]);
                        rev.offer(Instant::now(), d, n);
                    }
                }
                () = sleep(deadline, now), if deadline.is_some() => {}
            }
        }
        tracing::debug!(
            "link: udp done: forward {:?}, reverse {:?}",
            fwd.stats(),
            rev.stats()
        );
        Ok(())
    }
}

/// When did the bytes arrive? The kernel's receive timestamp, not the moment
/// this task got around to reading them.
///
/// A parked tokio worker takes tens of µs to wake (more on a loaded machine);
/// stamping segments with `Instant::now()` after the read would add that to
/// every one-way delay. With `SO_TIMESTAMPNS` the kernel reports when the last
/// byte read was received (CLOCK_REALTIME); the driver converts that lag to
/// its monotonic clock and offers the segment at the arrival time. Elsewhere,
/// or if the option is refused, the read time is used.
mod rx {
    use std::io;
    use std::time::{Duration, Instant};

    use bytes::{BufMut, BytesMut};
    use tokio::net::TcpStream;

    /// A receive lag above this is not believed (clock step): use the read time.
    const LAG_MAX: Duration = Duration::from_millis(100);

    #[cfg(target_os = "linux")]
    pub(super) fn enable_timestamps(s: &TcpStream) {
        use std::os::fd::AsRawFd;
        let on: libc::c_int = 1;
        // SAFETY: setsockopt on an open socket with a correctly sized int.
        let rc = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            tracing::debug!("link: SO_TIMESTAMPNS: {}", io::Error::last_os_error());
        }
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) fn enable_timestamps(_: &TcpStream) {}

    /// Reads up to `want` bytes into `buf`; returns the count and when they arrived.
    #[cfg(target_os = "linux")]
    pub(super) fn read_timestamped(
        s: &TcpStream,
        buf: &mut BytesMut,
        want: usize,
    ) -> io::Result<(usize, Instant)> {
        use std::os::fd::AsRawFd;
        buf.reserve(want);
        let spare = buf.spare_capacity_mut();
        let len = spare.len().min(want);
        let mut iov = libc::iovec {
            iov_base: spare.as_mut_ptr().cast(),
            iov_len: len,
        };
        // Room for one cmsg carrying a timespec, u64-aligned.
        let mut control = [0u64; 8];
        let (n, stamp) = s.try_io(tokio::io::Interest::READABLE, || {
            // SAFETY: msghdr is plain data; zeroed is a valid empty header.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = std::mem::size_of_val(&control) as _;
            // SAFETY: the iovec points into `buf`'s spare capacity of `len`
            // bytes and the control buffer outlives the call.
            let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok((n as usize, timestamp_of(&msg)))
        })?;
        // SAFETY: recvmsg initialised the first `n` bytes of the spare capacity.
        unsafe { buf.advance_mut(n) };
        let now = Instant::now();
        let arrived = stamp
            .and_then(|ts| std::time::SystemTime::now().duration_since(ts).ok())
            .filter(|lag| *lag <= LAG_MAX)
            .and_then(|lag| now.checked_sub(lag))
            .unwrap_or(now);
        Ok((n, arrived))
    }

    #[cfg(target_os = "linux")]
    fn timestamp_of(msg: &libc::msghdr) -> Option<std::time::SystemTime> {
        // SAFETY: walking the control buffer the kernel just filled, with the
        // libc CMSG helpers and bounds from msg_controllen.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(msg);
            while !cmsg.is_null() {
                let c = &*cmsg;
                if c.cmsg_level == libc::SOL_SOCKET && c.cmsg_type == libc::SCM_TIMESTAMPNS {
                    let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                    let since_epoch =
                        Duration::new(ts.tv_sec.try_into().ok()?, ts.tv_nsec.try_into().ok()?);
                    return std::time::UNIX_EPOCH.checked_add(since_epoch);
                }
                cmsg = libc::CMSG_NXTHDR(msg, cmsg);
            }
            None
        }
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) fn read_timestamped(
        s: &TcpStream,
        buf: &mut BytesMut,
        want: usize,
    ) -> io::Result<(usize, Instant)> {
        let n = s.try_read_buf(&mut (&mut *buf).limit(want))?;
        Ok((n, Instant::now()))
    }
}
