//! The one COMPOUND driver loop: [`drive`] takes a COMPOUND from its record to its reply by
//! stepping an [`Eval`], and is the only loop there is. The service runs it
//! (`service::nfs4_call`), and so do the simulator's v4 worlds and the tests
//! ([`drive_ready`]); what differs between them is the [`Executor`]: where a metadata step
//! runs, how a data op and a settle of held writes run, and what time it is.
//!
//! ```text
//!   drive(record) ─▶ begin ─▶ ┬─ may_block? ─ exec.metadata(step) ─┐  production: blocking pool
//!                             │  no, or quick (service::inline) ──┤  simulator, tests: inline
//!                             │  ─── step inline ─────────────────┤
//!                             ▼                                   ▼
//!                  Step::Data(req) ─▶ exec.data(req) ─▶ resume ─▶ step …
//!                  Step::Settle(s) ─▶ exec.settle(s) ─▶ settled ─▶ step …
//!                  Step::Reply(r)  ─▶ Driven::Reply(r)
//! ```
//!
//! # The slot-freeing guard
//! Between its first step and its reply the evaluation holds its session slot. Its driver may
//! go away at any await (the connection closed, the service task was dropped): the evaluation
//! lives in an [`Evaluating`] guard whose `Drop` abandons it ([`Eval::abandon`]), freeing the
//! slot with nothing kept, so the client's retry on that slot is served (NFS4ERR_RETRY_UNCACHED_REP
//! for the request that was cut off, the next sequence id runs), never refused with DELAY. The
//! guard travels into the metadata step too, so a step still running on the blocking pool when
//! its connection closed frees the slot when it ends.
//!
//! # Driving without a runtime
//! The simulator is single-threaded in virtual time and the unit tests have no runtime of
//! their own: [`drive_ready`] polls [`drive`] once with a no-op waker and requires it to be
//! ready, which it is whenever every future the executor returns is ready at once (as
//! [`Inline`]'s are). A future that is not (an executor that would wait) is a bug of the
//! caller, reported as such, never a silent hang; a test that wants the driver to stop half way
//! polls [`drive`] itself.

use super::{Call, Eval, Nfs4, Reply4, Step};
use crate::backend::exports::Xprtsec;
use crate::nfs4::data::{DataDone, DataOps, DataReq, Settle};
use crate::nfs4::map;
use crate::service::inline;
use bytes::Bytes;
use core::future::Future;
use core::net::SocketAddr;
use sluice_nfs4state::ConnId;
use sluice_rpc::server::Credentials;
use sluice_xdr::nfs4::Nfsstat4;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where and how [`drive`] runs what it cannot run itself.
pub trait Executor: Sync {
    /// The time the next step runs at: `Instant::now()` in production, the virtual clock in
    /// the simulator.
    fn now(&self) -> Instant;

    /// Runs one metadata step, which may call a file system: on the blocking pool in
    /// production (as v3's backend calls), inline in the simulator and tests. `None`: the step
    /// panicked (production logs it; the client gets SYSTEM_ERR).
    fn metadata<T: Send + 'static>(
        &self,
        step: impl FnOnce() -> T + Send + 'static,
    ) -> impl Future<Output = Option<T>> + Send;

    /// Whether a step of quick metadata ops on quick backends (`service::inline`'s rule) may
    /// run on the driver's own task instead of through [`Executor::metadata`]: the service's
    /// executor says yes (the pool's hand-off costs more than such a step); default no, so an
    /// executor that stands for a pool (a simulator's, a test's) still sees every step that
    /// may call a file system.
    fn quick_inline(&self) -> bool {
        false
    }

    /// Runs a data op (READ, WRITE, COMMIT, READ_PLUS) through the data path.
    fn data(&self, req: DataReq) -> impl Future<Output = Result<DataDone, Nfsstat4>> + Send;

    /// Lands (or drops) held writes: whether they landed within `wait_max` (see
    /// [`crate::nfs4::data::settle`]).
    fn settle(&self, s: Settle, wait_max: Duration) -> impl Future<Output = bool> + Send;
}

/// Who sent a COMPOUND: the peer's address, its connection and its credentials.
#[derive(Debug, Clone)]
pub struct Sender {
    pub addr: SocketAddr,
    pub conn: ConnId,
    /// The connection's transport security (`Transport::xprtsec`).
    pub xprtsec: Xprtsec,
    pub cred: Credentials,
}

/// What [`drive`] came to.
#[derive(Debug)]
pub enum Driven {
    /// The encoded `COMPOUND4res` (see [`Reply4`]).
    Reply(Reply4),
    /// Not a COMPOUND at all: the RPC layer answers GARBAGE_ARGS.
    GarbageArgs,
    /// A metadata step panicked (the executor said so): the RPC layer answers SYSTEM_ERR.
    Failed,
}

/// What [`drive_ready`] answers: the reply in one buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The encoded `COMPOUND4res`.
    Reply(Bytes),
    /// Not a COMPOUND at all: the RPC layer answers GARBAGE_ARGS.
    GarbageArgs,
}

/// Drives the COMPOUND whose arguments start `args_offset` bytes into `record` to its reply.
/// `splice_ok`: a last READ may come back spliced (the driver sends [`Reply4::spliced`]).
/// Dropped before it is ready, it frees the COMPOUND's slot (see the module notes).
pub async fn drive<E: Executor>(
    nfs4: &Arc<Nfs4>,
    exec: &E,
    from: &Sender,
    record: &[Bytes],
    args_offset: usize,
    splice_ok: bool,
) -> Driven {
    let mut guard = Evaluating {
        nfs4: nfs4.clone(),
        eval: Some(nfs4.begin(record, args_offset, splice_ok)),
    };
    loop {
        let Some(mut eval) = guard.eval.take() else {
            unreachable!("put back after every step")
        };
        // A step of quick metadata ops on quick backends runs here, not on the pool
        // (`service::inline`: the hand-off costs more than a cached GETATTR or LOOKUP).
        let step = if eval.may_block()
            && !(exec.quick_inline()
                && inline::inline(
                    inline::slowest(nfs4.exports.iter().map(|e| e.fs.metadata_speed())),
                    eval.step_ops().map(inline::v4_work),
                )) {
            // As many ops in a row as come before the next data op. The guard travels along,
            // so a call whose connection went away still frees its slot.
            let g = Evaluating {
                nfs4: nfs4.clone(),
                eval: Some(eval),
            };
            let (sender, now) = (from.clone(), exec.now());
            let out = exec
                .metadata(move || {
                    let mut g = g;
                    let call = Call {
                        addr: sender.addr,
                        conn: sender.conn,
                        xprtsec: sender.xprtsec,
                        cred: &sender.cred,
                        now,
                    };
                    let step = match g.eval.as_mut() {
                        Some(e) => e.step(&g.nfs4, &call),
                        None => Step::GarbageArgs,
                    };
                    (g, step)
                })
                .await;
            match out {
                Some((mut g, step)) => {
                    guard.eval = g.eval.take();
                    step
                }
                None => return Driven::Failed,
            }
        } else {
            let call = Call {
                addr: from.addr,
                conn: from.conn,
                xprtsec: from.xprtsec,
                cred: &from.cred,
                now: exec.now(),
            };
            let step = eval.step(nfs4, &call);
            guard.eval = Some(eval);
            step
        };
        match step {
            Step::Data(req) => {
                let done = exec.data(req).await;
                if let Some(e) = guard.eval.as_mut() {
                    e.resume(done);
                }
            }
            Step::Settle(s) => {
                let landed = exec.settle(s, nfs4.settle_wait_max).await;
                if let Some(e) = guard.eval.as_mut() {
                    e.settled(landed);
                }
            }
            Step::Reply(r) => return Driven::Reply(r),
            Step::GarbageArgs => return Driven::GarbageArgs,
        }
    }
}

/// Runs [`drive`] to its end on this thread, for an executor whose futures are all ready at
/// once (the simulator's, the tests' [`Inline`]): the record is one buffer, nothing is
/// spliced, and the reply comes back joined.
///
/// # Panics
/// When `drive` is not ready after one poll: the executor waited, which such an executor must
/// not (a bug of the caller, not of the COMPOUND).
pub fn drive_ready<E: Executor>(
    nfs4: &Arc<Nfs4>,
    exec: &E,
    from: &Sender,
    record: &[u8],
) -> Outcome {
    let segs = [Bytes::copy_from_slice(record)];
    let fut = core::pin::pin!(drive(nfs4, exec, from, &segs, 0, false));
    let mut cx = core::task::Context::from_waker(core::task::Waker::noop());
    match fut.poll(&mut cx) {
        core::task::Poll::Ready(Driven::Reply(r)) => {
            debug_assert!(r.spliced.is_none(), "splicing was not allowed");
            Outcome::Reply(super::join(r.segs))
        }
        core::task::Poll::Ready(Driven::GarbageArgs) => Outcome::GarbageArgs,
        core::task::Poll::Ready(Driven::Failed) => panic!("a COMPOUND step failed"),
        core::task::Poll::Pending => panic!("the executor of drive_ready waited"),
    }
}

/// An [`Executor`] that runs everything on the caller's thread at once: metadata steps inline,
/// data ops through `data` (none: they answer NFS4ERR_NOTSUPP), at the time `now`. The
/// simulator's v4 worlds and the tests drive the processor with it.
pub struct Inline<'a> {
    pub now: Instant,
    pub data: Option<&'a dyn DataOps>,
}

impl Executor for Inline<'_> {
    fn now(&self) -> Instant {
        self.now
    }

    fn metadata<T: Send + 'static>(
        &self,
        step: impl FnOnce() -> T + Send + 'static,
    ) -> impl Future<Output = Option<T>> + Send {
        core::future::ready(Some(step()))
    }

    fn data(&self, req: DataReq) -> impl Future<Output = Result<DataDone, Nfsstat4>> + Send {
        core::future::ready(match self.data {
            Some(d) => d.run(req).map_err(map::status),
            None => Err(Nfsstat4::NOTSUPP),
        })
    }

    fn settle(&self, s: Settle, wait_max: Duration) -> impl Future<Output = bool> + Send {
        core::future::ready(self.data.is_some_and(|d| d.settle(s, wait_max)))
    }
}

/// A COMPOUND's evaluation while its driver runs it: dropped before the reply (the
/// connection closed while a step or a data op ran), it frees the COMPOUND's slot.
struct Evaluating {
    nfs4: Arc<Nfs4>,
    eval: Option<Eval>,
}

impl Drop for Evaluating {
    fn drop(&mut self) {
        if let Some(e) = self.eval.as_mut() {
            e.abandon(&self.nfs4);
        }
    }
}
