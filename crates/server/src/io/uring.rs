//! io_uring for small READs that miss the page cache.
//!
//! A small READ of cached data is answered in place with `preadv2(RWF_NOWAIT)` (see
//! `LocalFs::read_nowait`). One that needs the disk used to go to a blocking thread: a futex
//! hand-off there, the thread sleeping in `preadv2` until the disk answers, a wake-up, and a hand-off
//! back, four context switches per 4 KiB READ, with one virtio doorbell per READ on top. Measured
//! on random 4 KiB reads at queue depth 32: context switches were ~30% of the server's CPU and the
//! doorbell writes ~11%, about as much as nfs-ganesha spends per READ.
//!
//! Here the async thread that handled the READ submits a `READV` into pooled chunks to one ring
//! shared by the server and goes on with other requests. For a buffered file the kernel starts
//! the disk read at submission and completes the request from the page-unlock wake-up (async
//! buffered reads, Linux 5.9+), with no kernel worker thread. One reaper task watches the ring's
//! descriptor with the reactor (the ring is pollable: readable while completions wait) and hands
//! each completion to its READ through a oneshot channel.
//!
//! Buffers: a request's chunks, iovecs and open file move into the ring's table until its
//! completion is reaped, so the kernel never writes into memory that was freed or lent again,
//! even when the READ's future is dropped (connection closed). A ring dropped with requests in
//! flight leaks their buffers instead of freeing them.
//!
//! Bounds: at most [`IN_FLIGHT_MAX`] requests; beyond that, or when the ring cannot be set up
//! (old kernel, `kernel.io_uring_disabled`, a seccomp filter), READs take the blocking path.

use super::pool::PooledChunk;
use crate::backend::openfiles::OpenFile;
use io_uring::{opcode, types, IoUring};
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::unix::AsyncFd;
use tokio::sync::{oneshot, Notify};

/// Submission queue entries (the completion queue is twice that).
const RING_ENTRIES: u32 = 256;
/// Requests in flight at most: with the completion queue at 512 it can never overflow.
pub const IN_FLIGHT_MAX: usize = RING_ENTRIES as usize;

/// Whether a small READ should try the page cache (`RWF_NOWAIT`) before the ring. A
/// `preadv2(RWF_NOWAIT)` that misses still starts the disk read (the kernel's readahead runs
/// before it gives up), one doorbell per READ outside any batch; after a run of misses READs go
/// straight to the ring, whose submissions are batched, and the kernel answers one that turns out
/// cached at submission anyway. Every [`PROBE_EVERY`]th READ still tries the cache, so a working set
/// that became cached is noticed. Misses raise a score by one (up to [`SCORE_MAX`]), hits halve it;
/// at [`SCORE_SKIP`] or more the cache is skipped.
#[derive(Debug, Default)]
pub struct CachePredictor {
    score: AtomicU32,
    reads: AtomicU64,
}

pub const SCORE_MAX: u32 = 16;
pub const SCORE_SKIP: u32 = 8;
pub const PROBE_EVERY: u64 = 16;

impl CachePredictor {
    /// Whether to try the page cache first.
    pub fn try_cache(&self) -> bool {
        self.score.load(Ordering::Relaxed) < SCORE_SKIP
            || self
                .reads
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(PROBE_EVERY)
    }

    /// What a try found: all cached (`hit`) or not.
    pub fn record(&self, hit: bool) {
        let _ = self
            .score
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                Some(if hit { s / 2 } else { (s + 1).min(SCORE_MAX) })
            });
    }
}

/// What a READ gets back: the result (bytes read, or the error) and its chunks.
pub type ReadDone = (io::Result<usize>, Vec<PooledChunk>);

/// The server's ring for READs. Cheap to clone.
#[derive(Clone)]
pub struct UringReads {
    inner: Arc<Inner>,
    /// Whether small READs should try the page cache first.
    pub predictor: Arc<CachePredictor>,
}

struct Inner {
    // Declared first so that it is deregistered from the reactor before the ring is closed.
    readiness: AsyncFd<RawFd>,
    table: Mutex<Table>,
    /// Wakes the submitter task; `kick_pending` is set while a wake-up is on its way.
    kick: Notify,
    kick_pending: AtomicBool,
}

struct Table {
    ring: IoUring,
    ops: Vec<Option<Op>>,
    free: Vec<usize>,
    in_flight: usize,
}

/// One request in flight: everything the kernel may still touch, and whom to tell.
struct Op {
    done: oneshot::Sender<ReadDone>,
    bufs: Vec<PooledChunk>,
    _iov: Vec<libc::iovec>,
    _file: Arc<OpenFile>,
}

// SAFETY: the raw iovec pointers in `Op` point into the chunks the same `Op` owns; they are only
// read by the kernel, and the `Op` moves between threads whole, under the table's lock.
unsafe impl Send for Op {}

impl UringReads {
    /// Sets up the ring and starts its reaper on the current runtime. `None` (logged) when the
    /// kernel refuses io_uring: READs then use the blocking path.
    pub fn new() -> Option<UringReads> {
        let ring = match IoUring::builder().build(RING_ENTRIES) {
            Ok(r) => r,
            Err(e) => {
                tracing::info!(error = %e, "io_uring unavailable; uncached READs use blocking threads");
                return None;
            }
        };
        // SAFETY: the descriptor is the ring's, which `Inner` keeps open for longer than this
        // registration (declared after it, so dropped after it).
        let registered = unsafe {
            AsyncFd::register_with_interest(ring.as_raw_fd(), tokio::io::Interest::READABLE)
        };
        let readiness = match registered {
            Ok(fd) => fd,
            Err(e) => {
                tracing::info!(error = %e, "io_uring ring cannot be polled; uncached READs use blocking threads");
                return None;
            }
        };
        let inner = Arc::new(Inner {
            readiness,
            table: Mutex::new(Table {
                ring,
                ops: Vec::new(),
                free: Vec::new(),
                in_flight: 0,
            }),
            kick: Notify::new(),
            kick_pending: AtomicBool::new(false),
        });
        tokio::spawn(reap(inner.clone()));
        tokio::spawn(submitter(inner.clone()));
        Some(UringReads {
            inner,
            predictor: Arc::default(),
        })
    }

    /// Reads from `offset` of `file` into `bufs`, in order. `Err(bufs)`, with nothing submitted,
    /// when the ring is full or refuses the request: use another path.
    pub async fn read(
        &self,
        file: Arc<OpenFile>,
        offset: u64,
        bufs: Vec<PooledChunk>,
    ) -> Result<ReadDone, Vec<PooledChunk>> {
        let rx = self.submit(file, offset, bufs)?;
        match rx.await {
            Ok(done) => Ok(done),
            // The reaper is gone (runtime shutting down): the buffers went with the table.
            Err(_) => Ok((Err(io::Error::other("io_uring reaper stopped")), Vec::new())),
        }
    }

    fn submit(
        &self,
        file: Arc<OpenFile>,
        offset: u64,
        mut bufs: Vec<PooledChunk>,
    ) -> Result<oneshot::Receiver<ReadDone>, Vec<PooledChunk>> {
        let Ok(off) = i64::try_from(offset) else {
            return Err(bufs);
        };
        let iov: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| {
                let s = b.as_mut();
                libc::iovec {
                    iov_base: s.as_mut_ptr().cast(),
                    iov_len: s.len(),
                }
            })
            .collect();
        let Ok(iov_count) = u32::try_from(iov.len()) else {
            return Err(bufs);
        };
        let (tx, rx) = oneshot::channel();
        let mut t = self.inner.table.lock().expect("ring table lock");
        if t.in_flight >= IN_FLIGHT_MAX {
            return Err(bufs);
        }
        let slot = match t.free.pop() {
            Some(i) => i,
            None => {
                t.ops.push(None);
                t.ops.len() - 1
            }
        };
        let entry =
            opcode::Readv::new(types::Fd(file.as_fd().as_raw_fd()), iov.as_ptr(), iov_count)
                .offset(off as u64)
                .build()
                .user_data(slot as u64);
        // SAFETY: the iovecs and the chunks they point into are owned by the table's entry for
        // `slot` until its completion is reaped (or forever, if the ring is dropped first), and
        // the descriptor stays open as long as `file` does.
        if unsafe { t.ring.submission().push(&entry) }.is_err() {
            t.free.push(slot);
            return Err(bufs);
        }
        t.ops[slot] = Some(Op {
            done: tx,
            bufs,
            _iov: iov,
            _file: file,
        });
        t.in_flight += 1;
        drop(t);
        if !self.inner.kick_pending.swap(true, Ordering::AcqRel) {
            self.inner.kick.notify_one();
        }
        Ok(rx)
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.inner.table.lock().expect("ring table lock").in_flight
    }
}

/// Enters the kernel for whatever entries are queued, once per wake-up. The READs decoded from one
/// socket read are queued by tasks that run back to back; letting them all run first (one
/// `yield_now`) puts them into one `io_uring_enter`, which plugs the block layer across the batch:
/// one virtio doorbell for the batch instead of one per READ (10% of the server's CPU on random
/// 4 KiB reads when each READ entered the kernel alone).
async fn submitter(inner: Arc<Inner>) {
    loop {
        inner.kick.notified().await;
        tokio::task::yield_now().await;
        // Cleared before taking the lock: an entry queued after this submission's lock sees it
        // clear and wakes the next one.
        inner.kick_pending.store(false, Ordering::Release);
        submit_queued(&mut inner.table.lock().expect("ring table lock"));
    }
}

fn submit_queued(t: &mut Table) {
    loop {
        match t.ring.submit() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // The entries stay queued and go with the next submission (or the reaper's next
            // pass); their completions are reaped as usual.
            Err(e) => tracing::debug!(error = %e, "io_uring submit failed"),
            Ok(_) => {}
        }
        return;
    }
}

/// Waits for completions and hands each to its READ.
async fn reap(inner: Arc<Inner>) {
    loop {
        let mut guard = match inner.readiness.readable().await {
            Ok(g) => g,
            Err(e) => {
                tracing::error!(error = %e, "io_uring ring not pollable; stopping its reaper");
                return;
            }
        };
        // Clear first, then drain: a completion posted after the drain raises readiness again.
        guard.clear_ready();
        let done: Vec<(Op, i32)> = {
            let mut t = inner.table.lock().expect("ring table lock");
            let cqes: Vec<(u64, i32)> = t
                .ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
            let mut done = Vec::with_capacity(cqes.len());
            for (key, res) in cqes {
                let slot = key as usize;
                if let Some(op) = t.ops.get_mut(slot).and_then(Option::take) {
                    t.free.push(slot);
                    t.in_flight -= 1;
                    done.push((op, res));
                }
            }
            // entries a failed submission left queued
            if !t.ring.submission().is_empty() {
                submit_queued(&mut t);
            }
            done
        };
        for (op, res) in done {
            let r = if res < 0 {
                Err(io::Error::from_raw_os_error(-res))
            } else {
                Ok(res as usize)
            };
            // A READ whose future was dropped no longer listens: its chunks go back to the pool.
            let _ = op.done.send((r, op.bufs));
        }
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        // Requests still in flight may be written by the kernel after the ring's descriptor is
        // closed: leak their buffers rather than free them.
        for op in self.ops.iter_mut().filter_map(Option::take) {
            std::mem::forget(op.bufs);
            std::mem::forget(op._iov);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_misses_skips_the_cache_and_probes_it_now_and_then() {
        let p = CachePredictor::default();
        for _ in 0..SCORE_SKIP - 1 {
            assert!(p.try_cache());
            p.record(false);
        }
        assert!(p.try_cache(), "one miss short of skipping");
        p.record(false);
        let tries: usize = (0..PROBE_EVERY * 4).filter(|_| p.try_cache()).count();
        assert_eq!(tries, 4, "one probe in every {PROBE_EVERY}");
    }

    #[test]
    fn hits_bring_the_cache_back() {
        let p = CachePredictor::default();
        for _ in 0..100 {
            p.record(false);
        }
        assert_eq!(p.score.load(Ordering::Relaxed), SCORE_MAX);
        // a probe that hits halves the score: two hits in a row and the cache is tried again
        p.record(true);
        assert!(p.score.load(Ordering::Relaxed) >= SCORE_SKIP);
        p.record(true);
        assert!(p.score.load(Ordering::Relaxed) < SCORE_SKIP);
        assert!((0..PROBE_EVERY).all(|_| p.try_cache()));
    }

    #[test]
    fn mixed_traffic_settles_by_the_majority() {
        // 3 misses for each hit: the score stays high (skip); the reverse keeps trying the cache
        let p = CachePredictor::default();
        for i in 0..400 {
            p.record(i % 4 == 0);
        }
        assert!(p.score.load(Ordering::Relaxed) >= SCORE_SKIP / 2);
        let q = CachePredictor::default();
        for i in 0..400 {
            q.record(i % 4 != 0);
        }
        assert!(q.score.load(Ordering::Relaxed) < SCORE_SKIP);
    }
}
