//! The NFSv3 server over the in-memory file system: the same handlers, data path and
//! write-behind as in production, with `MemFs` (and its injected faults) underneath instead of a
//! directory. A smoke test that the server depends on the `FileSystem` trait only.

#[macro_use]
mod support;

use bytes::Bytes;
use sluice_server::backend::memfs::{Fault, FaultEffect, MemFsConfig, Op};
use sluice_server::backend::{FileSystem, FsError, MemFs};
use sluice_server::nfs::ExportEntry;
use sluice_xdr::nfs3::*;
use sluice_xdr::Payload;
use std::path::PathBuf;
use std::sync::Arc;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_over_memfs_writes_reads_commits_and_sees_faults_and_crashes() {
    let mem = Arc::new(MemFs::new(MemFsConfig::default()));
    let entries = vec![ExportEntry {
        fs: mem.clone(),
        export: export_to_all(PathBuf::from("/mem"), rw_options()),
    }];
    let bound = sluice_server::bind_exports(rw(), entries)
        .await
        .expect("binds");
    let addr = bound.local_addr().unwrap();
    let server = tokio::spawn(sluice_server::run(bound));
    let mut c = Rpc::connect(addr).await;
    let root = NfsFh3(mem.root_handle().to_bytes());

    let created = ok(op!(
        c,
        Create,
        CreateArgs {
            where_: dirop(&root, "f"),
            how: CreateHow::Unchecked(Sattr3 {
                mode: Some(0o644),
                ..Default::default()
            }),
        }
    ));
    let fh = created.obj.expect("CREATE returns the handle");
    let write = |data: &'static [u8]| WriteArgs {
        file: fh.clone(),
        offset: 0,
        count: data.len() as u32,
        stable: StableHow::UNSTABLE,
        data: Payload::from(Bytes::from_static(data)),
    };
    let w = ok(op!(c, Write, write(b"hello world")));
    assert_eq!(w.count, 11);
    let read = ReadArgs {
        file: fh.clone(),
        offset: 0,
        count: 100,
    };
    let r = ok(op!(c, Read, read.clone()));
    assert_eq!(r.data.to_vec(), b"hello world");
    assert!(r.eof);
    let commit = CommitArgs {
        file: fh.clone(),
        offset: 0,
        count: 0,
    };
    let first = ok(op!(c, Commit, commit.clone()));
    assert_eq!(first.verf, w.verf);

    // Committed data survives a crash; the verifier changes, which the next WRITE shows.
    mem.crash();
    let r = ok(op!(c, Read, read.clone()));
    assert_eq!(r.data.to_vec(), b"hello world");
    let w2 = ok(op!(c, Write, write(b"HELLO")));
    assert_ne!(w2.verf, first.verf);
    assert_eq!(ok(op!(c, Commit, commit.clone())).verf, w2.verf);

    // An injected EIO reaches the client as NFS3ERR_IO through the data path.
    mem.inject(Fault::new(Op::Read, FaultEffect::Fail(FsError::Io)).times(1));
    assert_eq!(op!(c, Read, read.clone()).status(), Nfsstat3::IO);
    let r = ok(op!(c, Read, read));
    assert_eq!(r.data.to_vec(), b"HELLO world");
    server.abort();
}
