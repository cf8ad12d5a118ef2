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
//! The request is hashed once, as it arrives, and a WRITE's payload is most of it, so the
//! hash's speed is the server's CPU per byte written over v4.1. The first version (FNV-1a, one
//! byte per dependent multiply) took about 1 ms per MiB. The second read 8 bytes per step into
//! four multiply lanes: 0.33 s per GiB, still 18 % of the server's CPU in a profile of 1 GiB of
//! 1 MiB WRITEs (2026-11-25), and the whole gap between v4.1's write CPU per GiB (0.96 s) and
//! v3's (0.55 s). XXH3 (the `xxhash-rust` crate), built for exactly this, takes 0.12 s per GiB
//! on the same machine with the baseline x86-64 instruction set. Skipping the payload (hashing
//! its length and a sample) would be cheaper still but would let a retry that differs only in
//! its data replay the first reply: the one false retry that loses data silently, so every
//! byte of a request whose reply is cached is hashed. A request the client did not ask to
//! cache (`sa_cachethis` false, as the Linux client sends READ and WRITE) has no reply to
//! replay, so only its first bytes and its length are hashed (`UNCACHED_DIGEST_BYTES` in
//! `compound.rs`, which says why that is safe): XXH3 over whole 1 MiB WRITEs was still 16 % of
//! the server's CPU.
//!
//! # What it catches
//! * Requests of different lengths: XXH3 hashes the length in.
//! * Requests that differ anywhere (one byte of the payload, an offset, a stateid, a name):
//!   all but a chance near 2^-64 for two requests that were not built to collide. The digest
//!   is not cryptographic: a client that crafts a collision only confuses its own slot (the
//!   session is its own), so that is not defended against.
//! * A different principal on the same slot and sequence id (another user's request): the
//!   principal and its length are hashed in after the request. knfsd catches this one too,
//!   so that a retry cannot fetch another user's cached reply.
//!
//! Segmentation does not matter: the record arrives in socket-sized segments that differ
//! between a request and its retry, and the digest is that of the bytes, however they are
//! cut (XXH3's streaming state carries a partial stripe over).

use xxhash_rust::xxh3::Xxh3;

/// A running digest of bytes fed in any number of pieces.
#[derive(Clone)]
pub struct Digest {
    state: Box<Xxh3>,
}

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Digest").finish_non_exhaustive()
    }
}

impl Default for Digest {
    fn default() -> Self {
        Self::new()
    }
}

impl Digest {
    pub fn new() -> Self {
        // Boxed: the streaming state holds a 256-byte buffer and the accumulators, and it
        // travels with each request.
        Self {
            state: Box::new(Xxh3::new()),
        }
    }

    /// Adds the next `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        self.state.update(bytes);
    }

    /// The digest of everything added, followed by `principal`'s bytes and their length (see
    /// the module notes). The trailing length keeps the cut unambiguous: two (request,
    /// principal) pairs with the same concatenation and the same principal length are equal.
    pub fn principal(mut self, principal: &[u8]) -> u64 {
        self.state.update(principal);
        self.state.update(&(principal.len() as u64).to_le_bytes());
        self.state.digest()
    }

    /// The digest of everything added.
    pub fn finish(self) -> u64 {
        self.state.digest()
    }
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
