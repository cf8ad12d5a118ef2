//! Prints the acceptance grid (one sequential reader, RTT × rate, Auto vs Fixed(128 KiB)) as a
//! markdown table: `cargo run -p sluice-sim --release --example grid`.
//! `SLUICE_SEED=<n>` picks the seed (default 1).

// The one clock read: the epoch that virtual time starts from.
#![allow(clippy::disallowed_methods)]

use sluice_sim::grid::{markdown, run_grid};
use sluice_sim::{seed_from_env, ReadaheadMode, KIB};
use std::time::Instant;

fn main() {
    let seed = seed_from_env(1);
    let epoch = Instant::now();
    let auto = run_grid(ReadaheadMode::Auto, seed, epoch);
    let fixed = run_grid(ReadaheadMode::Fixed(128 * KIB), seed, epoch);
    println!();
    println!("Sequential read, 128 KiB application reads, rsize 1 MiB, TCP; rate measured after 8 × BDP; seed {seed}.");
    println!();
    print!("{}", markdown(&[("auto", &auto), ("fixed:128k", &fixed)]));
}
