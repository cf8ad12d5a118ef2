//! NFSv4.1 over [`Rpc`]: the server's shared test client (`sluice_server::testkit`: the
//! EXCHANGE_ID and CREATE_SESSION it sends, its SEQUENCE numbering, its COMPOUND encoding) on a
//! real connection, and [`V4`], one session on one connection. What is here besides is what
//! only wire tests need: asserting replies as they arrive on the wire, and op builders.

use super::{Reply, Rpc, TestServer};
use bytes::Bytes;
use sluice_server::testkit::{self, Session4, SessionConfig};
use sluice_xdr::nfs4::attrs::AttrValues;
use sluice_xdr::nfs4::compound::{Compound4Res, CompoundLimits};
use sluice_xdr::nfs4::ops::{
    ChannelAttrs4, CloseArgs, Createhow4, ExchangeIdResOk, NfsArgop4, NfsResop4, OpenArgs,
    OpenClaim4, OpenResOk, Openflag4, Res4, SequenceArgs,
};
use sluice_xdr::nfs4::{
    self, Component4, Fattr4, NfsFh4, Nfsstat4, Opaque4, SessionId4, StateOwner4, Stateid4, Utf8Str,
};
use sluice_xdr::rpc::ReplyBody;
use sluice_xdr::Reader;
use std::path::Path;

/// The tag every test COMPOUND carries; replies must echo it.
pub const TAG: &[u8] = b"v4wire";

/// The encoded arguments of one COMPOUND.
pub fn compound_args(minorversion: u32, ops: Vec<NfsArgop4>) -> Bytes {
    testkit::encode(TAG, minorversion, ops)
}

/// Sends encoded COMPOUND arguments; the reply must be an accepted RPC reply.
pub async fn compound_raw(c: &mut Rpc, args: &[u8]) -> Reply {
    let r = c.call(nfs4::PROGRAM, 4, nfs4::proc_::COMPOUND, args).await;
    assert_eq!(r.body, ReplyBody::success(), "COMPOUND accepted");
    r
}

/// Decodes a COMPOUND4res (nothing may follow it; the tag must be echoed).
pub fn decode_res(results: &Bytes) -> Compound4Res {
    let segs = [results.clone()];
    let mut rd = Reader::new(&segs);
    let res = Compound4Res::decode(&mut rd, &CompoundLimits::default()).expect("COMPOUND4res");
    assert_eq!(rd.remaining(), 0, "nothing after the COMPOUND4res");
    assert_eq!(res.tag, Utf8Str(Bytes::from_static(TAG)), "tag echoed");
    res
}

/// Sends one COMPOUND of `minorversion` and decodes its reply.
pub async fn compound(c: &mut Rpc, minorversion: u32, ops: Vec<NfsArgop4>) -> Compound4Res {
    let r = compound_raw(c, &compound_args(minorversion, ops)).await;
    decode_res(&r.results)
}

/// Channel attributes a test session asks for: 1 MiB each way, 4 KiB cached replies, 16 ops,
/// 4 slots.
pub fn chan() -> ChannelAttrs4 {
    testkit::channel_attrs(CHAN_SLOTS)
}

/// Slots of a test session, each way.
const CHAN_SLOTS: u32 = 4;

/// The boot verifier of every test client.
pub const VERIFIER: [u8; 8] = [7; 8];

/// EXCHANGE_ID for `owner` (the shared test client's, with [`VERIFIER`]).
pub fn exchange_id_op(owner: &[u8]) -> NfsArgop4 {
    testkit::exchange_id(owner, VERIFIER)
}

/// EXCHANGE_ID for `owner`: its result (client id, the sequence id CREATE_SESSION must use,
/// the flags granted).
pub async fn exchange_id_res(c: &mut Rpc, owner: &[u8]) -> ExchangeIdResOk {
    let res = compound(c, 1, vec![exchange_id_op(owner)]).await;
    assert_eq!(res.status, Nfsstat4::OK, "EXCHANGE_ID: {res:?}");
    let Some(NfsResop4::ExchangeId(Res4::Ok(e))) = res.results.first() else {
        panic!("{res:?}")
    };
    e.clone()
}

/// EXCHANGE_ID for `owner`: the client id and the sequence id CREATE_SESSION must use.
pub async fn exchange_id(c: &mut Rpc, owner: &[u8]) -> (u64, u32) {
    let e = exchange_id_res(c, owner).await;
    (e.clientid, e.sequenceid)
}

/// CREATE_SESSION for `clientid` with sequence id `sequence` and the fore channel `fore` (the
/// shared test client's, with the back channel [`chan`]).
pub fn create_session_op(clientid: u64, sequence: u32, fore: ChannelAttrs4) -> NfsArgop4 {
    let cfg = SessionConfig {
        fore: Some(fore),
        ..SessionConfig::new(b"", CHAN_SLOTS)
    };
    testkit::create_session_for(clientid, sequence, &cfg)
}

/// CREATE_SESSION with the fore channel `fore`.
pub async fn create_session_with(
    c: &mut Rpc,
    clientid: u64,
    sequence: u32,
    fore: ChannelAttrs4,
) -> Compound4Res {
    compound(c, 1, vec![create_session_op(clientid, sequence, fore)]).await
}

pub async fn create_session(c: &mut Rpc, clientid: u64, sequence: u32) -> Compound4Res {
    create_session_with(c, clientid, sequence, chan()).await
}

/// SEQUENCE on slot 0, not asking for the reply to be cached.
pub fn sequence(sessionid: SessionId4, sequenceid: u32) -> NfsArgop4 {
    sequence_on(sessionid, 0, sequenceid, false)
}

pub fn sequence_on(
    sessionid: SessionId4,
    slotid: u32,
    sequenceid: u32,
    cachethis: bool,
) -> NfsArgop4 {
    NfsArgop4::Sequence(SequenceArgs {
        sessionid,
        sequenceid,
        slotid,
        highest_slotid: slotid,
        cachethis,
    })
}

pub fn lookup(name: &str) -> NfsArgop4 {
    NfsArgop4::Lookup(Component4(Bytes::copy_from_slice(name.as_bytes())))
}

pub fn component(name: &str) -> Component4 {
    Component4(Bytes::copy_from_slice(name.as_bytes()))
}

/// PUTROOTFH and a LOOKUP per component of `path` (an export's absolute path): the way a
/// client walks the pseudo tree into the export.
pub fn walk_to(path: &Path) -> Vec<NfsArgop4> {
    let mut ops = vec![NfsArgop4::Putrootfh(())];
    for p in path.components() {
        if let std::path::Component::Normal(n) = p {
            ops.push(lookup(n.to_str().expect("utf-8 path")));
        }
    }
    ops
}

/// The attribute values of a GETATTR result.
pub fn attrs(r: &NfsResop4) -> AttrValues {
    match r {
        NfsResop4::Getattr(Res4::Ok(f)) => AttrValues::decode(f).expect("fattr4").values,
        other => panic!("not a GETATTR result: {other:?}"),
    }
}

pub fn statuses(res: &Compound4Res) -> Vec<Nfsstat4> {
    res.results.iter().map(|r| r.status()).collect()
}

/// OPEN of `name` in the current directory by `owner`, creating it (UNCHECKED, mode 0644)
/// when `create`.
pub fn open_op(owner: &str, name: &str, create: bool, access: u32, deny: u32) -> NfsArgop4 {
    let mode = AttrValues {
        mode: Some(0o644),
        ..AttrValues::default()
    };
    NfsArgop4::Open(OpenArgs {
        seqid: 0,
        share_access: access,
        share_deny: deny,
        owner: StateOwner4 {
            clientid: 0,
            owner: Opaque4(Bytes::copy_from_slice(owner.as_bytes())),
        },
        openhow: if create {
            Openflag4::Create(Createhow4::Unchecked(mode.encode()))
        } else {
            Openflag4::NoCreate
        },
        claim: OpenClaim4::Null(component(name)),
    })
}

pub fn close_op(stateid: Stateid4) -> NfsArgop4 {
    NfsArgop4::Close(CloseArgs {
        seqid: 0,
        open_stateid: stateid,
    })
}

pub fn mode_attrs(mode: u32) -> Fattr4 {
    AttrValues {
        mode: Some(mode),
        ..AttrValues::default()
    }
    .encode()
}

/// A client with a confirmed client id and one session: the shared test client's
/// [`Session4`] numbers the SEQUENCEs (slot 0), this owns the connection. Set up as the shared
/// test client is, RECLAIM_COMPLETE included (on the highest slot: `sluice_server::testkit`,
/// "RECLAIM_COMPLETE"), unless made by [`V4::mount_reclaiming`].
pub struct V4 {
    pub rpc: Rpc,
    pub clientid: u64,
    pub sessionid: SessionId4,
    pub session: Session4,
}

impl V4 {
    /// Connects to `s` and sets up a session for `owner` with the default channel.
    pub async fn mount(s: &TestServer, owner: &str) -> V4 {
        Self::mount_with(s, owner, chan()).await
    }

    pub async fn mount_with(s: &TestServer, owner: &str, fore: ChannelAttrs4) -> V4 {
        V4::establish(s.connect().await, owner, fore).await
    }

    /// EXCHANGE_ID, CREATE_SESSION and RECLAIM_COMPLETE for `owner` on `rpc`, with the fore
    /// channel `fore`.
    pub async fn establish(rpc: Rpc, owner: &str, fore: ChannelAttrs4) -> V4 {
        let mut v = V4::establish_reclaiming(rpc, owner, fore).await;
        let ops = v.session.reclaim_complete();
        let res = compound(&mut v.rpc, 1, ops).await;
        // COMPLETE_ALREADY: a further session of a client that completed already.
        assert!(
            matches!(res.status, Nfsstat4::OK | Nfsstat4::COMPLETE_ALREADY),
            "RECLAIM_COMPLETE: {res:?}"
        );
        v
    }

    /// Connects to `s` and sets up a session for `owner` without RECLAIM_COMPLETE: a client
    /// that reclaims first (or a test of what comes before it).
    pub async fn mount_reclaiming(s: &TestServer, owner: &str) -> V4 {
        V4::establish_reclaiming(s.connect().await, owner, chan()).await
    }

    /// EXCHANGE_ID and CREATE_SESSION for `owner` on `rpc`, with the fore channel `fore`.
    pub async fn establish_reclaiming(mut rpc: Rpc, owner: &str, fore: ChannelAttrs4) -> V4 {
        let (clientid, seq) = exchange_id(&mut rpc, owner.as_bytes()).await;
        let res = create_session_with(&mut rpc, clientid, seq, fore).await;
        assert_eq!(res.status, Nfsstat4::OK, "CREATE_SESSION: {res:?}");
        let Some(NfsResop4::CreateSession(Res4::Ok(cs))) = res.results.first() else {
            panic!("{res:?}")
        };
        let session = Session4::new(clientid, cs.clone());
        V4 {
            rpc,
            clientid,
            sessionid: session.sessionid,
            session,
        }
    }

    /// SEQUENCE (slot 0, the next sequence id) and `ops`, in minor version 1.
    pub async fn send(&mut self, ops: Vec<NfsArgop4>) -> Compound4Res {
        self.send_minor(1, ops).await
    }

    /// As [`V4::send`] in minor version `minor`.
    pub async fn send_minor(&mut self, minor: u32, ops: Vec<NfsArgop4>) -> Compound4Res {
        let mut all = vec![self.session.sequence(0, false)];
        all.extend(ops);
        compound(&mut self.rpc, minor, all).await
    }

    /// Opens (and creates, when `create`) `name` in the export at `export`: the OPEN result
    /// and the file's handle.
    pub async fn open(
        &mut self,
        export: &Path,
        owner: &str,
        name: &str,
        create: bool,
        access: u32,
        deny: u32,
    ) -> Result<(OpenResOk, NfsFh4), Nfsstat4> {
        let mut ops = walk_to(export);
        ops.push(open_op(owner, name, create, access, deny));
        ops.push(NfsArgop4::Getfh(()));
        let res = self.send(ops).await;
        if res.status != Nfsstat4::OK {
            return Err(res.status);
        }
        let n = res.results.len();
        let (NfsResop4::Open(Res4::Ok(o)), NfsResop4::Getfh(Res4::Ok(fh))) =
            (&res.results[n - 2], &res.results[n - 1])
        else {
            panic!("{res:?}")
        };
        Ok((o.clone(), fh.clone()))
    }
}
