//! The server's write-behind window: which UNSTABLE writes reach the disk together, and when.
//!
//! # Why
//! A client streaming a file sends WRITEs of `wsize` (1 MiB) with many in flight; they reach the
//! server reordered (several connections, several nfsd threads). Writing each one to the backend
//! as it arrives gives the file system 1 MiB writes at shuffled offsets; holding them briefly and
//! writing *contiguous runs* gives it 4–8 MiB sequential writes, which is what disks, RAID stripes
//! and copy-on-write file systems want. UNSTABLE writes (RFC 1813 §3.3.7) allow exactly this: the
//! server may keep the data in memory until a COMMIT (§3.3.21) asks for it to be stable.
//!
//! # What is tracked
//! Ranges, not bytes. Each pending write is a segment `{offset, len, payload, payload_offset}`
//! where `payload: P` is the caller's reference to the bytes (a pooled chunk, a `Bytes`, an id);
//! the engine clones it when it splits a segment, so `P` should be a cheap handle. Per file, the
//! segments are kept disjoint in a map ordered by offset:
//! ```text
//!   file 7:  [0,1M)[1M,2M)[2M,3M)      [5M,6M)[6M,7M)          [9M,10M)
//!            └──── run A: 3 MiB ───┘   └─ run B: 2 MiB ─┘      └ run C ┘
//!                                 gap (4M..5M) not yet arrived
//! ```
//! A *run* is a maximal sequence of adjacent segments. Runs are what we flush.
//!
//! # When a run is flushed ([`WriteBehind::poll_flush`])
//! In this order of preference:
//! 1. **Cluster**: a run of at least `cluster_bytes` (8 MiB) is flushed at once, cut at exactly
//!    `cluster_bytes`. Flushing at the target rather than waiting for more keeps the disk busy
//!    while the client keeps sending.
//! 2. **Timeout**: a run whose oldest segment arrived `gap_wait` (30 ms) ago is flushed whole:
//!    its missing neighbours had their chance. 30 ms covers the reordering of a window of 16
//!    1 MiB WRITEs even at 1 Gbit/s (16 MiB take ~130 ms to *send*, but reordering spans only a
//!    few requests), while keeping the data at risk before COMMIT short.
//! 3. **Held**: a file holding more than `file_held_bytes_max` (32 MiB) pending flushes its
//!    oldest run: the bound on how much a gap can hold back.
//! 4. **Pressure**: once dirty bytes pass `pressure_percent` (50 %) of the limit, the oldest run
//!    is flushed without waiting, so that writers blocked in [`WriteBehind::admit`] are released.
//!
//! A run that overlaps a flush still in flight is not flushed until that flush completes: two
//! flushes of the same bytes are never in flight together, so the backend applies them in the
//! order they were issued. At most `flushes_in_flight_max` (8) flushes are in flight, and with
//! clustering at most `file_flushes_in_flight_max` (1) of them for one file: the kernel
//! serializes writes to one inode anyway, and writers queued behind its lock only burn CPU.
//! Commit flushes are not limited (COMMIT waits for them).
//!
//! With `clustering: false` every segment is flushed alone, as soon as it is polled.
//!
//! # After a flush lands: start the disk ([`FlushOp::start_writeback`])
//! A flush puts the run into the backend's cache (the page cache), not on the disk; the disk
//! write happens at COMMIT (`fdatasync`) or when the kernel gets round to it (30 s later by
//! default). A stream of 1 GiB followed by one COMMIT then pays for the whole disk write inside
//! the COMMIT: measured on loopback, ~0.5 s of a ~1.5 s run was that `fdatasync` with nothing
//! else to do. So with clustering, every flush asks the driver to *start* writing its range to
//! the disk as soon as it lands (`sync_file_range(SYNC_FILE_RANGE_WRITE)`: queue the writeback,
//! do not wait for it): the disk works while the client is still sending, and COMMIT finds most
//! of the file written (same run: its `fdatasync` took ~0.1 s). This is FreeBSD's
//! `cluster_write()`, which issues a completed cluster's I/O asynchronously, and it only moves
//! the moment of the disk write earlier: nothing becomes stable that COMMIT would not have made
//! stable, and COMMIT still syncs its whole range. Without clustering no flush starts writeback
//! (that mode is the baseline of a server without clustering); `start_writeback: false` turns
//! it off with clustering too.
//!
//! # Overlapping writes
//! A later write replaces the overlapped part of earlier pending segments (they are trimmed or
//! split; the trimmed bytes stop counting as dirty). "Later" is arrival order at the server. A
//! client that sends two overlapping WRITEs without waiting for the first reply gives them no
//! defined order (RFC 1813 leaves it to the server), so arrival order is as good as any; a client
//! that waits for the reply sees its order kept: the earlier write is either still pending (and
//! trimmed) or in a flush that completes before the later one's flush is issued.
//!
//! # COMMIT ([`WriteBehind::commit`])
//! Returns the pending segments overlapping the range, grouped into runs, as flushes to write and
//! then sync, and the ids of flushes already in flight over the range, to wait for. Segments held
//! back by an overlapping in-flight flush are left pending; the COMMIT handler repeats the call
//! after its waits until the plan comes back empty, then syncs.
//!
//! # Backpressure ([`WriteBehind::admit`])
//! Dirty bytes count every byte admitted and not yet flushed to the backend (completed). A WRITE
//! is admitted only if it fits under `dirty_bytes_limit`; otherwise the caller must wait (stop
//! reading that connection) until a flush completes. An empty server admits any one write, so an
//! oversize write cannot deadlock.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Configuration of a [`WriteBehind`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteBehindConfig {
    /// A run reaching this size is flushed at once, in pieces of this size. Default 8 MiB.
    pub cluster_bytes: u64,
    /// How long a run waits for its neighbours, from its oldest segment's arrival. Default 30 ms.
    pub gap_wait: Duration,
    /// A file holding more than this flushes its oldest run without waiting. Default 32 MiB.
    pub file_held_bytes_max: u64,
    /// Server-wide bound on dirty bytes (admitted, not yet flushed). Default 256 MiB.
    pub dirty_bytes_limit: u64,
    /// Above this percentage of the limit, runs are flushed without waiting. Default 50.
    pub pressure_percent: u64,
    /// Flushes in flight at once (commit flushes excepted). Default 8.
    pub flushes_in_flight_max: usize,
    /// Background flushes in flight at once for one file, with clustering. Default 1: writes
    /// to one file serialize on its inode lock in the kernel (`i_rwsem`), so a second 8 MiB
    /// `pwritev` only spins or sleeps behind the first; on 2 cores the spinning took the CPU the
    /// receive path needed (1 GiB shuffled stream: 8 per file ran at 0.6-0.9 GB/s and ~1.0-1.5
    /// CPU s, 1 per file at 1.05-1.1 GB/s and 0.7 CPU s). Other files still flush side by side.
    pub file_flushes_in_flight_max: usize,
    /// Whether adjacent writes are coalesced at all. Default true.
    pub clustering: bool,
    /// With clustering, whether each flush asks for its range to be written to the disk as soon
    /// as it lands, without waiting ([`FlushOp::start_writeback`]). Default true.
    pub start_writeback: bool,
}

impl Default for WriteBehindConfig {
    fn default() -> Self {
        WriteBehindConfig {
            cluster_bytes: 8 * 1024 * 1024,
            gap_wait: Duration::from_millis(30),
            file_held_bytes_max: 32 * 1024 * 1024,
            dirty_bytes_limit: 256 * 1024 * 1024,
            pressure_percent: 50,
            flushes_in_flight_max: 8,
            file_flushes_in_flight_max: 1,
            clustering: true,
            start_writeback: true,
        }
    }
}

/// Answer to [`WriteBehind::admit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Go ahead: the bytes are counted as dirty; call [`WriteBehind::on_write`] (or
    /// [`WriteBehind::cancel_admit`]).
    Ok,
    /// Over the dirty limit: retry after a flush completes.
    Wait,
}

/// A piece of one write: `len` bytes at file `offset`, found at `payload_offset` in `payload`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment<P> {
    pub offset: u64,
    pub len: u64,
    pub payload: P,
    pub payload_offset: u64,
}

/// Why a flush was issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushReason {
    Cluster,
    Timeout,
    Held,
    Pressure,
    Unclustered,
    Commit,
}

/// One backend write: the segments are contiguous, starting at `offset`, `len` bytes in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushOp<F, P> {
    pub id: u64,
    pub file: F,
    pub offset: u64,
    pub len: u64,
    pub segments: Vec<Segment<P>>,
    pub reason: FlushReason,
    /// Once the segments are written, start writing the range to the disk (do not wait for
    /// it). See "After a flush lands" in the module essay.
    pub start_writeback: bool,
}

/// What a COMMIT must do before it syncs: issue `flushes`, wait for them and for `wait_for`,
/// then call [`WriteBehind::commit`] again until [`CommitPlan::is_empty`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitPlan<F, P> {
    pub flushes: Vec<FlushOp<F, P>>,
    pub wait_for: Vec<u64>,
}

impl<F, P> CommitPlan<F, P> {
    /// Nothing pending or in flight overlaps the range: sync and reply.
    pub fn is_empty(&self) -> bool {
        self.flushes.is_empty() && self.wait_for.is_empty()
    }
}

/// Counters since creation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBehindStats {
    pub writes: u64,
    pub write_bytes: u64,
    pub overwritten_bytes: u64,
    pub admit_waits: u64,
    pub flushes: u64,
    pub flushed_bytes: u64,
    pub flushes_cluster: u64,
    pub flushes_timeout: u64,
    pub flushes_held: u64,
    pub flushes_pressure: u64,
    pub flushes_unclustered: u64,
    pub flushes_commit: u64,
    pub dirty_bytes_high_water: u64,
}

/// The write-behind window of a server. `F` names a file (a file id or handle), `P` is the
/// caller's cheap reference to a write's bytes. See the module essay.
#[derive(Debug, Clone)]
pub struct WriteBehind<F, P> {
    config: WriteBehindConfig,
    files: BTreeMap<F, FileState<P>>,
    in_flight: BTreeMap<u64, InFlight<F>>,
    dirty_bytes: u64,
    next_id: u64,
    stats: WriteBehindStats,
}

impl<F: Ord + Clone, P: Clone> WriteBehind<F, P> {
    /// An empty window.
    ///
    /// # Panics
    /// On a zero `cluster_bytes`, `dirty_bytes_limit`, `flushes_in_flight_max` or
    /// `file_flushes_in_flight_max`.
    pub fn new(config: WriteBehindConfig) -> Self {
        assert!(config.cluster_bytes > 0 && config.dirty_bytes_limit > 0);
        assert!(config.flushes_in_flight_max > 0 && config.file_flushes_in_flight_max > 0);
        WriteBehind {
            config,
            files: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            dirty_bytes: 0,
            next_id: 0,
            stats: WriteBehindStats::default(),
        }
    }

    /// May a WRITE of `len` bytes be accepted now? On [`Admit::Ok`] the bytes count as dirty.
    pub fn admit(&mut self, _now: Instant, len: u64) -> Admit {
        if self.dirty_bytes > 0 && self.dirty_bytes + len > self.config.dirty_bytes_limit {
            self.stats.admit_waits += 1;
            return Admit::Wait;
        }
        self.add_dirty(len);
        Admit::Ok
    }

    /// Returns an admission that will not be used (the WRITE failed before reaching us).
    pub fn cancel_admit(&mut self, len: u64) {
        self.sub_dirty(len);
    }

    /// An admitted UNSTABLE WRITE of `len` bytes at `offset` arrived; `payload` holds them.
    pub fn on_write(&mut self, now: Instant, file: F, offset: u64, len: u64, payload: P) {
        self.stats.writes += 1;
        self.stats.write_bytes += len;
        if len == 0 {
            return;
        }
        let state = self.files.entry(file).or_default();
        let trimmed = state.trim(offset, offset + len);
        state.segs.insert(
            offset,
            Seg {
                len,
                payload,
                payload_offset: 0,
                arrived_at: now,
            },
        );
        state.pending_bytes += len;
        self.stats.overwritten_bytes += trimmed;
        self.sub_dirty(trimmed);
    }

    /// The next flush to issue, if any is due at `now`.
    pub fn poll_flush(&mut self, now: Instant) -> Option<FlushOp<F, P>> {
        if self.in_flight.len() >= self.config.flushes_in_flight_max {
            return None;
        }
        let (file, start, len, reason) = self.choose(now)?;
        Some(self.issue(file, start, len, reason))
    }

    /// When [`WriteBehind::poll_flush`] should next be called if nothing else happens: the
    /// earliest run deadline (which may be in the past). `None` when nothing is pending.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.files
            .values()
            .flat_map(|f| f.runs())
            .map(|r| r.oldest + self.config.gap_wait)
            .min()
    }

    /// A flush issued earlier reached the backend. Returns its file, offset and length.
    pub fn on_flush_complete(&mut self, id: u64) -> Option<(F, u64, u64)> {
        let f = self.in_flight.remove(&id)?;
        self.sub_dirty(f.len);
        Some((f.file, f.offset, f.len))
    }

    /// COMMIT of `count` bytes at `offset` (`count == 0`: to the end of the file, RFC 1813
    /// §3.3.21). See [`CommitPlan`].
    pub fn commit(&mut self, file: &F, offset: u64, count: u64) -> CommitPlan<F, P> {
        let end = if count == 0 {
            u64::MAX
        } else {
            offset.saturating_add(count)
        };
        let wait_for: Vec<u64> = self
            .in_flight
            .iter()
            .filter(|(_, f)| &f.file == file && f.offset < end && f.offset + f.len > offset)
            .map(|(&id, _)| id)
            .collect();
        let mut flushes = Vec::new();
        let runs: Vec<(u64, u64)> = match self.files.get(file) {
            None => Vec::new(),
            Some(state) => {
                // Whole segments overlapping the range, grouped into runs.
                let mut runs: Vec<(u64, u64)> = Vec::new();
                for (&o, s) in state.segs.range(..end) {
                    if o + s.len <= offset || self.overlaps_in_flight(file, o, o + s.len) {
                        continue;
                    }
                    match runs.last_mut() {
                        Some((start, len)) if *start + *len == o => *len += s.len,
                        _ => runs.push((o, s.len)),
                    }
                }
                runs
            }
        };
        for (start, len) in runs {
            flushes.push(self.issue(file.clone(), start, len, FlushReason::Commit));
        }
        CommitPlan { flushes, wait_for }
    }

    /// Bytes admitted and not yet flushed.
    pub fn dirty_bytes(&self) -> u64 {
        self.dirty_bytes
    }

    /// Bytes held in pending segments (not yet handed out as flushes).
    pub fn pending_bytes(&self) -> u64 {
        self.files.values().map(|f| f.pending_bytes).sum()
    }

    /// Flushes issued and not completed.
    pub fn flushes_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Counters.
    pub fn stats(&self) -> &WriteBehindStats {
        &self.stats
    }

    /// The configuration.
    pub fn config(&self) -> &WriteBehindConfig {
        &self.config
    }

    // ---- the decision --------------------------------------------------------------------

    /// Picks `(file, start, len, reason)` of the next flush, by the essay's order of preference.
    fn choose(&self, now: Instant) -> Option<(F, u64, u64, FlushReason)> {
        let c = &self.config;
        let pressure = u128::from(self.dirty_bytes) * 100
            >= u128::from(c.dirty_bytes_limit) * u128::from(c.pressure_percent);
        let mut best: Option<(u8, Instant, F, u64, u64, FlushReason)> = None;
        let mut consider = |rank: u8, at: Instant, file: &F, start: u64, len: u64, why| {
            let better = match &best {
                None => true,
                Some((r, t, ..)) => (rank, at) < (*r, *t),
            };
            if better {
                best = Some((rank, at, file.clone(), start, len, why));
            }
        };
        for (file, state) in &self.files {
            let held = state.pending_bytes > c.file_held_bytes_max;
            if !c.clustering {
                for (&o, s) in &state.segs {
                    if !self.overlaps_in_flight(file, o, o + s.len) {
                        consider(0, s.arrived_at, file, o, s.len, FlushReason::Unclustered);
                    }
                }
                continue;
            }
            if self.file_flushes_in_flight(file) >= c.file_flushes_in_flight_max {
                continue;
            }
            for r in state.runs() {
                if self.overlaps_in_flight(file, r.start, r.start + r.len) {
                    continue;
                }
                let len = r.len.min(c.cluster_bytes);
                if r.len >= c.cluster_bytes {
                    consider(0, r.oldest, file, r.start, len, FlushReason::Cluster);
                } else if now >= r.oldest + c.gap_wait {
                    consider(1, r.oldest, file, r.start, len, FlushReason::Timeout);
                } else if held {
                    consider(2, r.oldest, file, r.start, len, FlushReason::Held);
                } else if pressure {
                    consider(3, r.oldest, file, r.start, len, FlushReason::Pressure);
                }
            }
        }
        best.map(|(_, _, f, s, l, why)| (f, s, l, why))
    }

    /// Moves `[start, start + len)` of `file`'s pending segments into a flush in flight.
    fn issue(&mut self, file: F, start: u64, len: u64, reason: FlushReason) -> FlushOp<F, P> {
        let state = self
            .files
            .get_mut(&file)
            .expect("chosen from a pending file");
        let segments = state.take(start, start + len);
        debug_assert_eq!(segments.iter().map(|s| s.len).sum::<u64>(), len);
        if state.segs.is_empty() {
            self.files.remove(&file);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.in_flight.insert(
            id,
            InFlight {
                file: file.clone(),
                offset: start,
                len,
            },
        );
        let s = &mut self.stats;
        s.flushes += 1;
        s.flushed_bytes += len;
        *match reason {
            FlushReason::Cluster => &mut s.flushes_cluster,
            FlushReason::Timeout => &mut s.flushes_timeout,
            FlushReason::Held => &mut s.flushes_held,
            FlushReason::Pressure => &mut s.flushes_pressure,
            FlushReason::Unclustered => &mut s.flushes_unclustered,
            FlushReason::Commit => &mut s.flushes_commit,
        } += 1;
        FlushOp {
            id,
            file,
            offset: start,
            len,
            segments,
            reason,
            start_writeback: self.config.clustering && self.config.start_writeback,
        }
    }

    fn file_flushes_in_flight(&self, file: &F) -> usize {
        self.in_flight.values().filter(|f| &f.file == file).count()
    }

    fn overlaps_in_flight(&self, file: &F, start: u64, end: u64) -> bool {
        self.in_flight
            .values()
            .any(|f| &f.file == file && f.offset < end && f.offset + f.len > start)
    }

    fn add_dirty(&mut self, len: u64) {
        self.dirty_bytes += len;
        self.stats.dirty_bytes_high_water = self.stats.dirty_bytes_high_water.max(self.dirty_bytes);
    }

    fn sub_dirty(&mut self, len: u64) {
        assert!(
            len <= self.dirty_bytes,
            "dirty bytes underflow: a write was not admitted"
        );
        self.dirty_bytes -= len;
    }
}

#[derive(Debug, Clone)]
struct FileState<P> {
    /// Disjoint pending segments by offset.
    segs: BTreeMap<u64, Seg<P>>,
    pending_bytes: u64,
}

impl<P> Default for FileState<P> {
    fn default() -> Self {
        FileState {
            segs: BTreeMap::new(),
            pending_bytes: 0,
        }
    }
}

#[derive(Debug, Clone)]
struct Seg<P> {
    len: u64,
    payload: P,
    payload_offset: u64,
    arrived_at: Instant,
}

#[derive(Debug, Clone)]
struct InFlight<F> {
    file: F,
    offset: u64,
    len: u64,
}

struct Run {
    start: u64,
    len: u64,
    oldest: Instant,
}

impl<P: Clone> FileState<P> {
    /// Maximal runs of adjacent segments.
    fn runs(&self) -> Vec<Run> {
        let mut runs: Vec<Run> = Vec::new();
        for (&o, s) in &self.segs {
            match runs.last_mut() {
                Some(r) if r.start + r.len == o => {
                    r.len += s.len;
                    r.oldest = r.oldest.min(s.arrived_at);
                }
                _ => runs.push(Run {
                    start: o,
                    len: s.len,
                    oldest: s.arrived_at,
                }),
            }
        }
        runs
    }

    /// Removes `[start, end)` from the pending segments, keeping the parts outside it. Returns
    /// the bytes removed.
    fn trim(&mut self, start: u64, end: u64) -> u64 {
        self.cut(start, end, |_| {})
    }

    /// Removes `[start, end)` and returns it as segments, in order.
    fn take(&mut self, start: u64, end: u64) -> Vec<Segment<P>> {
        let mut out = Vec::new();
        self.cut(start, end, |s| out.push(s));
        out.sort_by_key(|s| s.offset);
        out
    }

    fn cut(&mut self, start: u64, end: u64, mut taken: impl FnMut(Segment<P>)) -> u64 {
        // The segment starting before `start` may reach into the range.
        let first = self
            .segs
            .range(..start)
            .next_back()
            .filter(|(&o, s)| o + s.len > start)
            .map(|(&o, _)| o);
        let keys: Vec<u64> = first
            .into_iter()
            .chain(self.segs.range(start..end).map(|(&o, _)| o))
            .collect();
        let mut removed = 0;
        for o in keys {
            let s = self.segs.remove(&o).expect("key just listed");
            let s_end = o + s.len;
            let lo = o.max(start);
            let hi = s_end.min(end);
            if o < start {
                self.segs.insert(
                    o,
                    Seg {
                        len: start - o,
                        ..s.clone()
                    },
                );
            }
            if s_end > end {
                self.segs.insert(
                    end,
                    Seg {
                        len: s_end - end,
                        payload_offset: s.payload_offset + (end - o),
                        ..s.clone()
                    },
                );
            }
            removed += hi - lo;
            taken(Segment {
                offset: lo,
                len: hi - lo,
                payload_offset: s.payload_offset + (lo - o),
                payload: s.payload,
            });
        }
        self.pending_bytes -= removed;
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::seeded_rng;
    use rand::seq::SliceRandom;
    use rand::Rng;

    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;

    type Wb = WriteBehind<u32, u64>;

    fn write(wb: &mut Wb, now: Instant, file: u32, offset: u64, len: u64, id: u64) {
        assert_eq!(wb.admit(now, len), Admit::Ok);
        wb.on_write(now, file, offset, len, id);
    }

    fn median(v: &mut [u64]) -> u64 {
        v.sort();
        v[v.len() / 2]
    }

    /// A client streaming `batches` × 16 × 1 MiB WRITEs, each window of 16 shuffled, arriving
    /// 0.1 ms apart; flushes polled after every arrival and at deadlines, completing at once.
    fn stream(config: WriteBehindConfig, batches: u64) -> Vec<u64> {
        let (_, mut rng) = seeded_rng("writebehind::stream");
        let mut wb: Wb = WriteBehind::new(config);
        let mut t = Instant::now();
        let mut sizes = Vec::new();
        let drain = |wb: &mut Wb, t: Instant, sizes: &mut Vec<u64>| {
            while let Some(op) = wb.poll_flush(t) {
                sizes.push(op.len);
                wb.on_flush_complete(op.id);
            }
        };
        for b in 0..batches {
            let mut order: Vec<u64> = (b * 16..b * 16 + 16).collect();
            order.shuffle(&mut rng);
            for i in order {
                t += Duration::from_micros(100);
                write(&mut wb, t, 1, i * MIB, MIB, i);
                drain(&mut wb, t, &mut sizes);
            }
        }
        while let Some(d) = wb.poll_timeout() {
            t = t.max(d);
            drain(&mut wb, t, &mut sizes);
        }
        assert_eq!(wb.pending_bytes(), 0);
        assert_eq!(wb.dirty_bytes(), 0);
        assert_eq!(sizes.iter().sum::<u64>(), batches * 16 * MIB);
        sizes
    }

    #[test]
    fn sixteen_reordered_1m_writes_coalesce_into_large_flushes() {
        for batches in [1, 16] {
            let mut sizes = stream(WriteBehindConfig::default(), batches);
            let m = median(&mut sizes);
            eprintln!(
                "{batches} × 16 × 1 MiB: {} flushes, median {} KiB",
                sizes.len(),
                m / KIB
            );
            assert!(m >= 4 * MIB, "{sizes:?}");
        }
    }

    #[test]
    fn without_clustering_flushes_are_the_writes() {
        let sizes = stream(
            WriteBehindConfig {
                clustering: false,
                ..WriteBehindConfig::default()
            },
            4,
        );
        assert!(sizes.iter().all(|&s| s == MIB), "{sizes:?}");
    }

    #[test]
    fn a_gap_waits_at_most_gap_wait() {
        let mut wb: Wb = WriteBehind::new(WriteBehindConfig::default());
        let t = Instant::now();
        write(&mut wb, t, 1, 0, MIB, 0);
        write(&mut wb, t, 1, 2 * MIB, MIB, 1); // 1M..2M missing
        assert!(wb.poll_flush(t).is_none());
        assert!(wb.poll_flush(t + Duration::from_millis(29)).is_none());
        assert_eq!(wb.poll_timeout(), Some(t + Duration::from_millis(30)));
        let a = wb.poll_flush(t + Duration::from_millis(30)).unwrap();
        // One flush per file in flight: the second run waits for the first to land.
        assert!(wb.poll_flush(t + Duration::from_millis(30)).is_none());
        wb.on_flush_complete(a.id);
        let b = wb.poll_flush(t + Duration::from_millis(30)).unwrap();
        assert_eq!((a.offset, a.len, a.reason), (0, MIB, FlushReason::Timeout));
        assert_eq!((b.offset, b.len), (2 * MIB, MIB));
    }

    #[test]
    fn one_file_has_one_background_flush_in_flight_other_files_proceed() {
        let mut wb: Wb = WriteBehind::new(WriteBehindConfig::default());
        let t = Instant::now();
        for i in 0..16 {
            write(&mut wb, t, 1, i * MIB, MIB, i);
        }
        write(&mut wb, t, 2, 0, 8 * MIB, 100);
        let first = wb.poll_flush(t).unwrap();
        let second = wb.poll_flush(t).unwrap();
        assert_ne!(first.file, second.file, "the other file is not held back");
        assert!(wb.poll_flush(t).is_none(), "file 1's second cluster waits");
        let one = if first.file == 1 { first } else { second };
        wb.on_flush_complete(one.id);
        let next = wb.poll_flush(t).unwrap();
        assert_eq!(
            (next.file, next.offset, next.len),
            (1, one.offset + 8 * MIB, 8 * MIB)
        );
    }

    #[test]
    fn clustered_flushes_start_writeback_unclustered_ones_do_not() {
        let t = Instant::now();
        for (clustering, start_writeback, expect) in [
            (true, true, true),
            (true, false, false),
            (false, true, false),
        ] {
            let mut wb: Wb = WriteBehind::new(WriteBehindConfig {
                clustering,
                start_writeback,
                ..WriteBehindConfig::default()
            });
            for i in 0..9 {
                write(&mut wb, t, 1, i * MIB, MIB, i);
            }
            let background = wb.poll_flush(t).unwrap();
            let commit = wb.commit(&1, 0, 0);
            assert!(!commit.flushes.is_empty());
            for op in std::iter::once(&background).chain(&commit.flushes) {
                assert_eq!(
                    op.start_writeback, expect,
                    "{clustering} {start_writeback} {op:?}"
                );
            }
        }
    }

    #[test]
    fn a_long_run_is_cut_at_the_cluster_size() {
        let mut wb: Wb = WriteBehind::new(WriteBehindConfig::default());
        let t = Instant::now();
        for i in 0..12 {
            write(&mut wb, t, 1, i * MIB, MIB, i);
        }
        let op = wb.poll_flush(t).unwrap();
        assert_eq!(
            (op.offset, op.len, op.reason),
            (0, 8 * MIB, FlushReason::Cluster)
        );
        assert_eq!(op.segments.len(), 8);
        assert!(wb.poll_flush(t).is_none(), "4 MiB left waits for more");
    }

    #[test]
    fn a_gap_holds_back_at_most_file_held_bytes_max() {
        let mut wb: Wb = WriteBehind::new(WriteBehindConfig {
            file_held_bytes_max: 4 * MIB,
            ..WriteBehindConfig::default()
        });
        let t = Instant::now();
        for i in 0..6 {
            write(&mut wb, t, 1, 2 * i * MIB, MIB, i); // every other MiB: all gaps
        }
        let op = wb.poll_flush(t).unwrap();
        assert_eq!((op.offset, op.reason), (0, FlushReason::Held));
    }

    #[test]
    fn dirty_bytes_never_exceed_the_limit() {
        let mut wb: Wb = WriteBehind::new(WriteBehindConfig {
            dirty_bytes_limit: 8 * MIB,
            ..WriteBehindConfig::default()
        });
        let t = Instant::now();
        let mut waits = 0;
        let mut in_flight = Vec::new();
        for i in 0..100u64 {
            loop {
                match wb.admit(t, MIB) {
                    Admit::Ok => break,
                    Admit::Wait => {
                        waits += 1;
                        // Pressure flushes must exist, or the writer would deadlock.
                        while let Some(op) = wb.poll_flush(t) {
                            in_flight.push(op.id);
                        }
                        assert!(!in_flight.is_empty(), "blocked with nothing to flush");
                        wb.on_flush_complete(in_flight.remove(0));
                    }
                }
            }
            wb.on_write(t, 1, (i * 7 % 100) * MIB, MIB, i);
            assert!(wb.dirty_bytes() <= 8 * MIB);
        }
        assert!(waits > 0);
        assert!(wb.stats().dirty_bytes_high_water <= 8 * MIB);
        assert!(wb.stats().flushes_pressure > 0);
    }

    #[test]
    fn an_oversize_write_is_admitted_on_an_idle_server() {
        let mut wb: Wb = WriteBehind::new(WriteBehindConfig {
            dirty_bytes_limit: MIB,
            ..WriteBehindConfig::default()
        });
        let t = Instant::now();
        assert_eq!(wb.admit(t, 4 * MIB), Admit::Ok);
        assert_eq!(wb.admit(t, 1), Admit::Wait);
        wb.cancel_admit(4 * MIB);
        assert_eq!(wb.dirty_bytes(), 0);
    }

    #[test]
    fn a_later_write_wins_over_the_overlapped_part() {
        let mut wb: Wb = WriteBehind::new(WriteBehindConfig::default());
        let t = Instant::now();
        write(&mut wb, t, 1, 0, 100, 1);
        write(&mut wb, t, 1, 40, 20, 2);
        assert_eq!(wb.dirty_bytes(), 100);
        assert_eq!(wb.stats().overwritten_bytes, 20);
        let plan = wb.commit(&1, 0, 0);
        assert_eq!(plan.flushes.len(), 1);
        let segs: Vec<(u64, u64, u64, u64)> = plan.flushes[0]
            .segments
            .iter()
            .map(|s| (s.offset, s.len, s.payload, s.payload_offset))
            .collect();
        assert_eq!(segs, vec![(0, 40, 1, 0), (40, 20, 2, 0), (60, 40, 1, 60)]);
    }

    #[test]
    fn commit_returns_exactly_the_overlapping_pending_ranges() {
        let mut wb: Wb = WriteBehind::new(WriteBehindConfig::default());
        let t = Instant::now();
        write(&mut wb, t, 1, 0, MIB, 0);
        write(&mut wb, t, 1, MIB, MIB, 1);
        write(&mut wb, t, 1, 4 * MIB, MIB, 2);
        write(&mut wb, t, 2, 0, MIB, 3);
        let plan = wb.commit(&1, MIB + 10, 10);
        assert_eq!(plan.flushes.len(), 1);
        assert_eq!((plan.flushes[0].offset, plan.flushes[0].len), (MIB, MIB));
        assert!(plan.wait_for.is_empty());
        // The same range again: nothing pending, one flush to wait for.
        let again = wb.commit(&1, MIB + 10, 10);
        assert!(again.flushes.is_empty());
        assert_eq!(again.wait_for, vec![plan.flushes[0].id]);
        wb.on_flush_complete(plan.flushes[0].id);
        assert!(wb.commit(&1, MIB + 10, 10).is_empty());
        // Whole file: the two other runs of file 1, nothing of file 2.
        let all = wb.commit(&1, 0, 0);
        let got: Vec<(u64, u64)> = all.flushes.iter().map(|f| (f.offset, f.len)).collect();
        assert_eq!(got, vec![(0, MIB), (4 * MIB, MIB)]);
        assert_eq!(wb.pending_bytes(), MIB);
    }

    #[test]
    fn a_write_overlapping_a_flush_in_flight_waits_for_it() {
        let mut wb: Wb = WriteBehind::new(WriteBehindConfig {
            cluster_bytes: MIB,
            ..WriteBehindConfig::default()
        });
        let t = Instant::now();
        write(&mut wb, t, 1, 0, MIB, 0);
        let first = wb.poll_flush(t).unwrap();
        write(&mut wb, t, 1, 0, MIB, 1);
        assert!(wb.poll_flush(t).is_none());
        let plan = wb.commit(&1, 0, 0);
        assert!(plan.flushes.is_empty());
        assert_eq!(plan.wait_for, vec![first.id]);
        wb.on_flush_complete(first.id);
        let second = wb.poll_flush(t).unwrap();
        assert_eq!(second.segments[0].payload, 1);
    }

    /// Random writes (overlapping, reordered, several files), random polling, completion order,
    /// commits and time. Applying the flushes to a model file as they complete must give the
    /// same content as applying the writes in arrival order; dirty bytes stay under the limit.
    #[test]
    fn randomized_flushes_reproduce_the_writes() {
        let (_, mut rng) = seeded_rng("writebehind::randomized_flushes_reproduce_the_writes");
        const FILE_BYTES: usize = 256 * 1024;
        // Byte `i` of write `id`'s payload.
        fn byte(id: u64, i: u64) -> u8 {
            (id.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40).wrapping_add(i * 31) as u8
        }
        for _round in 0..30 {
            let config = WriteBehindConfig {
                cluster_bytes: rng.gen_range(1..64) * 1024,
                gap_wait: Duration::from_micros(rng.gen_range(0..5_000)),
                file_held_bytes_max: rng.gen_range(1..128) * 1024,
                dirty_bytes_limit: rng.gen_range(16..256) * 1024,
                pressure_percent: rng.gen_range(1..=100),
                flushes_in_flight_max: rng.gen_range(1..10),
                file_flushes_in_flight_max: rng.gen_range(1..4),
                clustering: rng.gen_bool(0.8),
                start_writeback: rng.gen_bool(0.5),
            };
            let limit = config.dirty_bytes_limit;
            let writeback = config.clustering && config.start_writeback;
            let mut wb: Wb = WriteBehind::new(config);
            let files = 3u32;
            let mut expect = vec![vec![0u8; FILE_BYTES]; files as usize];
            let mut got = vec![vec![0u8; FILE_BYTES]; files as usize];
            let mut in_flight: Vec<FlushOp<u32, u64>> = Vec::new();
            let mut t = Instant::now();
            let mut next_id = 0u64;
            let apply = |got: &mut Vec<Vec<u8>>, op: &FlushOp<u32, u64>| {
                assert_eq!(op.start_writeback, writeback);
                let mut at = op.offset;
                for s in &op.segments {
                    assert_eq!(s.offset, at, "segments not contiguous");
                    for i in 0..s.len {
                        got[op.file as usize][(s.offset + i) as usize] =
                            byte(s.payload, s.payload_offset + i);
                    }
                    at += s.len;
                }
                assert_eq!(at, op.offset + op.len);
            };
            for _ in 0..2_000 {
                t += Duration::from_micros(rng.gen_range(0..500));
                match rng.gen_range(0..10) {
                    0..=4 => {
                        let file = rng.gen_range(0..files);
                        let len = rng.gen_range(1..16 * KIB);
                        let off = rng.gen_range(0..FILE_BYTES as u64 - len);
                        if wb.admit(t, len) == Admit::Ok {
                            let id = next_id;
                            next_id += 1;
                            wb.on_write(t, file, off, len, id);
                            for i in 0..len {
                                expect[file as usize][(off + i) as usize] = byte(id, i);
                            }
                        }
                    }
                    5 | 6 => {
                        if let Some(op) = wb.poll_flush(t) {
                            in_flight.push(op);
                        }
                    }
                    7 | 8 => {
                        if !in_flight.is_empty() {
                            let op = in_flight.swap_remove(rng.gen_range(0..in_flight.len()));
                            apply(&mut got, &op);
                            assert!(wb.on_flush_complete(op.id).is_some());
                        }
                    }
                    _ => {
                        let file = rng.gen_range(0..files);
                        let off = rng.gen_range(0..FILE_BYTES as u64);
                        let count = rng.gen_range(0..64 * KIB);
                        let plan = wb.commit(&file, off, count);
                        in_flight.extend(plan.flushes);
                    }
                }
                assert!(wb.dirty_bytes() <= limit.max(16 * KIB));
            }
            // Drain: complete everything, let every deadline pass.
            loop {
                for op in in_flight.drain(..) {
                    apply(&mut got, &op);
                    wb.on_flush_complete(op.id);
                }
                t += Duration::from_secs(1);
                while let Some(op) = wb.poll_flush(t) {
                    in_flight.push(op);
                }
                if in_flight.is_empty() {
                    break;
                }
            }
            assert_eq!(wb.pending_bytes(), 0);
            assert_eq!(wb.dirty_bytes(), 0);
            assert!(wb.poll_timeout().is_none());
            for f in 0..files as usize {
                assert!(expect[f] == got[f], "file {f} differs");
            }
        }
    }
}
