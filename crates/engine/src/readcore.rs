//! The state of one open file's read path, pure: the data cache, the READs in flight, the
//! readers waiting, generations and change detection, around a [`FileReadahead`].
//!
//! [`crate::readahead`] decides *what* to fetch; this module remembers what has been fetched,
//! what is on the wire and who waits for what, so that a driver only moves bytes: the client's
//! tokio driver (sluice-client's `read.rs`) and a simulator run the same code.
//!
//! ```text
//!   begin_read(now, off, len) ──on_read──► FileReadahead ──► ReadPlan { fetch, discard }
//!        │  discard: drop cached data, forget READs in flight for it (their replies are dropped)
//!        │  fetch:   minus what is cached, in flight or queued ──► queue
//!   next_reads() ◄── queue, within the in-flight cap ──► READ tickets for the driver to send
//!   on_reply(ticket, reply) ──► data into the cache, on_fetch_complete(rtt), attributes checked
//!   poll_read(waiter) ──► Ready(data) | Failed(e) | Wait (anything missing and not requested
//!                          is queued again: the safety net)
//! ```
//!
//! # One file, many readers
//! Readers share one core: one engine (a stream per reader, so interleaved sequential readers
//! each keep their window), one cache and one map of READs in flight, so no range is fetched
//! twice at once. Data leaves the cache when it is delivered, when the engine discards it, or
//! when no stream covers it any more; what a reader waits for is never evicted. A stream
//! covers a little behind its reader's frontier too (`StreamInfo::keep_from`): a reader whose
//! reads run concurrently (the FUSE mount's, several kernel readahead requests at once) asks for
//! them out of order, and what a late read wants must still be there when it comes, or it
//! would be fetched again a whole round trip later.
//!
//! # Change detection
//! Attributes seen at open, on revalidation and in READ replies are compared as a
//! [`DataVersion`]. A difference whose `change` is not older than the one known (an older one
//! is a reordered reply, not news) invalidates: the engine's streams are dropped (returning
//! their budget), the cache and the map of READs in flight are emptied, and the generation
//! grows so that replies to READs issued before are ignored. The reply that revealed the
//! change carries the new data and is kept.
//!
//! # Bounds
//! Data ahead of readers is charged to the shared [`Budget`] by the engine; the cache beyond
//! that holds only what a reader waits for. `wire_bytes_cap` bounds the bytes in flight (a
//! fixed window's size, so `Fixed(128 KiB)` sends one 128 KiB READ at a time, like Linux >=
//! 5.4 with `read_ahead_kb=128`).

use crate::readahead::{Budget, ByteRange, FileReadahead, ReadaheadConfig};
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// What identifies a version of a file's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataVersion {
    pub size: u64,
    /// Modification time in nanoseconds since the epoch (0 if the protocol has none).
    pub mtime_ns: u64,
    /// Grows with every change of data or attributes (NFSv3: ctime in nanoseconds; NFSv4: the
    /// change attribute).
    pub change: u64,
}

/// A READ for the driver to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadTicket {
    pub range: ByteRange,
    id: u64,
    generation: u64,
}

/// A READ's answer, as the core needs it.
#[derive(Debug, Clone)]
pub struct ReadData {
    /// The data (at most what was asked for is kept).
    pub data: Vec<Bytes>,
    pub eof: bool,
    /// The file's version after the READ, when the reply carried attributes.
    pub version: Option<DataVersion>,
}

/// What a waiting reader gets.
#[derive(Debug)]
pub enum ReadPoll<E> {
    /// The bytes asked for (fewer only at end of file, none past it).
    Ready(Vec<Bytes>),
    Failed(E),
    /// Not yet: wait for a reply (after sending [`ReadCore::next_reads`]).
    Wait,
}

/// Counters of the read path since creation (the engine's own are in
/// [`FileReadahead::stats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadCoreStats {
    /// Application reads and the bytes they asked for.
    pub app_reads: u64,
    pub app_read_bytes: u64,
    /// READs sent and the bytes they asked for.
    pub reads: u64,
    pub read_bytes: u64,
    /// Sum over READs sent of the READs on the wire including it (average depth = sum/reads),
    /// and the maxima.
    pub in_flight_sum: u64,
    pub in_flight_max: u64,
    pub in_flight_bytes_max: u64,
    /// Bytes received, and those thrown away (their READ was discarded or invalidated).
    pub read_bytes_received: u64,
    pub dropped_bytes: u64,
    pub invalidations: u64,
    /// Bytes queued by [`ReadCore::poll_read`] because a waiting reader needed them and they
    /// were neither cached, in flight nor queued: the safety net. The engine's contract says
    /// a plan covers every read, so outside an invalidation or a failed READ this stays 0; the
    /// simulator asserts it, so an engine bug shows up as a number rather than a hang.
    pub safety_net_bytes: u64,
}

/// A file's read state. `E` is the driver's error type. See the module docs.
#[derive(Debug)]
pub struct ReadCore<E> {
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
    /// Bytes in flight allowed (u64::MAX: the engine's window and budget decide).
    wire_bytes_cap: u64,
    next_read_id: u64,
    generation: u64,
    version: DataVersion,
    /// When the version was last confirmed.
    checked_at: Instant,
    /// READs that failed, for the reader that waits for them.
    failed: Vec<(ByteRange, E)>,
    /// Ranges readers are waiting for (never evicted), by waiter id.
    waiting: Vec<(u64, ByteRange)>,
    next_waiter: u64,
    stats: ReadCoreStats,
}

impl<E> ReadCore<E> {
    /// A file whose data is at `version` as of `now`; at most `wire_bytes_cap` bytes of READs
    /// in flight (at least one READ is always allowed).
    pub fn new(
        config: ReadaheadConfig,
        wire_bytes_cap: u64,
        version: DataVersion,
        now: Instant,
    ) -> ReadCore<E> {
        ReadCore {
            ra: FileReadahead::new(config),
            cache: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            queue: VecDeque::new(),
            wire_reads: 0,
            wire_bytes: 0,
            wire_bytes_cap,
            next_read_id: 0,
            generation: 0,
            version,
            checked_at: now,
            failed: Vec::new(),
            waiting: Vec::new(),
            next_waiter: 0,
            stats: ReadCoreStats::default(),
        }
    }

    /// The file size as last seen.
    pub fn size(&self) -> u64 {
        self.version.size
    }

    /// How long ago the version was last confirmed (by attributes or a reply).
    pub fn version_age(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.checked_at)
    }

    pub fn readahead(&self) -> &FileReadahead {
        &self.ra
    }

    pub fn readahead_mut(&mut self) -> &mut FileReadahead {
        &mut self.ra
    }

    pub fn stats(&self) -> &ReadCoreStats {
        &self.stats
    }

    /// Bytes of `[lo, hi)` fetched and not yet delivered.
    pub fn cached_bytes_in(&self, lo: u64, hi: u64) -> u64 {
        let start = self.cache.range(..=lo).next_back().map_or(lo, |(&o, _)| o);
        self.cache
            .range(start..hi)
            .map(|(&o, b)| {
                let e = o + b.len() as u64;
                e.min(hi).saturating_sub(o.max(lo))
            })
            .sum()
    }

    /// An application read of `len` bytes at `offset`: asks the engine, queues what it wants
    /// fetched, and registers a waiter. `None` when there is nothing to read (`len` 0, or at
    /// or past the end of the file). Then: [`ReadCore::next_reads`], and
    /// [`ReadCore::poll_read`] until it is not `Wait`, and [`ReadCore::end_read`] in any case.
    pub fn begin_read(
        &mut self,
        now: Instant,
        offset: u64,
        len: u64,
        budget: &mut Budget,
    ) -> Option<(u64, ByteRange)> {
        let size = self.version.size;
        self.stats.app_reads += 1;
        if len == 0 || offset >= size {
            return None;
        }
        let end = offset.saturating_add(len).min(size);
        self.stats.app_read_bytes += end - offset;
        let plan = self.ra.on_read(now, offset, end - offset, size, budget);
        for d in &plan.discard {
            self.discard(d.offset, d.end());
        }
        for f in &plan.fetch {
            self.request_missing(f.offset, f.offset + f.len);
        }
        let waiter = self.next_waiter;
        self.next_waiter += 1;
        let range = ByteRange {
            offset,
            len: end - offset,
        };
        self.waiting.push((waiter, range));
        Some((waiter, range))
    }

    /// Whether `waiter`'s range (as returned by [`ReadCore::begin_read`]) can be served. The
    /// range shrinks if the file did; whatever is neither cached nor requested is queued again.
    pub fn poll_read(&mut self, waiter: u64) -> ReadPoll<E> {
        let Some(i) = self.waiting.iter().position(|(w, _)| *w == waiter) else {
            return ReadPoll::Ready(Vec::new());
        };
        let r = self.waiting[i].1;
        let offset = r.offset;
        let end = r.end().min(self.version.size.max(offset));
        if end <= offset {
            return ReadPoll::Ready(Vec::new());
        }
        if covers(&self.cache, offset, end) {
            let data = take_partial(&mut self.cache, offset, end);
            self.evict(waiter);
            return ReadPoll::Ready(data);
        }
        if let Some(i) = self
            .failed
            .iter()
            .position(|(r, _)| r.offset < end && offset < r.end())
        {
            return ReadPoll::Failed(self.failed.swap_remove(i).1);
        }
        self.stats.safety_net_bytes += self.request_missing(offset, end);
        ReadPoll::Wait
    }

    /// A reader is done (served, failed or gone).
    pub fn end_read(&mut self, waiter: u64) {
        self.waiting.retain(|(w, _)| *w != waiter);
    }

    /// READs to send now, in offset order, within the in-flight cap. Each must be answered
    /// with [`ReadCore::on_reply`] (or it stays counted against the cap).
    pub fn next_reads(&mut self) -> Vec<ReadTicket> {
        let mut out = Vec::new();
        while let Some(r) = self.queue.front().copied() {
            if self.wire_reads > 0 && self.wire_bytes.saturating_add(r.len) > self.wire_bytes_cap {
                break;
            }
            self.queue.pop_front();
            let id = self.next_read_id;
            self.next_read_id += 1;
            self.in_flight.insert(r.offset, (r.len, id));
            self.wire_reads += 1;
            self.wire_bytes += r.len;
            let s = &mut self.stats;
            s.reads += 1;
            s.read_bytes += r.len;
            s.in_flight_sum += self.wire_reads;
            s.in_flight_max = s.in_flight_max.max(self.wire_reads);
            s.in_flight_bytes_max = s.in_flight_bytes_max.max(self.wire_bytes);
            out.push(ReadTicket {
                range: r,
                id,
                generation: self.generation,
            });
        }
        out
    }

    /// The answer to a READ sent for `ticket`: its data or the error, and its RTT sample (None
    /// if it was transmitted more than once). `empty_read` makes the error for a READ that
    /// returned nothing before the end of the file.
    pub fn on_reply(
        &mut self,
        now: Instant,
        ticket: ReadTicket,
        reply: Result<ReadData, E>,
        rtt: Option<Duration>,
        budget: &mut Budget,
        empty_read: impl FnOnce(u64) -> E,
    ) {
        let r = ticket.range;
        self.wire_reads -= 1;
        self.wire_bytes -= r.len;
        let tracked = ticket.generation == self.generation
            && self
                .in_flight
                .get(&r.offset)
                .is_some_and(|&(_, i)| i == ticket.id);
        if tracked {
            self.in_flight.remove(&r.offset);
        }
        match reply {
            Ok(ok) => {
                if let Some(v) = ok.version {
                    self.observe(now, v, budget);
                }
                let got = ok
                    .data
                    .iter()
                    .map(|c| c.len() as u64)
                    .sum::<u64>()
                    .min(r.len);
                self.stats.read_bytes_received += got;
                if !tracked {
                    self.stats.dropped_bytes += got;
                    return;
                }
                if let Some(rtt) = rtt {
                    self.ra.on_fetch_complete(now, r.offset, got, rtt);
                }
                insert(&mut self.cache, r.offset, ok.data, got);
                if ok.eof && ok.version.is_none() {
                    self.version.size = self.version.size.min(r.offset + got);
                }
                if got == 0 && !ok.eof && r.offset < self.version.size {
                    self.failed.push((r, empty_read(r.offset)));
                }
            }
            Err(e) => {
                if tracked {
                    self.failed.push((r, e));
                }
            }
        }
    }

    /// Attributes seen (open, revalidation, a reply): invalidates on a change. True if it did.
    pub fn observe(&mut self, now: Instant, v: DataVersion, budget: &mut Budget) -> bool {
        if v == self.version {
            self.checked_at = now;
            return false;
        }
        if v.change < self.version.change {
            return false; // a reply overtaken by a newer one
        }
        self.version = v;
        self.checked_at = now;
        self.invalidate(now, budget);
        true
    }

    /// Forgets everything read and in flight: streams (their budget returns), cache, queue,
    /// failures; replies to READs already sent will be ignored.
    pub fn invalidate(&mut self, now: Instant, budget: &mut Budget) {
        self.ra.invalidate(now, budget);
        self.cache.clear();
        self.in_flight.clear();
        self.queue.clear();
        self.failed.clear();
        self.generation += 1;
        self.stats.invalidations += 1;
    }

    /// Queues READs for the parts of `[lo, hi)` that are neither cached, in flight nor queued,
    /// in pieces of at most the engine's rsize; returns the bytes queued.
    fn request_missing(&mut self, lo: u64, hi: u64) -> u64 {
        let rsize = self.ra.config().rsize_bytes;
        let mut gaps = vec![(lo, hi)];
        let cached = self.cache.iter().map(|(&o, b)| (o, o + b.len() as u64));
        let flying = self.in_flight.iter().map(|(&o, &(l, _))| (o, o + l));
        let queued = self.queue.iter().map(|r| (r.offset, r.end()));
        for (a, b) in cached.chain(flying).chain(queued) {
            if b <= lo || a >= hi {
                continue;
            }
            gaps = subtract(gaps, a, b);
        }
        let mut queued = 0;
        for (mut a, b) in gaps {
            queued += b - a;
            while a < b {
                let n = (b - a).min(rsize);
                self.queue.push_back(ByteRange { offset: a, len: n });
                a += n;
            }
        }
        queued
    }

    /// Drops `[lo, hi)` from the cache and forgets READs in flight or queued inside it.
    fn discard(&mut self, lo: u64, hi: u64) {
        drop(take_partial(&mut self.cache, lo, hi));
        let doomed: Vec<u64> = self
            .in_flight
            .range(lo..hi)
            .filter(|(&o, &(l, _))| o + l <= hi)
            .map(|(&o, _)| o)
            .collect();
        for o in doomed {
            self.in_flight.remove(&o);
        }
        self.queue.retain(|r| !(r.offset >= lo && r.end() <= hi));
    }

    /// Drops cached pieces no stream (from its `keep_from`) and no other waiting reader covers
    /// (data skipped over or left behind by a reader that moved on).
    fn evict(&mut self, done_waiter: u64) {
        if self.cache.is_empty() {
            return;
        }
        let mut keep: Vec<(u64, u64)> = self
            .ra
            .streams()
            .iter()
            .map(|s| (s.keep_from, s.fetched_end))
            .collect();
        keep.extend(
            self.waiting
                .iter()
                .filter(|(w, _)| *w != done_waiter)
                .map(|(_, r)| (r.offset, r.end())),
        );
        let doomed: Vec<u64> = self
            .cache
            .iter()
            .filter(|(&o, b)| {
                let e = o + b.len() as u64;
                !keep.iter().any(|&(lo, hi)| o < hi && lo < e)
            })
            .map(|(&o, _)| o)
            .collect();
        for o in doomed {
            self.cache.remove(&o);
        }
    }
}

// --- range bookkeeping (pure helpers) ----------------------------------------------------------

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

/// Removes whatever of `[lo, hi)` the cache holds and returns it in order; the parts of pieces
/// outside the range stay.
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
    use crate::readahead::ReadaheadMode;

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
        let got: Vec<u8> = take_partial(&mut c, 2, 6).concat();
        assert_eq!(got, b"cdef");
        assert_eq!(c.get(&0).map(|b| &b[..]), Some(&b"ab"[..]));
        assert_eq!(c.get(&6).map(|b| &b[..]), Some(&b"gh"[..]));
        insert(&mut c, 0, vec![Bytes::from_static(b"XXXXXXXXXXXX")], 12);
        let all: Vec<u8> = take_partial(&mut c, 0, 12).concat();
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

    fn version(size: u64, change: u64) -> DataVersion {
        DataVersion {
            size,
            mtime_ns: 0,
            change,
        }
    }

    fn reply(data: &[u8], v: Option<DataVersion>) -> ReadData {
        ReadData {
            data: vec![Bytes::copy_from_slice(data)],
            eof: false,
            version: v,
        }
    }

    /// Driven by hand, the way a driver would, in virtual time.
    #[test]
    fn a_change_seen_in_a_reply_drops_older_replies_and_keeps_its_own() {
        let t0 = Instant::now();
        let config = ReadaheadConfig {
            mode: ReadaheadMode::Off,
            rsize_bytes: 4096,
            ..ReadaheadConfig::default()
        };
        let mut budget = Budget::new(1 << 20);
        let mut core: ReadCore<String> = ReadCore::new(config, u64::MAX, version(16384, 1), t0);
        let (w1, _) = core.begin_read(t0, 0, 4096, &mut budget).unwrap();
        let (w2, _) = core.begin_read(t0, 8192, 4096, &mut budget).unwrap();
        let sent = core.next_reads();
        assert_eq!(
            sent.len(),
            2,
            "one READ per reader, nothing ahead with readahead off"
        );
        assert!(matches!(core.poll_read(w1), ReadPoll::Wait));
        let rtt = Some(Duration::from_millis(1));
        let never = |o| format!("empty at {o}");
        // The second reply arrives first and shows a newer version: it is kept...
        core.on_reply(
            t0,
            sent[1],
            Ok(reply(&[2; 4096], Some(version(16384, 2)))),
            rtt,
            &mut budget,
            never,
        );
        // ...and the first, issued before the change, is dropped.
        core.on_reply(
            t0,
            sent[0],
            Ok(reply(&[1; 4096], Some(version(16384, 1)))),
            rtt,
            &mut budget,
            never,
        );
        assert_eq!(core.stats().invalidations, 1);
        assert_eq!(core.stats().dropped_bytes, 4096);
        match core.poll_read(w2) {
            ReadPoll::Ready(d) => assert_eq!(d.concat(), vec![2u8; 4096]),
            other => panic!("the reply that showed the change must serve: {other:?}"),
        }
        core.end_read(w2);
        assert!(matches!(core.poll_read(w1), ReadPoll::Wait), "refetched");
        let again = core.next_reads();
        assert_eq!(again.len(), 1);
        assert_eq!(
            again[0].range,
            ByteRange {
                offset: 0,
                len: 4096
            }
        );
        core.on_reply(
            t0,
            again[0],
            Ok(reply(&[3; 4096], None)),
            rtt,
            &mut budget,
            never,
        );
        match core.poll_read(w1) {
            ReadPoll::Ready(d) => assert_eq!(d.concat(), vec![3u8; 4096]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn cached_bytes_count_only_the_range_asked_about() {
        let t0 = Instant::now();
        let config = ReadaheadConfig {
            mode: ReadaheadMode::Off,
            rsize_bytes: 4096,
            ..ReadaheadConfig::default()
        };
        let mut budget = Budget::new(1 << 20);
        let mut core: ReadCore<String> = ReadCore::new(config, u64::MAX, version(16384, 1), t0);
        let (w, _) = core.begin_read(t0, 4096, 8192, &mut budget).unwrap();
        let sent = core.next_reads();
        for t in sent {
            let r = reply(&vec![7; t.range.len as usize], None);
            core.on_reply(t0, t, Ok(r), None, &mut budget, |o| format!("{o}"));
        }
        assert_eq!(core.cached_bytes_in(0, u64::MAX), 8192);
        assert_eq!(core.cached_bytes_in(6000, 9000), 3000);
        assert_eq!(core.cached_bytes_in(0, 4096), 0);
        assert_eq!(
            core.stats().safety_net_bytes,
            0,
            "the plan covered the read"
        );
        assert!(matches!(core.poll_read(w), ReadPoll::Ready(_)));
        assert_eq!(core.cached_bytes_in(0, u64::MAX), 0);
    }

    #[test]
    fn a_read_the_plan_left_out_is_fetched_by_the_safety_net_and_counted() {
        let t0 = Instant::now();
        let config = ReadaheadConfig {
            mode: ReadaheadMode::Off,
            rsize_bytes: 4096,
            ..ReadaheadConfig::default()
        };
        let mut budget = Budget::new(1 << 20);
        let mut core: ReadCore<String> = ReadCore::new(config, u64::MAX, version(16384, 1), t0);
        let (w, _) = core.begin_read(t0, 0, 4096, &mut budget).unwrap();
        let sent = core.next_reads();
        // The file changes under the reader: its READ in flight is forgotten, so polling
        // must fetch the range again.
        core.observe(t0, version(16384, 2), &mut budget);
        assert!(matches!(core.poll_read(w), ReadPoll::Wait));
        assert_eq!(core.stats().safety_net_bytes, 4096);
        assert_eq!(core.next_reads().len(), 1);
        drop(sent);
    }

    #[test]
    fn a_fixed_window_caps_the_bytes_in_flight() {
        let t0 = Instant::now();
        let config = ReadaheadConfig {
            mode: ReadaheadMode::Off,
            rsize_bytes: 4096,
            ..ReadaheadConfig::default()
        };
        let mut budget = Budget::new(1 << 20);
        let mut core: ReadCore<String> = ReadCore::new(config, 8192, version(1 << 20, 1), t0);
        let (w, _) = core.begin_read(t0, 0, 32768, &mut budget).unwrap();
        assert_eq!(
            core.next_reads().len(),
            2,
            "two 4 KiB READs fill an 8 KiB cap"
        );
        assert!(core.next_reads().is_empty());
        core.end_read(w);
    }

    /// A reader like the FUSE mount's: the kernel keeps up to 8 reads of 1 MiB outstanding,
    /// the daemon begins and finishes them in any order, and replies come back in any order.
    /// Returns the READs sent twice and the reads the engine took for random access.
    fn reordered_reader(seed: u64, reorder_reads: u64) -> (u64, u64) {
        use rand::seq::SliceRandom;
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mib = 1u64 << 20;
        let size = 32 * mib;
        let config = ReadaheadConfig {
            reorder_reads,
            ..ReadaheadConfig::default()
        };
        let mut budget = Budget::new(256 * mib);
        let mut core: ReadCore<String> = ReadCore::new(config, u64::MAX, version(size, 1), t0());
        let data = file_data(size);
        let mut now = t0();
        let mut next = 0u64;
        // Reads handed to the daemon: not yet begun (None) or begun (waiter).
        let mut app: Vec<(u64, Option<u64>)> = Vec::new();
        let mut wire: Vec<ReadTicket> = Vec::new();
        let mut sent = std::collections::HashMap::<u64, u64>::new();
        let mut delivered = 0u64;
        while delivered < size {
            // The first read comes alone (the application's own); then the kernel's readahead
            // keeps the 8 MiB after the oldest unfinished read outstanding (the application
            // consumes in order, and readahead moves on only as it does).
            let oldest = app.iter().map(|a| a.0).min().unwrap_or(next);
            while next < size
                && next < oldest + 8 * mib
                && (next == 0 || core.stats().app_reads > 0)
            {
                app.push((next, None));
                next += mib;
            }
            now += Duration::from_micros(500);
            match rng.gen_range(0..3) {
                0 => {
                    // The daemon takes the kernel's reads in order and runs each in a task of
                    // its own: one of the first 4 not yet begun begins.
                    let mut idle: Vec<usize> =
                        (0..app.len()).filter(|&i| app[i].1.is_none()).collect();
                    idle.sort_by_key(|&i| app[i].0);
                    idle.truncate(4);
                    if let Some(&i) = idle.choose(&mut rng) {
                        let (w, _) = core.begin_read(now, app[i].0, mib, &mut budget).unwrap();
                        app[i].1 = Some(w);
                    }
                }
                1 => {
                    // A reply arrives.
                    if !wire.is_empty() {
                        let t = wire.swap_remove(rng.gen_range(0..wire.len()));
                        let piece = ReadData {
                            data: vec![data.slice(t.range.offset as usize..t.range.end() as usize)],
                            eof: false,
                            version: None,
                        };
                        let rtt = Some(Duration::from_millis(5));
                        core.on_reply(now, t, Ok(piece), rtt, &mut budget, |o| format!("{o}"));
                    }
                }
                _ => {
                    // A begun read is looked at.
                    let begun: Vec<usize> =
                        (0..app.len()).filter(|&i| app[i].1.is_some()).collect();
                    if let Some(&i) = begun.choose(&mut rng) {
                        let (off, w) = (app[i].0, app[i].1.unwrap());
                        if let ReadPoll::Ready(d) = core.poll_read(w) {
                            let want = &data[off as usize..(off + mib) as usize];
                            assert!(d.concat() == want, "the data of the read at {off}");
                            core.end_read(w);
                            app.swap_remove(i);
                            delivered += mib;
                        }
                    }
                }
            }
            for t in core.next_reads() {
                *sent.entry(t.range.offset).or_default() += 1;
                wire.push(t);
            }
        }
        let twice = sent.values().map(|&n| n - 1).sum();
        (twice, core.readahead().stats().random_reads)
    }

    /// The contents of the test file of `size` bytes (each 4 KiB page its own byte), made once.
    fn file_data(size: u64) -> Bytes {
        static DATA: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
        let d = DATA.get_or_init(|| {
            (0..32u64 << 20)
                .map(|o| (o / 4096 % 251) as u8)
                .collect::<Vec<u8>>()
                .into()
        });
        d.slice(..size as usize)
    }

    fn t0() -> Instant {
        static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *T0.get_or_init(Instant::now)
    }

    /// Reads that begin out of order keep the stream sequential and find their data: nothing is
    /// fetched twice. Without the reorder allowance (`reorder_reads` 0), the same reads send
    /// READs twice (replies evicted before their late read came), and some count as random
    /// access.
    #[test]
    fn reordered_reads_of_a_sequential_reader_fetch_nothing_twice() {
        let (_, mut rng) = crate::testutil::seeded_rng(
            "readcore::reordered_reads_of_a_sequential_reader_fetch_nothing_twice",
        );
        let (mut twice_without, mut random_without) = (0, 0);
        for _ in 0..8 {
            let run = rand::Rng::gen::<u64>(&mut rng);
            let (twice, random) = reordered_reader(run, 16);
            assert_eq!(twice, 0, "READs sent twice (run seed {run})");
            assert_eq!(random, 0, "reads taken for random access (run seed {run})");
            let (t, r) = reordered_reader(run, 0);
            twice_without += t;
            random_without += r;
        }
        // Without the allowance the same reads fetch data twice (some runs also take reads
        // for random access; not every seed's).
        assert!(
            twice_without > 0,
            "the scenario must reorder enough to matter: {twice_without} READs twice and \
             {random_without} random reads without the allowance"
        );
    }
}
