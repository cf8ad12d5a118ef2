//! READ, WRITE and COMMIT of a COMPOUND through the shared data path (issue 13).
//!
//! The COMPOUND processor ([`super::compound::Eval`]) is a resumable state machine: it runs
//! the metadata ops itself and, at a data op, checks what is v4's to check (the current handle
//! is a regular file of an export the caller may use, the stateid allows the access) and
//! suspends with a [`DataReq`]. Whoever drives it runs that request and hands back the
//! [`DataDone`] (or the status) with `Eval::resume`:
//!
//! ```text
//!   service (async)                       blocking pool                 data path (async)
//!   ───────────────                       ─────────────                 ─────────────────
//!   Nfs4::begin (decode, no copy) ──▶ step: SEQUENCE, PUTFH, …, WRITE's checks
//!                                    ◀── Step::Data(WRITE)
//!   run(DataPath, req) ─────────────────────────────────────────────▶ write-behind / pwritev
//!   Eval::resume(done) ◀──────────────────────────────────────────────────────────┘
//!                                 ──▶ step: GETATTR, … , READ's checks
//!   run(DataPath, req) ─────────────────────────────────────────────▶ splice / uring / chunks
//!   Eval::resume(done); step (inline: no ops left) ─▶ Step::Reply(segments + pipe)
//! ```
//!
//! So every v3 data-path behaviour (splice, RWF_NOWAIT and io_uring reads, the sequential
//! table, write-behind, cache modes, pooled chunks, the write verifier, COMMIT's flush and
//! remembered errors, the statistics) is the same code for v4, and no blocking-pool thread is
//! held while data moves. [`run`] is the service's runner; [`DataOps`] is the synchronous one
//! [`super::compound::Nfs4::compound`] uses (tests, simulations), and [`PoolData`] implements
//! it over the same [`DataPath`] by blocking on each op's future.
//!
//! A READ may come back spliced only when the processor asked for it ([`DataOp::Read`]'s
//! `splice_ok`): the READ is the COMPOUND's last op and the slot will not keep the reply
//! (see the reply cache notes in [`super::compound`]).
//!
//! # Settling write-behind
//! The ops that drop or shorten a file's data meet write-behind as v3's SETATTR, CREATE and
//! REMOVE do, through the same [`DataPath`] calls. Before SETATTR of the size or an OPEN that
//! truncates, the processor suspends with [`Settle::Land`] when write-behind holds writes for
//! the file: the driver lands them ([`DataPath::before_resize`]) and the op then runs, so no
//! held byte is written back past the new size. After a REMOVE of a file with held writes it
//! suspends with [`Settle::Removed`]: if that was the file's last link its held data is dropped
//! ([`DataPath::after_remove`]) instead of written to a file nobody can reach. Only landing is
//! waited for, and at most [`SETTLE_WAIT_MAX`]: a flush slower than that (a stalled disk)
//! answers NFS4ERR_DELAY, handing the wait to the client instead of holding its slot.

use crate::backend::{Caller, FileHandle, FileSystem, FsError, StableHow};
use crate::datapath::{CommitDone, DataPath, ReadDone};
use crate::io::Engine;
use crate::splice::PipePool;
use crate::stats::Stats;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;

pub use crate::datapath::WriteDone;

/// Longest wait for held writes to land before an op that truncates their file (see the
/// module notes); past it the op answers NFS4ERR_DELAY. Landing is a `pwritev` into the page
/// cache, not a disk write: the whole default dirty limit (256 MiB) lands in well under a
/// second on an idle host, so 5 s covers a loaded one, and stays far below the RPC timeout
/// of the Linux client (60 s over TCP), whose slot is held meanwhile.
pub const SETTLE_WAIT_MAX: Duration = Duration::from_secs(5);

/// What write-behind must do for an op of a COMPOUND to go on (see the module notes).
pub enum Settle {
    /// Land every held byte of the file; the op that truncates it runs after.
    Land(FileHandle),
    /// The file lost a name (REMOVE): drop its held data if that was its last link.
    Removed {
        fs: Arc<dyn FileSystem>,
        fh: FileHandle,
    },
}

/// A data op the processor suspended on: what to run, on which file, as whom.
pub struct DataReq {
    pub fs: Arc<dyn FileSystem>,
    pub caller: Caller,
    pub fh: FileHandle,
    pub op: DataOp,
}

/// The op of a [`DataReq`], its arguments as the data path takes them.
#[derive(Debug)]
pub enum DataOp {
    /// `splice_ok`: the data may come back in a pipe (nothing follows it in the reply).
    Read {
        offset: u64,
        count: u32,
        splice_ok: bool,
    },
    /// The payload's chunks: slices of the received record, never copied.
    Write {
        offset: u64,
        data: Vec<Bytes>,
        stable: StableHow,
    },
    Commit {
        offset: u64,
        count: u32,
    },
}

/// What a [`DataReq`] came to when it succeeded.
pub enum DataDone {
    Read(ReadDone),
    Write(WriteDone),
    Commit(CommitDone),
}

/// Runs `req` through the shared data path, on the caller's (async) task. An error is the
/// status alone: v4 results carry no attributes beside it.
pub async fn run(path: DataPath<'_>, req: DataReq) -> Result<DataDone, FsError> {
    let DataReq { fs, caller, fh, op } = req;
    match op {
        DataOp::Read {
            offset,
            count,
            splice_ok,
        } => path
            .read(fs, caller, fh, offset, count, splice_ok)
            .await
            .map(DataDone::Read)
            .map_err(|(e, _)| e),
        DataOp::Write {
            offset,
            data,
            stable,
        } => path
            .write(fs, caller, fh, offset, data, stable)
            .await
            .map(DataDone::Write)
            .map_err(|(e, _)| e),
        DataOp::Commit { offset, count } => path
            .commit(fs, caller, fh, offset, count)
            .await
            .map(DataDone::Commit)
            .map_err(|(e, _)| e),
    }
}

/// Runs a [`Settle`] through the shared data path: whether the held writes landed within
/// `wait_max` (a [`Settle::Removed`] is always done).
pub async fn settle(path: DataPath<'_>, s: Settle, wait_max: Duration) -> bool {
    match s {
        Settle::Land(fh) => tokio::time::timeout(wait_max, path.before_resize(&fh))
            .await
            .is_ok(),
        Settle::Removed { fs, fh } => {
            path.after_remove(fs, fh).await;
            true
        }
    }
}

/// A synchronous runner of data ops, for [`super::compound::Nfs4::compound`].
pub trait DataOps: Send + Sync {
    fn run(&self, req: DataReq) -> Result<DataDone, FsError>;

    /// Runs a [`Settle`] as [`settle`] does. A runner without write-behind (whose files never
    /// have held writes, unless a test holds some behind its back) cannot: false, and the op
    /// answers NFS4ERR_DELAY as it would after a wait that timed out.
    fn settle(&self, s: Settle, wait_max: Duration) -> bool {
        let _ = (s, wait_max);
        false
    }
}

/// [`DataOps`] over the server's [`DataPath`], for a thread outside the runtime `handle`
/// belongs to (or one of its blocking-pool threads): each op's future runs to completion with
/// `Handle::block_on`.
pub struct PoolData {
    pub handle: tokio::runtime::Handle,
    pub io: Arc<Engine>,
    pub stats: Arc<Stats>,
    pub pipes: Arc<PipePool>,
}

impl DataOps for PoolData {
    fn run(&self, req: DataReq) -> Result<DataDone, FsError> {
        let path = DataPath {
            io: &self.io,
            stats: &self.stats,
            pipes: &self.pipes,
        };
        self.handle.block_on(run(path, req))
    }

    fn settle(&self, s: Settle, wait_max: Duration) -> bool {
        let path = DataPath {
            io: &self.io,
            stats: &self.stats,
            pipes: &self.pipes,
        };
        self.handle.block_on(settle(path, s, wait_max))
    }
}
