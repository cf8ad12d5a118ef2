//! The NFSv4.2 operations the Linux client uses (RFC 7862): SEEK (§15.11), ALLOCATE (§15.1),
//! DEALLOCATE (§15.4), COPY (§15.2, within one export) and CLONE (§15.13), over the file
//! system's range operations ([`FileSystem::seek`] and the rest). Only minor version 2 reaches
//! them: the op table flags them `V42`, so a 4.1 COMPOUND gets NFS4ERR_OP_ILLEGAL (RFC 8881
//! §16.2.3 leaves op numbers past RECLAIM_COMPLETE undefined in 4.1).
//!
//! # Checks, in order (as READ and WRITE)
//! ```text
//!  current handle ─▶ regular file of an export the caller may use (data_target: ISDIR, INVAL)
//!  stateid        ─▶ open (or lock, or special) stateid of this file, OPENMODE for writes
//!  file system    ─▶ ROFS on a read-only export, ACCESS, NXIO, NOTSUPP, ...
//! ```
//! COPY and CLONE take the source from the saved handle and the destination from the current
//! one. Both must be regular files (NFS4ERR_WRONG_TYPE otherwise, as knfsd answers) of the same
//! export (NFS4ERR_XDEV: a server-side copy never crosses file systems here). COPY checks the
//! source stateid for reading and the destination's for writing.
//!
//! # COPY is synchronous
//! Every COPY is done before its reply (`wr_callback_id` empty, `cr_synchronous` true), even
//! when the client allowed an asynchronous one: RFC 7862 §15.2.3 lets the server choose, and a
//! bounded copy needs no OFFLOAD_STATUS, OFFLOAD_CANCEL or CB_OFFLOAD (those answer
//! NFS4ERR_NOTSUPP). One COPY moves at most [`sluice_vfs::COPY_BYTES_MAX`]; a larger request is
//! answered short (`wr_count` below `ca_count`) and the client asks for the rest, as it does
//! after a short WRITE. The data lands as an UNSTABLE WRITE's would: `wr_committed` UNSTABLE
//! with the export's write verifier, and the client COMMITs it. A COPY naming source servers
//! (an inter-server copy) and COPY_NOTIFY answer NFS4ERR_NOTSUPP.
//!
//! # Write-behind
//! SEEK, DEALLOCATE, COPY and CLONE read or drop file data the server may still be holding as
//! UNSTABLE writes (see `super::data`). Before them, the COMPOUND lands the held writes of the
//! file (for COPY and CLONE the source first) as it does before a truncating SETATTR; a file
//! still held when the op runs makes it NFS4ERR_DELAY, and the retry lands the other file.
//! ALLOCATE needs no landing: it changes no byte a held write could land on.
//!
//! # Not here
//! READ_PLUS stays NFS4ERR_NOTSUPP: its gain is sending holes as ranges instead of zeros, which
//! needs SEEK-per-READ on the server and pays only for very sparse files, while READ keeps its
//! zero-copy splice path. The Linux client falls back to READ on NOTSUPP for good. The extended
//! attribute ops (RFC 8276) and WRITE_SAME, IO_ADVISE, LAYOUTERROR, LAYOUTSTATS answer
//! NFS4ERR_NOTSUPP.

use super::{Call, Ctx, Fh, Nfs4};
use crate::backend::{Caller, FileHandle, FileSystem, FileType, SeekWhat};
use crate::nfs4::map;
use crate::nfs4::Nfsstat4;
use sluice_xdr::nfs4::ops::{
    AllocateArgs, CloneArgs, CopyArgs, CopyRequirements4, CopyResOk, SeekArgs, SeekResOk,
    StateidOpt, WriteResponse4, NFS4_CONTENT_DATA, NFS4_CONTENT_HOLE,
};
use sluice_xdr::nfs4::{StableHow4, Stateid4};
use std::sync::Arc;

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
        self.check_io(ctx, &a.stateid, false)?;
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
        let (fs, caller, fh) = self.data_target(call, ctx)?;
        self.check_io(ctx, &a.stateid, true)?;
        let r = if punch {
            self.settle(&fh)?;
            fs.deallocate(&caller, &fh, a.offset, a.length)
        } else {
            fs.allocate(&caller, &fh, a.offset, a.length)
        };
        r.map(|_| ()).map_err(|(e, _)| map::status(e))
    }

    /// COPY (RFC 7862 §15.2) within one export, synchronously (see the module notes).
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
            let st = self.state();
            st.check_io(clientid, &src_sid, src.as_bytes(), false)?;
            st.check_io(clientid, &dst_sid, dst_fh.as_bytes(), true)?;
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
