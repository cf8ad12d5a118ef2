//! The `sluice` command line: a thin layer that parses arguments and calls the library crates.

use clap::{Parser, Subcommand};
use std::io::IsTerminal;
use std::process::ExitCode;

mod bench;
mod ceph;
mod serve;
mod stdout;

/// `sluice --version`: the crate version and the git revision it was built from (build.rs).
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("SLUICE_GIT_REV"), ")");

#[derive(Parser)]
#[command(
    name = "sluice",
    version = VERSION,
    about = "A user-space NFS server and client that streams at link speed"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// Parsed once at start and matched once: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Export a directory over NFSv3, NFSv4.1 and NFSv4.2 (NFS, MOUNT and PORTMAP on one port).
    Serve(serve::ServeArgs),
    /// Run the link emulator: a TCP/UDP proxy with delay, bandwidth limit and faults.
    Link(sluice_link::LinkArgs),
    /// Load generator for benchmarks: pipelined READ/WRITE calls at a fixed queue depth.
    Bench(bench::BenchArgs),
    /// Mount an NFS export with FUSE: ordinary programs then read and write it.
    Mount(sluice_fuse::MountArgs),
    /// Unmount a `sluice mount`.
    Umount(UmountArgs),
    /// Print a running server's statistics (like nfsstat -s), from its --metrics endpoint.
    Stats(StatsArgs),
    #[command(flatten)]
    Client(sluice_cli::cmd::ClientCmd),
}

#[derive(clap::Args)]
struct UmountArgs {
    /// The mount point.
    mountpoint: std::path::PathBuf,
}

#[derive(clap::Args)]
struct StatsArgs {
    /// The server's --metrics address.
    #[arg(default_value = "127.0.0.1:9049")]
    metrics: std::net::SocketAddr,
    /// Print the raw Prometheus text instead.
    #[arg(long)]
    prometheus: bool,
}

fn main() -> ExitCode {
    keep_freed_memory();
    let cli = Cli::parse();
    init_logging();
    let mut builder = match &cli.cmd {
        // The client commands (cat, cp, ls, ...) run on one thread. A copy is one stream of
        // replies passing reader task -> call driver -> READ completion -> the copying task;
        // on a multi-thread runtime each of those wake-ups could land on another worker, so
        // every READ cost futex wake/wait pairs and sched_yield between threads (measured
        // on a 256 MiB `sluice cat` on loopback: 5,666 futex calls, 372 sched_yield and
        // ~6,000 context switches). On one thread a wake-up is a queue push. The server is
        // the same: one async thread beat two on 2 CPUs (see the server's datapath.rs,
        // "Threads"); the kernel's TCP work and the server use the other CPUs.
        Cmd::Client(_) => tokio::runtime::Builder::new_current_thread(),
        Cmd::Serve(args) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(serve::threads(args));
            b
        }
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    let rt = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sluice: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = rt.block_on(async {
        match cli.cmd {
            Cmd::Serve(args) => serve::run(args).await,
            Cmd::Link(args) => sluice_link::run(args)
                .await
                .map_err(|e| format!("link: {e}")),
            Cmd::Client(cmd) => {
                let mut out = stdout::Stdout::new();
                sluice_cli::cmd::run_with_output(cmd, &mut out).await
            }
            Cmd::Bench(a) => bench::run(a).await,
            Cmd::Mount(a) => sluice_fuse::run(a).await,
            Cmd::Umount(a) => sluice_fuse::umount(&a.mountpoint).map_err(|e| e.to_string()),
            Cmd::Stats(a) => {
                let path = if a.prometheus { "/metrics" } else { "/stats" };
                sluice_server::metrics::fetch(a.metrics, path)
                    .await
                    .map(|t| print!("{t}"))
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("sluice: {msg}");
            ExitCode::from(1)
        }
    }
}

/// Tells glibc's allocator to keep freed memory for reuse instead of handing it back to the
/// kernel. Both the client and the server stream data through short-lived 64 KiB-1 MiB buffers
/// (the client's 256 KiB socket reads, cut into zero-copy `Bytes` and freed when the caller drops
/// them). With glibc's defaults the top of each thread's heap is trimmed (`MADV_DONTNEED`) once
/// more than twice the dynamic mmap threshold is free, so the next buffers fault in fresh zeroed
/// pages: measured on a 1 GiB read, a third of the client's CPU went to page faults, page zeroing
/// and memory-cgroup charging. Fixed thresholds stop that: allocations up to 4 MiB come from the
/// heap, and up to 32 MiB of free memory per arena is kept. No effect with another allocator.
fn keep_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets allocator parameters; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 32 << 20);
    }
}

/// Logs go to stderr; `RUST_LOG` overrides the default level (info).
fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
