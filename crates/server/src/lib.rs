//! The sluice NFS server: v3, and v4.1/4.2 on the same port.
//!
//! ```text
//!   net (tokio driver: TCP/UDP, record marking, concurrency limits)
//!    └─ service (the RPC service layer: Peer/Transport/Reply; a program registry of procedure
//!        │        tables (PORTMAP v2, MOUNT v3, NFS v3 and v4), each row a `sluice_xdr::procs` fact
//!        │        plus its handler; duplicate request cache, stats and request logs off the rows)
//!        ├─ portmap   (answers for the one port)
//!        ├─ mountd    (export roots, mount list)
//!        ├─ nfs4      (NFSv4.1/4.2: the COMPOUND processor over the sans-IO state of the
//!        │             `sluice-nfs4state` crate, and its drivers: `nfs4::lease` ticks leases
//!        │             and the grace period after a restart, `nfs4::callback` makes the back
//!        │             channels' calls over the connection handles of `nfs4::callback::conn`,
//!        │             `nfs4::offload` runs asynchronous COPYs, `nfs4::store` keeps the state
//!        │             that outlives a restart in the state directory)
//!        └─ nfs       (the 22 procedures: wire types <-> neutral types, in `nfs/map.rs` only;
//!            │         changes pass the v4 delegations' recall gate through `recall`'s trait)
//!            └─ backend = the `sluice-vfs` crate (the FileSystem trait and LocalFs: handles,
//!               credentials, confinement, open-file cache, exports; no NFS wire type)
//! ```
//! Wire formats live in `sluice-xdr`, RPC framing and call parsing in `sluice-rpc`; both pure.

/// The file-system layer (its own crate, `sluice-vfs`), under the name the server has always used.
pub use sluice_vfs as backend;
pub mod datapath;
pub mod exports;
pub mod io;
pub mod memlimit;
pub mod metrics;
pub mod mountd;
pub mod net;
pub mod nfs;
pub mod nfs4;
pub mod nlm;
pub mod portmap;
pub mod recall;
pub mod service;
pub mod splice;
pub mod stats;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

/// Who sent a call and over what: the types every program's handlers take (outside the crate,
/// name them from here; where they are defined is the crate's business).
pub use service::{Peer, Reply, Transport};

use backend::{Export, LocalFs, LocalFsConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tracing::info;

/// Everything `sluice serve` needs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where NFS, MOUNT and PORTMAP listen (TCP, and UDP when `udp`). Default 127.0.0.1:2049.
    pub listen: SocketAddr,
    /// The exported directories and their client rules.
    pub exports: Vec<Export>,
    /// Holds the file handle secret. Default [`backend::DEFAULT_STATE_DIR`].
    pub state_dir: PathBuf,
    /// FSINFO rtmax/wtmax in bytes (default 1 MiB).
    pub read_bytes_max: u32,
    pub write_bytes_max: u32,
    /// Also answer PORTMAP on port 111 (`--portmapper`).
    pub portmapper: bool,
    /// Also serve over UDP on the same port.
    pub udp: bool,
    /// One log line per request.
    pub log_requests: bool,
    /// Serve statistics over HTTP here (`/metrics` Prometheus, `/stats` text).
    pub metrics: Option<SocketAddr>,
    pub net: net::NetConfig,
    /// Sequential detection, readahead, READ chunk pool and write-behind (`io::IoConfig`).
    pub io: io::IoConfig,
    /// Answer large READs of buffered exports over TCP by splicing page-cache pages into the
    /// socket instead of copying them through READ chunks (default true; see [`splice`]).
    pub read_splice: bool,
    /// Answer NFSv4.2 READ_PLUS, sending holes of sparse files as ranges instead of zeros
    /// (default true; `--no-read-plus`: NFS4ERR_NOTSUPP, and clients read with READ). See
    /// `nfs4::data::read_plus`.
    pub read_plus: bool,
    /// NFSv4.1 lease time (`--lease-secs`, the `lease_time` attribute). Default 90 s; see
    /// [`sluice_nfs4state::Config4::lease`].
    pub lease: std::time::Duration,
    /// NFSv4.1 grace period after a restart (`--grace-secs`); `None` (the default): one lease,
    /// knfsd's default. It ends early once every client of the stable records has sent
    /// RECLAIM_COMPLETE, and is skipped when there are no records (see
    /// [`sluice_nfs4state::recovery::grace`]).
    pub grace: Option<std::time::Duration>,
    /// NFSv4 owners as `name@domain` from the system's user and group databases
    /// (`--idmap-domain`); `None` (the default): numeric strings. See [`nfs4::idmap`].
    pub idmap_domain: Option<String>,
    /// Grant NFSv4.1 write delegations (default true; `--no-write-delegations` sets it false).
    /// Read delegations are always offered. See [`sluice_nfs4state::delegations::table`].
    pub write_delegations: bool,
    /// NFSv4.1 state limits: client records, sessions per client, open stateids per client
    /// and overall. Defaults and why: [`sluice_nfs4state::Config4`]; what hitting each answers: the
    /// module notes of [`sluice_nfs4state::state`]. Not command-line flags: the defaults serve any
    /// ordinary site; tests and embedders set them.
    pub nfs4_limits: sluice_nfs4state::StateLimits,
    /// NLM and NSM for v3 clients' locks: bounds, and where clients' portmappers listen
    /// (111; tests set their own). See [`nlm`].
    pub nlm: nlm::NlmDriverConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:2049".parse().expect("literal address"),
            exports: Vec::new(),
            state_dir: PathBuf::from(backend::DEFAULT_STATE_DIR),
            read_bytes_max: backend::IO_BYTES_MAX_DEFAULT,
            write_bytes_max: backend::IO_BYTES_MAX_DEFAULT,
            portmapper: false,
            udp: false,
            log_requests: false,
            metrics: None,
            net: net::NetConfig::default(),
            io: io::IoConfig::default(),
            read_splice: true,
            read_plus: true,
            lease: sluice_nfs4state::Config4::default().lease,
            grace: None,
            idmap_domain: None,
            nfs4_limits: sluice_nfs4state::StateLimits::default(),
            write_delegations: true,
            nlm: nlm::NlmDriverConfig::default(),
        }
    }
}

/// A server ready to run: exports opened, sockets bound.
pub struct Bound {
    pub server: Arc<service::Server>,
    pub tcp: tokio::net::TcpListener,
    pub udp: Option<tokio::net::UdpSocket>,
    pub portmap_tcp: Option<tokio::net::TcpListener>,
    pub metrics: Option<tokio::net::TcpListener>,
    pub config: ServerConfig,
}

impl Bound {
    /// The TCP address actually bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

/// Opens the exports and binds the sockets; errors say what to fix.
pub async fn bind(mut config: ServerConfig) -> Result<Bound, String> {
    if config.exports.is_empty() {
        return Err("nothing to export: give a directory or --exports FILE".into());
    }
    let entries = open_exports(&mut config)?;
    bind_exports(config, entries).await
}

/// Opens each configured export as a [`LocalFs`] (canonicalising its path in `config`). Public
/// for `sluice serve`, which opens Ceph exports itself and serves both with [`bind_exports`].
pub fn open_exports(config: &mut ServerConfig) -> Result<Vec<nfs::ExportEntry>, String> {
    let mut entries = Vec::new();
    for export in &mut config.exports {
        let canonical = std::fs::canonicalize(&export.path)
            .map_err(|e| format!("export {}: {e}", export.path.display()))?;
        export.path = canonical;
        let mut fs_cfg = LocalFsConfig::new(&export.path).state_dir(&config.state_dir);
        fs_cfg.read_bytes_max = config.read_bytes_max;
        fs_cfg.write_bytes_max = config.write_bytes_max;
        // One pair of cache modes per export: the first rule that asks for non-default ones
        // decides.
        if let Some(m) = export
            .clients
            .iter()
            .map(|c| c.options.io)
            .find(|&m| m != backend::IoModes::default())
        {
            fs_cfg = fs_cfg.io_modes(m);
        }
        if let Some(id) = export.clients.iter().find_map(|c| c.options.fsid) {
            fs_cfg = fs_cfg.export_id(backend::ExportId(id));
        }
        let fs = LocalFs::new(fs_cfg)
            .map_err(|e| format!("cannot export {}: {e}", export.path.display()))?;
        entries.push(nfs::ExportEntry {
            fs: Arc::new(fs),
            export: export.clone(),
        });
    }
    Ok(entries)
}

/// Binds the sockets for exports already opened: any [`backend::FileSystem`] (tests serve an
/// in-memory one this way). `config.exports` is not consulted; each entry carries its rules.
pub async fn bind_exports(
    mut config: ServerConfig,
    entries: Vec<nfs::ExportEntry>,
) -> Result<Bound, String> {
    fit_to_memory(&mut config.io);
    let tcp = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| {
            format!(
                "cannot listen on {} (TCP): {e}; choose another with --listen ADDR:PORT",
                config.listen
            )
        })?;
    let port = tcp.local_addr().map_err(|e| e.to_string())?.port();
    let bound_addr = SocketAddr::new(config.listen.ip(), port);
    let udp = if config.udp {
        Some(
            tokio::net::UdpSocket::bind(bound_addr)
                .await
                .map_err(|e| format!("cannot listen on {bound_addr} (UDP): {e}"))?,
        )
    } else {
        None
    };
    let portmap_tcp = if config.portmapper {
        let addr = SocketAddr::new(config.listen.ip(), sluice_xdr::portmap::PORT);
        Some(tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            format!("cannot listen on {addr} for --portmapper: {e} (is rpcbind running?)")
        })?)
    } else {
        None
    };
    let metrics = match config.metrics {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("cannot listen on {addr} for --metrics: {e}"))?,
        ),
        None => None,
    };
    let exports = Arc::new(entries);
    let stats = Arc::new(stats::Stats::default());
    let verifier = exports
        .first()
        .map(|e| e.fs.write_verifier())
        .unwrap_or_default();
    let engine = io::Engine::new(config.io.clone(), config.read_bytes_max, stats.clone());
    // NSM first: the hosts it monitored hold the grace period open as NFSv4 clients do.
    let monitor = nsm_monitor(&config);
    let nlm_hosts: Vec<Vec<u8>> = monitor
        .as_ref()
        .map(|m| m.hosts().map(|(n, _)| grace_record_of_host(n)).collect())
        .unwrap_or_default();
    let mut nfs4 = nfs4_service(&config, exports.clone(), &engine, nlm_hosts)?;
    nfs4.op_observer = Some(stats.clone());
    nfs4.read_plus = config.read_plus;
    let nfs4 = Arc::new(nfs4);
    // A weak reference: the statistics outlive nothing, and hold no service alive.
    let weak = Arc::downgrade(&nfs4);
    if let Some(tls) = &config.net.tls {
        stats.set_tls(tls.clone());
    }
    stats.set_nfs4_gauges(Box::new(move || {
        weak.upgrade()
            .map_or_else(Default::default, |n| stats::Gauges4::of(&n))
    }));
    // The backends' own counters (a Ceph export's libcephfs calls), per export; weak for the
    // same reason.
    let weak = Arc::downgrade(&exports);
    stats.set_backends(Box::new(move || {
        weak.upgrade().map_or_else(Vec::new, |exports| {
            exports
                .iter()
                .filter_map(|e| Some((e.export.path.display().to_string(), e.fs.backend_stats()?)))
                .collect()
        })
    }));
    // v3 changes pass the v4 delegations' recall gate first.
    let recall: Arc<dyn recall::RecallGate> = nfs4.clone();
    let server = Arc::new(service::Server {
        nfs4,
        nfs: nfs::Nfs3 {
            exports: exports.clone(),
            stats: stats.clone(),
            io: engine,
            pipes: splice::PipePool::new(
                if config.read_splice {
                    splice::PIPES_MAX_DEFAULT
                } else {
                    0
                },
                config.read_bytes_max as usize,
                stats.clone(),
            ),
            recall: Some(recall),
        },
        mountd: mountd::Mountd::new(exports.clone()),
        nlm: nlm::NlmServer::new(config.nlm.clone(), monitor),
        ports: portmap::PortTable {
            port,
            udp: config.udp,
        },
        stats,
        log_requests: config.log_requests,
        drc: std::sync::Mutex::new(sluice_rpc::drc::ReplyCache::new(Default::default())),
        drc_done: tokio::sync::Notify::new(),
    });
    for e in exports.iter() {
        info!(
            path = %e.export.path.display(),
            rules = e.export.clients.len(),
            "exporting"
        );
    }
    info!(
        listen = %bound_addr,
        udp = config.udp,
        portmapper = config.portmapper,
        rtmax = config.read_bytes_max,
        wtmax = config.write_bytes_max,
        verifier = %hex(&verifier),
        lease_secs = config.lease.as_secs(),
        threads = tokio::runtime::Handle::current().metrics().num_workers(),
        "sluice serving NFSv3, NFSv4.1/4.2, MOUNTv3 and PORTMAPv2"
    );
    Ok(Bound {
        server,
        tcp,
        udp,
        portmap_tcp,
        metrics,
        config,
    })
}

/// The NFSv4.1 service over `exports`, sharing the v3 engine's write-behind.
fn nfs4_service(
    config: &ServerConfig,
    exports: Arc<Vec<nfs::ExportEntry>>,
    engine: &io::Engine,
    nlm_hosts: Vec<Vec<u8>>,
) -> Result<nfs4::compound::Nfs4, String> {
    // The instance stamp of client ids, session ids and stateids: ids a client kept from an
    // earlier run are then recognised as stale. Seconds, kept in the state directory so that
    // a restart within the same second (kill -9 and a supervisor) still gets a new one.
    let now_secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs() as u32);
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&config.state_dir)
            .map_err(|e| format!("state directory {}: {e}", config.state_dir.display()))?;
    }
    let store: Arc<dyn nfs4::store::StateStore> =
        Arc::new(nfs4::store::DirStore::new(&config.state_dir));
    let boot_epoch = sluice_nfs4state::recovery::records::next_boot_epoch(store.as_ref(), now_secs)
        .map_err(|e| format!("NFSv4 boot epoch in {}: {e}", config.state_dir.display()))?;
    let cfg = sluice_nfs4state::Config4 {
        lease: config.lease,
        boot_epoch,
        clients_max: config.nfs4_limits.clients_max,
        sessions_per_client_max: config.nfs4_limits.sessions_per_client_max,
        opens_per_client_max: config.nfs4_limits.opens_per_client_max,
        opens_max: config.nfs4_limits.opens_max,
        delegs: sluice_nfs4state::delegations::table::DelegConfig {
            write: config.write_delegations,
            ..Default::default()
        },
        ..sluice_nfs4state::Config4::default()
    };
    let mut state =
        sluice_nfs4state::State4::new(cfg, Box::new(sluice_nfs4state::SplitMix(os_seed())));
    // Restart recovery: the clients that held state before are named by the stable records; grace
    // lasts until they have all reclaimed, at most `grace` (see
    // `sluice_nfs4state::recovery::grace`).
    let stable =
        sluice_nfs4state::recovery::records::StableClients::open(store.clone()).map_err(|e| {
            format!(
                "NFSv4 client records in {}: {e}",
                config.state_dir.display()
            )
        })?;
    let mut records: Vec<Vec<u8>> = stable.owners();
    records.extend(nlm_hosts);
    let grace = config.grace.unwrap_or(config.lease);
    if !records.is_empty() {
        info!(
            clients = records.len(),
            length_secs = grace.as_secs_f64(),
            "NFSv4 grace period started: clients of the last run may reclaim their opens and locks"
        );
    }
    state.start_grace(std::time::Instant::now(), records, grace);
    // The pseudo tree's generation follows the export list, so that pseudo handles survive a
    // restart with the same exports and go STALE with other ones (see `sluice_nfs4state::pseudo`).
    let paths: Vec<String> = exports
        .iter()
        .map(|e| e.export.path.to_string_lossy().into_owned())
        .collect();
    let generation = sluice_nfs4state::pseudo::PseudoFs::generation_of(&paths);
    let mut service = nfs4::compound::Nfs4::new(exports, state, generation)
        .map_err(|e| format!("NFSv4 pseudo file system: {e:?}"))?;
    service.write_behind = Some(engine.wb.clone());
    service.records = Some(Arc::new(stable));
    service.parked = sluice_nfs4state::recovery::parked::ParkedFiles::with_store(store);
    let swept = service.sweep_parked();
    if swept > 0 {
        info!("unlinked {swept} file(s) an earlier run kept open after their REMOVE or RENAME");
    }
    if let Some(domain) = &config.idmap_domain {
        service.idmap = nfs4::idmap::IdMap::with_domain(domain, Arc::new(nfs4::idmap::SystemIds));
    }
    Ok(service)
}

/// NSM's records in the state directory ([`sluice_nfs4state::nlm::monitor`]): this start's
/// state number, and the hosts to notify. `None` (logged) when the directory cannot hold
/// them: locks still work, nobody is told of the restart.
fn nsm_monitor(config: &ServerConfig) -> Option<sluice_nfs4state::nlm::monitor::Monitor> {
    use std::os::unix::fs::DirBuilderExt;
    let made = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&config.state_dir);
    let store: Arc<dyn nfs4::store::StateStore> =
        Arc::new(nfs4::store::DirStore::new(&config.state_dir));
    match made.map_err(|e| e.to_string()).and_then(|()| {
        sluice_nfs4state::nlm::monitor::Monitor::start(store).map_err(|e| e.to_string())
    }) {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::warn!(
                "NSM records in {}: {e}; NFSv3 clients will not be told of restarts",
                config.state_dir.display()
            );
            None
        }
    }
}

/// The grace record standing for an NLM host: never an NFSv4 owner's (those come from
/// EXCHANGE_ID and the prefix marks these), so grace waits its full length for the host.
fn grace_record_of_host(name: &[u8]) -> Vec<u8> {
    let mut r = b"nlm-host:".to_vec();
    r.extend_from_slice(name);
    r
}

/// 64 bits the OS seeded (std's hash keys come from the OS's random source), for the NFSv4
/// id generator: unguessable by accident, not a secret (see [`sluice_nfs4state::SplitMix`]).
fn os_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish()
}

/// Serves until a listener fails.
pub async fn run(bound: Bound) -> Result<(), String> {
    run_with(bound, net::Connections::default()).await
}

/// [`run`], keeping the live TCP connections (of every listener) in `connections`, where
/// protocol code and tests find a connection's back channel by `conn_id`.
pub async fn run_with(bound: Bound, connections: net::Connections) -> Result<(), String> {
    let Bound {
        server,
        tcp,
        udp,
        portmap_tcp,
        metrics,
        config,
    } = bound;
    let net = config.net.clone();
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(server.nfs.io.wb.clone().run_flusher());
    tasks.spawn(nfs4::lease::drive(server.nfs4.clone()));
    tasks.spawn(nfs4::callback::drive(
        server.nfs4.clone(),
        connections.clone(),
    ));
    tasks.spawn(nfs4::offload::driver::drive(server.nfs4.clone()));
    nlm::start(&server);
    tasks.spawn(net::serve_tcp_with(
        tcp,
        server.clone(),
        net.clone(),
        connections.clone(),
    ));
    if let Some(u) = udp {
        tasks.spawn(net::serve_udp(u, server.clone(), net.clone()));
    }
    if let Some(p) = portmap_tcp {
        tasks.spawn(net::serve_tcp_with(
            p,
            server.clone(),
            net.clone(),
            connections,
        ));
    }
    if let Some(m) = metrics {
        tasks.spawn(metrics::serve(m, server.stats.clone()));
    }
    match tasks.join_next().await {
        Some(Ok(Ok(()))) | None => Ok(()),
        Some(Ok(Err(e))) => Err(format!("server stopped: {e}")),
        Some(Err(e)) => Err(format!("server task failed: {e}")),
    }
}

/// Held write data and READ buffers are ordinary process memory, which a cgroup cannot reclaim:
/// each may use at most a quarter of the memory the server may have.
fn fit_to_memory(io: &mut io::IoConfig) {
    let Some(limit) = memlimit::memory_limit_bytes() else {
        return;
    };
    let quarter = limit / 4;
    let wb = &mut io.write_behind;
    if wb.dirty_bytes_limit > quarter {
        info!(
            memory_limit = limit,
            from = wb.dirty_bytes_limit,
            to = quarter,
            "write-behind dirty limit lowered to a quarter of the memory limit"
        );
        wb.dirty_bytes_limit = quarter.max(8 << 20);
    }
    let chunks = (quarter as usize / io.pool.chunk_bytes.max(1)).max(64);
    if io.pool.chunks_max > chunks {
        info!(
            from = io.pool.chunks_max,
            to = chunks,
            "READ chunk pool lowered to a quarter of the memory limit"
        );
        io.pool.chunks_max = chunks;
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
