//! The server's sequential-access table: "is this file being streamed, and how strongly?"
//!
//! # Why the server needs it
//! An NFS server sees no `open()` and no file descriptor: every READ and WRITE arrives alone,
//! carrying a file handle, an offset and a length. Yet the local file system below us only reads
//! ahead and clusters writes well when it is told the access is sequential (FreeBSD passes a
//! `seqcount` in the `ioflag` of `VOP_READ`/`VOP_WRITE`; we use the count to size our own
//! readahead and to pick `posix_fadvise` hints). So the server has to *infer* sequentiality from
//! the stream of RPCs, per file, with bounded memory. This is the FreeBSD nfsd design
//! (`nfsheur`), restated and with its numbers explained.
//!
//! # The table
//! ```text
//!   key = hash(file handle) ──► slot = key mod 1021 (a prime)
//!
//!   slot:  ... | 614 | 615 | 616 | 617 | 618 | ...        probe at most `probe_len` (8) slots
//!                 ▲                         linear: 614, 615, ..., 621 (mod 1021)
//!                 └─ home slot
//!
//!   entry: { key, next_offset, request_bytes, seqcount: 0..=127, uses: 0..=2048 }
//! ```
//! A prime slot count spreads keys whose hashes share low bits; short linear probing keeps a
//! lookup to one or two cache lines. When a key is not found within its probe run, it takes an
//! empty slot of the run, or else evicts the *least used* entry of the run. Every hit adds
//! [`USE_HIT`] to the entry's `uses` (capped at [`USE_MAX`]); every lookup that passes an entry
//! without matching subtracts one. A file being streamed therefore stays in the table while a
//! crowd of files touched once churns through the other slots of its run.
//!
//! The table holds `slots` entries, never more: it is the bound on the server's memory for this
//! heuristic, whatever the number of files clients touch.
//!
//! # The sequential count
//! `seqcount` measures the current sequential run in units of [`SeqTableConfig::unit_bytes`]
//! (16 KiB, the unit FreeBSD uses), capped at [`SeqTableConfig::seqcount_max`] (127, FreeBSD's
//! `IO_SEQMAX`: the count lives in 7 bits of `ioflag`). With 1 MiB requests the cap is reached
//! after two requests; with 16 KiB requests after 127.
//!
//! ```text
//!   expected: next_offset = end of the previous request
//!
//!   ───────────────[ next ]──────────────────────────────────► offset
//!          ◄── window ──►◄── window ──►
//!   offset == next                         → seqcount += max(1, ceil(len / 16 KiB))
//!   |offset - next| <= window              → reordered RPC: seqcount unchanged
//!   otherwise                              → seqcount /= 2 (random access)
//!   window = reorder_requests (16) × max(len, previous request's len)
//! ```
//! A client with 16 READs of 1 MiB in flight on several connections (or nfsd threads racing)
//! delivers them in a slightly shuffled order. Treating every out-of-order arrival as random
//! access would collapse the count exactly when the client streams hardest, so an offset within
//! 16 requests of the expected one is taken as *reordered*: the count is left alone. Sixteen is
//! FreeBSD's `MAX_REORDERED_RPC`; it matches the 16 slots a Linux client uses by default per
//! transport. Widening it makes truly random access within a 16-request neighbourhood look
//! sequential; narrowing it punishes deep pipelines.
//!
//! One deliberate difference from FreeBSD: after a reordered arrival, `next_offset` becomes
//! `max(next_offset, offset + len)`. A late arrival (behind the expected offset) therefore does not
//! drag the expectation back, and the next in-order request still counts as sequential.
//!
//! A new entry starts at 0, except that a request at offset 0 starts a run (files are mostly read
//! from the start). An existing entry whose request comes back to offset 0 while its count is
//! positive is a re-read from the start and also counts as sequential.
//!
//! READ and WRITE share one table: both benefit from the same knowledge, a file is rarely read
//! and written sequentially at once, and one table halves the memory.
//!
//! # Readahead suggestion
//! [`SeqTable::readahead_bytes`] turns a count into a byte count proportional to it:
//! `max × seqcount / seqcount_max`, in whole units. A count of 0 (random) suggests nothing; the cap
//! suggests the caller's maximum.

use std::hash::{Hash, Hasher};

/// Added to an entry's `uses` on every hit. A hit is worth sixteen passes by colliding lookups:
/// a file hit once survives the next sixteen new files landing in its probe run.
pub const USE_HIT: u32 = 16;
/// Cap on `uses`. A long stream that stops is evicted after at most this many colliding lookups
/// (2048 / 1 per lookup), which bounds how long a dead entry can hold its slot.
pub const USE_MAX: u32 = 2048;

/// Configuration of a [`SeqTable`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqTableConfig {
    /// Number of slots, the bound on entries. Should be prime. Default 1021.
    pub slots: usize,
    /// Slots probed (linearly) per lookup. Default 8.
    pub probe_len: usize,
    /// Bytes per unit of the sequential count. Default 16 KiB (FreeBSD's unit).
    pub unit_bytes: u64,
    /// Cap on the sequential count, in units. Default 127 (FreeBSD's `IO_SEQMAX`).
    pub seqcount_max: u32,
    /// Reordering tolerated, in requests: an offset within this many request lengths of the
    /// expected one leaves the count unchanged. Default 16.
    pub reorder_requests: u64,
}

impl Default for SeqTableConfig {
    fn default() -> Self {
        SeqTableConfig {
            slots: 1021,
            probe_len: 8,
            unit_bytes: 16 * 1024,
            seqcount_max: 127,
            reorder_requests: 16,
        }
    }
}

/// Counters, all monotonic since creation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeqTableStats {
    /// Lookups that found the key.
    pub hits: u64,
    /// Lookups that did not (a new entry was made).
    pub misses: u64,
    /// Entries evicted to make room for a miss.
    pub evictions: u64,
    /// Requests at the expected offset.
    pub sequential: u64,
    /// Requests within the reorder window (count left alone).
    pub reordered: u64,
    /// Requests elsewhere (count halved).
    pub random: u64,
}

/// The bounded sequential-access table. See the module essay.
#[derive(Debug, Clone)]
pub struct SeqTable {
    config: SeqTableConfig,
    slots: Vec<Option<Entry>>,
    len: usize,
    stats: SeqTableStats,
}

impl SeqTable {
    /// A table with `config.slots` empty slots.
    ///
    /// # Panics
    /// If `slots`, `probe_len`, `unit_bytes` or `seqcount_max` is zero, or `probe_len > slots`.
    pub fn new(config: SeqTableConfig) -> Self {
        assert!(config.slots > 0, "slots must be positive");
        assert!(
            config.probe_len > 0 && config.probe_len <= config.slots,
            "probe_len must be in 1..=slots"
        );
        assert!(config.unit_bytes > 0, "unit_bytes must be positive");
        assert!(config.seqcount_max > 0, "seqcount_max must be positive");
        SeqTable {
            slots: vec![None; config.slots],
            len: 0,
            stats: SeqTableStats::default(),
            config,
        }
    }

    /// A stable 64-bit key for any hashable file identity (a file handle's bytes, a fileid...).
    /// Deterministic across runs and processes (FNV-1a), so simulations replay exactly.
    pub fn key_of<K: Hash + ?Sized>(file: &K) -> u64 {
        let mut h = Fnv1a::default();
        file.hash(&mut h);
        h.finish()
    }

    /// Records a READ or WRITE of `len` bytes at `offset` on the file `key` and returns the file's
    /// sequential count after it, in `0..=seqcount_max`.
    pub fn observe(&mut self, key: u64, offset: u64, len: u64) -> u32 {
        let units = self.units(len);
        let end = offset.saturating_add(len);
        let (slot, found) = self.lookup(key);
        if !found {
            self.stats.misses += 1;
            if self.slots[slot].is_some() {
                self.stats.evictions += 1;
            } else {
                self.len += 1;
            }
            let seqcount = if offset == 0 {
                self.stats.sequential += 1;
                units.min(self.config.seqcount_max)
            } else {
                self.stats.random += 1;
                0
            };
            self.slots[slot] = Some(Entry {
                key,
                next_offset: end,
                request_bytes: len,
                seqcount,
                uses: USE_HIT,
            });
            return seqcount;
        }
        self.stats.hits += 1;
        let seqcount_max = self.config.seqcount_max;
        let window = self
            .config
            .reorder_requests
            .saturating_mul(len.max(self.slot(slot).request_bytes));
        let e = self.slots[slot].as_mut().expect("lookup found it");
        e.uses = (e.uses + USE_HIT).min(USE_MAX);
        let restart = offset == 0 && e.seqcount > 0;
        if offset == e.next_offset || restart {
            e.seqcount = (e.seqcount + units).min(seqcount_max);
            e.next_offset = end;
            self.stats.sequential += 1;
        } else if offset.abs_diff(e.next_offset) <= window {
            e.next_offset = e.next_offset.max(end);
            self.stats.reordered += 1;
        } else {
            e.seqcount /= 2;
            e.next_offset = end;
            self.stats.random += 1;
        }
        e.request_bytes = len;
        e.seqcount
    }

    /// The count for `key` without recording an access, or `None` if the key is not in the table.
    pub fn seqcount(&self, key: u64) -> Option<u32> {
        self.probe_run(key)
            .find_map(|i| self.slots[i].as_ref().filter(|e| e.key == key))
            .map(|e| e.seqcount)
    }

    /// Suggested readahead for a count: `max_bytes × seqcount / seqcount_max`, rounded down to
    /// whole units (but never below one unit for a positive count if `max_bytes` allows it).
    pub fn readahead_bytes(&self, seqcount: u32, max_bytes: u64) -> u64 {
        let seqcount = u64::from(seqcount.min(self.config.seqcount_max));
        if seqcount == 0 || max_bytes == 0 {
            return 0;
        }
        let raw = (u128::from(max_bytes) * u128::from(seqcount)
            / u128::from(self.config.seqcount_max)) as u64;
        let unit = self.config.unit_bytes;
        (raw / unit * unit).max(unit.min(max_bytes))
    }

    /// Forgets `key` (the file was removed or its handle went stale).
    pub fn remove(&mut self, key: u64) {
        if let Some(i) = self
            .probe_run(key)
            .find(|&i| self.slots[i].as_ref().is_some_and(|e| e.key == key))
        {
            self.slots[i] = None;
            self.len -= 1;
        }
    }

    /// Entries in use; never more than `config().slots`.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if no entry is in use.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The configuration.
    pub fn config(&self) -> &SeqTableConfig {
        &self.config
    }

    /// Counters since creation.
    pub fn stats(&self) -> &SeqTableStats {
        &self.stats
    }

    // ---- helpers -------------------------------------------------------------------------

    fn units(&self, len: u64) -> u32 {
        let units = len.div_ceil(self.config.unit_bytes).max(1);
        units.min(u64::from(self.config.seqcount_max)) as u32
    }

    fn slot(&self, i: usize) -> &Entry {
        self.slots[i].as_ref().expect("occupied slot")
    }

    fn probe_run(&self, key: u64) -> impl Iterator<Item = usize> {
        let n = self.config.slots;
        let home = (key % n as u64) as usize;
        (0..self.config.probe_len).map(move |i| (home + i) % n)
    }

    /// Finds `key` in its probe run: `(slot, true)` if present. Otherwise `(slot, false)` where
    /// `slot` is the first empty slot of the run or, if none, the least used one (the victim).
    /// Entries passed without a match age by one use.
    fn lookup(&mut self, key: u64) -> (usize, bool) {
        let run: Vec<usize> = self.probe_run(key).collect();
        if let Some(&i) = run
            .iter()
            .find(|&&i| self.slots[i].as_ref().is_some_and(|e| e.key == key))
        {
            return (i, true);
        }
        let mut empty = None;
        let mut victim = run[0];
        let mut victim_uses = u32::MAX;
        for &i in &run {
            match self.slots[i].as_mut() {
                None => {
                    empty.get_or_insert(i);
                }
                Some(e) => {
                    e.uses = e.uses.saturating_sub(1);
                    if e.uses < victim_uses {
                        victim_uses = e.uses;
                        victim = i;
                    }
                }
            }
        }
        (empty.unwrap_or(victim), false)
    }
}

impl Default for SeqTable {
    fn default() -> Self {
        SeqTable::new(SeqTableConfig::default())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    key: u64,
    /// End of the furthest request seen in the current run: where a sequential request starts.
    next_offset: u64,
    /// Length of the previous request; sizes the reorder window.
    request_bytes: u64,
    seqcount: u32,
    uses: u32,
}

/// FNV-1a, 64-bit: a tiny deterministic hasher (std's `DefaultHasher` does not promise
/// stability across Rust releases, and simulations must replay identically).
struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv1a {
    fn finish(&self) -> u64 {
        // A final avalanche (the murmur3 finalizer) so that keys differing in the last byte do
        // not land in adjacent slots.
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
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

    #[test]
    fn a_sequential_stream_reaches_the_cap() {
        let mut t = SeqTable::default();
        let mut last = 0;
        for i in 0..200u64 {
            let c = t.observe(7, i * 16 * KIB, 16 * KIB);
            assert!(c >= last, "count must not fall on a sequential stream");
            last = c;
        }
        assert_eq!(last, 127);
        // With 1 MiB requests (64 units each) two requests reach the cap.
        let mut t = SeqTable::default();
        t.observe(8, 0, MIB);
        assert_eq!(t.observe(8, MIB, MIB), 127);
    }

    #[test]
    fn a_stream_not_starting_at_zero_builds_up_from_zero() {
        let mut t = SeqTable::default();
        assert_eq!(t.observe(1, 10 * MIB, 64 * KIB), 0);
        assert_eq!(t.observe(1, 10 * MIB + 64 * KIB, 64 * KIB), 4);
        assert_eq!(t.observe(1, 10 * MIB + 128 * KIB, 64 * KIB), 8);
    }

    #[test]
    fn tiny_requests_count_at_least_one_unit() {
        let mut t = SeqTable::default();
        t.observe(1, 0, 512);
        assert_eq!(t.observe(1, 512, 512), 2);
    }

    #[test]
    fn reordered_arrivals_within_the_window_keep_the_count() {
        let (_, mut rng) = seeded_rng("reordered_arrivals_within_the_window_keep_the_count");
        let mut t = SeqTable::default();
        // Build up to the cap, then deliver the next 256 requests shuffled within groups of 16.
        t.observe(3, 0, MIB);
        t.observe(3, MIB, MIB);
        let mut blocks: Vec<u64> = (2..258).collect();
        for group in blocks.chunks_mut(16) {
            group.shuffle(&mut rng);
        }
        for b in blocks {
            assert_eq!(t.observe(3, b * MIB, MIB), 127, "block {b}");
        }
        assert!(t.stats().reordered > 0);
        assert_eq!(t.stats().random, 0);
    }

    #[test]
    fn a_late_arrival_does_not_drag_the_expectation_back() {
        let mut t = SeqTable::default();
        t.observe(1, 0, 64 * KIB); // count 4, next 64K
        t.observe(1, 128 * KIB, 64 * KIB); // early: next 192K
        t.observe(1, 64 * KIB, 64 * KIB); // late: next stays 192K
        assert_eq!(t.observe(1, 192 * KIB, 64 * KIB), 8);
    }

    #[test]
    fn random_access_halves_the_count() {
        let mut t = SeqTable::default();
        t.observe(5, 0, MIB);
        assert_eq!(t.observe(5, MIB, MIB), 127);
        // Far beyond 16 × 1 MiB from the expected offset.
        assert_eq!(t.observe(5, 900 * MIB, MIB), 63);
        assert_eq!(t.observe(5, 10 * MIB, MIB), 31);
        assert_eq!(t.observe(5, 500 * MIB, MIB), 15);
        for _ in 0..4 {
            t.observe(5, 3 * MIB, 4 * KIB);
            t.observe(5, 700 * MIB, 4 * KIB);
        }
        assert_eq!(t.seqcount(5), Some(0));
        assert_eq!(t.stats().random, 11);
    }

    #[test]
    fn restarting_from_zero_counts_as_sequential() {
        let mut t = SeqTable::default();
        t.observe(5, 0, MIB);
        t.observe(5, MIB, MIB);
        assert_eq!(t.observe(5, 0, MIB), 127);
    }

    #[test]
    fn readahead_is_proportional_to_the_count() {
        let t = SeqTable::default();
        assert_eq!(t.readahead_bytes(0, 8 * MIB), 0);
        assert_eq!(t.readahead_bytes(127, 8 * MIB), 8 * MIB);
        assert_eq!(t.readahead_bytes(500, 8 * MIB), 8 * MIB);
        let half = t.readahead_bytes(64, 8 * MIB);
        assert!(
            (4 * MIB - 64 * KIB..=4 * MIB + 64 * KIB).contains(&half),
            "{half}"
        );
        assert_eq!(half % (16 * KIB), 0);
        assert_eq!(t.readahead_bytes(1, 8 * MIB), 64 * KIB);
        assert_eq!(t.readahead_bytes(1, 4 * KIB), 4 * KIB);
        let mut prev = 0;
        for c in 0..=127 {
            let r = t.readahead_bytes(c, 8 * MIB);
            assert!(r >= prev);
            prev = r;
        }
    }

    #[test]
    fn eviction_under_many_files_keeps_the_table_bounded() {
        let mut t = SeqTable::new(SeqTableConfig {
            slots: 251,
            ..SeqTableConfig::default()
        });
        for f in 0..10_000u64 {
            let key = SeqTable::key_of(&f.to_be_bytes());
            t.observe(key, 0, 4 * KIB);
            assert!(t.len() <= 251);
        }
        assert!(
            t.len() > 200,
            "the table should be nearly full: {}",
            t.len()
        );
        let s = t.stats();
        assert_eq!(s.misses, 10_000);
        assert_eq!(s.evictions, 10_000 - t.len() as u64);
    }

    #[test]
    fn a_busy_stream_survives_a_crowd_of_one_shot_files() {
        let mut t = SeqTable::new(SeqTableConfig {
            slots: 251,
            ..SeqTableConfig::default()
        });
        let hot = SeqTable::key_of(b"hot file".as_slice());
        let mut off = 0;
        for f in 0..5_000u64 {
            t.observe(SeqTable::key_of(&f), 0, 4 * KIB);
            if f % 4 == 0 {
                t.observe(hot, off, MIB);
                off += MIB;
            }
        }
        assert_eq!(t.seqcount(hot), Some(127));
    }

    #[test]
    fn remove_forgets_the_key() {
        let mut t = SeqTable::default();
        t.observe(9, 0, MIB);
        assert_eq!(t.len(), 1);
        t.remove(9);
        assert_eq!(t.seqcount(9), None);
        assert!(t.is_empty());
    }

    #[test]
    fn keys_are_stable() {
        // FNV-1a plus finalizer; a change here changes every simulation's replay.
        assert_eq!(
            SeqTable::key_of(b"abc".as_slice()),
            SeqTable::key_of(b"abc".as_slice())
        );
        assert_ne!(
            SeqTable::key_of(b"abc".as_slice()),
            SeqTable::key_of(b"abd".as_slice())
        );
    }

    /// Many files, each either a sequential stream with bounded reordering or random access,
    /// interleaved; checks the invariants and that every stream ends at the cap.
    #[test]
    fn randomized_streams_and_noise() {
        let (_, mut rng) = seeded_rng("seqtable::randomized_streams_and_noise");
        let mut t = SeqTable::new(SeqTableConfig {
            slots: 251,
            ..SeqTableConfig::default()
        });
        let streams = 40u64;
        let mut next_block = vec![0u64; streams as usize];
        let mut pending: Vec<Vec<u64>> = vec![Vec::new(); streams as usize];
        for _ in 0..100_000 {
            if rng.gen_bool(0.3) {
                // Random noise on a random file (some collide with stream keys' runs).
                let f = rng.gen_range(1_000..3_000u64);
                let c = t.observe(
                    SeqTable::key_of(&f),
                    rng.gen_range(0..1 << 30),
                    (4 * KIB) << rng.gen_range(0..8),
                );
                assert!(c <= 127);
            } else {
                let s = rng.gen_range(0..streams) as usize;
                if pending[s].is_empty() {
                    // Issue the next group of up to 16 requests, shuffled.
                    let n = rng.gen_range(1..=16);
                    let mut g: Vec<u64> = (next_block[s]..next_block[s] + n).collect();
                    g.shuffle(&mut rng);
                    next_block[s] += n;
                    pending[s] = g;
                }
                let b = pending[s].pop().expect("non-empty");
                let c = t.observe(SeqTable::key_of(&(s as u64)), b * 64 * KIB, 64 * KIB);
                assert!(c <= 127);
            }
            assert!(t.len() <= 251);
        }
        // Finish each stream with 40 in-order requests: every live stream must reach the cap.
        for s in 0..streams as usize {
            let key = SeqTable::key_of(&(s as u64));
            for b in pending[s].drain(..) {
                t.observe(key, b * 64 * KIB, 64 * KIB);
            }
            let mut c = 0;
            for i in 0..40 {
                c = t.observe(key, (next_block[s] + i) * 64 * KIB, 64 * KIB);
            }
            assert_eq!(c, 127, "stream {s}");
        }
    }
}
