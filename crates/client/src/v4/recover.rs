//! Recovery after a server restart or a lost session (RFC 8881 §8.4.2, §2.10.13): a new client
//! id and session, then the opens and locks reclaimed in the grace period ([`super::reopen`]
//! decides what; this module sends it), then RECLAIM_COMPLETE.

use super::*;
impl Client {
    /// Replaces the session (and with [`Next::NewClient`], or when CREATE_SESSION finds the
    /// client id gone, the client id) that `generation` numbered. Recoveries are one at a
    /// time, and a caller that finds the session already replaced returns at once.
    ///
    /// Boxed with its `Send` bound spelled out: recovery sends RECLAIM_COMPLETE through
    /// [`Client::compound`], whose future contains this one, a cycle the compiler cannot see
    /// `Send` through on its own.
    pub(super) fn recover(
        &self,
        generation: u64,
        why: Next,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Error>> + Send + '_>> {
        Box::pin(self.recover_now(generation, why))
    }

    pub(super) async fn recover_now(&self, generation: u64, why: Next) -> Result<(), Error> {
        let _one = self.inner.recovery.lock().await;
        let (clientid, create_seq, current) = {
            let s = self.inner.session.lock().expect("session lock");
            (s.clientid, s.create_seq, s.table.generation())
        };
        if current != generation {
            return Ok(());
        }
        let i = &self.inner;
        let slots = i.files.options.write_depth_max.max(1) as u32;
        tracing::info!(
            "{}: NFSv4 {} lost, recovering",
            i.url.host,
            if why == Next::NewClient {
                "client id"
            } else {
                "session"
            }
        );
        let mut made = None;
        if why == Next::NewSession {
            match create_session(
                i.conns.first(),
                &i.cred,
                i.minor,
                clientid,
                create_seq,
                slots,
                &i.stats,
            )
            .await
            {
                Ok(x) => made = Some((clientid, x)),
                Err(e)
                    if matches!(
                        e.status(),
                        Some(Nfsstat4::STALE_CLIENTID) | Some(Nfsstat4::EXPIRED)
                    ) => {}
                Err(e) => return Err(e),
            }
        }
        let new_client = made.is_none();
        let (clientid, (sess, create_seq)) = match made {
            Some(m) => m,
            None => {
                let rpc = i.conns.first();
                let (id, seq) =
                    exchange_id(rpc, &i.cred, i.minor, &i.owner, i.verifier, &i.stats).await?;
                (
                    id,
                    create_session(rpc, &i.cred, i.minor, id, seq, slots, &i.stats).await?,
                )
            }
        };
        // Before the new session is usable: a call failing on an old stateid from now on
        // waits for the pass (see `reopen`).
        let run_pass = new_client && i.open_files.lock().expect("opens lock").start_pass();
        {
            let mut s = i.session.lock().expect("session lock");
            s.clientid = clientid;
            s.create_seq = create_seq;
            s.sessionid = sess.sessionid;
            s.table = SlotTable::new(generation + 1, sess.fore_chan_attrs.maxrequests);
            s.cached_bytes = sess.fore_chan_attrs.maxresponsesize_cached;
            let mut cbs = i.callbacks.lock().expect("callbacks lock");
            cbs.new_session(
                sess.sessionid,
                back_channel(&sess),
                sess.back_chan_attrs.maxrequests,
            );
            if new_client {
                // The old client id's delegations died with it (RFC 8881 §10.2.1).
                cbs.delegations.clear();
            }
            drop(cbs);
            // CREATE_SESSION bound the first connection to the new session.
            i.bound.lock().expect("bound lock")[0] =
                Some((generation + 1, i.conns.first().stats().reconnects));
        }
        // The others were bound to the old one: bind them to the new one before anyone sends.
        for conn in 1..i.conns.len() {
            self.ensure_bound(conn).await;
        }
        i.slot_freed.notify_waiters();
        // The pass runs after the recovery lock is released: its calls may need a recovery of
        // their own.
        drop(_one);
        if run_pass {
            self.reopen_pass().await;
        }
        Ok(())
    }

    /// Opens every tracked file again under the new client id, reclaiming opens and their
    /// byte-range locks in the server's grace period when it has one, and sends
    /// RECLAIM_COMPLETE in between (see [`reopen`]).
    pub(super) async fn reopen_pass(&self) {
        let mut rounds = 0;
        loop {
            self.reopen_round().await;
            let again = self.inner.open_files.lock().expect("opens lock").end_pass();
            if !again {
                break;
            }
            rounds += 1;
            if rounds > RECOVERIES_MAX {
                while self.inner.open_files.lock().expect("opens lock").end_pass() {}
                break;
            }
        }
        self.inner.reopen_done.notify_waiters();
    }

    pub(super) async fn reopen_round(&self) {
        let todo = self
            .inner
            .open_files
            .lock()
            .expect("opens lock")
            .to_reopen();
        let host = &self.inner.url.host;
        let mut pass = ReclaimPass::new(todo);
        loop {
            let step = pass.next(&mut self.inner.open_files.lock().expect("opens lock"));
            let result = match &step {
                Step::Done => break,
                Step::ReclaimComplete => {
                    self.reclaim_complete().await;
                    continue;
                }
                Step::ClaimPrevious(rec) => {
                    self.reopen_one(rec, OpenClaim4::Previous(OPEN_DELEGATE_NONE))
                        .await
                }
                Step::ClaimFh(rec) => self.reopen_one(rec, OpenClaim4::Fh).await,
                Step::ReclaimLock {
                    fh,
                    open_stateid,
                    owner,
                    lock_stateid,
                    write,
                    offset,
                    length,
                } => {
                    self.reclaim_lock(
                        fh,
                        *open_stateid,
                        owner,
                        *lock_stateid,
                        *write,
                        *offset,
                        *length,
                    )
                    .await
                }
            };
            let answer = match result {
                Ok(s) => Answer::Ok(s),
                Err(e) if e.status() == Some(Nfsstat4::NO_GRACE) => Answer::NoGrace,
                Err(e) => {
                    match &step {
                        Step::ClaimFh(_) => {
                            tracing::warn!("{host}: reopening a file after the restart failed: {e}")
                        }
                        _ => tracing::debug!("{host}: a reclaim failed: {e}"),
                    }
                    Answer::Failed
                }
            };
            pass.answer(
                answer,
                &mut self.inner.open_files.lock().expect("opens lock"),
            );
        }
        let c = pass.counts;
        if c.reclaimed + c.reopened > 0 {
            tracing::info!(
                "{host}: NFSv4 opens after the new client id: {} reclaimed, {} opened again",
                c.reclaimed,
                c.reopened
            );
        }
        if c.locks_reclaimed > 0 {
            tracing::info!(
                "{host}: NFSv4 byte-range locks after the new client id: {} reclaimed",
                c.locks_reclaimed
            );
        }
        if c.locks_lost > 0 {
            tracing::warn!(
                "{host}: the server restarted; {} byte-range lock(s) could not be reclaimed \
                 and were lost (not taken again: another client may hold them now)",
                c.locks_lost
            );
        }
    }

    /// LOCK with `reclaim` of one range held before the restart; the new lock stateid.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn reclaim_lock(
        &self,
        fh: &NfsFh4,
        open_stateid: Stateid4,
        owner: &[u8],
        lock_stateid: Option<Stateid4>,
        write: bool,
        offset: u64,
        length: u64,
    ) -> Result<Stateid4, Error> {
        let locker = match lock_stateid {
            Some(lock_stateid) => Locker4::Exist(ExistLockOwner4 {
                lock_stateid,
                lock_seqid: 0,
            }),
            None => {
                let clientid = self.inner.session.lock().expect("session lock").clientid;
                Locker4::New(OpenToLockOwner4 {
                    open_seqid: 0,
                    open_stateid,
                    lock_seqid: 0,
                    lock_owner: StateOwner4 {
                        clientid,
                        owner: Opaque4(Bytes::copy_from_slice(owner)),
                    },
                })
            }
        };
        let res = self
            .compound(vec![
                NfsArgop4::Putfh(fh.clone()),
                NfsArgop4::Lock(LockArgs {
                    locktype: if write { WRITE_LT } else { READ_LT },
                    reclaim: true,
                    offset,
                    length,
                    locker,
                }),
            ])
            .await?
            .ok()?;
        match res.last() {
            Some(NfsResop4::Lock(LockRes::Ok(s))) => Ok(*s),
            _ => Err(Error::Other("LOCK returned no result".into())),
        }
    }

    /// OPEN of `rec`'s file by handle with `claim` (CLAIM_PREVIOUS or CLAIM_FH); the new
    /// stateid. A delegation that comes with it is returned at once: the caller's handle does
    /// not know it.
    pub(super) async fn reopen_one(
        &self,
        rec: &OpenRecord,
        claim: OpenClaim4,
    ) -> Result<Stateid4, Error> {
        let clientid = self.inner.session.lock().expect("session lock").clientid;
        let res = self
            .compound(vec![
                NfsArgop4::Putfh(rec.fh.clone()),
                NfsArgop4::Open(OpenArgs {
                    seqid: 0,
                    share_access: rec.access,
                    share_deny: 0,
                    owner: StateOwner4 {
                        clientid,
                        owner: Opaque4(Bytes::from(rec.owner.clone())),
                    },
                    openhow: Openflag4::NoCreate,
                    claim,
                }),
            ])
            .await?
            .ok()?;
        let Some(NfsResop4::Open(Res4::Ok(open))) = res.last() else {
            return Err(Error::Other("OPEN returned no result".into()));
        };
        let delegation = match &open.delegation {
            OpenDelegation4::Read(d) => Some(d.stateid),
            OpenDelegation4::Write(d) => Some(d.stateid),
            _ => None,
        };
        if let Some(d) = delegation {
            let _ = self
                .compound(vec![
                    NfsArgop4::Putfh(rec.fh.clone()),
                    NfsArgop4::Delegreturn(d),
                ])
                .await;
        }
        Ok(open.stateid)
    }

    /// Waits until no reopen pass runs; the passes finished by then.
    pub(super) async fn reopen_finished(&self) -> u64 {
        loop {
            let done = self.inner.reopen_done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            {
                let t = self.inner.open_files.lock().expect("opens lock");
                if !t.pass_running() {
                    return t.epoch();
                }
            }
            done.await;
        }
    }
}
