//! Stable client records: the owners of clients that may reclaim state after a restart
//! (RFC 8881 §8.4.2.1), kept in the state store as the record [`names::CLIENTS`].
//!
//! # Why
//! After a restart the server must tell a client that held state (and may reclaim it during
//! grace) from one that did not, and must not start a grace period at all when nobody held
//! state. knfsd keeps the same facts in its "recovery directory" (one entry per client, named
//! by a hash of the client owner) or hands them to `nfsdcld`: a record is created when a client
//! first establishes state (for minor version 1, at the client's RECLAIM_COMPLETE), before
//! the reply that makes the client rely on it, and removed when the client is destroyed or
//! expires. We write it at RECLAIM_COMPLETE and, for a client that skipped it, before its
//! first OPEN (when and why: [`crate::recovery`]). At start the records seed
//! [`crate::recovery::grace::Grace`].
//!
//! The same store keeps the last boot epoch ([`next_boot_epoch`]), so that a restart
//! within the same second still makes every earlier id stale.
//!
//! # Format and crash safety
//! One line per client owner, the owner's bytes in lowercase hex (an owner is opaque and may
//! hold any byte). Every change rewrites the whole record through [`StateStore::put`], which
//! is atomic: a crash at any point leaves either the old or the new list, never a torn one.
//! Rewriting whole is cheap at the sizes involved (a record changes when a client comes or
//! goes, not per op) and keeps reading trivial.
//!
//! The encoding and decoding are pure ([`encode`], [`decode`]) and tested apart;
//! [`StableClients`] keeps the set and writes it through the store.
//!
//! # Bounds
//! At most [`RECORDS_MAX`] records: an insert past that is refused (the caller
//! answers NFS4ERR_DELAY, as for a full client table). The record is read at most
//! [`FILE_BYTES_MAX`] bytes; a line that is not hex, or an owner over
//! [`OWNER_BYTES_MAX`], is skipped (a damaged line must not stop the server from starting).

use crate::recovery::grace::RECORDS_MAX;
use crate::store::{names, StateStore, StoreError};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

/// The record's name in the store (and the file's in a state directory).
pub const FILE_NAME: &str = names::CLIENTS;

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

/// The record holding the last instance's boot epoch (decimal), next to the client records.
pub const EPOCH_FILE_NAME: &str = names::BOOT_EPOCH;

/// This instance's boot epoch: the clock's seconds, unless the last instance (`last`) had
/// those or later (a restart within the same second, or a clock set back), then one more.
/// The epoch stamps client ids, session ids and stateids, so it must differ from every
/// earlier instance's for their ids to be recognised as stale (NFS4ERR_STALE_CLIENTID,
/// STALE_STATEID) rather than taken for this instance's (see [`crate::clients`]).
pub fn choose_epoch(now_secs: u32, last: Option<u32>) -> u32 {
    match last {
        Some(l) if now_secs <= l => l.wrapping_add(1).max(1),
        _ => now_secs.max(1),
    }
}

/// The longest boot epoch record read: a `u32` in decimal with a newline, and room for
/// whitespace a hand edit left.
const EPOCH_BYTES_MAX: usize = 32;

/// Picks this instance's boot epoch ([`choose_epoch`]) from the one kept in `store` (`now_secs`:
/// the wall clock's seconds, which the driver reads), and keeps it there durably before it is
/// used. A damaged record counts as none.
pub fn next_boot_epoch(store: &dyn StateStore, now_secs: u32) -> Result<u32, StoreError> {
    let last = match store.get(EPOCH_FILE_NAME, EPOCH_BYTES_MAX) {
        Ok(Some(b)) => std::str::from_utf8(&b)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok()),
        Ok(None) | Err(StoreError::TooLarge { .. }) => None,
        Err(e) => return Err(e),
    };
    let epoch = choose_epoch(now_secs, last);
    store.put(EPOCH_FILE_NAME, format!("{epoch}\n").as_bytes())?;
    Ok(epoch)
}

/// Where the COMPOUND processor keeps client records: [`StableClients`] in a server and in
/// simulations (over whichever [`StateStore`]). Each call returns once the change is durable.
pub trait ClientRecords: Send + Sync {
    /// Records `owner` (nothing to do when it is recorded already).
    fn insert(&self, owner: &[u8]) -> Result<(), StoreError>;
    /// Forgets `owner` (nothing to do when it is not recorded).
    fn remove(&self, owner: &[u8]) -> Result<(), StoreError>;
}

/// The stable client records in a [`StateStore`]: the set as last written, and the store it
/// is written through.
#[derive(Debug)]
pub struct StableClients {
    store: Arc<dyn StateStore>,
    owners: Mutex<BTreeSet<Vec<u8>>>,
}

impl StableClients {
    /// Opens the records in `store` (writing nothing until the first change). The owners read
    /// are what seeds grace. A record over [`FILE_BYTES_MAX`] is damaged: read as empty.
    pub fn open(store: Arc<dyn StateStore>) -> Result<Self, StoreError> {
        let text = match store.get(FILE_NAME, FILE_BYTES_MAX as usize) {
            Ok(t) => t.unwrap_or_default(),
            Err(StoreError::TooLarge { .. }) => Vec::new(),
            Err(e) => return Err(e),
        };
        Ok(Self {
            store,
            owners: Mutex::new(decode(&text)),
        })
    }

    /// The owners recorded, in order.
    pub fn owners(&self) -> Vec<Vec<u8>> {
        self.lock().iter().cloned().collect()
    }

    /// Whether `owner` is recorded.
    pub fn contains(&self, owner: &[u8]) -> bool {
        self.lock().contains(owner)
    }

    fn lock(&self) -> MutexGuard<'_, BTreeSet<Vec<u8>>> {
        // A panic under the lock is a bug elsewhere; the set stays usable.
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl ClientRecords for StableClients {
    /// Records `owner`, durably, before returning. Nothing is written when it is recorded
    /// already. Refused ([`StoreError::Full`]) past the bound or for an owner over
    /// [`OWNER_BYTES_MAX`]; the caller answers NFS4ERR_DELAY.
    fn insert(&self, owner: &[u8]) -> Result<(), StoreError> {
        let mut owners = self.lock();
        if owners.contains(owner) {
            return Ok(());
        }
        if owner.len() > OWNER_BYTES_MAX || owners.len() >= RECORDS_MAX {
            return Err(StoreError::Full {
                name: FILE_NAME.to_string(),
            });
        }
        owners.insert(owner.to_vec());
        if let Err(e) = self.store.put(FILE_NAME, &encode(owners.iter())) {
            owners.remove(owner);
            return Err(e);
        }
        Ok(())
    }

    /// Forgets `owner`, durably. Nothing is written when it was not recorded.
    fn remove(&self, owner: &[u8]) -> Result<(), StoreError> {
        let mut owners = self.lock();
        if !owners.remove(owner) {
            return Ok(());
        }
        self.store.put(FILE_NAME, &encode(owners.iter()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemStore;
    use proptest::prelude::*;

    #[test]
    fn the_boot_epoch_always_grows() {
        assert_eq!(choose_epoch(100, None), 100);
        assert_eq!(choose_epoch(100, Some(99)), 100);
        // A restart within the same second, or a clock set back: one more than the last.
        assert_eq!(choose_epoch(100, Some(100)), 101);
        assert_eq!(choose_epoch(50, Some(100)), 101);
        assert_eq!(choose_epoch(0, None), 1, "never 0");
        let store = MemStore::default();
        let a = next_boot_epoch(&store, 1000).unwrap();
        let b = next_boot_epoch(&store, 1000).unwrap();
        let c = next_boot_epoch(&store, 1000).unwrap();
        assert_eq!((a, b, c), (1000, 1001, 1002));
        assert_eq!(next_boot_epoch(&store, 5000).unwrap(), 5000);
        assert_eq!(store.get(EPOCH_FILE_NAME, 64).unwrap().unwrap(), b"5000\n");
    }

    #[test]
    fn a_damaged_epoch_record_counts_as_none() {
        let store = MemStore::default();
        store.put(EPOCH_FILE_NAME, b"not a number").unwrap();
        assert_eq!(next_boot_epoch(&store, 7).unwrap(), 7);
        store.put(EPOCH_FILE_NAME, &[b'9'; 100]).unwrap();
        assert_eq!(next_boot_epoch(&store, 8).unwrap(), 8);
    }

    #[test]
    fn damaged_lines_are_skipped() {
        let owners = decode(b"6162\nzz\n616\n\n00ff\n");
        let want: BTreeSet<Vec<u8>> = [b"ab".to_vec(), vec![0, 0xff]].into_iter().collect();
        assert_eq!(owners, want);
    }

    /// The records as any [`StateStore`] must keep them: what one instance inserted the next
    /// reads, a removal is kept.
    fn records_survive_reopen_and_removal_is_durable(store: Arc<dyn StateStore>) {
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
    }

    #[test]
    fn records_survive_reopen_and_removal_is_durable_in_memory() {
        records_survive_reopen_and_removal_is_durable(Arc::new(MemStore::default()));
    }

    #[test]
    fn an_owner_over_the_limit_is_refused() {
        let store = Arc::new(MemStore::default());
        let s = StableClients::open(store.clone()).unwrap();
        assert!(matches!(
            s.insert(&vec![1; OWNER_BYTES_MAX + 1]),
            Err(StoreError::Full { .. })
        ));
        assert!(store.names().is_empty(), "nothing written");
    }

    #[test]
    fn a_failed_write_records_nothing() {
        #[derive(Debug)]
        struct Broken;
        impl StateStore for Broken {
            fn get(&self, _: &str, _: usize) -> Result<Option<Vec<u8>>, StoreError> {
                Ok(None)
            }
            fn put(&self, name: &str, _: &[u8]) -> Result<(), StoreError> {
                Err(StoreError::Backend {
                    name: name.to_string(),
                    source: std::io::Error::other("disk gone"),
                })
            }
            fn delete(&self, _: &str) -> Result<(), StoreError> {
                Ok(())
            }
        }
        let s = StableClients::open(Arc::new(Broken)).unwrap();
        assert!(s.insert(b"c").is_err());
        assert!(!s.contains(b"c"));
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
