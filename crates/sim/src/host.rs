//! The real NFSv3 server, hosted in virtual time: `sluice_server`'s handlers, data path,
//! sequential table and write-behind over a [`MemFs`], driven without a runtime.
//!
//! # How async handlers run in a deterministic loop
//! [`Nfs3::handle`] is an `async fn`. Production runs it on tokio; here each call's future is
//! boxed into a task and polled by a tiny executor that belongs to the world's event loop:
//!
//! ```text
//!   start(id, call) ─► poll once ─► Ready: the reply, at once
//!                           │ Pending (waiting for write-behind: admission, a flush to land)
//!                           ▼
//!                      tasks[id] ◄── its waker sets the task's flag (a Notify fired)
//!                           │
//!   poll(now) ─► every flagged task, in id order ─► the replies that became ready
//! ```
//! The server is built with [`Hooks`] that make this possible and deterministic: the engine's
//! clock is a [`ManualClock`] set to the world's now before every step, and blocking backend
//! work runs inline ([`Blocking::Inline`]: MemFs never blocks), so neither `spawn_blocking` nor
//! any tokio timer is reached. The write-behind flusher is not a task: [`Host::flush_due`] is
//! its loop body ([`sluice_server::io::writebehind::WriteBehindDriver::flush_due`]), which the
//! world calls at the deadline it returned, so flush clustering, gap waits and the
//! visibility rules are the production ones. io_uring is off by the same hooks, and MemFs has no
//! file descriptors, so READs never splice: they go through the pooled-chunk path.
//!
//! One real clock read remains on the path: the chunk pool's `acquire_for` computes the
//! deadline of a wait for free chunks. The worlds size the pool so that the wait never happens,
//! so the reading cannot change a result (a wait would block the thread in real time).
//!
//! What is not here: the RPC service layer (duplicate request cache, procedure statistics) and
//! the socket driver. The worlds parse calls and frame replies themselves, as before.

use bytes::Bytes;
use sluice_engine::readcore::DataVersion;
use sluice_rpc::server::{self as rpcs, Credentials};
use sluice_server::backend::exports::{ClientMatch, ClientRule, Squash};
use sluice_server::backend::memfs::MemFsConfig;
use sluice_server::backend::{
    Caller, CreateHow, Cred, Export, ExportOptions, FileHandle, FileSystem, MemFs, SetAttr,
    StableHow,
};
use sluice_server::io::{Blocking, Clock, Engine, Hooks, IoConfig, ManualClock};
use sluice_server::nfs::{ExportEntry, Nfs3};
use sluice_server::splice::PipePool;
use sluice_server::stats::Stats;
use sluice_server::{Peer, Transport};
use sluice_xdr::nfs3::{Args3, NfsFh3};
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

/// The largest READ the hosted server answers in full (FSINFO rtmax): 1 MiB, Linux nfsd's
/// default and the server's.
pub const RTMAX_BYTES: u32 = 1024 * 1024;

/// The one file's name in the export's root.
const FILE_NAME: &[u8] = b"sluice-sim-file";

type Handler = Pin<Box<dyn Future<Output = Vec<Bytes>>>>;

struct Task {
    fut: Handler,
    woken: Arc<Flag>,
}

/// A task's waker: sets the flag the executor checks.
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The hosted server: one export holding one regular file.
pub struct Host {
    pub mem: Arc<MemFs>,
    /// The file's handle, as the server hands it out.
    pub file: FileHandle,
    nfs: Arc<Nfs3>,
    /// Counters, kept across restarts (a restart makes a new engine, not new statistics).
    stats: Arc<Stats>,
    clock: Arc<ManualClock>,
    io_config: IoConfig,
    peer: Peer,
    tasks: BTreeMap<u64, Task>,
}

impl Host {
    /// A server whose export holds one file with `content`, made durable (committed) if
    /// `durable` (else only what READs see: half the memory, for a world that never crashes).
    /// `io_config` is the engine's (the pool may need to be larger than production's when the
    /// simulated client keeps READ buffers in its cache).
    pub fn new(
        content: &[Bytes],
        durable: bool,
        epoch: Instant,
        transport: Transport,
        io_config: IoConfig,
    ) -> Host {
        let len: u64 = content.iter().map(|b| b.len() as u64).sum();
        let mem = Arc::new(MemFs::new(MemFsConfig {
            // room for the file and a copy of it (MemFs counts current contents)
            bytes_max: (2 * len).max(MemFsConfig::default().bytes_max),
            ..MemFsConfig::default()
        }));
        let root_caller = Caller::new(&Cred::new(0, 0), &export_options());
        let created = mem
            .create(
                &root_caller,
                &mem.root_handle(),
                FILE_NAME,
                CreateHow::Unchecked(SetAttr {
                    // written by whoever calls: the worlds' clients send AUTH_NONE
                    mode: Some(0o666),
                    ..SetAttr::default()
                }),
            )
            .unwrap_or_else(|(e, _)| panic!("creating the simulated file: {e:?}"));
        let file = created.fh;
        // One backend write per piece bounds the iovec; FILE_SYNC makes it durable.
        let stable = if durable {
            StableHow::FileSync
        } else {
            StableHow::Unstable
        };
        let mut offset = 0;
        for piece in content {
            mem.write(
                &root_caller,
                &file,
                offset,
                std::slice::from_ref(piece),
                stable,
            )
            .unwrap_or_else(|(e, _)| panic!("writing the simulated file: {e:?}"));
            offset += piece.len() as u64;
        }
        let clock = ManualClock::new(epoch);
        let stats = Arc::new(Stats::default());
        let nfs = server(&mem, &clock, &io_config, &stats);
        Host {
            mem,
            file,
            nfs,
            stats,
            clock,
            io_config,
            peer: Peer {
                addr: SocketAddr::from(([127, 0, 0, 1], 700)),
                conn_id: 1,
                transport,
                back_channel: None,
            },
            tasks: BTreeMap::new(),
        }
    }

    /// The file's handle in NFSv3 form.
    pub fn file_handle(&self) -> NfsFh3 {
        NfsFh3(self.file.to_bytes())
    }

    /// The file's data version as a client learns it when it opens the file (size, mtime and
    /// ctime, the way sluice-client maps NFSv3 attributes).
    pub fn file_version(&self) -> DataVersion {
        let a = self
            .mem
            .getattr(&self.file)
            .unwrap_or_else(|e| panic!("the simulated file has no attributes: {e:?}"));
        let ns = |t: sluice_server::backend::Time| {
            (t.seconds.max(0) as u64) * 1_000_000_000 + u64::from(t.nseconds)
        };
        DataVersion {
            size: a.size,
            mtime_ns: ns(a.mtime),
            change: ns(a.ctime),
        }
    }

    /// The server's counters (procedures, engine: readahead, backend writes, dirty bytes).
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The server process restarts: its engine (held writes, sequential table, pool) is new and
    /// every call in progress is gone. The caller crashes the MemFs (what was not committed is
    /// lost, the verifier changes) when that is the story.
    pub fn restart(&mut self) {
        self.tasks.clear();
        self.nfs = server(&self.mem, &self.clock, &self.io_config, &self.stats);
    }

    /// Starts the handler of call `id` (`xid`, credentials, decoded arguments) and polls it
    /// once: its reply message if it finished, else `None` and it waits for [`Host::poll`].
    pub fn start(
        &mut self,
        now: Instant,
        id: u64,
        xid: u32,
        cred: Credentials,
        args: Args3,
    ) -> Option<Vec<Bytes>> {
        self.clock.set(now);
        let nfs = self.nfs.clone();
        let peer = self.peer.clone();
        let fut: Handler = Box::pin(async move {
            let mut w = rpcs::success_header(xid);
            let (_, spliced) = nfs.handle(&peer, &cred, args, &mut w).await;
            assert!(spliced.is_none(), "MemFs has no descriptors to splice from");
            w.into_segments()
        });
        let task = Task {
            fut,
            woken: Arc::new(Flag(AtomicBool::new(false))),
        };
        let prev = self.tasks.insert(id, task);
        assert!(prev.is_none(), "task {id} started twice");
        self.poll_one(id)
    }

    /// Polls every task whose waker fired, in id order, until none is left flagged; returns
    /// the replies that became ready.
    pub fn poll(&mut self, now: Instant) -> Vec<(u64, Vec<Bytes>)> {
        self.clock.set(now);
        let mut done = Vec::new();
        loop {
            let ready: Vec<u64> = self
                .tasks
                .iter()
                .filter(|(_, t)| t.woken.0.swap(false, Ordering::Relaxed))
                .map(|(&id, _)| id)
                .collect();
            if ready.is_empty() {
                return done;
            }
            for id in ready {
                if let Some(reply) = self.poll_one(id) {
                    done.push((id, reply));
                }
            }
        }
    }

    /// Calls whose handler is waiting.
    pub fn waiting(&self) -> usize {
        self.tasks.len()
    }

    /// The write-behind flusher's step at `now`: issues the flushes due (they run inline) and
    /// returns when it wants the next step.
    pub fn flush_due(&mut self, now: Instant) -> Option<Instant> {
        self.clock.set(now);
        self.nfs.io.wb.flush_due(now)
    }

    fn poll_one(&mut self, id: u64) -> Option<Vec<Bytes>> {
        let task = self.tasks.get_mut(&id)?;
        let waker = Waker::from(task.woken.clone());
        match task.fut.as_mut().poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(reply) => {
                self.tasks.remove(&id);
                Some(reply)
            }
            Poll::Pending => None,
        }
    }
}

/// A writable export to everyone, root not squashed, any port (the options the wire tests use).
fn export_options() -> ExportOptions {
    ExportOptions {
        read_only: false,
        squash: Squash::None,
        secure: false,
        ..ExportOptions::default()
    }
}

fn server(
    mem: &Arc<MemFs>,
    clock: &Arc<ManualClock>,
    io_config: &IoConfig,
    stats: &Arc<Stats>,
) -> Arc<Nfs3> {
    let hooks = Hooks {
        clock: Clock::Manual(clock.clone()),
        blocking: Blocking::Inline,
    };
    let io = Engine::with_hooks(io_config.clone(), RTMAX_BYTES, stats.clone(), hooks);
    Arc::new(Nfs3 {
        exports: Arc::new(vec![ExportEntry {
            fs: mem.clone(),
            export: Export {
                path: PathBuf::from("/sim"),
                clients: vec![ClientRule {
                    client: ClientMatch::Any,
                    options: export_options(),
                }],
            },
        }]),
        io,
        // no pipes: nothing to splice from MemFs anyway
        pipes: PipePool::new(0, RTMAX_BYTES as usize, stats.clone()),
        stats: stats.clone(),
        // no NFSv4 service beside it: nothing delegated
        recall: None,
    })
}

#[cfg(test)]
// The one clock read of each test: the epoch that virtual time starts from.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use sluice_xdr::nfs3::{
        self, CommitArgs, NfsResult, ReadArgs, Res3, StableHow as Stable3, WriteArgs,
    };
    use sluice_xdr::{Payload, Reader};
    use std::sync::atomic::Ordering::Relaxed;
    use std::time::Duration;

    const FILE_BYTES: usize = 1 << 20;
    const IO_BYTES: usize = 64 * 1024;
    /// `rpcs::success_header`'s length with an AUTH_NONE verifier: xid, message type, reply
    /// status, verifier flavor and length, accept status.
    const SUCCESS_HEADER_BYTES: usize = 24;

    fn results(proc_: u32, reply: &[Bytes]) -> Res3 {
        let mut r = Reader::new(reply);
        r.skip(SUCCESS_HEADER_BYTES).expect("a whole header");
        nfs3::decode_res(proc_, &mut r).expect("results decode")
    }

    fn host(epoch: Instant) -> Host {
        Host::new(
            &[Bytes::from(vec![0u8; FILE_BYTES])],
            true,
            epoch,
            Transport::Tcp,
            IoConfig::default(),
        )
    }

    /// The simulator really goes through write-behind: sixteen sequential UNSTABLE WRITEs are
    /// acknowledged from memory, nothing reaches the backend until the flusher's deadline, and
    /// then they land as one clustered backend write, which COMMIT makes durable.
    #[test]
    fn unstable_writes_are_held_then_flushed_as_one_cluster() {
        let epoch = Instant::now();
        let mut h = host(epoch);
        let fh = h.file_handle();
        let data: Vec<u8> = (0..FILE_BYTES).map(|i| (i % 251) as u8).collect();
        let mut now = epoch;
        for (i, piece) in data.chunks(IO_BYTES).enumerate() {
            let args = Args3::Write(WriteArgs {
                file: fh.clone(),
                offset: (i * IO_BYTES) as u64,
                count: piece.len() as u32,
                stable: Stable3::UNSTABLE,
                data: Payload::from_chunks(vec![Bytes::copy_from_slice(piece)]),
            });
            let reply = h
                .start(now, i as u64, i as u32, Credentials::None, args)
                .expect("a WRITE that fits under the dirty limit answers at once");
            match results(nfs3::proc_::WRITE, &reply) {
                Res3::Write(NfsResult::Ok(ok)) => assert_eq!(ok.count as usize, piece.len()),
                other => panic!("WRITE {i}: {other:?}"),
            }
            now += Duration::from_micros(100);
        }
        let backend_writes = |h: &Host| h.stats().backend_write_bytes.count.load(Relaxed);
        assert_eq!(backend_writes(&h), 0, "held, not written");
        assert_eq!(
            h.stats().engine.dirty_bytes.load(Relaxed),
            FILE_BYTES as u64
        );
        // The flusher waits for the run to grow (the gap wait), then flushes it whole.
        let mut steps = 0;
        while let Some(at) = h.flush_due(now) {
            assert!(at > now, "a deadline in the future");
            now = at;
            steps += 1;
            assert!(steps < 100, "the flusher keeps asking for more steps");
        }
        assert_eq!(backend_writes(&h), 1, "one clustered backend write");
        assert_eq!(
            h.stats().backend_write_bytes.bytes.load(Relaxed),
            FILE_BYTES as u64
        );
        assert_ne!(
            h.mem.durable_data(&h.file).unwrap(),
            data,
            "not yet committed"
        );
        let commit = Args3::Commit(CommitArgs {
            file: fh,
            offset: 0,
            count: 0,
        });
        let reply = h.start(now, 100, 100, Credentials::None, commit).unwrap();
        assert!(matches!(
            results(nfs3::proc_::COMMIT, &reply),
            Res3::Commit(NfsResult::Ok(_))
        ));
        assert_eq!(h.mem.durable_data(&h.file).unwrap(), data);
    }

    /// ... and through the sequential table: a sequential reader earns readahead hints.
    #[test]
    fn sequential_reads_earn_readahead() {
        let epoch = Instant::now();
        let mut h = host(epoch);
        let fh = h.file_handle();
        for i in 0..FILE_BYTES / IO_BYTES {
            let args = Args3::Read(ReadArgs {
                file: fh.clone(),
                offset: (i * IO_BYTES) as u64,
                count: IO_BYTES as u32,
            });
            let reply = h
                .start(epoch, i as u64, i as u32, Credentials::None, args)
                .unwrap();
            match results(nfs3::proc_::READ, &reply) {
                Res3::Read(NfsResult::Ok(ok)) => {
                    assert_eq!(ok.data.to_vec(), vec![0u8; IO_BYTES]);
                }
                other => panic!("READ {i}: {other:?}"),
            }
        }
        let e = &h.stats().engine;
        assert!(
            e.seq_hits.load(Relaxed) > 0,
            "the table saw a sequential reader"
        );
        assert!(
            e.readahead_bytes.load(Relaxed) > 0,
            "and asked for readahead"
        );
    }

    /// The executor's other half: a WRITE over the dirty limit waits in write-behind's
    /// admission (its future is pending), and the flush that makes room wakes it through its
    /// waker; then it answers.
    #[test]
    fn a_write_waiting_for_admission_is_woken_by_the_flush_that_makes_room() {
        let epoch = Instant::now();
        let mut io = IoConfig::default();
        io.write_behind.dirty_bytes_limit = IO_BYTES as u64;
        let mut h = Host::new(
            &[Bytes::from(vec![0u8; FILE_BYTES])],
            true,
            epoch,
            Transport::Tcp,
            io,
        );
        let fh = h.file_handle();
        let write = |i: usize| {
            Args3::Write(WriteArgs {
                file: fh.clone(),
                offset: (i * IO_BYTES) as u64,
                count: IO_BYTES as u32,
                stable: Stable3::UNSTABLE,
                data: Payload::from_chunks(vec![Bytes::from(vec![i as u8 + 1; IO_BYTES])]),
            })
        };
        assert!(h.start(epoch, 0, 0, Credentials::None, write(0)).is_some());
        assert!(
            h.start(epoch, 1, 1, Credentials::None, write(1)).is_none(),
            "over the dirty limit: waits"
        );
        assert_eq!(h.waiting(), 1);
        assert!(h.poll(epoch).is_empty(), "nothing woke it yet");
        let mut now = epoch;
        let done = loop {
            let next = h.flush_due(now);
            let done = h.poll(now);
            if !done.is_empty() {
                break done;
            }
            now = next.expect("the flusher has work while a writer waits");
        };
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].0, 1);
        assert!(matches!(
            results(nfs3::proc_::WRITE, &done[0].1),
            Res3::Write(NfsResult::Ok(_))
        ));
        assert_eq!(h.waiting(), 0);
    }
}
