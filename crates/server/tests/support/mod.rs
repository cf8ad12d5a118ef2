//! What the wire-level test binaries share: an in-process server per test (`sluice_server::bind`
//! on 127.0.0.1:0, then `run` on the test's runtime) over a private temporary export and state
//! directory, and [`Rpc`], a deliberately small ONC RPC client built from the codecs
//! (`sluice_xdr`) and record marking (`sluice_rpc::record`) only: no call table, no retries, so
//! what the server sends is exactly what the test sees.
//!
//! The `*_ceph` targets ([`BACKEND`]) serve a directory of a private Ceph cluster instead,
//! through `sluice_ceph::CephFs`, and the tests see the same directory through ceph-fuse
//! ([`ceph`]); [`TestDirs`], [`TestServer`] and [`bind`] hide the difference.
//!
//! Used as `#[macro_use] mod support;` (for [`op!`]); the engine tests' extras (data pattern,
//! pipelined WRITEs) are in [`engine`], the NFSv4.1 COMPOUND helpers in [`nfs4`].

#![allow(dead_code)] // each test binary uses a different part

pub mod ceph;
pub mod engine;
pub mod nfs4;

use bytes::{Bytes, BytesMut};
use sluice_rpc::record::{self, RecordDecoder, RecordDecoderConfig};
use sluice_server::backend::exports::{ClientMatch, ClientRule, Squash};
use sluice_server::backend::{Export, ExportOptions};
use sluice_server::ServerConfig;
use sluice_xdr::mount3::{self, DirPath, MntRes};
use sluice_xdr::nfs3::*;
use sluice_xdr::portmap;
use sluice_xdr::rpc::{AcceptStat, AuthSys, MsgHeader, OpaqueAuth, ReplyBody, MSG_CALL};
use sluice_xdr::{Pack, Payload, Reader, Unpack, Writer};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// Longest wait for any one reply. Generous (a loaded 2-core CI machine, a 64 MiB fsync) but
/// finite, so a server that never answers fails the test instead of hanging the suite.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

pub const NFS: u32 = sluice_xdr::nfs3::PROGRAM;

/// What a test binary's servers export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A temporary directory of the local disk, served by `LocalFs`.
    Local,
    /// A directory of the process's one-node Ceph cluster, served by `sluice_ceph::CephFs`
    /// and seen by the test through a ceph-fuse mount ([`ceph`]).
    Ceph,
}

/// This binary's backend, chosen by its target's name: the targets named `*_ceph`
/// (`wire_ceph`, `nfs4_wire_ceph`) run the same test modules as `wire` and `nfs4_wire` over
/// Ceph; every other target serves local directories. (A name, not a constant each target
/// defines, because sixteen targets include this module and only two differ.)
pub const BACKEND: Backend = if ends_with(env!("CARGO_CRATE_NAME").as_bytes(), b"_ceph") {
    Backend::Ceph
} else {
    Backend::Local
};

const fn ends_with(s: &[u8], suffix: &[u8]) -> bool {
    if s.len() < suffix.len() {
        return false;
    }
    let mut i = 0;
    while i < suffix.len() {
        if s[s.len() - suffix.len() + i] != suffix[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Calls an NFSv3 procedure: `op!(client, Variant, args)` returns that procedure's result.
macro_rules! op {
    ($c:expr, $v:ident, $a:expr) => {
        match $c.nfs(Args3::$v($a)).await {
            Res3::$v(r) => r,
            other => panic!("reply of another procedure: {other:?}"),
        }
    };
}

// =============================================================================================
// Fixtures: directories, configurations, a server per test
// =============================================================================================

/// A private export and state directory, removed on drop: `export/` and `state/` in a
/// temporary directory, or over Ceph ([`Backend::Ceph`]) `export/` in a directory of the
/// Ceph file system (seen through the process's ceph-fuse mount) and the state directory
/// beside it on the local disk.
pub struct TestDirs {
    /// The test's own directory, where `export/` is; over Ceph, inside the Ceph file system.
    pub base: PathBuf,
    state: PathBuf,
}

impl TestDirs {
    /// `$TMPDIR/sluice-{tag}-{pid}-{n}` with `export/` and `state/` in it; over Ceph,
    /// `{tag}-{n}/export` in the Ceph file system and `$TMPDIR/sluice-{tag}-{pid}-{n}-state`.
    pub fn new(tag: &str) -> TestDirs {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let local = std::env::temp_dir().join(format!("sluice-{tag}-{}-{n}", std::process::id()));
        let (base, state) = match BACKEND {
            Backend::Local => (local.clone(), local.join("state")),
            Backend::Ceph => (
                ceph::fuse_root().join(format!("{tag}-{n}")),
                local.with_extension("state"),
            ),
        };
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("export")).unwrap();
        std::fs::create_dir_all(&state).unwrap();
        TestDirs {
            base: base.canonicalize().unwrap(),
            state: state.canonicalize().unwrap(),
        }
    }

    pub fn export(&self) -> PathBuf {
        self.base.join("export")
    }

    /// The server's state directory (always on the local disk).
    pub fn state(&self) -> PathBuf {
        self.state.clone()
    }

    /// [`rw`] with `export/` and `state/` filled in.
    pub fn config(&self) -> ServerConfig {
        let mut config = rw();
        config.exports[0].path = self.export();
        config.state_dir = self.state();
        config
    }
}

impl Drop for TestDirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// Writable, root not squashed, no privileged-port requirement.
pub fn rw_options() -> ExportOptions {
    ExportOptions {
        read_only: false,
        squash: Squash::None,
        secure: false,
        ..ExportOptions::default()
    }
}

/// `path` exported to any client with `options`.
pub fn export_to_all(path: PathBuf, options: ExportOptions) -> Export {
    Export {
        path,
        clients: vec![ClientRule {
            client: ClientMatch::Any,
            options,
        }],
    }
}

/// A writable export to everyone, root not squashed, no privileged-port requirement.
pub fn rw() -> ServerConfig {
    with_options(|_| {})
}

/// One export to everyone with [`rw_options`] as changed by `f`, on 127.0.0.1:0; its path is
/// left empty for [`TestServer::start_in`] to fill in.
pub fn with_options(f: impl FnOnce(&mut ExportOptions)) -> ServerConfig {
    let mut options = rw_options();
    f(&mut options);
    ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        exports: vec![export_to_all(PathBuf::new(), options)],
        ..ServerConfig::default()
    }
}

/// A server exporting `dirs/export` (unless the config says otherwise), running on the test's
/// runtime; stopped when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    pub export: PathBuf,
    pub config: ServerConfig,
    pub task: JoinHandle<Result<(), String>>,
    pub dirs: TestDirs,
}

impl TestServer {
    pub async fn start(config: ServerConfig) -> TestServer {
        TestServer::start_in(config, TestDirs::new("wire")).await
    }

    /// A server exporting the given (existing) directories, writable to everyone.
    pub async fn exporting(paths: &[&Path]) -> TestServer {
        let mut config = rw();
        config.exports = paths
            .iter()
            .map(|p| export_to_all(p.to_path_buf(), rw_options()))
            .collect();
        TestServer::start(config).await
    }

    /// Exports with an empty path get `dirs/export`; the state directory is `dirs/state`.
    pub async fn start_in(mut config: ServerConfig, dirs: TestDirs) -> TestServer {
        let export = dirs.export();
        for e in &mut config.exports {
            if e.path.as_os_str().is_empty() {
                e.path = export.clone();
            }
        }
        config.state_dir = dirs.state();
        config.listen = "127.0.0.1:0".parse().unwrap();
        let (addr, task) = spawn_server(config.clone()).await;
        TestServer {
            addr,
            export,
            config,
            task,
            dirs,
        }
    }

    /// Stops the server and starts it again on the same directories (a new port).
    pub async fn restart(&mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
        for e in &mut self.config.exports {
            if e.path.as_os_str().is_empty() {
                e.path = self.export.clone();
            }
        }
        let (addr, task) = spawn_server(self.config.clone()).await;
        self.addr = addr;
        self.task = task;
    }

    pub async fn connect(&self) -> Rpc {
        Rpc::connect(self.addr).await
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn spawn_server(config: ServerConfig) -> (SocketAddr, JoinHandle<Result<(), String>>) {
    let bound = bind(config).await.expect("server binds");
    let addr = bound.local_addr().unwrap();
    (addr, tokio::spawn(sluice_server::run(bound)))
}

/// `sluice_server::bind` on this binary's [`BACKEND`]: over Ceph every export must lie inside
/// the Ceph file system (under [`ceph::fuse_root`]) and is served by a `CephFs` of that
/// directory, under the same path.
pub async fn bind(config: ServerConfig) -> Result<sluice_server::Bound, String> {
    match BACKEND {
        Backend::Local => sluice_server::bind(config).await,
        Backend::Ceph => ceph::bind(config).await,
    }
}

// =============================================================================================
// The test client: XDR + record marking, nothing else
// =============================================================================================

/// One TCP connection speaking ONC RPC. Calls carry `cred` (AUTH_SYS root by default).
pub struct Rpc {
    pub stream: TcpStream,
    pub decoder: RecordDecoder,
    pub xid: u32,
    pub cred: OpaqueAuth,
    /// Longest wait for the connect and for any one reply.
    pub timeout: Duration,
    /// Procedure of each call sent by [`Rpc::send`] and not yet answered.
    pub outstanding: HashMap<u32, u32>,
}

/// A decoded reply: its xid, header body, the procedure results that follow, and the size of
/// the whole reply on the wire.
#[derive(Debug)]
pub struct Reply {
    pub xid: u32,
    pub body: ReplyBody,
    pub results: Bytes,
    pub wire_len: usize,
}

impl Reply {
    pub fn mismatch(&self) -> Option<(u32, u32)> {
        match &self.body {
            ReplyBody::Accepted {
                stat: AcceptStat::PROG_MISMATCH,
                mismatch,
                ..
            } => *mismatch,
            _ => None,
        }
    }
}

pub fn auth_sys(uid: u32, gid: u32) -> OpaqueAuth {
    AuthSys {
        stamp: 0x5eed,
        machine_name: Bytes::from_static(b"wire-test"),
        uid,
        gid,
        gids: vec![gid],
    }
    .to_opaque_auth()
}

/// An unframed CALL message.
pub fn call_message(
    xid: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    cred: &OpaqueAuth,
    args: &[u8],
) -> Vec<u8> {
    let mut w = Writer::new();
    MsgHeader::Call {
        xid,
        call: sluice_xdr::rpc::CallHeader {
            rpcvers: 2,
            prog,
            vers,
            proc_,
            cred: cred.clone(),
            verf: OpaqueAuth::none(),
        },
    }
    .pack(&mut w);
    w.put_raw(args);
    let msg = w.into_bytes().to_vec();
    debug_assert_eq!(u32::from_be_bytes(msg[4..8].try_into().unwrap()), MSG_CALL);
    msg
}

/// `msg` as one record of one fragment.
pub fn frame_one(msg: &[u8]) -> Vec<u8> {
    let mut out = record::record_header(msg.len(), true).to_vec();
    out.extend_from_slice(msg);
    out
}

impl Rpc {
    /// A connection whose waits are bounded by [`REPLY_TIMEOUT`].
    pub async fn connect(addr: SocketAddr) -> Rpc {
        Rpc::connect_within(addr, REPLY_TIMEOUT).await
    }

    /// A connection whose waits are bounded by `timeout`.
    pub async fn connect_within(addr: SocketAddr, timeout: Duration) -> Rpc {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .expect("connect in time")
            .expect("connect");
        stream.set_nodelay(true).unwrap();
        // XIDs start at a per-connection random-ish value, as real clients do.
        static SEED: AtomicU32 = AtomicU32::new(0x1000);
        let xid = SEED.fetch_add(0x0100_0000, Ordering::Relaxed) ^ std::process::id();
        Rpc {
            stream,
            decoder: RecordDecoder::new(RecordDecoderConfig {
                max_record_bytes: 8 << 20,
                ..RecordDecoderConfig::default()
            }),
            xid,
            cred: auth_sys(0, 0),
            timeout,
            outstanding: HashMap::new(),
        }
    }

    pub fn next_xid(&mut self) -> u32 {
        self.xid = self.xid.wrapping_add(1);
        self.xid
    }

    pub async fn send_message(&mut self, msg: &[u8]) {
        self.stream.write_all(&frame_one(msg)).await.expect("send");
    }

    /// The next reply, or `None` once the server closed the connection.
    pub async fn recv(&mut self) -> Option<Reply> {
        let wait = self.timeout;
        self.recv_within(wait)
            .await
            .unwrap_or_else(|| panic!("no reply within {wait:?}"))
    }

    /// `Some(reply or close)`, or `None` if nothing happened within `wait`.
    pub async fn recv_within(&mut self, wait: Duration) -> Option<Option<Reply>> {
        let deadline = Instant::now() + wait;
        loop {
            match self.decoder.next_record() {
                Ok(Some(segs)) => return Some(Some(parse_reply(&segs))),
                Ok(None) => {}
                Err(e) => panic!("server sent a bad record: {e}"),
            }
            let mut buf = BytesMut::with_capacity(256 * 1024);
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.stream.read_buf(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return Some(None), // closed or reset
                Ok(Ok(_)) => self.decoder.push(buf.freeze()),
                Err(_) => return None,
            }
        }
    }

    /// True when the server closes the connection (within the connection's timeout) without
    /// answering anything more.
    pub async fn recv_closed(&mut self) -> bool {
        let wait = self.timeout;
        self.recv_closed_within(wait).await
    }

    pub async fn recv_closed_within(&mut self, wait: Duration) -> bool {
        matches!(self.recv_within(wait).await, Some(None))
    }

    /// Sends one call and waits for its reply (the only one outstanding).
    pub async fn call(&mut self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Reply {
        let xid = self.next_xid();
        let msg = call_message(xid, prog, vers, proc_, &self.cred, args);
        self.send_message(&msg).await;
        let r = self.recv().await.unwrap_or_else(|| {
            panic!("connection closed instead of answering {prog}/{vers}/{proc_}")
        });
        assert_eq!(r.xid, xid, "reply to another call");
        r
    }

    /// An NFSv3 call that must be accepted; the results are decoded strictly (no trailing
    /// bytes).
    pub async fn nfs(&mut self, args: Args3) -> Res3 {
        self.nfs_sized(args).await.0
    }

    /// [`Rpc::nfs`], also giving the reply's size on the wire.
    pub async fn nfs_sized(&mut self, args: Args3) -> (Res3, usize) {
        let p = args.proc_();
        let r = self.call(NFS, 3, p, &sluice_xdr::to_bytes(&args)).await;
        assert_eq!(r.body, ReplyBody::success(), "{}", proc_::NAMES[p as usize]);
        let mut rd = Reader::from_bytes(&r.results);
        let res = decode_res(p, &mut rd).expect("results decode");
        rd.finish().expect("no bytes after the results");
        (res, r.wire_len)
    }

    /// Sends a call of version 3 of `prog` without waiting; returns its XID. The reply is
    /// collected by [`Rpc::recv_nfs`], in any order.
    pub async fn send(&mut self, prog: u32, proc_: u32, args: &[u8]) -> u32 {
        let xid = self.next_xid();
        let msg = call_message(xid, prog, 3, proc_, &self.cred, args);
        self.send_message(&msg).await;
        self.outstanding.insert(xid, proc_);
        xid
    }

    /// Sends an NFSv3 call without waiting; returns its XID.
    pub async fn send_nfs(&mut self, args: &Args3) -> u32 {
        self.send(NFS, args.proc_(), &sluice_xdr::to_bytes(args))
            .await
    }

    /// The next reply to a call sent with [`Rpc::send_nfs`]: its XID and decoded results. The
    /// reply must be an accepted success.
    pub async fn recv_nfs(&mut self) -> (u32, Res3) {
        let r = self.recv().await.expect("server closed the connection");
        assert_eq!(r.body, ReplyBody::success(), "xid {}", r.xid);
        let p = self
            .outstanding
            .remove(&r.xid)
            .expect("reply to a call sent");
        let mut rd = Reader::from_bytes(&r.results);
        let res = decode_res(p, &mut rd).expect("results decode");
        (r.xid, res)
    }

    pub async fn mount(&mut self, args: mount3::Args) -> mount3::Res {
        let p = args.proc_();
        let r = self
            .call(mount3::PROGRAM, 3, p, &sluice_xdr::to_bytes(&args))
            .await;
        assert_eq!(r.body, ReplyBody::success(), "MOUNT proc {p}");
        let mut rd = Reader::from_bytes(&r.results);
        let res = mount3::decode_res(p, &mut rd).expect("MOUNT results decode");
        rd.finish().expect("no bytes after the results");
        res
    }

    pub async fn portmap(&mut self, args: portmap::Args) -> portmap::Res {
        let p = args.proc_();
        let r = self
            .call(portmap::PROGRAM, 2, p, &sluice_xdr::to_bytes(&args))
            .await;
        assert_eq!(r.body, ReplyBody::success(), "PORTMAP proc {p}");
        let mut rd = Reader::from_bytes(&r.results);
        let res = portmap::decode_res(p, &mut rd).expect("PORTMAP results decode");
        rd.finish().expect("no bytes after the results");
        res
    }

    pub async fn mnt(&mut self, path: &str) -> MntRes {
        match self
            .mount(mount3::Args::Mnt(DirPath(Bytes::copy_from_slice(
                path.as_bytes(),
            ))))
            .await
        {
            mount3::Res::Mnt(r) => r,
            other => panic!("MNT reply: {other:?}"),
        }
    }

    /// MNT of `path`, which must succeed; its root handle.
    pub async fn mnt_path(&mut self, path: &Path) -> NfsFh3 {
        let path = path.to_str().unwrap();
        match self.mnt(path).await {
            MntRes::Ok(ok) => ok.fhandle,
            MntRes::Err(e) => panic!("MNT {path}: {e:?}"),
        }
    }

    /// MNT of the server's first export; its root handle.
    pub async fn mnt_root(&mut self, s: &TestServer) -> NfsFh3 {
        self.mnt_path(&s.config.exports[0].path).await
    }
}

pub fn parse_reply(segs: &[Bytes]) -> Reply {
    let wire_len = segs.iter().map(Bytes::len).sum();
    let mut r = Reader::new(segs);
    let MsgHeader::Reply { xid, body } = MsgHeader::unpack(&mut r).expect("reply header decodes")
    else {
        panic!("server sent a CALL")
    };
    let mut results = vec![0u8; r.remaining()];
    r.copy_to(&mut results).unwrap();
    Reply {
        xid,
        body,
        results: Bytes::from(results),
        wire_len,
    }
}

// --- typed NFS helpers ------------------------------------------------------------------------

/// The resok of a result that must have succeeded.
pub fn ok<T, F: std::fmt::Debug>(r: NfsResult<T, F>) -> T {
    match r {
        NfsResult::Ok(v) => v,
        NfsResult::Err(s, f) => panic!("NFS3ERR {} ({}): {f:?}", s.name(), s.0),
    }
}

pub fn dirop(dir: &NfsFh3, name: &str) -> DirOpArgs3 {
    dirop_raw(dir, name.as_bytes())
}

pub fn dirop_raw(dir: &NfsFh3, name: &[u8]) -> DirOpArgs3 {
    DirOpArgs3 {
        dir: dir.clone(),
        name: Bytes::copy_from_slice(name),
    }
}

pub async fn getattr(c: &mut Rpc, fh: &NfsFh3) -> GetattrRes {
    op!(c, Getattr, GetattrArgs { object: fh.clone() })
}

pub async fn lookup(c: &mut Rpc, dir: &NfsFh3, name: &str) -> LookupRes {
    lookup_raw(c, dir, name.as_bytes()).await
}

pub async fn lookup_raw(c: &mut Rpc, dir: &NfsFh3, name: &[u8]) -> LookupRes {
    op!(
        c,
        Lookup,
        LookupArgs {
            what: dirop_raw(dir, name)
        }
    )
}

pub async fn read(c: &mut Rpc, fh: &NfsFh3, offset: u64, count: u32) -> ReadRes {
    op!(
        c,
        Read,
        ReadArgs {
            file: fh.clone(),
            offset,
            count
        }
    )
}

pub async fn write(
    c: &mut Rpc,
    fh: &NfsFh3,
    offset: u64,
    data: &[u8],
    stable: StableHow,
) -> WriteRes {
    op!(
        c,
        Write,
        WriteArgs {
            file: fh.clone(),
            offset,
            count: data.len() as u32,
            stable,
            data: Payload::from(data.to_vec()),
        }
    )
}

pub async fn remove(c: &mut Rpc, dir: &NfsFh3, name: &str) -> RemoveRes {
    op!(
        c,
        Remove,
        RemoveArgs {
            object: dirop(dir, name)
        }
    )
}

/// CREATE GUARDED, mode 0644, of a name given as bytes; its status.
pub async fn create_raw(c: &mut Rpc, dir: &NfsFh3, name: &[u8]) -> Nfsstat3 {
    op!(
        c,
        Create,
        CreateArgs {
            where_: dirop_raw(dir, name),
            how: CreateHow::Guarded(Sattr3 {
                mode: Some(0o644),
                ..Default::default()
            }),
        }
    )
    .status()
}

/// A new empty file (GUARDED, 0644); its handle.
pub async fn create(c: &mut Rpc, dir: &NfsFh3, name: &str) -> NfsFh3 {
    ok(op!(
        c,
        Create,
        CreateArgs {
            where_: dirop(dir, name),
            how: CreateHow::Guarded(Sattr3 {
                mode: Some(0o644),
                ..Default::default()
            }),
        }
    ))
    .obj
    .expect("CREATE returns the handle")
}
