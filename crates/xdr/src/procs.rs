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
}
