//! Calls in both directions on one connection, end to end: the real server driver
//! (`sluice_server::run_with`, every listener registering its connections) and the real client
//! transport (`sluice_client::Client` with a callback service), on loopback.
//!
//! - The server issues 200 callback CALLs, 32 at a time, over the client's own connection while
//!   the client runs WRITE/READ/GETATTR loops on it: every callback and every ordinary call is
//!   answered, and answered correctly.
//! - A client whose callback service never answers: the server's call times out in bounded time
//!   with `CallError::TimedOut`, and the connection still serves ordinary calls.
//! - A connection dropped mid-call: the pending server call fails with
//!   `CallError::ConnectionGone` promptly, and the registry forgets the connection.
//!
//! Every wait is bounded by [`LIMIT`], so a hang fails the test instead of the suite.

#[macro_use]
mod support;

use bytes::Bytes;
use sluice_client::transport::{CallbackReply, CallbackService, Callbacks, IncomingCall};
use sluice_client::{Client, ClientOptions};
use sluice_rpc::client::ProcId;
use sluice_rpc::duplex::CallError;
use sluice_server::net::{CallbackConn, Connections};
use sluice_xdr::nfs3::{CreateHow, Sattr3, StableHow};
use sluice_xdr::rpc::OpaqueAuth;
use sluice_xdr::Writer;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::TestDirs;
use tokio::task::JoinSet;

const LIMIT: Duration = Duration::from_secs(60);
/// The callback program a v4.1 client might name in `csa_cb_program`.
const CB: ProcId = ProcId {
    prog: 0x4000_0000,
    vers: 1,
    proc_: 1,
};
const CALLBACKS: u32 = 200;
const CALLBACKS_AT_ONCE: usize = 32;

/// What the client's callback service does.
enum Behaviour {
    /// Answers `3 × argument + 1`, after a short delay that varies with the argument, so
    /// answers go out of order.
    Answer,
    /// Never answers.
    Hang,
}

struct Service {
    behaviour: Behaviour,
    seen: AtomicU64,
}

impl CallbackService for Service {
    fn handle(
        self: Arc<Self>,
        call: IncomingCall,
    ) -> Pin<Box<dyn Future<Output = CallbackReply> + Send>> {
        Box::pin(async move {
            self.seen.fetch_add(1, Ordering::Relaxed);
            if let Behaviour::Hang = self.behaviour {
                std::future::pending::<()>().await;
            }
            let (prog, vers, proc_) = (call.call.prog(), call.call.vers(), call.call.proc_());
            if (prog, vers, proc_) != (CB.prog, CB.vers, CB.proc_) {
                return CallbackReply::ProcUnavail;
            }
            let Ok(v) = call.args().get_u32() else {
                return CallbackReply::GarbageArgs;
            };
            tokio::time::sleep(Duration::from_micros(u64::from(v % 7) * 200)).await;
            let mut w = Writer::new();
            w.put_u32(v.wrapping_mul(3).wrapping_add(1));
            CallbackReply::Results(w.into_segments())
        })
    }
}

struct Setup {
    _dirs: TestDirs,
    connections: Connections,
    client: Client,
    service: Arc<Service>,
    _server: StopOnDrop,
}

/// Stops the server task when the test ends.
struct StopOnDrop(tokio::task::JoinHandle<Result<(), String>>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn setup(tag: &str, behaviour: Behaviour) -> Setup {
    let dirs = TestDirs::new(tag);
    let mut config = dirs.config();
    config.net.callbacks.calls_in_flight_max = CALLBACKS_AT_ONCE;
    let bound = sluice_server::bind(config).await.unwrap();
    let port = bound.local_addr().unwrap().port();
    let connections = Connections::default();
    let server = tokio::spawn(sluice_server::run_with(bound, connections.clone()));
    let service = Arc::new(Service {
        behaviour,
        seen: AtomicU64::new(0),
    });
    let mut options = ClientOptions::default();
    options.rpc.callbacks = Some(Callbacks(service.clone()));
    options.rpc.callbacks_in_flight_max = CALLBACKS_AT_ONCE;
    let url = format!(
        "nfs://127.0.0.1{}?version=3&nfsport={port}&mountport={port}",
        dirs.export().display()
    );
    let client = tokio::time::timeout(LIMIT, Client::connect(url.as_str(), options))
        .await
        .expect("mounts in time")
        .expect("mounts");
    Setup {
        _dirs: dirs,
        connections,
        client,
        service,
        _server: StopOnDrop(server),
    }
}

/// The back channel of the client's connection: the only one left once the mount is done
/// (MOUNT and NFS share the connection here; any other closes).
async fn back_channel(connections: &Connections) -> CallbackConn {
    tokio::time::timeout(LIMIT, async {
        loop {
            if connections.len() == 1 {
                let id = connections.ids()[0];
                if let Some(b) = connections.get(id) {
                    return b;
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("exactly one live connection")
}

fn arg(v: u32) -> Vec<Bytes> {
    vec![Bytes::copy_from_slice(&v.to_be_bytes())]
}

/// WRITE, READ back and GETATTR loops on one file; returns the calls made.
async fn ordinary_traffic(client: Client, name: String, rounds: u32) -> u32 {
    let sattr = Sattr3 {
        mode: Some(0o644),
        ..Sattr3::default()
    };
    let created = client
        .create(client.root(), &name, CreateHow::Unchecked(sattr))
        .await
        .unwrap();
    let fh = created.obj.expect("CREATE returns the handle");
    let mut calls = 1;
    for i in 0..rounds {
        let block: Vec<u8> = (0..4096u32).map(|b| (b ^ i) as u8).collect();
        let offset = u64::from(i) * 4096;
        let w = client
            .write(
                &fh,
                offset,
                Bytes::from(block.clone()),
                StableHow::FILE_SYNC,
            )
            .await
            .unwrap();
        assert_eq!(w.count, 4096);
        let r = client.read(&fh, offset, 4096).await.unwrap();
        let data: Vec<u8> = r.data.chunks().concat();
        assert_eq!(
            data, block,
            "{name} round {i}: READ returns what WRITE wrote"
        );
        let a = client.getattr(&fh).await.unwrap();
        assert_eq!(a.obj_attributes.size, offset + 4096);
        calls += 3;
    }
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_callbacks_interleave_with_ordinary_traffic_on_one_connection() {
    let s = setup("callback-conn-many", Behaviour::Answer).await;
    let back = back_channel(&s.connections).await;
    let mut traffic = JoinSet::new();
    for t in 0..2 {
        traffic.spawn(ordinary_traffic(s.client.clone(), format!("f{t}"), 40));
    }
    let mut callbacks = JoinSet::new();
    let mut next = 0u32;
    let mut answered = 0u32;
    while answered < CALLBACKS {
        while next < CALLBACKS && callbacks.len() < CALLBACKS_AT_ONCE {
            let back = back.clone();
            let v = next;
            callbacks.spawn(async move {
                let r = back.call(CB, &OpaqueAuth::none(), arg(v), LIMIT).await;
                (v, r)
            });
            next += 1;
        }
        let (v, r) = tokio::time::timeout(LIMIT, callbacks.join_next())
            .await
            .expect("a callback finishes")
            .unwrap()
            .unwrap();
        let reply = r.unwrap_or_else(|e| panic!("callback {v}: {e}"));
        assert_eq!(
            reply.results().get_u32().unwrap(),
            3 * v + 1,
            "callback {v}"
        );
        answered += 1;
    }
    let mut ordinary = 0;
    while let Some(done) = tokio::time::timeout(LIMIT, traffic.join_next())
        .await
        .expect("the ordinary traffic finishes")
    {
        ordinary += done.unwrap();
    }
    assert_eq!(ordinary, 2 * (1 + 3 * 40));
    let t = s.client.transport_stats();
    assert_eq!(t.callbacks_answered, u64::from(CALLBACKS));
    assert_eq!(t.callbacks_refused, 0);
    // Each ordinary call checked its own result above; one connection (nconnect 1) and no
    // reconnect means they all ran on the connection that carried the callbacks. (The
    // transport publishes its counters after each event, so exact deltas would race.)
    assert_eq!(t.reconnects, 0);
    assert_eq!(s.client.connection_stats().len(), 1);
    assert!(t.table.calls_completed >= u64::from(ordinary));
    assert_eq!(
        (t.table.unknown_xid_replies, t.table.garbage_replies),
        (0, 0)
    );
    let b = back.stats();
    assert_eq!(b.calls_answered, u64::from(CALLBACKS));
    assert_eq!((b.unknown_xid_replies, b.calls_timed_out), (0, 0));
    assert_eq!(s.service.seen.load(Ordering::Relaxed), u64::from(CALLBACKS));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_the_client_never_answers_times_out_and_the_connection_still_serves() {
    let s = setup("callback-conn-hang", Behaviour::Hang).await;
    let back = back_channel(&s.connections).await;
    let started = std::time::Instant::now();
    let r = tokio::time::timeout(
        LIMIT,
        back.call(CB, &OpaqueAuth::none(), arg(1), Duration::from_millis(300)),
    )
    .await
    .expect("the call ends by itself");
    assert_eq!(r.unwrap_err(), CallError::TimedOut);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(10),
        "{took:?}"
    );
    assert_eq!(
        s.service.seen.load(Ordering::Relaxed),
        1,
        "it was delivered"
    );
    // The connection is alive and serves ordinary calls.
    assert!(!back.is_closed());
    let calls = tokio::time::timeout(
        LIMIT,
        ordinary_traffic(s.client.clone(), "after".to_string(), 3),
    )
    .await
    .expect("ordinary calls are answered");
    assert_eq!(calls, 10);
    assert_eq!(s.client.transport_stats().reconnects, 0);
    assert_eq!(back.stats().calls_timed_out, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_dropped_mid_call_fails_the_pending_callbacks_promptly() {
    let s = setup("callback-conn-drop", Behaviour::Hang).await;
    let back = back_channel(&s.connections).await;
    let mut pending = JoinSet::new();
    for v in 0..4 {
        let back = back.clone();
        pending.spawn(async move {
            back.call(CB, &OpaqueAuth::none(), arg(v), Duration::from_secs(3600))
                .await
        });
    }
    // Wait until the client has them all (delivered, never answered).
    tokio::time::timeout(LIMIT, async {
        while s.service.seen.load(Ordering::Relaxed) < 4 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the callbacks reach the client");
    // The client goes away: its transport closes the connection.
    let Setup {
        _dirs,
        connections,
        client,
        service: _service,
        _server,
    } = s;
    drop(client);
    let started = std::time::Instant::now();
    while let Some(r) = tokio::time::timeout(LIMIT, pending.join_next())
        .await
        .expect("pending callbacks end promptly")
    {
        assert_eq!(r.unwrap().unwrap_err(), CallError::ConnectionGone);
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(back.is_closed());
    assert_eq!(
        back.call(CB, &OpaqueAuth::none(), arg(9), LIMIT).await,
        Err(CallError::ConnectionGone)
    );
    tokio::time::timeout(LIMIT, async {
        while !connections.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the registry forgets the closed connection");
}
