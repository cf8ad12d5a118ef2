//! The NFSv4.1 callback driver: the thin task that makes the calls the sessions' back
//! channels decide on (CB_NULL probes, CB_COMPOUNDs with CB_SEQUENCE) over the clients' own
//! connections, and hands the outcomes back.
//!
//! ```text
//!   State4 (pure, behind the Nfs4 lock)              this task
//!   ───────────────────────────────────             ─────────────────────────────────────
//!   CREATE_SESSION(back) / BIND / BACKCHANNEL_CTL ─waker─▶ wake ─▶ poll_callbacks()
//!                                                        │ for each (session, CbSend):
//!                                                        │   Connections::get(conn) ─▶
//!                                                        │   CallbackConn::call(.., CALL_TIMEOUT)
//!   handle_callback(session, token, outcome) ◀── a task per call: encode, await, decode
//!                                                        └─ then wake again (a next call)
//! ```
//! Which connection, which slot and sequence id, what a reply means: all in
//! [`sluice_nfs4state::callback`]. Calls in flight are bounded there (one CB_NULL and one
//! CB_COMPOUND per session), so the tasks spawned here are too. The connections' handles the calls
//! go out on are [`conn`]'s.

pub mod conn;

use crate::nfs4::compound::Nfs4;
use conn::Connections;
use sluice_nfs4state::callback::{CbCall, CbCred, CbOutcome, CbSend, CALL_TIMEOUT};
use sluice_rpc::client::ProcId;
use sluice_xdr::nfs4::callback::{self as cb, CbCompound4Res};
use sluice_xdr::nfs4::compound::CompoundLimits;
use sluice_xdr::nfs4::SessionId4;
use sluice_xdr::rpc::OpaqueAuth;
use sluice_xdr::{Pack, Writer};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Notify;

/// Makes `nfs4`'s callbacks over the connections in `connections`, for as long as the server
/// runs.
pub async fn drive(nfs4: Arc<Nfs4>, connections: Connections) -> std::io::Result<()> {
    let wake = Arc::new(Notify::new());
    {
        let w = wake.clone();
        lock(&nfs4).set_callback_waker(Box::new(move || w.notify_one()));
    }
    loop {
        let sends = lock(&nfs4).poll_callbacks(Instant::now());
        for (session, send) in sends {
            let back = connections.get(send.conn);
            tracing::debug!(
                conn = send.conn,
                token = send.token,
                null = matches!(send.call, CbCall::Null),
                bound = back.is_some(),
                "callback sent"
            );
            let (nfs4, wake) = (nfs4.clone(), wake.clone());
            tokio::spawn(async move {
                let outcome = match back {
                    Some(back) => call(&back, &send).await,
                    None => CbOutcome::Failed,
                };
                report(&nfs4, &session, send.token, outcome);
                wake.notify_one();
            });
        }
        wake.notified().await;
    }
}

/// The state's lock, handing released backend locks to the file systems when let go (a
/// callback's outcome or a copy's end can expire a client).
fn lock(nfs4: &Nfs4) -> crate::nfs4::compound::StateGuard<'_> {
    nfs4.state()
}

/// Makes one call and says how it went.
async fn call(back: &conn::CallbackConn, send: &CbSend) -> CbOutcome {
    let cred = match &send.cred {
        CbCred::None => OpaqueAuth::none(),
        CbCred::Sys(a) => a.to_opaque_auth(),
    };
    let (proc_, args) = match &send.call {
        CbCall::Null => (cb::proc_::CB_NULL, Vec::new()),
        CbCall::Compound(c) => {
            let mut w = Writer::new();
            c.pack(&mut w);
            (cb::proc_::CB_COMPOUND, w.into_segments())
        }
    };
    let id = ProcId {
        prog: send.program,
        vers: cb::VERSION,
        proc_,
    };
    let reply = match back.call(id, &cred, args, CALL_TIMEOUT).await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(conn = send.conn, "callback failed: {e}");
            return CbOutcome::Failed;
        }
    };
    match &send.call {
        CbCall::Null => CbOutcome::NullOk,
        CbCall::Compound(_) => {
            let mut r = reply.results();
            match CbCompound4Res::decode(&mut r, &CompoundLimits::default()) {
                Ok(res) => CbOutcome::Compound(res),
                Err(e) => {
                    tracing::debug!(conn = send.conn, "undecodable CB_COMPOUND reply: {e}");
                    CbOutcome::Failed
                }
            }
        }
    }
}

/// Hands an outcome to the state, which tells the delegations what became of their CB_RECALLs
/// (`sluice_nfs4state::delegations`).
fn report(nfs4: &Nfs4, session: &SessionId4, token: u64, outcome: CbOutcome) {
    tracing::debug!(token, ?outcome, "callback outcome");
    let done = lock(nfs4).handle_callback(Instant::now(), session, token, outcome);
    for d in done {
        tracing::debug!(token = d.token, ok = d.result.is_ok(), "callback finished");
    }
}
