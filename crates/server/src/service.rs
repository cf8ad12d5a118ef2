//! The RPC service layer: one record in, one reply (an iovec) out.
//!
//! ```text
//! record --parse_call--> RpcCall --registry.route(prog, vers, proc)--> Procedure { info, handler }
//!    |                      |                                              |
//!    |  not a call          |  no program: PROG_UNAVAIL                    |  info.non_idempotent:
//!    v                      |  no version: PROG_MISMATCH low..high         |    duplicate request
//!  drop / GARBAGE_ARGS      |  past the table's end: PROC_UNAVAIL          |    cache first
//!                           v                                              v
//!                        error reply                     handler: decode (else GARBAGE_ARGS), run,
//!                                                        results appended to the reply
//!                                                        stats and request log by info.name
//! ```
//!
//! What is served is data, not a `match`: the [`registry::Registry`] returned by [`registry()`]
//! holds, per program and version, a table of procedures, each a row of facts from `sluice_xdr`
//! (`nfs3::PROCS`, `mount3::PROCS`, `portmap::PROCS`; see `sluice_xdr::procs`) paired with its
//! [`Handler`]. Adding a version (NFSv4's COMPOUND on program 100003 beside v3) is one more
//! `register` call; PROG_MISMATCH then reports the range of every registered version.
//!
//! Each row's handler is that procedure's own: it decodes only that procedure's argument type
//! and runs only that procedure, so no handler dispatches on the procedure number again.
//! NFSv3's are one generic function per argument type (`nfs3_proc::<P>` over `nfs::Proc3`,
//! listed by `nfs::each_procedure`); MOUNT's and PORTMAP's are small functions made by
//! `in_memory_handlers!`, one per procedure, calling `Mountd`'s and `PortTable`'s methods.
//!
//! The facts drive everything around the handler:
//! - the duplicate request cache keys only calls whose row says `non_idempotent`;
//! - statistics and per-request logs name the call by the row's `name`;
//! - every reply's results are checked against the row's reply-size bound in debug builds (see
//!   [`within_reply_bound`]): the bounds are derived by hand from the RFCs, and every test that
//!   runs a procedure through the server also checks that derivation against real replies. (The
//!   client, which could refuse a larger reply, is not the place yet: its receive path is being
//!   reworked, and a refusal there needs a bound that includes its own record limit.)
//!
//! The request types (`Peer`, `Transport`, `Reply`, the [`Service`] trait) are this layer's
//! (`service/request.rs`): the socket driver (`crate::net`) produces and consumes them, the protocol
//! handlers take them.

pub mod inline;
pub mod registry;
pub mod reply;
pub mod request;

pub use request::{Peer, Reply, Service, Transport};

use crate::mountd::Mountd;
use crate::nfs::{self, Nfs3, Proc3};
use crate::nfs4::compound::{self as compound4, Nfs4};
use crate::portmap::PortTable;
use crate::stats::Stats;
use bytes::Bytes;
use registry::{Registry, Route, Version};
use sluice_rpc::drc::{DrcKey, Hit, Lookup, ReplyCache};
use sluice_rpc::server::{self as rpcs, CallParse, RpcCall};
use sluice_xdr::procs::{ProcInfo, ReplyBound};
use sluice_xdr::{mount3, nfs3, nfs4, portmap, DecodeError};
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tracing::{debug, info};

/// The whole server: every program behind one port.
pub struct Server {
    pub nfs: Nfs3,
    /// NFSv4.1/4.2: the COMPOUND processor and its state (one port with v3).
    pub nfs4: Arc<Nfs4>,
    pub mountd: Mountd,
    /// NLM v4 and NSM v1 for NFSv3 clients' locks ([`crate::nlm`]).
    pub nlm: crate::nlm::NlmServer,
    pub ports: PortTable,
    pub stats: std::sync::Arc<Stats>,
    /// Log one line per request (`--log-requests`).
    pub log_requests: bool,
    /// Replies to recent non-idempotent calls, so a retransmission is answered, not re-executed.
    pub drc: Mutex<ReplyCache>,
    /// Woken whenever a cached call completes, for retransmissions waiting on their original.
    pub drc_done: tokio::sync::Notify,
}

/// What a procedure's handler made of a call.
#[derive(Debug)]
pub enum Handled {
    /// Results to send (after the accepted-reply header the handler wrote).
    Done(Done),
    /// The arguments did not decode: GARBAGE_ARGS.
    GarbageArgs(DecodeError),
    /// A procedure of the table this server does not carry out (PORTMAP's CALLIT).
    ProcUnavail,
    /// No reply at all: the client is to send the call again later (an NLM request while a
    /// delegation of its file is recalled, `crate::nlm`'s notes). The handler counted and
    /// logged it.
    Dropped,
}

/// A call carried out.
#[derive(Debug)]
pub struct Done {
    pub reply: Reply,
    /// The protocol's status name, for request logs (NFS calls).
    pub status: Option<&'static str>,
    /// The call succeeded (for the per-procedure error counters).
    pub ok: bool,
    /// Bytes of the reply after the RPC header: what the procedure's reply bound is about.
    pub results_bytes: u64,
    /// The payload the call asked for (READ's count, READDIR's count, READDIRPLUS's maxcount),
    /// the part of the bound that grows with the arguments; 0 for the others.
    pub payload_bytes_asked: u64,
}

/// A handler's future: boxed, as the registry holds handlers of different programs as one type.
pub type HandlerFuture<'a> = Pin<Box<dyn Future<Output = Handled> + Send + 'a>>;

/// Carries out one call of a registered procedure: decodes the arguments from the record and
/// writes the reply.
pub type Handler = for<'a> fn(
    &'a Server,
    &'a Peer,
    &'a RpcCall,
    &'a [Bytes],
    &'static ProcInfo,
) -> HandlerFuture<'a>;

/// The programs sluice serves: PORTMAP v2, NFS v3 and v4, and MOUNT v3, each procedure's facts
/// from its `sluice_xdr` table. Built once, on first use; shared by every [`Server`] (what is
/// served is a property of the build, not of a configuration).
pub fn registry() -> &'static Registry<Handler> {
    static REGISTRY: std::sync::LazyLock<Registry<Handler>> =
        std::sync::LazyLock::new(build_registry);
    &REGISTRY
}

fn build_registry() -> Registry<Handler> {
    let mut r = Registry::default();
    r.register(
        portmap::PROGRAM,
        "PORTMAP",
        Version::new(
            portmap::VERSION,
            &portmap::PROCS,
            [
                portmap_null as Handler,
                portmap_set,
                portmap_unset,
                portmap_getport,
                portmap_dump,
                portmap_callit,
            ],
        ),
    )
    .register(nfs3::PROGRAM, "NFS", nfs3_version())
    .register(
        nfs4::PROGRAM,
        "NFS",
        // One handler for both rows: NULL and COMPOUND share the transport check below.
        Version::new(
            nfs4::VERSION,
            &nfs4::PROCS,
            [nfs4_call as Handler, nfs4_call],
        ),
    )
    .register(
        mount3::PROGRAM,
        "MOUNT",
        Version::new(
            mount3::VERSION,
            &mount3::PROCS,
            [
                mount3_null as Handler,
                mount3_mnt,
                mount3_dump,
                mount3_umnt,
                mount3_umntall,
                mount3_export,
            ],
        ),
    )
    .register(
        sluice_xdr::nlm::PROGRAM,
        "NLM",
        crate::nlm::handlers::nlm_version(),
    )
    .register(
        sluice_xdr::nsm::PROGRAM,
        "NSM",
        crate::nlm::handlers::nsm_version(),
    );
    r
}

impl Service for Server {
    fn conn_closed(&self, conn_id: u64) {
        self.nfs4.conn_closed(conn_id);
    }

    async fn handle(self: Arc<Self>, peer: Peer, record: Vec<Bytes>) -> Option<Reply> {
        let call = match rpcs::parse_call(&record) {
            CallParse::Call(c) => c,
            other => {
                debug!(addr = %peer.addr, "record is not an acceptable call: {other:?}");
                return rpcs::reply_for(&other).map(Reply::from);
            }
        };
        let started = Instant::now();
        let xid = call.xid;
        let (program, procedure) = match registry().route(call.prog(), call.vers(), call.proc_()) {
            Route::Found { program, procedure } => (program, procedure),
            refused => {
                let (reply, status) = match refused {
                    Route::ProgMismatch { low, high } => {
                        (rpcs::prog_mismatch(xid, low, high), "PROG_MISMATCH")
                    }
                    Route::ProcUnavail => (rpcs::proc_unavail(xid), "PROC_UNAVAIL"),
                    _ => (rpcs::prog_unavail(xid), "PROG_UNAVAIL"),
                };
                let elapsed = started.elapsed();
                self.stats
                    .record(call.prog(), call.vers(), call.proc_(), elapsed, false);
                if self.log_requests {
                    info!(
                        addr = %peer.addr,
                        xid,
                        prog = call.prog(),
                        vers = call.vers(),
                        proc_ = call.proc_(),
                        status,
                        micros = elapsed.as_micros() as u64,
                        "request"
                    );
                }
                return Some(Reply::from(reply));
            }
        };
        let info = procedure.info;
        let drc_key = info
            .non_idempotent
            .then(|| DrcKey::for_call(client_id(&peer), &call, &record));
        if let Some(key) = &drc_key {
            if let Some(reply) = self.check_reply_cache(&peer, &call, key).await {
                return reply.map(Reply::from);
            }
        }
        let (reply, status, ok) = match (procedure.handler)(&self, &peer, &call, &record, info)
            .await
        {
            Handled::Done(done) => {
                debug_assert!(
                    within_reply_bound(info, done.results_bytes, done.payload_bytes_asked),
                    "{} {} results are {} bytes, past the procedure's bound {:?} (payload asked {})",
                    program.name,
                    info.name,
                    done.results_bytes,
                    info.reply,
                    done.payload_bytes_asked
                );
                (done.reply, done.status, done.ok)
            }
            Handled::GarbageArgs(e) => {
                debug!(addr = %peer.addr, xid, "GARBAGE_ARGS: {e}");
                (
                    Reply::from(rpcs::garbage_args(xid)),
                    Some("GARBAGE_ARGS"),
                    false,
                )
            }
            Handled::ProcUnavail => (Reply::from(rpcs::proc_unavail(xid)), None, false),
            Handled::Dropped => {
                if let Some(key) = drc_key {
                    // Run afresh when sent again, not answered "in progress" from the cache.
                    self.drc.lock().expect("drc lock").abort(&key);
                }
                self.drc_done.notify_waiters();
                self.stats.record(
                    call.prog(),
                    call.vers(),
                    call.proc_(),
                    started.elapsed(),
                    false,
                );
                return None;
            }
        };
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
            .record(call.prog(), call.vers(), call.proc_(), elapsed, ok);
        if self.log_requests {
            info!(
                addr = %peer.addr,
                xid,
                prog = call.prog(),
                vers = call.vers(),
                proc_ = info.name,
                status = status.unwrap_or("-"),
                micros = elapsed.as_micros() as u64,
                "request"
            );
        }
        Some(reply)
    }
}

/// Whether a reply's results (`results_bytes`, after the RPC header) fit the procedure's bound,
/// given the payload its call asked for. A `Record` bound is the driver's business (the record
/// limit), so it always fits here.
pub fn within_reply_bound(info: &ProcInfo, results_bytes: u64, payload_bytes_asked: u64) -> bool {
    match info.reply {
        ReplyBound::Record => true,
        bound => results_bytes <= bound.bytes_max(payload_bytes_asked, u64::MAX),
    }
}

/// NFSv3's table: each procedure's row of `nfs3::PROCS` paired with that procedure's own
/// handler ([`nfs3_proc`] for its argument type, [`nfs3_null`] for NULL). The list of
/// procedures is `nfs::each_procedure`'s (in procedure-number order, which a test checks
/// against each type's `Proc3::NUM`), the one `Nfs3::handle` dispatches on.
fn nfs3_version() -> Version<Handler> {
    struct Handlers(Vec<Handler>);
    impl nfs::EachProc3 for Handlers {
        fn visit<P: Proc3>(&mut self) {
            self.0.push(nfs3_proc::<P>);
        }
    }
    let mut handlers = Handlers(vec![nfs3_null as Handler]);
    nfs::each_procedure(&mut handlers);
    Version::new(nfs3::VERSION, &nfs3::PROCS, handlers.0)
}

/// NFS v4 (minor versions 1 and 2): NULL, and COMPOUND through the processor's one driver loop
/// ([`compound4::drive`], the loop the simulator runs too) with this service's executor
/// ([`Pool`]): the steps that may call a file system run on the blocking pool (as v3's backend
/// calls do), each running every op up to the next data op; READ, WRITE and COMMIT run on this
/// task through the data path v3 uses, so a last READ may be spliced (see `nfs4::data`). A
/// COMPOUND whose connection goes away mid-evaluation frees its slot (the driver's guard). Statistics and
/// request logs count the COMPOUND as one call under its overall status; each op inside is
/// counted by the processor's [`compound4::OpObserver`] hook (`stats::OpStats4`).
///
/// Not over UDP: RFC 8881 §2.9.1 requires a transport with congestion control, and the session
/// reply cache assumes a connection. Such a call gets PROG_MISMATCH with the program's range, as
/// knfsd answers it.
fn nfs4_call<'a>(
    server: &'a Server,
    peer: &'a Peer,
    call: &'a RpcCall,
    record: &'a [Bytes],
    _info: &'static ProcInfo,
) -> HandlerFuture<'a> {
    Box::pin(async move {
        if peer.transport == Transport::Udp {
            let (low, high) = registry()
                .program(nfs4::PROGRAM)
                .map_or((nfs4::VERSION, nfs4::VERSION), |p| p.version_range());
            return Handled::Done(Done {
                reply: Reply::from(rpcs::prog_mismatch(call.xid, low, high)),
                status: Some("PROG_MISMATCH"),
                ok: false,
                results_bytes: 0,
                payload_bytes_asked: 0,
            });
        }
        let w = rpcs::success_header(call.xid);
        let header_bytes = w.len();
        if call.proc_() == nfs4::proc_::NULL {
            return Handled::Done(done_in_memory(w, header_bytes));
        }
        // Decoded in place: a WRITE's payload stays slices of the received record.
        let exec = Pool {
            path: crate::datapath::DataPath {
                io: &server.nfs.io,
                stats: &server.nfs.stats,
                pipes: &server.nfs.pipes,
            },
        };
        let from = compound4::Sender {
            addr: peer.addr,
            conn: peer.conn_id,
            xprtsec: peer.transport.xprtsec(),
            cred: call.cred.clone(),
        };
        let reply = match compound4::drive(
            &server.nfs4,
            &exec,
            &from,
            record,
            call.args_offset,
            peer.transport.may_splice(),
        )
        .await
        {
            compound4::Driven::Reply(r) => r,
            compound4::Driven::GarbageArgs => {
                return Handled::GarbageArgs(DecodeError::Invalid("COMPOUND4args"))
            }
            // The processor panicked (logged): the client gets SYSTEM_ERR, not silence.
            compound4::Driven::Failed => {
                return Handled::Done(Done {
                    reply: Reply::from(rpcs::system_err(call.xid)),
                    status: Some("SYSTEM_ERR"),
                    ok: false,
                    results_bytes: 0,
                    payload_bytes_asked: 0,
                })
            }
        };
        let mut segs = w.into_segments();
        segs.extend(reply.segs);
        let reply_out = Reply {
            segs,
            spliced: reply.spliced,
        };
        Handled::Done(Done {
            results_bytes: (reply_out.len() - header_bytes) as u64,
            reply: reply_out,
            status: Some(reply.status.name()),
            ok: reply.status == nfs4::Nfsstat4::OK,
            payload_bytes_asked: 0,
        })
    })
}

/// The service's [`compound4::Executor`]: metadata steps on the blocking pool (as v3's backend
/// calls), READ, WRITE and COMMIT on the service's task through the data path v3 uses (splice,
/// RWF_NOWAIT, io_uring, write-behind), held writes landed as v3's SETATTR and REMOVE land them.
struct Pool<'a> {
    path: crate::datapath::DataPath<'a>,
}

impl compound4::Executor for Pool<'_> {
    fn now(&self) -> Instant {
        Instant::now()
    }

    /// Quick metadata steps run on this task ([`inline`]): the pool's two wake-ups cost more.
    fn quick_inline(&self) -> bool {
        true
    }

    fn metadata<T: Send + 'static>(
        &self,
        step: impl FnOnce() -> T + Send + 'static,
    ) -> impl std::future::Future<Output = Option<T>> + Send {
        crate::datapath::spawn(step)
    }

    fn data(
        &self,
        req: crate::nfs4::data::DataReq,
    ) -> impl std::future::Future<Output = Result<crate::nfs4::data::DataDone, nfs4::Nfsstat4>> + Send
    {
        let path = self.path;
        async move {
            crate::nfs4::data::run(path, req)
                .await
                .map_err(crate::nfs4::map::status)
        }
    }

    fn settle(
        &self,
        s: crate::nfs4::data::Settle,
        wait_max: std::time::Duration,
    ) -> impl std::future::Future<Output = bool> + Send {
        crate::nfs4::data::settle(self.path, s, wait_max)
    }
}

/// NFSv3 NULL: no arguments to decode (`void`), no results, no export.
fn nfs3_null<'a>(
    _server: &'a Server,
    _peer: &'a Peer,
    call: &'a RpcCall,
    _record: &'a [Bytes],
    _info: &'static ProcInfo,
) -> HandlerFuture<'a> {
    let w = rpcs::success_header(call.xid);
    let header_bytes = w.len();
    let done = nfs3_done(w, header_bytes, nfs3::Nfsstat3::OK, None, 0);
    Box::pin(std::future::ready(Handled::Done(done)))
}

/// NFSv3 procedure `P`: decodes `P`'s arguments, runs it ([`Nfs3::call`]), and sends its
/// results. READs may come back spliced.
fn nfs3_proc<'a, P: Proc3>(
    server: &'a Server,
    peer: &'a Peer,
    call: &'a RpcCall,
    record: &'a [Bytes],
    _info: &'static ProcInfo,
) -> HandlerFuture<'a> {
    Box::pin(async move {
        let mut r = call.args(record);
        let mut args = match P::unpack(&mut r) {
            Ok(a) => a,
            Err(e) => return Handled::GarbageArgs(e),
        };
        let payload_bytes_asked = args.payload_asked().map_or(0, |asked| u64::from(*asked));
        let mut w = rpcs::success_header(call.xid);
        let header_bytes = w.len();
        let (status, spliced) = server.nfs.call(peer, &call.cred, args, &mut w).await;
        Handled::Done(nfs3_done(
            w,
            header_bytes,
            status,
            spliced,
            payload_bytes_asked,
        ))
    })
}

/// An NFSv3 reply: the status names the call in request logs, and decides whether it counts
/// as an error.
fn nfs3_done(
    w: sluice_xdr::Writer,
    header_bytes: usize,
    status: nfs3::Nfsstat3,
    spliced: Option<crate::splice::SplicedData>,
    payload_bytes_asked: u64,
) -> Done {
    let reply = Reply {
        segs: w.into_segments(),
        spliced,
    };
    Done {
        results_bytes: (reply.len() - header_bytes) as u64,
        reply,
        status: Some(status.name()),
        ok: status == nfs3::Nfsstat3::OK,
        payload_bytes_asked,
    }
}

/// Handlers of procedures answered from memory (MOUNT, PORTMAP), one function per procedure:
/// each decodes its own argument type (GARBAGE_ARGS if it does not decode), then `$body`, with
/// the server, the peer, the credentials and the arguments bound to the names given, yields the
/// results to send, or `None` for a procedure this server does not carry out (PROC_UNAVAIL).
macro_rules! in_memory_handlers {
    ($(
        $(#[$doc:meta])*
        fn $name:ident($server:pat, $peer:pat, $cred:pat, $args:pat = $ty:ty) $body:block
    )*) => {$(
        $(#[$doc])*
        fn $name<'a>(
            server: &'a Server,
            peer: &'a Peer,
            call: &'a RpcCall,
            record: &'a [Bytes],
            _info: &'static ProcInfo,
        ) -> HandlerFuture<'a> {
            Box::pin(async move {
                let args = match <$ty as sluice_xdr::Unpack>::unpack(&mut call.args(record)) {
                    Ok(a) => a,
                    Err(e) => return Handled::GarbageArgs(e),
                };
                let ($server, $peer, $cred, $args) = (server, peer, &call.cred, args);
                match $body {
                    Some(results) => {
                        let mut w = rpcs::success_header(call.xid);
                        let header_bytes = w.len();
                        sluice_xdr::Pack::pack(&results, &mut w);
                        Handled::Done(done_in_memory(w, header_bytes))
                    }
                    None => Handled::ProcUnavail,
                }
            })
        }
    )*};
}

in_memory_handlers! {
    fn mount3_null(_, _, _, () = ()) { Some(()) }
    fn mount3_mnt(server, peer, cred, path = mount3::DirPath) {
        Some(server.mountd.mnt(peer, cred, path).await)
    }
    fn mount3_dump(server, _, _, () = ()) { Some(server.mountd.dump()) }
    fn mount3_umnt(server, peer, _, path = mount3::DirPath) {
        server.mountd.umnt(peer, &path);
        Some(())
    }
    fn mount3_umntall(server, peer, _, () = ()) {
        server.mountd.umntall(peer);
        Some(())
    }
    fn mount3_export(server, _, _, () = ()) { Some(server.mountd.export()) }

    fn portmap_null(_, _, _, () = ()) { Some(()) }
    fn portmap_set(server, _, _, m = portmap::Mapping) { Some(server.ports.set(&m)) }
    fn portmap_unset(server, _, _, m = portmap::Mapping) { Some(server.ports.set(&m)) }
    fn portmap_getport(server, _, _, m = portmap::Mapping) { Some(server.ports.getport(&m)) }
    fn portmap_dump(server, _, _, () = ()) { Some(server.ports.dump()) }
    /// CALLIT is not carried out: its arguments are checked, then PROC_UNAVAIL.
    fn portmap_callit(_, _, _, _ = portmap::CallArgs) { None::<()> }
}

/// A successful reply held in memory, with no status name and nothing that grows with the call.
fn done_in_memory(w: sluice_xdr::Writer, header_bytes: usize) -> Done {
    let results_bytes = (w.len() - header_bytes) as u64;
    Done {
        reply: Reply::from(w.into_segments()),
        status: None,
        ok: true,
        results_bytes,
        payload_bytes_asked: 0,
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
}

/// The duplicate request cache's client identity: the client's address without the port, since
/// a client resends on a new connection (and often a new port) after a reconnect.
fn client_id(peer: &Peer) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    peer.addr.ip().hash(&mut h);
    h.finish()
}

/// A procedure's name for logs and statistics, from the registry's tables ("UNKNOWN" for a
/// call no table holds).
pub fn proc_name(prog: u32, vers: u32, proc_: u32) -> &'static str {
    registry()
        .facts(prog, vers, proc_)
        .map_or("UNKNOWN", |i| i.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_xdr::rpc::{AuthSys, CallHeader, OpaqueAuth};
    use sluice_xdr::Writer;

    fn remove_call(xid: u32) -> (RpcCall, Vec<Bytes>) {
        let record = call_record(
            xid,
            (nfs3::PROGRAM, nfs3::VERSION, nfs3::proc_::REMOVE),
            |w| {
                w.put_opaque(b"handle");
                w.put_string(b"name");
            },
        );
        match rpcs::parse_call(&record) {
            CallParse::Call(c) => (c, record),
            other => panic!("not a call: {other:?}"),
        }
    }

    fn call_record(
        xid: u32,
        (prog, vers, proc_): (u32, u32, u32),
        args: impl FnOnce(&mut Writer),
    ) -> Vec<Bytes> {
        let cred = AuthSys {
            stamp: 0,
            machine_name: Bytes::new(),
            uid: 0,
            gid: 0,
            gids: vec![],
        };
        let header = CallHeader {
            rpcvers: 2,
            prog,
            vers,
            proc_,
            cred: cred.to_opaque_auth(),
            verf: OpaqueAuth::none(),
        };
        let mut w = Writer::new();
        sluice_xdr::Pack::pack(
            &sluice_xdr::rpc::MsgHeader::Call { xid, call: header },
            &mut w,
        );
        args(&mut w);
        w.into_segments()
    }

    async fn test_server(name: &str) -> (Arc<Server>, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("sluice-{name}-{}", std::process::id()));
        let export = dir.join("export");
        std::fs::create_dir_all(&export).unwrap();
        let cfg = crate::ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            exports: crate::backend::exports::parse_exports(&format!("{} *(rw)", export.display()))
                .unwrap(),
            state_dir: dir.join("state"),
            ..Default::default()
        };
        (crate::bind(cfg).await.unwrap().server, dir)
    }

    /// The statistics count a call under its table's row, and an error is an error: an NFS
    /// status other than NFS3_OK or an RPC-level refusal (the dispatch `match` counted every
    /// NFS status as success and every MOUNT call as an error).
    #[tokio::test]
    async fn stats_count_calls_and_errors_by_the_row_the_call_reached() {
        use std::sync::atomic::Ordering::Relaxed;
        let (server, dir) = test_server("stats").await;
        let peer = Peer {
            addr: "127.0.0.1:901".parse().unwrap(),
            conn_id: 3,
            transport: Transport::Tcp,
            back_channel: None,
        };
        let send = |record: Vec<Bytes>| {
            let (s, p) = (server.clone(), peer.clone());
            async move { s.handle(p, record).await.expect("a reply") }
        };
        send(call_record(
            1,
            (nfs3::PROGRAM, 3, nfs3::proc_::NULL),
            |_| {},
        ))
        .await;
        // A handle the server never issued: NFS3ERR_BADHANDLE (or STALE), an error.
        send(call_record(
            2,
            (nfs3::PROGRAM, 3, nfs3::proc_::GETATTR),
            |w| w.put_opaque(&[0u8; 32]),
        ))
        .await;
        // Arguments that do not decode: GARBAGE_ARGS, an error of that procedure.
        send(call_record(
            3,
            (nfs3::PROGRAM, 3, nfs3::proc_::GETATTR),
            |_| {},
        ))
        .await;
        send(call_record(
            4,
            (mount3::PROGRAM, 3, mount3::proc_::NULL),
            |_| {},
        ))
        .await;
        // NFS version 2 is not served: PROG_MISMATCH, counted apart from v3's NULL.
        send(call_record(
            5,
            (nfs3::PROGRAM, 2, nfs3::proc_::NULL),
            |_| {},
        ))
        .await;
        let st = &server.stats;
        let null = &st.nfs[nfs3::proc_::NULL as usize];
        let getattr = &st.nfs[nfs3::proc_::GETATTR as usize];
        let mnt_null = &st.mount[mount3::proc_::NULL as usize];
        assert_eq!(
            (null.calls.load(Relaxed), null.errors.load(Relaxed)),
            (1, 0)
        );
        assert_eq!(
            (getattr.calls.load(Relaxed), getattr.errors.load(Relaxed)),
            (2, 2)
        );
        assert_eq!(
            (mnt_null.calls.load(Relaxed), mnt_null.errors.load(Relaxed)),
            (1, 0)
        );
        assert_eq!(st.other_calls.load(Relaxed), 1);
        let _ = std::fs::remove_dir_all(&dir);
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

    /// The production registry serves what the dispatch `match` served, and every procedure's
    /// duplicate-request class is its table's (only NFSv3's namespace changes and WRITE).
    #[test]
    fn the_registry_serves_portmap_nfs3_nfs4_and_mount3() {
        let r = registry();
        // PORTMAP, NFS (v4 joins the NFS program), MOUNT, NLM and NSM.
        assert_eq!(r.programs().len(), 5, "v4 joins the NFS program");
        for vers in [2, 5] {
            assert!(matches!(
                r.route(nfs3::PROGRAM, vers, 0),
                Route::ProgMismatch { low: 3, high: 4 }
            ));
        }
        assert!(matches!(r.route(nfs4::PROGRAM, 4, 2), Route::ProcUnavail));
        assert!(matches!(r.route(nfs3::PROGRAM, 3, 22), Route::ProcUnavail));
        assert!(matches!(
            r.route(portmap::PROGRAM, 2, 6),
            Route::ProcUnavail
        ));
        // NLM: version 4 only (the 64-bit one NFSv3 clients use).
        assert!(matches!(
            r.route(100_021, 1, 0),
            Route::ProgMismatch { low: 4, high: 4 }
        ));
        assert!(matches!(r.route(100_021, 4, 16), Route::Found { .. }));
        assert!(matches!(r.route(100_021, 4, 24), Route::ProcUnavail));
        assert!(matches!(r.route(100_099, 1, 0), Route::ProgUnavail));
        let cached: Vec<(u32, u32)> = r
            .programs()
            .iter()
            .flat_map(|p| p.versions().iter().map(move |v| (p, v)))
            .flat_map(|(p, v)| v.procs.iter().map(move |c| (p.prog, c.info)))
            .filter(|(_, i)| i.non_idempotent)
            .map(|(prog, i)| (prog, i.num))
            .collect();
        use nfs3::proc_::*;
        let expected: Vec<(u32, u32)> = [
            SETATTR, WRITE, CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK,
        ]
        .iter()
        .map(|&p| (nfs3::PROGRAM, p))
        .collect();
        assert_eq!(cached, expected);
        assert_eq!(proc_name(mount3::PROGRAM, 3, 1), "MNT");
        assert_eq!(proc_name(nfs4::PROGRAM, 4, 1), "COMPOUND");
        assert_eq!(proc_name(nfs3::PROGRAM, 5, 1), "UNKNOWN");
    }

    /// NFSv3's table is built from `nfs::each_procedure`, the list `Nfs3::handle` dispatches
    /// on: every procedure but NULL once, in procedure-number order, so each row's handler is
    /// the one for that row's procedure.
    #[test]
    fn nfs3s_table_has_each_procedures_own_handler_at_its_number() {
        struct Nums(Vec<u32>);
        impl nfs::EachProc3 for Nums {
            fn visit<P: Proc3>(&mut self) {
                self.0.push(P::NUM);
            }
        }
        let mut nums = Nums(Vec::new());
        nfs::each_procedure(&mut nums);
        assert_eq!(nums.0, (1..nfs3::PROCS.len() as u32).collect::<Vec<_>>());
        let version = &registry().program(nfs3::PROGRAM).unwrap().versions()[0];
        assert_eq!(version.procs.len(), nfs3::PROCS.len());
    }

    #[test]
    fn the_reply_bound_check_adds_the_payload_asked_for() {
        let getattr = &nfs3::PROCS[nfs3::proc_::GETATTR as usize];
        assert!(within_reply_bound(getattr, 88, 0));
        assert!(!within_reply_bound(getattr, 89, 0));
        assert!(
            !within_reply_bound(getattr, 89, 1 << 20),
            "GETATTR does not grow"
        );
        let read = &nfs3::PROCS[nfs3::proc_::READ as usize];
        assert!(within_reply_bound(read, 107 + 4096, 4096));
        assert!(!within_reply_bound(read, 107 + 4097, 4096));
        let dump = &mount3::PROCS[mount3::proc_::DUMP as usize];
        assert!(within_reply_bound(dump, u64::MAX, 0));
    }
}
