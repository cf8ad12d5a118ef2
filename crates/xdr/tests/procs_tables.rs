//! The MOUNT, PORTMAP and NFSv4 procedure tables: each row at its procedure number, its name
//! the one the protocol gives it. Here rather than in `procs.rs`'s unit tests because it reads
//! every protocol module, each of which builds its table from `procs`: from inside, the test
//! would make `procs` and those modules import each other.

use sluice_xdr::procs::{ProcInfo, TimerClass};
use sluice_xdr::{mount3, nfs4, portmap};

#[test]
fn the_other_tables_sit_at_their_procedure_numbers() {
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
