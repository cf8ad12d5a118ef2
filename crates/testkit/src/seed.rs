//! Seeds of randomized tests and simulations: picked one way, printed first, replayed from the
//! environment.
//!
//! Every failure must be reproducible (STYLE.md, habit 12): a randomized test prints its seed
//! before it does anything else, so a failure's output names it, and the same test run again
//! with `SLUICE_SEED=<seed>` draws exactly the same run.
//!
//! ```text
//!   SLUICE_SEED=n         ──► seed(..) = n,  seeds(..) = n..n+1      replay one seed
//!   SLUICE_SIM_SEEDS=a..b ──► seeds(..) = a..b                        sweep a range
//!   neither               ──► the test's default (a fixed seed or range), or a fresh seed
//!                             for the tests that want a new one on every run (seed_or_fresh)
//!   every pick prints "<test>: seed <n> (replay with SLUICE_SEED=<n>)" first
//! ```
//!
//! Malformed values panic with the variable's name: this is test support, and a replay that
//! silently ran another seed would be worse than no replay.

use std::ops::Range;

/// The variable that replays one seed.
pub const SEED_VAR: &str = "SLUICE_SEED";
/// The variable that sweeps a range of seeds, `a..b`.
pub const SEEDS_VAR: &str = "SLUICE_SIM_SEEDS";

/// The seed of `test`: `SLUICE_SEED` if set, else `default`. Printed first.
pub fn seed(test: &str, default: u64) -> u64 {
    let seed = from_env().unwrap_or(default);
    announce(test, seed);
    seed
}

/// The seed of `test`: `SLUICE_SEED` if set, else a fresh one that differs between runs (for
/// tests that explore a little more of the space every time they run). Printed first.
pub fn seed_or_fresh(test: &str) -> u64 {
    let seed = from_env().unwrap_or_else(fresh);
    announce(test, seed);
    seed
}

/// The seeds of `test`: `SLUICE_SEED=n` gives `n..n+1`, else `SLUICE_SIM_SEEDS=a..b` gives
/// `a..b`, else `default`. The range is printed first; each seed's own output should name it.
pub fn seeds(test: &str, default: Range<u64>) -> Range<u64> {
    let range = match (from_env(), std::env::var(SEEDS_VAR)) {
        (Some(n), _) => n..n + 1,
        (None, Ok(s)) => parse_range(&s),
        (None, Err(_)) => default,
    };
    println!(
        "{test}: seeds {}..{} (replay one with {SEED_VAR}=<n>)",
        range.start, range.end
    );
    range
}

/// Whether the environment chose the seeds (`SLUICE_SEED` or `SLUICE_SIM_SEEDS` set): a test
/// that asserts its default range reaches every case skips that check for a chosen one.
pub fn chosen() -> bool {
    std::env::var(SEED_VAR).is_ok() || std::env::var(SEEDS_VAR).is_ok()
}

fn from_env() -> Option<u64> {
    let s = std::env::var(SEED_VAR).ok()?;
    Some(
        s.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{SEED_VAR}={s:?} is not a u64")),
    )
}

fn parse_range(s: &str) -> Range<u64> {
    let parse = |x: &str| -> u64 {
        x.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{SEEDS_VAR}={s:?} is not a..b of u64"))
    };
    let (a, b) = s
        .split_once("..")
        .unwrap_or_else(|| panic!("{SEEDS_VAR}={s:?} is not a..b"));
    parse(a)..parse(b)
}

fn announce(test: &str, seed: u64) {
    println!("{test}: seed {seed} (replay with {SEED_VAR}={seed})");
}

fn fresh() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is keyed by the OS per process: enough to vary seeds between runs.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x5eed);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_with_spaces() {
        assert_eq!(parse_range("3..7"), 3..7);
        assert_eq!(parse_range(" 0 .. 2000 "), 0..2000);
    }

    #[test]
    #[should_panic(expected = "SLUICE_SIM_SEEDS")]
    fn a_malformed_range_names_its_variable() {
        parse_range("7");
    }
}
