//! `sluice bench`: a load generator over the client library, for the server benchmarks.
//!
//! It drives raw NFSv3 READ/WRITE calls with a fixed queue depth, so the same load can be put on
//! sluice and on another server (nfs-ganesha) side by side:
//!
//! * `write`: `--size` bytes in `--block` UNSTABLE WRITEs, `--depth` in flight; with `--shuffle`
//!   each group of `depth` blocks is sent in a random order (what a client's parallel writeback
//!   looks like on the wire), then one COMMIT.
//! * `read`: sequential READs of `--block`, `--depth` in flight.
//! * `randread`: READs of `--block` at random block-aligned offsets, `--depth` in flight, for
//!   `--count` calls.
//!
//! It prints one `key=value` line: bytes, seconds, rate, calls and latency percentiles, the
//! connections used and the NFS version.
//!
//! # Over NFSv4.1 / 4.2
//! A URL with `version=4.1`, `4.2` or `4` runs the same three workloads over a v4 session
//! (`sluice_client::v4`): each call is one COMPOUND (SEQUENCE, PUTFH, READ or WRITE with the
//! open's stateid), started through [`FileProtocol`] so it is on the wire before the next one
//! is started, exactly `--depth` in flight. The differences from v3, and why:
//!
//! * the file is opened first (OPEN, or OPEN with create and truncate for `write`) and closed
//!   after the clock stops: v4 READ and WRITE need an open's stateid, and v3 has no CLOSE to
//!   compare it with. OPEN is inside the timed part, as v3's LOOKUP or CREATE is.
//! * the client asks CREATE_SESSION for at least `--depth` slots: a session's slot count caps
//!   what is in flight, and a smaller table would quietly lower the depth. The server may grant
//!   fewer (sluice: 64, the Linux client's default), which the output cannot see; the scripts
//!   stay at depth 32 or less.
//! * `--nconnect N` is session trunking: one session (one slot table, so `--depth` is still the
//!   whole queue depth) over N connections, the extra ones bound with BIND_CONN_TO_SESSION. The
//!   `nconnect=` printed is the number of connections the session really used: a server that
//!   refuses the binds leaves the client on one, and a run labelled with more connections than
//!   it had would make a comparison with v3's `--nconnect` dishonest.
//! * a WRITE the server answers short is an error instead of being ignored: the load generator
//!   does not resend the rest, so its byte count would be wrong.

use clap::{Args, ValueEnum};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use sluice_client::proto::Stability;
use sluice_client::url::{NfsUrl, NfsVersion};
use sluice_client::v4::{self, CreateMode, Minor, V4Options};
use sluice_client::{Client, ClientOptions, FileProtocol};
use sluice_xdr::nfs3::{NfsFh3, StableHow};
use std::future::Future;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Workload {
    Write,
    Read,
    Randread,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// What to do.
    #[arg(long, value_enum)]
    pub workload: Workload,
    /// The file (nfs:// URL; `version=4.1`, `4.2` or `4` for NFSv4). `write` creates or
    /// truncates it; the others read it.
    pub url: String,
    /// Bytes to write or read sequentially (e.g. 1G).
    #[arg(long, default_value = "1G", value_parser = parse_bytes)]
    pub size: u64,
    /// Bytes per call (e.g. 1M, 4k).
    #[arg(long, default_value = "1M", value_parser = parse_bytes)]
    pub block: u64,
    /// Calls in flight.
    #[arg(long, default_value_t = 16)]
    pub depth: usize,
    /// `write`: send each group of `depth` blocks in a random order.
    #[arg(long)]
    pub shuffle: bool,
    /// `randread`: number of calls.
    #[arg(long, default_value_t = 20000)]
    pub count: u64,
    /// TCP connections to the server; calls go to them in turn (like Linux's `nconnect`; over
    /// NFSv4.1/4.2 one session trunked over them).
    #[arg(long, default_value_t = 1)]
    pub nconnect: usize,
    /// Seed for shuffling and random offsets.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Certificate files for a URL with `xprtsec=tls|mtls` (RPC-with-TLS on every connection).
    #[command(flatten)]
    pub tls: sluice_fuse::TlsArgs,
}

pub async fn run(a: BenchArgs) -> Result<(), String> {
    if a.block == 0 || a.block > (1 << 24) || a.depth == 0 {
        return Err("--block must be 1..=16M and --depth at least 1".into());
    }
    let url = NfsUrl::parse(&a.url).map_err(|e| format!("{}: {e}", a.url))?;
    match url.version {
        Some(v) if v.is_v4() => run_v4(a, url, v).await,
        _ => run_v3(a).await,
    }
}

async fn run_v3(a: BenchArgs) -> Result<(), String> {
    let mut options = ClientOptions {
        nconnect: a.nconnect,
        ..ClientOptions::default()
    };
    // A load generator runs with exactly the connections asked for.
    options.fixed_nconnect(a.nconnect);
    options.tls = a.tls.files();
    let client = Client::connect(a.url.as_str(), options)
        .await
        .map_err(|e| format!("{}: {e}", a.url))?;
    let path = client.target_path().to_string();
    let mut rng = rand::rngs::StdRng::seed_from_u64(a.seed);
    let started = Instant::now();
    let cpu0 = own_cpu_secs();
    let (bytes, latencies): (u64, Vec<Duration>) = match a.workload {
        Workload::Write => {
            let file = client
                .create_file(&path, 0o644)
                .await
                .map_err(|e| format!("{}: {e}", a.url))?;
            let fh = file.fh().clone();
            let blocks = a.size.div_ceil(a.block);
            let mut order: Vec<u64> = (0..blocks).collect();
            if a.shuffle {
                for group in order.chunks_mut(a.depth) {
                    group.shuffle(&mut rng);
                }
            }
            let data = bytes::Bytes::from(
                (0..a.block)
                    .map(|i| (i * 31 + 7) as u8)
                    .collect::<Vec<u8>>(),
            );
            let lat = pipeline(&client, &fh, order, a.depth, move |c, fh, b| {
                let data = data.clone();
                let off = b * a.block;
                let len = a.block.min(a.size - off) as usize;
                async move {
                    c.write(&fh, off, data.slice(..len), StableHow::UNSTABLE)
                        .await
                        .map(|_| ())
                }
            })
            .await?;
            client
                .commit(&fh, 0, 0)
                .await
                .map_err(|e| format!("{}: COMMIT: {e}", a.url))?;
            (a.size, lat)
        }
        Workload::Read => {
            let file = client
                .open(&path)
                .await
                .map_err(|e| format!("{}: {e}", a.url))?;
            let size = a.size.min(file.size());
            let fh = file.fh().clone();
            let blocks: Vec<u64> = (0..size.div_ceil(a.block)).collect();
            let block = a.block;
            let lat = pipeline(&client, &fh, blocks, a.depth, move |c, fh, b| async move {
                c.read(&fh, b * block, block as u32).await.map(|_| ())
            })
            .await?;
            (size, lat)
        }
        Workload::Randread => {
            let file = client
                .open(&path)
                .await
                .map_err(|e| format!("{}: {e}", a.url))?;
            let slots = (file.size() / a.block).max(1);
            let offsets: Vec<u64> = (0..a.count).map(|_| rng.gen_range(0..slots)).collect();
            let fh = file.fh().clone();
            let block = a.block;
            let lat = pipeline(&client, &fh, offsets, a.depth, move |c, fh, b| async move {
                c.read(&fh, b * block, block as u32).await.map(|_| ())
            })
            .await?;
            (a.count * a.block, lat)
        }
    };
    let secs = started.elapsed().as_secs_f64();
    let client_cpu = own_cpu_secs() - cpu0;
    let conns = client.connection_stats();
    println!(
        "{}",
        Summary {
            workload: a.workload,
            bytes,
            secs,
            latencies,
            client_cpu,
            nconnect: conns.len(),
            version: "3".into(),
            tls: tls_of(&conns),
        }
    );
    Ok(())
}

/// What one run measured; its `Display` is the `key=value` line the bench scripts read (keys
/// are only ever added at the end, so older scripts keep reading it).
struct Summary {
    workload: Workload,
    bytes: u64,
    secs: f64,
    /// Every call's latency, in any order.
    latencies: Vec<Duration>,
    client_cpu: f64,
    nconnect: usize,
    /// "3", "4.1" or "4.2".
    version: String,
    /// "none", or the TLS version and cipher suite of the connections ("TLSv1_3:TLS13_...").
    tls: String,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut lat = self.latencies.clone();
        lat.sort();
        let pct = |p: f64| {
            lat.get(((lat.len() as f64 - 1.0) * p) as usize)
                .copied()
                .unwrap_or_default()
                .as_micros()
        };
        let workload = format!("{:?}", self.workload).to_lowercase();
        write!(
            f,
            "workload={workload} bytes={} secs={:.3} rate_mb_s={:.1} calls={} p50_us={} \
             p99_us={} client_cpu_s={:.3} nconnect={} nfs_version={} tls={}",
            self.bytes,
            self.secs,
            self.bytes as f64 / self.secs / 1e6,
            lat.len(),
            pct(0.5),
            pct(0.99),
            self.client_cpu,
            self.nconnect,
            self.version,
            self.tls
        )
    }
}

/// The three workloads over an NFSv4.1/4.2 session (see the module docs).
async fn run_v4(a: BenchArgs, url: NfsUrl, version: NfsVersion) -> Result<(), String> {
    let minor = match version {
        NfsVersion::V4_1 => Minor::V1,
        NfsVersion::V4_2 => Minor::V2,
        _ => Minor::Highest,
    };
    let mut options = ClientOptions {
        nconnect: a.nconnect,
        ..ClientOptions::default()
    };
    // A load generator runs with exactly the connections asked for.
    options.fixed_nconnect(a.nconnect);
    options.tls = a.tls.files();
    // The session's slot table caps the calls in flight: ask for at least --depth slots.
    options.rpc.table.max_in_flight = options.rpc.table.max_in_flight.max(a.depth);
    let client = v4::Client::connect(&url, &options, minor, V4Options::default())
        .await
        .map_err(|e| format!("{}: {e}", a.url))?;
    let measured = bench_v4(&a, &url, &client).await;
    client.shutdown().await;
    let (bytes, latencies, secs, client_cpu) = measured?;
    println!(
        "{}",
        Summary {
            workload: a.workload,
            bytes,
            secs,
            latencies,
            client_cpu,
            nconnect: client.connection_stats().len(),
            version: format!("4.{}", client.minor_version()),
            tls: tls_of(&client.connection_stats()),
        }
    );
    Ok(())
}

/// Runs the workload on `client`: (bytes, latencies, seconds, client CPU seconds). The clock
/// runs from before the OPEN to the last reply (write: the COMMIT's); CLOSE is outside it.
// Starting a call yields the future of its reply on purpose (see `pipeline_v4`).
#[allow(clippy::async_yields_async)]
async fn bench_v4(
    a: &BenchArgs,
    url: &NfsUrl,
    client: &v4::Client,
) -> Result<(u64, Vec<Duration>, f64, f64), String> {
    let err = |e: v4::Error| format!("{}: {e}", a.url);
    let mut rng = rand::rngs::StdRng::seed_from_u64(a.seed);
    let started = Instant::now();
    let cpu0 = own_cpu_secs();
    let (fh, attr) = match a.workload {
        Workload::Write => client
            .create(&url.path, 0o644, CreateMode::Truncate)
            .await
            .map_err(err)?,
        Workload::Read | Workload::Randread => client.open(&url.path).await.map_err(err)?,
    };
    let block = a.block;
    let run = async {
        match a.workload {
            Workload::Write => {
                let blocks = a.size.div_ceil(block);
                let mut order: Vec<u64> = (0..blocks).collect();
                if a.shuffle {
                    for group in order.chunks_mut(a.depth) {
                        group.shuffle(&mut rng);
                    }
                }
                let data =
                    bytes::Bytes::from((0..block).map(|i| (i * 31 + 7) as u8).collect::<Vec<u8>>());
                let size = a.size;
                let lat = pipeline_v4(order, a.depth, |b| {
                    let (c, fh, data) = (client.clone(), fh.clone(), data.clone());
                    async move {
                        let off = b * block;
                        let len = block.min(size - off) as usize;
                        let call = c
                            .start_write(&fh, off, data.slice(..len), Stability::Unstable)
                            .await;
                        async move {
                            match call.await.0 {
                                Ok(r) if r.count as usize == len => Ok(()),
                                Ok(r) => Err(format!(
                                    "WRITE at {off}: the server took {} of {len} bytes",
                                    r.count
                                )),
                                Err(e) => Err(format!("WRITE at {off}: {e}")),
                            }
                        }
                    }
                })
                .await?;
                client
                    .start_commit(&fh, 0, 0)
                    .await
                    .await
                    .map_err(|e| format!("COMMIT: {e}"))?;
                Ok((size, lat))
            }
            Workload::Read => {
                let size = a.size.min(attr.size);
                let blocks: Vec<u64> = (0..size.div_ceil(block)).collect();
                let lat = pipeline_v4(blocks, a.depth, |b| read_v4(client, &fh, b * block, block))
                    .await?;
                Ok((size, lat))
            }
            Workload::Randread => {
                let slots = (attr.size / block).max(1);
                let offsets: Vec<u64> = (0..a.count).map(|_| rng.gen_range(0..slots)).collect();
                let lat = pipeline_v4(offsets, a.depth, |b| read_v4(client, &fh, b * block, block))
                    .await?;
                Ok((a.count * block, lat))
            }
        }
    };
    let measured: Result<(u64, Vec<Duration>), String> = run.await;
    let secs = started.elapsed().as_secs_f64();
    let client_cpu = own_cpu_secs() - cpu0;
    let closed = client.close(&fh).await.map_err(err);
    let (bytes, lat) = measured.map_err(|e| format!("{}: {e}", a.url))?;
    closed?;
    Ok((bytes, lat, secs, client_cpu))
}

/// Starts one READ of `block` bytes at `offset`; resolves once it is sent, to its reply.
#[allow(clippy::async_yields_async)]
fn read_v4(
    client: &v4::Client,
    fh: &v4::Fh,
    offset: u64,
    block: u64,
) -> impl Future<Output = impl Future<Output = Result<(), String>> + Send + 'static> {
    let (c, fh) = (client.clone(), fh.clone());
    async move {
        let call = c.start_read(&fh, offset, block as u32).await;
        async move {
            call.await
                .0
                .map(|_| ())
                .map_err(|e| format!("READ at {offset}: {e}"))
        }
    }
}

/// Starts a call for every item with at most `depth` in flight: `start` resolves once its call
/// is sent (it may wait for a free session slot), to the future of the reply. Returns each
/// call's latency, from before it was started to its reply.
async fn pipeline_v4<F, S, R>(
    items: Vec<u64>,
    depth: usize,
    mut start: F,
) -> Result<Vec<Duration>, String>
where
    F: FnMut(u64) -> S,
    S: Future<Output = R>,
    R: Future<Output = Result<(), String>> + Send + 'static,
{
    let mut set = JoinSet::new();
    let mut lat = Vec::with_capacity(items.len());
    let joined = |r: Option<Result<Result<Duration, String>, tokio::task::JoinError>>| match r {
        Some(Ok(r)) => r,
        Some(Err(e)) => Err(format!("task failed: {e}")),
        None => Err("nothing in flight".into()),
    };
    for item in items {
        if set.len() >= depth {
            lat.push(joined(set.join_next().await)?);
        }
        let t = Instant::now();
        let reply = start(item).await;
        set.spawn(async move { reply.await.map(|_| t.elapsed()) });
    }
    while !set.is_empty() {
        lat.push(joined(set.join_next().await)?);
    }
    Ok(lat)
}

/// Runs `op` for every item with at most `depth` in flight; returns each call's latency.
async fn pipeline<F, Fut>(
    client: &Client,
    fh: &NfsFh3,
    items: Vec<u64>,
    depth: usize,
    op: F,
) -> Result<Vec<Duration>, String>
where
    F: Fn(Client, NfsFh3, u64) -> Fut,
    Fut: std::future::Future<Output = Result<(), sluice_client::NfsError>> + Send + 'static,
{
    let mut set = JoinSet::new();
    let mut lat = Vec::with_capacity(items.len());
    for item in items {
        if set.len() >= depth {
            lat.push(join_one(&mut set).await?);
        }
        let fut = op(client.clone(), fh.clone(), item);
        set.spawn(async move {
            let t = Instant::now();
            fut.await.map(|_| t.elapsed())
        });
    }
    while !set.is_empty() {
        lat.push(join_one(&mut set).await?);
    }
    Ok(lat)
}

async fn join_one(
    set: &mut JoinSet<Result<Duration, sluice_client::NfsError>>,
) -> Result<Duration, String> {
    match set.join_next().await {
        Some(Ok(Ok(d))) => Ok(d),
        Some(Ok(Err(e))) => Err(e.to_string()),
        Some(Err(e)) => Err(format!("task failed: {e}")),
        None => Err("nothing in flight".into()),
    }
}

/// The `tls=` value of the summary: what every connection negotiated ("none" for plaintext).
/// A run whose connections differ says so rather than naming one of them.
fn tls_of(conns: &[sluice_client::transport::TransportStats]) -> String {
    let name = |t: &sluice_client::transport::TransportStats| match t.tls {
        Some(s) if s.kernel => format!("{}:{}:ktls", s.version, s.cipher_suite),
        Some(s) => format!("{}:{}", s.version, s.cipher_suite),
        None => "none".into(),
    };
    let mut names: Vec<String> = conns.iter().map(name).collect();
    names.dedup();
    match names.len() {
        0 => "none".into(),
        1 => names.remove(0),
        _ => "mixed".into(),
    }
}

/// Parses 4096, 4k, 1M, 1G (powers of two).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim().trim_end_matches(['B', 'b']).trim_end_matches('i');
    let (num, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1 << 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .map(|n| n * mult)
        .map_err(|_| format!("{s}: not a size (e.g. 4k, 1M, 1G)"))
}

/// CPU seconds (user + system, all threads) this process has used: with the run's wall time it
/// shows whether the client was the limit (about one core busy for a one-connection client).
fn own_cpu_secs() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}
