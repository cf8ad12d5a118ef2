//! The RPC dispatcher: one record in, one reply (an iovec) out.
//!
//! ```text
//! record --parse_call--> RpcCall --(prog, vers)--> PORTMAP v2 | MOUNT v3 | NFS v3
//!    |                      |                          |
//!    |  not a call          |  other prog / vers       |  proc out of range: PROC_UNAVAIL
//!    v                      v                          |  args do not decode: GARBAGE_ARGS
//!  drop / GARBAGE_ARGS    PROG_UNAVAIL / PROG_MISMATCH  v
//!                                                     handler -> results appended to the reply
//! ```
//!
//! The program tables ([`crate::nfs::PROCS`]) carry each procedure's name and whether it is
//! idempotent; statistics and per-request logs key off them.

use crate::mountd::Mountd;
use crate::net::{Peer, Service};
use crate::nfs::Nfs3;
use crate::portmap::PortTable;
use crate::stats::Stats;
use bytes::Bytes;
use sluice_rpc::drc::{DrcKey, Hit, Lookup, ReplyCache};
use sluice_rpc::server::{self as rpcs, CallParse, RpcCall};
use sluice_xdr::rpc::AcceptStat;
use sluice_xdr::{mount3, nfs3, portmap, Writer};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tracing::{debug, info};

/// The whole server: every program behind one port.
pub struct Server {
    pub nfs: Nfs3,
    pub mountd: Mountd,
    pub ports: PortTable,
    pub stats: std::sync::Arc<Stats>,
    /// Log one line per request (`--log-requests`).
    pub log_requests: bool,
    /// Replies to recent non-idempotent calls, so a retransmission is answered, not re-executed.
    pub drc: Mutex<ReplyCache>,
}

impl Service for Server {
    async fn handle(self: Arc<Self>, peer: Peer, record: Vec<Bytes>) -> Option<Vec<Bytes>> {
        let call = match rpcs::parse_call(&record) {
            CallParse::Call(c) => c,
            other => {
                debug!(addr = %peer.addr, "record is not an acceptable call: {other:?}");
                return rpcs::reply_for(&other);
            }
        };
        let started = Instant::now();
        let drc_key = is_non_idempotent(call.prog(), call.vers(), call.proc_())
            .then(|| DrcKey::for_call(client_id(&peer), &call, &record));
        if let Some(key) = &drc_key {
            let hit = self
                .drc
                .lock()
                .expect("drc lock")
                .lookup_or_insert(started, *key);
            match hit {
                Lookup::Miss => {}
                Lookup::Hit(Hit::InProgress) => {
                    // The original is still running; its reply will answer the client.
                    debug!(addr = %peer.addr, xid = call.xid, "retransmission of a call in progress dropped");
                    return None;
                }
                Lookup::Hit(Hit::Done(reply)) => {
                    self.stats
                        .engine
                        .drc_hits
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    debug!(addr = %peer.addr, xid = call.xid, "retransmission answered from the reply cache");
                    return Some(reply);
                }
            }
        }
        let (reply, status) = self.dispatch(&peer, &call, &record).await;
        if let Some(key) = drc_key {
            self.drc
                .lock()
                .expect("drc lock")
                .complete(Instant::now(), key, &reply);
        }
        let elapsed = started.elapsed();
        self.stats
            .record(call.prog(), call.proc_(), elapsed, status.is_some());
        if self.log_requests {
            info!(
                addr = %peer.addr,
                xid = call.xid,
                prog = call.prog(),
                proc_ = proc_name(call.prog(), call.proc_()),
                status = status.unwrap_or("-"),
                micros = elapsed.as_micros() as u64,
                "request"
            );
        }
        Some(reply)
    }
}

impl Server {
    /// Runs one call. Returns the reply and, for NFS calls, the status name for logs.
    async fn dispatch(
        &self,
        peer: &Peer,
        call: &RpcCall,
        record: &[Bytes],
    ) -> (Vec<Bytes>, Option<&'static str>) {
        let xid = call.xid;
        match (call.prog(), call.vers()) {
            (nfs3::PROGRAM, nfs3::VERSION) => {
                if call.proc_() as usize >= nfs3::proc_::NAMES.len() {
                    return (rpcs::proc_unavail(xid), None);
                }
                let mut r = call.args(record);
                let args = match nfs3::decode_args(call.proc_(), &mut r) {
                    Ok(a) => a,
                    Err(e) => {
                        debug!(addr = %peer.addr, xid, "GARBAGE_ARGS: {e}");
                        return (rpcs::garbage_args(xid), Some("GARBAGE_ARGS"));
                    }
                };
                let mut w = rpcs::success_header(xid);
                let status = self.nfs.handle(peer, &call.cred, args, &mut w).await;
                (w.into_segments(), Some(status.name()))
            }
            (nfs3::PROGRAM, _) => (rpcs::prog_mismatch(xid, nfs3::VERSION, nfs3::VERSION), None),
            (mount3::PROGRAM, mount3::VERSION) => {
                if call.proc_() as usize >= mount3::proc_::NAMES.len() {
                    return (rpcs::proc_unavail(xid), None);
                }
                let mut r = call.args(record);
                let args = match mount3::decode_args(call.proc_(), &mut r) {
                    Ok(a) => a,
                    Err(_) => return (rpcs::garbage_args(xid), Some("GARBAGE_ARGS")),
                };
                let mut w = rpcs::success_header(xid);
                self.mountd.handle(peer, &call.cred, args, &mut w).await;
                (w.into_segments(), None)
            }
            (mount3::PROGRAM, _) => (
                rpcs::prog_mismatch(xid, mount3::VERSION, mount3::VERSION),
                None,
            ),
            (portmap::PROGRAM, portmap::VERSION) => {
                let mut r = call.args(record);
                let args = match portmap::decode_args(call.proc_(), &mut r) {
                    Ok(a) => a,
                    Err(sluice_xdr::DecodeError::BadDiscriminant { .. }) => {
                        return (rpcs::proc_unavail(xid), None)
                    }
                    Err(_) => return (rpcs::garbage_args(xid), Some("GARBAGE_ARGS")),
                };
                let mut w: Writer = rpcs::success_header(xid);
                match self.ports.handle(&args, &mut w) {
                    Some(()) => (w.into_segments(), None),
                    None => (
                        rpcs::accepted_reply(xid, AcceptStat::PROC_UNAVAIL, |_| {}),
                        None,
                    ),
                }
            }
            (portmap::PROGRAM, _) => (
                rpcs::prog_mismatch(xid, portmap::VERSION, portmap::VERSION),
                None,
            ),
            _ => (rpcs::prog_unavail(xid), None),
        }
    }
}

/// Calls whose second execution would differ from the first (RFC 1813 §4.4 is silent; this is
/// knfsd's list plus WRITE, whose replay after a COMMIT would be harmless but wasteful).
pub fn is_non_idempotent(prog: u32, vers: u32, proc_: u32) -> bool {
    use nfs3::proc_::*;
    prog == nfs3::PROGRAM
        && vers == nfs3::VERSION
        && matches!(
            proc_,
            SETATTR | WRITE | CREATE | MKDIR | SYMLINK | MKNOD | REMOVE | RMDIR | RENAME | LINK
        )
}

/// The duplicate request cache's client identity: the client's address without the port, since
/// a client resends on a new connection (and often a new port) after a reconnect.
fn client_id(peer: &Peer) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    peer.addr.ip().hash(&mut h);
    h.finish()
}

/// A procedure's name for logs and statistics.
pub fn proc_name(prog: u32, proc_: u32) -> &'static str {
    let names: &[&'static str] = match prog {
        nfs3::PROGRAM => &nfs3::proc_::NAMES,
        mount3::PROGRAM => &mount3::proc_::NAMES,
        portmap::PROGRAM => &["NULL", "SET", "UNSET", "GETPORT", "DUMP", "CALLIT"],
        _ => &[],
    };
    names.get(proc_ as usize).copied().unwrap_or("UNKNOWN")
}
