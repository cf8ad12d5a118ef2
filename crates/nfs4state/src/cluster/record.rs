//! The shared grace record: the cluster's current epoch C, its recovery epoch R, and one entry
//! per head with its flags, in the layout of nfs-ganesha's `rados_grace` object so that
//! `ganesha-rados-grace dump` can read a cluster of sluice heads.
//!
//! # Layout
//! ganesha keeps the record in one RADOS object (default name `grace`): its data is 16 bytes,
//! C then R, each a little-endian `u64`; its omap has one key per head (the node id) whose
//! value's first byte holds the flags NEED (0x1: the head has clients to reclaim) and
//! ENFORCING (0x2: the head refuses new state). The [`StateStore`] speaks of flat records, so
//! the flat form ([`GraceRecord::encode`]) is the object's 16 data bytes followed by the omap
//! entries, each `key length (u8), key, value length (u8), value`, in key order. A RADOS store
//! writes [`GraceRecord::object_data`] as the object's data and [`GraceRecord::omap`] as its
//! omap, and reads them back through [`GraceRecord::from_parts`]; the flat form is for stores
//! without an omap (the memory store of the tests and the simulator).
//!
//! # What sluice adds, and why ganesha still reads it
//! ganesha has no takeover: a dead head's entry waits for that head to come back. Here a
//! surviving head adopts it, and that fact must be in the record so that a third head knows
//! whose clients are pending should the adopter die too. The adopter's id follows the flags
//! byte in the entry's value (`[flags, carrier id...]`); ganesha reads only the first byte, so
//! its dump shows the adopted head with its N and E flags and ignores the rest. The flag bits
//! ganesha defines keep their meaning; no other bit is set.
//!
//! [`StateStore`]: crate::store::StateStore

use std::collections::BTreeMap;

/// The record's name in the store: ganesha's default grace object id.
pub const GRACE_RECORD: &str = "grace";

/// Heads in one record at most. ganesha reads at most 1024 omap keys; two or three heads are
/// the goal, and 32 keeps the record under 2 KiB (a few hundred bytes to rewrite per change).
pub const HEADS_MAX: usize = 32;

/// The longest head id: a RADOS omap key, and the tail of a client record's name
/// (`rec-` + 16 hex digits + `:` + id fits [`crate::store::NAME_BYTES_MAX`]).
pub const HEAD_ID_BYTES_MAX: usize = 32;

/// The longest encoded record: the epochs plus every head with a carrier.
pub const RECORD_BYTES_MAX: usize =
    16 + HEADS_MAX * (2 + HEAD_ID_BYTES_MAX + 1 + HEAD_ID_BYTES_MAX);

/// A head's node id: 1 to [`HEAD_ID_BYTES_MAX`] bytes of `[a-z0-9_-]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HeadId(String);

impl HeadId {
    /// The id, or `None` when it is not one (module notes).
    pub fn new(id: &str) -> Option<Self> {
        let ok = !id.is_empty()
            && id.len() <= HEAD_ID_BYTES_MAX
            && id
                .bytes()
                .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'));
        ok.then(|| Self(id.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for HeadId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A head's flags, ganesha's bits (`RADOS_GRACE_NEED_GRACE`, `RADOS_GRACE_ENFORCING`). Bits
/// we do not know survive a rewrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flags(pub u8);

impl Flags {
    /// The head has clients that may reclaim: the cluster grace waits for it.
    pub const NEED: Flags = Flags(0x1);
    /// The head refuses new state (NFS4ERR_GRACE).
    pub const ENFORCING: Flags = Flags(0x2);

    pub fn has(self, f: Flags) -> bool {
        self.0 & f.0 == f.0
    }

    pub fn set(&mut self, f: Flags, on: bool) {
        if on {
            self.0 |= f.0;
        } else {
            self.0 &= !f.0;
        }
    }
}

/// One head's entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Entry {
    pub flags: Flags,
    /// The head that took this one over (it died), if any: its clients reclaim there.
    pub carrier: Option<HeadId>,
}

/// The shared record (module notes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraceRecord {
    /// C: the epoch under which heads record their clients now. Never 0.
    pub current: u64,
    /// R: the epoch whose clients may reclaim; 0 when no cluster grace is in force.
    pub recovery: u64,
    pub heads: BTreeMap<HeadId, Entry>,
}

/// Why bytes are not a grace record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("grace record: data is {0} bytes, not 16")]
    DataLength(usize),
    #[error("grace record: current epoch 0")]
    ZeroEpoch,
    #[error("grace record: truncated or malformed omap")]
    Omap,
    #[error("grace record: head id {0:?} is not one")]
    BadHead(String),
    #[error("grace record: over {HEADS_MAX} heads")]
    TooManyHeads,
}

impl Default for GraceRecord {
    /// A new record, as `ganesha-rados-grace add` creates it: C = 1, R = 0, no heads.
    fn default() -> Self {
        Self {
            current: 1,
            recovery: 0,
            heads: BTreeMap::new(),
        }
    }
}

impl GraceRecord {
    /// Whether a cluster grace is in force (R ≠ 0).
    pub fn in_grace(&self) -> bool {
        self.recovery != 0
    }

    /// Starts a cluster grace unless one is in force: R = C, C = C + 1 (ganesha's join with
    /// `start`). Returns whether it started one.
    pub fn start_grace(&mut self) -> bool {
        if self.in_grace() {
            return false;
        }
        self.recovery = self.current;
        self.current += 1;
        true
    }

    /// Whether every head enforces the grace.
    pub fn all_enforcing(&self) -> bool {
        self.heads.values().all(|e| e.flags.has(Flags::ENFORCING))
    }

    /// Whether any head still has clients to reclaim.
    pub fn any_need(&self) -> bool {
        self.heads.values().any(|e| e.flags.has(Flags::NEED))
    }

    /// The object's data: C and R, little-endian (ganesha's layout).
    pub fn object_data(&self) -> [u8; 16] {
        let mut d = [0; 16];
        d[..8].copy_from_slice(&self.current.to_le_bytes());
        d[8..].copy_from_slice(&self.recovery.to_le_bytes());
        d
    }

    /// The omap: head id → `[flags, carrier id...]`.
    pub fn omap(&self) -> Vec<(String, Vec<u8>)> {
        self.heads
            .iter()
            .map(|(h, e)| {
                let mut v = vec![e.flags.0];
                if let Some(c) = &e.carrier {
                    v.extend_from_slice(c.as_str().as_bytes());
                }
                (h.to_string(), v)
            })
            .collect()
    }

    /// The record from an object's data and omap. An empty value counts as no flags.
    pub fn from_parts<'a>(
        data: &[u8],
        omap: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Result<Self, RecordError> {
        let data: [u8; 16] = data
            .try_into()
            .map_err(|_| RecordError::DataLength(data.len()))?;
        let current = u64::from_le_bytes(data[..8].try_into().unwrap_or_default());
        let recovery = u64::from_le_bytes(data[8..].try_into().unwrap_or_default());
        if current == 0 {
            return Err(RecordError::ZeroEpoch);
        }
        let mut heads = BTreeMap::new();
        for (key, value) in omap {
            let id = HeadId::new(key).ok_or_else(|| RecordError::BadHead(key.to_string()))?;
            let flags = Flags(value.first().copied().unwrap_or(0));
            let carrier = match value.get(1..) {
                None | Some([]) => None,
                Some(c) => {
                    let c = std::str::from_utf8(c).map_err(|_| RecordError::Omap)?;
                    Some(HeadId::new(c).ok_or_else(|| RecordError::BadHead(c.to_string()))?)
                }
            };
            if heads.len() >= HEADS_MAX {
                return Err(RecordError::TooManyHeads);
            }
            heads.insert(id, Entry { flags, carrier });
        }
        Ok(Self {
            current,
            recovery,
            heads,
        })
    }

    /// The flat form (module notes).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.object_data().to_vec();
        for (k, v) in self.omap() {
            // Both fit a byte: ids are at most 32 bytes, values 1 + 32.
            out.push(k.len() as u8);
            out.extend_from_slice(k.as_bytes());
            out.push(v.len() as u8);
            out.extend_from_slice(&v);
        }
        out
    }

    /// Decodes the flat form; never panics on any bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        if bytes.len() < 16 {
            return Err(RecordError::DataLength(bytes.len()));
        }
        let (data, mut rest) = bytes.split_at(16);
        let mut omap = Vec::new();
        while !rest.is_empty() {
            let (key, r) = take_counted(rest)?;
            let (value, r) = take_counted(r)?;
            let key = std::str::from_utf8(key).map_err(|_| RecordError::Omap)?;
            omap.push((key, value));
            rest = r;
        }
        Self::from_parts(data, omap)
    }
}

fn take_counted(b: &[u8]) -> Result<(&[u8], &[u8]), RecordError> {
    let (&n, rest) = b.split_first().ok_or(RecordError::Omap)?;
    if rest.len() < n as usize {
        return Err(RecordError::Omap);
    }
    Ok(rest.split_at(n as usize))
}

/// The name of head `head`'s client record for `epoch`: ganesha's `rec-%016x:<node id>`.
pub fn client_record_name(epoch: u64, head: &HeadId) -> String {
    format!("rec-{epoch:016x}:{head}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> HeadId {
        HeadId::new(s).unwrap()
    }

    #[test]
    fn the_data_is_ganeshas_two_little_endian_epochs() {
        let r = GraceRecord {
            current: 3,
            recovery: 2,
            heads: BTreeMap::new(),
        };
        assert_eq!(
            r.object_data(),
            [3, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn flags_are_ganeshas_bits_in_the_first_value_byte() {
        let mut r = GraceRecord::default();
        r.heads.insert(
            id("a"),
            Entry {
                flags: Flags(Flags::NEED.0 | Flags::ENFORCING.0),
                carrier: None,
            },
        );
        r.heads.insert(
            id("b"),
            Entry {
                flags: Flags::ENFORCING,
                carrier: Some(id("a")),
            },
        );
        assert_eq!(
            r.omap(),
            vec![("a".into(), vec![3]), ("b".into(), vec![2, b'a'])]
        );
    }

    #[test]
    fn a_record_round_trips_flat_and_in_parts() {
        let mut r = GraceRecord::default();
        r.start_grace();
        r.heads.insert(id("head-1"), Entry::default());
        r.heads.insert(
            id("head-2"),
            Entry {
                flags: Flags(0x83),
                carrier: Some(id("head-1")),
            },
        );
        assert_eq!(GraceRecord::decode(&r.encode()).unwrap(), r);
        let omap = r.omap();
        let parts = GraceRecord::from_parts(
            &r.object_data(),
            omap.iter().map(|(k, v)| (k.as_str(), v.as_slice())),
        )
        .unwrap();
        assert_eq!(parts, r);
        assert!(r.encode().len() <= RECORD_BYTES_MAX);
    }

    #[test]
    fn starting_a_grace_moves_the_epochs_once() {
        let mut r = GraceRecord::default();
        assert!(r.start_grace());
        assert_eq!((r.current, r.recovery), (2, 1));
        assert!(!r.start_grace(), "joining a grace in force changes nothing");
        assert_eq!((r.current, r.recovery), (2, 1));
    }

    #[test]
    fn damaged_records_are_errors_not_panics() {
        assert!(GraceRecord::decode(&[]).is_err());
        assert!(GraceRecord::decode(&[0; 16]).is_err(), "epoch 0");
        let mut ok = GraceRecord::default().encode();
        ok.extend_from_slice(&[5, b'a']);
        assert!(GraceRecord::decode(&ok).is_err());
        let mut bad_id = GraceRecord::default().encode();
        bad_id.extend_from_slice(&[1, b'A', 1, 0]);
        assert!(GraceRecord::decode(&bad_id).is_err());
        let mut seed = 7u64;
        for len in 0..200 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (seed >> 56) as u8
                })
                .collect();
            let _ = GraceRecord::decode(&bytes);
        }
    }

    #[test]
    fn client_records_are_named_as_ganesha_names_them() {
        assert_eq!(client_record_name(0x2a, &id("b")), "rec-000000000000002a:b");
        crate::store::check_name(&client_record_name(u64::MAX, &id(&"x".repeat(32)))).unwrap();
    }
}
