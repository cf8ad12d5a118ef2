//! The callback service (RFC 8881 §20): the back channel's CB_COMPOUND handler (CB_SEQUENCE,
//! CB_RECALL) and what the client does with delegations ([`super::deleg`] is their pure
//! table): record one at OPEN, return it at the last CLOSE or on recall.

use super::*;
impl Client {
    /// Whether the current session has a back channel (the server can recall delegations).
    pub fn back_channel_up(&self) -> bool {
        self.inner.callbacks.lock().expect("callbacks lock").up
    }

    /// Delegations held now (not counting ones being returned).
    pub fn delegations_held(&self) -> usize {
        self.inner
            .callbacks
            .lock()
            .expect("callbacks lock")
            .delegations
            .held_count()
    }

    /// Whether this client holds a write delegation of `fh` (not being returned): its writes
    /// may wait for their COMMIT until the delegation goes back (see [`deleg`]: write
    /// delegations).
    pub fn write_delegated(&self, fh: &NfsFh4) -> bool {
        let cbs = self.inner.callbacks.lock().expect("callbacks lock");
        matches!(cbs.delegations.held(fh), Some((_, deleg::Kind::Write)))
    }

    /// Registers what a delegation's return runs first for its file: the mount sends the
    /// data it kept after the close under a write delegation (see [`deleg`]). One hook per
    /// client; a second replaces the first.
    pub fn set_write_back(&self, hook: WriteBack) {
        *self.inner.write_back.lock().expect("write-back lock") = Some(hook);
    }

    /// Returns every delegation held (unmount, as Linux does at `umount`): each file's kept
    /// data is written back and committed first. Bounded by [`SHUTDOWN_WAIT`] per return.
    pub async fn return_all_delegations(&self) {
        let all = self
            .inner
            .callbacks
            .lock()
            .expect("callbacks lock")
            .delegations
            .return_all();
        for r in all {
            let c = self.clone();
            if tokio::time::timeout(SHUTDOWN_WAIT, c.return_delegation(r))
                .await
                .is_err()
            {
                tracing::debug!("{}: a delegation's return timed out", self.inner.url.host);
            }
        }
    }

    /// An OPEN of `fh` came with `d`: records it, or returns it at once when it cannot be
    /// kept (see [`deleg::Granted`]). The delegation stateid kept, if any.
    /// `attr`: the file's size and change as the OPEN's GETATTR saw them (a write
    /// delegation's CB_GETATTR answer). `created`: the OPEN created the file; only then is a
    /// write delegation kept (see [`deleg`]: write delegations).
    pub(super) async fn delegation_granted(
        &self,
        fh: &NfsFh4,
        d: &OpenDelegation4,
        attr: Option<(u64, u64)>,
        created: bool,
    ) -> Option<Stateid4> {
        let (stateid, kind) = match d {
            OpenDelegation4::Read(d) => (d.stateid, deleg::Kind::Read),
            OpenDelegation4::Write(d) => (d.stateid, deleg::Kind::Write),
            _ => return None,
        };
        let granted = {
            let mut cbs = self.inner.callbacks.lock().expect("callbacks lock");
            match (cbs.up, kind, attr) {
                (true, deleg::Kind::Read, _) => cbs.delegations.granted(fh, stateid, kind),
                (true, deleg::Kind::Write, Some((size, change))) if created => {
                    cbs.delegations.write_held(fh, stateid, size, change)
                }
                (true, deleg::Kind::Write, Some((size, change))) => {
                    cbs.delegations.write_granted(fh, stateid, size, change)
                }
                _ => deleg::Granted::ReturnNow,
            }
        };
        match granted {
            deleg::Granted::Held => Some(stateid),
            deleg::Granted::ReturnNow => {
                let _ = self
                    .compound(vec![
                        NfsArgop4::Putfh(fh.clone()),
                        NfsArgop4::Delegreturn(stateid),
                    ])
                    .await;
                self.inner
                    .callbacks
                    .lock()
                    .expect("callbacks lock")
                    .delegations
                    .returned(fh, stateid);
                None
            }
        }
    }

    /// Carries out a recall (see [`deleg::Return`]): the write-back hook first (a write
    /// delegation's data the mount kept after its close: sent, resent if a server restart
    /// lost it, and committed), then a COMMIT of the file if UNSTABLE data went to it since
    /// its last COMMIT, through the same path as the file layer's COMMITs, then DELEGRETURN.
    /// Failures are logged: the server revokes a delegation that is not returned, which costs
    /// us nothing we rely on.
    pub(super) async fn return_delegation(self, r: deleg::Return) {
        let hook = self
            .inner
            .write_back
            .lock()
            .expect("write-back lock")
            .clone();
        if let Some(hook) = hook {
            hook(crate::namespace::Handle::v4(r.fh.0.clone())).await;
        }
        let dirty = self
            .inner
            .callbacks
            .lock()
            .expect("callbacks lock")
            .delegations
            .is_dirty(&r.fh);
        if r.flush && dirty {
            let fh = Fh::unopened(r.fh.clone());
            if let Err(e) = self.start_commit(&fh, 0, 0).await.await {
                tracing::debug!("{}: COMMIT before DELEGRETURN: {e}", self.inner.url.host);
            }
        }
        let res = self
            .compound(vec![
                NfsArgop4::Putfh(r.fh.clone()),
                NfsArgop4::Delegreturn(r.stateid),
            ])
            .await
            .and_then(Reply::ok);
        if let Err(e) = res {
            tracing::debug!("{}: recalled delegation: {e}", self.inner.url.host);
        }
        self.inner
            .callbacks
            .lock()
            .expect("callbacks lock")
            .delegations
            .returned(&r.fh, r.stateid);
    }
}

/// Largest back-channel call and reply (`ca_maxrequestsize`, `ca_maxresponsesize`): see
/// `create_session`.
pub(super) const BACK_CALL_BYTES: u32 = 4096;

/// Ops per CB_COMPOUND (`ca_maxoperations`): CB_SEQUENCE and up to 15 recalls; more are
/// refused by the decoder's own bound.
pub(super) const BACK_OPS_MAX: u32 = 16;

/// Whether CREATE_SESSION gave the session a back channel on its first connection.
pub(super) fn back_channel(sess: &CreateSessionResOk) -> bool {
    sess.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0
}

/// The callback program as the transport sees it: decodes CB_COMPOUND, lets
/// [`deleg::Callbacks`] answer it, and starts the returns a recall asks for on tasks of
/// their own, so the reply goes out at once (see [`deleg`]).
#[derive(Default)]
pub(super) struct CbService {
    pub(super) state: Arc<Mutex<deleg::Callbacks>>,
    /// The client, once connected (before that there is nothing to return).
    pub(super) client: std::sync::OnceLock<Weak<Inner>>,
}

impl CallbackService for CbService {
    fn handle(
        self: Arc<Self>,
        call: IncomingCall,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = CallbackReply> + Send>> {
        Box::pin(async move { self.answer(&call) })
    }
}

impl CbService {
    pub(super) fn answer(&self, call: &IncomingCall) -> CallbackReply {
        if call.call.prog() != cb::PROGRAM_DEFAULT {
            return CallbackReply::ProgUnavail;
        }
        if call.call.vers() != cb::VERSION {
            return CallbackReply::ProgMismatch {
                low: cb::VERSION,
                high: cb::VERSION,
            };
        }
        match call.call.proc_() {
            cb::proc_::CB_NULL => return CallbackReply::Results(Vec::new()),
            cb::proc_::CB_COMPOUND => {}
            _ => return CallbackReply::ProcUnavail,
        }
        let limits = CompoundLimits {
            ops_max: BACK_OPS_MAX,
            ..CompoundLimits::default()
        };
        let res = match CbCompound4Args::decode(&mut call.args(), &limits) {
            Ok(args) => {
                let outcome = self
                    .state
                    .lock()
                    .expect("callbacks lock")
                    .handle_compound(&args);
                let client = self.client.get().and_then(Weak::upgrade);
                for r in outcome.returns {
                    match &client {
                        Some(inner) => {
                            let c = Client {
                                inner: inner.clone(),
                            };
                            tokio::spawn(c.return_delegation(r));
                        }
                        None => tracing::debug!("a recall with no client left to return it"),
                    }
                }
                outcome.res
            }
            Err(CompoundError::TooManyOps { tag, .. }) => CbCompound4Res {
                status: Nfsstat4::TOO_MANY_OPS,
                tag,
                results: Vec::new(),
            },
            Err(CompoundError::Xdr(_)) => return CallbackReply::GarbageArgs,
        };
        let mut w = Writer::new();
        res.pack(&mut w);
        CallbackReply::Results(w.into_segments())
    }
}
