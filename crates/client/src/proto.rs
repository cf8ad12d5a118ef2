//! The protocol under [`crate::File`]: the few calls its reader and writer make, as a trait.
//!
//! [`crate::File`], its reader ([`crate::read`]) and [`crate::FileWriter`] decide what to read
//! ahead, what to keep, when to COMMIT and what to resend; none of that depends on the NFS
//! version. What does is how a READ, WRITE, COMMIT or GETATTR travels, what a handle and an
//! attribute set look like, and how errors are told. [`FileProtocol`] is that seam,
//! implemented three times: by the NFSv3 [`crate::Client`] (`v3/client.rs`), by
//! [`crate::v4::Client`] with its own handle, attribute and error types (a SEQUENCE + PUTFH +
//! READ compound is one `start_read`, `v4/send.rs`), and by [`crate::open::OpenProto`], the
//! neutral one [`crate::OpenFile`] runs over whatever the version. The readahead, write-behind
//! and close-to-open logic is the same for all three. No type of the trait comes from
//! `sluice_xdr::nfs3`.
//!
//! # Pipelining
//! `start_read` and `start_write` return once the call is *sent* (their outer future may wait
//! for a free slot: that is the transport's back-pressure), handing back a [`Call`]: a future
//! of the reply that runs without being polled. So a caller starts many, then waits for them
//! in any order, as with [`crate::Pending`]. COMMIT and GETATTR are issued one at a time by
//! the file layer, so they are plain async calls.
//!
//! # Change detection
//! The read cache is kept while the file's [`Version`] stays the same. Its `change` must grow
//! with every change so that a reply overtaken by a newer one is recognised as old (NFSv3:
//! ctime; NFSv4: the change attribute).
//!
//! # Shared per-mount state
//! Files opened through one client share a readahead memory budget and read statistics, and
//! need a few options: [`FileContext`] holds them, and every implementation owns one.

use crate::stats::ReadStats;
use bytes::Bytes;
use sluice_engine::plan::Verifier;
use sluice_engine::readahead::{Budget, ReadaheadMode};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A call in flight: resolves to its reply whether or not anyone polls it meanwhile.
pub type Call<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A READ in flight: its reply and the call's RTT sample.
pub type ReadCall<A, E> = Call<(Result<ReadReply<A>, E>, Option<Duration>)>;

/// A WRITE in flight: its reply and the call's RTT sample (the writer's window grows with
/// measured bandwidth x RTT, `sluice_engine::writewindow`).
pub type WriteCall<E> = Call<(Result<WriteReply, E>, Option<Duration>)>;

/// A COMMIT in flight: the write verifier it returns.
pub type CommitCall<E> = Call<Result<Verifier, E>>;

/// What identifies a version of a file's data (see the module docs).
pub use sluice_engine::readcore::DataVersion as Version;

/// How durable a WRITE must be before it is answered (RFC 1813 `stable_how`, RFC 8881
/// `stable_how4`: the same three levels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stability {
    Unstable,
    DataSync,
    FileSync,
}

/// A READ's answer.
#[derive(Debug, Clone)]
pub struct ReadReply<A> {
    /// The data, as zero-copy pieces of the reply (at most the count asked for).
    pub data: Vec<Bytes>,
    pub eof: bool,
    /// The file's attributes after the READ, when the server sent them.
    pub attr: Option<A>,
}

/// A WRITE's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteReply {
    /// Bytes the server took (a short write leaves the rest to send again).
    pub count: u32,
    pub committed: Stability,
    pub verifier: Verifier,
}

/// A failure the file layer finds itself, not one the server reported (a READ that returns
/// nothing before the end of the file, a server whose verifier never settles).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError(pub String);

/// The calls [`crate::File`] makes. See the module docs.
pub trait FileProtocol: Clone + Send + Sync + 'static {
    /// A file handle.
    type Handle: Clone + Send + Sync + 'static;
    /// A file's attributes, as the protocol carries them.
    type Attr: Clone + Send + Sync + 'static;
    /// Why a call failed.
    type Error: std::error::Error + From<FileError> + Send + Sync + 'static;

    /// Starts a READ of `count` bytes at `offset`; the [`Call`] also gives the call's RTT
    /// sample (`None` if it was sent more than once).
    fn start_read(
        &self,
        fh: &Self::Handle,
        offset: u64,
        count: u32,
    ) -> impl Future<Output = ReadCall<Self::Attr, Self::Error>> + Send;

    /// Starts a WRITE of `data` at `offset` (sent without copying).
    fn start_write(
        &self,
        fh: &Self::Handle,
        offset: u64,
        data: Bytes,
        stable: Stability,
    ) -> impl Future<Output = WriteCall<Self::Error>> + Send;

    /// Starts a COMMIT of `count` bytes at `offset` (0, 0: the whole file); the call resolves
    /// to the write verifier. Sent when the outer future completes, so a writer can go on
    /// sending WRITEs while it is in flight.
    fn start_commit(
        &self,
        fh: &Self::Handle,
        offset: u64,
        count: u32,
    ) -> impl Future<Output = CommitCall<Self::Error>> + Send;

    /// The file's current attributes.
    fn getattr(
        &self,
        fh: &Self::Handle,
    ) -> impl Future<Output = Result<Self::Attr, Self::Error>> + Send;

    /// The version of the data `attr` describes.
    fn version(attr: &Self::Attr) -> Version;

    /// Largest READ and WRITE, as negotiated with the server.
    fn rsize(&self) -> u32;
    fn wsize(&self) -> u32;

    /// The state files of this client share.
    fn files(&self) -> &FileContext;
}

/// Options of the file layer (copied from [`crate::ClientOptions`] by the v3 client).
#[derive(Debug, Clone)]
pub struct FileOptions {
    pub readahead: ReadaheadMode,
    pub trace_readahead: bool,
    /// How long read attributes are trusted before a GETATTR revalidates them.
    pub attr_timeout: Duration,
    /// WRITEs a [`crate::FileWriter`] keeps in flight at least ...
    pub write_depth: usize,
    /// ... and at most, as its window grows with bandwidth x RTT (the RPC slot table's size).
    pub write_depth_max: usize,
    /// Unstable bytes after which a writer COMMITs before going on.
    pub commit_bytes_max: u64,
}

/// The state all files of one client share. See the module docs.
#[derive(Debug)]
pub struct FileContext {
    pub(crate) options: FileOptions,
    /// The readahead memory budget shared by all files (locked after a file's own state).
    pub(crate) budget: Mutex<Budget>,
    pub(crate) reads: Mutex<ReadStats>,
    /// Numbers files in readahead traces.
    files_opened: AtomicU64,
    /// Time zero of readahead traces.
    pub(crate) started: Instant,
}

impl FileContext {
    pub fn new(options: FileOptions, budget_bytes: u64) -> FileContext {
        FileContext {
            options,
            budget: Mutex::new(Budget::new(budget_bytes)),
            reads: Mutex::new(ReadStats::default()),
            files_opened: AtomicU64::new(0),
            started: Instant::now(),
        }
    }

    pub fn options(&self) -> &FileOptions {
        &self.options
    }

    /// Read statistics of all files so far, with the budget's high-water mark.
    pub fn read_stats(&self) -> ReadStats {
        let mut r = self.reads.lock().expect("reads lock").clone();
        let b = self.budget.lock().expect("budget lock");
        r.budget_high_water_bytes = b.high_water_bytes();
        r.budget_limit_bytes = b.limit_bytes();
        r
    }

    pub(crate) fn next_file_id(&self) -> u64 {
        self.files_opened.fetch_add(1, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    //! `File` over a protocol that is not NFSv3: an in-memory server with its own handle,
    //! attribute and error types, which loses unstable data on a "restart".
    use super::*;
    use crate::File;
    use std::sync::Arc;

    #[derive(Debug)]
    struct MemError(String);
    impl std::fmt::Display for MemError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }
    impl std::error::Error for MemError {}
    impl From<FileError> for MemError {
        fn from(e: FileError) -> Self {
            MemError(e.0)
        }
    }

    #[derive(Default)]
    struct Disk {
        memory: Vec<u8>,
        durable: Vec<u8>,
        verifier: u8,
        change: u64,
        /// Restarts still to happen, each just before a COMMIT is served.
        restarts_before_commit: u32,
        commits: u32,
    }

    #[derive(Clone)]
    struct Mem {
        disk: Arc<Mutex<Disk>>,
        files: Arc<FileContext>,
    }

    impl Mem {
        fn new() -> Mem {
            let options = FileOptions {
                readahead: ReadaheadMode::Auto,
                trace_readahead: false,
                attr_timeout: Duration::from_secs(3600),
                write_depth: 4,
                write_depth_max: 64,
                commit_bytes_max: u64::MAX,
            };
            Mem {
                disk: Arc::default(),
                files: Arc::new(FileContext::new(options, 1 << 20)),
            }
        }

        fn commit_now(&self, _: &u32, _: u64, _: u32) -> Result<Verifier, MemError> {
            let mut d = self.disk.lock().unwrap();
            d.commits += 1;
            if d.restarts_before_commit > 0 {
                d.restarts_before_commit -= 1;
                d.memory = d.durable.clone();
                d.verifier += 1;
            }
            d.durable = d.memory.clone();
            Ok([d.verifier; 8])
        }
    }

    impl FileProtocol for Mem {
        type Handle = u32;
        type Attr = (u64, u64);
        type Error = MemError;

        async fn start_read(
            &self,
            _: &u32,
            offset: u64,
            count: u32,
        ) -> ReadCall<(u64, u64), MemError> {
            let d = self.disk.lock().unwrap();
            let len = d.memory.len() as u64;
            let lo = offset.min(len) as usize;
            let hi = (offset + u64::from(count)).min(len) as usize;
            let reply = ReadReply {
                data: vec![Bytes::copy_from_slice(&d.memory[lo..hi])],
                eof: hi as u64 == len,
                attr: Some((len, d.change)),
            };
            Box::pin(async move { (Ok(reply), Some(Duration::from_millis(1))) })
        }

        async fn start_write(
            &self,
            _: &u32,
            offset: u64,
            data: Bytes,
            _: Stability,
        ) -> WriteCall<MemError> {
            let mut d = self.disk.lock().unwrap();
            let end = offset as usize + data.len();
            if d.memory.len() < end {
                d.memory.resize(end, 0);
            }
            d.memory[offset as usize..end].copy_from_slice(&data);
            d.change += 1;
            let reply = WriteReply {
                count: data.len() as u32,
                committed: Stability::Unstable,
                verifier: [d.verifier; 8],
            };
            Box::pin(async move { (Ok(reply), Some(Duration::from_millis(1))) })
        }

        async fn start_commit(&self, fh: &u32, offset: u64, count: u32) -> CommitCall<MemError> {
            let verf = self.commit_now(fh, offset, count);
            Box::pin(async move { verf })
        }

        async fn getattr(&self, _: &u32) -> Result<(u64, u64), MemError> {
            let d = self.disk.lock().unwrap();
            Ok((d.memory.len() as u64, d.change))
        }

        fn version(a: &(u64, u64)) -> Version {
            Version {
                size: a.0,
                mtime_ns: 0,
                change: a.1,
            }
        }
        fn rsize(&self) -> u32 {
            4096
        }
        fn wsize(&self) -> u32 {
            4096
        }
        fn files(&self) -> &FileContext {
            &self.files
        }
    }

    #[tokio::test]
    async fn file_writes_resends_after_a_restart_and_reads_back_over_another_protocol() {
        let mem = Mem::new();
        mem.disk.lock().unwrap().restarts_before_commit = 1;
        let data: Vec<u8> = (0..50_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let f = File::new(mem.clone(), 1, (0, 0));
        let mut w = f.writer();
        w.write(&data).await.unwrap();
        assert_eq!(w.finish().await.unwrap(), data.len() as u64);
        {
            let d = mem.disk.lock().unwrap();
            assert_eq!(
                d.commits, 2,
                "the restart must cost exactly one more COMMIT"
            );
            assert_eq!(d.durable, data, "everything resent and made durable");
        }
        let mut f = File::new(mem.clone(), 1, (0, 0));
        f.refresh().await.unwrap();
        assert_eq!(f.read_all().await.unwrap(), data);
        let reads = mem.files.read_stats();
        assert!(reads.reads >= 13, "READs of at most rsize: {}", reads.reads);
    }

    #[tokio::test]
    async fn positional_writes_land_where_asked_and_invalidate_drops_what_was_read() {
        let mem = Mem::new();
        let mut f = File::new(mem.clone(), 1, (0, 0));
        let mut w = f.writer();
        w.write_at(0, &[1u8; 6000]).await.unwrap();
        w.write_at(10_000, &[3u8; 100]).await.unwrap();
        w.write_at(6000, &[2u8; 4000]).await.unwrap();
        assert!(w.is_dirty());
        w.sync().await.unwrap();
        assert!(!w.is_uncommitted());
        let mut want = vec![1u8; 6000];
        want.extend_from_slice(&[2u8; 4000]);
        want.extend_from_slice(&[3u8; 100]);
        assert_eq!(mem.disk.lock().unwrap().durable, want);

        f.refresh().await.unwrap();
        assert_eq!(f.read_all().await.unwrap(), want);
        // A small read caches the rest of its 4 KiB; a rewrite inside that page that the
        // attributes do not show (same change) is seen only after invalidate().
        assert_eq!(f.read_at(0, 10).await.unwrap().concat(), vec![1u8; 10]);
        let change = mem.disk.lock().unwrap().change;
        w.write_at(10, &[9u8; 10]).await.unwrap();
        w.sync().await.unwrap();
        mem.disk.lock().unwrap().change = change;
        f.invalidate();
        assert_eq!(f.read_at(10, 10).await.unwrap().concat(), vec![9u8; 10]);
    }
}
