//! The state store: where the NFSv4 state that must outlive the server instance is kept.
//!
//! # What is kept, and why
//! Almost all NFSv4 state lives and dies with the instance: a client reclaims its opens and
//! locks after a restart (RFC 8881 §8.4.2), so they need not be written anywhere. Three facts
//! must survive, each a small record rewritten whole when it changes:
//!
//! | record ([`names`]) | what | written | read |
//! |---|---|---|---|
//! | [`names::CLIENTS`] | the owners of clients that may reclaim ([`crate::recovery::records`]) | a client's first state, its expiry or destruction | at start: who grace waits for |
//! | [`names::BOOT_EPOCH`] | the last instance's boot epoch ([`crate::recovery::records::next_boot_epoch`]) | once at start | once at start |
//! | [`names::PARKED`] | files kept under a hidden name after REMOVE/RENAME ([`crate::recovery::parked`]) | a park and its end | at start: hidden names to unlink |
//! | `nsm-state`, `nsm-hosts` | NSM's state number and the NLM client hosts it monitors ([`crate::nlm::monitor`]) | once at start; a host's first lock | at start: whom to notify of the restart |
//!
//! # The seam
//! ```text
//!   cores (pure) ── encode / decode records ──▶ dyn StateStore ──┬─ MemStore (here): tests, simulator
//!                                                                 ├─ the state directory (server driver)
//!                                                                 └─ a cluster's object store (later)
//! ```
//! The trait speaks only of records: bytes under a flat name. Nothing in it is a path, a
//! file descriptor or a directory, so a store over a shared object store (RADOS: one object
//! per record, or per-head names such as `nfs4-clients.<head>`) implements it as it is. It is
//! object-safe and `Send + Sync`, so the COMPOUND processor holds one `Arc<dyn StateStore>`
//! without knowing which. Each call returns once its change is durable: a store answers `Ok`
//! to [`StateStore::put`] only when a crash right after leaves the new record, and a crash at
//! any earlier point leaves the old one whole (never a torn record).
//!
//! # Errors
//! [`StoreError`] says what the caller can act on: a record too large for the reader's bound
//! (damaged or hostile, the caller starts without it or refuses), a record the store has no
//! room for, and a failure of the backing storage (the caller answers NFS4ERR_DELAY and the
//! client retries, or the server refuses to start). The backing storage's own error travels
//! as an `io::Error` source, the common currency of OS and cluster client libraries alike.
//!
//! # Testing a store
//! [`check_contract`] is the rules above as one check; each implementation's tests run it over
//! a fresh store ([`MemStore`] here, the state directory's store in the server).
//!
//! # Bounds
//! Names are at most [`NAME_BYTES_MAX`] bytes of `[a-z0-9._-]`; a reader names the most it
//! will take of a record (`bytes_max`), so a damaged record cannot make the server read
//! without end. [`MemStore`] also bounds its record count ([`MEM_RECORDS_MAX`]).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// The records the NFSv4 server keeps (module notes). The names are the state directory's
/// file names of earlier releases, so an upgraded server reads what an older one wrote.
pub mod names {
    /// Client owners that may reclaim after a restart, one hex line each.
    pub const CLIENTS: &str = "nfs4-clients";
    /// The last instance's boot epoch, decimal.
    pub const BOOT_EPOCH: &str = "nfs4-boot-epoch";
    /// Files kept open after REMOVE/RENAME: export id, directory handle, hidden name a line.
    pub const PARKED: &str = "nfs4-parked";
}

/// The longest record name. 64 bytes holds every name above with room for a cluster head's
/// suffix, and is short enough for any object store's key.
pub const NAME_BYTES_MAX: usize = 64;

/// Records a [`MemStore`] holds at most: the three kinds above, per head of a small cluster.
pub const MEM_RECORDS_MAX: usize = 64;

/// Where records that outlive an instance are kept (module notes). Implementations:
/// [`MemStore`]; the server's state directory; later a cluster's object store.
pub trait StateStore: Send + Sync + std::fmt::Debug {
    /// The record `name`, or `None` when there is none. [`StoreError::TooLarge`] when it is
    /// longer than `bytes_max`.
    fn get(&self, name: &str, bytes_max: usize) -> Result<Option<Vec<u8>>, StoreError>;

    /// Replaces the record `name` by `data` (creating it), durably, atomically: after a crash
    /// the record is the old one or the new one, whole.
    fn put(&self, name: &str, data: &[u8]) -> Result<(), StoreError>;

    /// Removes the record `name`, durably (nothing to do when there is none).
    fn delete(&self, name: &str) -> Result<(), StoreError>;
}

/// Why a store refused (module notes).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The name is not a record name (empty, too long, or a byte outside `[a-z0-9._-]`).
    #[error("not a record name: {name:?}")]
    BadName { name: String },
    /// The record is longer than its reader takes.
    #[error("record {name} is over {bytes_max} bytes")]
    TooLarge { name: String, bytes_max: usize },
    /// The store has no room for another record, or the record is over a bound of its own
    /// kind (a client owner over its limit, more records than grace can track).
    #[error("no room for record {name}")]
    Full { name: String },
    /// The backing storage failed.
    #[error("record {name}: {source}")]
    Backend {
        name: String,
        #[source]
        source: std::io::Error,
    },
}

/// Checks a record name against the rules of [`StateStore`] (module notes); stores call it
/// before touching their backing storage.
pub fn check_name(name: &str) -> Result<(), StoreError> {
    let ok = !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(StoreError::BadName {
            name: name.to_string(),
        })
    }
}

/// Records in memory: for tests and the simulator, where a "restart" builds a new server
/// instance over the same store (the "disk" that survives a simulated crash). Every change is
/// "durable" at once; bounded by [`MEM_RECORDS_MAX`].
#[derive(Debug, Default)]
pub struct MemStore {
    records: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl MemStore {
    /// The names of the records held, in order.
    pub fn names(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
        // A panic under the lock is a bug elsewhere; the map stays usable.
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl StateStore for MemStore {
    fn get(&self, name: &str, bytes_max: usize) -> Result<Option<Vec<u8>>, StoreError> {
        check_name(name)?;
        match self.lock().get(name) {
            None => Ok(None),
            Some(d) if d.len() > bytes_max => Err(StoreError::TooLarge {
                name: name.to_string(),
                bytes_max,
            }),
            Some(d) => Ok(Some(d.clone())),
        }
    }

    fn put(&self, name: &str, data: &[u8]) -> Result<(), StoreError> {
        check_name(name)?;
        let mut records = self.lock();
        if !records.contains_key(name) && records.len() >= MEM_RECORDS_MAX {
            return Err(StoreError::Full {
                name: name.to_string(),
            });
        }
        records.insert(name.to_string(), data.to_vec());
        Ok(())
    }

    fn delete(&self, name: &str) -> Result<(), StoreError> {
        check_name(name)?;
        self.lock().remove(name);
        Ok(())
    }
}

/// The contract every [`StateStore`] keeps, as one check a store's own tests call over a fresh,
/// empty store: the memory store's here, the state directory's in the server, and the next
/// implementation's (a cluster's) the same way. Panics at the first broken rule; for tests.
pub fn check_contract(store: &dyn StateStore) {
    let name = "contract-check";
    assert!(
        store.get(name, 16).unwrap().is_none(),
        "a fresh store has no record"
    );
    store.put(name, b"first").unwrap();
    assert_eq!(store.get(name, 16).unwrap().unwrap(), b"first");
    store.put(name, b"2nd").unwrap();
    assert_eq!(
        store.get(name, 16).unwrap().unwrap(),
        b"2nd",
        "a put replaces the record whole"
    );
    store.put(name, b"").unwrap();
    assert_eq!(
        store.get(name, 16).unwrap().unwrap(),
        b"",
        "an empty record is a record"
    );
    store.put(name, &[7; 10]).unwrap();
    assert!(
        store.get(name, 10).unwrap().is_some(),
        "a record at the bound is read"
    );
    assert!(
        matches!(
            store.get(name, 9),
            Err(StoreError::TooLarge { bytes_max: 9, .. })
        ),
        "a record over the reader's bound is refused"
    );
    store.delete(name).unwrap();
    assert!(
        store.get(name, 16).unwrap().is_none(),
        "a deleted record is gone"
    );
    store.delete(name).unwrap();
    for bad in ["", "a/b", "../x", ".hidden", "UPPER"] {
        assert!(
            matches!(store.put(bad, b""), Err(StoreError::BadName { .. })),
            "{bad:?} is not a record name"
        );
        assert!(matches!(store.get(bad, 1), Err(StoreError::BadName { .. })));
        assert!(matches!(store.delete(bad), Err(StoreError::BadName { .. })));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_store_keeps_the_contract() {
        check_contract(&MemStore::default());
    }

    #[test]
    fn a_record_is_read_back_replaced_and_deleted() {
        let s = MemStore::default();
        assert!(s.get(names::CLIENTS, 100).unwrap().is_none());
        s.put(names::CLIENTS, b"6162\n").unwrap();
        assert_eq!(s.get(names::CLIENTS, 100).unwrap().unwrap(), b"6162\n");
        s.put(names::CLIENTS, b"").unwrap();
        assert_eq!(s.get(names::CLIENTS, 100).unwrap().unwrap(), b"");
        s.delete(names::CLIENTS).unwrap();
        s.delete(names::CLIENTS).unwrap();
        assert!(s.get(names::CLIENTS, 100).unwrap().is_none());
    }

    #[test]
    fn a_record_over_the_readers_bound_is_refused() {
        let s = MemStore::default();
        s.put(names::PARKED, &[b'x'; 10]).unwrap();
        assert!(matches!(
            s.get(names::PARKED, 9),
            Err(StoreError::TooLarge { bytes_max: 9, .. })
        ));
        assert!(s.get(names::PARKED, 10).unwrap().is_some());
    }

    #[test]
    fn names_are_flat_and_bounded() {
        for bad in [
            "",
            "a/b",
            "../x",
            ".hidden",
            "UPPER",
            &"n".repeat(NAME_BYTES_MAX + 1),
        ] {
            assert!(
                matches!(check_name(bad), Err(StoreError::BadName { .. })),
                "{bad:?}"
            );
        }
        for good in [
            names::CLIENTS,
            names::BOOT_EPOCH,
            names::PARKED,
            "nfs4-clients.head-2",
        ] {
            check_name(good).unwrap();
        }
    }

    #[test]
    fn the_memory_store_is_bounded() {
        let s = MemStore::default();
        for i in 0..MEM_RECORDS_MAX {
            s.put(&format!("r{i}"), b"").unwrap();
        }
        assert!(matches!(
            s.put("one-more", b""),
            Err(StoreError::Full { .. })
        ));
        s.put("r0", b"replacing is not growing").unwrap();
    }

    #[test]
    fn the_trait_is_object_safe() {
        let s: std::sync::Arc<dyn StateStore> = std::sync::Arc::new(MemStore::default());
        s.put(names::BOOT_EPOCH, b"7\n").unwrap();
        assert_eq!(s.get(names::BOOT_EPOCH, 16).unwrap().unwrap(), b"7\n");
    }
}
