//! Server statistics: per-procedure call counts, errors and latency histograms, plus the sizes of
//! READ and WRITE payloads on the wire. Lock-free counters; a snapshot renders like `nfsstat -s`.

use sluice_xdr::{mount3, nfs3};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Latency histogram bucket upper bounds in microseconds (the last bucket is open-ended).
pub const LATENCY_BUCKETS_MICROS: [u64; 12] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 50_000, 250_000,
];

/// Size histogram bucket upper bounds in bytes: powers of two from 4 KiB to 16 MiB.
pub const SIZE_BUCKETS_BYTES: [u64; 13] = [
    4 << 10,
    8 << 10,
    16 << 10,
    32 << 10,
    64 << 10,
    128 << 10,
    256 << 10,
    512 << 10,
    1 << 20,
    2 << 20,
    4 << 20,
    8 << 20,
    16 << 20,
];

#[derive(Default)]
pub struct ProcStats {
    pub calls: AtomicU64,
    /// Calls answered with something other than success (an NFS error or an RPC-level error).
    pub errors: AtomicU64,
    pub latency_micros_total: AtomicU64,
    pub latency_buckets: [AtomicU64; LATENCY_BUCKETS_MICROS.len() + 1],
}

/// A histogram of sizes.
#[derive(Default)]
pub struct SizeHistogram {
    pub count: AtomicU64,
    pub bytes: AtomicU64,
    pub buckets: [AtomicU64; SIZE_BUCKETS_BYTES.len() + 1],
}

impl SizeHistogram {
    pub fn record(&self, bytes: u64) {
        self.count.fetch_add(1, Relaxed);
        self.bytes.fetch_add(bytes, Relaxed);
        let i = SIZE_BUCKETS_BYTES
            .iter()
            .position(|&b| bytes <= b)
            .unwrap_or(SIZE_BUCKETS_BYTES.len());
        self.buckets[i].fetch_add(1, Relaxed);
    }

    /// The median, as the upper bound of the bucket holding it (0 when empty).
    pub fn median_bucket_bytes(&self) -> u64 {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0;
        }
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen * 2 >= total {
                return SIZE_BUCKETS_BYTES.get(i).copied().unwrap_or(u64::MAX);
            }
        }
        u64::MAX
    }
}

#[derive(Default)]
pub struct Stats {
    pub nfs: [ProcStats; 22],
    pub mount: [ProcStats; 6],
    pub other_calls: AtomicU64,
    pub wire_read_bytes: SizeHistogram,
    pub wire_write_bytes: SizeHistogram,
    pub backend_read_bytes: SizeHistogram,
    pub backend_write_bytes: SizeHistogram,
}

impl Stats {
    pub fn record(&self, prog: u32, proc_: u32, elapsed: Duration, ok: bool) {
        let slot = match prog {
            nfs3::PROGRAM => self.nfs.get(proc_ as usize),
            mount3::PROGRAM => self.mount.get(proc_ as usize),
            _ => None,
        };
        let Some(p) = slot else {
            self.other_calls.fetch_add(1, Relaxed);
            return;
        };
        p.calls.fetch_add(1, Relaxed);
        if !ok {
            p.errors.fetch_add(1, Relaxed);
        }
        let us = elapsed.as_micros() as u64;
        p.latency_micros_total.fetch_add(us, Relaxed);
        let i = LATENCY_BUCKETS_MICROS
            .iter()
            .position(|&b| us <= b)
            .unwrap_or(LATENCY_BUCKETS_MICROS.len());
        p.latency_buckets[i].fetch_add(1, Relaxed);
    }

    /// Renders the counters like `nfsstat -s`.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "Server nfs v3:");
        let _ = writeln!(
            s,
            "{:<12} {:>10} {:>8} {:>12}",
            "proc", "calls", "errors", "avg_us"
        );
        for (i, p) in self.nfs.iter().enumerate() {
            let calls = p.calls.load(Relaxed);
            if calls == 0 {
                continue;
            }
            let avg = p.latency_micros_total.load(Relaxed) / calls;
            let _ = writeln!(
                s,
                "{:<12} {:>10} {:>8} {:>12}",
                nfs3::proc_::NAMES[i].to_ascii_lowercase(),
                calls,
                p.errors.load(Relaxed),
                avg
            );
        }
        for (name, h) in [
            ("wire READ", &self.wire_read_bytes),
            ("wire WRITE", &self.wire_write_bytes),
            ("backend read", &self.backend_read_bytes),
            ("backend write", &self.backend_write_bytes),
        ] {
            let n = h.count.load(Relaxed);
            let bytes = h.bytes.load(Relaxed);
            if let Some(avg) = bytes.checked_div(n) {
                let _ = writeln!(
                    s,
                    "{name}: {n} ops, {bytes} bytes, avg {avg} bytes, median <= {} bytes",
                    h.median_bucket_bytes()
                );
            }
        }
        s
    }
}
