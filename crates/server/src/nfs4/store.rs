//! The state store over the server's state directory: each record of
//! [`sluice_nfs4state::store`] is a file of the same name in the directory
//! (`<state dir>/nfs4-clients`, `nfs4-boot-epoch`, `nfs4-parked`).
//!
//! # The one atomic write
//! Every record is replaced by [`write_atomically`]:
//! ```text
//!   write <name>.tmp ─▶ fsync it ─▶ rename over <name> ─▶ fsync the directory ─▶ Ok
//! ```
//! A crash before the rename leaves the old file (and a stale `.tmp`, overwritten next time);
//! a crash after it leaves the new one. The rename is durable only once the directory is,
//! hence the last fsync: without it a crash after `Ok` could bring the old file back, and a
//! client told its record was written would find no grace for it. A delete is an unlink
//! followed by the same directory fsync.
//!
//! A record's temporary is its name with `.tmp` appended; no record the server keeps ends in
//! `.tmp` ([`sluice_nfs4state::store::names`]).

pub use sluice_nfs4state::store::{check_name, MemStore, StateStore, StoreError};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// The records of [`StateStore`] as files of one directory (module notes). The directory
/// must exist (the server creates it, mode 0700, with the handle secret).
#[derive(Debug, Clone)]
pub struct DirStore {
    dir: PathBuf,
}

impl DirStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DirStore { dir: dir.into() }
    }

    /// The directory the records are in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl StateStore for DirStore {
    fn get(&self, name: &str, bytes_max: usize) -> Result<Option<Vec<u8>>, StoreError> {
        check_name(name)?;
        let f = match std::fs::File::open(self.dir.join(name)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(backend(name, e)),
        };
        // One byte over the bound tells a record at the bound from a longer one.
        let mut data = Vec::new();
        f.take(bytes_max as u64 + 1)
            .read_to_end(&mut data)
            .map_err(|e| backend(name, e))?;
        if data.len() > bytes_max {
            return Err(StoreError::TooLarge {
                name: name.to_string(),
                bytes_max,
            });
        }
        Ok(Some(data))
    }

    fn put(&self, name: &str, data: &[u8]) -> Result<(), StoreError> {
        check_name(name)?;
        write_atomically(&self.dir, name, data).map_err(|e| backend(name, e))
    }

    fn delete(&self, name: &str) -> Result<(), StoreError> {
        check_name(name)?;
        match std::fs::remove_file(self.dir.join(name)) {
            Ok(()) => sync_dir(&self.dir).map_err(|e| backend(name, e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(backend(name, e)),
        }
    }
}

/// `dir/name` replaced by `data` so that a crash leaves the old or the new contents, and
/// the new ones once this returns `Ok` (module notes).
pub fn write_atomically(dir: &Path, name: &str, data: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))?;
    sync_dir(dir)
}

/// Makes the directory's entries (a rename, an unlink) durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

fn backend(name: &str, source: io::Error) -> StoreError {
    StoreError::Backend {
        name: name.to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_nfs4state::recovery::parked::{self, Leftover, Parked, ParkedFiles};
    use sluice_nfs4state::recovery::records::{
        self, next_boot_epoch, ClientRecords, StableClients, OWNER_BYTES_MAX,
    };
    use sluice_nfs4state::store::names;
    use sluice_vfs::{Caller, Cred, ExportId, FileHandle};
    use std::sync::Arc;

    /// A fresh directory under the system's temporary one, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(what: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("sluice-{what}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_directory_store_keeps_the_contract() {
        let d = TempDir::new("store-contract");
        sluice_nfs4state::store::check_contract(&DirStore::new(&d.0));
    }

    #[test]
    fn a_record_is_a_file_replaced_whole_and_deleted() {
        let d = TempDir::new("store-rw");
        let s = DirStore::new(&d.0);
        assert!(s.get(names::CLIENTS, 100).unwrap().is_none());
        s.put(names::CLIENTS, b"6162\n").unwrap();
        assert_eq!(std::fs::read(d.0.join(names::CLIENTS)).unwrap(), b"6162\n");
        s.put(names::CLIENTS, b"00\n").unwrap();
        assert_eq!(s.get(names::CLIENTS, 100).unwrap().unwrap(), b"00\n");
        assert!(!d.0.join(format!("{}.tmp", names::CLIENTS)).exists());
        s.delete(names::CLIENTS).unwrap();
        s.delete(names::CLIENTS).unwrap();
        assert!(!d.0.join(names::CLIENTS).exists());
        assert!(matches!(
            s.put("../escape", b""),
            Err(StoreError::BadName { .. })
        ));
    }

    #[test]
    fn a_file_over_the_readers_bound_is_refused() {
        let d = TempDir::new("store-big");
        let s = DirStore::new(&d.0);
        s.put(names::PARKED, &[b'x'; 10]).unwrap();
        assert!(s.get(names::PARKED, 10).unwrap().is_some());
        assert!(matches!(
            s.get(names::PARKED, 9),
            Err(StoreError::TooLarge { bytes_max: 9, .. })
        ));
    }

    #[test]
    fn the_boot_epoch_always_grows_in_a_directory() {
        let d = TempDir::new("epoch");
        let s = DirStore::new(&d.0);
        let a = next_boot_epoch(&s, 1000).unwrap();
        let b = next_boot_epoch(&s, 1000).unwrap();
        let c = next_boot_epoch(&s, 1000).unwrap();
        assert_eq!((a, b, c), (1000, 1001, 1002));
        assert_eq!(next_boot_epoch(&s, 5000).unwrap(), 5000);
        assert_eq!(
            std::fs::read(d.0.join(records::EPOCH_FILE_NAME)).unwrap(),
            b"5000\n"
        );
    }

    #[test]
    fn records_survive_reopen_and_removal_is_durable() {
        let d = TempDir::new("stable");
        let store: Arc<dyn StateStore> = Arc::new(DirStore::new(&d.0));
        let s = StableClients::open(store.clone()).unwrap();
        assert_eq!(s.owners().len(), 0);
        s.insert(b"linux-client-1").unwrap();
        s.insert(&[0, 10, 255]).unwrap();
        let again = StableClients::open(store.clone()).unwrap();
        assert!(again.contains(b"linux-client-1"));
        assert!(again.contains(&[0, 10, 255]));
        again.remove(b"linux-client-1").unwrap();
        let third = StableClients::open(store).unwrap();
        assert!(!third.contains(b"linux-client-1"));
        assert_eq!(third.owners().len(), 1);
        assert!(!d.0.join(format!("{}.tmp", records::FILE_NAME)).exists());
    }

    #[test]
    fn an_owner_over_the_limit_is_refused() {
        let d = TempDir::new("stable-big");
        let s = StableClients::open(Arc::new(DirStore::new(&d.0))).unwrap();
        assert!(s.insert(&vec![1; OWNER_BYTES_MAX + 1]).is_err());
        assert!(!d.0.join(records::FILE_NAME).exists(), "nothing written");
    }

    /// The journal lists what is parked, and the next run gets it back once (then it is
    /// empty); a damaged line is skipped, not fatal.
    #[test]
    fn the_journal_gives_an_earlier_runs_parked_files_back_once() {
        let d = TempDir::new("parked");
        let path = d.0.join(parked::JOURNAL_NAME);
        let p = |name: &[u8]| Parked {
            idx: 0,
            export: ExportId(7),
            dir: FileHandle::from_slice(&[1; 16]).unwrap(),
            name: name.to_vec(),
            caller: Caller::with_cred(Cred::new(1000, 1000)),
        };
        let run1 = ParkedFiles::with_store(Arc::new(DirStore::new(&d.0)));
        run1.park(
            bytes::Bytes::from_static(b"a"),
            p(&parked::hidden_name(0xa)),
        )
        .unwrap();
        run1.park(
            bytes::Bytes::from_static(b"b"),
            p(&parked::hidden_name(0xb)),
        )
        .unwrap();
        assert_eq!(run1.take_closed(|f| f == b"a").len(), 1);
        // The crash: run 1 never closes `a`. A damaged line is appended.
        let mut text = std::fs::read(&path).unwrap();
        text.extend_from_slice(b"zz 0102 .sluice-open-x\n");
        std::fs::write(&path, text).unwrap();
        let run2 = ParkedFiles::with_store(Arc::new(DirStore::new(&d.0)));
        let left = run2.leftovers();
        assert_eq!(
            left,
            [Leftover {
                export: ExportId(7),
                dir: FileHandle::from_slice(&[1; 16]).unwrap(),
                name: parked::hidden_name(0xa),
                fileid: 0xa,
            }]
        );
        assert!(run2.leftovers().is_empty(), "given back once");
    }
}
