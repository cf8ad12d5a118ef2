//! The open-file and directory-stream caches of `CephFs`, proven by counting libcephfs calls
//! (never by timing): READs of one file share one `ceph_ll_open`, a file removed or renamed
//! over through sluice is closed at once, a file removed by another Ceph client is closed on
//! its next use, data written through a cached file and COMMITted is what ceph-fuse reads
//! (and the other way round), and a READDIR walk in pages opens its directory once. Needs
//! root, /dev/fuse and the ceph packages.

mod common;

use bytes::Bytes;
use sluice_ceph::{CallKind, CephFs, IdleLimits, OpenCacheConfig};
use sluice_vfs::{Caller, CreateHow, Cred, FileHandle, FileSystem, FsError, SetAttr, StableHow};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

fn root() -> Caller {
    Caller::with_cred(Cred::root())
}

fn calls(fs: &CephFs, kind: CallKind) -> u64 {
    fs.stats().of(kind).calls
}

/// Idle limits no test reaches however slow the machine: entries leave only when a test says
/// so (by count, REMOVE, RENAME, `expire_idle` with its own clock), never by the sweeper.
const KEPT: IdleLimits = IdleLimits {
    count_max: 1024,
    idle: Duration::from_secs(24 * 3600),
};

/// An export of a fresh directory, on a mount of its own (so its counters are its own); the
/// caches as given, else bounded by count only ([`KEPT`]).
fn export(cluster: &common::Cluster, path: &str, cache: Option<OpenCacheConfig>) -> CephFs {
    let mut cfg = cluster.config(path);
    cfg.open_cache = cache.unwrap_or(OpenCacheConfig {
        files: KEPT,
        dirs: KEPT,
    });
    CephFs::new(cfg).unwrap_or_else(|e| panic!("mount {path}: {e}"))
}

fn create(fs: &CephFs, dir: &FileHandle, name: &str) -> FileHandle {
    fs.create(
        &root(),
        dir,
        name.as_bytes(),
        CreateHow::Unchecked(SetAttr {
            mode: Some(0o644),
            ..SetAttr::default()
        }),
    )
    .unwrap_or_else(|e| panic!("create {name}: {:?}", e.0))
    .fh
}

fn lookup(fs: &CephFs, name: &str) -> FileHandle {
    fs.lookup(&root(), &fs.root_handle(), name.as_bytes())
        .unwrap_or_else(|e| panic!("lookup {name}: {:?}", e.0))
        .fh
}

fn write(fs: &CephFs, fh: &FileHandle, offset: u64, data: &[u8], stable: StableHow) {
    fs.write(&root(), fh, offset, &[Bytes::copy_from_slice(data)], stable)
        .unwrap_or_else(|e| panic!("write: {:?}", e.0));
}

fn read(fs: &CephFs, fh: &FileHandle, offset: u64, len: usize) -> Result<Vec<u8>, FsError> {
    let mut buf = vec![0u8; len];
    let n = fs
        .read(&root(), fh, offset, &mut [&mut buf[..]])
        .map_err(|e| e.0)?
        .count;
    buf.truncate(n);
    Ok(buf)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    // A bound on waiting for another Ceph client's view, not an assertion about time.
    let t0 = Instant::now();
    while !ok() {
        assert!(t0.elapsed() < Duration::from_secs(60), "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_hundred_reads_of_one_file_cost_one_open() {
    let cluster = common::Cluster::start("opencache-reads");
    let dir = cluster.fresh_dir("r");
    let writer = export(&cluster, &dir, None);
    let fh = create(&writer, &writer.root_handle(), "f");
    let data = pattern(64 * 1024, 1);
    write(&writer, &fh, 0, &data, StableHow::FileSync);

    // The FILE_SYNC WRITE closed the writer's file: a file held open for writing on one head
    // stalls another head's reads in libcephfs 16.2 (measured: ll_read waits until the
    // writer closes).
    assert_eq!(writer.open_cache_stats().files_open, 0);
    // A second head (a mount of its own) reads the file 100 times, 4 KiB at a time.
    let reader = export(&cluster, &dir, None);
    let fh = lookup(&reader, "f");
    let (opens0, lookups0) = (
        calls(&reader, CallKind::Open),
        calls(&reader, CallKind::Lookup),
    );
    for i in 0..100u64 {
        let off = (i % 16) * 4096;
        let got = read(&reader, &fh, off, 4096).unwrap();
        assert_eq!(got, &data[off as usize..off as usize + 4096], "read {i}");
    }
    let s = reader.open_cache_stats();
    assert_eq!(
        calls(&reader, CallKind::Open) - opens0,
        1,
        "one ll_open, no close: {s:?} {:?}",
        reader.stats()
    );
    assert!(
        calls(&reader, CallKind::Lookup) - lookups0 <= 1,
        "the handle resolved once, then from the cached file"
    );
    assert_eq!((s.files_opened, s.file_hits, s.files_open), (1, 99, 1));

    // Where the time went (for the record; nothing asserted on time).
    for kind in [
        CallKind::Lookup,
        CallKind::Getattr,
        CallKind::Open,
        CallKind::Read,
    ] {
        let c = reader.stats().of(kind);
        eprintln!(
            "reader {}: {} calls, {} us average",
            kind.name(),
            c.calls,
            c.latency_micros_total / c.calls.max(1)
        );
    }
    // Without the cache (a count of 0: open and close per call, as before it), for contrast.
    let uncached = export(
        &cluster,
        &dir,
        Some(OpenCacheConfig {
            files: IdleLimits {
                count_max: 0,
                idle: KEPT.idle,
            },
            dirs: KEPT,
        }),
    );
    let ufh = lookup(&uncached, "f");
    let (uopens0, ulookups0) = (
        calls(&uncached, CallKind::Open),
        calls(&uncached, CallKind::Lookup),
    );
    for _ in 0..20 {
        read(&uncached, &ufh, 0, 4096).unwrap();
    }
    assert_eq!(
        calls(&uncached, CallKind::Open) - uopens0,
        40,
        "open + close each"
    );
    assert_eq!(calls(&uncached, CallKind::Lookup) - ulookups0, 20);
    for kind in [CallKind::Lookup, CallKind::Open] {
        let c = uncached.stats().of(kind);
        eprintln!(
            "uncached {}: {} calls, {} us average",
            kind.name(),
            c.calls,
            c.latency_micros_total / c.calls.max(1)
        );
    }
    // GETATTR of the open file needs no lookup either.
    let lookups1 = calls(&reader, CallKind::Lookup);
    assert_eq!(reader.getattr(&fh).unwrap().size, data.len() as u64);
    assert_eq!(calls(&reader, CallKind::Lookup), lookups1);

    // Idle past its limit (the clock passed in): closed.
    reader.expire_idle(Instant::now() + KEPT.idle);
    assert_eq!(reader.open_cache_stats().files_open, 0);
    assert_eq!(
        calls(&reader, CallKind::Open) - opens0,
        2,
        "the open and its close"
    );
}

#[test]
fn the_cache_is_bounded_by_count_least_recently_used_first() {
    let cluster = common::Cluster::start("opencache-bound");
    let dir = cluster.fresh_dir("b");
    let cache = OpenCacheConfig {
        files: IdleLimits {
            count_max: 4,
            idle: KEPT.idle,
        },
        dirs: KEPT,
    };
    let fs = export(&cluster, &dir, Some(cache));
    let files: Vec<FileHandle> = (0..10)
        .map(|i| create(&fs, &fs.root_handle(), &format!("f{i}")))
        .collect();
    assert_eq!(fs.open_cache_stats().files_open, 4);
    let opens0 = calls(&fs, CallKind::Open);
    // f9 was created last: still open, so its WRITE opens nothing.
    write(&fs, &files[9], 0, b"x", StableHow::Unstable);
    assert_eq!(calls(&fs, CallKind::Open), opens0);
    // f0 was closed past the bound: its WRITE opens it and closes the least recently used.
    write(&fs, &files[0], 0, b"y", StableHow::Unstable);
    assert_eq!(
        calls(&fs, CallKind::Open) - opens0,
        2,
        "one open, one close"
    );
    assert_eq!(fs.open_cache_stats().files_open, 4);
}

#[test]
fn written_and_committed_data_is_what_ceph_fuse_reads_and_the_other_way_round() {
    let cluster = common::Cluster::start("opencache-coherence");
    let fuse = cluster.fuse();
    let dir = cluster.fresh_dir("c");
    let fs = export(&cluster, &dir, None);
    let fh = create(&fs, &fs.root_handle(), "f");
    let data = pattern(1 << 20, 7);
    for (i, chunk) in data.chunks(64 * 1024).enumerate() {
        write(&fs, &fh, (i * 64 * 1024) as u64, chunk, StableHow::Unstable);
    }
    let fsyncs0 = calls(&fs, CallKind::Fsync);
    fs.commit(&root(), &fh, 0, 0).unwrap();
    assert_eq!(
        calls(&fs, CallKind::Fsync) - fsyncs0,
        1,
        "COMMIT still fsyncs"
    );
    let s = fs.open_cache_stats();
    assert_eq!(
        (s.files_opened, s.file_hits),
        (1, 17),
        "the 16 WRITEs and the COMMIT used the file CREATE opened"
    );
    assert_eq!(s.files_open, 0, "closed once committed");
    let seen = std::fs::read(fuse.path(&format!("{dir}/f"))).unwrap();
    assert!(seen == data, "ceph-fuse reads what sluice wrote");

    // Another client rewrites the file while sluice holds it open for reading: sluice reads
    // the new data through the same open file.
    assert_eq!(read(&fs, &fh, 0, 16).unwrap(), &data[..16]);
    let opened = fs.open_cache_stats().files_opened;
    let new = pattern(1 << 20, 99);
    std::fs::write(fuse.path(&format!("{dir}/f")), &new).unwrap();
    let got = read(&fs, &fh, 0, 1 << 20).unwrap();
    assert!(got == new, "sluice reads what ceph-fuse wrote");
    assert_eq!(
        fs.open_cache_stats().files_opened,
        opened,
        "the same open file"
    );
}

#[test]
fn a_file_removed_or_renamed_over_through_sluice_is_closed_at_once() {
    let cluster = common::Cluster::start("opencache-remove");
    let fuse = cluster.fuse();
    let dir = cluster.fresh_dir("d");
    let fs = export(&cluster, &dir, None);
    let d = fs.root_handle();
    let big = create(&fs, &d, "big");
    write(&fs, &big, 0, &pattern(4 << 20, 3), StableHow::FileSync);
    read(&fs, &big, 0, 4096).unwrap();
    let other = create(&fs, &d, "other");
    assert_eq!(fs.open_cache_stats().files_open, 2);

    fs.remove(&root(), &d, b"big").unwrap();
    assert_eq!(fs.open_cache_stats().files_open, 1, "big closed");
    assert!(!fuse.path(&format!("{dir}/big")).exists());
    assert_eq!(read(&fs, &big, 0, 1).unwrap_err(), FsError::Stale);

    // RENAME over "other" (open since its CREATE): the replaced file is closed.
    let src = create(&fs, &d, "src");
    write(&fs, &src, 0, b"new", StableHow::FileSync);
    assert_eq!(
        fs.open_cache_stats().files_open,
        1,
        "src closed once stable"
    );
    fs.rename(&root(), &d, b"src", &d, b"other").unwrap();
    assert_eq!(
        fs.open_cache_stats().files_open,
        0,
        "the replaced file closed"
    );
    assert_eq!(read(&fs, &other, 0, 1).unwrap_err(), FsError::Stale);
    assert_eq!(read(&fs, &src, 0, 3).unwrap(), b"new");
    assert_eq!(fs.open_cache_stats().files_open, 1);
}

#[test]
fn a_file_removed_by_another_client_is_closed_on_its_next_use() {
    let cluster = common::Cluster::start("opencache-stray");
    let fuse = cluster.fuse();
    let dir = cluster.fresh_dir("s");
    let fs = export(&cluster, &dir, None);
    let fh = create(&fs, &fs.root_handle(), "f");
    write(&fs, &fh, 0, b"data", StableHow::FileSync);
    assert_eq!(read(&fs, &fh, 0, 4).unwrap(), b"data");
    assert_eq!(fs.open_cache_stats().files_open, 1);
    std::fs::remove_file(fuse.path(&format!("{dir}/f"))).unwrap();
    // Once this client has heard of the unlink (the MDS revokes its caps), the next READ is
    // STALE and the file is closed.
    wait_for("the unlink reaches sluice's client", || {
        read(&fs, &fh, 0, 4).is_err_and(|e| e == FsError::Stale)
    });
    assert_eq!(fs.open_cache_stats().files_open, 0);
}

#[test]
fn a_readdir_of_a_thousand_entries_in_pages_opens_the_directory_once() {
    let cluster = common::Cluster::start("opencache-readdir");
    let dir = cluster.fresh_dir("l");
    let maker = export(
        &cluster,
        &dir,
        Some(OpenCacheConfig {
            files: IdleLimits {
                count_max: 0,
                idle: Duration::ZERO,
            },
            dirs: KEPT,
        }),
    );
    for i in 0..1000 {
        create(&maker, &maker.root_handle(), &format!("entry-{i:04}"));
    }
    for plus in [false, true] {
        let fs = export(&cluster, &dir, None);
        let (names, pages) = walk(&fs, &fs.root_handle(), 50, plus);
        assert_eq!(names.len(), 1000, "plus={plus}");
        assert!(names.iter().all(|n| n.starts_with("entry-")));
        assert!(pages >= 20, "pages of at most 50: {pages}");
        let s = fs.open_cache_stats();
        assert_eq!(
            s.dirs_opened, 1,
            "plus={plus}: one opendir for {pages} pages"
        );
        assert_eq!(s.dir_hits, pages - 1, "plus={plus}");
        assert_eq!(s.dirs_open, 0, "closed at the end");
        // Asked again from the start: a new stream.
        let (again, _) = walk(&fs, &fs.root_handle(), 400, plus);
        assert_eq!(again, names);
        assert_eq!(fs.open_cache_stats().dirs_opened, 2);
    }
}

/// A whole READDIR walk taking at most `page` entries a call; the names (without `.` and
/// `..`) and the number of calls.
fn walk(fs: &CephFs, dir: &FileHandle, page: usize, plus: bool) -> (BTreeSet<String>, u64) {
    let mut names = BTreeSet::new();
    let (mut cookie, mut verf, mut pages) = (0u64, [0u8; 8], 0u64);
    loop {
        pages += 1;
        let mut taken = 0;
        let mut last = cookie;
        let ok = fs
            .readdir(&root(), dir, cookie, verf, plus, &mut |e| {
                if taken == page {
                    return false;
                }
                taken += 1;
                last = e.cookie;
                if plus && e.name != b"." && e.name != b".." {
                    assert!(e.fh.is_some() && e.attr.is_some(), "plus has attributes");
                }
                let n = String::from_utf8_lossy(e.name).into_owned();
                assert!(
                    names.insert(n.clone()) || n == "." || n == "..",
                    "{n} twice"
                );
                true
            })
            .unwrap_or_else(|e| panic!("readdir: {:?}", e.0));
        names.remove(".");
        names.remove("..");
        if ok.eof {
            return (names, pages);
        }
        assert!(taken > 0, "a page with no entry");
        cookie = last;
        verf = ok.cookieverf;
        assert!(pages < 10_000, "the walk ends");
    }
}

/// A READ handed in as many pooled chunks (the data path's 64 KiB chunks) is one libcephfs
/// read call, not one per chunk, and fills every chunk in order; a READ past the end stops at
/// the end, in as many calls as it takes to see it.
#[test]
fn a_chunked_read_is_one_libcephfs_call() {
    const CHUNK: usize = 64 * 1024;
    let cluster = common::Cluster::start("opencache-readv");
    let dir = cluster.fresh_dir("v");
    let fs = export(&cluster, &dir, None);
    let fh = create(&fs, &fs.root_handle(), "f");
    let data = pattern(16 * CHUNK, 7);
    write(&fs, &fh, 0, &data, StableHow::FileSync);

    let mut chunks = vec![vec![0u8; CHUNK]; 16];
    let reads0 = calls(&fs, CallKind::Read);
    let ok = {
        let mut slices: Vec<&mut [u8]> = chunks.iter_mut().map(|c| &mut c[..]).collect();
        fs.read(&root(), &fh, 0, &mut slices)
            .unwrap_or_else(|e| panic!("read: {:?}", e.0))
    };
    assert_eq!(ok.count, data.len());
    assert_eq!(chunks.concat(), data, "every chunk filled in order");
    assert_eq!(
        calls(&fs, CallKind::Read) - reads0,
        1,
        "one call for a 1 MiB READ in 16 chunks"
    );

    // Half a chunk before the end, asking for two chunks: the rest, and EOF.
    let mut tail = vec![vec![0u8; CHUNK]; 2];
    let at = data.len() - CHUNK / 2;
    let ok = {
        let mut slices: Vec<&mut [u8]> = tail.iter_mut().map(|c| &mut c[..]).collect();
        fs.read(&root(), &fh, at as u64, &mut slices)
            .unwrap_or_else(|e| panic!("read: {:?}", e.0))
    };
    assert_eq!(ok.count, CHUNK / 2);
    assert!(ok.eof);
    assert_eq!(&tail[0][..CHUNK / 2], &data[at..]);
}

/// A WRITE whose payload arrives in many chunks (the receive path's pieces) is one libcephfs
/// write call, not one per chunk, and lands every chunk in order: what sluice reads back and
/// what ceph-fuse reads after the COMMIT.
#[test]
fn a_chunked_write_is_one_libcephfs_call() {
    const CHUNK: usize = 64 * 1024;
    let cluster = common::Cluster::start("opencache-writev");
    let fuse = cluster.fuse();
    let dir = cluster.fresh_dir("w");
    let fs = export(&cluster, &dir, None);
    let fh = create(&fs, &fs.root_handle(), "f");
    let data = pattern(16 * CHUNK + 100, 11);
    // Sixteen 64 KiB chunks, an empty one and a short tail, as one WRITE's payload.
    let whole = Bytes::from(data.clone());
    let mut chunks: Vec<Bytes> = (0..16)
        .map(|i| whole.slice(i * CHUNK..(i + 1) * CHUNK))
        .collect();
    chunks.insert(3, Bytes::new());
    chunks.push(whole.slice(16 * CHUNK..));

    let writes0 = calls(&fs, CallKind::Write);
    let ok = fs
        .write(&root(), &fh, 4096, &chunks, StableHow::Unstable)
        .unwrap_or_else(|e| panic!("write: {:?}", e.0));
    assert_eq!(ok.count, data.len());
    assert_eq!(
        calls(&fs, CallKind::Write) - writes0,
        1,
        "one call for a WRITE in 18 chunks"
    );
    assert_eq!(read(&fs, &fh, 4096, data.len()).unwrap(), data);
    fs.commit(&root(), &fh, 0, 0).unwrap();
    let seen = std::fs::read(fuse.path(&format!("{dir}/f"))).unwrap();
    assert_eq!(seen.len(), 4096 + data.len());
    assert!(
        seen[..4096].iter().all(|b| *b == 0),
        "a hole before the offset"
    );
    assert!(
        seen[4096..] == data[..],
        "ceph-fuse reads every chunk in order"
    );
}

/// When the MDS recalls caps (here `ceph tell mds.a cache drop`, with the MDS's floor of caps
/// per client lowered so a test-sized cache is over it), libcephfs asks for the inodes whose
/// only reference is the open-file cache's (`ino_release_cb`), and the cache closes those
/// files: the count of open files drops without any idle time passing (the idle limit is a
/// day) and without another NFS call.
#[test]
fn files_the_mds_recalls_are_closed() {
    const FILES: usize = 40;
    let cluster = common::Cluster::start("opencache-recall");
    let dir = cluster.fresh_dir("p");
    let fs = export(&cluster, &dir, None);
    let fhs: Vec<FileHandle> = (0..FILES)
        .map(|i| {
            let fh = create(&fs, &fs.root_handle(), &format!("f{i}"));
            write(&fs, &fh, 0, b"x", StableHow::FileSync);
            fh
        })
        .collect();
    for fh in &fhs {
        assert_eq!(read(&fs, fh, 0, 1).unwrap(), b"x");
    }
    assert_eq!(fs.open_cache_stats().files_open, FILES as u64);
    assert_eq!(fs.open_cache_stats().released, 0);
    cluster.ceph(&[
        "tell",
        "mds.a",
        "config",
        "set",
        "mds_min_caps_per_client",
        "1",
    ]);
    let out = cluster.ceph(&["tell", "mds.a", "cache", "drop", "10"]);
    eprintln!("cache drop: {out}");
    wait_for("the cache closes what the MDS recalled", || {
        fs.open_cache_stats().files_open < FILES as u64
    });
    let s = fs.open_cache_stats();
    let asked = fs.stats().release_requests;
    eprintln!("after the recall: {s:?}, {asked} release requests");
    assert!(asked > 0, "libcephfs asked");
    assert!(s.released > 0);
    // Nothing else closed a file (no idle time, far from the count bound). Requests still on
    // their way may close more, so only this snapshot's own sum is exact.
    assert_eq!(s.files_open + s.released, FILES as u64);
    assert_eq!(s.dirs_open, 0);
    // A released file is opened again on its next use, with the same data.
    let opened = s.files_opened;
    for fh in &fhs {
        assert_eq!(read(&fs, fh, 0, 1).unwrap(), b"x");
    }
    assert!(
        fs.open_cache_stats().files_opened >= opened + s.released,
        "each released file is opened again"
    );
}

/// The references libcephfs counts for inode `ino` from its user (`ll_ref`), as the client
/// session `client.<id>` of this process shows them in its admin socket's `dump_cache` (the
/// test cluster's configuration gives each client name and process a socket of its own).
fn ll_ref(cluster: &common::Cluster, id: &str, ino: u64) -> u64 {
    let asok = cluster
        .dir
        .join(format!("run/client.{id}.{}.asok", std::process::id()));
    // CEPH_ARGS (options for daemons and the monitors' commands) would be taken as the
    // socket command's arguments.
    let out = std::process::Command::new("timeout")
        .args(["30", "ceph", "--admin-daemon"])
        .arg(&asok)
        .arg("dump_cache")
        .env_remove("CEPH_ARGS")
        .output()
        .expect("run ceph --admin-daemon");
    assert!(
        out.status.success(),
        "dump_cache through {}: {}",
        asok.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // One object per inode, each opening with its "path"; its own "ino" is the first in it
    // (its caps and snap realm name inodes too, later), its "ll_ref" the only one.
    let want = format!("\"ino\": \"{ino:#x}\"");
    let field = |obj: &str, name: &str| -> Option<String> {
        obj.lines()
            .map(str::trim)
            .find(|l| l.starts_with(&format!("\"{name}\":")))
            .map(|l| l.trim_end_matches(',').to_string())
    };
    text.split("\"path\":")
        .skip(1)
        .find(|obj| field(obj, "ino").as_deref() == Some(want.as_str()))
        .and_then(|obj| field(obj, "ll_ref"))
        .and_then(|l| l.rsplit(' ').next().and_then(|n| n.parse().ok()))
        .unwrap_or_else(|| panic!("inode {ino:#x} in dump_cache: {text}"))
}

/// The export root's inode is referenced by libcephfs for the mount and by sluice once for
/// the mount's life; a READDIR of the root (whose `.` and `..` come back from readdirplus with
/// references to the root) and a LOOKUP of `..` that lands on it put the references they were
/// given, however many times they run (before, each READDIR kept two and each LOOKUP one).
#[test]
fn readdir_and_lookup_of_the_export_root_put_its_references_back() {
    let cluster = common::Cluster::start("opencache-rootref");
    let dir = cluster.fresh_dir("r");
    let mut cfg = cluster.config(&dir);
    // A client name of its own: its own admin socket (ll_ref).
    cfg.ceph.client_id = Some("rootref".into());
    let fs = CephFs::new(cfg).unwrap_or_else(|e| panic!("mount {dir}: {e}"));
    let root_fh = fs.root_handle();
    let root_ino = fs.getattr(&root_fh).unwrap().fileid;
    let sub = fs
        .mkdir(&root(), &root_fh, b"sub", &SetAttr::default())
        .unwrap_or_else(|e| panic!("mkdir: {:?}", e.0))
        .fh;
    let before = ll_ref(&cluster, "rootref", root_ino);
    for _ in 0..5 {
        let mut names = 0;
        fs.readdir(&root(), &root_fh, 0, [0; 8], true, &mut |_| {
            names += 1;
            true
        })
        .unwrap_or_else(|e| panic!("readdir: {:?}", e.0));
        assert_eq!(names, 3, ". .. sub");
        let up = fs
            .lookup(&root(), &sub, b"..")
            .unwrap_or_else(|e| panic!("lookup ..: {:?}", e.0));
        assert_eq!(up.fh, root_fh);
    }
    assert_eq!(ll_ref(&cluster, "rootref", root_ino), before);
}
