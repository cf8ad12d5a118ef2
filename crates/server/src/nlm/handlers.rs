//! The NLM v4 and NSM v1 procedure handlers: one function per procedure, each decoding its
//! own arguments (GARBAGE_ARGS when they do not decode) and answering from the pure cores
//! (the module notes of [`crate::nlm`]). `_MSG` procedures answer nothing in their reply and
//! queue the matching `_RES` call to the client. LOCK, NM_LOCK, TEST and their `_MSG` forms
//! are dropped (no reply, no `_RES`) while a delegation of their file is recalled (module
//! notes of [`crate::nlm`]: Delegations).

use super::{file_key, Outgoing};
use crate::recall::Recalling;
use crate::service::registry::Version;
use crate::service::{Done, Handled, Handler, HandlerFuture, Peer, Reply, Server};
use bytes::Bytes;
use sluice_rpc::server::{self as rpcs, Credentials, RpcCall};
use sluice_xdr::nlm::{
    self, proc_ as p, Nlm4CancArgs, Nlm4LockArgs, Nlm4Notify, Nlm4Res, Nlm4ShareArgs, Nlm4ShareRes,
    Nlm4Stats, Nlm4TestArgs, Nlm4TestRes, Nlm4TestRply, Nlm4UnlockArgs,
};
use sluice_xdr::nsm::{self, Mon, MonId, MyId, SmName, SmRes, SmStat, SmStatRes, StatChge};
use sluice_xdr::procs::ProcInfo;
use sluice_xdr::Pack;
use std::time::Instant;

/// NLM v4's table: each row of `nlm::PROCS` with its handler.
pub fn nlm_version() -> Version<Handler> {
    Version::new(
        nlm::VERSION,
        &nlm::PROCS,
        [
            nlm_null as Handler,
            nlm_test,
            nlm_lock,
            nlm_cancel,
            nlm_unlock,
            nlm_granted,
            nlm_test_msg,
            nlm_lock_msg,
            nlm_cancel_msg,
            nlm_unlock_msg,
            nlm_granted_msg,
            nlm_test_res,
            nlm_res_ignored,
            nlm_res_ignored,
            nlm_res_ignored,
            nlm_granted_res,
            nlm_unassigned,
            nlm_unassigned,
            nlm_unassigned,
            nlm_unassigned,
            nlm_share,
            nlm_unshare,
            nlm_nm_lock,
            nlm_free_all,
        ],
    )
}

/// NSM v1's table.
pub fn nsm_version() -> Version<Handler> {
    Version::new(
        nsm::VERSION,
        &nsm::PROCS,
        [
            nsm_null as Handler,
            nsm_stat,
            nsm_mon,
            nsm_unmon,
            nsm_unmon_all,
            nsm_simu_crash,
            nsm_notify,
        ],
    )
}

/// What a handler's body yields: results, PROC_UNAVAIL, or no reply.
enum Answer<T> {
    Results(T),
    ProcUnavail,
    Dropped,
}

impl<T> From<Option<T>> for Answer<T> {
    fn from(o: Option<T>) -> Self {
        o.map_or(Answer::ProcUnavail, Answer::Results)
    }
}

impl<T> From<Result<T, Recalling>> for Answer<T> {
    fn from(r: Result<T, Recalling>) -> Self {
        r.map_or(Answer::Dropped, Answer::Results)
    }
}

/// Handlers answered from memory, as `service`'s MOUNT and PORTMAP ones: `$body` yields the
/// results (`Some`, or `Ok`), `None` for PROC_UNAVAIL, or `Err(Recalling)` for no reply.
macro_rules! handlers {
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
                match Answer::from($body) {
                    Answer::Results(results) => {
                        let mut w = rpcs::success_header(call.xid);
                        let header_bytes = w.len();
                        results.pack(&mut w);
                        let results_bytes = (w.len() - header_bytes) as u64;
                        Handled::Done(Done {
                            reply: Reply::from(w.into_segments()),
                            status: None,
                            ok: true,
                            results_bytes,
                            payload_bytes_asked: 0,
                        })
                    }
                    Answer::ProcUnavail => Handled::ProcUnavail,
                    Answer::Dropped => Handled::Dropped,
                }
            })
        }
    )*};
}

handlers! {
    fn nlm_null(_, _, _, () = ()) { Some(()) }
    fn nlm_test(s, peer, cred, a = Nlm4TestArgs) { test(s, peer, cred, &a) }
    fn nlm_lock(s, peer, cred, a = Nlm4LockArgs) { lock(s, peer, cred, &a, true) }
    fn nlm_cancel(s, peer, cred, a = Nlm4CancArgs) { Some(cancel(s, peer, cred, &a)) }
    fn nlm_unlock(s, peer, cred, a = Nlm4UnlockArgs) { Some(unlock(s, peer, cred, &a)) }
    /// GRANTED is the server's call to a client; this server waits for no lock of its own.
    fn nlm_granted(_, _, _, a = Nlm4TestArgs) {
        Some(Nlm4Res { cookie: a.cookie, stat: Nlm4Stats::DENIED })
    }
    fn nlm_test_msg(s, peer, cred, a = Nlm4TestArgs) {
        test(s, peer, cred, &a).map(|r| s.nlm.send(Outgoing::nlm(peer.addr.ip(), p::TEST_RES, &r)))
    }
    fn nlm_lock_msg(s, peer, cred, a = Nlm4LockArgs) {
        lock(s, peer, cred, &a, true).map(|r| s.nlm.send(Outgoing::nlm(peer.addr.ip(), p::LOCK_RES, &r)))
    }
    fn nlm_cancel_msg(s, peer, cred, a = Nlm4CancArgs) {
        let r = cancel(s, peer, cred, &a);
        s.nlm.send(Outgoing::nlm(peer.addr.ip(), p::CANCEL_RES, &r));
        Some(())
    }
    fn nlm_unlock_msg(s, peer, cred, a = Nlm4UnlockArgs) {
        let r = unlock(s, peer, cred, &a);
        s.nlm.send(Outgoing::nlm(peer.addr.ip(), p::UNLOCK_RES, &r));
        Some(())
    }
    fn nlm_granted_msg(_, _, _, _ = Nlm4TestArgs) { Some(()) }
    fn nlm_test_res(_, _, _, _ = Nlm4TestRes) { Some(()) }
    /// LOCK_RES, CANCEL_RES, UNLOCK_RES: answers to calls this server never makes.
    fn nlm_res_ignored(_, _, _, _ = Nlm4Res) { Some(()) }
    fn nlm_granted_res(s, _, _, r = Nlm4Res) {
        let mut st = s.nfs4.state();
        let d = s.nlm.core.lock().expect("nlm lock").granted_res(&mut st, Instant::now(), &r);
        drop(st);
        s.nlm.act(d);
        Some(())
    }
    /// Procedures 16-19 are unassigned.
    fn nlm_unassigned(_, _, _, () = ()) { None::<()> }
    fn nlm_share(s, peer, cred, a = Nlm4ShareArgs) { Some(share(s, peer, cred, &a, true)) }
    fn nlm_unshare(s, peer, cred, a = Nlm4ShareArgs) { Some(share(s, peer, cred, &a, false)) }
    fn nlm_nm_lock(s, peer, cred, a = Nlm4LockArgs) {
        let a = Nlm4LockArgs { block: false, ..a };
        lock(s, peer, cred, &a, false)
    }
    fn nlm_free_all(s, _, _, n = Nlm4Notify) {
        free_host(s, &n.name);
        Some(())
    }

    fn nsm_null(_, _, _, () = ()) { Some(()) }
    fn nsm_stat(s, _, _, _ = SmName) {
        Some(SmStatRes { res_stat: SmRes::SUCC, state: s.nlm.state_number })
    }
    /// This server monitors only its own NLM clients: others' requests are refused.
    fn nsm_mon(s, _, _, _ = Mon) {
        Some(SmStatRes { res_stat: SmRes::FAIL, state: s.nlm.state_number })
    }
    fn nsm_unmon(s, _, _, _ = MonId) { Some(SmStat { state: s.nlm.state_number }) }
    fn nsm_unmon_all(s, _, _, _ = MyId) { Some(SmStat { state: s.nlm.state_number }) }
    fn nsm_simu_crash(_, _, _, () = ()) { Some(()) }
    /// A client rebooted: its locks go, found by the name it gives and by its address.
    fn nsm_notify(s, peer, _, c = StatChge) {
        free_host(s, &c.mon_name);
        let from = peer.addr.ip().to_string();
        let by_addr: Vec<Bytes> = s
            .nlm
            .hosts_to_notify()
            .into_iter()
            .filter(|(_, a)| a[..] == *from.as_bytes())
            .map(|(n, _)| n)
            .collect();
        for n in by_addr {
            free_host(s, &n);
        }
        Some(())
    }
}

fn test(
    s: &Server,
    peer: &Peer,
    cred: &Credentials,
    a: &Nlm4TestArgs,
) -> Result<Nlm4TestRes, Recalling> {
    let file = match file_key(&s.nfs4.exports, peer, cred, &a.alock.fh) {
        Ok(f) => f,
        Err(stat) => {
            return Ok(Nlm4TestRes {
                cookie: a.cookie.clone(),
                stat: Nlm4TestRply::Other(stat.0),
            })
        }
    };
    let now = Instant::now();
    let mut st = s.nfs4.state();
    // The gate and the test under one hold of the state's lock: no delegation comes between.
    if st.break_delegations(now, None, &file, a.exclusive).is_err() {
        drop(st);
        return Err(s.nlm.recall_drop("TEST", &a.alock.caller_name));
    }
    let r = s
        .nlm
        .core
        .lock()
        .expect("nlm lock")
        .test(&st, now, &file, a);
    Ok(r)
}

fn lock(
    s: &Server,
    peer: &Peer,
    cred: &Credentials,
    a: &Nlm4LockArgs,
    monitor: bool,
) -> Result<Nlm4Res, Recalling> {
    let file = match file_key(&s.nfs4.exports, peer, cred, &a.alock.fh) {
        Ok(f) => f,
        Err(stat) => {
            return Ok(Nlm4Res {
                cookie: a.cookie.clone(),
                stat,
            })
        }
    };
    s.nlm.seen(&a.alock.caller_name, peer);
    let now = Instant::now();
    let mut st = s.nfs4.state();
    // The gate and the lock under one hold of the state's lock: no delegation comes between.
    if st.break_delegations(now, None, &file, a.exclusive).is_err() {
        drop(st);
        return Err(s.nlm.recall_drop("LOCK", &a.alock.caller_name));
    }
    let r = s
        .nlm
        .core
        .lock()
        .expect("nlm lock")
        .lock(&mut st, now, &file, a);
    drop(st);
    if a.reclaim {
        // A client's lockd reclaiming after this server's restart (its SM_NOTIFY reached
        // the client): rare and worth a line, the proof that the notice went through.
        tracing::info!(
            host = %String::from_utf8_lossy(&a.alock.caller_name),
            granted = r.stat == Nlm4Stats::GRANTED,
            stat = r.stat.0,
            "NLM lock reclaim"
        );
    }
    if monitor && (r.stat == Nlm4Stats::GRANTED || r.stat == Nlm4Stats::BLOCKED) {
        s.nlm.monitor(&a.alock.caller_name, peer);
    }
    Ok(r)
}

fn cancel(s: &Server, peer: &Peer, cred: &Credentials, a: &Nlm4CancArgs) -> Nlm4Res {
    let file = match file_key(&s.nfs4.exports, peer, cred, &a.alock.fh) {
        Ok(f) => f,
        Err(stat) => {
            return Nlm4Res {
                cookie: a.cookie.clone(),
                stat,
            }
        }
    };
    let st = s.nfs4.state();
    let r = s.nlm.core.lock().expect("nlm lock").cancel(&st, &file, a);
    r
}

fn unlock(s: &Server, peer: &Peer, cred: &Credentials, a: &Nlm4UnlockArgs) -> Nlm4Res {
    let file = match file_key(&s.nfs4.exports, peer, cred, &a.alock.fh) {
        Ok(f) => f,
        Err(stat) => {
            return Nlm4Res {
                cookie: a.cookie.clone(),
                stat,
            }
        }
    };
    let mut st = s.nfs4.state();
    let (r, d) = s
        .nlm
        .core
        .lock()
        .expect("nlm lock")
        .unlock(&mut st, Instant::now(), &file, a);
    drop(st);
    s.nlm.act(d);
    r
}

fn share(s: &Server, peer: &Peer, cred: &Credentials, a: &Nlm4ShareArgs, on: bool) -> Nlm4ShareRes {
    let file = match file_key(&s.nfs4.exports, peer, cred, &a.share.fh) {
        Ok(f) => f,
        Err(stat) => {
            return Nlm4ShareRes {
                cookie: a.cookie.clone(),
                stat,
                sequence: 0,
            }
        }
    };
    let st = s.nfs4.state();
    let mut core = s.nlm.core.lock().expect("nlm lock");
    if on {
        core.share(&st, &file, a)
    } else {
        core.unshare(&st, &file, a)
    }
}

/// Drops every lock of host `name` (FREE_ALL, a reboot notice).
fn free_host(s: &Server, name: &[u8]) {
    let mut st = s.nfs4.state();
    let d = s
        .nlm
        .core
        .lock()
        .expect("nlm lock")
        .free_all(&mut st, Instant::now(), name);
    drop(st);
    s.nlm.act(d);
}

/// Once grace is over: the hosts of the last run that reclaimed nothing stop being monitored
/// (they are recorded again by their next lock), so a later restart neither notifies them nor
/// holds grace open for them. Returns whether grace is over.
fn forget_unreclaimed(s: &Server) -> bool {
    let st = s.nfs4.state();
    if st.in_grace() {
        return false;
    }
    let core = s.nlm.core.lock().expect("nlm lock");
    let mut monitor = s.nlm.monitor.lock().expect("monitor lock");
    if let Some(m) = monitor.as_mut() {
        if let Err(e) = m.forget(|name| !core.holds(&st, name)) {
            tracing::debug!("NSM: hosts not forgotten: {e}");
        }
    }
    true
}

/// The timer: retries waiters and drops stale ones, whenever the core asks (module notes of
/// [`crate::nlm`]); ends with the server.
pub async fn run_timer(server: std::sync::Weak<Server>) {
    let mut grace_seen_over = false;
    loop {
        let wake = {
            let Some(s) = server.upgrade() else { return };
            let next = s.nlm.core.lock().expect("nlm lock").poll_timeout();
            next.map_or(super::IDLE_TICK, |t| {
                t.saturating_duration_since(Instant::now())
                    .min(super::IDLE_TICK)
            })
        };
        tokio::time::sleep(wake).await;
        let Some(s) = server.upgrade() else { return };
        if !grace_seen_over {
            grace_seen_over = forget_unreclaimed(&s);
        }
        let due = s
            .nlm
            .core
            .lock()
            .expect("nlm lock")
            .poll_timeout()
            .is_some_and(|t| t <= Instant::now());
        if due {
            let mut st = s.nfs4.state();
            let d = s
                .nlm
                .core
                .lock()
                .expect("nlm lock")
                .tick(&mut st, Instant::now());
            drop(st);
            s.nlm.act(d);
        }
    }
}
