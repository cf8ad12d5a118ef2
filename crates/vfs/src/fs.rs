//! [`FileSystem`]: the operations every NFS version's handlers call, in this layer's types.
//!
//! The shape follows knfsd's `fs/nfsd/vfs.c`: one synchronous call per operation, taking the
//! caller (credentials already squashed for the export) and handles, returning neutral results
//! whose failure side carries the attributes a failure reply needs. The methods block (system
//! calls, `fsync`): async callers run them on a blocking pool.
//!
//! Backends: [`LocalFs`] (a real directory, `localfs/`, which implements the trait directly)
//! and [`MemFs`](crate::MemFs) (in memory, with injected faults, for tests and the simulator).
//! A backend may also live in a crate of its own (the CephFS backend does, keeping foreign
//! code out of this crate), written against the trait and the types re-exported at this
//! crate's root ([`types`](crate::types) holds the trait's vocabulary). READ fast paths that
//! only a real directory has (`RWF_NOWAIT` reads from the page cache, splice, io_uring on the
//! cached descriptor) stay inherent methods of `LocalFs`, reached through
//! [`FileSystem::local`]; the trait holds what every backend can do.

// As in `localfs`: the failure side carries the failure reply's attributes, as large as the
// success side; boxing it would add an allocation to every error reply.
#![allow(clippy::result_large_err)]

use crate::handle::ExportId;
use crate::localfs::LocalFs;
use crate::stats::BackendStats;
use crate::types::{
    Attr, Caller, ChangeKind, CopyOk, CreateHow, CreateOk, DeviceId, DirEntry, FileHandle,
    FileType, FsError, FsInfo, FsStat, LinkRes, LockConflict, LockError, LockType, LookupOk,
    MetadataSpeed, PathConf, ReadOk, ReaddirOk, RenameWcc, Res, SeekOk, SeekWhat, SetAttr,
    StableHow, Time, Wcc, WriteOk, IO_BYTES_MAX_DEFAULT,
};
use crate::xattr::{XattrError, XattrSet};
use bytes::Bytes;

/// One exported file system. Object safe: handlers may hold a `&dyn FileSystem`.
pub trait FileSystem: Send + Sync {
    /// The handle of the export root.
    fn root_handle(&self) -> FileHandle;
    /// The export id written in every handle this file system issues (see
    /// [`handle::export_id_of`](crate::handle::export_id_of)), so a server routes a handle to
    /// the file system that issued it.
    fn export_id(&self) -> ExportId;
    /// The identity of the object `fh` names, for keying state about it (NFSv4 opens, locks,
    /// delegations; the recall gate): equal for every handle of one object, whatever else a
    /// handle carries (a [`LocalFs`] handle of a file has a hint of the directory it was found
    /// in, so a file with hard links in two directories has two handles), and different for
    /// different objects. Never fails and never panics: bytes the backend cannot verify get a
    /// key of their own that no valid handle has. No I/O. Default: the handle's bytes (a backend
    /// whose handles are already one per object).
    fn state_key(&self, fh: &FileHandle) -> Bytes {
        fh.to_bytes()
    }
    /// Largest READ answered, bytes.
    fn read_bytes_max(&self) -> u32 {
        IO_BYTES_MAX_DEFAULT
    }
    /// A hint that `len` bytes from `offset` will be read soon. Default: ignored.
    fn readahead_hint(&self, _fh: &FileHandle, _offset: u64, _len: u64) {}
    /// The local-directory backend behind this file system, for the data path's fast paths
    /// that only a real file has (splice, `RWF_NOWAIT`, io_uring, early writeback). Default:
    /// none, and the data path uses the trait's methods alone.
    fn local(&self) -> Option<&LocalFs> {
        None
    }
    /// What this backend counts of its own calls to the storage beneath it (per kind of call:
    /// count, errors, latency; see [`crate::stats`]), for `sluice stats` and `/metrics`. No I/O.
    /// Default: none (a backend whose work is the server's own time, as [`LocalFs`]'s).
    fn backend_stats(&self) -> Option<BackendStats> {
        None
    }
    /// How [`Attr::change`] is made, for NFSv4.2's `change_attr_type` (RFC 7862 §12.2.3).
    /// Default: from the ctime, as [`LocalFs`] makes it.
    fn change_kind(&self) -> ChangeKind {
        ChangeKind::Ctime
    }
    /// The alignment [`FileSystem::clone_range`] needs of its offsets and length (except a
    /// length that reaches the source's end), for NFSv4.2's `clone_blksize` (RFC 7862 §12.2.1);
    /// 0: none stated (no reflinks, or any range clones). Default 0.
    fn clone_blksize(&self) -> u32 {
        0
    }
    /// How long this backend's metadata calls take ([`MetadataSpeed`]): a server may make the
    /// quick ones on its own task instead of a blocking pool. No I/O. Default: `Remote` (a
    /// backend that does not say is never called from a task that must not wait).
    fn metadata_speed(&self) -> MetadataSpeed {
        MetadataSpeed::Remote
    }
    // Byte-range locks pushed down. The NFSv4 server's lock table (`sluice-nfs4state`) is
    // the truth for its own clients and decides first; a backend shared with other clients
    // (CephFS: ceph-fuse, the kernel client, another gateway) takes the same locks too, so a
    // lock held through sluice stops theirs and theirs stop sluice's. A lock owner is a
    // number the server draws, one per (NFS client, lock owner) while it holds locks; ranges
    // are `offset` and `len` with `len` 0 meaning to the end of the file, as `fcntl`'s; an
    // owner's locks on a file split and merge with POSIX semantics, as in the server's table.
    // The defaults do nothing: a backend nobody else reaches ([`LocalFs`], whose directory
    // other programs could lock but whose users sluice does not try to be coherent with, and
    // `MemFs`) leaves the server's table the whole truth. None of these calls waits for a
    // lock: a conflict is an answer at once.

    /// Locks a range of `fh` for `owner_key` (replacing the owner's type over it); someone
    /// else's conflicting lock is [`LockError::Conflict`].
    fn lock(
        &self,
        fh: &FileHandle,
        owner_key: u64,
        kind: LockType,
        offset: u64,
        len: u64,
    ) -> Result<(), LockError> {
        let _ = (fh, owner_key, kind, offset, len);
        Ok(())
    }
    /// Unlocks a range of `fh` for `owner_key` (parts not held are no error).
    fn unlock(
        &self,
        fh: &FileHandle,
        owner_key: u64,
        offset: u64,
        len: u64,
    ) -> Result<(), FsError> {
        let _ = (fh, owner_key, offset, len);
        Ok(())
    }
    /// A lock held by another owner that conflicts with `kind` over the range, if any (LOCKT).
    fn test_lock(
        &self,
        fh: &FileHandle,
        owner_key: u64,
        kind: LockType,
        offset: u64,
        len: u64,
    ) -> Result<Option<LockConflict>, FsError> {
        let _ = (fh, owner_key, kind, offset, len);
        Ok(None)
    }
    /// Drops every lock of `owner_key` on the object whose [`FileSystem::state_key`] is `file`
    /// (the server's state holds none of them any more). Never fails: a key this backend does
    /// not know is nothing to drop.
    fn release_locks(&self, file: &[u8], owner_key: u64) {
        let _ = (file, owner_key);
    }
    /// Drops every lock of `owner_key` on every file.
    fn release_lock_owner(&self, owner_key: u64) {
        let _ = owner_key;
    }
    /// Whether the NFSv4 server may grant delegations on this file system. A delegation
    /// promises the client that nobody else changes (or, for a write delegation, reads) the
    /// file without a recall first; a backend other clients reach directly can keep that
    /// promise only with a delegation of its own behind it. Default true (the server's
    /// recalls cover every way in).
    fn grants_delegations(&self) -> bool {
        true
    }

    /// The verifier of unstable writes: changes when data acknowledged as unstable may have
    /// been lost (a restart, a failed flush), so clients resend it.
    fn write_verifier(&self) -> [u8; 8];
    /// Draws a new write verifier (after data acknowledged as unstable was lost).
    fn reset_write_verifier(&self);

    fn getattr(&self, fh: &FileHandle) -> Result<Attr, FsError>;
    /// `guard`: the ctime the client believes the object has; a mismatch is
    /// [`FsError::NotSync`] and changes nothing.
    fn setattr(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        sattr: &SetAttr,
        guard: Option<Time>,
    ) -> Res<Wcc, Wcc>;
    fn lookup(&self, caller: &Caller, dir: &FileHandle, name: &[u8])
        -> Res<LookupOk, Option<Attr>>;
    /// Which of the `requested` [`access`](crate::access) bits the caller has.
    fn access(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        requested: u32,
    ) -> Res<(u32, Option<Attr>), Option<Attr>>;
    fn readlink(&self, fh: &FileHandle) -> Res<(Vec<u8>, Option<Attr>), Option<Attr>>;
    /// Reads into `bufs` in order; `count` says how many bytes landed.
    fn read(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        bufs: &mut [&mut [u8]],
    ) -> Res<ReadOk, Option<Attr>>;
    /// Writes `data` (chunks, in order) at `offset`, as stable as `stable` asks.
    fn write(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        data: &[Bytes],
        stable: StableHow,
    ) -> Res<WriteOk, Wcc>;
    /// An UNSTABLE write that is one piece of a write-behind flush of `flush_bytes` contiguous
    /// bytes. A backend that can keep streams out of its cache does so for long flushes
    /// (LocalFs: O_DIRECT, see `iomode`); by default an ordinary UNSTABLE [`FileSystem::write`].
    fn write_flush(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        data: &[Bytes],
        flush_bytes: u64,
    ) -> Res<WriteOk, Wcc> {
        let _ = flush_bytes;
        self.write(caller, fh, offset, data, StableHow::Unstable)
    }
    /// Makes `count` bytes from `offset` durable (`count == 0`: to the end of the file).
    fn commit(&self, caller: &Caller, fh: &FileHandle, offset: u64, count: u32) -> Res<Wcc, Wcc>;
    fn create(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        how: CreateHow,
    ) -> Res<CreateOk, Wcc>;
    fn mkdir(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        sattr: &SetAttr,
    ) -> Res<CreateOk, Wcc>;
    fn symlink(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        target: &[u8],
        sattr: &SetAttr,
    ) -> Res<CreateOk, Wcc>;
    fn mknod(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        ftype: FileType,
        sattr: &SetAttr,
        rdev: DeviceId,
    ) -> Res<CreateOk, Wcc>;
    fn remove(&self, caller: &Caller, dir: &FileHandle, name: &[u8]) -> Res<Wcc, Wcc>;
    fn rmdir(&self, caller: &Caller, dir: &FileHandle, name: &[u8]) -> Res<Wcc, Wcc>;
    fn rename(
        &self,
        caller: &Caller,
        from_dir: &FileHandle,
        from_name: &[u8],
        to_dir: &FileHandle,
        to_name: &[u8],
    ) -> Res<RenameWcc, RenameWcc>;
    fn link(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        dir: &FileHandle,
        name: &[u8],
    ) -> Res<LinkRes, LinkRes>;
    /// Offers entries from `cookie` on to `visit`, which returns `false` when its page is full.
    fn readdir(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        cookie: u64,
        cookieverf: [u8; 8],
        plus: bool,
        visit: &mut dyn FnMut(DirEntry<'_>) -> bool,
    ) -> Res<ReaddirOk, Option<Attr>>;
    fn fsstat(&self, fh: &FileHandle) -> Res<FsStat, Option<Attr>>;
    fn fsinfo(&self, fh: &FileHandle) -> Res<FsInfo, Option<Attr>>;
    fn pathconf(&self, fh: &FileHandle) -> Res<PathConf, Option<Attr>>;

    // The space and range operations of NFSv4.2 (RFC 7862). A backend that cannot do one
    // answers [`FsError::NotSupp`], the default, which the protocol passes on (NFS4ERR_NOTSUPP)
    // and the client falls back from (to READ and WRITE for a copy).

    /// The first offset at or after `offset` where data (or a hole) starts. An offset at or
    /// past the end is [`FsError::Nxio`]; SEEK_DATA with only a hole left answers the size with
    /// `eof` set.
    fn seek(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        what: SeekWhat,
    ) -> Res<SeekOk, Option<Attr>> {
        let _ = (caller, offset, what);
        Err((FsError::NotSupp, self.getattr(fh).ok()))
    }
    /// Reserves space for `len` bytes from `offset`, extending the size if the range ends past
    /// it; the range reads as before (zeros where nothing was written).
    fn allocate(&self, caller: &Caller, fh: &FileHandle, offset: u64, len: u64) -> Res<Wcc, Wcc> {
        let _ = (caller, offset, len);
        Err((FsError::NotSupp, Wcc::after(self.getattr(fh).ok())))
    }
    /// Frees `len` bytes from `offset` (a hole: reads as zeros); the size never changes.
    fn deallocate(&self, caller: &Caller, fh: &FileHandle, offset: u64, len: u64) -> Res<Wcc, Wcc> {
        let _ = (caller, offset, len);
        Err((FsError::NotSupp, Wcc::after(self.getattr(fh).ok())))
    }
    /// Copies up to `count` bytes (0: to the source's end) of `src` from `src_offset` into `dst`
    /// at `dst_offset`, at most [`COPY_BYTES_MAX`](crate::COPY_BYTES_MAX) and never past the
    /// source's end (a source offset past it is [`FsError::Inval`]). As stable as an UNSTABLE
    /// WRITE. Failures carry the destination's attributes.
    fn copy_range(
        &self,
        caller: &Caller,
        src: &FileHandle,
        src_offset: u64,
        dst: &FileHandle,
        dst_offset: u64,
        count: u64,
    ) -> Res<CopyOk, Wcc> {
        let _ = (caller, src, src_offset, dst_offset, count);
        Err((FsError::NotSupp, Wcc::after(self.getattr(dst).ok())))
    }
    /// Makes `count` bytes (0: to the source's end) of `dst` from `dst_offset` share `src`'s
    /// from `src_offset` (a reflink), as a copy would read. Failures carry the destination's
    /// attributes.
    fn clone_range(
        &self,
        caller: &Caller,
        src: &FileHandle,
        src_offset: u64,
        dst: &FileHandle,
        dst_offset: u64,
        count: u64,
    ) -> Res<Wcc, Wcc> {
        let _ = (caller, src, src_offset, dst_offset, count);
        Err((FsError::NotSupp, Wcc::after(self.getattr(dst).ok())))
    }

    // Extended attributes of the user namespace (RFC 8276; the vocabulary, limits and errors
    // are in [`crate::xattr`]). Names come without the `user.` prefix. Reading needs read
    // permission on the object, changing needs write permission, as `getxattr(2)` and
    // `setxattr(2)` check for `user.*`; a read-only export ([`Caller::read_only`]) answers
    // [`FsError::RoFs`] to changes. A backend without them answers [`FsError::NotSupp`] (the
    // defaults) and says so in [`FileSystem::xattr_support`].

    /// Whether objects of this file system take user extended attributes (NFSv4.2's
    /// `xattr_support`). No I/O. Default false.
    fn xattr_support(&self) -> bool {
        false
    }
    /// The value of attribute `name` of `fh`, at most `size_max` bytes (a larger one is
    /// [`XattrError::TooBig`]).
    fn getxattr(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        name: &[u8],
        size_max: usize,
    ) -> Result<Vec<u8>, XattrError> {
        let _ = (caller, fh, name, size_max);
        Err(FsError::NotSupp.into())
    }
    /// Sets attribute `name` of `fh` to `value` as `how` says; the object's attributes before
    /// and after (its change attribute moves, as for any metadata change).
    fn setxattr(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> Result<Wcc, XattrError> {
        let _ = (caller, fh, name, value, how);
        Err(FsError::NotSupp.into())
    }
    /// The names of `fh`'s user attributes, sorted bytewise, so that a position in the list is
    /// a stable cookie while the set does not change.
    fn listxattrs(&self, caller: &Caller, fh: &FileHandle) -> Result<Vec<Vec<u8>>, XattrError> {
        let _ = (caller, fh);
        Err(FsError::NotSupp.into())
    }
    /// Removes attribute `name` of `fh` (a missing one is [`XattrError::NoXattr`]).
    fn removexattr(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        name: &[u8],
    ) -> Result<Wcc, XattrError> {
        let _ = (caller, fh, name);
        Err(FsError::NotSupp.into())
    }
}
