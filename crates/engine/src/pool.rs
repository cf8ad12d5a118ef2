//! Chunk pool: fixed-size buffers, a bounded number of them, counted.
//!
//! # Why chunks
//! Every byte of READ and WRITE payload lives in a chunk of `chunk_bytes` (64 KiB): the record
//! decoder receives into them, a WRITE's payload is a list of chunk slices handed to write-behind,
//! a READ reply is an iovec of chunks (STYLE.md habit 7: no large contiguous buffers, no allocation
//! on the hot path). One size for all makes reuse trivial and fragmentation impossible.
//!
//! 64 KiB: large enough that a 1 MiB READ is 16 iovec entries (well under `IOV_MAX` = 1024) and
//! per-chunk bookkeeping is negligible; small enough that a 4 KiB request wastes at most one
//! partly used chunk, and that 4096 of them are only 256 MiB.
//!
//! # Why a bound
//! The count is the server's (or client's) bound on payload memory: `chunks_max × chunk_bytes`.
//! When it is reached, [`ChunkAccounting::try_acquire`] says no and the caller applies
//! backpressure (stops reading a socket) instead of growing. Acquisition of several chunks is
//! all-or-nothing, so two half-served requests cannot deadlock each other holding half the pool.
//!
//! ```text
//!   chunks_max ─────────────────────────────── refused beyond here
//!   high water ──────────────╮   ╭──────
//!   in use        ╭──────────╯   │
//!            ─────╯              ╰── released
//! ```
//!
//! # Two layers
//! [`ChunkAccounting`] is the pure count (usable wherever the buffers live elsewhere, and by the
//! simulator). [`ChunkPool`] adds the buffers themselves: `BytesMut`s of `chunk_bytes` capacity,
//! kept on a free list on release and handed out again, so steady-state I/O allocates nothing.
//! It is still pure: it only touches memory.

use bytes::BytesMut;

/// The one chunk size of the data path, bytes: pool chunks, READ reply chunks, socket receive
/// buffers and encoder segments are all this size or smaller (see the essay above for why
/// 64 KiB). Code that depends on the number asserts it at compile time
/// (`const _: () = assert!(...)`) against this constant instead of repeating it, so changing it
/// here breaks the build rather than silently breaking the bound on contiguous allocations.
pub const CHUNK_BYTES: usize = 64 * 1024;

/// Configuration of a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Bytes per chunk. Default [`CHUNK_BYTES`] (64 KiB).
    pub chunk_bytes: usize,
    /// Chunks that may be in use at once. Default 4096 (256 MiB of 64 KiB chunks).
    pub chunks_max: usize,
    /// Released buffers kept for reuse; the rest are freed. Default 1024 (64 MiB idle at most).
    pub free_chunks_kept_max: usize,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            chunk_bytes: CHUNK_BYTES,
            chunks_max: 4096,
            free_chunks_kept_max: 1024,
        }
    }
}

/// Counters since creation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Chunks handed out.
    pub acquired: u64,
    /// Chunks given back.
    pub released: u64,
    /// Acquisitions refused (the pool was full): each is a backpressure event.
    pub refused: u64,
    /// Buffers newly allocated (as opposed to reused) by a [`ChunkPool`].
    pub allocated: u64,
}

/// The pure count of chunks in use. See the module essay.
#[derive(Debug, Clone)]
pub struct ChunkAccounting {
    config: PoolConfig,
    in_use: usize,
    high_water: usize,
    stats: PoolStats,
}

impl ChunkAccounting {
    /// An empty pool.
    ///
    /// # Panics
    /// On a zero `chunk_bytes` or `chunks_max`.
    pub fn new(config: PoolConfig) -> Self {
        assert!(config.chunk_bytes > 0 && config.chunks_max > 0);
        ChunkAccounting {
            config,
            in_use: 0,
            high_water: 0,
            stats: PoolStats::default(),
        }
    }

    /// Chunks needed to hold `bytes` (at least one for a non-empty payload).
    pub fn chunks_for(&self, bytes: usize) -> usize {
        bytes.div_ceil(self.config.chunk_bytes)
    }

    /// Takes `n` chunks, all or nothing. False if fewer than `n` are free.
    pub fn try_acquire(&mut self, n: usize) -> bool {
        if n > self.available() {
            self.stats.refused += 1;
            return false;
        }
        self.in_use += n;
        self.high_water = self.high_water.max(self.in_use);
        self.stats.acquired += n as u64;
        true
    }

    /// Takes one chunk.
    pub fn acquire(&mut self) -> bool {
        self.try_acquire(1)
    }

    /// Gives back `n` chunks.
    ///
    /// # Panics
    /// If more are released than are in use (a double release: our bug).
    pub fn release(&mut self, n: usize) {
        assert!(
            n <= self.in_use,
            "released {n} chunks with {} in use",
            self.in_use
        );
        self.in_use -= n;
        self.stats.released += n as u64;
    }

    /// Chunks in use.
    pub fn in_use(&self) -> usize {
        self.in_use
    }

    /// Chunks that may still be acquired.
    pub fn available(&self) -> usize {
        self.config.chunks_max - self.in_use
    }

    /// Bytes in use (`in_use × chunk_bytes`).
    pub fn in_use_bytes(&self) -> u64 {
        (self.in_use * self.config.chunk_bytes) as u64
    }

    /// The most chunks ever in use at once.
    pub fn high_water(&self) -> usize {
        self.high_water
    }

    /// Counters.
    pub fn stats(&self) -> &PoolStats {
        &self.stats
    }

    /// The configuration.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }
}

/// Chunk accounting plus the buffers: a free list of `BytesMut` of `chunk_bytes` capacity.
#[derive(Debug)]
pub struct ChunkPool {
    accounting: ChunkAccounting,
    free: Vec<BytesMut>,
}

impl ChunkPool {
    /// An empty pool; buffers are allocated on first use.
    pub fn new(config: PoolConfig) -> Self {
        ChunkPool {
            accounting: ChunkAccounting::new(config),
            free: Vec::new(),
        }
    }

    /// One empty buffer with `chunk_bytes` of capacity, or `None` if the pool is exhausted.
    pub fn acquire(&mut self) -> Option<BytesMut> {
        if !self.accounting.acquire() {
            return None;
        }
        let mut buf = self.take_buffer();
        buf.clear();
        Some(buf)
    }

    /// Buffers enough for `bytes`, all or nothing. A reused buffer keeps the length and the
    /// bytes of its last use (a new one is empty): a caller that reads into the buffers sets
    /// the length it needs, which costs nothing when the buffer already has it, and must pass
    /// on only the bytes it filled. Zeroing every chunk on every lend was measured at 12% of a
    /// server's CPU on READs that cannot splice (RPC-with-TLS).
    pub fn acquire_for(&mut self, bytes: usize) -> Option<Vec<BytesMut>> {
        let n = self.accounting.chunks_for(bytes);
        if !self.accounting.try_acquire(n) {
            return None;
        }
        Some((0..n).map(|_| self.take_buffer()).collect())
    }

    /// Gives a buffer back. A buffer that lost capacity (split off or frozen elsewhere) is
    /// counted as released but not kept for reuse.
    pub fn release(&mut self, mut buf: BytesMut) {
        self.accounting.release(1);
        let c = &self.accounting.config;
        if buf.capacity() >= c.chunk_bytes && self.free.len() < c.free_chunks_kept_max {
            // Longer than a chunk (grown by its user): cut to one, so a lend never exceeds it.
            buf.truncate(c.chunk_bytes);
            self.free.push(buf);
        }
    }

    /// Buffers kept for reuse.
    pub fn free_buffers(&self) -> usize {
        self.free.len()
    }

    /// The counts.
    pub fn accounting(&self) -> &ChunkAccounting {
        &self.accounting
    }

    fn take_buffer(&mut self) -> BytesMut {
        self.free.pop().unwrap_or_else(|| {
            self.accounting.stats.allocated += 1;
            BytesMut::with_capacity(self.accounting.config.chunk_bytes)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::seeded_rng;
    use bytes::BufMut;
    use rand::Rng;

    fn small() -> PoolConfig {
        PoolConfig {
            chunk_bytes: 1024,
            chunks_max: 8,
            free_chunks_kept_max: 4,
        }
    }

    #[test]
    fn the_count_is_bounded_and_the_high_water_remembered() {
        let mut a = ChunkAccounting::new(small());
        for _ in 0..8 {
            assert!(a.acquire());
        }
        assert!(!a.acquire());
        assert_eq!(a.stats().refused, 1);
        a.release(5);
        assert_eq!(a.in_use(), 3);
        assert_eq!(a.high_water(), 8);
        assert_eq!(a.in_use_bytes(), 3 * 1024);
    }

    #[test]
    fn acquisition_is_all_or_nothing() {
        let mut a = ChunkAccounting::new(small());
        assert!(a.try_acquire(6));
        assert!(!a.try_acquire(3));
        assert_eq!(a.in_use(), 6);
        assert!(a.try_acquire(2));
    }

    #[test]
    fn chunks_for_rounds_up() {
        let a = ChunkAccounting::new(small());
        assert_eq!(a.chunks_for(0), 0);
        assert_eq!(a.chunks_for(1), 1);
        assert_eq!(a.chunks_for(1024), 1);
        assert_eq!(a.chunks_for(1025), 2);
    }

    #[test]
    #[should_panic(expected = "released")]
    fn a_double_release_is_caught() {
        let mut a = ChunkAccounting::new(small());
        a.acquire();
        a.release(2);
    }

    #[test]
    fn buffers_are_reused() {
        let mut p = ChunkPool::new(small());
        let mut b = p.acquire().unwrap();
        b.put_slice(b"hello");
        let ptr = b.as_ptr();
        p.release(b);
        let b = p.acquire().unwrap();
        assert_eq!(b.as_ptr(), ptr);
        assert!(b.is_empty());
        assert!(b.capacity() >= 1024);
        assert_eq!(p.accounting().stats().allocated, 1);
    }

    #[test]
    fn acquire_for_hands_back_a_reused_buffer_as_it_was_left() {
        let mut p = ChunkPool::new(small());
        let mut b = p.acquire_for(1024).unwrap().remove(0);
        assert!(b.is_empty(), "a new buffer is empty");
        b.resize(1024, 7);
        p.release(b);
        let b = p.acquire_for(1024).unwrap().remove(0);
        assert_eq!(b.len(), 1024, "length kept: no zeroing for the next reader");
        assert!(b.iter().all(|&x| x == 7));
    }

    #[test]
    fn the_free_list_is_bounded_and_shrunk_buffers_dropped() {
        let mut p = ChunkPool::new(small());
        let bufs = p.acquire_for(8 * 1024).unwrap();
        assert_eq!(bufs.len(), 8);
        assert!(p.acquire().is_none());
        for b in bufs {
            p.release(b);
        }
        assert_eq!(p.free_buffers(), 4);
        let mut b = p.acquire().unwrap();
        b.resize(1024, 0);
        let _tail = b.split_off(512); // b keeps only 512 bytes of capacity
        p.release(b);
        assert_eq!(p.free_buffers(), 3);
        assert_eq!(p.accounting().in_use(), 0);
    }

    #[test]
    fn randomized_acquire_release_matches_a_model() {
        let (_, mut rng) = seeded_rng("pool::randomized_acquire_release_matches_a_model");
        let config = PoolConfig {
            chunk_bytes: 4096,
            chunks_max: 64,
            free_chunks_kept_max: 16,
        };
        let mut p = ChunkPool::new(config);
        let mut held: Vec<BytesMut> = Vec::new();
        let mut high = 0;
        for _ in 0..20_000 {
            if rng.gen_bool(0.5) {
                let bytes: usize = rng.gen_range(1..20 * 4096);
                let n = bytes.div_ceil(4096);
                match p.acquire_for(bytes) {
                    Some(v) => {
                        assert_eq!(v.len(), n);
                        held.extend(v);
                    }
                    None => assert!(held.len() + n > 64),
                }
            } else if !held.is_empty() {
                let k = rng.gen_range(1..=held.len());
                for _ in 0..k {
                    let i = rng.gen_range(0..held.len());
                    p.release(held.swap_remove(i));
                }
            }
            high = high.max(held.len());
            assert_eq!(p.accounting().in_use(), held.len());
            assert!(p.free_buffers() <= 16);
        }
        assert_eq!(p.accounting().high_water(), high);
    }
}
