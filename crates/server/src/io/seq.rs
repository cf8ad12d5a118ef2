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
//!               [·········· window ··········)  hinted: only the part beyond what was hinted
//!               ▲ off+count                     before for this file (`hinted_end`), so a
//!                                               stream costs one small fadvise per READ
//! ```
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
    /// End of the furthest readahead hinted, per file key. Bounded by the table's slot count:
    /// when full, it is cleared (the cost is one redundant hint per stream).
    hinted_end: HashMap<u64, Hinted>,
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
                hinted_end: HashMap::new(),
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
            inner.hinted_end.remove(&key);
            return None;
        }
        let want_end = end.saturating_add(window);
        let slots = inner.table.config().slots;
        // What was hinted before for this file; a READ that jumped back more than a window
        // (a re-read from the start) forgets it.
        let hinted = match inner.hinted_end.get(&key) {
            Some(h) if end.saturating_add(window) >= h.last_offset => h.end,
            _ => 0,
        };
        if inner.hinted_end.len() >= slots && !inner.hinted_end.contains_key(&key) {
            inner.hinted_end.clear();
        }
        inner.hinted_end.insert(
            key,
            Hinted {
                end: hinted.max(want_end),
                last_offset: offset,
            },
        );
        if hinted >= want_end {
            return None;
        }
        let start = hinted.max(end);
        self.stats
            .engine
            .readahead_bytes
            .fetch_add(want_end - start, Relaxed);
        Some(Readahead {
            offset: start,
            len: want_end - start,
        })
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
        for i in 1..32u64 {
            if let Some(ra) = s.observe_read(fh, i * MIB, MIB) {
                assert_eq!(ra.offset, hinted, "contiguous with the previous hint");
                assert!(ra.len <= 8 * MIB);
                hinted = ra.offset + ra.len;
            }
        }
        assert_eq!(hinted, 32 * MIB + 8 * MIB, "the window reached the maximum");
        assert_eq!(
            s.stats.engine.readahead_bytes.load(Relaxed),
            hinted - MIB,
            "every byte counted once"
        );
        assert!(s.stats.engine.seq_hits.load(Relaxed) >= 31);
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
