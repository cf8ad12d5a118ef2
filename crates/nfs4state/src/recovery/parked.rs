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
//! "Open" is the file's, whichever name it was opened by: the open table and this one key files
//! by `FileSystem::state_key`, the same for the handles of a file's hard links in different
//! directories, so removing the last name through another link than the opener's parks too.
//! Opens that end without CLOSE (a client expired, DESTROY_CLIENTID) are swept the same way at
//! the next CLOSE, REMOVE or RENAME anyone sends. The Linux client does the same dance on its side
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
//! # Where they live, and after a crash
//! A parked file stays in the directory it was removed from (a rename within a directory
//! cannot cross file systems and needs no permission beyond the REMOVE's own), under
//! `.sluice-open-` and 16 hex digits. READDIR leaves such names out, in v3 and v4 alike
//! ([`is_hidden_name`]), so clients never list them; LOOKUP of one still works.
//!
//! Opens do not survive a restart (there is no restart recovery yet), so neither should the
//! parked files: the server keeps a journal of them in its state store (the record
//! [`JOURNAL_NAME`], one line per file: export id, directory handle, hidden name),
//! rewritten whole at each change and written *before* the file is parked, so that a crash
//! at any point leaves no hidden name unrecorded. At start-up [`ParkedFiles::leftovers`]
//! reads it and the service unlinks each name that still is that file's hidden name
//! (`Nfs4::sweep_parked`), then empties the journal. Without a store (tests that build the
//! service in memory) there is no journal and nothing to sweep.
//!
//! This module is the bookkeeping: the table, the journal's format and its writes through
//! [`StateStore`]; the renames and unlinks are the COMPOUND processor's, through the
//! file-system layer.
//!
//! Bound: one entry per open file, so never more than the open table's `opens_max`; the
//! journal is read at most [`JOURNAL_BYTES_MAX`] bytes.

use crate::store::{names, StateStore, StoreError};
use bytes::Bytes;
use sluice_vfs::{Caller, ExportId, FileHandle};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The prefix of every hidden name.
const HIDDEN_PREFIX: &[u8] = b".sluice-open-";

/// The journal's name in the state store.
pub const JOURNAL_NAME: &str = names::PARKED;

/// The most of the journal read at start-up: 65,536 opens (the default `opens_max`) at about
/// 150 bytes a line is under 10 MiB; 16 MiB leaves room without trusting a damaged file's size.
pub const JOURNAL_BYTES_MAX: usize = 16 << 20;

/// The hidden name a removed open file is kept under. The file id makes it unique per file
/// system, and a second REMOVE of another link to the same file finds it parked already.
pub fn hidden_name(fileid: u64) -> Vec<u8> {
    format!(".sluice-open-{fileid:016x}").into_bytes()
}

/// Whether `name` is a hidden name of a parked file (`.sluice-open-` and 16 lowercase hex
/// digits, as [`hidden_name`] makes them): READDIR leaves these out. A client's own file of
/// exactly that shape is hidden too; nothing else is.
pub fn is_hidden_name(name: &[u8]) -> bool {
    fileid_of_hidden(name).is_some()
}

/// The file id a hidden name was made from.
fn fileid_of_hidden(name: &[u8]) -> Option<u64> {
    let hex = name.strip_prefix(HIDDEN_PREFIX)?;
    if hex.len() != 16 || !hex.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

/// A parked file left by an earlier run of the server, from its journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    pub export: ExportId,
    pub dir: FileHandle,
    pub name: Vec<u8>,
    /// The file id its hidden name says it had: the name is unlinked only if it still names
    /// that file.
    pub fileid: u64,
}

/// Where a removed open file is kept, and who removed it (the hidden name is unlinked with
/// the remover's identity: its REMOVE was permitted).
#[derive(Debug, Clone)]
pub struct Parked {
    /// The export's index.
    pub idx: usize,
    /// The export's id (what the journal records: the index may change across restarts).
    pub export: ExportId,
    pub dir: FileHandle,
    pub name: Vec<u8>,
    pub caller: Caller,
}

/// The parked files, keyed as the open table keys files (`FileSystem::state_key`), and
/// their journal.
#[derive(Debug, Default)]
pub struct ParkedFiles {
    files: Mutex<HashMap<Bytes, Parked>>,
    /// The store holding the journal; `None`: not kept across restarts.
    journal: Option<Arc<dyn StateStore>>,
}

impl ParkedFiles {
    /// Parked files recorded in the journal in `store` (see the module notes).
    pub fn with_store(store: Arc<dyn StateStore>) -> Self {
        ParkedFiles {
            files: Mutex::default(),
            journal: Some(store),
        }
    }

    pub fn is_parked(&self, file: &[u8]) -> bool {
        self.lock().contains_key(file)
    }

    /// Records `file` as parked, in the journal first: call it before the file gets its
    /// hidden name, and [`ParkedFiles::unpark`] if that then fails. An error writing the
    /// journal parks nothing.
    pub fn park(&self, file: Bytes, p: Parked) -> Result<(), StoreError> {
        let mut files = self.lock();
        files.insert(file.clone(), p);
        if let Err(e) = self.write_journal(&files) {
            files.remove(&file);
            return Err(e);
        }
        Ok(())
    }

    /// Forgets `file` (a park that its rename then undid); its entry, if it was parked.
    pub fn unpark(&self, file: &[u8]) -> Option<Parked> {
        let mut files = self.lock();
        let p = files.remove(file)?;
        // A stale line is harmless: the sweep unlinks only a name that still is the file's
        // hidden name.
        let _ = self.write_journal(&files);
        Some(p)
    }

    /// Takes out the parked files that `is_open` says nobody has open any more; the caller
    /// unlinks their hidden names.
    pub fn take_closed(&self, is_open: impl Fn(&[u8]) -> bool) -> Vec<Parked> {
        let mut files = self.lock();
        let done: Vec<Bytes> = files.keys().filter(|f| !is_open(f)).cloned().collect();
        let out: Vec<Parked> = done.iter().filter_map(|f| files.remove(f)).collect();
        if !out.is_empty() {
            let _ = self.write_journal(&files);
        }
        out
    }

    /// The parked files an earlier run left in the journal, which is emptied (call once, at
    /// start-up, before anything is parked). Lines that do not parse are skipped.
    pub fn leftovers(&self) -> Vec<Leftover> {
        let Some(store) = &self.journal else {
            return Vec::new();
        };
        let Ok(Some(text)) = store.get(JOURNAL_NAME, JOURNAL_BYTES_MAX) else {
            return Vec::new();
        };
        let out = text.split(|&b| b == b'\n').filter_map(parse_line).collect();
        let _ = self.write_journal(&self.lock());
        out
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

    /// Rewrites the journal with `files` (the store replaces a record atomically, so a crash
    /// leaves one or the other whole). Parking is rare (a REMOVE or RENAME of an open file),
    /// so a whole rewrite, at most `opens_max` lines, costs less than keeping an append log
    /// tidy.
    fn write_journal(&self, files: &HashMap<Bytes, Parked>) -> Result<(), StoreError> {
        let Some(store) = &self.journal else {
            return Ok(());
        };
        let mut text = Vec::new();
        for p in files.values() {
            text.extend_from_slice(format!("{:08x} ", p.export.0).as_bytes());
            for b in p.dir.as_bytes() {
                text.extend_from_slice(format!("{b:02x}").as_bytes());
            }
            text.push(b' ');
            text.extend_from_slice(&p.name);
            text.push(b'\n');
        }
        store.put(JOURNAL_NAME, &text)
    }
}

/// One journal line: `<export id, 8 hex> <directory handle, hex> <hidden name>`.
fn parse_line(line: &[u8]) -> Option<Leftover> {
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split(' ');
    let export = ExportId(u32::from_str_radix(parts.next()?, 16).ok()?);
    let hex = parts.next()?;
    if hex.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect();
    let dir = FileHandle::from_slice(&bytes?).ok()?;
    let name = parts.next()?.as_bytes().to_vec();
    let fileid = fileid_of_hidden(&name)?;
    if parts.next().is_some() {
        return None;
    }
    Some(Leftover {
        export,
        dir,
        name,
        fileid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemStore;
    use sluice_vfs::Cred;

    fn parked(name: &[u8]) -> Parked {
        Parked {
            idx: 0,
            export: ExportId(7),
            dir: FileHandle::from_slice(&[1; 16]).unwrap(),
            name: name.to_vec(),
            caller: Caller::with_cred(Cred::new(1000, 1000)),
        }
    }

    #[test]
    fn hidden_names_are_per_file_and_hidden() {
        assert_eq!(hidden_name(0x2a), b".sluice-open-000000000000002a");
        assert_ne!(hidden_name(1), hidden_name(2));
        assert!(is_hidden_name(&hidden_name(u64::MAX)));
        assert_eq!(fileid_of_hidden(&hidden_name(0x2a)), Some(0x2a));
        for other in [
            &b".sluice-open-"[..],
            b".sluice-open-000000000000002",
            b".sluice-open-000000000000002A",
            b".sluice-open-000000000000002a0",
            b"sluice-open-000000000000002a",
            b"file",
        ] {
            assert!(
                !is_hidden_name(other),
                "{:?}",
                String::from_utf8_lossy(other)
            );
        }
    }

    /// The journal lists what is parked, and the next run gets it back once (then it is
    /// empty); a damaged line is skipped, not fatal.
    #[test]
    fn the_journal_gives_an_earlier_runs_parked_files_back_once() {
        let store = Arc::new(MemStore::default());
        let run1 = ParkedFiles::with_store(store.clone());
        run1.park(Bytes::from_static(b"a"), parked(&hidden_name(0xa)))
            .unwrap();
        run1.park(Bytes::from_static(b"b"), parked(&hidden_name(0xb)))
            .unwrap();
        assert_eq!(run1.take_closed(|f| f == b"a").len(), 1);
        // The crash: run 1 never closes `a`. A damaged line is appended.
        let mut text = store.get(JOURNAL_NAME, JOURNAL_BYTES_MAX).unwrap().unwrap();
        text.extend_from_slice(b"zz 0102 .sluice-open-x\n");
        store.put(JOURNAL_NAME, &text).unwrap();
        let run2 = ParkedFiles::with_store(store.clone());
        let left = run2.leftovers();
        assert_eq!(
            left,
            [Leftover {
                export: ExportId(7),
                dir: FileHandle::from_slice(&[1; 16]).unwrap(),
                name: hidden_name(0xa),
                fileid: 0xa,
            }]
        );
        assert!(run2.leftovers().is_empty(), "given back once");
    }

    #[test]
    fn only_files_nobody_has_open_are_taken() {
        let p = ParkedFiles::default();
        p.park(Bytes::from_static(b"a"), parked(b".a")).unwrap();
        p.park(Bytes::from_static(b"b"), parked(b".b")).unwrap();
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
