//! Extras for the engine and allocation tests: a position-dependent data pattern, a replayable
//! shuffle, a longer reply timeout (256 MiB through a loaded machine), and [`Rpc`] helpers that
//! unwrap successful results, including WRITEs sent back to back with their replies collected
//! in any order (matched by XID), which is how a real client keeps 16 WRITEs in flight.

use super::{dirop, Rpc};
use bytes::Bytes;
use sluice_xdr::nfs3::*;
use sluice_xdr::Payload;
use std::net::SocketAddr;
use std::time::Duration;

pub const MIB: u64 = 1 << 20;
/// Longest wait for one reply: generous (a loaded CI machine) but finite.
pub const ENGINE_REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// Byte `offset` of every test file: a pattern that differs between neighbouring MiBs and
/// within a page, so misplaced or stale data shows.
pub fn pattern(offset: u64) -> u8 {
    (offset.wrapping_mul(31) ^ (offset >> 20).wrapping_mul(0x9d) ^ (offset >> 12)) as u8
}

pub fn pattern_range(offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| pattern(offset + i)).collect()
}

/// One xorshift step: the next of a deterministic sequence (the state must not be zero).
pub fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// A deterministic shuffle (xorshift), so a failure replays.
pub fn shuffled(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut x = seed | 1;
    for i in (1..v.len()).rev() {
        v.swap(i, (xorshift(&mut x) % (i as u64 + 1)) as usize);
    }
    v
}

impl Rpc {
    /// A connection with the engine tests' timeout ([`ENGINE_REPLY_TIMEOUT`]).
    pub async fn connect_engine(addr: SocketAddr) -> Rpc {
        Rpc::connect_within(addr, ENGINE_REPLY_TIMEOUT).await
    }

    /// A new empty file (GUARDED, 0644); its handle.
    pub async fn create(&mut self, dir: &NfsFh3, name: &str) -> NfsFh3 {
        match self
            .nfs(Args3::Create(CreateArgs {
                where_: dirop(dir, name),
                how: CreateHow::Guarded(Sattr3 {
                    mode: Some(0o644),
                    ..Default::default()
                }),
            }))
            .await
        {
            Res3::Create(NfsResult::Ok(ok)) => ok.obj.expect("CREATE returns the handle"),
            other => panic!("CREATE {name}: {other:?}"),
        }
    }

    pub fn write_args(fh: &NfsFh3, offset: u64, data: Bytes, stable: StableHow) -> Args3 {
        Args3::Write(WriteArgs {
            file: fh.clone(),
            offset,
            count: data.len() as u32,
            stable,
            data: Payload::from(data),
        })
    }

    /// One WRITE, waited for; its result.
    pub async fn write(
        &mut self,
        fh: &NfsFh3,
        offset: u64,
        data: Bytes,
        stable: StableHow,
    ) -> WriteResOk {
        match self.nfs(Self::write_args(fh, offset, data, stable)).await {
            Res3::Write(NfsResult::Ok(ok)) => ok,
            other => panic!("WRITE at {offset}: {other:?}"),
        }
    }

    /// WRITEs of `chunk` bytes of [`pattern`] at the given chunk indices, all sent before any
    /// reply is read; every reply must be an UNSTABLE success.
    pub async fn write_pipelined(&mut self, fh: &NfsFh3, indices: &[u64], chunk: u64) {
        for &i in indices {
            let data = Bytes::from(pattern_range(i * chunk, chunk as usize));
            let args = Self::write_args(fh, i * chunk, data, StableHow::UNSTABLE);
            self.send_nfs(&args).await;
        }
        for _ in indices {
            match self.recv_nfs().await {
                (_, Res3::Write(NfsResult::Ok(ok))) => {
                    assert_eq!(ok.committed, StableHow::UNSTABLE);
                    assert_eq!(u64::from(ok.count), chunk);
                }
                (_, other) => panic!("WRITE: {other:?}"),
            }
        }
    }

    pub async fn commit(&mut self, fh: &NfsFh3, offset: u64, count: u32) -> CommitRes {
        match self
            .nfs(Args3::Commit(CommitArgs {
                file: fh.clone(),
                offset,
                count,
            }))
            .await
        {
            Res3::Commit(r) => r,
            other => panic!("COMMIT: {other:?}"),
        }
    }

    pub async fn read(&mut self, fh: &NfsFh3, offset: u64, count: u32) -> ReadResOk {
        match self
            .nfs(Args3::Read(ReadArgs {
                file: fh.clone(),
                offset,
                count,
            }))
            .await
        {
            Res3::Read(NfsResult::Ok(ok)) => ok,
            other => panic!("READ at {offset}: {other:?}"),
        }
    }

    /// The handle of `name` in `dir` (LOOKUP must succeed).
    pub async fn lookup(&mut self, dir: &NfsFh3, name: &str) -> NfsFh3 {
        match self
            .nfs(Args3::Lookup(LookupArgs {
                what: super::dirop(dir, name),
            }))
            .await
        {
            Res3::Lookup(NfsResult::Ok(ok)) => ok.object,
            other => panic!("LOOKUP {name}: {other:?}"),
        }
    }

    pub async fn getattr(&mut self, fh: &NfsFh3) -> Fattr3 {
        match self
            .nfs(Args3::Getattr(GetattrArgs { object: fh.clone() }))
            .await
        {
            Res3::Getattr(NfsResult::Ok(ok)) => ok.obj_attributes,
            other => panic!("GETATTR: {other:?}"),
        }
    }
}
