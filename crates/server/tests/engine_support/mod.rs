//! A minimal pipelining NFSv3 client over TCP for the engine and allocation tests: XDR codecs
//! (`sluice_xdr`) and record marking (`sluice_rpc::record`) only, so what the server does is
//! exactly what the test sees. Calls can be sent back to back and their replies collected in
//! any order (matched by XID), which is how a real client keeps 16 WRITEs in flight.

#![allow(dead_code)] // each test binary uses a different part

use bytes::{Bytes, BytesMut};
use sluice_rpc::record::{self, RecordDecoder, RecordDecoderConfig};
use sluice_server::backend::exports::{ClientMatch, ClientRule, Squash};
use sluice_server::backend::{Export, ExportOptions};
use sluice_server::ServerConfig;
use sluice_xdr::mount3::{self, DirPath, MntRes};
use sluice_xdr::nfs3::*;
use sluice_xdr::rpc::{AuthSys, MsgHeader, OpaqueAuth, ReplyBody};
use sluice_xdr::{Pack, Payload, Reader, Unpack, Writer};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const MIB: u64 = 1 << 20;
/// Longest wait for one reply: generous (a loaded CI machine) but finite.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// Byte `offset` of every test file: a pattern that differs between neighbouring MiBs and
/// within a page, so misplaced or stale data shows.
pub fn pattern(offset: u64) -> u8 {
    (offset.wrapping_mul(31) ^ (offset >> 20).wrapping_mul(0x9d) ^ (offset >> 12)) as u8
}

pub fn pattern_range(offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| pattern(offset + i)).collect()
}

/// A deterministic shuffle (xorshift), so a failure replays.
pub fn shuffled(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut x = seed | 1;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

/// A private temporary export and state directory, removed on drop.
pub struct TestDirs {
    pub base: PathBuf,
}

impl TestDirs {
    pub fn new(tag: &str) -> TestDirs {
        static N: AtomicU32 = AtomicU32::new(0);
        let base = std::env::temp_dir().join(format!(
            "sluice-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("export")).unwrap();
        std::fs::create_dir_all(base.join("state")).unwrap();
        TestDirs {
            base: base.canonicalize().unwrap(),
        }
    }

    pub fn export(&self) -> PathBuf {
        self.base.join("export")
    }

    /// A writable export of `export/` to everyone, root not squashed, on 127.0.0.1:0.
    pub fn config(&self) -> ServerConfig {
        ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            exports: vec![Export {
                path: self.export(),
                clients: vec![ClientRule {
                    client: ClientMatch::Any,
                    options: ExportOptions {
                        read_only: false,
                        squash: Squash::None,
                        secure: false,
                        ..ExportOptions::default()
                    },
                }],
            }],
            state_dir: self.base.join("state"),
            ..ServerConfig::default()
        }
    }
}

impl Drop for TestDirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// One TCP connection speaking ONC RPC as AUTH_SYS root.
pub struct Client {
    stream: TcpStream,
    decoder: RecordDecoder,
    xid: u32,
    cred: OpaqueAuth,
    /// Procedure of each call sent and not yet answered.
    outstanding: HashMap<u32, u32>,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Client {
        let stream = tokio::time::timeout(REPLY_TIMEOUT, TcpStream::connect(addr))
            .await
            .expect("connect in time")
            .expect("connect");
        stream.set_nodelay(true).unwrap();
        static SEED: AtomicU32 = AtomicU32::new(0x2000);
        Client {
            stream,
            decoder: RecordDecoder::new(RecordDecoderConfig {
                max_record_bytes: 8 << 20,
                ..RecordDecoderConfig::default()
            }),
            xid: SEED.fetch_add(0x0100_0000, Ordering::Relaxed),
            cred: AuthSys {
                stamp: 1,
                machine_name: Bytes::from_static(b"engine-test"),
                uid: 0,
                gid: 0,
                gids: vec![0],
            }
            .to_opaque_auth(),
            outstanding: HashMap::new(),
        }
    }

    /// Sends a call without waiting; returns its XID.
    pub async fn send(&mut self, prog: u32, proc_: u32, args: &[u8]) -> u32 {
        self.xid = self.xid.wrapping_add(1);
        let xid = self.xid;
        let mut w = Writer::new();
        MsgHeader::Call {
            xid,
            call: sluice_xdr::rpc::CallHeader {
                rpcvers: 2,
                prog,
                vers: 3,
                proc_,
                cred: self.cred.clone(),
                verf: OpaqueAuth::none(),
            },
        }
        .pack(&mut w);
        let mut segs = w.into_segments();
        segs.push(Bytes::copy_from_slice(args));
        for s in record::frame(segs, usize::MAX >> 1) {
            self.stream.write_all(&s).await.expect("send");
        }
        self.outstanding.insert(xid, proc_);
        xid
    }

    /// Sends an NFSv3 call; returns its XID.
    pub async fn send_nfs(&mut self, args: &Args3) -> u32 {
        self.send(PROGRAM, args.proc_(), &sluice_xdr::to_bytes(args))
            .await
    }

    /// The next reply to an NFS call: its XID and decoded results.
    pub async fn recv_nfs(&mut self) -> (u32, Res3) {
        let (xid, results) = self.recv_raw().await;
        let p = self.outstanding.remove(&xid).expect("reply to a call sent");
        let mut rd = Reader::new(&results);
        let res = decode_res(p, &mut rd).expect("results decode");
        (xid, res)
    }

    /// One NFS call, waited for.
    pub async fn nfs(&mut self, args: Args3) -> Res3 {
        let xid = self.send_nfs(&args).await;
        let (got, res) = self.recv_nfs().await;
        assert_eq!(got, xid, "the only call outstanding");
        res
    }

    /// MNT of the export; the root handle.
    pub async fn mount(&mut self, path: &std::path::Path) -> NfsFh3 {
        let args = mount3::Args::Mnt(DirPath(Bytes::copy_from_slice(
            path.to_str().unwrap().as_bytes(),
        )));
        let xid = self
            .send(mount3::PROGRAM, args.proc_(), &sluice_xdr::to_bytes(&args))
            .await;
        let (got, results) = self.recv_raw().await;
        assert_eq!(got, xid);
        self.outstanding.remove(&xid);
        let mut rd = Reader::new(&results);
        match mount3::decode_res(args.proc_(), &mut rd).expect("MNT decodes") {
            mount3::Res::Mnt(MntRes::Ok(ok)) => ok.fhandle,
            other => panic!("MNT: {other:?}"),
        }
    }

    async fn recv_raw(&mut self) -> (u32, Vec<Bytes>) {
        loop {
            match self.decoder.next_record() {
                Ok(Some(segs)) => {
                    let mut r = Reader::new(&segs);
                    let MsgHeader::Reply { xid, body } =
                        MsgHeader::unpack(&mut r).expect("reply header")
                    else {
                        panic!("server sent a CALL")
                    };
                    assert_eq!(body, ReplyBody::success(), "xid {xid}");
                    let consumed = segs.iter().map(|s| s.len()).sum::<usize>() - r.remaining();
                    return (xid, skip(segs, consumed));
                }
                Ok(None) => {}
                Err(e) => panic!("bad record from the server: {e}"),
            }
            let mut buf = BytesMut::with_capacity(1 << 20);
            let n = tokio::time::timeout(REPLY_TIMEOUT, self.stream.read_buf(&mut buf))
                .await
                .expect("a reply in time")
                .expect("read");
            assert!(n > 0, "server closed the connection");
            self.decoder.push(buf.freeze());
        }
    }

    // ---- typed helpers --------------------------------------------------------------------

    /// A new empty file (GUARDED, 0644); its handle.
    pub async fn create(&mut self, dir: &NfsFh3, name: &str) -> NfsFh3 {
        match self
            .nfs(Args3::Create(CreateArgs {
                where_: dirop(dir, name),
                how: CreateHow::Guarded(Sattr3 {
                    mode: Some(0o644),
                    ..Default::default()
                }),
            }))
            .await
        {
            Res3::Create(NfsResult::Ok(ok)) => ok.obj.expect("CREATE returns the handle"),
            other => panic!("CREATE {name}: {other:?}"),
        }
    }

    pub fn write_args(fh: &NfsFh3, offset: u64, data: Bytes, stable: StableHow) -> Args3 {
        Args3::Write(WriteArgs {
            file: fh.clone(),
            offset,
            count: data.len() as u32,
            stable,
            data: Payload::from(data),
        })
    }

    /// One WRITE, waited for; its result.
    pub async fn write(
        &mut self,
        fh: &NfsFh3,
        offset: u64,
        data: Bytes,
        stable: StableHow,
    ) -> WriteResOk {
        match self.nfs(Self::write_args(fh, offset, data, stable)).await {
            Res3::Write(NfsResult::Ok(ok)) => ok,
            other => panic!("WRITE at {offset}: {other:?}"),
        }
    }

    /// WRITEs of `chunk` bytes of [`pattern`] at the given chunk indices, all sent before any
    /// reply is read; every reply must be an UNSTABLE success.
    pub async fn write_pipelined(&mut self, fh: &NfsFh3, indices: &[u64], chunk: u64) {
        for &i in indices {
            let data = Bytes::from(pattern_range(i * chunk, chunk as usize));
            let args = Self::write_args(fh, i * chunk, data, StableHow::UNSTABLE);
            self.send_nfs(&args).await;
        }
        for _ in indices {
            match self.recv_nfs().await {
                (_, Res3::Write(NfsResult::Ok(ok))) => {
                    assert_eq!(ok.committed, StableHow::UNSTABLE);
                    assert_eq!(u64::from(ok.count), chunk);
                }
                (_, other) => panic!("WRITE: {other:?}"),
            }
        }
    }

    pub async fn commit(&mut self, fh: &NfsFh3, offset: u64, count: u32) -> CommitRes {
        match self
            .nfs(Args3::Commit(CommitArgs {
                file: fh.clone(),
                offset,
                count,
            }))
            .await
        {
            Res3::Commit(r) => r,
            other => panic!("COMMIT: {other:?}"),
        }
    }

    pub async fn read(&mut self, fh: &NfsFh3, offset: u64, count: u32) -> ReadResOk {
        match self
            .nfs(Args3::Read(ReadArgs {
                file: fh.clone(),
                offset,
                count,
            }))
            .await
        {
            Res3::Read(NfsResult::Ok(ok)) => ok,
            other => panic!("READ at {offset}: {other:?}"),
        }
    }

    pub async fn getattr(&mut self, fh: &NfsFh3) -> Fattr3 {
        match self
            .nfs(Args3::Getattr(GetattrArgs { object: fh.clone() }))
            .await
        {
            Res3::Getattr(NfsResult::Ok(ok)) => ok.obj_attributes,
            other => panic!("GETATTR: {other:?}"),
        }
    }
}

pub fn dirop(dir: &NfsFh3, name: &str) -> DirOpArgs3 {
    DirOpArgs3 {
        dir: dir.clone(),
        name: Bytes::copy_from_slice(name.as_bytes()),
    }
}

/// `segs` without their first `n` bytes.
fn skip(segs: Vec<Bytes>, mut n: usize) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(segs.len());
    for mut s in segs {
        if n >= s.len() {
            n -= s.len();
            continue;
        }
        let _ = s.split_to(n);
        n = 0;
        out.push(s);
    }
    out
}
