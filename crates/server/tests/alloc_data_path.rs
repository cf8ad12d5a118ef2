//! No oversized buffers on the server's data path (STYLE.md habit 7): while a client writes and
//! then reads 256 MiB through the server, no thread of the server's runtime (its workers and its
//! blocking pool, which runs the backend calls and the flushes) allocates more than one chunk
//! (64 KiB) at once. The same over NFSv4.1, where the COMPOUND is decoded in place (a WRITE's
//! payload is not copied out of the record) and a READ's reply goes out as chunks or spliced.
//!
//! A counting global allocator records allocations larger than [`CHUNK_BYTES`] made on threads
//! flagged as "data path". The server runs on its own runtime whose `on_thread_start` sets the
//! flag; the test client runs on another, unflagged one, so its own big buffers do not count.
//! Counting starts after the server is bound and the client has mounted and created its file.

mod support;

use bytes::Bytes;
use sluice_xdr::nfs3::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use support::engine::*;
use support::*;

/// The chunk size (the pool's): the largest contiguous allocation the data path may make.
const CHUNK_BYTES: usize = sluice_engine::pool::CHUNK_BYTES;
const FILE_BYTES: u64 = 256 * MIB;
/// WRITEs and READs kept in flight by the client, like a Linux client's slot table.
const IN_FLIGHT: u64 = 16;

struct Counting;

static MEASURING: AtomicBool = AtomicBool::new(false);
static BIG_ALLOCS: AtomicUsize = AtomicUsize::new(0);
static LARGEST: AtomicUsize = AtomicUsize::new(0);
/// Largest allocation of any size on a data-path thread while measuring.
static LARGEST_ANY: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static DATA_PATH: Cell<bool> = const { Cell::new(false) };
}

fn note(size: usize) {
    if !MEASURING.load(Relaxed) || !DATA_PATH.try_with(|f| f.get()).unwrap_or(false) {
        return;
    }
    LARGEST_ANY.fetch_max(size, Relaxed);
    if size > CHUNK_BYTES {
        BIG_ALLOCS.fetch_add(1, Relaxed);
        LARGEST.fetch_max(size, Relaxed);
    }
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[test]
fn a_256_mib_write_and_read_allocate_nothing_larger_than_a_chunk_on_server_threads() {
    // One test, both READ paths and both versions in turn: the counters are process-wide.
    for v4 in [false, true] {
        for splice in [false, true] {
            write_and_read(splice, v4);
        }
    }
}

/// The 256 MiB write and read, with READs spliced (no buffer at all) or through chunks, over
/// NFSv3 or NFSv4.1 (COMPOUNDs of SEQUENCE, PUTFH and the WRITE or READ, the READ last).
fn write_and_read(splice: bool, v4: bool) {
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .on_thread_start(|| DATA_PATH.with(|f| f.set(true)))
        .build()
        .unwrap();
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dirs = TestDirs::new(match (splice, v4) {
        (false, false) => "alloc",
        (true, false) => "alloc-splice",
        (false, true) => "alloc-v4",
        (true, true) => "alloc-splice-v4",
    });
    let mut config = dirs.config();
    config.read_splice = splice;
    let bound = server_rt
        .block_on(sluice_server::bind(config))
        .expect("server binds");
    let addr = bound.local_addr().unwrap();
    let stats = bound.server.stats.clone();
    let _server = server_rt.spawn(sluice_server::run(bound));
    let export = dirs.export();

    // Calibration: an oversized allocation on a server thread is seen, one on a client thread
    // is not.
    MEASURING.store(true, Relaxed);
    server_rt.block_on(async {
        tokio::task::spawn_blocking(|| std::hint::black_box(vec![0u8; 2 * CHUNK_BYTES]))
            .await
            .unwrap();
    });
    client_rt.block_on(async {
        tokio::spawn(async { std::hint::black_box(vec![0u8; 2 * CHUNK_BYTES]) })
            .await
            .unwrap();
    });
    MEASURING.store(false, Relaxed);
    assert_eq!(
        BIG_ALLOCS.swap(0, Relaxed),
        1,
        "the counter sees server threads only"
    );
    LARGEST.store(0, Relaxed);
    LARGEST_ANY.store(0, Relaxed);

    if v4 {
        std::fs::write(export.join("big"), b"").unwrap();
        client_rt.block_on(v4_write_and_read(addr, export));
    } else {
        client_rt.block_on(v3_write_and_read(addr, export));
    }

    let big = BIG_ALLOCS.load(Relaxed);
    let largest = LARGEST.load(Relaxed);
    eprintln!(
        "server threads: {big} allocations larger than {CHUNK_BYTES} bytes (largest of those \
         {largest} bytes); largest allocation of any size {} bytes",
        LARGEST_ANY.load(Relaxed)
    );
    eprint!("{}", stats.render());
    assert_eq!(
        big, 0,
        "the data path allocated {big} buffers larger than a chunk (largest {largest} bytes)"
    );
    let e = &stats.engine;
    if splice {
        assert_eq!(e.spliced_bytes.load(Relaxed), FILE_BYTES, "READs spliced");
    } else {
        assert_eq!(e.spliced_bytes.load(Relaxed), 0);
        assert!(
            e.pool_chunks_high_water.load(Relaxed) > 0,
            "READs used chunks"
        );
    }
    drop(server_rt);
}

/// The client's half over NFSv3: 256 × 1 MiB UNSTABLE WRITEs, `IN_FLIGHT` at a time, a COMMIT,
/// then 256 × 1 MiB READs checked against what was written. Starts the measurement.
async fn v3_write_and_read(addr: std::net::SocketAddr, export: std::path::PathBuf) {
    let mut c = Rpc::connect_engine(addr).await;
    let root = c.mnt_path(&export).await;
    let fh = c.create(&root, "big").await;
    // One 1 MiB buffer of the pattern, reused: the content check below is per MiB.
    let mib: Vec<Bytes> = (0..4)
        .map(|k| Bytes::from(pattern_range(k * MIB, MIB as usize)))
        .collect();
    MEASURING.store(true, Relaxed);

    // Write: 256 × 1 MiB UNSTABLE, IN_FLIGHT at a time, then COMMIT.
    let mut sent = 0u64;
    let mut done = 0u64;
    while done < FILE_BYTES / MIB {
        while sent < FILE_BYTES / MIB && sent - done < IN_FLIGHT {
            let args = Rpc::write_args(
                &fh,
                sent * MIB,
                mib[(sent % 4) as usize].clone(),
                StableHow::UNSTABLE,
            );
            c.send_nfs(&args).await;
            sent += 1;
        }
        match c.recv_nfs().await {
            (_, Res3::Write(NfsResult::Ok(ok))) => assert_eq!(u64::from(ok.count), MIB),
            (_, other) => panic!("WRITE: {other:?}"),
        }
        done += 1;
    }
    assert!(matches!(c.commit(&fh, 0, 0).await, NfsResult::Ok(_)));

    // Read it back: 256 × 1 MiB, IN_FLIGHT at a time.
    let mut sent = 0u64;
    let mut done = 0u64;
    let mut xids = std::collections::HashMap::new();
    while done < FILE_BYTES / MIB {
        while sent < FILE_BYTES / MIB && sent - done < IN_FLIGHT {
            let xid = c
                .send_nfs(&Args3::Read(ReadArgs {
                    file: fh.clone(),
                    offset: sent * MIB,
                    count: MIB as u32,
                }))
                .await;
            xids.insert(xid, sent);
            sent += 1;
        }
        match c.recv_nfs().await {
            (xid, Res3::Read(NfsResult::Ok(ok))) => {
                let i = xids.remove(&xid).unwrap();
                assert_eq!(u64::from(ok.count), MIB);
                assert!(ok.data.to_vec() == mib[(i % 4) as usize], "MiB {i} differs");
            }
            (_, other) => panic!("READ: {other:?}"),
        }
        done += 1;
    }
    MEASURING.store(false, Relaxed);
}

/// [`v3_write_and_read`] over NFSv4.1: a session of `IN_FLIGHT` slots, the file's handle
/// looked up through the pseudo tree (before measuring), then COMPOUNDs of SEQUENCE, PUTFH and
/// WRITE (the slot keeps the reply, as the Linux client asks for WRITEs) or READ (last, so it
/// may be spliced; not kept).
async fn v4_write_and_read(addr: std::net::SocketAddr, export: std::path::PathBuf) {
    use sluice_xdr::nfs4::compound::{Compound4Args, Compound4Res, CompoundLimits};
    use sluice_xdr::nfs4::ops::*;
    use sluice_xdr::nfs4::{self, Component4, NfsFh4, Nfsstat4, Opaque4, Stateid4, Utf8Str};
    use sluice_xdr::nfs4::{SessionId4, StableHow4};
    use sluice_xdr::{Pack, Reader, Writer};

    /// Sends a COMPOUND without waiting; returns its XID.
    async fn send(c: &mut Rpc, ops: Vec<NfsArgop4>) -> u32 {
        let mut w = Writer::new();
        Compound4Args {
            tag: Utf8Str(Bytes::new()),
            minorversion: 1,
            ops,
        }
        .pack(&mut w);
        let xid = c.next_xid();
        let msg = support::call_message(
            xid,
            nfs4::PROGRAM,
            4,
            nfs4::proc_::COMPOUND,
            &c.cred,
            &w.into_bytes(),
        );
        c.send_message(&msg).await;
        xid
    }
    /// The next reply: its XID and the COMPOUND's results, which must have succeeded.
    async fn recv(c: &mut Rpc) -> (u32, Compound4Res) {
        let r = c.recv().await.expect("server closed the connection");
        let segs = [r.results.clone()];
        let res = Compound4Res::decode(&mut Reader::new(&segs), &CompoundLimits::default())
            .expect("COMPOUND4res");
        assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
        (r.xid, res)
    }
    async fn call(c: &mut Rpc, ops: Vec<NfsArgop4>) -> Compound4Res {
        send(c, ops).await;
        recv(c).await.1
    }
    fn sequence(sessionid: SessionId4, slotid: u32, sequenceid: u32, cachethis: bool) -> NfsArgop4 {
        NfsArgop4::Sequence(SequenceArgs {
            sessionid,
            sequenceid,
            slotid,
            highest_slotid: IN_FLIGHT as u32 - 1,
            cachethis,
        })
    }

    let mut c = Rpc::connect_engine(addr).await;
    let res = call(
        &mut c,
        vec![NfsArgop4::ExchangeId(ExchangeIdArgs {
            clientowner: ClientOwner4 {
                verifier: [4; 8],
                ownerid: Opaque4(Bytes::from_static(b"alloc_data_path v4")),
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
    let chan = |maxrequests| ChannelAttrs4 {
        maxrequestsize: (1 << 20) + 8192,
        maxresponsesize: (1 << 20) + 8192,
        maxoperations: 8,
        ..sluice_server::testkit::channel_attrs(maxrequests)
    };
    let res = call(
        &mut c,
        vec![NfsArgop4::CreateSession(CreateSessionArgs {
            clientid: e.clientid,
            sequence: e.sequenceid,
            flags: 0,
            fore_chan_attrs: chan(IN_FLIGHT as u32),
            back_chan_attrs: chan(1),
            cb_program: 0x4000_0000,
            sec_parms: CallbackSecParmsList(Vec::new()),
        })],
    )
    .await;
    let Some(NfsResop4::CreateSession(Res4::Ok(cs))) = res.results.first() else {
        panic!("{res:?}")
    };
    let sid = cs.sessionid;
    assert!(cs.fore_chan_attrs.maxrequests >= IN_FLIGHT as u32, "{cs:?}");
    // The slots' last sequence ids; a slot is free when not in `busy`.
    let mut seqids = [0u32; IN_FLIGHT as usize];
    let mut busy = std::collections::HashMap::new();
    let mut ops = vec![sequence(sid, 0, 1, false), NfsArgop4::Putrootfh(())];
    seqids[0] = 1;
    for p in export.components() {
        if let std::path::Component::Normal(n) = p {
            ops.push(NfsArgop4::Lookup(Component4(Bytes::copy_from_slice(
                n.as_encoded_bytes(),
            ))));
        }
    }
    ops.push(NfsArgop4::Lookup(Component4(Bytes::from_static(b"big"))));
    ops.push(NfsArgop4::Getfh(()));
    let res = call(&mut c, ops).await;
    let Some(NfsResop4::Getfh(Res4::Ok(fh))) = res.results.last() else {
        panic!("{res:?}")
    };
    let fh: NfsFh4 = fh.clone();
    let mib: Vec<Bytes> = (0..4)
        .map(|k| Bytes::from(pattern_range(k * MIB, MIB as usize)))
        .collect();
    MEASURING.store(true, Relaxed);

    // Write: 256 × 1 MiB UNSTABLE, IN_FLIGHT at a time (one per slot), then COMMIT.
    let mut sent = 0u64;
    let mut done = 0u64;
    while done < FILE_BYTES / MIB {
        while sent < FILE_BYTES / MIB && sent - done < IN_FLIGHT {
            let slot = (0..IN_FLIGHT as u32)
                .find(|s| !busy.values().any(|b| b == s))
                .expect("a free slot");
            seqids[slot as usize] += 1;
            let xid = send(
                &mut c,
                vec![
                    sequence(sid, slot, seqids[slot as usize], true),
                    NfsArgop4::Putfh(fh.clone()),
                    NfsArgop4::Write(WriteArgs {
                        stateid: Stateid4::ANONYMOUS,
                        offset: sent * MIB,
                        stable: StableHow4::UNSTABLE,
                        data: sluice_xdr::Payload::from(mib[(sent % 4) as usize].clone()),
                    }),
                ],
            )
            .await;
            busy.insert(xid, slot);
            sent += 1;
        }
        let (xid, res) = recv(&mut c).await;
        busy.remove(&xid).expect("a reply to a call sent");
        match res.results.last() {
            Some(NfsResop4::Write(Res4::Ok(w))) => assert_eq!(u64::from(w.count), MIB),
            other => panic!("WRITE: {other:?}"),
        }
        done += 1;
    }
    seqids[0] += 1;
    call(
        &mut c,
        vec![
            sequence(sid, 0, seqids[0], true),
            NfsArgop4::Putfh(fh.clone()),
            NfsArgop4::Commit(CommitArgs {
                offset: 0,
                count: 0,
            }),
        ],
    )
    .await;

    // Read it back: 256 × 1 MiB, IN_FLIGHT at a time.
    let mut sent = 0u64;
    let mut done = 0u64;
    let mut offsets = std::collections::HashMap::new();
    while done < FILE_BYTES / MIB {
        while sent < FILE_BYTES / MIB && sent - done < IN_FLIGHT {
            let slot = (0..IN_FLIGHT as u32)
                .find(|s| !busy.values().any(|b| b == s))
                .expect("a free slot");
            seqids[slot as usize] += 1;
            let xid = send(
                &mut c,
                vec![
                    sequence(sid, slot, seqids[slot as usize], false),
                    NfsArgop4::Putfh(fh.clone()),
                    NfsArgop4::Read(ReadArgs {
                        stateid: Stateid4::ANONYMOUS,
                        offset: sent * MIB,
                        count: MIB as u32,
                    }),
                ],
            )
            .await;
            busy.insert(xid, slot);
            offsets.insert(xid, sent);
            sent += 1;
        }
        let (xid, res) = recv(&mut c).await;
        busy.remove(&xid).expect("a reply to a call sent");
        let i = offsets.remove(&xid).unwrap();
        match res.results.last() {
            Some(NfsResop4::Read(Res4::Ok(r))) => {
                assert_eq!(r.data.len() as u64, MIB);
                assert!(r.data.to_vec() == mib[(i % 4) as usize], "MiB {i} differs");
            }
            other => panic!("READ: {other:?}"),
        }
        done += 1;
    }
    MEASURING.store(false, Relaxed);
}
