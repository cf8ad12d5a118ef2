//! [`CephMount`]: one libcephfs client session, mounted on a directory of a Ceph file system,
//! with the calls sluice makes counted and timed, and the cache callbacks registered.
//!
//! # Bounded start
//! A monitor that does not answer must not hang `sluice serve`. libcephfs waits
//! `client_mount_timeout` for the monitors and the MDS map, 300 s by default; we set it to
//! [`CephConfig::mount_timeout`] (10 s by default) and also give up on the whole mount after
//! that time plus a margin, in a thread of its own, so even a call that ignores the option
//! returns an error naming the monitors that were tried. (The abandoned thread and its client
//! are leaked: a failed start ends the process anyway.)
//!
//! # Restart and reclaim (RFC 8881 §8.4.2, on Ceph)
//! A gateway killed without unmounting leaves its MDS session open: the MDS keeps that
//! session's caps and byte-range locks until the session times out (it goes stale, and its
//! locks go, after the file system's `session_timeout`, 60 s by default, if another client
//! needs its caps; else it is kept until `session_autoclose`, 300 s: see "Session timeout"
//! below). Until then every NFS client's reclaim of a lock conflicts with the dead instance's
//! own lock in Ceph, and so does any other Ceph client. libcephfs has calls to end that
//! session at once (Ceph's `doc/dev/cephfs-reclaim.rst`); on a new client, after `ceph_init`
//! and the file system's selection and before `ceph_mount`:
//!
//! ```text
//!   ceph_start_reclaim(uuid, RESET)   the MDS looks for a session tagged `uuid`:
//!        │                              none (first start, or it timed out): ENOENT
//!        │                              found: evicted, its caps and locks dropped (and, by
//!        │                              Ceph's default, its address blocklisted: libcephfs
//!        │                              waits for the OSD map that says so, so the dead
//!        │                              instance's late writes cannot land)
//!   ceph_finish_reclaim               nothing is taken over in RESET mode: done at once
//!   ceph_set_uuid(uuid)               tag this session for the next instance
//!   ceph_mount
//! ```
//!
//! The uuid is [`CephConfig::uuid`]: stable per node and export (`identity`). The tag can
//! only be set before the mount, and Ceph's order is reclaim first, then the tag (a session
//! that reclaimed inherits the old session's uuid anyway). What happened is [`CephMount::reclaim`],
//! logged and shown in the start-up banner. A failed reclaim (other than ENOENT) is logged and
//! the mount goes on: the old session then times out as it would without reclaim.
//!
//! The grace period is what makes dropping the old state safe: the restarted server grants no
//! new NFS state until its clients have reclaimed, and their reclaims are taken again in Ceph
//! by this new session. Two live sessions must never share a uuid: the second to start would
//! evict the first.
//!
//! # Session timeout (`ceph_set_session_timeout`)
//! Without reclaim, how long a dead gateway's caps and locks outlive it is the MDS's business.
//! libcephfs 16 lets a client name a timeout of its own for its session (sent to the MDS in
//! the session's metadata, so before the mount); [`CephConfig::session_timeout`] sets it. What
//! it does, measured on a one-node cluster with `session_timeout` 30 s
//! (crates/ceph/tests/reclaim.rs, two lock holders killed at once):
//!
//! ```text
//!   nobody needs the dead session's caps    it stays, timeout or not, until the file system's
//!                                            session_autoclose (300 s): the MDS defers ending
//!                                            sessions it is not waiting for
//!   another client needs them (a write)     no timeout: stale at session_timeout, its lock
//!                                            freed then (33 s); timeout 60 s: evicted at 60 s,
//!                                            its lock freed then (63 s)
//! ```
//!
//! The MDS looks at a session's own timeout only once the session is past the file system's
//! `session_timeout`, so it can delay the end of a dead session (and make it an eviction, with
//! the client blocklisted, rather than a stale session that may come back) but never hasten
//! it. Set from the NFS lease (90 s by default, against Ceph's 60 s), it would keep a dead
//! head's locks 30 s longer, and evict a live head that lost the cluster for a lease for good
//! (this backend does not remount). So `sluice serve` does not set it: the field stays for a
//! deployment that wants the fencing, and a dead head's state is ended at once by the reclaim
//! of its successor (above), on the NFS side by the lease.
//!
//! # Callbacks
//! libcephfs tells its user when the MDS revoked cached data or metadata of an inode
//! (`ino_cb`, `dentry_cb`) and when it wants inode references back under cache pressure
//! (`ino_release_cb`). sluice keeps no attributes or data of its own beyond one request; it
//! holds inode references during a call, the export root's for the mount's lifetime, and
//! those of the files and directory streams its open-file cache keeps between calls (bounded
//! in count and closed when idle: `cephfs::open_files`). The invalidations are counted only
//! (every next request goes through libcephfs, whose caps are then gone). A release request
//! is counted and noted in the mount's [`ReleaseQueue`] (`release`): the callback runs on a
//! libcephfs thread and must not call back into libcephfs, so the open-file cache of the
//! [`CephFs`](crate::CephFs) on this mount takes the notes and closes what it holds of those
//! inodes on its own threads, soon after.
//!
//! # Counting
//! Every libcephfs call goes through [`CephMount::call`], which counts it under its
//! [`CallKind`] in a [`ProcStats`] (count, failures, latency histogram: the server's own shape
//! for its NFS calls), so `sluice stats` and `/metrics` show where the time of a slow NFS call
//! went ([`CephStats::backend`], read through `FileSystem::backend_stats`). A call failed when
//! it returned a negative errno; "not found" is a failure to libcephfs and counts as one here.

use crate::ffi::{self, CallbackArgs, Inode, Lib, MountInfo, Vino};
use crate::release::ReleaseQueue;
use sluice_vfs::stats::{BackendStats, CallStats, ProcStats};
use std::ffi::{CStr, CString};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Default for [`CephConfig::mount_timeout`]: long enough for a healthy cluster (a one-node test
/// cluster mounts in well under a second), short enough that a wrong address fails a start
/// quickly.
pub const MOUNT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// How to reach a Ceph file system and which directory of it to mount.
#[derive(Debug, Clone)]
pub struct CephConfig {
    /// The cluster's ceph.conf (monitor addresses, authentication).
    pub conf: PathBuf,
    /// The file system's name (`ceph fs ls`); `None`: the cluster's default.
    pub fs_name: Option<String>,
    /// The client id to authenticate as (`client.<id>`); `None`: libcephfs's default, `admin`.
    pub client_id: Option<String>,
    /// The directory inside the Ceph file system to mount ("/" for the whole file system).
    pub path: String,
    /// Give up mounting after this long. Default [`MOUNT_TIMEOUT_DEFAULT`].
    pub mount_timeout: Duration,
    /// The session's stable identity for reclaim after a restart (see the module notes;
    /// `sluice serve` gives [`default_session_uuid`](crate::default_session_uuid) unless told
    /// otherwise); `None`: no reclaim and no tag (each start is a new client to the MDS).
    pub uuid: Option<String>,
    /// The session's own timeout (`ceph_set_session_timeout`): once the MDS is past the file
    /// system's `session_timeout` waiting for this session's caps, it evicts the session when
    /// this much has passed since it last heard from it, rather than marking it stale. It can
    /// only lengthen the file system's expiry (see the module notes, with what was
    /// measured). `None`, as `sluice serve` leaves it: the file system's own expiry.
    pub session_timeout: Option<Duration>,
}

impl CephConfig {
    pub fn new(conf: impl Into<PathBuf>, path: impl Into<String>) -> CephConfig {
        CephConfig {
            conf: conf.into(),
            fs_name: None,
            client_id: None,
            path: path.into(),
            mount_timeout: MOUNT_TIMEOUT_DEFAULT,
            uuid: None,
            session_timeout: None,
        }
    }
}

/// Why a Ceph export cannot be served.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CephError {
    /// libcephfs could not be loaded (the message names the package to install).
    #[error("{0}")]
    Library(String),
    #[error("ceph: {what} failed: {}", errno_text(*errno))]
    Call { what: String, errno: i32 },
    /// The mount failed or timed out; the text names the monitors tried and the configuration.
    #[error("{0}")]
    Mount(String),
}

fn errno_text(errno: i32) -> String {
    format!(
        "{} (errno {errno})",
        std::io::Error::from_raw_os_error(errno)
    )
}

/// One counted kind of libcephfs call. Declared in [`CallKind::ALL`]'s order (the counters
/// are indexed by the discriminant).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    Lookup,
    Getattr,
    Setattr,
    Open,
    Read,
    Write,
    Fsync,
    Create,
    Remove,
    Rename,
    Link,
    Readdir,
    Readlink,
    Statfs,
    Lock,
    Other,
}

impl CallKind {
    pub const ALL: [CallKind; 16] = [
        CallKind::Lookup,
        CallKind::Getattr,
        CallKind::Setattr,
        CallKind::Open,
        CallKind::Read,
        CallKind::Write,
        CallKind::Fsync,
        CallKind::Create,
        CallKind::Remove,
        CallKind::Rename,
        CallKind::Link,
        CallKind::Readdir,
        CallKind::Readlink,
        CallKind::Statfs,
        CallKind::Lock,
        CallKind::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CallKind::Lookup => "lookup",
            CallKind::Getattr => "getattr",
            CallKind::Setattr => "setattr",
            CallKind::Open => "open",
            CallKind::Read => "read",
            CallKind::Write => "write",
            CallKind::Fsync => "fsync",
            CallKind::Create => "create",
            CallKind::Remove => "remove",
            CallKind::Rename => "rename",
            CallKind::Link => "link",
            CallKind::Readdir => "readdir",
            CallKind::Readlink => "readlink",
            CallKind::Statfs => "statfs",
            CallKind::Lock => "lock",
            CallKind::Other => "other",
        }
    }
}

/// Calls made, their failures and the time spent in them, per kind, and the MDS's requests
/// through the callbacks, since the mount.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CephStats {
    /// Per kind, in [`CallKind::ALL`] order: calls, failures and their latency in libcephfs.
    pub calls: Vec<(CallKind, CallStats)>,
    /// Inode data/metadata invalidations from the MDS (`ino_cb`).
    pub invalidations: u64,
    /// Directory entry invalidations (`dentry_cb`).
    pub dentry_invalidations: u64,
    /// Requests to release inode references under cache pressure (`ino_release_cb`).
    pub release_requests: u64,
}

impl CephStats {
    /// The calls of `kind`.
    pub fn of(&self, kind: CallKind) -> CallStats {
        self.calls
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, c)| *c)
            .unwrap_or_default()
    }

    /// The same counters in the version-neutral shape of `FileSystem::backend_stats`: backend
    /// `ceph`, calls by [`CallKind::name`], the callbacks as events.
    pub fn backend(&self) -> BackendStats {
        BackendStats {
            backend: "ceph",
            calls: self.calls.iter().map(|(k, c)| (k.name(), *c)).collect(),
            events: vec![
                ("inode_invalidations", self.invalidations),
                ("dentry_invalidations", self.dentry_invalidations),
                ("release_requests", self.release_requests),
            ],
        }
    }
}

/// What a call returned, as far as counting goes: whether it failed.
pub(crate) trait CallResult {
    fn failed(&self) -> bool;
}

/// libcephfs's int results: a negative errno on failure.
impl CallResult for i32 {
    fn failed(&self) -> bool {
        *self < 0
    }
}

/// Offsets and counts (`off_t`, `int64_t`): negative errno on failure.
impl CallResult for i64 {
    fn failed(&self) -> bool {
        *self < 0
    }
}

/// Calls that return nothing cannot fail.
impl CallResult for () {
    fn failed(&self) -> bool {
        false
    }
}

/// What the callbacks reach through their `handle`: the counters and the release notes.
#[derive(Default)]
struct Counters {
    calls: [ProcStats; CallKind::ALL.len()],
    invalidations: AtomicU64,
    dentry_invalidations: AtomicU64,
    release_requests: AtomicU64,
    releases: Arc<ReleaseQueue>,
}

/// What the start-up reclaim found (see the module notes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reclaim {
    /// No uuid configured: no reclaim asked, and the session is not tagged.
    NotAsked,
    /// No session with our uuid was left (a first start, or the old one had timed out).
    NothingLeft,
    /// An earlier session with our uuid was found and dropped, with its caps and locks.
    Reclaimed,
    /// `ceph_start_reclaim` failed with this errno (logged; the old session times out).
    Failed(i32),
}

impl std::fmt::Display for Reclaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reclaim::NotAsked => write!(f, "no reclaim (no session uuid)"),
            Reclaim::NothingLeft => write!(f, "no earlier session to reclaim"),
            Reclaim::Reclaimed => write!(f, "reclaimed the previous instance's session"),
            Reclaim::Failed(errno) => write!(f, "reclaim failed: {}", errno_text(*errno)),
        }
    }
}

/// A mounted libcephfs client. Unmounted and released on drop.
pub struct CephMount {
    pub(crate) lib: &'static Lib,
    pub(crate) cmount: *mut MountInfo,
    counters: Arc<Counters>,
    /// Kept alive for libcephfs's callbacks (its `handle` points at it).
    _callbacks: Box<(CallbackArgs, Arc<Counters>)>,
    mons: String,
    fs_name: Option<String>,
    client: String,
    uuid: Option<String>,
    reclaim: Reclaim,
}

// SAFETY: a libcephfs mount may be used from many threads at once (the client serializes
// internally); the raw pointer is only freed in Drop.
unsafe impl Send for CephMount {}
unsafe impl Sync for CephMount {}

struct SendPtr<T>(*mut T);
// SAFETY: moved once to the mounting thread and back; used by one thread at a time.
unsafe impl<T> Send for SendPtr<T> {}

impl CephMount {
    /// Loads libcephfs, reads the configuration and mounts `config.path`, within
    /// `config.mount_timeout`.
    pub fn mount(config: &CephConfig) -> Result<CephMount, CephError> {
        let lib = Lib::load().map_err(CephError::Library)?;
        let id = config.client_id.as_deref().map(cstring).transpose()?;
        let mut cmount: *mut MountInfo = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the id is NUL-terminated or NULL.
        let r = unsafe {
            (lib.ceph_create)(
                &mut cmount,
                id.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            )
        };
        check("ceph_create", r)?;
        let fail_release = |e: CephError, cmount: *mut MountInfo| {
            // SAFETY: created above, not mounted.
            unsafe { (lib.ceph_release)(cmount) };
            e
        };
        let conf = cstring(&config.conf.to_string_lossy())?;
        // SAFETY: live handle, NUL-terminated path.
        let r = unsafe { (lib.ceph_conf_read_file)(cmount, conf.as_ptr()) };
        if let Err(e) = check(&format!("reading {}", config.conf.display()), r) {
            return Err(fail_release(e, cmount));
        }
        let secs = config.mount_timeout.as_secs().max(1).to_string();
        for (k, v) in [
            ("client_mount_timeout", secs.as_str()),
            // Monitor commands and OSD operations must fail too rather than wait forever.
            ("rados_mon_op_timeout", secs.as_str()),
        ] {
            let (k, v) = (cstring(k)?, cstring(v)?);
            // SAFETY: live handle, NUL-terminated strings.
            unsafe { (lib.ceph_conf_set)(cmount, k.as_ptr(), v.as_ptr()) };
        }
        let mons = conf_get(lib, cmount, "mon_host").unwrap_or_else(|| "(none)".into());
        // The entity name: libcephfs 16 does not answer `name` through ceph_conf_get, and it is
        // `client.<id>` with ceph_create's id, `admin` when none is given (CEPH_ARGS is not read).
        let client = conf_get(lib, cmount, "name").unwrap_or_else(|| {
            format!("client.{}", config.client_id.as_deref().unwrap_or("admin"))
        });
        // The file system: named by the caller, or by the configuration (`client_fs`, called
        // `client_mds_namespace` before Ceph 16), or else the cluster's default, whose name
        // libcephfs does not tell (nor its number: `ceph_get_fs_cid` answers 0 for a mount of
        // the default file system).
        let fs_configured = config.fs_name.clone().or_else(|| {
            ["client_fs", "client_mds_namespace"]
                .iter()
                .filter_map(|k| conf_get(lib, cmount, k))
                .find(|v| !v.is_empty())
        });
        let fs_name = fs_configured.clone().unwrap_or_else(|| "(default)".into());
        let counters = Arc::new(Counters::default());
        let mut callbacks = Box::new((
            CallbackArgs {
                handle: std::ptr::null_mut(),
                ino_cb: Some(on_ino_invalidate),
                dentry_cb: Some(on_dentry_invalidate),
                switch_intr_cb: None,
                remount_cb: None,
                umask_cb: None,
                ino_release_cb: Some(on_ino_release),
            },
            counters.clone(),
        ));
        callbacks.0.handle = Arc::as_ptr(&callbacks.1) as *mut libc::c_void;

        let mount_err = |why: String| {
            CephError::Mount(format!(
                "ceph: could not mount {} of file system {fs_name} within {:?}: monitors {mons} \
                 (from {}): {why}",
                config.path,
                config.mount_timeout,
                config.conf.display()
            ))
        };
        // Everything that talks to the cluster runs in a thread we can stop waiting for.
        let (tx, rx) = std::sync::mpsc::channel();
        let job = {
            let cm = SendPtr(cmount);
            let fs = config.fs_name.clone();
            let path = config.path.clone();
            let uuid = config.uuid.clone();
            let session_timeout = config.session_timeout;
            let cb = SendPtr(&mut callbacks.0 as *mut CallbackArgs);
            move || {
                let cm = cm;
                let cb = cb;
                let r = mount_steps(lib, cm.0, fs, path, uuid, session_timeout, cb.0);
                let _ = tx.send((r, cm));
            }
        };
        std::thread::Builder::new()
            .name("ceph-mount".into())
            .spawn(job)
            .map_err(|e| mount_err(format!("cannot start a thread: {e}")))?;
        let margin = Duration::from_secs(5);
        let reclaim = match rx.recv_timeout(config.mount_timeout + margin) {
            Ok((Ok(reclaim), _)) => reclaim,
            Ok((Err(e), cm)) => {
                // SAFETY: not mounted (mount_steps failed); released once.
                unsafe { (lib.ceph_release)(cm.0) };
                return Err(mount_err(e));
            }
            Err(_) => {
                // The client is left to its thread (see the module notes).
                std::mem::forget(callbacks);
                return Err(mount_err("no answer".into()));
            }
        };
        Ok(CephMount {
            lib,
            cmount,
            counters,
            _callbacks: callbacks,
            mons,
            fs_name: fs_configured,
            client,
            uuid: config.uuid.clone(),
            reclaim,
        })
    }

    /// The monitor addresses from the configuration, for the start-up banner.
    pub fn monitors(&self) -> &str {
        &self.mons
    }

    /// The file system's name as configured (the mount's argument or the configuration's
    /// `client_fs`); `None`: the cluster's default.
    pub fn fs_name(&self) -> Option<&str> {
        self.fs_name.as_deref()
    }

    /// The Ceph client name the session authenticated as (`client.admin`), for the banner.
    pub fn client_name(&self) -> &str {
        &self.client
    }

    /// The uuid this session is tagged with, if any ([`CephConfig::uuid`]).
    pub fn uuid(&self) -> Option<&str> {
        self.uuid.as_deref()
    }

    /// What the start-up reclaim found (see the module notes).
    pub fn reclaim(&self) -> Reclaim {
        self.reclaim
    }

    /// libcephfs's version.
    pub fn library_version(&self) -> String {
        self.lib.version()
    }

    pub fn stats(&self) -> CephStats {
        let c = &self.counters;
        CephStats {
            calls: CallKind::ALL
                .iter()
                .map(|k| (*k, c.calls[*k as usize].snapshot()))
                .collect(),
            invalidations: c.invalidations.load(Ordering::Relaxed),
            dentry_invalidations: c.dentry_invalidations.load(Ordering::Relaxed),
            release_requests: c.release_requests.load(Ordering::Relaxed),
        }
    }

    /// The MDS's release requests, noted by the callback for the open-file cache to honour
    /// (see the module notes). One queue per mount: the one [`CephFs`](crate::CephFs) on it
    /// drains it.
    pub(crate) fn release_queue(&self) -> Arc<ReleaseQueue> {
        self.counters.releases.clone()
    }

    /// Runs one libcephfs call, counting it, whether it failed and its time under `kind`.
    pub(crate) fn call<T: CallResult>(&self, kind: CallKind, f: impl FnOnce() -> T) -> T {
        let t0 = Instant::now();
        let r = f();
        self.counters.calls[kind as usize].record(t0.elapsed(), !r.failed());
        r
    }

    /// Releases an inode reference taken by a lookup or create.
    pub(crate) fn put(&self, inode: *mut Inode) {
        if !inode.is_null() {
            // SAFETY: a reference we own, released once.
            unsafe { (self.lib.ceph_ll_put)(self.cmount, inode) };
        }
    }
}

impl Drop for CephMount {
    fn drop(&mut self) {
        // SAFETY: mounted by `mount`, released once.
        unsafe {
            (self.lib.ceph_unmount)(self.cmount);
            (self.lib.ceph_release)(self.cmount);
        }
    }
}

/// The steps that talk to the cluster, in the mounting thread, in the order the module notes
/// give. Errors are short texts for [`CephError::Mount`].
fn mount_steps(
    lib: &'static Lib,
    cmount: *mut MountInfo,
    fs: Option<String>,
    path: String,
    uuid: Option<String>,
    session_timeout: Option<Duration>,
    callbacks: *mut CallbackArgs,
) -> Result<Reclaim, String> {
    let step = |what: &str, r: i32| -> Result<(), String> {
        if r < 0 {
            Err(format!("{what}: {}", errno_text(-r)))
        } else {
            Ok(())
        }
    };
    // SAFETY (all calls below): a live handle from ceph_create, NUL-terminated strings that
    // outlive the calls, and a callback table that outlives the mount (boxed in CephMount).
    unsafe {
        step(
            "ceph_init (connecting to the monitors)",
            (lib.ceph_init)(cmount),
        )?;
        if let Some(fs) = fs {
            let c = CString::new(fs).map_err(|_| "file system name has a NUL".to_string())?;
            step(
                "selecting the file system",
                (lib.ceph_select_filesystem)(cmount, c.as_ptr()),
            )?;
        }
        let mut reclaim = Reclaim::NotAsked;
        if let Some(uuid) = uuid {
            let c = CString::new(uuid.clone()).map_err(|_| "uuid has a NUL".to_string())?;
            let r = (lib.ceph_start_reclaim)(cmount, c.as_ptr(), ffi::RECLAIM_RESET);
            reclaim = match r {
                0 => {
                    (lib.ceph_finish_reclaim)(cmount);
                    Reclaim::Reclaimed
                }
                r if r == -libc::ENOENT => Reclaim::NothingLeft,
                r => Reclaim::Failed(-r),
            };
            match reclaim {
                Reclaim::Failed(_) => tracing::warn!(uuid, "ceph: {reclaim}"),
                _ => tracing::info!(uuid, "ceph: {reclaim}"),
            }
            (lib.ceph_set_uuid)(cmount, c.as_ptr());
        }
        if let Some(t) = session_timeout {
            (lib.ceph_set_session_timeout)(cmount, session_timeout_secs(t));
        }
        (lib.ceph_ll_register_callbacks)(cmount, callbacks);
        let p = CString::new(path.clone()).map_err(|_| "path has a NUL".to_string())?;
        step(
            &format!("mounting {path}"),
            (lib.ceph_mount)(cmount, p.as_ptr()),
        )?;
        Ok(reclaim)
    }
}

/// `ceph_set_session_timeout`'s argument for `t`: whole seconds, rounded up, at least 1 (0
/// would tell the MDS never to evict the session).
fn session_timeout_secs(t: Duration) -> libc::c_uint {
    let secs = t.as_secs() + u64::from(t.subsec_nanos() > 0);
    secs.clamp(1, u64::from(libc::c_uint::MAX)) as libc::c_uint
}

fn conf_get(lib: &Lib, cmount: *mut MountInfo, key: &str) -> Option<String> {
    let k = CString::new(key).ok()?;
    let mut buf = vec![0 as libc::c_char; 1024];
    // SAFETY: live handle, a buffer of the given length.
    let r = unsafe { (lib.ceph_conf_get)(cmount, k.as_ptr(), buf.as_mut_ptr(), buf.len()) };
    if r < 0 {
        return None;
    }
    // SAFETY: libcephfs NUL-terminates within the buffer on success.
    Some(
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned(),
    )
}

pub(crate) fn cstring(s: &str) -> Result<CString, CephError> {
    CString::new(s).map_err(|_| CephError::Call {
        what: format!("{s:?} contains a NUL byte"),
        errno: libc::EINVAL,
    })
}

fn check(what: &str, r: i32) -> Result<(), CephError> {
    if r < 0 {
        Err(CephError::Call {
            what: what.to_string(),
            errno: -r,
        })
    } else {
        Ok(())
    }
}

fn counters<'a>(handle: *mut libc::c_void) -> Option<&'a Counters> {
    // SAFETY: `handle` is the Arc<Counters> pointer registered with the callbacks, alive as
    // long as the mount.
    unsafe { (handle as *const Counters).as_ref() }
}

unsafe extern "C" fn on_ino_invalidate(
    handle: *mut libc::c_void,
    _ino: Vino,
    _off: i64,
    _len: i64,
) {
    if let Some(c) = counters(handle) {
        c.invalidations.fetch_add(1, Ordering::Relaxed);
    }
}

unsafe extern "C" fn on_dentry_invalidate(
    handle: *mut libc::c_void,
    _dir: Vino,
    _ino: Vino,
    _name: *const libc::c_char,
    _len: libc::size_t,
) {
    if let Some(c) = counters(handle) {
        c.dentry_invalidations.fetch_add(1, Ordering::Relaxed);
    }
}

/// On libcephfs's finisher thread: count and note the request, nothing more (see the module
/// notes of `release`).
unsafe extern "C" fn on_ino_release(handle: *mut libc::c_void, ino: Vino) {
    if let Some(c) = counters(handle) {
        c.release_requests.fetch_add(1, Ordering::Relaxed);
        c.releases.push(ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_timeout_is_whole_seconds_rounded_up_and_never_zero() {
        assert_eq!(session_timeout_secs(Duration::from_secs(90)), 90);
        assert_eq!(session_timeout_secs(Duration::from_millis(90_001)), 91);
        assert_eq!(
            session_timeout_secs(Duration::ZERO),
            1,
            "0 is forever to the MDS"
        );
        assert_eq!(
            session_timeout_secs(Duration::from_secs(u64::MAX)),
            libc::c_uint::MAX
        );
    }

    #[test]
    fn call_kinds_index_their_counters_in_all_order() {
        for (i, k) in CallKind::ALL.iter().enumerate() {
            assert_eq!(*k as usize, i, "{k:?}");
        }
    }

    #[test]
    fn the_neutral_shape_names_every_kind_and_the_callbacks() {
        let read = ProcStats::default();
        read.record(Duration::from_micros(300), true);
        read.record(Duration::from_micros(3), false);
        let stats = CephStats {
            calls: CallKind::ALL
                .iter()
                .map(|k| {
                    let c = if *k == CallKind::Read {
                        read.snapshot()
                    } else {
                        CallStats::default()
                    };
                    (*k, c)
                })
                .collect(),
            invalidations: 2,
            dentry_invalidations: 1,
            release_requests: 0,
        };
        assert_eq!(stats.of(CallKind::Read).calls, 2);
        assert_eq!(stats.of(CallKind::Read).errors, 1);
        let b = stats.backend();
        assert_eq!(b.backend, "ceph");
        let names: Vec<&str> = b.calls.iter().map(|(n, _)| *n).collect();
        let expected: Vec<&str> = CallKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names, expected);
        assert_eq!(b.calls[CallKind::Read as usize].1.latency_micros_total, 303);
        assert_eq!(
            b.events,
            [
                ("inode_invalidations", 2),
                ("dentry_invalidations", 1),
                ("release_requests", 0)
            ]
        );
    }
}
