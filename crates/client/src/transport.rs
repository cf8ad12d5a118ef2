//! The tokio transport: one TCP connection (or one UDP socket) carrying many RPC calls, driven
//! by the sans-IO [`CallTable`].
//!
//! ```text
//!   RpcClient::start ──(bounded mpsc)──► driver task ──framed iovecs──► writer task ──► socket
//!        ▲ oneshot                          │  ▲                                          │
//!        └──────────── Completed ───────────┘  └──── records ◄── reader task (RecordDecoder)
//!                                              └──── sleep_until(poll_timeout) ─► handle_timeout
//! ```
//!
//! The driver is deliberately thin: every decision (which XID, when a call may go out, when the
//! server counts as not responding, what to resend after a reconnect) is the [`CallTable`]'s.
//! The driver only moves bytes, reads the clock and owns the sockets:
//!
//! - **Many calls at once.** Calls are matched to replies by XID; at most
//!   [`CallTableConfig::max_in_flight`] are on the wire, at most `max_queued` wait in the table,
//!   and when both are full the driver stops taking commands from its bounded channel, so the
//!   callers' `start` awaits (backpressure, never growth).
//! - **Reconnect.** When the connection breaks (EOF, error, or the table asks after a major
//!   timeout), the driver reconnects with exponential backoff ([`RpcConfig::reconnect_delay_initial`]
//!   doubling up to [`RpcConfig::reconnect_delay_max`]) and tells the table, which resends every
//!   outstanding call once with its original XID so the server's duplicate request cache can
//!   recognise it. Over a live TCP connection nothing is ever retransmitted. A caller that
//!   must act on a new connection before it has a call to make (the NFSv4.1 client binds it
//!   to its session, for the server's callbacks) watches [`RpcClient::reconnected`].
//! - **Hard or soft.** `retrans: None` in the table config retries forever (hard, the default);
//!   `Some(n)` fails a call with [`RpcError::TimedOut`] at its n-th major timeout.
//! - **Logging.** "server HOST not responding, still trying" and "server HOST OK" once per
//!   episode, from the table's events, like the kernel client.
//! - **Source port.** As root, the connection is bound to a reserved port (below 1024) like the
//!   kernel's `resvport` default, because some servers insist on it; otherwise (or when no
//!   reserved port is free) an ordinary ephemeral port.
//! - **UDP** (`CallTableConfig::udp()`, chosen by `?proto=udp` or `--udp`). One datagram is one
//!   RPC message: no record marking (RFC 5531 §11 applies to streams only). The socket is
//!   `connect`ed to the server, so datagrams from anyone else are dropped by the kernel. Lost
//!   datagrams are the table's business: it resends on its RTO with backoff (and, once the rpc
//!   crate has it, within its congestion window); the driver only moves datagrams. There is no
//!   connection to lose, so no reconnect. Replies are read into 64 KiB buffers, the largest
//!   datagram; the client caps rsize/wsize at 32 KiB for UDP so every reply fits.
//! - **Calls from the server** (the NFSv4.1 back channel, RFC 8881 §2.10.3.1) arrive on the same
//!   connection. The table sorts each record by `msg_type` ([`CallTable::handle_record`]): a
//!   CALL is parsed and handed to the [`CallbackService`] registered in
//!   [`RpcConfig::callbacks`], on its own task, and its reply goes out through the same writer
//!   as our calls (whole records: they never interleave). With no service registered the
//!   answer is PROG_UNAVAIL (RFC 5531 §9: the program is not exported here), never silence,
//!   so the server fails its call at once instead of waiting for its timeout. At most
//!   [`RpcConfig::callbacks_in_flight_max`] callbacks run at once; a call beyond that is
//!   answered SYSTEM_ERR, because holding the socket's reader until one finishes would also
//!   hold up the replies to our own calls. A callback still running when its connection breaks
//!   has nowhere to answer: its reply is dropped (the server has failed that call already).
//! - **RPC-with-TLS** (RFC 9289, [`RpcConfig::tls`]): every TCP connection, the first and each
//!   reconnect, sends the AUTH_TLS probe and runs the TLS 1.3 handshake before anything else
//!   ([`sluice_tcp::tls::connect_upgrade_stream`], within [`RpcConfig::connect_timeout`]); the
//!   reader and writer then work on the TLS stream's halves, and the writer flushes rustls
//!   after each batch. Where the kernel has TLS the record layer goes to it after the
//!   handshake (kernel TLS, [`sluice_tcp::ktls`]): the halves are then a plain socket's. The callbacks of the back channel arrive on the same, encrypted, connection. A
//!   server that does not offer TLS fails the connect with that reason, never a silent
//!   fallback to plaintext.

use bytes::{Buf, Bytes, BytesMut};
use rand::Rng;
use sluice_engine::trunk::{RecvCounters, Stopped, Trunk, TrunkConfig};
use sluice_rpc::client::Received;
use sluice_rpc::client::Transport;
use sluice_rpc::client::{
    CallStats, CallTable, CallTableConfig, Event, ProcId, Reply, RpcError, Transmit,
};
use sluice_rpc::record::{frame, RecordDecoder, RecordDecoderConfig, MAX_FRAGMENT_BYTES};
use sluice_rpc::rtt::TimerClass;
use sluice_rpc::server::{self as rpcs, CallParse, RpcCall};
use sluice_tcp::tls::{ClientTls, ReadHalf, Stream, TlsSession, WriteHalf};
use sluice_xdr::rpc::OpaqueAuth;
use sluice_xdr::Reader;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream, UdpSocket};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Settings of an [`RpcClient`].
#[derive(Debug, Clone)]
pub struct RpcConfig {
    /// The call table: slots, queue bound, major timeout, hard/soft.
    pub table: CallTableConfig,
    /// Wait before the first reconnect attempt after a connection loss. Default 100 ms: an
    /// immediate retry would hammer a server that is restarting.
    pub reconnect_delay_initial: Duration,
    /// Cap of the doubling reconnect delay. Default 5 s: a restarted server is found within
    /// seconds, and a dead one costs one connect attempt per 5 s.
    pub reconnect_delay_max: Duration,
    /// How long the very first connection attempt may take. Default 10 s.
    pub connect_timeout: Duration,
    /// Bind to a reserved source port when running as root. Default true.
    pub privileged_port: bool,
    /// Largest reply record accepted. Default 4 MiB + 64 KiB (the record decoder's default):
    /// a 4 MiB READ reply and its headers. rsize is capped below it.
    pub max_record_bytes: usize,
    /// The server's name in log messages ("server NAME not responding").
    pub server_name: String,
    /// Answers calls the server makes on this connection (callbacks). Default `None`: they
    /// are answered PROG_UNAVAIL.
    pub callbacks: Option<Callbacks>,
    /// Callbacks handled at once on one connection; more are answered SYSTEM_ERR. Default 16,
    /// the most back-channel slots Linux's client offers a server (`ca_maxrequests`), so a
    /// server that respects the session's slots never meets the bound.
    pub callbacks_in_flight_max: usize,
    /// RPC-with-TLS on every connection (`?xprtsec=tls|mtls`). Default `None`: plaintext.
    pub tls: Option<RpcTls>,
}

/// What a connection needs to upgrade itself to TLS.
#[derive(Debug, Clone)]
pub struct RpcTls {
    /// The CA to trust and, for mtls, the certificate to present.
    pub client: ClientTls,
    /// The name the server's certificate must carry: the URL's host (a DNS name or an IP).
    pub server_name: String,
    /// Program and version of the probe's NULL call (the service the connection is for).
    pub probe_program: (u32, u32),
}

/// A call the server made on our connection.
#[derive(Debug, Clone)]
pub struct IncomingCall {
    /// The checked call header (program, version, procedure, credentials).
    pub call: RpcCall,
    /// The whole record; [`IncomingCall::args`] reads the arguments from it.
    pub record: Vec<Bytes>,
}

impl IncomingCall {
    /// A reader positioned at the call's arguments.
    pub fn args(&self) -> Reader<'_> {
        self.call.args(&self.record)
    }
}

/// What a [`CallbackService`] answers: results (the reply body after the accepted-reply
/// header), or the RPC-level refusal the server will see as its call's error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallbackReply {
    /// SUCCESS, followed by these result segments (sent as they are, not copied).
    Results(Vec<Bytes>),
    ProgUnavail,
    ProgMismatch {
        low: u32,
        high: u32,
    },
    ProcUnavail,
    GarbageArgs,
    SystemErr,
}

/// Answers the server's calls on a connection (the NFSv4.1 callback program, say).
pub trait CallbackService: Send + Sync + 'static {
    /// Handles one call. Runs on its own task; may take as long as it likes (the server times
    /// its call out, not us).
    fn handle(
        self: Arc<Self>,
        call: IncomingCall,
    ) -> Pin<Box<dyn Future<Output = CallbackReply> + Send>>;
}

/// A registered [`CallbackService`] (a newtype so that [`RpcConfig`] stays `Debug`).
#[derive(Clone)]
pub struct Callbacks(pub Arc<dyn CallbackService>);

impl fmt::Debug for Callbacks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Callbacks(..)")
    }
}

impl Default for RpcConfig {
    fn default() -> Self {
        RpcConfig {
            table: CallTableConfig::tcp(),
            reconnect_delay_initial: Duration::from_millis(100),
            reconnect_delay_max: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            privileged_port: true,
            max_record_bytes: RecordDecoderConfig::DEFAULT_MAX_RECORD_BYTES,
            server_name: String::new(),
            callbacks: None,
            callbacks_in_flight_max: 16,
            tls: None,
        }
    }
}

/// Why a call produced no reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The server answered with an RPC-level error, or (soft mode) never answered.
    Rpc(RpcError),
    /// The transport is shut down (the driver ended).
    Closed,
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Rpc(e) => write!(f, "RPC error: {e}"),
            CallError::Closed => write!(f, "RPC transport closed"),
        }
    }
}

impl std::error::Error for CallError {}

/// A finished call: the reply and how it went.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    pub reply: Reply,
    /// How many times the call went on the wire (1 unless resent after a reconnect).
    pub transmissions: u32,
    /// From the start of the call to its reply, queueing included.
    pub elapsed: Duration,
    /// The table's RTT sample (last transmission to reply; `None` for a call sent more than
    /// once, by Karn's rule).
    pub rtt_sample: Option<Duration>,
    /// Bytes of the reply record.
    pub reply_bytes: usize,
}

/// Counters of the transport, for `--stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportStats {
    pub table: CallStats,
    /// Connections established after the first.
    pub reconnects: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Calls from the server answered by the callback service.
    pub callbacks_answered: u64,
    /// Calls from the server refused: no service (PROG_UNAVAIL), too many at once
    /// (SYSTEM_ERR), or a header that did not parse or authenticate.
    pub callbacks_refused: u64,
    /// Connections (the first and each reconnect) upgraded to RPC-with-TLS.
    pub tls_handshakes: u64,
    /// What the latest TLS handshake settled on; `None` while no connection used TLS.
    pub tls: Option<TlsSession>,
}

impl TransportStats {
    /// The counters of two transports added up (a client with several connections).
    pub fn plus(&self, o: &TransportStats) -> TransportStats {
        TransportStats {
            table: self.table.plus(&o.table),
            reconnects: self.reconnects + o.reconnects,
            bytes_sent: self.bytes_sent + o.bytes_sent,
            bytes_received: self.bytes_received + o.bytes_received,
            callbacks_answered: self.callbacks_answered + o.callbacks_answered,
            callbacks_refused: self.callbacks_refused + o.callbacks_refused,
            tls_handshakes: self.tls_handshakes + o.tls_handshakes,
            tls: self.tls.or(o.tls),
        }
    }
}

/// A call in progress; await [`PendingCall::wait`] for its outcome.
#[derive(Debug)]
pub struct PendingCall {
    rx: oneshot::Receiver<Result<CallOutcome, CallError>>,
}

impl PendingCall {
    pub async fn wait(self) -> Result<CallOutcome, CallError> {
        self.rx.await.unwrap_or(Err(CallError::Closed))
    }
}

/// A handle on one RPC connection. Cheap to clone; the connection lives while handles or
/// calls do.
#[derive(Debug, Clone)]
pub struct RpcClient {
    commands: mpsc::Sender<Command>,
    stats: Arc<Mutex<TransportStats>>,
    recv: Arc<RecvGauge>,
    addr: SocketAddr,
    udp: bool,
    /// Connections established after the first, published once the driver's counters say so
    /// (see [`RpcClient::reconnected`]).
    reconnected: tokio::sync::watch::Receiver<u64>,
}

/// What a connection's reader did, counted as it happens (lock-free: read on every call by
/// [`Connections`]' automatic `nconnect`). Kept across reconnects.
#[derive(Debug, Default)]
pub struct RecvGauge {
    bytes: AtomicU64,
    reads: AtomicU64,
    reads_full: AtomicU64,
}

impl RecvGauge {
    fn record(&self, n: usize, full: bool) {
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        self.reads.fetch_add(1, Ordering::Relaxed);
        if full {
            self.reads_full.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counters so far.
    pub fn counters(&self) -> RecvCounters {
        RecvCounters {
            bytes: self.bytes.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
            reads_full: self.reads_full.load(Ordering::Relaxed),
        }
    }
}

/// The first socket, opened by `connect`.
enum Socket {
    Tcp(Stream),
    Udp(UdpSocket),
}

#[derive(Debug)]
struct Command {
    proc_id: ProcId,
    cred: OpaqueAuth,
    args: Vec<Bytes>,
    class: TimerClass,
    reply: oneshot::Sender<Result<CallOutcome, CallError>>,
}

impl RpcClient {
    /// Connects to `addr` and starts the driver task. Fails if the first connection cannot be
    /// made: a server that is not there at all is an error for the user, not a wait.
    pub async fn connect(addr: SocketAddr, config: RpcConfig) -> io::Result<RpcClient> {
        let (client, run) = Self::open(addr, config).await?;
        tokio::spawn(run);
        Ok(client)
    }

    /// Like [`RpcClient::connect`], but the connection's driver, reader and writer run on a
    /// thread of their own (a current-thread runtime there), which ends when the last handle
    /// and call are gone. For a caller on a current-thread runtime (the client commands) that
    /// wants a further connection to receive in parallel with its first: on one runtime thread,
    /// N connections' readers take turns on one core, and the copy of the replies out of the
    /// sockets, which is what more connections are for, is not spread at all.
    pub async fn connect_on_own_thread(
        addr: SocketAddr,
        config: RpcConfig,
    ) -> io::Result<RpcClient> {
        let (tx, rx) = oneshot::channel();
        std::thread::Builder::new()
            .name("sluice-conn".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                rt.block_on(async move {
                    match Self::open(addr, config).await {
                        Ok((client, run)) => {
                            if tx.send(Ok(client)).is_ok() {
                                run.await;
                            }
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e));
                        }
                    }
                });
            })?;
        rx.await
            .map_err(|_| io::Error::other("the connection's thread ended before it connected"))?
    }

    /// A further connection that receives in parallel with the caller's: on a thread of its
    /// own ([`RpcClient::connect_on_own_thread`]) from a current-thread runtime, as a task of
    /// a multi-thread one (whose workers already spread the connections' readers).
    pub async fn connect_parallel(addr: SocketAddr, config: RpcConfig) -> io::Result<RpcClient> {
        use tokio::runtime::{Handle, RuntimeFlavor};
        match Handle::current().runtime_flavor() {
            RuntimeFlavor::CurrentThread => Self::connect_on_own_thread(addr, config).await,
            _ => Self::connect(addr, config).await,
        }
    }

    /// The socket and the handle, and the driver to run (on whatever runtime the caller picks).
    async fn open(
        addr: SocketAddr,
        mut config: RpcConfig,
    ) -> io::Result<(RpcClient, impl Future<Output = ()> + Send + 'static)> {
        if config.server_name.is_empty() {
            config.server_name = addr.ip().to_string();
        }
        let udp = config.table.transport == Transport::Udp;
        let socket = if config.table.transport == Transport::Udp {
            Socket::Udp(udp_socket(addr, config.privileged_port).await?)
        } else {
            let stream = tokio::time::timeout(
                config.connect_timeout,
                connect_stream(
                    addr,
                    config.privileged_port,
                    config.tls.as_ref(),
                    config.connect_timeout,
                ),
            )
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connection timed out"))??;
            Socket::Tcp(stream)
        };
        let (tx, rx) = mpsc::channel(config.table.max_queued.max(1));
        let stats = Arc::new(Mutex::new(TransportStats::default()));
        let recv = Arc::new(RecvGauge::default());
        let xid_seed: u32 = rand::thread_rng().gen();
        let (reconnected_tx, reconnected) = tokio::sync::watch::channel(0);
        let driver = Driver::new(
            addr,
            config,
            xid_seed,
            stats.clone(),
            recv.clone(),
            reconnected_tx,
        );
        let client = RpcClient {
            commands: tx,
            stats,
            recv,
            addr,
            udp,
            reconnected,
        };
        Ok((client, driver.run(rx, socket)))
    }

    /// True for a UDP transport.
    pub fn is_udp(&self) -> bool {
        self.udp
    }

    /// The server address this client talks to.
    pub fn peer_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Starts a call; the returned [`PendingCall`] resolves to its outcome. Awaits only while the
    /// call table and its queue are full.
    pub async fn start(
        &self,
        proc_id: ProcId,
        cred: &OpaqueAuth,
        args: Vec<Bytes>,
        class: TimerClass,
    ) -> PendingCall {
        let (reply, rx) = oneshot::channel();
        let cmd = Command {
            proc_id,
            cred: cred.clone(),
            args,
            class,
            reply,
        };
        // If the driver is gone, `cmd.reply` is dropped with the error and `wait` sees Closed.
        let _ = self.commands.send(cmd).await;
        PendingCall { rx }
    }

    /// Starts a call and waits for it.
    pub async fn call(
        &self,
        proc_id: ProcId,
        cred: &OpaqueAuth,
        args: Vec<Bytes>,
        class: TimerClass,
    ) -> Result<CallOutcome, CallError> {
        self.start(proc_id, cred, args, class).await.wait().await
    }

    /// A snapshot of the transport counters.
    pub fn stats(&self) -> TransportStats {
        *self.stats.lock().expect("stats lock")
    }

    /// What this connection's reader did so far.
    pub fn recv_counters(&self) -> RecvCounters {
        self.recv.counters()
    }

    /// Watches the reconnect count ([`TransportStats::reconnects`]): it changes as soon as a
    /// new connection is up, and by then [`RpcClient::stats`] shows the new count. For a caller
    /// that must act on a new connection before it has anything to send (the NFSv4.1 client
    /// binds it to its session at once, so that the server's callbacks reach it).
    pub fn reconnected(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reconnected.clone()
    }
}

/// A client's connections to one NFS service (`nconnect`), used in turn.
///
/// Each [`RpcClient`] has its own call table, reader and writer task, so N connections spread
/// the receive path (the copy of every reply out of its socket) over up to N threads. Calls go
/// round robin rather than to the least busy connection: every call of a stream costs about the
/// same, so turns balance as well, and a fixed rotation keeps one file's READs on all
/// connections at once, which is the point of having them. NFSv3 uses them as they are; the
/// NFSv4.1 client first binds each to its session (BIND_CONN_TO_SESSION, session trunking).
#[derive(Debug)]
pub struct Connections {
    /// Room for every connection the client may have; the first `active` are open and carry
    /// calls. A slot past them may hold a connection being bound (NFSv4.1) before it counts.
    slots: Vec<OnceLock<RpcClient>>,
    active: AtomicUsize,
    /// Which connection the next call goes to (modulo `active`).
    next: AtomicUsize,
    /// Automatic `nconnect` ([`Connections::grow_up_to`]); `None` when the count is fixed.
    auto: Option<Auto>,
}

/// The automatic-`nconnect` state of [`Connections`] (the policy is
/// [`sluice_engine::trunk`]).
#[derive(Debug)]
struct Auto {
    trunk: Mutex<Trunk>,
    config: RpcConfig,
    /// Calls started; the counters are looked at every [`LOOK_EVERY_CALLS`].
    calls: AtomicU64,
}

/// How often (in calls started) the automatic `nconnect` adds up the readers' counters: often
/// next to a window of 16 MiB of 1 MiB READs, rare next to everything else a call costs.
const LOOK_EVERY_CALLS: u64 = 4;

impl Connections {
    /// The connections of a client that so far has only `first`.
    pub fn new(first: RpcClient) -> Connections {
        Connections {
            slots: vec![OnceLock::from(first)],
            active: AtomicUsize::new(1),
            next: AtomicUsize::new(0),
            auto: None,
        }
    }

    /// Opens connections to the first one's server until there are `n` (the message of the
    /// error says which one failed, for the user).
    pub async fn open(&mut self, n: usize, config: &RpcConfig) -> Result<(), String> {
        let addr = self.first().peer_addr();
        let mut have = *self.active.get_mut();
        while have < n {
            let more = RpcClient::connect_parallel(addr, config.clone())
                .await
                .map_err(|e| {
                    format!(
                        "cannot open connection {} of {n} (nconnect) to {addr}: {e}",
                        have + 1
                    )
                })?;
            if have == self.slots.len() {
                self.slots.push(OnceLock::new());
            }
            let _ = self.slots[have].set(more);
            have += 1;
            *self.active.get_mut() = have;
        }
        Ok(())
    }

    /// Lets the client add connections, up to `policy.max` in all, when its receive path is
    /// the limit ([`sluice_engine::trunk`]); `config` is the new connections'. Nothing
    /// changes when `max` is not above what is open.
    pub fn grow_up_to(&mut self, policy: TrunkConfig, config: &RpcConfig) {
        let have = *self.active.get_mut();
        if policy.max <= have || self.first().is_udp() {
            return;
        }
        self.slots.resize_with(policy.max, OnceLock::new);
        self.auto = Some(Auto {
            trunk: Mutex::new(Trunk::new(policy, have)),
            config: config.clone(),
            calls: AtomicU64::new(0),
        });
    }

    /// Keeps the first `n` connections (at least one), closes the others, and fixes the count.
    pub fn truncate(&mut self, n: usize) {
        let n = n.max(1).min(*self.active.get_mut());
        self.slots.truncate(n);
        *self.active.get_mut() = n;
        self.auto = None;
    }

    /// The connection the next call goes to, and its index.
    pub fn next(&self) -> (usize, &RpcClient) {
        let n = self.active.load(Ordering::Acquire);
        let i = self.next.fetch_add(1, Ordering::Relaxed) % n;
        (i, self.get(i))
    }

    /// The first connection: the one a client sets up its session or mount on.
    pub fn first(&self) -> &RpcClient {
        self.get(0)
    }

    /// Connection `i`: one of the first [`Connections::len`], or one just handed to
    /// [`Connections::place`].
    pub fn get(&self, i: usize) -> &RpcClient {
        self.slots[i].get().expect("a connection that was opened")
    }

    /// Connections carrying calls.
    pub fn len(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }

    /// Never true: there is always the first connection.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Connections the client may come to have (what `grow_up_to` allows, else `len`).
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Called as each call starts: `Some(i)` when the policy wants connection `i` opened now.
    /// The caller then opens it ([`Connections::connect_more`]), places it, prepares it (an
    /// NFSv4.1 session binds it) and [`Connections::activate`]s it, or gives up
    /// ([`Connections::growth_failed`]). At most one is asked for at a time.
    pub fn growth_due(&self) -> Option<usize> {
        let auto = self.auto.as_ref()?;
        if auto.calls.fetch_add(1, Ordering::Relaxed) % LOOK_EVERY_CALLS != 0 {
            return None;
        }
        let c = self.recv_counters();
        let mut trunk = auto.trunk.lock().expect("trunk lock");
        if !trunk.due(c.bytes) {
            return None;
        }
        trunk.look(Instant::now(), c).then(|| self.len())
    }

    /// Opens a connection like the first one (to be placed in the slot `growth_due` gave).
    pub async fn connect_more(&self) -> io::Result<RpcClient> {
        let config = match &self.auto {
            Some(a) => a.config.clone(),
            None => return Err(io::Error::other("this client's connection count is fixed")),
        };
        RpcClient::connect_parallel(self.first().peer_addr(), config).await
    }

    /// Puts a new connection in slot `i` (from `growth_due`), not carrying calls yet.
    pub fn place(&self, i: usize, rpc: RpcClient) {
        let _ = self.slots[i].set(rpc);
    }

    /// Connection `i` (placed) starts carrying calls.
    pub fn activate(&self, i: usize) {
        self.active.store(i + 1, Ordering::Release);
        if let Some(a) = &self.auto {
            let c = self.recv_counters();
            a.trunk
                .lock()
                .expect("trunk lock")
                .opened(Instant::now(), c);
        }
        tracing::debug!(
            conns = i + 1,
            received = self.recv_counters().bytes,
            "automatic nconnect: the receive path was the limit, one more connection"
        );
    }

    /// The connection asked for could not be opened or prepared: no more are asked for.
    pub fn growth_failed(&self, why: &str) {
        if let Some(a) = &self.auto {
            a.trunk.lock().expect("trunk lock").failed();
        }
        tracing::debug!("automatic nconnect: no more connections ({why})");
    }

    /// How the connection count came about, for statistics: `None` when it is fixed.
    pub fn growth_note(&self) -> Option<String> {
        let a = self.auto.as_ref()?;
        let t = a.trunk.lock().expect("trunk lock");
        let why = match t.stopped() {
            None => "may add more while the receive path is the limit",
            Some(Stopped::AtMax) => "at its ceiling",
            Some(Stopped::NoGain) => "stopped: the last one added did not raise the rate",
            Some(Stopped::Failed) => "stopped: opening one failed",
        };
        Some(format!(
            "automatic nconnect: {} of at most {} connections ({why})",
            self.len(),
            self.capacity()
        ))
    }

    fn recv_counters(&self) -> RecvCounters {
        (0..self.len()).fold(RecvCounters::default(), |sum, i| {
            let c = self.get(i).recv_counters();
            RecvCounters {
                bytes: sum.bytes + c.bytes,
                reads: sum.reads + c.reads,
                reads_full: sum.reads_full + c.reads_full,
            }
        })
    }

    /// The counters of each connection, in order.
    pub fn stats_each(&self) -> Vec<TransportStats> {
        (0..self.len()).map(|i| self.get(i).stats()).collect()
    }

    /// The counters of all connections added up.
    pub fn stats(&self) -> TransportStats {
        self.stats_each()
            .iter()
            .fold(TransportStats::default(), |sum, c| sum.plus(c))
    }
}

// --- the driver ------------------------------------------------------------------------------

/// What the connection tasks report to the driver, tagged with the connection generation so
/// that news from a connection already given up is ignored.
enum ConnEvent {
    Record(u64, Vec<Bytes>),
    Closed(u64, String),
    Connected(u64, Stream),
    ConnectedUdp(u64, UdpSocket),
    ConnectFailed(u64, String),
    /// A callback finished: its reply message, for the connection it arrived on.
    CallbackDone(u64, Vec<Bytes>),
}

struct Conn {
    writer: mpsc::UnboundedSender<Vec<Bytes>>,
    reader: JoinHandle<()>,
    writer_task: JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer_task.abort();
    }
}

struct Driver {
    addr: SocketAddr,
    config: RpcConfig,
    table: CallTable,
    pending: HashMap<u32, Pending>,
    /// Commands refused with Busy, retried after completions (the channel is not read
    /// meanwhile).
    overflow: VecDeque<Command>,
    conn: Option<Conn>,
    generation: u64,
    connecting: bool,
    reconnect_delay: Duration,
    events_tx: mpsc::UnboundedSender<ConnEvent>,
    events_rx: mpsc::UnboundedReceiver<ConnEvent>,
    stats: Arc<Mutex<TransportStats>>,
    recv: Arc<RecvGauge>,
    local: TransportStats,
    /// Callbacks running now (bounded by `callbacks_in_flight_max`).
    callbacks_running: usize,
    /// Publishes `local.reconnects` after `stats` (see [`RpcClient::reconnected`]).
    reconnected: tokio::sync::watch::Sender<u64>,
}

struct Pending {
    reply: oneshot::Sender<Result<CallOutcome, CallError>>,
}

impl Driver {
    fn new(
        addr: SocketAddr,
        config: RpcConfig,
        xid_seed: u32,
        stats: Arc<Mutex<TransportStats>>,
        recv: Arc<RecvGauge>,
        reconnected: tokio::sync::watch::Sender<u64>,
    ) -> Self {
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        Driver {
            addr,
            table: CallTable::new(config.table, xid_seed),
            reconnect_delay: config.reconnect_delay_initial,
            config,
            pending: HashMap::new(),
            overflow: VecDeque::new(),
            conn: None,
            generation: 0,
            connecting: false,
            events_tx,
            events_rx,
            stats,
            recv,
            local: TransportStats::default(),
            callbacks_running: 0,
            reconnected,
        }
    }

    async fn run(mut self, mut commands: mpsc::Receiver<Command>, socket: Socket) {
        match socket {
            Socket::Tcp(stream) => self.attach(stream),
            Socket::Udp(sock) => self.attach_udp(sock),
        }
        let mut closing = false;
        loop {
            self.flush();
            if closing && self.pending.is_empty() && self.overflow.is_empty() {
                break;
            }
            let deadline = self.table.poll_timeout();
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                cmd = commands.recv(), if self.overflow.is_empty() && !closing => match cmd {
                    Some(cmd) => self.start(cmd),
                    None => closing = true,
                },
                Some(ev) = self.events_rx.recv() => self.handle_conn_event(ev),
                _ = sleep => self.table.handle_timeout(Instant::now()),
            }
        }
    }

    fn start(&mut self, cmd: Command) {
        let now = Instant::now();
        let class = cmd.class;
        match self
            .table
            .start_call(now, cmd.proc_id, &cmd.cred, cmd.args.clone(), class)
        {
            Ok(xid) => {
                self.pending.insert(xid, Pending { reply: cmd.reply });
            }
            Err(_busy) => self.overflow.push_back(cmd),
        }
    }

    /// Retries refused commands, sends what the table wants sent, acts on its events and
    /// publishes the counters.
    fn flush(&mut self) {
        self.retry_overflow();
        self.transmit();
        while let Some(ev) = self.table.poll_event() {
            match ev {
                Event::NotResponding => tracing::warn!(
                    "server {} not responding, still trying",
                    self.config.server_name
                ),
                Event::Ok => tracing::warn!("server {} OK", self.config.server_name),
                Event::Reconnect if self.udp() => {
                    // Nothing to reconnect over UDP; the table keeps retransmitting.
                    self.table.handle_connected(Instant::now());
                }
                Event::Reconnect => {
                    // The table already considers the connection gone.
                    self.conn = None;
                    self.schedule_reconnect();
                }
                Event::Failed { xid, error } => {
                    if let Some(p) = self.pending.remove(&xid) {
                        let _ = p.reply.send(Err(CallError::Rpc(error)));
                    }
                }
            }
        }
        // A soft failure frees a slot.
        self.retry_overflow();
        self.transmit();
        self.local.table = *self.table.stats();
        *self.stats.lock().expect("stats lock") = self.local;
        // After the counters: a watcher woken by the new count finds it in `stats` too.
        let reconnects = self.local.reconnects;
        self.reconnected.send_if_modified(|n| {
            let changed = *n != reconnects;
            *n = reconnects;
            changed
        });
    }

    fn transmit(&mut self) {
        let Some(conn) = &self.conn else {
            return;
        };
        let now = Instant::now();
        let udp = self.udp();
        while let Some(Transmit { segments, .. }) = self.table.poll_transmit(now) {
            // A datagram is the whole message; a stream needs record marking.
            let framed = if udp {
                segments
            } else {
                frame(segments, MAX_FRAGMENT_BYTES)
            };
            self.local.bytes_sent += framed.iter().map(|b| b.len() as u64).sum::<u64>();
            if conn.writer.send(framed).is_err() {
                // The writer died; its Closed event is on its way and the table will resend.
                break;
            }
        }
    }

    fn udp(&self) -> bool {
        self.config.table.transport == Transport::Udp
    }

    fn retry_overflow(&mut self) {
        while let Some(cmd) = self.overflow.pop_front() {
            let before = self.overflow.len();
            self.start(cmd);
            if self.overflow.len() > before {
                // Refused again (pushed to the back): restore the order, wait for a completion.
                let cmd = self.overflow.pop_back().expect("just pushed");
                self.overflow.push_front(cmd);
                break;
            }
        }
    }

    fn handle_conn_event(&mut self, ev: ConnEvent) {
        let now = Instant::now();
        match ev {
            ConnEvent::Record(generation, record) if generation == self.generation => {
                let reply_bytes = record.iter().map(|b| b.len()).sum();
                let marker = if self.udp() { 0 } else { 4 };
                self.local.bytes_received += reply_bytes as u64 + marker;
                let done = match self.table.handle_record(now, record) {
                    Received::Reply(done) => done,
                    Received::Call(call) => {
                        self.start_callback(generation, call);
                        None
                    }
                };
                if let Some(done) = done {
                    if let Some(p) = self.pending.remove(&done.xid) {
                        let outcome =
                            done.result
                                .map_err(CallError::Rpc)
                                .map(|reply| CallOutcome {
                                    reply,
                                    transmissions: done.transmissions,
                                    elapsed: done.elapsed,
                                    rtt_sample: done.rtt_sample,
                                    reply_bytes,
                                });
                        let _ = p.reply.send(outcome);
                    }
                }
            }
            ConnEvent::Closed(generation, why) if generation == self.generation && self.udp() => {
                // A UDP socket error (an ICMP port unreachable, say) is not a lost connection:
                // the table's retransmissions carry on over a fresh socket.
                tracing::debug!("UDP socket to {} failed: {why}; reopening", self.addr);
                self.conn = None;
                self.schedule_reconnect();
            }
            ConnEvent::Closed(generation, why)
                if generation == self.generation && self.conn.is_some() =>
            {
                self.conn = None;
                tracing::debug!("connection to {} lost: {why}", self.addr);
                self.table.handle_disconnect(now);
                self.schedule_reconnect();
            }
            ConnEvent::ConnectedUdp(generation, sock) if generation == self.generation => {
                self.connecting = false;
                self.reconnect_delay = self.config.reconnect_delay_initial;
                self.local.reconnects += 1;
                self.attach_udp(sock);
            }
            ConnEvent::Connected(generation, stream) if generation == self.generation => {
                self.connecting = false;
                self.reconnect_delay = self.config.reconnect_delay_initial;
                self.local.reconnects += 1;
                tracing::debug!("reconnected to {}", self.addr);
                self.attach(stream);
                self.table.handle_connected(now);
            }
            ConnEvent::ConnectFailed(generation, why) if generation == self.generation => {
                tracing::debug!("reconnect to {} failed: {why}", self.addr);
                self.connecting = false;
                self.schedule_reconnect();
            }
            ConnEvent::CallbackDone(generation, reply) => {
                self.callbacks_running -= 1;
                if generation == self.generation {
                    self.send_message(reply);
                }
                // Otherwise it arrived on a connection since lost: nowhere to answer.
            }
            _ => {} // news from a connection already given up
        }
    }

    /// A CALL from the server: answer it through the callback service, on its own task, or
    /// refuse it at once (see the module docs).
    fn start_callback(&mut self, generation: u64, record: Vec<Bytes>) {
        let parsed = rpcs::parse_call(&record);
        let CallParse::Call(call) = parsed else {
            // Bad RPC version or credentials: the same answers a server gives.
            self.local.callbacks_refused += 1;
            if let Some(reply) = rpcs::reply_for(&parsed) {
                self.send_message(reply);
            }
            return;
        };
        let xid = call.xid;
        let Some(Callbacks(svc)) = self.config.callbacks.clone() else {
            self.local.callbacks_refused += 1;
            self.send_message(rpcs::prog_unavail(xid));
            return;
        };
        if self.callbacks_running >= self.config.callbacks_in_flight_max {
            self.local.callbacks_refused += 1;
            self.send_message(rpcs::system_err(xid));
            return;
        }
        self.callbacks_running += 1;
        self.local.callbacks_answered += 1;
        let tx = self.events_tx.clone();
        tokio::spawn(async move {
            let reply = svc.handle(IncomingCall { call, record }).await;
            let _ = tx.send(ConnEvent::CallbackDone(
                generation,
                callback_reply(xid, reply),
            ));
        });
    }

    /// Sends one whole message (ours or a reply to the server) on the current connection.
    fn send_message(&mut self, msg: Vec<Bytes>) {
        let Some(conn) = &self.conn else {
            return;
        };
        let framed = if self.udp() {
            msg
        } else {
            frame(msg, MAX_FRAGMENT_BYTES)
        };
        self.local.bytes_sent += framed.iter().map(|b| b.len() as u64).sum::<u64>();
        // A dead writer reports Closed on its own; the reply is lost with the connection.
        let _ = conn.writer.send(framed);
    }

    fn attach(&mut self, stream: Stream) {
        self.generation += 1;
        let generation = self.generation;
        let _ = stream.tcp().set_nodelay(true);
        if let Some(session) = stream.tls_session() {
            self.local.tls_handshakes += 1;
            self.local.tls = Some(session);
        }
        if let Ok(peer) = stream.tcp().peer_addr() {
            match sluice_tcp::tune(stream.tcp(), peer.ip()) {
                Ok(Some(cc)) => {
                    tracing::debug!(%peer, cc, "loopback server: congestion control switched")
                }
                Ok(None) => {}
                Err(e) => tracing::debug!(%peer, error = %e, "congestion control left as is"),
            }
        }
        let (rd, wr) = stream.into_split();
        let (wtx, wrx) = mpsc::unbounded_channel();
        let decoder = RecordDecoder::new(RecordDecoderConfig {
            max_record_bytes: self.config.max_record_bytes,
            ..RecordDecoderConfig::default()
        });
        let reader = tokio::spawn(read_loop(
            rd,
            decoder,
            generation,
            self.events_tx.clone(),
            self.recv.clone(),
        ));
        let writer_task = tokio::spawn(write_loop(wr, wrx, generation, self.events_tx.clone()));
        self.conn = Some(Conn {
            writer: wtx,
            reader,
            writer_task,
        });
    }

    fn attach_udp(&mut self, sock: UdpSocket) {
        self.generation += 1;
        let generation = self.generation;
        let sock = Arc::new(sock);
        let (wtx, wrx) = mpsc::unbounded_channel();
        let reader = tokio::spawn(udp_read_loop(
            sock.clone(),
            generation,
            self.events_tx.clone(),
        ));
        let writer_task = tokio::spawn(udp_write_loop(
            sock,
            wrx,
            generation,
            self.events_tx.clone(),
        ));
        self.conn = Some(Conn {
            writer: wtx,
            reader,
            writer_task,
        });
    }

    fn schedule_reconnect(&mut self) {
        if self.connecting {
            return;
        }
        self.connecting = true;
        // A new generation: anything the old connection still reports is ignored.
        self.generation += 1;
        let generation = self.generation;
        let delay = self.reconnect_delay;
        self.reconnect_delay = (self.reconnect_delay * 2).min(self.config.reconnect_delay_max);
        let addr = self.addr;
        let privileged = self.config.privileged_port;
        let timeout = self.config.connect_timeout;
        let tls = self.config.tls.clone();
        let tx = self.events_tx.clone();
        let udp = self.udp();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if udp {
                let ev = match udp_socket(addr, privileged).await {
                    Ok(s) => ConnEvent::ConnectedUdp(generation, s),
                    Err(e) => ConnEvent::ConnectFailed(generation, e.to_string()),
                };
                let _ = tx.send(ev);
                return;
            }
            let ev = match tokio::time::timeout(
                timeout,
                connect_stream(addr, privileged, tls.as_ref(), timeout),
            )
            .await
            {
                Ok(Ok(s)) => ConnEvent::Connected(generation, s),
                Ok(Err(e)) => ConnEvent::ConnectFailed(generation, e.to_string()),
                Err(_) => ConnEvent::ConnectFailed(generation, "timed out".into()),
            };
            let _ = tx.send(ev);
        });
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        for (_, p) in self.pending.drain() {
            let _ = p.reply.send(Err(CallError::Closed));
        }
    }
}

/// The reply message to a callback.
fn callback_reply(xid: u32, reply: CallbackReply) -> Vec<Bytes> {
    match reply {
        CallbackReply::Results(results) => {
            let mut msg = rpcs::success_header(xid).into_segments();
            msg.extend(results.into_iter().filter(|s| !s.is_empty()));
            msg
        }
        CallbackReply::ProgUnavail => rpcs::prog_unavail(xid),
        CallbackReply::ProgMismatch { low, high } => rpcs::prog_mismatch(xid, low, high),
        CallbackReply::ProcUnavail => rpcs::proc_unavail(xid),
        CallbackReply::GarbageArgs => rpcs::garbage_args(xid),
        CallbackReply::SystemErr => rpcs::system_err(xid),
    }
}

/// Reads the socket, reassembles records and hands them to the driver.
async fn read_loop(
    mut rd: ReadHalf,
    mut decoder: RecordDecoder,
    generation: u64,
    tx: mpsc::UnboundedSender<ConnEvent>,
    gauge: Arc<RecvGauge>,
) {
    // Reads land in one growing buffer that is cut into `Bytes` per read, so a 1 MiB READ reply
    // is a handful of zero-copy segments. 256 KiB per read: a few syscalls per 1 MiB reply.
    // Under TLS the decrypted records go to the decoder from where they were opened.
    const READ_BYTES: usize = 256 * 1024;
    let mut buf = BytesMut::new();
    let why = loop {
        match rd
            .read_into(&mut decoder, &mut buf, READ_BYTES / 4, READ_BYTES)
            .await
        {
            Ok(r) if r.bytes == 0 => break "connection closed by the server".to_string(),
            Ok(r) => {
                // A read that filled all the room offered: more was waiting (see
                // sluice_engine::trunk).
                gauge.record(r.bytes, r.full);
                loop {
                    match decoder.next_record() {
                        Ok(Some(record)) => {
                            if tx.send(ConnEvent::Record(generation, record)).is_err() {
                                return;
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            let _ = tx.send(ConnEvent::Closed(generation, e.to_string()));
                            return;
                        }
                    }
                }
            }
            Err(e) => break e.to_string(),
        }
    };
    let _ = tx.send(ConnEvent::Closed(generation, why));
}

/// Writes framed messages, batching whatever is queued into one vectored write.
async fn write_loop(
    mut wr: WriteHalf,
    mut rx: mpsc::UnboundedReceiver<Vec<Bytes>>,
    generation: u64,
    tx: mpsc::UnboundedSender<ConnEvent>,
) {
    let mut queue: VecDeque<Bytes> = VecDeque::new();
    while let Some(msg) = rx.recv().await {
        queue.extend(msg);
        while let Ok(more) = rx.try_recv() {
            queue.extend(more);
        }
        let mut sent = write_segments(&mut wr, &mut queue).await;
        if sent.is_ok() && matches!(wr, WriteHalf::Tls(_)) {
            // The batch's last bytes may wait inside rustls until flushed.
            sent = wr.flush().await;
        }
        if let Err(e) = sent {
            let _ = tx.send(ConnEvent::Closed(generation, e.to_string()));
            return;
        }
    }
    let _ = wr.shutdown().await;
}

async fn write_segments(wr: &mut WriteHalf, queue: &mut VecDeque<Bytes>) -> io::Result<()> {
    // Linux's IOV_MAX is 1024; 64 slices per call is plenty for a few messages.
    const SLICES_MAX: usize = 64;
    while !queue.is_empty() {
        let n = {
            let slices: Vec<IoSlice<'_>> = queue
                .iter()
                .take(SLICES_MAX)
                .map(|b| IoSlice::new(b))
                .collect();
            wr.write_vectored(&slices).await?
        };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let mut left = n;
        while left > 0 {
            let front = queue.front_mut().expect("wrote bytes that were queued");
            if front.len() <= left {
                left -= front.len();
                queue.pop_front();
            } else {
                front.advance(left);
                left = 0;
            }
        }
        while queue.front().is_some_and(|b| b.is_empty()) {
            queue.pop_front();
        }
    }
    Ok(())
}

/// Reads datagrams; each is one reply record.
async fn udp_read_loop(
    sock: Arc<UdpSocket>,
    generation: u64,
    tx: mpsc::UnboundedSender<ConnEvent>,
) {
    // The largest UDP payload over IPv4 is 65,507 bytes; a buffer of 64 KiB holds any of them.
    const DATAGRAM_BYTES_MAX: usize = 64 * 1024;
    loop {
        let mut buf = BytesMut::zeroed(DATAGRAM_BYTES_MAX);
        match sock.recv(&mut buf).await {
            Ok(n) => {
                buf.truncate(n);
                if tx
                    .send(ConnEvent::Record(generation, vec![buf.freeze()]))
                    .is_err()
                {
                    return;
                }
            }
            // ICMP errors surface here; a connected socket reports "connection refused"
            // while the server is down. The table retransmits; keep listening, but not in a
            // busy loop.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => {
                let _ = tx.send(ConnEvent::Closed(generation, e.to_string()));
                return;
            }
        }
    }
}

/// Sends each message as one datagram.
async fn udp_write_loop(
    sock: Arc<UdpSocket>,
    mut rx: mpsc::UnboundedReceiver<Vec<Bytes>>,
    generation: u64,
    tx: mpsc::UnboundedSender<ConnEvent>,
) {
    while let Some(msg) = rx.recv().await {
        let datagram: Vec<u8> = msg.concat();
        match sock.send(&datagram).await {
            Ok(_) => {}
            // Lost like any datagram; the table resends on its timer.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionRefused | io::ErrorKind::WouldBlock
                ) => {}
            Err(e) => {
                let _ = tx.send(ConnEvent::Closed(generation, e.to_string()));
                return;
            }
        }
    }
}

/// A UDP socket connected to `addr`, from a reserved port when asked to and running as root.
async fn udp_socket(addr: SocketAddr, privileged: bool) -> io::Result<UdpSocket> {
    let any: std::net::IpAddr = if addr.is_ipv4() {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let mut sock = None;
    if privileged && root {
        for _ in 0..16 {
            let port = rand::thread_rng().gen_range(665..1024u16);
            if let Ok(s) = UdpSocket::bind((any, port)).await {
                sock = Some(s);
                break;
            }
        }
    }
    let sock = match sock {
        Some(s) => s,
        None => UdpSocket::bind((any, 0)).await?,
    };
    sock.connect(addr).await?;
    set_udp_buffers(&sock, UDP_BUFFER_BYTES);
    Ok(sock)
}

/// Socket buffer for UDP: room for a full slot table of 32 KiB replies (64 × 33 KiB ≈ 2.1 MiB)
/// with margin. The default (about 208 KiB) holds six READ replies; the seventh is dropped by
/// the kernel (`RcvbufErrors`) on a perfectly healthy loopback and costs a retransmit timeout.
pub const UDP_BUFFER_BYTES: usize = 4 << 20;

/// Moved to the `tcp` crate, shared with the server; this path stays for callers.
pub use sluice_tcp::set_udp_buffers;

/// Reserved source ports the client may use: 665..=1023, as the Linux client.
const RESERVED_PORTS: u16 = 1024 - 665;

/// Connects to `addr` (see [`connect_socket`]) and, with `tls`, upgrades the connection to
/// RPC-with-TLS (the probe and the handshake within `timeout`).
async fn connect_stream(
    addr: SocketAddr,
    privileged: bool,
    tls: Option<&RpcTls>,
    timeout: Duration,
) -> io::Result<Stream> {
    let stream = connect_socket(addr, privileged).await?;
    let Some(tls) = tls else {
        return Ok(Stream::Plain(stream));
    };
    let (prog, vers) = tls.probe_program;
    sluice_tcp::tls::connect_upgrade_stream(
        stream,
        &tls.client,
        &tls.server_name,
        prog,
        vers,
        timeout,
    )
    .await
}

/// Connects to `addr`, from a reserved port when asked to and running as root.
async fn connect_socket(addr: SocketAddr, privileged: bool) -> io::Result<TcpStream> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if privileged && root {
        // The kernel picks from 665..=1023 (sunrpc min/max_resvport). Walk the whole range from a
        // random start: SO_REUSEADDR lets a port whose old connection to *another* server sits in
        // TIME_WAIT be used again, and connect() refuses only a port whose TIME_WAIT is towards
        // this very server, so the walk moves on.
        let start = rand::thread_rng().gen_range(0..RESERVED_PORTS);
        for i in 0..RESERVED_PORTS {
            let port = 665 + (start + i) % RESERVED_PORTS;
            let socket = if addr.is_ipv4() {
                TcpSocket::new_v4()?
            } else {
                TcpSocket::new_v6()?
            };
            socket.set_reuseaddr(true)?;
            let local: SocketAddr = if addr.is_ipv4() {
                (std::net::Ipv4Addr::UNSPECIFIED, port).into()
            } else {
                (std::net::Ipv6Addr::UNSPECIFIED, port).into()
            };
            if socket.bind(local).is_err() {
                continue;
            }
            match socket.connect(addr).await {
                Ok(s) => return Ok(s),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::AddrInUse | io::ErrorKind::AddrNotAvailable
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(e),
            }
        }
        tracing::warn!(%addr, "no reserved source port free; connecting from an ordinary port (a `secure` export will refuse it)");
    }
    TcpStream::connect(addr).await
}
