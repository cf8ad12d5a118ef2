//! Ids and who asks: where the unguessable bytes of ids come from ([`Entropy`]), the
//! principal a request is compared by, and a connection's id.
//!
//! # Identity and staleness
//! Client ids, session ids and stateid `other` fields all carry the server instance's
//! `boot_epoch` (a 32-bit value the driver picks at start, e.g. seconds since the Unix epoch, as
//! knfsd does): an id from an earlier instance is recognised as stale (NFS4ERR_STALE_CLIENTID /
//! NFS4ERR_STALE_STATEID) instead of aliasing a new record. The parts a peer should not be able
//! to guess (4 bytes of every stateid `other` and session id) come from an injected
//! [`Entropy`] so tests are deterministic.
//!

/// Where unguessable bytes come from. Production passes an OS-seeded generator; tests a
/// seeded one, so that a run is a function of its seed.
pub trait Entropy {
    fn fill(&mut self, buf: &mut [u8]);
}

/// A small deterministic generator (splitmix64). Not cryptographic: it makes ids hard to guess
/// by accident, not against an attacker who can watch the wire (who could read them anyway).
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl Entropy for SplitMix {
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_be_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// Who made a request, as the client-record rules compare it (RFC 8881 §2.4: the principal).
/// For AUTH_SYS the processor builds it from uid, gid and machine name; an opaque byte string
/// here so the cores do not depend on the RPC layer's credential types.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Principal(pub bytes::Bytes);

/// A connection's identity, chosen by the driver (unique while the connection lives).
pub type ConnId = u64;
