//! The acceptance grid: one sequential reader over RTT × rate cells, per readahead mode.
//!
//! Shared by the `grid` test (which asserts on it) and `cargo run --example grid` (which prints
//! it as a markdown table).

use crate::scenario::{Pattern, Report, Scenario, KIB, MIB};
use crate::world::run;
use sluice_engine::readahead::ReadaheadMode;
use std::fmt::Write;
use std::time::{Duration, Instant};

/// RTTs of the grid: a LAN, a metro link, a continent, an ocean.
pub const RTTS: [Duration; 4] = [
    Duration::from_micros(200),
    Duration::from_millis(1),
    Duration::from_millis(10),
    Duration::from_millis(40),
];

/// Rates of the grid: 100 Mb/s, a 2.4 Gb/s-ish path, 8 Gb/s.
pub const RATES_BYTES_PER_SEC: [u64; 3] = [12_500_000, 300_000_000, 1_000_000_000];

/// One measured cell.
#[derive(Debug, Clone)]
pub struct Cell {
    pub rtt: Duration,
    pub rate_bytes_per_sec: u64,
    pub mode: ReadaheadMode,
    pub report: Report,
}

impl Cell {
    /// Achieved rate after warm-up over the link rate.
    pub fn ratio(&self) -> f64 {
        self.report.ratio().expect("the reader passed its warm-up")
    }
}

/// The scenario of one cell: one sequential reader, 128 KiB application reads, rsize 1 MiB,
/// TCP, a file of `max(64 MiB, 16 × BDP)` so that the rate is measured over at least the
/// second half of the file (the first 8 × BDP are warm-up).
pub fn cell_scenario(
    rtt: Duration,
    rate_bytes_per_sec: u64,
    mode: ReadaheadMode,
    seed: u64,
) -> Scenario {
    let mut sc = Scenario {
        seed,
        rtt,
        rate_bytes_per_sec,
        readahead: mode,
        read_bytes: 128 * KIB,
        rsize_bytes: MIB,
        pattern: Pattern::Sequential,
        ..Scenario::default()
    };
    sc.file_bytes = (16 * sc.bdp_bytes()).max(64 * MIB).div_ceil(MIB) * MIB;
    sc
}

/// Runs every cell for `mode`.
pub fn run_grid(mode: ReadaheadMode, seed: u64, epoch: Instant) -> Vec<Cell> {
    let mut cells = Vec::new();
    for rtt in RTTS {
        for rate in RATES_BYTES_PER_SEC {
            let report = run(&cell_scenario(rtt, rate, mode, seed), epoch);
            cells.push(Cell {
                rtt,
                rate_bytes_per_sec: rate,
                mode,
                report,
            });
        }
    }
    cells
}

/// A markdown table: one row per cell, the ratio for each mode side by side.
/// `columns` are (name, cells) with cells in [`run_grid`] order.
pub fn markdown(columns: &[(&str, &[Cell])]) -> String {
    let mut s = String::new();
    let _ = write!(s, "| RTT | rate | BDP |");
    for (name, _) in columns {
        let _ = write!(s, " {name} rate/link | {name} MB/s | {name} window |");
    }
    s.push('\n');
    let _ = write!(s, "|---:|---:|---:|");
    for _ in columns {
        let _ = write!(s, "---:|---:|---:|");
    }
    s.push('\n');
    let rows = columns.first().map_or(0, |c| c.1.len());
    for i in 0..rows {
        let c0 = &columns[0].1[i];
        let _ = write!(
            s,
            "| {} ms | {} MB/s | {} |",
            c0.rtt.as_secs_f64() * 1e3,
            c0.rate_bytes_per_sec as f64 / 1e6,
            human_bytes(c0.report.bdp_bytes)
        );
        for (_, cells) in columns {
            let c = &cells[i];
            let ratio = c.report.ratio().unwrap_or(f64::NAN);
            let _ = write!(
                s,
                " {:.3} | {:.1} | {} |",
                ratio,
                ratio * c.rate_bytes_per_sec as f64 / 1e6,
                human_bytes(c.report.final_window_bytes)
            );
        }
        s.push('\n');
    }
    s
}

fn human_bytes(b: u64) -> String {
    if b >= MIB {
        format!("{:.1} MiB", b as f64 / MIB as f64)
    } else {
        format!("{} KiB", b / KIB)
    }
}
