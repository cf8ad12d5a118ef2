//! NFSv4.2 extended attributes over a real socket (RFC 8276): GETXATTR, SETXATTR, LISTXATTRS,
//! REMOVEXATTR, `xattr_support` and the ACCESS xattr bits, through record marking, the RPC
//! layer and the service, on a LocalFs export (the file system's `user.*` attributes) and on
//! MemFs (a file system with a smaller value limit).
//!
//! | RFC 8276 | error / behaviour | test |
//! |---|---|---|
//! | §8.4.3, §8.4.2, §8.4.5 | SET then GET, the value stored as `user.NAME` on disk, a local `user.*` attribute read over NFS, `change_info4` of the file moving | `xattrs_are_set_read_listed_and_removed` |
//! | §8.4.3.3 | SETXATTR4_CREATE of an existing name: EXIST; SETXATTR4_REPLACE of a missing one: NOXATTR; an unknown option: INVAL | `xattrs_are_set_read_listed_and_removed`, `names_and_options_are_checked` |
//! | §8.4.2, §8.4.5 | GETXATTR and REMOVEXATTR of a missing name: NOXATTR | `xattrs_are_set_read_listed_and_removed` |
//! | §8.4.4 | LISTXATTRS: only user names, without the prefix; cookies resume, `eof` at the end, `maxcount` bounds the reply, too small for one name TOOSMALL, a cookie past the end BAD_COOKIE | `listxattrs_pages_with_cookies_and_maxcount` |
//! | §8.2, §8.4.1.1 | `xattr_support` and the XAREAD/XAWRITE/XALIST bits in 4.2 only; the ops OP_ILLEGAL in 4.1 | `support_and_access_bits_exist_in_minor_version_2_only` |
//! | §8.4 | an empty name INVAL, a name over 250 bytes NAMETOOLONG | `names_and_options_are_checked` |
//! | §8.4.3, §8.4.5 | a read-only export: ROFS (reading still works); a squashed caller without write permission: ACCESS | `a_read_only_export_is_rofs_and_squashed_callers_are_refused` |
//! | RFC 8881 §2.10.6.4 | a value larger than the session's `ca_maxresponsesize`: REP_TOO_BIG | `a_value_larger_than_the_session_reply_is_rep_too_big` |
//! | §8.4.3 | a value larger than the file system holds: XATTR2BIG; the pseudo tree: NOTSUPP and `xattr_support` false | `memfs_limits_give_xattr2big_and_the_pseudo_tree_has_none` |
//! | §8.2 | an export whose file system has no user attributes: `xattr_support` false, every op NOTSUPP, the ACCESS bits not supported | `a_file_system_without_xattrs_answers_notsupp` |

#[macro_use]
mod support;

use bytes::Bytes;
use sluice_server::backend::exports::Squash;
use sluice_server::backend::memfs::MemFsConfig;
use sluice_server::backend::MemFs;
use sluice_server::nfs::ExportEntry;
use sluice_xdr::nfs4::attrs::num;
use sluice_xdr::nfs4::compound::Compound4Res;
use sluice_xdr::nfs4::ops::{
    AccessArgs, ListxattrsArgs, ListxattrsResOk, NfsArgop4, NfsResop4, Res4, SetxattrArgs,
    XattrValue4, ACCESS4_MODIFY, ACCESS4_READ, ACCESS4_XALIST, ACCESS4_XAREAD, ACCESS4_XAWRITE,
    SETXATTR4_CREATE, SETXATTR4_EITHER, SETXATTR4_REPLACE,
};
use sluice_xdr::nfs4::{Bitmap4, ChangeInfo4, Nfsstat4};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use support::nfs4::*;
use support::{export_to_all, rw, rw_options, with_options, Rpc, TestServer};

fn set(option: u32, name: &str, value: &[u8]) -> NfsArgop4 {
    NfsArgop4::Setxattr(SetxattrArgs {
        option,
        key: component(name),
        value: XattrValue4(Bytes::copy_from_slice(value)),
    })
}

fn get(name: &str) -> NfsArgop4 {
    NfsArgop4::Getxattr(component(name))
}

fn remove(name: &str) -> NfsArgop4 {
    NfsArgop4::Removexattr(component(name))
}

fn list(cookie: u64, maxcount: u32) -> NfsArgop4 {
    NfsArgop4::Listxattrs(ListxattrsArgs { cookie, maxcount })
}

/// `ops` on file `name` of the export at `export`, in minor version 2.
async fn on_file(v: &mut V4, export: &Path, name: &str, ops: Vec<NfsArgop4>) -> Compound4Res {
    let mut all = walk_to(export);
    all.push(lookup(name));
    all.extend(ops);
    v.send_minor(2, all).await
}

/// The last result of a COMPOUND that must have succeeded.
fn last_ok(res: &Compound4Res) -> &NfsResop4 {
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    res.results.last().expect("results")
}

fn cinfo(r: &NfsResop4) -> ChangeInfo4 {
    match r {
        NfsResop4::Setxattr(Res4::Ok(c)) | NfsResop4::Removexattr(Res4::Ok(c)) => c.clone(),
        other => panic!("no change info: {other:?}"),
    }
}

fn value(r: &NfsResop4) -> Vec<u8> {
    match r {
        NfsResop4::Getxattr(Res4::Ok(v)) => v.0.to_vec(),
        other => panic!("not a GETXATTR value: {other:?}"),
    }
}

fn listing(r: &NfsResop4) -> ListxattrsResOk {
    match r {
        NfsResop4::Listxattrs(Res4::Ok(l)) => l.clone(),
        other => panic!("not a LISTXATTRS result: {other:?}"),
    }
}

fn names(l: &ListxattrsResOk) -> Vec<String> {
    l.names
        .0
        .iter()
        .map(|c| String::from_utf8(c.0.to_vec()).unwrap())
        .collect()
}

/// The value of attribute `name` (the full, prefixed name) of the file at `path`, read
/// locally.
fn local_get(path: &Path, name: &str) -> Option<Vec<u8>> {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 65536];
    // SAFETY: NUL-terminated strings, `buf` valid for its length.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    usize::try_from(r).ok().map(|len| buf[..len].to_vec())
}

fn local_set(path: &Path, name: &str, value: &[u8]) {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: NUL-terminated strings, `value` valid for its length.
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(r, 0, "setxattr {name}: {}", std::io::Error::last_os_error());
}

#[tokio::test]
async fn xattrs_are_set_read_listed_and_removed() {
    let s = TestServer::start(rw()).await;
    let path = s.export.join("f");
    std::fs::write(&path, b"data").unwrap();
    let mut v = V4::mount(&s, "xattr client").await;

    let res = on_file(
        &mut v,
        &s.export,
        "f",
        vec![set(SETXATTR4_CREATE, "a.b", b"1")],
    )
    .await;
    let c = cinfo(last_ok(&res));
    assert_ne!(
        c.before, c.after,
        "the file's change attribute moved: {c:?}"
    );
    assert_eq!(
        local_get(&path, "user.a.b").as_deref(),
        Some(&b"1"[..]),
        "stored in the user namespace"
    );
    let res = on_file(&mut v, &s.export, "f", vec![get("a.b")]).await;
    assert_eq!(value(last_ok(&res)), b"1");

    // CREATE of an existing name, REPLACE and GET and REMOVE of a missing one.
    let res = on_file(
        &mut v,
        &s.export,
        "f",
        vec![set(SETXATTR4_CREATE, "a.b", b"2")],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::EXIST, "{res:?}");
    let res = on_file(
        &mut v,
        &s.export,
        "f",
        vec![set(SETXATTR4_REPLACE, "nope", b"2")],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::NOXATTR, "{res:?}");
    assert_eq!(local_get(&path, "user.nope"), None, "nothing was created");
    let res = on_file(&mut v, &s.export, "f", vec![get("nope")]).await;
    assert_eq!(res.status, Nfsstat4::NOXATTR, "{res:?}");
    let res = on_file(&mut v, &s.export, "f", vec![remove("nope")]).await;
    assert_eq!(res.status, Nfsstat4::NOXATTR, "{res:?}");
    assert_eq!(local_get(&path, "user.a.b").as_deref(), Some(&b"1"[..]));

    // REPLACE of an existing one, EITHER of a new one (an empty value), in one COMPOUND.
    let res = on_file(
        &mut v,
        &s.export,
        "f",
        vec![
            set(SETXATTR4_REPLACE, "a.b", b"22"),
            set(SETXATTR4_EITHER, "empty", b""),
            get("a.b"),
            get("empty"),
        ],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let n = res.results.len();
    assert_eq!(value(&res.results[n - 2]), b"22");
    assert_eq!(value(&res.results[n - 1]), b"");

    // An attribute set locally is seen; other namespaces are not.
    local_set(&path, "user.local", b"here");
    local_set(&path, "trusted.hidden", b"x");
    let res = on_file(&mut v, &s.export, "f", vec![list(0, 4096)]).await;
    let l = listing(last_ok(&res));
    assert_eq!(names(&l), ["a.b", "empty", "local"]);
    assert!(l.eof);
    let res = on_file(&mut v, &s.export, "f", vec![get("local")]).await;
    assert_eq!(value(last_ok(&res)), b"here");

    let res = on_file(&mut v, &s.export, "f", vec![remove("a.b")]).await;
    let c = cinfo(last_ok(&res));
    assert_ne!(c.before, c.after, "{c:?}");
    assert_eq!(local_get(&path, "user.a.b"), None);
    let res = on_file(&mut v, &s.export, "f", vec![remove("a.b")]).await;
    assert_eq!(res.status, Nfsstat4::NOXATTR, "{res:?}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b"data",
        "the data is untouched"
    );
}

#[tokio::test]
async fn listxattrs_pages_with_cookies_and_maxcount() {
    let s = TestServer::start(rw()).await;
    let path = s.export.join("f");
    std::fs::write(&path, b"").unwrap();
    for n in ["e", "dd", "c", "bbbbb", "a"] {
        local_set(&path, &format!("user.{n}"), b"v");
    }
    let mut v = V4::mount(&s, "xattr lister").await;
    // LISTXATTRS4resok: cookie 8, count 4, eof 4, and 4 + the padded name per name, so 16 + 8
    // holds one one-byte name and 16 + 8 + 12 holds "a" and "bbbbb".
    let mut got = Vec::new();
    let mut cookie = 0;
    let mut pages = 0;
    loop {
        let res = on_file(&mut v, &s.export, "f", vec![list(cookie, 16 + 8 + 12)]).await;
        let l = listing(last_ok(&res));
        assert!(l.names.0.len() <= 2, "{l:?}");
        got.extend(names(&l));
        cookie = l.cookie;
        pages += 1;
        if l.eof {
            break;
        }
        assert!(pages < 10, "the listing ends");
    }
    assert_eq!(got, ["a", "bbbbb", "c", "dd", "e"], "sorted, each once");
    assert_eq!(pages, 3);
    // At the end: nothing, eof.
    let res = on_file(&mut v, &s.export, "f", vec![list(5, 4096)]).await;
    let l = listing(last_ok(&res));
    assert!(l.names.0.is_empty() && l.eof, "{l:?}");
    // Room for no name: TOOSMALL; a cookie past the end: BAD_COOKIE.
    let res = on_file(&mut v, &s.export, "f", vec![list(1, 16 + 8)]).await;
    assert_eq!(res.status, Nfsstat4::TOOSMALL, "{res:?}");
    let res = on_file(&mut v, &s.export, "f", vec![list(0, 8)]).await;
    assert_eq!(res.status, Nfsstat4::TOOSMALL, "{res:?}");
    let res = on_file(&mut v, &s.export, "f", vec![list(6, 4096)]).await;
    assert_eq!(res.status, Nfsstat4::BAD_COOKIE, "{res:?}");
}

#[tokio::test]
async fn support_and_access_bits_exist_in_minor_version_2_only() {
    let s = TestServer::start(rw()).await;
    std::fs::write(s.export.join("f"), b"").unwrap();
    let mut v = V4::mount(&s, "xattr minor").await;
    let ask = Bitmap4::from_bits(&[num::SUPPORTED_ATTRS, num::XATTR_SUPPORT]);
    let all = ACCESS4_READ | ACCESS4_MODIFY | ACCESS4_XAREAD | ACCESS4_XAWRITE | ACCESS4_XALIST;
    let ops = || {
        let mut ops = walk_to(&s.export);
        ops.push(lookup("f"));
        ops.push(NfsArgop4::Getattr(ask.clone()));
        ops.push(NfsArgop4::Access(AccessArgs { access: all }));
        ops
    };
    let res = v.send_minor(2, ops()).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let n = res.results.len();
    let a = attrs(&res.results[n - 2]);
    assert_eq!(a.xattr_support, Some(true));
    assert!(a.supported_attrs.unwrap().contains(num::XATTR_SUPPORT));
    let NfsResop4::Access(Res4::Ok(acc)) = &res.results[n - 1] else {
        panic!("{res:?}")
    };
    assert_eq!((acc.supported, acc.access), (all, all), "root may do all");

    let res = v.send_minor(1, ops()).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let a = attrs(&res.results[n - 2]);
    assert_eq!(a.xattr_support, None);
    assert!(!a.supported_attrs.unwrap().contains(num::XATTR_SUPPORT));
    let NfsResop4::Access(Res4::Ok(acc)) = &res.results[n - 1] else {
        panic!("{res:?}")
    };
    let base = ACCESS4_READ | ACCESS4_MODIFY;
    assert_eq!((acc.supported, acc.access), (base, base));

    // The ops themselves do not exist in 4.1.
    for op in [
        get("a"),
        set(SETXATTR4_EITHER, "a", b"1"),
        list(0, 4096),
        remove("a"),
    ] {
        let mut ops = walk_to(&s.export);
        ops.push(lookup("f"));
        ops.push(op);
        let res = v.send_minor(1, ops).await;
        assert_eq!(res.status, Nfsstat4::OP_ILLEGAL, "{res:?}");
    }
    assert_eq!(local_get(&s.export.join("f"), "user.a"), None);
}

#[tokio::test]
async fn names_and_options_are_checked() {
    let s = TestServer::start(rw()).await;
    std::fs::write(s.export.join("f"), b"").unwrap();
    let mut v = V4::mount(&s, "xattr names").await;
    let res = on_file(&mut v, &s.export, "f", vec![get("")]).await;
    assert_eq!(res.status, Nfsstat4::INVAL, "{res:?}");
    let res = on_file(
        &mut v,
        &s.export,
        "f",
        vec![set(SETXATTR4_EITHER, "", b"1")],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::INVAL, "{res:?}");
    let long = "n".repeat(251);
    let res = on_file(
        &mut v,
        &s.export,
        "f",
        vec![set(SETXATTR4_EITHER, &long, b"1")],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::NAMETOOLONG, "{res:?}");
    let res = on_file(&mut v, &s.export, "f", vec![get(&long)]).await;
    assert_eq!(res.status, Nfsstat4::NAMETOOLONG, "{res:?}");
    // 250 bytes is the longest: `user.` and the name fill XATTR_NAME_MAX.
    let longest = "n".repeat(250);
    let res = on_file(
        &mut v,
        &s.export,
        "f",
        vec![set(SETXATTR4_EITHER, &longest, b"1")],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let res = on_file(&mut v, &s.export, "f", vec![set(7, "a", b"1")]).await;
    assert_eq!(res.status, Nfsstat4::INVAL, "{res:?}");
    assert_eq!(local_get(&s.export.join("f"), "user.a"), None);
}

#[tokio::test]
async fn a_read_only_export_is_rofs_and_squashed_callers_are_refused() {
    let s = TestServer::start(with_options(|o| o.read_only = true)).await;
    let path = s.export.join("f");
    std::fs::write(&path, b"").unwrap();
    local_set(&path, "user.k", b"v");
    let mut v = V4::mount(&s, "ro client").await;
    let res = on_file(
        &mut v,
        &s.export,
        "f",
        vec![set(SETXATTR4_EITHER, "n", b"1")],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::ROFS, "{res:?}");
    let res = on_file(&mut v, &s.export, "f", vec![remove("k")]).await;
    assert_eq!(res.status, Nfsstat4::ROFS, "{res:?}");
    let res = on_file(&mut v, &s.export, "f", vec![get("k")]).await;
    assert_eq!(value(last_ok(&res)), b"v", "reading still works");
    let res = on_file(&mut v, &s.export, "f", vec![list(0, 4096)]).await;
    assert_eq!(names(&listing(last_ok(&res))), ["k"]);
    assert_eq!(local_get(&path, "user.n"), None);
    assert_eq!(local_get(&path, "user.k").as_deref(), Some(&b"v"[..]));
    drop(v);
    drop(s);

    // Everyone squashed to the anonymous user: root's 0644 file is readable, not writable.
    let s = TestServer::start(with_options(|o| o.squash = Squash::All)).await;
    let path = s.export.join("f");
    std::fs::write(&path, b"").unwrap();
    local_set(&path, "user.k", b"v");
    let mut v = V4::mount(&s, "squashed client").await;
    let res = on_file(&mut v, &s.export, "f", vec![get("k")]).await;
    assert_eq!(value(last_ok(&res)), b"v");
    let res = on_file(
        &mut v,
        &s.export,
        "f",
        vec![set(SETXATTR4_EITHER, "n", b"1")],
    )
    .await;
    assert_eq!(res.status, Nfsstat4::ACCESS, "{res:?}");
    let res = on_file(&mut v, &s.export, "f", vec![remove("k")]).await;
    assert_eq!(res.status, Nfsstat4::ACCESS, "{res:?}");
    let res = on_file(
        &mut v,
        &s.export,
        "f",
        vec![NfsArgop4::Access(AccessArgs {
            access: ACCESS4_XAREAD | ACCESS4_XAWRITE | ACCESS4_XALIST,
        })],
    )
    .await;
    let NfsResop4::Access(Res4::Ok(acc)) = last_ok(&res) else {
        panic!("{res:?}")
    };
    assert_eq!(acc.access, ACCESS4_XAREAD | ACCESS4_XALIST);
    assert_eq!(local_get(&path, "user.n"), None);
}

#[tokio::test]
async fn a_value_larger_than_the_session_reply_is_rep_too_big() {
    let s = TestServer::start(rw()).await;
    let path = s.export.join("f");
    std::fs::write(&path, b"").unwrap();
    // ext4 keeps up to about a block of attributes per inode.
    local_set(&path, "user.big", &[b'x'; 3000]);
    let mut fore = chan();
    fore.maxresponsesize = 2048;
    let mut v = V4::mount_with(&s, "small replies", fore).await;
    let res = on_file(&mut v, &s.export, "f", vec![get("big")]).await;
    assert_eq!(res.status, Nfsstat4::REP_TOO_BIG, "{res:?}");
    let mut v = V4::mount(&s, "large replies").await;
    let res = on_file(&mut v, &s.export, "f", vec![get("big")]).await;
    assert_eq!(value(last_ok(&res)), vec![b'x'; 3000]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memfs_limits_give_xattr2big_and_the_pseudo_tree_has_none() {
    let mem = Arc::new(MemFs::new(MemFsConfig::default()));
    mem.set_xattr_value_bytes_max(16);
    let entries = vec![ExportEntry {
        fs: mem.clone(),
        export: export_to_all(PathBuf::from("/mem"), rw_options()),
    }];
    let bound = sluice_server::bind_exports(rw(), entries)
        .await
        .expect("binds");
    let addr = bound.local_addr().unwrap();
    let server = tokio::spawn(sluice_server::run(bound));
    let mut v = V4::establish(Rpc::connect(addr).await, "memfs", chan()).await;
    let export = PathBuf::from("/mem");
    // The export root holds attributes as a file does.
    let mut ops = walk_to(&export);
    ops.push(set(SETXATTR4_EITHER, "ok", &[b'v'; 16]));
    ops.push(get("ok"));
    let res = v.send_minor(2, ops).await;
    assert_eq!(value(last_ok(&res)), [b'v'; 16]);
    let mut ops = walk_to(&export);
    ops.push(set(SETXATTR4_EITHER, "big", &[b'v'; 17]));
    let res = v.send_minor(2, ops).await;
    assert_eq!(res.status, Nfsstat4::XATTR2BIG, "{res:?}");

    // The pseudo root: no attributes.
    let res = v
        .send_minor(
            2,
            vec![
                NfsArgop4::Putrootfh(()),
                NfsArgop4::Getattr(Bitmap4::from_bits(&[num::XATTR_SUPPORT])),
            ],
        )
        .await;
    assert_eq!(attrs(last_ok(&res)).xattr_support, Some(false));
    for op in [
        get("a"),
        set(SETXATTR4_EITHER, "a", b"1"),
        list(0, 4096),
        remove("a"),
    ] {
        let res = v.send_minor(2, vec![NfsArgop4::Putrootfh(()), op]).await;
        assert_eq!(res.status, Nfsstat4::NOTSUPP, "{res:?}");
    }
    server.abort();
}

/// A file system without extended attributes: MemFs behind the trait's required methods only,
/// so the xattr methods are the trait's defaults (NotSupp, `xattr_support` false), as for a
/// backend that has none.
struct NoXattrs(MemFs);

mod no_xattrs {
    use super::NoXattrs;
    use bytes::Bytes;
    use sluice_server::backend::*;

    #[allow(clippy::result_large_err)]
    impl FileSystem for NoXattrs {
        fn root_handle(&self) -> FileHandle {
            self.0.root_handle()
        }
        fn export_id(&self) -> ExportId {
            self.0.export_id()
        }
        fn write_verifier(&self) -> [u8; 8] {
            self.0.write_verifier()
        }
        fn reset_write_verifier(&self) {
            self.0.reset_write_verifier()
        }
        fn getattr(&self, fh: &FileHandle) -> Result<Attr, FsError> {
            self.0.getattr(fh)
        }
        fn setattr(
            &self,
            c: &Caller,
            fh: &FileHandle,
            s: &SetAttr,
            g: Option<Time>,
        ) -> Res<Wcc, Wcc> {
            self.0.setattr(c, fh, s, g)
        }
        fn lookup(&self, c: &Caller, d: &FileHandle, n: &[u8]) -> Res<LookupOk, Option<Attr>> {
            self.0.lookup(c, d, n)
        }
        fn access(
            &self,
            c: &Caller,
            fh: &FileHandle,
            r: u32,
        ) -> Res<(u32, Option<Attr>), Option<Attr>> {
            self.0.access(c, fh, r)
        }
        fn readlink(&self, fh: &FileHandle) -> Res<(Vec<u8>, Option<Attr>), Option<Attr>> {
            self.0.readlink(fh)
        }
        fn read(
            &self,
            c: &Caller,
            fh: &FileHandle,
            o: u64,
            b: &mut [&mut [u8]],
        ) -> Res<ReadOk, Option<Attr>> {
            self.0.read(c, fh, o, b)
        }
        fn write(
            &self,
            c: &Caller,
            fh: &FileHandle,
            o: u64,
            d: &[Bytes],
            s: StableHow,
        ) -> Res<WriteOk, Wcc> {
            self.0.write(c, fh, o, d, s)
        }
        fn commit(&self, c: &Caller, fh: &FileHandle, o: u64, n: u32) -> Res<Wcc, Wcc> {
            self.0.commit(c, fh, o, n)
        }
        fn create(&self, c: &Caller, d: &FileHandle, n: &[u8], h: CreateHow) -> Res<CreateOk, Wcc> {
            self.0.create(c, d, n, h)
        }
        fn mkdir(&self, c: &Caller, d: &FileHandle, n: &[u8], s: &SetAttr) -> Res<CreateOk, Wcc> {
            self.0.mkdir(c, d, n, s)
        }
        fn symlink(
            &self,
            c: &Caller,
            d: &FileHandle,
            n: &[u8],
            t: &[u8],
            s: &SetAttr,
        ) -> Res<CreateOk, Wcc> {
            self.0.symlink(c, d, n, t, s)
        }
        fn mknod(
            &self,
            c: &Caller,
            d: &FileHandle,
            n: &[u8],
            f: FileType,
            s: &SetAttr,
            r: DeviceId,
        ) -> Res<CreateOk, Wcc> {
            self.0.mknod(c, d, n, f, s, r)
        }
        fn remove(&self, c: &Caller, d: &FileHandle, n: &[u8]) -> Res<Wcc, Wcc> {
            self.0.remove(c, d, n)
        }
        fn rmdir(&self, c: &Caller, d: &FileHandle, n: &[u8]) -> Res<Wcc, Wcc> {
            self.0.rmdir(c, d, n)
        }
        fn rename(
            &self,
            c: &Caller,
            fd: &FileHandle,
            fname: &[u8],
            td: &FileHandle,
            tname: &[u8],
        ) -> Res<RenameWcc, RenameWcc> {
            self.0.rename(c, fd, fname, td, tname)
        }
        fn link(
            &self,
            c: &Caller,
            fh: &FileHandle,
            d: &FileHandle,
            n: &[u8],
        ) -> Res<LinkRes, LinkRes> {
            self.0.link(c, fh, d, n)
        }
        fn readdir(
            &self,
            c: &Caller,
            d: &FileHandle,
            cookie: u64,
            verf: [u8; 8],
            plus: bool,
            visit: &mut dyn FnMut(DirEntry<'_>) -> bool,
        ) -> Res<ReaddirOk, Option<Attr>> {
            self.0.readdir(c, d, cookie, verf, plus, visit)
        }
        fn fsstat(&self, fh: &FileHandle) -> Res<FsStat, Option<Attr>> {
            self.0.fsstat(fh)
        }
        fn fsinfo(&self, fh: &FileHandle) -> Res<FsInfo, Option<Attr>> {
            self.0.fsinfo(fh)
        }
        fn pathconf(&self, fh: &FileHandle) -> Res<PathConf, Option<Attr>> {
            self.0.pathconf(fh)
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_system_without_xattrs_answers_notsupp() {
    let fs = Arc::new(NoXattrs(MemFs::new(MemFsConfig::default())));
    let entries = vec![ExportEntry {
        fs: fs.clone(),
        export: export_to_all(PathBuf::from("/plain"), rw_options()),
    }];
    let bound = sluice_server::bind_exports(rw(), entries)
        .await
        .expect("binds");
    let addr = bound.local_addr().unwrap();
    let server = tokio::spawn(sluice_server::run(bound));
    let mut v = V4::establish(Rpc::connect(addr).await, "plain", chan()).await;
    let export = PathBuf::from("/plain");
    let mut ops = walk_to(&export);
    ops.push(NfsArgop4::Getattr(Bitmap4::from_bits(&[
        num::SUPPORTED_ATTRS,
        num::XATTR_SUPPORT,
    ])));
    ops.push(NfsArgop4::Access(AccessArgs {
        access: ACCESS4_READ | ACCESS4_XAREAD | ACCESS4_XAWRITE | ACCESS4_XALIST,
    }));
    let res = v.send_minor(2, ops).await;
    assert_eq!(res.status, Nfsstat4::OK, "{res:?}");
    let n = res.results.len();
    let a = attrs(&res.results[n - 2]);
    assert_eq!(
        a.xattr_support,
        Some(false),
        "the attribute exists, and says no"
    );
    assert!(a.supported_attrs.unwrap().contains(num::XATTR_SUPPORT));
    let NfsResop4::Access(Res4::Ok(acc)) = &res.results[n - 1] else {
        panic!("{res:?}")
    };
    assert_eq!((acc.supported, acc.access), (ACCESS4_READ, ACCESS4_READ));
    for op in [
        get("a"),
        set(SETXATTR4_EITHER, "a", b"1"),
        list(0, 4096),
        remove("a"),
    ] {
        let mut ops = walk_to(&export);
        ops.push(op);
        let res = v.send_minor(2, ops).await;
        assert_eq!(res.status, Nfsstat4::NOTSUPP, "{res:?}");
    }
    server.abort();
}
