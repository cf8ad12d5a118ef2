//! The NFSv4.1 lease driver: the thin task that gives the state cores their clock.
//!
//! The lease rules (expiry, courtesy clients, RFC 8881 §8.3) live in [`crate::nfs4::State4`],
//! which reads no clock: [`State4::tick`](crate::nfs4::State4::tick) applies them at the time it
//! is given and [`State4::next_wakeup`](crate::nfs4::State4::next_wakeup) says when it next has
//! something to do. This task sleeps until then and ticks, nothing more.
//!
//! The sleep is bounded both ways. At most [`SLEEP_MAX`]: a client that appears while the task
//! sleeps (an EXCHANGE_ID does not wake it) is looked at within that time, so an expiry is late
//! by at most that much, against a 90 s lease. At least [`SLEEP_MIN`]: a wake-up time that is
//! already due after a tick (a lease ending in the very instant the tick ran) cannot make the
//! task spin.

use crate::nfs4::compound::Nfs4;
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
        let wait = {
            let mut state = nfs4.state.lock().unwrap_or_else(|p| p.into_inner());
            let revoked_before = state.delegations().counters.revoked;
            let expired = state.tick(now);
            if !expired.is_empty() {
                tracing::info!(clients = expired.len(), "NFSv4 leases expired");
            }
            let revoked = state.delegations().counters.revoked - revoked_before;
            if revoked > 0 {
                tracing::info!(
                    delegations = revoked,
                    "NFSv4 delegations revoked: not returned within a lease of their CB_RECALL"
                );
            }
            sleep_for(now, state.next_wakeup())
        };
        tokio::time::sleep(wait).await;
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
