//! Files removed while open: the server's own "silly rename" (REMOVE, RFC 8881 §18.25). The
//! RFC's alternative, refusing with NFS4ERR_FILE_OPEN, is allowed but no client expects it.
//!
//! # Why
//! A local file system keeps a removed file alive while a descriptor holds it; a v4 client
//! that REMOVEs a name another client (or another owner of its own) still has open expects
//! the same: READ and WRITE under the open stateid go on, and the data is gone at the last
//! CLOSE. knfsd gets this for free by holding a `struct file` per open. sluice's file layer
//! does not hold files for opens, and on purpose answers NFS4ERR_STALE for a file whose link
//! count is 0 (v3's rule: there the client's own silly rename keeps the name alive), so the
//! handle of a removed file stops working at once.
//!
//! # What
//! REMOVE of a regular file that has open state renames it, in its directory, to
//! `.sluice-open-<fileid in hex>` instead of unlinking it, and records that name here. The
//! handle stays valid (same inode, one link), so the opens keep working; the name the client
//! removed is gone. When the file's last open ends the hidden name is unlinked:
//! ```text
//!   REMOVE name ─┬─ directory, or a file nobody has open ──▶ unlink as v3 does
//!                ├─ open, not parked yet ──▶ rename to .sluice-open-<fileid>, park
//!                └─ open, parked already (another link) ──▶ unlink this name only
//!   CLOSE ──▶ every parked file whose opens are all gone ──▶ unlink its hidden name
//! ```
//! Opens that end without CLOSE (a client expired, DESTROY_CLIENTID) are swept the same way at
//! the next CLOSE or REMOVE anyone sends. The Linux client does the same dance on its side
//! (`.nfsXXXX`), so in practice it never sends a REMOVE for an open file; other clients do.
//!
//! RENAME over a regular file someone has open parks the replaced file the same way, before
//! the rename: a hard link under the hidden name, so that the rename itself stays one atomic
//! replacement (where the file system refuses the link, the file is renamed away first and
//! the name is absent for a moment). If the rename then fails, the park is undone.
//! ```text
//!   RENAME a over b ─┬─ b absent, a directory, nobody's open, parked, or a link of a ──▶ rename
//!                    └─ b open ──▶ link b as .sluice-open-<fileid>, park ──▶ rename
//! ```
//!
//! Bound: one entry per open file, so never more than the open table's `opens_max`.
//! Not covered: a server restart (there is no restart recovery yet; a hidden name is then
//! left behind).

use crate::backend::{Caller, FileHandle};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// The hidden name a removed open file is kept under. The file id makes it unique per file
/// system, and a second REMOVE of another link to the same file finds it parked already.
pub fn hidden_name(fileid: u64) -> Vec<u8> {
    format!(".sluice-open-{fileid:016x}").into_bytes()
}

/// Where a removed open file is kept, and who removed it (the hidden name is unlinked with
/// the remover's identity: its REMOVE was permitted).
#[derive(Debug, Clone)]
pub struct Parked {
    /// The export's index.
    pub idx: usize,
    pub dir: FileHandle,
    pub name: Vec<u8>,
    pub caller: Caller,
}

/// The parked files, keyed as the open table keys files (the export handle's bytes).
#[derive(Debug, Default)]
pub struct ParkedFiles {
    files: Mutex<HashMap<Bytes, Parked>>,
}

impl ParkedFiles {
    pub fn is_parked(&self, file: &[u8]) -> bool {
        self.lock().contains_key(file)
    }

    pub fn park(&self, file: Bytes, p: Parked) {
        self.lock().insert(file, p);
    }

    /// Forgets `file` (a park that its rename then undid); its entry, if it was parked.
    pub fn unpark(&self, file: &[u8]) -> Option<Parked> {
        self.lock().remove(file)
    }

    /// Takes out the parked files that `is_open` says nobody has open any more; the caller
    /// unlinks their hidden names.
    pub fn take_closed(&self, is_open: impl Fn(&[u8]) -> bool) -> Vec<Parked> {
        let mut files = self.lock();
        let done: Vec<Bytes> = files.keys().filter(|f| !is_open(f)).cloned().collect();
        done.iter().filter_map(|f| files.remove(f)).collect()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Bytes, Parked>> {
        // A panic under the lock is a bug elsewhere; the map stays usable.
        self.files.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Cred;

    fn parked(name: &[u8]) -> Parked {
        Parked {
            idx: 0,
            dir: FileHandle::from_slice(&[1; 16]).unwrap(),
            name: name.to_vec(),
            caller: Caller::with_cred(Cred::new(1000, 1000)),
        }
    }

    #[test]
    fn hidden_names_are_per_file_and_hidden() {
        assert_eq!(hidden_name(0x2a), b".sluice-open-000000000000002a");
        assert_ne!(hidden_name(1), hidden_name(2));
    }

    #[test]
    fn only_files_nobody_has_open_are_taken() {
        let p = ParkedFiles::default();
        p.park(Bytes::from_static(b"a"), parked(b".a"));
        p.park(Bytes::from_static(b"b"), parked(b".b"));
        assert!(p.is_parked(b"a"));
        let taken = p.take_closed(|f| f == b"a");
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].name, b".b");
        assert!(p.is_parked(b"a") && !p.is_parked(b"b"));
        assert!(p.take_closed(|_| true).is_empty());
        assert_eq!(p.take_closed(|_| false).len(), 1);
        assert!(p.is_empty());
    }
}
