//! The simulated file's content: a position-dependent pattern that the server serves without
//! copying and the client checks at memcmp speed.
//!
//! Byte `o` of the file is byte `o mod P` of a seeded pseudo-random block, `P` =
//! [`PERIOD_BYTES`] = 4 194 301, the largest prime below 4 MiB. The server answers a READ with
//! slices of one pre-generated buffer of `2 × P` bytes (any range of at most `P` bytes is one
//! contiguous slice of it), so serving a gigabyte costs no copying; the client compares what
//! the application receives against the same buffer.
//!
//! Why periodic and why that period: generating and checking a unique byte per position would
//! cost two passes over every byte of a multi-gigabyte grid run. A periodic pattern costs one
//! memcmp. It catches a misplaced range unless the displacement is a multiple of `P`; because
//! `P` is an odd prime, no displacement by a multiple of any power of two (the alignments all
//! offsets in this system are built from: 4 KiB pages, 32 KiB or 1 MiB READs) is a multiple of
//! `P` below `P × 4096` = 16 GiB, far beyond any simulated file. Within a period the bytes are a
//! hash of their position and the seed, so a duplicated or dropped chunk never matches.

use bytes::Bytes;

/// Period of the pattern in bytes: the largest prime below 4 MiB (see the module docs).
pub const PERIOD_BYTES: u64 = 4_194_301;

/// The file content of one run.
#[derive(Debug, Clone)]
pub struct Content {
    /// Two periods, so that any range of at most one period is a single slice.
    buf: Bytes,
}

impl Content {
    /// The pattern for `seed`.
    pub fn new(seed: u64) -> Self {
        let len = (2 * PERIOD_BYTES) as usize;
        let mut v = vec![0u8; len.next_multiple_of(8)];
        for (w, chunk) in v.chunks_exact_mut(8).enumerate() {
            chunk.copy_from_slice(&splitmix64(seed ^ (w as u64)).to_le_bytes());
        }
        // The second period repeats the first exactly.
        let p = PERIOD_BYTES as usize;
        v.copy_within(0..p, p);
        v.truncate(len);
        Content {
            buf: Bytes::from(v),
        }
    }

    /// The bytes `[offset, offset + len)` as zero-copy slices.
    pub fn slices(&self, offset: u64, len: u64) -> Vec<Bytes> {
        let mut out = Vec::with_capacity(1 + (len / PERIOD_BYTES) as usize);
        let (mut off, end) = (offset, offset + len);
        while off < end {
            let n = (end - off).min(PERIOD_BYTES);
            let start = (off % PERIOD_BYTES) as usize;
            out.push(self.buf.slice(start..start + n as usize));
            off += n;
        }
        out
    }

    /// Where `data`, claimed to be the file at `offset`, first differs from it (index into
    /// `data`), or `None` if every byte matches.
    pub fn first_mismatch(&self, offset: u64, data: &[u8]) -> Option<usize> {
        let mut done = 0usize;
        while done < data.len() {
            let off = offset + done as u64;
            let start = (off % PERIOD_BYTES) as usize;
            let n = (data.len() - done).min(PERIOD_BYTES as usize);
            let want = &self.buf[start..start + n];
            let got = &data[done..done + n];
            if want != got {
                let i = want.iter().zip(got).position(|(a, b)| a != b);
                return Some(done + i.expect("slices differ"));
            }
            done += n;
        }
        None
    }
}

/// SplitMix64's output function: a cheap, well-mixed hash of a word index.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_match_and_displacements_are_caught() {
        let c = Content::new(7);
        for (off, len) in [
            (0u64, 100u64),
            (PERIOD_BYTES - 3, 10),
            (5 * PERIOD_BYTES + 1, 3 * PERIOD_BYTES),
        ] {
            let data: Vec<u8> = c.slices(off, len).iter().flat_map(|b| b.to_vec()).collect();
            assert_eq!(data.len() as u64, len);
            assert_eq!(c.first_mismatch(off, &data), None);
            assert!(c.first_mismatch(off + 4096, &data).is_some());
            assert!(c.first_mismatch(off + 1, &data).is_some());
        }
        assert_ne!(Content::new(8).buf, c.buf);
    }
}
