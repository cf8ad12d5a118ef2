//! The client commands of the `sluice` binary: `cp`, `cat`, `ls`, `stat`, `mkdir`, `rm`, `mv`,
//! `ln`.
//!
//! Each is a clap-derive struct and an async function. The binary embeds [`ClientCmd`] in its
//! own subcommands and calls [`run`]; an `Err` is the message to print (already naming the path
//! and the NFS status in words, e.g. `nfs://h/x/y: permission denied (NFS3ERR_ACCES)`), to be
//! followed by a non-zero exit.
//!
//! Each is written once over [`sluice_client::namespace::Namespace`], so it works over NFSv3 and
//! NFSv4.1 / 4.2 alike; a command's `Session` connects with the version each URL asks for
//! (none: 4.2, 4.1, then 3, see [`sluice_client::connect`]).
//!
//! Every command takes `--stats` (per-procedure RPC statistics, READ sizes and depth,
//! readahead windows and waste, retransmissions, whether the connections used RPC-with-TLS
//! (and its version and cipher suite) and the NFS version chosen, on stderr at the end), `--soft N`, `--timeo SECONDS`, `--readahead auto|off|fixed:SIZE`,
//! `--readahead-budget SIZE`, `--trace-readahead`, `--udp`, `--nconnect N` and the
//! RPC-with-TLS files `--tls-ca`, `--tls-cert`, `--tls-key` (for `?xprtsec=tls|mtls` URLs).

mod cp;
mod ops;

pub use cp::CpArgs;
pub use ops::{CatArgs, LnArgs, LsArgs, MkdirArgs, MvArgs, RmArgs, StatArgs};

use clap::{Args, Subcommand};
use sluice_client::client::{is_path_prefix, strip_export, ClientOptions};
use sluice_client::namespace::Namespace;
use sluice_client::stats::{ClientStats, ReadStats};
use sluice_client::url::NfsUrl;
use std::sync::Arc;
use std::time::Duration;

/// The client commands.
#[derive(Debug, Clone, Subcommand)]
pub enum ClientCmd {
    /// Copy files and trees; either side may be an nfs:// URL or a local path.
    Cp(CpArgs),
    /// Write files to standard output.
    Cat(CatArgs),
    /// List directories.
    Ls(LsArgs),
    /// Show file attributes (and with --rpc the RPC statistics).
    Stat(StatArgs),
    /// Create directories.
    Mkdir(MkdirArgs),
    /// Remove files and (with -r) trees.
    Rm(RmArgs),
    /// Rename within one export.
    Mv(MvArgs),
    /// Make a hard link (within one export) or, with -s, a symbolic link.
    Ln(LnArgs),
}

/// Options every client command takes.
#[derive(Debug, Clone, Default, Args)]
pub struct CommonArgs {
    /// Print per-procedure RPC statistics (like nfsstat -c) to stderr when done.
    #[arg(long)]
    pub stats: bool,
    /// Soft mount: fail a call after N major timeouts instead of retrying forever (hard).
    #[arg(long, value_name = "N")]
    pub soft: Option<u32>,
    /// Seconds a call may go unanswered before the server counts as not responding (default 60
    /// over TCP, 10 over UDP).
    #[arg(long, value_name = "SECONDS")]
    pub timeo: Option<u64>,
    /// Readahead: auto (default; the window grows to twice the measured bandwidth-delay
    /// product), off (fetch only what is read), or fixed:SIZE (fixed:128k is Linux >= 5.4's
    /// NFS default, fixed:15m Linux 4.14's 15 x rsize).
    #[arg(long, value_name = "MODE", value_parser = sluice_client::read::parse_readahead)]
    pub readahead: Option<sluice_client::ReadaheadMode>,
    /// Memory all files may hold in data read ahead (default 256m).
    #[arg(long, value_name = "SIZE", value_parser = parse_budget)]
    pub readahead_budget: Option<u64>,
    /// Print every readahead window change on stderr.
    #[arg(long)]
    pub trace_readahead: bool,
    /// Talk to the server over UDP (same as ?proto=udp in the URL).
    #[arg(long)]
    pub udp: bool,
    /// TCP connections to the NFS service, 1 to 16 (same as ?nconnect=N in the URL, like
    /// Linux's mount option): calls go to them in turn, spreading the work of receiving
    /// replies over several threads. Default: automatic, one to start with and one more (up
    /// to the CPUs, at most 4) each time the receive path turns out to be the limit.
    #[arg(long, value_name = "N")]
    pub nconnect: Option<usize>,
    #[command(flatten)]
    pub tls: sluice_fuse::TlsArgs,
}

fn parse_budget(s: &str) -> Result<u64, String> {
    match sluice_client::read::parse_readahead(&format!("fixed:{s}"))? {
        sluice_client::ReadaheadMode::Fixed(b) => Ok(b),
        _ => Err(format!("bad size {s:?}")),
    }
}

/// Where commands write their output (stdout in the binary, a buffer in tests).
pub type Out = dyn tokio::io::AsyncWrite + Unpin + Send;

/// Runs a client command with its output on stdout. `Err` is a complete message for stderr.
pub async fn run(cmd: ClientCmd) -> Result<(), String> {
    let mut stdout = tokio::io::stdout();
    run_with_output(cmd, &mut stdout).await
}

/// Runs a client command writing its output (`cat`, `ls`, `stat`) to `out`.
pub async fn run_with_output(cmd: ClientCmd, out: &mut Out) -> Result<(), String> {
    match cmd {
        ClientCmd::Cp(a) => cp::run(a).await,
        ClientCmd::Cat(a) => ops::cat(a, out).await,
        ClientCmd::Ls(a) => ops::ls(a, out).await,
        ClientCmd::Stat(a) => ops::stat(a, out).await,
        ClientCmd::Mkdir(a) => ops::mkdir(a).await,
        ClientCmd::Rm(a) => ops::rm(a).await,
        ClientCmd::Mv(a) => ops::mv(a).await,
        ClientCmd::Ln(a) => ops::ln(a).await,
    }
}

/// The connections of one command: URLs on the same server and export share a client, of
/// whichever NFS version [`sluice_client::connect`] settled on.
pub(crate) struct Session {
    options: ClientOptions,
    clients: Vec<Arc<dyn Namespace>>,
    show_stats: bool,
}

impl Session {
    pub(crate) fn new(common: &CommonArgs) -> Session {
        let mut options = ClientOptions::default();
        if let Some(n) = common.soft {
            options.rpc.table.retrans = Some(n.max(1));
        }
        if let Some(t) = common.timeo {
            options.rpc.table.major_timeout = Duration::from_secs(t.max(1));
        }
        if let Some(m) = common.readahead {
            options.readahead = m;
        }
        if let Some(b) = common.readahead_budget {
            options.readahead_budget_bytes = b;
        }
        options.trace_readahead = common.trace_readahead;
        options.udp = common.udp;
        if let Some(n) = common.nconnect {
            options.fixed_nconnect(n);
        }
        options.tls = common.tls.files();
        Session {
            options,
            clients: Vec::new(),
            show_stats: common.stats,
        }
    }

    /// The options every connection of this command uses.
    pub(crate) fn options(&self) -> &ClientOptions {
        &self.options
    }

    /// A client whose export holds `url`, and the path of `url` inside that export.
    pub(crate) async fn resolve(
        &mut self,
        url: &NfsUrl,
    ) -> Result<(Arc<dyn Namespace>, String), String> {
        for c in &self.clients {
            let u = c.url();
            if u.host == url.host
                && u.port == url.port
                && u.nfsport == url.nfsport
                && u.mountport == url.mountport
                && u.uid == url.uid
                && u.gid == url.gid
                && u.proto == url.proto
                && u.version == url.version
                && u.xprtsec == url.xprtsec
                && is_path_prefix(c.export(), &url.path)
            {
                return Ok((c.clone(), strip_export(&url.path, c.export())));
            }
        }
        let c = sluice_client::connect(url, &self.options)
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        let rel = strip_export(&url.path, c.export());
        self.clients.push(c.clone());
        Ok((c, rel))
    }

    pub(crate) fn stats(&self) -> ClientStats {
        let mut all = ClientStats::default();
        for c in &self.clients {
            all.merge(&c.stats());
        }
        all
    }

    /// The RPC table, then file read statistics, transport counters and the NFS version(s)
    /// chosen.
    pub(crate) fn report(&self) -> String {
        let mut out = self.stats().to_string();
        let mut reads = ReadStats::default();
        let (mut retrans, mut reconnects, mut udp, mut conns) = (0, 0, false, 0);
        let (mut tls_handshakes, mut tls_sessions) = (0, Vec::new());
        let (mut tls_kernel, mut tls_rustls) = (false, false);
        let mut versions: Vec<String> = Vec::new();
        let mut notes: Vec<String> = Vec::new();
        let mut notes_conn: Vec<String> = Vec::new();
        for c in &self.clients {
            reads.merge(&c.read_stats());
            let t = c.transport_stats();
            retrans += t.table.retransmissions;
            reconnects += t.reconnects;
            tls_handshakes += t.tls_handshakes;
            if let Some(session) = t.tls {
                tls_kernel |= session.kernel;
                tls_rustls |= !session.kernel;
                let s = session.to_string();
                if !tls_sessions.contains(&s) {
                    tls_sessions.push(s);
                }
            }
            udp |= c.is_udp();
            let (n, note) = c.connections();
            conns += n;
            if let Some(n) = note.filter(|n| !notes_conn.contains(n)) {
                notes_conn.push(n);
            }
            let v = c.version().to_string();
            if !versions.contains(&v) {
                versions.push(v);
            }
            if let Some(n) = c.version_note().filter(|n| !notes.contains(n)) {
                notes.push(n);
            }
        }
        if reads.app_reads > 0 {
            out.push('\n');
            out.push_str(&reads.to_string());
        }
        out.push_str(&format!(
            "\ntransport: {}, {retrans} retransmissions, {reconnects} reconnects, {conns} connection{}",
            if udp { "udp" } else { "tcp" },
            if conns == 1 { "" } else { "s" }
        ));
        for n in notes_conn {
            out.push_str(&format!("\n{n}"));
        }
        // As the server's `sluice stats` says it: whether the NFS connections were encrypted.
        if tls_sessions.is_empty() {
            out.push_str("\ntls: none (plaintext)");
        } else {
            let path = match (tls_kernel, tls_rustls) {
                (true, false) => "kernel TLS",
                (true, true) => "kernel TLS and rustls",
                _ => "rustls, no kernel TLS",
            };
            out.push_str(&format!(
                "\ntls ({path}): {}, {tls_handshakes} connection{} upgraded",
                tls_sessions.join(", "),
                if tls_handshakes == 1 { "" } else { "s" }
            ));
        }
        if !versions.is_empty() {
            out.push_str(&format!("\nNFS version: {}", versions.join(", ")));
        }
        for n in notes {
            out.push_str(&format!("\nNFS version fallback: {n}"));
        }
        out
    }

    /// Ends what the servers hold for this command (NFSv4 sessions), prints the statistics if
    /// asked to, and passes `result` through.
    pub(crate) async fn finish(&self, result: Result<(), String>) -> Result<(), String> {
        for c in &self.clients {
            // The lease ends whatever a failed shutdown leaves.
            let _ = c.shutdown().await;
        }
        if self.show_stats {
            eprintln!("{}", self.report());
        }
        result
    }
}

/// Parses a command-line URL argument.
pub(crate) fn parse_url(s: &str) -> Result<NfsUrl, String> {
    NfsUrl::parse(s).map_err(|e| e.to_string())
}

/// "URL: message".
pub(crate) fn at(url: &NfsUrl, e: impl std::fmt::Display) -> String {
    format!("{url}: {e}")
}
