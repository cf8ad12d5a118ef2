//! `sluice mount` / `sluice umount`: arguments, the mount's life cycle, unmounting.
//!
//! ```text
//!   run(args) ─► preflight (/dev/fuse, fusermount3) ─► sluice_client::connect (v4.2, 4.1, 3
//!                 as the URL allows, like every client command) ─► Fs::new
//!       └─► session thread: Session::new (mount(2) or fusermount3, INIT) ─► Session::run
//!       └─► wait for: the session ending (someone ran `sluice umount`)  → Ok
//!                     SIGINT / SIGTERM → unmount (flushes happen in the kernel's
//!                                        release calls first) → wait for the session
//! ```

use crate::cache::AttrCacheConfig;
use crate::fs::{Fs, FsConfig};
use crate::fuse::SluiceFuse;
use fuser::{Config, MountOption, Session, SessionACL, SessionUnmounter};
use sluice_client::client::strip_export;
use sluice_client::{ClientOptions, NfsUrl};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// `sluice mount nfs://host/export /mnt/point [--read-only] [--allow-other] [--acregmin S]…`
#[derive(clap::Args, Debug, Clone)]
pub struct MountArgs {
    /// The export: nfs://host[:port]/path[?version=3|4|4.1|4.2&nfsport=N&mountport=M&uid=U&gid=G].
    /// With no version: NFSv4.2, then 4.1, then 3, as the other commands and Linux's mount.
    pub url: String,
    /// An existing directory to mount on.
    pub mountpoint: PathBuf,
    /// Mount read-only.
    #[arg(long, short = 'r')]
    pub read_only: bool,
    /// Let other users than the one mounting use the mount (needs user_allow_other in
    /// /etc/fuse.conf unless root). Permissions are checked by the kernel against the modes.
    #[arg(long)]
    pub allow_other: bool,
    /// Seconds a regular file's attributes stay cached at least (Linux acregmin).
    #[arg(long, default_value_t = 3)]
    pub acregmin: u64,
    /// Seconds a regular file's attributes stay cached at most (acregmax).
    #[arg(long, default_value_t = 60)]
    pub acregmax: u64,
    /// Seconds a directory's attributes stay cached at least (acdirmin).
    #[arg(long, default_value_t = 30)]
    pub acdirmin: u64,
    /// Seconds a directory's attributes stay cached at most (acdirmax).
    #[arg(long, default_value_t = 60)]
    pub acdirmax: u64,
    /// No attribute caching (every stat asks the server), like Linux's `noac`.
    #[arg(long)]
    pub noac: bool,
    /// Seconds a call may go unanswered before the server counts as not responding and the
    /// connection is re-established (default 60, Linux's TCP `timeo=600`); like the client
    /// commands' `--timeo`.
    #[arg(long, value_name = "SECONDS")]
    pub timeo: Option<u64>,
    /// TCP connections to the NFS service, 1 to 16 (Linux's `nconnect`; also ?nconnect=N in
    /// the URL). Default: automatic, one to start with, more (up to the CPUs, at most 4) while
    /// the receive path is the limit.
    #[arg(long, value_name = "N")]
    pub nconnect: Option<usize>,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Take no write delegations on creates: every close then COMMITs what it wrote, and the
    /// delegation's return does not follow later (`FsConfig::write_delegations`).
    #[arg(long = "no-write-delegations", action = clap::ArgAction::SetFalse)]
    pub write_delegations: bool,
}

/// Certificate files for RPC-with-TLS (`?xprtsec=tls|mtls` in the URL), shared by the mount
/// and the client commands. Each falls back to its environment variable.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// PEM file of the CA that signed the server's certificate, for ?xprtsec=tls|mtls
    /// (default: $SLUICE_TLS_CA).
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// PEM file of the client's certificate, presented with ?xprtsec=mtls
    /// (default: $SLUICE_TLS_CERT).
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM file of the client certificate's private key (default: $SLUICE_TLS_KEY).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
}

impl TlsArgs {
    /// The files named, each missing one taken from its environment variable.
    pub fn files(&self) -> sluice_client::TlsFiles {
        let env = |v: &str| std::env::var_os(v).map(PathBuf::from);
        sluice_client::TlsFiles {
            ca: self.tls_ca.clone().or_else(|| env("SLUICE_TLS_CA")),
            cert: self.tls_cert.clone().or_else(|| env("SLUICE_TLS_CERT")),
            key: self.tls_key.clone().or_else(|| env("SLUICE_TLS_KEY")),
        }
    }
}

impl MountArgs {
    /// Arguments with the Linux defaults for `url` on `mountpoint`.
    pub fn new(url: impl Into<String>, mountpoint: impl Into<PathBuf>) -> MountArgs {
        MountArgs {
            url: url.into(),
            mountpoint: mountpoint.into(),
            read_only: false,
            allow_other: false,
            acregmin: 3,
            acregmax: 60,
            acdirmin: 30,
            acdirmax: 60,
            noac: false,
            timeo: None,
            nconnect: None,
            tls: TlsArgs::default(),
            write_delegations: true,
        }
    }

    fn client_options(&self) -> ClientOptions {
        let mut o = ClientOptions::default();
        if let Some(t) = self.timeo {
            o.rpc.table.major_timeout = Duration::from_secs(t.max(1));
        }
        if let Some(n) = self.nconnect {
            o.fixed_nconnect(n);
        }
        o.tls = self.tls.files();
        // How long an open file's read path trusts its attributes before a GETATTR checks that
        // the data read ahead is still current: the mount's acregmin, like the kernel's
        // attribute cache for a regular file (0 with --noac: every read checks).
        o.attr_timeout = if self.noac {
            Duration::ZERO
        } else {
            Duration::from_secs(self.acregmin)
        };
        o
    }

    fn fs_config(&self, options: &ClientOptions) -> FsConfig {
        let attr = if self.noac {
            AttrCacheConfig::noac()
        } else {
            AttrCacheConfig {
                acregmin: Duration::from_secs(self.acregmin),
                acregmax: Duration::from_secs(self.acregmax),
                acdirmin: Duration::from_secs(self.acdirmin),
                acdirmax: Duration::from_secs(self.acdirmax),
            }
        };
        let d = FsConfig::default();
        FsConfig {
            attr,
            read_only: self.read_only,
            auth_ids: (
                options.uid.unwrap_or(d.auth_ids.0),
                options.gid.unwrap_or(d.auth_ids.1),
            ),
            open_trusts_attrs_for: if self.noac {
                Duration::ZERO
            } else {
                d.open_trusts_attrs_for
            },
            write_delegations: self.write_delegations,
            ..d
        }
    }
}

/// Why a mount failed, in words for the user.
pub type MountError = String;

/// Mounts, serves until unmounted (`sluice umount`) or SIGINT/SIGTERM (then unmounts), and
/// returns. Must run inside a multi-threaded tokio runtime.
pub async fn run(args: MountArgs) -> Result<(), MountError> {
    let mut m = mount(args).await?;
    use tokio::signal::unix::{signal, SignalKind};
    let mut int = signal(SignalKind::interrupt()).map_err(|e| format!("signal: {e}"))?;
    let mut term = signal(SignalKind::terminate()).map_err(|e| format!("signal: {e}"))?;
    loop {
        tokio::select! {
            r = &mut m.ended => {
                m.fs.shutdown().await;
                return session_result(r);
            }
            _ = int.recv() => m.unmount_or_warn(),
            _ = term.recv() => m.unmount_or_warn(),
        }
    }
}

/// A live mount, for callers (and tests) that manage its life themselves.
pub struct Mounted {
    mountpoint: PathBuf,
    unmounter: SessionUnmounter,
    ended: tokio::sync::oneshot::Receiver<std::io::Result<()>>,
    fs: Arc<Fs>,
}

impl Mounted {
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }
    pub fn fs(&self) -> &Arc<Fs> {
        &self.fs
    }

    /// Unmounts (fails with EBUSY while files are open or a process has its cwd inside).
    pub fn unmount(&mut self) -> Result<(), MountError> {
        self.unmounter
            .unmount()
            .map_err(|e| format!("cannot unmount {}: {e}", self.mountpoint.display()))
    }

    fn unmount_or_warn(&mut self) {
        match self.unmount() {
            Ok(()) => tracing::info!("unmounted {}", self.mountpoint.display()),
            Err(e) => eprintln!("sluice: {e}; still serving (close the files and try again)"),
        }
    }

    /// Waits until the session ends (after an unmount from here or from `sluice umount`),
    /// then ends the client's state on the server (NFSv4: DESTROY_SESSION, DESTROY_CLIENTID;
    /// at most `sluice_client::v4::SHUTDOWN_WAIT`, so a server that is gone does not keep the
    /// process alive).
    pub async fn wait(self) -> Result<(), MountError> {
        let r = session_result(self.ended.await);
        self.fs.shutdown().await;
        r
    }
}

fn session_result(
    r: Result<std::io::Result<()>, tokio::sync::oneshot::error::RecvError>,
) -> Result<(), MountError> {
    match r {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("FUSE session failed: {e}")),
        Err(_) => Err("the FUSE session thread died".into()),
    }
}

/// Connects, mounts and starts serving; returns once the kernel has completed INIT.
pub async fn mount(args: MountArgs) -> Result<Mounted, MountError> {
    preflight(&args.mountpoint)?;
    let url = NfsUrl::parse(&args.url).map_err(|e| e.to_string())?;
    let mut options = args.client_options();
    // A long-lived client: an NFSv4 owner stable per host, user and mount point (see
    // sluice_client::v4, "Client owner").
    let place = std::fs::canonicalize(&args.mountpoint).unwrap_or_else(|_| args.mountpoint.clone());
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = url
        .uid
        .or(options.uid)
        .unwrap_or_else(|| unsafe { libc::geteuid() });
    options.v4_owner = Some(sluice_client::v4::stable_owner(
        uid,
        &format!("mount:{}", place.display()),
    ));
    let ns = sluice_client::connect(&url, &options)
        .await
        .map_err(|e| format!("{}: {e}", args.url))?;
    // The URL's path inside what the namespace's root stands for: the export (v3), the
    // pseudo root "/" (v4).
    let path = strip_export(&url.path, ns.export());
    let version = ns.version();
    let fs = match Fs::new(ns.clone(), &path, args.fs_config(&options)).await {
        Ok(fs) => Arc::new(fs),
        Err(e) => {
            let _ = ns.shutdown().await;
            return Err(format!("{}: {e}", args.url));
        }
    };
    tracing::info!("{}: NFS version {version}", args.url);
    let adapter = SluiceFuse::new(fs.clone(), tokio::runtime::Handle::current());
    let slot = adapter.notifier_slot();
    let config = fuse_config(&args);
    let mountpoint = args.mountpoint.clone();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("sluice-fuse".into())
        .spawn(move || {
            let mut session = match Session::new(adapter, &mountpoint, &config) {
                Ok(s) => s,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let _ = slot.set(session.notifier());
            let _ = ready_tx.send(Ok(session.unmount_callable()));
            let _ = ended_tx.send(session.run());
        })
        .map_err(|e| format!("cannot start the FUSE thread: {e}"))?;
    let unmounter = match ready_rx.await {
        Ok(Ok(u)) => u,
        Ok(Err(e)) => {
            let _ = ns.shutdown().await;
            return Err(mount_error(&args.mountpoint, e));
        }
        Err(_) => {
            let _ = ns.shutdown().await;
            return Err("the FUSE session thread died while mounting".into());
        }
    };
    let where_ = args.mountpoint.clone();
    match tokio::task::spawn_blocking(move || set_kernel_readahead(&where_, KERNEL_READAHEAD_BYTES))
        .await
    {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(
            "{}: kernel readahead left at its default ({e}); sequential reads through the \
             mount will be slower (write {} KiB to the mount's read_ahead_kb in /sys/class/bdi \
             as root to fix)",
            args.mountpoint.display(),
            KERNEL_READAHEAD_BYTES >> 10
        ),
        Err(e) => tracing::warn!("setting the kernel readahead failed: {e}"),
    }
    tracing::info!("mounted {} on {}", args.url, args.mountpoint.display());
    Ok(Mounted {
        mountpoint: args.mountpoint,
        unmounter,
        ended: ended_rx,
        fs,
    })
}

/// The kernel's readahead in front of the mount: how far ahead of a sequential reader the kernel
/// asks us for pages, as FUSE READs in flight at once.
///
/// Every FUSE file system gets the block layer's default, 128 KiB (the bdi's `read_ahead_kb`,
/// which the INIT reply's `max_readahead` can only lower): the very number Linux 5.4 gave NFS,
/// and it does here what it did there. The client's own readahead (`File`) fetches from the
/// server far enough ahead for the link; what the kernel's window limits is the hop between
/// the kernel and this process. With 128 KiB a reader waits for one small batch of FUSE READs
/// after another. Measured through a `sluice link` of 40 ms × 300 MB/s (2026-11-25, 300 MiB,
/// `dd bs=1M`, other work on the host): 127 MB/s at 128 KiB, 167–276 MB/s at 0.5 to 64 MiB,
/// where `sluice cat` reached 227 MB/s. 8 MiB keeps 64 READs of 128 KiB in flight (the
/// `max_background` of [`crate::fuse`]) and pins at most that much page cache per reader
/// beyond what it asked for. The kernel's own ramp (it starts small and doubles while reads
/// stay sequential) keeps random readers from paying for it.
pub const KERNEL_READAHEAD_BYTES: u64 = 8 << 20;

/// Sets the kernel's readahead for the FUSE connection mounted at `mountpoint`
/// (`/sys/class/bdi/MAJOR:MINOR/read_ahead_kb`; root only). Called after the session has
/// answered INIT, whose reply would otherwise lower it again.
fn set_kernel_readahead(mountpoint: &Path, bytes: u64) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    // stat goes through the mount (a GETATTR of its root), so it returns after INIT.
    let dev = std::fs::metadata(mountpoint)?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let path = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
    std::fs::write(&path, format!("{}\n", bytes >> 10))
        .map_err(|e| std::io::Error::new(e.kind(), format!("{path}: {e}")))
}

/// Unmounts a sluice (or any FUSE) mount: umount2(2) as root, else `fusermount3 -u`.
pub fn umount(mountpoint: &Path) -> Result<(), MountError> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        let c = std::ffi::CString::new(mountpoint.as_os_str().as_bytes())
            .map_err(|_| format!("{}: path contains NUL", mountpoint.display()))?;
        // SAFETY: c is a valid NUL-terminated path for the duration of the call.
        if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        return Err(format!("cannot unmount {}: {e}", mountpoint.display()));
    }
    let out = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg(mountpoint)
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                "fusermount3 not found: install fuse3 (apt-get install fuse3)".to_string()
            }
            _ => format!("fusermount3: {e}"),
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "cannot unmount {}: {}",
            mountpoint.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn fuse_config(args: &MountArgs) -> Config {
    let mut c = Config::default();
    c.mount_options = vec![
        MountOption::FSName(args.url.clone()),
        MountOption::Subtype("sluice".into()),
        // The kernel checks permissions against the modes we report, like an NFS client does
        // before asking the server (which checks again with our AUTH_SYS credentials).
        MountOption::DefaultPermissions,
        if args.read_only {
            MountOption::RO
        } else {
            MountOption::RW
        },
    ];
    if args.allow_other {
        c.acl = SessionACL::All;
    }
    c
}

fn preflight(mountpoint: &Path) -> Result<(), MountError> {
    if !Path::new("/dev/fuse").exists() {
        return Err(
            "/dev/fuse is missing: install fuse3 (apt-get install fuse3) and load the fuse \
             module (modprobe fuse)"
                .into(),
        );
    }
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root && which("fusermount3").is_none() {
        return Err("fusermount3 not found: install fuse3 (apt-get install fuse3)".into());
    }
    match std::fs::metadata(mountpoint) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!("{}: not a directory", mountpoint.display())),
        Err(e) => Err(format!("{}: {e}", mountpoint.display())),
    }
}

fn mount_error(mountpoint: &Path, e: std::io::Error) -> MountError {
    if e.kind() == std::io::ErrorKind::NotFound {
        format!(
            "cannot mount on {}: {e} (fusermount3 missing? install fuse3: apt-get install fuse3)",
            mountpoint.display()
        )
    } else {
        format!("cannot mount on {}: {e}", mountpoint.display())
    }
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
