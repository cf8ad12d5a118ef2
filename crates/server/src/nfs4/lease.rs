//! The NFSv4.1 lease driver: the thin task that gives the state cores their clock.
//!
//! The lease rules (expiry, courtesy clients, RFC 8881 §8.3) live in [`sluice_nfs4state::State4`],
//! which reads no clock: [`State4::tick`](sluice_nfs4state::State4::tick) applies them at the time
//! it is given and [`State4::next_wakeup`](sluice_nfs4state::State4::next_wakeup) says when it next
//! has something to do. This task sleeps until then and ticks ([`Nfs4::tick`]: leases, then the
//! grace period and the stable client records), and logs what the tick reports: leases expired,
//! delegations revoked, and grace's end with why and how long it lasted.
//!
//! The sleep is bounded both ways. At most [`SLEEP_MAX`]: a client that appears while the task
//! sleeps (an EXCHANGE_ID does not wake it) is looked at within that time, so an expiry is late
//! by at most that much, against a 90 s lease. At least [`SLEEP_MIN`]: a wake-up time that is
//! already due after a tick (a lease ending in the very instant the tick ran) cannot make the
//! task spin.

use crate::nfs4::compound::{Nfs4, TickReport};
use sluice_nfs4state::recovery::grace::EndReason;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest sleep between ticks: the most an expiry can be late (module notes).
pub const SLEEP_MAX: Duration = Duration::from_secs(1);
/// Shortest sleep between ticks: the task never spins (module notes).
pub const SLEEP_MIN: Duration = Duration::from_millis(10);

/// How long to sleep at `now` before the next tick, given the state's next wake-up.
pub fn sleep_for(now: Instant, next_wakeup: Option<Instant>) -> Duration {
    next_wakeup
        .map_or(SLEEP_MAX, |t| t.saturating_duration_since(now))
        .clamp(SLEEP_MIN, SLEEP_MAX)
}

/// Ticks `nfs4`'s state at its wake-up times, for as long as the server runs.
pub async fn drive(nfs4: Arc<Nfs4>) -> std::io::Result<()> {
    loop {
        let now = Instant::now();
        let report = nfs4.tick(now);
        log(&report);
        let wait = {
            let state = nfs4.state.lock().unwrap_or_else(|p| p.into_inner());
            sleep_for(now, state.next_wakeup())
        };
        tokio::time::sleep(wait).await;
    }
}

fn log(r: &TickReport) {
    if r.expired > 0 {
        tracing::info!(clients = r.expired, "NFSv4 leases expired");
    }
    if r.delegations_revoked > 0 {
        tracing::info!(
            delegations = r.delegations_revoked,
            "NFSv4 delegations revoked: not returned within a lease of their CB_RECALL"
        );
    }
    if let Some(end) = &r.grace_ended {
        let why = match end.reason {
            EndReason::Skipped => "Skipped: no client held state in the last run",
            EndReason::AllReclaimed => "AllReclaimed: every client of the last run has reclaimed",
            EndReason::Deadline => "Deadline: some clients of the last run did not come back",
        };
        tracing::info!(
            reason = ?end.reason,
            lasted_secs = end.lasted.as_secs_f64(),
            forgotten = end.forgotten.len(),
            "NFSv4 grace period ended ({why})"
        );
    }
    if r.records_failed > 0 {
        tracing::warn!(
            failed = r.records_failed,
            "NFSv4 client records could not be removed from the state directory"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeps_until_the_next_wakeup_within_bounds() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(sleep_for(now, Some(now + ms(300))), ms(300));
        assert_eq!(sleep_for(now, None), SLEEP_MAX, "nothing to do: the bound");
        assert_eq!(
            sleep_for(now, Some(now + Duration::from_secs(90))),
            SLEEP_MAX
        );
        // Already due (or past): a short pause, never zero.
        assert_eq!(sleep_for(now, Some(now)), SLEEP_MIN);
        assert_eq!(sleep_for(now + ms(5), Some(now)), SLEEP_MIN);
    }
}
