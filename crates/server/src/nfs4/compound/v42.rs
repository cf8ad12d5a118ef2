//! The NFSv4.2 operations the Linux client uses (RFC 7862): SEEK (§15.11), ALLOCATE (§15.1),
//! DEALLOCATE (§15.4), COPY (§15.2, within one export) and CLONE (§15.13), over the file
//! system's range operations ([`FileSystem::seek`] and the rest). Only minor version 2 reaches
//! them: the op table flags them `V42`, so a 4.1 COMPOUND gets NFS4ERR_OP_ILLEGAL (RFC 8881
//! §16.2.3 leaves op numbers past RECLAIM_COMPLETE undefined in 4.1).
//!
//! # Checks, in order (as READ and WRITE)
//! ```text
//!  current handle ─▶ regular file of an export the caller may use (SEEK as READ: ISDIR,
//!                    INVAL; ALLOCATE and DEALLOCATE: WRONG_TYPE, RFC 7862 §15.1.3, §15.4.3)
//!  stateid        ─▶ open (or lock, or special) stateid of this file, OPENMODE for writes
//!  file system    ─▶ ROFS on a read-only export, ACCESS, NXIO, NOTSUPP, ...
//! ```
//! COPY and CLONE take the source from the saved handle and the destination from the current
//! one. Both must be regular files (NFS4ERR_WRONG_TYPE otherwise, as knfsd answers) of the same
//! export (NFS4ERR_XDEV: a server-side copy never crosses file systems here). COPY checks the
//! source stateid for reading and the destination's for writing.
//!
//! # COPY: synchronous, or asynchronous when large
//! A COPY is done before its reply (`wr_callback_id` empty, `cr_synchronous` true) unless all
//! of these hold, in which case it is asynchronous (RFC 7862 §15.2.3 lets the server choose):
//! ```text
//!   ca_synchronous false (the client can take a CB_OFFLOAD)
//!   more than ASYNC_COPY_MIN (one 32 MiB chunk) to copy
//!   the COMPOUND's session has a back channel bound whose path is not known to fail: up,
//!   or still being probed, as right after a mount (CB_OFFLOAD waits behind the probe)
//!   the copy driver runs and the copy table has room (`super::super::offload`)
//! ```
//! The first chunk is always copied before the reply, so whatever a synchronous COPY would fail
//! with (ACCESS, INVAL, NOSPC, ...) is the COPY's own error, not a CB_OFFLOAD's. Then the reply
//! goes with `wr_callback_id` = a new copy stateid, `wr_count` 0 and `cr_synchronous` false;
//! `crate::nfs4::offload::driver` copies the rest chunk by chunk and the client learns the outcome
//! from CB_OFFLOAD (count, UNSTABLE, the write verifier) or asks with OFFLOAD_STATUS;
//! OFFLOAD_CANCEL stops it between two chunks and no CB_OFFLOAD follows (the client gave the
//! stateid back, §4.8). Why one chunk is the threshold: a copy of at most
//! [`sluice_vfs::COPY_BYTES_MAX`] is one `copy_file_range` call, as long as a synchronous COPY
//! already takes (10-30 ms at page-cache speed), so a callback would only add a round trip; a
//! larger one done synchronously is answered short and costs the client one round trip per 32 MiB,
//! while asynchronously it costs one COPY and one CB_OFFLOAD. A full copy table or a back channel
//! that is down makes it synchronous rather than an error, as knfsd does past its async limit: the
//! client never has to retry.
//!
//! A synchronous COPY moves at most [`sluice_vfs::COPY_BYTES_MAX`]; a larger request is
//! answered short (`wr_count` below `ca_count`) and the client asks for the rest, as it does
//! after a short WRITE. The data lands as an UNSTABLE WRITE's would: `wr_committed` UNSTABLE
//! with the export's write verifier, and the client COMMITs it. A COPY naming source servers
//! (an inter-server copy) and COPY_NOTIFY answer NFS4ERR_NOTSUPP. OFFLOAD_STATUS and
//! OFFLOAD_CANCEL of a stateid that names no copy of the client answer NFS4ERR_BAD_STATEID,
//! as knfsd does.
//!
//! # Write-behind
//! SEEK, DEALLOCATE, COPY and CLONE read or drop file data the server may still be holding as
//! UNSTABLE writes (see `super::data`). Before them, the COMPOUND lands the held writes of the
//! file (for COPY and CLONE the source first) as it does before a truncating SETATTR; a file
//! still held when the op runs makes it NFS4ERR_DELAY, and the retry lands the other file.
//! ALLOCATE needs no landing: it changes no byte a held write could land on.
//!
//! # READ_PLUS
//! READ_PLUS (§15.10) is a data op, run through the data path as READ is
//! (`super::super::data::read_plus`): holes of at least 64 KiB inside the range go back as
//! (offset, length) pairs, found with SEEK_DATA / SEEK_HOLE, and the data between them as
//! pooled chunks; a range with no such hole is one data segment, spliced like a READ when it
//! is the last op. `sluice serve --no-read-plus` answers it NFS4ERR_NOTSUPP, and the client
//! reads with READ from then on. Measured (`bench/results/read-plus-2026-11-26.md`): a 10%-data
//! file in 10% of the bytes and 7% of the time of READ on loopback; a dense one at READ's CPU.
//!
//! # Not here
//! The extended attribute ops (RFC 8276) are `xattr.rs`'s. WRITE_SAME, IO_ADVISE, LAYOUTERROR
//! and LAYOUTSTATS answer NFS4ERR_NOTSUPP.

use super::{Call, Ctx, Fh, Nfs4};
use crate::backend::{Caller, FileHandle, FileSystem, FileType, SeekWhat};
use crate::nfs4::map;
use crate::nfs4::offload::CopyJob;
use sluice_xdr::nfs4::ops::{
    AllocateArgs, CloneArgs, CopyArgs, CopyRequirements4, CopyResOk, OffloadStatusResOk, SeekArgs,
    SeekResOk, StateidOpt, StatusOpt, WriteResponse4, NFS4_CONTENT_DATA, NFS4_CONTENT_HOLE,
};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{StableHow4, Stateid4};
use std::sync::Arc;

/// A COPY of more than this is asynchronous when the client allows it (module notes): one
/// `copy_file_range` chunk.
pub const ASYNC_COPY_MIN: u64 = sluice_vfs::COPY_BYTES_MAX;

impl Nfs4 {
    /// SEEK (RFC 7862 §15.11): an offset at or past the end is NFS4ERR_NXIO; SEEK_DATA with only
    /// a hole left answers the size with `sr_eof` set; an unknown `sa_what` is
    /// NFS4ERR_UNION_NOTSUPP.
    pub(super) fn seek(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        a: &SeekArgs,
    ) -> Result<SeekResOk, Nfsstat4> {
        let what = match a.what {
            NFS4_CONTENT_DATA => SeekWhat::Data,
            NFS4_CONTENT_HOLE => SeekWhat::Hole,
            _ => return Err(Nfsstat4::UNION_NOTSUPP),
        };
        let (fs, caller, fh) = self.data_target(call, ctx)?;
        self.check_io(call, ctx, &a.stateid, false)?;
        self.settle(&fh)?;
        let r = fs
            .seek(&caller, &fh, a.offset, what)
            .map_err(|(e, _)| map::status(e))?;
        Ok(SeekResOk {
            eof: r.eof,
            offset: r.offset,
        })
    }

    /// ALLOCATE (RFC 7862 §15.1, `punch` false) and DEALLOCATE (§15.4, `punch` true): the
    /// stateid must allow writing, as WRITE's. The change attribute moves with the file's
    /// ctime; the client reads the new attributes with a GETATTR in the same COMPOUND.
    pub(super) fn allocate(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        a: &AllocateArgs,
        punch: bool,
    ) -> Result<(), Nfsstat4> {
        // §15.1.3, §15.4.3: anything but a regular file is WRONG_TYPE (READ's ISDIR, SYMLINK
        // and INVAL are the only type answers `data_target` gives).
        let (fs, caller, fh) = self.data_target(call, ctx).map_err(|s| match s {
            Nfsstat4::ISDIR | Nfsstat4::INVAL | Nfsstat4::SYMLINK => Nfsstat4::WRONG_TYPE,
            s => s,
        })?;
        self.check_io(call, ctx, &a.stateid, true)?;
        let r = if punch {
            self.settle(&fh)?;
            fs.deallocate(&caller, &fh, a.offset, a.length)
        } else {
            fs.allocate(&caller, &fh, a.offset, a.length)
        };
        r.map(|_| ()).map_err(|(e, _)| map::status(e))
    }

    /// COPY (RFC 7862 §15.2) within one export, synchronously or, when large, asynchronously
    /// (see the module notes).
    pub(super) fn copy(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        a: &CopyArgs,
    ) -> Result<CopyResOk, Nfsstat4> {
        if !a.source_server.0.is_empty() {
            // An inter-server copy: this server neither pulls from nor pushes to others.
            return Err(Nfsstat4::NOTSUPP);
        }
        let (src, dst) = self.copy_files(call, ctx, &a.src_stateid, &a.dst_stateid)?;
        let r = dst
            .fs
            .copy_range(
                &dst.caller,
                &src,
                a.src_offset,
                &dst.fh,
                a.dst_offset,
                a.count,
            )
            .map_err(|(e, _)| map::status(e))?;
        if let Some(r) = self.copy_async(ctx, a, &src, &dst, r.count) {
            return Ok(r);
        }
        Ok(CopyResOk {
            response: WriteResponse4 {
                callback_id: StateidOpt(Vec::new()),
                count: r.count,
                committed: StableHow4::UNSTABLE,
                writeverf: dst.fs.write_verifier(),
            },
            requirements: CopyRequirements4 {
                consecutive: true,
                synchronous: true,
            },
        })
    }

    /// After the first chunk of COPY `a` (`first` bytes) is copied: the rest goes on
    /// asynchronously if the module notes' conditions hold (the reply), or `None` to answer
    /// synchronously (short when there is more).
    fn copy_async(
        &self,
        ctx: &Ctx,
        a: &CopyArgs,
        src: &FileHandle,
        dst: &CopyTarget,
        first: u64,
    ) -> Option<CopyResOk> {
        if a.synchronous || first < sluice_vfs::COPY_BYTES_MAX {
            // Asked synchronously, or the first chunk was all there was.
            return None;
        }
        let spawner = self.copy_spawner.get()?;
        let (sessionid, _) = ctx.session?;
        let clientid = ctx.clientid?;
        // How much there is to copy: `ca_count`, or (0) to the source's end, never past it.
        let size = dst.fs.getattr(src).ok()?.size;
        let left = size.checked_sub(a.src_offset)?;
        let len = match a.count {
            0 => left,
            n => n.min(left),
        };
        if len <= ASYNC_COPY_MIN || len <= first {
            return None;
        }
        let stateid = self
            .state()
            .start_copy(clientid, &sessionid, dst.fh.to_bytes(), first)
            .ok()?;
        let accepted = spawner.spawn(CopyJob {
            id: stateid.other,
            fs: dst.fs.clone(),
            caller: dst.caller.clone(),
            src: src.clone(),
            src_offset: a.src_offset,
            dst: dst.fh.clone(),
            dst_offset: a.dst_offset,
            count: len,
            done: first,
        });
        if !accepted {
            let _ = self.state().offload_cancel(clientid, &stateid);
            return None;
        }
        Some(CopyResOk {
            response: WriteResponse4 {
                callback_id: StateidOpt(vec![stateid]),
                count: 0,
                committed: StableHow4::UNSTABLE,
                writeverf: dst.fs.write_verifier(),
            },
            requirements: CopyRequirements4 {
                consecutive: true,
                synchronous: false,
            },
        })
    }

    /// OFFLOAD_STATUS (RFC 7862 §15.9): the bytes copied, and the copy's status once done.
    pub(super) fn offload_status(
        &self,
        ctx: &Ctx,
        stateid: &Stateid4,
    ) -> Result<OffloadStatusResOk, Nfsstat4> {
        let clientid = ctx.clientid.ok_or(Nfsstat4::OP_NOT_IN_SESSION)?;
        let (count, done) = self.state().offload_status(clientid, stateid)?;
        Ok(OffloadStatusResOk {
            count,
            complete: StatusOpt(done.into_iter().collect()),
        })
    }

    /// OFFLOAD_CANCEL (RFC 7862 §15.8): the copy stops between two chunks; no CB_OFFLOAD.
    pub(super) fn offload_cancel(&self, ctx: &Ctx, stateid: &Stateid4) -> Result<(), Nfsstat4> {
        let clientid = ctx.clientid.ok_or(Nfsstat4::OP_NOT_IN_SESSION)?;
        self.state().offload_cancel(clientid, stateid)
    }

    /// CLONE (RFC 7862 §15.13): NFS4ERR_NOTSUPP where the file system has no reflinks, and
    /// NFS4ERR_INVAL for ranges off its block alignment.
    pub(super) fn clone_op(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        a: &CloneArgs,
    ) -> Result<(), Nfsstat4> {
        let (src, dst) = self.copy_files(call, ctx, &a.src_stateid, &a.dst_stateid)?;
        dst.fs
            .clone_range(
                &dst.caller,
                &src,
                a.src_offset,
                &dst.fh,
                a.dst_offset,
                a.count,
            )
            .map(|_| ())
            .map_err(|(e, _)| map::status(e))
    }

    /// The source (saved handle) and destination (current handle) of a COPY or CLONE, checked
    /// as the module notes say; the destination with its file system and caller.
    fn copy_files(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        src_stateid: &Stateid4,
        dst_stateid: &Stateid4,
    ) -> Result<(FileHandle, CopyTarget), Nfsstat4> {
        let saved = ctx.saved.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)?;
        let current = ctx.current.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)?;
        let (
            Fh::Export { idx: si, fh: src },
            Fh::Export {
                idx: di,
                fh: dst_fh,
            },
        ) = (saved, current)
        else {
            // A pseudo node is a directory.
            return Err(Nfsstat4::WRONG_TYPE);
        };
        let (fs, caller) = self.gate(call, *di)?;
        if si != di {
            self.gate(call, *si)?;
            return Err(Nfsstat4::XDEV);
        }
        for fh in [src, dst_fh] {
            if fs.getattr(fh).map_err(map::status)?.ftype != FileType::Regular {
                return Err(Nfsstat4::WRONG_TYPE);
            }
        }
        let clientid = ctx.clientid.ok_or(Nfsstat4::OP_NOT_IN_SESSION)?;
        let src_sid = ctx.resolve_stateid(src_stateid)?;
        let dst_sid = ctx.resolve_stateid(dst_stateid)?;
        {
            let (src_key, dst_key) = (fs.state_key(src), fs.state_key(dst_fh));
            let mut st = self.state();
            st.check_io(clientid, &src_sid, &src_key, false)?;
            st.check_io(clientid, &dst_sid, &dst_key, true)?;
            // The source is read: another client's write delegation of it is recalled.
            st.break_delegations(call.now, Some(clientid), &src_key, false)?;
            st.break_delegations(call.now, Some(clientid), &dst_key, true)?;
        }
        self.settle(src)?;
        self.settle(dst_fh)?;
        Ok((
            src.clone(),
            CopyTarget {
                fs: self.exports[*di].fs.clone(),
                caller,
                fh: dst_fh.clone(),
            },
        ))
    }
}

/// The destination of a COPY or CLONE.
struct CopyTarget {
    fs: Arc<dyn FileSystem>,
    caller: Caller,
    fh: FileHandle,
}

/// The 4.2 ops in process over MemFs exports, for what LocalFs on the test machine cannot show:
/// a CLONE that succeeds (MemFs clones by copying; ext4 has no reflinks), and ROFS from an
/// export's `ro` rather than the file system.
#[cfg(test)]
mod tests {
    use super::super::{drive_ready, Inline, Nfs4, Outcome, Sender};
    use crate::backend::exports::{ClientMatch, ClientRule, Squash};
    use crate::backend::memfs::MemFsConfig;
    use crate::backend::{Caller, CreateHow, Cred, Export, ExportOptions, FileSystem, MemFs};
    use crate::backend::{SetAttr, StableHow};
    use crate::exports::ExportEntry;
    use crate::testkit::{Session4, SessionConfig};
    use bytes::Bytes;
    use sluice_nfs4state::State4;
    use sluice_nfs4state::{Config4, SplitMix};
    use sluice_rpc::server::Credentials;
    use sluice_xdr::nfs4::callback::{
        CbArgop4, CbCompound4Res, CbOffloadArgs, CbResop4, CbSequenceResOk,
    };
    use sluice_xdr::nfs4::compound::{Compound4Args, Compound4Res, CompoundLimits};
    use sluice_xdr::nfs4::ops::{
        AllocateArgs, CallbackSecParms4, CallbackSecParmsList, CloneArgs, CopyArgs, CopyRes,
        NetlocList, NfsArgop4, NfsResop4, Res4, SequenceArgs, CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
    };
    use sluice_xdr::nfs4::Nfsstat4;
    use sluice_xdr::nfs4::{Component4, NfsFh4, SessionId4, Stateid4, Utf8Str};
    use sluice_xdr::rpc::AuthSys;
    use sluice_xdr::{Pack, Reader, Writer};
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::time::Instant;

    struct Fixture {
        nfs: Arc<Nfs4>,
        /// `/rw` (writable) and `/ro` (read-only), in that order.
        fs: [Arc<MemFs>; 2],
        cred: Credentials,
        now: Instant,
        session: SessionId4,
        next_seq: u32,
    }

    fn export(path: &str, fs: &Arc<MemFs>, read_only: bool) -> ExportEntry {
        ExportEntry {
            fs: fs.clone(),
            export: Export {
                path: PathBuf::from(path),
                clients: vec![ClientRule {
                    client: ClientMatch::Any,
                    options: ExportOptions {
                        read_only,
                        squash: Squash::None,
                        secure: false,
                        ..ExportOptions::default()
                    },
                }],
            },
        }
    }

    impl Fixture {
        fn new() -> Fixture {
            let fs = [1, 2].map(|fsid| {
                Arc::new(MemFs::new(MemFsConfig {
                    fsid,
                    ..MemFsConfig::default()
                }))
            });
            let exports = vec![export("/rw", &fs[0], false), export("/ro", &fs[1], true)];
            let state = State4::new(Config4::default(), Box::new(SplitMix(5)));
            let mut f = Fixture {
                nfs: Arc::new(Nfs4::new(Arc::new(exports), state, 1).unwrap()),
                fs,
                cred: Credentials::Sys(AuthSys {
                    stamp: 1,
                    machine_name: Bytes::from_static(b"client"),
                    uid: 0,
                    gid: 0,
                    gids: Vec::new(),
                }),
                now: Instant::now(),
                session: [0; 16],
                next_seq: 1,
            };
            f.session = f.mount(false);
            f
        }

        fn send_minor(&self, minorversion: u32, ops: Vec<NfsArgop4>) -> Compound4Res {
            let args = Compound4Args {
                tag: Utf8Str(Bytes::new()),
                minorversion,
                ops,
            };
            let mut w = Writer::new();
            args.pack(&mut w);
            let from = Sender {
                addr: "127.0.0.1:700".parse().unwrap(),
                conn: 1,
                xprtsec: crate::backend::exports::Xprtsec::None,
                cred: self.cred.clone(),
            };
            let exec = Inline {
                now: self.now,
                data: None,
            };
            let Outcome::Reply(b) = drive_ready(&self.nfs, &exec, &from, &w.into_bytes()) else {
                panic!("GARBAGE_ARGS")
            };
            let segs = [b];
            Compound4Res::decode(&mut Reader::new(&segs), &CompoundLimits::default()).unwrap()
        }

        /// A client and its session; `back`: with a back channel on this connection.
        fn mount(&self, back: bool) -> SessionId4 {
            let cfg = SessionConfig {
                flags: if back {
                    CREATE_SESSION4_FLAG_CONN_BACK_CHAN
                } else {
                    0
                },
                cb_sec: CallbackSecParmsList(vec![CallbackSecParms4::AuthNone]),
                ..SessionConfig::new(b"v42 client", 4)
            };
            Session4::establish(&cfg, |ops| self.send_minor(2, ops)).sessionid
        }

        /// SEQUENCE and `ops` in minor version 2.
        fn send(&mut self, ops: Vec<NfsArgop4>) -> Compound4Res {
            let mut all = vec![NfsArgop4::Sequence(SequenceArgs {
                sessionid: self.session,
                sequenceid: self.next_seq,
                slotid: 0,
                highest_slotid: 0,
                cachethis: false,
            })];
            all.extend(ops);
            self.next_seq += 1;
            self.send_minor(2, all)
        }

        /// A file named `name` holding `data` in export `i`: its wire handle.
        fn file(&self, i: usize, name: &str, data: &[u8]) -> NfsFh4 {
            let fs = &self.fs[i];
            let root = Caller::with_cred(Cred::root());
            let fh = fs
                .create(
                    &root,
                    &fs.root_handle(),
                    name.as_bytes(),
                    CreateHow::Guarded(SetAttr::default()),
                )
                .unwrap()
                .fh;
            let chunk = [Bytes::copy_from_slice(data)];
            fs.write(&root, &fh, 0, &chunk, StableHow::FileSync)
                .unwrap();
            NfsFh4(fh.to_bytes())
        }

        fn contents(&self, i: usize, fh: &NfsFh4) -> Vec<u8> {
            let fs = &self.fs[i];
            let fh = crate::backend::FileHandle::new(fh.0.clone()).unwrap();
            let mut buf = vec![0u8; 1 << 16];
            let root = Caller::with_cred(Cred::root());
            let n = fs.read(&root, &fh, 0, &mut [&mut buf[..]]).unwrap().count;
            buf.truncate(n);
            buf
        }
    }

    fn two_files(src: &NfsFh4, dst: &NfsFh4, op: NfsArgop4) -> Vec<NfsArgop4> {
        vec![
            NfsArgop4::Putfh(src.clone()),
            NfsArgop4::Savefh(()),
            NfsArgop4::Putfh(dst.clone()),
            op,
        ]
    }

    fn clone_args(src_offset: u64, dst_offset: u64, count: u64) -> CloneArgs {
        CloneArgs {
            src_stateid: Stateid4::ANONYMOUS,
            dst_stateid: Stateid4::ANONYMOUS,
            src_offset,
            dst_offset,
            count,
        }
    }

    #[test]
    fn clone_shares_a_range_where_the_file_system_can() {
        let mut f = Fixture::new();
        let src = f.file(0, "src", b"0123456789");
        let dst = f.file(0, "dst", b"abcdefghij");
        let res = f.send(two_files(&src, &dst, NfsArgop4::Clone(clone_args(2, 4, 3))));
        assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
        assert_eq!(f.contents(0, &dst), b"abcd234hij");
        // Count 0: to the source's end.
        let res = f.send(two_files(&src, &dst, NfsArgop4::Clone(clone_args(8, 0, 0))));
        assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
        assert_eq!(f.contents(0, &dst), b"89cd234hij");
        // A directory as the destination.
        let res = f.send(vec![
            NfsArgop4::Putfh(src.clone()),
            NfsArgop4::Savefh(()),
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Lookup(Component4(Bytes::from_static(b"rw"))),
            NfsArgop4::Clone(clone_args(0, 0, 0)),
        ]);
        assert_eq!(res.status, Nfsstat4::WRONG_TYPE, "{res:?}");
    }

    #[test]
    fn copy_and_allocate_on_a_read_only_export_are_rofs() {
        let mut f = Fixture::new();
        let src = f.file(1, "src", b"data");
        let dst = f.file(1, "dst", b"");
        let copy = CopyArgs {
            src_stateid: Stateid4::ANONYMOUS,
            dst_stateid: Stateid4::ANONYMOUS,
            src_offset: 0,
            dst_offset: 0,
            count: 0,
            consecutive: false,
            synchronous: true,
            source_server: NetlocList(Vec::new()),
        };
        let res = f.send(two_files(&src, &dst, NfsArgop4::Copy(copy.clone())));
        assert_eq!(res.status, Nfsstat4::ROFS, "{res:?}");
        let res = f.send(two_files(&src, &dst, NfsArgop4::Clone(clone_args(0, 0, 0))));
        assert_eq!(res.status, Nfsstat4::ROFS, "{res:?}");
        let res = f.send(vec![
            NfsArgop4::Putfh(dst.clone()),
            NfsArgop4::Allocate(AllocateArgs {
                stateid: Stateid4::ANONYMOUS,
                offset: 0,
                length: 10,
            }),
        ]);
        assert_eq!(res.status, Nfsstat4::ROFS, "{res:?}");
        assert_eq!(f.contents(1, &dst), b"");
        // The same COPY on the writable export: done, synchronously.
        let src = f.file(0, "src", b"data");
        let dst = f.file(0, "dst", b"");
        let res = f.send(two_files(&src, &dst, NfsArgop4::Copy(copy)));
        assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
        let Some(NfsResop4::Copy(CopyRes::Ok(c))) = res.results.last() else {
            panic!("{res:?}")
        };
        assert_eq!(c.response.count, 4);
        assert!(c.requirements.synchronous);
        assert_eq!(c.response.writeverf, f.fs[0].write_verifier());
        assert_eq!(f.contents(0, &dst), b"data");
    }

    impl Fixture {
        /// Asynchronous copies are not run but kept in the returned list, for the test to run
        /// (or not) when it wants.
        fn hold_copies(&mut self) -> Arc<std::sync::Mutex<Vec<crate::nfs4::offload::CopyJob>>> {
            let jobs = Arc::new(std::sync::Mutex::new(Vec::new()));
            let held = jobs.clone();
            let spawner: Box<dyn crate::nfs4::offload::CopySpawner> = Box::new(move |job| {
                held.lock().unwrap().push(job);
                true
            });
            assert!(self.nfs.copy_spawner.set(spawner).is_ok());
            jobs
        }

        /// A fixture whose session has a back channel the test answers by hand, up.
        fn with_back_channel() -> Fixture {
            use sluice_nfs4state::callback::{CbCall, CbOutcome, PathState};
            let mut f = Fixture::with_back_channel_unprobed();
            let sends = f.nfs.state.lock().unwrap().poll_callbacks(Instant::now());
            let [(sid, send)] = &sends[..] else {
                panic!("{sends:?}")
            };
            assert_eq!(send.call, CbCall::Null);
            f.nfs.state.lock().unwrap().handle_callback(
                Instant::now(),
                sid,
                send.token,
                CbOutcome::NullOk,
            );
            let res = f.send(vec![]);
            assert_eq!(res.status, Nfsstat4::OK);
            f.answer_callbacks(0);
            assert_eq!(
                f.nfs.state.lock().unwrap().callback_path(&f.session),
                Some(PathState::Up)
            );
            f
        }

        /// A fixture whose session was just created with a back channel: nothing has probed
        /// it yet, as right after a mount.
        fn with_back_channel_unprobed() -> Fixture {
            let mut f = Fixture::new();
            let first = f.session;
            f.session = f.mount(true);
            // The same client: only its new session, with the back channel, stays.
            f.nfs
                .state
                .lock()
                .unwrap()
                .destroy_session(&first, None)
                .unwrap();
            f
        }

        /// The first poll of the back channel: its CB_NULL, answered with `outcome`.
        fn answer_probe_null(&self, outcome: sluice_nfs4state::callback::CbOutcome) {
            use sluice_nfs4state::callback::CbCall;
            let sends = self
                .nfs
                .state
                .lock()
                .unwrap()
                .poll_callbacks(Instant::now());
            let [(sid, send)] = &sends[..] else {
                panic!("{sends:?}")
            };
            assert_eq!(send.call, CbCall::Null);
            self.nfs.state.lock().unwrap().handle_callback(
                Instant::now(),
                sid,
                send.token,
                outcome,
            );
        }

        /// Answers every CB_COMPOUND due with OK for each op; returns their CB_OFFLOADs.
        /// `expect`: how many CB_OFFLOADs there must be.
        fn answer_callbacks(&self, expect: usize) -> Vec<CbOffloadArgs> {
            use sluice_nfs4state::callback::{CbCall, CbOutcome};
            let mut offloads = Vec::new();
            let sends = self
                .nfs
                .state
                .lock()
                .unwrap()
                .poll_callbacks(Instant::now());
            for (sid, send) in sends {
                let CbCall::Compound(c) = &send.call else {
                    panic!("{send:?}")
                };
                let results = c
                    .ops
                    .iter()
                    .map(|op| match op {
                        CbArgop4::Sequence(s) => CbResop4::Sequence(Res4::Ok(CbSequenceResOk {
                            sessionid: s.sessionid,
                            sequenceid: s.sequenceid,
                            slotid: s.slotid,
                            highest_slotid: 0,
                            target_highest_slotid: 0,
                        })),
                        CbArgop4::Offload(o) => {
                            offloads.push(o.clone());
                            CbResop4::Offload(Nfsstat4::OK)
                        }
                        other => panic!("{other:?}"),
                    })
                    .collect();
                let res = CbCompound4Res {
                    status: Nfsstat4::OK,
                    tag: c.tag.clone(),
                    results,
                };
                self.nfs.state.lock().unwrap().handle_callback(
                    Instant::now(),
                    &sid,
                    send.token,
                    CbOutcome::Compound(res),
                );
            }
            assert_eq!(offloads.len(), expect, "{offloads:?}");
            offloads
        }

        fn size(&self, i: usize, fh: &NfsFh4) -> u64 {
            let fh = crate::backend::FileHandle::new(fh.0.clone()).unwrap();
            self.fs[i].getattr(&fh).unwrap().size
        }
    }

    /// RFC 7862 §15.2, §15.8, §15.9, §16.1, §4.8 in process, with the copy driver's jobs held
    /// by the test: an asynchronous COPY copies its first chunk before the reply; its copy
    /// stateid passes TEST_STATEID and FREE_STATEID refuses it while it runs; OFFLOAD_CANCEL
    /// stops it before the next chunk and no CB_OFFLOAD follows; a copy run to the end sends
    /// CB_OFFLOAD with the whole count, and answering it ends the stateid.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_async_copy_is_cancelled_between_chunks_or_ends_in_cb_offload() {
        use sluice_xdr::nfs4::callback::OffloadInfo4;
        const LEN: u64 = sluice_vfs::COPY_BYTES_MAX + (8 << 20);
        let mut f = Fixture::with_back_channel();
        let jobs = f.hold_copies();
        let data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
        let src = f.file(0, "src", &data);
        let copy = |dst: &NfsFh4| {
            two_files(
                &src,
                dst,
                NfsArgop4::Copy(CopyArgs {
                    src_stateid: Stateid4::ANONYMOUS,
                    dst_stateid: Stateid4::ANONYMOUS,
                    src_offset: 0,
                    dst_offset: 0,
                    count: 0,
                    consecutive: false,
                    synchronous: false,
                    source_server: NetlocList(Vec::new()),
                }),
            )
        };
        let copy_stateid = |res: &Compound4Res| {
            let Some(NfsResop4::Copy(CopyRes::Ok(c))) = res.results.last() else {
                panic!("{res:?}")
            };
            assert!(!c.requirements.synchronous);
            assert_eq!(c.response.count, 0);
            c.response.callback_id.0[0]
        };

        // Cancelled after the first chunk.
        let dst = f.file(0, "dst1", b"");
        let res = f.send(copy(&dst));
        let sid = copy_stateid(&res);
        assert_eq!(
            f.size(0, &dst),
            sluice_vfs::COPY_BYTES_MAX,
            "the first chunk"
        );
        let res = f.send(vec![
            NfsArgop4::Putfh(dst.clone()),
            NfsArgop4::OffloadStatus(sid),
            NfsArgop4::TestStateid(sluice_xdr::nfs4::ops::StateidList(vec![sid])),
            NfsArgop4::FreeStateid(sid),
        ]);
        let Some(NfsResop4::OffloadStatus(Res4::Ok(st))) = res.results.get(2) else {
            panic!("{res:?}")
        };
        assert_eq!(st.count, sluice_vfs::COPY_BYTES_MAX);
        assert!(st.complete.0.is_empty(), "running");
        let Some(NfsResop4::TestStateid(Res4::Ok(t))) = res.results.get(3) else {
            panic!("{res:?}")
        };
        assert_eq!(t.0, vec![Nfsstat4::OK]);
        assert_eq!(
            res.status,
            Nfsstat4::LOCKS_HELD,
            "FREE_STATEID of a running copy"
        );
        let res = f.send(vec![
            NfsArgop4::Putfh(dst.clone()),
            NfsArgop4::OffloadCancel(sid),
        ]);
        assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
        let job = jobs.lock().unwrap().pop().unwrap();
        crate::nfs4::offload::driver::run(f.nfs.clone(), job).await;
        assert_eq!(
            f.size(0, &dst),
            sluice_vfs::COPY_BYTES_MAX,
            "no chunk after the cancel"
        );
        f.answer_callbacks(0);
        for op in [NfsArgop4::OffloadStatus(sid), NfsArgop4::OffloadCancel(sid)] {
            let res = f.send(vec![NfsArgop4::Putfh(dst.clone()), op]);
            assert_eq!(res.status, Nfsstat4::BAD_STATEID, "{res:?}");
        }

        // Run to the end.
        let dst = f.file(0, "dst2", b"");
        let res = f.send(copy(&dst));
        let sid = copy_stateid(&res);
        let job = jobs.lock().unwrap().pop().unwrap();
        crate::nfs4::offload::driver::run(f.nfs.clone(), job).await;
        assert_eq!(f.size(0, &dst), LEN);
        let res = f.send(vec![
            NfsArgop4::Putfh(dst.clone()),
            NfsArgop4::OffloadStatus(sid),
        ]);
        let Some(NfsResop4::OffloadStatus(Res4::Ok(st))) = res.results.last() else {
            panic!("{res:?}")
        };
        assert_eq!((st.count, &st.complete.0[..]), (LEN, &[Nfsstat4::OK][..]));
        let cb = f.answer_callbacks(1);
        assert_eq!(cb[0].stateid, sid);
        assert_eq!(cb[0].fh, dst);
        let OffloadInfo4::Ok(w) = &cb[0].offload_info else {
            panic!("{cb:?}")
        };
        assert_eq!(w.count, LEN);
        assert_eq!(w.writeverf, f.fs[0].write_verifier());
        assert_eq!(
            f.nfs.state.lock().unwrap().copies_len(),
            0,
            "answered: forgotten"
        );

        // A copy whose client goes is forgotten with it.
        let dst = f.file(0, "dst3", b"");
        let res = f.send(copy(&dst));
        copy_stateid(&res);
        let clientid = f
            .nfs
            .state
            .lock()
            .unwrap()
            .session(&f.session)
            .unwrap()
            .clientid;
        {
            let mut st = f.nfs.state.lock().unwrap();
            st.destroy_session(&f.session, None).unwrap();
            st.destroy_clientid(clientid).unwrap();
            assert_eq!(st.copies_len(), 0);
        }
        let job = jobs.lock().unwrap().pop().unwrap();
        crate::nfs4::offload::driver::run(f.nfs.clone(), job).await;
        assert_eq!(f.size(0, &dst), sluice_vfs::COPY_BYTES_MAX);
    }

    /// Issue 14: a freshly mounted Linux client's first large COPY arrives before the back
    /// channel's probe has finished. A path not yet proven (Unknown, Probing) takes an
    /// asynchronous copy; its CB_OFFLOAD waits behind the probe and goes out once the path is
    /// up. A path known to fail keeps COPY synchronous (answered short).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_copy_while_the_back_channel_is_probed_is_asynchronous() {
        use sluice_nfs4state::callback::{CbOutcome, PathState};
        const LEN: u64 = sluice_vfs::COPY_BYTES_MAX + (4 << 20);
        let copy_args = CopyArgs {
            src_stateid: Stateid4::ANONYMOUS,
            dst_stateid: Stateid4::ANONYMOUS,
            src_offset: 0,
            dst_offset: 0,
            count: 0,
            consecutive: false,
            synchronous: false,
            source_server: NetlocList(Vec::new()),
        };
        for down in [false, true] {
            let mut f = Fixture::with_back_channel_unprobed();
            let jobs = f.hold_copies();
            let data: Vec<u8> = (0..LEN).map(|i| (i % 249) as u8).collect();
            let src = f.file(0, "src", &data);
            let dst = f.file(0, "dst", b"");
            if down {
                f.answer_probe_null(CbOutcome::Failed);
                assert_eq!(
                    f.nfs.state.lock().unwrap().callback_path(&f.session),
                    Some(PathState::Down)
                );
            } else {
                assert_eq!(
                    f.nfs.state.lock().unwrap().callback_path(&f.session),
                    Some(PathState::Unknown)
                );
            }
            let res = f.send(two_files(&src, &dst, NfsArgop4::Copy(copy_args.clone())));
            let Some(NfsResop4::Copy(CopyRes::Ok(c))) = res.results.last() else {
                panic!("{res:?}")
            };
            if down {
                assert!(c.requirements.synchronous, "{c:?}");
                assert_eq!(
                    c.response.count,
                    sluice_vfs::COPY_BYTES_MAX,
                    "answered short"
                );
                assert!(jobs.lock().unwrap().is_empty());
                continue;
            }
            assert!(!c.requirements.synchronous, "{c:?}");
            let sid = c.response.callback_id.0[0];
            let job = jobs.lock().unwrap().pop().unwrap();
            crate::nfs4::offload::driver::run(f.nfs.clone(), job).await;
            assert_eq!(f.size(0, &dst), LEN);
            // The probe finishes (CB_NULL, then CB_SEQUENCE after the client's SEQUENCE, which
            // the COPY's was); only then does the CB_OFFLOAD go.
            f.answer_probe_null(CbOutcome::NullOk);
            f.answer_callbacks(0);
            assert_eq!(
                f.nfs.state.lock().unwrap().callback_path(&f.session),
                Some(PathState::Up)
            );
            let cb = f.answer_callbacks(1);
            assert_eq!((cb[0].stateid, &cb[0].fh), (sid, &dst));
        }
    }
}
