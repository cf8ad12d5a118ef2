//! NLM v4 and NSM v1 for NFSv3 clients: the drivers around `sluice_nfs4state::nlm`'s pure
//! lock service and status monitor, so a v3 mount needs no `nolock`.
//!
//! ```text
//!   client lockd ── NLM call (same port as NFS, via sluice's portmapper) ──▶ handlers
//!        ▲                                                                   │ file key:
//!        │                                                                   │ export gate, then
//!        │                                                                   │ FileSystem::state_key
//!        │                                                                   ▼
//!        │                          nfs4 state lock ─▶ Nlm (pure core) ─▶ the v4 range table
//!        │                                                                   │ decisions
//!        └── GRANTED_MSG / *_RES / SM_NOTIFY ◀── the call task (UDP, bounded queue) ◀┘
//!                  (the client's port from the client's portmapper)
//! ```
//!
//! # Calls to the client
//! Three kinds, all one-way in spirit and sent by one task over UDP from a bounded queue
//! ([`CALLS_QUEUED_MAX`]): NLM_GRANTED_MSG when a blocked lock is granted, the `_RES` answer
//! to each `_MSG` call, and SM_NOTIFY to every monitored host after a restart. The client's
//! NLM (100021 v4) or NSM (100024 v1) port is asked of its portmapper (UDP GETPORT to
//! [`NlmDriverConfig::client_portmap_port`], 111 outside tests) first. Each call is tried
//! [`CALL_TRIES`] times, [`CALL_TIMEOUT`] apart; a lost GRANTED_MSG costs the client one
//! re-send of its blocking LOCK (the Linux client re-sends every 30 s), which then finds the
//! lock held and gets NLM4_GRANTED. A full queue drops the call for the same reason.
//!
//! # Monitoring
//! A host's first granted LOCK (not NM_LOCK, whose host runs no NSM) records it in the state
//! directory with the address it came from ([`Monitor`]). At start every recorded host gets
//! SM_NOTIFY with this server's new state number, and the grace period (the NFSv4 state's)
//! waits its full length for them. An SM_NOTIFY from a host, to the NSM program served here,
//! drops every lock of that host (by the name it gives, and by the address it comes from).
//!
//! # The file
//! An NLM request names the file by its NFSv3 handle. The export is found and the caller
//! admitted as for MOUNT (no reserved-port rule: a lock grants no data), then the key is
//! `FileSystem::state_key` of the handle, the key NFSv4's OPEN and LOCK use for that file.
//! Locks on a Ceph export are kept in the server's table only (not pushed to the backend).
//!
//! # Delegations
//! A Linux NFSv4 client holding a delegation keeps its locks local: it sends LOCK to the
//! server only when it gives the delegation back. So NLM must not meet a delegation silently.
//! LOCK, NM_LOCK and TEST (and LOCK_MSG, TEST_MSG) pass the recall gate of [`crate::recall`]
//! first, as `State4::break_delegations` under the same hold of the state's lock as the lock
//! itself (so no delegation is granted between the check and the lock): an exclusive request
//! conflicts with every delegation of the file (a read delegation's holder may hold read
//! locks locally), a shared one with write delegations. On a conflict the recall starts
//! (CB_RECALL to the holder) and the request is **dropped**: no reply, no `_RES`
//! ([`crate::service::Handled::Dropped`]), counted in [`NlmServer::recall_drops`] and logged.
//! knfsd does the same (its lockd opens the file through nfsd, which breaks the lease and
//! drops the call), because the Linux client takes NLM4_DENIED as final but sends a call
//! that got no reply again. The holder sends its locks with LOCK before its DELEGRETURN, so
//! the retry meets them in the range table and is answered as usual.
//!
//! The cost is the client's retransmission timer: Linux lockd sends the call again after
//! `nlm_timeout` (10 s by default), over UDP and TCP alike (over TCP this server keeps the
//! connection and simply never answers that XID; the retransmission is answered), with the
//! wait growing by 10 s per try; a recall answered at once thus costs the v3 locker about
//! 10 s (the kernel-guest test sees it). Nothing is sent to the client when the recall ends.
//!
//! The other half is in the grant: no delegation is granted on a file that an NFSv3 host
//! holds NLM locks on (`sluice_nfs4state::delegations`), and a waiting (blocked) LOCK recalls
//! a delegation granted since it came before it is granted (`sluice_nfs4state::nlm`). Not
//! covered: an NLM waiter or SHARE reservation does not stop a grant (the grant sees only the
//! range table), and UNLOCK and CANCEL pass no gate (they take nothing another client could
//! hold locally).

pub mod calls;
pub mod handlers;

use crate::exports::{identity, ExportEntry};
use crate::service::Peer;
use bytes::Bytes;
use sluice_nfs4state::nlm::monitor::Monitor;
use sluice_nfs4state::nlm::{Decision, Nlm, NlmConfig};
use sluice_rpc::server::Credentials;
use sluice_vfs::gate::{self, Program};
use sluice_xdr::nlm::{Nlm4Stats, NlmFh};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tracing::debug;

pub use calls::{Outgoing, CALLS_QUEUED_MAX, CALL_TIMEOUT, CALL_TRIES};

/// The drivers' settings.
#[derive(Debug, Clone)]
pub struct NlmDriverConfig {
    /// The port of the clients' portmappers. 111 (RFC 1833); tests point it at their own.
    pub client_portmap_port: u16,
    /// The lock service's bounds and timers.
    pub core: NlmConfig,
}

impl Default for NlmDriverConfig {
    fn default() -> Self {
        Self {
            client_portmap_port: sluice_xdr::portmap::PORT,
            core: NlmConfig::default(),
        }
    }
}

/// NLM and NSM state of a server (module notes). Lock order: the NFSv4 state first, then
/// [`NlmServer::core`].
pub struct NlmServer {
    pub core: Mutex<Nlm>,
    /// `None` when the state directory could not hold the records (then nobody is notified
    /// after a restart; locks still work).
    pub monitor: Mutex<Option<Monitor>>,
    /// Each host's last address (caller name → IP), where calls to it go.
    addrs: Mutex<HashMap<Bytes, IpAddr>>,
    /// This server's NSM state number (odd), for STAT and MON answers.
    pub state_number: u32,
    pub cfg: NlmDriverConfig,
    calls: tokio::sync::mpsc::Sender<Outgoing>,
    calls_rx: Mutex<Option<tokio::sync::mpsc::Receiver<Outgoing>>>,
    /// Requests dropped (no reply) while a delegation of their file was recalled (module
    /// notes: Delegations).
    pub recall_drops: AtomicU64,
}

impl NlmServer {
    pub fn new(cfg: NlmDriverConfig, monitor: Option<Monitor>) -> Self {
        let (tx, rx) = tokio::sync::mpsc::channel(CALLS_QUEUED_MAX);
        Self {
            core: Mutex::new(Nlm::new(cfg.core.clone())),
            state_number: monitor.as_ref().map_or(1, Monitor::state),
            monitor: Mutex::new(monitor),
            addrs: Mutex::new(HashMap::new()),
            cfg,
            calls: tx,
            calls_rx: Mutex::new(Some(rx)),
            recall_drops: AtomicU64::new(0),
        }
    }

    /// Counts and logs a request `what` of `host` dropped while a delegation of its file is
    /// recalled (module notes: Delegations).
    pub fn recall_drop(&self, what: &str, host: &[u8]) -> crate::recall::Recalling {
        let n = self.recall_drops.fetch_add(1, Ordering::Relaxed) + 1;
        // One line per drop: the client sends the call again only every 10 s or more, and
        // the line explains the v3 locker's wait.
        tracing::info!(
            host = %String::from_utf8_lossy(host),
            drops = n,
            "NLM {what} dropped: a delegation of its file is being recalled; the client will send it again"
        );
        crate::recall::Recalling
    }

    /// The hosts to tell of this restart, with their addresses (read at start).
    pub fn hosts_to_notify(&self) -> Vec<(Bytes, Bytes)> {
        self.monitor
            .lock()
            .expect("monitor lock")
            .as_ref()
            .map(|m| m.hosts().map(|(n, a)| (n.clone(), a.clone())).collect())
            .unwrap_or_default()
    }

    /// Takes the queue's receiving end, for the call task (once).
    pub fn take_calls(&self) -> Option<tokio::sync::mpsc::Receiver<Outgoing>> {
        self.calls_rx.lock().expect("calls lock").take()
    }

    /// Queues a call to a client; dropped when the queue is full (module notes).
    pub fn send(&self, call: Outgoing) {
        if self.calls.try_send(call).is_err() {
            debug!("NLM call queue full: a call to a client is dropped");
        }
    }

    /// Remembers where `host` calls from, for calls to it.
    fn seen(&self, host: &[u8], peer: &Peer) {
        let mut addrs = self.addrs.lock().expect("addrs lock");
        if addrs.len() >= self.cfg.core.hosts_max && !addrs.contains_key(host) {
            // Bounded like the host table: forget one (any) host's address.
            if let Some(k) = addrs.keys().next().cloned() {
                addrs.remove(&k);
            }
        }
        addrs.insert(Bytes::copy_from_slice(host), peer.addr.ip());
    }

    fn addr_of(&self, host: &[u8]) -> Option<IpAddr> {
        self.addrs.lock().expect("addrs lock").get(host).copied()
    }

    /// Hands the core's decisions to the call task.
    pub fn act(&self, decisions: Vec<Decision>) {
        for d in decisions {
            match d {
                Decision::Granted { host, args } => match self.addr_of(&host) {
                    Some(ip) => self.send(Outgoing::granted(ip, &args)),
                    None => debug!("NLM: no address for a granted host; it will re-send"),
                },
            }
        }
    }

    /// Records `host` as monitored (its first granted LOCK), durably; a failure is logged and
    /// only costs the host its restart notice.
    fn monitor(&self, host: &[u8], peer: &Peer) {
        let mut m = self.monitor.lock().expect("monitor lock");
        let Some(m) = m.as_mut() else { return };
        let addr = peer.addr.ip().to_string();
        if let Err(e) = m.monitor(host, addr.as_bytes()) {
            debug!("NSM: host not recorded: {e}");
        }
    }
}

/// The key of an NLM request's file (module notes), or the status that refuses it.
pub fn file_key(
    exports: &[ExportEntry],
    peer: &Peer,
    cred: &Credentials,
    fh: &NlmFh,
) -> Result<Bytes, Nlm4Stats> {
    let id = sluice_vfs::handle::export_id_of(fh).ok_or(Nlm4Stats::STALE_FH)?;
    let entry = exports
        .iter()
        .find(|e| e.fs.export_id() == id)
        .ok_or(Nlm4Stats::STALE_FH)?;
    gate::admit(
        &entry.export,
        peer.addr,
        peer.transport.xprtsec(),
        identity(cred).as_ref(),
        Program::Mount,
    )
    .map_err(|_| Nlm4Stats::FAILED)?;
    let handle = crate::nfs::map::handle(&sluice_xdr::nfs3::NfsFh3(fh.0.clone()));
    Ok(entry.fs.state_key(&handle))
}

/// Starts the NLM drivers beside a running server: the call task, the waiters' timer, and
/// SM_NOTIFY to every host the last run monitored. Both tasks end with the server.
pub fn start(server: &std::sync::Arc<crate::service::Server>) {
    let nlm = &server.nlm;
    if let Some(rx) = nlm.take_calls() {
        tokio::spawn(calls::run(rx, nlm.cfg.client_portmap_port));
    }
    tokio::spawn(handlers::run_timer(std::sync::Arc::downgrade(server)));
    for (name, addr) in nlm.hosts_to_notify() {
        match std::str::from_utf8(&addr)
            .ok()
            .and_then(|a| a.parse::<IpAddr>().ok())
        {
            Some(ip) => nlm.send(Outgoing::Notify {
                ip,
                state: nlm.state_number,
            }),
            None => debug!(
                "NSM: host {} has no usable address; not notified",
                String::from_utf8_lossy(&name)
            ),
        }
    }
}

/// How often the timer task looks at the core when nothing is queued: the core's own retry
/// interval decides while waiters exist.
pub const IDLE_TICK: Duration = Duration::from_secs(1);
