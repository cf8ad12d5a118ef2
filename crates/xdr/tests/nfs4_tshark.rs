//! Checks our NFSv4.1/4.2 encodings against an independent dissector: a capture of hand-built
//! COMPOUND calls and replies (and a CB_COMPOUND on the back channel) is written as a pcap of
//! RPC-over-TCP records and read back by `tshark`, which must find nothing malformed, see the op
//! numbers we sent, and read attribute values where we put them.
//!
//! Needs `tshark` (scripts/install-deps.sh installs it); without it the test fails saying so,
//! unless `SLUICE_TEST_SKIP` names `tshark` (docs/testing.md).

use bytes::Bytes;
use sluice_xdr::nfs4::attrs::AttrValues;
use sluice_xdr::nfs4::callback::{
    CbArgop4, CbCompound4Args, CbCompound4Res, CbRecallArgs, CbResop4, CbSequenceArgs,
    CbSequenceResOk,
};
use sluice_xdr::nfs4::compound::{Compound4Args, Compound4Res};
use sluice_xdr::nfs4::ops::*;
use sluice_xdr::nfs4::*;
use sluice_xdr::{to_bytes, Pack, Payload, Writer};
use std::process::Command;

#[path = "../../../tests/support/needs.rs"]
mod needs;

const SERVER_PORT: u16 = 2049;
const CLIENT_PORT: u16 = 40_123;
const CB_PROGRAM: u32 = 0x4000_0000;

fn fh(n: u8) -> NfsFh4 {
    NfsFh4(Bytes::from(vec![n; 24]))
}

fn seq(slot: u32) -> NfsArgop4 {
    NfsArgop4::Sequence(SequenceArgs {
        sessionid: [7; 16],
        sequenceid: 1,
        slotid: slot,
        highest_slotid: 0,
        cachethis: false,
    })
}

fn seq_res(slot: u32) -> NfsResop4 {
    NfsResop4::Sequence(Res4::Ok(SequenceResOk {
        sessionid: [7; 16],
        sequenceid: 1,
        slotid: slot,
        highest_slotid: 0,
        target_highest_slotid: 15,
        status_flags: 0,
    }))
}

fn compound(ops: Vec<NfsArgop4>) -> Compound4Args {
    Compound4Args {
        tag: Utf8Str::default(),
        minorversion: 2,
        ops,
    }
}

fn reply(results: Vec<NfsResop4>) -> Compound4Res {
    Compound4Res {
        status: results.last().map(|r| r.status()).unwrap_or(Nfsstat4::OK),
        tag: Utf8Str::default(),
        results,
    }
}

/// The calls and replies of the capture, in order.
fn exchanges() -> Vec<(Compound4Args, Compound4Res)> {
    let attrs = AttrValues {
        ftype: Some(Ftype4::REG),
        change: Some(99),
        size: Some(123_456_789),
        fsid: Some(Fsid4 { major: 1, minor: 2 }),
        fileid: Some(4242),
        mode: Some(0o644),
        numlinks: Some(1),
        owner: Some(Utf8Str::from(&b"1000"[..])),
        owner_group: Some(Utf8Str::from(&b"1000"[..])),
        time_modify: Some(Nfstime4 {
            seconds: 1_700_000_000,
            nseconds: 5,
        }),
        mounted_on_fileid: Some(4242),
        ..Default::default()
    };
    let getattr_mask = Bitmap4::from_bits(&[1, 3, 4, 8, 20, 33, 35, 36, 37, 53, 55]);
    let stateid = Stateid4 {
        seqid: 1,
        other: [9; 12],
    };
    vec![
        (
            compound(vec![NfsArgop4::ExchangeId(ExchangeIdArgs {
                clientowner: ClientOwner4 {
                    verifier: [1; 8],
                    ownerid: Opaque4::from(&b"sluice test client"[..]),
                },
                flags: EXCHGID4_FLAG_USE_NON_PNFS,
                state_protect: StateProtect4A::None,
                client_impl_id: ImplIdList(vec![]),
            })]),
            reply(vec![NfsResop4::ExchangeId(Res4::Ok(ExchangeIdResOk {
                clientid: 0x1234,
                sequenceid: 1,
                flags: EXCHGID4_FLAG_USE_NON_PNFS,
                state_protect: StateProtect4R::None,
                server_owner: ServerOwner4 {
                    minor_id: 0,
                    major_id: Opaque4::from(&b"sluice"[..]),
                },
                server_scope: Opaque4::from(&b"sluice"[..]),
                server_impl_id: ImplIdList(vec![]),
            }))]),
        ),
        (
            compound(vec![NfsArgop4::CreateSession(CreateSessionArgs {
                clientid: 0x1234,
                sequence: 1,
                flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
                fore_chan_attrs: ChannelAttrs4 {
                    maxrequestsize: 1 << 20,
                    maxresponsesize: 1 << 20,
                    maxoperations: 16,
                    maxrequests: 64,
                    ..Default::default()
                },
                back_chan_attrs: ChannelAttrs4::default(),
                cb_program: CB_PROGRAM,
                sec_parms: CallbackSecParmsList(vec![CallbackSecParms4::AuthNone]),
            })]),
            reply(vec![NfsResop4::CreateSession(Res4::Ok(
                CreateSessionResOk {
                    sessionid: [7; 16],
                    sequence: 1,
                    flags: 0,
                    fore_chan_attrs: ChannelAttrs4::default(),
                    back_chan_attrs: ChannelAttrs4::default(),
                },
            ))]),
        ),
        (
            compound(vec![
                seq(0),
                NfsArgop4::Putrootfh(()),
                NfsArgop4::Lookup(Component4::from(&b"export"[..])),
                NfsArgop4::Getfh(()),
                NfsArgop4::Getattr(getattr_mask.clone()),
            ]),
            reply(vec![
                seq_res(0),
                NfsResop4::Putrootfh(Nfsstat4::OK),
                NfsResop4::Lookup(Nfsstat4::OK),
                NfsResop4::Getfh(Res4::Ok(fh(1))),
                NfsResop4::Getattr(Res4::Ok(attrs.encode_masked(Some(&getattr_mask)))),
            ]),
        ),
        (
            compound(vec![
                seq(1),
                NfsArgop4::Putfh(fh(1)),
                NfsArgop4::Open(OpenArgs {
                    seqid: 0,
                    share_access: OPEN4_SHARE_ACCESS_BOTH | OPEN4_SHARE_WANT_NO_DELEG,
                    share_deny: OPEN4_SHARE_DENY_NONE,
                    owner: OpenOwner4 {
                        clientid: 0x1234,
                        owner: Opaque4::from(&b"open-owner"[..]),
                    },
                    openhow: Openflag4::Create(Createhow4::Unchecked(
                        AttrValues {
                            mode: Some(0o600),
                            ..Default::default()
                        }
                        .encode(),
                    )),
                    claim: OpenClaim4::Null(Component4::from(&b"file"[..])),
                }),
                NfsArgop4::Getfh(()),
            ]),
            reply(vec![
                seq_res(1),
                NfsResop4::Putfh(Nfsstat4::OK),
                NfsResop4::Open(Res4::Ok(OpenResOk {
                    stateid,
                    cinfo: ChangeInfo4 {
                        atomic: true,
                        before: 1,
                        after: 2,
                    },
                    rflags: OPEN4_RESULT_LOCKTYPE_POSIX,
                    attrset: Bitmap4::from_bits(&[33]),
                    delegation: OpenDelegation4::NoneExt(OpenNoneDelegation4::Why(WND4_NOT_WANTED)),
                })),
                NfsResop4::Getfh(Res4::Ok(fh(2))),
            ]),
        ),
        (
            compound(vec![
                seq(2),
                NfsArgop4::Putfh(fh(2)),
                NfsArgop4::Write(WriteArgs {
                    stateid,
                    offset: 0,
                    stable: StableHow4::UNSTABLE,
                    data: Payload::from(vec![b'x'; 101]),
                }),
            ]),
            reply(vec![
                seq_res(2),
                NfsResop4::Putfh(Nfsstat4::OK),
                NfsResop4::Write(Res4::Ok(WriteResOk {
                    count: 101,
                    committed: StableHow4::UNSTABLE,
                    writeverf: [3; 8],
                })),
            ]),
        ),
        (
            compound(vec![
                seq(3),
                NfsArgop4::Putfh(fh(2)),
                NfsArgop4::Read(ReadArgs {
                    stateid,
                    offset: 0,
                    count: 4096,
                }),
            ]),
            reply(vec![
                seq_res(3),
                NfsResop4::Putfh(Nfsstat4::OK),
                NfsResop4::Read(Res4::Ok(ReadResOk {
                    eof: true,
                    data: Payload::from(vec![b'x'; 101]),
                })),
            ]),
        ),
        (
            compound(vec![
                seq(4),
                NfsArgop4::Putfh(fh(2)),
                NfsArgop4::Lock(LockArgs {
                    locktype: WRITE_LT,
                    reclaim: false,
                    offset: 0,
                    length: u64::MAX,
                    locker: Locker4::New(OpenToLockOwner4 {
                        open_seqid: 0,
                        open_stateid: stateid,
                        lock_seqid: 0,
                        lock_owner: LockOwner4 {
                            clientid: 0x1234,
                            owner: Opaque4::from(&b"lock-owner"[..]),
                        },
                    }),
                }),
            ]),
            reply(vec![
                seq_res(4),
                NfsResop4::Putfh(Nfsstat4::OK),
                NfsResop4::Lock(LockRes::Denied(Lock4Denied {
                    offset: 0,
                    length: 10,
                    locktype: READ_LT,
                    owner: LockOwner4 {
                        clientid: 0x5678,
                        owner: Opaque4::from(&b"other"[..]),
                    },
                })),
            ]),
        ),
        (
            compound(vec![
                seq(5),
                NfsArgop4::Putfh(fh(1)),
                NfsArgop4::Readdir(ReaddirArgs {
                    cookie: 0,
                    cookieverf: [0; 8],
                    dircount: 4096,
                    maxcount: 32768,
                    attr_request: Bitmap4::from_bits(&[1, 20]),
                }),
            ]),
            reply(vec![
                seq_res(5),
                NfsResop4::Putfh(Nfsstat4::OK),
                NfsResop4::Readdir(Res4::Ok(ReaddirResOk {
                    cookieverf: [5; 8],
                    entries: vec![
                        Entry4 {
                            cookie: 3,
                            name: Component4::from(&b"file"[..]),
                            attrs: AttrValues {
                                ftype: Some(Ftype4::REG),
                                fileid: Some(77),
                                ..Default::default()
                            }
                            .encode(),
                        },
                        Entry4 {
                            cookie: 4,
                            name: Component4::from(&b"dir"[..]),
                            attrs: AttrValues {
                                ftype: Some(Ftype4::DIR),
                                fileid: Some(78),
                                ..Default::default()
                            }
                            .encode(),
                        },
                    ],
                    eof: true,
                })),
            ]),
        ),
        (
            compound(vec![
                seq(6),
                NfsArgop4::Putfh(fh(2)),
                NfsArgop4::Seek(SeekArgs {
                    stateid,
                    offset: 0,
                    what: NFS4_CONTENT_HOLE,
                }),
                NfsArgop4::Allocate(AllocateArgs {
                    stateid,
                    offset: 0,
                    length: 1 << 20,
                }),
                NfsArgop4::Close(CloseArgs {
                    seqid: 0,
                    open_stateid: stateid,
                }),
            ]),
            reply(vec![
                seq_res(6),
                NfsResop4::Putfh(Nfsstat4::OK),
                NfsResop4::Seek(Res4::Ok(SeekResOk {
                    eof: true,
                    offset: 101,
                })),
                NfsResop4::Allocate(Nfsstat4::OK),
                NfsResop4::Close(Res4::Ok(Stateid4::INVALID)),
            ]),
        ),
    ]
}

fn callback() -> (CbCompound4Args, CbCompound4Res) {
    let sessionid = [7; 16];
    (
        CbCompound4Args {
            tag: Utf8Str::default(),
            minorversion: 1,
            callback_ident: 0,
            ops: vec![
                CbArgop4::Sequence(CbSequenceArgs {
                    sessionid,
                    sequenceid: 1,
                    slotid: 0,
                    highest_slotid: 0,
                    cachethis: false,
                    referring_call_lists: Default::default(),
                }),
                CbArgop4::Recall(CbRecallArgs {
                    stateid: Stateid4 {
                        seqid: 1,
                        other: [8; 12],
                    },
                    truncate: false,
                    fh: fh(2),
                }),
            ],
        },
        CbCompound4Res {
            status: Nfsstat4::OK,
            tag: Utf8Str::default(),
            results: vec![
                CbResop4::Sequence(Res4::Ok(CbSequenceResOk {
                    sessionid,
                    sequenceid: 1,
                    slotid: 0,
                    highest_slotid: 0,
                    target_highest_slotid: 0,
                })),
                CbResop4::Recall(Nfsstat4::OK),
            ],
        },
    )
}

// --- RPC and pcap framing ---------------------------------------------------------------------

fn rpc_call(xid: u32, prog: u32, vers: u32, body: &impl Pack) -> Vec<u8> {
    let mut w = Writer::new();
    for v in [xid, 0, 2, prog, vers, 1, 0, 0, 0, 0] {
        // CALL, RPC version 2, procedure 1 (COMPOUND), AUTH_NONE credential and verifier
        w.put_u32(v);
    }
    body.pack(&mut w);
    w.into_bytes().to_vec()
}

fn rpc_reply(xid: u32, body: &impl Pack) -> Vec<u8> {
    let mut w = Writer::new();
    for v in [xid, 1, 0, 0, 0, 0] {
        // REPLY, MSG_ACCEPTED, AUTH_NONE verifier, SUCCESS
        w.put_u32(v);
    }
    body.pack(&mut w);
    w.into_bytes().to_vec()
}

struct Pcap {
    out: Vec<u8>,
    seq_to_server: u32,
    seq_to_client: u32,
}

impl Pcap {
    fn new() -> Self {
        let mut out = Vec::new();
        out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes()); // pcap magic, microseconds
        out.extend_from_slice(&2u16.to_le_bytes());
        out.extend_from_slice(&4u16.to_le_bytes());
        out.extend_from_slice(&0i32.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&262_144u32.to_le_bytes());
        out.extend_from_slice(&1u32.to_le_bytes()); // Ethernet
        Pcap {
            out,
            seq_to_server: 1000,
            seq_to_client: 5000,
        }
    }

    /// One RPC record (with its last-fragment marker) in one TCP segment.
    fn record(&mut self, to_server: bool, msg: &[u8]) {
        let mut payload = (0x8000_0000u32 | msg.len() as u32).to_be_bytes().to_vec();
        payload.extend_from_slice(msg);
        let (sport, dport, seq, ack) = if to_server {
            (
                CLIENT_PORT,
                SERVER_PORT,
                self.seq_to_server,
                self.seq_to_client,
            )
        } else {
            (
                SERVER_PORT,
                CLIENT_PORT,
                self.seq_to_client,
                self.seq_to_server,
            )
        };
        let mut tcp = Vec::new();
        tcp.extend_from_slice(&sport.to_be_bytes());
        tcp.extend_from_slice(&dport.to_be_bytes());
        tcp.extend_from_slice(&seq.to_be_bytes());
        tcp.extend_from_slice(&ack.to_be_bytes());
        tcp.extend_from_slice(&[0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]); // 20 bytes, PSH|ACK
        tcp.extend_from_slice(&payload);
        let mut ip = vec![0x45, 0];
        ip.extend_from_slice(&((20 + tcp.len()) as u16).to_be_bytes());
        ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1]);
        ip.extend_from_slice(&tcp);
        let mut frame = vec![0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 0x08, 0x00];
        frame.extend_from_slice(&ip);
        let n = self.out.len() as u32; // a distinct, increasing timestamp
        self.out.extend_from_slice(&1_700_000_000u32.to_le_bytes());
        self.out.extend_from_slice(&n.to_le_bytes());
        self.out
            .extend_from_slice(&(frame.len() as u32).to_le_bytes());
        self.out
            .extend_from_slice(&(frame.len() as u32).to_le_bytes());
        self.out.extend_from_slice(&frame);
        if to_server {
            self.seq_to_server += payload.len() as u32;
        } else {
            self.seq_to_client += payload.len() as u32;
        }
    }
}

fn tshark(pcap: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args(["-d", "tcp.port==2049,rpc"])
        .args(args)
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn tshark_reads_our_compounds_as_we_meant_them() {
    if let Err(e) = Command::new("tshark").arg("--version").output() {
        return needs::missing(
            "tshark",
            &format!("cannot run tshark: {e}"),
            "Install it: apt-get install tshark (or bash scripts/install-deps.sh)",
        );
    }
    let mut pcap = Pcap::new();
    let mut want_ops = Vec::new();
    for (i, (call, res)) in exchanges().iter().enumerate() {
        let xid = 100 + i as u32;
        pcap.record(true, &rpc_call(xid, PROGRAM, VERSION, call));
        pcap.record(false, &rpc_reply(xid, res));
        want_ops.extend(call.ops.iter().map(|o| o.opnum().0));
        assert_eq!(to_bytes(call).len() % 4, 0);
    }
    let (cb, cb_res) = callback();
    pcap.record(false, &rpc_call(900, CB_PROGRAM, 1, &cb));
    pcap.record(true, &rpc_reply(900, &cb_res));

    let path = std::env::temp_dir().join(format!("sluice-nfs4-tshark-{}.pcap", std::process::id()));
    std::fs::write(&path, &pcap.out).unwrap();

    let malformed = tshark(
        &path,
        &["-Y", "_ws.malformed || _ws.expert.severity >= error"],
    );
    assert!(
        malformed.trim().is_empty(),
        "tshark found malformed frames:\n{malformed}"
    );

    // The op numbers of the calls, as tshark read them (calls only: replies repeat them).
    let ops = tshark(
        &path,
        &[
            "-Y",
            "rpc.msgtyp == 0 && rpc.program == 100003",
            "-T",
            "fields",
            "-e",
            "nfs.opcode",
        ],
    );
    let got: Vec<u32> = ops
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(got, want_ops);

    // Attribute values land where we put them (bit order in the GETATTR reply).
    let size = tshark(
        &path,
        &[
            "-Y",
            "nfs.fattr4.size",
            "-T",
            "fields",
            "-e",
            "nfs.fattr4.size",
        ],
    );
    assert_eq!(size.trim(), "123456789");
    let _ = std::fs::remove_file(&path);
}
