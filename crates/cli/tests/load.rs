//! Issue #6, "nothing lost under load", and issue #30, the same over NFSv4.1: 32 clients
//! (one library client, so one connection, each) in one tokio runtime run a mixed workload
//! against one `sluice serve` for a bounded time, each in its own subdirectory, each checking
//! every reply against an in-memory model as it goes. Then every surviving file is read back
//! (over NFS and from the server's disk) and compared with the model, and each directory
//! listing with the model's names.
//!
//! The workload generator, the model's checks, the report and the final assertions are
//! shared by both versions (`loadgen/`, where the op mix is tabled); the clients are
//! `loadgen/v3.rs` (typed NFSv3 calls) and `loadgen/v4.rs` (a session each, SEQUENCE-led
//! COMPOUNDs: OPEN, WRITE, COMMIT, CLOSE, READ under open stateids, READDIR, RENAME, REMOVE,
//! LOOKUP, GETATTR). Drawn from a seeded xorshift per client; `SLUICE_LOAD_SEED` replays it.
//!
//! Over NFSv4.1 the clients also read each other's files: a reader keeps a few opens (with
//! the read delegations that came with them) across operations, so the owner's next OPEN for
//! writing, RENAME or REMOVE of such a file makes the server recall the delegation from the
//! reader's client (CB_RECALL over its back channel) while everything else goes on. The
//! model stays exact because only a file's owner changes it and the test orders each
//! change against the other clients' reads of that file (see `loadgen/v4.rs`). At the end
//! every client is destroyed (DESTROY_SESSION, DESTROY_CLIENTID) and the server's state
//! gauges (`--metrics`: clients, sessions, open and lock stateids, locks, delegations) must
//! all be back to zero; recalls must have happened, and none may have timed out or ended in
//! a revocation.
//!
//! Every call is timed on the client (start to reply); the report gives p50/p99/max per
//! procedure (over NFSv4.1: per COMPOUND, named by its main op), throughput, and the server's
//! resident memory (VmHWM, VmRSS from /proc/PID/status). A test fails on any failed call or
//! mismatch and if the server's peak RSS passes `RSS_LIMIT_KIB`.
//!
//! More runs go through `sluice link`, which resets every connection after N bytes, with a
//! 5 s major timeout: the mixed workload (N = 2 MiB, mostly WRITEs and READs cut off) and a
//! metadata-heavy one of small files (N = 32 KiB, so CREATE, REMOVE and RENAME calls and
//! replies are cut off too), over both versions. Every resent call must be answered (no
//! major timeout) and a resent non-idempotent call that already ran must get its first
//! reply: over NFSv3 from the server's duplicate request cache, over NFSv4.1 from the
//! session's slot (its reply cache: else a guarded CREATE or OPEN fails with EXIST, a
//! REMOVE with NOENT). An NFSv4.1 session outlives its connection: the client re-binds the
//! new connection (its back channel too) and goes on in the same session.
//!
//! Duration: `SLUICE_LOAD_SECS` (default 10 s for the default suite; `bench/load.sh` runs
//! 60 s in a release build), `SLUICE_LOAD_LINK_SECS` for the link runs (default 5 s). Through
//! the link a client goes on past that until its connection was reset at least once (a
//! loaded machine may move less than 2 MiB per client in 5 s), at most 6 x as long.
//! `SLUICE_LOAD_REPORT=PATH` also writes the NFSv3 run's report there,
//! `SLUICE_LOAD_REPORT_V41=PATH` the NFSv4.1 run's.

mod common;
mod loadgen;

use common::*;
use loadgen::*;
use sluice_client::url::NfsUrl;
use sluice_client::v4::{Client as Client4, Minor, V4Options};
use sluice_client::{Client, ClientOptions, ClientStats};
use std::time::{Duration, Instant};

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

/// The mixed workload over NFSv4.1 (see the module docs): sessions, opens, read delegations
/// granted and recalled between the clients, and at the end every client destroyed and the
/// server's state gauges back to zero.
#[test]
fn thirty_two_v41_clients_mixed_workload_lose_nothing() {
    let secs: u64 = env_or("SLUICE_LOAD_SECS", 10);
    let (run, recalls) = run_load_v41(
        "load-v41",
        secs,
        None,
        ClientOptions::default(),
        Shape::Mixed,
    );
    if let Ok(path) = std::env::var("SLUICE_LOAD_REPORT_V41") {
        std::fs::write(&path, &run.report).expect("write SLUICE_LOAD_REPORT_V41");
    }
    run.assert_clean(secs);
    recalls.assert_exercised(false);
}

/// The NFSv4.1 workload through a link that resets every connection after 2 MiB: each
/// client's session outlives many connections; what was in flight is resent on the new one
/// in the same slot and answered from the slot's reply cache if it had run.
#[test]
fn thirty_two_v41_clients_through_a_resetting_link_lose_nothing() {
    let secs: u64 = env_or("SLUICE_LOAD_LINK_SECS", 5);
    let mut options = ClientOptions::default();
    options.rpc.table.major_timeout = Duration::from_secs(5);
    let (run, recalls) = run_load_v41(
        "load-v41-link",
        secs,
        Some(&["--reset-after", "2MiB"]),
        options,
        Shape::Mixed,
    );
    run.assert_resets_answered(secs);
    recalls.assert_exercised(true);
}

/// Mostly metadata over NFSv4.1 through a link that resets every connection after 32 KiB:
/// resent OPENs (creating, GUARDED4), REMOVEs and RENAMEs that already ran must get their
/// first reply from the session's reply cache.
#[test]
fn v41_metadata_storm_through_a_link_resetting_every_32kib_loses_nothing() {
    let secs: u64 = env_or("SLUICE_LOAD_LINK_SECS", 5);
    let mut options = ClientOptions::default();
    options.rpc.table.major_timeout = Duration::from_secs(5);
    let (run, recalls) = run_load_v41(
        "load-v41-meta-link",
        secs,
        Some(&["--reset-after", "32KiB"]),
        options,
        Shape::Metadata,
    );
    run.assert_resets_answered(secs);
    recalls.assert_exercised(true);
    let resent_metadata: u64 = ["OPEN", "REMOVE", "RENAME"]
        .iter()
        .map(|p| run.stats.get("NFS4", p).map_or(0, |s| s.retransmits))
        .sum();
    assert!(
        resent_metadata > 0,
        "no OPEN/REMOVE/RENAME was resent: the test did not exercise the reply cache"
    );
}

/// Runs the NFSv3 workload for `secs` against a fresh server (through a `sluice link` with
/// `link_flags` if given), verifies, prints the report.
fn run_load(
    tag: &str,
    secs: u64,
    link_flags: Option<&[&str]>,
    options: ClientOptions,
    shape: Shape,
) -> LoadRun {
    let seed = seed();
    eprintln!("{tag}: {CLIENTS} clients, {secs} s, seed {seed:#x} (SLUICE_LOAD_SEED replays)");
    let dirs = TempDir::new(tag);
    let server = Sluice::start_in(&dirs);
    let link = link_flags.map(|f| Link::start(server.port, f));
    let port = link.as_ref().map_or(server.port, |l| l.port);
    let url = nfs_url(port, &server.export);
    let rt = runtime();
    let started = Instant::now();
    let run_for = RunFor {
        time: Duration::from_secs(secs),
        until_reset: link_flags.is_some(),
    };
    let workers: Vec<v3::Worker> = rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..CLIENTS {
            let url = url.clone();
            let options = options.clone();
            tasks.push(tokio::spawn(async move {
                let client = Client::connect(url.as_str(), options)
                    .await
                    .expect("connect");
                let mut w = v3::Worker::new(client, i, seed, shape).await;
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
    let mut errors: Vec<String> = workers
        .iter()
        .flat_map(|w| w.tally.errors.clone())
        .collect();
    for w in &workers {
        errors.extend(w.verify_on_disk(&server.export));
    }
    let mut stats = ClientStats::default();
    let (mut retransmissions, mut reconnects, mut major_timeouts) = (0, 0, 0);
    for w in &workers {
        stats.merge(&w.client.stats());
        let t = w.client.transport_stats();
        retransmissions += t.table.retransmissions;
        reconnects += t.reconnects;
        major_timeouts += t.table.major_timeouts;
    }
    let report = report(&ReportInput {
        title: title("NFSv3", shape, secs, link_flags),
        tallies: workers.iter().map(|w| &w.tally).collect(),
        files_left: workers.iter().map(|w| w.files_left()).sum(),
        retransmissions,
        reconnects,
        stats: &stats,
        prog: "NFS3",
        secs,
        seed,
        elapsed,
        hwm_kib,
        rss_kib,
        extra: Vec::new(),
    });
    println!("{report}");
    LoadRun {
        errors,
        report,
        ops: workers.iter().map(|w| w.tally.ops).sum(),
        hwm_kib,
        reconnects,
        major_timeouts,
        server_log: server.log_text(),
        stats,
    }
}

/// The NFSv4 state gauges that must be zero once every client is destroyed, as the server's
/// metrics name them.
const STATE_GAUGES: &[&str] = &[
    "sluice_nfs4_clients",
    "sluice_nfs4_sessions",
    "sluice_nfs4_open_stateids",
    "sluice_nfs4_lock_stateids",
    "sluice_nfs4_locks",
    "sluice_nfs4_delegations{type=\"read\"}",
    "sluice_nfs4_delegations{type=\"write\"}",
];

/// How long a new client's back channel may take to come up (CREATE_SESSION offers it; the
/// library marks it up once the session is made): generous for a loaded 2-core machine.
const BACK_CHANNEL_WAIT: Duration = Duration::from_secs(30);

/// The server's delegation counters at the end of an NFSv4.1 run, and the sessions made.
struct Recalls {
    /// CREATE_SESSIONs the server ran: one per client, if no session was lost to a reset.
    sessions_made: u64,
    granted: u64,
    sent: u64,
    answered: u64,
    timed_out: u64,
    revoked: u64,
}

impl Recalls {
    /// Each client kept its one session, delegations were granted and recalled, and none
    /// ended in a revocation. Without resets every recall sent was answered. Through a
    /// resetting link a CB_RECALL may be lost with its connection (before or after it went on
    /// the wire): the server counts it timed out and sends it again once the client's back
    /// channel is bound again, so every one sent was answered or lost, none revoked.
    fn assert_exercised(&self, resets: bool) {
        assert_eq!(
            self.sessions_made, CLIENTS as u64,
            "CREATE_SESSIONs: each client keeps its one session (across reconnects too)"
        );
        let what = format!(
            "{} read delegations granted; recalls: {} sent, {} answered, {} timed out \
             (lost), {} delegations revoked",
            self.granted, self.sent, self.answered, self.timed_out, self.revoked
        );
        assert!(
            self.granted > 0 && self.sent > 0 && self.answered > 0,
            "the run did not exercise recalls: {what}"
        );
        assert_eq!(self.revoked, 0, "{what}");
        if resets {
            assert!(self.answered + self.timed_out >= self.sent, "{what}");
        } else {
            assert_eq!((self.answered, self.timed_out), (self.sent, 0), "{what}");
        }
    }
}

/// Runs the NFSv4.1 workload (see the module docs) for `secs` against a fresh server with its
/// metrics endpoint (through a `sluice link` with `link_flags` if given), verifies, destroys
/// every client, checks the server's state gauges, prints the report.
fn run_load_v41(
    tag: &str,
    secs: u64,
    link_flags: Option<&[&str]>,
    options: ClientOptions,
    shape: Shape,
) -> (LoadRun, Recalls) {
    let seed = seed();
    eprintln!(
        "{tag}: {CLIENTS} NFSv4.1 clients, {secs} s, seed {seed:#x} (SLUICE_LOAD_SEED replays)"
    );
    let dirs = TempDir::new(tag);
    let (export, state) = (dirs.path().join("export"), dirs.path().join("state"));
    std::fs::create_dir_all(&export).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let metrics = format!("127.0.0.1:{}", free_port());
    let server = Sluice::start(
        &export,
        &state,
        &["--no-root-squash", "--metrics", &metrics],
        &dirs.path().join("server.log"),
    );
    let link = link_flags.map(|f| Link::start(server.port, f));
    let port = link.as_ref().map_or(server.port, |l| l.port);
    let url = NfsUrl::parse(&nfs_url_version(port, &server.export, "4.1")).expect("url");
    let registry = v4::Registry::new(CLIENTS);
    let rt = runtime();
    let started = Instant::now();
    let run_for = RunFor {
        time: Duration::from_secs(secs),
        until_reset: link_flags.is_some(),
    };
    let workers: Vec<v4::Worker> = rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..CLIENTS {
            let (url, options, registry) = (url.clone(), options.clone(), registry.clone());
            tasks.push(tokio::spawn(async move {
                let client = Client4::connect(&url, &options, Minor::V1, V4Options::default())
                    .await
                    .expect("connect");
                let t0 = Instant::now();
                while !client.back_channel_up() {
                    assert!(
                        t0.elapsed() < BACK_CHANNEL_WAIT,
                        "client {i}: no back channel after {BACK_CHANNEL_WAIT:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                let mut w = v4::Worker::new(client, &url.path, i, seed, shape, registry).await;
                w.run(run_for).await;
                w.close_held().await;
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

    // Every open is closed now: the disk holds exactly the models (no hidden name of a file
    // removed while open is left either).
    let mut errors: Vec<String> = workers
        .iter()
        .flat_map(|w| w.tally.errors.clone())
        .collect();
    rt.block_on(async {
        for w in &workers {
            errors.extend(w.verify_on_disk(&server.export).await);
        }
    });
    let mut stats = ClientStats::default();
    let (mut retransmissions, mut reconnects, mut major_timeouts) = (0, 0, 0);
    for w in &workers {
        stats.merge(&w.client.stats());
        let t = w.client.transport_stats();
        retransmissions += t.table.retransmissions;
        reconnects += t.reconnects;
        major_timeouts += t.table.major_timeouts;
    }

    // Every client destroyed: nothing of them may be left in the server's state.
    rt.block_on(async {
        for w in &workers {
            w.client.shutdown().await;
        }
    });
    let text = prometheus(&metrics);
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in the server's metrics:\n{text}"))
    };
    for g in STATE_GAUGES {
        let v: u64 = value(g);
        if v != 0 {
            errors.push(format!("server {g} = {v} after every client was destroyed"));
        }
    }
    let ops = op_counts(&metrics);
    let op_calls = |op: &str| ops.get(op).map_or(0, |c| c.0);
    let recalls = Recalls {
        sessions_made: op_calls("CREATE_SESSION"),
        granted: value("sluice_nfs4_delegations_granted_total{type=\"read\"}"),
        sent: value("sluice_nfs4_recalls_sent_total"),
        answered: value("sluice_nfs4_recalls_answered_total"),
        timed_out: value("sluice_nfs4_recalls_timed_out_total"),
        revoked: value("sluice_nfs4_delegations_revoked_total"),
    };
    let shared: u64 = workers.iter().map(|w| w.shared_opens).sum();
    let delegated: u64 = workers.iter().map(|w| w.delegations).sum();
    let removed_reads: u64 = workers.iter().map(|w| w.removed_reads).sum();
    let busy_skips: u64 = workers.iter().map(|w| w.busy_skips).sum();
    let extra = vec![
        format!(
            "- sessions: {} made, {} connections bound to one (BIND_CONN_TO_SESSION)",
            recalls.sessions_made,
            op_calls("BIND_CONN_TO_SESSION")
        ),
        format!(
            "- delegations: {} read delegations granted ({delegated} OPENs for reading came \
             with one); {shared} OPENs of another client's file; {removed_reads} reads through \
             an open of a file removed since; {busy_skips} reads left out while the owner \
             changed the file",
            recalls.granted
        ),
        format!(
            "- server op errors, each resent by the client until it went through (NFS4ERR_DELAY \
             while a delegation was recalled): {}",
            ["OPEN", "RENAME", "REMOVE"]
                .iter()
                .map(|op| format!("{op} {}", ops.get(*op).map_or(0, |c| c.1)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        format!(
            "- recalls: {} sent, {} answered, {} timed out; {} delegations revoked",
            recalls.sent, recalls.answered, recalls.timed_out, recalls.revoked
        ),
        format!(
            "- teardown: DESTROY_SESSION {} calls ({} errors), DESTROY_CLIENTID {} calls ({} \
             errors)",
            op_calls("DESTROY_SESSION"),
            ops.get("DESTROY_SESSION").map_or(0, |c| c.1),
            op_calls("DESTROY_CLIENTID"),
            ops.get("DESTROY_CLIENTID").map_or(0, |c| c.1),
        ),
        format!(
            "- server state after every client was destroyed: {}",
            STATE_GAUGES
                .iter()
                .map(|g| format!("{} {}", g.trim_start_matches("sluice_nfs4_"), value(g)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ];
    let report = report(&ReportInput {
        title: title("NFSv4.1", shape, secs, link_flags),
        tallies: workers.iter().map(|w| &w.tally).collect(),
        files_left: workers.iter().map(|w| w.files_left()).sum(),
        retransmissions,
        reconnects,
        stats: &stats,
        prog: "NFS4",
        secs,
        seed,
        elapsed,
        hwm_kib,
        rss_kib,
        extra,
    });
    println!("{report}");
    let run = LoadRun {
        errors,
        report,
        ops: workers.iter().map(|w| w.tally.ops).sum(),
        hwm_kib,
        reconnects,
        major_timeouts,
        server_log: server.log_text(),
        stats,
    };
    (run, recalls)
}

fn title(version: &str, shape: Shape, secs: u64, link_flags: Option<&[&str]>) -> String {
    let what = shape.describe();
    match link_flags {
        None => format!("{CLIENTS} {version} clients, {what}, {secs} s"),
        Some(f) => format!(
            "{CLIENTS} {version} clients, {what}, {secs} s, through sluice link {}",
            f.join(" ")
        ),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
