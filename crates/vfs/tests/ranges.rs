//! The NFSv4.2 range operations of the file-system layer (SEEK, ALLOCATE, DEALLOCATE, COPY,
//! CLONE), each scenario run against both backends through the trait: LocalFs on a real
//! directory (needs root, as LocalFs switches credentials) and MemFs, whose simpler model (no
//! holes but the one at the end; a clone is a copy) is checked where it differs.

// As in the crate: failures carry the failure reply's attributes.
#![allow(clippy::result_large_err)]

use bytes::Bytes;
use sluice_vfs::memfs::MemFsConfig;
use sluice_vfs::{
    Caller, CreateHow, Cred, FileHandle, FileSystem, FsError, LocalFs, LocalFsConfig, MemFs,
    SeekOk, SeekWhat, SetAttr, StableHow, COPY_BYTES_MAX,
};
use std::path::PathBuf;

struct Both {
    base: PathBuf,
    local: LocalFs,
    mem: MemFs,
}

impl Drop for Both {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

impl Both {
    fn new(test: &str) -> Both {
        let base = PathBuf::from(format!("/tmp/sluice-ranges-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("export")).unwrap();
        // As MemFs's root: anyone may create in it.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(base.join("export"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        let local =
            LocalFs::new(LocalFsConfig::new(base.join("export")).state_dir(base.join("state")))
                .unwrap();
        Both {
            base,
            local,
            mem: MemFs::new(MemFsConfig::default()),
        }
    }

    /// Each backend with whether it is the local one.
    fn each(&self) -> [(&dyn FileSystem, bool); 2] {
        [(&self.local, true), (&self.mem, false)]
    }
}

fn user() -> Caller {
    Caller::with_cred(Cred::new(1000, 1000))
}

fn read_only() -> Caller {
    Caller {
        read_only: true,
        ..user()
    }
}

fn create(fs: &dyn FileSystem, name: &str) -> FileHandle {
    let sattr = SetAttr {
        mode: Some(0o644),
        ..SetAttr::default()
    };
    fs.create(
        &user(),
        &fs.root_handle(),
        name.as_bytes(),
        CreateHow::Guarded(sattr),
    )
    .unwrap()
    .fh
}

fn write(fs: &dyn FileSystem, fh: &FileHandle, offset: u64, data: &[u8]) {
    let w = fs
        .write(
            &user(),
            fh,
            offset,
            &[Bytes::copy_from_slice(data)],
            StableHow::Unstable,
        )
        .unwrap();
    assert_eq!(w.count, data.len());
}

fn read(fs: &dyn FileSystem, fh: &FileHandle, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let r = fs.read(&user(), fh, offset, &mut [&mut buf[..]]).unwrap();
    buf.truncate(r.count);
    buf
}

fn size(fs: &dyn FileSystem, fh: &FileHandle) -> u64 {
    fs.getattr(fh).unwrap().size
}

fn err<T: std::fmt::Debug, F>(r: Result<T, (FsError, F)>) -> FsError {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err((e, _)) => e,
    }
}

/// 4 KiB: the block size of the file systems the local tests run on (ext4, tmpfs), so a hole
/// punched on block boundaries is a real hole.
const BLOCK: u64 = 4096;

#[test]
fn seek_finds_data_and_holes_and_refuses_offsets_at_the_end() {
    let b = Both::new("seek");
    for (fs, local) in b.each() {
        let fh = create(fs, "f");
        // Data in the first block and the fourth; the file ends after the fourth.
        write(fs, &fh, 0, &[1; BLOCK as usize]);
        write(fs, &fh, 3 * BLOCK, &[2; BLOCK as usize]);
        let end = 4 * BLOCK;
        let seek = |off, what| fs.seek(&user(), &fh, off, what);
        assert_eq!(
            seek(0, SeekWhat::Data).unwrap(),
            SeekOk {
                offset: 0,
                eof: false
            }
        );
        let hole = seek(0, SeekWhat::Hole).unwrap();
        if local {
            assert_eq!(
                hole,
                SeekOk {
                    offset: BLOCK,
                    eof: false
                },
                "the unwritten blocks are a hole"
            );
            assert_eq!(seek(BLOCK, SeekWhat::Data).unwrap().offset, 3 * BLOCK);
        } else {
            assert_eq!(
                hole,
                SeekOk {
                    offset: end,
                    eof: true
                },
                "MemFs has only the hole at the end"
            );
            assert_eq!(seek(BLOCK, SeekWhat::Data).unwrap().offset, BLOCK);
        }
        // At or past the end: ENXIO, for either kind.
        for what in [SeekWhat::Data, SeekWhat::Hole] {
            assert_eq!(err(seek(end, what)), FsError::Nxio, "local {local}");
            assert_eq!(err(seek(u64::MAX, what)), FsError::Nxio, "local {local}");
        }
        // A directory is not a file to seek in.
        assert_eq!(
            err(fs.seek(&user(), &fs.root_handle(), 0, SeekWhat::Data)),
            FsError::IsDir
        );
    }
}

#[test]
fn seek_data_in_a_trailing_hole_answers_the_size_with_eof() {
    let b = Both::new("trailing");
    let fs = &b.local;
    let fh = create(fs, "f");
    write(fs, &fh, 0, &[1; 2 * BLOCK as usize]);
    fs.deallocate(&user(), &fh, BLOCK, BLOCK).unwrap();
    assert_eq!(
        fs.seek(&user(), &fh, BLOCK, SeekWhat::Data).unwrap(),
        SeekOk {
            offset: 2 * BLOCK,
            eof: true
        }
    );
}

#[test]
fn allocate_extends_and_deallocate_zeroes_without_changing_the_size() {
    let b = Both::new("alloc");
    for (fs, local) in b.each() {
        let fh = create(fs, "f");
        write(fs, &fh, 0, &[7; 3 * BLOCK as usize]);
        let before = fs.getattr(&fh).unwrap();
        // Inside the file: nothing visible changes.
        fs.allocate(&user(), &fh, 0, BLOCK).unwrap();
        assert_eq!(size(fs, &fh), 3 * BLOCK);
        assert_eq!(read(fs, &fh, 0, 4), vec![7; 4]);
        // Past the end: the size grows, the new range reads as zeros.
        let wcc = fs.allocate(&user(), &fh, 2 * BLOCK, 3 * BLOCK).unwrap();
        assert_eq!(wcc.after.map(|a| a.size), Some(5 * BLOCK), "local {local}");
        assert_eq!(wcc.before.map(|a| a.size), Some(before.size));
        assert_eq!(read(fs, &fh, 4 * BLOCK, 8), vec![0; 8]);
        // A hole in the middle: zeros there, the data around it kept, the size unchanged.
        fs.deallocate(&user(), &fh, BLOCK, BLOCK).unwrap();
        assert_eq!(size(fs, &fh), 5 * BLOCK);
        assert_eq!(read(fs, &fh, BLOCK - 1, 1), vec![7]);
        assert_eq!(
            read(fs, &fh, BLOCK, BLOCK as usize),
            vec![0; BLOCK as usize]
        );
        assert_eq!(read(fs, &fh, 2 * BLOCK, 1), vec![7]);
        // Deallocating past the end changes nothing (KEEP_SIZE).
        fs.deallocate(&user(), &fh, 10 * BLOCK, BLOCK).unwrap();
        assert_eq!(size(fs, &fh), 5 * BLOCK);

        assert_eq!(err(fs.allocate(&user(), &fh, 0, 0)), FsError::Inval);
        assert_eq!(err(fs.allocate(&read_only(), &fh, 0, 1)), FsError::RoFs);
        assert_eq!(err(fs.deallocate(&read_only(), &fh, 0, 1)), FsError::RoFs);
        let dir = fs.root_handle();
        assert_eq!(err(fs.allocate(&user(), &dir, 0, 1)), FsError::IsDir);
        // Not the owner, mode 0644: no write permission.
        let other = Caller::with_cred(Cred::new(1001, 1001));
        assert_eq!(err(fs.allocate(&other, &fh, 0, 1)), FsError::Acces);
    }
}

#[test]
fn copy_copies_to_the_end_of_the_source_and_no_further() {
    let b = Both::new("copy");
    for (fs, local) in b.each() {
        let src = create(fs, "src");
        let dst = create(fs, "dst");
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        write(fs, &src, 0, &data);
        // A range.
        let c = fs.copy_range(&user(), &src, 100, &dst, 0, 1000).unwrap();
        assert_eq!(c.count, 1000);
        assert_eq!(c.wcc.after.map(|a| a.size), Some(1000), "local {local}");
        assert_eq!(read(fs, &dst, 0, 2000), data[100..1100]);
        // Count 0: to the source's end, here at an offset in the destination.
        let c = fs.copy_range(&user(), &src, 9000, &dst, 5000, 0).unwrap();
        assert_eq!(c.count, 1000);
        assert_eq!(read(fs, &dst, 5000, 2000), data[9000..]);
        // More than the source holds: a short copy.
        let c = fs.copy_range(&user(), &src, 9500, &dst, 0, 5000).unwrap();
        assert_eq!(c.count, 500);
        // From the end: nothing; past it: INVAL.
        assert_eq!(
            fs.copy_range(&user(), &src, 10_000, &dst, 0, 1)
                .unwrap()
                .count,
            0
        );
        assert_eq!(
            err(fs.copy_range(&user(), &src, 10_001, &dst, 0, 1)),
            FsError::Inval
        );
        // Overlapping ranges of one file.
        assert_eq!(
            err(fs.copy_range(&user(), &src, 0, &src, 10, 100)),
            FsError::Inval
        );
        // Within one file, apart: fine.
        let c = fs.copy_range(&user(), &src, 0, &src, 20_000, 10).unwrap();
        assert_eq!(c.count, 10);
        assert_eq!(read(fs, &src, 20_000, 10), data[..10]);

        assert_eq!(
            err(fs.copy_range(&read_only(), &src, 0, &dst, 0, 1)),
            FsError::RoFs
        );
        let dir = fs.root_handle();
        assert_eq!(
            err(fs.copy_range(&user(), &dir, 0, &dst, 0, 1)),
            FsError::IsDir
        );
        assert_eq!(
            err(fs.copy_range(&user(), &src, 0, &dir, 0, 1)),
            FsError::IsDir
        );
    }
}

#[test]
fn one_copy_moves_at_most_the_bound() {
    let fs = MemFs::new(MemFsConfig::default());
    let src = create(&fs, "src");
    let dst = create(&fs, "dst");
    let len = COPY_BYTES_MAX + BLOCK;
    fs.allocate(&user(), &src, 0, len).unwrap();
    let c = fs.copy_range(&user(), &src, 0, &dst, 0, 0).unwrap();
    assert_eq!(c.count, COPY_BYTES_MAX);
    let c = fs
        .copy_range(&user(), &src, COPY_BYTES_MAX, &dst, COPY_BYTES_MAX, 0)
        .unwrap();
    assert_eq!(c.count, BLOCK, "the rest in a second call");
}

#[test]
fn clone_shares_the_range_or_is_not_supported() {
    let b = Both::new("clone");
    for (fs, local) in b.each() {
        let src = create(fs, "src");
        let dst = create(fs, "dst");
        let data: Vec<u8> = (0..2 * BLOCK as u32).map(|i| (i % 7) as u8).collect();
        write(fs, &src, 0, &data);
        match fs.clone_range(&user(), &src, 0, &dst, 0, 0) {
            Ok(wcc) => {
                assert_eq!(wcc.after.map(|a| a.size), Some(2 * BLOCK));
                assert_eq!(read(fs, &dst, 0, data.len()), data);
            }
            // ext4 and tmpfs have no reflinks; MemFs always clones.
            Err((e, _)) => assert!(local && e == FsError::NotSupp, "{e:?}, local {local}"),
        }
        assert_eq!(
            err(fs.clone_range(&read_only(), &src, 0, &dst, 0, 0)),
            FsError::RoFs
        );
    }
}
