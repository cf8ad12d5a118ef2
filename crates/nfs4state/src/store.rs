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
//! # Conditional writes
//! A record several writers share (a cluster's grace record, [`crate::cluster`]) is changed by
//! read-modify-write: [`StateStore::get_versioned`] returns the record with its version, and
//! [`StateStore::put_if_version`] writes only if the record is still at that version, else
//! answers [`PutIf::Conflict`] and the writer reads again. A version is a number the store
//! raises on every change of the record (RADOS's object version, which
//! `rados_write_op_assert_version` checks, is one); version 0 means "no record", so a
//! conditional put at version 0 creates the record only if nobody else did. Stores that
//! cannot offer this (the single server's state directory) keep the default methods, which
//! refuse with an `Unsupported` backend error: a cluster cannot run over them.
//!
//! # Testing a store
//! [`check_contract`] is the rules above as one check; each implementation's tests run it over
//! a fresh store ([`MemStore`] here, the state directory's store in the server).
//!
//! # Bounds
//! Names are at most [`NAME_BYTES_MAX`] bytes of `[a-z0-9._:-]` (the colon for the cluster's
//! per-head client records, named as ganesha names its RADOS objects: `rec-<epoch>:<head>`); a reader names the most it
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

    /// The record `name` with its version (module notes, "Conditional writes"); version 0
    /// and no data when there is none. The default refuses: the store has no versions.
    fn get_versioned(&self, name: &str, bytes_max: usize) -> Result<Versioned, StoreError> {
        let _ = bytes_max;
        Err(unsupported(name))
    }

    /// Replaces the record `name` by `data` only if its version is still `version` (0: only
    /// if there is no record). The default refuses: the store has no versions.
    fn put_if_version(&self, name: &str, version: u64, data: &[u8]) -> Result<PutIf, StoreError> {
        let _ = (version, data);
        Err(unsupported(name))
    }
}

/// A record read with its version ([`StateStore::get_versioned`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The record, or `None` when there is none.
    pub data: Option<Vec<u8>>,
    /// Its version: 0 when there is none, raised by every change.
    pub version: u64,
}

/// What a conditional put did ([`StateStore::put_if_version`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutIf {
    /// Written; the record's new version.
    Written(u64),
    /// Not written: the record changed since it was read (its version now).
    Conflict(u64),
}

fn unsupported(name: &str) -> StoreError {
    StoreError::Backend {
        name: name.to_string(),
        source: std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "this store has no record versions",
        ),
    }
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
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-' | b':'));
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
/// "durable" at once; bounded by [`MEM_RECORDS_MAX`]. Versions come from one counter for the
/// whole store, so a record deleted and made again never returns to an earlier version.
#[derive(Debug, Default)]
pub struct MemStore {
    records: Mutex<Records>,
}

#[derive(Debug, Default)]
struct Records {
    map: BTreeMap<String, (Vec<u8>, u64)>,
    last_version: u64,
}

impl Records {
    fn put(&mut self, name: &str, data: &[u8]) -> Result<u64, StoreError> {
        if !self.map.contains_key(name) && self.map.len() >= MEM_RECORDS_MAX {
            return Err(StoreError::Full {
                name: name.to_string(),
            });
        }
        self.last_version += 1;
        self.map
            .insert(name.to_string(), (data.to_vec(), self.last_version));
        Ok(self.last_version)
    }
}

impl MemStore {
    /// The names of the records held, in order.
    pub fn names(&self) -> Vec<String> {
        self.lock().map.keys().cloned().collect()
    }

    fn lock(&self) -> MutexGuard<'_, Records> {
        // A panic under the lock is a bug elsewhere; the map stays usable.
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl StateStore for MemStore {
    fn get(&self, name: &str, bytes_max: usize) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.get_versioned(name, bytes_max)?.data)
    }

    fn put(&self, name: &str, data: &[u8]) -> Result<(), StoreError> {
        check_name(name)?;
        self.lock().put(name, data).map(|_| ())
    }

    fn delete(&self, name: &str) -> Result<(), StoreError> {
        check_name(name)?;
        self.lock().map.remove(name);
        Ok(())
    }

    fn get_versioned(&self, name: &str, bytes_max: usize) -> Result<Versioned, StoreError> {
        check_name(name)?;
        match self.lock().map.get(name) {
            None => Ok(Versioned {
                data: None,
                version: 0,
            }),
            Some((d, _)) if d.len() > bytes_max => Err(StoreError::TooLarge {
                name: name.to_string(),
                bytes_max,
            }),
            Some((d, v)) => Ok(Versioned {
                data: Some(d.clone()),
                version: *v,
            }),
        }
    }

    fn put_if_version(&self, name: &str, version: u64, data: &[u8]) -> Result<PutIf, StoreError> {
        check_name(name)?;
        let mut records = self.lock();
        let now = records.map.get(name).map_or(0, |(_, v)| *v);
        if now != version {
            return Ok(PutIf::Conflict(now));
        }
        records.put(name, data).map(PutIf::Written)
    }
}

/// The conditional-write contract ([`StateStore::put_if_version`]) over a fresh store, for
/// stores that offer versions (a cluster's). Panics at the first broken rule; for tests.
pub fn check_versioned_contract(store: &dyn StateStore) {
    let name = "contract-versioned";
    let none = store.get_versioned(name, 16).unwrap();
    assert_eq!(
        (none.data, none.version),
        (None, 0),
        "no record is version 0"
    );
    let v1 = match store.put_if_version(name, 0, b"one").unwrap() {
        PutIf::Written(v) => v,
        c => panic!("creating at version 0 must succeed: {c:?}"),
    };
    assert!(v1 > 0);
    assert!(
        matches!(store.put_if_version(name, 0, b"x"), Ok(PutIf::Conflict(v)) if v == v1),
        "a second creator loses"
    );
    let read = store.get_versioned(name, 16).unwrap();
    assert_eq!(
        (read.data.as_deref(), read.version),
        (Some(&b"one"[..]), v1)
    );
    let v2 = match store.put_if_version(name, v1, b"two").unwrap() {
        PutIf::Written(v) => v,
        c => panic!("a put at the current version must succeed: {c:?}"),
    };
    assert!(v2 > v1, "a change raises the version");
    assert!(
        matches!(store.put_if_version(name, v1, b"stale"), Ok(PutIf::Conflict(v)) if v == v2),
        "a put at a stale version is refused"
    );
    assert_eq!(store.get(name, 16).unwrap().unwrap(), b"two", "unchanged");
    store.put(name, b"three").unwrap();
    assert!(
        store.get_versioned(name, 16).unwrap().version > v2,
        "a plain put raises the version too"
    );
    store.delete(name).unwrap();
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
    fn the_memory_store_keeps_the_versioned_contract() {
        check_versioned_contract(&MemStore::default());
    }

    #[test]
    fn a_store_without_versions_refuses_conditional_writes() {
        #[derive(Debug)]
        struct Plain;
        impl StateStore for Plain {
            fn get(&self, _: &str, _: usize) -> Result<Option<Vec<u8>>, StoreError> {
                Ok(None)
            }
            fn put(&self, _: &str, _: &[u8]) -> Result<(), StoreError> {
                Ok(())
            }
            fn delete(&self, _: &str) -> Result<(), StoreError> {
                Ok(())
            }
        }
        assert!(matches!(
            Plain.put_if_version("grace", 0, b""),
            Err(StoreError::Backend { .. })
        ));
        assert!(Plain.get_versioned("grace", 1).is_err());
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
            "rec-0000000000000003:head-a",
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
