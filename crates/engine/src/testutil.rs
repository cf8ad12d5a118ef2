//! Helpers shared by the unit tests: seeded randomness that can be replayed.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// A seed for a randomized test: `SLUICE_SEED` if set (to replay a failure), otherwise a fresh
/// one. The seed is printed first so that any failure can be replayed with
/// `SLUICE_SEED=<seed> cargo test -p sluice-engine <test name>`.
pub(crate) fn seeded_rng(test: &str) -> (u64, ChaCha8Rng) {
    let seed = match std::env::var("SLUICE_SEED") {
        Ok(s) => s.parse().expect("SLUICE_SEED must be a u64"),
        Err(_) => fresh_seed(),
    };
    eprintln!("{test}: seed = {seed} (replay with SLUICE_SEED={seed})");
    (seed, ChaCha8Rng::seed_from_u64(seed))
}

fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded by the OS per process; good enough to vary seeds between runs.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x5eed);
    h.finish()
}
