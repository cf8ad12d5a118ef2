//! The digest a slot keeps of its request, to tell a retry from a false retry
//! (RFC 8881 §2.10.6.1.3).
//!
//! A client that reuses a slot's sequence id for a *different* request must get
//! NFS4ERR_SEQ_FALSE_RETRY, not the reply cached for the first one (which would tell it that
//! its new request ran). The slot keeps a 64-bit digest of every byte of the COMPOUND after
//! SEQUENCE's sequence id (the rest of SEQUENCE's arguments, the other ops' arguments, a
//! WRITE's payload), folded with the caller's principal ([`Digest::principal`]), and compares
//! the retry's.
//!
//! # Cost
//! The request is hashed once, as it arrives, and a WRITE's payload is most of it. The first
//! version (FNV-1a, one byte per multiply, each depending on the last) took about 1 ms per
//! MiB: as much CPU as the rest of a 1 MiB WRITE. This one reads 8 bytes per step into four
//! independent lanes (32 bytes per round, so the multiplies overlap in the CPU), which is
//! some 30 times fewer dependent multiplies per byte. Skipping the payload (hashing its
//! length and a sample) would be cheaper still but would let a retry that differs only in its
//! data replay the first reply: the one false retry that loses data silently, so every byte
//! is hashed.
//!
//! # What it catches
//! * Requests of different lengths, always (the length is hashed).
//! * Requests of the same length that differ in one 8-byte word (one byte of the payload, an
//!   offset, a stateid, a name): always. Each lane step `h = (h ^ word) * K` with `K` odd is
//!   a bijection of `h` for a given word, so a lane that took one different word ends in a
//!   different state, and the lanes are combined (and the result finished) by bijections too.
//! * A different principal on the same slot and sequence id (another user's request), with
//!   the same certainty: knfsd catches this one too, so that a retry cannot fetch another
//!   user's cached reply.
//! * More differences: all but a chance near 2^-64 for any two requests that were not built
//!   to collide. The digest is not cryptographic: a client that crafts a collision only
//!   confuses its own slot (the session is its own), so that is not defended against.
//!
//! Segmentation does not matter: the record arrives in socket-sized segments that differ
//! between a request and its retry, and the digest is that of the bytes, however they are
//! cut ([`Digest::update`] carries a partial round over).

/// An odd 64-bit multiplier (FNV-1a's 64-bit prime, `2^40 + 2^8 + 0xb3`): any odd one makes
/// each step a bijection; this one spreads low bits upwards well.
const K: u64 = 0x0000_0100_0000_01b3;
/// Starting lane states: FNV-1a's 64-bit offset basis, and it rotated so the lanes differ.
const SEED: u64 = 0xcbf2_9ce4_8422_2325;
/// Bytes per round: four lanes of 8.
const ROUND_BYTES: usize = 32;

/// A running digest of bytes fed in any number of pieces.
#[derive(Debug, Clone)]
pub struct Digest {
    lanes: [u64; 4],
    /// A round begun in an earlier piece.
    carry: [u8; ROUND_BYTES],
    carry_len: usize,
    total_bytes: u64,
}

impl Default for Digest {
    fn default() -> Self {
        Self::new()
    }
}

impl Digest {
    pub fn new() -> Self {
        Self {
            lanes: [
                SEED,
                SEED.rotate_left(16),
                SEED.rotate_left(32),
                SEED.rotate_left(48),
            ],
            carry: [0; ROUND_BYTES],
            carry_len: 0,
            total_bytes: 0,
        }
    }

    /// Adds the next `bytes`.
    pub fn update(&mut self, mut bytes: &[u8]) {
        self.total_bytes += bytes.len() as u64;
        if self.carry_len > 0 {
            let n = (ROUND_BYTES - self.carry_len).min(bytes.len());
            self.carry[self.carry_len..self.carry_len + n].copy_from_slice(&bytes[..n]);
            self.carry_len += n;
            bytes = &bytes[n..];
            if self.carry_len < ROUND_BYTES {
                return;
            }
            let round = self.carry;
            self.round(&round);
            self.carry_len = 0;
        }
        let mut rounds = bytes.chunks_exact(ROUND_BYTES);
        for r in &mut rounds {
            self.round(r.try_into().expect("a whole round"));
        }
        let rest = rounds.remainder();
        self.carry[..rest.len()].copy_from_slice(rest);
        self.carry_len = rest.len();
    }

    /// The digest of everything added, folded with `principal`'s bytes (see the module notes).
    pub fn principal(self, principal: &[u8]) -> u64 {
        let mut p = Digest::new();
        p.update(principal);
        finish_word((self.finish() ^ p.finish().rotate_left(32)).wrapping_mul(K))
    }

    /// The digest of everything added.
    pub fn finish(mut self) -> u64 {
        if self.carry_len > 0 {
            // The partial round, zero-filled; the length below tells it from real zeros.
            let mut round = [0u8; ROUND_BYTES];
            round[..self.carry_len].copy_from_slice(&self.carry[..self.carry_len]);
            self.round(&round);
        }
        let mut h = SEED ^ self.total_bytes;
        for lane in self.lanes {
            h = (h ^ lane).wrapping_mul(K);
        }
        finish_word(h)
    }

    fn round(&mut self, r: &[u8; ROUND_BYTES]) {
        for (i, lane) in self.lanes.iter_mut().enumerate() {
            let word = u64::from_le_bytes(r[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
            *lane = (*lane ^ word).wrapping_mul(K);
        }
    }
}

/// Mixes the high bits of `h` into the low ones (xor-shift and odd multiply: a bijection),
/// so that the digest's every bit depends on every lane.
fn finish_word(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(bytes: &[u8]) -> u64 {
        let mut d = Digest::new();
        d.update(bytes);
        d.finish()
    }

    /// A request-like buffer: 1 MiB of a pattern that repeats (as file data often does).
    fn payload() -> Vec<u8> {
        (0..1 << 20).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn one_differing_payload_byte_in_the_middle_is_caught() {
        let a = payload();
        for at in [a.len() / 2, a.len() / 2 + 3, a.len() - 1, 0] {
            let mut b = a.clone();
            b[at] ^= 0x01;
            assert_ne!(of(&a), of(&b), "a flipped bit at {at}");
        }
    }

    #[test]
    fn differing_arguments_and_lengths_are_caught() {
        // Two WRITE-like argument heads differing in the offset's low byte.
        let head = |offset: u64| {
            let mut v = b"stateid-16-bytes".to_vec();
            v.extend_from_slice(&offset.to_be_bytes());
            v.extend_from_slice(&[0, 0, 0, 2]);
            v
        };
        assert_ne!(of(&head(4096)), of(&head(4097)));
        // A trailing zero is not the same as nothing (the zero-filled last round).
        assert_ne!(of(b"abc"), of(b"abc\0"));
        assert_ne!(of(b""), of(&[0u8; 32]));
        // Words swapped between lanes.
        let mut x = [0u8; 64];
        x[0] = 1;
        let mut y = [0u8; 64];
        y[8] = 1;
        assert_ne!(of(&x), of(&y));
    }

    #[test]
    fn the_digest_does_not_depend_on_how_the_bytes_are_cut() {
        let a = payload();
        let whole = of(&a[..100_003]);
        for cut in [1usize, 7, 31, 32, 33, 4096, 65_536] {
            let mut d = Digest::new();
            for piece in a[..100_003].chunks(cut) {
                d.update(piece);
            }
            assert_eq!(d.finish(), whole, "pieces of {cut}");
        }
    }

    #[test]
    fn another_principal_is_another_request() {
        let a = payload();
        let mut d = Digest::new();
        d.update(&a);
        let (d1, d2) = (d.clone(), d);
        assert_ne!(d1.principal(b"sys:1000"), d2.principal(b"sys:1001"));
        let mut e = Digest::new();
        e.update(&a);
        let mut f = Digest::new();
        f.update(&a);
        assert_eq!(e.principal(b"sys:1000"), f.principal(b"sys:1000"));
    }
}
