//! Issue #6, "nothing lost under load": 32 clients (one `Client`, so one connection, each) in
//! one tokio runtime run a mixed workload against one `sluice serve` for a bounded time, each
//! in its own subdirectory, each checking every reply against an in-memory model of its
//! directory as it goes. Then every surviving file is read back (over NFS and from the
//! server's disk) and compared with the model, and each directory listing with the model's
//! names.
//!
//! The workload (per client, drawn from a seeded xorshift; `SLUICE_LOAD_SEED` replays it):
//!
//! | op | share | calls |
//! |---|---|---|
//! | create | 20 % | CREATE (guarded), WRITEs of up to 1 MiB (UNSTABLE, DATA_SYNC or FILE_SYNC), COMMIT |
//! | write | 20 % | WRITE of 1 B..64 KiB at an offset in [0, size + 8 KiB] (holes read as zeros), COMMIT if unstable |
//! | read | 25 % | READ of up to 256 KiB at a random offset, or the whole file in rsize READs |
//! | readdir | 10 % | READDIRPLUS until eof; names must equal the model's |
//! | rename | 10 % | RENAME to a new name or over another file of the directory |
//! | remove | 10 % | REMOVE |
//! | stat | 5 % | LOOKUP + GETATTR; size must equal the model's |
//!
//! Every call is timed on the client (start to reply); the report gives p50/p99/max per
//! procedure, throughput, and the server's resident memory (VmHWM, VmRSS from
//! /proc/PID/status). The test fails on any failed call or mismatch and if the server's peak
//! RSS passes [`RSS_LIMIT_KIB`].
//!
//! Two more runs go through `sluice link`, which resets every connection after N bytes, with
//! a 5 s major timeout: the mixed workload (N = 2 MiB, mostly WRITEs and READs cut off) and a
//! metadata-heavy one of small files (N = 32 KiB, so CREATE, REMOVE and RENAME calls and
//! replies are cut off too). Every resent call must be answered (no major timeout) and a
//! resent non-idempotent call that already ran must get its first reply from the server's
//! duplicate request cache (else a guarded CREATE fails with EXIST, a REMOVE with NOENT).
//!
//! Duration: `SLUICE_LOAD_SECS` (default 10 s for the default suite; `bench/load.sh` runs
//! 60 s in a release build), `SLUICE_LOAD_LINK_SECS` for the link runs (default 5 s).
//! `SLUICE_LOAD_REPORT=PATH` also writes the first run's report there.

mod common;

use common::*;
use sluice_client::nfs3::{CreateHow, NfsFh3, Sattr3, StableHow};
use sluice_client::{Client, ClientOptions};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const CLIENTS: usize = 32;
/// Files per directory the workload aims at: creates turn into removes above it.
const FILES_PER_DIR_MAX: usize = 48;
/// Generous bound on the server's peak RSS: 32 clients with 4 MiB in flight each plus the
/// write-behind window stay far below it; a leak over a minute does not.
const RSS_LIMIT_KIB: u64 = 1 << 20;
/// The most errors printed when the test fails.
const ERRORS_SHOWN: usize = 20;

#[test]
fn thirty_two_clients_mixed_workload_loses_nothing() {
    let secs: u64 = env_or("SLUICE_LOAD_SECS", 10);
    let run = run_load("load", secs, None, ClientOptions::default(), Shape::Mixed);
    if let Ok(path) = std::env::var("SLUICE_LOAD_REPORT") {
        std::fs::write(&path, &run.report).expect("write SLUICE_LOAD_REPORT");
    }
    run.assert_clean(secs);
}

/// The same workload through `sluice link`, which resets every connection after 2 MiB: each
/// client reconnects many times and resends the calls it had in flight, non-idempotent ones
/// (CREATE, REMOVE, RENAME, WRITE) included. The server's duplicate request cache must answer
/// a resent call that already ran with its first reply, or a guarded CREATE would fail with
/// EXIST and a REMOVE with NOENT. And a resend must never be left unanswered: the clients
/// run with a 5 s major timeout, and none may expire.
#[test]
fn thirty_two_clients_through_a_resetting_link_lose_nothing() {
    let secs: u64 = env_or("SLUICE_LOAD_LINK_SECS", 5);
    let mut options = ClientOptions::default();
    options.rpc.table.major_timeout = Duration::from_secs(5);
    let run = run_load(
        "load-link",
        secs,
        Some(&["--reset-after", "2MiB"]),
        options,
        Shape::Mixed,
    );
    run.assert_resets_answered(secs);
}

/// Mostly metadata (CREATE, REMOVE, RENAME, small WRITEs) through a link that resets every
/// connection after 32 KiB: here the cut call, or the lost reply, is a non-idempotent
/// metadata call, and the resend of one that already ran must be answered from the server's
/// duplicate request cache.
#[test]
fn metadata_storm_through_a_link_resetting_every_32kib_loses_nothing() {
    let secs: u64 = env_or("SLUICE_LOAD_LINK_SECS", 5);
    let mut options = ClientOptions::default();
    options.rpc.table.major_timeout = Duration::from_secs(5);
    let run = run_load(
        "load-meta-link",
        secs,
        Some(&["--reset-after", "32KiB"]),
        options,
        Shape::Metadata,
    );
    run.assert_resets_answered(secs);
    let resent_metadata: u64 = ["CREATE", "REMOVE", "RENAME"]
        .iter()
        .map(|p| run.stats.get("NFS3", p).map_or(0, |s| s.retransmits))
        .sum();
    assert!(
        resent_metadata > 0,
        "no CREATE/REMOVE/RENAME was resent: the test did not exercise the reply cache"
    );
}

/// One finished load run.
struct LoadRun {
    workers: Vec<Worker>,
    errors: Vec<String>,
    report: String,
    hwm_kib: u64,
    server_log: String,
    /// All clients' per-procedure statistics.
    stats: sluice_client::ClientStats,
}

impl LoadRun {
    /// Clean, the link really reset connections, and no call waited for a major timeout.
    fn assert_resets_answered(&self, secs: u64) {
        self.assert_clean(secs);
        let (reconnects, major_timeouts) = self.workers.iter().fold((0, 0), |(r, m), w| {
            let t = w.client.transport_stats();
            (r + t.reconnects, m + t.table.major_timeouts)
        });
        assert!(
            reconnects >= CLIENTS as u64,
            "only {reconnects} reconnects: the link did not reset connections"
        );
        assert_eq!(
            major_timeouts, 0,
            "{major_timeouts} calls went unanswered for 5 s after a reconnect (a resend \
             dropped by the server?)"
        );
    }

    fn assert_clean(&self, secs: u64) {
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
        let ops: u64 = self.workers.iter().map(|w| w.ops).sum();
        assert!(
            ops >= CLIENTS as u64 * 10,
            "only {ops} operations in {secs} s: the clients hardly ran"
        );
        assert!(
            self.hwm_kib > 0 && self.hwm_kib < RSS_LIMIT_KIB,
            "server peak RSS {} KiB (limit {RSS_LIMIT_KIB} KiB)",
            self.hwm_kib
        );
    }
}

/// Runs the workload for `secs` against a fresh server (through a `sluice link` with
/// `link_flags` if given), verifies, prints the report.
fn run_load(
    tag: &str,
    secs: u64,
    link_flags: Option<&[&str]>,
    options: ClientOptions,
    shape: Shape,
) -> LoadRun {
    let seed: u64 = env_or("SLUICE_LOAD_SEED", 0x5EED);
    eprintln!("{tag}: {CLIENTS} clients, {secs} s, seed {seed:#x} (SLUICE_LOAD_SEED replays)");
    let dirs = TempDir::new(tag);
    let server = Sluice::start_in(&dirs);
    let link = link_flags.map(|f| Link::start(server.port, f));
    let port = link.as_ref().map_or(server.port, |l| l.port);
    let url = nfs_url(port, &server.export);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let run_for = Duration::from_secs(secs);
    let workers: Vec<Worker> = rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..CLIENTS {
            let url = url.clone();
            let options = options.clone();
            tasks.push(tokio::spawn(async move {
                let client = Client::connect(url.as_str(), options)
                    .await
                    .expect("connect");
                let mut w = Worker::new(client, i, seed, shape).await;
                w.run(run_for).await;
                w.verify_over_nfs().await;
                w
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.expect("worker panicked"));
        }
        out
    });
    let elapsed = started.elapsed();
    let hwm_kib = server.status_kib("VmHWM").unwrap_or(0);
    let rss_kib = server.status_kib("VmRSS").unwrap_or(0);

    // The server's disk agrees with every model too (everything was committed).
    let mut errors: Vec<String> = workers.iter().flat_map(|w| w.errors.clone()).collect();
    for w in &workers {
        errors.extend(w.verify_on_disk(&server.export));
    }
    let what = match shape {
        Shape::Mixed => "mixed workload",
        Shape::Metadata => "metadata-heavy workload (small files)",
    };
    let title = match link_flags {
        None => format!("{CLIENTS} clients, {what}, {secs} s"),
        Some(f) => format!(
            "{CLIENTS} clients, {what}, {secs} s, through sluice link {}",
            f.join(" ")
        ),
    };
    let report = report(&title, &workers, secs, seed, elapsed, hwm_kib, rss_kib);
    println!("{report}");
    let mut stats = sluice_client::ClientStats::default();
    for w in &workers {
        stats.merge(&w.client.stats());
    }
    LoadRun {
        workers,
        errors,
        report,
        hwm_kib,
        server_log: server.log_text(),
        stats,
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

// --- one client --------------------------------------------------------------------------------

/// What the workload's data looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// Files of 0..2 MiB, WRITEs up to 64 KiB (and 1 MiB pieces when creating), READs of
    /// rsize: the default.
    Mixed,
    /// Files under 16 KiB, WRITEs up to 2 KiB, READs of 4 KiB: mostly metadata calls, every
    /// message small, so a link that resets every few KiB catches CREATE, REMOVE and RENAME
    /// (their calls or their replies) in the act.
    Metadata,
}

/// A file of the model: its handle (kept across renames) and contents.
struct ModelFile {
    fh: NfsFh3,
    data: Vec<u8>,
}

struct Worker {
    client: Client,
    id: usize,
    rng: Rng,
    dir: NfsFh3,
    dir_name: String,
    files: BTreeMap<String, ModelFile>,
    next_name: u64,
    shape: Shape,
    /// Latency of every call, by procedure.
    latencies: BTreeMap<&'static str, Vec<Duration>>,
    errors: Vec<String>,
    ops: u64,
    bytes_written: u64,
    bytes_read: u64,
}

/// Times one call into the worker's latency table; a failed call is recorded as an error and
/// yields None.
macro_rules! call {
    ($w:expr, $proc:literal, $what:expr, $fut:expr) => {{
        let t0 = Instant::now();
        let r = $fut.await;
        $w.latencies.entry($proc).or_default().push(t0.elapsed());
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                $w.fail(format!("{} {}: {e}", $proc, $what));
                None
            }
        }
    }};
}

impl Worker {
    async fn new(client: Client, id: usize, seed: u64, shape: Shape) -> Worker {
        let dir_name = format!("c{id:02}");
        let root = client.root().clone();
        let dir = client
            .mkdir(&root, &dir_name, mode(0o755))
            .await
            .expect("mkdir")
            .obj
            .expect("MKDIR returned a handle");
        Worker {
            client,
            id,
            rng: Rng::new(seed ^ (id as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            dir,
            dir_name,
            files: BTreeMap::new(),
            next_name: 0,
            shape,
            latencies: BTreeMap::new(),
            errors: Vec::new(),
            ops: 0,
            bytes_written: 0,
            bytes_read: 0,
        }
    }

    fn fail(&mut self, msg: String) {
        self.errors.push(format!("client {}: {msg}", self.id));
    }

    async fn run(&mut self, run_for: Duration) {
        let deadline = Instant::now() + run_for;
        while Instant::now() < deadline {
            let roll = self.rng.below(100);
            let n = self.files.len();
            match roll {
                _ if n == 0 => self.create().await,
                0..=19 if n >= FILES_PER_DIR_MAX => self.remove().await,
                0..=19 => self.create().await,
                20..=39 => self.write().await,
                40..=64 => self.read().await,
                65..=74 => self.readdir().await,
                75..=84 => self.rename().await,
                85..=94 => self.remove().await,
                _ => self.stat().await,
            }
            self.ops += 1;
        }
    }

    fn pick(&mut self) -> String {
        let i = self.rng.below(self.files.len() as u64) as usize;
        self.files.keys().nth(i).expect("non-empty").clone()
    }

    fn random_data(&mut self, len: usize) -> Vec<u8> {
        pattern(self.rng.next(), len)
    }

    /// A size: mostly small, sometimes up to 2 MiB.
    fn random_size(&mut self) -> usize {
        match (self.rng.below(8), self.shape) {
            (1, _) => 0,
            (_, Shape::Metadata) => self.rng.below(2 << 10) as usize,
            (0, Shape::Mixed) => self.rng.below(2 << 20) as usize,
            (_, Shape::Mixed) => self.rng.below(256 << 10) as usize,
        }
    }

    /// READ size: rsize, or 4 KiB for the metadata shape (every reply stays small).
    fn read_chunk(&self) -> u64 {
        match self.shape {
            Shape::Mixed => u64::from(self.client.rsize()),
            Shape::Metadata => 4096,
        }
    }

    fn random_stable(&mut self) -> StableHow {
        match self.rng.below(4) {
            0 => StableHow::FILE_SYNC,
            1 => StableHow::DATA_SYNC,
            _ => StableHow::UNSTABLE,
        }
    }

    async fn create(&mut self) {
        let name = format!("f{}", self.next_name);
        self.next_name += 1;
        let how = CreateHow::Guarded(mode(0o644));
        let Some(res) = call!(
            self,
            "CREATE",
            &name,
            self.client.create(&self.dir, &name, how)
        ) else {
            return;
        };
        let Some(fh) = res.obj else {
            self.fail(format!("CREATE {name}: no handle in the reply"));
            return;
        };
        let len = self.random_size();
        let data = self.random_data(len);
        let stable = self.random_stable();
        if self.write_range(&fh, &name, 0, &data, stable).await {
            self.files.insert(name, ModelFile { fh, data });
        }
    }

    async fn write(&mut self) {
        let name = self.pick();
        let size = self.files[&name].data.len() as u64;
        let (offset, len) = match self.shape {
            Shape::Mixed => (
                self.rng.below(size + 8192 + 1),
                1 + self.rng.below(64 << 10) as usize,
            ),
            // Files stay below 16 KiB.
            Shape::Metadata => (
                self.rng.below(size.min(12 << 10) + 1),
                1 + self.rng.below(2 << 10) as usize,
            ),
        };
        let data = self.random_data(len);
        let stable = self.random_stable();
        let fh = self.files[&name].fh.clone();
        if self.write_range(&fh, &name, offset, &data, stable).await {
            let f = &mut self.files.get_mut(&name).expect("picked").data;
            let end = offset as usize + len;
            if f.len() < end {
                f.resize(end, 0); // a hole before `offset` reads as zeros
            }
            f[offset as usize..end].copy_from_slice(&data);
        }
    }

    /// WRITEs `data` at `offset` in pieces of at most wsize, then COMMIT if any reply was not
    /// FILE_SYNC; checks counts and that COMMIT's verifier is the WRITEs' (no restart here, so
    /// a change would mean the server dropped data). True if all of it is on stable storage.
    async fn write_range(
        &mut self,
        fh: &NfsFh3,
        name: &str,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> bool {
        let wsize = self.client.wsize() as usize;
        let mut verf = None;
        let mut done = 0usize;
        while done < data.len() {
            let piece = &data[done..(done + wsize).min(data.len())];
            let at = offset + done as u64;
            let what = format!("{name} @{at}+{}", piece.len());
            let Some(res) = call!(
                self,
                "WRITE",
                &what,
                self.client.write(fh, at, piece.to_vec().into(), stable)
            ) else {
                return false;
            };
            if res.count == 0 {
                self.fail(format!("WRITE {what}: wrote 0 bytes"));
                return false;
            }
            if res.committed.0 < stable.0 {
                self.fail(format!(
                    "WRITE {what}: asked stable {} got {}",
                    stable.0, res.committed.0
                ));
            }
            if res.committed != StableHow::FILE_SYNC {
                verf = Some(res.verf);
            }
            done += res.count as usize;
            self.bytes_written += u64::from(res.count);
        }
        if let Some(v) = verf {
            let Some(c) = call!(self, "COMMIT", name, self.client.commit(fh, 0, 0)) else {
                return false;
            };
            if c.verf != v {
                self.fail(format!(
                    "COMMIT {name}: verifier changed without a server restart"
                ));
                return false;
            }
        }
        true
    }

    async fn read(&mut self) {
        let name = self.pick();
        let fh = self.files[&name].fh.clone();
        let size = self.files[&name].data.len() as u64;
        let rsize = self.read_chunk();
        let (offset, len) = if self.rng.below(3) == 0 {
            (0, size + 1) // the whole file, to past its end
        } else {
            let off = self.rng.below(size + 1);
            (off, 1 + self.rng.below(256 << 10))
        };
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            let count = (end - pos).min(rsize) as u32;
            let what = format!("{name} @{pos}+{count}");
            let Some(res) = call!(self, "READ", &what, self.client.read(&fh, pos, count)) else {
                return;
            };
            let got = res.data.to_vec();
            self.bytes_read += got.len() as u64;
            let model = &self.files[&name].data;
            let want_end = (pos as usize + count as usize).min(model.len());
            let want = model.get(pos as usize..want_end).unwrap_or(&[]);
            if got != want {
                let msg = format!(
                    "READ {what}: {} bytes differ from the model's {} (size {})",
                    got.len(),
                    want.len(),
                    model.len()
                );
                self.fail(msg);
                return;
            }
            let at_end = pos + got.len() as u64 >= model.len() as u64;
            if res.eof != at_end && !(got.is_empty() && at_end) {
                self.fail(format!(
                    "READ {what}: eof {} but model size {}",
                    res.eof,
                    model.len()
                ));
                return;
            }
            if got.is_empty() {
                break;
            }
            pos += got.len() as u64;
        }
    }

    async fn readdir(&mut self) {
        let Some(names) = self.list().await else {
            return;
        };
        let want: BTreeSet<String> = self.files.keys().cloned().collect();
        if names != want {
            self.fail(format!(
                "READDIRPLUS {}: server has {:?}, model {:?}",
                self.dir_name,
                names.difference(&want).collect::<Vec<_>>(),
                want.difference(&names).collect::<Vec<_>>()
            ));
        }
    }

    /// The directory's names (without "." and ".."), READDIRPLUS until eof.
    async fn list(&mut self) -> Option<BTreeSet<String>> {
        let (mut cookie, mut verf) = (0u64, [0u8; 8]);
        let mut names = BTreeSet::new();
        let dir = self.dir.clone();
        loop {
            let what = format!("{} cookie {cookie}", self.dir_name);
            let res = call!(
                self,
                "READDIRPLUS",
                &what,
                self.client
                    .readdirplus(&dir, cookie, verf, 16 << 10, 64 << 10)
            )?;
            verf = res.cookieverf;
            for e in &res.entries {
                cookie = e.cookie;
                let n = String::from_utf8_lossy(&e.name).into_owned();
                if n != "." && n != ".." {
                    names.insert(n);
                }
            }
            if res.eof {
                return Some(names);
            }
            if res.entries.is_empty() {
                self.fail(format!("READDIRPLUS {what}: empty reply without eof"));
                return None;
            }
        }
    }

    async fn rename(&mut self) {
        let from = self.pick();
        let to = if self.files.len() > 1 && self.rng.below(3) == 0 {
            self.pick() // over an existing file (or onto itself: a no-op)
        } else {
            let n = format!("f{}", self.next_name);
            self.next_name += 1;
            n
        };
        let dir = self.dir.clone();
        let what = format!("{from} -> {to}");
        if call!(
            self,
            "RENAME",
            &what,
            self.client.rename(&dir, &from, &dir, &to)
        )
        .is_some()
            && from != to
        {
            let f = self.files.remove(&from).expect("picked");
            self.files.insert(to, f);
        }
    }

    async fn remove(&mut self) {
        let name = self.pick();
        let dir = self.dir.clone();
        if call!(self, "REMOVE", &name, self.client.remove(&dir, &name)).is_some() {
            self.files.remove(&name);
        }
    }

    async fn stat(&mut self) {
        let name = self.pick();
        let dir = self.dir.clone();
        let Some(l) = call!(self, "LOOKUP", &name, self.client.lookup(&dir, &name)) else {
            return;
        };
        let Some(a) = call!(self, "GETATTR", &name, self.client.getattr(&l.object)) else {
            return;
        };
        let want = self.files[&name].data.len() as u64;
        if a.obj_attributes.size != want {
            self.fail(format!(
                "GETATTR {name}: size {} but model {want}",
                a.obj_attributes.size
            ));
        }
    }

    /// After the run: the listing and every file, through the handles kept since creation
    /// (across renames), against the model.
    async fn verify_over_nfs(&mut self) {
        self.readdir().await;
        let names: Vec<String> = self.files.keys().cloned().collect();
        for name in names {
            let f = &self.files[&name];
            let fh = f.fh.clone();
            let want_len = f.data.len();
            let mut got = Vec::with_capacity(want_len);
            let rsize = self.read_chunk() as u32;
            loop {
                let r = self.client.read(&fh, got.len() as u64, rsize).await;
                match r {
                    Ok(res) => {
                        let eof = res.eof;
                        let n = res.data.len();
                        got.extend_from_slice(&res.data.to_vec());
                        if eof || n == 0 {
                            break;
                        }
                    }
                    Err(e) => {
                        self.fail(format!("final READ {name}: {e}"));
                        break;
                    }
                }
            }
            if got != self.files[&name].data {
                self.fail(format!(
                    "final read of {}/{name}: {} bytes, model {want_len}, contents differ",
                    self.dir_name,
                    got.len()
                ));
            }
        }
    }

    /// The server's directory, read directly: same names, same bytes.
    fn verify_on_disk(&self, export: &std::path::Path) -> Vec<String> {
        let mut errors = Vec::new();
        let dir = export.join(&self.dir_name);
        let names: BTreeSet<String> = match std::fs::read_dir(&dir) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(e) => return vec![format!("{}: {e}", dir.display())],
        };
        let want: BTreeSet<String> = self.files.keys().cloned().collect();
        if names != want {
            errors.push(format!(
                "disk {}: extra {:?}, missing {:?}",
                dir.display(),
                names.difference(&want).collect::<Vec<_>>(),
                want.difference(&names).collect::<Vec<_>>()
            ));
        }
        for (name, f) in &self.files {
            match std::fs::read(dir.join(name)) {
                Ok(d) if d == f.data => {}
                Ok(d) => errors.push(format!(
                    "disk {}/{name}: {} bytes, model {}, contents differ",
                    self.dir_name,
                    d.len(),
                    f.data.len()
                )),
                Err(e) => errors.push(format!("disk {}/{name}: {e}", self.dir_name)),
            }
        }
        errors
    }
}

fn mode(m: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(m),
        ..Sattr3::default()
    }
}

/// xorshift64*: the workload's only randomness, seeded per client.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n` (0 for n == 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

// --- the report --------------------------------------------------------------------------------

fn report(
    title: &str,
    workers: &[Worker],
    secs: u64,
    seed: u64,
    elapsed: Duration,
    hwm_kib: u64,
    rss_kib: u64,
) -> String {
    let mut all: BTreeMap<&'static str, Vec<Duration>> = BTreeMap::new();
    for w in workers {
        for (p, v) in &w.latencies {
            all.entry(p).or_default().extend_from_slice(v);
        }
    }
    let ops: u64 = workers.iter().map(|w| w.ops).sum();
    let calls: usize = all.values().map(|v| v.len()).sum();
    let written: u64 = workers.iter().map(|w| w.bytes_written).sum();
    let read: u64 = workers.iter().map(|w| w.bytes_read).sum();
    let files: usize = workers.iter().map(|w| w.files.len()).sum();
    let errors: usize = workers.iter().map(|w| w.errors.len()).sum();
    let transport = workers.iter().fold((0, 0), |(r, c), w| {
        let t = w.client.transport_stats();
        (r + t.table.retransmissions, c + t.reconnects)
    });
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let mut s = String::new();
    s.push_str(&format!(
        "## sluice load: {title}\n\n\
         - seed {seed:#x}, wall time {:.1} s (run + final verification)\n\
         - {ops} operations, {calls} calls ({:.0} calls/s), {errors} errors\n\
         - {:.1} MiB written, {:.1} MiB read, {files} files left and verified\n\
         - transport: {} retransmissions, {} reconnects\n\
         - server memory: VmHWM {:.1} MiB, VmRSS {:.1} MiB at the end (limit {:.0} MiB)\n\n",
        elapsed.as_secs_f64(),
        calls as f64 / secs.max(1) as f64,
        mib(written),
        mib(read),
        transport.0,
        transport.1,
        hwm_kib as f64 / 1024.0,
        rss_kib as f64 / 1024.0,
        RSS_LIMIT_KIB as f64 / 1024.0,
    ));
    let mut stats = sluice_client::ClientStats::default();
    for w in workers {
        stats.merge(&w.client.stats());
    }
    s.push_str(
        "| procedure | calls | resent | p50 ms | p99 ms | max ms |\n\
         |---|---:|---:|---:|---:|---:|\n",
    );
    for (p, v) in &mut all {
        v.sort_unstable();
        let q = |f: f64| v[((v.len() as f64 * f) as usize).min(v.len() - 1)];
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        s.push_str(&format!(
            "| {p} | {} | {} | {:.3} | {:.3} | {:.3} |\n",
            v.len(),
            stats.get("NFS3", p).map_or(0, |s| s.retransmits),
            ms(q(0.50)),
            ms(q(0.99)),
            ms(*v.last().expect("non-empty"))
        ));
    }
    s
}
