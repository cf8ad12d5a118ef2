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

use sluice_xdr::nfs3::{Fattr3, Ftype3};
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

    fn bounds(&self, ftype: Ftype3) -> (Duration, Duration) {
        if ftype == Ftype3::DIR {
            (self.acdirmin, self.acdirmax.max(self.acdirmin))
        } else {
            (self.acregmin, self.acregmax.max(self.acregmin))
        }
    }
}

/// Attributes with the time they were fetched and how long they stay valid.
#[derive(Debug, Clone, Copy)]
pub struct CachedAttr {
    pub attr: Fattr3,
    pub fetched_at: Instant,
    pub timeout: Duration,
}

impl CachedAttr {
    pub fn new(attr: Fattr3, now: Instant, config: &AttrCacheConfig) -> Self {
        CachedAttr {
            attr,
            fetched_at: now,
            timeout: config.bounds(attr.ftype).0,
        }
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

    /// New attributes arrived. Returns true if the file's data may have changed (size, mtime
    /// or ctime differ), in which case the timeout falls back to its minimum.
    pub fn update(&mut self, attr: Fattr3, now: Instant, config: &AttrCacheConfig) -> bool {
        let (min, max) = config.bounds(attr.ftype);
        let changed = data_changed(&self.attr, &attr);
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

/// True if `new` shows a change of the file's contents or metadata relative to `old`
/// (what Linux's `nfs_update_inode` treats as "invalidate the data cache").
pub fn data_changed(old: &Fattr3, new: &Fattr3) -> bool {
    old.size != new.size || old.mtime != new.mtime || old.ctime != new.ctime
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_xdr::nfs3::Nfstime3;

    fn file(size: u64, mtime: u32) -> Fattr3 {
        Fattr3 {
            ftype: Ftype3::REG,
            size,
            mtime: Nfstime3 {
                seconds: mtime,
                nseconds: 0,
            },
            ..Fattr3::default()
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
        let dir = Fattr3 {
            ftype: Ftype3::DIR,
            ..Fattr3::default()
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
