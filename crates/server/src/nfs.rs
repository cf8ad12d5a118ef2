//! NFSv3 procedure handlers (RFC 1813 §3.3): wire arguments in, wire results out.
//!
//! This layer only translates. It picks the export a handle belongs to, applies the export's
//! client rules and squashing, runs the backend call on the blocking pool (every backend call is a
//! few syscalls under the caller's fsuid), and turns the backend's answer into the procedure's
//! `resok`/`resfail`. Semantics (permissions, wcc data, confinement) live in the backend.
//!
//! Large READs of buffered exports over TCP are spliced: the file's pages go into a pipe and from
//! there into the socket, never through our memory ([`crate::splice`]). Other READ replies are
//! built from 64 KiB chunks ([`sluice_engine::pool::CHUNK_BYTES`]) lent by the server's pool
//! ([`crate::io::pool`]) and appended to the reply iovec without a copy; they return to the pool
//! once the reply is on the socket. A small READ of cached data is read in place on the async
//! thread (`RWF_NOWAIT`), without the hand-off to a blocking thread. WRITE payloads arrive as the receive path's 64 KiB segments;
//! UNSTABLE ones are held by write-behind ([`crate::io::writebehind`]) and reach `pwritev` in
//! clusters, the others go to `pwritev` as they are. Nothing on the data path allocates a
//! contiguous buffer larger than a chunk.
//!
//! Most procedures are one backend call on the blocking pool ([`execute`]). READ, WRITE, COMMIT,
//! size-changing SETATTR and CREATE, and REMOVE also talk to write-behind around that call, which
//! may mean waiting (for admission, or for held data to land), so they are driven from
//! [`Nfs3::run`] in async code and only their backend calls go to the blocking pool.

use crate::backend::{
    self, export_id_of, Attr, Caller, Cred, DirEntry, Export, ExportOptions, FileHandle, LocalFs,
    Wcc,
};
use crate::io::writebehind::SizeFix;
use crate::io::Engine;
use crate::net::{Peer, Transport};
use crate::splice::{LentPipe, PipePool, SplicedData, SPLICE_MIN_BYTES};
use crate::stats::Stats;
use bytes::Bytes;
use sluice_rpc::server::Credentials;
use sluice_xdr::nfs3::*;
use sluice_xdr::{Pack, Payload, Writer};
use std::os::fd::AsFd;
use std::sync::Arc;

pub(crate) mod map;

/// Largest READDIR/READDIRPLUS reply built, whatever the client asks (bounds server memory per
/// call; 1 MiB is what Linux clients ask for at most).
pub const READDIR_REPLY_BYTES_MAX: usize = 1 << 20;

/// One export: its backend and its client rules.
pub struct ExportEntry {
    pub fs: Arc<LocalFs>,
    pub export: Export,
}

/// The NFSv3 program.
pub struct Nfs3 {
    pub exports: Arc<Vec<ExportEntry>>,
    pub stats: Arc<Stats>,
    /// Sequential table, READ chunk pool and write-behind, shared by every export.
    pub io: Arc<Engine>,
    /// Pipes for spliced READ replies over TCP ([`crate::splice`]).
    pub pipes: Arc<PipePool>,
}

/// Why a call cannot reach an export.
enum Gate {
    Status(Nfsstat3),
}

impl Nfs3 {
    /// Runs one procedure and appends its results to `w`. Returns the status sent and, for a
    /// READ answered by splice, the data to send after `w` (see [`crate::splice`]).
    pub async fn handle(
        &self,
        peer: &Peer,
        cred: &Credentials,
        args: Args3,
        w: &mut Writer,
    ) -> (Nfsstat3, Option<SplicedData>) {
        if let Args3::Null(()) = args {
            return (Nfsstat3::OK, None);
        }
        if let (Transport::Tcp, Args3::Read(a)) = (peer.transport, &args) {
            if let Ok((fs, caller)) = self.gate(peer, cred, &a.file) {
                if let Some((ok, pipe)) = self.read_spliced(fs, caller, a).await {
                    Nfsstat3::OK.pack(w);
                    ok.pack_without_data(w);
                    let tail = Bytes::from_static(&[0u8; 3][..ReadResOk::data_padding(ok.count)]);
                    return (Nfsstat3::OK, Some(SplicedData { pipe, tail }));
                }
            }
        }
        let mut args = args;
        if peer.transport == Transport::Udp {
            // Whatever the client asks, a reply must fit one datagram.
            match &mut args {
                Args3::Read(a) => a.count = a.count.min(UDP_IO_BYTES_MAX),
                Args3::Readdir(a) => a.count = a.count.min(UDP_IO_BYTES_MAX),
                Args3::Readdirplus(a) => a.maxcount = a.maxcount.min(UDP_IO_BYTES_MAX),
                _ => {}
            }
        }
        let mut res = match self.gate(peer, cred, primary_fh(&args)) {
            Ok((fs, caller)) => self.run(fs, caller, args).await,
            Err(Gate::Status(s)) => failure(&args, s),
        };
        if peer.transport == Transport::Udp {
            cap_for_datagrams(&mut res);
        }
        let status = res_status(&res);
        res.pack(w);
        (status, None)
    }

    /// Finds the export of a handle and the caller as that export sees them.
    fn gate(
        &self,
        peer: &Peer,
        cred: &Credentials,
        fh: &NfsFh3,
    ) -> Result<(Arc<LocalFs>, Caller), Gate> {
        let id = export_id_of(&fh.0).ok_or(Gate::Status(Nfsstat3::BADHANDLE))?;
        let entry = self
            .exports
            .iter()
            .find(|e| e.fs.export_id() == id)
            .ok_or(Gate::Status(Nfsstat3::STALE))?;
        let opts = entry
            .export
            .options_for(peer.addr.ip())
            .ok_or(Gate::Status(Nfsstat3::ACCES))?;
        if opts.secure && peer.addr.port() >= 1024 {
            // knfsd answers a request from an unprivileged port on a `secure` export with
            // NFSERR_PERM; the client should mount with a reserved port or the export be `insecure`.
            return Err(Gate::Status(Nfsstat3::PERM));
        }
        Ok((entry.fs.clone(), caller_for(cred, opts)))
    }

    async fn run(&self, fs: Arc<LocalFs>, caller: Caller, args: Args3) -> Res3 {
        let wb = &self.io.wb;
        match args {
            Args3::Read(a) => Res3::Read(self.read(fs, caller, a).await),
            Args3::Write(a) => Res3::Write(self.write(fs, caller, a).await),
            Args3::Commit(a) => Res3::Commit(self.commit(fs, caller, a).await),
            Args3::Setattr(a) if a.new_attributes.size.is_some() => {
                // Truncate or extend: every held byte lands first, so none is written back
                // beyond the new size after it.
                wb.flush_range(&a.object.0, 0, 0).await;
                self.blocking(fs, caller, Args3::Setattr(a)).await
            }
            Args3::Create(a) if creates_with_size(&a.how) && wb.holds_any() => {
                // CREATE UNCHECKED of an existing file applies the size like SETATTR.
                let (fs2, c2, dir, name) = (
                    fs.clone(),
                    caller.clone(),
                    a.where_.dir.clone(),
                    a.where_.name.clone(),
                );
                let found = self
                    .spawn(move || fs2.lookup(&c2, &map::handle(&dir), &name).ok())
                    .await
                    .flatten();
                if let Some(l) = found {
                    wb.flush_range(l.fh.as_bytes(), 0, 0).await;
                }
                self.blocking(fs, caller, Args3::Create(a)).await
            }
            Args3::Remove(a) if wb.holds_any() => self.remove(fs, caller, a).await,
            other => self.blocking(fs, caller, other).await,
        }
    }

    /// Runs one procedure on the blocking pool.
    async fn blocking(&self, fs: Arc<LocalFs>, caller: Caller, args: Args3) -> Res3 {
        let stats = self.stats.clone();
        let io = self.io.clone();
        let fallback = failure(&args, Nfsstat3::SERVERFAULT);
        self.spawn(move || execute(&fs, &caller, args, &stats, &io))
            .await
            .unwrap_or(fallback)
    }

    /// `f` on the blocking pool; `None` if it panicked (logged).
    async fn spawn<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        match tokio::task::spawn_blocking(f).await {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::error!("NFS handler failed: {e}");
                None
            }
        }
    }

    /// A READ answered by splicing page-cache pages into a pipe, on buffered exports, for READs
    /// of at least [`SPLICE_MIN_BYTES`] of files without held writes. `None` (nothing sent, no
    /// state changed but the sequential table) means use the chunk path: no pipe free, another
    /// cache mode, a small READ, held data to land first, or any failure (the chunk path
    /// reports it).
    async fn read_spliced(
        &self,
        fs: Arc<LocalFs>,
        caller: Caller,
        a: &ReadArgs,
    ) -> Option<(ReadResOk, LentPipe)> {
        let count = a.count.min(fs.config().read_bytes_max) as usize;
        if count < SPLICE_MIN_BYTES
            || fs.read_mode() != backend::IoMode::Buffered
            || self.io.wb.holds(&a.file.0)
        {
            return None;
        }
        let mut pipe = self.pipes.acquire(a.offset, count)?;
        let (stats, io, a) = (self.stats.clone(), self.io.clone(), a.clone());
        self.spawn(move || {
            let since = io.wb.epoch();
            let fh = map::handle(&a.file);
            let ahead = io.seq.observe_read(&a.file.0, a.offset, count as u64);
            let ok = fs
                .read_with(&caller, &fh, a.offset, count, |f| {
                    pipe.fill(f.as_fd(), a.offset, count)
                })
                .ok()?;
            if let Some(ra) = ahead {
                fs.readahead_hint(&fh, ra.offset, ra.len);
            }
            stats.wire_read_bytes.record(ok.count as u64);
            stats.backend_read_bytes.record(ok.count as u64);
            let mut attr = Some(ok.attr);
            fix_post_op(&io, &fs, &fh, &mut attr, since);
            let end = a.offset + ok.count as u64;
            let eof = ok.eof && attr.is_none_or(|at| at.size <= end);
            let res = ReadResOk {
                file_attributes: map::post_op(attr),
                count: ok.count as u32,
                eof,
                data: Payload::new(),
            };
            Some((res, pipe))
        })
        .await
        .flatten()
    }

    /// READ (RFC 1813 §3.3.6): held data overlapping the range lands first; the reply's data are
    /// pooled chunks.
    async fn read(&self, fs: Arc<LocalFs>, caller: Caller, a: ReadArgs) -> ReadRes {
        let fail = |s| NfsResult::Err(s, ReadResFail::default());
        let wb = &self.io.wb;
        let count = a.count.min(fs.config().read_bytes_max);
        if count > 0 && wb.holds(&a.file.0) {
            wb.flush_range(&a.file.0, a.offset, u64::from(count)).await;
        } else if (count as usize) < SPLICE_MIN_BYTES {
            // A small READ of cached data costs less than the hand-off to a blocking thread, and
            // one that needs the disk goes there through io_uring.
            match read_nowait(&fs, &caller, &a, count, &self.stats, &self.io) {
                Some(Nowait::Done(res)) => return res,
                Some(Nowait::NeedsDisk(checked, bufs)) => {
                    if let Some(res) = self.read_uring(&fs, &a, count, checked, bufs).await {
                        return res;
                    }
                }
                None => {}
            }
        }
        let run = |fs: Arc<LocalFs>, caller: Caller, a: ReadArgs| {
            let (stats, io) = (self.stats.clone(), self.io.clone());
            self.spawn(move || read(&fs, &caller, &a, count, &stats, &io))
        };
        let Some(mut res) = run(fs.clone(), caller.clone(), a.clone()).await else {
            return fail(Nfsstat3::SERVERFAULT);
        };
        if let NfsResult::Ok(ok) = &res {
            // Short, with held data beyond: a hole before a held write reads as zeros only once
            // the write has landed.
            let got_end = a.offset + u64::from(ok.count);
            if ok.count < count && wb.held_end(&a.file.0).is_some_and(|e| e > got_end) {
                wb.flush_range(&a.file.0, got_end, 0).await;
                drop(res);
                res = match run(fs, caller, a).await {
                    Some(r) => r,
                    None => return fail(Nfsstat3::SERVERFAULT),
                };
            }
        }
        res
    }

    /// The READ of a file [`LocalFs::read_nowait`] found checked but not cached, through the
    /// ring. `None` (nothing answered) when there is no ring, it is full, or the read failed or
    /// came back short: the blocking path then does it again and reports any error.
    async fn read_uring(
        &self,
        fs: &Arc<LocalFs>,
        a: &ReadArgs,
        count: u32,
        checked: backend::CheckedRead,
        bufs: Vec<crate::io::pool::PooledChunk>,
    ) -> Option<ReadRes> {
        let uring = self.io.uring.as_ref()?;
        let since = self.io.wb.epoch();
        let (res, bufs) = uring
            .read(checked.file.clone(), a.offset, bufs)
            .await
            .ok()?;
        let ok = fs.read_finish(&checked, a.offset, count as usize, res.ok()?)?;
        self.stats
            .engine
            .uring_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ahead = self
            .io
            .seq
            .observe_read(&a.file.0, a.offset, u64::from(count));
        Some(read_reply(
            fs,
            a,
            Ok(ok),
            bufs,
            ahead,
            since,
            &self.stats,
            &self.io,
        ))
    }

    /// WRITE (§3.3.7). UNSTABLE: held by write-behind and acknowledged from memory once the
    /// caller's permission is checked. DATA_SYNC/FILE_SYNC: held data overlapping the range
    /// lands first, then the write goes through.
    async fn write(&self, fs: Arc<LocalFs>, caller: Caller, a: WriteArgs) -> WriteRes {
        let fail = |s| NfsResult::Err(s, WriteResFail::default());
        let Some(stable) = stable_to_backend(a.stable) else {
            return fail(Nfsstat3::INVAL);
        };
        // RFC 1813 §3.3.7: `count` is the number of bytes of `data` to write; more than was sent
        // is a malformed request.
        let count = a.count as usize;
        if count > a.data.len() {
            return fail(Nfsstat3::INVAL);
        }
        self.stats.wire_write_bytes.record(count as u64);
        self.io.seq.observe_write(&a.file.0, a.offset, count as u64);
        let chunks = payload_prefix(&a.data, count);
        let wb = &self.io.wb;
        if stable != backend::StableHow::Unstable || !self.io.config.write_behind_enabled {
            if count > 0 && wb.holds(&a.file.0) {
                wb.flush_range(&a.file.0, a.offset, count as u64).await;
            }
            let (stats, io) = (self.stats.clone(), self.io.clone());
            return self
                .spawn(move || write_through(&fs, &caller, &a, &chunks, stable, &stats, &io))
                .await
                .unwrap_or(fail(Nfsstat3::SERVERFAULT));
        }
        if a.offset
            .checked_add(count as u64)
            .is_none_or(|end| end > i64::MAX as u64)
        {
            return fail(Nfsstat3::FBIG);
        }
        wb.admit(count as u64).await;
        // The permission check, as the caller: the backend's WRITE path without the data.
        let fh = map::handle(&a.file);
        let (fs2, c2, fh2) = (fs.clone(), caller.clone(), fh.clone());
        let checked = self
            .spawn(move || {
                match fs2.write(&c2, &fh2, a.offset, &[], backend::StableHow::Unstable) {
                    Ok(w) => (None, w.wcc),
                    Err((s, wcc)) => (Some(s), wcc),
                }
            })
            .await;
        let mut wcc = match checked {
            Some((None, wcc)) => wcc,
            Some((Some(s), file_wcc)) => {
                wb.cancel(count as u64);
                return NfsResult::Err(
                    map::status(s),
                    WriteResFail {
                        file_wcc: map::wcc(&file_wcc),
                    },
                );
            }
            None => {
                wb.cancel(count as u64);
                return fail(Nfsstat3::SERVERFAULT);
            }
        };
        let previous_end = wb.hold(&fs, &fh, a.offset, chunks, caller);
        if let (Some(before), Some(end)) = (wcc.before.as_mut(), previous_end) {
            before.size = before.size.max(end);
        }
        if let Some(after) = wcc.after.as_mut() {
            let end = wb.held_end(&a.file.0).unwrap_or(0);
            after.size = after.size.max(end).max(a.offset + count as u64);
        }
        NfsResult::Ok(WriteResOk {
            file_wcc: map::wcc(&wcc),
            count: count as u32,
            committed: StableHow::UNSTABLE,
            verf: fs.write_verifier(),
        })
    }

    /// COMMIT (§3.3.21): held data overlapping the range lands, then a flush error remembered
    /// for the file is reported, or the range is made durable.
    async fn commit(&self, fs: Arc<LocalFs>, caller: Caller, a: CommitArgs) -> CommitRes {
        let wb = &self.io.wb;
        wb.flush_range(&a.file.0, a.offset, u64::from(a.count))
            .await;
        let fh = map::handle(&a.file);
        if let Some(s) = wb.take_error(&a.file.0) {
            let attr = self.spawn(move || fs.getattr(&fh).ok()).await.flatten();
            return NfsResult::Err(
                map::status(s),
                CommitResFail {
                    file_wcc: map::wcc(&Wcc::after(attr)),
                },
            );
        }
        let io = self.io.clone();
        self.spawn(move || {
            let since = io.wb.epoch();
            match fs.commit(&caller, &fh, a.offset, a.count) {
                Ok(mut file_wcc) => {
                    fix_post_op(&io, &fs, &fh, &mut file_wcc.after, since);
                    NfsResult::Ok(CommitResOk {
                        file_wcc: map::wcc(&file_wcc),
                        verf: fs.write_verifier(),
                    })
                }
                Err((s, file_wcc)) => NfsResult::Err(
                    map::status(s),
                    CommitResFail {
                        file_wcc: map::wcc(&file_wcc),
                    },
                ),
            }
        })
        .await
        .unwrap_or(NfsResult::Err(
            Nfsstat3::SERVERFAULT,
            CommitResFail::default(),
        ))
    }

    /// REMOVE (§3.3.12) while write-behind holds data: if the removed file's handle is stale
    /// afterwards (its last link is gone), its held data is dropped.
    async fn remove(&self, fs: Arc<LocalFs>, caller: Caller, a: RemoveArgs) -> Res3 {
        let (fs2, c2, dir, name) = (
            fs.clone(),
            caller.clone(),
            a.object.dir.clone(),
            a.object.name.clone(),
        );
        let target = self
            .spawn(move || {
                fs2.lookup(&c2, &map::handle(&dir), &name)
                    .ok()
                    .map(|l| l.fh)
            })
            .await
            .flatten()
            .filter(|fh| self.io.wb.holds(fh.as_bytes()));
        let res = self.blocking(fs.clone(), caller, Args3::Remove(a)).await;
        if let (Some(fh), Res3::Remove(NfsResult::Ok(_))) = (target, &res) {
            let fh2 = fh.clone();
            let gone = self
                .spawn(move || fs.getattr(&fh2).is_err())
                .await
                .unwrap_or(false);
            if gone {
                self.io.wb.discard(fh.as_bytes()).await;
            }
        }
        res
    }
}

fn creates_with_size(how: &CreateHow) -> bool {
    matches!(how, CreateHow::Unchecked(s) if s.size.is_some())
}

/// The first `count` bytes of a WRITE's payload, as slices of its segments.
fn payload_prefix(data: &Payload, count: usize) -> Vec<Bytes> {
    let mut chunks: Vec<Bytes> = Vec::with_capacity(data.chunks().len());
    let mut left = count;
    for c in data.chunks() {
        if left == 0 {
            break;
        }
        let n = left.min(c.len());
        chunks.push(c.slice(..n));
        left -= n;
    }
    chunks
}

/// Largest READ/WRITE offered over UDP: a reply must fit one datagram (64 KiB less headers), and
/// 32 KiB is what knfsd offers so that IP fragmentation stays modest.
pub const UDP_IO_BYTES_MAX: u32 = 32 * 1024;

/// Over UDP, FSINFO advertises datagram-sized transfers.
fn cap_for_datagrams(res: &mut Res3) {
    if let Res3::Fsinfo(NfsResult::Ok(f)) = res {
        f.rtmax = f.rtmax.min(UDP_IO_BYTES_MAX);
        f.rtpref = f.rtpref.min(UDP_IO_BYTES_MAX);
        f.wtmax = f.wtmax.min(UDP_IO_BYTES_MAX);
        f.wtpref = f.wtpref.min(UDP_IO_BYTES_MAX);
        f.dtpref = f.dtpref.min(UDP_IO_BYTES_MAX);
    }
}

/// The credentials a call runs with: AUTH_SYS ids, or the export's anonymous ids for AUTH_NONE,
/// then squashed by the export's rules.
pub fn caller_for(cred: &Credentials, opts: &ExportOptions) -> Caller {
    let c = match cred {
        Credentials::Sys(a) => Cred::new(a.uid, a.gid).with_groups(&a.gids),
        Credentials::None => Cred::new(opts.anonuid, opts.anongid),
    };
    Caller::new(&c, opts)
}

/// The handle that decides which export a call is for.
fn primary_fh(args: &Args3) -> &NfsFh3 {
    static EMPTY: NfsFh3 = NfsFh3(Bytes::new());
    match args {
        Args3::Null(()) => &EMPTY,
        Args3::Getattr(a) => &a.object,
        Args3::Setattr(a) => &a.object,
        Args3::Lookup(a) => &a.what.dir,
        Args3::Access(a) => &a.object,
        Args3::Readlink(a) => &a.symlink,
        Args3::Read(a) => &a.file,
        Args3::Write(a) => &a.file,
        Args3::Create(a) => &a.where_.dir,
        Args3::Mkdir(a) => &a.where_.dir,
        Args3::Symlink(a) => &a.where_.dir,
        Args3::Mknod(a) => &a.where_.dir,
        Args3::Remove(a) => &a.object.dir,
        Args3::Rmdir(a) => &a.object.dir,
        Args3::Rename(a) => &a.from.dir,
        Args3::Link(a) => &a.file,
        Args3::Readdir(a) => &a.dir,
        Args3::Readdirplus(a) => &a.dir,
        Args3::Fsstat(a) => &a.fsroot,
        Args3::Fsinfo(a) => &a.fsroot,
        Args3::Pathconf(a) => &a.object,
        Args3::Commit(a) => &a.file,
    }
}

fn res_status(res: &Res3) -> Nfsstat3 {
    match res {
        Res3::Null(()) => Nfsstat3::OK,
        Res3::Getattr(r) => r.status(),
        Res3::Setattr(r) => r.status(),
        Res3::Lookup(r) => r.status(),
        Res3::Access(r) => r.status(),
        Res3::Readlink(r) => r.status(),
        Res3::Read(r) => r.status(),
        Res3::Write(r) => r.status(),
        Res3::Create(r) => r.status(),
        Res3::Mkdir(r) => r.status(),
        Res3::Symlink(r) => r.status(),
        Res3::Mknod(r) => r.status(),
        Res3::Remove(r) => r.status(),
        Res3::Rmdir(r) => r.status(),
        Res3::Rename(r) => r.status(),
        Res3::Link(r) => r.status(),
        Res3::Readdir(r) => r.status(),
        Res3::Readdirplus(r) => r.status(),
        Res3::Fsstat(r) => r.status(),
        Res3::Fsinfo(r) => r.status(),
        Res3::Pathconf(r) => r.status(),
        Res3::Commit(r) => r.status(),
    }
}

/// The failure result of `args`' procedure with an empty body (no attributes known).
fn failure(args: &Args3, s: Nfsstat3) -> Res3 {
    use NfsResult::Err as E;
    match args {
        Args3::Null(()) => Res3::Null(()),
        Args3::Getattr(_) => Res3::Getattr(E(s, ())),
        Args3::Setattr(_) => Res3::Setattr(E(s, Default::default())),
        Args3::Lookup(_) => Res3::Lookup(E(s, Default::default())),
        Args3::Access(_) => Res3::Access(E(s, Default::default())),
        Args3::Readlink(_) => Res3::Readlink(E(s, Default::default())),
        Args3::Read(_) => Res3::Read(E(s, Default::default())),
        Args3::Write(_) => Res3::Write(E(s, Default::default())),
        Args3::Create(_) => Res3::Create(E(s, Default::default())),
        Args3::Mkdir(_) => Res3::Mkdir(E(s, Default::default())),
        Args3::Symlink(_) => Res3::Symlink(E(s, Default::default())),
        Args3::Mknod(_) => Res3::Mknod(E(s, Default::default())),
        Args3::Remove(_) => Res3::Remove(E(s, Default::default())),
        Args3::Rmdir(_) => Res3::Rmdir(E(s, Default::default())),
        Args3::Rename(_) => Res3::Rename(E(s, Default::default())),
        Args3::Link(_) => Res3::Link(E(s, Default::default())),
        Args3::Readdir(_) => Res3::Readdir(E(s, Default::default())),
        Args3::Readdirplus(_) => Res3::Readdirplus(E(s, Default::default())),
        Args3::Fsstat(_) => Res3::Fsstat(E(s, Default::default())),
        Args3::Fsinfo(_) => Res3::Fsinfo(E(s, Default::default())),
        Args3::Pathconf(_) => Res3::Pathconf(E(s, Default::default())),
        Args3::Commit(_) => Res3::Commit(E(s, Default::default())),
    }
}

fn created(r: backend::Res<backend::CreateOk, Wcc>) -> CreateRes {
    match r {
        Ok(c) => NfsResult::Ok(CreateResOk {
            obj: Some(map::fh3(&c.fh)),
            obj_attributes: Some(map::fattr3(&c.attr)),
            dir_wcc: map::wcc(&c.dir_wcc),
        }),
        Err((s, dir_wcc)) => NfsResult::Err(
            map::status(s),
            CreateResFail {
                dir_wcc: map::wcc(&dir_wcc),
            },
        ),
    }
}

fn stable_to_backend(s: StableHow) -> Option<backend::StableHow> {
    match s {
        StableHow::UNSTABLE => Some(backend::StableHow::Unstable),
        StableHow::DATA_SYNC => Some(backend::StableHow::DataSync),
        StableHow::FILE_SYNC => Some(backend::StableHow::FileSync),
        _ => None,
    }
}

fn stable_to_wire(s: backend::StableHow) -> StableHow {
    match s {
        backend::StableHow::Unstable => StableHow::UNSTABLE,
        backend::StableHow::DataSync => StableHow::DATA_SYNC,
        backend::StableHow::FileSync => StableHow::FILE_SYNC,
    }
}

/// Runs one procedure on the blocking pool. Attributes of files with held writes are fixed
/// up (size) before they leave; see [`crate::io::writebehind`].
fn execute(fs: &LocalFs, caller: &Caller, args: Args3, stats: &Stats, io: &Engine) -> Res3 {
    use NfsResult::{Err as E, Ok as O};
    let since = io.wb.epoch();
    match args {
        Args3::Null(()) => Res3::Null(()),
        Args3::Getattr(a) => {
            let fh = map::handle(&a.object);
            Res3::Getattr(match fs.getattr(&fh) {
                Ok(mut attr) => {
                    if io.wb.fix_size(fh.as_bytes(), &mut attr, since) == SizeFix::Uncertain {
                        attr = match fs.getattr(&fh) {
                            Ok(again) => again,
                            Err(s) => return Res3::Getattr(E(map::status(s), ())),
                        };
                    }
                    O(GetattrResOk {
                        obj_attributes: map::fattr3(&attr),
                    })
                }
                Err(s) => E(map::status(s), ()),
            })
        }
        Args3::Setattr(a) => {
            let fh = map::handle(&a.object);
            let sattr = map::sattr(&a.new_attributes);
            Res3::Setattr(
                match fs.setattr(caller, &fh, &sattr, a.guard.map(map::time)) {
                    Ok(mut obj_wcc) => {
                        fix_post_op(io, fs, &fh, &mut obj_wcc.after, since);
                        O(SetattrResOk {
                            obj_wcc: map::wcc(&obj_wcc),
                        })
                    }
                    Err((s, obj_wcc)) => E(
                        map::status(s),
                        SetattrResFail {
                            obj_wcc: map::wcc(&obj_wcc),
                        },
                    ),
                },
            )
        }
        Args3::Lookup(a) => Res3::Lookup(
            match fs.lookup(caller, &map::handle(&a.what.dir), &a.what.name) {
                Ok(l) => {
                    let mut obj_attributes = Some(l.attr);
                    fix_post_op(io, fs, &l.fh, &mut obj_attributes, since);
                    O(LookupResOk {
                        object: map::fh3(&l.fh),
                        obj_attributes: map::post_op(obj_attributes),
                        dir_attributes: map::post_op(l.dir_attr),
                    })
                }
                Err((s, dir_attributes)) => E(
                    map::status(s),
                    LookupResFail {
                        dir_attributes: map::post_op(dir_attributes),
                    },
                ),
            },
        ),
        Args3::Access(a) => {
            let fh = map::handle(&a.object);
            Res3::Access(match fs.access(caller, &fh, a.access) {
                Ok((access, mut obj_attributes)) => {
                    fix_post_op(io, fs, &fh, &mut obj_attributes, since);
                    O(AccessResOk {
                        obj_attributes: map::post_op(obj_attributes),
                        access,
                    })
                }
                Err((s, obj_attributes)) => E(
                    map::status(s),
                    AccessResFail {
                        obj_attributes: map::post_op(obj_attributes),
                    },
                ),
            })
        }
        Args3::Readlink(a) => Res3::Readlink(match fs.readlink(&map::handle(&a.symlink)) {
            Ok((target, symlink_attributes)) => O(ReadlinkResOk {
                symlink_attributes: map::post_op(symlink_attributes),
                data: Bytes::from(target),
            }),
            Err((s, symlink_attributes)) => E(
                map::status(s),
                ReadlinkResFail {
                    symlink_attributes: map::post_op(symlink_attributes),
                },
            ),
        }),
        Args3::Read(a) => {
            let count = a.count.min(fs.config().read_bytes_max);
            Res3::Read(read(fs, caller, &a, count, stats, io))
        }
        Args3::Write(a) => {
            let Some(stable) = stable_to_backend(a.stable) else {
                return Res3::Write(E(Nfsstat3::INVAL, WriteResFail::default()));
            };
            if a.count as usize > a.data.len() {
                return Res3::Write(E(Nfsstat3::INVAL, WriteResFail::default()));
            }
            let chunks = payload_prefix(&a.data, a.count as usize);
            Res3::Write(write_through(fs, caller, &a, &chunks, stable, stats, io))
        }
        Args3::Create(a) => {
            let how = match a.how {
                CreateHow::Unchecked(s) => backend::CreateHow::Unchecked(map::sattr(&s)),
                CreateHow::Guarded(s) => backend::CreateHow::Guarded(map::sattr(&s)),
                CreateHow::Exclusive(v) => backend::CreateHow::Exclusive(v),
            };
            Res3::Create(created(fs.create(
                caller,
                &map::handle(&a.where_.dir),
                &a.where_.name,
                how,
            )))
        }
        Args3::Mkdir(a) => Res3::Mkdir(created(fs.mkdir(
            caller,
            &map::handle(&a.where_.dir),
            &a.where_.name,
            &map::sattr(&a.attributes),
        ))),
        Args3::Symlink(a) => Res3::Symlink(created(fs.symlink(
            caller,
            &map::handle(&a.where_.dir),
            &a.where_.name,
            &a.symlink_data,
            &map::sattr(&a.symlink_attributes),
        ))),
        Args3::Mknod(a) => {
            // A type MKNOD cannot create has no attributes to decode; the file system answers
            // BADTYPE for it.
            let (ftype, sattr, spec) = match a.what {
                MknodData::Chr(d) => (Ftype3::CHR, d.dev_attributes, d.spec),
                MknodData::Blk(d) => (Ftype3::BLK, d.dev_attributes, d.spec),
                MknodData::Sock(s) => (Ftype3::SOCK, s, Specdata3::default()),
                MknodData::Fifo(s) => (Ftype3::FIFO, s, Specdata3::default()),
                other => (other.ftype(), Sattr3::default(), Specdata3::default()),
            };
            let ftype = match ftype {
                Ftype3::CHR => backend::FileType::CharDevice,
                Ftype3::BLK => backend::FileType::BlockDevice,
                Ftype3::SOCK => backend::FileType::Socket,
                Ftype3::FIFO => backend::FileType::Fifo,
                Ftype3::DIR => backend::FileType::Directory,
                Ftype3::LNK => backend::FileType::Symlink,
                _ => backend::FileType::Regular,
            };
            Res3::Mknod(created(fs.mknod(
                caller,
                &map::handle(&a.where_.dir),
                &a.where_.name,
                ftype,
                &map::sattr(&sattr),
                map::device(spec),
            )))
        }
        Args3::Remove(a) => Res3::Remove(removed(fs.remove(
            caller,
            &map::handle(&a.object.dir),
            &a.object.name,
        ))),
        Args3::Rmdir(a) => Res3::Rmdir(removed(fs.rmdir(
            caller,
            &map::handle(&a.object.dir),
            &a.object.name,
        ))),
        Args3::Rename(a) => Res3::Rename(
            match fs.rename(
                caller,
                &map::handle(&a.from.dir),
                &a.from.name,
                &map::handle(&a.to.dir),
                &a.to.name,
            ) {
                Ok(w) => O(RenameResOk {
                    fromdir_wcc: map::wcc(&w.from_dir),
                    todir_wcc: map::wcc(&w.to_dir),
                }),
                Err((s, w)) => E(
                    map::status(s),
                    RenameResFail {
                        fromdir_wcc: map::wcc(&w.from_dir),
                        todir_wcc: map::wcc(&w.to_dir),
                    },
                ),
            },
        ),
        Args3::Link(a) => {
            let fh = map::handle(&a.file);
            Res3::Link(
                match fs.link(caller, &fh, &map::handle(&a.link.dir), &a.link.name) {
                    Ok(mut l) => {
                        fix_post_op(io, fs, &fh, &mut l.attr, since);
                        O(LinkResOk {
                            file_attributes: map::post_op(l.attr),
                            linkdir_wcc: map::wcc(&l.dir_wcc),
                        })
                    }
                    Err((s, l)) => E(
                        map::status(s),
                        LinkResFail {
                            file_attributes: map::post_op(l.attr),
                            linkdir_wcc: map::wcc(&l.dir_wcc),
                        },
                    ),
                },
            )
        }
        Args3::Readdir(a) => Res3::Readdir(readdir(fs, caller, a)),
        Args3::Readdirplus(a) => {
            let mut res = readdirplus(fs, caller, a);
            if let NfsResult::Ok(ok) = &mut res {
                io.wb.fix_sizes(
                    ok.entries.iter_mut().filter_map(|e| {
                        let fh = e.name_handle.as_ref()?;
                        Some((&fh.0[..], &mut e.name_attributes))
                    }),
                    since,
                );
            }
            Res3::Readdirplus(res)
        }
        Args3::Fsstat(a) => Res3::Fsstat(match fs.fsstat(&map::handle(&a.fsroot)) {
            Ok(f) => O(FsstatResOk {
                obj_attributes: map::post_op(f.attr),
                tbytes: f.tbytes,
                fbytes: f.fbytes,
                abytes: f.abytes,
                tfiles: f.tfiles,
                ffiles: f.ffiles,
                afiles: f.afiles,
                invarsec: f.invarsec,
            }),
            Err((s, a)) => E(
                map::status(s),
                FsstatResFail {
                    obj_attributes: map::post_op(a),
                },
            ),
        }),
        Args3::Fsinfo(a) => Res3::Fsinfo(match fs.fsinfo(&map::handle(&a.fsroot)) {
            Ok(f) => O(FsinfoResOk {
                obj_attributes: map::post_op(f.attr),
                rtmax: f.rtmax,
                rtpref: f.rtpref,
                rtmult: f.rtmult,
                wtmax: f.wtmax,
                wtpref: f.wtpref,
                wtmult: f.wtmult,
                dtpref: f.dtpref,
                maxfilesize: f.maxfilesize,
                time_delta: map::time3(f.time_delta),
                // The layer's property bits are FSINFO3's (see `backend::fsprops`).
                properties: f.properties,
            }),
            Err((s, a)) => E(
                map::status(s),
                FsinfoResFail {
                    obj_attributes: map::post_op(a),
                },
            ),
        }),
        Args3::Pathconf(a) => Res3::Pathconf(match fs.pathconf(&map::handle(&a.object)) {
            Ok(p) => O(PathconfResOk {
                obj_attributes: map::post_op(p.attr),
                linkmax: p.linkmax,
                name_max: p.name_max,
                no_trunc: p.no_trunc,
                chown_restricted: p.chown_restricted,
                case_insensitive: p.case_insensitive,
                case_preserving: p.case_preserving,
            }),
            Err((s, a)) => E(
                map::status(s),
                PathconfResFail {
                    obj_attributes: map::post_op(a),
                },
            ),
        }),
        // COMMIT always goes through `Nfs3::commit` (held data must land first).
        Args3::Commit(_) => Res3::Commit(E(Nfsstat3::SERVERFAULT, CommitResFail::default())),
    }
}

/// Post-op attributes of a file with held writes: size fixed, or read again when a fix cannot
/// tell (see [`SizeFix`]).
fn fix_post_op(io: &Engine, fs: &LocalFs, fh: &FileHandle, attr: &mut Option<Attr>, since: u64) {
    if let Some(a) = attr.as_mut() {
        if io.wb.fix_size(fh.as_bytes(), a, since) == SizeFix::Uncertain {
            *attr = fs.getattr(fh).ok();
        }
    }
}

/// READ of `count` bytes into pooled chunks; starts server readahead for a sequential reader.
fn read(
    fs: &LocalFs,
    caller: &Caller,
    a: &ReadArgs,
    count: u32,
    stats: &Stats,
    io: &Engine,
) -> ReadRes {
    let since = io.wb.epoch();
    let Some(mut bufs) = io.pool.acquire_for(count as usize) else {
        tracing::warn!(count, "READ buffers exhausted; answering JUKEBOX");
        return NfsResult::Err(Nfsstat3::JUKEBOX, ReadResFail::default());
    };
    let ahead = io.seq.observe_read(&a.file.0, a.offset, u64::from(count));
    let res = fs.read(caller, &map::handle(&a.file), a.offset, &mut bufs);
    read_reply(fs, a, res, bufs, ahead, since, stats, io)
}

/// The reply to a READ whose data the backend placed in `bufs`: the chunks as the payload,
/// server readahead started, attributes fixed for held writes.
#[allow(clippy::too_many_arguments)]
fn read_reply(
    fs: &LocalFs,
    a: &ReadArgs,
    res: backend::Res<backend::ReadOk, Option<Attr>>,
    bufs: Vec<crate::io::pool::PooledChunk>,
    ahead: Option<crate::io::seq::Readahead>,
    since: u64,
    stats: &Stats,
    io: &Engine,
) -> ReadRes {
    let fh = map::handle(&a.file);
    match res {
        Ok(ok) => {
            if let Some(ra) = ahead {
                fs.readahead_hint(&fh, ra.offset, ra.len);
            }
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
            stats.wire_read_bytes.record(ok.count as u64);
            stats.backend_read_bytes.record(ok.count as u64);
            let mut attr = Some(ok.attr);
            fix_post_op(io, fs, &fh, &mut attr, since);
            let end = a.offset + ok.count as u64;
            // Held data beyond what was read: not the end of the file yet.
            let eof = ok.eof && attr.is_none_or(|at| at.size <= end);
            NfsResult::Ok(ReadResOk {
                file_attributes: map::post_op(attr),
                count: ok.count as u32,
                eof,
                data,
            })
        }
        Err((s, file_attributes)) => NfsResult::Err(
            map::status(s),
            ReadResFail {
                file_attributes: map::post_op(file_attributes),
            },
        ),
    }
}

/// What [`read_nowait`] did.
enum Nowait {
    Done(ReadRes),
    /// Checked, not all cached: the file and the chunks for an asynchronous read.
    NeedsDisk(backend::CheckedRead, Vec<crate::io::pool::PooledChunk>),
}

/// [`read`] from the page cache without blocking (see [`LocalFs::read_nowait`]), on the
/// caller's (async) thread; `None` when it cannot be tried: nothing was done.
fn read_nowait(
    fs: &LocalFs,
    caller: &Caller,
    a: &ReadArgs,
    count: u32,
    stats: &Stats,
    io: &Engine,
) -> Option<Nowait> {
    let since = io.wb.epoch();
    let mut bufs = io.pool.try_acquire_for(count as usize)?;
    let predictor = io.uring.as_ref().map(|u| &u.predictor);
    let try_cache = predictor.is_none_or(|p| p.try_cache());
    let done = fs.read_nowait(
        caller,
        &map::handle(&a.file),
        a.offset,
        &mut bufs,
        try_cache,
    )?;
    if let (Some(p), true) = (predictor, try_cache) {
        p.record(matches!(done, backend::NowaitRead::Done(_)));
    }
    match done {
        backend::NowaitRead::Done(res) => {
            let ahead = io.seq.observe_read(&a.file.0, a.offset, u64::from(count));
            Some(Nowait::Done(read_reply(
                fs, a, res, bufs, ahead, since, stats, io,
            )))
        }
        backend::NowaitRead::NeedsDisk(checked) => Some(Nowait::NeedsDisk(checked, bufs)),
    }
}

/// WRITE straight to the backend (DATA_SYNC, FILE_SYNC, or write-behind disabled).
fn write_through(
    fs: &LocalFs,
    caller: &Caller,
    a: &WriteArgs,
    chunks: &[Bytes],
    stable: backend::StableHow,
    stats: &Stats,
    io: &Engine,
) -> WriteRes {
    let since = io.wb.epoch();
    let fh = map::handle(&a.file);
    match fs.write(caller, &fh, a.offset, chunks, stable) {
        Ok(mut w) => {
            stats.backend_write_bytes.record(w.count as u64);
            fix_post_op(io, fs, &fh, &mut w.wcc.after, since);
            NfsResult::Ok(WriteResOk {
                file_wcc: map::wcc(&w.wcc),
                count: w.count as u32,
                committed: stable_to_wire(w.committed),
                verf: fs.write_verifier(),
            })
        }
        Err((s, file_wcc)) => NfsResult::Err(
            map::status(s),
            WriteResFail {
                file_wcc: map::wcc(&file_wcc),
            },
        ),
    }
}

fn removed(r: backend::Res<Wcc, Wcc>) -> RemoveRes {
    match r {
        Ok(dir_wcc) => NfsResult::Ok(RemoveResOk {
            dir_wcc: map::wcc(&dir_wcc),
        }),
        Err((s, dir_wcc)) => NfsResult::Err(
            map::status(s),
            RemoveResFail {
                dir_wcc: map::wcc(&dir_wcc),
            },
        ),
    }
}

/// Bytes of a READDIR(PLUS) reply besides the entries: status, dir attributes, verifier, the
/// list terminator and eof.
const READDIR_OVERHEAD_BYTES: usize = 4 + READDIR_RESOK_FIXED_BYTES;

fn readdir(fs: &LocalFs, caller: &Caller, a: ReaddirArgs) -> ReaddirRes {
    let limit = (a.count as usize).min(READDIR_REPLY_BYTES_MAX);
    let mut used = READDIR_OVERHEAD_BYTES;
    let mut entries: Vec<Entry3> = Vec::new();
    let mut visit = |e: DirEntry<'_>| {
        let entry = Entry3 {
            fileid: e.fileid,
            name: Bytes::copy_from_slice(e.name),
            cookie: e.cookie,
        };
        let n = entry.encoded_len();
        if used + n > limit {
            return false;
        }
        used += n;
        entries.push(entry);
        true
    };
    match fs.readdir(
        caller,
        &map::handle(&a.dir),
        a.cookie,
        a.cookieverf,
        false,
        &mut visit,
    ) {
        Ok(ok) => {
            if entries.is_empty() && !ok.eof {
                return NfsResult::Err(
                    Nfsstat3::TOOSMALL,
                    ReaddirResFail {
                        dir_attributes: map::post_op(ok.dir_attr),
                    },
                );
            }
            NfsResult::Ok(ReaddirResOk {
                dir_attributes: map::post_op(ok.dir_attr),
                cookieverf: ok.cookieverf,
                entries,
                eof: ok.eof,
            })
        }
        Err((s, a)) => NfsResult::Err(
            map::status(s),
            ReaddirResFail {
                dir_attributes: map::post_op(a),
            },
        ),
    }
}

fn readdirplus(fs: &LocalFs, caller: &Caller, a: ReaddirplusArgs) -> ReaddirplusRes {
    let limit = (a.maxcount as usize).min(READDIR_REPLY_BYTES_MAX);
    // RFC 1813 §3.3.17: dircount bounds the directory information alone (fileid, name, cookie).
    // Zero is taken as "no separate bound", as some clients send it.
    let dir_limit = if a.dircount == 0 {
        usize::MAX
    } else {
        a.dircount as usize
    };
    let mut used = READDIR_OVERHEAD_BYTES;
    let mut dir_used = 0usize;
    let mut entries: Vec<Entryplus3> = Vec::new();
    let mut visit = |e: DirEntry<'_>| {
        let entry = Entryplus3 {
            fileid: e.fileid,
            name: Bytes::copy_from_slice(e.name),
            cookie: e.cookie,
            name_attributes: map::post_op(e.attr),
            name_handle: e.fh.as_ref().map(map::fh3),
        };
        let n = entry.encoded_len();
        let d = entry.dir_info_len();
        if used + n > limit || (!entries.is_empty() && dir_used + d > dir_limit) {
            return false;
        }
        used += n;
        dir_used += d;
        entries.push(entry);
        true
    };
    match fs.readdir(
        caller,
        &map::handle(&a.dir),
        a.cookie,
        a.cookieverf,
        true,
        &mut visit,
    ) {
        Ok(ok) => {
            if entries.is_empty() && !ok.eof {
                return NfsResult::Err(
                    Nfsstat3::TOOSMALL,
                    ReaddirplusResFail {
                        dir_attributes: map::post_op(ok.dir_attr),
                    },
                );
            }
            NfsResult::Ok(ReaddirplusResOk {
                dir_attributes: map::post_op(ok.dir_attr),
                cookieverf: ok.cookieverf,
                entries,
                eof: ok.eof,
            })
        }
        Err((s, a)) => NfsResult::Err(
            map::status(s),
            ReaddirplusResFail {
                dir_attributes: map::post_op(a),
            },
        ),
    }
}
