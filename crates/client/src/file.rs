//! [`File`]: positional reads ([`File::read_at`]) and sequential ones ([`FileReader`]) through
//! the autotuned readahead of [`crate::read`], and unstable write-behind with COMMIT and
//! verifier checking ([`FileWriter`]). The write policy is in [`sluice_engine::plan`]; this
//! module only issues the calls it asks for, through [`FileProtocol`] (any NFS version;
//! the crate root's `File` alias, without a parameter, is the v3 client's).
//!
//! ```text
//!  read_at / FileReader ──► read::FileShared (engine, cache, READs in flight) ──► [READ][READ]..
//!
//!  FileWriter:  write() ─► buffer ─(wsize)─► [WRITE][WRITE]..[WRITE] UNSTABLE ─► UnstableLog
//!                          window: WriteWindow (2 × measured bandwidth × rtt_min WRITEs)
//!               log over commit_bytes_max / 2 ─► log moves aside, COMMIT sent, WRITEs go on
//!                 COMMIT reply ─► aside.on_commit(verf) ─► lost chunks resent
//!               finish() ─► drain ─► COMMIT ─► log.on_commit(verf)
//!                                         lost chunks (verifier changed) ─► resend ─► COMMIT again
//! ```
//!
//! COMMITs overlap with sending: once half of `commit_bytes_max` is acknowledged but not
//! committed, that part of the log is set aside and a COMMIT for the file is sent while WRITEs
//! continue. A COMMIT covers every WRITE answered before it was sent (RFC 1813 §3.3.21), which
//! is exactly the part set aside; WRITEs answered later go to a fresh log. If the previous
//! COMMIT has not returned when the next is due, the writer waits for it, so uncommitted data
//! held for resending stays within `commit_bytes_max` (plus the WRITEs in flight), and the
//! final COMMIT at `finish` covers at most half of it: no long stall at the end of a big file.

use crate::error::NfsError;
use crate::proto::{CommitCall, FileError, FileProtocol, Stability, WriteCall};
use crate::read::FileShared;
use bytes::{Bytes, BytesMut};
use sluice_engine::plan::{UnstableLog, Verifier};
use sluice_engine::writewindow::{WriteWindow, WriteWindowConfig};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// How many times a COMMIT may report a new verifier (and make the writer resend) before the
/// writer gives up: a server that restarts on every COMMIT cannot be written to.
const COMMIT_ROUNDS_MAX: usize = 8;

/// An open file: a handle, the attributes seen when it was opened, and its read state
/// (readahead streams, cached data, READs in flight), shared by all clones. Dropping the last
/// clone closes it: its readahead budget goes back to the client.
pub struct File<P: FileProtocol> {
    client: P,
    fh: P::Handle,
    attr: P::Attr,
    shared: Arc<FileShared<P>>,
}

impl<P: FileProtocol> Clone for File<P> {
    fn clone(&self) -> Self {
        File {
            client: self.client.clone(),
            fh: self.fh.clone(),
            attr: self.attr.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<P: FileProtocol> File<P> {
    /// The file `fh`, whose attributes (from a LOOKUP, READDIRPLUS or GETATTR) are `attr`.
    pub fn new(client: P, fh: P::Handle, attr: P::Attr) -> File<P> {
        let shared = FileShared::new(client.clone(), fh.clone(), &attr);
        File {
            client,
            fh,
            attr,
            shared,
        }
    }

    pub fn fh(&self) -> &P::Handle {
        &self.fh
    }
    /// Attributes as of opening (or the last [`File::refresh`]).
    pub fn attr(&self) -> &P::Attr {
        &self.attr
    }
    pub fn size(&self) -> u64 {
        P::version(&self.attr).size
    }
    pub fn client(&self) -> &P {
        &self.client
    }

    /// Fetches the attributes again; data cached for reads is dropped if the file changed
    /// (close-to-open consistency: call it where another client may have written).
    pub async fn refresh(&mut self) -> Result<&P::Attr, P::Error> {
        self.attr = self.client.getattr(&self.fh).await?;
        self.shared.observe_attrs(&self.attr);
        Ok(&self.attr)
    }

    /// Attributes fetched elsewhere (an open's close-to-open GETATTR, a SETATTR's reply): the
    /// read cache is dropped if they show a change.
    pub fn observe(&mut self, attr: P::Attr) {
        self.shared.observe_attrs(&attr);
        self.attr = attr;
    }

    /// Drops what was read and cached, for every clone: for a caller that wrote to the file
    /// (or truncated it) itself, since a change within the attributes' time granularity may
    /// not show in them. The next read fetches again.
    pub fn invalidate(&self) {
        self.shared.invalidate();
    }

    /// The size as last seen by the read path (open, refresh or a READ's post-op attributes).
    pub fn current_size(&self) -> u64 {
        self.shared.size()
    }

    /// Positional read (like `pread`): up to `len` bytes at `offset`, fewer only at end of
    /// file, none at or past it. Goes through the file's readahead: a random reader fetches
    /// what it asks for (rounded out to 4 KiB), a sequential one gets its stream's window of
    /// full-rsize READs ahead. Any number of tasks may read one file (or its clones) at once.
    pub async fn read_at(&self, offset: u64, len: u64) -> Result<Vec<Bytes>, P::Error> {
        self.shared.read_at(offset, len).await
    }

    /// [`File::read_at`] into a buffer; returns the bytes read (0 at end of file).
    pub async fn read_at_into(&self, offset: u64, buf: &mut [u8]) -> Result<usize, P::Error> {
        let chunks = self.read_at(offset, buf.len() as u64).await?;
        let mut n = 0;
        for c in chunks {
            buf[n..n + c.len()].copy_from_slice(&c);
            n += c.len();
        }
        Ok(n)
    }

    /// A sequential reader from offset 0 (application reads of rsize).
    pub fn reader(&self) -> FileReader<P> {
        FileReader {
            file: self.clone(),
            pos: 0,
            step: u64::from(self.client.rsize().max(1)),
            done: false,
        }
    }

    /// The whole file in memory.
    pub async fn read_all(&self) -> Result<Vec<u8>, P::Error> {
        let mut out = Vec::with_capacity(self.size().min(1 << 30) as usize);
        let mut r = self.reader();
        while let Some(chunks) = r.next_chunk().await? {
            for c in chunks {
                out.extend_from_slice(&c);
            }
        }
        Ok(out)
    }

    /// Streams the whole file into `sink`; returns the bytes copied. `progress` is called with
    /// each delivered chunk's length.
    pub async fn read_to<W: AsyncWrite + Unpin + ?Sized>(
        &self,
        sink: &mut W,
        mut progress: impl FnMut(u64),
    ) -> Result<u64, ReadToError<P::Error>> {
        let mut r = self.reader();
        let mut total = 0u64;
        let vectored = sink.is_write_vectored();
        while let Some(mut chunks) = r.next_chunk().await.map_err(ReadToError::Nfs)? {
            let n: u64 = chunks.iter().map(|c| c.len() as u64).sum();
            if vectored {
                write_all_vectored(sink, &mut chunks)
                    .await
                    .map_err(ReadToError::Io)?;
            } else {
                for c in &chunks {
                    sink.write_all(c).await.map_err(ReadToError::Io)?;
                }
            }
            total += n;
            progress(n);
        }
        sink.flush().await.map_err(ReadToError::Io)?;
        Ok(total)
    }

    /// A writer from offset 0 (the caller truncates first if it wants to replace the file).
    pub fn writer(&self) -> FileWriter<P> {
        let o = self.client.files().options();
        FileWriter {
            file: self.clone(),
            offset: 0,
            buf: BytesMut::new(),
            in_flight: VecDeque::new(),
            log: UnstableLog::new(),
            committing: None,
            window: WriteWindow::new(
                WriteWindowConfig {
                    writes_min: o.write_depth.max(1),
                    writes_max: o.write_depth_max.max(1),
                    ..WriteWindowConfig::default()
                },
                u64::from(self.client.wsize()),
            ),
            wsize: self.client.wsize() as usize,
            commit_bytes_max: o.commit_bytes_max,
            sent_any: false,
            verifier_changes: 0,
        }
    }
}

/// Writes all of `chunks` with vectored writes: one syscall for a whole rsize of reply
/// segments where the sink takes them (no gathering copy). Consumes the chunks as written.
async fn write_all_vectored<W: AsyncWrite + Unpin + ?Sized>(
    sink: &mut W,
    chunks: &mut [Bytes],
) -> std::io::Result<()> {
    use bytes::Buf;
    let mut first = 0;
    while first < chunks.len() {
        let slices: Vec<std::io::IoSlice<'_>> = chunks[first..]
            .iter()
            .map(|c| std::io::IoSlice::new(c))
            .collect();
        let mut n = sink.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let c = &mut chunks[first];
            let k = n.min(c.len());
            c.advance(k);
            n -= k;
            if c.is_empty() {
                first += 1;
            }
        }
        while first < chunks.len() && chunks[first].is_empty() {
            first += 1;
        }
    }
    Ok(())
}

/// Failure of [`File::read_to`]: the NFS side or the sink.
#[derive(Debug)]
pub enum ReadToError<E = NfsError> {
    Nfs(E),
    Io(std::io::Error),
}

impl<E: std::fmt::Display> std::fmt::Display for ReadToError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadToError::Nfs(e) => write!(f, "{e}"),
            ReadToError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl<E: std::error::Error> std::error::Error for ReadToError<E> {}

/// A sequential reader: application reads of rsize from offset 0, through the file's
/// readahead (see [`crate::read`]). Delivers the file in order, in zero-copy chunks.
pub struct FileReader<P: FileProtocol> {
    file: File<P>,
    pos: u64,
    step: u64,
    done: bool,
}

impl<P: FileProtocol> FileReader<P> {
    /// The next piece of the file, in order, as zero-copy chunks; `None` at end of file.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<Bytes>>, P::Error> {
        if self.done {
            return Ok(None);
        }
        let chunks = match self.file.read_at(self.pos, self.step).await {
            Ok(c) => c,
            Err(e) => {
                self.done = true;
                return Err(e);
            }
        };
        let n: usize = chunks.iter().map(|c| c.len()).sum();
        if n == 0 {
            self.done = true;
            return Ok(None);
        }
        self.pos += n as u64;
        Ok(Some(chunks))
    }

    /// Bytes delivered so far.
    pub fn position(&self) -> u64 {
        self.pos
    }
}

/// Sequential write-behind: UNSTABLE WRITEs of wsize, several in flight, then COMMIT with
/// verifier checking. Call [`FileWriter::finish`]: until it returns Ok, nothing is known to be
/// on stable storage.
pub struct FileWriter<P: FileProtocol> {
    file: File<P>,
    /// Offset of the next byte handed to a WRITE.
    offset: u64,
    buf: BytesMut,
    in_flight: VecDeque<InFlightWrite<P::Error>>,
    log: UnstableLog,
    /// A COMMIT in flight and the part of the log it will make stable.
    committing: Option<(UnstableLog, CommitCall<P::Error>)>,
    /// WRITEs in flight allowed (see `sluice_engine::writewindow`).
    window: WriteWindow,
    wsize: usize,
    commit_bytes_max: u64,
    sent_any: bool,
    verifier_changes: u64,
}

struct InFlightWrite<E> {
    offset: u64,
    data: Bytes,
    call: WriteCall<E>,
}

impl<P: FileProtocol> FileWriter<P> {
    /// Appends `data`; sends whole wsize WRITEs as the buffer fills.
    pub async fn write(&mut self, mut data: &[u8]) -> Result<(), P::Error> {
        while !data.is_empty() {
            let room = self.wsize - self.buf.len();
            let n = room.min(data.len());
            self.buf.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.buf.len() == self.wsize {
                let chunk = self.buf.split().freeze();
                self.send(chunk, Stability::Unstable).await?;
            }
        }
        Ok(())
    }

    /// Writes `data` at `offset`: a write that does not continue the previous one first sends
    /// what is buffered (a partial WRITE), then starts a new run there (FUSE's positional
    /// writes; a sequential writer never pays for it).
    pub async fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<(), P::Error> {
        if offset != self.position() {
            self.send_buffered().await?;
            self.offset = offset;
        }
        self.write(data).await
    }

    /// The offset the next [`FileWriter::write`] goes to (bytes accepted so far, for a writer
    /// that only appends).
    pub fn position(&self) -> u64 {
        self.offset + self.buf.len() as u64
    }

    /// True while data is buffered or WRITEs are unanswered: the server's attributes and data
    /// do not show everything written yet.
    pub fn is_dirty(&self) -> bool {
        !self.buf.is_empty() || !self.in_flight.is_empty()
    }

    /// True while written data is not known to be on stable storage.
    pub fn is_uncommitted(&self) -> bool {
        self.is_dirty() || !self.log.is_empty()
    }

    /// Sends what is buffered and waits for every WRITE, without a COMMIT: afterwards the
    /// server's reads and attributes show all the data (it may still be lost to a restart).
    pub async fn write_out(&mut self) -> Result<(), P::Error> {
        self.send_buffered().await?;
        self.drain().await
    }

    /// Makes everything written so far stable (flush, fsync, close): sends what is buffered,
    /// waits for every WRITE and COMMITs until the server's verifier confirms all data. The
    /// writer stays usable.
    pub async fn sync(&mut self) -> Result<(), P::Error> {
        if !self.buf.is_empty() {
            let chunk = self.buf.split().freeze();
            // A file that fits in one WRITE is sent FILE_SYNC: one round trip, no COMMIT (what
            // the Linux client does for a single small request at close).
            let stable = if self.sent_any {
                Stability::Unstable
            } else {
                Stability::FileSync
            };
            self.send(chunk, stable).await?;
        }
        self.commit().await
    }

    async fn send_buffered(&mut self) -> Result<(), P::Error> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = self.buf.split().freeze();
        self.send(chunk, Stability::Unstable).await
    }

    /// How many times the server's write verifier changed under this writer (each time the
    /// uncommitted data was resent).
    pub fn verifier_changes(&self) -> u64 {
        self.verifier_changes
    }

    /// Sends what is buffered, waits for every WRITE and COMMITs until the server's verifier
    /// confirms all data. Returns the bytes written.
    pub async fn finish(mut self) -> Result<u64, P::Error> {
        self.sync().await?;
        Ok(self.offset)
    }

    async fn send(&mut self, chunk: Bytes, stable: Stability) -> Result<(), P::Error> {
        while self.in_flight.len() >= self.window.writes() {
            self.complete_one().await?;
        }
        let offset = self.offset;
        self.offset += chunk.len() as u64;
        self.sent_any = true;
        self.start_write(offset, chunk, stable).await;
        if self.log.bytes() >= (self.commit_bytes_max / 2).max(1) {
            self.start_commit().await?;
        }
        Ok(())
    }

    async fn start_write(&mut self, offset: u64, data: Bytes, stable: Stability) {
        if self.in_flight.is_empty() {
            // Nothing was in flight: the time since the last reply was the application's.
            self.window.on_idle();
        }
        self.window.on_send(Instant::now());
        let call = self
            .file
            .client
            .start_write(&self.file.fh, offset, data.clone(), stable)
            .await;
        self.in_flight
            .push_back(InFlightWrite { offset, data, call });
    }

    async fn complete_one(&mut self) -> Result<(), P::Error> {
        let Some(w) = self.in_flight.pop_front() else {
            return Ok(());
        };
        let (res, rtt) = w.call.await;
        let res = res?;
        let count = (res.count as usize).min(w.data.len());
        if count == 0 && !w.data.is_empty() {
            // Resending would loop forever against a server that takes nothing.
            return Err(P::Error::from(FileError(format!(
                "the server accepted none of a {}-byte WRITE at offset {}",
                w.data.len(),
                w.offset
            ))));
        }
        self.window
            .on_write_complete(Instant::now(), count as u64, rtt);
        if res.committed != Stability::FileSync {
            self.log
                .record(w.offset, w.data.slice(..count), res.verifier);
        }
        if count < w.data.len() {
            // A short write: the rest goes again, now, before anything else completes.
            let rest = w.data.slice(count..);
            let offset = w.offset + count as u64;
            let call = self
                .file
                .client
                .start_write(&self.file.fh, offset, rest.clone(), Stability::Unstable)
                .await;
            self.in_flight.push_front(InFlightWrite {
                offset,
                data: rest,
                call,
            });
        }
        Ok(())
    }

    async fn drain(&mut self) -> Result<(), P::Error> {
        while !self.in_flight.is_empty() {
            self.complete_one().await?;
        }
        Ok(())
    }

    /// Sets the acknowledged part of the log aside and sends a COMMIT for it, without waiting
    /// (after the previous one, if still in flight, has returned).
    async fn start_commit(&mut self) -> Result<(), P::Error> {
        self.finish_commit().await?;
        let aside = std::mem::take(&mut self.log);
        let call = self.file.client.start_commit(&self.file.fh, 0, 0).await;
        self.committing = Some((aside, call));
        Ok(())
    }

    /// Waits for the COMMIT in flight, if any, and resends what it says may be lost.
    async fn finish_commit(&mut self) -> Result<(), P::Error> {
        let Some((mut aside, call)) = self.committing.take() else {
            return Ok(());
        };
        let verf = call.await?;
        let lost = aside.on_commit(verf);
        self.resend(lost, &verf).await
    }

    /// Resends chunks a changed verifier says may be lost; they are logged anew as they are
    /// answered.
    async fn resend(
        &mut self,
        lost: Vec<sluice_engine::plan::UnstableChunk>,
        verf: &Verifier,
    ) -> Result<(), P::Error> {
        if lost.is_empty() {
            return Ok(());
        }
        self.verifier_changes += 1;
        let bytes: usize = lost.iter().map(|c| c.data.len()).sum();
        tracing::warn!(
            "server write verifier changed to {}: resending {bytes} bytes of unstable data",
            hex(verf)
        );
        for c in lost {
            while self.in_flight.len() >= self.window.writes() {
                self.complete_one().await?;
            }
            self.start_write(c.offset, c.data, Stability::Unstable)
                .await;
        }
        Ok(())
    }

    /// Drains the WRITEs, COMMITs, and resends whatever a changed verifier says may be lost.
    async fn commit(&mut self) -> Result<(), P::Error> {
        self.finish_commit().await?;
        for _ in 0..COMMIT_ROUNDS_MAX {
            self.drain().await?;
            if self.log.is_empty() {
                return Ok(());
            }
            let verf = self
                .file
                .client
                .start_commit(&self.file.fh, 0, 0)
                .await
                .await?;
            let lost = self.log.on_commit(verf);
            if lost.is_empty() {
                return Ok(());
            }
            self.resend(lost, &verf).await?;
        }
        Err(P::Error::from(FileError(format!(
            "the server's write verifier changed {COMMIT_ROUNDS_MAX} times in a row; giving up"
        ))))
    }
}

fn hex(v: &Verifier) -> String {
    v.iter().map(|b| format!("{b:02x}")).collect()
}
