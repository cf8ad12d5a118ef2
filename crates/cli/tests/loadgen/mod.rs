//! What the NFSv3 and NFSv4.1 load runs of `load.rs` share: the seeded workload generator
//! ([`Rng`], [`next_op`] and the size draws of [`Shape`]), the model's checks ([`apply_write`],
//! [`check_read`], [`check_names`], [`verify_on_disk`]), the per-client tally of calls and
//! errors ([`Tally`]), the report and the finished run's assertions ([`LoadRun`]).
//!
//! ```text
//!   load.rs: the tests, one server per run ──▶ v3::Worker / v4::Worker (one per client)
//!                                                 │ next_op(rng) ─ the mix, same for both
//!                                                 │ Shape ─ sizes and extents
//!                                                 │ Tally ─ every call timed, every mismatch
//!                                                 ▼
//!                                               report() ─ p50/p99/max per procedure
//! ```
//!
//! The mix (both versions; the v4 column says how the op is expressed there):
//!
//! | op | share | NFSv3 | NFSv4.1 |
//! |---|---|---|---|
//! | create | 20 % | CREATE (guarded), WRITEs, COMMIT | OPEN (create, GUARDED4), WRITEs, COMMIT, CLOSE |
//! | write | 20 % | WRITE, COMMIT if unstable | OPEN (read-write), WRITE, COMMIT if unstable, CLOSE |
//! | read | 25 % | READs | READs under an open stateid (OPEN for reading if not held) |
//! | readdir | 10 % | READDIRPLUS until eof | READDIR until eof |
//! | rename | 10 % | RENAME | RENAME |
//! | remove | 10 % | REMOVE | REMOVE |
//! | stat | 5 % | LOOKUP + GETATTR | LOOKUP + GETATTR |
//!
//! Creates turn into removes once a directory holds [`FILES_PER_DIR_MAX`] files, and an empty
//! directory always creates.

pub mod v3;
pub mod v4;

use sluice_client::{ClientStats, Stability};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

pub const CLIENTS: usize = 32;
/// Files per directory the workload aims at: creates turn into removes above it.
pub const FILES_PER_DIR_MAX: usize = 48;
/// Generous bound on the server's peak RSS: 32 clients with 4 MiB in flight each plus the
/// write-behind window stay far below it; a leak over a minute does not.
pub const RSS_LIMIT_KIB: u64 = 1 << 20;
/// The most errors printed when the test fails.
const ERRORS_SHOWN: usize = 20;

/// When a client stops: after the run time; through a resetting link (`until_reset`) not
/// before its connection was reset at least once, so every client resends and reconnects
/// however slowly a loaded machine lets it move bytes, but never past [`RESET_WAIT_FACTOR`]
/// times the run time.
#[derive(Clone, Copy, Debug)]
pub struct RunFor {
    pub time: Duration,
    pub until_reset: bool,
}

/// The most a run through a resetting link is extended waiting for a client's first reset:
/// 6 x the run time (30 s for the default 5 s), ample for 2 MiB even on a crowded machine.
pub const RESET_WAIT_FACTOR: u32 = 6;

impl RunFor {
    /// Whether a client that started at `start` and has seen `reconnects` goes on.
    pub fn goes_on(&self, start: Instant, reconnects: u64) -> bool {
        let t = start.elapsed();
        t < self.time || (self.until_reset && reconnects == 0 && t < self.time * RESET_WAIT_FACTOR)
    }
}

/// One step of the workload (the mix is in the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Create,
    Write,
    Read,
    Readdir,
    Rename,
    Remove,
    Stat,
}

/// The next op for a directory of `files` files: one draw of `rng`.
pub fn next_op(rng: &mut Rng, files: usize) -> Op {
    let roll = rng.below(100);
    match roll {
        _ if files == 0 => Op::Create,
        0..=19 if files >= FILES_PER_DIR_MAX => Op::Remove,
        0..=19 => Op::Create,
        20..=39 => Op::Write,
        40..=64 => Op::Read,
        65..=74 => Op::Readdir,
        75..=84 => Op::Rename,
        85..=94 => Op::Remove,
        _ => Op::Stat,
    }
}

/// What the workload's data looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Files of 0..2 MiB, WRITEs up to 64 KiB (and 1 MiB pieces when creating), READs of
    /// rsize: the default.
    Mixed,
    /// Files under 16 KiB, WRITEs up to 2 KiB, READs of 4 KiB: mostly metadata calls, every
    /// message small, so a link that resets every few KiB catches CREATE, REMOVE and RENAME
    /// (their calls or their replies) in the act.
    Metadata,
}

impl Shape {
    /// A new file's size: mostly small, sometimes up to 2 MiB.
    pub fn file_size(self, rng: &mut Rng) -> usize {
        match (rng.below(8), self) {
            (1, _) => 0,
            (_, Shape::Metadata) => rng.below(2 << 10) as usize,
            (0, Shape::Mixed) => rng.below(2 << 20) as usize,
            (_, Shape::Mixed) => rng.below(256 << 10) as usize,
        }
    }

    /// A WRITE's offset and length in a file of `size` bytes (past its end: a hole, which
    /// reads as zeros).
    pub fn write_extent(self, rng: &mut Rng, size: u64) -> (u64, usize) {
        match self {
            Shape::Mixed => (rng.below(size + 8192 + 1), 1 + rng.below(64 << 10) as usize),
            // Files stay below 16 KiB.
            Shape::Metadata => (
                rng.below(size.min(12 << 10) + 1),
                1 + rng.below(2 << 10) as usize,
            ),
        }
    }

    /// READ size: `rsize`, or 4 KiB for the metadata shape (every reply stays small).
    pub fn read_chunk(self, rsize: u32) -> u64 {
        match self {
            Shape::Mixed => u64::from(rsize),
            Shape::Metadata => 4096,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Shape::Mixed => "mixed workload",
            Shape::Metadata => "metadata-heavy workload (small files)",
        }
    }
}

/// A read's offset and length in a file of `size` bytes: a third of them the whole file to
/// past its end, the rest up to 256 KiB at a random offset.
pub fn read_extent(rng: &mut Rng, size: u64) -> (u64, u64) {
    if rng.below(3) == 0 {
        (0, size + 1)
    } else {
        let off = rng.below(size + 1);
        (off, 1 + rng.below(256 << 10))
    }
}

/// How stable a WRITE is asked to be: FILE_SYNC, DATA_SYNC, else (half of them) UNSTABLE.
pub fn random_stable(rng: &mut Rng) -> Stability {
    match rng.below(4) {
        0 => Stability::FileSync,
        1 => Stability::DataSync,
        _ => Stability::Unstable,
    }
}

/// The order of the three levels, for "at least as stable as asked".
pub fn stable_rank(s: Stability) -> u8 {
    match s {
        Stability::Unstable => 0,
        Stability::DataSync => 1,
        Stability::FileSync => 2,
    }
}

/// xorshift64*: the workload's only randomness, seeded per client.
pub struct Rng(u64);

impl Rng {
    /// Client `id`'s generator under the run's `seed`.
    pub fn for_client(seed: u64, id: usize) -> Rng {
        Rng((seed ^ (id as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n` (0 for n == 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    /// One of `n` (non-zero) things.
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }
}

// --- the model ---------------------------------------------------------------------------------

/// `data` written at `offset` of a file's model (a hole before it reads as zeros).
pub fn apply_write(file: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let end = offset as usize + data.len();
    if file.len() < end {
        file.resize(end, 0);
    }
    file[offset as usize..end].copy_from_slice(data);
}

/// A READ of `count` bytes at `pos` that returned `got` and `eof`, against the model's
/// `file`: the bytes must be the model's, and eof set exactly when the reply reaches its end
/// (an empty reply at the end may leave it unset).
pub fn check_read(file: &[u8], pos: u64, count: u32, got: &[u8], eof: bool) -> Result<(), String> {
    let want_end = (pos as usize + count as usize).min(file.len());
    let want = file.get(pos as usize..want_end).unwrap_or(&[]);
    if got != want {
        return Err(format!(
            "{} bytes differ from the model's {} (size {})",
            got.len(),
            want.len(),
            file.len()
        ));
    }
    let at_end = pos + got.len() as u64 >= file.len() as u64;
    if eof != at_end && !(got.is_empty() && at_end) {
        return Err(format!("eof {eof} but model size {}", file.len()));
    }
    Ok(())
}

/// A listing against the model's names: what the server has that the model has not, and the
/// reverse.
pub fn check_names(got: &BTreeSet<String>, want: &BTreeSet<String>) -> Result<(), String> {
    if got == want {
        return Ok(());
    }
    Err(format!(
        "server has {:?}, model {:?}",
        got.difference(want).collect::<Vec<_>>(),
        want.difference(got).collect::<Vec<_>>()
    ))
}

/// The server's directory `export/dir_name`, read directly: exactly the model's names
/// (so no hidden name of a file removed while open is left behind either), the same bytes.
pub fn verify_on_disk<'a>(
    export: &Path,
    dir_name: &str,
    files: impl Iterator<Item = (&'a str, &'a [u8])>,
) -> Vec<String> {
    let mut errors = Vec::new();
    let dir = export.join(dir_name);
    let names: BTreeSet<String> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) => return vec![format!("{}: {e}", dir.display())],
    };
    let files: BTreeMap<&str, &[u8]> = files.collect();
    let want: BTreeSet<String> = files.keys().map(|s| s.to_string()).collect();
    if let Err(e) = check_names(&names, &want) {
        errors.push(format!("disk {}: {e}", dir.display()));
    }
    for (name, data) in files {
        match std::fs::read(dir.join(name)) {
            Ok(d) if d == data => {}
            Ok(d) => errors.push(format!(
                "disk {dir_name}/{name}: {} bytes, model {}, contents differ",
                d.len(),
                data.len()
            )),
            Err(e) => errors.push(format!("disk {dir_name}/{name}: {e}")),
        }
    }
    errors
}

// --- one client's tally ------------------------------------------------------------------------

/// One client's record of the run: every call's latency by procedure, its errors, and what
/// it moved.
#[derive(Default)]
pub struct Tally {
    pub id: usize,
    pub latencies: BTreeMap<&'static str, Vec<Duration>>,
    pub errors: Vec<String>,
    pub ops: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    /// How long the client ran its workload (the final verification not included).
    pub run_time: Duration,
}

impl Tally {
    pub fn new(id: usize) -> Tally {
        Tally {
            id,
            ..Tally::default()
        }
    }

    pub fn fail(&mut self, msg: String) {
        self.errors.push(format!("client {}: {msg}", self.id));
    }

    /// Times `call` (start to reply) as `proc`; a failed call is recorded as an error naming
    /// `what`, and yields None.
    pub async fn time<T, E: Display>(
        &mut self,
        proc: &'static str,
        what: &str,
        call: impl Future<Output = Result<T, E>>,
    ) -> Option<T> {
        let t0 = Instant::now();
        let r = call.await;
        self.latencies.entry(proc).or_default().push(t0.elapsed());

        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.fail(format!("{proc} {what}: {e}"));
                None
            }
        }
    }
}

// --- the report --------------------------------------------------------------------------------

/// What the report of one run is made of.
pub struct ReportInput<'a> {
    pub title: String,
    pub tallies: Vec<&'a Tally>,
    /// Files left in the clients' directories at the end (all verified).
    pub files_left: usize,
    /// Summed over the clients' transports.
    pub retransmissions: u64,
    pub reconnects: u64,
    /// The clients' statistics, merged; `prog` names the program in them ("NFS3", "NFS4").
    pub stats: &'a ClientStats,
    pub prog: &'static str,
    pub secs: u64,
    pub seed: u64,
    pub elapsed: Duration,
    pub hwm_kib: u64,
    pub rss_kib: u64,
    /// More lines for the list at the top (each with its "- ").
    pub extra: Vec<String>,
}

pub fn report(r: &ReportInput) -> String {
    let mut all: BTreeMap<&'static str, Vec<Duration>> = BTreeMap::new();
    for t in &r.tallies {
        for (p, v) in &t.latencies {
            all.entry(p).or_default().extend_from_slice(v);
        }
    }
    let ops: u64 = r.tallies.iter().map(|t| t.ops).sum();
    let calls: usize = all.values().map(|v| v.len()).sum();
    let written: u64 = r.tallies.iter().map(|t| t.bytes_written).sum();
    let read: u64 = r.tallies.iter().map(|t| t.bytes_read).sum();
    let errors: usize = r.tallies.iter().map(|t| t.errors.len()).sum();
    // Over the longest client's run: the run time, or longer through a resetting link
    // while a client waits for its first reset (see `RunFor`).
    let run_secs = r
        .tallies
        .iter()
        .map(|t| t.run_time)
        .max()
        .unwrap_or_default()
        .as_secs_f64()
        .max(r.secs as f64)
        .max(1.0);
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let mut s = String::new();
    s.push_str(&format!(
        "## sluice load: {}\n\n\
         - seed {:#x}, wall time {:.1} s (run + final verification)\n\
         - {ops} operations, {calls} calls in {run_secs:.1} s ({:.0} calls/s), {errors} errors\n\
         - {:.1} MiB written, {:.1} MiB read, {} files left and verified\n\
         - transport: {} retransmissions, {} reconnects\n\
         - server memory: VmHWM {:.1} MiB, VmRSS {:.1} MiB at the end (limit {:.0} MiB)\n",
        r.title,
        r.seed,
        r.elapsed.as_secs_f64(),
        calls as f64 / run_secs,
        mib(written),
        mib(read),
        r.files_left,
        r.retransmissions,
        r.reconnects,
        r.hwm_kib as f64 / 1024.0,
        r.rss_kib as f64 / 1024.0,
        RSS_LIMIT_KIB as f64 / 1024.0,
    ));
    for line in &r.extra {
        s.push_str(line);
        s.push('\n');
    }
    s.push_str(
        "\n| procedure | calls | resent | p50 ms | p99 ms | max ms |\n\
         |---|---:|---:|---:|---:|---:|\n",
    );
    for (p, v) in &mut all {
        v.sort_unstable();
        let q = |f: f64| v[((v.len() as f64 * f) as usize).min(v.len() - 1)];
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        s.push_str(&format!(
            "| {p} | {} | {} | {:.3} | {:.3} | {:.3} |\n",
            v.len(),
            r.stats.get(r.prog, p).map_or(0, |s| s.retransmits),
            ms(q(0.50)),
            ms(q(0.99)),
            ms(*v.last().expect("non-empty"))
        ));
    }
    s
}

// --- a finished run ----------------------------------------------------------------------------

/// One finished load run, whichever version.
pub struct LoadRun {
    pub errors: Vec<String>,
    pub report: String,
    pub ops: u64,
    pub hwm_kib: u64,
    pub reconnects: u64,
    pub major_timeouts: u64,
    pub server_log: String,
    /// All clients' per-procedure statistics.
    pub stats: ClientStats,
}

impl LoadRun {
    /// No error, the clients ran, and the server's peak RSS stayed under [`RSS_LIMIT_KIB`].
    pub fn assert_clean(&self, secs: u64) {
        assert!(
            self.errors.is_empty(),
            "{} errors under load (first {ERRORS_SHOWN}):\n{}\n--- server log tail ---\n{}",
            self.errors.len(),
            self.errors
                .iter()
                .take(ERRORS_SHOWN)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n"),
            tail(&self.server_log, 40)
        );
        assert!(
            self.ops >= CLIENTS as u64 * 10,
            "only {} operations in {secs} s: the clients hardly ran",
            self.ops
        );
        assert!(
            self.hwm_kib > 0 && self.hwm_kib < RSS_LIMIT_KIB,
            "server peak RSS {} KiB (limit {RSS_LIMIT_KIB} KiB)",
            self.hwm_kib
        );
    }

    /// Clean, the link really reset connections, and no call waited for a major timeout.
    pub fn assert_resets_answered(&self, secs: u64) {
        self.assert_clean(secs);
        assert!(
            self.reconnects >= CLIENTS as u64,
            "only {} reconnects: the link did not reset connections",
            self.reconnects
        );
        assert_eq!(
            self.major_timeouts, 0,
            "{} calls went unanswered for 5 s after a reconnect (a resend dropped by the \
             server?)",
            self.major_timeouts
        );
    }
}

pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The last `lines` lines of `s`.
pub fn tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// The run's seed (`SLUICE_LOAD_SEED` replays one).
pub fn seed() -> u64 {
    env_or("SLUICE_LOAD_SEED", 0x5EED)
}
