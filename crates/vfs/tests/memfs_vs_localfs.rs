//! MemFs against LocalFs: the same random sequences of operations on both must give the same
//! outcomes (the same error, or success), the same bytes read, and the same tree at the end. The
//! in-memory backend stands in for the real one in tests and the simulator, so where they differ
//! those tests would test something else. Needs root (LocalFs switches credentials).
//!
//! Sequences come from a seeded generator; a failure prints its seed and step, and
//! `SLUICE_MEMFS_SEED=n` replays one seed.

use bytes::Bytes;
use sluice_vfs::memfs::MemFsConfig;
use sluice_vfs::{
    Caller, CreateHow, Cred, DirEntry, FileHandle, FileSystem, FsError, LocalFs, LocalFsConfig,
    MemFs, SetAttr, StableHow,
};
use std::path::PathBuf;

/// Seeds tried by default, and operations per seed: enough to reach every operation against
/// every kind of name (missing, file, directory) many times, in about a second.
const SEEDS: u64 = 24;
const STEPS: usize = 80;
/// Names used: few, so operations collide with each other's results.
const NAMES: &[&[u8]] = &[b"a", b"b", b"c", b"d"];
/// Largest write or read offset and length, bytes.
const SPAN_BYTES: u64 = 9000;

/// xorshift64*: a small deterministic generator, enough to draw operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn name(&mut self) -> &'static [u8] {
        NAMES[self.below(NAMES.len() as u64) as usize]
    }
}

struct Pair {
    base: PathBuf,
    local: LocalFs,
    mem: MemFs,
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

impl Pair {
    fn new(seed: u64) -> Pair {
        let base = PathBuf::from(format!(
            "/tmp/sluice-memfs-vs-{}-{seed}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("export")).unwrap();
        let local =
            LocalFs::new(LocalFsConfig::new(base.join("export")).state_dir(base.join("state")))
                .unwrap();
        Pair {
            base,
            local,
            mem: MemFs::new(MemFsConfig::default()),
        }
    }

    fn both(&self) -> [&dyn FileSystem; 2] {
        [&self.local, &self.mem]
    }
}

fn root() -> Caller {
    Caller::with_cred(Cred::root())
}

/// A file's handle in `fs`, by name under the root.
fn find(fs: &dyn FileSystem, name: &[u8]) -> Option<FileHandle> {
    fs.lookup(&root(), &fs.root_handle(), name)
        .ok()
        .map(|l| l.fh)
}

/// What an operation gave, comparable across backends.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Ok,
    Bytes(Vec<u8>, bool),
    Err(FsError),
    /// The name does not exist (the operation needs a handle and was not tried).
    Missing,
}

fn run(fs: &dyn FileSystem, op: u64, name: &[u8], other: &[u8], offset: u64, len: u64) -> Outcome {
    let r = root();
    let dir = fs.root_handle();
    let res = |r: Result<(), FsError>| match r {
        Ok(()) => Outcome::Ok,
        Err(e) => Outcome::Err(e),
    };
    let with_fh = |f: &dyn Fn(&FileHandle) -> Outcome| match find(fs, name) {
        Some(fh) => f(&fh),
        None => Outcome::Missing,
    };
    match op {
        0 => res(fs
            .create(
                &r,
                &dir,
                name,
                CreateHow::Guarded(SetAttr {
                    mode: Some(0o644),
                    ..SetAttr::default()
                }),
            )
            .map(|_| ())
            .map_err(|e| e.0)),
        1 => res(fs
            .mkdir(
                &r,
                &dir,
                name,
                &SetAttr {
                    mode: Some(0o755),
                    ..SetAttr::default()
                },
            )
            .map(|_| ())
            .map_err(|e| e.0)),
        2 | 3 => with_fh(&|fh| {
            let data = Bytes::from(vec![(offset % 251) as u8 + 1; len as usize]);
            let how = if op == 2 {
                StableHow::Unstable
            } else {
                StableHow::FileSync
            };
            res(fs
                .write(&r, fh, offset, &[data], how)
                .map(|_| ())
                .map_err(|e| e.0))
        }),
        4 => with_fh(&|fh| {
            let mut buf = vec![0u8; len as usize];
            match fs.read(&r, fh, offset, &mut [&mut buf[..]]) {
                Ok(ok) => {
                    buf.truncate(ok.count);
                    Outcome::Bytes(buf, ok.eof)
                }
                Err((e, _)) => Outcome::Err(e),
            }
        }),
        5 => with_fh(&|fh| {
            let s = SetAttr {
                size: Some(offset),
                ..SetAttr::default()
            };
            res(fs.setattr(&r, fh, &s, None).map(|_| ()).map_err(|e| e.0))
        }),
        6 => res(fs.remove(&r, &dir, name).map(|_| ()).map_err(|e| e.0)),
        7 => res(fs.rmdir(&r, &dir, name).map(|_| ()).map_err(|e| e.0)),
        8 => res(fs
            .rename(&r, &dir, name, &dir, other)
            .map(|_| ())
            .map_err(|e| e.0)),
        9 => with_fh(&|fh| res(fs.commit(&r, fh, 0, 0).map(|_| ()).map_err(|e| e.0))),
        10 => with_fh(&|fh| {
            res(fs
                .allocate(&r, fh, offset, len)
                .map(|_| ())
                .map_err(|e| e.0))
        }),
        11 => with_fh(&|fh| {
            res(fs
                .deallocate(&r, fh, offset, len)
                .map(|_| ())
                .map_err(|e| e.0))
        }),
        // COPY from `name` at `offset` to `other` at `len`, `len` bytes: the count is compared
        // (both backends copy to the source's end at most, with no other bound in reach).
        _ => with_fh(&|src| match find(fs, other) {
            Some(dst) => match fs.copy_range(&r, src, offset, &dst, len, len) {
                Ok(c) => Outcome::Bytes(c.count.to_be_bytes().to_vec(), false),
                Err((e, _)) => Outcome::Err(e),
            },
            None => Outcome::Missing,
        }),
    }
}

/// The tree under the root: (name, is a directory, size, contents of files).
fn tree(fs: &dyn FileSystem) -> Vec<(Vec<u8>, bool, u64, Vec<u8>)> {
    let mut names = Vec::new();
    fs.readdir(
        &root(),
        &fs.root_handle(),
        0,
        [0; 8],
        false,
        &mut |e: DirEntry<'_>| {
            if e.name != b"." && e.name != b".." {
                names.push(e.name.to_vec());
            }
            true
        },
    )
    .unwrap();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let fh = find(fs, &n).unwrap();
            let a = fs.getattr(&fh).unwrap();
            let dir = a.ftype == sluice_vfs::FileType::Directory;
            let mut data = vec![0u8; a.size as usize];
            if !dir {
                let ok = fs.read(&root(), &fh, 0, &mut [&mut data[..]]).unwrap();
                data.truncate(ok.count);
            }
            // Directory sizes are the file system's business (ext4 and tmpfs differ too).
            (
                n,
                dir,
                if dir { 0 } else { a.size },
                if dir { Vec::new() } else { data },
            )
        })
        .collect()
}

#[test]
fn random_operations_have_the_same_outcomes_on_memfs_and_localfs() {
    let seeds: Vec<u64> = match std::env::var("SLUICE_MEMFS_SEED") {
        Ok(s) => vec![s.parse().expect("a seed number")],
        Err(_) => (1..=SEEDS).collect(),
    };
    for seed in seeds {
        let pair = Pair::new(seed);
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        for step in 0..STEPS {
            let op = rng.below(13);
            let (name, other) = (rng.name(), rng.name());
            let (offset, len) = (rng.below(SPAN_BYTES), 1 + rng.below(SPAN_BYTES));
            let [l, m] = pair.both().map(|fs| run(fs, op, name, other, offset, len));
            assert_eq!(
                l, m,
                "seed {seed} step {step}: op {op} on {:?} (other {:?}, offset {offset}, len {len}): \
                 LocalFs left, MemFs right",
                String::from_utf8_lossy(name),
                String::from_utf8_lossy(other)
            );
        }
        let [l, m] = pair.both().map(tree);
        assert_eq!(l, m, "seed {seed}: trees differ at the end");
    }
}
