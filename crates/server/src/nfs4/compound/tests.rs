//! Encoded COMPOUNDs through the processor over in-memory exports.

use super::*;
use crate::backend::exports::{ClientMatch, ClientRule, Squash};
use crate::backend::memfs::MemFsConfig;
use crate::backend::{Cred, Export, ExportOptions, MemFs, SetAttr};
use crate::nfs4::data::DataOps;
use crate::nfs4::pseudo::PSEUDO_FSID;
use crate::nfs4::{Config4, SplitMix};
use sluice_xdr::nfs4::attrs::{num, AttrValues};
use sluice_xdr::nfs4::ops::{
    AccessArgs, CallbackSecParmsList, ChannelAttrs4, ClientOwner4, CreateSessionArgs,
    ExchangeIdArgs, ImplIdList, RdmaIrd, ReaddirArgs, SetattrArgs, StateProtect4A, StateidList,
    ACCESS4_LOOKUP, ACCESS4_MODIFY, ACCESS4_READ, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_DENY_NONE,
    OPEN4_SHARE_DENY_WRITE,
};
use sluice_xdr::nfs4::ops::{CommitArgs, ReadArgs, SequenceArgs, WriteArgs};
use sluice_xdr::nfs4::ops::{CreateArgs, Createtype4, RenameArgs};
use sluice_xdr::nfs4::Linktext4;
use sluice_xdr::nfs4::{Bitmap4, Component4, Fattr4, Fsid4, Ftype4, Opaque4, StateOwner4, Utf8Str};
use sluice_xdr::rpc::AuthSys;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

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

fn chan() -> ChannelAttrs4 {
    ChannelAttrs4 {
        headerpadsize: 0,
        maxrequestsize: 1 << 20,
        maxresponsesize: 1 << 20,
        maxresponsesize_cached: 4096,
        maxoperations: 16,
        maxrequests: 4,
        rdma_ird: RdmaIrd(Vec::new()),
    }
}

/// EXCHANGE_ID, CREATE_SESSION: the session id.
fn mount(c: &Client) -> SessionId4 {
    let res = c.send(vec![NfsArgop4::ExchangeId(ExchangeIdArgs {
        clientowner: ClientOwner4 {
            verifier: [1; 8],
            ownerid: Opaque4(Bytes::from_static(b"linux client")),
        },
        flags: 0,
        state_protect: StateProtect4A::None,
        client_impl_id: ImplIdList(Vec::new()),
    })]);
    assert_eq!(res.status, Nfsstat4::OK);
    let Some(NfsResop4::ExchangeId(Res4::Ok(e))) = res.results.first() else {
        panic!("{res:?}")
    };
    let res = c.send(vec![NfsArgop4::CreateSession(CreateSessionArgs {
        clientid: e.clientid,
        sequence: e.sequenceid,
        flags: 0,
        fore_chan_attrs: chan(),
        back_chan_attrs: chan(),
        cb_program: 0x4000_0000,
        sec_parms: CallbackSecParmsList(Vec::new()),
    })]);
    assert_eq!(res.status, Nfsstat4::OK);
    let Some(NfsResop4::CreateSession(Res4::Ok(s))) = res.results.first() else {
        panic!("{res:?}")
    };
    s.sessionid
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

#[test]
fn session_setup_then_sequence_runs_the_ops() {
    let c = Client::new();
    let sid = mount(&c);
    let res = c.send(vec![
        seq(sid, 1),
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Getfh(()),
    ]);
    assert_eq!(res.status, Nfsstat4::OK);
    assert_eq!(statuses(&res), vec![Nfsstat4::OK; 3]);
    let Some(NfsResop4::Sequence(Res4::Ok(s))) = res.results.first() else {
        panic!("{res:?}")
    };
    assert_eq!((s.sessionid, s.sequenceid, s.slotid), (sid, 1, 0));
    assert!(PseudoFs::is_pseudo_handle(&fh_of(&res.results[2]).0));
}

#[test]
fn a_replayed_sequence_returns_the_cached_reply_bytes() {
    let c = Client::new();
    let sid = mount(&c);
    let ops = || {
        vec![
            seq(sid, 1),
            NfsArgop4::Putrootfh(()),
            lookup(b"srv"),
            NfsArgop4::Getfh(()),
        ]
    };
    let first = c.send_raw(1, ops());
    assert_eq!(decode(&first).status, Nfsstat4::OK);
    let again = c.send_raw(1, ops());
    assert_eq!(again, first, "a retry gets the cached bytes");
    // A different request on the same sequence id is a false retry, not someone's reply.
    let other = c.send(vec![seq(sid, 1), NfsArgop4::Putrootfh(())]);
    assert_eq!(other.status, Nfsstat4::SEQ_FALSE_RETRY);
    assert_eq!(other.results.len(), 1);
    // A sequence id out of order is misordered; the next one runs.
    assert_eq!(c.send(vec![seq(sid, 3)]).status, Nfsstat4::SEQ_MISORDERED);
    assert_eq!(c.send(vec![seq(sid, 2)]).status, Nfsstat4::OK);
}

#[test]
fn op_position_and_op_number_errors() {
    let c = Client::new();
    // Without SEQUENCE only the session-less ops may come first.
    let res = c.send(vec![NfsArgop4::Putrootfh(()), NfsArgop4::Getfh(())]);
    assert_eq!(res.status, Nfsstat4::OP_NOT_IN_SESSION);
    assert_eq!(statuses(&res), vec![Nfsstat4::OP_NOT_IN_SESSION]);
    // ...and then alone.
    let res = c.send(vec![
        NfsArgop4::DestroyClientid(5),
        NfsArgop4::Putrootfh(()),
    ]);
    assert_eq!(res.status, Nfsstat4::NOT_ONLY_OP);
    let sid = mount(&c);
    // SEQUENCE anywhere but first.
    let res = c.send(vec![
        seq(sid, 1),
        NfsArgop4::Putrootfh(()),
        seq(sid, 2),
        NfsArgop4::Getfh(()),
    ]);
    assert_eq!(res.status, Nfsstat4::SEQUENCE_POS);
    assert_eq!(
        statuses(&res),
        vec![Nfsstat4::OK, Nfsstat4::OK, Nfsstat4::SEQUENCE_POS]
    );
    // An undefined op number: OP_ILLEGAL, answered as op ILLEGAL.
    let res = c.send(vec![seq(sid, 2), NfsArgop4::Illegal(9999)]);
    assert_eq!(res.status, Nfsstat4::OP_ILLEGAL);
    assert_eq!(res.results[1].opnum(), Opnum4::ILLEGAL);
    // A 4.0-only op, and one that is simply not written yet: NOTSUPP.
    let res = c.send(vec![seq(sid, 3), NfsArgop4::Renew(1)]);
    assert_eq!(res.status, Nfsstat4::NOTSUPP);
    let res = c.send(vec![
        seq(sid, 4),
        NfsArgop4::Putrootfh(()),
        // A data op's checks come before the data path: the pseudo root is a directory.
        NfsArgop4::Commit(sluice_xdr::nfs4::ops::CommitArgs {
            offset: 0,
            count: 0,
        }),
    ]);
    assert_eq!(res.status, Nfsstat4::ISDIR);
    assert_eq!(res.results.len(), 3);
    // No current handle.
    let res = c.send(vec![seq(sid, 5), NfsArgop4::Getfh(())]);
    assert_eq!(res.status, Nfsstat4::NOFILEHANDLE);
    // BIND_CONN_TO_SESSION after SEQUENCE: it must be alone.
    let res = c.send(vec![
        seq(sid, 6),
        NfsArgop4::BindConnToSession(sluice_xdr::nfs4::ops::BindConnToSessionArgs {
            sessid: sid,
            dir: 3,
            use_conn_in_rdma_mode: false,
        }),
    ]);
    assert_eq!(res.status, Nfsstat4::NOT_ONLY_OP);
    // RESTOREFH with nothing saved.
    let res = c.send(vec![seq(sid, 7), NfsArgop4::Restorefh(())]);
    assert_eq!(res.status, Nfsstat4::RESTOREFH);
}

#[test]
fn minor_versions_other_than_1_and_2_are_mismatched_with_no_results() {
    let c = Client::new();
    for minor in [0, 3, 7] {
        let res = decode(&c.send_raw(minor, vec![NfsArgop4::Putrootfh(())]));
        assert_eq!(res.status, Nfsstat4::MINOR_VERS_MISMATCH, "minor {minor}");
        assert!(res.results.is_empty());
    }
}

#[test]
fn not_a_compound_is_garbage_args() {
    let c = Client::new();
    assert_eq!(c.compound(1, &[0, 0]), Outcome::GarbageArgs);
}

#[test]
fn lookup_crosses_into_an_export_where_the_fsid_changes_and_lookupp_comes_back() {
    let c = Client::new();
    let sid = mount(&c);
    let fs = c.nfs.exports[0].fs.clone();
    let sub = fs
        .mkdir(
            &Caller::with_cred(Cred::new(1000, 1000)),
            &fs.root_handle(),
            b"sub",
            &SetAttr {
                mode: Some(0o755),
                ..SetAttr::default()
            },
        )
        .unwrap();
    let bits = [num::TYPE, num::FSID, num::FILEID, num::MOUNTED_ON_FILEID];
    let res = c.send(vec![
        seq(sid, 1),
        NfsArgop4::Putrootfh(()),
        lookup(b"srv"),
        getattr(&bits),
        lookup(b"export"),
        getattr(&bits),
        NfsArgop4::Getfh(()),
        lookup(b"sub"),
        NfsArgop4::Getfh(()),
        NfsArgop4::Lookupp(()),
        NfsArgop4::Getfh(()),
        NfsArgop4::Lookupp(()),
        getattr(&bits),
        NfsArgop4::Getfh(()),
    ]);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let srv = attrs(&res.results[3]);
    assert_eq!(srv.fsid, Some(PSEUDO_FSID));
    assert_eq!(srv.ftype, Some(Ftype4::DIR));
    let root = attrs(&res.results[5]);
    assert_eq!(
        root.fsid,
        Some(Fsid4 {
            major: EXPORT_FSID,
            minor: 0
        })
    );
    assert_ne!(
        root.fsid, srv.fsid,
        "crossing into an export changes the fsid"
    );
    // The export root sits on a pseudo directory: its mounted_on_fileid is that node's.
    assert_ne!(root.mounted_on_fileid, root.fileid);
    assert_eq!(fh_of(&res.results[6]).0, fs.root_handle().to_bytes());
    assert_eq!(fh_of(&res.results[8]).0, sub.fh.to_bytes());
    // LOOKUPP from "sub" is the export root; from the export root it is /srv again.
    assert_eq!(fh_of(&res.results[10]).0, fs.root_handle().to_bytes());
    assert_eq!(attrs(&res.results[12]), srv);
    assert!(PseudoFs::is_pseudo_handle(&fh_of(&res.results[13]).0));
    // A handle from GETFH works with PUTFH in a later COMPOUND.
    let res2 = c.send(vec![
        seq(sid, 2),
        NfsArgop4::Putfh(fh_of(&res.results[8])),
        getattr(&[num::TYPE, num::FSID]),
        NfsArgop4::Putfh(fh_of(&res.results[13])),
        getattr(&[num::FSID]),
    ]);
    assert_eq!(res2.status, Nfsstat4::OK);
    assert_eq!(attrs(&res2.results[2]).ftype, Some(Ftype4::DIR));
    assert_eq!(attrs(&res2.results[4]).fsid, Some(PSEUDO_FSID));
}

#[test]
fn lookup_errors_in_the_pseudo_tree() {
    let c = Client::new();
    let sid = mount(&c);
    let res = c.send(vec![seq(sid, 1), NfsArgop4::Putrootfh(()), lookup(b"nope")]);
    assert_eq!(res.status, Nfsstat4::NOENT);
    let res = c.send(vec![seq(sid, 2), NfsArgop4::Putrootfh(()), lookup(b"..")]);
    assert_eq!(res.status, Nfsstat4::BADNAME);
    let res = c.send(vec![seq(sid, 3), NfsArgop4::Putrootfh(()), lookup(b"")]);
    assert_eq!(res.status, Nfsstat4::INVAL);
    let res = c.send(vec![
        seq(sid, 4),
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Lookupp(()),
    ]);
    assert_eq!(res.status, Nfsstat4::NOENT);
    // A pseudo handle from another tree is stale; garbage is a bad handle.
    let mut stale = c.nfs.pseudo.handle(0);
    stale[1] ^= 0xff;
    let res = c.send(vec![
        seq(sid, 5),
        NfsArgop4::Putfh(NfsFh4(Bytes::copy_from_slice(&stale))),
    ]);
    assert_eq!(res.status, Nfsstat4::STALE);
    let res = c.send(vec![
        seq(sid, 6),
        NfsArgop4::Putfh(NfsFh4(Bytes::from_static(b"\x09junk"))),
    ]);
    assert_eq!(res.status, Nfsstat4::BADHANDLE);
}

#[test]
fn an_export_the_client_may_not_use_is_access_denied() {
    let c = Client::new();
    let sid = mount(&c);
    let res = c.send(vec![
        seq(sid, 1),
        NfsArgop4::Putrootfh(()),
        lookup(b"srv"),
        lookup(b"private"),
    ]);
    assert_eq!(res.status, Nfsstat4::ACCESS);
    assert_eq!(res.results.len(), 4);
    // A guessed handle of its root is refused too, at first use.
    let root = c.nfs.exports[1].fs.root_handle();
    let res = c.send(vec![
        seq(sid, 2),
        NfsArgop4::Putfh(NfsFh4(root.to_bytes())),
        getattr(&[num::TYPE]),
    ]);
    assert_eq!(res.status, Nfsstat4::ACCESS);
    // From an unprivileged port even the open export is refused (`secure`), as knfsd does.
    let mut c2 = Client::new();
    c2.addr = "127.0.0.1:40000".parse().unwrap();
    let sid2 = mount(&c2);
    let res = c2.send(vec![
        seq(sid2, 1),
        NfsArgop4::Putrootfh(()),
        lookup(b"srv"),
        lookup(b"export"),
    ]);
    assert_eq!(res.status, Nfsstat4::PERM);
}

#[test]
fn access_and_secinfo_no_name() {
    let c = Client::new();
    let sid = mount(&c);
    let asked = ACCESS4_READ | ACCESS4_LOOKUP | ACCESS4_MODIFY;
    let res = c.send(vec![
        seq(sid, 1),
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Access(AccessArgs { access: asked }),
        lookup(b"srv"),
        lookup(b"export"),
        NfsArgop4::Access(AccessArgs { access: asked }),
        NfsArgop4::SecinfoNoName(0),
        NfsArgop4::Getfh(()),
    ]);
    let NfsResop4::Access(Res4::Ok(pseudo)) = &res.results[2] else {
        panic!("{res:?}")
    };
    // The pseudo tree is read-only.
    assert_eq!(pseudo.supported, asked);
    assert_eq!(pseudo.access, ACCESS4_READ | ACCESS4_LOOKUP);
    // The MemFs root is 0777: everything asked is granted.
    let NfsResop4::Access(Res4::Ok(root)) = &res.results[5] else {
        panic!("{res:?}")
    };
    assert_eq!(root.access, asked);
    let NfsResop4::SecinfoNoName(Res4::Ok(list)) = &res.results[6] else {
        panic!("{res:?}")
    };
    assert_eq!(list.0, vec![Secinfo4::Flavor(1), Secinfo4::Flavor(0)]);
    // SECINFO_NO_NAME consumed the current handle.
    assert_eq!(res.status, Nfsstat4::NOFILEHANDLE);
    assert_eq!(res.results.len(), 8);
}

#[test]
fn a_reply_over_the_cached_size_is_rep_too_big_to_cache() {
    let c = Client::new();
    let sid = mount(&c);
    // 4096 bytes may be cached: enough GETATTRs of everything cross that.
    let all = crate::nfs4::map::SUPPORTED
        .iter()
        .copied()
        .filter(|b| !crate::nfs4::map::WRITE_ONLY.contains(b))
        .collect::<Vec<_>>();
    let mut ops = vec![seq(sid, 1), NfsArgop4::Putrootfh(())];
    ops.extend((0..12).map(|_| getattr(&all)));
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::REP_TOO_BIG_TO_CACHE);
    let last = res.results.last().unwrap();
    assert_eq!(last.opnum(), Opnum4::GETATTR);
    // The slot is free again: the next request runs.
    assert_eq!(c.send(vec![seq(sid, 2)]).status, Nfsstat4::OK);
}

#[test]
fn destroy_session_and_clientid() {
    let c = Client::new();
    let sid = mount(&c);
    let res = c.send(vec![seq(sid, 1), NfsArgop4::ReclaimComplete(false)]);
    assert_eq!(res.status, Nfsstat4::OK);
    // Alone, BIND_CONN_TO_SESSION binds and answers the direction granted.
    let res = c.send(vec![NfsArgop4::BindConnToSession(
        sluice_xdr::nfs4::ops::BindConnToSessionArgs {
            sessid: sid,
            dir: 3,
            use_conn_in_rdma_mode: false,
        },
    )]);
    let Some(NfsResop4::BindConnToSession(Res4::Ok(b))) = res.results.first() else {
        panic!("{res:?}")
    };
    assert_eq!(b.sessid, sid);
    let res = c.send(vec![NfsArgop4::DestroySession(sid)]);
    assert_eq!(res.status, Nfsstat4::OK);
    assert_eq!(c.send(vec![seq(sid, 2)]).status, Nfsstat4::BADSESSION);
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

#[test]
fn readdir_of_the_pseudo_tree_shows_the_exports_the_client_may_use() {
    let c = Client::new();
    let sid = mount(&c);
    let bits = [num::TYPE, num::FSID, num::MOUNTED_ON_FILEID];
    let res = c.send(vec![
        seq(sid, 1),
        NfsArgop4::Putrootfh(()),
        readdir(0, 4096, &bits),
        lookup(b"srv"),
        readdir(0, 4096, &bits),
        getattr(&[num::FILEID]),
    ]);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let root = listing(&res.results[2]);
    assert_eq!(names(root), vec![&b"srv"[..]]);
    assert!(root.eof);
    assert!(root.entries.iter().all(|e| e.cookie >= 3));
    let srv = listing(&res.results[4]);
    // /srv/private is for 10.9.9.9 only: not listed for 127.0.0.1.
    assert_eq!(names(srv), vec![&b"export"[..]]);
    let v = AttrValues::decode(&srv.entries[0].attrs).unwrap().values;
    assert_eq!(
        v.fsid,
        Some(Fsid4 {
            major: EXPORT_FSID,
            minor: 0
        })
    );
    assert!(v.mounted_on_fileid.is_some());
    // Cookies 1 and 2 are reserved; write-only attributes cannot be read.
    let res = c.send(vec![
        seq(sid, 2),
        NfsArgop4::Putrootfh(()),
        readdir(1, 4096, &[]),
    ]);
    assert_eq!(res.status, Nfsstat4::BAD_COOKIE);
    let res = c.send(vec![
        seq(sid, 3),
        NfsArgop4::Putrootfh(()),
        readdir(0, 4096, &[num::TIME_MODIFY_SET]),
    ]);
    assert_eq!(res.status, Nfsstat4::INVAL);
}

#[test]
fn readdir_of_an_export_pages_by_maxcount_without_dot_entries() {
    let c = Client::new();
    let sid = mount(&c);
    let fs = c.nfs.exports[0].fs.clone();
    let caller = Caller::with_cred(Cred::new(1000, 1000));
    for name in [&b"a"[..], b"b", b"c"] {
        fs.mkdir(&caller, &fs.root_handle(), name, &SetAttr::default())
            .unwrap();
    }
    let bits = [num::TYPE, num::FILEID];
    let into_export = || vec![NfsArgop4::Putrootfh(()), lookup(b"srv"), lookup(b"export")];
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.push(readdir(0, 4096, &bits));
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let all = listing(&res.results[4]);
    assert_eq!(names(all), vec![&b"a"[..], b"b", b"c"]);
    assert!(all.eof);
    let v = AttrValues::decode(&all.entries[0].attrs).unwrap().values;
    assert_eq!(v.ftype, Some(Ftype4::DIR));
    // A page that holds one entry at a time: resume from its cookie.
    let one = 8 + ReaddirResOk::FIXED_BYTES + all.entries[0].encoded_len();
    let mut got = Vec::new();
    let mut cookie = 0;
    let mut seqid = 1;
    for _ in 0..8 {
        seqid += 1;
        let mut ops = vec![seq(sid, seqid)];
        ops.extend(into_export());
        ops.push(readdir(cookie, one as u32, &bits));
        let res = c.send(ops);
        let page = listing(&res.results[4]).clone();
        assert_eq!(page.entries.len(), 1);
        got.push(page.entries[0].name.0.clone());
        cookie = page.entries[0].cookie;
        if page.eof {
            break;
        }
    }
    assert_eq!(got, vec![&b"a"[..], b"b", b"c"]);
    // Too small for any entry.
    let mut ops = vec![seq(sid, seqid + 1)];
    ops.extend(into_export());
    ops.push(readdir(0, 30, &bits));
    assert_eq!(c.send(ops).status, Nfsstat4::TOOSMALL);
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

#[test]
fn open_creates_and_close_ends_with_the_current_stateid() {
    let c = Client::new();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"owner-a",
            b"f",
            Some(Createhow4::Unchecked(mode_attrs(0o644))),
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
        ),
        getattr(&[num::TYPE, num::MODE]),
        NfsArgop4::Close(CloseArgs {
            seqid: 0,
            open_stateid: Stateid4::CURRENT,
        }),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let NfsResop4::Open(Res4::Ok(o)) = &res.results[4] else {
        panic!("{res:?}")
    };
    assert_eq!(o.stateid.seqid, 1);
    assert!(o.attrset.contains(num::MODE));
    assert!(o.cinfo.after != o.cinfo.before, "the directory changed");
    let v = attrs(&res.results[5]);
    assert_eq!((v.ftype, v.mode), (Some(Ftype4::REG), Some(0o644)));
    // GUARDED of an existing name is EXIST; a directory cannot be opened.
    let mut ops = vec![seq(sid, 2)];
    ops.extend(into_export());
    ops.push(open(
        b"owner-a",
        b"f",
        Some(Createhow4::Guarded(mode_attrs(0o644))),
        OPEN4_SHARE_ACCESS_READ,
        OPEN4_SHARE_DENY_NONE,
    ));
    assert_eq!(c.send(ops).status, Nfsstat4::EXIST);
    let mut ops = vec![seq(sid, 3), NfsArgop4::Putrootfh(()), lookup(b"srv")];
    ops.push(open(b"o", b"export", None, OPEN4_SHARE_ACCESS_READ, 0));
    assert_eq!(
        c.send(ops).status,
        Nfsstat4::NOENT,
        "pseudo directories hold no files"
    );
    let fs = c.nfs.exports[0].fs.clone();
    fs.mkdir(
        &Caller::with_cred(Cred::new(1000, 1000)),
        &fs.root_handle(),
        b"d",
        &SetAttr::default(),
    )
    .unwrap();
    let mut ops = vec![seq(sid, 4)];
    ops.extend(into_export());
    ops.push(open(b"o", b"d", None, OPEN4_SHARE_ACCESS_READ, 0));
    assert_eq!(c.send(ops).status, Nfsstat4::ISDIR);
}

#[test]
fn share_reservations_conflict_between_owners() {
    let c = Client::new();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.push(open(
        b"writer",
        b"f",
        Some(Createhow4::Unchecked(mode_attrs(0o644))),
        OPEN4_SHARE_ACCESS_BOTH,
        OPEN4_SHARE_DENY_NONE,
    ));
    assert_eq!(c.send(ops).status, Nfsstat4::OK);
    // Denying writes to a file someone has open for writing is refused.
    let mut ops = vec![seq(sid, 2)];
    ops.extend(into_export());
    ops.push(open(
        b"reader",
        b"f",
        None,
        OPEN4_SHARE_ACCESS_READ,
        OPEN4_SHARE_DENY_WRITE,
    ));
    assert_eq!(c.send(ops).status, Nfsstat4::SHARE_DENIED);
    // Without the deny it is fine.
    let mut ops = vec![seq(sid, 3)];
    ops.extend(into_export());
    ops.push(open(
        b"reader",
        b"f",
        None,
        OPEN4_SHARE_ACCESS_READ,
        OPEN4_SHARE_DENY_NONE,
    ));
    assert_eq!(c.send(ops).status, Nfsstat4::OK);
}

#[test]
fn readlink_secinfo_and_stateid_tests() {
    let c = Client::new();
    let sid = mount(&c);
    let fs = c.nfs.exports[0].fs.clone();
    fs.symlink(
        &Caller::with_cred(Cred::new(1000, 1000)),
        &fs.root_handle(),
        b"ln",
        b"some/where",
        &SetAttr::default(),
    )
    .unwrap();
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        NfsArgop4::Savefh(()),
        lookup(b"ln"),
        NfsArgop4::Readlink(()),
        NfsArgop4::Restorefh(()),
        NfsArgop4::Readlink(()),
    ]);
    let res = c.send(ops);
    let NfsResop4::Readlink(Res4::Ok(target)) = &res.results[6] else {
        panic!("{res:?}")
    };
    assert_eq!(&target.0[..], b"some/where");
    assert_eq!(res.status, Nfsstat4::ISDIR, "READLINK of a directory");
    // SECINFO of a name answers the flavors and consumes the handle.
    let res = c.send(vec![
        seq(sid, 2),
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Secinfo(Component4(Bytes::from_static(b"srv"))),
        NfsArgop4::Getfh(()),
    ]);
    assert_eq!(res.status, Nfsstat4::NOFILEHANDLE);
    assert_eq!(res.results[2].status(), Nfsstat4::OK);
    // TEST_STATEID knows an open's stateid and not a made-up one.
    let mut ops = vec![seq(sid, 3)];
    ops.extend(into_export());
    ops.push(open(
        b"o",
        b"f",
        Some(Createhow4::Unchecked(mode_attrs(0o600))),
        OPEN4_SHARE_ACCESS_BOTH,
        OPEN4_SHARE_DENY_NONE,
    ));
    let res = c.send(ops);
    let NfsResop4::Open(Res4::Ok(o)) = &res.results[4] else {
        panic!("{res:?}")
    };
    let bogus = Stateid4 {
        seqid: 1,
        other: [7; 12],
    };
    let res = c.send(vec![
        seq(sid, 4),
        NfsArgop4::TestStateid(StateidList(vec![o.stateid, bogus])),
    ]);
    let NfsResop4::TestStateid(Res4::Ok(st)) = &res.results[1] else {
        panic!("{res:?}")
    };
    assert_eq!(st.0[0], Nfsstat4::OK);
    assert_ne!(st.0[1], Nfsstat4::OK);
}

#[test]
fn an_open_that_might_not_fit_the_cached_reply_does_not_run() {
    let c = Client::new();
    let sid = mount(&c);
    let all = crate::nfs4::map::SUPPORTED
        .iter()
        .copied()
        .filter(|b| !crate::nfs4::map::WRITE_ONLY.contains(b))
        .collect::<Vec<_>>();
    let open_worst = op_info(Opnum4::OPEN).unwrap().reply_bytes_max as usize;
    // Find a run of GETATTRs whose reply leaves room for a real OPEN result (under 100
    // bytes) but not for OPEN's largest one, within the 4096 cacheable bytes.
    let mut seqid = 0;
    let mut found = None;
    for n in 1..11 {
        seqid += 1;
        let mut ops = vec![seq(sid, seqid)];
        ops.extend(into_export());
        ops.extend((0..n).map(|_| getattr(&all)));
        let len = c.send_raw(1, ops).len();
        if len + 100 < 4096 && len + open_worst > 4096 {
            found = Some(n);
            break;
        }
    }
    let n = found.expect("a GETATTR count that fills the cache just enough");
    let mut ops = vec![seq(sid, seqid + 1)];
    ops.extend(into_export());
    ops.extend((0..n).map(|_| getattr(&all)));
    ops.push(open(
        b"o",
        b"f",
        Some(Createhow4::Unchecked(mode_attrs(0o600))),
        OPEN4_SHARE_ACCESS_BOTH,
        OPEN4_SHARE_DENY_NONE,
    ));
    let res = c.send(ops);
    assert_eq!(
        res.status,
        Nfsstat4::REP_TOO_BIG_TO_CACHE,
        "{:?}",
        statuses(&res)
    );
    assert_eq!(res.results.last().unwrap().opnum(), Opnum4::OPEN);
    // The file was not created.
    let fs = c.nfs.exports[0].fs.clone();
    let caller = Caller::with_cred(Cred::new(1000, 1000));
    assert!(fs.lookup(&caller, &fs.root_handle(), b"f").is_err());
}

#[test]
fn verify_and_nverify_compare_encoded_attributes() {
    let c = Client::new();
    let sid = mount(&c);
    let dir = |mode| {
        AttrValues {
            ftype: Some(Ftype4::DIR),
            mode: Some(mode),
            ..AttrValues::default()
        }
        .encode()
    };
    // The pseudo root is a 0555 directory.
    let res = c.send(vec![
        seq(sid, 1),
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Verify(dir(0o555)),
        NfsArgop4::Nverify(dir(0o777)),
        NfsArgop4::Verify(dir(0o777)),
    ]);
    assert_eq!(
        statuses(&res),
        vec![
            Nfsstat4::OK,
            Nfsstat4::OK,
            Nfsstat4::OK,
            Nfsstat4::OK,
            Nfsstat4::NOT_SAME
        ]
    );
    let res = c.send(vec![
        seq(sid, 2),
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Nverify(dir(0o555)),
    ]);
    assert_eq!(res.status, Nfsstat4::SAME);
    let unsupported = Fattr4 {
        mask: Bitmap4::from_bits(&[num::ARCHIVE]),
        vals: Bytes::from_static(&[0, 0, 0, 1]),
    };
    let res = c.send(vec![
        seq(sid, 3),
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Verify(unsupported),
    ]);
    assert_eq!(res.status, Nfsstat4::ATTRNOTSUPP);
}

#[test]
fn setattr_changes_mode_and_size_with_an_open_stateid() {
    let c = Client::new();
    let sid = mount(&c);
    let set = |v: AttrValues| {
        NfsArgop4::Setattr(SetattrArgs {
            stateid: Stateid4::CURRENT,
            obj_attributes: v.encode(),
        })
    };
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"o",
            b"f",
            Some(Createhow4::Unchecked(mode_attrs(0o600))),
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
        ),
        set(AttrValues {
            mode: Some(0o640),
            size: Some(10),
            ..AttrValues::default()
        }),
        getattr(&[num::MODE, num::SIZE]),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let NfsResop4::Setattr(r) = &res.results[5] else {
        panic!("{res:?}")
    };
    assert!(r
        .attrsset
        .same_bits(&Bitmap4::from_bits(&[num::SIZE, num::MODE])));
    let v = attrs(&res.results[6]);
    assert_eq!((v.mode, v.size), (Some(0o640), Some(10)));
    // A size change with a stateid nobody issued is refused; the pseudo tree is read-only.
    let mut ops = vec![seq(sid, 2)];
    ops.extend(into_export());
    ops.push(lookup(b"f"));
    ops.push(NfsArgop4::Setattr(SetattrArgs {
        stateid: Stateid4 {
            seqid: 1,
            other: [9; 12],
        },
        obj_attributes: AttrValues {
            size: Some(0),
            ..AttrValues::default()
        }
        .encode(),
    }));
    assert_ne!(c.send(ops).status, Nfsstat4::OK);
    let res = c.send(vec![
        seq(sid, 3),
        NfsArgop4::Putrootfh(()),
        set(AttrValues {
            mode: Some(0o777),
            ..AttrValues::default()
        }),
    ]);
    assert_eq!(res.status, Nfsstat4::ROFS);
}

#[test]
fn create_rename_and_link_in_an_export() {
    let c = Client::new();
    let sid = mount(&c);
    let mkdir = |name: &'static [u8]| {
        NfsArgop4::Create(CreateArgs {
            objtype: Createtype4::Dir,
            objname: Component4(Bytes::from_static(name)),
            createattrs: mode_attrs(0o755),
        })
    };
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        NfsArgop4::Savefh(()),
        mkdir(b"d"),
        getattr(&[num::TYPE, num::MODE]),
        NfsArgop4::Restorefh(()),
        NfsArgop4::Create(CreateArgs {
            objtype: Createtype4::Lnk(Linktext4(Bytes::from_static(b"d"))),
            objname: Component4(Bytes::from_static(b"ln")),
            createattrs: Fattr4::default(),
        }),
        NfsArgop4::Readlink(()),
        // RENAME d → e within the export root: saved and current are both the root.
        NfsArgop4::Restorefh(()),
        NfsArgop4::Rename(RenameArgs {
            oldname: Component4(Bytes::from_static(b"d")),
            newname: Component4(Bytes::from_static(b"e")),
        }),
        lookup(b"e"),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let NfsResop4::Create(Res4::Ok(made)) = &res.results[5] else {
        panic!("{res:?}")
    };
    assert!(made.attrset.contains(num::MODE));
    assert!(made.cinfo.after != made.cinfo.before);
    let v = attrs(&res.results[6]);
    assert_eq!((v.ftype, v.mode), (Some(Ftype4::DIR), Some(0o755)));
    let NfsResop4::Rename(Res4::Ok(r)) = &res.results[11] else {
        panic!("{res:?}")
    };
    assert!(r.source_cinfo.after != r.source_cinfo.before);
    // LINK: a file made by OPEN gets a second name; REGULAR files are not CREATE's.
    let mut ops = vec![seq(sid, 2)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"o",
            b"f",
            Some(Createhow4::Unchecked(mode_attrs(0o644))),
            OPEN4_SHARE_ACCESS_READ,
            OPEN4_SHARE_DENY_NONE,
        ),
        NfsArgop4::Savefh(()),
        NfsArgop4::Putrootfh(()),
        lookup(b"srv"),
        lookup(b"export"),
        NfsArgop4::Link(Component4(Bytes::from_static(b"g"))),
        lookup(b"g"),
        getattr(&[num::NUMLINKS]),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert_eq!(attrs(res.results.last().unwrap()).numlinks, Some(2));
    // RENAME from the pseudo tree is ROFS; CREATE in it too.
    let res = c.send(vec![seq(sid, 3), NfsArgop4::Putrootfh(()), mkdir(b"x")]);
    assert_eq!(res.status, Nfsstat4::ROFS);
}

mod hostile {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Random bytes, and random op numbers with random argument bytes after a well-formed
        /// COMPOUND header (inside a session or not), never panic and always get an answer
        /// that decodes (or GARBAGE_ARGS).
        #[test]
        fn random_compounds_never_panic(
            raw in proptest::collection::vec(any::<u8>(), 0..256),
            ops in proptest::collection::vec((0u32..80, proptest::collection::vec(any::<u8>(), 0..64)), 0..8),
            in_session in any::<bool>(),
            minor in 0u32..4,
        ) {
            let c = Client::new();
            let _ = c.compound(1, &raw);
            let sid = mount(&c);
            let mut w = Writer::new();
            w.put_opaque(b"t1");
            w.put_u32(minor);
            w.put_u32(ops.len() as u32 + u32::from(in_session));
            if in_session {
                seq(sid, 1).pack(&mut w);
            }
            let mut record = w.into_bytes().to_vec();
            for (op, args) in &ops {
                record.extend_from_slice(&op.to_be_bytes());
                record.extend_from_slice(args);
            }
            match c.compound(1, &record) {
                Outcome::Reply(b) => {
                    let segs = [b];
                    let mut r = Reader::new(&segs);
                    prop_assert!(Compound4Res::decode(&mut r, &CompoundLimits::default()).is_ok());
                }
                Outcome::GarbageArgs => {}
            }
        }
    }
}

#[test]
fn destroy_session_alone_needs_a_bound_connection() {
    let c = Client::new();
    let sid = mount(&c);
    // From a connection the session never saw: refused, the session lives on.
    let mut w = Writer::new();
    Compound4Args {
        tag: Utf8Str(Bytes::from_static(b"t1")),
        minorversion: 1,
        ops: vec![NfsArgop4::DestroySession(sid)],
    }
    .pack(&mut w);
    let Outcome::Reply(b) = c.compound(99, &w.into_bytes()) else {
        panic!("GARBAGE_ARGS")
    };
    assert_eq!(decode(&b).status, Nfsstat4::CONN_NOT_BOUND_TO_SESSION);
    assert_eq!(c.send(vec![seq(sid, 1)]).status, Nfsstat4::OK);
}

/// Held writes a driver cannot land (here: no data path at all) make the op that would
/// truncate their file NFS4ERR_DELAY; a REMOVE goes ahead, as v3's does.
#[test]
fn truncation_is_delay_when_held_writes_cannot_land() {
    use crate::io::writebehind::WriteBehindDriver;
    use crate::stats::Stats;
    let mut c = Client::new();
    let wb = WriteBehindDriver::new(Default::default(), Arc::new(Stats::default()));
    c.nfs_mut().write_behind = Some(wb.clone());
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.push(open(
        b"o",
        b"f",
        Some(Createhow4::Unchecked(mode_attrs(0o644))),
        OPEN4_SHARE_ACCESS_BOTH,
        OPEN4_SHARE_DENY_NONE,
    ));
    ops.push(NfsArgop4::Getfh(()));
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK);
    let fh = FileHandle::from_slice(&fh_of(&res.results[5]).0).unwrap();
    // A v3 client's unstable write of the file is held.
    let fs = c.nfs.exports[0].fs.clone();
    wb.hold(
        &fs,
        &fh,
        0,
        vec![Bytes::from_static(b"hello")],
        Caller::with_cred(Cred::new(1000, 1000)),
    );
    let truncate = AttrValues {
        size: Some(0),
        ..AttrValues::default()
    };
    let mut ops = vec![seq(sid, 2)];
    ops.extend(into_export());
    ops.push(lookup(b"f"));
    ops.push(NfsArgop4::Setattr(SetattrArgs {
        stateid: Stateid4::ANONYMOUS,
        obj_attributes: truncate.encode(),
    }));
    assert_eq!(c.send(ops).status, Nfsstat4::DELAY);
    let mut ops = vec![seq(sid, 3)];
    ops.extend(into_export());
    ops.push(open(
        b"o2",
        b"f",
        Some(Createhow4::Unchecked(truncate.encode())),
        OPEN4_SHARE_ACCESS_READ,
        OPEN4_SHARE_DENY_NONE,
    ));
    assert_eq!(c.send(ops).status, Nfsstat4::DELAY);
    let mut ops = vec![seq(sid, 4)];
    ops.extend(into_export());
    ops.push(NfsArgop4::Remove(Component4(Bytes::from_static(b"f"))));
    assert_eq!(c.send(ops).status, Nfsstat4::OK);
    // Without held writes REMOVE goes ahead.
    let mut c2 = Client::new();
    c2.nfs_mut().write_behind = None;
    let sid2 = mount(&c2);
    let mut ops = vec![seq(sid2, 1)];
    ops.extend(into_export());
    ops.push(open(
        b"o",
        b"g",
        Some(Createhow4::Unchecked(mode_attrs(0o644))),
        OPEN4_SHARE_ACCESS_READ,
        OPEN4_SHARE_DENY_NONE,
    ));
    ops.extend(into_export());
    ops.push(NfsArgop4::Remove(Component4(Bytes::from_static(b"g"))));
    ops.push(lookup(b"g"));
    let res = c2.send(ops);
    assert_eq!(res.status, Nfsstat4::NOENT, "{:?}", statuses(&res));
    assert_eq!(res.results[res.results.len() - 2].status(), Nfsstat4::OK);
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

#[test]
fn held_writes_land_before_a_truncating_setattr_or_open_instead_of_delay() {
    let c = Client::with_data();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"o",
            b"f",
            Some(Createhow4::Unchecked(mode_attrs(0o644))),
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
        ),
        write_op(Stateid4::CURRENT, 0, StableHow4::UNSTABLE, b"hello world"),
        NfsArgop4::Getfh(()),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert!(held(&c, &res.results[6]), "the UNSTABLE write is held");
    let getfh = res.results[6].clone();
    // SETATTR of the size in the next COMPOUND: the held bytes land first, then the file is
    // cut; no DELAY.
    let size = |n| {
        AttrValues {
            size: Some(n),
            ..AttrValues::default()
        }
        .encode()
    };
    let mut ops = vec![seq(sid, 2)];
    ops.extend(into_export());
    ops.extend([
        lookup(b"f"),
        NfsArgop4::Setattr(SetattrArgs {
            stateid: Stateid4::ANONYMOUS,
            obj_attributes: size(5),
        }),
        getattr(&[num::SIZE]),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert_eq!(attrs(&res.results[6]).size, Some(5));
    assert!(!held(&c, &getfh));
    assert_eq!(contents(&c, b"f"), b"hello", "landed, then cut");
    // Held again, then an OPEN that truncates: the same.
    let mut ops = vec![seq(sid, 3)];
    ops.extend(into_export());
    ops.extend([
        lookup(b"f"),
        write_op(
            Stateid4::ANONYMOUS,
            0,
            StableHow4::UNSTABLE,
            b"HELLO WORLD!",
        ),
    ]);
    assert_eq!(c.send(ops).status, Nfsstat4::OK);
    assert!(held(&c, &getfh));
    let mut ops = vec![seq(sid, 4)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"o2",
            b"f",
            Some(Createhow4::Unchecked(size(0))),
            OPEN4_SHARE_ACCESS_READ,
            OPEN4_SHARE_DENY_NONE,
        ),
        getattr(&[num::SIZE]),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert_eq!(attrs(&res.results[5]).size, Some(0));
    assert!(!held(&c, &getfh), "nothing left to land past the new size");
    assert_eq!(contents(&c, b"f"), b"");
}

#[test]
fn a_remove_of_a_file_with_held_writes_drops_them_instead_of_delay() {
    let c = Client::with_data();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"o",
            b"f",
            Some(Createhow4::Unchecked(mode_attrs(0o644))),
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
        ),
        write_op(Stateid4::CURRENT, 0, StableHow4::UNSTABLE, b"doomed"),
        NfsArgop4::Close(CloseArgs {
            seqid: 0,
            open_stateid: Stateid4::CURRENT,
        }),
        NfsArgop4::Getfh(()),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let getfh = res.results[7].clone();
    assert!(held(&c, &getfh));
    let mut ops = vec![seq(sid, 2)];
    ops.extend(into_export());
    ops.extend([
        NfsArgop4::Remove(Component4(Bytes::from_static(b"f"))),
        lookup(b"f"),
    ]);
    let res = c.send(ops);
    assert_eq!(
        statuses(&res)[4..],
        [Nfsstat4::OK, Nfsstat4::NOENT],
        "removed at once, and gone"
    );
    assert!(
        !held(&c, &getfh),
        "the last link is gone: its held data is dropped"
    );
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

#[test]
fn write_unstable_commit_and_read_back_through_the_data_path() {
    let c = Client::with_data();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"o",
            b"f",
            Some(Createhow4::Unchecked(mode_attrs(0o644))),
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
        ),
        write_op(Stateid4::CURRENT, 0, StableHow4::UNSTABLE, b"hello v4"),
        NfsArgop4::Commit(CommitArgs {
            offset: 0,
            count: 0,
        }),
        read_op(Stateid4::CURRENT, 0, 100),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let NfsResop4::Write(Res4::Ok(w)) = &res.results[5] else {
        panic!("{res:?}")
    };
    assert_eq!(w.count, 8);
    // Write-behind holds an UNSTABLE write: it is acknowledged as UNSTABLE.
    assert_eq!(w.committed, StableHow4::UNSTABLE);
    let fs = c.nfs.exports[0].fs.clone();
    assert_eq!(w.writeverf, fs.write_verifier(), "v3's write verifier");
    let NfsResop4::Commit(Res4::Ok(verf)) = &res.results[6] else {
        panic!("{res:?}")
    };
    assert_eq!(*verf, w.writeverf);
    let NfsResop4::Read(Res4::Ok(r)) = &res.results[7] else {
        panic!("{res:?}")
    };
    assert_eq!(r.data.to_vec(), b"hello v4");
    assert!(r.eof);
    // The data landed in the file system (COMMIT flushed write-behind).
    let fh = fs
        .lookup(
            &Caller::with_cred(Cred::new(1000, 1000)),
            &fs.root_handle(),
            b"f",
        )
        .unwrap()
        .fh;
    assert_eq!(fs.getattr(&fh).unwrap().size, 8);
    // READ with the anonymous stateid, from the middle: the tail and eof.
    let mut ops = vec![seq(sid, 2)];
    ops.extend(into_export());
    ops.extend([lookup(b"f"), read_op(Stateid4::ANONYMOUS, 6, 100)]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let NfsResop4::Read(Res4::Ok(r)) = &res.results[5] else {
        panic!("{res:?}")
    };
    assert_eq!((r.data.to_vec(), r.eof), (b"v4".to_vec(), true));
    // A short READ of the start is not eof.
    let mut ops = vec![seq(sid, 3)];
    ops.extend(into_export());
    ops.extend([lookup(b"f"), read_op(Stateid4::ANONYMOUS, 0, 5)]);
    let res = c.send(ops);
    let NfsResop4::Read(Res4::Ok(r)) = &res.results[5] else {
        panic!("{res:?}")
    };
    assert_eq!((r.data.to_vec(), r.eof), (b"hello".to_vec(), false));
}

#[test]
fn write_under_a_read_only_open_is_openmode_and_changes_nothing() {
    let c = Client::with_data();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"o",
            b"f",
            Some(Createhow4::Unchecked(mode_attrs(0o644))),
            OPEN4_SHARE_ACCESS_READ,
            OPEN4_SHARE_DENY_NONE,
        ),
        write_op(Stateid4::CURRENT, 0, StableHow4::FILE_SYNC, b"x"),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OPENMODE, "{:?}", statuses(&res));
    let fs = c.nfs.exports[0].fs.clone();
    let fh = fs
        .lookup(
            &Caller::with_cred(Cred::new(1000, 1000)),
            &fs.root_handle(),
            b"f",
        )
        .unwrap()
        .fh;
    assert_eq!(fs.getattr(&fh).unwrap().size, 0);
    // FILE_SYNC under the anonymous stateid goes through and is FILE_SYNC.
    let mut ops = vec![seq(sid, 2)];
    ops.extend(into_export());
    ops.extend([
        lookup(b"f"),
        write_op(Stateid4::ANONYMOUS, 0, StableHow4::FILE_SYNC, b"xyz"),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let NfsResop4::Write(Res4::Ok(w)) = &res.results[5] else {
        panic!("{res:?}")
    };
    assert_eq!((w.count, w.committed), (3, StableHow4::FILE_SYNC));
    assert_eq!(fs.getattr(&fh).unwrap().size, 3);
}

#[test]
fn data_ops_without_a_data_path_or_on_a_directory() {
    // No data path: the op's checks still come first (the export root is a directory) ...
    let c = Client::new();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.push(read_op(Stateid4::ANONYMOUS, 0, 10));
    assert_eq!(c.send(ops).status, Nfsstat4::ISDIR);
    // ... then NOTSUPP for a file.
    let fs = c.nfs.exports[0].fs.clone();
    let root = fs.root_handle();
    fs.create(
        &Caller::with_cred(Cred::new(1000, 1000)),
        &root,
        b"f",
        CreateHow::Unchecked(SetAttr::default()),
    )
    .unwrap();
    let mut ops = vec![seq(sid, 2)];
    ops.extend(into_export());
    ops.push(NfsArgop4::Lookup(Component4(Bytes::from_static(b"f"))));
    ops.push(read_op(Stateid4::ANONYMOUS, 0, 10));
    assert_eq!(c.send(ops).status, Nfsstat4::NOTSUPP);
    // With one, a directory is ISDIR.
    let c = Client::with_data();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.push(read_op(Stateid4::ANONYMOUS, 0, 10));
    assert_eq!(c.send(ops).status, Nfsstat4::ISDIR);
}

#[test]
fn anonymous_write_against_a_deny_write_open_is_locked_and_a_read_only_export_is_rofs() {
    let c = Client::with_data();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"o",
            b"f",
            Some(Createhow4::Unchecked(mode_attrs(0o644))),
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_WRITE,
        ),
        write_op(Stateid4::ANONYMOUS, 0, StableHow4::UNSTABLE, b"x"),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::LOCKED, "{:?}", statuses(&res));
    // The same export, read-only: the file system refuses the write, as v3's ROFS.
    let mut c = Client::with_data();
    let mut e = export("/srv/export", ClientMatch::Any, EXPORT_FSID);
    e.export.clients[0].options.read_only = true;
    let state = State4::new(Config4::default(), Box::new(SplitMix(5)));
    c.nfs = Arc::new(Nfs4::new(Arc::new(vec![e]), state, 1).unwrap());
    let fs = c.nfs.exports[0].fs.clone();
    let owner = Caller::with_cred(Cred::new(1000, 1000));
    fs.create(
        &owner,
        &fs.root_handle(),
        b"g",
        CreateHow::Unchecked(SetAttr::default()),
    )
    .unwrap();
    let sid = mount(&c);
    for (i, stable) in [StableHow4::UNSTABLE, StableHow4::FILE_SYNC]
        .into_iter()
        .enumerate()
    {
        let mut ops = vec![seq(sid, 1 + i as u32)];
        ops.extend(into_export());
        ops.extend([lookup(b"g"), write_op(Stateid4::ANONYMOUS, 0, stable, b"x")]);
        assert_eq!(c.send(ops).status, Nfsstat4::ROFS, "{stable:?}");
    }
}

#[test]
fn encoded_len_counts_a_read_results_chunks_and_padding() {
    let r = NfsResop4::Read(Res4::Ok(ReadResOk {
        eof: true,
        data: sluice_xdr::Payload::from_chunks(vec![
            Bytes::from_static(b"abc"),
            Bytes::from(vec![7u8; 70_000]),
        ]),
    }));
    let mut w = Writer::new();
    r.pack(&mut w);
    assert_eq!(encoded_len(&r), w.into_bytes().len());
    assert_eq!(encoded_len(&r), 4 + 4 + 4 + 4 + 70_003 + 1);
}

#[test]
fn backchannel_ctl_sets_the_sessions_program_and_needs_a_session() {
    use crate::nfs4::backchan::PathState;
    use sluice_xdr::nfs4::ops::{BackchannelCtlArgs, CallbackSecParms4};
    let c = Client::new();
    let ctl = || {
        NfsArgop4::BackchannelCtl(BackchannelCtlArgs {
            cb_program: 0x4000_0007,
            sec_parms: CallbackSecParmsList(vec![CallbackSecParms4::AuthNone]),
        })
    };
    let res = c.send(vec![ctl()]);
    assert_eq!(res.status, Nfsstat4::OP_NOT_IN_SESSION);
    let sid = mount(&c);
    let res = c.send(vec![seq(sid, 1), ctl()]);
    assert_eq!(statuses(&res), vec![Nfsstat4::OK; 2]);
    let st = c.nfs.state();
    assert_eq!(st.session(&sid).unwrap().cb.program(), 0x4000_0007);
    assert_eq!(st.callback_path(&sid), Some(PathState::Unknown));
}

#[test]
fn the_op_observer_sees_every_op_with_its_status() {
    use crate::stats::Stats;
    use std::sync::atomic::Ordering::Relaxed;
    let mut c = Client::new();
    let stats = Arc::new(Stats::default());
    c.nfs_mut().op_observer = Some(stats.clone());
    let sid = mount(&c);
    let res = c.send(vec![seq(sid, 1), NfsArgop4::Putrootfh(()), lookup(b"nope")]);
    assert_eq!(res.status, Nfsstat4::NOENT);
    // Not in a session: counted under the op, as an error.
    c.send(vec![NfsArgop4::Putrootfh(())]);
    let count = |op: Opnum4| {
        let p = stats.nfs4_ops.get(op).unwrap();
        (p.calls.load(Relaxed), p.errors.load(Relaxed))
    };
    assert_eq!(count(Opnum4::EXCHANGE_ID), (1, 0));
    assert_eq!(count(Opnum4::CREATE_SESSION), (1, 0));
    assert_eq!(count(Opnum4::SEQUENCE), (1, 0));
    assert_eq!(count(Opnum4::PUTROOTFH), (2, 1));
    assert_eq!(count(Opnum4::LOOKUP), (1, 1));
    assert_eq!(count(Opnum4::GETFH), (0, 0));
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

#[test]
fn unstable_and_file_sync_writes_commit_and_read_back_without_a_runtime() {
    let (c, writes) = direct_client();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"o",
            b"f",
            Some(Createhow4::Unchecked(mode_attrs(0o644))),
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
        ),
        write_op(Stateid4::CURRENT, 0, StableHow4::UNSTABLE, b"hello"),
        write_op(Stateid4::CURRENT, 5, StableHow4::FILE_SYNC, b" v4"),
        NfsArgop4::Commit(CommitArgs {
            offset: 0,
            count: 0,
        }),
        read_op(Stateid4::CURRENT, 0, 100),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    assert_eq!(writes.load(std::sync::atomic::Ordering::SeqCst), 2);
    let fs = c.nfs.exports[0].fs.clone();
    let (unstable, sync) = (write_result(&res.results[5]), write_result(&res.results[6]));
    assert_eq!(
        (unstable.count, unstable.committed),
        (5, StableHow4::UNSTABLE)
    );
    assert_eq!((sync.count, sync.committed), (3, StableHow4::FILE_SYNC));
    assert_eq!(unstable.writeverf, fs.write_verifier());
    let NfsResop4::Commit(Res4::Ok(verf)) = &res.results[7] else {
        panic!("{res:?}")
    };
    assert_eq!(
        *verf,
        fs.write_verifier(),
        "COMMIT's verifier is the WRITEs'"
    );
    let r = read_result(&res.results[8]);
    assert_eq!((r.data.to_vec(), r.eof), (b"hello v4".to_vec(), true));
}

#[test]
fn only_a_last_read_whose_reply_the_slot_does_not_keep_may_splice() {
    let (c, _) = direct_client();
    let sid = mount(&c);
    let fs = c.nfs.exports[0].fs.clone();
    let owner = Caller::with_cred(Cred::new(1000, 1000));
    let f = fs
        .create(
            &owner,
            &fs.root_handle(),
            b"f",
            CreateHow::Unchecked(SetAttr::default()),
        )
        .unwrap()
        .fh;
    fs.write(
        &owner,
        &f,
        0,
        &[Bytes::from_static(b"0123456789")],
        StableHow::FileSync,
    )
    .unwrap();
    let to_file = |s: NfsArgop4| {
        let mut ops = vec![s];
        ops.extend(into_export());
        ops.push(lookup(b"f"));
        ops
    };
    // Last, and the slot keeps nothing: the READ may be spliced.
    let mut ops = to_file(seq_uncached(sid, 1));
    ops.push(read_op(Stateid4::ANONYMOUS, 2, 3));
    let (res, reads) = drive(&c, ops, true);
    assert_eq!(reads, [true]);
    assert_eq!(read_result(&res.results[5]).data.to_vec(), b"234");
    // With an op after it: chunks.
    let mut ops = to_file(seq_uncached(sid, 2));
    ops.extend([read_op(Stateid4::ANONYMOUS, 0, 2), getattr(&[num::SIZE])]);
    let (res, reads) = drive(&c, ops, true);
    assert_eq!(reads, [false]);
    assert_eq!(res.status, Nfsstat4::OK);
    assert_eq!(read_result(&res.results[5]).data.to_vec(), b"01");
    // Two READs: only the last may be spliced.
    let mut ops = to_file(seq_uncached(sid, 3));
    ops.extend([
        read_op(Stateid4::ANONYMOUS, 0, 1),
        read_op(Stateid4::ANONYMOUS, 9, 5),
    ]);
    let (res, reads) = drive(&c, ops, true);
    assert_eq!(reads, [false, true]);
    let last = read_result(&res.results[6]);
    assert_eq!((last.data.to_vec(), last.eof), (b"9".to_vec(), true));
    // The slot keeps the reply (sa_cachethis): it must be all in memory.
    let mut ops = to_file(seq(sid, 4));
    ops.push(read_op(Stateid4::ANONYMOUS, 0, 4));
    assert_eq!(drive(&c, ops, true).1, [false]);
    // A driver that cannot splice.
    let mut ops = to_file(seq_uncached(sid, 5));
    ops.push(read_op(Stateid4::ANONYMOUS, 0, 4));
    assert_eq!(drive(&c, ops, false).1, [false]);
}

/// The slot's digest covers every payload byte and the caller (see `nfs4::digest`), and not
/// how the record was cut into segments.
#[test]
fn a_retry_differing_in_one_payload_byte_or_its_user_is_a_false_retry() {
    let (mut c, writes) = direct_client();
    let sid = mount(&c);
    let fs = c.nfs.exports[0].fs.clone();
    let owner = Caller::with_cred(Cred::new(1000, 1000));
    fs.create(
        &owner,
        &fs.root_handle(),
        b"f",
        CreateHow::Unchecked(SetAttr::default()),
    )
    .unwrap();
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut flipped = payload.clone();
    flipped[100_001] ^= 0x01;
    let (payload, flipped): (&'static [u8], &'static [u8]) = (payload.leak(), flipped.leak());
    let ops = |data: &'static [u8]| {
        let mut ops = vec![seq(sid, 1)];
        ops.extend(into_export());
        ops.extend([
            lookup(b"f"),
            write_op(Stateid4::ANONYMOUS, 0, StableHow4::FILE_SYNC, data),
        ]);
        ops
    };
    let count = || writes.load(std::sync::atomic::Ordering::SeqCst);
    let first = c.send_raw(1, ops(payload));
    assert_eq!(decode(&first).status, Nfsstat4::OK);
    // One byte in the middle of the payload differs: not the same request.
    let res = decode(&c.send_raw(1, ops(flipped)));
    assert_eq!(res.status, Nfsstat4::SEQ_FALSE_RETRY);
    // The same bytes cut into other segments (as a retry arrives): the cached reply.
    let record = record_of(ops(payload));
    let segs: Vec<Bytes> = (0..record.len())
        .step_by(997)
        .map(|i| record.slice(i..(i + 997).min(record.len())))
        .collect();
    let call = Call {
        addr: c.addr,
        conn: 1,
        cred: &c.cred,
        now: c.now,
    };
    let Step::Reply(r) = c.nfs.begin(&segs, 0, false).step(&c.nfs, &call) else {
        panic!("a replay is answered at once")
    };
    assert_eq!(join(r.segs), first);
    // The same bytes from another user: not the same request either.
    c.cred = Credentials::Sys(AuthSys {
        stamp: 1,
        machine_name: Bytes::from_static(b"client"),
        uid: 1001,
        gid: 1000,
        gids: Vec::new(),
    });
    let res = decode(&c.send_raw(1, ops(payload)));
    assert_eq!(res.status, Nfsstat4::SEQ_FALSE_RETRY);
    assert_eq!(count(), 1, "nothing ran again");
}

/// An uncached request's digest samples its first bytes and its length
/// (`UNCACHED_DIGEST_BYTES`): a retry that differs only deep in a WRITE's data is answered as
/// an uncached retry (nothing replayed, nothing run again), one that differs early or in length
/// is still a false retry.
#[test]
fn an_uncached_retry_is_told_apart_by_its_first_bytes_and_length() {
    let (c, writes) = direct_client();
    let sid = mount(&c);
    let fs = c.nfs.exports[0].fs.clone();
    let owner = Caller::with_cred(Cred::new(1000, 1000));
    fs.create(
        &owner,
        &fs.root_handle(),
        b"f",
        CreateHow::Unchecked(SetAttr::default()),
    )
    .unwrap();
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut deep = payload.clone();
    deep[100_001] ^= 0x01;
    let mut early = payload.clone();
    early[10] ^= 0x01;
    let shorter = payload[..199_996].to_vec();
    let leak = |v: Vec<u8>| -> &'static [u8] { v.leak() };
    let (payload, deep, early, shorter) = (leak(payload), leak(deep), leak(early), leak(shorter));
    let ops = |data: &'static [u8]| {
        let mut ops = vec![seq_uncached(sid, 1)];
        ops.extend(into_export());
        ops.extend([
            lookup(b"f"),
            write_op(Stateid4::ANONYMOUS, 0, StableHow4::FILE_SYNC, data),
        ]);
        ops
    };
    let count = || writes.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(decode(&c.send_raw(1, ops(payload))).status, Nfsstat4::OK);
    let res = decode(&c.send_raw(1, ops(deep)));
    assert_eq!(res.status, Nfsstat4::RETRY_UNCACHED_REP);
    let res = decode(&c.send_raw(1, ops(early)));
    assert_eq!(res.status, Nfsstat4::SEQ_FALSE_RETRY);
    let res = decode(&c.send_raw(1, ops(shorter)));
    assert_eq!(res.status, Nfsstat4::SEQ_FALSE_RETRY);
    assert_eq!(count(), 1, "nothing ran again");
}

#[test]
fn a_retried_write_is_answered_from_the_slot_and_not_run_again() {
    let (c, writes) = direct_client();
    let sid = mount(&c);
    let fs = c.nfs.exports[0].fs.clone();
    let owner = Caller::with_cred(Cred::new(1000, 1000));
    let f = fs
        .create(
            &owner,
            &fs.root_handle(),
            b"f",
            CreateHow::Unchecked(SetAttr::default()),
        )
        .unwrap()
        .fh;
    let write = |s: NfsArgop4, data: &'static [u8]| {
        let mut ops = vec![s];
        ops.extend(into_export());
        ops.extend([
            lookup(b"f"),
            write_op(Stateid4::ANONYMOUS, 0, StableHow4::FILE_SYNC, data),
        ]);
        c.send_raw(1, ops)
    };
    let count = || writes.load(std::sync::atomic::Ordering::SeqCst);
    let first = write(seq(sid, 1), b"first");
    assert_eq!(decode(&first).status, Nfsstat4::OK);
    assert_eq!(count(), 1);
    // Someone else writes the file meanwhile.
    fs.write(
        &owner,
        &f,
        0,
        &[Bytes::from_static(b"other")],
        StableHow::FileSync,
    )
    .unwrap();
    // The retry: the same bytes back, and the WRITE does not run again.
    assert_eq!(write(seq(sid, 1), b"first"), first);
    assert_eq!(count(), 1);
    let mut buf = [0u8; 5];
    fs.read(&owner, &f, 0, &mut [&mut buf[..]]).unwrap();
    assert_eq!(&buf, b"other", "the retry did not write again");
    // A different request on the same sequence id is a false retry, not run either.
    let res = decode(&write(seq(sid, 1), b"third"));
    assert_eq!(res.status, Nfsstat4::SEQ_FALSE_RETRY);
    assert_eq!(count(), 1);
    // A WRITE whose client did not ask for caching: its retry is refused, never re-run.
    assert_eq!(
        decode(&write(seq_uncached(sid, 2), b"fourth")).status,
        Nfsstat4::OK
    );
    assert_eq!(count(), 2);
    let res = decode(&write(seq_uncached(sid, 2), b"fourth"));
    assert_eq!(res.status, Nfsstat4::RETRY_UNCACHED_REP);
    // SEQUENCE succeeds and the op after it carries the error (RFC 8881 §2.10.6.1.3).
    let [NfsResop4::Sequence(Res4::Ok(s)), NfsResop4::Putrootfh(e)] = &res.results[..] else {
        panic!("{res:?}")
    };
    assert_eq!((s.sequenceid, *e), (2, Nfsstat4::RETRY_UNCACHED_REP));
    assert_eq!(count(), 2);
    // The slot was left as it was: the next sequence id runs.
    assert_eq!(
        decode(&write(seq_uncached(sid, 3), b"fifth")).status,
        Nfsstat4::OK
    );
    assert_eq!(count(), 3);
    // A lone SEQUENCE retried is answered again.
    assert_eq!(c.send(vec![seq_uncached(sid, 4)]).status, Nfsstat4::OK);
    let res = c.send(vec![seq_uncached(sid, 4)]);
    assert_eq!(statuses(&res), [Nfsstat4::OK]);
}

#[test]
fn a_write_payload_is_decoded_as_slices_of_the_received_record() {
    let (c, _) = direct_client();
    let sid = mount(&c);
    let fs = c.nfs.exports[0].fs.clone();
    let owner = Caller::with_cred(Cred::new(1000, 1000));
    fs.create(
        &owner,
        &fs.root_handle(),
        b"f",
        CreateHow::Unchecked(SetAttr::default()),
    )
    .unwrap();
    let payload: &'static [u8] = &[0x5a; 100_000];
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        lookup(b"f"),
        write_op(Stateid4::ANONYMOUS, 0, StableHow4::UNSTABLE, payload),
    ]);
    // An RPC header's worth of bytes in front, and the record in 64 KiB segments as the
    // receive path hands it over.
    let header = [0xeeu8; 40];
    let mut whole = header.to_vec();
    whole.extend_from_slice(&record_of(ops));
    let whole = Bytes::from(whole);
    let segs: Vec<Bytes> = (0..whole.len())
        .step_by(65_536)
        .map(|at| whole.slice(at..(at + 65_536).min(whole.len())))
        .collect();
    let range = whole.as_ptr() as usize..whole.as_ptr() as usize + whole.len();
    let call = Call {
        addr: c.addr,
        conn: 1,
        cred: &c.cred,
        now: c.now,
    };
    let mut eval = c.nfs.begin(&segs, header.len(), true);
    let Step::Data(req) = eval.step(&c.nfs, &call) else {
        panic!("the WRITE")
    };
    let DataOp::Write { data, .. } = &req.op else {
        panic!("{:?}", req.op)
    };
    assert!(data.len() >= 2, "the payload straddles a segment boundary");
    assert_eq!(data.iter().map(|d| d.len()).sum::<usize>(), payload.len());
    for d in data {
        let at = d.as_ptr() as usize;
        assert!(
            range.contains(&at) && range.contains(&(at + d.len() - 1)),
            "not a copy"
        );
    }
    eval.resume(DirectData::default().run(req).map_err(map::status));
    let Step::Reply(r) = eval.step(&c.nfs, &call) else {
        panic!("the reply")
    };
    assert_eq!(r.status, Nfsstat4::OK);
    let f = fs.lookup(&owner, &fs.root_handle(), b"f").unwrap().fh;
    assert_eq!(fs.getattr(&f).unwrap().size, payload.len() as u64);
}

/// A GETATTR after an UNSTABLE WRITE that write-behind still holds shows the written size
/// (the backend's is still 0): a client that chmods or utimens a file it just wrote (cp -p
/// through a v4.1 mount) must not see it empty.
#[test]
fn getattr_size_includes_writes_held_by_write_behind() {
    let c = Client::with_data();
    let sid = mount(&c);
    let mut ops = vec![seq(sid, 1)];
    ops.extend(into_export());
    ops.extend([
        open(
            b"o",
            b"g",
            Some(Createhow4::Unchecked(mode_attrs(0o644))),
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
        ),
        write_op(Stateid4::CURRENT, 0, StableHow4::UNSTABLE, b"hello world"),
        NfsArgop4::Getfh(()),
        getattr(&[num::SIZE]),
    ]);
    let res = c.send(ops);
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    // Still held after the COMPOUND, so it was while GETATTR ran (nothing is held again).
    assert!(held(&c, &res.results[6]), "the UNSTABLE write is held");
    assert_eq!(attrs(&res.results[7]).size, Some(11));
}
