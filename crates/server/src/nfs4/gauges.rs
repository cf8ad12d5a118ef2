//! Where the NFSv4 service meets the server's statistics: the state gauges read from a
//! running [`Nfs4`] and the per-op observer the COMPOUND processor reports to.
//!
//! They live on the v4 side, not in `crate::stats`, because the statistics are a layer below
//! every protocol: the data path and the I/O engine record into [`Stats`] too, and the
//! processor runs the data path, so `stats` naming the processor would close a loop
//! (stats → processor → data path → stats). Here the arrows all point down.

use super::compound::{Nfs4, OpObserver};
use crate::stats::{Gauges4, Stats};
use sluice_xdr::nfs4::{self, ops::Opnum4};
use std::time::Instant;

impl Gauges4 {
    /// The gauges of the NFSv4 service `nfs4`, read under its state lock.
    pub fn of(nfs4: &Nfs4) -> Self {
        // A panic under the lock is a bug elsewhere; the tables stay usable.
        let st = nfs4.state.lock().unwrap_or_else(|p| p.into_inner());
        let delegs = st.delegations();
        Gauges4 {
            clients: st.clients().len() as u64,
            sessions: st.sessions_len() as u64,
            open_stateids: st.opens().len() as u64,
            lock_stateids: st.locks().len() as u64,
            locks: st.locks().ranges.len() as u64,
            grace: st.grace_stats(),
            delegations_read: delegs.live_by_kind().0 as u64,
            delegations_write: delegs.live_by_kind().1 as u64,
            delegations_granted_read: delegs.counters.granted - delegs.counters.granted_write,
            delegations_granted_write: delegs.counters.granted_write,
            cb_getattr_sent: delegs.counters.cb_getattr_sent,
            cb_getattr_answered: delegs.counters.cb_getattr_answered,
            recalls_sent: delegs.counters.recalls_sent,
            recalls_answered: delegs.counters.recalls_answered,
            recalls_timed_out: delegs.counters.recalls_timed_out,
            delegations_revoked: delegs.counters.revoked,
            async_copies: st.copies_len() as u64,
            cb_offloads: nfs4
                .copy_offloads_sent
                .load(std::sync::atomic::Ordering::Relaxed),
        }
    }
}

impl OpObserver for Stats {
    fn op_start(&self) -> Instant {
        Instant::now()
    }

    fn op_done(&self, op: Opnum4, status: nfs4::Nfsstat4, started: Instant) {
        if let Some(p) = self.nfs4_ops.get(op) {
            p.record(started.elapsed(), status == nfs4::Nfsstat4::OK);
        }
    }
}
