//! Sequential detection and server readahead: the driver around [`SeqTable`].
//!
//! Every READ and WRITE is observed in one table (FreeBSD nfsd's `nfsheur`, see the essay in
//! `sluice_engine::seqtable`), keyed by the FNV-1a hash of the file handle's bytes. A READ with a
//! positive count asks the backend to read ahead (`posix_fadvise(WILLNEED)`, which starts the
//! I/O and returns), so that a client keeping one READ in flight finds the next one in the page
//! cache:
//!
//! ```text
//!   READ [off, off+count)      seqcount = observe(...)       window = readahead_bytes(seqcount,
//!   ───────[====]────────────────────────────────────────►            readahead_bytes_max)
//!               [======== hinted ahead ========)
//!               ▲ off+count                    ▲ hinted end
//!   while a whole window or more is hinted ahead: nothing. Below that, hint from the hinted
//!   end to one window ahead of the reader, or 2 windows for a stream at the full window.
//! ```
//! At the full window the hints are made in steps of at least a window because a hint is not
//! free even when the data is cached: the kernel looks up every page of the range
//! (`force_page_cache_readahead`), and a syscall per READ was the only per-READ work a warm
//! sequential reader made that ganesha does not (2026-11-21 benchmark: 0.87x its warm read
//! throughput). Now such a stream costs one fadvise per window (8 READs of 1 MiB at the 8 MiB
//! window) instead of one per READ; each byte is still hinted once per pass, and a file is
//! never hinted more than 2 windows ahead of its reader, nor less than one (as before). A
//! stream ramping up, or a reader that is only nearly sequential, hints one window ahead as
//! before: those hints are small.
//! WRITEs are observed too (one table for both, as in FreeBSD), but the count does not steer
//! write clustering: the write-behind core clusters by adjacency of the held ranges, which is a
//! stronger signal than the count and, unlike it, does not stay at 0 through the first shuffled
//! window of a stream that does not start at offset 0.

use crate::stats::EngineStats;
use sluice_engine::seqtable::{SeqTable, SeqTableConfig};
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

/// A readahead request for the backend: `len` bytes at `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readahead {
    pub offset: u64,
    pub len: u64,
}

/// The shared sequential table and what was hinted per file.
pub struct Sequential {
    inner: Mutex<Inner>,
    readahead_bytes_max: u64,
    stats: Arc<crate::stats::Stats>,
}

struct Inner {
    table: SeqTable,
    /// The latest readahead hinted, per file key. Bounded by the table's slot count: when
    /// full, it is cleared (the cost is one redundant hint per stream).
    hinted: HashMap<u64, Hinted>,
}

#[derive(Clone, Copy)]
struct Hinted {
    /// End of the furthest readahead hinted.
    end: u64,
    /// Offset of the latest READ.
    last_offset: u64,
}

impl Sequential {
    pub fn new(
        config: SeqTableConfig,
        readahead_bytes_max: u64,
        stats: Arc<crate::stats::Stats>,
    ) -> Self {
        Sequential {
            inner: Mutex::new(Inner {
                table: SeqTable::new(config),
                hinted: HashMap::new(),
            }),
            readahead_bytes_max,
            stats,
        }
    }

    /// The table key of a file handle.
    pub fn key(fh: &[u8]) -> u64 {
        SeqTable::key_of(fh)
    }

    /// Records a WRITE of `len` bytes at `offset`; returns the file's sequential count.
    pub fn observe_write(&self, fh: &[u8], offset: u64, len: u64) -> u32 {
        let mut inner = self.inner.lock().expect("seqtable lock");
        let n = inner.table.observe(Self::key(fh), offset, len);
        self.publish(&inner.table);
        n
    }

    /// Records a READ of `len` bytes at `offset`; returns the readahead to start, if any.
    pub fn observe_read(&self, fh: &[u8], offset: u64, len: u64) -> Option<Readahead> {
        let key = Self::key(fh);
        let mut inner = self.inner.lock().expect("seqtable lock");
        let seqcount = inner.table.observe(key, offset, len);
        self.publish(&inner.table);
        let window = inner
            .table
            .readahead_bytes(seqcount, self.readahead_bytes_max);
        let end = offset.saturating_add(len);
        if window == 0 {
            inner.hinted.remove(&key);
            return None;
        }
        // What was hinted before for this file; a READ that jumped back more than a window
        // (a re-read from the start) or forward past the hinted end forgets it.
        let before = inner
            .hinted
            .get(&key)
            .copied()
            .filter(|h| end.saturating_add(window) >= h.last_offset && offset <= h.end);
        // Due when less than a window is hinted ahead of the reader: it keeps a whole window
        // ahead, as one hint per READ did (a cold reader needs the disk busy that far ahead).
        let hinted_end = before.map_or(0, |h| h.end);
        let due = hinted_end < end.saturating_add(window);
        let start = hinted_end.max(end);
        // A stream at the full window hints up to 2 windows ahead of the reader: a step of at
        // least one whole window. Below the full window (a stream ramping up, a reader that is
        // not quite sequential) a hint reaches one window ahead, as before: those hints are
        // small, and hinting further would read ahead for readers that may not get there.
        let full_speed = before.is_some() && window >= self.readahead_bytes_max;
        let ahead = if full_speed { 2 } else { 1 };
        let stop = end.saturating_add(window.saturating_mul(ahead));
        let hint = (due && stop > start).then(|| Readahead {
            offset: start,
            len: stop - start,
        });
        let slots = inner.table.config().slots;
        if inner.hinted.len() >= slots && !inner.hinted.contains_key(&key) {
            inner.hinted.clear();
        }
        let next = match (hint, before) {
            (Some(ra), _) => Hinted {
                end: ra.offset + ra.len,
                last_offset: offset,
            },
            (None, Some(h)) => Hinted {
                last_offset: offset,
                ..h
            },
            (None, None) => Hinted {
                end,
                last_offset: offset,
            },
        };
        inner.hinted.insert(key, next);
        if let Some(ra) = hint {
            self.stats.engine.readahead_bytes.fetch_add(ra.len, Relaxed);
        }
        hint
    }

    fn publish(&self, t: &SeqTable) {
        let e: &EngineStats = &self.stats.engine;
        let s = t.stats();
        e.seq_hits.store(s.hits, Relaxed);
        e.seq_misses.store(s.misses, Relaxed);
        e.seq_evictions.store(s.evictions, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn seq() -> Sequential {
        Sequential::new(SeqTableConfig::default(), 8 * MIB, Arc::default())
    }

    #[test]
    fn a_stream_hints_only_what_was_not_hinted_before() {
        let s = seq();
        let fh = b"file-a";
        let first = s.observe_read(fh, 0, MIB).unwrap();
        assert_eq!(first.offset, MIB);
        let mut hinted = first.offset + first.len;
        let mut hints = 1;
        for i in 1..64u64 {
            let end = (i + 1) * MIB;
            if let Some(ra) = s.observe_read(fh, i * MIB, MIB) {
                assert_eq!(ra.offset, hinted, "contiguous with the previous hint");
                assert!(ra.len <= 16 * MIB, "at most 2 windows");
                hinted = ra.offset + ra.len;
                hints += 1;
            }
            assert!(hinted >= end, "the hints stay ahead of the reader");
            assert!(hinted <= end + 16 * MIB, "at most 2 windows ahead");
        }
        assert!(
            hinted >= 64 * MIB + 4 * MIB,
            "half a window ahead at least at full speed"
        );
        assert!(
            hints <= 64 / 2,
            "{hints} hints for 64 READs: not one per READ"
        );
        assert_eq!(
            s.stats.engine.readahead_bytes.load(Relaxed),
            hinted - MIB,
            "every byte counted once"
        );
        assert!(s.stats.engine.seq_hits.load(Relaxed) >= 63);
    }

    /// Regression: a warm sequential reader sent one fadvise per READ (9.5 GB hinted for
    /// 7.7 GB read); at the full window it now sends one per window.
    #[test]
    fn a_full_speed_stream_hints_once_per_window() {
        let s = seq();
        let fh = b"file-d";
        let mut hints = 0;
        for i in 0..1024u64 {
            hints += s.observe_read(fh, i * MIB, MIB).is_some() as u32;
        }
        // 1 GiB in 1 MiB READs: about 128 full windows, plus the ramp-up of the window.
        assert!(hints <= 160, "{hints} hints");
        let hinted = s.stats.engine.readahead_bytes.load(Relaxed);
        assert!(hinted <= 1024 * MIB + 16 * MIB, "{hinted} bytes hinted");
    }

    #[test]
    fn random_reads_hint_nothing() {
        let s = seq();
        let fh = b"file-b";
        let mut x: u64 = 12345;
        let mut hints = 0;
        for _ in 0..100 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let off = (x >> 20) % (1 << 30) / 4096 * 4096 + 4096;
            hints += s.observe_read(fh, off, 4096).is_some() as u32;
        }
        assert!(hints <= 2, "{hints} hints for random 4 KiB reads");
    }

    #[test]
    fn a_reread_from_the_start_hints_again() {
        let s = seq();
        let fh = b"file-c";
        for i in 0..16u64 {
            s.observe_read(fh, i * MIB, MIB);
        }
        let again = s.observe_read(fh, 0, MIB).unwrap();
        assert_eq!(again.offset, MIB);
    }
}
