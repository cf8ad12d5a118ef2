//! The write-behind driver: UNSTABLE WRITEs held in memory, flushed to the backend in clusters.
//!
//! The policy (what is flushed together, and when) is the pure
//! [`sluice_engine::writebehind::WriteBehind`]; read its essay first. This driver owns what the
//! core cannot: the lock, the clock, the tasks that write, and the server-side semantics of data
//! that is acknowledged but not yet in the file.
//!
//! ```text
//!  WRITE UNSTABLE ─► admit (wait while over the dirty limit) ─► permission check (a zero-length
//!      │             backend write as the caller: wcc, ROFS, ACCES, STALE)                │
//!      │◄───── reply: count, committed = UNSTABLE, verifier ◄── hold: on_write(segments) ◄┘
//!
//!  flusher task: poll_flush(now) ─► spawn_blocking: fs.write(caller, run, Unstable) ─► complete
//!       ▲  sleeps until poll_timeout() or a new write /    then, with clustering, start    │
//!       │  a completion                                    the disk write of the run       │
//!       └──────────────────────────────────────────────────────────────────────────────────┘
//!
//!  COMMIT(range) ─► loop { commit plan: issue its flushes, wait for them and for flushes in
//!                   flight over the range } ─► report a remembered flush error, else fdatasync
//! ```
//!
//! # Payloads
//! A held WRITE keeps the `Bytes` segments the receive path decoded it into (64 KiB socket
//! buffers), not a copy. A flush is written with one `pwritev` per at most
//! [`BACKEND_WRITE_BYTES_MAX`] and [`BACKEND_WRITE_PIECES_MAX`] segments (`IOV_MAX`), so no
//! iovec array or buffer grows with the size of a run. After each `pwritev` of a flush whose
//! [`FlushOp::start_writeback`] is set, the range's writeback to the disk is started without
//! waiting (`OpenFile::start_writeback`), so a COMMIT's `fdatasync` finds most of it written.
//!
//! # Whose credentials write the data
//! Permission is checked when the WRITE arrives, synchronously, as the caller (the zero-length
//! write runs the backend's whole WRITE path except the `pwritev`): the client learns of
//! ACCES/ROFS/STALE in the WRITE reply, as it would without write-behind. Each held byte is then
//! written with the credentials of the WRITE that brought it (a flush is cut where the caller
//! changes), not as root: the kernel then still clears set-id bits on a write by a non-owner,
//! charges and enforces quotas as the user (EDQUOT), and a permission revoked between WRITE and
//! flush is honoured (the flush fails and the error is reported at COMMIT).
//!
//! # Data that is held must be visible
//! * **READ** of a range overlapping held data first flushes the overlapping runs (and waits for
//!   flushes in flight over it), then reads the file: the simplest order that is obviously
//!   correct, and a client rarely reads what it has just written before COMMIT. A READ that
//!   comes back short while held data lies beyond it (a hole before a held write) flushes the
//!   rest of the file and reads again, so holes read as zeros, not as the end of the file.
//! * **Attributes** report `size >= end of held writes` ([`WriteBehindDriver::fix_size`]) in
//!   GETATTR, LOOKUP, ACCESS, READ, WRITE and COMMIT wcc, SETATTR wcc, LINK and READDIRPLUS. We
//!   adjust instead of flushing because clients send GETATTR all the time while writing (close-
//!   to-open, revalidation, `stat`): a flush per GETATTR would undo the clustering. Only the
//!   size is adjusted: `mtime`/`ctime` move when the data lands, which a client may take for a
//!   change by someone else (it then drops cached pages: a cost, not an error).
//!   A file leaves the held set when its last byte lands; an attribute read from the backend
//!   *before* that, checked *after* it, could show the old size. [`WriteBehindDriver::epoch`]
//!   counts departures; a fix that finds no held data but a changed epoch answers
//!   [`SizeFix::Uncertain`] and the handler reads the attributes again (or omits optional ones).
//! * **SETATTR** flushes the whole file and waits before changing anything, so bytes below a
//!   new size survive and bytes beyond it cannot be written back after the truncate, and
//!   times (or a mode) set by the SETATTR are not undone by data landing after it (`tar` and
//!   `cp -p` set the times right after writing, with no COMMIT between under a write
//!   delegation). The same for
//!   CREATE UNCHECKED with a size on an existing file.
//! * **REMOVE** that makes the file's handle stale drops the file's held data: it is marked
//!   discarded and its runs are completed without a backend write.
//! * **DATA_SYNC/FILE_SYNC WRITE** flushes held data overlapping its range first (an older held
//!   write must not land after it), then writes through synchronously.
//!
//! # Errors
//! A flush that fails (ENOSPC, EDQUOT, EIO, ...) changes nothing else: what was written stays,
//! nothing is retried or rolled back. The error is remembered per file (at most
//! [`ERRORS_REMEMBERED_MAX`] files) and returned, once, by the next COMMIT of that file; the
//! client then reports it to the application (`close`/`fsync` fail). The export's write verifier
//! is also changed, so a client that retries its COMMIT sees a new verifier and resends what it
//! has not committed, rather than being told that lost data is stable. Data lost in a server
//! crash is covered the same way: the write verifier changes on every start.
//!
//! # Bounds
//! Dirty bytes (admitted, not yet landed) stay under `dirty_bytes_limit`: a WRITE that would
//! pass it waits in [`WriteBehindDriver::admit`] (holding its connection's call slot, so the
//! client is slowed by TCP), and the core flushes under pressure so that the wait ends.

use super::{Blocking, Hooks};
use crate::backend::{Attr, Caller, FileHandle, FileSystem, FileType, FsError};
use crate::stats::Stats;
use bytes::Bytes;
use sluice_engine::writebehind::{Admit, FlushOp, WriteBehind, WriteBehindConfig};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tracing::warn;

/// Largest single backend write of a flush: the core's default cluster size. Runs handed out by
/// COMMIT can be longer; they are written in pieces of this size.
pub const BACKEND_WRITE_BYTES_MAX: u64 = 8 << 20;
/// Most payload segments in one backend write: `IOV_MAX` on Linux (`pwritev` refuses more).
pub const BACKEND_WRITE_PIECES_MAX: usize = 1024;
/// Files whose flush error waits for a COMMIT; beyond this the oldest-inserted is forgotten
/// (logged). A client that never commits cannot grow the table.
pub const ERRORS_REMEMBERED_MAX: usize = 4096;

/// The file a held write belongs to: its handle's bytes (they name the export too). A file
/// reached through two different handles (hard links reported under two parents) is two files
/// here; see the gaps in the module docs of [`crate::io`].
pub type FileKey = Bytes;

/// One held WRITE: its payload segments and who sent it. Shared by the core's segments.
#[derive(Clone)]
pub struct Held(Arc<HeldWrite>);

struct HeldWrite {
    chunks: Vec<Bytes>,
    caller: Caller,
}

/// Whether [`WriteBehindDriver::fix_size`] could answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeFix {
    /// The attributes are right (adjusted, or nothing was held for the file).
    Done,
    /// Held data of some file landed between the attribute read and the fix: read the
    /// attributes again (or omit them).
    Uncertain,
}

/// The server's write-behind: one per server, shared by all exports.
pub struct WriteBehindDriver {
    state: Mutex<State>,
    /// Wakes the flusher: a write was held, a flush completed, a writer is waiting.
    wake: Notify,
    /// A flush completed or an admission was returned: wakes COMMITs and admissions waiting.
    done: Notify,
    stats: Arc<Stats>,
    /// The clock, and where flushes run ([`Hooks`]).
    hooks: Hooks,
}

struct State {
    core: WriteBehind<FileKey, Held>,
    /// Files with bytes held (pending or in flight); removed when the last byte lands.
    files: HashMap<FileKey, FileCtx>,
    in_flight: HashSet<u64>,
    errors: HashMap<FileKey, FsError>,
    /// Bumped each time a file leaves `files`.
    epoch: u64,
}

struct FileCtx {
    fs: Arc<dyn FileSystem>,
    /// Bytes of this file pending or in flight (written, minus overwritten, minus landed).
    held_bytes: u64,
    /// End of the furthest write held since the file entered the held set.
    held_end: u64,
    /// The file was removed: complete its flushes without writing.
    discard: bool,
}

impl WriteBehindDriver {
    pub fn new(config: WriteBehindConfig, stats: Arc<Stats>) -> Arc<Self> {
        WriteBehindDriver::with_hooks(config, stats, Hooks::default())
    }

    /// [`WriteBehindDriver::new`] with the caller's clock and blocking policy. With
    /// [`Blocking::Inline`] a flush is written and completed inside the call that issues it,
    /// and nobody runs [`WriteBehindDriver::run_flusher`]: the owner calls
    /// [`WriteBehindDriver::flush_due`] when its deadline comes.
    pub fn with_hooks(config: WriteBehindConfig, stats: Arc<Stats>, hooks: Hooks) -> Arc<Self> {
        Arc::new(WriteBehindDriver {
            state: Mutex::new(State {
                core: WriteBehind::new(config),
                files: HashMap::new(),
                in_flight: HashSet::new(),
                errors: HashMap::new(),
                epoch: 0,
            }),
            wake: Notify::new(),
            done: Notify::new(),
            stats,
            hooks,
        })
    }

    /// Waits until `len` more dirty bytes fit under the limit, and counts them. Follow with
    /// [`WriteBehindDriver::hold`] or [`WriteBehindDriver::cancel`].
    pub async fn admit(&self, len: u64) {
        loop {
            let done = self.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            {
                let mut st = self.lock();
                if st.core.admit(self.hooks.clock.now(), len) == Admit::Ok {
                    self.publish(&st);
                    return;
                }
            }
            // Over the limit: the flusher may now flush under pressure.
            self.wake.notify_one();
            done.await;
        }
    }

    /// Returns an admission whose WRITE failed before it was held.
    pub fn cancel(&self, len: u64) {
        let mut st = self.lock();
        st.core.cancel_admit(len);
        self.publish(&st);
        drop(st);
        self.done.notify_waiters();
    }

    /// Holds an admitted UNSTABLE WRITE of `chunks` at `offset`. Returns the end of the held
    /// writes of the file before this one (`None` if none was held), for the pre-op size.
    pub fn hold(
        &self,
        fs: &Arc<dyn FileSystem>,
        fh: &FileHandle,
        offset: u64,
        chunks: Vec<Bytes>,
        caller: Caller,
    ) -> Option<u64> {
        let len: u64 = chunks.iter().map(|c| c.len() as u64).sum();
        if len == 0 {
            return self.held_end(fh.as_bytes());
        }
        let key = fh.to_bytes();
        let mut st = self.lock();
        let before = st.core.stats().overwritten_bytes;
        let held = Held(Arc::new(HeldWrite { chunks, caller }));
        st.core
            .on_write(self.hooks.clock.now(), key.clone(), offset, len, held);
        let overwritten = st.core.stats().overwritten_bytes - before;
        let ctx = st.files.entry(key).or_insert_with(|| FileCtx {
            fs: fs.clone(),
            held_bytes: 0,
            held_end: 0,
            discard: false,
        });
        let previous_end = (ctx.held_bytes > 0).then_some(ctx.held_end);
        ctx.held_bytes = ctx.held_bytes + len - overwritten;
        ctx.held_end = ctx.held_end.max(offset + len);
        ctx.discard = false;
        self.publish(&st);
        drop(st);
        self.wake.notify_one();
        previous_end
    }

    /// Whether anything is held (pending or in flight) for the file.
    pub fn holds(&self, fh: &[u8]) -> bool {
        self.lock().files.contains_key(fh)
    }

    /// Whether anything is held for any file.
    pub fn holds_any(&self) -> bool {
        !self.lock().files.is_empty()
    }

    /// End of the held writes of the file, if any are held.
    pub fn held_end(&self, fh: &[u8]) -> Option<u64> {
        self.lock().files.get(fh).map(|c| c.held_end)
    }

    /// Counts files leaving the held set; read it *before* reading attributes from the backend
    /// and pass it to [`WriteBehindDriver::fix_size`].
    pub fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// Raises `attr.size` to the end of the file's held writes. `since` is the
    /// [`WriteBehindDriver::epoch`] read before `attr` was.
    pub fn fix_size(&self, fh: &[u8], attr: &mut impl FileSize, since: u64) -> SizeFix {
        let st = self.lock();
        fix_locked(&st, fh, attr, since)
    }

    /// [`WriteBehindDriver::fix_size`] for many attributes under one lock; `on_uncertain` is
    /// called for each that cannot be answered.
    pub fn fix_sizes<'a, A: FileSize + 'a>(
        &self,
        items: impl Iterator<Item = (&'a [u8], &'a mut Option<A>)>,
        since: u64,
    ) {
        let st = self.lock();
        if st.files.is_empty() && st.epoch == since {
            return;
        }
        for (fh, attr) in items {
            if let Some(a) = attr.as_mut() {
                if fix_locked(&st, fh, a, since) == SizeFix::Uncertain {
                    // Optional attributes: better none than a stale size.
                    *attr = None;
                }
            }
        }
    }

    /// Writes every held byte of the file overlapping `[offset, offset + count)` (`count == 0`:
    /// to the end of the file) to the backend and waits until it and every flush in flight over
    /// the range have landed. Errors are remembered as for background flushes.
    pub async fn flush_range(self: &Arc<Self>, fh: &[u8], offset: u64, count: u64) {
        loop {
            let (ops, waiting) = {
                let mut st = self.lock();
                let Some(key) = st.files.get_key_value(fh).map(|(k, _)| k.clone()) else {
                    return;
                };
                let plan = st.core.commit(&key, offset, count);
                let mut waiting = plan.wait_for;
                for op in &plan.flushes {
                    st.in_flight.insert(op.id);
                    waiting.push(op.id);
                }
                (plan.flushes, waiting)
            };
            if waiting.is_empty() {
                return;
            }
            for op in ops {
                self.start(op);
            }
            self.wait_landed(&waiting).await;
        }
    }

    /// Drops the file's held data (it was removed): its runs are completed without writing.
    pub async fn discard(self: &Arc<Self>, fh: &[u8]) {
        {
            let mut st = self.lock();
            match st.files.get_mut(fh) {
                Some(ctx) => ctx.discard = true,
                None => return,
            }
            st.errors.remove(fh);
        }
        self.flush_range(fh, 0, 0).await;
        self.lock().errors.remove(fh);
    }

    /// The error of a failed flush of the file since the last call, if any (COMMIT reports it).
    pub fn take_error(&self, fh: &[u8]) -> Option<FsError> {
        self.lock().errors.remove(fh)
    }

    /// Dirty bytes now (admitted, not landed).
    pub fn dirty_bytes(&self) -> u64 {
        self.lock().core.dirty_bytes()
    }

    /// The background task: issues due flushes, sleeps until the next deadline or event.
    /// Runs until the server stops (its task is aborted).
    pub async fn run_flusher(self: Arc<Self>) -> std::io::Result<()> {
        /// A deadline already due but blocked (flushes in flight at the maximum, or a run
        /// overlapping one) waits for a completion; this is only the safety net.
        const BLOCKED_RECHECK: Duration = Duration::from_millis(10);
        loop {
            let wake = self.wake.notified();
            tokio::pin!(wake);
            wake.as_mut().enable();
            let deadline = self.flush_due(self.hooks.clock.now());
            let now = self.hooks.clock.now();
            match deadline {
                None => wake.await,
                Some(d) => {
                    let at = d.max(now + BLOCKED_RECHECK * u32::from(d <= now));
                    tokio::select! {
                        _ = &mut wake => {}
                        _ = tokio::time::sleep_until(at.into()) => {}
                    }
                }
            }
        }
    }

    /// One round of the flusher: issues every flush the core says is due at `now`, and returns
    /// when it next wants to be called (`None`: only after a new write or a completion). The
    /// flusher task calls it in its loop; a simulator calls it from its event loop.
    pub fn flush_due(self: &Arc<Self>, now: Instant) -> Option<Instant> {
        let ops = {
            let mut st = self.lock();
            let mut ops = Vec::new();
            while let Some(op) = st.core.poll_flush(now) {
                st.in_flight.insert(op.id);
                ops.push(op);
            }
            ops
        };
        for op in ops {
            self.start(op);
        }
        self.lock().core.poll_timeout()
    }

    // ---- helpers -------------------------------------------------------------------------

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("write-behind lock")
    }

    fn publish(&self, st: &State) {
        let e = &self.stats.engine;
        e.dirty_bytes.store(st.core.dirty_bytes(), Relaxed);
        e.dirty_bytes_high_water
            .store(st.core.stats().dirty_bytes_high_water, Relaxed);
    }

    /// Runs one flush: the backend writes on the blocking pool, then its completion.
    fn start(self: &Arc<Self>, op: FlushOp<FileKey, Held>) {
        let (fs, discard) = {
            let st = self.lock();
            let ctx = st
                .files
                .get(&op.file)
                .expect("a file with a flush holds bytes");
            (ctx.fs.clone(), ctx.discard)
        };
        tracing::debug!(reason = ?op.reason, offset = op.offset, len = op.len, "write-behind flush");
        if self.hooks.blocking == Blocking::Inline {
            let result = if discard {
                Ok(())
            } else {
                write_run(&*fs, &op, &self.stats)
            };
            self.complete(op.id, &op.file, op.len, result);
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let (id, file, len) = (op.id, op.file.clone(), op.len);
            let result = if discard {
                Ok(())
            } else {
                let stats = me.stats.clone();
                tokio::task::spawn_blocking(move || write_run(&*fs, &op, &stats))
                    .await
                    .unwrap_or(Err(FsError::ServerFault))
            };
            me.complete(id, &file, len, result);
        });
    }

    fn complete(&self, id: u64, file: &FileKey, len: u64, result: Result<(), FsError>) {
        let mut st = self.lock();
        st.core.on_flush_complete(id);
        st.in_flight.remove(&id);
        let mut gone = false;
        let mut remember = None;
        let mut lost_on = None;
        if let Some(ctx) = st.files.get_mut(file) {
            if let Err(s) = result {
                if !ctx.discard {
                    lost_on = Some(ctx.fs.clone());
                    remember = Some(s);
                }
            }
            ctx.held_bytes -= len;
            gone = ctx.held_bytes == 0;
        }
        if gone {
            st.files.remove(file);
            st.epoch += 1;
        }
        if let Some(s) = remember {
            warn!(
                error = %s,
                bytes = len,
                "write-behind flush failed; reported at the next COMMIT"
            );
            if st.errors.len() >= ERRORS_REMEMBERED_MAX && !st.errors.contains_key(file) {
                if let Some(k) = st.errors.keys().next().cloned() {
                    warn!("too many unreported write errors; one is forgotten");
                    st.errors.remove(&k);
                }
            }
            st.errors.insert(file.clone(), s);
        }
        if let Some(fs) = lost_on {
            // Data acknowledged as UNSTABLE did not reach the disk. Reporting the error at one
            // COMMIT is not enough: a client that retries its COMMIT must not be told the data
            // is stable. A new verifier makes every client resend what it has not committed.
            fs.reset_write_verifier();
        }
        self.publish(&st);
        drop(st);
        self.wake.notify_one();
        self.done.notify_waiters();
    }

    async fn wait_landed(&self, ids: &[u64]) {
        loop {
            let done = self.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            {
                let st = self.lock();
                if !ids.iter().any(|id| st.in_flight.contains(id)) {
                    return;
                }
            }
            done.await;
        }
    }
}

/// The two things write-behind needs of attributes, whatever protocol's type carries them: the
/// v3 handlers fix sizes in encoded `fattr3`s (READDIRPLUS entries), the data path in [`Attr`].
pub trait FileSize {
    fn is_regular_file(&self) -> bool;
    fn size_mut(&mut self) -> &mut u64;
}

impl FileSize for Attr {
    fn is_regular_file(&self) -> bool {
        self.ftype == FileType::Regular
    }
    fn size_mut(&mut self) -> &mut u64 {
        &mut self.size
    }
}

fn fix_locked(st: &State, fh: &[u8], attr: &mut impl FileSize, since: u64) -> SizeFix {
    // Only regular files take WRITEs: a directory's or a symlink's attributes are never stale
    // because of write-behind, whatever landed meanwhile. (Treating them as uncertain dropped
    // READDIRPLUS attributes of directories whenever any flush completed during the listing,
    // and clients then listed them without a type.)
    if !attr.is_regular_file() {
        return SizeFix::Done;
    }
    match st.files.get(fh) {
        Some(ctx) => {
            let size = attr.size_mut();
            *size = (*size).max(ctx.held_end);
            SizeFix::Done
        }
        None if st.epoch == since => SizeFix::Done,
        None => SizeFix::Uncertain,
    }
}

/// Writes one flush to the backend: one `pwritev` per run of segments from the same caller, at
/// most [`BACKEND_WRITE_BYTES_MAX`] bytes and [`BACKEND_WRITE_PIECES_MAX`] pieces each. Stops at
/// the first error.
fn write_run(
    fs: &dyn FileSystem,
    op: &FlushOp<FileKey, Held>,
    stats: &Stats,
) -> Result<(), FsError> {
    let Ok(fh) = FileHandle::new(op.file.clone()) else {
        // Keys are the bytes of handles held by `hold`, so never longer than a handle.
        return Err(FsError::BadHandle);
    };
    let mut group: Vec<Bytes> = Vec::new();
    let mut group_offset = op.offset;
    let mut group_bytes = 0u64;
    let mut group_caller: Option<&Caller> = None;
    let write = |group: &mut Vec<Bytes>, offset: u64, bytes: u64, caller: &Caller| {
        // The whole flush's length decides whether it is a stream that goes O_DIRECT on a
        // buffered export (vfs iomode, "Streaming writes of a buffered export").
        let r = fs.write_flush(caller, &fh, offset, group, op.len);
        group.clear();
        match r {
            Ok(_) => {
                stats.backend_write_bytes.record(bytes);
                if op.start_writeback {
                    // The file is in the open-file cache: the write just used it.
                    if let Some(file) = fs.local().and_then(|l| l.open_files().get(&op.file)) {
                        let _ = file.start_writeback(offset, bytes);
                    }
                }
                Ok(())
            }
            Err((s, _)) => Err(s),
        }
    };
    for seg in &op.segments {
        let held = &seg.payload.0;
        for piece in pieces(&held.chunks, seg.payload_offset, seg.len) {
            let cut = match group_caller {
                None => false,
                Some(c) => {
                    c != &held.caller
                        || group.len() >= BACKEND_WRITE_PIECES_MAX
                        || group_bytes + piece.len() as u64 > BACKEND_WRITE_BYTES_MAX
                }
            };
            if cut {
                write(
                    &mut group,
                    group_offset,
                    group_bytes,
                    group_caller.expect("cut a group"),
                )?;
                group_offset += group_bytes;
                group_bytes = 0;
            }
            group_caller = Some(&held.caller);
            group_bytes += piece.len() as u64;
            group.push(piece);
        }
    }
    if let Some(c) = group_caller {
        if group_bytes > 0 {
            write(&mut group, group_offset, group_bytes, c)?;
        }
    }
    Ok(())
}

/// The `len` bytes at `offset` of a payload made of `chunks`, as slices of them.
fn pieces(chunks: &[Bytes], offset: u64, len: u64) -> impl Iterator<Item = Bytes> + '_ {
    let mut skip = offset;
    let mut left = len;
    chunks.iter().filter_map(move |c| {
        let clen = c.len() as u64;
        if skip >= clen {
            skip -= clen;
            return None;
        }
        if left == 0 {
            return None;
        }
        let start = skip;
        let n = (clen - start).min(left);
        skip = 0;
        left -= n;
        Some(c.slice(start as usize..(start + n) as usize))
    })
}

#[cfg(test)]
mod tests {
    /// Regression: a flush landing during a READDIRPLUS made every entry's attributes
    /// "uncertain", so directories were listed without attributes (nfs-ls showed no type).
    #[test]
    fn only_regular_files_are_uncertain_after_a_flush_lands() {
        let attr = |ftype, size| Attr {
            ftype,
            size,
            mode: 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            used: 0,
            rdev: Default::default(),
            fsid: 1,
            fileid: 2,
            atime: Default::default(),
            mtime: Default::default(),
            ctime: Default::default(),
            change: 0,
        };
        let wb = WriteBehindDriver::new(Default::default(), Arc::new(Stats::default()));
        let moved_on = wb.epoch().wrapping_add(1); // as if a flush landed after the call began
        let mut dir = attr(FileType::Directory, 4096);
        assert_eq!(
            wb.fix_size(b"dir-handle", &mut dir, moved_on),
            SizeFix::Done
        );
        let mut file = attr(FileType::Regular, 10);
        assert_eq!(
            wb.fix_size(b"file-handle", &mut file, moved_on),
            SizeFix::Uncertain
        );
        let mut same = attr(FileType::Regular, 10);
        assert_eq!(
            wb.fix_size(b"file-handle", &mut same, wb.epoch()),
            SizeFix::Done
        );
    }

    use super::*;

    #[test]
    fn pieces_slice_across_chunk_boundaries() {
        let chunks: Vec<Bytes> = vec![
            Bytes::from_static(b"abcd"),
            Bytes::from_static(b"efgh"),
            Bytes::from_static(b"ij"),
        ];
        let got: Vec<Bytes> = pieces(&chunks, 2, 7).collect();
        assert_eq!(got, vec![&b"cd"[..], &b"efgh"[..], &b"i"[..]]);
        let got: Vec<Bytes> = pieces(&chunks, 4, 4).collect();
        assert_eq!(got, vec![&b"efgh"[..]]);
        let got: Vec<Bytes> = pieces(&chunks, 9, 1).collect();
        assert_eq!(got, vec![&b"j"[..]]);
        assert_eq!(pieces(&chunks, 3, 0).count(), 0);
    }
}
