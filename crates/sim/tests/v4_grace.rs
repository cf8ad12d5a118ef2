//! Issue #14 in the simulator: the NFSv4.1 grace period after a server crash (early end,
//! skip, deadline, refusal of non-reclaim ops) on the real COMPOUND processor in virtual time
//! (see `sluice_sim::v4_grace` for the run and its reference model).
//!
//! Default suite: seeds 0..200 (about a second). `SLUICE_SIM_SEEDS=a..b` changes the range;
//! `SLUICE_SEED=n` replays one seed.

// The one clock read: the epoch that virtual time starts from.
#![allow(clippy::disallowed_methods)]

use sluice_nfs4state::recovery::grace::EndReason;
use sluice_sim::v4_grace::{run_grace, GraceScenario};
use std::ops::Range;
use std::time::Instant;

/// `SLUICE_SEED=n` (one seed), else `SLUICE_SIM_SEEDS=a..b`, else `default`; printed first.
fn seeds(default: Range<u64>) -> Range<u64> {
    sluice_testkit::seed::seeds("v4_grace", default)
}

#[test]
fn grace_ends_early_is_skipped_or_runs_out_as_the_model_says() {
    let range = seeds(0..200);
    let full = range == (0..200);
    let (mut skipped, mut early, mut deadline) = (0, 0, 0);
    let (mut reclaimed, mut refused, mut granted, mut no_grace) = (0, 0, 0, 0);
    for seed in range {
        let r = run_grace(&GraceScenario::draw(seed), Instant::now());
        r.assert_invariants();
        match r.reason {
            Some(EndReason::Skipped) => skipped += 1,
            Some(EndReason::AllReclaimed) => early += 1,
            Some(EndReason::Deadline) => deadline += 1,
            None => {}
        }
        reclaimed += r.reclaimed;
        refused += r.refused;
        granted += r.granted;
        no_grace += r.no_grace;
    }
    eprintln!(
        "grace: {skipped} skipped, {early} ended early, {deadline} at the deadline; \
         {reclaimed} reclaims, {refused} refused with GRACE, {granted} granted after, \
         {no_grace} NO_GRACE"
    );
    if full {
        // The default range reaches every case.
        assert!(skipped > 0 && early > 0 && deadline > 0);
        assert!(reclaimed > 0 && refused > 0 && granted > 0 && no_grace > 0);
    }
}
