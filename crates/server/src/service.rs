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
//! Per-procedure facts are still spread out: names in `sluice_xdr` (`nfs3::proc_::NAMES`), the
//! duplicate-request class here ([`is_non_idempotent`]), the client's timer class in
//! `sluice-client`. Statistics and per-request logs key off the names. Gathering them into one
//! table per program version (NFSv4's `nfs4::ops::OP_INFO` already is one) is open work.

use crate::mountd::Mountd;
use crate::net::{Peer, Reply, Service};
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
    /// Woken whenever a cached call completes, for retransmissions waiting on their original.
    pub drc_done: tokio::sync::Notify,
}

impl Service for Server {
    async fn handle(self: Arc<Self>, peer: Peer, record: Vec<Bytes>) -> Option<Reply> {
        let call = match rpcs::parse_call(&record) {
            CallParse::Call(c) => c,
            other => {
                debug!(addr = %peer.addr, "record is not an acceptable call: {other:?}");
                return rpcs::reply_for(&other).map(Reply::from);
            }
        };
        let started = Instant::now();
        let drc_key = is_non_idempotent(call.prog(), call.vers(), call.proc_())
            .then(|| DrcKey::for_call(client_id(&peer), &call, &record));
        if let Some(key) = &drc_key {
            if let Some(reply) = self.check_reply_cache(&peer, &call, key).await {
                return reply.map(Reply::from);
            }
        }
        let (reply, status) = self.dispatch(&peer, &call, &record).await;
        if let Some(key) = drc_key {
            // Only READs are spliced, and READ is idempotent: a cached reply is all in memory.
            debug_assert!(reply.spliced.is_none());
            self.drc
                .lock()
                .expect("drc lock")
                .complete(Instant::now(), key, &reply.segs);
        }
        self.drc_done.notify_waiters();
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

/// How long a retransmission waits for its original, still running, to finish before it is
/// dropped. A client resends on a new connection after a reconnect, so the original's reply
/// went to a dead connection: the copy must be answered from the cache once the original ends,
/// or the client waits a whole major timeout (60 s by default) before resending again.
pub const DRC_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl Server {
    /// Consults the duplicate request cache for a non-idempotent call. `Some(reply)` means the
    /// call must not run (a cached reply to send, or `None` to send nothing); `None` means run
    /// it (it is now recorded as in progress).
    async fn check_reply_cache(
        &self,
        peer: &Peer,
        call: &RpcCall,
        key: &DrcKey,
    ) -> Option<Option<Vec<Bytes>>> {
        let deadline = tokio::time::Instant::now() + DRC_WAIT;
        let mut waited = false;
        loop {
            let notified = self.drc_done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let hit = self
                .drc
                .lock()
                .expect("drc lock")
                .lookup_or_insert(Instant::now(), *key);
            match hit {
                // New, or the original's entry is gone (evicted, or its reply was too large to
                // keep): run it.
                Lookup::Miss => return None,
                Lookup::Hit(Hit::Done(reply)) => {
                    self.stats
                        .engine
                        .drc_hits
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    debug!(addr = %peer.addr, xid = call.xid, waited, "retransmission answered from the reply cache");
                    return Some(Some(reply));
                }
                Lookup::Hit(Hit::InProgress) => {
                    if tokio::time::timeout_at(deadline, notified).await.is_err() {
                        debug!(addr = %peer.addr, xid = call.xid, "retransmission dropped: its original is still running");
                        return Some(None);
                    }
                    waited = true;
                }
            }
        }
    }

    /// Runs one call. Returns the reply and, for NFS calls, the status name for logs.
    async fn dispatch(
        &self,
        peer: &Peer,
        call: &RpcCall,
        record: &[Bytes],
    ) -> (Reply, Option<&'static str>) {
        let (segs, status) = match self.dispatch_nfs(peer, call, record).await {
            Some(r) => return r,
            None => self.dispatch_other(peer, call, record).await,
        };
        (Reply::from(segs), status)
    }

    /// NFS v3 calls (READs may come back spliced); `None` for every other program.
    async fn dispatch_nfs(
        &self,
        peer: &Peer,
        call: &RpcCall,
        record: &[Bytes],
    ) -> Option<(Reply, Option<&'static str>)> {
        let xid = call.xid;
        if (call.prog(), call.vers()) != (nfs3::PROGRAM, nfs3::VERSION) {
            return None;
        }
        if call.proc_() as usize >= nfs3::proc_::NAMES.len() {
            return Some((rpcs::proc_unavail(xid).into(), None));
        }
        let mut r = call.args(record);
        let args = match nfs3::decode_args(call.proc_(), &mut r) {
            Ok(a) => a,
            Err(e) => {
                debug!(addr = %peer.addr, xid, "GARBAGE_ARGS: {e}");
                return Some((rpcs::garbage_args(xid).into(), Some("GARBAGE_ARGS")));
            }
        };
        let mut w = rpcs::success_header(xid);
        let (status, spliced) = self.nfs.handle(peer, &call.cred, args, &mut w).await;
        let reply = Reply {
            segs: w.into_segments(),
            spliced,
        };
        Some((reply, Some(status.name())))
    }

    /// Every call but NFS v3's.
    async fn dispatch_other(
        &self,
        peer: &Peer,
        call: &RpcCall,
        record: &[Bytes],
    ) -> (Vec<Bytes>, Option<&'static str>) {
        let xid = call.xid;
        match (call.prog(), call.vers()) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Transport;
    use sluice_xdr::rpc::{AuthSys, CallHeader, OpaqueAuth};

    fn remove_call(xid: u32) -> (RpcCall, Vec<Bytes>) {
        let cred = AuthSys {
            stamp: 0,
            machine_name: Bytes::new(),
            uid: 0,
            gid: 0,
            gids: vec![],
        };
        let header = CallHeader {
            rpcvers: 2,
            prog: nfs3::PROGRAM,
            vers: nfs3::VERSION,
            proc_: nfs3::proc_::REMOVE,
            cred: cred.to_opaque_auth(),
            verf: OpaqueAuth::none(),
        };
        let mut w = Writer::new();
        sluice_xdr::Pack::pack(
            &sluice_xdr::rpc::MsgHeader::Call { xid, call: header },
            &mut w,
        );
        w.put_opaque(b"handle");
        w.put_string(b"name");
        let record = w.into_segments();
        match rpcs::parse_call(&record) {
            CallParse::Call(c) => (c, record),
            other => panic!("not a call: {other:?}"),
        }
    }

    /// A client resends a REMOVE on a new connection after a reconnect while the original is
    /// still running: the copy must be answered with the original's reply once it ends, not
    /// dropped (the original's reply went to the dead connection).
    #[tokio::test]
    async fn a_retransmission_waits_for_its_running_original_and_gets_its_reply() {
        let dir = std::env::temp_dir().join(format!("sluice-drc-{}", std::process::id()));
        let state = dir.join("state");
        let export = dir.join("export");
        std::fs::create_dir_all(&export).unwrap();
        let cfg = crate::ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            exports: crate::backend::exports::parse_exports(&format!("{} *(rw)", export.display()))
                .unwrap(),
            state_dir: state,
            ..Default::default()
        };
        let bound = crate::bind(cfg).await.unwrap();
        let server = bound.server.clone();
        let peer = Peer {
            addr: "127.0.0.1:900".parse().unwrap(),
            conn_id: 2,
            transport: Transport::Tcp,
            back_channel: None,
        };
        let (call, record) = remove_call(77);
        let key = DrcKey::for_call(client_id(&peer), &call, &record);
        // The original is running.
        assert_eq!(
            server
                .drc
                .lock()
                .unwrap()
                .lookup_or_insert(Instant::now(), key),
            Lookup::Miss
        );
        let s2 = server.clone();
        let (c2, k2) = (call.clone(), key);
        let waiter = tokio::spawn(async move { s2.check_reply_cache(&peer, &c2, &k2).await });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(
            !waiter.is_finished(),
            "the copy must wait for the original, not be dropped"
        );
        // The original finishes.
        let reply = vec![Bytes::from_static(b"original reply")];
        server
            .drc
            .lock()
            .unwrap()
            .complete(Instant::now(), key, &reply);
        server.drc_done.notify_waiters();
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, Some(Some(reply)));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
