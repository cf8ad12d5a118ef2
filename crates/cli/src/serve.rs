//! `sluice serve`: export directories over NFSv3.
//!
//! With neither DIR nor `--exports`, the server exports [`DEFAULT_EXPORT_DIR`] under the current
//! directory (like `python -m http.server` serves where you stand, but a subdirectory, so that a
//! checkout or a home directory is never exported by accident). When that directory does not
//! exist it is created with mode 1777 (world-writable and sticky, like /tmp): clients are root
//! squashed by default, and a squashed root (uid 65534) can then still create files in it while
//! no one can remove another user's files. An existing directory is never chmod'ed. At start the
//! server prints the URLs to paste into `sluice ls` / `sluice cp`.

use clap::Args;
use sluice_server::backend::exports::{
    parse_exports, ClientRule, IoMode, IoModes, Squash, XprtsecPolicy,
};
use sluice_server::backend::{Export, ExportOptions};
use sluice_server::ServerConfig;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Directory to export (or use --exports FILE for several) [default: ./sluice-export,
    /// created world-writable and sticky if missing]. `ceph:PATH` exports the directory PATH
    /// of a Ceph file system (with --ceph-conf); clients mount it as PATH.
    pub dir: Option<PathBuf>,
    /// The Ceph cluster's ceph.conf, for a `ceph:PATH` export (exports' `ceph_conf=`).
    #[arg(long, value_name = "FILE")]
    pub ceph_conf: Option<PathBuf>,
    /// The Ceph file system's name [default: the cluster's default] (exports' `ceph_fs=`).
    #[arg(long, value_name = "NAME")]
    pub ceph_fs: Option<String>,
    /// The Ceph client id to authenticate as [default: admin] (exports' `ceph_id=`).
    #[arg(long, value_name = "ID")]
    pub ceph_id: Option<String>,
    /// The Ceph session's uuid, reclaimed at start [default: from the state directory's node
    /// id, the file system and PATH] (exports' `ceph_uuid=`). A dead server's, to take over its
    /// Ceph session.
    #[arg(long, value_name = "UUID")]
    pub ceph_uuid: Option<String>,
    /// Address and port for NFS, MOUNT and PORTMAP.
    #[arg(long, default_value = "127.0.0.1:2049")]
    pub listen: SocketAddr,
    /// Export read-only.
    #[arg(long)]
    pub ro: bool,
    /// Do not map uid/gid 0 to the anonymous ids (the default squashes root).
    #[arg(long, conflicts_with = "all_squash")]
    pub no_root_squash: bool,
    /// Map every client uid/gid to the anonymous ids.
    #[arg(long)]
    pub all_squash: bool,
    /// uid that squashed requests run as.
    #[arg(long, default_value_t = 65534)]
    pub anonuid: u32,
    /// gid that squashed requests run as.
    #[arg(long, default_value_t = 65534)]
    pub anongid: u32,
    /// Client network allowed to use the export (CIDR or address; repeatable). Default: any
    /// client that can reach --listen.
    #[arg(long = "allow", value_name = "CIDR")]
    pub allow: Vec<String>,
    /// Require clients to use a privileged source port (exports' `secure`).
    #[arg(long)]
    pub secure: bool,
    /// The transport security clients may use (exports' `xprtsec=`): a ':'-separated list of
    /// none (plain TCP/UDP), tls (RPC-with-TLS without a client certificate) and mtls (TLS
    /// with a certificate verified against --tls-client-ca). A client on another kind of
    /// connection is refused (NFSv4 NFS4ERR_WRONGSEC, NFSv3 NFS3ERR_ACCES). `tls` alone
    /// refuses clients with a certificate: for any TLS client write tls:mtls. Lists without
    /// none need --tls-cert, and mtls alone needs --tls-client-ca.
    #[arg(long, value_name = "LIST", default_value = "none:tls:mtls",
          value_parser = XprtsecPolicy::parse, conflicts_with = "exports")]
    pub xprtsec: XprtsecPolicy,
    /// How READ/WRITE reach the disk: buffered, dontcache or direct.
    #[arg(long, default_value = "buffered")]
    pub io: String,
    /// The cache mode of READs only, overriding --io (exports' `io_read=`).
    #[arg(long, value_name = "MODE")]
    pub io_read: Option<String>,
    /// The cache mode of WRITEs only, overriding --io (exports' `io_write=`). `--io-write direct`
    /// keeps written data out of the page cache (no kernel copy of it) while READs stay buffered.
    /// With the default (buffered), streaming uploads already go O_DIRECT (write-behind
    /// flushes of 1 MiB or more); small and random writes stay in the page cache.
    #[arg(long, value_name = "MODE")]
    pub io_write: Option<String>,
    /// Exports file in /etc/exports syntax, instead of DIR and the flags above.
    #[arg(long, value_name = "FILE", conflicts_with = "dir")]
    pub exports: Option<PathBuf>,
    /// What must outlive a restart: the file-handle secret (handles stay valid with the same
    /// one), the NFSv4 boot epoch and client records, and files kept open after REMOVE.
    #[arg(long, default_value = "/var/lib/sluice")]
    pub state_dir: PathBuf,
    /// Largest READ offered to clients (FSINFO rtmax), e.g. 1M.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub rtmax: u32,
    /// Largest WRITE offered to clients (FSINFO wtmax), e.g. 1M.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub wtmax: u32,
    /// Also answer PORTMAP queries on port 111.
    #[arg(long)]
    pub portmapper: bool,
    /// The port of NFSv3 clients' portmappers, where the server asks for a client's lock
    /// manager and status monitor before calling them (a granted blocked lock, SM_NOTIFY after
    /// a restart). Only for clients reached through port forwarding, such as a qemu user-mode
    /// guest the server sees as 127.0.0.1.
    #[arg(long, value_name = "PORT", default_value_t = sluice_xdr::portmap::PORT,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub client_portmap_port: u16,
    /// Also serve NFS and MOUNT over UDP on the same port.
    #[arg(long)]
    pub udp: bool,
    /// Log one line per request.
    #[arg(long)]
    pub log_requests: bool,
    /// Serve statistics over HTTP on ADDR:PORT (/metrics for Prometheus, /stats for `sluice stats`).
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<SocketAddr>,
    /// Write UNSTABLE WRITEs through to the disk before replying, instead of holding them in
    /// memory and flushing them in large clusters.
    #[arg(long)]
    pub no_write_behind: bool,
    /// Keep write-behind but flush each WRITE alone as it arrives (the benchmark baseline for
    /// clustering).
    #[arg(long)]
    pub no_clustering: bool,
    /// Copy READ data through the server's buffers instead of splicing page-cache pages
    /// straight into the socket (large READs of buffered exports over TCP).
    #[arg(long)]
    pub no_splice: bool,
    /// Answer NFSv4.2 READ_PLUS with NFS4ERR_NOTSUPP (clients then read with READ), instead
    /// of sending the holes of sparse files as ranges.
    #[arg(long)]
    pub no_read_plus: bool,
    /// Read small uncached ranges on blocking threads instead of through io_uring.
    #[arg(long)]
    pub no_uring: bool,
    /// Threads that decode calls and build replies [default: half the CPUs, at least 1].
    /// File-system calls and write-behind flushes run on a separate pool of blocking threads, and
    /// READ data moves in the kernel (splice, io_uring), so these threads do protocol work only.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
    /// Connections served at once.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Close connections idle for this many seconds.
    #[arg(long, default_value_t = 360)]
    pub idle_timeout: u64,
    /// NFSv4.1 lease time in seconds: a client that renews nothing for this long loses its
    /// state once another client wants it. 10..=3600, knfsd's range for its lease time.
    #[arg(long, value_name = "SECS", default_value_t = 90,
          value_parser = clap::value_parser!(u32).range(10..=3600))]
    pub lease_secs: u32,
    /// NFSv4.1 grace period in seconds after a restart, during which clients of the last run
    /// (named by the client records in --state-dir) reclaim their opens and locks and new
    /// ones wait. Default: the lease. It ends as soon as every such client has reclaimed, and
    /// is skipped when none held state. 1..=3600.
    #[arg(long, value_name = "SECS",
          value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub grace_secs: Option<u32>,
    /// NFSv4 owners and groups as name@DOMAIN from this system's user and group databases
    /// (as the clients' idmapd domain); unset: numeric strings ("1000"), which the Linux
    /// client maps straight back. Ids with no name go out as numbers; names the server cannot
    /// map are refused (NFS4ERR_BADOWNER), never turned into nobody.
    #[arg(long, value_name = "DOMAIN", value_parser = parse_idmap_domain)]
    pub idmap_domain: Option<String>,
    /// Grant no NFSv4.1 write delegations, only read ones. By default a client that opens a
    /// file for reading and writing with no other client on it gets one (its holder answers
    /// other clients' GETATTRs with CB_GETATTR and is recalled by any other client's access).
    #[arg(long, conflicts_with = "write_delegations")]
    pub no_write_delegations: bool,
    /// Grant NFSv4.1 write delegations (the default; kept for scripts that asked for them
    /// when they were off by default).
    #[arg(long)]
    pub write_delegations: bool,
    /// PEM certificate chain (leaf first) for RPC-with-TLS (RFC 9289): clients that send the
    /// AUTH_TLS probe are upgraded to TLS 1.3 on the same port; plaintext clients are served
    /// as before. Reread with --tls-key and --tls-client-ca on SIGHUP.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificates that client certificates must chain to: clients are asked for a
    /// certificate (one from another CA fails the handshake), and `xprtsec=mtls` exports
    /// admit only clients that presented one.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Seconds a client has from its AUTH_TLS probe to the end of the TLS handshake; one that
    /// stalls longer loses that connection (counted and logged).
    #[arg(long, value_name = "SECS", default_value_t = 10, requires = "tls_cert",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub tls_handshake_timeout: u64,
}

/// A DNS-like domain: not empty, no '@', no white space or control characters.
fn parse_idmap_domain(s: &str) -> Result<String, String> {
    let bad = |c: char| c == '@' || c.is_whitespace() || c.is_control();
    if s.is_empty() || s.len() > 253 || s.chars().any(bad) {
        return Err(format!("{s:?} is not a domain name"));
    }
    Ok(s.to_owned())
}

/// The default for `--threads`: half of `cpus`, at least one.
///
/// Measured on 2 CPUs with the client on the same host (4 KiB random READs at queue depth 32,
/// cold and warm): with two async threads, each call spawned on a busy thread woke the idle one
/// to steal it, and the futex wake-ups, context switches and cache misses of that hand-off cost
/// 25-32% of the server's CPU per READ; one thread served 30-40% more READs per second. The
/// threads left over run the blocking pool, the kernel's side of splice and io_uring, and on a
/// shared host the clients.
pub fn default_threads(cpus: usize) -> usize {
    (cpus / 2).max(1)
}

/// Async threads for `sluice serve`: `--threads`, or [`default_threads`] of the CPUs this
/// process may run on.
pub fn threads(args: &ServeArgs) -> usize {
    match args.threads {
        Some(n) => usize::from(n),
        None => default_threads(std::thread::available_parallelism().map_or(1, |n| n.get())),
    }
}

pub async fn run(args: ServeArgs) -> Result<(), String> {
    let mut args = args;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc_geteuid() } != 0 {
        return Err(
            "sluice serve must run as root: it opens files by handle (CAP_DAC_READ_SEARCH) \
                    and switches to each client's uid (setfsuid)"
                .into(),
        );
    }
    if args.dir.is_none() && args.exports.is_none() {
        args.dir = Some(default_export()?);
    }
    let (mut config, ceph_specs) = config_and_ceph(&args)?;
    let (bound, ceph_banner) = if ceph_specs.is_empty() {
        (sluice_server::bind(config).await?, Vec::new())
    } else {
        // libcephfs mounts block (bounded by the mount timeout): off the async threads.
        let (config, entries, banner) = tokio::task::spawn_blocking(move || {
            crate::ceph::open_all(&mut config, &ceph_specs).map(|(e, b)| (config, e, b))
        })
        .await
        .map_err(|e| e.to_string())??;
        (sluice_server::bind_exports(config, entries).await?, banner)
    };
    let addr = bound.local_addr().map_err(|e| e.to_string())?;
    let paths: Vec<PathBuf> = bound
        .config
        .exports
        .iter()
        .map(|e| e.path.clone())
        .collect();
    println!("{}", greeting(addr, &paths));
    for line in ceph_banner {
        println!("{line}");
    }
    if let Some(tls) = bound.config.net.tls.clone() {
        tokio::spawn(reload_tls_on_sighup(tls));
    }
    tokio::select! {
        r = sluice_server::run(bound) => r,
        _ = tokio::signal::ctrl_c() => {
            tracing::info!("interrupted; stopping");
            Ok(())
        }
    }
}

/// Rereads the TLS certificate, key and client CA on each SIGHUP. New connections use the new
/// files; a file that fails to load leaves the ones in use (logged).
async fn reload_tls_on_sighup(tls: std::sync::Arc<sluice_tcp::tls::ServerTls>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP: TLS files are read at start only");
        return;
    };
    while hup.recv().await.is_some() {
        match tls.reload() {
            Ok(()) => tracing::info!("SIGHUP: TLS certificate, key and client CA reread"),
            Err(e) => tracing::warn!("SIGHUP: TLS files not reloaded, keeping the old ones: {e}"),
        }
    }
}

/// The export used when `sluice serve` gets neither DIR nor `--exports`, relative to the current
/// directory.
pub const DEFAULT_EXPORT_DIR: &str = "sluice-export";

/// Mode of a default export the server creates: rwx for everyone plus the sticky bit (as /tmp),
/// so a root-squashed client can create files and nobody can delete another user's.
const DEFAULT_EXPORT_MODE: u32 = 0o1777;

/// Returns `./sluice-export` as an absolute path, creating it (mode 1777) when it is missing.
fn default_export() -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let cwd = std::env::current_dir().map_err(|e| format!("current directory: {e}"))?;
    let dir = cwd.join(DEFAULT_EXPORT_DIR);
    match std::fs::create_dir(&dir) {
        Ok(()) => {
            // create_dir's mode passes through the umask; set the full mode explicitly.
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(DEFAULT_EXPORT_MODE))
                .map_err(|e| format!("chmod {}: {e}", dir.display()))?;
            tracing::info!(path = %dir.display(), "created the default export (mode 1777)");
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    Ok(dir)
}

/// What the server prints at start: each export and the URLs that reach it from this host.
/// On the standard port 2049 the URLs are bare (the client asks the portmapper on 111, then
/// falls back to 2049); on another port they name it as the authority, where sluice also
/// answers PORTMAP.
pub fn greeting(listen: SocketAddr, exports: &[PathBuf]) -> String {
    let ip = match listen.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => "127.0.0.1".to_string(),
        ip if ip.is_unspecified() => "[::1]".to_string(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        std::net::IpAddr::V4(ip) => ip.to_string(),
    };
    let authority = if listen.port() == NFS_PORT {
        ip
    } else {
        format!("{ip}:{}", listen.port())
    };
    let mut out = format!("{GREETING_SERVING} {listen}\n");
    for path in exports {
        let path = path.display();
        out += &format!("  export {path}\n    sluice ls nfs://{authority}{path}\n");
    }
    out += &format!("  list the exports: sluice ls nfs://{authority}/");
    out
}

/// The greeting's first words, before the address: the protocols one port serves (MOUNT and
/// PORTMAP ride along and are not named).
const GREETING_SERVING: &str = "sluice: serving NFSv3, NFSv4.1, NFSv4.2 on";

/// The NFS port of RFC 1813 (and the one clients fall back to without a portmapper).
const NFS_PORT: u16 = 2049;

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

#[cfg(test)]
fn config_from(a: &ServeArgs) -> Result<ServerConfig, String> {
    config_and_ceph(a).map(|(c, _)| c)
}

/// The server's configuration, and the settings of its Ceph exports (`ceph:PATH`).
fn config_and_ceph(a: &ServeArgs) -> Result<(ServerConfig, Vec<crate::ceph::CephSpec>), String> {
    let mut ceph = Vec::new();
    let exports = match (&a.exports, &a.dir) {
        (Some(file), _) => {
            let text =
                std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
            let (text, specs) = crate::ceph::split_exports(&text)
                .map_err(|e| format!("{}: {e}", file.display()))?;
            ceph = specs;
            parse_exports(&text).map_err(|e| format!("{}: {e}", file.display()))?
        }
        (None, Some(dir)) => match crate::ceph::ceph_path(&dir.to_string_lossy()) {
            Some(path) => {
                if !path.starts_with('/') {
                    return Err(format!(
                        "{}: a Ceph path must be absolute (ceph:/dir)",
                        dir.display()
                    ));
                }
                let conf = a
                    .ceph_conf
                    .clone()
                    .ok_or("a ceph:PATH export needs --ceph-conf FILE (the cluster's ceph.conf)")?;
                ceph.push(crate::ceph::CephSpec {
                    path: path.to_string(),
                    conf,
                    fs_name: a.ceph_fs.clone(),
                    client_id: a.ceph_id.clone(),
                    uuid: a.ceph_uuid.clone(),
                });
                vec![export_from_flags(a, std::path::Path::new(path))?]
            }
            None => vec![export_from_flags(a, dir)?],
        },
        (None, None) => return Err("give a directory to export, or --exports FILE".into()),
    };
    check_xprtsec(&exports, a.tls_cert.is_some(), a.tls_client_ca.is_some())?;
    if a.rtmax < 4096 || a.wtmax < 4096 {
        return Err("--rtmax and --wtmax must be at least 4K".into());
    }
    let mut net = sluice_server::net::NetConfig {
        connections_max: a.max_connections,
        idle_timeout: Duration::from_secs(a.idle_timeout),
        ..Default::default()
    };
    net.record_bytes_max = net.record_bytes_max.max(a.wtmax as usize + 64 * 1024);
    if let (Some(cert), Some(key)) = (&a.tls_cert, &a.tls_key) {
        let files = sluice_tcp::tls::ServerTlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: a.tls_client_ca.clone(),
        };
        let mut tls = sluice_tcp::tls::ServerTls::load(files).map_err(|e| format!("TLS: {e}"))?;
        tls.handshake_timeout = Duration::from_secs(a.tls_handshake_timeout);
        net.tls = Some(std::sync::Arc::new(tls));
    }
    let config = ServerConfig {
        listen: a.listen,
        exports,
        state_dir: a.state_dir.clone(),
        read_bytes_max: a.rtmax,
        write_bytes_max: a.wtmax,
        portmapper: a.portmapper,
        udp: a.udp,
        log_requests: a.log_requests,
        metrics: a.metrics,
        read_splice: !a.no_splice,
        read_plus: !a.no_read_plus,
        lease: Duration::from_secs(u64::from(a.lease_secs)),
        grace: a.grace_secs.map(|s| Duration::from_secs(u64::from(s))),
        idmap_domain: a.idmap_domain.clone(),
        write_delegations: !a.no_write_delegations,
        // Not flags: the defaults' reasons are in `sluice_nfs4state::Config4`.
        nfs4_limits: Default::default(),
        // NLM/NSM for v3 clients' locks: bounds from `sluice_nfs4state::nlm`, clients'
        // portmappers on 111 unless --client-portmap-port says otherwise.
        nlm: sluice_server::nlm::NlmDriverConfig {
            client_portmap_port: a.client_portmap_port,
            ..Default::default()
        },
        net,
        io: {
            let mut io = sluice_server::io::IoConfig {
                write_behind_enabled: !a.no_write_behind,
                uring_reads: !a.no_uring,
                ..Default::default()
            };
            io.write_behind.clustering = !a.no_clustering;
            io
        },
    };
    Ok((config, ceph))
}

fn export_from_flags(a: &ServeArgs, dir: &std::path::Path) -> Result<Export, String> {
    let mode = |flag: &str, v: &str| {
        IoMode::parse(v)
            .ok_or_else(|| format!("{flag} {v}: expected buffered, dontcache or direct"))
    };
    let mut io = IoModes::both(mode("--io", &a.io)?);
    if let Some(v) = &a.io_read {
        io.read = mode("--io-read", v)?;
    }
    if let Some(v) = &a.io_write {
        io.write = mode("--io-write", v)?;
    }
    let options = ExportOptions {
        read_only: a.ro,
        squash: if a.all_squash {
            Squash::All
        } else if a.no_root_squash {
            Squash::None
        } else {
            Squash::Root
        },
        anonuid: a.anonuid,
        anongid: a.anongid,
        secure: a.secure,
        io,
        xprtsec: a.xprtsec,
        ..ExportOptions::default()
    };
    let specs: Vec<String> = if a.allow.is_empty() {
        vec!["*".into()]
    } else {
        a.allow.clone()
    };
    let mut clients = Vec::new();
    for spec in &specs {
        // Reuse the exports-file parser for the client syntax, so both accept the same forms.
        let parsed = parse_exports(&format!("/ {spec}(ro)"))
            .map_err(|_| format!("--allow {spec}: expected an address, a CIDR network or *"))?;
        let client = parsed[0].clients[0].client;
        clients.push(ClientRule {
            client,
            options: options.clone(),
        });
    }
    Ok(Export {
        path: dir.to_path_buf(),
        clients,
    })
}

/// Refuses an export rule no client could ever use for its `xprtsec=` on this server: TLS-only
/// without `--tls-cert` (`tls`), `mtls` alone without `--tls-client-ca` (`client_ca`). Such a
/// rule is a mistake, not a policy, and would show only as refusals at mount time.
fn check_xprtsec(exports: &[Export], tls: bool, client_ca: bool) -> Result<(), String> {
    for e in exports {
        for rule in &e.clients {
            let policy = rule.options.xprtsec;
            if let Some(why) = policy.unreachable(tls, client_ca) {
                let fix = if tls {
                    "give --tls-client-ca FILE, or let the export admit tls"
                } else {
                    "give --tls-cert FILE and --tls-key FILE, or add none to the list"
                };
                return Err(format!(
                    "export {} ({}): xprtsec={policy}, but {why}: {fix}",
                    e.path.display(),
                    client_words(&rule.client)
                ));
            }
        }
    }
    Ok(())
}

/// A client rule's pattern, as exports(5) writes it.
fn client_words(c: &sluice_server::backend::exports::ClientMatch) -> String {
    use sluice_server::backend::exports::ClientMatch;
    match c {
        ClientMatch::Any => "*".into(),
        ClientMatch::Host(ip) => ip.to_string(),
        ClientMatch::Network { addr, prefix_len } => format!("{addr}/{prefix_len}"),
    }
}

/// Parses a byte count such as 1048576, 64K, 1M (powers of two).
pub fn parse_size(s: &str) -> Result<u32, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => {
            let unit = s[i..].trim_end_matches(['B', 'b']).trim_end_matches('i');
            let m = match unit.to_ascii_uppercase().as_str() {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                _ => return Err(format!("{s}: unknown unit (use K or M)")),
            };
            (&s[..i], m)
        }
        None => (s, 1),
    };
    let n: u64 = num.parse().map_err(|_| format!("{s}: not a size"))?;
    u32::try_from(n * mult).map_err(|_| format!("{s}: too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert_eq!(parse_size("64KiB").unwrap(), 64 << 10);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("1G").is_err());
    }

    fn parse(args: &[&str]) -> ServeArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let argv = std::iter::once("serve").chain(args.iter().copied());
        <Cli as clap::Parser>::try_parse_from(argv).unwrap().serve
    }

    #[test]
    fn a_ceph_export_takes_its_uuid_from_the_flag_or_leaves_it_to_the_default() {
        let specs = |args: &[&str]| config_and_ceph(&parse(args)).unwrap().1;
        let given = specs(&["ceph:/v", "--ceph-conf", "/c.conf", "--ceph-uuid", "head-a"]);
        assert_eq!(given[0].uuid.as_deref(), Some("head-a"));
        let default = specs(&["ceph:/v", "--ceph-conf", "/c.conf"]);
        assert_eq!(
            default[0].uuid, None,
            "the state directory's default, at start"
        );
    }

    #[test]
    fn threads_default_to_half_the_cpus() {
        assert_eq!(default_threads(1), 1);
        assert_eq!(default_threads(2), 1);
        assert_eq!(default_threads(3), 1);
        assert_eq!(default_threads(16), 8);
        assert_eq!(threads(&parse(&["/srv", "--threads", "3"])), 3);
        let cpus = std::thread::available_parallelism().unwrap().get();
        assert_eq!(threads(&parse(&["/srv"])), default_threads(cpus));
        for bad in ["0", "1025", "two"] {
            let argv = ["serve", "/srv", "--threads", bad];
            #[derive(clap::Parser)]
            struct Cli {
                #[command(flatten)]
                serve: ServeArgs,
            }
            assert!(
                <Cli as clap::Parser>::try_parse_from(argv).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_dist_exports_example_parses_with_the_real_parser() {
        let text = include_str!("../../../dist/exports.example");
        let exports = parse_exports(text).expect("dist/exports.example parses");
        let paths: Vec<_> = exports.iter().map(|e| e.path.to_str().unwrap()).collect();
        assert_eq!(
            paths,
            ["/srv/nfs/share", "/srv/nfs/public", "/srv/nfs/backup host1"]
        );
        let share = &exports[0];
        let office = share.options_for("192.168.1.7".parse().unwrap()).unwrap();
        assert!(!office.read_only);
        assert_eq!(office.squash, Squash::Root);
        assert!(share.options_for("10.0.0.1".parse().unwrap()).is_none());
        let backup = exports[2]
            .options_for("192.168.1.10".parse().unwrap())
            .unwrap();
        assert_eq!(backup.squash, Squash::None);
        assert_eq!(backup.io.write, IoMode::Direct);
    }

    #[test]
    fn greeting_prints_bare_urls_on_2049_and_the_port_otherwise() {
        let exports = [PathBuf::from("/tmp/w/sluice-export")];
        let g = greeting("127.0.0.1:2049".parse().unwrap(), &exports);
        assert!(
            g.starts_with("sluice: serving NFSv3, NFSv4.1, NFSv4.2 on 127.0.0.1:2049\n"),
            "{g}"
        );
        assert!(
            g.contains("sluice ls nfs://127.0.0.1/tmp/w/sluice-export\n"),
            "{g}"
        );
        assert!(g.ends_with("sluice ls nfs://127.0.0.1/"), "{g}");
        let g = greeting("0.0.0.0:20490".parse().unwrap(), &exports);
        assert!(
            g.contains("nfs://127.0.0.1:20490/tmp/w/sluice-export"),
            "{g}"
        );
        let g = greeting("[::1]:2049".parse().unwrap(), &exports);
        assert!(g.contains("nfs://[::1]/tmp/w/sluice-export"), "{g}");
    }

    #[test]
    fn io_flags_set_each_direction() {
        let dir = std::path::Path::new("/srv");
        let io = |args: &[&str]| {
            let e = export_from_flags(&parse(args), dir).unwrap();
            e.clients[0].options.io
        };
        assert_eq!(io(&["/srv"]), IoModes::both(IoMode::Buffered));
        assert_eq!(
            io(&["/srv", "--io", "direct"]),
            IoModes::both(IoMode::Direct)
        );
        let m = io(&["/srv", "--io-write", "direct"]);
        assert_eq!((m.read, m.write), (IoMode::Buffered, IoMode::Direct));
        let m = io(&["/srv", "--io", "dontcache", "--io-read", "direct"]);
        assert_eq!((m.read, m.write), (IoMode::Direct, IoMode::DontCache));
        let e = export_from_flags(&parse(&["/srv", "--io-write", "fast"]), dir).unwrap_err();
        assert!(e.contains("--io-write fast"), "{e}");
    }

    #[test]
    fn lease_secs_defaults_to_90_and_is_bounded() {
        let lease = |args: &[&str]| config_from(&parse(args)).unwrap().lease;
        assert_eq!(lease(&["/srv"]), Duration::from_secs(90));
        assert_eq!(
            lease(&["/srv", "--lease-secs", "30"]),
            Duration::from_secs(30)
        );
        for bad in ["0", "9", "3601"] {
            #[derive(clap::Parser)]
            struct Cli {
                #[command(flatten)]
                serve: ServeArgs,
            }
            let argv = ["serve", "/srv", "--lease-secs", bad];
            assert!(
                <Cli as clap::Parser>::try_parse_from(argv).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn client_portmap_port_defaults_to_111() {
        let port = |args: &[&str]| config_from(&parse(args)).unwrap().nlm.client_portmap_port;
        assert_eq!(port(&["/srv"]), 111);
        assert_eq!(port(&["/srv", "--client-portmap-port", "40111"]), 40111);
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let argv = ["serve", "/srv", "--client-portmap-port", "0"];
        assert!(
            <Cli as clap::Parser>::try_parse_from(argv).is_err(),
            "port 0 is refused"
        );
    }

    #[test]
    fn grace_secs_defaults_to_the_lease_and_is_bounded() {
        let grace = |args: &[&str]| config_from(&parse(args)).unwrap().grace;
        assert_eq!(grace(&["/srv"]), None, "None: one lease");
        assert_eq!(
            grace(&["/srv", "--grace-secs", "15"]),
            Some(Duration::from_secs(15))
        );
        for bad in ["0", "3601"] {
            #[derive(clap::Parser)]
            struct Cli {
                #[command(flatten)]
                serve: ServeArgs,
            }
            let argv = ["serve", "/srv", "--grace-secs", bad];
            assert!(
                <Cli as clap::Parser>::try_parse_from(argv).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn idmap_domain_is_off_by_default_and_must_look_like_a_domain() {
        let domain = |args: &[&str]| config_from(&parse(args)).unwrap().idmap_domain;
        assert_eq!(domain(&["/srv"]), None, "numeric owners by default");
        assert_eq!(
            domain(&["/srv", "--idmap-domain", "example.org"]).as_deref(),
            Some("example.org")
        );
        for bad in ["", "a@b", "two words"] {
            #[derive(clap::Parser)]
            struct Cli {
                #[command(flatten)]
                serve: ServeArgs,
            }
            let argv = ["serve", "/srv", "--idmap-domain", bad];
            assert!(
                <Cli as clap::Parser>::try_parse_from(argv).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn xprtsec_flag_sets_the_policy_and_needs_the_tls_it_names() {
        let policy = |args: &[&str]| {
            let e = export_from_flags(&parse(args), std::path::Path::new("/srv")).unwrap();
            e.clients[0].options.xprtsec
        };
        assert_eq!(policy(&["/srv"]), XprtsecPolicy::ANY);
        assert_eq!(
            policy(&["/srv", "--xprtsec", "tls:mtls"]).to_string(),
            "tls:mtls"
        );
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        for bad in [
            &["serve", "/srv", "--xprtsec", "ssl"][..],
            &["serve", "/srv", "--xprtsec", ""],
            &["serve", "--exports", "/etc/exports", "--xprtsec", "tls"],
        ] {
            assert!(
                <Cli as clap::Parser>::try_parse_from(bad).is_err(),
                "{bad:?}"
            );
        }
        // Refused at start-up: no client could ever reach the export.
        let err = config_from(&parse(&["/srv", "--xprtsec", "tls"])).unwrap_err();
        assert!(err.contains("--tls-cert"), "{err}");
        assert!(err.contains("/srv (*)"), "{err}");
        let exports = |text: &str| parse_exports(text).unwrap();
        let e = exports("/a 10.0.0.0/8(xprtsec=mtls) *(xprtsec=none)");
        let err = check_xprtsec(&e, true, false).unwrap_err();
        assert!(
            err.contains("/a (10.0.0.0/8)") && err.contains("--tls-client-ca"),
            "{err}"
        );
        assert!(check_xprtsec(&e, true, true).is_ok());
        assert!(check_xprtsec(&exports("/a *(xprtsec=none:mtls)"), false, false).is_ok());
        assert!(check_xprtsec(&exports("/a *(xprtsec=tls:mtls)"), true, false).is_ok());
    }
}
