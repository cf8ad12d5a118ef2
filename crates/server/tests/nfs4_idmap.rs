//! `serve --idmap-domain` over a real socket: owners go out as `name@domain` from the system's
//! user and group databases, and come back the same way; a name from another domain or one the
//! databases do not know is NFS4ERR_BADOWNER on SETATTR, OPEN's create attributes and CREATE;
//! numeric strings are still accepted (RFC 8881 §5.9). Root is the one user every test machine
//! has: `root@<domain>` is uid 0.

#[macro_use]
mod support;

use bytes::Bytes;
use sluice_xdr::nfs4::attrs::{num, AttrValues};
use sluice_xdr::nfs4::compound::{Compound4Args, Compound4Res, CompoundLimits};
use sluice_xdr::nfs4::ops::{
    CallbackSecParmsList, ClientOwner4, CreateArgs, CreateSessionArgs, Createhow4, Createtype4,
    ExchangeIdArgs, ImplIdList, NfsArgop4, NfsResop4, OpenArgs, OpenClaim4, Openflag4, Res4,
    SequenceArgs, SetattrArgs, StateProtect4A, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_DENY_NONE,
};
use sluice_xdr::nfs4::{
    self, Bitmap4, Component4, Fattr4, Nfsstat4, Opaque4, SessionId4, StateOwner4, Stateid4,
    Utf8Str,
};
use sluice_xdr::rpc::ReplyBody;
use sluice_xdr::{Pack, Reader, Writer};
use support::*;

const DOMAIN: &str = "idmap.test";

async fn compound(c: &mut Rpc, ops: Vec<NfsArgop4>) -> Compound4Res {
    let args = Compound4Args {
        tag: Utf8Str(Bytes::new()),
        minorversion: 1,
        ops,
    };
    let mut w = Writer::new();
    args.pack(&mut w);
    let r = c
        .call(nfs4::PROGRAM, 4, nfs4::proc_::COMPOUND, &w.into_bytes())
        .await;
    assert_eq!(r.body, ReplyBody::success(), "COMPOUND accepted");
    let segs = [r.results.clone()];
    Compound4Res::decode(&mut Reader::new(&segs), &CompoundLimits::default()).expect("reply")
}

async fn session(c: &mut Rpc) -> SessionId4 {
    let res = compound(
        c,
        vec![NfsArgop4::ExchangeId(ExchangeIdArgs {
            clientowner: ClientOwner4 {
                verifier: [3; 8],
                ownerid: Opaque4(Bytes::from_static(b"nfs4_idmap client")),
            },
            flags: 0,
            state_protect: StateProtect4A::None,
            client_impl_id: ImplIdList(Vec::new()),
        })],
    )
    .await;
    let Some(NfsResop4::ExchangeId(Res4::Ok(e))) = res.results.first() else {
        panic!("{res:?}")
    };
    // Two slots: slot 1 carries the RECLAIM_COMPLETE a client sends before it creates
    // anything (RFC 8881 §18.51.3), slot 0 is the test's.
    let chan = sluice_server::testkit::channel_attrs(2);
    let res = compound(
        c,
        vec![NfsArgop4::CreateSession(CreateSessionArgs {
            clientid: e.clientid,
            sequence: e.sequenceid,
            flags: 0,
            fore_chan_attrs: chan.clone(),
            back_chan_attrs: chan,
            cb_program: 0x4000_0000,
            sec_parms: CallbackSecParmsList(Vec::new()),
        })],
    )
    .await;
    let Some(NfsResop4::CreateSession(Res4::Ok(s))) = res.results.first() else {
        panic!("{res:?}")
    };
    let sessionid = s.sessionid;
    let res = compound(
        c,
        vec![
            NfsArgop4::Sequence(SequenceArgs {
                sessionid,
                sequenceid: 1,
                slotid: 1,
                highest_slotid: 1,
                cachethis: false,
            }),
            NfsArgop4::ReclaimComplete(false),
        ],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::OK, "RECLAIM_COMPLETE: {res:?}");
    sessionid
}

/// SEQUENCE on slot 0, then PUTROOTFH and LOOKUPs down to the export.
fn into_export(s: &TestServer, sessionid: SessionId4, seqid: u32) -> Vec<NfsArgop4> {
    let mut ops = vec![
        NfsArgop4::Sequence(SequenceArgs {
            sessionid,
            sequenceid: seqid,
            slotid: 0,
            highest_slotid: 0,
            cachethis: false,
        }),
        NfsArgop4::Putrootfh(()),
    ];
    for p in s.export.components() {
        if let std::path::Component::Normal(n) = p {
            ops.push(NfsArgop4::Lookup(Component4(Bytes::copy_from_slice(
                n.as_encoded_bytes(),
            ))));
        }
    }
    ops
}

fn owner_attrs(owner: &str, group: Option<&str>) -> Fattr4 {
    let s = |t: &str| Utf8Str(Bytes::copy_from_slice(t.as_bytes()));
    AttrValues {
        owner: Some(s(owner)),
        owner_group: group.map(s),
        ..AttrValues::default()
    }
    .encode()
}

fn open_create(name: &str, attrs: Fattr4) -> NfsArgop4 {
    NfsArgop4::Open(OpenArgs {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH,
        share_deny: OPEN4_SHARE_DENY_NONE,
        owner: StateOwner4 {
            clientid: 0,
            owner: Opaque4(Bytes::from_static(b"o")),
        },
        openhow: Openflag4::Create(Createhow4::Unchecked(attrs)),
        claim: OpenClaim4::Null(Component4(Bytes::copy_from_slice(name.as_bytes()))),
    })
}

fn setattr(attrs: Fattr4) -> NfsArgop4 {
    NfsArgop4::Setattr(SetattrArgs {
        stateid: Stateid4::ANONYMOUS,
        obj_attributes: attrs,
    })
}

fn mkdir(name: &str, attrs: Fattr4) -> NfsArgop4 {
    NfsArgop4::Create(CreateArgs {
        objtype: Createtype4::Dir,
        objname: Component4(Bytes::copy_from_slice(name.as_bytes())),
        createattrs: attrs,
    })
}

fn last_status(res: &Compound4Res) -> Nfsstat4 {
    res.results.last().map(|r| r.status()).expect("a result")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_are_names_in_the_domain_and_foreign_or_unknown_names_are_badowner() {
    let mut config = rw();
    config.idmap_domain = Some(DOMAIN.to_owned());
    let s = TestServer::start(config).await;
    let mut c = s.connect().await;
    let sid = session(&mut c).await;
    let root = format!("root@{DOMAIN}");
    let group0 = sluice_server::nfs4::idmap::SystemIds;
    let group0 = sluice_server::nfs4::idmap::IdDatabase::group_name(&group0, 0).expect("gid 0");
    let group0 = format!("{group0}@{DOMAIN}");

    // OPEN creates a file owned by root@domain; GETATTR answers with the names.
    let mut ops = into_export(&s, sid, 1);
    ops.push(open_create("f", owner_attrs(&root, Some(&group0))));
    ops.push(NfsArgop4::Getattr(Bitmap4::from_bits(&[
        num::OWNER,
        num::OWNER_GROUP,
    ])));
    let res = compound(&mut c, ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let NfsResop4::Getattr(Res4::Ok(f)) = res.results.last().unwrap() else {
        panic!("{res:?}")
    };
    let v = AttrValues::decode(f).unwrap().values;
    assert_eq!(v.owner, Some(Utf8Str(Bytes::from(root.clone()))));
    assert_eq!(v.owner_group, Some(Utf8Str(Bytes::from(group0.clone()))));
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(s.export.join("f")).unwrap().uid(), 0);

    // SETATTR: root@domain and "0" map to uid 0; another domain or an unknown user do not.
    let cases = [
        (root.clone(), Nfsstat4::OK),
        ("0".to_owned(), Nfsstat4::OK),
        ("root@other.test".to_owned(), Nfsstat4::BADOWNER),
        (format!("no-such-user-sluice@{DOMAIN}"), Nfsstat4::BADOWNER),
        ("root".to_owned(), Nfsstat4::BADOWNER),
    ];
    for (i, (owner, want)) in cases.iter().enumerate() {
        let mut ops = into_export(&s, sid, 2 + i as u32);
        ops.push(NfsArgop4::Lookup(Component4(Bytes::from_static(b"f"))));
        ops.push(setattr(owner_attrs(owner, None)));
        let res = compound(&mut c, ops).await;
        assert_eq!(last_status(&res), *want, "SETATTR owner {owner}");
    }

    // OPEN's create attributes and CREATE refuse a foreign name before creating anything.
    let seq = 2 + cases.len() as u32;
    let mut ops = into_export(&s, sid, seq);
    ops.push(open_create("g", owner_attrs("root@other.test", None)));
    assert_eq!(
        last_status(&compound(&mut c, ops).await),
        Nfsstat4::BADOWNER
    );
    let mut ops = into_export(&s, sid, seq + 1);
    ops.push(mkdir(
        "d",
        owner_attrs(&root, Some("nogroup-sluice@other.test")),
    ));
    assert_eq!(
        last_status(&compound(&mut c, ops).await),
        Nfsstat4::BADOWNER
    );
    assert!(!s.export.join("g").exists() && !s.export.join("d").exists());
    let mut ops = into_export(&s, sid, seq + 2);
    ops.push(mkdir("d", owner_attrs(&root, Some(&group0))));
    assert_eq!(last_status(&compound(&mut c, ops).await), Nfsstat4::OK);
}
