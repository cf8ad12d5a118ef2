//! The server's duplicate request cache (DRC), pure and bounded.
//!
//! # Why
//! A client that gets no reply retransmits the call with the same XID: over UDP when its RTO
//! expires, over TCP after a reconnect. For idempotent procedures (READ, GETATTR, LOOKUP)
//! running the call again is harmless. For the others it is not: a retransmitted REMOVE whose
//! first execution succeeded would now fail with NFS3ERR_NOENT, a retransmitted CREATE with
//! EXCLUSIVE would fail with NFS3ERR_EXIST, a RENAME could undo itself. The DRC remembers recent
//! non-idempotent calls and answers a retransmission with the original reply instead of running
//! it twice (the classic design: Juszczak, "Improving the Performance and Correctness of an NFS
//! Server", USENIX 1989; Linux `fs/nfsd/nfscache.c`).
//! *Which* procedures are cached is the procedure table's decision, not this module's.
//!
//! ```text
//!  call ─► key ─► lookup_or_insert(now, key)
//!                   ├─ Miss              run the handler, then complete(now, key, reply), send
//!                   ├─ Hit(InProgress)   drop the retransmission: the first execution replies
//!                   └─ Hit(Done(reply))  send the cached reply again
//! ```
//!
//! # The key
//! The XID alone is not enough: XIDs are only unique per client, and a rebooted client may reuse
//! them. The key is ([`DrcKey`]) client id, XID, program, version, procedure, the length of the
//! arguments and a checksum of their first [`ARGS_CHECKSUM_BYTES`] bytes: a different call that
//! happens to reuse an XID almost surely differs in its file handle or name, which sit at the
//! start of the arguments, and hashing a whole 1 MiB WRITE per call would cost more than it buys.
//! The client id is opaque to this module (`u64`): the driver derives it from the peer address
//! (Linux keys on address *and* port; clients reconnect from the same port for that reason).
//!
//! # Bounds
//! Everything is bounded (STYLE.md, "a limit on everything"), see [`DrcConfig`]:
//! - entries: at most `max_entries`; the least recently used entry is evicted to make room.
//!   In-progress entries were touched when their call arrived, so they sit at the young end and
//!   are the last to go.
//! - bytes: cached replies total at most `max_bytes`. A reply is copied into one compact buffer
//!   when cached, so the accounted bytes are the memory pinned (a slice of a large pooled buffer
//!   would pin the whole buffer). Replies over `max_reply_bytes` are not cached at all: replies
//!   of non-idempotent NFSv3 procedures are a few hundred bytes.
//! - time: an entry is forgotten `window` (default 120 s, as Linux's RC_EXPIRE) after it was
//!   completed, or after it was inserted if it never was. A client gives up on or resends a call
//!   well within that (TCP major timeout 60 s, then a reconnect).
//!
//! Lookups and inserts are O(log n): a hash map of entries plus an ordered map from a use tick
//! to the key, oldest first. Expired entries are removed lazily when looked up, and from the old
//! end whenever an insert runs, so expiry costs nothing when idle.

use bytes::{Bytes, BytesMut};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::server::RpcCall;

/// How many leading argument bytes the key's checksum covers. 256 bytes hold the file handle
/// (up to 64 bytes), offsets and names of every NFSv3 call that is worth caching.
pub const ARGS_CHECKSUM_BYTES: usize = 256;

/// Identifies a call for duplicate detection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DrcKey {
    /// Opaque client identity chosen by the driver (for example a hash of address and port).
    pub client: u64,
    pub xid: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    /// Length of the arguments in bytes.
    pub args_len: u32,
    /// Checksum of the first [`ARGS_CHECKSUM_BYTES`] bytes of the arguments.
    pub args_checksum: u64,
}

impl DrcKey {
    /// The key of a parsed call whose record is `segs`.
    pub fn for_call(client: u64, call: &RpcCall, segs: &[Bytes]) -> DrcKey {
        let (args_len, args_checksum) = args_checksum(segs, call.args_offset);
        DrcKey {
            client,
            xid: call.xid,
            prog: call.prog(),
            vers: call.vers(),
            proc_: call.proc_(),
            args_len,
            args_checksum,
        }
    }
}

/// Length of the arguments starting at `args_offset`, and the checksum (64-bit FNV-1a) of
/// their first [`ARGS_CHECKSUM_BYTES`] bytes.
pub fn args_checksum(segs: &[Bytes], args_offset: usize) -> (u32, u64) {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut skip = args_offset;
    let mut len = 0usize;
    let mut hashed = 0usize;
    let mut h = FNV_OFFSET;
    for seg in segs {
        let s = if skip >= seg.len() {
            skip -= seg.len();
            continue;
        } else {
            let s = &seg[skip..];
            skip = 0;
            s
        };
        len += s.len();
        let take = (ARGS_CHECKSUM_BYTES - hashed).min(s.len());
        for &b in &s[..take] {
            h = (h ^ u64::from(b)).wrapping_mul(FNV_PRIME);
        }
        hashed += take;
    }
    (u32::try_from(len).unwrap_or(u32::MAX), h)
}

/// Limits of a [`ReplyCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrcConfig {
    /// Most entries, in progress or done. Default 16384: at ~200 bytes per reply about 3 MiB,
    /// and at 10,000 non-idempotent calls per second still more than a second of history per
    /// busy client set (only retransmissions, which are rare, need to find their entry).
    pub max_entries: usize,
    /// Most bytes of cached replies in total. Default 8 MiB.
    pub max_bytes: usize,
    /// Replies larger than this are not cached. Default 4 KiB (non-idempotent NFSv3 replies are
    /// wcc_data plus a handle: a few hundred bytes). Must not exceed `max_bytes`.
    pub max_reply_bytes: usize,
    /// How long an entry is kept. Default 120 s.
    pub window: Duration,
}

impl Default for DrcConfig {
    fn default() -> Self {
        DrcConfig {
            max_entries: 16 * 1024,
            max_bytes: 8 * 1024 * 1024,
            max_reply_bytes: 4 * 1024,
            window: Duration::from_secs(120),
        }
    }
}

/// What the cache knows about a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// New call: it is now recorded as in progress; run it and [`ReplyCache::complete`] it.
    Miss,
    /// A retransmission of a call seen before.
    Hit(Hit),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hit {
    /// The first execution has not finished: drop this copy.
    InProgress,
    /// The first execution replied with this message: send it again.
    Done(Vec<Bytes>),
}

/// Counters, for `sluice stats` and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrcStats {
    pub misses: u64,
    pub hits_in_progress: u64,
    pub hits_done: u64,
    pub evictions: u64,
    pub expirations: u64,
    /// Replies over `max_reply_bytes`, not cached.
    pub uncacheable: u64,
}

/// The duplicate request cache. See the module docs.
#[derive(Debug)]
pub struct ReplyCache {
    config: DrcConfig,
    entries: HashMap<DrcKey, Entry>,
    /// Use tick → key, least recently used first.
    lru: BTreeMap<u64, DrcKey>,
    next_tick: u64,
    bytes: usize,
    stats: DrcStats,
}

#[derive(Debug)]
struct Entry {
    tick: u64,
    /// Inserted (in progress) or completed (done) at this time.
    since: Instant,
    /// `None` while in progress.
    reply: Option<Bytes>,
}

impl ReplyCache {
    pub fn new(config: DrcConfig) -> Self {
        assert!(config.max_entries >= 1, "max_entries is 0");
        assert!(
            config.max_reply_bytes <= config.max_bytes,
            "max_reply_bytes above max_bytes"
        );
        ReplyCache {
            config,
            entries: HashMap::new(),
            lru: BTreeMap::new(),
            next_tick: 0,
            bytes: 0,
            stats: DrcStats::default(),
        }
    }

    pub fn config(&self) -> &DrcConfig {
        &self.config
    }
    pub fn stats(&self) -> &DrcStats {
        &self.stats
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// Bytes of cached replies.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Looks a call up; on a miss, records it as in progress.
    pub fn lookup_or_insert(&mut self, now: Instant, key: DrcKey) -> Lookup {
        if let Some(e) = self.entries.get(&key) {
            if self.is_expired(e, now) {
                self.remove(&key);
                self.stats.expirations += 1;
            } else {
                let hit = match &e.reply {
                    None => Hit::InProgress,
                    Some(r) => Hit::Done(vec![r.clone()]),
                };
                match hit {
                    Hit::InProgress => self.stats.hits_in_progress += 1,
                    Hit::Done(_) => self.stats.hits_done += 1,
                }
                self.touch(&key);
                return Lookup::Hit(hit);
            }
        }
        self.expire_oldest(now);
        while self.entries.len() >= self.config.max_entries {
            self.evict_lru();
        }
        let tick = self.take_tick();
        self.entries.insert(
            key,
            Entry {
                tick,
                since: now,
                reply: None,
            },
        );
        self.lru.insert(tick, key);
        self.stats.misses += 1;
        Lookup::Miss
    }

    /// Records the reply of a call that missed. Returns false if the reply was not cached
    /// (the entry was evicted meanwhile, was already done, or the reply is too large).
    pub fn complete(&mut self, now: Instant, key: DrcKey, reply: &[Bytes]) -> bool {
        let Some(e) = self.entries.get(&key) else {
            return false;
        };
        if e.reply.is_some() {
            return false;
        }
        let len: usize = reply.iter().map(|s| s.len()).sum();
        if len > self.config.max_reply_bytes {
            self.remove(&key);
            self.stats.uncacheable += 1;
            return false;
        }
        let mut compact = BytesMut::with_capacity(len);
        for s in reply {
            compact.extend_from_slice(s);
        }
        let e = self.entries.get_mut(&key).expect("checked above");
        e.reply = Some(compact.freeze());
        e.since = now;
        self.bytes += len;
        self.touch(&key);
        while self.bytes > self.config.max_bytes {
            self.evict_lru();
        }
        true
    }

    /// Forgets a call (its handler decided not to reply, or failed before replying).
    pub fn abort(&mut self, key: &DrcKey) {
        self.remove(key);
    }

    // --- helpers ---------------------------------------------------------------------------

    fn is_expired(&self, e: &Entry, now: Instant) -> bool {
        now.saturating_duration_since(e.since) >= self.config.window
    }

    fn take_tick(&mut self) -> u64 {
        let t = self.next_tick;
        self.next_tick += 1;
        t
    }

    fn touch(&mut self, key: &DrcKey) {
        let tick = self.take_tick();
        let e = self.entries.get_mut(key).expect("touched entry exists");
        self.lru.remove(&e.tick);
        e.tick = tick;
        self.lru.insert(tick, *key);
    }

    fn remove(&mut self, key: &DrcKey) {
        if let Some(e) = self.entries.remove(key) {
            self.lru.remove(&e.tick);
            self.bytes -= e.reply.map_or(0, |r| r.len());
        }
    }

    fn evict_lru(&mut self) {
        let (_, key) = self
            .lru
            .pop_first()
            .expect("evicting from a non-empty cache");
        let e = self.entries.remove(&key).expect("lru and entries agree");
        self.bytes -= e.reply.map_or(0, |r| r.len());
        self.stats.evictions += 1;
    }

    /// Drops expired entries from the least recently used end.
    fn expire_oldest(&mut self, now: Instant) {
        while let Some((_, key)) = self.lru.first_key_value() {
            let key = *key;
            if !self.is_expired(&self.entries[&key], now) {
                break;
            }
            self.remove(&key);
            self.stats.expirations += 1;
        }
    }
}

impl Default for ReplyCache {
    fn default() -> Self {
        Self::new(DrcConfig::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::{parse_call, CallParse};
    use crate::test_util::base_instant;
    use proptest::prelude::*;

    fn key(xid: u32) -> DrcKey {
        DrcKey {
            client: 1,
            xid,
            prog: 100003,
            vers: 3,
            proc_: 12,
            args_len: 40,
            args_checksum: 0xabc,
        }
    }

    fn reply(n: usize) -> Vec<Bytes> {
        vec![
            Bytes::from(vec![1u8; n / 2]),
            Bytes::from(vec![2u8; n - n / 2]),
        ]
    }

    #[test]
    fn dedupes_in_progress_and_done() {
        let t0 = base_instant();
        let mut c = ReplyCache::default();
        assert_eq!(c.lookup_or_insert(t0, key(1)), Lookup::Miss);
        assert_eq!(c.lookup_or_insert(t0, key(1)), Lookup::Hit(Hit::InProgress));
        assert!(c.complete(t0, key(1), &reply(100)));
        let Lookup::Hit(Hit::Done(r)) = c.lookup_or_insert(t0, key(1)) else {
            panic!("expected a done hit")
        };
        let bytes: Vec<u8> = r.iter().flat_map(|s| s.to_vec()).collect();
        assert_eq!(bytes, [vec![1u8; 50], vec![2u8; 50]].concat());
        // Any field of the key makes it another call.
        for k in [
            DrcKey {
                client: 2,
                ..key(1)
            },
            DrcKey { xid: 2, ..key(1) },
            DrcKey {
                proc_: 13,
                ..key(1)
            },
            DrcKey {
                args_len: 41,
                ..key(1)
            },
            DrcKey {
                args_checksum: 0xabd,
                ..key(1)
            },
        ] {
            assert_eq!(c.lookup_or_insert(t0, k), Lookup::Miss);
        }
        let s = c.stats();
        assert_eq!((s.misses, s.hits_in_progress, s.hits_done), (6, 1, 1));
        // Completing twice is refused.
        assert!(!c.complete(t0, key(1), &reply(10)));
    }

    #[test]
    fn entry_bound_evicts_least_recently_used() {
        let t0 = base_instant();
        let mut c = ReplyCache::new(DrcConfig {
            max_entries: 3,
            ..DrcConfig::default()
        });
        for x in 1..=3 {
            c.lookup_or_insert(t0, key(x));
            c.complete(t0, key(x), &reply(10));
        }
        // Touch 1 so that 2 is now the least recently used.
        assert!(matches!(c.lookup_or_insert(t0, key(1)), Lookup::Hit(_)));
        c.lookup_or_insert(t0, key(4));
        assert_eq!(c.len(), 3);
        assert_eq!(c.stats().evictions, 1);
        assert_eq!(c.bytes(), 20, "entries 1 and 3 keep their replies");
        assert!(matches!(c.lookup_or_insert(t0, key(3)), Lookup::Hit(_)));
        assert_eq!(
            c.lookup_or_insert(t0, key(2)),
            Lookup::Miss,
            "2 was evicted"
        );
        // Use order is now 1, 4, 3, 2: re-inserting 2 evicted 1.
        assert_eq!(c.stats().evictions, 2);
        assert!(!c.entries.contains_key(&key(1)));
        assert!([2, 3, 4].iter().all(|&x| c.entries.contains_key(&key(x))));
    }

    #[test]
    fn byte_bound_evicts_and_oversized_replies_are_not_cached() {
        let t0 = base_instant();
        let mut c = ReplyCache::new(DrcConfig {
            max_bytes: 250,
            max_reply_bytes: 200,
            ..DrcConfig::default()
        });
        c.lookup_or_insert(t0, key(1));
        assert!(c.complete(t0, key(1), &reply(100)));
        c.lookup_or_insert(t0, key(2));
        assert!(c.complete(t0, key(2), &reply(100)));
        c.lookup_or_insert(t0, key(3));
        assert!(c.complete(t0, key(3), &reply(100)));
        assert!(c.bytes() <= 250);
        assert_eq!(c.lookup_or_insert(t0, key(1)), Lookup::Miss, "evicted");
        assert!(!c.complete(t0, key(1), &reply(201)));
        assert_eq!(c.stats().uncacheable, 1);
        assert_eq!(c.lookup_or_insert(t0, key(1)), Lookup::Miss);
    }

    #[test]
    fn entries_expire_after_the_window() {
        let t0 = base_instant();
        let w = Duration::from_secs(120);
        let mut c = ReplyCache::default();
        c.lookup_or_insert(t0, key(1));
        c.complete(t0 + w / 2, key(1), &reply(10));
        // The window runs from completion.
        let just_before = t0 + w / 2 + w - Duration::from_millis(1);
        assert!(matches!(
            c.lookup_or_insert(just_before, key(1)),
            Lookup::Hit(Hit::Done(_))
        ));
        assert_eq!(c.lookup_or_insert(t0 + w / 2 + w, key(1)), Lookup::Miss);
        assert_eq!(c.stats().expirations, 1);
        // Old entries are swept from the LRU end by later inserts.
        c.lookup_or_insert(t0 + 10 * w, key(2));
        assert_eq!(c.len(), 1);
        assert_eq!(c.bytes(), 0);
    }

    #[test]
    fn abort_forgets() {
        let t0 = base_instant();
        let mut c = ReplyCache::default();
        c.lookup_or_insert(t0, key(1));
        c.abort(&key(1));
        assert!(c.is_empty());
        assert!(!c.complete(t0, key(1), &reply(10)));
    }

    #[test]
    fn key_from_a_parsed_call_ignores_segmentation() {
        let mut w = sluice_xdr::Writer::new();
        for v in [7u32, 0, 2, 100003, 3, 12, 0, 0, 0, 0] {
            w.put_u32(v); // xid, CALL, rpcvers, prog, vers, proc, cred, verf
        }
        w.put_raw(&[0xee; 600]);
        let whole = w.into_bytes();
        let CallParse::Call(call) = parse_call(std::slice::from_ref(&whole)) else {
            panic!()
        };
        let k1 = DrcKey::for_call(9, &call, std::slice::from_ref(&whole));
        assert_eq!(k1.args_len, 600);
        for cut in [0, 20, 40, 41, 300, whole.len()] {
            let segs = [whole.slice(..cut), whole.slice(cut..)];
            assert_eq!(DrcKey::for_call(9, &call, &segs), k1);
        }
        // Only the first ARGS_CHECKSUM_BYTES count.
        let mut tail_changed = whole.to_vec();
        *tail_changed.last_mut().unwrap() = 0;
        let k2 = DrcKey::for_call(9, &call, &[Bytes::from(tail_changed)]);
        assert_eq!(k2, k1);
        let mut head_changed = whole.to_vec();
        head_changed[40] = 0;
        let k3 = DrcKey::for_call(9, &call, &[Bytes::from(head_changed)]);
        assert_ne!(k3.args_checksum, k1.args_checksum);
    }

    proptest! {
        #[test]
        fn bounds_hold_under_any_sequence(
            ops in proptest::collection::vec((0u8..3, 0u32..40, 0usize..150, 0u64..300), 1..400),
        ) {
            let t0 = base_instant();
            let config = DrcConfig {
                max_entries: 16,
                max_bytes: 1000,
                max_reply_bytes: 120,
                window: Duration::from_secs(100),
            };
            let mut c = ReplyCache::new(config);
            let mut now = t0;
            for (op, x, n, dt) in ops {
                now += Duration::from_secs(dt / 10);
                match op {
                    0 => { c.lookup_or_insert(now, key(x)); }
                    1 => { c.complete(now, key(x), &reply(n)); }
                    _ => c.abort(&key(x)),
                }
                prop_assert!(c.len() <= config.max_entries);
                prop_assert!(c.bytes() <= config.max_bytes);
                prop_assert_eq!(c.lru.len(), c.entries.len());
                let total: usize = c.entries.values().filter_map(|e| e.reply.as_ref()).map(|r| r.len()).sum();
                prop_assert_eq!(total, c.bytes());
            }
        }
    }
}
