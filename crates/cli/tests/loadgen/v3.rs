//! One NFSv3 client of the load run: a [`Client`] (one connection) working in its own
//! directory, checking every reply against its model of that directory.

use super::*;
use crate::common::pattern;
use sluice_client::nfs3::{CreateHow, NfsFh3, Sattr3, StableHow};
use sluice_client::Client;

/// A file of the model: its handle (kept across renames) and contents.
struct ModelFile {
    fh: NfsFh3,
    data: Vec<u8>,
}

pub struct Worker {
    pub client: Client,
    rng: Rng,
    dir: NfsFh3,
    dir_name: String,
    files: BTreeMap<String, ModelFile>,
    next_name: u64,
    shape: Shape,
    pub tally: Tally,
}

impl Worker {
    pub async fn new(client: Client, id: usize, seed: u64, shape: Shape) -> Worker {
        let dir_name = format!("c{id:02}");
        let root = client.root().clone();
        let dir = client
            .mkdir(&root, &dir_name, mode(0o755))
            .await
            .expect("mkdir")
            .obj
            .expect("MKDIR returned a handle");
        Worker {
            client,
            rng: Rng::for_client(seed, id),
            dir,
            dir_name,
            files: BTreeMap::new(),
            next_name: 0,
            shape,
            tally: Tally::new(id),
        }
    }

    /// Files in the model now.
    pub fn files_left(&self) -> usize {
        self.files.len()
    }

    fn fail(&mut self, msg: String) {
        self.tally.fail(msg);
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

    fn read_chunk(&self) -> u64 {
        self.shape.read_chunk(self.client.rsize())
    }

    async fn create(&mut self) {
        let name = format!("f{}", self.next_name);
        self.next_name += 1;
        let how = CreateHow::Guarded(mode(0o644));
        let Some(res) = self
            .tally
            .time("CREATE", &name, self.client.create(&self.dir, &name, how))
            .await
        else {
            return;
        };
        let Some(fh) = res.obj else {
            self.fail(format!("CREATE {name}: no handle in the reply"));
            return;
        };
        let len = self.shape.file_size(&mut self.rng);
        let data = pattern(self.rng.next(), len);
        let stable = random_stable(&mut self.rng);
        if self.write_range(&fh, &name, 0, &data, stable).await {
            self.files.insert(name, ModelFile { fh, data });
        }
    }

    async fn write(&mut self) {
        let name = self.pick();
        let size = self.files[&name].data.len() as u64;
        let (offset, len) = self.shape.write_extent(&mut self.rng, size);
        let data = pattern(self.rng.next(), len);
        let stable = random_stable(&mut self.rng);
        let fh = self.files[&name].fh.clone();
        if self.write_range(&fh, &name, offset, &data, stable).await {
            let f = &mut self.files.get_mut(&name).expect("picked").data;
            apply_write(f, offset, &data);
        }
    }

    /// WRITEs `data` at `offset` in pieces of at most wsize, then COMMIT if any reply was not
    /// FILE_SYNC; checks counts and that COMMIT's verifier is the WRITEs' (no restart here, so
    /// a change would mean the server dropped data). True if all of it is on stable storage.
    async fn write_range(
        &mut self,
        fh: &NfsFh3,
        name: &str,
        offset: u64,
        data: &[u8],
        stable: Stability,
    ) -> bool {
        let stable = match stable {
            Stability::FileSync => StableHow::FILE_SYNC,
            Stability::DataSync => StableHow::DATA_SYNC,
            Stability::Unstable => StableHow::UNSTABLE,
        };
        let wsize = self.client.wsize() as usize;
        let mut verf = None;
        let mut done = 0usize;
        while done < data.len() {
            let piece = &data[done..(done + wsize).min(data.len())];
            let at = offset + done as u64;
            let what = format!("{name} @{at}+{}", piece.len());
            let Some(res) = self
                .tally
                .time(
                    "WRITE",
                    &what,
                    self.client.write(fh, at, piece.to_vec().into(), stable),
                )
                .await
            else {
                return false;
            };
            if res.count == 0 {
                self.fail(format!("WRITE {what}: wrote 0 bytes"));
                return false;
            }
            if res.committed.0 < stable.0 {
                self.fail(format!(
                    "WRITE {what}: asked stable {} got {}",
                    stable.0, res.committed.0
                ));
            }
            if res.committed != StableHow::FILE_SYNC {
                verf = Some(res.verf);
            }
            done += res.count as usize;
            self.tally.bytes_written += u64::from(res.count);
        }
        if let Some(v) = verf {
            let Some(c) = self
                .tally
                .time("COMMIT", name, self.client.commit(fh, 0, 0))
                .await
            else {
                return false;
            };
            if c.verf != v {
                self.fail(format!(
                    "COMMIT {name}: verifier changed without a server restart"
                ));
                return false;
            }
        }
        true
    }

    async fn read(&mut self) {
        let name = self.pick();
        let fh = self.files[&name].fh.clone();
        let size = self.files[&name].data.len() as u64;
        let rsize = self.read_chunk();
        let (offset, len) = read_extent(&mut self.rng, size);
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            let count = (end - pos).min(rsize) as u32;
            let what = format!("{name} @{pos}+{count}");
            let Some(res) = self
                .tally
                .time("READ", &what, self.client.read(&fh, pos, count))
                .await
            else {
                return;
            };
            let got = res.data.to_vec();
            self.tally.bytes_read += got.len() as u64;
            let model = &self.files[&name].data;
            if let Err(e) = check_read(model, pos, count, &got, res.eof) {
                self.fail(format!("READ {what}: {e}"));
                return;
            }
            if got.is_empty() {
                break;
            }
            pos += got.len() as u64;
        }
    }

    async fn readdir(&mut self) {
        let Some(names) = self.list().await else {
            return;
        };
        let want: BTreeSet<String> = self.files.keys().cloned().collect();
        if let Err(e) = check_names(&names, &want) {
            self.fail(format!("READDIRPLUS {}: {e}", self.dir_name));
        }
    }

    /// The directory's names (without "." and ".."), READDIRPLUS until eof.
    async fn list(&mut self) -> Option<BTreeSet<String>> {
        let (mut cookie, mut verf) = (0u64, [0u8; 8]);
        let mut names = BTreeSet::new();
        let dir = self.dir.clone();
        loop {
            let what = format!("{} cookie {cookie}", self.dir_name);
            let res = self
                .tally
                .time(
                    "READDIRPLUS",
                    &what,
                    self.client
                        .readdirplus(&dir, cookie, verf, 16 << 10, 64 << 10),
                )
                .await?;
            verf = res.cookieverf;
            for e in &res.entries {
                cookie = e.cookie;
                let n = String::from_utf8_lossy(&e.name).into_owned();
                if n != "." && n != ".." {
                    names.insert(n);
                }
            }
            if res.eof {
                return Some(names);
            }
            if res.entries.is_empty() {
                self.fail(format!("READDIRPLUS {what}: empty reply without eof"));
                return None;
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
        let dir = self.dir.clone();
        let what = format!("{from} -> {to}");
        if self
            .tally
            .time("RENAME", &what, self.client.rename(&dir, &from, &dir, &to))
            .await
            .is_some()
            && from != to
        {
            let f = self.files.remove(&from).expect("picked");
            self.files.insert(to, f);
        }
    }

    async fn remove(&mut self) {
        let name = self.pick();
        let dir = self.dir.clone();
        if self
            .tally
            .time("REMOVE", &name, self.client.remove(&dir, &name))
            .await
            .is_some()
        {
            self.files.remove(&name);
        }
    }

    async fn stat(&mut self) {
        let name = self.pick();
        let dir = self.dir.clone();
        let Some(l) = self
            .tally
            .time("LOOKUP", &name, self.client.lookup(&dir, &name))
            .await
        else {
            return;
        };
        let Some(a) = self
            .tally
            .time("GETATTR", &name, self.client.getattr(&l.object))
            .await
        else {
            return;
        };
        let want = self.files[&name].data.len() as u64;
        if a.obj_attributes.size != want {
            self.fail(format!(
                "GETATTR {name}: size {} but model {want}",
                a.obj_attributes.size
            ));
        }
    }

    /// After the run: the listing and every file, through the handles kept since creation
    /// (across renames), against the model.
    pub async fn verify_over_nfs(&mut self) {
        self.readdir().await;
        let names: Vec<String> = self.files.keys().cloned().collect();
        for name in names {
            let f = &self.files[&name];
            let fh = f.fh.clone();
            let want_len = f.data.len();
            let mut got = Vec::with_capacity(want_len);
            let rsize = self.read_chunk() as u32;
            loop {
                let r = self.client.read(&fh, got.len() as u64, rsize).await;
                match r {
                    Ok(res) => {
                        let eof = res.eof;
                        let n = res.data.len();
                        got.extend_from_slice(&res.data.to_vec());
                        if eof || n == 0 {
                            break;
                        }
                    }
                    Err(e) => {
                        self.fail(format!("final READ {name}: {e}"));
                        break;
                    }
                }
            }
            if got != self.files[&name].data {
                self.fail(format!(
                    "final read of {}/{name}: {} bytes, model {want_len}, contents differ",
                    self.dir_name,
                    got.len()
                ));
            }
        }
    }

    /// The server's directory, read directly: same names, same bytes.
    pub fn verify_on_disk(&self, export: &Path) -> Vec<String> {
        verify_on_disk(
            export,
            &self.dir_name,
            self.files
                .iter()
                .map(|(n, f)| (n.as_str(), f.data.as_slice())),
        )
    }
}

fn mode(m: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(m),
        ..Sattr3::default()
    }
}
