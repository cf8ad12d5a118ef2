//! Zero-copy READ replies: file pages go to the socket through a pipe, never through our memory.
//!
//! ```text
//!   blocking pool:  splice(file -> pipe)        the pipe now holds references to page-cache pages
//!   reply:          RPC header | <pipe: n bytes> | XDR padding
//!   writer task:    sendmsg(header, MSG_MORE); splice(pipe -> socket); write(padding)
//! ```
//!
//! A buffered READ over TCP copies every byte twice in the server (page cache to a pooled
//! chunk, chunk to the socket buffer): on a warm 1 MiB stream those two copies are ~40 % of the
//! server's CPU. knfsd avoids both by splicing page-cache pages into the socket; this does the
//! same from user space. The chunk path ([`crate::io::pool`]) remains for everything splicing cannot
//! serve: UDP (one datagram per reply), dontcache and direct exports (splice honours neither
//! RWF_DONTCACHE nor O_DIRECT), small READs (below [`SPLICE_MIN_BYTES`] the copy is cheaper than
//! the extra system calls), and whenever every pipe is lent out.
//!
//! Semantics: the pipe holds references to the pages, not a copy. Data written to the same range
//! after the splice and before the reply leaves may be what the client receives, as with knfsd's
//! splice reads; the attributes in the reply are taken after the splice. NFS gives no stronger
//! promise (close-to-open, not atomic reads against concurrent writers).
//!
//! Bounds: at most `pipes_max` pipes exist; each holds one reply's data and is returned to the
//! pool once the writer has emptied it. A pipe that was not emptied (a connection that died
//! mid-reply) is closed, not reused, so no reply can ever carry another's leftover bytes.

use bytes::Bytes;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crate::stats::Stats;

/// READs smaller than this use the chunk path: for a few KiB the copy costs less than the two
/// extra system calls of a splice.
pub const SPLICE_MIN_BYTES: usize = 32 * 1024;

/// Pipes in existence at once, by default: more than the READs one busy server has in flight
/// on its connections' sockets at once (each pipe pins at most one reply's pages).
pub const PIPES_MAX_DEFAULT: usize = 256;

/// A pipe's capacity unless changed: 16 pages.
const PIPE_DEFAULT_BYTES: usize = 64 * 1024;

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// One pipe: the read end feeds the socket, the write end is filled from a file.
#[derive(Debug)]
pub struct Pipe {
    rd: OwnedFd,
    wr: OwnedFd,
    /// Capacity in bytes (`F_GETPIPE_SZ`).
    capacity: usize,
}

impl Pipe {
    /// A new pipe of at least `want` bytes if the kernel allows it (root may exceed
    /// `/proc/sys/fs/pipe-max-size`; others get at most that).
    fn new(want: usize) -> io::Result<Pipe> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just returned by pipe2 and belong to nobody else.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // Past /proc/sys/fs/pipe-max-size (1 MiB by default) F_SETPIPE_SZ needs CAP_SYS_RESOURCE:
        // ask for less until the kernel agrees, down to the default it already has.
        let mut want = want.clamp(PIPE_DEFAULT_BYTES, 1 << 30).next_power_of_two();
        let capacity = loop {
            // SAFETY: plain fcntl on a descriptor we own.
            let set =
                unsafe { libc::fcntl(wr.as_raw_fd(), libc::F_SETPIPE_SZ, want as libc::c_int) };
            if set > 0 {
                break set as usize;
            }
            if want <= PIPE_DEFAULT_BYTES {
                // SAFETY: as above.
                let got = unsafe { libc::fcntl(wr.as_raw_fd(), libc::F_GETPIPE_SZ) };
                if got <= 0 {
                    return Err(io::Error::last_os_error());
                }
                break got as usize;
            }
            want /= 2;
        };
        Ok(Pipe { rd, wr, capacity })
    }

    /// Whether a READ of `count` bytes at `offset` fits: the pipe takes one slot per page the
    /// range touches, so the file-to-pipe splice never has to wait for the pipe to drain.
    pub fn fits(&self, offset: u64, count: usize) -> bool {
        let page = page_size();
        (offset % page as u64) as usize + count.div_ceil(page) * page <= self.capacity
    }
}

/// Moves up to `count` bytes of `file` at `offset` into the (empty) pipe. Returns the bytes
/// moved: fewer than `count` only at the end of the file (or if the pipe filled, which
/// [`Pipe::fits`] rules out). Blocks on the file (a cold page), never on the pipe.
pub fn fill_from_file(
    pipe: &Pipe,
    file: BorrowedFd<'_>,
    offset: u64,
    count: usize,
) -> io::Result<usize> {
    let mut off = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut got = 0usize;
    while got < count {
        // SAFETY: valid descriptors; `off` is a live i64 the kernel updates.
        let n = unsafe {
            libc::splice(
                file.as_raw_fd(),
                &mut off,
                pipe.wr.as_raw_fd(),
                std::ptr::null_mut(),
                count - got,
                libc::SPLICE_F_NONBLOCK,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                // The pipe is full: a short read, which the client continues.
                Some(libc::EAGAIN) if got > 0 => break,
                _ => return Err(e),
            }
        }
        if n == 0 {
            break; // end of file
        }
        got += n as usize;
    }
    Ok(got)
}

/// Moves up to `len` bytes from the pipe into the socket `sock` (non-blocking). `more` sets
/// SPLICE_F_MORE: the reply continues after this, so TCP may hold a partial segment.
/// `Err(WouldBlock)` when the socket's send buffer is full.
pub fn drain_to_socket(pipe: &Pipe, sock: RawFd, len: usize, more: bool) -> io::Result<usize> {
    let flags =
        libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE | if more { libc::SPLICE_F_MORE } else { 0 };
    loop {
        // SAFETY: valid descriptors; no offsets (both are streams).
        let n = unsafe {
            libc::splice(
                pipe.rd.as_raw_fd(),
                std::ptr::null_mut(),
                sock,
                std::ptr::null_mut(),
                len,
                flags,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// Pipes for spliced READ replies; bounded, reused once emptied.
pub struct PipePool {
    free: Mutex<Vec<Pipe>>,
    /// Pipes in existence (lent out or free).
    live: AtomicUsize,
    pipes_max: usize,
    /// Capacity asked of each new pipe.
    pipe_bytes: usize,
    /// Where the bytes spliced and the pipes in existence are published.
    stats: Arc<Stats>,
    /// READs that wanted a pipe when none was left (they used chunks).
    pub exhausted: AtomicU64,
}

impl std::fmt::Debug for PipePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipePool")
            .field("live", &self.live)
            .field("pipes_max", &self.pipes_max)
            .field("pipe_bytes", &self.pipe_bytes)
            .finish_non_exhaustive()
    }
}

impl PipePool {
    /// A pool of at most `pipes_max` pipes, each meant to carry one reply of up to
    /// `reply_bytes_max` bytes (0 pipes: splicing disabled).
    pub fn new(pipes_max: usize, reply_bytes_max: usize, stats: Arc<Stats>) -> Arc<PipePool> {
        Arc::new(PipePool {
            free: Mutex::new(Vec::new()),
            live: AtomicUsize::new(0),
            pipes_max,
            pipe_bytes: reply_bytes_max + page_size(),
            stats,
            exhausted: AtomicU64::new(0),
        })
    }

    /// Whether READs may be spliced at all.
    pub fn enabled(&self) -> bool {
        self.pipes_max > 0
    }

    /// A pipe able to carry `count` bytes read at `offset`, or `None` (every pipe lent out, or
    /// the kernel refused a pipe that large): the caller uses the chunk path.
    pub fn acquire(self: &Arc<Self>, offset: u64, count: usize) -> Option<LentPipe> {
        if !self.enabled() {
            return None;
        }
        let pipe = match self.free.lock().expect("pipe pool lock").pop() {
            Some(p) => p,
            None => {
                if self.live.fetch_add(1, Relaxed) >= self.pipes_max {
                    self.live.fetch_sub(1, Relaxed);
                    self.exhausted.fetch_add(1, Relaxed);
                    return None;
                }
                match Pipe::new(self.pipe_bytes) {
                    Ok(p) => {
                        self.publish();
                        p
                    }
                    Err(e) => {
                        self.live.fetch_sub(1, Relaxed);
                        tracing::debug!(error = %e, "no pipe for a spliced READ");
                        return None;
                    }
                }
            }
        };
        let lent = LentPipe {
            pipe: Some(pipe),
            len: 0,
            pool: self.clone(),
        };
        lent.pipe().fits(offset, count).then_some(lent)
    }

    /// Pipes in existence.
    pub fn live(&self) -> usize {
        self.live.load(Relaxed)
    }

    fn publish(&self) {
        self.stats
            .engine
            .pipes
            .store(self.live.load(Relaxed) as u64, Relaxed);
    }
}

/// A pipe lent to one READ reply, holding `len` bytes not yet sent. Dropped empty, it goes back
/// to the pool; dropped with bytes in it (the reply was abandoned), it is closed.
#[derive(Debug)]
pub struct LentPipe {
    pipe: Option<Pipe>,
    len: usize,
    pool: Arc<PipePool>,
}

impl LentPipe {
    pub fn pipe(&self) -> &Pipe {
        self.pipe.as_ref().expect("present until dropped")
    }

    /// Bytes in the pipe still to be sent.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Fills the pipe from `file`; see [`fill_from_file`].
    pub fn fill(&mut self, file: BorrowedFd<'_>, offset: u64, count: usize) -> io::Result<usize> {
        debug_assert_eq!(self.len, 0, "a pipe carries one reply");
        let n = fill_from_file(self.pipe(), file, offset, count)?;
        self.len += n;
        // Counted here, before the reply exists, so a client that has its reply sees it counted.
        self.pool
            .stats
            .engine
            .spliced_bytes
            .fetch_add(n as u64, Relaxed);
        Ok(n)
    }

    /// Sends up to all remaining bytes to `sock`; see [`drain_to_socket`].
    pub fn drain(&mut self, sock: RawFd, more: bool) -> io::Result<usize> {
        let n = drain_to_socket(self.pipe(), sock, self.len, more)?;
        self.len -= n.min(self.len);
        Ok(n)
    }
}

impl Drop for LentPipe {
    fn drop(&mut self) {
        let Some(pipe) = self.pipe.take() else { return };
        if self.len == 0 {
            self.pool.free.lock().expect("pipe pool lock").push(pipe);
        } else {
            drop(pipe);
            self.pool.live.fetch_sub(1, Relaxed);
            self.pool.publish();
        }
    }
}

/// The data of a spliced READ reply and what follows it on the wire (the XDR padding).
#[derive(Debug)]
pub struct SplicedData {
    pub pipe: LentPipe,
    pub tail: Bytes,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    /// An unlinked file in the temporary directory's file system holding `bytes`.
    fn file_with(bytes: &[u8]) -> std::fs::File {
        static N: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "sluice-splice-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Relaxed)
        ));
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .expect("temp file");
        std::fs::remove_file(&path).expect("unlink");
        f.write_all(bytes).expect("write");
        f
    }

    /// Reads everything in the pipe through a socket pair (the pipe's other end in production).
    fn drain_all(lent: &mut LentPipe) -> Vec<u8> {
        let (a, mut b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        a.set_nonblocking(true).expect("nonblocking");
        let mut out = Vec::new();
        while !lent.is_empty() {
            match lent.drain(a.as_raw_fd(), false) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("drain: {e}"),
            }
            let mut buf = vec![0u8; 1 << 16];
            b.set_nonblocking(true).expect("nonblocking");
            while let Ok(n) = b.read(&mut buf) {
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&buf[..n]);
            }
        }
        drop(a);
        b.set_nonblocking(false).expect("blocking");
        b.read_to_end(&mut out).expect("rest");
        out
    }

    #[test]
    fn a_spliced_range_is_the_files_bytes_at_any_offset_and_length() {
        let data: Vec<u8> = (0..3_000_000u32)
            .map(|i| (i * 7 + i / 4096) as u8)
            .collect();
        let f = file_with(&data);
        let pool = PipePool::new(2, 1 << 20, Default::default());
        for (off, len) in [
            (0usize, 1usize << 20),
            (1, 65_537),
            (4095, (1 << 20) - 4096),
            (8192, 1 << 20),
            (2_998_272, 1 << 20), // runs past the end: short
            (2_999_000, 65_536),  // misaligned, past the end
            (3_000_000, 4096),    // at the end: nothing
            (5_000_000, 4096),    // beyond the end: nothing
        ] {
            let mut lent = pool.acquire(off as u64, len).expect("a pipe");
            let n = lent.fill(f.as_fd(), off as u64, len).expect("fill");
            let end = (off + len).min(data.len()).max(off.min(data.len()));
            assert_eq!(n, end - off.min(data.len()), "offset {off} length {len}");
            let got = drain_all(&mut lent);
            assert_eq!(
                got,
                data[off.min(data.len())..end],
                "offset {off} length {len}"
            );
        }
        assert_eq!(pool.live(), 1, "emptied pipes are reused");
    }

    #[test]
    fn the_pool_is_bounded_and_an_abandoned_pipe_is_closed_not_reused() {
        let f = file_with(&[1u8; 100_000]);
        let pool = PipePool::new(2, 1 << 20, Default::default());
        let mut a = pool.acquire(0, 1 << 20).expect("first");
        let _b = pool.acquire(0, 1 << 20).expect("second");
        assert!(pool.acquire(0, 1 << 20).is_none(), "at most two pipes");
        assert_eq!(pool.exhausted.load(Relaxed), 1);
        assert_eq!(a.fill(f.as_fd(), 0, 100_000).expect("fill"), 100_000);
        drop(a); // abandoned with data in it
        assert_eq!(pool.live(), 1, "closed");
        let mut c = pool.acquire(99_000, 4096).expect("a new pipe in its place");
        assert!(c.is_empty());
        assert_eq!(c.fill(f.as_fd(), 99_000, 4096).expect("fill"), 1000);
        assert_eq!(drain_all(&mut c), vec![1u8; 1000], "no leftover bytes");
    }

    #[test]
    fn a_read_the_pipe_cannot_hold_is_refused_and_a_disabled_pool_lends_nothing() {
        let pool = PipePool::new(4, 64 * 1024, Default::default());
        let cap = pool.acquire(0, 0).expect("a pipe").pipe().capacity;
        assert!(
            pool.acquire(0, cap).is_some(),
            "aligned, exactly the capacity"
        );
        assert!(
            pool.acquire(1, cap).is_none(),
            "one page more than the capacity"
        );
        assert!(pool.acquire(0, cap + 1).is_none());
        assert!(PipePool::new(0, 1 << 20, Default::default())
            .acquire(0, 4096)
            .is_none());
    }
}
