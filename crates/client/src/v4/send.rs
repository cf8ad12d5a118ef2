//! Sending: every call is a SEQUENCE-led COMPOUND on a slot of the session's slot table
//! ([`super::session`], RFC 8881 §2.10.6), sent by [`Client::compound`]; a reply's SEQUENCE
//! result says what the slot and the session do next (retry, recover). And the file layer's
//! calls ([`crate::FileProtocol`]: READ, WRITE, COMMIT, GETATTR) over it.

use super::*;
use sluice_xdr::nfs4::ops::{
    SEQ4_STATUS_BACKCHANNEL_FAULT, SEQ4_STATUS_CB_PATH_DOWN, SEQ4_STATUS_CB_PATH_DOWN_SESSION,
};
impl Client {
    /// Sends `ops` after a SEQUENCE and waits for the reply (recovering the session as needed).
    pub async fn compound(&self, ops: Vec<NfsArgop4>) -> Result<Reply, Error> {
        self.start_compound(ops).await.await.0
    }

    /// Sends `ops` after a SEQUENCE; the [`Call`] resolves to the reply and the RTT sample of
    /// its last transmission (`None` if the transport resent it).
    pub async fn start_compound(
        &self,
        ops: Vec<NfsArgop4>,
    ) -> Call<(Result<Reply, Error>, Option<Duration>)> {
        if self.inner.closed.load(Ordering::SeqCst) {
            return Box::pin(async { (Err(Error::Other("the client is shut down".into())), None) });
        }
        let first = self.send(&ops).await;
        let c = self.clone();
        Box::pin(async move { c.finish(ops, first).await })
    }

    /// Takes a slot and sends `ops` on it, on the next connection in turn (bound first if it
    /// is new to the session).
    pub(super) async fn send(&self, ops: &[NfsArgop4]) -> Sent {
        if let Some(i) = self.inner.conns.growth_due() {
            self.grow(i);
        }
        let (conn, rpc) = self.inner.conns.next();
        self.ensure_bound(conn).await;
        let slot = self.acquire().await;
        let (sessionid, cached_bytes) = {
            let s = self.inner.session.lock().expect("session lock");
            (s.sessionid, s.cached_bytes)
        };
        // A server that keeps less than we asked for might refuse to cache an OPEN's reply
        // (REP_TOO_BIG_TO_CACHE): then nothing is cached, as before the reply cache was used.
        let cachethis = cached_bytes >= CACHED_REPLY_BYTES
            && session::cache_this(ops.iter().map(|o| o.opnum()));
        let mut all = Vec::with_capacity(ops.len() + 1);
        all.push(NfsArgop4::Sequence(SequenceArgs {
            sessionid,
            sequenceid: slot.seqid,
            slotid: slot.slotid,
            highest_slotid: slot.highest_slotid,
            cachethis,
        }));
        all.extend(ops.iter().cloned());
        let (tracked, reopen_epoch) = {
            let t = self.inner.open_files.lock().expect("opens lock");
            (t.translate(&mut all[1..]), t.epoch())
        };
        let args = Compound4Args {
            tag: Utf8Str::default(),
            minorversion: self.inner.minor,
            ops: all,
        };
        let mut w = Writer::new();
        args.pack(&mut w);
        let segments = w.into_segments();
        let bytes_sent = segments.iter().map(|s| s.len()).sum();
        let sent_at = Instant::now();
        let call = rpc
            .start(compound_id(), &self.inner.cred, segments, TimerClass::Other)
            .await;
        Sent {
            slot,
            conn,
            tracked,
            reopen_epoch,
            call,
            bytes_sent,
            sent_at,
        }
    }

    /// Waits for `sent`, and re-sends `ops` as the slot table says until it is done.
    pub(super) async fn finish(
        self,
        ops: Vec<NfsArgop4>,
        mut sent: Sent,
    ) -> (Result<Reply, Error>, Option<Duration>) {
        let (mut retries, mut recoveries) = (0u32, 0u32);
        let mut grace_waited = Duration::ZERO;
        let main_op = main_op(&ops);
        loop {
            let outcome = sent.call.wait().await;
            let rtt = outcome.as_ref().ok().and_then(|o| o.rtt_sample);
            let mut sample = Sample {
                bytes_sent: sent.bytes_sent,
                ..Sample::default()
            };
            let (seq, result) = match outcome {
                Ok(o) => {
                    sample.transmissions = o.transmissions;
                    sample.bytes_received = o.reply_bytes;
                    sample.elapsed = o.elapsed;
                    let limits = CompoundLimits {
                        ops_max: self.inner.ops_max + 1,
                        ..CompoundLimits::default()
                    };
                    match Compound4Res::decode(&mut o.reply.results(), &limits) {
                        Ok(res) => split_sequence(res),
                        Err(e) => (Outcome::NoReply, Err(Error::Decode(e))),
                    }
                }
                Err(e) => (Outcome::NoReply, Err(Error::Rpc(e))),
            };
            let next = {
                let mut s = self.inner.session.lock().expect("session lock");
                s.table.complete(sent.slot, &seq)
            };
            self.inner.slot_freed.notify_waiters();
            if let Outcome::Ok(ok) = &seq {
                self.inner
                    .lease
                    .lock()
                    .expect("lease lock")
                    .renewed(sent.sent_at);
                self.callback_path_down(ok.status_flags);
            }
            let failed = match &result {
                Ok(r) => !r.status.is_ok(),
                Err(_) => true,
            };
            sample.error = failed || next != Next::Done;
            self.record(main_op, sample);
            let uncached = matches!(&result, Ok(r) if r.status == Nfsstat4::RETRY_UNCACHED_REP);
            if next == Next::Done
                && uncached
                && session::resend_uncached(ops.iter().map(|o| o.opnum()))
                && retries < RETRIES_MAX
            {
                // It ran, its reply was lost on a broken connection, and it changes nothing:
                // send it again as new work (see `session`).
                retries += 1;
                sent = self.send(&ops).await;
                continue;
            }
            let delayed = matches!(&result, Ok(r) if r.status == Nfsstat4::DELAY
            && session::resend_delayed(
                ops.iter().map(|o| o.opnum()),
                r.results.len().saturating_sub(1),
            ));
            if next == Next::Done && delayed && retries < RETRIES_MAX {
                // Not done, and nothing before it changed anything: again, a little later
                // (a conflicting OPEN while the server recalls a delegation, say).
                retries += 1;
                tokio::time::sleep(session::DELAY_RETRY).await;
                sent = self.send(&ops).await;
                continue;
            }
            let in_grace = matches!(&result, Ok(r) if r.status == Nfsstat4::GRACE
            && session::resend_delayed(
                ops.iter().map(|o| o.opnum()),
                r.results.len().saturating_sub(1),
            ));
            if next == Next::Done && in_grace && grace_waited < session::GRACE_WAIT_MAX {
                // The server restarted and lets its earlier clients reclaim first: new state
                // waits for the end of its grace period (RFC 8881 §8.4.2), as Linux waits.
                if grace_waited.is_zero() {
                    tracing::warn!(
                        "the server is in its grace period after a restart; waiting (up to {} s) for it to end",
                        session::GRACE_WAIT_MAX.as_secs()
                    );
                }
                grace_waited += session::GRACE_RETRY;
                tokio::time::sleep(session::GRACE_RETRY).await;
                sent = self.send(&ops).await;
                continue;
            }
            let stale = matches!(&result, Ok(r) if matches!(
                r.status,
                Nfsstat4::STALE_STATEID | Nfsstat4::BAD_STATEID
            ));
            if next == Next::Done && stale && sent.tracked {
                // Sent with a stateid of the old client id, racing the reopen pass: again with
                // the new one, if a pass has run since (see `reopen`).
                if self.reopen_finished().await > sent.reopen_epoch && retries < RETRIES_MAX {
                    retries += 1;
                    sent = self.send(&ops).await;
                    continue;
                }
            }
            match next {
                Next::Done => return (result, rtt),
                Next::Failed => {
                    return (
                        result.and_then(|r| {
                            // SEQUENCE itself failed: say so rather than "OK".
                            Err(Error::Status {
                                op: Opnum4::SEQUENCE,
                                status: r.status,
                            })
                        }),
                        rtt,
                    );
                }
                Next::Retry | Next::RetryAfter(_) | Next::Rebind => {
                    retries += 1;
                    if retries > RETRIES_MAX {
                        return (Err(sequence_error(&seq)), rtt);
                    }
                    if let Next::RetryAfter(d) = next {
                        tokio::time::sleep(d).await;
                    }
                    if next == Next::Rebind {
                        self.inner.bound.lock().expect("bound lock")[sent.conn] = None;
                        self.ensure_bound(sent.conn).await;
                    }
                }
                Next::NewSession | Next::NewClient => {
                    recoveries += 1;
                    if recoveries > RECOVERIES_MAX {
                        return (Err(sequence_error(&seq)), rtt);
                    }
                    if let Err(e) = self.recover(sent.slot.generation, next).await {
                        return (Err(e), rtt);
                    }
                }
            }
            sent = self.send(&ops).await;
        }
    }

    /// A free slot of the current session (waits while all are busy). A session whose slots
    /// are all retired (requests that got no reply) is replaced first.
    pub(super) async fn acquire(&self) -> Slot {
        loop {
            let freed = self.inner.slot_freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let exhausted = {
                let mut s = self.inner.session.lock().expect("session lock");
                if let Some(slot) = s.table.acquire() {
                    return slot;
                }
                s.table.exhausted().then(|| s.table.generation())
            };
            match exhausted {
                Some(generation) => {
                    if let Err(e) = self.recover(generation, Next::NewSession).await {
                        tracing::warn!(
                            "{}: NFSv4 session recovery failed: {e}",
                            self.inner.url.host
                        );
                        tokio::time::sleep(RECOVERY_RETRY).await;
                    }
                }
                None => freed.await,
            }
        }
    }

    /// Opens connection `i` in the background (automatic `nconnect`) and binds it to the
    /// session (BIND_CONN_TO_SESSION) before it carries a COMPOUND; a server that refuses the
    /// bind leaves the client on the connections it has, as at connect time.
    pub(super) fn grow(&self, i: usize) {
        let c = self.clone();
        tokio::spawn(async move {
            let inner = &c.inner;
            let rpc = match inner.conns.connect_more().await {
                Ok(rpc) => rpc,
                Err(e) => return inner.conns.growth_failed(&e.to_string()),
            };
            let (sessionid, generation) = {
                let s = inner.session.lock().expect("session lock");
                (s.sessionid, s.table.generation())
            };
            match bind_conn(
                &rpc,
                &inner.cred,
                inner.minor,
                sessionid,
                CDFC4_FORE,
                &inner.stats,
            )
            .await
            {
                Ok(()) => {
                    // Bound to this session: `ensure_bound` binds it again only if the session
                    // changed meanwhile or the connection was re-established.
                    inner.bound.lock().expect("bound lock")[i] =
                        Some((generation, rpc.stats().reconnects));
                    inner.conns.place(i, rpc);
                    inner.conns.activate(i);
                }
                Err(e) => inner
                    .conns
                    .growth_failed(&format!("BIND_CONN_TO_SESSION refused: {e}")),
            }
        });
    }

    /// Binds connection `conn` to the current session unless it already is, for this session
    /// and since its last reconnect. A failure is only logged: the COMPOUND that follows finds
    /// out (a server that binds on SEQUENCE takes it anyway; one that does not answers
    /// CONN_NOT_BOUND_TO_SESSION, which comes back here through [`Next::Rebind`]).
    pub(super) async fn ensure_bound(&self, conn: usize) {
        let i = &self.inner;
        let rpc = i.conns.get(conn);
        let (sessionid, generation) = {
            let s = i.session.lock().expect("session lock");
            (s.sessionid, s.table.generation())
        };
        let want = Some((generation, rpc.stats().reconnects));
        {
            let mut bound = i.bound.lock().expect("bound lock");
            if bound[conn] == want {
                return;
            }
            // Claimed before the call, so that callers racing on this connection bind it once.
            bound[conn] = want;
        }
        // The first connection carries the back channel, if the session has one: a
        // reconnected first connection must be bound for both directions again.
        let dir = if conn == 0 && self.back_channel_up() {
            CDFC4_FORE_OR_BOTH
        } else {
            CDFC4_FORE
        };
        if let Err(e) = bind_conn(rpc, &i.cred, i.minor, sessionid, dir, &i.stats).await {
            tracing::debug!(
                "{}: BIND_CONN_TO_SESSION of connection {} failed: {e}",
                i.url.host,
                conn + 1
            );
        }
    }

    /// A SEQUENCE reply's status flags: when they say the server cannot call back on the
    /// session (SEQ4_STATUS_CB_PATH_DOWN, CB_PATH_DOWN_SESSION, BACKCHANNEL_FAULT), binds the
    /// first connection again for both directions, in the background and at most once a
    /// [`CB_REBIND_INTERVAL`] (see "Back channel after a reset" in the module docs of `mod.rs`).
    pub(super) fn callback_path_down(&self, status_flags: u32) {
        const DOWN: u32 = SEQ4_STATUS_CB_PATH_DOWN
            | SEQ4_STATUS_CB_PATH_DOWN_SESSION
            | SEQ4_STATUS_BACKCHANNEL_FAULT;
        if status_flags & DOWN == 0
            || !self.back_channel_up()
            || self.inner.closed.load(Ordering::SeqCst)
        {
            return;
        }
        let now = Instant::now();
        {
            let mut at = self.inner.cb_rebind_at.lock().expect("rebind lock");
            if at.is_some_and(|t| now < t + CB_REBIND_INTERVAL) {
                return;
            }
            *at = Some(now);
        }
        tracing::debug!(
            "{}: the server reports no callback path (SEQUENCE flags {status_flags:#x}); \
             binding the first connection again",
            self.inner.url.host
        );
        // Forgotten first, so that `ensure_bound` binds although nothing changed on our side.
        self.inner.bound.lock().expect("bound lock")[0] = None;
        let c = self.clone();
        tokio::spawn(async move { c.ensure_bound(0).await });
    }

    pub(super) fn record(&self, op: Opnum4, sample: Sample) {
        self.inner
            .stats
            .lock()
            .expect("stats lock")
            .record("NFS4", op.0, op.name(), sample);
    }
}

/// One transmission of a COMPOUND.
pub(super) struct Sent {
    slot: Slot,
    /// The connection it went on.
    conn: usize,
    /// Whether it carried a stateid of [`Inner::open_files`], and the reopen passes done when
    /// it was sent.
    tracked: bool,
    reopen_epoch: u64,
    call: PendingCall,
    bytes_sent: usize,
    sent_at: Instant,
}

pub(super) fn compound_id() -> ProcId {
    ProcId {
        prog: nfs4::PROGRAM,
        vers: nfs4::VERSION,
        proc_: nfs4::proc_::COMPOUND,
    }
}

/// Separates SEQUENCE's result from the others.
pub(super) fn split_sequence(res: Compound4Res) -> (Outcome, Result<Reply, Error>) {
    let mut results = res.results.into_iter();
    let seq = match results.next() {
        Some(NfsResop4::Sequence(Res4::Ok(ok))) => Outcome::Ok(ok),
        Some(NfsResop4::Sequence(Res4::Err(s))) => Outcome::Err(s),
        // No SEQUENCE result: the COMPOUND failed as a whole (MINOR_VERS_MISMATCH, say).
        _ => Outcome::Err(if res.status.is_ok() {
            Nfsstat4::SERVERFAULT
        } else {
            res.status
        }),
    };
    let reply = Reply {
        status: res.status,
        results: results.collect(),
    };
    (seq, Ok(reply))
}

/// The op a COMPOUND is counted under in the statistics: the first after the PUT*FH that sets
/// its file handle (READ, WRITE, OPEN, LOOKUP, ...); SEQUENCE for a renewal.
pub(super) fn main_op(ops: &[NfsArgop4]) -> Opnum4 {
    // A path walk that ends in OPEN (`Namespace::open_path`) counts as the OPEN.
    if ops.iter().any(|o| o.opnum() == Opnum4::OPEN) {
        return Opnum4::OPEN;
    }
    ops.iter()
        .map(|o| o.opnum())
        .find(|&o| o != Opnum4::PUTFH && o != Opnum4::PUTROOTFH)
        .unwrap_or(Opnum4::SEQUENCE)
}

pub(super) fn sequence_error(seq: &Outcome) -> Error {
    match seq {
        Outcome::Err(s) => Error::Status {
            op: Opnum4::SEQUENCE,
            status: *s,
        },
        _ => Error::Other("the session could not be recovered".into()),
    }
}

impl Client {
    /// The stateid a WRITE of `fh` goes under: its open's while it is open; after the close,
    /// the write delegation's (the mount writes back what it kept under one; see `deleg`).
    fn write_stateid(&self, fh: &Fh) -> Stateid4 {
        if fh.stateid == Stateid4::ANONYMOUS
            || self
                .inner
                .open_files
                .lock()
                .expect("opens lock")
                .tracks(fh.stateid)
        {
            return fh.stateid;
        }
        let cbs = self.inner.callbacks.lock().expect("callbacks lock");
        cbs.delegations.write_stateid(&fh.fh).unwrap_or(fh.stateid)
    }
}

impl FileProtocol for Client {
    type Handle = Fh;
    type Attr = Attr;
    type Error = Error;

    async fn start_read(&self, fh: &Fh, offset: u64, count: u32) -> ReadCall<Attr, Error> {
        let ops = vec![
            NfsArgop4::Putfh(fh.fh.clone()),
            NfsArgop4::Read(ReadArgs {
                stateid: fh.stateid,
                offset,
                count,
            }),
        ];
        let call = self.start_compound(ops).await;
        Box::pin(async move {
            let (res, rtt) = call.await;
            let reply = res.and_then(Reply::ok).and_then(|r| match r.last() {
                Some(NfsResop4::Read(Res4::Ok(ok))) => Ok(ReadReply {
                    data: ok.data.clone().into_chunks(),
                    eof: ok.eof,
                    attr: None,
                }),
                _ => Err(Error::Other("READ returned no data".into())),
            });
            (reply, rtt)
        })
    }

    async fn start_write(
        &self,
        fh: &Fh,
        offset: u64,
        data: Bytes,
        stable: Stability,
    ) -> WriteCall<Error> {
        let stable = match stable {
            Stability::Unstable => StableHow4::UNSTABLE,
            Stability::DataSync => StableHow4::DATA_SYNC,
            Stability::FileSync => StableHow4::FILE_SYNC,
        };
        let end = offset.saturating_add(data.len() as u64);
        let ops = vec![
            NfsArgop4::Putfh(fh.fh.clone()),
            NfsArgop4::Write(WriteArgs {
                stateid: self.write_stateid(fh),
                offset,
                stable,
                data: Payload::from(data),
            }),
        ];
        let call = self.start_compound(ops).await;
        let (callbacks, file) = (self.inner.callbacks.clone(), fh.fh.clone());
        Box::pin(async move {
            let (res, rtt) = call.await;
            let reply = res.and_then(Reply::ok).and_then(|r| match r.last() {
                Some(NfsResop4::Write(Res4::Ok(ok))) => Ok(WriteReply {
                    count: ok.count,
                    // Outside the three levels counts as UNSTABLE: kept until a COMMIT.
                    committed: match ok.committed {
                        StableHow4::FILE_SYNC => Stability::FileSync,
                        StableHow4::DATA_SYNC => Stability::DataSync,
                        _ => Stability::Unstable,
                    },
                    verifier: ok.writeverf,
                }),
                _ => Err(Error::Other("WRITE returned no result".into())),
            });
            if let Ok(w) = &reply {
                let mut cbs = callbacks.lock().expect("callbacks lock");
                cbs.delegations.wrote(&file, end);
                if w.committed == Stability::Unstable {
                    // Marked on the reply, not the send: a COMMIT sent before the WRITE ran
                    // does not cover it, and this mark comes after that COMMIT's send (see
                    // `deleg`).
                    cbs.delegations.wrote_unstable(&file);
                }
            }
            (reply, rtt)
        })
    }

    async fn start_commit(&self, fh: &Fh, offset: u64, count: u32) -> CommitCall<Error> {
        self.inner
            .callbacks
            .lock()
            .expect("callbacks lock")
            .delegations
            .committing(&fh.fh);
        let ops = vec![
            NfsArgop4::Putfh(fh.fh.clone()),
            NfsArgop4::Commit(CommitArgs { offset, count }),
        ];
        let call = self.start_compound(ops).await;
        Box::pin(async move {
            let (res, _) = call.await;
            res.and_then(Reply::ok).and_then(|r| match r.last() {
                Some(NfsResop4::Commit(Res4::Ok(verf))) => Ok(*verf),
                _ => Err(Error::Other("COMMIT returned no verifier".into())),
            })
        })
    }

    async fn getattr(&self, fh: &Fh) -> Result<Attr, Error> {
        self.getattr_fh(&fh.fh).await
    }

    fn version(a: &Attr) -> Version {
        Version {
            size: a.size,
            mtime_ns: (a.mtime.seconds.max(0) as u64)
                .saturating_mul(1_000_000_000)
                .saturating_add(u64::from(a.mtime.nseconds)),
            change: a.change,
        }
    }

    fn rsize(&self) -> u32 {
        self.inner.rsize
    }
    fn wsize(&self) -> u32 {
        self.inner.wsize
    }
    fn files(&self) -> &FileContext {
        &self.inner.files
    }
}
