//! Wireshark's opinion: a whole v4.1 session captured on loopback and dissected by tshark.

use super::*;

/// `tests/peers/tshark-check.sh` with `args`; its output, and whether it succeeded.
fn tshark_check(args: &[&str]) -> (bool, String) {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/peers/tshark-check.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .args(args)
        .output()
        .expect("run tshark-check.sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Stops the capture if the test ends before it did (a failed assertion must not leave
/// dumpcap running).
struct Capture(String);

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = tshark_check(&["stop", &self.0]);
    }
}

/// A whole v4.1 session from hand-made COMPOUNDs, captured on loopback and dissected by
/// tshark: no malformed or unreassembled packet, every call answered and accepted, and each
/// op the session used seen in calls and replies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tshark_dissects_a_v41_session() {
    let s = TestServer::start(rw()).await;
    std::fs::create_dir(s.export.join("sub")).unwrap();
    let pcap = s.dirs.base.join("v41-session.pcap");
    let pcap = pcap.to_str().unwrap().to_owned();
    let port = s.addr.port().to_string();
    let (ok, out) = {
        let (port, pcap) = (port.clone(), pcap.clone());
        tokio::task::spawn_blocking(move || tshark_check(&["start", &port, &pcap]))
            .await
            .unwrap()
    };
    assert!(ok, "capture did not start: {out}");
    let capture = Capture(pcap.clone());

    let mut c = s.connect().await;
    let (clientid, seq) = exchange_id(&mut c, b"tshark client").await;
    let res = create_session(&mut c, clientid, seq).await;
    let Some(NfsResop4::CreateSession(Res4::Ok(cs))) = res.results.first() else {
        panic!("{res:?}")
    };
    let sid = cs.sessionid;
    // RECLAIM_COMPLETE before the first OPEN (RFC 8881 §18.51.3).
    let mut ops = vec![sequence(sid, 1), NfsArgop4::ReclaimComplete(false)];
    ops.extend(walk_to(&s.export));
    ops.extend([
        open_op("owner", "file", true, OPEN4_SHARE_ACCESS_BOTH, 0),
        NfsArgop4::Getfh(()),
        NfsArgop4::Write(WriteArgs {
            stateid: Stateid4::CURRENT,
            offset: 0,
            stable: StableHow4::UNSTABLE,
            data: sluice_xdr::Payload::from_chunks(vec![Bytes::from(vec![b'w'; 3000])]),
        }),
        NfsArgop4::Commit(CommitArgs {
            offset: 0,
            count: 0,
        }),
        NfsArgop4::Read(ReadArgs {
            stateid: Stateid4::CURRENT,
            offset: 0,
            count: 4096,
        }),
        NfsArgop4::Close(sluice_xdr::nfs4::ops::CloseArgs {
            seqid: 0,
            open_stateid: Stateid4::CURRENT,
        }),
    ]);
    let res = compound(&mut c, 1, ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let mut ops = vec![sequence(sid, 2)];
    ops.extend(walk_to(&s.export));
    ops.push(NfsArgop4::Readdir(ReaddirArgs {
        cookie: 0,
        cookieverf: [0; 8],
        dircount: 4096,
        maxcount: 8192,
        attr_request: Bitmap4::from_bits(&[num::TYPE, num::SIZE, num::MODE, num::FILEID]),
    }));
    let res = compound(&mut c, 1, ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    // NFSv4.2 READ_PLUS of a sparse file: data, hole, data as chunks in the middle of a
    // reply, then one data segment spliced as the last op.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::create(s.export.join("sparse")).unwrap();
        f.set_len(256 << 10).unwrap();
        f.write_all_at(&[b'a'; 64 << 10], 0).unwrap();
        f.write_all_at(&[b'b'; 64 << 10], 192 << 10).unwrap();
    }
    let read_plus = |offset, count| {
        NfsArgop4::ReadPlus(sluice_xdr::nfs4::ops::ReadPlusArgs {
            stateid: Stateid4::ANONYMOUS,
            offset,
            count,
        })
    };
    let mut ops = vec![sequence(sid, 3)];
    ops.extend(walk_to(&s.export));
    ops.extend([
        lookup("sparse"),
        read_plus(0, 256 << 10),
        read_plus(0, 64 << 10),
    ]);
    let res = compound(&mut c, 2, ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{:?}", statuses(&res));
    let res = compound(&mut c, 1, vec![NfsArgop4::DestroySession(sid)]).await;
    assert_eq!(res.status, Nfsstat4::OK);
    drop(c);

    let expected = [
        "NFS4.op.EXCHANGE_ID",
        "NFS4.op.CREATE_SESSION",
        "NFS4.op.SEQUENCE",
        "NFS4.op.RECLAIM_COMPLETE",
        "NFS4.op.PUTROOTFH",
        "NFS4.op.LOOKUP",
        "NFS4.op.OPEN",
        "NFS4.op.GETFH",
        "NFS4.op.WRITE",
        "NFS4.op.COMMIT",
        "NFS4.op.READ",
        "NFS4.op.CLOSE",
        "NFS4.op.READDIR",
        "NFS4.op.READ_PLUS",
        "NFS4.op.DESTROY_SESSION",
    ];
    let report = tokio::task::spawn_blocking(move || {
        let (ok, out) = tshark_check(&["stop", &pcap]);
        assert!(ok, "capture did not stop: {out}");
        let mut args = vec!["check", pcap.as_str(), port.as_str()];
        args.extend(expected);
        tshark_check(&args)
    })
    .await
    .unwrap();
    drop(capture);
    let (ok, out) = report;
    assert!(ok, "tshark-check failed:\n{out}");
    // The script's own verdicts, checked here too: six COMPOUNDs, all answered.
    assert!(out.contains("NFS4 COMPOUND calls=6 replies=6"), "{out}");
    assert!(out.contains("NFS4.op READ_PLUS calls=2 replies=2"), "{out}");
    assert!(out.contains("unanswered=0"), "{out}");
    assert!(out.contains("NFS4.op WRITE calls=1 replies=1"), "{out}");
}
