//! Standard output for the client commands, written straight to file descriptor 1.
//!
//! `tokio::io::stdout()` runs every write on the blocking thread pool: the bytes are copied into
//! its buffer, a pool thread is woken (futex) to `write(2)` them and the task waits to be woken
//! back. `sluice cat` hands it the file as the zero-copy segments of the READ replies (a few
//! tens of KiB each), so a 256 MiB file cost ~4,100 writes, ~2,600 futex calls and a userspace
//! copy of every byte. [`Stdout`] instead writes with `writev(2)` from the caller's segments
//! (no copy: the only copy left is the kernel's, socket buffer to destination) and tells
//! [`tokio::io::AsyncWrite`] users that it is vectored, so `File::read_to` hands it a whole
//! rsize of segments per call (one syscall per MiB).
//!
//! How it waits depends on what fd 1 is:
//!
//! | fd 1                         | write                                                      |
//! |------------------------------|------------------------------------------------------------|
//! | regular file, /dev/null, ... | blocking `writev`: the page cache never blocks for long     |
//! | pipe, socket                 | non-blocking `writev`, wait for writability on the runtime  |
//! | terminal                     | `tokio::io::stdout()`: a terminal is shared with the shell, |
//! |                              | so its flags are left alone; its speed does not matter     |
//!
//! A pipe is switched to O_NONBLOCK for the life of the [`Stdout`] and restored when it is
//! dropped, because a reader that stops (a pager) must not stall the runtime's single thread:
//! the RPC driver keeps reading replies and running its timers meanwhile. A pipe's buffer is
//! also grown to 1 MiB (the unprivileged limit, `/proc/sys/fs/pipe-max-size`) so that one rsize
//! of output is one write instead of sixteen 64 KiB ones; best effort.
//!
//! The system call itself is shared with `sluice cp`'s local-file sink: `sluice_cli::sink`.

use sluice_cli::sink::writev_fd;
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::AsyncWrite;

/// Standard output as an [`AsyncWrite`] with vectored writes (see the module docs).
pub enum Stdout {
    /// A file or device: blocking writes.
    Direct,
    /// A pipe or socket in non-blocking mode; the flags to restore on drop.
    Polled { fd: AsyncFd<Fd1>, flags_before: i32 },
    /// A terminal (or anything unexpected): tokio's own stdout.
    Tokio(tokio::io::Stdout),
}

/// File descriptor 1, never closed by us.
pub struct Fd1;

impl AsRawFd for Fd1 {
    fn as_raw_fd(&self) -> RawFd {
        libc::STDOUT_FILENO
    }
}

/// The pipe buffer asked for: one 1 MiB READ reply fits in one write.
const PIPE_BYTES: libc::c_int = 1 << 20;

impl Stdout {
    /// Standard output, in the mode that fits what fd 1 is. Must run inside the runtime.
    pub fn new() -> Stdout {
        // SAFETY: an all-zero `stat` is a valid value of that plain C struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat on fd 1 writes into a `stat` of the right type.
        if unsafe { libc::fstat(libc::STDOUT_FILENO, &mut st) } != 0 {
            return Stdout::Tokio(tokio::io::stdout());
        }
        // SAFETY: isatty has no preconditions.
        if unsafe { libc::isatty(libc::STDOUT_FILENO) } == 1 {
            return Stdout::Tokio(tokio::io::stdout());
        }
        match st.st_mode & libc::S_IFMT {
            libc::S_IFREG | libc::S_IFCHR | libc::S_IFBLK => Stdout::Direct,
            libc::S_IFIFO | libc::S_IFSOCK => Self::polled(st.st_mode & libc::S_IFMT),
            _ => Stdout::Tokio(tokio::io::stdout()),
        }
    }

    fn polled(kind: libc::mode_t) -> Stdout {
        // SAFETY: fcntl on fd 1 with valid commands and integer arguments.
        let flags_before = unsafe { libc::fcntl(libc::STDOUT_FILENO, libc::F_GETFL) };
        if flags_before < 0 {
            return Stdout::Tokio(tokio::io::stdout());
        }
        if kind == libc::S_IFIFO {
            // SAFETY: as above; failure only leaves the pipe at its old size.
            unsafe { libc::fcntl(libc::STDOUT_FILENO, libc::F_SETPIPE_SZ, PIPE_BYTES) };
        }
        // SAFETY: as above.
        let set = unsafe {
            libc::fcntl(
                libc::STDOUT_FILENO,
                libc::F_SETFL,
                flags_before | libc::O_NONBLOCK,
            )
        };
        if set < 0 {
            return Stdout::Tokio(tokio::io::stdout());
        }
        // SAFETY: fd 1 is open (fstat succeeded) and stays open and the same file description
        // for the life of the process: nothing in sluice closes it or dup2()s onto it.
        let registered =
            unsafe { AsyncFd::register_with_interest(Fd1, tokio::io::Interest::WRITABLE) };
        match registered {
            Ok(fd) => Stdout::Polled { fd, flags_before },
            Err(_) => {
                restore_flags(flags_before);
                Stdout::Tokio(tokio::io::stdout())
            }
        }
    }
}

impl Drop for Stdout {
    fn drop(&mut self) {
        if let Stdout::Polled { flags_before, .. } = self {
            restore_flags(*flags_before);
        }
    }
}

fn restore_flags(flags: i32) {
    // SAFETY: fcntl on fd 1 with an integer argument.
    unsafe { libc::fcntl(libc::STDOUT_FILENO, libc::F_SETFL, flags) };
}

impl AsyncWrite for Stdout {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stdout::Direct => Poll::Ready(writev_fd(libc::STDOUT_FILENO, bufs, None)),
            Stdout::Polled { fd, .. } => loop {
                let mut guard = ready!(fd.poll_write_ready(cx))?;
                match guard.try_io(|_| writev_fd(libc::STDOUT_FILENO, bufs, None)) {
                    Ok(result) => return Poll::Ready(result),
                    Err(_would_block) => continue,
                }
            },
            Stdout::Tokio(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        !matches!(self, Stdout::Tokio(_))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stdout::Tokio(s) => Pin::new(s).poll_flush(cx),
            _ => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }
}
