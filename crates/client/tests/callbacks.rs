//! The client transport answering calls from the server on its own connection (the NFSv4.1
//! back channel), against a hand-written server built from the codecs and record marking only:
//! with no callback service the answer is PROG_UNAVAIL, a registered service answers while the
//! client's own calls are in flight, and callbacks beyond the bound get SYSTEM_ERR.

use bytes::{Bytes, BytesMut};
use sluice_client::transport::{
    CallbackReply, CallbackService, Callbacks, IncomingCall, RpcClient, RpcConfig,
};
use sluice_rpc::client::ProcId;
use sluice_rpc::record::{frame, RecordDecoder};
use sluice_rpc::rtt::TimerClass;
use sluice_rpc::server::{self as rpcs, CallParse};
use sluice_xdr::rpc::{AcceptStat, CallHeader, MsgHeader, OpaqueAuth, ReplyBody};
use sluice_xdr::{Pack, Reader, Unpack, Writer};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Every wait is bounded: a bug fails the test instead of hanging the suite.
const LIMIT: Duration = Duration::from_secs(10);
const NFS_NULL: ProcId = ProcId {
    prog: 100003,
    vers: 3,
    proc_: 0,
};
const CB_PROG: u32 = 0x4000_0000;

/// The server's end of the connection.
struct Server {
    sock: TcpStream,
    dec: RecordDecoder,
}

impl Server {
    async fn send(&mut self, msg: Vec<Bytes>) {
        let framed: Vec<u8> = frame(msg, usize::MAX >> 1).concat();
        self.sock.write_all(&framed).await.unwrap();
    }

    async fn recv(&mut self) -> Vec<Bytes> {
        tokio::time::timeout(LIMIT, async {
            loop {
                if let Some(r) = self.dec.next_record().unwrap() {
                    return r;
                }
                let mut buf = BytesMut::with_capacity(4096);
                let n = self.sock.read_buf(&mut buf).await.unwrap();
                assert!(n > 0, "the client closed the connection");
                self.dec.push(buf.freeze());
            }
        })
        .await
        .expect("a record from the client")
    }

    /// Sends a callback CALL with one argument word.
    async fn call_back(&mut self, xid: u32, v: u32) {
        let mut w = Writer::new();
        MsgHeader::Call {
            xid,
            call: CallHeader {
                rpcvers: 2,
                prog: CB_PROG,
                vers: 1,
                proc_: 1,
                cred: OpaqueAuth::none(),
                verf: OpaqueAuth::none(),
            },
        }
        .pack(&mut w);
        w.put_u32(v);
        self.send(w.into_segments()).await;
    }
}

/// A client connected to a fresh listener, and the server's end of its connection.
async fn connect(config: RpcConfig) -> (RpcClient, Server) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let accept = tokio::spawn(async move { l.accept().await.unwrap().0 });
    let client = RpcClient::connect(
        addr,
        RpcConfig {
            privileged_port: false,
            ..config
        },
    )
    .await
    .unwrap();
    let sock = accept.await.unwrap();
    (
        client,
        Server {
            sock,
            dec: RecordDecoder::default(),
        },
    )
}

/// A reply record's xid, accept status and first result word (if SUCCESS).
fn read_reply(rec: &[Bytes]) -> (u32, AcceptStat, Option<u32>) {
    let mut r = Reader::new(rec);
    match MsgHeader::unpack(&mut r).unwrap() {
        MsgHeader::Reply {
            xid,
            body: ReplyBody::Accepted { stat, .. },
        } => (xid, stat, r.get_u32().ok()),
        other => panic!("not an accepted reply: {other:?}"),
    }
}

/// Answers with the argument times two, after a permit of `gate` (if any).
struct Doubler {
    gate: Option<Arc<Semaphore>>,
}

impl CallbackService for Doubler {
    fn handle(
        self: Arc<Self>,
        call: IncomingCall,
    ) -> Pin<Box<dyn Future<Output = CallbackReply> + Send>> {
        Box::pin(async move {
            if let Some(g) = &self.gate {
                g.acquire().await.unwrap().forget();
            }
            if call.call.prog() != CB_PROG {
                return CallbackReply::ProgUnavail;
            }
            let Ok(v) = call.args().get_u32() else {
                return CallbackReply::GarbageArgs;
            };
            let mut w = Writer::new();
            w.put_u32(v * 2);
            CallbackReply::Results(w.into_segments())
        })
    }
}

#[tokio::test]
async fn a_call_without_a_callback_service_is_answered_prog_unavail() {
    let (client, mut server) = connect(RpcConfig::default()).await;
    server.call_back(7, 1).await;
    let (xid, stat, _) = read_reply(&server.recv().await);
    assert_eq!((xid, stat), (7, AcceptStat::PROG_UNAVAIL));
    assert_eq!(client.stats().callbacks_refused, 1);
    assert_eq!(
        client.stats().table.garbage_replies,
        0,
        "a call is not garbage"
    );
    assert_eq!(client.stats().table.calls_received, 1);
}

#[tokio::test]
async fn callbacks_are_answered_while_the_clients_own_calls_are_in_flight() {
    let config = RpcConfig {
        callbacks: Some(Callbacks(Arc::new(Doubler { gate: None }))),
        ..RpcConfig::default()
    };
    let (client, mut server) = connect(config).await;
    let own = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .call(NFS_NULL, &OpaqueAuth::none(), vec![], TimerClass::Other)
                .await
        })
    };
    let rec = server.recv().await;
    let CallParse::Call(own_call) = rpcs::parse_call(&rec) else {
        panic!("the client's call")
    };
    // Callbacks on the client's own XID and others, before its call is answered.
    for (i, xid) in [own_call.xid, 1, 2].into_iter().enumerate() {
        server.call_back(xid, i as u32 + 10).await;
    }
    let mut answers = Vec::new();
    for _ in 0..3 {
        let (xid, stat, v) = read_reply(&server.recv().await);
        assert_eq!(stat, AcceptStat::SUCCESS);
        answers.push((xid, v.unwrap()));
    }
    answers.sort_unstable();
    let mut want = vec![(own_call.xid, 20), (1, 22), (2, 24)];
    want.sort_unstable();
    assert_eq!(answers, want);
    // The client's own call is still waiting, unconfused by a reply with its xid going out.
    assert!(!own.is_finished());
    server
        .send(rpcs::success_header(own_call.xid).into_segments())
        .await;
    let outcome = tokio::time::timeout(LIMIT, own).await.unwrap().unwrap();
    assert!(outcome.is_ok(), "{outcome:?}");
    let s = client.stats();
    assert_eq!((s.callbacks_answered, s.callbacks_refused), (3, 0));
    assert_eq!(s.table.unknown_xid_replies, 0);
}

#[tokio::test]
async fn callbacks_beyond_the_bound_are_answered_system_err() {
    let gate = Arc::new(Semaphore::new(0));
    let config = RpcConfig {
        callbacks: Some(Callbacks(Arc::new(Doubler {
            gate: Some(gate.clone()),
        }))),
        callbacks_in_flight_max: 2,
        ..RpcConfig::default()
    };
    let (client, mut server) = connect(config).await;
    for xid in 1..=3 {
        server.call_back(xid, xid).await;
    }
    // The third finds both places taken while the first two wait at the gate.
    let (xid, stat, _) = read_reply(&server.recv().await);
    assert_eq!((xid, stat), (3, AcceptStat::SYSTEM_ERR));
    gate.add_permits(2);
    let mut done = Vec::new();
    for _ in 0..2 {
        let (xid, stat, v) = read_reply(&server.recv().await);
        assert_eq!(stat, AcceptStat::SUCCESS);
        done.push((xid, v.unwrap()));
    }
    done.sort_unstable();
    assert_eq!(done, vec![(1, 2), (2, 4)]);
    // Room again once they finished.
    server.call_back(4, 4).await;
    gate.add_permits(1);
    assert_eq!(
        read_reply(&server.recv().await),
        (4, AcceptStat::SUCCESS, Some(8))
    );
    assert_eq!(client.stats().callbacks_refused, 1);
}
