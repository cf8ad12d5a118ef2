//! Stable client records: the owners of clients that may reclaim state after a restart
//! (RFC 8881 §8.4.2.1), kept in the state directory as `<state dir>/nfs4-clients`.
//!
//! # Why
//! After a restart the server must tell a client that held state (and may reclaim it during
//! grace) from one that did not, and must not start a grace period at all when nobody held
//! state. knfsd keeps the same facts in its "recovery directory" (one entry per client, named
//! by a hash of the client owner) or hands them to `nfsdcld`: a record is created when a client
//! first establishes state (for minor version 1, at the client's RECLAIM_COMPLETE), before
//! the reply that makes the client rely on it, and removed when the client is destroyed or
//! expires. We write it at RECLAIM_COMPLETE and, for a client that skipped it, before its
//! first OPEN (when and why: `state/recovery.rs`). At start the records seed
//! [`super::grace::Grace`].
//!
//! The same directory keeps the last boot epoch ([`next_boot_epoch`]), so that a restart
//! within the same second still makes every earlier id stale.
//!
//! # Format and crash safety
//! One line per client owner, the owner's bytes in lowercase hex (an owner is opaque and may
//! hold any byte). Every change rewrites the whole file: write `nfs4-clients.tmp`, fsync it,
//! rename it over `nfs4-clients`, fsync the directory. A crash at any point leaves either the
//! old or the new list, never a torn one. Rewriting whole is cheap at the sizes involved (a
//! record changes when a client comes or goes, not per op) and keeps reading trivial.
//!
//! The encoding and decoding are pure ([`encode`], [`decode`]) and tested apart; [`StableClients`]
//! is the thin file driver.
//!
//! # Bounds
//! At most [`super::grace::RECORDS_MAX`] records: an insert past that is refused (the caller
//! answers NFS4ERR_DELAY, as for a full client table). The file is read at most
//! [`FILE_BYTES_MAX`] bytes; a line that is not hex, or an owner over
//! [`OWNER_BYTES_MAX`], is skipped (a damaged line must not stop the server from starting).

use super::grace::RECORDS_MAX;
use std::collections::BTreeSet;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// The file's name in the state directory.
pub const FILE_NAME: &str = "nfs4-clients";

/// The longest client owner (`co_ownerid` is an opaque of at most NFS4_OPAQUE_LIMIT bytes).
pub const OWNER_BYTES_MAX: usize = 1024;

/// The most of the file read at start: every record at its longest, two hex digits a byte
/// plus a newline.
pub const FILE_BYTES_MAX: u64 = (RECORDS_MAX * (2 * OWNER_BYTES_MAX + 1)) as u64;

/// The file's contents for `owners`, one hex line each, in order.
pub fn encode<'a>(owners: impl IntoIterator<Item = &'a Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    for owner in owners {
        for b in owner {
            out.extend_from_slice(format!("{b:02x}").as_bytes());
        }
        out.push(b'\n');
    }
    out
}

/// The owners named by a file's contents. Damaged lines are skipped, the count is capped at
/// [`RECORDS_MAX`].
pub fn decode(text: &[u8]) -> BTreeSet<Vec<u8>> {
    let mut owners = BTreeSet::new();
    for line in text.split(|&b| b == b'\n') {
        if owners.len() >= RECORDS_MAX {
            break;
        }
        if line.is_empty() || line.len() % 2 != 0 || line.len() > 2 * OWNER_BYTES_MAX {
            continue;
        }
        let owner: Option<Vec<u8>> = line
            .chunks(2)
            .map(|pair| {
                let s = std::str::from_utf8(pair).ok()?;
                u8::from_str_radix(s, 16).ok()
            })
            .collect();
        if let Some(owner) = owner {
            owners.insert(owner);
        }
    }
    owners
}

/// The file holding the last instance's boot epoch (decimal), next to the records.
pub const EPOCH_FILE_NAME: &str = "nfs4-boot-epoch";

/// This instance's boot epoch: the clock's seconds, unless the last instance (`last`) had
/// those or later (a restart within the same second, or a clock set back), then one more.
/// The epoch stamps client ids, session ids and stateids, so it must differ from every
/// earlier instance's for their ids to be recognised as stale (NFS4ERR_STALE_CLIENTID,
/// STALE_STATEID) rather than taken for this instance's (see `nfs4::client`).
pub fn choose_epoch(now_secs: u32, last: Option<u32>) -> u32 {
    match last {
        Some(l) if now_secs <= l => l.wrapping_add(1).max(1),
        _ => now_secs.max(1),
    }
}

/// Picks this instance's boot epoch ([`choose_epoch`]) from the one kept in `dir`, and keeps
/// it there durably (temp file, fsync, rename, directory fsync) before it is used.
pub fn next_boot_epoch(dir: &Path, now_secs: u32) -> io::Result<u32> {
    let path = dir.join(EPOCH_FILE_NAME);
    let last = match std::fs::read(&path) {
        Ok(b) => std::str::from_utf8(&b)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let epoch = choose_epoch(now_secs, last);
    write_durably(dir, EPOCH_FILE_NAME, format!("{epoch}\n").as_bytes())?;
    Ok(epoch)
}

/// `dir/name` replaced by `data` so that a crash leaves the old or the new contents.
fn write_durably(dir: &Path, name: &str, data: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))?;
    // The rename is durable only once the directory is.
    std::fs::File::open(dir)?.sync_all()
}

/// Where the COMPOUND processor keeps client records: [`StableClients`] behind a mutex in a
/// server, [`MemRecords`] in tests and simulations (a "disk" that survives a simulated crash).
/// Each call returns once the change is durable.
pub trait ClientRecords: Send + Sync {
    /// Records `owner` (nothing to do when it is recorded already).
    fn insert(&self, owner: &[u8]) -> io::Result<()>;
    /// Forgets `owner` (nothing to do when it is not recorded).
    fn remove(&self, owner: &[u8]) -> io::Result<()>;
}

impl ClientRecords for std::sync::Mutex<StableClients> {
    fn insert(&self, owner: &[u8]) -> io::Result<()> {
        self.lock().unwrap_or_else(|p| p.into_inner()).insert(owner)
    }
    fn remove(&self, owner: &[u8]) -> io::Result<()> {
        self.lock().unwrap_or_else(|p| p.into_inner()).remove(owner)
    }
}

/// Client records in memory, bounded as the file is: for tests and simulations, where a
/// "restart" builds a new server over the same records.
#[derive(Debug, Default)]
pub struct MemRecords(std::sync::Mutex<BTreeSet<Vec<u8>>>);

impl MemRecords {
    /// The owners recorded now.
    pub fn owners(&self) -> Vec<Vec<u8>> {
        let set = self.0.lock().unwrap_or_else(|p| p.into_inner());
        set.iter().cloned().collect()
    }
}

impl ClientRecords for MemRecords {
    fn insert(&self, owner: &[u8]) -> io::Result<()> {
        let mut set = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !set.contains(owner) && (owner.len() > OWNER_BYTES_MAX || set.len() >= RECORDS_MAX) {
            return Err(io::Error::other("stable client records full"));
        }
        set.insert(owner.to_vec());
        Ok(())
    }
    fn remove(&self, owner: &[u8]) -> io::Result<()> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(owner);
        Ok(())
    }
}

/// The stable records in a state directory.
#[derive(Debug)]
pub struct StableClients {
    dir: PathBuf,
    owners: BTreeSet<Vec<u8>>,
}

impl StableClients {
    /// Opens the records in `dir` (creating nothing until the first change). The owners read
    /// are what seeds grace.
    pub fn open(dir: &Path) -> io::Result<Self> {
        let mut text = Vec::new();
        match std::fs::File::open(dir.join(FILE_NAME)) {
            Ok(f) => {
                f.take(FILE_BYTES_MAX).read_to_end(&mut text)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            owners: decode(&text),
        })
    }

    /// The owners recorded.
    pub fn owners(&self) -> impl Iterator<Item = &Vec<u8>> {
        self.owners.iter()
    }

    /// Whether `owner` is recorded.
    pub fn contains(&self, owner: &[u8]) -> bool {
        self.owners.contains(owner)
    }

    /// Records `owner`, durably, before returning. Nothing is written when it is recorded
    /// already. Refused (an `Other` error) past the bound or for an owner over
    /// [`OWNER_BYTES_MAX`]; the caller answers NFS4ERR_DELAY.
    pub fn insert(&mut self, owner: &[u8]) -> io::Result<()> {
        if self.owners.contains(owner) {
            return Ok(());
        }
        if owner.len() > OWNER_BYTES_MAX || self.owners.len() >= RECORDS_MAX {
            return Err(io::Error::other("stable client records full"));
        }
        self.owners.insert(owner.to_vec());
        if let Err(e) = self.write() {
            self.owners.remove(owner);
            return Err(e);
        }
        Ok(())
    }

    /// Forgets `owner`, durably. Nothing is written when it was not recorded.
    pub fn remove(&mut self, owner: &[u8]) -> io::Result<()> {
        if !self.owners.remove(owner) {
            return Ok(());
        }
        self.write()
    }

    fn write(&self) -> io::Result<()> {
        write_durably(&self.dir, FILE_NAME, &encode(&self.owners))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_boot_epoch_always_grows() {
        assert_eq!(choose_epoch(100, None), 100);
        assert_eq!(choose_epoch(100, Some(99)), 100);
        // A restart within the same second, or a clock set back: one more than the last.
        assert_eq!(choose_epoch(100, Some(100)), 101);
        assert_eq!(choose_epoch(50, Some(100)), 101);
        assert_eq!(choose_epoch(0, None), 1, "never 0");
        let dir = std::env::temp_dir().join(format!("sluice-epoch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let _ = std::fs::remove_file(dir.join(EPOCH_FILE_NAME));
        let a = next_boot_epoch(&dir, 1000).unwrap();
        let b = next_boot_epoch(&dir, 1000).unwrap();
        let c = next_boot_epoch(&dir, 1000).unwrap();
        assert_eq!((a, b, c), (1000, 1001, 1002));
        assert_eq!(next_boot_epoch(&dir, 5000).unwrap(), 5000);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn damaged_lines_are_skipped() {
        let owners = decode(b"6162\nzz\n616\n\n00ff\n");
        let want: BTreeSet<Vec<u8>> = [b"ab".to_vec(), vec![0, 0xff]].into_iter().collect();
        assert_eq!(owners, want);
    }

    #[test]
    fn records_survive_reopen_and_removal_is_durable() {
        let dir = std::env::temp_dir().join(format!("sluice-stable-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let _ = std::fs::remove_file(dir.join(FILE_NAME));
        let mut s = StableClients::open(&dir).unwrap();
        assert_eq!(s.owners().count(), 0);
        s.insert(b"linux-client-1").unwrap();
        s.insert(&[0, 10, 255]).unwrap();
        let mut again = StableClients::open(&dir).unwrap();
        assert!(again.contains(b"linux-client-1"));
        assert!(again.contains(&[0, 10, 255]));
        again.remove(b"linux-client-1").unwrap();
        let third = StableClients::open(&dir).unwrap();
        assert!(!third.contains(b"linux-client-1"));
        assert_eq!(third.owners().count(), 1);
        assert!(!dir.join(format!("{FILE_NAME}.tmp")).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_owner_over_the_limit_is_refused() {
        let dir = std::env::temp_dir().join(format!("sluice-stable-big-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = StableClients::open(&dir).unwrap();
        assert!(s.insert(&vec![1; OWNER_BYTES_MAX + 1]).is_err());
        assert!(!dir.join(FILE_NAME).exists(), "nothing written");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    proptest! {
        #[test]
        fn encode_then_decode_is_identity(
            owners in proptest::collection::btree_set(
                proptest::collection::vec(any::<u8>(), 1..64), 0..20),
        ) {
            prop_assert_eq!(decode(&encode(&owners)), owners);
        }

        #[test]
        fn decode_never_panics(text in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode(&text);
        }
    }
}
