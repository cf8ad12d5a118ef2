//! Does READ_PLUS pay? A benchmark, not a test (`#[ignore]`; `bench/read-plus.sh` runs it):
//! a client reads a sparse and a dense file start to end in 1 MiB calls, once with READ and
//! once with READ_PLUS, from an in-process `sluice serve` on loopback, and prints per file and
//! op the median wall time of `RP_RUNS` reads (default 3), the process CPU time (client and
//! server together) and the COMPOUND reply bytes (what went over the wire, RPC header and
//! record marks aside), with the ratios. Every read is checked against the file's bytes. The
//! client lays each reply into a 1 MiB buffer (holes as zeros), as a kernel client fills its
//! pages, so neither op skips the client's share of the work.
//!
//! Environment: RP_MIB (256) file size, RP_DATA_PCT (10) share of the sparse file that is data,
//! in runs of RP_RUN_KIB (256) spread evenly, RP_RUNS (3).

#[macro_use]
mod support;

use sluice_xdr::nfs4::ops::{
    ChannelAttrs4, NfsArgop4, NfsResop4, ReadArgs, ReadPlusArgs, ReadPlusContent, Res4,
};
use sluice_xdr::nfs4::{NfsFh4, Stateid4};
use sluice_xdr::to_bytes;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};
use support::nfs4::*;
use support::{rw, TestServer};

const CALL_BYTES: u64 = 1 << 20;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// User + system CPU of this process so far (clock ticks of 10 ms).
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// Reads the whole file with READ (`plus` false) or READ_PLUS: wire bytes of the replies,
/// checking each call's bytes against `want`.
async fn read_all(v: &mut V4, fh: &NfsFh4, size: u64, plus: bool, want: &[u8]) -> u64 {
    let mut buf = vec![0u8; CALL_BYTES as usize];
    let mut wire = 0u64;
    let mut offset = 0u64;
    while offset < size {
        let op = if plus {
            NfsArgop4::ReadPlus(ReadPlusArgs {
                stateid: Stateid4::ANONYMOUS,
                offset,
                count: CALL_BYTES as u32,
            })
        } else {
            NfsArgop4::Read(ReadArgs {
                stateid: Stateid4::ANONYMOUS,
                offset,
                count: CALL_BYTES as u32,
            })
        };
        let res = v
            .send_minor(2, vec![NfsArgop4::Putfh(fh.clone()), op])
            .await;
        wire += to_bytes(&res).len() as u64;
        let got = match res.results.get(2) {
            Some(NfsResop4::Read(Res4::Ok(r))) => {
                let mut at = 0;
                for c in r.data.chunks() {
                    buf[at..at + c.len()].copy_from_slice(c);
                    at += c.len();
                }
                at as u64
            }
            Some(NfsResop4::ReadPlus(Res4::Ok(r))) => {
                let mut end = offset;
                for c in &r.contents.0 {
                    match c {
                        ReadPlusContent::Data(d) => {
                            let mut at = (d.offset - offset) as usize;
                            for ch in d.data.chunks() {
                                buf[at..at + ch.len()].copy_from_slice(ch);
                                at += ch.len();
                            }
                            end = d.offset + d.data.len() as u64;
                        }
                        ReadPlusContent::Hole(h) => {
                            let at = (h.offset - offset) as usize;
                            let len = h.length.min(offset + CALL_BYTES - h.offset) as usize;
                            buf[at..at + len].fill(0);
                            end = h.offset + h.length;
                        }
                        other => panic!("{other:?}"),
                    }
                }
                end.min(size) - offset
            }
            other => panic!("{other:?} in {res:?}"),
        };
        assert!(got > 0, "no progress at {offset}");
        let (a, b) = (offset as usize, (offset + got) as usize);
        assert!(buf[..got as usize] == want[a..b], "wrong bytes at {offset}");
        offset += got;
    }
    wire
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark, not a pass/fail test: bench/read-plus.sh runs it, or cargo test -p sluice-server --test read_plus_bench -- --ignored --nocapture"]
async fn read_plus_against_read() {
    let size = env_u64("RP_MIB", 256) << 20;
    let pct = env_u64("RP_DATA_PCT", 10);
    let run = env_u64("RP_RUN_KIB", 256) << 10;
    let runs = env_u64("RP_RUNS", 3) as usize;
    let s = TestServer::start(rw()).await;
    // Sparse: `run` bytes of data every `run * 100 / pct`; dense: all data.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut noise = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    let mut sparse = vec![0u8; size as usize];
    let f = std::fs::File::create(s.export.join("sparse")).unwrap();
    f.set_len(size).unwrap();
    let stride = run * 100 / pct;
    let mut at = 0;
    while at < size {
        let n = run.min(size - at) as usize;
        let d = noise(n);
        f.write_all_at(&d, at).unwrap();
        sparse[at as usize..at as usize + n].copy_from_slice(&d);
        at += stride;
    }
    drop(f);
    let dense = noise(size as usize);
    std::fs::write(s.export.join("dense"), &dense).unwrap();
    // Replies of a whole 1 MiB READ plus its headers.
    let fore = ChannelAttrs4 {
        maxresponsesize: (1 << 20) + 4096,
        ..chan()
    };
    let mut v = V4::mount_with(&s, "read_plus bench", fore).await;
    println!(
        "| file | op | median ms | runs ms | CPU ms (median) | reply MiB | time READ_PLUS/READ | bytes READ_PLUS/READ |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (name, want) in [("sparse", &sparse), ("dense", &dense)] {
        let (_, fh) = v
            .open(
                &s.export,
                "o",
                name,
                false,
                sluice_xdr::nfs4::ops::OPEN4_SHARE_ACCESS_READ,
                0,
            )
            .await
            .unwrap();
        // One warm-up read of each (page cache, server tables), not counted.
        read_all(&mut v, &fh, size, false, want).await;
        let mut medians = Vec::new();
        for plus in [false, true] {
            let (mut times, mut cpus, mut wire) = (Vec::new(), Vec::new(), 0);
            for _ in 0..runs {
                let (t0, c0) = (Instant::now(), cpu());
                wire = read_all(&mut v, &fh, size, plus, want).await;
                times.push(t0.elapsed());
                cpus.push(cpu() - c0);
            }
            times.sort();
            cpus.sort();
            let med = times[runs / 2];
            medians.push((med, wire));
            let ratio = if plus {
                let (t, b) = medians[0];
                format!(
                    "{:.2} | {:.3}",
                    med.as_secs_f64() / t.as_secs_f64(),
                    wire as f64 / b as f64
                )
            } else {
                "- | -".to_string()
            };
            println!(
                "| {name} | {} | {} | {} | {} | {:.1} | {ratio} |",
                if plus { "READ_PLUS" } else { "READ" },
                med.as_millis(),
                times
                    .iter()
                    .map(|t| t.as_millis().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                cpus[runs / 2].as_millis(),
                wire as f64 / (1 << 20) as f64,
            );
        }
    }
}
