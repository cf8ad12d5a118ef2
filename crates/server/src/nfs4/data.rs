//! READ, WRITE and COMMIT of a COMPOUND through the shared data path (issue 13).
//!
//! The COMPOUND processor is synchronous and runs on the blocking pool; the data path
//! ([`DataPath`]) is async. The processor therefore calls its data ops through [`DataOps`],
//! and the service hands it [`PoolData`], which drives each op's future to completion on the
//! blocking thread the processor already holds (`Handle::block_on`, which tokio allows on a
//! blocking-pool thread). Every v3 data-path behaviour (write-behind, read-your-held-writes,
//! the write verifier, COMMIT's flush and remembered errors, readahead) is thus the same code
//! for v4, not a copy. READ never splices here: its data is not known to be the last thing in
//! the reply, so it comes back as pooled chunks.
//!
//! The cost of this shape: a data op holds a blocking-pool thread while it waits (as the
//! processor's own file-system calls do). Splitting the COMPOUND loop so the async driver runs
//! data ops itself is the later step that removes it and allows a spliced last READ.

use crate::backend::{Caller, FileHandle, FileSystem, FsError, StableHow};
use crate::datapath::{CommitDone, DataPath, ReadDone};
use crate::io::Engine;
use crate::splice::PipePool;
use crate::stats::Stats;
use bytes::Bytes;
use std::sync::Arc;

pub use crate::datapath::WriteDone;

/// The data ops a COMPOUND's READ, WRITE and COMMIT run, called from the processor's thread.
/// An error is the status alone: v4 results carry no attributes beside it.
pub trait DataOps: Send + Sync {
    fn read(
        &self,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        fh: FileHandle,
        offset: u64,
        count: u32,
    ) -> Result<ReadDone, FsError>;
    fn write(
        &self,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        fh: FileHandle,
        offset: u64,
        data: Vec<Bytes>,
        stable: StableHow,
    ) -> Result<WriteDone, FsError>;
    fn commit(
        &self,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        fh: FileHandle,
        offset: u64,
        count: u32,
    ) -> Result<CommitDone, FsError>;
}

/// [`DataOps`] over the server's [`DataPath`], for a processor running on a blocking-pool
/// thread of the runtime `handle` belongs to.
pub struct PoolData {
    pub handle: tokio::runtime::Handle,
    pub io: Arc<Engine>,
    pub stats: Arc<Stats>,
    pub pipes: Arc<PipePool>,
}

impl PoolData {
    fn path(&self) -> DataPath<'_> {
        DataPath {
            io: &self.io,
            stats: &self.stats,
            pipes: &self.pipes,
        }
    }
}

impl DataOps for PoolData {
    fn read(
        &self,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        fh: FileHandle,
        offset: u64,
        count: u32,
    ) -> Result<ReadDone, FsError> {
        self.handle
            .block_on(self.path().read(fs, caller, fh, offset, count, false))
            .map_err(|(e, _)| e)
    }

    fn write(
        &self,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        fh: FileHandle,
        offset: u64,
        data: Vec<Bytes>,
        stable: StableHow,
    ) -> Result<WriteDone, FsError> {
        self.handle
            .block_on(self.path().write(fs, caller, fh, offset, data, stable))
            .map_err(|(e, _)| e)
    }

    fn commit(
        &self,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        fh: FileHandle,
        offset: u64,
        count: u32,
    ) -> Result<CommitDone, FsError> {
        self.handle
            .block_on(self.path().commit(fs, caller, fh, offset, count))
            .map_err(|(e, _)| e)
    }
}
