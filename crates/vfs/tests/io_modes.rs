//! Cache modes per export (issue #5): every mode returns the same bytes for any offset and
//! length, including the mixed ones (`io_write=direct` with buffered reads, and the reverse). Each test runs on a directory of the real disk (under `CARGO_TARGET_TMPDIR`) and on a
//! tmpfs mounted for it under /tmp, and compares every READ against a reference model of the
//! file. Needs root (`open_by_handle_at`, mount) and util-linux's fincore; where the tmpfs
//! cannot be mounted or fincore is missing the test fails saying so, unless `SLUICE_TEST_SKIP`
//! names `tmpfs` or `fincore` (docs/testing.md).
//!
//! Seeds: each test prints its seed; `SLUICE_SEED=<n>` replays one.

use bytes::Bytes;
use sluice_vfs::FileSystem;
use sluice_vfs::{
    Caller, CreateHow, Cred, FileHandle, IoMode, IoModes, LocalFs, LocalFsConfig, SetAttr,
    StableHow,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

#[path = "../../../tests/support/needs.rs"]
mod needs;

/// The modes under test: one for both directions, or READ's and WRITE's.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Mode(IoModes);

impl std::fmt::Debug for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let IoModes { read, write } = self.0;
        if read == write {
            write!(f, "{read:?}")
        } else {
            write!(f, "read{read:?}-write{write:?}")
        }
    }
}

impl Mode {
    const fn both(m: IoMode) -> Mode {
        Mode(IoModes { read: m, write: m })
    }
    const fn split(read: IoMode, write: IoMode) -> Mode {
        Mode(IoModes { read, write })
    }
    fn id(self) -> u64 {
        self.0.read as u64 * 3 + self.0.write as u64
    }
}

const MODES: [Mode; 5] = [
    Mode::both(IoMode::Buffered),
    Mode::both(IoMode::DontCache),
    Mode::both(IoMode::Direct),
    Mode::split(IoMode::Buffered, IoMode::Direct),
    Mode::split(IoMode::Direct, IoMode::Buffered),
];
const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

#[test]
fn random_reads_and_writes_match_the_model_in_every_mode() {
    let seed = seed("random_reads_and_writes_match_the_model_in_every_mode");
    for place in places("random") {
        for mode in MODES {
            let mut rng = Rng::new(seed ^ mode.id());
            let fs = place.fs(mode);
            let fh = create(&fs, &format!("f-{mode:?}"));
            let mut model = Vec::new();
            for step in 0..120 {
                let what = format!("{} {mode:?} seed {seed} step {step}", place.name);
                if rng.below(2) == 0 {
                    let offset = rng.offset(model.len() as u64);
                    let n = rng.length() as usize;
                    let data = rng.bytes(n);
                    write(&fs, &fh, offset, &data, &mut rng, &mut model);
                } else {
                    let offset = rng.offset(model.len() as u64);
                    let len = rng.length();
                    check_read(&fs, &fh, offset, len, &mut rng, &model, &what);
                }
            }
            // Everything once more, in 1 MiB + 1 pieces.
            let mut offset = 0;
            while offset <= model.len() as u64 {
                check_read(&fs, &fh, offset, MIB + 1, &mut rng, &model, &place.name);
                offset += MIB + 1;
            }
            report(&place, mode, &fs);
        }
    }
}

#[test]
fn edge_cases_in_every_mode() {
    let seed = seed("edge_cases_in_every_mode");
    for place in places("edges") {
        for mode in MODES {
            let mut rng = Rng::new(seed);
            let fs = place.fs(mode);
            let fh = create(&fs, &format!("e-{mode:?}"));
            let mut model = Vec::new();
            let what = format!("{} {mode:?}", place.name);
            // Single bytes, around block boundaries, on an empty file and past its end.
            for offset in [0, 1, 511, 512, 4095, 4096, 4097, 9000] {
                write(&fs, &fh, offset, &[offset as u8 | 1], &mut rng, &mut model);
            }
            // Exactly aligned, then larger than 1 MiB, misaligned on both ends.
            let data = rng.bytes(64 * KIB as usize);
            write(&fs, &fh, 8192, &data, &mut rng, &mut model);
            let data = rng.bytes((MIB + 4097) as usize);
            write(&fs, &fh, 12_345, &data, &mut rng, &mut model);
            let len = model.len() as u64;
            for (offset, n) in [
                (0, 1),
                (4095, 1),
                (4096, 4096),
                (8192, 64 * KIB),
                (1, MIB + 2),
                (0, 2 * MIB),
                (len - 1, 1),
                (len - 1, 4096),
                (len, 1),
                (len + 4096, 4096),
                (len - 100, 200),
                (len & !4095, 8192),
            ] {
                check_read(&fs, &fh, offset, n, &mut rng, &model, &what);
            }
            report(&place, mode, &fs);
        }
    }
}

#[test]
fn concurrent_writers_of_distinct_ranges() {
    let seed = seed("concurrent_writers_of_distinct_ranges");
    for place in places("concurrent") {
        for mode in MODES {
            let mut rng = Rng::new(seed ^ mode.id());
            let fs = place.fs(mode);
            let fh = create(&fs, &format!("c-{mode:?}"));
            // 4 MiB cut into misaligned pieces, dealt round-robin to the writers.
            let size = 4 * MIB as usize;
            let model = rng.bytes(size);
            let mut pieces = Vec::new();
            let mut at = 0usize;
            while at < size {
                let n = (1 + rng.below(200_000) as usize).min(size - at);
                pieces.push(at..at + n);
                at += n;
            }
            const WRITERS: usize = 4;
            std::thread::scope(|s| {
                for w in 0..WRITERS {
                    let (fs, fh, model) = (&fs, &fh, &model);
                    let mine: Vec<_> = pieces.iter().skip(w).step_by(WRITERS).cloned().collect();
                    let mut rng = Rng::new(seed ^ (w as u64 + 1) << 32);
                    s.spawn(move || {
                        for r in mine.into_iter().rev() {
                            let chunks = rng.chunk(&model[r.clone()]);
                            fs.write(&me(), fh, r.start as u64, &chunks, StableHow::Unstable)
                                .unwrap();
                        }
                    });
                }
            });
            let what = format!(
                "{} {mode:?} seed {seed} after concurrent writes",
                place.name
            );
            check_read(&fs, &fh, 0, size as u64 + 1, &mut rng, &model, &what);
            for _ in 0..20 {
                let (offset, len) = (rng.below(size as u64), rng.length());
                check_read(&fs, &fh, offset, len, &mut rng, &model, &what);
            }
            report(&place, mode, &fs);
        }
    }
}

#[test]
fn committed_ranges_are_in_the_file_after_the_server_is_gone() {
    let seed = seed("committed_ranges_are_in_the_file_after_the_server_is_gone");
    for place in places("commit") {
        for mode in MODES {
            let mut rng = Rng::new(seed ^ mode.id());
            let name = format!("commit-{mode:?}");
            let mut model = Vec::new();
            {
                let fs = place.fs(mode);
                let fh = create(&fs, &name);
                let mut offset = 0;
                while offset < 3 * MIB {
                    let n = 1 + rng.below(300_000) as usize;
                    let data = rng.bytes(n);
                    write(&fs, &fh, offset, &data, &mut rng, &mut model);
                    offset += data.len() as u64;
                }
                fs.commit(&me(), &fh, 1_000_003, 500_000).unwrap();
                fs.commit(&me(), &fh, 2_500_001, 0).unwrap();
                fs.commit(&me(), &fh, 0, 0).unwrap();
            }
            let on_disk = std::fs::read(place.export().join(&name)).unwrap();
            assert!(
                on_disk == model,
                "{} {mode:?} seed {seed}: file differs from the model",
                place.name
            );
        }
    }
}

#[test]
fn a_file_written_in_one_mode_reads_the_same_in_every_other() {
    let seed = seed("a_file_written_in_one_mode_reads_the_same_in_every_other");
    for place in places("cross") {
        // Three exports of one directory, alive together: same handles, different modes.
        let servers: Vec<LocalFs> = MODES.iter().map(|&m| place.fs(m)).collect();
        let fh = create(&servers[0], "x");
        let mut rng = Rng::new(seed);
        let mut model = Vec::new();
        // The coherence cases by name: a buffered partial block, then a direct read of it; a
        // direct write over a cached page, then a buffered read of it.
        let (buffered, direct) = (&servers[0], &servers[2]);
        write(buffered, &fh, 0, &rng.bytes(8192), &mut rng, &mut model);
        write(buffered, &fh, 10, &rng.bytes(100), &mut rng, &mut model);
        check_read(
            direct,
            &fh,
            0,
            4096,
            &mut rng,
            &model,
            "direct after buffered",
        );
        check_read(
            buffered,
            &fh,
            0,
            8192,
            &mut rng,
            &model,
            "buffered, caches the pages",
        );
        write(direct, &fh, 0, &rng.bytes(8192), &mut rng, &mut model);
        check_read(
            buffered,
            &fh,
            0,
            8192,
            &mut rng,
            &model,
            "buffered after direct",
        );
        for step in 0..150 {
            let (w, r) = (rng.below(3) as usize, rng.below(3) as usize);
            let offset = rng.offset(model.len() as u64);
            let n = rng.length() as usize;
            let data = rng.bytes(n);
            write(&servers[w], &fh, offset, &data, &mut rng, &mut model);
            let what = format!(
                "{} seed {seed} step {step}: written {:?}, read {:?}",
                place.name, MODES[w], MODES[r]
            );
            let (offset, len) = (rng.offset(model.len() as u64), rng.length());
            check_read(&servers[r], &fh, offset, len, &mut rng, &model, &what);
        }
        for (fs, mode) in servers.iter().zip(MODES) {
            check_read(
                fs,
                &fh,
                0,
                model.len() as u64,
                &mut rng,
                &model,
                &place.name,
            );
            report(&place, mode, fs);
        }
    }
}

/// What each mode leaves in the page cache after writing and reading 4 MiB (measured with
/// util-linux `fincore`; without it the test fails unless `SLUICE_TEST_SKIP` names `fincore`).
#[test]
fn each_mode_leaves_the_page_cache_as_promised() {
    // The real disk: the first place, always there.
    let place = places("residency").swap_remove(0);
    let mut rng = Rng::new(seed("each_mode_leaves_the_page_cache_as_promised"));
    for mode in MODES {
        let fs = place.fs(mode);
        let name = format!("r-{mode:?}");
        let fh = create(&fs, &name);
        let data = rng.bytes(4 * MIB as usize);
        for (i, piece) in data.chunks(MIB as usize).enumerate() {
            let chunks = rng.chunk(piece);
            let offset = i as u64 * MIB;
            fs.write(&me(), &fh, offset, &chunks, StableHow::FileSync)
                .unwrap();
        }
        check_read(&fs, &fh, 0, 4 * MIB, &mut rng, &data, &place.name);
        let Some(resident) = resident_bytes(&place.export().join(&name)) else {
            return needs::missing(
                "fincore",
                "`fincore --bytes` gave no residency",
                "apt-get install util-linux",
            );
        };
        let effective = Mode::split(fs.read_mode(), fs.write_mode());
        eprintln!(
            "io_modes: {}: {mode:?} (effective {effective:?}) leaves {} KiB of 4096 KiB cached",
            place.name,
            resident / KIB
        );
        // a buffered write leaves the pages cached, and so does a buffered read of them
        if effective.0.read == IoMode::Buffered || effective.0.write == IoMode::Buffered {
            assert!(resident >= 3 * MIB, "{mode:?} keeps the data");
        } else {
            assert!(resident <= MIB, "{mode:?} drops it");
        }
    }
}

// --- Helpers ---------------------------------------------------------------------------------

/// A buffered export sends write-behind flushes of a stream O_DIRECT and everything else
/// through the page cache (iomode, "Streaming writes of a buffered export"). Streaming flushes,
/// small UNSTABLE / DATA_SYNC / FILE_SYNC writes over and between them, and READs interleave;
/// every READ (through the export, and through the page cache with std::fs at the end) must
/// see the model, and a long aligned flush into a fresh file must have bypassed the cache.
#[test]
fn streaming_flushes_and_small_writes_mix_on_a_buffered_export() {
    let seed = seed("streaming_flushes_and_small_writes_mix_on_a_buffered_export");
    let mode = Mode::both(IoMode::Buffered);
    for place in places("stream") {
        let mut rng = Rng::new(seed);
        let fs = place.fs(mode);
        // The direct path is taken: 8 MiB streamed into a fresh file leaves (almost) nothing
        // cached, where a buffered write would leave all 8 MiB. tmpfs is its own cache.
        let fh = create(&fs, "fresh");
        let data = rng.bytes(8 * MIB as usize);
        let ok = fs
            .write_flush(&me(), &fh, 0, &rng.chunk(&data), data.len() as u64)
            .unwrap();
        assert_eq!(ok.count, data.len());
        let cached = resident_bytes(&place.export().join("fresh"));
        if !place.mounted && fs.write_mode() == IoMode::Buffered {
            if let Some(bytes) = cached {
                assert!(
                    bytes < MIB,
                    "{}: {bytes} bytes cached after a streaming flush",
                    place.name
                );
            }
        }
        let fh = create(&fs, "mixed");
        let mut model = Vec::new();
        for step in 0..150 {
            let what = format!("{} seed {seed} step {step}", place.name);
            match rng.below(4) {
                0 => {
                    // A streaming flush: one or several pieces of a 1-3 MiB contiguous run.
                    let offset = rng.offset(model.len() as u64);
                    let n = (MIB + rng.below(2 * MIB)) as usize;
                    let run = rng.bytes(n);
                    let mut at = 0;
                    while at < n {
                        let piece = (n - at).min(1 + rng.below(n as u64) as usize);
                        let ok = fs
                            .write_flush(
                                &me(),
                                &fh,
                                offset + at as u64,
                                &rng.chunk(&run[at..at + piece]),
                                n as u64,
                            )
                            .unwrap();
                        assert_eq!(ok.count, piece, "{what}");
                        at += piece;
                    }
                    let end = offset as usize + n;
                    if model.len() < end {
                        model.resize(end, 0);
                    }
                    model[offset as usize..end].copy_from_slice(&run);
                }
                1 => {
                    // A small write, buffered, anywhere (often inside a streamed range).
                    let offset = rng.offset(model.len() as u64);
                    let n = 1 + rng.below(20_000) as usize;
                    let data = rng.bytes(n);
                    write(&fs, &fh, offset, &data, &mut rng, &mut model);
                }
                _ => {
                    let offset = rng.offset(model.len() as u64);
                    let len = rng.length();
                    check_read(&fs, &fh, offset, len, &mut rng, &model, &what);
                }
            }
        }
        let mut offset = 0;
        while offset <= model.len() as u64 {
            check_read(&fs, &fh, offset, MIB + 1, &mut rng, &model, &place.name);
            offset += MIB + 1;
        }
        let through_cache = std::fs::read(place.export().join("mixed")).unwrap();
        assert!(
            through_cache == model,
            "{}: the file read through the page cache differs from the model",
            place.name
        );
        report(&place, mode, &fs);
    }
}

fn me() -> Caller {
    Caller::with_cred(Cred::root())
}

fn create(fs: &LocalFs, name: &str) -> FileHandle {
    let attrs = SetAttr {
        mode: Some(0o644),
        ..SetAttr::default()
    };
    fs.create(
        &me(),
        &fs.root_handle(),
        name.as_bytes(),
        CreateHow::Unchecked(attrs),
    )
    .unwrap()
    .fh
}

/// WRITE `data` in random chunks with a random stability, and apply it to the model.
fn write(
    fs: &LocalFs,
    fh: &FileHandle,
    offset: u64,
    data: &[u8],
    rng: &mut Rng,
    model: &mut Vec<u8>,
) {
    let stable = match rng.below(10) {
        0 => StableHow::DataSync,
        1 => StableHow::FileSync,
        _ => StableHow::Unstable,
    };
    let ok = fs
        .write(&me(), fh, offset, &rng.chunk(data), stable)
        .unwrap();
    assert_eq!(ok.count, data.len());
    let end = offset as usize + data.len();
    if model.len() < end {
        model.resize(end, 0);
    }
    model[offset as usize..end].copy_from_slice(data);
}

/// READ `len` bytes at `offset` into randomly shaped buffers (sometimes aligned, for the
/// zero-copy path) and compare bytes, count and eof with the model.
fn check_read(
    fs: &LocalFs,
    fh: &FileHandle,
    offset: u64,
    len: u64,
    rng: &mut Rng,
    model: &[u8],
    what: &str,
) {
    let len = len as usize;
    let aligned = rng.below(4) == 0;
    let (offset, len) = if aligned {
        (offset & !4095, len.div_ceil(4096) * 4096)
    } else {
        (offset, len)
    };
    // One backing store, 4 KiB aligned, cut into buffers.
    let mut backing = vec![0xA5u8; len + 4096];
    let start = backing.as_ptr().align_offset(4096);
    let area = &mut backing[start..start + len];
    let mut bufs: Vec<&mut [u8]> = Vec::new();
    let mut rest = area;
    while !rest.is_empty() {
        let n = if aligned {
            (64 * 1024).min(rest.len())
        } else {
            (1 + rng.below(80_000) as usize).min(rest.len())
        };
        let (a, b) = rest.split_at_mut(n);
        bufs.push(a);
        rest = b;
    }
    let ok = fs.read(&me(), fh, offset, &mut bufs).unwrap();
    let size = model.len() as u64;
    let lo = (offset.min(size)) as usize;
    let hi = ((offset + len as u64).min(size)) as usize;
    let expect = &model[lo..hi];
    assert_eq!(ok.count, expect.len(), "{what}: count at {offset}+{len}");
    assert_eq!(
        ok.eof,
        offset + ok.count as u64 >= size,
        "{what}: eof at {offset}+{len}"
    );
    assert_eq!(ok.attr.size, size, "{what}: size");
    let got = &backing[start..start + ok.count];
    if got != expect {
        let first = got.iter().zip(expect).position(|(a, b)| a != b).unwrap();
        panic!(
            "{what}: READ {offset}+{len} differs at file offset {}",
            offset + first as u64
        );
    }
}

fn report(place: &Place, mode: Mode, fs: &LocalFs) {
    let effective = Mode::split(fs.read_mode(), fs.write_mode());
    eprintln!(
        "io_modes: {}: requested {mode:?}, effective {effective:?}",
        place.name
    );
    let IoModes { read, write } = mode.0;
    assert!(fs.read_mode() == read || fs.read_mode() == IoMode::Buffered);
    assert!(fs.write_mode() == write || fs.write_mode() == IoMode::Buffered);
}

fn seed(test: &str) -> u64 {
    let seed = std::env::var("SLUICE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("io_modes: {test}: SLUICE_SEED={seed}");
    seed
}

/// Where a test runs: a directory with `export/` and `state/`, maybe a tmpfs mounted there.
struct Place {
    name: String,
    dir: PathBuf,
    mounted: bool,
}

impl Place {
    fn export(&self) -> PathBuf {
        self.dir.join("export")
    }

    fn fs(&self, mode: Mode) -> LocalFs {
        let cfg = LocalFsConfig::new(self.export())
            .state_dir(self.dir.join("state"))
            .io_modes(mode.0);
        LocalFs::new(cfg).unwrap()
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.dir).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The real disk and, if it can be mounted, a tmpfs.
fn places(test: &str) -> Vec<Place> {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let tag = format!("sluice-io-{test}-{}-{n}", std::process::id());
    let disk = Path::new(env!("CARGO_TARGET_TMPDIR")).join(&tag);
    let mut out = vec![prepare(Place {
        name: format!("disk ({})", fs_type(Path::new(env!("CARGO_TARGET_TMPDIR")))),
        dir: disk,
        mounted: false,
    })];
    let dir = PathBuf::from("/tmp").join(format!("{tag}-tmpfs"));
    std::fs::create_dir_all(&dir).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256m,mode=0755", "tmpfs"])
        .arg(&dir)
        .status()
        .is_ok_and(|s| s.success());
    if mounted {
        out.push(prepare(Place {
            name: "tmpfs".into(),
            dir,
            mounted: true,
        }));
    } else {
        let _ = std::fs::remove_dir_all(&dir);
        // Skipped (when SLUICE_TEST_SKIP says so): the tmpfs cases only; the disk's run.
        needs::missing(
            "tmpfs",
            "cannot mount a tmpfs for the tmpfs cases",
            "Run the test as root (mount)",
        );
    }
    out
}

fn prepare(p: Place) -> Place {
    let _ = std::fs::remove_dir_all(p.export());
    std::fs::create_dir_all(p.export()).unwrap();
    p
}

/// Bytes of the file in the page cache, from `fincore`.
fn resident_bytes(path: &Path) -> Option<u64> {
    let out = Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(path)
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// The file system type of `path`, for the report (`findmnt`).
fn fs_type(path: &Path) -> String {
    Command::new("findmnt")
        .args(["-n", "-o", "FSTYPE", "--target"])
        .arg(path)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// xorshift64*: small, seeded, good enough for workloads.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// An offset: mostly inside the file, sometimes at or past its end, sometimes aligned.
    fn offset(&mut self, size: u64) -> u64 {
        let o = match self.below(10) {
            0 => size,
            1 => size + self.below(3 * 4096),
            _ => self.below(size.max(1)),
        };
        if self.below(5) == 0 {
            o & !4095
        } else {
            o
        }
    }

    /// A length: single bytes, small, aligned, up to 256 KiB, and above 1 MiB.
    fn length(&mut self) -> u64 {
        match self.below(10) {
            0 => 1,
            1 => 1 + self.below(600),
            2 => 4096 * (1 + self.below(16)),
            3 => MIB + 1 + self.below(MIB),
            _ => 1 + self.below(256 * KIB),
        }
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }

    /// `data` cut into random chunks, as a WRITE payload arrives.
    fn chunk(&mut self, data: &[u8]) -> Vec<Bytes> {
        let mut out = Vec::new();
        let mut rest = data;
        while !rest.is_empty() {
            let n = (1 + self.below(70_000) as usize).min(rest.len());
            out.push(Bytes::copy_from_slice(&rest[..n]));
            rest = &rest[n..];
        }
        out
    }
}
