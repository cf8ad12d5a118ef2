//! Where a small metadata COMPOUND's time goes, measured in-process: the small-file workload of
//! an untar, `ls -lR` and `rm -r` (OPEN-create + GETFH + GETATTR, SETATTR + GETATTR, CLOSE,
//! LOOKUP + GETFH + GETATTR, GETATTR, REMOVE, each after SEQUENCE) through the one COMPOUND
//! driver loop with the inline executor, over a LocalFs in a temporary directory.
//!
//! The backend is wrapped ([`Counted`]) to count its calls per COMPOUND (each call taking a
//! handle resolves it: MAC check, `open_by_handle_at` or the open-file cache, confinement) and
//! to sum the thread CPU time spent inside it. Decoding and encoding are timed apart on the same
//! bytes, so one run splits a COMPOUND's CPU into decode, backend, encode, and the rest (SEQUENCE
//! and the slot's reply cache, state, dispatch, attribute mapping). CPU time of this thread,
//! not wall time: the machine may be busy with others.
//!
//! The assertions are on counts only (backend calls per COMPOUND, deterministic); the split is
//! printed (`cargo test -p sluice-server --test small_compound_cost -- --nocapture`).

// As in the file-system layer: a failure carries the failure reply's attributes.
#![allow(clippy::result_large_err)]

use bytes::Bytes;
use sluice_nfs4state::{Config4, SplitMix, State4};
use sluice_rpc::server::Credentials;
use sluice_server::backend::exports::{ClientMatch, ClientRule, Squash, Xprtsec};
use sluice_server::backend::stats::BackendStats;
use sluice_server::backend::types::*;
use sluice_server::backend::{
    Export, ExportId, ExportOptions, FileSystem, LocalFs, LocalFsConfig, MetadataSpeed,
};
use sluice_server::exports::ExportEntry;
use sluice_server::nfs4::compound::{Nfs4, Sender};
use sluice_server::testkit::{self, Direct, Session4, SessionConfig};
use sluice_xdr::nfs4::attrs::{num, AttrValues};
use sluice_xdr::nfs4::compound::{Compound4Args, Compound4Res, CompoundLimits};
use sluice_xdr::nfs4::ops::*;
use sluice_xdr::nfs4::*;
use sluice_xdr::{Pack, Reader, Writer};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// CPU time of the calling thread, nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A backend that counts calls and sums the CPU time spent in them.
struct Counted {
    inner: LocalFs,
    calls: AtomicU64,
    cpu_ns: AtomicU64,
}

impl Counted {
    fn time<T>(&self, f: impl FnOnce() -> T) -> T {
        let t0 = thread_cpu_ns();
        let r = f();
        self.cpu_ns.fetch_add(thread_cpu_ns() - t0, Relaxed);
        self.calls.fetch_add(1, Relaxed);
        r
    }
}

impl FileSystem for Counted {
    fn root_handle(&self) -> FileHandle {
        self.inner.root_handle()
    }
    fn export_id(&self) -> ExportId {
        self.inner.export_id()
    }
    fn state_key(&self, fh: &FileHandle) -> Bytes {
        self.inner.state_key(fh)
    }
    fn read_bytes_max(&self) -> u32 {
        self.inner.read_bytes_max()
    }
    fn local(&self) -> Option<&LocalFs> {
        Some(&self.inner)
    }
    fn backend_stats(&self) -> Option<BackendStats> {
        None
    }
    fn change_kind(&self) -> ChangeKind {
        self.inner.change_kind()
    }
    fn metadata_speed(&self) -> MetadataSpeed {
        self.inner.metadata_speed()
    }
    fn write_verifier(&self) -> [u8; 8] {
        self.inner.write_verifier()
    }
    fn reset_write_verifier(&self) {
        self.inner.reset_write_verifier()
    }
    fn getattr(&self, fh: &FileHandle) -> Result<Attr, FsError> {
        self.time(|| self.inner.getattr(fh))
    }
    fn setattr(&self, c: &Caller, fh: &FileHandle, s: &SetAttr, g: Option<Time>) -> Res<Wcc, Wcc> {
        self.time(|| self.inner.setattr(c, fh, s, g))
    }
    fn lookup(&self, c: &Caller, dir: &FileHandle, name: &[u8]) -> Res<LookupOk, Option<Attr>> {
        self.time(|| self.inner.lookup(c, dir, name))
    }
    fn access(
        &self,
        c: &Caller,
        fh: &FileHandle,
        requested: u32,
    ) -> Res<(u32, Option<Attr>), Option<Attr>> {
        self.time(|| self.inner.access(c, fh, requested))
    }
    fn readlink(&self, fh: &FileHandle) -> Res<(Vec<u8>, Option<Attr>), Option<Attr>> {
        self.time(|| self.inner.readlink(fh))
    }
    fn read(
        &self,
        c: &Caller,
        fh: &FileHandle,
        offset: u64,
        bufs: &mut [&mut [u8]],
    ) -> Res<ReadOk, Option<Attr>> {
        self.time(|| self.inner.read(c, fh, offset, bufs))
    }
    fn write(
        &self,
        c: &Caller,
        fh: &FileHandle,
        offset: u64,
        data: &[Bytes],
        stable: StableHow,
    ) -> Res<WriteOk, Wcc> {
        self.time(|| self.inner.write(c, fh, offset, data, stable))
    }
    fn commit(&self, c: &Caller, fh: &FileHandle, offset: u64, count: u32) -> Res<Wcc, Wcc> {
        self.time(|| self.inner.commit(c, fh, offset, count))
    }
    fn create(
        &self,
        c: &Caller,
        dir: &FileHandle,
        name: &[u8],
        how: CreateHow,
    ) -> Res<CreateOk, Wcc> {
        self.time(|| self.inner.create(c, dir, name, how))
    }
    fn mkdir(&self, c: &Caller, dir: &FileHandle, name: &[u8], s: &SetAttr) -> Res<CreateOk, Wcc> {
        self.time(|| self.inner.mkdir(c, dir, name, s))
    }
    fn symlink(
        &self,
        c: &Caller,
        dir: &FileHandle,
        name: &[u8],
        target: &[u8],
        s: &SetAttr,
    ) -> Res<CreateOk, Wcc> {
        self.time(|| self.inner.symlink(c, dir, name, target, s))
    }
    fn mknod(
        &self,
        c: &Caller,
        dir: &FileHandle,
        name: &[u8],
        ftype: FileType,
        s: &SetAttr,
        rdev: DeviceId,
    ) -> Res<CreateOk, Wcc> {
        self.time(|| self.inner.mknod(c, dir, name, ftype, s, rdev))
    }
    fn remove(&self, c: &Caller, dir: &FileHandle, name: &[u8]) -> Res<Wcc, Wcc> {
        self.time(|| self.inner.remove(c, dir, name))
    }
    fn rmdir(&self, c: &Caller, dir: &FileHandle, name: &[u8]) -> Res<Wcc, Wcc> {
        self.time(|| self.inner.rmdir(c, dir, name))
    }
    fn rename(
        &self,
        c: &Caller,
        from_dir: &FileHandle,
        from_name: &[u8],
        to_dir: &FileHandle,
        to_name: &[u8],
    ) -> Res<RenameWcc, RenameWcc> {
        self.time(|| self.inner.rename(c, from_dir, from_name, to_dir, to_name))
    }
    fn link(
        &self,
        c: &Caller,
        fh: &FileHandle,
        dir: &FileHandle,
        name: &[u8],
    ) -> Res<sluice_server::backend::LinkRes, sluice_server::backend::LinkRes> {
        self.time(|| self.inner.link(c, fh, dir, name))
    }
    fn readdir(
        &self,
        c: &Caller,
        dir: &FileHandle,
        cookie: u64,
        cookieverf: [u8; 8],
        plus: bool,
        visit: &mut dyn FnMut(DirEntry<'_>) -> bool,
    ) -> Res<ReaddirOk, Option<Attr>> {
        self.time(|| self.inner.readdir(c, dir, cookie, cookieverf, plus, visit))
    }
    fn fsstat(&self, fh: &FileHandle) -> Res<FsStat, Option<Attr>> {
        self.time(|| self.inner.fsstat(fh))
    }
    fn fsinfo(&self, fh: &FileHandle) -> Res<FsInfo, Option<Attr>> {
        self.time(|| self.inner.fsinfo(fh))
    }
    fn pathconf(&self, fh: &FileHandle) -> Res<PathConf, Option<Attr>> {
        self.time(|| self.inner.pathconf(fh))
    }
}

/// CPU per COMPOUND kind: count, backend calls, and nanoseconds per stage.
#[derive(Default, Debug, Clone, Copy)]
struct Cost {
    n: u64,
    calls: u64,
    total_ns: u64,
    backend_ns: u64,
    decode_ns: u64,
    encode_ns: u64,
}

struct Bench<'a> {
    direct: Direct<'a>,
    fs: &'a Counted,
    session: Session4,
}

impl Bench<'_> {
    /// One COMPOUND (SEQUENCE first), its cost added to `cost`.
    fn run(&mut self, ops: Vec<NfsArgop4>, cost: &mut Cost) -> Compound4Res {
        let ops = self.session.in_session(ops);
        let record = testkit::encode(b"sim", 1, ops);
        let (calls0, be0) = (self.fs.calls.load(Relaxed), self.fs.cpu_ns.load(Relaxed));
        let t0 = thread_cpu_ns();
        let out = self.direct.send_raw(&record);
        let total = thread_cpu_ns() - t0;
        let sluice_server::nfs4::compound::Outcome::Reply(reply) = out else {
            panic!("GARBAGE_ARGS")
        };
        // The same bytes decoded once more, and the reply encoded once more, timed apart.
        let t1 = thread_cpu_ns();
        let segs = [record.clone()];
        let args = Compound4Args::decode(&mut Reader::new(&segs), &CompoundLimits::default());
        let decode = thread_cpu_ns() - t1;
        assert!(args.is_ok());
        let res = testkit::decode(&reply);
        let t2 = thread_cpu_ns();
        let mut w = Writer::new();
        res.pack(&mut w);
        let encode = thread_cpu_ns() - t2;
        cost.n += 1;
        cost.calls += self.fs.calls.load(Relaxed) - calls0;
        cost.total_ns += total;
        cost.backend_ns += self.fs.cpu_ns.load(Relaxed) - be0;
        cost.decode_ns += decode;
        cost.encode_ns += encode;
        res
    }
}

fn ok(res: &Compound4Res) {
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
}

fn getfh(res: &Compound4Res) -> NfsFh4 {
    res.results
        .iter()
        .find_map(|r| match r {
            NfsResop4::Getfh(Res4::Ok(fh)) => Some(fh.clone()),
            _ => None,
        })
        .expect("GETFH")
}

/// The mode a COMPOUND's GETATTR answered.
fn getattr_mode(res: &Compound4Res) -> u32 {
    let f = res
        .results
        .iter()
        .find_map(|r| match r {
            NfsResop4::Getattr(Res4::Ok(f)) => Some(f.clone()),
            _ => None,
        })
        .expect("GETATTR");
    AttrValues::decode(&f)
        .expect("decodes")
        .values
        .mode
        .expect("mode")
}

fn open_stateid(res: &Compound4Res) -> Stateid4 {
    res.results
        .iter()
        .find_map(|r| match r {
            NfsResop4::Open(Res4::Ok(o)) => Some(o.stateid),
            _ => None,
        })
        .expect("OPEN")
}

/// The attributes `ls -l` asks for: type, mode, links, owner, group, size, times, fileid.
fn ls_attrs() -> Bitmap4 {
    Bitmap4::from_bits(&[
        num::TYPE,
        num::CHANGE,
        num::SIZE,
        num::FSID,
        num::FILEID,
        num::MODE,
        num::NUMLINKS,
        num::OWNER,
        num::OWNER_GROUP,
        num::TIME_ACCESS,
        num::TIME_METADATA,
        num::TIME_MODIFY,
    ])
}

const FILES: usize = 300;

#[test]
fn small_compound_cost_split() {
    let base = PathBuf::from(format!("/tmp/sluice-smallcost-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("export")).unwrap();
    let fs = Arc::new(Counted {
        inner: LocalFs::new(LocalFsConfig::new(base.join("export")).state_dir(base.join("state")))
            .unwrap(),
        calls: AtomicU64::new(0),
        cpu_ns: AtomicU64::new(0),
    });
    let exports = vec![ExportEntry {
        fs: fs.clone(),
        export: Export {
            path: PathBuf::from("/export"),
            clients: vec![ClientRule {
                client: ClientMatch::Any,
                options: ExportOptions {
                    read_only: false,
                    squash: Squash::None,
                    ..ExportOptions::default()
                },
            }],
        },
    }];
    let state = State4::new(Config4::default(), Box::new(SplitMix(5)));
    let nfs = Arc::new(Nfs4::new(Arc::new(exports), state, 1).unwrap());
    let direct = Direct {
        nfs: &nfs,
        from: Sender {
            addr: "127.0.0.1:700".parse().unwrap(),
            conn: 1,
            xprtsec: Xprtsec::None,
            cred: Credentials::Sys(sluice_xdr::rpc::AuthSys {
                stamp: 1,
                machine_name: Bytes::from_static(b"bench"),
                uid: 0,
                gid: 0,
                gids: Vec::new(),
            }),
        },
        now: Instant::now(),
        data: None,
        minorversion: 1,
    };
    let session = Session4::establish(&SessionConfig::new(b"bench", 4), |ops| direct.send(ops));
    let mut b = Bench {
        direct,
        fs: &fs,
        session,
    };
    let root = NfsFh4(fs.root_handle().to_bytes());
    let names: Vec<Component4> = (0..FILES)
        .map(|i| Component4(Bytes::from(format!("file{i:04}"))))
        .collect();

    let mut open = Cost::default();
    let mut setattr = Cost::default();
    let mut close = Cost::default();
    let mut lookup = Cost::default();
    let mut getattr = Cost::default();
    let mut remove = Cost::default();
    let mut handles = Vec::new();
    for (i, name) in names.iter().enumerate() {
        // untar: create, set the mode and times, close.
        let res = b.run(
            vec![
                NfsArgop4::Putfh(root.clone()),
                NfsArgop4::Open(OpenArgs {
                    seqid: 0,
                    share_access: OPEN4_SHARE_ACCESS_BOTH,
                    share_deny: OPEN4_SHARE_DENY_NONE,
                    owner: StateOwner4 {
                        clientid: 0,
                        owner: Opaque4(Bytes::from(format!("o{i}"))),
                    },
                    openhow: Openflag4::Create(Createhow4::Unchecked(Fattr4::default())),
                    claim: OpenClaim4::Null(name.clone()),
                }),
                NfsArgop4::Getfh(()),
                NfsArgop4::Getattr(ls_attrs()),
            ],
            &mut open,
        );
        ok(&res);
        let fh = getfh(&res);
        let sid = open_stateid(&res);
        let mode = AttrValues {
            mode: Some(0o640),
            ..AttrValues::default()
        };
        let res = b.run(
            vec![
                NfsArgop4::Putfh(fh.clone()),
                NfsArgop4::Setattr(SetattrArgs {
                    stateid: Stateid4::default(),
                    obj_attributes: mode.encode(),
                }),
                NfsArgop4::Getattr(ls_attrs()),
            ],
            &mut setattr,
        );
        ok(&res);
        assert_eq!(getattr_mode(&res), 0o640, "GETATTR after SETATTR shows it");
        ok(&b.run(
            vec![
                NfsArgop4::Putfh(fh.clone()),
                NfsArgop4::Close(CloseArgs {
                    seqid: 0,
                    open_stateid: sid,
                }),
            ],
            &mut close,
        ));
        handles.push(fh);
    }
    // ls -lR: LOOKUP with attributes, then GETATTR (revalidation).
    for name in &names {
        ok(&b.run(
            vec![
                NfsArgop4::Putfh(root.clone()),
                NfsArgop4::Lookup(name.clone()),
                NfsArgop4::Getfh(()),
                NfsArgop4::Getattr(ls_attrs()),
            ],
            &mut lookup,
        ));
    }
    for fh in &handles {
        ok(&b.run(
            vec![NfsArgop4::Putfh(fh.clone()), NfsArgop4::Getattr(ls_attrs())],
            &mut getattr,
        ));
    }
    // rm -r
    for name in &names {
        ok(&b.run(
            vec![
                NfsArgop4::Putfh(root.clone()),
                NfsArgop4::Remove(name.clone()),
            ],
            &mut remove,
        ));
    }

    println!(
        "{:<28} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "COMPOUND (after SEQUENCE)", "calls", "total µs", "backend", "decode", "encode", "rest"
    );
    for (what, c) in [
        ("PUTFH OPEN GETFH GETATTR", open),
        ("PUTFH SETATTR GETATTR", setattr),
        ("PUTFH CLOSE", close),
        ("PUTFH LOOKUP GETFH GETATTR", lookup),
        ("PUTFH GETATTR", getattr),
        ("PUTFH REMOVE", remove),
    ] {
        let per = |ns: u64| ns as f64 / c.n as f64 / 1000.0;
        let rest = c
            .total_ns
            .saturating_sub(c.backend_ns + c.decode_ns + c.encode_ns);
        println!(
            "{:<28} {:>6.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
            what,
            c.calls as f64 / c.n as f64,
            per(c.total_ns),
            per(c.backend_ns),
            per(c.decode_ns),
            per(c.encode_ns),
            per(rest),
        );
    }
    // Backend calls per COMPOUND (each one resolves its handles again).
    let per = |c: Cost| c.calls as f64 / c.n as f64;
    println!(
        "backend calls per COMPOUND: open {} setattr {} close {} lookup {} getattr {} remove {}",
        per(open),
        per(setattr),
        per(close),
        per(lookup),
        per(getattr),
        per(remove)
    );
    // One backend call per handle per COMPOUND: the GETATTR after LOOKUP, OPEN and SETATTR
    // uses the attributes those ops had from the backend (`Ctx::fresh`), and OPEN's create
    // returns the new file's attributes itself.
    assert_eq!(per(getattr), 1.0, "PUTFH GETATTR");
    assert_eq!(per(lookup), 1.0, "PUTFH LOOKUP GETFH GETATTR");
    assert_eq!(per(setattr), 1.0, "PUTFH SETATTR GETATTR");
    assert_eq!(per(open), 1.0, "PUTFH OPEN(create) GETFH GETATTR");
    assert_eq!(per(close), 0.0, "PUTFH CLOSE");
    std::fs::remove_dir_all(&base).unwrap();
}
