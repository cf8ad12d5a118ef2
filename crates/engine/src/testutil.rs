//! Helpers shared by the unit tests: seeded randomness that can be replayed.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// A seed for a randomized test and its generator: `SLUICE_SEED` if set (to replay a failure),
/// otherwise a fresh one, printed first ([`sluice_testkit::seed::seed_or_fresh`]), so any
/// failure replays with `SLUICE_SEED=<seed> cargo test -p sluice-engine <test name>`.
pub(crate) fn seeded_rng(test: &str) -> (u64, ChaCha8Rng) {
    let seed = sluice_testkit::seed::seed_or_fresh(test);
    (seed, ChaCha8Rng::seed_from_u64(seed))
}
