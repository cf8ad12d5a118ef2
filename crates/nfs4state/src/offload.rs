//! The asynchronous COPYs (RFC 7862 §15.2, §4.8): their copy stateids, how far each got, and
//! when each is forgotten. Pure: the copying itself is the server's driver (`sluice_server::nfs4::offload`), which calls
//! [`CopyTable::progress`] between chunks and [`CopyTable::finish`] at the end; the
//! COMPOUND answers OFFLOAD_STATUS and OFFLOAD_CANCEL from here.
//!
//! # A copy's life
//! ```text
//!   COPY (ca_synchronous false, large, back channel up) ─▶ start ─▶ Running { copied }
//!        reply: wr_callback_id = the copy stateid          │  progress(copied) per chunk
//!                                                          ▼
//!   OFFLOAD_CANCEL ─▶ forgotten at once; the driver      Done(result) ─▶ CB_OFFLOAD queued
//!   sees it gone at its next chunk and stops, no              │  (token kept)
//!   CB_OFFLOAD is sent (the client gave the stateid back)     ▼
//!                                                        the client answered CB_OFFLOAD ─▶ forgotten
//! ```
//! §4.8: a copy stateid is valid until the client or server restarts, the client returns it
//! with OFFLOAD_CANCEL, or the client answers CB_OFFLOAD. A CB_OFFLOAD that went unanswered
//! (path down, timeout) leaves the copy `Done`, so OFFLOAD_STATUS still reports its result
//! (what the Linux client falls back to); it goes with its client (expiry, DESTROY_CLIENTID)
//! or with FREE_STATEID. Nothing survives a restart: a copy in progress at a crash is simply
//! unknown afterwards (BAD_STATEID), and the client, which never got a CB_OFFLOAD, copies
//! again.
//!
//! # Stateids
//! A copy stateid is a stateid like the others (seqid 1, `other` = boot epoch, index, random)
//! with bit 0x40 of byte 4 set, so it never equals an open stateid's (index bit clear in the
//! first 2^30 opens) or a lock stateid's (0x80): the tables tell their own apart without
//! asking each other. It is the copy's and its client's only: another client's COPY state is
//! BAD_STATEID, as for open stateids. TEST_STATEID answers OK for a live one; FREE_STATEID
//! frees a finished copy and answers NFS4ERR_LOCKS_HELD for a running one (the stateid
//! still stands for work; OFFLOAD_CANCEL is how a client ends that).
//!
//! # Bounds
//! [`COPIES_PER_CLIENT_MAX`] and [`COPIES_MAX`] copies, running or waiting for their
//! CB_OFFLOAD's answer. A full table refuses with NFS4ERR_DELAY and the COPY falls back to a
//! synchronous one (as knfsd does past its limit of async copies), so a client never waits on
//! the table. Each running copy is one task of the driver doing one chunk at a time, so the
//! bound on copies is the bound on copy tasks.

use crate::ids::Entropy;
use crate::opens::Other;
use bytes::Bytes;
use sluice_vfs::{Caller, FileHandle, FileSystem};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{ClientId4, SessionId4, Stateid4, OTHER_SIZE};
use std::collections::HashMap;
use std::sync::Arc;

/// One asynchronous copy to do: `count` bytes of `src` from `src_offset` to `dst` at
/// `dst_offset`, of which the first `done` are copied already (by the COPY itself). The
/// COMPOUND makes it; a [`CopySpawner`] runs it.
pub struct CopyJob {
    pub id: Other,
    pub fs: Arc<dyn FileSystem>,
    pub caller: Caller,
    pub src: FileHandle,
    pub src_offset: u64,
    pub dst: FileHandle,
    pub dst_offset: u64,
    pub count: u64,
    pub done: u64,
}

/// Where the COMPOUND hands an asynchronous copy (the server's tokio driver, `sluice_server::nfs4::offload`, implements
/// it; tests hold the jobs themselves). The COMPOUND owns the interface and the driver depends
/// on it, never the other way round.
pub trait CopySpawner: Send + Sync {
    /// Takes `job` to run it; must not block (it runs on the COMPOUND's thread). `false`: it
    /// cannot (the driver is gone), and the COPY is done synchronously instead.
    fn spawn(&self, job: CopyJob) -> bool;
}

impl<F: Fn(CopyJob) -> bool + Send + Sync> CopySpawner for F {
    fn spawn(&self, job: CopyJob) -> bool {
        self(job)
    }
}

/// Copies one client may have at once. 8: the Linux client runs one COPY per
/// `copy_file_range` call, so 8 is 8 concurrent large copies from one machine; more would only
/// split the disk between them.
pub const COPIES_PER_CLIENT_MAX: usize = 8;
/// Copies over all clients. 64: each is a task and a stream of 32 MiB `copy_file_range`
/// calls; 64 at once already saturate any disk the server has.
pub const COPIES_MAX: usize = 64;
/// Set in byte 4 of a copy stateid's `other` (module notes).
const COPY_INDEX_BIT: u32 = 0x4000_0000;

/// How a copy ended: the bytes copied and `Ok`, or the error that stopped it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyEnd {
    pub copied: u64,
    pub status: Nfsstat4,
}

/// One asynchronous copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copy {
    pub clientid: ClientId4,
    /// The session of the COPY: CB_OFFLOAD goes on its back channel (or, if it is gone, on
    /// another session of the client).
    pub session: SessionId4,
    /// The destination's wire handle (`coa_fh`).
    pub dst: Bytes,
    /// Bytes copied so far.
    pub copied: u64,
    /// `Some` once the copy ended.
    pub end: Option<CopyEnd>,
    /// The queued CB_OFFLOAD: its session and token.
    pub callback: Option<(SessionId4, u64)>,
}

/// The asynchronous copies of one server instance (module notes).
#[derive(Debug)]
pub struct CopyTable {
    copies: HashMap<Other, Copy>,
    per_client: HashMap<ClientId4, usize>,
    boot_epoch: u32,
    next_index: u32,
    per_client_max: usize,
    total_max: usize,
}

impl CopyTable {
    pub fn new(boot_epoch: u32, per_client_max: usize, total_max: usize) -> Self {
        Self {
            copies: HashMap::new(),
            per_client: HashMap::new(),
            boot_epoch,
            next_index: 0,
            per_client_max,
            total_max,
        }
    }

    pub fn len(&self) -> usize {
        self.copies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.copies.is_empty()
    }

    /// Whether `other` names a copy stateid (alive).
    pub fn knows(&self, other: &Other) -> bool {
        self.copies.contains_key(other)
    }

    pub fn get(&self, other: &Other) -> Option<&Copy> {
        self.copies.get(other)
    }

    /// A new running copy for `clientid`, `copied` bytes into it: its stateid, or
    /// NFS4ERR_DELAY when the client or the server has as many as allowed.
    pub fn start(
        &mut self,
        clientid: ClientId4,
        session: SessionId4,
        dst: Bytes,
        copied: u64,
        entropy: &mut dyn Entropy,
    ) -> Result<Stateid4, Nfsstat4> {
        let mine = self.per_client.get(&clientid).copied().unwrap_or(0);
        if mine >= self.per_client_max || self.copies.len() >= self.total_max {
            return Err(Nfsstat4::DELAY);
        }
        let other = loop {
            let mut o = [0u8; OTHER_SIZE];
            o[..4].copy_from_slice(&self.boot_epoch.to_be_bytes());
            let index = (self.next_index & !(COPY_INDEX_BIT << 1)) | COPY_INDEX_BIT;
            o[4..8].copy_from_slice(&index.to_be_bytes());
            entropy.fill(&mut o[8..]);
            self.next_index = self.next_index.wrapping_add(1);
            if !self.copies.contains_key(&o) {
                break o;
            }
        };
        self.copies.insert(
            other,
            Copy {
                clientid,
                session,
                dst,
                copied,
                end: None,
                callback: None,
            },
        );
        *self.per_client.entry(clientid).or_default() += 1;
        Ok(Stateid4 { seqid: 1, other })
    }

    /// The driver copied `copied` bytes in all; `false` if the copy is gone (cancelled, its
    /// client expired): stop.
    pub fn progress(&mut self, other: &Other, copied: u64) -> bool {
        match self.copies.get_mut(other) {
            Some(c) if c.end.is_none() => {
                c.copied = copied;
                true
            }
            _ => false,
        }
    }

    /// The copy ended; `None` if it is gone meanwhile (then no CB_OFFLOAD is due).
    pub fn finish(&mut self, other: &Other, end: CopyEnd) -> Option<&Copy> {
        let c = self.copies.get_mut(other)?;
        debug_assert!(c.end.is_none(), "a copy finished twice");
        c.copied = end.copied;
        c.end = Some(end);
        Some(c)
    }

    /// The CB_OFFLOAD of copy `other` was queued as `token` on `session`.
    pub fn callback_queued(&mut self, other: &Other, session: SessionId4, token: u64) {
        if let Some(c) = self.copies.get_mut(other) {
            c.callback = Some((session, token));
        }
    }

    /// A CB_COMPOUND of `session` finished: if it was a CB_OFFLOAD the client answered, its
    /// copy is forgotten (§4.8). One that failed leaves the copy for OFFLOAD_STATUS.
    pub fn callback_done(&mut self, session: &SessionId4, token: u64, answered: bool) {
        if !answered {
            return;
        }
        let found = self
            .copies
            .iter()
            .find(|(_, c)| c.callback == Some((*session, token)))
            .map(|(o, _)| *o);
        if let Some(o) = found {
            self.remove(&o);
        }
    }

    /// The copy `stateid` names for `clientid`, or the stateid's error.
    fn check(&self, clientid: ClientId4, stateid: &Stateid4) -> Result<&Copy, Nfsstat4> {
        let c = self
            .copies
            .get(&stateid.other)
            .filter(|c| c.clientid == clientid)
            .ok_or(Nfsstat4::BAD_STATEID)?;
        match stateid.seqid {
            0 | 1 => Ok(c),
            _ => Err(Nfsstat4::BAD_STATEID),
        }
    }

    /// OFFLOAD_STATUS (§15.9): bytes copied, and the status once the copy ended.
    pub fn status(
        &self,
        clientid: ClientId4,
        stateid: &Stateid4,
    ) -> Result<(u64, Option<Nfsstat4>), Nfsstat4> {
        let c = self.check(clientid, stateid)?;
        Ok((c.copied, c.end.map(|e| e.status)))
    }

    /// OFFLOAD_CANCEL (§15.8): the copy is forgotten; the driver stops at its next chunk.
    pub fn cancel(&mut self, clientid: ClientId4, stateid: &Stateid4) -> Result<(), Nfsstat4> {
        self.check(clientid, stateid)?;
        self.remove(&stateid.other);
        Ok(())
    }

    /// TEST_STATEID (RFC 8881 §18.48) on a copy stateid.
    pub fn test(&self, clientid: ClientId4, stateid: &Stateid4) -> Nfsstat4 {
        match self.check(clientid, stateid) {
            Ok(_) => Nfsstat4::OK,
            Err(e) => e,
        }
    }

    /// FREE_STATEID (RFC 8881 §18.38) on a copy stateid (module notes).
    pub fn free(&mut self, clientid: ClientId4, stateid: &Stateid4) -> Nfsstat4 {
        match self.check(clientid, stateid) {
            Ok(c) if c.end.is_none() => Nfsstat4::LOCKS_HELD,
            Ok(_) => {
                self.remove(&stateid.other);
                Nfsstat4::OK
            }
            Err(e) => e,
        }
    }

    /// The client is gone (expired, DESTROY_CLIENTID): its copies too; running ones stop at
    /// their next chunk.
    pub fn remove_client(&mut self, clientid: ClientId4) {
        self.copies.retain(|_, c| c.clientid != clientid);
        self.per_client.remove(&clientid);
    }

    fn remove(&mut self, other: &Other) {
        if let Some(c) = self.copies.remove(other) {
            if let Some(n) = self.per_client.get_mut(&c.clientid) {
                *n -= 1;
                if *n == 0 {
                    self.per_client.remove(&c.clientid);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SplitMix;

    const S1: SessionId4 = [1; 16];

    fn table(per_client: usize, total: usize) -> (CopyTable, SplitMix) {
        (CopyTable::new(7, per_client, total), SplitMix(3))
    }

    fn end(copied: u64) -> CopyEnd {
        CopyEnd {
            copied,
            status: Nfsstat4::OK,
        }
    }

    #[test]
    fn a_copy_reports_progress_then_its_end_and_goes_when_cb_offload_is_answered() {
        let (mut t, mut e) = table(4, 4);
        let sid = t
            .start(1, S1, Bytes::from_static(b"fh"), 0, &mut e)
            .unwrap();
        assert_eq!(sid.seqid, 1);
        assert_eq!(sid.other[..4], 7u32.to_be_bytes(), "boot epoch first");
        assert_ne!(sid.other[4] & 0x40, 0, "copy stateids are marked");
        assert_eq!(sid.other[4] & 0x80, 0, "and never look like lock stateids");
        assert_eq!(t.status(1, &sid), Ok((0, None)));
        assert!(t.progress(&sid.other, 32 << 20));
        assert_eq!(t.status(1, &sid), Ok((32 << 20, None)));
        // Seqid 0 is "any" as for other stateids; another client's view is BAD_STATEID.
        let any = Stateid4 { seqid: 0, ..sid };
        assert_eq!(t.status(1, &any), Ok((32 << 20, None)));
        assert_eq!(t.status(2, &sid), Err(Nfsstat4::BAD_STATEID));
        assert_eq!(t.test(2, &sid), Nfsstat4::BAD_STATEID);
        assert_eq!(t.test(1, &sid), Nfsstat4::OK);
        assert_eq!(t.free(1, &sid), Nfsstat4::LOCKS_HELD, "running");

        let c = t.finish(&sid.other, end(80 << 20)).unwrap();
        assert_eq!(c.dst, Bytes::from_static(b"fh"));
        assert!(
            !t.progress(&sid.other, 1),
            "a finished copy takes no progress"
        );
        assert_eq!(t.status(1, &sid), Ok((80 << 20, Some(Nfsstat4::OK))));
        t.callback_queued(&sid.other, S1, 9);
        // A failed CB_OFFLOAD keeps the copy for OFFLOAD_STATUS; another token changes nothing.
        t.callback_done(&S1, 9, false);
        t.callback_done(&S1, 8, true);
        t.callback_done(&[2; 16], 9, true);
        assert!(t.knows(&sid.other));
        t.callback_done(&S1, 9, true);
        assert!(!t.knows(&sid.other));
        assert_eq!(t.status(1, &sid), Err(Nfsstat4::BAD_STATEID));
        assert!(t.is_empty());
    }

    #[test]
    fn cancel_forgets_a_running_copy_and_its_driver_stops() {
        let (mut t, mut e) = table(4, 4);
        let sid = t.start(1, S1, Bytes::new(), 0, &mut e).unwrap();
        assert_eq!(t.cancel(2, &sid), Err(Nfsstat4::BAD_STATEID));
        assert_eq!(t.cancel(1, &sid), Ok(()));
        assert!(!t.progress(&sid.other, 10), "the driver is told to stop");
        assert!(t.finish(&sid.other, end(10)).is_none(), "no CB_OFFLOAD");
        assert_eq!(t.cancel(1, &sid), Err(Nfsstat4::BAD_STATEID));
        let bad = Stateid4 { seqid: 2, ..sid };
        assert_eq!(t.status(1, &bad), Err(Nfsstat4::BAD_STATEID));
    }

    #[test]
    fn the_bounds_refuse_with_delay_and_free_up_as_copies_go() {
        let (mut t, mut e) = table(2, 3);
        let a = t.start(1, S1, Bytes::new(), 0, &mut e).unwrap();
        let b = t.start(1, S1, Bytes::new(), 0, &mut e).unwrap();
        assert_ne!(a.other, b.other);
        assert_eq!(
            t.start(1, S1, Bytes::new(), 0, &mut e),
            Err(Nfsstat4::DELAY)
        );
        let c = t.start(2, S1, Bytes::new(), 0, &mut e).unwrap();
        assert_eq!(
            t.start(3, S1, Bytes::new(), 0, &mut e),
            Err(Nfsstat4::DELAY)
        );
        // A finished copy freed with FREE_STATEID makes room.
        t.finish(&c.other, end(1));
        assert_eq!(t.free(2, &c), Nfsstat4::OK);
        assert!(t.start(3, S1, Bytes::new(), 0, &mut e).is_ok());
        // The client's expiry takes all its copies.
        t.remove_client(1);
        assert!(!t.knows(&a.other) && !t.knows(&b.other));
        assert_eq!(t.len(), 1);
        assert!(t.start(1, S1, Bytes::new(), 0, &mut e).is_ok());
        assert!(t.start(1, S1, Bytes::new(), 0, &mut e).is_ok());
        assert_eq!(
            t.start(1, S1, Bytes::new(), 0, &mut e),
            Err(Nfsstat4::DELAY)
        );
    }
}
