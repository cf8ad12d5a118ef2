//! Which calls the service makes on its own task, and which it hands to the blocking pool.
//!
//! Backend calls block (they are system calls that may wait on a disk, or on another machine),
//! so the service runs them on tokio's blocking pool: the async thread queues the work, a
//! pool thread wakes, makes the call, and wakes the async thread again to encode and send the
//! reply. For a metadata call that the kernel answers from its caches, those two wake-ups cost
//! more than the call itself. Measured with `sluice mount` over NFSv4.2 on this project's
//! 2-core machine, stat of 3000 files (one LOOKUP COMPOUND each): `futex` and `epoll_wait`
//! with their context switches were a quarter of the server's CPU, the file-system calls
//! (`open_by_handle_at`, `statx`, `openat`, `name_to_handle_at`) under a tenth.
//!
//! So a call runs inline, on the task that decoded it, when what it asks of the backend is
//! known to be quick:
//!
//! ```text
//!   work of each op / procedure        backend's MetadataSpeed
//!                                      Memory     KernelCache           Remote
//!   Memory (PUTFH, GETFH, SEQUENCE)    inline     inline                inline
//!   Look   (GETATTR, LOOKUP, ACCESS)   inline     inline, up to         pool
//!                                                 INLINE_LOOKS_MAX
//!   Heavy  (CREATE, REMOVE, SETATTR,   inline     pool                  pool
//!           OPEN, READDIR, …)
//! ```
//!
//! A `Look` reads one object's attributes or one name: on the local-directory backend a few
//! system calls on the dentry and inode caches, which wait on a disk only for an inode not
//! in memory (knfsd's threads wait then too). `Heavy` work changes the file system (a journal
//! may make it wait) or reads an amount that grows with the directory (READDIR), and stays on
//! the pool. The bound on looks per inline step bounds how long one COMPOUND keeps the async
//! thread (shared by every connection) from its sockets. A backend that does not state its
//! speed is `Remote` (`FileSystem::metadata_speed`'s default), so a backend that may wait on a
//! network, or a test's wrapper that sleeps, is never called inline.
//!
//! The rule is [`inline`], a pure function of the backend's speed and the work of the ops one
//! step runs; the COMPOUND driver asks it with the ops up to the next data op
//! (`nfs4::compound::drive`) and the slowest export's speed, the v3 service with the
//! procedure's work ([`v3_work`]) and its export's speed.

use crate::backend::MetadataSpeed;
use sluice_xdr::nfs3::proc_ as p3;
use sluice_xdr::nfs4::ops::Opnum4;

/// What a call (a v3 procedure, or one op of a COMPOUND) asks of its backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// The server's memory only: no backend call.
    Memory,
    /// One object's attributes or one name read: GETATTR, LOOKUP, ACCESS, READLINK.
    Look,
    /// Anything else: a change to the file system, or work that grows with the call.
    Heavy,
}

/// Backend looks one inline step makes at most. The Linux client's LOOKUP COMPOUND has one
/// LOOKUP and one GETATTR, an OPEN of an existing file's lookups are fewer; 4 keeps a
/// pathological COMPOUND of hundreds of LOOKUPs on the pool (at a few µs per look, 4 keep the
/// async thread for tens of µs).
pub const INLINE_LOOKS_MAX: usize = 4;

/// Whether a step whose ops (or procedure) do `work` on a backend of `speed` runs inline.
pub fn inline(speed: MetadataSpeed, work: impl IntoIterator<Item = Work>) -> bool {
    let mut looks = 0usize;
    for w in work {
        match (w, speed) {
            (Work::Memory, _) | (_, MetadataSpeed::Memory) => {}
            (Work::Look, MetadataSpeed::KernelCache) => {
                looks += 1;
                if looks > INLINE_LOOKS_MAX {
                    return false;
                }
            }
            (Work::Look | Work::Heavy, _) => return false,
        }
    }
    true
}

/// The work of NFSv3 procedure `proc_` (NULL has no backend call; READ, WRITE and COMMIT go
/// through the data path and are never asked about, so they are `Heavy` here).
pub fn v3_work(proc_: u32) -> Work {
    match proc_ {
        p3::NULL => Work::Memory,
        p3::GETATTR
        | p3::LOOKUP
        | p3::ACCESS
        | p3::READLINK
        | p3::FSSTAT
        | p3::FSINFO
        | p3::PATHCONF => Work::Look,
        _ => Work::Heavy,
    }
}

/// The work of NFSv4 op `op`. The ops that only set or read the current handle and the
/// session's slot are `Memory`; GETATTR, LOOKUP and their like `Look`; everything else
/// (OPEN and CLOSE included: they change state that a file's open descriptors follow)
/// `Heavy`.
pub fn v4_work(op: Opnum4) -> Work {
    match op {
        Opnum4::PUTFH
        | Opnum4::PUTROOTFH
        | Opnum4::PUTPUBFH
        | Opnum4::GETFH
        | Opnum4::SAVEFH
        | Opnum4::RESTOREFH
        | Opnum4::SEQUENCE => Work::Memory,
        Opnum4::ACCESS
        | Opnum4::GETATTR
        | Opnum4::LOOKUP
        | Opnum4::LOOKUPP
        | Opnum4::READLINK
        | Opnum4::VERIFY
        | Opnum4::NVERIFY
        | Opnum4::SECINFO
        | Opnum4::SECINFO_NO_NAME => Work::Look,
        _ => Work::Heavy,
    }
}

/// The slowest of some backends' speeds (`Memory` for none: the pseudo tree is memory).
pub fn slowest(speeds: impl IntoIterator<Item = MetadataSpeed>) -> MetadataSpeed {
    speeds.into_iter().max().unwrap_or(MetadataSpeed::Memory)
}

#[cfg(test)]
mod tests {
    use super::*;
    use MetadataSpeed::{KernelCache, Memory, Remote};

    fn v4(ops: &[Opnum4]) -> Vec<Work> {
        ops.iter().map(|op| v4_work(*op)).collect()
    }

    #[test]
    fn a_lookup_compound_on_a_local_directory_runs_inline() {
        let ops = v4(&[
            Opnum4::SEQUENCE,
            Opnum4::PUTFH,
            Opnum4::LOOKUP,
            Opnum4::GETFH,
            Opnum4::GETATTR,
        ]);
        assert!(inline(KernelCache, ops.clone()));
        assert!(inline(Memory, ops.clone()));
        assert!(!inline(Remote, ops), "a network backend's lookup may wait");
    }

    #[test]
    fn changes_stay_on_the_pool_unless_the_backend_is_memory() {
        for op in [
            Opnum4::OPEN,
            Opnum4::CLOSE,
            Opnum4::CREATE,
            Opnum4::REMOVE,
            Opnum4::RENAME,
            Opnum4::SETATTR,
            Opnum4::READDIR,
            Opnum4::LINK,
        ] {
            let ops = v4(&[Opnum4::SEQUENCE, Opnum4::PUTFH, op, Opnum4::GETATTR]);
            assert!(!inline(KernelCache, ops.clone()), "{op:?}");
            assert!(!inline(Remote, ops.clone()), "{op:?}");
            assert!(inline(Memory, ops), "{op:?}");
        }
    }

    #[test]
    fn memory_only_steps_run_inline_on_any_backend() {
        let ops = v4(&[
            Opnum4::SEQUENCE,
            Opnum4::PUTFH,
            Opnum4::GETFH,
            Opnum4::SAVEFH,
        ]);
        for speed in [Memory, KernelCache, Remote] {
            assert!(inline(speed, ops.clone()), "{speed:?}");
        }
        assert!(inline(Remote, []), "nothing to do");
    }

    #[test]
    fn looks_are_bounded_per_inline_step() {
        let within = vec![Work::Look; INLINE_LOOKS_MAX];
        assert!(inline(KernelCache, within));
        let past = vec![Work::Look; INLINE_LOOKS_MAX + 1];
        assert!(!inline(KernelCache, past.clone()));
        assert!(inline(Memory, past), "memory backends have no bound");
    }

    #[test]
    fn v3_reads_of_one_object_are_looks_and_changes_are_heavy() {
        for p in [
            p3::GETATTR,
            p3::LOOKUP,
            p3::ACCESS,
            p3::READLINK,
            p3::FSINFO,
        ] {
            assert_eq!(v3_work(p), Work::Look, "{p}");
            assert!(inline(KernelCache, [v3_work(p)]));
            assert!(!inline(Remote, [v3_work(p)]));
        }
        for p in [
            p3::SETATTR,
            p3::CREATE,
            p3::MKDIR,
            p3::REMOVE,
            p3::RENAME,
            p3::READDIR,
            p3::READDIRPLUS,
            p3::READ,
            p3::WRITE,
            p3::COMMIT,
        ] {
            assert_eq!(v3_work(p), Work::Heavy, "{p}");
            assert!(!inline(KernelCache, [v3_work(p)]));
        }
        assert_eq!(v3_work(p3::NULL), Work::Memory);
    }

    #[test]
    fn the_slowest_export_decides() {
        assert_eq!(slowest([]), Memory);
        assert_eq!(slowest([Memory, KernelCache]), KernelCache);
        assert_eq!(slowest([KernelCache, Remote, Memory]), Remote);
    }
}
