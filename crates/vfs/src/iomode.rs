//! Cache modes per export: how READ and WRITE reach the disk (`io=buffered|dontcache|direct` in
//! the exports file, `--io` on the command line). The reference is knfsd's `io_cache_read` /
//! `io_cache_write` modes (Linux 6.18/6.19): buffered, DONTCACHE and O_DIRECT.
//!
//! Every mode returns the same bytes for any offset and length; they differ only in what stays in
//! the page cache afterwards. COMMIT and the DATA_SYNC / FILE_SYNC stability of WRITE are the same
//! in every mode (`RWF_DSYNC` / `RWF_SYNC` on each write, `sync_file_range` + `fdatasync` for
//! COMMIT), because the data ends up in the same inode whichever descriptor wrote it.
//!
//! # buffered (the default)
//! `preadv2` / `pwritev2` through the page cache. Repeated reads are served from memory; written
//! data is written back by the kernel's flusher or by COMMIT.
//!
//! # dontcache
//! The same calls with `RWF_DONTCACHE` (Linux 6.14, value 0x80 in `include/uapi/linux/fs.h`):
//! still through the page cache, so reads and writes stay coherent with everybody else, but pages
//! the call brought in are dropped once read or written back. Meant for streaming data larger than
//! memory, which would otherwise push everything else out of the cache. A file system that does
//! not implement it (tmpfs, most before 6.15) answers EOPNOTSUPP (older kernels, or a flag they do
//! not know: EOPNOTSUPP or EINVAL); then the call is repeated without the flag and, if that
//! succeeds, the export logs one warning and is buffered from then on ([`ModeIo::read_mode`] and [`ModeIo::write_mode`]).
//!
//! # direct
//! `O_DIRECT` on a second descriptor of the file (cached beside the buffered one in the open-file
//! cache), so data bypasses the page cache. The kernel demands alignment, which the file system
//! reports through `statx(STATX_DIOALIGN)`: `stx_dio_offset_align` for file offsets and lengths,
//! `stx_dio_mem_align` for buffer addresses. NFS requests have any offset and length, so a WRITE
//! is cut in three:
//!
//! ```text
//!  file offset:  0        A        2A       3A       4A       5A       6A
//!                |........|........|........|........|........|........|
//!  WRITE:             [offset ..................................... end)
//!                     |head|            middle              | tail |
//!                      buffered   O_DIRECT, whole blocks     buffered
//!                     offset → align_up(offset)  align_down(end) → end
//!
//!  READ:              [offset .......................... end)
//!               [widened to A: align_down(offset) ... align_up(end))   one O_DIRECT read,
//!                                                                      the requested slice kept
//! ```
//!
//! `A`, the *write* alignment, is `max(stx_dio_offset_align, page size)`, not the bare offset
//! alignment (often 512): with a whole-page middle, a page written with O_DIRECT lies entirely
//! inside one request, so two concurrent WRITEs of *distinct* ranges never touch one page, one
//! buffered and the other direct. That mix is the case the kernel cannot make coherent: the
//! direct write invalidates the cached page afterwards, and if a concurrent buffered write has
//! dirtied it meanwhile the invalidation fails ("Page cache invalidation failure on direct I/O")
//! and the stale page may later be written back over the direct data. A WRITE without a whole
//! block inside is written buffered entirely.
//!
//! A READ is widened to `stx_dio_offset_align` only (sub-page is fine for reads: the kernel's
//! direct read path writes back dirty cached pages of the range and waits for them before it
//! reads the disk, `kiocb_write_and_wait` in `generic_file_read_iter` / `iomap_dio_rw`). That is
//! the guarantee that makes a buffered head or tail visible to a later direct READ of the same
//! block, and a direct WRITE invalidates cached pages over its range, so a later buffered read
//! sees it; `tests/io_modes.rs` checks both orders across two exports of one directory. Bytes
//! beyond the end of file come back short from the kernel, so the reply is short and `eof` is set
//! exactly as in buffered mode.
//!
//! Memory alignment: the caller's WRITE chunks (network buffers) have any address and length, so
//! the middle is copied into *bounce buffers*: [`BOUNCE_BYTES`] each, aligned to
//! [`BOUNCE_ALIGN_BYTES`], kept in a per-export pool of at most [`BOUNCE_POOL_MAX`]; one system
//! call carries at most [`DIRECT_BATCH_BYTES`] (16 of them, gathered by `pwritev2`), so no call
//! allocates more than 1 MiB of bounce memory and there is never a contiguous buffer above 64 KiB.
//! READs use the same buffers, except when the caller's buffers and offset are already aligned:
//! then the kernel reads straight into them (zero copy; the I/O engine can get this by handing
//! page-aligned chunks whose lengths are multiples of 4 KiB).
//!
//! Fallbacks: a file system that reports no alignment (zero, or no `STATX_DIOALIGN` in the mask),
//! an alignment the bounce buffers cannot honour, refusing `O_DIRECT` at open, or an EINVAL from a
//! direct read or write (repeated buffered, which succeeded) turns the *whole export* to buffered
//! with one warning. Per export rather than per file keeps [`ModeIo::read_mode`] and [`ModeIo::write_mode`] meaningful; the cost
//! is that one odd file (ext4 inline data, an encrypted file) makes the export buffered.
//!
//! # Streaming writes of a buffered export
//! A buffered export's WRITEs all went through the page cache, and for an upload that is where
//! the server stopped: the kernel's copy of every byte into the cache and the flusher's
//! writeback cost most of a buffered WRITE's CPU (`sluice bench --workload write --depth 16`:
//! ~350 MB/s buffered against ~1.1 GB/s with `io_write=direct`, 2026-11-23). So write-behind
//! flushes that are part of a stream go O_DIRECT even there, and everything else stays
//! buffered ([`flush_goes_direct`], pure):
//!
//! * a stream is what the write-behind clustered: one flush of at least
//!   [`STREAMING_DIRECT_MIN_BYTES`] contiguous bytes held from consecutive UNSTABLE WRITEs (the
//!   write-behind only clusters held writes that continue each other, so a flush that long is
//!   sequential data by construction); shorter flushes, DATA_SYNC / FILE_SYNC WRITEs and
//!   every WRITE of a dontcache export stay as they were;
//! * the file needs its O_DIRECT twin, which a buffered export opens only for files opened
//!   for a WRITE (`LocalFs` asks [`ModeIo::wants_direct_twin`]); a file first opened for a READ
//!   streams buffered until it leaves the open-file cache;
//! * the direct write is the same as `io_write=direct`'s (buffered head and tail, whole pages
//!   direct), so the coherence argument above holds unchanged: readers of just-written data
//!   see it because a direct write invalidates the cached pages of its range, and dirty pages
//!   of earlier buffered writes in the range are written back by the kernel before the direct
//!   write goes out;
//! * durability is unchanged: the data is UNSTABLE until COMMIT, whose `fdatasync` covers
//!   data written through either descriptor (and the device cache).
//!
//! A file system that refuses O_DIRECT turns the export's streaming writes buffered for good,
//! as for `io=direct` (logged at debug level only: the user asked for nothing).
//!
//! # Per direction
//! `io_read=` and `io_write=` choose the mode of each direction separately (`io=` sets both), as
//! knfsd's `io_cache_read` and `io_cache_write` do. The useful mix is `io_write=direct` with
//! buffered reads: WRITE data goes from the bounce buffers to the disk, so the server no longer
//! pays the kernel's copy of every written byte into the page cache (most of a buffered WRITE's
//! CPU), while READs, including those of data just written, are ordinary page-cache reads (a
//! direct write invalidates the cached pages of its range, so a later buffered read sees it). The
//! fallbacks are per export and apply to both directions: a file system that refuses O_DIRECT or
//! RWF_DONTCACHE turns whichever direction asked for it to buffered.
//!
//! The buffered head and tail of a direct WRITE stay in the page cache as dirty pages until
//! written back (they are at most two pages per WRITE). READ-ahead hints are a no-op in direct
//! mode: `POSIX_FADV_WILLNEED` fills the page cache, which direct reads do not use.

use super::exports::{IoMode, IoModes};
use super::openfiles::{DirectFd, OpenFile};
use super::sys;
use super::types::StableHow;
use bytes::Bytes;
use std::io::{self, IoSlice, IoSliceMut};
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Size of one bounce buffer, bytes. 64 KiB: the chunk size of the rest of the server, a multiple
/// of every direct-I/O alignment in practice (512 B to 64 KiB pages), and small enough that the
/// allocator never needs a large contiguous region.
pub const BOUNCE_BYTES: usize = 64 << 10;
/// Address alignment of bounce buffers, bytes. 4 KiB covers `stx_dio_mem_align` of every block
/// device seen (4 or 512 bytes; 4096 for some NVMe with metadata); a file demanding more makes
/// the export buffered.
pub const BOUNCE_ALIGN_BYTES: usize = 4096;
/// Bytes of one direct `preadv2` / `pwritev2`: 16 bounce buffers. 1 MiB is the largest READ and
/// WRITE the server offers, so a typical request is one system call.
pub const DIRECT_BATCH_BYTES: usize = 1 << 20;
/// Bounce buffers kept for reuse per export (4 MiB): enough for four 1 MiB requests in flight
/// without allocating; beyond it buffers are freed after use.
pub const BOUNCE_POOL_MAX: usize = 64;

/// Write-behind flushes of at least this many contiguous bytes count as streaming and go
/// O_DIRECT on a buffered export. 1 MiB: the largest single WRITE the server offers, so only
/// data from two or more WRITEs that continue each other (or one whole 1 MiB WRITE) qualifies;
/// below it the bounce copy and per-call alignment work gain little, and small writes are the
/// ones a reader is most likely to read back from the cache soon.
pub const STREAMING_DIRECT_MIN_BYTES: u64 = 1 << 20;

/// Whether an UNSTABLE write-behind flush of `flush_bytes` contiguous bytes goes O_DIRECT,
/// for an export whose WRITE mode in effect is `write_mode` (see "Streaming writes of a
/// buffered export"). Pure; the caller still needs the file's O_DIRECT twin.
pub fn flush_goes_direct(write_mode: IoMode, flush_bytes: u64) -> bool {
    match write_mode {
        IoMode::Direct => true,
        // Dontcache already keeps streams out of the cache, through it (coherent for mmap
        // users too); the user chose it.
        IoMode::DontCache => false,
        IoMode::Buffered => flush_bytes >= STREAMING_DIRECT_MIN_BYTES,
    }
}

/// The cache modes of one export and what it has learned about the file system.
pub struct ModeIo {
    requested: IoModes,
    /// The file system refused `RWF_DONTCACHE`: buffered from then on.
    dontcache_refused: AtomicBool,
    /// The file system refused `O_DIRECT` (or its alignment): buffered from then on.
    direct_refused: AtomicBool,
    /// `max(page size, …)` is taken per file from this.
    page_bytes: u64,
    /// For warnings.
    export: PathBuf,
    pool: BouncePool,
}

impl ModeIo {
    pub fn new(requested: IoModes, export: PathBuf) -> ModeIo {
        ModeIo {
            requested,
            dontcache_refused: AtomicBool::new(false),
            direct_refused: AtomicBool::new(false),
            page_bytes: sys::page_size(),
            export,
            pool: BouncePool::new(BOUNCE_POOL_MAX),
        }
    }

    /// The mode of READs in effect: the requested one until the file system refused it, then
    /// buffered.
    pub fn read_mode(&self) -> IoMode {
        self.effective(self.requested.read)
    }

    /// The mode of WRITEs in effect, as [`ModeIo::read_mode`].
    pub fn write_mode(&self) -> IoMode {
        self.effective(self.requested.write)
    }

    fn effective(&self, requested: IoMode) -> IoMode {
        match requested {
            IoMode::DontCache if self.dontcache_refused.load(Ordering::Relaxed) => IoMode::Buffered,
            IoMode::Direct if self.direct_refused.load(Ordering::Relaxed) => IoMode::Buffered,
            m => m,
        }
    }

    /// Whether newly opened files should get an `O_DIRECT` twin descriptor.
    pub fn wants_direct(&self) -> bool {
        self.read_mode() == IoMode::Direct || self.write_mode() == IoMode::Direct
    }

    /// Whether a file being opened gets an `O_DIRECT` twin: always when a direction is direct;
    /// on a buffered-write export, for a file opened to be written (its streaming flushes go
    /// direct, see [`flush_goes_direct`]).
    pub fn wants_direct_twin(&self, for_write: bool) -> bool {
        self.wants_direct()
            || (for_write
                && self.write_mode() == IoMode::Buffered
                && !self.direct_refused.load(Ordering::Relaxed))
    }

    /// Whether a file's reported alignment can be served with the bounce buffers; `None` is
    /// "no O_DIRECT for this file".
    pub fn usable_alignment(&self, align: Option<(u32, u32)>) -> Result<(u32, u32), String> {
        let Some((mem, off)) = align else {
            return Err("the file system reports no direct-I/O alignment (STATX_DIOALIGN)".into());
        };
        let ok = mem.is_power_of_two()
            && off.is_power_of_two()
            && mem as usize <= BOUNCE_ALIGN_BYTES
            && off as usize <= BOUNCE_BYTES
            && self.page_bytes.max(u64::from(off)) <= BOUNCE_BYTES as u64;
        if ok {
            Ok((mem, off))
        } else {
            Err(format!(
                "unsupported direct-I/O alignment: memory {mem}, offset {off} bytes"
            ))
        }
    }

    /// Turns the export to buffered I/O, warning the first time.
    pub fn refuse_direct(&self, why: &str) {
        if !self.direct_refused.swap(true, Ordering::Relaxed) {
            if self.requested.uses_direct() {
                tracing::warn!(
                    export = %self.export.display(),
                    reason = why,
                    "io=direct: O_DIRECT unusable on this file system; serving buffered I/O"
                );
            } else {
                tracing::debug!(
                    export = %self.export.display(),
                    reason = why,
                    "O_DIRECT unusable on this file system; streaming writes stay buffered"
                );
            }
        }
    }

    fn refuse_dontcache(&self, e: &io::Error) {
        if !self.dontcache_refused.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                export = %self.export.display(),
                error = %e,
                "io=dontcache: RWF_DONTCACHE refused by the file system; serving buffered I/O"
            );
        }
    }

    /// Reads from `offset` into `bufs`, in order, until they are full or the file ends; returns
    /// the bytes placed.
    pub fn read<B: AsMut<[u8]>>(
        &self,
        file: &OpenFile,
        offset: u64,
        bufs: &mut [B],
    ) -> io::Result<usize> {
        match self.read_mode() {
            IoMode::Direct => {
                if let Some(d) = file.direct() {
                    match self.read_direct(d, offset, bufs) {
                        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                            let n = read_buffered(file.as_fd(), offset, bufs, 0)?;
                            self.refuse_direct("O_DIRECT read answered EINVAL");
                            return Ok(n);
                        }
                        r => return r,
                    }
                }
            }
            IoMode::DontCache => match read_buffered(file.as_fd(), offset, bufs, RWF_DONTCACHE) {
                Err(e) if is_flag_refusal(&e) => {
                    let n = read_buffered(file.as_fd(), offset, bufs, 0)?;
                    self.refuse_dontcache(&e);
                    return Ok(n);
                }
                r => return r,
            },
            IoMode::Buffered => {}
        }
        read_buffered(file.as_fd(), offset, bufs, 0)
    }

    /// Writes every byte of `data` (the payload's chunks, in order) at `offset`, as durable as
    /// `stable` asks. A write that fails part-way may have written some of the data (as with
    /// `pwrite`); repeating it is harmless, which the fallbacks rely on.
    pub fn write(
        &self,
        file: &OpenFile,
        offset: u64,
        data: &[Bytes],
        stable: StableHow,
    ) -> io::Result<usize> {
        match self.write_mode() {
            IoMode::Direct => {
                if let Some(d) = file.direct() {
                    match self.write_direct(file, d, offset, data, stable) {
                        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                            let n = write_buffered(file.as_fd(), offset, data, stable, 0)?;
                            self.refuse_direct("O_DIRECT write answered EINVAL");
                            return Ok(n);
                        }
                        r => return r,
                    }
                }
            }
            IoMode::DontCache => {
                match write_buffered(file.as_fd(), offset, data, stable, RWF_DONTCACHE) {
                    Err(e) if is_flag_refusal(&e) => {
                        let n = write_buffered(file.as_fd(), offset, data, stable, 0)?;
                        self.refuse_dontcache(&e);
                        return Ok(n);
                    }
                    r => return r,
                }
            }
            IoMode::Buffered => {}
        }
        write_buffered(file.as_fd(), offset, data, stable, 0)
    }

    /// An UNSTABLE write-behind flush: O_DIRECT where [`flush_goes_direct`] says so and the
    /// file has its twin (the whole flush, `flush_bytes`, decides, not this piece of it), else
    /// exactly [`ModeIo::write`].
    pub fn write_flush(
        &self,
        file: &OpenFile,
        offset: u64,
        data: &[Bytes],
        flush_bytes: u64,
    ) -> io::Result<usize> {
        let stable = StableHow::Unstable;
        if self.write_mode() == IoMode::Buffered
            && flush_goes_direct(IoMode::Buffered, flush_bytes)
            && !self.direct_refused.load(Ordering::Relaxed)
        {
            if let Some(d) = file.direct() {
                return match self.write_direct(file, d, offset, data, stable) {
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        let n = write_buffered(file.as_fd(), offset, data, stable, 0)?;
                        self.refuse_direct("O_DIRECT write answered EINVAL");
                        Ok(n)
                    }
                    r => r,
                };
            }
        }
        self.write(file, offset, data, stable)
    }

    /// Starts reading `len` bytes from `offset` into the page cache without waiting
    /// (`POSIX_FADV_WILLNEED`). A no-op in direct mode, whose reads do not use the page cache.
    ///
    /// In dontcache mode the pages read ahead are ordinary cached pages: a later
    /// `RWF_DONTCACHE` read finds them cached and leaves them there, so the hint trades some of
    /// dontcache's cache thrift for latency (they are clean, the first to be reclaimed).
    pub fn readahead(&self, file: &OpenFile, offset: u64, len: u64) {
        // Direct reads bypass the page cache, and a dontcache export promises to keep its data
        // out of it: a WILLNEED hint would fill the cache with pages the dontcache read then
        // finds cached and leaves there (measured: as much page cache as buffered mode).
        if len == 0 || matches!(self.read_mode(), IoMode::Direct | IoMode::DontCache) {
            return;
        }
        if let Err(e) = sys::fadvise_willneed(file.as_fd(), offset, len) {
            tracing::debug!(error = %e, offset, len, "readahead hint failed");
        }
    }

    /// A direct READ: zero copy when the caller's buffers allow it, else widened to the offset
    /// alignment and read through bounce buffers.
    fn read_direct<B: AsMut<[u8]>>(
        &self,
        d: &DirectFd,
        offset: u64,
        bufs: &mut [B],
    ) -> io::Result<usize> {
        let align = u64::from(d.offset_align_bytes);
        let mem = d.mem_align_bytes as usize;
        let want: usize = bufs.iter_mut().map(|b| b.as_mut().len()).sum();
        if want == 0 {
            return Ok(0);
        }
        let end = offset
            .checked_add(want as u64)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let caller_aligned = offset.is_multiple_of(align)
            && bufs.iter_mut().all(|b| {
                let b = b.as_mut();
                (b.as_ptr() as usize).is_multiple_of(mem) && (b.len() as u64).is_multiple_of(align)
            });
        if caller_aligned {
            let mut slices: Vec<IoSliceMut<'_>> = bufs
                .iter_mut()
                .map(|b| IoSliceMut::new(b.as_mut()))
                .collect();
            return read_aligned(d.as_fd(), &mut slices, offset, align);
        }
        let wide = widen(offset..end, align);
        let span = (wide.end - wide.start) as usize;
        let mut bounce = self
            .pool
            .take(span.min(DIRECT_BATCH_BYTES).div_ceil(BOUNCE_BYTES));
        let mut out = Filler::new(bufs);
        let mut pos = wide.start;
        let result = loop {
            if pos >= wide.end {
                break Ok(());
            }
            let batch = ((wide.end - pos) as usize).min(DIRECT_BATCH_BYTES);
            let n = {
                let mut slices = bounce_slices_mut(&mut bounce, batch);
                match read_aligned(d.as_fd(), &mut slices, pos, align) {
                    Ok(n) => n,
                    Err(e) => break Err(e),
                }
            };
            // The requested bytes this batch holds.
            let lo = offset.max(pos);
            let hi = end.min(pos + n as u64);
            if hi > lo {
                copy_out(&bounce, (lo - pos) as usize..(hi - pos) as usize, &mut out);
            }
            if n < batch {
                break Ok(());
            }
            pos += batch as u64;
        };
        self.pool.give(bounce);
        result.map(|()| out.written)
    }

    /// A direct WRITE: buffered head, O_DIRECT middle through bounce buffers, buffered tail.
    fn write_direct(
        &self,
        file: &OpenFile,
        d: &DirectFd,
        offset: u64,
        data: &[Bytes],
        stable: StableHow,
    ) -> io::Result<usize> {
        let total: usize = data.iter().map(|b| b.len()).sum();
        let align = self.page_bytes.max(u64::from(d.offset_align_bytes));
        let end = offset
            .checked_add(total as u64)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFBIG))?;
        let parts = split(offset..end, align);
        if parts.middle.is_empty() {
            return write_buffered(file.as_fd(), offset, data, stable, 0);
        }
        // Byte positions within `data` of each part.
        let at = |r: &Range<u64>| (r.start - offset) as usize..(r.end - offset) as usize;
        if !parts.head.is_empty() {
            let mut s = slices_of(data, at(&parts.head));
            write_slices(file.as_fd(), parts.head.start, &mut s, stable, 0)?;
        }
        self.write_middle(d, data, at(&parts.middle), parts.middle.start, stable)?;
        if !parts.tail.is_empty() {
            let mut s = slices_of(data, at(&parts.tail));
            write_slices(file.as_fd(), parts.tail.start, &mut s, stable, 0)?;
        }
        Ok(total)
    }

    /// Copies `data[bytes]` into bounce buffers a batch at a time and writes each batch with one
    /// O_DIRECT `pwritev2` at `file_offset` onwards.
    fn write_middle(
        &self,
        d: &DirectFd,
        data: &[Bytes],
        bytes: Range<usize>,
        file_offset: u64,
        stable: StableHow,
    ) -> io::Result<()> {
        let len = bytes.end - bytes.start;
        let mut bounce = self
            .pool
            .take(len.min(DIRECT_BATCH_BYTES).div_ceil(BOUNCE_BYTES));
        let mut src = Gather::new(data, bytes.start);
        let mut done = 0usize;
        let result = loop {
            if done >= len {
                break Ok(());
            }
            let batch = (len - done).min(DIRECT_BATCH_BYTES);
            fill_bounce(&mut bounce, batch, &mut src);
            let mut slices: Vec<IoSlice<'_>> = bounce_slices(&bounce, batch);
            if let Err(e) =
                write_slices(d.as_fd(), file_offset + done as u64, &mut slices, stable, 0)
            {
                break Err(e);
            }
            done += batch;
        };
        self.pool.give(bounce);
        result
    }
}

/// `RWF_DONTCACHE` (`include/uapi/linux/fs.h`, Linux 6.14).
const RWF_DONTCACHE: libc::c_int = 0x80;
const _: () = assert!(RWF_DONTCACHE == libc::RWF_DONTCACHE);

/// The answers of a kernel or file system that does not know or support an `RWF_*` flag.
fn is_flag_refusal(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL))
}

/// A write cut at alignment boundaries (see the module diagram).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Split {
    pub head: Range<u64>,
    pub middle: Range<u64>,
    pub tail: Range<u64>,
}

/// Cuts `r` into an unaligned head, a middle of whole `align` blocks and an unaligned tail. When
/// no whole block lies inside, everything is head (written buffered).
pub(crate) fn split(r: Range<u64>, align: u64) -> Split {
    debug_assert!(align.is_power_of_two());
    let a = align_up(r.start, align);
    let b = align_down(r.end, align);
    if a >= b {
        return Split {
            head: r.clone(),
            middle: r.end..r.end,
            tail: r.end..r.end,
        };
    }
    Split {
        head: r.start..a,
        middle: a..b,
        tail: b..r.end,
    }
}

/// `r` widened outwards to multiples of `align`.
pub(crate) fn widen(r: Range<u64>, align: u64) -> Range<u64> {
    align_down(r.start, align)..align_up(r.end, align)
}

fn align_down(x: u64, align: u64) -> u64 {
    x & !(align - 1)
}

fn align_up(x: u64, align: u64) -> u64 {
    // Offsets here are at most i64::MAX, so this cannot overflow.
    align_down(x + (align - 1), align)
}

/// Reads into `bufs` from `offset` until they are full or the file ends (buffered descriptor).
fn read_buffered<B: AsMut<[u8]>>(
    fd: BorrowedFd<'_>,
    offset: u64,
    bufs: &mut [B],
    flags: libc::c_int,
) -> io::Result<usize> {
    let mut slices: Vec<IoSliceMut<'_>> = bufs
        .iter_mut()
        .map(|b| IoSliceMut::new(b.as_mut()))
        .collect();
    let want: usize = slices.iter().map(|s| s.len()).sum();
    let mut rest = &mut slices[..];
    let mut count = 0usize;
    while !rest.is_empty() && count < want {
        let n = sys::preadv2(fd, rest, offset.saturating_add(count as u64), flags)?;
        if n == 0 {
            break;
        }
        count += n;
        IoSliceMut::advance_slices(&mut rest, n);
    }
    Ok(count)
}

/// Reads into aligned `bufs` from aligned `offset` on an O_DIRECT descriptor until they are full
/// or the file ends. A short read that ends off alignment is the end of file (the kernel stops
/// at `i_size`); reading on from there would be refused.
fn read_aligned(
    fd: BorrowedFd<'_>,
    bufs: &mut [IoSliceMut<'_>],
    offset: u64,
    align: u64,
) -> io::Result<usize> {
    let want: usize = bufs.iter().map(|s| s.len()).sum();
    let mut rest = bufs;
    let mut count = 0usize;
    while !rest.is_empty() && count < want {
        let n = sys::preadv2(fd, rest, offset + count as u64, 0)?;
        if n == 0 {
            break;
        }
        count += n;
        if !(count as u64).is_multiple_of(align) {
            break;
        }
        IoSliceMut::advance_slices(&mut rest, n);
    }
    Ok(count)
}

fn write_buffered(
    fd: BorrowedFd<'_>,
    offset: u64,
    data: &[Bytes],
    stable: StableHow,
    extra_flags: libc::c_int,
) -> io::Result<usize> {
    let total: usize = data.iter().map(|b| b.len()).sum();
    let mut slices = slices_of(data, 0..total);
    write_slices(fd, offset, &mut slices, stable, extra_flags)?;
    Ok(total)
}

/// Writes all of `slices` at `offset`, looping over short writes, with `stable`'s sync flag and
/// `extra_flags`. A kernel without `RWF_DSYNC`/`RWF_SYNC` (before 4.7) gets a `fdatasync`/`fsync`
/// afterwards instead; a refusal of `extra_flags` is returned to the caller, who knows what the
/// flag was for.
fn write_slices(
    fd: BorrowedFd<'_>,
    offset: u64,
    slices: &mut [IoSlice<'_>],
    stable: StableHow,
    extra_flags: libc::c_int,
) -> io::Result<()> {
    let sync_flags = match stable {
        StableHow::Unstable => 0,
        StableHow::DataSync => libc::RWF_DSYNC,
        StableHow::FileSync => libc::RWF_SYNC,
    };
    let want: usize = slices.iter().map(|s| s.len()).sum();
    let mut rest = slices;
    let mut done = 0usize;
    let mut sync_flags_ok = true;
    while done < want {
        let sf = if sync_flags_ok { sync_flags } else { 0 };
        match sys::pwritev2(fd, rest, offset + done as u64, sf | extra_flags) {
            Ok(0) => return Err(io::Error::from_raw_os_error(libc::EIO)),
            Ok(n) => {
                done += n;
                IoSlice::advance_slices(&mut rest, n);
            }
            Err(e) if extra_flags != 0 && is_flag_refusal(&e) => return Err(e),
            Err(e) if sf != 0 && e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                sync_flags_ok = false;
            }
            Err(e) => return Err(e),
        }
    }
    if !sync_flags_ok {
        match stable {
            StableHow::Unstable => {}
            StableHow::DataSync => sys::fdatasync(fd)?,
            StableHow::FileSync => sys::fsync(fd)?,
        }
    }
    Ok(())
}

/// The bytes `r` of the concatenated chunks, as slices of them (no copy).
fn slices_of(data: &[Bytes], r: Range<usize>) -> Vec<IoSlice<'_>> {
    let mut out = Vec::new();
    let mut at = 0usize;
    for chunk in data {
        let (lo, hi) = (at, at + chunk.len());
        at = hi;
        let (s, e) = (r.start.max(lo), r.end.min(hi));
        if s < e {
            out.push(IoSlice::new(&chunk[s - lo..e - lo]));
        }
        if hi >= r.end {
            break;
        }
    }
    out
}

/// Sequential reader over the concatenated chunks.
struct Gather<'a> {
    data: &'a [Bytes],
    idx: usize,
    off: usize,
}

impl<'a> Gather<'a> {
    fn new(data: &'a [Bytes], mut skip: usize) -> Gather<'a> {
        let mut idx = 0;
        while idx < data.len() && skip >= data[idx].len() {
            skip -= data[idx].len();
            idx += 1;
        }
        Gather {
            data,
            idx,
            off: skip,
        }
    }

    /// Fills `dst` completely; the caller never asks beyond the data.
    fn fill(&mut self, mut dst: &mut [u8]) {
        while !dst.is_empty() {
            let chunk = &self.data[self.idx][self.off..];
            let n = chunk.len().min(dst.len());
            dst[..n].copy_from_slice(&chunk[..n]);
            dst = &mut dst[n..];
            self.off += n;
            if self.off == self.data[self.idx].len() {
                self.idx += 1;
                self.off = 0;
            }
        }
    }
}

/// Sequential writer into the caller's READ buffers.
struct Filler<'a, B> {
    bufs: &'a mut [B],
    idx: usize,
    off: usize,
    written: usize,
}

impl<'a, B: AsMut<[u8]>> Filler<'a, B> {
    fn new(bufs: &'a mut [B]) -> Self {
        Filler {
            bufs,
            idx: 0,
            off: 0,
            written: 0,
        }
    }

    /// Appends `src`; the caller never gives more than the buffers hold.
    fn put(&mut self, mut src: &[u8]) {
        while !src.is_empty() {
            let room = &mut self.bufs[self.idx].as_mut()[self.off..];
            let n = room.len().min(src.len());
            room[..n].copy_from_slice(&src[..n]);
            src = &src[n..];
            self.off += n;
            self.written += n;
            if self.off == self.bufs[self.idx].as_mut().len() {
                self.idx += 1;
                self.off = 0;
            }
        }
    }
}

/// Copies bytes `r` of the concatenated bounce buffers to `out`.
fn copy_out<B: AsMut<[u8]>>(bounce: &[Bounce], r: Range<usize>, out: &mut Filler<'_, B>) {
    let mut pos = r.start;
    while pos < r.end {
        let (i, o) = (pos / BOUNCE_BYTES, pos % BOUNCE_BYTES);
        let n = (BOUNCE_BYTES - o).min(r.end - pos);
        out.put(&bounce[i].bytes()[o..o + n]);
        pos += n;
    }
}

fn fill_bounce(bounce: &mut [Bounce], batch: usize, src: &mut Gather<'_>) {
    let mut left = batch;
    for b in bounce.iter_mut() {
        if left == 0 {
            break;
        }
        let n = left.min(BOUNCE_BYTES);
        src.fill(&mut b.bytes_mut()[..n]);
        left -= n;
    }
}

/// The first `batch` bytes of the bounce buffers as an iovec.
fn bounce_slices(bounce: &[Bounce], batch: usize) -> Vec<IoSlice<'_>> {
    let mut left = batch;
    let mut out = Vec::with_capacity(batch.div_ceil(BOUNCE_BYTES));
    for b in bounce {
        if left == 0 {
            break;
        }
        let n = left.min(BOUNCE_BYTES);
        out.push(IoSlice::new(&b.bytes()[..n]));
        left -= n;
    }
    out
}

fn bounce_slices_mut(bounce: &mut [Bounce], batch: usize) -> Vec<IoSliceMut<'_>> {
    let mut left = batch;
    let mut out = Vec::with_capacity(batch.div_ceil(BOUNCE_BYTES));
    for b in bounce.iter_mut() {
        if left == 0 {
            break;
        }
        let n = left.min(BOUNCE_BYTES);
        out.push(IoSliceMut::new(&mut b.bytes_mut()[..n]));
        left -= n;
    }
    out
}

/// One [`BOUNCE_BYTES`] buffer aligned to [`BOUNCE_ALIGN_BYTES`]: a `Vec` of page-aligned
/// pages, so the allocation is exactly 64 KiB, one chunk (the server's data path allocates
/// nothing larger, `tests/alloc_data_path.rs`; a byte `Vec` with room to align inside it was
/// 68 KiB), and its bytes are one contiguous slice.
struct Bounce {
    pages: Vec<BouncePage>,
}

/// One 4 KiB page of a bounce buffer; its alignment is the buffer's.
#[repr(C, align(4096))]
struct BouncePage([u8; BOUNCE_ALIGN_BYTES]);

const _: () = assert!(BOUNCE_BYTES.is_multiple_of(BOUNCE_ALIGN_BYTES));
const _: () = assert!(std::mem::align_of::<BouncePage>() == BOUNCE_ALIGN_BYTES);
const _: () = assert!(std::mem::size_of::<BouncePage>() == BOUNCE_ALIGN_BYTES);

impl Bounce {
    fn new() -> Bounce {
        let pages = (0..BOUNCE_BYTES / BOUNCE_ALIGN_BYTES)
            .map(|_| BouncePage([0; BOUNCE_ALIGN_BYTES]))
            .collect();
        Bounce { pages }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `BouncePage` is `repr(C)` around a byte array whose size equals its
        // alignment, so the pages are contiguous initialised bytes with no padding:
        // BOUNCE_BYTES of them, borrowed for as long as `self` is.
        unsafe { std::slice::from_raw_parts(self.pages.as_ptr().cast::<u8>(), BOUNCE_BYTES) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, borrowed mutably for as long as `self` is.
        unsafe {
            std::slice::from_raw_parts_mut(self.pages.as_mut_ptr().cast::<u8>(), BOUNCE_BYTES)
        }
    }
}

/// Bounce buffers kept between calls, at most `keep` of them.
struct BouncePool {
    keep: usize,
    free: Mutex<Vec<Bounce>>,
}

impl BouncePool {
    fn new(keep: usize) -> BouncePool {
        BouncePool {
            keep,
            free: Mutex::new(Vec::new()),
        }
    }

    /// `n` buffers (at most a batch's worth), reused when possible.
    fn take(&self, n: usize) -> Vec<Bounce> {
        debug_assert!(n <= DIRECT_BATCH_BYTES / BOUNCE_BYTES);
        let mut out = Vec::with_capacity(n);
        {
            let mut free = self.lock();
            while out.len() < n {
                match free.pop() {
                    Some(b) => out.push(b),
                    None => break,
                }
            }
        }
        while out.len() < n {
            out.push(Bounce::new());
        }
        out
    }

    fn give(&self, bufs: Vec<Bounce>) {
        let mut free = self.lock();
        for b in bufs {
            if free.len() >= self.keep {
                break;
            }
            free.push(b);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Bounce>> {
        // The list is only ever pushed and popped: any state a panic left is usable.
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_long_flushes_of_a_buffered_export_go_direct() {
        let min = STREAMING_DIRECT_MIN_BYTES;
        // Buffered: the stream threshold decides.
        assert!(!flush_goes_direct(IoMode::Buffered, 0));
        assert!(!flush_goes_direct(IoMode::Buffered, 4096));
        assert!(!flush_goes_direct(IoMode::Buffered, min - 1));
        assert!(flush_goes_direct(IoMode::Buffered, min));
        assert!(flush_goes_direct(IoMode::Buffered, 8 * min));
        // Direct: everything, as configured; dontcache: nothing, as configured.
        for n in [1, min - 1, min, 8 * min] {
            assert!(flush_goes_direct(IoMode::Direct, n));
            assert!(!flush_goes_direct(IoMode::DontCache, n));
        }
    }

    #[test]
    fn buffered_exports_open_twins_for_writers_only_until_refused() {
        let buffered = ModeIo::new(
            IoModes {
                read: IoMode::Buffered,
                write: IoMode::Buffered,
            },
            PathBuf::from("/x"),
        );
        assert!(!buffered.wants_direct_twin(false));
        assert!(buffered.wants_direct_twin(true));
        buffered.refuse_direct("test");
        assert!(!buffered.wants_direct_twin(true));
        let dontcache = ModeIo::new(
            IoModes {
                read: IoMode::Buffered,
                write: IoMode::DontCache,
            },
            PathBuf::from("/x"),
        );
        assert!(!dontcache.wants_direct_twin(true));
        let direct_reads = ModeIo::new(
            IoModes {
                read: IoMode::Direct,
                write: IoMode::Buffered,
            },
            PathBuf::from("/x"),
        );
        assert!(direct_reads.wants_direct_twin(false));
    }

    #[test]
    fn split_cuts_head_middle_tail() {
        let s = split(100..10_000, 4096);
        assert_eq!(s.head, 100..4096);
        assert_eq!(s.middle, 4096..8192);
        assert_eq!(s.tail, 8192..10_000);
        // Exactly aligned: all middle.
        let s = split(4096..12_288, 4096);
        assert_eq!((s.head.is_empty(), s.tail.is_empty()), (true, true));
        assert_eq!(s.middle, 4096..12_288);
        // No whole block inside: all head.
        let s = split(4000..8000, 4096);
        assert_eq!(s.head, 4000..8000);
        assert!(s.middle.is_empty() && s.tail.is_empty());
        // Single byte, empty.
        assert!(split(5..6, 512).middle.is_empty());
        assert!(split(0..0, 512).middle.is_empty());
    }

    #[test]
    fn split_parts_cover_the_range_in_order() {
        for (start, len, align) in [
            (0, 1, 512),
            (511, 2, 512),
            (1, 1 << 20, 4096),
            (4095, 8193, 4096),
        ] {
            let s = split(start..start + len, align);
            assert_eq!(s.head.start, start);
            assert_eq!(
                s.head.end,
                if s.middle.is_empty() {
                    start + len
                } else {
                    s.middle.start
                }
            );
            if !s.middle.is_empty() {
                assert_eq!(s.middle.start % align, 0);
                assert_eq!(s.middle.end % align, 0);
                assert_eq!(s.tail.start, s.middle.end);
                assert_eq!(s.tail.end, start + len);
            }
        }
    }

    #[test]
    fn widen_to_alignment() {
        assert_eq!(widen(100..600, 512), 0..1024);
        assert_eq!(widen(512..1024, 512), 512..1024);
        assert_eq!(widen(0..1, 4096), 0..4096);
    }

    #[test]
    fn slices_and_gather_agree() {
        let data: Vec<Bytes> = [&b"abc"[..], b"", b"defgh", b"ij"]
            .iter()
            .map(|s| Bytes::copy_from_slice(s))
            .collect();
        let joined: Vec<u8> = slices_of(&data, 2..9)
            .iter()
            .flat_map(|s| s.to_vec())
            .collect();
        assert_eq!(joined, b"cdefghi");
        let mut g = Gather::new(&data, 2);
        let mut out = [0u8; 7];
        g.fill(&mut out);
        assert_eq!(&out, b"cdefghi");
    }

    #[test]
    fn bounce_buffers_are_aligned_and_pooled() {
        let pool = BouncePool::new(2);
        let bufs = pool.take(3);
        for b in &bufs {
            assert_eq!(b.bytes().as_ptr() as usize % BOUNCE_ALIGN_BYTES, 0);
            assert_eq!(b.bytes().len(), BOUNCE_BYTES);
        }
        pool.give(bufs);
        assert_eq!(pool.lock().len(), 2, "keeps at most its limit");
    }

    #[test]
    fn filler_spans_buffers() {
        let mut bufs = vec![vec![0u8; 2], vec![], vec![0u8; 3]];
        let mut f = Filler::new(&mut bufs);
        f.put(b"ab");
        f.put(b"cde");
        assert_eq!(f.written, 5);
        assert_eq!(bufs, vec![b"ab".to_vec(), vec![], b"cde".to_vec()]);
    }
}
