//! The read path of a [`crate::File`]: the tokio driver of `sluice_engine::readcore`, the
//! pure state of a file's reads (cache, READs in flight, waiting readers, generations, change
//! detection, around the autotuned readahead of `sluice_engine::readahead`). This module owns
//! only the lock, the clock, the tasks that send READs and wait for them, and the statistics.
//!
//! ```text
//!   read_at(off, len) ──begin_read(now, ..)──► ReadCore ──next_reads()──► READ calls (a task)
//!        │                                        ▲
//!        ▼                                        └── on_reply(ticket, data, rtt) ◄── replies
//!   poll_read(waiter): Ready(data) | Failed(e) | Wait ──► wait for the next reply
//! ```
//!
//! The design (one file, many readers; change detection; bounds) is the core's: see its
//! module docs. Every application read first revalidates attributes older than
//! [`crate::ClientOptions::attr_timeout`] with a GETATTR.

use crate::proto::{FileError, FileProtocol, ReadReply};
use crate::stats::ReadStats;
use bytes::Bytes;
use sluice_engine::readahead::{
    ReadaheadConfig, ReadaheadMode, ReadaheadStats, TraceEvent, TraceKind,
};
use sluice_engine::readcore::{ReadCore, ReadCoreStats, ReadData, ReadPoll, ReadTicket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Parses `auto`, `off` or `fixed:SIZE` (SIZE in bytes or with k/m/g, KiB/MiB/GiB suffixes:
/// `fixed:128k`, `fixed:15m`, `fixed:1MiB`).
pub fn parse_readahead(s: &str) -> Result<ReadaheadMode, String> {
    let s = s.trim();
    match s.to_ascii_lowercase().as_str() {
        "auto" => return Ok(ReadaheadMode::Auto),
        "off" | "none" | "0" => return Ok(ReadaheadMode::Off),
        _ => {}
    }
    let size = s
        .strip_prefix("fixed:")
        .or_else(|| s.strip_prefix("FIXED:"))
        .ok_or_else(|| format!("bad readahead {s:?}: auto, off or fixed:SIZE (e.g. fixed:128k)"))?;
    let bytes = parse_size(size).ok_or_else(|| format!("bad readahead size {size:?}"))?;
    if bytes == 0 {
        return Ok(ReadaheadMode::Off);
    }
    Ok(ReadaheadMode::Fixed(bytes))
}

/// `131072`, `128k`, `128KiB`, `15m`, `1g` (powers of 1024).
fn parse_size(s: &str) -> Option<u64> {
    let lower = s.trim().to_ascii_lowercase();
    let digits = lower.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &lower[digits.len()..];
    let n: u64 = digits.parse().ok()?;
    let mult = match unit {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// The state shared by all handles and readers of one open file.
pub(crate) struct FileShared<P: FileProtocol> {
    client: P,
    fh: P::Handle,
    /// Names the file in traces.
    id: u64,
    state: Mutex<State<P::Error>>,
    /// Woken whenever a READ completes (data, error or invalidation).
    arrived: Notify,
}

struct State<E> {
    core: ReadCore<E>,
    /// Counters already added to the client's [`ReadStats`].
    reported_engine: ReadaheadStats,
    reported_core: ReadCoreStats,
}

impl<P: FileProtocol> FileShared<P> {
    pub(crate) fn new(client: P, fh: P::Handle, attr: &P::Attr) -> Arc<FileShared<P>> {
        let o = client.files().options();
        let mode = o.readahead;
        let wire_bytes_cap = match mode {
            ReadaheadMode::Fixed(b) => b,
            _ => u64::MAX,
        };
        let config = ReadaheadConfig {
            mode,
            rsize_bytes: u64::from(client.rsize()),
            trace_events_max: if o.trace_readahead { 1024 } else { 0 },
            ..ReadaheadConfig::default()
        };
        let config = ReadaheadConfig {
            // The engine needs rsize to be whole alignment units; tiny rsizes (< 4 KiB) align
            // to themselves.
            align_bytes: if config.rsize_bytes.is_multiple_of(config.align_bytes) {
                config.align_bytes
            } else {
                config.rsize_bytes
            },
            ..config
        };
        let state = State {
            core: ReadCore::new(config, wire_bytes_cap, P::version(attr), Instant::now()),
            reported_engine: ReadaheadStats::default(),
            reported_core: ReadCoreStats::default(),
        };
        Arc::new(FileShared {
            id: client.files().next_file_id(),
            client,
            fh,
            state: Mutex::new(state),
            arrived: Notify::new(),
        })
    }

    /// The file size as last seen.
    pub(crate) fn size(&self) -> u64 {
        self.lock().core.size()
    }

    /// New attributes from outside the read path (GETATTR, refresh).
    pub(crate) fn observe_attrs(&self, a: &P::Attr) {
        let mut st = self.lock();
        {
            let mut budget = self.client.files().budget.lock().expect("budget lock");
            st.core.observe(Instant::now(), P::version(a), &mut budget);
        }
        self.report(&mut st);
        drop(st);
        self.arrived.notify_waiters();
    }

    /// Forgets all data read so far and every READ in flight (the caller wrote to the file
    /// itself, which need not change what the attributes show within their time granularity).
    pub(crate) fn invalidate(&self) {
        let mut st = self.lock();
        {
            let mut budget = self.client.files().budget.lock().expect("budget lock");
            st.core.invalidate(Instant::now(), &mut budget);
        }
        self.report(&mut st);
        drop(st);
        self.arrived.notify_waiters();
    }

    /// Reads up to `len` bytes at `offset`: fewer only at end of file (none at or past it).
    pub(crate) async fn read_at(
        self: &Arc<Self>,
        offset: u64,
        len: u64,
    ) -> Result<Vec<Bytes>, P::Error> {
        self.revalidate_if_old().await?;
        let waiter = {
            let mut st = self.lock();
            let begun = {
                let mut budget = self.client.files().budget.lock().expect("budget lock");
                st.core.begin_read(Instant::now(), offset, len, &mut budget)
            };
            self.report(&mut st);
            match begun {
                Some((waiter, _)) => waiter,
                None => return Ok(Vec::new()),
            }
        };
        let _guard = WaitGuard {
            shared: self,
            waiter,
        };
        // What the engine planned goes out even if the cache already holds this read.
        self.pump();
        loop {
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let poll = self.lock().core.poll_read(waiter);
            match poll {
                ReadPoll::Ready(data) => return Ok(data),
                ReadPoll::Failed(e) => return Err(e),
                // The safety net may have queued what is neither cached nor requested.
                ReadPoll::Wait => self.pump(),
            }
            arrived.await;
        }
    }

    /// GETATTR when the attributes are older than `attr_timeout`.
    async fn revalidate_if_old(&self) -> Result<(), P::Error> {
        let timeout = self.client.files().options().attr_timeout;
        let old = self.lock().core.version_age(Instant::now()) > timeout;
        if old {
            let a = self.client.getattr(&self.fh).await?;
            self.observe_attrs(&a);
        }
        Ok(())
    }

    /// Sends the READs the core releases, from a task of their own (so that a caller dropping
    /// its future never strands a READ the core counts as in flight).
    fn pump(self: &Arc<Self>) {
        let batch = {
            let mut st = self.lock();
            let batch = st.core.next_reads();
            self.report(&mut st);
            batch
        };
        if batch.is_empty() {
            return;
        }
        let shared = self.clone();
        tokio::spawn(async move {
            for ticket in batch {
                let r = ticket.range;
                let count = u32::try_from(r.len).expect("READs are at most rsize");
                let call = shared.client.start_read(&shared.fh, r.offset, count).await;
                let s = shared.clone();
                tokio::spawn(async move {
                    let (res, rtt) = call.await;
                    s.complete(ticket, res, rtt);
                });
            }
        });
    }

    /// A READ finished.
    fn complete(
        self: &Arc<Self>,
        ticket: ReadTicket,
        res: Result<ReadReply<P::Attr>, P::Error>,
        rtt: Option<Duration>,
    ) {
        let reply = res.map(|ok| ReadData {
            data: ok.data,
            eof: ok.eof,
            version: ok.attr.as_ref().map(P::version),
        });
        {
            let mut st = self.lock();
            {
                let mut budget = self.client.files().budget.lock().expect("budget lock");
                st.core
                    .on_reply(Instant::now(), ticket, reply, rtt, &mut budget, |offset| {
                        P::Error::from(FileError(format!(
                            "server returned an empty READ at offset {offset} without EOF"
                        )))
                    });
            }
            self.report(&mut st);
        }
        self.arrived.notify_waiters();
        self.pump();
    }

    /// Adds the core's and the engine's new counts to the client's statistics and prints the
    /// engine's trace.
    fn report(&self, st: &mut State<P::Error>) {
        let e = st.core.readahead().stats().clone();
        let c = st.core.stats().clone();
        let window = st.core.readahead().window_bytes();
        {
            let mut r = self.client.files().reads.lock().expect("reads lock");
            add_counts(&mut r, &st.reported_engine, &e, &st.reported_core, &c);
            r.window_max_bytes = r.window_max_bytes.max(window);
        }
        st.reported_engine = e;
        st.reported_core = c;
        if self.client.files().options().trace_readahead {
            for ev in st.core.readahead_mut().take_trace() {
                eprintln!("{}", trace_line(self.client.files().started, self.id, &ev));
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<P::Error>> {
        self.state.lock().expect("file state lock")
    }
}

/// The counts gained since the last report (`e0`/`c0`: as reported then).
fn add_counts(
    r: &mut ReadStats,
    e0: &ReadaheadStats,
    e: &ReadaheadStats,
    c0: &ReadCoreStats,
    c: &ReadCoreStats,
) {
    r.demand_bytes += e.demand_bytes - e0.demand_bytes;
    r.readahead_bytes += e.readahead_bytes - e0.readahead_bytes;
    r.unused_bytes += e.unused_bytes - e0.unused_bytes;
    r.window_grows += e.window_grows - e0.window_grows;
    r.window_shrinks += e.window_shrinks - e0.window_shrinks;
    r.app_reads += c.app_reads - c0.app_reads;
    r.app_read_bytes += c.app_read_bytes - c0.app_read_bytes;
    r.reads += c.reads - c0.reads;
    r.read_bytes += c.read_bytes - c0.read_bytes;
    r.in_flight_sum += c.in_flight_sum - c0.in_flight_sum;
    r.in_flight_max = r.in_flight_max.max(c.in_flight_max);
    r.in_flight_bytes_max = r.in_flight_bytes_max.max(c.in_flight_bytes_max);
    r.read_bytes_received += c.read_bytes_received - c0.read_bytes_received;
    r.dropped_bytes += c.dropped_bytes - c0.dropped_bytes;
    r.invalidations += c.invalidations - c0.invalidations;
}

impl<P: FileProtocol> Drop for FileShared<P> {
    /// Closing: the streams' budget goes back, what was fetched ahead counts as unused.
    fn drop(&mut self) {
        let now = Instant::now();
        let st = self.state.get_mut().expect("file state lock");
        {
            let mut budget = self.client.files().budget.lock().expect("budget lock");
            st.core.readahead_mut().invalidate(now, &mut budget);
        }
        let unused = st.core.readahead().stats().unused_bytes - st.reported_engine.unused_bytes;
        self.client
            .files()
            .reads
            .lock()
            .expect("reads lock")
            .unused_bytes += unused;
    }
}

/// Removes a reader from the waiting list when its read ends (or its future is dropped).
struct WaitGuard<'a, P: FileProtocol> {
    shared: &'a FileShared<P>,
    waiter: u64,
}

impl<P: FileProtocol> Drop for WaitGuard<'_, P> {
    fn drop(&mut self) {
        self.shared.lock().core.end_read(self.waiter);
    }
}

/// One line per readahead decision, like the kernel's readahead debug prints.
fn trace_line(started: Instant, file: u64, ev: &TraceEvent) -> String {
    let t = ev.at.saturating_duration_since(started).as_secs_f64();
    let kib = |b: u64| b / 1024;
    let what = match &ev.kind {
        TraceKind::StreamStarted { offset } => format!("stream started at offset {offset}"),
        TraceKind::Sequential { window_bytes } => {
            format!("sequential, window {} KiB", kib(*window_bytes))
        }
        TraceKind::WindowGrew {
            from_bytes,
            to_bytes,
            need_bytes,
        } => format!(
            "window {} -> {} KiB (need {})",
            kib(*from_bytes),
            kib(*to_bytes),
            need_bytes.map_or("unknown".to_string(), |n| format!("{} KiB", kib(n)))
        ),
        TraceKind::WindowShrank {
            from_bytes,
            to_bytes,
            reason,
        } => format!(
            "window {} -> {} KiB ({reason:?})",
            kib(*from_bytes),
            kib(*to_bytes)
        ),
        TraceKind::StreamDropped { discarded_bytes } => {
            format!("stream dropped, {} KiB unused", kib(*discarded_bytes))
        }
        TraceKind::Invalidated => "invalidated (file changed or closed)".to_string(),
    };
    let stream = if ev.stream == u64::MAX {
        "*".to_string()
    } else {
        ev.stream.to_string()
    };
    format!("readahead: {t:10.6}s file {file} stream {stream}: {what}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readahead_modes_parse() {
        assert_eq!(parse_readahead("auto"), Ok(ReadaheadMode::Auto));
        assert_eq!(parse_readahead("off"), Ok(ReadaheadMode::Off));
        assert_eq!(
            parse_readahead("fixed:128k"),
            Ok(ReadaheadMode::Fixed(128 << 10))
        );
        assert_eq!(
            parse_readahead("fixed:15m"),
            Ok(ReadaheadMode::Fixed(15 << 20))
        );
        assert_eq!(
            parse_readahead("fixed:1MiB"),
            Ok(ReadaheadMode::Fixed(1 << 20))
        );
        assert_eq!(
            parse_readahead("fixed:4096"),
            Ok(ReadaheadMode::Fixed(4096))
        );
        assert!(parse_readahead("fixed:").is_err());
        assert!(parse_readahead("fixed:12q").is_err());
        assert!(parse_readahead("lots").is_err());
    }
}
