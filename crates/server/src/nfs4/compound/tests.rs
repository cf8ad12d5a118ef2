//! Encoded COMPOUNDs through the processor over in-memory exports, by role as the code is
//! (`eval`, `fh`, `open`, `namespace`, `io`); the fixture they share is here: a [`Client`]
//! that drives the one driver loop with the `Inline` executor, and op builders.

use super::eval::encoded_len;
use super::*;
use crate::backend::exports::{ClientMatch, ClientRule, Squash};
use crate::backend::memfs::MemFsConfig;
use crate::backend::{Caller, CreateHow, FileHandle, StableHow};
use crate::backend::{Cred, Export, ExportOptions, MemFs, SetAttr};
use crate::datapath::ReadData;
use crate::exports::ExportEntry;
use crate::nfs4::data::DataOps;
use crate::nfs4::data::{DataDone, DataOp, DataReq};
use crate::nfs4::map::{self};
use crate::testkit::{Session4, SessionConfig};
use bytes::Bytes;
use core::net::SocketAddr;
use sluice_nfs4state::pseudo::PseudoFs;
use sluice_nfs4state::pseudo::PSEUDO_FSID;
use sluice_nfs4state::State4;
use sluice_nfs4state::{Config4, ConnId, SplitMix};
use sluice_rpc::server::Credentials;
use sluice_xdr::nfs4::attrs::{num, AttrValues};
use sluice_xdr::nfs4::compound::{Compound4Args, Compound4Res, CompoundLimits};
use sluice_xdr::nfs4::ops::{
    op_info, CloseArgs, Createhow4, NfsArgop4, NfsResop4, OpenArgs, OpenClaim4, Openflag4, Opnum4,
    ReaddirResOk, Res4, Secinfo4, OPEN4_SHARE_ACCESS_READ,
};
use sluice_xdr::nfs4::ops::{
    AccessArgs, CallbackSecParmsList, ReaddirArgs, SetattrArgs, StateidList, ACCESS4_LOOKUP,
    ACCESS4_MODIFY, ACCESS4_READ, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_DENY_NONE,
    OPEN4_SHARE_DENY_WRITE,
};
use sluice_xdr::nfs4::ops::{CommitArgs, ReadArgs, SequenceArgs, WriteArgs};
use sluice_xdr::nfs4::ops::{CreateArgs, Createtype4, RenameArgs};
use sluice_xdr::nfs4::ops::{ReadResOk, WriteResOk};
use sluice_xdr::nfs4::Linktext4;
use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::StableHow4;
use sluice_xdr::nfs4::{Bitmap4, Component4, Fattr4, Fsid4, Ftype4, Opaque4, StateOwner4, Utf8Str};
use sluice_xdr::nfs4::{NfsFh4, SessionId4, Stateid4};
use sluice_xdr::rpc::AuthSys;
use sluice_xdr::{Pack, Reader, Writer};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const EXPORT_FSID: u64 = 7;
const PRIVATE_FSID: u64 = 8;

fn export(path: &str, client: ClientMatch, fsid: u64) -> ExportEntry {
    ExportEntry {
        fs: Arc::new(MemFs::new(MemFsConfig {
            fsid,
            ..MemFsConfig::default()
        })),
        export: Export {
            path: PathBuf::from(path),
            clients: vec![ClientRule {
                client,
                options: ExportOptions {
                    read_only: false,
                    squash: Squash::None,
                    ..ExportOptions::default()
                },
            }],
        },
    }
}

/// `/srv/export` for anyone, `/srv/private` for 10.9.9.9 alone.
fn server() -> Nfs4 {
    let exports = vec![
        export("/srv/export", ClientMatch::Any, EXPORT_FSID),
        export(
            "/srv/private",
            ClientMatch::Host(IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9))),
            PRIVATE_FSID,
        ),
    ];
    let state = State4::new(
        Config4 {
            boot_epoch: 3,
            ..Config4::default()
        },
        Box::new(SplitMix(11)),
    );
    Nfs4::new(Arc::new(exports), state, 1).unwrap()
}

fn cred() -> Credentials {
    Credentials::Sys(AuthSys {
        stamp: 1,
        machine_name: Bytes::from_static(b"client"),
        uid: 1000,
        gid: 1000,
        gids: Vec::new(),
    })
}

struct Client {
    nfs: Arc<Nfs4>,
    cred: Credentials,
    now: Instant,
    /// From 127.0.0.1 on a privileged port (the exports are `secure` by default).
    addr: SocketAddr,
    /// The connection's transport security (plain TCP unless a test says otherwise).
    xprtsec: crate::backend::exports::Xprtsec,
    /// The data path READ, WRITE and COMMIT go through ([`Client::with_data`]).
    data: Option<Box<dyn DataOps>>,
    /// The runtime the data path's futures run on.
    _rt: Option<tokio::runtime::Runtime>,
}

impl Client {
    fn new() -> Self {
        Client {
            nfs: Arc::new(server()),
            cred: cred(),
            now: Instant::now(),
            addr: "127.0.0.1:700".parse().unwrap(),
            xprtsec: crate::backend::exports::Xprtsec::None,
            data: None,
            _rt: None,
        }
    }

    /// A client whose server runs READ, WRITE and COMMIT through the server's data path
    /// (write-behind on, as `serve` runs it).
    fn with_data() -> Self {
        use crate::io::{Engine, IoConfig};
        use crate::splice::PipePool;
        use crate::stats::Stats;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let stats = Arc::new(Stats::default());
        let io = {
            let _in = rt.enter();
            Engine::new(IoConfig::default(), 1 << 20, stats.clone())
        };
        let mut nfs = server();
        nfs.write_behind = Some(io.wb.clone());
        let data = crate::nfs4::data::PoolData {
            handle: rt.handle().clone(),
            io,
            pipes: PipePool::new(1, 1 << 20, stats.clone()),
            stats,
        };
        Client {
            nfs: Arc::new(nfs),
            data: Some(Box::new(data)),
            _rt: Some(rt),
            ..Client::new()
        }
    }

    fn send_raw(&self, minorversion: u32, ops: Vec<NfsArgop4>) -> Bytes {
        let args = Compound4Args {
            tag: Utf8Str(Bytes::from_static(b"t1")),
            minorversion,
            ops,
        };
        let mut w = Writer::new();
        args.pack(&mut w);
        match self.compound(1, &w.into_bytes()) {
            Outcome::Reply(b) => b,
            Outcome::GarbageArgs => panic!("GARBAGE_ARGS"),
        }
    }

    /// `record` from connection `conn`, through the one driver loop with data ops on this
    /// client's data path (NFS4ERR_NOTSUPP without one).
    fn compound(&self, conn: ConnId, record: &[u8]) -> Outcome {
        let from = Sender {
            addr: self.addr,
            conn,
            xprtsec: self.xprtsec,
            cred: self.cred.clone(),
        };
        let exec = Inline {
            now: self.now,
            data: self.data.as_deref(),
        };
        drive_ready(&self.nfs, &exec, &from, record)
    }

    /// The service, before anything shares it (a test changing its settings).
    fn nfs_mut(&mut self) -> &mut Nfs4 {
        Arc::get_mut(&mut self.nfs).expect("the service is not shared yet")
    }

    fn send(&self, ops: Vec<NfsArgop4>) -> Compound4Res {
        decode(&self.send_raw(1, ops))
    }
}

fn decode(b: &Bytes) -> Compound4Res {
    let segs = [b.clone()];
    let mut r = Reader::new(&segs);
    let res = Compound4Res::decode(&mut r, &CompoundLimits::default()).unwrap();
    assert_eq!(res.tag, Utf8Str(Bytes::from_static(b"t1")), "tag echoed");
    res
}

/// EXCHANGE_ID, CREATE_SESSION, RECLAIM_COMPLETE (the shared test client, 4 slots, slot 0
/// untouched: `crate::testkit`): the session id.
fn mount(c: &Client) -> SessionId4 {
    Session4::establish(&SessionConfig::new(b"linux client", 4), |ops| c.send(ops)).sessionid
}

/// [`mount`] without RECLAIM_COMPLETE: what the test sends is all the client sent.
fn mount_reclaiming(c: &Client) -> SessionId4 {
    let cfg = SessionConfig {
        reclaim_complete: false,
        ..SessionConfig::new(b"linux client", 4)
    };
    Session4::establish(&cfg, |ops| c.send(ops)).sessionid
}

fn seq(sessionid: SessionId4, sequenceid: u32) -> NfsArgop4 {
    NfsArgop4::Sequence(SequenceArgs {
        sessionid,
        sequenceid,
        slotid: 0,
        highest_slotid: 0,
        cachethis: true,
    })
}

fn lookup(name: &'static [u8]) -> NfsArgop4 {
    NfsArgop4::Lookup(Component4(Bytes::from_static(name)))
}

fn getattr(bits: &[u32]) -> NfsArgop4 {
    NfsArgop4::Getattr(Bitmap4::from_bits(bits))
}

fn attrs(r: &NfsResop4) -> AttrValues {
    match r {
        NfsResop4::Getattr(Res4::Ok(f)) => AttrValues::decode(f).unwrap().values,
        other => panic!("not a GETATTR result: {other:?}"),
    }
}

fn fh_of(r: &NfsResop4) -> NfsFh4 {
    match r {
        NfsResop4::Getfh(Res4::Ok(fh)) => fh.clone(),
        other => panic!("not a GETFH result: {other:?}"),
    }
}

fn statuses(res: &Compound4Res) -> Vec<Nfsstat4> {
    res.results.iter().map(|r| r.status()).collect()
}

fn readdir(cookie: u64, maxcount: u32, bits: &[u32]) -> NfsArgop4 {
    NfsArgop4::Readdir(ReaddirArgs {
        cookie,
        cookieverf: [0; 8],
        dircount: maxcount,
        maxcount,
        attr_request: Bitmap4::from_bits(bits),
    })
}

fn listing(r: &NfsResop4) -> &ReaddirResOk {
    match r {
        NfsResop4::Readdir(Res4::Ok(ok)) => ok,
        other => panic!("not a READDIR result: {other:?}"),
    }
}

fn names(ok: &ReaddirResOk) -> Vec<&[u8]> {
    ok.entries.iter().map(|e| &e.name.0[..]).collect()
}

fn open(
    owner: &'static [u8],
    name: &'static [u8],
    how: Option<Createhow4>,
    access: u32,
    deny: u32,
) -> NfsArgop4 {
    NfsArgop4::Open(OpenArgs {
        seqid: 0,
        share_access: access,
        share_deny: deny,
        owner: StateOwner4 {
            clientid: 0,
            owner: Opaque4(Bytes::from_static(owner)),
        },
        openhow: match how {
            Some(h) => Openflag4::Create(h),
            None => Openflag4::NoCreate,
        },
        claim: OpenClaim4::Null(Component4(Bytes::from_static(name))),
    })
}

fn mode_attrs(mode: u32) -> Fattr4 {
    AttrValues {
        mode: Some(mode),
        ..AttrValues::default()
    }
    .encode()
}

fn into_export() -> Vec<NfsArgop4> {
    vec![NfsArgop4::Putrootfh(()), lookup(b"srv"), lookup(b"export")]
}

/// The bytes of `name` in the first export, as the file system has them.
fn contents(c: &Client, name: &[u8]) -> Vec<u8> {
    let fs = c.nfs.exports[0].fs.clone();
    let caller = Caller::with_cred(Cred::new(1000, 1000));
    let fh = fs.lookup(&caller, &fs.root_handle(), name).unwrap().fh;
    let mut buf = vec![0u8; 64];
    let ok = fs.read(&caller, &fh, 0, &mut [&mut buf[..]]).unwrap();
    buf.truncate(ok.count);
    buf
}

/// Whether write-behind holds writes for the file behind GETFH result `r`.
fn held(c: &Client, r: &NfsResop4) -> bool {
    let wb = c.nfs.write_behind.as_ref().expect("write-behind");
    wb.holds(&fh_of(r).0)
}

fn write_op(stateid: Stateid4, offset: u64, stable: StableHow4, data: &'static [u8]) -> NfsArgop4 {
    NfsArgop4::Write(WriteArgs {
        stateid,
        offset,
        stable,
        data: sluice_xdr::Payload::from_chunks(vec![Bytes::from_static(data)]),
    })
}

fn read_op(stateid: Stateid4, offset: u64, count: u32) -> NfsArgop4 {
    NfsArgop4::Read(ReadArgs {
        stateid,
        offset,
        count,
    })
}

// ----- the evaluation as a state machine, without a runtime ------------------------------------

/// READ, WRITE and COMMIT straight on the file system, on the caller's thread: no runtime and
/// no write-behind. Counts the WRITEs that reach the file system.
#[derive(Default)]
struct DirectData {
    writes: Arc<std::sync::atomic::AtomicUsize>,
}

impl DataOps for DirectData {
    fn run(&self, req: DataReq) -> Result<DataDone, crate::backend::FsError> {
        use crate::datapath::{CommitDone, ReadDone, WriteDone};
        let DataReq { fs, caller, fh, op } = req;
        match op {
            DataOp::Read { offset, count, .. } => {
                let mut buf = vec![0u8; count as usize];
                let ok = fs
                    .read(&caller, &fh, offset, &mut [&mut buf[..]])
                    .map_err(|(e, _)| e)?;
                buf.truncate(ok.count);
                Ok(DataDone::Read(ReadDone {
                    count: ok.count as u32,
                    eof: ok.eof,
                    attr: Some(ok.attr),
                    data: ReadData::Chunks(sluice_xdr::Payload::from(buf)),
                }))
            }
            DataOp::Write {
                offset,
                data,
                stable,
            } => {
                self.writes
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let ok = fs
                    .write(&caller, &fh, offset, &data, stable)
                    .map_err(|(e, _)| e)?;
                Ok(DataDone::Write(WriteDone {
                    count: ok.count as u32,
                    committed: ok.committed,
                    wcc: ok.wcc,
                    verifier: fs.write_verifier(),
                }))
            }
            // One data segment, as READ reads it (holes are the data path's business).
            DataOp::ReadPlus { offset, count, .. } => {
                let mut buf = vec![0u8; count as usize];
                let ok = fs
                    .read(&caller, &fh, offset, &mut [&mut buf[..]])
                    .map_err(|(e, _)| e)?;
                buf.truncate(ok.count);
                Ok(DataDone::ReadPlus(
                    super::super::data::ReadPlusDone::Dense {
                        offset,
                        done: ReadDone {
                            count: ok.count as u32,
                            eof: ok.eof,
                            attr: Some(ok.attr),
                            data: ReadData::Chunks(sluice_xdr::Payload::from(buf)),
                        },
                    },
                ))
            }
            DataOp::Commit { offset, count } => {
                let wcc = fs.commit(&caller, &fh, offset, count).map_err(|(e, _)| e)?;
                Ok(DataDone::Commit(CommitDone {
                    wcc,
                    verifier: fs.write_verifier(),
                }))
            }
        }
    }
}

/// A client whose data ops run on [`DirectData`]; the counter of its WRITEs.
fn direct_client() -> (Client, Arc<std::sync::atomic::AtomicUsize>) {
    let data = DirectData::default();
    let writes = data.writes.clone();
    let c = Client {
        data: Some(Box::new(data)),
        ..Client::new()
    };
    (c, writes)
}

fn seq_uncached(sessionid: SessionId4, sequenceid: u32) -> NfsArgop4 {
    NfsArgop4::Sequence(SequenceArgs {
        sessionid,
        sequenceid,
        slotid: 0,
        highest_slotid: 0,
        cachethis: false,
    })
}

fn record_of(ops: Vec<NfsArgop4>) -> Bytes {
    let mut w = Writer::new();
    Compound4Args {
        tag: Utf8Str(Bytes::from_static(b"t1")),
        minorversion: 1,
        ops,
    }
    .pack(&mut w);
    w.into_bytes()
}

/// Drives an evaluation of `ops` step by step as the service does (a driver that can splice
/// when `splice_ok`), data ops on [`DirectData`]: the reply and, for each READ the evaluation
/// suspended on, whether it allowed splicing.
fn drive(c: &Client, ops: Vec<NfsArgop4>, splice_ok: bool) -> (Compound4Res, Vec<bool>) {
    let segs = [record_of(ops)];
    let call = Call {
        addr: c.addr,
        conn: 1,
        xprtsec: c.xprtsec,
        cred: &c.cred,
        now: c.now,
    };
    let data = DirectData::default();
    let mut eval = c.nfs.begin(&segs, 0, splice_ok);
    let mut reads = Vec::new();
    loop {
        match eval.step(&c.nfs, &call) {
            Step::Data(req) => {
                if let DataOp::Read { splice_ok, .. } = req.op {
                    reads.push(splice_ok);
                }
                eval.resume(data.run(req).map_err(map::status));
            }
            Step::Settle(s) => eval.settled(data.settle(s, Duration::ZERO)),
            Step::Reply(r) => {
                assert!(r.spliced.is_none(), "DirectData never splices");
                let res = decode(&join(r.segs));
                assert_eq!(res.status, r.status, "the status told is the encoded one");
                return (res, reads);
            }
            Step::GarbageArgs => panic!("GARBAGE_ARGS"),
        }
    }
}

fn write_result(r: &NfsResop4) -> &WriteResOk {
    match r {
        NfsResop4::Write(Res4::Ok(w)) => w,
        other => panic!("{other:?}"),
    }
}

fn read_result(r: &NfsResop4) -> &ReadResOk {
    match r {
        NfsResop4::Read(Res4::Ok(ok)) => ok,
        other => panic!("{other:?}"),
    }
}

mod eval;
mod fh;
mod io;
mod locks;
mod namespace;
mod open;
