//! The recall gate as a protocol without delegations sees it: NFSv3 changes files that NFSv4
//! clients may be caching under a delegation, so a v3 WRITE, SETATTR, REMOVE, RENAME, LINK or
//! truncating CREATE must first have those delegations recalled (RFC 8881 §10.4.1: the server
//! recalls on any conflicting access, whatever protocol it came over).
//!
//! ```text
//!   nfs (v3 handlers) ── Arc<dyn RecallGate> ──▶ nfs4::compound::Nfs4 (implements it)
//!        │  held(): one atomic load, false when no delegation exists at all
//!        │  break_for(now, file, write): State4::break_delegations(now, None, file, write)
//!        ▼
//!   Err(Recalling): the v3 op answers NFS3ERR_JUKEBOX; the client retries after a delay
//! ```
//! This module is the whole interface: the v3 code names no NFSv4 type, and the v4 side owns
//! the state, the lock and the recall machinery (CB_RECALL over the holder's back channel, the
//! clock from the send, revocation after the lease, courtesy holders expired at once, all as
//! for a v4 caller). A v3 caller has no client id, so every delegation of the file is another
//! client's.
//!
//! # What a v3 procedure conflicts with
//! | procedure | file checked | write |
//! |---|---|---|
//! | WRITE, SETATTR, LINK | the handle's file | yes |
//! | REMOVE, RENAME | the object named (both names for RENAME), if it exists | yes |
//! | CREATE UNCHECKED with a size | the object named, if it exists (it is truncated) | yes |
//! | READ | the handle's file | no: read delegations allow it |
//! | others (GETATTR, COMMIT, ...) | nothing | |
//!
//! NLM (NFSv3's locks, [`crate::nlm`]) passes the same gate in its own way: LOCK and TEST
//! call `State4::break_delegations` under the state's lock they take anyway (exclusive:
//! `write`), and a conflict drops the request with no reply instead of an error, as knfsd's
//! lockd does (the Linux client sends it again; the notes of [`crate::nlm`]: Delegations).
//!
//! knfsd answers the v3 caller NFS3ERR_JUKEBOX while the recall is under way (its
//! `nfsd_open` breaks the lease with `O_NONBLOCK`); the Linux client waits 5 s and sends the
//! call again with a new XID. sluice's v3 client backs off from 100 ms to 2 s.
//!
//! # Cost when nothing is delegated
//! [`RecallGate::held`] is one atomic load of the delegation table's count of live delegations,
//! published by the table itself as they come and go (`sluice_nfs4state::delegations::table`).
//! Zero: the v3 op goes on without the v4 state's lock and without a name lookup. Non-zero: the
//! lock is taken, and REMOVE, RENAME and CREATE look the name up first (one more syscall).
//!
//! # The file's identity
//! The key is `FileSystem::state_key` of the handle, as the v4 open, lock and delegation
//! tables key files: the file's identity (for a local export, the export and the kernel's
//! handle of the inode), not the handle's bytes. A handle carries a hint of the directory it
//! was found in (`sluice_vfs::handle`), so one file reached through two hard links has two
//! handles, but one key: a v3 change through one name recalls a delegation granted through
//! the other, as knfsd, which keys delegations by inode.
//!
//! # What is not closed
//! The gate is checked before the change, outside the v4 lock: a v4 OPEN granting a
//! delegation between a v3 WRITE's check and its landing gives that client the old data
//! (knfsd closes this window with the write count its v3 opens hold on the inode). The
//! window is one WRITE long and needs a new grant racing it.

use std::time::Instant;

/// The conflicting op must wait: a recall of the file's delegations is under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recalling;

/// A handle on the NFSv4 delegations for callers outside NFSv4 (module notes).
pub trait RecallGate: Send + Sync {
    /// Whether any live delegation exists (held or being recalled; revoked ones conflict with
    /// nothing): one atomic load, meant for the hot path. False: [`RecallGate::break_for`]
    /// would answer `Ok`.
    fn held(&self) -> bool;

    /// An op from a client with no NFSv4 identity changes `file` (the handle's
    /// `FileSystem::state_key`, module notes) (`write`: its data, size,
    /// attributes or names) or reads it: `Err(Recalling)` while delegations that conflict are
    /// being recalled (the recalls are queued by this call), else `Ok`.
    fn break_for(&self, now: Instant, file: &[u8], write: bool) -> Result<(), Recalling>;
}
