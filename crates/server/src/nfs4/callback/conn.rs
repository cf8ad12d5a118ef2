//! The server's calls to its clients over their own connections (the NFSv4.1 back channel,
//! RFC 8881 §2.10.3.1): a cloneable [`CallbackConn`] handle per TCP connection, and the
//! [`Connections`] registry where a session finds one when it must send CB_RECALL.
//!
//! ```text
//!   protocol code (a v4.1 session)                  the connection's tasks (net.rs)
//!   ─────────────────────────────────              ─────────────────────────────────────
//!   back.call(proc, cred, args, timeout) ─start─►  OutgoingCalls (pure, sluice_rpc::duplex)
//!        │  awaits a oneshot                         │ marker "calls ready" ──► writer task:
//!        │                                           │   poll_transmit(now): deadline starts,
//!        │                                           │   framed CALL records share the writev
//!        │                                           │   with replies (whole records only)
//!        │                                     reader task: REPLY record ─► handle_reply ─► Done
//!        │                                     timer task:  poll_timeout ─► handle_timeout ─► TimedOut
//!        ◄──────────── Result<Reply, CallError> ─── connection closed ─► handle_disconnect ─► ConnectionGone
//! ```
//!
//! Every decision (XIDs, the in-flight bound, when a call times out, what a reply means) is
//! the pure table's; this module only moves records, reads the clock and wakes waiters.
//!
//! # Lifetimes
//! A handle outlives its connection harmlessly: a session may keep it after the client went
//! away, and every call on it then fails at once with [`CallError::ConnectionGone`]. The handle
//! holds only a weak sender to the connection's writer, so keeping it never keeps a closed
//! connection's writer task alive. When the caller stops waiting (its future is dropped, e.g.
//! by its own timeout), the call is cancelled and its slot freed; a late reply is then counted
//! as an unknown XID.

use bytes::Bytes;
use sluice_rpc::client::{ProcId, Reply};
use sluice_rpc::duplex::{CallError, OutgoingCalls, OutgoingConfig, OutgoingStats};
use sluice_rpc::record;
use sluice_xdr::rpc::OpaqueAuth;
use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, Notify};

/// What a connection's writer task is asked to send: a reply, or "calls are waiting in the
/// back channel's table" (it takes them out itself, so their deadlines start at the send).
#[derive(Debug)]
pub(crate) enum Outbound {
    Reply(crate::service::reply::Reply),
    Calls,
}

/// The calls the server makes over one client connection. Cheap to clone; see the module docs.
#[derive(Clone)]
pub struct CallbackConn {
    shared: Arc<Shared>,
}

struct Shared {
    conn_id: u64,
    addr: SocketAddr,
    state: Mutex<State>,
    writer: mpsc::WeakSender<Outbound>,
    /// Wakes the timer task: a deadline started, or the connection closed.
    timer: Notify,
}

struct State {
    table: OutgoingCalls,
    waiters: HashMap<u32, oneshot::Sender<Result<Reply, CallError>>>,
}

impl fmt::Debug for CallbackConn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallbackConn")
            .field("conn_id", &self.shared.conn_id)
            .field("addr", &self.shared.addr)
            .finish_non_exhaustive()
    }
}

impl CallbackConn {
    /// Calls `proc_id` on the client and waits for its reply, at most `timeout` after the call
    /// went on the wire. Errors: [`CallError::TimedOut`], [`CallError::ConnectionGone`] (before
    /// or during the call), [`CallError::TooManyInFlight`] (the connection's bound), and
    /// [`CallError::Rejected`] (an RPC-level error or an undecodable reply header).
    pub async fn call(
        &self,
        proc_id: ProcId,
        cred: &OpaqueAuth,
        args: Vec<Bytes>,
        timeout: Duration,
    ) -> Result<Reply, CallError> {
        let Some(writer) = self.shared.writer.upgrade() else {
            return Err(CallError::ConnectionGone);
        };
        let (tx, rx) = oneshot::channel();
        let xid = {
            let mut st = self.shared.lock();
            let xid = st
                .table
                .start_call(Instant::now(), proc_id, cred, args, timeout)?;
            st.waiters.insert(xid, tx);
            xid
        };
        let guard = CancelOnDrop {
            shared: &self.shared,
            xid,
        };
        // Waits while the writer's queue is full (backpressure, shared with the replies).
        if writer.send(Outbound::Calls).await.is_err() {
            return Err(CallError::ConnectionGone);
        }
        drop(writer);
        let result = rx.await.unwrap_or(Err(CallError::ConnectionGone));
        std::mem::forget(guard);
        result
    }

    /// The connection's number (the `conn_id` of its [`crate::service::Peer`]).
    pub fn conn_id(&self) -> u64 {
        self.shared.conn_id
    }

    /// The client's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// True once the connection is gone: every call fails with [`CallError::ConnectionGone`].
    pub fn is_closed(&self) -> bool {
        !self.shared.lock().table.is_connected()
    }

    /// Calls started and not yet finished.
    pub fn in_flight(&self) -> usize {
        self.shared.lock().table.in_flight()
    }

    pub fn stats(&self) -> OutgoingStats {
        *self.shared.lock().table.stats()
    }

    // --- for the connection's tasks (net.rs) ----------------------------------------------

    /// A handle for a new connection whose writer takes [`Outbound`]s from `writer`. Starts the
    /// timer task, which ends when the connection closes.
    pub(crate) fn open(
        conn_id: u64,
        addr: SocketAddr,
        config: OutgoingConfig,
        writer: &mpsc::Sender<Outbound>,
    ) -> CallbackConn {
        // The XID seed only has to differ between connections and server runs; std's hasher
        // keys are drawn at random per process, which is enough (no RNG dependency here).
        let xid_seed = std::collections::hash_map::RandomState::new().hash_one(conn_id) as u32;
        let back = CallbackConn {
            shared: Arc::new(Shared {
                conn_id,
                addr,
                state: Mutex::new(State {
                    table: OutgoingCalls::new(config, xid_seed),
                    waiters: HashMap::new(),
                }),
                writer: writer.downgrade(),
                timer: Notify::new(),
            }),
        };
        tokio::spawn(back.clone().run_timer());
        back
    }

    /// The writer takes the calls waiting to be sent, record-marked, and their deadlines start.
    pub(crate) fn take_transmits(&self, out: &mut Vec<Bytes>) {
        let now = Instant::now();
        let mut any = false;
        {
            let mut st = self.shared.lock();
            while let Some(tx) = st.table.poll_transmit(now) {
                out.extend(record::frame(tx.segments, usize::MAX >> 1));
                any = true;
            }
        }
        if any {
            self.shared.timer.notify_one();
        }
    }

    /// A REPLY record arrived on the connection.
    pub(crate) fn handle_reply(&self, record: Vec<Bytes>) {
        let mut st = self.shared.lock();
        if let Some(done) = st.table.handle_reply(Instant::now(), record) {
            if let Some(w) = st.waiters.remove(&done.xid) {
                let _ = w.send(done.result);
            }
        }
    }

    /// The connection is gone: every pending call fails now. Idempotent.
    pub(crate) fn close(&self) {
        {
            let mut st = self.shared.lock();
            st.table.handle_disconnect(Instant::now());
            st.wake_finished();
        }
        self.shared.timer.notify_one();
    }

    async fn run_timer(self) {
        loop {
            let next = {
                let st = self.shared.lock();
                if !st.table.is_connected() {
                    return;
                }
                st.table.poll_timeout()
            };
            let sleep = async {
                match next {
                    Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = sleep => {}
                _ = self.shared.timer.notified() => {}
            }
            let mut st = self.shared.lock();
            st.table.handle_timeout(Instant::now());
            st.wake_finished();
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("back channel lock")
    }
}

impl State {
    /// Hands the calls the table finished (timeouts, disconnect) to their waiters.
    fn wake_finished(&mut self) {
        while let Some(done) = self.table.poll_event() {
            if let Some(w) = self.waiters.remove(&done.xid) {
                let _ = w.send(done.result);
            }
        }
    }
}

/// Cancels a call whose caller stopped waiting (forgotten once the call finished).
struct CancelOnDrop<'a> {
    shared: &'a Shared,
    xid: u32,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.table.cancel(self.xid);
        st.waiters.remove(&self.xid);
    }
}

/// The live TCP connections of one server, by `conn_id`: where a v4.1 session looks up the
/// connection to send callbacks on. Cheap to clone. Bounded by the connection limit: a
/// connection is in it from accept to close. It also numbers the connections, so listeners
/// sharing one registry never hand out the same `conn_id` twice.
#[derive(Clone, Default)]
pub struct Connections {
    inner: Arc<Mutex<Registry>>,
}

#[derive(Default)]
struct Registry {
    next_id: u64,
    live: HashMap<u64, CallbackConn>,
}

impl fmt::Debug for Connections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connections")
            .field("live", &self.len())
            .finish()
    }
}

impl Connections {
    /// The back channel of a live connection.
    pub fn get(&self, conn_id: u64) -> Option<CallbackConn> {
        self.lock().live.get(&conn_id).cloned()
    }

    /// The `conn_id`s of the live connections, in ascending order.
    pub fn ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.lock().live.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    pub fn len(&self) -> usize {
        self.lock().live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A fresh connection number (from 1; 0 is UDP's).
    pub(crate) fn next_id(&self) -> u64 {
        let mut r = self.lock();
        r.next_id += 1;
        r.next_id
    }

    pub(crate) fn insert(&self, back: CallbackConn) {
        self.lock().live.insert(back.conn_id(), back);
    }

    pub(crate) fn remove(&self, conn_id: u64) {
        self.lock().live.remove(&conn_id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.inner.lock().expect("connections lock")
    }
}

#[cfg(test)]
mod tests {
    //! The driver on real loopback sockets, against a hand-written peer (record marking and
    //! the codecs only), so what goes over the wire is exactly what the test sees. The test
    //! program with the real client transport is `crates/server/tests/callback_conn.rs`.
    use super::*;
    use crate::net::{self, NetConfig};
    use crate::service::{self, Peer, Service};
    use sluice_rpc::client::RpcError;
    use sluice_rpc::record::{RecordDecoder, RecordDecoderConfig};
    use sluice_rpc::server::{self as rpcs, CallParse};
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    const CB: ProcId = ProcId {
        prog: 0x4000_0000,
        vers: 1,
        proc_: 1,
    };
    /// Every wait in these tests is bounded, so a bug fails the test instead of hanging it.
    const LIMIT: Duration = Duration::from_secs(10);

    /// Answers every call with its first argument word plus one; counts what it was given.
    #[derive(Default)]
    struct Echo {
        records: AtomicU64,
    }

    impl Service for Echo {
        async fn handle(
            self: Arc<Self>,
            _peer: Peer,
            record: Vec<Bytes>,
        ) -> Option<service::Reply> {
            self.records.fetch_add(1, Ordering::Relaxed);
            let CallParse::Call(call) = rpcs::parse_call(&record) else {
                return None;
            };
            let v = call.args(&record).get_u32().unwrap_or(0);
            let mut w = rpcs::success_header(call.xid);
            w.put_u32(v.wrapping_add(1));
            Some(w.into_segments().into())
        }
    }

    struct Fixture {
        echo: Arc<Echo>,
        conns: Connections,
        sock: TcpStream,
        decoder: RecordDecoder,
        back: CallbackConn,
    }

    async fn fixture(callbacks_max: usize) -> Fixture {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let echo = Arc::new(Echo::default());
        let conns = Connections::default();
        let cfg = NetConfig {
            callbacks: OutgoingConfig {
                calls_in_flight_max: callbacks_max,
            },
            ..NetConfig::default()
        };
        tokio::spawn(net::serve_tcp_with(l, echo.clone(), cfg, conns.clone()));
        let sock = TcpStream::connect(addr).await.unwrap();
        let back = tokio::time::timeout(LIMIT, async {
            loop {
                if let Some(b) = conns.ids().first().and_then(|&id| conns.get(id)) {
                    return b;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("the connection is registered");
        Fixture {
            echo,
            conns,
            sock,
            decoder: RecordDecoder::new(RecordDecoderConfig::default()),
            back,
        }
    }

    impl Fixture {
        async fn send(&mut self, msg: Vec<Bytes>) {
            let framed: Vec<u8> = record::frame(msg, usize::MAX >> 1).concat();
            self.sock.write_all(&framed).await.unwrap();
        }

        async fn recv(&mut self) -> Vec<Bytes> {
            tokio::time::timeout(LIMIT, async {
                loop {
                    if let Some(r) = self.decoder.next_record().unwrap() {
                        return r;
                    }
                    let mut buf = vec![0u8; 4096];
                    let n = self.sock.read(&mut buf).await.unwrap();
                    assert!(n > 0, "the server closed the connection");
                    buf.truncate(n);
                    self.decoder.push(Bytes::from(buf));
                }
            })
            .await
            .expect("a record from the server")
        }

        /// The client's own call to the server, and its answer.
        async fn client_call(&mut self, xid: u32, v: u32) -> u32 {
            let mut w = sluice_xdr::Writer::new();
            sluice_xdr::Pack::pack(
                &sluice_xdr::rpc::MsgHeader::Call {
                    xid,
                    call: sluice_xdr::rpc::CallHeader {
                        rpcvers: 2,
                        prog: 100003,
                        vers: 3,
                        proc_: 0,
                        cred: OpaqueAuth::none(),
                        verf: OpaqueAuth::none(),
                    },
                },
                &mut w,
            );
            w.put_u32(v);
            self.send(w.into_segments()).await;
            let rec = self.recv().await;
            let mut r = sluice_xdr::Reader::new(&rec);
            assert_eq!(r.get_u32().unwrap(), xid);
            r.skip(rpcs::ACCEPTED_HEADER_BYTES - 4).unwrap();
            r.get_u32().unwrap()
        }
    }

    fn arg(v: u32) -> Vec<Bytes> {
        vec![Bytes::copy_from_slice(&v.to_be_bytes())]
    }

    /// Reads a callback CALL: its xid and first argument word.
    fn parse_cb(rec: &[Bytes]) -> (u32, u32) {
        let CallParse::Call(call) = rpcs::parse_call(rec) else {
            panic!("the server sent something other than a call")
        };
        assert_eq!((call.prog(), call.vers(), call.proc_()), (CB.prog, 1, 1));
        (call.xid, call.args(rec).get_u32().unwrap())
    }

    fn answer(xid: u32, v: u32) -> Vec<Bytes> {
        let mut w = rpcs::success_header(xid);
        w.put_u32(v);
        w.into_segments()
    }

    #[tokio::test]
    async fn the_server_calls_its_client_and_ordinary_calls_keep_working_in_between() {
        let mut f = fixture(16).await;
        let back = f.back.clone();
        let calls: Vec<_> = (0..3)
            .map(|i| {
                let back = back.clone();
                tokio::spawn(async move { back.call(CB, &OpaqueAuth::none(), arg(i), LIMIT).await })
            })
            .collect();
        let mut pending = Vec::new();
        for _ in 0..3 {
            pending.push(parse_cb(&f.recv().await));
        }
        // An ordinary call from the client, on the same XID as a callback: no confusion.
        let same_xid = pending[0].0;
        assert_eq!(f.client_call(same_xid, 41).await, 42);
        // Answer the callbacks in reverse order.
        for &(xid, v) in pending.iter().rev() {
            f.send(answer(xid, v * 10)).await;
        }
        let mut got = Vec::new();
        for c in calls {
            let reply = c.await.unwrap().unwrap();
            got.push(reply.results().get_u32().unwrap());
        }
        assert_eq!(got, vec![0, 10, 20]);
        assert_eq!(
            f.echo.records.load(Ordering::Relaxed),
            1,
            "the replies never reached the dispatcher"
        );
        assert_eq!(back.stats().calls_answered, 3);
        assert_eq!(back.in_flight(), 0);
    }

    #[tokio::test]
    async fn an_unanswered_callback_times_out_and_the_connection_still_serves() {
        let mut f = fixture(16).await;
        let back = f.back.clone();
        let started = tokio::time::Instant::now();
        let call = tokio::spawn(async move {
            back.call(CB, &OpaqueAuth::none(), arg(1), Duration::from_millis(100))
                .await
        });
        let (xid, _) = parse_cb(&f.recv().await);
        let r = tokio::time::timeout(LIMIT, call).await.unwrap().unwrap();
        assert_eq!(r, Err(CallError::TimedOut));
        assert!(started.elapsed() >= Duration::from_millis(100));
        // The late answer is dropped (an unknown xid), and ordinary calls still work.
        f.send(answer(xid, 0)).await;
        assert_eq!(f.client_call(5, 1).await, 2);
        assert_eq!(f.back.stats().unknown_xid_replies, 1);
        assert_eq!(f.echo.records.load(Ordering::Relaxed), 1);
        // A rejected callback is an error too, not a hang.
        let back = f.back.clone();
        let call =
            tokio::spawn(async move { back.call(CB, &OpaqueAuth::none(), arg(2), LIMIT).await });
        let (xid, _) = parse_cb(&f.recv().await);
        f.send(rpcs::proc_unavail(xid)).await;
        assert_eq!(
            call.await.unwrap(),
            Err(CallError::Rejected(RpcError::ProcUnavail))
        );
    }

    #[tokio::test]
    async fn a_dropped_connection_fails_pending_callbacks_at_once() {
        let f = fixture(16).await;
        let mut f = f;
        let back = f.back.clone();
        let call = tokio::spawn(async move {
            back.call(CB, &OpaqueAuth::none(), arg(1), Duration::from_secs(3600))
                .await
        });
        parse_cb(&f.recv().await);
        let conns = f.conns.clone();
        let back = f.back.clone();
        drop(f);
        let r = tokio::time::timeout(LIMIT, call).await.expect("promptly");
        assert_eq!(r.unwrap(), Err(CallError::ConnectionGone));
        assert!(back.is_closed());
        assert_eq!(
            back.call(CB, &OpaqueAuth::none(), arg(2), LIMIT).await,
            Err(CallError::ConnectionGone)
        );
        tokio::time::timeout(LIMIT, async {
            while !conns.is_empty() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("the registry forgets a closed connection");
    }

    #[tokio::test]
    async fn callbacks_beyond_the_bound_are_refused_and_a_cancelled_one_frees_its_room() {
        let mut f = fixture(2).await;
        let back = f.back.clone();
        let a = {
            let back = back.clone();
            tokio::spawn(async move { back.call(CB, &OpaqueAuth::none(), arg(1), LIMIT).await })
        };
        let b = {
            let back = back.clone();
            tokio::spawn(async move { back.call(CB, &OpaqueAuth::none(), arg(2), LIMIT).await })
        };
        let first = parse_cb(&f.recv().await);
        let second = parse_cb(&f.recv().await);
        assert_eq!(
            back.call(CB, &OpaqueAuth::none(), arg(3), LIMIT).await,
            Err(CallError::TooManyInFlight)
        );
        // The caller of `b` gives up: its slot is free for the next call.
        b.abort();
        let _ = b.await;
        assert_eq!(back.in_flight(), 1);
        f.send(answer(first.0, 7)).await;
        assert_eq!(a.await.unwrap().unwrap().results().get_u32().unwrap(), 7);
        assert_eq!(back.in_flight(), 0);
        let _ = second;
        assert_eq!(back.stats().calls_cancelled, 1);
    }
}
