//! Issue #13 in the simulator: the NFSv4.1 server's slot table and reply cache, lease renewal
//! and expiry, and courtesy clients, on the real COMPOUND processor in virtual time (see
//! `sluice_sim::v4` for the run and its reference model); and issue #14's delegation recall to
//! a client that never returns it (`sluice_sim::v4deleg`).
//!
//! Default suite: seeds 0..300 (a few seconds). `SLUICE_SIM_SEEDS=a..b` changes the range;
//! `SLUICE_SEED=n` replays one seed. The long run is ignored by default:
//! `SLUICE_SIM_SEEDS=0..20000 cargo test -p sluice-sim --release --test v4_state -- --ignored v4_state_long`

// The one clock read: the epoch that virtual time starts from.
#![allow(clippy::disallowed_methods)]

use sluice_sim::v4::{run_v4, V4Report, V4Scenario};
use std::ops::Range;
use std::time::Instant;

/// `SLUICE_SEED=n` (one seed), else `SLUICE_SIM_SEEDS=a..b`, else `default`; printed first.
fn seeds(default: Range<u64>) -> Range<u64> {
    sluice_testkit::seed::seeds("v4_state", default)
}

/// Sums over a range of seeds, so that a suite that never reached a case fails.
#[derive(Default, Debug)]
struct Totals {
    runs: u64,
    executed: u64,
    replays: u64,
    uncached_retries: u64,
    misordered: u64,
    false_retries: u64,
    badslot: u64,
    slot_shrinks: u64,
    badsession: u64,
    retransmissions: u64,
    courtesy: u64,
    courtesy_expired: u64,
    courtesy_returns: u64,
    courtesy_kept: u64,
    share_denied: u64,
    revoked: u64,
    recovered: u64,
}

fn check(seed: u64) -> V4Report {
    let r = run_v4(&V4Scenario::draw(seed), Instant::now());
    r.assert_invariants();
    r
}

fn run_range(range: Range<u64>) -> Totals {
    let mut t = Totals::default();
    for seed in range {
        let r = check(seed);
        t.runs += 1;
        t.executed += r.executed;
        t.replays += r.replays;
        t.uncached_retries += r.uncached_retries;
        t.misordered += r.misordered;
        t.false_retries += r.false_retries;
        t.badslot += r.badslot;
        t.slot_shrinks += r.slot_shrinks;
        t.badsession += r.badsession;
        t.retransmissions += r.retransmissions;
        t.courtesy += r.courtesy;
        t.courtesy_expired += r.courtesy_expired;
        t.courtesy_returns += r.courtesy_returns;
        t.courtesy_kept += r.courtesy_kept;
        t.share_denied += r.share_denied;
        t.revoked += r.revoked;
        t.recovered += r.recovered;
    }
    println!("totals: {t:?}");
    t
}

#[test]
fn slots_leases_and_courtesy_clients_hold_their_invariants() {
    let explicit = sluice_testkit::seed::chosen();
    let t = run_range(seeds(0..300));
    if !explicit {
        // The fixed range must have reached every case the invariants are about.
        assert!(
            t.executed > 0 && t.replays > 0 && t.uncached_retries > 0,
            "{t:?}"
        );
        assert!(t.misordered > 0 && t.false_retries > 0, "{t:?}");
        assert!(
            t.retransmissions > 0 && t.slot_shrinks > 0 && t.badslot > 0,
            "{t:?}"
        );
        assert!(t.courtesy > 0 && t.courtesy_kept > 0, "{t:?}");
        assert!(t.courtesy_returns > t.courtesy_kept, "{t:?}");
        assert!(t.share_denied > 0, "{t:?}");
        assert!(t.revoked > 0 && t.courtesy_expired > 0, "{t:?}");
        // Every revoked quiet client starts again when it comes back.
        assert!(t.recovered >= t.revoked, "{t:?}");
        assert!(t.badsession >= t.revoked, "{t:?}");
    }
}

/// Ignored by default; see the module docs for the command.
#[test]
#[ignore = "a minute of runtime; SLUICE_SIM_SEEDS=0..20000 cargo test -p sluice-sim --release --test v4_state -- --ignored v4_state_long"]
fn v4_state_long() {
    run_range(seeds(0..20000));
}

/// A run is a pure function of its scenario.
#[test]
fn a_v4_seed_replays_exactly() {
    let seed = seeds(7..8).start;
    let a = run_v4(&V4Scenario::draw(seed), Instant::now());
    let b = run_v4(&V4Scenario::draw(seed), Instant::now());
    assert_eq!(a, b);
}

/// Issue #14: a recall to a client that never returns its delegation (silent, answering OK,
/// or answering DELAY) ends in revocation a lease after the CB_RECALL was sent, never
/// earlier, never a hang (see `sluice_sim::v4deleg`); whether the conflicting writer is a v4
/// OPEN or an NFSv3 WRITE (the recall gate with no client id); with a write delegation,
/// another client's GETATTR is answered from the holder's CB_GETATTR first, without a recall.
#[test]
fn a_recall_the_holder_never_honours_ends_in_revocation_after_the_lease() {
    use sluice_sim::v4deleg::{run_deleg, DelegScenario};
    let mut kinds = std::collections::HashSet::new();
    let (mut late_sends, mut v3_writers) = (0, 0);
    let mut writes = 0;
    for seed in seeds(0..200) {
        let sc = DelegScenario::draw(seed);
        let r = run_deleg(&sc, Instant::now());
        r.assert_invariants();
        assert_eq!(r.revoked, 1, "seed {seed}");
        assert!(r.delays > 0, "seed {seed}: the writer waited");
        if sc.write {
            writes += 1;
            assert!(
                r.cb_getattrs > 0 && r.getattr_ok_at.is_some(),
                "seed {seed}"
            );
        }
        kinds.insert(format!("{:?}", sc.holder));
        late_sends += u64::from(sc.driver_delay > sc.lease);
        v3_writers += u64::from(sc.v3_writer);
    }
    let explicit = sluice_testkit::seed::chosen();
    if !explicit {
        assert_eq!(kinds.len(), 3, "every kind of holder ran");
        assert!(
            (1..200).contains(&v3_writers),
            "both v4 and v3 writers ran ({v3_writers} v3)"
        );
        assert!(
            writes > 0 && writes < 200,
            "{writes} runs with write delegations"
        );
        assert!(
            late_sends > 0,
            "some recalls were sent more than a lease after queueing"
        );
    }
}

/// The slot-freeing guard of the production driver loop: a connection that goes away while
/// its COMPOUND waits for the data path or the blocking pool frees the slot, so the client's
/// retry is served (RETRY_UNCACHED_REP after a good SEQUENCE) and the next request runs; with
/// the driver leaked instead of dropped (no guard ran) the retry is refused with DELAY.
#[test]
fn a_connection_gone_mid_compound_frees_its_slot() {
    use sluice_sim::v4_cutoff::{cut_off, CutAt};
    use sluice_xdr::nfs4::Nfsstat4;
    let epoch = Instant::now();
    for at in [CutAt::DataOp, CutAt::MetadataStep] {
        for cachethis in [false, true] {
            let r = cut_off(at, cachethis, false, epoch);
            assert!(r.pending_at_cut, "{at:?}: cut mid-evaluation");
            assert_eq!(
                r.retry,
                vec![Nfsstat4::OK, Nfsstat4::RETRY_UNCACHED_REP],
                "{at:?} cachethis={cachethis}: the retry is served"
            );
            assert_eq!(r.next, Nfsstat4::OK, "{at:?} cachethis={cachethis}");
            let leaked = cut_off(at, cachethis, true, epoch);
            assert!(leaked.pending_at_cut);
            assert_eq!(
                leaked.retry,
                vec![Nfsstat4::DELAY],
                "{at:?} cachethis={cachethis}: a slot nobody freed stays busy"
            );
        }
    }
}
