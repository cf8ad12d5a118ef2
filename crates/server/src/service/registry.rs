//! The program registry: which (program, version, procedure) a call reaches, as data.
//!
//! ```text
//!   Registry
//!    ├─ Program 100000 PORTMAP ── v2 ── [Procedure { info: &portmap::PROCS[i], handler }; 6]
//!    ├─ Program 100003 NFS ────── v3 ── [Procedure { info: &nfs3::PROCS[i],    handler }; 22]
//!    │                           v4 ── [NULL, COMPOUND]
//!    └─ Program 100005 MOUNT ──── v3 ── [Procedure { info: &mount3::PROCS[i],  handler }; 6]
//!
//!   route(prog, vers, proc) ─► Found(procedure)        the call runs
//!                           ├► ProgUnavail             no such program
//!                           ├► ProgMismatch{low,high}  the program, not this version: the
//!                           │                          lowest and highest registered versions
//!                           └► ProcUnavail             past the end of the version's table
//! ```
//!
//! Each procedure pairs its facts (a row of a `sluice_xdr` procedure table: name, duplicate
//! request class, reply-size bound, client timer class) with its handler, so the dispatcher, the
//! duplicate request cache, the statistics and the request logs all read the row the call reached.
//! The handler type is a parameter: the server's is a function pointer taking the call, tests use
//! plain values. Pure: no I/O, nothing async; built once at start, read by every call.

use sluice_xdr::procs::ProcInfo;

/// One procedure: its facts and what answers it.
#[derive(Debug, Clone, Copy)]
pub struct Procedure<H> {
    pub info: &'static ProcInfo,
    pub handler: H,
}

/// One version of a program: its procedures, indexed by procedure number.
#[derive(Debug, Clone)]
pub struct Version<H> {
    pub vers: u32,
    pub procs: Vec<Procedure<H>>,
}

impl<H> Version<H> {
    /// The procedures of `facts`, each answered by its own handler: `handlers[i]` answers
    /// procedure `i`. A table and handler list of different lengths is a mistake in the server's
    /// start-up code: it panics.
    pub fn new(
        vers: u32,
        facts: &'static [ProcInfo],
        handlers: impl IntoIterator<Item = H>,
    ) -> Self {
        let handlers: Vec<H> = handlers.into_iter().collect();
        assert_eq!(
            handlers.len(),
            facts.len(),
            "v{vers}: one handler per procedure of the table"
        );
        let procs = facts
            .iter()
            .zip(handlers)
            .map(|(info, handler)| Procedure { info, handler })
            .collect();
        Version { vers, procs }
    }
}

/// One program: a name for logs and its versions, sorted by number.
#[derive(Debug, Clone)]
pub struct Program<H> {
    pub prog: u32,
    pub name: &'static str,
    versions: Vec<Version<H>>,
}

impl<H> Program<H> {
    /// The lowest and highest registered versions (a PROG_MISMATCH reply's range).
    pub fn version_range(&self) -> (u32, u32) {
        let low = self.versions.first().map_or(0, |v| v.vers);
        let high = self.versions.last().map_or(0, |v| v.vers);
        (low, high)
    }

    pub fn versions(&self) -> &[Version<H>] {
        &self.versions
    }
}

/// Where a call goes.
#[derive(Debug)]
pub enum Route<'r, H> {
    Found {
        program: &'r Program<H>,
        procedure: &'r Procedure<H>,
    },
    ProgUnavail,
    ProgMismatch {
        low: u32,
        high: u32,
    },
    ProcUnavail,
}

/// Every served (program, version) and its procedure table.
#[derive(Debug, Clone)]
pub struct Registry<H> {
    programs: Vec<Program<H>>,
}

impl<H> Default for Registry<H> {
    fn default() -> Self {
        Registry {
            programs: Vec::new(),
        }
    }
}

impl<H> Registry<H> {
    /// Adds `version` of program `prog` (named `name` in logs). Registering a (program, version)
    /// twice is a mistake in the server's start-up code, not a run-time condition: it panics.
    pub fn register(&mut self, prog: u32, name: &'static str, version: Version<H>) -> &mut Self {
        for (i, p) in version.procs.iter().enumerate() {
            assert_eq!(
                p.info.num as usize, i,
                "{name} v{}: the procedure table must be indexed by procedure number",
                version.vers
            );
        }
        let program = match self.programs.iter_mut().position(|p| p.prog == prog) {
            Some(i) => &mut self.programs[i],
            None => {
                self.programs.push(Program {
                    prog,
                    name,
                    versions: Vec::new(),
                });
                self.programs.last_mut().expect("just pushed")
            }
        };
        assert!(
            program.versions.iter().all(|v| v.vers != version.vers),
            "{name} v{} registered twice",
            version.vers
        );
        program.versions.push(version);
        program.versions.sort_by_key(|v| v.vers);
        self
    }

    /// Where a call for (`prog`, `vers`, `proc_`) goes.
    pub fn route(&self, prog: u32, vers: u32, proc_: u32) -> Route<'_, H> {
        let Some(program) = self.program(prog) else {
            return Route::ProgUnavail;
        };
        let Some(version) = program.versions.iter().find(|v| v.vers == vers) else {
            let (low, high) = program.version_range();
            return Route::ProgMismatch { low, high };
        };
        match version.procs.get(proc_ as usize) {
            Some(procedure) => Route::Found { program, procedure },
            None => Route::ProcUnavail,
        }
    }

    pub fn program(&self, prog: u32) -> Option<&Program<H>> {
        self.programs.iter().find(|p| p.prog == prog)
    }

    pub fn programs(&self) -> &[Program<H>] {
        &self.programs
    }

    /// The facts of a registered procedure, `None` for anything a call could not reach.
    pub fn facts(&self, prog: u32, vers: u32, proc_: u32) -> Option<&'static ProcInfo> {
        match self.route(prog, vers, proc_) {
            Route::Found { procedure, .. } => Some(procedure.info),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_xdr::{mount3, nfs3, nfs4};

    /// Every procedure of `facts` answered by `handler`.
    fn uniform<H: Copy>(vers: u32, facts: &'static [ProcInfo], handler: H) -> Version<H> {
        Version::new(vers, facts, facts.iter().map(|_| handler))
    }

    fn registry() -> Registry<&'static str> {
        let mut r = Registry::default();
        r.register(nfs3::PROGRAM, "NFS", uniform(3, &nfs3::PROCS, "v3"))
            .register(
                mount3::PROGRAM,
                "MOUNT",
                uniform(3, &mount3::PROCS, "mount"),
            );
        r
    }

    fn found(
        r: &Registry<&'static str>,
        prog: u32,
        vers: u32,
        proc_: u32,
    ) -> (&'static str, &'static str) {
        match r.route(prog, vers, proc_) {
            Route::Found { procedure, .. } => (procedure.info.name, procedure.handler),
            other => panic!("not found: {other:?}"),
        }
    }

    #[test]
    fn a_call_reaches_its_procedures_row_and_handler() {
        let r = registry();
        assert_eq!(
            found(&r, nfs3::PROGRAM, 3, nfs3::proc_::WRITE),
            ("WRITE", "v3")
        );
        assert_eq!(
            found(&r, mount3::PROGRAM, 3, mount3::proc_::MNT),
            ("MNT", "mount")
        );
        assert!(
            r.facts(nfs3::PROGRAM, 3, nfs3::proc_::WRITE)
                .unwrap()
                .non_idempotent
        );
    }

    #[test]
    fn proc_unavail_starts_at_the_end_of_the_table() {
        let r = registry();
        assert_eq!(found(&r, nfs3::PROGRAM, 3, 21).0, "COMMIT");
        assert!(matches!(r.route(nfs3::PROGRAM, 3, 22), Route::ProcUnavail));
        assert!(matches!(r.route(mount3::PROGRAM, 3, 6), Route::ProcUnavail));
        assert!(matches!(
            r.route(nfs3::PROGRAM, 3, u32::MAX),
            Route::ProcUnavail
        ));
    }

    #[test]
    fn unknown_programs_and_versions() {
        let r = registry();
        assert!(matches!(r.route(100_021, 4, 0), Route::ProgUnavail));
        assert!(matches!(
            r.route(nfs3::PROGRAM, 2, 0),
            Route::ProgMismatch { low: 3, high: 3 }
        ));
    }

    /// NFSv4 joins by registering (NFS, 4) beside v3 on the same program number: v3 calls still
    /// reach v3's table, v4 calls v4's, and a version outside both says 3..4.
    #[test]
    fn one_program_number_serves_two_versions() {
        let mut r = registry();
        r.register(nfs4::PROGRAM, "NFS", uniform(4, &nfs4::PROCS, "compound"));
        assert_eq!(r.programs().len(), 2, "v4 joins NFS, not a new program");
        assert_eq!(
            found(&r, nfs3::PROGRAM, 3, nfs3::proc_::READ),
            ("READ", "v3")
        );
        assert_eq!(
            found(&r, nfs4::PROGRAM, 4, nfs4::proc_::COMPOUND),
            ("COMPOUND", "compound")
        );
        assert!(matches!(r.route(nfs4::PROGRAM, 4, 2), Route::ProcUnavail));
        for vers in [2, 5] {
            assert!(matches!(
                r.route(nfs3::PROGRAM, vers, 0),
                Route::ProgMismatch { low: 3, high: 4 }
            ));
        }
    }

    #[test]
    fn the_order_of_registration_does_not_matter() {
        let mut r = Registry::default();
        r.register(nfs4::PROGRAM, "NFS", uniform(4, &nfs4::PROCS, ()))
            .register(nfs3::PROGRAM, "NFS", uniform(3, &nfs3::PROCS, ()));
        assert_eq!(r.program(nfs3::PROGRAM).unwrap().version_range(), (3, 4));
    }

    #[test]
    #[should_panic(expected = "registered twice")]
    fn registering_a_version_twice_is_refused() {
        let mut r = registry();
        r.register(nfs3::PROGRAM, "NFS", uniform(3, &nfs3::PROCS, "again"));
    }

    #[test]
    fn each_handler_answers_the_procedure_at_its_position() {
        let names = mount3::proc_::NAMES;
        let mut r = Registry::default();
        r.register(
            mount3::PROGRAM,
            "MOUNT",
            Version::new(3, &mount3::PROCS, names),
        );
        for (num, name) in names.iter().enumerate() {
            assert_eq!(found(&r, mount3::PROGRAM, 3, num as u32), (*name, *name));
        }
    }

    #[test]
    #[should_panic(expected = "one handler per procedure")]
    fn a_handler_list_longer_than_the_table_is_refused() {
        Version::new(3, &mount3::PROCS, ["h"; 7]);
    }

    #[test]
    #[should_panic(expected = "one handler per procedure")]
    fn a_handler_list_shorter_than_the_table_is_refused() {
        Version::new(3, &mount3::PROCS, ["h"; 5]);
    }
}
