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

use crate::backend::{Caller, FileHandle, FileSystem, FsError, StableHow};
use crate::datapath::{CommitDone, DataPath, ReadDone};
use crate::io::Engine;
use crate::splice::PipePool;
use crate::stats::Stats;
use bytes::Bytes;
use std::sync::Arc;

pub use crate::datapath::WriteDone;

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

/// A synchronous runner of data ops, for [`super::compound::Nfs4::compound`].
pub trait DataOps: Send + Sync {
    fn run(&self, req: DataReq) -> Result<DataDone, FsError>;
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
}
