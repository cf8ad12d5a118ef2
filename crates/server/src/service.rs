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
use sluice_rpc::server::{self as rpcs, CallParse, RpcCall};
use sluice_xdr::rpc::AcceptStat;
use sluice_xdr::{mount3, nfs3, portmap, Writer};
use std::sync::Arc;
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
        let (reply, status) = self.dispatch(&peer, &call, &record).await;
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
