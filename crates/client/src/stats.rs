//! Per-procedure client statistics, like `nfsstat -c`: calls, errors, retransmissions, bytes
//! and latency for each procedure of each program.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// Counters of one procedure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcStats {
    pub calls: u64,
    /// Calls answered with an error status or an RPC error.
    pub errors: u64,
    /// Transmissions beyond the first (resends after reconnects).
    pub retransmits: u64,
    /// Argument bytes sent (RPC header excluded).
    pub bytes_sent: u64,
    /// Reply record bytes received.
    pub bytes_received: u64,
    /// Sum of call latencies (start to reply, queueing included).
    pub latency_total: Duration,
    pub latency_max: Duration,
}

impl ProcStats {
    pub fn latency_avg(&self) -> Duration {
        if self.calls == 0 {
            Duration::ZERO
        } else {
            self.latency_total / self.calls as u32
        }
    }
}

/// Statistics of a client, keyed by program name and procedure name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientStats {
    pub procs: BTreeMap<(&'static str, u32), (&'static str, ProcStats)>,
}

impl ClientStats {
    pub(crate) fn record(
        &mut self,
        prog: &'static str,
        proc_: u32,
        name: &'static str,
        sample: Sample,
    ) {
        let (_, s) = self
            .procs
            .entry((prog, proc_))
            .or_insert((name, ProcStats::default()));
        s.calls += 1;
        s.errors += u64::from(sample.error);
        s.retransmits += u64::from(sample.transmissions.saturating_sub(1));
        s.bytes_sent += sample.bytes_sent as u64;
        s.bytes_received += sample.bytes_received as u64;
        s.latency_total += sample.elapsed;
        s.latency_max = s.latency_max.max(sample.elapsed);
    }

    /// The counters of one procedure, by program ("NFS3", "MOUNT3", "PORTMAP2") and name.
    pub fn get(&self, prog: &str, name: &str) -> Option<ProcStats> {
        self.procs
            .iter()
            .find(|((p, _), (n, _))| *p == prog && *n == name)
            .map(|(_, (_, s))| *s)
    }

    pub fn merge(&mut self, other: &ClientStats) {
        for (k, (name, s)) in &other.procs {
            let (_, t) = self.procs.entry(*k).or_insert((name, ProcStats::default()));
            t.calls += s.calls;
            t.errors += s.errors;
            t.retransmits += s.retransmits;
            t.bytes_sent += s.bytes_sent;
            t.bytes_received += s.bytes_received;
            t.latency_total += s.latency_total;
            t.latency_max = t.latency_max.max(s.latency_max);
        }
    }

    pub fn total_calls(&self) -> u64 {
        self.procs.values().map(|(_, s)| s.calls).sum()
    }

    pub fn total_retransmits(&self) -> u64 {
        self.procs.values().map(|(_, s)| s.retransmits).sum()
    }
}

/// One finished call, as the client records it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sample {
    pub error: bool,
    pub transmissions: u32,
    pub bytes_sent: usize,
    pub bytes_received: usize,
    pub elapsed: Duration,
}

/// A table like `nfsstat -c`, one line per procedure called.
impl fmt::Display for ClientStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<9} {:<12} {:>9} {:>7} {:>8} {:>14} {:>14} {:>11} {:>11}",
            "program",
            "procedure",
            "calls",
            "errors",
            "retrans",
            "bytes sent",
            "bytes recv",
            "avg ms",
            "max ms"
        )?;
        for ((prog, _), (name, s)) in &self.procs {
            writeln!(
                f,
                "{:<9} {:<12} {:>9} {:>7} {:>8} {:>14} {:>14} {:>11.3} {:>11.3}",
                prog,
                name,
                s.calls,
                s.errors,
                s.retransmits,
                s.bytes_sent,
                s.bytes_received,
                s.latency_avg().as_secs_f64() * 1e3,
                s.latency_max.as_secs_f64() * 1e3
            )?;
        }
        write!(
            f,
            "total: {} calls, {} retransmits",
            self.total_calls(),
            self.total_retransmits()
        )
    }
}

/// What file reads did, for `--stats`: the READs issued for them, how deep the pipeline ran,
/// and what readahead fetched and wasted. Summed over every file of a client.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Application reads (`read_at` calls, a sequential reader's steps) and bytes they asked.
    pub app_reads: u64,
    pub app_read_bytes: u64,
    /// READ calls issued for file data and bytes they asked for.
    pub reads: u64,
    pub read_bytes: u64,
    /// Data bytes the replies carried.
    pub read_bytes_received: u64,
    /// READs in flight for one file: most ever, and the sum of the depth seen by each READ as
    /// it was issued (itself included) for the average.
    pub in_flight_max: u64,
    pub in_flight_sum: u64,
    /// Most bytes in READs in flight for one file.
    pub in_flight_bytes_max: u64,
    /// From the readahead engine: bytes fetched for waiting readers and ahead of them, and
    /// bytes fetched ahead that were never used (discarded on a seek, eviction, invalidation or
    /// close, or skipped over).
    pub demand_bytes: u64,
    pub readahead_bytes: u64,
    pub unused_bytes: u64,
    /// Reply bytes dropped on arrival (their range was discarded or the file changed meanwhile).
    pub dropped_bytes: u64,
    /// Largest sum of one file's stream windows, and the window changes.
    pub window_max_bytes: u64,
    pub window_grows: u64,
    pub window_shrinks: u64,
    /// Times a file's cached data was dropped because its size/mtime/ctime changed.
    pub invalidations: u64,
    /// The global budget: limit and high-water mark.
    pub budget_limit_bytes: u64,
    pub budget_high_water_bytes: u64,
}

impl ReadStats {
    /// Adds another client's counts (maxima stay maxima).
    pub fn merge(&mut self, o: &ReadStats) {
        self.app_reads += o.app_reads;
        self.app_read_bytes += o.app_read_bytes;
        self.reads += o.reads;
        self.read_bytes += o.read_bytes;
        self.read_bytes_received += o.read_bytes_received;
        self.in_flight_max = self.in_flight_max.max(o.in_flight_max);
        self.in_flight_sum += o.in_flight_sum;
        self.in_flight_bytes_max = self.in_flight_bytes_max.max(o.in_flight_bytes_max);
        self.demand_bytes += o.demand_bytes;
        self.readahead_bytes += o.readahead_bytes;
        self.unused_bytes += o.unused_bytes;
        self.dropped_bytes += o.dropped_bytes;
        self.window_max_bytes = self.window_max_bytes.max(o.window_max_bytes);
        self.window_grows += o.window_grows;
        self.window_shrinks += o.window_shrinks;
        self.invalidations += o.invalidations;
        self.budget_limit_bytes = self.budget_limit_bytes.max(o.budget_limit_bytes);
        self.budget_high_water_bytes = self.budget_high_water_bytes.max(o.budget_high_water_bytes);
    }

    /// Average READ size in bytes.
    pub fn read_bytes_avg(&self) -> u64 {
        self.read_bytes.checked_div(self.reads).unwrap_or(0)
    }

    /// Average READs in flight as each was issued.
    pub fn in_flight_avg(&self) -> f64 {
        if self.reads == 0 {
            0.0
        } else {
            self.in_flight_sum as f64 / self.reads as f64
        }
    }

    /// Bytes fetched per byte asked (1.0 is perfect; readahead that is used also counts).
    pub fn fetch_amplification(&self) -> f64 {
        if self.app_read_bytes == 0 {
            0.0
        } else {
            self.read_bytes as f64 / self.app_read_bytes as f64
        }
    }
}

impl fmt::Display for ReadStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kib = |b: u64| b as f64 / 1024.0;
        writeln!(
            f,
            "reads: {} app reads ({:.1} KiB asked); {} READs, avg {:.1} KiB, {:.1} KiB received ({:.3}x asked)",
            self.app_reads,
            kib(self.app_read_bytes),
            self.reads,
            kib(self.read_bytes_avg()),
            kib(self.read_bytes_received),
            self.fetch_amplification()
        )?;
        writeln!(
            f,
            "in flight per file: max {} READs / {:.1} KiB, avg {:.2} READs",
            self.in_flight_max,
            kib(self.in_flight_bytes_max),
            self.in_flight_avg()
        )?;
        write!(
            f,
            "readahead: window max {:.1} KiB, {} grows, {} shrinks; {:.1} KiB ahead, {:.1} KiB on demand; \
             never used {:.1} KiB (+{:.1} KiB dropped on arrival); {} invalidations; budget high water {:.1} of {:.1} KiB",
            kib(self.window_max_bytes),
            self.window_grows,
            self.window_shrinks,
            kib(self.readahead_bytes),
            kib(self.demand_bytes),
            kib(self.unused_bytes),
            kib(self.dropped_bytes),
            self.invalidations,
            kib(self.budget_high_water_bytes),
            kib(self.budget_limit_bytes)
        )
    }
}
