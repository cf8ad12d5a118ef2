//! READ buffers: a bounded pool of 64 KiB chunks that come back when the reply has been sent.
//!
//! ```text
//!   READ (blocking pool)                         connection writer task (async)
//!   acquire_for(count) ── all or nothing ──┐
//!        │  wait while exhausted (bounded) │
//!   preadv into the chunks                 │
//!   Bytes::from_owner(PooledChunk) ──► reply iovec ──► writev ──► segments dropped
//!                                                                    │
//!   ChunkPool::release ◄── PooledChunk::drop ◄───────────────────────┘
//! ```
//! The accounting and the free list are the pure [`sluice_engine::pool::ChunkPool`]; this module
//! only adds the lock, the wait and the `Drop` that returns a chunk. A reply's `Bytes` own their
//! chunk through [`Bytes::from_owner`], so the chunk returns to the pool exactly when the last
//! reference to it is gone: after `writev` for TCP, after the copy into the datagram for UDP.
//!
//! # When the pool is exhausted
//! The READ waits (on the blocking thread that serves it) for other replies to be sent, up to
//! [`PoolWait::wait_max`]; then it is answered NFS3ERR_JUKEBOX ("try again later", RFC 1813
//! §2.6), which every client retries after a delay. We never allocate past the bound: the bound
//! is the server's whole memory budget for READ payloads (`chunks_max × 64 KiB`, 256 MiB by
//! default), and chunks are only held by replies on their way out, so the wait ends as soon as
//! sockets drain. Only a client that stops reading its socket holds chunks for long (at most its
//! connection's calls in flight × 16 chunks); JUKEBOX keeps that from stalling everyone forever.

use bytes::{Bytes, BytesMut};
use sluice_engine::pool::{ChunkPool, PoolConfig, CHUNK_BYTES};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::stats::EngineStats;

// The chunk size is the pool's (`sluice_engine::pool::CHUNK_BYTES`). What depends on it:
// * the receive path's socket buffers are WRITE payload segments, which write-behind holds and
//   `pwritev` writes as pieces: no larger than a chunk, so no contiguous allocation on the data
//   path exceeds one (the bound `tests/alloc_data_path.rs` checks);
//   (asserted in `net.rs`, which owns those buffers);
// * the reply encoder cuts its staging buffer into segments of at most this size;
const _: () = assert!(sluice_xdr::Writer::SEGMENT_BYTES <= CHUNK_BYTES);
// * a 1 MiB READ (the largest the server offers by default) fits one reply iovec with room to
//   spare: 16 chunks, far below IOV_MAX (1024).
const _: () =
    assert!((crate::backend::IO_BYTES_MAX_DEFAULT as usize).div_ceil(CHUNK_BYTES) <= 1024 / 4);

/// How long a READ waits for chunks before it is answered NFS3ERR_JUKEBOX.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolWait {
    /// Default 5 s: far longer than sending a 1 MiB reply takes on any working link, far shorter
    /// than a client's RPC timeout (60 s for TCP mounts), so a retry still has time.
    pub wait_max: Duration,
}

impl Default for PoolWait {
    fn default() -> Self {
        PoolWait {
            wait_max: Duration::from_secs(5),
        }
    }
}

/// The server's pool of READ chunks.
pub struct BufPool {
    inner: Mutex<ChunkPool>,
    freed: Condvar,
    chunk_bytes: usize,
    wait: PoolWait,
    stats: Arc<crate::stats::Stats>,
}

impl BufPool {
    pub fn new(config: PoolConfig, wait: PoolWait, stats: Arc<crate::stats::Stats>) -> Arc<Self> {
        Arc::new(BufPool {
            chunk_bytes: config.chunk_bytes,
            inner: Mutex::new(ChunkPool::new(config)),
            freed: Condvar::new(),
            wait,
            stats,
        })
    }

    /// Bytes per chunk.
    pub fn chunk_bytes(&self) -> usize {
        self.chunk_bytes
    }

    /// Chunks for `bytes`, each as long as its share of `bytes` (the last one may be shorter),
    /// all or nothing. A reused chunk still holds bytes of its last use (zeroing each one was
    /// 12% of the server's CPU on READs over RPC-with-TLS): the reader fills it and a reply
    /// passes on only the bytes the read returned ([`PooledChunk::into_bytes`]'s `len`). Blocks while the pool is exhausted, at most `wait_max`; `None`
    /// then. Call from a blocking thread.
    pub fn acquire_for(self: &Arc<Self>, bytes: usize) -> Option<Vec<PooledChunk>> {
        let deadline = Instant::now() + self.wait.wait_max;
        let mut pool = self.inner.lock().expect("pool lock");
        let bufs = loop {
            if let Some(bufs) = pool.acquire_for(bytes) {
                break bufs;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            pool = self.freed.wait_timeout(pool, left).expect("pool lock").0;
        };
        publish(&self.stats.engine, &pool);
        drop(pool);
        Some(self.lend(bufs, bytes))
    }

    /// [`BufPool::acquire_for`] without waiting: `None` at once while the pool is exhausted.
    /// Safe to call from async code.
    pub fn try_acquire_for(self: &Arc<Self>, bytes: usize) -> Option<Vec<PooledChunk>> {
        let mut pool = self.inner.lock().expect("pool lock");
        let bufs = pool.acquire_for(bytes)?;
        publish(&self.stats.engine, &pool);
        drop(pool);
        Some(self.lend(bufs, bytes))
    }

    /// Wraps chunks taken from the core for `bytes`, each sized to its share.
    fn lend(self: &Arc<Self>, bufs: Vec<BytesMut>, bytes: usize) -> Vec<PooledChunk> {
        let mut left = bytes;
        bufs.into_iter()
            .map(|mut buf| {
                let n = left.min(self.chunk_bytes);
                left -= n;
                // A no-op for a reused chunk already that long; zeros only a new one's bytes.
                buf.resize(n, 0);
                PooledChunk {
                    buf,
                    pool: self.clone(),
                }
            })
            .collect()
    }

    /// Chunks lent out now.
    pub fn in_use(&self) -> usize {
        self.inner.lock().expect("pool lock").accounting().in_use()
    }

    fn release(&self, buf: BytesMut) {
        let mut pool = self.inner.lock().expect("pool lock");
        pool.release(buf);
        publish(&self.stats.engine, &pool);
        drop(pool);
        self.freed.notify_all();
    }
}

fn publish(e: &EngineStats, pool: &ChunkPool) {
    let a = pool.accounting();
    e.pool_chunks_in_use.store(a.in_use() as u64, Relaxed);
    e.pool_chunks_high_water
        .store(a.high_water() as u64, Relaxed);
}

/// One chunk lent by a [`BufPool`]; returns to it when dropped. Fill it through `AsMut`, then
/// [`PooledChunk::into_bytes`] to hand it to a reply without a copy.
pub struct PooledChunk {
    buf: BytesMut,
    pool: Arc<BufPool>,
}

impl PooledChunk {
    /// The first `len` bytes as `Bytes` that own the chunk: the chunk goes back to the pool when
    /// the last clone of them is dropped.
    pub fn into_bytes(self, len: usize) -> Bytes {
        debug_assert!(len <= self.buf.len());
        Bytes::from_owner(self).slice(..len)
    }
}

impl AsRef<[u8]> for PooledChunk {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl AsMut<[u8]> for PooledChunk {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

impl Drop for PooledChunk {
    fn drop(&mut self) {
        self.pool.release(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(chunks_max: usize, wait_ms: u64) -> Arc<BufPool> {
        BufPool::new(
            PoolConfig {
                chunk_bytes: 1024,
                chunks_max,
                free_chunks_kept_max: 4,
            },
            PoolWait {
                wait_max: Duration::from_millis(wait_ms),
            },
            Arc::default(),
        )
    }

    #[test]
    fn a_chunk_returns_when_the_last_bytes_clone_is_dropped() {
        let p = pool(4, 0);
        let mut chunks = p.acquire_for(1500).unwrap();
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[1].as_ref().len(), 476);
        chunks[0].as_mut()[..3].copy_from_slice(b"abc");
        let b = chunks.remove(0).into_bytes(3);
        drop(chunks);
        assert_eq!(&b[..], b"abc");
        let clone = b.slice(1..);
        assert_eq!(p.in_use(), 1);
        drop(b);
        assert_eq!(p.in_use(), 1, "a clone still holds the chunk");
        drop(clone);
        assert_eq!(p.in_use(), 0);
        assert_eq!(
            p.stats.engine.pool_chunks_high_water.load(Relaxed),
            2,
            "high water published"
        );
    }

    #[test]
    fn an_exhausted_pool_waits_then_gives_up() {
        let p = pool(2, 50);
        let held = p.acquire_for(2048).unwrap();
        let t = Instant::now();
        assert!(p.acquire_for(1).is_none());
        assert!(t.elapsed() >= Duration::from_millis(50));
        // A release wakes a waiter.
        let p2 = p.clone();
        let waiter = std::thread::spawn(move || p2.acquire_for(1024).map(|v| v.len()));
        std::thread::sleep(Duration::from_millis(10));
        drop(held);
        assert_eq!(waiter.join().unwrap(), Some(1));
    }
}
