//! No oversized buffers on the server's data path (STYLE.md habit 7): while a client writes and
//! then reads 256 MiB through the server, no thread of the server's runtime (its workers and its
//! blocking pool, which runs the backend calls and the flushes) allocates more than one chunk
//! (64 KiB) at once.
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
    // One test, both READ paths in turn: the counters are process-wide.
    for splice in [false, true] {
        write_and_read(splice);
    }
}

/// The 256 MiB write and read, with READs spliced (no buffer at all) or through chunks.
fn write_and_read(splice: bool) {
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
    let dirs = TestDirs::new(if splice { "alloc-splice" } else { "alloc" });
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

    client_rt.block_on(async move {
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
    });

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
