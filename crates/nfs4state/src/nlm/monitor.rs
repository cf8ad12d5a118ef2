//! The server's status monitor (NSM, "statd", X/Open XNFS chapter 11) as a core over the
//! [`StateStore`]: which client hosts hold NLM locks, and this server's own state number.
//!
//! # Why
//! NLM locks live in memory. When the server restarts, its clients must learn it, so that
//! they reclaim their locks during grace; when a client restarts, the server must learn it,
//! so that the dead client's locks go. NSM carries both messages (SM_NOTIFY), keyed by a
//! state number each host keeps: odd while up, bumped at every start.
//!
//! # Records
//! | record | what | written | read |
//! |---|---|---|---|
//! | `nsm-state` | this server's last state number, decimal | once at start | once at start |
//! | `nsm-hosts` | the monitored hosts: caller name (hex) and the address seen, a line each | a host's first lock | at start: whom to notify |
//!
//! ```text
//!   start ── state := next odd number, kept ── hosts of the last run ──▶ the driver sends
//!            SM_NOTIFY { mon_name: this server, state } to each host's statd (through the
//!            host's portmapper); they reclaim in grace
//!   LOCK granted to a new host ── monitor(host, addr) ── record rewritten, durably
//!   SM_NOTIFY from a host ── the lock service frees its locks (`Nlm::free_all`)
//! ```
//!
//! The hosts of the last run stay recorded: a client that reclaims is still monitored, and
//! one that never comes back is dropped by [`Monitor::forget`] (the driver calls it when grace
//! ends for hosts that hold nothing).
//!
//! # Bounds
//! At most [`HOSTS_MAX`] hosts (a new one past it is not monitored: its locks still work, it
//! is only not told of a restart); a name is at most `LM_MAXSTRLEN` bytes, an address at most
//! [`ADDR_BYTES_MAX`]; a damaged record counts as empty.

use crate::store::{StateStore, StoreError};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The record names (module notes).
pub mod names {
    pub const STATE: &str = "nsm-state";
    pub const HOSTS: &str = "nsm-hosts";
}

/// Hosts monitored at most: the NLM host table's default bound.
pub const HOSTS_MAX: usize = 1024;
/// The longest address text kept for a host (an IPv6 address with a scope is under 64).
pub const ADDR_BYTES_MAX: usize = 64;
/// The longest hosts record read: every host at its longest name in hex, its address and
/// separators.
const HOSTS_BYTES_MAX: usize = HOSTS_MAX * (2 * sluice_xdr::nlm::LM_MAXSTRLEN + ADDR_BYTES_MAX + 2);
const STATE_BYTES_MAX: usize = 32;

/// The monitored hosts and this server's state number (module notes).
#[derive(Debug)]
pub struct Monitor {
    store: Arc<dyn StateStore>,
    state: u32,
    /// Caller name → the address it was last seen from (text).
    hosts: BTreeMap<Bytes, Bytes>,
}

impl Monitor {
    /// Starts this instance: the next odd state number, kept durably before it is used, and
    /// the hosts of the last run, which the driver notifies.
    pub fn start(store: Arc<dyn StateStore>) -> Result<Self, StoreError> {
        let last = match store.get(names::STATE, STATE_BYTES_MAX) {
            Ok(Some(b)) => std::str::from_utf8(&b)
                .ok()
                .and_then(|t| t.trim().parse::<u32>().ok()),
            Ok(None) | Err(StoreError::TooLarge { .. }) => None,
            Err(e) => return Err(e),
        };
        let state = next_state(last);
        store.put(names::STATE, format!("{state}\n").as_bytes())?;
        let hosts = match store.get(names::HOSTS, HOSTS_BYTES_MAX) {
            Ok(Some(b)) => parse_hosts(&b),
            Ok(None) | Err(StoreError::TooLarge { .. }) => BTreeMap::new(),
            Err(e) => return Err(e),
        };
        Ok(Self {
            store,
            state,
            hosts,
        })
    }

    /// This server's state number (odd).
    pub fn state(&self) -> u32 {
        self.state
    }

    /// The monitored hosts and their last addresses.
    pub fn hosts(&self) -> impl Iterator<Item = (&Bytes, &Bytes)> {
        self.hosts.iter()
    }

    /// Whether `name` is monitored.
    pub fn contains(&self, name: &[u8]) -> bool {
        self.hosts.contains_key(name)
    }

    /// Monitors `name`, last seen from `addr`, durably. Nothing to write when it is monitored
    /// from that address already; [`StoreError::Full`] past [`HOSTS_MAX`].
    pub fn monitor(&mut self, name: &[u8], addr: &[u8]) -> Result<(), StoreError> {
        if self.hosts.get(name).is_some_and(|a| a[..] == *addr) {
            return Ok(());
        }
        if name.len() > sluice_xdr::nlm::LM_MAXSTRLEN
            || addr.len() > ADDR_BYTES_MAX
            || (!self.hosts.contains_key(name) && self.hosts.len() >= HOSTS_MAX)
        {
            return Err(StoreError::Full {
                name: names::HOSTS.into(),
            });
        }
        let before = self
            .hosts
            .insert(Bytes::copy_from_slice(name), Bytes::copy_from_slice(addr));
        if let Err(e) = self.write() {
            match before {
                Some(a) => self.hosts.insert(Bytes::copy_from_slice(name), a),
                None => self.hosts.remove(name),
            };
            return Err(e);
        }
        Ok(())
    }

    /// Stops monitoring the hosts `drop` names, durably.
    pub fn forget(&mut self, drop: impl Fn(&[u8]) -> bool) -> Result<(), StoreError> {
        let before = self.hosts.len();
        self.hosts.retain(|n, _| !drop(n));
        if self.hosts.len() == before {
            return Ok(());
        }
        self.write()
    }

    fn write(&self) -> Result<(), StoreError> {
        let mut out = String::new();
        for (n, a) in &self.hosts {
            for b in n.iter() {
                out.push_str(&format!("{b:02x}"));
            }
            out.push(' ');
            out.push_str(&String::from_utf8_lossy(a));
            out.push('\n');
        }
        self.store.put(names::HOSTS, out.as_bytes())
    }
}

/// The next state number: odd, above the last one (1 on a first start; wraps past 2^32 to 1).
pub fn next_state(last: Option<u32>) -> u32 {
    match last {
        None => 1,
        Some(l) => {
            let n = l.wrapping_add(if l.is_multiple_of(2) { 1 } else { 2 });
            if n == 0 || n.is_multiple_of(2) {
                1
            } else {
                n
            }
        }
    }
}

/// The hosts record: `hexname addr` a line; damaged lines are skipped.
fn parse_hosts(b: &[u8]) -> BTreeMap<Bytes, Bytes> {
    let mut out = BTreeMap::new();
    for line in b.split(|&c| c == b'\n') {
        let mut parts = line.splitn(2, |&c| c == b' ');
        let (Some(hex), Some(addr)) = (parts.next(), parts.next()) else {
            continue;
        };
        let Some(name) = unhex(hex) else { continue };
        if name.is_empty()
            || name.len() > sluice_xdr::nlm::LM_MAXSTRLEN
            || addr.len() > ADDR_BYTES_MAX
            || out.len() >= HOSTS_MAX
        {
            continue;
        }
        out.insert(Bytes::from(name), Bytes::copy_from_slice(addr));
    }
    out
}

fn unhex(h: &[u8]) -> Option<Vec<u8>> {
    if !h.len().is_multiple_of(2) {
        return None;
    }
    h.chunks(2)
        .map(|p| {
            let s = std::str::from_utf8(p).ok()?;
            u8::from_str_radix(s, 16).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemStore;

    #[test]
    fn the_state_number_is_odd_and_grows_at_every_start() {
        let store: Arc<dyn StateStore> = Arc::new(MemStore::default());
        let a = Monitor::start(store.clone()).unwrap().state();
        let b = Monitor::start(store.clone()).unwrap().state();
        let c = Monitor::start(store).unwrap().state();
        assert_eq!((a, b, c), (1, 3, 5));
        assert_eq!(next_state(Some(4)), 5);
        assert_eq!(next_state(Some(u32::MAX)), 1);
    }

    #[test]
    fn monitored_hosts_survive_a_restart() {
        let store: Arc<dyn StateStore> = Arc::new(MemStore::default());
        let mut m = Monitor::start(store.clone()).unwrap();
        m.monitor(b"client one", b"10.0.0.1").unwrap();
        m.monitor(b"c2", b"::1").unwrap();
        m.monitor(b"c2", b"::1").unwrap();
        let m = Monitor::start(store.clone()).unwrap();
        let hosts: Vec<_> = m.hosts().map(|(n, a)| (n.clone(), a.clone())).collect();
        assert_eq!(
            hosts,
            vec![
                (Bytes::from_static(b"c2"), Bytes::from_static(b"::1")),
                (
                    Bytes::from_static(b"client one"),
                    Bytes::from_static(b"10.0.0.1")
                ),
            ]
        );
        let mut m = m;
        m.forget(|n| n == b"c2").unwrap();
        let m = Monitor::start(store).unwrap();
        assert!(m.contains(b"client one") && !m.contains(b"c2"));
    }

    #[test]
    fn a_damaged_hosts_record_counts_lines_that_parse() {
        let h = parse_hosts(b"zz 1.2.3.4\n6162 1.2.3.4\nnospace\n\n");
        assert_eq!(h.len(), 1);
        assert!(h.contains_key(&b"ab"[..]));
    }

    #[test]
    fn hosts_past_the_bound_are_refused() {
        let store: Arc<dyn StateStore> = Arc::new(MemStore::default());
        let mut m = Monitor::start(store).unwrap();
        for i in 0..HOSTS_MAX {
            m.monitor(format!("h{i}").as_bytes(), b"a").unwrap();
        }
        assert!(matches!(
            m.monitor(b"one more", b"a"),
            Err(StoreError::Full { .. })
        ));
    }
}
