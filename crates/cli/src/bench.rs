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
//! It prints one `key=value` line: bytes, seconds, rate, calls and latency percentiles.

use clap::{Args, ValueEnum};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use sluice_client::{Client, ClientOptions};
use sluice_xdr::nfs3::{NfsFh3, StableHow};
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
    /// The file (nfs:// URL). `write` creates or truncates it; the others read it.
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
    /// TCP connections to the server; calls go to them in turn (like Linux's `nconnect`).
    #[arg(long, default_value_t = 1)]
    pub nconnect: usize,
    /// Seed for shuffling and random offsets.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

pub async fn run(a: BenchArgs) -> Result<(), String> {
    if a.block == 0 || a.block > (1 << 24) || a.depth == 0 {
        return Err("--block must be 1..=16M and --depth at least 1".into());
    }
    let options = ClientOptions {
        nconnect: a.nconnect,
        ..ClientOptions::default()
    };
    let client = Client::connect(a.url.as_str(), options)
        .await
        .map_err(|e| format!("{}: {e}", a.url))?;
    let path = client.target_path().to_string();
    let mut rng = rand::rngs::StdRng::seed_from_u64(a.seed);
    let started = Instant::now();
    let cpu0 = own_cpu_secs();
    let (bytes, latencies) = match a.workload {
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
    let mut lat = latencies;
    lat.sort();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or_default()
            .as_micros()
    };
    let workload = format!("{:?}", a.workload).to_lowercase();
    println!(
        "workload={workload} bytes={bytes} secs={secs:.3} rate_mb_s={:.1} calls={} p50_us={} \
         p99_us={} client_cpu_s={client_cpu:.3} nconnect={}",
        bytes as f64 / secs / 1e6,
        lat.len(),
        pct(0.5),
        pct(0.99),
        client.connection_stats().len()
    );
    Ok(())
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
