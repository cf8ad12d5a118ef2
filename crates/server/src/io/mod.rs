//! The server's I/O engine drivers: the thin, stateful shells around the pure policies of
//! `sluice-engine`, shared by every connection and export of one server.
//!
//! ```text
//!   nfs.rs handlers
//!     READ  ── seq.observe_read ──► backend readahead_hint (fadvise WILLNEED)     [seq]
//!       │   ── large, buffered, TCP: splice file ─► pipe ─► socket     [crate::splice]
//!       │   ── small: preadv2(RWF_NOWAIT) in place; not cached: io_uring READV    [uring]
//!       │   ── else pool.acquire_for ──► preadv into 64 KiB chunks ──► reply iovec [pool]
//!       │   ── wb.flush_range first when held data overlaps                       [writebehind]
//!     WRITE ── seq.observe_write; UNSTABLE: admit ─► check ─► hold ─► reply       [writebehind]
//!     COMMIT ─ wb.flush_range ─► remembered error or fdatasync                    [writebehind]
//!     GETATTR, LOOKUP, ACCESS, READDIRPLUS, ... ── wb.fix_size                    [writebehind]
//! ```
//! | module          | core (pure, `sluice-engine`)    | what the driver adds                    |
//! |-----------------|---------------------------------|-----------------------------------------|
//! | [`seq`]         | `seqtable::SeqTable`            | lock, readahead hints without repeats   |
//! | [`pool`]        | `pool::ChunkPool`               | lock, wait when exhausted, return on drop|
//! | [`writebehind`] | `writebehind::WriteBehind`      | clock, flusher task, visibility, errors |
//! | [`uring`]       | (none: a ring and a table)      | submission, reaper task, buffer custody |
//!
//! # Known gaps
//! * Held data is keyed by file handle bytes: a file reached through two handles (hard links
//!   reported under two parents) is two files for write-behind, so a READ through the other
//!   handle does not see data held under the first until it lands (within `gap_wait`, 30 ms,
//!   or at COMMIT).
//! * A RENAME over a file with held data does not drop it; its flushes fail harmlessly (the
//!   handle is stale) and the error is forgotten with the file.

pub mod pool;
pub mod seq;
pub mod uring;
pub mod writebehind;

use crate::stats::Stats;
use sluice_engine::pool::PoolConfig;
use sluice_engine::seqtable::SeqTableConfig;
use sluice_engine::writebehind::WriteBehindConfig;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// How long a run of held writes waits for its missing neighbours before it is flushed as it
/// is: 250 ms, not the core's 30 ms. A client's window of 16 × 1 MiB WRITEs takes ~130 ms to
/// send at 1 Gbit/s, and when the window arrives fully shuffled (several connections, racing
/// threads) a run's neighbour can arrive a whole window after it; measured on loopback here, one
/// shuffled window spreads over ~40 ms, which 30 ms cuts into 1 MiB pieces. Waiting longer costs
/// nothing on a stream (runs reaching `cluster_bytes` are flushed at once, and COMMIT flushes
/// its range at once); it only lets a trickle of small writes sit in memory a little longer
/// (bounded by `dirty_bytes_limit`; clients resend after a restart, the verifier changes).
pub const GAP_WAIT_DEFAULT: std::time::Duration = std::time::Duration::from_millis(250);

/// Configuration of the server's I/O engine (`ServerConfig::io`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoConfig {
    /// The sequential-access table (READ and WRITE). Default: 1021 slots, FreeBSD's numbers.
    pub seq: SeqTableConfig,
    /// Largest server readahead for a fully sequential reader. Default 8 MiB: eight 1 MiB READs,
    /// about the depth of a Linux client's pipeline, so a client with one READ in flight finds
    /// the next ones in the page cache; more only pins page cache.
    pub readahead_bytes_max: u64,
    /// READ buffers. Default 4096 chunks of 64 KiB (256 MiB).
    pub pool: PoolConfig,
    /// How long a READ waits for a chunk before NFS3ERR_JUKEBOX. Default 5 s.
    pub pool_wait: pool::PoolWait,
    /// Hold UNSTABLE WRITEs and flush them in clusters. Default true; false writes each WRITE
    /// through to the backend before replying, as a server without write-behind does.
    pub write_behind_enabled: bool,
    /// The write-behind policy. `write_behind.clustering = false` still acknowledges from
    /// memory but flushes each WRITE alone as it arrives (the benchmark baseline). Default: the
    /// core's defaults except `gap_wait` = [`GAP_WAIT_DEFAULT`].
    pub write_behind: WriteBehindConfig,
    /// Small READs that miss the page cache go to the disk through io_uring ([`uring`]) instead
    /// of a blocking thread. Default true; without io_uring in the kernel it is off by itself.
    pub uring_reads: bool,
}

impl Default for IoConfig {
    fn default() -> Self {
        IoConfig {
            seq: SeqTableConfig::default(),
            readahead_bytes_max: 8 << 20,
            pool: PoolConfig::default(),
            pool_wait: pool::PoolWait::default(),
            write_behind_enabled: true,
            write_behind: WriteBehindConfig {
                gap_wait: GAP_WAIT_DEFAULT,
                ..WriteBehindConfig::default()
            },
            uring_reads: true,
        }
    }
}

/// Where the engine's time and blocking work come from: the two seams a deterministic
/// simulator needs, and nothing else. Production uses the defaults (the system clock, tokio's
/// blocking pool, the write-behind flusher as a task); `sluice-sim` drives the same code from
/// its single-threaded virtual-time loop with a [`Clock::Manual`] and [`Blocking::Inline`], and
/// calls [`writebehind::WriteBehindDriver::flush_due`] itself instead of running the flusher task.
#[derive(Clone, Default)]
pub struct Hooks {
    pub clock: Clock,
    pub blocking: Blocking,
}

/// The clock write-behind reads (arrival times, gap waits, deadlines).
#[derive(Clone, Default)]
pub enum Clock {
    /// `Instant::now()`.
    #[default]
    System,
    /// A time the owner sets ([`ManualClock::set`]): a simulator's virtual now.
    Manual(Arc<ManualClock>),
}

impl Clock {
    pub fn now(&self) -> Instant {
        match self {
            Clock::System => Instant::now(),
            Clock::Manual(m) => m.now(),
        }
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock(Mutex<Instant>);

impl ManualClock {
    pub fn new(now: Instant) -> Arc<ManualClock> {
        Arc::new(ManualClock(Mutex::new(now)))
    }

    pub fn now(&self) -> Instant {
        *self.0.lock().expect("clock lock")
    }

    /// Moves the clock to `now` (never backwards: a monotonic clock is what readers assume).
    pub fn set(&self, now: Instant) {
        let mut t = self.0.lock().expect("clock lock");
        *t = (*t).max(now);
    }
}

/// Where blocking backend work runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Blocking {
    /// tokio's blocking pool (`spawn_blocking`): backend calls are syscalls that may sleep.
    #[default]
    Pool,
    /// On the caller, at once: for a backend that never blocks (the in-memory one) driven
    /// without a runtime. Also turns io_uring off (its reaper is a task).
    Inline,
}

impl Hooks {
    /// Runs blocking backend work as [`Hooks::blocking`] says; `None` if it panicked on the
    /// pool (logged). Inline work that panics unwinds into the caller.
    pub async fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        match self.blocking {
            Blocking::Pool => spawn(f).await,
            Blocking::Inline => Some(f()),
        }
    }
}

/// `f` on the blocking pool; `None` if it panicked (logged).
pub async fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::error!("NFS handler failed: {e}");
            None
        }
    }
}

/// The engine of one server.
pub struct Engine {
    pub config: IoConfig,
    /// Clock and blocking-work policy ([`Hooks`]); the defaults in production.
    pub hooks: Hooks,
    pub seq: seq::Sequential,
    pub pool: Arc<pool::BufPool>,
    pub wb: Arc<writebehind::WriteBehindDriver>,
    /// The ring for uncached small READs; `None` when off or unavailable.
    pub uring: Option<uring::UringReads>,
}

impl Engine {
    /// # Panics
    /// On a configuration the cores refuse (zero sizes), or a pool that could not hold one
    /// READ of `read_bytes_max` (it would wait forever).
    pub fn new(config: IoConfig, read_bytes_max: u32, stats: Arc<Stats>) -> Arc<Engine> {
        Engine::with_hooks(config, read_bytes_max, stats, Hooks::default())
    }

    /// [`Engine::new`] with a clock and blocking policy of the caller's (a simulator's).
    ///
    /// # Panics
    /// As [`Engine::new`].
    pub fn with_hooks(
        config: IoConfig,
        read_bytes_max: u32,
        stats: Arc<Stats>,
        hooks: Hooks,
    ) -> Arc<Engine> {
        assert!(
            config.pool.chunks_max * config.pool.chunk_bytes >= read_bytes_max as usize,
            "the chunk pool must hold at least one READ of rtmax bytes"
        );
        Arc::new(Engine {
            seq: seq::Sequential::new(
                config.seq.clone(),
                config.readahead_bytes_max,
                stats.clone(),
            ),
            pool: pool::BufPool::new(config.pool.clone(), config.pool_wait, stats.clone()),
            wb: writebehind::WriteBehindDriver::with_hooks(
                config.write_behind.clone(),
                stats,
                hooks.clone(),
            ),
            // the ring's reaper runs on the runtime: none outside one (some unit tests)
            uring: if config.uring_reads
                && hooks.blocking == Blocking::Pool
                && tokio::runtime::Handle::try_current().is_ok()
            {
                uring::UringReads::new()
            } else {
                None
            },
            config,
            hooks,
        })
    }

    /// Blocking backend work, as the engine's [`Hooks`] say.
    pub async fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        self.hooks.spawn(f).await
    }
}
