//! The client against an in-process fake NFS server that misbehaves on purpose:
//! - "a verifier change makes the client resend unstable data": the server restarts (loses
//!   everything not committed, changes its write verifier) in the middle of a file;
//! - "a broken connection makes the client reconnect and resend with the same XIDs";
//! - "the lock manager is the NFS server's own, not the one another server's portmapper
//!   names".
//!
//! The fake serves one export with one file, with a memory image (what UNSTABLE WRITEs
//! change) and a disk image (what COMMIT and FILE_SYNC make durable).

use bytes::{Bytes, BytesMut};
use sluice_client::{Client, ClientOptions};
use sluice_rpc::record::{frame, RecordDecoder};
use sluice_rpc::server::{parse_call, success_header, CallParse};
use sluice_xdr::nfs3::{self, *};
use sluice_xdr::{mount3, nlm, portmap, Pack, Payload, Unpack, Writer};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const ROOT: &[u8] = b"root-handle";
const FILE: &[u8] = b"file-handle";

#[derive(Default)]
struct Fake {
    memory: Vec<u8>,
    disk: Vec<u8>,
    exists: bool,
    verf: u64,
    writes: usize,
    /// Restart (lose the memory image, change the verifier) before this WRITE (1-based).
    restart_before_write: Option<usize>,
    /// Close the connection instead of answering this WRITE (1-based), once.
    drop_on_write: Option<usize>,
    /// How often each XID arrived.
    xids: HashMap<u32, u32>,
    commits: usize,
    connections: usize,
    /// Read NFSv4 calls and never answer them (a server that silently drops v4).
    silent_v4: bool,
    /// NFSv4 calls seen (and dropped when `silent_v4`).
    v4_calls: usize,
    /// WRITEs and COMMITs in the order they arrived.
    arrivals: Vec<Arrival>,
    /// What PORTMAP GETPORT of NLM v4 answers (0: not registered).
    nlm_port: u32,
    /// The status every NLM call is answered with.
    nlm_stat: u32,
    /// NLM calls answered.
    nlm_calls: usize,
}

/// One WRITE or COMMIT as the fake server saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arrival {
    /// A WRITE at this offset (a retransmission of the same XID is not logged again).
    Write(u64),
    Commit,
}

type Shared = Arc<Mutex<Fake>>;

async fn serve(fake: Shared) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            fake.lock().unwrap().connections += 1;
            tokio::spawn(connection(s, fake.clone()));
        }
    });
    port
}

async fn connection(mut s: TcpStream, fake: Shared) {
    let mut dec = RecordDecoder::default();
    let mut buf = BytesMut::with_capacity(1 << 20);
    loop {
        buf.reserve(256 << 10);
        match s.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => dec.push(buf.split().freeze()),
        }
        while let Ok(Some(rec)) = dec.next_record() {
            if let CallParse::Call(call) = parse_call(&rec) {
                if call.prog() == nfs3::PROGRAM && call.vers() == 4 {
                    let mut f = fake.lock().unwrap();
                    f.v4_calls += 1;
                    if f.silent_v4 {
                        continue;
                    }
                }
            }
            let Some(reply) = handle(&rec, &fake) else {
                return; // drop the connection without answering
            };
            for seg in frame(reply, usize::MAX) {
                if s.write_all(&seg).await.is_err() {
                    return;
                }
            }
        }
    }
}

fn attr(f: &Fake, dir: bool) -> Fattr3 {
    Fattr3 {
        ftype: if dir { Ftype3::DIR } else { Ftype3::REG },
        mode: if dir { 0o755 } else { 0o644 },
        nlink: 1,
        size: if dir { 4096 } else { f.memory.len() as u64 },
        fileid: if dir { 1 } else { 2 },
        ..Fattr3::default()
    }
}

fn handle(rec: &[Bytes], fake: &Shared) -> Option<Vec<Bytes>> {
    let CallParse::Call(call) = parse_call(rec) else {
        panic!("fake server got a bad call")
    };
    let mut f = fake.lock().unwrap();
    *f.xids.entry(call.xid).or_default() += 1;
    let mut r = call.args(rec);
    let mut w: Writer = success_header(call.xid);
    let verf = f.verf.to_be_bytes();
    match (call.prog(), call.proc_()) {
        (portmap::PROGRAM, portmap::proc_::GETPORT) => {
            let m = portmap::Mapping::unpack(&mut r).unwrap();
            let port = if m.prog == nlm::PROGRAM && m.vers == nlm::VERSION {
                f.nlm_port
            } else {
                0
            };
            port.pack(&mut w)
        }
        (nlm::PROGRAM, nlm::proc_::LOCK) => {
            let a = nlm::Nlm4LockArgs::unpack(&mut r).unwrap();
            f.nlm_calls += 1;
            nlm::Nlm4Res {
                cookie: a.cookie,
                stat: nlm::Nlm4Stats(f.nlm_stat),
            }
            .pack(&mut w)
        }
        (mount3::PROGRAM, mount3::proc_::EXPORT) => mount3::Exports(vec![]).pack(&mut w),
        (mount3::PROGRAM, mount3::proc_::MNT) => mount3::MntRes::Ok(mount3::MntResOk {
            fhandle: NfsFh3(Bytes::from_static(ROOT)),
            auth_flavors: vec![1],
        })
        .pack(&mut w),
        (nfs3::PROGRAM, proc_::FSINFO) => FsinfoRes::Ok(FsinfoResOk {
            rtmax: 64 << 10,
            rtpref: 64 << 10,
            rtmult: 4096,
            wtmax: 64 << 10,
            wtpref: 64 << 10,
            wtmult: 4096,
            dtpref: 8192,
            maxfilesize: u64::MAX,
            ..FsinfoResOk::default()
        })
        .pack(&mut w),
        (nfs3::PROGRAM, proc_::GETATTR) => {
            let a = GetattrArgs::unpack(&mut r).unwrap();
            let dir = a.object.0.as_ref() == ROOT;
            GetattrRes::Ok(GetattrResOk {
                obj_attributes: attr(&f, dir),
            })
            .pack(&mut w)
        }
        (nfs3::PROGRAM, proc_::LOOKUP) => {
            let a = LookupArgs::unpack(&mut r).unwrap();
            let res: LookupRes = if f.exists && a.what.name.as_ref() == b"f" {
                NfsResult::Ok(LookupResOk {
                    object: NfsFh3(Bytes::from_static(FILE)),
                    obj_attributes: Some(attr(&f, false)),
                    dir_attributes: None,
                })
            } else {
                NfsResult::Err(Nfsstat3::NOENT, LookupResFail::default())
            };
            res.pack(&mut w)
        }
        (nfs3::PROGRAM, proc_::CREATE) => {
            f.exists = true;
            f.memory.clear();
            f.disk.clear();
            CreateRes::Ok(CreateResOk {
                obj: Some(NfsFh3(Bytes::from_static(FILE))),
                obj_attributes: Some(attr(&f, false)),
                dir_wcc: WccData::default(),
            })
            .pack(&mut w)
        }
        (nfs3::PROGRAM, proc_::WRITE) => {
            let a = WriteArgs::unpack(&mut r).unwrap();
            if f.xids[&call.xid] == 1 {
                f.writes += 1;
                f.arrivals.push(Arrival::Write(a.offset));
                if f.drop_on_write == Some(f.writes) {
                    f.drop_on_write = None;
                    return None;
                }
                if f.restart_before_write == Some(f.writes) {
                    f.memory = f.disk.clone();
                    f.verf += 1;
                }
            }
            let data = a.data.to_vec();
            let end = a.offset as usize + data.len();
            if f.memory.len() < end {
                f.memory.resize(end, 0);
            }
            f.memory[a.offset as usize..end].copy_from_slice(&data);
            if a.stable == StableHow::FILE_SYNC {
                f.disk = f.memory.clone();
            }
            WriteRes::Ok(WriteResOk {
                file_wcc: WccData::default(),
                count: data.len() as u32,
                committed: a.stable,
                verf: f.verf.to_be_bytes(),
            })
            .pack(&mut w)
        }
        (nfs3::PROGRAM, proc_::COMMIT) => {
            f.commits += 1;
            f.arrivals.push(Arrival::Commit);
            f.disk = f.memory.clone();
            CommitRes::Ok(CommitResOk {
                file_wcc: WccData::default(),
                verf,
            })
            .pack(&mut w)
        }
        (nfs3::PROGRAM, proc_::READ) => {
            let a = ReadArgs::unpack(&mut r).unwrap();
            let start = (a.offset as usize).min(f.memory.len());
            let end = (start + a.count as usize).min(f.memory.len());
            ReadRes::Ok(ReadResOk {
                file_attributes: Some(attr(&f, false)),
                count: (end - start) as u32,
                eof: end == f.memory.len(),
                data: Payload::from(f.memory[start..end].to_vec()),
            })
            .pack(&mut w)
        }
        other => panic!("fake server: unexpected call {other:?}"),
    }
    Some(w.into_segments())
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 253) as u8).collect()
}

async fn client_for(fake: &Shared) -> Client {
    let port = serve(fake.clone()).await;
    let url = format!("nfs://127.0.0.1/export?nfsport={port}&mountport={port}");
    Client::connect(url.as_str(), ClientOptions::default())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_verifier_change_makes_the_client_resend_unstable_data() {
    let fake = Shared::default();
    // 1 MiB in 64 KiB WRITEs = 16; the server "reboots" before the 10th, losing 9 WRITEs.
    fake.lock().unwrap().restart_before_write = Some(10);
    let c = client_for(&fake).await;
    assert_eq!(c.wsize(), 64 << 10);
    let data = pattern(1 << 20);
    let f = c.create_file("/f", 0o644).await.unwrap();
    let mut w = f.writer();
    w.write(&data).await.unwrap();
    let n = w.finish().await.unwrap();
    assert_eq!(n, data.len() as u64);
    {
        let st = fake.lock().unwrap();
        assert!(
            st.disk == data,
            "the disk image lost data the client had been told was unstable"
        );
        assert!(st.commits >= 2, "a second COMMIT confirms the resent data");
        assert_eq!(
            st.writes,
            16 + 9,
            "exactly the 9 WRITEs answered under the old verifier were resent"
        );
    }
    assert_eq!(c.stats().get("NFS3", "WRITE").unwrap().calls, 25);
    // And the data reads back.
    let f = c.open("/f").await.unwrap();
    assert_eq!(f.read_all().await.unwrap(), data);
}

/// COMMITs go out while the file is still being written (every half of `commit_bytes_max`),
/// and a server restart in the middle loses only what no COMMIT had confirmed: the client
/// resends at most `commit_bytes_max` plus its WRITEs in flight, and the file is complete.
///
/// Checked on the order of the calls at the server, which the client decides, not on how many
/// COMMITs happened to be answered by some moment: the writer is one task on one connection
/// (nconnect fixed at 1) with its window pinned at 4 WRITEs (4 slots, `write_depth` 4), so
/// each WRITE after the 4th is sent once the oldest is answered, and a COMMIT follows every
/// second answered WRITE (128 KiB, half of `commit_bytes_max`), after the previous COMMIT
/// returned. The arrivals are then the same in every run, however the threads are scheduled.
#[tokio::test]
async fn commits_overlap_with_writing_and_a_restart_costs_only_the_uncommitted_part() {
    const WSIZE: u64 = 64 << 10;
    const WINDOW_WRITES: usize = 4;
    let fake = Shared::default();
    // 2 MiB in 64 KiB WRITEs = 32; the server "reboots" before the 20th.
    fake.lock().unwrap().restart_before_write = Some(20);
    let port = serve(fake.clone()).await;
    let url = format!("nfs://127.0.0.1/export?nfsport={port}&mountport={port}");
    let mut opts = ClientOptions {
        commit_bytes_max: 256 << 10,
        write_depth: WINDOW_WRITES,
        ..ClientOptions::default()
    };
    opts.rpc.table.max_in_flight = WINDOW_WRITES;
    opts.fixed_nconnect(1);
    let c = Client::connect(url.as_str(), opts).await.unwrap();
    assert_eq!(u64::from(c.wsize()), WSIZE);
    let data = pattern(2 << 20);
    let f = c.create_file("/f", 0o644).await.unwrap();
    let mut w = f.writer();
    w.write(&data).await.unwrap();
    let n = w.finish().await.unwrap();
    assert_eq!(n, data.len() as u64);
    let st = fake.lock().unwrap();
    assert_eq!(st.verf, 1, "one restart");
    assert!(st.disk == data, "the disk image lost data");
    // COMMITs interleave with the WRITEs: one after every second WRITE answered once the
    // window is full, 13 before the file's last WRITE is sent (a writer that committed only
    // at commit_bytes_max would send 7, one that committed only at finish() none).
    let last = data.len() as u64 - WSIZE;
    let last_at = st
        .arrivals
        .iter()
        .position(|a| *a == Arrival::Write(last))
        .expect("the last WRITE arrived");
    let commits_while_writing = st.arrivals[..last_at]
        .iter()
        .filter(|a| **a == Arrival::Commit)
        .count();
    assert!(
        commits_while_writing >= 12,
        "only {commits_while_writing} COMMITs before the last WRITE: {:?}",
        st.arrivals
    );
    // No stretch of the file goes by without a COMMIT: between two COMMITs at most the
    // half of commit_bytes_max that triggers one, plus the window, of new WRITEs.
    let mut writes_since_commit = 0;
    for a in &st.arrivals[..last_at] {
        match a {
            Arrival::Commit => writes_since_commit = 0,
            Arrival::Write(_) => writes_since_commit += 1,
        }
        assert!(
            writes_since_commit <= 2 + WINDOW_WRITES,
            "{writes_since_commit} WRITEs in a row without a COMMIT: {:?}",
            st.arrivals
        );
    }
    // Lost: at most 256 KiB (4 WRITEs) not yet confirmed plus the window answered and not
    // yet processed.
    let resent = st.writes - 32;
    assert!(
        (1..=4 + WINDOW_WRITES).contains(&resent),
        "{resent} WRITEs resent after the restart: {:?}",
        st.arrivals
    );
}

#[tokio::test]
async fn a_single_small_write_is_file_sync_and_needs_no_commit() {
    let fake = Shared::default();
    let c = client_for(&fake).await;
    let f = c.create_file("/f", 0o644).await.unwrap();
    let mut w = f.writer();
    w.write(b"hello").await.unwrap();
    w.finish().await.unwrap();
    let st = fake.lock().unwrap();
    assert_eq!(st.disk, b"hello");
    assert_eq!(st.commits, 0);
}

#[tokio::test]
async fn a_broken_connection_is_reconnected_and_calls_resent_with_their_xids() {
    let fake = Shared::default();
    fake.lock().unwrap().drop_on_write = Some(5);
    let c = client_for(&fake).await;
    let data = pattern((1 << 20) + 1);
    let f = c.create_file("/f", 0o644).await.unwrap();
    let mut w = f.writer();
    w.write(&data).await.unwrap();
    w.finish().await.unwrap();
    {
        let st = fake.lock().unwrap();
        assert!(st.disk == data);
        assert_eq!(st.connections, 2, "one reconnect");
        let resent: Vec<u32> = st
            .xids
            .iter()
            .filter(|(_, &n)| n > 1)
            .map(|(&x, _)| x)
            .collect();
        assert!(
            !resent.is_empty(),
            "the unanswered WRITE came again with its XID"
        );
        assert!(
            resent.len() <= 4,
            "only calls outstanding at the break are resent: {resent:?}"
        );
    }
    assert_eq!(c.transport_stats().reconnects, 1);
    assert!(c.stats().get("NFS3", "WRITE").unwrap().retransmits >= 1);
}

/// A server that reads NFSv4 calls and never answers them must not hang a URL without a
/// version: the v4 probe gives up after its timeout, v3 is used, and the reason is kept for
/// `--stats`.
#[tokio::test]
async fn a_server_silent_to_nfsv4_makes_a_url_without_version_fall_back_to_v3() {
    let fake = Shared::default();
    {
        let mut f = fake.lock().unwrap();
        f.exists = true;
        f.memory = pattern(10);
        f.silent_v4 = true;
    }
    let port = serve(fake.clone()).await;
    let url = sluice_client::NfsUrl::parse(&format!(
        "nfs://127.0.0.1/export?nfsport={port}&mountport={port}"
    ))
    .unwrap();
    let mut options = ClientOptions::default();
    options.rpc.privileged_port = false;
    // Short, to keep the test quick; the default is namespace::V4_PROBE_TIMEOUT.
    options.v4_probe_timeout = std::time::Duration::from_millis(300);
    let ns = sluice_client::connect(&url, &options).await.unwrap();
    assert_eq!(ns.version(), sluice_client::ProtoVersion::V3);
    assert!(fake.lock().unwrap().v4_calls >= 1, "NFSv4 was tried first");
    let note = ns.version_note().expect("the fallback says why");
    assert!(note.contains("no answer to the NFSv4 probe"), "{note}");
    let (_, attr) = ns.lookup_path("f").await.unwrap();
    assert_eq!(attr.size, 10);
}

/// The NFS server is on its own port (`?nfsport=`) and the portmapper of its address belongs
/// to another server (a kernel NFS server beside it, another sluice holding port 111; here
/// the URL's port names it): that portmapper names its own lock manager, which knows none of
/// this server's handles. The client asks the NFS server itself first, on its connection, and
/// takes its locks there; the other lock manager gets no call.
#[tokio::test]
async fn locks_go_to_the_nfs_servers_own_lock_manager_not_a_neighbours() {
    let fake = Shared::default();
    let port = serve(fake.clone()).await;
    fake.lock().unwrap().nlm_port = u32::from(port);
    let decoy = Shared::default();
    let decoy_port = serve(decoy.clone()).await;
    {
        let mut d = decoy.lock().unwrap();
        d.nlm_port = u32::from(decoy_port);
        d.nlm_stat = nlm::Nlm4Stats::STALE_FH.0;
    }
    let url = format!("nfs://127.0.0.1:{decoy_port}/export?nfsport={port}&mountport={port}");
    let c = Client::connect(url.as_str(), ClientOptions::default())
        .await
        .unwrap();
    let f = c.create_file("/f", 0o644).await.unwrap();
    let got = c.nlm_lock(f.fh(), b"owner", true, 0, 10).await.unwrap();
    assert!(got.is_none(), "granted by the server's own lock manager");
    assert_eq!(fake.lock().unwrap().nlm_calls, 1);
    assert_eq!(
        decoy.lock().unwrap().nlm_calls,
        0,
        "the neighbour's got nothing"
    );
}
