//! The attribute-cache timeout policy, after the Linux NFS client (`fs/nfs/inode.c`,
//! `nfs_update_inode` and `nfs_attribute_timeout`). Pure: `now` is always a parameter.
//!
//! ```text
//!   attributes fetched ──► timeout = acXXmin ──► served from cache while age < timeout
//!        ▲                                            │ expired
//!        │                                            ▼
//!        └──── unchanged: timeout = min(2 × timeout, acXXmax)   GETATTR (or any reply
//!              changed:   timeout = acXXmin                      carrying post-op attributes)
//! ```
//!
//! A file that nobody changes is asked about ever more rarely (3 s, 6 s, … 60 s for regular
//! files), one that changes is watched closely again. Directories start at 30 s like Linux's
//! `acdirmin`: their contents are validated through their mtime (see `fs.rs`, name cache).
//! The kernel is told the same numbers as entry and attribute TTLs, so that it asks us again
//! exactly when our own cache would have asked the server.

use sluice_client::namespace::{Attr, FileType};
use std::time::{Duration, Instant};

/// The four timeouts of the Linux NFS client's mount options, same names and defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttrCacheConfig {
    /// Minimum validity of a regular file's attributes. Default 3 s (Linux `acregmin`).
    pub acregmin: Duration,
    /// Maximum validity of a regular file's attributes. Default 60 s (`acregmax`).
    pub acregmax: Duration,
    /// Minimum validity of a directory's attributes. Default 30 s (`acdirmin`).
    pub acdirmin: Duration,
    /// Maximum validity of a directory's attributes. Default 60 s (`acdirmax`).
    pub acdirmax: Duration,
}

impl Default for AttrCacheConfig {
    fn default() -> Self {
        AttrCacheConfig {
            acregmin: Duration::from_secs(3),
            acregmax: Duration::from_secs(60),
            acdirmin: Duration::from_secs(30),
            acdirmax: Duration::from_secs(60),
        }
    }
}

impl AttrCacheConfig {
    /// No caching at all (`noac`): every stat asks the server.
    pub fn noac() -> Self {
        AttrCacheConfig {
            acregmin: Duration::ZERO,
            acregmax: Duration::ZERO,
            acdirmin: Duration::ZERO,
            acdirmax: Duration::ZERO,
        }
    }

    fn bounds(&self, ftype: FileType) -> (Duration, Duration) {
        if ftype == FileType::DIR {
            (self.acdirmin, self.acdirmax.max(self.acdirmin))
        } else {
            (self.acregmin, self.acregmax.max(self.acregmin))
        }
    }
}

/// Attributes with the time they were fetched and how long they stay valid.
#[derive(Debug, Clone, Copy)]
pub struct CachedAttr {
    pub attr: Attr,
    pub fetched_at: Instant,
    pub timeout: Duration,
    /// An update showed a change of the data that no open has acted on yet (see
    /// [`CachedAttr::take_data_changed`]).
    data_changed: bool,
}

impl CachedAttr {
    pub fn new(attr: Attr, now: Instant, config: &AttrCacheConfig) -> Self {
        CachedAttr {
            attr,
            fetched_at: now,
            timeout: config.bounds(attr.ftype).0,
            data_changed: false,
        }
    }

    /// True once after an update showed a change of the data, whichever path fetched the
    /// attributes (a LOOKUP or a GETATTR before the open, the open's own). The kernel drops
    /// its cached pages by itself when size or mtime move, but not for a change only the NFSv4
    /// change attribute shows: an open asks this to tell it to.
    pub fn take_data_changed(&mut self) -> bool {
        std::mem::take(&mut self.data_changed)
    }

    /// True while the attributes may be used without asking the server.
    pub fn is_fresh(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.fetched_at) < self.timeout
    }

    /// How much longer the attributes are valid (the TTL to give the kernel).
    pub fn remaining(&self, now: Instant) -> Duration {
        self.timeout
            .saturating_sub(now.saturating_duration_since(self.fetched_at))
    }

    /// Marks the attributes as stale: the next use fetches them again.
    pub fn invalidate(&mut self) {
        self.timeout = Duration::ZERO;
    }

    /// New attributes arrived. Returns true if the file's data may have changed (see
    /// [`data_changed`]), in which case the timeout falls back to its minimum.
    pub fn update(&mut self, attr: Attr, now: Instant, config: &AttrCacheConfig) -> bool {
        let (min, max) = config.bounds(attr.ftype);
        let changed = data_changed(&self.attr, &attr);
        self.data_changed |= changed;
        self.timeout = if changed || attr.ftype != self.attr.ftype {
            min
        } else {
            // Doubling from zero (after `invalidate`) must restart at the minimum.
            self.timeout.max(min).saturating_mul(2).min(max)
        };
        self.attr = attr;
        self.fetched_at = now;
        changed
    }
}

/// True if `new` shows a change of the file's contents or metadata relative to `old` (what
/// Linux's `nfs_update_inode` treats as "invalidate the data cache"): the NFSv4 change
/// attribute where the server has one, so a write that kept size and mtime still shows; size
/// and mtime where it has none (NFSv3). See [`Attr::changed_since`].
pub fn data_changed(old: &Attr, new: &Attr) -> bool {
    new.changed_since(old)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_client::namespace::Time;

    fn file(size: u64, mtime: i64) -> Attr {
        Attr {
            ftype: FileType::REG,
            size,
            mtime: Time {
                seconds: mtime,
                nseconds: 0,
            },
            ..Attr::default()
        }
    }

    #[test]
    fn unchanged_attributes_double_the_timeout_up_to_the_maximum() {
        let cfg = AttrCacheConfig::default();
        let t0 = Instant::now();
        let mut c = CachedAttr::new(file(1, 1), t0, &cfg);
        assert_eq!(c.timeout, Duration::from_secs(3));
        assert!(c.is_fresh(t0 + Duration::from_secs(2)));
        assert!(!c.is_fresh(t0 + Duration::from_secs(3)));
        let mut now = t0;
        for expect in [6, 12, 24, 48, 60, 60] {
            now += c.timeout;
            assert!(!c.update(file(1, 1), now, &cfg));
            assert_eq!(c.timeout, Duration::from_secs(expect));
        }
    }

    #[test]
    fn the_change_attribute_shows_a_change_that_kept_size_and_mtime() {
        let old = Attr {
            change: Some(1),
            ..file(10, 5)
        };
        let new = Attr {
            change: Some(2),
            ..file(10, 5)
        };
        assert!(data_changed(&old, &new), "v4: the change attribute moved");
        assert!(!data_changed(&old, &old));
        assert!(
            !data_changed(&file(10, 5), &file(10, 5)),
            "v3: same size and mtime"
        );
        assert!(data_changed(&file(10, 5), &file(10, 6)), "v3: mtime moved");
    }

    #[test]
    fn a_change_seen_by_any_update_is_reported_once() {
        let cfg = AttrCacheConfig::default();
        let t0 = Instant::now();
        let mut c = CachedAttr::new(file(10, 5), t0, &cfg);
        assert!(!c.take_data_changed());
        assert!(c.update(file(10, 6), t0, &cfg), "a LOOKUP sees the change");
        assert!(
            !c.update(file(10, 6), t0, &cfg),
            "the open's GETATTR does not"
        );
        assert!(c.take_data_changed(), "but the open learns of it");
        assert!(!c.take_data_changed(), "once");
    }

    #[test]
    fn a_change_resets_the_timeout_to_the_minimum() {
        let cfg = AttrCacheConfig::default();
        let t0 = Instant::now();
        let mut c = CachedAttr::new(file(1, 1), t0, &cfg);
        c.update(file(1, 1), t0, &cfg);
        assert_eq!(c.timeout, Duration::from_secs(6));
        assert!(c.update(file(2, 1), t0, &cfg));
        assert_eq!(c.timeout, Duration::from_secs(3));
        assert!(c.update(file(2, 5), t0, &cfg));
    }

    #[test]
    fn directories_use_the_directory_bounds_and_invalidate_forces_a_fetch() {
        let cfg = AttrCacheConfig::default();
        let t0 = Instant::now();
        let dir = Attr {
            ftype: FileType::DIR,
            ..Attr::default()
        };
        let mut c = CachedAttr::new(dir, t0, &cfg);
        assert_eq!(c.timeout, Duration::from_secs(30));
        assert_eq!(
            c.remaining(t0 + Duration::from_secs(10)),
            Duration::from_secs(20)
        );
        c.invalidate();
        assert!(!c.is_fresh(t0));
        c.update(dir, t0, &cfg);
        assert_eq!(c.timeout, Duration::from_secs(60));
    }
}
