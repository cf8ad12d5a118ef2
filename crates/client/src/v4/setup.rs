//! Session set-up and tear-down: [`Client::connect`] (NULL, EXCHANGE_ID, CREATE_SESSION,
//! RECLAIM_COMPLETE, the file system's limits, more connections by trunking), the calls made
//! outside a session (RFC 8881 §18.35-18.37, §18.34 BIND_CONN_TO_SESSION), the lease renewer,
//! the client owner, and [`Client::shutdown`] (DESTROY_SESSION, DESTROY_CLIENTID).

use super::*;
use tokio::sync::watch;
impl Client {
    /// Connects to the server of `url` (port: `nfsport`, else the URL's port, else 2049) and
    /// sets up a session with the first minor version of `minor` the server takes.
    pub async fn connect(
        url: &NfsUrl,
        options: &ClientOptions,
        minor: Minor,
        v4: V4Options,
    ) -> Result<Client, Error> {
        let ip = resolve(url)
            .await
            .map_err(|e| Error::Connect(e.to_string()))?;
        let port = url.nfsport.or(url.port).unwrap_or(2049);
        let addr = SocketAddr::new(ip, port);
        let mut rpc_config = options.rpc.clone();
        if rpc_config.server_name.is_empty() {
            rpc_config.server_name = url.host.clone();
        }
        rpc_config.tls = crate::options::rpc_tls(
            url,
            options,
            (sluice_xdr::nfs4::PROGRAM, sluice_xdr::nfs4::VERSION),
        )
        .map_err(Error::Connect)?;
        let (nconnect, trunk_cfg) = checked_nconnect(url, options).map_err(Error::Connect)?;
        let service = Arc::new(CbService::default());
        rpc_config.callbacks = Some(Callbacks(service.clone()));
        let probe = Probe::new(v4.probe_timeout);
        let rpc = probe
            .within(async {
                RpcClient::connect(addr, rpc_config.clone())
                    .await
                    .map_err(|e| Error::Connect(format!("cannot connect to {addr}: {e}")))
            })
            .await?;
        let cred = credentials(url, options);
        let owner = v4.owner.unwrap_or_else(instance_owner);
        let verifier: [u8; 8] = rand::random();
        let stats = Mutex::new(ClientStats::default());
        let mut last = None;
        for (i, &m) in minor.candidates().iter().enumerate() {
            let x = probe.within(async {
                let x = exchange_id(&rpc, &cred, m, &owner, verifier, &stats);
                if i > 0 {
                    return Ok(x.await);
                }
                // NULL goes out together with the first EXCHANGE_ID: one round trip for
                // both, where waiting for NULL first cost one more before anything useful
                // (a whole 40 ms on a 40 ms link). NULL's answer is looked at first: it says
                // best why a server does not speak NFSv4 at all.
                let (n, x) = tokio::join!(null(&rpc, &cred), x);
                n.map(|()| x)
            });
            match x.await? {
                Ok(x) => {
                    let slots = (options.rpc.table.max_in_flight as u32).max(1);
                    let (sess, create_seq) =
                        create_session(&rpc, &cred, m, x.0, x.1, slots, &stats).await?;
                    let mut conns = Connections::new(rpc);
                    let trunk = Trunk {
                        n: nconnect,
                        config: &rpc_config,
                        cred: &cred,
                        minor: m,
                        sessionid: sess.sessionid,
                        stats: &stats,
                    };
                    let note = trunk.open(&mut conns).await?;
                    if note.is_none() {
                        conns.grow_up_to(trunk_cfg, &rpc_config);
                    }
                    return Client::finish_connect(
                        conns, note, cred, m, url, owner, verifier, x.0, create_seq, sess, options,
                        stats, service,
                    )
                    .await;
                }
                Err(e) if e.status() == Some(Nfsstat4::MINOR_VERS_MISMATCH) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Other("no minor version to try".into())))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn finish_connect(
        conns: Connections,
        trunking_note: Option<String>,
        cred: OpaqueAuth,
        minor: u32,
        url: &NfsUrl,
        owner: Vec<u8>,
        verifier: [u8; 8],
        clientid: u64,
        create_seq: u32,
        sess: CreateSessionResOk,
        options: &ClientOptions,
        stats: Mutex<ClientStats>,
        service: Arc<CbService>,
    ) -> Result<Client, Error> {
        let fore = &sess.fore_chan_attrs;
        // Before the first SEQUENCE, after which the server may call back on the session.
        service.state.lock().expect("callbacks lock").new_session(
            sess.sessionid,
            back_channel(&sess),
            sess.back_chan_attrs.maxrequests,
        );
        if !back_channel(&sess) {
            tracing::debug!("{}: no NFSv4.1 back channel; no delegations", url.host);
        }
        let size = |server: u32, cap: u32| {
            let s = server.saturating_sub(HEADER_BYTES_MAX).min(cap);
            if s >= 4096 {
                s & !4095
            } else {
                s.max(512)
            }
        };
        let rsize = size(
            fore.maxresponsesize,
            options.rsize_max.min(TRANSFER_BYTES_MAX),
        );
        let wsize = size(
            fore.maxrequestsize,
            options.wsize_max.min(TRANSFER_BYTES_MAX),
        );
        let now = Instant::now();
        // CREATE_SESSION bound the first connection, `Trunk::open` the others.
        // Room for connections the automatic `nconnect` may add (bound before they carry calls).
        let bound = (0..conns.capacity())
            .map(|i| (i < conns.len()).then(|| (1, conns.get(i).stats().reconnects)))
            .collect();
        let inner = Inner {
            conns,
            bound: Mutex::new(bound),
            trunking_note,
            cred,
            minor,
            url: url.clone(),
            owner,
            verifier,
            session: Mutex::new(SessionState {
                clientid,
                create_seq,
                sessionid: sess.sessionid,
                table: SlotTable::new(1, fore.maxrequests),
                cached_bytes: fore.maxresponsesize_cached,
            }),
            slot_freed: Notify::new(),
            recovery: tokio::sync::Mutex::new(()),
            lease: Mutex::new(Lease::new(LEASE_DEFAULT, now)),
            files: FileContext::new(
                FileOptions {
                    readahead: options.readahead,
                    trace_readahead: options.trace_readahead,
                    attr_timeout: options.attr_timeout,
                    write_depth: options.write_depth,
                    write_depth_max: options.rpc.table.max_in_flight,
                    commit_bytes_max: options.commit_bytes_max,
                },
                options.readahead_budget_bytes,
            ),
            rsize,
            wsize,
            // At least one LOOKUP per COMPOUND of a path walk (see `lookup`).
            ops_max: fore.maxoperations.clamp(5, OPS_MAX),
            stats,
            closed: AtomicBool::new(false),
            opens: AtomicU64::new(0),
            open_files: Mutex::new(OpenTable::default()),
            reopen_done: Notify::new(),
            callbacks: service.state.clone(),
            write_back: Mutex::new(None),
            cb_rebind_at: Mutex::new(None),
        };
        let mut client = Client {
            inner: Arc::new(inner),
        };
        // RECLAIM_COMPLETE and the root's GETATTR go out together (neither obtains a lock,
        // so the GETATTR need not wait for RECLAIM_COMPLETE: RFC 8881 §18.51.3).
        let (_, limits) = tokio::join!(client.reclaim_complete(), client.root_limits());
        client.fit_to_filesystem(limits?);
        // Only now: `fit_to_filesystem` needs the one strong handle and no weak ones.
        let _ = service.client.set(Arc::downgrade(&client.inner));
        tokio::spawn(renew_loop(Arc::downgrade(&client.inner)));
        let reconnected = client.inner.conns.first().reconnected();
        tokio::spawn(rebind_loop(Arc::downgrade(&client.inner), reconnected));
        Ok(client)
    }

    /// RECLAIM_COMPLETE: this client has nothing to reclaim, so the server need not hold its
    /// grace period for it (RFC 8881 §18.51). An error (COMPLETE_ALREADY) changes nothing.
    pub(super) async fn reclaim_complete(&self) {
        let _ = self.compound(vec![NfsArgop4::ReclaimComplete(false)]).await;
    }

    /// The root's lease time and transfer limits (see [`Client::fit_to_filesystem`]).
    pub(super) async fn root_limits(&self) -> Result<AttrValues, Error> {
        let bits = Bitmap4::from_bits(&[num::LEASE_TIME, num::MAXREAD, num::MAXWRITE]);
        let res = self
            .compound(vec![NfsArgop4::Putrootfh(()), NfsArgop4::Getattr(bits)])
            .await?
            .ok()?;
        let Some(NfsResop4::Getattr(Res4::Ok(f))) = res.last() else {
            return Err(Error::Other("GETATTR of the root returned nothing".into()));
        };
        Ok(AttrValues::decode(f)?.values)
    }

    /// Takes the root's lease time, and lowers rsize/wsize to its transfer limits.
    pub(super) fn fit_to_filesystem(&mut self, v: AttrValues) {
        if let Some(secs) = v.lease_time.filter(|s| *s > 0) {
            *self.inner.lease.lock().expect("lease lock") =
                Lease::new(Duration::from_secs(u64::from(secs)), Instant::now());
        }
        let cap = |server: Option<u64>, mine: u32| match server {
            Some(s) if s >= 4096 => (s.min(u64::from(mine)) as u32) & !4095,
            _ => mine,
        };
        let inner = Arc::get_mut(&mut self.inner).expect("no other handle yet");
        inner.rsize = cap(v.maxread, inner.rsize);
        inner.wsize = cap(v.maxwrite, inner.wsize);
    }

    /// Ends the session and the client id (DESTROY_SESSION, DESTROY_CLIENTID). Calls after it
    /// fail; dropping the last handle without it does the same in the background. Gives up
    /// after [`SHUTDOWN_WAIT`]: a server that is gone must not keep the caller (a mount that
    /// was just unmounted) waiting; its lease ends the state instead.
    pub async fn shutdown(&self) {
        if self.inner.closed.load(Ordering::SeqCst) {
            return;
        }
        // What is held goes back first, the data kept under write delegations committed
        // (as Linux returns its delegations at unmount).
        self.return_all_delegations().await;
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let goodbye = async {
            let (sessionid, clientid) = {
                let s = self.inner.session.lock().expect("session lock");
                (s.sessionid, s.clientid)
            };
            let (rpc, cred, minor) = (self.inner.conns.first(), &self.inner.cred, self.inner.minor);
            // DESTROY_SESSION outside a SEQUENCE must come on a connection bound to the
            // session. A connection reset after the bind, or one that cuts the call (the
            // transport resends it on a new connection), gets CONN_NOT_BOUND_TO_SESSION: bound
            // again and sent again. Else the session, and with it the client id (its
            // DESTROY_CLIENTID is CLIENTID_BUSY), would stay on the server for a lease.
            for _ in 0..DESTROY_ATTEMPTS {
                self.ensure_bound(0).await;
                let op = NfsArgop4::DestroySession(sessionid);
                let not_bound = matches!(
                    lone_op(rpc, cred, minor, op, None).await,
                    Err(Error::Status {
                        status: Nfsstat4::CONN_NOT_BOUND_TO_SESSION,
                        ..
                    })
                );
                if !not_bound {
                    break;
                }
                self.inner.bound.lock().expect("bound lock")[0] = None;
            }
            let op = NfsArgop4::DestroyClientid(clientid);
            let _ = lone_op(rpc, cred, minor, op, None).await;
        };
        if tokio::time::timeout(SHUTDOWN_WAIT, goodbye).await.is_err() {
            tracing::debug!(
                "{}: no answer to DESTROY_SESSION within {SHUTDOWN_WAIT:?}; the server's lease \
                 will end the state",
                self.inner.url
            );
        }
    }
}

/// Most bytes of a client owner (`NFS4_OPAQUE_LIMIT`).
pub(super) const OWNER_BYTES_MAX: usize = 1024;

/// `sluice/HOST/UID/TAG`: a client owner stable per host, user and `tag` (the mount passes
/// `mount:` and its mount point; see the module docs). A `tag` too long for the owner's 1 KiB
/// is replaced by its 64-bit FNV-1a hash, which is stable across builds.
pub fn stable_owner(uid: u32, tag: &str) -> Vec<u8> {
    let host = String::from_utf8_lossy(&crate::identity::hostname()).into_owned();
    let owner = format!("sluice/{host}/{uid}/{tag}");
    if owner.len() <= OWNER_BYTES_MAX {
        return owner.into_bytes();
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in tag.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut owner = format!("sluice/{host}/{uid}/#{h:016x}").into_bytes();
    owner.truncate(OWNER_BYTES_MAX);
    owner
}

/// `sluice/HOST/UID/PID/N`: see the module docs.
pub(super) fn instance_owner() -> Vec<u8> {
    static INSTANCES: AtomicU64 = AtomicU64::new(0);
    let n = INSTANCES.fetch_add(1, Ordering::Relaxed);
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let host = String::from_utf8_lossy(&crate::identity::hostname()).into_owned();
    format!("sluice/{host}/{uid}/{}/{n}", std::process::id()).into_bytes()
}

/// The deadline of the connect probe ([`V4Options::probe_timeout`]).
pub(super) struct Probe {
    timeout: Option<Duration>,
    deadline: Option<tokio::time::Instant>,
}

impl Probe {
    pub(super) fn new(timeout: Option<Duration>) -> Probe {
        Probe {
            timeout,
            deadline: timeout.map(|t| tokio::time::Instant::now() + t),
        }
    }

    /// `f`, or [`Error::Connect`] if the deadline passes first (the call is dropped, which
    /// forgets it in the transport; the connection goes with the client).
    pub(super) async fn within<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let (Some(deadline), Some(t)) = (self.deadline, self.timeout) else {
            return f.await;
        };
        match tokio::time::timeout_at(deadline, f).await {
            Ok(r) => r,
            Err(_) => Err(Error::Connect(format!(
                "no answer to the NFSv4 probe (connect, NULL, EXCHANGE_ID) within {} ms",
                t.as_millis()
            ))),
        }
    }
}

/// NULL: is anyone serving NFSv4 there? (PROG_MISMATCH says which versions are.)
pub(super) async fn null(rpc: &RpcClient, cred: &OpaqueAuth) -> Result<(), Error> {
    let id = ProcId {
        proc_: nfs4::proc_::NULL,
        ..compound_id()
    };
    match rpc.call(id, cred, Vec::new(), TimerClass::Other).await {
        Ok(_) => Ok(()),
        Err(CallError::Rpc(RpcError::ProgMismatch { low, high })) => Err(Error::Connect(format!(
            "the server does not speak NFSv4 (versions {low} to {high} only)"
        ))),
        Err(CallError::Rpc(RpcError::ProgUnavail)) => {
            Err(Error::Connect("the server does not serve NFS there".into()))
        }
        Err(e) => Err(Error::Rpc(e)),
    }
}

/// A COMPOUND without SEQUENCE (EXCHANGE_ID, CREATE_SESSION, DESTROY_*: RFC 8881 §2.10.6.3 lets
/// each stand alone).
pub(super) async fn lone_op(
    rpc: &RpcClient,
    cred: &OpaqueAuth,
    minor: u32,
    op: NfsArgop4,
    stats: Option<&Mutex<ClientStats>>,
) -> Result<NfsResop4, Error> {
    let opnum = op.opnum();
    let args = Compound4Args {
        tag: Utf8Str::default(),
        minorversion: minor,
        ops: vec![op],
    };
    let mut w = Writer::new();
    args.pack(&mut w);
    let segments = w.into_segments();
    let bytes_sent = segments.iter().map(|s| s.len()).sum();
    let outcome = rpc
        .call(compound_id(), cred, segments, TimerClass::Other)
        .await;
    let mut sample = Sample {
        bytes_sent,
        ..Sample::default()
    };
    let result = match outcome {
        Ok(o) => {
            sample.transmissions = o.transmissions;
            sample.bytes_received = o.reply_bytes;
            sample.elapsed = o.elapsed;
            let res = Compound4Res::decode(&mut o.reply.results(), &CompoundLimits::default())?;
            match res.results.into_iter().next() {
                Some(r) if res.status.is_ok() => Ok(r),
                _ => Err(Error::Status {
                    op: opnum,
                    status: if res.status.is_ok() {
                        Nfsstat4::SERVERFAULT
                    } else {
                        res.status
                    },
                }),
            }
        }
        Err(e) => Err(Error::Rpc(e)),
    };
    sample.error = result.is_err();
    if let Some(stats) = stats {
        stats
            .lock()
            .expect("stats lock")
            .record("NFS4", opnum.0, opnum.name(), sample);
    }
    result
}

/// EXCHANGE_ID with SP4_NONE: the client id and the sequence id for CREATE_SESSION.
pub(super) async fn exchange_id(
    rpc: &RpcClient,
    cred: &OpaqueAuth,
    minor: u32,
    owner: &[u8],
    verifier: [u8; 8],
    stats: &Mutex<ClientStats>,
) -> Result<(u64, u32), Error> {
    let op = NfsArgop4::ExchangeId(ExchangeIdArgs {
        clientowner: ClientOwner4 {
            verifier,
            ownerid: Opaque4(Bytes::copy_from_slice(owner)),
        },
        flags: 0,
        state_protect: StateProtect4A::None,
        client_impl_id: ImplIdList::default(),
    });
    match lone_op(rpc, cred, minor, op, Some(stats)).await? {
        NfsResop4::ExchangeId(Res4::Ok(ok)) => Ok((ok.clientid, ok.sequenceid)),
        other => Err(Error::Status {
            op: Opnum4::EXCHANGE_ID,
            status: other.status(),
        }),
    }
}

/// CREATE_SESSION asking for `slots` fore-channel slots sized for 1 MiB transfers; the session
/// and the next `csa_sequence`.
pub(super) async fn create_session(
    rpc: &RpcClient,
    cred: &OpaqueAuth,
    minor: u32,
    clientid: u64,
    sequence: u32,
    slots: u32,
    stats: &Mutex<ClientStats>,
) -> Result<(CreateSessionResOk, u32), Error> {
    let transfer = TRANSFER_BYTES_MAX + HEADER_BYTES_MAX;
    let op = NfsArgop4::CreateSession(CreateSessionArgs {
        clientid,
        sequence,
        // The session's first connection also carries the server's calls (see `deleg`).
        flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
        fore_chan_attrs: ChannelAttrs4 {
            headerpadsize: 0,
            maxrequestsize: transfer,
            maxresponsesize: transfer,
            // Only the replies of COMPOUNDs that change state are cached (WRITE, OPEN...),
            // which are small (see `session::cache_this`).
            maxresponsesize_cached: CACHED_REPLY_BYTES,
            maxoperations: OPS_MAX,
            maxrequests: slots.min(session::SLOTS_MAX),
            rdma_ird: Default::default(),
        },
        // Callbacks are small: CB_SEQUENCE and a few recalls (each ~180 bytes with a 128-byte
        // handle) fit 4 KiB, as Linux asks; the replies are smaller still and all may be
        // cached (see `deleg::BackSlots`).
        back_chan_attrs: ChannelAttrs4 {
            headerpadsize: 0,
            maxrequestsize: BACK_CALL_BYTES,
            maxresponsesize: BACK_CALL_BYTES,
            maxresponsesize_cached: BACK_CALL_BYTES,
            maxoperations: BACK_OPS_MAX,
            maxrequests: deleg::BACK_SLOTS_MAX,
            rdma_ird: Default::default(),
        },
        // The callback program number is ours to choose; Linux's is the usual one.
        cb_program: cb::PROGRAM_DEFAULT,
        sec_parms: CallbackSecParmsList(vec![CallbackSecParms4::AuthNone]),
    });
    match lone_op(rpc, cred, minor, op, Some(stats)).await? {
        NfsResop4::CreateSession(Res4::Ok(ok)) => Ok((ok, sequence.wrapping_add(1))),
        other => Err(Error::Status {
            op: Opnum4::CREATE_SESSION,
            status: other.status(),
        }),
    }
}

/// BIND_CONN_TO_SESSION of `rpc`'s connection to the session, in direction `dir`
/// (`CDFC4_FORE`, or `CDFC4_FORE_OR_BOTH` for the first connection of a session with a back
/// channel). Extra `nconnect` connections are bound for the fore channel only: every
/// connection answers callbacks, but one path is all the server needs, and the first
/// connection is the one CREATE_SESSION gave it. Success needs the fore channel bound.
pub(super) async fn bind_conn(
    rpc: &RpcClient,
    cred: &OpaqueAuth,
    minor: u32,
    sessionid: SessionId4,
    dir: u32,
    stats: &Mutex<ClientStats>,
) -> Result<(), Error> {
    let op = NfsArgop4::BindConnToSession(BindConnToSessionArgs {
        sessid: sessionid,
        dir,
        use_conn_in_rdma_mode: false,
    });
    match lone_op(rpc, cred, minor, op, Some(stats)).await? {
        NfsResop4::BindConnToSession(Res4::Ok(ok)) if ok.dir & CDFS4_FORE != 0 => Ok(()),
        NfsResop4::BindConnToSession(Res4::Ok(ok)) => Err(Error::Other(format!(
            "BIND_CONN_TO_SESSION bound direction {:#x}, not the fore channel",
            ok.dir
        ))),
        other => Err(Error::Status {
            op: Opnum4::BIND_CONN_TO_SESSION,
            status: other.status(),
        }),
    }
}

/// What session trunking at connect time needs (see "Session trunking" in the module docs).
pub(super) struct Trunk<'a> {
    /// Connections wanted in all (`nconnect`).
    n: usize,
    config: &'a RpcConfig,
    cred: &'a OpaqueAuth,
    minor: u32,
    sessionid: SessionId4,
    stats: &'a Mutex<ClientStats>,
}

impl Trunk<'_> {
    /// Opens connections until there are `n` and binds each new one to the session. When the
    /// server refuses a bind, the client goes on with the first connection alone and says why
    /// (the returned note, also logged): trunking is an optimisation, not a reason to fail.
    /// Failing to open a connection at all is an error, as for NFSv3.
    pub(super) async fn open(&self, conns: &mut Connections) -> Result<Option<String>, Error> {
        conns
            .open(self.n, self.config)
            .await
            .map_err(Error::Connect)?;
        for i in 1..conns.len() {
            let rpc = conns.get(i);
            if let Err(e) = bind_conn(
                rpc,
                self.cred,
                self.minor,
                self.sessionid,
                CDFC4_FORE,
                self.stats,
            )
            .await
            {
                let note = format!(
                    "nconnect={}: the server did not bind connection {} to the NFSv4.1 session \
                     ({e}), so the session uses one connection",
                    self.n,
                    i + 1
                );
                tracing::warn!("{}: {note}", rpc.peer_addr());
                conns.truncate(1);
                return Ok(Some(note));
            }
        }
        Ok(None)
    }
}

/// DESTROY_SESSION then DESTROY_CLIENTID; errors are ignored (the lease ends it all anyway).
pub(super) async fn destroy(
    rpc: &RpcClient,
    cred: &OpaqueAuth,
    minor: u32,
    sessionid: SessionId4,
    clientid: u64,
) {
    let _ = lone_op(rpc, cred, minor, NfsArgop4::DestroySession(sessionid), None).await;
    let _ = lone_op(rpc, cred, minor, NfsArgop4::DestroyClientid(clientid), None).await;
}

/// DESTROY_SESSIONs [`Client::shutdown`] sends when the server says the connection is not
/// bound to the session (binding it again before each): 3, so that resets that cut the call
/// again and again (a flaky link) still end within [`SHUTDOWN_WAIT`].
const DESTROY_ATTEMPTS: u32 = 3;

/// How long [`Client::shutdown`] waits for DESTROY_SESSION and DESTROY_CLIENTID: 3 s. Two
/// round trips take milliseconds on a LAN and well under a second over a WAN, so a live server
/// has answered long before; a dead or unreachable one never will (a hard mount would retry
/// forever), and the state it holds ends with the lease (90 s by default) anyway. The bound is
/// what lets `sluice mount` exit at once after an unmount whatever the server does.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);

/// Renews the lease while the client is idle, until the client is gone or shut down.
pub(super) async fn renew_loop(inner: Weak<Inner>) {
    loop {
        let at = match inner.upgrade() {
            Some(i) if !i.closed.load(Ordering::SeqCst) => {
                i.lease.lock().expect("lease lock").renew_at()
            }
            _ => return,
        };
        tokio::time::sleep_until(at.into()).await;
        let Some(i) = inner.upgrade() else { return };
        if i.closed.load(Ordering::SeqCst) {
            return;
        }
        let due = i.lease.lock().expect("lease lock").due(Instant::now());
        if due {
            let c = Client { inner: i };
            // A SEQUENCE alone; its success renews the lease (in `finish`).
            let _ = c.compound(Vec::new()).await;
        }
    }
}

/// Binds the first connection again as soon as its transport has re-established it, while the
/// session has a back channel, until the client is gone or shut down (see "Back channel after
/// a reset" in the module docs of `mod.rs`). Holds no strong handle while it waits.
pub(super) async fn rebind_loop(inner: Weak<Inner>, mut reconnected: watch::Receiver<u64>) {
    // `changed` fails once the transport's driver is gone, which it is only with the client.
    while reconnected.changed().await.is_ok() {
        let Some(i) = inner.upgrade() else { return };
        if i.closed.load(Ordering::SeqCst) {
            return;
        }
        let c = Client { inner: i };
        if c.back_channel_up() {
            // With CDFC4_FORE_OR_BOTH (connection 0 with a back channel): see `ensure_bound`.
            c.ensure_bound(0).await;
        }
    }
}
