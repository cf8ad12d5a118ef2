//! The local-filesystem backend against real directories under /tmp. Needs root (credential
//! switching, `open_by_handle_at`).

use bytes::Bytes;
use sluice_server::backend::exports::parse_exports;
use sluice_server::backend::{
    access3, Caller, CreateHow, Cred, ExportId, LocalFs, LocalFsConfig, StableHow,
};
use sluice_xdr::nfs3::{Ftype3, NfsFh3, Nfsstat3, Nfstime3, Sattr3, SetTime, Specdata3};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

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

    fn root(&self) -> NfsFh3 {
        self.fs.root_handle()
    }

    fn lookup(&self, dir: &NfsFh3, name: &str) -> Result<NfsFh3, Nfsstat3> {
        self.fs
            .lookup(&root(), dir, name.as_bytes())
            .map(|l| l.fh)
            .map_err(|(s, _)| s)
    }

    /// Looks up a slash-separated path from the export root.
    fn walk(&self, path: &str) -> NfsFh3 {
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

fn mode(m: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(m),
        ..Sattr3::default()
    }
}

fn create(fx: &Fixture, caller: &Caller, dir: &NfsFh3, name: &str, m: u32) -> NfsFh3 {
    fx.fs
        .create(caller, dir, name.as_bytes(), CreateHow::Guarded(mode(m)))
        .unwrap_or_else(|(s, _)| panic!("create {name}: {s:?}"))
        .fh
}

fn write(
    fx: &Fixture,
    caller: &Caller,
    fh: &NfsFh3,
    offset: u64,
    data: &[u8],
) -> Result<usize, Nfsstat3> {
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
    fh: &NfsFh3,
    offset: u64,
    len: usize,
) -> Result<(Vec<u8>, bool), Nfsstat3> {
    let mut bufs = vec![vec![0u8; len]];
    let r = fx
        .fs
        .read(caller, fh, offset, &mut bufs)
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
    assert!(file.0.len() <= 64 && dir.0.len() <= 64);
    let attr = fx.fs.getattr(&file).unwrap();
    assert_eq!(attr.ftype, Ftype3::REG);
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
    assert_eq!(again.getattr(&dir).unwrap().ftype, Ftype3::DIR);
    let mut buf = [vec![0u8; 16]];
    let r = again.read(&root(), &file, 0, &mut buf).unwrap();
    assert_eq!(&buf[0][..r.count], b"hello");
    assert!(r.eof);
}

#[test]
fn forged_and_malformed_handles_are_badhandle() {
    let fx = Fixture::new("forged");
    std::fs::write(fx.path("f"), b"x").unwrap();
    let fh = fx.walk("f");
    for i in [0, 5, 6, 7, 8, fh.0.len() - 1] {
        let mut b = fh.0.to_vec();
        b[i] ^= 1;
        assert_eq!(
            fx.fs.getattr(&NfsFh3(b.into())),
            Err(Nfsstat3::BADHANDLE),
            "byte {i}"
        );
    }
    assert_eq!(
        fx.fs.getattr(&NfsFh3(Bytes::new())),
        Err(Nfsstat3::BADHANDLE)
    );
    assert_eq!(
        fx.fs.getattr(&NfsFh3(fh.0.slice(..fh.0.len() - 1))),
        Err(Nfsstat3::BADHANDLE)
    );
    // A handle from another export (different id) is stale here.
    let other = LocalFs::new(
        LocalFsConfig::new(&fx.export)
            .state_dir(&fx.state)
            .export_id(ExportId(fx.fs.export_id().0 ^ 1)),
    )
    .unwrap();
    assert_eq!(other.getattr(&fh), Err(Nfsstat3::STALE));
    // A new secret makes every old handle a forgery.
    std::fs::remove_file(fx.state.join("secret")).unwrap();
    let rekeyed = fx.reopen();
    assert_eq!(rekeyed.getattr(&fh), Err(Nfsstat3::BADHANDLE));
}

#[test]
fn removed_files_are_stale() {
    let fx = Fixture::new("stale");
    let r = fx.root();
    let f = create(&fx, &root(), &r, "gone", 0o644);
    write(&fx, &root(), &f, 0, b"data").unwrap(); // now in the open-file cache
    fx.fs.remove(&root(), &r, b"gone").unwrap();
    assert_eq!(fx.fs.getattr(&f), Err(Nfsstat3::STALE));
    assert_eq!(
        read_all(&fx, &root(), &f, 0, 4).unwrap_err(),
        Nfsstat3::STALE
    );

    // Removed behind the server's back while cached.
    let g = create(&fx, &root(), &r, "local", 0o644);
    write(&fx, &root(), &g, 0, b"data").unwrap();
    std::fs::remove_file(fx.path("local")).unwrap();
    assert_eq!(
        write(&fx, &root(), &g, 0, b"x").unwrap_err(),
        Nfsstat3::STALE
    );
    assert_eq!(fx.fs.getattr(&g), Err(Nfsstat3::STALE));

    std::fs::create_dir(fx.path("d")).unwrap();
    let d = fx.walk("d");
    std::fs::remove_dir(fx.path("d")).unwrap();
    assert_eq!(fx.fs.getattr(&d), Err(Nfsstat3::STALE));
    assert_eq!(fx.lookup(&d, "x"), Err(Nfsstat3::STALE));
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
    let mut bufs = vec![vec![0u8; 3000], vec![0u8; 3000]];
    let r = fx.fs.read(&root(), &f, 0, &mut bufs).unwrap();
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
        Nfsstat3::ISDIR
    );
    assert_eq!(
        write(&fx, &root(), &d, 0, b"x").unwrap_err(),
        Nfsstat3::ISDIR
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
    assert_eq!(e.unwrap_err().0, Nfsstat3::EXIST);
    // UNCHECKED over an existing file applies only the size.
    write(&fx, &u, &f.fh, 0, b"abcdef").unwrap();
    let again = fx
        .fs
        .create(
            &u,
            &r,
            b"mine",
            CreateHow::Unchecked(Sattr3 {
                mode: Some(0o777),
                size: Some(0),
                ..Sattr3::default()
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
    assert_eq!(e.unwrap_err().0, Nfsstat3::EXIST);

    // Names.
    for (name, want) in [
        (&b""[..], Nfsstat3::ACCES),
        (b"a/b", Nfsstat3::ACCES),
        (b"a\0b", Nfsstat3::ACCES),
        (b".", Nfsstat3::EXIST),
        (b"..", Nfsstat3::EXIST),
    ] {
        let e = fx.fs.create(&u, &r, name, CreateHow::Guarded(mode(0o600)));
        assert_eq!(e.unwrap_err().0, want, "{name:?}");
    }
    let long = vec![b'n'; 256];
    let e = fx.fs.create(&u, &r, &long, CreateHow::Guarded(mode(0o600)));
    assert_eq!(e.unwrap_err().0, Nfsstat3::NAMETOOLONG);
    assert_eq!(
        fx.fs.lookup(&u, &r, &long).unwrap_err().0,
        Nfsstat3::NAMETOOLONG
    );
    assert_eq!(fx.fs.lookup(&u, &r, b"a/b").unwrap_err().0, Nfsstat3::ACCES);
    assert_eq!(
        fx.fs.lookup(&u, &r, b"nope").unwrap_err().0,
        Nfsstat3::NOENT
    );
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
    assert_eq!(e.unwrap_err().0, Nfsstat3::EXIST);
    // Once the client set the attributes, the verifier no longer matches either.
    fx.fs
        .setattr(
            &root(),
            &a.fh,
            &Sattr3 {
                mode: Some(0o644),
                atime: SetTime::ServerTime,
                mtime: SetTime::ServerTime,
                ..Sattr3::default()
            },
            None,
        )
        .unwrap();
    let e = fx.fs.create(&root(), &r, b"x", CreateHow::Exclusive(verf));
    assert_eq!(e.unwrap_err().0, Nfsstat3::EXIST);
}

#[test]
fn setattr_guard_times_and_size() {
    let fx = Fixture::new("setattr");
    let f = create(&fx, &root(), &fx.root(), "f", 0o644);
    write(&fx, &root(), &f, 0, b"0123456789").unwrap();
    let attr = fx.fs.getattr(&f).unwrap();

    let wrong = Nfstime3 {
        seconds: attr.ctime.seconds.wrapping_sub(1),
        nseconds: attr.ctime.nseconds,
    };
    let e = fx
        .fs
        .setattr(&root(), &f, &mode(0o600), Some(wrong))
        .unwrap_err();
    assert_eq!(e.0, Nfsstat3::NOT_SYNC);
    assert_eq!(e.1.before.unwrap().ctime, attr.ctime);
    assert_eq!(fx.fs.getattr(&f).unwrap().mode, 0o644);

    let set = Sattr3 {
        mode: Some(0o600),
        size: Some(4),
        atime: SetTime::ClientTime(Nfstime3 {
            seconds: 1_000_000,
            nseconds: 5,
        }),
        mtime: SetTime::ClientTime(Nfstime3 {
            seconds: 2_000_000,
            nseconds: 7,
        }),
        ..Sattr3::default()
    };
    let wcc = fx.fs.setattr(&root(), &f, &set, Some(attr.ctime)).unwrap();
    assert_eq!(wcc.before.unwrap().size, 10);
    let after = wcc.after.unwrap();
    assert_eq!((after.mode, after.size), (0o600, 4));
    assert_eq!(
        after.atime,
        Nfstime3 {
            seconds: 1_000_000,
            nseconds: 5
        }
    );
    assert_eq!(
        after.mtime,
        Nfstime3 {
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
            &Sattr3 {
                mtime: SetTime::ServerTime,
                ..Sattr3::default()
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
        &Sattr3 {
            size: Some(0),
            ..Sattr3::default()
        },
        None,
    );
    assert_eq!(e.unwrap_err().0, Nfsstat3::ISDIR);
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
            Ftype3::FIFO,
            &mode(0o600),
            Specdata3::default(),
        )
        .unwrap();
    assert_eq!(fifo.attr.ftype, Ftype3::FIFO);
    let chr = fx
        .fs
        .mknod(
            &root(),
            &r,
            b"null",
            Ftype3::CHR,
            &mode(0o666),
            Specdata3 { major: 1, minor: 3 },
        )
        .unwrap();
    assert_eq!(chr.attr.ftype, Ftype3::CHR);
    assert_eq!(chr.attr.rdev, Specdata3 { major: 1, minor: 3 });
    let sock = fx
        .fs
        .mknod(
            &root(),
            &r,
            b"sock",
            Ftype3::SOCK,
            &mode(0o600),
            Specdata3::default(),
        )
        .unwrap();
    assert_eq!(sock.attr.ftype, Ftype3::SOCK);
    for t in [Ftype3::REG, Ftype3::DIR, Ftype3::LNK, Ftype3(99)] {
        let e = fx
            .fs
            .mknod(&root(), &r, b"bad", t, &mode(0o600), Specdata3::default())
            .unwrap_err();
        assert_eq!(e.0, Nfsstat3::BADTYPE);
    }
    // Only root may make devices.
    let e = fx
        .fs
        .mknod(
            &user(1000),
            &r,
            b"dev2",
            Ftype3::BLK,
            &mode(0o600),
            Specdata3 { major: 7, minor: 0 },
        )
        .unwrap_err();
    assert_eq!(e.0, Nfsstat3::PERM);
    // Reading a FIFO through NFS is not a thing.
    assert_eq!(
        read_all(&fx, &root(), &fifo.fh, 0, 1).unwrap_err(),
        Nfsstat3::INVAL
    );
}

#[allow(dead_code)]
fn exists(p: &Path) -> bool {
    p.symlink_metadata().is_ok()
}

#[allow(dead_code)]
fn unused() {
    let _ = parse_exports("");
    let _ = access3::READ;
}
