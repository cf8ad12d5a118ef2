//! Restart recovery in the COMPOUND processor: the stable client records written before the
//! op that needs them, and the tick that ends grace and removes records. The decisions are the
//! state core's (`state/recovery.rs`); this is the thin part that touches [`Nfs4::records`].

use super::Nfs4;
use sluice_nfs4state::recovery::grace::GraceEnd;
use sluice_xdr::nfs4::ClientId4;
use sluice_xdr::nfs4::Nfsstat4;
use std::time::Instant;

/// What one [`Nfs4::tick`] did, for the driver to log.
#[derive(Debug, Default)]
pub struct TickReport {
    /// Clients whose leases expired for real.
    pub expired: usize,
    /// Grace ended (or was skipped at start).
    pub grace_ended: Option<GraceEnd>,
    /// Stable records removed.
    pub records_removed: usize,
    /// Stable records that could not be removed (each is tried once: a stale record costs
    /// only a grace period that waits for its deadline).
    pub records_failed: usize,
    /// Delegations revoked by this tick: not returned within a lease of their CB_RECALL.
    pub delegations_revoked: u64,
}

impl Nfs4 {
    /// Writes `clientid`'s stable record if the store does not hold it yet, before the op that
    /// grants state goes on; NFS4ERR_DELAY when the write fails (the client retries).
    pub(super) fn ensure_record(&self, clientid: ClientId4) -> Result<(), Nfsstat4> {
        let Some(records) = &self.records else {
            return Ok(());
        };
        // Not under the state lock: the write waits for the disk.
        let Some(owner) = self.state().record_needed(clientid) else {
            return Ok(());
        };
        records.insert(&owner).map_err(|_| Nfsstat4::DELAY)?;
        self.state().record_written(&owner);
        Ok(())
    }

    /// Removes from the stable store, now, the records of clients just destroyed (see
    /// [`sluice_nfs4state::State4::take_gone_records`]); a failed removal is left to cost a longer
    /// grace after a crash, as at the tick.
    pub(super) fn remove_gone_records(&self, now: Instant) {
        let Some(records) = &self.records else {
            return;
        };
        let owners = self.state().take_gone_records(now);
        for owner in owners {
            if let Err(e) = records.remove(&owner) {
                tracing::warn!("NFSv4 client record could not be removed: {e}");
            }
        }
    }

    /// The lease and grace clock at `now`: expires leases ([`sluice_nfs4state::State4::tick`]),
    /// ends grace at its deadline and removes the records of clients gone for good
    /// ([`sluice_nfs4state::State4::recovery_tick`]).
    pub fn tick(&self, now: Instant) -> TickReport {
        let (expired, revoked, rec) = {
            let mut st = self.state();
            let revoked_before = st.delegations().counters.revoked;
            let expired = st.tick(now).len();
            let revoked = st.delegations().counters.revoked - revoked_before;
            (expired, revoked, st.recovery_tick(now))
        };
        let mut report = TickReport {
            expired,
            delegations_revoked: revoked,
            grace_ended: rec.ended,
            ..TickReport::default()
        };
        if let Some(records) = &self.records {
            for owner in &rec.forget {
                match records.remove(owner) {
                    Ok(()) => report.records_removed += 1,
                    Err(_) => report.records_failed += 1,
                }
            }
        }
        report
    }
}
