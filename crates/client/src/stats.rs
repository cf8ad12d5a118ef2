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
