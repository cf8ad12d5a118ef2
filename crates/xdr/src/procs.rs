//! Procedure facts: one table per program version, indexed by procedure number.
//!
//! Everything a server, a duplicate request cache, a statistics page or a client needs to know
//! about a procedure *besides its argument and result types* lives in one [`ProcInfo`] row:
//!
//! ```text
//!   nfs3::PROCS[proc_::WRITE] = ProcInfo { num: 7, name: "WRITE", non_idempotent: true,
//!                                          reply: Fixed(136), timer: TimerClass::Write }
//!      │                                     │                  │               │
//!      ├─ server registry (PROC_UNAVAIL past the table's end)   │               │
//!      ├─ stats, request logs ◄──── name    │                  │               │
//!      ├─ duplicate request cache ◄──────────┘                  │               │
//!      ├─ server debug check of every reply's length ◄──────────┘               │
//!      └─ client RTT estimator (one state per class) ◄──────────────────────────┘
//! ```
//!
//! Tables: [`crate::nfs3::PROCS`], [`crate::mount3::PROCS`], [`crate::portmap::PROCS`] and
//! [`crate::nfs4::PROCS`] (NFSv4's COMPOUND carries ops, whose own facts are
//! `nfs4::ops::OP_INFO`). Each protocol's `proc_::NAMES` is derived from its table by
//! [`names`], so there is one source for a name.
//!
//! This is knfsd's shape (`struct svc_procedure`: `pc_name`, `pc_func`, `pc_cachetype`,
//! `pc_xdrressize`), less the handler: the handlers belong to the server, which pairs each row
//! with one in its program registry. The facts are pure data so that the client, which has no
//! handlers, reads the same rows.
//!
//! # Reply-size bounds
//! A bound is on the *results* (what follows the RPC accepted-reply header), in bytes, and is the
//! largest of the success and failure encodings. Sizes used (RFC 1813 §2.6, §3.3): `fattr3` 84,
//! `post_op_attr` 88, `pre_op_attr` 28, `wcc_data` 116, `nfs_fh3` 68 (a 64-byte handle and its
//! length), `post_op_fh3` 72, a status 4. Three kinds:
//! - [`ReplyBound::Fixed`]: every field has a bounded size (READLINK counts a `PATH_MAX` target).
//! - [`ReplyBound::PlusPayload`]: a fixed part plus what the call asks for (READ's `count`,
//!   READDIR's `count`, READDIRPLUS's `maxcount`), which the server clamps to its own limit.
//! - [`ReplyBound::Record`]: a list that grows with server state (the mount list, the export
//!   list, the port map, a COMPOUND's results): only the record limit bounds it.

/// Which RTT estimate a call uses: the client keeps one estimator state per class (see
/// `sluice_rpc::rtt`, which re-exports this type). Here, beside the procedure tables that choose
/// it, so the tables need nothing from the RPC crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimerClass {
    /// READ (and READLINK): payload-sized replies, disk latency on cache misses.
    Read,
    /// WRITE and COMMIT: payload-sized calls, may wait for stable storage.
    Write,
    /// GETATTR, ACCESS, FSSTAT...: small, usually served from memory.
    Getattr,
    /// LOOKUP and READDIR(PLUS): metadata that may need the disk.
    Lookup,
    /// Everything else (namespace changes, NULL, MOUNT).
    Other,
}

impl TimerClass {
    pub const ALL: [TimerClass; 5] = [
        TimerClass::Read,
        TimerClass::Write,
        TimerClass::Getattr,
        TimerClass::Lookup,
        TimerClass::Other,
    ];

    /// The class's position in [`TimerClass::ALL`], for per-class arrays.
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// The largest results a procedure's reply carries (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyBound {
    /// At most this many bytes.
    Fixed(u32),
    /// At most this many bytes plus the payload the call asks for (after the server's clamp).
    PlusPayload(u32),
    /// Grows with server state; only the record limit bounds it.
    Record,
}

impl ReplyBound {
    /// The bound in bytes, given the largest payload the server returns for one call and the
    /// largest record.
    pub const fn bytes_max(self, payload_bytes_max: u64, record_bytes_max: u64) -> u64 {
        match self {
            ReplyBound::Fixed(n) => n as u64,
            ReplyBound::PlusPayload(n) => n as u64 + payload_bytes_max,
            ReplyBound::Record => record_bytes_max,
        }
    }
}

/// The facts of one procedure of one program version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcInfo {
    /// The procedure number; equals the row's index in its table.
    pub num: u32,
    /// The RFC's name, for statistics and logs.
    pub name: &'static str,
    /// A second execution would differ from the first (REMOVE of a removed name fails): the
    /// server answers a retransmission from its duplicate request cache instead.
    pub non_idempotent: bool,
    /// The largest results.
    pub reply: ReplyBound,
    /// The client's RTT class.
    pub timer: TimerClass,
}

/// Shorthand for the tables.
pub(crate) const fn row(
    num: u32,
    name: &'static str,
    non_idempotent: bool,
    reply: ReplyBound,
    timer: TimerClass,
) -> ProcInfo {
    ProcInfo {
        num,
        name,
        non_idempotent,
        reply,
        timer,
    }
}

/// The names of a table, in procedure-number order (each protocol's `proc_::NAMES`).
pub const fn names<const N: usize>(table: &[ProcInfo; N]) -> [&'static str; N] {
    let mut out = [""; N];
    let mut i = 0;
    while i < N {
        out[i] = table[i].name;
        i += 1;
    }
    out
}

/// The row of procedure `proc_` in `table`, or `None` past its end (PROC_UNAVAIL).
pub fn lookup(table: &'static [ProcInfo], proc_: u32) -> Option<&'static ProcInfo> {
    table.get(proc_ as usize)
}

/// Wire sizes the NFSv3 and MOUNT bounds are built from (RFC 1813 §2.6, §3.3), in bytes.
pub(crate) mod sizes {
    /// `nfsstat3` (or any enum status).
    pub const STATUS: u32 = 4;
    /// `fattr3`: type, mode, nlink, uid, gid (5 × 4); size, used, rdev, fsid, fileid (5 × 8);
    /// atime, mtime, ctime (3 × 8).
    pub const FATTR3: u32 = 5 * 4 + 5 * 8 + 3 * 8;
    /// `post_op_attr`: a discriminant and perhaps the attributes.
    pub const POST_OP_ATTR: u32 = 4 + FATTR3;
    /// `pre_op_attr`: a discriminant and perhaps size, mtime, ctime.
    pub const PRE_OP_ATTR: u32 = 4 + 8 + 8 + 8;
    pub const WCC_DATA: u32 = PRE_OP_ATTR + POST_OP_ATTR;
    /// `nfs_fh3`: its length and at most 64 bytes.
    pub const FH3: u32 = 4 + crate::nfs3::FHSIZE as u32;
    pub const POST_OP_FH3: u32 = 4 + FH3;
    /// A verifier (`writeverf3`, `cookieverf3`).
    pub const VERF: u32 = crate::nfs3::VERIFIER_SIZE as u32;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_table() {
        const T: [ProcInfo; 2] = [
            row(0, "NULL", false, ReplyBound::Fixed(0), TimerClass::Other),
            row(1, "X", true, ReplyBound::Record, TimerClass::Read),
        ];
        assert_eq!(names(&T), ["NULL", "X"]);
        assert_eq!(lookup(&T, 1).unwrap().name, "X");
        assert!(lookup(&T, 2).is_none());
    }

    #[test]
    fn bounds_add_the_payload_only_where_it_grows() {
        assert_eq!(ReplyBound::Fixed(88).bytes_max(1 << 20, 4 << 20), 88);
        assert_eq!(
            ReplyBound::PlusPayload(107).bytes_max(1 << 20, 4 << 20),
            107 + (1 << 20)
        );
        assert_eq!(ReplyBound::Record.bytes_max(1 << 20, 4 << 20), 4 << 20);
    }

    #[test]
    fn timer_class_indexes_are_their_positions() {
        for (i, c) in TimerClass::ALL.iter().enumerate() {
            assert_eq!(c.index(), i);
        }
    }

    #[test]
    fn the_v3_attribute_sizes_are_the_rfc_ones() {
        // RFC 1813 §2.6: fattr3 is 84 bytes on the wire, wcc_data 116 with both halves present.
        assert_eq!(sizes::FATTR3, 84);
        assert_eq!(sizes::WCC_DATA, 116);
        assert_eq!(sizes::POST_OP_FH3, 72);
    }
    #[test]
    fn the_other_tables_sit_at_their_procedure_numbers() {
        use crate::{mount3, nfs4, portmap};
        /// A table and its (procedure number constant, name) pairs.
        type Named = (&'static [ProcInfo], &'static [(u32, &'static str)]);
        let tables: [Named; 3] = [
            (
                &mount3::PROCS,
                &[
                    (mount3::proc_::NULL, "NULL"),
                    (mount3::proc_::MNT, "MNT"),
                    (mount3::proc_::DUMP, "DUMP"),
                    (mount3::proc_::UMNT, "UMNT"),
                    (mount3::proc_::UMNTALL, "UMNTALL"),
                    (mount3::proc_::EXPORT, "EXPORT"),
                ],
            ),
            (
                &portmap::PROCS,
                &[
                    (portmap::proc_::NULL, "NULL"),
                    (portmap::proc_::SET, "SET"),
                    (portmap::proc_::UNSET, "UNSET"),
                    (portmap::proc_::GETPORT, "GETPORT"),
                    (portmap::proc_::DUMP, "DUMP"),
                    (portmap::proc_::CALLIT, "CALLIT"),
                ],
            ),
            (
                &nfs4::PROCS,
                &[
                    (nfs4::proc_::NULL, "NULL"),
                    (nfs4::proc_::COMPOUND, "COMPOUND"),
                ],
            ),
        ];
        for (table, named) in tables {
            assert_eq!(table.len(), named.len());
            for (i, row) in table.iter().enumerate() {
                assert_eq!(row.num as usize, i);
            }
            for &(num, name) in named {
                assert_eq!(table[num as usize].name, name);
            }
            // Only NFSv3 has an RPC-level duplicate request cache; every other call is Other to
            // the client's RTT estimator (it used TimerClass::Other for MOUNT and PORTMAP).
            assert!(table.iter().all(|r| !r.non_idempotent));
            assert!(table.iter().all(|r| r.timer == TimerClass::Other));
        }
        assert_eq!(
            mount3::proc_::NAMES,
            ["NULL", "MNT", "DUMP", "UMNT", "UMNTALL", "EXPORT"]
        );
        assert_eq!(portmap::proc_::NAMES[5], "CALLIT");
    }
}
