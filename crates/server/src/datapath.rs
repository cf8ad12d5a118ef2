//! The one server data path: READ, WRITE and COMMIT for every protocol version.
//!
//! A version's handler decodes its arguments, checks what is its own to check (v3: a `count`
//! larger than the payload, an unknown `stable_how`), and calls [`DataPath::read`],
//! [`DataPath::write`] or [`DataPath::commit`] with a [`FileHandle`], the caller and plain
//! numbers. The answer is neutral ([`ReadDone`], [`WriteDone`], [`CommitDone`], or an
//! [`FsError`] with the attributes a failure reply carries); the handler encodes it. NFSv3's
//! READ/WRITE/COMMIT call these today; NFSv4's OP_READ/OP_WRITE/OP_COMMIT are to call the same.
//!
//! ```text
//!   v3 handler ─┐                         ┌─ splice (pipe → socket)         READ, TCP, ≥ 32 KiB
//!   v4 op ──────┼─► DataPath::read ───────┼─ RWF_NOWAIT in place            small, cached
//!               │                         ├─ io_uring READV                 small, not cached
//!               │                         └─ blocking preadv into chunks    otherwise
//!               ├─► DataPath::write ──────┬─ write-behind: admit, check, hold   UNSTABLE
//!               │                         └─ flush held overlap, pwritev        DATA/FILE_SYNC
//!               └─► DataPath::commit ─────── flush held overlap, report a failed flush, fdatasync
//! ```
//!
//! # The ways a READ goes
//! * **Buffered export, TCP, ≥ 32 KiB:** the file's page-cache pages are spliced into a pipe on a
//!   blocking thread, and the connection's writer sends the RPC header (`sendmsg`, MSG_MORE),
//!   then splices the pipe into the socket: the server never copies the data (knfsd's splice
//!   read, from user space). `--no-splice` turns it off.
//! * **Small and cached:** read in place on the async thread with `preadv2(RWF_NOWAIT)` into a
//!   pooled chunk ([`sluice_engine::pool::CHUNK_BYTES`], 64 KiB).
//! * **Small, not cached:** the same thread submits a `READV` into the chunk to one io_uring
//!   shared by the server; the kernel starts the disk read at once and completes it from the page
//!   wake-up, and a reaper task on the reactor hands the completion back. No blocking thread, no
//!   hand-offs: random 4 KiB reads from disk took 5.8 s of server CPU per GiB against ~10 s
//!   through blocking threads (`bench/results/server-vs-ganesha-2026-11-21-cubic.md`).
//!   `--no-uring` (or a kernel without io_uring) uses blocking threads.
//! * **Otherwise** (UDP, dontcache and direct exports, no pipe free): `preadv2` into pooled
//!   chunks sent as an iovec; nothing allocates more than a chunk.
//!
//! Each way reads the data its own way and ends in the same code (`finish_read`): readahead
//! started, bytes counted, attributes fixed for held writes, `eof` only with no held data beyond.
//!
//! **A spliced payload is the last thing in its reply.** The pipe's bytes are sent after
//! everything the handler encoded, so a caller passes `splice_ok = true` only when nothing
//! follows the READ's data: a v3 READ reply over TCP, or an NFSv4 COMPOUND whose last op is this
//! OP_READ. With `false` the data comes back as chunks ([`ReadData::Chunks`]).
//!
//! # WRITE
//! The payload stays in the receive path's 64 KiB segments. UNSTABLE WRITEs are held by
//! write-behind ([`crate::io::writebehind`]) once the caller's permission is checked (the file
//! system's WRITE path with no data), and flushed by `pwritev` in clusters of up to 8 MiB, each
//! cluster's disk write started at once (`sync_file_range` WRITE, no wait) so COMMIT's
//! `fdatasync` finds it mostly done; replies queued on a connection go out together in one
//! `writev`. DATA_SYNC and FILE_SYNC WRITEs (and every WRITE when write-behind is off) first
//! land any held data they overlap, then go through as they are.
//!
//! With `--io-write direct` the clusters go to the disk with O_DIRECT from aligned 64 KiB bounce
//! buffers (buffered only for a misaligned head and tail), so the server skips the kernel's copy
//! of every written byte into the page cache, most of a buffered WRITE's CPU. READs stay buffered
//! (spliced); a direct write invalidates the cached pages of its range.
//!
//! # Visibility of held data
//! Held bytes are not in the file yet, so every attribute that leaves the server for a file with
//! held writes has its size raised to the end of them ([`fix_post_op`]; when a flush landed while
//! the attributes were read and the answer is uncertain, they are read again). A READ that
//! overlaps held data lands it first; one that comes back short with held data beyond lands that
//! too and reads again (a hole before a held write reads as zeros only once the write landed);
//! `eof` is false while held data lies beyond what was read. COMMIT lands the held data of its
//! range, then reports a flush that failed since the last COMMIT (with a new write verifier, so
//! the client resends), else makes the range durable.
//!
//! Calls that change a file's size or remove it talk to write-behind too:
//! [`DataPath::before_resize`] lands held data before a truncation, and
//! [`DataPath::after_remove`] drops the held data of a file whose last link is gone.
//!
//! # Threads
//! Calls are decoded and replies built on `--threads N` async threads (default half the CPUs, at
//! least one); file-system calls and flushes run on a separate blocking pool. On 2 CPUs with the
//! client on the same host, two async threads spent 25-32% of the server's CPU on 4 KiB random
//! READs handing spawned calls to each other (futex wake-ups, context switches); one served
//! 30-40% more READs per second.

// As in the file-system layer: a failure carries the failure reply's attributes, as large as the
// success side; boxing them would add an allocation to every error reply.
#![allow(clippy::result_large_err)]

use crate::backend::{
    self, Attr, Caller, CheckedRead, FileHandle, FileSystem, FsError, IoMode, NowaitRead, Res,
    StableHow, Wcc,
};
use crate::io::pool::PooledChunk;
use crate::io::seq::Readahead;
/// Moved to [`crate::io`], beside [`crate::io::Hooks::spawn`] that uses it; this path stays.
pub use crate::io::spawn;
use crate::io::writebehind::SizeFix;
use crate::io::Engine;
use crate::splice::{LentPipe, PipePool, SPLICE_MIN_BYTES};
use crate::stats::Stats;
use bytes::Bytes;
use sluice_xdr::Payload;
use std::os::fd::AsFd;
use std::sync::Arc;

/// The shared state every data-path call uses (borrowed from the program that owns it).
#[derive(Clone, Copy)]
pub struct DataPath<'a> {
    /// Sequential table, READ chunk pool, write-behind and the ring.
    pub io: &'a Arc<Engine>,
    pub stats: &'a Arc<Stats>,
    /// Pipes for spliced READ replies over TCP ([`crate::splice`]).
    pub pipes: &'a Arc<PipePool>,
}

/// Where a READ's data is.
pub enum ReadData {
    /// Pooled chunks, to append to the reply without a copy.
    Chunks(Payload),
    /// Spliced into a pipe: the connection's writer sends it after the reply's encoded bytes.
    Spliced(LentPipe),
}

/// A READ that succeeded.
pub struct ReadDone {
    pub count: u32,
    /// The read reached the end of the file (and no held data lies beyond it).
    pub eof: bool,
    pub attr: Option<Attr>,
    pub data: ReadData,
}

/// A WRITE that succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteDone {
    pub count: u32,
    pub committed: StableHow,
    pub wcc: Wcc,
    pub verifier: [u8; 8],
}

/// A COMMIT that succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitDone {
    pub wcc: Wcc,
    pub verifier: [u8; 8],
}

impl DataPath<'_> {
    /// READ of up to `count` bytes (capped to the export's `read_bytes_max`) at `offset`. With
    /// `splice_ok`, the data may come back spliced: pass it only when the READ's data is the last
    /// thing in its reply (see the module essay).
    pub async fn read(
        &self,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        fh: FileHandle,
        offset: u64,
        count: u32,
        splice_ok: bool,
    ) -> Res<ReadDone, Option<Attr>> {
        let count = count.min(fs.read_bytes_max());
        if splice_ok {
            if let Some(done) = self.read_spliced(&fs, &caller, &fh, offset, count).await {
                return Ok(done);
            }
        }
        let wb = &self.io.wb;
        if count > 0 && wb.holds(fh.as_bytes()) {
            wb.flush_range(fh.as_bytes(), offset, u64::from(count))
                .await;
        } else if (count as usize) < SPLICE_MIN_BYTES {
            // A small READ of cached data costs less than the hand-off to a blocking thread, and
            // one that needs the disk goes there through io_uring.
            match read_nowait(&*fs, &caller, &fh, offset, count, self.stats, self.io) {
                Some(Nowait::Done(res)) => return res,
                Some(Nowait::NeedsDisk(checked, bufs)) => {
                    if let Some(res) = self
                        .read_uring(&fs, &fh, offset, count, checked, bufs)
                        .await
                    {
                        return res;
                    }
                }
                None => {}
            }
        }
        let run = |fs: Arc<dyn FileSystem>, caller: Caller, fh: FileHandle| {
            let (stats, io) = (self.stats.clone(), self.io.clone());
            self.io
                .spawn(move || read_chunks(&*fs, &caller, &fh, offset, count, &stats, &io))
        };
        let Some(mut res) = run(fs.clone(), caller.clone(), fh.clone()).await else {
            return Err((FsError::ServerFault, None));
        };
        if let Ok(ok) = &res {
            // Short, with held data beyond: a hole before a held write reads as zeros only once
            // the write has landed.
            let got_end = offset + u64::from(ok.count);
            if ok.count < count && wb.held_end(fh.as_bytes()).is_some_and(|e| e > got_end) {
                wb.flush_range(fh.as_bytes(), got_end, 0).await;
                drop(res);
                res = match run(fs, caller, fh).await {
                    Some(r) => r,
                    None => return Err((FsError::ServerFault, None)),
                };
            }
        }
        res
    }

    /// WRITE of `data` (the payload's chunks, in order) at `offset`. UNSTABLE: held by
    /// write-behind and acknowledged from memory once the caller's permission is checked.
    /// DATA_SYNC/FILE_SYNC: held data overlapping the range lands first, then the write goes
    /// through.
    pub async fn write(
        &self,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        fh: FileHandle,
        offset: u64,
        data: Vec<Bytes>,
        stable: StableHow,
    ) -> Res<WriteDone, Wcc> {
        let count: usize = data.iter().map(|c| c.len()).sum();
        self.stats.wire_write_bytes.record(count as u64);
        self.io
            .seq
            .observe_write(fh.as_bytes(), offset, count as u64);
        let wb = &self.io.wb;
        if stable != StableHow::Unstable || !self.io.config.write_behind_enabled {
            if count > 0 && wb.holds(fh.as_bytes()) {
                wb.flush_range(fh.as_bytes(), offset, count as u64).await;
            }
            let (stats, io) = (self.stats.clone(), self.io.clone());
            return self
                .io
                .spawn(move || {
                    write_through(&*fs, &caller, &fh, offset, &data, stable, &stats, &io)
                })
                .await
                .unwrap_or(Err((FsError::ServerFault, Wcc::default())));
        }
        if offset
            .checked_add(count as u64)
            .is_none_or(|end| end > i64::MAX as u64)
        {
            return Err((FsError::FBig, Wcc::default()));
        }
        wb.admit(count as u64).await;
        // The permission check, as the caller: the file system's WRITE path without the data.
        let (fs2, c2, fh2) = (fs.clone(), caller.clone(), fh.clone());
        let checked = self
            .io
            .spawn(
                move || match fs2.write(&c2, &fh2, offset, &[], StableHow::Unstable) {
                    Ok(w) => (None, w.wcc),
                    Err((s, wcc)) => (Some(s), wcc),
                },
            )
            .await;
        let mut wcc = match checked {
            Some((None, wcc)) => wcc,
            Some((Some(s), wcc)) => {
                wb.cancel(count as u64);
                return Err((s, wcc));
            }
            None => {
                wb.cancel(count as u64);
                return Err((FsError::ServerFault, Wcc::default()));
            }
        };
        let previous_end = wb.hold(&fs, &fh, offset, data, caller);
        if let (Some(before), Some(end)) = (wcc.before.as_mut(), previous_end) {
            before.size = before.size.max(end);
        }
        if let Some(after) = wcc.after.as_mut() {
            let end = wb.held_end(fh.as_bytes()).unwrap_or(0);
            after.size = after.size.max(end).max(offset + count as u64);
        }
        Ok(WriteDone {
            count: count as u32,
            committed: StableHow::Unstable,
            wcc,
            verifier: fs.write_verifier(),
        })
    }

    /// COMMIT of `count` bytes at `offset` (`count == 0`: to the end of the file): held data
    /// overlapping the range lands, then a flush error remembered for the file is reported, or
    /// the range is made durable.
    pub async fn commit(
        &self,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        fh: FileHandle,
        offset: u64,
        count: u32,
    ) -> Res<CommitDone, Wcc> {
        let wb = &self.io.wb;
        wb.flush_range(fh.as_bytes(), offset, u64::from(count))
            .await;
        if let Some(s) = wb.take_error(fh.as_bytes()) {
            let attr = self.io.spawn(move || fs.getattr(&fh).ok()).await.flatten();
            return Err((s, Wcc::after(attr)));
        }
        let io = self.io.clone();
        self.io
            .spawn(move || {
                let since = io.wb.epoch();
                match fs.commit(&caller, &fh, offset, count) {
                    Ok(mut wcc) => {
                        fix_post_op(&io, &*fs, &fh, &mut wcc.after, since);
                        Ok(CommitDone {
                            wcc,
                            verifier: fs.write_verifier(),
                        })
                    }
                    Err(e) => Err(e),
                }
            })
            .await
            .unwrap_or(Err((FsError::ServerFault, Wcc::default())))
    }

    /// Whether write-behind holds anything at all (cheap: a name-changing call needs the
    /// helpers below only then).
    pub fn holds_any(&self) -> bool {
        self.io.wb.holds_any()
    }

    /// Before a call that changes the size of `fh` (SETATTR of the size, CREATE UNCHECKED over
    /// an existing file, an OPEN that truncates): every held byte of the file lands first, so
    /// none is written back beyond the new size after it.
    pub async fn before_resize(&self, fh: &FileHandle) {
        self.io.wb.flush_range(fh.as_bytes(), 0, 0).await;
    }

    /// [`DataPath::before_resize`] for the file `name` in `dir`, if it exists.
    pub async fn before_resize_by_name(
        &self,
        fs: &Arc<dyn FileSystem>,
        caller: &Caller,
        dir: FileHandle,
        name: Bytes,
    ) {
        let (fs, caller) = (fs.clone(), caller.clone());
        let found = self
            .io
            .spawn(move || fs.lookup(&caller, &dir, &name).ok())
            .await
            .flatten();
        if let Some(l) = found {
            self.before_resize(&l.fh).await;
        }
    }

    /// Before removing `name` from `dir`: the handle of the object if write-behind holds data
    /// for it, for [`DataPath::after_remove`].
    pub async fn held_target(
        &self,
        fs: &Arc<dyn FileSystem>,
        caller: &Caller,
        dir: FileHandle,
        name: Bytes,
    ) -> Option<FileHandle> {
        let (fs, caller) = (fs.clone(), caller.clone());
        self.io
            .spawn(move || fs.lookup(&caller, &dir, &name).ok().map(|l| l.fh))
            .await
            .flatten()
            .filter(|fh| self.io.wb.holds(fh.as_bytes()))
    }

    /// After a successful remove of an object with held data: if its handle is stale now (its
    /// last link is gone), the held data is dropped instead of written to a file nobody can
    /// reach.
    pub async fn after_remove(&self, fs: Arc<dyn FileSystem>, fh: FileHandle) {
        let fh2 = fh.clone();
        let gone = self
            .io
            .spawn(move || fs.getattr(&fh2).is_err())
            .await
            .unwrap_or(false);
        if gone {
            self.io.wb.discard(fh.as_bytes()).await;
        }
    }

    /// A READ answered by splicing page-cache pages into a pipe, on buffered exports, for READs
    /// of at least [`SPLICE_MIN_BYTES`] of files without held writes. `None` (nothing sent, no
    /// state changed but the sequential table) means use the chunk path: no pipe free, another
    /// cache mode, a small READ, held data to land first, or any failure (the chunk path
    /// reports it).
    async fn read_spliced(
        &self,
        fs: &Arc<dyn FileSystem>,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        count: u32,
    ) -> Option<ReadDone> {
        let count = count as usize;
        if count < SPLICE_MIN_BYTES
            || fs.local()?.read_mode() != IoMode::Buffered
            || self.io.wb.holds(fh.as_bytes())
        {
            return None;
        }
        let mut pipe = self.pipes.acquire(offset, count)?;
        let (stats, io) = (self.stats.clone(), self.io.clone());
        let (fs, caller, fh) = (fs.clone(), caller.clone(), fh.clone());
        self.io
            .spawn(move || {
                let since = io.wb.epoch();
                let ahead = io.seq.observe_read(fh.as_bytes(), offset, count as u64);
                let ok = fs
                    .local()?
                    .read_with(&caller, &fh, offset, count, |f| {
                        pipe.fill(f.as_fd(), offset, count)
                    })
                    .ok()?;
                Some(finish_read(
                    &*fs,
                    &fh,
                    offset,
                    ok,
                    ReadData::Spliced(pipe),
                    ahead,
                    since,
                    &stats,
                    &io,
                ))
            })
            .await
            .flatten()
    }

    /// The READ of a file [`LocalFs::read_nowait`](crate::backend::LocalFs::read_nowait) found checked but not cached, through the
    /// ring. `None` (nothing answered) when there is no ring, it is full, or the read failed or
    /// came back short: the blocking path then does it again and reports any error.
    async fn read_uring(
        &self,
        fs: &Arc<dyn FileSystem>,
        fh: &FileHandle,
        offset: u64,
        count: u32,
        checked: CheckedRead,
        bufs: Vec<PooledChunk>,
    ) -> Option<Res<ReadDone, Option<Attr>>> {
        let uring = self.io.uring.as_ref()?;
        let since = self.io.wb.epoch();
        let (res, bufs) = uring.read(checked.file.clone(), offset, bufs).await.ok()?;
        let ok = fs
            .local()?
            .read_finish(&checked, offset, count as usize, res.ok()?)?;
        self.stats
            .engine
            .uring_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ahead = self
            .io
            .seq
            .observe_read(fh.as_bytes(), offset, u64::from(count));
        Some(read_reply(
            &**fs,
            fh,
            offset,
            Ok(ok),
            bufs,
            ahead,
            since,
            self.stats,
            self.io,
        ))
    }
}

/// Post-op attributes of a file with held writes: size fixed, or read again when a fix cannot
/// tell (see [`SizeFix`]). `since` is the write-behind epoch read before `attr` was.
pub fn fix_post_op(
    io: &Engine,
    fs: &dyn FileSystem,
    fh: &FileHandle,
    attr: &mut Option<Attr>,
    since: u64,
) {
    if let Some(a) = attr.as_mut() {
        if io.wb.fix_size(fh.as_bytes(), a, since) == SizeFix::Uncertain {
            *attr = fs.getattr(fh).ok();
        }
    }
}

/// READ of `count` bytes into pooled chunks; starts server readahead for a sequential reader.
fn read_chunks(
    fs: &dyn FileSystem,
    caller: &Caller,
    fh: &FileHandle,
    offset: u64,
    count: u32,
    stats: &Stats,
    io: &Engine,
) -> Res<ReadDone, Option<Attr>> {
    let since = io.wb.epoch();
    let Some(mut bufs) = io.pool.acquire_for(count as usize) else {
        tracing::warn!(count, "READ buffers exhausted; answering try-again-later");
        return Err((FsError::Delay, None));
    };
    let ahead = io.seq.observe_read(fh.as_bytes(), offset, u64::from(count));
    let res = {
        let mut slices: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut()).collect();
        fs.read(caller, fh, offset, &mut slices)
    };
    read_reply(fs, fh, offset, res, bufs, ahead, since, stats, io)
}

/// The answer to a READ whose data the file system placed in `bufs`: the chunks as the payload
/// (the unused ones go back to the pool), then [`finish_read`].
#[allow(clippy::too_many_arguments)]
fn read_reply(
    fs: &dyn FileSystem,
    fh: &FileHandle,
    offset: u64,
    res: Res<backend::ReadOk, Option<Attr>>,
    bufs: Vec<PooledChunk>,
    ahead: Option<Readahead>,
    since: u64,
    stats: &Stats,
    io: &Engine,
) -> Res<ReadDone, Option<Attr>> {
    let ok = res?;
    let mut data = Payload::new();
    let mut left = ok.count;
    for b in bufs {
        if left == 0 {
            break; // the rest go back to the pool here
        }
        let n = left.min(b.as_ref().len());
        data.push(b.into_bytes(n));
        left -= n;
    }
    Ok(finish_read(
        fs,
        fh,
        offset,
        ok,
        ReadData::Chunks(data),
        ahead,
        since,
        stats,
        io,
    ))
}

/// The end every READ shares, whichever of the four ways its data came (splice, RWF_NOWAIT,
/// io_uring, blocking chunks): server readahead started for a sequential reader (`ahead`, from
/// the sequential table), the byte counters, the post-op attributes fixed for held writes
/// (`since`: the write-behind epoch read before the file system read the attributes), and
/// `eof` only when no held data lies beyond what was read. It runs on the thread the read ran
/// on, so a blocking read's epilogue stays off the async threads.
///
/// The start is not shared as one call because where it sits is each way's reason for being:
/// every way reads `since` before the file system reads, but the chunk and splice paths observe
/// the READ in the sequential table before reading, while the RWF_NOWAIT and io_uring paths
/// observe it only once the read succeeded, so a READ they hand on to the blocking path is not
/// counted twice.
#[allow(clippy::too_many_arguments)]
fn finish_read(
    fs: &dyn FileSystem,
    fh: &FileHandle,
    offset: u64,
    ok: backend::ReadOk,
    data: ReadData,
    ahead: Option<Readahead>,
    since: u64,
    stats: &Stats,
    io: &Engine,
) -> ReadDone {
    if let Some(ra) = ahead {
        fs.readahead_hint(fh, ra.offset, ra.len);
    }
    stats.wire_read_bytes.record(ok.count as u64);
    stats.backend_read_bytes.record(ok.count as u64);
    let mut attr = Some(ok.attr);
    fix_post_op(io, fs, fh, &mut attr, since);
    let end = offset + ok.count as u64;
    // Held data beyond what was read: not the end of the file yet.
    let eof = ok.eof && attr.is_none_or(|at| at.size <= end);
    ReadDone {
        count: ok.count as u32,
        eof,
        attr,
        data,
    }
}

/// What [`read_nowait`] did.
enum Nowait {
    Done(Res<ReadDone, Option<Attr>>),
    /// Checked, not all cached: the file and the chunks for an asynchronous read.
    NeedsDisk(CheckedRead, Vec<PooledChunk>),
}

/// [`read_chunks`] from the page cache without blocking (see
/// [`LocalFs::read_nowait`](crate::backend::LocalFs::read_nowait)), on the
/// caller's (async) thread; `None` when it cannot be tried: nothing was done.
fn read_nowait(
    fs: &dyn FileSystem,
    caller: &Caller,
    fh: &FileHandle,
    offset: u64,
    count: u32,
    stats: &Stats,
    io: &Engine,
) -> Option<Nowait> {
    let since = io.wb.epoch();
    let local = fs.local()?;
    let mut bufs = io.pool.try_acquire_for(count as usize)?;
    let predictor = io.uring.as_ref().map(|u| &u.predictor);
    let try_cache = predictor.is_none_or(|p| p.try_cache());
    let done = local.read_nowait(caller, fh, offset, &mut bufs, try_cache)?;
    if let (Some(p), true) = (predictor, try_cache) {
        p.record(matches!(done, NowaitRead::Done(_)));
    }
    match done {
        NowaitRead::Done(res) => {
            let ahead = io.seq.observe_read(fh.as_bytes(), offset, u64::from(count));
            Some(Nowait::Done(read_reply(
                fs, fh, offset, res, bufs, ahead, since, stats, io,
            )))
        }
        NowaitRead::NeedsDisk(checked) => Some(Nowait::NeedsDisk(checked, bufs)),
    }
}

/// WRITE straight to the file system (DATA_SYNC, FILE_SYNC, or write-behind disabled).
#[allow(clippy::too_many_arguments)]
fn write_through(
    fs: &dyn FileSystem,
    caller: &Caller,
    fh: &FileHandle,
    offset: u64,
    chunks: &[Bytes],
    stable: StableHow,
    stats: &Stats,
    io: &Engine,
) -> Res<WriteDone, Wcc> {
    let since = io.wb.epoch();
    let mut w = fs.write(caller, fh, offset, chunks, stable)?;
    stats.backend_write_bytes.record(w.count as u64);
    fix_post_op(io, fs, fh, &mut w.wcc.after, since);
    Ok(WriteDone {
        count: w.count as u32,
        committed: w.committed,
        wcc: w.wcc,
        verifier: fs.write_verifier(),
    })
}
