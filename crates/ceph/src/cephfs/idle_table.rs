//! [`IdleTable`]: the pure policy behind the open-file and directory-stream caches of `CephFs`
//! (see `open_files`): which entries to keep, and which to close, given the clock.
//!
//! The table maps a key to a value and the instant it was last used. It does no I/O and reads
//! no clock: every method that can close something takes `now` and returns the values that
//! leave the table, so the caller closes them (outside its lock: closing a Ceph file may wait
//! for the MDS) and a test can drive the policy with made-up instants.
//!
//! ```text
//!   get(k, now)      hit: last use = now, a clone of the value
//!   take(k)          the value leaves the table (a directory stream used by one call at a time)
//!   insert(k, v, now) -> evicted: the entries idle for `idle` or longer, then the least recently
//!                    used ones while the table holds more than `count_max`
//!   expire(now) -> evicted: the entries idle for `idle` or longer (the sweeper's tick)
//!   remove_if(pred) -> evicted: every entry whose key matches (REMOVE, RENAME over a file)
//!   remove_entries_if(pred) -> evicted: every entry whose key and value match (the MDS's
//!                    release requests: a directory stream holding a reference to the inode)
//! ```
//!
//! Eviction by count is least-recently-used by a scan of the table: `count_max` is small (a few
//! hundred), and a scan only happens on an insert into a full table, which is already paying
//! for an `open` at the MDS.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Bounds of one cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleLimits {
    /// Entries kept at most; the least recently used goes first past it.
    pub count_max: usize,
    /// An entry unused this long is closed.
    pub idle: Duration,
}

/// Keys to values with their last use, bounded by [`IdleLimits`].
#[derive(Debug)]
pub(super) struct IdleTable<K, V> {
    limits: IdleLimits,
    entries: HashMap<K, (V, Instant)>,
}

impl<K: Hash + Eq + Clone, V> IdleTable<K, V> {
    pub(super) fn new(limits: IdleLimits) -> IdleTable<K, V> {
        IdleTable {
            limits,
            entries: HashMap::new(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The value under `key`, marked used at `now`.
    pub(super) fn get(&mut self, key: &K, now: Instant) -> Option<V>
    where
        V: Clone,
    {
        let (v, used) = self.entries.get_mut(key)?;
        *used = now;
        Some(v.clone())
    }

    /// The value under `key`, out of the table.
    pub(super) fn take(&mut self, key: &K) -> Option<V> {
        self.entries.remove(key).map(|(v, _)| v)
    }

    /// Adds (or replaces) an entry used at `now`; returns what leaves the table: a replaced
    /// value, the idle entries, then the least recently used while over `count_max`.
    pub(super) fn insert(&mut self, key: K, value: V, now: Instant) -> Vec<V> {
        let mut out = self.expire(now);
        if let Some((old, _)) = self.entries.insert(key, (value, now)) {
            out.push(old);
        }
        while self.entries.len() > self.limits.count_max {
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some((v, _)) = self.entries.remove(&oldest) {
                out.push(v);
            }
        }
        out
    }

    /// The entries unused for `idle` or longer at `now`, out of the table.
    pub(super) fn expire(&mut self, now: Instant) -> Vec<V> {
        let idle = self.limits.idle;
        self.remove_where(|_, _, used| now.saturating_duration_since(used) >= idle)
    }

    /// Every entry whose key matches, out of the table.
    pub(super) fn remove_if(&mut self, pred: impl Fn(&K) -> bool) -> Vec<V> {
        self.remove_where(|k, _, _| pred(k))
    }

    /// Every entry whose key and value match, out of the table.
    pub(super) fn remove_entries_if(&mut self, pred: impl Fn(&K, &V) -> bool) -> Vec<V> {
        self.remove_where(|k, v, _| pred(k, v))
    }

    /// Everything, out of the table.
    pub(super) fn clear(&mut self) -> Vec<V> {
        self.entries.drain().map(|(_, (v, _))| v).collect()
    }

    fn remove_where(&mut self, pred: impl Fn(&K, &V, Instant) -> bool) -> Vec<V> {
        let gone: Vec<K> = self
            .entries
            .iter()
            .filter(|(k, (v, used))| pred(k, v, *used))
            .map(|(k, _)| k.clone())
            .collect();
        gone.iter()
            .filter_map(|k| self.entries.remove(k).map(|(v, _)| v))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(count_max: usize, idle_s: u64) -> IdleTable<u32, &'static str> {
        IdleTable::new(IdleLimits {
            count_max,
            idle: Duration::from_secs(idle_s),
        })
    }

    fn sorted(mut v: Vec<&'static str>) -> Vec<&'static str> {
        v.sort();
        v
    }

    #[test]
    fn a_hit_marks_the_entry_used_and_keeps_it() {
        let t0 = Instant::now();
        let mut t = table(4, 10);
        assert!(t.insert(1, "a", t0).is_empty());
        assert_eq!(t.get(&1, t0 + Duration::from_secs(9)), Some("a"));
        // Used at 9 s: not idle at 18 s, idle at 19 s.
        assert!(t.expire(t0 + Duration::from_secs(18)).is_empty());
        assert_eq!(t.expire(t0 + Duration::from_secs(19)), vec!["a"]);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn idle_entries_leave_on_expire_and_on_insert() {
        let t0 = Instant::now();
        let mut t = table(4, 10);
        t.insert(1, "a", t0);
        t.insert(2, "b", t0 + Duration::from_secs(5));
        assert!(t.expire(t0 + Duration::from_secs(9)).is_empty());
        // At 12 s only "a" has been idle 10 s; inserting "c" closes it.
        assert_eq!(t.insert(3, "c", t0 + Duration::from_secs(12)), vec!["a"]);
        assert_eq!(t.len(), 2);
        assert_eq!(
            sorted(t.expire(t0 + Duration::from_secs(60))),
            vec!["b", "c"]
        );
    }

    #[test]
    fn past_the_count_the_least_recently_used_goes_first() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut t = table(2, 1000);
        t.insert(1, "a", t0);
        t.insert(2, "b", t0 + s(1));
        t.get(&1, t0 + s(2));
        assert_eq!(t.insert(3, "c", t0 + s(3)), vec!["b"]);
        assert_eq!(t.get(&1, t0 + s(4)), Some("a"));
        assert_eq!(t.insert(4, "d", t0 + s(5)), vec!["c"]);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn replacing_a_key_returns_the_old_value() {
        let t0 = Instant::now();
        let mut t = table(4, 10);
        t.insert(1, "a", t0);
        assert_eq!(t.insert(1, "b", t0), vec!["a"]);
        assert_eq!(t.take(&1), Some("b"));
        assert_eq!(t.take(&1), None);
    }

    #[test]
    fn remove_if_takes_every_matching_key_at_once() {
        let t0 = Instant::now();
        let mut t: IdleTable<(u32, bool), &str> = IdleTable::new(IdleLimits {
            count_max: 8,
            idle: Duration::from_secs(10),
        });
        t.insert((7, false), "read", t0);
        t.insert((7, true), "read-write", t0);
        t.insert((8, false), "other", t0);
        let mut gone = t.remove_if(|k| k.0 == 7);
        gone.sort();
        assert_eq!(gone, vec!["read", "read-write"]);
        assert!(t.take(&(7, false)).is_none());
        assert_eq!(t.clear(), vec!["other"]);
    }

    #[test]
    fn remove_entries_if_looks_at_the_values_too() {
        let t0 = Instant::now();
        let mut t = table(8, 10);
        t.insert(1, "a", t0);
        t.insert(2, "b", t0);
        t.insert(3, "a", t0);
        let gone = t.remove_entries_if(|k, v| *k == 2 || *v == "a");
        assert_eq!(sorted(gone), vec!["a", "a", "b"]);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn a_zero_count_keeps_nothing() {
        let t0 = Instant::now();
        let mut t = table(0, 10);
        assert_eq!(t.insert(1, "a", t0), vec!["a"]);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn a_clock_that_goes_backwards_expires_nothing() {
        let t0 = Instant::now() + Duration::from_secs(100);
        let mut t = table(4, 10);
        t.insert(1, "a", t0);
        assert!(t.expire(t0 - Duration::from_secs(50)).is_empty());
    }
}
