//! The simulated client's page cache and range bookkeeping.
//!
//! [`DataCache`] holds the bytes READ replies brought, as zero-copy slices keyed by file offset,
//! disjoint. [`RangeSet`] is a set of disjoint half-open ranges (what is in flight).

use bytes::Bytes;
use std::collections::BTreeMap;

/// Disjoint half-open ranges `[start, end)`, keyed by start.
#[derive(Debug, Default, Clone)]
pub struct RangeSet(BTreeMap<u64, u64>);

impl RangeSet {
    /// Adds `[lo, hi)`, merging with neighbours.
    pub fn insert(&mut self, mut lo: u64, mut hi: u64) {
        if lo >= hi {
            return;
        }
        if let Some((&s, &e)) = self.0.range(..=lo).next_back() {
            if e >= lo {
                lo = s;
                hi = hi.max(e);
            }
        }
        let overlapping: Vec<u64> = self.0.range(lo..=hi).map(|(&s, _)| s).collect();
        for s in overlapping {
            let e = self.0.remove(&s).expect("listed");
            hi = hi.max(e);
        }
        self.0.insert(lo, hi);
    }

    /// Removes `[lo, hi)`.
    pub fn remove(&mut self, lo: u64, hi: u64) {
        if lo >= hi {
            return;
        }
        let mut touched: Vec<(u64, u64)> = Vec::new();
        if let Some((&s, &e)) = self.0.range(..lo).next_back() {
            if e > lo {
                touched.push((s, e));
            }
        }
        touched.extend(self.0.range(lo..hi).map(|(&s, &e)| (s, e)));
        for (s, e) in touched {
            self.0.remove(&s);
            if s < lo {
                self.0.insert(s, lo);
            }
            if e > hi {
                self.0.insert(hi, e);
            }
        }
    }

    /// The parts of `[lo, hi)` not in the set, in order.
    pub fn gaps(&self, lo: u64, hi: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = lo;
        if let Some((_, &e)) = self.0.range(..=lo).next_back() {
            at = at.max(e);
        }
        for (&s, &e) in self.0.range(lo..hi) {
            if s > at {
                out.push((at, s));
            }
            at = at.max(e);
        }
        if at < hi {
            out.push((at, hi));
        }
        out
    }

    /// Whether `[lo, hi)` is wholly in the set.
    pub fn covers(&self, lo: u64, hi: u64) -> bool {
        lo >= hi
            || self
                .0
                .range(..=lo)
                .next_back()
                .is_some_and(|(_, &e)| e >= hi)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Bytes of `[lo, hi)` in the set.
    pub fn bytes_in(&self, lo: u64, hi: u64) -> u64 {
        let gaps: u64 = self.gaps(lo, hi).iter().map(|(a, b)| b - a).sum();
        hi.saturating_sub(lo) - gaps
    }

    /// Total bytes in the set.
    pub fn bytes(&self) -> u64 {
        self.0.iter().map(|(s, e)| e - s).sum()
    }
}

/// Cached file bytes: disjoint slices keyed by offset, plus their coverage.
#[derive(Debug, Default)]
pub struct DataCache {
    chunks: BTreeMap<u64, Bytes>,
    covered: RangeSet,
    bytes: u64,
}

impl DataCache {
    /// Stores `data` at `offset`, keeping only the parts not cached yet.
    pub fn insert(&mut self, offset: u64, data: Bytes) {
        let end = offset + data.len() as u64;
        for (lo, hi) in self.covered.gaps(offset, end) {
            let piece = data.slice((lo - offset) as usize..(hi - offset) as usize);
            self.bytes += piece.len() as u64;
            self.chunks.insert(lo, piece);
        }
        self.covered.insert(offset, end);
    }

    pub fn covers(&self, lo: u64, hi: u64) -> bool {
        self.covered.covers(lo, hi)
    }

    /// Bytes of `[lo, hi)` cached.
    pub fn bytes_in(&self, lo: u64, hi: u64) -> u64 {
        self.covered.bytes_in(lo, hi)
    }

    /// Where `[lo, hi)` is not cached.
    pub fn gaps(&self, lo: u64, hi: u64) -> Vec<(u64, u64)> {
        self.covered.gaps(lo, hi)
    }

    /// Removes `[lo, hi)` and returns the removed slices in order (parts not cached are skipped).
    pub fn take(&mut self, lo: u64, hi: u64) -> Vec<(u64, Bytes)> {
        let mut out = Vec::new();
        if lo >= hi {
            return out;
        }
        let mut keys: Vec<u64> = Vec::new();
        if let Some((&s, b)) = self.chunks.range(..lo).next_back() {
            if s + b.len() as u64 > lo {
                keys.push(s);
            }
        }
        keys.extend(self.chunks.range(lo..hi).map(|(&s, _)| s));
        for s in keys {
            let b = self.chunks.remove(&s).expect("listed");
            let e = s + b.len() as u64;
            let (a, z) = (s.max(lo), e.min(hi));
            if s < lo {
                self.chunks.insert(s, b.slice(..(lo - s) as usize));
            }
            if e > hi {
                self.chunks.insert(hi, b.slice((hi - s) as usize..));
            }
            self.bytes -= z - a;
            out.push((a, b.slice((a - s) as usize..(z - s) as usize)));
        }
        self.covered.remove(lo, hi);
        out
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_set_merges_splits_and_finds_gaps() {
        let mut r = RangeSet::default();
        r.insert(10, 20);
        r.insert(30, 40);
        r.insert(20, 25);
        assert_eq!(r.gaps(0, 50), vec![(0, 10), (25, 30), (40, 50)]);
        assert!(r.covers(12, 25) && !r.covers(12, 26));
        r.remove(15, 35);
        assert_eq!(r.gaps(0, 50), vec![(0, 10), (15, 35), (40, 50)]);
        r.insert(0, 100);
        assert!(r.covers(0, 100));
        assert_eq!(r.bytes(), 100);
    }

    #[test]
    fn cache_keeps_first_copy_and_takes_exact_ranges() {
        let mut c = DataCache::default();
        c.insert(0, Bytes::from_static(b"abcdef"));
        c.insert(4, Bytes::from_static(b"XXyz"));
        assert!(c.covers(0, 8));
        assert_eq!(c.bytes(), 8);
        let got: Vec<u8> = c
            .take(2, 7)
            .into_iter()
            .flat_map(|(_, b)| b.to_vec())
            .collect();
        assert_eq!(got, b"cdefy");
        assert_eq!(c.gaps(0, 8), vec![(2, 7)]);
        assert_eq!(c.bytes(), 3);
    }
}
