//! CPU per GiB of the user-space TLS record layer, measured in one process: one connection
//! over loopback, a server thread and a client thread (each a single-threaded tokio runtime),
//! and each thread's own CPU time (`CLOCK_THREAD_CPUTIME_ID`) around the transfer. CPU time,
//! not wall time, is what this reports, so a run on a loaded machine still compares.
//!
//! ```text
//! cargo run --release -p sluice-tcp --example tls_cpu -- [read|write] [GiB] [reps] [plain]
//! ```
//!
//! With `plain` the connection stays plaintext: the reference the TLS figures compare with.
//!
//! - `read` (the default): the server sends 1 MiB "READ replies" as the drivers do: a record
//!   mark and a header, then sixteen 64 KiB chunks freshly copied from a 64 MiB "page cache"
//!   (a `pread` into pooled chunks), each reply one vectored write and a flush. The client
//!   reads as its transport does (`ReadHalf::read_into` a record decoder, 256 KiB reads).
//! - `write`: the same, with the roles swapped (1 MiB WRITE calls from the client).
//!
//! Printed per rep: the sender's CPU per GiB (with the copy from the page cache, and without
//! it: `sender_tls_s_per_gib`), the receiver's, and wall time.

use bytes::{Bytes, BytesMut};
use sluice_rpc::record::{RecordDecoder, RecordDecoderConfig};
use sluice_tcp::tls::{accept_upgrade, connect_upgrade, ClientTls, ServerTls, ServerTlsFiles};
use sluice_tcp::tls::{ReadHalf, Stream, Upgraded, WriteHalf};
use std::io::IoSlice;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

const REPLY_BYTES: usize = 1 << 20;
const CHUNK_BYTES: usize = 64 * 1024;
const PAGE_CACHE_BYTES: usize = 64 << 20;
const GIB: f64 = (1u64 << 30) as f64;

/// This thread's CPU time, user and system, to the nanosecond (`getrusage` of the thread is
/// only as fine as the scheduler's last update).
fn thread_cpu() -> Duration {
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `t` is a valid timespec to fill.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(r, 0, "clock_gettime");
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn pki(dir: &Path) {
    use rcgen::{CertificateParams, KeyPair};
    std::fs::create_dir_all(dir).unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    std::fs::write(dir.join("server.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
}

/// Sends `bytes` as 1 MiB messages of 64 KiB chunks; returns (CPU total, CPU of the fills).
async fn send(mut w: WriteHalf, bytes: u64) -> (Duration, Duration) {
    let cache: Vec<u8> = (0..PAGE_CACHE_BYTES as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mark = (0x8000_0000u32 | (REPLY_BYTES as u32 + 96)).to_be_bytes();
    let header = Bytes::from(vec![0u8; 96]);
    // The chunk pool: a reply's chunks come back once it is written.
    let mut pool: Vec<BytesMut> = Vec::new();
    let start = thread_cpu();
    let mut fill = Duration::ZERO;
    let mut at = 0;
    let mut sent = 0u64;
    while sent < bytes {
        let f0 = thread_cpu();
        let mut segs = vec![Bytes::copy_from_slice(&mark), header.clone()];
        for _ in 0..REPLY_BYTES / CHUNK_BYTES {
            let mut chunk = pool
                .pop()
                .unwrap_or_else(|| BytesMut::with_capacity(CHUNK_BYTES));
            chunk.extend_from_slice(&cache[at..at + CHUNK_BYTES]);
            segs.push(chunk.freeze());
            at = (at + CHUNK_BYTES) % PAGE_CACHE_BYTES;
        }
        fill += thread_cpu() - f0;
        let (mut idx, mut off) = (0, 0);
        while idx < segs.len() {
            let slices: Vec<IoSlice<'_>> = std::iter::once(IoSlice::new(&segs[idx][off..]))
                .chain(segs[idx + 1..].iter().map(|s| IoSlice::new(s)))
                .collect();
            let mut n = w.write_vectored(&slices).await.unwrap();
            assert!(n > 0);
            while n > 0 {
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
        }
        w.flush().await.unwrap();
        sent += REPLY_BYTES as u64;
        for chunk in segs.drain(2..) {
            if let Ok(mut c) = chunk.try_into_mut() {
                c.clear();
                pool.push(c);
            }
        }
    }
    w.shutdown().await.unwrap();
    (thread_cpu() - start, fill)
}

/// Reads to the end as the drivers do; returns (bytes, CPU).
async fn receive(mut r: ReadHalf) -> (u64, Duration) {
    const READ_BYTES: usize = 256 * 1024;
    let start = thread_cpu();
    let mut buf = BytesMut::new();
    let mut decoder = RecordDecoder::new(RecordDecoderConfig {
        max_record_bytes: 2 * REPLY_BYTES,
        ..RecordDecoderConfig::default()
    });
    let mut total = 0u64;
    loop {
        let got = r
            .read_into(&mut decoder, &mut buf, READ_BYTES / 4, READ_BYTES)
            .await
            .unwrap();
        if got.bytes == 0 {
            break;
        }
        total += got.bytes as u64;
        while let Some(record) = decoder.next_record().unwrap() {
            drop(record);
        }
    }
    (total, thread_cpu() - start)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

struct Rep {
    sender: Duration,
    fill: Duration,
    receiver: Duration,
    bytes: u64,
    wall: Duration,
}

fn rep(dir: &Path, server_sends: bool, plain: bool, bytes: u64) -> Rep {
    let files = ServerTlsFiles {
        cert: dir.join("server.pem"),
        key: dir.join("server.key"),
        client_ca: None,
    };
    let tls = Arc::new(ServerTls::load(files).unwrap());
    let client_tls = ClientTls::load(&dir.join("ca.pem"), None).unwrap();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let addr = l.local_addr().unwrap();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Instant>();
    let server = std::thread::Builder::new()
        .name("server".into())
        .spawn(move || {
            runtime().block_on(async move {
                let l = TcpListener::from_std(l).unwrap();
                let (s, peer) = l.accept().await.unwrap();
                let _ = sluice_tcp::tune(&s, peer.ip());
                let tls = (!plain).then_some(&*tls);
                let stream = match accept_upgrade(s, tls, Duration::from_secs(5)).await {
                    Ok(Upgraded::Tls(t, _)) => Stream::Tls(t),
                    Ok(Upgraded::Plain(s)) if plain => Stream::Plain(s),
                    _ => panic!("not upgraded to user-space TLS"),
                };
                let (r, w) = stream.into_split();
                ready_tx.send(Instant::now()).unwrap();
                if server_sends {
                    let (cpu, fill) = send(w, bytes).await;
                    (cpu, fill, 0)
                } else {
                    let (n, cpu) = receive(r).await;
                    (cpu, Duration::ZERO, n)
                }
            })
        });
    let client = std::thread::Builder::new()
        .name("client".into())
        .spawn(move || {
            runtime().block_on(async move {
                let s = TcpStream::connect(addr).await.unwrap();
                let _ = sluice_tcp::tune(&s, addr.ip());
                let stream = if plain {
                    Stream::Plain(s)
                } else {
                    let t = connect_upgrade(
                        s,
                        &client_tls,
                        "127.0.0.1",
                        100003,
                        3,
                        Duration::from_secs(5),
                    )
                    .await
                    .unwrap();
                    Stream::Tls(Box::new(t))
                };
                let (r, w) = stream.into_split();
                if server_sends {
                    let (n, cpu) = receive(r).await;
                    (cpu, Duration::ZERO, n)
                } else {
                    let (cpu, fill) = send(w, bytes).await;
                    (cpu, fill, 0)
                }
            })
        });
    let (s_cpu, s_fill, s_n) = server.unwrap().join().unwrap();
    let (c_cpu, c_fill, c_n) = client.unwrap().join().unwrap();
    let wall = ready_rx.recv().unwrap().elapsed();
    let (sender, fill, receiver, n) = if server_sends {
        (s_cpu, s_fill, c_cpu, c_n)
    } else {
        (c_cpu, c_fill, s_cpu, s_n)
    };
    assert_eq!(n, bytes / REPLY_BYTES as u64 * (REPLY_BYTES as u64 + 100));
    Rep {
        sender,
        fill,
        receiver,
        bytes: n,
        wall,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let server_sends = match args.first().map(String::as_str) {
        None | Some("read") => true,
        Some("write") => false,
        Some(other) => panic!("read or write, not {other}"),
    };
    let gib: f64 = args.get(1).map_or(1.0, |a| a.parse().unwrap());
    let reps: usize = args.get(2).map_or(1, |a| a.parse().unwrap());
    let plain = args.get(3).is_some_and(|a| a == "plain");
    let bytes = (gib * GIB) as u64 / REPLY_BYTES as u64 * REPLY_BYTES as u64;
    let dir: PathBuf = std::env::temp_dir().join(format!("sluice-tls-cpu-{}", std::process::id()));
    pki(&dir);
    for i in 0..reps {
        let r = rep(&dir, server_sends, plain, bytes);
        let per = |d: Duration| d.as_secs_f64() / (r.bytes as f64 / GIB);
        println!(
            "rep={i} {} direction={} bytes={} sender_s_per_gib={:.3} sender_tls_s_per_gib={:.3} \
             receiver_s_per_gib={:.3} wall_s={:.2} mb_s={:.0}",
            if plain { "plain" } else { "tls" },
            if server_sends { "read" } else { "write" },
            r.bytes,
            per(r.sender),
            per(r.sender - r.fill),
            per(r.receiver),
            r.wall.as_secs_f64(),
            r.bytes as f64 / 1e6 / r.wall.as_secs_f64(),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
