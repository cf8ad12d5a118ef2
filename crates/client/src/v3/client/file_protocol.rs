//! The NFSv3 [`Client`] as the file layer's protocol ([`FileProtocol`], `crate::proto`): READ,
//! WRITE and COMMIT started through the client's call path and their replies turned into the
//! version-neutral [`ReadReply`] and [`WriteReply`], so that [`File`](super::File) (reader,
//! readahead and write-behind) runs over v3 as over v4. Stability levels map one to one; a
//! file's [`Version`] is its size, mtime and ctime (v3 has no change attribute).

use super::Client;
use crate::error::NfsError;
use crate::proto::{
    CommitCall, FileContext, FileProtocol, ReadCall, ReadReply, Stability, Version, WriteCall,
    WriteReply,
};
use bytes::Bytes;
use sluice_xdr::nfs3::{Fattr3, NfsFh3, Nfstime3, StableHow};

impl FileProtocol for Client {
    type Handle = NfsFh3;
    type Attr = Fattr3;
    type Error = NfsError;

    async fn start_read(&self, fh: &NfsFh3, offset: u64, count: u32) -> ReadCall<Fattr3, NfsError> {
        let pending = Client::start_read(self, fh, offset, count).await;
        Box::pin(async move {
            let (res, rtt) = pending.wait_timed().await;
            let reply = res.map(|ok| {
                let n = (ok.count as usize).min(ok.data.len());
                ReadReply {
                    data: first_bytes(ok.data.into_chunks(), n),
                    eof: ok.eof,
                    attr: ok.file_attributes,
                }
            });
            (reply, rtt)
        })
    }

    async fn start_write(
        &self,
        fh: &NfsFh3,
        offset: u64,
        data: Bytes,
        stable: Stability,
    ) -> WriteCall<NfsError> {
        let stable = match stable {
            Stability::Unstable => StableHow::UNSTABLE,
            Stability::DataSync => StableHow::DATA_SYNC,
            Stability::FileSync => StableHow::FILE_SYNC,
        };
        let pending = Client::start_write(self, fh, offset, data, stable).await;
        Box::pin(async move {
            let (res, rtt) = pending.wait_timed().await;
            let reply = res.map(|ok| WriteReply {
                count: ok.count,
                // A value outside RFC 1813's three counts as UNSTABLE: the data stays in the
                // log until a COMMIT settles it, the safe reading.
                committed: match ok.committed {
                    StableHow::FILE_SYNC => Stability::FileSync,
                    StableHow::DATA_SYNC => Stability::DataSync,
                    _ => Stability::Unstable,
                },
                verifier: ok.verf,
            });
            (reply, rtt)
        })
    }

    async fn start_commit(&self, fh: &NfsFh3, offset: u64, count: u32) -> CommitCall<NfsError> {
        let pending = Client::start_commit(self, fh, offset, count).await;
        Box::pin(async move { pending.wait().await.map(|r| r.verf) })
    }

    async fn getattr(&self, fh: &NfsFh3) -> Result<Fattr3, NfsError> {
        Client::getattr(self, fh).await.map(|r| r.obj_attributes)
    }

    fn version(a: &Fattr3) -> Version {
        let ns = |t: Nfstime3| u64::from(t.seconds) * 1_000_000_000 + u64::from(t.nseconds);
        Version {
            size: a.size,
            mtime_ns: ns(a.mtime),
            change: ns(a.ctime),
        }
    }

    fn rsize(&self) -> u32 {
        self.inner.rsize
    }
    fn wsize(&self) -> u32 {
        self.inner.wsize
    }
    fn files(&self) -> &FileContext {
        &self.inner.files
    }
}

/// The first `n` bytes of `chunks` (a READ reply may carry more data than its count says).
fn first_bytes(chunks: Vec<Bytes>, mut n: usize) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(chunks.len());
    for c in chunks {
        if n == 0 {
            break;
        }
        let take = c.len().min(n);
        out.push(c.slice(..take));
        n -= take;
    }
    out
}
