//! The COMPOUND processor (RFC 8881 §16.2, §2.10.6): one encoded COMPOUND in, one encoded
//! reply out, over the state cores ([`State4`]), the pseudo tree and the exports' file systems.
//! It does no socket I/O and reads no clock: who sent a call and when are arguments
//! ([`Call`]), and what must wait (a data op, held writes) is handed to its driver.
//!
//! # By role
//! ```text
//!   driver.rs     the one driver loop (drive), generic over its Executor: the service's
//!                 (blocking pool + data path), the simulator's and the tests' (Inline);
//!                 the guard that frees a slot when the driver goes away mid-COMPOUND
//!   eval.rs       one COMPOUND's evaluation (Eval: begin, step, resume, settled, abandon),
//!                 SEQUENCE and the session reply cache, the reply limits
//!   table.rs      the op table: each op's xdr facts (name, flags, reply bound) with its
//!                 handler, as knfsd's nfsd4_ops[]
//!   fh.rs         file handles and the pseudo tree; GETATTR, ACCESS, READDIR, SECINFO…
//!   open.rs       OPEN, CLOSE, OPEN_DOWNGRADE, DELEGRETURN
//!   io.rs         what a data op passes before the driver runs it; delegation breaks;
//!                 held writes met by SETATTR, OPEN and REMOVE
//!   namespace.rs  SETATTR, CREATE, RENAME, LINK, REMOVE, files parked while open
//!   locks.rs      LOCK, LOCKT, LOCKU
//!   v42.rs        NFSv4.2: SEEK, ALLOCATE, DEALLOCATE, COPY, CLONE, OFFLOAD_*
//!   xattr.rs      NFSv4.2 extended attributes (RFC 8276): GETXATTR, SETXATTR,
//!                 LISTXATTRS, REMOVEXATTR, the ACCESS xattr bits
//!   recovery.rs   stable client records, grace, the lease tick
//!   recall.rs     the v3 side of delegation recalls (crate::recall::RecallGate)
//! ```
//!
//! # What a small COMPOUND costs
//! Measured in-process by `tests/small_compound_cost.rs` (the inline executor over a LocalFs
//! on tmpfs, 300 files, CPU time of the thread, dev profile; µs per COMPOUND after SEQUENCE):
//!
//! ```text
//!                               backend calls  total    backend  decode encode  rest
//!   PUTFH OPEN GETFH GETATTR       3 ─► 1      158 ─► 85  136 ─► 76  1.6-2.6  0.9-1.3   7-18
//!   PUTFH SETATTR GETATTR          2 ─► 1       65 ─► 27   49 ─► 19  1.3-1.8  0.8-1.1   6-13
//!   PUTFH LOOKUP GETFH GETATTR     2 ─► 1       36 ─► 21   26 ─► 15  1.1-1.4  0.8-1.1   4-7
//!   PUTFH GETATTR                  1            10-12       5-6      0.9-1.0  0.8-0.9   3-4
//!   PUTFH CLOSE                    0             4-9          0      0.9-1.2  0.8-1.0   3-6.5
//!   PUTFH REMOVE                   2            40-55      34-46     0.9-1.3  0.7-1.1   4-7
//! ```
//! (Before ─► after the change below, two runs of the test on a machine busy with other work,
//! so the CPU times vary by up to 2x between runs; the call counts are exact and asserted.)
//! The backend's system calls are 75-85% of a metadata COMPOUND; decoding and encoding are
//! 1-2 µs each; the rest (SEQUENCE and the slot's reply cache, the state lock, dispatch,
//! attribute mapping) 3-18 µs, most in OPEN's state work. Each backend call resolves its
//! handle again (MAC check, `open_by_handle_at` or a cache, `statx`, confinement), and the
//! GETATTR after SETATTR cost more than a plain GETATTR (~20 µs against 5-6). So the COMPOUND
//! carries the attributes an op had from the
//! backend to the GETATTR after it ([`Ctx::fresh`]) and OPEN takes the created file's
//! attributes from the create itself: one backend call per handle for the COMPOUNDs an untar
//! and `ls -l` send. (REMOVE's second call is its lookup of the victim, for delegations and
//! files parked while open, `namespace.rs`.)
//!
//! The service (`service::nfs4_call`) drives every COMPOUND with [`drive`] and its own
//! executor; the simulator's v4 worlds and the tests drive the same loop with [`Inline`]
//! through [`drive_ready`]. Statistics see each op through [`OpObserver`], which this module
//! defines and the server's statistics implement, so the processor depends on nothing of
//! theirs.

use super::idmap::IdMap;
use super::map;
use crate::backend::exports::Xprtsec;
use crate::backend::{Attr, FileHandle, Wcc};
use crate::exports::ExportEntry;
use crate::io::writebehind::WriteBehindDriver;
use bytes::Bytes;
use sluice_nfs4state::pseudo::{NodeId, PseudoFs};
use sluice_nfs4state::recovery::parked::ParkedFiles;
use sluice_nfs4state::State4;
use sluice_nfs4state::{ConnId, Principal};
use sluice_rpc::server::Credentials;
use sluice_xdr::nfs4::compound::CompoundLimits;
use sluice_xdr::nfs4::ops::{Opnum4, Res4};
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::{ChangeInfo4, NfsFh4, SessionId4, Stateid4};
// `core::net`: an address is plain data here; this module opens no sockets.
use core::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Sees every op's outcome (per-op statistics): `op_start` just before an op runs,
/// `op_done` with the status its result carries. The processor reads no clock itself; the
/// observer does, so this module stays sans-IO. The server's statistics (`stats::Stats`)
/// implement it; the processor knows nothing of them.
pub trait OpObserver: Send + Sync {
    /// An op is about to run; the value comes back in [`OpObserver::op_done`].
    fn op_start(&self) -> Instant;
    /// The op finished with `status` (the COMPOUND stops after a non-OK one).
    fn op_done(&self, op: Opnum4, status: Nfsstat4, started: Instant);
}

/// AUTH_NONE and AUTH_SYS flavor numbers (RFC 5531 §8.2), in SECINFO's order of preference.
const FLAVORS: [u32; 2] = [1, 0];

/// The NFSv4.1 service state: exports, the pseudo tree built from their paths, and the state
/// cores behind one lock.
pub struct Nfs4 {
    pub exports: Arc<Vec<ExportEntry>>,
    pub pseudo: PseudoFs,
    pub state: Mutex<State4>,
    pub limits: CompoundLimits,
    /// The data path's write-behind, shared with v3 (see [`Nfs4::settle`]); `None` when the
    /// server runs none (tests).
    pub write_behind: Option<Arc<WriteBehindDriver>>,
    /// Told each op's outcome (per-op statistics); `None`: nobody counts.
    pub op_observer: Option<Arc<dyn OpObserver>>,
    /// Files removed while open, kept under a hidden name until their last CLOSE.
    pub parked: ParkedFiles,
    /// Owners as numbers (the default) or `name@domain` ([`super::idmap`]).
    pub idmap: IdMap,
    /// Longest wait for held writes to land before an op that truncates their file
    /// (default [`super::data::SETTLE_WAIT_MAX`]); past it the op answers NFS4ERR_DELAY.
    pub settle_wait_max: Duration,
    /// The stable client records (`compound/recovery.rs`); `None`: no restart recovery.
    pub records: Option<Arc<dyn sluice_nfs4state::recovery::records::ClientRecords>>,
    /// Hands asynchronous COPYs to their driver (`crate::nfs4::offload::driver`), once it runs;
    /// until then (and in tests without it) every COPY is synchronous.
    pub copy_spawner: std::sync::OnceLock<Box<dyn super::offload::CopySpawner>>,
    /// CB_OFFLOADs queued for finished asynchronous copies (for the statistics).
    pub copy_offloads_sent: std::sync::atomic::AtomicU64,
    /// The delegation table's record count, read without the lock by the NFSv3 recall gate
    /// ([`crate::recall`]).
    delegs_published: Arc<std::sync::atomic::AtomicUsize>,
    /// READ_PLUS is answered (RFC 7862 §15.10, `super::data::read_plus`); false (`sluice serve
    /// --no-read-plus`): NFS4ERR_NOTSUPP, and the client reads with READ. Default true.
    pub read_plus: bool,
}

/// Who sent a COMPOUND, and when it runs: what a step needs besides the [`Eval`].
#[derive(Clone)]
pub struct Call<'a> {
    pub addr: SocketAddr,
    pub conn: ConnId,
    /// The connection's transport security (what an export's `xprtsec=` admits).
    pub xprtsec: Xprtsec,
    pub cred: &'a Credentials,
    pub now: Instant,
}

/// A file handle of the current or saved slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fh {
    Pseudo(NodeId),
    Export { idx: usize, fh: FileHandle },
}

/// One COMPOUND's evaluation state.
#[derive(Debug, Clone, Default)]
pub struct Ctx {
    pub current: Option<Fh>,
    pub saved: Option<Fh>,
    /// The current stateid (§16.2.3.1.2), for the "current stateid" special value, and the
    /// saved one (SAVEFH keeps it beside the saved handle, RESTOREFH brings it back).
    pub stateid: Option<Stateid4>,
    pub saved_stateid: Option<Stateid4>,
    /// The session and slot of this COMPOUND's SEQUENCE, and the client it acts for.
    pub session: Option<(SessionId4, u32)>,
    pub clientid: Option<u64>,
    /// The COMPOUND's minor version (1 or 2): which attributes exist.
    pub minor: u32,
    /// The op now running is the COMPOUND's last (DESTROY_SESSION of the COMPOUND's own
    /// session must be, §18.37.3).
    pub last_op: bool,
    /// The current handle's attributes as an op of this COMPOUND just had them from the
    /// backend (LOOKUP, OPEN, SETATTR), for the GETATTR clients send right after it: one
    /// backend call (one handle resolution) instead of two. The evaluation loop clears it
    /// before every op but GETATTR and GETFH, so nothing that could change the object runs
    /// between the fetch and its use; GETATTR answers as if it ran at the fetch, which a
    /// COMPOUND (not atomic) allows.
    pub fresh: Option<FreshAttr>,
}

/// See [`Ctx::fresh`].
#[derive(Debug, Clone)]
pub struct FreshAttr {
    /// The handle the attributes are of (used only while it is still the current one).
    pub fh: FileHandle,
    pub attr: Attr,
    /// Write-behind's epoch taken before the backend call that returned `attr`, for the
    /// size fix of held writes (`WriteBehindDriver::fix_size`), as GETATTR's own fetch takes it.
    pub since: Option<u64>,
}

impl Ctx {
    /// Makes `fh` the current handle, for an op that sets no stateid (PUTFH, PUTROOTFH,
    /// PUTPUBFH, LOOKUP, LOOKUPP, CREATE): the current stateid goes with the handle it was
    /// about (§16.2.3.1.2), so a later "current stateid" answers NFS4ERR_BAD_STATEID instead of
    /// naming another file's state (knfsd's `OP_CLEAR_STATEID`).
    pub fn set_current(&mut self, fh: Fh) {
        self.current = Some(fh);
        self.stateid = None;
    }

    /// Resolves the special "current stateid" (§16.2.3.1.2) to the one last set.
    pub fn resolve_stateid(&self, s: &Stateid4) -> Result<Stateid4, Nfsstat4> {
        if *s == Stateid4::CURRENT {
            return self.stateid.ok_or(Nfsstat4::BAD_STATEID);
        }
        Ok(*s)
    }
}

/// The principal the client-record rules compare (RFC 8881 §2.4): for AUTH_SYS the uid, gid
/// and machine name; AUTH_NONE is one anonymous principal.
pub fn principal(cred: &Credentials) -> Principal {
    match cred {
        Credentials::None => Principal(Bytes::from_static(b"none")),
        Credentials::Sys(a) => {
            let mut b = Vec::with_capacity(12 + a.machine_name.len());
            b.extend_from_slice(b"sys:");
            b.extend_from_slice(&a.uid.to_be_bytes());
            b.extend_from_slice(&a.gid.to_be_bytes());
            b.extend_from_slice(&a.machine_name);
            Principal(Bytes::from(b))
        }
    }
}

fn nfs_fh4(fh: &FileHandle) -> NfsFh4 {
    NfsFh4(fh.to_bytes())
}

impl Nfs4 {
    /// A service over `exports`, its pseudo tree built from their paths (`generation` tells
    /// this tree's handles from an earlier one's).
    pub fn new(
        exports: Arc<Vec<ExportEntry>>,
        state: State4,
        generation: u32,
    ) -> Result<Self, sluice_nfs4state::pseudo::PseudoError> {
        let paths: Vec<String> = exports
            .iter()
            .map(|e| e.export.path.to_string_lossy().into_owned())
            .collect();
        Ok(Self {
            pseudo: PseudoFs::new(&paths, generation)?,
            exports,
            delegs_published: state.delegations().published(),
            state: Mutex::new(state),
            limits: CompoundLimits::default(),
            write_behind: None,
            op_observer: None,
            parked: ParkedFiles::default(),
            idmap: IdMap::numeric(),
            settle_wait_max: super::data::SETTLE_WAIT_MAX,
            records: None,
            copy_spawner: std::sync::OnceLock::new(),
            copy_offloads_sent: std::sync::atomic::AtomicU64::new(0),
            read_plus: true,
        })
    }

    /// The driver saw connection `conn` close: sessions unbind it (see [`State4::conn_closed`]).
    pub fn conn_closed(&self, conn: ConnId) {
        self.state().conn_closed(conn);
    }
}

/// A component naming an entry that must exist (LOOKUP, REMOVE, RENAME's old name, OPEN
/// without create, SECINFO): not empty (INVAL), at most NAME_MAX (NAMETOOLONG), not "." or
/// ".." and without '/' or NUL (BADNAME), as knfsd's `check_filename` (RFC 8881 §15.1.7).
/// Not checked as UTF-8: a file whose name some local program wrote in another encoding must
/// stay reachable (§15.1.7 lets a server accommodate such names; knfsd never checks).
fn check_name(name: &[u8]) -> Result<(), Nfsstat4> {
    if name.is_empty() {
        return Err(Nfsstat4::INVAL);
    }
    if name.len() > map::NAME_BYTES_MAX as usize {
        return Err(Nfsstat4::NAMETOOLONG);
    }
    if name == b"." || name == b".." || name.iter().any(|&b| b == b'/' || b == 0) {
        return Err(Nfsstat4::BADNAME);
    }
    Ok(())
}

/// A component naming an entry about to be made (CREATE, OPEN with create, RENAME's new name,
/// LINK): [`check_name`]'s rules, and valid UTF-8 (NFS4ERR_INVAL otherwise, RFC 8881
/// §15.1.7: names are UTF-8 strings), so that no new name this server makes is one a client
/// cannot show.
fn check_new_name(name: &[u8]) -> Result<(), Nfsstat4> {
    check_name(name)?;
    std::str::from_utf8(name).map_err(|_| Nfsstat4::INVAL)?;
    Ok(())
}

fn res<T>(r: Result<T, Nfsstat4>) -> Res4<T> {
    match r {
        Ok(v) => Res4::Ok(v),
        Err(s) => Res4::Err(s),
    }
}

/// A directory's `change_info4` from its wcc data; without the before value, not atomic
/// and before = after (the client then revalidates the directory).
fn change_info(w: &Wcc) -> ChangeInfo4 {
    match w.change_info() {
        Some(c) => ChangeInfo4 {
            atomic: c.atomic,
            before: c.before,
            after: c.after,
        },
        None => {
            let after = w.after.map_or(0, |d| d.change);
            ChangeInfo4 {
                atomic: false,
                before: after,
                after,
            }
        }
    }
}

fn status_of(r: Result<(), Nfsstat4>) -> Nfsstat4 {
    match r {
        Ok(()) => Nfsstat4::OK,
        Err(s) => s,
    }
}

pub mod driver;
mod eval;
mod fh;
mod io;
mod locks;
mod namespace;
mod open;
mod recall;
mod recovery;
mod table;
#[cfg(test)]
mod tests;
mod v42;
mod xattr;

pub use driver::{drive, drive_ready, Driven, Executor, Inline, Outcome, Sender};
use eval::join;
pub use eval::{Eval, Reply4, Step};
pub use locks::StateGuard;
pub use recovery::TickReport;
