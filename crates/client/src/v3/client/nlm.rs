//! Byte-range locks over NFSv3: NLM v4 (program 100021) calls to the server's lock manager,
//! what `fcntl` and `flock` on a v3 FUSE mount become (as `v4/lock.rs` is for v4).
//!
//! ```text
//!   lock    NLM4_LOCK   (block = false: a conflict is an answer, the mount polls)
//!   test    NLM4_TEST   (the holder comes back on NLM4_DENIED)
//!   unlock  NLM4_UNLOCK
//! ```
//!
//! The lock manager is found by GETPORT of NLM v4, asked first of the NFS server itself, on
//! the NFS connection (sluice's server answers PORTMAP on its NFS port; a server that does
//! not answers PROG_UNAVAIL), then of the portmapper at the URL's port (default 111); when
//! neither names it, the NFS connection's own port is used (sluice serves NLM there too).
//! The server itself comes first because the portmapper at 111 of the server's address may
//! be another server's: a sluice on its own port (`?nfsport=`) beside a kernel NFS server, or
//! beside another sluice that holds port 111. That portmapper names *its* lock manager, which
//! knows nothing of this server's file handles (it answered NLM4_STALE_FH: every lock failed
//! with EIO). The connection is made on the first lock and kept.
//!
//! The owner the server sees is (caller name, svid, oh): the caller name is this host's name,
//! the owner handle `oh` the caller's owner bytes, and `svid` a 32-bit digest of them (the
//! kernel puts a process id there; the server compares all three, so the digest only has to
//! be stable). Lengths: the neutral `u64::MAX` "to the end" is NLM's 0.
//!
//! A request the server drops gets no answer: knfsd and sluice drop an NLM LOCK or TEST while
//! they recall an NFSv4 delegation of its file, and expect the client to send it again, as
//! Linux's lockd does after its `nlm_timeout` (10 s). So the lock manager's connection waits
//! [`NLM_RESEND_WAIT`] for an answer, then resends on a new connection, and gives up only after
//! [`NLM_RESENDS`] of those, longer than a recall may last (the server revokes a delegation not
//! returned within a lease, 90 s by default).
//!
//! Not done here: the client's own NSM (a restart of the server is not noticed, so locks
//! are not reclaimed after it), and GRANTED callbacks (a waiting lock polls instead).

use super::{getport, raw_call, setup_config, Client};
use crate::neutral::LockConflict;
use crate::transport::RpcConfig;
use crate::NfsError;
use bytes::Bytes;
use sluice_rpc::client::CallTableConfig;
use sluice_xdr::nfs3::NfsFh3;
use sluice_xdr::nlm::{
    self, CallerName, Netobj, Nlm4Lock, Nlm4LockArgs, Nlm4Res, Nlm4Stats, Nlm4TestArgs,
    Nlm4TestRes, Nlm4TestRply, Nlm4UnlockArgs, NlmFh,
};
use sluice_xdr::portmap;
use std::net::SocketAddr;
use std::time::Duration;

/// How long a call to the lock manager waits for its answer before it is sent again (module
/// notes): shorter than Linux lockd's 10 s, because a dropped LOCK holds up an application's
/// `fcntl` and a resend costs one small call.
const NLM_RESEND_WAIT: Duration = Duration::from_secs(5);
/// Resends before a lock call fails: 24 × 5 s outlasts a recall that ends in a revocation at
/// the end of a 90 s lease.
const NLM_RESENDS: u32 = 24;

/// The lock manager connection's call settings: `base` with the resend policy above.
fn nlm_config(base: &RpcConfig) -> RpcConfig {
    RpcConfig {
        table: CallTableConfig {
            major_timeout: NLM_RESEND_WAIT,
            retrans: Some(NLM_RESENDS),
            ..base.table
        },
        ..base.clone()
    }
}

impl Client {
    /// NLM LOCK of `[offset, offset + length)` (`u64::MAX`: to the end) for `owner`:
    /// `Ok(None)` when granted, `Ok(Some(conflict))` when another owner holds the range
    /// (the holder is not named by LOCK; TEST names it).
    pub async fn nlm_lock(
        &self,
        fh: &NfsFh3,
        owner: &[u8],
        write: bool,
        offset: u64,
        length: u64,
    ) -> Result<Option<LockConflict>, NfsError> {
        let args = Nlm4LockArgs {
            cookie: Netobj::default(),
            block: false,
            exclusive: write,
            alock: self.alock(fh, owner, offset, length),
            reclaim: false,
            state: 0,
        };
        let r: Nlm4Res = self
            .nlm_call(nlm::proc_::LOCK, &args, sluice_xdr::Unpack::unpack)
            .await?;
        match r.stat {
            Nlm4Stats::GRANTED => Ok(None),
            Nlm4Stats::DENIED | Nlm4Stats::BLOCKED => Ok(Some(LockConflict {
                offset,
                length,
                write: true,
                owner: Bytes::new(),
            })),
            other => Err(nlm_error("LOCK", other)),
        }
    }

    /// NLM TEST: the conflicting lock, or `None`.
    pub async fn nlm_test(
        &self,
        fh: &NfsFh3,
        owner: &[u8],
        write: bool,
        offset: u64,
        length: u64,
    ) -> Result<Option<LockConflict>, NfsError> {
        let args = Nlm4TestArgs {
            cookie: Netobj::default(),
            exclusive: write,
            alock: self.alock(fh, owner, offset, length),
        };
        let r: Nlm4TestRes = self
            .nlm_call(nlm::proc_::TEST, &args, sluice_xdr::Unpack::unpack)
            .await?;
        match r.stat {
            Nlm4TestRply::Denied(h) => Ok(Some(LockConflict {
                offset: h.l_offset,
                length: if h.l_len == 0 { u64::MAX } else { h.l_len },
                write: h.exclusive,
                owner: h.oh.0,
            })),
            other if other.stat() == Nlm4Stats::GRANTED => Ok(None),
            other => Err(nlm_error("TEST", other.stat())),
        }
    }

    /// NLM UNLOCK (parts not held are no error).
    pub async fn nlm_unlock(
        &self,
        fh: &NfsFh3,
        owner: &[u8],
        offset: u64,
        length: u64,
    ) -> Result<(), NfsError> {
        let args = Nlm4UnlockArgs {
            cookie: Netobj::default(),
            alock: self.alock(fh, owner, offset, length),
        };
        let r: Nlm4Res = self
            .nlm_call(nlm::proc_::UNLOCK, &args, sluice_xdr::Unpack::unpack)
            .await?;
        match r.stat {
            Nlm4Stats::GRANTED => Ok(()),
            other => Err(nlm_error("UNLOCK", other)),
        }
    }

    fn alock(&self, fh: &NfsFh3, owner: &[u8], offset: u64, length: u64) -> Nlm4Lock {
        Nlm4Lock {
            caller_name: CallerName(host_name()),
            fh: NlmFh(fh.0.clone()),
            oh: Netobj(Bytes::copy_from_slice(
                &owner[..owner.len().min(nlm::MAXNETOBJ_SZ)],
            )),
            svid: svid_of(owner),
            l_offset: offset,
            l_len: if length == u64::MAX { 0 } else { length },
        }
    }

    async fn nlm_call<T>(
        &self,
        proc_: u32,
        args: &impl sluice_xdr::Pack,
        decode: impl FnOnce(&mut sluice_xdr::Reader<'_>) -> sluice_xdr::Result<T>,
    ) -> Result<T, NfsError> {
        let rpc = self
            .inner
            .nlm
            .get_or_try_init(|| self.nlm_connect())
            .await?;
        raw_call(
            rpc,
            &self.inner.cred,
            ("NLM4", nlm::PROGRAM, nlm::VERSION),
            proc_,
            args,
            &self.inner.stats,
            decode,
        )
        .await
    }

    /// The lock manager's connection (module notes).
    async fn nlm_connect(&self) -> Result<crate::transport::RpcClient, NfsError> {
        let nfs = self.inner.conns.first().peer_addr();
        let config = setup_config(&self.inner.options.rpc);
        let lock_config = nlm_config(&self.inner.options.rpc);
        let own = getport(
            self.inner.conns.first(),
            &self.inner.cred,
            nlm::PROGRAM,
            nlm::VERSION,
            &self.inner.stats,
        );
        if let Ok(Ok(port)) = tokio::time::timeout(super::PORTMAP_WAIT, own).await {
            return crate::transport::RpcClient::connect(
                SocketAddr::new(nfs.ip(), port),
                lock_config,
            )
            .await
            .map_err(|e| NfsError::Connect(format!("cannot reach the lock manager: {e}")));
        }
        let pm_addr = SocketAddr::new(nfs.ip(), self.inner.url.port.unwrap_or(portmap::PORT));
        let asked = async {
            let pm = crate::transport::RpcClient::connect(pm_addr, config.clone())
                .await
                .map_err(|e| NfsError::Connect(e.to_string()))?;
            getport(
                &pm,
                &self.inner.cred,
                nlm::PROGRAM,
                nlm::VERSION,
                &self.inner.stats,
            )
            .await
        };
        let port = match tokio::time::timeout(super::PORTMAP_WAIT, asked).await {
            Ok(Ok(p)) => p,
            _ => nfs.port(),
        };
        crate::transport::RpcClient::connect(SocketAddr::new(nfs.ip(), port), lock_config)
            .await
            .map_err(|e| NfsError::Connect(format!("cannot reach the lock manager: {e}")))
    }
}

/// This host's name, the NLM caller name (what the server keys the host's locks by).
fn host_name() -> Bytes {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let name = if name.is_empty() {
        "sluice-client".to_string()
    } else {
        name
    };
    let mut b = name.into_bytes();
    b.truncate(nlm::LM_MAXSTRLEN);
    Bytes::from(b)
}

/// A stable 32-bit digest of the owner bytes (FNV-1a), for `svid`.
fn svid_of(owner: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in owner {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

fn nlm_error(what: &str, stat: Nlm4Stats) -> NfsError {
    NfsError::Other(format!("NLM {what}: {}", stat.name()))
}
