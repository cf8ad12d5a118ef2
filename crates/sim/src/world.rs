//! The event loop: one client, one server, two link directions, one virtual clock.

use crate::client::Client;
use crate::content::Content;
use crate::pipe::Segment;
use crate::scenario::{Pattern, Report, Scenario};
use crate::server::Server;
use sluice_link::model::{Direction, Event, LinkConfig, LinkDirection, Mode, QUEUE_BYTES_FLOOR};
use sluice_rpc::client::Transport;
use std::time::Instant;

/// Bound on the rounds the loop may spend at one instant before it is declared livelocked.
/// Each round delivers, serves or transmits something; a real instant needs a few per call in
/// flight, so a million means a bug in a driver, not a busy moment.
const ROUNDS_PER_INSTANT_MAX: u64 = 1_000_000;

/// Runs `scenario` to completion in virtual time whose zero is `epoch`, and reports.
///
/// The library never reads a clock, so the caller supplies the `Instant` virtual time starts
/// from (tests capture `Instant::now()` once). The result does not depend on it: a run is a
/// pure function of the scenario (seed included) and the code.
pub fn run(scenario: &Scenario, epoch: Instant) -> Report {
    scenario.validate();
    println!("sluice-sim: seed {} ({scenario})", scenario.seed);
    let mut world = World::new(scenario, epoch);
    world.run();
    world.report()
}

struct World {
    sc: Scenario,
    epoch: Instant,
    now: Instant,
    c2s: LinkDirection<Segment>,
    s2c: LinkDirection<Segment>,
    client: Client,
    server: Server,
    finished_at: Option<Instant>,
    stuck: Option<String>,
}

impl World {
    fn new(sc: &Scenario, epoch: Instant) -> Self {
        let queue = sc
            .queue_bytes
            .unwrap_or_else(|| sc.bdp_bytes().max(QUEUE_BYTES_FLOOR));
        let base = LinkConfig {
            rate_bytes_per_sec: sc.rate_bytes_per_sec,
            queue_bytes_max: Some(queue),
            loss_ratio: sc.loss_ratio,
            dup_ratio: sc.dup_ratio,
            reorder_ratio: sc.reorder_ratio,
            seed: sc.seed,
            ..LinkConfig::default()
        };
        // All the jitter on the way out, see `Scenario::rtt_jitter`.
        let forward = LinkConfig {
            rtt: sc.rtt + sc.rtt_jitter,
            jitter: sc.rtt_jitter,
            ..base.clone()
        };
        let reverse = LinkConfig {
            rtt: sc.rtt - sc.rtt_jitter,
            ..base
        };
        let mode = match sc.transport {
            Transport::Tcp => Mode::Stream,
            Transport::Udp => Mode::Datagram,
        };
        let content = Content::new(sc.seed);
        let server = Server::new(sc, &content, epoch);
        World {
            sc: sc.clone(),
            epoch,
            now: epoch,
            c2s: LinkDirection::new(&forward, Direction::Forward, mode, epoch),
            s2c: LinkDirection::new(&reverse, Direction::Reverse, mode, epoch),
            client: Client::new(
                sc,
                epoch,
                content,
                server.file_handle(),
                server.file_version(),
            ),
            server,
            finished_at: None,
            stuck: None,
        }
    }

    /// Settles every instant, then jumps to the earliest wake-up, until the application is done
    /// and every call has completed (the liveness phase), or the time limit.
    fn run(&mut self) {
        let deadline = self.epoch + self.sc.time_limit;
        loop {
            if let Err(e) = self.settle() {
                self.stuck = Some(e);
                return;
            }
            if self.finished_at.is_none() && self.client.finished() {
                self.finished_at = Some(self.now);
            }
            if self.finished_at.is_some() && self.client.drained() {
                return;
            }
            let Some(next) = self.next_wake() else {
                self.stuck = Some(self.diagnose("nothing scheduled"));
                return;
            };
            if next > deadline {
                self.stuck = Some(self.diagnose("time limit"));
                return;
            }
            assert!(next > self.now, "a wake-up at {next:?} is not after now");
            self.now = next;
        }
    }

    /// Runs everything due at `now` until nothing changes.
    fn settle(&mut self) -> Result<(), String> {
        let now = self.now;
        for _ in 0..ROUNDS_PER_INSTANT_MAX {
            let mut progress = false;
            while let Some(ev) = self.s2c.poll_deliver(now) {
                progress = true;
                match ev {
                    Event::Deliver(seg) => self.client.on_segment(now, seg),
                    Event::Reset => unreachable!("resets are not configured"),
                }
            }
            while let Some(ev) = self.c2s.poll_deliver(now) {
                progress = true;
                match ev {
                    Event::Deliver(seg) => self.server.on_segment(seg),
                    Event::Reset => unreachable!("resets are not configured"),
                }
            }
            progress |= self.server.step(now, &mut self.s2c);
            progress |= self.client.step(now, &mut self.c2s);
            if !progress {
                return Ok(());
            }
        }
        Err(self.diagnose("livelock: no quiescence at one instant"))
    }

    fn next_wake(&self) -> Option<Instant> {
        [
            self.c2s.poll_timeout(),
            self.s2c.poll_timeout(),
            self.client.next_wake(&self.c2s),
            self.server.next_wake(&self.s2c),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn diagnose(&self, what: &str) -> String {
        format!(
            "{what} at {:?}: app finished {}, {} calls outstanding ({} in slots), server holds {}, \
             links idle {}/{}",
            self.now - self.epoch,
            self.client.finished(),
            self.client.outstanding_calls(),
            self.client.table.in_flight(),
            self.server.outstanding(),
            self.c2s.is_idle(),
            self.s2c.is_idle(),
        )
    }

    fn report(self) -> Report {
        let sc = &self.sc;
        let end = self.finished_at.unwrap_or(self.now);
        let elapsed = end - self.epoch;
        let rates = self.client.reader_rates();
        let achieved = match sc.pattern {
            Pattern::Pipelined => {
                let secs = elapsed.as_secs_f64();
                (secs > 0.0).then(|| self.client.stats.bytes_read_by_app as f64 / secs)
            }
            Pattern::Getattr { .. } => None,
            _ => rates.iter().copied().sum::<Option<f64>>(),
        };
        let (c2s, s2c) = (self.c2s.stats(), self.s2c.stats());
        let lost = match sc.transport {
            Transport::Udp => {
                c2s.lost_segments + c2s.full_segments + s2c.lost_segments + s2c.full_segments
            }
            Transport::Tcp => 0,
        };
        let completed = self.stuck.is_none() && self.client.finished() && self.client.drained();
        let call_stats = *self.client.table.stats();
        let final_window_bytes = self.client.readahead().window_bytes();
        let readahead_stats = self.client.readahead().stats().clone();
        let read_core = self.client.read_core_stats().clone();
        let mut stats = self.client.stats;
        if let Some(s) = self.stuck {
            stats.errors.push(s);
        }
        Report {
            seed: sc.seed,
            completed,
            elapsed,
            bytes_read_by_app: stats.bytes_read_by_app,
            bytes_asked_by_app: stats.bytes_asked_by_app,
            bytes_fetched_from_server: stats.bytes_fetched,
            achieved_rate_after_warmup: achieved,
            reader_rates_after_warmup: rates,
            link_rate: sc.rate_bytes_per_sec,
            bdp_bytes: sc.bdp_bytes(),
            retransmits: call_stats.retransmissions,
            lost_datagrams: lost,
            read_sizes: stats.read_sizes,
            window_trace: stats.trace,
            window_trace_dropped: stats.trace_dropped,
            final_window_bytes,
            calls_completed: call_stats.calls_completed,
            call_stats,
            readahead_stats,
            read_core,
            link_c2s: c2s,
            link_s2c: s2c,
            server_calls: self.server.stats.calls,
            server_readahead_bytes: self
                .server
                .server_stats()
                .engine
                .readahead_bytes
                .load(std::sync::atomic::Ordering::Relaxed),
            gap_fetch_bytes: stats.gap_fetch_bytes,
            cache_bytes_peak: stats.cache_bytes_peak,
            data_errors: stats.data_errors,
            errors: stats.errors,
        }
    }
}
