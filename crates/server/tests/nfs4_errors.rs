//! NFSv4.1 error paths over a real socket (issue #30): the errors RFC 8881's per-op tables
//! (§15.2, §15.3) and its prose require, checked where sluice once answered another one or
//! went on running. Each test is named for the rule it holds; the table maps them to the RFC.
//! The CB_RECALL resend is `nfs4_errors_recall.rs`'s (it needs a client with a back channel).
//!
//! | RFC 8881 | behaviour | test |
//! |---|---|---|
//! | §16.2.3.1.2 | PUTFH, PUTROOTFH and LOOKUP clear the current stateid; SAVEFH / RESTOREFH keep it with the handle | `current_stateid::a_new_current_handle_clears_the_current_stateid` |
//! | §16.2.3.1.2, §18.38.3 | FREE_STATEID resolves the current stateid (LOCKS_HELD through it) | `current_stateid::free_stateid_takes_the_current_stateid` |
//! | §18.13.3, §18.14.3, §18.22.3 | an op that needs a directory answers SYMLINK on a symlink, NOTDIR on a file; READ of a symlink is SYMLINK | `symlinks::directory_ops_on_a_symlink_answer_symlink` |
//! | §2.10.6.4, §18.46.3 | SEQUENCE's own result is checked against the (cached) reply limit, before the slot | `reply_limits::a_sequence_that_does_not_fit_the_cached_limit_is_rep_too_big_to_cache` |
//! | §18.36.3 | CREATE_SESSION grants small fore channels down to one SEQUENCE (knfsd's 64 bytes); the COMPOUNDs then meet REQ/REP_TOO_BIG | `small_channels::small_fore_channels_get_a_session_and_then_too_big` |
//! | §18.37.3 | DESTROY_SESSION of the COMPOUND's own session not last: NOT_ONLY_OP, nothing after it runs | `destroy_own_session::destroying_the_own_session_mid_compound_is_not_only_op` |
//! | §15.1.7 | a new name (CREATE, OPEN create, RENAME, LINK) not UTF-8 is INVAL; an existing one stays reachable; "." and ".." are BADNAME in every op that takes a component | `names::names_not_utf8_are_inval_where_made_and_dot_names_are_badname` |
//! | §18.24.3 | READLINK of any directory is ISDIR, a pseudo-tree one too | `readlink::readlink_of_any_directory_is_isdir` |
//! | §18.9.3 | LINK of a directory (the saved handle) is ISDIR, not the file system's PERM | `link::link_of_a_directory_is_isdir` |
//! | §18.16.3 | OPEN4_CREATE with any claim but CLAIM_NULL is INVAL (delegation claims too), before grace and RECLAIM_COMPLETE are asked | `open_claims::only_claim_null_creates` |

#[macro_use]
mod support;

use sluice_xdr::nfs4::ops::{NfsArgop4, NfsResop4};
use sluice_xdr::nfs4::Nfsstat4;
use support::nfs4::*;
use support::{rw, TestServer};

/// The export's directory, then `ops`.
fn in_export(s: &TestServer, ops: Vec<NfsArgop4>) -> Vec<NfsArgop4> {
    let mut all = walk_to(&s.export);
    all.extend(ops);
    all
}

/// The current stateid (issue #30, item 1).
mod current_stateid {
    use super::*;
    use bytes::Bytes;
    use sluice_xdr::nfs4::ops::{
        LockArgs, LockRes, Locker4, OpenToLockOwner4, OPEN4_SHARE_ACCESS_BOTH, WRITE_LT,
    };
    use sluice_xdr::nfs4::{LockOwner4, Opaque4, Stateid4};

    /// The status of the last result, and how many results there were.
    fn last(res: &sluice_xdr::nfs4::compound::Compound4Res) -> (Nfsstat4, usize) {
        (
            res.results.last().map_or(Nfsstat4::OK, |r| r.status()),
            res.results.len(),
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_new_current_handle_clears_the_current_stateid() {
        let s = TestServer::start(rw()).await;
        let mut v = V4::mount(&s, "current stateid").await;
        let (_, fh) = v
            .open(&s.export, "o", "f", true, OPEN4_SHARE_ACCESS_BOTH, 0)
            .await
            .unwrap();
        let walk = walk_to(&s.export).len();
        // Each op that sets a handle and no stateid, between OPEN and CLOSE(current): the CLOSE
        // has no current stateid to use.
        let between: [(&str, Vec<NfsArgop4>); 3] = [
            ("PUTFH", vec![NfsArgop4::Putfh(fh.clone())]),
            ("PUTROOTFH", vec![NfsArgop4::Putrootfh(())]),
            ("LOOKUP", [walk_to(&s.export), vec![lookup("f")]].concat()),
        ];
        for (name, ops) in between {
            let mut all = vec![open_op("o", "f", false, OPEN4_SHARE_ACCESS_BOTH, 0)];
            all.extend(ops);
            all.push(close_op(Stateid4::CURRENT));
            let res = v.send(in_export(&s, all)).await;
            assert_eq!(
                res.status,
                Nfsstat4::BAD_STATEID,
                "CLOSE(current) after {name}: {res:?}"
            );
            assert!(
                matches!(res.results.last(), Some(NfsResop4::Close(_))),
                "{res:?}"
            );
        }
        // SAVEFH keeps the stateid with the handle and RESTOREFH brings both back.
        let res = v
            .send(in_export(
                &s,
                vec![
                    open_op("o", "f", false, OPEN4_SHARE_ACCESS_BOTH, 0),
                    NfsArgop4::Savefh(()),
                    NfsArgop4::Putrootfh(()),
                    NfsArgop4::Restorefh(()),
                    close_op(Stateid4::CURRENT),
                ],
            ))
            .await;
        assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
        assert_eq!(last(&res), (Nfsstat4::OK, walk + 6));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn free_stateid_takes_the_current_stateid() {
        let s = TestServer::start(rw()).await;
        let mut v = V4::mount(&s, "free current").await;
        let (o, fh) = v
            .open(&s.export, "o", "f", true, OPEN4_SHARE_ACCESS_BOTH, 0)
            .await
            .unwrap();
        // LOCK sets the current stateid to the lock stateid, which holds a lock: FREE_STATEID
        // of it is LOCKS_HELD, not BAD_STATEID.
        let res = v
            .send(vec![
                NfsArgop4::Putfh(fh),
                NfsArgop4::Lock(LockArgs {
                    locktype: WRITE_LT,
                    reclaim: false,
                    offset: 0,
                    length: 10,
                    locker: Locker4::New(OpenToLockOwner4 {
                        open_seqid: 0,
                        open_stateid: o.stateid,
                        lock_seqid: 0,
                        lock_owner: LockOwner4 {
                            clientid: 0,
                            owner: Opaque4(Bytes::from_static(b"lo")),
                        },
                    }),
                }),
                NfsArgop4::FreeStateid(Stateid4::CURRENT),
            ])
            .await;
        assert!(
            matches!(res.results.get(2), Some(NfsResop4::Lock(LockRes::Ok(_)))),
            "{res:?}"
        );
        assert_eq!(res.status, Nfsstat4::LOCKS_HELD, "{res:?}");
        // With no current stateid at all: BAD_STATEID.
        let res = v
            .send(vec![NfsArgop4::FreeStateid(Stateid4::CURRENT)])
            .await;
        assert_eq!(res.status, Nfsstat4::BAD_STATEID, "{res:?}");
    }
}

/// SYMLINK where a directory (or a regular file) is needed (issue #30, item 2).
mod symlinks {
    use super::*;
    use bytes::Bytes;
    use sluice_xdr::nfs4::ops::{
        CreateArgs, Createtype4, ReadArgs, ReaddirArgs, RenameArgs, OPEN4_SHARE_ACCESS_BOTH,
    };
    use sluice_xdr::nfs4::{Bitmap4, Linktext4, NfsFh4, Stateid4};

    /// CREATE of a symlink `name` to `target` in the current directory.
    fn symlink_op(name: &str, target: &'static [u8]) -> NfsArgop4 {
        NfsArgop4::Create(CreateArgs {
            objtype: Createtype4::Lnk(Linktext4(Bytes::from_static(target))),
            objname: component(name),
            createattrs: Default::default(),
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn directory_ops_on_a_symlink_answer_symlink() {
        let s = TestServer::start(rw()).await;
        std::fs::create_dir(s.export.join("d")).unwrap();
        std::fs::write(s.export.join("f"), b"x").unwrap();
        let mut v = V4::mount(&s, "symlink ops").await;
        let res = v
            .send(in_export(
                &s,
                vec![symlink_op("ln", b"d"), NfsArgop4::Getfh(())],
            ))
            .await;
        assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
        let Some(NfsResop4::Getfh(sluice_xdr::nfs4::ops::Res4::Ok(link))) = res.results.last()
        else {
            panic!("{res:?}")
        };
        let res = v
            .send(in_export(&s, vec![lookup("f"), NfsArgop4::Getfh(())]))
            .await;
        let Some(NfsResop4::Getfh(sluice_xdr::nfs4::ops::Res4::Ok(file))) = res.results.last()
        else {
            panic!("{res:?}")
        };
        let ops = |dir: &NfsFh4| -> Vec<(&'static str, Vec<NfsArgop4>)> {
            vec![
                ("LOOKUP", vec![NfsArgop4::Putfh(dir.clone()), lookup("x")]),
                (
                    "LOOKUPP",
                    vec![NfsArgop4::Putfh(dir.clone()), NfsArgop4::Lookupp(())],
                ),
                (
                    "CREATE",
                    vec![NfsArgop4::Putfh(dir.clone()), symlink_op("y", b"z")],
                ),
                (
                    "OPEN",
                    vec![
                        NfsArgop4::Putfh(dir.clone()),
                        open_op("o", "x", true, OPEN4_SHARE_ACCESS_BOTH, 0),
                    ],
                ),
                (
                    "REMOVE",
                    vec![
                        NfsArgop4::Putfh(dir.clone()),
                        NfsArgop4::Remove(component("x")),
                    ],
                ),
                (
                    "READDIR",
                    vec![
                        NfsArgop4::Putfh(dir.clone()),
                        NfsArgop4::Readdir(ReaddirArgs {
                            cookie: 0,
                            cookieverf: [0; 8],
                            dircount: 4096,
                            maxcount: 8192,
                            attr_request: Bitmap4::default(),
                        }),
                    ],
                ),
                (
                    "RENAME",
                    vec![
                        NfsArgop4::Putfh(dir.clone()),
                        NfsArgop4::Savefh(()),
                        NfsArgop4::Rename(RenameArgs {
                            oldname: component("x"),
                            newname: component("y"),
                        }),
                    ],
                ),
            ]
        };
        // READ wants a regular file: SYMLINK on a symlink (§18.22.3), ISDIR on a directory.
        let read = |fh: &NfsFh4| {
            vec![
                NfsArgop4::Putfh(fh.clone()),
                NfsArgop4::Read(ReadArgs {
                    stateid: Stateid4::ANONYMOUS,
                    offset: 0,
                    count: 1,
                }),
            ]
        };
        let res = v.send(read(link)).await;
        assert_eq!(res.status, Nfsstat4::SYMLINK, "READ of a symlink: {res:?}");
        for (handle, want) in [(link, Nfsstat4::SYMLINK), (file, Nfsstat4::NOTDIR)] {
            for (name, ops) in ops(handle) {
                let res = v.send(ops).await;
                assert_eq!(res.status, want, "{name} on a {want:?} handle: {res:?}");
            }
        }
    }
}

/// SEQUENCE's own result against the reply limits (issue #30, item 4).
mod reply_limits {
    use super::*;

    /// Bytes of a reply of SEQUENCE alone with the test tag: status, tag (4 + 8), result count,
    /// SEQUENCE's result (44).
    const SEQUENCE_ALONE_REPLY_BYTES: u32 = 4 + 12 + 4 + 44;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sequence_that_does_not_fit_the_cached_limit_is_rep_too_big_to_cache() {
        let s = TestServer::start(rw()).await;
        let fore = sluice_xdr::nfs4::ops::ChannelAttrs4 {
            maxresponsesize_cached: SEQUENCE_ALONE_REPLY_BYTES - 1,
            ..chan()
        };
        let mut v = V4::mount_with(&s, "tiny cache", fore).await;
        let sid = v.sessionid;
        let res = compound(&mut v.rpc, 1, vec![sequence_on(sid, 0, 1, true)]).await;
        assert_eq!(res.status, Nfsstat4::REP_TOO_BIG_TO_CACHE, "{res:?}");
        assert_eq!(statuses(&res), vec![Nfsstat4::REP_TOO_BIG_TO_CACHE]);
        // The slot was not used: sequence id 1 again, uncached, runs.
        let res = compound(
            &mut v.rpc,
            1,
            vec![sequence_on(sid, 0, 1, false), NfsArgop4::Putrootfh(())],
        )
        .await;
        assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    }
}

/// Small fore channels (issue #30, item 5).
mod small_channels {
    use super::*;
    use sluice_xdr::nfs4::ops::ReadArgs;
    use sluice_xdr::nfs4::Stateid4;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn small_fore_channels_get_a_session_and_then_too_big() {
        let s = TestServer::start(rw()).await;
        let mut rpc = s.connect().await;
        let (clientid, seq) = exchange_id(&mut rpc, b"small channel").await;
        // Below one SEQUENCE: TOOSMALL.
        let tiny = sluice_xdr::nfs4::ops::ChannelAttrs4 {
            maxresponsesize: 63,
            ..chan()
        };
        let res = create_session_with(&mut rpc, clientid, seq, tiny).await;
        assert_eq!(res.status, Nfsstat4::TOOSMALL, "{res:?}");
        // 400 / 512 bytes: granted as asked.
        let small = sluice_xdr::nfs4::ops::ChannelAttrs4 {
            maxrequestsize: 400,
            maxresponsesize: 512,
            ..chan()
        };
        let mut v = V4::establish(rpc, "small channel", small).await;
        let sid = v.sessionid;
        // A LOOKUP of a 500-byte name does not fit 400 bytes of request.
        let long = "n".repeat(500);
        let res = compound(
            &mut v.rpc,
            1,
            vec![
                sequence_on(sid, 0, 1, false),
                NfsArgop4::Putrootfh(()),
                lookup(&long),
            ],
        )
        .await;
        assert_eq!(statuses(&res), vec![Nfsstat4::REQ_TOO_BIG], "{res:?}");
        // A READ of 1000 bytes does not fit 512 bytes of reply: REP_TOO_BIG on the READ.
        std::fs::write(s.export.join("data"), vec![b'x'; 1000]).unwrap();
        let mut ops = vec![sequence_on(sid, 0, 1, false)];
        ops.extend(walk_to(&s.export));
        ops.push(lookup("data"));
        ops.push(NfsArgop4::Read(ReadArgs {
            stateid: Stateid4::ANONYMOUS,
            offset: 0,
            count: 1000,
        }));
        let n = ops.len();
        let res = compound(&mut v.rpc, 1, ops).await;
        assert_eq!(res.status, Nfsstat4::REP_TOO_BIG, "{:?}", statuses(&res));
        assert_eq!(res.results.len(), n);
        assert!(matches!(res.results[n - 1], NfsResop4::Read(_)), "{res:?}");
    }
}

/// DESTROY_SESSION of the COMPOUND's own session (issue #30, item 6).
mod destroy_own_session {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn destroying_the_own_session_mid_compound_is_not_only_op() {
        let s = TestServer::start(rw()).await;
        let mut v = V4::mount(&s, "destroy own").await;
        let sid = v.sessionid;
        let res = v
            .send(vec![
                NfsArgop4::DestroySession(sid),
                NfsArgop4::Putrootfh(()),
            ])
            .await;
        assert_eq!(res.status, Nfsstat4::NOT_ONLY_OP, "{res:?}");
        assert_eq!(statuses(&res), vec![Nfsstat4::OK, Nfsstat4::NOT_ONLY_OP]);
        // The session lives on; as the last op, DESTROY_SESSION of it runs.
        let res = v.send(vec![NfsArgop4::Putrootfh(())]).await;
        assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
        let res = v.send(vec![NfsArgop4::DestroySession(sid)]).await;
        assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
        let res = v.send(vec![NfsArgop4::Putrootfh(())]).await;
        assert_eq!(res.status, Nfsstat4::BADSESSION, "{res:?}");
    }
}

/// Names: UTF-8 and "." / ".." (issue #30, item 9).
mod names {
    use super::*;
    use bytes::Bytes;
    use sluice_xdr::nfs4::ops::{CreateArgs, Createtype4, RenameArgs, OPEN4_SHARE_ACCESS_BOTH};

    /// A component of raw bytes.
    fn raw(name: &'static [u8]) -> sluice_xdr::nfs4::Component4 {
        sluice_xdr::nfs4::Component4(Bytes::from_static(name))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn names_not_utf8_are_inval_where_made_and_dot_names_are_badname() {
        use std::os::unix::ffi::OsStrExt;
        let s = TestServer::start(rw()).await;
        std::fs::write(s.export.join("f"), b"x").unwrap();
        // A name some local program wrote in Latin-1: still reachable.
        let latin1: &'static [u8] = b"caf\xe9";
        std::fs::write(s.export.join(std::ffi::OsStr::from_bytes(latin1)), b"y").unwrap();
        let mut v = V4::mount(&s, "names").await;
        let fh_of = |res: &sluice_xdr::nfs4::compound::Compound4Res| match res.results.last() {
            Some(NfsResop4::Getfh(sluice_xdr::nfs4::ops::Res4::Ok(fh))) => fh.clone(),
            _ => panic!("{res:?}"),
        };
        let file = fh_of(
            &v.send(in_export(&s, vec![lookup("f"), NfsArgop4::Getfh(())]))
                .await,
        );
        let res = v
            .send(in_export(&s, vec![NfsArgop4::Lookup(raw(latin1))]))
            .await;
        assert_eq!(
            res.status,
            Nfsstat4::OK,
            "LOOKUP of an existing Latin-1 name: {res:?}"
        );
        let bad: &'static [u8] = b"bad\xff\xfe";
        let made: Vec<(&str, Vec<NfsArgop4>)> = vec![
            (
                "CREATE",
                vec![NfsArgop4::Create(CreateArgs {
                    objtype: Createtype4::Dir,
                    objname: raw(bad),
                    createattrs: Default::default(),
                })],
            ),
            ("OPEN create", vec![open_raw(bad, true)]),
            (
                "RENAME",
                vec![
                    NfsArgop4::Savefh(()),
                    NfsArgop4::Rename(RenameArgs {
                        oldname: component("f"),
                        newname: raw(bad),
                    }),
                ],
            ),
            (
                "LINK",
                [
                    vec![NfsArgop4::Putfh(file.clone()), NfsArgop4::Savefh(())],
                    walk_to(&s.export),
                    vec![NfsArgop4::Link(raw(bad))],
                ]
                .concat(),
            ),
        ];
        for (name, ops) in made {
            let res = v.send(in_export(&s, ops)).await;
            assert_eq!(
                res.status,
                Nfsstat4::INVAL,
                "{name} of a name not UTF-8: {res:?}"
            );
        }
        assert!(s.export.join("f").exists(), "nothing renamed");
        // "." and "..": BADNAME in every op that takes a component (knfsd's `check_filename`).
        for dot in [&b"."[..], &b".."[..]] {
            let dot: &'static [u8] = if dot == b"." { b"." } else { b".." };
            let ops: Vec<(&str, Vec<NfsArgop4>)> = vec![
                ("LOOKUP", vec![NfsArgop4::Lookup(raw(dot))]),
                ("REMOVE", vec![NfsArgop4::Remove(raw(dot))]),
                ("SECINFO", vec![NfsArgop4::Secinfo(raw(dot))]),
                ("OPEN", vec![open_raw(dot, false)]),
                (
                    "CREATE",
                    vec![NfsArgop4::Create(CreateArgs {
                        objtype: Createtype4::Dir,
                        objname: raw(dot),
                        createattrs: Default::default(),
                    })],
                ),
                (
                    "RENAME",
                    vec![
                        NfsArgop4::Savefh(()),
                        NfsArgop4::Rename(RenameArgs {
                            oldname: component("f"),
                            newname: raw(dot),
                        }),
                    ],
                ),
            ];
            for (name, ops) in ops {
                let res = v.send(in_export(&s, ops)).await;
                assert_eq!(res.status, Nfsstat4::BADNAME, "{name} of {dot:?}: {res:?}");
            }
        }
    }

    /// OPEN of the raw name `name` by owner "o" (UNCHECKED create when `create`).
    fn open_raw(name: &'static [u8], create: bool) -> NfsArgop4 {
        let mut op = open_op("o", "placeholder", create, OPEN4_SHARE_ACCESS_BOTH, 0);
        if let NfsArgop4::Open(a) = &mut op {
            a.claim = sluice_xdr::nfs4::ops::OpenClaim4::Null(raw(name));
        }
        op
    }
}

/// READLINK of a directory (§18.24.3).
mod readlink {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn readlink_of_any_directory_is_isdir() {
        let s = TestServer::start(rw()).await;
        let mut v = V4::mount(&s, "readlink").await;
        // The pseudo root (the export is deeper) and the export's own root.
        for ops in [vec![NfsArgop4::Putrootfh(())], walk_to(&s.export)] {
            let mut ops = ops;
            ops.push(NfsArgop4::Readlink(()));
            let res = v.send(ops).await;
            assert_eq!(res.status, Nfsstat4::ISDIR, "{res:?}");
        }
    }
}

/// LINK of a directory (§18.9.3).
mod link {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn link_of_a_directory_is_isdir() {
        let s = TestServer::start(rw()).await;
        std::fs::create_dir(s.export.join("d")).unwrap();
        let mut v = V4::mount(&s, "link dir").await;
        let mut ops = in_export(&s, vec![lookup("d"), NfsArgop4::Savefh(())]);
        ops.extend(walk_to(&s.export));
        ops.push(NfsArgop4::Link(component("d2")));
        let res = v.send(ops).await;
        assert_eq!(res.status, Nfsstat4::ISDIR, "{res:?}");
        assert!(!s.export.join("d2").exists());
    }
}

/// OPEN4_CREATE goes with CLAIM_NULL only (§18.16.3).
mod open_claims {
    use super::*;
    use bytes::Bytes;
    use sluice_xdr::nfs4::attrs::AttrValues;
    use sluice_xdr::nfs4::ops::{
        Createhow4, OpenArgs, OpenClaim4, OpenClaimDelegateCur4, Openflag4, OPEN4_SHARE_ACCESS_READ,
    };
    use sluice_xdr::nfs4::{Opaque4, StateOwner4, Stateid4};

    fn create_with(claim: OpenClaim4) -> NfsArgop4 {
        let mode = AttrValues {
            mode: Some(0o644),
            ..AttrValues::default()
        };
        NfsArgop4::Open(OpenArgs {
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_READ,
            share_deny: 0,
            owner: StateOwner4 {
                clientid: 0,
                owner: Opaque4(Bytes::from_static(b"o")),
            },
            openhow: Openflag4::Create(Createhow4::Unchecked(mode.encode())),
            claim,
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_claim_null_creates() {
        let s = TestServer::start(rw()).await;
        std::fs::write(s.export.join("f"), b"x").unwrap();
        let mut v = V4::mount(&s, "open claims").await;
        let cur = OpenClaim4::DelegateCur(OpenClaimDelegateCur4 {
            delegate_stateid: Stateid4 {
                seqid: 1,
                other: [7; 12],
            },
            file: component("n"),
        });
        for claim in [
            cur,
            OpenClaim4::DelegatePrev(component("n")),
            OpenClaim4::DelegPrevFh,
        ] {
            let res = v
                .send(in_export(&s, vec![create_with(claim.clone())]))
                .await;
            assert_eq!(res.status, Nfsstat4::INVAL, "{claim:?}: {res:?}");
        }
        assert!(!s.export.join("n").exists());
        // Before anything else: a client that has not sent RECLAIM_COMPLETE hears INVAL too.
        let mut early = V4::mount_reclaiming(&s, "open claims early").await;
        let res = early
            .send(in_export(
                &s,
                vec![lookup("f"), create_with(OpenClaim4::Fh)],
            ))
            .await;
        assert_eq!(res.status, Nfsstat4::INVAL, "{res:?}");
    }
}
