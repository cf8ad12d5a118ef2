//! Automatic `nconnect`: when one connection's receive path is what limits a client, open
//! another one.
//!
//! # Why
//! Every byte of a READ reply is copied once, out of the socket into the client's memory, by
//! the one task that reads that connection. On a fast path that copy is the bottleneck: on a
//! 2-core loopback (2026-11-26) `sluice cat` of a warm 512 MiB file from `sluice serve` spent
//! 0.17 s of CPU in 0.18 s, almost all of it in `recvfrom`, while the server spent 0.05 s (it
//! sends from the page cache without a copy). Two connections let two threads copy at once:
//! the same command with `--nconnect 2` took about 0.15 s. Linux's answer is the `nconnect`
//! mount option, which the user must know about and set; sluice's promise is no tuning, so
//! the client finds out itself.
//!
//! # The signal: reads that fill the buffer
//! A connection's reader asks the socket for as much as its buffer has room for. When the read
//! comes back full, more data was waiting: the bytes arrive faster than this reader takes them.
//! When the link, the server or the reading program is the limit, the reader catches up and its
//! reads come back short (one segment, one reply, whatever had arrived). So over a window of
//! received bytes, the share of full reads says whether the receive path is saturated:
//! ```text
//!   loopback, warm file, server sends from page cache:  ~all reads full (receive-bound)
//!   through a 300 MB/s link:                            reads are one or a few segments
//!   reader blocked on a slow pipe:                      no READs in flight, nothing arrives
//! ```
//! No clock is needed for the signal itself, so a busy machine does not fake it; the clock
//! only measures the rate before and after a new connection.
//!
//! # The decision
//! ```text
//!   every window_bytes received (all connections together):
//!     a connection was just added:  rate < gain_min x the rate before it  ─▶ stop for good
//!     full reads >= busy_fraction of the reads, fewer than max connections,
//!     none being opened, not stopped                                      ─▶ Grow (one)
//! ```
//! One connection at a time, each one judged by what it brought: a connection that did not
//! raise the rate by `gain_min` means the receive copy was not the only limit (the other core
//! is busy, or the server is next), and more would only cost. A failed connect or bind stops
//! growth too: fewer connections are slower, never wrong. Connections are never closed again:
//! an idle one costs a socket and two parked tasks.
//!
//! More connections only help if their readers run at once: the client commands run on a
//! current-thread runtime, so the transport gives each connection after the first a thread
//! of its own (`RpcClient::connect_parallel`). Measured side by side on the same machine,
//! `sluice cat --nconnect 2` went from about 0.93 to about 1.0 of `sluice bench --nconnect 2`
//! (a multi-thread runtime) with that change.
//!
//! The ceiling `max` is the caller's: the number of CPUs (capped at 4), so that each
//! connection's reader can have a core. An explicit `nconnect` (URL or option) fixes the
//! count and this policy is not used.

use std::time::{Duration, Instant};

use crate::MIB;

/// Settings of [`Trunk`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrunkConfig {
    /// Connections at most, the first included.
    pub max: usize,
    /// Bytes received (all connections) between two looks at the signal.
    pub window_bytes: u64,
    /// Share of full reads in a window that counts as a saturated receive path, 0..=1.
    pub busy_fraction: f64,
    /// The rate after a new connection must be at least this times the rate before it, or
    /// growth stops.
    pub gain_min: f64,
}

impl Default for TrunkConfig {
    fn default() -> Self {
        TrunkConfig {
            max: 1,
            // 16 MiB: about 5 ms at the loopback rates where this matters, long enough to
            // hold some 64 socket reads of 256 KiB, short next to a file worth trunking for
            // (32 MiB windows left the first 40 MiB of a 512 MiB read on one connection).
            window_bytes: 16 * MIB,
            busy_fraction: 0.8,
            gain_min: 1.1,
        }
    }
}

/// What the readers of all connections did so far (cumulative counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvCounters {
    /// Bytes read from the sockets.
    pub bytes: u64,
    /// Socket reads that returned data.
    pub reads: u64,
    /// Of those, the ones that filled the whole buffer offered.
    pub reads_full: u64,
}

impl RecvCounters {
    fn minus(&self, o: &RecvCounters) -> RecvCounters {
        RecvCounters {
            bytes: self.bytes.saturating_sub(o.bytes),
            reads: self.reads.saturating_sub(o.reads),
            reads_full: self.reads_full.saturating_sub(o.reads_full),
        }
    }
}

/// Why growth stopped (for statistics and the user).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// The last connection added raised the rate by less than `gain_min`.
    NoGain,
    /// Opening (or binding) a connection failed.
    Failed,
    /// `max` connections are open.
    AtMax,
}

/// The automatic-`nconnect` policy of one client. Pure: counters and time in, decisions out.
#[derive(Debug, Clone)]
pub struct Trunk {
    cfg: TrunkConfig,
    conns: usize,
    /// The counters and time of the last look.
    last: Option<(Instant, RecvCounters)>,
    /// The rate of the window in which a connection was asked for, until the window after it
    /// was added has been judged.
    rate_before: Option<f64>,
    /// A connection is being opened.
    opening: bool,
    /// Judged after the first full window with the new connection, not the partial one in
    /// which it arrived.
    skip_one: bool,
    stopped: Option<Stopped>,
}

impl Trunk {
    /// The policy for a client that has `conns` connections open.
    pub fn new(cfg: TrunkConfig, conns: usize) -> Trunk {
        let stopped = (conns >= cfg.max).then_some(Stopped::AtMax);
        Trunk {
            cfg,
            conns,
            last: None,
            rate_before: None,
            opening: false,
            skip_one: false,
            stopped,
        }
    }

    /// True when `bytes` received in all is a window past the last look: the caller then
    /// gathers the counters and calls [`Trunk::look`]. Cheap, for every call.
    pub fn due(&self, bytes: u64) -> bool {
        if self.stopped.is_some() || self.opening {
            return false;
        }
        match self.last {
            None => true,
            Some((_, c)) => bytes >= c.bytes.saturating_add(self.cfg.window_bytes),
        }
    }

    /// Looks at the counters at `now`: `true` means open one more connection now, then report
    /// [`Trunk::opened`] or [`Trunk::failed`].
    pub fn look(&mut self, now: Instant, c: RecvCounters) -> bool {
        if self.stopped.is_some() || self.opening {
            return false;
        }
        let Some((t0, c0)) = self.last else {
            self.last = Some((now, c));
            return false;
        };
        let d = c.minus(&c0);
        if d.bytes < self.cfg.window_bytes {
            return false;
        }
        self.last = Some((now, c));
        let secs = now
            .saturating_duration_since(t0)
            .max(Duration::from_micros(1));
        let rate = d.bytes as f64 / secs.as_secs_f64();
        if self.skip_one {
            self.skip_one = false;
            return false;
        }
        if let Some(before) = self.rate_before.take() {
            if rate < before * self.cfg.gain_min {
                self.stopped = Some(Stopped::NoGain);
                return false;
            }
        }
        let busy = d.reads > 0 && d.reads_full as f64 >= self.cfg.busy_fraction * d.reads as f64;
        if !busy {
            return false;
        }
        self.opening = true;
        self.rate_before = Some(rate);
        true
    }

    /// The connection asked for is open and carries calls; counting restarts with it.
    pub fn opened(&mut self, now: Instant, c: RecvCounters) {
        self.opening = false;
        self.conns += 1;
        self.last = Some((now, c));
        self.skip_one = true;
        if self.conns >= self.cfg.max {
            self.stopped = Some(Stopped::AtMax);
        }
    }

    /// The connection asked for could not be opened: no more attempts.
    pub fn failed(&mut self) {
        self.opening = false;
        self.rate_before = None;
        self.stopped = Some(Stopped::Failed);
    }

    /// Connections open (as far as this policy knows).
    pub fn conns(&self) -> usize {
        self.conns
    }

    /// Why growth stopped, if it did.
    pub fn stopped(&self) -> Option<Stopped> {
        self.stopped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(max: usize) -> TrunkConfig {
        TrunkConfig {
            max,
            window_bytes: 32 * MIB,
            ..TrunkConfig::default()
        }
    }

    /// Feeds windows of 32 MiB, each taking `ms`, with `full` of 100 reads full; returns at
    /// which window (0-based) a connection was asked for, after reporting it opened.
    struct Run {
        t: Trunk,
        now: Instant,
        c: RecvCounters,
    }

    impl Run {
        fn new(max: usize) -> Run {
            let now = Instant::now();
            let mut t = Trunk::new(cfg(max), 1);
            let c = RecvCounters::default();
            assert!(t.due(0));
            assert!(!t.look(now, c), "the first look only sets the baseline");
            Run { t, now, c }
        }
        fn window(&mut self, ms: u64, full: u64) -> bool {
            self.now += Duration::from_millis(ms);
            self.c.bytes += 32 * MIB;
            self.c.reads += 100;
            self.c.reads_full += full;
            assert!(self.t.due(self.c.bytes) || self.t.stopped().is_some() || self.t.opening);
            self.t.look(self.now, self.c)
        }
        fn opened(&mut self) {
            self.t.opened(self.now, self.c);
        }
    }

    #[test]
    fn a_saturated_reader_gets_a_second_connection() {
        let mut r = Run::new(4);
        assert!(r.window(10, 95), "95% full reads: receive-bound");
        assert!(!r.window(10, 95), "one connection at a time");
        r.opened();
        assert_eq!(r.t.conns(), 2);
    }

    #[test]
    fn short_reads_never_grow() {
        let mut r = Run::new(4);
        for _ in 0..100 {
            assert!(!r.window(100, 30), "a link-bound reader catches up");
        }
        assert_eq!(r.t.conns(), 1);
        assert_eq!(
            r.t.stopped(),
            None,
            "it may still grow if the path gets faster"
        );
    }

    #[test]
    fn growth_stops_when_a_connection_brings_nothing() {
        let mut r = Run::new(4);
        assert!(r.window(10, 95));
        r.opened();
        assert!(
            !r.window(10, 95),
            "the window the connection arrived in is not judged"
        );
        // Same rate with two connections: the copy was not the only limit.
        assert!(!r.window(10, 95));
        assert_eq!(r.t.stopped(), Some(Stopped::NoGain));
        assert!(!r.t.due(u64::MAX));
        assert_eq!(r.t.conns(), 2);
    }

    #[test]
    fn growth_goes_on_while_each_connection_pays() {
        let mut r = Run::new(3);
        assert!(r.window(12, 95));
        r.opened();
        assert!(!r.window(10, 95));
        assert!(
            r.window(8, 95),
            "12 ms to 8 ms a window: 1.5x, so ask for a third"
        );
        r.opened();
        assert_eq!(r.t.stopped(), Some(Stopped::AtMax));
        assert!(!r.window(1, 100));
        assert_eq!(r.t.conns(), 3);
    }

    #[test]
    fn a_failed_connect_stops_growth() {
        let mut r = Run::new(4);
        assert!(r.window(10, 95));
        r.t.failed();
        assert!(!r.window(10, 100));
        assert_eq!(r.t.stopped(), Some(Stopped::Failed));
        assert_eq!(r.t.conns(), 1);
    }

    #[test]
    fn a_ceiling_of_one_never_looks() {
        let t = Trunk::new(cfg(1), 1);
        assert_eq!(t.stopped(), Some(Stopped::AtMax));
        assert!(!t.due(u64::MAX));
    }

    #[test]
    fn looks_come_once_per_window() {
        let mut r = Run::new(4);
        assert!(!r.t.due(16 * MIB));
        assert!(r.t.due(32 * MIB));
        // A look before a whole window has passed changes nothing.
        let half = RecvCounters {
            bytes: 16 * MIB,
            reads: 50,
            reads_full: 50,
        };
        assert!(!r.t.look(r.now, half));
        assert!(r.window(10, 100));
    }
}
