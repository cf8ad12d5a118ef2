//! `Arb` builds an arbitrary value of a wire type from a seeded generator. The declaration
//! macros ([`crate::decl`]) implement it for every struct, union, enum, byte string and array,
//! so a round-trip property over all ops needs one proptest strategy (a seed) instead of a
//! hand-written one per type. Test builds only.

use crate::Payload;
use bytes::Bytes;

/// xorshift64*: small, deterministic, good enough to pick shapes and values.
pub struct Gen(u64);

impl Gen {
    pub fn new(seed: u64) -> Self {
        Gen(seed | 1)
    }
    pub fn u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn u32(&mut self) -> u32 {
        (self.u64() >> 32) as u32
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.u64() % n as u64) as usize
    }
    pub fn bytes(&mut self, max: usize) -> Bytes {
        let n = self.below(max + 1);
        Bytes::from((0..n).map(|_| self.u32() as u8).collect::<Vec<u8>>())
    }
}

pub trait Arb: Sized {
    fn arb(g: &mut Gen) -> Self;
}

impl Arb for u32 {
    fn arb(g: &mut Gen) -> Self {
        g.u32()
    }
}
impl Arb for u64 {
    fn arb(g: &mut Gen) -> Self {
        g.u64()
    }
}
impl Arb for i64 {
    fn arb(g: &mut Gen) -> Self {
        g.u64() as i64
    }
}
impl Arb for bool {
    fn arb(g: &mut Gen) -> Self {
        g.below(2) == 1
    }
}
impl Arb for () {
    fn arb(_g: &mut Gen) -> Self {}
}
impl<const N: usize> Arb for [u8; N] {
    fn arb(g: &mut Gen) -> Self {
        let mut a = [0u8; N];
        for b in a.iter_mut() {
            *b = g.u32() as u8;
        }
        a
    }
}
impl<T: Arb> Arb for Option<T> {
    fn arb(g: &mut Gen) -> Self {
        if g.below(2) == 0 {
            None
        } else {
            Some(T::arb(g))
        }
    }
}
impl<T: Arb> Arb for Box<T> {
    fn arb(g: &mut Gen) -> Self {
        Box::new(T::arb(g))
    }
}
impl Arb for crate::rpc::AuthSys {
    fn arb(g: &mut Gen) -> Self {
        let n = g.below(4);
        crate::rpc::AuthSys {
            stamp: g.u32(),
            machine_name: g.bytes(16),
            uid: g.u32(),
            gid: g.u32(),
            gids: (0..n).map(|_| g.u32()).collect(),
        }
    }
}
impl Arb for Payload {
    fn arb(g: &mut Gen) -> Self {
        let n = g.below(3);
        Payload::from_chunks((0..n).map(|_| g.bytes(40)).collect())
    }
}
