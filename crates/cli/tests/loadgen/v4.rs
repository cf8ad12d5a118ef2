//! One NFSv4.1 client of the load run: a [`Client`] with its own session (and back channel)
//! working in its own directory as the NFSv3 worker does, plus reads of the other clients'
//! files, so that read delegations are granted to one client and recalled when another
//! changes the file.
//!
//! # Sharing, and how the model stays exact
//! Every file is a [`SharedFile`]: its handle and its contents, behind an async read-write
//! lock of the test (not of NFS). Only a file's owner (the client whose directory holds it)
//! changes it, and it holds the write guard from its OPEN to its CLOSE (or through the
//! RENAME or REMOVE); any client that reads it holds a read guard from its OPEN through its
//! READs. So no read overlaps a change, and what a READ must return is the model's bytes:
//! no torn reads to allow for, no timing in any check. The guards order the test's calls,
//! never the server's replies: a reader keeps its open (and the read delegation that came with
//! it) after it lets go of the guard, so the owner's next OPEN for writing, RENAME or REMOVE
//! of the file finds another client's delegation, and the server recalls it (CB_RECALL) and
//! answers NFS4ERR_DELAY until the holder's library returns it, which it does on its own task.
//! The owner's call is resent by its library after the DELAY and must then succeed.
//!
//! ```text
//!   owner (client 3)                    server                     reader (client 17)
//!                                         ◀── OPEN c03/f5 read ──── read guard
//!                                         ─── stateid + read deleg ▶ READs, guard let go,
//!   write guard ── OPEN f5 read-write ──▶                              open kept
//!                ◀── NFS4ERR_DELAY ────── ─── CB_RECALL ───────────▶ (its library)
//!                                         ◀── DELEGRETURN ──────────
//!              ── OPEN again ──────────▶ ok; WRITE, COMMIT, CLOSE; guard let go
//! ```
//!
//! # A reader never waits
//! A reader takes the read guard without waiting ([`tokio::sync::RwLock::try_read`]) and
//! leaves the read out if the owner holds (or waits for) the write guard. Waiting would make
//! the owner's progress hang on an idle client: the owner, under the write guard, waits for the
//! reader's client to return its delegation, while the reader's task waits for the guard and
//! sends nothing. That client answers a CB_RECALL from its library at once, as long as its back
//! channel is up. After `sluice link` reset its connection, the sluice client used to bind the
//! new connection to the session (and so its back channel) only when it next sent a COMPOUND,
//! and an idle one sent nothing until its lease renewal, a third of the lease (30 s with
//! sluice's 90 s): the owner's OPEN, RENAME or REMOVE then got NFS4ERR_DELAY for up to that
//! long (one link run, when readers still waited, had an OPEN of 30.1 s and a RENAME of
//! 29.9 s). The client now binds a re-established connection at once (see the client's
//! "Back channel after a reset"; `deleg_reset_v4.rs` checks it end to end); a client here
//! still always has a COMPOUND going soon, so the run does not depend on that.
//!
//! Each client keeps at most [`HELD_MAX`] opens for reading (its own files and others'), the
//! oldest closed first. A file removed (or renamed over) while someone holds it open stays
//! readable through that open with the contents it had (the server keeps it under a hidden
//! name until the last CLOSE); the model keeps those bytes for the holder, and the disk check
//! at the end finds no hidden name left.

use super::*;
use crate::common::pattern;
use bytes::Bytes;
use sluice_client::v4::{Client, Fh};
use sluice_client::{FileProtocol, Handle, Namespace};
use sluice_xdr::nfs4::attrs::AttrValues;
use sluice_xdr::nfs4::ops::{
    Createhow4, OpenClaim4, Openflag4, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ,
};
use sluice_xdr::nfs4::{Component4, NfsFh4};
use std::sync::{Arc, Mutex};
use tokio::sync::RwLock;

/// Opens for reading one client keeps across operations: enough that an owner's change often
/// finds another client's delegation to recall, few enough that 32 clients hold ~128 opens.
pub const HELD_MAX: usize = 4;

/// A file of some client's directory, as all clients see it (see the module docs).
pub struct SharedFile {
    /// `c<owner>/<name it was created with>`, for messages.
    label: String,
    fh: NfsFh4,
    state: RwLock<FileState>,
}

struct FileState {
    data: Vec<u8>,
    /// Removed or renamed over by its owner: readable only through opens made before.
    removed: bool,
}

/// Every client's files as it last published them, for the others to read.
pub struct Registry {
    dirs: Vec<Mutex<Vec<Arc<SharedFile>>>>,
}

impl Registry {
    pub fn new(clients: usize) -> Arc<Registry> {
        Arc::new(Registry {
            dirs: (0..clients).map(|_| Mutex::new(Vec::new())).collect(),
        })
    }

    fn publish(&self, id: usize, files: Vec<Arc<SharedFile>>) {
        *self.dirs[id].lock().expect("registry lock") = files;
    }

    /// A file of a client other than `id`, if the one drawn has any.
    fn pick_other(&self, id: usize, rng: &mut Rng) -> Option<Arc<SharedFile>> {
        let n = self.dirs.len();
        if n < 2 {
            return None;
        }
        let mut other = rng.index(n - 1);
        if other >= id {
            other += 1;
        }
        let files = self.dirs[other].lock().expect("registry lock");
        (!files.is_empty()).then(|| files[rng.index(files.len())].clone())
    }
}

/// An open for reading kept across operations.
struct Held {
    file: Arc<SharedFile>,
    fh: Fh,
}

pub struct Worker {
    pub client: Client,
    rng: Rng,
    dir: NfsFh4,
    dir_name: String,
    files: BTreeMap<String, Arc<SharedFile>>,
    next_name: u64,
    shape: Shape,
    registry: Arc<Registry>,
    held: Vec<Held>,
    pub tally: Tally,
    /// OPENs for reading of another client's file.
    pub shared_opens: u64,
    /// OPENs that came with a read delegation.
    pub delegations: u64,
    /// Reads through an open of a file removed (or renamed over) since it was opened.
    pub removed_reads: u64,
    /// Reads left out because the file's owner was changing it.
    pub busy_skips: u64,
}

impl Worker {
    /// Makes the client's directory `c<id>` in the export at `export_path`.
    pub async fn new(
        client: Client,
        export_path: &str,
        id: usize,
        seed: u64,
        shape: Shape,
        registry: Arc<Registry>,
    ) -> Worker {
        let dir_name = format!("c{id:02}");
        let path = format!("{}/{dir_name}", export_path.trim_end_matches('/'));
        let dir = client.mkdir(&path, 0o755).await.expect("mkdir");
        Worker {
            client,
            rng: Rng::for_client(seed, id),
            dir,
            dir_name,
            files: BTreeMap::new(),
            next_name: 0,
            shape,
            registry,
            held: Vec::new(),
            tally: Tally::new(id),
            shared_opens: 0,
            delegations: 0,
            removed_reads: 0,
            busy_skips: 0,
        }
    }

    pub fn files_left(&self) -> usize {
        self.files.len()
    }

    pub async fn run(&mut self, run_for: RunFor) {
        let start = Instant::now();
        while run_for.goes_on(start, self.client.transport_stats().reconnects) {
            match next_op(&mut self.rng, self.files.len()) {
                Op::Create => self.create().await,
                Op::Write => self.write().await,
                Op::Read => self.read().await,
                Op::Readdir => self.readdir().await,
                Op::Rename => self.rename().await,
                Op::Remove => self.remove().await,
                Op::Stat => self.stat().await,
            }
            self.tally.ops += 1;
        }
        self.tally.run_time = start.elapsed();
    }

    fn pick(&mut self) -> String {
        let i = self.rng.index(self.files.len());
        self.files.keys().nth(i).expect("non-empty").clone()
    }

    fn publish(&self) {
        self.registry
            .publish(self.tally.id, self.files.values().cloned().collect());
    }

    fn dir_handle(&self) -> Handle {
        Handle::v4(self.dir.0.clone())
    }

    fn read_chunk(&self) -> u64 {
        self.shape.read_chunk(FileProtocol::rsize(&self.client))
    }

    /// OPEN by handle (CLAIM_FH): for reading (a delegation may come with it), or for reading
    /// and writing (the library asks for no delegation then).
    async fn open_fh(&mut self, fh: &NfsFh4, write: bool, what: &str) -> Option<(Fh, u64)> {
        let access = if write {
            OPEN4_SHARE_ACCESS_BOTH
        } else {
            OPEN4_SHARE_ACCESS_READ
        };
        let client = &self.client;
        let (fh, attr) = self
            .tally
            .time(
                "OPEN",
                what,
                client.open_at(fh, access, Openflag4::NoCreate, OpenClaim4::Fh),
            )
            .await?;
        if fh.delegation.is_some() {
            self.delegations += 1;
        }
        Some((fh, attr.size))
    }

    async fn close(&mut self, fh: &Fh, what: &str) -> bool {
        let client = &self.client;
        self.tally
            .time("CLOSE", what, client.close(fh))
            .await
            .is_some()
    }

    async fn create(&mut self) {
        let name = format!("f{}", self.next_name);
        self.next_name += 1;
        let attrs = AttrValues {
            mode: Some(0o644),
            ..AttrValues::default()
        };
        let how = Openflag4::Create(Createhow4::Guarded(attrs.encode()));
        let claim = OpenClaim4::Null(Component4(Bytes::copy_from_slice(name.as_bytes())));
        let (client, dir) = (&self.client, &self.dir);
        let what = format!("{name} (create)");
        let Some((fh, attr)) = self
            .tally
            .time(
                "OPEN",
                &what,
                client.open_at(dir, OPEN4_SHARE_ACCESS_BOTH, how, claim),
            )
            .await
        else {
            return;
        };
        if attr.size != 0 {
            self.tally
                .fail(format!("OPEN {what}: size {} of a new file", attr.size));
        }
        let len = self.shape.file_size(&mut self.rng);
        let data = pattern(self.rng.next(), len);
        let stable = random_stable(&mut self.rng);
        let written = self.write_range(&fh, &name, 0, &data, stable).await;
        let closed = self.close(&fh, &name).await;
        if written && closed {
            let file = SharedFile {
                label: format!("{}/{name}", self.dir_name),
                fh: fh.fh,
                state: RwLock::new(FileState {
                    data,
                    removed: false,
                }),
            };
            self.files.insert(name, Arc::new(file));
            self.publish();
        }
    }

    async fn write(&mut self) {
        let name = self.pick();
        let file = self.files[&name].clone();
        let mut st = file.state.write().await;
        let (offset, len) = self.shape.write_extent(&mut self.rng, st.data.len() as u64);
        let data = pattern(self.rng.next(), len);
        let stable = random_stable(&mut self.rng);
        let what = format!("{name} (write)");
        let Some((fh, size)) = self.open_fh(&file.fh, true, &what).await else {
            return;
        };
        if size != st.data.len() as u64 {
            self.tally.fail(format!(
                "OPEN {what}: size {size} but model {}",
                st.data.len()
            ));
        }
        let written = self.write_range(&fh, &name, offset, &data, stable).await;
        self.close(&fh, &name).await;
        if written {
            apply_write(&mut st.data, offset, &data);
        }
    }

    /// WRITEs `data` at `offset` under `fh`'s open stateid in pieces of at most wsize, then
    /// COMMIT if any reply was not FILE_SYNC; checks counts, stability and that COMMIT's
    /// verifier is the WRITEs'. True if all of it is on stable storage.
    async fn write_range(
        &mut self,
        fh: &Fh,
        name: &str,
        offset: u64,
        data: &[u8],
        stable: Stability,
    ) -> bool {
        let client = &self.client;
        let wsize = FileProtocol::wsize(client) as usize;
        let mut verf = None;
        let mut done = 0usize;
        while done < data.len() {
            let piece = Bytes::copy_from_slice(&data[done..(done + wsize).min(data.len())]);
            let at = offset + done as u64;
            let what = format!("{name} @{at}+{}", piece.len());
            let call = async { client.start_write(fh, at, piece, stable).await.await.0 };
            let Some(res) = self.tally.time("WRITE", &what, call).await else {
                return false;
            };
            if res.count == 0 {
                self.tally.fail(format!("WRITE {what}: wrote 0 bytes"));
                return false;
            }
            if stable_rank(res.committed) < stable_rank(stable) {
                self.tally.fail(format!(
                    "WRITE {what}: asked {stable:?} got {:?}",
                    res.committed
                ));
            }
            if res.committed != Stability::FileSync {
                verf = Some(res.verifier);
            }
            done += res.count as usize;
            self.tally.bytes_written += u64::from(res.count);
        }
        if let Some(v) = verf {
            let call = async { client.start_commit(fh, 0, 0).await.await };
            let Some(c) = self.tally.time("COMMIT", name, call).await else {
                return false;
            };
            if c != v {
                self.tally.fail(format!(
                    "COMMIT {name}: verifier changed without a server restart"
                ));
                return false;
            }
        }
        true
    }

    /// READs under an open stateid: three in ten through an open held already (whatever
    /// became of its file since), three in ten of another client's file, the rest of one's
    /// own; a file not held is opened for reading and kept.
    async fn read(&mut self) {
        let roll = self.rng.below(10);
        let file = match roll {
            0..=2 if !self.held.is_empty() => {
                let i = self.rng.index(self.held.len());
                Some(self.held[i].file.clone())
            }
            3..=5 => self.registry.pick_other(self.tally.id, &mut self.rng),
            _ => None,
        };
        let file = match file {
            Some(f) => f,
            None => {
                let name = self.pick();
                self.files[&name].clone()
            }
        };
        // Never waits for the owner: see "A reader never waits" in the module docs.
        let Ok(st) = file.state.try_read() else {
            self.busy_skips += 1;
            return;
        };
        let what = file.label.clone();
        let fh = match self.held.iter().find(|h| Arc::ptr_eq(&h.file, &file)) {
            Some(h) => {
                self.removed_reads += u64::from(st.removed);
                h.fh.clone()
            }
            // Gone before this client opened it: nothing to read it by.
            None if st.removed => return,
            None => {
                let Some((fh, size)) = self.open_fh(&file.fh, false, &what).await else {
                    return;
                };
                if size != st.data.len() as u64 {
                    self.tally.fail(format!(
                        "OPEN {what} for reading: size {size} but model {}",
                        st.data.len()
                    ));
                }
                if !self.files.values().any(|f| Arc::ptr_eq(f, &file)) {
                    self.shared_opens += 1;
                }
                self.held.push(Held {
                    file: file.clone(),
                    fh: fh.clone(),
                });
                fh
            }
        };
        let (offset, len) = read_extent(&mut self.rng, st.data.len() as u64);
        let rsize = self.read_chunk();
        let client = &self.client;
        let (mut pos, end) = (offset, offset + len);
        while pos < end {
            let count = (end - pos).min(rsize) as u32;
            let call = async { client.start_read(&fh, pos, count).await.await.0 };
            let at = format!("{what} @{pos}+{count}");
            let Some(res) = self.tally.time("READ", &at, call).await else {
                break;
            };
            let got: Vec<u8> = res.data.concat();
            self.tally.bytes_read += got.len() as u64;
            if let Err(e) = check_read(&st.data, pos, count, &got, res.eof) {
                let removed = if st.removed { " (removed)" } else { "" };
                self.tally.fail(format!("READ {at}{removed}: {e}"));
                break;
            }
            if got.is_empty() {
                break;
            }
            pos += got.len() as u64;
        }
        drop(st);
        while self.held.len() > HELD_MAX {
            let h = self.held.remove(0);
            self.close(&h.fh, &h.file.label).await;
        }
    }

    async fn readdir(&mut self) {
        let (client, dir) = (&self.client, &self.dir);
        let Some(entries) = self
            .tally
            .time("READDIR", &self.dir_name.clone(), client.readdir(dir))
            .await
        else {
            return;
        };
        let names: BTreeSet<String> = entries.iter().map(|(n, _)| n.clone()).collect();
        let want: BTreeSet<String> = self.files.keys().cloned().collect();
        if let Err(e) = check_names(&names, &want) {
            self.tally.fail(format!("READDIR {}: {e}", self.dir_name));
            return;
        }
        for (name, attr) in entries {
            let size = self.files[&name].state.read().await.data.len() as u64;
            if attr.size != size {
                self.tally.fail(format!(
                    "READDIR {}: {name} has size {} but model {size}",
                    self.dir_name, attr.size
                ));
            }
        }
    }

    async fn rename(&mut self) {
        let from = self.pick();
        let to = if self.files.len() > 1 && self.rng.below(3) == 0 {
            self.pick() // over an existing file (or onto itself: a no-op)
        } else {
            let n = format!("f{}", self.next_name);
            self.next_name += 1;
            n
        };
        let moved = self.files[&from].clone();
        let replaced = self
            .files
            .get(&to)
            .filter(|f| !Arc::ptr_eq(f, &moved))
            .cloned();
        let _moving = moved.state.write().await;
        let mut replacing = match &replaced {
            Some(f) => Some(f.state.write().await),
            None => None,
        };
        let dir = self.dir_handle();
        let client = &self.client;
        let what = format!("{from} -> {to}");
        if self
            .tally
            .time("RENAME", &what, client.rename(&dir, &from, &dir, &to))
            .await
            .is_some()
            && from != to
        {
            if let Some(r) = replacing.as_mut() {
                r.removed = true;
            }
            let f = self.files.remove(&from).expect("picked");
            self.files.insert(to, f);
            self.publish();
        }
    }

    async fn remove(&mut self) {
        let name = self.pick();
        let file = self.files[&name].clone();
        let mut st = file.state.write().await;
        let dir = self.dir_handle();
        let client = &self.client;
        if self
            .tally
            .time("REMOVE", &name, client.remove(&dir, &name))
            .await
            .is_some()
        {
            st.removed = true;
            self.files.remove(&name);
            self.publish();
        }
    }

    /// LOOKUP (the handle must be the one the file was created with, across renames), then
    /// GETATTR of it: the model's size.
    async fn stat(&mut self) {
        let name = self.pick();
        let file = self.files[&name].clone();
        let dir = self.dir_handle();
        let client = &self.client;
        let Some((handle, _)) = self
            .tally
            .time("LOOKUP", &name, Namespace::lookup(client, &dir, &name))
            .await
        else {
            return;
        };
        if handle.as_bytes() != file.fh.0.as_ref() {
            self.tally
                .fail(format!("LOOKUP {name}: another handle than the file's"));
        }
        let client = &self.client;
        let Some(attr) = self
            .tally
            .time("GETATTR", &name, client.getattr_fh(&file.fh))
            .await
        else {
            return;
        };
        let want = file.state.read().await.data.len() as u64;
        if attr.size != want {
            self.tally.fail(format!(
                "GETATTR {name}: size {} but model {want}",
                attr.size
            ));
        }
    }

    /// Closes every open held (and so returns the delegations that came with them).
    pub async fn close_held(&mut self) {
        for h in std::mem::take(&mut self.held) {
            self.close(&h.fh, &h.file.label).await;
        }
    }

    /// After the run: the listing, and every file opened for reading, read whole and closed,
    /// against the model.
    pub async fn verify_over_nfs(&mut self) {
        self.readdir().await;
        let rsize = self.read_chunk() as u32;
        for (name, file) in self.files.clone() {
            let want = file.state.read().await.data.clone();
            let Some((fh, _)) = self.open_fh(&file.fh, false, &file.label).await else {
                continue;
            };
            let mut got = Vec::with_capacity(want.len());
            loop {
                let call = self.client.start_read(&fh, got.len() as u64, rsize).await;
                match call.await.0 {
                    Ok(res) => {
                        let n: usize = res.data.iter().map(|c| c.len()).sum();
                        got.extend_from_slice(&res.data.concat());
                        if res.eof || n == 0 {
                            break;
                        }
                    }
                    Err(e) => {
                        self.tally.fail(format!("final READ {name}: {e}"));
                        break;
                    }
                }
            }
            self.close(&fh, &file.label).await;
            if got != want {
                self.tally.fail(format!(
                    "final read of {}/{name}: {} bytes, model {}, contents differ",
                    self.dir_name,
                    got.len(),
                    want.len()
                ));
            }
        }
    }

    /// The server's directory, read directly: the model's names (no hidden name of a file
    /// removed while open left), the model's bytes.
    pub async fn verify_on_disk(&self, export: &Path) -> Vec<String> {
        let mut files = Vec::new();
        for (name, f) in &self.files {
            files.push((name.clone(), f.state.read().await.data.clone()));
        }
        verify_on_disk(
            export,
            &self.dir_name,
            files.iter().map(|(n, d)| (n.as_str(), d.as_slice())),
        )
    }
}
