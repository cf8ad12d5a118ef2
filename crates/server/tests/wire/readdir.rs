//! READDIR and READDIRPLUS of a directory of 100 000 entries.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdir_and_readdirplus_of_100000_entries_list_each_exactly_once() {
    const N: usize = 100_000;
    let s = TestServer::start(rw()).await;
    let big = s.export.join("big");
    std::fs::create_dir(&big).unwrap();
    for i in 0..N {
        std::fs::File::create(big.join(format!("e{i:06}"))).unwrap();
    }
    let mut c = s.connect().await;
    let root = c.mnt_root(&s).await;
    let dir = ok(lookup(&mut c, &root, "big").await).object;
    let check = |names: Vec<Vec<u8>>, what: &str| {
        let mut seen = HashSet::with_capacity(N + 2);
        for n in &names {
            assert!(
                seen.insert(n.clone()),
                "{what}: {} listed twice",
                String::from_utf8_lossy(n)
            );
        }
        assert_eq!(seen.len(), N + 2, "{what}: every entry plus . and ..");
        for i in (0..N).step_by(997) {
            assert!(
                seen.contains(format!("e{i:06}").as_bytes()),
                "{what}: e{i:06}"
            );
        }
    };
    for count in [4096u32, 1 << 20] {
        let (names, calls) = readdir_walk(&mut c, &dir, count, false).await;
        assert!(calls > 1, "READDIR count {count}: {calls} calls");
        check(names, &format!("READDIR count {count}"));
    }
    for count in [1u32 << 20, 4096] {
        let (names, calls) = readdir_walk(&mut c, &dir, count, true).await;
        assert!(calls > 1, "READDIRPLUS maxcount {count}: {calls} calls");
        check(names, &format!("READDIRPLUS maxcount {count}"));
    }
    // A count too small for even one entry.
    let r = op!(
        c,
        Readdir,
        ReaddirArgs {
            dir: dir.clone(),
            cookie: 0,
            cookieverf: [0; 8],
            count: 64,
        }
    );
    assert_eq!(r.status(), Nfsstat3::TOOSMALL);
    let r = op!(
        c,
        Readdirplus,
        ReaddirplusArgs {
            dir: dir.clone(),
            cookie: 0,
            cookieverf: [0; 8],
            dircount: 64,
            maxcount: 64,
        }
    );
    assert_eq!(r.status(), Nfsstat3::TOOSMALL);
}

/// Lists a directory to the end with READDIR or READDIRPLUS, sending back each reply's last
/// cookie and the verifier of the first reply, and checking the verifier stays the same and
/// every reply fits in `count`. Returns the names and the number of calls.
async fn readdir_walk(c: &mut Rpc, dir: &NfsFh3, count: u32, plus: bool) -> (Vec<Vec<u8>>, u32) {
    let mut names = Vec::new();
    let mut cookie = 0u64;
    let mut verf = [0u8; 8];
    let mut calls = 0;
    loop {
        calls += 1;
        assert!(calls < 100_000, "READDIR does not reach eof");
        let (entries, eof, v, reply_bytes) = if plus {
            let r = c
                .call(
                    NFS,
                    3,
                    proc_::READDIRPLUS,
                    &sluice_xdr::to_bytes(&ReaddirplusArgs {
                        dir: dir.clone(),
                        cookie,
                        cookieverf: verf,
                        dircount: count,
                        maxcount: count,
                    }),
                )
                .await;
            let len = r.results.len();
            let ok = ok(ReaddirplusRes::unpack(&mut Reader::from_bytes(&r.results)).unwrap());
            for e in &ok.entries {
                assert!(
                    e.name_attributes.is_some() && e.name_handle.is_some()
                        || e.name.starts_with(b".")
                );
            }
            let es: Vec<(Vec<u8>, u64)> = ok
                .entries
                .iter()
                .map(|e| (e.name.to_vec(), e.cookie))
                .collect();
            (es, ok.eof, ok.cookieverf, len)
        } else {
            let r = c
                .call(
                    NFS,
                    3,
                    proc_::READDIR,
                    &sluice_xdr::to_bytes(&ReaddirArgs {
                        dir: dir.clone(),
                        cookie,
                        cookieverf: verf,
                        count,
                    }),
                )
                .await;
            let len = r.results.len();
            let ok = ok(ReaddirRes::unpack(&mut Reader::from_bytes(&r.results)).unwrap());
            let es: Vec<(Vec<u8>, u64)> = ok
                .entries
                .iter()
                .map(|e| (e.name.to_vec(), e.cookie))
                .collect();
            (es, ok.eof, ok.cookieverf, len)
        };
        // The results (status word aside) must fit the client's count.
        assert!(
            reply_bytes - 4 <= count as usize,
            "reply of {reply_bytes} bytes for count {count}"
        );
        if calls == 1 {
            verf = v;
        } else {
            assert_eq!(
                v, verf,
                "cookieverf changed while listing an unchanged directory"
            );
        }
        assert!(eof || !entries.is_empty(), "no progress without eof");
        if let Some((_, last)) = entries.last() {
            cookie = *last;
        }
        names.extend(entries.into_iter().map(|(n, _)| n));
        if eof {
            return (names, calls);
        }
    }
}
