//! The in-memory file system: the operations a handler relies on, and every injected fault
//! (ENOSPC, EIO, latency, a crash that drops what was not committed). Pure: no files, no clock.

use bytes::Bytes;
use sluice_vfs::memfs::{Fault, FaultEffect, MemFsConfig, Op};
use sluice_vfs::{
    Caller, CreateHow, Cred, DirEntry, FileHandle, FileSystem, FileType, FsError, MemFs, SetAttr,
    StableHow, Time,
};
use std::time::Duration;

fn user() -> Caller {
    Caller::with_cred(Cred::new(1000, 1000))
}

fn fs() -> MemFs {
    MemFs::new(MemFsConfig::default())
}

fn mode(m: u32) -> SetAttr {
    SetAttr {
        mode: Some(m),
        ..SetAttr::default()
    }
}

fn create(fs: &dyn FileSystem, name: &str) -> FileHandle {
    fs.create(
        &user(),
        &fs.root_handle(),
        name.as_bytes(),
        CreateHow::Guarded(mode(0o644)),
    )
    .unwrap()
    .fh
}

fn write(
    fs: &dyn FileSystem,
    fh: &FileHandle,
    offset: u64,
    data: &[u8],
    how: StableHow,
) -> Result<(), FsError> {
    fs.write(&user(), fh, offset, &[Bytes::copy_from_slice(data)], how)
        .map(|w| assert_eq!(w.count, data.len()))
        .map_err(|(e, _)| e)
}

fn read(fs: &dyn FileSystem, fh: &FileHandle, offset: u64, len: usize) -> Result<Vec<u8>, FsError> {
    let mut buf = vec![0u8; len];
    let ok = fs
        .read(&user(), fh, offset, &mut [&mut buf[..]])
        .map_err(|(e, _)| e)?;
    buf.truncate(ok.count);
    Ok(buf)
}

#[test]
fn files_are_created_written_read_listed_renamed_and_removed() {
    let fs = fs();
    let root = fs.root_handle();
    let fh = create(&fs, "a");
    write(&fs, &fh, 0, b"hello", StableHow::Unstable).unwrap();
    write(&fs, &fh, 10, b"world", StableHow::FileSync).unwrap();
    assert_eq!(read(&fs, &fh, 0, 100).unwrap(), b"hello\0\0\0\0\0world");
    assert_eq!(fs.getattr(&fh).unwrap().size, 15);
    assert_eq!(fs.getattr(&fh).unwrap().ftype, FileType::Regular);
    let d = fs.mkdir(&user(), &root, b"d", &mode(0o755)).unwrap();
    assert_eq!(fs.getattr(&root).unwrap().nlink, 3);
    let mut names = Vec::new();
    let ok = fs
        .readdir(&user(), &root, 0, [0; 8], true, &mut |e: DirEntry<'_>| {
            names.push(String::from_utf8(e.name.to_vec()).unwrap());
            true
        })
        .unwrap();
    assert!(ok.eof);
    assert_eq!(names, [".", "..", "a", "d"]);
    fs.rename(&user(), &root, b"a", &d.fh, b"b").unwrap();
    assert_eq!(fs.lookup(&user(), &d.fh, b"b").unwrap().fh, fh);
    assert_eq!(
        fs.lookup(&user(), &root, b"a").unwrap_err().0,
        FsError::NoEnt
    );
    fs.remove(&user(), &d.fh, b"b").unwrap();
    assert_eq!(fs.getattr(&fh).unwrap_err(), FsError::Stale);
    assert_eq!(fs.rmdir(&user(), &root, b"d").map(|_| ()), Ok(()));
}

#[test]
fn a_directory_change_gives_an_atomic_change_info() {
    let fs = fs();
    fs.set_time(Time {
        seconds: 100,
        nseconds: 0,
    });
    let made = fs
        .create(
            &user(),
            &fs.root_handle(),
            b"f",
            CreateHow::Unchecked(mode(0o600)),
        )
        .unwrap();
    let ci = made.dir_wcc.change_info().unwrap();
    assert!(ci.atomic);
    assert!(ci.after > ci.before);
    assert_eq!(made.attr.ctime.seconds, 100);
}

#[test]
fn an_injected_enospc_fails_the_write_and_changes_nothing() {
    let fs = fs();
    let fh = create(&fs, "f");
    write(&fs, &fh, 0, b"keep", StableHow::Unstable).unwrap();
    fs.inject(
        Fault::new(Op::Write, FaultEffect::Fail(FsError::NoSpc))
            .on(&fh)
            .times(1),
    );
    assert_eq!(
        write(&fs, &fh, 0, b"lost", StableHow::FileSync),
        Err(FsError::NoSpc)
    );
    assert_eq!(read(&fs, &fh, 0, 4).unwrap(), b"keep");
    // Only once: the next write goes through.
    write(&fs, &fh, 0, b"next", StableHow::Unstable).unwrap();
    assert_eq!(read(&fs, &fh, 0, 4).unwrap(), b"next");
}

#[test]
fn a_full_file_system_answers_enospc() {
    let fs = MemFs::new(MemFsConfig {
        bytes_max: 8,
        ..MemFsConfig::default()
    });
    let fh = create(&fs, "f");
    write(&fs, &fh, 0, b"12345678", StableHow::Unstable).unwrap();
    assert_eq!(
        write(&fs, &fh, 8, b"9", StableHow::Unstable),
        Err(FsError::NoSpc)
    );
    // Overwriting in place needs no space.
    write(&fs, &fh, 0, b"abcdefgh", StableHow::Unstable).unwrap();
}

#[test]
fn an_injected_eio_fails_reads_covering_its_offset_only() {
    let fs = fs();
    let fh = create(&fs, "f");
    write(&fs, &fh, 0, &[7u8; 8192], StableHow::Unstable).unwrap();
    fs.inject(Fault::new(Op::Read, FaultEffect::Fail(FsError::Io)).at_offset(5000));
    assert_eq!(read(&fs, &fh, 4096, 4096), Err(FsError::Io));
    assert_eq!(read(&fs, &fh, 0, 4096).unwrap(), vec![7u8; 4096]);
    // Every time, until cleared.
    assert_eq!(read(&fs, &fh, 4096, 4096), Err(FsError::Io));
    fs.clear_faults();
    assert_eq!(read(&fs, &fh, 4096, 4096).unwrap(), vec![7u8; 4096]);
}

#[test]
fn an_injected_eio_on_commit_keeps_the_data_uncommitted() {
    let fs = fs();
    let fh = create(&fs, "f");
    write(&fs, &fh, 0, b"data", StableHow::Unstable).unwrap();
    fs.inject(Fault::new(Op::Commit, FaultEffect::Fail(FsError::Io)).times(1));
    assert_eq!(fs.commit(&user(), &fh, 0, 0).unwrap_err().0, FsError::Io);
    fs.crash();
    assert_eq!(read(&fs, &fh, 0, 4).unwrap(), b"");
}

#[test]
fn injected_latency_is_a_value_for_the_driver_and_does_not_fail_the_call() {
    let fs = fs();
    let fh = create(&fs, "f");
    let delay = Duration::from_millis(250);
    fs.inject(
        Fault::new(Op::Commit, FaultEffect::Latency(delay))
            .on(&fh)
            .times(2),
    );
    assert_eq!(fs.latency(Op::Read, &fh, 0, 1), Duration::ZERO);
    assert_eq!(fs.latency(Op::Commit, &fh, 0, 0), delay);
    fs.commit(&user(), &fh, 0, 0).unwrap();
    assert_eq!(fs.latency(Op::Commit, &fh, 0, 0), delay);
    assert_eq!(fs.latency(Op::Commit, &fh, 0, 0), Duration::ZERO);
}

#[test]
fn a_crash_drops_uncommitted_writes_and_changes_the_verifier() {
    let fs = fs();
    let unstable = create(&fs, "unstable");
    let stable = create(&fs, "stable");
    let committed = create(&fs, "committed");
    write(&fs, &unstable, 0, b"gone", StableHow::Unstable).unwrap();
    write(&fs, &stable, 0, b"kept", StableHow::DataSync).unwrap();
    write(&fs, &committed, 0, b"kept", StableHow::Unstable).unwrap();
    fs.commit(&user(), &committed, 0, 0).unwrap();
    write(&fs, &committed, 4, b"+gone", StableHow::Unstable).unwrap();
    let verifier = fs.write_verifier();
    fs.crash();
    assert_ne!(fs.write_verifier(), verifier);
    assert_eq!(read(&fs, &unstable, 0, 10).unwrap(), b"");
    assert_eq!(read(&fs, &stable, 0, 10).unwrap(), b"kept");
    assert_eq!(read(&fs, &committed, 0, 10).unwrap(), b"kept");
    // Names are metadata, durable at once.
    assert!(fs.lookup(&user(), &fs.root_handle(), b"unstable").is_ok());
}

#[test]
fn permissions_read_only_callers_and_foreign_handles_are_refused() {
    let fs = fs();
    let fh = create(&fs, "f");
    let other = Caller::with_cred(Cred::new(2000, 2000));
    fs.setattr(&user(), &fh, &mode(0o600), None).unwrap();
    assert_eq!(
        fs.write(
            &other,
            &fh,
            0,
            &[Bytes::from_static(b"x")],
            StableHow::Unstable
        )
        .unwrap_err()
        .0,
        FsError::Acces
    );
    let ro = Caller {
        read_only: true,
        ..user()
    };
    assert_eq!(
        fs.write(
            &ro,
            &fh,
            0,
            &[Bytes::from_static(b"x")],
            StableHow::Unstable
        )
        .unwrap_err()
        .0,
        FsError::RoFs
    );
    let forged = FileHandle::from_slice(b"not ours").unwrap();
    assert_eq!(fs.getattr(&forged).unwrap_err(), FsError::BadHandle);
}

#[test]
fn durable_data_is_what_a_crash_would_leave() {
    let fs = fs();
    let fh = create(&fs, "f");
    write(&fs, &fh, 0, b"old!", StableHow::Unstable).unwrap();
    assert_eq!(fs.durable_data(&fh).unwrap(), b"");
    fs.commit(&user(), &fh, 0, 0).unwrap();
    write(&fs, &fh, 0, b"new", StableHow::Unstable).unwrap();
    assert_eq!(fs.durable_data(&fh).unwrap(), b"old!");
    fs.crash();
    assert_eq!(read(&fs, &fh, 0, 4).unwrap(), b"old!");
    assert_eq!(
        fs.durable_data(&fs.root_handle()),
        None,
        "not a regular file"
    );
}
