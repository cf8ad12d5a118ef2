//! The read path of a [`crate::File`]: a thin driver around the autotuned readahead of
//! [`sluice_engine::readahead`]. The engine decides what to fetch; this module owns the data
//! cache, the READs in flight, the clock and the locks.
//!
//! ```text
//!   read_at(off, len) ──on_read(now, off, len, size, budget)──► FileReadahead
//!        │                       ReadPlan { fetch, discard } ◄──┘
//!        │  discard: drop cached data, forget READs in flight for it (replies are dropped)
//!        │  fetch:   minus what is cached, in flight or queued ──► queue ──pump──► READ calls
//!        ▼                                                    (in-flight cap: Fixed(b) → b)
//!   wait until the cache covers [off, off+len) ◄── completion task: data into the cache,
//!        (anything missing and not requested           on_fetch_complete(rtt), post-op
//!         is fetched on demand: the safety net)         attributes checked, waiters woken
//! ```
//!
//! # One file, many readers
//! A `File` and its clones share one [`FileShared`]: one engine (which keeps a stream per
//! reader, so interleaved sequential readers each keep their own window), one cache and one
//! map of READs in flight, so two readers never fetch the same range twice at once. Data
//! leaves the cache when it is delivered, when the engine discards it, or when no stream
//! covers it any more; what a reader waits for is never evicted.
//!
//! # Change detection (close-to-open, then attributes)
//! The attributes seen at open, at [`crate::File::refresh`], on a GETATTR every
//! [`crate::ClientOptions::attr_timeout`] and in every READ reply's post-op attributes are
//! compared as a [`crate::proto::Version`] (size, mtime, change: NFSv3's ctime). A difference
//! whose change is not older than the one known (an older one is a reordered reply, not news)
//! invalidates: the engine's streams are
//! dropped (returning their budget), the cache and the map of READs in flight are emptied,
//! and a generation counter makes replies of READs issued before ignored. The reply that
//! revealed the change carries the new data and is kept.
//!
//! # Bounds
//! Data ahead of readers is charged to the client's global [`Budget`] by the engine; the
//! cache beyond that holds only what a reader waits for. Fixed-window modes also cap the bytes
//! in flight per file at the window, so `Fixed(128 KiB)` sends one 128 KiB READ at a time,
//! like Linux >= 5.4 with `read_ahead_kb=128`.

use crate::proto::{FileError, FileProtocol, ReadReply, Version};
use bytes::Bytes;
use sluice_engine::readahead::{
    ByteRange, FileReadahead, ReadaheadConfig, ReadaheadMode, ReadaheadStats, TraceEvent, TraceKind,
};
use std::collections::{BTreeMap, VecDeque};
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
    ra: FileReadahead,
    /// Fetched and not yet delivered: non-overlapping pieces by offset.
    cache: BTreeMap<u64, Bytes>,
    /// READs issued for the current generation and not answered: offset -> (len, id).
    in_flight: BTreeMap<u64, (u64, u64)>,
    /// Ranges to fetch, held back by the in-flight cap.
    queue: VecDeque<ByteRange>,
    /// READs on the wire whatever their generation (for the cap): count and bytes.
    wire_reads: u64,
    wire_bytes: u64,
    /// Bytes in flight allowed per file (u64::MAX: the engine's window and budget decide).
    wire_bytes_cap: u64,
    next_read_id: u64,
    generation: u64,
    /// The version of the data in the cache.
    change: Version,
    attrs_checked: Instant,
    /// READs that failed, for the reader that waits for them.
    failed: Vec<(ByteRange, E)>,
    /// Ranges readers are waiting for (never evicted), by waiter id.
    waiting: Vec<(u64, ByteRange)>,
    next_waiter: u64,
    /// Engine counters already added to the client's [`crate::ReadStats`].
    reported: ReadaheadStats,
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
            ra: FileReadahead::new(config),
            cache: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            queue: VecDeque::new(),
            wire_reads: 0,
            wire_bytes: 0,
            wire_bytes_cap,
            next_read_id: 0,
            generation: 0,
            change: P::version(attr),
            attrs_checked: Instant::now(),
            failed: Vec::new(),
            waiting: Vec::new(),
            next_waiter: 0,
            reported: ReadaheadStats::default(),
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
        self.lock().change.size
    }

    /// New attributes from outside the read path (GETATTR, refresh).
    pub(crate) fn observe_attrs(&self, a: &P::Attr) {
        let mut st = self.lock();
        self.apply_attrs(&mut st, a, Instant::now());
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
        let now = Instant::now();
        let (end, waiter) = {
            let mut st = self.lock();
            let size = st.change.size;
            self.client
                .files()
                .reads
                .lock()
                .expect("reads lock")
                .app_reads += 1;
            if len == 0 || offset >= size {
                return Ok(Vec::new());
            }
            let end = offset.saturating_add(len).min(size);
            self.client
                .files()
                .reads
                .lock()
                .expect("reads lock")
                .app_read_bytes += end - offset;
            let plan = {
                let mut budget = self.client.files().budget.lock().expect("budget lock");
                st.ra.on_read(now, offset, end - offset, size, &mut budget)
            };
            for d in &plan.discard {
                discard(&mut st, d.offset, d.end());
            }
            for f in &plan.fetch {
                request_missing(&mut st, f.offset, f.offset + f.len);
            }
            let waiter = st.next_waiter;
            st.next_waiter += 1;
            st.waiting.push((
                waiter,
                ByteRange {
                    offset,
                    len: end - offset,
                },
            ));
            self.report(&mut st);
            (end, waiter)
        };
        let _guard = WaitGuard {
            shared: self,
            waiter,
        };
        self.pump();
        let mut end = end;
        loop {
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            {
                let mut st = self.lock();
                // The file may have shrunk meanwhile.
                end = end.min(st.change.size.max(offset));
                if end <= offset {
                    return Ok(Vec::new());
                }
                if covers(&st.cache, offset, end) {
                    let data = take(&mut st.cache, offset, end);
                    evict(&mut st, waiter);
                    return Ok(data);
                }
                if let Some(i) = st
                    .failed
                    .iter()
                    .position(|(r, _)| r.offset < end && offset < r.end())
                {
                    return Err(st.failed.swap_remove(i).1);
                }
                // The safety net: whatever is neither cached nor requested (a short READ, a
                // discard, an invalidation) is fetched now.
                request_missing(&mut st, offset, end);
            }
            self.pump();
            arrived.await;
        }
    }

    /// GETATTR when the attributes are older than `attr_timeout`.
    async fn revalidate_if_old(&self) -> Result<(), P::Error> {
        let timeout = self.client.files().options().attr_timeout;
        let old = self.lock().attrs_checked.elapsed() > timeout;
        if old {
            let a = self.client.getattr(&self.fh).await?;
            self.observe_attrs(&a);
        }
        Ok(())
    }

    /// Issues queued READs while the in-flight cap allows, in offset order, from a task of
    /// their own (so that a caller dropping its future never strands a READ marked in flight).
    fn pump(self: &Arc<Self>) {
        let batch = {
            let mut st = self.lock();
            let mut batch = Vec::new();
            while let Some(r) = st.queue.front().copied() {
                if st.wire_reads > 0 && st.wire_bytes.saturating_add(r.len) > st.wire_bytes_cap {
                    break;
                }
                st.queue.pop_front();
                let id = st.next_read_id;
                st.next_read_id += 1;
                st.in_flight.insert(r.offset, (r.len, id));
                st.wire_reads += 1;
                st.wire_bytes += r.len;
                let mut reads = self.client.files().reads.lock().expect("reads lock");
                reads.reads += 1;
                reads.read_bytes += r.len;
                reads.in_flight_sum += st.wire_reads;
                reads.in_flight_max = reads.in_flight_max.max(st.wire_reads);
                reads.in_flight_bytes_max = reads.in_flight_bytes_max.max(st.wire_bytes);
                batch.push((r, id, st.generation));
            }
            batch
        };
        if batch.is_empty() {
            return;
        }
        let shared = self.clone();
        tokio::spawn(async move {
            for (r, id, generation) in batch {
                let count = u32::try_from(r.len).expect("READs are at most rsize");
                let call = shared.client.start_read(&shared.fh, r.offset, count).await;
                let s = shared.clone();
                tokio::spawn(async move {
                    let (res, rtt) = call.await;
                    s.complete(r, id, generation, res, rtt);
                });
            }
        });
    }

    /// A READ finished.
    fn complete(
        self: &Arc<Self>,
        r: ByteRange,
        id: u64,
        generation: u64,
        res: Result<ReadReply<P::Attr>, P::Error>,
        rtt: Option<Duration>,
    ) {
        let now = Instant::now();
        {
            let mut st = self.lock();
            st.wire_reads -= 1;
            st.wire_bytes -= r.len;
            let tracked = generation == st.generation
                && st.in_flight.get(&r.offset).is_some_and(|&(_, i)| i == id);
            if tracked {
                st.in_flight.remove(&r.offset);
            }
            match res {
                Ok(ok) => {
                    if let Some(a) = &ok.attr {
                        self.apply_attrs(&mut st, a, now);
                    }
                    let got: u64 = ok.data.iter().map(|c| c.len() as u64).sum();
                    let mut reads = self.client.files().reads.lock().expect("reads lock");
                    reads.read_bytes_received += got;
                    if !tracked {
                        reads.dropped_bytes += got;
                    }
                    drop(reads);
                    if tracked {
                        if let Some(rtt) = rtt {
                            st.ra.on_fetch_complete(now, r.offset, got, rtt);
                        }
                        insert(&mut st.cache, r.offset, ok.data, got);
                        if ok.eof && ok.attr.is_none() {
                            let size = r.offset + got;
                            st.change.size = st.change.size.min(size);
                        }
                        if got == 0 && !ok.eof && r.offset < st.change.size {
                            let e = P::Error::from(FileError(format!(
                                "server returned an empty READ at offset {} without EOF",
                                r.offset
                            )));
                            st.failed.push((r, e));
                        }
                    }
                }
                Err(e) => {
                    if tracked {
                        st.failed.push((r, e));
                    }
                }
            }
            self.report(&mut st);
        }
        self.arrived.notify_waiters();
        self.pump();
    }

    /// Compares attributes with the known version; invalidates on a change.
    fn apply_attrs(&self, st: &mut State<P::Error>, a: &P::Attr, now: Instant) {
        let c = P::version(a);
        if c == st.change {
            st.attrs_checked = now;
            return;
        }
        if c.change < st.change.change {
            return; // a reply overtaken by a newer one
        }
        st.change = c;
        st.attrs_checked = now;
        self.drop_cached(st, now);
    }

    /// Forgets all data read so far and every READ in flight (the caller wrote to the file
    /// itself, which need not change what the attributes show within their time granularity).
    pub(crate) fn invalidate(&self) {
        let mut st = self.lock();
        self.drop_cached(&mut st, Instant::now());
        drop(st);
        self.arrived.notify_waiters();
    }

    /// The invalidation itself: streams, cache, READs in flight, a new generation.
    fn drop_cached(&self, st: &mut State<P::Error>, now: Instant) {
        {
            let mut budget = self.client.files().budget.lock().expect("budget lock");
            st.ra.invalidate(now, &mut budget);
        }
        st.cache.clear();
        st.in_flight.clear();
        st.queue.clear();
        st.failed.clear();
        st.generation += 1;
        self.client
            .files()
            .reads
            .lock()
            .expect("reads lock")
            .invalidations += 1;
        self.report(st);
    }

    /// Adds the engine's new counts to the client's statistics and prints its trace.
    fn report(&self, st: &mut State<P::Error>) {
        let s = st.ra.stats().clone();
        let window = st.ra.window_bytes();
        {
            let mut r = self.client.files().reads.lock().expect("reads lock");
            r.demand_bytes += s.demand_bytes - st.reported.demand_bytes;
            r.readahead_bytes += s.readahead_bytes - st.reported.readahead_bytes;
            r.unused_bytes += s.unused_bytes - st.reported.unused_bytes;
            r.window_grows += s.window_grows - st.reported.window_grows;
            r.window_shrinks += s.window_shrinks - st.reported.window_shrinks;
            r.window_max_bytes = r.window_max_bytes.max(window);
        }
        st.reported = s;
        if self.client.files().options().trace_readahead {
            for ev in st.ra.take_trace() {
                eprintln!("{}", trace_line(self.client.files().started, self.id, &ev));
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<P::Error>> {
        self.state.lock().expect("file state lock")
    }
}

impl<P: FileProtocol> Drop for FileShared<P> {
    /// Closing: the streams' budget goes back, what was fetched ahead counts as unused.
    fn drop(&mut self) {
        let now = Instant::now();
        let st = self.state.get_mut().expect("file state lock");
        {
            let mut budget = self.client.files().budget.lock().expect("budget lock");
            st.ra.invalidate(now, &mut budget);
        }
        let unused = st.ra.stats().unused_bytes - st.reported.unused_bytes;
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
        let mut st = self.shared.lock();
        st.waiting.retain(|(w, _)| *w != self.waiter);
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

// --- range bookkeeping (pure helpers over the state) -----------------------------------------

/// Queues READs for the parts of `[lo, hi)` that are neither cached, in flight nor queued, in
/// pieces of at most the engine's rsize.
fn request_missing<E>(st: &mut State<E>, lo: u64, hi: u64) {
    let rsize = st.ra.config().rsize_bytes;
    let mut gaps = vec![(lo, hi)];
    let cached = st.cache.iter().map(|(&o, b)| (o, o + b.len() as u64));
    let flying = st.in_flight.iter().map(|(&o, &(l, _))| (o, o + l));
    let queued = st.queue.iter().map(|r| (r.offset, r.end()));
    for (a, b) in cached.chain(flying).chain(queued) {
        if b <= lo || a >= hi {
            continue;
        }
        gaps = subtract(gaps, a, b);
    }
    for (mut a, b) in gaps {
        while a < b {
            let n = (b - a).min(rsize);
            st.queue.push_back(ByteRange { offset: a, len: n });
            a += n;
        }
    }
}

/// `ranges` minus `[a, b)`.
fn subtract(ranges: Vec<(u64, u64)>, a: u64, b: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for (lo, hi) in ranges {
        if b <= lo || a >= hi {
            out.push((lo, hi));
            continue;
        }
        if lo < a {
            out.push((lo, a));
        }
        if b < hi {
            out.push((b, hi));
        }
    }
    out
}

/// Drops `[lo, hi)` from the cache and forgets READs in flight or queued inside it.
fn discard<E>(st: &mut State<E>, lo: u64, hi: u64) {
    let taken = take_partial(&mut st.cache, lo, hi);
    drop(taken);
    let doomed: Vec<u64> = st
        .in_flight
        .range(lo..hi)
        .filter(|(&o, &(l, _))| o + l <= hi)
        .map(|(&o, _)| o)
        .collect();
    for o in doomed {
        st.in_flight.remove(&o);
    }
    st.queue.retain(|r| !(r.offset >= lo && r.end() <= hi));
}

/// Drops cached pieces no stream and no waiting reader covers (data skipped over or left
/// behind by a reader that moved on).
fn evict<E>(st: &mut State<E>, done_waiter: u64) {
    if st.cache.is_empty() {
        return;
    }
    let mut keep: Vec<(u64, u64)> = st
        .ra
        .streams()
        .iter()
        .map(|s| (s.position, s.fetched_end))
        .collect();
    keep.extend(
        st.waiting
            .iter()
            .filter(|(w, _)| *w != done_waiter)
            .map(|(_, r)| (r.offset, r.end())),
    );
    let doomed: Vec<u64> = st
        .cache
        .iter()
        .filter(|(&o, b)| {
            let e = o + b.len() as u64;
            !keep.iter().any(|&(lo, hi)| o < hi && lo < e)
        })
        .map(|(&o, _)| o)
        .collect();
    for o in doomed {
        st.cache.remove(&o);
    }
}

/// True if the cache holds every byte of `[lo, hi)`.
fn covers(cache: &BTreeMap<u64, Bytes>, lo: u64, hi: u64) -> bool {
    let mut at = lo;
    // The piece starting at or before `lo`, then those after it in order.
    let start = cache.range(..=lo).next_back().map_or(lo, |(&o, _)| o);
    for (&o, b) in cache.range(start..hi) {
        if o > at {
            return false;
        }
        at = at.max(o + b.len() as u64);
        if at >= hi {
            return true;
        }
    }
    at >= hi
}

/// Removes `[lo, hi)` (which the cache covers) and returns it in order; the parts of pieces
/// outside the range stay.
fn take(cache: &mut BTreeMap<u64, Bytes>, lo: u64, hi: u64) -> Vec<Bytes> {
    take_partial(cache, lo, hi)
}

/// Removes whatever of `[lo, hi)` the cache holds and returns it in order.
fn take_partial(cache: &mut BTreeMap<u64, Bytes>, lo: u64, hi: u64) -> Vec<Bytes> {
    let start = cache.range(..=lo).next_back().map_or(lo, |(&o, _)| o);
    let keys: Vec<u64> = cache.range(start..hi).map(|(&o, _)| o).collect();
    let mut out = Vec::new();
    for o in keys {
        let b = cache.remove(&o).expect("key just listed");
        let e = o + b.len() as u64;
        if e <= lo {
            cache.insert(o, b);
            continue;
        }
        let a = lo.max(o);
        let z = hi.min(e);
        if o < a {
            cache.insert(o, b.slice(..(a - o) as usize));
        }
        if z < e {
            cache.insert(z, b.slice((z - o) as usize..));
        }
        out.push(b.slice((a - o) as usize..(z - o) as usize));
    }
    out
}

/// Adds the first `len` bytes of `chunks` at `offset`, skipping what is already cached.
fn insert(cache: &mut BTreeMap<u64, Bytes>, offset: u64, chunks: Vec<Bytes>, len: u64) {
    let mut at = offset;
    let end = offset + len;
    for c in chunks {
        if at >= end {
            break;
        }
        let n = (c.len() as u64).min(end - at);
        let c = c.slice(..n as usize);
        let mut gaps = vec![(at, at + n)];
        let start = cache.range(..=at).next_back().map_or(at, |(&o, _)| o);
        for (&o, b) in cache.range(start..at + n) {
            gaps = subtract(gaps, o, o + b.len() as u64);
        }
        for (a, z) in gaps {
            cache.insert(a, c.slice((a - at) as usize..(z - at) as usize));
        }
        at += n;
    }
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

    fn cache_of(pieces: &[(u64, &'static [u8])]) -> BTreeMap<u64, Bytes> {
        pieces
            .iter()
            .map(|&(o, b)| (o, Bytes::from_static(b)))
            .collect()
    }

    #[test]
    fn the_cache_serves_ranges_across_pieces_and_keeps_the_rest() {
        let mut c = cache_of(&[(0, b"abcd"), (4, b"efgh"), (10, b"kl")]);
        assert!(covers(&c, 1, 7));
        assert!(covers(&c, 0, 8));
        assert!(!covers(&c, 6, 11), "hole at 8..10");
        assert!(covers(&c, 10, 12));
        let got: Vec<u8> = take(&mut c, 2, 6).concat();
        assert_eq!(got, b"cdef");
        assert_eq!(c.get(&0).map(|b| &b[..]), Some(&b"ab"[..]));
        assert_eq!(c.get(&6).map(|b| &b[..]), Some(&b"gh"[..]));
        insert(&mut c, 0, vec![Bytes::from_static(b"XXXXXXXXXXXX")], 12);
        let all: Vec<u8> = take(&mut c, 0, 12).concat();
        assert_eq!(all, b"abXXXXghXXkl", "existing pieces win; gaps filled");
        assert!(c.is_empty());
    }

    #[test]
    fn subtracting_ranges_splits_and_trims() {
        assert_eq!(subtract(vec![(0, 10)], 3, 5), vec![(0, 3), (5, 10)]);
        assert_eq!(subtract(vec![(0, 10)], 0, 10), vec![]);
        assert_eq!(subtract(vec![(0, 10)], 8, 20), vec![(0, 8)]);
        assert_eq!(subtract(vec![(0, 4), (6, 9)], 3, 7), vec![(0, 3), (7, 9)]);
    }
}
