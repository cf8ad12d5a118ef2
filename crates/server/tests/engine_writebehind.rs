//! Write-behind on the wire: an in-process server (`bind` on 127.0.0.1:0, then `run`) and a
//! pipelining raw RPC client ([`support::Rpc`], with the engine helpers of `support::engine`). What is checked is what a client and
//! the disk see (file contents, sizes, statuses) and the sizes of the backend writes the server
//! made (`Stats::backend_write_bytes`), which is where clustering shows.

mod support;

use bytes::Bytes;
use sluice_engine::writebehind::WriteBehindConfig;
use sluice_server::stats::Stats;
use sluice_server::ServerConfig;
use sluice_xdr::nfs3::*;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use support::engine::*;
use support::*;

struct Server {
    addr: SocketAddr,
    stats: Arc<Stats>,
    dirs: TestDirs,
    task: tokio::task::JoinHandle<Result<(), String>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn start(tag: &str, tune: impl FnOnce(&mut ServerConfig)) -> Server {
    let dirs = TestDirs::new(tag);
    let mut config = dirs.config();
    tune(&mut config);
    let bound = sluice_server::bind(config).await.expect("server binds");
    let addr = bound.local_addr().unwrap();
    let stats = bound.server.stats.clone();
    let task = tokio::spawn(sluice_server::run(bound));
    Server {
        addr,
        stats,
        dirs,
        task,
    }
}

impl Server {
    async fn client(&self) -> (Rpc, NfsFh3) {
        let mut c = Rpc::connect_engine(self.addr).await;
        let root = c.mnt_path(&self.dirs.export()).await;
        (c, root)
    }

    fn disk(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dirs.export().join(name)).unwrap()
    }

    fn disk_len(&self, name: &str) -> u64 {
        std::fs::metadata(self.dirs.export().join(name))
            .unwrap()
            .len()
    }
}

/// Writes `mib` MiB of [`pattern`] as windows of 16 pipelined 1 MiB UNSTABLE WRITEs, each window
/// shuffled, then COMMITs the file; returns the median backend write size.
async fn stream_reordered(s: &Server, name: &str, mib: u64) -> u64 {
    let (mut c, root) = s.client().await;
    let fh = c.create(&root, name).await;
    for window in 0..mib / 16 {
        let order: Vec<u64> = shuffled(16, 0x5eed + window)
            .into_iter()
            .map(|i| window * 16 + i)
            .collect();
        c.write_pipelined(&fh, &order, MIB).await;
    }
    let committed = c.commit(&fh, 0, 0).await;
    assert!(matches!(committed, NfsResult::Ok(_)), "{committed:?}");
    let disk = s.disk(name);
    assert_eq!(disk.len() as u64, mib * MIB);
    assert!(
        disk == pattern_range(0, disk.len()),
        "file content differs from what was written"
    );
    let h = &s.stats.backend_write_bytes;
    let median = h.median_bucket_bytes();
    eprintln!(
        "{name}: {} backend writes for {mib} MiB, avg {} KiB, median <= {} KiB",
        h.count.load(Relaxed),
        h.bytes.load(Relaxed) / h.count.load(Relaxed).max(1) / 1024,
        median / 1024
    );
    median
}

/// Clustering alone, with the timeout rule out of reach: a window's 16 WRITEs arrive within
/// `gap_wait` (30 ms) on an idle machine, but not always on a loaded one, and a test must not
/// count on scheduling. The timeout rule has its own tests in virtual time
/// (`sluice_engine::writebehind`).
fn no_gap_timeout(c: &mut ServerConfig) {
    c.io.write_behind.gap_wait = Duration::from_secs(3600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reordered_unstable_writes_reach_the_backend_in_large_runs() {
    let s = start("wb-cluster", no_gap_timeout).await;
    let median = stream_reordered(&s, "clustered", 16).await;
    assert!(median >= 4 * MIB, "16 MiB: median backend write {median}");
    let s = start("wb-cluster64", no_gap_timeout).await;
    let median = stream_reordered(&s, "clustered64", 64).await;
    assert!(median >= 4 * MIB, "64 MiB: median backend write {median}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_clustering_each_write_reaches_the_backend_alone() {
    let s = start("wb-unclustered", |c| c.io.write_behind.clustering = false).await;
    let median = stream_reordered(&s, "unclustered", 64).await;
    assert_eq!(median, MIB, "unclustered median backend write");
}

/// A write-behind that holds data for 10 s unless made to flush: what the client sees in the
/// meantime comes from the held data, not from the disk.
fn holding(c: &mut ServerConfig) {
    c.io.write_behind = WriteBehindConfig {
        gap_wait: Duration::from_secs(10),
        ..WriteBehindConfig::default()
    };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_and_getattr_see_unstable_writes_before_commit() {
    let s = start("wb-visible", holding).await;
    let (mut c, root) = s.client().await;
    let fh = c.create(&root, "f").await;
    // 1 MiB at 4 MiB: held, not on disk.
    let data = Bytes::from(pattern_range(4 * MIB, MIB as usize));
    let w = c
        .write(&fh, 4 * MIB, data.clone(), StableHow::UNSTABLE)
        .await;
    assert_eq!(w.committed, StableHow::UNSTABLE);
    assert_eq!(w.file_wcc.after.unwrap().size, 5 * MIB, "WRITE wcc size");
    assert_eq!(s.disk_len("f"), 0, "the data is held, not written");
    assert_eq!(c.getattr(&fh).await.size, 5 * MIB, "GETATTR size");
    assert_eq!(s.disk_len("f"), 0, "GETATTR does not flush");
    // READ of the held range returns it.
    let r = c.read(&fh, 4 * MIB, MIB as u32).await;
    assert_eq!(r.count as u64, MIB);
    assert!(r.data.to_vec() == data, "READ returns the held data");
    assert!(r.eof);
    assert_eq!(r.file_attributes.unwrap().size, 5 * MIB);
    // Another held write beyond; a READ of the hole before it reads zeros, not the end.
    c.write(&fh, 8 * MIB, data.clone(), StableHow::UNSTABLE)
        .await;
    let r = c.read(&fh, 6 * MIB, MIB as u32).await;
    assert_eq!(r.count as u64, MIB, "a hole before held data");
    assert!(r.data.to_vec().iter().all(|&b| b == 0));
    assert!(!r.eof, "held data lies beyond");
    let NfsResult::Ok(_) = c.commit(&fh, 0, 0).await else {
        panic!("COMMIT failed")
    };
    assert_eq!(s.disk_len("f"), 9 * MIB);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_sync_writes_are_on_disk_before_the_reply_and_win_over_older_held_data() {
    let s = start("wb-sync", holding).await;
    let (mut c, root) = s.client().await;
    let fh = c.create(&root, "f").await;
    c.write(&fh, 0, Bytes::from(vec![b'A'; 8192]), StableHow::UNSTABLE)
        .await;
    let w = c
        .write(&fh, 0, Bytes::from(vec![b'B'; 4096]), StableHow::FILE_SYNC)
        .await;
    assert_eq!(w.committed, StableHow::FILE_SYNC);
    // The held 'A's overlapping the FILE_SYNC range landed first; the 'B's are on disk.
    let disk = s.disk("f");
    assert_eq!(&disk[..4096], &[b'B'; 4096][..]);
    assert_eq!(&disk[4096..], &[b'A'; 4096][..]);
    let NfsResult::Ok(_) = c.commit(&fh, 0, 0).await else {
        panic!("COMMIT failed")
    };
    let disk = s.disk("f");
    assert_eq!(
        &disk[..4096],
        &[b'B'; 4096][..],
        "no older write landed after"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commit_of_a_range_makes_exactly_that_range_land() {
    let s = start("wb-commit-range", holding).await;
    let (mut c, root) = s.client().await;
    let fh = c.create(&root, "f").await;
    c.write_pipelined(&fh, &[0, 1, 2, 3], MIB).await;
    let NfsResult::Ok(_) = c.commit(&fh, MIB, MIB as u32).await else {
        panic!("COMMIT failed")
    };
    // Only the held write overlapping [1 MiB, 2 MiB) landed: the disk file ends there, with
    // a hole before it.
    assert_eq!(s.disk_len("f"), 2 * MIB);
    let disk = s.disk("f");
    assert!(disk[..MIB as usize].iter().all(|&b| b == 0));
    assert!(disk[MIB as usize..] == pattern_range(MIB, MIB as usize)[..]);
    assert_eq!(c.getattr(&fh).await.size, 4 * MIB, "the rest is still held");
    let NfsResult::Ok(_) = c.commit(&fh, 0, 0).await else {
        panic!("COMMIT failed")
    };
    assert!(s.disk("f") == pattern_range(0, 4 * MIB as usize));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_on_many_files_all_land_intact() {
    let s = Arc::new(start("wb-concurrent", |_| {}).await);
    let mut tasks = Vec::new();
    for w in 0..4u64 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let (mut c, root) = s.client().await;
            for f in 0..2u64 {
                let name = format!("w{w}f{f}");
                let fh = c.create(&root, &name).await;
                let order = shuffled(8, w * 10 + f);
                c.write_pipelined(&fh, &order, MIB).await;
                let NfsResult::Ok(_) = c.commit(&fh, 0, 0).await else {
                    panic!("COMMIT {name} failed")
                };
                let disk = s.disk(&name);
                assert_eq!(disk.len() as u64, 8 * MIB, "{name}");
                assert!(disk == pattern_range(0, disk.len()), "{name} content");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(s.stats.engine.dirty_bytes.load(Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dirty_bytes_never_exceed_the_limit() {
    const LIMIT: u64 = 4 * MIB;
    let s = start("wb-limit", |c| {
        c.io.write_behind.dirty_bytes_limit = LIMIT;
    })
    .await;
    let (mut c, root) = s.client().await;
    let fh = c.create(&root, "f").await;
    for window in 0..4 {
        let order: Vec<u64> = shuffled(16, window)
            .iter()
            .map(|i| window * 16 + i)
            .collect();
        c.write_pipelined(&fh, &order, MIB).await;
    }
    let NfsResult::Ok(_) = c.commit(&fh, 0, 0).await else {
        panic!("COMMIT failed")
    };
    let high = s.stats.engine.dirty_bytes_high_water.load(Relaxed);
    eprintln!("dirty high water {high} bytes, limit {LIMIT}");
    assert!(high <= LIMIT, "high water {high} over the limit");
    assert!(high >= MIB, "something was held");
    assert!(s.disk("f") == pattern_range(0, 64 * MIB as usize));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_truncate_drops_held_data_beyond_the_new_size() {
    let s = start("wb-truncate", holding).await;
    let (mut c, root) = s.client().await;
    let fh = c.create(&root, "f").await;
    c.write_pipelined(&fh, &[0, 1], MIB).await;
    let r = c
        .nfs(Args3::Setattr(SetattrArgs {
            object: fh.clone(),
            new_attributes: Sattr3 {
                size: Some(MIB / 2),
                ..Default::default()
            },
            guard: None,
        }))
        .await;
    let Res3::Setattr(NfsResult::Ok(ok)) = r else {
        panic!("SETATTR: {r:?}")
    };
    assert_eq!(ok.obj_wcc.after.unwrap().size, MIB / 2);
    assert_eq!(c.getattr(&fh).await.size, MIB / 2);
    let NfsResult::Ok(_) = c.commit(&fh, 0, 0).await else {
        panic!("COMMIT failed")
    };
    assert!(s.disk("f") == pattern_range(0, (MIB / 2) as usize));
}

/// `tar` and `cp -p` set a file's times right after writing it; under a write delegation the
/// client sends its WRITEs unstable and no COMMIT before that SETATTR. Held data must land
/// before the times are set, or its landing moves the mtime back to "now".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn times_set_after_held_writes_are_not_undone_when_the_data_lands() {
    use std::os::unix::fs::MetadataExt;
    let s = start("wb-times", holding).await;
    let (mut c, root) = s.client().await;
    let fh = c.create(&root, "f").await;
    c.write_pipelined(&fh, &[0, 1], MIB).await;
    assert!(
        s.stats.engine.dirty_bytes.load(Relaxed) > 0,
        "the writes are held"
    );
    let when = Nfstime3 {
        seconds: 1_000_000_000,
        nseconds: 0,
    };
    let r = c
        .nfs(Args3::Setattr(SetattrArgs {
            object: fh.clone(),
            new_attributes: Sattr3 {
                atime: SetTime::ClientTime(when),
                mtime: SetTime::ClientTime(when),
                ..Default::default()
            },
            guard: None,
        }))
        .await;
    assert!(matches!(r, Res3::Setattr(NfsResult::Ok(_))), "{r:?}");
    assert_eq!(s.stats.engine.dirty_bytes.load(Relaxed), 0, "landed first");
    let NfsResult::Ok(_) = c.commit(&fh, 0, 0).await else {
        panic!("COMMIT failed")
    };
    let meta = std::fs::metadata(s.dirs.export().join("f")).unwrap();
    assert_eq!(meta.mtime(), 1_000_000_000, "mtime on disk");
    assert_eq!(meta.len(), 2 * MIB);
    assert_eq!(c.getattr(&fh).await.mtime.seconds, 1_000_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn remove_drops_the_files_held_data() {
    let s = start("wb-remove", holding).await;
    let (mut c, root) = s.client().await;
    let fh = c.create(&root, "f").await;
    c.write_pipelined(&fh, &[0, 1, 2], MIB).await;
    let r = c
        .nfs(Args3::Remove(RemoveArgs {
            object: dirop(&root, "f"),
        }))
        .await;
    assert!(matches!(r, Res3::Remove(NfsResult::Ok(_))), "{r:?}");
    assert_eq!(s.stats.engine.dirty_bytes.load(Relaxed), 0, "nothing held");
    assert_eq!(
        s.stats.backend_write_bytes.count.load(Relaxed),
        0,
        "nothing written for a removed file"
    );
}

/// A RENAME over a file with held data removes that file as REMOVE does: its data is dropped,
/// not written to a file nobody can reach (whose failure would change the write verifier and
/// make every client resend), and the renamed file keeps its own held data.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rename_over_a_file_drops_its_held_data_and_keeps_the_verifier() {
    let s = start("wb-rename", holding).await;
    let (mut c, root) = s.client().await;
    let other = c.create(&root, "other").await;
    c.write_pipelined(&other, &[0], MIB).await;
    let NfsResult::Ok(before) = c.commit(&other, 0, 0).await else {
        panic!("COMMIT failed")
    };
    let written = s.stats.backend_write_bytes.count.load(Relaxed);
    let victim = c.create(&root, "victim").await;
    c.write_pipelined(&victim, &[0, 1], MIB).await;
    std::fs::write(s.dirs.export().join("new"), b"replacement").unwrap();
    let r = c
        .nfs(Args3::Rename(RenameArgs {
            from: dirop(&root, "new"),
            to: dirop(&root, "victim"),
        }))
        .await;
    assert!(matches!(r, Res3::Rename(NfsResult::Ok(_))), "{r:?}");
    assert_eq!(s.stats.engine.dirty_bytes.load(Relaxed), 0, "nothing held");
    assert_eq!(
        s.stats.backend_write_bytes.count.load(Relaxed),
        written,
        "nothing written for the replaced file"
    );
    assert_eq!(
        std::fs::read(s.dirs.export().join("victim")).unwrap(),
        b"replacement"
    );
    c.write_pipelined(&other, &[1], MIB).await;
    let NfsResult::Ok(after) = c.commit(&other, 0, 0).await else {
        panic!("COMMIT failed")
    };
    assert_eq!(before.verf, after.verf, "the write verifier did not change");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_flush_is_reported_by_the_next_commit() {
    let s = start("wb-error", holding).await;
    let (mut c, root) = s.client().await;
    let fh = c.create(&root, "f").await;
    c.write_pipelined(&fh, &[0], MIB).await;
    // The file disappears behind the server's back: the flush cannot write it.
    std::fs::remove_file(s.dirs.export().join("f")).unwrap();
    let r = c.commit(&fh, 0, 0).await;
    let NfsResult::Err(status, _) = r else {
        panic!("COMMIT succeeded for data that could not be written")
    };
    eprintln!("COMMIT after a failed flush: {}", status.name());
    assert_ne!(status, Nfsstat3::OK);
    assert_eq!(s.stats.engine.dirty_bytes.load(Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sequential_reads_are_read_ahead() {
    sequential_reads(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sequential_reads_are_read_ahead_and_spliced_without_chunks() {
    sequential_reads(true).await;
}

/// 32 × 1 MiB READs in order: read ahead, the right bytes, through pooled chunks that all come
/// back, or (`splice`) through pipes without touching the chunk pool.
async fn sequential_reads(splice: bool) {
    let s = start(if splice { "seq-splice" } else { "seq-read" }, |c| {
        c.read_splice = splice
    })
    .await;
    std::fs::write(
        s.dirs.export().join("r"),
        pattern_range(0, (32 * MIB) as usize),
    )
    .unwrap();
    let (mut c, root) = s.client().await;
    let fh = c.lookup(&root, "r").await;
    for i in 0..32 {
        let r = c.read(&fh, i * MIB, MIB as u32).await;
        assert!(r.data.to_vec() == pattern_range(i * MIB, MIB as usize));
    }
    let e = &s.stats.engine;
    let ra = e.readahead_bytes.load(Relaxed);
    eprintln!(
        "read ahead {ra} bytes; seqtable hits {} misses {}; pool high water {} chunks",
        e.seq_hits.load(Relaxed),
        e.seq_misses.load(Relaxed),
        e.pool_chunks_high_water.load(Relaxed)
    );
    assert!(
        ra >= 31 * MIB,
        "every READ after the first was hinted ahead"
    );
    assert_eq!(e.seq_misses.load(Relaxed), 1);
    if splice {
        assert_eq!(
            e.spliced_bytes.load(Relaxed),
            32 * MIB,
            "every byte spliced"
        );
        assert_eq!(e.pool_chunks_high_water.load(Relaxed), 0, "no chunk used");
        assert!(e.pipes.load(Relaxed) >= 1);
        return;
    }
    assert_eq!(e.spliced_bytes.load(Relaxed), 0);
    assert!(e.pool_chunks_high_water.load(Relaxed) >= 16);
    // The last reply's chunks come back once the server's writer has dropped them.
    for _ in 0..100 {
        if e.pool_chunks_in_use.load(Relaxed) == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(e.pool_chunks_in_use.load(Relaxed), 0, "chunks came back");
}

/// Every READ path (spliced from the page cache, read in place without blocking, chunks on a
/// blocking thread) returns the file's bytes and the right `eof` for any offset and length,
/// with many READs of mixed sizes in flight on one connection (their replies share `writev`s
/// and splices on the way out), and sees a change made on the host since.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_of_any_offset_and_length_match_the_file_on_every_path() {
    for splice in [true, false] {
        let s = start(
            if splice {
                "paths-splice"
            } else {
                "paths-chunks"
            },
            |c| c.read_splice = splice,
        )
        .await;
        let size = 5 * MIB + 123;
        let mut content = pattern_range(0, size as usize);
        std::fs::write(s.dirs.export().join("f"), &content).unwrap();
        let (mut c, root) = s.client().await;
        let fh = c.lookup(&root, "f").await;
        for round in 0..2 {
            if round == 1 {
                // Changed behind the server's back: the next READs see the new bytes.
                let patch = vec![0xA5u8; 300_000];
                content[1_000_000..1_300_000].copy_from_slice(&patch);
                std::fs::write(s.dirs.export().join("f"), &content).unwrap();
            }
            let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ round;
            let mut asked = std::collections::HashMap::new();
            let mut sent = 0;
            let mut done = 0;
            while done < 200 {
                while sent < 200 && sent - done < 24 {
                    xorshift(&mut x);
                    let offset = match x % 4 {
                        0 => (x >> 8) % (size + 4096) / 4096 * 4096, // page aligned
                        _ => (x >> 8) % (size + 4096),               // anywhere, past the end too
                    };
                    let count = match (x >> 40) % 3 {
                        0 => 1 + (x >> 44) % 16_384,      // small: in place or chunks
                        1 => 32_768 + (x >> 44) % 65_536, // medium
                        _ => (1 << 20) - (x >> 44) % 3,   // about rtmax
                    } as u32;
                    let xid = c
                        .send_nfs(&Args3::Read(ReadArgs {
                            file: fh.clone(),
                            offset,
                            count,
                        }))
                        .await;
                    asked.insert(xid, (offset, count));
                    sent += 1;
                }
                let (xid, res) = c.recv_nfs().await;
                let (offset, count) = asked.remove(&xid).expect("a reply to a call sent");
                let what = format!("splice={splice} round {round}: READ {count} at {offset}");
                let ok = match res {
                    Res3::Read(NfsResult::Ok(ok)) => ok,
                    other => panic!("{what}: {other:?}"),
                };
                let start = (offset as usize).min(content.len());
                let end = (offset as usize + count as usize).min(content.len());
                assert_eq!(ok.count as usize, end - start, "{what}: count");
                assert_eq!(ok.data.len(), end - start, "{what}: data length");
                assert!(ok.data.to_vec() == content[start..end], "{what}: bytes");
                assert_eq!(ok.eof, end == content.len(), "{what}: eof");
                done += 1;
            }
        }
        let spliced = s.stats.engine.spliced_bytes.load(Relaxed);
        if splice {
            assert!(spliced > 0, "some READs were spliced");
        } else {
            assert_eq!(spliced, 0);
        }
    }
}

/// Drops the file's clean pages from the page cache (`POSIX_FADV_DONTNEED`), so that the next
/// READs of it need the disk.
fn evict(path: &std::path::Path) {
    let f = std::fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: a plain advice call on an open descriptor.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "posix_fadvise");
}

fn on_tmpfs(path: &std::path::Path) -> bool {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statfs fills the struct it is given.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut st) }, 0);
    st.f_type == libc::TMPFS_MAGIC
}

/// Small READs of pages that are not cached: with the ring they go through io_uring (counted),
/// without it through blocking threads, and either way every byte, count and eof is right, with
/// 32 READs in flight, the cache dropped every 64 replies, and one connection closed with READs
/// in flight (the chunks those READs hold come back to the pool).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_reads_that_miss_the_page_cache_are_right_through_io_uring() {
    for uring in [true, false] {
        let s = start(if uring { "uring" } else { "no-uring" }, |c| {
            c.io.uring_reads = uring
        })
        .await;
        let size = 8 * MIB + 777;
        let content = pattern_range(0, size as usize);
        let path = s.dirs.export().join("f");
        std::fs::write(&path, &content).unwrap();
        let (mut c, root) = s.client().await;
        let fh = c.lookup(&root, "f").await;
        let mut x = 0x2545_F491_4F6C_DD1Du64 ^ u64::from(uring);
        let mut asked = std::collections::HashMap::new();
        let (mut sent, mut done) = (0, 0);
        evict(&path);
        while done < 1500 {
            while sent < 1500 && sent - done < 32 {
                xorshift(&mut x);
                let offset = match x % 3 {
                    0 => (x >> 8) % (size + 8192) / 4096 * 4096,
                    _ => (x >> 8) % (size + 8192),
                };
                let count = 1 + ((x >> 40) % 24_000) as u32;
                let args = Args3::Read(ReadArgs {
                    file: fh.clone(),
                    offset,
                    count,
                });
                asked.insert(c.send_nfs(&args).await, (offset, count));
                sent += 1;
            }
            let (xid, res) = c.recv_nfs().await;
            let (offset, count) = asked.remove(&xid).expect("a reply to a call sent");
            let what = format!("uring={uring}: READ {count} at {offset}");
            let Res3::Read(NfsResult::Ok(ok)) = res else {
                panic!("{what}: {res:?}");
            };
            let start = (offset as usize).min(content.len());
            let end = (offset as usize + count as usize).min(content.len());
            assert_eq!(ok.count as usize, end - start, "{what}: count");
            assert!(ok.data.to_vec() == content[start..end], "{what}: bytes");
            assert_eq!(ok.eof, end == content.len(), "{what}: eof");
            done += 1;
            if done % 64 == 0 {
                evict(&path);
            }
        }
        // READs in flight on a connection that goes away
        evict(&path);
        let (mut gone, _) = s.client().await;
        for i in 0..32u64 {
            let args = Args3::Read(ReadArgs {
                file: fh.clone(),
                offset: i * 200_000,
                count: 16_000,
            });
            gone.send_nfs(&args).await;
        }
        drop(gone);
        let through_ring = s.stats.engine.uring_reads.load(Relaxed);
        if !uring {
            assert_eq!(through_ring, 0);
        } else if on_tmpfs(&path) {
            eprintln!("uring test: the export is on tmpfs, whose pages cannot be dropped");
        } else {
            assert!(
                through_ring > 0,
                "no READ went through io_uring: is it disabled here \
                 (/proc/sys/kernel/io_uring_disabled, a seccomp filter)? The server logs \
                 'io_uring unavailable' then"
            );
            eprintln!("uring test: {through_ring} of the READs went through io_uring");
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while s.stats.engine.pool_chunks_in_use.load(Relaxed) != 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "{} chunks still lent 10 s after the last READ",
                s.stats.engine.pool_chunks_in_use.load(Relaxed)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
