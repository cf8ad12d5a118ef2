//! READ, WRITE, COMMIT and READ_PLUS of a COMPOUND through the shared data path (issue 13).
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
//! held while data moves. [`run`] is what the service's executor runs; [`DataOps`] is the
//! synchronous runner behind [`super::compound::Inline`] (the executor of tests and
//! simulations), and [`PoolData`] implements it over the same [`DataPath`] by blocking on each
//! op's future.
//!
//! A READ may come back spliced only when the processor asked for it ([`DataOp::Read`]'s
//! `splice_ok`): the READ is the COMPOUND's last op and the slot will not keep the reply
//! (see the reply cache notes in [`super::compound`]).
//!
//! READ_PLUS ([`read_plus`]) is READ with the holes of a sparse file told apart: the range is
//! mapped with SEEK_DATA / SEEK_HOLE on a blocking thread ([`map_segments`], pure), then each
//! data segment is a READ of the same data path.
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

use crate::backend::{Caller, FileHandle, FileSystem, FsError, SeekWhat, StableHow};
use crate::datapath::{CommitDone, DataPath, ReadData, ReadDone};
use crate::io::Engine;
use crate::splice::PipePool;
use crate::stats::Stats;
use bytes::Bytes;
use sluice_xdr::nfs4::ops::{Data4, DataInfo4, ReadPlusContent};
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
    /// READ_PLUS (RFC 7862 §15.10): as `Read`, its data and holes told apart (see
    /// [`read_plus`]). `splice_ok` as READ's: only a range sent as one data segment is spliced.
    ReadPlus {
        offset: u64,
        count: u32,
        splice_ok: bool,
    },
}

/// What a [`DataReq`] came to when it succeeded.
pub enum DataDone {
    Read(ReadDone),
    Write(WriteDone),
    Commit(CommitDone),
    ReadPlus(ReadPlusDone),
}

/// What a READ_PLUS came to.
pub enum ReadPlusDone {
    /// One data segment at `offset`: the plain READ's result (maybe spliced), for a range with
    /// no hole worth sending, a small one, or one the file system cannot map.
    Dense { offset: u64, done: ReadDone },
    /// Data (pooled chunks) and holes, in order, covering `offset` up to where the last ends.
    Sparse {
        eof: bool,
        contents: Vec<ReadPlusContent>,
    },
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
        DataOp::ReadPlus {
            offset,
            count,
            splice_ok,
        } => read_plus(path, fs, caller, fh, offset, count, splice_ok)
            .await
            .map(DataDone::ReadPlus),
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

/// A synchronous runner of data ops, for [`super::compound::Inline`].
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

// ----- READ_PLUS ----------------------------------------------------------------------------

/// READ_PLUS ranges shorter than this are read as one data segment, without looking for
/// holes: a hole must be at least [`READ_PLUS_HOLE_MIN`] to be sent as one, so a shorter range
/// could only be all hole, and two `lseek`s cost more than the zeros they would save.
pub const READ_PLUS_SPARSE_MIN: u32 = 64 * 1024;

/// Holes shorter than this inside a READ_PLUS range are sent as data (zeros read from the
/// file). A hole segment is 20 bytes on the wire against its length in zeros, but each data
/// segment after a hole is a READ of its own on the server and a segment the client places
/// apart: one 64 KiB pooled chunk's worth of zeros is cheap next to that. File systems map
/// holes in blocks (4 KiB on ext4 and xfs), so a smaller threshold would split files with
/// small zero runs into many segments.
pub const READ_PLUS_HOLE_MIN: u64 = 64 * 1024;

/// Segments in one READ_PLUS reply at most. Past it the reply ends early (`rpr_eof` false)
/// and the client asks for the rest, as after a short READ. 16 covers a 1 MiB READ of a file
/// that alternates 64 KiB of data and holes; the bound keeps the reply's iovec and the
/// server's `lseek`s per call small.
pub const READ_PLUS_SEGMENTS_MAX: usize = 16;

/// `lseek` calls one READ_PLUS makes at most while mapping its range (small holes merged into
/// data make more calls than segments). Past it the mapping stops where it got to.
const READ_PLUS_SEEKS_MAX: usize = 4 * READ_PLUS_SEGMENTS_MAX;

/// A range of a READ_PLUS reply: `[start, end)`, data or a hole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub hole: bool,
    pub start: u64,
    pub end: u64,
}

/// READ_PLUS (RFC 7862 §15.10) through the shared data path.
///
/// ```text
///   held writes of the file? ─▶ land them all (a hole may be where a held write goes)
///   range < READ_PLUS_SPARSE_MIN, or no hole of READ_PLUS_HOLE_MIN in it (one SEEK_HOLE),
///   or a file system that cannot say ─▶ the plain READ as one data segment (spliced if last)
///   else ─▶ map it: SEEK_DATA / SEEK_HOLE (map_segments), then each data segment is a READ
///           into pooled chunks and each hole a (offset, length) pair
/// ```
///
/// So a dense range costs one `lseek` more than a READ and keeps READ's splice, and a sparse
/// one moves only its data. Data landing in a hole while the range is mapped reads as zeros
/// in this reply, as a READ racing the same write could; held writes found again after the
/// mapping make it a plain READ, which lands them.
pub async fn read_plus(
    path: DataPath<'_>,
    fs: Arc<dyn FileSystem>,
    caller: Caller,
    fh: FileHandle,
    offset: u64,
    count: u32,
    splice_ok: bool,
) -> Result<ReadPlusDone, FsError> {
    let count = count.min(fs.read_bytes_max());
    let map = if count >= READ_PLUS_SPARSE_MIN {
        if path.io.wb.holds(fh.as_bytes()) {
            path.before_resize(&fh).await;
        }
        let (fs, caller, fh) = (fs.clone(), caller.clone(), fh.clone());
        path.io
            .spawn(move || map_file(&*fs, &caller, &fh, offset, count))
            .await
            .flatten()
    } else {
        None
    };
    let Some((size, segs)) = map.filter(|_| !path.io.wb.holds(fh.as_bytes())) else {
        let done = path
            .read(fs, caller, fh, offset, count, splice_ok)
            .await
            .map_err(|(e, _)| e)?;
        return Ok(ReadPlusDone::Dense { offset, done });
    };
    let mut contents = Vec::with_capacity(segs.len());
    let mut end = offset;
    for s in segs {
        if s.hole {
            contents.push(ReadPlusContent::Hole(DataInfo4 {
                offset: s.start,
                length: s.end - s.start,
            }));
            end = s.end;
            continue;
        }
        // At most `count` (a u32), as every segment lies within the range.
        let want = (s.end - s.start) as u32;
        let got = match path
            .read(fs.clone(), caller.clone(), fh.clone(), s.start, want, false)
            .await
        {
            Ok(d) => d,
            // What was read so far is a good (short) reply; an error before it is the op's.
            Err(_) if !contents.is_empty() => break,
            Err((e, _)) => return Err(e),
        };
        let ReadData::Chunks(data) = got.data else {
            debug_assert!(false, "a READ that was not to be spliced was");
            return Err(FsError::ServerFault);
        };
        contents.push(ReadPlusContent::Data(Data4 {
            offset: s.start,
            data,
        }));
        end = s.start + u64::from(got.count);
        if got.count < want {
            break; // the file shrank meanwhile
        }
    }
    Ok(ReadPlusDone::Sparse {
        eof: end >= size,
        contents,
    })
}

/// The size of the file and the segments of `[offset, offset + count)` below it, or `None` to
/// read the range as one data segment (see [`map_segments`]; also when the file system has no
/// SEEK or fails).
fn map_file(
    fs: &dyn FileSystem,
    caller: &Caller,
    fh: &FileHandle,
    offset: u64,
    count: u32,
) -> Option<(u64, Vec<Segment>)> {
    let size = fs.getattr(fh).ok()?.size;
    let segs = map_segments(size, offset, u64::from(count), |at, what| {
        match fs.seek(caller, fh, at, what) {
            Ok(s) => Some(s.offset),
            // At or past the end: only the implicit hole is there.
            Err((FsError::Nxio, _)) => Some(size),
            Err(_) => None,
        }
    })?;
    Some((size, segs))
}

/// Splits `[offset, offset + count)` of a file of `size` bytes into data and hole segments
/// with `seek(at, what)` (`lseek`'s SEEK_DATA / SEEK_HOLE: the first offset at or after `at`
/// where `what` starts, the size if none; `None` when the file system cannot say). Pure: the
/// file system is behind `seek`.
///
/// `None` means "send one data segment": a range shorter than [`READ_PLUS_SPARSE_MIN`], at or
/// past the end, with no hole of [`READ_PLUS_HOLE_MIN`] (shorter holes count as data), or a
/// `seek` that failed. Otherwise the segments start at `offset`, follow each other without gap,
/// alternate between data and holes, and end at the range's end or the file's, whichever is
/// first, or earlier after [`READ_PLUS_SEGMENTS_MAX`] segments or [`READ_PLUS_SEEKS_MAX`]
/// seeks. Answers that go backwards or past the range are clamped, so a file changing under
/// the mapping cannot make it loop or claim bytes outside the range.
pub fn map_segments(
    size: u64,
    offset: u64,
    count: u64,
    mut seek: impl FnMut(u64, SeekWhat) -> Option<u64>,
) -> Option<Vec<Segment>> {
    let limit = offset.saturating_add(count).min(size);
    if count < u64::from(READ_PLUS_SPARSE_MIN) || offset >= limit {
        return None;
    }
    let mut seeks = 0usize;
    // The common case first: no hole in the range at all, one call.
    seeks += 1;
    let first_hole = seek(offset, SeekWhat::Hole)?.clamp(offset, limit);
    if first_hole >= limit {
        return None;
    }
    let mut segs: Vec<Segment> = Vec::new();
    // Adds `[start, end)`, merged into the last segment when of the same kind; false when the
    // segment bound is reached (the range then ends before it).
    let push = |segs: &mut Vec<Segment>, hole: bool, start: u64, end: u64| -> bool {
        if end <= start {
            return true;
        }
        let full = segs.len() >= READ_PLUS_SEGMENTS_MAX;
        match segs.last_mut() {
            Some(last) if last.hole == hole && last.end == start => {
                last.end = end;
                true
            }
            _ if full => false,
            _ => {
                segs.push(Segment { hole, start, end });
                true
            }
        }
    };
    let mut pos = offset;
    let mut next_hole = Some(first_hole);
    'map: while pos < limit {
        // Data from `pos` up to the next hole.
        let hole_at = match next_hole.take() {
            Some(h) => h,
            None => {
                seeks += 1;
                seek(pos, SeekWhat::Hole)?.clamp(pos, limit)
            }
        };
        if !push(&mut segs, false, pos, hole_at) {
            break 'map;
        }
        pos = hole_at;
        if pos >= limit || seeks >= READ_PLUS_SEEKS_MAX {
            break;
        }
        // A hole from `pos` up to the next data (none: to the end of the file).
        seeks += 1;
        let data_at = seek(pos, SeekWhat::Data)?.clamp(pos, limit);
        let small = data_at - pos < READ_PLUS_HOLE_MIN && data_at < limit;
        if !push(&mut segs, !small, pos, data_at) {
            break 'map;
        }
        if data_at == pos {
            // The file system contradicts itself (a hole at `pos`, data at `pos`): data it is,
            // for at least one more seek.
            seeks += 1;
            next_hole = Some(seek(pos, SeekWhat::Hole)?.clamp(pos, limit).max(pos + 1));
        }
        pos = data_at;
        if seeks >= READ_PLUS_SEEKS_MAX {
            break;
        }
    }
    // Holes too small to send count as data: no hole left means one data segment.
    if segs.iter().all(|s| !s.hole) {
        return None;
    }
    Some(segs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = 1024;

    /// `lseek` over a file whose data is `runs` (sorted, disjoint `[start, end)`), `size` long.
    fn model(size: u64, runs: &[(u64, u64)]) -> impl FnMut(u64, SeekWhat) -> Option<u64> + '_ {
        move |at, what| {
            let in_run = runs.iter().find(|&&(s, e)| s <= at && at < e);
            Some(match (what, in_run) {
                (SeekWhat::Data, Some(_)) => at,
                (SeekWhat::Data, None) => {
                    runs.iter().map(|r| r.0).find(|&s| s > at).unwrap_or(size)
                }
                (SeekWhat::Hole, Some(&(_, e))) => e.min(size),
                (SeekWhat::Hole, None) => at,
            })
        }
    }

    #[test]
    fn a_range_with_holes_maps_to_alternating_segments() {
        let runs = [(0, 64 * K), (512 * K, 576 * K), (960 * K, 1024 * K)];
        let segs = map_segments(1024 * K, 0, 1 << 20, model(1024 * K, &runs)).unwrap();
        let got: Vec<_> = segs.iter().map(|s| (s.hole, s.start, s.end)).collect();
        assert_eq!(
            got,
            [
                (false, 0, 64 * K),
                (true, 64 * K, 512 * K),
                (false, 512 * K, 576 * K),
                (true, 576 * K, 960 * K),
                (false, 960 * K, 1024 * K),
            ]
        );
    }

    #[test]
    fn dense_small_and_out_of_range_reads_are_one_data_segment() {
        let size = 1024 * K;
        let all = [(0, size)];
        assert_eq!(map_segments(size, 0, 1 << 20, model(size, &all)), None);
        // Small: no seek at all.
        let mut calls = 0;
        let r = map_segments(size, 0, 4096, |_, _| {
            calls += 1;
            Some(0)
        });
        assert_eq!((r, calls), (None, 0));
        // At or past the end.
        assert_eq!(map_segments(size, size, 1 << 20, model(size, &all)), None);
        // Only holes shorter than READ_PLUS_HOLE_MIN: data.
        let runs = [(0, 8 * K), (40 * K, 48 * K), (100 * K, size)];
        assert_eq!(map_segments(size, 0, 1 << 20, model(size, &runs)), None);
        // A file system that cannot say.
        assert_eq!(map_segments(size, 0, 1 << 20, |_, _| None), None);
    }

    #[test]
    fn the_segment_and_seek_bounds_hold_and_a_lying_file_system_cannot_loop() {
        // 64 KiB of data every 128 KiB: 2 segments per 128 KiB.
        let size = 8 << 20;
        let runs: Vec<(u64, u64)> = (0..64)
            .map(|i| (i * 128 * K, i * 128 * K + 64 * K))
            .collect();
        let segs = map_segments(size, 0, size, model(size, &runs)).unwrap();
        assert_eq!(segs.len(), READ_PLUS_SEGMENTS_MAX);
        assert_eq!(segs.last().unwrap().end, 1 << 20);
        // Every answer says "right here": terminates within the seek bound.
        let mut calls = 0;
        let r = map_segments(size, 0, size, |at, _| {
            calls += 1;
            Some(at)
        });
        assert!(calls <= READ_PLUS_SEEKS_MAX + 1, "{calls} seeks");
        if let Some(segs) = r {
            assert!(segs.len() <= READ_PLUS_SEGMENTS_MAX);
        }
        // Answers outside the range are clamped into it.
        let segs = map_segments(size, 64 * K, 256 * K, |_, what| match what {
            SeekWhat::Hole => Some(0),
            SeekWhat::Data => Some(u64::MAX),
        })
        .unwrap();
        assert!(segs.iter().all(|s| s.start >= 64 * K && s.end <= 320 * K));
    }

    /// Random layouts against the model: the segments start at the offset, follow each other,
    /// alternate, stay in the range and the file, holes hold no data and are at least
    /// READ_PLUS_HOLE_MIN unless they end the range, and data segments start on data or on a
    /// merged small hole.
    #[test]
    fn random_layouts_map_to_what_the_file_holds() {
        let mut seed = 0x5eed_u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for _ in 0..2000 {
            let size = (1 + next(64)) * 16 * K;
            let mut runs = Vec::new();
            let mut at = next(4) * 16 * K;
            while at < size {
                let len = (1 + next(8)) * 8 * K;
                runs.push((at, (at + len).min(size)));
                at += len + next(12) * 8 * K;
            }
            let offset = next(size / K + 1) * K;
            let count = next(2 << 20);
            let limit = (offset + count).min(size);
            let Some(segs) = map_segments(size, offset, count, model(size, &runs)) else {
                continue;
            };
            assert!(segs.len() <= READ_PLUS_SEGMENTS_MAX);
            assert_eq!(segs[0].start, offset);
            for w in segs.windows(2) {
                assert_eq!(w[0].end, w[1].start, "{segs:?}");
                assert_ne!(w[0].hole, w[1].hole, "{segs:?}");
            }
            for s in &segs {
                assert!(s.start < s.end && s.end <= limit, "{s:?} of {limit}");
                if s.hole {
                    assert!(
                        runs.iter().all(|&(a, b)| b <= s.start || a >= s.end),
                        "data in {s:?}: {runs:?}"
                    );
                    assert!(s.end - s.start >= READ_PLUS_HOLE_MIN || s.end == limit);
                }
            }
        }
    }
}
