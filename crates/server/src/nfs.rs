//! NFSv3 procedure handlers (RFC 1813 §3.3): wire arguments in, wire results out.
//!
//! This layer only translates. It picks the export a handle belongs to, applies the export's
//! client rules and squashing, runs the backend call on the blocking pool (every backend call is a
//! few syscalls under the caller's fsuid), and turns the backend's answer into the procedure's
//! `resok`/`resfail`. Semantics (permissions, wcc data, confinement) live in the backend.
//!
//! READ, WRITE and COMMIT go through the version-neutral data path ([`crate::datapath`], which
//! has the design essay: splice, in-place `RWF_NOWAIT`, io_uring, pooled chunks, write-behind);
//! this layer only checks what is v3's to check and encodes the answer. The one mapping between
//! the file-system layer's neutral types and NFSv3's is in `nfs/map.rs`.
//!
//! Most procedures are one backend call on the blocking pool ([`execute`]). READ, WRITE, COMMIT,
//! size-changing SETATTR and CREATE, and REMOVE also talk to write-behind around that call, which
//! may mean waiting (for admission, or for held data to land), so they are driven from
//! [`Nfs3::run`] in async code and only their backend calls go to the blocking pool.

use crate::backend::{
    self, export_id_of, Caller, Cred, DirEntry, Export, ExportOptions, FileSystem, Wcc,
};
use crate::datapath::{fix_post_op, DataPath, ReadData};
use crate::io::writebehind::SizeFix;
use crate::io::Engine;
use crate::service::{Peer, Transport};
use crate::splice::{LentPipe, PipePool, SplicedData};
use crate::stats::Stats;
use bytes::Bytes;
use sluice_rpc::server::Credentials;
use sluice_xdr::nfs3::*;
use sluice_xdr::{Pack, Payload, Writer};
use std::sync::Arc;

pub(crate) mod map;

/// Largest READDIR/READDIRPLUS reply built, whatever the client asks (bounds server memory per
/// call; 1 MiB is what Linux clients ask for at most).
pub const READDIR_REPLY_BYTES_MAX: usize = 1 << 20;

/// One export: its file system (a [`LocalFs`](crate::backend::LocalFs) in production; any
/// [`FileSystem`], e.g. an in-memory one, in tests) and its client rules.
pub struct ExportEntry {
    pub fs: Arc<dyn FileSystem>,
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

/// What a procedure answered: results to encode, or a READ whose data was spliced into a pipe
/// (its results without the data, to be followed by the pipe).
enum Reply {
    Res(Res3),
    Spliced(ReadResOk, LentPipe),
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
        // A v3 READ reply ends with its data, so over TCP the data may be spliced.
        let splice_ok = peer.transport == Transport::Tcp;
        let mut res = match self.gate(peer, cred, primary_fh(&args)) {
            Ok((fs, caller)) => match self.run(fs, caller, args, splice_ok).await {
                Reply::Res(res) => res,
                Reply::Spliced(ok, pipe) => {
                    Nfsstat3::OK.pack(w);
                    ok.pack_without_data(w);
                    let tail = Bytes::from_static(&[0u8; 3][..ReadResOk::data_padding(ok.count)]);
                    return (Nfsstat3::OK, Some(SplicedData { pipe, tail }));
                }
            },
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
    ) -> Result<(Arc<dyn FileSystem>, Caller), Gate> {
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

    async fn run(
        &self,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        args: Args3,
        splice_ok: bool,
    ) -> Reply {
        let data = self.data();
        Reply::Res(match args {
            Args3::Read(a) => return self.read(fs, caller, a, splice_ok).await,
            Args3::Write(a) => Res3::Write(self.write(fs, caller, a).await),
            Args3::Commit(a) => Res3::Commit(self.commit(fs, caller, a).await),
            Args3::Setattr(a) if a.new_attributes.size.is_some() => {
                data.before_resize(&map::handle(&a.object)).await;
                self.blocking(fs, caller, Args3::Setattr(a)).await
            }
            Args3::Create(a) if creates_with_size(&a.how) && data.holds_any() => {
                // CREATE UNCHECKED of an existing file applies the size like SETATTR.
                let (dir, name) = (map::handle(&a.where_.dir), a.where_.name.clone());
                data.before_resize_by_name(&fs, &caller, dir, name).await;
                self.blocking(fs, caller, Args3::Create(a)).await
            }
            Args3::Remove(a) if data.holds_any() => self.remove(fs, caller, a).await,
            other => self.blocking(fs, caller, other).await,
        })
    }

    /// Runs one procedure on the blocking pool.
    async fn blocking(&self, fs: Arc<dyn FileSystem>, caller: Caller, args: Args3) -> Res3 {
        let io = self.io.clone();
        let fallback = failure(&args, Nfsstat3::SERVERFAULT);
        self.spawn(move || execute(&*fs, &caller, args, &io))
            .await
            .unwrap_or(fallback)
    }

    /// The data path, over this program's shared state.
    fn data(&self) -> DataPath<'_> {
        DataPath {
            io: &self.io,
            stats: &self.stats,
            pipes: &self.pipes,
        }
    }

    async fn spawn<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        self.io.spawn(f).await
    }

    /// READ (RFC 1813 §3.3.6) through the data path. `splice_ok`: the reply ends with the data
    /// (always so for a v3 READ; the transport decides).
    async fn read(
        &self,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        a: ReadArgs,
        splice_ok: bool,
    ) -> Reply {
        let fh = map::handle(&a.file);
        match self
            .data()
            .read(fs, caller, fh, a.offset, a.count, splice_ok)
            .await
        {
            Ok(done) => {
                let mut ok = ReadResOk {
                    file_attributes: map::post_op(done.attr),
                    count: done.count,
                    eof: done.eof,
                    data: Payload::new(),
                };
                match done.data {
                    ReadData::Chunks(data) => {
                        ok.data = data;
                        Reply::Res(Res3::Read(NfsResult::Ok(ok)))
                    }
                    ReadData::Spliced(pipe) => Reply::Spliced(ok, pipe),
                }
            }
            Err((s, attr)) => Reply::Res(Res3::Read(NfsResult::Err(
                map::status(s),
                ReadResFail {
                    file_attributes: map::post_op(attr),
                },
            ))),
        }
    }

    /// WRITE (§3.3.7): the v3 checks, then the data path.
    async fn write(&self, fs: Arc<dyn FileSystem>, caller: Caller, a: WriteArgs) -> WriteRes {
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
        let chunks = payload_prefix(&a.data, count);
        let fh = map::handle(&a.file);
        match self
            .data()
            .write(fs, caller, fh, a.offset, chunks, stable)
            .await
        {
            Ok(w) => NfsResult::Ok(WriteResOk {
                file_wcc: map::wcc(&w.wcc),
                count: w.count,
                committed: stable_to_wire(w.committed),
                verf: w.verifier,
            }),
            Err((s, wcc)) => NfsResult::Err(
                map::status(s),
                WriteResFail {
                    file_wcc: map::wcc(&wcc),
                },
            ),
        }
    }

    /// COMMIT (§3.3.21) through the data path.
    async fn commit(&self, fs: Arc<dyn FileSystem>, caller: Caller, a: CommitArgs) -> CommitRes {
        let fh = map::handle(&a.file);
        match self.data().commit(fs, caller, fh, a.offset, a.count).await {
            Ok(c) => NfsResult::Ok(CommitResOk {
                file_wcc: map::wcc(&c.wcc),
                verf: c.verifier,
            }),
            Err((s, wcc)) => NfsResult::Err(
                map::status(s),
                CommitResFail {
                    file_wcc: map::wcc(&wcc),
                },
            ),
        }
    }

    /// REMOVE (§3.3.12) while write-behind holds data: if the removed file's handle is stale
    /// afterwards (its last link is gone), its held data is dropped.
    async fn remove(&self, fs: Arc<dyn FileSystem>, caller: Caller, a: RemoveArgs) -> Res3 {
        let (dir, name) = (map::handle(&a.object.dir), a.object.name.clone());
        let target = self.data().held_target(&fs, &caller, dir, name).await;
        let res = self.blocking(fs.clone(), caller, Args3::Remove(a)).await;
        if let (Some(fh), Res3::Remove(NfsResult::Ok(_))) = (target, &res) {
            self.data().after_remove(fs, fh).await;
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
fn execute(fs: &dyn FileSystem, caller: &Caller, args: Args3, io: &Engine) -> Res3 {
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
        // READ, WRITE and COMMIT always go through the data path (`Nfs3::run`).
        Args3::Read(_) => Res3::Read(E(Nfsstat3::SERVERFAULT, ReadResFail::default())),
        Args3::Write(_) => Res3::Write(E(Nfsstat3::SERVERFAULT, WriteResFail::default())),
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
        Args3::Commit(_) => Res3::Commit(E(Nfsstat3::SERVERFAULT, CommitResFail::default())),
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

fn readdir(fs: &dyn FileSystem, caller: &Caller, a: ReaddirArgs) -> ReaddirRes {
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

fn readdirplus(fs: &dyn FileSystem, caller: &Caller, a: ReaddirplusArgs) -> ReaddirplusRes {
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
