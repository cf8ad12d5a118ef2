//! The local-filesystem backend against real directories under /tmp. Needs root (credential
//! switching, `open_by_handle_at`).

use bytes::Bytes;
use sluice_vfs::exports::parse_exports;
use sluice_vfs::FileSystem;
use sluice_vfs::{
    access, Caller, CreateHow, Cred, DeviceId, ExportId, FileHandle, FileType, FsError, LocalFs,
    LocalFsConfig, SetAttr, SetTime, StableHow, Time,
};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

#[path = "../../../tests/support/needs.rs"]
mod needs;

/// A temporary directory holding an export and a state directory; removed on drop.
struct Fixture {
    base: PathBuf,
    export: PathBuf,
    state: PathBuf,
    fs: LocalFs,
}

impl Fixture {
    fn new(name: &str) -> Fixture {
        static N: AtomicUsize = AtomicUsize::new(0);
        let base = PathBuf::from(format!(
            "/tmp/sluice-backend-{}-{}-{}",
            name,
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&base);
        let export = base.join("export");
        let state = base.join("state");
        std::fs::create_dir_all(&export).unwrap();
        // Let unprivileged test users create files in the export.
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&export, std::fs::Permissions::from_mode(0o777)).unwrap();
        let fs = LocalFs::new(LocalFsConfig::new(&export).state_dir(&state)).unwrap();
        Fixture {
            base,
            export,
            state,
            fs,
        }
    }

    /// Another instance over the same export and state directory: a restarted server.
    fn reopen(&self) -> LocalFs {
        LocalFs::new(LocalFsConfig::new(&self.export).state_dir(&self.state)).unwrap()
    }

    fn root(&self) -> FileHandle {
        self.fs.root_handle()
    }

    fn lookup(&self, dir: &FileHandle, name: &str) -> Result<FileHandle, FsError> {
        self.fs
            .lookup(&root(), dir, name.as_bytes())
            .map(|l| l.fh)
            .map_err(|(s, _)| s)
    }

    /// Looks up a slash-separated path from the export root.
    fn walk(&self, path: &str) -> FileHandle {
        let mut fh = self.root();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            fh = self
                .lookup(&fh, part)
                .unwrap_or_else(|s| panic!("{path}: {s:?}"));
        }
        fh
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.export.join(rel)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn root() -> Caller {
    Caller::with_cred(Cred::root())
}

fn user(uid: u32) -> Caller {
    Caller::with_cred(Cred::new(uid, uid))
}

fn mode(m: u32) -> SetAttr {
    SetAttr {
        mode: Some(m),
        ..SetAttr::default()
    }
}

fn create(fx: &Fixture, caller: &Caller, dir: &FileHandle, name: &str, m: u32) -> FileHandle {
    fx.fs
        .create(caller, dir, name.as_bytes(), CreateHow::Guarded(mode(m)))
        .unwrap_or_else(|(s, _)| panic!("create {name}: {s:?}"))
        .fh
}

fn write(
    fx: &Fixture,
    caller: &Caller,
    fh: &FileHandle,
    offset: u64,
    data: &[u8],
) -> Result<usize, FsError> {
    fx.fs
        .write(
            caller,
            fh,
            offset,
            &[Bytes::copy_from_slice(data)],
            StableHow::Unstable,
        )
        .map(|w| w.count)
        .map_err(|(s, _)| s)
}

fn read_all(
    fx: &Fixture,
    caller: &Caller,
    fh: &FileHandle,
    offset: u64,
    len: usize,
) -> Result<(Vec<u8>, bool), FsError> {
    let mut bufs = vec![vec![0u8; len]];
    let r = fx
        .fs
        .read(caller, fh, offset, &mut [&mut bufs[0][..]])
        .map_err(|(s, _)| s)?;
    let mut v = bufs.remove(0);
    v.truncate(r.count);
    Ok((v, r.eof))
}

#[test]
fn handles_survive_a_restart() {
    let fx = Fixture::new("persist");
    std::fs::create_dir_all(fx.path("a/b")).unwrap();
    std::fs::write(fx.path("a/b/file"), b"hello").unwrap();
    let dir = fx.walk("a/b");
    let file = fx.walk("a/b/file");
    assert!(file.as_bytes().len() <= 64 && dir.as_bytes().len() <= 64);
    let attr = fx.fs.getattr(&file).unwrap();
    assert_eq!(attr.ftype, FileType::Regular);
    assert_eq!(attr.size, 5);
    assert_eq!(
        attr.fileid,
        std::fs::metadata(fx.path("a/b/file")).unwrap().ino()
    );
    assert_eq!(attr.fsid, u64::from(fx.fs.export_id().0));

    // The same file looked up twice gets the same handle.
    assert_eq!(fx.walk("a/b/file"), file);

    let again = fx.reopen();
    assert_eq!(again.root_handle(), fx.root());
    assert_eq!(again.getattr(&file).unwrap().fileid, attr.fileid);
    assert_eq!(again.getattr(&dir).unwrap().ftype, FileType::Directory);
    let mut buf = [vec![0u8; 16]];
    let r = again
        .read(&root(), &file, 0, &mut [&mut buf[0][..]])
        .unwrap();
    assert_eq!(&buf[0][..r.count], b"hello");
    assert!(r.eof);
}

#[test]
fn forged_and_malformed_handles_are_badhandle() {
    let fx = Fixture::new("forged");
    std::fs::write(fx.path("f"), b"x").unwrap();
    let fh = fx.walk("f");
    for i in [0, 5, 6, 7, 8, fh.as_bytes().len() - 1] {
        let mut b = fh.as_bytes().to_vec();
        b[i] ^= 1;
        assert_eq!(
            fx.fs.getattr(&FileHandle::new(b.into()).unwrap()),
            Err(FsError::BadHandle),
            "byte {i}"
        );
    }
    assert_eq!(
        fx.fs.getattr(&FileHandle::new(Bytes::new()).unwrap()),
        Err(FsError::BadHandle)
    );
    assert_eq!(
        fx.fs
            .getattr(&FileHandle::from_slice(&fh.as_bytes()[..fh.len() - 1]).unwrap()),
        Err(FsError::BadHandle)
    );
    // A handle from another export (different id) is stale here.
    let other = LocalFs::new(
        LocalFsConfig::new(&fx.export)
            .state_dir(&fx.state)
            .export_id(ExportId(fx.fs.export_id().0 ^ 1)),
    )
    .unwrap();
    assert_eq!(other.getattr(&fh), Err(FsError::Stale));
    // A new secret makes every old handle a forgery.
    std::fs::remove_file(fx.state.join("secret")).unwrap();
    let rekeyed = fx.reopen();
    assert_eq!(rekeyed.getattr(&fh), Err(FsError::BadHandle));
}

#[test]
fn removed_files_are_stale() {
    let fx = Fixture::new("stale");
    let r = fx.root();
    let f = create(&fx, &root(), &r, "gone", 0o644);
    write(&fx, &root(), &f, 0, b"data").unwrap(); // now in the open-file cache
    fx.fs.remove(&root(), &r, b"gone").unwrap();
    // A removed file's handle may meet the same transient shortage as a directory's below
    // (the full suite saw Delay here too): retried as a client retries NFS4ERR_DELAY.
    assert_eq!(retry_delay(|| fx.fs.getattr(&f)), Err(FsError::Stale));
    assert_eq!(
        retry_delay(|| read_all(&fx, &root(), &f, 0, 4).map(|_| ())).unwrap_err(),
        FsError::Stale
    );

    // Removed behind the server's back while cached.
    let g = create(&fx, &root(), &r, "local", 0o644);
    write(&fx, &root(), &g, 0, b"data").unwrap();
    std::fs::remove_file(fx.path("local")).unwrap();
    assert_eq!(
        retry_delay(|| write(&fx, &root(), &g, 0, b"x").map(|_| ())).unwrap_err(),
        FsError::Stale
    );
    assert_eq!(retry_delay(|| fx.fs.getattr(&g)), Err(FsError::Stale));

    std::fs::create_dir(fx.path("d")).unwrap();
    let d = fx.walk("d");
    std::fs::remove_dir(fx.path("d")).unwrap();
    assert_eq!(retry_delay(|| fx.fs.getattr(&d)), Err(FsError::Stale));
    assert_eq!(retry_delay(|| fx.lookup(&d, "x")), Err(FsError::Stale));
}

/// `f` again while it answers Delay (a transient shortage: open_by_handle_at's ENOMEM, EMFILE
/// or ENFILE, seen once when the whole suite ran two test binaries at a time), as an NFS client
/// retries NFS4ERR_DELAY; at most 50 times, 20 ms apart.
fn retry_delay<T>(mut f: impl FnMut() -> Result<T, FsError>) -> Result<T, FsError> {
    for _ in 0..50 {
        match f() {
            Err(FsError::Delay) => std::thread::sleep(std::time::Duration::from_millis(20)),
            other => return other,
        }
    }
    f()
}

#[test]
fn read_write_in_chunks() {
    let fx = Fixture::new("rw");
    let f = create(&fx, &root(), &fx.root(), "data", 0o644);
    let chunks: Vec<Bytes> = (0..5u8).map(|i| Bytes::from(vec![i; 1000])).collect();
    for stable in [
        StableHow::Unstable,
        StableHow::DataSync,
        StableHow::FileSync,
    ] {
        let w = fx.fs.write(&root(), &f, 10, &chunks, stable).unwrap();
        assert_eq!(w.count, 5000);
        assert_eq!(w.committed, stable);
        assert!(w.wcc.before.is_some());
        assert_eq!(w.wcc.after.unwrap().size, 5010);
    }
    let mut bufs = [vec![0u8; 3000], vec![0u8; 3000]];
    let [a, b] = &mut bufs;
    let r = fx
        .fs
        .read(&root(), &f, 0, &mut [&mut a[..], &mut b[..]])
        .unwrap();
    assert_eq!(r.count, 5010);
    assert!(r.eof);
    let all: Vec<u8> = bufs.concat();
    assert_eq!(&all[..10], &[0; 10]);
    for i in 0..5 {
        assert!(all[10 + i * 1000..10 + (i + 1) * 1000]
            .iter()
            .all(|&b| b == i as u8));
    }
    let (part, eof) = read_all(&fx, &root(), &f, 100, 100).unwrap();
    assert_eq!(part.len(), 100);
    assert!(!eof);
    let (past, eof) = read_all(&fx, &root(), &f, 9000, 100).unwrap();
    assert!(past.is_empty() && eof);
    let wcc = fx.fs.commit(&root(), &f, 0, 0).unwrap();
    assert_eq!(wcc.after.unwrap().size, 5010);

    let d = fx
        .fs
        .mkdir(&root(), &fx.root(), b"dir", &mode(0o755))
        .unwrap()
        .fh;
    assert_eq!(
        read_all(&fx, &root(), &d, 0, 1).unwrap_err(),
        FsError::IsDir
    );
    assert_eq!(
        write(&fx, &root(), &d, 0, b"x").unwrap_err(),
        FsError::IsDir
    );
}

#[test]
fn create_modes_and_owners() {
    let fx = Fixture::new("create");
    let r = fx.root();
    let u = user(1000);
    let f = fx
        .fs
        .create(&u, &r, b"mine", CreateHow::Unchecked(mode(0o640)))
        .unwrap();
    assert_eq!(f.attr.mode, 0o640);
    let meta = std::fs::metadata(fx.path("mine")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (1000, 1000));
    assert_eq!(meta.mode() & 0o7777, 0o640);
    assert!(f.dir_wcc.before.is_some() && f.dir_wcc.after.is_some());

    // GUARDED over an existing name.
    let e = fx
        .fs
        .create(&u, &r, b"mine", CreateHow::Guarded(mode(0o600)));
    assert_eq!(e.unwrap_err().0, FsError::Exist);
    // UNCHECKED over an existing file applies only the size.
    write(&fx, &u, &f.fh, 0, b"abcdef").unwrap();
    let again = fx
        .fs
        .create(
            &u,
            &r,
            b"mine",
            CreateHow::Unchecked(SetAttr {
                mode: Some(0o777),
                size: Some(0),
                ..SetAttr::default()
            }),
        )
        .unwrap();
    assert_eq!(again.fh, f.fh);
    assert_eq!((again.attr.size, again.attr.mode), (0, 0o640));
    // UNCHECKED over a directory.
    fx.fs.mkdir(&u, &r, b"sub", &mode(0o755)).unwrap();
    let e = fx
        .fs
        .create(&u, &r, b"sub", CreateHow::Unchecked(mode(0o600)));
    assert_eq!(e.unwrap_err().0, FsError::Exist);

    // Names.
    for (name, want) in [
        (&b""[..], FsError::Acces),
        (b"a/b", FsError::Acces),
        (b"a\0b", FsError::Acces),
        (b".", FsError::Exist),
        (b"..", FsError::Exist),
    ] {
        let e = fx.fs.create(&u, &r, name, CreateHow::Guarded(mode(0o600)));
        assert_eq!(e.unwrap_err().0, want, "{name:?}");
    }
    let long = vec![b'n'; 256];
    let e = fx.fs.create(&u, &r, &long, CreateHow::Guarded(mode(0o600)));
    assert_eq!(e.unwrap_err().0, FsError::NameTooLong);
    assert_eq!(
        fx.fs.lookup(&u, &r, &long).unwrap_err().0,
        FsError::NameTooLong
    );
    assert_eq!(fx.fs.lookup(&u, &r, b"a/b").unwrap_err().0, FsError::Acces);
    assert_eq!(fx.fs.lookup(&u, &r, b"nope").unwrap_err().0, FsError::NoEnt);
    let ok = fx
        .fs
        .create(&u, &r, &long[..255], CreateHow::Guarded(mode(0o600)));
    assert!(ok.is_ok());
}

#[test]
fn exclusive_create_is_idempotent() {
    let fx = Fixture::new("excl");
    let r = fx.root();
    let verf = *b"\x81\x02\x03\x04\x05\x06\x07\x08";
    let a = fx
        .fs
        .create(&root(), &r, b"x", CreateHow::Exclusive(verf))
        .unwrap();
    // A retransmission: same verifier, success, same file.
    let b = fx
        .fs
        .create(&root(), &r, b"x", CreateHow::Exclusive(verf))
        .unwrap();
    assert_eq!(a.fh, b.fh);
    assert_eq!(b.attr.mtime.seconds, 0x0102_0304);
    assert_eq!(b.attr.atime.seconds, 0x0506_0708);
    // Another client's exclusive create of the same name.
    let other = *b"zzzzzzzz";
    let e = fx.fs.create(&root(), &r, b"x", CreateHow::Exclusive(other));
    assert_eq!(e.unwrap_err().0, FsError::Exist);
    // Once the client set the attributes, the verifier no longer matches either.
    fx.fs
        .setattr(
            &root(),
            &a.fh,
            &SetAttr {
                mode: Some(0o644),
                atime: SetTime::ServerTime,
                mtime: SetTime::ServerTime,
                ..SetAttr::default()
            },
            None,
        )
        .unwrap();
    let e = fx.fs.create(&root(), &r, b"x", CreateHow::Exclusive(verf));
    assert_eq!(e.unwrap_err().0, FsError::Exist);
}

#[test]
fn setattr_guard_times_and_size() {
    let fx = Fixture::new("setattr");
    let f = create(&fx, &root(), &fx.root(), "f", 0o644);
    write(&fx, &root(), &f, 0, b"0123456789").unwrap();
    let attr = fx.fs.getattr(&f).unwrap();

    let wrong = Time {
        seconds: attr.ctime.seconds.wrapping_sub(1),
        nseconds: attr.ctime.nseconds,
    };
    let e = fx
        .fs
        .setattr(&root(), &f, &mode(0o600), Some(wrong))
        .unwrap_err();
    assert_eq!(e.0, FsError::NotSync);
    assert_eq!(e.1.before.unwrap().ctime, attr.ctime);
    assert_eq!(fx.fs.getattr(&f).unwrap().mode, 0o644);

    let set = SetAttr {
        mode: Some(0o600),
        size: Some(4),
        atime: SetTime::ClientTime(Time {
            seconds: 1_000_000,
            nseconds: 5,
        }),
        mtime: SetTime::ClientTime(Time {
            seconds: 2_000_000,
            nseconds: 7,
        }),
        ..SetAttr::default()
    };
    let wcc = fx.fs.setattr(&root(), &f, &set, Some(attr.ctime)).unwrap();
    assert_eq!(wcc.before.unwrap().size, 10);
    let after = wcc.after.unwrap();
    assert_eq!((after.mode, after.size), (0o600, 4));
    assert_eq!(
        after.atime,
        Time {
            seconds: 1_000_000,
            nseconds: 5
        }
    );
    assert_eq!(
        after.mtime,
        Time {
            seconds: 2_000_000,
            nseconds: 7
        }
    );
    assert_eq!(std::fs::read(fx.path("f")).unwrap(), b"0123");

    let now = fx
        .fs
        .setattr(
            &root(),
            &f,
            &SetAttr {
                mtime: SetTime::ServerTime,
                ..SetAttr::default()
            },
            None,
        )
        .unwrap();
    assert!(now.after.unwrap().mtime.seconds > 2_000_000);

    let d = fx
        .fs
        .mkdir(&root(), &fx.root(), b"d", &mode(0o755))
        .unwrap()
        .fh;
    let e = fx.fs.setattr(
        &root(),
        &d,
        &SetAttr {
            size: Some(0),
            ..SetAttr::default()
        },
        None,
    );
    assert_eq!(e.unwrap_err().0, FsError::IsDir);
}

#[test]
fn mknod_types() {
    let fx = Fixture::new("mknod");
    let r = fx.root();
    let fifo = fx
        .fs
        .mknod(
            &root(),
            &r,
            b"fifo",
            FileType::Fifo,
            &mode(0o600),
            DeviceId::default(),
        )
        .unwrap();
    assert_eq!(fifo.attr.ftype, FileType::Fifo);
    let chr = fx
        .fs
        .mknod(
            &root(),
            &r,
            b"null",
            FileType::CharDevice,
            &mode(0o666),
            DeviceId { major: 1, minor: 3 },
        )
        .unwrap();
    assert_eq!(chr.attr.ftype, FileType::CharDevice);
    assert_eq!(chr.attr.rdev, DeviceId { major: 1, minor: 3 });
    let sock = fx
        .fs
        .mknod(
            &root(),
            &r,
            b"sock",
            FileType::Socket,
            &mode(0o600),
            DeviceId::default(),
        )
        .unwrap();
    assert_eq!(sock.attr.ftype, FileType::Socket);
    for t in [FileType::Regular, FileType::Directory, FileType::Symlink] {
        let e = fx
            .fs
            .mknod(&root(), &r, b"bad", t, &mode(0o600), DeviceId::default())
            .unwrap_err();
        assert_eq!(e.0, FsError::BadType);
    }
    // Only root may make devices.
    let e = fx
        .fs
        .mknod(
            &user(1000),
            &r,
            b"dev2",
            FileType::BlockDevice,
            &mode(0o600),
            DeviceId { major: 7, minor: 0 },
        )
        .unwrap_err();
    assert_eq!(e.0, FsError::Perm);
    // Reading a FIFO through NFS is not a thing.
    assert_eq!(
        read_all(&fx, &root(), &fifo.fh, 0, 1).unwrap_err(),
        FsError::Inval
    );
}

#[test]
fn lookup_dot_dotdot_and_symlinks_stay_inside() {
    let fx = Fixture::new("confine-lookup");
    std::fs::create_dir_all(fx.path("sub/deeper")).unwrap();
    std::os::unix::fs::symlink("/etc", fx.path("etc")).unwrap();
    std::os::unix::fs::symlink("../../..", fx.path("sub/up")).unwrap();
    let r = fx.root();
    // ".." at the root is the root, "." is the directory itself.
    assert_eq!(fx.lookup(&r, "..").unwrap(), r);
    assert_eq!(fx.lookup(&r, ".").unwrap(), r);
    let sub = fx.walk("sub");
    let deeper = fx.walk("sub/deeper");
    assert_eq!(fx.lookup(&deeper, "..").unwrap(), sub);
    assert_eq!(fx.lookup(&sub, "..").unwrap(), r);
    assert_eq!(fx.lookup(&fx.lookup(&sub, "..").unwrap(), "..").unwrap(), r);
    // A symlink is returned as a symlink, never followed.
    let etc = fx.fs.lookup(&root(), &r, b"etc").unwrap();
    assert_eq!(etc.attr.ftype, FileType::Symlink);
    assert_eq!(fx.fs.readlink(&etc.fh).unwrap().0, b"/etc");
    assert_eq!(fx.lookup(&etc.fh, "passwd"), Err(FsError::NotDir));
    assert_eq!(
        read_all(&fx, &root(), &etc.fh, 0, 10).unwrap_err(),
        FsError::Inval
    );
    let up = fx.walk("sub/up");
    assert_eq!(fx.fs.getattr(&up).unwrap().ftype, FileType::Symlink);
    assert_eq!(fx.lookup(&up, ".."), Err(FsError::NotDir));
    assert_eq!(fx.fs.readlink(&r).unwrap_err().0, FsError::Inval);
    // Creating through a symlinked directory name is refused, not followed.
    let e = fx
        .fs
        .create(&root(), &etc.fh, b"x", CreateHow::Guarded(mode(0o600)));
    assert_eq!(e.unwrap_err().0, FsError::NotDir);
    let e = fx
        .fs
        .create(&root(), &r, b"etc", CreateHow::Unchecked(mode(0o600)));
    assert_eq!(e.unwrap_err().0, FsError::Exist);
    assert!(std::fs::symlink_metadata("/etc/x").is_err());
}

#[test]
fn handles_of_objects_outside_the_export_do_not_resolve() {
    let fx = Fixture::new("confine-handles");
    std::fs::create_dir_all(fx.base.join("outside/dir")).unwrap();
    std::fs::write(fx.base.join("outside/file"), b"secret").unwrap();
    std::fs::create_dir_all(fx.path("in")).unwrap();
    // A second export over the parent directory, sharing the state directory *and* the export
    // id: its handles carry a valid MAC for the first export, so only confinement stops them.
    let wide = LocalFs::new(
        LocalFsConfig::new(&fx.base)
            .state_dir(&fx.state)
            .export_id(fx.fs.export_id()),
    )
    .unwrap();
    let wr = wide.root_handle();
    let outside = wide.lookup(&root(), &wr, b"outside").unwrap().fh;
    let odir = wide.lookup(&root(), &outside, b"dir").unwrap().fh;
    let ofile = wide.lookup(&root(), &outside, b"file").unwrap().fh;
    for fh in [&wr, &outside, &odir, &ofile] {
        assert_eq!(fx.fs.getattr(fh), Err(FsError::Stale));
    }
    assert_eq!(
        read_all(&fx, &root(), &ofile, 0, 6).unwrap_err(),
        FsError::Stale
    );
    assert_eq!(fx.lookup(&odir, ".."), Err(FsError::Stale));
    // Handles for the inside still work through the wide export's view.
    let inside = wide
        .lookup(
            &root(),
            &wide.lookup(&root(), &wr, b"export").unwrap().fh,
            b"in",
        )
        .unwrap()
        .fh;
    assert_eq!(fx.fs.getattr(&inside).unwrap().ftype, FileType::Directory);
    // With its own export id (the normal case) the wide export's handles are simply stale.
    let other = LocalFs::new(LocalFsConfig::new(&fx.base).state_dir(&fx.state)).unwrap();
    let ofh = other
        .lookup(&root(), &other.root_handle(), b"outside")
        .unwrap()
        .fh;
    assert_eq!(fx.fs.getattr(&ofh), Err(FsError::Stale));

    // A file with a second hard link outside: still served through its name inside, even when
    // the kernel reports the outside name for it.
    std::fs::write(fx.path("linked"), b"two names").unwrap();
    let linked = fx.walk("linked");
    std::fs::hard_link(fx.path("linked"), fx.base.join("outside/alias")).unwrap();
    std::fs::metadata(fx.base.join("outside/alias")).unwrap();
    assert!(fx.fs.getattr(&linked).is_ok());
    assert_eq!(read_all(&fx, &root(), &linked, 0, 3).unwrap().0, b"two");
    std::fs::remove_file(fx.path("linked")).unwrap();
    assert_eq!(fx.fs.getattr(&linked), Err(FsError::Stale));

    // Objects moved out of the export after their handle was issued.
    std::fs::create_dir_all(fx.path("leaving")).unwrap();
    std::fs::write(fx.path("leaving.txt"), b"bye").unwrap();
    let ldir = fx.walk("leaving");
    let lfile = fx.walk("leaving.txt");
    // In the open-file cache when it leaves: the cached descriptor must not keep serving it.
    write(&fx, &root(), &lfile, 3, b"!").unwrap();
    assert!(fx.fs.getattr(&lfile).is_ok());
    std::fs::rename(fx.path("leaving"), fx.base.join("outside/left")).unwrap();
    std::fs::rename(fx.path("leaving.txt"), fx.base.join("outside/left.txt")).unwrap();
    assert_eq!(fx.fs.getattr(&ldir), Err(FsError::Stale));
    assert_eq!(
        read_all(&fx, &root(), &lfile, 0, 3).unwrap_err(),
        FsError::Stale
    );
    assert_eq!(
        write(&fx, &root(), &lfile, 0, b"x").unwrap_err(),
        FsError::Stale
    );
    assert_eq!(fx.fs.getattr(&lfile), Err(FsError::Stale));
}

/// A proof that an object is inside the export is trusted for a second (`localfs/confined.rs`):
/// a directory moved out of the export is stale at once (its own ctime changed), an object
/// below it once the proof of that object is older than the TTL.
#[test]
fn an_object_whose_directory_leaves_the_export_is_stale_within_the_confinement_ttl() {
    let fx = Fixture::new("confine-ttl");
    std::fs::create_dir_all(fx.base.join("outside")).unwrap();
    std::fs::create_dir_all(fx.path("d/sub")).unwrap();
    std::fs::write(fx.path("d/f"), b"f").unwrap();
    let d = fx.walk("d");
    let sub = fx.walk("d/sub");
    let f = fx.walk("d/f");
    for fh in [&d, &sub, &f] {
        assert!(fx.fs.getattr(fh).is_ok(), "proved inside");
    }
    std::fs::rename(fx.path("d"), fx.base.join("outside/d")).unwrap();
    assert_eq!(fx.fs.getattr(&d), Err(FsError::Stale), "renamed itself");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(fx.fs.getattr(&sub), Err(FsError::Stale));
    assert_eq!(fx.fs.getattr(&f), Err(FsError::Stale));
}

#[test]
fn rename_and_link_across_exports_is_xdev() {
    let fx = Fixture::new("xdev");
    let other_dir = fx.base.join("other");
    std::fs::create_dir_all(&other_dir).unwrap();
    let other = LocalFs::new(LocalFsConfig::new(&other_dir).state_dir(&fx.state)).unwrap();
    let f = create(&fx, &root(), &fx.root(), "f", 0o644);
    let e = fx
        .fs
        .rename(&root(), &fx.root(), b"f", &other.root_handle(), b"g")
        .unwrap_err();
    assert_eq!(e.0, FsError::Xdev);
    let e = fx
        .fs
        .link(&root(), &f, &other.root_handle(), b"g")
        .unwrap_err();
    assert_eq!(e.0, FsError::Xdev);
    assert!(fx.path("f").exists());
}

#[test]
fn remove_rmdir_rename_link_with_wcc() {
    let fx = Fixture::new("namespace");
    let r = fx.root();
    let a = fx.fs.mkdir(&root(), &r, b"a", &mode(0o755)).unwrap();
    assert_eq!(a.attr.ftype, FileType::Directory);
    assert_eq!(a.attr.mode, 0o755);
    let b = fx.fs.mkdir(&root(), &r, b"b", &mode(0o700)).unwrap().fh;
    let f = create(&fx, &root(), &a.fh, "f", 0o644);
    write(&fx, &root(), &f, 0, b"one").unwrap();
    let g = create(&fx, &root(), &b, "g", 0o644);
    write(&fx, &root(), &g, 0, b"two").unwrap();
    assert_eq!(fx.fs.open_files().len(), 2);

    // Rename a/f over b/g: both directories' wcc, g's descriptor closed, g's handle stale.
    let w = fx.fs.rename(&root(), &a.fh, b"f", &b, b"g").unwrap();
    assert!(w.from_dir.before.is_some() && w.to_dir.before.is_some());
    assert_ne!(
        w.from_dir.before.unwrap().mtime,
        w.from_dir.after.unwrap().mtime
    );
    assert_eq!(fx.fs.open_files().len(), 1);
    assert_eq!(fx.fs.getattr(&g), Err(FsError::Stale));
    assert_eq!(fx.lookup(&b, "g").unwrap(), {
        // The moved file keeps its identity; its handle may differ only in the parent hint.
        let moved = fx.lookup(&b, "g").unwrap();
        assert_eq!(
            fx.fs.getattr(&moved).unwrap().fileid,
            fx.fs.getattr(&f).unwrap().fileid
        );
        moved
    });
    let (data, _) = read_all(&fx, &root(), &f, 0, 10).unwrap();
    assert_eq!(data, b"one");

    // Link, then remove one name: the file lives on.
    let l = fx.fs.link(&root(), &f, &r, b"hard").unwrap();
    assert_eq!(l.attr.unwrap().nlink, 2);
    assert!(l.dir_wcc.before.is_some());
    let e = fx.fs.link(&root(), &f, &r, b"hard").unwrap_err();
    assert_eq!(e.0, FsError::Exist);
    let e = fx.fs.link(&root(), &a.fh, &r, b"dirlink").unwrap_err();
    assert_eq!(e.0, FsError::IsDir);
    fx.fs.remove(&root(), &b, b"g").unwrap();
    assert_eq!(fx.fs.getattr(&f).unwrap().nlink, 1);

    // Symlinks can be linked too (the link names the symlink, not its target).
    let s = fx
        .fs
        .symlink(&root(), &r, b"sl", b"/nonexistent", &SetAttr::default())
        .unwrap();
    assert_eq!(s.attr.ftype, FileType::Symlink);
    fx.fs.link(&root(), &s.fh, &r, b"sl2").unwrap();
    assert_eq!(
        std::fs::read_link(fx.path("sl2")).unwrap(),
        PathBuf::from("/nonexistent")
    );

    // Errors.
    assert_eq!(
        fx.fs.remove(&root(), &r, b"a").unwrap_err().0,
        FsError::IsDir
    );
    assert_eq!(
        fx.fs.rmdir(&root(), &r, b"hard").unwrap_err().0,
        FsError::NotDir
    );
    create(&fx, &root(), &a.fh, "x", 0o644);
    assert_eq!(
        fx.fs.rmdir(&root(), &r, b"a").unwrap_err().0,
        FsError::NotEmpty
    );
    assert_eq!(
        fx.fs.remove(&root(), &r, b"nope").unwrap_err().0,
        FsError::NoEnt
    );
    assert_eq!(
        fx.fs.remove(&root(), &r, b".").unwrap_err().0,
        FsError::Acces
    );
    assert_eq!(
        fx.fs.rmdir(&root(), &r, b"..").unwrap_err().0,
        FsError::Acces
    );
    let e = fx.fs.rename(&root(), &r, b"..", &r, b"z").unwrap_err();
    assert_eq!(e.0, FsError::Inval);
    assert_eq!(
        fx.fs.remove(&root(), &f, b"x").unwrap_err().0,
        FsError::NotDir
    );
    fx.fs.remove(&root(), &a.fh, b"x").unwrap();
    let w = fx.fs.rmdir(&root(), &r, b"a").unwrap();
    assert!(w.before.is_some() && w.after.is_some());
    assert_eq!(fx.fs.getattr(&a.fh), Err(FsError::Stale));
}

#[test]
fn permissions_are_the_callers() {
    let fx = Fixture::new("perm");
    let r = fx.root();
    let (u1000, u1001) = (user(1000), user(1001));
    let theirs = create(&fx, &u1001, &r, "theirs", 0o644);
    write(&fx, &u1001, &theirs, 0, b"owned by 1001").unwrap();
    assert_eq!(std::fs::metadata(fx.path("theirs")).unwrap().uid(), 1001);
    // 1000 may read a 0644 file of 1001 but not write it.
    assert_eq!(read_all(&fx, &u1000, &theirs, 0, 5).unwrap().0, b"owned");
    assert_eq!(
        write(&fx, &u1000, &theirs, 0, b"x").unwrap_err(),
        FsError::Acces
    );
    let e = fx.fs.commit(&u1000, &theirs, 0, 0).unwrap_err();
    assert_eq!(e.0, FsError::Acces);
    let trunc = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    assert_eq!(
        fx.fs.setattr(&u1000, &theirs, &trunc, None).unwrap_err().0,
        FsError::Acces
    );
    assert_eq!(
        fx.fs
            .setattr(&u1000, &theirs, &mode(0o666), None)
            .unwrap_err()
            .0,
        FsError::Perm
    );
    let chown = SetAttr {
        uid: Some(1000),
        ..SetAttr::default()
    };
    assert_eq!(
        fx.fs.setattr(&u1001, &theirs, &chown, None).unwrap_err().0,
        FsError::Perm
    );
    // Root still can (no squashing in this caller).
    write(&fx, &root(), &theirs, 0, b"O").unwrap();

    // The owner may write their own read-only file (open-then-chmod semantics).
    let ro = create(&fx, &u1000, &r, "mine-ro", 0o444);
    write(&fx, &u1000, &ro, 0, b"still mine").unwrap();
    assert_eq!(
        write(&fx, &u1001, &ro, 0, b"x").unwrap_err(),
        FsError::Acces
    );

    // Execute-only files can be read (a client loading a binary), unreadable ones cannot.
    fx.fs.setattr(&u1001, &theirs, &mode(0o711), None).unwrap();
    assert!(read_all(&fx, &u1000, &theirs, 0, 1).is_ok());
    fx.fs.setattr(&u1001, &theirs, &mode(0o600), None).unwrap();
    assert_eq!(
        read_all(&fx, &u1000, &theirs, 0, 1).unwrap_err(),
        FsError::Acces
    );

    // Supplementary groups count.
    let shared = create(&fx, &u1001, &r, "shared", 0o660);
    let to_group = SetAttr {
        gid: Some(2000),
        ..SetAttr::default()
    };
    fx.fs.setattr(&root(), &shared, &to_group, None).unwrap();
    assert_eq!(
        write(&fx, &u1000, &shared, 0, b"x").unwrap_err(),
        FsError::Acces
    );
    let member = Caller::with_cred(Cred::new(1000, 1000).with_groups(&[2000]));
    write(&fx, &member, &shared, 0, b"x").unwrap();

    // Directories: a private directory cannot be searched, listed or written by others.
    let private = fx
        .fs
        .mkdir(&u1001, &r, b"private", &mode(0o700))
        .unwrap()
        .fh;
    create(&fx, &u1001, &private, "inner", 0o644);
    assert_eq!(
        fx.fs.lookup(&u1000, &private, b"inner").unwrap_err().0,
        FsError::Acces
    );
    let e = fx
        .fs
        .create(&u1000, &private, b"x", CreateHow::Guarded(mode(0o600)));
    assert_eq!(e.unwrap_err().0, FsError::Acces);
    assert_eq!(
        fx.fs.remove(&u1000, &private, b"inner").unwrap_err().0,
        FsError::Acces
    );
    let e = fx
        .fs
        .readdir(&u1000, &private, 0, [0; 8], false, &mut |_| true)
        .unwrap_err();
    assert_eq!(e.0, FsError::Acces);
    assert!(fx.fs.lookup(&u1001, &private, b"inner").is_ok());
}

#[test]
fn access_bits() {
    use access::*;
    let fx = Fixture::new("access");
    let r = fx.root();
    let all = READ | LOOKUP | MODIFY | EXTEND | DELETE | EXECUTE;
    let f = create(&fx, &user(1001), &r, "f", 0o644);
    let x = create(&fx, &user(1001), &r, "x", 0o755);
    let d = fx.fs.mkdir(&user(1001), &r, b"d", &mode(0o755)).unwrap().fh;
    let grant = |c: &Caller, fh: &FileHandle| fx.fs.access(c, fh, all).unwrap().0;
    assert_eq!(grant(&user(1000), &f), READ);
    assert_eq!(grant(&user(1001), &f), READ | MODIFY | EXTEND);
    assert_eq!(grant(&user(1000), &x), READ | EXECUTE);
    assert_eq!(grant(&user(1000), &d), READ | LOOKUP);
    assert_eq!(
        grant(&user(1001), &d),
        READ | LOOKUP | MODIFY | EXTEND | DELETE
    );
    assert_eq!(grant(&root(), &f), READ | MODIFY | EXTEND);
    // Only what was asked.
    assert_eq!(fx.fs.access(&user(1001), &f, MODIFY).unwrap().0, MODIFY);
    // Read-only export: no modifying bits even for the owner.
    let ro = Caller {
        cred: Cred::new(1001, 1001),
        read_only: true,
    };
    assert_eq!(grant(&ro, &f), READ);
    assert_eq!(grant(&ro, &d), READ | LOOKUP);
    assert!(fx.fs.access(&user(1000), &f, READ).unwrap().1.is_some());
}

#[test]
fn read_only_exports_and_squashing() {
    let fx = Fixture::new("ro-squash");
    let r = fx.root();
    let exports = parse_exports(&format!(
        "{0} 127.0.0.1(rw) 10.0.0.0/8(ro) 192.168.0.0/16(rw,no_root_squash) *(rw,all_squash,anonuid=3000,anongid=3001)",
        fx.export.display()
    ))
    .unwrap();
    let e = &exports[0];
    let rootcred = Cred::new(0, 0);
    let opts = |ip: &str| e.options_for(ip.parse().unwrap()).unwrap();

    // root_squash (the default): root's files belong to nobody.
    let squashed = Caller::new(&rootcred, opts("127.0.0.1"));
    assert_eq!(squashed.cred.uid, 65534);
    create(&fx, &squashed, &r, "by-nobody", 0o644);
    let meta = std::fs::metadata(fx.path("by-nobody")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
    // ... and nobody cannot touch root's files.
    std::fs::write(fx.path("roots"), b"r").unwrap();
    let roots = fx.walk("roots");
    assert_eq!(
        write(&fx, &squashed, &roots, 0, b"x").unwrap_err(),
        FsError::Acces
    );

    // no_root_squash.
    let real_root = Caller::new(&rootcred, opts("192.168.1.1"));
    create(&fx, &real_root, &r, "by-root", 0o644);
    assert_eq!(std::fs::metadata(fx.path("by-root")).unwrap().uid(), 0);

    // all_squash with anonuid/anongid.
    let anon = Caller::new(&Cred::new(1000, 1000), opts("172.16.0.1"));
    create(&fx, &anon, &r, "by-anon", 0o644);
    let meta = std::fs::metadata(fx.path("by-anon")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (3000, 3001));

    // Read-only: every modifying procedure is ROFS, reads work.
    let ro = Caller::new(&Cred::new(1000, 1000), opts("10.1.1.1"));
    assert!(ro.read_only);
    let f = fx.walk("by-root");
    let rofs = FsError::RoFs;
    assert_eq!(write(&fx, &ro, &f, 0, b"x").unwrap_err(), rofs);
    assert_eq!(
        fx.fs.setattr(&ro, &f, &mode(0o600), None).unwrap_err().0,
        rofs
    );
    let c = fx
        .fs
        .create(&ro, &r, b"n", CreateHow::Unchecked(mode(0o600)));
    assert_eq!(c.unwrap_err().0, rofs);
    assert_eq!(
        fx.fs.mkdir(&ro, &r, b"n", &mode(0o700)).unwrap_err().0,
        rofs
    );
    let s = fx.fs.symlink(&ro, &r, b"n", b"t", &SetAttr::default());
    assert_eq!(s.unwrap_err().0, rofs);
    let m = fx.fs.mknod(
        &ro,
        &r,
        b"n",
        FileType::Fifo,
        &mode(0o600),
        DeviceId::default(),
    );
    assert_eq!(m.unwrap_err().0, rofs);
    assert_eq!(fx.fs.remove(&ro, &r, b"by-root").unwrap_err().0, rofs);
    assert_eq!(fx.fs.rmdir(&ro, &r, b"x").unwrap_err().0, rofs);
    let e = fx.fs.rename(&ro, &r, b"by-root", &r, b"z").unwrap_err();
    assert_eq!(e.0, rofs);
    assert_eq!(fx.fs.link(&ro, &f, &r, b"z").unwrap_err().0, rofs);
    assert_eq!(fx.fs.commit(&ro, &f, 0, 0).unwrap_err().0, rofs);
    assert!(read_all(&fx, &ro, &f, 0, 1).is_ok());
    assert!(fx.fs.lookup(&ro, &r, b"by-root").is_ok());
    // A stale handle is still STALE on a read-only export.
    fx.fs.remove(&root(), &r, b"by-anon").unwrap();
    let gone = fx.fs.lookup(&root(), &r, b"by-root").unwrap().fh;
    fx.fs.remove(&root(), &r, b"by-root").unwrap();
    assert_eq!(
        fx.fs.setattr(&ro, &gone, &mode(0o600), None).unwrap_err().0,
        FsError::Stale
    );
}

#[test]
fn readdir_small_directory_and_plus() {
    let fx = Fixture::new("readdir-small");
    let r = fx.root();
    std::fs::create_dir(fx.path("d")).unwrap();
    std::fs::write(fx.path("d/f"), b"12345").unwrap();
    std::os::unix::fs::symlink("/etc", fx.path("d/l")).unwrap();
    let d = fx.walk("d");
    let root_id = fx.fs.getattr(&r).unwrap().fileid;

    let mut seen = Vec::new();
    let ok = fx
        .fs
        .readdir(&root(), &d, 0, [0; 8], true, &mut |e| {
            seen.push((e.name.to_vec(), e.fileid, e.cookie, e.attr, e.fh));
            true
        })
        .unwrap();
    assert!(ok.eof);
    assert!(ok.dir_attr.is_some());
    let mut names: Vec<_> = seen.iter().map(|s| s.0.clone()).collect();
    names.sort();
    assert_eq!(
        names,
        vec![b".".to_vec(), b"..".to_vec(), b"f".to_vec(), b"l".to_vec()]
    );
    for (name, fileid, _cookie, attr, fh) in &seen {
        let attr = attr.expect("plus has attributes");
        let fh = fh.clone().expect("plus has handles");
        assert_eq!(attr.fileid, *fileid, "{name:?}");
        assert_eq!(fx.fs.getattr(&fh).unwrap().fileid, *fileid);
        match &name[..] {
            b"." => assert_eq!(fh, d),
            b".." => assert_eq!(fh, r),
            b"f" => assert_eq!((attr.ftype, attr.size), (FileType::Regular, 5)),
            b"l" => assert_eq!(attr.ftype, FileType::Symlink),
            _ => unreachable!(),
        }
    }
    // At the export root, ".." is the root itself.
    let mut dotdot = None;
    fx.fs
        .readdir(&root(), &r, 0, [0; 8], true, &mut |e| {
            if e.name == b".." {
                dotdot = Some((e.fileid, e.fh));
            }
            true
        })
        .unwrap();
    assert_eq!(dotdot, Some((root_id, Some(r.clone()))));

    // Plain READDIR carries no attributes. Refusing an entry ends the page without eof.
    let mut n = 0;
    let page = fx
        .fs
        .readdir(&root(), &d, 0, [0; 8], false, &mut |e| {
            assert!(e.attr.is_none() && e.fh.is_none());
            n += 1;
            n <= 2
        })
        .unwrap();
    assert!(!page.eof);
    // Cookie verifier: ours or zero is fine, another is BAD_COOKIE (only with a cookie).
    let cookie = seen[1].2;
    assert!(fx
        .fs
        .readdir(&root(), &d, cookie, page.cookieverf, false, &mut |_| true)
        .is_ok());
    assert!(fx
        .fs
        .readdir(&root(), &d, cookie, [0; 8], false, &mut |_| true)
        .is_ok());
    let e = fx
        .fs
        .readdir(&root(), &d, cookie, [9; 8], false, &mut |_| true)
        .unwrap_err();
    assert_eq!(e.0, FsError::BadCookie);
    assert!(fx
        .fs
        .readdir(&root(), &d, 0, [9; 8], false, &mut |_| true)
        .is_ok());
    let f = fx.walk("d/f");
    let e = fx
        .fs
        .readdir(&root(), &f, 0, [0; 8], false, &mut |_| true)
        .unwrap_err();
    assert_eq!(e.0, FsError::NotDir);
}

/// Lists a directory in pages of the given sizes (cycled), returning every name seen.
fn list_in_pages(fx: &Fixture, dir: &FileHandle, sizes: &[usize], plus: bool) -> Vec<Vec<u8>> {
    let mut names = Vec::new();
    let (mut cookie, mut verf) = (0u64, [0u8; 8]);
    for page in 0.. {
        let limit = sizes[page % sizes.len()];
        let mut taken = 0;
        let mut last = cookie;
        let ok = fx
            .fs
            .readdir(&root(), dir, cookie, verf, plus, &mut |e| {
                if taken == limit {
                    return false;
                }
                taken += 1;
                last = e.cookie;
                names.push(e.name.to_vec());
                true
            })
            .unwrap();
        assert!(taken > 0 || ok.eof, "no progress at cookie {cookie:#x}");
        verf = ok.cookieverf;
        cookie = last;
        if ok.eof {
            break;
        }
    }
    names
}

#[test]
fn readdir_lists_100000_entries_exactly_once() {
    let fx = Fixture::new("readdir-big");
    std::fs::create_dir(fx.path("big")).unwrap();
    let n = 100_000;
    for i in 0..n {
        std::fs::File::create(fx.path(&format!("big/entry-{i:06}"))).unwrap();
    }
    let dir = fx.walk("big");
    for (sizes, plus) in [(&[1, 2, 3, 7, 97][..], false), (&[1000, 1][..], true)] {
        let started = std::time::Instant::now();
        let names = list_in_pages(&fx, &dir, sizes, plus);
        let elapsed = started.elapsed();
        assert_eq!(names.len(), n + 2, "each entry once, plus . and ..");
        let unique: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), n + 2);
        for i in (0..n).step_by(997) {
            assert!(unique.contains(&format!("entry-{i:06}").into_bytes()));
        }
        eprintln!(
            "listed {} entries (plus: {plus}) in {elapsed:?}",
            names.len()
        );
        assert!(elapsed < std::time::Duration::from_secs(8), "{elapsed:?}");
    }
}

#[test]
fn readdir_cookies_survive_changes_between_pages() {
    let fx = Fixture::new("readdir-changes");
    std::fs::create_dir(fx.path("d")).unwrap();
    for i in 0..2000 {
        std::fs::File::create(fx.path(&format!("d/keep-{i}"))).unwrap();
    }
    let dir = fx.walk("d");
    let mut names = Vec::new();
    let (mut cookie, mut verf, mut pages) = (0u64, [0u8; 8], 0);
    loop {
        let mut taken = 0;
        let ok = fx
            .fs
            .readdir(&root(), &dir, cookie, verf, true, &mut |e| {
                if taken == 50 {
                    return false;
                }
                taken += 1;
                cookie = e.cookie;
                names.push(e.name.to_vec());
                true
            })
            .unwrap();
        verf = ok.cookieverf;
        pages += 1;
        // Churn between pages: other names come and go.
        std::fs::File::create(fx.path(&format!("d/temp-{pages}"))).unwrap();
        if pages > 1 {
            std::fs::remove_file(fx.path(&format!("d/temp-{}", pages - 1))).unwrap();
        }
        if ok.eof {
            break;
        }
    }
    let kept: Vec<_> = names.iter().filter(|n| n.starts_with(b"keep-")).collect();
    let unique: std::collections::HashSet<_> = kept.iter().collect();
    assert_eq!(kept.len(), 2000, "no keep- entry lost or repeated");
    assert_eq!(unique.len(), 2000);
}

#[test]
fn fsstat_fsinfo_pathconf() {
    let fx = Fixture::new("fsinfo");
    let r = fx.root();
    let s = fx.fs.fsstat(&r).unwrap();
    assert!(s.tbytes > 0 && s.tbytes >= s.fbytes && s.fbytes >= s.abytes);
    assert!(s.tfiles >= s.ffiles);
    assert!(s.attr.is_some());
    let i = fx.fs.fsinfo(&r).unwrap();
    assert_eq!((i.rtmax, i.wtmax), (1 << 20, 1 << 20));
    assert_eq!(
        i.time_delta,
        Time {
            seconds: 0,
            nseconds: 1
        }
    );
    assert_eq!(i.properties, 0x1b);
    assert!(i.maxfilesize > 1 << 40);
    let p = fx.fs.pathconf(&r).unwrap();
    assert_eq!(p.name_max, 255);
    assert!(p.linkmax >= 8);
    assert!(p.no_trunc && p.chown_restricted && !p.case_insensitive && p.case_preserving);
}

#[test]
fn writable_descriptor_replaces_a_read_only_one() {
    let fx = Fixture::new("upgrade");
    std::fs::write(fx.path("f"), b"abc").unwrap();
    let f = fx.walk("f");
    // An immutable file can only be opened read-only, even by root.
    let chattr = |flag: &str| {
        std::process::Command::new("chattr")
            .arg(flag)
            .arg(fx.path("f"))
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if !chattr("+i") {
        return needs::missing(
            "chattr",
            "`chattr +i` failed",
            "Run the test as root with chattr (apt-get install e2fsprogs) on a file system \
             with the immutable flag (ext4, XFS, btrfs)",
        );
    }
    assert_eq!(read_all(&fx, &root(), &f, 0, 3).unwrap().0, b"abc");
    assert_eq!(write(&fx, &root(), &f, 0, b"x").unwrap_err(), FsError::Perm);
    assert!(chattr("-i"));
    // The cached read-only descriptor is upgraded.
    write(&fx, &root(), &f, 0, b"X").unwrap();
    assert_eq!(std::fs::read(fx.path("f")).unwrap(), b"Xbc");
    assert_eq!(fx.fs.open_files().len(), 1);
}
