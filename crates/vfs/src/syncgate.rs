//! The sync gate: which COMMIT needs an `fdatasync`, and which can take the answer of one that
//! is already running or already ran. Pure: file keys and events in, decisions out; the driver
//! ([`SyncDriver`]) adds the lock, the wake-ups and the system call.
//!
//! # Why
//! An untar through an NFS client ends every file with a COMMIT (or a CLOSE that flushes with
//! one), and a client that retries, or several processes closing the same file, send more
//! COMMITs than there were writes. Each `fdatasync` costs a journal commit and a disk-cache
//! flush even when the file has nothing dirty (ext4 still issues the flush), so a COMMIT of a
//! file whose data is already stable should not sync again, and COMMITs of one file that arrive
//! while its sync runs should share the next one instead of queueing one each.
//!
//! # The rule, by generations
//! Per file (a `(dev, ino)` key) the gate counts `written`: bumped by [`SyncGate::note_written`]
//! *after* a call that changed the file's data or size returned (WRITE's `pwritev`, a
//! write-behind flush, ALLOCATE, COPY, CLONE, a truncating SETATTR) and before its reply
//! leaves. A sync that starts when `written == g` covers every change counted up to `g`: those
//! calls returned before it started, so their pages were in the page cache (or on the disk)
//! for it to write. When it succeeds the file's `synced` becomes `g`.
//!
//! ```text
//!   COMMIT arrives ─► need = written
//!      synced ≥ need ──────────────────────────────► Clean: no sync (nothing new since one)
//!      a sync running that started at g ≥ need ────► Join: its result is this COMMIT's
//!      a sync running that started at g < need ───► Wait for it, then decide again
//!      no sync running ────────────────────────────► Lead: sync now, as g = written
//! ```
//! One sync thus answers every COMMIT that arrived before it started (they are the ones whose
//! `need` it reaches), and those arriving while it runs wait for a single next one together.
//!
//! **Nothing lost:** a COMMIT is answered OK only by a successful sync that started after
//! every change it needs had returned, which is what its own `fdatasync` would have given.
//! A file the gate does not know (never seen, or forgotten to stay within the limit) has no
//! `synced`, so its first COMMIT syncs: forgetting is always safe. A failed sync records
//! nothing, and every COMMIT that joined it fails with it: the kernel reports a writeback
//! error to one `fdatasync` only, so a joiner that synced again on its own would be told OK
//! about the lost pages.
//!
//! # Why not one `syncfs` for many files
//! A batch of COMMITs of *different* files could be answered by `sync_file_range` on each and
//! a single `syncfs`. The proof is not the same: `syncfs` writes and waits for every dirty page
//! of the whole file system (other clients' unrelated, uncommitted data included, so its cost
//! is not bounded by the batch), and a writeback error it reports (Linux ≥ 5.8; none before)
//! belongs to the file system, not to a file, so one bad file would fail every COMMIT of the
//! batch or, worse, on older kernels none. Concurrent `fdatasync`s of different files already
//! share a journal commit in ext4 and XFS (group commit), which is the saving `syncfs` would
//! have offered. So different files keep their own `fdatasync`; only COMMITs of one file share.
//!
//! # Bounds
//! At most `limit` files are tracked. A new file beyond it evicts the oldest idle entry (no sync
//! running, nobody waiting); when every entry is busy the COMMIT syncs untracked
//! ([`Decision::Lead`] with no key kept), so the table never grows past its limit.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Condvar, Mutex};

/// Files tracked by default: the open-file cache's default bound
/// ([`crate::openfiles::OPEN_FILES_DEFAULT`]) times four, since a file stays interesting after
/// its descriptor is closed (a COMMIT after the client's CLOSE). 4096 entries are ~200 KiB.
pub const SYNC_FILES_DEFAULT: usize = 4096;

/// What a COMMIT does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nothing changed since a successful sync: answer at once.
    Clean,
    /// Run the sync; report it with [`SyncGate::end_sync`] and this `round`.
    Lead { round: u64 },
    /// A sync is running: wait until it ends, then ask [`SyncGate::after_wait`]. `joined`: that
    /// sync covers this COMMIT, and its result is the COMMIT's.
    Wait { round: u64, joined: bool },
}

/// What a COMMIT that waited learns once the sync it waited for ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterWait {
    /// Covered by a successful sync.
    Done,
    /// The sync it joined failed: the COMMIT fails too.
    Failed,
    /// Not covered yet: decide again (it may lead the next sync or wait again).
    Again(Decision),
}

#[derive(Debug, Default)]
struct FileSync {
    written: u64,
    /// `written` when the last successful sync started; `None`: no sync known.
    synced: Option<u64>,
    /// The running sync: its round and the `written` it started at.
    running: Option<(u64, u64)>,
    /// COMMITs waiting for a sync to end.
    waiters: u32,
    /// Results (round, ok) of syncs that ended while COMMITs waited on them; emptied when the
    /// last waiter has read its result.
    ended: Vec<(u64, bool)>,
}

impl FileSync {
    fn idle(&self) -> bool {
        self.running.is_none() && self.waiters == 0
    }
}

/// The pure core: per-file generations, the running sync and its round numbers.
#[derive(Debug)]
pub struct SyncGate<K> {
    files: HashMap<K, FileSync>,
    /// Insertion order, the eviction candidates (may name keys already removed).
    order: VecDeque<K>,
    limit: usize,
    next_round: u64,
}

impl<K: Eq + Hash + Clone> SyncGate<K> {
    pub fn new(limit: usize) -> Self {
        SyncGate {
            files: HashMap::new(),
            order: VecDeque::new(),
            limit: limit.max(1),
            next_round: 1,
        }
    }

    /// A call that changed `key`'s data or size has returned (before its reply leaves).
    /// Unknown files stay unknown: they are synced on their first COMMIT anyway.
    pub fn note_written(&mut self, key: &K) {
        if let Some(f) = self.files.get_mut(key) {
            f.written += 1;
        }
    }

    /// The file is gone (removed, renamed over): forget what is known of it, so a new file
    /// that reuses the inode number starts unknown. A file with a sync running or waiters
    /// stays until they are done (its next change makes it dirty as usual).
    pub fn forget(&mut self, key: &K) {
        if self.files.get(key).is_some_and(FileSync::idle) {
            self.files.remove(key);
        }
    }

    /// A COMMIT of `key` arrives. Returns its `need` (keep it for [`SyncGate::after_wait`])
    /// and what to do.
    pub fn begin(&mut self, key: &K) -> (u64, Decision) {
        if !self.files.contains_key(key) && !self.make_room() {
            // Every entry busy: sync without tracking (the round is never recorded).
            return (0, Decision::Lead { round: 0 });
        }
        let f = self.files.entry(key.clone()).or_insert_with(|| {
            self.order.push_back(key.clone());
            FileSync::default()
        });
        let need = f.written;
        (need, Self::decide(f, need, &mut self.next_round))
    }

    /// The sync of `round` for `key` ended (`ok`: it succeeded).
    pub fn end_sync(&mut self, key: &K, round: u64, ok: bool) {
        if round == 0 {
            return;
        }
        let Some(f) = self.files.get_mut(key) else {
            return;
        };
        let Some((r, started)) = f.running else {
            return;
        };
        if r != round {
            return;
        }
        f.running = None;
        if ok {
            f.synced = Some(f.synced.map_or(started, |s| s.max(started)));
        }
        if f.waiters > 0 {
            f.ended.push((round, ok));
        }
    }

    /// A COMMIT that waited on `round` (with `joined` from its [`Decision::Wait`]) wakes up.
    /// Returns `None` while that round still runs (a spurious wake-up: wait again).
    pub fn after_wait(
        &mut self,
        key: &K,
        need: u64,
        round: u64,
        joined: bool,
    ) -> Option<AfterWait> {
        let f = self.files.get_mut(key)?;
        let &(_, ok) = f.ended.iter().find(|(r, _)| *r == round)?;
        f.waiters -= 1;
        if f.waiters == 0 {
            f.ended.clear();
        }
        if joined {
            return Some(if ok {
                AfterWait::Done
            } else {
                AfterWait::Failed
            });
        }
        Some(match Self::decide(f, need, &mut self.next_round) {
            Decision::Clean => AfterWait::Done,
            d => AfterWait::Again(d),
        })
    }

    /// Files tracked now.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// COMMITs waiting on `key`'s running sync.
    pub fn waiters(&self, key: &K) -> u32 {
        self.files.get(key).map_or(0, |f| f.waiters)
    }

    fn decide(f: &mut FileSync, need: u64, next_round: &mut u64) -> Decision {
        if f.synced.is_some_and(|s| s >= need) {
            return Decision::Clean;
        }
        if let Some((round, started)) = f.running {
            f.waiters += 1;
            return Decision::Wait {
                round,
                joined: started >= need,
            };
        }
        let round = *next_round;
        *next_round += 1;
        f.running = Some((round, f.written));
        Decision::Lead { round }
    }

    /// Room for one more entry: evicts the oldest idle one if full. False when all are busy.
    fn make_room(&mut self) -> bool {
        // Each key is examined at most once per call, so a table of busy entries costs one pass.
        let mut left = self.order.len();
        while self.files.len() >= self.limit && left > 0 {
            left -= 1;
            let Some(k) = self.order.pop_front() else {
                break;
            };
            match self.files.get(&k) {
                Some(f) if !f.idle() => self.order.push_back(k),
                Some(_) => {
                    self.files.remove(&k);
                }
                None => {}
            }
        }
        // Drop stale names so the order queue stays near the table's size.
        if self.order.len() > 2 * self.limit {
            let files = &self.files;
            self.order.retain(|k| files.contains_key(k));
        }
        self.files.len() < self.limit
    }
}

/// Counts of what the gate decided, for tests and statistics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SyncCounts {
    /// Syncs run (led).
    pub synced: u64,
    /// COMMITs answered without a sync of their own: clean, or joined one that covered them.
    pub spared: u64,
}

/// The driver: the gate behind a lock, COMMITs of one file waiting on a condition variable
/// (they run on blocking threads, where an `fdatasync` would block them anyway).
pub struct SyncDriver<K> {
    gate: Mutex<SyncGate<K>>,
    ended: Condvar,
    counts: Mutex<SyncCounts>,
}

impl<K: Eq + Hash + Clone> SyncDriver<K> {
    pub fn new(limit: usize) -> Self {
        SyncDriver {
            gate: Mutex::new(SyncGate::new(limit)),
            ended: Condvar::new(),
            counts: Mutex::new(SyncCounts::default()),
        }
    }

    /// See [`SyncGate::note_written`].
    pub fn note_written(&self, key: &K) {
        self.lock().note_written(key);
    }

    /// See [`SyncGate::forget`].
    pub fn forget(&self, key: &K) {
        self.lock().forget(key);
    }

    /// Makes `key` durable as a COMMIT needs it: runs `sync` (the `fdatasync`), or waits for a
    /// running one, or nothing when the file is clean. Errors are `sync`'s, shared by the
    /// COMMITs that joined it.
    pub fn commit<E>(
        &self,
        key: &K,
        mut sync: impl FnMut() -> Result<(), E>,
    ) -> Result<(), Option<E>> {
        let mut gate = self.lock();
        let (need, mut decision) = gate.begin(key);
        loop {
            match decision {
                Decision::Clean => {
                    drop(gate);
                    self.count(|c| c.spared += 1);
                    return Ok(());
                }
                Decision::Lead { round } => {
                    drop(gate);
                    self.count(|c| c.synced += 1);
                    let r = sync();
                    self.lock().end_sync(key, round, r.is_ok());
                    self.ended.notify_all();
                    return r.map_err(Some);
                }
                Decision::Wait { round, joined } => {
                    let after = loop {
                        if let Some(a) = gate.after_wait(key, need, round, joined) {
                            break a;
                        }
                        gate = self.ended.wait(gate).unwrap_or_else(|p| p.into_inner());
                    };
                    match after {
                        AfterWait::Done => {
                            drop(gate);
                            self.count(|c| c.spared += 1);
                            return Ok(());
                        }
                        // The leader holds the error itself; a joiner reports that it failed.
                        AfterWait::Failed => return Err(None),
                        AfterWait::Again(d) => decision = d,
                    }
                }
            }
        }
    }

    pub fn counts(&self) -> SyncCounts {
        *self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// COMMITs waiting on `key`'s running sync (lets a test hold a sync until one joined).
    pub fn waiters(&self, key: &K) -> u32 {
        self.lock().waiters(key)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SyncGate<K>> {
        self.gate.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count(&self, f: impl FnOnce(&mut SyncCounts)) {
        f(&mut self.counts.lock().unwrap_or_else(|p| p.into_inner()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
    use std::sync::Arc;

    #[test]
    fn an_unknown_file_syncs_and_a_second_commit_with_no_write_between_does_not() {
        let mut g = SyncGate::new(8);
        let (_, d) = g.begin(&1);
        let Decision::Lead { round } = d else {
            panic!("{d:?}")
        };
        g.end_sync(&1, round, true);
        assert_eq!(g.begin(&1).1, Decision::Clean);
    }

    #[test]
    fn a_write_after_the_sync_makes_the_next_commit_sync() {
        let mut g = SyncGate::new(8);
        let Decision::Lead { round } = g.begin(&1).1 else {
            panic!()
        };
        g.end_sync(&1, round, true);
        g.note_written(&1);
        assert!(matches!(g.begin(&1).1, Decision::Lead { .. }));
    }

    #[test]
    fn a_write_that_returns_while_the_sync_runs_is_not_covered_by_it() {
        let mut g = SyncGate::new(8);
        let Decision::Lead { round } = g.begin(&1).1 else {
            panic!()
        };
        g.note_written(&1); // returned after the sync started
        g.end_sync(&1, round, true);
        assert!(matches!(g.begin(&1).1, Decision::Lead { .. }));
    }

    #[test]
    fn commits_arriving_while_a_sync_runs_join_it_when_nothing_was_written_since_it_started() {
        let mut g = SyncGate::new(8);
        let Decision::Lead { round } = g.begin(&7).1 else {
            panic!()
        };
        let (n1, d1) = g.begin(&7);
        let (n2, d2) = g.begin(&7);
        assert_eq!(
            d1,
            Decision::Wait {
                round,
                joined: true
            }
        );
        assert_eq!(
            d2,
            Decision::Wait {
                round,
                joined: true
            }
        );
        assert_eq!(g.after_wait(&7, n1, round, true), None, "still running");
        g.end_sync(&7, round, true);
        assert_eq!(g.after_wait(&7, n1, round, true), Some(AfterWait::Done));
        assert_eq!(g.after_wait(&7, n2, round, true), Some(AfterWait::Done));
        assert_eq!(g.waiters(&7), 0);
        assert!(g.files[&7].ended.is_empty());
    }

    #[test]
    fn commits_after_a_write_during_a_sync_share_one_next_sync() {
        let mut g = SyncGate::new(8);
        let Decision::Lead { round: r1 } = g.begin(&7).1 else {
            panic!()
        };
        g.note_written(&7);
        let (n1, d1) = g.begin(&7);
        let (n2, d2) = g.begin(&7);
        assert_eq!(
            d1,
            Decision::Wait {
                round: r1,
                joined: false
            }
        );
        assert_eq!(
            d2,
            Decision::Wait {
                round: r1,
                joined: false
            }
        );
        g.end_sync(&7, r1, true);
        let Some(AfterWait::Again(Decision::Lead { round: r2 })) = g.after_wait(&7, n1, r1, false)
        else {
            panic!()
        };
        // The second waiter now waits for (and is covered by) the first waiter's sync.
        let Some(AfterWait::Again(Decision::Wait { round, joined })) =
            g.after_wait(&7, n2, r1, false)
        else {
            panic!()
        };
        assert_eq!((round, joined), (r2, true));
        g.end_sync(&7, r2, true);
        assert_eq!(g.after_wait(&7, n2, r2, true), Some(AfterWait::Done));
        assert_eq!(g.begin(&7).1, Decision::Clean);
    }

    #[test]
    fn a_failed_sync_fails_its_joiners_and_records_nothing() {
        let mut g = SyncGate::new(8);
        let Decision::Lead { round } = g.begin(&3).1 else {
            panic!()
        };
        let (n, _) = g.begin(&3);
        g.end_sync(&3, round, false);
        assert_eq!(g.after_wait(&3, n, round, true), Some(AfterWait::Failed));
        assert!(matches!(g.begin(&3).1, Decision::Lead { .. }));
    }

    #[test]
    fn the_table_stays_within_its_limit_and_a_forgotten_file_syncs_again() {
        let mut g = SyncGate::new(2);
        for k in 0..10u32 {
            let Decision::Lead { round } = g.begin(&k).1 else {
                panic!()
            };
            g.end_sync(&k, round, true);
            assert!(g.len() <= 2);
        }
        assert!(matches!(g.begin(&0).1, Decision::Lead { .. }), "evicted");
        assert!(g.order.len() <= 4);
    }

    #[test]
    fn with_every_entry_busy_a_new_file_syncs_untracked() {
        let mut g = SyncGate::new(1);
        let Decision::Lead { round } = g.begin(&1).1 else {
            panic!()
        };
        assert_eq!(g.begin(&2).1, Decision::Lead { round: 0 });
        g.end_sync(&2, 0, true);
        assert_eq!(g.len(), 1);
        g.end_sync(&1, round, true);
        assert_eq!(g.begin(&1).1, Decision::Clean);
    }

    #[test]
    fn forget_makes_a_reused_key_unknown() {
        let mut g = SyncGate::new(8);
        let Decision::Lead { round } = g.begin(&1).1 else {
            panic!()
        };
        g.end_sync(&1, round, true);
        g.forget(&1);
        assert!(matches!(g.begin(&1).1, Decision::Lead { .. }));
    }

    /// The driver: a second COMMIT arriving while the first one's sync runs is answered by it
    /// (one sync for two COMMITs). The sync is held until the second COMMIT is registered as a
    /// waiter, so the order does not depend on scheduling.
    #[test]
    fn driver_two_concurrent_commits_of_one_file_cost_one_sync() {
        let d = Arc::new(SyncDriver::<u32>::new(8));
        let syncs = Arc::new(AtomicU32::new(0));
        let (d2, s2) = (d.clone(), syncs.clone());
        let leader = std::thread::spawn(move || {
            d2.commit(&5, || {
                s2.fetch_add(1, SeqCst);
                while d2.waiters(&5) == 0 {
                    std::thread::yield_now();
                }
                Ok::<(), ()>(())
            })
        });
        // Wait until the leader's sync is running (the gate knows the file).
        while syncs.load(SeqCst) == 0 {
            std::thread::yield_now();
        }
        let r = d.commit(&5, || {
            syncs.fetch_add(1, SeqCst);
            Ok::<(), ()>(())
        });
        assert_eq!(r, Ok(()));
        assert_eq!(leader.join().unwrap(), Ok(()));
        assert_eq!(syncs.load(SeqCst), 1);
        assert_eq!(
            d.counts(),
            SyncCounts {
                synced: 1,
                spared: 1
            }
        );
    }

    #[test]
    fn driver_a_joiner_of_a_failed_sync_fails() {
        let d = Arc::new(SyncDriver::<u32>::new(8));
        let started = Arc::new(AtomicU32::new(0));
        let (d2, s2) = (d.clone(), started.clone());
        let leader = std::thread::spawn(move || {
            d2.commit(&5, || {
                s2.fetch_add(1, SeqCst);
                while d2.waiters(&5) == 0 {
                    std::thread::yield_now();
                }
                Err::<(), i32>(5)
            })
        });
        while started.load(SeqCst) == 0 {
            std::thread::yield_now();
        }
        let r = d.commit(&5, || Ok::<(), i32>(()));
        assert_eq!(r, Err(None));
        assert_eq!(leader.join().unwrap(), Err(Some(5)));
    }
}
