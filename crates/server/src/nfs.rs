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
//! # One handler per procedure
//! Each procedure is its argument type's [`Proc3`] implementation: its number, its result
//! types, the handle that picks its export, and how it runs. One generic body ([`Nfs3::call`])
//! does what every procedure shares, so the per-procedure code is only what differs:
//!
//! ```text
//!   registry row (service.rs) ── nfs3_proc::<P> ── decode P (else GARBAGE_ARGS)
//!                                                      │
//!   Nfs3::call::<P>   UDP: clamp P::payload_asked ─► gate(P::fh): export rules, squashing
//!                       │                               │ refused: Err(status, P::Fail::default())
//!                       ▼                               ▼
//!                     P::run ── default: P::execute on the blocking pool
//!                       │       READ, WRITE, COMMIT: the data path; SETATTR, CREATE, REMOVE:
//!                       │       write-behind around P::execute
//!                       ▼
//!                     UDP: P::cap_for_datagrams (FSINFO) ─► encode, or a spliced READ
//! ```
//!
//! Most procedures are one backend call on the blocking pool (`execute`). READ, WRITE, COMMIT,
//! size-changing SETATTR and CREATE, and REMOVE also talk to write-behind around that call, which
//! may mean waiting (for admission, or for held data to land), so their `run` is async code and
//! only their backend calls go to the blocking pool.

use crate::backend::{self, export_id_of, Caller, DirEntry, FileSystem, Wcc};
use crate::datapath::{fix_post_op, DataPath, ReadData};
use crate::io::writebehind::SizeFix;
use crate::io::Engine;
use crate::recall::RecallGate;
use crate::service::inline;
use crate::service::request::{Peer, Transport};
use crate::splice::{LentPipe, PipePool, SplicedData};
use crate::stats::Stats;
use bytes::Bytes;
use sluice_rpc::server::Credentials;
use sluice_xdr::nfs3::*;
use sluice_xdr::{Pack, Payload, Unpack, Writer};
use std::future::Future;
use std::sync::Arc;

pub(crate) mod map;

use crate::backend::gate::{self, Program, Refusal};
use crate::exports::identity;
pub use crate::exports::{caller_for, ExportEntry, READDIR_REPLY_BYTES_MAX};

/// The NFSv3 program.
pub struct Nfs3 {
    pub exports: Arc<Vec<ExportEntry>>,
    pub stats: Arc<Stats>,
    /// Sequential table, READ chunk pool and write-behind, shared by every export.
    pub io: Arc<Engine>,
    /// Pipes for spliced READ replies over TCP ([`crate::splice`]).
    pub pipes: Arc<PipePool>,
    /// The NFSv4 delegations a v3 change must have recalled first ([`crate::recall`]);
    /// `None`: nothing is delegated (no v4 service, the simulator).
    pub recall: Option<Arc<dyn RecallGate>>,
}

/// What a v3 call may conflict with in NFSv4 delegations ([`crate::recall`]'s table).
pub enum Touches<'a> {
    Nothing,
    /// The handle's file: its data, size or attributes (`write`), or a READ of it.
    File {
        fh: &'a NfsFh3,
        write: bool,
    },
    /// The objects these names stand for, if they exist (REMOVE, truncating CREATE; both
    /// names of a RENAME).
    Names(&'a DirOpArgs3, Option<&'a DirOpArgs3>),
}

/// What a procedure answered: results to encode, or a READ whose data was spliced into a pipe
/// (its results without the data, to be followed by the pipe).
pub enum Outcome<T, F> {
    Res(NfsResult<T, F>),
    Spliced(ReadResOk, LentPipe),
}

/// One NFSv3 procedure other than NULL, named by its argument type: what [`Nfs3::call`] needs to
/// decode, gate, run and encode it. The facts that are not about types (name, duplicate request
/// class, reply bound, timer class) are the procedure's row of `sluice_xdr::nfs3::PROCS`, which
/// the registry pairs with this procedure's handler by [`Proc3::NUM`].
pub trait Proc3: Unpack + Send + 'static {
    /// The procedure number.
    const NUM: u32;
    /// The `resok` and `resfail` bodies. A call refused before it runs (no export, refused
    /// client) answers its status with `Fail::default()`: no attributes known.
    type Ok: Pack + Send + 'static;
    type Fail: Pack + Default + Send + 'static;

    /// The handle whose export the call runs in.
    fn fh(&self) -> &NfsFh3;

    /// The reply payload the call asks for (READ's and READDIR's `count`, READDIRPLUS's
    /// `maxcount`): clamped over UDP, and the part of the reply bound that grows with the call.
    fn payload_asked(&mut self) -> Option<&mut u32> {
        None
    }

    /// Over UDP, makes results advertise datagram-sized transfers (FSINFO).
    fn cap_for_datagrams(_ok: &mut Self::Ok) {}

    /// What the call may conflict with in NFSv4 delegations: passed to the recall gate
    /// before it runs (an answer of NFS3ERR_JUKEBOX while a recall is under way).
    fn touches(&self) -> Touches<'_> {
        Touches::Nothing
    }

    /// The procedure as one backend call, run on the blocking pool by the default `run`.
    /// Attributes of files with held writes are fixed up (size) before they leave; see
    /// [`crate::io::writebehind`]. A procedure whose `run` never calls it (READ, WRITE, COMMIT go
    /// through the data path) keeps this SERVERFAULT.
    fn execute(
        self,
        _fs: &dyn FileSystem,
        _caller: &Caller,
        _io: &Engine,
    ) -> NfsResult<Self::Ok, Self::Fail> {
        NfsResult::Err(Nfsstat3::SERVERFAULT, Default::default())
    }

    /// Carries the call out in the export's file system as `caller`. `splice_ok`: a READ's data
    /// may be spliced (TCP; a v3 READ reply ends with its data).
    fn run(
        self,
        nfs: &Nfs3,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        _splice_ok: bool,
    ) -> impl Future<Output = Outcome<Self::Ok, Self::Fail>> + Send {
        async move { Outcome::Res(nfs.blocking(fs, caller, self).await) }
    }
}

/// Something shown every NFSv3 procedure but NULL by [`each_procedure`] (the registry, building
/// NFSv3's table from the same list [`Nfs3::handle`] dispatches on).
pub trait EachProc3 {
    fn visit<P: Proc3>(&mut self);
}

/// The procedures other than NULL, by `Args3` variant and argument type, in procedure-number
/// order: [`Nfs3::handle`]'s dispatch and [`each_procedure`]'s list, so the two cannot drift.
macro_rules! procedures {
    ($($variant:ident($args:ty)),* $(,)?) => {
        impl Nfs3 {
            /// Runs one procedure given its decoded arguments and appends its results to `w`.
            /// Returns the status sent and, for a READ answered by splice, the data to send after
            /// `w` (see [`crate::splice`]). The server's registry calls each procedure's own
            /// handler instead; this entry point is for callers holding an `Args3` (the
            /// simulator).
            pub async fn handle(
                &self,
                peer: &Peer,
                cred: &Credentials,
                args: Args3,
                w: &mut Writer,
            ) -> (Nfsstat3, Option<SplicedData>) {
                match args {
                    Args3::Null(()) => (Nfsstat3::OK, None),
                    $(Args3::$variant(a) => self.call(peer, cred, a, w).await,)*
                }
            }
        }

        /// Shows `v` every procedure but NULL, in procedure-number order.
        pub fn each_procedure(v: &mut impl EachProc3) {
            $(v.visit::<$args>();)*
        }
    };
}

procedures! {
    Getattr(GetattrArgs),
    Setattr(SetattrArgs),
    Lookup(LookupArgs),
    Access(AccessArgs),
    Readlink(ReadlinkArgs),
    Read(ReadArgs),
    Write(WriteArgs),
    Create(CreateArgs),
    Mkdir(MkdirArgs),
    Symlink(SymlinkArgs),
    Mknod(MknodArgs),
    Remove(RemoveArgs),
    Rmdir(RmdirArgs),
    Rename(RenameArgs),
    Link(LinkArgs),
    Readdir(ReaddirArgs),
    Readdirplus(ReaddirplusArgs),
    Fsstat(FsstatArgs),
    Fsinfo(FsinfoArgs),
    Pathconf(PathconfArgs),
    Commit(CommitArgs),
}

impl Nfs3 {
    /// Runs procedure `P` and appends its results to `w`: what [`Nfs3::handle`] does, for one
    /// procedure.
    pub async fn call<P: Proc3>(
        &self,
        peer: &Peer,
        cred: &Credentials,
        mut args: P,
        w: &mut Writer,
    ) -> (Nfsstat3, Option<SplicedData>) {
        let udp = peer.transport == Transport::Udp;
        if udp {
            // Whatever the client asks, a reply must fit one datagram.
            if let Some(asked) = args.payload_asked() {
                *asked = (*asked).min(UDP_IO_BYTES_MAX);
            }
        }
        let mut res = match self.gate(peer, cred, args.fh()) {
            Ok((fs, caller)) => match self.recall_first(&fs, &caller, args.touches()).await {
                Err(s) => NfsResult::Err(s, Default::default()),
                Ok(()) => match args
                    .run(self, fs, caller, peer.transport.may_splice())
                    .await
                {
                    Outcome::Res(res) => res,
                    Outcome::Spliced(ok, pipe) => {
                        Nfsstat3::OK.pack(w);
                        ok.pack_without_data(w);
                        let pad = ReadResOk::data_padding(ok.count);
                        let tail = Bytes::from_static(&[0u8; 3][..pad]);
                        return (Nfsstat3::OK, Some(SplicedData { pipe, tail }));
                    }
                },
            },
            Err(s) => NfsResult::Err(s, Default::default()),
        };
        if let (true, NfsResult::Ok(ok)) = (udp, &mut res) {
            P::cap_for_datagrams(ok);
        }
        let status = res.status();
        res.pack(w);
        (status, None)
    }

    /// Finds the export of a handle and the caller as that export sees them, or the status
    /// that refuses the call.
    fn gate(
        &self,
        peer: &Peer,
        cred: &Credentials,
        fh: &NfsFh3,
    ) -> Result<(Arc<dyn FileSystem>, Caller), Nfsstat3> {
        let id = export_id_of(&fh.0).ok_or(Nfsstat3::BADHANDLE)?;
        let entry = self
            .exports
            .iter()
            .find(|e| e.fs.export_id() == id)
            .ok_or(Nfsstat3::STALE)?;
        let caller = gate::admit(
            &entry.export,
            peer.addr,
            peer.transport.xprtsec(),
            identity(cred).as_ref(),
            Program::Nfs,
        )
        .map_err(|refusal| match refusal {
            Refusal::NotListed => Nfsstat3::ACCES,
            // knfsd's answer; the client should mount with a reserved port or the export
            // be `insecure`.
            Refusal::InsecurePort => Nfsstat3::PERM,
            // v3 has no WRONGSEC: knfsd answers a call on a handle of an export whose
            // `xprtsec=` does not admit the connection with ACCES (see `gate`). Every
            // procedure, so a handle learnt over TLS is refused in plaintext too.
            Refusal::Xprtsec(_) => Nfsstat3::ACCES,
        })?;
        Ok((entry.fs.clone(), caller))
    }

    /// The recall gate ([`crate::recall`]) for what a call `touches`: NFS3ERR_JUKEBOX while
    /// NFSv4 delegations of those files are being recalled. Free (one atomic load) when nothing
    /// is delegated; names are looked up only when something is.
    async fn recall_first(
        &self,
        fs: &Arc<dyn FileSystem>,
        caller: &Caller,
        touches: Touches<'_>,
    ) -> Result<(), Nfsstat3> {
        let Some(gate) = self.recall.as_deref() else {
            return Ok(());
        };
        if !gate.held() {
            return Ok(());
        }
        let mut files: Vec<(backend::FileHandle, bool)> = Vec::new();
        match touches {
            Touches::Nothing => return Ok(()),
            Touches::File { fh, write } => files.push((map::handle(fh), write)),
            Touches::Names(first, second) => {
                let names: Vec<(backend::FileHandle, Bytes)> = std::iter::once(first)
                    .chain(second)
                    .map(|d| (map::handle(&d.dir), d.name.clone()))
                    .collect();
                let (fs, caller) = (fs.clone(), caller.clone());
                let found = self
                    .io
                    .spawn(move || {
                        names
                            .iter()
                            .filter_map(|(dir, name)| fs.lookup(&caller, dir, name).ok())
                            .map(|l| l.fh)
                            .collect::<Vec<_>>()
                    })
                    .await
                    .unwrap_or_default();
                files.extend(found.into_iter().map(|fh| (fh, true)));
            }
        }
        let now = self.io.hooks.clock.now();
        let mut recalling = false;
        for (fh, write) in &files {
            // Every file is gated (not just the first that conflicts), so that all recalls
            // start now rather than one per retry.
            recalling |= gate.break_for(now, &fs.state_key(fh), *write).is_err();
        }
        match recalling {
            true => Err(Nfsstat3::JUKEBOX),
            false => Ok(()),
        }
    }

    /// Runs `P::execute` on the blocking pool (SERVERFAULT if the pool lost it), or on this
    /// task when the call is quick on this backend (`service::inline`: GETATTR, LOOKUP and
    /// their like on a local directory).
    async fn blocking<P: Proc3>(
        &self,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        args: P,
    ) -> NfsResult<P::Ok, P::Fail> {
        let io = self.io.clone();
        if inline::inline(fs.metadata_speed(), [inline::v3_work(P::NUM)]) {
            return args.execute(&*fs, &caller, &io);
        }
        self.io
            .spawn(move || args.execute(&*fs, &caller, &io))
            .await
            .unwrap_or(NfsResult::Err(Nfsstat3::SERVERFAULT, Default::default()))
    }

    /// Runs a call that removes the link `name` of `dir` (REMOVE, RENAME onto an existing
    /// name). When write-behind holds data for the object that name leads to and its handle is
    /// stale afterwards (the call took its last link), that data is dropped instead of written
    /// to a file nobody can reach: the write would fail, and the failure changes the write
    /// verifier, so every client would resend what it has not committed.
    async fn unlinking<P: Proc3>(
        &self,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        dir: backend::FileHandle,
        name: Bytes,
        args: P,
    ) -> NfsResult<P::Ok, P::Fail> {
        let data = self.data();
        if !data.holds_any() {
            return self.blocking(fs, caller, args).await;
        }
        let target = data.held_target(&fs, &caller, dir, name).await;
        let res = self.blocking(fs.clone(), caller, args).await;
        if let (Some(fh), NfsResult::Ok(_)) = (target, &res) {
            data.after_remove(fs, fh).await;
        }
        res
    }

    /// The data path, over this program's shared state.
    fn data(&self) -> DataPath<'_> {
        DataPath {
            io: &self.io,
            stats: &self.stats,
            pipes: &self.pipes,
        }
    }
}

/// Implements [`Proc3`] for an argument type: its procedure number, result bodies and the
/// handle that picks its export (a field path), then the procedure's own items.
macro_rules! proc3 {
    ($args:ty = $num:ident => $ok:ty, $fail:ty; fh: $($fh:ident).+; $($items:tt)*) => {
        impl Proc3 for $args {
            const NUM: u32 = proc_::$num;
            type Ok = $ok;
            type Fail = $fail;
            fn fh(&self) -> &NfsFh3 {
                &self.$($fh).+
            }
            $($items)*
        }
    };
}

proc3! {
    GetattrArgs = GETATTR => GetattrResOk, (); fh: object;
    fn execute(self, fs: &dyn FileSystem, _caller: &Caller, io: &Engine) -> GetattrRes {
        let since = io.wb.epoch();
        let fh = map::handle(&self.object);
        match fs.getattr(&fh) {
            Ok(mut attr) => {
                if io.wb.fix_size(fh.as_bytes(), &mut attr, since) == SizeFix::Uncertain {
                    attr = match fs.getattr(&fh) {
                        Ok(again) => again,
                        Err(s) => return NfsResult::Err(map::status(s), ()),
                    };
                }
                NfsResult::Ok(GetattrResOk {
                    obj_attributes: map::fattr3(&attr),
                })
            }
            Err(s) => NfsResult::Err(map::status(s), ()),
        }
    }
}

proc3! {
    SetattrArgs = SETATTR => SetattrResOk, SetattrResFail; fh: object;
    fn touches(&self) -> Touches<'_> {
        Touches::File { fh: &self.object, write: true }
    }

    fn execute(self, fs: &dyn FileSystem, caller: &Caller, io: &Engine) -> SetattrRes {
        let since = io.wb.epoch();
        let fh = map::handle(&self.object);
        let sattr = map::sattr(&self.new_attributes);
        match fs.setattr(caller, &fh, &sattr, self.guard.map(map::time)) {
            Ok(mut obj_wcc) => {
                fix_post_op(io, fs, &fh, &mut obj_wcc.after, since);
                NfsResult::Ok(SetattrResOk {
                    obj_wcc: map::wcc(&obj_wcc),
                })
            }
            Err((s, obj_wcc)) => NfsResult::Err(
                map::status(s),
                SetattrResFail {
                    obj_wcc: map::wcc(&obj_wcc),
                },
            ),
        }
    }

    /// Held writes to the file land first, whatever the attributes: a size change must not
    /// have bytes written back past it, and times or a mode set now must not be undone by data
    /// landing later (a client under a write delegation sends its WRITEs unstable and then
    /// `tar`'s or `cp -p`'s SETATTR of the times, with no COMMIT between). A file with nothing
    /// held costs one lookup.
    async fn run(
        self,
        nfs: &Nfs3,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        _: bool,
    ) -> Outcome<SetattrResOk, SetattrResFail> {
        nfs.data().before_resize(&map::handle(&self.object)).await;
        Outcome::Res(nfs.blocking(fs, caller, self).await)
    }
}

proc3! {
    LookupArgs = LOOKUP => LookupResOk, LookupResFail; fh: what.dir;
    fn execute(self, fs: &dyn FileSystem, caller: &Caller, io: &Engine) -> LookupRes {
        let since = io.wb.epoch();
        match fs.lookup(caller, &map::handle(&self.what.dir), &self.what.name) {
            Ok(l) => {
                let mut obj_attributes = Some(l.attr);
                fix_post_op(io, fs, &l.fh, &mut obj_attributes, since);
                NfsResult::Ok(LookupResOk {
                    object: map::fh3(&l.fh),
                    obj_attributes: map::post_op(obj_attributes),
                    dir_attributes: map::post_op(l.dir_attr),
                })
            }
            Err((s, dir_attributes)) => NfsResult::Err(
                map::status(s),
                LookupResFail {
                    dir_attributes: map::post_op(dir_attributes),
                },
            ),
        }
    }
}

proc3! {
    AccessArgs = ACCESS => AccessResOk, AccessResFail; fh: object;
    fn execute(self, fs: &dyn FileSystem, caller: &Caller, io: &Engine) -> AccessRes {
        let since = io.wb.epoch();
        let fh = map::handle(&self.object);
        match fs.access(caller, &fh, self.access) {
            Ok((access, mut obj_attributes)) => {
                fix_post_op(io, fs, &fh, &mut obj_attributes, since);
                NfsResult::Ok(AccessResOk {
                    obj_attributes: map::post_op(obj_attributes),
                    access,
                })
            }
            Err((s, obj_attributes)) => NfsResult::Err(
                map::status(s),
                AccessResFail {
                    obj_attributes: map::post_op(obj_attributes),
                },
            ),
        }
    }
}

proc3! {
    ReadlinkArgs = READLINK => ReadlinkResOk, ReadlinkResFail; fh: symlink;
    fn execute(self, fs: &dyn FileSystem, _caller: &Caller, _io: &Engine) -> ReadlinkRes {
        match fs.readlink(&map::handle(&self.symlink)) {
            Ok((target, symlink_attributes)) => NfsResult::Ok(ReadlinkResOk {
                symlink_attributes: map::post_op(symlink_attributes),
                data: Bytes::from(target),
            }),
            Err((s, symlink_attributes)) => NfsResult::Err(
                map::status(s),
                ReadlinkResFail {
                    symlink_attributes: map::post_op(symlink_attributes),
                },
            ),
        }
    }
}

proc3! {
    ReadArgs = READ => ReadResOk, ReadResFail; fh: file;
    fn touches(&self) -> Touches<'_> {
        Touches::File { fh: &self.file, write: false }
    }

    fn payload_asked(&mut self) -> Option<&mut u32> {
        Some(&mut self.count)
    }

    /// READ (RFC 1813 §3.3.6) through the data path.
    async fn run(
        self,
        nfs: &Nfs3,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        splice_ok: bool,
    ) -> Outcome<ReadResOk, ReadResFail> {
        let fh = map::handle(&self.file);
        match nfs
            .data()
            .read(fs, caller, fh, self.offset, self.count, splice_ok)
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
                        Outcome::Res(NfsResult::Ok(ok))
                    }
                    ReadData::Spliced(pipe) => Outcome::Spliced(ok, pipe),
                }
            }
            Err((s, attr)) => Outcome::Res(NfsResult::Err(
                map::status(s),
                ReadResFail {
                    file_attributes: map::post_op(attr),
                },
            )),
        }
    }
}

proc3! {
    WriteArgs = WRITE => WriteResOk, WriteResFail; fh: file;
    fn touches(&self) -> Touches<'_> {
        Touches::File { fh: &self.file, write: true }
    }

    /// WRITE (§3.3.7): the v3 checks, then the data path.
    async fn run(
        self,
        nfs: &Nfs3,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        _: bool,
    ) -> Outcome<WriteResOk, WriteResFail> {
        let fail = |s| Outcome::Res(NfsResult::Err(s, WriteResFail::default()));
        let Some(stable) = stable_to_backend(self.stable) else {
            return fail(Nfsstat3::INVAL);
        };
        // RFC 1813 §3.3.7: `count` is the number of bytes of `data` to write; more than was sent
        // is a malformed request.
        let count = self.count as usize;
        if count > self.data.len() {
            return fail(Nfsstat3::INVAL);
        }
        let chunks = payload_prefix(&self.data, count);
        let fh = map::handle(&self.file);
        Outcome::Res(
            match nfs
                .data()
                .write(fs, caller, fh, self.offset, chunks, stable)
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
            },
        )
    }
}

proc3! {
    CreateArgs = CREATE => CreateResOk, CreateResFail; fh: where_.dir;
    /// An existing file is truncated by UNCHECKED with a size (the only attribute applied to
    /// it); GUARDED and EXCLUSIVE leave it alone.
    fn touches(&self) -> Touches<'_> {
        match creates_with_size(&self.how) {
            true => Touches::Names(&self.where_, None),
            false => Touches::Nothing,
        }
    }

    fn execute(self, fs: &dyn FileSystem, caller: &Caller, _io: &Engine) -> CreateRes {
        let how = match self.how {
            CreateHow::Unchecked(s) => backend::CreateHow::Unchecked(map::sattr(&s)),
            CreateHow::Guarded(s) => backend::CreateHow::Guarded(map::sattr(&s)),
            CreateHow::Exclusive(v) => backend::CreateHow::Exclusive(v),
        };
        created(fs.create(
            caller,
            &map::handle(&self.where_.dir),
            &self.where_.name,
            how,
        ))
    }

    /// CREATE UNCHECKED of an existing file applies the size like SETATTR: held writes to it
    /// land first.
    async fn run(
        self,
        nfs: &Nfs3,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        _: bool,
    ) -> Outcome<CreateResOk, CreateResFail> {
        let data = nfs.data();
        if creates_with_size(&self.how) && data.holds_any() {
            let (dir, name) = (map::handle(&self.where_.dir), self.where_.name.clone());
            data.before_resize_by_name(&fs, &caller, dir, name).await;
        }
        Outcome::Res(nfs.blocking(fs, caller, self).await)
    }
}

proc3! {
    MkdirArgs = MKDIR => MkdirResOk, MkdirResFail; fh: where_.dir;
    fn execute(self, fs: &dyn FileSystem, caller: &Caller, _io: &Engine) -> MkdirRes {
        created(fs.mkdir(
            caller,
            &map::handle(&self.where_.dir),
            &self.where_.name,
            &map::sattr(&self.attributes),
        ))
    }
}

proc3! {
    SymlinkArgs = SYMLINK => SymlinkResOk, SymlinkResFail; fh: where_.dir;
    fn execute(self, fs: &dyn FileSystem, caller: &Caller, _io: &Engine) -> SymlinkRes {
        created(fs.symlink(
            caller,
            &map::handle(&self.where_.dir),
            &self.where_.name,
            &self.symlink_data,
            &map::sattr(&self.symlink_attributes),
        ))
    }
}

proc3! {
    MknodArgs = MKNOD => MknodResOk, MknodResFail; fh: where_.dir;
    fn execute(self, fs: &dyn FileSystem, caller: &Caller, _io: &Engine) -> MknodRes {
        // A type MKNOD cannot create has no attributes to decode; the file system answers
        // BADTYPE for it.
        let (ftype, sattr, spec) = match self.what {
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
        created(fs.mknod(
            caller,
            &map::handle(&self.where_.dir),
            &self.where_.name,
            ftype,
            &map::sattr(&sattr),
            map::device(spec),
        ))
    }
}

proc3! {
    RemoveArgs = REMOVE => RemoveResOk, RemoveResFail; fh: object.dir;
    fn touches(&self) -> Touches<'_> {
        Touches::Names(&self.object, None)
    }

    fn execute(self, fs: &dyn FileSystem, caller: &Caller, _io: &Engine) -> RemoveRes {
        removed(fs.remove(caller, &map::handle(&self.object.dir), &self.object.name))
    }

    /// REMOVE (§3.3.12) while write-behind holds data: [`Nfs3::unlinking`].
    async fn run(
        self,
        nfs: &Nfs3,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        _: bool,
    ) -> Outcome<RemoveResOk, RemoveResFail> {
        let (dir, name) = (map::handle(&self.object.dir), self.object.name.clone());
        Outcome::Res(nfs.unlinking(fs, caller, dir, name, self).await)
    }
}

proc3! {
    RmdirArgs = RMDIR => RmdirResOk, RmdirResFail; fh: object.dir;
    fn execute(self, fs: &dyn FileSystem, caller: &Caller, _io: &Engine) -> RmdirRes {
        removed(fs.rmdir(caller, &map::handle(&self.object.dir), &self.object.name))
    }
}

proc3! {
    RenameArgs = RENAME => RenameResOk, RenameResFail; fh: from.dir;
    /// The file renamed, and the one it replaces.
    fn touches(&self) -> Touches<'_> {
        Touches::Names(&self.from, Some(&self.to))
    }

    fn execute(self, fs: &dyn FileSystem, caller: &Caller, _io: &Engine) -> RenameRes {
        match fs.rename(
            caller,
            &map::handle(&self.from.dir),
            &self.from.name,
            &map::handle(&self.to.dir),
            &self.to.name,
        ) {
            Ok(w) => NfsResult::Ok(RenameResOk {
                fromdir_wcc: map::wcc(&w.from_dir),
                todir_wcc: map::wcc(&w.to_dir),
            }),
            Err((s, w)) => NfsResult::Err(
                map::status(s),
                RenameResFail {
                    fromdir_wcc: map::wcc(&w.from_dir),
                    todir_wcc: map::wcc(&w.to_dir),
                },
            ),
        }
    }

    /// RENAME onto a file write-behind holds data for removes that file's link as REMOVE
    /// does: [`Nfs3::unlinking`].
    async fn run(
        self,
        nfs: &Nfs3,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        _: bool,
    ) -> Outcome<RenameResOk, RenameResFail> {
        let (dir, name) = (map::handle(&self.to.dir), self.to.name.clone());
        Outcome::Res(nfs.unlinking(fs, caller, dir, name, self).await)
    }
}

proc3! {
    LinkArgs = LINK => LinkResOk, LinkResFail; fh: file;
    /// Its link count and ctime change.
    fn touches(&self) -> Touches<'_> {
        Touches::File { fh: &self.file, write: true }
    }

    fn execute(self, fs: &dyn FileSystem, caller: &Caller, io: &Engine) -> LinkRes {
        let since = io.wb.epoch();
        let fh = map::handle(&self.file);
        match fs.link(caller, &fh, &map::handle(&self.link.dir), &self.link.name) {
            Ok(mut l) => {
                fix_post_op(io, fs, &fh, &mut l.attr, since);
                NfsResult::Ok(LinkResOk {
                    file_attributes: map::post_op(l.attr),
                    linkdir_wcc: map::wcc(&l.dir_wcc),
                })
            }
            Err((s, l)) => NfsResult::Err(
                map::status(s),
                LinkResFail {
                    file_attributes: map::post_op(l.attr),
                    linkdir_wcc: map::wcc(&l.dir_wcc),
                },
            ),
        }
    }
}

proc3! {
    ReaddirArgs = READDIR => ReaddirResOk, ReaddirResFail; fh: dir;
    fn payload_asked(&mut self) -> Option<&mut u32> {
        Some(&mut self.count)
    }

    fn execute(self, fs: &dyn FileSystem, caller: &Caller, _io: &Engine) -> ReaddirRes {
        readdir(fs, caller, self)
    }
}

proc3! {
    ReaddirplusArgs = READDIRPLUS => ReaddirplusResOk, ReaddirplusResFail; fh: dir;
    fn payload_asked(&mut self) -> Option<&mut u32> {
        Some(&mut self.maxcount)
    }

    fn execute(self, fs: &dyn FileSystem, caller: &Caller, io: &Engine) -> ReaddirplusRes {
        let since = io.wb.epoch();
        let mut res = readdirplus(fs, caller, self);
        if let NfsResult::Ok(ok) = &mut res {
            io.wb.fix_sizes(
                ok.entries.iter_mut().filter_map(|e| {
                    let fh = e.name_handle.as_ref()?;
                    Some((&fh.0[..], &mut e.name_attributes))
                }),
                since,
            );
        }
        res
    }
}

proc3! {
    FsstatArgs = FSSTAT => FsstatResOk, FsstatResFail; fh: fsroot;
    fn execute(self, fs: &dyn FileSystem, _caller: &Caller, _io: &Engine) -> FsstatRes {
        match fs.fsstat(&map::handle(&self.fsroot)) {
            Ok(f) => NfsResult::Ok(FsstatResOk {
                obj_attributes: map::post_op(f.attr),
                tbytes: f.tbytes,
                fbytes: f.fbytes,
                abytes: f.abytes,
                tfiles: f.tfiles,
                ffiles: f.ffiles,
                afiles: f.afiles,
                invarsec: f.invarsec,
            }),
            Err((s, a)) => NfsResult::Err(
                map::status(s),
                FsstatResFail {
                    obj_attributes: map::post_op(a),
                },
            ),
        }
    }
}

proc3! {
    FsinfoArgs = FSINFO => FsinfoResOk, FsinfoResFail; fh: fsroot;
    /// Over UDP, FSINFO advertises datagram-sized transfers.
    fn cap_for_datagrams(f: &mut FsinfoResOk) {
        f.rtmax = f.rtmax.min(UDP_IO_BYTES_MAX);
        f.rtpref = f.rtpref.min(UDP_IO_BYTES_MAX);
        f.wtmax = f.wtmax.min(UDP_IO_BYTES_MAX);
        f.wtpref = f.wtpref.min(UDP_IO_BYTES_MAX);
        f.dtpref = f.dtpref.min(UDP_IO_BYTES_MAX);
    }

    fn execute(self, fs: &dyn FileSystem, _caller: &Caller, _io: &Engine) -> FsinfoRes {
        match fs.fsinfo(&map::handle(&self.fsroot)) {
            Ok(f) => NfsResult::Ok(FsinfoResOk {
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
            Err((s, a)) => NfsResult::Err(
                map::status(s),
                FsinfoResFail {
                    obj_attributes: map::post_op(a),
                },
            ),
        }
    }
}

proc3! {
    PathconfArgs = PATHCONF => PathconfResOk, PathconfResFail; fh: object;
    fn execute(self, fs: &dyn FileSystem, _caller: &Caller, _io: &Engine) -> PathconfRes {
        match fs.pathconf(&map::handle(&self.object)) {
            Ok(p) => NfsResult::Ok(PathconfResOk {
                obj_attributes: map::post_op(p.attr),
                linkmax: p.linkmax,
                name_max: p.name_max,
                no_trunc: p.no_trunc,
                chown_restricted: p.chown_restricted,
                case_insensitive: p.case_insensitive,
                case_preserving: p.case_preserving,
            }),
            Err((s, a)) => NfsResult::Err(
                map::status(s),
                PathconfResFail {
                    obj_attributes: map::post_op(a),
                },
            ),
        }
    }
}

proc3! {
    CommitArgs = COMMIT => CommitResOk, CommitResFail; fh: file;
    /// COMMIT (§3.3.21) through the data path.
    async fn run(
        self,
        nfs: &Nfs3,
        fs: Arc<dyn FileSystem>,
        caller: Caller,
        _: bool,
    ) -> Outcome<CommitResOk, CommitResFail> {
        let fh = map::handle(&self.file);
        Outcome::Res(match nfs.data().commit(fs, caller, fh, self.offset, self.count).await {
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
        })
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
        // Files v4 keeps open after their REMOVE are the server's
        // (`sluice_nfs4state::recovery::parked`).
        if sluice_nfs4state::recovery::parked::is_hidden_name(e.name) {
            return true;
        }
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
        if sluice_nfs4state::recovery::parked::is_hidden_name(e.name) {
            return true;
        }
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
